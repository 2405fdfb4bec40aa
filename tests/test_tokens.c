/* tests/test_tokens.c — variable-length token data: the token-file reader and its errors, the
 * length-grouping sampler (a pure function), token batches from the loader, [data] keys.
 * Not the token layers (test_seq.c) and not training on tokens (test_train_tokens.c). */
#include <string.h>
#include <zlib.h>
#include "loader.h"
#include "modelutil.h"

static struct glia_context *ctx;

static glia_status load(const char *text, int64_t vocab, int64_t max_length, int64_t limit, struct glia__dataset *d)
{
    const char *p = glia_test_tmp("glia_tokens.txt");
    CU_ASSERT_FATAL(glia_test_write(p, text) == 0);
    return glia__tokens_load(ctx, p, vocab, max_length, limit, d);
}

static void test_read(void)
{
    struct glia__dataset d;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(load("# a comment\n2 5 6 7\n\n0 9\r\n  1\t3 3 3 3 3\n4\n", 10, 0, 0, &d), GLIA_OK);
    CU_ASSERT_EQUAL(d.n, 4);
    CU_ASSERT_EQUAL(d.n_classes, 5);
    CU_ASSERT_EQUAL(d.cols, 5);  /* the longest sample */
    CU_ASSERT(d.tokens);
    int64_t lens[4] = {3, 1, 5, 0};
    int32_t labels[4] = {2, 0, 1, 4};
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(glia__sample_len(&d, i), lens[i]);
        CU_ASSERT_EQUAL(d.labels[i], labels[i]);
    }
    CU_ASSERT_EQUAL(d.ids[d.offsets[0] + 2], 7);
    CU_ASSERT_EQUAL(d.ids[d.offsets[1]], 9);
    glia__dataset_free(&d);
    /* samples with a label only: empty sequences, still a valid set */
    CU_ASSERT_EQUAL_FATAL(load("1\n0\n", 10, 0, 0, &d), GLIA_OK);
    CU_ASSERT(d.n == 2 && d.cols == 1 && d.ids != NULL && glia__sample_len(&d, 1) == 0);
    glia__dataset_free(&d);
    /* max_length keeps the first ids; limit the first samples */
    CU_ASSERT_EQUAL_FATAL(load("1 1 2 3 4 5\n0 6 7\n1 8\n", 10, 2, 2, &d), GLIA_OK);
    CU_ASSERT_EQUAL(d.n, 2);
    CU_ASSERT_EQUAL(d.cols, 2);
    CU_ASSERT_EQUAL(glia__sample_len(&d, 0), 2);
    CU_ASSERT_EQUAL(d.ids[1], 2);
    CU_ASSERT_EQUAL(d.ids[2], 6);
    glia__dataset_free(&d);
    /* gzip, and a last line without a newline */
    const char *gz = glia_test_tmp("glia_tokens.txt.gz");
    gzFile g = gzopen(gz, "wb");
    CU_ASSERT_FATAL(g != NULL);
    gzputs(g, "3 1 2\n0 4 4 4");
    gzclose(g);
    CU_ASSERT_EQUAL_FATAL(glia__tokens_load(ctx, gz, 5, 0, 0, &d), GLIA_OK);
    CU_ASSERT_EQUAL(d.n, 2);
    CU_ASSERT_EQUAL(glia__sample_len(&d, 1), 3);
    char want[700];  /* the largest label's place: what the model's class-count message names */
    snprintf(want, sizeof want, "label 3 at %s:1", gz);
    CU_ASSERT(d.classes_why && !strcmp(d.classes_why, want));
    glia__dataset_free(&d);
    /* a second gzip member is more of the file; other bytes after the gzip data are refused */
    g = gzopen(gz, "ab");
    CU_ASSERT_FATAL(g != NULL);
    gzputs(g, "\n2 3\n");
    gzclose(g);
    CU_ASSERT_EQUAL_FATAL(glia__tokens_load(ctx, gz, 5, 0, 0, &d), GLIA_OK);
    CU_ASSERT_EQUAL(d.n, 3);
    CU_ASSERT_EQUAL(d.labels[2], 2);
    glia__dataset_free(&d);
    FILE *f = fopen(gz, "ab");
    CU_ASSERT_FATAL(f != NULL);
    fputs("4 4 4\n", f);
    fclose(f);
    CU_ASSERT_EQUAL(glia__tokens_load(ctx, gz, 5, 0, 0, &d), GLIA_EFORMAT);
    snprintf(want, sizeof want, "%s: 6 bytes of trailing data after the gzip data", gz);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), want));
    /* a line longer than the reader's first buffer */
    size_t big = 50000;
    char *text = malloc(big * 2 + 8);
    strcpy(text, "1");
    for (size_t i = 0; i < big; i++) strcat(text + i * 2, " 7");
    strcat(text, "\n");
    CU_ASSERT_EQUAL_FATAL(load(text, 10, 0, 0, &d), GLIA_OK);
    CU_ASSERT_EQUAL(d.cols, (int)big);
    glia__dataset_free(&d);
    free(text);
    glia_context_free(ctx);
}

static void expect_error(const char *text, int64_t vocab, const char *want)
{
    struct glia__dataset d;
    CU_ASSERT_NOT_EQUAL(load(text, vocab, 0, 0, &d), GLIA_OK);
    const char *e = glia_context_error(ctx);
    if (!strstr(e, want)) printf("\n  got '%s', want '%s'\n", e, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(e, want));
    CU_ASSERT_PTR_NULL(d.ids);
    CU_ASSERT_PTR_NULL(d.labels);
}

static void test_errors(void)
{
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    expect_error("1 2 3\n0 2 0 3\n", 10, "glia_tokens.txt:2: token id 0 is out of range 1..9 (0 is the padding id)");
    expect_error("1 2 3\n\n0 2 10\n", 10, "glia_tokens.txt:3: token id 10 is out of range 1..9 ([data] vocab sets the range)");
    expect_error("1 2 x3\n", 10, "glia_tokens.txt:1: token id 'x3' is not an integer");
    expect_error("cat 2 3\n", 10, "glia_tokens.txt:1: label 'cat' is not an integer");
    expect_error("-1 2 3\n", 10, "glia_tokens.txt:1: label -1 is out of range");
    expect_error("1 2 99999999999999999999\n", 10, "is not an integer");
    expect_error("# nothing\n\n", 10, "glia_tokens.txt: no samples");
    static const char nul[] = "1 2\n5 3\0junk\n7 8 9\n";  /* a NUL inside line 2 */
    const char *p = glia_test_tmp("glia_tokens_nul.txt");
    FILE *f = fopen(p, "wb");
    CU_ASSERT_FATAL(f && fwrite(nul, 1, sizeof nul - 1, f) == sizeof nul - 1);
    fclose(f);
    struct glia__dataset d0;
    CU_ASSERT_EQUAL(glia__tokens_load(ctx, p, 10, 0, 0, &d0), GLIA_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "glia_tokens_nul.txt:2: a NUL byte: not a token file"));
    struct glia__dataset d;
    CU_ASSERT_NOT_EQUAL(glia__tokens_load(ctx, "/nonexistent/t.txt", 10, 0, 0, &d), GLIA_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "cannot open /nonexistent/t.txt: No such file or directory"));
    glia_context_free(ctx);
}

/* A token set whose sample i has length lens[i] (ids all 1) and label i. */
static struct glia__dataset make_set(int n, const int64_t *lens)
{
    struct glia__dataset d = {.n = n, .channels = 1, .rows = 1, .tokens = true};
    d.offsets = malloc(sizeof(int64_t) * (size_t)(n + 1));
    d.labels = malloc(sizeof(int32_t) * (size_t)n);
    d.offsets[0] = 0;
    int64_t longest = 1;
    for (int i = 0; i < n; i++) {
        d.offsets[i + 1] = d.offsets[i] + lens[i];
        d.labels[i] = i;
        if (lens[i] > longest) longest = lens[i];
    }
    d.ids = malloc(sizeof(int32_t) * (size_t)(d.offsets[n] + 1));
    for (int64_t i = 0; i < d.offsets[n]; i++) d.ids[i] = (int32_t)(1 + i % 7);
    d.cols = (int)longest;
    d.n_classes = n;
    return d;
}

static void random_lens(int64_t *lens, int n, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        lens[i] = 1 + (int64_t)((seed >> 8) % 40);
    }
}

static void test_group_by_length(void)
{
    enum { N = 103 };
    int64_t lens[N], order[N], again[N];
    random_lens(lens, N, 3);
    struct glia__dataset d = make_set(N, lens);
    for (int i = 0; i < N; i++) order[i] = (i * 37) % N;  /* some order */
    int64_t before[N];
    memcpy(before, order, sizeof order);
    CU_ASSERT_EQUAL_FATAL(glia__group_by_length(order, N, &d, 24, 8, false, 1), GLIA_OK);
    /* without shuffle: each run of 24 holds the same samples, longest first, ties in order */
    for (int start = 0; start < N; start += 24) {
        int m = N - start < 24 ? N - start : 24;
        for (int i = 1; i < m; i++) {
            int64_t a = lens[order[start + i - 1]], b = lens[order[start + i]];
            CU_ASSERT(a >= b);
        }
        int seen[N] = {0};
        for (int i = 0; i < m; i++) seen[before[start + i]]++;
        for (int i = 0; i < m; i++) CU_ASSERT_EQUAL(seen[order[start + i]], 1);
    }
    /* with shuffle: the same batches (as sets, in place), in an order from the seed; the last
     * partial batch (103 = 12 * 8 + 7) stays last */
    memcpy(order, before, sizeof order);
    memcpy(again, before, sizeof order);
    int64_t sorted[N];
    memcpy(sorted, before, sizeof order);
    CU_ASSERT_EQUAL_FATAL(glia__group_by_length(sorted, N, &d, 24, 8, false, 1), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia__group_by_length(order, N, &d, 24, 8, true, 11), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia__group_by_length(again, N, &d, 24, 8, true, 11), GLIA_OK);
    CU_ASSERT_EQUAL(memcmp(order, again, sizeof order), 0);  /* pure: same seed, same order */
    CU_ASSERT_EQUAL(memcmp(order + 96, sorted + 96, 7 * sizeof *order), 0);
    int moved = 0, used[12] = {0};
    for (int b = 0; b < 12; b++) {
        int found = -1;
        for (int c = 0; c < 12 && found < 0; c++)
            if (!memcmp(order + b * 8, sorted + c * 8, 8 * sizeof *order)) found = c;
        CU_ASSERT(found >= 0);
        if (found >= 0) used[found]++;
        moved += found != b;
    }
    for (int c = 0; c < 12; c++) CU_ASSERT_EQUAL(used[c], 1);
    CU_ASSERT(moved > 0);
    memcpy(again, before, sizeof order);
    CU_ASSERT_EQUAL_FATAL(glia__group_by_length(again, N, &d, 24, 8, true, 12), GLIA_OK);
    CU_ASSERT_NOT_EQUAL(memcmp(order, again, sizeof order), 0);  /* another seed, another order */
    glia__dataset_free(&d);
}

/* Padding per batch with and without grouping: grouping pads far less. */
struct epoch_stats {
    int64_t batches, samples, slots, real;
    int seen[256];
};

static void run_epoch(const struct glia__dataset *d, struct glia__loader_options o, int epoch, struct epoch_stats *e)
{
    struct glia__loader L;
    CU_ASSERT_FATAL(glia__loader_init(&L, ctx, d, &o) == GLIA_OK);
    CU_ASSERT_FATAL(glia__loader_start_epoch(&L, epoch, 0) == GLIA_OK);
    struct glia__batch b;
    while (glia__loader_next(&L, &b)) {
        const int32_t *x = b.x;
        int64_t longest = 0;
        for (int64_t i = 0; i < b.n; i++) {
            int s = b.y[i];  /* labels are sample indices */
            e->seen[s]++;
            int64_t k = glia__sample_len(d, s);
            if (k > longest) longest = k;
            for (int64_t j = 0; j < b.len; j++)  /* the sample's ids, then zeros */
                CU_ASSERT_EQUAL(x[i * b.len + j], j < k ? d->ids[d->offsets[s] + j] : 0);
        }
        int mult = o.pad_multiple > 0 ? o.pad_multiple : 1;
        CU_ASSERT_EQUAL(b.len, (longest + mult - 1) / mult * mult);
        CU_ASSERT_EQUAL(b.len % mult, 0);
        e->batches++;
        e->samples += b.n;
        glia__loader_release(&L);
    }
    e->slots += L.slots;
    e->real += L.real;
    glia__loader_free(&L);
}

static void test_loader_tokens(void)
{
    enum { N = 200 };
    int64_t lens[N];
    random_lens(lens, N, 7);
    struct glia__dataset d = make_set(N, lens);
    d.cols = (d.cols + 3) / 4 * 4;  /* as the model does: the longest padded length */
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    double pad[2][2];
    for (int group = 0; group < 2; group++)
        for (int workers = 0; workers < 3; workers += 2) {
            struct glia__loader_options o = {16, workers, 2, true, false, true, false, 0, {{0}, {1, 1, 1}}, 5, NULL, 0, 1, true,
                                             group, 4, 4, false, NULL};
            struct epoch_stats e = {0};
            run_epoch(&d, o, 1, &e);
            CU_ASSERT_EQUAL(e.batches, 13);
            CU_ASSERT_EQUAL(e.samples, N);
            for (int i = 0; i < N; i++) CU_ASSERT_EQUAL(e.seen[i], 1);
            int64_t real = 0;
            for (int i = 0; i < N; i++) real += lens[i];
            CU_ASSERT_EQUAL(e.real, real);
            pad[group][workers / 2] = 1 - (double)e.real / (double)e.slots;
        }
    /* random batches of lengths 1..40 pad much; sorted runs of 64 samples far less */
    printf("\n  padding: %.3f random, %.3f grouped\n", pad[0][0], pad[1][0]);
    CU_ASSERT(pad[0][0] > 0.3);
    CU_ASSERT(pad[1][0] < pad[0][0] / 2);
    CU_ASSERT_EQUAL(pad[0][0], pad[0][1]);  /* workers do not change the batches */
    CU_ASSERT_EQUAL(pad[1][0], pad[1][1]);
    glia_context_free(ctx);
    glia__dataset_free(&d);
}

/* Two ranks with grouping: disjoint shards covering the padded set, and batch k of every rank
 * comes from the same run of the job's batches, so the ranks' steps have similar lengths. */
static void test_loader_tokens_ranks(void)
{
    enum { N = 101, W = 2, B = 5 };
    int64_t lens[N];
    random_lens(lens, N, 9);
    struct glia__dataset d = make_set(N, lens);
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    int64_t len_of[W][16], count[N] = {0};
    int nb[W] = {0};
    for (int r = 0; r < W; r++) {
        struct glia__loader_options o = {B, 1, 2, true, false, true, false, 0, {{0}, {1, 1, 1}}, 5, NULL, r, W, true, true, 2, 1, false, NULL};
        struct glia__loader L;
        CU_ASSERT_FATAL(glia__loader_init(&L, ctx, &d, &o) == GLIA_OK);
        CU_ASSERT_EQUAL(L.n_batches_per_epoch, 11);  /* 101 padded to 102: 51 each, 10 of 5 + 1 */
        CU_ASSERT_FATAL(glia__loader_start_epoch(&L, 2, 0) == GLIA_OK);
        struct glia__batch b;
        while (glia__loader_next(&L, &b)) {
            CU_ASSERT_FATAL(nb[r] < 16);
            len_of[r][nb[r]++] = b.len;
            for (int64_t i = 0; i < b.n; i++) count[b.y[i]]++;
            glia__loader_release(&L);
        }
        glia__loader_free(&L);
    }
    CU_ASSERT_EQUAL(nb[0], 11);
    CU_ASSERT_EQUAL(nb[1], 11);
    int64_t total = 0;
    for (int i = 0; i < N; i++) {
        CU_ASSERT(count[i] >= 1 && count[i] <= 2);
        total += count[i];
    }
    CU_ASSERT_EQUAL(total, 102);
    /* the same global batch: both ranks' lengths close (strided halves of a sorted batch) */
    int close = 0;
    for (int k = 0; k < 11; k++) close += llabs(len_of[0][k] - len_of[1][k]) <= 4;
    CU_ASSERT(close >= 9);
    glia_context_free(ctx);
    glia__dataset_free(&d);
}

/* [data] keys: each format refuses the other's keys and needs its own. */
static void test_config_keys(void)
{
    const char *tok = glia_test_tmp("glia_tokens_cfg.txt");
    CU_ASSERT_FATAL(glia_test_write(tok, "0 1 2\n1 3\n") == 0);
    struct {
        const char *data, *want;
    } cases[] = {
        {"format = tokens\ntrain = %s\ntest = %s\n", "t.ini:2: [data] vocab: missing required key (format = tokens)"},
        {"format = tokens\ntrain = %s\ntest = %s\nvocab = 9\nmean = 0.5\n", "t.ini:7: [data] mean: 'mean' applies to format = idx, cifar10, cifar100, synthetic, npy or folder, not tokens"},
        {"format = tokens\ntrain = %s\ntest = %s\nvocab = 1\n", "t.ini:6: [data] vocab: vocab must be at least 2"},
        {"format = tokens\ntrain = %s\ntest = %s\nvocab = 3\n", "token id 3 is out of range 1..2"},
        {"format = tokens\ntrain = %s\ntest = %s\nvocab = 9\n",
         "t.ini:7: [fc] layer type 'linear' cannot read the token batch of [data] format = tokens (I32 ids); start with an embedding layer"},
        {"train_images = %s\ntrain_labels = %s\ntest_images = a\ntest_labels = b\ngroup_by_length = on\n",
         "t.ini:7: [data] group_by_length: 'group_by_length' applies to format = tokens, not idx"},
        {"train_images = %s\ntest_images = %s\ntest_labels = b\n", "t.ini:2: [data] train_labels: missing required key (format = idx)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char data[512], text[1024];
        snprintf(data, sizeof data, cases[i].data, tok, tok);
        snprintf(text, sizeof text, "\n[data]\n%s[fc]\ntype = linear\noutputs = 2\n[loss]\ntype = softmax_cross_entropy\n",
                 data);
        expect_build_error(text, cases[i].want);
    }
}

GLIA_TEST_MAIN("tokens", GLIA_TEST(test_read), GLIA_TEST(test_errors), GLIA_TEST(test_group_by_length),
               GLIA_TEST(test_loader_tokens), GLIA_TEST(test_loader_tokens_ranks), GLIA_TEST(test_config_keys))
