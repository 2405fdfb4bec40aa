/* plugins/layers/conv2d — layer type conv2d, 2-D convolution (cross-correlation, like PyTorch's Conv2d): its keys,
 * checks, parameters, shapes and flops; and its CPU kernel, oneDNN primitives for forward, backward-data and
 * backward-weights (+bias), with square or rectangular kernels (kh, kw), zero padding (ph on top and bottom, pw left
 * and right), stride, dilation and groups. Input (N, C, H, W), output (N, filters, OH, OW).
 * Not a transposed convolution, and no padding that differs between the two sides of a dimension; not the CUDA
 * kernel (cuDNN, in cuda.so, reading the same struct glia_conv2d_attrs).
 *
 * The user tensors stay plain (nchw or, for channels_last tensors, nhwc; oihw / goihw; x). With
 * nchw tensors the primitives are created with format "any" so that oneDNN picks its direct JIT
 * kernels and their blocked layouts (nChw16c, OIhw16i16o, ...); with nhwc tensors its nhwc kernels
 * read and write them directly. Reorders move data between the two only where the layouts differ,
 * through intermediate buffers made once per input shape. The primitives and buffers of the
 * last N_SHAPES input shapes stay cached (the least recently used replaced), so that inputs whose
 * size changes from batch to batch (variable-length sequences) do not rebuild them at every
 * call. A training forward keeps its reordered input for the backward-weights of that shape;
 * weights are reordered at every call (they change every step). Bias stays plain. */
#include <glia/glia.h>
#include <glia/types/conv2d.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- the type ---- */

static const struct glia_key conv2d_keys[] = {
    GLIA_KEY("filters", GLIA_KEY_INT, NULL, "output channels", .required = true, .min = 1, .max = 1 << 30),
    GLIA_KEY("size", GLIA_KEY_INT, "3", "kernel height and width", .min = 1, .max = 1 << 20),
    GLIA_KEY("size_h", GLIA_KEY_INT, NULL, "kernel height (default: size)", .min = 1, .max = 1 << 20),
    GLIA_KEY("size_w", GLIA_KEY_INT, NULL, "kernel width (default: size)", .min = 1, .max = 1 << 20),
    GLIA_KEY("stride", GLIA_KEY_INT, "1", "step between kernel positions", .min = 1, .max = 1 << 20),
    GLIA_KEY("padding", GLIA_KEY_INT, "0", "zeros added on every side of H and W", .min = 0, .max = 1 << 20),
    GLIA_KEY("padding_h", GLIA_KEY_INT, NULL, "zeros added above and below (default: padding)", .min = 0,
             .max = 1 << 20),
    GLIA_KEY("padding_w", GLIA_KEY_INT, NULL, "zeros added left and right (default: padding)", .min = 0,
             .max = 1 << 20),
    GLIA_KEY("dilation", GLIA_KEY_INT, "1", "spacing between kernel taps (1: dense)", .min = 1, .max = 1 << 20),
    GLIA_KEY("groups", GLIA_KEY_INT, "1", "channel groups; must divide input channels and filters", .min = 1,
             .max = 1 << 30),
    GLIA_KEY("bias", GLIA_KEY_BOOL, "on", "add a learned bias per filter"),
    GLIA_KEY("activation", GLIA_KEY_ENUM, "none",
             "relu: y = relu(conv2d(x)) in the same pass over the output (what [graph] fuse_pointwise makes of a "
             "conv2d read only by a relu) | none",
             .choices = "none|relu"),
    GLIA_KEY_END};

/* The int key `specific` when written, else `general` (its default applied). */
static int64_t int_or(const struct glia_section *cfg, const char *specific, const char *general)
{
    return glia_section_int(cfg, glia_section_has(cfg, specific) ? specific : general);
}

/* "a" when a == b, else "axb" (height x width), in buf (48 bytes). */
static const char *pair(char *buf, int64_t a, int64_t b)
{
    if (a == b) snprintf(buf, 48, "%lld", (long long)a);
    else snprintf(buf, 48, "%lldx%lld", (long long)a, (long long)b);
    return buf;
}

/* Reads the keys for input in[0] (N, C, H, W) into l->attrs and checks them (4-D input, groups dividing channels
 * and filters, a non-empty output); size_h / size_w and padding_h / padding_w default to size and padding (when
 * both are written, the specific one wins). Declares "weight" (F, C/groups, kh, kw) and, with bias on, "bias" (F),
 * in that order, both U(-1/sqrt(fan_in), 1/sqrt(fan_in)) like PyTorch. */
static glia_status conv2d_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                 int n_in)
{
    struct glia_conv2d_attrs *a = l->attrs;
    char buf[64];
    if (in[0].ndim != 4)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE, "conv2d expects (N, C, H, W) input, got %s",
                                  glia_shape_str(&in[0], buf, sizeof buf));
    *a = (struct glia_conv2d_attrs){
        .C = in[0].dim[1],
        .F = glia_section_int(cfg, "filters"),
        .kh = int_or(cfg, "size_h", "size"),
        .kw = int_or(cfg, "size_w", "size"),
        .ph = int_or(cfg, "padding_h", "padding"),
        .pw = int_or(cfg, "padding_w", "padding"),
        .s = glia_section_int(cfg, "stride"),
        .d = glia_section_int(cfg, "dilation"),
        .g = glia_section_int(cfg, "groups"),
        .w = -1,
        .b = -1,
        .act = strcmp(glia_section_str(cfg, "activation"), "relu") ? GLIA_CONV2D_ACT_NONE : GLIA_CONV2D_ACT_RELU,
    };
    if (a->C % a->g)
        return glia_section_error(cfg, "groups", GLIA_ECONFIG, "%lld groups do not divide the %lld input channels",
                                  (long long)a->g, (long long)a->C);
    if (a->F % a->g)
        return glia_section_error(cfg, "groups", GLIA_ECONFIG, "%lld groups do not divide the %lld filters",
                                  (long long)a->g, (long long)a->F);
    int64_t OH = glia_conv2d_out_h(a, in[0].dim[2]), OW = glia_conv2d_out_w(a, in[0].dim[3]);
    if (OH < 1 || OW < 1) {
        char size[48], pad[48];
        return glia_section_error(cfg, NULL, GLIA_ESHAPE,
                                  "conv2d output would be empty: input %lldx%lld with size %s, dilation %lld, "
                                  "padding %s gives %lldx%lld",
                                  (long long)in[0].dim[2], (long long)in[0].dim[3], pair(size, a->kh, a->kw),
                                  (long long)a->d, pair(pad, a->ph, a->pw), (long long)OH, (long long)OW);
    }
    int64_t fan_in = a->C / a->g * a->kh * a->kw;
    struct glia_param_init init = {GLIA_INIT_UNIFORM, 1.0 / sqrt((double)fan_in)};
    struct glia_shape ws = glia_shape_make(4, (int64_t[]){a->F, a->C / a->g, a->kh, a->kw});
    struct glia_shape bs = glia_shape_make(1, (int64_t[]){a->F});
    glia_status st = glia_layer_add_param(l, "weight", &ws, init, &a->w);
    if (!st && glia_section_bool(cfg, "bias")) st = glia_layer_add_param(l, "bias", &bs, init, &a->b);
    return st;
}

static glia_status conv2d_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                struct glia_shape *out)
{
    const struct glia_conv2d_attrs *a = l->attrs;
    if (in[0].ndim != 4 || in[0].dim[1] != a->C) return GLIA_ESHAPE;
    int64_t OH = glia_conv2d_out_h(a, in[0].dim[2]), OW = glia_conv2d_out_w(a, in[0].dim[3]);
    if (OH < 1 || OW < 1) return GLIA_ESHAPE;
    *out = glia_shape_make(4, (int64_t[]){in[0].dim[0], a->F, OH, OW});
    return GLIA_OK;
}

static uint64_t conv2d_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    const struct glia_conv2d_attrs *a = l->attrs;
    uint64_t OH = (uint64_t)glia_conv2d_out_h(a, in[0].dim[2]), OW = (uint64_t)glia_conv2d_out_w(a, in[0].dim[3]);
    uint64_t out = (uint64_t)in[0].dim[0] * (uint64_t)a->F * OH * OW;  /* with activation = relu one more each */
    return 2ull * out * (uint64_t)(a->C / a->g) * (uint64_t)(a->kh * a->kw) + (a->act ? out : 0);
}

/* ---- the CPU kernel (oneDNN) ---- */

/* One tensor argument of a primitive, in the layout the primitive chose. mem == NULL: that is
 * the user's plain layout, and the primitive reads or writes the user tensor itself. */
struct slot {
    dnnl_memory_desc_t md;
    dnnl_memory_t mem;      /* a buffer in layout md; owned unless !own (then another slot's) */
    bool own;
    dnnl_primitive_t reo;   /* input: user -> mem; output: mem -> user (=) */
    dnnl_primitive_t add;   /* output: mem -> user (+=); NULL: oneDNN has none, go through scratch */
    bool serial;            /* small (weights): reorder on one thread */
};

/* Primitives, intermediate buffers and memory objects for one input shape. The user memory
 * objects (x ... dy) have no buffer of their own: each execution points them at that call's
 * tensors. */
struct conv_cache {
    bool valid;
    bool nhwc;               /* the user tensors are channels_last */
    int64_t N, H, W, OH, OW;
    uint64_t last_use;       /* the layer's use count when this entry was last used */
    dnnl_memory_desc_t src_md, wei_md, bias_md, dst_md;  /* the user layouts */
    dnnl_primitive_desc_t fwd_pd, bwd_d_pd, bwd_w_pd;
    dnnl_primitive_t fwd, bwd_d, bwd_w;
    dnnl_memory_t x, w, b, y, dx, dw, db, dy;
    struct slot f_src, f_wei, f_dst;    /* forward */
    struct slot d_ddst, d_wei, d_dsrc;  /* backward data */
    struct slot w_src, w_ddst, w_dwei;  /* backward weights */
    const float *kept;       /* f_src.mem holds this input, reordered by the last training forward of
                                this shape, for the backward that follows it; NULL: nothing kept */
    float *dx_scratch;       /* N*C*H*W: input gradient to add when accumulating */
    float *dy_act;           /* N*F*OH*OW, activation = relu: dy where y > 0, what the convolution's backward reads */
};

/* Input shapes whose primitives a layer keeps. */
#define N_SHAPES 8

/* l->state of the CPU kernel. */
struct conv2d_cpu {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_attr_t attr;     /* user scratchpad */
    dnnl_primitive_attr_t attr_fwd; /* user scratchpad, the eltwise post-op of activation = relu: the forward */
    dnnl_primitive_attr_t attr_add; /* user scratchpad, sum post-op: reorders that accumulate */
    float *dw_scratch, *db_scratch; /* parameter gradients to add when already set */
    dnnl_memory_t scratchpad;       /* shared by all the primitives of all shapes (user scratchpad mode) */
    size_t scratchpad_size;
    uint64_t uses;                  /* calls so far: the clock of the least-recently-used choice */
    struct conv_cache c[N_SHAPES];
};

static glia_status dnnl_fail(struct glia_layer *l, const char *what, dnnl_status_t s)
{
    return glia_error(l->ctx, GLIA_EINTERNAL, "[%s] conv2d: oneDNN %.*s failed: %s", l->name,
                      (int)strcspn(what, "("), what, dnnl_status2str(s));
}

#define DNNL_TRY(call)                                        \
    do {                                                      \
        dnnl_status_t s_ = (call);                            \
        if (s_ != dnnl_success) {                             \
            st = dnnl_fail(l, #call, s_);                     \
            goto fail;                                        \
        }                                                     \
    } while (0)

static void slot_free(struct slot *s)
{
    if (s->reo) dnnl_primitive_destroy(s->reo);
    if (s->add) dnnl_primitive_destroy(s->add);
    if (s->mem && s->own) dnnl_memory_destroy(s->mem);
    memset(s, 0, sizeof *s);
}

static void cache_free(struct conv_cache *c)
{
    dnnl_primitive_t prims[] = {c->fwd, c->bwd_d, c->bwd_w};
    dnnl_primitive_desc_t pds[] = {c->fwd_pd, c->bwd_d_pd, c->bwd_w_pd};
    dnnl_memory_t mems[] = {c->x, c->w, c->b, c->y, c->dx, c->dw, c->db, c->dy};
    struct slot *slots[] = {&c->f_src, &c->f_wei, &c->f_dst, &c->d_ddst, &c->d_wei,
                            &c->d_dsrc, &c->w_src, &c->w_ddst, &c->w_dwei};
    for (size_t i = 0; i < sizeof prims / sizeof prims[0]; i++)
        if (prims[i]) dnnl_primitive_destroy(prims[i]);
    for (size_t i = 0; i < sizeof pds / sizeof pds[0]; i++)
        if (pds[i]) dnnl_primitive_desc_destroy(pds[i]);
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) slot_free(slots[i]);
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
    free(c->dx_scratch);
    free(c->dy_act);
    memset(c, 0, sizeof *c);
}

static void log_impl(struct glia_layer *l, const char *what, const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
        glia_log(l->ctx, GLIA_LOG_DEBUG, "[%s] conv2d %s: oneDNN %s", l->name, what, impl);
}

/* Grow the shared scratchpad to what pd needs. (Primitives get it at execution, so the other
 * shapes' primitives take the bigger one from then on.) */
static dnnl_status_t fit_scratchpad(struct conv2d_cpu *p, const_dnnl_primitive_desc_t pd)
{
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t need = md ? dnnl_memory_desc_get_size(md) : 0;
    if (need <= p->scratchpad_size) return dnnl_success;
    dnnl_memory_desc_t sd;
    dnnl_status_t s = dnnl_memory_desc_init_by_tag(&sd, 1, (dnnl_dims_t){(dnnl_dim_t)need}, dnnl_u8, dnnl_x);
    dnnl_memory_t m = NULL;
    if (s == dnnl_success) s = dnnl_memory_create(&m, &sd, p->engine, DNNL_MEMORY_ALLOCATE);
    if (s != dnnl_success) return s;
    if (p->scratchpad) dnnl_memory_destroy(p->scratchpad);
    p->scratchpad = m;
    p->scratchpad_size = need;
    return dnnl_success;
}

/* Primitive (and the scratchpad it needs) from a descriptor: the convolutions... */
static dnnl_status_t make_prim(struct conv2d_cpu *p, dnnl_primitive_t *prim, const_dnnl_primitive_desc_t pd)
{
    dnnl_status_t s = fit_scratchpad(p, pd);
    return s == dnnl_success ? dnnl_primitive_create(prim, pd) : s;
}

/* A reorder of at most this many bytes runs on one thread: waking the OpenMP team costs more
 * than copying that much (on a loaded machine, milliseconds against microseconds). */
#define SERIAL_REORDER_BYTES (256 << 10)

/* The calling thread's OpenMP team size while a serial reorder is made or run: oneDNN sizes a
 * reorder's parallel loops from omp_get_max_threads(), some when made, some when run. */
static int threads_begin(bool serial)
{
#ifdef _OPENMP
    int n = omp_get_max_threads();
    if (serial && n > 1) omp_set_num_threads(1);
    return n;
#else
    (void)serial;
    return 1;
#endif
}

static void threads_end(bool serial, int n)
{
#ifdef _OPENMP
    if (serial && n > 1) omp_set_num_threads(n);
#else
    (void)serial, (void)n;
#endif
}

/* ... and the reorders. */
static dnnl_status_t make_reorder(struct conv2d_cpu *p, dnnl_primitive_t *prim, const dnnl_memory_desc_t *from,
                                  const dnnl_memory_desc_t *to, const_dnnl_primitive_attr_t attr, bool serial)
{
    dnnl_primitive_desc_t pd;
    int nthr = threads_begin(serial);
    dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, from, p->engine, to, p->engine, attr);
    if (s == dnnl_success) {
        s = make_prim(p, prim, pd);
        dnnl_primitive_desc_destroy(pd);
    }
    threads_end(serial, nthr);
    return s;
}

/* Set up slot s for the argument of pd that query `what` names, whose user layout is user:
 * nothing when pd uses that layout; otherwise a buffer (shared with a peer slot of the same
 * layout whose contents never need to live at the same time) and the reorders to it (input)
 * or from it (output). */
static glia_status slot_init(struct glia_layer *l, struct slot *s, const_dnnl_primitive_desc_t pd, dnnl_query_t what,
                             const dnnl_memory_desc_t *user, bool input, struct slot *peer1, struct slot *peer2)
{
    struct conv2d_cpu *p = l->state;
    glia_status st = GLIA_OK;
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, what, 0);
    if (!md) return glia_error(l->ctx, GLIA_EINTERNAL, "[%s] conv2d: oneDNN has no memory descriptor", l->name);
    s->md = *md;
    if (dnnl_memory_desc_equal(md, user)) return GLIA_OK;
    struct slot *peers[2] = {peer1, peer2};
    for (int i = 0; i < 2 && !s->mem; i++)
        if (peers[i] && peers[i]->mem && dnnl_memory_desc_equal(&peers[i]->md, md)) s->mem = peers[i]->mem;
    if (!s->mem) {
        DNNL_TRY(dnnl_memory_create(&s->mem, md, p->engine, DNNL_MEMORY_ALLOCATE));
        s->own = true;
    }
    s->serial = dnnl_memory_desc_get_size(user) <= SERIAL_REORDER_BYTES;
    if (input) {
        DNNL_TRY(make_reorder(p, &s->reo, user, md, p->attr, s->serial));
    } else {
        DNNL_TRY(make_reorder(p, &s->reo, md, user, p->attr, s->serial));
        dnnl_status_t r = make_reorder(p, &s->add, md, user, p->attr_add, s->serial);
        if (r != dnnl_success && r != dnnl_unimplemented) DNNL_TRY(r);
        if (r != dnnl_success) s->add = NULL;  /* accumulate through scratch instead */
    }
    return GLIA_OK;
fail:
    return st;
}

/* Memory descriptor of dims with format "any" (the primitive chooses). */
static dnnl_status_t any_md(dnnl_memory_desc_t *md, const dnnl_memory_desc_t *like)
{
    return dnnl_memory_desc_init_by_tag(md, like->ndims, like->dims, dnnl_f32, dnnl_format_tag_any);
}

/* An activation's descriptor for the primitive: nhwc user tensors are used as they are (oneDNN
 * has kernels for them), nchw ones leave the choice to oneDNN. */
static dnnl_status_t act_md(dnnl_memory_desc_t *md, const dnnl_memory_desc_t *user, bool nhwc)
{
    if (!nhwc) return any_md(md, user);
    *md = *user;
    return dnnl_success;
}

/* The cache entry of input (N, C, H, W) in format nchw or nhwc: the one made for that shape
 * before, or a free one, or else the least recently used one, cleared. */
static struct conv_cache *cache_entry(struct conv2d_cpu *p, int64_t N, int64_t H, int64_t W, bool nhwc)
{
    struct conv_cache *e = &p->c[0];
    for (int i = 0; i < N_SHAPES; i++) {
        struct conv_cache *c = &p->c[i];
        if (c->valid && c->N == N && c->H == H && c->W == W && c->nhwc == nhwc) {
            e = c;
            break;
        }
        if (!c->valid || (e->valid && c->last_use < e->last_use)) e = c;
    }
    if (!(e->valid && e->N == N && e->H == H && e->W == W && e->nhwc == nhwc)) cache_free(e);
    e->last_use = ++p->uses;
    return e;
}

/* Make the forward primitive (and backward-data / backward-weights when asked) for input
 * (N, C, H, W) in format nchw or nhwc, with the buffers and reorders their layouts need, in
 * that shape's cache entry (*out). */
static glia_status conv_prepare(struct glia_layer *l, int64_t N, int64_t H, int64_t W, bool nhwc, bool need_d,
                                bool need_w, struct conv_cache **out)
{
    struct conv2d_cpu *p = l->state;
    struct conv_cache *c = cache_entry(p, N, H, W, nhwc);
    glia_status st = GLIA_OK;
    const struct glia_conv2d_attrs *g = l->attrs;
    const dnnl_dims_t strides = {g->s, g->s}, dil = {g->d - 1, g->d - 1}, pad = {g->ph, g->pw};
    dnnl_convolution_desc_t cd;
    dnnl_memory_desc_t src_any, wei_any, dst_any;
    *out = c;
    if (!c->valid) {
        c->N = N, c->H = H, c->W = W, c->nhwc = nhwc;
        c->OH = glia_conv2d_out_h(g, H), c->OW = glia_conv2d_out_w(g, W);
        const dnnl_dims_t sd = {N, g->C, H, W}, dd = {N, g->F, c->OH, c->OW}, bd = {g->F};
        dnnl_format_tag_t act = nhwc ? dnnl_nhwc : dnnl_nchw;
        DNNL_TRY(dnnl_memory_desc_init_by_tag(&c->src_md, 4, sd, dnnl_f32, act));
        DNNL_TRY(dnnl_memory_desc_init_by_tag(&c->dst_md, 4, dd, dnnl_f32, act));
        DNNL_TRY(dnnl_memory_desc_init_by_tag(&c->bias_md, 1, bd, dnnl_f32, dnnl_x));
        if (g->g == 1) {
            const dnnl_dims_t wd = {g->F, g->C, g->kh, g->kw};
            DNNL_TRY(dnnl_memory_desc_init_by_tag(&c->wei_md, 4, wd, dnnl_f32, dnnl_oihw));
        } else {  /* (g, F/g, C/g, kh, kw): the same bytes as (F, C/g, kh, kw) row-major */
            const dnnl_dims_t wd = {g->g, g->F / g->g, g->C / g->g, g->kh, g->kw};
            DNNL_TRY(dnnl_memory_desc_init_by_tag(&c->wei_md, 5, wd, dnnl_f32, dnnl_goihw));
        }
        DNNL_TRY(act_md(&src_any, &c->src_md, nhwc));
        DNNL_TRY(any_md(&wei_any, &c->wei_md));
        DNNL_TRY(act_md(&dst_any, &c->dst_md, nhwc));
        DNNL_TRY(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct,
                                                             &src_any, &wei_any, g->b >= 0 ? &c->bias_md : NULL,
                                                             &dst_any, strides, dil, pad, pad));
        DNNL_TRY(dnnl_primitive_desc_create(&c->fwd_pd, &cd, p->attr_fwd, p->engine, NULL));
        DNNL_TRY(make_prim(p, &c->fwd, c->fwd_pd));
        log_impl(l, "forward", c->fwd_pd);
        DNNL_TRY(dnnl_memory_create(&c->x, &c->src_md, p->engine, DNNL_MEMORY_NONE));
        DNNL_TRY(dnnl_memory_create(&c->w, &c->wei_md, p->engine, DNNL_MEMORY_NONE));
        DNNL_TRY(dnnl_memory_create(&c->y, &c->dst_md, p->engine, DNNL_MEMORY_NONE));
        DNNL_TRY(dnnl_memory_create(&c->dx, &c->src_md, p->engine, DNNL_MEMORY_NONE));
        DNNL_TRY(dnnl_memory_create(&c->dw, &c->wei_md, p->engine, DNNL_MEMORY_NONE));
        DNNL_TRY(dnnl_memory_create(&c->dy, &c->dst_md, p->engine, DNNL_MEMORY_NONE));
        if (g->b >= 0) {
            DNNL_TRY(dnnl_memory_create(&c->b, &c->bias_md, p->engine, DNNL_MEMORY_NONE));
            DNNL_TRY(dnnl_memory_create(&c->db, &c->bias_md, p->engine, DNNL_MEMORY_NONE));
        }
        if ((st = slot_init(l, &c->f_src, c->fwd_pd, dnnl_query_src_md, &c->src_md, true, NULL, NULL)) ||
            (st = slot_init(l, &c->f_wei, c->fwd_pd, dnnl_query_weights_md, &c->wei_md, true, NULL, NULL)) ||
            (st = slot_init(l, &c->f_dst, c->fwd_pd, dnnl_query_dst_md, &c->dst_md, false, NULL, NULL)))
            goto fail;
        c->valid = true;
    }
    if (need_d || need_w) {
        DNNL_TRY(act_md(&src_any, &c->src_md, nhwc));
        DNNL_TRY(any_md(&wei_any, &c->wei_md));
        DNNL_TRY(act_md(&dst_any, &c->dst_md, nhwc));
    }
    /* The forward descriptor is the hint, so the layouts agree with the forward's where the
     * implementations allow: the diff_dst buffer reuses the forward's dst one (whose contents
     * are dead after the forward), backward-weights reads the forward's reordered src. */
    if (need_d && !c->bwd_d) {
        DNNL_TRY(dnnl_dilated_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, &src_any, &wei_any,
                                                                  &dst_any, strides, dil, pad, pad));
        DNNL_TRY(dnnl_primitive_desc_create(&c->bwd_d_pd, &cd, p->attr, p->engine, c->fwd_pd));
        DNNL_TRY(make_prim(p, &c->bwd_d, c->bwd_d_pd));
        log_impl(l, "backward data", c->bwd_d_pd);
        if ((st = slot_init(l, &c->d_ddst, c->bwd_d_pd, dnnl_query_diff_dst_md, &c->dst_md, true, &c->f_dst,
                            &c->w_ddst)) ||
            (st = slot_init(l, &c->d_wei, c->bwd_d_pd, dnnl_query_weights_md, &c->wei_md, true, &c->f_wei, NULL)) ||
            (st = slot_init(l, &c->d_dsrc, c->bwd_d_pd, dnnl_query_diff_src_md, &c->src_md, false, NULL, NULL)))
            goto fail;
    }
    if (need_w && !c->bwd_w) {
        DNNL_TRY(dnnl_dilated_convolution_backward_weights_desc_init(
            &cd, dnnl_convolution_direct, &src_any, &wei_any, g->b >= 0 ? &c->bias_md : NULL, &dst_any, strides,
            dil, pad, pad));
        DNNL_TRY(dnnl_primitive_desc_create(&c->bwd_w_pd, &cd, p->attr, p->engine, c->fwd_pd));
        DNNL_TRY(make_prim(p, &c->bwd_w, c->bwd_w_pd));
        log_impl(l, "backward weights", c->bwd_w_pd);
        if ((st = slot_init(l, &c->w_src, c->bwd_w_pd, dnnl_query_src_md, &c->src_md, true, &c->f_src, NULL)) ||
            (st = slot_init(l, &c->w_ddst, c->bwd_w_pd, dnnl_query_diff_dst_md, &c->dst_md, true, &c->d_ddst,
                            &c->f_dst)) ||
            (st = slot_init(l, &c->w_dwei, c->bwd_w_pd, dnnl_query_diff_weights_md, &c->wei_md, false, NULL, NULL)))
            goto fail;
    }
    return GLIA_OK;
fail:
    cache_free(c);
    *out = NULL;
    return st;
}

/* Point memory object m at ptr (the tensors are not written through const ones). */
static dnnl_status_t bind(dnnl_memory_t m, const void *ptr) { return dnnl_memory_set_data_handle(m, (void *)ptr); }

/* Execute prim with args (at most 7) and the shared scratchpad, to completion. */
static glia_status run(struct glia_layer *l, dnnl_primitive_t prim, int n, const dnnl_exec_arg_t *args)
{
    struct conv2d_cpu *p = l->state;
    glia_status st = GLIA_OK;
    dnnl_exec_arg_t a[8];
    memcpy(a, args, (size_t)n * sizeof *a);
    if (p->scratchpad) a[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->scratchpad};
    DNNL_TRY(dnnl_primitive_execute(prim, p->stream, n, a));
    DNNL_TRY(dnnl_stream_wait(p->stream));
fail:
    return st;
}

/* Reorder `from` into `to` with reo, one of slot s's. */
static glia_status run_reorder(struct glia_layer *l, const struct slot *s, dnnl_primitive_t reo, dnnl_memory_t from,
                               dnnl_memory_t to)
{
    int nthr = threads_begin(s->serial);
    glia_status st = run(l, reo, 2, (dnnl_exec_arg_t[]){{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
    threads_end(s->serial, nthr);
    return st;
}

/* Input slot s ready for the primitive: user memory um (already bound) reordered into the
 * slot's buffer when the layouts differ. Returns the memory object to pass. */
static glia_status slot_in(struct glia_layer *l, struct slot *s, dnnl_memory_t um, dnnl_memory_t *arg)
{
    *arg = s->mem ? s->mem : um;
    return s->mem ? run_reorder(l, s, s->reo, um, s->mem) : GLIA_OK;
}

/* dst[i] += src[i] */
static void add_into(float *dst, const float *src, int64_t n)
{
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) dst[i] += src[i];
}

/* Output slot s: where the primitive writes (*arg) for the user tensor `user` of n elements
 * (memory object um): its buffer, or the user tensor itself when the layouts agree, or scratch
 * when it must be added. out_finish then writes (acc false) or adds (acc true) it into user. */
static glia_status out_begin(struct glia_layer *l, struct slot *s, dnnl_memory_t um, float *user, bool acc,
                             float *scratch, dnnl_memory_t *arg)
{
    glia_status st = GLIA_OK;
    *arg = s->mem;
    if (!s->mem) {
        DNNL_TRY(bind(um, acc ? scratch : user));
        *arg = um;
    }
fail:
    return st;
}

static glia_status out_finish(struct glia_layer *l, struct slot *s, dnnl_memory_t um, float *user, bool acc,
                              float *scratch, int64_t n)
{
    glia_status st = GLIA_OK;
    if (s->mem) {
        bool via_scratch = acc && !s->add;
        DNNL_TRY(bind(um, via_scratch ? scratch : user));
        if ((st = run_reorder(l, s, acc && s->add ? s->add : s->reo, s->mem, um))) return st;
        if (!via_scratch) return GLIA_OK;
    }
    if (acc) add_into(user, scratch, n);
fail:
    return st;
}

/* Frees what l->state holds (also what a failed prepare made). */
static void conv2d_cpu_destroy(struct glia_layer *l)
{
    struct conv2d_cpu *p = l->state;
    for (int i = 0; i < N_SHAPES; i++) cache_free(&p->c[i]);
    if (p->scratchpad) dnnl_memory_destroy(p->scratchpad);
    if (p->attr) dnnl_primitive_attr_destroy(p->attr);
    if (p->attr_fwd) dnnl_primitive_attr_destroy(p->attr_fwd);
    if (p->attr_add) dnnl_primitive_attr_destroy(p->attr_add);
    if (p->stream) dnnl_stream_destroy(p->stream);
    if (p->engine) dnnl_engine_destroy(p->engine);
    free(p->dw_scratch);
    free(p->db_scratch);
    memset(p, 0, sizeof *p);
}

/* The engine, stream, primitive attributes and parameter-gradient scratch; the primitives come per input shape,
 * at the first call that has it. */
static glia_status conv2d_cpu_prepare(struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    struct conv2d_cpu *p = l->state;
    const struct glia_conv2d_attrs *g = l->attrs;
    glia_status st = GLIA_OK;
    int64_t fan_in = g->C / g->g * g->kh * g->kw;
    p->dw_scratch = malloc((size_t)(g->F * fan_in) * sizeof(float));
    p->db_scratch = malloc((size_t)g->F * sizeof(float));
    if (!p->dw_scratch || !p->db_scratch) {
        st = GLIA_ENOMEM;
        goto fail;
    }
    DNNL_TRY(dnnl_engine_create(&p->engine, dnnl_cpu, 0));
    DNNL_TRY(dnnl_stream_create(&p->stream, p->engine, dnnl_stream_default_flags));
    /* One scratchpad per layer, allocated with the primitives, instead of one per execution. */
    DNNL_TRY(dnnl_primitive_attr_create(&p->attr));
    DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(p->attr, dnnl_scratchpad_mode_user));
    DNNL_TRY(dnnl_primitive_attr_create(&p->attr_add));
    DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(p->attr_add, dnnl_scratchpad_mode_user));
    DNNL_TRY(dnnl_primitive_attr_create(&p->attr_fwd));
    DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(p->attr_fwd, dnnl_scratchpad_mode_user));
    dnnl_post_ops_t ops;
    DNNL_TRY(dnnl_post_ops_create(&ops));
    dnnl_status_t s = dnnl_post_ops_append_sum(ops, 1.0f);
    if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(p->attr_add, ops);
    dnnl_post_ops_destroy(ops);
    DNNL_TRY(s);
    if (g->act == GLIA_CONV2D_ACT_RELU) {  /* y = max(y, 0) as the forward writes it */
        DNNL_TRY(dnnl_post_ops_create(&ops));
        s = dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
        if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(p->attr_fwd, ops);
        dnnl_post_ops_destroy(ops);
        DNNL_TRY(s);
    }
    return GLIA_OK;
fail:
    conv2d_cpu_destroy(l);  /* no destroy follows a failed prepare */
    return st;
}

/* Both formats are the same bytes for t (C or H*W is 1): it reads as contiguous. */
static bool either_format(const struct glia_tensor *t)
{
    return t->shape.dim[1] == 1 || t->shape.dim[2] * t->shape.dim[3] == 1;
}

/* x and y must be f32 host tensors (N, C, H, W), (N, F, OH, OW) in one format (where one of them
 * is the same bytes in both, the other's counts); *nhwc says which. */
static glia_status check_input(struct glia_layer *l, const struct glia_tensor *x, const struct glia_tensor *y,
                               bool *nhwc)
{
    const struct glia_conv2d_attrs *g = l->attrs;
    enum glia_memory_format fx = glia_tensor_memory_format(x), fy = glia_tensor_memory_format(y);
    if (x->shape.ndim != 4 || x->shape.dim[1] != g->C || !glia_tensor_f32(x) ||
        (fx == GLIA_CONTIGUOUS && !glia_tensor_is_contiguous(x)))
        return glia_error(l->ctx, GLIA_ESHAPE, "[%s] conv2d: needs an f32 (N, %lld, H, W) host tensor",
                          l->name, (long long)g->C);
    if (fx != fy && !either_format(fx == GLIA_CONTIGUOUS ? x : y))
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] conv2d: input is %s but output is %s", l->name,
                          glia_memory_format_name(fx), glia_memory_format_name(fy));
    *nhwc = fx == GLIA_CHANNELS_LAST || fy == GLIA_CHANNELS_LAST;
    return GLIA_OK;
}

/* y(N, F, HW) (or (N, HW, F) with nhwc) = act((y - m(f))*s(f) + t(f)), affine = (m, s, t) rows of F, each operation
 * rounded to f32 as written (the evaluation of a batchnorm that alone reads this layer, as it computes it); act the
 * relu with relu (v < 0 ? 0 : v) */
static void affine_apply(float *y, const float *affine, int64_t N, int64_t F, int64_t HW, bool nhwc, bool relu)
{
    const float *m = affine, *s = affine + F, *t = affine + 2 * F;
#pragma omp parallel for schedule(static) if (N * F * HW > 32768)
    for (int64_t r = 0; r < N * (nhwc ? HW : F); r++) {
        float *v = y + r * (nhwc ? F : HW);
        if (nhwc)
            for (int64_t f = 0; f < F; f++) v[f] = (v[f] - m[f]) * s[f] + t[f];
        else
            for (int64_t i = 0, f = r % F; i < HW; i++) v[i] = (v[i] - m[f]) * s[f] + t[f];
        if (relu)
            for (int64_t i = 0; i < (nhwc ? F : HW); i++) v[i] = v[i] < 0.0f ? 0.0f : v[i];
    }
}

static glia_status conv2d_cpu_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_conv2d_attrs *g = l->attrs;
    struct conv_cache *c;
    const struct glia_tensor *x = a->in[0];
    bool nhwc = false;  /* set by check_input; initialised for gcc -O3's flow analysis */
    glia_status st = check_input(l, x, a->out, &nhwc);
    if (!st) st = conv_prepare(l, x->shape.dim[0], x->shape.dim[2], x->shape.dim[3], nhwc, false, false, &c);
    if (st) return st;
    c->kept = NULL;  /* f_src is about to be overwritten */
    DNNL_TRY(bind(c->x, glia_tensor_f32(x)));
    DNNL_TRY(bind(c->w, glia_tensor_f32(l->params[g->w].value)));
    DNNL_TRY(bind(c->y, glia_tensor_f32(a->out)));
    dnnl_memory_t src, wei, dst = c->f_dst.mem ? c->f_dst.mem : c->y;
    if ((st = slot_in(l, &c->f_src, c->x, &src)) || (st = slot_in(l, &c->f_wei, c->w, &wei))) return st;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
    int n = 3;
    if (g->b >= 0) {
        DNNL_TRY(bind(c->b, glia_tensor_f32(l->params[g->b].value)));
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, c->b};
    }
    if ((st = run(l, c->fwd, n, args))) return st;
    if (c->f_dst.mem && (st = run_reorder(l, &c->f_dst, c->f_dst.reo, c->f_dst.mem, c->y))) return st;
    if (a->affine) affine_apply(glia_tensor_f32(a->out), glia_tensor_f32(a->affine), x->shape.dim[0], g->F,
                                c->OH * c->OW, nhwc, a->affine_relu);
    /* training: backward-weights reads the reordered input instead of reordering it again */
    if (a->train && c->f_src.mem) c->kept = glia_tensor_f32(x);
    return GLIA_OK;
fail:
    return st;
}

/* d(n) = dy(n) unless y(n) <= 0 (so also for a NaN y), else +0: the relu layer's backward over its output, by a bit
 * mask, no branch (the relu's cut is random: a branch on it mispredicts half the time) */
static void relu_mask(float *d, const float *dy, const float *y, int64_t n)
{
    const uint32_t *g = (const uint32_t *)(const void *)dy;
    uint32_t *o = (uint32_t *)(void *)d;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) o[i] = g[i] & -(uint32_t)!(y[i] <= 0.0f);
}

static glia_status conv2d_cpu_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    struct conv2d_cpu *p = l->state;
    const struct glia_conv2d_attrs *g = l->attrs;
    struct conv_cache *c;
    const struct glia_tensor *x = a->in[0];
    bool nhwc = false;  /* set by check_input; initialised for gcc -O3's flow analysis */
    glia_status st = check_input(l, x, a->dout, &nhwc);
    if (!st && a->din[0] && glia_tensor_memory_format(a->din[0]) != glia_tensor_memory_format(x))
        st = glia_error(l->ctx, GLIA_EINVAL, "[%s] conv2d: input and its gradient differ in memory format", l->name);
    if (!st && glia_tensor_memory_format(a->out) != glia_tensor_memory_format(a->dout))
        st = glia_error(l->ctx, GLIA_EINVAL, "[%s] conv2d: output and its gradient differ in memory format", l->name);
    if (!st)
        st = conv_prepare(l, x->shape.dim[0], x->shape.dim[2], x->shape.dim[3], nhwc, a->din[0] != NULL, true, &c);
    if (st) return st;
    const float *dy = glia_tensor_f32(a->dout);
    if (g->act == GLIA_CONV2D_ACT_RELU) {  /* the relu's backward first: dy where y > 0 (y and dy in one format) */
        int64_t ny = glia_tensor_numel(a->dout);
        if (!c->dy_act && !(c->dy_act = malloc((size_t)ny * sizeof(float)))) return GLIA_ENOMEM;
        relu_mask(c->dy_act, dy, glia_tensor_f32(a->out), ny);
        dy = c->dy_act;
    }
    DNNL_TRY(bind(c->dy, dy));
    dnnl_memory_t ddst_done = NULL; /* the buffer that already holds the reordered dout */
    /* input gradient: oneDNN overwrites diff_src, so accumulate through a summing reorder or scratch */
    if (a->din[0]) {
        int64_t nx = glia_tensor_numel(x);
        float *dx = glia_tensor_f32(a->din[0]);
        bool acc = a->din_accumulate[0];
        if (acc && !c->dx_scratch && (!c->d_dsrc.mem || !c->d_dsrc.add) &&
            !(c->dx_scratch = malloc((size_t)nx * sizeof(float))))
            return GLIA_ENOMEM;
        DNNL_TRY(bind(c->w, glia_tensor_f32(l->params[g->w].value)));
        dnnl_memory_t ddst, wei, dsrc;
        if ((st = slot_in(l, &c->d_ddst, c->dy, &ddst)) || (st = slot_in(l, &c->d_wei, c->w, &wei)) ||
            (st = out_begin(l, &c->d_dsrc, c->dx, dx, acc, c->dx_scratch, &dsrc)))
            return st;
        ddst_done = c->d_ddst.mem;
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DIFF_SRC, dsrc}};
        if ((st = run(l, c->bwd_d, 3, args)) || (st = out_finish(l, &c->d_dsrc, c->dx, dx, acc, c->dx_scratch, nx)))
            return st;
    }
    /* parameter gradients: written into unset ones, added (summing reorder or scratch) into set ones */
    struct glia_param *pw = &l->params[g->w], *pb = g->b >= 0 ? &l->params[g->b] : NULL;
    float *dw = glia_tensor_f32(pw->grad), *db = pb ? glia_tensor_f32(pb->grad) : NULL;
    bool acc_w = !pw->grad_unset;
    float *db_t = pb && pb->grad_unset ? db : p->db_scratch;
    DNNL_TRY(bind(c->x, glia_tensor_f32(x)));
    dnnl_memory_t src = c->w_src.mem ? c->w_src.mem : c->x, ddst = c->w_ddst.mem ? c->w_ddst.mem : c->dy, dwei;
    bool reuse = c->w_src.mem && c->w_src.mem == c->f_src.mem && c->kept == glia_tensor_f32(x);
    c->kept = NULL;  /* serves this backward only; a reorder below overwrites the buffer anyway */
    if (c->w_src.mem && !reuse && (st = run_reorder(l, &c->w_src, c->w_src.reo, c->x, c->w_src.mem))) return st;
    if (c->w_ddst.mem && c->w_ddst.mem != ddst_done &&
        (st = run_reorder(l, &c->w_ddst, c->w_ddst.reo, c->dy, c->w_ddst.mem)))
        return st;
    if ((st = out_begin(l, &c->w_dwei, c->dw, dw, acc_w, p->dw_scratch, &dwei))) return st;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_WEIGHTS, dwei}};
    int n = 3;
    if (pb) {
        DNNL_TRY(bind(c->db, db_t));
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS, c->db};
    }
    if ((st = run(l, c->bwd_w, n, args)) ||
        (st = out_finish(l, &c->w_dwei, c->dw, dw, acc_w, p->dw_scratch, glia_tensor_numel(pw->grad))))
        return st;
    if (pb && db_t != db) add_into(db, db_t, g->F);
    return GLIA_OK;
fail:
    return st;
}

static const struct glia_layer_type conv2d_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "conv2d",
    .doc = "2-D convolution, input (N, C, H, W) -> (N, filters, OH, OW); square or rectangular kernel and padding, "
           "stride, dilation, groups",
    .keys = conv2d_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .flags = GLIA_TYPE_FUSIBLE_ACTIVATION,
    .attrs_size = sizeof(struct glia_conv2d_attrs),
    .create = conv2d_create,
    .infer_shape = conv2d_infer,
    .flops = conv2d_flops,
};

/* activation = relu reads the output in backward (its mask); without an activation the eval forward takes a
 * following batchnorm's affine */
static uint32_t conv2d_cpu_layer_flags(const struct glia_layer *l)
{
    const struct glia_conv2d_attrs *g = l->attrs;
    uint32_t f = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_OUTPUT;
    return g->act ? f & ~(uint32_t)GLIA_KERNEL_BWD_NO_OUTPUT : f | GLIA_KERNEL_EVAL_AFFINE;
}

static const struct glia_kernel conv2d_cpu_kernel = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "conv2d",
    .impl = "cpu",
    .doc = "oneDNN",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_OUTPUT,
    .state_size = sizeof(struct conv2d_cpu),
    .prepare = conv2d_cpu_prepare,
    .destroy = conv2d_cpu_destroy,
    .forward = conv2d_cpu_forward,
    .backward = conv2d_cpu_backward,
    .layer_flags = conv2d_cpu_layer_flags,
};

static glia_status conv2d_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &conv2d_type);
    return st ? st : glia_register_kernel(r, &conv2d_cpu_kernel);
}

GLIA_PLUGIN_DEFINE(conv2d, "2.0", "MIT", "2-D convolution (CPU: oneDNN)", conv2d_init)
