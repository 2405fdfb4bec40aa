/* tests/test_cuda_optim.c — the CUDA impls of sgd, adam, adamw and adadelta against their CPU
 * impls on a GPU: weights and state after several steps from equal weights and gradients, with and
 * without a decay mask, and the CUDA impls' refusals. Exits 77 (skipped) without a usable GPU or
 * without the CUDA build. Not a test of the update formulas themselves: test_optim does that. */
#include "cudautil.h"

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
        struct glia_opt_step sc = {w, g, state, (size_t)n, masked ? mask : NULL, lr, step, cuda_cpu};
        struct glia_opt_step sg = {dw->data, dg->data, dsp, (size_t)n, masked ? (const float *)dmask->data : NULL,
                                   lr, step, cuda_gpu};
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
    struct glia_opt_step s = {w, g, state, 4, NULL, 0.1, 1, cuda_cpu};
    CU_ASSERT_EQUAL(o->kernel->step(o, &s), GLIA_EINVAL);
    glia_optimizer_free(o);
}

CUDA_TEST_MAIN("cuda_optim", GLIA_TEST(test_sgd), GLIA_TEST(test_adam), GLIA_TEST(test_adamw),
               GLIA_TEST(test_adadelta), GLIA_TEST(test_sizes), GLIA_TEST(test_refusals))
