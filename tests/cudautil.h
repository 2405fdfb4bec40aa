/* tests/cudautil.h — what the GPU test programs share: a main() that skips without a GPU, and
 * cuda_compare, which runs one layer's CPU impl and CUDA impl on equal inputs and weights.
 * Not for machines without CUDA: every program using it exits 77 there. */
#ifndef GLIA_CUDAUTIL_H
#define GLIA_CUDAUTIL_H

#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <glia/half.h>
#include "layerutil.h"
#include "build-config.h"

static struct glia_context *cuda_ctx;
static struct glia_backend *cuda_gpu, *cuda_cpu;

struct cuda_case {
    const char *ini;                  /* one layer section, e.g. "[l]\ntype = linear\noutputs = 7\n" */
    const struct glia_shape *in;      /* n_in input shapes (NCHW order) */
    int n_in;
    enum glia_precision precision;    /* of the CUDA run (the CPU runs fp32) */
    enum glia_memory_format format;   /* of the CUDA run's 4-D tensors (the CPU runs contiguous) */
    bool eval;                        /* forward in eval mode only (no backward) */
    bool accumulate;                  /* backward adds onto gradients of 1 (else writes over NaN) */
    const char *impl;                 /* CUDA impl; NULL: the type's first CUDA impl */
    uint64_t seed;                    /* of inputs, weights, output gradient, labels */
    enum glia_dtype act;              /* of the CUDA run's activations (inputs, output and their gradients, a loss's
                                         output and its scale f32; the
                                         kernel needs GLIA_KERNEL_HALF for f16, bf16): the values of the inputs and
                                         the output gradient are rounded to it for both runs, the CPU's computing
                                         on them in f32. 0: GLIA_F32 */
    const char *din_act;              /* backward applies this activation's gradient to din[0] (glia_bwd.din_act) at a
                                         random pre-activation of input 0's shape (rounded to act); NULL: none */
};

/* A loss layer's labels in the cases that follow: every cuda_ignore_every-th one (from the first) is -100,
 * ignore_index's default (0: none). */
static int cuda_ignore_every;

/* Largest |cpu - gpu| / max(1, |cpu|) of each group of tensors. */
struct cuda_diff {
    double out, din, dparam, buffers;
};

/* Whether the CUDA backend runs on the emulator (tests/emu: libglia-cudaemu.so is loaded with cuda.so there only). */
static inline bool cuda_emulated(void)
{
    void *h = dlopen("libglia-cudaemu.so", RTLD_NOW | RTLD_NOLOAD);
    if (h) dlclose(h);
    return h != NULL;
}

/* Default tolerances per precision of the CUDA run. */
static inline double cuda_tol(enum glia_precision p)
{
    switch (p) {
    case GLIA_PRECISION_TF32: return 5e-3;
    case GLIA_PRECISION_BF16: return 4e-2;
    case GLIA_PRECISION_FP16: return 5e-3;
    default: return 1e-4;
    }
}

/* One layer built on one device: its ops, the layer, and where its tensors live. */
struct cuda_built {
    struct glia_config *cfg;
    const struct glia_layer_type *type;
    const struct glia_kernel *kernel;
    struct glia_layer l;
    struct glia_backend *b;
};

/* Builds the layer section of `ini` with the impl for backend b (impl NULL: the first impl of
 * that device type). Parameter and buffer storage is allocated, contents undefined. */
static inline void cuda_build(const char *ini, const char *impl, struct glia_backend *b, const struct glia_shape *in,
                              int n_in, struct cuda_built *B)
{
    memset(B, 0, sizeof *B);
    B->b = b;
    CU_ASSERT_FATAL(glia_config_parse_string(cuda_ctx, "layer.ini", ini, &B->cfg) == GLIA_OK);
    struct glia_section *s = B->cfg->sections[0];
    const char *type = glia__section_entry(s, "type")->value;
    CU_ASSERT_FATAL(glia_plugin_load(cuda_ctx, type) == GLIA_OK);  /* the CPU impl's plugin (no-op when loaded) */
    B->type = glia__find_type(cuda_ctx, type);
    B->kernel = impl ? glia__find_kernel(cuda_ctx, type, impl) : glia__find_kernel_for(cuda_ctx, type, b->device.type);
    if (B->kernel && B->kernel->device_type != b->device.type) B->kernel = NULL;
    if (!B->kernel) printf("\n  no %s kernel of layer type '%s'\n", b->ops->name, type);
    CU_ASSERT_PTR_NOT_NULL_FATAL(B->type);
    CU_ASSERT_PTR_NOT_NULL_FATAL(B->kernel);
    const struct glia_key *sch[] = {glia__core_schema("layer"), B->type->keys};
    CU_ASSERT_FATAL(glia__section_validate(s, sch, 2) == GLIA_OK);
    B->l = (struct glia_layer){.name = s->name, .type = B->type, .kernel = B->kernel, .ctx = cuda_ctx, .backend = b};
    bool created;
    glia_status st = glia__layer_create(&B->l, s, in, n_in, &created);
    if (st) printf("\n  create: %s\n", glia_context_error(cuda_ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    for (int i = 0; i < B->l.n_params; i++) {
        struct glia_param *p = &B->l.params[i];
        CU_ASSERT_FATAL(glia_tensor_new(b, GLIA_F32, &p->shape, &p->value) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_new(b, GLIA_F32, &p->shape, &p->grad) == GLIA_OK);
    }
    for (int i = 0; i < B->l.n_buffers; i++) {
        struct glia_param *p = &B->l.buffers[i];
        CU_ASSERT_FATAL(glia_tensor_new(b, GLIA_F32, &p->shape, &p->value) == GLIA_OK);
    }
}

static inline void cuda_unbuild(struct cuda_built *B)
{
    layer_destroy(&B->l);
    glia_config_free(B->cfg);
}

/* A tensor of shape s in format f on backend b holding the host values v (logical NCHW order). */
static inline struct glia_tensor *cuda_put(struct glia_backend *b, struct glia_shape s, enum glia_memory_format f,
                                           const float *v)
{
    struct glia_tensor *h = tensor_as(cuda_cpu, s, GLIA_CONTIGUOUS), *hf = tensor_as(cuda_cpu, s, f);
    memcpy(glia_tensor_f32(h), v, glia_tensor_nbytes(h));
    CU_ASSERT_FATAL(glia_tensor_convert(hf, h, false) == GLIA_OK);
    struct glia_tensor *t = tensor_as(b, s, f);
    CU_ASSERT_FATAL(glia_tensor_from_host(t, glia_tensor_f32(hf), glia_tensor_nbytes(hf)) == GLIA_OK);
    glia_tensor_release(h);
    glia_tensor_release(hf);
    return t;
}

/* v(n) rounded to dtype t (f32: as it is). */
static inline void cuda_round(float *v, int64_t n, enum glia_dtype t)
{
    for (int64_t i = 0; i < n && t != GLIA_F32; i++) {
        uint16_t h = t == GLIA_BF16 ? glia_f32_to_bf16(v[i]) : glia_f32_to_f16(v[i]);
        v[i] = t == GLIA_BF16 ? glia_bf16_to_f32(h) : glia_f16_to_f32(h);
    }
}

/* t as a tensor of dtype dt on its device, in its format (t itself, retained, when it is of dt already). */
static inline struct glia_tensor *cuda_as_dtype(struct glia_tensor *t, enum glia_dtype dt)
{
    if (t->dtype == dt) return glia_tensor_retain(t);
    struct glia_tensor *flat, *v;
    struct glia_shape fs = glia_shape_make(1, (int64_t[]){glia_tensor_numel(t)});
    CU_ASSERT_FATAL(glia_tensor_new(glia_tensor_backend(t), dt, &fs, &flat) == GLIA_OK);
    CU_ASSERT_FATAL(glia__tensor_view_typed(flat, 0, dt, &t->shape, glia_tensor_memory_format(t), &v) == GLIA_OK);
    glia_tensor_release(flat);
    CU_ASSERT_FATAL(glia_tensor_convert(v, t, false) == GLIA_OK);
    return v;
}

/* t (released) replaced by the same values in dtype dt. */
static inline struct glia_tensor *cuda_swap_dtype(struct glia_tensor *t, enum glia_dtype dt)
{
    struct glia_tensor *v = cuda_as_dtype(t, dt);
    glia_tensor_release(t);
    return v;
}

/* A host tensor (in t's format) holding t's values. */
static inline struct glia_tensor *cuda_get(const struct glia_tensor *t)
{
    enum glia_memory_format f = glia_tensor_memory_format(t);
    struct glia_tensor *h = tensor_as(cuda_cpu, t->shape, f);
    CU_ASSERT_FATAL(glia_tensor_to_host(t, glia_tensor_f32(h), glia_tensor_nbytes(h)) == GLIA_OK);
    return h;
}

static inline void cuda_randn(struct glia_rng *r, float *v, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++) v[i] = scale * (float)glia__rng_normal(r);
}

static inline double cuda_diff_of(const struct glia_tensor *cpu, const struct glia_tensor *gpu)
{
    struct glia_tensor *g32 = cuda_as_dtype((struct glia_tensor *)gpu, GLIA_F32), *h = cuda_get(g32);
    glia_tensor_release(g32);
    double d = max_diff(cpu, h);
    glia_tensor_release(h);
    return d;
}

/* Runs the layer's CPU impl (fp32, contiguous) and CUDA impl (k->precision, k->format) from equal
 * weights, buffers, inputs, labels and output gradient; returns the largest differences. The inputs
 * named in the bit mask int_inputs are i32 ids in [0, int_high) instead (token batches: the same ids
 * on both, no gradient). */
static inline struct cuda_diff cuda_compare_ids(const struct cuda_case *k, uint32_t int_inputs, int32_t int_high)
{
    struct cuda_diff d = {0, 0, 0, 0};
    enum glia_dtype at = k->act;
    struct glia_runtime_options o = cuda_gpu->options;
    o.precision = k->precision;
    CU_ASSERT_FATAL(glia_backend_configure(cuda_gpu, &o) == GLIA_OK);
    struct cuda_built C, G;
    cuda_build(k->ini, "cpu", cuda_cpu, k->in, k->n_in, &C);
    cuda_build(k->ini, k->impl, cuda_gpu, k->in, k->n_in, &G);
    CU_ASSERT_FATAL(C.l.n_params == G.l.n_params && C.l.n_buffers == G.l.n_buffers);
    bool loss = C.type->flags & GLIA_TYPE_LOSS;
    enum glia_memory_format gf = (G.kernel->flags & GLIA_KERNEL_CHANNELS_LAST) ? k->format : GLIA_CONTIGUOUS;
    CU_ASSERT_FATAL(at == GLIA_F32 || (G.kernel->flags & GLIA_KERNEL_HALF));
    struct glia_shape os;
    CU_ASSERT_FATAL(C.type->infer_shape(&C.l, k->in, k->n_in, &os) == GLIA_OK);
    struct glia_rng rng;
    glia__rng_seed(&rng, k->seed);
    /* weights and buffers: the same random values on both (buffers: positive, like variances) */
    for (int p = 0; p < C.l.n_params + C.l.n_buffers; p++) {
        bool buf = p >= C.l.n_params;
        struct glia_param *pc = buf ? &C.l.buffers[p - C.l.n_params] : &C.l.params[p];
        struct glia_param *pg = buf ? &G.l.buffers[p - C.l.n_params] : &G.l.params[p];
        CU_ASSERT_FATAL(!strcmp(pc->name, pg->name) && glia_shape_equal(&pc->shape, &pg->shape));
        int64_t n = glia_tensor_numel(pc->value);
        float *v = glia_tensor_f32(pc->value);
        cuda_randn(&rng, v, n, 0.5f);
        if (buf)
            for (int64_t i = 0; i < n; i++) v[i] = fabsf(v[i]) + 0.5f;
        CU_ASSERT_FATAL(glia_tensor_from_host(pg->value, v, glia_tensor_nbytes(pc->value)) == GLIA_OK);
    }
    /* inputs, labels, output gradient */
    struct glia_tensor *xc[GLIA__MAX_INPUTS], *xg[GLIA__MAX_INPUTS], *dxc[GLIA__MAX_INPUTS], *dxg[GLIA__MAX_INPUTS];
    for (int i = 0; i < k->n_in; i++) {
        int64_t n = glia_shape_numel(&k->in[i]);
        if ((int_inputs >> i) & 1u) {
            int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
            for (int64_t j = 0; j < n; j++) ids[j] = (int32_t)(glia__rng_next(&rng) % (uint64_t)int_high);
            CU_ASSERT_FATAL(glia_tensor_new(cuda_cpu, GLIA_I32, &k->in[i], &xc[i]) == GLIA_OK);
            CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, GLIA_I32, &k->in[i], &xg[i]) == GLIA_OK);
            CU_ASSERT_FATAL(glia_tensor_from_host(xc[i], ids, sizeof(int32_t) * (size_t)n) == GLIA_OK);
            CU_ASSERT_FATAL(glia_tensor_from_host(xg[i], ids, sizeof(int32_t) * (size_t)n) == GLIA_OK);
            dxc[i] = dxg[i] = NULL;
            free(ids);
            continue;
        }
        float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
        cuda_randn(&rng, v, n, 1.0f);
        cuda_round(v, n, at);
        xc[i] = cuda_put(cuda_cpu, k->in[i], GLIA_CONTIGUOUS, v);
        xg[i] = cuda_swap_dtype(cuda_put(cuda_gpu, k->in[i], gf, v), at);
        for (int64_t j = 0; j < n; j++) v[j] = k->accumulate ? 1.0f : NAN;
        dxc[i] = cuda_put(cuda_cpu, k->in[i], GLIA_CONTIGUOUS, v);
        dxg[i] = cuda_swap_dtype(cuda_put(cuda_gpu, k->in[i], gf, v), at);
        free(v);
    }
    struct glia_tensor *yc[2] = {NULL, NULL}, *yg[2] = {NULL, NULL};  /* labels */
    if (loss) {
        /* the logits' shape without its last dimension: (N) or (N, T) */
        struct glia_shape ls = k->in[0];
        int64_t classes = ls.dim[--ls.ndim], n = glia_shape_numel(&ls);
        int32_t *lab = malloc(sizeof(int32_t) * (size_t)n);
        for (int64_t j = 0; j < n; j++) lab[j] = (int32_t)(glia__rng_next(&rng) % (uint64_t)classes);
        for (int64_t j = 0; cuda_ignore_every > 0 && j < n; j += cuda_ignore_every) lab[j] = -100;
        CU_ASSERT_FATAL(glia_tensor_new(cuda_cpu, GLIA_I32, &ls, &yc[0]) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, GLIA_I32, &ls, &yg[0]) == GLIA_OK);
        glia_tensor_from_host(yc[0], lab, sizeof(int32_t) * (size_t)n);
        glia_tensor_from_host(yg[0], lab, sizeof(int32_t) * (size_t)n);
        free(lab);
    }
    int64_t on = glia_shape_numel(&os);
    float *ov = malloc(sizeof(float) * (size_t)(on ? on : 1));
    cuda_randn(&rng, ov, on, 1.0f);
    if (loss) ov[0] = 0.5f;
    enum glia_dtype ot = loss ? GLIA_F32 : at;  /* a loss's output and its scale stay f32 (half logits: GLIA_KERNEL_HALF) */
    cuda_round(ov, on, ot);
    struct glia_tensor *outc = tensor_as(cuda_cpu, os, GLIA_CONTIGUOUS), *outg = tensor_as(cuda_gpu, os, gf);
    struct glia_tensor *doutc = cuda_put(cuda_cpu, os, GLIA_CONTIGUOUS, ov), *doutg = cuda_put(cuda_gpu, os, gf, ov);
    outg = cuda_swap_dtype(outg, ot);  /* its garbage converted: the kernel writes it whole */
    doutg = cuda_swap_dtype(doutg, ot);
    free(ov);
    /* forward, with the saved memory each kernel asks for (glia_kernel.saved_size), as a model plans it */
    const struct glia_tensor *inc[GLIA__MAX_INPUTS], *ing[GLIA__MAX_INPUTS];
    for (int i = 0; i < k->n_in; i++) inc[i] = xc[i], ing[i] = xg[i];
    struct glia_tensor *sc = NULL, *sg = NULL;
    size_t sbc = glia_kernel_saved_size(C.kernel, &C.l, k->in, k->n_in, GLIA_F32),
           sbg = glia_kernel_saved_size(G.kernel, &G.l, k->in, k->n_in, at);
    struct glia_shape ssc = S(1, (int64_t)(sbc + 3) / 4, 0, 0, 0), ssg = S(1, (int64_t)(sbg + 3) / 4, 0, 0, 0);
    if (sbc) CU_ASSERT_FATAL(glia_tensor_new(cuda_cpu, GLIA_F32, &ssc, &sc) == GLIA_OK);
    if (sbg) CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, GLIA_F32, &ssg, &sg) == GLIA_OK);
    struct glia_fwd fc = {inc, k->n_in, outc, yc[0], !k->eval, 77, false, 0, NULL, false, 0, NULL, NULL,
                          sc ? sc->data : NULL, NULL, false, NULL, NULL},
                    fg = {ing, k->n_in, outg, yg[0], !k->eval, 77, false, 0, NULL, false, 0, NULL, NULL,
                          sg ? sg->data : NULL, NULL, false, NULL, NULL};
    CU_ASSERT_FATAL(C.kernel->forward(&C.l, &fc) == GLIA_OK);
    glia_status st = G.kernel->forward(&G.l, &fg);
    if (st) printf("\n  cuda forward: %s\n", glia_context_error(cuda_ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    d.out = cuda_diff_of(outc, outg);
    if (ot != GLIA_F32) {  /* a backward that reads the output gets the rounded one on both sides */
        struct glia_tensor *g32 = cuda_as_dtype(outg, GLIA_F32), *h = cuda_get(g32);
        CU_ASSERT_FATAL(glia_tensor_convert(outc, h, false) == GLIA_OK);
        glia_tensor_release(g32);
        glia_tensor_release(h);
    }
    /* backward */
    if (!k->eval && C.kernel->backward) {
        CU_ASSERT_PTR_NOT_NULL_FATAL(G.kernel->backward);
        for (int p = 0; p < C.l.n_params; p++) {
            struct glia_param *pc = &C.l.params[p], *pg = &G.l.params[p];
            int64_t n = glia_tensor_numel(pc->grad);
            float *g = glia_tensor_f32(pc->grad);
            for (int64_t i = 0; i < n; i++) g[i] = k->accumulate ? 1.0f : NAN;
            CU_ASSERT_FATAL(glia_tensor_from_host(pg->grad, g, glia_tensor_nbytes(pc->grad)) == GLIA_OK);
            pc->grad_unset = pg->grad_unset = !k->accumulate;
        }
        struct glia_tensor *prec = NULL, *preg = NULL;  /* din_act's pre-activation */
        if (k->din_act) {
            int64_t n = glia_shape_numel(&k->in[0]);
            float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
            cuda_randn(&rng, v, n, 1.5f);
            cuda_round(v, n, at);
            prec = cuda_put(cuda_cpu, k->in[0], GLIA_CONTIGUOUS, v);
            preg = cuda_swap_dtype(cuda_put(cuda_gpu, k->in[0], gf, v), at);
            free(v);
        }
        bool acc[GLIA__MAX_INPUTS];
        struct glia_tensor *dinc[GLIA__MAX_INPUTS], *ding[GLIA__MAX_INPUTS];
        for (int i = 0; i < k->n_in; i++) acc[i] = k->accumulate, dinc[i] = dxc[i], ding[i] = dxg[i];
        if (k->din_act) acc[0] = false;  /* written, never added (the parameters' gradients may still be) */
        struct glia_bwd bc = {inc, k->n_in, outc, doutc, dinc, acc, yc[0], sc ? sc->data : NULL, NULL, NULL, false},
                        bg = {ing, k->n_in, outg, doutg, ding, acc, yg[0], sg ? sg->data : NULL, NULL, NULL, false};
        if (k->din_act) {
            bc.din_act = bg.din_act = k->din_act;
            bc.din_act_pre = prec->data;
            bg.din_act_pre = preg->data;
        }
        CU_ASSERT_FATAL(C.kernel->backward(&C.l, &bc) == GLIA_OK);
        st = G.kernel->backward(&G.l, &bg);
        glia_tensor_release(prec), glia_tensor_release(preg);
        if (st) printf("\n  cuda backward: %s\n", glia_context_error(cuda_ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        for (int i = 0; i < k->n_in; i++)
            if (dxc[i]) d.din = fmax(d.din, cuda_diff_of(dxc[i], dxg[i]));
        for (int p = 0; p < C.l.n_params; p++) d.dparam = fmax(d.dparam, cuda_diff_of(C.l.params[p].grad, G.l.params[p].grad));
    }
    for (int p = 0; p < C.l.n_buffers; p++)
        d.buffers = fmax(d.buffers, cuda_diff_of(C.l.buffers[p].value, G.l.buffers[p].value));
    for (int i = 0; i < k->n_in; i++) {
        glia_tensor_release(xc[i]), glia_tensor_release(xg[i]);
        glia_tensor_release(dxc[i]), glia_tensor_release(dxg[i]);
    }
    glia_tensor_release(yc[0]), glia_tensor_release(yg[0]);
    glia_tensor_release(outc), glia_tensor_release(outg), glia_tensor_release(doutc), glia_tensor_release(doutg);
    glia_tensor_release(sc), glia_tensor_release(sg);
    cuda_unbuild(&C);
    cuda_unbuild(&G);
    return d;
}

/* cuda_compare_ids with f32 inputs only. */
static inline struct cuda_diff cuda_compare(const struct cuda_case *k) { return cuda_compare_ids(k, 0, 0); }

/* cuda_compare_ids with every difference at most tol. */
static inline void cuda_expect_ids(const struct cuda_case *k, uint32_t int_inputs, int32_t int_high, double tol)
{
    struct cuda_diff d = cuda_compare_ids(k, int_inputs, int_high);
    bool ok = d.out <= tol && d.din <= tol && d.dparam <= tol && d.buffers <= tol;
    if (!ok) {
        char s[64];
        printf("\n  %s  input %s, %s, %s, %s%s: out %.3g din %.3g dparam %.3g buffers %.3g (tol %.3g)\n", k->ini,
               glia_shape_str(&k->in[0], s, sizeof s), glia_precision_name(k->precision),
               glia_memory_format_name(k->format), k->eval ? "eval" : "train", k->accumulate ? ", accumulate" : "",
               d.out, d.din, d.dparam, d.buffers, tol);
    }
    CU_ASSERT(ok);
}

/* cuda_compare with every difference at most tol. */
static inline void cuda_expect(const struct cuda_case *k, double tol) { cuda_expect_ids(k, 0, 0, tol); }

/* Loads the CUDA backend; 77 (skip) when this build or machine has none. */
static inline int cuda_setup(void)
{
#ifndef GLIA_HAVE_CUDA
    printf("skipped: glia was built without CUDA\n");
    return 77;
#else
    if (glia_context_new(&cuda_ctx)) return 1;
    glia_status st = glia_plugin_load(cuda_ctx, "cuda");
    if (!st) st = glia_backend_get(cuda_ctx, (struct glia_device){GLIA_DEVICE_CUDA, 0}, &cuda_gpu);
    if (st) {
        printf("skipped: no usable GPU: %s\n", glia_context_error(cuda_ctx));
        glia_context_free(cuda_ctx);
        return 77;
    }
    return glia_backend_get(cuda_ctx, (struct glia_device){GLIA_DEVICE_CPU, 0}, &cuda_cpu) ? 1 : 0;
#endif
}

#define CUDA_TEST_MAIN(suite, ...)                                                       \
    int main(void)                                                                       \
    {                                                                                    \
        int s_ = cuda_setup();                                                           \
        if (s_) return s_;                                                               \
        static const struct glia_test tests_[] = {__VA_ARGS__};                         \
        int rc_ = glia_test_run(suite, tests_, (int)(sizeof tests_ / sizeof tests_[0])); \
        glia_context_free(cuda_ctx);                                                     \
        return rc_;                                                                      \
    }

/* The impl `impl` of `ini` on the GPU twice on the same input (training forward and backward, gradients
 * written): the same bits both times (no float atomics). */
static inline void cuda_repeatable(const char *impl, const char *ini, struct glia_shape s, enum glia_memory_format f)
{
    struct cuda_built G;
    cuda_build(ini, impl, cuda_gpu, &s, 1, &G);
    struct glia_shape os;
    CU_ASSERT_FATAL(G.type->infer_shape(&G.l, &s, 1, &os) == GLIA_OK);
    struct glia_rng rng;
    glia__rng_seed(&rng, 4);
    int64_t n = glia_shape_numel(&s), on = glia_shape_numel(&os);
    float *v = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)on);
    for (int p = 0; p < G.l.n_params + G.l.n_buffers; p++) {
        struct glia_param *pa = p < G.l.n_params ? &G.l.params[p] : &G.l.buffers[p - G.l.n_params];
        int64_t m = glia_tensor_numel(pa->value);
        float *w = malloc(sizeof(float) * (size_t)m);
        for (int64_t i = 0; i < m; i++) w[i] = 1.0f + 0.25f * (float)glia__rng_normal(&rng);
        CU_ASSERT_FATAL(glia_tensor_from_host(pa->value, w, sizeof(float) * (size_t)m) == GLIA_OK);
        free(w);
    }
    cuda_randn(&rng, v, n, 3.0f);
    cuda_randn(&rng, g, on, 1.0f);
    struct glia_tensor *x = cuda_put(cuda_gpu, s, f, v), *dy = cuda_put(cuda_gpu, os, f, g);
    struct glia_tensor *res[2][2 + 8];
    int nres = 2 + (G.l.n_params < 8 ? G.l.n_params : 8);
    for (int r = 0; r < 2; r++) {
        struct glia_tensor *y = tensor_as(cuda_gpu, os, f), *dx = tensor_as(cuda_gpu, s, f);
        const struct glia_tensor *in[1] = {x};
        struct glia_tensor *din[1] = {dx};
        bool acc[1] = {false};
        for (int p = 0; p < G.l.n_params; p++) G.l.params[p].grad_unset = true;
        struct glia_fwd fa = {in, 1, y, NULL, true, 77, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        struct glia_bwd ba = {in, 1, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
        CU_ASSERT_FATAL(G.kernel->forward(&G.l, &fa) == GLIA_OK && G.kernel->backward(&G.l, &ba) == GLIA_OK);
        res[r][0] = cuda_get(y);
        res[r][1] = cuda_get(dx);
        for (int p = 0; p + 2 < nres; p++) res[r][2 + p] = cuda_get(G.l.params[p].grad);
        glia_tensor_release(y);
        glia_tensor_release(dx);
    }
    for (int i = 0; i < nres; i++) {
        bool same = !memcmp(glia_tensor_f32(res[0][i]), glia_tensor_f32(res[1][i]), glia_tensor_nbytes(res[0][i]));
        if (!same) printf("\n  %s %s: result %d differs between two runs\n", ini, glia_memory_format_name(f), i);
        CU_ASSERT(same);
        glia_tensor_release(res[0][i]);
        glia_tensor_release(res[1][i]);
    }
    glia_tensor_release(x);
    glia_tensor_release(dy);
    free(v);
    free(g);
    cuda_unbuild(&G);
}

#endif
