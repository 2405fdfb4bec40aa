/* backends/cuda/attention_cudnn.h — causal scaled-dot-product attention fused by cuDNN (its flash engines), from C
 * through the graph API: the forward and backward operation graphs of one shape made into plans, and their runs on
 * glia's fused qkv (N, T, 3C) layout in bf16 or fp16. Not the layer logic (attention.c decides when to use it and
 * falls back to the unfused kernels) and not dropout (the layer sends dropout > 0 to the unfused kernels). */
#ifndef GLIA_CUDA_ATTENTION_CUDNN_H
#define GLIA_CUDA_ATTENTION_CUDNN_H

#include <stdbool.h>
#include <stdint.h>
#include <cudnn.h>

struct glia__cg;

/* One shape's plans: B sequences, H heads of D features, T positions, the activations' type. */
struct glia__sdpa {
    int64_t B, H, T, D;
    cudnnDataType_t type;              /* CUDNN_DATA_BFLOAT16 or CUDNN_DATA_HALF */
    uint32_t refuse;                   /* engines with these numerical notes make no plan (GLIA__CG_NOTE: the
                                          nondeterministic ones for [runtime] deterministic) */
    cudnnBackendDescriptor_t fwd[2];   /* [train]: the forward (training keeps the softmax statistics); NULL: none */
    cudnnBackendDescriptor_t bwd;
    int64_t fwd_ws[2], bwd_ws;         /* workspace bytes each runs with */
    struct glia__cg *graph[3];         /* the descriptors each plan was made from, kept while it lives ([2]: bwd) */
};

/* Builds the forward plan (train: writing the statistics (B, H, T) f32 that backward reads) or the backward plan of
 * shape s. On failure *why says what cuDNN refused. */
cudnnStatus_t glia__sdpa_build_fwd(cudnnHandle_t h, struct glia__sdpa *s, bool train, char *why, size_t n);
cudnnStatus_t glia__sdpa_build_bwd(cudnnHandle_t h, struct glia__sdpa *s, char *why, size_t n);
void glia__sdpa_free(struct glia__sdpa *s);

/* o(B, T, C) = softmax(q kᵀ · scale + causal mask) v per head of qkv(B, T, 3C), C = H·D; training also writes
 * stats(B, H, T), each row's logsumexp. rng: four i64 on the device, 16-byte aligned: the unused dropout's seed
 * (rng[0]) and offset (rng[2]), each as aligned as the graph's tensors say. ws: the plan's workspace. */
cudnnStatus_t glia__sdpa_forward(cudnnHandle_t h, const struct glia__sdpa *s, bool train, const void *qkv, void *o,
                                 float *stats, int64_t *rng, void *ws, float scale);
/* dqkv(B, T, 3C) = the gradient of that forward from qkv, o, dout(B, T, C) and stats; scratch: dq_acc (B, T, C) f32,
 * zeroed on entry, and sum (B, H, T) f32. */
cudnnStatus_t glia__sdpa_backward(cudnnHandle_t h, const struct glia__sdpa *s, const void *qkv, const void *o,
                                  const void *dout, const float *stats, void *dqkv, float *dq_acc, float *sum,
                                  int64_t *rng, void *ws, float scale);

#endif
