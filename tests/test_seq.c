/* tests/test_seq.c — the token-sequence layers embedding (both outputs), seq_pool and position_embedding on the
 * CPU: gradient checks with integer token inputs (both memory formats, both pooling modes, padding), hand-computed
 * values, the gradient contract, a smaller L than the layer was built with, deterministic scatter, and refusals
 * (configuration, dtype, token range, positions, gradcheck options). Not the CUDA impls (test_cuda_seq) and not a
 * tokens dataset. */
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <string.h>
#include "layerutil.h"

static struct glia_context *ctx;

static const enum glia_memory_format formats[2] = {GLIA_CONTIGUOUS, GLIA_CHANNELS_LAST};

/* ---- helpers ---- */

/* Gradient check of the layer of `ini` whose inputs named in the bit mask ints are ids in [0, high), in
 * memory format f; kinks (max ties) may skip a few elements, never many. */
static void check_grad(const char *ini, const struct glia_shape *in, int n_in, uint32_t ints, int32_t high,
                       enum glia_memory_format f, uint64_t seed)
{
    struct glia_gradcheck_report r;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct glia_gradcheck_options o = {.struct_size = sizeof o, .memory_format = f, .int_inputs = ints, .int_high = high};
    glia_status st = glia_layer_gradcheck_ex(ctx, ini, in, n_in, &o, seed, 2e-2, &r);
    if (st) printf("\n  %s (%s): %s\n", ini, glia_memory_format_name(f), glia_context_error(ctx));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    CU_ASSERT(r.n_checked > 0);
    CU_ASSERT(r.n_skipped * 10 <= r.n_checked);
    glia_context_free(ctx);
}

/* An i32 tensor (N, L) on b holding v. */
static struct glia_tensor *tokens(struct glia_backend *b, int64_t N, int64_t L, const int32_t *v)
{
    struct glia_tensor *t;
    struct glia_shape s = S(2, N, L, 0, 0);
    CU_ASSERT_FATAL(glia_tensor_new(b, GLIA_I32, &s, &t) == GLIA_OK);
    memcpy(glia_tensor_i32(t), v, glia_tensor_nbytes(t));
    return t;
}

/* An f32 tensor of shape s in format f on b holding the values v given in logical (NCHW) order. */
static struct glia_tensor *filled(struct glia_backend *b, struct glia_shape s, enum glia_memory_format f, const float *v)
{
    struct glia_tensor *h = tensor_as(b, s, GLIA_CONTIGUOUS), *t = tensor_as(b, s, f);
    memcpy(glia_tensor_f32(h), v, glia_tensor_nbytes(h));
    CU_ASSERT_FATAL(glia_tensor_convert(t, h, false) == GLIA_OK);
    glia_tensor_release(h);
    return t;
}

static void fill(struct glia_tensor *t, float v)
{
    float *d = glia_tensor_f32(t);
    for (int64_t i = 0; i < glia_tensor_numel(t); i++) d[i] = v;
}

/* ---- gradient checks ---- */

/* The ids drawn here are in [0, 5): padding_idx is outside them, since its row's gradient is by design not the
 * derivative (nn.Embedding's padding_idx gets none while the output reads it); check_embedding_values checks
 * padding. */
static void test_embedding_gradcheck(void)
{
    const char *inis[] = {
        "[e]\ntype = embedding\nvocab = 7\ndim = 3\npadding_idx = 6\n",     /* rows 5, 6 unused */
        "[e]\ntype = embedding\nvocab = 5\ndim = 4\npadding_idx = -1\n",    /* no padding: row 0 learns */
        "[e]\ntype = embedding\nvocab = 6\ndim = 2\npadding_idx = 5\n",
        "[e]\ntype = embedding\nvocab = 5\ndim = 1\npadding_idx = -1\n",    /* dim 1: both formats are one layout */
    };
    struct glia_shape shapes[] = {S(2, 4, 5, 0, 0), S(2, 1, 9, 0, 0), S(2, 3, 1, 0, 0)};
    for (size_t i = 0; i < sizeof inis / sizeof inis[0]; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int f = 0; f < 2; f++) check_grad(inis[i], &shapes[s], 1, 1u, 5, formats[f], 1 + i * 7 + s * 3 + (uint64_t)f);
}

/* output = sequence: (N, L, dim), nn.Embedding's own layout (one memory format) */
static void test_embedding_sequence_gradcheck(void)
{
    const char *inis[] = {
        "[e]\ntype = embedding\nvocab = 7\ndim = 3\npadding_idx = 6\noutput = sequence\n",
        "[e]\ntype = embedding\nvocab = 5\ndim = 4\npadding_idx = -1\noutput = sequence\ninit_std = 0.02\n",
        "[e]\ntype = embedding\nvocab = 5\ndim = 1\npadding_idx = -1\noutput = sequence\n",
    };
    struct glia_shape shapes[] = {S(2, 4, 5, 0, 0), S(2, 1, 9, 0, 0), S(2, 3, 1, 0, 0)};
    for (size_t i = 0; i < sizeof inis / sizeof inis[0]; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            check_grad(inis[i], &shapes[s], 1, 1u, 5, GLIA_CONTIGUOUS, 90 + i * 7 + s);
}

/* position_embedding on (N, T, C): T below max_positions (the rows beyond T get no gradient, which the contract
 * check sees written when unset) and equal to it. */
static void test_position_embedding_gradcheck(void)
{
    struct {
        const char *ini;
        struct glia_shape in;
    } cases[] = {
        {"[p]\ntype = position_embedding\nmax_positions = 7\n", S(3, 2, 4, 3, 0)},
        {"[p]\ntype = position_embedding\nmax_positions = 4\ninit_std = 1\n", S(3, 3, 4, 5, 0)},
        {"[p]\ntype = position_embedding\nmax_positions = 1\n", S(3, 2, 1, 6, 0)},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        check_grad(cases[c].ini, &cases[c].in, 1, 0u, 0, GLIA_CONTIGUOUS, 120 + c);
}

static void test_seq_pool_gradcheck(void)
{
    const char *inis[] = {
        "[p]\ntype = seq_pool\n",
        "[p]\ntype = seq_pool\nmode = max\n",
        "[p]\ntype = seq_pool\nmode = mean\npad_id = 2\n",
        "[p]\ntype = seq_pool\nmode = max\npad_id = 1\n",
    };
    /* features (N, C, 1, L) and tokens (N, L), ids in [0, high): with high 2 and L 2 a quarter of the rows hold
     * padding only; with high 1 every row does (pad_id 0) */
    struct {
        struct glia_shape in[2];
        int32_t high;
    } cases[] = {
        {{S(4, 16, 3, 1, 2), S(2, 16, 2, 0, 0)}, 2},
        {{S(4, 4, 5, 1, 7), S(2, 4, 7, 0, 0)}, 3},
        {{S(4, 2, 70, 1, 3), S(2, 2, 3, 0, 0)}, 3},  /* more channels than a channels_last block */
        {{S(4, 3, 2, 1, 4), S(2, 3, 4, 0, 0)}, 1},
    };
    for (size_t i = 0; i < sizeof inis / sizeof inis[0]; i++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            for (int f = 0; f < 2; f++)
                check_grad(inis[i], cases[c].in, 2, 2u, cases[c].high, formats[f], 40 + i * 11 + c * 5 + (uint64_t)f);
}

/* ---- embedding: values ---- */

/* vocab 4, dim 2, rows (10, 11), (20, 21), (30, 31), (40, 41); tokens (2, 3) = (1, 0, 3), (2, 2, 0). As in
 * nn.Embedding the padding_idx row is looked up like any other (here it holds values: weights trained or loaded
 * elsewhere) and gets no gradient; padding_idx = -1: every row learns. */
static void check_embedding_values(int pad, enum glia_memory_format f)
{
    char ini[128];
    snprintf(ini, sizeof ini, "[e]\ntype = embedding\nvocab = 4\ndim = 2\npadding_idx = %d\n", pad);
    struct glia_shape ts = S(2, 2, 3, 0, 0), os;
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, ini, &ts, 1, &B);
    CU_ASSERT_FATAL(B.type->infer_shape(&B.l, &ts, 1, &os) == GLIA_OK);
    CU_ASSERT(os.ndim == 4 && os.dim[0] == 2 && os.dim[1] == 2 && os.dim[2] == 1 && os.dim[3] == 3);
    CU_ASSERT_EQUAL(B.l.n_params, 1);
    CU_ASSERT(B.l.params[0].init.kind == GLIA_INIT_NORMAL && B.l.params[0].init.a == 1.0);
    const float w[8] = {10, 11, 20, 21, 30, 31, 40, 41};
    memcpy(glia_tensor_f32(B.l.params[0].value), w, sizeof w);
    const int32_t tv[6] = {1, 0, 3, 2, 2, 0};
    struct glia_tensor *tok = tokens(B.b, 2, 3, tv), *y = tensor_as(B.b, os, f);
    fill(y, NAN);
    const struct glia_tensor *in[1] = {tok};
    struct glia_fwd fa = {in, 1, y, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_FATAL(B.kernel->forward(&B.l, &fa) == GLIA_OK);
    for (int n = 0; n < 2; n++)
        for (int d = 0; d < 2; d++)
            for (int l = 0; l < 3; l++) {
                int t = tv[n * 3 + l];
                CU_ASSERT_EQUAL(at4(y, n, d, 0, l), w[t * 2 + d]);
            }
    /* backward: dy(n, d, 0, l) = 100n + 10d + l + 1; dweight row v = sum over the positions of token v */
    float dyv[12];
    for (int i = 0; i < 12; i++) dyv[i] = (float)(100 * (i / 6) + 10 * (i / 3 % 2) + i % 3 + 1);
    struct glia_tensor *dy = filled(B.b, os, f, dyv);
    float want[8] = {0};
    for (int n = 0; n < 2; n++)
        for (int l = 0; l < 3; l++) {
            int t = tv[n * 3 + l];
            if (t == pad) continue;
            for (int d = 0; d < 2; d++) want[t * 2 + d] += dyv[(n * 2 + d) * 3 + l];
        }
    struct glia_param *pw = &B.l.params[0];
    struct glia_tensor *din[1] = {NULL};
    bool acc[1] = {false};
    struct glia_bwd ba = {in, 1, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
    for (int add = 0; add < 2; add++) {
        fill(pw->grad, add ? 1.0f : NAN);
        pw->grad_unset = !add;
        CU_ASSERT_FATAL(B.kernel->backward(&B.l, &ba) == GLIA_OK);
        const float *g = glia_tensor_f32(pw->grad);
        for (int i = 0; i < 8; i++) {
            if (g[i] != want[i] + (add ? 1.0f : 0.0f))
                printf("\n  padding_idx %d, %s, add %d: dweight[%d] = %g, want %g\n", pad, glia_memory_format_name(f),
                       add, i, g[i], want[i] + add);
            CU_ASSERT_EQUAL(g[i], want[i] + (add ? 1.0f : 0.0f));
        }
    }
    if (pad == 0) CU_ASSERT(want[0] == 0 && want[1] == 0);
    glia_tensor_release(tok);
    glia_tensor_release(y);
    glia_tensor_release(dy);
    layer_unbuild(&B);
    glia_context_free(ctx);
}

static void test_embedding_values(void)
{
    for (int f = 0; f < 2; f++) {
        check_embedding_values(0, formats[f]);
        check_embedding_values(-1, formats[f]);
        check_embedding_values(2, formats[f]);
    }
}

/* output = sequence with the table and tokens of check_embedding_values: y(n, l, :) = weight[tok(n, l)], dweight
 * gathered from dy (N, L, dim), padding_idx's row none; init_std sets the init. */
static void test_embedding_sequence_values(void)
{
    struct glia_shape ts = S(2, 2, 3, 0, 0), os;
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, "[e]\ntype = embedding\nvocab = 4\ndim = 2\npadding_idx = 3\noutput = sequence\ninit_std = 0.02\n",
                &ts, 1, &B);
    CU_ASSERT_FATAL(B.type->infer_shape(&B.l, &ts, 1, &os) == GLIA_OK);
    CU_ASSERT(os.ndim == 3 && os.dim[0] == 2 && os.dim[1] == 3 && os.dim[2] == 2);
    CU_ASSERT(B.l.params[0].init.kind == GLIA_INIT_NORMAL && B.l.params[0].init.a == 0.02);
    const float w[8] = {10, 11, 20, 21, 30, 31, 40, 41};
    memcpy(glia_tensor_f32(B.l.params[0].value), w, sizeof w);
    const int32_t tv[6] = {1, 0, 3, 2, 2, 0};
    struct glia_tensor *tok = tokens(B.b, 2, 3, tv), *y = tensor_as(B.b, os, GLIA_CONTIGUOUS);
    fill(y, NAN);
    const struct glia_tensor *in[1] = {tok};
    struct glia_fwd fa = {in, 1, y, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_FATAL(B.kernel->forward(&B.l, &fa) == GLIA_OK);
    for (int i = 0; i < 6; i++)
        for (int d = 0; d < 2; d++) CU_ASSERT_EQUAL(glia_tensor_f32(y)[i * 2 + d], w[tv[i] * 2 + d]);
    float dyv[12], want[8] = {0};
    for (int i = 0; i < 12; i++) dyv[i] = (float)(10 * (i / 2) + i % 2 + 1);  /* dy(n, l, d) */
    for (int i = 0; i < 6; i++)
        for (int d = 0; d < 2 && tv[i] != 3; d++) want[tv[i] * 2 + d] += dyv[i * 2 + d];
    struct glia_tensor *dy = filled(B.b, os, GLIA_CONTIGUOUS, dyv);
    struct glia_param *pw = &B.l.params[0];
    struct glia_tensor *din[1] = {NULL};
    bool acc[1] = {false};
    struct glia_bwd ba = {in, 1, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
    for (int add = 0; add < 2; add++) {
        fill(pw->grad, add ? 1.0f : NAN);
        pw->grad_unset = !add;
        CU_ASSERT_FATAL(B.kernel->backward(&B.l, &ba) == GLIA_OK);
        for (int i = 0; i < 8; i++) CU_ASSERT_EQUAL(glia_tensor_f32(pw->grad)[i], want[i] + (add ? 1.0f : 0.0f));
    }
    CU_ASSERT(want[0] == 11 + 51 && want[4] == 31 + 41 && want[6] == 0 && want[7] == 0);  /* tokens 0, 2, pad 3 */
    glia_tensor_release(tok);
    glia_tensor_release(y);
    glia_tensor_release(dy);
    layer_unbuild(&B);
    glia_context_free(ctx);
}

/* ---- position_embedding: values ---- */

/* max_positions 4, C 2, x (2, 3, 2) = 100n + 10t + c, weight row t = (t + 0.5, -t); dy (2, 3, 2) = 1000n + 10t + c:
 * y = x + weight[t]; dx written or added; dweight rows 0..2 the sums over n, row 3 zeros when unset, kept when
 * set. A batch longer than max_positions is refused naming the layer. */
static void test_position_embedding_values(void)
{
    struct glia_shape xs = S(3, 2, 3, 2, 0);
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, "[p]\ntype = position_embedding\nmax_positions = 4\n", &xs, 1, &B);
    struct glia_param *pw = &B.l.params[0];
    CU_ASSERT(B.l.n_params == 1 && !strcmp(pw->name, "weight") && pw->shape.ndim == 2 && pw->shape.dim[0] == 4 &&
              pw->shape.dim[1] == 2 && pw->decay);
    CU_ASSERT(pw->init.kind == GLIA_INIT_NORMAL && pw->init.a == 0.02);
    float xv[12], dyv[12], wv[8];
    for (int i = 0; i < 12; i++) {
        int n = i / 6, t = i / 2 % 3, c = i % 2;
        xv[i] = (float)(100 * n + 10 * t + c);
        dyv[i] = (float)(1000 * n + 10 * t + c);
    }
    for (int t = 0; t < 4; t++) wv[2 * t] = (float)t + 0.5f, wv[2 * t + 1] = (float)-t;
    memcpy(glia_tensor_f32(pw->value), wv, sizeof wv);
    struct glia_tensor *x = filled(B.b, xs, GLIA_CONTIGUOUS, xv), *y = tensor_as(B.b, xs, GLIA_CONTIGUOUS);
    struct glia_tensor *dy = filled(B.b, xs, GLIA_CONTIGUOUS, dyv), *dx = tensor_as(B.b, xs, GLIA_CONTIGUOUS);
    fill(y, NAN);
    const struct glia_tensor *in[1] = {x};
    struct glia_fwd fa = {in, 1, y, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_FATAL(B.kernel->forward(&B.l, &fa) == GLIA_OK);
    for (int i = 0; i < 12; i++) CU_ASSERT_EQUAL(glia_tensor_f32(y)[i], xv[i] + wv[(i / 2 % 3) * 2 + i % 2]);
    struct glia_tensor *din[1] = {dx};
    for (int add = 0; add < 2; add++) {
        bool acc[1] = {add};
        struct glia_bwd ba = {in, 1, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
        fill(dx, add ? 1.0f : NAN);
        fill(pw->grad, add ? 1.0f : NAN);
        pw->grad_unset = !add;
        CU_ASSERT_FATAL(B.kernel->backward(&B.l, &ba) == GLIA_OK);
        for (int i = 0; i < 12; i++) CU_ASSERT_EQUAL(glia_tensor_f32(dx)[i], dyv[i] + (add ? 1.0f : 0.0f));
        for (int i = 0; i < 8; i++) {
            float want = i < 6 ? dyv[i] + dyv[i + 6] : 0.0f;  /* row 3: no position */
            CU_ASSERT_EQUAL(glia_tensor_f32(pw->grad)[i], want + (add ? 1.0f : 0.0f));
        }
    }
    struct glia_shape longer = S(3, 1, 5, 2, 0);
    struct glia_tensor *xl = tensor_as(B.b, longer, GLIA_CONTIGUOUS), *yl = tensor_as(B.b, longer, GLIA_CONTIGUOUS);
    const struct glia_tensor *inl[1] = {xl};
    struct glia_fwd fl = {inl, 1, yl, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fl), GLIA_ESHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "[p] position_embedding takes (N, T <= 4, 2), got 1x5x2"));
    glia_tensor_release(xl);
    glia_tensor_release(yl);
    glia_tensor_release(x);
    glia_tensor_release(y);
    glia_tensor_release(dy);
    glia_tensor_release(dx);
    layer_unbuild(&B);
    glia_context_free(ctx);
}

/* The weight's init: N(0, 1), its padding_idx row zeroed (nn.Embedding's reset_parameters), the other rows the
 * same draws as without padding; padding_idx = -1 zeroes nothing. Through glia_layer_run_new (the core's init of
 * a parameter, the layer's init_param slot after it) and through the hand-built layer of the value tests. */
static void test_embedding_padding_init(void)
{
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct glia_device cpu = {GLIA_DEVICE_CPU, 0};
    struct glia_shape ts = S(2, 2, 3, 0, 0);
    const char *inis[3] = {"[e]\ntype = embedding\nvocab = 6\ndim = 4\npadding_idx = -1\n",
                           "[e]\ntype = embedding\nvocab = 6\ndim = 4\npadding_idx = 2\n",
                           "[e]\ntype = embedding\nvocab = 6\ndim = 4\n"};  /* padding_idx 0 by default */
    const int pads[3] = {-1, 2, 0};
    float w[3][24];
    for (int k = 0; k < 3; k++) {
        struct glia_layer_run *r;
        glia_status st = glia_layer_run_new(ctx, inis[k], cpu, &ts, 1, GLIA_CONTIGUOUS, 7, &r);
        if (st) printf("\n  %s\n", glia_context_error(ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        struct glia_layer *l = glia_layer_run_layer(r);
        CU_ASSERT_FATAL(glia_tensor_to_host(l->params[0].value, w[k], sizeof w[k]) == GLIA_OK);
        glia_layer_run_free(r);
        for (int i = 0; i < 24; i++) {
            bool zero = i / 4 == pads[k];
            CU_ASSERT(zero ? w[k][i] == 0.0f && !signbit(w[k][i]) : w[k][i] != 0.0f && w[k][i] == w[0][i]);
        }
        struct built B;
        layer_build(ctx, inis[k], &ts, 1, &B);
        for (int i = 0; i < 24; i++) CU_ASSERT((glia_tensor_f32(B.l.params[0].value)[i] == 0.0f) == (i / 4 == pads[k]));
        layer_unbuild(&B);
    }
    glia_context_free(ctx);
}

/* A token outside [0, vocab) is refused with its value and position; -1 is one even with padding_idx = -1. */
static void test_embedding_out_of_range(void)
{
    struct glia_shape ts = S(2, 2, 3, 0, 0), os;
    const int32_t bad[][6] = {{1, 0, 3, 2, 2, 4}, {1, -3, 3, 2, 9, 0}, {-1, 0, 0, 0, 0, 0}};
    const char *msgs[] = {"[e] token 4 at (1, 2) of the (2, 3) batch is not in [0, 4)",
                          "[e] token -3 at (0, 1) of the (2, 3) batch is not in [0, 4)",
                          "[e] token -1 at (0, 0) of the (2, 3) batch is not in [0, 4)"};
    for (int k = 0; k < 3; k++) {
        struct built B;
        CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
        layer_build(ctx, k == 2 ? "[e]\ntype = embedding\nvocab = 4\ndim = 2\npadding_idx = -1\n"
                                : "[e]\ntype = embedding\nvocab = 4\ndim = 2\n",
                    &ts, 1, &B);
        CU_ASSERT_FATAL(B.type->infer_shape(&B.l, &ts, 1, &os) == GLIA_OK);
        struct glia_tensor *tok = tokens(B.b, 2, 3, bad[k]), *y = tensor_as(B.b, os, GLIA_CONTIGUOUS);
        const struct glia_tensor *in[1] = {tok};
        struct glia_fwd fa = {in, 1, y, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa), GLIA_EINVAL);
        if (!strstr(glia_context_error(ctx), msgs[k])) printf("\n  got: %s\n  want: %s\n", glia_context_error(ctx), msgs[k]);
        CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), msgs[k]));
        glia_tensor_release(tok);
        glia_tensor_release(y);
        layer_unbuild(&B);
        glia_context_free(ctx);
    }
}

/* The weight gradient's scatter gives the same bits with 1 and with 3 threads (many repeats of few tokens). */
static void test_embedding_deterministic(void)
{
    struct glia_shape ts = S(2, 16, 40, 0, 0), os;
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, "[e]\ntype = embedding\nvocab = 9\ndim = 5\n", &ts, 1, &B);
    CU_ASSERT_FATAL(B.type->infer_shape(&B.l, &ts, 1, &os) == GLIA_OK);
    struct glia_rng rng;
    glia__rng_seed(&rng, 3);
    int32_t tv[16 * 40];
    for (int i = 0; i < 16 * 40; i++) tv[i] = (int32_t)(glia__rng_next(&rng) % 9);
    struct glia_tensor *tok = tokens(B.b, 16, 40, tv), *y = tensor_as(B.b, os, GLIA_CONTIGUOUS);
    struct glia_tensor *dy = tensor_as(B.b, os, GLIA_CONTIGUOUS);
    float *d = glia_tensor_f32(dy);
    for (int64_t i = 0; i < glia_tensor_numel(dy); i++) d[i] = (float)glia__rng_normal(&rng);
    const struct glia_tensor *in[1] = {tok};
    struct glia_tensor *din[1] = {NULL};
    bool acc[1] = {false};
    struct glia_fwd fa = {in, 1, y, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    struct glia_bwd ba = {in, 1, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
    float g[2][45];
    int keep = omp_get_max_threads();
    for (int r = 0; r < 2; r++) {
        omp_set_num_threads(r ? 3 : 1);
        B.l.params[0].grad_unset = true;
        CU_ASSERT_FATAL(B.kernel->forward(&B.l, &fa) == GLIA_OK);
        CU_ASSERT_FATAL(B.kernel->backward(&B.l, &ba) == GLIA_OK);
        memcpy(g[r], glia_tensor_f32(B.l.params[0].grad), sizeof g[r]);
    }
    omp_set_num_threads(keep);
    CU_ASSERT(memcmp(g[0], g[1], sizeof g[0]) == 0);
    CU_ASSERT(g[0][0] == 0 && g[0][4] == 0);  /* padding row */
    glia_tensor_release(tok);
    glia_tensor_release(y);
    glia_tensor_release(dy);
    layer_unbuild(&B);
    glia_context_free(ctx);
}

/* ---- seq_pool: values ---- */

/* Features (3, 2, 1, 4), tokens (3, 4) = (5, 0, 7, 0), (0, 0, 0, 0), (1, 2, 3, 4), pad_id 0: sample 0 pools
 * positions 0 and 2, sample 1 nothing, sample 2 all four. Max ties go to the first position. */
static void check_seq_pool_values(bool max, enum glia_memory_format f)
{
    const float xv[24] = {1, 100, 3, -100, /**/ -2, 50, -2, 9,   /* n 0 */
                          7, 8, 9, 10,     /**/ -7, -8, -9, -1,  /* n 1: padding only */
                          1, 3, 3, 2,      /**/ -1, -5, -0.5f, -4};
    const int32_t tv[12] = {5, 0, 7, 0, 0, 0, 0, 0, 1, 2, 3, 4};
    const float dyv[6] = {0.5f, -1, 2, 3, 4, -8};
    const float y_mean[6] = {2, -2, 0, 0, 2.25f, -2.625f}, y_max[6] = {3, -2, 0, 0, 3, -0.5f};
    const float dx_mean[24] = {0.25f, 0, 0.25f, 0, -0.5f, 0, -0.5f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, -2, -2, -2, -2};
    const float dx_max[24] = {0, 0, 0.5f, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, -8, 0};
    struct glia_shape in[2] = {S(4, 3, 2, 1, 4), S(2, 3, 4, 0, 0)}, os;
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, max ? "[p]\ntype = seq_pool\nmode = max\n" : "[p]\ntype = seq_pool\n", in, 2, &B);
    CU_ASSERT_FATAL(B.type->infer_shape(&B.l, in, 2, &os) == GLIA_OK);
    CU_ASSERT(os.ndim == 2 && os.dim[0] == 3 && os.dim[1] == 2);
    CU_ASSERT_EQUAL(B.type->flops(&B.l, in, 2), 24);
    struct glia_tensor *x = filled(B.b, in[0], f, xv), *tok = tokens(B.b, 3, 4, tv);
    struct glia_tensor *y = tensor_as(B.b, os, GLIA_CONTIGUOUS), *dy = filled(B.b, os, GLIA_CONTIGUOUS, dyv);
    struct glia_tensor *dx = tensor_as(B.b, in[0], f);
    fill(y, NAN);
    const struct glia_tensor *xi[2] = {x, tok};
    struct glia_tensor *din[2] = {dx, NULL};
    struct glia_fwd fa = {xi, 2, y, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_FATAL(B.kernel->forward(&B.l, &fa) == GLIA_OK);
    const float *yw = max ? y_max : y_mean, *dxw = max ? dx_max : dx_mean;
    for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(glia_tensor_f32(y)[i], yw[i]);
    for (int add = 0; add < 2; add++) {
        bool acc[2] = {add, add};
        struct glia_bwd ba = {xi, 2, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
        fill(dx, add ? 1.0f : NAN);
        CU_ASSERT_FATAL(B.kernel->backward(&B.l, &ba) == GLIA_OK);
        for (int n = 0; n < 3; n++)
            for (int c = 0; c < 2; c++)
                for (int l = 0; l < 4; l++) {
                    float got = at4(dx, n, c, 0, l), want = dxw[(n * 2 + c) * 4 + l] + (add ? 1.0f : 0.0f);
                    if (got != want)
                        printf("\n  %s %s add %d: dx(%d, %d, 0, %d) = %g, want %g\n", max ? "max" : "mean",
                               glia_memory_format_name(f), add, n, c, l, got, want);
                    CU_ASSERT_EQUAL(got, want);
                }
    }
    /* eval gives the same values and keeps nothing: a max backward after it is refused */
    fill(y, NAN);
    fa.train = false;
    CU_ASSERT_FATAL(B.kernel->forward(&B.l, &fa) == GLIA_OK);
    for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(glia_tensor_f32(y)[i], yw[i]);
    if (max) {
        bool acc[2] = {false, false};
        struct glia_bwd ba = {xi, 2, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
        CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba), GLIA_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "[p] seq_pool (max) backward needs a training forward"));
    }
    struct glia_tensor *all[] = {x, tok, y, dy, dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) glia_tensor_release(all[i]);
    layer_unbuild(&B);
    glia_context_free(ctx);
}

static void test_seq_pool_values(void)
{
    for (int f = 0; f < 2; f++) {
        check_seq_pool_values(false, formats[f]);
        check_seq_pool_values(true, formats[f]);
    }
}

/* ---- a smaller L than at create ---- */

/* A tensor of shape s (format f; i32 when ints) viewed at the start of storage sized for shape big, as the core
 * hands a batch of shorter sequences to a layer built for the longest. */
static struct glia_tensor *view_in(struct glia_backend *b, struct glia_shape big, struct glia_shape s,
                                   enum glia_memory_format f, bool ints)
{
    struct glia_tensor *flat, *v;
    struct glia_shape fs = S(1, glia_shape_numel(&big), 0, 0, 0);
    CU_ASSERT_FATAL(glia_tensor_new(b, ints ? GLIA_I32 : GLIA_F32, &fs, &flat) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_view_as(flat, 0, &s, s.ndim == 4 ? f : GLIA_CONTIGUOUS, &v) == GLIA_OK);
    glia_tensor_release(flat);
    return v;
}

/* The layer of `ini` built for inputs big, then run (training forward, backward in write mode) on inputs small
 * held in views of big-sized storage, gives the bits of the same layer built for small on tensors of their own
 * with the same weights. Input 1 holds token ids in [0, 4) when n_in == 2 (seq_pool), input 0 does when n_in
 * == 1 (embedding). */
static void check_shrink(const char *ini, const struct glia_shape *big, const struct glia_shape *small, int n_in,
                         enum glia_memory_format f)
{
    struct built A, B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, ini, big, n_in, &A);
    layer_build(ctx, ini, small, n_in, &B);
    struct glia_shape obig, os, os2;
    CU_ASSERT_FATAL(A.type->infer_shape(&A.l, big, n_in, &obig) == GLIA_OK);
    CU_ASSERT_FATAL(A.type->infer_shape(&A.l, small, n_in, &os) == GLIA_OK);
    CU_ASSERT_FATAL(B.type->infer_shape(&B.l, small, n_in, &os2) == GLIA_OK);
    CU_ASSERT_FATAL(glia_shape_equal(&os, &os2));
    struct glia_rng rng;
    glia__rng_seed(&rng, 17);
    for (int p = 0; p < A.l.n_params; p++) {
        float *w = glia_tensor_f32(A.l.params[p].value);
        for (int64_t i = 0; i < glia_tensor_numel(A.l.params[p].value); i++) w[i] = (float)glia__rng_normal(&rng);
        memcpy(glia_tensor_f32(B.l.params[p].value), w, glia_tensor_nbytes(A.l.params[p].value));
        A.l.params[p].grad_unset = B.l.params[p].grad_unset = true;
    }
    struct glia_tensor *xa[2], *xb[2], *dxa[2] = {NULL, NULL}, *dxb[2] = {NULL, NULL};
    for (int k = 0; k < n_in; k++) {
        bool ints = k == n_in - 1;
        xa[k] = view_in(A.b, big[k], small[k], f, ints);
        xb[k] = view_in(B.b, small[k], small[k], f, ints);
        if (ints) {
            int32_t *ta = glia_tensor_i32(xa[k]), *tb = glia_tensor_i32(xb[k]);
            for (int64_t i = 0; i < glia_shape_numel(&small[k]); i++) ta[i] = tb[i] = (int32_t)(glia__rng_next(&rng) % 4);
            continue;
        }
        float *v = malloc(sizeof(float) * (size_t)glia_shape_numel(&small[k]));
        for (int64_t i = 0; i < glia_shape_numel(&small[k]); i++) v[i] = (float)glia__rng_normal(&rng);
        struct glia_tensor *h = filled(A.b, small[k], f, v);
        CU_ASSERT_FATAL(glia_tensor_convert(xa[k], h, false) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_convert(xb[k], h, false) == GLIA_OK);
        glia_tensor_release(h);
        free(v);
        dxa[k] = view_in(A.b, big[k], small[k], f, false);
        dxb[k] = view_in(B.b, small[k], small[k], f, false);
    }
    struct glia_tensor *ya = view_in(A.b, obig, os, f, false), *yb = view_in(B.b, os, os, f, false);
    struct glia_tensor *dya = view_in(A.b, obig, os, f, false), *dyb = view_in(B.b, os, os, f, false);
    float *g = malloc(sizeof(float) * (size_t)glia_shape_numel(&os));
    for (int64_t i = 0; i < glia_shape_numel(&os); i++) g[i] = (float)glia__rng_normal(&rng);
    struct glia_tensor *h = filled(A.b, os, f, g);
    CU_ASSERT_FATAL(glia_tensor_convert(dya, h, false) == GLIA_OK && glia_tensor_convert(dyb, h, false) == GLIA_OK);
    glia_tensor_release(h);
    free(g);
    const struct glia_tensor *ia[2] = {xa[0], n_in > 1 ? xa[1] : NULL}, *ib[2] = {xb[0], n_in > 1 ? xb[1] : NULL};
    bool acc[2] = {false, false};
    struct glia_fwd fa = {ia, n_in, ya, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL}, fb = {ib, n_in, yb, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    struct glia_bwd ba = {ia, n_in, ya, dya, dxa, acc, NULL, NULL, NULL, NULL, false}, bb = {ib, n_in, yb, dyb, dxb, acc, NULL, NULL, NULL, NULL, false};
    CU_ASSERT_FATAL(A.kernel->forward(&A.l, &fa) == GLIA_OK && A.kernel->backward(&A.l, &ba) == GLIA_OK);
    CU_ASSERT_FATAL(B.kernel->forward(&B.l, &fb) == GLIA_OK && B.kernel->backward(&B.l, &bb) == GLIA_OK);
    double d = max_diff(ya, yb);
    for (int k = 0; k < n_in; k++)
        if (dxa[k]) d = fmax(d, max_diff(dxa[k], dxb[k]));
    for (int p = 0; p < A.l.n_params; p++) d = fmax(d, max_diff(A.l.params[p].grad, B.l.params[p].grad));
    if (d != 0) printf("\n  %s (%s): built for the longer L, differs by %g\n", ini, glia_memory_format_name(f), d);
    CU_ASSERT_EQUAL(d, 0);
    for (int k = 0; k < n_in; k++) {
        glia_tensor_release(xa[k]), glia_tensor_release(xb[k]);
        glia_tensor_release(dxa[k]), glia_tensor_release(dxb[k]);
    }
    glia_tensor_release(ya), glia_tensor_release(yb), glia_tensor_release(dya), glia_tensor_release(dyb);
    layer_unbuild(&A);
    layer_unbuild(&B);
    glia_context_free(ctx);
}

static void test_shorter_sequences(void)
{
    struct glia_shape ebig = S(2, 3, 8, 0, 0), esmall = S(2, 3, 5, 0, 0);
    struct glia_shape pbig[2] = {S(4, 3, 4, 1, 8), S(2, 3, 8, 0, 0)}, psmall[2] = {S(4, 3, 4, 1, 5), S(2, 3, 5, 0, 0)};
    for (int f = 0; f < 2; f++) {
        check_shrink("[e]\ntype = embedding\nvocab = 4\ndim = 6\n", &ebig, &esmall, 1, formats[f]);
        check_shrink("[p]\ntype = seq_pool\n", pbig, psmall, 2, formats[f]);
        check_shrink("[p]\ntype = seq_pool\nmode = max\n", pbig, psmall, 2, formats[f]);
    }
}

/* ---- refusals ---- */

/* The seq_pool layer of `ini` with these two input shapes must be refused with want and a message holding msg. */
static void expect_error2(const char *ini, struct glia_shape a, struct glia_shape b, glia_status want, const char *msg)
{
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct glia_shape in[2] = {a, b};
    struct glia_gradcheck_options o = {.struct_size = sizeof o, .int_inputs = 2, .int_high = 3};
    glia_status st = glia_layer_gradcheck_ex(ctx, ini, in, 2, &o, 1, 1e-2, NULL);
    CU_ASSERT_EQUAL(st, want);
    if (st != want || !strstr(glia_context_error(ctx), msg))
        printf("\n  got %s: %s\n  want: %s\n", glia_status_name(st), glia_context_error(ctx), msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), msg));
    glia_context_free(ctx);
}

static void test_config_errors(void)
{
    expect_error("[e]\ntype = embedding\ndim = 4\n", S(2, 2, 3, 0, 0), GLIA_ECONFIG, "[e] vocab: missing required key");
    expect_error("[e]\ntype = embedding\nvocab = 5\n", S(2, 2, 3, 0, 0), GLIA_ECONFIG, "[e] dim: missing required key");
    expect_error("[e]\ntype = embedding\nvocab = 5\ndim = 4\npadding_idx = 5\n", S(2, 2, 3, 0, 0), GLIA_ECONFIG,
                 "gradcheck.ini:5: [e] padding_idx: 5 is not a token id: -1 (none) or in [0, 5)");
    expect_error("[e]\ntype = embedding\nvocab = 5\ndim = 4\npadding_idx = -2\n", S(2, 2, 3, 0, 0), GLIA_ECONFIG,
                 "gradcheck.ini:5: [e] padding_idx: ");
    expect_error("[e]\ntype = embedding\nvocab = 0\ndim = 4\n", S(2, 2, 3, 0, 0), GLIA_ECONFIG, "gradcheck.ini:3: [e] vocab: ");
    expect_error("[e]\ntype = embedding\nvocab = 5\ndim = 4\n", S(4, 2, 1, 28, 28), GLIA_ESHAPE,
                 "gradcheck.ini:1: [e] embedding takes the token batch (N, L) of a [data] format = tokens dataset, "
                 "got 2x1x28x28");
    expect_error("[p]\ntype = seq_pool\n", S(4, 2, 3, 1, 5), GLIA_ESHAPE,
                 "gradcheck.ini:1: [p] inputs: seq_pool takes 2 inputs (features (N, C, 1, L), then the token batch");
    expect_error2("[p]\ntype = seq_pool\n", S(4, 2, 3, 2, 5), S(2, 2, 5, 0, 0), GLIA_ESHAPE,
                  "gradcheck.ini:1: [p] seq_pool expects features (N, C, 1, L) as first input, got 2x3x2x5");
    expect_error2("[p]\ntype = seq_pool\n", S(2, 2, 5, 0, 0), S(2, 2, 5, 0, 0), GLIA_ESHAPE,
                  "seq_pool expects features (N, C, 1, L) as first input, got 2x5");
    expect_error2("[p]\ntype = seq_pool\n", S(4, 2, 3, 1, 5), S(4, 2, 1, 1, 5), GLIA_ESHAPE,
                  "seq_pool expects the token batch (N, L) of a [data] format = tokens dataset as second input, got 2x1x1x5");
    expect_error2("[p]\ntype = seq_pool\n", S(4, 2, 3, 1, 5), S(2, 2, 4, 0, 0), GLIA_ESHAPE,
                  "seq_pool: features 2x3x1x5 and tokens 2x4 differ in N or L");
    expect_error2("[p]\ntype = seq_pool\n", S(4, 2, 3, 1, 5), S(2, 3, 5, 0, 0), GLIA_ESHAPE,
                  "seq_pool: features 2x3x1x5 and tokens 3x5 differ in N or L");
    expect_error("[e]\ntype = embedding\nvocab = 5\ndim = 4\noutput = channels\n", S(2, 2, 3, 0, 0), GLIA_ECONFIG,
                 "gradcheck.ini:5: [e] output: ");
    expect_error("[e]\ntype = embedding\nvocab = 5\ndim = 4\noutput = sequence\n", S(3, 2, 3, 4, 0), GLIA_ESHAPE,
                 "gradcheck.ini:1: [e] embedding takes the token batch (N, L) of a [data] format = tokens dataset, got 2x3x4");
    expect_error("[p]\ntype = position_embedding\nmax_positions = 4\n", S(3, 2, 5, 3, 0), GLIA_ESHAPE,
                 "gradcheck.ini:3: [p] max_positions: position_embedding: the input 2x5x3 has T = 5 positions, more than "
                 "max_positions = 4");
    expect_error("[p]\ntype = position_embedding\nmax_positions = 4\n", S(4, 2, 3, 1, 4), GLIA_ESHAPE,
                 "gradcheck.ini:1: [p] position_embedding takes a sequence (N, T, C), got 2x3x1x4");
    expect_error("[p]\ntype = position_embedding\n", S(3, 2, 3, 4, 0), GLIA_ECONFIG,
                 "[p] max_positions: missing required key");
    expect_error("[p]\ntype = position_embedding\nmax_positions = 0\n", S(3, 2, 3, 4, 0), GLIA_ECONFIG,
                 "gradcheck.ini:3: [p] max_positions: ");
    expect_error2("[p]\ntype = seq_pool\nmode = min\n", S(4, 2, 3, 1, 5), S(2, 2, 5, 0, 0), GLIA_ECONFIG,
                  "gradcheck.ini:3: [p] mode: ");
}

/* f32 where token ids belong: the forward refuses it naming the layer (also through glia_layer_run, which
 * feeds f32 inputs only). */
static void test_dtype_errors(void)
{
    struct glia_shape ts = S(2, 2, 3, 0, 0), os;
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, "[e]\ntype = embedding\nvocab = 4\ndim = 2\n", &ts, 1, &B);
    CU_ASSERT_FATAL(B.type->infer_shape(&B.l, &ts, 1, &os) == GLIA_OK);
    struct glia_tensor *x = tensor_as(B.b, ts, GLIA_CONTIGUOUS), *y = tensor_as(B.b, os, GLIA_CONTIGUOUS);
    fill(x, 1.0f);
    const struct glia_tensor *in[1] = {x};
    struct glia_fwd fa = {in, 1, y, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "[e] embedding takes i32 token ids (N, L), got f32 2x3"));
    glia_tensor_release(x);
    glia_tensor_release(y);
    layer_unbuild(&B);

    struct glia_shape ps[2] = {S(4, 2, 3, 1, 4), S(2, 2, 4, 0, 0)};
    layer_build(ctx, "[p]\ntype = seq_pool\n", ps, 2, &B);
    CU_ASSERT_FATAL(B.type->infer_shape(&B.l, ps, 2, &os) == GLIA_OK);
    struct glia_tensor *f = tensor_as(B.b, ps[0], GLIA_CONTIGUOUS), *t = tensor_as(B.b, ps[1], GLIA_CONTIGUOUS);
    y = tensor_as(B.b, os, GLIA_CONTIGUOUS);
    fill(f, 1.0f);
    fill(t, 1.0f);
    const struct glia_tensor *pin[2] = {f, t};
    struct glia_fwd pa = {pin, 2, y, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &pa), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "[p] seq_pool takes i32 token ids (N, L) as second input, got f32 2x4"));
    glia_tensor_release(f);
    glia_tensor_release(t);
    glia_tensor_release(y);
    layer_unbuild(&B);

    struct glia_layer_run *r;
    CU_ASSERT_FATAL(glia_layer_run_new(ctx, "[e]\ntype = embedding\nvocab = 4\ndim = 2\n",
                                       (struct glia_device){GLIA_DEVICE_CPU, 0}, &ts, 1, GLIA_CONTIGUOUS, 1, &r) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_layer_run_forward(r, true), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "[e] embedding takes i32 token ids"));
    CU_ASSERT_EQUAL(glia_layer_run_backward(r), GLIA_EINVAL);  /* no training forward ran */
    glia_layer_run_free(r);
    glia_context_free(ctx);
}

/* The gradient checker's integer options: checked, and read only when struct_size covers them (an ABI 1.1
 * caller's struct gives embedding f32 inputs, which it refuses). */
static void test_gradcheck_options(void)
{
    struct glia_shape ts = S(2, 2, 3, 0, 0);
    const char *ini = "[e]\ntype = embedding\nvocab = 4\ndim = 2\npadding_idx = -1\n";  /* ids 0..3 all checked */
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct glia_gradcheck_options o = {.struct_size = sizeof o, .int_inputs = 2, .int_high = 4};
    CU_ASSERT_EQUAL(glia_layer_gradcheck_ex(ctx, ini, &ts, 1, &o, 1, 1e-2, NULL), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "gradcheck: int_inputs 0x2 names an input beyond the 1 given"));
    o.int_inputs = 1;
    o.int_high = 0;
    CU_ASSERT_EQUAL(glia_layer_gradcheck_ex(ctx, ini, &ts, 1, &o, 1, 1e-2, NULL), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "gradcheck: int_inputs needs int_high > 0, got 0"));
    o.int_high = 4;
    o.struct_size = (uint32_t)offsetof(struct glia_gradcheck_options, int_inputs);
    CU_ASSERT_EQUAL(glia_layer_gradcheck_ex(ctx, ini, &ts, 1, &o, 1, 1e-2, NULL), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "embedding takes i32 token ids"));
    o.struct_size = sizeof o;
    CU_ASSERT_EQUAL(glia_layer_gradcheck_ex(ctx, ini, &ts, 1, &o, 1, 1e-2, NULL), GLIA_OK);
    glia_context_free(ctx);
}

GLIA_TEST_MAIN("seq", GLIA_TEST(test_embedding_gradcheck), GLIA_TEST(test_seq_pool_gradcheck),
               GLIA_TEST(test_embedding_sequence_gradcheck), GLIA_TEST(test_position_embedding_gradcheck),
               GLIA_TEST(test_embedding_sequence_values), GLIA_TEST(test_position_embedding_values),
               GLIA_TEST(test_embedding_values), GLIA_TEST(test_embedding_padding_init), GLIA_TEST(test_embedding_out_of_range),
               GLIA_TEST(test_embedding_deterministic), GLIA_TEST(test_seq_pool_values),
               GLIA_TEST(test_shorter_sequences), GLIA_TEST(test_config_errors), GLIA_TEST(test_dtype_errors),
               GLIA_TEST(test_gradcheck_options))
