/* glia/comm.h — the communication ABI: collectives among the processes (ranks) of one job, and
 * the transport plugins that carry them (mpi, nccl). Not the training modes: DDP and DP are in
 * the core and use this API. */
#ifndef GLIA_COMM_H
#define GLIA_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "status.h"
#include "tensor.h"
#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

enum glia_reduce_op {
    GLIA_REDUCE_SUM = 0,
    GLIA_REDUCE_AVG,        /* the sum divided by the world size */
    GLIA_REDUCE_MAX,
    GLIA_REDUCE_MIN,
};

/* Which memory a transport's buffers may be in (glia_comm_ops.memory). */
#define GLIA_COMM_HOST_MEMORY   1u   /* host memory */
#define GLIA_COMM_DEVICE_MEMORY 2u   /* memory of the backend the communicator was opened for */

/* Where this process stands in the job. */
struct glia_comm_info {
    int rank, world;                 /* 0 <= rank < world */
    int local_rank, local_world;     /* among the ranks on this machine (picks the GPU) */
};

struct glia_comm;

/* What a transport's open gets. */
struct glia_comm_open_args {
    uint32_t struct_size;            /* sizeof(struct glia_comm_open_args) of the core */
    struct glia_backend *backend;    /* the device buffers live on; work queued on it before a
                                        call is done before the call reads its buffers (borrowed) */
    struct glia_comm *bootstrap;     /* an open host-memory communicator over the same ranks, for
                                        setup data (NCCL's unique id); NULL when the transport
                                        starts on its own from the launcher (mpi) (borrowed) */
    double timeout_s;                /* wait fails with GLIA_ETIMEDOUT after this long */
};

/* A transport. Calls are asynchronous: each one is queued behind the calls before it (one
 * stream per communicator, in issue order), runs after the work queued so far on the backend,
 * and returns a ticket; wait orders later work, or the host, after the ticket. Every rank must
 * issue the same calls in the same order with the same counts (mpi checks that before each call
 * touches its buffers and fails it on every rank, naming both sides; nccl does not, as that
 * would cost a host sync per call). Buffers must stay valid until the call's ticket is waited
 * for. */
struct glia_comm_ops {
    uint32_t struct_size;            /* sizeof(struct glia_comm_ops) of the builder */
    const char *name;                /* "mpi", "nccl": the [distributed] transport value */
    const char *description;         /* one line */
    uint32_t memory;                 /* GLIA_COMM_*_MEMORY bits */
    uint32_t device_types;           /* bit (1u << glia_device_type) per device type it serves */
    /* Join the job (from the launcher's environment, or through a->bootstrap) and fill *info.
     * Required. On failure the context error says why in one line. */
    glia_status (*open)(struct glia_context *ctx, const struct glia_comm_open_args *a,
                        struct glia_comm_info *info, void **priv);
    /* Leave the job and release priv. Required. Must not block on calls still in flight
     * after a timeout (a peer died): it then leaves them behind. */
    void (*close)(void *priv);
    /* buf(count) = op over ranks of buf(count), in place. Required. */
    glia_status (*all_reduce)(void *priv, void *buf, size_t count, enum glia_dtype dt,
                              enum glia_reduce_op op, uint64_t *ticket);
    /* buf(count) = root's buf(count). Required. */
    glia_status (*broadcast)(void *priv, void *buf, size_t count, enum glia_dtype dt, int root,
                             uint64_t *ticket);
    /* dst(world, count)[r] = rank r's src(count). Required. */
    glia_status (*all_gather)(void *priv, void *dst, const void *src, size_t count,
                              enum glia_dtype dt, uint64_t *ticket);
    /* dst(count) = op over ranks of their src(world, count)[this rank]. Required. */
    glia_status (*reduce_scatter)(void *priv, void *dst, const void *src, size_t count,
                                  enum glia_dtype dt, enum glia_reduce_op op, uint64_t *ticket);
    /* Done when every rank has reached it. Required. */
    glia_status (*barrier)(void *priv, uint64_t *ticket);
    /* Calls between group_begin and group_end may be fused into one launch (NCCL groups).
     * Optional: NULL means calls run one by one, which is also correct. */
    glia_status (*group_begin)(void *priv);
    glia_status (*group_end)(void *priv);
    /* Order work queued on the backend from now on after call `ticket`; with host, also block
     * the host until it is done, failing with GLIA_ETIMEDOUT (and a context error naming the
     * call) when that takes longer than the open's timeout_s. Required. */
    glia_status (*wait)(void *priv, uint64_t ticket, bool host);
    /* End every process of the job at once (MPI_Abort), with exit status `status` where the
     * launcher passes one on: for a program whose rank failed while the others may wait for it in
     * a collective. Callable from any thread, also while a call of this communicator is stuck.
     * Does not return when it worked. The core never calls it on its own; glia_comm_abort_job
     * does, for a program. Optional: NULL means the transport cannot end the job, and
     * glia_comm_abort_job tries the context's other communicators (nccl's bootstrap over mpi). */
    void (*abort)(void *priv, int status);
};

/* An open communicator. Owned by the context that opened it (closed by glia_context_free,
 * the last opened first); users borrow it. */
struct glia_comm {
    const struct glia_comm_ops *ops;
    void *priv;
    struct glia_comm_info info;
    struct glia_backend *backend;    /* (borrowed) */
    struct glia_context *ctx;        /* (borrowed) */
    double timeout_s;
};

/* The communicator of `transport` ("mpi", "nccl", or "auto": nccl for a CUDA backend when it
 * is available, else mpi) for backend b, opened on first use (loading the transport's plugin;
 * a transport of device memory only, like nccl, bootstraps through mpi, or through the built-in
 * "self" transport (one process, rank 0 of 1) when no launcher started several ranks). A second
 * call with the same arguments returns the same one. */
glia_status glia_comm_open(struct glia_context *ctx, const char *transport, struct glia_backend *b,
                           double timeout_s, struct glia_comm **out /* (borrowed) */);

/* The calls of glia_comm_ops, checked (count 0 is a valid no-op call). */
glia_status glia_comm_all_reduce(struct glia_comm *c, void *buf, size_t count, enum glia_dtype dt,
                                 enum glia_reduce_op op, uint64_t *ticket);
glia_status glia_comm_broadcast(struct glia_comm *c, void *buf, size_t count, enum glia_dtype dt,
                                int root, uint64_t *ticket);
glia_status glia_comm_all_gather(struct glia_comm *c, void *dst, const void *src, size_t count,
                                 enum glia_dtype dt, uint64_t *ticket);
glia_status glia_comm_reduce_scatter(struct glia_comm *c, void *dst, const void *src, size_t count,
                                     enum glia_dtype dt, enum glia_reduce_op op, uint64_t *ticket);
glia_status glia_comm_barrier(struct glia_comm *c, uint64_t *ticket);
glia_status glia_comm_group_begin(struct glia_comm *c);
glia_status glia_comm_group_end(struct glia_comm *c);
glia_status glia_comm_wait(struct glia_comm *c, uint64_t ticket, bool host);

/* Blocking all-reduce of count values of type dt at p, in place, after the work queued so far
 * on c's backend. p may be memory of c's backend even when the transport takes only host memory
 * (it is then staged through the host). For small exchanges inside layers (SyncBatchNorm's
 * statistics). */
glia_status glia_comm_all_reduce_sync(struct glia_comm *c, void *p, size_t count, enum glia_dtype dt,
                                      enum glia_reduce_op op);
/* Blocking broadcast from rank root of count values of type dt at p, in place, staged like
 * glia_comm_all_reduce_sync. */
glia_status glia_comm_broadcast_sync(struct glia_comm *c, void *p, size_t count, enum glia_dtype dt, int root);

/* Ends the whole job at once, every rank of it, through the first open communicator of ctx over
 * several ranks whose transport has abort. For a program (the glia command) after an
 * error on this rank that the others may not see: without it they wait in their next collective
 * until timeout_s. status: the exit status, where the launcher passes it on. Returns only when no
 * communicator could end the job: GLIA_ENOTFOUND when ctx has none over several ranks,
 * GLIA_EUNSUPPORTED when no transport of theirs can. Library code never calls it. */
glia_status glia_comm_abort_job(struct glia_context *ctx, int status);

/* "sum", "avg", "max", "min". */
const char *glia_reduce_op_name(enum glia_reduce_op op);

#ifdef __cplusplus
}
#endif
#endif
