/* plugins/optimizers/lamb — optimizer lamb (layer-wise adaptive moments, NVIDIA Apex's FusedLAMB rule: Adam moments
 * on the globally clipped gradient, decoupled weight decay, a per-tensor trust ratio) and its CPU kernel. Not the
 * CUDA kernel: that is in cuda.so; settings, step scalars and the order of the norms' sums: glia/types/optimizers.h. */
#include <stdlib.h>
#include <glia/glia.h>
#include <glia/types/optimizers.h>

static const struct glia_key lamb_keys[] = {
    GLIA_KEY("beta1", GLIA_KEY_FLOAT, "0.9", "decay rate of the gradient mean, in [0, 1)", .min = 0, .max = 1),
    GLIA_KEY("beta2", GLIA_KEY_FLOAT, "0.999", "decay rate of the squared gradient mean, in [0, 1)", .min = 0, .max = 1),
    GLIA_KEY("eps", GLIA_KEY_FLOAT, "1e-6", "added to the denominator", .min = 1e-30, .max = 1),
    GLIA_KEY("weight_decay", GLIA_KEY_FLOAT, "0.01", "decoupled decay: wd w added to the update", .min = 0, .max = 1e6),
    GLIA_KEY("bias_correction", GLIA_KEY_BOOL, "on", "divide the moments by 1 - beta^t"),
    GLIA_KEY("max_grad_norm", GLIA_KEY_FLOAT, "1.0", "global gradient norm the gradients are scaled down to; 0: off",
             .min = 0, .max = 1e30),
    GLIA_KEY("nvlamb", GLIA_KEY_BOOL, "off", "trust ratio on every tensor, also those without weight decay"),
    GLIA_KEY_END};

static glia_status lamb_create(struct glia_optimizer *o, const struct glia_section *cfg)
{
    struct glia_lamb_attrs *p = o->attrs;
    double b1 = glia_section_float(cfg, "beta1"), b2 = glia_section_float(cfg, "beta2");
    if (b1 >= 1) return glia_section_error(cfg, "beta1", GLIA_ECONFIG, "%.15g is out of range [0, 1)", b1);
    if (b2 >= 1) return glia_section_error(cfg, "beta2", GLIA_ECONFIG, "%.15g is out of range [0, 1)", b2);
    p->beta1 = (float)b1;
    p->beta2 = (float)b2;
    p->eps = (float)glia_section_float(cfg, "eps");
    p->weight_decay = (float)glia_section_float(cfg, "weight_decay");
    p->max_grad_norm = (float)glia_section_float(cfg, "max_grad_norm");
    p->bias_correction = glia_section_bool(cfg, "bias_correction");
    p->nvlamb = glia_section_bool(cfg, "nvlamb");
    return GLIA_OK;
}

/* The chunks of a step's tensors, in order: chunk c is chunk cj[c] of tensor ct[c]. */
struct chunks {
    int64_t n, *cj;
    int *ct;
};

static glia_status chunks_of(const struct glia_opt_step *s, struct chunks *c)
{
    c->n = 0;
    for (int t = 0; t < s->n_seg; t++) c->n += glia_norm_chunks(s->seg[2 * t + 1]);
    c->cj = malloc(sizeof *c->cj * (size_t)(c->n ? c->n : 1));
    c->ct = malloc(sizeof *c->ct * (size_t)(c->n ? c->n : 1));
    if (!c->cj || !c->ct) return GLIA_ENOMEM;
    int64_t k = 0;
    for (int t = 0; t < s->n_seg; t++)
        for (int64_t j = 0; j < glia_norm_chunks(s->seg[2 * t + 1]); j++, k++) c->ct[k] = t, c->cj[k] = j;
    return GLIA_OK;
}

static glia_status lamb_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    if (!s->seg && s->n_seg == 0 && s->n > 0)
        return glia_error(o->ctx, GLIA_EINVAL, "optimizer 'lamb': the step has no tensor segments (glia_opt_step.seg): "
                          "its trust ratio is per tensor");
    const struct glia_lamb_coef k = glia_lamb_coef(o->attrs, s);
    const int nt = s->n_seg;
    const int64_t slots = glia_norm_slots((int64_t)s->n, nt);
    struct chunks c = {0};
    float *pw = malloc(sizeof(float) * 3 * (size_t)slots), *tn = malloc(sizeof(float) * 3 * (size_t)(nt + 1));
    glia_status st = pw && tn ? chunks_of(s, &c) : GLIA_ENOMEM;
    if (st) goto done;
    float *pg = pw + slots, *pu = pg + slots, *wn = tn, *gsq = tn + nt, *un = gsq + nt;
    float *w = s->w, *m = s->state[0], *v = s->state[1];
    const float *g = s->g;
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t q = 0; q < c.n; q++) {
        int t = c.ct[q];
        int64_t at = s->seg[2 * t] + c.cj[q] * GLIA_NORM_CHUNK, len = s->seg[2 * t + 1] - c.cj[q] * GLIA_NORM_CHUNK;
        if (len > GLIA_NORM_CHUNK) len = GLIA_NORM_CHUNK;
        int64_t slot = glia_norm_slot(s->seg[2 * t], t, c.cj[q]);
        pw[slot] = glia_sumsq_chunk(w + at, len);
        pg[slot] = glia_sumsq_chunk(g + at, len);
    }
    glia_norm_add(s, pw, wn);
    glia_norm_add(s, pg, gsq);
    float all = 0.0f;
    for (int t = 0; t < nt; t++) wn[t] = sqrtf(wn[t]), all = all + gsq[t];
    const float f = glia_lamb_clip(k, sqrtf(all));
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t q = 0; q < c.n; q++) {
        int t = c.ct[q];
        int64_t at = s->seg[2 * t] + c.cj[q] * GLIA_NORM_CHUNK, len = s->seg[2 * t + 1] - c.cj[q] * GLIA_NORM_CHUNK;
        if (len > GLIA_NORM_CHUNK) len = GLIA_NORM_CHUNK;
        float wd = glia_seg_decays(s, t) ? k.wd : 0.0f, u[GLIA_NORM_CHUNK];
        for (int64_t i = 0; i < len; i++) u[i] = glia_lamb_moments(k, f, wd, g[at + i], w[at + i], &m[at + i], &v[at + i]);
        pu[glia_norm_slot(s->seg[2 * t], t, c.cj[q])] = glia_sumsq_chunk(u, len);
    }
    glia_norm_add(s, pu, un);
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t q = 0; q < c.n; q++) {
        int t = c.ct[q];
        int64_t at = s->seg[2 * t] + c.cj[q] * GLIA_NORM_CHUNK, len = s->seg[2 * t + 1] - c.cj[q] * GLIA_NORM_CHUNK;
        if (len > GLIA_NORM_CHUNK) len = GLIA_NORM_CHUNK;
        bool dec = glia_seg_decays(s, t);
        float wd = dec ? k.wd : 0.0f, r = glia_lamb_ratio(k, dec, wn[t], sqrtf(un[t]));
        for (int64_t i = at; i < at + len; i++) w[i] = w[i] - r * glia_lamb_u(k, wd, w[i], m[i], v[i]);
    }
done:
    free(pw), free(tn), free(c.cj), free(c.ct);
    return st ? glia_error(o->ctx, st, "optimizer 'lamb': out of memory for its norms") : GLIA_OK;
}

static const struct glia_optimizer_type lamb_type = {
    .struct_size = sizeof(struct glia_optimizer_type),
    .name = "lamb",
    .doc = "LAMB: Adam moments with a per-tensor trust ratio (NVIDIA Apex FusedLAMB rule)",
    .keys = lamb_keys,
    .n_state = GLIA_LAMB_N_STATE,
    .attrs_size = sizeof(struct glia_lamb_attrs),
    .create = lamb_create,
};

static const struct glia_optimizer_kernel lamb_cpu = {
    .struct_size = sizeof(struct glia_optimizer_kernel),
    .type = "lamb",
    .doc = "OpenMP loops over the tensors' chunks: norms, moments, update",
    .device_type = GLIA_DEVICE_CPU,
    .step = lamb_step,
    .flags = GLIA_OPT_KERNEL_SEGMENTS,
};

static glia_status lamb_init(struct glia_registry *r)
{
    glia_status st = glia_register_optimizer_type(r, &lamb_type);
    return st ? st : glia_register_optimizer_kernel(r, &lamb_cpu);
}

GLIA_PLUGIN_DEFINE(lamb, "2.0", "MIT", "LAMB optimizer (CPU)", lamb_init)
