/* tests/test_cuda_attention.c — the CUDA attention against the CPU kernel on a GPU, on fresh random qkv: causal or
 * not, 1 to 4 heads, T below, on and across the CPU kernel's tile, write and accumulate, train and eval, dropout (the
 * same probabilities dropped on both), and the same bits from two runs. Exits 77 (skipped) without a usable GPU or
 * without the CUDA build. Not a test of the CPU semantics: test_attention. */
#include "cudautil.h"

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

CUDA_TEST_MAIN("cuda_attention", GLIA_TEST(test_attention), GLIA_TEST(test_attention_tf32),
               GLIA_TEST(test_attention_repeatable))
