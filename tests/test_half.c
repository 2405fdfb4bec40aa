/* tests/test_half.c — half activations on the CPU: f32 <-> bf16 / f16 rounding, glia_tensor_convert between
 * dtypes (and formats, accumulating), the [graph] half_activations pass and plan with a fixture kernel that takes
 * bf16 (half_softsign), and a model trained with it. Not the CUDA kernels (test_cuda_*.c, in the emulator). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "modelutil.h"
#include <glia/half.h>
#include "parts.h"

/* ---- single values ---- */

static float pow2(int e) { return ldexpf(1.0f, e); }

static void test_bf16_rounding(void)
{
    CU_ASSERT_EQUAL(glia_f32_to_bf16(1.0f), 0x3f80);
    CU_ASSERT_EQUAL(glia_f32_to_bf16(-2.0f), 0xc000);
    CU_ASSERT_EQUAL(glia_f32_to_bf16(1.0f + pow2(-8)), 0x3f80);                 /* a tie: to the even 1.0 */
    CU_ASSERT_EQUAL(glia_f32_to_bf16(1.0f + 3 * pow2(-8)), 0x3f82);             /* a tie: up, to the even */
    CU_ASSERT_EQUAL(glia_f32_to_bf16(1.0f + pow2(-8) + pow2(-20)), 0x3f81);     /* above the tie */
    CU_ASSERT_EQUAL(glia_f32_to_bf16(INFINITY), 0x7f80);
    CU_ASSERT_EQUAL(glia_f32_to_bf16(3.4028235e38f), 0x7f80);                  /* past the largest bf16's half-way */
    CU_ASSERT(isnan(glia_bf16_to_f32(glia_f32_to_bf16(NAN))));
    CU_ASSERT(isnan(glia_bf16_to_f32(glia_f32_to_bf16(glia_bits_f32(0x7f800001u)))));  /* not rounded to inf */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {  /* every bf16 but the NaNs comes back as it was */
        float f = glia_bf16_to_f32((uint16_t)h);
        if (!isnan(f)) bad += glia_f32_to_bf16(f) != h;
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_f16_rounding(void)
{
    CU_ASSERT_EQUAL(glia_f32_to_f16(1.0f), 0x3c00);
    CU_ASSERT_EQUAL(glia_f32_to_f16(-2.0f), 0xc000);
    CU_ASSERT_EQUAL(glia_f32_to_f16(65504.0f), 0x7bff);
    CU_ASSERT_EQUAL(glia_f32_to_f16(65519.0f), 0x7bff);
    CU_ASSERT_EQUAL(glia_f32_to_f16(65520.0f), 0x7c00);                         /* the tie rounds to infinity */
    CU_ASSERT_EQUAL(glia_f32_to_f16(1.0f + pow2(-11)), 0x3c00);
    CU_ASSERT_EQUAL(glia_f32_to_f16(1.0f + 3 * pow2(-11)), 0x3c02);
    CU_ASSERT_EQUAL(glia_f32_to_f16(pow2(-14)), 0x0400);                        /* the smallest normal */
    CU_ASSERT_EQUAL(glia_f32_to_f16(pow2(-24)), 0x0001);                        /* the smallest subnormal */
    CU_ASSERT_EQUAL(glia_f32_to_f16(pow2(-25)), 0x0000);                        /* a tie: to zero */
    CU_ASSERT_EQUAL(glia_f32_to_f16(1.5f * pow2(-25)), 0x0001);
    CU_ASSERT_EQUAL(glia_f32_to_f16(3 * pow2(-25)), 0x0002);                    /* 1.5 units: to the even 2 */
    CU_ASSERT_EQUAL(glia_f32_to_f16(1023.5f * pow2(-24)), 0x0400);              /* a subnormal carrying into normal */
    CU_ASSERT_EQUAL(glia_f32_to_f16(-pow2(-30)), 0x8000);
    CU_ASSERT_EQUAL(glia_f32_to_f16(-INFINITY), 0xfc00);
    CU_ASSERT(isnan(glia_f16_to_f32(glia_f32_to_f16(NAN))));
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = glia_f16_to_f32((uint16_t)h);
        if (!isnan(f)) bad += glia_f32_to_f16(f) != h;
    }
    CU_ASSERT_EQUAL(bad, 0);
#ifdef __FLT16_MAX__
    /* against the compiler's own conversion, which rounds to nearest even, over random bit patterns */
    uint64_t z = 12345;
    bad = 0;
    for (int i = 0; i < 1000000; i++) {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        float f = glia_bits_f32((uint32_t)(z >> 32));
        _Float16 h = (_Float16)f;
        uint16_t want;
        memcpy(&want, &h, sizeof want);
        if (!isnan(f)) bad += glia_f32_to_f16(f) != want;
        bad += !isnan(f) && glia_f16_to_f32(want) != (float)h;
    }
    CU_ASSERT_EQUAL(bad, 0);
#endif
}

/* ---- tensors ---- */

static struct glia_tensor *tensor(struct glia_backend *b, enum glia_dtype t, struct glia_shape s,
                                  enum glia_memory_format f)
{
    struct glia_tensor *whole, *v;
    CU_ASSERT_FATAL(glia_tensor_new(b, t, &s, &whole) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_view_as(whole, 0, &s, f, &v) == GLIA_OK);
    glia_tensor_release(whole);
    return v;
}

static void test_convert_dtypes(void)
{
    struct glia_context *c;
    struct glia_backend *b;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_get(c, (struct glia_device){GLIA_DEVICE_CPU, 0}, &b) == GLIA_OK);
    CU_ASSERT(glia_backend_can_convert(b));
    struct glia_shape s = glia_shape_make(4, (int64_t[]){2, 3, 4, 5});
    struct glia_tensor *x = tensor(b, GLIA_F32, s, GLIA_CONTIGUOUS), *h = tensor(b, GLIA_BF16, s, GLIA_CHANNELS_LAST);
    struct glia_tensor *y = tensor(b, GLIA_F32, s, GLIA_CONTIGUOUS), *g = tensor(b, GLIA_F16, s, GLIA_CONTIGUOUS);
    float *xd = x->data, *yd = y->data;
    for (int i = 0; i < 120; i++) xd[i] = 1.0f + (float)i / 7.0f + pow2(-9);  /* not bf16 values: they round */
    /* f32 NCHW -> bf16 NHWC: element (n,c,h,w) of x, rounded, where NHWC keeps it */
    CU_ASSERT_EQUAL(glia_tensor_convert(h, x, false), GLIA_OK);
    const uint16_t *hd = h->data;
    int bad = 0;
    for (int n = 0; n < 2; n++)
        for (int ch = 0; ch < 3; ch++)
            for (int r = 0; r < 4; r++)
                for (int w = 0; w < 5; w++)
                    bad += hd[((n * 4 + r) * 5 + w) * 3 + ch] != glia_f32_to_bf16(xd[((n * 3 + ch) * 4 + r) * 5 + w]);
    CU_ASSERT_EQUAL(bad, 0);
    /* back into f32 NCHW, accumulating: y = y + bf16(x) */
    for (int i = 0; i < 120; i++) yd[i] = 0.5f;
    CU_ASSERT_EQUAL(glia_tensor_convert(y, h, true), GLIA_OK);
    bad = 0;
    for (int i = 0; i < 120; i++) bad += yd[i] != 0.5f + glia_bf16_to_f32(glia_f32_to_bf16(xd[i]));
    CU_ASSERT_EQUAL(bad, 0);
    /* f16 += f32, the sum rounded once */
    uint16_t *gd = g->data;
    for (int i = 0; i < 120; i++) gd[i] = glia_f32_to_f16((float)i);
    CU_ASSERT_EQUAL(glia_tensor_convert(g, x, true), GLIA_OK);
    bad = 0;
    for (int i = 0; i < 120; i++) bad += gd[i] != glia_f32_to_f16((float)i + xd[i]);
    CU_ASSERT_EQUAL(bad, 0);
    /* bf16 NHWC -> f16 NCHW, half to half with the format */
    CU_ASSERT_EQUAL(glia_tensor_convert(g, h, false), GLIA_OK);
    bad = 0;
    for (int i = 0; i < 120; i++) bad += gd[i] != glia_f32_to_f16(glia_bf16_to_f32(glia_f32_to_bf16(xd[i])));
    CU_ASSERT_EQUAL(bad, 0);
    /* other types are refused */
    struct glia_tensor *ids = tensor(b, GLIA_I32, s, GLIA_CONTIGUOUS);
    CU_ASSERT_EQUAL(glia_tensor_convert(ids, x, false), GLIA_EINVAL);
    CU_ASSERT_EQUAL(glia_tensor_convert(h, ids, false), GLIA_EINVAL);
    CU_ASSERT_EQUAL(glia_backend_convert(b, y->data, GLIA_F32, ids->data, GLIA_I32, 1, 1, 120, 0), GLIA_EINVAL);
    struct glia_tensor *all[] = {x, h, y, g, ids};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) glia_tensor_release(all[i]);
    glia_context_free(c);
}

/* ---- the pass, the plan and a model ---- */

static char dir[512];

/* 8x8 images of 4 classes, batches of 32: flatten, fc1 (64 wide), two half_softsign layers, fc2, the loss. */
static const char *model_text(const char *graph)
{
    static char buf[4096];
    CU_ASSERT_FATAL(glia_test_idx_set(dir, sizeof dir, "half-data", 256, 96, 8, 4, 23) == 0);
    snprintf(buf, sizeof buf,
             "[plugins]\npath = %s\nload = half_softsign\n[runtime]\ndevice = cpu\nseed = 5\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 32\ntest_batch_size = 32\nworkers = 0\nshuffle = off\n"
             "[train]\nepochs = 1\noptimizer = sgd\nlr = 0.1\n[graph]\n%s"
             "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 64\n[a]\ntype = half_softsign\n"
             "[b]\ntype = half_softsign\n[fc2]\ntype = linear\noutputs = 4\n[s]\ntype = half_softsign\n"
             "[loss]\ntype = softmax_cross_entropy\n",
             glia_test_fixtures(), dir, dir, dir, dir, graph);
    return buf;
}

static struct glia__node *node(struct run *r, const char *name)
{
    for (int i = 0; i < r->m->graph.n_nodes; i++)
        if (!strcmp(r->m->graph.nodes[i].layer.name, name)) return &r->m->graph.nodes[i];
    CU_FAIL_FATAL("no such node");
    return NULL;
}

static char *summary(struct run *r)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    glia_model_summary(r->m, f);
    fclose(f);
    return text;
}

/* [graph] half_activations = auto (the default) gives the precision's half type where the backend converts; off, and
 * fp32, none */
static void test_half_of(void)
{
    struct run r;
    open_run(&r, model_text(""));  /* the default: auto */
    struct glia_section *graph = glia__config_find(r.cfg, "graph");
    enum glia_precision keep0 = r.m->backend->options.precision;
    r.m->backend->options.precision = GLIA_PRECISION_FP16;
    CU_ASSERT_EQUAL(glia__half_of(r.m, graph), GLIA_F16);
    r.m->backend->options.precision = keep0;
    close_run(&r);
    open_run(&r, model_text("half_activations = auto\n"));
    graph = glia__config_find(r.cfg, "graph");
    CU_ASSERT_EQUAL(glia__half_of(r.m, graph), GLIA_F32);  /* fp32: the CPU refuses the others */
    CU_ASSERT_EQUAL(node(&r, "a")->out_dtype, GLIA_F32);
    enum glia_precision keep = r.m->backend->options.precision;
    r.m->backend->options.precision = GLIA_PRECISION_BF16;  /* as a device that takes it would be configured */
    CU_ASSERT_EQUAL(glia__half_of(r.m, graph), GLIA_BF16);
    r.m->backend->options.precision = GLIA_PRECISION_FP16;
    CU_ASSERT_EQUAL(glia__half_of(r.m, graph), GLIA_F16);
    r.m->backend->options.precision = keep;
    close_run(&r);
    open_run(&r, model_text("half_activations = off\n"));
    graph = glia__config_find(r.cfg, "graph");
    r.m->backend->options.precision = GLIA_PRECISION_BF16;
    CU_ASSERT_EQUAL(glia__half_of(r.m, graph), GLIA_F32);
    r.m->backend->options.precision = keep;
    close_run(&r);
    expect_build_error(model_text("half_activations = maybe\n"), "[graph] half_activations");
}

static void test_pass_and_plan(void)
{
    struct run r;
    open_run(&r, model_text(""));
    struct glia__act_plan p32, p16;
    CU_ASSERT_FATAL(glia__act_plan(r.m, 32, 32, &p32) == GLIA_OK);
    glia__plan_dtypes(r.m, GLIA_BF16);
    struct glia__node *a = node(&r, "a"), *b = node(&r, "b"), *fc2 = node(&r, "fc2"), *s = node(&r, "s");
    /* a and b take bf16; fc2 (linear, no flag) f32; s feeds the loss, whose kernel takes half logits: bf16 too, and
     * the loss reads them as they are (its own output, the loss, f32) */
    struct glia__node *loss = node(&r, "loss");
    CU_ASSERT_EQUAL(a->out_dtype, GLIA_BF16);
    CU_ASSERT_EQUAL(b->out_dtype, GLIA_BF16);
    CU_ASSERT_EQUAL(fc2->out_dtype, GLIA_F32);
    CU_ASSERT_EQUAL(s->out_dtype, GLIA_BF16);
    CU_ASSERT_EQUAL(loss->out_dtype, GLIA_F32);
    CU_ASSERT_EQUAL(loss->in_dtype[0], GLIA_BF16);
    CU_ASSERT_EQUAL(loss->edge[0], GLIA__EDGE_DIRECT);
    CU_ASSERT_EQUAL(node(&r, "fc1")->out_dtype, GLIA_F32);
    CU_ASSERT_EQUAL(a->edge[0], GLIA__EDGE_CONVERT);  /* fc1's f32 into bf16 */
    CU_ASSERT_EQUAL(a->in_dtype[0], GLIA_BF16);
    CU_ASSERT_EQUAL(b->edge[0], GLIA__EDGE_DIRECT);
    CU_ASSERT_EQUAL(fc2->edge[0], GLIA__EDGE_CONVERT);  /* bf16 back into f32 */
    CU_ASSERT_EQUAL(fc2->in_dtype[0], GLIA_F32);
    CU_ASSERT_EQUAL(s->edge[0], GLIA__EDGE_CONVERT);  /* fc2's f32 into bf16 */
    char *text = summary(&r);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "half activations: a converts its input from fc1 (f32 -> bf16)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "half activations: fc2 converts its input from b (bf16 -> f32)"));
    CU_ASSERT_PTR_NULL(strstr(text, "memory format:"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "64 bf16"));
    free(text);
    /* The plan's floats without sharing, at batch 32 (each buffer a multiple of 64 floats here): flatten's output
     * (32 x 64, no gradient), fc1's output and gradient (2048 each), a's and b's (2048 each in f32, 1024 in bf16),
     * fc2's (128 each) and s's output (128 in f32, 64 in bf16: the loss writes its gradient over it,
     * GLIA_KERNEL_GRAD_IN_PLACE), the loss's (64); bf16 adds a's converted input and its gradient (1024 each), fc2's
     * (2048 each) and s's (64 each). */
    CU_ASSERT_FATAL(glia__act_plan(r.m, 32, 32, &p16) == GLIA_OK);
    CU_ASSERT_EQUAL(p32.train_unshared, 2048 + 2 * 2048 + 4 * 2048 + 3 * 128 + 64);
    CU_ASSERT_EQUAL(p16.train_unshared,
                    2048 + 2 * 2048 + 4 * 1024 + 2 * 128 + 64 + 64 + 2 * 1024 + 2 * 2048 + 2 * 64);
    /* evaluation: the outputs and the converted inputs of a, fc2 and s */
    CU_ASSERT_EQUAL(p32.eval_unshared, 2048 + 2048 + 2 * 2048 + 2 * 128 + 64);
    CU_ASSERT_EQUAL(p16.eval_unshared, 2048 + 2048 + 2 * 1024 + 128 + 64 + 64 + 1024 + 2048 + 64);
    glia__act_plan_free(&p32);
    glia__act_plan_free(&p16);
    /* and back: all f32 again, every edge direct */
    glia__plan_dtypes(r.m, GLIA_F32);
    CU_ASSERT_EQUAL(a->out_dtype, GLIA_F32);
    CU_ASSERT_EQUAL(a->edge[0], GLIA__EDGE_DIRECT);
    CU_ASSERT_EQUAL(fc2->edge[0], GLIA__EDGE_DIRECT);
    close_run(&r);
}

/* The same model trained with a and b in bf16 and in f32: close losses; the bf16 run's tensors are bf16, and its
 * kernel (which refuses mixed calls) got one dtype per call. */
static void run_half(enum glia_dtype half, double tol)
{
    struct run a, b;
    struct glia_epoch_result ra = GLIA_TEST_RESULT, rb = GLIA_TEST_RESULT;
    open_run(&a, model_text(""));
    open_run(&b, model_text(""));
    glia__plan_dtypes(b.m, half);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(a.m, &quiet, &ra, 1), GLIA_OK);
    glia_status st = glia_model_train(b.m, &quiet, &rb, 1);
    if (st) printf("\n  %s\n", glia_context_error(b.ctx));
    CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
    CU_ASSERT_EQUAL(node(&b, "a")->out->dtype, half);
    CU_ASSERT_EQUAL(node(&b, "b")->out->dtype, half);
    CU_ASSERT_EQUAL(node(&b, "fc2")->out->dtype, GLIA_F32);
    CU_ASSERT_EQUAL(node(&b, "s")->out->dtype, half);  /* the logits: the host widened them for the accuracy */
    if (fabs(ra.train_loss - rb.train_loss) > tol * ra.train_loss || fabs(ra.test_loss - rb.test_loss) > tol * ra.test_loss)
        printf("\n  %s: losses %g %g, f32 %g %g\n", glia_dtype_name(half), rb.train_loss, rb.test_loss, ra.train_loss,
               ra.test_loss);
    CU_ASSERT(fabs(ra.train_loss - rb.train_loss) <= tol * ra.train_loss);
    CU_ASSERT(fabs(ra.test_loss - rb.test_loss) <= tol * ra.test_loss);
    CU_ASSERT(ra.train_loss != rb.train_loss);  /* the half run did round */
    CU_ASSERT(fabs(ra.test_accuracy - rb.test_accuracy) <= 0.1);
    close_run(&a);
    close_run(&b);
}

/* glia_layer_run_new_typed: a kernel with GLIA_KERNEL_HALF gets its activations in the half type (the f32 run's
 * inputs rounded once, its output what the kernel makes of them: x / (1 + |x|) rounded once); f32 is
 * glia_layer_run_new; a kernel without the flag, a loss and a non-float type are refused. */
static void test_layer_run_typed(void)
{
    struct glia_context *ctx;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    char path[1024];
    snprintf(path, sizeof path, "%s/half_softsign.so", glia_test_fixtures());
    CU_ASSERT_FATAL(glia_plugin_load(ctx, path) == GLIA_OK);
    struct glia_device cpu = {GLIA_DEVICE_CPU, 0};
    struct glia_shape in = glia_shape_make(4, (int64_t[]){2, 3, 4, 5});
    const enum glia_dtype types[] = {GLIA_BF16, GLIA_F16};
    for (int t = 0; t < 2; t++) {
        struct glia_layer_run *rf = NULL, *rh = NULL;
        CU_ASSERT_FATAL(glia_layer_run_new(ctx, "[s]\ntype = half_softsign\n", cpu, &in, 1, GLIA_CONTIGUOUS, 7,
                                           &rf) == GLIA_OK);
        CU_ASSERT_FATAL(glia_layer_run_new_typed(ctx, "[s]\ntype = half_softsign\n", cpu, &in, 1, GLIA_CONTIGUOUS,
                                                 types[t], 7, &rh) == GLIA_OK);
        const struct glia_tensor *xh = glia_layer_run_input(rh, 0), *xf = glia_layer_run_input(rf, 0);
        CU_ASSERT_EQUAL(xh->dtype, types[t]);
        CU_ASSERT_EQUAL(glia_layer_run_output(rh)->dtype, types[t]);
        CU_ASSERT_EQUAL(glia_layer_run_output_grad(rh)->dtype, types[t]);
        CU_ASSERT_EQUAL(glia_layer_run_input_grad(rh, 0)->dtype, types[t]);
        CU_ASSERT_TRUE(glia_tensor_is_contiguous(xh));
        CU_ASSERT_FATAL(glia_layer_run_forward(rh, true) == GLIA_OK);
        CU_ASSERT_FATAL(glia_layer_run_backward(rh) == GLIA_OK);
        CU_ASSERT_FATAL(glia_layer_run_sync(rh) == GLIA_OK);
        const float *x = glia_tensor_f32((struct glia_tensor *)xf);
        const uint16_t *hx = xh->data, *hy = glia_layer_run_output(rh)->data;
        int bad = 0;
        for (int64_t i = 0; i < glia_tensor_numel(xf); i++) {
            float want_x = types[t] == GLIA_BF16 ? glia_bf16_to_f32(glia_f32_to_bf16(x[i]))
                                                 : glia_f16_to_f32(glia_f32_to_f16(x[i]));
            float got_x = types[t] == GLIA_BF16 ? glia_bf16_to_f32(hx[i]) : glia_f16_to_f32(hx[i]);
            float y = want_x / (1.0f + fabsf(want_x));
            uint16_t want_y = types[t] == GLIA_BF16 ? glia_f32_to_bf16(y) : glia_f32_to_f16(y);
            bad += got_x != want_x || hy[i] != want_y;
        }
        CU_ASSERT_EQUAL(bad, 0);
        glia_layer_run_free(rh);
        glia_layer_run_free(rf);
    }
    struct glia_layer_run *r = NULL;
    CU_ASSERT_EQUAL(glia_layer_run_new_typed(ctx, "[r]\ntype = relu\n", cpu, &in, 1, GLIA_CONTIGUOUS, GLIA_BF16, 7, &r),
                    GLIA_EUNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "layer type 'relu'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "does not take bf16 activations (no GLIA_KERNEL_HALF)"));
    CU_ASSERT_EQUAL(glia_layer_run_new_typed(ctx, "[s]\ntype = half_softsign\n", cpu, &in, 1, GLIA_CONTIGUOUS,
                                             GLIA_I32, 7, &r), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "activations are f32, f16 or bf16, not i32"));
    CU_ASSERT_PTR_NULL(r);
    glia_context_free(ctx);
}

/* A loss kernel with GLIA_KERNEL_HALF (the CPU softmax_cross_entropy): a typed run's logits and their gradient are
 * half, its loss and the loss scale f32; the loss is that of the f32 kernel on the half logits' values, and the
 * gradient (written in the training forward's pass) that one rounded once. */
static void test_loss_half_logits(void)
{
    struct glia_context *ctx;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct glia_device cpu = {GLIA_DEVICE_CPU, 0};
    struct glia_shape logits = glia_shape_make(3, (int64_t[]){3, 5, 37});
    const enum glia_dtype types[] = {GLIA_BF16, GLIA_F16};
    const char *ini = "[l]\ntype = softmax_cross_entropy\nlabel_smoothing = 0.1\n";
    for (int t = 0; t < 2; t++) {
        struct glia_layer_run *rf = NULL, *rh = NULL;
        CU_ASSERT_FATAL(glia_layer_run_new(ctx, ini, cpu, &logits, 1, GLIA_CONTIGUOUS, 11, &rf) == GLIA_OK);
        CU_ASSERT_FATAL(glia_layer_run_new_typed(ctx, ini, cpu, &logits, 1, GLIA_CONTIGUOUS, types[t], 11, &rh) ==
                        GLIA_OK);
        struct glia_tensor *xh = glia_layer_run_input(rh, 0), *xf = glia_layer_run_input(rf, 0);
        CU_ASSERT_EQUAL(xh->dtype, types[t]);
        CU_ASSERT_EQUAL(glia_layer_run_input_grad(rh, 0)->dtype, types[t]);
        CU_ASSERT_EQUAL(glia_layer_run_output(rh)->dtype, GLIA_F32);
        CU_ASSERT_EQUAL(glia_layer_run_output_grad(rh)->dtype, GLIA_F32);
        int64_t n = glia_tensor_numel(xh);
        float *x = glia_tensor_f32(xf);
        for (int64_t i = 0; i < n; i++) x[i] = glia_load_f32(xh->data, types[t], i);  /* the same values */
        CU_ASSERT_FATAL(glia_layer_run_forward(rf, true) == GLIA_OK);
        CU_ASSERT_FATAL(glia_layer_run_forward(rh, true) == GLIA_OK);
        CU_ASSERT_FATAL(glia_layer_run_sync(rh) == GLIA_OK);
        float lf = glia_tensor_f32(glia_layer_run_output(rf))[0], lh = glia_tensor_f32(glia_layer_run_output(rh))[0];
        CU_ASSERT(lf > 0.0f);
        CU_ASSERT_EQUAL(lh, lf);
        const float *gf = glia_tensor_f32(glia_layer_run_input_grad(rf, 0));
        const void *gh = glia_layer_run_input_grad(rh, 0)->data;
        int bad = 0, nonzero = 0;
        for (int64_t i = 0; i < n; i++) {
            float want = types[t] == GLIA_BF16 ? glia_bf16_to_f32(glia_f32_to_bf16(gf[i]))
                                               : glia_f16_to_f32(glia_f32_to_f16(gf[i]));
            bad += glia_load_f32(gh, types[t], i) != want;
            nonzero += gf[i] != 0.0f;
        }
        CU_ASSERT_EQUAL(bad, 0);
        CU_ASSERT(nonzero > n / 2);
        for (int64_t i = 0; i < n; i++) CU_ASSERT_EQUAL_FATAL(glia_load_f32(xh->data, types[t], i), x[i]);  /* kept */
        glia_layer_run_free(rh);
        glia_layer_run_free(rf);
    }
    glia_context_free(ctx);
}

static void test_train_bf16(void) { run_half(GLIA_BF16, 2e-3); }
static void test_train_f16(void) { run_half(GLIA_F16, 5e-4); }

GLIA_TEST_MAIN("half", GLIA_TEST(test_bf16_rounding), GLIA_TEST(test_f16_rounding), GLIA_TEST(test_convert_dtypes),
               GLIA_TEST(test_half_of), GLIA_TEST(test_pass_and_plan), GLIA_TEST(test_train_bf16),
               GLIA_TEST(test_train_f16), GLIA_TEST(test_layer_run_typed), GLIA_TEST(test_loss_half_logits))
