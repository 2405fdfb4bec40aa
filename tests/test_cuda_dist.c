/* tests/test_cuda_dist.c — the GPU paths of data-parallel training and of the input pipeline, in one
 * process on one GPU: the nccl transport (world 1, started through self) with every call on device
 * memory and its ordering against the backend's stream, DDP over nccl against plain training, dp
 * with two replicas on one GPU against one device, and the page-locked input pipeline (workers,
 * prefetch, a stop in mid-epoch) against loading in the training thread, and the nccl watchdog failing
 * a call that outlasts its timeout. Exits 77 (skipped) without
 * a usable GPU or without the CUDA build. Not several ranks (NCCL needs a GPU per rank). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "parts.h"
#include "modelutil.h"
#include "build-config.h"

#define TIMEOUT 60.0

static struct glia_context *ctx;
static struct glia_backend *gpu;

/* A new context in *c (left for the caller to free when a later step fails) with the CUDA backend of
 * device 0 in *g. */
static glia_status open_gpu(struct glia_context **c, struct glia_backend **g)
{
    glia_status st = glia_context_new(c);
    if (!st) st = glia_plugin_load(*c, "cuda");
    if (!st) st = glia_backend_get(*c, (struct glia_device){GLIA_DEVICE_CUDA, 0}, g);
    return st;
}

/* ---- the nccl transport ---- */

/* The nccl communicator of the GPU, or NULL when this build has no nccl plugin (said, not failed). */
static struct glia_comm *open_nccl(void)
{
    struct glia_comm *c = NULL;
    glia_status st = glia_comm_open(ctx, "nccl", gpu, TIMEOUT, &c);
    if (st == GLIA_ENOTFOUND) {
        printf("skipped (%s) ", glia_context_error(ctx));
        return NULL;
    }
    if (st) printf("\n  open: %s\n", glia_context_error(ctx));
    CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
    return c;
}

static struct glia_tensor *dev(enum glia_dtype dt, int64_t n)
{
    struct glia_tensor *t = NULL;
    CU_ASSERT_FATAL(glia_tensor_new(gpu, dt, &(struct glia_shape){1, {n}}, &t) == GLIA_OK);
    return t;
}

/* The call must be accepted and its ticket's wait succeed. */
#define DONE(c, call, host)                                                   \
    do {                                                                      \
        uint64_t t_ = 0;                                                      \
        glia_status s_ = (call);                                              \
        if (!s_) s_ = glia_comm_wait((c), t_, (host));                        \
        if (s_) printf("\n  %s: %s\n", #call, glia_context_error(ctx));       \
        CU_ASSERT_EQUAL(s_, GLIA_OK);                                         \
    } while (0)

/* Elements of the device tensor t (f32) that differ from k * v. */
static int count_bad(const struct glia_tensor *t, const float *v, float k, int64_t n)
{
    float *h = malloc((size_t)n * sizeof *h);
    CU_ASSERT_FATAL(h && glia_tensor_to_host(t, h, (size_t)n * sizeof *h) == GLIA_OK);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += h[i] != k * v[i];
    free(h);
    return bad;
}

/* World 1: reductions and broadcasts leave the data, gathers and scatters copy it; the comm stream
 * runs after the work queued on the backend before a call, and wait orders later work after it. */
static void test_nccl_calls(void)
{
    struct glia_comm *c = open_nccl(), *again = NULL;
    if (!c) return;
    CU_ASSERT(c->info.rank == 0 && c->info.world == 1);
    CU_ASSERT_STRING_EQUAL(c->ops->name, "nccl");
    CU_ASSERT_EQUAL(glia_comm_open(ctx, "nccl", gpu, TIMEOUT, &again), GLIA_OK);
    CU_ASSERT_PTR_EQUAL(again, c);
    enum { N = 4099 };
    static float v[N];
    for (int i = 0; i < N; i++) v[i] = (float)(i % 97) - 40.5f;
    struct glia_tensor *a = dev(GLIA_F32, N), *g = dev(GLIA_F32, N);
    CU_ASSERT_FATAL(glia_tensor_from_host(a, v, sizeof v) == GLIA_OK);
    /* a *= 2 queued on the backend, gathered on the comm stream, the result *= 3 on the backend */
    uint64_t t;
    CU_ASSERT_EQUAL(glia_backend_scale_f32(gpu, a->data, N, 2.0f), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_comm_all_gather(c, g->data, a->data, N, GLIA_F32, &t), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_wait(c, t, false), GLIA_OK);
    CU_ASSERT_EQUAL(glia_backend_scale_f32(gpu, g->data, N, 3.0f), GLIA_OK);
    CU_ASSERT_EQUAL(count_bad(g, v, 6.0f, N), 0);
    for (int op = GLIA_REDUCE_SUM; op <= GLIA_REDUCE_MIN; op++)
        DONE(c, glia_comm_all_reduce(c, a->data, N, GLIA_F32, (enum glia_reduce_op)op, &t_), true);
    DONE(c, glia_comm_broadcast(c, a->data, N, GLIA_F32, 0, &t_), true);
    CU_ASSERT_EQUAL(count_bad(a, v, 2.0f, N), 0);
    CU_ASSERT_FATAL(glia_tensor_fill_zero(g) == GLIA_OK);
    DONE(c, glia_comm_reduce_scatter(c, g->data, a->data, N, GLIA_F32, GLIA_REDUCE_SUM, &t_), false);
    CU_ASSERT_EQUAL(count_bad(g, v, 2.0f, N), 0);
    DONE(c, glia_comm_barrier(c, &t_), true);
    DONE(c, glia_comm_all_reduce(c, NULL, 0, GLIA_F32, GLIA_REDUCE_SUM, &t_), true);
    /* the other types */
    struct glia_tensor *d = dev(GLIA_F64, 3), *k = dev(GLIA_I32, 3);
    double dv[3] = {0.25, -1e300, 3}, db[3];
    int32_t kv[3] = {7, -8, 1 << 30}, kb[3];
    CU_ASSERT_FATAL(glia_tensor_from_host(d, dv, sizeof dv) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_from_host(k, kv, sizeof kv) == GLIA_OK);
    DONE(c, glia_comm_all_reduce(c, d->data, 3, GLIA_F64, GLIA_REDUCE_AVG, &t_), true);
    DONE(c, glia_comm_all_reduce(c, k->data, 3, GLIA_I32, GLIA_REDUCE_MAX, &t_), true);
    CU_ASSERT(glia_tensor_to_host(d, db, sizeof db) == GLIA_OK && !memcmp(db, dv, sizeof dv));
    CU_ASSERT(glia_tensor_to_host(k, kb, sizeof kb) == GLIA_OK && !memcmp(kb, kv, sizeof kv));
    /* more calls in flight than the transport keeps events apart, waited for oldest first */
    enum { K = 150 };
    uint64_t tk[K];
    for (int i = 0; i < K; i++)
        CU_ASSERT_EQUAL_FATAL(glia_comm_all_reduce(c, a->data, N, GLIA_F32, GLIA_REDUCE_SUM, &tk[i]), GLIA_OK);
    for (int i = 1; i < K; i++) CU_ASSERT_EQUAL(tk[i], tk[i - 1] + 1);
    CU_ASSERT_EQUAL(glia_comm_wait(c, tk[0], true), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_wait(c, tk[K / 2], false), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_wait(c, tk[K - 1], true), GLIA_OK);
    CU_ASSERT_EQUAL(count_bad(a, v, 2.0f, N), 0);
    /* a group: one launch at its end; no waiting inside it */
    uint64_t ta, tb;
    CU_ASSERT_EQUAL(glia_comm_group_begin(c), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_all_gather(c, g->data, a->data, N, GLIA_F32, &ta), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_all_reduce(c, d->data, 3, GLIA_F64, GLIA_REDUCE_SUM, &tb), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_wait(c, ta, true), GLIA_EINVAL);
    CU_ASSERT_EQUAL(glia_comm_group_end(c), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_wait(c, ta, false), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_wait(c, tb, true), GLIA_OK);
    CU_ASSERT_EQUAL(count_bad(g, v, 2.0f, N), 0);
    CU_ASSERT_EQUAL(glia_comm_group_end(c), GLIA_EINVAL);
    /* refused calls are not queued */
    CU_ASSERT_EQUAL(glia_comm_all_reduce(c, k->data, 3, GLIA_I32, GLIA_REDUCE_AVG, &t), GLIA_EUNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "rank 0 of 1: nccl all-reduce"));
    CU_ASSERT_EQUAL(glia_comm_wait(c, tk[K - 1] + 1000, true), GLIA_EINVAL);
    DONE(c, glia_comm_barrier(c, &t_), true);
    /* the blocking helpers: device memory as it is, host memory staged onto the GPU */
    double h[3] = {1.5, -2, 1e-3};
    CU_ASSERT_EQUAL(glia_comm_all_reduce_sync(c, a->data, N, GLIA_F32, GLIA_REDUCE_AVG), GLIA_OK);
    CU_ASSERT_EQUAL(glia_comm_broadcast_sync(c, a->data, N, GLIA_F32, 0), GLIA_OK);
    CU_ASSERT_EQUAL(count_bad(a, v, 2.0f, N), 0);
    CU_ASSERT_EQUAL(glia__comm_all_reduce_host(c, h, 3, GLIA_F64, GLIA_REDUCE_SUM), GLIA_OK);
    CU_ASSERT(h[0] == 1.5 && h[1] == -2 && h[2] == 1e-3);
    glia_tensor_release(a), glia_tensor_release(g), glia_tensor_release(d), glia_tensor_release(k);
}

/* ---- whole models ---- */

static char dir[512];

static void make_data(void)
{
    CU_ASSERT_FATAL(glia_test_idx_set(dir, sizeof dir, "cuda-dist-data", 640, 200, 12, 5, 21) == 0);
}

/* A model on the GPU in fp32 with cuDNN's heuristic algorithms: [data] and [train] extras, the
 * [distributed] section, then the layers. */
static const char *model(const char *data_extra, const char *train_extra, const char *dist, const char *layers)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = cuda\nprecision = fp32\ncudnn_benchmark = off\nseed = 9\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 32\ntest_batch_size = 50\nmean = 0.2\nstd = 0.3\n%s\n"
             "[train]\nepochs = 2\noptimizer = sgd\nlr = 0.02\n%s\n[optimizer]\nmomentum = 0.9\n"
             "[distributed]\n%s\n%s",
             dir, dir, dir, dir, data_extra, train_extra, dist, layers);
    return buf;
}

static const char *const cnn_bn = "[c]\ntype = conv2d\nfilters = 8\nsize = 3\npadding = 1\n[bn]\ntype = batchnorm\nsync = on\n"
                                  "[r]\ntype = relu\n[p]\ntype = maxpool2d\nsize = 2\n[f]\ntype = flatten\n"
                                  "[fc]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n";
static const char *const cnn = "[c]\ntype = conv2d\nfilters = 8\nsize = 3\npadding = 1\n[r]\ntype = relu\n"
                               "[p]\ntype = maxpool2d\nsize = 2\n[f]\ntype = flatten\n"
                               "[fc]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n";
static const char *const mlp = "[f]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 32\n[r]\ntype = relu\n"
                               "[fc2]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n";

/* Trains r (built from text) for its epochs; res may be NULL. */
static void train(struct run *r, const char *text, struct glia_epoch_result *res)
{
    open_run(r, text);
    glia_status st = glia_model_train(r->m, &quiet, res, res ? 2 : 0);
    if (st) printf("\n  %s\n", glia_context_error(r->ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
}

/* DDP through nccl (world 1, many small buckets launched during backward, SyncBatchNorm on) ends
 * where training without it does, also with accumulation and clipping. */
static void test_ddp_over_nccl(void)
{
    struct glia_comm *probe = open_nccl();
    if (!probe) return;
    make_data();
    static const char *const extra[] = {"", "accumulate = 2\nclip_grad_norm = 0.5"};
    for (int e = 0; e < 2; e++) {
        struct run d, p;
        struct glia_epoch_result rd[2] = GLIA_TEST_RESULTS, rp[2] = GLIA_TEST_RESULTS;
        train(&d, model("", extra[e], "mode = ddp\ntransport = nccl\nbucket_mb = 0.0002\nfirst_bucket_mb = 0.000001", cnn_bn), rd);
        CU_ASSERT_PTR_NOT_NULL_FATAL(d.m->dist.ddp);
        CU_ASSERT_STRING_EQUAL(d.m->dist.comm->ops->name, "nccl");
        CU_ASSERT(glia__ddp_n_buckets(d.m->dist.ddp) >= 3);
        train(&p, model("", extra[e], "mode = none", cnn_bn), rp);
        double worst = weight_diff(&d, &p);
        if (!(worst <= 1e-4)) printf("\n  %s: weights differ by %g\n", extra[e], worst);
        CU_ASSERT(worst <= 1e-4);
        for (int k = 0; k < 2; k++) {
            CU_ASSERT(fabs(rd[k].train_loss - rp[k].train_loss) <= 1e-4);
            CU_ASSERT(fabs(rd[k].test_accuracy - rp[k].test_accuracy) <= 0.02);
        }
        close_run(&d), close_run(&p);
    }
}

/* dp with two replicas on one GPU (chunks 16 + 16, gradients added on the device) ends where one
 * device on the whole batch does. */
static void test_dp_two_replicas(void)
{
    make_data();
    struct run d, p;
    struct glia_epoch_result rd[2] = GLIA_TEST_RESULTS, rp[2] = GLIA_TEST_RESULTS;
    train(&d, model("", "", "mode = dp\ndevices = 0, 0", cnn), rd);
    CU_ASSERT_EQUAL_FATAL(d.m->dist.n_replicas, 2);
    CU_ASSERT_PTR_EQUAL(d.m->dist.replica[1]->backend, d.m->backend);
    train(&p, model("", "", "mode = none", cnn), rp);
    double worst = weight_diff(&d, &p);
    if (!(worst <= 1e-4)) printf("\n  weights differ by %g\n", worst);
    CU_ASSERT(worst <= 1e-4);
    for (int k = 0; k < 2; k++) CU_ASSERT(fabs(rd[k].train_loss - rp[k].train_loss) <= 1e-4);
    close_run(&d), close_run(&p);
}

/* Page-locked buffers filled by workers and uploaded on the copy stream train like buffers filled
 * in the training thread: whole epochs with the smallest ring (one worker, one slot), and a run
 * stopped by max_steps with the next batch still uploading, evaluated afterwards. */
static void test_input_pipeline(void)
{
    make_data();
    static const char *const train_extra[] = {"", "max_steps = 13"};
    static const char *const piped[] = {"workers = 1\nprefetch = 1\npin_memory = on", "workers = 3\nprefetch = 2\npin_memory = on"};
    for (int k = 0; k < 2; k++) {
        struct run a, b;
        train(&a, model(piped[k], train_extra[k], "mode = none", mlp), NULL);
        train(&b, model("workers = 0\npin_memory = off", train_extra[k], "mode = none", mlp), NULL);
        double worst = weight_diff(&a, &b), la, aa, lb, ab;
        if (!(worst <= 1e-6)) printf("\n  %s: weights differ by %g\n", piped[k], worst);
        CU_ASSERT(worst <= 1e-6);
        CU_ASSERT_EQUAL(glia_model_evaluate(a.m, &la, &aa), GLIA_OK);
        CU_ASSERT_EQUAL(glia_model_evaluate(b.m, &lb, &ab), GLIA_OK);
        CU_ASSERT(fabs(la - lb) <= 1e-5 && aa == ab);
        close_run(&a), close_run(&b);
    }
}

/* Seconds on a monotonic clock. */
static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The watchdog: a call queued behind GPU work that outlasts timeout_s (a run of large GEMMs stands
 * in for a peer that never arrives) fails the communicator, the host wait reports the timeout, and
 * every later call is refused with the same message. Its own context: a failed communicator is not
 * reused. The timeout also bounds NCCL's setup, which takes a while on a real GPU: the test starts
 * at 0.05 s and takes four times longer until the open succeeds, then queues GEMMs for about four
 * timeouts, as many as the time of a few of them says. */
static void test_nccl_watchdog(void)
{
    struct glia_context *c2 = NULL;
    struct glia_backend *g2 = NULL;
    struct glia_comm *c = NULL;
    CU_ASSERT_EQUAL_FATAL(open_gpu(&c2, &g2), GLIA_OK);
    double limit = 0.05;
    glia_status st;
    while ((st = glia_comm_open(c2, "nccl", g2, limit, &c)) == GLIA_ETIMEDOUT && limit < 10) limit *= 4;
    if (st == GLIA_ENOTFOUND) {
        printf("skipped (%s) ", glia_context_error(c2));
        glia_context_free(c2);
        return;
    }
    if (st) printf("(open: %s) ", glia_context_error(c2));
    CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
    enum { M = 8192, PROBE = 4 };
    struct glia_tensor *a = NULL, *b = NULL, *y = NULL, *x = NULL;
    struct glia_shape sq = {2, {M, M}}, one = {1, {1}};
    CU_ASSERT_FATAL(glia_tensor_zeros(g2, GLIA_F32, &sq, &a) == GLIA_OK && glia_tensor_zeros(g2, GLIA_F32, &sq, &b) == GLIA_OK &&
                    glia_tensor_zeros(g2, GLIA_F32, &sq, &y) == GLIA_OK && glia_tensor_zeros(g2, GLIA_F32, &one, &x) == GLIA_OK);
    double t0 = seconds();
    for (int i = 0; i < PROBE; i++)
        CU_ASSERT_EQUAL(glia_backend_gemm_f32(g2, false, false, M, M, M, 1.0f, a->data, M, b->data, M, 0.0f, y->data, M),
                        GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_backend_sync(g2), GLIA_OK);
    double each = (seconds() - t0) / PROBE;
    int repeat = (int)ceil(4 * limit / (each > 1e-4 ? each : 1e-4));
    for (int i = 0; i < repeat; i++)
        CU_ASSERT_EQUAL(glia_backend_gemm_f32(g2, false, false, M, M, M, 1.0f, a->data, M, b->data, M, 0.0f, y->data, M),
                        GLIA_OK);
    uint64_t t = 0;
    CU_ASSERT_EQUAL(glia_comm_all_reduce(c, x->data, 1, GLIA_F32, GLIA_REDUCE_SUM, &t), GLIA_OK);
    st = glia_comm_wait(c, t, true);
    CU_ASSERT_NOT_EQUAL(st, GLIA_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(c2), "did not finish within"));
    printf("(timeout %g s, %d GEMMs of %.3f s: %s) ", limit, repeat, each, st ? glia_context_error(c2) : "no error");
    CU_ASSERT_NOT_EQUAL(glia_comm_all_reduce(c, x->data, 1, GLIA_F32, GLIA_REDUCE_SUM, &t), GLIA_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(c2), "aborted"));
    CU_ASSERT_EQUAL(glia_backend_sync(g2), GLIA_OK);  /* the GEMMs end; the backend is unharmed */
    glia_tensor_release(a), glia_tensor_release(b), glia_tensor_release(y), glia_tensor_release(x);
    glia_context_free(c2);
}

static int setup(void)
{
#ifndef GLIA_HAVE_CUDA
    printf("test_cuda_dist: skipped: glia was built without CUDA\n");
    return 77;
#endif
    static const char *const launcher[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS",
                                           "WORLD_SIZE"};
    for (size_t i = 0; i < sizeof launcher / sizeof *launcher; i++) unsetenv(launcher[i]);  /* one process: self */
    glia_status st = open_gpu(&ctx, &gpu);
    if (!ctx) return 1;
    if (st) {
        printf("test_cuda_dist: skipped: %s\n", glia_context_error(ctx));
        return 77;
    }
    return 0;
}

int main(void)
{
    int s = setup();
    if (s) {
        glia_context_free(ctx);
        return s;
    }
    static const struct glia_test tests[] = {GLIA_TEST(test_nccl_calls), GLIA_TEST(test_ddp_over_nccl),
                                             GLIA_TEST(test_dp_two_replicas), GLIA_TEST(test_input_pipeline), GLIA_TEST(test_nccl_watchdog)};
    int rc = glia_test_run("cuda_dist", tests, (int)(sizeof tests / sizeof tests[0]));
    glia_context_free(ctx);
    return rc;
}
