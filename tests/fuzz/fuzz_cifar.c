/* tests/fuzz/fuzz_cifar.c — libFuzzer harness of the CIFAR binary reader (core/data_image.c,
 * glia__cifar_load): two batch files, raw or gzip, then gathering every loaded sample.
 * Not a check of the pixel values: an input passes when it loads a consistent set or fails with
 * an error.
 *
 * Input: a flag byte (bit 0: gzip the first file, bit 1: read as CIFAR-100, bit 2: coarse labels,
 * bits 3-7: the record limit, 0 for all), two bytes (big-endian) giving the first file's length,
 * the first file, and the second (the rest). The harness offers valid files as seeds. */
#include "internal.h"
#include "fuzzutil.h"

static struct glia_context *ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (glia_context_new(&ctx)) fuzz_die("glia_context_new failed", NULL);
    enum { R10 = 3073, R100 = 3074 };
    static uint8_t a[2 * R100], b[R100];
    for (size_t i = 0; i < sizeof a; i++) a[i] = (uint8_t)(i * 31 + i / 7);
    a[0] = 3, a[R10] = 9, b[0] = 0;              /* CIFAR-10 labels */
    fuzz_seed_two_files("cifar10", 0, a, 2 * R10, b, R10);
    fuzz_seed_two_files("cifar10-limit", 2 << 3, a, 2 * R10, b, R10);
    a[0] = 4, a[1] = 77, a[R100] = 19, a[R100 + 1] = 99, b[0] = 1, b[1] = 5;  /* coarse, fine */
    fuzz_seed_two_files("cifar100", 2, a, 2 * R100, b, R100);
    fuzz_seed_two_files("cifar100-coarse", 6, a, 2 * R100, b, R100);
    size_t gz;
    uint8_t *z = fuzz_slurp(fuzz_write(fuzz_path("seed.gz"), a, 2 * R100, 1), &gz);
    if (!z) fuzz_die("cannot read back the gzip seed", NULL);
    fuzz_seed_two_files("gzip-file", 2, z, gz, b, R100);
    free(z);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int flags;
    size_t na, nb;
    if (!fuzz_two_files(&data, size, &flags, &na, &nb)) return 0;
    const char *paths[2] = {fuzz_write(fuzz_path("a"), data, na, flags & 1), NULL};
    paths[1] = fuzz_write(fuzz_path("b"), data + na, nb, 0);
    bool cifar100 = flags & 2, coarse = flags & 4;
    int limit = flags >> 3;
    struct glia__dataset d;
    glia_context_clear_error(ctx);
    glia_status st = glia__cifar_load(ctx, paths, 2, cifar100, coarse, limit, &d);
    if (st) {
        if (!*glia_context_error(ctx)) fuzz_die("a failed load left no error message", glia_strerror(st));
        if (d.n || d.images || d.labels) fuzz_die("a failed load left samples", NULL);
        return 0;
    }
    int classes = !cifar100 ? 10 : coarse ? 20 : 100;
    if (d.n < 1 || d.channels != 3 || d.rows != 32 || d.cols != 32 || d.n_classes != classes || !d.images ||
        !d.labels || (limit && d.n > limit))
        fuzz_die("inconsistent data set", NULL);
    int64_t *idx = malloc((size_t)d.n * sizeof *idx);
    float *x = malloc((size_t)d.n * 3072 * sizeof *x);
    int32_t *y = malloc((size_t)d.n * sizeof *y);
    if (!idx || !x || !y) fuzz_die("out of memory", NULL);
    for (int64_t i = 0; i < d.n; i++) idx[i] = d.n - 1 - i;
    glia__dataset_gather(&d, idx, d.n, &(struct glia__norm){{0.5f, 0.4f, 0.3f}, {0.25f, 0.2f, 0.1f}}, x, y);
    for (int64_t i = 0; i < d.n; i++)
        if (y[i] < 0 || y[i] >= d.n_classes) fuzz_die("label out of range", NULL);
    free(idx), free(x), free(y);
    glia__dataset_free(&d);
    return 0;
}
