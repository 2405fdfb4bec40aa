/* glia/types/activation.h — what the kernels of relu, leaky_relu, sigmoid, tanh and gelu share: leaky_relu's and gelu's attributes
 * and the type's expression with its gradient. Not a kernel (plugins/layers/activation interprets, cuda.so compiles). */
#ifndef GLIA_TYPES_ACTIVATION_H
#define GLIA_TYPES_ACTIVATION_H

#include <glia/glia.h>
#include <glia/expr.h>

/* l->attrs of a gelu layer: the erf form, or (approximate = tanh) GPT-2's tanh approximation. */
struct glia_gelu_attrs {
    int tanh;  /* key approximate: 0 none, 1 tanh */
};

/* l->attrs of a leaky_relu layer: y = x > 0 ? x : slope * x. */
struct glia_leaky_relu_attrs {
    float slope;  /* key negative_slope */
};

/* The activation of layer l as expressions, from its type's pointwise slot: *f, y = f(x) (variable x), and
 * *grad, the gradient dx = grad(s, dy) over variables x = s and y = dy (glia_expr_grad: relu's dy where
 * y > 0, else 0, whatever dy is), s the output y when l's kernel reads no input in backward
 * (GLIA_KERNEL_BWD_NO_INPUT), else the input x. Both (owned) by the caller (glia_expr_free). On failure
 * both NULL and the context error names the layer: a type without an expression of x alone, or a kernel
 * that claims a gradient over the output where there is none, is a plugin error. */
static inline glia_status glia_activation_exprs(struct glia_layer *l, struct glia_expr **f, struct glia_expr **grad)
{
    const char *type = l->type->name;
    bool over_output = (l->kernel->flags & GLIA_KERNEL_BWD_NO_INPUT) != 0;
    char text[256], err[256];
    int len = l->type->pointwise ? l->type->pointwise(l, 1, text, sizeof text) : -1;
    *f = *grad = NULL;
    if (len < 0 || (size_t)len >= sizeof text)
        return glia_error(l->ctx, GLIA_EPLUGIN, "%s [%s]: the type gives no expression of at most %d characters",
                          type, l->name, (int)sizeof text - 1);
    if (glia_expr_parse(text, 1, f, err, sizeof err))
        return glia_error(l->ctx, GLIA_EPLUGIN, "%s [%s]: the type's expression '%s': %s", type, l->name, text, err);
    struct glia_expr *g = glia_expr_grad(*f, 0, 1);
    int rc = g ? 0 : -1;
    if (g && over_output) {
        rc = glia_expr_over_result(g, *f, 0, grad);
        glia_expr_free(g);
    } else {
        *grad = g;
    }
    if (!rc) return GLIA_OK;
    glia_expr_free(*f);
    *f = NULL;
    if (rc < 0) return glia_error(l->ctx, GLIA_ENOMEM, "%s [%s]: out of memory", type, l->name);
    return glia_error(l->ctx, GLIA_EPLUGIN, "%s [%s]: the gradient of '%s' needs the input, but the kernel reads "
                      "only the output in backward", type, l->name, text);
}

#endif
