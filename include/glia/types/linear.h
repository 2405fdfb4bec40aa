/* glia/types/linear.h — the attributes of layer type linear (plugin linear), which every kernel of it reads.
 * Not a kernel: the CPU kernel is in plugins/layers/linear, the CUDA one in cuda.so. */
#ifndef GLIA_TYPES_LINEAR_H
#define GLIA_TYPES_LINEAR_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <glia/tensor.h>

/* The activation a linear layer applies to its result (key activation; ABI 2.3). */
enum glia_linear_act {
    GLIA_LINEAR_ACT_NONE = 0,
    GLIA_LINEAR_ACT_GELU,      /* 0.5 h (1 + erf(h / sqrt(2))), as type gelu */
    GLIA_LINEAR_ACT_GELU_TANH  /* 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3))), as gelu with approximate = tanh */
};

/* The enum glia_linear_act of an `activation` value ("none", "gelu", "gelu_tanh"); GLIA_LINEAR_ACT_NONE for others. */
static inline int glia_linear_act_of(const char *name)
{
    return !strcmp(name, "gelu") ? GLIA_LINEAR_ACT_GELU : !strcmp(name, "gelu_tanh") ? GLIA_LINEAR_ACT_GELU_TANH
                                                                                       : GLIA_LINEAR_ACT_NONE;
}

struct glia_layer;

/* The din_act kernel slot (glia/layer.h) of glia's linear kernels: backward applies the gradient of a producer's gelu or
 * gelu_tanh to the input gradient it writes. */
static inline bool glia_linear_din_act(const struct glia_layer *l, const char *act)
{
    (void)l;
    return glia_linear_act_of(act) != GLIA_LINEAR_ACT_NONE;
}

/* l->attrs of a linear layer: y(..., out) = act(x(..., in) W(out, in)^T + b(out)), one GEMM over the M rows of x.
 * With an activation, a training forward keeps the pre-activation h for backward in the memory the core plans
 * (glia_kernel.saved_size, glia_fwd.saved). */
struct glia_linear_attrs {
    int64_t in, out;  /* features in (the input's last dim), outputs (key outputs) */
    int w, b;         /* parameter indices of weight (out, in) and bias (out); b = -1 with bias = off */
    int act;          /* enum glia_linear_act (ABI 2.3) */
};

/* The activation act of h, and its derivative at h (dy/dh), in f32: the formulae of the CPU kernel and of the CUDA
 * kernels (backends/cuda/dense_kernels.cu), where the compiler may contract them into fused multiply-adds: the two
 * agree to float rounding, not bit for bit. */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline float glia_linear_act(int act, float h)
{
    if (act == GLIA_LINEAR_ACT_GELU) return 0.5f * h * (1.0f + erff(h * 0.70710678f));
    if (act == GLIA_LINEAR_ACT_GELU_TANH) return 0.5f * h * (1.0f + tanhf(0.79788456f * (h + 0.044715f * h * h * h)));
    return h;
}
#ifdef __CUDACC__
__host__ __device__
#endif
static inline float glia_linear_act_grad(int act, float h)
{
    if (act == GLIA_LINEAR_ACT_GELU) return 0.5f * (1.0f + erff(h * 0.70710678f)) + h * 0.39894228f * expf(-0.5f * h * h);
    if (act == GLIA_LINEAR_ACT_GELU_TANH) {
        float t = tanhf(0.79788456f * (h + 0.044715f * h * h * h));
        return 0.5f * (1.0f + t) + 0.5f * h * (1.0f - t * t) * 0.79788456f * (1.0f + 3.0f * 0.044715f * h * h);
    }
    return 1.0f;
}

/* M, the GEMM's rows: the product of every dim of the (..., in) shape s but the last. */
static inline int64_t glia_linear_rows(const struct glia_shape *s)
{
    int64_t m = 1;
    for (int i = 0; i < s->ndim - 1; i++) m *= s->dim[i];
    return m;
}

#endif
