/* tests/modelutil.h — what the training test programs share: a whole model built from INI text
 * (context, config, model), its weights, and quiet training options. Not single layers
 * (layerutil.h). */
#ifndef GLIA_MODELUTIL_H
#define GLIA_MODELUTIL_H

#include <math.h>
#include <stdlib.h>
#include "testutil.h"
#include <glia/glia.h>

struct run {
    struct glia_context *ctx;
    struct glia_config *cfg;
    struct glia_model *m;
};

/* Builds the model of `text` (named t.ini in messages) in a new context; fails the test if it
 * does not build. */
static inline void open_run(struct run *r, const char *text)
{
    CU_ASSERT_FATAL(glia_context_new(&r->ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_parse_string(r->ctx, "t.ini", text, &r->cfg) == GLIA_OK);
    glia_status st = glia_model_build(r->ctx, r->cfg, &r->m);
    if (st) printf("\n  %s\n", glia_context_error(r->ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
}

static inline void close_run(struct run *r)
{
    glia_model_free(r->m);
    glia_config_free(r->cfg);
    glia_context_free(r->ctx);
}

/* The model of `text` (named t.ini in messages) must not build, with an error holding `want`. */
static inline void expect_build_error(const char *text, const char *want)
{
    struct glia_context *c;
    struct glia_config *cfg;
    struct glia_model *m = NULL;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_parse_string(c, "t.ini", text, &cfg) == GLIA_OK);
    CU_ASSERT_NOT_EQUAL(glia_model_build(c, cfg, &m), GLIA_OK);
    const char *e = glia_context_error(c);
    if (!strstr(e, want)) printf("\n  got '%s', want '%s'\n", e, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(e, want));
    glia_config_free(cfg);
    glia_context_free(c);
}

/* All weights of the model (*n of them), malloc'ed. */
static inline float *weights(struct run *r, long long *n)
{
    *n = glia_model_param_count(r->m);
    float *w = malloc((size_t)*n * sizeof *w);
    CU_ASSERT_FATAL(w != NULL);
    CU_ASSERT_EQUAL(glia_model_weights(r->m, w, *n), *n);
    return w;
}

/* Largest |a - b| / max(1, |b|) over the weights of two runs of one model (as many weights). */
static inline double weight_diff(struct run *a, struct run *b)
{
    long long na, nb;
    float *wa = weights(a, &na), *wb = weights(b, &nb);
    CU_ASSERT_EQUAL_FATAL(na, nb);
    double worst = 0;
    for (long long i = 0; i < na; i++) worst = fmax(worst, fabs((double)wa[i] - wb[i]) / fmax(1.0, fabs(wb[i])));
    free(wa);
    free(wb);
    return worst;
}

/* Whether a and b hold the same weights, bit for bit. */
static inline bool same_weights(struct run *a, struct run *b)
{
    long long na, nb;
    float *wa = weights(a, &na), *wb = weights(b, &nb);
    bool same = na == nb && !memcmp(wa, wb, sizeof(float) * (size_t)na);
    free(wa);
    free(wb);
    return same;
}

/* Training without progress output. */
static const struct glia_train_options quiet = {sizeof(struct glia_train_options), NULL, -1, NULL, NULL};

#endif
