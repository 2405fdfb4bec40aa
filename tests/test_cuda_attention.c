/* tests/test_cuda_attention.c — the CUDA attention against the CPU kernel on a GPU, on fresh random qkv: causal or
 * not, 1 to 4 heads, T below, on and across the CPU kernel's tile, write and accumulate, train and eval, dropout (the
 * same probabilities dropped on both), the same bits from two runs, and a cached decode chunk by chunk (the kernel, and a GPT model's glia_model_decode). Exits 77 (skipped) without a usable GPU or
 * without the CUDA build. Not a test of the CPU semantics: test_attention. */
#include <dlfcn.h>
#include "cudautil.h"
#include "modelutil.h"

struct at_case {
    const char *ini;
    struct glia_shape in;
};

static const struct at_case cases[] = {
    {"[a]\ntype = attention\nheads = 1\n", {3, {2, 5, 12}}},
    {"[a]\ntype = attention\nheads = 2\n", {3, {2, 37, 24}}},
    {"[a]\ntype = attention\nheads = 2\ncausal = off\n", {3, {3, 37, 12}}},
    {"[a]\ntype = attention\nheads = 4\n", {3, {1, 64, 96}}},
    {"[a]\ntype = attention\nheads = 3\ncausal = off\n", {3, {2, 1, 9}}},
    {"[a]\ntype = attention\nheads = 2\ndropout = 0.5\n", {3, {2, 37, 24}}},
    {"[a]\ntype = attention\nheads = 1\ndropout = 0.2\ncausal = off\n", {3, {2, 33, 15}}},
};

static void test_attention(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int acc = 0; acc < 2; acc++) {
            struct cuda_case k = {.ini = cases[i].ini, .in = &cases[i].in, .n_in = 1, .accumulate = acc,
                                  .seed = 31 + 2 * (uint64_t)i + (uint64_t)acc};
            cuda_expect(&k, 1e-4);
        }
        struct cuda_case k = {.ini = cases[i].ini, .in = &cases[i].in, .n_in = 1, .eval = true, .seed = 9 + i};
        cuda_expect(&k, 1e-4);
    }
}

/* TF32 GEMMs: within TF32's rounding of the CPU's f32 */
static void test_attention_tf32(void)
{
    struct cuda_case k = {.ini = cases[3].ini, .in = &cases[3].in, .n_in = 1, .precision = GLIA_PRECISION_TF32,
                          .seed = 5};
    cuda_expect(&k, cuda_tol(GLIA_PRECISION_TF32));
}

static void test_attention_repeatable(void)
{
    cuda_repeatable(NULL, cases[1].ini, cases[1].in, GLIA_CONTIGUOUS);
    cuda_repeatable(NULL, cases[5].ini, cases[5].in, GLIA_CONTIGUOUS);
}

/* bf16 and f16 activations. Causal, no dropout, head dims a multiple of 8: cuDNN's fused flash attention (its first
 * run of each shape checked against the f32 kernels inside the layer; here against the CPU), with no notice that it
 * was refused or disagreed. Otherwise (head dim 4, causal = off, dropout) the f32 kernels between conversions: the
 * CPU's results within an ulp or two. Write and accumulate, train and eval. */
static void test_attention_half(void)
{
    static const struct at_case fused[] = {
        {"[a]\ntype = attention\nheads = 2\n", {3, {2, 37, 96}}},   /* D 16 */
        {"[a]\ntype = attention\nheads = 1\n", {3, {1, 64, 192}}},  /* D 64, GPT-2's */
        {"[a]\ntype = attention\nheads = 2\n", {3, {5, 37, 96}}},   /* more sequences than the layer's check reads */
    };
    static const struct at_case unfused[] = {
        {"[a]\ntype = attention\nheads = 2\n", {3, {2, 37, 24}}},
        {"[a]\ntype = attention\nheads = 2\ncausal = off\n", {3, {2, 37, 96}}},
        {"[a]\ntype = attention\nheads = 2\ndropout = 0.5\n", {3, {2, 37, 96}}},
    };
    char *log = NULL;
    size_t log_len = 0;
    FILE *lf = open_memstream(&log, &log_len);
    CU_ASSERT_FATAL(lf != NULL);
    glia_log_set(cuda_ctx, lf, GLIA_LOG_WARN);
    for (int h = 0; h < 2; h++)
        for (int f = 0; f < 2; f++) {
            const struct at_case *cs = f ? fused : unfused;
            size_t n = f ? sizeof fused / sizeof fused[0] : sizeof unfused / sizeof unfused[0];
            for (size_t i = 0; i < n; i++)
                for (int m = 0; m < 3; m++) {
                    struct cuda_case k = {.ini = cs[i].ini, .in = &cs[i].in, .n_in = 1, .accumulate = m == 1,
                                          .eval = m == 2, .seed = 300 + 7 * i + (uint64_t)m,
                                          .act = h ? GLIA_F16 : GLIA_BF16};
                    struct cuda_diff d = cuda_compare(&k);
                    double tol = f ? (h ? 5e-3 : 3e-2) : (h ? 1.0 / 512 : 1.0 / 64);  /* unfused: an ulp or two */
                    bool ok = d.out <= tol && (k.eval || d.din <= tol);
                    if (!ok) printf("\n  %s %s %s mode %d: out %g din %g\n", f ? "fused" : "unfused", cs[i].ini,
                                    glia_dtype_name(k.act), m, d.out, d.din);
                    CU_ASSERT(ok);
                }
        }
    glia_log_set(cuda_ctx, stderr, GLIA_LOG_WARN);
    fclose(lf);
    if (log_len) printf("\n  notices:\n%s", log);
    CU_ASSERT_PTR_NULL(strstr(log, "fused attention"));  /* neither refused nor off */
    free(log);
}

/* Under the emulator, cuDNN refusing the backward graph only (GLIA_EMU_CUDNN_MAX_OPS=20: the forward has 17 operations,
 * the backward 27): the fused forward runs, the backward falls back to the f32 kernels after running their forward
 * again, with one notice, and the gradients are the CPU's. On a GPU the variable means nothing and cuDNN runs both. */
static void test_attention_half_backward_refused(void)
{
    if (!cuda_emulated()) {
        printf("(not the emulator: skipped) ");
        return;
    }
    setenv("GLIA_EMU_CUDNN_MAX_OPS", "20", 1);
    char *log = NULL;
    size_t log_len = 0;
    FILE *lf = open_memstream(&log, &log_len);
    CU_ASSERT_FATAL(lf != NULL);
    glia_log_set(cuda_ctx, lf, GLIA_LOG_WARN);
    const struct glia_shape sh = {3, {2, 37, 96}};
    struct cuda_case k = {.ini = "[a]\ntype = attention\nheads = 2\n", .in = &sh, .n_in = 1, .seed = 77,
                          .act = GLIA_BF16};
    struct cuda_diff d = cuda_compare(&k);
    glia_log_set(cuda_ctx, stderr, GLIA_LOG_WARN);
    fclose(lf);
    unsetenv("GLIA_EMU_CUDNN_MAX_OPS");
    printf("\n  out %g din %g; notices: %s", d.out, d.din, log);
    CU_ASSERT(d.out <= 3e-2 && d.din <= 1.0 / 64);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "cuDNN's fused attention refused"));
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "backward graph"));
    free(log);
}

/* Under the emulator, cuDNN's fused attention off (GLIA_EMU_CUDNN_MATMUL_SKEW: its matrix products 1.5 times too
 * large), in the forward and backward graphs (0) or the backward's only (20), over 5 sequences, of which the layer's
 * check of a fused run reads the first 2: the check catches it with one notice, and the f32 kernels' results of the
 * whole batch stand (the CPU's within an ulp or two), the forward's and then every later call's (forward), or the
 * backward's with the fused forward's output (backward). On a GPU the variable means nothing. */
static void test_attention_half_check_off(void)
{
    if (!cuda_emulated()) {
        printf("(not the emulator: skipped) ");
        return;
    }
    const struct glia_shape sh = {3, {5, 37, 96}};
    for (int m = 0; m < 2; m++) {
        setenv("GLIA_EMU_CUDNN_MATMUL_SKEW", m ? "20" : "0", 1);
        char *log = NULL;
        size_t log_len = 0;
        FILE *lf = open_memstream(&log, &log_len);
        CU_ASSERT_FATAL(lf != NULL);
        glia_log_set(cuda_ctx, lf, GLIA_LOG_WARN);
        struct cuda_case k = {.ini = "[a]\ntype = attention\nheads = 2\n", .in = &sh, .n_in = 1, .seed = 91 + m,
                              .act = GLIA_BF16};
        struct cuda_diff d = cuda_compare(&k);
        glia_log_set(cuda_ctx, stderr, GLIA_LOG_WARN);
        fclose(lf);
        unsetenv("GLIA_EMU_CUDNN_MATMUL_SKEW");
        printf("\n  skewed %s: out %g din %g; notices: %s", m ? "backward" : "both", d.out, d.din, log);
        CU_ASSERT(d.out <= (m ? 3e-2 : 1.0 / 64) && d.din <= 1.0 / 64);
        const char *said = strstr(log, "differs from the unfused kernels'");
        CU_ASSERT_PTR_NOT_NULL(said);
        CU_ASSERT_PTR_NOT_NULL(strstr(log, m ? "fused attention backward differs" : "fused attention training forward"));
        if (said) CU_ASSERT_PTR_NULL(strstr(said + 1, "differs from the unfused kernels'"));  /* once */
        free(log);
    }
}

/* [runtime] deterministic = on keeps cuDNN's engines noted nondeterministic out of the fused attention's plans (the
 * emulator notes every engine so with GLIA_EMU_CUDNN_NONDET=1): then it is refused, with a notice saying why, and the
 * unfused kernels give the CPU's results; with deterministic off the same engines run fused, with no notice. */
static void test_attention_deterministic(void)
{
    if (!cuda_emulated()) {
        printf("(not the emulator: skipped) ");
        return;
    }
    const struct glia_shape sh = {3, {3, 21, 96}};
    setenv("GLIA_EMU_CUDNN_NONDET", "1", 1);
    for (int det = 0; det < 2; det++) {
        struct glia_runtime_options o = cuda_gpu->options, keep = o;
        o.deterministic = det;
        CU_ASSERT_FATAL(glia_backend_configure(cuda_gpu, &o) == GLIA_OK);
        char *log = NULL;
        size_t log_len = 0;
        FILE *lf = open_memstream(&log, &log_len);
        CU_ASSERT_FATAL(lf != NULL);
        glia_log_set(cuda_ctx, lf, GLIA_LOG_WARN);
        struct cuda_case k = {.ini = "[a]\ntype = attention\nheads = 2\n", .in = &sh, .n_in = 1, .seed = 97,
                              .act = GLIA_BF16, .precision = GLIA_PRECISION_BF16};
        struct cuda_diff d = cuda_compare(&k);
        glia_log_set(cuda_ctx, stderr, GLIA_LOG_WARN);
        fclose(lf);
        CU_ASSERT_FATAL(glia_backend_configure(cuda_gpu, &keep) == GLIA_OK);
        printf("\n  deterministic %s: out %g din %g; notices: %s", det ? "on" : "off", d.out, d.din, log);
        CU_ASSERT(d.out <= 1.0 / 64 && d.din <= 1.0 / 64);
        if (det) CU_ASSERT_PTR_NOT_NULL(strstr(log, "no deterministic engine"));
        if (!det) CU_ASSERT_PTR_NULL(strstr(log, "fused attention"));
        free(log);
    }
    unsetenv("GLIA_EMU_CUDNN_NONDET");
}

/* A cached decode on the GPU (glia_fwd.decode): qkv(2, 37, 3 x 24) in chunks of 5, 1, 1, 13 and 17 positions, the
 * kept keys and values outgrowing their room on the way, gives each chunk's rows of the CPU kernel's whole-window
 * eval output; then pos 0 again with one sequence; causal = off is refused. */
static void test_attention_decode(void)
{
    const struct glia_shape sh = cases[1].in;  /* heads = 2, causal */
    int64_t N = sh.dim[0], T = sh.dim[1], C3 = sh.dim[2], C = C3 / 3;
    struct cuda_built Bc, Bg;
    cuda_build(cases[1].ini, NULL, cuda_cpu, &sh, 1, &Bc);
    cuda_build(cases[1].ini, NULL, cuda_gpu, &sh, 1, &Bg);
    CU_ASSERT(Bg.kernel->flags & GLIA_KERNEL_DECODE);
    struct glia_rng rng;
    glia__rng_seed(&rng, 123);
    float *v = malloc(sizeof(float) * (size_t)(N * T * C3)), *chunk_v = malloc(sizeof(float) * (size_t)(N * T * C3));
    cuda_randn(&rng, v, N * T * C3, 1.5f);
    struct glia_tensor *xc = cuda_put(cuda_cpu, sh, GLIA_CONTIGUOUS, v), *yc;
    struct glia_shape os = {3, {N, T, C}};
    CU_ASSERT_FATAL(glia_tensor_new(cuda_cpu, GLIA_F32, &os, &yc) == GLIA_OK);
    const struct glia_tensor *inc[1] = {xc};
    struct glia_fwd fc = {inc, 1, yc, NULL, false, 1, false, 1, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_FATAL(Bc.kernel->forward(&Bc.l, &fc) == GLIA_OK);
    const float *want = glia_tensor_f32(yc);
    const int chunk[] = {5, 1, 1, 13, 17};
    for (int round = 0; round < 2; round++) {
        int64_t n = round ? 1 : N;
        double worst = 0;
        for (int c = 0, pos = 0; c < 5; pos += chunk[c++]) {
            for (int64_t r = 0; r < n; r++)
                memcpy(chunk_v + r * chunk[c] * C3, v + (r * T + pos) * C3, sizeof(float) * (size_t)(chunk[c] * C3));
            struct glia_shape cs = {3, {n, chunk[c], C3}}, ys = {3, {n, chunk[c], C}};
            struct glia_tensor *xg = cuda_put(cuda_gpu, cs, GLIA_CONTIGUOUS, chunk_v), *yg, *yh;
            CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, GLIA_F32, &ys, &yg) == GLIA_OK);
            const struct glia_tensor *ing[1] = {xg};
            struct glia_fwd fg = {ing, 1, yg, NULL, false, 1, false, 1, NULL, true, pos, NULL, NULL, NULL, NULL, false, NULL, NULL};
            glia_status st = Bg.kernel->forward(&Bg.l, &fg);
            if (st) printf("\n  decode: %s\n", glia_context_error(cuda_ctx));
            CU_ASSERT_FATAL(st == GLIA_OK);
            yh = cuda_get(yg);
            for (int64_t r = 0; r < n; r++)
                for (int64_t i = 0; i < chunk[c] * C; i++) {
                    double w = want[(r * T + pos) * C + i];
                    worst = fmax(worst, fabs(glia_tensor_f32(yh)[r * chunk[c] * C + i] - w) / fmax(1, fabs(w)));
                }
            glia_tensor_release(xg);
            glia_tensor_release(yg);
            glia_tensor_release(yh);
        }
        if (!(worst < 1e-5)) printf("\n  decode round %d: off by %g\n", round, worst);
        CU_ASSERT(worst < 1e-5);
    }
    cuda_unbuild(&Bg);
    cuda_build(cases[2].ini, NULL, cuda_gpu, &cases[2].in, 1, &Bg);  /* causal = off */
    struct glia_tensor *xg = cuda_put(cuda_gpu, cases[2].in, GLIA_CONTIGUOUS, v), *yg;
    struct glia_shape ys = {3, {cases[2].in.dim[0], cases[2].in.dim[1], cases[2].in.dim[2] / 3}};
    CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, GLIA_F32, &ys, &yg) == GLIA_OK);
    const struct glia_tensor *ing[1] = {xg};
    struct glia_fwd fg = {ing, 1, yg, NULL, false, 1, false, 1, NULL, true, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL(Bg.kernel->forward(&Bg.l, &fg), GLIA_EUNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(cuda_ctx), "needs causal = on"));
    glia_tensor_release(xg);
    glia_tensor_release(yg);
    cuda_unbuild(&Bg);
    cuda_unbuild(&Bc);
    glia_tensor_release(xc);
    glia_tensor_release(yc);
    free(v);
    free(chunk_v);
}

/* glia_model_decode on the GPU: share/glia/examples/gpt-bytes.ini (embedding, position_embedding, layernorm, linear,
 * attention, gelu, add; untrained) at fp32 and bf16 gives, chunk by chunk, the rows of glia_model_logits over the
 * whole window on the same model. */
static void test_model_decode(void)
{
    char path[600], set[700];
    snprintf(path, sizeof path, "%s", glia_test_tmp("cuda-decode.txt"));
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    for (int i = 0; i < 4000; i++) fputc("the cat sat on a mat. "[i % 22], f);
    CU_ASSERT_FATAL(fclose(f) == 0);
    static const char *const prec[2] = {"runtime.precision=fp32", "runtime.precision=bf16"};
    for (int k = 0; k < 2; k++) {
        struct run r;
        CU_ASSERT_FATAL(glia_context_new(&r.ctx) == GLIA_OK);
        CU_ASSERT_FATAL(glia_config_load(r.ctx, glia_test_src("share/glia/examples/gpt-bytes.ini"), &r.cfg) == GLIA_OK);
        snprintf(set, sizeof set, "data.train_tokens=%s", path);
        CU_ASSERT_FATAL(glia_config_set(r.cfg, set) == GLIA_OK);
        CU_ASSERT_FATAL(glia_config_set(r.cfg, "runtime.device=cuda") == GLIA_OK);
        CU_ASSERT_FATAL(glia_config_set(r.cfg, prec[k]) == GLIA_OK);
        glia_status st = glia_model_build(r.ctx, r.cfg, &r.m);
        if (st) printf("\n  %s\n", glia_context_error(r.ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        int32_t tok[64];
        for (int i = 0; i < 64; i++) tok[i] = "a cat, the mat; "[i % 16];
        float *full = malloc(sizeof(float) * 64 * 256), *part = malloc(sizeof(float) * 64 * 256);
        struct glia_batch b = {.struct_size = sizeof b, .shape = glia_shape_make(2, (int64_t[]){1, 64}), .tokens = tok};
        CU_ASSERT_EQUAL_FATAL(glia_model_logits(r.m, &b, full, 64 * 256), GLIA_OK);
        const int chunk[] = {9, 1, 1, 33, 20};
        double worst = 0, big = 0;
        for (int c = 0, pos = 0; c < 5; pos += chunk[c++]) {
            struct glia_batch d = {.struct_size = sizeof d, .shape = glia_shape_make(2, (int64_t[]){1, chunk[c]}),
                                   .tokens = tok + pos};
            st = glia_model_decode(r.m, &d, pos, part, 64 * 256);
            if (st) printf("\n  %s: %s\n", prec[k], glia_context_error(r.ctx));
            CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
            for (int i = 0; i < chunk[c] * 256; i++) {
                worst = fmax(worst, fabs((double)part[i] - full[pos * 256 + i]));
                big = fmax(big, fabs((double)full[pos * 256 + i]));
            }
        }
        printf("\n  %s: decode off by %.2g of logits up to %.2g", prec[k], worst, big);
        CU_ASSERT(worst < (k ? 2e-2 * fmax(1, big) : 1e-4));  /* bf16: activations rounded to 8 bits */
        free(full);
        free(part);
        close_run(&r);
    }
}

/* gpt-bytes.ini trained 2 epochs on the GPU at bf16 (warm-up 2 steps, lr 0.003) on a small repeated text written to
 * NAME.txt, checkpoints under NAME-ckpt, with the settings in extra (NULL-terminated) and the log at level lvl into
 * log; the epochs' results into res. */
static void gpt_bytes_train(const char *name, const char *const *extra, FILE *log, enum glia_log_level lvl,
                            struct glia_epoch_result res[2])
{
    char path[600], file[200], set[700], ck[700];
    snprintf(file, sizeof file, "%s.txt", name);
    snprintf(path, sizeof path, "%s", glia_test_tmp(file));
    snprintf(file, sizeof file, "%s-ckpt", name);
    snprintf(ck, sizeof ck, "train.checkpoint_dir=%s", glia_test_tmp(file));
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    for (int i = 0; i < 6000; i++) fputc("the cat sat on the mat. a dog ran to the cat. "[i % 46], f);
    CU_ASSERT_FATAL(fclose(f) == 0);
    struct run r;
    CU_ASSERT_FATAL(glia_context_new(&r.ctx) == GLIA_OK);
    glia_log_set(r.ctx, log, lvl);
    CU_ASSERT_FATAL(glia_config_load(r.ctx, glia_test_src("share/glia/examples/gpt-bytes.ini"), &r.cfg) == GLIA_OK);
    snprintf(set, sizeof set, "data.train_tokens=%s", path);
    const char *sets[] = {set, "runtime.device=cuda", "runtime.precision=bf16", "train.epochs=2",
                          "train.warmup_steps=2", "train.lr=0.003", ck, NULL};
    for (int i = 0; sets[i]; i++) CU_ASSERT_FATAL(glia_config_set(r.cfg, sets[i]) == GLIA_OK);
    for (int i = 0; extra[i]; i++) CU_ASSERT_FATAL(glia_config_set(r.cfg, extra[i]) == GLIA_OK);
    glia_status st = glia_model_build(r.ctx, r.cfg, &r.m);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    st = glia_model_train(r.m, &quiet, res, 2);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    close_run(&r);
}

/* gpt-bytes trains on the GPU at bf16 (half activations, cuDNN's fused attention in every block, forward and
 * backward, layernorm, gelu, the tied lm_head) with activation checkpointing (the fused forward run again in
 * backward): the loss falls from the first epoch to the second, and no layer falls back from the fused attention. */
static void test_gpt_trains_bf16(void)
{
    char *log = NULL;
    size_t log_len = 0;
    FILE *lf = open_memstream(&log, &log_len);
    CU_ASSERT_FATAL(lf != NULL);
    struct glia_epoch_result res[2] = GLIA_TEST_RESULTS;
    const char *extra[] = {"data.steps_per_epoch=8", "data.val_batches=2", "graph.checkpoint_segments=2", NULL};
    gpt_bytes_train("cuda-gpt", extra, lf, GLIA_LOG_WARN, res);
    fclose(lf);
    printf("\n  bf16 gpt-bytes: train loss %.3f -> %.3f, val loss %.3f -> %.3f", res[0].train_loss, res[1].train_loss,
           res[0].test_loss, res[1].test_loss);
    CU_ASSERT(isfinite(res[1].train_loss) && res[1].train_loss < res[0].train_loss);
    if (log_len) printf("\n  notices: %s", log);
    CU_ASSERT(!log || !strstr(log, "fused attention"));
    free(log);
}

/* gpt-bytes at bf16 (the fused attention in every block) with cuda_graph = on: the pass before the capture builds and
 * checks the fused plans, the captured steps replay them, and training follows the run without graphs (the fused
 * backward may add in any order on a GPU, so to rounding, not bit for bit); the log says passes were replayed and
 * none ran as they came. */
static void test_gpt_cuda_graph(void)
{
    struct glia_epoch_result res[2][2] = {GLIA_TEST_RESULTS, GLIA_TEST_RESULTS};
    for (int g = 0; g < 2; g++) {
        char *log = NULL;
        size_t log_len = 0;
        FILE *lf = open_memstream(&log, &log_len);
        CU_ASSERT_FATAL(lf != NULL);
        const char *extra[] = {"data.steps_per_epoch=4", "data.val_batches=1",
                               g ? "runtime.cuda_graph=on" : "runtime.cuda_graph=off", NULL};
        gpt_bytes_train(g ? "cuda-gpt-graph" : "cuda-gpt-eager", extra, lf, GLIA_LOG_INFO, res[g]);
        fclose(lf);
        if (g) {
            long replays = -1;
            const char *at = log ? strstr(log, "cuda_graph: ") : NULL;
            if (at) sscanf(at, "cuda_graph: %ld training passes replayed", &replays);
            if (replays <= 0) printf("\n  log: %s", log ? log : "");
            CU_ASSERT(replays > 0);
            CU_ASSERT_PTR_NULL(strstr(log, "as it comes"));
            CU_ASSERT_PTR_NULL(strstr(log, "fused attention"));
        }
        free(log);
    }
    for (int e = 0; e < 2; e++) {
        printf("\n  epoch %d: train loss %.6f with graphs, %.6f without", e + 1, res[1][e].train_loss, res[0][e].train_loss);
        CU_ASSERT(fabs(res[1][e].train_loss - res[0][e].train_loss) <= 1e-3 * res[0][e].train_loss);
        CU_ASSERT(fabs(res[1][e].test_loss - res[0][e].test_loss) <= 1e-3 * res[0][e].test_loss);
    }
}

CUDA_TEST_MAIN("cuda_attention", GLIA_TEST(test_attention), GLIA_TEST(test_attention_tf32),
               GLIA_TEST(test_attention_repeatable), GLIA_TEST(test_attention_half),
               GLIA_TEST(test_attention_half_backward_refused),
               GLIA_TEST(test_attention_half_check_off), GLIA_TEST(test_attention_deterministic),
               GLIA_TEST(test_attention_decode),
               GLIA_TEST(test_model_decode), GLIA_TEST(test_gpt_trains_bf16),
               GLIA_TEST(test_gpt_cuda_graph))
