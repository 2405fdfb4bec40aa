/* plugins/layers/seq_pool/seq_pool_desc.h — what the CPU and CUDA impls of seq_pool share: keys, the mode and
 * pad id, create's checks, infer_shape, flops and the token dtype check. Not the pooling itself (each impl
 * computes the masked mean or max); not a plugin. */
#ifndef GLIA_SEQ_POOL_DESC_H
#define GLIA_SEQ_POOL_DESC_H

#include <stdbool.h>
#include <glia/glia.h>

#define GLIA__SEQ_POOL_DOC "masked mean or max over the positions of valid tokens: features (N, C, 1, L) + token ids (N, L) -> (N, C)"

extern const struct glia_key glia__seq_pool_keys[];

/* The first member of every seq_pool impl's priv (the shared slots read l->priv as one). */
struct glia__seq_pool_desc {
    bool max;        /* mode = max (else mean) */
    int64_t pad_id;  /* positions holding this token are left out */
};

/* Checks the two inputs, features (N, C, 1, L) and tokens (N, L) of the same N and L (messages name what
 * differs), and reads the keys of cfg into *d. */
glia_status glia__seq_pool_describe(const struct glia_section *cfg, const struct glia_shape *in, int n_in,
                                    struct glia__seq_pool_desc *d);
/* The infer_shape slot: (N, C, 1, L), (N, L) -> (N, C). */
glia_status glia__seq_pool_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                 struct glia_shape *out);
/* The flops slot: one add or compare per feature element. */
uint64_t glia__seq_pool_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in);
/* GLIA_EINVAL naming the layer unless the second input t holds i32 token ids (N, L) (what forward checks first). */
glia_status glia__seq_pool_check_tokens(const struct glia_layer *l, const struct glia_tensor *t);

#endif
