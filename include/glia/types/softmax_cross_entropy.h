/* glia/types/softmax_cross_entropy.h — the attributes of layer type softmax_cross_entropy (plugin
 * softmax_cross_entropy), which every kernel of it reads. Not a kernel: the CPU kernel is in
 * plugins/layers/softmax_cross_entropy, the CUDA one in cuda.so. */
#ifndef GLIA_TYPES_SOFTMAX_CROSS_ENTROPY_H
#define GLIA_TYPES_SOFTMAX_CROSS_ENTROPY_H

/* l->attrs of a softmax_cross_entropy layer: loss(1) = mean_n [(1-e) (-log p[n, y(n)]) + e mean_c (-log p[n, c])],
 * p = softmax of the (N, classes) logits, y the integer labels. */
struct glia_softmax_cross_entropy_attrs {
    float smoothing;  /* e: the label smoothing epsilon (key label_smoothing) */
};

#endif
