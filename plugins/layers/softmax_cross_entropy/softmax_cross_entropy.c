/* plugins/layers/softmax_cross_entropy — mean cross-entropy of softmax(logits) against integer
 * labels, on the CPU. Not a standalone softmax: the output is the scalar loss. */
#include <glia/glia.h>
#include "softmax_cross_entropy_desc.h"
#include <math.h>
#include <stdlib.h>

struct sce {
    struct glia__sce d;  /* keys (first member) */
    float *prob;         /* (N, C) softmax of the last training forward */
    int64_t cap;
};

static glia_status sce_create(struct glia_layer *l, const struct glia_section *cfg,
                              const struct glia_shape *in, int n_in)
{
    return glia__sce_create(l, cfg, in, n_in, sizeof(struct sce));
}

static void sce_destroy(struct glia_layer *l)
{
    struct sce *p = l->priv;
    if (p) free(p->prob);
    free(p);
}

/* loss(1) = mean_n [(1-e) (-log p[n, y(n)]) + e mean_c (-log p[n, c])], p = softmax(x(N,C));
 * keeps prob(N,C) when training */
static glia_status sce_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    struct sce *p = l->priv;
    int64_t N = a->in[0]->shape.dim[0], C = a->in[0]->shape.dim[1];
    const float *x = glia_tensor_f32(a->in[0]);
    const int32_t *y = glia_tensor_i32(a->labels);
    for (int64_t i = 0; i < N; i++)
        if (y[i] < 0 || y[i] >= C)
            return glia_error(l->ctx, GLIA_EINVAL, "[%s] label %d at batch row %lld is out of range for %lld classes",
                              l->name, y[i], (long long)i, (long long)C);
    if (a->train && p->cap < N * C) {
        float *q = realloc(p->prob, sizeof(float) * (size_t)(N * C));
        if (!q) return GLIA_ENOMEM;
        p->prob = q;
        p->cap = N * C;
    }
    double total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int64_t i = 0; i < N; i++) {
        const float *r = x + i * C;
        float mx = r[0];
        for (int64_t j = 1; j < C; j++) mx = r[j] > mx ? r[j] : mx;
        double s = 0;
        for (int64_t j = 0; j < C; j++) s += exp((double)(r[j] - mx));
        double lse = log(s) + mx, mean_nll = 0;
        if (p->d.smoothing > 0) {
            for (int64_t j = 0; j < C; j++) mean_nll += lse - r[j];
            mean_nll /= (double)C;
        }
        total += (1.0 - p->d.smoothing) * (lse - r[y[i]]) + p->d.smoothing * mean_nll;
        if (a->train)
            for (int64_t j = 0; j < C; j++) p->prob[i * C + j] = (float)exp((double)r[j] - lse);
    }
    glia_tensor_f32(a->out)[0] = (float)(total / (double)N);
    return GLIA_OK;
}

/* dx(N,C) (+)= scale * (prob - (1-e) onehot(y) - e/C) / N */
static glia_status sce_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    struct sce *p = l->priv;
    if (!a->din[0]) return GLIA_OK;
    int64_t N = a->in[0]->shape.dim[0], C = a->in[0]->shape.dim[1];
    const int32_t *y = glia_tensor_i32(a->labels);
    float *dx = glia_tensor_f32(a->din[0]);
    float k = glia_tensor_f32(a->dout)[0] / (float)N;
    bool add = a->din_accumulate[0];
    float e = p->d.smoothing, off = e / (float)C;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < C; j++) {
            float g = k * (p->prob[i * C + j] - (j == y[i] ? 1.0f - e : 0.0f) - off);
            dx[i * C + j] = add ? dx[i * C + j] + g : g;
        }
    return GLIA_OK;
}

static const struct glia_layer_ops sce_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "softmax_cross_entropy",
    .impl = "cpu",
    .doc = GLIA__SCE_DOC,
    .keys = glia__sce_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .flags = GLIA_LAYER_LOSS | GLIA_LAYER_BWD_NO_OUTPUT,
    .device_type = GLIA_DEVICE_CPU,
    .create = sce_create,
    .destroy = sce_destroy,
    .infer_shape = glia__sce_infer,
    .forward = sce_forward,
    .backward = sce_backward,
};

static glia_status sce_init(struct glia_registry *r) { return glia_register_layer(r, &sce_ops); }

GLIA_PLUGIN_DEFINE(softmax_cross_entropy, "1.0", "MIT", "softmax cross-entropy loss (CPU)", sce_init)
