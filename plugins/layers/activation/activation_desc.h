/* plugins/layers/activation/activation_desc.h — what the CPU and CUDA impls of the one-input
 * activations (relu, leaky_relu, sigmoid, tanh, gelu) share: docs, keys, create, shape, flops.
 * Not the maths: each impl computes forward and backward in its own file. Not a plugin. */
#ifndef GLIA_ACTIVATION_DESC_H
#define GLIA_ACTIVATION_DESC_H

#include <glia/glia.h>

#define GLIA__RELU_DOC "y = max(x, 0)"
#define GLIA__LEAKY_RELU_DOC "y = x > 0 ? x : negative_slope * x"
#define GLIA__SIGMOID_DOC "y = 1 / (1 + exp(-x))"
#define GLIA__TANH_DOC "y = tanh(x)"
#define GLIA__GELU_DOC "y = 0.5 x (1 + erf(x / sqrt(2)))"

/* create of the activations without keys: nothing to read, nothing to keep. */
glia_status glia__activation_create(struct glia_layer *l, const struct glia_section *cfg,
                                    const struct glia_shape *in, int n_in);

/* The output has the input's shape. */
glia_status glia__activation_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                   struct glia_shape *out);

/* Forward flops, per element (a transcendental counts as one): relu 1 (compare), tanh 1,
 * leaky_relu 2 (compare and multiply), sigmoid 3 (exp, add, divide), gelu 5 (scale, erf, add,
 * two multiplies). */
uint64_t glia__relu_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in);
uint64_t glia__leaky_relu_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in);
uint64_t glia__sigmoid_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in);
uint64_t glia__tanh_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in);
uint64_t glia__gelu_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in);

/* ---- leaky_relu: the one activation with a key ---- */

struct glia__leaky_relu {
    float slope;   /* negative_slope */
};

extern const struct glia_key glia__leaky_relu_keys[];

/* Reads negative_slope into a struct glia__leaky_relu at l->priv. */
glia_status glia__leaky_relu_create(struct glia_layer *l, const struct glia_section *cfg,
                                    const struct glia_shape *in, int n_in);
void glia__leaky_relu_destroy(struct glia_layer *l);

#endif
