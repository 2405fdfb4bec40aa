/* plugins/layers/pointwise — layer type pointwise (`expr = x * sigmoid(x)` of 1 to 4 inputs of one shape) and its CPU
 * kernel, which interprets the expression and its derivatives. Not broadcasting, not a fuser of other layers. */
#include <glia/glia.h>
#include <glia/types/pointwise.h>
#include <stdlib.h>
#include <string.h>

static const struct glia_key pointwise_keys[] = {
    GLIA_KEY("expr", GLIA_KEY_STRING, NULL, "the function, e.g. x * sigmoid(x); inputs are x, y, z, w",
             .required = true),
    GLIA_KEY_END,
};

/* Frees what the attributes hold (also those of a create that failed half-way). */
static void pointwise_destroy(struct glia_layer *l)
{
    struct glia_pointwise_attrs *p = l->attrs;
    free(p->text);
    glia_expr_free(p->f);
    for (int k = 0; k < GLIA_EXPR_MAX_VARS; k++) glia_expr_free(p->df[k]);
    memset(p, 0, sizeof *p);
}

/* Checks the input shapes, parses `expr` and differentiates it for each input. */
static glia_status pointwise_build(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                   int n_in)
{
    struct glia_pointwise_attrs *p = l->attrs;
    char a[64], b[64], err[256];
    for (int k = 1; k < n_in; k++)
        if (!glia_shape_equal(&in[k], &in[0]))
            return glia_section_error(cfg, "inputs", GLIA_ESHAPE, "pointwise needs equal shapes: input 1 is %s, input %d is %s",
                                      glia_shape_str(&in[0], a, sizeof a), k + 1, glia_shape_str(&in[k], b, sizeof b));
    p->n_in = n_in;
    const char *text = glia_section_str(cfg, "expr");
    if (glia_expr_parse(text, n_in, &p->f, err, sizeof err)) {
        /* the parser's messages start "expr: "; the section error already names the key */
        const char *msg = strncmp(err, "expr: ", 6) ? err : err + 6;
        return glia_section_error(cfg, "expr", GLIA_ECONFIG, "%s", msg);
    }
    if (!(p->text = strdup(text))) return glia_error(l->ctx, GLIA_ENOMEM, "pointwise: out of memory");
    for (int k = 0; k < n_in && k < GLIA_EXPR_MAX_VARS; k++) {
        if (!(p->df[k] = glia_expr_diff(p->f, k))) return glia_error(l->ctx, GLIA_ENOMEM, "pointwise: out of memory");
        p->same_df[k] = 0;
        for (int j = 0; j < k; j++) p->same_df[k] |= (unsigned)glia_expr_same(p->df[j], p->df[k]) << j;
    }
    return GLIA_OK;
}

static glia_status pointwise_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                    int n_in)
{
    glia_status st = pointwise_build(l, cfg, in, n_in);
    if (st) pointwise_destroy(l);  /* no destroy follows a failed create */
    return st;
}

/* The output has the inputs' (common) shape. */
static glia_status pointwise_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                   struct glia_shape *out)
{
    for (int k = 1; k < n_in; k++)
        if (!glia_shape_equal(&in[k], &in[0])) return GLIA_ESHAPE;
    *out = in[0];
    return GLIA_OK;
}

/* One per computing node (a transcendental counts as one) per element. */
static uint64_t pointwise_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    const struct glia_pointwise_attrs *p = l->attrs;
    return (uint64_t)glia_expr_op_count(p->f) * (uint64_t)glia_shape_numel(&in[0]);
}

/* Its own expression, as written: fusing a pointwise layer nests its text in the fused one. */
static int pointwise_text(const struct glia_layer *l, int n_in, char *buf, size_t size)
{
    const struct glia_pointwise_attrs *p = l->attrs;
    return snprintf(buf, size, "%s", p->text);
}

/* ---- the CPU kernel: l->state is the seed of the last training forward (backward's dropout() mask) ---- */

/* y(n) = f(x_1(n), ..., x_k(n)); dropout() draws its mask from the step's seed */
static glia_status pointwise_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_pointwise_attrs *p = l->attrs;
    const float *vars[GLIA_EXPR_MAX_VARS] = {0};
    for (int k = 0; k < a->n_in && k < GLIA_EXPR_MAX_VARS; k++) vars[k] = glia_tensor_f32(a->in[k]);
    struct glia_seed_at seed = glia_seed_of(a);
    if (a->train) *(struct glia_seed_at *)l->state = seed;
    struct glia_expr_site site = glia_pointwise_site(a->out, seed, a->train);
    if (glia_expr_eval_ex(p->f, vars, glia_tensor_numel(a->out), NULL, false, &site, glia_tensor_f32(a->out)))
        return glia_error(l->ctx, GLIA_ENOMEM, "pointwise [%s]: out of memory", l->name);
    return GLIA_OK;
}

/* dx_k(n) (+)= dy(n) * df/dx_k(x_1(n), ..., x_k(n)), with the last training forward's mask */
static glia_status pointwise_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_pointwise_attrs *p = l->attrs;
    const float *vars[GLIA_EXPR_MAX_VARS] = {0};
    for (int k = 0; k < a->n_in && k < GLIA_EXPR_MAX_VARS; k++) vars[k] = glia_tensor_f32(a->in[k]);
    const float *dy = glia_tensor_f32(a->dout);
    int64_t n = glia_tensor_numel(a->dout);
    struct glia_expr_site site = glia_pointwise_site(a->dout, *(const struct glia_seed_at *)l->state, true);
    bool own[GLIA_EXPR_MAX_VARS];  /* input k's gradient holds dy * df/dx_k alone */
    for (int k = 0; k < a->n_in && k < GLIA_EXPR_MAX_VARS; k++) {
        own[k] = false;
        if (!a->din[k]) continue;
        float *dk = glia_tensor_f32(a->din[k]);
        int same = -1;  /* the same derivative already computed (x + y: both 1) */
        for (int j = 0; j < k && same < 0; j++)
            if (own[j] && (p->same_df[k] >> j & 1)) same = j;
        if (same >= 0) {
            const float *dj = glia_tensor_f32(a->din[same]);
            if (a->din_accumulate[k])
                for (int64_t i = 0; i < n; i++) dk[i] += dj[i];
            else if (dk != dj)
                memcpy(dk, dj, sizeof *dk * (size_t)n);
        } else if (glia_expr_eval_ex(p->df[k], vars, n, dy, a->din_accumulate[k], &site, dk)) {
            return glia_error(l->ctx, GLIA_ENOMEM, "pointwise [%s]: out of memory", l->name);
        }
        for (int j = 0; j < k; j++)  /* an input fed by the same layer shares the buffer: no longer its own */
            if (own[j] && glia_tensor_f32(a->din[j]) == dk) own[j] = false;
        own[k] = !a->din_accumulate[k];
    }
    return GLIA_OK;
}

static const struct glia_layer_type pointwise_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "pointwise",
    .doc = "elementwise expression of 1 to 4 inputs of one shape (expr = x * sigmoid(x)), symbolic backward",
    .keys = pointwise_keys,
    .min_inputs = 1,
    .max_inputs = 4,
    .attrs_size = sizeof(struct glia_pointwise_attrs),
    .create = pointwise_create,
    .destroy = pointwise_destroy,
    .infer_shape = pointwise_infer,
    .flops = pointwise_flops,
    .pointwise = pointwise_text,
};

static const struct glia_kernel pointwise_cpu = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "pointwise",
    .impl = "cpu",
    .doc = "interpreted in blocks (OpenMP)",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_DECODE, /* any format; backward reads
                                                                                             the inputs */
    .state_size = sizeof(struct glia_seed_at),
    .forward = pointwise_forward,
    .backward = pointwise_backward,
};

static glia_status pointwise_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &pointwise_type);
    return st ? st : glia_register_kernel(r, &pointwise_cpu);
}

GLIA_PLUGIN_DEFINE(pointwise, "2.0", "MIT", "elementwise expression layer with symbolic backward (CPU)", pointwise_init)
