/* backends/cuda/optim.c — the CUDA kernels of optimizers sgd, adam, adamw, adadelta, lamb, lars and novograd: each step is
 * one fused kernel launch (lamb's, lars's and novograd's: a few, for their per-tensor norms) on the backend's stream (no synchronization), from the step scalars that the CPU kernels use too
 * (glia/types/optimizers.h), handed by value or, for a step captured into a CUDA graph, read from device memory
 * where the core writes them (as `scalars` computes them) before each replay; each honours dev_skip (fp16's skipped
 * step inside a graph). Not the optimizers (keys, create, state): their own plugins register those. */
#include <string.h>
#include "cuda_internal.h"
#include "optim_kernels.h"

/* The device arrays of step s and the stream of its backend; refuses a backend that is not CUDA. */
static glia_status arrays_of(const struct glia_optimizer *o, const struct glia_opt_step *s,
                             struct glia__cuda_opt_arrays *a, cudaStream_t *stream)
{
    if (!s->backend || s->backend->ops->device_type != GLIA_DEVICE_CUDA)
        return glia_error(o->ctx, GLIA_EINVAL, "optimizer '%s' (cuda): the step's backend is not a CUDA backend",
                          o->type->name);
    *stream = glia__cuda_of(s->backend)->stream;
    *a = (struct glia__cuda_opt_arrays){.w = s->w,
                                        .g = s->g,
                                        .s0 = o->type->n_state > 0 ? s->state[0] : NULL,
                                        .s1 = o->type->n_state > 1 ? s->state[1] : NULL,
                                        .mask = s->decay_mask,
                                        .n = (int64_t)s->n,
                                        .skip = s->dev_skip};
    return GLIA_OK;
}

static glia_status cuda_step(struct glia_optimizer *o, const struct glia_opt_step *s);

static size_t cuda_scalars(struct glia_optimizer *o, const struct glia_opt_step *s, void *out, size_t cap);

/* The kernels, one per optimizer, all with cuda_step, which tells them apart by their place here. */
enum { SGD, ADAM, ADAMW, ADADELTA, LAMB, LARS, NOVOGRAD, N_KERNELS };
#define KERNEL(name) \
    {.struct_size = sizeof(struct glia_optimizer_kernel), .type = name, .doc = "one fused CUDA kernel", \
     .device_type = GLIA_DEVICE_CUDA, .step = cuda_step, .scalars = cuda_scalars, .flags = GLIA_OPT_KERNEL_SKIP}
#define PER_TENSOR(name) \
    {.struct_size = sizeof(struct glia_optimizer_kernel), .type = name, \
     .doc = "CUDA kernels: per-tensor norms on the device, then the update", .device_type = GLIA_DEVICE_CUDA, \
     .step = cuda_step, .scalars = cuda_scalars, .flags = GLIA_OPT_KERNEL_SKIP | GLIA_OPT_KERNEL_SEGMENTS}
static const struct glia_optimizer_kernel cuda_kernels[N_KERNELS] = {
    [SGD] = KERNEL("sgd"), [ADAM] = KERNEL("adam"), [ADAMW] = KERNEL("adamw"), [ADADELTA] = KERNEL("adadelta"),
    [LAMB] = PER_TENSOR("lamb"), [LARS] = PER_TENSOR("lars"), [NOVOGRAD] = PER_TENSOR("novograd")};
#undef PER_TENSOR
#undef KERNEL

/* The scalars of step s for each kernel: what the CPU kernels compute (glia/types/optimizers.h). */
union coefs {
    struct glia_sgd_coef sgd;
    struct glia_adam_coef adam;
    struct glia_adadelta_coef adadelta;
    struct glia_lamb_coef lamb;
    struct glia_lars_coef lars;
    struct glia_novograd_coef novograd;
};

/* *c = the scalars of step s; their size (0: o's kernel is not one of cuda.so's). */
static size_t coefs_of(const struct glia_optimizer *o, const struct glia_opt_step *s, union coefs *c)
{
    switch (o->kernel - cuda_kernels) {
    case SGD: c->sgd = glia_sgd_coef(o->attrs, s); return sizeof c->sgd;
    case ADAM: c->adam = glia_adam_coef(o->attrs, s); return sizeof c->adam;
    case ADAMW: c->adam = glia_adamw_coef(o->attrs, s); return sizeof c->adam;
    case ADADELTA: c->adadelta = glia_adadelta_coef(o->attrs, s); return sizeof c->adadelta;
    case LAMB: c->lamb = glia_lamb_coef(o->attrs, s); return sizeof c->lamb;
    case LARS: c->lars = glia_lars_coef(o->attrs, s); return sizeof c->lars;
    case NOVOGRAD: c->novograd = glia_novograd_coef(o->attrs, s); return sizeof c->novograd;
    default: return 0;
    }
}

/* The bytes a captured step reads from s->dev_scalars: the coefficient struct of its kernel, as computed on the
 * host for an uncaptured step, so that a replay updates bit for bit as a step run as it comes. */
static size_t cuda_scalars(struct glia_optimizer *o, const struct glia_opt_step *s, void *out, size_t cap)
{
    union coefs c;
    size_t n = coefs_of(o, s, &c);
    if (n && n <= cap) memcpy(out, &c, n);
    return n;
}

/* lamb, lars and novograd: the tensors of the step (the device's segment table), the norms' scratch kept for the graphs that
 * capture the step (glia__cuda_opt_scratch), then their launches. */
static glia_status per_tensor_step(struct glia_optimizer *o, const struct glia_opt_step *s, struct glia__cuda_opt_arrays a,
                                   const union coefs *c, const void *dk, cudaStream_t stream)
{
    if (a.n > 0 && (s->n_seg <= 0 || !s->seg || !s->dev_seg))
        return glia_error(o->ctx, GLIA_EINVAL, "optimizer '%s' (cuda): the step has no tensor segments in device "
                          "memory (glia_opt_step.dev_seg): its update works per tensor", o->type->name);
    struct glia__cuda_opt_tensors t = {.n_seg = s->n_seg, .seg = s->dev_seg};
    for (int i = 0; i < s->n_seg; i++) {
        int64_t n = glia_norm_chunks(s->seg[2 * i + 1]);
        if (n > t.max_chunks) t.max_chunks = n;
    }
    void *scratch;
    glia_status st = glia__cuda_opt_scratch(glia__cuda_of(s->backend), glia__cuda_norm_scratch(a.n, s->n_seg), &scratch);
    if (st) return st;
    t.scratch = scratch;
    switch (o->kernel - cuda_kernels) {
    case LAMB: CUDA_TRY(o->ctx, glia__cuda_lamb_step(a, t, c->lamb, dk, stream)); break;
    case LARS: CUDA_TRY(o->ctx, glia__cuda_lars_step(a, t, c->lars, dk, stream)); break;
    default: CUDA_TRY(o->ctx, glia__cuda_novograd_step(a, t, c->novograd, dk, stream)); break;
    }
fail:
    return st;
}

/* One launch with the step scalars of o's optimizer, computed on the host as the CPU kernels compute them, or read
 * from s->dev_scalars on the device when the step has them. */
static glia_status cuda_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    struct glia__cuda_opt_arrays a;
    cudaStream_t stream = NULL;
    glia_status st = arrays_of(o, s, &a, &stream);
    if (st) return st;
    union coefs c;
    if (!coefs_of(o, s, &c))
        return glia_error(o->ctx, GLIA_EINVAL, "optimizer '%s' (cuda): not a kernel of cuda.so", o->type->name);
    const void *d = s->dev_scalars;
    if (o->kernel->flags & GLIA_OPT_KERNEL_SEGMENTS) return per_tensor_step(o, s, a, &c, d, stream);
    switch (o->kernel - cuda_kernels) {
    case SGD: CUDA_TRY(o->ctx, glia__cuda_sgd_step(a, c.sgd, d, stream)); break;
    case ADAM: CUDA_TRY(o->ctx, glia__cuda_adam_step(a, c.adam, d, false, stream)); break;
    case ADAMW: CUDA_TRY(o->ctx, glia__cuda_adam_step(a, c.adam, d, true, stream)); break;
    default: CUDA_TRY(o->ctx, glia__cuda_adadelta_step(a, c.adadelta, d, stream)); break;
    }
fail:
    return st;
}

glia_status glia__cuda_register_optim(struct glia_registry *r)
{
    for (int i = 0; i < N_KERNELS; i++) {
        glia_status st = glia_register_optimizer_kernel(r, &cuda_kernels[i]);
        if (st) return st;
    }
    return GLIA_OK;
}
