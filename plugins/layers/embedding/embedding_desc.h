/* plugins/layers/embedding/embedding_desc.h — what the CPU and CUDA impls of embedding share: keys, the
 * layer's settings, create (checks, the "weight" parameter), infer_shape and the token dtype check.
 * Not the lookup or its gradient: each impl computes those in its own file. Not a plugin. */
#ifndef GLIA_EMBEDDING_DESC_H
#define GLIA_EMBEDDING_DESC_H

#include <stddef.h>
#include <glia/glia.h>

#define GLIA__EMBEDDING_DOC "token ids (N, L) i32 -> rows of a learned table as (N, dim, 1, L) (nn.Embedding, channels first)"

extern const struct glia_key glia__embedding_keys[];

/* l->priv of both impls. */
struct glia__embedding_desc {
    int64_t vocab, dim;
    int64_t pad;  /* padding_idx: the token whose row starts at zero and gets no gradient; -1: none */
    int w;        /* index of the parameter "weight" (vocab, dim) */
};

/* The create slot: checks that in[0] is the token batch (N, L), reads the keys of cfg (padding_idx -1 or
 * in [0, vocab)) into a new l->priv (a struct glia__embedding_desc: the impls keep no other state) and
 * declares "weight" (vocab, dim), N(0, 1) like PyTorch (its padding_idx row then zeroed by init_param). */
glia_status glia__embedding_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                   int n_in);
/* The destroy slot: free(l->priv). */
void glia__embedding_destroy(struct glia_layer *l);

/* The infer_shape slot: (N, L) -> (N, dim, 1, L); l->priv starts with a struct glia__embedding_desc. */
glia_status glia__embedding_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                  struct glia_shape *out);

/* The init_param slot: the drawn weight's padding_idx row set to zeros, as nn.Embedding's
 * reset_parameters does (the lookup then reads those zeros, or whatever a checkpoint put there). */
void glia__embedding_init_param(const struct glia_layer *l, int index, float *values);

/* GLIA_EINVAL naming the layer unless t holds i32 token ids (what forward and backward check first). */
glia_status glia__embedding_check_tokens(const struct glia_layer *l, const struct glia_tensor *t);

#endif
