/* tests/fuzz/fuzz_safetensors.c — libFuzzer harness of safetensors files: glia_model_load_safetensors against a small
 * fixed model (linear, batchnorm with its dropped bias and running statistics). Not a round-trip test
 * (test_safetensors.c has those): an input passes when it loads or fails with an error message.
 *
 * Input: the file. On start the harness exports the model's own weights at f32, bf16 and f16 as seeds. */
#include <glia/glia.h>
#include "fuzzutil.h"

static struct glia_context *ctx;
static struct glia_config *cfg;
static struct glia_model *model;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_write_idx("tri", "trl", 8, 4, 4, 3);
    fuzz_write_idx("tei", "tel", 4, 4, 4, 3);
    if (glia_context_new(&ctx)) fuzz_die("glia_context_new failed", NULL);
    glia_log_set(ctx, NULL, GLIA_LOG_ERROR);
    static const char text[] =
        "[runtime]\ndevice = cpu\nthreads = 1\nseed = 5\n"
        "[data]\ntrain_images = tri\ntrain_labels = trl\ntest_images = tei\ntest_labels = tel\n"
        "batch_size = 4\ntest_batch_size = 4\nworkers = 0\n"
        "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 3\n[bn]\ntype = batchnorm\n"
        "[act]\ntype = relu\n[fc2]\ntype = linear\noutputs = 3\n[loss]\ntype = softmax_cross_entropy\n";
    if (glia_config_parse_string(ctx, fuzz_path("model.ini"), text, &cfg) || glia_model_build(ctx, cfg, &model))
        fuzz_die("cannot build the model", glia_context_error(ctx));
    const enum glia_dtype dts[3] = {GLIA_F32, GLIA_BF16, GLIA_F16};
    const char *names[3] = {"f32", "bf16", "f16"};
    for (int k = 0; k < 3; k++) {
        if (glia_model_export_safetensors(model, fuzz_path("seed.safetensors"), dts[k]))
            fuzz_die("cannot export the seed", glia_context_error(ctx));
        size_t n;
        uint8_t *b = fuzz_slurp(fuzz_path("seed.safetensors"), &n);
        if (!b) fuzz_die("no seed file", NULL);
        fuzz_seed(names[k], b, n);
        free(b);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write(fuzz_path("in.safetensors"), data, size, 0);
    glia_context_clear_error(ctx);
    glia_status st = glia_model_load_safetensors(model, path);
    fuzz_say(st ? "refused" : "loaded", st ? glia_context_error(ctx) : NULL);
    if (st && st != GLIA_ENOMEM && !*glia_context_error(ctx))
        fuzz_die("a failed load left no error message", glia_strerror(st));
    return 0;
}
