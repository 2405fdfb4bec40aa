/* plugins/layers/dropout/dropout_desc.h — what the CPU and CUDA impls of dropout share: keys,
 * settings, create, shape inference, and the counter-based mask itself (host and device code),
 * so that every device and memory format draws the same mask. Not the loops over elements: each
 * impl walks its own memory. Not a plugin. */
#ifndef GLIA_DROPOUT_DESC_H
#define GLIA_DROPOUT_DESC_H

#include <stdint.h>
#include <glia/glia.h>

#ifdef __CUDACC__
#define GLIA__DROPOUT_FN __host__ __device__ static inline
#else
#define GLIA__DROPOUT_FN static inline
#endif

#define GLIA__DROPOUT_DOC "inverted dropout (seeded, counter-based mask); identity in eval"

/* The seed a random kernel draws from: seed, or, when step_at is set (the forward was captured
 * into a CUDA graph: struct glia_fwd), glia_seed(key, *step_at) read on the device at each replay. */
struct glia__seed_at {
    uint64_t seed, key;
    const int64_t *step_at;
};

/* The state of one dropout layer (l->priv of both impls). */
struct glia__dropout {
    float p;
    struct glia__seed_at seed;  /* of the last training forward */
};

/* A forward's seed as kernels take it. */
static inline struct glia__seed_at glia__seed_of(const struct glia_fwd *a)
{
    struct glia__seed_at s = {a->seed, a->seed_key, a->step_at};
    return s;
}

extern const struct glia_key glia__dropout_keys[];

glia_status glia__dropout_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                 int n_in);
void glia__dropout_destroy(struct glia_layer *l);
/* out = in[0] */
glia_status glia__dropout_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                struct glia_shape *out);

/* The mask's two functions written once as macro bodies: compiled below for host and device,
 * and pasted as text (GLIA__STR) into the kernels that the pointwise JIT generates for dropout().
 * U64 and I64 name the 64-bit integer types. */
#define GLIA__DROPOUT_UNIFORM_BODY(U64)                                                          \
    U64 z = seed + (U64)(i + 1) * 0x9e3779b97f4a7c15ull;                                         \
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;                                                 \
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;                                                 \
    z ^= z >> 31;                                                                                \
    return (float)(z >> 40) * (1.0f / 16777216.0f); /* 2^-24: exact */
#define GLIA__DROPOUT_NCHW_BODY(I64)                                                             \
    I64 r = i / C, c = i % C, n = r / HW, hw = r % HW;                                           \
    return (n * C + c) * HW + hw;
#define GLIA__STR_(...) #__VA_ARGS__
#define GLIA__STR(...) GLIA__STR_(__VA_ARGS__)

/* Uniform [0,1) from (seed, i): splitmix64 finalizer of a Weyl sequence. Element j (its logical
 * NCHW row-major index) is kept when glia__dropout_uniform(seed, j) >= p. */
GLIA__DROPOUT_FN float glia__dropout_uniform(uint64_t seed, int64_t i) { GLIA__DROPOUT_UNIFORM_BODY(uint64_t) }

/* The logical NCHW index of the element at offset i of a channels_last (N, H, W, C) tensor. */
GLIA__DROPOUT_FN int64_t glia__dropout_nchw_index(int64_t i, int64_t C, int64_t HW) { GLIA__DROPOUT_NCHW_BODY(int64_t) }

#endif
