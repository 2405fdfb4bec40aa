/* core/comm.c — opening communicators through transport plugins, and the checked glia_comm_*
 * calls. Not a transport (plugins/comm/mpi, plugins/comm/nccl) and not DDP (core/ddp.c). */
#include <stdlib.h>
#include <string.h>
#include "internal.h"

const char *glia_reduce_op_name(enum glia_reduce_op op)
{
    static const char *n[] = {"sum", "avg", "max", "min"};
    return (unsigned)op < GLIA__ARRAY_LEN(n) ? n[op] : "?";
}

/* The transport's ops, loading its plugin (named like the transport) when needed. */
static glia_status find_transport(struct glia_context *ctx, const char *name, const struct glia_comm_ops **out)
{
    if ((*out = glia__find_comm(ctx, name))) return GLIA_OK;
    char saved[GLIA__ERRMSG_MAX];
    glia_status st = glia_plugin_load(ctx, name);
    if (st == GLIA_ENOTFOUND) {
        snprintf(saved, sizeof saved, "%s", glia_context_error(ctx));
        return glia_error(ctx, st, "transport '%s' is not available: no plugin %s.so (this build of glia has %s) [%s]", name,
                          name, !strcmp(name, "mpi")    ? "no MPI; install libopenmpi-dev and rebuild"
                                : !strcmp(name, "nccl") ? "no NCCL; configure --with-nccl=DIR"
                                                        : "no such plugin",
                          saved);
    }
    if (st) return st;
    if (!(*out = glia__find_comm(ctx, name)))
        return glia_error(ctx, GLIA_EPLUGIN, "plugin %s.so registers no transport named '%s'", name, name);
    return GLIA_OK;
}

glia_status glia_comm_open(struct glia_context *ctx, const char *transport, struct glia_backend *b, double timeout_s,
                           struct glia_comm **out)
{
    *out = NULL;
    if (!transport || !b) return glia_error(ctx, GLIA_EINVAL, "glia_comm_open: no transport or backend");
    if (!strcmp(transport, "auto")) transport = b->device.type == GLIA_DEVICE_CUDA ? "nccl" : "mpi";
    for (int i = 0; i < ctx->n_comms; i++)
        if (!strcmp(ctx->comms[i]->ops->name, transport) && ctx->comms[i]->backend == b) {
            *out = ctx->comms[i];
            return GLIA_OK;
        }
    const struct glia_comm_ops *ops;
    glia_status st = find_transport(ctx, transport, &ops);
    if (st) return st;
    if (!(ops->device_types & (1u << b->device.type))) {
        char d[32];
        return glia_error(ctx, GLIA_EUNSUPPORTED, "transport '%s' cannot serve device %s", transport,
                          glia_device_str(b->device, d, sizeof d));
    }
    struct glia_comm *boot = NULL;
    if (!(ops->memory & GLIA_COMM_HOST_MEMORY)) {  /* a device-only transport starts through a host one */
        struct glia_backend *cpu;
        const char *via = glia__launcher_world() > 1 ? "mpi" : "self";  /* one process needs no MPI */
        if ((st = glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CPU, 0}, &cpu))) return st;
        if ((st = glia_comm_open(ctx, via, cpu, timeout_s, &boot)))
            return glia_error_wrap(ctx, st, "transport '%s' exchanges its setup over %s", transport, via);
        if (!strcmp(via, "self"))
            glia_log(ctx, GLIA_LOG_INFO, "transport %s: one process (no launcher of several ranks in the environment)",
                     transport);
    }
    if (glia__grow((void **)&ctx->comms, &ctx->cap_comms, ctx->n_comms + 1, sizeof *ctx->comms)) return GLIA_ENOMEM;
    struct glia_comm *c = calloc(1, sizeof *c);
    if (!c) return GLIA_ENOMEM;
    *c = (struct glia_comm){ops, NULL, {0, 1, 0, 1}, b, ctx, timeout_s};
    struct glia_comm_open_args a = {sizeof a, b, boot, timeout_s};
    glia_context_clear_error(ctx);
    if ((st = ops->open(ctx, &a, &c->info, &c->priv))) {
        if (!glia_context_error(ctx)[0]) glia_error(ctx, st, "transport %s: open failed (%s)", transport, glia_strerror(st));
        free(c);
        return st;
    }
    if (c->info.world < 1 || c->info.rank < 0 || c->info.rank >= c->info.world) {
        struct glia_comm_info bad = c->info;
        ops->close(c->priv);
        free(c);
        return glia_error(ctx, GLIA_EPLUGIN, "transport %s: open gave rank %d of %d", transport, bad.rank, bad.world);
    }
    ctx->comms[ctx->n_comms++] = c;
    *out = c;
    return GLIA_OK;
}

int glia__launcher_world(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS",
                                       "WORLD_SIZE"};
    int world = 1;
    for (size_t i = 0; i < GLIA__ARRAY_LEN(vars); i++) {
        const char *v = getenv(vars[i]);
        if (!strcmp(vars[i], "SLURM_NTASKS") && !getenv("SLURM_STEP_ID")) continue;  /* an allocation, not srun */
        if (v && atoi(v) > world) world = atoi(v);
    }
    return world;
}

void glia__comms_close(struct glia_context *ctx)
{
    for (int i = ctx->n_comms - 1; i >= 0; i--) {
        ctx->comms[i]->ops->close(ctx->comms[i]->priv);
        free(ctx->comms[i]);
    }
    free(ctx->comms);
    ctx->comms = NULL;
    ctx->n_comms = ctx->cap_comms = 0;
}

glia_status glia_comm_abort_job(struct glia_context *ctx, int status)
{
    bool several = false;
    for (int i = 0; i < ctx->n_comms; i++) {
        struct glia_comm *c = ctx->comms[i];
        if (c->info.world < 2) continue;
        several = true;
        if (GLIA__HAS_COMM_SLOT(c->ops, abort)) c->ops->abort(c->priv, status);  /* returns only when it failed */
    }
    return several ? glia_error(ctx, GLIA_EUNSUPPORTED, "no transport of this job could end it")
                   : glia_error(ctx, GLIA_ENOTFOUND, "no communicator over several ranks is open");
}

/* A failed call's status, with a context error naming the transport and the call. */
static glia_status checked(struct glia_comm *c, const char *call, glia_status st)
{
    if (!st) return GLIA_OK;
    const char *e = glia_context_error(c->ctx);
    if (!strncmp(e, "rank ", 5)) return st;  /* the transport already said which rank and call */
    char saved[GLIA__ERRMSG_MAX];
    snprintf(saved, sizeof saved, "%s", e);
    return glia_error(c->ctx, st, "rank %d of %d: %s %s failed: %s", c->info.rank, c->info.world, c->ops->name, call,
                      saved[0] ? saved : glia_strerror(st));
}

glia_status glia_comm_all_reduce(struct glia_comm *c, void *buf, size_t count, enum glia_dtype dt, enum glia_reduce_op op,
                                 uint64_t *ticket)
{
    if ((unsigned)op > GLIA_REDUCE_MIN) return glia_error(c->ctx, GLIA_EINVAL, "all-reduce: unknown op %d", (int)op);
    return checked(c, "all-reduce", c->ops->all_reduce(c->priv, buf, count, dt, op, ticket));
}

glia_status glia_comm_broadcast(struct glia_comm *c, void *buf, size_t count, enum glia_dtype dt, int root, uint64_t *ticket)
{
    if (root < 0 || root >= c->info.world)
        return glia_error(c->ctx, GLIA_EINVAL, "broadcast: root %d is not a rank of %d", root, c->info.world);
    return checked(c, "broadcast", c->ops->broadcast(c->priv, buf, count, dt, root, ticket));
}

glia_status glia_comm_all_gather(struct glia_comm *c, void *dst, const void *src, size_t count, enum glia_dtype dt,
                                 uint64_t *ticket)
{
    return checked(c, "all-gather", c->ops->all_gather(c->priv, dst, src, count, dt, ticket));
}

glia_status glia_comm_reduce_scatter(struct glia_comm *c, void *dst, const void *src, size_t count, enum glia_dtype dt,
                                     enum glia_reduce_op op, uint64_t *ticket)
{
    if ((unsigned)op > GLIA_REDUCE_MIN) return glia_error(c->ctx, GLIA_EINVAL, "reduce-scatter: unknown op %d", (int)op);
    return checked(c, "reduce-scatter", c->ops->reduce_scatter(c->priv, dst, src, count, dt, op, ticket));
}

glia_status glia_comm_barrier(struct glia_comm *c, uint64_t *ticket)
{
    return checked(c, "barrier", c->ops->barrier(c->priv, ticket));
}

glia_status glia_comm_group_begin(struct glia_comm *c)
{
    return c->ops->group_begin ? checked(c, "group_begin", c->ops->group_begin(c->priv)) : GLIA_OK;
}

glia_status glia_comm_group_end(struct glia_comm *c)
{
    return c->ops->group_end ? checked(c, "group_end", c->ops->group_end(c->priv)) : GLIA_OK;
}

glia_status glia_comm_wait(struct glia_comm *c, uint64_t ticket, bool host)
{
    return checked(c, "wait", c->ops->wait(c->priv, ticket, host));
}

/* One blocking collective in place on p (count values of dt): an all-reduce with op, or with
 * root >= 0 a broadcast from root. p is memory of c's backend, or host memory when host is set;
 * it goes through a host copy when the transport takes host memory only, through a copy on the
 * backend when it takes device memory only. */
static glia_status in_place_sync(struct glia_comm *c, void *p, size_t count, enum glia_dtype dt,
                                 enum glia_reduce_op op, int root, bool host)
{
    uint64_t t;
    struct glia_backend *b = c->backend;
    bool cpu = b->device.type == GLIA_DEVICE_CPU;
    bool to_host = !host && !cpu && !(c->ops->memory & GLIA_COMM_DEVICE_MEMORY);
    bool to_device = host && !(c->ops->memory & GLIA_COMM_HOST_MEMORY);
    size_t nbytes = count * glia_dtype_size(dt);
    void *buf = p;
    struct glia_tensor *dev = NULL;
    glia_status st = GLIA_OK;
    if (to_host && !(buf = malloc(nbytes ? nbytes : 1))) return GLIA_ENOMEM;
    if (to_device && !(st = glia_tensor_new(b, dt, &(struct glia_shape){1, {count ? (int64_t)count : 1}}, &dev)))
        buf = dev->data;
    if (!st && (to_host || to_device)) st = glia_backend_copy(b, buf, to_host || cpu, p, host || cpu, nbytes);
    if (!st && (to_host || to_device)) st = glia_backend_sync(b);
    if (!st) st = root >= 0 ? glia_comm_broadcast(c, buf, count, dt, root, &t) : glia_comm_all_reduce(c, buf, count, dt, op, &t);
    if (!st) st = glia_comm_wait(c, t, true);
    if (!st && (to_host || to_device)) st = glia_backend_copy(b, p, host || cpu, buf, to_host || cpu, nbytes);
    if (!st && (to_host || to_device)) st = glia_backend_sync(b);  /* buf is freed next */
    if (to_host) free(buf);
    glia_tensor_release(dev);
    return st;
}

glia_status glia__comm_all_reduce_host(struct glia_comm *c, void *p, size_t count, enum glia_dtype dt,
                                       enum glia_reduce_op op)
{
    return in_place_sync(c, p, count, dt, op, -1, true);
}

glia_status glia__comm_broadcast_host(struct glia_comm *c, void *p, size_t count, enum glia_dtype dt, int root)
{
    if (root < 0 || root >= c->info.world)
        return glia_error(c->ctx, GLIA_EINVAL, "broadcast: root %d is not a rank of %d", root, c->info.world);
    return in_place_sync(c, p, count, dt, GLIA_REDUCE_SUM, root, true);
}

glia_status glia_comm_all_reduce_sync(struct glia_comm *c, void *p, size_t count, enum glia_dtype dt,
                                      enum glia_reduce_op op)
{
    return in_place_sync(c, p, count, dt, op, -1, false);
}

glia_status glia_comm_broadcast_sync(struct glia_comm *c, void *p, size_t count, enum glia_dtype dt, int root)
{
    if (root < 0)  /* in_place_sync would all-reduce */
        return glia_error(c->ctx, GLIA_EINVAL, "broadcast: root %d is not a rank of %d", root, c->info.world);
    return in_place_sync(c, p, count, dt, GLIA_REDUCE_SUM, root, false);
}
