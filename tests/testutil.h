/* tests/testutil.h — the shared CUnit harness of glia's test programs: a main() runner and
 * small helpers for paths and temporary files. Not a test framework of its own. */
#ifndef GLIA_TESTUTIL_H
#define GLIA_TESTUTIL_H

#include <CUnit/Basic.h>
#include <errno.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Initializers of the glia_epoch_result arrays (GLIA_TEST_RESULTS) and single results (GLIA_TEST_RESULT) that
 * glia_model_train fills: the caller's struct_size first. */
#define GLIA_TEST_RESULTS {{.struct_size = sizeof(struct glia_epoch_result)}}
#define GLIA_TEST_RESULT {.struct_size = sizeof(struct glia_epoch_result)}

struct glia_test {
    const char *name;
    void (*fn)(void);
};

/* Whether test `name` runs under $GLIA_TESTS, a comma-separated list of test names: a name with a
 * leading '-' is left out; when some name has no '-', only the names listed without one run. Unset
 * or empty: every test runs. */
static inline int glia_test_selected(const char *name)
{
    const char *list = getenv("GLIA_TESTS");
    if (!list || !*list) return 1;
    size_t len = strlen(name);
    int any_plain = 0, listed = 0;
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        int minus = n && *p == '-';
        const char *w = p + minus;
        size_t wn = n - (size_t)minus;
        if (wn == len && !strncmp(w, name, len)) {
            if (minus) return 0;
            listed = 1;
        }
        if (wn && !minus) any_plain = 1;
        p += n + (e != NULL);
    }
    return listed || !any_plain;
}

/* Runs one suite of tests with CUnit's basic interface (verbose), prints its run summary,
 * and returns the exit status: 0 all passed, 1 some failed. $GLIA_TESTS chooses the tests
 * (glia_test_selected); those it leaves out are named on one line before the run. */
static inline int glia_test_run(const char *suite, const struct glia_test *tests, int n)
{
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite s = CU_add_suite(suite, NULL, NULL);
    int left_out = 0;
    for (int i = 0; i < n; i++) {
        if (glia_test_selected(tests[i].name)) {
            CU_add_test(s, tests[i].name, tests[i].fn);
        } else {
            printf("%s %s", left_out++ ? "," : "left out by GLIA_TESTS:", tests[i].name);
        }
    }
    if (left_out) printf("\n");
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_tests_failed() + CU_get_number_of_suites_failed();
    unsigned fails = CU_get_number_of_failures();
    CU_cleanup_registry();
    printf("\n");
    return (failed || fails) ? 1 : 0;
}

#define GLIA_TEST_MAIN(suite, ...)                                                  \
    int main(void)                                                                  \
    {                                                                               \
        static const struct glia_test tests_[] = {__VA_ARGS__};                    \
        return glia_test_run(suite, tests_, (int)(sizeof tests_ / sizeof tests_[0])); \
    }
#define GLIA_TEST(fn) {#fn, fn}

/* A path under $GLIA_TMPDIR (or /tmp) for this test's files, in a static buffer ring. */
static inline const char *glia_test_tmp(const char *name)
{
    static char bufs[8][512];
    static int k;
    const char *d = getenv("GLIA_TMPDIR");
    char *b = bufs[k++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", d && *d ? d : "/tmp", name);
    return b;
}

/* The folder holding the built fixture plugins ($GLIA_FIXTURES, or tests/fixtures/.libs). */
static inline const char *glia_test_fixtures(void)
{
    const char *d = getenv("GLIA_FIXTURES");
    return d && *d ? d : "tests/fixtures/.libs";
}

/* A path under the source tree ($GLIA_SRCDIR, or "." when unset). */
static inline const char *glia_test_src(const char *rel)
{
    static char bufs[8][512];
    static int k;
    const char *d = getenv("GLIA_SRCDIR");
    char *b = bufs[k++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", d && *d ? d : ".", rel);
    return b;
}

/* Writes text to path; returns 0 on success. */
static inline int glia_test_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

/* Writes a raw IDX image file (n x rows x cols, u8) and label file. Sample i of class
 * i % classes is dark with a bright pixel band whose place depends on the class and a
 * little seeded noise, so a small model can learn it. Returns 0 on success. */
static inline int glia_test_write_idx(const char *images, const char *labels, int n, int rows,
                                      int cols, int classes, unsigned seed)
{
    FILE *fi = fopen(images, "wb"), *fl = fopen(labels, "wb");
    if (!fi || !fl) return -1;
    unsigned char hi[16] = {0, 0, 8, 3, (unsigned char)(n >> 24), (unsigned char)(n >> 16),
                            (unsigned char)(n >> 8), (unsigned char)n, 0, 0, 0, (unsigned char)rows,
                            0, 0, 0, (unsigned char)cols};
    unsigned char hl[8] = {0, 0, 8, 1, (unsigned char)(n >> 24), (unsigned char)(n >> 16),
                           (unsigned char)(n >> 8), (unsigned char)n};
    fwrite(hi, 1, 16, fi);
    fwrite(hl, 1, 8, fl);
    for (int i = 0; i < n; i++) {
        int c = i % classes;
        for (int p = 0; p < rows * cols; p++) {
            seed = seed * 1103515245u + 12345u;
            int noise = (int)((seed >> 16) % 60);
            fputc((p % classes == c) ? 190 + noise : noise, fi);
        }
        fputc(c, fl);
    }
    return (fclose(fi) | fclose(fl)) ? -1 : 0;
}

/* Makes the folder $GLIA_TMPDIR/name (its path into dir) holding an IDX training set tri/trl of
 * n_train side x side images and a test set tei/tel of n_test, of `classes` classes, written with
 * seeds seed and seed + 1. Returns 0 on success. */
static inline int glia_test_idx_set(char *dir, size_t dir_size, const char *name, int n_train, int n_test, int side,
                                    int classes, unsigned seed)
{
    char a[600], b[600];
    snprintf(dir, dir_size, "%s", glia_test_tmp(name));
    if (mkdir(dir, 0777) && errno != EEXIST) return -1;
    snprintf(a, sizeof a, "%s/tri", dir), snprintf(b, sizeof b, "%s/trl", dir);
    if (glia_test_write_idx(a, b, n_train, side, side, classes, seed)) return -1;
    snprintf(a, sizeof a, "%s/tei", dir), snprintf(b, sizeof b, "%s/tel", dir);
    return glia_test_write_idx(a, b, n_test, side, side, classes, seed + 1);
}

/* Writes a token file of n samples (label then ids, one per line). Sample i is of class
 * i % classes: ids drawn from classes+1 .. vocab-1 with the marker id class+1 at one random
 * place, so a model that pools over positions can learn it. Lengths are skewed like text: most
 * near minlen, a few up to maxlen. Returns 0 on success. */
static inline int glia_test_write_tokens(const char *path, int n, int vocab, int classes, int minlen, int maxlen,
                                         unsigned seed)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    for (int i = 0; i < n; i++) {
        int c = i % classes;
        seed = seed * 1103515245u + 12345u;
        double u = (double)((seed >> 8) % 10000) / 10000.0;
        int len = minlen + (int)((double)(maxlen - minlen) * u * u * u);
        seed = seed * 1103515245u + 12345u;
        int at = (int)((seed >> 8) % (unsigned)len);
        fprintf(f, "%d", c);
        for (int j = 0; j < len; j++) {
            seed = seed * 1103515245u + 12345u;
            int id = j == at ? c + 1 : classes + 1 + (int)((seed >> 8) % (unsigned)(vocab - classes - 1));
            fprintf(f, " %d", id);
        }
        fputc('\n', f);
    }
    return fclose(f) ? -1 : 0;
}

#endif
