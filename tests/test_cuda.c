/* tests/test_cuda.c — the CUDA backend against the CPU one on a GPU: copies, memzero, f32 GEMM
 * in every transpose combination, NCHW <-> NHWC conversion on the device, and the caching
 * allocator's reuse. Exits 77 (skipped) without a usable GPU or without the CUDA build; the
 * fallback of device = auto and the refusal of device = cuda run everywhere (test_cuda_fallback). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "layerutil.h"
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
    if (!(worst <= 1e-4)) printf("\n  gemm ta=%d tb=%d %lldx%lldx%lld: max error %g\n", ta, tb, (long long)M, (long long)N, (long long)K, worst);
    CU_ASSERT(worst <= 1e-4);
    glia_tensor_release(dA);
    glia_tensor_release(dB);
    glia_tensor_release(dC);
    free(A), free(B), free(C), free(want), free(got);
}

static void test_gemm_matches_cpu(void)
{
    for (int t = 0; t < 4; t++) {
        gemm_case(t & 1, t & 2, 64, 10, 128, 0.0f, 10 + t);
        gemm_case(t & 1, t & 2, 37, 129, 65, 1.0f, 20 + t);
        gemm_case(t & 1, t & 2, 1, 300, 7, 0.0f, 30 + t);
    }
}

static void test_convert_on_device(void)
{
    struct glia_shape s = S(4, 5, 19, 33, 35);
    int64_t n = glia_shape_numel(&s);
    struct glia_tensor *hc = tensor_as(cpu, s, GLIA_CONTIGUOUS), *hl = tensor_as(cpu, s, GLIA_CHANNELS_LAST),
                       *hb = tensor_as(cpu, s, GLIA_CONTIGUOUS);
    float *x = randv(n, 41);
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

static int setup(void)
{
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

int main(void)
{
#ifndef GLIA_HAVE_CUDA
    printf("test_cuda: skipped: glia was built without CUDA\n");
    return 77;
#else
    int s = setup();
    if (s) {
        glia_context_free(ctx);
        return s;
    }
    static const struct glia_test tests[] = {GLIA_TEST(test_copy_and_zero), GLIA_TEST(test_gemm_matches_cpu),
                                             GLIA_TEST(test_convert_on_device), GLIA_TEST(test_allocator_reuses_blocks)};
    int rc = glia_test_run("cuda", tests, (int)(sizeof tests / sizeof tests[0]));
    glia_context_free(ctx);
    return rc;
#endif
}
