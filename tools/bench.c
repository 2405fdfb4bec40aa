/* tools/bench.c — `glia bench conv`: a conv2d 64->64 3x3 on 32x64x64x64 timed forward and forward+backward
 * per autotuner setting, precision and memory format; `glia bench layer`: one layer type at given shapes, with
 * the bytes it moves and, beside it, the same op in PyTorch (bench/layer/torch_layer.py). Both synchronize the
 * device around each timed loop; `glia bench optim`: one optimizer step over a flat parameter arena laid out as
 * the core lays out a model's, with the bytes it must move. Not a training benchmark: bench/gpu_fmnist compares
 * whole training runs. */
#include <glia/glia.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
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
    bool bias, relu, json;
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
    *a = (struct conv_args){{GLIA_DEVICE_CUDA, 0}, 50, 10, 32, false, false, true, false, false, NULL};
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
        } else if (!strcmp(s, "--relu")) {
            if (strcmp(v, "on") && strcmp(v, "off")) return bad_usage("--relu takes on or off, got ", v);
            a->relu = !strcmp(v, "on");
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

/* glia bench layer's (and torch_layer.py's) floor on a GPU: a pass warms up for at least WARM_S seconds (a GPU idle
 * before it runs at low clocks, which rise only under load) and is timed over at least TIMED_S seconds. */
#define WARM_S 0.2
#define TIMED_S 0.1

/* Milliseconds a step of one pass (forward, or forward then backward): `warmup` steps, more on a GPU until WARM_S
 * seconds have passed, then at least `steps` timed ones, more on a GPU until they fill TIMED_S seconds (the count
 * estimated from the warm-up's steps). */
static glia_status pass_ms(struct glia_layer_run *r, bool backward, long warmup, long steps, bool gpu, double *ms)
{
    double sec = 0, spent = 0;
    long done = 0;
    glia_status st = warmup ? time_loop(r, backward, warmup, &sec) : GLIA_OK;
    spent += sec, done += warmup;
    while (!st && gpu && spent < WARM_S) {  /* in rounds of what the warm-up took so far, at least one step */
        long more = done > 0 ? done : 1;
        if (!(st = time_loop(r, backward, more, &sec))) spent += sec, done += more;
    }
    long n = steps;
    if (gpu && done > 0 && spent > 0) {
        double per = spent / (double)done;
        long fill = (long)(TIMED_S / per) + 1;
        if (fill > n) n = fill;
    }
    if (!st) st = time_loop(r, backward, n, &sec);
    *ms = 1e3 * sec / (double)n;
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
    snprintf(ini, sizeof ini, "[conv]\ntype = conv2d\nfilters = 64\nsize = 3\npadding = 1\nbias = %s\nactivation = %s\n%s%s%s",
             a->bias ? "on" : "off", a->relu ? "relu" : "none", a->impl ? "impl = " : "", a->impl ? a->impl : "",
             a->impl ? "\n" : "");
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
        printf("{\"bench\": \"conv\", \"device\": \"%s\", \"impl\": \"%s\", \"batch\": %ld, \"bias\": %s, \"relu\": %s, "
               "\"steps\": %ld, \"warmup\": %ld, \"forward_flops\": %llu}\n",
               dev, impl, a->batch, a->bias ? "true" : "false", a->relu ? "true" : "false", a->steps, a->warmup,
               (unsigned long long)flops);
        return;
    }
    printf("conv2d 64->64, 3x3, padding 1, bias %s%s; input %ldx64x64x64 (NCHW); device %s, impl %s\n",
           a->bias ? "on" : "off", a->relu ? ", relu fused (activation = relu)" : "", a->batch, dev, impl);
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

/* ---- glia bench layer ---- */

/* The ops both sides know: glia's layer section and the PyTorch script's --op (the same name). Any other OP is
 * taken as a glia layer type ("type = OP"), timed without PyTorch. */
static const struct layer_op {
    const char *name, *ini;
    int n_in;  /* inputs, each of the given shape */
} layer_ops[] = {
    {"batchnorm", "type = batchnorm\n", 1},
    {"batchnorm_relu", "type = batchnorm\nactivation = relu\n", 1},
    {"maxpool", "type = maxpool2d\nsize = 3\nstride = 2\npadding = 1\n", 1},
    {"avgpool", "type = avgpool2d\nsize = 3\nstride = 2\npadding = 1\n", 1},
    {"dropout", "type = dropout\np = 0.5\n", 1},
    {"cross_entropy", "type = softmax_cross_entropy\n", 1},
    {"relu", "type = relu\n", 1},
    {"gelu", "type = gelu\n", 1},
    {"cat", "type = concat\n", 2},
    {"attention", "type = attention\nheads = 12\n", 1},  /* GPT-2's 12 heads: --shape N x T x 3C */
    {"linear", "type = linear\noutputs = 3072\n", 1},   /* GPT-2's MLP fc: --shape N x T x 768 */
    {"linear_gelu", "type = linear\noutputs = 3072\nactivation = gelu_tanh\n", 1},  /* fc and its tanh GELU fused */
    {"layernorm", "type = layernorm\n", 1},  /* over the last dimension: GPT-2's --shape N x T x 768 */
};

struct layer_args {
    struct glia_device dev;
    const char *op;
    const struct layer_op *known;  /* NULL: op is a glia type */
    struct glia_shape shape;
    enum glia_precision precision;
    enum glia_memory_format format;
    bool act_f32;                  /* --activations f32: f32 at any precision (else auto: the half type of bf16/fp16
                                      where the kernel takes it, as a model with [graph] half_activations = auto) */
    long steps, warmup;
    const char *torch;             /* the PyTorch script; NULL: none */
    bool json;
};

/* One pass's figures on one side; ms < 0: not measured, note says why. */
struct side {
    double ms, bytes;
    char note[160];
    double flops;  /* the pass's FLOPs (the layer's forward; 3x that for forward+backward); 0: the layer counts none */
};

static int layer_usage(const char *msg, const char *what)
{
    fprintf(stderr, "glia bench layer: %s%s\nusage:\n" GLIA__BENCH_USAGE, msg, what ? what : "");
    return 2;
}

/* "256x64x56x56" (1 to 8 positive sizes) */
static bool parse_shape(const char *v, struct glia_shape *s)
{
    int64_t d[8];
    int n = 0;
    const char *p = v;
    while (n < 8) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || x < 1 || errno) return false;
        d[n++] = x;
        if (!*end) break;
        if (*end != 'x') return false;
        p = end + 1;
    }
    if (*p && strchr(p, 'x')) return false;  /* more than 8 sizes */
    *s = glia_shape_make(n, d);
    return true;
}

static bool parse_precision(const char *v, enum glia_precision *p)
{
    const enum glia_precision all[] = {GLIA_PRECISION_FP32, GLIA_PRECISION_TF32, GLIA_PRECISION_BF16, GLIA_PRECISION_FP16};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(v, glia_precision_name(all[i]))) return *p = all[i], true;
    return false;
}

/* The script named by --torch (off: none), else $GLIA_TORCH_LAYER, else bench/layer/torch_layer.py when it
 * exists under the current directory. */
static const char *find_torch(const char *given)
{
    if (given) return strcmp(given, "off") ? given : NULL;
    const char *env = getenv("GLIA_TORCH_LAYER");
    if (env && *env) return env;
    FILE *f = fopen("bench/layer/torch_layer.py", "r");
    if (!f) return NULL;
    fclose(f);
    return "bench/layer/torch_layer.py";
}

static int parse_layer_args(int argc, char **argv, struct layer_args *a)
{
    *a = (struct layer_args){.dev = {GLIA_DEVICE_CUDA, 0}, .precision = GLIA_PRECISION_FP32, .format = GLIA_CONTIGUOUS,
                             .steps = 50, .warmup = 10};
    bool steps_set = false, warmup_set = false, shape_set = false;
    const char *torch = NULL;
    if (argc < 2 || !strncmp(argv[1], "--", 2)) return layer_usage("which layer? (an op or a layer type)", NULL);
    a->op = argv[1];
    for (size_t i = 0; i < sizeof layer_ops / sizeof layer_ops[0]; i++)
        if (!strcmp(a->op, layer_ops[i].name)) a->known = &layer_ops[i];
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--json")) {
            a->json = true;
            continue;
        }
        if (strncmp(s, "--", 2)) return layer_usage("unexpected argument ", s);
        if (i + 1 >= argc) return layer_usage("a value is missing after ", s);
        const char *v = argv[++i];
        if (!strcmp(s, "--device")) {
            if (glia_device_parse(v, &a->dev)) return layer_usage("--device takes cpu, cuda or cuda:N, got ", v);
        } else if (!strcmp(s, "--shape")) {
            if (!parse_shape(v, &a->shape)) return layer_usage("--shape takes sizes like 256x64x56x56, got ", v);
            shape_set = true;
        } else if (!strcmp(s, "--precision")) {
            if (!parse_precision(v, &a->precision)) return layer_usage("--precision takes fp32, tf32, bf16 or fp16, got ", v);
        } else if (!strcmp(s, "--memory-format")) {
            if (strcmp(v, "contiguous") && strcmp(v, "channels_last"))
                return layer_usage("--memory-format takes contiguous or channels_last, got ", v);
            a->format = strcmp(v, "channels_last") ? GLIA_CONTIGUOUS : GLIA_CHANNELS_LAST;
        } else if (!strcmp(s, "--activations")) {
            if (strcmp(v, "auto") && strcmp(v, "f32")) return layer_usage("--activations takes auto or f32, got ", v);
            a->act_f32 = !strcmp(v, "f32");
        } else if (!strcmp(s, "--steps")) {
            if (!parse_count(v, 1, 1000000, &a->steps)) return layer_usage("--steps takes 1..1000000, got ", v);
            steps_set = true;
        } else if (!strcmp(s, "--warmup")) {
            if (!parse_count(v, 0, 1000000, &a->warmup)) return layer_usage("--warmup takes 0..1000000, got ", v);
            warmup_set = true;
        } else if (!strcmp(s, "--torch")) {
            torch = v;
        } else {
            return layer_usage("unknown option ", s);
        }
    }
    if (!shape_set) return layer_usage("--shape is required", NULL);
    if (a->dev.type == GLIA_DEVICE_CPU && !steps_set) a->steps = 5;
    if (a->dev.type == GLIA_DEVICE_CPU && !warmup_set) a->warmup = 1;
    a->torch = a->known ? find_torch(torch) : NULL;
    return 0;
}

/* Bytes of tensor t (0 for NULL). */
static double tensor_bytes(const struct glia_tensor *t)
{
    return t ? (double)glia_tensor_numel(t) * (double)glia_dtype_size(t->dtype) : 0.0;
}

/* The bytes a pass moves at least: forward = inputs + output (+ a loss's labels, 4 bytes a sample); backward =
 * output gradient + the inputs (unless the kernel's backward reads none) + the output (unless it reads none) +
 * input gradients (+ the labels). Parameters and kept state are not counted. */
static void pass_bytes(struct glia_layer_run *r, int n_in, double *fwd, double *bwd)
{
    const struct glia_layer *l = glia_layer_run_layer(r);
    uint32_t fl = glia_layer_kernel_flags(l);
    double in = 0, din = 0, labels = 0;
    for (int k = 0; k < n_in; k++) {
        in += tensor_bytes(glia_layer_run_input(r, k));
        din += tensor_bytes(glia_layer_run_input_grad(r, k));
    }
    if (l->type->flags & GLIA_TYPE_LOSS) labels = 4.0 * (double)glia_layer_run_input(r, 0)->shape.dim[0];
    double out = tensor_bytes(glia_layer_run_output(r)), dout = tensor_bytes(glia_layer_run_output_grad(r));
    *fwd = in + out + labels;
    *bwd = dout + (fl & GLIA_KERNEL_BWD_NO_INPUT ? 0 : in) + (fl & GLIA_KERNEL_BWD_NO_OUTPUT ? 0 : out) + din + labels;
}

/* The half type of precision p (GLIA_F32 for fp32 and tf32). */
static enum glia_dtype half_of(enum glia_precision p)
{
    return p == GLIA_PRECISION_BF16 ? GLIA_BF16 : p == GLIA_PRECISION_FP16 ? GLIA_F16 : GLIA_F32;
}

/* The layer run of a's op: with its activations in the precision's half type where a asks for it (auto) and the
 * kernel takes them, else in f32 (*act: the type it got). */
static glia_status layer_run(struct glia_context *ctx, const struct layer_args *a, const char *ini,
                             const struct glia_shape *in, int n_in, enum glia_dtype *act, struct glia_layer_run **r)
{
    *act = a->act_f32 ? GLIA_F32 : half_of(a->precision);
    glia_status st = glia_layer_run_new_typed(ctx, ini, a->dev, in, n_in, a->format, *act, 1, r);
    if (st != GLIA_EUNSUPPORTED || *act == GLIA_F32) return st;
    glia_context_clear_error(ctx);  /* a kernel (or a loss) that takes f32 only: as a model hands it f32 */
    *act = GLIA_F32;
    return glia_layer_run_new_typed(ctx, ini, a->dev, in, n_in, a->format, *act, 1, r);
}

/* glia's side: both passes into g[PASS_*]; impl gets the kernel's impl, *act the activations' type. Returns 0, or 1
 * with the reason on stderr. */
static int layer_glia(const struct layer_args *a, struct side g[N_PASS], char *impl, size_t impl_size,
                      enum glia_dtype *act)
{
    struct glia_context *ctx;
    struct glia_backend *b;
    struct glia_layer_run *r = NULL;
    if (glia_context_new(&ctx)) return fprintf(stderr, "glia bench layer: out of memory\n"), 1;
    glia_status st = glia_layer_run_backend_open(ctx, a->dev, &b);
    struct glia_runtime_options o = {sizeof o, a->precision, true, (size_t)1 << 30, false};
    if (!st) st = glia_backend_configure(b, &o);
    char ini[512];
    int n_in = a->known ? a->known->n_in : 1;
    snprintf(ini, sizeof ini, "[%s]\n%s", a->op, a->known ? a->known->ini : "");
    if (!a->known) snprintf(ini + strlen(ini), sizeof ini - strlen(ini), "type = %s\n", a->op);
    struct glia_shape in[2] = {a->shape, a->shape};
    if (!st) st = layer_run(ctx, a, ini, in, n_in, act, &r);
    double fb[N_PASS];
    if (!st) {
        snprintf(impl, impl_size, "%s", glia_layer_run_layer(r)->kernel->impl);
        pass_bytes(r, n_in, &fb[PASS_FWD], &fb[PASS_FWD_BWD]);
        fb[PASS_FWD_BWD] += fb[PASS_FWD];
    }
    bool bwd = !st && glia_layer_run_input_grad(r, 0) != NULL;
    for (int p = 0; p < N_PASS && !st; p++) {  /* each pass warmed up and timed on its own, as the PyTorch side does */
        g[p] = (struct side){-1, fb[p], "", (double)glia_layer_run_flops(r) * (p == PASS_FWD_BWD ? 3.0 : 1.0)};
        if (p == PASS_FWD_BWD && !bwd) snprintf(g[p].note, sizeof g[p].note, "n/a (no input gradient)");
        else st = pass_ms(r, p == PASS_FWD_BWD, a->warmup, a->steps, a->dev.type != GLIA_DEVICE_CPU, &g[p].ms);
    }
    if (st) {
        const char *why = glia_context_error(ctx);
        fprintf(stderr, "glia bench layer: %s\n", why && *why ? why : glia_strerror(st));
    }
    glia_layer_run_free(r);
    glia_context_free(ctx);
    return st ? 1 : 0;
}

/* "'...'" with every ' written '\'' (for popen's shell) */
static void shell_quote(char *out, size_t n, const char *s)
{
    size_t k = 0;
    if (n < 3) return;
    out[k++] = '\'';
    for (; *s && k + 5 < n; s++) {
        if (*s == '\'') {
            memcpy(out + k, "'\\''", 4);
            k += 4;
        } else {
            out[k++] = *s;
        }
    }
    out[k++] = '\'';
    out[k] = '\0';
}

/* The number after "key": in a JSON line, or -1. */
static double json_number(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p) return -1;
    char *end;
    double v = strtod(p + strlen(pat), &end);
    return end == p + strlen(pat) ? -1 : v;
}

/* PyTorch's side: runs `$GLIA_PYTHON (python3) SCRIPT --op OP --shape S --precision P --memory-format F
 * --activations auto|f32 --device D --steps N --warmup W`, which prints one JSON line per pass: {"pass": "forward", "ms": X,
 * "bytes": B}. A script that fails or prints no figure leaves the notes saying so (its stderr passes through). */
static void layer_torch(const struct layer_args *a, struct side t[N_PASS])
{
    for (int p = 0; p < N_PASS; p++) t[p] = (struct side){-1, 0, "n/a (no PyTorch script: --torch FILE)", 0};
    if (!a->torch) return;
    const char *py = getenv("GLIA_PYTHON");
    char qpy[512], qscript[1024], shape[128], dev[32], cmd[2048];
    shell_quote(qpy, sizeof qpy, py && *py ? py : "python3");
    shell_quote(qscript, sizeof qscript, a->torch);
    glia_shape_str(&a->shape, shape, sizeof shape);
    glia_device_str(a->dev, dev, sizeof dev);
    snprintf(cmd, sizeof cmd, "%s %s --op %s --shape %s --precision %s --memory-format %s --activations %s "
             "--device %s --steps %ld --warmup %ld", qpy, qscript, a->op, shape, glia_precision_name(a->precision),
             glia_memory_format_name(a->format), a->act_f32 ? "f32" : "auto", dev, a->steps, a->warmup);
    fflush(stdout);
    FILE *f = popen(cmd, "r");
    if (!f) {
        for (int p = 0; p < N_PASS; p++) snprintf(t[p].note, sizeof t[p].note, "n/a (cannot start %s)", a->torch);
        return;
    }
    char line[1024];
    while (fgets(line, sizeof line, f))
        for (int p = 0; p < N_PASS; p++) {
            char pat[64];
            snprintf(pat, sizeof pat, "\"pass\": \"%s\"", pass_name[p]);
            if (!strstr(line, pat)) continue;
            t[p].ms = json_number(line, "ms");
            t[p].bytes = json_number(line, "bytes");
        }
    int rc = pclose(f);
    for (int p = 0; p < N_PASS; p++)
        if (t[p].ms < 0) snprintf(t[p].note, sizeof t[p].note, "n/a (%s %s)", a->torch, rc ? "failed" : "printed no figure");
}

static double gbps(const struct side *s) { return s->ms > 0 && s->bytes > 0 ? s->bytes / (s->ms * 1e-3) * 1e-9 : -1; }

static void print_layer(const struct layer_args *a, const char *impl, enum glia_dtype act, const struct side g[N_PASS],
                        const struct side t[N_PASS])
{
    char dev[32], shape[128];
    glia_device_str(a->dev, dev, sizeof dev);
    glia_shape_str(&a->shape, shape, sizeof shape);
    const char *prec = glia_precision_name(a->precision), *fmt = glia_memory_format_name(a->format);
    if (a->json) {
        printf("{\"bench\": \"layer\", \"op\": \"%s\", \"impl\": \"%s\", \"device\": \"%s\", \"shape\": \"%s\", "
               "\"inputs\": %d, \"precision\": \"%s\", \"activations\": \"%s\", \"memory_format\": \"%s\", "
               "\"steps\": %ld, \"warmup\": %ld, \"torch\": %s%s%s}\n", a->op, impl, dev, shape,
               a->known ? a->known->n_in : 1, prec, glia_dtype_name(act), fmt, a->steps,
               a->warmup, a->torch ? "\"" : "", a->torch ? a->torch : "null", a->torch ? "\"" : "");
        for (int p = 0; p < N_PASS; p++) {
            printf("{\"pass\": \"%s\", \"bytes\": %.0f, ", pass_name[p], g[p].bytes);
            if (g[p].ms >= 0) printf("\"ms\": %.6g, \"gbps\": %.6g, ", g[p].ms, gbps(&g[p]));
            else printf("\"ms\": null, \"gbps\": null, ");
            if (t[p].ms >= 0) printf("\"torch_ms\": %.6g, \"torch_bytes\": %.0f, \"torch_gbps\": %.6g", t[p].ms, t[p].bytes,
                                     gbps(&t[p]));
            else printf("\"torch_ms\": null, \"torch_bytes\": null, \"torch_gbps\": null");
            if (g[p].flops > 0 && g[p].ms > 0) printf(", \"tflops\": %.6g", g[p].flops / (g[p].ms * 1e9));
            if (g[p].flops > 0 && t[p].ms > 0) printf(", \"torch_tflops\": %.6g", g[p].flops / (t[p].ms * 1e9));
            if (t[p].ms > 0 && g[p].ms > 0) printf(", \"torch_over_glia\": %.4g}\n", t[p].ms / g[p].ms);
            else printf(", \"torch_over_glia\": null}\n");
        }
        return;
    }
    printf("layer %s (impl %s) on %s%s, %s, precision %s, %s activations; device %s\n", a->op, impl, shape,
           a->known && a->known->n_in == 2 ? " (2 inputs)" : "", fmt, prec, glia_dtype_name(act), dev);
    printf("ms per iteration: mean of %ld steps (on a GPU, as many more as fill %.1f s) after %ld warm-up steps (on a "
           "GPU, at least %.1f s), each pass on its own, device synchronized before and after\n",
           a->steps, TIMED_S, a->warmup, WARM_S);
    printf("GB/s = bytes / time; bytes: forward = inputs + output; forward+backward adds output gradient + the inputs\n"
           "and output backward reads + input gradients, each at its element size\n");
    printf("pytorch: %s\n\n", a->torch ? a->torch : "none (--torch FILE, or run from the source tree)");
    printf("%-17s %10s %10s %10s %10s %10s %10s %11s\n", "pass", "glia ms", "glia GB/s", "glia MB", "torch ms",
           "torch GB/s", "torch MB", "torch/glia");
    for (int p = 0; p < N_PASS; p++) {
        printf("%-17s ", pass_name[p]);
        if (g[p].ms >= 0) printf("%10.4g %10.4g %10.4g ", g[p].ms, gbps(&g[p]), g[p].bytes * 1e-6);
        else printf("%-32s ", g[p].note);
        if (t[p].ms >= 0) {
            printf("%10.4g %10.4g %10.4g ", t[p].ms, gbps(&t[p]), t[p].bytes * 1e-6);
            if (g[p].ms > 0) printf("%11.2f", t[p].ms / g[p].ms);
            printf("\n");
        } else {
            printf("%s\n", t[p].note);
        }
    }
    if (g[PASS_FWD].flops > 0) {  /* a layer that counts FLOPs (attention): the rates beside the bytes */
        printf("\nTFLOP/s (the layer's forward FLOPs, %.4g G; 3x for forward+backward):", g[PASS_FWD].flops * 1e-9);
        for (int p = 0; p < N_PASS; p++)
            printf(" %s glia %.4g torch %.4g%s", pass_name[p], g[p].ms > 0 ? g[p].flops / (g[p].ms * 1e9) : 0.0,
                   t[p].ms > 0 ? g[p].flops / (t[p].ms * 1e9) : 0.0, p + 1 < N_PASS ? ";" : "\n");
    }
}

static int bench_layer(int argc, char **argv)
{
    struct layer_args a;
    int rc = parse_layer_args(argc, argv, &a);
    if (rc) return rc;
    struct side g[N_PASS], t[N_PASS];
    char impl[64] = "?";
    enum glia_dtype act = GLIA_F32;
    if (layer_glia(&a, g, impl, sizeof impl, &act)) return 1;
    layer_torch(&a, t);
    print_layer(&a, impl, act, g, t);
    return 0;
}

/* ---- glia bench optim ---- */

#define OPT_ALIGN 64  /* floats: each tensor's offset in the arena is a multiple (core/parts.h GLIA__ARENA_ALIGN) */
#define OPT_MAX_SET 32

struct optim_args {
    struct glia_device dev;
    const char *name;
    long params, tensors, steps, warmup;
    char ini[4096];  /* the [optimizer] section from --set */
    bool json;
};

static int optim_usage(const char *msg, const char *what)
{
    fprintf(stderr, "glia bench optim: %s%s\nusage:\n" GLIA__BENCH_USAGE, msg, what ? what : "");
    return 2;
}

static int parse_optim_args(int argc, char **argv, struct optim_args *a)
{
    *a = (struct optim_args){.dev = {GLIA_DEVICE_CUDA, 0}, .tensors = 160, .steps = 50, .warmup = 10};
    bool params_set = false, steps_set = false, warmup_set = false;
    int n_set = 0;
    if (argc < 2 || !strncmp(argv[1], "--", 2)) return optim_usage("which optimizer? (sgd, adam, adamw, ...)", NULL);
    a->name = argv[1];
    snprintf(a->ini, sizeof a->ini, "[optimizer]\n");
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--json")) {
            a->json = true;
            continue;
        }
        if (strncmp(s, "--", 2)) return optim_usage("unexpected argument ", s);
        if (i + 1 >= argc) return optim_usage("a value is missing after ", s);
        const char *v = argv[++i];
        if (!strcmp(s, "--device")) {
            if (glia_device_parse(v, &a->dev)) return optim_usage("--device takes cpu, cuda or cuda:N, got ", v);
        } else if (!strcmp(s, "--params")) {
            if (!parse_count(v, 1, 2000000000, &a->params)) return optim_usage("--params takes 1..2000000000, got ", v);
            params_set = true;
        } else if (!strcmp(s, "--tensors")) {
            if (!parse_count(v, 1, 1000000, &a->tensors)) return optim_usage("--tensors takes 1..1000000, got ", v);
        } else if (!strcmp(s, "--steps")) {
            if (!parse_count(v, 1, 1000000, &a->steps)) return optim_usage("--steps takes 1..1000000, got ", v);
            steps_set = true;
        } else if (!strcmp(s, "--warmup")) {
            if (!parse_count(v, 0, 1000000, &a->warmup)) return optim_usage("--warmup takes 0..1000000, got ", v);
            warmup_set = true;
        } else if (!strcmp(s, "--set")) {
            const char *eq = strchr(v, '=');
            size_t len = strlen(a->ini);
            if (!eq || eq == v || strchr(v, '\n') || strchr(v, '['))
                return optim_usage("--set takes KEY=VALUE (a key of [optimizer]), got ", v);
            if (++n_set > OPT_MAX_SET || len + strlen(v) + 4 >= sizeof a->ini)
                return optim_usage("too many --set", NULL);
            snprintf(a->ini + len, sizeof a->ini - len, "%.*s = %s\n", (int)(eq - v), v, eq + 1);
        } else {
            return optim_usage("unknown option ", s);
        }
    }
    /* the CPU steps ~50x slower: a smaller arena and fewer steps unless asked */
    if (!params_set) a->params = a->dev.type == GLIA_DEVICE_CPU ? 1000000 : 50000000;
    if (a->dev.type == GLIA_DEVICE_CPU && !steps_set) a->steps = 5;
    if (a->dev.type == GLIA_DEVICE_CPU && !warmup_set) a->warmup = 1;
    if (a->tensors > a->params) return optim_usage("--tensors must not exceed --params", NULL);
    return 0;
}

/* The sizes of k tensors holding n elements in all (n >= k), about ResNet-50's mix: every third tensor (0, 3, 6, ...)
 * a large weight and the two after it small 1-D tensors (a norm's scale and shift) of 64 << (i/3 % 6) elements (64 to
 * 2048, as channel counts), scaled down when they would take more than 1% of n; the large ones share the rest in the
 * ratio 1:2:3:4, repeating, each at least 1 element. Deterministic. */
static void optim_sizes(int64_t n, int64_t k, int64_t *size)
{
    int64_t n_large = (k + 2) / 3, n_small = k - n_large, small = 0, budget = n / 100;
    for (int64_t i = 0; i < k; i++)
        if (i % 3) small += size[i] = (int64_t)64 << (i / 3 % 6);
    if (small > budget) {  /* 1 each, and what the budget has left shared in proportion */
        int64_t left = budget > n_small ? budget - n_small : 0, scaled = 0;
        for (int64_t i = 0; i < k; i++)
            if (i % 3) scaled += size[i] = 1 + size[i] * left / small;
        small = scaled;
    }
    int64_t rest = n - small - n_large, weight = 0, given = 0;  /* rest: past one element each */
    for (int64_t i = 0; i < k; i += 3) weight += 1 + i / 3 % 4;
    for (int64_t i = 0; i < k; i += 3) {
        size[i] = 1 + rest * (1 + i / 3 % 4) / weight;
        given += size[i];
    }
    size[0] += n - small - given;  /* the rounding's remainder */
}

/* Offsets of the tensors in the arena (each at a multiple of OPT_ALIGN floats, as core/params.c's plan) and its
 * length in floats. */
static int64_t optim_layout(const int64_t *size, int64_t k, int64_t *seg)
{
    int64_t at = 0;
    for (int64_t i = 0; i < k; i++) {
        at = (at + OPT_ALIGN - 1) / OPT_ALIGN * OPT_ALIGN;
        seg[2 * i] = at, seg[2 * i + 1] = size[i];
        at += size[i];
    }
    return at > 0 ? at : 1;
}

/* N(0, 0.01) values from a 64-bit LCG and Box-Muller: weights and gradients of a plausible scale. */
static void optim_fill(float *v, int64_t n, uint64_t *seed)
{
    for (int64_t i = 0; i < n; i += 2) {
        double u[2];
        for (int j = 0; j < 2; j++) {
            *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
            u[j] = ((double)(*seed >> 11) + 0.5) * (1.0 / 9007199254740992.0);
        }
        double r = 0.01 * sqrt(-2 * log(u[0]));
        v[i] = (float)(r * cos(6.283185307179586 * u[1]));
        if (i + 1 < n) v[i + 1] = (float)(r * sin(6.283185307179586 * u[1]));
    }
}

struct optim_result {
    int64_t arena;          /* floats a step runs over (padding included, as the core's step) */
    int n_state;
    bool segments;          /* the kernel works per tensor (GLIA_OPT_KERNEL_SEGMENTS): norm passes */
    double ms, bytes, bytes_norms, peak;  /* peak: bytes a second, 0 unknown */
    char kernel[160];
};

/* A device tensor of n floats holding host (NULL: zeros). */
static glia_status optim_tensor(struct glia_backend *b, enum glia_dtype dt, int64_t n, const void *host, size_t nbytes,
                                struct glia_tensor **t)
{
    struct glia_shape s = glia_shape_make(1, (int64_t[]){n});
    glia_status st = glia_tensor_zeros(b, dt, &s, t);
    if (!st && host) st = glia_tensor_from_host(*t, host, nbytes);
    return st;
}

static glia_status optim_time(struct glia_optimizer *o, struct glia_opt_step *s, long n, int64_t *step, double *sec)
{
    glia_status st = glia_backend_sync(s->backend);
    double t0 = now_s();
    for (long i = 0; i < n && !st; i++) {
        s->step = ++*step;
        st = o->kernel->step(o, s);
    }
    if (!st) st = glia_backend_sync(s->backend);
    *sec = now_s() - t0;
    return st;
}

static glia_status optim_measure(struct glia_context *ctx, const struct optim_args *a, struct optim_result *r)
{
    struct glia_backend *b;
    struct glia_optimizer *o = NULL;
    struct glia_tensor *tw = NULL, *tg = NULL, *tseg = NULL, *ts[GLIA_OPTIMIZER_MAX_STATE] = {NULL};
    int64_t k = a->tensors, *size = calloc((size_t)k, sizeof *size), *seg = calloc(2 * (size_t)k, sizeof *seg);
    float *host = NULL;
    glia_status st = size && seg ? GLIA_OK : GLIA_ENOMEM;
    if (!st) st = glia_layer_run_backend_open(ctx, a->dev, &b);
    if (!st) st = glia_optimizer_new_for(ctx, a->name, a->ini, a->dev.type, &o);
    if (!st) {
        optim_sizes(a->params, k, size);
        r->arena = optim_layout(size, k, seg);
        r->n_state = o->type->n_state;
        r->segments = o->kernel->struct_size >= offsetof(struct glia_optimizer_kernel, flags) + sizeof o->kernel->flags &&
                      (o->kernel->flags & GLIA_OPT_KERNEL_SEGMENTS);
        snprintf(r->kernel, sizeof r->kernel, "%s", o->kernel->doc ? o->kernel->doc : "");
        if (!(host = calloc((size_t)r->arena, sizeof *host))) st = GLIA_ENOMEM;
    }
    size_t nb = sizeof(float) * (size_t)r->arena;
    uint64_t seed = 2026;
    /* weights and gradients in the tensors, padding zero (as the core's arena) */
    for (int i = 0; i < 2 && !st; i++) {
        for (int64_t t = 0; t < k; t++) optim_fill(host + seg[2 * t], size[t], &seed);
        st = optim_tensor(b, GLIA_F32, r->arena, host, nb, i ? &tg : &tw);
    }
    for (int j = 0; j < r->n_state && !st; j++) st = optim_tensor(b, GLIA_F32, r->arena, NULL, 0, &ts[j]);
    if (!st && a->dev.type != GLIA_DEVICE_CPU)
        st = optim_tensor(b, GLIA_I64, 2 * k, seg, sizeof *seg * 2 * (size_t)k, &tseg);
    float *state[GLIA_OPTIMIZER_MAX_STATE] = {NULL};
    for (int j = 0; j < r->n_state && !st; j++) state[j] = ts[j]->data;
    if (!st) {
        /* no decay mask: every tensor decays, as the core steps a model whose parameters all keep decay on */
        struct glia_opt_step s = {tw->data, tg->data, state, (size_t)r->arena, NULL, 1e-3, 0, b, NULL, NULL, (int)k, seg,
                                  tseg ? tseg->data : NULL};
        int64_t step = 0;
        double sec;
        if (a->warmup) st = optim_time(o, &s, a->warmup, &step, &sec);
        if (!st) st = optim_time(o, &s, a->steps, &step, &sec);
        r->ms = 1e3 * sec / (double)a->steps;
    }
    r->bytes = (3.0 + 2.0 * r->n_state) * 4.0 * (double)r->arena;
    r->bytes_norms = r->segments ? r->bytes + 2.0 * 4.0 * (double)r->arena : 0;
    struct glia_device_peak pk = {.struct_size = sizeof pk};
    r->peak = !st && glia_backend_peak(b, &pk) == GLIA_OK ? pk.bandwidth : 0;
    for (int j = 0; j < GLIA_OPTIMIZER_MAX_STATE; j++) glia_tensor_release(ts[j]);
    glia_tensor_release(tw), glia_tensor_release(tg), glia_tensor_release(tseg);
    glia_optimizer_free(o);
    free(host), free(size), free(seg);
    return st;
}

static void print_optim(const struct optim_args *a, const struct optim_result *r)
{
    char dev[32];
    glia_device_str(a->dev, dev, sizeof dev);
    double s = r->ms * 1e-3, gb = r->ms > 0 ? r->bytes / s * 1e-9 : 0, gbn = r->ms > 0 ? r->bytes_norms / s * 1e-9 : 0;
    if (a->json) {
        printf("{\"bench\": \"optim\", \"optimizer\": \"%s\", \"device\": \"%s\", \"params\": %ld, \"tensors\": %ld, "
               "\"arena\": %lld, \"state_arrays\": %d, \"per_tensor\": %s, \"steps\": %ld, \"warmup\": %ld, ",
               a->name, dev, a->params, a->tensors, (long long)r->arena, r->n_state, r->segments ? "true" : "false",
               a->steps, a->warmup);
        if (r->peak > 0) printf("\"peak_gbps\": %.6g}\n", r->peak * 1e-9);
        else printf("\"peak_gbps\": null}\n");
        printf("{\"pass\": \"step\", \"ms\": %.6g, \"bytes\": %.0f, \"gbps\": %.6g, ", r->ms, r->bytes, gb);
        if (r->peak > 0) printf("\"peak_fraction\": %.4g, ", gb * 1e9 / r->peak);
        else printf("\"peak_fraction\": null, ");
        if (r->segments) printf("\"bytes_norms\": %.0f, \"gbps_norms\": %.6g", r->bytes_norms, gbn);
        else printf("\"bytes_norms\": null, \"gbps_norms\": null");
        if (r->segments && r->peak > 0) printf(", \"peak_fraction_norms\": %.4g}\n", gbn * 1e9 / r->peak);
        else printf(", \"peak_fraction_norms\": null}\n");
        return;
    }
    printf("optimizer %s (%s) on %s: %ld parameters in %ld tensors, arena %lld floats (aligned as the core's), "
           "state arrays: %d\n", a->name, r->kernel, dev, a->params, a->tensors, (long long)r->arena, r->n_state);
    printf("ms per step: mean of %ld steps after %ld warm-up steps, device synchronized before and after\n", a->steps,
           a->warmup);
    printf("bytes: (3 + 2 x %d state) x 4 per arena float (read w, g, state; write w, state; no decay mask)%s\n",
           r->n_state, r->segments ? "; +norms: one more read of w and g (its per-tensor norm pass)" : "");
    printf("\n%-8s %10s %10s %10s %10s\n", "bytes", "MB", "ms/step", "GB/s", "of peak");
    for (int p = 0; p < (r->segments ? 2 : 1); p++) {
        double by = p ? r->bytes_norms : r->bytes, g = p ? gbn : gb;
        printf("%-8s %10.4g %10.4g %10.4g ", p ? "+norms" : "one-pass", by * 1e-6, r->ms, g);
        if (r->peak > 0) printf("%9.1f%%\n", 100 * g * 1e9 / r->peak);
        else printf("%10s\n", "-");
    }
}

static int bench_optim(int argc, char **argv)
{
    struct optim_args a;
    int rc = parse_optim_args(argc, argv, &a);
    if (rc) return rc;
    struct glia_context *ctx;
    if (glia_context_new(&ctx)) return fprintf(stderr, "glia bench optim: out of memory\n"), 1;
    struct optim_result r = {0};
    glia_status st = optim_measure(ctx, &a, &r);
    if (st) {
        const char *why = glia_context_error(ctx);
        fprintf(stderr, "glia bench optim: %s\n", why && *why ? why : glia_strerror(st));
    } else {
        print_optim(&a, &r);
    }
    glia_context_free(ctx);
    return st ? 1 : 0;
}

int glia__bench_main(int argc, char **argv)
{
    if (argc < 1) {
        fprintf(stderr, "glia bench: which benchmark?\nusage:\n" GLIA__BENCH_USAGE);
        return 2;
    }
    if (!strcmp(argv[0], "conv")) return bench_conv(argc, argv);
    if (!strcmp(argv[0], "layer")) return bench_layer(argc, argv);
    if (!strcmp(argv[0], "optim")) return bench_optim(argc, argv);
    fprintf(stderr, "glia bench: unknown benchmark '%s' (known: conv, layer, optim)\nusage:\n" GLIA__BENCH_USAGE, argv[0]);
    return 2;
}
