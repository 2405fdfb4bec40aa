/* tests/layerutil.h — what the layer test programs share: shapes, one layer built by hand (as
 * the gradient checker builds it) for value tests, and the configuration-error check.
 * Not for training tests: those build whole models. */
#ifndef GLIA_LAYERUTIL_H
#define GLIA_LAYERUTIL_H

#include <math.h>
#include <string.h>
#include "internal.h"
#include "parts.h"
#include "testutil.h"

static inline struct glia_shape S(int n, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t dims[4] = {a, b, c, d};
    return glia_shape_make(n, dims);
}

struct built {
    struct glia_config *cfg;
    struct glia_backend *b;
    const struct glia_layer_type *type;
    const struct glia_kernel *kernel;
    struct glia_layer l;
};

/* Builds the one layer section of `ini` (its CPU impl, loading its plugin) in context c for
 * the given input shapes. Parameters and buffers get storage holding their declared init
 * (seed 0; a parameter's as the layer's init_param adjusts it); parameter gradients are
 * allocated, contents undefined. */
static inline void layer_build(struct glia_context *c, const char *ini, const struct glia_shape *in, int n_in,
                               struct built *B)
{
    memset(B, 0, sizeof *B);
    CU_ASSERT_FATAL(glia_config_parse_string(c, "layer.ini", ini, &B->cfg) == GLIA_OK);
    struct glia_section *s = B->cfg->sections[0];
    const char *type = glia__section_entry(s, "type")->value;
    CU_ASSERT_FATAL(glia_plugin_load(c, type) == GLIA_OK);
    B->type = glia__find_type(c, type);
    B->kernel = glia__find_kernel(c, type, "cpu");
    CU_ASSERT_PTR_NOT_NULL_FATAL(B->type);
    CU_ASSERT_PTR_NOT_NULL_FATAL(B->kernel);
    CU_ASSERT_EQUAL(B->kernel->device_type, GLIA_DEVICE_CPU);
    const struct glia_key *sch[] = {glia__core_schema("layer"), B->type->keys};
    CU_ASSERT_FATAL(glia__section_validate(s, sch, 2) == GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_get(c, (struct glia_device){GLIA_DEVICE_CPU, 0}, &B->b) == GLIA_OK);
    B->l = (struct glia_layer){.name = s->name, .type = B->type, .kernel = B->kernel, .ctx = c, .backend = B->b};
    bool created;
    CU_ASSERT_FATAL(glia__layer_create(&B->l, s, in, n_in, &created) == GLIA_OK);
    for (int i = 0; i < B->l.n_params; i++) {
        struct glia_param *p = &B->l.params[i];
        CU_ASSERT_FATAL(glia_tensor_new(B->b, GLIA_F32, &p->shape, &p->value) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_new(B->b, GLIA_F32, &p->shape, &p->grad) == GLIA_OK);
        glia__init_param(&B->l, i, glia_tensor_f32(p->value), 0);
    }
    for (int i = 0; i < B->l.n_buffers; i++) {
        struct glia_param *p = &B->l.buffers[i];
        CU_ASSERT_PTR_NULL(p->grad);
        CU_ASSERT_FATAL(glia_tensor_new(B->b, GLIA_F32, &p->shape, &p->value) == GLIA_OK);
        glia__init_values(glia_tensor_f32(p->value), glia_tensor_numel(p->value), p->init, 0);
    }
}

/* Destroys a layer built by hand (its kernel's and type's destroy) and frees its parameters and buffers. */
static inline void layer_destroy(struct glia_layer *l) { glia__layer_release(l, true); }

/* Destroys the layer and frees what layer_build made (not the context). */
static inline void layer_unbuild(struct built *B)
{
    layer_destroy(&B->l);
    glia_config_free(B->cfg);
}

/* ---- memory formats ---- */

/* A new f32 tensor of shape s laid out in format f (other than 4-D: contiguous). */
static inline struct glia_tensor *tensor_as(struct glia_backend *b, struct glia_shape s, enum glia_memory_format f)
{
    struct glia_tensor *flat, *t = NULL;
    struct glia_shape fs = glia_shape_make(1, (int64_t[]){glia_shape_numel(&s)});
    CU_ASSERT_FATAL(glia_tensor_new(b, GLIA_F32, &fs, &flat) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_view_as(flat, 0, &s, s.ndim == 4 ? f : GLIA_CONTIGUOUS, &t) == GLIA_OK);
    glia_tensor_release(flat);
    return t;
}

/* Element (n, c, h, w) of a 4-D tensor, or element i of any other, read through its strides. */
static inline float at4(const struct glia_tensor *t, int64_t n, int64_t c, int64_t h, int64_t w)
{
    const float *d = glia_tensor_f32(t);
    return d[n * t->stride[0] + c * t->stride[1] + h * t->stride[2] + w * t->stride[3]];
}

/* Largest |a - b| / max(1, |a|) over the logical elements of two tensors of one shape. */
static inline double max_diff(const struct glia_tensor *a, const struct glia_tensor *b)
{
    double worst = 0;
    if (a->shape.ndim != 4) {
        const float *x = glia_tensor_f32(a), *y = glia_tensor_f32(b);
        for (int64_t i = 0; i < glia_tensor_numel(a); i++) {
            double e = fabs((double)x[i] - y[i]) / fmax(1.0, fabs(x[i]));
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
        }
        return worst;
    }
    const int64_t *d = a->shape.dim;
    for (int64_t n = 0; n < d[0]; n++)
        for (int64_t c = 0; c < d[1]; c++)
            for (int64_t h = 0; h < d[2]; h++)
                for (int64_t w = 0; w < d[3]; w++) {
                    double x = at4(a, n, c, h, w), y = at4(b, n, c, h, w);
                    double e = fabs(x - y) / fmax(1.0, fabs(x));
                    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
                }
    return worst;
}

/* Runs the layer of `ini` (CPU impl) on the same random inputs, output gradient and weights in
 * both memory formats -- a training forward and a backward (accumulate: onto gradients of 1) --
 * and returns the largest difference of outputs, input gradients and parameter gradients.
 * The layer's kernel must have GLIA_KERNEL_CHANNELS_LAST. */
static inline double format_diff(const char *ini, const struct glia_shape *in, int n_in, bool accumulate,
                                 uint64_t seed)
{
    struct glia_context *c;
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    layer_build(c, ini, in, n_in, &B);
    CU_ASSERT_FATAL(B.kernel->flags & GLIA_KERNEL_CHANNELS_LAST);
    struct glia_shape os;
    CU_ASSERT_FATAL(B.type->infer_shape(&B.l, in, n_in, &os) == GLIA_OK);
    struct glia_rng rng;
    glia__rng_seed(&rng, seed);
    struct glia_tensor *x[2][GLIA__MAX_INPUTS], *dx[2][GLIA__MAX_INPUTS], *out[2], *dout[2], *dp[2][8];
    for (int f = 0; f < 2; f++) {
        for (int k = 0; k < n_in; k++) {
            x[f][k] = tensor_as(B.b, in[k], f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS);
            dx[f][k] = tensor_as(B.b, in[k], f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS);
        }
        out[f] = tensor_as(B.b, os, f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS);
        dout[f] = tensor_as(B.b, os, f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS);
    }
    for (int k = 0; k < n_in; k++) {
        float *d = glia_tensor_f32(x[0][k]);
        for (int64_t i = 0; i < glia_tensor_numel(x[0][k]); i++) d[i] = (float)glia__rng_normal(&rng);
        CU_ASSERT_FATAL(glia_tensor_convert(x[1][k], x[0][k], false) == GLIA_OK);
    }
    float *g = glia_tensor_f32(dout[0]);
    for (int64_t i = 0; i < glia_tensor_numel(dout[0]); i++) g[i] = (float)glia__rng_normal(&rng);
    CU_ASSERT_FATAL(glia_tensor_convert(dout[1], dout[0], false) == GLIA_OK);
    CU_ASSERT_FATAL(B.l.n_params <= 8);
    for (int p = 0; p < B.l.n_params; p++) {
        float *w = glia_tensor_f32(B.l.params[p].value);
        for (int64_t i = 0; i < glia_tensor_numel(B.l.params[p].value); i++) w[i] = (float)glia__rng_normal(&rng);
    }
    for (int f = 0; f < 2; f++) {
        const struct glia_tensor *xi[GLIA__MAX_INPUTS];
        bool acc[GLIA__MAX_INPUTS];
        for (int k = 0; k < n_in; k++) {
            xi[k] = x[f][k];
            acc[k] = accumulate;
            float *d = glia_tensor_f32(dx[f][k]);
            for (int64_t i = 0; i < glia_tensor_numel(dx[f][k]); i++) d[i] = accumulate ? 1.0f : NAN;
        }
        for (int p = 0; p < B.l.n_params; p++) {
            struct glia_param *pa = &B.l.params[p];
            float *d = glia_tensor_f32(pa->grad);
            for (int64_t i = 0; i < glia_tensor_numel(pa->grad); i++) d[i] = accumulate ? 1.0f : NAN;
            pa->grad_unset = !accumulate;
        }
        struct glia_fwd fa = {xi, n_in, out[f], NULL, true, 77, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        CU_ASSERT_FATAL(B.kernel->forward(&B.l, &fa) == GLIA_OK);
        struct glia_bwd ba = {xi, n_in, out[f], dout[f], dx[f], acc, NULL, NULL, NULL, NULL, false};
        glia_status st = B.kernel->backward(&B.l, &ba);
        if (st) printf("\n  %s\n", glia_context_error(c));
        CU_ASSERT_FATAL(st == GLIA_OK);
        for (int p = 0; p < B.l.n_params; p++) {
            struct glia_param *pa = &B.l.params[p];
            dp[f][p] = tensor_as(B.b, pa->shape, GLIA_CONTIGUOUS);
            memcpy(glia_tensor_f32(dp[f][p]), glia_tensor_f32(pa->grad), glia_tensor_nbytes(pa->grad));
        }
    }
    double worst = max_diff(out[0], out[1]);
    for (int k = 0; k < n_in; k++) worst = fmax(worst, max_diff(dx[0][k], dx[1][k]));
    for (int p = 0; p < B.l.n_params; p++) worst = fmax(worst, max_diff(dp[0][p], dp[1][p]));
    for (int f = 0; f < 2; f++) {
        for (int k = 0; k < n_in; k++) glia_tensor_release(x[f][k]), glia_tensor_release(dx[f][k]);
        for (int p = 0; p < B.l.n_params; p++) glia_tensor_release(dp[f][p]);
        glia_tensor_release(out[f]);
        glia_tensor_release(dout[f]);
    }
    layer_unbuild(&B);
    glia_context_free(c);
    return worst;
}

/* Gradient check of the layer of `ini` with channels_last tensors. */
static inline void gradcheck_nhwc(const char *ini, const struct glia_shape *in, int n_in, uint64_t seed, double tol)
{
    struct glia_context *c;
    struct glia_gradcheck_report r;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    struct glia_gradcheck_options o = {.struct_size = sizeof o, .memory_format = GLIA_CHANNELS_LAST};
    glia_status st = glia_layer_gradcheck_ex(c, ini, in, n_in, &o, seed, tol, &r);
    if (st) printf("\n  %s\n", glia_context_error(c));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    CU_ASSERT(r.n_checked > 0);
    CU_ASSERT(r.n_skipped * 10 <= r.n_checked);  /* kinks are rare with N(0,1) inputs */
    glia_context_free(c);
}

/* The layer of `ini` must be refused with status want and a message containing msg. */
static inline void expect_error(const char *ini, struct glia_shape in, glia_status want, const char *msg)
{
    struct glia_context *c;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    glia_status st = glia_layer_gradcheck(c, ini, &in, 1, 1, 1e-2, NULL);
    CU_ASSERT_EQUAL(st, want);
    if (st != want || !strstr(glia_context_error(c), msg))
        printf("\n  got %s: %s\n  want: %s\n", glia_status_name(st), glia_context_error(c), msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(c), msg));
    glia_context_free(c);
}


/* ---- a loss's gradient in its forward's pass (GLIA_KERNEL_GRAD_IN_FORWARD) ---- */

/* Loss layer l (softmax_cross_entropy, on backend b) on (R, C) logits with every ignore_every-th label -100 (0: none)
 * and a loss scale of 2.5: a training forward and a backward into a buffer of its own, against a training forward
 * given glia_fwd.din at the logits' own address (as the core gives it) followed by the backward, which must find
 * nothing left to do: the same loss, and the same gradient bit for bit. */
static inline void loss_grad_in_forward_case(struct glia_layer *l, struct glia_backend *b, int64_t R, int64_t C,
                                             int ignore_every, uint64_t seed)
{
    CU_ASSERT_FATAL(l->kernel->flags & GLIA_KERNEL_GRAD_IN_FORWARD);
    struct glia_shape xs = glia_shape_make(2, (int64_t[]){R, C}), ys = glia_shape_make(1, (int64_t[]){R}),
                      one = glia_shape_make(1, (int64_t[]){1});
    float *xh = malloc(sizeof(float) * (size_t)(R * C)), *g1 = malloc(sizeof(float) * (size_t)(R * C)),
          *g2 = malloc(sizeof(float) * (size_t)(R * C)), scale = 2.5f, loss[2];
    int32_t *yh = malloc(sizeof(int32_t) * (size_t)R);
    CU_ASSERT_FATAL(xh && g1 && g2 && yh);
    struct glia_rng r;
    glia__rng_seed(&r, seed);
    for (int64_t i = 0; i < R * C; i++) xh[i] = (float)(3.0 * glia__rng_normal(&r));
    for (int64_t i = 0; i < R; i++)
        yh[i] = ignore_every && i % ignore_every == 0 ? -100 : (int32_t)(glia__rng_next(&r) % (uint64_t)C);
    struct glia_tensor *x, *dx, *y, *out, *dout;
    CU_ASSERT_FATAL(glia_tensor_new(b, GLIA_F32, &xs, &x) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(b, GLIA_F32, &xs, &dx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(b, GLIA_I32, &ys, &y) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(b, GLIA_F32, &one, &out) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(b, GLIA_F32, &one, &dout) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_from_host(y, yh, sizeof(int32_t) * (size_t)R) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_from_host(dout, &scale, sizeof scale) == GLIA_OK);
    const struct glia_tensor *in[1] = {x};
    bool acc[1] = {false};
    for (int k = 0; k < 2; k++) {
        CU_ASSERT_FATAL(glia_tensor_from_host(x, xh, sizeof(float) * (size_t)(R * C)) == GLIA_OK);
        struct glia_tensor *d = k ? x : dx;  /* k = 1: the gradient over the logits, written in the forward */
        struct glia_fwd fa = {in, 1, out, y, true, 1, false, 0, NULL, false, 0, k ? x : NULL, k ? dout : NULL, NULL, NULL, false, NULL, NULL};
        struct glia_tensor *din[1] = {d};
        struct glia_bwd ba = {in, 1, out, dout, din, acc, y, NULL, NULL, NULL, false};
        glia_status st = l->kernel->forward(l, &fa);
        if (!st && k) {  /* written by the forward already: the logits are gone */
            CU_ASSERT_FATAL(glia_tensor_to_host(x, g2, sizeof(float) * (size_t)(R * C)) == GLIA_OK);
            CU_ASSERT_EQUAL(memcmp(g1, g2, sizeof(float) * (size_t)(R * C)), 0);
        }
        if (!st) st = l->kernel->backward(l, &ba);
        if (st) printf("\n  %s\n", glia_context_error(l->ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_to_host(d, k ? g2 : g1, sizeof(float) * (size_t)(R * C)) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_to_host(out, &loss[k], sizeof(float)) == GLIA_OK);
    }
    {  /* the logits overwritten, a backward that asks for the gradient elsewhere is refused */
        CU_ASSERT_FATAL(glia_tensor_from_host(x, xh, sizeof(float) * (size_t)(R * C)) == GLIA_OK);
        struct glia_fwd fa = {in, 1, out, y, true, 1, false, 0, NULL, false, 0, x, dout, NULL, NULL, false, NULL, NULL};
        struct glia_tensor *din[1] = {dx};
        struct glia_bwd ba = {in, 1, out, dout, din, acc, y, NULL, NULL, NULL, false};
        CU_ASSERT_EQUAL_FATAL(l->kernel->forward(l, &fa), GLIA_OK);
        CU_ASSERT_EQUAL(l->kernel->backward(l, &ba), GLIA_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(l->ctx), "wrote its gradient over the logits"));
    }
    int64_t differ = 0;
    for (int64_t i = 0; i < R * C; i++) differ += memcmp(&g1[i], &g2[i], sizeof(float)) != 0;
    if (differ || memcmp(&loss[0], &loss[1], sizeof(float)))
        printf("\n  %lld x %lld, ignore every %d: %lld gradients differ, loss %.9g vs %.9g\n", (long long)R, (long long)C,
               ignore_every, (long long)differ, loss[0], loss[1]);
    CU_ASSERT_EQUAL(differ, 0);
    CU_ASSERT_EQUAL(memcmp(&loss[0], &loss[1], sizeof(float)), 0);
    float any = 0;
    for (int64_t i = 0; i < R * C; i++) any += fabsf(g1[i]);
    CU_ASSERT(any > 0 || ignore_every == 1);  /* not a pair of zero gradients */
    glia_tensor_release(x), glia_tensor_release(dx), glia_tensor_release(y), glia_tensor_release(out);
    glia_tensor_release(dout);
    free(xh), free(g1), free(g2), free(yh);
}

#endif
