/* plugins/layers/conv2d — 2-D convolution (cross-correlation, like PyTorch's Conv2d) on the CPU
 * with oneDNN primitives: forward, backward-data, backward-weights (+bias), with stride,
 * symmetric zero padding, dilation and groups. Input (N, C, H, W), output (N, filters, OH, OW).
 * Not a transposed convolution, and no asymmetric padding. All user memory stays in plain
 * row-major layouts (nchw, oihw / goihw, x); oneDNN picks an implementation for those. */
#include <glia/glia.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

/* Primitives and memory objects for one input shape. The memory objects have no buffer of
 * their own: each execution points them at the tensors of that call. */
struct conv_cache {
    bool valid, have_bwd;
    int64_t N, H, W, OH, OW;
    dnnl_memory_desc_t src_md, wei_md, bias_md, dst_md;
    dnnl_primitive_desc_t fwd_pd, bwd_d_pd, bwd_w_pd;
    dnnl_primitive_t fwd, bwd_d, bwd_w;
    dnnl_memory_t x, w, b, y, dx, dw, db, dy;
    float *dx_scratch;  /* N*C*H*W: input gradient to add when accumulating */
};

struct conv2d {
    int64_t C, F, k, s, pad, d, g;  /* channels in, filters, kernel, stride, padding, dilation, groups */
    int w, b;                       /* parameter indices; b = -1 without bias */
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    float *dw_scratch, *db_scratch; /* parameter gradients to add when already set */
    struct conv_cache c;
};

static const struct glia_key conv2d_keys[] = {
    GLIA_KEY("filters", GLIA_KEY_INT, NULL, "output channels", .required = true, .min = 1, .max = 1 << 30),
    GLIA_KEY("size", GLIA_KEY_INT, "3", "kernel height and width", .min = 1, .max = 1 << 20),
    GLIA_KEY("stride", GLIA_KEY_INT, "1", "step between kernel positions", .min = 1, .max = 1 << 20),
    GLIA_KEY("padding", GLIA_KEY_INT, "0", "zeros added on every side of H and W", .min = 0, .max = 1 << 20),
    GLIA_KEY("dilation", GLIA_KEY_INT, "1", "spacing between kernel taps (1: dense)", .min = 1, .max = 1 << 20),
    GLIA_KEY("groups", GLIA_KEY_INT, "1", "channel groups; must divide input channels and filters", .min = 1,
             .max = 1 << 30),
    GLIA_KEY("bias", GLIA_KEY_BOOL, "on", "add a learned bias per filter"),
    GLIA_KEY_END};

/* Output extent of one spatial dimension; < 1 when the dilated kernel does not fit. */
static int64_t out_extent(const struct conv2d *p, int64_t in)
{
    int64_t span = in + 2 * p->pad - p->d * (p->k - 1) - 1;
    return span < 0 ? 0 : span / p->s + 1;
}

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

static void cache_free(struct conv_cache *c)
{
    dnnl_primitive_t prims[] = {c->fwd, c->bwd_d, c->bwd_w};
    dnnl_primitive_desc_t pds[] = {c->fwd_pd, c->bwd_d_pd, c->bwd_w_pd};
    dnnl_memory_t mems[] = {c->x, c->w, c->b, c->y, c->dx, c->dw, c->db, c->dy};
    for (size_t i = 0; i < sizeof prims / sizeof prims[0]; i++)
        if (prims[i]) dnnl_primitive_destroy(prims[i]);
    for (size_t i = 0; i < sizeof pds / sizeof pds[0]; i++)
        if (pds[i]) dnnl_primitive_desc_destroy(pds[i]);
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
    free(c->dx_scratch);
    memset(c, 0, sizeof *c);
}

static void log_impl(struct glia_layer *l, const char *what, const_dnnl_primitive_desc_t pd)
{
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
        glia_log(l->ctx, GLIA_LOG_DEBUG, "[%s] conv2d %s: oneDNN %s", l->name, what, impl);
}

/* Make the forward primitive (and the backward ones when need_bwd) for input (N, C, H, W). */
static glia_status conv_prepare(struct glia_layer *l, int64_t N, int64_t H, int64_t W, bool need_bwd)
{
    struct conv2d *p = l->priv;
    struct conv_cache *c = &p->c;
    glia_status st = GLIA_OK;
    const dnnl_dims_t strides = {p->s, p->s}, dil = {p->d - 1, p->d - 1}, pad = {p->pad, p->pad};
    dnnl_convolution_desc_t cd;
    if (!c->valid || c->N != N || c->H != H || c->W != W) {
        cache_free(c);
        c->N = N, c->H = H, c->W = W;
        c->OH = out_extent(p, H), c->OW = out_extent(p, W);
        const dnnl_dims_t sd = {N, p->C, H, W}, dd = {N, p->F, c->OH, c->OW}, bd = {p->F};
        DNNL_TRY(dnnl_memory_desc_init_by_tag(&c->src_md, 4, sd, dnnl_f32, dnnl_nchw));
        DNNL_TRY(dnnl_memory_desc_init_by_tag(&c->dst_md, 4, dd, dnnl_f32, dnnl_nchw));
        DNNL_TRY(dnnl_memory_desc_init_by_tag(&c->bias_md, 1, bd, dnnl_f32, dnnl_x));
        if (p->g == 1) {
            const dnnl_dims_t wd = {p->F, p->C, p->k, p->k};
            DNNL_TRY(dnnl_memory_desc_init_by_tag(&c->wei_md, 4, wd, dnnl_f32, dnnl_oihw));
        } else {  /* (g, F/g, C/g, k, k): the same bytes as (F, C/g, k, k) row-major */
            const dnnl_dims_t wd = {p->g, p->F / p->g, p->C / p->g, p->k, p->k};
            DNNL_TRY(dnnl_memory_desc_init_by_tag(&c->wei_md, 5, wd, dnnl_f32, dnnl_goihw));
        }
        DNNL_TRY(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct,
                                                             &c->src_md, &c->wei_md, p->b >= 0 ? &c->bias_md : NULL,
                                                             &c->dst_md, strides, dil, pad, pad));
        DNNL_TRY(dnnl_primitive_desc_create(&c->fwd_pd, &cd, NULL, p->engine, NULL));
        DNNL_TRY(dnnl_primitive_create(&c->fwd, c->fwd_pd));
        log_impl(l, "forward", c->fwd_pd);
        DNNL_TRY(dnnl_memory_create(&c->x, &c->src_md, p->engine, DNNL_MEMORY_NONE));
        DNNL_TRY(dnnl_memory_create(&c->w, &c->wei_md, p->engine, DNNL_MEMORY_NONE));
        DNNL_TRY(dnnl_memory_create(&c->y, &c->dst_md, p->engine, DNNL_MEMORY_NONE));
        if (p->b >= 0) DNNL_TRY(dnnl_memory_create(&c->b, &c->bias_md, p->engine, DNNL_MEMORY_NONE));
        c->valid = true;
    }
    if (need_bwd && !c->have_bwd) {
        DNNL_TRY(dnnl_dilated_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, &c->src_md, &c->wei_md,
                                                                  &c->dst_md, strides, dil, pad, pad));
        DNNL_TRY(dnnl_primitive_desc_create(&c->bwd_d_pd, &cd, NULL, p->engine, c->fwd_pd));
        DNNL_TRY(dnnl_primitive_create(&c->bwd_d, c->bwd_d_pd));
        log_impl(l, "backward data", c->bwd_d_pd);
        DNNL_TRY(dnnl_dilated_convolution_backward_weights_desc_init(
            &cd, dnnl_convolution_direct, &c->src_md, &c->wei_md, p->b >= 0 ? &c->bias_md : NULL, &c->dst_md,
            strides, dil, pad, pad));
        DNNL_TRY(dnnl_primitive_desc_create(&c->bwd_w_pd, &cd, NULL, p->engine, c->fwd_pd));
        DNNL_TRY(dnnl_primitive_create(&c->bwd_w, c->bwd_w_pd));
        log_impl(l, "backward weights", c->bwd_w_pd);
        DNNL_TRY(dnnl_memory_create(&c->dx, &c->src_md, p->engine, DNNL_MEMORY_NONE));
        DNNL_TRY(dnnl_memory_create(&c->dw, &c->wei_md, p->engine, DNNL_MEMORY_NONE));
        DNNL_TRY(dnnl_memory_create(&c->dy, &c->dst_md, p->engine, DNNL_MEMORY_NONE));
        if (p->b >= 0) DNNL_TRY(dnnl_memory_create(&c->db, &c->bias_md, p->engine, DNNL_MEMORY_NONE));
        c->have_bwd = true;
    }
    return GLIA_OK;
fail:
    cache_free(c);
    return st;
}

/* Point memory object m at ptr (the tensors are not written through const ones). */
static dnnl_status_t bind(dnnl_memory_t m, const void *ptr) { return dnnl_memory_set_data_handle(m, (void *)ptr); }

static glia_status run(struct glia_layer *l, dnnl_primitive_t prim, int n, const dnnl_exec_arg_t *args)
{
    struct conv2d *p = l->priv;
    glia_status st = GLIA_OK;
    DNNL_TRY(dnnl_primitive_execute(prim, p->stream, n, args));
    DNNL_TRY(dnnl_stream_wait(p->stream));
fail:
    return st;
}

static void conv2d_destroy(struct glia_layer *l)
{
    struct conv2d *p = l->priv;
    if (!p) return;
    cache_free(&p->c);
    if (p->stream) dnnl_stream_destroy(p->stream);
    if (p->engine) dnnl_engine_destroy(p->engine);
    free(p->dw_scratch);
    free(p->db_scratch);
    free(p);
    l->priv = NULL;
}

static glia_status conv2d_create(struct glia_layer *l, const struct glia_section *cfg,
                                 const struct glia_shape *in, int n_in)
{
    char buf[64];
    if (in[0].ndim != 4)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE, "conv2d expects (N, C, H, W) input, got %s",
                                  glia_shape_str(&in[0], buf, sizeof buf));
    struct conv2d q = {
        .C = in[0].dim[1],
        .F = glia_section_int(cfg, "filters"),
        .k = glia_section_int(cfg, "size"),
        .s = glia_section_int(cfg, "stride"),
        .pad = glia_section_int(cfg, "padding"),
        .d = glia_section_int(cfg, "dilation"),
        .g = glia_section_int(cfg, "groups"),
        .b = -1,
    };
    if (q.C % q.g)
        return glia_section_error(cfg, "groups", GLIA_ECONFIG, "%lld groups do not divide the %lld input channels",
                                  (long long)q.g, (long long)q.C);
    if (q.F % q.g)
        return glia_section_error(cfg, "groups", GLIA_ECONFIG, "%lld groups do not divide the %lld filters",
                                  (long long)q.g, (long long)q.F);
    int64_t OH = out_extent(&q, in[0].dim[2]), OW = out_extent(&q, in[0].dim[3]);
    if (OH < 1 || OW < 1)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE,
                                  "conv2d output would be empty: input %lldx%lld with size %lld, dilation %lld, "
                                  "padding %lld gives %lldx%lld",
                                  (long long)in[0].dim[2], (long long)in[0].dim[3], (long long)q.k, (long long)q.d,
                                  (long long)q.pad, (long long)OH, (long long)OW);
    struct conv2d *p = malloc(sizeof *p);
    if (!p) return GLIA_ENOMEM;
    *p = q;
    l->priv = p;
    glia_status st = GLIA_OK;
    int64_t fan_in = q.C / q.g * q.k * q.k;
    p->dw_scratch = malloc((size_t)(q.F * fan_in) * sizeof(float));
    p->db_scratch = malloc((size_t)q.F * sizeof(float));
    if (!p->dw_scratch || !p->db_scratch) {
        st = GLIA_ENOMEM;
        goto fail;
    }
    DNNL_TRY(dnnl_engine_create(&p->engine, dnnl_cpu, 0));
    DNNL_TRY(dnnl_stream_create(&p->stream, p->engine, dnnl_stream_default_flags));
    /* PyTorch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias. */
    struct glia_param_init init = {GLIA_INIT_UNIFORM, 1.0 / sqrt((double)fan_in)};
    struct glia_shape ws = glia_shape_make(4, (int64_t[]){q.F, q.C / q.g, q.k, q.k});
    struct glia_shape bs = glia_shape_make(1, (int64_t[]){q.F});
    if ((st = glia_layer_add_param(l, "weight", &ws, init, &p->w))) goto fail;
    if (glia_section_bool(cfg, "bias") && (st = glia_layer_add_param(l, "bias", &bs, init, &p->b))) goto fail;
    return GLIA_OK;
fail:
    conv2d_destroy(l);  /* the core calls destroy only after a successful create */
    return st;
}

static glia_status conv2d_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                struct glia_shape *out)
{
    const struct conv2d *p = l->priv;
    if (in[0].ndim != 4 || in[0].dim[1] != p->C) return GLIA_ESHAPE;
    int64_t OH = out_extent(p, in[0].dim[2]), OW = out_extent(p, in[0].dim[3]);
    if (OH < 1 || OW < 1) return GLIA_ESHAPE;
    *out = glia_shape_make(4, (int64_t[]){in[0].dim[0], p->F, OH, OW});
    return GLIA_OK;
}

static glia_status check_input(struct glia_layer *l, const struct glia_tensor *x)
{
    const struct conv2d *p = l->priv;
    if (x->shape.ndim != 4 || x->shape.dim[1] != p->C || !glia_tensor_is_contiguous(x) || !glia_tensor_f32(x))
        return glia_error(l->ctx, GLIA_ESHAPE, "[%s] conv2d: needs a contiguous f32 (N, %lld, H, W) host tensor",
                          l->name, (long long)p->C);
    return GLIA_OK;
}

static glia_status conv2d_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    struct conv2d *p = l->priv;
    struct conv_cache *c = &p->c;
    const struct glia_tensor *x = a->in[0];
    glia_status st = check_input(l, x);
    if (!st) st = conv_prepare(l, x->shape.dim[0], x->shape.dim[2], x->shape.dim[3], false);
    if (st) return st;
    DNNL_TRY(bind(c->x, glia_tensor_f32(x)));
    DNNL_TRY(bind(c->w, glia_tensor_f32(l->params[p->w].value)));
    DNNL_TRY(bind(c->y, glia_tensor_f32(a->out)));
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, c->x}, {DNNL_ARG_WEIGHTS, c->w}, {DNNL_ARG_DST, c->y}};
    int n = 3;
    if (p->b >= 0) {
        DNNL_TRY(bind(c->b, glia_tensor_f32(l->params[p->b].value)));
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, c->b};
    }
    return run(l, c->fwd, n, args);
fail:
    return st;
}

/* dst[i] += src[i] */
static void add_into(float *dst, const float *src, int64_t n)
{
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) dst[i] += src[i];
}

static glia_status conv2d_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    struct conv2d *p = l->priv;
    struct conv_cache *c = &p->c;
    const struct glia_tensor *x = a->in[0];
    glia_status st = check_input(l, x);
    if (!st) st = conv_prepare(l, x->shape.dim[0], x->shape.dim[2], x->shape.dim[3], true);
    if (st) return st;
    DNNL_TRY(bind(c->dy, glia_tensor_f32(a->dout)));
    /* input gradient: oneDNN overwrites diff_src, so accumulate through a scratch buffer */
    if (a->din[0]) {
        int64_t nx = glia_tensor_numel(x);
        float *dx = glia_tensor_f32(a->din[0]), *target = dx;
        if (a->din_accumulate[0]) {
            if (!c->dx_scratch && !(c->dx_scratch = malloc((size_t)nx * sizeof(float)))) return GLIA_ENOMEM;
            target = c->dx_scratch;
        }
        DNNL_TRY(bind(c->w, glia_tensor_f32(l->params[p->w].value)));
        DNNL_TRY(bind(c->dx, target));
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_DIFF_DST, c->dy}, {DNNL_ARG_WEIGHTS, c->w}, {DNNL_ARG_DIFF_SRC, c->dx}};
        if ((st = run(l, c->bwd_d, 3, args))) return st;
        if (target != dx) add_into(dx, target, nx);
    }
    /* parameter gradients: written straight into unset ones, through scratch into set ones */
    struct glia_param *pw = &l->params[p->w], *pb = p->b >= 0 ? &l->params[p->b] : NULL;
    float *dw = glia_tensor_f32(pw->grad), *db = pb ? glia_tensor_f32(pb->grad) : NULL;
    float *dw_t = pw->grad_unset ? dw : p->dw_scratch, *db_t = pb && pb->grad_unset ? db : p->db_scratch;
    DNNL_TRY(bind(c->x, glia_tensor_f32(x)));
    DNNL_TRY(bind(c->dw, dw_t));
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, c->x}, {DNNL_ARG_DIFF_DST, c->dy}, {DNNL_ARG_DIFF_WEIGHTS, c->dw}};
    int n = 3;
    if (pb) {
        DNNL_TRY(bind(c->db, db_t));
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DIFF_BIAS, c->db};
    }
    if ((st = run(l, c->bwd_w, n, args))) return st;
    if (dw_t != dw) add_into(dw, dw_t, glia_tensor_numel(pw->grad));
    if (pb && db_t != db) add_into(db, db_t, p->F);
    return GLIA_OK;
fail:
    return st;
}

static uint64_t conv2d_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    const struct conv2d *p = l->priv;
    uint64_t OH = (uint64_t)out_extent(p, in[0].dim[2]), OW = (uint64_t)out_extent(p, in[0].dim[3]);
    return 2ull * (uint64_t)in[0].dim[0] * (uint64_t)p->F * OH * OW * (uint64_t)(p->C / p->g) *
           (uint64_t)(p->k * p->k);
}

static const struct glia_layer_ops conv2d_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "conv2d",
    .impl = "cpu",
    .doc = "2-D convolution, input (N, C, H, W) -> (N, filters, OH, OW); stride, padding, dilation, groups",
    .keys = conv2d_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .device_type = GLIA_DEVICE_CPU,
    .create = conv2d_create,
    .destroy = conv2d_destroy,
    .infer_shape = conv2d_infer,
    .forward = conv2d_forward,
    .backward = conv2d_backward,
    .flops = conv2d_flops,
};

static glia_status conv2d_init(struct glia_registry *r) { return glia_register_layer(r, &conv2d_ops); }

GLIA_PLUGIN_DEFINE(conv2d, "1.0", "MIT", "2-D convolution (CPU: oneDNN)", conv2d_init)
