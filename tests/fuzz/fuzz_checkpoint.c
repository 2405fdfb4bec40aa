/* tests/fuzz/fuzz_checkpoint.c — libFuzzer harness of checkpoint files: glia_model_load_checkpoint
 * (eval) and glia_model_train's resume from one, against a small fixed model.
 * Not a round-trip test (test_train.c has those): an input passes when it loads or fails with an
 * error, and a resumed run ends.
 *
 * Input: a flag byte, then the checkpoint file. Flag bit 0: the harness rewrites the header's
 * payload size and CRCs to match the bytes given, so that mutations reach the payload's checks;
 * bit 1: resume training from it (else load it for evaluation). On start the harness trains the
 * model two optimizer steps and offers the checkpoint it writes (and the same as version 2 and
 * version 1 files) as seeds. */
#include <glia/glia.h>
#include "fuzzutil.h"

#define HEADER 40
#define META 104   /* the payload's fixed part before the loss-scaler record (version 2 on) */
#define SCALER 32

static struct glia_context *ctx;
static struct glia_config *cfg;
static struct glia_model *model;  /* for loading; a resumed run builds its own */
static char text[4096];

static void model_text(const char *extra)
{
    snprintf(text, sizeof text,
             "[runtime]\ndevice = cpu\nthreads = 1\nseed = 5\n"
             "[data]\ntrain_images = tri\ntrain_labels = trl\ntest_images = tei\ntest_labels = tel\n"
             "batch_size = 4\ntest_batch_size = 4\nworkers = 0\n"
             "[train]\nepochs = 2\noptimizer = adam\nlr = 0.01\n%s"
             "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 3\n[bn]\ntype = batchnorm\n"
             "[act]\ntype = relu\n[fc2]\ntype = linear\noutputs = 3\n[loss]\ntype = softmax_cross_entropy\n",
             extra);
}

static glia_status open_model(struct glia_config **c, struct glia_model **m)
{
    glia_status st = glia_config_parse_string(ctx, fuzz_path("model.ini"), text, c);
    if (!st) st = glia_model_build(ctx, *c, m);
    return st;
}

/* The payload size and CRC, and from version 3 on the header's CRC (versions 1 and 2: zero). */
static void fix_header(uint8_t *b, size_t n)
{
    uint64_t payload = n - HEADER;
    uint32_t crc = (uint32_t)crc32(0L, b + HEADER, (uInt)payload), version, hcrc = 0;
    memcpy(b + 16, &payload, 8);
    memcpy(b + 24, &crc, 4);
    memcpy(&version, b + 8, 4);
    if (version >= 3) hcrc = (uint32_t)crc32(crc32(0L, b, 28), b + 32, 8);
    memcpy(b + 28, &hcrc, 4);
}

/* Trains two steps with a checkpoint_dir and offers the checkpoint (and version 2 and 1 copies)
 * as seeds, each with the four flag values. */
static void make_seeds(void)
{
    char extra[700];
    snprintf(extra, sizeof extra, "max_steps = 2\ncheckpoint_dir = %s\n", fuzz_path("ck"));
    model_text(extra);
    struct glia_config *c;
    struct glia_model *m;
    struct glia_train_options quiet = {sizeof(struct glia_train_options), NULL, -1, NULL, NULL};
    if (open_model(&c, &m) || glia_model_train(m, &quiet, NULL, 0))
        fuzz_die("cannot train the seed model", glia_context_error(ctx));
    glia_model_free(m);
    glia_config_free(c);
    size_t n;
    uint8_t *ck = fuzz_slurp(fuzz_path("ck/step-00000002.ckpt"), &n);
    if (!ck || n < HEADER + META + SCALER) fuzz_die("no seed checkpoint", fuzz_path("ck/step-00000002.ckpt"));
    uint8_t *seed = malloc(n + 1), *v2 = malloc(n);
    if (!seed || !v2) fuzz_die("out of memory", NULL);
    /* version 2: no header CRC */
    memcpy(v2, ck, n);
    v2[8] = 2;
    fix_header(v2, n);
    /* version 1: no loss-scaler record either */
    size_t n1 = n - SCALER;
    uint8_t *v1 = malloc(n1);
    if (!v1) fuzz_die("out of memory", NULL);
    memcpy(v1, ck, HEADER + META);
    memcpy(v1 + HEADER + META, ck + HEADER + META + SCALER, n1 - HEADER - META);
    v1[8] = 1;
    fix_header(v1, n1);
    const char *names[3][4] = {{"v3-load", "v3-load-fix", "v3-resume", "v3-resume-fix"},
                               {"v2-load", "v2-load-fix", "v2-resume", "v2-resume-fix"},
                               {"v1-load", "v1-load-fix", "v1-resume", "v1-resume-fix"}};
    for (int flags = 0; flags < 4; flags++) {
        seed[0] = (uint8_t)flags;
        memcpy(seed + 1, ck, n);
        fuzz_seed(names[0][flags], seed, n + 1);
        memcpy(seed + 1, v2, n);
        fuzz_seed(names[1][flags], seed, n + 1);
        memcpy(seed + 1, v1, n1);
        fuzz_seed(names[2][flags], seed, n1 + 1);
    }
    free(seed);
    free(v2);
    free(v1);
    free(ck);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_write_idx("tri", "trl", 8, 4, 4, 3);
    fuzz_write_idx("tei", "tel", 4, 4, 4, 3);
    if (glia_context_new(&ctx)) fuzz_die("glia_context_new failed", NULL);
    glia_log_set(ctx, NULL, GLIA_LOG_ERROR);
    make_seeds();
    model_text("");
    if (open_model(&cfg, &model)) fuzz_die("cannot build the model", glia_context_error(ctx));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int flags = data[0];
    uint8_t *b = malloc(size);
    if (!b) fuzz_die("out of memory", NULL);
    memcpy(b, data + 1, size - 1);
    size_t n = size - 1;
    if ((flags & 1) && n >= HEADER) fix_header(b, n);
    const char *path = fuzz_write(fuzz_path("in.ckpt"), b, n, 0);
    free(b);
    glia_context_clear_error(ctx);
    glia_status st;
    if (flags & 2) {
        struct glia_config *c = NULL;
        struct glia_model *m = NULL;
        struct glia_train_options o = {sizeof(struct glia_train_options), NULL, -1, NULL, path};
        st = open_model(&c, &m);
        if (st) fuzz_die("cannot build the model", glia_context_error(ctx));
        st = glia_model_train(m, &o, NULL, 0);
        glia_model_free(m);
        glia_config_free(c);
    } else {
        st = glia_model_load_checkpoint(model, path);
    }
    fuzz_say(st ? "refused" : flags & 2 ? "resumed" : "loaded", st ? glia_context_error(ctx) : NULL);
    if (st && st != GLIA_ENOMEM && !*glia_context_error(ctx))
        fuzz_die("a failed load left no error message", glia_strerror(st));
    return 0;
}
