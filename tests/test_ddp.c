/* tests/test_ddp.c — data-parallel training in one process: gradient bucket assignment, the
 * distributed sampler's shards, [distributed] configuration errors, the built-in self transport,
 * a device-memory-only transport (as nccl) started through it and the host exchanges staged for it.
 * Not multi-process training: tests/test_ddp_mpi.c runs that under mpirun. */
#include <stdlib.h>
#include <string.h>
#include "loaderutil.h"
#include "parts.h"
#include "modelutil.h"

/* Every bucket is a run of adjacent parameters, numbered from the last parameter backwards. */
static void check_contiguous(const int *bucket_of, int n, int n_buckets)
{
    CU_ASSERT_EQUAL(bucket_of[n - 1], 0);
    CU_ASSERT_EQUAL(bucket_of[0], n_buckets - 1);
    for (int i = n - 1; i > 0; i--) {
        int d = bucket_of[i - 1] - bucket_of[i];
        CU_ASSERT(d == 0 || d == 1);
    }
}

static void test_buckets_reverse_order_and_caps(void)
{
    /* 4-byte elements: sizes in bytes 400, 4000, 40, 4000, 400, 40 */
    int64_t sizes[] = {100, 1000, 10, 1000, 100, 10};
    int b[6];
    /* first bucket closes at >= 100 bytes, the others at >= 4000 */
    int n = glia__ddp_buckets(sizes, 6, 4, 100, 4000, b);
    /* from the end: 40 (<100) + 400 -> bucket 0 closes at 440; 4000 -> bucket 1; 40 + 4000 -> 2;
     * 400 -> bucket 3 (open, the last) */
    int want[] = {3, 2, 2, 1, 0, 0};
    CU_ASSERT_EQUAL(n, 4);
    for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(b[i], want[i]);
    check_contiguous(b, 6, n);
}

static void test_buckets_edges(void)
{
    int64_t sizes[] = {5, 7, 9};
    int b[3];
    /* caps larger than everything: one bucket */
    CU_ASSERT_EQUAL(glia__ddp_buckets(sizes, 3, 4, 1 << 20, 1 << 20, b), 1);
    for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(b[i], 0);
    /* tiny caps: one parameter per bucket, in reverse */
    CU_ASSERT_EQUAL(glia__ddp_buckets(sizes, 3, 4, 1, 1, b), 3);
    CU_ASSERT_EQUAL(b[0], 2);
    CU_ASSERT_EQUAL(b[1], 1);
    CU_ASSERT_EQUAL(b[2], 0);
    /* exactly at the cap closes the bucket: 9*4 = 36 */
    CU_ASSERT_EQUAL(glia__ddp_buckets(sizes, 3, 4, 36, 1 << 20, b), 2);
    CU_ASSERT_EQUAL(b[2], 0);
    CU_ASSERT_EQUAL(b[1], 1);
    CU_ASSERT_EQUAL(b[0], 1);
    CU_ASSERT_EQUAL(glia__ddp_buckets(sizes, 0, 4, 1, 1, b), 0);
}

/* A random bucket layout's buckets cover every parameter once, each at least its cap but the last. */
static void test_buckets_random(void)
{
    struct glia_rng r;
    glia__rng_seed(&r, 3);
    for (int trial = 0; trial < 50; trial++) {
        int n = 1 + (int)(glia__rng_next(&r) % 40);
        int64_t sizes[40];
        int b[40];
        for (int i = 0; i < n; i++) sizes[i] = 1 + (int64_t)(glia__rng_next(&r) % 5000);
        size_t first = 1 + glia__rng_next(&r) % 8000, cap = 1 + glia__rng_next(&r) % 40000;
        int nb = glia__ddp_buckets(sizes, n, 4, first, cap, b);
        check_contiguous(b, n, nb);
        for (int k = 0; k < nb; k++) {
            size_t bytes = 0;
            for (int i = 0; i < n; i++) bytes += b[i] == k ? (size_t)sizes[i] * 4 : 0;
            if (k < nb - 1) CU_ASSERT(bytes >= (k == 0 ? first : cap));
            CU_ASSERT(bytes > 0);
        }
    }
}

static void test_shard_padded(void)
{
    int64_t order[10], all[3][4];
    for (int world = 1; world <= 4; world++)
        for (int64_t n = 1; n <= 10; n++) {
            int counts[10] = {0};
            int64_t per = -1;
            for (int rank = 0; rank < world; rank++) {
                glia__permutation(order, n, 5 + (uint64_t)n);
                int64_t k = glia__shard(order, n, rank, world, true);
                CU_ASSERT_EQUAL(k, (n + world - 1) / world);  /* every rank the same count */
                if (per >= 0) CU_ASSERT_EQUAL(k, per);
                per = k;
                for (int64_t i = 0; i < k; i++) counts[order[i]]++;
            }
            int64_t sum = 0;
            for (int64_t i = 0; i < n; i++) {  /* all covered; padding adds world - 1 at most */
                CU_ASSERT(counts[i] >= 1);
                sum += counts[i];
            }
            CU_ASSERT_EQUAL(sum, per * world);
            CU_ASSERT(sum - n < world);
        }
    /* n = 10, world 3: order 3,0,7,4,1,8,5,2,9,6 padded with 3,0: rank r takes positions r, r+3, ... */
    for (int rank = 0; rank < 3; rank++) {
        for (int64_t i = 0; i < 10; i++) order[i] = (i * 7 + 3) % 10;
        CU_ASSERT_EQUAL(glia__shard(order, 10, rank, 3, true), 4);
        memcpy(all[rank], order, sizeof(int64_t) * 4);
    }
    int64_t want[3][4] = {{3, 4, 5, 6}, {0, 1, 2, 3}, {7, 8, 9, 0}};
    CU_ASSERT_EQUAL(memcmp(all, want, sizeof want), 0);
}

static void test_shard_unpadded(void)
{
    int64_t order[7];
    int seen[7] = {0};
    int64_t total = 0;
    for (int rank = 0; rank < 3; rank++) {
        for (int i = 0; i < 7; i++) order[i] = i;
        int64_t k = glia__shard(order, 7, rank, 3, false);
        CU_ASSERT_EQUAL(k, rank == 0 ? 3 : 2);
        for (int64_t i = 0; i < k; i++) {
            seen[order[i]]++;
            CU_ASSERT_EQUAL(order[i] % 3, rank);
        }
        total += k;
    }
    CU_ASSERT_EQUAL(total, 7);
    for (int i = 0; i < 7; i++) CU_ASSERT_EQUAL(seen[i], 1);
}

/* The loader's epoch under a shard: the rank's batches are its share of the shuffled order. */
static void test_loader_shards_epoch(void)
{
    const char *img = glia_test_tmp("ddp-img"), *lab = glia_test_tmp("ddp-lab");
    CU_ASSERT_FATAL(glia_test_write_idx(img, lab, 11, 2, 2, 11, 5) == 0);
    struct glia_context *c;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    struct glia__dataset d;
    CU_ASSERT_FATAL(glia__idx_load(c, img, lab, 0, &d) == GLIA_OK);
    int seen[11] = {0};
    for (int rank = 0; rank < 2; rank++) {
        struct glia__loader L;
        struct glia__loader_options o = {4, 1, 2, true, false, true, false, 0, {{0}, {1, 1, 1}}, 9, NULL, rank, 2, true, false, 0, 0, false, NULL};
        CU_ASSERT_FATAL(glia__loader_init(&L, c, &d, &o) == GLIA_OK);
        CU_ASSERT_EQUAL(L.n_batches_per_epoch, 2);  /* 6 samples each (11 padded to 12): 4 + 2 */
        CU_ASSERT_FATAL(glia__loader_start_epoch(&L, 3, 0) == GLIA_OK);
        int64_t perm[11], n;
        for (int i = 0; i < 11; i++) perm[i] = i;
        glia__permutation(perm, 11, 9 + 3);
        const float *x;
        const int32_t *y;
        int64_t got = 0;
        while (next_batch(&L, &x, &y, &n)) {
            for (int64_t i = 0; i < n; i++, got++) {
                int64_t pos = 2 * got + rank;  /* this rank's samples: every other position */
                CU_ASSERT_EQUAL(y[i], d.labels[perm[pos % 11]]);
                seen[perm[pos % 11]]++;
            }
            glia__loader_release(&L);
        }
        CU_ASSERT_EQUAL(got, 6);
        glia__loader_free(&L);
    }
    for (int i = 0; i < 11; i++) CU_ASSERT(seen[i] >= 1);
    glia__dataset_free(&d);
    glia_context_free(c);
}

/* [distributed] mistakes are one-line errors naming the file, line, section and key. */
static void expect_error(const char *dist, const char *want1, const char *want2)
{
    const char *img = glia_test_tmp("ddp-img"), *lab = glia_test_tmp("ddp-lab");
    char text[2048];
    snprintf(text, sizeof text,
             "[runtime]\ndevice = cpu\n[data]\ntrain_images = %s\ntrain_labels = %s\ntest_images = %s\ntest_labels = %s\n"
             "[distributed]\n%s\n[fc]\ntype = linear\noutputs = 3\n[loss]\ntype = softmax_cross_entropy\n",
             img, lab, img, lab, dist);
    struct glia_context *c;
    struct glia_config *cfg;
    struct glia_model *m = NULL;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_parse_string(c, "t.ini", text, &cfg) == GLIA_OK);
    CU_ASSERT_NOT_EQUAL(glia_model_build(c, cfg, &m), GLIA_OK);
    const char *e = glia_context_error(c);
    if (!strstr(e, want1) || !strstr(e, want2)) printf("\n  got: %s\n", e);
    CU_ASSERT_PTR_NOT_NULL(strstr(e, want1));
    CU_ASSERT_PTR_NOT_NULL(strstr(e, want2));
    CU_ASSERT_PTR_NULL(strchr(e, '\n'));
    glia_config_free(cfg);
    glia_context_free(c);
}

static void test_config_errors(void)
{
    expect_error("mode = ddp\ntransport = carrier_pigeon", "t.ini:10: [distributed] transport", "'carrier_pigeon' is not available");
    expect_error("mode = federated", "t.ini:9: [distributed] mode", "federated");
    expect_error("bucket_mb = 0", "t.ini:9: [distributed] bucket_mb", "out of range");
    expect_error("timeout = 5", "[distributed]", "timeout_s");  /* did you mean */
}

/* The built-in self transport: rank 0 of 1; reductions and broadcasts leave the data, gathers copy. */
static void test_self_transport(void)
{
    struct glia_context *ctx;
    struct glia_backend *cpu;
    struct glia_comm *c;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CPU, 0}, &cpu) == GLIA_OK);
    CU_ASSERT_FATAL(glia_comm_open(ctx, "self", cpu, 5, &c) == GLIA_OK);
    CU_ASSERT(c->info.rank == 0 && c->info.world == 1 && c->info.local_world == 1);
    float v[4] = {1, -2, 3.5f, 4}, w[4] = {0};
    uint64_t t;
    CU_ASSERT_EQUAL(glia_comm_all_reduce_sync(c, v, 4, GLIA_F32, GLIA_REDUCE_AVG), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_broadcast_sync(c, v, 4, GLIA_F32, 0), GLIA_OK);
    CU_ASSERT(v[0] == 1 && v[1] == -2 && v[2] == 3.5f && v[3] == 4);
    CU_ASSERT_EQUAL(glia_comm_all_gather(c, w, v, 4, GLIA_F32, &t), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_wait(c, t, true), GLIA_OK);
    CU_ASSERT_EQUAL(memcmp(v, w, sizeof v), 0);
    memset(w, 0, sizeof w);
    CU_ASSERT_EQUAL(glia_comm_reduce_scatter(c, w, v, 3, GLIA_F32, GLIA_REDUCE_SUM, &t), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_barrier(c, &t), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_wait(c, t, true), GLIA_OK);
    CU_ASSERT(w[0] == 1 && w[2] == 3.5f && w[3] == 0);
    CU_ASSERT_EQUAL(glia_comm_broadcast_sync(c, v, 4, GLIA_F32, 1), GLIA_EINVAL);  /* no rank 1 */
    glia_context_free(ctx);
    /* under a launcher of several ranks, self refuses: each rank would train alone */
    setenv("WORLD_SIZE", "2", 1);
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CPU, 0}, &cpu) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_open(ctx, "self", cpu, 5, &c), GLIA_ECONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "the launcher started 2 ranks"));
    unsetenv("WORLD_SIZE");
    glia_context_free(ctx);
}

/* The host exchanges of ddp's start-up check (all-reduce of i64, broadcast of u8 bytes) go
 * through a device copy for a transport of device memory only, as with nccl: the devonly fixture
 * refuses host stack buffers. glia_comm_abort_job has no job of several ranks to end here: it
 * says so and returns. */
static void test_host_exchanges_staged(void)
{
    struct glia_context *ctx;
    struct glia_backend *cpu;
    struct glia_comm *c;
    char path[600];
    snprintf(path, sizeof path, "%s/devonly.so", glia_test_fixtures());
    static const char *const launcher[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS", "WORLD_SIZE"};
    for (size_t i = 0; i < sizeof launcher / sizeof *launcher; i++) unsetenv(launcher[i]);  /* it boots through self */
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_plugin_load(ctx, path) == GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CPU, 0}, &cpu) == GLIA_OK);
    glia_status st = glia_comm_open(ctx, "devonly", cpu, 5, &c);
    if (st) printf("\n  %s\n", glia_context_error(ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    char bytes[13] = "ab\0cd\0ef\0gh\0";
    int64_t sums[3] = {-7, 1ll << 40, 3};
    CU_ASSERT_EQUAL(glia__comm_broadcast_host(c, bytes, sizeof bytes, GLIA_U8, 0), GLIA_OK);
    CU_ASSERT_EQUAL(memcmp(bytes, "ab\0cd\0ef\0gh\0", sizeof bytes), 0);
    CU_ASSERT_EQUAL(glia__comm_all_reduce_host(c, sums, 3, GLIA_I64, GLIA_REDUCE_SUM), GLIA_OK);
    CU_ASSERT(sums[0] == -7 && sums[1] == 1ll << 40 && sums[2] == 3);
    CU_ASSERT_EQUAL(glia__comm_broadcast_host(c, bytes, sizeof bytes, GLIA_U8, 1), GLIA_EINVAL);  /* no rank 1 */
    CU_ASSERT_EQUAL(glia_comm_abort_job(ctx, 1), GLIA_ENOTFOUND);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "no communicator over several ranks"));
    glia_context_free(ctx);
}

/* A transport of device memory only (nccl's kind) opened by a process no launcher started: it
 * starts through self, not mpi, and DDP training through it (world 1) stages every host array it
 * reduces onto the backend and ends with the weights of training without DDP. */
static void test_device_only_transport(void)
{
    const char *fx = glia_test_fixtures();
    char dir[600], img[700], lab[700], text[4096];
    snprintf(dir, sizeof dir, "%s", glia_test_tmp("ddp-devonly"));
    snprintf(img, sizeof img, "mkdir -p '%s'", dir);
    CU_ASSERT_FATAL(system(img) == 0);
    snprintf(img, sizeof img, "%s/img", dir);
    snprintf(lab, sizeof lab, "%s/lab", dir);
    CU_ASSERT_FATAL(glia_test_write_idx(img, lab, 96, 4, 4, 3, 5) == 0);
    unsetenv("GLIA_DEVONLY_BOOT");
    static const char *const launcher[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS", "WORLD_SIZE"};
    for (size_t i = 0; i < sizeof launcher / sizeof *launcher; i++) unsetenv(launcher[i]);  /* a process started alone */
    float *w[2];
    long long n;
    for (int k = 0; k < 2; k++) {
        snprintf(text, sizeof text,
                 "[runtime]\ndevice = cpu\n[plugins]\nload = %s/devonly.so\n"
                 "[data]\ntrain_images = %s\ntrain_labels = %s\ntest_images = %s\ntest_labels = %s\nbatch_size = 16\n"
                 "[distributed]\nmode = %s\ntransport = devonly\nbucket_mb = 0.0001\n"
                 "[train]\nepochs = 2\n[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 3\n"
                 "[loss]\ntype = softmax_cross_entropy\n",
                 fx, img, lab, img, lab, k ? "ddp" : "none");
        struct run r;
        open_run(&r, text);
        glia_status st = glia_model_train(r.m, &quiet, NULL, 0);
        if (st) printf("\n  %s\n", glia_context_error(r.ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        w[k] = weights(&r, &n);
        close_run(&r);
    }
    const char *boot = getenv("GLIA_DEVONLY_BOOT");
    CU_ASSERT_PTR_NOT_NULL_FATAL(boot);
    CU_ASSERT_STRING_EQUAL(boot, "self");
    CU_ASSERT_EQUAL(memcmp(w[0], w[1], (size_t)n * sizeof(float)), 0);
    free(w[0]);
    free(w[1]);
}

GLIA_TEST_MAIN("ddp", GLIA_TEST(test_self_transport), GLIA_TEST(test_host_exchanges_staged),
               GLIA_TEST(test_device_only_transport), GLIA_TEST(test_buckets_reverse_order_and_caps), GLIA_TEST(test_buckets_edges),
               GLIA_TEST(test_buckets_random), GLIA_TEST(test_shard_padded), GLIA_TEST(test_shard_unpadded),
               GLIA_TEST(test_loader_shards_epoch), GLIA_TEST(test_config_errors))
