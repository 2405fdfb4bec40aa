/* backends/cuda/dense_kernels.h — the device code of the CUDA kernels of linear (bias add, activation, bias gradient),
 * softmax_cross_entropy and dropout, launched on a given stream (C entry points into dense_kernels.cu). Not
 * the GEMMs (gemm.c) nor the kernels' host logic (dense.c). */
#ifndef GLIA_CUDA_DENSE_KERNELS_H
#define GLIA_CUDA_DENSE_KERNELS_H

#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include <glia/tensor.h>
#include <glia/types/dropout.h>  /* struct glia_seed_at */

#ifdef __cplusplus
extern "C" {
#endif

/* No bad label: the value of softmax_cross_entropy's label flag while every label was in range.
 * Otherwise the flag holds (row << 32 | (uint32_t)label) of the first bad row. */
#define GLIA__SCE_NO_BAD_LABEL UINT64_MAX

/* y(N,O) += b(O) */
cudaError_t glia__cuda_bias_add(float *y, const float *b, int64_t N, int64_t O, cudaStream_t s);

/* y(N,O) = acc(N,O) + b(O), rounded once to y's type t (f32, f16 or bf16); b is of type t too */
cudaError_t glia__cuda_bias_add_round(void *y, enum glia_dtype t, const float *acc, const void *b, int64_t N,
                                      int64_t O, cudaStream_t s);

/* y(n) = act(h(n)), act an enum glia_linear_act (glia/types/linear.h); y and h of type t (f32, f16 or bf16), y may be
 * h; the arithmetic f32's */
cudaError_t glia__cuda_linear_act(void *y, const void *h, enum glia_dtype t, int act, int64_t n, cudaStream_t s);

/* dh(n) = dy(n) act'(h(n)); dh, dy and h of type t, dh may be dy */
cudaError_t glia__cuda_linear_act_grad(void *dh, const void *dy, const void *h, enum glia_dtype t, int act,
                                       int64_t n, cudaStream_t s);

/* The row chunks glia__cuda_col_sum splits N rows of O columns into (1: one pass, no part). */
int64_t glia__cuda_col_sum_chunks(int64_t N, int64_t O);

/* db(O) = sum_n dy(N,O) + beta db, beta 0 or 1 (0: db is not read); dy of type t (f32, f16 or bf16), the sums in
 * f32, in an order fixed by N and O (deterministic). part: device memory for glia__cuda_col_sum_chunks(N, O) * O
 * floats (NULL when that is 1). */
cudaError_t glia__cuda_col_sum(float *db, const void *dy, enum glia_dtype t, int64_t N, int64_t O, float beta,
                               float *part, cudaStream_t s);

/* loss(1) = sum_n [(1-e)(lse_n - x[n, y_n]) + e mean_c (lse_n - x[n, c])] / count over the rows whose label y_n is
 * not ign, lse_n = log sum_c exp x[n, c], from x(N,C) and labels y(N) (N: every position, N*T of a sequence's
 * logits; x and dx of type t: f32, f16 or bf16, the arithmetic f32's and the sums double's, dx rounded once to t);
 * count 0 gives 0. row(N) is scratch (doubles); *count (a double) gets count; lse(N) (doubles) is kept for
 * backward when not NULL. A label outside [0, C) that is not ign makes its row's loss (so the mean) NaN and lowers
 * *bad to (row << 32 | label) (atomic min; *bad starts at GLIA__SCE_NO_BAD_LABEL). With dx (training, the gradient
 * in the forward's pass: GLIA_KERNEL_GRAD_IN_FORWARD), also dx(N,C) as glia__cuda_sce_backward with beta 0 would
 * write it, scaled by dout[0] (device memory); dx may be x (each row is written once the row is read). */
cudaError_t glia__cuda_sce_forward(float *loss, double *lse, double *row, void *count, unsigned long long *bad,
                                   void *dx, const float *dout, const void *x, enum glia_dtype t, const int32_t *y,
                                   int64_t N, int64_t C, float e, int32_t ign, cudaStream_t s);

/* dx(N,C) = dout[0] / count * (softmax(x) - (1-e) onehot(y) - e/C) + beta dx, beta 0 or 1, softmax from
 * x(N,C) and the forward's lse(N) and count (a double; 0: every gradient 0); dout is device memory (1 element).
 * Rows whose label is ign get 0, rows with another label outside [0, C) NaN. */
cudaError_t glia__cuda_sce_backward(void *dx, const void *x, enum glia_dtype t, const double *lse, const void *count,
                                    const int32_t *y, const float *dout, int64_t N, int64_t C, float e, int32_t ign,
                                    float beta, cudaStream_t s);

/* y(n) = (keep(j) ? x * scale : 0) + beta y, beta 0 or 1, keep(j) = glia_dropout_uniform(seed, j) >= p
 * with j the element's logical NCHW index: its offset, or for channels_last memory (N,H,W,C)
 * with C channels and HW = H*W the offset mapped back to NCHW; seed resolved on the device
 * (struct glia_seed_at). x and y hold values of type t (f32, f16 or bf16); the arithmetic is f32's. */
cudaError_t glia__cuda_dropout(void *y, const void *x, enum glia_dtype t, int64_t n, bool channels_last, int64_t C,
                               int64_t HW, struct glia_seed_at seed, float p, float scale, float beta, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
