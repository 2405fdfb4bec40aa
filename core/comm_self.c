/* core/comm_self.c — the built-in "self" transport: a job of one process, rank 0 of 1, on any
 * backend. What device-only transports (nccl) start through when no launcher started several
 * ranks, and a [distributed] transport for single-process DDP. Not a transport between processes. */
#include <stdlib.h>
#include <string.h>
#include "internal.h"

struct self {
    struct glia_backend *b;  /* (borrowed) */
};

static glia_status self_open(struct glia_context *ctx, const struct glia_comm_open_args *a, struct glia_comm_info *info,
                             void **priv)
{
    if (glia__launcher_world() > 1)  /* each rank would train alone, silently */
        return glia_error(ctx, GLIA_ECONFIG,
                          "transport self is a job of one process, but the launcher started %d ranks: use mpi or nccl",
                          glia__launcher_world());
    struct self *s = malloc(sizeof *s);
    if (!s) return GLIA_ENOMEM;
    s->b = a->backend;
    *info = (struct glia_comm_info){0, 1, 0, 1};
    *priv = s;
    return GLIA_OK;
}

static void self_close(void *priv) { free(priv); }

/* With one rank, a reduction or a broadcast leaves buf as it is. */
static glia_status self_all_reduce(void *priv, void *buf, size_t count, enum glia_dtype dt, enum glia_reduce_op op,
                                   uint64_t *ticket)
{
    (void)priv, (void)buf, (void)count, (void)dt, (void)op;
    *ticket = 0;
    return GLIA_OK;
}

static glia_status self_broadcast(void *priv, void *buf, size_t count, enum glia_dtype dt, int root, uint64_t *ticket)
{
    (void)priv, (void)buf, (void)count, (void)dt, (void)root;
    *ticket = 0;
    return GLIA_OK;
}

/* dst(count) = src(count), on the backend's queue (memory of the backend, host memory for the CPU). */
static glia_status copy(struct self *s, void *dst, const void *src, size_t count, enum glia_dtype dt, uint64_t *ticket)
{
    *ticket = 0;
    size_t n = count * glia_dtype_size(dt);
    if (dst == src || n == 0) return GLIA_OK;
    bool host = s->b->device.type == GLIA_DEVICE_CPU;
    return glia_backend_copy(s->b, dst, host, src, host, n);
}

static glia_status self_all_gather(void *priv, void *dst, const void *src, size_t count, enum glia_dtype dt,
                                   uint64_t *ticket)
{
    return copy(priv, dst, src, count, dt, ticket);
}

static glia_status self_reduce_scatter(void *priv, void *dst, const void *src, size_t count, enum glia_dtype dt,
                                       enum glia_reduce_op op, uint64_t *ticket)
{
    (void)op;
    return copy(priv, dst, src, count, dt, ticket);
}

static glia_status self_barrier(void *priv, uint64_t *ticket)
{
    (void)priv;
    *ticket = 0;
    return GLIA_OK;
}

/* Every call is queued on the backend already: the host waits for the backend. */
static glia_status self_wait(void *priv, uint64_t ticket, bool host)
{
    (void)ticket;
    struct self *s = priv;
    return host ? glia_backend_sync(s->b) : GLIA_OK;
}

static const struct glia_comm_ops self_ops = {
    .struct_size = sizeof(struct glia_comm_ops),
    .name = "self",
    .description = "one process, rank 0 of 1 (built in)",
    .memory = GLIA_COMM_HOST_MEMORY | GLIA_COMM_DEVICE_MEMORY,
    .device_types = (1u << GLIA_DEVICE_CPU) | (1u << GLIA_DEVICE_CUDA),
    .open = self_open,
    .close = self_close,
    .all_reduce = self_all_reduce,
    .broadcast = self_broadcast,
    .all_gather = self_all_gather,
    .reduce_scatter = self_reduce_scatter,
    .barrier = self_barrier,
    .wait = self_wait,
};

glia_status glia__self_comm_register(struct glia_context *ctx)
{
    struct glia_registry r = {ctx, -1};
    return glia_register_comm(&r, &self_ops);
}
