/* core/harness.c — standalone layers and optimizers for tests and plugin authors: the finite-
 * difference gradient checker with its gradient-contract checks, and glia_optimizer_new.
 * Not used by training: the model builds its layers in core/model.c. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "model_internal.h"

/* ---- optimizers ---- */

struct owned_optimizer {
    struct glia_optimizer o;   /* first: the public pointer */
    struct glia_config *cfg;
};

glia_status glia_optimizer_new(struct glia_context *ctx, const char *name, const char *ini,
                               struct glia_optimizer **out)
{
    struct owned_optimizer *w = calloc(1, sizeof *w);
    if (!w) return GLIA_ENOMEM;
    glia_status st = glia_config_parse_string(ctx, "optimizer.ini", ini ? ini : "", &w->cfg);
    const struct glia_optimizer_ops *ops = NULL;
    if (!st && !glia__find_optimizer(ctx, name)) st = glia_plugin_load(ctx, name);
    if (!st && !(ops = glia__find_optimizer(ctx, name)))
        st = glia_error(ctx, GLIA_ENOTFOUND, "plugin '%s' does not provide an optimizer named '%s'", name, name);
    struct glia_section *s = st ? NULL : glia__config_section(w->cfg, "optimizer");
    if (!st && !s) st = GLIA_ENOMEM;
    if (!st) {
        const struct glia_key *sch[] = {ops->keys};
        st = glia__section_validate(s, sch, 1);
    }
    if (!st) {
        w->o.ops = ops;
        w->o.ctx = ctx;
        st = ops->create(&w->o, s);
        if (st) w->o.ops = NULL;
    }
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
    if (o->ops && o->ops->destroy) o->ops->destroy(o);
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
    bool is_loss;
};

static void gc_free(struct gc *g)
{
    if (g->created && g->l.ops->destroy) g->l.ops->destroy(&g->l);
    for (int p = 0; p < g->l.n_params; p++) {
        free((char *)g->l.params[p].name);
        glia_tensor_release(g->l.params[p].value);
        glia_tensor_release(g->l.params[p].grad);
    }
    free(g->l.params);
    for (int p = 0; p < g->l.n_buffers; p++) {
        free((char *)g->l.buffers[p].name);
        glia_tensor_release(g->l.buffers[p].value);
    }
    free(g->l.buffers);
    for (int k = 0; k < GLIA__MAX_INPUTS; k++) {
        glia_tensor_release(g->x[k]);
        glia_tensor_release(g->dx[k]);
    }
    glia_tensor_release(g->out);
    glia_tensor_release(g->dout);
    glia_tensor_release(g->r);
    glia_tensor_release(g->labels);
    glia_config_free(g->cfg);
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

/* A new f32 tensor of shape s in format f (channels_last applies to 4-D shapes only). */
static glia_status new_as(struct glia_backend *b, const struct glia_shape *s, enum glia_memory_format f,
                          struct glia_tensor **out)
{
    if (f == GLIA_CONTIGUOUS || s->ndim != 4) return glia_tensor_new(b, GLIA_F32, s, out);
    struct glia_shape flat = glia_shape_make(1, (int64_t[]){glia_shape_numel(s)});
    struct glia_tensor *t;
    glia_status st = glia_tensor_new(b, GLIA_F32, &flat, &t);
    if (st) return st;
    st = glia_tensor_view_as(t, 0, s, f, out);
    glia_tensor_release(t);
    return st;
}

static glia_status gc_setup(struct gc *g, const char *ini, const struct glia_shape *in, int n_in, uint64_t seed,
                            enum glia_memory_format fmt)
{
    struct glia_context *ctx = g->ctx;
    struct glia_backend *b;
    glia_status st = glia_config_parse_string(ctx, "gradcheck.ini", ini, &g->cfg);
    if (st) return st;
    if (g->cfg->n_sections < 1) return glia_error(ctx, GLIA_EINVAL, "gradcheck: the INI text has no layer section");
    if (n_in < 1 || n_in > GLIA__MAX_INPUTS) return glia_error(ctx, GLIA_EINVAL, "gradcheck: 1..%d inputs", GLIA__MAX_INPUTS);
    struct glia_section *s = g->cfg->sections[0];
    const struct glia__entry *te = glia__section_entry(s, "type");
    if (!te) return glia_section_error(s, NULL, GLIA_ECONFIG, "missing type");
    if (!glia__find_layer(ctx, te->value, NULL) && (st = glia_plugin_load(ctx, te->value))) return st;
    const struct glia__entry *ie = glia__section_entry(s, "impl");
    const char *impl = ie && strcmp(ie->value, "auto") ? ie->value : "cpu";
    const struct glia_layer_ops *ops = glia__find_layer(ctx, te->value, impl);
    if (!ops) return glia_section_error(s, "type", GLIA_ECONFIG, "no layer '%s' with impl '%s'", te->value, impl);
    const struct glia_key *sch[] = {glia__core_schema("layer"), ops->keys};
    if ((st = glia__section_validate(s, sch, 2))) return st;
    if ((st = glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CPU, 0}, &b))) return st;
    g->l = (struct glia_layer){.name = s->name, .ops = ops, .ctx = ctx, .backend = b};
    g->n_in = n_in;
    g->is_loss = ops->flags & GLIA_LAYER_LOSS;
    if (fmt != GLIA_CONTIGUOUS && !(ops->flags & GLIA_LAYER_CHANNELS_LAST))
        return glia_error(ctx, GLIA_EUNSUPPORTED, "gradcheck: layer type '%s' does not take %s tensors", ops->type,
                          glia_memory_format_name(fmt));
    if ((st = ops->create(&g->l, s, in, n_in))) return st;
    g->created = true;
    struct glia_shape os;
    if ((st = ops->infer_shape(&g->l, in, n_in, &os))) return st;
    struct glia_rng rng;
    glia__rng_seed(&rng, seed);
    for (int k = 0; k < n_in && !st; k++) {
        st = new_as(b, &in[k], fmt, &g->x[k]);
        if (!st) st = new_as(b, &in[k], fmt, &g->dx[k]);
        if (!st) fill_normal(g->x[k], &rng, 1.0);
    }
    for (int p = 0; p < g->l.n_params && !st; p++) {
        struct glia_param *pa = &g->l.params[p];
        st = glia_tensor_new(b, GLIA_F32, &pa->shape, &pa->value);
        if (!st) st = glia_tensor_new(b, GLIA_F32, &pa->shape, &pa->grad);
        if (!st) fill_normal(pa->value, &rng, 0.5);
    }
    for (int p = 0; p < g->l.n_buffers && !st; p++) {
        struct glia_param *bu = &g->l.buffers[p];
        st = glia_tensor_new(b, GLIA_F32, &bu->shape, &bu->value);
        if (!st) glia__init_values(bu->value->data, glia_shape_numel(&bu->shape), bu->init, 0);
    }
    if (!st) st = new_as(b, &os, fmt, &g->out);
    if (!st) st = new_as(b, &os, fmt, &g->dout);
    if (!st) st = new_as(b, &os, fmt, &g->r);
    if (st) return st;
    fill_normal(g->r, &rng, 1.0);
    if (g->is_loss) {
        struct glia_shape ls = glia_shape_make(1, (int64_t[]){in[0].dim[0]});
        if ((st = glia_tensor_new(b, GLIA_I32, &ls, &g->labels))) return st;
        int32_t *y = glia_tensor_i32(g->labels);
        for (int64_t i = 0; i < ls.dim[0]; i++) y[i] = (int32_t)(glia__rng_next(&rng) % (uint64_t)in[0].dim[1]);
    }
    memcpy(glia_tensor_f32(g->dout), glia_tensor_f32(g->r), glia_tensor_nbytes(g->r));
    return GLIA_OK;
}

/* L = sum(out * r) after a training-mode forward. */
static glia_status gc_loss(struct gc *g, double *L)
{
    const struct glia_tensor *in[GLIA__MAX_INPUTS];
    for (int k = 0; k < g->n_in; k++) in[k] = g->x[k];
    struct glia_fwd a = {in, g->n_in, g->out, g->labels, true, 1234};
    glia_status st = g->l.ops->forward(&g->l, &a);
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
    struct glia_bwd a = {in, g->n_in, g->out, g->dout, g->dx, acc, g->labels};
    return g->l.ops->backward(&g->l, &a);
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
    if (opt && opt->struct_size >= offsetof(struct glia_gradcheck_options, memory_format) + sizeof opt->memory_format)
        fmt = opt->memory_format;
    struct glia_gradcheck_report dummy;
    struct glia_gradcheck_report *rep = report ? report : &dummy;
    memset(rep, 0, sizeof *rep);
    struct gc g = {.ctx = ctx};
    float *ga_in[GLIA__MAX_INPUTS] = {0}, *ga_p[64] = {0};
    glia_status st = gc_setup(&g, ini, in, n_in, seed, fmt);
    if (!st && !g.l.ops->backward) st = glia_error(ctx, GLIA_EUNSUPPORTED, "gradcheck: layer has no backward");
    if (!st && g.l.n_params > 64) st = glia_error(ctx, GLIA_EUNSUPPORTED, "gradcheck: more than 64 parameters");
    /* 1. write mode over NaN garbage */
    for (int k = 0; k < n_in && !st; k++) fill_value(g.dx[k], NAN);
    for (int p = 0; p < g.l.n_params && !st; p++) {
        fill_value(g.l.params[p].grad, NAN);
        g.l.params[p].grad_unset = true;
    }
    if (!st) st = gc_backward(&g, false);
    for (int k = 0; k < n_in && !st; k++)
        if (!(ga_in[k] = snapshot(g.dx[k]))) st = GLIA_ENOMEM;
    for (int p = 0; p < g.l.n_params && !st; p++)
        if (!(ga_p[p] = snapshot(g.l.params[p].grad))) st = GLIA_ENOMEM;
    /* 2. finite differences */
    struct cmp c = {tol, rep, false};
    char what[96];
    for (int k = 0; k < n_in && !st; k++) {
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
        for (int k = 0; k < n_in; k++) fill_value(g.dx[k], 1.0f);
        for (int p = 0; p < g.l.n_params; p++) {
            fill_value(g.l.params[p].grad, 1.0f);
            g.l.params[p].grad_unset = false;
        }
        st = gc_backward(&g, true);
        bool bad = false;
        for (int k = 0; k < n_in && !st && !bad; k++) {
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
