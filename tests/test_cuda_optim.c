/* tests/test_cuda_optim.c — the CUDA impls of sgd, adam, adamw, adadelta, lamb, lars, novograd against their CPU
 * impls on a GPU: weights and state after several steps from equal weights and gradients, with and
 * without a decay mask, and the CUDA impls' refusals. Exits 77 (skipped) without a usable GPU or
 * without the CUDA build; their steps reading the scalars from the device, as run and as replayed from a CUDA
 * graph; their dev_skip, and the backend's loss scaler and row select that precision = fp16 captures with them. Not a
 * test of the update formulas themselves: test_optim does that. */
#include "cudautil.h"
#include "parts.h"

#define N 10007
#define STEPS 5
#define TOL 1e-5

/* Largest |a - b| relative to the largest |a| (the element scale of the array). */
static double rel_diff(const float *a, const float *b, int64_t n)
{
    double d = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)a[i]));
    }
    return scale > 0 ? d / scale : d;
}

/* Both impls of optimizer `name` with the [optimizer] section `ini`; loads the CPU plugin (the
 * CUDA impls came with cuda.so). */
static void make_pair(const char *name, const char *ini, struct glia_optimizer **cpu, struct glia_optimizer **gpu)
{
    CU_ASSERT_FATAL(glia_plugin_load(cuda_ctx, name) == GLIA_OK);
    glia_status st = glia_optimizer_new_for(cuda_ctx, name, ini, GLIA_DEVICE_CPU, cpu);
    if (!st) st = glia_optimizer_new_for(cuda_ctx, name, ini, GLIA_DEVICE_CUDA, gpu);
    if (st) printf("\n  %s: %s\n", name, glia_context_error(cuda_ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    CU_ASSERT_EQUAL((*cpu)->kernel->device_type, GLIA_DEVICE_CPU);
    CU_ASSERT_EQUAL((*gpu)->kernel->device_type, GLIA_DEVICE_CUDA);
    CU_ASSERT_EQUAL_FATAL((*cpu)->type->n_state, (*gpu)->type->n_state);
    CU_ASSERT_FATAL((*cpu)->type->n_state <= 2);
    /* one optimizer (its keys, its settings) with a kernel per device, so that one INI file configures both */
    CU_ASSERT_PTR_EQUAL((*cpu)->type, (*gpu)->type);
    CU_ASSERT_PTR_NOT_EQUAL((*cpu)->kernel, (*gpu)->kernel);
}

static struct glia_tensor *dev_vec(int64_t n)
{
    struct glia_tensor *t;
    struct glia_shape s = S(1, n, 0, 0, 0);
    CU_ASSERT_FATAL(glia_tensor_zeros(cuda_gpu, GLIA_F32, &s, &t) == GLIA_OK);
    return t;
}

/* steps steps of both impls over n elements from weights ~ N(0, 1) and fresh gradients ~ N(0, 1)
 * each step (every 11th 1000 times smaller, so that eps matters), lr falling each step; masked:
 * every third element has decay flag 0. Compares weights and state after every step. */
static void run_case(const char *name, const char *ini, bool masked, int64_t n, int steps)
{
    struct glia_optimizer *oc, *og;
    make_pair(name, ini, &oc, &og);
    int ns = oc->type->n_state;
    size_t nb = (size_t)n * sizeof(float);
    float *w = malloc(nb), *g = malloc(nb), *mask = malloc(nb), *back = malloc(nb);
    float *state[2] = {calloc((size_t)n, sizeof(float)), calloc((size_t)n, sizeof(float))};
    CU_ASSERT_FATAL(w && g && mask && back && state[0] && state[1]);
    struct glia_tensor *dw = dev_vec(n), *dg = dev_vec(n), *dmask = dev_vec(n), *dstate[2] = {dev_vec(n), dev_vec(n)};
    float *dsp[2] = {dstate[0]->data, dstate[1]->data};
    struct glia_rng rng;
    glia__rng_seed(&rng, 2024);
    cuda_randn(&rng, w, n, 1.0f);
    for (int64_t i = 0; i < n; i++) mask[i] = i % 3 == 0 ? 0.0f : 1.0f;
    CU_ASSERT_FATAL(glia_tensor_from_host(dw, w, nb) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_from_host(dmask, mask, nb) == GLIA_OK);
    double worst = 0;
    for (int step = 1; step <= steps; step++) {
        cuda_randn(&rng, g, n, 1.0f);
        for (int64_t i = 0; i < n; i += 11) g[i] *= 1e-3f;
        CU_ASSERT_FATAL(glia_tensor_from_host(dg, g, nb) == GLIA_OK);
        double lr = 0.05 * (1 - 0.15 * (step - 1));
        struct glia_opt_step sc = {w, g, state, (size_t)n, masked ? mask : NULL, lr, step, cuda_cpu, NULL, NULL, 0, NULL, NULL};
        struct glia_opt_step sg = {dw->data, dg->data, dsp, (size_t)n, masked ? (const float *)dmask->data : NULL,
                                   lr, step, cuda_gpu, NULL, NULL, 0, NULL, NULL};
        CU_ASSERT_EQUAL_FATAL(oc->kernel->step(oc, &sc), GLIA_OK);
        glia_status st = og->kernel->step(og, &sg);
        if (st) printf("\n  cuda step: %s\n", glia_context_error(cuda_ctx));
        CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_to_host(dw, back, nb) == GLIA_OK);
        double dwt = rel_diff(w, back, n), dst = 0;
        for (int k = 0; k < ns; k++) {
            CU_ASSERT_FATAL(glia_tensor_to_host(dstate[k], back, nb) == GLIA_OK);
            dst = fmax(dst, rel_diff(state[k], back, n));
        }
        if (dwt > TOL || dst > TOL)
            printf("\n  %s '%s'%s n=%lld step %d: weights %.3g state %.3g (tol %g)\n", name, ini,
                   masked ? " masked" : "", (long long)n, step, dwt, dst, TOL);
        worst = fmax(worst, fmax(dwt, dst));
    }
    CU_ASSERT(worst <= TOL);
    for (int k = 0; k < 2; k++) {
        glia_tensor_release(dstate[k]);
        free(state[k]);
    }
    glia_tensor_release(dw), glia_tensor_release(dg), glia_tensor_release(dmask);
    free(w), free(g), free(mask), free(back);
    glia_optimizer_free(oc);
    glia_optimizer_free(og);
}

/* Every ini of a list, without and with the decay mask. */
static void run_all(const char *name, const char *const *inis, int n_inis)
{
    for (int i = 0; i < n_inis; i++)
        for (int m = 0; m < 2; m++) run_case(name, inis[i], m, N, STEPS);
}

static void test_sgd(void)
{
    static const char *const inis[] = {
        "",
        "[optimizer]\nmomentum = 0.9\n",
        "[optimizer]\nmomentum = 0.9\ndampening = 0.3\nweight_decay = 0.01\n",
        "[optimizer]\nmomentum = 0.8\nnesterov = on\nweight_decay = 0.05\n",
        "[optimizer]\nweight_decay = 0.1\n",
    };
    run_all("sgd", inis, (int)(sizeof inis / sizeof inis[0]));
}

static void test_adam(void)
{
    static const char *const inis[] = {
        "",
        "[optimizer]\nweight_decay = 0.01\n",
        "[optimizer]\nbeta1 = 0.8\nbeta2 = 0.99\neps = 1e-3\nweight_decay = 0.1\n",
        "[optimizer]\nbeta1 = 0\nbeta2 = 0.5\neps = 1e-6\n",
    };
    run_all("adam", inis, (int)(sizeof inis / sizeof inis[0]));
}

static void test_adamw(void)
{
    static const char *const inis[] = {
        "",
        "[optimizer]\nweight_decay = 0\n",
        "[optimizer]\nbeta1 = 0.5\nbeta2 = 0.9\neps = 1e-4\nweight_decay = 0.2\n",
    };
    run_all("adamw", inis, (int)(sizeof inis / sizeof inis[0]));
}

static void test_adadelta(void)
{
    static const char *const inis[] = {
        "",
        "[optimizer]\nrho = 0.95\neps = 1e-5\nweight_decay = 0.01\n",
        "[optimizer]\nrho = 0.5\nweight_decay = 0.1\n",
    };
    run_all("adadelta", inis, (int)(sizeof inis / sizeof inis[0]));
}

/* More elements than one grid of the kernels covers (65535 blocks of 256), so that the grid-stride
 * loop runs twice, and a single element. */
static void test_sizes(void)
{
    int64_t big = (int64_t)65535 * 256 + 1001;
    run_case("adam", "[optimizer]\nweight_decay = 0.01\n", true, big, 2);
    run_case("sgd", "[optimizer]\nmomentum = 0.9\n", false, big, 2);
    run_case("adamw", "", true, 1, STEPS);
    run_case("adadelta", "", false, 1, STEPS);
}

/* The CUDA impls refuse what the CPU ones refuse (the shared create), and a step whose backend is
 * not a CUDA one. */
static void test_refusals(void)
{
    struct glia_optimizer *o = NULL;
    CU_ASSERT_EQUAL(glia_optimizer_new_for(cuda_ctx, "sgd", "[optimizer]\nnesterov = on\n", GLIA_DEVICE_CUDA, &o),
                    GLIA_ECONFIG);
    CU_ASSERT_EQUAL(glia_optimizer_new_for(cuda_ctx, "adam", "[optimizer]\nbeta1 = 1\n", GLIA_DEVICE_CUDA, &o),
                    GLIA_ECONFIG);
    CU_ASSERT_EQUAL(glia_optimizer_new_for(cuda_ctx, "adamw", "[optimizer]\nbeta2 = 1\n", GLIA_DEVICE_CUDA, &o),
                    GLIA_ECONFIG);
    CU_ASSERT_FATAL(glia_optimizer_new_for(cuda_ctx, "adadelta", "", GLIA_DEVICE_CUDA, &o) == GLIA_OK);
    float w[4] = {0}, g[4] = {0}, s0[4] = {0}, s1[4] = {0};
    float *state[2] = {s0, s1};
    struct glia_opt_step s = {w, g, state, 4, NULL, 0.1, 1, cuda_cpu, NULL, NULL, 0, NULL, NULL};
    CU_ASSERT_EQUAL(o->kernel->step(o, &s), GLIA_EINVAL);
    glia_optimizer_free(o);
}

/* A step that reads its scalars from the device (s->dev_scalars, what `scalars` wrote there) updates bit for bit
 * as the step handed them by value, run as it comes and captured once into a CUDA graph that is then replayed with
 * each step's scalars written before the launch: sgd (its first step differs), adam, adamw and adadelta, the
 * learning rate and the bias corrections changing every step. `scalars` writes nothing when its bytes do not fit. */
static void test_device_scalars(void)
{
    static const struct {
        const char *name, *ini;
    } cases[] = {{"sgd", "[optimizer]\nmomentum = 0.9\nweight_decay = 0.01\n"},
                 {"adam", "[optimizer]\nweight_decay = 0.01\n"},
                 {"adamw", ""},
                 {"adadelta", "[optimizer]\nweight_decay = 0.1\n"}};
    int64_t n = 4099;
    size_t nb = (size_t)n * sizeof(float);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct glia_optimizer *oc, *og;
        make_pair(cases[c].name, cases[c].ini, &oc, &og);
        CU_ASSERT_PTR_NOT_NULL_FATAL(og->kernel->scalars);
        CU_ASSERT_PTR_NULL(oc->kernel->scalars);  /* the CPU kernels are never captured */
        /* [0]: scalars by value; [1]: read from the device, run as it comes; [2]: the same, captured then replayed */
        struct glia_tensor *w[3], *st[3][2], *dg = dev_vec(n), *dsc = dev_vec(GLIA_BACKEND_WRITE_MAX / 4);
        float *sp[3][2];
        float *h = malloc(nb), *back = malloc(nb);
        struct glia_rng rng;
        glia__rng_seed(&rng, 77);
        cuda_randn(&rng, h, n, 1.0f);
        for (int v = 0; v < 3; v++) {
            w[v] = dev_vec(n);
            CU_ASSERT_FATAL(glia_tensor_from_host(w[v], h, nb) == GLIA_OK);
            for (int k = 0; k < 2; k++) st[v][k] = dev_vec(n), sp[v][k] = st[v][k]->data;
        }
        void *graph = NULL;
        for (int step = 1; step <= 5; step++) {
            cuda_randn(&rng, h, n, 1.0f);
            CU_ASSERT_FATAL(glia_tensor_from_host(dg, h, nb) == GLIA_OK);
            double lr = 0.05 * (1 - 0.15 * (step - 1));
            struct glia_opt_step s[3];
            for (int v = 0; v < 3; v++) s[v] = (struct glia_opt_step){w[v]->data, dg->data, sp[v], (size_t)n, NULL, lr,
                                                                     step, cuda_gpu, v ? dsc->data : NULL, NULL, 0, NULL, NULL};
            unsigned char bytes[GLIA_BACKEND_WRITE_MAX] = {0};
            size_t k = og->kernel->scalars(og, &s[1], bytes, GLIA_OPT_SCALARS_MAX);
            CU_ASSERT_FATAL(k > 0 && k <= GLIA_OPT_SCALARS_MAX);
            unsigned char small[4] = {1, 2, 3, 4};
            CU_ASSERT_EQUAL(og->kernel->scalars(og, &s[1], small, sizeof small), k);
            CU_ASSERT(small[0] == 1 && small[3] == 4);
            CU_ASSERT_FATAL(glia_backend_write(cuda_gpu, dsc->data, bytes, (k + 7) / 8 * 8) == GLIA_OK);
            CU_ASSERT_EQUAL_FATAL(og->kernel->step(og, &s[0]), GLIA_OK);
            CU_ASSERT_EQUAL_FATAL(og->kernel->step(og, &s[1]), GLIA_OK);
            if (step == 2) {  /* captured at step 2 (sgd's first step is its own), replayed from then on */
                CU_ASSERT_FATAL(glia_backend_capture_begin(cuda_gpu) == GLIA_OK);
                glia_status cs = og->kernel->step(og, &s[2]);
                CU_ASSERT_FATAL(glia_backend_capture_end(cuda_gpu, &graph) == GLIA_OK && cs == GLIA_OK);
            }
            if (step == 1) CU_ASSERT_EQUAL_FATAL(og->kernel->step(og, &s[2]), GLIA_OK);
            if (step >= 2) CU_ASSERT_FATAL(glia_backend_graph_launch(cuda_gpu, graph) == GLIA_OK);
        }
        for (int v = 1; v < 3; v++) {
            int bad = 0;
            CU_ASSERT_FATAL(glia_tensor_to_host(w[0], h, nb) == GLIA_OK);
            CU_ASSERT_FATAL(glia_tensor_to_host(w[v], back, nb) == GLIA_OK);
            bad += memcmp(h, back, nb) != 0;
            for (int k = 0; k < oc->type->n_state; k++) {
                CU_ASSERT_FATAL(glia_tensor_to_host(st[0][k], h, nb) == GLIA_OK);
                CU_ASSERT_FATAL(glia_tensor_to_host(st[v][k], back, nb) == GLIA_OK);
                bad += memcmp(h, back, nb) != 0;
            }
            if (bad) printf("\n  %s: %s differs\n", cases[c].name, v == 1 ? "the device scalars' step" : "the replay");
            CU_ASSERT_EQUAL(bad, 0);
        }
        glia_backend_graph_free(cuda_gpu, graph);
        for (int v = 0; v < 3; v++) {
            glia_tensor_release(w[v]);
            for (int k = 0; k < 2; k++) glia_tensor_release(st[v][k]);
        }
        glia_tensor_release(dg), glia_tensor_release(dsc);
        free(h), free(back);
        glia_optimizer_free(oc);
        glia_optimizer_free(og);
    }
}

/* glia_backend_write puts the bytes it carries on the device in queue order; a capture keeps them as they were
 * when it was queued (the source changed after it), and sizes that are not whole words are refused. */
static void test_backend_write(void)
{
    struct glia_tensor *d = dev_vec(GLIA_BACKEND_WRITE_MAX / 4);
    uint64_t src[GLIA_BACKEND_WRITE_MAX / 8], back[GLIA_BACKEND_WRITE_MAX / 8];
    for (int i = 0; i < GLIA_BACKEND_WRITE_MAX / 8; i++) src[i] = 0x0123456789abcdefull * (uint64_t)(i + 1);
    CU_ASSERT_FATAL(glia_backend_write(cuda_gpu, d->data, src, sizeof src) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_to_host(d, back, sizeof back) == GLIA_OK);
    CU_ASSERT_EQUAL(memcmp(src, back, sizeof src), 0);
    void *graph = NULL;
    uint64_t two[2] = {7, 9};
    CU_ASSERT_FATAL(glia_backend_capture_begin(cuda_gpu) == GLIA_OK);
    glia_status st = glia_backend_write(cuda_gpu, (uint64_t *)d->data + 3, two, sizeof two);
    CU_ASSERT_FATAL(glia_backend_capture_end(cuda_gpu, &graph) == GLIA_OK && st == GLIA_OK);
    two[0] = two[1] = 0;
    CU_ASSERT_FATAL(glia_backend_graph_launch(cuda_gpu, graph) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_to_host(d, back, sizeof back) == GLIA_OK);
    src[3] = 7, src[4] = 9;
    CU_ASSERT_EQUAL(memcmp(src, back, sizeof src), 0);
    glia_backend_graph_free(cuda_gpu, graph);
    CU_ASSERT_EQUAL(glia_backend_write(cuda_gpu, d->data, src, 12), GLIA_EINVAL);
    CU_ASSERT_EQUAL(glia_backend_write(cuda_gpu, d->data, src, GLIA_BACKEND_WRITE_MAX + 8), GLIA_EINVAL);
    glia_context_clear_error(cuda_ctx);
    glia_tensor_release(d);
}

/* Whether device tensors a and b (nb bytes each) hold the same bytes. */
static bool same_dev(const struct glia_tensor *a, const struct glia_tensor *b, size_t nb)
{
    void *ha = malloc(nb), *hb = malloc(nb);
    CU_ASSERT_FATAL(ha && hb && !glia_tensor_to_host(a, ha, nb) && !glia_tensor_to_host(b, hb, nb));
    bool same = !memcmp(ha, hb, nb);
    free(ha), free(hb);
    return same;
}

/* cuda.so's optimizer kernels declare GLIA_OPT_KERNEL_SKIP and honour dev_skip (fp16's skipped step in a CUDA
 * graph): a step whose flag on the device is nonzero leaves the weights and state as they were, one whose flag is 0
 * updates as a step without the flag, bit for bit, over steps 1 to 5 with the 2nd and 4th skipped. */
static void test_device_skip(void)
{
    static const struct {
        const char *name, *ini;
    } cases[] = {{"sgd", "[optimizer]\nmomentum = 0.9\n"}, {"adam", ""}, {"adamw", ""}, {"adadelta", ""}};
    int64_t n = 3001;
    size_t nb = (size_t)n * sizeof(float);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct glia_optimizer *oc, *og;
        make_pair(cases[c].name, cases[c].ini, &oc, &og);
        CU_ASSERT(og->kernel->struct_size >= offsetof(struct glia_optimizer_kernel, flags) + sizeof(uint32_t));
        CU_ASSERT(og->kernel->flags & GLIA_OPT_KERNEL_SKIP);
        /* [0]: no flag, skipped steps not run; [1]: every step run with the flag */
        struct glia_tensor *w[2], *st[2][2], *dg = dev_vec(n), *flag = dev_vec(2);
        float *sp[2][2], *h = malloc(nb);
        struct glia_rng rng;
        glia__rng_seed(&rng, 5);
        cuda_randn(&rng, h, n, 1.0f);
        for (int v = 0; v < 2; v++) {
            w[v] = dev_vec(n);
            CU_ASSERT_FATAL(glia_tensor_from_host(w[v], h, nb) == GLIA_OK);
            for (int k = 0; k < 2; k++) st[v][k] = dev_vec(n), sp[v][k] = st[v][k]->data;
        }
        int64_t applied = 0;
        for (int k = 1; k <= 5; k++) {
            int32_t skip[2] = {k == 2 || k == 4, 0};
            cuda_randn(&rng, h, n, 1.0f);
            CU_ASSERT_FATAL(glia_tensor_from_host(dg, h, nb) == GLIA_OK);
            CU_ASSERT_FATAL(glia_backend_write(cuda_gpu, flag->data, skip, sizeof skip) == GLIA_OK);
            struct glia_opt_step s[2];
            for (int v = 0; v < 2; v++)
                s[v] = (struct glia_opt_step){w[v]->data, dg->data, sp[v], (size_t)n, NULL, 0.01, applied + 1, cuda_gpu,
                                              NULL, v ? flag->data : NULL, 0, NULL, NULL};
            if (!skip[0]) CU_ASSERT_EQUAL_FATAL(og->kernel->step(og, &s[0]), GLIA_OK);
            CU_ASSERT_EQUAL_FATAL(og->kernel->step(og, &s[1]), GLIA_OK);
            applied += !skip[0];
            bool same = same_dev(w[0], w[1], nb);
            for (int j = 0; j < oc->type->n_state; j++) same &= same_dev(st[0][j], st[1][j], nb);
            if (!same) printf("\n  %s: step %d (%s) differs\n", cases[c].name, k, skip[0] ? "skipped" : "taken");
            CU_ASSERT(same);
        }
        for (int v = 0; v < 2; v++) {
            glia_tensor_release(w[v]);
            for (int k = 0; k < 2; k++) glia_tensor_release(st[v][k]);
        }
        glia_tensor_release(dg), glia_tensor_release(flag);
        free(h);
        glia_optimizer_free(oc), glia_optimizer_free(og);
    }
}


/* lamb, lars or novograd (name) over an arena of tensors with padding between them (left as it is): one of several norm chunks,
 * one with zero weights, two without decay, one of a single element. Its CUDA kernels equal its CPU kernel bit for bit (the
 * norms' sums in one fixed order, every operation an fp32 one without contraction) after every step; the steps
 * reading their scalars from the device, captured into a CUDA graph at step 2 and replayed, with a dev_skip flag of
 * 0, equal them too; steps whose dev_skip flag is 1 leave the weights and state as they were. */
static void per_tensor_cases(const char *name, const char *const *inis, size_t n_inis)
{
    static const int64_t seg[] = {0, 100, 128, 37, 192, 9000, 9216, 20, 9344, 1};
    enum { NSEG = 5, LEN = 9400 };
    size_t nb = LEN * sizeof(float);
    struct glia_tensor *dseg;
    struct glia_shape ss = S(1, 2 * NSEG, 0, 0, 0);
    CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, GLIA_I64, &ss, &dseg) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_from_host(dseg, seg, sizeof seg) == GLIA_OK);
    for (size_t c = 0; c < n_inis; c++) {
        struct glia_optimizer *oc, *og;
        make_pair(name, inis[c], &oc, &og);
        int ns = oc->type->n_state;
        CU_ASSERT((og->kernel->flags & (GLIA_OPT_KERNEL_SKIP | GLIA_OPT_KERNEL_SEGMENTS)) ==
                  (GLIA_OPT_KERNEL_SKIP | GLIA_OPT_KERNEL_SEGMENTS));
        float *w = malloc(nb), *g = malloc(nb), *mask = malloc(nb), *back = malloc(nb), *w0 = malloc(nb);
        float *m = calloc(LEN, sizeof(float)), *v = calloc(LEN, sizeof(float)), *state[2] = {m, v};
        CU_ASSERT_FATAL(w && g && mask && back && w0 && m && v);
        struct glia_rng rng;
        glia__rng_seed(&rng, 99);
        cuda_randn(&rng, w, LEN, 1.0f);
        for (int i = 0; i < LEN; i++) mask[i] = 1.0f;
        for (int i = 0; i < LEN; i++) {
            int t = -1;
            for (int k = 0; k < NSEG; k++)
                if (i >= seg[2 * k] && i < seg[2 * k] + seg[2 * k + 1]) t = k;
            if (t < 0) w[i] = 7.0f;          /* padding */
            if (t == 3) w[i] = 0.0f;         /* zero norm */
            if (t == 1 || t == 4) mask[i] = 0.0f;
        }
        memcpy(w0, w, nb);
        /* [0]: scalars by value; [1]: from the device, with a skip flag of 0, captured at step 2 and replayed;
         * [2]: a skip flag of 1 every step */
        struct glia_tensor *dw[3], *dst[3][2], *dg = dev_vec(LEN), *dmask = dev_vec(LEN), *dsc = dev_vec(GLIA_BACKEND_WRITE_MAX / 4),
                           *flags = dev_vec(2);
        float *sp[3][2];
        int32_t fl[2] = {0, 1};
        CU_ASSERT_FATAL(glia_backend_write(cuda_gpu, flags->data, fl, sizeof fl) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_from_host(dmask, mask, nb) == GLIA_OK);
        for (int k = 0; k < 3; k++) {
            dw[k] = dev_vec(LEN);
            CU_ASSERT_FATAL(glia_tensor_from_host(dw[k], w, nb) == GLIA_OK);
            for (int j = 0; j < 2; j++) dst[k][j] = dev_vec(LEN), sp[k][j] = dst[k][j]->data;
        }
        void *graph = NULL;
        int bad = 0;
        for (int step = 1; step <= STEPS; step++) {
            memset(g, 0, nb);
            for (int k = 0; k < NSEG; k++) cuda_randn(&rng, g + seg[2 * k], seg[2 * k + 1], k == 2 ? 0.05f : 1.0f);
            CU_ASSERT_FATAL(glia_tensor_from_host(dg, g, nb) == GLIA_OK);
            double lr = 0.01 * (1 - 0.15 * (step - 1));
            struct glia_opt_step sc = {w, g, state, LEN, mask, lr, step, cuda_cpu, NULL, NULL, NSEG, seg, NULL};
            struct glia_opt_step sg[3];
            for (int k = 0; k < 3; k++)
                sg[k] = (struct glia_opt_step){dw[k]->data, dg->data, sp[k], LEN, dmask->data, lr, step, cuda_gpu,
                                               k == 1 ? dsc->data : NULL, k ? (const int32_t *)flags->data + (k - 1) : NULL,
                                               NSEG, seg, dseg->data};
            unsigned char bytes[GLIA_BACKEND_WRITE_MAX] = {0};
            size_t nbytes = og->kernel->scalars(og, &sg[1], bytes, GLIA_OPT_SCALARS_MAX);
            CU_ASSERT_FATAL(nbytes > 0 && nbytes <= GLIA_OPT_SCALARS_MAX);
            CU_ASSERT_FATAL(glia_backend_write(cuda_gpu, dsc->data, bytes, (nbytes + 7) / 8 * 8) == GLIA_OK);
            CU_ASSERT_EQUAL_FATAL(oc->kernel->step(oc, &sc), GLIA_OK);
            glia_status st = og->kernel->step(og, &sg[0]);
            if (st) printf("\n  %s cuda step: %s\n", name, glia_context_error(cuda_ctx));
            CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
            if (step == 2) {
                CU_ASSERT_FATAL(glia_backend_capture_begin(cuda_gpu) == GLIA_OK);
                glia_status cs = og->kernel->step(og, &sg[1]);
                CU_ASSERT_FATAL(glia_backend_capture_end(cuda_gpu, &graph) == GLIA_OK && cs == GLIA_OK);
            }
            if (step == 1) CU_ASSERT_EQUAL_FATAL(og->kernel->step(og, &sg[1]), GLIA_OK);
            if (step >= 2) CU_ASSERT_FATAL(glia_backend_graph_launch(cuda_gpu, graph) == GLIA_OK);
            CU_ASSERT_EQUAL_FATAL(og->kernel->step(og, &sg[2]), GLIA_OK);
            const float *want[3] = {w, m, v};
            for (int k = 0; k < 2; k++)
                for (int j = 0; j <= ns; j++) {
                    CU_ASSERT_FATAL(glia_tensor_to_host(j ? dst[k][j - 1] : dw[k], back, nb) == GLIA_OK);
                    if (memcmp(back, want[j], nb)) {
                        printf("\n  %s '%s' step %d: %s of variant %d differs from the CPU's (%g)\n", name, inis[c], step,
                               j ? "state" : "w", k, rel_diff(want[j], back, LEN));
                        bad++;
                    }
                }
        }
        CU_ASSERT_EQUAL(bad, 0);
        for (int i = 0; i < LEN; i++)
            if (w0[i] == 7.0f && mask[i] == 1.0f && w[i] != 7.0f) {
                CU_FAIL("the step changed the padding");
                break;
            }
        CU_ASSERT(memcmp(w, w0, nb) != 0);
        /* skipped every step: as it was */
        CU_ASSERT_FATAL(glia_tensor_to_host(dw[2], back, nb) == GLIA_OK);
        CU_ASSERT_EQUAL(memcmp(back, w0, nb), 0);
        for (int j = 0; j < 2; j++) {
            CU_ASSERT_FATAL(glia_tensor_to_host(dst[2][j], back, nb) == GLIA_OK);
            for (int i = 0; i < LEN; i++) bad += back[i] != 0.0f;
        }
        CU_ASSERT_EQUAL(bad, 0);
        /* a step without the device's segment table is refused */
        struct glia_opt_step none = {dw[0]->data, dg->data, sp[0], LEN, NULL, 0.01, 1, cuda_gpu, NULL, NULL, NSEG, seg, NULL};
        CU_ASSERT_EQUAL(og->kernel->step(og, &none), GLIA_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(cuda_ctx), "no tensor segments"));
        glia_context_clear_error(cuda_ctx);
        glia_backend_graph_free(cuda_gpu, graph);
        for (int k = 0; k < 3; k++) {
            glia_tensor_release(dw[k]);
            for (int j = 0; j < 2; j++) glia_tensor_release(dst[k][j]);
        }
        glia_tensor_release(dg), glia_tensor_release(dmask), glia_tensor_release(dsc), glia_tensor_release(flags);
        free(w), free(g), free(mask), free(back), free(w0), free(m), free(v);
        glia_optimizer_free(oc), glia_optimizer_free(og);
    }
    glia_tensor_release(dseg);
}

static void test_lamb(void)
{
    static const char *const inis[] = {"", "[optimizer]\nnvlamb = on\nmax_grad_norm = 1000\nweight_decay = 0.1\n",
                                       "[optimizer]\nmax_grad_norm = 0\nbias_correction = off\nbeta1 = 0.5\n"};
    per_tensor_cases("lamb", inis, sizeof inis / sizeof inis[0]);
}

static void test_lars(void)
{
    static const char *const inis[] = {"", "[optimizer]\nweight_decay = 0.05\nclip = off\n",
                                       "[optimizer]\nweight_decay = 0.01\nnesterov = on\ntrust_coefficient = 0.5\n",
                                       "[optimizer]\nmomentum = 0.5\ndampening = 0.3\nweight_decay = 0.01\n"};
    per_tensor_cases("lars", inis, sizeof inis / sizeof inis[0]);
}

static void test_novograd(void)
{
    static const char *const inis[] = {"", "[optimizer]\nbeta1 = 0.95\nbeta2 = 0.98\nweight_decay = 0.001\n",
                                       "[optimizer]\ngrad_averaging = off\nbias_correction = off\neps = 1e-3\n"};
    per_tensor_cases("novograd", inis, sizeof inis / sizeof inis[0]);
}

/* The backend's loss scaler on the device (scaler_step, which precision = fp16 captures into the training step's
 * graph) does what the core's host path does, bit for bit: glia__scaler_update_every on the sum of squares
 * sumsq_f32 gives (growing every 2nd clean step here, a step with an inf gradient skipped and its gradients left),
 * the gradients times (float)(1 / scale, times max_norm / (norm + 1e-6) when below 1), and the next loss scale
 * (float)(scale * loss_mul / loss_div); with and without clipping, as it comes and replayed from a CUDA graph. */
static void test_scaler_step(void)
{
    CU_ASSERT_FATAL(glia_backend_can_scale(cuda_gpu));
    int64_t n = 5003;
    size_t nb = (size_t)n * sizeof(float);
    struct glia_tensor *g = dev_vec(n), *ls = dev_vec(1), *dst = dev_vec(sizeof(struct glia_loss_scaler) / 4);
    float *h = malloc(nb), *want = malloc(nb), *back = malloc(nb);
    struct glia_rng rng;
    glia__rng_seed(&rng, 9);
    for (int clip = 0; clip < 2; clip++) {
        struct glia__scaler host = {1024.0, 0, 0};
        int64_t step = 10;
        struct glia_loss_scaler d = {1024.0, 0, 0, 10, 0, 0};
        CU_ASSERT_FATAL(glia_backend_write(cuda_gpu, dst->data, &d, sizeof d) == GLIA_OK);
        struct glia_scaler_args a = {g->data, (size_t)n, clip ? 0.5 : 0, 2, ls->data, 1.0, 3.0};
        void *graph = NULL;
        for (int k = 0; k < 7; k++) {
            cuda_randn(&rng, h, n, clip ? 100.0f : 0.01f);
            if (k == 3) h[17] = INFINITY;
            CU_ASSERT_FATAL(glia_tensor_from_host(g, h, nb) == GLIA_OK);
            double sq, used = host.scale;
            CU_ASSERT_FATAL(glia_backend_sumsq_f32(cuda_gpu, g->data, (size_t)n, &sq) == GLIA_OK);
            bool ok = glia__scaler_update_every(&host, sq, 2);
            double coef = 1.0 / used, norm = sqrt(sq) * coef;
            if (clip && 0.5 / (norm + 1e-6) < 1.0) coef *= 0.5 / (norm + 1e-6);
            step += ok;
            for (int64_t i = 0; i < n; i++) want[i] = ok && coef != 1.0 ? h[i] * (float)coef : h[i];
            if (k == 2) {  /* captured, then replayed from here on */
                CU_ASSERT_FATAL(glia_backend_capture_begin(cuda_gpu) == GLIA_OK);
                glia_status cs = glia_backend_scaler_step(cuda_gpu, dst->data, &a);
                CU_ASSERT_FATAL(glia_backend_capture_end(cuda_gpu, &graph) == GLIA_OK && cs == GLIA_OK);
            }
            if (k < 2) CU_ASSERT_FATAL(glia_backend_scaler_step(cuda_gpu, dst->data, &a) == GLIA_OK);
            if (k >= 2) CU_ASSERT_FATAL(glia_backend_graph_launch(cuda_gpu, graph) == GLIA_OK);
            float lsv;
            CU_ASSERT_FATAL(glia_tensor_to_host(g, back, nb) == GLIA_OK);
            CU_ASSERT_FATAL(glia_tensor_to_host(dst, &d, sizeof d) == GLIA_OK);
            CU_ASSERT_FATAL(glia_tensor_to_host(ls, &lsv, sizeof lsv) == GLIA_OK);
            bool same = !memcmp(back, want, nb) && d.scale == host.scale && d.clean == host.clean &&
                        d.skipped == host.skipped && d.step == step && d.found_inf == !ok &&
                        lsv == (float)(host.scale * 1.0 / 3.0);
            if (!same)
                printf("\n  clip %d step %d: scale %g/%g clean %lld/%lld skipped %lld/%lld step %lld/%lld found_inf %d "
                       "loss scale %g, gradients %s\n", clip, k, d.scale, host.scale, (long long)d.clean,
                       (long long)host.clean, (long long)d.skipped, (long long)host.skipped, (long long)d.step,
                       (long long)step, d.found_inf, lsv, memcmp(back, want, nb) ? "differ" : "agree");
            CU_ASSERT(same);
        }
        CU_ASSERT(host.skipped == 1 && host.scale == 2048.0);  /* grew twice, halved once */
        glia_backend_graph_free(cuda_gpu, graph);
    }
    glia_tensor_release(g), glia_tensor_release(ls), glia_tensor_release(dst);
    free(h), free(want), free(back);
}

/* A table row picked on the device by a count it holds (select, the first kernel of an fp16 graph): the row of
 * *key - base when there is one, nothing written otherwise; the key read when the work runs (a replay). */
static void test_select(void)
{
    struct glia_tensor *t = dev_vec(2 * 12), *key = dev_vec(2), *dst = dev_vec(2 * 3);
    int64_t table[12] = {40, 3}, k = 41, out[3], none[3] = {-1, -1, -1};
    for (int i = 2; i < 11; i++) table[i] = 100 + i;
    CU_ASSERT_FATAL(glia_backend_write(cuda_gpu, t->data, table, sizeof table) == GLIA_OK);
    void *graph = NULL;
    CU_ASSERT_FATAL(glia_backend_capture_begin(cuda_gpu) == GLIA_OK);
    glia_status st = glia_backend_select(cuda_gpu, dst->data, t->data, key->data, 3);
    CU_ASSERT_FATAL(glia_backend_capture_end(cuda_gpu, &graph) == GLIA_OK && st == GLIA_OK);
    for (k = 39; k <= 43; k++) {
        CU_ASSERT_FATAL(glia_backend_write(cuda_gpu, dst->data, none, sizeof none) == GLIA_OK);
        CU_ASSERT_FATAL(glia_backend_write(cuda_gpu, key->data, &k, 8) == GLIA_OK);
        CU_ASSERT_FATAL(glia_backend_graph_launch(cuda_gpu, graph) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_to_host(dst, out, sizeof out) == GLIA_OK);
        int64_t r = k - 40;
        for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(out[i], r >= 0 && r < 3 ? table[2 + r * 3 + i] : -1);
    }
    glia_backend_graph_free(cuda_gpu, graph);
    glia_tensor_release(t), glia_tensor_release(key), glia_tensor_release(dst);
}

CUDA_TEST_MAIN("cuda_optim", GLIA_TEST(test_sgd), GLIA_TEST(test_adam), GLIA_TEST(test_adamw),
               GLIA_TEST(test_adadelta), GLIA_TEST(test_sizes), GLIA_TEST(test_refusals),
               GLIA_TEST(test_device_scalars), GLIA_TEST(test_backend_write), GLIA_TEST(test_device_skip), GLIA_TEST(test_lamb), GLIA_TEST(test_lars),
               GLIA_TEST(test_novograd),
               GLIA_TEST(test_scaler_step), GLIA_TEST(test_select))
