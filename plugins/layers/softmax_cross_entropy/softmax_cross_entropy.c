/* plugins/layers/softmax_cross_entropy — layer type softmax_cross_entropy (mean cross-entropy of
 * softmax(logits) against integer labels) and its CPU kernel. Not a standalone softmax: the output is the
 * scalar loss; the CUDA kernel is in cuda.so. */
#include <glia/glia.h>
#include <glia/types/softmax_cross_entropy.h>
#include <math.h>
#include <stdlib.h>

static const struct glia_key sce_keys[] = {
    GLIA_KEY("label_smoothing", GLIA_KEY_FLOAT, "0",
             "target = (1 - e) onehot + e / classes (torch's label_smoothing)", .min = 0, .max = 1),
    GLIA_KEY_END};

/* Checks the (N, classes) logits and reads the smoothing. */
static glia_status sce_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                              int n_in)
{
    struct glia_softmax_cross_entropy_attrs *p = l->attrs;
    char buf[64];
    if (in[0].ndim != 2)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE, "softmax_cross_entropy expects (N, classes) logits, got %s",
                                  glia_shape_str(&in[0], buf, sizeof buf));
    p->smoothing = (float)glia_section_float(cfg, "label_smoothing");
    return GLIA_OK;
}

/* out = (1): the mean loss. */
static glia_status sce_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in, struct glia_shape *out)
{
    if (in[0].ndim != 2) return GLIA_ESHAPE;
    *out = glia_shape_make(1, (int64_t[]){1});
    return GLIA_OK;
}

/* l->state of the CPU kernel: the softmax of the last training forward, for backward. */
struct sce_cpu {
    float *prob;  /* (N, C) (owned) */
    int64_t cap;  /* floats prob holds */
};

static void sce_cpu_destroy(struct glia_layer *l)
{
    struct sce_cpu *s = l->state;
    free(s->prob);
}

/* loss(1) = mean_n [(1-e) (-log p[n, y(n)]) + e mean_c (-log p[n, c])], p = softmax(x(N,C));
 * keeps prob(N,C) when training */
static glia_status sce_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_softmax_cross_entropy_attrs *p = l->attrs;
    struct sce_cpu *s = l->state;
    int64_t N = a->in[0]->shape.dim[0], C = a->in[0]->shape.dim[1];
    const float *x = glia_tensor_f32(a->in[0]);
    const int32_t *y = glia_tensor_i32(a->labels);
    for (int64_t i = 0; i < N; i++)
        if (y[i] < 0 || y[i] >= C)
            return glia_error(l->ctx, GLIA_EINVAL, "[%s] label %d at batch row %lld is out of range for %lld classes",
                              l->name, y[i], (long long)i, (long long)C);
    if (a->train && s->cap < N * C) {
        float *q = realloc(s->prob, sizeof(float) * (size_t)(N * C));
        if (!q) return GLIA_ENOMEM;
        s->prob = q;
        s->cap = N * C;
    }
    double total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int64_t i = 0; i < N; i++) {
        const float *r = x + i * C;
        float mx = r[0];
        for (int64_t j = 1; j < C; j++) mx = r[j] > mx ? r[j] : mx;
        double sum = 0;
        for (int64_t j = 0; j < C; j++) sum += exp((double)(r[j] - mx));
        double lse = log(sum) + mx, mean_nll = 0;
        if (p->smoothing > 0) {
            for (int64_t j = 0; j < C; j++) mean_nll += lse - r[j];
            mean_nll /= (double)C;
        }
        total += (1.0 - p->smoothing) * (lse - r[y[i]]) + p->smoothing * mean_nll;
        if (a->train)
            for (int64_t j = 0; j < C; j++) s->prob[i * C + j] = (float)exp((double)r[j] - lse);
    }
    glia_tensor_f32(a->out)[0] = (float)(total / (double)N);
    return GLIA_OK;
}

/* dx(N,C) (+)= scale * (prob - (1-e) onehot(y) - e/C) / N */
static glia_status sce_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_softmax_cross_entropy_attrs *p = l->attrs;
    const struct sce_cpu *s = l->state;
    if (!a->din[0]) return GLIA_OK;
    int64_t N = a->in[0]->shape.dim[0], C = a->in[0]->shape.dim[1];
    const int32_t *y = glia_tensor_i32(a->labels);
    float *dx = glia_tensor_f32(a->din[0]);
    float k = glia_tensor_f32(a->dout)[0] / (float)N;
    bool add = a->din_accumulate[0];
    float e = p->smoothing, off = e / (float)C;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < C; j++) {
            float g = k * (s->prob[i * C + j] - (j == y[i] ? 1.0f - e : 0.0f) - off);
            dx[i * C + j] = add ? dx[i * C + j] + g : g;
        }
    return GLIA_OK;
}

static const struct glia_layer_type sce_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "softmax_cross_entropy",
    .doc = "loss: mean cross-entropy of softmax(logits) and integer labels",
    .keys = sce_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .flags = GLIA_TYPE_LOSS,
    .attrs_size = sizeof(struct glia_softmax_cross_entropy_attrs),
    .create = sce_create,
    .infer_shape = sce_infer,
};

static const struct glia_kernel sce_cpu = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "softmax_cross_entropy",
    .impl = "cpu",
    .doc = "rows in double; the softmax kept for backward",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_BWD_NO_OUTPUT,
    .state_size = sizeof(struct sce_cpu),
    .destroy = sce_cpu_destroy,
    .forward = sce_forward,
    .backward = sce_backward,
};

static glia_status sce_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &sce_type);
    return st ? st : glia_register_kernel(r, &sce_cpu);
}

GLIA_PLUGIN_DEFINE(softmax_cross_entropy, "2.0", "MIT", "softmax cross-entropy loss (CPU)", sce_init)
