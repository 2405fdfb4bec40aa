/* tests/test_step.c — glia_model_step on the CPU: steps on the caller's batches equal glia_model_train's on
 * the same data (weights bit for bit, the losses its progress lines print), reduce the loss, follow the lr
 * schedule and accumulation, and refuse bad batches with one line. Not the CUDA paths (test_cuda.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "modelutil.h"
#include "parts.h"

static char dir[512], tokdir[512];

static void make_data(void)
{
    CU_ASSERT_FATAL(glia_test_idx_set(dir, sizeof dir, "step-data", 512, 200, 6, 5, 11) == 0);
}

/* A small MLP on 6x6 images of 5 classes, batches of 32 in file order; `train` adds [train] keys. */
static const char *model_text(const char *train)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = cpu\nseed = 7\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 32\ntest_batch_size = 64\nmean = 0.2\nstd = 0.3\nshuffle = off\n"
             "[train]\nepochs = 2\noptimizer = sgd\nlr = 0.05\n%s[optimizer]\nmomentum = 0.9\n"
             "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 16\n[act]\ntype = relu\n"
             "[fc2]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             dir, dir, dir, dir, train);
    return buf;
}

/* Training batch k of the model's set in file order, as the loader makes it (normalized), in *b. */
struct host_batch {
    float *x;
    int32_t *y;
    struct glia_batch b;
};

static void batch_of(struct run *r, int64_t k, int64_t n, struct host_batch *h)
{
    const struct glia__dataset *d = &r->m->data.train;
    int64_t per = (int64_t)d->channels * d->rows * d->cols, *idx = malloc(sizeof *idx * (size_t)n);
    h->x = malloc(sizeof *h->x * (size_t)(n * per));
    h->y = malloc(sizeof *h->y * (size_t)n);
    CU_ASSERT_FATAL(idx && h->x && h->y);
    for (int64_t i = 0; i < n; i++) idx[i] = (k * n + i) % d->n;
    glia__dataset_gather(d, idx, n, &r->m->data.norm, h->x, h->y);
    free(idx);
    h->b = (struct glia_batch){.struct_size = sizeof h->b,
                               .shape = glia_shape_make(4, (int64_t[]){n, d->channels, d->rows, d->cols}),
                               .x = h->x, .labels = h->y};
}

static void batch_free(struct host_batch *h)
{
    free(h->x);
    free(h->y);
}

/* One glia_model_step on training batch k (of 32); the result in *res. */
static glia_status step_on(struct run *r, int64_t k, struct glia_step_result *res)
{
    struct host_batch h;
    batch_of(r, k, 32, &h);
    *res = (struct glia_step_result){.struct_size = sizeof *res};
    glia_status st = glia_model_step(r->m, &h.b, res);
    if (st) printf("\n  %s\n", glia_context_error(r->ctx));
    batch_free(&h);
    return st;
}

/* The losses glia_model_train prints for the steps of its first epoch (plain lines, log_every = 1). */
static int trained_losses(struct run *r, double *loss, int max)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    struct glia_train_options o = {sizeof(struct glia_train_options), NULL, 0, f, NULL};
    CU_ASSERT_EQUAL(glia_model_train(r->m, &o, NULL, 0), GLIA_OK);
    fclose(f);
    int n = 0;
    for (const char *p = text; (p = strstr(p, "epoch 1/")) && n < max; p++) {
        long long k;
        double l;
        if (sscanf(p, "epoch 1/%*d step %lld/%*d loss %lf", &k, &l) == 2) loss[n++] = l;
    }
    free(text);
    return n;
}

/* glia_model_step runs the trainer's step: three (six with accumulate = 2) steps on the batches the loader
 * gives, in its order, leave the weights glia_model_train leaves after as many optimizer steps (max_steps), bit
 * for bit, with clipping and a warmup schedule too; each step's loss is the one training prints for it. */
static void test_step_equals_training(void)
{
    make_data();
    static const struct {
        const char *train;
        int batches, accumulate;
    } cases[] = {
        {"max_steps = 3\nlog_every = 1\n", 3, 1},
        {"max_steps = 3\nlog_every = 1\naccumulate = 2\nclip_grad_norm = 0.5\nwarmup_steps = 4\n", 6, 2},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct run a, b;
        open_run(&a, model_text(cases[c].train));
        open_run(&b, model_text(cases[c].train));
        double want[8];  /* a line for each step but the last: training stops there, at max_steps */
        CU_ASSERT_EQUAL_FATAL(trained_losses(&a, want, 8), cases[c].batches - 1);
        CU_ASSERT_EQUAL(a.m->trainer.step, 3);
        for (int k = 0; k < cases[c].batches; k++) {
            struct glia_step_result res;
            CU_ASSERT_EQUAL_FATAL(step_on(&b, k, &res), GLIA_OK);
            bool update = (k + 1) % cases[c].accumulate == 0;
            CU_ASSERT_EQUAL(res.updated, update);
            CU_ASSERT_EQUAL(res.skipped, 0);
            CU_ASSERT_EQUAL(res.step, (k + 1) / cases[c].accumulate);
            CU_ASSERT_EQUAL(res.loss_scale, 1.0);
            if (k < cases[c].batches - 1) {  /* the loss training printed for this step */
                char got[32], line[32];
                snprintf(got, sizeof got, "%.4f", res.loss);
                snprintf(line, sizeof line, "%.4f", want[k]);
                CU_ASSERT_STRING_EQUAL(got, line);
            }
            /* warmup: update s (1-based) at lr * s / 4; the rate of the next update when there is none */
            double lr = 0.05 * (cases[c].accumulate > 1 ? fmin(1.0, (double)(res.step + !update) / 4) : 1);
            CU_ASSERT_DOUBLE_EQUAL(res.lr, lr, 1e-12);
        }
        if (!same_weights(&a, &b)) printf("\n  case %zu: weights differ by %g\n", c, weight_diff(&b, &a));
        CU_ASSERT(same_weights(&a, &b));
        close_run(&a);
        close_run(&b);
    }
}

/* Stepping through the training set lowers the loss, and the model then evaluates better. */
static void test_step_reduces_loss(void)
{
    make_data();
    struct run r;
    open_run(&r, model_text(""));
    double l0, a0, l1, a1, first = 0, last = 0;
    CU_ASSERT_EQUAL(glia_model_evaluate(r.m, &l0, &a0), GLIA_OK);
    for (int k = 0; k < 48; k++) {
        struct glia_step_result res;
        CU_ASSERT_EQUAL_FATAL(step_on(&r, k, &res), GLIA_OK);
        CU_ASSERT(isfinite(res.loss) && res.loss > 0);
        if (k < 4) first += res.loss / 4;
        if (k >= 44) last += res.loss / 4;
    }
    CU_ASSERT(last < 0.5 * first);
    CU_ASSERT_EQUAL(glia_model_evaluate(r.m, &l1, &a1), GLIA_OK);
    CU_ASSERT(l1 < 0.5 * l0);
    CU_ASSERT(a1 > a0);
    CU_ASSERT_EQUAL(r.m->trainer.step, 48);
    close_run(&r);
}

/* The lr of a step follows [train] schedule at the epoch the batch names, which stays the model's; 0 keeps the
 * model's, which training sets (its last epoch). An unfinished accumulation is dropped by glia_model_train: a model
 * stepped once without an update trains as a fresh one does. */
static void test_step_schedule_and_accumulation(void)
{
    make_data();
    struct run r;
    open_run(&r, model_text("schedule = step\ngamma = 0.5\n"));
    struct host_batch h;
    batch_of(&r, 0, 32, &h);
    struct glia_step_result res = {.struct_size = sizeof res};
    CU_ASSERT_EQUAL(glia_model_step(r.m, &h.b, &res), GLIA_OK);
    CU_ASSERT_DOUBLE_EQUAL(res.lr, 0.05, 1e-12);  /* a new model: epoch 1 */
    h.b.epoch = 2;
    CU_ASSERT_EQUAL(glia_model_step(r.m, &h.b, &res), GLIA_OK);
    CU_ASSERT_DOUBLE_EQUAL(res.lr, 0.025, 1e-12);
    h.b.epoch = 0;
    CU_ASSERT_EQUAL(glia_model_step(r.m, &h.b, &res), GLIA_OK);
    CU_ASSERT_DOUBLE_EQUAL(res.lr, 0.025, 1e-12);  /* still epoch 2 */
    h.b.epoch = 1;
    CU_ASSERT_EQUAL(glia_model_step(r.m, &h.b, &res), GLIA_OK);
    CU_ASSERT_DOUBLE_EQUAL(res.lr, 0.05, 1e-12);
    CU_ASSERT_EQUAL(res.step, 4);
    CU_ASSERT_EQUAL(glia_model_train(r.m, &quiet, NULL, 0), GLIA_OK);  /* epochs 1 and 2 */
    h.b.epoch = 0;
    CU_ASSERT_EQUAL(glia_model_step(r.m, &h.b, &res), GLIA_OK);
    CU_ASSERT_DOUBLE_EQUAL(res.lr, 0.025, 1e-12);
    CU_ASSERT_EQUAL(res.step, 4 + 2 * 16 + 1);
    close_run(&r);
    /* accumulate = 2: update_now ends an accumulation early; a half one is not carried into training */
    struct run a, b;
    open_run(&a, model_text("accumulate = 2\n"));
    open_run(&b, model_text("accumulate = 2\n"));
    CU_ASSERT_EQUAL(glia_model_step(a.m, &h.b, &res), GLIA_OK);
    CU_ASSERT_EQUAL(res.updated, 0);
    CU_ASSERT_EQUAL(res.step, 0);
    CU_ASSERT(same_weights(&a, &b));  /* no update yet */
    CU_ASSERT_EQUAL(glia_model_train(a.m, &quiet, NULL, 0), GLIA_OK);
    CU_ASSERT_EQUAL(glia_model_train(b.m, &quiet, NULL, 0), GLIA_OK);
    CU_ASSERT(same_weights(&a, &b));
    h.b.update_now = 1;
    CU_ASSERT_EQUAL(glia_model_step(a.m, &h.b, &res), GLIA_OK);
    CU_ASSERT_EQUAL(res.updated, 1);
    CU_ASSERT_EQUAL(res.step, b.m->trainer.step + 1);
    CU_ASSERT_FALSE(same_weights(&a, &b));
    close_run(&a);
    close_run(&b);
    batch_free(&h);
}

/* glia_model_step(b) must fail with `want` in the error, and leave the weights and step alone. */
static void expect_step_error(struct run *r, const struct glia_batch *b, struct glia_step_result *res, const char *want)
{
    long long n;
    float *w0 = weights(r, &n);
    int64_t step = r->m->trainer.step;
    glia_context_clear_error(r->ctx);
    CU_ASSERT_EQUAL(glia_model_step(r->m, b, res), GLIA_EINVAL);
    const char *e = glia_context_error(r->ctx);
    if (!strstr(e, want)) printf("\n  got '%s'\n  want '%s'\n", e, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(e, want));
    CU_ASSERT_PTR_NULL(strchr(e, '\n'));
    float *w1 = weights(r, &n);
    CU_ASSERT_EQUAL(memcmp(w0, w1, sizeof *w0 * (size_t)n), 0);
    CU_ASSERT_EQUAL(r->m->trainer.step, step);
    free(w0);
    free(w1);
}

/* A batch that does not fit the model is one clear line, not a crash, and changes nothing. */
static void test_step_bad_batches(void)
{
    make_data();
    struct run r;
    open_run(&r, model_text(""));
    struct host_batch h;
    batch_of(&r, 0, 32, &h);
    struct glia_step_result res = {.struct_size = sizeof res};
    CU_ASSERT_EQUAL(glia_model_step(NULL, &h.b, &res), GLIA_EINVAL);
    expect_step_error(&r, NULL, &res, "glia_model_step: the batch is NULL");
    struct glia_batch b = h.b;
    b.struct_size = 0;
    expect_step_error(&r, &b, &res, "glia_model_step: batch struct_size 0 is too small (set it to sizeof(struct glia_batch))");
    struct glia_step_result small = {.struct_size = 4};
    expect_step_error(&r, &h.b, &small, "glia_model_step: result struct_size 4 is too small");
    b = h.b;
    b.shape = glia_shape_make(4, (int64_t[]){32, 1, 6, 5});
    expect_step_error(&r, &b, &res, "glia_model_step: batch shape 32x1x6x5; the model takes images n x 1 x 6 x 6, n from 1 "
                                    "to 32 ([data] batch_size)");
    b.shape = glia_shape_make(2, (int64_t[]){32, 36});
    expect_step_error(&r, &b, &res, "batch shape 32x36; the model takes images n x 1 x 6 x 6");
    b.shape = glia_shape_make(4, (int64_t[]){33, 1, 6, 6});
    expect_step_error(&r, &b, &res, "batch shape 33x1x6x6; the model takes images n x 1 x 6 x 6, n from 1 to 32");
    b.shape = glia_shape_make(4, (int64_t[]){0, 1, 6, 6});
    expect_step_error(&r, &b, &res, "batch shape 0x1x6x6;");
    b.shape.ndim = 99;
    expect_step_error(&r, &b, &res, "batch shape of 99 dimensions;");
    b = h.b;
    b.x = NULL;
    expect_step_error(&r, &b, &res, "glia_model_step: the model reads images: set x, and leave tokens NULL");
    b = h.b;
    b.tokens = h.y;
    expect_step_error(&r, &b, &res, "glia_model_step: the model reads images: set x, and leave tokens NULL");
    b = h.b;
    b.labels = NULL;
    expect_step_error(&r, &b, &res, "glia_model_step: labels is NULL");
    b = h.b;
    h.y[3] = 5;
    expect_step_error(&r, &b, &res, "glia_model_step: labels[3] is 5, outside 0 .. 4 (the classes of the loss layer's input)");
    h.y[3] = -1;
    expect_step_error(&r, &b, &res, "glia_model_step: labels[3] is -1, outside 0 .. 4");
    h.y[3] = 0;
    b.epoch = 3;
    expect_step_error(&r, &b, &res, "glia_model_step: epoch 3 is outside 1 .. 2 ([train] epochs; 0: the model's current)");
    /* a batch smaller than batch_size is fine, and a result may be left out */
    b = h.b;
    b.shape.dim[0] = 5;
    CU_ASSERT_EQUAL(glia_model_step(r.m, &b, NULL), GLIA_OK);
    CU_ASSERT_EQUAL(r.m->trainer.step, 1);
    /* a non-finite loss is an error, as in training */
    for (int i = 0; i < 36; i++) h.x[i] = NAN;
    CU_ASSERT_EQUAL(glia_model_step(r.m, &h.b, &res), GLIA_ENUMERIC);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(r.ctx), "nan at epoch 1 step 2; lower [train] lr"));
    batch_free(&h);
    close_run(&r);
}

/* A token model: batches of n x len ids, len up to the longest padded length, ids below [data] vocab. */
static void test_step_tokens(void)
{
    snprintf(tokdir, sizeof tokdir, "%s", glia_test_tmp("step-tokens"));
    char cmd[1200], a[600], text[4096];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", tokdir, tokdir);
    CU_ASSERT_FATAL(system(cmd) == 0);
    snprintf(a, sizeof a, "%s/train.txt", tokdir);
    CU_ASSERT_FATAL(glia_test_write_tokens(a, 64, 40, 4, 3, 20, 21) == 0);
    snprintf(a, sizeof a, "%s/test.txt", tokdir);
    CU_ASSERT_FATAL(glia_test_write_tokens(a, 16, 40, 4, 3, 20, 22) == 0);
    snprintf(text, sizeof text,
             "[runtime]\ndevice = cpu\nseed = 3\n"
             "[data]\nformat = tokens\ntrain = %s/train.txt\ntest = %s/test.txt\nvocab = 40\nbatch_size = 8\n"
             "[train]\noptimizer = adam\nlr = 0.01\n"
             "[emb]\ntype = embedding\nvocab = 40\ndim = 8\n[pool]\ntype = seq_pool\ninputs = emb, input\nmode = max\n"
             "[fc]\ntype = linear\noutputs = 4\n[loss]\ntype = softmax_cross_entropy\n",
             tokdir, tokdir);
    struct run r;
    open_run(&r, text);
    int longest = r.m->data.train.cols;
    int32_t ids[8 * 64], labels[8];
    for (int i = 0; i < 8 * longest; i++) ids[i] = 5 + i % 30;
    for (int i = 0; i < 8; i++) labels[i] = i % 4, ids[i * longest + 1] = i % 4 + 1;
    struct glia_batch b = {.struct_size = sizeof b, .shape = glia_shape_make(2, (int64_t[]){8, 7}), .tokens = ids,
                           .labels = labels};
    struct glia_step_result res = {.struct_size = sizeof res};
    CU_ASSERT_EQUAL(glia_model_step(r.m, &b, &res), GLIA_OK);
    CU_ASSERT(isfinite(res.loss));
    b.shape.dim[1] = longest;
    CU_ASSERT_EQUAL(glia_model_step(r.m, &b, &res), GLIA_OK);
    CU_ASSERT_EQUAL(res.step, 2);
    b.shape.dim[1] = longest + 1;
    char want[160];
    snprintf(want, sizeof want, "batch shape 8x%d; the model takes token batches n x len, n from 1 to 8 ([data] "
                                "batch_size), len from 1 to %d", longest + 1, longest);
    expect_step_error(&r, &b, &res, want);
    b.shape.dim[1] = 4;
    ids[9] = 40;  /* sample 2, position 1 of a 4-long batch */
    expect_step_error(&r, &b, &res, "glia_model_step: tokens[9] is 40, outside 0 .. 39 ([data] vocab)");
    b.tokens = NULL;
    b.x = (const float *)ids;
    expect_step_error(&r, &b, &res, "glia_model_step: the model reads token ids: set tokens, and leave x NULL");
    close_run(&r);
}

/* schedule = poly and linear under glia_model_step, which has no epochs of its own: T is [train] total_steps, else
 * what glia_model_train would take (epochs x the updates an epoch of the training set makes). Each step reports the
 * formula's lr (the next update's when it makes none), and the optimizer uses it: past T at min_lr = 0 the weights
 * stay as they are. */
static void test_step_poly(void)
{
    make_data();
    struct run r, p;
    /* 16 batches of 32 an epoch in updates of 2: T = 2 x 8 = 16 */
    open_run(&r, model_text("schedule = poly\npower = 2\nwarmup_steps = 3\naccumulate = 2\nmin_lr = 0.001\n"));
    CU_ASSERT_EQUAL(r.m->trainer.total_steps, 16);
    for (int k = 0; k < 40; k++) {
        struct glia_step_result res;
        CU_ASSERT_EQUAL_FATAL(step_on(&r, k, &res), GLIA_OK);
        CU_ASSERT_EQUAL(res.updated, k % 2 == 1);
        int64_t t = res.step + !res.updated;
        double want = t <= 3 ? 0.05 * (double)t / 3 : t >= 16 ? 0.001 : 0.049 * pow(1 - (double)(t - 3) / 13, 2) + 0.001;
        if (fabs(res.lr - want) > 1e-12) printf("\n  batch %d step %lld: lr %.17g, want %.17g\n", k, (long long)res.step, res.lr, want);
        CU_ASSERT_DOUBLE_EQUAL(res.lr, want, 1e-12);
    }
    close_run(&r);
    /* total_steps = 5: linear to 0 at step 5; the steps after it leave the weights unchanged */
    open_run(&r, model_text("schedule = linear\ntotal_steps = 5\n"));
    open_run(&p, model_text("schedule = linear\ntotal_steps = 5\n"));
    CU_ASSERT_EQUAL(r.m->trainer.total_steps, 5);
    struct glia_step_result res;
    for (int k = 0; k < 5; k++) {
        CU_ASSERT_EQUAL_FATAL(step_on(&r, k, &res), GLIA_OK);
        CU_ASSERT_DOUBLE_EQUAL(res.lr, 0.05 * (1 - (k + 1) / 5.0), 1e-12);
    }
    CU_ASSERT_FALSE(same_weights(&r, &p));  /* the steps before moved them */
    for (int k = 0; k < 4; k++) CU_ASSERT_EQUAL_FATAL(step_on(&p, k, &res), GLIA_OK);
    CU_ASSERT(same_weights(&r, &p));  /* four steps, as many as five: the fifth, at lr 0, did not move them */
    for (int k = 5; k < 8; k++) {
        CU_ASSERT_EQUAL_FATAL(step_on(&r, k, &res), GLIA_OK);
        CU_ASSERT_EQUAL(res.lr, 0.0);
    }
    CU_ASSERT(same_weights(&r, &p));
    close_run(&r);
    close_run(&p);
}

/* [layer] tie_weight: one tensor for two layers. y = W (W h) with h = fc0(x): one SGD step (no momentum, no decay)
 * moves W by lr times the sum of both uses' gradients, dz (W h)ᵀ + Wᵀ dz hᵀ (dz = (softmax(y) - onehot) / n),
 * computed here in double from the weights and the batch; the weights hold W once. */
static void test_step_tied_weight(void)
{
    make_data();
    char text[4096];
    snprintf(text, sizeof text,
             "[runtime]\ndevice = cpu\nseed = 5\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 8\nshuffle = off\n[train]\noptimizer = sgd\nlr = 0.5\n"
             "[flat]\ntype = flatten\n[fc0]\ntype = linear\noutputs = 5\n"
             "[a]\ntype = linear\noutputs = 5\nbias = off\n[b]\ntype = linear\noutputs = 5\nbias = off\ntie_weight = a\n"
             "[loss]\ntype = softmax_cross_entropy\n", dir, dir, dir, dir);
    struct run r;
    open_run(&r, text);
    long long n;
    float *w0 = weights(&r, &n);
    CU_ASSERT_EQUAL_FATAL(n, 5 * 36 + 5 + 25);  /* fc0's weight and bias, W once */
    struct host_batch h;
    batch_of(&r, 0, 8, &h);
    struct glia_step_result res = {.struct_size = sizeof res};
    CU_ASSERT_EQUAL_FATAL(glia_model_step(r.m, &h.b, &res), GLIA_OK);
    float *w1 = weights(&r, &n);
    const float *W0 = w0, *b0 = w0 + 180, *W = w0 + 185;
    double g[25] = {0};
    for (int i = 0; i < 8; i++) {
        double hv[5], u[5], z[5], dz[5], mx = -1e300, sum = 0;
        for (int o = 0; o < 5; o++) {
            hv[o] = b0[o];
            for (int k = 0; k < 36; k++) hv[o] += (double)W0[o * 36 + k] * h.x[i * 36 + k];
        }
        for (int o = 0; o < 5; o++) {
            u[o] = 0;
            for (int k = 0; k < 5; k++) u[o] += (double)W[o * 5 + k] * hv[k];
        }
        for (int o = 0; o < 5; o++) {
            z[o] = 0;
            for (int k = 0; k < 5; k++) z[o] += (double)W[o * 5 + k] * u[k];
            mx = fmax(mx, z[o]);
        }
        for (int o = 0; o < 5; o++) sum += exp(z[o] - mx);
        for (int o = 0; o < 5; o++) dz[o] = (exp(z[o] - mx) / sum - (o == h.y[i])) / 8;
        for (int o = 0; o < 5; o++)
            for (int k = 0; k < 5; k++) {
                double wdz = 0;  /* (Wᵀ dz)[o] */
                for (int j = 0; j < 5; j++) wdz += (double)W[j * 5 + o] * dz[j];
                g[o * 5 + k] += dz[o] * u[k] + wdz * hv[k];
            }
    }
    double worst = 0;
    for (int j = 0; j < 25; j++) worst = fmax(worst, fabs((double)w1[185 + j] - ((double)W[j] - 0.5 * g[j])));
    if (worst > 1e-5) printf("\n  tied W after one step: max |err| %g\n", worst);
    CU_ASSERT(worst <= 1e-5);
    char *sum = NULL;
    size_t len;
    FILE *f = open_memstream(&sum, &len);
    glia_model_summary(r.m, f);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(sum, "tied weight: b.weight is a.weight"));
    free(sum);
    free(w0);
    free(w1);
    batch_free(&h);
    close_run(&r);
    const char *bad[][2] = {
        {"tie_weight = nosuch", "[b] tie_weight: no layer 'nosuch' in the model"},
        {"tie_weight = b", "'b' is this layer"},
        {"tie_weight = flat", "'flat' has no parameter 'weight'"},
        {"tie_weight = fc0", "this layer's weight is 5x5, 'fc0''s is 5x36"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char t[4096];
        snprintf(t, sizeof t,
                 "[runtime]\ndevice = cpu\n[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\n"
                 "test_labels = %s/tel\nbatch_size = 8\n[flat]\ntype = flatten\n[fc0]\ntype = linear\noutputs = 5\n"
                 "[a]\ntype = linear\noutputs = 5\n[b]\ntype = linear\noutputs = 5\n%s\n"
                 "[c]\ntype = linear\noutputs = 5\ntie_weight = b\n[loss]\ntype = softmax_cross_entropy\n",
                 dir, dir, dir, dir, bad[k][0]);
        expect_build_error(t, bad[k][1]);
    }
    snprintf(text, sizeof text,
             "[runtime]\ndevice = cpu\n[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\n"
             "test_labels = %s/tel\nbatch_size = 8\n[flat]\ntype = flatten\n[fc0]\ntype = linear\noutputs = 5\n"
             "[a]\ntype = linear\noutputs = 5\ntie_weight = b\n[b]\ntype = linear\noutputs = 5\n"
             "[loss]\ntype = softmax_cross_entropy\n", dir, dir, dir, dir);
    expect_build_error(text, "[a] tie_weight: 'b' comes after this layer");
    snprintf(text, sizeof text,
             "[runtime]\ndevice = cpu\n[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\n"
             "test_labels = %s/tel\nbatch_size = 8\n[flat]\ntype = flatten\n[fc0]\ntype = linear\noutputs = 5\n"
             "[a]\ntype = linear\noutputs = 5\n[b]\ntype = linear\noutputs = 5\ntie_weight = a\n"
             "[c]\ntype = linear\noutputs = 5\ntie_weight = b\n[loss]\ntype = softmax_cross_entropy\n",
             dir, dir, dir, dir);
    expect_build_error(text, "[c] tie_weight: 'b' ties its own weight to 'a': tie to 'a' instead");
}

GLIA_TEST_MAIN("step", GLIA_TEST(test_step_equals_training), GLIA_TEST(test_step_reduces_loss),
               GLIA_TEST(test_step_schedule_and_accumulation), GLIA_TEST(test_step_bad_batches),
               GLIA_TEST(test_step_tokens), GLIA_TEST(test_step_poly),
               GLIA_TEST(test_step_tied_weight))
