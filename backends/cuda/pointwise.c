/* backends/cuda/pointwise.c — the CUDA impls of relu, leaky_relu, sigmoid, tanh, gelu and add
 * (fixed kernels, pointwise_kernels.cu) and of pointwise (the expression compiled with NVRTC at
 * create, pointwise_jit.c). Not their descriptions (keys, create, shapes, flops): those are shared
 * with the CPU plugins (the _desc.c files under plugins/layers/activation, add and pointwise). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda_internal.h"
#include "pointwise_jit.h"
#include "pointwise_kernels.h"
#include "../../plugins/layers/activation/activation_desc.h"
#include "../../plugins/layers/add/add_desc.h"

static cudaStream_t stream_of(const struct glia_layer *l) { return glia__cuda_of(l->backend)->stream; }

/* ---- operands ---- */

/* What the operands of one elementwise call checked so far have in common. */
struct operands {
    int64_t n;                        /* elements of each */
    bool any;                         /* one was checked: f is set */
    enum glia_memory_format f;        /* the format of the first */
};

/* t must be f32 on a CUDA device, have o->n elements, be dense (contiguous or channels_last) and
 * share the others' memory format: then elementwise over memory is elementwise over elements.
 * role names it in the error ("input 2", "output"). */
static glia_status check_operand(const struct glia_layer *l, struct operands *o, const struct glia_tensor *t,
                                 const char *role)
{
    const char *type = l->ops->type;
    if (t->dtype != GLIA_F32 || t->device.type != GLIA_DEVICE_CUDA)
        return glia_error(l->ctx, GLIA_EUNSUPPORTED, "%s [%s]: the %s is %s on %s; the cuda impl takes f32 on the GPU", type,
                          l->name, role, glia_dtype_name(t->dtype), t->device.type == GLIA_DEVICE_CUDA ? "the GPU" : "the host");
    if (glia_tensor_numel(t) != o->n)
        return glia_error(l->ctx, GLIA_ESHAPE, "%s [%s]: the %s has %lld elements, expected %lld", type, l->name, role,
                          (long long)glia_tensor_numel(t), (long long)o->n);
    enum glia_memory_format f = glia_tensor_memory_format(t);
    if (f != GLIA_CHANNELS_LAST && !glia_tensor_is_contiguous(t))
        return glia_error(l->ctx, GLIA_EUNSUPPORTED, "%s [%s]: the %s is strided (neither contiguous nor channels_last)",
                          type, l->name, role);
    if (!o->any) {
        o->any = true;
        o->f = f;
    } else if (f != o->f) {
        return glia_error(l->ctx, GLIA_EUNSUPPORTED, "%s [%s]: the %s is %s but the first operand is %s; elementwise "
                          "operands must share one memory format", type, l->name, role, glia_memory_format_name(f),
                          glia_memory_format_name(o->f));
    }
    return GLIA_OK;
}

static float *dev_f32(const struct glia_tensor *t) { return (float *)t->data; }

/* ---- relu, leaky_relu, sigmoid, tanh, gelu ---- */

static float act_slope(const struct glia_layer *l, enum glia__cuda_act act)
{
    return act == GLIA__ACT_LEAKY_RELU ? ((const struct glia__leaky_relu *)l->priv)->slope : 0.0f;
}

/* y(n) = act(x(n)) */
static glia_status act_forward(struct glia_layer *l, const struct glia_fwd *a, enum glia__cuda_act act)
{
    struct operands o = {.n = glia_tensor_numel(a->out)};
    glia_status st = check_operand(l, &o, a->in[0], "input");
    if (!st) st = check_operand(l, &o, a->out, "output");
    if (st) return st;
    CUDA_TRY(l->ctx, glia__cuda_act_forward(act, dev_f32(a->out), dev_f32(a->in[0]), o.n, act_slope(l, act),
                                            stream_of(l)));
fail:
    return st;
}

/* dx(n) (+)= dy(n) * act'(saved(n)), saved the input or the output as the CPU impl uses */
static glia_status act_backward(struct glia_layer *l, const struct glia_bwd *a, enum glia__cuda_act act)
{
    if (!a->din[0]) return GLIA_OK;
    const struct glia_tensor *saved = glia__cuda_act_reads_input(act) ? a->in[0] : a->out;
    struct operands o = {.n = glia_tensor_numel(a->dout)};
    glia_status st = check_operand(l, &o, a->dout, "output gradient");
    if (!st) st = check_operand(l, &o, saved, saved == a->out ? "output" : "input");
    if (!st) st = check_operand(l, &o, a->din[0], "input gradient");
    if (st) return st;
    CUDA_TRY(l->ctx, glia__cuda_act_backward(act, dev_f32(a->din[0]), dev_f32(a->dout), dev_f32(saved), o.n,
                                             act_slope(l, act), a->din_accumulate[0], stream_of(l)));
fail:
    return st;
}

#define ACT_PASSES(name, act)                                                                  \
    static glia_status name##_forward(struct glia_layer *l, const struct glia_fwd *a)          \
    {                                                                                          \
        return act_forward(l, a, act);                                                         \
    }                                                                                          \
    static glia_status name##_backward(struct glia_layer *l, const struct glia_bwd *a)         \
    {                                                                                          \
        return act_backward(l, a, act);                                                        \
    }
ACT_PASSES(relu, GLIA__ACT_RELU)
ACT_PASSES(leaky_relu, GLIA__ACT_LEAKY_RELU)
ACT_PASSES(sigmoid, GLIA__ACT_SIGMOID)
ACT_PASSES(tanh, GLIA__ACT_TANH)
ACT_PASSES(gelu, GLIA__ACT_GELU)
#undef ACT_PASSES

#define ACT_OPS(name, doc_, keys_, create_, destroy_, flags_)                                        \
    static const struct glia_layer_ops name##_ops = {                                          \
        .struct_size = sizeof(struct glia_layer_ops),                                          \
        .type = #name,                                                                         \
        .impl = "cuda",                                                                        \
        .doc = doc_,                                                                           \
        .keys = keys_,                                                                         \
        .min_inputs = 1,                                                                       \
        .max_inputs = 1,                                                                       \
        .flags = GLIA_LAYER_CHANNELS_LAST | GLIA_LAYER_CAPTURABLE | (flags_), /* any format */ \
        .device_type = GLIA_DEVICE_CUDA,                                                       \
        .create = create_,                                                                     \
        .destroy = destroy_,                                                                   \
        .infer_shape = glia__activation_infer,                                                 \
        .forward = name##_forward,                                                             \
        .backward = name##_backward,                                                           \
        .flops = glia__##name##_flops,                                                         \
    };
ACT_OPS(relu, GLIA__RELU_DOC, NULL, glia__activation_create, NULL, GLIA_LAYER_BWD_NO_INPUT)
ACT_OPS(leaky_relu, GLIA__LEAKY_RELU_DOC, glia__leaky_relu_keys, glia__leaky_relu_create, glia__leaky_relu_destroy,
        GLIA_LAYER_BWD_NO_OUTPUT)
ACT_OPS(sigmoid, GLIA__SIGMOID_DOC, NULL, glia__activation_create, NULL, GLIA_LAYER_BWD_NO_INPUT)
ACT_OPS(tanh, GLIA__TANH_DOC, NULL, glia__activation_create, NULL, GLIA_LAYER_BWD_NO_INPUT)
ACT_OPS(gelu, GLIA__GELU_DOC, NULL, glia__activation_create, NULL, GLIA_LAYER_BWD_NO_OUTPUT)
#undef ACT_OPS

/* ---- add ---- */

#define ADD_STACK 16   /* inputs handled without a heap array */

/* y(n) = x_0(n) + x_1(n) + ... (left to right, as the CPU) */
static glia_status add_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const float *stack[ADD_STACK], **x = stack;
    struct operands o = {.n = glia_tensor_numel(a->out)};
    glia_status st = check_operand(l, &o, a->out, "output");
    char role[32];
    for (int k = 0; k < a->n_in && !st; k++) {
        snprintf(role, sizeof role, "input %d", k + 1);
        st = check_operand(l, &o, a->in[k], role);
    }
    if (st) return st;
    if (a->n_in > ADD_STACK && !(x = malloc((size_t)a->n_in * sizeof *x)))
        return glia_error(l->ctx, GLIA_ENOMEM, "add [%s]: out of memory", l->name);
    for (int k = 0; k < a->n_in; k++) x[k] = dev_f32(a->in[k]);
    CUDA_TRY(l->ctx, glia__cuda_add_forward(dev_f32(a->out), x, a->n_in, o.n, stream_of(l)));
fail:
    if (x != stack) free(x);
    return st;
}

/* dx_k(n) (+)= dy(n) for every input k with a gradient */
static glia_status add_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    float *stack[ADD_STACK], **dx = stack;
    bool stack_acc[ADD_STACK], *acc = stack_acc;
    struct operands o = {.n = glia_tensor_numel(a->dout)};
    glia_status st = check_operand(l, &o, a->dout, "output gradient");
    char role[40];
    for (int k = 0; k < a->n_in && !st; k++) {
        if (!a->din[k]) continue;
        snprintf(role, sizeof role, "gradient of input %d", k + 1);
        st = check_operand(l, &o, a->din[k], role);
    }
    if (st) return st;
    if (a->n_in > ADD_STACK) {
        dx = malloc((size_t)a->n_in * sizeof *dx);
        acc = malloc((size_t)a->n_in * sizeof *acc);
        if (!dx || !acc) {
            st = glia_error(l->ctx, GLIA_ENOMEM, "add [%s]: out of memory", l->name);
            goto fail;
        }
    }
    for (int k = 0; k < a->n_in; k++) {
        dx[k] = a->din[k] ? dev_f32(a->din[k]) : NULL;
        acc[k] = a->din[k] && a->din_accumulate[k];
    }
    CUDA_TRY(l->ctx, glia__cuda_add_backward(dx, acc, a->n_in, dev_f32(a->dout), o.n, stream_of(l)));
fail:
    if (dx != stack) free(dx);
    if (acc != stack_acc) free(acc);
    return st;
}

static const struct glia_layer_ops add_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "add",
    .impl = "cuda",
    .doc = GLIA__ADD_DOC,
    .keys = NULL,
    .min_inputs = 2,
    .max_inputs = -1,
    .flags = GLIA_LAYER_CHANNELS_LAST | GLIA_LAYER_BWD_NO_INPUT | GLIA_LAYER_BWD_NO_OUTPUT | GLIA_LAYER_CAPTURABLE, /* any format */
    .device_type = GLIA_DEVICE_CUDA,
    .create = glia__add_create,
    .infer_shape = glia__add_infer,
    .forward = add_forward,
    .backward = add_backward,
    .flops = glia__add_flops,
};

/* ---- pointwise ---- */

struct cuda_pointwise {
    struct glia__pointwise desc;   /* first: glia__pointwise_flops reads l->priv as one */
    struct glia__pw_kernels k;     /* borrowed from the process-wide JIT cache */
};

/* Parses and differentiates expr (the shared description), then compiles both kernels for this
 * GPU, so that a bad expression or a compile failure is a configuration error naming the key. */
static glia_status pw_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                             int n_in)
{
    if (!l->backend || l->backend->ops->device_type != GLIA_DEVICE_CUDA)
        return glia_section_error(cfg, NULL, GLIA_EINVAL, "pointwise impl 'cuda' runs on a CUDA device only");
    struct cuda_pointwise *p = calloc(1, sizeof *p);
    if (!p) return glia_error(l->ctx, GLIA_ENOMEM, "pointwise: out of memory");
    glia_status st = glia__pointwise_build(l, cfg, in, n_in, &p->desc);
    if (st) {
        free(p);
        return st;
    }
    const struct glia__cuda *c = glia__cuda_of(l->backend);
    char err[512];
    st = glia__pw_jit_get(&p->desc, c->cc_major, c->cc_minor, &p->k, err, sizeof err);
    if (st) {
        char text[160];
        if (expr_print(p->desc.f, text, sizeof text) < 0) strcpy(text + sizeof text - 4, "...");
        glia_section_error(cfg, "expr", st, "'%s' on cuda:%d (sm_%d%d): %s", text, c->device, c->cc_major, c->cc_minor,
                           err);
        glia__pointwise_clear(&p->desc);
        free(p);
        return st;
    }
    l->priv = p;
    return GLIA_OK;
}

static void pw_destroy(struct glia_layer *l)
{
    struct cuda_pointwise *p = l->priv;
    if (!p) return;
    glia__pointwise_clear(&p->desc);
    free(p);
    l->priv = NULL;
}

/* y(n) = f(x_1(n), ..., x_k(n)); dropout() draws its mask from the step's seed */
static glia_status pw_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    struct cuda_pointwise *p = l->priv;
    const float *x[EXPR_MAX_VARS] = {0};
    struct operands o = {.n = glia_tensor_numel(a->out)};
    glia_status st = check_operand(l, &o, a->out, "output");
    char role[32];
    for (int k = 0; k < a->n_in && k < EXPR_MAX_VARS && !st; k++) {
        snprintf(role, sizeof role, "input %d", k + 1);
        st = check_operand(l, &o, a->in[k], role);
        x[k] = dev_f32(a->in[k]);
    }
    if (st) return st;
    struct glia__seed_at seed = glia__seed_of(a);
    if (a->train) p->desc.seed = seed;
    struct expr_site site = glia__pointwise_site(a->out, seed, a->train);
    CUDA_TRY(l->ctx, glia__pw_jit_forward(&p->k, dev_f32(a->out), x, o.n, &site, stream_of(l)));
fail:
    return st;
}

/* dx_k(n) (+)= dy(n) * df/dx_k(x_1(n), ..., x_k(n)), all k in one pass, with the last training
 * forward's mask */
static glia_status pw_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct cuda_pointwise *p = l->priv;
    const float *x[EXPR_MAX_VARS] = {0};
    float *d[EXPR_MAX_VARS] = {0};
    bool acc[EXPR_MAX_VARS] = {0};
    struct operands o = {.n = glia_tensor_numel(a->dout)};
    glia_status st = check_operand(l, &o, a->dout, "output gradient");
    char role[40];
    for (int k = 0; k < a->n_in && k < EXPR_MAX_VARS && !st; k++) {
        snprintf(role, sizeof role, "input %d", k + 1);
        st = check_operand(l, &o, a->in[k], role);
        x[k] = dev_f32(a->in[k]);
        if (st || !a->din[k]) continue;
        snprintf(role, sizeof role, "gradient of input %d", k + 1);
        st = check_operand(l, &o, a->din[k], role);
        d[k] = dev_f32(a->din[k]);
        acc[k] = a->din_accumulate[k];
    }
    if (st) return st;
    struct expr_site site = glia__pointwise_site(a->dout, p->desc.seed, true);
    CUDA_TRY(l->ctx, glia__pw_jit_backward(&p->k, d, acc, dev_f32(a->dout), x, o.n, &site, stream_of(l)));
fail:
    return st;
}

static const struct glia_layer_ops pointwise_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "pointwise",
    .impl = "cuda",
    .doc = GLIA__POINTWISE_DOC,
    .keys = glia__pointwise_keys,
    .min_inputs = 1,
    .max_inputs = 4,
    .flags = GLIA_LAYER_CHANNELS_LAST | GLIA_LAYER_BWD_NO_OUTPUT | GLIA_LAYER_CAPTURABLE, /* any memory format; backward reads the inputs */
    .device_type = GLIA_DEVICE_CUDA,
    .create = pw_create,
    .destroy = pw_destroy,
    .infer_shape = glia__pointwise_infer,
    .forward = pw_forward,
    .backward = pw_backward,
    .flops = glia__pointwise_flops,
};

glia_status glia__cuda_register_pointwise(struct glia_registry *r)
{
    const struct glia_layer_ops *all[] = {&relu_ops, &leaky_relu_ops, &sigmoid_ops, &tanh_ops,
                                          &gelu_ops, &add_ops,        &pointwise_ops};
    glia_status st = GLIA_OK;
    for (size_t i = 0; i < sizeof all / sizeof all[0] && !st; i++) st = glia_register_layer(r, all[i]);
    return st;
}
