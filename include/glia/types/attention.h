/* glia/types/attention.h — the attributes of layer type attention (plugin attention), its shape check and the
 * counter of its dropout mask, written once for host and device code so that the CPU and CUDA kernels drop the
 * same probabilities. Not a kernel: the CPU one is in plugins/layers/attention, the CUDA one in cuda.so. */
#ifndef GLIA_TYPES_ATTENTION_H
#define GLIA_TYPES_ATTENTION_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <glia/types/dropout.h>

/* l->attrs of an attention layer: qkv (N, T, 3C) -> y (N, T, C), C = heads * D. */
struct glia_attention_attrs {
    int64_t heads;  /* key heads */
    bool causal;    /* key causal: key j > query i is masked out */
    float p;        /* key dropout: probability of zeroing an attention probability in training */
};

/* Whether a forward of qkv shape s fits heads: 3-D, its last dim 3C with C a multiple of heads. When not, the
 * reason goes to why (n bytes). */
static inline bool glia_attention_shape_ok(const struct glia_shape *s, int64_t heads, char *why, size_t n)
{
    char b[64];
    glia_shape_str(s, b, sizeof b);
    if (s->ndim != 3)
        snprintf(why, n, "attention takes the fused q, k, v projection (N, T, 3C), got %s", b);
    else if (s->dim[2] % 3 != 0 || s->dim[2] == 0)
        snprintf(why, n, "attention's input %s: the last dim %lld is not 3C (q, k, v side by side)", b,
                 (long long)s->dim[2]);
    else if ((s->dim[2] / 3) % heads != 0)
        snprintf(why, n, "attention's input %s: C = %lld is not a multiple of heads = %lld", b,
                 (long long)(s->dim[2] / 3), (long long)heads);
    else
        return true;
    return false;
}

/* Whether the dropout of a training forward with seed keeps the probability of query i, key j of head h of
 * sample n: the mask's counter is that element's row-major index in (N, heads, T, T), as SDPA's dropout_p drops
 * elements of its (N, heads, T, T) probabilities. */
GLIA_DROPOUT_FN bool glia_attention_keep(uint64_t seed, float p, int64_t nh, int64_t i, int64_t j, int64_t T)
{
    return glia_dropout_uniform(seed, (nh * T + i) * T + j) >= p;
}

#endif
