/* tests/fuzz/fuzzutil.h — what the libFuzzer harnesses share: a private temporary folder, writing
 * an input to a file (raw or gzip), small valid data files, and handing generated seeds to run.sh.
 * Not a harness itself and not used by `make check`. */
#ifndef GLIA_FUZZUTIL_H
#define GLIA_FUZZUTIL_H

#include <ftw.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* Plugins stay loaded: libFuzzer keeps the coverage counters of every instrumented library it
 * has seen and clears them before each input, so unloading a plugin (glia_context_free does)
 * would make it write to unmapped memory. This definition takes the place of libc's for libglia. */
int dlclose(void *handle);
int dlclose(void *handle)
{
    (void)handle;
    return 0;
}

/* Stops the harness on a broken fuzzing setup (never on anything an input does). */
static inline void fuzz_die(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz harness: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

static char fuzz_dir_[256];

static inline int fuzz_rm_one(const char *p, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb, (void)type, (void)ftw;
    remove(p);
    return 0;
}

static inline void fuzz_rm_dir(void)
{
    nftw(fuzz_dir_, fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A new folder of this process's, made once and removed at exit; returns its path. */
static inline const char *fuzz_dir(void)
{
    if (fuzz_dir_[0]) return fuzz_dir_;
    const char *t = getenv("TMPDIR");
    snprintf(fuzz_dir_, sizeof fuzz_dir_, "%s/glia-fuzz-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(fuzz_dir_)) fuzz_die("cannot make a temporary folder", fuzz_dir_);
    atexit(fuzz_rm_dir);
    return fuzz_dir_;
}

/* fuzz_dir()/name in a static buffer ring. */
static inline const char *fuzz_path(const char *name)
{
    static char bufs[8][512];
    static int k;
    char *b = bufs[k++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", fuzz_dir(), name);
    return b;
}

/* Writes n bytes to path, gzip-compressed when gz; returns path. */
static inline const char *fuzz_write(const char *path, const void *data, size_t n, int gz)
{
    if (gz) {
        gzFile g = gzopen(path, "wb");
        if (!g) fuzz_die("cannot write", path);
        if (n && gzwrite(g, data, (unsigned)n) != (int)n) fuzz_die("cannot write", path);
        if (gzclose(g) != Z_OK) fuzz_die("cannot write", path);
        return path;
    }
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f)) fuzz_die("cannot write", path);
    return path;
}

/* An IDX image file (n x rows x cols) and label file of `classes` classes, raw bytes in buf
 * (16 + n*rows*cols and 8 + n bytes); returns the sizes in *ni and *nl. */
static inline void fuzz_idx_bytes(int n, int rows, int cols, int classes, uint8_t *im, size_t *ni,
                                  uint8_t *lb, size_t *nl)
{
    const uint8_t hi[16] = {0, 0, 8, 3, 0, 0, (uint8_t)(n >> 8), (uint8_t)n,
                            0, 0, 0, (uint8_t)rows, 0, 0, 0, (uint8_t)cols};
    const uint8_t hl[8] = {0, 0, 8, 1, 0, 0, (uint8_t)(n >> 8), (uint8_t)n};
    memcpy(im, hi, 16);
    memcpy(lb, hl, 8);
    for (int i = 0; i < n; i++) {
        for (int p = 0; p < rows * cols; p++) im[16 + i * rows * cols + p] = (uint8_t)((p % classes == i % classes) ? 200 : p * 7);
        lb[8 + i] = (uint8_t)(i % classes);
    }
    *ni = 16 + (size_t)n * rows * cols;
    *nl = 8 + (size_t)n;
}

/* Writes an IDX pair of n samples of rows x cols to fuzz_path(images), fuzz_path(labels). */
static inline void fuzz_write_idx(const char *images, const char *labels, int n, int rows, int cols, int classes)
{
    uint8_t *im = malloc(16 + (size_t)n * rows * cols), lb[8 + 256];
    size_t ni, nl;
    if (!im || n > 256) fuzz_die("fuzz_write_idx", "bad sizes");
    fuzz_idx_bytes(n, rows, cols, classes, im, &ni, lb, &nl);
    fuzz_write(fuzz_path(images), im, ni, 0);
    fuzz_write(fuzz_path(labels), lb, nl, 0);
    free(im);
}

/* With GLIA_FUZZ_VERBOSE set, prints what became of an input (for replaying one by hand). */
static inline void fuzz_say(const char *what, const char *detail)
{
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("GLIA_FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "%s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
}

/* Saves a generated seed as $GLIA_FUZZ_SEEDS/name (run.sh sets it; nothing when unset). */
static inline void fuzz_seed(const char *name, const void *data, size_t n)
{
    const char *d = getenv("GLIA_FUZZ_SEEDS");
    if (!d || !*d) return;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", d, name);
    fuzz_write(p, data, n, 0);
}

/* The input of the two-file harnesses (fuzz_idx, fuzz_cifar): a flag byte, two bytes (big-endian)
 * giving the first file's length, the first file, and the second (the rest). */
static inline void fuzz_seed_two_files(const char *name, int flags, const uint8_t *a, size_t na, const uint8_t *b,
                                       size_t nb)
{
    uint8_t *s = malloc(3 + na + nb);
    if (!s) fuzz_die("out of memory", NULL);
    s[0] = (uint8_t)flags;
    s[1] = (uint8_t)(na >> 8);
    s[2] = (uint8_t)na;
    memcpy(s + 3, a, na);
    memcpy(s + 3 + na, b, nb);
    fuzz_seed(name, s, 3 + na + nb);
    free(s);
}

/* Splits such an input: its flags, and the first file's bytes data[0..*na), the second's after them
 * (*nb bytes). False when the input is too short to hold the header. */
static inline bool fuzz_two_files(const uint8_t **data, size_t size, int *flags, size_t *na, size_t *nb)
{
    if (size < 3) return false;
    *flags = (*data)[0];
    *na = (size_t)(*data)[1] << 8 | (*data)[2];
    *data += 3, size -= 3;
    if (*na > size) *na = size;
    *nb = size - *na;
    return true;
}

/* A whole file into a malloc'ed buffer (*n bytes); NULL when it cannot be read. */
static inline uint8_t *fuzz_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    uint8_t *b = malloc(cap);
    for (size_t k; b && (k = fread(b + len, 1, cap - len, f)) > 0;) {
        len += k;
        if (len == cap) {
            uint8_t *g = realloc(b, cap *= 2);
            if (!g) free(b);
            b = g;
        }
    }
    fclose(f);
    *n = len;
    return b;
}

#endif
