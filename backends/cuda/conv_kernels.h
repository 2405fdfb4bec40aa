/* backends/cuda/conv_kernels.h — the CUDA conv2d's own kernels (C entry points into
 * conv_kernels.cu): fp32 <-> fp16/bf16 conversion, fused with the filter's KCRS <-> KRSC
 * transpose where needed. Not the convolution itself: cuDNN does that (conv.c). */
#ifndef GLIA_CUDA_CONV_KERNELS_H
#define GLIA_CUDA_CONV_KERNELS_H

#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of glia__conv_convert's operands. */
enum glia__conv_type {
    GLIA__CONV_F32 = 0,
    GLIA__CONV_F16 = 1,
    GLIA__CONV_BF16 = 2
};

/* dst(B, cols, rows) = src(B, rows, cols)^T (+ dst when beta is 1; beta is 0 or 1), converting
 * from src_type to dst_type (fp32 -> fp16/bf16 rounds to nearest even). rows == 1 or cols == 1
 * is a plain element-wise conversion of B*rows*cols elements. dst is never read when beta is 0
 * (it may hold NaN). dst and src must not overlap. */
cudaError_t glia__conv_convert(void *dst, enum glia__conv_type dst_type, const void *src,
                               enum glia__conv_type src_type, int64_t B, int64_t rows, int64_t cols, float beta,
                               cudaStream_t s);

/* One conversion of glia__conv_convert_many: dst(B, cols, rows) = src(B, rows, cols)^T from f32 to type (B = rows = 1: a
 * plain conversion of cols elements), run by the launch's blocks first .. the next job's first - 1. */
struct glia__convert_job {
    void *dst;
    const float *src;
    int64_t B, rows, cols;
    int64_t first;        /* its first block */
    int32_t type;         /* enum glia__conv_type of dst */
    int32_t pad;
};

/* Every job of jobs(n) (device memory, firsts ascending from 0) in one launch of `blocks` blocks, each element as
 * glia__conv_convert converts it (the same bits). */
cudaError_t glia__conv_convert_many(const struct glia__convert_job *jobs, int n, int64_t blocks, cudaStream_t s);
/* The blocks glia__conv_convert_many gives a job of n elements. */
int64_t glia__conv_convert_blocks(int64_t n);

/* y(n) = act(a(y(n) + b(c))) over y's n elements of type t (f32 arithmetic, rounded once), c = the element's channel
 * of F: (i / HW) % F in NCHW order, i % F in NHWC (nhwc); b NULL adds nothing; a(v) = (v - affine(0, c))*affine(1, c)
 * + affine(2, c) (a following batchnorm's evaluation, glia_fwd.affine: (3, F) f32), v without it; act is the relu
 * with relu (conv2d's activation = relu, the batchnorm's), else none */
cudaError_t glia__conv_bias_add(void *y, enum glia__conv_type t, const float *b, const float *affine, int64_t n,
                                int64_t F, int64_t HW, bool nhwc, bool relu, cudaStream_t s);

/* d(n) = y(n) <= 0 ? 0 : dy(n) over n elements (the relu's backward by its output), dy and y of src_type, d of dst_type
 * (converted; rounded to nearest even). d may be dy when the types agree. */
cudaError_t glia__conv_relu_mask(void *d, enum glia__conv_type dst_type, const void *dy, const void *y,
                                 enum glia__conv_type src_type, int64_t n, cudaStream_t s);

/* How far b(n) is from a(n), both of type t, on the device: out(2) = {the largest |b - a| (+inf where it is NaN
 * while a is not), the largest |a| (NaN ignored)}, out zeroed first on the stream. */
cudaError_t glia__conv_compare(float *out, const void *a, const void *b, enum glia__conv_type t, int64_t n,
                               cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
