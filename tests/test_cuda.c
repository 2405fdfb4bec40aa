/* tests/test_cuda.c — the CUDA backend against the CPU one on a GPU: copies, memzero, GEMM in
 * every transpose combination and precision, NCHW <-> NHWC conversion on the device, the caching
 * allocator's reuse (and its allocations during a graph capture), the reduction/scaling/clipping/upload slots, and whole models trained on both, and batches made from a device-resident training set ([data] resident) against the loader's. Exits 77 (skipped) without a usable GPU or without the CUDA build; the
 * fallback of device = auto and the refusal of device = cuda run everywhere (test_cuda_fallback). */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "layerutil.h"
#include "modelutil.h"
#include "parts.h"
#include "loader.h"
#include "tbutil.h"
#include <glia/glia.h>
#include "build-config.h"

static struct glia_context *ctx;
static struct glia_backend *gpu, *cpu;

static float *randv(int64_t n, uint64_t seed)
{
    struct glia_rng r;
    glia__rng_seed(&r, seed);
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)glia__rng_normal(&r);
    return v;
}

static void test_copy_and_zero(void)
{
    int64_t n = 1000003;
    float *h = randv(n, 1), *back = malloc((size_t)n * sizeof *back);
    struct glia_tensor *a = tensor_as(gpu, S(1, n, 0, 0, 0), GLIA_CONTIGUOUS), *b = tensor_as(gpu, S(1, n, 0, 0, 0), GLIA_CONTIGUOUS);
    CU_ASSERT_EQUAL(a->device.type, GLIA_DEVICE_CUDA);
    CU_ASSERT_PTR_NULL(glia_tensor_f32(a));  /* device memory is not host-readable */
    CU_ASSERT_EQUAL(glia_tensor_from_host(a, h, (size_t)n * 4), GLIA_OK);
    CU_ASSERT_EQUAL(glia_tensor_copy(b, a), GLIA_OK);  /* device to device */
    CU_ASSERT_EQUAL(glia_tensor_to_host(b, back, (size_t)n * 4), GLIA_OK);
    CU_ASSERT_EQUAL(memcmp(h, back, (size_t)n * 4), 0);
    CU_ASSERT_EQUAL(glia_tensor_fill_zero(b), GLIA_OK);
    CU_ASSERT_EQUAL(glia_tensor_to_host(b, back, (size_t)n * 4), GLIA_OK);
    int nz = 0;
    for (int64_t i = 0; i < n; i++) nz += back[i] != 0.0f;
    CU_ASSERT_EQUAL(nz, 0);
    glia_tensor_release(a);
    glia_tensor_release(b);
    free(h);
    free(back);
}

static void set_precision(enum glia_precision p)
{
    struct glia_runtime_options o = gpu->options;
    o.precision = p;
    CU_ASSERT_FATAL(glia_backend_configure(gpu, &o) == GLIA_OK);
}

static double gemm_tol = 1e-4;

/* C = alpha op(A) op(B) + beta C on both backends, with row strides wider than the rows */
static void gemm_case(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float beta, uint64_t seed)
{
    int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    int64_t lda = ac + 3, ldb = bc + 1, ldc = N + 2;
    float *A = randv(ar * lda, seed), *B = randv(br * ldb, seed + 1), *C = randv(M * ldc, seed + 2);
    float *want = malloc((size_t)(M * ldc) * sizeof *want), *got = malloc((size_t)(M * ldc) * sizeof *got);
    memcpy(want, C, (size_t)(M * ldc) * sizeof *want);
    CU_ASSERT_EQUAL(glia_backend_gemm_f32(cpu, ta, tb, M, N, K, 0.5f, A, lda, B, ldb, beta, want, ldc), GLIA_OK);
    struct glia_tensor *dA = tensor_as(gpu, S(1, ar * lda, 0, 0, 0), GLIA_CONTIGUOUS),
                       *dB = tensor_as(gpu, S(1, br * ldb, 0, 0, 0), GLIA_CONTIGUOUS),
                       *dC = tensor_as(gpu, S(1, M * ldc, 0, 0, 0), GLIA_CONTIGUOUS);
    glia_tensor_from_host(dA, A, glia_tensor_nbytes(dA));
    glia_tensor_from_host(dB, B, glia_tensor_nbytes(dB));
    glia_tensor_from_host(dC, C, glia_tensor_nbytes(dC));
    glia_status st = glia_backend_gemm_f32(gpu, ta, tb, M, N, K, 0.5f, dA->data, lda, dB->data, ldb, beta, dC->data, ldc);
    if (st) printf("\n  %s\n", glia_context_error(ctx));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    CU_ASSERT_EQUAL(glia_tensor_to_host(dC, got, glia_tensor_nbytes(dC)), GLIA_OK);
    double worst = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            worst = fmax(worst, fabs((double)got[i * ldc + j] - want[i * ldc + j]) / fmax(1.0, fabs(want[i * ldc + j])));
    int untouched = 0;  /* the padding columns of C stay as they were */
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = N; j < ldc; j++) untouched += got[i * ldc + j] == C[i * ldc + j];
    CU_ASSERT_EQUAL(untouched, M * (ldc - N));
    if (!(worst <= gemm_tol * sqrt((double)K)))
        printf("\n  gemm ta=%d tb=%d %lldx%lldx%lld %s: max error %g\n", ta, tb, (long long)M, (long long)N, (long long)K,
               glia_precision_name(gpu->options.precision), worst);
    CU_ASSERT(worst <= gemm_tol * sqrt((double)K));
    glia_tensor_release(dA);
    glia_tensor_release(dB);
    glia_tensor_release(dC);
    free(A), free(B), free(C), free(want), free(got);
}

/* Every precision against the fp32 CPU GEMM; the error bound is the input rounding (fp32: none;
 * tf32 and fp16: 2^-11, bf16: 2^-8 relative) grown like sqrt(K) over random-sign sums. */
static void test_gemm_matches_cpu(void)
{
    static const double tol[] = {2e-5, 1e-3, 8e-3, 1e-3};
    for (int p = 0; p < 4; p++) {
        set_precision((enum glia_precision)p);
        gemm_tol = tol[p];
        for (int t = 0; t < 4; t++) {
            gemm_case(t & 1, t & 2, 64, 10, 128, 0.0f, 10 + t);
            gemm_case(t & 1, t & 2, 37, 129, 65, 1.0f, 20 + t);
            gemm_case(t & 1, t & 2, 1, 300, 7, 0.0f, 30 + t);
        }
    }
    set_precision(GLIA_PRECISION_FP32);
}

/* The slots behind clipping, loss scaling and the input pipeline. */
static void test_reduce_scale_upload(void)
{
    int64_t n = 300007;
    float *h = randv(n, 3), *back = malloc((size_t)n * 4);
    struct glia_tensor *t = tensor_as(gpu, S(1, n, 0, 0, 0), GLIA_CONTIGUOUS);
    CU_ASSERT_EQUAL(glia_tensor_from_host(t, h, (size_t)n * 4), GLIA_OK);
    double want = 0, got = -1;
    for (int64_t i = 0; i < n; i++) want += (double)h[i] * h[i];
    CU_ASSERT_EQUAL(glia_backend_sumsq_f32(gpu, t->data, (size_t)n, &got), GLIA_OK);
    CU_ASSERT(fabs(got - want) <= 1e-9 * want);
    CU_ASSERT_EQUAL(glia_backend_scale_f32(gpu, t->data, (size_t)n, 0.25f), GLIA_OK);
    CU_ASSERT_EQUAL(glia_tensor_to_host(t, back, (size_t)n * 4), GLIA_OK);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += back[i] != 0.25f * h[i];
    CU_ASSERT_EQUAL(bad, 0);
    float inf = INFINITY;  /* one non-finite element makes the sum non-finite */
    CU_ASSERT_EQUAL(glia_backend_copy(gpu, (float *)t->data + 77, false, &inf, true, 4), GLIA_OK);
    CU_ASSERT_EQUAL(glia_backend_sumsq_f32(gpu, t->data, (size_t)n, &got), GLIA_OK);
    CU_ASSERT(!isfinite(got));
    /* page-locked upload on the copy stream, then work on the compute stream after it */
    float *pinned;
    uint64_t ticket;
    CU_ASSERT_FATAL(glia_backend_host_alloc(gpu, (size_t)n * 4, (void **)&pinned) == GLIA_OK);
    memcpy(pinned, h, (size_t)n * 4);
    CU_ASSERT_EQUAL(glia_backend_upload(gpu, t->data, pinned, (size_t)n * 4, &ticket), GLIA_OK);
    CU_ASSERT_EQUAL(glia_backend_wait_copy(gpu, ticket, false), GLIA_OK);
    CU_ASSERT_EQUAL(glia_backend_scale_f32(gpu, t->data, (size_t)n, 2.0f), GLIA_OK);
    CU_ASSERT_EQUAL(glia_backend_wait_copy(gpu, ticket, true), GLIA_OK);
    memset(pinned, 0, (size_t)n * 4);  /* the copy is done: the buffer is free again */
    CU_ASSERT_EQUAL(glia_tensor_to_host(t, back, (size_t)n * 4), GLIA_OK);
    bad = 0;
    for (int64_t i = 0; i < n; i++) bad += back[i] != 2.0f * h[i];
    CU_ASSERT_EQUAL(bad, 0);
    glia_backend_host_free(gpu, pinned);
    glia_tensor_release(t);
    free(h), free(back);
}

/* clip_f32 scales on the device by what the host computes from sumsq_f32 (the same bits as sumsq_f32 then
 * scale_f32): clipped when the norm is above max_norm, untouched below it, all zeros and NaN for an inf (its
 * coefficient is 0), untouched for a NaN. */
static void test_clip_on_device(void)
{
    int64_t n = 300007;
    size_t nb = (size_t)n * 4;
    float *h = randv(n, 9), *want = malloc(nb), *got = malloc(nb);
    struct glia_tensor *a = tensor_as(gpu, S(1, n, 0, 0, 0), GLIA_CONTIGUOUS), *b = tensor_as(gpu, S(1, n, 0, 0, 0), GLIA_CONTIGUOUS);
    for (int c = 0; c < 4; c++) {
        if (c == 2) h[123] = INFINITY;
        if (c == 3) h[123] = NAN;
        CU_ASSERT_EQUAL(glia_tensor_from_host(a, h, nb), GLIA_OK);
        CU_ASSERT_EQUAL(glia_tensor_from_host(b, h, nb), GLIA_OK);
        double sq = 0;
        CU_ASSERT_EQUAL(glia_backend_sumsq_f32(gpu, a->data, (size_t)n, &sq), GLIA_OK);
        double norm = sqrt(sq), max_norm = c == 1 ? 2 * norm : c >= 2 ? 1.0 : 0.5 * norm;
        double r = max_norm / (norm + 1e-6);
        if (r < 1.0) CU_ASSERT_EQUAL(glia_backend_scale_f32(gpu, a->data, (size_t)n, (float)r), GLIA_OK);
        CU_ASSERT_EQUAL(glia_backend_clip_f32(gpu, b->data, (size_t)n, max_norm), GLIA_OK);
        CU_ASSERT_EQUAL(glia_tensor_to_host(a, want, nb), GLIA_OK);
        CU_ASSERT_EQUAL(glia_tensor_to_host(b, got, nb), GLIA_OK);
        int bad = 0, changed = 0;
        for (int64_t i = 0; i < n; i++) {
            bad += memcmp(&want[i], &got[i], 4) != 0;
            changed += memcmp(&got[i], &h[i], 4) != 0;
        }
        CU_ASSERT_EQUAL(bad, 0);
        CU_ASSERT(c == 0 || c == 2 ? changed > n / 2 : changed == 0);
        if (c == 2) CU_ASSERT(isnan(got[123]) && got[0] == 0.0f);
    }
    glia_tensor_release(a);
    glia_tensor_release(b);
    free(h), free(want), free(got);
}

/* ---- training on the GPU ---- */

static char dir[512];

static void make_data(void)
{
    CU_ASSERT_FATAL(glia_test_idx_set(dir, sizeof dir, "cuda-data", 640, 200, 12, 5, 11) == 0);
}

/* A small residual CNN with every layer family: conv, BN, pooling, dropout, concat, add, linear. On a
 * GPU fuse_pointwise = auto makes r1 b1's activation and fuses add + g and rd + d (a dropout under
 * its own name). */
static const char *cnn_text(const char *device, const char *runtime_extra, const char *optimizer)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = %s\nseed = 5\n%s\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 32\ntest_batch_size = 100\nmean = 0.2\nstd = 0.3\nshuffle = off\n"
             "[train]\nepochs = 2\noptimizer = %s\n"
             "[c1]\ntype = conv2d\nfilters = 8\nsize = 3\npadding = 1\n[b1]\ntype = batchnorm\n[r1]\ntype = relu\n"
             "[c2]\ntype = conv2d\nfilters = 8\nsize = 3\npadding = 1\n[add]\ntype = add\ninputs = c2, r1\n"
             "[g]\ntype = gelu\n[p]\ntype = maxpool2d\nsize = 2\n[a]\ntype = avgpool2d\nsize = 2\ninputs = g\n"
             "[cat]\ntype = concat\ninputs = p, a\n[rd]\ntype = relu\n[d]\ntype = dropout\np = 0.2\n[f]\ntype = flatten\n"
             "[fc]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             device, runtime_extra, dir, dir, dir, dir, optimizer);
    return buf;
}

/* Two epochs of the opened run r, which must train. */
static void train_opened(struct run *r, struct glia_epoch_result *res)
{
    glia_status st = glia_model_train(r->m, &quiet, res, 2);
    if (st) printf("\n  %s\n", glia_context_error(r->ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
}

static void train_run(struct run *r, const char *text, struct glia_epoch_result *res)
{
    open_run(r, text);
    train_opened(r, res);
}

/* [graph] fuse_pointwise = auto on the GPU: in evaluation b1 (with r1 fused) runs inside c1's forward, from the CUDA
 * batchnorm's eval_affine; both formats, fp32 and bf16. The evaluation after training equals the one with the layers
 * apart (folds cleared, activations planned again) within rounding: one cuDNN graph against the convolution and the
 * batchnorm's kernel. */
static void test_fold_bn_eval_on_device(void)
{
    make_data();
    static const char *const extra[] = {"precision = fp32\nmemory_format = contiguous",
                                        "precision = fp32\nmemory_format = channels_last",
                                        "precision = bf16\nmemory_format = channels_last"};
    for (int k = 0; k < 3; k++) {
        struct run r;
        struct glia_epoch_result res[2] = GLIA_TEST_RESULTS;
        train_run(&r, cnn_text("cuda", extra[k], "sgd\nlr = 0.01"), res);
        struct glia_model *m = r.m;
        CU_ASSERT_FATAL(m->graph.nodes[0].norm_fold == 2);  /* c1 computes b1 in evaluation */
        double loss[2], acc[2];
        CU_ASSERT_EQUAL_FATAL(glia_model_evaluate(m, &loss[0], &acc[0]), GLIA_OK);
        for (int i = 0; i < m->graph.n_nodes; i++) m->graph.nodes[i].norm_fold = m->graph.nodes[i].folded_by = 0;
        glia__model_release_activations(m);
        CU_ASSERT_EQUAL_FATAL(glia_model_evaluate(m, &loss[1], &acc[1]), GLIA_OK);
        double tol = k == 2 ? 2e-2 : 1e-5;
        if (!(fabs(loss[0] - loss[1]) <= tol * fmax(1.0, fabs(loss[1]))))
            printf("\n  %s: eval loss %.9g folded, %.9g apart\n", extra[k], loss[0], loss[1]);
        CU_ASSERT(fabs(loss[0] - loss[1]) <= tol * fmax(1.0, fabs(loss[1])) && loss[0] > 0);
        close_run(&r);
    }
}

/* A deterministic CUDA model of `layers` then fc (5 outputs) and the loss, on the test images, with runtime keys extra
 * (in a static buffer) */
static const char *fusion_text(const char *extra, const char *layers)
{
    static char buf[4096];
    CU_ASSERT_FATAL((size_t)snprintf(buf, sizeof buf,
                                     "[runtime]\ndevice = cuda\nseed = 5\ndeterministic = on\ncudnn_benchmark = off\n"
                                     "%s\n[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\n"
                                     "test_images = %s/tei\ntest_labels = %s/tel\nbatch_size = 32\n"
                                     "test_batch_size = 100\nmean = 0.2\nstd = 0.3\nshuffle = off\n"
                                     "[train]\nepochs = 2\noptimizer = sgd\nlr = 0.05\n%s"
                                     "[fc]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
                                     extra, dir, dir, dir, dir, layers) < sizeof buf);
    return buf;
}

/* [graph] fuse_pointwise = auto on the GPU: a linear whose gelu (tanh form: cuBLASLt's DGELU epilogue, its row of 32
 * a multiple of 8; erf form: the GEMM and the kernel in place) only the next linear reads leaves the GELU's gradient to
 * that one's dx GEMM. Training with the hand-off matches the same model without it (the nodes' din_act cleared) within
 * rounding, eager and replayed from CUDA graphs, at fp32 and bf16; the emulator counts the DGELU epilogues. */
static void test_gelu_handoff_on_device(void)
{
    make_data();
    void *emu = dlopen("libglia-cudaemu.so", RTLD_NOW | RTLD_NOLOAD);
    long (*dgelu_runs)(bool) = emu ? (long (*)(bool))(uintptr_t)dlsym(emu, "glia_emu_lt_dgelu_runs") : NULL;
    if (emu) dlclose(emu);
    static const char *const extra[] = {"precision = fp32", "precision = fp32\ncuda_graph = on", "precision = bf16"};
    for (int k = 0; k < 3; k++) {
        const char *text = fusion_text(extra[k], "[f]\ntype = flatten\n[h]\ntype = linear\noutputs = 32\n[g]\ntype = gelu\n"
                                                 "approximate = tanh\n[h2]\ntype = linear\noutputs = 24\n[g2]\ntype = gelu\n"
                                                 "[h3]\ntype = linear\noutputs = 16\n");
        struct run on, bare;
        struct glia_epoch_result ra[2] = GLIA_TEST_RESULTS, rb[2] = GLIA_TEST_RESULTS;
        open_run(&on, text);
        open_run(&bare, text);
        CU_ASSERT_EQUAL_FATAL(on.m->graph.n_nodes, 6);  /* f h h2 h3 fc loss */
        CU_ASSERT(on.m->graph.nodes[2].din_act == 2 && on.m->graph.nodes[3].din_act == 3);
        for (int i = 0; i < bare.m->graph.n_nodes; i++) bare.m->graph.nodes[i].din_act = bare.m->graph.nodes[i].dout_preact = 0;
        if (dgelu_runs) dgelu_runs(true);
        train_opened(&on, ra);
        long ran = dgelu_runs ? dgelu_runs(true) : 1;
        train_opened(&bare, rb);
        if (dgelu_runs) CU_ASSERT_EQUAL(dgelu_runs(true), 0);
        CU_ASSERT(ran > 0);
        double worst = weight_diff(&on, &bare), tol = k == 2 ? 2e-2 : 1e-4;
        if (!(worst <= tol)) printf("\n  %s: weights differ by %g with and without the hand-off\n", extra[k], worst);
        CU_ASSERT(worst <= tol);
        CU_ASSERT(fabs(ra[1].train_loss - rb[1].train_loss) <= tol * fmax(1.0, rb[1].train_loss));
        CU_ASSERT(ra[1].train_loss < ra[0].train_loss || ra[1].train_loss < log(5.0));
        close_run(&on), close_run(&bare);
    }
}

/* [graph] fuse_pointwise = auto on the GPU: a layernorm reading a residual add computes and writes the sum in its own
 * kernel. The same weights and losses bit for bit as the model with the pairs cleared (the same f32 sum rounded once,
 * then the same row statistics), eager and replayed from CUDA graphs, at fp32 and with bf16 activations. */
static void test_residual_layernorm_on_device(void)
{
    make_data();
    static const char *const extra[] = {"precision = fp32", "precision = fp32\ncuda_graph = on", "precision = bf16"};
    for (int k = 0; k < 3; k++) {
        const char *text = fusion_text(extra[k], "[f]\ntype = flatten\n[e]\ntype = linear\noutputs = 40\n"
                                                 "[f1]\ntype = linear\noutputs = 40\n[r1]\ntype = add\ninputs = e, f1\n"
                                                 "[ln1]\ntype = layernorm\n[f2]\ntype = linear\noutputs = 40\n"
                                                 "[r2]\ntype = add\ninputs = r1, f2\n[ln2]\ntype = layernorm\n");
        struct run on, bare;
        struct glia_epoch_result ra[2] = GLIA_TEST_RESULTS, rb[2] = GLIA_TEST_RESULTS;
        open_run(&on, text);
        open_run(&bare, text);
        CU_ASSERT_EQUAL_FATAL(on.m->graph.n_nodes, 10);
        CU_ASSERT(on.m->graph.nodes[3].res_norm == 5 && on.m->graph.nodes[6].res_norm == 8);
        for (int i = 0; i < bare.m->graph.n_nodes; i++) bare.m->graph.nodes[i].res_norm = bare.m->graph.nodes[i].res_by = 0;
        train_opened(&on, ra);
        train_opened(&bare, rb);
        CU_ASSERT(same_weights(&on, &bare));
        CU_ASSERT(ra[1].train_loss == rb[1].train_loss && ra[1].test_loss == rb[1].test_loss);
        CU_ASSERT(ra[1].train_loss < ra[0].train_loss || ra[1].train_loss < log(5.0));
        close_run(&on), close_run(&bare);
    }
}

/* [runtime] nvtx: a profiler (tests/fixtures/nvtx_record.so, loaded by NVTX as NVTX_INJECTION64_PATH says) sees each
 * layer's forward and backward, the optimizer step and the input as named ranges, every one closed; off, none. The
 * injection is set before the first NVTX call of the process (nvtx is off in every earlier test). */
static void test_nvtx_ranges(void)
{
    char lib[1024], logp[700];
    make_data();
    snprintf(lib, sizeof lib, "%s/nvtx_record.so", glia_test_fixtures());
    snprintf(logp, sizeof logp, "%s/nvtx.log", dir);
    setenv("NVTX_INJECTION64_PATH", lib, 1);
    setenv("GLIA_NVTX_LOG", logp, 1);
    struct run r;
    struct glia_epoch_result res[2] = GLIA_TEST_RESULTS;
    train_run(&r, cnn_text("cuda", "nvtx = on", "sgd\nlr = 0.01"), res);
    close_run(&r);
    FILE *f = fopen(logp, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char line[512];
    int depth = 0, pushes = 0, worst = 0;
    bool seen[5] = {false};
    const char *want[5] = {"push [c1] forward\n", "push [c1] backward\n", "push [loss] forward\n", "push optimizer sgd\n",
                           "push input\n"};
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "push ", 5)) depth++, pushes++;
        else if (!strcmp(line, "pop\n")) depth--;
        if (depth < worst) worst = depth;
        for (int k = 0; k < 5; k++) seen[k] = seen[k] || !strcmp(line, want[k]);
    }
    fclose(f);
    printf("\n  %d ranges", pushes);
    CU_ASSERT(pushes > 0);
    CU_ASSERT_EQUAL(depth, 0);  /* every range closed, */
    CU_ASSERT_EQUAL(worst, 0);  /* never one too many */
    for (int k = 0; k < 5; k++) {
        if (!seen[k]) printf("\n  no '%.*s'", (int)strlen(want[k]) - 1, want[k]);
        CU_ASSERT(seen[k]);
    }
    long size = -1;  /* off: the same training names nothing */
    f = fopen(logp, "w");
    if (f) fclose(f);
    train_run(&r, cnn_text("cuda", "", "sgd\nlr = 0.01"), res);
    close_run(&r);
    f = fopen(logp, "r");
    if (f) {
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fclose(f);
    }
    CU_ASSERT_EQUAL(size, 0);
}

/* The same model, data and seed on the CPU and the GPU (fp32, both formats) end with the same
 * weights within float tolerance, for every optimizer. On the GPU ([graph] fuse_pointwise = auto)
 * b1 runs with activation = relu in place of b1 + r1, add and g run as one fused pointwise layer,
 * and rd and d as another that drops what the CPU's dropout layer drops; the channels_last runs
 * also recompute two of their segments in backward ([graph] checkpoint_segments = 3). */
static void test_training_matches_cpu(void)
{
    make_data();
    static const char *const opts[] = {"sgd\nlr = 0.01\n[optimizer]\nmomentum = 0.9", "adam\nlr = 0.001\nclip_grad_norm = 0.5",
                                       "adamw\nlr = 0.001", "adadelta\nlr = 1.0", "lamb\nlr = 0.002",
                                       "lars\nlr = 0.1\n[optimizer]\nweight_decay = 0.0005",
                                       "novograd\nlr = 0.01\n[optimizer]\nweight_decay = 0.001"};
    static const char *const fmts[] = {"memory_format = contiguous", "memory_format = channels_last"};
    for (int o = 0; o < 7; o++)
        for (int f = 0; f < 2; f++) {
            struct run a, b;
            struct glia_epoch_result ra[2] = GLIA_TEST_RESULTS, rb[2] = GLIA_TEST_RESULTS;
            train_run(&a, cnn_text("cpu", "", opts[o]), ra);
            char extra[160];  /* channels_last also with activation checkpointing (a [graph] section after [runtime]) */
            snprintf(extra, sizeof extra, "precision = fp32\n%s%s", fmts[f], f ? "\n[graph]\ncheckpoint_segments = 3" : "");
            train_run(&b, cnn_text("cuda", extra, opts[o]), rb);
            CU_ASSERT(f ? b.m->graph.ckpt_segments > 1 : b.m->graph.ckpt_segments == 1);
            CU_ASSERT_EQUAL(b.m->graph.n_nodes, a.m->graph.n_nodes - 3);  /* fuse_pointwise = auto: b1 + r1, add + g, rd + d */
            CU_ASSERT(b.m->graph.nodes[1].act_fused);                                 /* c1 b1 */
            CU_ASSERT_STRING_EQUAL(b.m->graph.nodes[3].layer.type->name, "pointwise");  /* c2 g */
            CU_ASSERT_STRING_EQUAL(b.m->graph.nodes[7].layer.type->name, "pointwise");  /* p a cat d */
            CU_ASSERT_STRING_EQUAL(b.m->graph.nodes[7].layer.name, "d");
            double worst = weight_diff(&b, &a);  /* relative to the CPU's */
            if (!(worst <= 2e-3))
                printf("\n  %s, %s: weights differ by %g; losses cpu %g gpu %g\n", opts[o], fmts[f], worst, ra[1].train_loss,
                       rb[1].train_loss);
            CU_ASSERT(worst <= 2e-3);
            CU_ASSERT(fabs(ra[1].test_accuracy - rb[1].test_accuracy) <= 0.02);
            close_run(&a), close_run(&b);
        }
}

/* Trains text with plain progress lines and keeps each line's (epoch, step, loss) in e[], k[], l[]
 * (at most max); returns how many. */
static int progress_of(const char *text, int *e, long long *k, double *l, int max)
{
    struct run r;
    open_run(&r, text);
    FILE *f = tmpfile();
    CU_ASSERT_FATAL(f != NULL);
    struct glia_train_options o = {sizeof(struct glia_train_options), NULL, 0, f, NULL};
    glia_status st = glia_model_train(r.m, &o, NULL, 0);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    rewind(f);
    char line[256];
    int n = 0;
    while (n < max && fgets(line, sizeof line, f))
        if (sscanf(line, "epoch %d/%*d step %lld/%*d loss %lf", &e[n], &k[n], &l[n]) == 3) n++;
    fclose(f);
    close_run(&r);
    return n;
}

/* The GPU reads each step's loss one step late (so the host never stalls the device); its
 * progress lines still name each step with that step's own loss, as the CPU's do. */
static void test_progress_lines_match_cpu(void)
{
    make_data();
    enum { MAX = 64 };
    int ea[MAX], eb[MAX];
    long long ka[MAX], kb[MAX];
    double la[MAX], lb[MAX];
    char tb[700], gpu_train[800], cmd[800];
    snprintf(tb, sizeof tb, "%s/progress-tb", dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tb);
    CU_ASSERT_FATAL(system(cmd) == 0);
    snprintf(gpu_train, sizeof gpu_train, "sgd\nlr = 0.01\nlog_every = 1\ntensorboard = %s", tb);
    int na = progress_of(cnn_text("cpu", "", "sgd\nlr = 0.01\nlog_every = 1"), ea, ka, la, MAX);
    int nb = progress_of(cnn_text("cuda", "precision = fp32", gpu_train), eb, kb, lb, MAX);
    CU_ASSERT_EQUAL(na, 40);  /* 2 epochs of 640 / 32 steps */
    CU_ASSERT_EQUAL_FATAL(nb, na);
    int bad = 0;
    for (int i = 0; i < na; i++) {
        bool ok = ea[i] == eb[i] && ka[i] == kb[i] && ka[i] == i % 20 + 1 && fabs(la[i] - lb[i]) <= 1e-3 * fmax(1, la[i]);
        if (!ok && !bad++)
            printf("\n  line %d: cpu epoch %d step %lld loss %.4f, gpu epoch %d step %lld loss %.4f\n", i, ea[i], ka[i],
                   la[i], eb[i], kb[i], lb[i]);
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* [train] tensorboard: each line's loss at the optimizer step its batch ended, though it came a step late */
    int64_t step[MAX];
    float v[MAX];
    CU_ASSERT_EQUAL_FATAL(tb_dir_scalars(tb, "train/loss", step, v, MAX), nb);
    for (int i = 0; i < nb; i++) CU_ASSERT(step[i] == (eb[i] - 1) * 20 + kb[i] && fabs(v[i] - lb[i]) <= 5.01e-5);
}

/* Low precisions train too (the loss goes down); after the first epoch no step asks the driver
 * for memory; fp16 reports its loss scale. */
static void test_precisions_train_and_memory_is_flat(void)
{
    make_data();
    static const char *const prec[] = {"tf32", "bf16", "fp16"};
    for (int p = 0; p < 3; p++) {
        char extra[128];
        snprintf(extra, sizeof extra, "precision = %s\nmemory_format = channels_last", prec[p]);
        struct run r;
        struct glia_epoch_result res[2] = GLIA_TEST_RESULTS;
        train_run(&r, cnn_text("cuda", extra, "sgd\nlr = 0.01\n[optimizer]\nmomentum = 0.9"), res);
        CU_ASSERT(res[1].train_loss < res[0].train_loss);
        CU_ASSERT(res[1].test_accuracy > 0.5);
        CU_ASSERT_EQUAL(res[1].loss_scale, p == 2 ? res[1].loss_scale : 1.0);
        if (p == 2) CU_ASSERT(res[1].loss_scale >= 1.0 && res[1].loss_scale <= 131072.0);
        struct glia_memory_stats m0, m1;
        struct glia_backend *b;
        CU_ASSERT_FATAL(glia_backend_get(r.ctx, (struct glia_device){GLIA_DEVICE_CUDA, 0}, &b) == GLIA_OK);
        CU_ASSERT_EQUAL(glia_backend_memory_stats(b, &m0), GLIA_OK);
        CU_ASSERT_EQUAL(glia_model_train(r.m, &quiet, res, 2), GLIA_OK);  /* two more epochs */
        CU_ASSERT_EQUAL(glia_backend_memory_stats(b, &m1), GLIA_OK);
        if (m1.driver_allocs != m0.driver_allocs)
            printf("\n  %s: %llu driver allocations in steady state\n", prec[p],
                   (unsigned long long)(m1.driver_allocs - m0.driver_allocs));
        CU_ASSERT_EQUAL(m1.driver_allocs, m0.driver_allocs);
        close_run(&r);
    }
}

static const struct glia__node *node_named(const struct run *r, const char *name)
{
    for (int i = 0; i < r->m->graph.n_nodes; i++)
        if (!strcmp(r->m->graph.nodes[i].layer.name, name)) return &r->m->graph.nodes[i];
    CU_FAIL_FATAL("no such node");
    return NULL;
}

/* precision = bf16 or fp16 with [graph] half_activations = auto (the default) keeps the activations between
 * layers whose CUDA kernels take that type in it: conv2d, batchnorm (with its fused relu), the fused pointwise layers,
 * pooling, concat, dropout, flatten, the linear and the loss's logits here, with no converting edge from c1 on (the
 * loss reads half logits as f32). It trains about as half_activations = off does (the first epoch's loss within 2%:
 * each activation is rounded to 8 or 11 bits on its way, not the parameters, their gradients or the statistics),
 * with a smaller activation plan. */
static void test_half_activations(void)
{
    make_data();
    static const char *const prec[] = {"bf16", "fp16"};
    for (int p = 0; p < 2; p++) {
        enum glia_dtype half = p ? GLIA_F16 : GLIA_BF16;
        char on[160], off[160];
        snprintf(on, sizeof on, "precision = %s\n[graph]\nhalf_activations = auto", prec[p]);
        snprintf(off, sizeof off, "precision = %s\n[graph]\nhalf_activations = off", prec[p]);
        struct run a, b;
        struct glia_epoch_result ra[2] = GLIA_TEST_RESULTS, rb[2] = GLIA_TEST_RESULTS;
        train_run(&a, cnn_text("cuda", off, "sgd\nlr = 0.01\n[optimizer]\nmomentum = 0.9"), ra);
        train_run(&b, cnn_text("cuda", on, "sgd\nlr = 0.01\n[optimizer]\nmomentum = 0.9"), rb);
        static const char *const halves[] = {"c1", "b1", "c2", "g", "p", "a", "cat", "d", "f"};
        for (int i = 0; i < 9; i++) {
            const struct glia__node *nd = node_named(&b, halves[i]);
            CU_ASSERT_EQUAL(nd->out_dtype, half);
            CU_ASSERT_EQUAL(nd->out->dtype, half);
            CU_ASSERT_EQUAL(node_named(&a, halves[i])->out_dtype, GLIA_F32);
            for (int k = 0; k < nd->n_in && i > 0; k++) CU_ASSERT_NOT_EQUAL(nd->edge[k], GLIA__EDGE_CONVERT);
        }
        CU_ASSERT_EQUAL(node_named(&b, "fc")->out_dtype, half);  /* the logits */
        CU_ASSERT_EQUAL(node_named(&b, "fc")->out->dtype, half);
        CU_ASSERT_EQUAL(node_named(&b, "fc")->edge[0], GLIA__EDGE_DIRECT);
        CU_ASSERT_EQUAL(node_named(&b, "loss")->in_dtype[0], half);
        CU_ASSERT_EQUAL(node_named(&b, "loss")->out->dtype, GLIA_F32);
        struct glia__act_plan pa, pb;
        CU_ASSERT_FATAL(glia__act_plan(a.m, 32, 100, &pa) == GLIA_OK);
        CU_ASSERT_FATAL(glia__act_plan(b.m, 32, 100, &pb) == GLIA_OK);
        printf("\n  %s: activation plan %.1f kB with half activations, %.1f kB without; first epoch's loss %.5f / %.5f, "
               "accuracy %.3f / %.3f\n", prec[p], 4e-3 * (double)pb.train, 4e-3 * (double)pa.train, rb[0].train_loss,
               ra[0].train_loss, rb[1].test_accuracy, ra[1].test_accuracy);
        CU_ASSERT(pb.train < pa.train);
        CU_ASSERT(pb.eval < pa.eval);
        glia__act_plan_free(&pa);
        glia__act_plan_free(&pb);
        CU_ASSERT(fabs(rb[0].train_loss - ra[0].train_loss) <= 0.02 * ra[0].train_loss);  /* the first epoch learns */
        CU_ASSERT(rb[0].train_loss != ra[0].train_loss);  /* rounded differently */
        CU_ASSERT(fabs(rb[1].test_accuracy - ra[1].test_accuracy) <= 0.05);
        CU_ASSERT(rb[1].train_loss < rb[0].train_loss);
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        glia_model_summary(b.m, f);
        fclose(f);
        CU_ASSERT_PTR_NULL(strstr(text, "b1 converts"));
        int converts = 0;  /* the data batch into c1: no other edge converts a type */
        for (const char *q = text; (q = strstr(q, "half activations: ")); q++) converts++;
        CU_ASSERT_EQUAL(converts, 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "half activations: c1 converts its input"));
        free(text);
        close_run(&a), close_run(&b);
    }
}

/* An MLP flatten -> linear h -> relu + dropout (fused: d) -> linear fc -> loss with half_activations = auto: the hidden
 * linear takes and gives the half type (no converting edge between it and its half neighbours), and so does the one
 * that feeds the loss (half logits, which the loss reads). It trains about as half_activations = off does, and with
 * cuda_graph = on exactly as with it off (W's half copy is converted inside the captured step). */
static const char *mlp_text(const char *runtime)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = cuda\nseed = 5\ndeterministic = on\ncudnn_benchmark = off\n%s\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 32\ntest_batch_size = 100\nmean = 0.2\nstd = 0.3\nshuffle = off\n"
             "[train]\nepochs = 2\noptimizer = sgd\nlr = 0.05\n"
             "[f]\ntype = flatten\n[h]\ntype = linear\noutputs = 24\n[r]\ntype = relu\n[d]\ntype = dropout\np = 0.1\n"
             "[fc]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             runtime, dir, dir, dir, dir);
    return buf;
}

static void test_half_hidden_linear(void)
{
    make_data();
    static const char *const prec[] = {"bf16", "fp16"};
    for (int p = 0; p < 2; p++) {
        enum glia_dtype half = p ? GLIA_F16 : GLIA_BF16;
        char rt[160];
        struct run a, b;
        struct glia_epoch_result ra[2] = GLIA_TEST_RESULTS, rb[2] = GLIA_TEST_RESULTS;
        snprintf(rt, sizeof rt, "precision = %s\n[graph]\nhalf_activations = off", prec[p]);
        train_run(&a, mlp_text(rt), ra);
        snprintf(rt, sizeof rt, "precision = %s\n[graph]\nhalf_activations = auto", prec[p]);
        train_run(&b, mlp_text(rt), rb);
        const struct glia__node *h = node_named(&b, "h"), *d = node_named(&b, "d"), *fc = node_named(&b, "fc");
        CU_ASSERT_EQUAL(node_named(&b, "f")->out_dtype, half);
        CU_ASSERT_EQUAL(h->out_dtype, half);
        CU_ASSERT_EQUAL(h->in_dtype[0], half);
        CU_ASSERT_EQUAL(h->edge[0], GLIA__EDGE_DIRECT);  /* from f */
        CU_ASSERT_EQUAL(d->out_dtype, half);
        CU_ASSERT_EQUAL(d->edge[0], GLIA__EDGE_DIRECT);  /* from h */
        CU_ASSERT_EQUAL(fc->out_dtype, half);
        CU_ASSERT_EQUAL(fc->edge[0], GLIA__EDGE_DIRECT);  /* from d */
        CU_ASSERT_EQUAL(node_named(&a, "h")->out_dtype, GLIA_F32);
        printf("\n  %s: first epoch's loss %.5f with a half hidden linear, %.5f without; accuracy %.3f / %.3f\n",
               prec[p], rb[0].train_loss, ra[0].train_loss, rb[1].test_accuracy, ra[1].test_accuracy);
        CU_ASSERT(fabs(rb[0].train_loss - ra[0].train_loss) <= 0.02 * ra[0].train_loss);
        CU_ASSERT(rb[0].train_loss != ra[0].train_loss);  /* rounded differently */
        CU_ASSERT(fabs(rb[1].test_accuracy - ra[1].test_accuracy) <= 0.05);
        CU_ASSERT(rb[1].train_loss < rb[0].train_loss);
        if (!p) {
            struct run g;
            struct glia_epoch_result rg[2] = GLIA_TEST_RESULTS;
            snprintf(rt, sizeof rt, "precision = %s\ncuda_graph = on\n[graph]\nhalf_activations = auto", prec[p]);
            train_run(&g, mlp_text(rt), rg);
            for (int e = 0; e < 2; e++) {
                CU_ASSERT_EQUAL(rg[e].train_loss, rb[e].train_loss);
                CU_ASSERT_EQUAL(rg[e].test_loss, rb[e].test_loss);
            }
            close_run(&g);
        }
        close_run(&a), close_run(&b);
    }
}

/* On a GPU the metrics file reports the device's peak memory in tensors: growing over the epochs, never above what
 * the allocator says afterwards, and at least the activation memory the model planned (all of it is allocated at
 * once). */
static void test_metrics_report_device_peak(void)
{
    make_data();
    struct run r;
    open_run(&r, cnn_text("cuda", "precision = fp32", "sgd\nlr = 0.01"));
    const char *path = glia_test_tmp("cuda-metrics.jsonl");
    struct glia_train_options o = {sizeof(struct glia_train_options), path, -1, NULL, NULL};
    glia_status st = glia_model_train(r.m, &o, NULL, 0);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    FILE *f = fopen(path, "r");
    CU_ASSERT_FATAL(f != NULL);
    char line[1024];
    double peak[2] = {0, 0};
    int n = 0;
    while (n < 2 && fgets(line, sizeof line, f)) {
        const char *k = strstr(line, "\"device_peak_mb\": ");
        CU_ASSERT_PTR_NOT_NULL(k);
        if (k) peak[n] = atof(k + strlen("\"device_peak_mb\": "));
        n++;
    }
    fclose(f);
    CU_ASSERT_EQUAL(n, 2);
    struct glia_memory_stats ms;
    struct glia_backend *b;
    CU_ASSERT_FATAL(glia_backend_get(r.ctx, (struct glia_device){GLIA_DEVICE_CUDA, 0}, &b) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_backend_memory_stats(b, &ms), GLIA_OK);
    const struct glia__act_plan *p = &r.m->act.plan;
    double planned = 4.0 * (double)p->len / 1048576.0;
    if (!(peak[0] >= planned && peak[1] >= peak[0] && peak[1] <= ms.peak / 1048576.0 + 1e-3))
        printf("\n  peaks %g, %g MiB; allocator %g MiB; activations planned %g MiB\n", peak[0], peak[1],
               ms.peak / 1048576.0, planned);
    CU_ASSERT(peak[0] >= planned && planned > 0);
    CU_ASSERT(peak[1] >= peak[0]);
    CU_ASSERT(peak[1] <= ms.peak / 1048576.0 + 1e-3);  /* the file has 6 digits */
    close_run(&r);
}

/* The device's peak (glia profile's roofline): the bandwidth is 2 x the memory clock x the bus width the basis
 * names; the tensor-core precisions are at least fp32's rate, all known or all unknown (a compute capability
 * outside the table); glia profile on the GPU gives every layer that moves bytes its fraction of that peak. */
static void test_profile_device_peak(void)
{
    struct glia_device_peak pk = {.struct_size = sizeof pk};
    CU_ASSERT_EQUAL_FATAL(glia_backend_peak(gpu, &pk), GLIA_OK);
    int mhz = 0, bits = 0, sms = 0, sm_mhz = 0;
    CU_ASSERT_EQUAL_FATAL(sscanf(pk.basis, "memory %d MHz x %d bits, %d SMs x %d MHz", &mhz, &bits, &sms, &sm_mhz), 4);
    double want = 2.0 * mhz * 1e6 * bits / 8;
    if (!(fabs(pk.bandwidth - want) <= 1e-3 * want)) printf("\n  %g B/s from '%s'\n", pk.bandwidth, pk.basis);
    CU_ASSERT(pk.bandwidth > 0 && fabs(pk.bandwidth - want) <= 1e-3 * want);
    bool known = pk.flops[GLIA_PRECISION_FP32] > 0;
    for (int p = GLIA_PRECISION_TF32; p <= GLIA_PRECISION_FP16; p++)
        CU_ASSERT(known ? pk.flops[p] >= pk.flops[GLIA_PRECISION_FP32] : pk.flops[p] == 0);
    struct glia_device_peak small = {.struct_size = GLIA__END_OF(struct glia_device_peak, bandwidth)};
    small.flops[0] = -7;  /* beyond the caller's struct_size: left alone */
    CU_ASSERT_EQUAL(glia_backend_peak(gpu, &small), GLIA_OK);
    CU_ASSERT_EQUAL(small.bandwidth, pk.bandwidth);
    CU_ASSERT_EQUAL(small.flops[0], -7);
    CU_ASSERT_EQUAL(small.struct_size, GLIA__END_OF(struct glia_device_peak, bandwidth));
    CU_ASSERT_EQUAL(glia_backend_peak(cpu, &pk), GLIA_EUNSUPPORTED);
    make_data();
    struct run r;
    open_run(&r, cnn_text("cuda", "precision = bf16", "sgd\nlr = 0.01"));
    char *table = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&table, &len);
    struct glia_profile_options o = {sizeof o, 2, 1, NULL, 0, 0};
    glia_status st = glia_model_profile_with(r.m, &o, f);
    fclose(f);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
    char want_line[64];
    snprintf(want_line, sizeof want_line, "peak of cuda: %.0f GB/s, ", pk.bandwidth / 1e9);
    if (!strstr(table, want_line)) printf("\n%s", table);
    CU_ASSERT_PTR_NOT_NULL(strstr(table, want_line));
    int rows = 0, with_share = 0;
    for (const char *l = strchr(table, '\n'); l && l[1]; l = strchr(l + 1, '\n')) {
        if (l[1] == '(' || !strncmp(l + 1, "layer ", 6) || !strncmp(l + 1, "peak ", 5) || !strncmp(l + 1, "device ", 7)) continue;
        rows++;
        const char *e = strchr(l + 1, '\n');
        with_share += e && (e - l > 5) && (!strncmp(e - 4, " mem", 4) || !strncmp(e - 5, " math", 5));
    }
    CU_ASSERT(rows > 0);
    CU_ASSERT_EQUAL(with_share, rows);
    free(table);
    close_run(&r);
}

/* cnn_text with another batch size and [train] keys added. */
static const char *cnn_text_with(const char *runtime_extra, const char *optimizer, int batch, const char *train_extra)
{
    static char buf[4096];
    char opt[256];
    CU_ASSERT_FATAL((size_t)snprintf(opt, sizeof opt, "%s", optimizer) < sizeof opt);  /* never cut short */
    char *sec = strstr(opt, "\n[optimizer]");  /* [train] keys go before the optimizer's section */
    char tail[256] = "";
    if (sec) {
        CU_ASSERT_FATAL((size_t)snprintf(tail, sizeof tail, "%s", sec) < sizeof tail);
        *sec = 0;
    }
    char both[1024];
    CU_ASSERT_FATAL((size_t)snprintf(both, sizeof both, "%s\n%s%s", opt, train_extra, tail) < sizeof both);
    CU_ASSERT_FATAL((size_t)snprintf(buf, sizeof buf, "%s", cnn_text("cuda", runtime_extra, both)) < sizeof buf);
    char *b = strstr(buf, "batch_size = 32\n");
    CU_ASSERT_FATAL(b != NULL);
    char rest[4096];
    snprintf(rest, sizeof rest, "%s", b + strlen("batch_size = 32\n"));
    CU_ASSERT_FATAL((size_t)snprintf(b, sizeof buf - (size_t)(b - buf), "batch_size = %d\n%s", batch, rest) <
                    sizeof buf - (size_t)(b - buf));
    return buf;
}

/* The graph entries (batch rows, accumulating, updating) that an epoch over n samples in batches of `batch`
 * with [train] accumulate makes (upd: the optimizer step is captured), and how many of them update. */
static int graph_entries(int64_t n, int batch, int accumulate, bool upd, int *updating)
{
    int64_t steps = (n + batch - 1) / batch, seen[32][3];
    int ns = 0;
    bool acc = false;
    *updating = 0;
    for (int64_t k = 0; k < steps; k++) {
        int64_t rows = k < n / batch ? batch : n % batch;
        bool update = (k + 1) % accumulate == 0 || k == steps - 1;  /* core/run.c's rule */
        int64_t e[3] = {rows, acc, update && upd};
        int i = 0;
        while (i < ns && memcmp(seen[i], e, sizeof e)) i++;
        if (i == ns && ns < 32) {
            memcpy(seen[ns++], e, sizeof e);
            *updating += update && upd;
        }
        acc = !update;
    }
    return ns;
}

/* An optimizer kernel as a plugin built for ABI 2.0 registers it: its struct ends at step (the scalars slot that
 * lies past it is never read); its step runs cuda.so's. */
static const struct glia_optimizer_kernel *abi20_real;
static glia_status abi20_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    const struct glia_optimizer_kernel *k = o->kernel;
    o->kernel = abi20_real;  /* cuda.so's step knows its kernels by their address */
    glia_status st = abi20_real->step(o, s);
    o->kernel = k;
    return st;
}

/* [runtime] cuda_graph = on trains exactly as off: the same kernels in the same order, so (with
 * deterministic = on and cudnn_benchmark = off: cuDNN's atomics-based algorithms round differently each run, and the
 * autotuner's timing may choose another algorithm or a fused graph in another run) the same weights bit for
 * bit and the same evaluation, while every pass of a batch shape after its first is
 * one graph launch: the full batches and the last, smaller one of an epoch (two shapes), with a
 * dropout and a fused dropout drawing each step's mask from the step a replay is handed, batchnorm
 * (with relu) updating its statistics, activation checkpointing recomputing inside the graph, and gradient
 * accumulation (one graph per micro-step state: writing or adding the gradients, updating or not). The
 * optimizer step is inside the graph (sgd, adam with warm-up, a cosine schedule and clipping, adamw
 * accumulating over 2 and 3 batches), its scalars written before each replay: every update after the first of
 * its entry is replayed, never run on its own (with fp16, its loss scaler too); with a kernel built for ABI 2.0
 * (without scalars) it runs outside, the log saying why once. */
static void test_cuda_graph_trains_the_same(void)
{
    make_data();
    static const struct {
        const char *runtime, *optimizer, *train;
        int batch, accumulate;
        const char *outside;  /* NULL: the update is inside the graph; else why not (the log's line) */
    } cases[] = {
        {"precision = fp32", "sgd\nlr = 0.01\n[optimizer]\nmomentum = 0.9", "", 48, 1, NULL},
        {"precision = fp16\nmemory_format = channels_last\n[graph]\ncheckpoint_segments = 3", "adam\nlr = 0.001",
         "clip_grad_norm = 1.0\n", 48, 1, NULL},
        {"precision = bf16", "adamw\nlr = 0.001", "", 32, 2, NULL},
        {"precision = fp32", "adam\nlr = 0.002\n[optimizer]\nweight_decay = 0.01",
         "schedule = cosine\nmin_lr = 0.0001\nwarmup_steps = 7\nclip_grad_norm = 0.5\n", 48, 1, NULL},
        {"precision = tf32", "adamw\nlr = 0.003", "warmup_steps = 4\nschedule = step\nstep_epochs = 1\ngamma = 0.5\n",
         48, 3, NULL},
        {"precision = fp32", "adam\nlr = 0.002", "warmup_steps = 5\nclip_grad_norm = 0.5\n", 48, 1,
         "'adam' runs outside the graph: its kernel does not read its scalars from the device (no `scalars` slot)\n"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char rt[256], acc[256];
        snprintf(acc, sizeof acc, "%saccumulate = %d\n", cases[c].train, cases[c].accumulate);
        struct run a, b;
        struct glia_epoch_result ra[2] = GLIA_TEST_RESULTS, rb[2] = GLIA_TEST_RESULTS;
        snprintf(rt, sizeof rt, "cuda_graph = off\ndeterministic = on\ncudnn_benchmark = off\n%s", cases[c].runtime);
        train_run(&a, cnn_text_with(rt, cases[c].optimizer, cases[c].batch, acc), ra);
        snprintf(rt, sizeof rt, "cuda_graph = on\ndeterministic = on\ncudnn_benchmark = off\n%s", cases[c].runtime);
        char *log = NULL;
        size_t len = 0;
        open_run(&b, cnn_text_with(rt, cases[c].optimizer, cases[c].batch, acc));
        struct glia_optimizer_kernel abi20;
        if (c == 5) {  /* cuda.so's kernel as a plugin built for ABI 2.0 would register it */
            abi20_real = b.m->trainer.opt.kernel;
            abi20 = *abi20_real;
            abi20.struct_size = offsetof(struct glia_optimizer_kernel, scalars);
            abi20.step = abi20_step;
            b.m->trainer.opt.kernel = &abi20;
        }
        FILE *f = open_memstream(&log, &len);
        glia_log_set(b.ctx, f, GLIA_LOG_INFO);
        glia_status st = glia_model_train(b.m, &quiet, rb, 2);
        fclose(f);
        if (st) printf("\n  %s\n", glia_context_error(b.ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        CU_ASSERT(b.m->trainer.cuda_graph);
        /* each entry's first pass runs as it comes, every later one is a replay */
        int64_t n = b.m->data.train.n, passes = 2 * ((n + cases[c].batch - 1) / cases[c].batch);
        bool inside = !cases[c].outside;
        int updating, shapes = graph_entries(n, cases[c].batch, cases[c].accumulate, inside, &updating);
        CU_ASSERT_EQUAL(b.m->trainer.graph_replays, passes - shapes);
        char want[200];
        snprintf(want, sizeof want, "cuda_graph: %lld training passes replayed from %lld graph%s; optimizer steps: %lld "
                 "inside them, %lld outside\n", (long long)(passes - shapes), (long long)shapes, shapes == 1 ? "" : "s",
                 (long long)b.m->trainer.graph_updates, (long long)b.m->trainer.opt_outside);
        if (!log || !strstr(log, want)) printf("\n  log: %s\n  want: %s", log ? log : "", want);
        CU_ASSERT_PTR_NOT_NULL(log ? strstr(log, want) : NULL);
        /* the updates: the first of each updating entry as it comes, the others inside replays */
        CU_ASSERT_EQUAL(b.m->trainer.step, a.m->trainer.step);
        CU_ASSERT_EQUAL(b.m->trainer.opt_outside, inside ? updating : b.m->trainer.step);
        CU_ASSERT_EQUAL(b.m->trainer.graph_updates, b.m->trainer.step - b.m->trainer.opt_outside);
        CU_ASSERT(inside ? b.m->trainer.graph_updates > 0 : b.m->trainer.graph_updates == 0);
        CU_ASSERT_EQUAL(b.m->trainer.cur_lr, a.m->trainer.cur_lr);
        const char *said = log ? strstr(log, "cuda_graph: the optimizer step of ") : NULL;
        if (inside) CU_ASSERT_PTR_NULL(said);
        if (!inside) CU_ASSERT(said && !strncmp(said + 34, cases[c].outside, strlen(cases[c].outside)));
        if (said) CU_ASSERT_PTR_NULL(strstr(said + 1, "cuda_graph: the optimizer step of "));  /* once */
        CU_ASSERT_EQUAL(b.m->trainer.n_graphs, 0);  /* freed when training ends */
        if (!same_weights(&a, &b)) printf("\n  case %zu: weights differ by %g\n", c, weight_diff(&b, &a));
        CU_ASSERT(same_weights(&a, &b));
        CU_ASSERT_EQUAL(ra[1].test_loss, rb[1].test_loss);
        CU_ASSERT_EQUAL(ra[1].train_loss, rb[1].train_loss);
        CU_ASSERT_EQUAL(ra[0].train_loss, rb[0].train_loss);
        CU_ASSERT_EQUAL(ra[1].skipped_steps, rb[1].skipped_steps);
        free(log);
        close_run(&a), close_run(&b);
    }
    /* refused with data parallelism, naming the key */
    expect_build_error(cnn_text("cuda", "cuda_graph = on\n[distributed]\nmode = dp\ndevices = 0,0", "sgd\nlr = 0.01"),
                       "t.ini:4: [runtime] cuda_graph: not with [distributed] mode = dp: its communication runs between "
                       "the layers (set cuda_graph = off)");
}

/* The layers' weight copies (conv2d's filters in bf16 and KRSC order for channels_last, the linear's W and b) made for
 * a whole pass by one launch at its start (the backend's params group, backends/cuda/params.c) rather than by each
 * layer: training gives the weights and losses of each layer converting its own (GLIA_CUDA_WCOPY=off) bit for bit,
 * eager and replayed from CUDA graphs (the launch captured with the step), and so does the evaluation after it. The
 * emulator counts the launches: the batched one at every pass after the first, and fewer filter conversions (the
 * backward's filter gradients still convert one by one). On a GPU, the results only. */
static void test_weight_copies_batched(void)
{
    make_data();
    void *emu = dlopen("libglia-cudaemu.so", RTLD_NOW | RTLD_NOLOAD);
    long (*named)(const char *, bool) = emu ? (long (*)(const char *, bool))(uintptr_t)dlsym(emu, "glia_emu_launches_named")
                                            : NULL;
    if (emu) dlclose(emu);
    const char *rt = "precision = bf16\nmemory_format = channels_last\ndeterministic = on\ncudnn_benchmark = off";
    char graph_rt[256];
    snprintf(graph_rt, sizeof graph_rt, "%s\ncuda_graph = on", rt);
    struct run off, on, graphed;
    struct glia_epoch_result r0[2] = GLIA_TEST_RESULTS, r1[2] = GLIA_TEST_RESULTS, r2[2] = GLIA_TEST_RESULTS;
    long many[3] = {0}, transposes[3] = {0};
    for (int k = 0; k < 3; k++) {
        if (k == 0) setenv("GLIA_CUDA_WCOPY", "off", 1);  /* read when the backend opens */
        struct run *r = k == 0 ? &off : k == 1 ? &on : &graphed;
        open_run(r, cnn_text_with(k == 2 ? graph_rt : rt, "adamw\nlr = 0.002", 32, ""));
        unsetenv("GLIA_CUDA_WCOPY");
        if (named) named("convert_many_kernel", true), named("transpose_convert_kernel", true);
        train_opened(r, k == 0 ? r0 : k == 1 ? r1 : r2);
        if (named) many[k] = named("convert_many_kernel", true), transposes[k] = named("transpose_convert_kernel", true);
    }
    CU_ASSERT(same_weights(&off, &on));
    CU_ASSERT(same_weights(&off, &graphed));
    for (int e = 0; e < 2; e++) {
        CU_ASSERT_EQUAL(r0[e].train_loss, r1[e].train_loss);
        CU_ASSERT_EQUAL(r0[e].train_loss, r2[e].train_loss);
        CU_ASSERT_EQUAL(r0[e].test_loss, r1[e].test_loss);
        CU_ASSERT_EQUAL(r0[e].test_loss, r2[e].test_loss);
    }
    if (named) {
        int64_t steps = on.m->trainer.step;
        CU_ASSERT_EQUAL(many[0], 0);
        CU_ASSERT(many[1] >= steps - 1);  /* every training pass after the first, and the evaluations' */
        CU_ASSERT(many[2] >= steps - 1);  /* replays included */
        /* c2's filter (KCRS -> KRSC; c1's, of one channel, is a plain conversion) converted at the first pass only */
        if (!(transposes[1] + steps - 1 <= transposes[0]))
            printf("\n  filter conversions: %ld batched, %ld each layer's own, %lld steps\n", transposes[1], transposes[0],
                   (long long)steps);
        CU_ASSERT(transposes[1] + steps - 1 <= transposes[0]);
    } else {
        printf("(on a GPU: the launches are not counted) ");
    }
    close_run(&off), close_run(&on), close_run(&graphed);
}

/* glia_model_step on the GPU is the trainer's step: with cuda_graph = on (a batch shape's first pass runs as it
 * comes, its second is captured, every pass is then a replay), with fp16 loss scaling (the update and the scaler
 * inside the graph, the outcome read right after the pass) and with adam in fp32 (the update inside it, its
 * warm-up's learning rate and step written before each replay), steps on the loader's batches in order leave the weights and loss scaler that training to
 * max_steps = 4 leaves, bit for bit; each result has its batch's loss, which the step reads after the replayed
 * pass, and the step and learning rate that it took. */
static void test_cuda_step_equals_training(void)
{
    make_data();
    static const struct {
        const char *rt, *opt, *train;
    } cases[] = {
        {"cuda_graph = on\ndeterministic = on\ncudnn_benchmark = off\nprecision = fp16", "sgd\nlr = 0.01\n[optimizer]\nmomentum = 0.9",
         "max_steps = 4\n"},
        {"cuda_graph = on\ndeterministic = on\ncudnn_benchmark = off\nprecision = fp32", "adam\nlr = 0.01", "max_steps = 4\nwarmup_steps = 3\n"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct run a, b;
        open_run(&a, cnn_text_with(cases[c].rt, cases[c].opt, 32, cases[c].train));
        open_run(&b, cnn_text_with(cases[c].rt, cases[c].opt, 32, cases[c].train));
        glia_status st = glia_model_train(a.m, &quiet, NULL, 0);
        if (st) printf("\n  %s\n", glia_context_error(a.ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        const struct glia__dataset *d = &b.m->data.train;
        int64_t per = (int64_t)d->channels * d->rows * d->cols, idx[32];
        float *x = malloc(sizeof *x * (size_t)(32 * per));
        int32_t y[32];
        int passes = 0;
        for (int64_t k = 0; b.m->trainer.step < 4 && k < 16; k++, passes++) {  /* a skipped step takes one more batch, as training */
            for (int i = 0; i < 32; i++) idx[i] = k * 32 + i;
            glia__dataset_gather(d, idx, 32, &b.m->data.norm, x, y);
            struct glia_batch bt = {.struct_size = sizeof bt,
                                    .shape = glia_shape_make(4, (int64_t[]){32, d->channels, d->rows, d->cols}), .x = x,
                                    .labels = y};
            struct glia_step_result r = {.struct_size = sizeof r};
            st = glia_model_step(b.m, &bt, &r);
            if (st) printf("\n  %s\n", glia_context_error(b.ctx));
            CU_ASSERT_FATAL(st == GLIA_OK);
            CU_ASSERT(isfinite(r.loss) && r.loss > 0);
            CU_ASSERT_EQUAL(r.updated, !r.skipped);
            CU_ASSERT_EQUAL(r.step, b.m->trainer.step);
            CU_ASSERT_EQUAL(r.loss_scale, b.m->trainer.scaler.scale);
            if (r.updated) CU_ASSERT_EQUAL(r.lr, 0.01 * (c == 1 && r.step <= 3 ? (double)r.step / 3 : 1));
        }
        free(x);
        CU_ASSERT(b.m->trainer.cuda_graph);
        CU_ASSERT_EQUAL(b.m->trainer.graph_replays, passes - 1);
        CU_ASSERT_EQUAL(b.m->trainer.graph_updates + b.m->trainer.opt_outside, b.m->trainer.step);
        CU_ASSERT_EQUAL(b.m->trainer.opt_outside, 1);  /* the first pass's; every later update is replayed */
        CU_ASSERT_EQUAL(b.m->trainer.step, a.m->trainer.step);
        CU_ASSERT_EQUAL(b.m->trainer.scaler.scale, a.m->trainer.scaler.scale);
        CU_ASSERT_EQUAL(b.m->trainer.scaler.skipped, a.m->trainer.scaler.skipped);
        if (!same_weights(&a, &b)) printf("\n  case %zu: weights differ by %g\n", c, weight_diff(&b, &a));
        CU_ASSERT(same_weights(&a, &b));
        close_run(&a), close_run(&b);
    }
}

/* A layer whose kernel lacks GLIA_KERNEL_CAPTURABLE (the fixture nchw_softsign's impl staged, which computes on the
 * host) makes cuda_graph = on refuse the model, naming the layer's section; with cuda_graph = off the
 * model trains on the GPU as the same model with the cpu impl does on the CPU. */
static void test_cuda_graph_refuses_uncapturable_layers(void)
{
    make_data();
    static const char *fmt =
        "[plugins]\npath = %s\n[runtime]\ndevice = %s\nseed = 3\nprecision = fp32\ncuda_graph = %s\n"
        "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
        "batch_size = 32\nshuffle = off\n[train]\nepochs = 1\noptimizer = sgd\nlr = 0.05\n"
        "[c1]\ntype = conv2d\nfilters = 4\npadding = 1\n[sm]\ntype = nchw_softsign\n"
        "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n";
    const char *fix = glia_test_fixtures();
    char text[4096];
    snprintf(text, sizeof text, fmt, fix, "cuda", "on", dir, dir, dir, dir);
    int line = 1;
    for (const char *q = text; q < strstr(text, "[sm]"); q++) line += *q == '\n';
    char want[256];
    snprintf(want, sizeof want, "t.ini:%d: [sm] layer type nchw_softsign (impl staged) cannot be captured into a CUDA "
                                "graph; set [runtime] cuda_graph = off", line);
    expect_build_error(text, want);
    struct run a, b;
    struct glia_epoch_result ra[2] = GLIA_TEST_RESULTS, rb[2] = GLIA_TEST_RESULTS;
    snprintf(text, sizeof text, fmt, fix, "cpu", "off", dir, dir, dir, dir);
    train_run(&a, text, ra);
    snprintf(text, sizeof text, fmt, fix, "cuda", "off", dir, dir, dir, dir);
    train_run(&b, text, rb);
    CU_ASSERT_STRING_EQUAL(b.m->graph.nodes[1].layer.kernel->impl, "staged");
    double worst = weight_diff(&b, &a);
    if (!(worst <= 1e-3)) printf("\n  weights differ by %g\n", worst);
    CU_ASSERT(worst <= 1e-3);
    close_run(&a), close_run(&b);
}

/* A pass that cannot be captured runs as it comes, with one warning per batch shape, and training
 * ends as without graphs. Only under the CPU emulation of CUDA (tests/emu), whose captures all fail
 * when GLIA_EMU_FAIL_CAPTURE is set: a GPU captures this model. */
static void test_cuda_graph_capture_failure_runs_as_it_comes(void)
{
    void *emu = dlopen("libglia-cudaemu.so", RTLD_NOW | RTLD_NOLOAD);
    if (!emu) {
        printf("(not under the emulation: nothing to check) ");
        return;
    }
    dlclose(emu);
    make_data();
    struct run a, b;
    struct glia_epoch_result ra[2] = GLIA_TEST_RESULTS, rb[2] = GLIA_TEST_RESULTS;
    train_run(&a, cnn_text_with("precision = fp32\ndeterministic = on\ncudnn_benchmark = off", "sgd\nlr = 0.01", 48, ""), ra);
    setenv("GLIA_EMU_FAIL_CAPTURE", "1", 1);
    char *log = NULL;
    size_t len = 0;
    open_run(&b, cnn_text_with("precision = fp32\ndeterministic = on\ncudnn_benchmark = off\ncuda_graph = on", "sgd\nlr = 0.01", 48, ""));
    FILE *f = open_memstream(&log, &len);
    glia_log_set(b.ctx, f, GLIA_LOG_INFO);
    glia_status st = glia_model_train(b.m, &quiet, rb, 2);
    fclose(f);
    unsetenv("GLIA_EMU_FAIL_CAPTURE");
    if (st) printf("\n  %s\n", glia_context_error(b.ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    CU_ASSERT_EQUAL(b.m->trainer.graph_replays, 0);
    int warned = 0;
    for (const char *p = log; (p = strstr(p, "could not be captured")); p++) warned++;
    CU_ASSERT_EQUAL(warned, 2);  /* the full batches and the last one, once each */
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "cuda_graph: the training pass of a batch of 48 could not be captured ("));
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "); it runs without a graph\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "cuda_graph: 0 training passes replayed from 0 graphs; optimizer steps: 0 inside them, "));
    CU_ASSERT(same_weights(&a, &b));
    CU_ASSERT_EQUAL(ra[1].test_loss, rb[1].test_loss);
    free(log);
    close_run(&a), close_run(&b);
}

/* Shape s converted NCHW -> NHWC on the device equals the CPU's conversion; back, accumulating
 * onto the original, it is twice the original. */
static void convert_case(struct glia_shape s, uint64_t seed)
{
    int64_t n = glia_shape_numel(&s);
    struct glia_tensor *hc = tensor_as(cpu, s, GLIA_CONTIGUOUS), *hl = tensor_as(cpu, s, GLIA_CHANNELS_LAST),
                       *hb = tensor_as(cpu, s, GLIA_CONTIGUOUS);
    float *x = randv(n, seed);
    memcpy(glia_tensor_f32(hc), x, (size_t)n * 4);
    CU_ASSERT_EQUAL(glia_tensor_convert(hl, hc, false), GLIA_OK);
    struct glia_tensor *dc = tensor_as(gpu, s, GLIA_CONTIGUOUS), *dl = tensor_as(gpu, s, GLIA_CHANNELS_LAST);
    CU_ASSERT_EQUAL(glia_tensor_from_host(dc, x, (size_t)n * 4), GLIA_OK);
    CU_ASSERT_EQUAL(glia_tensor_convert(dl, dc, false), GLIA_OK);
    float *got = malloc((size_t)n * 4);
    CU_ASSERT_EQUAL(glia_tensor_to_host(dl, got, (size_t)n * 4), GLIA_OK);
    CU_ASSERT_EQUAL(memcmp(got, glia_tensor_f32(hl), (size_t)n * 4), 0);
    /* back, accumulating onto the original: 2x */
    CU_ASSERT_EQUAL(glia_tensor_convert(dc, dl, true), GLIA_OK);
    CU_ASSERT_EQUAL(glia_tensor_to_host(dc, got, (size_t)n * 4), GLIA_OK);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += got[i] != 2.0f * x[i];
    CU_ASSERT_EQUAL(bad, 0);
    glia_tensor_release(hc), glia_tensor_release(hl), glia_tensor_release(hb);
    glia_tensor_release(dc), glia_tensor_release(dl);
    free(x), free(got);
}

/* The second shape's NHWC -> NCHW transpose has more row tiles (H*W / 32) than gridDim.y holds. */
static void test_convert_on_device(void)
{
    convert_case(S(4, 5, 19, 33, 35), 41);
    convert_case(S(4, 1, 3, 1, 2100007), 42);
}

static void test_allocator_reuses_blocks(void)
{
    struct glia_memory_stats s0, s1, s2;
    CU_ASSERT_EQUAL_FATAL(glia_backend_memory_stats(gpu, &s0), GLIA_OK);
    static const int64_t sizes[] = {1000, 65536, 3 << 20, 12345, 1000};
    for (int step = 0; step < 4; step++) {
        struct glia_tensor *t[5];
        for (int i = 0; i < 5; i++) t[i] = tensor_as(gpu, S(1, sizes[i], 0, 0, 0), GLIA_CONTIGUOUS);
        if (step == 0) CU_ASSERT_EQUAL(glia_backend_memory_stats(gpu, &s1), GLIA_OK);
        for (int i = 0; i < 5; i++) glia_tensor_release(t[i]);
    }
    CU_ASSERT_EQUAL(glia_backend_memory_stats(gpu, &s2), GLIA_OK);
    CU_ASSERT(s1.driver_allocs > s0.driver_allocs);      /* the first step asked the driver ... */
    CU_ASSERT_EQUAL(s2.driver_allocs, s1.driver_allocs);  /* ... the next three did not */
    CU_ASSERT_EQUAL(s2.current, s0.current);
    CU_ASSERT(s2.peak >= s0.current + (1000 + 65536 + (3 << 20) + 12345 + 1000) * 4);
    CU_ASSERT(s2.reserved >= s2.current);
}

/* A capture may allocate: the block is new from the driver (cudaMalloc in relaxed mode, which a capture
 * allows), the graph keeps using it at every replay, and a block released during the capture is held for
 * the graph, not handed out again. */
static void test_graph_capture_allocates(void)
{
    int64_t n0 = 4099, n = 5123457;  /* n: a size class nothing else here uses */
    float *h = randv(n0, 5), *back = malloc((size_t)n * 4);
    struct glia_tensor *x = tensor_as(gpu, S(1, n0, 0, 0, 0), GLIA_CONTIGUOUS);
    CU_ASSERT_EQUAL_FATAL(glia_tensor_from_host(x, h, (size_t)n0 * 4), GLIA_OK);
    struct glia_memory_stats s0, s1;
    CU_ASSERT_EQUAL_FATAL(glia_backend_memory_stats(gpu, &s0), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_backend_capture_begin(gpu), GLIA_OK);
    struct glia_tensor *y = tensor_as(gpu, S(1, n, 0, 0, 0), GLIA_CONTIGUOUS);
    struct glia_tensor *t = tensor_as(gpu, S(1, n, 0, 0, 0), GLIA_CONTIGUOUS);
    void *t_data = t->data;
    CU_ASSERT_EQUAL(glia_backend_copy(gpu, t->data, false, x->data, false, (size_t)n0 * 4), GLIA_OK);
    CU_ASSERT_EQUAL(glia_backend_scale_f32(gpu, t->data, (size_t)n0, 2.0f), GLIA_OK);
    CU_ASSERT_EQUAL(glia_backend_copy(gpu, y->data, false, t->data, false, (size_t)n0 * 4), GLIA_OK);
    glia_tensor_release(t);  /* during the capture: held for the graph */
    void *g = NULL;
    CU_ASSERT_EQUAL_FATAL(glia_backend_capture_end(gpu, &g), GLIA_OK);
    CU_ASSERT_FATAL(g != NULL);
    CU_ASSERT_EQUAL(glia_backend_memory_stats(gpu, &s1), GLIA_OK);
    CU_ASSERT_EQUAL(s1.driver_allocs, s0.driver_allocs + 2);
    struct glia_tensor *u = tensor_as(gpu, S(1, n, 0, 0, 0), GLIA_CONTIGUOUS);
    CU_ASSERT(u->data != t_data && u->data != y->data);
    CU_ASSERT_EQUAL(glia_backend_memzero(gpu, u->data, (size_t)n * 4), GLIA_OK);  /* may not reach the graph's */
    for (int round = 0; round < 2; round++) {
        if (round) {
            for (int64_t i = 0; i < n0; i++) h[i] = -h[i];
            CU_ASSERT_EQUAL(glia_tensor_from_host(x, h, (size_t)n0 * 4), GLIA_OK);
        }
        CU_ASSERT_EQUAL(glia_backend_graph_launch(gpu, g), GLIA_OK);
        CU_ASSERT_EQUAL(glia_tensor_to_host(y, back, (size_t)n * 4), GLIA_OK);
        int bad = 0;
        for (int64_t i = 0; i < n0; i++) bad += back[i] != 2.0f * h[i];
        CU_ASSERT_EQUAL(bad, 0);
    }
    glia_backend_graph_free(gpu, g);
    glia_tensor_release(u);
    glia_tensor_release(y);
    glia_tensor_release(x);
    free(h);
    free(back);
}

/* A device tensor of dtype and n elements holding host data h (NULL: left as allocated). */
static struct glia_tensor *on_gpu(enum glia_dtype dt, int64_t n, const void *h, size_t bytes)
{
    struct glia_shape s = glia_shape_make(1, (int64_t[]){n});
    struct glia_tensor *t = NULL;
    CU_ASSERT_FATAL(glia_tensor_new(gpu, dt, &s, &t) == GLIA_OK);
    if (h) CU_ASSERT_FATAL(glia_tensor_from_host(t, h, bytes) == GLIA_OK);
    return t;
}

/* [data] resident: the CUDA backend's batch_u8 makes the CPU loader's batches bit for bit (three channels with their
 * own tables, crop padding 3, flip, reshuffled epochs, both ranks of a padded two-way shard, a last partial batch);
 * and queued inside a graph capture, replayed with each batch's indices copied into the buffer it was captured
 * with, it makes them too (no host wait inside: capturable). */
static void test_resident_batches_match_loader(void)
{
    int C = 3, H = 9, W = 7, n = 83, B = 16;
    int64_t per = (int64_t)C * H * W;
    struct glia__dataset d = {.n = n, .channels = C, .rows = H, .cols = W, .images = malloc((size_t)(n * per)),
                              .labels = malloc(sizeof(int32_t) * (size_t)n), .n_classes = 10};
    for (int64_t i = 0; i < n * per; i++) d.images[i] = (uint8_t)((i * 37 + i / 11) % 256);
    for (int i = 0; i < n; i++) d.labels[i] = (i * 7) % 10;
    CU_ASSERT_FATAL(glia_backend_can_batch_u8(gpu));
    struct glia_tensor *img = on_gpu(GLIA_U8, n * per, d.images, (size_t)(n * per));
    struct glia_tensor *lab = on_gpu(GLIA_I32, n, d.labels, sizeof(int32_t) * (size_t)n);
    struct glia_tensor *ord = on_gpu(GLIA_I64, n, NULL, 0), *tab = on_gpu(GLIA_F32, C * 256, NULL, 0);
    struct glia_tensor *fixed = on_gpu(GLIA_I64, B, NULL, 0);
    struct glia_tensor *x = on_gpu(GLIA_F32, B * per, NULL, 0), *y = on_gpu(GLIA_I32, B, NULL, 0);
    float *hx = malloc(sizeof(float) * (size_t)(B * per));
    int32_t hy[16];
    int64_t compared = 0, replayed = 0;
    for (int world = 1; world <= 2; world++)
        for (int rank = 0; rank < world; rank++) {
            struct glia__loader_options o = {B, 2, 2, true, false, true, true, 3, {{0.1f, 0.5f, 0.4f}, {0.3f, 0.2f, 0.6f}},
                                             1234, NULL, rank, world, true, false, 0, 0, false, NULL};
            struct glia__loader L;
            CU_ASSERT_FATAL(glia__loader_init(&L, ctx, &d, &o) == GLIA_OK);
            for (int e = 1; e <= 2; e++) {
                CU_ASSERT_FATAL(glia__loader_start_epoch(&L, e, 0) == GLIA_OK);
                CU_ASSERT_FATAL(glia_backend_copy(gpu, ord->data, false, L.perm, true, sizeof(int64_t) * (size_t)L.n) == GLIA_OK);
                CU_ASSERT_FATAL(glia_tensor_from_host(tab, &L.table[0][0], sizeof(float) * 256 * (size_t)C) == GLIA_OK);
                /* a graph of one full batch made from `fixed` (this epoch's draw is in it) */
                void *g = NULL;
                CU_ASSERT_FATAL(glia_backend_capture_begin(gpu) == GLIA_OK);
                glia_status st = glia_backend_batch_u8(gpu, x->data, y->data, img->data, lab->data, fixed->data, B, C, H,
                                                       W, tab->data, 3, true, 1234, e);
                CU_ASSERT_FATAL(glia_backend_capture_end(gpu, &g) == GLIA_OK && st == GLIA_OK);
                struct glia__batch b;
                while (glia__loader_next(&L, &b)) {
                    for (int replay = 0; replay < 2; replay++) {
                        if (replay && b.n < B) break;
                        if (!replay) {
                            CU_ASSERT_EQUAL(glia_backend_batch_u8(gpu, x->data, y->data, img->data, lab->data,
                                                                  (const int64_t *)ord->data + b.first, b.n, C, H, W,
                                                                  tab->data, 3, true, 1234, e), GLIA_OK);
                        } else {
                            CU_ASSERT_EQUAL(glia_backend_memzero(gpu, x->data, sizeof(float) * (size_t)(B * per)), GLIA_OK);
                            CU_ASSERT_EQUAL(glia_backend_copy(gpu, fixed->data, false, L.perm + b.first, true,
                                                              sizeof(int64_t) * (size_t)B), GLIA_OK);
                            CU_ASSERT_EQUAL(glia_backend_graph_launch(gpu, g), GLIA_OK);
                        }
                        CU_ASSERT_EQUAL(glia_backend_copy(gpu, hx, true, x->data, false, sizeof(float) * (size_t)(b.n * per)),
                                        GLIA_OK);
                        CU_ASSERT_EQUAL(glia_backend_copy(gpu, hy, true, y->data, false, sizeof(int32_t) * (size_t)b.n), GLIA_OK);
                        CU_ASSERT_EQUAL(memcmp(hx, b.x, sizeof(float) * (size_t)(b.n * per)), 0);
                        CU_ASSERT_EQUAL(memcmp(hy, b.y, sizeof(int32_t) * (size_t)b.n), 0);
                        if (replay) replayed += b.n;
                        else compared += b.n;
                    }
                    glia__loader_release(&L);
                }
                glia_backend_graph_free(gpu, g);
            }
            glia__loader_free(&L);
        }
    CU_ASSERT_EQUAL(compared, 2 * (83 + 2 * 42));
    CU_ASSERT(replayed > 0);
    glia_tensor_release(img), glia_tensor_release(lab), glia_tensor_release(ord), glia_tensor_release(tab);
    glia_tensor_release(fixed), glia_tensor_release(x), glia_tensor_release(y);
    free(hx);
    free(d.images);
    free(d.labels);
}

/* cnn_text on the GPU, shuffled, with crop padding and flip and [data] resident = `resident`. */
static const char *resident_cnn(const char *resident, const char *runtime_extra, const char *optimizer)
{
    static char buf[4096];
    char rt[512];
    snprintf(rt, sizeof rt, "deterministic = on\ncudnn_benchmark = off\n%s", runtime_extra);
    const char *text = cnn_text("cuda", rt, optimizer);
    const char *at = strstr(text, "shuffle = off\n");
    CU_ASSERT_FATAL(at != NULL);
    snprintf(buf, sizeof buf, "%.*sshuffle = on\nrandom_crop_padding = 2\nrandom_flip = on\nresident = %s\n%s",
             (int)(at - text), text, resident, at + strlen("shuffle = off\n"));
    return buf;
}

/* [data] resident on the GPU trains to the weights and losses of the host loader's batches, bit for bit: auto takes
 * it (the set is far under a quarter of the free memory) and says so once; also with cuda_graph = on and with
 * gradient accumulation; resident_share = 0 leaves auto off, saying why. */
static void test_resident_trains_the_same(void)
{
    make_data();
    static const struct {
        const char *runtime, *optimizer;
    } cases[] = {
        {"cuda_graph = off", "sgd\nlr = 0.01\n[optimizer]\nmomentum = 0.9"},
        {"cuda_graph = on", "adam\nlr = 0.001\naccumulate = 2"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct run a, b;
        struct glia_epoch_result ra[2] = GLIA_TEST_RESULTS, rb[2] = GLIA_TEST_RESULTS;
        train_run(&a, resident_cnn("off", cases[c].runtime, cases[c].optimizer), ra);
        char *log = NULL;
        size_t len = 0;
        open_run(&b, resident_cnn("auto", cases[c].runtime, cases[c].optimizer));
        FILE *f = open_memstream(&log, &len);
        glia_log_set(b.ctx, f, GLIA_LOG_INFO);
        glia_status st = glia_model_train(b.m, &quiet, rb, 2);
        fclose(f);
        if (st) printf("\n  %s\n", glia_context_error(b.ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        const char *said = log ? strstr(log, "data: resident on cuda:0 (") : NULL;
        if (!said) printf("\n  log: %s\n", log ? log : "");
        CU_ASSERT_PTR_NOT_NULL(said);
        CU_ASSERT_PTR_NULL(said ? strstr(said + 1, "data: resident on") : NULL);  /* once */
        if (!same_weights(&a, &b)) printf("\n  case %zu: weights differ by %g\n", c, weight_diff(&b, &a));
        CU_ASSERT(same_weights(&a, &b));
        for (int e = 0; e < 2; e++) {
            CU_ASSERT_EQUAL(ra[e].train_loss, rb[e].train_loss);
            CU_ASSERT_EQUAL(ra[e].test_loss, rb[e].test_loss);
        }
        free(log);
        close_run(&a), close_run(&b);
    }
    char text[4096], *log = NULL;
    size_t len = 0;
    snprintf(text, sizeof text, "%s", resident_cnn("auto\nresident_share = 0", "", "sgd\nlr = 0.01"));
    char *ep = strstr(text, "epochs = 2");
    CU_ASSERT_FATAL(ep != NULL);
    ep[9] = '1';
    struct run r;
    open_run(&r, text);
    FILE *f = open_memstream(&log, &len);
    glia_log_set(r.ctx, f, GLIA_LOG_INFO);
    CU_ASSERT_EQUAL(glia_model_train(r.m, &quiet, NULL, 0), GLIA_OK);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(log ? strstr(log, "data: training batches made on the host by the loader (resident = auto: its ") : NULL);
    CU_ASSERT_PTR_NULL(log ? strstr(log, "data: resident on") : NULL);
    free(log);
    close_run(&r);
}

static int setup(void)
{
#ifndef GLIA_HAVE_CUDA
    printf("test_cuda: skipped: glia was built without CUDA\n");
    return 77;
#endif
    if (glia_context_new(&ctx)) return 1;
    if (glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CPU, 0}, &cpu)) return 1;
    glia_status st = glia_plugin_load(ctx, "cuda");
    if (!st) st = glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CUDA, 0}, &gpu);
    if (st) {
        printf("test_cuda: skipped: %s\n", glia_context_error(ctx));
        return 77;
    }
    return 0;
}

/* [runtime] debug_checks on the GPU: the guard values are written and read through the backend's copy slot, so
 * device memory is checked as host memory is. The residual CNN trains to the same weights with it on as off; the
 * CUDA impl of the fixture careless_row (which writes with the backend's gemm and copy slots) is named when its
 * backward writes a row too many into its input gradient; cuda_graph = on is refused with it. */
static void test_debug_checks_on_device(void)
{
    make_data();
    struct run a, b;
    struct glia_epoch_result ra[2] = GLIA_TEST_RESULTS, rb[2] = GLIA_TEST_RESULTS;
    static const char *rt = "precision = fp32\ndeterministic = on\ncudnn_benchmark = off";
    char extra[256];
    train_run(&a, cnn_text("cuda", rt, "sgd\nlr = 0.01"), ra);
    snprintf(extra, sizeof extra, "%s\ndebug_checks = on", rt);
    train_run(&b, cnn_text("cuda", extra, "sgd\nlr = 0.01"), rb);
    CU_ASSERT(b.m->act.plan.len > a.m->act.plan.len);
    if (!same_weights(&a, &b)) printf("\n  weights differ by %g\n", weight_diff(&b, &a));
    CU_ASSERT(same_weights(&a, &b));
    CU_ASSERT_EQUAL(ra[1].test_loss, rb[1].test_loss);
    close_run(&a), close_run(&b);
    char text[4096];
    snprintf(text, sizeof text,
             "[plugins]\nload = %s/careless.so\n[runtime]\ndevice = cuda\ndebug_checks = on\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 32\n[train]\nepochs = 1\n"
             "[f]\ntype = flatten\n[fc0]\ntype = linear\noutputs = 64\n[fc]\ntype = careless_row\noutputs = 8\n"
             "[fc2]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             glia_test_fixtures(), dir, dir, dir, dir);
    open_run(&a, text);
    CU_ASSERT_STRING_EQUAL(a.m->graph.nodes[2].layer.kernel->impl, "cuda");
    CU_ASSERT_EQUAL(glia_model_train(a.m, &quiet, NULL, 0), GLIA_EPLUGIN);
    const char *want = "t.ini:19: [fc] backward wrote 64 floats past the end of its input gradient (layer 'fc', tensor "
                       "dx, 32x64)";
    if (strcmp(glia_context_error(a.ctx), want)) printf("\n  got %s\n", glia_context_error(a.ctx));
    CU_ASSERT_STRING_EQUAL(glia_context_error(a.ctx), want);
    close_run(&a);
    expect_build_error(cnn_text("cuda", "cuda_graph = on\ndebug_checks = on", "sgd\nlr = 0.01"),
                       "t.ini:4: [runtime] cuda_graph: not with debug_checks = on: a replayed step would run without its "
                       "checks (set cuda_graph = off or debug_checks = off)");
}

/* cuda.so's scalars for a copy of its kernel (abi20_real's), which it knows by address as abi20_step does. */
static size_t abi20_scalars(struct glia_optimizer *o, const struct glia_opt_step *s, void *out, size_t cap)
{
    const struct glia_optimizer_kernel *k = o->kernel;
    o->kernel = abi20_real;
    size_t n = abi20_real->scalars(o, s, out, cap);
    o->kernel = k;
    return n;
}

/* Whether the optimizer states of a and b (one model, two runs) are the same, bit for bit. */
static bool same_opt_state(struct run *a, struct run *b)
{
    bool same = a->m->trainer.opt.type->n_state == b->m->trainer.opt.type->n_state;
    for (int k = 0; same && k < a->m->trainer.opt.type->n_state; k++) {
        const struct glia_tensor *ta = a->m->params.state[k], *tb = b->m->params.state[k];
        size_t n = glia_tensor_nbytes(ta);
        void *ha = malloc(n), *hb = malloc(n);
        CU_ASSERT_FATAL(ha && hb && n == glia_tensor_nbytes(tb));
        CU_ASSERT_FATAL(!glia_tensor_to_host(ta, ha, n) && !glia_tensor_to_host(tb, hb, n));
        same = !memcmp(ha, hb, n);
        free(ha), free(hb);
    }
    return same;
}

/* The bytes of file path (*n of them), malloc'ed; NULL when it cannot be read. */
static char *file_bytes(const char *path, long *n)
{
    FILE *f = fopen(path, "rb");
    char *b = NULL;
    if (f && !fseek(f, 0, SEEK_END) && (*n = ftell(f)) >= 0 && !fseek(f, 0, SEEK_SET) && (b = malloc((size_t)*n + 1)) &&
        fread(b, 1, (size_t)*n, f) != (size_t)*n)
        free(b), b = NULL;
    if (f) fclose(f);
    return b;
}

/* Folders a and b hold the same step checkpoints (step-N.ckpt for N up to 99), byte for byte; how many. Removes
 * them, final.ckpt and the folders. */
static int same_step_checkpoints(const char *a, const char *b)
{
    int n = 0;
    for (int k = 1; k < 100; k++) {
        char pa[600], pb[600];
        snprintf(pa, sizeof pa, "%s/" GLIA__STEP_CKPT, a, (long long)k);
        snprintf(pb, sizeof pb, "%s/" GLIA__STEP_CKPT, b, (long long)k);
        long na = -1, nb = -1;
        char *ba = file_bytes(pa, &na), *bb = file_bytes(pb, &nb);
        if (!ba != !bb || (ba && (na != nb || memcmp(ba, bb, (size_t)na)))) {
            printf("\n  step %d: checkpoints differ\n", k);
            n = -1000;
        }
        n += ba != NULL;
        free(ba), free(bb);
        remove(pa), remove(pb);
    }
    for (int r = 0; r < 2; r++) {
        char p[600];
        snprintf(p, sizeof p, "%s/final.ckpt", r ? b : a);
        remove(p);
        remove(r ? b : a);
    }
    return n;
}

/* The loss scale, started at 2^22 (not 65536: gradients overflow sooner), grew at least once: scale =
 * 2^(22 + growths - skips). */
#define FP16_START 4194304.0
static bool scale_grew(const struct glia_model *m)
{
    return ldexp(m->trainer.scaler.scale, (int)m->trainer.scaler.skipped) > FP16_START;
}

/* [train] tensorboard of two runs (cuda_graph off and on) in folders a and b: train/loss and train/lr at the same
 * steps with the same values, a skipped update counted as not taken whether the host or the device skipped it; in a,
 * the step count never goes back and moves by at most one a batch. */
static void same_tensorboard_steps(const char *a, const char *b)
{
    enum { MAX = 128 };
    int64_t sa[MAX], sb[MAX];
    float va[MAX], vb[MAX];
    static const char *const tags[] = {"train/loss", "train/lr"};
    for (int t = 0; t < 2; t++) {
        int na = tb_dir_scalars(a, tags[t], sa, va, MAX), nb = tb_dir_scalars(b, tags[t], sb, vb, MAX);
        CU_ASSERT_FATAL(na > 0 && na <= MAX);
        CU_ASSERT_EQUAL_FATAL(nb, na);
        int bad = 0;
        for (int i = 0; i < na; i++)
            bad += sa[i] != sb[i] || va[i] != vb[i] || (i && (sa[i] < sa[i - 1] || sa[i] > sa[i - 1] + 1));
        if (bad) printf("\n  %s: %d of %d records differ\n", tags[t], bad, na);
        CU_ASSERT_EQUAL(bad, 0);
    }
}

/* precision = fp16 with cuda_graph = on captures the loss scaler with the optimizer step (cuda.so keeps it on the
 * device) and trains exactly as cuda_graph = off: the same epochs' losses, weights, optimizer state, step count,
 * learning rate, loss scale, clean and skipped steps, bit for bit, over runs whose scale grows (every 3 clean steps
 * here) until gradients overflow and steps are skipped inside replays: the dropout draws from the step a skipped
 * step does not advance, which the graph picks by the device's step count while the host reads each update's
 * outcome a step late; with clipping on and off, accumulating over 1, 2 and 3 batches, stopping at max_steps and
 * saving checkpoints every 3 steps, the same files byte for byte (the host must know the step count exactly after
 * each update that may reach them). An optimizer kernel that cannot skip a step on the device
 * (without GLIA_OPT_KERNEL_SKIP) keeps the update outside, the log saying why. */
static void test_cuda_graph_fp16_scaler_trains_the_same(void)
{
    make_data();
    static const struct {
        const char *optimizer, *train;
        int accumulate;
        bool noskip;  /* the kernel without GLIA_OPT_KERNEL_SKIP */
    } cases[] = {
        {"sgd\nlr = 0.01\n[optimizer]\nmomentum = 0.9", "max_steps = 23\n", 1, false},
        {"adam\nlr = 0.001", "clip_grad_norm = 0.5\n", 1, false},
        {"adamw\nlr = 0.002", "clip_grad_norm = 1.0\nwarmup_steps = 5\ncheckpoint_every = 3\ncheckpoint_keep = 100\n", 2,
         false},
        {"adadelta\nlr = 1.0", "", 3, false},
        {"lamb\nlr = 0.002", "clip_grad_norm = 1.0\n", 2, false},
        {"lars\nlr = 0.1\n[optimizer]\nweight_decay = 0.0005", "", 1, false},
        {"novograd\nlr = 0.01", "", 2, false},
        {"adam\nlr = 0.001", "", 1, true},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char acc[3072], rt[128], ck[2][560], tbd[2][560], cmd[1200];
        struct run a, b;
        struct glia_epoch_result ra[2] = GLIA_TEST_RESULTS, rb[2] = GLIA_TEST_RESULTS;
        struct run *runs[2] = {&a, &b};
        char *log = NULL;
        size_t len = 0;
        FILE *f = NULL;
        struct glia_optimizer_kernel noskip;
        for (int r = 0; r < 2; r++) {
            snprintf(rt, sizeof rt, "cuda_graph = %s\ndeterministic = on\ncudnn_benchmark = off\nprecision = fp16", r ? "on" : "off");
            snprintf(ck[r], sizeof ck[r], "%s/fp16-ckpt-%d", dir, r);  /* where checkpoint_every writes */
            snprintf(tbd[r], sizeof tbd[r], "%s/fp16-tb-%d", dir, r);
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", tbd[r]);
            CU_ASSERT_FATAL(system(cmd) == 0);
            snprintf(acc, sizeof acc, "%saccumulate = %d\ncheckpoint_dir = %s\nlog_every = 1\ntensorboard = %s\n",
                     cases[c].train, cases[c].accumulate, ck[r], tbd[r]);
            open_run(runs[r], cnn_text_with(rt, cases[c].optimizer, 32, acc));
            runs[r]->m->trainer.scaler_growth = 3;  /* the scale grows until gradients overflow */
            runs[r]->m->trainer.scaler.scale = FP16_START;
        }
        if (cases[c].noskip) {
            abi20_real = b.m->trainer.opt.kernel;
            noskip = *abi20_real;
            noskip.flags = 0;
            noskip.step = abi20_step;
            noskip.scalars = abi20_scalars;
            b.m->trainer.opt.kernel = &noskip;
        }
        CU_ASSERT_FATAL((f = open_memstream(&log, &len)) != NULL);
        glia_log_set(b.ctx, f, GLIA_LOG_DEBUG);
        glia_status st = glia_model_train(a.m, &quiet, ra, 2);
        if (!st) st = glia_model_train(b.m, &quiet, rb, 2);
        fclose(f);
        if (st) printf("\n  case %zu: %s %s\n", c, glia_context_error(a.ctx), glia_context_error(b.ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        const struct glia__model_trainer *ta = &a.m->trainer, *tb = &b.m->trainer;
        CU_ASSERT(tb->cuda_graph);
        if (!(ta->scaler.skipped >= 1 && scale_grew(a.m)))
            printf("\n  case %zu: %lld skipped, scale %g\n", c, (long long)ta->scaler.skipped, ta->scaler.scale);
        CU_ASSERT(ta->scaler.skipped >= 1 && scale_grew(a.m));  /* both happened */
        CU_ASSERT_EQUAL(tb->step, ta->step);
        if (c == 0) CU_ASSERT_EQUAL(tb->step, 23);
        CU_ASSERT_EQUAL(tb->scaler.scale, ta->scaler.scale);
        CU_ASSERT_EQUAL(tb->scaler.clean, ta->scaler.clean);
        CU_ASSERT_EQUAL(tb->scaler.skipped, ta->scaler.skipped);
        CU_ASSERT_EQUAL(tb->cur_lr, ta->cur_lr);
        CU_ASSERT_EQUAL(tb->scaler_pending, 0);
        CU_ASSERT_EQUAL(tb->graph_updates + tb->opt_outside, tb->step);
        const char *said = log ? strstr(log, "cuda_graph: the optimizer step of ") : NULL;
        if (cases[c].noskip) {
            CU_ASSERT_EQUAL(tb->graph_updates, 0);
            CU_ASSERT(said && strstr(said, "'adam' runs outside the graph: precision = fp16: its kernel cannot skip a "
                                           "step on the device (no GLIA_OPT_KERNEL_SKIP): the host decides whether a "
                                           "step is skipped\n") == said + 34);
        } else {
            if (said) printf("\n  case %zu: %.200s\n", c, said);
            CU_ASSERT_PTR_NULL(said);
            CU_ASSERT(tb->graph_updates > 0);
            /* without accumulation every replay updates: those that did not were skipped on the device */
            if (cases[c].accumulate == 1) CU_ASSERT(tb->graph_replays - tb->graph_updates >= 1);
        }
        if (!same_weights(&a, &b)) printf("\n  case %zu: weights differ by %g\n", c, weight_diff(&b, &a));
        CU_ASSERT(same_weights(&a, &b));
        CU_ASSERT(same_opt_state(&a, &b));
        int saved = same_step_checkpoints(ck[0], ck[1]);  /* at the same steps, with the same scaler and weights */
        if (!(c == 2 ? saved >= 3 : saved == (c == 0))) printf("\n  case %zu: %d step checkpoints\n", c, saved);
        CU_ASSERT(c == 2 ? saved >= 3 : saved == (c == 0));  /* case 0: max_steps' stop saves its step */
        same_tensorboard_steps(tbd[0], tbd[1]);
        int epochs = c == 0 ? 1 : 2;  /* max_steps stops the first case in its second epoch */
        for (int e = 0; e < epochs; e++) {
            CU_ASSERT_EQUAL(rb[e].train_loss, ra[e].train_loss);
            CU_ASSERT_EQUAL(rb[e].test_loss, ra[e].test_loss);
            CU_ASSERT_EQUAL(rb[e].lr, ra[e].lr);
            CU_ASSERT_EQUAL(rb[e].skipped_steps, ra[e].skipped_steps);
            CU_ASSERT_EQUAL(rb[e].loss_scale, ra[e].loss_scale);
        }
        free(log);
        close_run(&a), close_run(&b);
    }
}

/* glia_model_step with precision = fp16 and cuda_graph = on (no lagged loss: each update's outcome is read right
 * after its pass) gives each step the results it gives with cuda_graph = off, bit for bit: the loss, whether it
 * updated or was skipped, the learning rate, the step and the loss scale; the weights and optimizer state after
 * them too, the scale growing every 3 clean steps until steps are skipped inside replays. */
static void test_cuda_graph_fp16_step_matches(void)
{
    make_data();
    struct run a, b;
    struct run *runs[2] = {&a, &b};
    for (int r = 0; r < 2; r++) {
        char rt[128];
        snprintf(rt, sizeof rt, "cuda_graph = %s\ndeterministic = on\ncudnn_benchmark = off\nprecision = fp16", r ? "on" : "off");
        open_run(runs[r], cnn_text_with(rt, "adam\nlr = 0.002", 32, "clip_grad_norm = 1.0\nwarmup_steps = 4\n"));
        runs[r]->m->trainer.scaler_growth = 3;
        runs[r]->m->trainer.scaler.scale = FP16_START;
    }
    const struct glia__dataset *d = &a.m->data.train;
    int64_t per = (int64_t)d->channels * d->rows * d->cols, idx[32], batches = d->n / 32;
    float *x = malloc(sizeof *x * (size_t)(32 * per));
    int32_t y[32];
    int skipped_replays = 0;
    for (int64_t k = 0; k < 40; k++) {
        for (int i = 0; i < 32; i++) idx[i] = k % batches * 32 + i;
        glia__dataset_gather(d, idx, 32, &a.m->data.norm, x, y);
        struct glia_batch bt = {.struct_size = sizeof bt,
                                .shape = glia_shape_make(4, (int64_t[]){32, d->channels, d->rows, d->cols}), .x = x,
                                .labels = y};
        struct glia_step_result res[2] = {{.struct_size = sizeof res[0]}, {.struct_size = sizeof res[0]}};
        for (int r = 0; r < 2; r++) {
            glia_status st = glia_model_step(runs[r]->m, &bt, &res[r]);
            if (st) printf("\n  %s\n", glia_context_error(runs[r]->ctx));
            CU_ASSERT_FATAL(st == GLIA_OK);
        }
        if (memcmp(&res[0], &res[1], sizeof res[0]))
            printf("\n  step %lld: loss %.9g/%.9g updated %d/%d lr %g/%g step %lld/%lld scale %g/%g\n", (long long)k,
                   res[0].loss, res[1].loss, res[0].updated, res[1].updated, res[0].lr, res[1].lr,
                   (long long)res[0].step, (long long)res[1].step, res[0].loss_scale, res[1].loss_scale);
        CU_ASSERT(!memcmp(&res[0], &res[1], sizeof res[0]));
        CU_ASSERT_EQUAL(b.m->trainer.scaler_pending, 0);
        skipped_replays += k > 0 && res[1].skipped;
    }
    free(x);
    CU_ASSERT(skipped_replays >= 1 && scale_grew(b.m));
    CU_ASSERT(b.m->trainer.opt_outside <= 1);  /* the first pass's update (unless skipped); every later one replayed */
    CU_ASSERT_EQUAL(b.m->trainer.graph_updates + b.m->trainer.opt_outside, b.m->trainer.step);
    CU_ASSERT(b.m->trainer.graph_updates > 0);
    CU_ASSERT_EQUAL(b.m->trainer.scaler.clean, a.m->trainer.scaler.clean);
    CU_ASSERT(same_weights(&a, &b));
    CU_ASSERT(same_opt_state(&a, &b));
    close_run(&a), close_run(&b);
}

int main(void)
{
    int s = setup();
    if (s) {
        glia_context_free(ctx);
        return s;
    }
    static const struct glia_test tests[] = {GLIA_TEST(test_copy_and_zero), GLIA_TEST(test_gemm_matches_cpu),
                                             GLIA_TEST(test_convert_on_device), GLIA_TEST(test_allocator_reuses_blocks),
                                             GLIA_TEST(test_reduce_scale_upload), GLIA_TEST(test_clip_on_device),
                                             GLIA_TEST(test_training_matches_cpu),
                                             GLIA_TEST(test_progress_lines_match_cpu),
                                             GLIA_TEST(test_precisions_train_and_memory_is_flat), GLIA_TEST(test_half_activations),
                                             GLIA_TEST(test_half_hidden_linear),
                                             GLIA_TEST(test_metrics_report_device_peak),
                                             GLIA_TEST(test_profile_device_peak),
                                             GLIA_TEST(test_cuda_graph_trains_the_same),
                                             GLIA_TEST(test_cuda_step_equals_training), GLIA_TEST(test_nvtx_ranges),
                                             GLIA_TEST(test_cuda_graph_capture_failure_runs_as_it_comes),
                                             GLIA_TEST(test_cuda_graph_refuses_uncapturable_layers),
                                             GLIA_TEST(test_graph_capture_allocates),
                                             GLIA_TEST(test_debug_checks_on_device),
                                             GLIA_TEST(test_resident_batches_match_loader),
                                             GLIA_TEST(test_resident_trains_the_same),
                                             GLIA_TEST(test_cuda_graph_fp16_scaler_trains_the_same),
                                             GLIA_TEST(test_cuda_graph_fp16_step_matches),
                                             GLIA_TEST(test_fold_bn_eval_on_device),
                                             GLIA_TEST(test_gelu_handoff_on_device),
                                             GLIA_TEST(test_residual_layernorm_on_device),
                                             GLIA_TEST(test_weight_copies_batched)};
    int rc = glia_test_run("cuda", tests, (int)(sizeof tests / sizeof tests[0]));
    glia_context_free(ctx);
    return rc;
}
