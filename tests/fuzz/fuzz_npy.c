/* tests/fuzz/fuzz_npy.c — libFuzzer harness of the .npy reader (core/data_npy.c, glia__npy_load): an image file and a
 * label file, then gathering every loaded sample. Not a check of the pixel values: an input passes when it loads a
 * consistent set or fails with an error.
 *
 * Input: a flag byte (bit 0: layout nhwc; bits 1-7: the sample limit, 0 for all), two bytes (big-endian) giving the
 * image file's length, the image file, and the label file (the rest). The harness offers valid pairs as seeds. */
#include "internal.h"
#include "fuzzutil.h"

static struct glia_context *ctx;

/* A version 1.0 .npy file of descr and shape holding n bytes of data, into out (*len bytes). */
static void npy_bytes(const char *descr, const char *shape, const void *data, size_t n, uint8_t *out, size_t *len)
{
    char h[128];
    int k = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    while ((10 + k + 1) % 64) h[k++] = ' ';
    h[k++] = '\n';
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (uint8_t)k;
    out[9] = 0;
    memcpy(out + 10, h, (size_t)k);
    memcpy(out + 10 + k, data, n);
    *len = 10 + (size_t)k + n;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (glia_context_new(&ctx)) fuzz_die("glia_context_new failed", NULL);
    uint8_t px[4 * 2 * 3 * 3], im[256], lb[256];
    int64_t y[4] = {0, 1, 2, 1};
    for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 37);
    size_t ni, nl;
    npy_bytes("<i8", "(4,)", y, sizeof y, lb, &nl);
    npy_bytes("|u1", "(4, 2, 3, 3)", px, sizeof px, im, &ni);
    fuzz_seed_two_files("nchw", 0, im, ni, lb, nl);
    fuzz_seed_two_files("nhwc", 1, im, ni, lb, nl);
    fuzz_seed_two_files("limit-2", 2 << 1, im, ni, lb, nl);
    npy_bytes("|u1", "(4, 6, 3)", px, sizeof px, im, &ni);
    fuzz_seed_two_files("nhw", 0, im, ni, lb, nl);
    float fx[4 * 2 * 2];
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) fx[i] = (float)i / 16.0f;
    npy_bytes("<f4", "(4, 2, 2)", fx, sizeof fx, im, &ni);
    fuzz_seed_two_files("f32", 0, im, ni, lb, nl);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int flags;
    size_t ni, nl;
    if (!fuzz_two_files(&data, size, &flags, &ni, &nl)) return 0;
    const char *im = fuzz_write(fuzz_path("images.npy"), data, ni, 0);
    const char *lb = fuzz_write(fuzz_path("labels.npy"), data + ni, nl, 0);
    struct glia__dataset d;
    glia_context_clear_error(ctx);
    glia_status st = glia__npy_load(ctx, im, lb, flags & 1, flags >> 1, &d);
    if (st) {
        if (!*glia_context_error(ctx)) fuzz_die("a failed load left no error message", glia_strerror(st));
        return 0;
    }
    if (d.n < 1 || d.rows < 1 || d.cols < 1 || d.channels < 1 || d.n_classes < 1 || !(d.images || d.fimages) || !d.labels ||
        ((flags >> 1) && d.n > (flags >> 1)))
        fuzz_die("inconsistent data set", NULL);
    int64_t *idx = malloc((size_t)d.n * sizeof *idx);
    float *x = malloc((size_t)d.n * (size_t)d.channels * (size_t)d.rows * (size_t)d.cols * sizeof *x);
    int32_t *y = malloc((size_t)d.n * sizeof *y);
    if (!idx || !x || !y) fuzz_die("out of memory", NULL);
    for (int64_t i = 0; i < d.n; i++) idx[i] = d.n - 1 - i;
    struct glia__norm nm;
    for (int c = 0; c < GLIA__MAX_CHANNELS; c++) nm.mean[c] = 0.5f, nm.std[c] = 0.25f;
    glia__dataset_gather(&d, idx, d.n, &nm, x, y);
    for (int64_t i = 0; i < d.n; i++)
        if (y[i] < 0 || y[i] >= d.n_classes) fuzz_die("label out of range", NULL);
    free(idx), free(x), free(y);
    glia__dataset_free(&d);
    return 0;
}
