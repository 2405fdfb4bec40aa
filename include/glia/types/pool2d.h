/* glia/types/pool2d.h — the attributes, keys, create, shapes and window arithmetic that layer types maxpool2d and
 * avgpool2d and their kernels share. Not the pooling itself; global_avgpool reads no keys and has no attributes. */
#ifndef GLIA_TYPES_POOL2D_H
#define GLIA_TYPES_POOL2D_H

#include <stdint.h>
#include <glia/config.h>
#include <glia/layer.h>

/* l->attrs of a maxpool2d or avgpool2d layer. */
struct glia_pool2d_attrs {
    int64_t k, s, p;  /* window size, stride, padding on each side (keys size, stride (0: size), padding;
                         p <= k/2: no window is all padding) */
};

/* The keys of both types' schemas (glia/config.h), then GLIA_KEY_END: the window; padding_doc says what the border
 * holds. */
#define GLIA_POOL2D_KEYS(padding_doc)                                                                             \
    GLIA_KEY("size", GLIA_KEY_INT, "2", "window height and width", .min = 1, .max = 1 << 20),                    \
    GLIA_KEY("stride", GLIA_KEY_INT, "0", "window step (0: the window size)", .min = 0, .max = 1 << 20),         \
    GLIA_KEY("padding", GLIA_KEY_INT, "0", padding_doc, .min = 0, .max = 1 << 20)

/* The output shape of the window a over input shape in: (N, C, OH, OW) with OH = (H + 2p - k)/s + 1 (floor), OW
 * alike; GLIA_ESHAPE unless in is 4-D and the window fits the padded input. */
static inline glia_status glia_pool2d_shape(const struct glia_pool2d_attrs *a, const struct glia_shape *in,
                                            struct glia_shape *out)
{
    if (in->ndim != 4) return GLIA_ESHAPE;
    int64_t hp = in->dim[2] + 2 * a->p, wp = in->dim[3] + 2 * a->p;
    if (hp < a->k || wp < a->k) return GLIA_ESHAPE;
    int64_t dim[4] = {in->dim[0], in->dim[1], (hp - a->k) / a->s + 1, (wp - a->k) / a->s + 1};
    *out = glia_shape_make(4, dim);
    return GLIA_OK;
}

/* The create of both types: checks that in[0] is (N, C, H, W), that padding <= size/2 and that the window fits the
 * padded input (messages name l's type), and reads the keys size, stride and padding of cfg into l->attrs. */
static inline glia_status glia_pool2d_create(struct glia_layer *l, const struct glia_section *cfg,
                                             const struct glia_shape *in, int n_in)
{
    (void)n_in;
    struct glia_pool2d_attrs *a = (struct glia_pool2d_attrs *)l->attrs;
    int64_t k = glia_section_int(cfg, "size"), s = glia_section_int(cfg, "stride"), p = glia_section_int(cfg, "padding");
    char b[64];
    if (in[0].ndim != 4)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE, "%s expects (N, C, H, W) input, got %s", l->type->name,
                                  glia_shape_str(&in[0], b, sizeof b));
    if (p > k / 2)
        return glia_section_error(cfg, "padding", GLIA_ECONFIG, "%lld is more than half the window size %lld",
                                  (long long)p, (long long)k);
    if (in[0].dim[2] + 2 * p < k || in[0].dim[3] + 2 * p < k)
        return glia_section_error(cfg, "size", GLIA_ESHAPE, "window %lldx%lld is larger than the padded input %lldx%lld",
                                  (long long)k, (long long)k, (long long)(in[0].dim[2] + 2 * p),
                                  (long long)(in[0].dim[3] + 2 * p));
    a->k = k;
    a->s = s ? s : k;
    a->p = p;
    return GLIA_OK;
}

/* The infer_shape of both types. */
static inline glia_status glia_pool2d_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                            struct glia_shape *out)
{
    (void)n_in;
    return glia_pool2d_shape((const struct glia_pool2d_attrs *)l->attrs, &in[0], out);
}

/* The flops of both types: one compare or add per window element. */
static inline uint64_t glia_pool2d_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    (void)n_in;
    const struct glia_pool2d_attrs *a = (const struct glia_pool2d_attrs *)l->attrs;
    struct glia_shape out;
    if (glia_pool2d_shape(a, &in[0], &out)) return 0;
    return (uint64_t)(glia_shape_numel(&out) * a->k * a->k);
}

/* The slots both types share, for the initializer of their struct glia_layer_type after name, doc and keys: one
 * input, these attributes, and the create, infer_shape and flops above. */
#define GLIA_POOL2D_TYPE_SLOTS                                                                                    \
    .min_inputs = 1, .max_inputs = 1, .attrs_size = sizeof(struct glia_pool2d_attrs), .create = glia_pool2d_create, \
    .infer_shape = glia_pool2d_infer, .flops = glia_pool2d_flops

/* The input rows [*i0, *i1) of output row o's window, clipped to the n input rows (never empty: p <= k/2); the
 * same for columns. */
static inline void glia_pool2d_window(const struct glia_pool2d_attrs *a, int64_t o, int64_t n, int64_t *i0,
                                      int64_t *i1)
{
    int64_t b = o * a->s - a->p;
    *i1 = b + a->k < n ? b + a->k : n;
    *i0 = b < 0 ? 0 : b;
}

/* The output rows [*o0, *o1) of n_out whose windows hold input row i (o*s - p <= i < o*s - p + k); the same for
 * columns. */
static inline void glia_pool2d_span(const struct glia_pool2d_attrs *a, int64_t i, int64_t n_out, int64_t *o0,
                                    int64_t *o1)
{
    *o0 = i + a->p - a->k < 0 ? 0 : (i + a->p - a->k) / a->s + 1;
    *o1 = (i + a->p) / a->s + 1;
    if (*o1 > n_out) *o1 = n_out;
}

#endif
