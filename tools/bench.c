/* tools/bench.c — `glia bench conv`: a conv2d 64->64 3x3 on 32x64x64x64 timed forward and forward+backward
 * per autotuner setting, precision and memory format (device synchronized around each timed loop).
 * Not a training benchmark: bench/gpu_fmnist compares whole training runs with PyTorch. */
#include <glia/glia.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench.h"

enum { PASS_FWD = 0, PASS_FWD_BWD, N_PASS };
#define N_CONF 8  /* autotune off/on x fp32/bf16 x contiguous/channels_last: conf = 4*tune + 2*bf16 + nhwc */

struct conv_args {
    struct glia_device dev;
    long steps, warmup, batch;
    bool steps_set, warmup_set;
    bool bias, json;
    const char *impl;  /* NULL: the device's first conv2d impl */
};

struct row {
    double ms;         /* per iteration; < 0 when not measured (see note) */
    char note[256];
};

static const char *const pass_name[N_PASS] = {"forward", "forward+backward"};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static bool conf_tune(int c) { return c >> 2 & 1; }
static enum glia_precision conf_precision(int c) { return c >> 1 & 1 ? GLIA_PRECISION_BF16 : GLIA_PRECISION_FP32; }
static enum glia_memory_format conf_format(int c) { return c & 1 ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS; }

/* ---- options ---- */

static int bad_usage(const char *msg, const char *what)
{
    fprintf(stderr, "glia bench conv: %s%s\nusage:\n" GLIA__BENCH_USAGE, msg, what ? what : "");
    return 2;
}

static bool parse_count(const char *v, long lo, long hi, long *out)
{
    char *end;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < lo || n > hi) return false;
    *out = n;
    return true;
}

static int parse_conv_args(int argc, char **argv, struct conv_args *a)
{
    *a = (struct conv_args){{GLIA_DEVICE_CUDA, 0}, 50, 10, 32, false, false, true, false, NULL};
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--json")) {
            a->json = true;
            continue;
        }
        if (strncmp(s, "--", 2)) return bad_usage("unexpected argument ", s);
        if (i + 1 >= argc) return bad_usage("a value is missing after ", s);
        const char *v = argv[++i];
        if (!strcmp(s, "--device")) {
            if (glia_device_parse(v, &a->dev)) return bad_usage("--device takes cpu, cuda or cuda:N, got ", v);
        } else if (!strcmp(s, "--steps")) {
            if (!parse_count(v, 1, 1000000, &a->steps)) return bad_usage("--steps takes 1..1000000, got ", v);
            a->steps_set = true;
        } else if (!strcmp(s, "--warmup")) {
            if (!parse_count(v, 0, 1000000, &a->warmup)) return bad_usage("--warmup takes 0..1000000, got ", v);
            a->warmup_set = true;
        } else if (!strcmp(s, "--batch")) {
            if (!parse_count(v, 1, 65536, &a->batch)) return bad_usage("--batch takes 1..65536, got ", v);
        } else if (!strcmp(s, "--bias")) {
            if (strcmp(v, "on") && strcmp(v, "off")) return bad_usage("--bias takes on or off, got ", v);
            a->bias = !strcmp(v, "on");
        } else if (!strcmp(s, "--impl")) {
            a->impl = v;
        } else {
            return bad_usage("unknown option ", s);
        }
    }
    /* the CPU computes this convolution ~100x slower: fewer steps unless asked */
    if (a->dev.type == GLIA_DEVICE_CPU && !a->steps_set) a->steps = 3;
    if (a->dev.type == GLIA_DEVICE_CPU && !a->warmup_set) a->warmup = 1;
    return 0;
}

/* ---- measuring ---- */

/* Seconds for n iterations (forward, or forward then backward), device synchronized before and after. */
static glia_status time_loop(struct glia_layer_run *r, bool backward, long n, double *sec)
{
    glia_status st = glia_layer_run_sync(r);
    double t0 = now_s();
    for (long i = 0; i < n && !st; i++) {
        st = glia_layer_run_forward(r, true);
        if (!st && backward) st = glia_layer_run_backward(r);
    }
    if (!st) st = glia_layer_run_sync(r);
    *sec = now_s() - t0;
    return st;
}

/* Both passes of configuration c into rows[PASS_*]. Returns GLIA_OK also when the backend refuses
 * the configuration (rows marked n/a); other errors are the run's. */
static glia_status measure(struct glia_context *ctx, struct glia_backend *b, const struct conv_args *a, int c,
                           struct row rows[N_PASS], char *impl, size_t impl_size, uint64_t *flops)
{
    for (int p = 0; p < N_PASS; p++) rows[p].ms = -1, rows[p].note[0] = '\0';
    struct glia_runtime_options o = {sizeof o, conf_precision(c), conf_tune(c), (size_t)1 << 30, false};
    glia_status st = glia_backend_configure(b, &o);
    if (st == GLIA_EUNSUPPORTED) {
        for (int p = 0; p < N_PASS; p++) {
            if (b->device.type == GLIA_DEVICE_CPU)
                snprintf(rows[p].note, sizeof rows[p].note, "n/a (cpu computes fp32 only)");
            else
                snprintf(rows[p].note, sizeof rows[p].note, "n/a (%s)", glia_context_error(ctx));
        }
        glia_context_clear_error(ctx);
        return GLIA_OK;
    }
    char ini[256];
    snprintf(ini, sizeof ini, "[conv]\ntype = conv2d\nfilters = 64\nsize = 3\npadding = 1\nbias = %s\n%s%s%s",
             a->bias ? "on" : "off", a->impl ? "impl = " : "", a->impl ? a->impl : "", a->impl ? "\n" : "");
    struct glia_shape in = glia_shape_make(4, (int64_t[]){a->batch, 64, 64, 64});
    struct glia_layer_run *r = NULL;
    if (!st) st = glia_layer_run_new(ctx, ini, a->dev, &in, 1, conf_format(c), 1, &r);
    if (!st) {
        snprintf(impl, impl_size, "%s", glia_layer_run_layer(r)->kernel->impl);
        *flops = glia_layer_run_flops(r);
    }
    double sec;
    /* warm-up: both passes (the autotuner times its candidates on the first call of each) */
    if (!st && a->warmup) st = time_loop(r, true, a->warmup, &sec);
    for (int p = 0; p < N_PASS && !st; p++)
        if (!(st = time_loop(r, p == PASS_FWD_BWD, a->steps, &sec))) rows[p].ms = 1e3 * sec / (double)a->steps;
    glia_layer_run_free(r);
    return st;
}

/* ---- printing ---- */

static void print_header(const struct conv_args *a, const char *impl, uint64_t flops)
{
    char dev[32];
    glia_device_str(a->dev, dev, sizeof dev);
    if (a->json) {
        printf("{\"bench\": \"conv\", \"device\": \"%s\", \"impl\": \"%s\", \"batch\": %ld, \"bias\": %s, \"steps\": %ld, "
               "\"warmup\": %ld, \"forward_flops\": %llu}\n",
               dev, impl, a->batch, a->bias ? "true" : "false", a->steps, a->warmup, (unsigned long long)flops);
        return;
    }
    printf("conv2d 64->64, 3x3, padding 1, bias %s; input %ldx64x64x64 (NCHW); device %s, impl %s\n",
           a->bias ? "on" : "off", a->batch, dev, impl);
    printf("ms per iteration: mean of %ld steps after %ld warm-up steps, device synchronized before and after\n",
           a->steps, a->warmup);
    printf("forward %.3f GFLOP (forward+backward counted as 3x); each configuration in a fresh context\n",
           (double)flops * 1e-9);
    if (a->dev.type == GLIA_DEVICE_CPU) printf("(autotune has no effect on the cpu backend)\n");
    printf("\n");
    printf("%-17s %-9s %-10s %-14s %10s %9s\n", "pass", "autotune", "precision", "format", "ms/iter", "TFLOP/s");
}

static void print_row(const struct conv_args *a, int p, int c, const struct row *w, uint64_t flops)
{
    double tf = w->ms > 0 ? (double)flops * (p == PASS_FWD_BWD ? 3.0 : 1.0) / (w->ms * 1e-3) * 1e-12 : 0;
    const char *tune = conf_tune(c) ? "on" : "off", *prec = glia_precision_name(conf_precision(c));
    const char *fmt = glia_memory_format_name(conf_format(c));
    if (a->json) {
        printf("{\"pass\": \"%s\", \"cudnn_benchmark\": %s, \"precision\": \"%s\", \"memory_format\": \"%s\", ",
               pass_name[p], conf_tune(c) ? "true" : "false", prec, fmt);
        if (w->ms >= 0) printf("\"ms\": %.6g, \"tflops\": %.6g}\n", w->ms, tf);
        else {
            printf("\"ms\": null, \"note\": \"");
            for (const char *s = w->note; *s; s++) {
                if (*s == '"' || *s == '\\') putchar('\\');
                putchar(*s == '\n' ? ' ' : *s);
            }
            printf("\"}\n");
        }
        return;
    }
    printf("%-17s %-9s %-10s %-14s ", pass_name[p], tune, prec, fmt);
    if (w->ms >= 0) printf("%10.3f %9.2f\n", w->ms, tf);
    else printf("%s\n", w->note);
}

/* ---- glia bench conv ---- */

/* Configuration c measured in a context of its own, so that no algorithm choice, cache or
 * workspace of one configuration carries over to the next. Returns 1 when the device cannot be
 * opened (said on stderr), else 0 with the rows filled (failures noted in them). */
static int conf_run(const struct conv_args *a, int c, struct row rows[N_PASS], char *impl, size_t impl_size,
                    uint64_t *flops)
{
    struct glia_context *ctx;
    struct glia_backend *b;
    if (glia_context_new(&ctx)) {
        fprintf(stderr, "glia bench conv: out of memory\n");
        return 1;
    }
    glia_status st = glia_layer_run_backend_open(ctx, a->dev, &b);
    if (st) {
        const char *why = glia_context_error(ctx);
        fprintf(stderr, "glia bench conv: %s%s\n", a->dev.type == GLIA_DEVICE_CUDA ? "needs a CUDA device: " : "",
                why && *why ? why : glia_strerror(st));
        glia_context_free(ctx);
        return 1;
    }
    if ((st = measure(ctx, b, a, c, rows, impl, impl_size, flops)))
        for (int p = 0; p < N_PASS; p++)
            if (rows[p].ms < 0) snprintf(rows[p].note, sizeof rows[p].note, "failed: %s", glia_context_error(ctx));
    glia_context_free(ctx);
    return 0;
}

static int bench_conv(int argc, char **argv)
{
    struct conv_args a;
    int rc = parse_conv_args(argc, argv, &a);
    if (rc) return rc;
    static struct row rows[N_CONF][N_PASS];
    char impl[64] = "?";
    uint64_t flops = 0;
    for (int c = 0; c < N_CONF; c++)
        if (conf_run(&a, c, rows[c], impl, sizeof impl, &flops)) return 1;
    print_header(&a, impl, flops);
    for (int p = 0; p < N_PASS; p++)
        for (int c = 0; c < N_CONF; c++) {
            print_row(&a, p, c, &rows[c][p], flops);
            if (!strncmp(rows[c][p].note, "failed", 6)) rc = 1;
        }
    return rc;
}

int glia__bench_main(int argc, char **argv)
{
    if (argc < 1) {
        fprintf(stderr, "glia bench: which benchmark?\nusage:\n" GLIA__BENCH_USAGE);
        return 2;
    }
    if (!strcmp(argv[0], "conv")) return bench_conv(argc, argv);
    fprintf(stderr, "glia bench: unknown benchmark '%s' (known: conv)\nusage:\n" GLIA__BENCH_USAGE, argv[0]);
    return 2;
}
