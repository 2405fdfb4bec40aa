/* tests/test_tensor.c — tensors (shapes, views, refcounts, copies), devices, the status table
 * (and an error message wrapping the one before) and the seeded RNG. Not layer maths. */
#include <math.h>
#include <string.h>
#include "internal.h"
#include "testutil.h"

static struct glia_context *ctx;
static struct glia_backend *cpu;

static void setup(void)
{
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CPU, 0}, &cpu) == GLIA_OK);
}

static void test_new_and_strides(void)
{
    setup();
    struct glia_shape s = glia_shape_make(4, (int64_t[]){2, 3, 4, 5});
    struct glia_tensor *t;
    CU_ASSERT_EQUAL_FATAL(glia_tensor_new(cpu, GLIA_F32, &s, &t), GLIA_OK);
    CU_ASSERT_EQUAL(glia_tensor_numel(t), 120);
    CU_ASSERT_EQUAL(glia_tensor_nbytes(t), 480);
    CU_ASSERT_EQUAL(t->stride[0], 60);
    CU_ASSERT_EQUAL(t->stride[3], 1);
    CU_ASSERT(glia_tensor_is_contiguous(t));
    CU_ASSERT_EQUAL((uintptr_t)t->data % 64, 0);
    char buf[64];
    CU_ASSERT_STRING_EQUAL(glia_shape_str(&s, buf, sizeof buf), "2x3x4x5");
    CU_ASSERT_PTR_NOT_NULL(glia_tensor_f32(t));
    CU_ASSERT_PTR_NULL(glia_tensor_i32(t));
    glia_tensor_release(t);
    struct glia_shape bad = glia_shape_make(2, (int64_t[]){2, -1});
    CU_ASSERT_EQUAL(glia_tensor_new(cpu, GLIA_F32, &bad, &t), GLIA_EINVAL);
    /* sizes whose element or byte count overflows: out of memory, not a wrapped small buffer */
    static const int64_t huge[][3] = {{(int64_t)1 << 40, (int64_t)1 << 40, 1}, {(int64_t)1 << 32, (int64_t)1 << 32, 1},
                                      {(int64_t)1 << 62, 2, 1}, {(int64_t)1 << 61, 1, 1}, {3, (int64_t)1 << 61, 1}};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        struct glia_shape h = glia_shape_make(3, huge[i]);
        t = NULL;
        CU_ASSERT_EQUAL(glia_tensor_new(cpu, GLIA_F32, &h, &t), GLIA_ENOMEM);
        CU_ASSERT_PTR_NULL(t);
    }
    glia_context_free(ctx);
}

static void test_zeros_copy_host(void)
{
    setup();
    struct glia_shape s = glia_shape_make(1, (int64_t[]){7});
    struct glia_tensor *a, *b;
    CU_ASSERT_EQUAL_FATAL(glia_tensor_zeros(cpu, GLIA_F32, &s, &a), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_tensor_new(cpu, GLIA_F32, &s, &b), GLIA_OK);
    for (int i = 0; i < 7; i++) CU_ASSERT_EQUAL(glia_tensor_f32(a)[i], 0.0f);
    float src[7] = {1, 2, 3, 4, 5, 6, 7}, dst[7] = {0};
    CU_ASSERT_EQUAL(glia_tensor_from_host(a, src, sizeof src), GLIA_OK);
    CU_ASSERT_EQUAL(glia_tensor_copy(b, a), GLIA_OK);
    CU_ASSERT_EQUAL(glia_tensor_to_host(b, dst, sizeof dst), GLIA_OK);
    CU_ASSERT_EQUAL(memcmp(src, dst, sizeof src), 0);
    CU_ASSERT_EQUAL(glia_tensor_to_host(b, dst, 4), GLIA_EINVAL);
    glia_tensor_release(a);
    glia_tensor_release(b);
    glia_context_free(ctx);
}

static void test_views_keep_storage_alive(void)
{
    setup();
    struct glia_shape s = glia_shape_make(1, (int64_t[]){10});
    struct glia_tensor *t, *v, *r;
    CU_ASSERT_EQUAL_FATAL(glia_tensor_new(cpu, GLIA_F32, &s, &t), GLIA_OK);
    for (int i = 0; i < 10; i++) glia_tensor_f32(t)[i] = (float)i;
    struct glia_shape vs = glia_shape_make(2, (int64_t[]){2, 3});
    CU_ASSERT_EQUAL_FATAL(glia_tensor_view(t, 4, &vs, &v), GLIA_OK);
    CU_ASSERT_EQUAL(glia_tensor_f32(v)[0], 4.0f);
    CU_ASSERT_EQUAL(glia_tensor_f32(v)[5], 9.0f);
    struct glia_shape too_big = glia_shape_make(1, (int64_t[]){7});
    CU_ASSERT_EQUAL(glia_tensor_view(t, 4, &too_big, &r), GLIA_EINVAL);
    struct glia_shape wrong = glia_shape_make(1, (int64_t[]){11});
    CU_ASSERT_EQUAL(glia_tensor_reshape(t, &wrong, &r), GLIA_EINVAL);
    glia_tensor_release(t);          /* the view still holds the storage */
    CU_ASSERT_EQUAL(glia_tensor_f32(v)[1], 5.0f);
    struct glia_shape flat = glia_shape_make(1, (int64_t[]){6});
    CU_ASSERT_EQUAL_FATAL(glia_tensor_reshape(v, &flat, &r), GLIA_OK);
    CU_ASSERT_EQUAL(glia_tensor_f32(r)[2], 6.0f);
    CU_ASSERT_PTR_EQUAL(glia_tensor_retain(r), r);
    glia_tensor_release(r);
    glia_tensor_release(r);
    glia_tensor_release(v);
    glia_context_free(ctx);
}

static void test_gemm(void)
{
    setup();
    /* C(2,2) = A(2,3) B^T where B is (2,3) */
    float A[6] = {1, 2, 3, 4, 5, 6}, B[6] = {1, 0, 1, 0, 1, 0}, C[4] = {10, 10, 10, 10};
    CU_ASSERT_EQUAL(glia_backend_gemm_f32(cpu, false, true, 2, 2, 3, 1.0f, A, 3, B, 3, 1.0f, C, 2), GLIA_OK);
    CU_ASSERT_EQUAL(C[0], 14.0f);
    CU_ASSERT_EQUAL(C[1], 12.0f);
    CU_ASSERT_EQUAL(C[2], 20.0f);
    CU_ASSERT_EQUAL(C[3], 15.0f);
    glia_context_free(ctx);
}

static void test_devices(void)
{
    struct glia_device d;
    char buf[32];
    CU_ASSERT_EQUAL(glia_device_parse("cpu", &d), GLIA_OK);
    CU_ASSERT_EQUAL(d.type, GLIA_DEVICE_CPU);
    CU_ASSERT_EQUAL(glia_device_parse("cuda:3", &d), GLIA_OK);
    CU_ASSERT_EQUAL(d.index, 3);
    CU_ASSERT_STRING_EQUAL(glia_device_str(d, buf, sizeof buf), "cuda:3");
    CU_ASSERT_EQUAL(glia_device_parse("cuda:", &d), GLIA_EINVAL);
    CU_ASSERT_EQUAL(glia_device_parse("gpu", &d), GLIA_EINVAL);
    setup();
    struct glia_backend *b;
    CU_ASSERT_EQUAL(glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CUDA, 0}, &b), GLIA_EDEVICE);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "no backend for device cuda:0"));
    CU_ASSERT_EQUAL(glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CPU, 1}, &b), GLIA_EDEVICE);
    glia_context_free(ctx);
}

static void test_status_table(void)
{
    int codes = 0;
#define CHECK(name, value, text)                                        \
    CU_ASSERT_STRING_EQUAL(glia_strerror(GLIA_##name), text);           \
    CU_ASSERT_STRING_EQUAL(glia_status_name(GLIA_##name), "GLIA_" #name); \
    CU_ASSERT(GLIA_##name <= 0);                                        \
    codes++;
    GLIA_STATUS_MAP(CHECK)
#undef CHECK
    CU_ASSERT(codes > 10);
    CU_ASSERT_STRING_EQUAL(glia_strerror((glia_status)-999), "unknown status");
    /* a message may wrap the one before it, passed as an argument */
    struct glia_context *c;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_error(c, GLIA_EDEVICE, "inner %d", 7), GLIA_EDEVICE);
    CU_ASSERT_EQUAL(glia_error(c, GLIA_EIO, "outer: %s (%s)", glia_context_error(c), "x"), GLIA_EIO);
    CU_ASSERT_STRING_EQUAL(glia_context_error(c), "outer: inner 7 (x)");
    glia_context_free(c);
}

static void test_rng(void)
{
    struct glia_rng a, b, c;
    glia__rng_seed(&a, 42);
    glia__rng_seed(&b, 42);
    glia__rng_seed(&c, 43);
    int same = 1, diff = 0;
    double sum = 0, sq = 0;
    for (int i = 0; i < 20000; i++) {
        uint64_t x = glia__rng_next(&a), y = glia__rng_next(&b), z = glia__rng_next(&c);
        same &= x == y;
        diff += x != z;
        double n = glia__rng_normal(&a);
        glia__rng_normal(&b);
        sum += n;
        sq += n * n;
    }
    CU_ASSERT(same);
    CU_ASSERT(diff > 19990);
    CU_ASSERT(fabs(sum / 20000) < 0.05);
    CU_ASSERT(fabs(sq / 20000 - 1.0) < 0.05);
}

GLIA_TEST_MAIN("tensor", GLIA_TEST(test_new_and_strides), GLIA_TEST(test_zeros_copy_host),
               GLIA_TEST(test_views_keep_storage_alive), GLIA_TEST(test_gemm), GLIA_TEST(test_devices),
               GLIA_TEST(test_status_table), GLIA_TEST(test_rng))
