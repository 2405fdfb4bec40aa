/* tests/fuzz/fuzz_config.c — libFuzzer harness of model files: the INI reader (from a string and
 * from a file), --set assignments, and building the model (on the CPU, without training).
 * Not a check of what a model computes: an input passes when it builds or fails with an error.
 *
 * Input: INI text, then optionally a NUL and NUL-separated --set assignments ("train.lr=0.1").
 * The harness's folder holds small data sets the text may name by relative path: train-images,
 * train-labels, test-images, test-labels (IDX, 28 x 28, 4 samples, 3 classes) and train-tokens,
 * test-tokens (a token file for vocab >= 10). A text without a [data] section gets the IDX set
 * (as --set would), so that inputs of layer sections alone reach the layers. */
#include "internal.h"
#include "fuzzutil.h"

#define MAX_SETS 8

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_write_idx("train-images", "train-labels", 4, 28, 28, 3);
    fuzz_write_idx("test-images", "test-labels", 4, 28, 28, 3);
    static const char tokens[] = "0 1 2 3\n1 4 5\n2 6 7 8 9\n0 9\n";
    fuzz_write(fuzz_path("train-tokens"), tokens, sizeof tokens - 1, 0);
    fuzz_write(fuzz_path("test-tokens"), tokens, sizeof tokens - 1, 0);
    return 0;
}

/* A failure (other than out of memory) must leave its message. */
static void check_message(struct glia_context *ctx, glia_status st, const char *what)
{
    if (st && st != GLIA_ENOMEM && !*glia_context_error(ctx)) fuzz_die(what, glia_strerror(st));
}

/* Builds cfg's model on the CPU (one OpenMP thread: runtime.threads is process-wide state that
 * would carry over to later inputs); any failure must leave an error message. */
static void build(struct glia_context *ctx, struct glia_config *cfg)
{
    if (glia_config_set(cfg, "runtime.device=cpu") != GLIA_OK) return;
    if (glia_config_set(cfg, "runtime.threads=1") != GLIA_OK) return;
    static const char *const data[] = {"train_images", "train-images", "train_labels", "train-labels",
                                       "test_images", "test-images", "test_labels", "test-labels"};
    bool no_data = !glia__config_find(cfg, "data");
    for (size_t i = 0; i < 8 && no_data; i += 2) {
        char a[600];
        snprintf(a, sizeof a, "data.%s=%s", data[i], fuzz_path(data[i + 1]));
        if (glia_config_set(cfg, a) != GLIA_OK) return;
    }
    struct glia_model *m = NULL;
    glia_context_clear_error(ctx);
    glia_status st = glia_model_build(ctx, cfg, &m);
    fuzz_say(st ? "build failed" : "built", st ? glia_context_error(ctx) : NULL);
    check_message(ctx, st, "a failed build without its message");
    if (st == GLIA_OK) {
        FILE *null = fopen("/dev/null", "w");
        if (null) glia_model_summary(m, null), fclose(null);
        (void)glia_model_param_count(m);
        glia_model_free(m);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct glia_context *ctx;
    if (glia_context_new(&ctx) != GLIA_OK) fuzz_die("glia_context_new failed", NULL);
    glia_log_set(ctx, NULL, GLIA_LOG_ERROR);
    /* the same bytes from a file: NUL bytes and long lines reach the reader */
    struct glia_config *cfg = NULL;
    glia_status st = glia_config_load(ctx, fuzz_write(fuzz_path("file.ini"), data, size, 0), &cfg);
    check_message(ctx, st, "a refused file without its message");
    glia_config_free(cfg);
    glia_context_clear_error(ctx);
    /* the text up to the first NUL as a string, then the assignments */
    char *text = malloc(size + 1);
    if (!text) fuzz_die("out of memory", NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    size_t len = strlen(text);
    st = glia_config_parse_string(ctx, fuzz_path("fuzz.ini"), text, &cfg);
    for (size_t at = len + 1, k = 0; st == GLIA_OK && at < size && k < MAX_SETS; k++) {
        const char *a = text + at;
        st = glia_config_set(cfg, a);
        at += strlen(a) + 1;
    }
    check_message(ctx, st, "a refused text or --set without its message");
    if (st == GLIA_OK) build(ctx, cfg);
    else fuzz_say("refused", glia_context_error(ctx));
    glia_config_free(cfg);
    free(text);
    glia_context_free(ctx);
    return 0;
}
