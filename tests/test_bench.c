/* tests/test_bench.c — `glia bench layer` on the CPU: its fields (text and JSON), the bytes it counts by its
 * formula, PyTorch's side read from a stand-in script (run through $GLIA_PYTHON = /bin/sh) and the ratio, and its
 * usage errors; `glia bench optim` on the CPU: its arena, its byte figures and its errors. Never a timing: only that a time was measured. Not `glia bench conv` (GPU tables, bench/). */
#include <fcntl.h>
#include <unistd.h>
#include "testutil.h"
#include "../tools/bench.h"

static char out_path[] = "/tmp/glia-test-bench-XXXXXX";

static int bench_fd(char **text, const char *const *args, int n, int fdno);

/* glia__bench_main(args) with stdout captured; returns its status, *text the output (owned). */
static int bench(char **text, const char *const *args, int n) { return bench_fd(text, args, n, 1); }

/* The same with stderr captured instead. */
static int bench_err(char **text, const char *const *args, int n) { return bench_fd(text, args, n, 2); }

/* glia__bench_main(args) with file descriptor fdno (1: stdout, 2: stderr) captured. */
static int bench_fd(char **text, const char *const *args, int n, int fdno)
{
    char *argv[32];
    for (int i = 0; i < n; i++) argv[i] = (char *)args[i];
    fflush(stdout), fflush(stderr);
    int fd = mkstemp(out_path), saved = dup(fdno);
    CU_ASSERT_FATAL(fd >= 0 && saved >= 0);
    dup2(fd, fdno);
    int rc = glia__bench_main(n, argv);
    fflush(stdout), fflush(stderr);
    dup2(saved, fdno);
    close(saved);
    off_t len = lseek(fd, 0, SEEK_END);
    *text = calloc((size_t)len + 1, 1);
    CU_ASSERT_FATAL(*text != NULL && pread(fd, *text, (size_t)len, 0) == len);
    close(fd);
    unlink(out_path);
    memcpy(out_path + strlen(out_path) - 6, "XXXXXX", 6);
    return rc;
}

/* The number after "key": in line, or NAN when missing or null. */
static double field(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = line ? strstr(line, pat) : NULL;
    if (!p || !strncmp(p + strlen(pat), "null", 4)) return NAN;
    return strtod(p + strlen(pat), NULL);
}

/* The line of pass `pass` in JSON output. */
static const char *pass_line(const char *text, const char *pass)
{
    char pat[64];
    snprintf(pat, sizeof pat, "{\"pass\": \"%s\"", pass);
    return strstr(text, pat);
}

/* batchnorm on 2x3x4x5: forward moves x and y (2 * 120 * 4 bytes); backward dy, x, dx (it reads no y). */
static void test_layer_json(void)
{
    const char *a[] = {"layer", "batchnorm", "--shape", "2x3x4x5", "--device", "cpu", "--steps", "2", "--warmup", "1",
                       "--torch", "off", "--json"};
    char *t;
    CU_ASSERT_EQUAL_FATAL(bench(&t, a, 13), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "{\"bench\": \"layer\", \"op\": \"batchnorm\", \"impl\": \"cpu\", \"device\": \"cpu\", "
                                     "\"shape\": \"2x3x4x5\", \"inputs\": 1, \"precision\": \"fp32\", \"activations\": \"f32\", "
                                     "\"memory_format\": \"contiguous\", \"steps\": 2, \"warmup\": 1, \"torch\": null}"));
    const char *f = pass_line(t, "forward"), *fb = pass_line(t, "forward+backward");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fb);
    CU_ASSERT_EQUAL(field(f, "bytes"), 960);
    CU_ASSERT_EQUAL(field(fb, "bytes"), 960 + 3 * 480);
    CU_ASSERT(field(f, "ms") >= 0 && field(fb, "ms") >= 0);
    CU_ASSERT(field(f, "gbps") >= 0 || field(f, "ms") == 0);
    CU_ASSERT(isnan(field(f, "torch_ms")) && isnan(field(fb, "torch_over_glia")));
    free(t);
}

/* cat: two inputs of the shape, an output of twice it; backward reads neither input nor output. maxpool
 * (3x3, stride 2, padding 1) halves 8x8 planes to 4x4; its kernels may read x and y in backward (no flag
 * says otherwise), so both count. */
static void test_layer_bytes(void)
{
    const char *a[] = {"layer", "cat", "--shape", "2x3x4x5", "--device", "cpu", "--steps", "1", "--warmup", "0",
                       "--memory-format", "channels_last", "--torch", "off", "--json"};
    char *t;
    CU_ASSERT_EQUAL_FATAL(bench(&t, a, 15), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "\"inputs\": 2"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "\"memory_format\": \"channels_last\""));
    CU_ASSERT_EQUAL(field(pass_line(t, "forward"), "bytes"), 4 * 480);
    CU_ASSERT_EQUAL(field(pass_line(t, "forward+backward"), "bytes"), 4 * 480 + 4 * 480);
    free(t);
    const char *m[] = {"layer", "maxpool", "--shape", "1x2x8x8", "--device", "cpu", "--steps", "1", "--warmup", "0",
                       "--torch", "off", "--json"};
    CU_ASSERT_EQUAL_FATAL(bench(&t, m, 13), 0);
    double x = 128 * 4, y = 32 * 4;
    CU_ASSERT_EQUAL(field(pass_line(t, "forward"), "bytes"), x + y);
    CU_ASSERT_EQUAL(field(pass_line(t, "forward+backward"), "bytes"), (x + y) + (y + x + y + x));
    free(t);
}

/* The text table: its header names every column, one row a pass. */
static void test_layer_text(void)
{
    const char *a[] = {"layer", "relu", "--shape", "4x6", "--device", "cpu", "--steps", "1", "--warmup", "0",
                       "--torch", "off"};
    char *t;
    CU_ASSERT_EQUAL_FATAL(bench(&t, a, 12), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "layer relu (impl "));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "bytes: forward = inputs + output"));
    const char *cols[] = {"pass", "glia ms", "glia GB/s", "glia MB", "torch ms", "torch GB/s", "torch MB", "torch/glia"};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) CU_ASSERT_PTR_NOT_NULL(strstr(t, cols[i]));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "\nforward "));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "\nforward+backward "));
    free(t);
}

/* PyTorch's side: the script gets the op, shape, precision, format, device and counts; its figures come back
 * with their GB/s and the ratio torch ms / glia ms. The stand-in writes its arguments to a file. */
static void test_layer_torch(void)
{
    char dir[] = "/tmp/glia-test-bench-dir-XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    char script[256], argsf[256];
    snprintf(script, sizeof script, "%s/fake torch.sh", dir);  /* a space: the path is quoted */
    snprintf(argsf, sizeof argsf, "%s/args", dir);
    FILE *f = fopen(script, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "echo \"$*\" > '%s'\necho 'noise'\necho '{\"pass\": \"forward\", \"ms\": 2, \"bytes\": 1000}'\n"
               "echo '{\"pass\": \"forward+backward\", \"ms\": 4, \"bytes\": 3000}'\n", argsf);
    fclose(f);
    setenv("GLIA_PYTHON", "/bin/sh", 1);
    const char *a[] = {"layer", "batchnorm", "--shape", "2x3x4x5", "--device", "cpu", "--steps", "1", "--warmup", "0",
                       "--memory-format", "channels_last", "--torch", script, "--json"};
    char *t;
    CU_ASSERT_EQUAL_FATAL(bench(&t, a, 15), 0);
    const char *fw = pass_line(t, "forward"), *fb = pass_line(t, "forward+backward");
    CU_ASSERT_EQUAL(field(fw, "torch_ms"), 2);
    CU_ASSERT_EQUAL(field(fw, "torch_bytes"), 1000);
    CU_ASSERT_DOUBLE_EQUAL(field(fw, "torch_gbps"), 1000 / 2e-3 * 1e-9, 1e-12);
    CU_ASSERT_EQUAL(field(fb, "torch_ms"), 4);
    if (field(fw, "ms") > 0) CU_ASSERT_DOUBLE_EQUAL(field(fw, "torch_over_glia"), 2 / field(fw, "ms"), 1e-3 * 2 / field(fw, "ms"));
    free(t);
    char buf[512] = "";
    f = fopen(argsf, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_PTR_NOT_NULL(fgets(buf, sizeof buf, f));
    fclose(f);
    CU_ASSERT_STRING_EQUAL(buf, "--op batchnorm --shape 2x3x4x5 --precision fp32 --memory-format channels_last "
                                "--activations auto --device cpu --steps 1 --warmup 0\n");
    /* a script that fails: glia's figures stand, PyTorch's say so */
    f = fopen(script, "w");
    fprintf(f, "exit 3\n");
    fclose(f);
    CU_ASSERT_EQUAL_FATAL(bench(&t, a, 14), 0);  /* text */
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "failed)"));
    free(t);
    unsetenv("GLIA_PYTHON");
    unlink(script);
    unlink(argsf);
    rmdir(dir);
}

/* Usage errors exit 2 before anything runs; a type glia does not know fails with 1. */
static void test_layer_usage(void)
{
    const char *no_shape[] = {"layer", "batchnorm", "--device", "cpu"};
    const char *bad_shape[] = {"layer", "batchnorm", "--shape", "2x0x3", "--device", "cpu"};
    const char *bad_prec[] = {"layer", "batchnorm", "--shape", "2x3", "--precision", "fp8"};
    const char *bad_fmt[] = {"layer", "batchnorm", "--shape", "2x3", "--memory-format", "nhwc"};
    const char *bad_act[] = {"layer", "batchnorm", "--shape", "2x3", "--activations", "bf16"};
    const char *no_op[] = {"layer", "--shape", "2x3"};
    const char *unknown[] = {"layer", "no_such_type", "--shape", "2x3", "--device", "cpu", "--torch", "off"};
    char *t;
    CU_ASSERT_EQUAL(bench(&t, no_shape, 4), 2);
    free(t);
    CU_ASSERT_EQUAL(bench(&t, bad_shape, 6), 2);
    free(t);
    CU_ASSERT_EQUAL(bench(&t, bad_prec, 6), 2);
    free(t);
    CU_ASSERT_EQUAL(bench(&t, bad_fmt, 6), 2);
    free(t);
    CU_ASSERT_EQUAL(bench(&t, bad_act, 6), 2);
    free(t);
    CU_ASSERT_EQUAL(bench(&t, no_op, 3), 2);
    free(t);
    CU_ASSERT_EQUAL(bench(&t, unknown, 8), 1);
    CU_ASSERT_STRING_EQUAL(t, "");
    free(t);
}

/* 10000 parameters in 7 tensors: the small ones (1, 2, 4, 5) 64, 64, 128, 128 scaled into 1% (100 elements): 17, 17,
 * 33, 33; the large ones (0, 3, 6) share the other 9900 as 1:2:3: 1651, 3300, 4949. Each starts at a multiple of 64
 * floats: at 0, 1664, 1728, 1792, 5120, 5184, 5248; the arena ends at 5248 + 4949 = 10197 floats. */
#define OPT_ARENA 10197.0

/* adamw: 2 state arrays, (3 + 2 * 2) * 4 bytes per arena float, no per-tensor figure. */
static void test_optim_json(void)
{
    const char *a[] = {"optim", "adamw", "--device", "cpu", "--params", "10000", "--tensors", "7", "--steps", "2",
                       "--warmup", "1", "--json"};
    char *t;
    CU_ASSERT_EQUAL_FATAL(bench(&t, a, 13), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "{\"bench\": \"optim\", \"optimizer\": \"adamw\", \"device\": \"cpu\", \"params\": "
                                     "10000, \"tensors\": 7, \"arena\": 10197, \"state_arrays\": 2, \"per_tensor\": false, "
                                     "\"steps\": 2, \"warmup\": 1, \"peak_gbps\": null}"));
    const char *p = pass_line(t, "step");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(field(p, "bytes"), 7 * 4 * OPT_ARENA);
    CU_ASSERT(field(p, "ms") >= 0);
    CU_ASSERT(isnan(field(p, "peak_fraction")));
    CU_ASSERT(isnan(field(p, "bytes_norms")));
    free(t);
}

/* lamb works per tensor: its second figure adds one read of w and g (2 * 4 bytes per arena float); a --set key
 * reaches the optimizer. */
static void test_optim_segments(void)
{
    const char *a[] = {"optim", "lamb", "--device", "cpu", "--params", "10000", "--tensors", "7", "--steps", "2",
                       "--warmup", "1", "--set", "weight_decay=0.01", "--json"};
    char *t;
    CU_ASSERT_EQUAL_FATAL(bench(&t, a, 15), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "\"arena\": 10197, \"state_arrays\": 2, \"per_tensor\": true"));
    const char *p = pass_line(t, "step");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(field(p, "bytes"), 7 * 4 * OPT_ARENA);
    CU_ASSERT_EQUAL(field(p, "bytes_norms"), 9 * 4 * OPT_ARENA);
    CU_ASSERT(field(p, "ms") >= 0);
    free(t);
    const char *text[] = {"optim", "lamb", "--device", "cpu", "--params", "10000", "--tensors", "7", "--steps", "1"};
    CU_ASSERT_EQUAL_FATAL(bench(&t, text, 10), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "one-pass"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "+norms"));
    free(t);
}

static void test_optim_errors(void)
{
    const char *unknown_opt[] = {"optim", "adamw", "--device", "cpu", "--lr", "1"};
    const char *bad_params[] = {"optim", "adamw", "--device", "cpu", "--params", "10k"};
    const char *zero_params[] = {"optim", "adamw", "--device", "cpu", "--params", "0"};
    const char *many[] = {"optim", "adamw", "--device", "cpu", "--params", "10", "--tensors", "11"};
    const char *bad_set[] = {"optim", "adamw", "--device", "cpu", "--set", "beta1"};
    const char *no_name[] = {"optim", "--device", "cpu"};
    const char *unknown[] = {"optim", "no_such_optimizer", "--device", "cpu", "--params", "1000"};
    const char *bad_key[] = {"optim", "adamw", "--device", "cpu", "--params", "1000", "--set", "no_such_key=1"};
    char *t;
    CU_ASSERT_EQUAL(bench(&t, unknown_opt, 6), 2);
    free(t);
    CU_ASSERT_EQUAL(bench(&t, bad_params, 6), 2);
    free(t);
    CU_ASSERT_EQUAL(bench(&t, zero_params, 6), 2);
    free(t);
    CU_ASSERT_EQUAL(bench(&t, many, 8), 2);
    free(t);
    CU_ASSERT_EQUAL(bench(&t, bad_set, 6), 2);
    free(t);
    CU_ASSERT_EQUAL(bench(&t, no_name, 3), 2);
    free(t);
    CU_ASSERT_EQUAL(bench(&t, unknown, 6), 1);
    CU_ASSERT_STRING_EQUAL(t, "");
    free(t);
    CU_ASSERT_EQUAL(bench_err(&t, unknown, 6), 1);  /* one line naming the optimizer */
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "glia bench optim: "));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "no_such_optimizer"));
    CU_ASSERT(strlen(t) > 0 && strchr(t, '\n') == t + strlen(t) - 1);
    free(t);
    CU_ASSERT_EQUAL(bench_err(&t, bad_key, 8), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "no_such_key"));
    free(t);
}

GLIA_TEST_MAIN("bench", GLIA_TEST(test_layer_json), GLIA_TEST(test_layer_bytes), GLIA_TEST(test_layer_text),
               GLIA_TEST(test_layer_torch), GLIA_TEST(test_layer_usage),
               GLIA_TEST(test_optim_json), GLIA_TEST(test_optim_segments), GLIA_TEST(test_optim_errors))
