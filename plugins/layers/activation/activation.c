/* plugins/layers/activation — the activation types relu, leaky_relu, sigmoid, tanh and gelu (erf form or, with
 * approximate = tanh, GPT-2's), each its expression, and their one CPU kernel, which interprets it. Not PReLU. */

/* Each type is its expression (glia/expr.h, given by its pointwise slot); the kernel evaluates it forward and
 * its symbolic gradient backward. This one source is built into relu.so, leaky_relu.so, sigmoid.so, tanh.so and
 * gelu.so, each registering the type that GLIA_ACTIVATION names, so that `type = relu` loads relu.so. */
#include <glia/glia.h>
#include <glia/types/activation.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#ifndef GLIA_ACTIVATION
#error "GLIA_ACTIVATION names the type this plugin registers: relu, leaky_relu, sigmoid, tanh or gelu"
#endif
#define ACT_STR_(x) #x
#define ACT_STR(x) ACT_STR_(x)
#define ACT_CAT_(a, b, c) a##b##c
#define ACT_CAT(a, b, c) ACT_CAT_(a, b, c)
#define ACT_relu_DESC "ReLU activation"
#define ACT_leaky_relu_DESC "leaky ReLU activation"
#define ACT_sigmoid_DESC "sigmoid activation"
#define ACT_tanh_DESC "tanh activation"
#define ACT_gelu_DESC "GELU activation, erf form or tanh approximation"

/* One activation: its type, its CPU kernel, and its forward flops per element (a transcendental counts as
 * one): relu 1 (compare), tanh 1, leaky_relu 2 (compare and multiply), sigmoid 3 (exp, add, divide), gelu 5
 * (scale, erf, add, two multiplies). */
struct activation {
    struct glia_layer_type type;
    struct glia_kernel cpu;
    uint64_t flops;
};

static const struct activation *activation_of(const struct glia_layer *l)
{
    return (const struct activation *)(const void *)((const char *)l->type - offsetof(struct activation, type));
}

static glia_status act_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                              int n_in)
{
    return GLIA_OK;  /* nothing to read, nothing to keep */
}

static const struct glia_key gelu_keys[] = {
    GLIA_KEY("approximate", GLIA_KEY_ENUM, "none", "none: the erf form; tanh: GPT-2's tanh approximation "
             "(nn.GELU(approximate='tanh'))", .choices = "none|tanh"),
    GLIA_KEY_END};

static glia_status gelu_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                               int n_in)
{
    ((struct glia_gelu_attrs *)l->attrs)->tanh = !strcmp(glia_section_str(cfg, "approximate"), "tanh");
    return GLIA_OK;
}

static const struct glia_key leaky_relu_keys[] = {
    GLIA_KEY("negative_slope", GLIA_KEY_FLOAT, "0.01", "slope for x <= 0", .min = 0, .max = 1),
    GLIA_KEY_END};

static glia_status leaky_relu_create(struct glia_layer *l, const struct glia_section *cfg,
                                     const struct glia_shape *in, int n_in)
{
    ((struct glia_leaky_relu_attrs *)l->attrs)->slope = (float)glia_section_float(cfg, "negative_slope");
    return GLIA_OK;
}

static glia_status act_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in, struct glia_shape *out)
{
    *out = in[0];
    return GLIA_OK;
}

static uint64_t act_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    return activation_of(l)->flops * (uint64_t)glia_shape_numel(&in[0]);
}

/* ---- the expressions: exactly the texts that fused layers nest, so that fusing changes no bit ---- */

/* torch.relu's clamp_min: NaN stays NaN (a diverging run shows it), -0 stays -0 */
static int relu_text(const struct glia_layer *l, int n_in, char *buf, size_t size)
{
    return snprintf(buf, size, "relu(x)");
}

/* x > 0 ? x : s x (NaN gives NaN); the slope as the float the layer multiplies by, written so it reads back */
static int leaky_relu_text(const struct glia_layer *l, int n_in, char *buf, size_t size)
{
    double s = ((const struct glia_leaky_relu_attrs *)l->attrs)->slope;
    return snprintf(buf, size, "select(gt(x, 0), x, %.9g * x)", s);
}

/* computed as 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0, e = exp(-|x|): exp never overflows */
static int sigmoid_text(const struct glia_layer *l, int n_in, char *buf, size_t size)
{
    return snprintf(buf, size, "sigmoid(x)");
}

static int tanh_text(const struct glia_layer *l, int n_in, char *buf, size_t size)
{
    return snprintf(buf, size, "tanh(x)");
}

/* the exact form x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))), or the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x +
 * 0.044715 x^3))) */
static int gelu_text(const struct glia_layer *l, int n_in, char *buf, size_t size)
{
    if (((const struct glia_gelu_attrs *)l->attrs)->tanh)
        return snprintf(buf, size, "0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x^3)))");
    return snprintf(buf, size, "0.5 * x * (1 + erf(x * 0.70710678118654752))");
}

/* ---- the CPU kernel of every activation: the type's expression, interpreted ---- */

/* l->state: the expression and its gradient, parsed and built at prepare */
struct act_state {
    struct glia_expr *f;     /* y = f(x) */
    struct glia_expr *grad;  /* dx = grad(s, dy) (variables x, y): s is the output y with
                                GLIA_KERNEL_BWD_NO_INPUT (relu, sigmoid, tanh), else the input x */
};

static void act_destroy(struct glia_layer *l)
{
    struct act_state *s = l->state;
    glia_expr_free(s->f);
    glia_expr_free(s->grad);
}

static glia_status act_prepare(struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    struct act_state *s = l->state;
    return glia_activation_exprs(l, &s->f, &s->grad);
}

/* y(n) = f(x(n)) */
static glia_status act_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct act_state *s = l->state;
    const float *x[1] = {glia_tensor_f32(a->in[0])};
    if (glia_expr_eval_ex(s->f, x, glia_tensor_numel(a->out), NULL, false, NULL, glia_tensor_f32(a->out)))
        return glia_error(l->ctx, GLIA_ENOMEM, "%s [%s]: out of memory", l->type->name, l->name);
    return GLIA_OK;
}

/* dx(n) (+)= grad(s(n), dy(n)), s the output or the input */
static glia_status act_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    if (!a->din[0]) return GLIA_OK;
    const struct act_state *s = l->state;
    bool over_output = l->kernel->flags & GLIA_KERNEL_BWD_NO_INPUT;
    const float *v[2] = {glia_tensor_f32(over_output ? a->out : a->in[0]), glia_tensor_f32(a->dout)};
    if (glia_expr_eval_ex(s->grad, v, glia_tensor_numel(a->dout), NULL, a->din_accumulate[0], NULL,
                          glia_tensor_f32(a->din[0])))
        return glia_error(l->ctx, GLIA_ENOMEM, "%s [%s]: out of memory", l->type->name, l->name);
    return GLIA_OK;
}

#define ACTIVATION(name_, doc_, keys_, create_, attrs_size_, text_, kernel_flags_, flops_)                    \
    {                                                                                                      \
        .type = {.struct_size = sizeof(struct glia_layer_type), .name = #name_, .doc = doc_, .keys = keys_,  \
                 .min_inputs = 1, .max_inputs = 1, .attrs_size = attrs_size_, .create = create_,          \
                 .infer_shape = act_infer, .flops = act_flops, .pointwise = text_},                         \
        .cpu = {.struct_size = sizeof(struct glia_kernel), .type = #name_, .impl = "cpu",                    \
                .doc = "its expression, interpreted (OpenMP)", .device_type = GLIA_DEVICE_CPU,             \
                .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_DECODE | (kernel_flags_), /* elementwise */ \
                .state_size = sizeof(struct act_state), .prepare = act_prepare, .destroy = act_destroy,    \
                .forward = act_forward, .backward = act_backward},                                          \
        .flops = flops_,                                                                                   \
    }

/* Backward reads what the gradient is a function of: relu's, sigmoid's and tanh's are functions of the output;
 * leaky_relu's needs the input's sign (a slope of 0 hides it in the output), gelu's the input itself. */
static const struct activation activations[] = {
    ACTIVATION(relu, "y = max(x, 0)", NULL, act_create, 0, relu_text, GLIA_KERNEL_BWD_NO_INPUT, 1),
    ACTIVATION(leaky_relu, "y = x > 0 ? x : negative_slope * x", leaky_relu_keys, leaky_relu_create,
               sizeof(struct glia_leaky_relu_attrs), leaky_relu_text, GLIA_KERNEL_BWD_NO_OUTPUT, 2),
    ACTIVATION(sigmoid, "y = 1 / (1 + exp(-x))", NULL, act_create, 0, sigmoid_text, GLIA_KERNEL_BWD_NO_INPUT, 3),
    ACTIVATION(tanh, "y = tanh(x)", NULL, act_create, 0, tanh_text, GLIA_KERNEL_BWD_NO_INPUT, 1),
    ACTIVATION(gelu, "y = 0.5 x (1 + erf(x / sqrt(2))), or approximate = tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))",
               gelu_keys, gelu_create, sizeof(struct glia_gelu_attrs), gelu_text, GLIA_KERNEL_BWD_NO_OUTPUT, 5),
};

/* Registers the activation this plugin is named after. */
static glia_status activation_init(struct glia_registry *r)
{
    for (size_t i = 0; i < sizeof activations / sizeof activations[0]; i++) {
        const struct activation *a = &activations[i];
        if (strcmp(a->type.name, ACT_STR(GLIA_ACTIVATION))) continue;
        glia_status st = glia_register_layer_type(r, &a->type);
        return st ? st : glia_register_kernel(r, &a->cpu);
    }
    return glia_error(glia_registry_context(r), GLIA_EPLUGIN, "%s: no such activation in this plugin",
                      ACT_STR(GLIA_ACTIVATION));
}

GLIA_PLUGIN_DEFINE(GLIA_ACTIVATION, "2.0", "MIT", ACT_CAT(ACT_, GLIA_ACTIVATION, _DESC) " (CPU: its expression, interpreted)",
                   activation_init)
