/* plugins/comm/nccl — the "nccl" transport: NCCL collectives on device memory of a CUDA backend, on a
 * stream of its own ordered after the backend's stream by events. Not the bootstrap: NCCL's unique id travels over
 * the core's bootstrap communicator (mpi, or self for a job of one process). */
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <glia/glia.h>
#include <glia/cuda.h>
#include "watchdog.h"

/* Completion events kept apart. Ticket t is ring slot t % RING; once RING later calls have reused
 * its slot, waiting for t waits for the newest call in that slot, which runs after t on the
 * comm stream (in issue order), so it is correct and at worst waits a little longer. */
#define RING GLIA__WATCH_RING

struct nc {
    struct glia_context *ctx;     /* (borrowed) */
    struct glia_backend *b;       /* (borrowed) */
    ncclComm_t comm;              /* NULL once aborted */
    int device, rank, world;
    double timeout_s;
    cudaStream_t compute;         /* the backend's stream (borrowed) */
    cudaStream_t stream;          /* ours: every NCCL call of this communicator, in issue order */
    cudaEvent_t ready;            /* recorded on compute before each call; the comm stream waits on it */
    cudaEvent_t done[RING];       /* recorded on the comm stream after each call */
    char whats[RING][96];         /* each slot's call, for messages */
    char what[96];                /* the call being issued or waited for: "all-reduce #17 (4096 f32, sum)" */
    uint64_t issued;              /* tickets are 1, 2, ... */
    int group;                    /* group_begin depth */
    uint64_t group_first;         /* the first ticket of the open group */
    int *scratch;                 /* int(1) on the device, the barrier's all-reduce */
    char dead[512];               /* why the communicator was aborted ("" while alive) */
    /* Fails the communicator when its oldest unfinished call is older than timeout_s, even while
     * this process waits in a stream synchronization (the abort makes NCCL's kernels return).
     * Its lock is held around every call of the ops below. */
    struct glia__watchdog wd;
    bool watching;                /* wd is set up */
    char why[160];                /* what the watchdog saw fail: "NCCL says ..." or "CUDA says ..." */
    bool abort_pending;           /* expired inside an open group: the outermost group_end aborts */
    ncclComm_t aborting;          /* expired: the watchdog aborts it without its lock (then NULL) */
};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A pause between polls: yield during the first millisecond (short collectives), then sleep 50 us. */
static void nap(double waited)
{
    if (waited < 1e-3) {
        sched_yield();
    } else {
        struct timespec t = {0, 50000};
        nanosleep(&t, NULL);
    }
}

/* Aborts the communicator (it cannot be trusted after an error or a timeout) and fails with
 * "rank r of w: nccl <call> <why>"; later calls fail with the same text. */
static glia_status abort_comm(struct nc *n, glia_status st, const char *fmt, ...) GLIA_PRINTF(3, 4);
static glia_status abort_comm(struct nc *n, glia_status st, const char *fmt, ...)
{
    char why[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(n->dead, sizeof n->dead, "rank %d of %d: nccl %s %s", n->rank, n->world, n->what, why);
    if (n->comm) ncclCommAbort(n->comm);
    n->comm = NULL;
    return glia_error(n->ctx, st, "%s", n->dead);
}

/* A failed CUDA runtime call: "rank r of w: nccl <call>: file:line: expr: error". The
 * communicator stays (the CUDA error is the caller's to handle). */
static glia_status cuda_fail(struct nc *n, cudaError_t e, const char *expr, const char *file, int line)
{
    return glia_error(n->ctx, GLIA_EDEVICE, "rank %d of %d: nccl %s: %s:%d: %s: %s (%s)", n->rank, n->world, n->what,
                      file, line, expr, cudaGetErrorString(e), cudaGetErrorName(e));
}
#define CUDA_CHECK(expr)                                                           \
    do {                                                                           \
        cudaError_t e_ = (expr);                                                   \
        if (e_ != cudaSuccess) return cuda_fail(n, e_, #expr, __FILE__, __LINE__); \
    } while (0)

/* The result r of an NCCL call. A nonblocking communicator may answer ncclInProgress: then its
 * state is polled until it settles, for at most timeout_s. An error or a timeout aborts it. */
static glia_status settle(struct nc *n, ncclResult_t r, const char *expr, const char *file, int line)
{
    double t0 = now();
    while (r == ncclInProgress && n->comm) {
        double w = now() - t0;
        if (n->timeout_s > 0 && w > n->timeout_s)
            return abort_comm(n, GLIA_ETIMEDOUT, "did not finish within %g s (%s:%d: %s): another rank died or stalled",
                              n->timeout_s, file, line, expr);
        nap(w);
        ncclResult_t q = ncclCommGetAsyncError(n->comm, &r);
        if (q != ncclSuccess) r = q;
    }
    if (r == ncclSuccess) return GLIA_OK;
    const char *last = ncclGetLastError(n->comm);
    return abort_comm(n, GLIA_EDEVICE, "failed: %s:%d: %s: %s%s%s", file, line, expr, ncclGetErrorString(r),
                      last && *last ? ": " : "", last ? last : "");
}
#define NCCL_CHECK(expr)                                                        \
    do {                                                                        \
        glia_status s_ = settle(n, (expr), #expr, __FILE__, __LINE__);          \
        if (s_) return s_;                                                      \
    } while (0)

/* ---- open and close ---- */

/* What rank 0 sends the others over the bootstrap communicator. */
struct hello {
    ncclUniqueId id;
    int32_t ok;  /* rank 0 could make the id */
};

/* Creates NCCL's communicator through the bootstrap and this communicator's stream and events. */
static glia_status start(struct nc *n, struct glia_comm *boot)
{
    struct hello h;
    memset(&h, 0, sizeof h);
    if (n->rank == 0) h.ok = ncclGetUniqueId(&h.id) == ncclSuccess;
    uint64_t t;
    glia_status st = glia_comm_broadcast(boot, &h, sizeof h, GLIA_U8, 0, &t);
    if (!st) st = glia_comm_wait(boot, t, true);
    if (st)
        return glia_error_wrap(n->ctx, st, "rank %d of %d: nccl open: exchanging NCCL's unique id over %s", n->rank,
                               n->world, boot->ops->name);
    if (!h.ok)
        return glia_error(n->ctx, GLIA_EDEVICE, "rank %d of %d: nccl open: rank 0 could not make NCCL's unique id: %s",
                          n->rank, n->world, ncclGetLastError(NULL));
    CUDA_CHECK(cudaSetDevice(n->device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming));
    for (int i = 0; i < RING; i++) CUDA_CHECK(cudaEventCreateWithFlags(&n->done[i], cudaEventDisableTiming));
    if ((st = glia_backend_alloc(n->b, sizeof(int), (void **)&n->scratch))) return st;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;  /* so that a missing rank makes init time out instead of hang */
    NCCL_CHECK(ncclCommInitRankConfig(&n->comm, n->world, h.id, n->rank, &cfg));
    return GLIA_OK;
}

/* Releases everything; a communicator still busy after timeout_s (a peer died) is aborted, never waited for longer. */
static void destroy(struct nc *n)
{
    if (n->watching) glia__watch_fini(&n->wd);
    cudaSetDevice(n->device);
    if (n->comm) {
        ncclResult_t r = ncclCommFinalize(n->comm);  /* flushes the queued calls */
        for (double t0 = now(); r == ncclInProgress && (n->timeout_s <= 0 || now() - t0 < n->timeout_s);) {
            nap(now() - t0);
            if (ncclCommGetAsyncError(n->comm, &r) != ncclSuccess) break;
        }
        if (r == ncclSuccess) ncclCommDestroy(n->comm);
        else ncclCommAbort(n->comm);
    }
    if (n->stream) {
        if (n->scratch && n->ready && cudaEventRecord(n->ready, n->stream) == cudaSuccess &&
            cudaStreamWaitEvent(n->compute, n->ready, 0) == cudaSuccess)  /* the block's next owner waits for us */
            glia_backend_free(n->b, n->scratch);
        cudaStreamDestroy(n->stream);
    }
    if (n->ready) cudaEventDestroy(n->ready);
    for (int i = 0; i < RING; i++)
        if (n->done[i]) cudaEventDestroy(n->done[i]);
    free(n);
}

/* ---- the watchdog's view (its lock held) ---- */

static enum glia__watch_state watch_query(void *user, uint64_t t)
{
    struct nc *n = user;
    if (!n->comm) return GLIA__WATCH_DONE;  /* aborted already: every later call fails on its own */
    cudaSetDevice(n->device);
    cudaError_t q = cudaEventQuery(n->done[t % RING]);
    if (q == cudaSuccess) return GLIA__WATCH_DONE;
    if (q != cudaErrorNotReady) {
        snprintf(n->why, sizeof n->why, "CUDA says %s (%s)", cudaGetErrorString(q), cudaGetErrorName(q));
        cudaGetLastError();  /* this thread's copy of it */
        return GLIA__WATCH_FAILED;
    }
    ncclResult_t r = ncclSuccess, a = ncclCommGetAsyncError(n->comm, &r);
    if (a != ncclSuccess) r = a;
    if (r != ncclSuccess && r != ncclInProgress) {
        snprintf(n->why, sizeof n->why, "NCCL says %s", ncclGetErrorString(r));
        return GLIA__WATCH_FAILED;
    }
    return GLIA__WATCH_PENDING;
}

/* Marks the communicator failed; the abort itself happens in watch_release, or, inside an open
 * group (NCCL's group state belongs to the owner's thread), at the owner's outermost group_end. */
static void watch_expire(void *user, uint64_t t, double waited, bool failed)
{
    struct nc *n = user;
    if (failed)
        snprintf(n->dead, sizeof n->dead, "rank %d of %d: nccl %s failed: %s (communicator aborted)", n->rank, n->world,
                 n->whats[t % RING], n->why);
    else
        snprintf(n->dead, sizeof n->dead, "rank %d of %d: nccl %s did not finish within %g s (waited %.1f s): another "
                 "rank died or stalled (communicator aborted)", n->rank, n->world, n->whats[t % RING], n->timeout_s,
                 waited);
    glia_log(n->ctx, GLIA_LOG_ERROR, "%s", n->dead);
    if (n->group) {
        n->abort_pending = true;
    } else {
        n->aborting = n->comm;
        n->comm = NULL;
    }
}

/* The abort, without the lock: NCCL's abort may take a while (it ends the kernels in flight,
 * which lets the owner's stream waits return). */
static void watch_release(void *user)
{
    struct nc *n = user;
    if (!n->aborting) return;
    cudaSetDevice(n->device);
    ncclCommAbort(n->aborting);
    n->aborting = NULL;
}

static glia_status nccl_open(struct glia_context *ctx, const struct glia_comm_open_args *a, struct glia_comm_info *info,
                             void **priv)
{
    struct glia_comm *boot = a->bootstrap;
    if (!boot) return glia_error(ctx, GLIA_EINVAL, "nccl open: no bootstrap communicator for NCCL's unique id");
    cudaStream_t compute = glia_cuda_stream(a->backend);
    if (!compute) return glia_error(ctx, GLIA_EUNSUPPORTED, "nccl open: the backend is not a CUDA backend with a stream");
    struct nc *n = calloc(1, sizeof *n);
    if (!n) return GLIA_ENOMEM;
    n->ctx = ctx;
    n->b = a->backend;
    n->device = a->backend->device.index;
    n->rank = boot->info.rank;
    n->world = boot->info.world;
    n->timeout_s = a->timeout_s;
    n->compute = compute;
    snprintf(n->what, sizeof n->what, "open on cuda:%d", n->device);
    glia_status st = start(n, boot);
    if (!st) {
        double period = n->timeout_s / 10 < 0.01 ? 0.01 : n->timeout_s / 10 > 1 ? 1 : n->timeout_s / 10;
        int e = glia__watch_init(&n->wd, n->timeout_s, period, watch_query, watch_expire, watch_release, n);
        if (e) st = glia_error(ctx, GLIA_EINTERNAL, "rank %d of %d: nccl open: cannot start the watchdog thread: %s",
                               n->rank, n->world, strerror(e));
        n->watching = !e;
    }
    if (st) {
        destroy(n);
        return st;
    }
    *info = boot->info;
    *priv = n;
    return GLIA_OK;
}

static void nccl_close(void *priv) { destroy(priv); }

/* ---- calls ---- */

static bool nccl_type(enum glia_dtype dt, ncclDataType_t *t)
{
    switch (dt) {
    case GLIA_F32: *t = ncclFloat32; return true;
    case GLIA_F64: *t = ncclFloat64; return true;
    case GLIA_F16: *t = ncclFloat16; return true;
    case GLIA_BF16: *t = ncclBfloat16; return true;
    case GLIA_I32: *t = ncclInt32; return true;
    case GLIA_I64: *t = ncclInt64; return true;
    case GLIA_U8: *t = ncclUint8; return true;
    }
    return false;
}

static ncclRedOp_t nccl_op(enum glia_reduce_op op)
{
    return op == GLIA_REDUCE_AVG ? ncclAvg : op == GLIA_REDUCE_MAX ? ncclMax : op == GLIA_REDUCE_MIN ? ncclMin : ncclSum;
}

/* Starts call `kind` (the next ticket): names it for messages, checks its types, and orders the
 * comm stream after the work queued so far on the backend. */
static glia_status enter(struct nc *n, const char *kind, size_t count, enum glia_dtype dt, int op, ncclDataType_t *t)
{
    char opname[16] = "";
    if (op >= 0) snprintf(opname, sizeof opname, ", %s", glia_reduce_op_name((enum glia_reduce_op)op));
    snprintf(n->what, sizeof n->what, "%s #%llu (%zu %s%s)", kind, (unsigned long long)n->issued + 1, count,
             glia_dtype_name(dt), opname);
    if (n->dead[0])
        return glia_error(n->ctx, GLIA_EDEVICE, "rank %d of %d: nccl %s: the communicator was aborted before: %s",
                          n->rank, n->world, n->what, n->dead);
    if (!nccl_type(dt, t))
        return glia_error(n->ctx, GLIA_EUNSUPPORTED, "rank %d of %d: nccl %s: unknown dtype", n->rank, n->world, n->what);
    if (op == GLIA_REDUCE_AVG && dt != GLIA_F32 && dt != GLIA_F64 && dt != GLIA_F16 && dt != GLIA_BF16)
        return glia_error(n->ctx, GLIA_EUNSUPPORTED, "rank %d of %d: nccl %s: avg of %s is not defined (use sum)", n->rank,
                          n->world, n->what, glia_dtype_name(dt));
    CUDA_CHECK(cudaSetDevice(n->device));
    CUDA_CHECK(cudaEventRecord(n->ready, n->compute));
    CUDA_CHECK(cudaStreamWaitEvent(n->stream, n->ready, 0));
    return GLIA_OK;
}

/* Ends the call just launched: its ticket, and its completion event (at group_end inside a group,
 * where NCCL launches nothing before the end). */
static glia_status issued(struct nc *n, uint64_t *ticket)
{
    uint64_t t = ++n->issued;
    snprintf(n->whats[t % RING], sizeof n->whats[0], "%s", n->what);
    if (!n->group) {
        CUDA_CHECK(cudaEventRecord(n->done[t % RING], n->stream));
        glia__watch_issued(&n->wd, t);
    }
    *ticket = t;
    return GLIA_OK;
}

/* buf(count) = op over ranks of buf(count), in place */
static glia_status all_reduce_locked(void *priv, void *buf, size_t count, enum glia_dtype dt, enum glia_reduce_op op,
                                     uint64_t *ticket)
{
    struct nc *n = priv;
    ncclDataType_t t;
    glia_status st = enter(n, "all-reduce", count, dt, (int)op, &t);
    if (st) return st;
    if (count) NCCL_CHECK(ncclAllReduce(buf, buf, count, t, nccl_op(op), n->comm, n->stream));
    return issued(n, ticket);
}

/* buf(count) = root's buf(count) */
static glia_status broadcast_locked(void *priv, void *buf, size_t count, enum glia_dtype dt, int root, uint64_t *ticket)
{
    struct nc *n = priv;
    ncclDataType_t t;
    glia_status st = enter(n, "broadcast", count, dt, -1, &t);
    if (st) return st;
    if (count) NCCL_CHECK(ncclBroadcast(buf, buf, count, t, root, n->comm, n->stream));
    return issued(n, ticket);
}

/* dst(world, count)[r] = rank r's src(count) */
static glia_status all_gather_locked(void *priv, void *dst, const void *src, size_t count, enum glia_dtype dt,
                                     uint64_t *ticket)
{
    struct nc *n = priv;
    ncclDataType_t t;
    glia_status st = enter(n, "all-gather", count, dt, -1, &t);
    if (st) return st;
    if (count) NCCL_CHECK(ncclAllGather(src, dst, count, t, n->comm, n->stream));
    return issued(n, ticket);
}

/* dst(count) = op over ranks of src(world, count)[this rank] */
static glia_status reduce_scatter_locked(void *priv, void *dst, const void *src, size_t count, enum glia_dtype dt,
                                         enum glia_reduce_op op, uint64_t *ticket)
{
    struct nc *n = priv;
    ncclDataType_t t;
    glia_status st = enter(n, "reduce-scatter", count, dt, (int)op, &t);
    if (st) return st;
    if (count) NCCL_CHECK(ncclReduceScatter(src, dst, count, t, nccl_op(op), n->comm, n->stream));
    return issued(n, ticket);
}

/* An all-reduce of one int: done on a rank when every rank has reached it. */
static glia_status barrier_locked(void *priv, uint64_t *ticket)
{
    struct nc *n = priv;
    ncclDataType_t t;
    glia_status st = enter(n, "barrier", 1, GLIA_I32, -1, &t);
    if (st) return st;
    NCCL_CHECK(ncclAllReduce(n->scratch, n->scratch, 1, ncclInt32, ncclSum, n->comm, n->stream));
    return issued(n, ticket);
}

static glia_status group_begin_locked(void *priv)
{
    struct nc *n = priv;
    snprintf(n->what, sizeof n->what, "group_begin");
    if (n->dead[0]) return glia_error(n->ctx, GLIA_EDEVICE, "%s", n->dead);
    NCCL_CHECK(ncclGroupStart());
    if (n->group++ == 0) n->group_first = n->issued + 1;
    return GLIA_OK;
}

/* Launches the group's calls at once and records the completion of each of its tickets. */
static glia_status group_end_locked(void *priv)
{
    struct nc *n = priv;
    snprintf(n->what, sizeof n->what, "group_end (calls #%llu to #%llu)", (unsigned long long)n->group_first,
             (unsigned long long)n->issued);
    if (n->group == 0)
        return glia_error(n->ctx, GLIA_EINVAL, "rank %d of %d: nccl group_end without group_begin", n->rank, n->world);
    n->group--;
    if (!n->group && n->abort_pending) {  /* the watchdog expired it inside the group */
        ncclGroupEnd();
        ncclCommAbort(n->comm);
        n->comm = NULL;
        n->abort_pending = false;
        return glia_error(n->ctx, GLIA_EDEVICE, "%s", n->dead);
    }
    NCCL_CHECK(ncclGroupEnd());
    if (n->group) return GLIA_OK;
    CUDA_CHECK(cudaSetDevice(n->device));
    uint64_t first = n->issued >= RING && n->issued - RING + 1 > n->group_first ? n->issued - RING + 1 : n->group_first;
    for (uint64_t t = first; t <= n->issued; t++) {  /* the newest RING: an older ticket's slot is theirs now */
        CUDA_CHECK(cudaEventRecord(n->done[t % RING], n->stream));
        glia__watch_issued(&n->wd, t);
    }
    return GLIA_OK;
}

/* Makes the backend's stream wait for call `ticket`; with host, polls its event (and NCCL's
 * state) until it is done, aborting the communicator after timeout_s. */
static glia_status wait_locked(void *priv, uint64_t ticket, bool host)
{
    struct nc *n = priv;
    if (ticket == 0) return GLIA_OK;
    if (ticket > n->issued)
        return glia_error(n->ctx, GLIA_EINVAL, "rank %d of %d: nccl wait: ticket %llu was never issued (last is %llu)",
                          n->rank, n->world, (unsigned long long)ticket, (unsigned long long)n->issued);
    if (n->group)
        return glia_error(n->ctx, GLIA_EINVAL, "rank %d of %d: nccl wait for #%llu inside a group: call group_end first",
                          n->rank, n->world, (unsigned long long)ticket);
    if (n->dead[0]) return glia_error(n->ctx, GLIA_EDEVICE, "%s", n->dead);
    uint64_t s = ticket + (n->issued - ticket) / RING * RING;  /* the newest call in ticket's slot */
    cudaEvent_t e = n->done[s % RING];
    snprintf(n->what, sizeof n->what, "%s", n->whats[s % RING]);
    CUDA_CHECK(cudaSetDevice(n->device));
    CUDA_CHECK(cudaStreamWaitEvent(n->compute, e, 0));
    if (!host) return GLIA_OK;
    for (double t0 = now();;) {
        if (n->dead[0]) return glia_error(n->ctx, GLIA_EDEVICE, "%s", n->dead);  /* the watchdog aborted it */
        cudaError_t q = cudaEventQuery(e);  /* an aborted call's event completes too: dead is checked first */
        if (q != cudaSuccess && q != cudaErrorNotReady) return cuda_fail(n, q, "cudaEventQuery(done)", __FILE__, __LINE__);
        ncclResult_t r = ncclSuccess, a = ncclCommGetAsyncError(n->comm, &r);
        if (a != ncclSuccess) r = a;
        if (r != ncclSuccess && r != ncclInProgress)
            return abort_comm(n, GLIA_EDEVICE, "failed: NCCL says %s: %s", ncclGetErrorString(r),
                              ncclGetLastError(n->comm));
        if (q == cudaSuccess) return GLIA_OK;
        double w = now() - t0;
        if (n->timeout_s > 0 && w > n->timeout_s)
            return abort_comm(n, GLIA_ETIMEDOUT, "did not finish within %g s: another rank died or stalled "
                              "(communicator aborted)", n->timeout_s);
        pthread_mutex_unlock(&n->wd.lock);  /* the watchdog may look meanwhile */
        nap(w);
        pthread_mutex_lock(&n->wd.lock);
    }
}

/* ---- the ops: each call holds the watchdog's lock ---- */

#define LOCKED(call)                             \
    do {                                         \
        struct nc *n_ = priv;                    \
        pthread_mutex_lock(&n_->wd.lock);        \
        glia_status st_ = (call);                \
        pthread_mutex_unlock(&n_->wd.lock);      \
        return st_;                              \
    } while (0)

static glia_status nccl_all_reduce(void *priv, void *buf, size_t count, enum glia_dtype dt, enum glia_reduce_op op,
                                   uint64_t *ticket)
{
    LOCKED(all_reduce_locked(priv, buf, count, dt, op, ticket));
}
static glia_status nccl_broadcast(void *priv, void *buf, size_t count, enum glia_dtype dt, int root, uint64_t *ticket)
{
    LOCKED(broadcast_locked(priv, buf, count, dt, root, ticket));
}
static glia_status nccl_all_gather(void *priv, void *dst, const void *src, size_t count, enum glia_dtype dt,
                                   uint64_t *ticket)
{
    LOCKED(all_gather_locked(priv, dst, src, count, dt, ticket));
}
static glia_status nccl_reduce_scatter(void *priv, void *dst, const void *src, size_t count, enum glia_dtype dt,
                                       enum glia_reduce_op op, uint64_t *ticket)
{
    LOCKED(reduce_scatter_locked(priv, dst, src, count, dt, op, ticket));
}
static glia_status nccl_barrier(void *priv, uint64_t *ticket) { LOCKED(barrier_locked(priv, ticket)); }
static glia_status nccl_group_begin(void *priv) { LOCKED(group_begin_locked(priv)); }
static glia_status nccl_group_end(void *priv) { LOCKED(group_end_locked(priv)); }
static glia_status nccl_wait(void *priv, uint64_t ticket, bool host) { LOCKED(wait_locked(priv, ticket, host)); }

static const struct glia_comm_ops nccl_ops = {
    .struct_size = sizeof(struct glia_comm_ops),
    .name = "nccl",
    .description = "NCCL collectives on CUDA device memory, on a comm stream ordered after the compute stream",
    .memory = GLIA_COMM_DEVICE_MEMORY,
    .device_types = 1u << GLIA_DEVICE_CUDA,
    .open = nccl_open,
    .close = nccl_close,
    .all_reduce = nccl_all_reduce,
    .broadcast = nccl_broadcast,
    .all_gather = nccl_all_gather,
    .reduce_scatter = nccl_reduce_scatter,
    .barrier = nccl_barrier,
    .group_begin = nccl_group_begin,
    .group_end = nccl_group_end,
    .wait = nccl_wait,
};

static glia_status nccl_probe(struct glia_context *ctx, char *why, size_t why_size)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(why, why_size, "no usable CUDA device%s%s", e != cudaSuccess ? ": " : "",
                 e != cudaSuccess ? cudaGetErrorString(e) : "");
        return GLIA_EPROBE;
    }
    return GLIA_OK;
}

static glia_status nccl_init(struct glia_registry *r) { return glia_register_comm(r, &nccl_ops); }

GLIA_PLUGIN_DEFINE_PROBE(nccl, "1.0", "MIT", "the nccl transport: NCCL collectives on CUDA device memory", nccl_init,
                         nccl_probe)
