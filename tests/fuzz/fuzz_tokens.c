/* tests/fuzz/fuzz_tokens.c — libFuzzer harness of the token-file reader (core/data_tokens.c,
 * glia__tokens_load), raw or gzip, with the vocab, max_length and limit settings varied.
 * Not a tokenizer test: an input passes when it loads a consistent set or fails with an error.
 *
 * Input: a flag byte (bit 0: gzip the file), a vocab selector, max_length (0-255), the sample
 * limit (0-255, 0 for all), then the file. */
#include "internal.h"
#include "fuzzutil.h"

static struct glia_context *ctx;
static const int64_t vocabs[] = {2, 10, 100, 1000, 65536, (int64_t)1 << 30};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (glia_context_new(&ctx)) fuzz_die("glia_context_new failed", NULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4) return 0;
    int gz = data[0] & 1;
    int64_t vocab = vocabs[data[1] % (sizeof vocabs / sizeof vocabs[0])], max_length = data[2], limit = data[3];
    const char *p = fuzz_write(fuzz_path(gz ? "tokens.gz" : "tokens"), data + 4, size - 4, gz);
    struct glia__dataset d;
    glia_context_clear_error(ctx);
    glia_status st = glia__tokens_load(ctx, p, vocab, max_length, limit, &d);
    if (st) {
        if (!*glia_context_error(ctx)) fuzz_die("a failed load left no error message", glia_strerror(st));
        return 0;
    }
    if (d.n < 1 || (limit && d.n > limit) || !d.tokens || d.rows != 1 || d.cols < 1 || !d.labels || !d.offsets ||
        !d.ids || d.n_classes < 1 || d.offsets[0] != 0)
        fuzz_die("inconsistent token set", NULL);
    for (int64_t i = 0; i < d.n; i++) {
        int64_t len = glia__sample_len(&d, i);
        if (len < 0 || len > d.cols || (max_length && len > max_length)) fuzz_die("bad sample length", NULL);
        if (d.labels[i] < 0 || d.labels[i] >= d.n_classes) fuzz_die("label out of range", NULL);
        for (int64_t k = d.offsets[i]; k < d.offsets[i + 1]; k++)
            if (d.ids[k] < 1 || d.ids[k] >= vocab) fuzz_die("token id out of range", NULL);
    }
    glia__dataset_free(&d);
    return 0;
}
