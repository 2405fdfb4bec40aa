/* tools/sample.h — glia sample's entry point and its sampling rule (tested in tests/test_sample.c).
 * Not library API: part of the glia program. */
#ifndef GLIA_TOOLS_SAMPLE_H
#define GLIA_TOOLS_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <glia/glia.h>

struct glia__sample_options {
    const char *prompt;  /* bytes for a byte model, token ids for a token model; NULL: a newline / <|endoftext|> */
    int64_t tokens;      /* how many to draw */
    double temperature;  /* 0: always the most likely */
    int64_t top_k;       /* draw among the k most likely; 0: all */
    uint64_t seed;
    bool no_cache;       /* run the whole window for every token instead of glia_model_decode's cache */
};

/* Prints the prompt and o->tokens tokens drawn after it to f (text for a byte model, ids for a token model). 0, or
 * the program's exit status (1: a failure, with one line on stderr; 2: a model that is no language model, or a bad
 * prompt). */
int glia__sample(struct glia_context *ctx, struct glia_model *m, const struct glia__sample_options *o, FILE *f);
/* Whether m is a language model sample can draw from (*io: what it reads); else false, with one line on stderr
 * naming model. */
bool glia__sample_can(struct glia_model *m, const char *model, struct glia_model_io *io);
/* The token drawn from one position's v logits (p: v doubles of room); rng advances. */
int64_t glia__sample_pick(const float *logits, int64_t v, double temperature, int64_t top_k, uint64_t *rng, double *p);

#endif
