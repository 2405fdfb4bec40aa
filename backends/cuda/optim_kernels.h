/* backends/cuda/optim_kernels.h — the fused optimizer steps of cuda.so (C entry points into optim_kernels.cu):
 * one launch per step over the flat fp32 arena, on a given stream, with the scalars of glia/types/optimizers.h
 * (k; or, dk not NULL, the same struct in device memory, read when the kernel runs: a CUDA graph's replay).
 * Not the settings: optim.c reads them from the optimizer's attrs. */
#ifndef GLIA_CUDA_OPTIM_KERNELS_H
#define GLIA_CUDA_OPTIM_KERNELS_H

#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include <glia/types/optimizers.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The device arrays of one step: n weights w, gradients g, state arrays s0 and s1 (s1 NULL where the
 * optimizer has one), the weight decay flags mask (1 or 0; NULL: decay everywhere), and skip (NULL, or one int32
 * read when the kernel runs: nonzero leaves w and the state as they are, fp16's skipped step in a CUDA graph). */
struct glia__cuda_opt_arrays {
    float *w;
    const float *g;
    float *s0, *s1;
    const float *mask;
    int64_t n;
    const int32_t *skip;
};

/* torch.optim.SGD: w(n), s0 = momentum buffer(n) from g(n), mask(n). */
cudaError_t glia__cuda_sgd_step(struct glia__cuda_opt_arrays a, struct glia_sgd_coef k,
                                const struct glia_sgd_coef *dk, cudaStream_t s);
/* torch.optim.Adam (decoupled false: k.wd added to the gradient) or torch.optim.AdamW (decoupled true: w
 * scaled by k.keep where the flag is not 0): w(n), s0 = m(n), s1 = v(n) from g(n), mask(n). */
cudaError_t glia__cuda_adam_step(struct glia__cuda_opt_arrays a, struct glia_adam_coef k,
                                 const struct glia_adam_coef *dk, bool decoupled, cudaStream_t s);
/* torch.optim.Adadelta: w(n), s0 = square_avg(n), s1 = acc_delta(n) from g(n), mask(n). */
cudaError_t glia__cuda_adadelta_step(struct glia__cuda_opt_arrays a, struct glia_adadelta_coef k,
                                     const struct glia_adadelta_coef *dk, cudaStream_t s);

/* The tensors of a step for the kernels that work per tensor: n_seg of them in seg (device memory, 2 n_seg int64:
 * offset and length), max_chunks the most chunks of GLIA_NORM_CHUNK any has, and scratch: device memory of
 * glia__cuda_norm_scratch(n, n_seg) bytes for the norms (the chunks' sums, the tensors' sums, the clip factor). */
struct glia__cuda_opt_tensors {
    int n_seg;
    const int64_t *seg;
    int64_t max_chunks;
    float *scratch;
};

static inline size_t glia__cuda_norm_scratch(int64_t n, int n_seg)
{
    return sizeof(float) * (size_t)(3 * glia_norm_slots(n, n_seg) + 3 * (int64_t)n_seg + 1);
}

/* Apex FusedLAMB (glia_lamb_coef): w(n), s0 = m(n), s1 = v(n) from g(n), mask(n), over the tensors t: five launches
 * (norms of w and g per chunk, their tensor sums, the clip factor, moments and the norms of u, the update) with
 * no host synchronization, the CPU kernel's order of operations (bit for bit). */
cudaError_t glia__cuda_lamb_step(struct glia__cuda_opt_arrays a, struct glia__cuda_opt_tensors t,
                                 struct glia_lamb_coef k, const struct glia_lamb_coef *dk, cudaStream_t s);

/* Apex LARC around torch.optim.SGD (glia_lars_coef): w(n), s0 = momentum buffer(n) from g(n), mask(n), over the
 * tensors t: four launches (norms of w and g per chunk, their tensor sums, the update), the CPU kernel's order. */
cudaError_t glia__cuda_lars_step(struct glia__cuda_opt_arrays a, struct glia__cuda_opt_tensors t,
                                 struct glia_lars_coef k, const struct glia_lars_coef *dk, cudaStream_t s);

/* Apex FusedNovoGrad (glia_novograd_coef): w(n), s0 = m(n), s1 = each tensor's n at its offset, from g(n), mask(n),
 * over the tensors t: four launches (norms of g per chunk, their tensor sums, n, the update), the CPU kernel's order. */
cudaError_t glia__cuda_novograd_step(struct glia__cuda_opt_arrays a, struct glia__cuda_opt_tensors t,
                                     struct glia_novograd_coef k, const struct glia_novograd_coef *dk, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
