/* tests/test_cuda_norm_pool.c — the CUDA impls of batchnorm, maxpool2d, avgpool2d, global_avgpool and concat
 * against their CPU impls on a GPU: both memory formats, write and accumulate, train and eval, odd sizes,
 * batch 1, overlapping and padded windows, ties, repeatability and refusals. Exits 77 (skipped) without a
 * usable GPU or without the CUDA build. Not a test of the CPU semantics: test_bn, test_pool and test_layers. */
#include <dlfcn.h>
#include "cudautil.h"

static const enum glia_memory_format formats[2] = {GLIA_CONTIGUOUS, GLIA_CHANNELS_LAST};

/* Every format x {write, accumulate} (and, with eval_too, an eval forward) of one layer and input set. */
static void expect_all(const char *ini, const struct glia_shape *in, int n_in, bool eval_too, double tol)
{
    for (int f = 0; f < 2; f++) {
        for (int acc = 0; acc < 2; acc++) {
            struct cuda_case k = {.ini = ini, .in = in, .n_in = n_in, .format = formats[f], .accumulate = acc,
                                  .seed = 11 + 7 * (uint64_t)acc + 3 * (uint64_t)f};
            cuda_expect(&k, tol);
        }
        if (eval_too) {
            struct cuda_case k = {.ini = ini, .in = in, .n_in = n_in, .format = formats[f], .eval = true, .seed = 5};
            cuda_expect(&k, tol);
        }
    }
}

/* ---- batchnorm ---- */

static void test_batchnorm(void)
{
    const char *inis[] = {
        "[b]\ntype = batchnorm\n",
        "[b]\ntype = batchnorm\nmomentum = 0.3\neps = 1e-3\n",
        "[b]\ntype = batchnorm\naffine = off\n",
        "[b]\ntype = batchnorm\ntrack_running_stats = off\n",
        "[b]\ntype = batchnorm\nactivation = relu\n",
    };
    struct glia_shape shapes[] = {
        S(4, 3, 7, 9, 5),    /* odd sizes */
        S(4, 1, 5, 4, 6),    /* batch 1 */
        S(4, 2, 1, 3, 3),    /* one channel: both formats are the same bytes */
        S(4, 4, 6, 1, 1),    /* 1x1 planes */
        S(4, 8, 40, 11, 13), /* several splits per channel in both layouts */
        S(2, 6, 5, 0, 0),    /* BatchNorm1d */
        S(2, 37, 70, 0, 0),  /* 2-D, more than one tile of channels */
    };
    for (size_t i = 0; i < sizeof inis / sizeof inis[0]; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) expect_all(inis[i], &shapes[s], 1, true, 1e-4);
}

/* Many splits per channel (hundreds: the finalizes' lanes each take several, in both layouts), channel counts
 * off the rows tile (5, 37) and on the float4 paths (16: rows with C % 4 == 0, 28x28 planes with L % 4 == 0),
 * with and without relu, training and eval, write and accumulate: as the CPU impl. */
static void test_batchnorm_many_splits(void)
{
    const char *inis[] = {"[b]\ntype = batchnorm\n", "[b]\ntype = batchnorm\nactivation = relu\n"};
    struct glia_shape shapes[] = {
        S(4, 16, 16, 28, 28), /* fmnist's stem at batch 16: 196 splits as rows, 24 per plane channel */
        S(4, 37, 5, 13, 11),  /* C off every tile, L odd: scalar paths */
        S(4, 5, 40, 9, 3),    /* C < 8: rows tile of 8 */
        S(2, 16, 3000, 0, 0), /* 2-D rows, 93 splits */
        S(4, 8, 2, 1, 1),     /* L = 1 in NCHW, N = 2 */
    };
    for (size_t i = 0; i < sizeof inis / sizeof inis[0]; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) expect_all(inis[i], &shapes[s], 1, true, 1e-4);
}

/* The batchnorm geometry of cuda.so (glia__cuda_bn_geom, found next to the kernel's code). */
typedef struct glia__bn_geom_t {
    int64_t N, C, L;
    int S;
} bn_geom_t;
typedef bn_geom_t (*bn_geom_fn)(int64_t N, int64_t C, int64_t L);

static bn_geom_fn bn_geom_of_cuda(void)
{
    const struct glia_kernel *k = glia__find_kernel(cuda_ctx, "batchnorm", "cuda");
    Dl_info info;
    if (!k || !dladdr((void *)(uintptr_t)k->forward, &info)) return NULL;
    void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    bn_geom_fn f = h ? (bn_geom_fn)(uintptr_t)dlsym(h, "glia__cuda_bn_geom") : NULL;
    if (h) dlclose(h);  /* the registry still holds it */
    return f;
}

/* The statistics pass fills the GPU: at fmnist's (64x16x28x28) and ResNet-50's (256x64x56x56, 256x256x14x14)
 * batchnorm shapes, in both layouts, at least a full wave of 132 SMs x 8 blocks of 256 threads (or, for a tensor
 * too small for that, a block per 512 values), each block with at least 2 values a thread; splits stay within
 * the grid's limit. */
static void test_batchnorm_geometry(void)
{
    if (!glia__find_type(cuda_ctx, "batchnorm")) CU_ASSERT_FATAL(glia_plugin_load(cuda_ctx, "batchnorm") == GLIA_OK);
    bn_geom_fn geom = bn_geom_of_cuda();
    CU_ASSERT_PTR_NOT_NULL_FATAL(geom);
    const int64_t shapes[][4] = {{64, 16, 28, 28}, {256, 64, 56, 56}, {64, 32, 14, 14}, {256, 256, 14, 14}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t *d = shapes[i];
        int64_t HW = d[2] * d[3], M = d[0] * HW;
        for (int rows = 0; rows < 2; rows++) {
            bn_geom_t g = rows ? geom(M, d[1], 1) : geom(d[0], d[1], HW);
            int64_t tile = 1;
            while (tile < 32 && tile < d[1]) tile <<= 1;
            int64_t units = rows ? (d[1] + tile - 1) / tile : d[1], blocks = units * g.S;
            int64_t least = rows ? 2 * 256 / tile : 2 * 256;  /* values of a channel a block needs, at least */
            int64_t wave = 132 * 8, most = units * (M / least);
            bool ok = blocks >= (wave < most ? wave : most) && M / g.S >= least && g.S <= 65535;
            if (!ok) printf("\n  %lldx%lldx%lldx%lld %s: S %d, %lld blocks\n", (long long)d[0], (long long)d[1],
                            (long long)d[2], (long long)d[3], rows ? "rows" : "planes", g.S, (long long)blocks);
            CU_ASSERT(ok);
        }
    }
}

/* A batch of 1 in BatchNorm1d trains on one value per channel: refused like the CPU impl; eval runs. */
static void test_batchnorm_batch1_2d(void)
{
    struct glia_shape s = S(2, 1, 5, 0, 0);
    struct cuda_case k = {.ini = "[b]\ntype = batchnorm\n", .in = &s, .n_in = 1, .eval = true, .seed = 3};
    cuda_expect(&k, 1e-4);
    struct cuda_built G;
    cuda_build(k.ini, "cuda", cuda_gpu, &s, 1, &G);
    struct glia_tensor *x = tensor_as(cuda_gpu, s, GLIA_CONTIGUOUS), *y = tensor_as(cuda_gpu, s, GLIA_CONTIGUOUS);
    const struct glia_tensor *xi[1] = {x};
    struct glia_fwd fa = {xi, 1, y, NULL, true, 77, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL(G.kernel->forward(&G.l, &fa), GLIA_ESHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(cuda_ctx), "more than 1 value per channel"));
    glia_tensor_release(x);
    glia_tensor_release(y);
    cuda_unbuild(&G);
}

/* ---- pooling ---- */

static void test_maxpool(void)
{
    const char *inis[] = {
        "[p]\ntype = maxpool2d\n",                                /* 2x2, stride 2 */
        "[p]\ntype = maxpool2d\nsize = 3\nstride = 2\n",          /* overlapping windows */
        "[p]\ntype = maxpool2d\nsize = 3\nstride = 2\npadding = 1\n",
        "[p]\ntype = maxpool2d\nsize = 3\nstride = 1\npadding = 1\n",
        "[p]\ntype = maxpool2d\nsize = 2\nstride = 3\n",          /* gaps between windows */
        "[p]\ntype = maxpool2d\nsize = 5\nstride = 2\npadding = 2\n",
    };
    struct glia_shape shapes[] = {S(4, 3, 7, 9, 5), S(4, 1, 4, 6, 7), S(4, 2, 1, 8, 8), S(4, 2, 33, 10, 11)};
    for (size_t i = 0; i < sizeof inis / sizeof inis[0]; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) expect_all(inis[i], &shapes[s], 1, true, 1e-4);
}

static void test_avgpool(void)
{
    const char *inis[] = {
        "[p]\ntype = avgpool2d\n",
        "[p]\ntype = avgpool2d\nsize = 3\nstride = 2\n",
        "[p]\ntype = avgpool2d\nsize = 3\nstride = 2\npadding = 1\n",
        "[p]\ntype = avgpool2d\nsize = 3\nstride = 1\npadding = 1\n",
        "[p]\ntype = avgpool2d\nsize = 2\nstride = 3\n",
        "[p]\ntype = avgpool2d\nsize = 5\nstride = 2\npadding = 2\n",
    };
    struct glia_shape shapes[] = {S(4, 3, 7, 9, 5), S(4, 1, 4, 6, 7), S(4, 2, 1, 8, 8), S(4, 2, 33, 10, 11)};
    for (size_t i = 0; i < sizeof inis / sizeof inis[0]; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) expect_all(inis[i], &shapes[s], 1, true, 1e-4);
}

/* Pooling (max, average, global average) on bf16 and f16 activations: the CPU's f32 results on the same (rounded)
 * values, rounded once (the max itself exactly). */
static void test_pool_half(void)
{
    const char *inis[] = {"[p]\ntype = maxpool2d\n", "[p]\ntype = maxpool2d\nsize = 3\nstride = 2\npadding = 1\n",
                          "[p]\ntype = avgpool2d\n", "[p]\ntype = avgpool2d\nsize = 3\nstride = 1\npadding = 1\n",
                          "[p]\ntype = global_avgpool\n"};
    struct glia_shape shapes[] = {S(4, 3, 7, 9, 5), S(4, 2, 1, 8, 8)};
    for (size_t i = 0; i < sizeof inis / sizeof inis[0]; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int h = 0; h < 2; h++)
                for (int f = 0; f < 2; f++)
                    for (int acc = 0; acc < 2; acc++) {
                        struct cuda_case k = {.ini = inis[i], .in = &shapes[s], .n_in = 1,
                                              .format = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS, .accumulate = acc,
                                              .seed = 60 + s, .act = h ? GLIA_F16 : GLIA_BF16};
                        struct cuda_diff d = cuda_compare(&k);
                        double tol = h ? 1.0 / 2048 : 1.0 / 256;
                        bool ok = d.din <= tol && (i < 2 ? d.out == 0 : d.out <= tol);
                        if (!ok) printf("\n  %s %s %s acc %d: out %g din %g\n", inis[i], glia_dtype_name(k.act),
                                        glia_memory_format_name(k.format), acc, d.out, d.din);
                        CU_ASSERT(ok);
                    }
}

/* concat on bf16 and f16 activations: copies (exact); an accumulated gradient rounded once */
static void test_concat_half(void)
{
    const struct glia_shape ch[3] = {S(4, 2, 3, 4, 5), S(4, 2, 1, 4, 5), S(4, 2, 4, 4, 5)};
    for (int h = 0; h < 2; h++)
        for (int f = 0; f < 2; f++)
            for (int acc = 0; acc < 2; acc++) {
                struct cuda_case k = {.ini = "[j]\ntype = concat\ninputs = a, b, c\n", .in = ch, .n_in = 3,
                                      .format = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS, .accumulate = acc,
                                      .seed = 70, .act = h ? GLIA_F16 : GLIA_BF16};
                struct cuda_diff d = cuda_compare(&k);
                bool ok = d.out == 0 && d.din <= (acc ? (h ? 1.0 / 2048 : 1.0 / 256) : 0);
                if (!ok) printf("\n  concat %s %s acc %d: out %g din %g\n", glia_dtype_name(k.act),
                                glia_memory_format_name(k.format), acc, d.out, d.din);
                CU_ASSERT(ok);
            }
}

/* ---- batchnorm on half activations ---- */

/* t's values (f32, f16 or bf16, on the device) as host floats in its memory order, rounded to r (f32: as they are). */
static float *host_rounded(const struct glia_tensor *t, enum glia_dtype r)
{
    struct glia_tensor *f = cuda_as_dtype((struct glia_tensor *)t, GLIA_F32);
    int64_t n = glia_tensor_numel(t);
    float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
    CU_ASSERT_FATAL(v && glia_tensor_to_host(f, v, sizeof(float) * (size_t)n) == GLIA_OK);
    glia_tensor_release(f);
    cuda_round(v, n, r);
    return v;
}

/* The elements of a (f32) rounded to r and of b (of type r) whose bits differ, NaN equal to NaN. */
static int64_t bits_off(const struct glia_tensor *a, const struct glia_tensor *b, enum glia_dtype r)
{
    float *x = host_rounded(a, r), *y = host_rounded(b, GLIA_F32);
    int64_t n = glia_tensor_numel(a), off = 0;
    for (int64_t i = 0; i < n; i++) off += memcmp(&x[i], &y[i], sizeof(float)) && !(isnan(x[i]) && isnan(y[i]));
    free(x), free(y);
    return off;
}

/* One layer `ini` built twice on the GPU from the same weights and buffers: a call on f32 tensors and the same call
 * on tensors of type h (f16 or bf16) holding the same values (representable in h), in format f: a training forward
 * and a backward (writing over NaN, or with accumulate adding onto 1), or an eval forward. The half call's output and
 * input gradient must be the f32 call's rounded to h once, its parameter gradients and running statistics the f32
 * call's bit for bit: both read the same values in the same order (the statistics' splits and per-thread walks
 * are the same for every type) and compute in f32 and double alike; only the loads and the stores differ. offset
 * shifts every activation by one element (off the vector loads' alignment: the scalar kernels, for both types).
 * Returns the count of elements that differ. */
static int64_t bn_half_vs_f32(const char *ini, struct glia_shape s, enum glia_memory_format f, enum glia_dtype h,
                              bool eval, bool accumulate, bool offset, uint64_t seed)
{
    struct cuda_built A, B;  /* f32, half */
    cuda_build(ini, "cuda", cuda_gpu, &s, 1, &A);
    cuda_build(ini, "cuda", cuda_gpu, &s, 1, &B);
    struct glia_rng rng;
    glia__rng_seed(&rng, seed);
    for (int p = 0; p < A.l.n_params + A.l.n_buffers; p++) {
        bool buf = p >= A.l.n_params;
        struct glia_param *pa = buf ? &A.l.buffers[p - A.l.n_params] : &A.l.params[p];
        struct glia_param *pb = buf ? &B.l.buffers[p - A.l.n_params] : &B.l.params[p];
        int64_t m = glia_tensor_numel(pa->value);
        float *w = malloc(sizeof(float) * (size_t)m);
        cuda_randn(&rng, w, m, 0.5f);
        for (int64_t i = 0; i < m; i++) w[i] = buf ? fabsf(w[i]) + 0.5f : w[i] + (p == 0 ? 1.0f : 0.0f);
        CU_ASSERT_FATAL(glia_tensor_from_host(pa->value, w, sizeof(float) * (size_t)m) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_from_host(pb->value, w, sizeof(float) * (size_t)m) == GLIA_OK);
        if (!buf) {
            for (int64_t i = 0; i < m; i++) w[i] = accumulate ? 1.0f : NAN;
            CU_ASSERT_FATAL(glia_tensor_from_host(pa->grad, w, sizeof(float) * (size_t)m) == GLIA_OK);
            CU_ASSERT_FATAL(glia_tensor_from_host(pb->grad, w, sizeof(float) * (size_t)m) == GLIA_OK);
            pa->grad_unset = pb->grad_unset = !accumulate;
        }
        free(w);
    }
    int64_t n = glia_shape_numel(&s), k = offset ? 1 : 0;
    float *v = malloc(sizeof(float) * (size_t)n);
    struct glia_tensor *t[2][4];  /* [f32, half][x, y, dy, dx] */
    for (int i = 0; i < 4; i++) {
        if (i == 1) for (int64_t j = 0; j < n; j++) v[j] = NAN;  /* y: written whole */
        else if (i == 3) for (int64_t j = 0; j < n; j++) v[j] = accumulate ? 1.0f : NAN;
        else cuda_randn(&rng, v, n, i == 0 ? 2.0f : 1.0f);
        if (i == 0) for (int64_t j = 0; j < n; j++) v[j] += 0.5f;  /* a mean away from 0 */
        cuda_round(v, n, h);
        struct glia_tensor *x = cuda_put(cuda_gpu, s, f, v);
        for (int d = 0; d < 2; d++) {  /* a copy of x of type f32 or h, k elements into its storage */
            enum glia_dtype dt = d ? h : GLIA_F32;
            struct glia_tensor *flat;
            CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, dt, &(struct glia_shape){1, {n + k}}, &flat) == GLIA_OK);
            CU_ASSERT_FATAL(glia__tensor_view_typed(flat, (size_t)k * glia_dtype_size(dt), dt, &s, f, &t[d][i]) ==
                            GLIA_OK);
            glia_tensor_release(flat);
            CU_ASSERT_FATAL(glia_tensor_convert(t[d][i], x, false) == GLIA_OK);
        }
        glia_tensor_release(x);
    }
    free(v);
    struct cuda_built *L[2] = {&A, &B};
    for (int d = 0; d < 2; d++) {
        const struct glia_tensor *in[1] = {t[d][0]};
        struct glia_tensor *din[1] = {t[d][3]};
        bool acc[1] = {accumulate};
        struct glia_fwd fw = {in, 1, t[d][1], NULL, !eval, 77, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        struct glia_bwd bw = {in, 1, t[d][1], t[d][2], din, acc, NULL, NULL, NULL, NULL, false};
        glia_status st = L[d]->kernel->forward(&L[d]->l, &fw);
        if (!st && !eval) st = L[d]->kernel->backward(&L[d]->l, &bw);
        if (st) printf("\n  %s: %s\n", glia_dtype_name(d ? h : GLIA_F32), glia_context_error(cuda_ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
    }
    int64_t off = bits_off(t[0][1], t[1][1], h);
    if (!eval) off += bits_off(t[0][3], t[1][3], h);
    for (int p = 0; p < A.l.n_params && !eval; p++) off += bits_off(A.l.params[p].grad, B.l.params[p].grad, GLIA_F32);
    for (int p = 0; p < A.l.n_buffers; p++) off += bits_off(A.l.buffers[p].value, B.l.buffers[p].value, GLIA_F32);
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < 4; i++) glia_tensor_release(t[d][i]);
    cuda_unbuild(&A);
    cuda_unbuild(&B);
    return off;
}

/* batchnorm (plain, with activation = relu, without affine and running statistics) on f16 and bf16 activations in
 * both formats: training forward and backward (write and accumulate) and eval forward give the f32 kernel's
 * outputs and input gradients rounded once and its parameter gradients and running statistics bit for bit. The
 * shapes take every path: planes with L % 8 == 0 (16-byte loads of halves), L % 4 == 0 only (8-byte loads), odd L
 * (scalar); rows (channels_last, 2-D) with C % 8 == 0, C % 4 == 0 only, odd C; several splits a channel; and
 * shapes that would take the vector paths with every tensor one element off their alignment (scalar). */
static void test_batchnorm_half(void)
{
    const char *inis[] = {"[b]\ntype = batchnorm\n", "[b]\ntype = batchnorm\nactivation = relu\nmomentum = 0.3\n",
                          "[b]\ntype = batchnorm\naffine = off\ntrack_running_stats = off\n"};
    const struct {
        struct glia_shape s;
        bool offset;
    } cases[] = {
        {S(4, 4, 6, 8, 8), false},   /* planes: 8 halves a load; rows: C = 6, scalar */
        {S(4, 3, 8, 14, 14), false}, /* planes: L = 196, 4 halves a load; rows: C = 8, 8 a load */
        {S(4, 2, 12, 5, 7), false},  /* planes: L odd, scalar; rows: C = 12, 4 a load */
        {S(4, 8, 8, 20, 20), false}, /* several splits a channel in both layouts */
        {S(2, 40, 16, 0, 0), false}, /* 2-D rows, 8 a load */
        {S(2, 9, 5, 0, 0), false},   /* 2-D, odd C */
        {S(4, 3, 8, 8, 8), true},    /* vector shapes, misaligned: scalar */
        {S(2, 24, 16, 0, 0), true},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t i = 0; i < sizeof inis / sizeof inis[0]; i++)
            for (int h = 0; h < 2; h++)
                for (int f = 0; f < 2; f++)
                    for (int mode = 0; mode < 3; mode++) {  /* train writing, train accumulating, eval */
                        if (cases[c].s.ndim == 2 && f) continue;
                        enum glia_dtype dt = h ? GLIA_F16 : GLIA_BF16;
                        int64_t off = bn_half_vs_f32(inis[i], cases[c].s, formats[f], dt, mode == 2, mode == 1,
                                                     cases[c].offset, 90 + c + 5 * i);
                        if (off) {
                            char str[64], one[128];
                            snprintf(one, sizeof one, "%s", inis[i]);
                            for (char *q = one; *q; q++) *q = *q == '\n' ? ' ' : *q;
                            printf("\n  %s%s %s %s %s%s: %lld elements differ\n", one,
                                   glia_shape_str(&cases[c].s, str, sizeof str), glia_dtype_name(dt),
                                   glia_memory_format_name(formats[f]), mode == 2 ? "eval" : mode ? "accumulate" : "write",
                                   cases[c].offset ? " misaligned" : "", (long long)off);
                        }
                        CU_ASSERT_EQUAL(off, 0);
                    }
}

/* Whether two host tensors hold the same bits in every logical element, NaN equal to NaN. */
static bool same_bits(const struct glia_tensor *a, const struct glia_tensor *b)
{
    if (a->shape.ndim != 4) {
        const float *x = glia_tensor_f32(a), *y = glia_tensor_f32(b);
        for (int64_t i = 0; i < glia_tensor_numel(a); i++)
            if (memcmp(&x[i], &y[i], sizeof(float)) && !(isnan(x[i]) && isnan(y[i]))) return false;
        return true;
    }
    const int64_t *d = a->shape.dim;
    for (int64_t n = 0; n < d[0]; n++)
        for (int64_t c = 0; c < d[1]; c++)
            for (int64_t h = 0; h < d[2]; h++)
                for (int64_t w = 0; w < d[3]; w++) {
                    float x = at4(a, n, c, h, w), y = at4(b, n, c, h, w);
                    if (memcmp(&x, &y, sizeof x) && !(isnan(x) && isnan(y))) return false;
                }
    return true;
}

/* How pair_run compares: max_diff (a NaN anywhere is INFINITY), the same bits, or max_diff over the
 * elements that are not NaN on both sides (NaN against a number is INFINITY). */
enum cmp { CMP_TOL, CMP_BITS, CMP_TOL_NAN };

/* max_diff where NaN equals NaN */
static double nan_diff(const struct glia_tensor *a, const struct glia_tensor *b)
{
    double worst = 0;
    int64_t n = glia_tensor_numel(a);
    for (int64_t i = 0; i < n; i++) {
        const int64_t *d = a->shape.dim;
        double x, y;
        if (a->shape.ndim == 4) {
            int64_t w = i % d[3], h = i / d[3] % d[2], c = i / (d[3] * d[2]) % d[1], k = i / (d[3] * d[2] * d[1]);
            x = at4(a, k, c, h, w), y = at4(b, k, c, h, w);
        } else {
            x = glia_tensor_f32(a)[i], y = glia_tensor_f32(b)[i];
        }
        if (isnan(x) && isnan(y)) continue;
        double e = fabs(x - y) / fmax(1.0, fabs(x));
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

/* The difference of CPU (contiguous) and CUDA (format f) host copies by cmp (CMP_BITS: 0 when they are
 * the same bits and INFINITY when not). */
static double diff_of(const struct glia_tensor *cpu, const struct glia_tensor *gpu, enum cmp cmp)
{
    struct glia_tensor *h = cuda_get(gpu);
    double d = cmp == CMP_BITS ? (same_bits(cpu, h) ? 0.0 : INFINITY) : cmp == CMP_TOL ? max_diff(cpu, h) : nan_diff(cpu, h);
    glia_tensor_release(h);
    return d;
}

/* Like cuda_compare (a training forward and a backward of one-input layer `ini`), on the given input
 * values v (logical NCHW order) instead of random ones; returns the largest difference of output, input
 * gradient, parameter gradients and buffers, compared by cmp (see diff_of). */
static double pair_run(const char *ini, struct glia_shape s, enum glia_memory_format f, bool accumulate,
                       const float *v, enum cmp bits)
{
    struct cuda_built C, G;
    cuda_build(ini, "cpu", cuda_cpu, &s, 1, &C);
    cuda_build(ini, "cuda", cuda_gpu, &s, 1, &G);
    struct glia_shape os;
    CU_ASSERT_FATAL(C.type->infer_shape(&C.l, &s, 1, &os) == GLIA_OK);
    struct glia_rng rng;
    glia__rng_seed(&rng, 99);
    for (int p = 0; p < C.l.n_params + C.l.n_buffers; p++) {
        bool buf = p >= C.l.n_params;
        struct glia_param *pc = buf ? &C.l.buffers[p - C.l.n_params] : &C.l.params[p];
        struct glia_param *pg = buf ? &G.l.buffers[p - C.l.n_params] : &G.l.params[p];
        float *w = glia_tensor_f32(pc->value);
        int64_t m = glia_tensor_numel(pc->value);
        cuda_randn(&rng, w, m, 0.5f);
        if (buf)
            for (int64_t i = 0; i < m; i++) w[i] = fabsf(w[i]) + 0.5f;
        CU_ASSERT_FATAL(glia_tensor_from_host(pg->value, w, glia_tensor_nbytes(pc->value)) == GLIA_OK);
        if (!buf) {
            float *gr = glia_tensor_f32(pc->grad);
            for (int64_t i = 0; i < m; i++) gr[i] = accumulate ? 1.0f : NAN;
            CU_ASSERT_FATAL(glia_tensor_from_host(pg->grad, gr, glia_tensor_nbytes(pc->grad)) == GLIA_OK);
            pc->grad_unset = pg->grad_unset = !accumulate;
        }
    }
    int64_t n = glia_shape_numel(&s), on = glia_shape_numel(&os);
    float *d = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)on);
    cuda_randn(&rng, g, on, 1.0f);
    for (int64_t i = 0; i < n; i++) d[i] = accumulate ? 0.25f : NAN;
    struct glia_tensor *xc = cuda_put(cuda_cpu, s, GLIA_CONTIGUOUS, v), *xg = cuda_put(cuda_gpu, s, f, v);
    struct glia_tensor *dxc = cuda_put(cuda_cpu, s, GLIA_CONTIGUOUS, d), *dxg = cuda_put(cuda_gpu, s, f, d);
    struct glia_tensor *dyc = cuda_put(cuda_cpu, os, GLIA_CONTIGUOUS, g), *dyg = cuda_put(cuda_gpu, os, f, g);
    struct glia_tensor *yc = tensor_as(cuda_cpu, os, GLIA_CONTIGUOUS), *yg = tensor_as(cuda_gpu, os, f);
    const struct glia_tensor *inc[1] = {xc}, *ing[1] = {xg};
    struct glia_tensor *dinc[1] = {dxc}, *ding[1] = {dxg};
    bool acc[1] = {accumulate};
    struct glia_fwd fc = {inc, 1, yc, NULL, true, 77, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL}, fg = {ing, 1, yg, NULL, true, 77, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    struct glia_bwd bc = {inc, 1, yc, dyc, dinc, acc, NULL, NULL, NULL, NULL, false}, bg = {ing, 1, yg, dyg, ding, acc, NULL, NULL, NULL, NULL, false};
    CU_ASSERT_FATAL(C.kernel->forward(&C.l, &fc) == GLIA_OK && C.kernel->backward(&C.l, &bc) == GLIA_OK);
    CU_ASSERT_FATAL(G.kernel->forward(&G.l, &fg) == GLIA_OK && G.kernel->backward(&G.l, &bg) == GLIA_OK);
    double worst = fmax(diff_of(yc, yg, bits), diff_of(dxc, dxg, bits));
    for (int p = 0; p < C.l.n_params; p++) worst = fmax(worst, diff_of(C.l.params[p].grad, G.l.params[p].grad, bits));
    for (int p = 0; p < C.l.n_buffers; p++)
        worst = fmax(worst, diff_of(C.l.buffers[p].value, G.l.buffers[p].value, bits));
    struct glia_tensor *all[] = {xc, xg, dxc, dxg, dyc, dyg, yc, yg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) glia_tensor_release(all[i]);
    free(d);
    free(g);
    cuda_unbuild(&C);
    cuda_unbuild(&G);
    return worst;
}

/* Inputs far from zero (100 + N(0, 1)) over many splits: the statistics must keep the variance next to a
 * large mean, as the CPU's double two-pass sums do. */
static void test_batchnorm_offset(void)
{
    struct glia_shape s = S(4, 16, 24, 31, 29);
    int64_t n = glia_shape_numel(&s);
    float *v = malloc(sizeof(float) * (size_t)n);
    struct glia_rng rng;
    glia__rng_seed(&rng, 8);
    for (int64_t i = 0; i < n; i++) v[i] = 100.0f + (float)glia__rng_normal(&rng);
    for (int f = 0; f < 2; f++)
        for (int acc = 0; acc < 2; acc++) {
            double d = pair_run("[b]\ntype = batchnorm\n", s, formats[f], acc, v, CMP_TOL);
            if (!(d <= 1e-4)) printf("\n  offset inputs, %s: diff %.3g\n", glia_memory_format_name(formats[f]), d);
            CU_ASSERT(d <= 1e-4);
        }
    free(v);
}

/* Inputs with a large mean and a small spread (channel means 100, -37.5 and 1000, spread 1e-3): both impls
 * subtract the float nearest the mean and fold the rest of it into the shift, so their outputs agree to float
 * rounding, where that float alone would be off by up to 0.05 (mean 1000, eps 1e-8); with activation = relu
 * the masks agree too. */
static void test_batchnorm_large_mean(void)
{
    const char *inis[] = {"[b]\ntype = batchnorm\neps = 1e-8\n", "[b]\ntype = batchnorm\n",
                          "[b]\ntype = batchnorm\neps = 1e-8\nactivation = relu\n"};
    const struct glia_shape shapes[] = {S(4, 4, 3, 5, 6), S(4, 6, 6, 1, 1), S(2, 16, 6, 0, 0)};
    static const double means[3] = {100.0, -37.5, 1000.0};
    for (int k = 0; k < 3; k++) {
        struct glia_shape s = shapes[k];
        int64_t n = glia_shape_numel(&s), C = s.dim[1], HW = s.ndim == 4 ? s.dim[2] * s.dim[3] : 1;
        float *v = malloc(sizeof(float) * (size_t)n);
        struct glia_rng rng;
        glia__rng_seed(&rng, 31 + (uint64_t)k);
        for (int64_t i = 0; i < n; i++) v[i] = (float)(means[(i / HW) % C % 3] + 1e-3 * (2 * glia__rng_uniform(&rng) - 1));
        for (int i = 0; i < 3; i++)
            for (int f = 0; f < 2; f++) {
                double d = pair_run(inis[i], s, formats[f], false, v, CMP_TOL);
                if (!(d <= 1e-5)) printf("\n  large mean, %s %s: diff %.3g\n", inis[i], glia_memory_format_name(formats[f]), d);
                CU_ASSERT(d <= 1e-5);
            }
        free(v);
    }
}

/* activation = relu lets a NaN through as the relu layer does (the CPU impl: test_bn): with a NaN in channel
 * 0 of a training batch, channel 0's outputs, input gradients, dgamma and running statistics are NaN and its
 * dbeta is the sum of dy, where the CPU has them; the other channels match it as without a NaN. */
static void test_batchnorm_relu_nan(void)
{
    const struct glia_shape shapes[] = {S(4, 3, 3, 5, 4), S(4, 2, 4, 1, 1), S(2, 9, 5, 0, 0)};
    for (int k = 0; k < 3; k++) {
        struct glia_shape s = shapes[k];
        int64_t n = glia_shape_numel(&s), HW = s.ndim == 4 ? s.dim[2] * s.dim[3] : 1;
        float *v = malloc(sizeof(float) * (size_t)n);
        struct glia_rng rng;
        glia__rng_seed(&rng, 21 + (uint64_t)k);
        cuda_randn(&rng, v, n, 1.0f);
        v[(s.dim[0] - 1) * s.dim[1] * HW + HW / 2] = NAN;  /* (N - 1, 0, middle) */
        for (int f = 0; f < 2; f++)
            for (int acc = 0; acc < 2; acc++) {
                double d = pair_run("[b]\ntype = batchnorm\nactivation = relu\n", s, formats[f], acc, v, CMP_TOL_NAN);
                if (!(d <= 1e-4)) printf("\n  NaN input, %s, acc %d: diff %.3g\n", glia_memory_format_name(formats[f]), acc, d);
                CU_ASSERT(d <= 1e-4);
            }
        free(v);
    }
}

/* maxpool2d on inputs of many ties (values 0, 1, 2) and a few NaNs: the CPU (contiguous) and CUDA
 * outputs and input gradients must be the same bits -- the same element wins each window (the first max
 * in scan order, the last NaN) and the same adds happen in the same order. */
static void maxpool_ties(const char *ini, struct glia_shape s, enum glia_memory_format f, bool accumulate)
{
    int64_t n = glia_shape_numel(&s);
    float *v = malloc(sizeof(float) * (size_t)n);
    struct glia_rng rng;
    glia__rng_seed(&rng, 5);
    for (int64_t i = 0; i < n; i++) v[i] = glia__rng_next(&rng) % 97 == 0 ? NAN : (float)(glia__rng_next(&rng) % 3);
    bool ok = pair_run(ini, s, f, accumulate, v, CMP_BITS) == 0.0;
    if (!ok) printf("\n  ties: %s %s%s differ\n", ini, glia_memory_format_name(f), accumulate ? " accumulate" : "");
    CU_ASSERT(ok);
    free(v);
}

static void test_maxpool_ties(void)
{
    const char *inis[] = {"[p]\ntype = maxpool2d\nsize = 3\nstride = 2\npadding = 1\n",
                          "[p]\ntype = maxpool2d\nsize = 2\n",
                          "[p]\ntype = maxpool2d\nsize = 3\nstride = 1\n"};
    for (size_t i = 0; i < sizeof inis / sizeof inis[0]; i++)
        for (int f = 0; f < 2; f++)
            for (int acc = 0; acc < 2; acc++) maxpool_ties(inis[i], S(4, 3, 7, 9, 5), formats[f], acc);
}

static void test_global_avgpool(void)
{
    struct glia_shape shapes[] = {S(4, 3, 7, 9, 5), S(4, 1, 4, 6, 7), S(4, 2, 1, 8, 8), S(4, 5, 3, 1, 1),
                                  S(4, 2, 70, 7, 7), S(4, 3, 5, 31, 33)};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        expect_all("[g]\ntype = global_avgpool\n", &shapes[s], 1, false, 1e-4);
}

/* ---- concat ---- */

static void test_concat(void)
{
    struct glia_shape ch[3] = {S(4, 3, 2, 9, 5), S(4, 3, 5, 9, 5), S(4, 3, 1, 9, 5)};   /* channels, one of 1 */
    struct glia_shape al[2] = {S(4, 2, 4, 8, 8), S(4, 2, 8, 8, 8)};                     /* float4 copies */
    struct glia_shape hh[2] = {S(4, 3, 4, 2, 5), S(4, 3, 4, 7, 5)};
    struct glia_shape ww[2] = {S(4, 1, 3, 4, 3), S(4, 1, 3, 4, 6)};
    struct glia_shape d2[2] = {S(2, 5, 3, 0, 0), S(2, 5, 4, 0, 0)};
    struct glia_shape d3[2] = {S(3, 2, 3, 4, 0), S(3, 2, 3, 7, 0)};
    expect_all("[c]\ntype = concat\n", ch, 3, false, 0);
    expect_all("[c]\ntype = concat\n", al, 2, false, 0);
    expect_all("[c]\ntype = concat\naxis = 2\n", hh, 2, false, 0);
    expect_all("[c]\ntype = concat\naxis = 3\n", ww, 2, false, 0);
    expect_all("[c]\ntype = concat\n", d2, 2, false, 0);
    expect_all("[c]\ntype = concat\naxis = 2\n", d3, 2, false, 0);
}

/* ---- repeatability and refusals ---- */

/* Batchnorm and the poolings twice on the same input: the same bits (no float atomics, whatever [runtime]
 * deterministic says). */
static void test_repeatable(void)
{
    for (int f = 0; f < 2; f++) {
        cuda_repeatable("cuda", "[b]\ntype = batchnorm\n", S(4, 16, 48, 27, 25), formats[f]);
        cuda_repeatable("cuda", "[b]\ntype = batchnorm\ntrack_running_stats = off\n", S(4, 3, 5, 64, 61), formats[f]);
        cuda_repeatable("cuda", "[b]\ntype = batchnorm\nactivation = relu\n", S(4, 16, 16, 28, 28), formats[f]);
        cuda_repeatable("cuda", "[b]\ntype = batchnorm\n", S(4, 37, 9, 13, 11), formats[f]);
        cuda_repeatable("cuda", "[p]\ntype = maxpool2d\nsize = 3\nstride = 2\npadding = 1\n", S(4, 4, 16, 31, 33), formats[f]);
        cuda_repeatable("cuda", "[p]\ntype = avgpool2d\nsize = 3\nstride = 1\npadding = 1\n", S(4, 4, 16, 31, 33), formats[f]);
        cuda_repeatable("cuda", "[g]\ntype = global_avgpool\n", S(4, 4, 40, 31, 33), formats[f]);
    }
}

/* Backward needs a training forward just before it (as on the CPU): after an eval forward it is refused. */
static void test_backward_needs_training(void)
{
    const char *inis[] = {"[b]\ntype = batchnorm\n", "[p]\ntype = maxpool2d\n"};
    struct glia_shape s = S(4, 2, 3, 4, 4);
    for (size_t i = 0; i < 2; i++) {
        struct cuda_built G;
        cuda_build(inis[i], "cuda", cuda_gpu, &s, 1, &G);
        struct glia_shape os;
        CU_ASSERT_FATAL(G.type->infer_shape(&G.l, &s, 1, &os) == GLIA_OK);
        struct glia_tensor *x = tensor_as(cuda_gpu, s, GLIA_CONTIGUOUS), *dx = tensor_as(cuda_gpu, s, GLIA_CONTIGUOUS);
        struct glia_tensor *y = tensor_as(cuda_gpu, os, GLIA_CONTIGUOUS), *dy = tensor_as(cuda_gpu, os, GLIA_CONTIGUOUS);
        CU_ASSERT_FATAL(glia_tensor_fill_zero(x) == GLIA_OK && glia_tensor_fill_zero(dy) == GLIA_OK);
        for (int p = 0; p < G.l.n_params; p++) {
            CU_ASSERT_FATAL(glia_tensor_fill_zero(G.l.params[p].value) == GLIA_OK);
            G.l.params[p].grad_unset = true;
        }
        for (int p = 0; p < G.l.n_buffers; p++) CU_ASSERT_FATAL(glia_tensor_fill_zero(G.l.buffers[p].value) == GLIA_OK);
        const struct glia_tensor *in[1] = {x};
        struct glia_tensor *din[1] = {dx};
        bool acc[1] = {false};
        struct glia_fwd fa = {in, 1, y, NULL, false, 77, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        struct glia_bwd ba = {in, 1, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
        CU_ASSERT_FATAL(G.kernel->forward(&G.l, &fa) == GLIA_OK);
        CU_ASSERT_EQUAL(G.kernel->backward(&G.l, &ba), GLIA_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(cuda_ctx), "needs a training forward just before it"));
        glia_tensor_release(x);
        glia_tensor_release(dx);
        glia_tensor_release(y);
        glia_tensor_release(dy);
        cuda_unbuild(&G);
    }
}

/* Each type has a CPU and a CUDA kernel, which take the same tensors (memory formats, what backward reads), and the
 * CUDA one can be captured into a CUDA graph; only CUDA kernels take half activations (the CPU stays f32). */
static void test_same_description(void)
{
    const char *types[] = {"batchnorm", "maxpool2d", "avgpool2d", "global_avgpool", "concat"};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        if (!glia__find_type(cuda_ctx, types[t])) CU_ASSERT_FATAL(glia_plugin_load(cuda_ctx, types[t]) == GLIA_OK);
        const struct glia_kernel *c = glia__find_kernel(cuda_ctx, types[t], "cpu"),
                                 *g = glia__find_kernel(cuda_ctx, types[t], "cuda");
        CU_ASSERT_PTR_NOT_NULL_FATAL(c);
        CU_ASSERT_PTR_NOT_NULL_FATAL(g);
        CU_ASSERT_EQUAL(c->device_type, GLIA_DEVICE_CPU);
        CU_ASSERT_EQUAL(g->device_type, GLIA_DEVICE_CUDA);
        CU_ASSERT_EQUAL(c->flags, g->flags & ~(uint32_t)(GLIA_KERNEL_CAPTURABLE | GLIA_KERNEL_HALF));
        CU_ASSERT(g->flags & GLIA_KERNEL_CAPTURABLE);
    }
}

/* glia_layer_run_new_typed (what `glia bench layer` runs at bf16 and fp16): batchnorm with fused relu on bf16 and
 * f16 activations in channels_last, whose output is the f32 run's (the same seed: the same inputs once rounded)
 * rounded once, the statistics being the same (test_batchnorm_half). */
static void test_layer_run_half(void)
{
    const char *ini = "[bn]\ntype = batchnorm\nactivation = relu\n";
    struct glia_shape in = glia_shape_make(4, (int64_t[]){4, 8, 6, 6});
    const enum glia_dtype types[2] = {GLIA_BF16, GLIA_F16};
    for (int t = 0; t < 2; t++) {
        struct glia_layer_run *rf = NULL, *rh = NULL;
        glia_status st = glia_layer_run_new_typed(cuda_ctx, ini, cuda_gpu->device, &in, 1, GLIA_CHANNELS_LAST, types[t],
                                                  3, &rh);
        if (st) printf("\n  %s\n", glia_context_error(cuda_ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        CU_ASSERT_FATAL(glia_layer_run_new(cuda_ctx, ini, cuda_gpu->device, &in, 1, GLIA_CHANNELS_LAST, 3, &rf) == GLIA_OK);
        /* the f32 run gets the half run's inputs, widened: the same values the half kernel reads */
        CU_ASSERT_FATAL(glia_tensor_convert(glia_layer_run_input(rf, 0), glia_layer_run_input(rh, 0), false) == GLIA_OK);
        CU_ASSERT_EQUAL(glia_layer_run_output(rh)->dtype, types[t]);
        CU_ASSERT_EQUAL(glia_tensor_memory_format(glia_layer_run_output(rh)), GLIA_CHANNELS_LAST);
        for (int k = 0; k < 2; k++) {
            struct glia_layer_run *r = k ? rh : rf;
            CU_ASSERT_FATAL(glia_layer_run_forward(r, true) == GLIA_OK);
            CU_ASSERT_FATAL(glia_layer_run_backward(r) == GLIA_OK);
            CU_ASSERT_FATAL(glia_layer_run_sync(r) == GLIA_OK);
        }
        struct glia_tensor *wv = cuda_as_dtype(glia_layer_run_output(rf), types[t]);  /* the f32 output rounded once */
        size_t n = glia_tensor_nbytes(wv);
        uint16_t *a = malloc(n), *b = malloc(n);
        CU_ASSERT_FATAL(a && b);
        CU_ASSERT_FATAL(glia_tensor_to_host(wv, a, n) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_to_host(glia_layer_run_output(rh), b, n) == GLIA_OK);
        CU_ASSERT_EQUAL(memcmp(a, b, n), 0);
        free(a);
        free(b);
        glia_tensor_release(wv);
        glia_layer_run_free(rh);
        glia_layer_run_free(rf);
    }
}

/* The bytes of t on the host (malloc'd). */
static void *host_bytes(const struct glia_tensor *t)
{
    size_t n = glia_tensor_nbytes(t);
    void *h = malloc(n);
    CU_ASSERT_FATAL(h != NULL);
    CU_ASSERT_FATAL(glia_tensor_to_host(t, h, n) == GLIA_OK);
    return h;
}

/* The output, input gradient and dgamma of one batchnorm layer's training passes (bytes on the host, malloc'd). */
static void bn_pass(struct glia_layer_run *r, void **out, void **dx, void **dw)
{
    CU_ASSERT_FATAL(glia_layer_run_forward(r, true) == GLIA_OK);
    CU_ASSERT_FATAL(glia_layer_run_backward(r) == GLIA_OK);
    CU_ASSERT_FATAL(glia_layer_run_sync(r) == GLIA_OK);
    *out = host_bytes(glia_layer_run_output(r));
    *dx = host_bytes(glia_layer_run_input_grad(r, 0));
    *dw = host_bytes(glia_layer_run_layer(r)->params[0].grad);
}

/* Largest |a - b| / max(1, |a|) over n floats. */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)a[i])));
    return d;
}

/* One layer's training passes on x, then on 3x + 5, then on x again: batchnorm's output and dgamma do not see the
 * affine change (to float rounding), which statistics or coefficients left over from the call before would (a pass
 * that skipped or reused its partials, its finalize or its scratch); the third call gives the first's output, input
 * gradient and dgamma bit for bit. In the rows layout with 4 channels a load (C = 16, 48), one at a time (C = 5),
 * and in planes. */
static void test_batchnorm_repeated(void)
{
    static const struct {
        int64_t d[4];
        enum glia_memory_format f;
    } cs[] = {{{4, 16, 10, 10}, GLIA_CHANNELS_LAST}, {{2, 48, 9, 9}, GLIA_CHANNELS_LAST},
              {{4, 5, 6, 6}, GLIA_CHANNELS_LAST}, {{4, 8, 40, 11}, GLIA_CONTIGUOUS}};
    const char *ini = "[bn]\ntype = batchnorm\nactivation = relu\n";
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        struct glia_shape in = glia_shape_make(4, cs[c].d);
        struct glia_layer_run *r = NULL;
        CU_ASSERT_FATAL(glia_layer_run_new(cuda_ctx, ini, cuda_gpu->device, &in, 1, cs[c].f, 5 + c, &r) == GLIA_OK);
        struct glia_tensor *x = glia_layer_run_input(r, 0);
        const struct glia_layer *l = glia_layer_run_layer(r);
        size_t nb = glia_tensor_nbytes(x);
        float *x1 = host_bytes(x), *x2 = malloc(nb);
        CU_ASSERT_FATAL(x2 != NULL);
        for (size_t i = 0; i < nb / sizeof(float); i++) x2[i] = 3.0f * x1[i] + 5.0f;
        void *out[3], *dx[3], *dw[3];
        for (int k = 0; k < 3; k++) {
            CU_ASSERT_FATAL(glia_tensor_from_host(x, k == 1 ? x2 : x1, nb) == GLIA_OK);
            bn_pass(r, &out[k], &dx[k], &dw[k]);
        }
        size_t no = glia_tensor_nbytes(glia_layer_run_output(r)), nw = glia_tensor_nbytes(l->params[0].grad);
        CU_ASSERT_EQUAL(memcmp(out[0], out[2], no), 0);
        CU_ASSERT_EQUAL(memcmp(dx[0], dx[2], nb), 0);
        CU_ASSERT_EQUAL(memcmp(dw[0], dw[2], nw), 0);
        double dout = 0, dgw = rel_diff(dw[0], dw[1], nw / sizeof(float));
        for (size_t i = 0; i < no / sizeof(float); i++)
            dout = fmax(dout, fabs((double)((float *)out[0])[i] - ((float *)out[1])[i]));
        if (dout > 1e-3 || dgw > 1e-3) printf("\n  case %zu: x and 3x + 5 differ by %g (output), %g (dgamma)\n", c, dout, dgw);
        CU_ASSERT(dout <= 1e-3);
        CU_ASSERT(dgw <= 1e-3);
        for (int k = 0; k < 3; k++) free(out[k]), free(dx[k]), free(dw[k]);
        free(x1), free(x2);
        glia_layer_run_free(r);
    }
}

/* GLIA_CUDA_BN_FUSE=on (the finalizes in the passes' own launches, the last block of each channel group): the same
 * outputs and gradients as the separate finalizes (to double rounding, then float's), and every batchnorm test again
 * with it, also at GLIA_CUDA_BN_BLOCKS=64 (few splits, channel groups of many channels). */
static void test_batchnorm_fused(void)
{
    static const struct {
        int64_t d[4];
        enum glia_memory_format f;
    } cs[] = {{{4, 16, 10, 10}, GLIA_CHANNELS_LAST}, {{2, 200, 5, 5}, GLIA_CHANNELS_LAST},
              {{4, 5, 6, 6}, GLIA_CHANNELS_LAST}, {{4, 8, 40, 11}, GLIA_CONTIGUOUS}};
    const char *ini = "[bn]\ntype = batchnorm\nactivation = relu\n";
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        struct glia_shape in = glia_shape_make(4, cs[c].d);
        struct glia_layer_run *r = NULL;
        CU_ASSERT_FATAL(glia_layer_run_new(cuda_ctx, ini, cuda_gpu->device, &in, 1, cs[c].f, 41 + c, &r) == GLIA_OK);
        void *o[2], *dx[2], *dw[2];
        unsetenv("GLIA_CUDA_BN_FUSE");
        bn_pass(r, &o[0], &dx[0], &dw[0]);
        setenv("GLIA_CUDA_BN_FUSE", "on", 1);
        bn_pass(r, &o[1], &dx[1], &dw[1]);
        unsetenv("GLIA_CUDA_BN_FUSE");
        size_t n = glia_tensor_numel(glia_layer_run_output(r)), nw = glia_tensor_numel(glia_layer_run_layer(r)->params[0].grad);
        double d = fmax(rel_diff(o[0], o[1], n), fmax(rel_diff(dx[0], dx[1], n), rel_diff(dw[0], dw[1], nw)));
        if (d > 1e-5) printf("\n  case %zu: fused and separate finalizes differ by %g\n", c, d);
        CU_ASSERT(d <= 1e-5);
        for (int k = 0; k < 2; k++) free(o[k]), free(dx[k]), free(dw[k]);
        glia_layer_run_free(r);
    }
    for (int b = 0; b < 2; b++) {
        setenv("GLIA_CUDA_BN_FUSE", "on", 1);
        if (b) setenv("GLIA_CUDA_BN_BLOCKS", "64", 1);
        test_batchnorm();
        test_batchnorm_many_splits();
        test_batchnorm_half();
        test_batchnorm_large_mean();
        test_batchnorm_relu_nan();
        test_batchnorm_repeated();
        unsetenv("GLIA_CUDA_BN_FUSE");
        unsetenv("GLIA_CUDA_BN_BLOCKS");
    }
}

CUDA_TEST_MAIN("cuda_norm_pool", GLIA_TEST(test_layer_run_half), GLIA_TEST(test_batchnorm_repeated), GLIA_TEST(test_batchnorm_fused), GLIA_TEST(test_same_description), GLIA_TEST(test_batchnorm), GLIA_TEST(test_batchnorm_many_splits),
               GLIA_TEST(test_batchnorm_geometry), GLIA_TEST(test_batchnorm_relu_nan), GLIA_TEST(test_batchnorm_large_mean),
               GLIA_TEST(test_batchnorm_offset), GLIA_TEST(test_batchnorm_batch1_2d), GLIA_TEST(test_batchnorm_half), GLIA_TEST(test_maxpool),
               GLIA_TEST(test_avgpool), GLIA_TEST(test_pool_half), GLIA_TEST(test_concat_half), GLIA_TEST(test_maxpool_ties), GLIA_TEST(test_global_avgpool),
               GLIA_TEST(test_concat), GLIA_TEST(test_repeatable), GLIA_TEST(test_backward_needs_training))
