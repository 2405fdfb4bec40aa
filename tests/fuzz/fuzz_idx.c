/* tests/fuzz/fuzz_idx.c — libFuzzer harness of the IDX reader (core/data_image.c, glia__idx_load):
 * an image file and a label file, raw or gzip, then gathering every loaded sample.
 * Not a check of the pixel values: an input passes when it loads a consistent set or fails with
 * an error.
 *
 * Input: a flag byte (bit 0: gzip the image file, bit 1: gzip the label file, bits 2-7: the
 * sample limit, 0 for all), two bytes (big-endian) giving the image file's length, the image
 * file, and the label file (the rest). The harness offers valid pairs, raw and gzip, as seeds. */
#include "internal.h"
#include "fuzzutil.h"

static struct glia_context *ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (glia_context_new(&ctx)) fuzz_die("glia_context_new failed", NULL);
    uint8_t im[16 + 6 * 5 * 4], lb[8 + 6];
    size_t ni, nl;
    fuzz_idx_bytes(6, 5, 4, 3, im, &ni, lb, &nl);
    fuzz_seed_two_files("raw", 0, im, ni, lb, nl);
    fuzz_seed_two_files("gzip-by-harness", 3, im, ni, lb, nl);
    fuzz_seed_two_files("limit-2", 2 << 2, im, ni, lb, nl);
    /* gzip files given as they are: the fuzzer then also mutates the compressed bytes */
    size_t gi, gl;
    uint8_t *zi = fuzz_slurp(fuzz_write(fuzz_path("seed-i.gz"), im, ni, 1), &gi);
    uint8_t *zl = fuzz_slurp(fuzz_write(fuzz_path("seed-l.gz"), lb, nl, 1), &gl);
    if (!zi || !zl) fuzz_die("cannot read back the gzip seeds", NULL);
    fuzz_seed_two_files("gzip-files", 0, zi, gi, zl, gl);
    free(zi);
    free(zl);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int flags;
    size_t ni, nl;
    if (!fuzz_two_files(&data, size, &flags, &ni, &nl)) return 0;
    const char *im = fuzz_write(fuzz_path("images"), data, ni, flags & 1);
    const char *lb = fuzz_write(fuzz_path("labels"), data + ni, nl, flags & 2);
    struct glia__dataset d;
    glia_context_clear_error(ctx);
    glia_status st = glia__idx_load(ctx, im, lb, flags >> 2, &d);
    if (st) {
        if (!*glia_context_error(ctx)) fuzz_die("a failed load left no error message", glia_strerror(st));
        return 0;
    }
    if (d.n < 1 || d.rows < 1 || d.cols < 1 || d.n_classes < 1 || d.n_classes > 255 || !d.images || !d.labels ||
        ((flags >> 2) && d.n > (flags >> 2)))
        fuzz_die("inconsistent data set", NULL);
    int64_t *idx = malloc((size_t)d.n * sizeof *idx);
    float *x = malloc((size_t)d.n * (size_t)d.rows * (size_t)d.cols * sizeof *x);
    int32_t *y = malloc((size_t)d.n * sizeof *y);
    if (!idx || !x || !y) fuzz_die("out of memory", NULL);
    for (int64_t i = 0; i < d.n; i++) idx[i] = d.n - 1 - i;
    glia__dataset_gather(&d, idx, d.n, &(struct glia__norm){{0.5f}, {0.25f}}, x, y);
    for (int64_t i = 0; i < d.n; i++)
        if (y[i] < 0 || y[i] >= d.n_classes) fuzz_die("label out of range", NULL);
    free(idx), free(x), free(y);
    glia__dataset_free(&d);
    return 0;
}
