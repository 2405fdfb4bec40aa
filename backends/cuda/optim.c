/* backends/cuda/optim.c — the CUDA kernels of optimizers sgd, adam, adamw, adadelta: each step is one fused
 * kernel launch on the backend's stream (no synchronization), from the step scalars that the CPU kernels use too
 * (glia/types/optimizers.h). Not the optimizers (keys, create, state): their own plugins register those. */
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
                                        .n = (int64_t)s->n};
    return GLIA_OK;
}

static glia_status cuda_step(struct glia_optimizer *o, const struct glia_opt_step *s);

/* The kernels, one per optimizer, all with cuda_step, which tells them apart by their place here. */
enum { SGD, ADAM, ADAMW, ADADELTA, N_KERNELS };
#define KERNEL(name) \
    {.struct_size = sizeof(struct glia_optimizer_kernel), .type = name, .doc = "one fused CUDA kernel", \
     .device_type = GLIA_DEVICE_CUDA, .step = cuda_step}
static const struct glia_optimizer_kernel cuda_kernels[N_KERNELS] = {
    [SGD] = KERNEL("sgd"), [ADAM] = KERNEL("adam"), [ADAMW] = KERNEL("adamw"), [ADADELTA] = KERNEL("adadelta")};
#undef KERNEL

/* One launch with the step scalars of o's optimizer, computed on the host as the CPU kernels compute them. */
static glia_status cuda_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    struct glia__cuda_opt_arrays a;
    cudaStream_t stream = NULL;
    glia_status st = arrays_of(o, s, &a, &stream);
    if (st) return st;
    switch (o->kernel - cuda_kernels) {
    case SGD: CUDA_TRY(o->ctx, glia__cuda_sgd_step(a, glia_sgd_coef(o->attrs, s), stream)); break;
    case ADAM: CUDA_TRY(o->ctx, glia__cuda_adam_step(a, glia_adam_coef(o->attrs, s), false, stream)); break;
    case ADAMW: CUDA_TRY(o->ctx, glia__cuda_adam_step(a, glia_adamw_coef(o->attrs, s), true, stream)); break;
    case ADADELTA: CUDA_TRY(o->ctx, glia__cuda_adadelta_step(a, glia_adadelta_coef(o->attrs, s), stream)); break;
    default: return glia_error(o->ctx, GLIA_EINVAL, "optimizer '%s' (cuda): not a kernel of cuda.so", o->type->name);
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
