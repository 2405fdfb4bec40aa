/* tests/test_comm.c — the mpi transport across 3 ranks: every collective with values that depend on the
 * rank, tickets, groups, two communicators at once, errors, ranks in different collectives and a
 * timeout. Not DDP or SyncBatchNorm. */
#include <glia/glia.h>
#include <math.h>
#include <time.h>
#include "mpiutil.h"

#define WORLD 3
#define TIMEOUT 60.0  /* seconds; only the slow communicator of test_timeout uses 1 s */

/* One context stays open for the whole program: MPI starts once per process. */
static struct glia_context *ctx, *ctx2, *ctx3;
static struct glia_comm *comm, *comm2;
static int rank = -1;

/* The mpi communicator of a new context, or NULL (with the reason printed). */
static struct glia_comm *open_mpi(struct glia_context **c, double timeout)
{
    struct glia_backend *cpu;
    struct glia_comm *out = NULL;
    if (glia_context_new(c) || glia_backend_get(*c, (struct glia_device){GLIA_DEVICE_CPU, 0}, &cpu) ||
        glia_comm_open(*c, "mpi", cpu, timeout, &out))
        printf("open: %s\n", *c ? glia_context_error(*c) : "no context");
    return out;
}

/* A blocking call: the ticket's wait must succeed. */
#define DONE(call)                                                        \
    do {                                                                  \
        uint64_t t_;                                                      \
        CU_ASSERT_EQUAL_FATAL((call), GLIA_OK);                           \
        glia_status st_ = glia_comm_wait(comm, t_, true);                 \
        if (st_) printf("wait: %s\n", glia_context_error(ctx));           \
        CU_ASSERT_EQUAL(st_, GLIA_OK);                                    \
    } while (0)

static void test_open(void)
{
    comm = open_mpi(&ctx, TIMEOUT);
    CU_ASSERT_PTR_NOT_NULL_FATAL(comm);
    rank = comm->info.rank;
    CU_ASSERT_EQUAL(rank, mpi_env_rank());
    CU_ASSERT_EQUAL(comm->info.world, WORLD);
    CU_ASSERT_EQUAL(comm->info.local_rank, rank);  /* all ranks on this machine */
    CU_ASSERT_EQUAL(comm->info.local_world, WORLD);
    CU_ASSERT_STRING_EQUAL(comm->ops->name, "mpi");
    struct glia_backend *cpu;
    struct glia_comm *again;
    CU_ASSERT_EQUAL(glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CPU, 0}, &cpu), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_open(ctx, "mpi", cpu, TIMEOUT, &again), GLIA_OK);
    CU_ASSERT_PTR_EQUAL(again, comm);
}

/* Rank r holds v(r, i) = ((r + i) % 3) * 10 - i: over the 3 ranks the sum is 30 - 3i, the mean
 * 10 - i, the max 20 - i and the min -i. */
static double v(int r, int i) { return ((r + i) % 3) * 10 - i; }
static double expect(enum glia_reduce_op op, int i)
{
    return op == GLIA_REDUCE_SUM ? 30 - 3 * i : op == GLIA_REDUCE_AVG ? 10 - i : op == GLIA_REDUCE_MAX ? 20 - i : -i;
}

static void test_all_reduce(void)
{
    enum { N = 1000 };
    static float f[N];
    static double d[N];
    static int32_t k[N];
    for (int op = GLIA_REDUCE_SUM; op <= GLIA_REDUCE_MIN; op++) {
        for (int i = 0; i < N; i++) f[i] = (float)v(rank, i), d[i] = v(rank, i), k[i] = (int32_t)v(rank, i);
        DONE(glia_comm_all_reduce(comm, f, N, GLIA_F32, op, &t_));
        DONE(glia_comm_all_reduce(comm, d, N, GLIA_F64, op, &t_));
        if (op != GLIA_REDUCE_AVG) DONE(glia_comm_all_reduce(comm, k, N, GLIA_I32, op, &t_));
        int bad = 0;
        for (int i = 0; i < N; i++)
            bad += f[i] != (float)expect(op, i) || d[i] != expect(op, i) ||
                   (op != GLIA_REDUCE_AVG && k[i] != (int32_t)expect(op, i));
        if (bad) printf("all-reduce %s: %d wrong values\n", glia_reduce_op_name(op), bad);
        CU_ASSERT_EQUAL(bad, 0);
    }
    /* the mean of non-integral values: (0.5 + 1.5 + 2.5) / 3 */
    double m = rank + 0.5;
    DONE(glia_comm_all_reduce(comm, &m, 1, GLIA_F64, GLIA_REDUCE_AVG, &t_));
    CU_ASSERT_DOUBLE_EQUAL(m, 1.5, 1e-15);
    int64_t big = (int64_t)(rank + 1) << 40;
    DONE(glia_comm_all_reduce(comm, &big, 1, GLIA_I64, GLIA_REDUCE_SUM, &t_));
    CU_ASSERT_EQUAL(big, (int64_t)6 << 40);
}

static void test_broadcast(void)
{
    enum { N = 300 };
    float f[N];
    uint8_t u[N];
    for (int i = 0; i < N; i++) {
        f[i] = rank == 1 ? 7.0f * i + 0.25f : -1.0f;
        u[i] = rank == 1 ? (uint8_t)(i * 13) : 0;
    }
    DONE(glia_comm_broadcast(comm, f, N, GLIA_F32, 1, &t_));
    DONE(glia_comm_broadcast(comm, u, N, GLIA_U8, 1, &t_));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += f[i] != 7.0f * i + 0.25f || u[i] != (uint8_t)(i * 13);
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_all_gather(void)
{
    enum { N = 5 };
    int32_t src[N], dst[WORLD * N];
    double inplace[WORLD * N];
    for (int j = 0; j < N; j++) src[j] = 100 * rank + j;
    for (int j = 0; j < WORLD * N; j++) dst[j] = -1, inplace[j] = j / N == rank ? 0.5 * (100 * rank + j % N) : -1;
    DONE(glia_comm_all_gather(comm, dst, src, N, GLIA_I32, &t_));
    DONE(glia_comm_all_gather(comm, inplace, inplace + rank * N, N, GLIA_F64, &t_));
    for (int r = 0; r < WORLD; r++)
        for (int j = 0; j < N; j++) {
            CU_ASSERT_EQUAL(dst[r * N + j], 100 * r + j);
            CU_ASSERT_EQUAL(inplace[r * N + j], 0.5 * (100 * r + j));
        }
}

static void test_reduce_scatter(void)
{
    enum { N = 4 };
    float src[WORLD * N], dst[N];
    int64_t isrc[WORLD * N], idst[N];
    for (int b = 0; b < WORLD; b++)
        for (int j = 0; j < N; j++) src[b * N + j] = (float)(rank + 10 * b + j), isrc[b * N + j] = rank * (b + 1) + j;
    DONE(glia_comm_reduce_scatter(comm, dst, src, N, GLIA_F32, GLIA_REDUCE_SUM, &t_));
    DONE(glia_comm_reduce_scatter(comm, idst, isrc, N, GLIA_I64, GLIA_REDUCE_MAX, &t_));
    for (int j = 0; j < N; j++) {
        CU_ASSERT_EQUAL(dst[j], 3 + 30 * rank + 3 * j);    /* sum over r of r + 10 rank + j */
        CU_ASSERT_EQUAL(idst[j], 2 * (rank + 1) + j);     /* rank 2 holds the largest */
    }
    DONE(glia_comm_reduce_scatter(comm, dst, src, N, GLIA_F32, GLIA_REDUCE_AVG, &t_));
    for (int j = 0; j < N; j++) CU_ASSERT_DOUBLE_EQUAL(dst[j], 1 + 10 * rank + j, 1e-6);
    DONE(glia_comm_reduce_scatter(comm, src, src, N, GLIA_F32, GLIA_REDUCE_MIN, &t_));  /* in place */
    for (int j = 0; j < N; j++) CU_ASSERT_EQUAL(src[j], 10 * rank + j);
}

/* Each rank leaves a file before the barrier; after it, every rank sees all of them. */
static void test_barrier(void)
{
    char name[WORLD][64];
    for (int r = 0; r < WORLD; r++) snprintf(name[r], sizeof name[r], "comm-barrier.%d.%d", (int)getppid(), r);
    CU_ASSERT_EQUAL(glia_test_write(glia_test_tmp(name[rank]), "here\n"), 0);
    DONE(glia_comm_barrier(comm, &t_));
    for (int r = 0; r < WORLD; r++) {
        FILE *f = fopen(glia_test_tmp(name[r]), "r");
        CU_ASSERT_PTR_NOT_NULL(f);
        if (f) fclose(f);
    }
    DONE(glia_comm_barrier(comm, &t_));  /* everyone has looked */
    remove(glia_test_tmp(name[rank]));
}

/* Several calls in flight, waited for in reverse order. */
static void test_in_flight(void)
{
    enum { K = 6, N = 64 };
    float buf[K][N];
    uint64_t t[K + 1];
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < N; i++) buf[k][i] = (float)((rank + 1) * (k + i));
        CU_ASSERT_EQUAL_FATAL(glia_comm_all_reduce(comm, buf[k], N, GLIA_F32, GLIA_REDUCE_SUM, &t[k]), GLIA_OK);
    }
    int root = 2;
    CU_ASSERT_EQUAL_FATAL(glia_comm_broadcast(comm, &root, 1, GLIA_I32, 2, &t[K]), GLIA_OK);
    for (int k = 0; k < K; k++) CU_ASSERT_EQUAL(t[k + 1], t[k] + 1);
    for (int k = K; k >= 0; k--) CU_ASSERT_EQUAL(glia_comm_wait(comm, t[k], k % 2 == 0), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_wait(comm, t[0], true), GLIA_OK);  /* again: still done */
    int bad = 0;
    for (int k = 0; k < K; k++)
        for (int i = 0; i < N; i++) bad += buf[k][i] != 6.0f * (k + i);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(root, 2);
}

static void test_count_zero(void)
{
    float f[2] = {rank + 1.0f, -3.0f}, g[WORLD * 2] = {0};
    DONE(glia_comm_all_reduce(comm, NULL, 0, GLIA_F32, GLIA_REDUCE_SUM, &t_));
    DONE(glia_comm_all_reduce(comm, f, 0, GLIA_F32, GLIA_REDUCE_SUM, &t_));
    DONE(glia_comm_broadcast(comm, f, 0, GLIA_F32, 0, &t_));
    DONE(glia_comm_all_gather(comm, g, f, 0, GLIA_F32, &t_));
    DONE(glia_comm_reduce_scatter(comm, f, g, 0, GLIA_F32, GLIA_REDUCE_SUM, &t_));
    CU_ASSERT_EQUAL(f[0], rank + 1.0f);
    CU_ASSERT_EQUAL(f[1], -3.0f);
    CU_ASSERT_EQUAL(g[0], 0.0f);
    DONE(glia_comm_all_reduce(comm, f, 1, GLIA_F32, GLIA_REDUCE_SUM, &t_));  /* still in step */
    CU_ASSERT_EQUAL(f[0], 6.0f);
}

static void test_group(void)
{
    float a[3] = {1.0f * rank, 2.0f * rank, 3.0f * rank};
    double b = rank;
    int32_t c = 5 * rank + 1;
    uint64_t ta, tb, tc;
    CU_ASSERT_EQUAL(glia_comm_group_begin(comm), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_all_reduce(comm, a, 3, GLIA_F32, GLIA_REDUCE_SUM, &ta), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_all_reduce(comm, &b, 1, GLIA_F64, GLIA_REDUCE_MAX, &tb), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_wait(comm, ta, true), GLIA_EINVAL);  /* not inside a group */
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "group"));
    CU_ASSERT_EQUAL(glia_comm_broadcast(comm, &c, 1, GLIA_I32, 2, &tc), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_group_end(comm), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_wait(comm, tc, true), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_wait(comm, ta, true), GLIA_OK);
    CU_ASSERT_EQUAL(a[0], 3.0f);
    CU_ASSERT_EQUAL(a[2], 9.0f);
    CU_ASSERT_EQUAL(b, 2.0);
    CU_ASSERT_EQUAL(c, 11);
    CU_ASSERT_EQUAL(glia_comm_group_end(comm), GLIA_EINVAL);
}

static void test_all_reduce_sync(void)
{
    double s[2] = {rank * 0.25, 1.0};
    CU_ASSERT_EQUAL(glia_comm_all_reduce_sync(comm, s, 2, GLIA_F64, GLIA_REDUCE_SUM), GLIA_OK);
    CU_ASSERT_DOUBLE_EQUAL(s[0], 0.75, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(s[1], 3.0, 1e-15);
    int32_t v[3] = {rank, 10 * rank, -rank};
    CU_ASSERT_EQUAL(glia_comm_broadcast_sync(comm, v, 3, GLIA_I32, 2), GLIA_OK);  /* rank 2's values everywhere */
    CU_ASSERT(v[0] == 2 && v[1] == 20 && v[2] == -2);
    CU_ASSERT_EQUAL(glia_comm_broadcast_sync(comm, v, 3, GLIA_I32, -1), GLIA_EINVAL);
    CU_ASSERT_EQUAL(glia_comm_broadcast_sync(comm, v, 3, GLIA_I32, WORLD), GLIA_EINVAL);
}

/* A second context's communicator, its calls interleaved with the first one's. */
static void test_second_comm(void)
{
    comm2 = open_mpi(&ctx2, TIMEOUT);
    CU_ASSERT_PTR_NOT_NULL_FATAL(comm2);
    CU_ASSERT_PTR_NOT_EQUAL(comm2, comm);
    CU_ASSERT_EQUAL(comm2->info.rank, rank);
    CU_ASSERT_EQUAL(comm2->info.world, WORLD);
    float x = rank + 1.0f, y = 10.0f * (rank + 1);
    uint64_t tx, ty, tx2;
    CU_ASSERT_EQUAL_FATAL(glia_comm_all_reduce(comm, &x, 1, GLIA_F32, GLIA_REDUCE_SUM, &tx), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_comm_all_reduce(comm2, &y, 1, GLIA_F32, GLIA_REDUCE_MAX, &ty), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_wait(comm2, ty, true), GLIA_OK);
    CU_ASSERT_EQUAL(y, 30.0f);
    CU_ASSERT_EQUAL_FATAL(glia_comm_all_reduce(comm, &x, 1, GLIA_F32, GLIA_REDUCE_SUM, &tx2), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_wait(comm, tx2, true), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_wait(comm, tx, true), GLIA_OK);
    CU_ASSERT_EQUAL(x, 18.0f);  /* (1 + 2 + 3) * 3 */
}

static void test_errors(void)
{
    struct glia_backend *cpu;
    struct glia_comm *none = NULL;
    CU_ASSERT_EQUAL(glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CPU, 0}, &cpu), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_open(ctx, "carrier-pigeon", cpu, TIMEOUT, &none), GLIA_ENOTFOUND);
    CU_ASSERT_PTR_NULL(none);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "carrier-pigeon"));
    float f[4] = {0};
    uint64_t t;
    CU_ASSERT_EQUAL(glia_comm_broadcast(comm, f, 4, GLIA_F32, WORLD, &t), GLIA_EINVAL);
    CU_ASSERT_EQUAL(glia_comm_broadcast(comm, f, 4, GLIA_F32, -1, &t), GLIA_EINVAL);
    CU_ASSERT_EQUAL(glia_comm_all_reduce(comm, f, 4, GLIA_F16, GLIA_REDUCE_SUM, &t), GLIA_EUNSUPPORTED);
    char who[32];
    snprintf(who, sizeof who, "rank %d of %d", rank, WORLD);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), who));
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "f16"));
    CU_ASSERT_EQUAL(glia_comm_all_reduce(comm, f, 4, GLIA_I32, GLIA_REDUCE_AVG, &t), GLIA_EUNSUPPORTED);
    CU_ASSERT_EQUAL(glia_comm_all_reduce(comm, f, 4, GLIA_U8, GLIA_REDUCE_SUM, &t), GLIA_EUNSUPPORTED);
    CU_ASSERT_EQUAL(glia_comm_wait(comm, 1u << 30, true), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), who));
    DONE(glia_comm_barrier(comm, &t_));  /* the refused calls were not queued: still in step */
}

/* The error of a wait on comm c of context x must be `st` and hold every string of want. */
static void expect_wait_error(struct glia_context *x, struct glia_comm *c, uint64_t t, glia_status want_st,
                              const char *const *want)
{
    glia_status st = glia_comm_wait(c, t, true);
    CU_ASSERT_EQUAL(st, want_st);
    for (int i = 0; want[i]; i++) {
        bool ok = strstr(glia_context_error(x), want[i]) != NULL;
        if (!ok) printf("\n  rank %d: want '%s' in '%s'\n", rank, want[i], glia_context_error(x));
        CU_ASSERT(ok);
    }
}

/* Ranks entering different collectives: rank 0 all-reduces 2 f64 while the others all-reduce 64
 * f32 (a rank whose epoch ended early against ranks still reducing gradients). Every rank fails
 * the call, naming both sides, before any buffer is touched; the communicator stays failed and
 * the others go on. Then rank 2 is one call ahead (an extra barrier): caught by the numbers. */
static void test_mismatch(void)
{
    struct glia_context *x = NULL, *y = NULL;
    struct glia_comm *c = open_mpi(&x, TIMEOUT);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    double small[2] = {1, 2};
    float big[64];
    for (int i = 0; i < 64; i++) big[i] = (float)(rank + i);
    uint64_t t;
    if (rank == 0) CU_ASSERT_EQUAL_FATAL(glia_comm_all_reduce(c, small, 2, GLIA_F64, GLIA_REDUCE_SUM, &t), GLIA_OK);
    if (rank != 0) CU_ASSERT_EQUAL_FATAL(glia_comm_all_reduce(c, big, 64, GLIA_F32, GLIA_REDUCE_AVG, &t), GLIA_OK);
    char who[32];
    snprintf(who, sizeof who, "rank %d of %d", rank, WORLD);
    const char *mine = rank == 0 ? "mpi all-reduce #2 (2 f64, sum) does not match" : "mpi all-reduce #2 (64 f32, avg) does not match";
    const char *other = rank == 0 ? "rank 1's all-reduce #2 (64 f32, avg)" : "rank 0's all-reduce #2 (2 f64, sum)";
    expect_wait_error(x, c, t, GLIA_EINVAL, (const char *const[]){who, mine, other, NULL});
    CU_ASSERT(small[0] == 1 && small[1] == 2);  /* untouched */
    bool same = true;
    for (int i = 0; i < 64; i++) same &= big[i] == (float)(rank + i);
    CU_ASSERT(same);
    CU_ASSERT_EQUAL_FATAL(glia_comm_barrier(c, &t), GLIA_OK);  /* a failed communicator fails its later calls */
    CU_ASSERT_EQUAL(glia_comm_wait(c, t, true), GLIA_EINVAL);
    DONE(glia_comm_barrier(comm, &t_));  /* the others are in step */

    struct glia_comm *d = open_mpi(&y, TIMEOUT);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    float f[4] = {1, 2, 3, 4};
    if (rank == 2) CU_ASSERT_EQUAL_FATAL(glia_comm_barrier(d, &t), GLIA_OK);
    if (rank == 2) expect_wait_error(y, d, t, GLIA_EINVAL, (const char *const[]){"mpi barrier #2 does not match rank 0's all-reduce #2 (4 f32, sum)", NULL});
    CU_ASSERT_EQUAL_FATAL(glia_comm_all_reduce(d, f, 4, GLIA_F32, GLIA_REDUCE_SUM, &t), GLIA_OK);
    if (rank != 2) expect_wait_error(y, d, t, GLIA_EINVAL, (const char *const[]){"mpi all-reduce #2 (4 f32, sum) does not match rank 2's barrier #2", NULL});
    CU_ASSERT(f[0] == 1 && f[3] == 4);
    glia_context_free(y);
    glia_context_free(x);
    DONE(glia_comm_barrier(comm, &t_));
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* Rank 1 joins an all-reduce 3 s late on a communicator with a 1 s timeout: the others' waits
 * time out naming the rank and the call, and a later wait on the same ticket succeeds. */
static void test_timeout(void)
{
    struct glia_comm *slow = open_mpi(&ctx3, 1.0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(slow);
    float x = rank + 1.0f;
    uint64_t t;
    if (rank == 1) sleep(3);
    double t0 = now();
    CU_ASSERT_EQUAL_FATAL(glia_comm_all_reduce(slow, &x, 1, GLIA_F32, GLIA_REDUCE_SUM, &t), GLIA_OK);
    glia_status st = glia_comm_wait(slow, t, true);
    printf("  rank %d: first wait %s after %.2f s: %s\n", rank, glia_status_name(st), now() - t0,
           glia_context_error(ctx3));
    if (rank != 1) {
        char who[32];
        snprintf(who, sizeof who, "rank %d of %d", rank, WORLD);
        CU_ASSERT_EQUAL(st, GLIA_ETIMEDOUT);
        CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx3), who));
        CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx3), "all-reduce"));
        for (int i = 0; i < 60 && st == GLIA_ETIMEDOUT; i++) st = glia_comm_wait(slow, t, true);
    }
    CU_ASSERT_EQUAL(st, GLIA_OK);
    CU_ASSERT_EQUAL(x, 6.0f);
}

/* Freeing the contexts closes the communicators; the last one finalizes MPI, which cannot start again. */
static void test_free(void)
{
    glia_context_free(ctx3);
    glia_context_free(ctx2);
    glia_context_free(ctx);
    ctx = ctx2 = ctx3 = NULL;
    struct glia_context *late;
    CU_ASSERT_PTR_NULL(open_mpi(&late, TIMEOUT));
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(late), "twice"));
    glia_context_free(late);
}

GLIA_MPI_TEST_MAIN("comm", WORLD, GLIA_TEST(test_open), GLIA_TEST(test_all_reduce), GLIA_TEST(test_broadcast),
                   GLIA_TEST(test_all_gather), GLIA_TEST(test_reduce_scatter), GLIA_TEST(test_barrier),
                   GLIA_TEST(test_in_flight), GLIA_TEST(test_count_zero), GLIA_TEST(test_group),
                   GLIA_TEST(test_all_reduce_sync), GLIA_TEST(test_second_comm), GLIA_TEST(test_errors),
                   GLIA_TEST(test_mismatch), GLIA_TEST(test_timeout), GLIA_TEST(test_free))
