/* backends/cuda/gemm.h — cuBLASLt GEMM with a fused epilogue (bias add, tanh GELU, bias gradient) for the
 * CUDA layers of cuda.so (gemm.c). Not the backend's gemm_f32 slot (cuda_internal.h), which is
 * the same GEMM without an epilogue. */
#ifndef GLIA_CUDA_GEMM_H
#define GLIA_CUDA_GEMM_H

#include "cuda_internal.h"

/* What the GEMM does besides C = alpha op(A) op(B) + beta C, in row-major terms. */
enum glia__gemm_epilogue {
    GLIA__GEMM_PLAIN = 0,
    /* C(M,N) = alpha op(A) op(B) + beta C + vec(N), vec broadcast over the M rows
     * (cuBLASLt's BIAS: vec runs along the rows of its column-major D = C^T) */
    GLIA__GEMM_BIAS,
    /* also vec(M) = sum_k op(A)(m, k), written (=) whatever beta is: the column sums of A when
     * ta (cuBLASLt's BGRADB: A is its second operand, B, and the sum runs over k) */
    GLIA__GEMM_BGRAD_A,
    /* C = gelu(alpha op(A) op(B) + beta C) in GELU's tanh form, after vec(N) is added as with BIAS for the _BIAS
     * ones; the _AUX ones also write the value before the GELU to aux, of C's type with C's row stride ldc (which
     * must then be a multiple of 8): cuBLASLt's GELU, GELU_BIAS, GELU_AUX and GELU_AUX_BIAS */
    GLIA__GEMM_GELU,
    GLIA__GEMM_GELU_BIAS,
    GLIA__GEMM_GELU_AUX,
    GLIA__GEMM_GELU_AUX_BIAS,
    /* C = (alpha op(A) op(B) + beta C) gelu'(aux), GELU's tanh form, aux read (of C's type, with C's row stride ldc, a
     * multiple of 8): the gradient through a GELU whose input aux a GELU_AUX epilogue kept (cuBLASLt's DGELU) */
    GLIA__GEMM_DGELU
};

/* C(M,N) = alpha op(A)(M,K) op(B)(K,N) + beta C (row-major, row strides lda, ldb, ldc) with
 * epilogue ep using vec (device memory; NULL for PLAIN), on the compute stream, in the precision
 * of c->options. For an epilogue that cuBLASLt has no algorithm for (with these types, shape
 * and alignment) it returns GLIA_EUNSUPPORTED without touching C or vec and WITHOUT recording a
 * context error, so that the caller can take another way (a kernel); the answer is cached per
 * shape. Other failures record an error as usual. */
glia_status glia__cuda_gemm_ex(struct glia__cuda *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                               const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                               int64_t ldc, enum glia__gemm_epilogue ep, float *vec);

/* glia__cuda_gemm_ex with A and B of element type ab (f32, f16 or bf16: the same for both, as cuBLASLt
 * requires) and C of type ct (f32, or ab). f32 A, B and C are glia__cuda_gemm_ex. Half A and B compute
 * in fp32 (CUBLAS_COMPUTE_32F: exact products, fp32 accumulation, alpha and beta C in fp32, D rounded
 * to ct once, to nearest even), whatever c->options' precision; vec is of type ct (the bias read, added
 * in fp32 before the rounding, or the bias gradient written: cuBLASLt's default, as PyTorch's autocast
 * and llm.c give a half GEMM a half bias). The same GLIA_EUNSUPPORTED contract. */
glia_status glia__cuda_gemm_typed(struct glia__cuda *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                                  const void *A, int64_t lda, const void *B, int64_t ldb, enum glia_dtype ab,
                                  float beta, void *C, int64_t ldc, enum glia_dtype ct, enum glia__gemm_epilogue ep,
                                  void *vec);

/* glia__cuda_gemm_typed with an aux matrix for the _AUX epilogues and DGELU (NULL for the others). Such an epilogue
 * with ldc not a multiple of 8 is GLIA_EUNSUPPORTED (no context error), like one cuBLASLt has no algorithm for. */
glia_status glia__cuda_gemm_aux(struct glia__cuda *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                                const void *A, int64_t lda, const void *B, int64_t ldb, enum glia_dtype ab, float beta,
                                void *C, int64_t ldc, enum glia_dtype ct, enum glia__gemm_epilogue ep, void *vec,
                                void *aux);

#endif
