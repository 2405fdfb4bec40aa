/* core/guard.c — guard values around the tensors a layer call writes (the gradient checker; [runtime] debug_checks):
 * filled before the call and compared after it through the backend's copy slot, so any device works the same way.
 * Not a memory checker: it sees writes that land in the GLIA__GUARD floats on either side of a tensor, nothing else. */
#include <string.h>
#include "internal.h"

/* A quiet NaN that no arithmetic produces (a layer that reads past its input's end reads NaN, and a kernel that writes
 * a NaN there writes another one). */
#define GUARD_BITS 0x7fc1a5e5u

/* Where t's guard floats start: before its first element, or after its last (a view's elements fill numel floats
 * from data in either memory format). */
static char *guard_at(const struct glia__guarded *g, bool after)
{
    char *d = g->t->data;
    return after ? d + glia_tensor_nbytes(g->t) : d - GLIA__GUARD * sizeof(float);
}

static glia_status put(const struct glia__guarded *g, bool after, const uint32_t *host)
{
    struct glia_backend *b = glia_tensor_backend(g->t);
    return glia_backend_copy(b, guard_at(g, after), false, host, true, GLIA__GUARD * sizeof *host);
}

glia_status glia__guard_fill(const struct glia__guarded *g, int n)
{
    uint32_t bits[GLIA__GUARD];
    for (int i = 0; i < GLIA__GUARD; i++) bits[i] = GUARD_BITS;
    glia_status st = GLIA_OK;
    for (int k = 0; k < n && !st; k++) {
        st = put(&g[k], false, bits);
        if (!st) st = put(&g[k], true, bits);
    }
    return st;
}

glia_status glia__guard_clear(const struct glia__guarded *g, int n)
{
    uint32_t zero[GLIA__GUARD] = {0};
    glia_status st = GLIA_OK;
    for (int k = 0; k < n && !st; k++) {
        st = put(&g[k], false, zero);
        if (!st) st = put(&g[k], true, zero);
    }
    return st;
}

/* How many of t's guard floats on one side a write reached: past the end, the last changed one counts from the end;
 * before the start, the first changed one counts from the start. 0: none changed. */
static glia_status reached(const struct glia__guarded *g, bool after, int *n)
{
    uint32_t bits[GLIA__GUARD];
    struct glia_backend *b = glia_tensor_backend(g->t);
    glia_status st = glia_backend_copy(b, bits, true, guard_at(g, after), false, sizeof bits);
    *n = 0;
    for (int i = 0; i < GLIA__GUARD && !st; i++)
        if (bits[i] != GUARD_BITS) {
            *n = after ? i + 1 : GLIA__GUARD - i;
            if (!after) break;
        }
    return st;
}

glia_status glia__guard_check(const struct glia_layer *l, const struct glia_section *s, const char *call,
                              const struct glia__guarded *g, int n)
{
    /* every end first: where two guards meet (a layer's weight and bias gradients), a write past the first tensor's
     * end is that tensor's, not one before the second's start */
    for (int side = 1; side >= 0; side--)
        for (int k = 0; k < n; k++) {
            int hit;
            glia_status st = reached(&g[k], side == 1, &hit);
            if (st) return st;
            if (!hit) continue;
            char shape[96];
            glia_shape_str(&g[k].t->shape, shape, sizeof shape);
            return glia_section_error(s, NULL, GLIA_EPLUGIN, "%s wrote %d%s float%s %s %s (layer '%s', tensor %s, %s)",
                                      call, hit, hit == GLIA__GUARD ? " or more" : "", hit == 1 ? "" : "s",
                                      side ? "past the end of" : "before the start of", g[k].role, l->name, g[k].name,
                                      shape);
        }
    return GLIA_OK;
}

/* Appends t to g[*n] (a tensor appears once, however many inputs share it). */
static void add(struct glia__guarded *g, int *n, struct glia_tensor *t, const char *role, const char *name)
{
    if (!t) return;
    for (int k = 0; k < *n; k++)
        if (g[k].t == t) return;
    g[*n].t = t;
    snprintf(g[*n].role, sizeof g[*n].role, "%s", role);
    snprintf(g[*n].name, sizeof g[*n].name, "%s", name);
    ++*n;
}

int glia__guard_forward(const struct glia_layer *l, struct glia_tensor *out, struct glia__guarded *g)
{
    int n = 0;
    char role[GLIA__GUARD_TEXT];
    add(g, &n, out, "its output", "out");
    for (int p = 0; p < l->n_buffers; p++) {
        snprintf(role, sizeof role, "its buffer '%s'", l->buffers[p].name);
        add(g, &n, l->buffers[p].value, role, l->buffers[p].name);
    }
    return n;
}

int glia__guard_backward(const struct glia_layer *l, struct glia_tensor *const *din, int n_in, struct glia__guarded *g)
{
    int n = 0;
    char role[GLIA__GUARD_TEXT], name[GLIA__GUARD_TEXT];
    for (int k = 0; k < n_in; k++) {
        if (n_in == 1) snprintf(name, sizeof name, "dx");
        else snprintf(name, sizeof name, "dx%d", k);
        add(g, &n, din[k], n_in == 1 ? "its input gradient" : "one of its input gradients", name);
    }
    for (int p = 0; p < l->n_params; p++) {
        snprintf(role, sizeof role, "the gradient of its parameter '%s'", l->params[p].name);
        snprintf(name, sizeof name, "%s.grad", l->params[p].name);
        add(g, &n, l->params[p].grad, role, name);
    }
    return n;
}
