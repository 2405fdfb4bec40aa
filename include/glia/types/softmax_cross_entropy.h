/* glia/types/softmax_cross_entropy.h — the attributes of layer type softmax_cross_entropy (plugin
 * softmax_cross_entropy), which every kernel of it reads. Not a kernel: the CPU kernel is in
 * plugins/layers/softmax_cross_entropy, the CUDA one in cuda.so. */
#ifndef GLIA_TYPES_SOFTMAX_CROSS_ENTROPY_H
#define GLIA_TYPES_SOFTMAX_CROSS_ENTROPY_H

#include <stdint.h>

/* l->attrs of a softmax_cross_entropy layer: loss(1) = mean_r [(1-e) (-log p[r, y(r)]) + e mean_c (-log p[r, c])]
 * over the positions r whose label y(r) is not ignore_index (0 when none is), p = softmax of the logits' last
 * dimension: (N, classes) logits with (N) labels, or (N, T, classes) with (N, T) labels (r runs over N*T). */
struct glia_softmax_cross_entropy_attrs {
    float smoothing;       /* e: the label smoothing epsilon (key label_smoothing) */
    int32_t ignore_index;  /* key ignore_index: labels equal to it do not count */
};

#endif
