/* tools/sample.c — glia sample: text (byte models) or token ids (token_stream models) drawn one token at a time from
 * a trained language model, each new token one position's forward through glia_model_decode (the attention layers
 * keep their keys and values), or with --no-cache the whole window through glia_model_logits (nanoGPT's generate).
 * Not a tokenizer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sample.h"

/* splitmix64: the sampling's random numbers, from --seed. */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double next_unit(uint64_t *s) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

/* The next token from one position's logits (v of them): the largest with temperature 0, else drawn from the
 * softmax of logits / temperature over the top_k largest (0: all). p is v doubles of room. */
int64_t glia__sample_pick(const float *logits, int64_t v, double temperature, int64_t top_k, uint64_t *rng, double *p)
{
    int64_t best = 0;
    for (int64_t i = 1; i < v; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0) return best;
    double cut = -INFINITY;  /* the k-th largest logit: those below it are left out */
    if (top_k > 0 && top_k < v) {
        for (int64_t i = 0; i < v; i++) p[i] = logits[i];
        for (int64_t k = 0; k < top_k; k++) {  /* top_k passes of selection: k is small next to v in use */
            int64_t m = k;
            for (int64_t i = k + 1; i < v; i++)
                if (p[i] > p[m]) m = i;
            double t = p[k];
            p[k] = p[m];
            p[m] = t;
        }
        cut = p[top_k - 1];
    }
    double sum = 0;
    for (int64_t i = 0; i < v; i++) {
        p[i] = logits[i] >= cut ? exp(((double)logits[i] - logits[best]) / temperature) : 0.0;
        sum += p[i];
    }
    double u = next_unit(rng) * sum;
    for (int64_t i = 0; i < v; i++) {
        if (u < p[i]) return i;
        u -= p[i];
    }
    return best;  /* rounding left u at the end */
}

/* The prompt as token ids: its bytes for a byte model, else integers separated by spaces or commas. */
static int prompt_tokens(const struct glia__sample_options *o, const struct glia_model_io *io, int32_t **out,
                         int64_t *n)
{
    size_t len = o->prompt ? strlen(o->prompt) : 0, cap = len + 1;
    int32_t *t = malloc(sizeof *t * cap);
    if (!t) {
        fprintf(stderr, "glia: sample: out of memory\n");
        return 1;
    }
    int64_t k = 0;
    if (!o->prompt) {  /* a newline, or GPT-2's <|endoftext|> where the vocabulary has it (as llm.c starts) */
        t[k++] = io->bytes ? '\n' : io->vocab > 50256 ? 50256 : 0;
    } else if (io->bytes) {
        for (size_t i = 0; i < len; i++) t[k++] = (unsigned char)o->prompt[i];
    } else {
        const char *c = o->prompt;
        while (*c) {
            while (*c == ' ' || *c == ',') c++;
            if (!*c) break;
            char *end;
            long long v = strtoll(c, &end, 10);
            if (end == c || (*end && *end != ' ' && *end != ',')) {
                fprintf(stderr, "glia: sample: --prompt of a token model is token ids separated by spaces or commas; "
                        "'%s' is not one\n", c);
                free(t);
                return 2;
            }
            if (v < 0 || v >= io->vocab) {
                fprintf(stderr, "glia: sample: --prompt token %lld is outside 0 .. %lld ([data] vocab)\n", v,
                        (long long)io->vocab - 1);
                free(t);
                return 2;
            }
            t[k++] = (int32_t)v;
            c = end;
        }
    }
    if (k == 0) {
        fprintf(stderr, "glia: sample: --prompt is empty\n");
        free(t);
        return 2;
    }
    *out = t;
    *n = k;
    return 0;
}

static void put_token(const struct glia_model_io *io, int32_t t, FILE *f, bool first)
{
    if (io->bytes) fputc(t, f);
    else fprintf(f, first ? "%d" : " %d", (int)t);
}

bool glia__sample_can(struct glia_model *m, const char *model, struct glia_model_io *io)
{
    *io = (struct glia_model_io){.struct_size = sizeof *io};
    if (!glia_model_io_info(m, io) && io->lm) return true;
    fprintf(stderr, "glia: sample: %s is not a language model ([data] format = token_stream or bytes, logits (N, T, "
            "vocab)): there is nothing to sample\n", model ? model : "the model");
    return false;
}

/* The logits after the window seq[base .. k) into logits (the last position's at *last): with the layers' cache
 * (*have: the positions of the window they hold), only the positions they do not hold yet; else the whole window. A
 * model whose layers cannot decode goes on without the cache after a one-line notice. */
static glia_status next_logits(struct glia_context *ctx, struct glia_model *m, const struct glia_model_io *io,
                               const int32_t *seq, int64_t base, int64_t k, bool *cache, int64_t *have, float *logits,
                               const float **last)
{
    size_t room = (size_t)(io->len * io->classes);
    if (*cache) {
        int64_t len = k - base - *have;
        struct glia_batch b = {.struct_size = sizeof b, .shape = glia_shape_make(2, (int64_t[]){1, len}),
                               .tokens = seq + base + *have};
        glia_status st = glia_model_decode(m, &b, *have, logits, room);
        if (!st) {
            *have += len;
            *last = logits + (len - 1) * io->classes;
            return GLIA_OK;
        }
        if (st != GLIA_EUNSUPPORTED || *have > 0) return st;
        fprintf(stderr, "glia: sample: %s; running the whole window for every token\n", glia_context_error(ctx));
        *cache = false;
    }
    int64_t len = k - base;
    struct glia_batch b = {.struct_size = sizeof b, .shape = glia_shape_make(2, (int64_t[]){1, len}),
                           .tokens = seq + base};
    *last = logits + (len - 1) * io->classes;
    return glia_model_logits(m, &b, logits, room);
}

int glia__sample(struct glia_context *ctx, struct glia_model *m, const struct glia__sample_options *o, FILE *f)
{
    struct glia_model_io io;
    if (!glia__sample_can(m, NULL, &io)) return 2;
    int32_t *prompt;
    int64_t n_prompt;
    int rc = prompt_tokens(o, &io, &prompt, &n_prompt);
    if (rc) return rc;
    int64_t T = io.len, V = io.classes, total = n_prompt + o->tokens;
    int64_t draw = V < io.vocab ? V : io.vocab;  /* logits wider than the data's ids: only ids the model can read */
    int32_t *seq = malloc(sizeof *seq * (size_t)total);
    float *logits = malloc(sizeof *logits * (size_t)(T * V));
    double *p = malloc(sizeof *p * (size_t)V);
    if (!seq || !logits || !p) {
        fprintf(stderr, "glia: sample: out of memory\n");
        rc = 1;
        goto done;
    }
    memcpy(seq, prompt, sizeof *seq * (size_t)n_prompt);
    for (int64_t i = 0; i < n_prompt; i++) put_token(&io, seq[i], f, i == 0);
    fflush(f);
    uint64_t rng = o->seed;
    bool cache = !o->no_cache;
    int64_t base = 0, have = 0;  /* the window seq[base .. k) the model sees; the cache holds its first `have` */
    for (int64_t k = n_prompt; k < total; k++) {
        if (k - base > T) {  /* past the model's positions: the last T tokens; with the cache, the last half of them
                                (positions are absolute: a window that moves by one token is a new prefix each time) */
            base = k - (cache && have > 0 ? (T + 1) / 2 : T);
            have = 0;
        }
        const float *last;
        glia_status st = next_logits(ctx, m, &io, seq, base, k, &cache, &have, logits, &last);
        if (st) {
            const char *msg = glia_context_error(ctx);
            fprintf(stderr, "\nglia: sample: %s\n", msg && *msg ? msg : glia_strerror(st));
            rc = 1;
            goto done;
        }
        seq[k] = (int32_t)glia__sample_pick(last, draw, o->temperature, o->top_k, &rng, p);
        put_token(&io, seq[k], f, false);
        fflush(f);
    }
    fputc('\n', f);
done:
    free(prompt);
    free(seq);
    free(logits);
    free(p);
    return rc;
}
