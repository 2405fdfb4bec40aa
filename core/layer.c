/* core/layer.c — the life of one layer and one optimizer as glia/layer.h and glia/optimizer.h promise it:
 * attributes and state, create and prepare, destroy, declared parameters and buffers, drawn initial values.
 * Not the graph (core/node.c) and not the arenas (core/params.c). */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "parts.h"

static glia_status add_entry(struct glia_param **arr, int *n, const char *name, const struct glia_shape *shape,
                             struct glia_param_init init, int *index)
{
    struct glia_param *p = realloc(*arr, (size_t)(*n + 1) * sizeof *p);
    if (!p) return GLIA_ENOMEM;
    *arr = p;
    struct glia_param *np = &p[*n];
    memset(np, 0, sizeof *np);
    if (!(np->name = glia__strdup(name))) return GLIA_ENOMEM;
    np->shape = *shape;
    np->init = init;
    np->decay = true;
    np->grad_unset = true;
    if (index) *index = *n;
    (*n)++;
    return GLIA_OK;
}

/* Undoes a successful type create: the type's destroy, then its attrs. */
static void type_release(struct glia_layer *l)
{
    if (l->type->destroy) l->type->destroy(l);
    free(l->attrs);
    l->attrs = NULL;
}

static void params_release(struct glia_layer *l)
{
    for (int p = 0; p < l->n_params; p++) {
        free((char *)l->params[p].name);
        glia_tensor_release(l->params[p].value);
        glia_tensor_release(l->params[p].grad);
    }
    free(l->params);
    for (int p = 0; p < l->n_buffers; p++) {
        free((char *)l->buffers[p].name);
        glia_tensor_release(l->buffers[p].value);
    }
    free(l->buffers);
    l->params = l->buffers = NULL;
    l->n_params = l->n_buffers = 0;
}

void glia__layer_release(struct glia_layer *l, bool created)
{
    if (created) {
        if (l->kernel->destroy) l->kernel->destroy(l);
        free(l->state);
        l->state = NULL;
        type_release(l);
    }
    params_release(l);
}

glia_status glia__layer_create(struct glia_layer *l, struct glia_section *s, const struct glia_shape *in, int n_in,
                               bool *created)
{
    *created = false;
    l->attrs = l->state = NULL;
    if (l->type->attrs_size && !(l->attrs = calloc(1, l->type->attrs_size)))
        return glia_section_error(s, NULL, GLIA_ENOMEM, "out of memory for the attributes of layer type '%s'",
                                  l->type->name);
    glia__section_misread_clear(s);
    glia_status st = l->type->create(l, s, in, n_in);
    glia_status mis = glia__layer_misread(l, s);  /* the wrong read, not what followed from it, is the error */
    if (!st && mis) type_release(l);              /* destroy was owed: it runs now */
    if (st) {  /* no destroy after a failed create (layer.h) */
        free(l->attrs);
        l->attrs = NULL;
    }
    if (st || mis) {
        params_release(l);
        return mis ? mis : st;
    }
    if (l->kernel->state_size && !(l->state = calloc(1, l->kernel->state_size)))
        st = glia_section_error(s, NULL, GLIA_ENOMEM, "out of memory for the state of kernel '%s' of layer type '%s'",
                                l->kernel->impl, l->type->name);
    if (!st && l->kernel->prepare) st = l->kernel->prepare(l, in, n_in);
    if (st) {  /* no kernel destroy after a failed prepare */
        free(l->state);
        l->state = NULL;
        type_release(l);
        params_release(l);
        return st;
    }
    *created = true;
    return GLIA_OK;
}

glia_status glia__optimizer_create(struct glia_optimizer *o, const struct glia_optimizer_type *type,
                                   const struct glia_optimizer_kernel *kernel, struct glia_context *ctx,
                                   struct glia_section *s)
{
    *o = (struct glia_optimizer){.type = type, .kernel = kernel, .ctx = ctx};
    if (type->attrs_size && !(o->attrs = calloc(1, type->attrs_size)))
        return glia_section_error(s, NULL, GLIA_ENOMEM, "out of memory for the settings of optimizer '%s'", type->name);
    glia__section_misread_clear(s);
    glia_status st = type->create(o, s);
    glia_status mis = glia__optimizer_misread(o, s);
    if (!st && mis && type->destroy) type->destroy(o);
    if (st || mis) {
        free(o->attrs);
        *o = (struct glia_optimizer){0};  /* no destroy after a failed create (optimizer.h) */
    }
    return mis ? mis : st;
}

void glia__optimizer_release(struct glia_optimizer *o)
{
    if (o->type && o->type->destroy) o->type->destroy(o);
    free(o->attrs);
    *o = (struct glia_optimizer){0};
}

glia_status glia_layer_add_param(struct glia_layer *l, const char *name, const struct glia_shape *shape,
                                 struct glia_param_init init, int *index)
{
    return add_entry(&l->params, &l->n_params, name, shape, init, index);
}

glia_status glia_layer_add_buffer(struct glia_layer *l, const char *name, const struct glia_shape *shape,
                                  struct glia_param_init init, int *index)
{
    return add_entry(&l->buffers, &l->n_buffers, name, shape, init, index);
}

void glia__init_values(float *dst, int64_t n, struct glia_param_init init, uint64_t seed)
{
    struct glia_rng r;
    glia__rng_seed(&r, seed);
    for (int64_t j = 0; j < n; j++) {
        double v = 0;
        switch (init.kind) {
        case GLIA_INIT_ZEROS: v = 0; break;
        case GLIA_INIT_CONST: v = init.a; break;
        case GLIA_INIT_UNIFORM: v = (2.0 * glia__rng_uniform(&r) - 1.0) * init.a; break;
        case GLIA_INIT_NORMAL: v = glia__rng_normal(&r) * init.a; break;
        }
        dst[j] = (float)v;
    }
}

void glia__init_param(const struct glia_layer *l, int p, float *dst, uint64_t seed)
{
    glia__init_values(dst, glia_shape_numel(&l->params[p].shape), l->params[p].init, seed);
    if (l->type->init_param) l->type->init_param(l, p, dst);
}
