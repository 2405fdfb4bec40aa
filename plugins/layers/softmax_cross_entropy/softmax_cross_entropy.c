/* plugins/layers/softmax_cross_entropy — layer type softmax_cross_entropy (mean cross-entropy of
 * softmax(logits) against integer labels, per sample or per sequence position) and its CPU kernel. Not a standalone softmax: the output is the
 * scalar loss; the CUDA kernel is in cuda.so. */
#include <glia/glia.h>
#include <glia/half.h>
#include <glia/types/softmax_cross_entropy.h>
#include <math.h>
#include <stdlib.h>

static const struct glia_key sce_keys[] = {
    GLIA_KEY("label_smoothing", GLIA_KEY_FLOAT, "0",
             "target = (1 - e) onehot + e / classes (torch's label_smoothing)", .min = 0, .max = 1),
    GLIA_KEY("ignore_index", GLIA_KEY_INT, "-100",
             "positions whose label is this value do not count: no loss, no gradient, not in the mean (torch's "
             "ignore_index)", .min = -2147483648.0, .max = 2147483647.0),
    GLIA_KEY_END};

/* Checks the (N, classes) or (N, T, classes) logits and reads the smoothing and the ignored label. */
static glia_status sce_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                              int n_in)
{
    struct glia_softmax_cross_entropy_attrs *p = l->attrs;
    char buf[64];
    if (in[0].ndim != 2 && in[0].ndim != 3)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE,
                                  "softmax_cross_entropy expects (N, classes) or (N, T, classes) logits, got %s",
                                  glia_shape_str(&in[0], buf, sizeof buf));
    p->smoothing = (float)glia_section_float(cfg, "label_smoothing");
    p->ignore_index = (int32_t)glia_section_int(cfg, "ignore_index");
    return GLIA_OK;
}

/* out = (1): the mean loss. */
static glia_status sce_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in, struct glia_shape *out)
{
    if (in[0].ndim != 2 && in[0].ndim != 3) return GLIA_ESHAPE;
    *out = glia_shape_make(1, (int64_t[]){1});
    return GLIA_OK;
}

/* l->state of the CPU kernel: each row's logsumexp in the last training forward and how many positions counted, for
 * backward, which recomputes the probabilities from them (a language model's (N, T, vocab) softmax is never
 * stored: R doubles, not R x C floats). */
struct sce_cpu {
    double *lse;         /* (R) (owned) */
    int64_t cap;         /* rows lse holds */
    int64_t count;       /* positions of the last training forward whose label is not ignore_index */
    const void *grad_at; /* where the last training forward wrote the gradient (glia_fwd.din), or NULL */
};

static void sce_cpu_destroy(struct glia_layer *l)
{
    struct sce_cpu *s = l->state;
    free(s->lse);
}

/* softmax's p = exp(x - lse) for logit x of a row whose logsumexp is lse: the difference in double, rounded to float,
 * and expf (a third of exp's time: the loss of a (N, T, vocab) language model is mostly these), in one place so that
 * the forward's gradient and the backward's are the same bits. */
static inline float sce_prob(float x, double lse) { return expf((float)((double)x - lse)); }

/* Half logits (GLIA_KERNEL_HALF: bf16 or f16, from a model with half activations) widened to an f32 copy (NULL:
 * out of memory), on which the f32 code runs; the gradient is computed into such a copy and rounded once into the
 * half tensor. */
static float *widen(const struct glia_tensor *t)
{
    int64_t n = glia_tensor_numel(t);
    float *w = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; w && i < n; i++) w[i] = glia_load_f32(t->data, t->dtype, i);
    return w;
}

/* The rows R (N, or N*T) and classes C of logits x: every dimension but the last is a position. */
static void sce_rows(const struct glia_tensor *x, int64_t *R, int64_t *C)
{
    const struct glia_shape *s = &x->shape;
    *C = s->dim[s->ndim - 1];
    *R = glia_shape_numel(s) / (*C > 0 ? *C : 1);
}

/* loss(1) = sum_r [(1-e) (-log p[r, y(r)]) + e mean_c (-log p[r, c])] / count over the rows r of x(R,C) (R = N or
 * N*T) whose label y(R) is not ignore_index, p = softmax; count 0 gives 0. Keeps lse(R) when training; given
 * a->din (GLIA_KERNEL_GRAD_IN_FORWARD), also writes each row's gradient there, over the row once it is read, as
 * sce_backward would. */
static glia_status sce_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_softmax_cross_entropy_attrs *p = l->attrs;
    struct sce_cpu *s = l->state;
    int64_t N, C;
    sce_rows(a->in[0], &N, &C);
    enum glia_dtype t = a->in[0]->dtype;
    const int32_t *y = glia_tensor_i32(a->labels);
    if (glia_tensor_numel(a->labels) < N)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] %lld labels for %lld positions", l->name,
                          (long long)glia_tensor_numel(a->labels), (long long)N);
    int64_t count = 0;
    for (int64_t i = 0; i < N; i++) {
        if (y[i] == p->ignore_index) continue;
        if (y[i] < 0 || y[i] >= C)
            return glia_error(l->ctx, GLIA_EINVAL, "[%s] label %d at batch row %lld is out of range for %lld classes",
                              l->name, y[i], (long long)i, (long long)C);
        count++;
    }
    if (a->train && s->cap < N) {
        double *q = realloc(s->lse, sizeof(double) * (size_t)(N > 0 ? N : 1));
        if (!q) return GLIA_ENOMEM;
        s->lse = q;
        s->cap = N;
    }
    float *wide = t == GLIA_F32 ? NULL : widen(a->in[0]);  /* half logits as f32, and their gradient */
    if (t != GLIA_F32 && !wide) return GLIA_ENOMEM;
    const float *x = wide ? wide : glia_tensor_f32(a->in[0]);
    double total = 0;
    float *dx = a->train && a->din ? (wide ? wide : glia_tensor_f32(a->din)) : NULL;
    float k = dx && count > 0 ? glia_tensor_f32(a->dout)[0] / (float)count : 0.0f, e = p->smoothing, off = e / (float)C;
    s->grad_at = dx ? a->din->data : NULL;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int64_t i = 0; i < N; i++) {
        if (y[i] == p->ignore_index) {  /* its gradient row is 0: lse is not read */
            for (int64_t j = 0; dx && j < C; j++) dx[i * C + j] = 0.0f;
            continue;
        }
        const float *r = x + i * C;
        float mx = r[0];
        for (int64_t j = 1; j < C; j++) mx = r[j] > mx ? r[j] : mx;
        double sum = 0;
        for (int64_t j = 0; j < C; j++) sum += expf(r[j] - mx);  /* each term in (0, 1]: float's 2^-24 of itself */
        double lse = log(sum) + mx, mean_nll = 0;
        if (p->smoothing > 0) {
            for (int64_t j = 0; j < C; j++) mean_nll += lse - r[j];
            mean_nll /= (double)C;
        }
        total += (1.0 - p->smoothing) * (lse - r[y[i]]) + p->smoothing * mean_nll;
        if (a->train) s->lse[i] = lse;
        for (int64_t j = 0; dx && j < C; j++) {  /* sce_backward's expressions: the same bits */
            dx[i * C + j] = k * (sce_prob(r[j], lse) - (j == y[i] ? 1.0f - e : 0.0f) - off);
        }
    }
    if (a->train) s->count = count;
    glia_tensor_f32(a->out)[0] = count > 0 ? (float)(total / (double)count) : 0.0f;
    for (int64_t i = 0; wide && dx && i < N * C; i++) glia_store_f32(a->din->data, t, i, dx[i]);  /* rounded once */
    free(wide);
    return GLIA_OK;
}

/* dx(R,C) (+)= scale * (p - (1-e) onehot(y) - e/C) / count on the counted rows, 0 on the ignored ones; p = exp(x -
 * lse) recomputed from the kept row logsumexp, the value the forward computed */
static glia_status sce_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_softmax_cross_entropy_attrs *p = l->attrs;
    struct sce_cpu *s = l->state;
    if (!a->din[0]) return GLIA_OK;
    if (s->grad_at && s->grad_at == a->din[0]->data && !a->din_accumulate[0]) {  /* the forward wrote it */
        s->grad_at = NULL;
        return GLIA_OK;
    }
    if (s->grad_at && s->grad_at == a->in[0]->data)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] the training forward wrote its gradient over the logits; this "
                          "backward asks for it elsewhere or to add it", l->name);
    int64_t N, C;
    sce_rows(a->in[0], &N, &C);
    const int32_t *y = glia_tensor_i32(a->labels);
    enum glia_dtype t = a->in[0]->dtype;
    float *wide = t == GLIA_F32 ? NULL : widen(a->in[0]);
    if (t != GLIA_F32 && !wide) return GLIA_ENOMEM;
    const float *x = wide ? wide : glia_tensor_f32(a->in[0]);
    void *dx = a->din[0]->data;
    float k = s->count > 0 ? glia_tensor_f32(a->dout)[0] / (float)s->count : 0.0f;
    bool add = a->din_accumulate[0];
    float e = p->smoothing, off = e / (float)C;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        bool ignored = y[i] == p->ignore_index;
        for (int64_t j = 0; j < C; j++) {
            float pr = ignored ? 0.0f : sce_prob(x[i * C + j], s->lse[i]);
            float g = ignored ? 0.0f : k * (pr - (j == y[i] ? 1.0f - e : 0.0f) - off);
            glia_store_f32(dx, t, i * C + j, add ? glia_load_f32(dx, t, i * C + j) + g : g);
        }
    }
    free(wide);
    return GLIA_OK;
}

static const struct glia_layer_type sce_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "softmax_cross_entropy",
    .doc = "loss: mean cross-entropy of softmax(logits) and integer labels, over (N, classes) logits with (N) labels or "
           "(N, T, classes) logits with (N, T) labels",
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
    .doc = "rows summed in double over expf; the gradient written over the logits, in the forward's pass when the core "
           "allows; f32, f16 or bf16 logits (half ones through an f32 copy)",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_GRAD_IN_PLACE | GLIA_KERNEL_GRAD_IN_FORWARD | GLIA_KERNEL_HALF,
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
