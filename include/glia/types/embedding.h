/* glia/types/embedding.h — the attributes of layer type embedding (plugin embedding), which every kernel of it
 * reads, and the token check its kernels make first. Not a kernel: the CPU one is in plugins/layers/embedding,
 * the CUDA one in cuda.so. */
#ifndef GLIA_TYPES_EMBEDDING_H
#define GLIA_TYPES_EMBEDDING_H

#include <stdbool.h>
#include <stdint.h>
#include <glia/glia.h>

/* l->attrs of an embedding layer: token ids (N, L) -> rows of weight (vocab, dim) as (N, dim, 1, L), or as
 * (N, L, dim) when sequence is set. */
struct glia_embedding_attrs {
    int64_t vocab, dim;  /* keys vocab (token ids are in [0, vocab)) and dim (features per token) */
    int64_t pad;         /* padding_idx: the token whose row starts at zero and gets no gradient; -1: none */
    int w;               /* index of the parameter "weight" (vocab, dim) */
    bool sequence;       /* key output: false = conv, (N, dim, 1, L); true = sequence, (N, L, dim) */
};

/* GLIA_EINVAL naming the layer unless t holds i32 token ids (N, L): what forward and backward check first
 * (a layer run alone on a device is fed f32 inputs). */
static inline glia_status glia_embedding_check_tokens(const struct glia_layer *l, const struct glia_tensor *t)
{
    if (t->dtype == GLIA_I32 && t->shape.ndim == 2) return GLIA_OK;
    char buf[64];
    return glia_error(l->ctx, GLIA_EINVAL, "[%s] embedding takes i32 token ids (N, L), got %s %s", l->name,
                      glia_dtype_name(t->dtype), glia_shape_str(&t->shape, buf, sizeof buf));
}

#endif
