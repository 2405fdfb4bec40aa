/* tests/test_loader.c — the data loader: batch order and contents independent of workers,
 * prefetch depth and persistence; drop_last; seeded augmentation; early shutdown.
 * Not the IDX reader (test_data.c). */
#include <stddef.h>
#include <string.h>
#include "loaderutil.h"
#include "testutil.h"

static struct glia__dataset make_set(int n, int rows, int cols)
{
    struct glia__dataset d = {.n = n, .channels = 1, .rows = rows, .cols = cols, .images = malloc((size_t)n * rows * cols),
                              .labels = malloc(sizeof(int32_t) * (size_t)n), .n_classes = 10};
    for (int64_t i = 0; i < (int64_t)n * rows * cols; i++) d.images[i] = (uint8_t)((i * 7 + i / 13) % 251);
    for (int i = 0; i < n; i++) d.labels[i] = i % 10;
    return d;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

/* hash of every batch of `epochs` epochs, in order */
static uint64_t run(const struct glia__dataset *d, struct glia__loader_options o, int epochs, int64_t *batches)
{
    struct glia_context *ctx;
    struct glia__loader L;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia__loader_init(&L, ctx, d, &o) == GLIA_OK);
    uint64_t h = 0xcbf29ce484222325ull;
    *batches = 0;
    for (int e = 1; e <= epochs; e++) {
        CU_ASSERT_FATAL(glia__loader_start_epoch(&L, e, 0) == GLIA_OK);
        const float *x;
        const int32_t *y;
        int64_t n;
        while (next_batch(&L, &x, &y, &n)) {
            h = fnv(h, x, sizeof(float) * (size_t)(n * d->rows * d->cols));
            h = fnv(h, y, sizeof(int32_t) * (size_t)n);
            h = fnv(h, &n, sizeof n);
            glia__loader_release(&L);
            (*batches)++;
        }
    }
    glia__loader_free(&L);
    glia_context_free(ctx);
    return h;
}

static void test_independent_of_workers(void)
{
    struct glia__dataset d = make_set(203, 5, 4);
    struct glia__loader_options o = {16, 0, 1, true, false, true, true, 2, {{0.3f}, {0.4f}}, 77, NULL, 0, 1, false, false, 0, 0, false, NULL};
    int64_t nb0, nb;
    uint64_t ref = run(&d, o, 3, &nb0);
    CU_ASSERT_EQUAL(nb0, 3 * 13);
    int workers[] = {1, 2, 3, 5}, prefetch[] = {1, 2, 4};
    for (int w = 0; w < 4; w++)
        for (int p = 0; p < 3; p++)
            for (int persistent = 0; persistent < 2; persistent++) {
                o.workers = workers[w];
                o.prefetch = prefetch[p];
                o.persistent = persistent;
                uint64_t h = run(&d, o, 3, &nb);
                CU_ASSERT_EQUAL(nb, nb0);
                if (h != ref) printf("\n  workers %d prefetch %d persistent %d differ\n", workers[w], prefetch[p], persistent);
                CU_ASSERT_EQUAL(h, ref);
            }
    o.seed = 78;  /* and the hash does see the order: another seed differs */
    CU_ASSERT_NOT_EQUAL(run(&d, o, 3, &nb), ref);
    free(d.images);
    free(d.labels);
}

static void test_epochs_reshuffle_and_cover(void)
{
    struct glia__dataset d = make_set(50, 2, 2);
    for (int i = 0; i < 50; i++) d.labels[i] = i;  /* labels identify samples */
    struct glia_context *ctx;
    struct glia__loader L;
    struct glia__loader_options o = {8, 2, 2, true, false, true, false, 0, {{0}, {1, 1, 1}}, 5, NULL, 0, 1, false, false, 0, 0, false, NULL};
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia__loader_init(&L, ctx, &d, &o) == GLIA_OK);
    int32_t order[2][50];
    for (int e = 1; e <= 2; e++) {
        int seen[50] = {0}, k = 0;
        CU_ASSERT_FATAL(glia__loader_start_epoch(&L, e, 0) == GLIA_OK);
        const float *x;
        const int32_t *y;
        int64_t n;
        while (next_batch(&L, &x, &y, &n)) {
            for (int64_t i = 0; i < n; i++) {
                seen[y[i]]++;
                order[e - 1][k++] = y[i];
            }
            glia__loader_release(&L);
        }
        CU_ASSERT_EQUAL(k, 50);
        for (int i = 0; i < 50; i++) CU_ASSERT_EQUAL(seen[i], 1);
    }
    CU_ASSERT_NOT_EQUAL(memcmp(order[0], order[1], sizeof order[0]), 0);
    glia__loader_free(&L);
    glia_context_free(ctx);
    free(d.images);
    free(d.labels);
}

static void test_drop_last(void)
{
    struct glia__dataset d = make_set(100, 2, 2);
    int64_t nb = 0;
    struct glia__loader_options o = {32, 2, 2, true, true, true, false, 0, {{0}, {1, 1, 1}}, 1, NULL, 0, 1, false, false, 0, 0, false, NULL};
    run(&d, o, 1, &nb);
    CU_ASSERT_EQUAL(nb, 3);
    o.drop_last = false;
    run(&d, o, 1, &nb);
    CU_ASSERT_EQUAL(nb, 4);
    free(d.images);
    free(d.labels);
}

/* With flip, every sample is the image or its mirror, both occur; with crop padding every
 * sample is the image shifted by at most the padding, zero filled. */
static void test_augmentation(void)
{
    int rows = 6, cols = 7, n = 64;
    struct glia__dataset d = make_set(n, rows, cols);
    for (int64_t i = 0; i < (int64_t)n * rows * cols; i++) d.images[i] = (uint8_t)(1 + (i % 250));
    struct glia_context *ctx;
    struct glia__loader L;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    for (int mode = 0; mode < 2; mode++) {
        struct glia__loader_options o = {n, 2, 2, true, false, false, mode == 0, mode == 1 ? 2 : 0, {{0}, {1, 1, 1}}, 3, NULL, 0, 1, false, false, 0, 0, false, NULL};
        CU_ASSERT_FATAL(glia__loader_init(&L, ctx, &d, &o) == GLIA_OK);
        CU_ASSERT_FATAL(glia__loader_start_epoch(&L, 1, 0) == GLIA_OK);
        const float *x = NULL;
        const int32_t *y;
        int64_t nb = 0;
        CU_ASSERT_FATAL(next_batch(&L, &x, &y, &nb));
        int plain = 0, changed = 0;
        for (int s = 0; s < n; s++) {
            const uint8_t *img = d.images + (int64_t)s * rows * cols;
            const float *v = x + (int64_t)s * rows * cols;
            int match_any = 0;
            for (int dy = -2; dy <= 2; dy++)
                for (int dx = -2; dx <= 2; dx++)
                    for (int flip = 0; flip < 2; flip++) {
                        if ((mode == 0 && (dy || dx)) || (mode == 1 && flip)) continue;
                        int ok = 1;
                        for (int i = 0; i < rows && ok; i++)
                            for (int j = 0; j < cols && ok; j++) {
                                int si = i + dy, sj = (flip ? cols - 1 - j : j) + dx;
                                float want = (si >= 0 && si < rows && sj >= 0 && sj < cols) ? img[si * cols + sj] / 255.0f : 0;
                                ok = v[i * cols + j] == want;
                            }
                        if (ok) {
                            match_any = 1;
                            if (dy || dx || flip) changed++;
                            else plain++;
                        }
                    }
            CU_ASSERT(match_any);
        }
        CU_ASSERT(plain > 0);
        CU_ASSERT(changed > n / 4);
        glia__loader_release(&L);
        glia__loader_free(&L);
    }
    glia_context_free(ctx);
    free(d.images);
    free(d.labels);
}

static void test_wait_time_and_early_stop(void)
{
    struct glia__dataset d = make_set(4000, 28, 28);
    struct glia_context *ctx;
    struct glia__loader L;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct glia__loader_options o = {64, 0, 2, true, false, true, false, 0, {{0}, {1, 1, 1}}, 1, NULL, 0, 1, false, false, 0, 0, false, NULL};
    CU_ASSERT_FATAL(glia__loader_init(&L, ctx, &d, &o) == GLIA_OK);
    CU_ASSERT_FATAL(glia__loader_start_epoch(&L, 1, 0) == GLIA_OK);
    const float *x;
    const int32_t *y;
    int64_t n;
    while (next_batch(&L, &x, &y, &n)) glia__loader_release(&L);
    CU_ASSERT(L.wait_s > 0);  /* without workers the step waits for every batch */
    glia__loader_free(&L);
    /* stop after one batch while workers are blocked on full rings: must not hang */
    o.workers = 3;
    CU_ASSERT_FATAL(glia__loader_init(&L, ctx, &d, &o) == GLIA_OK);
    CU_ASSERT_FATAL(glia__loader_start_epoch(&L, 1, 0) == GLIA_OK);
    CU_ASSERT(next_batch(&L, &x, &y, &n));
    glia__loader_release(&L);
    glia__loader_free(&L);
    glia_context_free(ctx);
    free(d.images);
    free(d.labels);
}

/* [data] resident: batches made by a backend's batch_u8 from the order of an order_only loader equal the loader's
 * own, bit for bit: crop padding and flip, reshuffled epochs, three channels (the table per channel), both ranks of a
 * padded two-way shard and a last partial batch. The backend here is the CPU's; tests/test_cuda.c runs the same
 * comparison on CUDA. */
static void test_resident_batches_match(void)
{
    int rows = 7, cols = 6, C = 3, n = 101;
    struct glia__dataset d = make_set(n * C, rows, cols);
    d.n = n, d.channels = C;
    struct glia_context *ctx;
    struct glia_backend *cpu;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CPU, 0}, &cpu) == GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_can_batch_u8(cpu));
    int64_t per = (int64_t)C * rows * cols, compared = 0, differ = 0;
    float *x = malloc(sizeof(float) * (size_t)(16 * per));
    int32_t y[16];
    for (int world = 1; world <= 2; world++)
        for (int rank = 0; rank < world; rank++) {
            struct glia__loader_options o = {16, 2, 2, true, false, true, true, 2, {{0.1f, 0.2f, 0.3f}, {0.5f, 0.25f, 0.7f}},
                                             42, NULL, rank, world, true, false, 0, 0, false, NULL};
            struct glia__loader A, B;
            CU_ASSERT_FATAL(glia__loader_init(&A, ctx, &d, &o) == GLIA_OK);
            o.order_only = true;
            CU_ASSERT_FATAL(glia__loader_init(&B, ctx, &d, &o) == GLIA_OK);
            CU_ASSERT_EQUAL(B.workers, 0);
            CU_ASSERT_EQUAL(B.n_batches_per_epoch, A.n_batches_per_epoch);
            for (int e = 1; e <= 3; e++) {
                CU_ASSERT_FATAL(glia__loader_start_epoch(&A, e, 0) == GLIA_OK);
                CU_ASSERT_FATAL(glia__loader_start_epoch(&B, e, 0) == GLIA_OK);
                struct glia__batch a, b;
                while (glia__loader_next(&A, &a)) {
                    CU_ASSERT_FATAL(glia__loader_next(&B, &b));
                    CU_ASSERT_PTR_NULL(b.x);
                    CU_ASSERT_EQUAL_FATAL(b.n, a.n);
                    CU_ASSERT_EQUAL(b.first, a.first);
                    CU_ASSERT_EQUAL(glia_backend_batch_u8(cpu, x, y, d.images, d.labels, B.perm + b.first, b.n, C, rows,
                                                          cols, &B.table[0][0], 2, true, 42, e), GLIA_OK);
                    CU_ASSERT_EQUAL(memcmp(x, a.x, sizeof(float) * (size_t)(a.n * per)), 0);
                    CU_ASSERT_EQUAL(memcmp(y, a.y, sizeof(int32_t) * (size_t)a.n), 0);
                    compared += a.n;
                    /* the comparison sees the draw: another epoch's augmentation differs */
                    CU_ASSERT_EQUAL(glia_backend_batch_u8(cpu, x, y, d.images, d.labels, B.perm + b.first, b.n, C, rows,
                                                          cols, &B.table[0][0], 2, true, 42, e + 1), GLIA_OK);
                    differ += memcmp(x, a.x, sizeof(float) * (size_t)(a.n * per)) != 0;
                    glia__loader_release(&A);
                    glia__loader_release(&B);
                }
                CU_ASSERT_FALSE(glia__loader_next(&B, &b));
            }
            glia__loader_free(&A);
            glia__loader_free(&B);
        }
    CU_ASSERT_EQUAL(compared, 3 * (101 + 2 * 51));  /* one rank of 101, two of 51 (padded) */
    CU_ASSERT(differ > 0);
    free(x);
    glia_context_free(ctx);
    free(d.images);
    free(d.labels);
}

/* The data group is read only where the backend's ops reach it (ABI 2.1) and it holds batch_u8; mem_info is optional
 * and its absence is an answer, not an error (the CPU's). */
static void test_resident_slot_gating(void)
{
    struct glia_context *ctx;
    struct glia_backend *cpu;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CPU, 0}, &cpu) == GLIA_OK);
    size_t free_b = 1, total = 1;
    glia_context_clear_error(ctx);
    CU_ASSERT_EQUAL(glia_backend_mem_info(cpu, &free_b, &total), GLIA_EUNSUPPORTED);
    CU_ASSERT_STRING_EQUAL(glia_context_error(ctx), "");
    struct glia_backend_ops old = *cpu->ops;  /* built against ABI 2.0: ends at the graph group */
    old.struct_size = (uint32_t)(offsetof(struct glia_backend_ops, graph) + sizeof old.graph);
    struct glia_backend b = *cpu;
    b.ops = &old;
    CU_ASSERT_FALSE(glia_backend_can_batch_u8(&b));
    CU_ASSERT_EQUAL(glia_backend_batch_u8(&b, NULL, NULL, NULL, NULL, NULL, 0, 1, 1, 1, NULL, 0, false, 0, 1),
                    GLIA_EUNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "the cpu backend cannot make batches from a resident"));
    struct glia_backend_ops now = *cpu->ops;
    struct glia_backend_data_ops empty = {.struct_size = sizeof empty};  /* no batch_u8: no group */
    now.data = &empty;
    b.ops = &now;
    CU_ASSERT_FALSE(glia_backend_can_batch_u8(&b));
    b.ops = cpu->ops;
    CU_ASSERT(glia_backend_can_batch_u8(&b));
    glia_context_free(ctx);
}

GLIA_TEST_MAIN("loader", GLIA_TEST(test_independent_of_workers), GLIA_TEST(test_epochs_reshuffle_and_cover),
               GLIA_TEST(test_drop_last), GLIA_TEST(test_augmentation), GLIA_TEST(test_wait_time_and_early_stop),
               GLIA_TEST(test_resident_batches_match), GLIA_TEST(test_resident_slot_gating))
