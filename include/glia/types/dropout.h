/* glia/types/dropout.h — the attributes of layer type dropout (plugin dropout) and its counter-based mask,
 * written once for host and device code so that every kernel and memory format draws the same mask (the CPU
 * kernel, the CUDA kernel, and the pointwise language's dropout()). Not a kernel. */
#ifndef GLIA_TYPES_DROPOUT_H
#define GLIA_TYPES_DROPOUT_H

#include <stdint.h>
#include <glia/layer.h>

#ifdef __CUDACC__
#define GLIA_DROPOUT_FN __host__ __device__ static inline
#else
#define GLIA_DROPOUT_FN static inline
#endif

/* l->attrs of a dropout layer. */
struct glia_dropout_attrs {
    float p;         /* probability of zeroing an element (key p), as the mask compares it */
    double p_key;    /* the key as written, for the type's expression (a float does not say which decimal) */
};

/* The seed a random kernel draws from: seed, or, when step_at is set (the forward was captured into a CUDA
 * graph: struct glia_fwd), glia_seed(key, *step_at) read on the device at each replay. A kernel keeps the one
 * of its last training forward in its state, for backward. */
struct glia_seed_at {
    uint64_t seed, key;
    const int64_t *step_at;
};

/* A forward's seed as kernels take it. */
static inline struct glia_seed_at glia_seed_of(const struct glia_fwd *a)
{
    struct glia_seed_at s = {a->seed, a->seed_key, a->step_at};
    return s;
}

/* The mask's two functions written once as macro bodies: compiled below for host and device, and pasted as
 * text (GLIA_STR) into the kernels that the CUDA pointwise JIT generates for dropout(). U64 and I64 name the
 * 64-bit integer types. */
#define GLIA_DROPOUT_UNIFORM_BODY(U64)                                                           \
    U64 z = seed + (U64)(i + 1) * 0x9e3779b97f4a7c15ull;                                         \
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;                                                 \
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;                                                 \
    z ^= z >> 31;                                                                                \
    return (float)(z >> 40) * (1.0f / 16777216.0f); /* 2^-24: exact */
#define GLIA_DROPOUT_NCHW_BODY(I64)                                                              \
    I64 r = i / C, c = i % C, n = r / HW, hw = r % HW;                                           \
    return (n * C + c) * HW + hw;
#define GLIA_STR_(...) #__VA_ARGS__
#define GLIA_STR(...) GLIA_STR_(__VA_ARGS__)

/* Uniform [0,1) from (seed, i): splitmix64 finalizer of a Weyl sequence. Element j (its logical NCHW
 * row-major index) is kept when glia_dropout_uniform(seed, j) >= p. */
GLIA_DROPOUT_FN float glia_dropout_uniform(uint64_t seed, int64_t i) { GLIA_DROPOUT_UNIFORM_BODY(uint64_t) }

/* The logical NCHW index of the element at offset i of a channels_last (N, H, W, C) tensor. */
GLIA_DROPOUT_FN int64_t glia_dropout_nchw_index(int64_t i, int64_t C, int64_t HW) { GLIA_DROPOUT_NCHW_BODY(int64_t) }

#endif
