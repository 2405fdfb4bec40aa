/* tests/fuzz/fuzz_stream.c — libFuzzer harness of the language-model stream readers (core/data_stream.c:
 * glia__stream_load of llm.c token files and byte files, glia__stream_split, the windows of an epoch). Not a
 * training test: an input passes when it loads a consistent stream whose windows lie in their shards, or fails
 * with an error.
 *
 * Input: a flag byte (bit 0: bytes, else an llm.c token file), a vocab selector, T - 1 (0-63), the validation
 * fraction in 256ths, the place (in 256ths) where the data is cut into two files, then the data. */
#include "internal.h"
#include "fuzzutil.h"

static struct glia_context *ctx;
static const int64_t vocabs[] = {0, 2, 256, 1000, 50257, 65536};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (glia_context_new(&ctx)) fuzz_die("glia_context_new failed", NULL);
    return 0;
}

/* Every window start of d (d->n of an epoch, both kinds) inside one shard with its T + 1 tokens. */
static void check_windows(struct glia__dataset *d, int64_t T)
{
    d->cols = (int)T;
    for (int random = 0; random < 2; random++) {
        int64_t total = glia__stream_count(d, T, !random);
        if (total == 0) continue;
        d->n = total + 3 < 64 ? total + 3 : 64;  /* sequential: past the last window, again from the first */
        int64_t starts[64];
        int32_t x[64 * 64], y[64 * 64];
        glia__stream_starts(d, random, 7, 2, starts);
        for (int64_t i = 0; i < d->n; i++) {
            bool ok = false;
            for (int s = 0; s < d->n_shards && !ok; s++) {
                int64_t b = s ? d->shard_end[s - 1] : 0;
                ok = starts[i] >= b && starts[i] + T + 1 <= d->shard_end[s];
            }
            if (!ok) fuzz_die("a window crosses a shard's end or the stream's", NULL);
        }
        glia__stream_fill(d, starts, d->n, x, y);
        for (int64_t i = 0; i < d->n * T; i++)
            if (x[i] < 0 || y[i] < 0 || (i % T + 1 < T && y[i] != x[i + 1])) fuzz_die("targets are not the next inputs", NULL);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5) return 0;
    bool bytes = data[0] & 1;
    int64_t vocab = vocabs[data[1] % (sizeof vocabs / sizeof vocabs[0])], T = 1 + data[2] % 64;
    double frac = data[3] / 256.0;
    size_t n = size - 5, cut = n * data[4] / 256;
    const char *paths[2] = {fuzz_write(fuzz_path("stream-a"), data + 5, cut, 0),
                            fuzz_write(fuzz_path("stream-b"), data + 5 + cut, n - cut, 0)};
    struct glia__dataset d, t;
    glia_context_clear_error(ctx);
    glia_status st = glia__stream_load(ctx, paths, 2, bytes, vocab, &d);
    if (st) {
        if (!*glia_context_error(ctx)) fuzz_die("a failed load left no error message", glia_strerror(st));
        if (d.tok || d.shard_end) fuzz_die("a failed load kept memory", NULL);
        return 0;
    }
    if (!d.stream || !d.tokens || d.n_shards != 2 || d.shard_end[0] > d.shard_end[1] || d.shard_end[1] != d.n_tok)
        fuzz_die("inconsistent stream", NULL);
    if (bytes && d.n_tok != (int64_t)n) fuzz_die("bytes lost", NULL);
    for (int64_t k = 0; k < d.n_tok; k++)
        if ((bytes && d.tok[k] > 255) || (!bytes && vocab > 0 && d.tok[k] >= vocab)) fuzz_die("token out of range", NULL);
    int64_t all = d.n_tok;
    if (glia__stream_split(&d, frac, &t)) fuzz_die("split failed", NULL);
    if (d.n_tok + t.n_tok != all || (d.n_shards && d.shard_end[d.n_shards - 1] != d.n_tok) ||
        (t.n_shards && t.shard_end[t.n_shards - 1] != t.n_tok))
        fuzz_die("inconsistent split", NULL);
    check_windows(&d, T);
    check_windows(&t, T);
    glia__dataset_free(&d);
    glia__dataset_free(&t);
    return 0;
}
