/* tests/test_lm.c — a language model's data and evaluation: llm.c token files and byte files read as one stream
 * (files generated here), their errors, the windows of an epoch (random per (seed, epoch), sequential for
 * validation, never across a file's end), the [data] keys of format = token_stream and bytes, and a bigram model
 * (tests/fixtures/bigram) trained end to end whose validation loss falls and whose perplexity is reported.
 * Not the loss kernel (test_layers.c, torch_layer_softmax_cross_entropy.py). */
#include <math.h>
#include <string.h>
#include <sys/wait.h>
#include "loader.h"
#include "parts.h"
#include "modelutil.h"
#include "../tools/plot.h"
#include "../tools/sample.h"

static char dir[512];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "%s", glia_test_tmp("lm"));
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    CU_ASSERT_FATAL(system(cmd) == 0);
}

static const char *path_of(const char *name)
{
    static char bufs[4][700];
    static int k;
    char *b = bufs[k++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
    return b;
}

/* An llm.c token file: header words magic, version, count (the count written may differ from n), then the n tokens
 * base, base + 1, ... (mod 65536), then `extra` more bytes. */
static void write_llmc(const char *name, int32_t magic, int32_t version, int32_t count, int n, unsigned base, int extra)
{
    FILE *f = fopen(path_of(name), "wb");
    CU_ASSERT_FATAL(f != NULL);
    uint8_t h[1024] = {0};
    int32_t w[3] = {magic, version, count};
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 4; b++) h[4 * i + b] = (uint8_t)((uint32_t)w[i] >> 8 * b);
    fwrite(h, 1, sizeof h, f);
    for (int i = 0; i < n; i++) {
        unsigned t = (base + (unsigned)i) & 0xffff;
        fputc((int)(t & 0xff), f);
        fputc((int)(t >> 8), f);
    }
    for (int i = 0; i < extra; i++) fputc(0, f);
    CU_ASSERT_FATAL(fclose(f) == 0);
}

static struct glia_context *ctx;

static glia_status load(const char *const *names, int n, bool bytes, int64_t vocab, struct glia__dataset *d)
{
    const char *paths[8];
    char buf[8][700];
    for (int i = 0; i < n; i++) {
        snprintf(buf[i], sizeof buf[i], "%s", path_of(names[i]));
        paths[i] = buf[i];
    }
    return glia__stream_load(ctx, paths, n, bytes, vocab, d);
}

/* Whether the window at start s of d lies inside one shard. */
static bool inside_one_shard(const struct glia__dataset *d, int64_t s)
{
    for (int k = 0; k < d->n_shards; k++) {
        int64_t b = k ? d->shard_end[k - 1] : 0;
        if (s >= b && s < d->shard_end[k]) return s + d->cols + 1 <= d->shard_end[k];
    }
    return false;
}

/* Two shards of consecutive tokens (1000.. and 5000..): a window that crossed from one into the other would break
 * the +1 steps. Random windows are a pure function of (seed, epoch), differ between epochs, and stay in a shard;
 * sequential ones start at 0, T, 2T, ... of each shard; the batches hold inputs and their next tokens. */
static void test_windows(void)
{
    make_dir();
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    write_llmc("a.bin", 20240520, 1, 50, 50, 1000, 0);
    write_llmc("b.bin", 20240520, 1, 23, 23, 5000, 0);
    struct glia__dataset d;
    const char *names[2] = {"a.bin", "b.bin"};
    CU_ASSERT_EQUAL_FATAL(load(names, 2, false, 0, &d), GLIA_OK);
    CU_ASSERT_EQUAL(d.n_tok, 73);
    CU_ASSERT_EQUAL(d.n_shards, 2);
    CU_ASSERT(d.tokens && d.stream);
    d.cols = 8;
    CU_ASSERT_EQUAL(glia__stream_count(&d, 8, true), 49 / 8 + 22 / 8);  /* 6 + 2 */
    CU_ASSERT_EQUAL(glia__stream_count(&d, 8, false), 42 + 15);
    d.n = 40;
    int64_t s1[40], s2[40], s3[40];
    glia__stream_starts(&d, true, 7, 1, s1);
    glia__stream_starts(&d, true, 7, 1, s2);
    glia__stream_starts(&d, true, 7, 2, s3);
    CU_ASSERT_EQUAL(memcmp(s1, s2, sizeof s1), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(s1, s3, sizeof s1), 0);
    bool in_b = false;
    for (int i = 0; i < 40; i++) {
        CU_ASSERT(inside_one_shard(&d, s1[i]) && inside_one_shard(&d, s3[i]));
        in_b |= s1[i] >= 50;
    }
    CU_ASSERT(in_b);  /* both files are drawn from */
    glia__stream_starts(&d, false, 7, 1, s2);
    const int64_t seq[8] = {0, 8, 16, 24, 32, 40, 50, 58};
    for (int i = 0; i < 40; i++) CU_ASSERT_EQUAL(s2[i], seq[i % 8]);  /* in order, then again */
    int32_t x[2 * 8], y[2 * 8];
    glia__stream_fill(&d, (int64_t[]){3, 58}, 2, x, y);
    for (int j = 0; j < 8; j++) {
        CU_ASSERT_EQUAL(x[j], 1003 + j);
        CU_ASSERT_EQUAL(y[j], 1004 + j);
        CU_ASSERT_EQUAL(x[8 + j], 5008 + j);
        CU_ASSERT_EQUAL(y[8 + j], 5009 + j);
    }
    glia__dataset_free(&d);
    glia_context_free(ctx);
}

/* Every bad file: one line naming it and what is wrong. */
static void test_errors(void)
{
    make_dir();
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    static const struct {
        int32_t magic, version, count;
        int n, header_bytes, extra;
        int64_t vocab;
        const char *want;
    } cs[] = {
        {20240521, 1, 10, 10, 1024, 0, 0, "bad magic 20240521 (an llm.c token file has 20240520)"},
        {20240520, 2, 10, 10, 1024, 0, 0, "version 2 (glia reads llm.c token files of version 1"},
        {20240520, 1, 10, 9, 1024, 0, 0, "truncated: the header says 10 tokens, the file holds 9"},
        {20240520, 1, 10, 10, 1024, 3, 0, "bytes after the 10 tokens the header says"},
        {20240520, 1, 10, 10, 1024, 0, 1005, "token 1005 at position 5 is not below the vocabulary's 1005"},
        {20240520, 1, -4, 0, 1024, 0, 0, "the header's token count -4 is negative"},
        {20240520, 1, 10, 0, 100, 0, 0, "truncated header: 100 bytes, an llm.c token file starts with 1024"},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        if (cs[c].header_bytes < 1024) {
            FILE *f = fopen(path_of("bad.bin"), "wb");
            CU_ASSERT_FATAL(f != NULL);
            for (int i = 0; i < cs[c].header_bytes; i++) fputc(i == 0 ? 0x28 : 0, f);
            fclose(f);
        } else {
            write_llmc("bad.bin", cs[c].magic, cs[c].version, cs[c].count, cs[c].n, 1000, cs[c].extra);
        }
        struct glia__dataset d;
        const char *names[2] = {"good.bin", "bad.bin"};
        write_llmc("good.bin", 20240520, 1, 20, 20, 0, 0);
        CU_ASSERT_NOT_EQUAL(load(names, 2, false, cs[c].vocab, &d), GLIA_OK);
        const char *e = glia_context_error(ctx);
        if (!strstr(e, cs[c].want) || !strstr(e, "bad.bin")) printf("\n  got '%s', want '%s'\n", e, cs[c].want);
        CU_ASSERT_PTR_NOT_NULL(strstr(e, cs[c].want));
        CU_ASSERT_PTR_NOT_NULL(strstr(e, "/bad.bin: "));
        CU_ASSERT_PTR_NULL(strchr(e, '\n'));
        CU_ASSERT_PTR_NULL(d.tok);  /* nothing kept */
    }
    struct glia__dataset d;
    const char *missing[1] = {"none.bin"};
    CU_ASSERT_NOT_EQUAL(load(missing, 1, true, 0, &d), GLIA_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "none.bin"));
    glia_context_free(ctx);
}

/* format = bytes without validation files: the last val_fraction of the bytes, the files' ends kept on both sides. */
static void test_bytes_split(void)
{
    make_dir();
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_test_write(path_of("one.txt"), "0123456789abcdefghij") == 0);        /* 20 bytes */
    CU_ASSERT_FATAL(glia_test_write(path_of("two.txt"), "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123") == 0);  /* 30 */
    for (int c = 0; c < 2; c++) {
        double frac = c ? 0.7 : 0.1;  /* the cut inside two.txt, or inside one.txt */
        struct glia__dataset d, t;
        const char *names[2] = {"one.txt", "two.txt"};
        CU_ASSERT_EQUAL_FATAL(load(names, 2, true, 0, &d), GLIA_OK);
        CU_ASSERT_EQUAL(d.n_tok, 50);
        CU_ASSERT_EQUAL(d.tok[20], 'A');
        CU_ASSERT_EQUAL_FATAL(glia__stream_split(&d, frac, &t), GLIA_OK);
        int64_t cut = c ? 15 : 45;
        CU_ASSERT_EQUAL(d.n_tok, cut);
        CU_ASSERT_EQUAL(t.n_tok, 50 - cut);
        CU_ASSERT_EQUAL(d.n_shards, c ? 1 : 2);
        CU_ASSERT_EQUAL(d.shard_end[d.n_shards - 1], cut);
        CU_ASSERT_EQUAL(t.n_shards, c ? 2 : 1);
        CU_ASSERT_EQUAL(t.shard_end[t.n_shards - 1], 50 - cut);
        if (c) CU_ASSERT_EQUAL(t.shard_end[0], 5);  /* the rest of one.txt, then two.txt */
        CU_ASSERT_EQUAL(t.tok[0], c ? 'f' : 'Z');
        glia__dataset_free(&d);
        glia__dataset_free(&t);
    }
    glia_context_free(ctx);
}

/* A model of [data] `data` (appended to format and batch keys) over the bigram fixture and the loss. */
static const char *model_text(const char *data, const char *train, int vocab)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[plugins]\npath = %s\n[runtime]\ndevice = cpu\nseed = 3\n"
             "[data]\nbatch_size = 4\ntest_batch_size = 8\nworkers = 1\n%s\n"
             "[train]\noptimizer = adam\nlr = 0.05\n%s\n"
             "[lm]\ntype = bigram\nvocab = %d\n[loss]\ntype = softmax_cross_entropy\n",
             glia_test_fixtures(), data, train, vocab);
    return buf;
}

/* The windows an epoch takes: tokens / (B T) batches, or steps_per_epoch's; validation's sequential windows, or
 * val_batches' batches of them; and the keys' errors. */
static void test_keys(void)
{
    make_dir();
    write_llmc("train_000.bin", 20240520, 1, 1000, 1000, 10, 0);
    write_llmc("train_001.bin", 20240520, 1, 600, 600, 10, 0);
    write_llmc("val_000.bin", 20240520, 1, 300, 300, 10, 0);
    char data[1400];
    snprintf(data, sizeof data, "format = token_stream\ntrain_tokens = %s/train_*.bin\nval_tokens = %s/val_*.bin\n"
                                "seq_len = 16\n", dir, dir);
    struct run r;
    open_run(&r, model_text(data, "", 2000));
    CU_ASSERT_EQUAL(r.m->data.train.n_shards, 2);
    CU_ASSERT_EQUAL(r.m->data.train.n, 1600 / (4 * 16) * 4);  /* 25 steps of 4 windows */
    CU_ASSERT_EQUAL(r.m->data.test.n, 299 / 16);               /* sequential windows of 17 tokens */
    CU_ASSERT_EQUAL(r.m->data.vocab, 1010);                     /* the largest token + 1 */
    CU_ASSERT(r.m->data.lm);
    close_run(&r);
    char more[1600];
    snprintf(more, sizeof more, "%svocab = 1700\nsteps_per_epoch = 7\nval_batches = 2\n", data);
    open_run(&r, model_text(more, "", 2000));
    CU_ASSERT_EQUAL(r.m->data.train.n, 7 * 4);
    CU_ASSERT_EQUAL(r.m->data.test.n, 2 * 8);
    CU_ASSERT_EQUAL(r.m->data.vocab, 1700);
    close_run(&r);
    /* errors, each naming its key or file */
    snprintf(more, sizeof more, "%svocab = 1000\n", data);
    expect_build_error(model_text(more, "", 2000), "train_000.bin: token 1000 at position 990 is not below the "
                                                   "vocabulary's 1000");
    snprintf(more, sizeof more, "format = token_stream\ntrain_tokens = %s/train_*.bin\nseq_len = 16\n", dir);
    expect_build_error(model_text(more, "", 2000), "val_tokens: missing required key (format = token_stream)");
    snprintf(more, sizeof more, "%sval_fraction = 0.2\n", data);
    expect_build_error(model_text(more, "", 2000), "'val_fraction' applies to format = bytes, not token_stream");
    snprintf(more, sizeof more, "format = token_stream\ntrain_tokens = %s/nothing_*.bin\nval_tokens = %s/val_*.bin\n"
                                "seq_len = 16\n", dir, dir);
    expect_build_error(model_text(more, "", 2000), "no file matches");
    snprintf(more, sizeof more, "%s", data);
    strcpy(strstr(more, "seq_len = 16"), "seq_len = 300\n");
    expect_build_error(model_text(more, "", 2000), "the validation files hold no window of seq_len + 1 = 301 tokens");
    expect_build_error(model_text(data, "", 1000), "[lm] vocab: 1000 is smaller than [data] vocab = 1010");
    /* a per-sample loss is not a language model's */
    snprintf(more, sizeof more,
             "[runtime]\ndevice = cpu\n[data]\n%s\n[emb]\ntype = embedding\nvocab = 2000\ndim = 4\n[f]\ntype = flatten\n"
             "[fc]\ntype = linear\noutputs = 2000\n[loss]\ntype = softmax_cross_entropy\n", data);
    expect_build_error(more, "a language model's loss expects (N, T, vocab) logits, T = [data] seq_len = 16 (a label "
                             "per position), got 64x2000");
}

/* The last "key": value of a metrics file's last line (NAN when absent). */
static double last_metric(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    CU_ASSERT_FATAL(f != NULL);
    char line[4096], last[4096] = "", want[64];
    while (fgets(line, sizeof line, f)) strcpy(last, line);
    fclose(f);
    snprintf(want, sizeof want, "\"%s\": ", key);
    const char *p = strstr(last, want);
    return p ? atof(p + strlen(want)) : NAN;
}

/* Text whose next byte the current one mostly decides (a bigram model's to learn), from a seeded generator. */
static void write_text(const char *name, int n, unsigned seed)
{
    static const char next[] = "the quick brown fox jumps over a lazy dog ";
    FILE *f = fopen(path_of(name), "wb");
    CU_ASSERT_FATAL(f != NULL);
    int at = 0;
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        at = (seed >> 16) % 10 == 0 ? (int)((seed >> 20) % (sizeof next - 1)) : (at + 1) % (int)(sizeof next - 1);
        fputc(next[at], f);
    }
    CU_ASSERT_FATAL(fclose(f) == 0);
}

/* A bigram model trained on bytes: the validation loss falls well below the uniform guess's log 256, every epoch
 * reports it with its perplexity (the line, the metrics file without an accuracy), and a second run repeats the
 * first bit for bit (windows drawn from the seed and the epoch). */
static void test_trains(void)
{
    make_dir();
    write_text("corpus_a.txt", 6000, 1);
    write_text("corpus_b.txt", 3000, 2);
    char data[1400];
    snprintf(data, sizeof data, "format = bytes\ntrain_tokens = %s/corpus_*.txt\nseq_len = 32\nval_fraction = 0.2\n",
             dir);
    float *w[2];
    long long n = 0;
    for (int k = 0; k < 2; k++) {
        struct run r;
        open_run(&r, model_text(data, "epochs = 3", 256));
        struct glia_epoch_result res[3] = GLIA_TEST_RESULTS;
        const char *metrics = glia_test_tmp("lm-metrics.jsonl");
        char out_path[700];
        snprintf(out_path, sizeof out_path, "%s/out.txt", dir);
        FILE *out = fopen(out_path, "w+");
        CU_ASSERT_FATAL(out != NULL);
        struct glia_train_options o = quiet;
        o.metrics_path = metrics;
        o.out = out;
        o.progress = 0;
        glia_status st = glia_model_train(r.m, &o, res, 3);
        if (st) printf("\n  %s\n", glia_context_error(r.ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        if (k == 0) printf("\n  val_loss %.3f -> %.3f -> %.3f (log 256 = %.3f)", res[0].test_loss, res[1].test_loss,
                           res[2].test_loss, log(256.0));
        CU_ASSERT(res[0].test_loss < log(256.0));
        CU_ASSERT(res[2].test_loss < res[0].test_loss);
        CU_ASSERT(res[2].test_loss < 1.5);  /* mostly one next byte: far below the uniform 5.55 */
        CU_ASSERT(isnan(res[2].test_accuracy));
        CU_ASSERT_DOUBLE_EQUAL(last_metric(metrics, "val_loss"), res[2].test_loss, 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(last_metric(metrics, "perplexity"), exp(res[2].test_loss), 1e-4 * exp(res[2].test_loss));
        CU_ASSERT(isnan(last_metric(metrics, "test_accuracy")));
        char err[256], svg[700];
        snprintf(svg, sizeof svg, "%s/lm.svg", dir);
        int rc = glia_plot(metrics, svg, err, sizeof err);  /* glia plot draws the losses */
        if (rc) printf("\n  glia plot: %s\n", err);
        CU_ASSERT_EQUAL(rc, 0);
        rewind(out);
        char text[8192];
        size_t got = fread(text, 1, sizeof text - 1, out);
        text[got] = 0;
        fclose(out);
        char want[128];
        snprintf(want, sizeof want, "val_loss %.4f perplexity %.4g", res[2].test_loss, exp(res[2].test_loss));
        if (!strstr(text, want)) printf("\n  output: %s\n  want: %s\n", text, want);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, want));
        CU_ASSERT_PTR_NULL(strstr(text, "test_accuracy"));
        double loss, acc;
        CU_ASSERT_EQUAL(glia_model_evaluate(r.m, &loss, &acc), GLIA_OK);
        CU_ASSERT_DOUBLE_EQUAL(loss, res[2].test_loss, 1e-6);
        CU_ASSERT(isnan(acc));
        w[k] = weights(&r, &n);
        close_run(&r);
    }
    CU_ASSERT_EQUAL(memcmp(w[0], w[1], sizeof(float) * (size_t)n), 0);
    free(w[0]);
    free(w[1]);
}

/* glia sample's rule: temperature 0 and top_k 1 take the largest logit; otherwise draws follow the softmax of
 * logits / temperature (seeded, so the counts are fixed; the bound is wide), and top_k keeps only the k largest. */
static void test_sample_pick(void)
{
    const float logits[4] = {0.0f, (float)log(3.0), -1.0f, -40.0f};
    double p[4];
    uint64_t rng = 7;
    CU_ASSERT_EQUAL(glia__sample_pick(logits, 4, 0.0, 0, &rng, p), 1);
    CU_ASSERT_EQUAL(rng, 7u);  /* no draw */
    int count[4] = {0};
    for (int i = 0; i < 20000; i++) count[glia__sample_pick(logits, 4, 1.0, 2, &rng, p)]++;
    CU_ASSERT_EQUAL(count[2] + count[3], 0);   /* outside the top 2 */
    double share = count[1] / 20000.0;         /* 3 / (1 + 3) */
    if (fabs(share - 0.75) > 0.02) printf("\n  token 1 drawn %.4f of the time, want 0.75\n", share);
    CU_ASSERT(fabs(share - 0.75) <= 0.02);
    for (int i = 0; i < 100; i++) CU_ASSERT_EQUAL(glia__sample_pick(logits, 4, 1.0, 1, &rng, p), 1);
    memset(count, 0, sizeof count);
    for (int i = 0; i < 20000; i++) count[glia__sample_pick(logits, 4, 2.0, 0, &rng, p)]++;
    double z = 1 + sqrt(3.0) + exp(-0.5) + exp(-20.0);  /* temperature 2: weights e^(l/2) */
    CU_ASSERT(fabs(count[0] / 20000.0 - 1 / z) <= 0.02);
    CU_ASSERT(fabs(count[2] / 20000.0 - exp(-0.5) / z) <= 0.02);
}

/* Runs the glia program with args; its standard output in out (n bytes of room); its exit status. */
static int run_glia(const char *args, char *out, size_t n)
{
    const char *bin = getenv("GLIA_BIN");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", bin ? bin : "tools/glia", args);
    FILE *p = popen(cmd, "r");
    CU_ASSERT_FATAL(p != NULL);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = 0;
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* share/glia/examples/gpt-bytes.ini (embedding, position embedding, pre-norm attention blocks, tied lm_head) trains on
 * generated text: its validation loss falls; glia_model_logits is causal (a prefix's logits are the full window's
 * first rows); glia_model_decode gives the same rows chunk by chunk and refuses gaps, rows that change and positions past
 * seq_len; glia sample prints the prompt and the tokens asked for, the same for the same seed, refuses a model
 * that is no language model. */
static void test_gpt_bytes(void)
{
    make_dir();
    write_text("corpus_a.txt", 20000, 3);
    char sets[2048];
    snprintf(sets, sizeof sets,
             "runtime.device=cpu|data.train_tokens=%s/corpus_*.txt|data.steps_per_epoch=25|data.val_batches=4|"
             "data.workers=1|train.epochs=2|train.warmup_steps=10|train.lr=0.003|train.checkpoint_dir=%s/ckpt",
             dir, dir);
    struct run r;
    CU_ASSERT_FATAL(glia_context_new(&r.ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_load(r.ctx, glia_test_src("share/glia/examples/gpt-bytes.ini"), &r.cfg) == GLIA_OK);
    char *save = NULL;
    for (char *kv = strtok_r(sets, "|", &save); kv; kv = strtok_r(NULL, "|", &save))
        CU_ASSERT_FATAL(glia_config_set(r.cfg, kv) == GLIA_OK);
    glia_status st = glia_model_build(r.ctx, r.cfg, &r.m);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    char *sum = NULL;  /* the GPT recipe's decay: every 2-D weight (embeddings too, as GPT-2), no 1-D parameter */
    size_t sum_len;
    FILE *sf = open_memstream(&sum, &sum_len);
    glia_model_summary(r.m, sf);
    fclose(sf);
    const char *nd = strstr(sum, "no weight decay:");
    CU_ASSERT_PTR_NOT_NULL_FATAL(nd);
    char line[4096];
    snprintf(line, sizeof line, "%.*s ", (int)strcspn(nd, "\n"), nd);
    CU_ASSERT_PTR_NOT_NULL(strstr(line, " h0_ln1.weight "));
    CU_ASSERT_PTR_NOT_NULL(strstr(line, " h3_fc2.bias "));
    CU_ASSERT_PTR_NOT_NULL(strstr(line, " ln_f.bias "));
    CU_ASSERT_PTR_NULL(strstr(line, "wte."));
    CU_ASSERT_PTR_NULL(strstr(line, "wpe."));
    CU_ASSERT_PTR_NULL(strstr(line, "qkv.weight"));
    CU_ASSERT_PTR_NULL(strstr(line, "fc1.weight"));
    CU_ASSERT_PTR_NOT_NULL(strstr(sum, "tied weight: lm_head.weight is wte.weight"));
    free(sum);
    struct glia_epoch_result res[2] = GLIA_TEST_RESULTS;
    st = glia_model_train(r.m, &quiet, res, 2);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    printf("\n  gpt-bytes val_loss %.3f -> %.3f (log 256 = %.3f)", res[0].test_loss, res[1].test_loss, log(256.0));
    CU_ASSERT(res[1].test_loss < res[0].test_loss);
    CU_ASSERT(res[1].test_loss < 3.0);
    struct glia_model_io io = {.struct_size = sizeof io};
    CU_ASSERT_EQUAL_FATAL(glia_model_io_info(r.m, &io), GLIA_OK);
    CU_ASSERT(io.tokens && io.lm && io.bytes && io.len == 64 && io.vocab == 256 && io.classes == 256);
    int32_t tok[64];
    for (int i = 0; i < 64; i++) tok[i] = "the quick brown fox "[i % 20];
    float *full = malloc(sizeof(float) * 64 * 256), *part = malloc(sizeof(float) * 64 * 256);
    CU_ASSERT_FATAL(full && part);
    struct glia_batch b = {.struct_size = sizeof b, .shape = glia_shape_make(2, (int64_t[]){1, 64}), .tokens = tok};
    CU_ASSERT_EQUAL_FATAL(glia_model_logits(r.m, &b, full, 64 * 256), GLIA_OK);
    b.shape.dim[1] = 9;
    CU_ASSERT_EQUAL_FATAL(glia_model_logits(r.m, &b, part, 64 * 256), GLIA_OK);
    double worst = 0;
    for (int i = 0; i < 9 * 256; i++) worst = fmax(worst, fabs((double)part[i] - full[i]));
    CU_ASSERT(worst < 1e-4);
    CU_ASSERT_EQUAL(glia_model_logits(r.m, &b, part, 9 * 256 - 1), GLIA_EINVAL);  /* no room */
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(r.ctx), "glia_model_logits: room for"));
    /* glia_model_decode: the window in chunks of 7, 1, 1, 30 and 25 positions gives the whole window's rows */
    worst = 0;
    const int chunk[] = {7, 1, 1, 30, 25};
    for (int c = 0, pos = 0; c < 5; pos += chunk[c++]) {
        struct glia_batch d = {.struct_size = sizeof d, .shape = glia_shape_make(2, (int64_t[]){1, chunk[c]}),
                               .tokens = tok + pos};
        st = glia_model_decode(r.m, &d, pos, part, 64 * 256);
        if (st) printf("\n  %s\n", glia_context_error(r.ctx));
        CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
        for (int i = 0; i < chunk[c] * 256; i++) worst = fmax(worst, fabs((double)part[i] - full[pos * 256 + i]));
    }
    printf("\n  decode against the whole window: off by %.2g", worst);
    CU_ASSERT(worst < 1e-4);
    struct glia_batch d = {.struct_size = sizeof d, .shape = glia_shape_make(2, (int64_t[]){1, 1}), .tokens = tok};
    CU_ASSERT_EQUAL(glia_model_decode(r.m, &d, 64, part, 256), GLIA_EINVAL);  /* past seq_len */
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(r.ctx), "positions 64 .. 64; the model takes 64 ([data] seq_len)"));
    CU_ASSERT_EQUAL(glia_model_decode(r.m, &d, 3, part, 256), GLIA_OK);  /* back to position 3: the layers hold 0 .. 3 */
    CU_ASSERT_EQUAL(glia_model_decode(r.m, &d, 5, part, 256), GLIA_EINVAL);  /* a gap */
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(r.ctx), "position 5: the layers hold positions 0 .. 3"));
    int32_t two[2] = {1, 2};
    struct glia_batch d2 = {.struct_size = sizeof d2, .shape = glia_shape_make(2, (int64_t[]){2, 1}), .tokens = two};
    CU_ASSERT_EQUAL(glia_model_decode(r.m, &d2, 4, part, 512), GLIA_EINVAL);  /* other rows than those begun */
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(r.ctx), "2 rows; the sequences begun at position 0 are 1"));
    CU_ASSERT_EQUAL(glia_model_decode(r.m, &d2, 0, part, 512), GLIA_OK);
    tok[3] = 300;
    CU_ASSERT_EQUAL(glia_model_logits(r.m, &b, part, 64 * 256), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(r.ctx), "tokens[3] is 300"));
    free(full);
    free(part);
    close_run(&r);

    char args[4096], out[2][4096];
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "sample '%s' --checkpoint '%s/ckpt/final.ckpt' --set runtime.device=cpu "
                 "--set data.train_tokens='%s/corpus_*.txt' --prompt 'the ' --tokens 40 --seed 11 --top-k 20",
                 glia_test_src("share/glia/examples/gpt-bytes.ini"), dir, dir);
        int rc = run_glia(args, out[k], sizeof out[k]);
        if (rc) printf("\n  glia %s: %d\n%s\n", args, rc, out[k]);
        CU_ASSERT_EQUAL_FATAL(rc, 0);
    }
    printf("\n  sampled: %s", out[0]);
    CU_ASSERT_EQUAL(strncmp(out[0], "the ", 4), 0);
    CU_ASSERT_EQUAL(strlen(out[0]), 4 + 40 + 1);
    CU_ASSERT_STRING_EQUAL(out[0], out[1]);
    /* the most likely token each time: the same text with the cache as over the whole window while it fits in
     * seq_len (44 of 64 positions); past it (150 tokens) the text goes on, the window restarting at half of it */
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "sample '%s' --checkpoint '%s/ckpt/final.ckpt' --set runtime.device=cpu "
                 "--set data.train_tokens='%s/corpus_*.txt' --prompt 'the ' --tokens 40 --temperature 0%s",
                 glia_test_src("share/glia/examples/gpt-bytes.ini"), dir, dir, k ? " --no-cache" : "");
        CU_ASSERT_EQUAL_FATAL(run_glia(args, out[k], sizeof out[k]), 0);
    }
    CU_ASSERT_STRING_EQUAL(out[0], out[1]);
    snprintf(args, sizeof args, "sample '%s' --checkpoint '%s/ckpt/final.ckpt' --set runtime.device=cpu "
             "--set data.train_tokens='%s/corpus_*.txt' --prompt 'the ' --tokens 150 --top-k 5",
             glia_test_src("share/glia/examples/gpt-bytes.ini"), dir, dir);
    CU_ASSERT_EQUAL_FATAL(run_glia(args, out[0], sizeof out[0]), 0);
    CU_ASSERT_EQUAL(strlen(out[0]), 4 + 150 + 1);
    /* a layer that cannot decode (attention with causal = off): one notice, then the whole window for each token */
    snprintf(args, sizeof args, "sample '%s' --checkpoint '%s/ckpt/final.ckpt' --set runtime.device=cpu "
             "--set data.train_tokens='%s/corpus_*.txt' --prompt 'the ' --tokens 5 --set h2_attn.causal=off",
             glia_test_src("share/glia/examples/gpt-bytes.ini"), dir, dir);
    CU_ASSERT_EQUAL_FATAL(run_glia(args, out[0], sizeof out[0]), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out[0], "glia: sample: [h2_attn] attention: a cached decode needs causal = on"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out[0], "running the whole window for every token\n"));
    CU_ASSERT_PTR_NULL(strstr(out[0], "--no-cache"));
    FILE *f = fopen(path_of("mlp.ini"), "w");
    CU_ASSERT_FATAL(f != NULL);
    fprintf(f, "[runtime]\ndevice = cpu\n[data]\nformat = synthetic\nchannels = 1\nrows = 4\ncols = 4\nclasses = 3\n"
               "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 3\n[loss]\ntype = softmax_cross_entropy\n");
    CU_ASSERT_FATAL(fclose(f) == 0);
    snprintf(args, sizeof args, "sample '%s' --checkpoint nosuch.ckpt", path_of("mlp.ini"));
    CU_ASSERT_EQUAL(run_glia(args, out[0], sizeof out[0]), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out[0], "is not a language model"));
    snprintf(args, sizeof args, "train '%s' --no-cache", glia_test_src("share/glia/examples/gpt-bytes.ini"));
    CU_ASSERT_EQUAL(run_glia(args, out[0], sizeof out[0]), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out[0], "--no-cache"));
    snprintf(args, sizeof args, "sample '%s' --checkpoint x --temperature -1",
             glia_test_src("share/glia/examples/gpt-bytes.ini"));
    CU_ASSERT_EQUAL(run_glia(args, out[0], sizeof out[0]), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out[0], "--temperature takes a number >= 0"));
}

/* Activation checkpointing through transformer blocks: gpt-bytes (dropout 0.1 in its blocks, so the recomputed
 * forwards must draw the same masks) with [graph] checkpoint_segments = 4 plans less activation memory and ends 8
 * steps with the same weights, bit for bit, as without. */
static void test_gpt_checkpointing(void)
{
    make_dir();
    write_text("corpus_a.txt", 20000, 5);
    struct run r[2];
    double mb[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        char sets[2048];
        snprintf(sets, sizeof sets,
                 "runtime.device=cpu|data.train_tokens=%s/corpus_*.txt|data.steps_per_epoch=8|data.val_batches=1|"
                 "data.workers=1|train.epochs=1|train.warmup_steps=2|h0_attn.dropout=0.1|h2_attn.dropout=0.1|"
                 "graph.checkpoint_segments=%d|train.checkpoint_dir=%s/ckpt-seg%d", dir, k ? 4 : 0, dir, k);
        CU_ASSERT_FATAL(glia_context_new(&r[k].ctx) == GLIA_OK);
        CU_ASSERT_FATAL(glia_config_load(r[k].ctx, glia_test_src("share/glia/examples/gpt-bytes.ini"), &r[k].cfg) ==
                        GLIA_OK);
        char *save = NULL;
        for (char *kv = strtok_r(sets, "|", &save); kv; kv = strtok_r(NULL, "|", &save))
            CU_ASSERT_FATAL(glia_config_set(r[k].cfg, kv) == GLIA_OK);
        glia_status st = glia_model_build(r[k].ctx, r[k].cfg, &r[k].m);
        if (st) printf("\n  %s\n", glia_context_error(r[k].ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        char *sum = NULL;
        size_t len;
        FILE *f = open_memstream(&sum, &len);
        glia_model_summary(r[k].m, f);
        fclose(f);
        const char *am = strstr(sum, "activation memory: ");
        CU_ASSERT_PTR_NOT_NULL_FATAL(am);
        mb[k] = atof(am + strlen("activation memory: "));
        free(sum);
        struct glia_epoch_result res[1] = GLIA_TEST_RESULTS;
        st = glia_model_train(r[k].m, &quiet, res, 1);
        if (st) printf("\n  %s\n", glia_context_error(r[k].ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
    }
    printf("\n  activation memory %.1f MB, %.1f MB with 4 checkpoint segments", mb[0], mb[1]);
    CU_ASSERT(mb[1] < mb[0]);
    CU_ASSERT(same_weights(&r[1], &r[0]));
    close_run(&r[0]);
    close_run(&r[1]);
}

/* [graph] fuse_pointwise folds each block's gelu into the linear before it (activation = gelu, and with approximate =
 * tanh gelu_tanh, GPT-2's): the summary says so, 4 layers fewer, and 8 steps end within float tolerance of the same
 * model unfused; with 4 checkpoint segments too (the pre-activation the fused linear keeps is planned memory, written
 * again by the recomputation) the same weights bit for bit as fused without, in less activation memory. */
static void test_gpt_fused_gelu(void)
{
    make_dir();
    write_text("corpus_a.txt", 20000, 7);
    for (int tanh_form = 0; tanh_form < 2; tanh_form++) {
        struct run r[3];
        int layers[3] = {0, 0, 0};
        double mb[3] = {0, 0, 0};
        for (int k = 0; k < 3; k++) {
            char sets[2048];
            snprintf(sets, sizeof sets,
                     "runtime.device=cpu|data.train_tokens=%s/corpus_*.txt|data.steps_per_epoch=8|data.val_batches=1|"
                     "data.workers=1|train.epochs=1|train.warmup_steps=2|graph.fuse_pointwise=%s|"
                     "graph.checkpoint_segments=%d|train.checkpoint_dir=%s/ckpt-fuse%d%s", dir, k ? "on" : "off",
                     k == 2 ? 4 : 0, dir, k,
                     tanh_form ? "|h0_gelu.approximate=tanh|h1_gelu.approximate=tanh|h2_gelu.approximate=tanh|"
                                 "h3_gelu.approximate=tanh" : "");
            CU_ASSERT_FATAL(glia_context_new(&r[k].ctx) == GLIA_OK);
            CU_ASSERT_FATAL(glia_config_load(r[k].ctx, glia_test_src("share/glia/examples/gpt-bytes.ini"), &r[k].cfg) ==
                            GLIA_OK);
            char *save = NULL;
            for (char *kv = strtok_r(sets, "|", &save); kv; kv = strtok_r(NULL, "|", &save))
                CU_ASSERT_FATAL(glia_config_set(r[k].cfg, kv) == GLIA_OK);
            glia_status st = glia_model_build(r[k].ctx, r[k].cfg, &r[k].m);
            if (st) printf("\n  %s\n", glia_context_error(r[k].ctx));
            CU_ASSERT_FATAL(st == GLIA_OK);
            char *sum = NULL;
            size_t len;
            FILE *f = open_memstream(&sum, &len);
            glia_model_summary(r[k].m, f);
            fclose(f);
            const char *want = tanh_form ? "h3_fc1 (linear) + h3_gelu (gelu) run as linear h3_fc1 with activation = gelu_tanh"
                                         : "h3_fc1 (linear) + h3_gelu (gelu) run as linear h3_fc1 with activation = gelu\n";
            CU_ASSERT((strstr(sum, want) != NULL) == (k >= 1));
            const char *tot = strstr(sum, "total: "), *am = strstr(sum, "activation memory: ");
            CU_ASSERT_PTR_NOT_NULL_FATAL(tot);
            CU_ASSERT_PTR_NOT_NULL_FATAL(am);
            layers[k] = atoi(tot + strlen("total: "));
            mb[k] = atof(am + strlen("activation memory: "));
            free(sum);
            struct glia_epoch_result res[1] = GLIA_TEST_RESULTS;
            st = glia_model_train(r[k].m, &quiet, res, 1);
            if (st) printf("\n  %s\n", glia_context_error(r[k].ctx));
            CU_ASSERT_FATAL(st == GLIA_OK);
        }
        double d = weight_diff(&r[1], &r[0]);
        printf("\n  %s: %d layers fused, %d unfused; weights after 8 steps differ by %.2g; activations %.1f MB, %.1f MB "
               "with 4 checkpoint segments", tanh_form ? "gelu_tanh" : "gelu", layers[1], layers[0], d, mb[1], mb[2]);
        CU_ASSERT_EQUAL(layers[1], layers[0] - 4);
        CU_ASSERT_EQUAL(layers[2], layers[1]);
        CU_ASSERT(d < 1e-4);
        CU_ASSERT(same_weights(&r[2], &r[1]));
        CU_ASSERT(mb[2] < mb[1]);
        for (int k = 0; k < 3; k++) close_run(&r[k]);
    }
}

/* share/glia/examples/gpt2-124m.ini builds (on small llm.c files, on the CPU: 2 GB of weights, gradients and AdamW
 * moments): GPT-2 small's 124475904 parameters, llm.c's count (wte counted once, tied to lm_head). */
static void test_gpt2_124m(void)
{
    long long avail_kb = 0;  /* MemAvailable: the build needs 3 GB, more than a small CI machine may spare */
    FILE *mi = fopen("/proc/meminfo", "r");
    char ln[256];
    while (mi && fgets(ln, sizeof ln, mi))
        if (sscanf(ln, "MemAvailable: %lld kB", &avail_kb) == 1) break;
    if (mi) fclose(mi);
    if (avail_kb < 6LL * 1024 * 1024) {
        printf("(%lld MB available, under 6 GB: gpt2-124m not built) ", avail_kb / 1024);
        return;
    }
    make_dir();
    write_llmc("fineweb_train_000001.bin", 20240520, 1, 3000, 3000, 10, 0);
    write_llmc("fineweb_val_000000.bin", 20240520, 1, 2100, 2100, 20, 0);
    char sets[3][800];
    snprintf(sets[0], sizeof sets[0], "data.train_tokens=%s/fineweb_train_*.bin", dir);
    snprintf(sets[1], sizeof sets[1], "data.val_tokens=%s/fineweb_val_*.bin", dir);
    snprintf(sets[2], sizeof sets[2], "runtime.device=cpu");
    struct run r;
    CU_ASSERT_FATAL(glia_context_new(&r.ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_load(r.ctx, glia_test_src("share/glia/examples/gpt2-124m.ini"), &r.cfg) == GLIA_OK);
    for (int i = 0; i < 3; i++) CU_ASSERT_FATAL(glia_config_set(r.cfg, sets[i]) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_set(r.cfg, "runtime.precision=fp32") == GLIA_OK);
    glia_status st = glia_model_build(r.ctx, r.cfg, &r.m);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    CU_ASSERT_EQUAL(glia_model_param_count(r.m), 124475904LL);
    struct glia_model_io io = {.struct_size = sizeof io};
    CU_ASSERT_EQUAL(glia_model_io_info(r.m, &io), GLIA_OK);
    CU_ASSERT(io.lm && !io.bytes && io.len == 1024 && io.vocab == 50304 && io.classes == 50304);
    close_run(&r);
}

GLIA_TEST_MAIN("lm", GLIA_TEST(test_windows), GLIA_TEST(test_errors), GLIA_TEST(test_bytes_split), GLIA_TEST(test_keys),
               GLIA_TEST(test_trains), GLIA_TEST(test_sample_pick), GLIA_TEST(test_gpt_bytes),
               GLIA_TEST(test_gpt2_124m), GLIA_TEST(test_gpt_checkpointing), GLIA_TEST(test_gpt_fused_gelu))
