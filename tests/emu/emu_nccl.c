/* tests/emu/emu_nccl.c — NCCL for the CPU emulation of CUDA (tests/emu/run.sh): communicators of one
 * rank whose collectives are copies queued on the caller's stream, groups that launch nothing before
 * their outermost end, and the nonblocking protocol (each call of a nonblocking communicator answers
 * ncclInProgress until ncclCommGetAsyncError has been polled, and a call made before that is refused).
 * A collective on a capturing stream is recorded into its graph like any other stream work.
 * Not several ranks: a communicator of more than one rank is refused at init, so no peer can stall. */
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "emu.h"

#define EMU_MAGIC 0x676c6961u /* "glia" */

struct ncclComm {
    unsigned magic;
    int rank, nranks, device;
    int blocking;
    int in_progress;      /* nonblocking: the last call is still "being enqueued" until polled */
    int finalized;
    char last[256];       /* what went wrong last, for ncclGetLastError */
};

static char last_global[256];

static ncclResult_t fail(struct ncclComm *c, ncclResult_t r, const char *fmt, const char *arg)
{
    char *b = c && c->magic == EMU_MAGIC ? c->last : last_global;
    snprintf(b, sizeof last_global, fmt, arg);
    snprintf(last_global, sizeof last_global, "%s", b);
    fprintf(stderr, "emu nccl: %s\n", b);
    return r;
}

static size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

/* ncclSuccess when c is a communicator; otherwise the ncclInvalidArgument to return from call. */
static ncclResult_t unknown(struct ncclComm *c, const char *call)
{
    return c && c->magic == EMU_MAGIC ? ncclSuccess : fail(NULL, ncclInvalidArgument, "%s: not a communicator", call);
}

/* A communicator that may be used now: known, not finalized, not mid-call, on the current device. */
static ncclResult_t usable(struct ncclComm *c, const char *call)
{
    if (unknown(c, call)) return ncclInvalidArgument;
    if (c->finalized) return fail(c, ncclInvalidUsage, "%s: the communicator was finalized", call);
    if (c->in_progress)
        return fail(c, ncclInvalidUsage,
                    "%s: called while the communicator's last call is still in progress (poll ncclCommGetAsyncError until "
                    "it is no longer ncclInProgress)", call);
    int d = -1;
    cudaGetDevice(&d);
    if (d != c->device) return fail(c, ncclInvalidUsage, "%s: the current device is not the communicator's", call);
    return ncclSuccess;
}

/* ---- groups: calls queue here until the outermost ncclGroupEnd ---- */

struct copy {
    void *dst;
    const void *src;
    size_t n;
    cudaStream_t stream;
    struct ncclComm *comm;
    struct copy *next;
};
static __thread int group_depth;
static __thread struct copy *group_head, *group_last;

static void run_copy(void *arg)
{
    struct copy *k = arg;
    if (k->n && k->dst != k->src) memmove(k->dst, k->src, k->n);
}

/* Queues k on its stream (or records it into the stream's capture: each launch of the graph copies
 * again); k is freed when nothing needs it. A refusal (an invalidated capture) is ncclUnhandledCudaError. */
static ncclResult_t launch(struct copy *k, const char *call)
{
    struct ncclComm *c = k->comm;
    if (!c->blocking) c->in_progress = 1;
    cudaError_t e = glia_emu_submit_host("nccl", k->stream, run_copy, k, free);
    return e == cudaSuccess ? ncclSuccess : fail(c, ncclUnhandledCudaError, "%s: its stream refused the copy", call);
}

/* Queues dst = src (n bytes) on stream for communicator c, now or at the group's end. */
static ncclResult_t collective(struct ncclComm *c, const char *call, void *dst, size_t dst_n, const void *src,
                               size_t src_n, size_t n, cudaStream_t stream)
{
    ncclResult_t r = usable(c, call);
    if (r) return r;
    if (!glia_emu_is_device(dst, dst_n) || !glia_emu_is_device(src, src_n))
        return fail(c, ncclInvalidArgument, "%s: a buffer is not (wholly) in device memory", call);
    struct copy *k = malloc(sizeof *k);
    if (!k) return fail(c, ncclSystemError, "%s: out of memory", call);
    *k = (struct copy){dst, src, n, stream, c, NULL};
    if (group_depth) {
        if (group_last) group_last->next = k;
        else group_head = k;
        group_last = k;
        return ncclSuccess;
    }
    r = launch(k, call);
    return r ? r : c->blocking ? ncclSuccess : ncclInProgress;
}

ncclResult_t ncclGroupStart(void)
{
    GLIA_EMU_GUARD;
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    GLIA_EMU_GUARD;
    if (group_depth == 0) return fail(NULL, ncclInvalidUsage, "%s without ncclGroupStart", "ncclGroupEnd");
    if (--group_depth) return ncclSuccess;
    ncclResult_t r = ncclSuccess, err = ncclSuccess;
    for (struct copy *k = group_head, *next; k; k = next) {
        next = k->next;
        if (!k->comm->blocking) r = ncclInProgress;
        ncclResult_t e = launch(k, "ncclGroupEnd");
        if (e && !err) err = e;
    }
    group_head = group_last = NULL;
    return err ? err : r;
}

/* ---- communicators ---- */

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "glia-emu-%p", (void *)id);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *cfg)
{
    GLIA_EMU_GUARD;
    (void)id;
    *comm = NULL;
    if (group_depth) return fail(NULL, ncclInvalidUsage, "%s inside a group", "ncclCommInitRankConfig");
    if (cfg && (cfg->magic != 0xcafebeef || cfg->size != sizeof *cfg))
        return fail(NULL, ncclInvalidArgument, "%s: config not set up with NCCL_CONFIG_INITIALIZER", "ncclCommInitRankConfig");
    if (nranks != 1 || rank != 0)
        return fail(NULL, ncclInvalidUsage, "%s: the emulation has communicators of one rank only", "ncclCommInitRankConfig");
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    c->magic = EMU_MAGIC;
    c->nranks = 1;
    cudaGetDevice(&c->device);
    c->blocking = !cfg || cfg->blocking == NCCL_CONFIG_UNDEF_INT || cfg->blocking != 0;
    c->in_progress = !c->blocking;
    *comm = c;
    return c->blocking ? ncclSuccess : ncclInProgress;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    return ncclCommInitRankConfig(comm, nranks, id, rank, NULL);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e)
{
    GLIA_EMU_GUARD;
    if (unknown(c, "ncclCommGetAsyncError")) return ncclInvalidArgument;
    *e = c->in_progress ? ncclInProgress : ncclSuccess;
    c->in_progress = 0;  /* the next poll finds it settled */
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c)
{
    GLIA_EMU_GUARD;
    ncclResult_t r = usable(c, "ncclCommFinalize");
    if (r) return r;
    c->finalized = 1;
    c->in_progress = !c->blocking;
    return c->blocking ? ncclSuccess : ncclInProgress;
}

static void forget(struct ncclComm *c)
{
    for (struct copy *k = group_head; k; k = k->next)
        if (k->comm == c) {
            fprintf(stderr, "emu nccl: a communicator was released with calls of an open group still queued\n");
            abort();
        }
    c->magic = 0;
    free(c);
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    GLIA_EMU_GUARD;
    if (unknown(c, "ncclCommDestroy")) return ncclInvalidArgument;
    if (c->in_progress) return fail(c, ncclInvalidUsage, "%s: the communicator is still in progress", "ncclCommDestroy");
    forget(c);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
    GLIA_EMU_GUARD;
    if (!c) return ncclSuccess;
    if (unknown(c, "ncclCommAbort")) return ncclInvalidArgument;
    forget(c);
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t c)
{
    return c && c->magic == EMU_MAGIC ? c->last : last_global;
}

/* ---- collectives: with one rank every reduction is the identity ---- */

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t s)
{
    GLIA_EMU_GUARD;
    size_t n = count * type_size(t);
    if (!type_size(t) || op < ncclSum || op > ncclAvg) return fail(c, ncclInvalidArgument, "%s: bad type or op", "ncclAllReduce");
    return collective(c, "ncclAllReduce", recv, n, send, n, n, s);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t s)
{
    GLIA_EMU_GUARD;
    size_t n = count * type_size(t);
    if (!type_size(t) || root != 0) return fail(c, ncclInvalidArgument, "%s: bad type or root", "ncclBroadcast");
    return collective(c, "ncclBroadcast", recv, n, send, n, n, s);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t s)
{
    GLIA_EMU_GUARD;
    size_t n = count * type_size(t);
    if (!type_size(t)) return fail(c, ncclInvalidArgument, "%s: bad type", "ncclAllGather");
    return collective(c, "ncclAllGather", recv, n /* nranks * count */, send, n, n, s);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t s)
{
    GLIA_EMU_GUARD;
    size_t n = count * type_size(t);
    if (!type_size(t) || op < ncclSum || op > ncclAvg) return fail(c, ncclInvalidArgument, "%s: bad type or op", "ncclReduceScatter");
    return collective(c, "ncclReduceScatter", recv, n, send, n /* nranks * count */, n, s);
}
