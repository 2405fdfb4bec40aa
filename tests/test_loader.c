/* tests/test_loader.c — the data loader: batch order and contents independent of workers,
 * prefetch depth and persistence; drop_last; seeded augmentation; early shutdown.
 * Not the IDX reader (test_data.c). */
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
    struct glia__loader_options o = {16, 0, 1, true, false, true, true, 2, {{0.3f}, {0.4f}}, 77, NULL, 0, 1, false, false, 0, 0};
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
    struct glia__loader_options o = {8, 2, 2, true, false, true, false, 0, {{0}, {1, 1, 1}}, 5, NULL, 0, 1, false, false, 0, 0};
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
    struct glia__loader_options o = {32, 2, 2, true, true, true, false, 0, {{0}, {1, 1, 1}}, 1, NULL, 0, 1, false, false, 0, 0};
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
        struct glia__loader_options o = {n, 2, 2, true, false, false, mode == 0, mode == 1 ? 2 : 0, {{0}, {1, 1, 1}}, 3, NULL, 0, 1, false, false, 0, 0};
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
    struct glia__loader_options o = {64, 0, 2, true, false, true, false, 0, {{0}, {1, 1, 1}}, 1, NULL, 0, 1, false, false, 0, 0};
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

GLIA_TEST_MAIN("loader", GLIA_TEST(test_independent_of_workers), GLIA_TEST(test_epochs_reshuffle_and_cover),
               GLIA_TEST(test_drop_last), GLIA_TEST(test_augmentation), GLIA_TEST(test_wait_time_and_early_stop))
