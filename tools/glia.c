/* tools/glia.c — the glia command-line program: train, eval, sample, profile, check, plugins, plot, bench.
 * Not library code: this is the only place that decides exit codes and calls exit(). */
#include <glia/glia.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench.h"
#include "plot.h"
#include "sample.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: glia train MODEL.ini [--set SECTION.KEY=VALUE]... [--metrics FILE] [--resume CKPT] [--quiet]\n"
            "       glia eval MODEL.ini [--checkpoint CKPT] [--set SECTION.KEY=VALUE]...\n"
            "       glia export MODEL.ini --checkpoint CKPT -o FILE.safetensors [--dtype f32|bf16|f16]\n"
            "                   [--set SECTION.KEY=VALUE]...\n"
            "       glia sample MODEL.ini --checkpoint CKPT [--prompt TEXT] [--tokens N] [--temperature T]\n"
            "                   [--top-k K] [--seed S] [--no-cache] [--set SECTION.KEY=VALUE]...\n"
            "       glia profile MODEL.ini [--steps N] [--trace FILE.json] [--peak-gbs N] [--peak-tflops N]\n"
            "                    [--set SECTION.KEY=VALUE]...\n"
            "       glia check MODEL.ini [--set SECTION.KEY=VALUE]...\n"
            "       glia gradcheck MODEL.ini --layer NAME [--batch N] [--set SECTION.KEY=VALUE]...\n"
            "       glia plugins [MODEL.ini] [--describe NAME]   (NAME: plugin, layer type, optimizer, or\n"
            "                     runtime|data|train|plugins|graph|distributed|layer; MODEL.ini: its [plugins] too)\n"
            "       glia plot METRICS.jsonl [-o OUT.svg]\n"
            GLIA__BENCH_USAGE
            "       glia --version\n");
}

static int fail(struct glia_context *ctx, glia_status st)
{
    const char *msg = glia_context_error(ctx);
    fprintf(stderr, "glia: %s\n", msg && *msg ? msg : glia_strerror(st));
    return 1;
}

struct args {
    const char *model, *metrics, *describe, *resume, *checkpoint, *steps, *trace, *peak_gbs, *peak_tflops;
    const char *prompt, *tokens, *temperature, *top_k, *seed;  /* glia sample */
    const char *output, *dtype;                                /* glia export */
    const char *layer, *batch;                                 /* glia gradcheck */
    const char *sets[256];
    int n_sets, quiet, no_cache;
};

static int parse_args(int argc, char **argv, int first, struct args *a)
{
    for (int i = first; i < argc; i++) {
        const char *s = argv[i];
        if ((!strcmp(s, "--set") || !strcmp(s, "--metrics") || !strcmp(s, "--describe") || !strcmp(s, "--resume") ||
             !strcmp(s, "--checkpoint") || !strcmp(s, "--steps") || !strcmp(s, "--trace") || !strcmp(s, "--peak-gbs") ||
             !strcmp(s, "--peak-tflops") || !strcmp(s, "--prompt") || !strcmp(s, "--tokens") ||
             !strcmp(s, "--temperature") || !strcmp(s, "--top-k") || !strcmp(s, "--seed") || !strcmp(s, "-o") ||
             !strcmp(s, "--output") || !strcmp(s, "--dtype") || !strcmp(s, "--layer") || !strcmp(s, "--batch")) &&
            i + 1 >= argc) {
            fprintf(stderr, "glia: %s needs a value\n", s);
            return 2;
        }
        if (!strcmp(s, "--set")) {
            if (a->n_sets == 256) {
                fprintf(stderr, "glia: too many --set options\n");
                return 2;
            }
            a->sets[a->n_sets++] = argv[++i];
        } else if (!strncmp(s, "--set=", 6)) {
            if (a->n_sets < 256) a->sets[a->n_sets++] = s + 6;
        } else if (!strcmp(s, "--steps")) {
            a->steps = argv[++i];
        } else if (!strcmp(s, "--trace")) {
            a->trace = argv[++i];
        } else if (!strcmp(s, "--peak-gbs")) {
            a->peak_gbs = argv[++i];
        } else if (!strcmp(s, "--peak-tflops")) {
            a->peak_tflops = argv[++i];
        } else if (!strcmp(s, "--prompt")) {
            a->prompt = argv[++i];
        } else if (!strcmp(s, "--tokens")) {
            a->tokens = argv[++i];
        } else if (!strcmp(s, "--temperature")) {
            a->temperature = argv[++i];
        } else if (!strcmp(s, "--top-k")) {
            a->top_k = argv[++i];
        } else if (!strcmp(s, "--seed")) {
            a->seed = argv[++i];
        } else if (!strcmp(s, "--resume")) {
            a->resume = argv[++i];
        } else if (!strcmp(s, "--checkpoint")) {
            a->checkpoint = argv[++i];
        } else if (!strcmp(s, "--metrics")) {
            a->metrics = argv[++i];
        } else if (!strcmp(s, "--describe")) {
            a->describe = argv[++i];
        } else if (!strcmp(s, "-o") || !strcmp(s, "--output")) {
            a->output = argv[++i];
        } else if (!strcmp(s, "--layer")) {
            a->layer = argv[++i];
        } else if (!strcmp(s, "--batch")) {
            a->batch = argv[++i];
        } else if (!strcmp(s, "--dtype")) {
            a->dtype = argv[++i];
        } else if (!strcmp(s, "--no-cache")) {
            a->no_cache = 1;
        } else if (!strcmp(s, "--quiet") || !strcmp(s, "-q")) {
            a->quiet = 1;
        } else if (s[0] == '-') {
            fprintf(stderr, "glia: unknown option %s\n", s);
            return 2;
        } else if (!a->model) {
            a->model = s;
        } else {
            fprintf(stderr, "glia: unexpected argument %s\n", s);
            return 2;
        }
    }
    return 0;
}

/* The first option given that command cmd does not take (NULL: none, or cmd is unknown). */
static const char *refused_option(const char *cmd, const struct args *a)
{
    enum { SET = 1, METRICS = 2, RESUME = 4, QUIET = 8, CHECKPOINT = 16, STEPS = 32, TRACE = 64, DESCRIBE = 128, PEAK = 256,
           SAMPLE = 512, EXPORT = 1024, GRADCHECK = 2048 };
    static const struct {
        const char *cmd;
        unsigned takes;
    } table[] = {
        {"train", SET | METRICS | RESUME | QUIET}, {"check", SET}, {"eval", SET | CHECKPOINT},
        {"profile", SET | STEPS | TRACE | PEAK},   {"plugins", DESCRIBE}, {"sample", SET | CHECKPOINT | SAMPLE},
        {"export", SET | CHECKPOINT | EXPORT},     {"gradcheck", SET | GRADCHECK},
    };
    const struct {
        const char *name;
        unsigned bit;
        bool given;
    } given[] = {
        {"--set", SET, a->n_sets > 0},        {"--metrics", METRICS, a->metrics != NULL},
        {"--resume", RESUME, a->resume != NULL}, {"--quiet", QUIET, a->quiet != 0},
        {"--checkpoint", CHECKPOINT, a->checkpoint != NULL}, {"--steps", STEPS, a->steps != NULL},
        {"--trace", TRACE, a->trace != NULL}, {"--describe", DESCRIBE, a->describe != NULL},
        {"--peak-gbs", PEAK, a->peak_gbs != NULL}, {"--peak-tflops", PEAK, a->peak_tflops != NULL},
        {"--prompt", SAMPLE, a->prompt != NULL}, {"--tokens", SAMPLE, a->tokens != NULL},
        {"--temperature", SAMPLE, a->temperature != NULL}, {"--top-k", SAMPLE, a->top_k != NULL},
        {"--seed", SAMPLE, a->seed != NULL}, {"--no-cache", SAMPLE, a->no_cache != 0},
        {"-o", EXPORT, a->output != NULL}, {"--dtype", EXPORT, a->dtype != NULL},
        {"--layer", GRADCHECK, a->layer != NULL}, {"--batch", GRADCHECK, a->batch != NULL},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(cmd, table[i].cmd)) continue;
        for (size_t k = 0; k < sizeof given / sizeof given[0]; k++)
            if (given[k].given && !(table[i].takes & given[k].bit)) return given[k].name;
    }
    return NULL;
}

/* The model file with the --set options applied. */
static int load_config(struct glia_context *ctx, const struct args *a, struct glia_config **cfg)
{
    glia_status st = glia_config_load(ctx, a->model, cfg);
    for (int i = 0; i < a->n_sets && !st; i++) st = glia_config_set(*cfg, a->sets[i]);
    return st ? fail(ctx, st) : 0;
}

static int load_model(struct glia_context *ctx, const struct args *a, struct glia_config **cfg,
                      struct glia_model **m)
{
    int rc = load_config(ctx, a, cfg);
    glia_status st = rc ? GLIA_OK : glia_model_build(ctx, *cfg, m);
    return rc ? rc : st ? fail(ctx, st) : 0;
}

/* ---- stopping cleanly on SIGINT / SIGTERM ----
 * The first signal asks training to stop at the next optimizer step, write that step's checkpoint
 * and exit with 128 + the signal's number; a second one ends the program at once. Under ddp the
 * ranks agree on the stop and on the signal (the largest number wins), so every rank exits with
 * the same status, the signalled one and the others alike. */
static struct glia_model *volatile stop_model;
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    if (stop_signal) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_signal = sig;
    if (stop_model) glia_model_request_stop_code(stop_model, sig);
    static const char msg[] = "\nglia: stopping after this step (a checkpoint is written where checkpoint_dir is set); "
                              "send the signal again to quit at once\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
}

static void catch_stop_signals(struct glia_model *m)
{
    stop_model = m;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static int cmd_train(struct glia_context *ctx, const struct args *a, int check_only)
{
    if (!a->model) {
        usage(stderr);
        return 2;
    }
    struct glia_config *cfg = NULL;
    struct glia_model *m = NULL;
    int rc = load_model(ctx, a, &cfg, &m);
    if (!rc) {
        bool lead = glia_model_rank(m, NULL) == 0;  /* ddp: rank 0 speaks for the job */
        if (check_only) {
            if (lead) glia_model_summary(m, stdout);
        } else {
            if (!a->quiet && lead) glia_model_summary(m, stdout);
            struct glia_train_options o = {sizeof(struct glia_train_options), a->metrics, a->quiet ? -1 : isatty(STDOUT_FILENO) ? 1 : 0, stdout, a->resume};
            catch_stop_signals(m);
            glia_status st = glia_model_train(m, &o, NULL, 0);
            if (st) rc = fail(ctx, st);
            if (st == GLIA_EINTERRUPTED && glia_model_stop_code(m)) rc = 128 + glia_model_stop_code(m);  /* every rank alike */
        }
    }
    glia_model_free(m);
    glia_config_free(cfg);
    return rc;
}

/* Whether the model file (with the --set options) names [train] init_from. */
static bool has_init_from(struct glia_config *cfg) { return glia_config_value(cfg, "train", "init_from") != NULL; }

static int cmd_eval(struct glia_context *ctx, const struct args *a)
{
    if (!a->model) {
        fprintf(stderr, "glia: eval needs MODEL.ini and --checkpoint FILE (or [train] init_from)\n");
        return 2;
    }
    struct glia_config *cfg = NULL;
    struct glia_model *m = NULL;
    int rc = load_config(ctx, a, &cfg);
    if (!rc && !a->checkpoint && !has_init_from(cfg)) {
        fprintf(stderr, "glia: eval needs --checkpoint FILE, or weights from [train] init_from\n");
        rc = 2;
    }
    glia_status bs = rc ? GLIA_OK : glia_model_build(ctx, cfg, &m);
    if (bs) rc = fail(ctx, bs);
    if (!rc) {
        double loss, acc;
        glia_status st = a->checkpoint ? glia_model_load_checkpoint(m, a->checkpoint) : GLIA_OK;
        if (!st) st = glia_model_evaluate(m, &loss, &acc);
        const char *from = a->checkpoint ? a->checkpoint : glia_config_value(cfg, "train", "init_from");
        if (st) rc = fail(ctx, st);
        else if (glia_model_rank(m, NULL) == 0 && isnan(acc))  /* a language model: no accuracy */
            printf("val_loss %.4f perplexity %.4g (%s)\n", loss, exp(loss), from);
        else if (glia_model_rank(m, NULL) == 0) printf("test_loss %.4f test_accuracy %.4f (%s)\n", loss, acc, from);
    }
    glia_model_free(m);
    glia_config_free(cfg);
    return rc;
}

/* A whole number in [lo, hi] from option opt's text s (NULL: def); -1 with a message when it is not one. */
static long long whole(const char *opt, const char *s, long long def, long long lo, long long hi)
{
    if (!s) return def;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end != s && !*end && v >= lo && v <= hi) return v;
    fprintf(stderr, "glia: %s takes a whole number from %lld to %lld, not '%s'\n", opt, lo, hi, s);
    return -1;
}

static int cmd_sample(struct glia_context *ctx, const struct args *a)
{
    if (!a->model || !a->checkpoint) {
        fprintf(stderr, "glia: sample needs MODEL.ini and --checkpoint FILE\n");
        return 2;
    }
    struct glia__sample_options o = {a->prompt, whole("--tokens", a->tokens, 256, 0, 1 << 24), 1.0,
                                     whole("--top-k", a->top_k, 0, 0, 1 << 30), 0, a->no_cache != 0};
    long long seed = whole("--seed", a->seed, 1337, 0, 0x7fffffffffffffffll);
    char *end = NULL;
    if (a->temperature) o.temperature = strtod(a->temperature, &end);
    if (a->temperature && (end == a->temperature || *end || !(o.temperature >= 0) || !isfinite(o.temperature))) {
        fprintf(stderr, "glia: --temperature takes a number >= 0 (0: always the most likely token), not '%s'\n",
                a->temperature);
        return 2;
    }
    if (o.tokens < 0 || o.top_k < 0 || seed < 0) return 2;
    o.seed = (uint64_t)seed;
    struct glia_config *cfg = NULL;
    struct glia_model *m = NULL;
    int rc = load_model(ctx, a, &cfg, &m);
    struct glia_model_io io;
    if (!rc && !glia__sample_can(m, a->model, &io)) rc = 2;
    if (!rc) {
        glia_status st = glia_model_load_checkpoint(m, a->checkpoint);
        rc = st ? fail(ctx, st) : glia__sample(ctx, m, &o, stdout);
    }
    glia_model_free(m);
    glia_config_free(cfg);
    return rc;
}

static int cmd_export(struct glia_context *ctx, const struct args *a)
{
    if (!a->model || !a->checkpoint || !a->output) {
        fprintf(stderr, "glia: export needs MODEL.ini, --checkpoint CKPT and -o FILE.safetensors\n");
        return 2;
    }
    enum glia_dtype dt = GLIA_F32;
    if (a->dtype && !strcmp(a->dtype, "bf16")) dt = GLIA_BF16;
    else if (a->dtype && !strcmp(a->dtype, "f16")) dt = GLIA_F16;
    else if (a->dtype && strcmp(a->dtype, "f32")) {
        fprintf(stderr, "glia: --dtype takes f32, bf16 or f16, not '%s'\n", a->dtype);
        return 2;
    }
    struct glia_config *cfg = NULL;
    struct glia_model *m = NULL;
    int rc = load_model(ctx, a, &cfg, &m);
    if (!rc) {
        glia_status st = glia_model_load_checkpoint(m, a->checkpoint);
        if (!st) st = glia_model_export_safetensors(m, a->output, dt);
        if (st) rc = fail(ctx, st);
        else printf("%s: %lld parameters from %s\n", a->output, glia_model_param_count(m), a->checkpoint);
    }
    glia_model_free(m);
    glia_config_free(cfg);
    return rc;
}

/* The gradient checker on one layer of the model, at its shapes: exit status 0 when within tolerance, 1 when not. */
static int cmd_gradcheck(struct glia_context *ctx, const struct args *a)
{
    if (!a->model || !a->layer) {
        fprintf(stderr, "glia: gradcheck needs MODEL.ini and --layer NAME\n");
        return 2;
    }
    long long batch = whole("--batch", a->batch, 2, 1, 1 << 20);
    if (batch < 1) return 2;
    struct glia_config *cfg = NULL;
    struct glia_model *m = NULL;
    int rc = load_model(ctx, a, &cfg, &m);
    if (!rc) {
        const double tol = 1e-2;
        struct glia_gradcheck_report r;
        glia_status st = glia_model_gradcheck_layer(m, a->layer, batch, 1234, tol, &r);
        if (st && st != GLIA_ENUMERIC) {
            rc = fail(ctx, st);
        } else {
            printf("[%s] at batch %lld: %d gradient elements checked against central differences, %d skipped (kinks), "
                   "largest relative error %.3g at %s (tolerance %g): %s\n", a->layer, batch, r.n_checked, r.n_skipped,
                   r.max_err, r.worst[0] ? r.worst : "-", tol, st ? "FAILED" : "ok");
            if (st) fprintf(stderr, "glia: %s\n", glia_context_error(ctx));
            rc = st ? 1 : 0;
        }
    }
    glia_model_free(m);
    glia_config_free(cfg);
    return rc;
}

static int cmd_profile(struct glia_context *ctx, const struct args *a)
{
    char *end = NULL;
    long steps = a->steps ? strtol(a->steps, &end, 10) : 50;
    if (!a->model || (a->steps && (*end || steps < 1 || steps > 1000000))) {
        fprintf(stderr, "glia: profile needs MODEL.ini and an optional --steps N (1..1000000)\n");
        return 2;
    }
    double peak[2] = {0, 0};  /* GB/s, TFLOP/s */
    const char *peak_arg[2] = {a->peak_gbs, a->peak_tflops}, *peak_opt[2] = {"--peak-gbs", "--peak-tflops"};
    for (int k = 0; k < 2; k++) {
        if (!peak_arg[k]) continue;
        peak[k] = strtod(peak_arg[k], &end);
        if (end == peak_arg[k] || *end || !(peak[k] > 0) || !isfinite(peak[k])) {
            fprintf(stderr, "glia: %s takes a positive number, not '%s'\n", peak_opt[k], peak_arg[k]);
            return 2;
        }
    }
    struct glia_config *cfg = NULL;
    struct glia_model *m = NULL;
    int rc = load_model(ctx, a, &cfg, &m);
    if (!rc) {
        FILE *out = glia_model_rank(m, NULL) == 0 ? stdout : fopen("/dev/null", "w");
        struct glia_profile_options o = {sizeof o, (int)steps, 5, a->trace, peak[0] * 1e9, peak[1] * 1e12};
        glia_status st = out ? glia_model_profile_with(m, &o, out) : GLIA_EIO;
        if (out && out != stdout) fclose(out);
        if (st) rc = fail(ctx, st);
    }
    glia_model_free(m);
    glia_config_free(cfg);
    return rc;
}

/* glia plugins [MODEL.ini] [--describe NAME]: loads every plugin in the search path (what was
 * asked for), with a model file's [plugins] path folders first and its load plugins. */
static int cmd_plugins(struct glia_context *ctx, const struct args *a)
{
    if (a->model) {
        struct glia_config *cfg = NULL;
        glia_status st = glia_config_load(ctx, a->model, &cfg);
        if (!st) st = glia_config_load_plugins(ctx, cfg);
        glia_config_free(cfg);
        if (st) return fail(ctx, st);
    }
    glia_plugin_load_all(ctx);
    if (a->describe) {
        const struct glia_key *k = glia_config_schema(a->describe);
        if (k) {
            printf("[%s] keys (core)\n", !strcmp(a->describe, "layer") ? "<layer name>" : a->describe);
            glia_keys_print(stdout, k);
            return 0;
        }
    }
    glia_status st = glia_plugin_print(ctx, stdout, a->describe);
    return st ? fail(ctx, st) : 0;
}

/* glia plot FILE.jsonl [-o OUT.svg]: needs no context and no plugins. */
static int cmd_plot(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    for (int i = 2; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-o") || !strcmp(s, "--output")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "glia: %s needs a value\n", s);
                return 2;
            }
            out = argv[++i];
        } else if (s[0] == '-' && s[1]) {
            fprintf(stderr, "glia: unknown option %s\n", s);
            return 2;
        } else if (!in) {
            in = s;
        } else {
            fprintf(stderr, "glia: unexpected argument %s\n", s);
            return 2;
        }
    }
    if (!in) {
        usage(stderr);
        return 2;
    }
    char name[4096], err[8192];
    if (!out) {
        if (glia_plot_output_name(in, name, sizeof name)) {
            fprintf(stderr, "glia: %s: file name too long\n", in);
            return 2;
        }
        out = name;
    }
    if (glia_plot(in, out, err, sizeof err)) {
        fprintf(stderr, "glia: %s\n", err);
        return 1;
    }
    printf("wrote %s\n", out);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("glia %s (plugin ABI %d.%d)\n", GLIA_VERSION_STRING, GLIA_ABI_MAJOR, GLIA_ABI_MINOR);
        return 0;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "plot")) return cmd_plot(argc, argv);
    if (!strcmp(cmd, "bench")) return glia__bench_main(argc - 2, argv + 2);
    struct args a = {0};
    int rc = parse_args(argc, argv, 2, &a);
    if (rc) return rc;
    const char *bad = refused_option(cmd, &a);
    if (bad) {
        fprintf(stderr, "glia: %s is not an option of %s (see glia --help)\n", bad, cmd);
        return 2;
    }
    struct glia_context *ctx;
    if (glia_context_new(&ctx)) {
        fprintf(stderr, "glia: out of memory\n");
        return 1;
    }
    if (!strcmp(cmd, "train")) rc = cmd_train(ctx, &a, 0);
    else if (!strcmp(cmd, "check")) rc = cmd_train(ctx, &a, 1);
    else if (!strcmp(cmd, "eval")) rc = cmd_eval(ctx, &a);
    else if (!strcmp(cmd, "sample")) rc = cmd_sample(ctx, &a);
    else if (!strcmp(cmd, "export")) rc = cmd_export(ctx, &a);
    else if (!strcmp(cmd, "gradcheck")) rc = cmd_gradcheck(ctx, &a);
    else if (!strcmp(cmd, "profile")) rc = cmd_profile(ctx, &a);
    else if (!strcmp(cmd, "plugins")) rc = cmd_plugins(ctx, &a);
    else {
        fprintf(stderr, "glia: unknown command '%s'\n", cmd);
        usage(stderr);
        rc = 2;
    }
    /* An error on this rank of a job of several: the others may be waiting for it in a collective
     * (a data file only this rank lacks); end them all now rather than after [distributed]
     * timeout_s. Returns only when there is no such job or its transport cannot end it. */
    if (rc == 1) glia_comm_abort_job(ctx, rc);
    glia_context_free(ctx);
    return rc;
}
