/* core/roofline.h — glia profile's roofline figures (core/roofline.c), used by core/step.c.
 * Not installed. */
#ifndef GLIA_CORE_ROOFLINE_H
#define GLIA_CORE_ROOFLINE_H

#include "internal.h"

/* What a layer moves and computes in one training step at a batch. */
struct glia__cost {
    double fwd_bytes, bwd_bytes;   /* the least its forward and backward read and write */
    double fwd_flops, bwd_flops;   /* from its type's flops (0 without one: flops_known false) */
    bool flops_known;
};

/* The peak rates the fractions use. */
struct glia__peak {
    double bandwidth, flops;       /* bytes/s; FLOP/s at the run's precision; 0: unknown */
    char basis[128];               /* where they come from ("" when nowhere) */
};

/* Node i's cost at `batch` samples (the activations' views must exist). */
void glia__node_cost(const struct glia_model *m, int i, int64_t batch, struct glia__cost *c);
/* Bytes the optimizer step moves. */
double glia__optimizer_bytes(const struct glia_model *m);
/* The peak: bandwidth and flops where > 0, else the device's (glia_backend_peak). */
void glia__peak_of(struct glia_model *m, double bandwidth, double flops, struct glia__peak *p);
/* "12.3% mem" or "4.5% math" (the larger fraction of peak), or "-" when no peak is known. */
void glia__peak_share(const struct glia__peak *p, double bytes, double flops, double seconds, char *buf, size_t n);

#endif
