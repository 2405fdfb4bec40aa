/* tools/plot.h — `glia plot`: draws the per-epoch metrics file written by `glia train --metrics`
 * (JSON lines) as a self-contained SVG 1.1 file. Part of the glia program, not of libglia:
 * it uses nothing but the C library. */
#ifndef GLIA_TOOLS_PLOT_H
#define GLIA_TOOLS_PLOT_H

#include <stddef.h>

/* Reads the JSON-lines metrics file `in` and writes the SVG to `out`: a "loss" panel
 * (train_loss and test_loss against epoch) beside a "test accuracy" panel. Returns 0 on
 * success; otherwise -1 with a one-line message (no newline) in err, e.g.
 * "m.jsonl:3: invalid JSON at column 12: expected ':' after a key". Values that are nan, inf
 * or null are not drawn (a note in the SVG counts them). */
int glia_plot(const char *in, const char *out, char *err, size_t errlen);

/* The default output name for input `in`: ".jsonl" (or ".json") replaced by ".svg", or
 * ".svg" appended. Returns 0, or -1 when it does not fit in outlen bytes. */
int glia_plot_output_name(const char *in, char *out, size_t outlen);

#endif
