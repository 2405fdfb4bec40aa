/* tests/test_safetensors.c — glia_model_export_safetensors and [train] init_from: the file's bytes read back by a
 * reader of the format in this test (header length, JSON, padding, offsets, no trailing bytes), the round trip bit for
 * bit at f32 and rounded once at bf16/f16, a dropped bias folded into the running mean, tied weights, and every kind
 * of malformed file refused with one line naming it. Not PyTorch (torch_safetensors.sh loads the files there). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include "modelutil.h"
#include <glia/half.h>

static char dir[512];

static const char *path_of(const char *name)
{
    static char p[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "%s", glia_test_tmp("safetensors"));
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CU_ASSERT_FATAL(system(cmd) == 0);
}

/* conv (bias dropped before its batchnorm) -> batchnorm -> relu -> flatten -> fc: parameters, buffers, a dropped
 * bias and num_batches_tracked. extra: more text at the end of [runtime] and after. */
static void cnn_text(char *buf, size_t n, const char *graph, const char *train)
{
    snprintf(buf, n,
             "[runtime]\ndevice = cpu\nseed = 3\n[data]\nformat = synthetic\nchannels = 2\nrows = 5\ncols = 5\n"
             "classes = 3\ntrain_samples = 32\ntest_samples = 16\nbatch_size = 8\n[train]\nepochs = 2\n%s"
             "[graph]\n%s[conv]\ntype = conv2d\nfilters = 4\nsize = 3\npadding = 1\n[bn]\ntype = batchnorm\n"
             "[relu]\ntype = relu\n[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 3\n"
             "[loss]\ntype = softmax_cross_entropy\n",
             train, graph);
}

/* ---- a reader of the format, independent of glia's ---- */

struct file {
    unsigned char *b;
    long n;
    uint64_t hn;
    char *json;  /* the header, NUL-terminated */
};

static void read_file(const char *p, struct file *f)
{
    FILE *fp = fopen(p, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fseek(fp, 0, SEEK_END);
    f->n = ftell(fp);
    rewind(fp);
    f->b = malloc((size_t)f->n);
    CU_ASSERT_FATAL(fread(f->b, 1, (size_t)f->n, fp) == (size_t)f->n);
    fclose(fp);
    f->hn = 0;
    for (int i = 0; i < 8; i++) f->hn |= (uint64_t)f->b[i] << (8 * i);
    f->json = malloc(f->hn + 1);
    memcpy(f->json, f->b + 8, f->hn);
    f->json[f->hn] = 0;
}

static void free_file(struct file *f)
{
    free(f->b);
    free(f->json);
}

/* The entry of tensor name: its dtype, shape and data offsets, read from the header's text. */
static bool entry(const struct file *f, const char *name, char *dtype, int64_t *shape, int *nd, int64_t off[2])
{
    char key[200];
    snprintf(key, sizeof key, "\"%s\":{\"dtype\":\"", name);
    const char *p = strstr(f->json, key);
    if (!p) return false;
    p += strlen(key);
    int k = 0;
    while (*p != '"') dtype[k++] = *p++;
    dtype[k] = 0;
    p = strstr(p, "\"shape\":[") + 9;
    *nd = 0;
    while (*p != ']') {
        shape[(*nd)++] = strtoll(p, (char **)&p, 10);
        if (*p == ',') p++;
    }
    p = strstr(p, "\"data_offsets\":[") + 16;
    off[0] = strtoll(p, (char **)&p, 10);
    off[1] = strtoll(p + 1, NULL, 10);
    return true;
}

/* The f32 value i of the tensor at data offset off in the given dtype. */
static float value(const struct file *f, const char *dtype, int64_t off, int64_t i)
{
    const unsigned char *d = f->b + 8 + f->hn + off;
    if (!strcmp(dtype, "F32")) {
        uint32_t u = (uint32_t)d[4 * i] | (uint32_t)d[4 * i + 1] << 8 | (uint32_t)d[4 * i + 2] << 16 |
                     (uint32_t)d[4 * i + 3] << 24;
        return glia_bits_f32(u);
    }
    uint16_t h = (uint16_t)(d[2 * i] | d[2 * i + 1] << 8);
    return !strcmp(dtype, "BF16") ? glia_bf16_to_f32(h) : glia_f16_to_f32(h);
}

/* ---- tests ---- */

/* The file's layout: the header's length, JSON padded with spaces to 8 bytes, tensors back to back from byte 0 of the
 * data to its end; names, dtypes and shapes as PyTorch names them; the values those of the model. */
static void test_export_format(void)
{
    make_dir();
    char text[2048];
    cnn_text(text, sizeof text, "", "");
    struct run r;
    open_run(&r, text);
    struct glia_epoch_result res[2] = GLIA_TEST_RESULTS;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, res, 2), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_model_export_safetensors(r.m, path_of("m.safetensors"), GLIA_F32), GLIA_OK);
    struct file f;
    read_file(path_of("m.safetensors"), &f);
    CU_ASSERT_EQUAL(f.hn % 8, 0);
    CU_ASSERT(f.json[0] == '{');
    size_t end = strlen(f.json);
    while (end > 0 && f.json[end - 1] == ' ') end--;
    CU_ASSERT(f.json[end - 1] == '}');
    CU_ASSERT_PTR_NOT_NULL(strstr(f.json, "\"__metadata__\":{\"format\":\"pt\""));
    struct {
        const char *name, *dtype;
        int nd;
        int64_t shape[4];
    } want[] = {
        {"conv.weight", "F32", 4, {4, 2, 3, 3}}, {"conv.bias", "F32", 1, {4}},  /* dropped: zeros */
        {"bn.weight", "F32", 1, {4}},           {"bn.bias", "F32", 1, {4}},
        {"bn.running_mean", "F32", 1, {4}},     {"bn.running_var", "F32", 1, {4}},
        {"bn.num_batches_tracked", "I64", 0, {0}}, {"fc.weight", "F32", 2, {3, 100}},
        {"fc.bias", "F32", 1, {3}},
    };
    int64_t total = 0;
    long long nw;
    float *w = weights(&r, &nw);
    int64_t wk = 0;  /* where each parameter starts in glia_model_weights' order */
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char dt[16];
        int64_t shape[8] = {0}, off[2] = {0, 0};
        int nd = -1;
        CU_ASSERT_FATAL(entry(&f, want[i].name, dt, shape, &nd, off));
        CU_ASSERT_STRING_EQUAL(dt, want[i].dtype);
        CU_ASSERT_EQUAL(nd, want[i].nd);
        int64_t numel = 1;
        for (int d = 0; d < nd; d++) {
            CU_ASSERT_EQUAL(shape[d], want[i].shape[d]);
            numel *= shape[d];
        }
        CU_ASSERT_EQUAL(off[1] - off[0], numel * (strcmp(dt, "I64") ? 4 : 8));
        total += off[1] - off[0];
        bool param = !strcmp(want[i].name, "conv.weight") || !strcmp(want[i].name, "bn.weight") ||
                     !strcmp(want[i].name, "bn.bias") || !strcmp(want[i].name, "fc.weight") ||
                     !strcmp(want[i].name, "fc.bias");
        for (int64_t j = 0; j < numel && param; j++) CU_ASSERT_EQUAL(value(&f, dt, off[0], j), w[wk + j]);
        if (param) wk += numel;
        if (!strcmp(want[i].name, "conv.bias"))
            for (int64_t j = 0; j < numel; j++) CU_ASSERT_EQUAL(value(&f, dt, off[0], j), 0.0f);
    }
    CU_ASSERT_EQUAL(wk, nw);
    CU_ASSERT_EQUAL((long)(8 + f.hn + (uint64_t)total), f.n);  /* nothing after the data */
    free(w);
    free_file(&f);
    close_run(&r);
}

/* Another model built with init_from the file ends with the same weights and buffers bit for bit and evaluates the
 * same; bf16 and f16 files give the values rounded once. */
static void test_round_trip(void)
{
    make_dir();
    char text[2048], train[700];
    cnn_text(text, sizeof text, "", "");
    struct run a;
    open_run(&a, text);
    struct glia_epoch_result res[2] = GLIA_TEST_RESULTS;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(a.m, &quiet, res, 2), GLIA_OK);
    double la, aa;
    CU_ASSERT_EQUAL_FATAL(glia_model_evaluate(a.m, &la, &aa), GLIA_OK);
    const enum glia_dtype dts[3] = {GLIA_F32, GLIA_BF16, GLIA_F16};
    for (int k = 0; k < 3; k++) {
        char name[64];
        snprintf(name, sizeof name, "rt%d.safetensors", k);
        CU_ASSERT_EQUAL_FATAL(glia_model_export_safetensors(a.m, path_of(name), dts[k]), GLIA_OK);
        snprintf(train, sizeof train, "init_from = %s\n", path_of(name));
        cnn_text(text, sizeof text, "", train);
        struct run b;
        open_run(&b, text);
        long long n;
        float *wa = weights(&a, &n), *wb = weights(&b, &n);
        double worst = 0;
        for (long long i = 0; i < n; i++) {
            float want = k == 0 ? wa[i] : k == 1 ? glia_bf16_to_f32(glia_f32_to_bf16(wa[i]))
                                                 : glia_f16_to_f32(glia_f32_to_f16(wa[i]));
            worst = fmax(worst, fabs((double)wb[i] - want));
        }
        CU_ASSERT_EQUAL(worst, 0.0);
        double lb, ab;
        CU_ASSERT_EQUAL_FATAL(glia_model_evaluate(b.m, &lb, &ab), GLIA_OK);
        if (k == 0) {
            CU_ASSERT(same_weights(&a, &b));
            CU_ASSERT_EQUAL(lb, la);  /* the running statistics came along: the same evaluation, bit for bit */
            CU_ASSERT_EQUAL(ab, aa);
        }
        free(wa);
        free(wb);
        close_run(&b);
    }
    close_run(&a);
}

/* A bias glia drops before a batchnorm, non-zero in the file (as PyTorch trains it), is folded into the running mean:
 * evaluation equals that of the model built with the pass off, which keeps the bias. */
static void test_dropped_bias_folded(void)
{
    make_dir();
    char text[2048], train[700];
    cnn_text(text, sizeof text, "drop_bias_before_norm = off\n", "");
    struct run keep;
    open_run(&keep, text);
    struct glia_epoch_result res[2] = GLIA_TEST_RESULTS;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(keep.m, &quiet, res, 2), GLIA_OK);  /* conv.bias trained, not zero */
    CU_ASSERT_EQUAL_FATAL(glia_model_export_safetensors(keep.m, path_of("bias.safetensors"), GLIA_F32), GLIA_OK);
    double lk, ak, ld, ad;
    CU_ASSERT_EQUAL_FATAL(glia_model_evaluate(keep.m, &lk, &ak), GLIA_OK);
    snprintf(train, sizeof train, "init_from = %s\n", path_of("bias.safetensors"));
    cnn_text(text, sizeof text, "", train);
    struct run drop;
    open_run(&drop, text);
    CU_ASSERT_EQUAL(glia_model_param_count(drop.m), glia_model_param_count(keep.m) - 4);
    CU_ASSERT_EQUAL_FATAL(glia_model_evaluate(drop.m, &ld, &ad), GLIA_OK);
    printf("\n  test loss with the bias %.6f, folded into the running mean %.6f", lk, ld);
    CU_ASSERT(fabs(ld - lk) < 1e-5);
    CU_ASSERT_EQUAL(ad, ak);
    close_run(&drop);
    close_run(&keep);
}

/* The bytes of file name as they are, then with [at, at + n) replaced by repl (n = -1: the file cut at `at`). */
static void write_variant(const char *from, const char *to, long at, long n, const void *repl, size_t rn)
{
    struct file f;
    read_file(from, &f);
    FILE *fp = fopen(to, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    if (n < 0) {
        fwrite(f.b, 1, (size_t)at, fp);
    } else {
        fwrite(f.b, 1, (size_t)at, fp);
        fwrite(repl, 1, rn, fp);
        fwrite(f.b + at + n, 1, (size_t)(f.n - at - n), fp);
    }
    fclose(fp);
    free_file(&f);
}

/* A header rewritten: the file's header text with `find` replaced by `repl` (the same length keeps the padding). */
static void write_header(const char *from, const char *to, const char *find, const char *repl)
{
    struct file f;
    read_file(from, &f);
    char *p = strstr(f.json, find);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(strlen(find), strlen(repl));
    memcpy(p, repl, strlen(repl));
    FILE *fp = fopen(to, "wb");
    fwrite(f.b, 1, 8, fp);
    fwrite(f.json, 1, f.hn, fp);
    fwrite(f.b + 8 + f.hn, 1, (size_t)(f.n - 8 - (long)f.hn), fp);
    fclose(fp);
    free_file(&f);
}

/* Each malformed or mismatching file: GLIA_EFORMAT (or EIO) from the build, the one line naming the key, the file
 * and what is wrong. */
static void expect_refused(const char *file, const char *want)
{
    char text[2048], train[700];
    snprintf(train, sizeof train, "init_from = %s\n", file);
    cnn_text(text, sizeof text, "", train);
    struct run r;
    CU_ASSERT_FATAL(glia_context_new(&r.ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_parse_string(r.ctx, "t.ini", text, &r.cfg) == GLIA_OK);
    glia_status st = glia_model_build(r.ctx, r.cfg, &r.m);
    const char *msg = glia_context_error(r.ctx);
    if (st == GLIA_OK || !strstr(msg, want) || !strstr(msg, "[train] init_from") || strchr(msg, '\n'))
        printf("\n  %s: %s\n  wanted: %s\n", file, msg, want);
    CU_ASSERT_NOT_EQUAL(st, GLIA_OK);
    CU_ASSERT_PTR_NULL(r.m);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "[train] init_from"));
    CU_ASSERT_PTR_NULL(strchr(msg, '\n'));
    glia_config_free(r.cfg);
    glia_context_free(r.ctx);
}

static void test_refusals(void)
{
    make_dir();
    char text[2048];
    cnn_text(text, sizeof text, "", "");
    struct run r;
    open_run(&r, text);
    char good[700];
    snprintf(good, sizeof good, "%s", path_of("good.safetensors"));
    CU_ASSERT_EQUAL_FATAL(glia_model_export_safetensors(r.m, good, GLIA_F32), GLIA_OK);
    close_run(&r);
    struct file f;
    read_file(good, &f);
    long hn = (long)f.hn, n = f.n;
    free_file(&f);
    expect_refused(path_of("nosuch.safetensors"), "cannot open");
    write_variant(good, path_of("short.st"), 5, -1, NULL, 0);
    expect_refused(path_of("short.st"), "no 8-byte header length");
    unsigned char huge[8] = {0, 0, 0, 0, 0, 1, 0, 0};
    write_variant(good, path_of("huge.st"), 0, 8, huge, 8);
    expect_refused(path_of("huge.st"), "not a safetensors file (a header of");
    write_variant(good, path_of("cut.st"), n - 3, -1, NULL, 0);
    expect_refused(path_of("cut.st"), "(cut short?)");
    write_variant(good, path_of("trail.st"), n, 0, "xyz", 3);
    expect_refused(path_of("trail.st"), "(bytes after them)");
    write_header(good, path_of("json.st"), "\"conv.weight\":{", "\"conv.weight\" {");
    expect_refused(path_of("json.st"), "header is not the JSON of a safetensors file");
    write_header(good, path_of("dtype.st"), "\"conv.weight\":{\"dtype\":\"F32\"", "\"conv.weight\":{\"dtype\":\"U32\"");
    expect_refused(path_of("dtype.st"), "tensor 'conv.weight': dtype U32");
    write_header(good, path_of("missing.st"), "\"fc.bias\"", "\"fc.bixs\"");
    expect_refused(path_of("missing.st"), "no tensor 'fc.bias' (the model's [fc] has a parameter of 3)");
    write_header(good, path_of("shape.st"), "\"shape\":[3,100]", "\"shape\":[100,3]");
    expect_refused(path_of("shape.st"), "tensor 'fc.weight' is F32 100x3; the model's is 3x100");
    write_header(good, path_of("extra.st"), "\"bn.num_batches_tracked\"", "\"bn.num_batches_trackee\"");
    expect_refused(path_of("extra.st"), "tensor 'bn.num_batches_trackee' is not in the model");
    write_header(good, path_of("size.st"), "\"shape\":[4,2,3,3]", "\"shape\":[4,2,3,2]");
    expect_refused(path_of("size.st"), "tensor 'conv.weight': data_offsets [0, 288] hold 288 bytes; F32 4x2x3x2 takes 192");
    write_header(good, path_of("twice.st"), "\"bn.bias\"", "\"fc.bias\"");
    expect_refused(path_of("twice.st"), "tensor 'fc.bias' is in its header twice");
    write_header(good, path_of("overlap.st"), "\"data_offsets\":[0,", "\"data_offsets\":[8,");
    expect_refused(path_of("overlap.st"), "tensor 'conv.weight': data_offsets [8, 288] hold 280 bytes");
    (void)hn;
}

/* A safetensors file written by this test, from n tensors of f32 values (name, rows x cols). */
static void write_st(const char *path, int n, const char *const *names, const int64_t (*shape)[2],
                     const float *const *vals)
{
    char h[4096];
    int k = snprintf(h, sizeof h, "{");
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t b = shape[i][0] * shape[i][1] * 4;
        k += snprintf(h + k, sizeof h - (size_t)k, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],"
                      "\"data_offsets\":[%lld,%lld]}", i ? "," : "", names[i], (long long)shape[i][0],
                      (long long)shape[i][1], (long long)off, (long long)(off + b));
        off += b;
    }
    k += snprintf(h + k, sizeof h - (size_t)k, "}");
    while (k % 8) h[k++] = ' ';
    FILE *fp = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    uint64_t len = (uint64_t)k;
    unsigned char l8[8];
    for (int i = 0; i < 8; i++) l8[i] = (unsigned char)(len >> (8 * i));
    fwrite(l8, 1, 8, fp);
    fwrite(h, 1, (size_t)k, fp);
    for (int i = 0; i < n; i++) fwrite(vals[i], sizeof(float), (size_t)(shape[i][0] * shape[i][1]), fp);
    fclose(fp);
}

/* A tied parameter (lm_head's weight is wte's) is written once, under its owner's name; a file with both names (as
 * PyTorch's state_dict lists a tied weight) loads when they are equal and is refused when they differ. */
static void test_tied(void)
{
    make_dir();
    FILE *fp = fopen(path_of("t.txt"), "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    for (int i = 0; i < 400; i++) fputs("abc ", fp);
    fclose(fp);
    char text[2048];
    const char *fmt =
        "[runtime]\ndevice = cpu\nseed = 5\n[data]\nformat = bytes\ntrain_tokens = %s\nseq_len = 8\nbatch_size = 4\n"
        "test_batch_size = 4\nsteps_per_epoch = 2\nval_batches = 1\nval_fraction = 0.2\n[train]\nepochs = 1\n%s"
        "[wte]\ntype = embedding\nvocab = 256\ndim = 4\noutput = sequence\npadding_idx = -1\n"
        "[lm_head]\ntype = linear\noutputs = 256\nbias = off\ntie_weight = wte\n[loss]\ntype = softmax_cross_entropy\n";
    snprintf(text, sizeof text, fmt, path_of("t.txt"), "");
    struct run r;
    open_run(&r, text);
    CU_ASSERT_EQUAL_FATAL(glia_model_export_safetensors(r.m, path_of("tied.safetensors"), GLIA_F32), GLIA_OK);
    struct file f;
    read_file(path_of("tied.safetensors"), &f);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.json, "\"wte.weight\""));
    CU_ASSERT_PTR_NULL(strstr(f.json, "lm_head"));
    free_file(&f);
    long long n;
    float *w = weights(&r, &n);
    CU_ASSERT_EQUAL_FATAL(n, 256 * 4);
    float *other = malloc(sizeof(float) * 1024);
    for (int i = 0; i < 1024; i++) other[i] = w[i] + 1.0f;
    const char *names[2] = {"wte.weight", "lm_head.weight"};
    const int64_t shape[2][2] = {{256, 4}, {256, 4}};
    for (int k = 0; k < 2; k++) {
        const float *vals[2] = {other, k ? w : other};  /* equal, then lm_head's different */
        write_st(path_of("both.safetensors"), 2, names, shape, vals);
        char train[700];
        snprintf(train, sizeof train, "init_from = %s\n", path_of("both.safetensors"));
        snprintf(text, sizeof text, fmt, path_of("t.txt"), train);
        struct run b;
        CU_ASSERT_FATAL(glia_context_new(&b.ctx) == GLIA_OK);
        CU_ASSERT_FATAL(glia_config_parse_string(b.ctx, "t.ini", text, &b.cfg) == GLIA_OK);
        glia_status st = glia_model_build(b.ctx, b.cfg, &b.m);
        if (k == 0) {
            if (st) printf("\n  %s\n", glia_context_error(b.ctx));
            CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
            long long nb;
            float *wb = weights(&b, &nb);
            CU_ASSERT_EQUAL(memcmp(wb, other, sizeof(float) * 1024), 0);
            free(wb);
            glia_model_free(b.m);
        } else {
            CU_ASSERT_EQUAL(st, GLIA_EFORMAT);
            CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(b.ctx),
                                          "tensor 'lm_head.weight' differs from 'wte.weight', to which [lm_head] "
                                          "tie_weight ties it"));
        }
        glia_config_free(b.cfg);
        glia_context_free(b.ctx);
    }
    free(other);
    free(w);
    close_run(&r);
}

/* glia CMD ARGS: its exit status, its output (both streams) in out. */
static int run_glia(const char *args, char *out, size_t n)
{
    const char *bin = getenv("GLIA_BIN");
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", bin ? bin : "tools/glia", args);
    FILE *p = popen(cmd, "r");
    CU_ASSERT_FATAL(p != NULL);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = 0;
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* The command line: glia export writes what glia_model_export_safetensors writes from a checkpoint, glia eval reads it
 * through --set train.init_from (no checkpoint) with the checkpoint's results, and wrong uses exit 2 saying what. */
static void test_command_line(void)
{
    make_dir();
    char text[2048], ini[700], ck[700], args[2800], out[4096];
    snprintf(ck, sizeof ck, "checkpoint_dir = %s\n", path_of("ck"));
    cnn_text(text, sizeof text, "", ck);
    snprintf(ini, sizeof ini, "%s", path_of("cli.ini"));
    FILE *f = fopen(ini, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs(text, f);
    fclose(f);
    snprintf(args, sizeof args, "train '%s' --quiet", ini);
    CU_ASSERT_EQUAL_FATAL(run_glia(args, out, sizeof out), 0);
    snprintf(args, sizeof args, "export '%s' --checkpoint '%s' -o '%s' --dtype bf16", ini, path_of("ck/final.ckpt"),
             path_of("cli.safetensors"));
    CU_ASSERT_EQUAL(run_glia(args, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "parameters from"));
    struct file fl;
    read_file(path_of("cli.safetensors"), &fl);
    CU_ASSERT_PTR_NOT_NULL(strstr(fl.json, "\"conv.weight\":{\"dtype\":\"BF16\""));
    free_file(&fl);
    char a1[200] = "", a2[200] = "";
    snprintf(args, sizeof args, "eval '%s' --checkpoint '%s'", ini, path_of("ck/final.ckpt"));
    CU_ASSERT_EQUAL(run_glia(args, out, sizeof out), 0);
    sscanf(strstr(out, "test_loss") ? strstr(out, "test_loss") : "", "%199[^(]", a1);
    snprintf(args, sizeof args, "export '%s' --checkpoint '%s' -o '%s'", ini, path_of("ck/final.ckpt"),
             path_of("cli32.safetensors"));
    CU_ASSERT_EQUAL(run_glia(args, out, sizeof out), 0);
    snprintf(args, sizeof args, "eval '%s' --set train.init_from='%s'", ini, path_of("cli32.safetensors"));
    CU_ASSERT_EQUAL(run_glia(args, out, sizeof out), 0);
    sscanf(strstr(out, "test_loss") ? strstr(out, "test_loss") : "", "%199[^(]", a2);
    CU_ASSERT(a1[0] && !strcmp(a1, a2));  /* the same loss and accuracy from the checkpoint and from the file */
    struct {
        const char *args, *want;
    } bad[] = {
        {"export '%s' --checkpoint x.ckpt", "glia: export needs MODEL.ini, --checkpoint CKPT and -o FILE.safetensors"},
        {"export '%s' --checkpoint x.ckpt -o y.safetensors --dtype f64", "glia: --dtype takes f32, bf16 or f16, not 'f64'"},
        {"eval '%s'", "glia: eval needs --checkpoint FILE, or weights from [train] init_from"},
        {"train '%s' --dtype bf16", "--dtype"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, bad[i].args, ini);
        int rc = run_glia(args, out, sizeof out);
        if (rc != 2 || !strstr(out, bad[i].want)) printf("\n  glia %s: %d %s\n", args, rc, out);
        CU_ASSERT_EQUAL(rc, 2);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, bad[i].want));
    }
}

GLIA_TEST_MAIN("safetensors", GLIA_TEST(test_export_format), GLIA_TEST(test_round_trip),
               GLIA_TEST(test_dropped_bias_folded), GLIA_TEST(test_refusals), GLIA_TEST(test_tied),
               GLIA_TEST(test_command_line))
