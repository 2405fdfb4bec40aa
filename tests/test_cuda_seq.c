/* tests/test_cuda_seq.c — the CUDA impls of embedding (both outputs), seq_pool and position_embedding against their
 * CPU impls on a GPU, on fresh random token batches and sequences: both memory formats, write and accumulate, train
 * and eval, padding, rows of padding only, many repeats of few tokens (the atomic scatter; with [runtime]
 * deterministic the CPU's bits); out-of-range tokens (zeros on CUDA), the padding row's init, the max mode's refusal
 * after eval and position_embedding's of a batch longer than max_positions; a GPT-shaped model trained on the GPU
 * against the CPU. Exits 77 (skipped) without a usable GPU or without the CUDA build. Not a test of the CPU
 * semantics: test_seq. */
#include "cudautil.h"
#include "modelutil.h"

static const enum glia_memory_format formats[2] = {GLIA_CONTIGUOUS, GLIA_CHANNELS_LAST};

/* Every format x {write, accumulate}, and an eval forward, of one layer whose inputs named in ints hold ids in
 * [0, high). */
static void expect_all(const char *ini, const struct glia_shape *in, int n_in, uint32_t ints, int32_t high)
{
    for (int f = 0; f < 2; f++) {
        for (int acc = 0; acc < 2; acc++) {
            struct cuda_case k = {.ini = ini, .in = in, .n_in = n_in, .format = formats[f], .accumulate = acc,
                                  .seed = 21 + 7 * (uint64_t)acc + 3 * (uint64_t)f};
            cuda_expect_ids(&k, ints, high, 1e-4);
        }
        struct cuda_case k = {.ini = ini, .in = in, .n_in = n_in, .format = formats[f], .eval = true, .seed = 5};
        cuda_expect_ids(&k, ints, high, 1e-4);
    }
}

static void test_embedding(void)
{
    struct {
        const char *ini;
        struct glia_shape in;
        int32_t high;
    } cases[] = {
        {"[e]\ntype = embedding\nvocab = 7\ndim = 3\n", S(2, 4, 9, 0, 0), 5},
        {"[e]\ntype = embedding\nvocab = 5\ndim = 4\npadding_idx = -1\n", S(2, 1, 33, 0, 0), 5},
        {"[e]\ntype = embedding\nvocab = 5\ndim = 8\npadding_idx = 3\n", S(2, 3, 1, 0, 0), 5},
        {"[e]\ntype = embedding\nvocab = 1000\ndim = 64\n", S(2, 16, 128, 0, 0), 1000},
        {"[e]\ntype = embedding\nvocab = 1000\ndim = 64\n", S(2, 32, 200, 0, 0), 3},  /* many repeats */
        {"[e]\ntype = embedding\nvocab = 50\ndim = 1\n", S(2, 8, 17, 0, 0), 50},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_all(cases[i].ini, &cases[i].in, 1, 1u, cases[i].high);
}

/* output = sequence: (N, L, dim), one layout; with [runtime] deterministic the CPU's bits */
static void test_embedding_sequence(void)
{
    struct {
        const char *ini;
        struct glia_shape in;
        int32_t high;
    } cases[] = {
        {"[e]\ntype = embedding\nvocab = 7\ndim = 3\noutput = sequence\n", S(2, 4, 9, 0, 0), 5},
        {"[e]\ntype = embedding\nvocab = 5\ndim = 8\npadding_idx = 3\noutput = sequence\n", S(2, 3, 1, 0, 0), 5},
        {"[e]\ntype = embedding\nvocab = 1000\ndim = 64\npadding_idx = -1\noutput = sequence\n", S(2, 16, 128, 0, 0),
         1000},
        {"[e]\ntype = embedding\nvocab = 1000\ndim = 64\noutput = sequence\n", S(2, 32, 200, 0, 0), 3},
    };
    struct glia_runtime_options o = cuda_gpu->options;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int acc = 0; acc < 2; acc++) {
            struct cuda_case k = {.ini = cases[i].ini, .in = &cases[i].in, .n_in = 1, .accumulate = acc,
                                  .seed = 60 + 2 * (uint64_t)i + (uint64_t)acc};
            cuda_expect_ids(&k, 1u, cases[i].high, 1e-4);
            o.deterministic = true;
            CU_ASSERT_FATAL(glia_backend_configure(cuda_gpu, &o) == GLIA_OK);
            struct cuda_diff d = cuda_compare_ids(&k, 1u, cases[i].high);
            if (d.out != 0 || d.dparam != 0)
                printf("\n  %s deterministic%s: out differs by %g, weight gradient by %g\n", cases[i].ini,
                       acc ? ", accumulate" : "", d.out, d.dparam);
            CU_ASSERT(d.out == 0 && d.dparam == 0);
            o.deterministic = false;
            CU_ASSERT_FATAL(glia_backend_configure(cuda_gpu, &o) == GLIA_OK);
        }
        struct cuda_case k = {.ini = cases[i].ini, .in = &cases[i].in, .n_in = 1, .eval = true, .seed = 7};
        cuda_expect_ids(&k, 1u, cases[i].high, 1e-4);
    }
}

/* position_embedding on (N, T, C), T below and at max_positions, write and accumulate, train and eval: the CPU's
 * bits (one addition per element; the weight gradient's sums over n in the CPU's order); a batch longer than the
 * table is refused naming the layer. */
static void test_position_embedding(void)
{
    struct {
        const char *ini;
        struct glia_shape in;
    } cases[] = {
        {"[p]\ntype = position_embedding\nmax_positions = 8\n", S(3, 2, 5, 8, 0)},
        {"[p]\ntype = position_embedding\nmax_positions = 16\ninit_std = 1\n", S(3, 4, 16, 64, 0)},
        {"[p]\ntype = position_embedding\nmax_positions = 2\n", S(3, 3, 1, 7, 0)},
        {"[p]\ntype = position_embedding\nmax_positions = 512\n", S(3, 5, 300, 33, 0)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int m = 0; m < 3; m++) {
            struct cuda_case k = {.ini = cases[i].ini, .in = &cases[i].in, .n_in = 1, .accumulate = m == 1,
                                  .eval = m == 2, .seed = 70 + 3 * (uint64_t)i + (uint64_t)m};
            struct cuda_diff d = cuda_compare(&k);
            if (d.out != 0 || d.din != 0 || d.dparam != 0)
                printf("\n  %s mode %d: out %g din %g dparam %g\n", cases[i].ini, m, d.out, d.din, d.dparam);
            CU_ASSERT(d.out == 0 && d.din == 0 && d.dparam == 0);
        }
    struct glia_shape built = S(3, 2, 4, 3, 0), longer = S(3, 2, 5, 3, 0);
    struct cuda_built G;
    cuda_build("[p]\ntype = position_embedding\nmax_positions = 4\n", "cuda", cuda_gpu, &built, 1, &G);
    struct glia_tensor *x = tensor_as(cuda_gpu, longer, GLIA_CONTIGUOUS);
    struct glia_tensor *y = tensor_as(cuda_gpu, longer, GLIA_CONTIGUOUS);
    const struct glia_tensor *in[1] = {x};
    struct glia_fwd fa = {in, 1, y, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL(G.kernel->forward(&G.l, &fa), GLIA_ESHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(cuda_ctx), "[p] position_embedding takes (N, T <= 4, 3), got 2x5x3"));
    glia_tensor_release(x);
    glia_tensor_release(y);
    CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, GLIA_F16, &built, &x) == GLIA_OK);  /* f32 only: the core converts */
    CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, GLIA_F16, &built, &y) == GLIA_OK);
    in[0] = x;
    fa.out = y;
    CU_ASSERT_EQUAL(G.kernel->forward(&G.l, &fa), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(cuda_ctx),
                                  "[p] position_embedding (cuda): the input must be a contiguous f32 tensor, got f16"));
    glia_tensor_release(x);
    glia_tensor_release(y);
    cuda_unbuild(&G);
}

static void test_seq_pool(void)
{
    const char *inis[] = {
        "[p]\ntype = seq_pool\n",
        "[p]\ntype = seq_pool\nmode = max\n",
        "[p]\ntype = seq_pool\npad_id = 2\n",
        "[p]\ntype = seq_pool\nmode = max\npad_id = 1\n",
    };
    struct {
        struct glia_shape in[2];
        int32_t high;
    } cases[] = {
        {{S(4, 16, 3, 1, 2), S(2, 16, 2, 0, 0)}, 2},     /* a quarter of the rows padding only */
        {{S(4, 4, 5, 1, 7), S(2, 4, 7, 0, 0)}, 3},
        {{S(4, 16, 130, 1, 5), S(2, 16, 5, 0, 0)}, 3},
        {{S(4, 2, 64, 1, 200), S(2, 2, 200, 0, 0)}, 50},
        {{S(4, 3, 2, 1, 4), S(2, 3, 4, 0, 0)}, 1},       /* every row padding only (pad_id 0) */
    };
    for (size_t i = 0; i < sizeof inis / sizeof inis[0]; i++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) expect_all(inis[i], cases[c].in, 2, 2u, cases[c].high);
}

/* [runtime] deterministic = on: the embedding's weight gradient adds in position order, as the CPU impl does, so
 * it is the CPU's bits (many repeats of few tokens, padding, both formats, write and accumulate). */
static void test_embedding_deterministic(void)
{
    struct glia_runtime_options o = cuda_gpu->options;
    o.deterministic = true;
    CU_ASSERT_FATAL(glia_backend_configure(cuda_gpu, &o) == GLIA_OK);
    struct {
        const char *ini;
        struct glia_shape in;
        int32_t high;
    } cases[] = {
        {"[e]\ntype = embedding\nvocab = 1000\ndim = 64\n", S(2, 32, 200, 0, 0), 3},
        {"[e]\ntype = embedding\nvocab = 7\ndim = 3\n", S(2, 4, 9, 0, 0), 5},
        {"[e]\ntype = embedding\nvocab = 5000\ndim = 1\npadding_idx = -1\n", S(2, 8, 300, 0, 0), 40},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int f = 0; f < 2; f++)
            for (int acc = 0; acc < 2; acc++) {
                struct cuda_case k = {.ini = cases[i].ini, .in = &cases[i].in, .n_in = 1, .format = formats[f],
                                      .accumulate = acc, .seed = 90 + (uint64_t)(4 * i) + (uint64_t)(2 * f + acc)};
                struct cuda_diff d = cuda_compare_ids(&k, 1u, cases[i].high);
                if (d.out != 0 || d.dparam != 0)
                    printf("\n  %s %s%s: out differs by %g, weight gradient by %g\n", cases[i].ini,
                           glia_memory_format_name(formats[f]), acc ? ", accumulate" : "", d.out, d.dparam);
                CU_ASSERT(d.out == 0 && d.dparam == 0);
            }
    o.deterministic = false;
    CU_ASSERT_FATAL(glia_backend_configure(cuda_gpu, &o) == GLIA_OK);
}

/* A token outside [0, vocab) reads as zeros on CUDA (the CPU refuses it) and gets no gradient. */
static void test_embedding_out_of_range(void)
{
    struct glia_shape ts = S(2, 2, 3, 0, 0), os;
    const int32_t tv[6] = {1, 7, 3, -2, 2, 0};
    const float w[8] = {10, 11, 20, 21, 30, 31, 40, 41};
    struct cuda_built G;
    cuda_build("[e]\ntype = embedding\nvocab = 4\ndim = 2\n", "cuda", cuda_gpu, &ts, 1, &G);
    CU_ASSERT_FATAL(G.type->infer_shape(&G.l, &ts, 1, &os) == GLIA_OK);
    struct glia_param *pw = &G.l.params[0];
    CU_ASSERT_FATAL(glia_tensor_from_host(pw->value, w, sizeof w) == GLIA_OK);
    struct glia_tensor *tok, *y = tensor_as(cuda_gpu, os, GLIA_CONTIGUOUS);
    CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, GLIA_I32, &ts, &tok) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_from_host(tok, tv, sizeof tv) == GLIA_OK);
    float ones[12];
    for (int i = 0; i < 12; i++) ones[i] = 1.0f;
    struct glia_tensor *dy = cuda_put(cuda_gpu, os, GLIA_CONTIGUOUS, ones);
    const struct glia_tensor *in[1] = {tok};
    struct glia_tensor *din[1] = {NULL};
    bool acc[1] = {false};
    struct glia_fwd fa = {in, 1, y, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    struct glia_bwd ba = {in, 1, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
    pw->grad_unset = true;
    CU_ASSERT_FATAL(G.kernel->forward(&G.l, &fa) == GLIA_OK);
    CU_ASSERT_FATAL(G.kernel->backward(&G.l, &ba) == GLIA_OK);
    float yh[12], gh[8];
    CU_ASSERT_FATAL(glia_tensor_to_host(y, yh, sizeof yh) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_to_host(pw->grad, gh, sizeof gh) == GLIA_OK);
    for (int n = 0; n < 2; n++)
        for (int d = 0; d < 2; d++)
            for (int l = 0; l < 3; l++) {
                int t = tv[n * 3 + l];
                float want = t < 0 || t >= 4 ? 0.0f : w[t * 2 + d];  /* padding (0) reads its row, as nn.Embedding */
                CU_ASSERT_EQUAL(yh[(n * 2 + d) * 3 + l], want);
            }
    const float gw[8] = {0, 0, 1, 1, 1, 1, 1, 1};  /* rows 1, 2, 3 once each; padding row 0 and 7, -2 nothing */
    for (int i = 0; i < 8; i++) CU_ASSERT_EQUAL(gh[i], gw[i]);
    glia_tensor_release(tok);
    glia_tensor_release(y);
    glia_tensor_release(dy);
    cuda_unbuild(&G);
}

/* The weight a CUDA embedding starts from (glia_layer_run_new on the GPU, as a model draws it): N(0, 1) with the
 * padding_idx row zeroed, the other rows the draws of the same layer without padding. */
static void test_embedding_padding_init(void)
{
    struct glia_shape ts = S(2, 2, 3, 0, 0);
    const char *inis[2] = {"[e]\ntype = embedding\nvocab = 5\ndim = 3\npadding_idx = -1\n",
                           "[e]\ntype = embedding\nvocab = 5\ndim = 3\npadding_idx = 4\n"};
    float w[2][15];
    for (int k = 0; k < 2; k++) {
        struct glia_layer_run *r;
        glia_status st = glia_layer_run_new(cuda_ctx, inis[k], cuda_gpu->device, &ts, 1, GLIA_CONTIGUOUS, 9, &r);
        if (st) printf("\n  %s\n", glia_context_error(cuda_ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        CU_ASSERT_EQUAL(glia_layer_run_layer(r)->kernel->device_type, GLIA_DEVICE_CUDA);
        CU_ASSERT_FATAL(glia_tensor_to_host(glia_layer_run_layer(r)->params[0].value, w[k], sizeof w[k]) == GLIA_OK);
        glia_layer_run_free(r);
    }
    for (int i = 0; i < 15; i++) CU_ASSERT(i / 3 == 4 ? w[1][i] == 0.0f : w[1][i] == w[0][i] && w[0][i] != 0.0f);
}

/* seq_pool (max) keeps nothing in eval: a backward after it is refused; a training forward of a bigger batch
 * re-makes what it keeps. */
static void test_seq_pool_eval_keeps_nothing(void)
{
    struct glia_shape small[2] = {S(4, 2, 3, 1, 4), S(2, 2, 4, 0, 0)}, big[2] = {S(4, 5, 3, 1, 4), S(2, 5, 4, 0, 0)};
    struct cuda_built G;
    cuda_build("[p]\ntype = seq_pool\nmode = max\n", "cuda", cuda_gpu, small, 2, &G);
    for (int b = 0; b < 2; b++) {
        const struct glia_shape *in = b ? big : small;
        struct glia_shape os;
        CU_ASSERT_FATAL(G.type->infer_shape(&G.l, in, 2, &os) == GLIA_OK);
        struct glia_tensor *x, *tok, *dx, *y, *dy;
        CU_ASSERT_FATAL(glia_tensor_zeros(cuda_gpu, GLIA_F32, &in[0], &x) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_zeros(cuda_gpu, GLIA_F32, &in[0], &dx) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_zeros(cuda_gpu, GLIA_I32, &in[1], &tok) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_zeros(cuda_gpu, GLIA_F32, &os, &y) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_zeros(cuda_gpu, GLIA_F32, &os, &dy) == GLIA_OK);
        const struct glia_tensor *xi[2] = {x, tok};
        struct glia_tensor *din[2] = {dx, NULL};
        bool acc[2] = {false, false};
        struct glia_fwd fa = {xi, 2, y, NULL, false, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        struct glia_bwd ba = {xi, 2, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
        CU_ASSERT_EQUAL(G.kernel->forward(&G.l, &fa), GLIA_OK);
        CU_ASSERT_EQUAL(G.kernel->backward(&G.l, &ba), GLIA_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(cuda_ctx), "[p] seq_pool (max) backward needs a training forward"));
        fa.train = true;
        CU_ASSERT_EQUAL(G.kernel->forward(&G.l, &fa), GLIA_OK);
        CU_ASSERT_EQUAL(G.kernel->backward(&G.l, &ba), GLIA_OK);
        CU_ASSERT_EQUAL(glia_backend_sync(cuda_gpu), GLIA_OK);
        struct glia_tensor *all[] = {x, tok, dx, y, dy};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) glia_tensor_release(all[i]);
    }
    cuda_unbuild(&G);
}

/* A GPT-shaped model on fixed-length token sequences (N, T = 8): wte and wpe as (N, T, C), linear on the last dim,
 * gelu into a residual add into dropout, a flatten and a classifier, trained on the CPU and on the GPU. On the GPU
 * (fuse_pointwise = auto) act, res and drop run as one NVRTC kernel; fp32 ends within float tolerance of the CPU's
 * weights, also replayed from a CUDA graph, and bf16 (half activations converted at position_embedding, which takes
 * f32 only) trains as well. */
static void test_sequence_model(void)
{
    char dir[512], a[600], text[4096];
    snprintf(dir, sizeof dir, "%s", glia_test_tmp("cuda-seq-model"));
    snprintf(a, sizeof a, "mkdir -p '%s'", dir);
    CU_ASSERT_FATAL(system(a) == 0);
    snprintf(a, sizeof a, "%s/train.txt", dir);
    CU_ASSERT_FATAL(glia_test_write_tokens(a, 320, 40, 4, 8, 8, 41) == 0);
    snprintf(a, sizeof a, "%s/test.txt", dir);
    CU_ASSERT_FATAL(glia_test_write_tokens(a, 100, 40, 4, 8, 8, 42) == 0);
    static const char *const runtimes[] = {"device = cpu", "device = cuda\nprecision = fp32",
                                           "device = cuda\nprecision = fp32\ncuda_graph = on",
                                           "device = cuda\nprecision = bf16"};
    struct run r[4];
    struct glia_epoch_result res[4][2] = {GLIA_TEST_RESULTS, GLIA_TEST_RESULTS, GLIA_TEST_RESULTS, GLIA_TEST_RESULTS};
    for (int k = 0; k < 4; k++) {
        snprintf(text, sizeof text,
                 "[runtime]\n%s\nseed = 4\n"
                 "[data]\nformat = tokens\ntrain = %s/train.txt\ntest = %s/test.txt\nvocab = 40\nbatch_size = 16\n"
                 "test_batch_size = 50\nshuffle = off\n"
                 "[train]\noptimizer = adamw\nlr = 0.003\nepochs = 2\n"
                 "[wte]\ntype = embedding\nvocab = 40\ndim = 16\npadding_idx = -1\noutput = sequence\ninit_std = 0.02\n"
                 "[wpe]\ntype = position_embedding\nmax_positions = 8\n"
                 "[fc1]\ntype = linear\noutputs = 16\n[act]\ntype = gelu\n[res]\ntype = add\ninputs = act, wpe\n"
                 "[drop]\ntype = dropout\np = 0.1\n[fc2]\ntype = linear\noutputs = 16\n[flat]\ntype = flatten\n"
                 "[head]\ntype = linear\noutputs = 4\n[loss]\ntype = softmax_cross_entropy\n",
                 runtimes[k], dir, dir);
        open_run(&r[k], text);
        CU_ASSERT_EQUAL(r[k].m->graph.n_nodes, k ? 8 : 10);  /* act, res, drop fused on the GPU */
        glia_status st = glia_model_train(r[k].m, &quiet, res[k], 2);
        if (st) printf("\n  %s: %s\n", runtimes[k], glia_context_error(r[k].ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
    }
    for (int k = 1; k < 3; k++) {
        double worst = weight_diff(&r[k], &r[0]);
        if (!(worst <= 2e-3)) printf("\n  %s: weights differ from the CPU's by %g\n", runtimes[k], worst);
        CU_ASSERT(worst <= 2e-3);
    }
    CU_ASSERT(res[3][1].train_loss < res[3][0].train_loss);
    CU_ASSERT(fabs(res[3][1].train_loss - res[0][1].train_loss) < 0.1);
    for (int k = 0; k < 4; k++) close_run(&r[k]);
}

CUDA_TEST_MAIN("cuda_seq", GLIA_TEST(test_embedding), GLIA_TEST(test_embedding_deterministic), GLIA_TEST(test_seq_pool),
               GLIA_TEST(test_embedding_sequence), GLIA_TEST(test_position_embedding), GLIA_TEST(test_sequence_model),
               GLIA_TEST(test_embedding_out_of_range), GLIA_TEST(test_embedding_padding_init),
               GLIA_TEST(test_seq_pool_eval_keeps_nothing))
