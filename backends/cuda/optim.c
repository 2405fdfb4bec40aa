/* backends/cuda/optim.c — the CUDA impls of sgd, adam, adamw, adadelta: each step is one fused
 * kernel launch on the backend's stream (no synchronization). Not the keys or create: those are
 * shared with the CPU plugins through plugins/optimizers/<name>/<name>_desc.c. */
#include "cuda_internal.h"
#include "optim_kernels.h"
#include "../../plugins/optimizers/sgd/sgd_desc.h"
#include "../../plugins/optimizers/adam/adam_desc.h"
#include "../../plugins/optimizers/adamw/adamw_desc.h"
#include "../../plugins/optimizers/adadelta/adadelta_desc.h"

/* The device arrays of step s and the stream of its backend; refuses a backend that is not CUDA. */
static glia_status arrays_of(const struct glia_optimizer *o, const struct glia_opt_step *s,
                             struct glia__cuda_opt_arrays *a, cudaStream_t *stream)
{
    if (!s->backend || s->backend->ops->device_type != GLIA_DEVICE_CUDA)
        return glia_error(o->ctx, GLIA_EINVAL, "optimizer '%s' (cuda): the step's backend is not a CUDA backend",
                          o->ops->name);
    *stream = glia__cuda_of(s->backend)->stream;
    *a = (struct glia__cuda_opt_arrays){.w = s->w,
                                        .g = s->g,
                                        .s0 = o->ops->n_state > 0 ? s->state[0] : NULL,
                                        .s1 = o->ops->n_state > 1 ? s->state[1] : NULL,
                                        .mask = s->decay_mask,
                                        .n = (int64_t)s->n};
    return GLIA_OK;
}

static glia_status cuda_sgd_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    struct glia__cuda_opt_arrays a;
    cudaStream_t stream;
    glia_status st = arrays_of(o, s, &a, &stream);
    if (st) return st;
    struct glia__sgd_coef c = glia__sgd_coef(o->priv, s);
    struct glia__cuda_sgd_scalars k = {c.lr, c.mu, c.damp, c.wd, c.first, c.nesterov};
    CUDA_TRY(o->ctx, glia__cuda_sgd_step(a, k, stream));
fail:
    return st;
}

static glia_status cuda_adam_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    struct glia__cuda_opt_arrays a;
    cudaStream_t stream;
    glia_status st = arrays_of(o, s, &a, &stream);
    if (st) return st;
    struct glia__adam_coef c = glia__adam_coef(o->priv, s);
    struct glia__cuda_adam_scalars k = {c.b1, c.c1, c.b2, c.c2, c.eps, c.wd, c.step_size, c.bc2_sqrt};
    CUDA_TRY(o->ctx, glia__cuda_adam_step(a, k, stream));
fail:
    return st;
}

static glia_status cuda_adamw_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    struct glia__cuda_opt_arrays a;
    cudaStream_t stream;
    glia_status st = arrays_of(o, s, &a, &stream);
    if (st) return st;
    struct glia__adamw_coef c = glia__adamw_coef(o->priv, s);
    struct glia__cuda_adamw_scalars k = {c.b1, c.c1, c.b2, c.c2, c.eps, c.keep, c.step_size, c.bc2_sqrt};
    CUDA_TRY(o->ctx, glia__cuda_adamw_step(a, k, stream));
fail:
    return st;
}

static glia_status cuda_adadelta_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    struct glia__cuda_opt_arrays a;
    cudaStream_t stream;
    glia_status st = arrays_of(o, s, &a, &stream);
    if (st) return st;
    struct glia__adadelta_coef c = glia__adadelta_coef(o->priv, s);
    struct glia__cuda_adadelta_scalars k = {c.lr, c.rho, c.c, c.eps, c.wd};
    CUDA_TRY(o->ctx, glia__cuda_adadelta_step(a, k, stream));
fail:
    return st;
}

static const struct glia_optimizer_ops cuda_sgd_ops = {
    .struct_size = sizeof(struct glia_optimizer_ops),
    .name = "sgd",
    .doc = "SGD with momentum, dampening, Nesterov and weight decay (torch.optim.SGD rule), one CUDA kernel",
    .keys = glia__sgd_keys,
    .n_state = GLIA__SGD_N_STATE,
    .device_type = GLIA_DEVICE_CUDA,
    .create = glia__sgd_create,
    .destroy = glia__sgd_destroy,
    .step = cuda_sgd_step,
};

static const struct glia_optimizer_ops cuda_adam_ops = {
    .struct_size = sizeof(struct glia_optimizer_ops),
    .name = "adam",
    .doc = "Adam with L2 weight decay in the gradient (torch.optim.Adam rule), one CUDA kernel",
    .keys = glia__adam_keys,
    .n_state = GLIA__ADAM_N_STATE,
    .device_type = GLIA_DEVICE_CUDA,
    .create = glia__adam_create,
    .destroy = glia__adam_destroy,
    .step = cuda_adam_step,
};

static const struct glia_optimizer_ops cuda_adamw_ops = {
    .struct_size = sizeof(struct glia_optimizer_ops),
    .name = "adamw",
    .doc = "Adam with decoupled weight decay (torch.optim.AdamW rule), one CUDA kernel",
    .keys = glia__adamw_keys,
    .n_state = GLIA__ADAMW_N_STATE,
    .device_type = GLIA_DEVICE_CUDA,
    .create = glia__adamw_create,
    .destroy = glia__adamw_destroy,
    .step = cuda_adamw_step,
};

static const struct glia_optimizer_ops cuda_adadelta_ops = {
    .struct_size = sizeof(struct glia_optimizer_ops),
    .name = "adadelta",
    .doc = "Adadelta with L2 weight decay in the gradient (torch.optim.Adadelta rule), one CUDA kernel",
    .keys = glia__adadelta_keys,
    .n_state = GLIA__ADADELTA_N_STATE,
    .device_type = GLIA_DEVICE_CUDA,
    .create = glia__adadelta_create,
    .destroy = glia__adadelta_destroy,
    .step = cuda_adadelta_step,
};

glia_status glia__cuda_register_optim(struct glia_registry *r)
{
    static const struct glia_optimizer_ops *const all[] = {&cuda_sgd_ops, &cuda_adam_ops, &cuda_adamw_ops,
                                                           &cuda_adadelta_ops};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        glia_status st = glia_register_optimizer(r, all[i]);
        if (st) return st;
    }
    return GLIA_OK;
}
