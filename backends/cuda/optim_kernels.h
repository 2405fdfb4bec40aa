/* backends/cuda/optim_kernels.h — the fused optimizer steps of cuda.so (C entry points into
 * optim_kernels.cu): one launch per step over the flat fp32 arena, on a given stream. Not the
 * settings or the per-step scalars: optim.c takes those from plugins/optimizers/<name>/<name>_desc.c. */
#ifndef GLIA_CUDA_OPTIM_KERNELS_H
#define GLIA_CUDA_OPTIM_KERNELS_H

#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The device arrays of one step: n weights w, gradients g, state arrays s0 and s1 (s1 NULL where the
 * optimizer has one), and the weight decay flags mask (1 or 0; NULL: decay everywhere). */
struct glia__cuda_opt_arrays {
    float *w;
    const float *g;
    float *s0, *s1;
    const float *mask;
    int64_t n;
};

/* The fp32 scalars of one step, as the CPU plugins compute them (the fields of struct
 * glia__<name>_coef in plugins/optimizers/<name>/<name>_desc.h). */
struct glia__cuda_sgd_scalars {
    float lr, mu, damp, wd;
    int first, nesterov;
};
struct glia__cuda_adam_scalars {   /* adam: decay is L2 added to the gradient */
    float b1, c1, b2, c2, eps, wd, step_size, bc2_sqrt;
};
struct glia__cuda_adamw_scalars {  /* adamw: decay is the factor keep = 1 - lr wd on w */
    float b1, c1, b2, c2, eps, keep, step_size, bc2_sqrt;
};
struct glia__cuda_adadelta_scalars {
    float lr, rho, c, eps, wd;
};

/* torch.optim.SGD: w(n), s0 = momentum buffer(n) from g(n), mask(n). */
cudaError_t glia__cuda_sgd_step(struct glia__cuda_opt_arrays a, struct glia__cuda_sgd_scalars k, cudaStream_t s);
/* torch.optim.Adam: w(n), s0 = m(n), s1 = v(n) from g(n), mask(n). */
cudaError_t glia__cuda_adam_step(struct glia__cuda_opt_arrays a, struct glia__cuda_adam_scalars k, cudaStream_t s);
/* torch.optim.AdamW: w(n), s0 = m(n), s1 = v(n) from g(n), mask(n). */
cudaError_t glia__cuda_adamw_step(struct glia__cuda_opt_arrays a, struct glia__cuda_adamw_scalars k,
                                  cudaStream_t s);
/* torch.optim.Adadelta: w(n), s0 = square_avg(n), s1 = acc_delta(n) from g(n), mask(n). */
cudaError_t glia__cuda_adadelta_step(struct glia__cuda_opt_arrays a, struct glia__cuda_adadelta_scalars k,
                                     cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
