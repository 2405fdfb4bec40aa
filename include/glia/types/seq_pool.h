/* glia/types/seq_pool.h — the attributes of layer type seq_pool (plugin seq_pool), which every kernel of it
 * reads, and the checks its kernels make first. Not a kernel: the CPU one is in plugins/layers/seq_pool, the
 * CUDA one in cuda.so; each keeps the max's positions of its last training forward in its own state. */
#ifndef GLIA_TYPES_SEQ_POOL_H
#define GLIA_TYPES_SEQ_POOL_H

#include <stdbool.h>
#include <stdint.h>
#include <glia/glia.h>

/* l->attrs of a seq_pool layer: features (N, C, 1, L) + token ids (N, L) -> (N, C). */
struct glia_seq_pool_attrs {
    bool max;        /* mode = max (else mean) */
    int64_t pad_id;  /* positions holding this token are left out */
};

/* GLIA_EINVAL naming the layer unless the second input t holds i32 token ids (N, L): what forward and backward
 * check first (a layer run alone on a device is fed f32 inputs). */
static inline glia_status glia_seq_pool_check_tokens(const struct glia_layer *l, const struct glia_tensor *t)
{
    if (t->dtype == GLIA_I32 && t->shape.ndim == 2) return GLIA_OK;
    char buf[64];
    return glia_error(l->ctx, GLIA_EINVAL, "[%s] seq_pool takes i32 token ids (N, L) as second input, got %s %s",
                      l->name, glia_dtype_name(t->dtype), glia_shape_str(&t->shape, buf, sizeof buf));
}

/* What a backward of (N, C) outputs checks: GLIA_EINVAL naming the layer when in max mode the kernel's last
 * training forward did not keep the positions of exactly n_kept == N * C maxima (an eval forward keeps none). */
static inline glia_status glia_seq_pool_check_kept(const struct glia_layer *l, int64_t n_kept, int64_t N, int64_t C)
{
    const struct glia_seq_pool_attrs *p = (const struct glia_seq_pool_attrs *)l->attrs;
    if (!p->max || n_kept == N * C) return GLIA_OK;
    return glia_error(l->ctx, GLIA_EINVAL, "[%s] seq_pool (max) backward needs a training forward just before it",
                      l->name);
}

#endif
