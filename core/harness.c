/* core/harness.c — standalone layers and optimizers for tests and plugin authors: the finite-
 * difference gradient checker with its gradient-contract checks, and glia_optimizer_new.
 * Not used by training: the model builds its layers in core/model.c. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "parts.h"

/* ---- optimizers ---- */

struct owned_optimizer {
    struct glia_optimizer o;   /* first: the public pointer */
    struct glia_config *cfg;
};

glia_status glia_optimizer_new(struct glia_context *ctx, const char *name, const char *ini,
                               struct glia_optimizer **out)
{
    return glia_optimizer_new_for(ctx, name, ini, GLIA_DEVICE_CPU, out);
}

glia_status glia_optimizer_new_for(struct glia_context *ctx, const char *name, const char *ini,
                                   enum glia_device_type device, struct glia_optimizer **out)
{
    struct owned_optimizer *w = calloc(1, sizeof *w);
    if (!w) return GLIA_ENOMEM;
    glia_status st = glia_config_parse_string(ctx, "optimizer.ini", ini ? ini : "", &w->cfg);
    const struct glia_optimizer_type *ot = NULL;
    const struct glia_optimizer_kernel *ok = NULL;
    if (!st && !glia__find_optimizer_type(ctx, name)) st = glia_plugin_load(ctx, name);
    if (!st && !(ot = glia__find_optimizer_type(ctx, name)))
        st = glia_error(ctx, GLIA_ENOTFOUND, "no optimizer named '%s' is loaded (its plugin registers none)", name);
    if (!st && !(ok = glia__find_optimizer_kernel(ctx, name, (int)device)))
        st = glia_error(ctx, GLIA_ENOTFOUND, "optimizer '%s' has no kernel for device type %s", name,
                        device == GLIA_DEVICE_CUDA ? "cuda" : "cpu");
    struct glia_section *s = st ? NULL : glia__config_section(w->cfg, "optimizer");
    if (!st && !s) st = GLIA_ENOMEM;
    if (!st) {
        const struct glia_key *sch[] = {ot->keys};
        st = glia__section_validate(s, sch, 1);
    }
    if (!st) st = glia__optimizer_create(&w->o, ot, ok, ctx, s);
    if (st) {
        glia_optimizer_free(&w->o);
        return st;
    }
    *out = &w->o;
    return GLIA_OK;
}

void glia_optimizer_free(struct glia_optimizer *o)
{
    if (!o) return;
    struct owned_optimizer *w = (struct owned_optimizer *)o;
    glia__optimizer_release(o);
    glia_config_free(w->cfg);
    free(w);
}

/* ---- gradient checker ---- */

struct gc {
    struct glia_context *ctx;
    struct glia_config *cfg;
    struct glia_layer l;
    bool created;
    int n_in;
    struct glia_tensor *x[GLIA__MAX_INPUTS], *dx[GLIA__MAX_INPUTS], *out, *dout, *r, *labels;
    struct glia_tensor *saved;    /* the kernel's saved memory (glia_kernel.saved_size), or NULL */
    bool is_loss;
    struct glia__guarded *guard;  /* room for what one call writes (owned) */
};

static void gc_free(struct gc *g)
{
    glia__layer_release(&g->l, g->created);
    for (int k = 0; k < GLIA__MAX_INPUTS; k++) {
        glia_tensor_release(g->x[k]);
        glia_tensor_release(g->dx[k]);
    }
    glia_tensor_release(g->out);
    glia_tensor_release(g->dout);
    glia_tensor_release(g->r);
    glia_tensor_release(g->labels);
    glia_tensor_release(g->saved);
    glia_config_free(g->cfg);
    free(g->guard);
}

/* *t = room for a kernel's saved bytes on b (NULL for 0) */
static glia_status saved_new(struct glia_backend *b, size_t bytes, struct glia_tensor **t)
{
    *t = NULL;
    if (!bytes) return GLIA_OK;
    struct glia_shape s = glia_shape_make(1, (int64_t[]){(int64_t)((bytes + sizeof(float) - 1) / sizeof(float))});
    return glia_tensor_new(b, GLIA_F32, &s, t);
}

static void fill_normal(struct glia_tensor *t, struct glia_rng *rng, double scale)
{
    float *d = glia_tensor_f32(t);
    for (int64_t i = 0; i < glia_tensor_numel(t); i++) d[i] = (float)(glia__rng_normal(rng) * scale);
}

static void fill_value(struct glia_tensor *t, float v)
{
    float *d = glia_tensor_f32(t);
    for (int64_t i = 0; i < glia_tensor_numel(t); i++) d[i] = v;
}

/* A new tensor of element type dt and shape s in format f (channels_last applies to 4-D shapes only). */
/* The labels of a loss layer whose logits have shape x: x without its last dimension ((N) for (N, classes), (N, T)
 * for (N, T, classes)), and *classes that last dimension (at least 1). */
static struct glia_shape label_shape(const struct glia_shape *x, int64_t *classes)
{
    struct glia_shape ls = *x;
    *classes = x->ndim > 1 && x->dim[x->ndim - 1] > 0 ? x->dim[x->ndim - 1] : 1;
    if (ls.ndim > 1) ls.ndim--;
    return ls;
}

static glia_status new_typed(struct glia_backend *b, enum glia_dtype dt, const struct glia_shape *s,
                             enum glia_memory_format f, struct glia_tensor **out)
{
    if (f == GLIA_CONTIGUOUS || s->ndim != 4) return glia_tensor_new(b, dt, s, out);
    struct glia_shape flat = glia_shape_make(1, (int64_t[]){glia_shape_numel(s)});
    struct glia_tensor *t;
    glia_status st = glia_tensor_new(b, dt, &flat, &t);
    if (st) return st;
    st = glia_tensor_view_as(t, 0, s, f, out);
    glia_tensor_release(t);
    return st;
}

/* A new f32 tensor of shape s in format f. */
static glia_status new_as(struct glia_backend *b, const struct glia_shape *s, enum glia_memory_format f,
                          struct glia_tensor **out)
{
    return new_typed(b, GLIA_F32, s, f, out);
}

/* A new f32 tensor like new_as, with GLIA__GUARD floats of its own on each side for guard values (what a layer
 * writes: glia__guard_*). */
static glia_status guarded_new(struct glia_backend *b, const struct glia_shape *s, enum glia_memory_format f,
                               struct glia_tensor **out)
{
    struct glia_shape flat = glia_shape_make(1, (int64_t[]){glia_shape_numel(s) + 2 * GLIA__GUARD});
    struct glia_tensor *t;
    glia_status st = glia_tensor_new(b, GLIA_F32, &flat, &t);
    if (st) return st;
    st = glia_tensor_view_as(t, GLIA__GUARD, s, s->ndim == 4 ? f : GLIA_CONTIGUOUS, out);
    glia_tensor_release(t);
    return st;
}

/* Inputs whose bit is set in int_inputs are i32 ids drawn uniformly from [0, int_high), without a gradient
 * tensor (dx NULL); the others N(0,1) floats in format fmt. */
/* The type and kernel of section s's layer for device dev (loading the type's plugin when the type is not registered
 * yet) into l: the kernel `impl =` names, else the first for dev's type. */
static glia_status run_resolve(struct glia_context *ctx, const struct glia_section *s, struct glia_device dev,
                               struct glia_layer *l)
{
    const struct glia__entry *te = glia__section_entry(s, "type");
    if (!te) return glia_section_error(s, NULL, GLIA_ECONFIG, "missing type");
    const struct glia__entry *ie = glia__section_entry(s, "impl");
    const char *impl = ie && strcmp(ie->value, "auto") ? ie->value : NULL;
    if (!glia__find_type(ctx, te->value)) {
        glia_status ls = glia_plugin_load(ctx, te->value);
        if (ls && ls != GLIA_ENOTFOUND) return ls;
        if (!glia__find_type(ctx, te->value)) {
            char why[GLIA__ERRMSG_MAX];
            snprintf(why, sizeof why, "%s", ls ? glia_context_error(ctx) : "its plugin registers no such type");
            return glia_section_error(s, "type", GLIA_ECONFIG, "unknown layer type '%s' (%s)", te->value, why);
        }
    }
    char avail[256], name[32];
    glia__layer_impls(ctx, te->value, avail, sizeof avail);
    glia_device_str(dev, name, sizeof name);
    const struct glia_kernel *k = impl ? glia__find_kernel(ctx, te->value, impl) : glia__find_kernel_for(ctx, te->value, dev.type);
    if (!k && impl)
        return glia_section_error(s, "impl", GLIA_ECONFIG, "no impl '%s' of layer type '%s' (available: %s)", impl,
                                  te->value, avail[0] ? avail : "none");
    if (!k)
        return glia_section_error(s, "type", GLIA_ECONFIG, "layer type '%s' has no impl for device %s (available: %s)",
                                  te->value, name, avail[0] ? avail : "none");
    if (k->device_type != dev.type)
        return glia_section_error(s, "impl", GLIA_ECONFIG, "impl '%s' of '%s' does not run on device %s", impl,
                                  te->value, name);
    l->type = glia__find_type(ctx, te->value);
    l->kernel = k;
    return GLIA_OK;
}

static glia_status gc_setup(struct gc *g, const char *ini, const struct glia_shape *in, int n_in, uint64_t seed,
                            enum glia_memory_format fmt, uint32_t int_inputs, int32_t int_high)
{
    struct glia_context *ctx = g->ctx;
    struct glia_backend *b;
    glia_status st = glia_config_parse_string(ctx, "gradcheck.ini", ini, &g->cfg);
    if (st) return st;
    if (g->cfg->n_sections < 1) return glia_error(ctx, GLIA_EINVAL, "gradcheck: the INI text has no layer section");
    if (n_in < 1 || n_in > GLIA__MAX_INPUTS) return glia_error(ctx, GLIA_EINVAL, "gradcheck: 1..%d inputs", GLIA__MAX_INPUTS);
    if (int_inputs >> n_in)
        return glia_error(ctx, GLIA_EINVAL, "gradcheck: int_inputs 0x%x names an input beyond the %d given", int_inputs, n_in);
    if (int_inputs && int_high <= 0)
        return glia_error(ctx, GLIA_EINVAL, "gradcheck: int_inputs needs int_high > 0, got %d", (int)int_high);
    struct glia_section *s = g->cfg->sections[0];
    struct glia_layer rl = {0};
    if ((st = run_resolve(ctx, s, (struct glia_device){GLIA_DEVICE_CPU, 0}, &rl))) return st;
    const struct glia_key *sch[] = {glia__core_schema("layer"), rl.type->keys};
    if ((st = glia__section_validate(s, sch, 2))) return st;
    if ((st = glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CPU, 0}, &b))) return st;
    g->l = (struct glia_layer){.name = s->name, .type = rl.type, .kernel = rl.kernel, .ctx = ctx, .backend = b};
    g->n_in = n_in;
    g->is_loss = rl.type->flags & GLIA_TYPE_LOSS;
    if (fmt != GLIA_CONTIGUOUS && !(rl.kernel->flags & GLIA_KERNEL_CHANNELS_LAST))
        return glia_error(ctx, GLIA_EUNSUPPORTED, "gradcheck: kernel '%s' of layer type '%s' does not take %s tensors",
                          rl.kernel->impl, rl.type->name, glia_memory_format_name(fmt));
    if ((st = glia__layer_create(&g->l, s, in, n_in, &g->created))) return st;
    struct glia_shape os;
    if ((st = rl.type->infer_shape(&g->l, in, n_in, &os))) return st;
    struct glia_rng rng;
    glia__rng_seed(&rng, seed);
    for (int k = 0; k < n_in && !st; k++) {
        if ((int_inputs >> k) & 1u) {  /* ids: no gradient tensor, never perturbed */
            if (!(st = glia_tensor_new(b, GLIA_I32, &in[k], &g->x[k]))) {
                int32_t *v = glia_tensor_i32(g->x[k]);
                for (int64_t i = 0; i < glia_shape_numel(&in[k]); i++)
                    v[i] = (int32_t)(glia__rng_next(&rng) % (uint64_t)int_high);
            }
            continue;
        }
        st = new_as(b, &in[k], fmt, &g->x[k]);
        if (!st) st = guarded_new(b, &in[k], fmt, &g->dx[k]);
        if (!st) fill_normal(g->x[k], &rng, 1.0);
    }
    for (int p = 0; p < g->l.n_params && !st; p++) {
        struct glia_param *pa = &g->l.params[p];
        st = glia_tensor_new(b, GLIA_F32, &pa->shape, &pa->value);
        if (!st) st = guarded_new(b, &pa->shape, GLIA_CONTIGUOUS, &pa->grad);
        if (!st) fill_normal(pa->value, &rng, 0.5);
    }
    for (int p = 0; p < g->l.n_buffers && !st; p++) {
        struct glia_param *bu = &g->l.buffers[p];
        st = guarded_new(b, &bu->shape, GLIA_CONTIGUOUS, &bu->value);
        if (!st) glia__init_values(bu->value->data, glia_shape_numel(&bu->shape), bu->init, 0);
    }
    g->guard = st ? NULL : malloc(sizeof *g->guard * (size_t)(1 + g->l.n_buffers + n_in + g->l.n_params));
    if (!st && !g->guard) st = GLIA_ENOMEM;
    if (!st) st = guarded_new(b, &os, fmt, &g->out);
    if (!st) st = new_as(b, &os, fmt, &g->dout);
    if (!st) st = new_as(b, &os, fmt, &g->r);
    if (!st) st = saved_new(b, glia_kernel_saved_size(g->l.kernel, &g->l, in, n_in, GLIA_F32), &g->saved);
    if (st) return st;
    fill_normal(g->r, &rng, 1.0);
    if (g->is_loss) {
        int64_t classes;
        struct glia_shape ls = label_shape(&in[0], &classes);
        if ((st = glia_tensor_new(b, GLIA_I32, &ls, &g->labels))) return st;
        int32_t *y = glia_tensor_i32(g->labels);
        for (int64_t i = 0; i < glia_shape_numel(&ls); i++) y[i] = (int32_t)(glia__rng_next(&rng) % (uint64_t)classes);
    }
    memcpy(glia_tensor_f32(g->dout), glia_tensor_f32(g->r), glia_tensor_nbytes(g->r));
    return GLIA_OK;
}

/* A stand-in for t (shape, format, backend) whose every byte is 0xff (f32 NaN): what a backward that its layer's
 * GLIA_KERNEL_BWD_NO_INPUT / _NO_OUTPUT flags say does not read the values of gets instead of t, so that a wrong flag
 * makes its gradients wrong. */
static glia_status poisoned_like(const struct glia_tensor *t, struct glia_tensor **out)
{
    size_t n = glia_tensor_nbytes(t);
    void *h = malloc(n ? n : 1);
    if (!h) return GLIA_ENOMEM;
    memset(h, 0xff, n);
    glia_status st = t->dtype == GLIA_F32 ? new_as(glia_tensor_backend(t), &t->shape, glia_tensor_memory_format(t), out)
                                          : glia_tensor_new(glia_tensor_backend(t), t->dtype, &t->shape, out);
    if (!st) st = glia_tensor_from_host(*out, h, n);
    free(h);
    return st;
}

/* Runs l's backward on a with NaN stand-ins for the inputs and the output whose values its flags say it does not
 * read. */
static glia_status flagged_backward(struct glia_layer *l, struct glia_bwd a)
{
    uint32_t f = glia_layer_kernel_flags(l);
    struct glia_tensor *sub[GLIA__MAX_INPUTS + 1] = {0};
    const struct glia_tensor *in[GLIA__MAX_INPUTS];
    glia_status st = GLIA_OK;
    for (int k = 0; k < a.n_in && k < GLIA__MAX_INPUTS; k++) {
        in[k] = a.in[k];
        if ((f & GLIA_KERNEL_BWD_NO_INPUT) && !st && !(st = poisoned_like(a.in[k], &sub[k]))) in[k] = sub[k];
    }
    if ((f & GLIA_KERNEL_BWD_NO_OUTPUT) && !st && !(st = poisoned_like(a.out, &sub[GLIA__MAX_INPUTS])))
        a.out = sub[GLIA__MAX_INPUTS];
    a.in = in;
    if (!st) st = l->kernel->backward(l, &a);
    if (!st) st = glia_backend_sync(l->backend);  /* the stand-ins are read before they go */
    for (int k = 0; k <= GLIA__MAX_INPUTS; k++) glia_tensor_release(sub[k]);
    return st;
}

/* After a call of the layer (status st) between guard values around the first n of g->guard: the error of a write
 * that reached them, else st. */
static glia_status gc_guard_check(struct gc *g, const char *call, int n, glia_status st)
{
    glia_status gs = glia__guard_check(&g->l, g->cfg->sections[0], call, g->guard, n);
    return gs ? gs : st;
}

/* L = sum(out * r) after a training-mode forward. */
static glia_status gc_loss(struct gc *g, double *L)
{
    const struct glia_tensor *in[GLIA__MAX_INPUTS];
    for (int k = 0; k < g->n_in; k++) in[k] = g->x[k];
    struct glia_fwd a = {in, g->n_in, g->out, g->labels, true, glia_seed(1234, 0), false, 1234, NULL, false, 0, NULL, NULL,
                         g->saved ? g->saved->data : NULL, NULL, false, NULL, NULL};
    int n = glia__guard_forward(&g->l, g->out, g->guard);
    glia_status st = glia__guard_fill(g->guard, n);
    if (!st) st = g->l.kernel->forward(&g->l, &a);
    st = gc_guard_check(g, "forward", n, st);
    if (st) return st;
    const float *o = glia_tensor_f32(g->out), *r = glia_tensor_f32(g->r);
    double s = 0;
    for (int64_t i = 0; i < glia_tensor_numel(g->out); i++) s += (double)o[i] * r[i];
    *L = s;
    return GLIA_OK;
}

static glia_status gc_backward(struct gc *g, bool accumulate)
{
    double L;
    glia_status st = gc_loss(g, &L);  /* forward again: backward may use what it kept */
    if (st) return st;
    const struct glia_tensor *in[GLIA__MAX_INPUTS];
    bool acc[GLIA__MAX_INPUTS];
    for (int k = 0; k < g->n_in; k++) {
        in[k] = g->x[k];
        acc[k] = accumulate;
    }
    struct glia_bwd a = {in, g->n_in, g->out, g->dout, g->dx, acc, g->labels, g->saved ? g->saved->data : NULL, NULL, NULL, false};
    int n = glia__guard_backward(&g->l, g->dx, g->n_in, g->guard);
    if ((st = glia__guard_fill(g->guard, n))) return st;
    return gc_guard_check(g, "backward", n, flagged_backward(&g->l, a));
}

struct cmp {
    double tol;
    struct glia_gradcheck_report *rep;
    bool failed;
};

static void record(struct cmp *c, double analytic, double numeric, const char *what, int64_t idx)
{
    double err = fabs(analytic - numeric) / fmax(1.0, fmax(fabs(analytic), fabs(numeric)));
    if (!(err <= c->rep->max_err) || isnan(err)) {
        c->rep->max_err = isnan(err) ? INFINITY : err;
        snprintf(c->rep->worst, sizeof c->rep->worst, "%s [%lld]: analytic %.6g, numeric %.6g", what,
                 (long long)idx, analytic, numeric);
    }
    if (!(err <= c->tol)) c->failed = true;
    c->rep->n_checked++;
}

/* Compare analytic gradient ga of tensor t with central differences. */
static glia_status fd_check(struct gc *g, struct glia_tensor *t, const float *ga, const char *what, struct cmp *c)
{
    const double eps = 1e-3;
    float *d = glia_tensor_f32(t);
    for (int64_t i = 0; i < glia_tensor_numel(t); i++) {
        float keep = d[i];
        double lp, lm, l0;
        glia_status st;
        d[i] = keep + (float)eps;
        if ((st = gc_loss(g, &lp))) return st;
        d[i] = keep - (float)eps;
        if ((st = gc_loss(g, &lm))) return st;
        d[i] = keep;
        if ((st = gc_loss(g, &l0))) return st;
        double h = ((double)(keep + (float)eps) - (double)(keep - (float)eps));
        double num = (lp - lm) / h;
        if (fabs(lp - 2 * l0 + lm) / eps > 5 * c->tol * fmax(1.0, fabs(num))) {
            c->rep->n_skipped++;  /* a kink (ReLU at 0, max ties): not differentiable here */
            continue;
        }
        record(c, ga[i], num, what, i);
    }
    return GLIA_OK;
}

static float *snapshot(const struct glia_tensor *t)
{
    float *s = malloc(glia_tensor_nbytes(t) ? glia_tensor_nbytes(t) : 1);
    if (s) memcpy(s, glia_tensor_f32(t), glia_tensor_nbytes(t));
    return s;
}

/* After an accumulating backward over `base`, t must hold base + ga. */
static void contract_check(const struct glia_tensor *t, const float *ga, float base, const char *what,
                           struct glia_context *ctx, bool *bad)
{
    const float *d = glia_tensor_f32(t);
    for (int64_t i = 0; i < glia_tensor_numel(t) && !*bad; i++) {
        float want = base + ga[i];
        if (!(fabsf(d[i] - want) <= 1e-4f * fmaxf(1.0f, fabsf(want)))) {
            glia_error(ctx, GLIA_ENUMERIC, "gradient contract: %s [%lld] should accumulate to %g, got %g", what,
                       (long long)i, want, d[i]);
            *bad = true;
        }
    }
}

glia_status glia_layer_gradcheck(struct glia_context *ctx, const char *ini, const struct glia_shape *in,
                                 int n_in, uint64_t seed, double tol, struct glia_gradcheck_report *report)
{
    return glia_layer_gradcheck_ex(ctx, ini, in, n_in, NULL, seed, tol, report);
}

glia_status glia_layer_gradcheck_ex(struct glia_context *ctx, const char *ini, const struct glia_shape *in,
                                    int n_in, const struct glia_gradcheck_options *opt, uint64_t seed,
                                    double tol, struct glia_gradcheck_report *report)
{
    enum glia_memory_format fmt = GLIA_CONTIGUOUS;
    uint32_t int_inputs = 0;
    int32_t int_high = 0;
    if (opt && opt->struct_size >= offsetof(struct glia_gradcheck_options, memory_format) + sizeof opt->memory_format)
        fmt = opt->memory_format;
    if (opt && opt->struct_size >= offsetof(struct glia_gradcheck_options, int_high) + sizeof opt->int_high) {
        int_inputs = opt->int_inputs;
        int_high = opt->int_high;
    }
    struct glia_gradcheck_report dummy;
    struct glia_gradcheck_report *rep = report ? report : &dummy;
    memset(rep, 0, sizeof *rep);
    struct gc g = {.ctx = ctx};
    float *ga_in[GLIA__MAX_INPUTS] = {0}, *ga_p[64] = {0};
    glia_status st = gc_setup(&g, ini, in, n_in, seed, fmt, int_inputs, int_high);
    if (!st && !g.l.kernel->backward) st = glia_error(ctx, GLIA_EUNSUPPORTED, "gradcheck: layer has no backward");
    if (!st && g.l.n_params > 64) st = glia_error(ctx, GLIA_EUNSUPPORTED, "gradcheck: more than 64 parameters");
    /* 1. write mode over NaN garbage */
    for (int k = 0; k < n_in && !st; k++)
        if (g.dx[k]) fill_value(g.dx[k], NAN);
    for (int p = 0; p < g.l.n_params && !st; p++) {
        fill_value(g.l.params[p].grad, NAN);
        g.l.params[p].grad_unset = true;
    }
    if (!st) st = gc_backward(&g, false);
    for (int k = 0; k < n_in && !st; k++)
        if (g.dx[k] && !(ga_in[k] = snapshot(g.dx[k]))) st = GLIA_ENOMEM;
    for (int p = 0; p < g.l.n_params && !st; p++)
        if (!(ga_p[p] = snapshot(g.l.params[p].grad))) st = GLIA_ENOMEM;
    /* 2. finite differences */
    struct cmp c = {tol, rep, false};
    char what[96];
    for (int k = 0; k < n_in && !st; k++) {
        if (!g.dx[k]) continue;
        snprintf(what, sizeof what, "input %d", k);
        st = fd_check(&g, g.x[k], ga_in[k], what, &c);
    }
    for (int p = 0; p < g.l.n_params && !st; p++) {
        snprintf(what, sizeof what, "param %s", g.l.params[p].name);
        st = fd_check(&g, g.l.params[p].value, ga_p[p], what, &c);
    }
    if (!st && c.failed)
        st = glia_error(ctx, GLIA_ENUMERIC, "gradcheck [%s]: error %.3g > %.3g at %s", g.l.name, rep->max_err, tol, rep->worst);
    /* 3. accumulate mode over a base of 1 */
    if (!st) {
        for (int k = 0; k < n_in; k++)
            if (g.dx[k]) fill_value(g.dx[k], 1.0f);
        for (int p = 0; p < g.l.n_params; p++) {
            fill_value(g.l.params[p].grad, 1.0f);
            g.l.params[p].grad_unset = false;
        }
        st = gc_backward(&g, true);
        bool bad = false;
        for (int k = 0; k < n_in && !st && !bad; k++) {
            if (!g.dx[k]) continue;
            snprintf(what, sizeof what, "[%s] input %d", g.l.name, k);
            contract_check(g.dx[k], ga_in[k], 1.0f, what, ctx, &bad);
        }
        for (int p = 0; p < g.l.n_params && !st && !bad; p++) {
            snprintf(what, sizeof what, "[%s] param %s", g.l.name, g.l.params[p].name);
            contract_check(g.l.params[p].grad, ga_p[p], 1.0f, what, ctx, &bad);
        }
        if (bad) st = GLIA_ENUMERIC;
    }
    for (int k = 0; k < GLIA__MAX_INPUTS; k++) free(ga_in[k]);
    for (int p = 0; p < 64; p++) free(ga_p[p]);
    gc_free(&g);
    return st;
}

/* ---- one layer alone on a device (glia bench) ---- */

struct glia_layer_run {
    struct glia_context *ctx;
    struct glia_config *cfg;
    struct glia_backend *b;
    struct glia_layer l;
    bool created;
    bool trained;                    /* a training forward ran: backward may follow */
    int n_in;
    struct glia_shape in_shape[GLIA__MAX_INPUTS];
    struct glia_tensor *x[GLIA__MAX_INPUTS], *dx[GLIA__MAX_INPUTS], *out, *dout, *labels;
    struct glia_tensor *saved;       /* the kernel's saved memory (glia_kernel.saved_size), or NULL */
    uint64_t step;                   /* forwards so far: the per-step seed of random layers */
    enum glia_dtype dt;              /* the element type of the activations: x, dx, out, dout */
};

glia_status glia_layer_run_backend_open(struct glia_context *ctx, struct glia_device dev, struct glia_backend **out)
{
    glia_status st = dev.type == GLIA_DEVICE_CUDA ? glia__load_cuda(ctx) : GLIA_OK;
    return st ? st : glia_backend_get(ctx, dev, out);
}

/* t = n values of N(0, 1) from rng (or all equal to v when rng is NULL), copied from the host. */
static glia_status upload_f32(struct glia_tensor *t, struct glia_rng *rng, float v)
{
    int64_t n = glia_tensor_numel(t);
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof *h);
    if (!h) return GLIA_ENOMEM;
    for (int64_t i = 0; i < n; i++) h[i] = rng ? (float)glia__rng_normal(rng) : v;
    glia_status st = glia_tensor_from_host(t, h, glia_tensor_nbytes(t));
    free(h);
    return st;
}

/* upload_f32 for a tensor of any float type: the f32 values drawn, then rounded once to t's type on the device. */
static glia_status upload_any(struct glia_tensor *t, struct glia_rng *rng, float v)
{
    if (t->dtype == GLIA_F32) return upload_f32(t, rng, v);
    struct glia_tensor *f;
    glia_status st = new_as(glia_tensor_backend(t), &t->shape, glia_tensor_memory_format(t), &f);
    if (!st) st = upload_f32(f, rng, v);
    if (!st) st = glia_tensor_convert(t, f, false);
    glia_tensor_release(f);
    return st;
}

/* Parameter `index` of l (or with index -1 the buffer p) as a tensor holding its declared init, drawn from
 * seed (a parameter's adjusted by the layer's init_param, as a model does). */
static glia_status upload_init(struct glia_backend *b, const struct glia_layer *l, int index, struct glia_param *p,
                               uint64_t seed)
{
    int64_t n = glia_shape_numel(&p->shape);
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof *h);
    if (!h) return GLIA_ENOMEM;
    if (index >= 0) glia__init_param(l, index, h, seed);
    else glia__init_values(h, n, p->init, seed);
    glia_status st = glia_tensor_new(b, GLIA_F32, &p->shape, &p->value);
    if (!st) st = glia_tensor_from_host(p->value, h, glia_tensor_nbytes(p->value));
    free(h);
    return st;
}

/* Parameters (seeded as core/model.c seeds them), their gradients, and buffers. */
static glia_status run_params(struct glia_layer_run *r, uint64_t seed)
{
    glia_status st = GLIA_OK;
    for (int p = 0; p < r->l.n_params && !st; p++) {
        struct glia_param *pa = &r->l.params[p];
        st = upload_init(r->b, &r->l, p, pa,
                         glia__hash_str(glia__hash_str(seed * 0x9e3779b97f4a7c15ull + 1, r->l.name), pa->name));
        if (!st) st = glia_tensor_new(r->b, GLIA_F32, &pa->shape, &pa->grad);
    }
    for (int p = 0; p < r->l.n_buffers && !st; p++) st = upload_init(r->b, &r->l, -1, &r->l.buffers[p], 0);
    return st;
}

/* Inputs, input gradients, output, output gradient and (loss layers) labels. */
static glia_status run_tensors(struct glia_layer_run *r, enum glia_memory_format fmt, uint64_t seed)
{
    struct glia_shape os;
    glia_status st = r->l.type->infer_shape(&r->l, r->in_shape, r->n_in, &os);
    struct glia_rng rng;
    glia__rng_seed(&rng, seed);
    for (int k = 0; k < r->n_in && !st; k++) {
        st = new_typed(r->b, r->dt, &r->in_shape[k], fmt, &r->x[k]);
        if (!st) st = new_typed(r->b, r->dt, &r->in_shape[k], fmt, &r->dx[k]);
        if (!st) st = upload_any(r->x[k], &rng, 0);
    }
    bool loss = r->l.type->flags & GLIA_TYPE_LOSS;  /* its output (the loss) and the loss scale are f32 */
    if (!st) st = new_typed(r->b, loss ? GLIA_F32 : r->dt, &os, fmt, &r->out);
    if (!st) st = saved_new(r->b, glia_kernel_saved_size(r->l.kernel, &r->l, r->in_shape, r->n_in, r->dt), &r->saved);
    if (st) return st;
    if (!loss) {
        if (!(st = new_typed(r->b, r->dt, &os, fmt, &r->dout))) st = upload_any(r->dout, &rng, 0);
        return st;
    }
    struct glia_shape one = glia_shape_make(1, (int64_t[]){1});
    if ((st = glia_tensor_new(r->b, GLIA_F32, &one, &r->dout)) || (st = upload_f32(r->dout, NULL, 1.0f))) return st;
    int64_t classes;
    struct glia_shape ls = label_shape(&r->in_shape[0], &classes);
    int64_t n = glia_shape_numel(&ls);
    int32_t *y = malloc((size_t)(n > 0 ? n : 1) * sizeof *y);
    if (!y) return GLIA_ENOMEM;
    for (int64_t i = 0; i < n; i++) y[i] = (int32_t)(glia__rng_next(&rng) % (uint64_t)(classes > 0 ? classes : 1));
    st = glia_tensor_new(r->b, GLIA_I32, &ls, &r->labels);
    if (!st) st = glia_tensor_from_host(r->labels, y, (size_t)n * sizeof *y);
    free(y);
    return st;
}

static glia_status run_setup(struct glia_layer_run *r, const char *ini, struct glia_device dev,
                             const struct glia_shape *in, int n_in, enum glia_memory_format fmt, uint64_t seed)
{
    struct glia_context *ctx = r->ctx;
    if (n_in < 1 || n_in > GLIA__MAX_INPUTS)
        return glia_error(ctx, GLIA_EINVAL, "glia_layer_run_new: 1..%d inputs, got %d", GLIA__MAX_INPUTS, n_in);
    glia_status st = glia_layer_run_backend_open(ctx, dev, &r->b);
    if (!st && r->dt != GLIA_F32 && !glia_backend_can_convert(r->b)) {
        char d[32];
        glia_device_str(dev, d, sizeof d);
        return glia_error(ctx, GLIA_EUNSUPPORTED, "%s keeps activations in f32 (its backend converts no other type), "
                          "not %s", d, glia_dtype_name(r->dt));
    }
    if (!st) st = glia_config_parse_string(ctx, "layer.ini", ini, &r->cfg);
    if (st) return st;
    if (r->cfg->n_sections < 1) return glia_error(ctx, GLIA_EINVAL, "glia_layer_run_new: the INI text has no layer section");
    struct glia_section *s = r->cfg->sections[0];
    struct glia_layer rl = {0};
    if ((st = run_resolve(ctx, s, dev, &rl))) return st;
    const struct glia_key *sch[] = {glia__core_schema("layer"), rl.type->keys};
    if ((st = glia__section_validate(s, sch, 2))) return st;
    if (fmt != GLIA_CONTIGUOUS && !(rl.kernel->flags & GLIA_KERNEL_CHANNELS_LAST))
        return glia_error(ctx, GLIA_EUNSUPPORTED, "layer type '%s' impl '%s' does not take %s tensors", rl.type->name,
                          rl.kernel->impl, glia_memory_format_name(fmt));
    if (r->dt != GLIA_F32 && !(rl.kernel->flags & GLIA_KERNEL_HALF))
        return glia_error(ctx, GLIA_EUNSUPPORTED, "layer type '%s' impl '%s' does not take %s activations (no "
                          "GLIA_KERNEL_HALF)", rl.type->name, rl.kernel->impl, glia_dtype_name(r->dt));
    r->l = (struct glia_layer){.name = s->name, .type = rl.type, .kernel = rl.kernel, .ctx = ctx, .backend = r->b};
    r->n_in = n_in;
    memcpy(r->in_shape, in, (size_t)n_in * sizeof *in);
    if ((st = glia__layer_create(&r->l, s, in, n_in, &r->created))) return st;
    if ((st = run_params(r, seed))) return st;
    return run_tensors(r, fmt, seed);
}

glia_status glia_layer_run_new(struct glia_context *ctx, const char *ini, struct glia_device dev,
                               const struct glia_shape *in, int n_in, enum glia_memory_format fmt, uint64_t seed,
                               struct glia_layer_run **out)
{
    return glia_layer_run_new_typed(ctx, ini, dev, in, n_in, fmt, GLIA_F32, seed, out);
}

glia_status glia_layer_run_new_typed(struct glia_context *ctx, const char *ini, struct glia_device dev,
                                     const struct glia_shape *in, int n_in, enum glia_memory_format fmt,
                                     enum glia_dtype act, uint64_t seed, struct glia_layer_run **out)
{
    *out = NULL;
    if (act != GLIA_F32 && act != GLIA_F16 && act != GLIA_BF16)
        return glia_error(ctx, GLIA_EINVAL, "glia_layer_run_new_typed: activations are f32, f16 or bf16, not %s",
                          glia_dtype_name(act));
    struct glia_layer_run *r = calloc(1, sizeof *r);
    if (!r) return GLIA_ENOMEM;
    r->ctx = ctx;
    r->dt = act;
    glia_status st = run_setup(r, ini, dev, in, n_in, fmt, seed);
    if (st) {
        glia_layer_run_free(r);
        return st;
    }
    *out = r;
    return GLIA_OK;
}

glia_status glia_layer_run_forward(struct glia_layer_run *r, bool train)
{
    const struct glia_tensor *in[GLIA__MAX_INPUTS];
    for (int k = 0; k < r->n_in; k++) in[k] = r->x[k];
    ++r->step;
    struct glia_fwd a = {in,    r->n_in, r->out, r->labels, train, glia_seed(1234, r->step), false, 1234, NULL, false, 0,
                         NULL,  NULL,    train && r->saved ? r->saved->data : NULL, NULL, false, NULL, NULL};
    if (train && (glia_layer_kernel_flags(&r->l) & GLIA_KERNEL_GRAD_IN_FORWARD) && r->n_in >= 1 && r->dx[0] && r->dout) {
        a.din = r->dx[0];  /* as a model runs such a loss, but into the run's own gradient buffer: x stays */
        a.dout = r->dout;
    }
    glia_status st = r->l.kernel->forward(&r->l, &a);
    r->trained = !st && train;
    return st;
}

glia_status glia_layer_run_backward(struct glia_layer_run *r)
{
    if (!r->l.kernel->backward)
        return glia_error(r->ctx, GLIA_EUNSUPPORTED, "layer type '%s' (kernel %s) has no backward", r->l.type->name,
                          r->l.kernel->impl);
    if (!r->trained)
        return glia_error(r->ctx, GLIA_EINVAL, "glia_layer_run_backward: run a training forward first");
    const struct glia_tensor *in[GLIA__MAX_INPUTS];
    bool acc[GLIA__MAX_INPUTS];
    for (int k = 0; k < r->n_in; k++) {
        in[k] = r->x[k];
        acc[k] = false;
    }
    for (int p = 0; p < r->l.n_params; p++) r->l.params[p].grad_unset = true;
    struct glia_bwd a = {in, r->n_in, r->out, r->dout, r->dx, acc, r->labels, r->saved ? r->saved->data : NULL, NULL, NULL, false};
    return r->l.kernel->backward(&r->l, &a);  /* as a model runs it: queued, no stand-ins, no wait (what bench times) */
}

glia_status glia_layer_run_set_ids(struct glia_layer_run *r, int k, const int32_t *ids, size_t n)
{
    if (k < 0 || k >= r->n_in) return glia_error(r->ctx, GLIA_EINVAL, "glia_layer_run_set_ids: the run has no input %d", k);
    char shp[64];
    if (!ids || n != (size_t)glia_shape_numel(&r->in_shape[k]))
        return glia_error(r->ctx, GLIA_EINVAL, "glia_layer_run_set_ids: %zu ids for input %d, of shape %s", ids ? n : 0, k,
                          glia_shape_str(&r->in_shape[k], shp, sizeof shp));
    struct glia_tensor *t = NULL;
    glia_status st = glia_tensor_new(r->b, GLIA_I32, &r->in_shape[k], &t);
    if (!st) st = glia_tensor_from_host(t, ids, n * sizeof *ids);
    if (st) {
        glia_tensor_release(t);
        return st;
    }
    glia_tensor_release(r->x[k]);
    glia_tensor_release(r->dx[k]);
    r->x[k] = t;
    r->dx[k] = NULL;  /* ids have no gradient */
    r->trained = false;
    return GLIA_OK;
}

glia_status glia_layer_run_sync(struct glia_layer_run *r) { return glia_backend_sync(r->b); }

struct glia_layer *glia_layer_run_layer(struct glia_layer_run *r) { return &r->l; }
struct glia_backend *glia_layer_run_backend(struct glia_layer_run *r) { return r->b; }
struct glia_tensor *glia_layer_run_input(struct glia_layer_run *r, int k) { return k >= 0 && k < r->n_in ? r->x[k] : NULL; }
struct glia_tensor *glia_layer_run_input_grad(struct glia_layer_run *r, int k)
{
    return k >= 0 && k < r->n_in ? r->dx[k] : NULL;
}
struct glia_tensor *glia_layer_run_output(struct glia_layer_run *r) { return r->out; }
struct glia_tensor *glia_layer_run_output_grad(struct glia_layer_run *r) { return r->dout; }
struct glia_tensor *glia_layer_run_labels(struct glia_layer_run *r) { return r->labels; }

uint64_t glia_layer_run_flops(const struct glia_layer_run *r)
{
    return r->l.type->flops ? r->l.type->flops(&r->l, r->in_shape, r->n_in) : 0;
}

void glia_layer_run_free(struct glia_layer_run *r)
{
    if (!r) return;
    if (r->b) glia_backend_sync(r->b);  /* queued work may still use the tensors */
    glia__layer_release(&r->l, r->created);
    for (int k = 0; k < GLIA__MAX_INPUTS; k++) {
        glia_tensor_release(r->x[k]);
        glia_tensor_release(r->dx[k]);
    }
    glia_tensor_release(r->out);
    glia_tensor_release(r->dout);
    glia_tensor_release(r->labels);
    glia_tensor_release(r->saved);
    glia_config_free(r->cfg);
    free(r);
}

/* ---- glia_model_gradcheck_layer: the checker on one layer of a model, as the model configures it ---- */

glia_status glia_model_gradcheck_layer(struct glia_model *m, const char *layer, int64_t batch, uint64_t seed,
                                       double tol, struct glia_gradcheck_report *report)
{
    if (!m || !layer || batch < 1) return GLIA_EINVAL;
    int i = 0;
    while (i < m->graph.n_nodes && strcmp(m->graph.nodes[i].layer.name, layer)) i++;
    if (i == m->graph.n_nodes)
        return glia_error(m->ctx, GLIA_EINVAL, "gradcheck: no layer [%s] in the model (glia check lists them; a "
                          "layer a graph pass fused into another is checked through that one)", layer);
    const struct glia__node *nd = &m->graph.nodes[i];
    /* its section as the model holds it (graph passes' settings included), less what ties it to other layers; an impl
     * that runs elsewhere than the CPU is left out: the checker runs the CPU kernel */
    size_t cap = 4096, len = 0;
    char *ini = malloc(cap);
    if (!ini) return GLIA_ENOMEM;
    len += (size_t)snprintf(ini, cap, "[%s]\n", layer);
    for (int e = 0; e < nd->sec->n_entries; e++) {
        const struct glia__entry *en = &nd->sec->entries[e];
        if (!strcmp(en->key, "inputs") || !strcmp(en->key, "tie_weight") || !strcmp(en->key, "weight_decay")) continue;
        if (!strcmp(en->key, "impl") && nd->layer.kernel->device_type != GLIA_DEVICE_CPU) continue;
        size_t need = strlen(en->key) + strlen(en->value) + 5;
        if (len + need >= cap) {
            cap = 2 * (len + need);
            char *g = realloc(ini, cap);
            if (!g) {
                free(ini);
                return GLIA_ENOMEM;
            }
            ini = g;
        }
        len += (size_t)snprintf(ini + len, cap - len, "%s = %s\n", en->key, en->value);
    }
    struct glia_shape in[GLIA__MAX_INPUTS];
    struct glia_gradcheck_options o = {.struct_size = sizeof o};
    for (int k = 0; k < nd->n_in; k++) {
        in[k] = glia__in_shape_of(m, nd->in[k], batch);
        in[k].dim[0] = batch;
        if (nd->in[k] < 0 && m->data.train.tokens) {  /* token ids, no gradient */
            o.int_inputs |= 1u << k;
            o.int_high = (int32_t)m->data.vocab;
        }
    }
    glia_status st = glia_layer_gradcheck_ex(m->ctx, ini, in, nd->n_in, &o, seed, tol, report);
    free(ini);
    return st;
}
