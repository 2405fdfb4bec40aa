/* tests/test_pw_jit.c — the CUDA code generator of the elementwise kernels without a GPU: NVRTC compiles
 * the generated kernels (CUBIN, PTX fallback, refusal), and the same source built for the host computes
 * exactly what the CPU interpreter computes, four elements at a time or one by one: the pointwise type's
 * expressions with their derivatives, and the activations' with their gradients. Not the GPU run
 * (test_cuda_pointwise). */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <unistd.h>
#include "testutil.h"
#include <glia/half.h>
#include "../backends/cuda/pointwise_jit.h"

/* Expressions that together use every op, constants NaN / inf / -0, and 1 to 4 inputs. */
static const struct {
    const char *text;
    int n_in;
} cases[] = {
    {"x * sigmoid(x)", 1},
    {"0.5*x*(1 + erf(x/sqrt(2)))", 1},
    {"tanh(x)^2 + exp(-x*x) - log(1 + abs(x))", 1},
    {"sign(x) * sqrt(abs(x)) + (0/0) * ge(x, 100) + min(x, 1/0)", 1},
    {"x / y + pow(abs(x), y) - (-0)", 2},
    {"max(x, y) * z - min(y, z) / (1 + x*x)", 3},
    {"select(ge(x, y), z, w) + sigmoid(-y) * sign(x)", 4},
    {"select(gt(x + y, 0), x + y, 0) + gt(0/0, x) + gt(x, 0/0)", 2},
    {"x*tanh(y) - z^2/(1+w*w) + log(1+exp(x))", 4},
    {"dropout(select(gt(x, 0), x, 0), 0.5)", 1},
    {"dropout(x * tanh(y), 0.3) + z", 3},
    {"relu(x - y) * z + relu(y)", 3},
    {"dropout(relu(x), 0.5)", 1},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

/* A spec and the expressions it borrows. */
struct built {
    struct glia__pw_spec s;
    struct glia_expr *f, *df[GLIA_EXPR_MAX_VARS];
};

static void build(int i, struct built *p)
{
    char err[256];
    memset(p, 0, sizeof *p);
    int rc = glia_expr_parse(cases[i].text, cases[i].n_in, &p->f, err, sizeof err);
    if (rc) printf("\n  %s: %s\n", cases[i].text, err);
    CU_ASSERT_FATAL(rc == 0);
    for (int k = 0; k < cases[i].n_in; k++) CU_ASSERT_FATAL((p->df[k] = glia_expr_diff(p->f, k)) != NULL);
    p->s.f = p->f;
    p->s.n_in = cases[i].n_in;
    for (int k = 0; k < GLIA_EXPR_MAX_VARS; k++) p->s.df[k] = p->df[k];
}

static void clear(struct built *p)
{
    glia_expr_free(p->f);
    for (int k = 0; k < GLIA_EXPR_MAX_VARS; k++) glia_expr_free(p->df[k]);
}

/* ---- NVRTC ---- */

static void test_nvrtc_compiles_every_case(void)
{
    for (int i = 0; i < N_CASES; i++) {
        struct built p;
        build(i, &p);
        char *src = glia__pw_jit_source(&p.s);
        CU_ASSERT_FATAL(src != NULL);
        static const int archs[] = {80, 90};
        for (int a = 0; a < 2; a++) {
            void *img = NULL;
            size_t size = 0;
            bool cubin = false;
            char err[512] = "";
            glia_status st = glia__pw_jit_compile(src, archs[a], &img, &size, &cubin, err, sizeof err);
            if (st) printf("\n  %s for sm_%d: %s\n", cases[i].text, archs[a], err);
            CU_ASSERT(st == GLIA_OK);
            CU_ASSERT(cubin);  /* NVRTC 13 knows sm_80 and sm_90: machine code, not PTX */
            CU_ASSERT(size > 4 && img && !memcmp(img, "\177ELF", 4));
            free(img);
        }
        free(src);
        clear(&p);
    }
}

/* A device newer than every architecture NVRTC knows gets PTX of the newest one, with both
 * kernels in it; a device older than all of them is refused with the reason. */
static void test_nvrtc_ptx_fallback_and_refusal(void)
{
    struct built p;
    build(6, &p);
    char *src = glia__pw_jit_source(&p.s);
    CU_ASSERT_FATAL(src != NULL);
    void *img = NULL;
    size_t size = 0;
    bool cubin = true;
    char err[512] = "";
    CU_ASSERT(glia__pw_jit_compile(src, 999, &img, &size, &cubin, err, sizeof err) == GLIA_OK);
    CU_ASSERT(!cubin);
    CU_ASSERT_FATAL(img != NULL && size > 0);
    CU_ASSERT(((char *)img)[size - 1] == 0);
    CU_ASSERT(strstr(img, ".entry glia_pw_forward") != NULL);
    CU_ASSERT(strstr(img, ".entry glia_pw_backward") != NULL);
    CU_ASSERT(strstr(img, ".target sm_") != NULL);
    free(img);

    img = NULL;
    CU_ASSERT(glia__pw_jit_compile(src, 10, &img, &size, &cubin, err, sizeof err) == GLIA_EUNSUPPORTED);
    CU_ASSERT(img == NULL);
    CU_ASSERT(strstr(err, "no GPU architecture at or below sm_10") != NULL);

    /* source that is not CUDA C: NVRTC's status and the first line of its log */
    CU_ASSERT(glia__pw_jit_compile("extern \"C\" __global__ void k(float *x) { x[0] = nosuch(1); }", 90, &img, &size,
                                   &cubin, err, sizeof err) == GLIA_EDEVICE);
    CU_ASSERT(strstr(err, "NVRTC could not compile it for sm_90") != NULL);
    CU_ASSERT(strstr(err, "nosuch") != NULL);
    free(src);
    clear(&p);
}

/* ---- the generated source run on the host ---- */

/* What the CUDA C of a generated kernel needs to be host C++: a grid of one thread that walks
 * every element, and __int_as_float. */
static const char host_shim[] =
    "#include <math.h>\n"
    "#include <string.h>\n"
    "#define __global__\n"
    "#define __device__\n"
    "#define __forceinline__ inline\n"
    "struct glia_dim3 { unsigned x, y, z; };\n"
    "static const glia_dim3 blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0};\n"
    "static const glia_dim3 blockDim = {1, 1, 1}, gridDim = {1, 1, 1};\n"
    "static inline float __int_as_float(int i) { float f; memcpy(&f, &i, sizeof f); return f; }\n"
    "struct __attribute__((aligned(16))) float4 { float x, y, z, w; };\n"
    "struct __attribute__((aligned(8))) uint2 { unsigned x, y; };\n";

typedef void (*fwd_fn)(float *, const float *, const float *, const float *, const float *, long long,
                       unsigned long long, int, long long, long long, unsigned long long, const long long *);
typedef void (*bwd_fn)(const float *, const float *, const float *, const float *, const float *, float *, float *,
                       float *, float *, int, long long, unsigned long long, int, long long, long long,
                       unsigned long long, const long long *);

/* Where dropout() draws its mask: training over contiguous and channels_last memory, eval, and a
 * launch captured into a CUDA graph (its seed from the key and the step at step_at, not seed). */
static const int64_t captured_step = 41;
static const struct glia_expr_site sites[] = {{.seed = 11, .train = true},
                                         {.seed = 12, .train = true, .C = 5, .HW = 7},
                                         {.seed = 13, .train = false},
                                         {.seed = 14, .train = true, .C = 3, .HW = 5, .key = 0x5eed, .step_at = &captured_step}};

/* Builds src with the shim into a shared object and opens it; NULL (after a message) on failure. */
static void *host_build(const char *src, int id)
{
    char cc[256], so[256], cmd[1024];
    snprintf(cc, sizeof cc, "%s", glia_test_tmp(""));
    snprintf(cc + strlen(cc), sizeof cc - strlen(cc), "pw_jit_%d_%d.cc", (int)getpid(), id);
    snprintf(so, sizeof so, "%.*s.so", (int)(strlen(cc) - 3), cc);
    FILE *f = fopen(cc, "w");
    if (!f) return NULL;
    fputs(host_shim, f);
    fputs(src, f);
    fclose(f);
    /* GLIA_TEST_CXX has no contraction, no fast maths: one float rounding per node, as in the
     * interpreter; -O0 so that no constant reaches a libm call (gcc turns powf(v, 2) into v * v,
     * which differs from glibc's powf in the last bit) */
    snprintf(cmd, sizeof cmd, "%s -x c++ -O0 -shared -o '%s' '%s'",
             GLIA_TEST_CXX, so, cc);
    int rc = system(cmd);
    if (rc) printf("\n  '%s' exited with %d\n", cmd, rc);
    void *h = rc ? NULL : dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!rc && !h) printf("\n  dlopen: %s\n", dlerror());
    remove(cc);
    remove(so);
    return h;
}

/* Inputs mixing ordinary values with the edge cases of every op: zeros of both signs,
 * infinities, NaN, ties for max/min/ge, large arguments of exp and sigmoid. */
static void fill(float *v, int n, uint64_t seed)
{
    static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, 0.5f, 100.0f, -100.0f, 1e-30f, 88.7f,
                                    -104.0f, INFINITY, -INFINITY, NAN};
    const int ns = (int)(sizeof special / sizeof special[0]);
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(seed >> 33);
        v[i] = r % 4 == 0 ? special[(r >> 2) % (uint32_t)ns] : (float)((double)(r >> 2) / 134217728.0 * 6.0 - 3.0);
    }
}

static bool same(float a, float b)
{
    return (isnan(a) && isnan(b)) || !memcmp(&a, &b, sizeof a);
}

/* Count of elements where got and want differ (NaN equals NaN, and 0 is not -0); prints the first. */
static int mismatches(const char *what, const char *text, const float *got, const float *want, int n)
{
    int bad = 0;
    for (int i = 0; i < n; i++)
        if (!same(got[i], want[i]) && !bad++)
            printf("\n  %s of '%s' at %d: jit %.9g, interpreter %.9g\n", what, text, i, (double)got[i], (double)want[i]);
    return bad;
}

enum { NE = 4099, NP = 4104 };  /* NE: not a multiple of the interpreter's block nor of 4; NP: rows padded to 16 bytes */

/* Arrays whose rows start 16-byte aligned: at offset 0 the kernels go by quads, at offset 1 one by one. */
static float x_[GLIA_EXPR_MAX_VARS][NP] __attribute__((aligned(16))), dy_[NP] __attribute__((aligned(16)));
static float got_[GLIA_EXPR_MAX_VARS][NP] __attribute__((aligned(16))), want[GLIA_EXPR_MAX_VARS][NE];

static void test_host_run_equals_interpreter(void)
{
    for (int i = 0; i < N_CASES; i++) {
        struct built p;
        build(i, &p);
        char *src = glia__pw_jit_source(&p.s);
        CU_ASSERT_FATAL(src != NULL);
        void *h = host_build(src, i);
        CU_ASSERT(h != NULL);
        fwd_fn fwd = h ? (fwd_fn)(uintptr_t)dlsym(h, "glia_pw_forward") : NULL;
        bwd_fn bwd = h ? (bwd_fn)(uintptr_t)dlsym(h, "glia_pw_backward") : NULL;
        CU_ASSERT(!h || (fwd && bwd));
        if (!fwd || !bwd) goto next;
        int n_in = p.s.n_in;
        for (int off = 0; off < 2; off++) {
            float *x[GLIA_EXPR_MAX_VARS], *got[GLIA_EXPR_MAX_VARS], *dy = dy_ + off;
            for (int k = 0; k < GLIA_EXPR_MAX_VARS; k++) {
                x[k] = x_[k] + off;
                got[k] = got_[k] + off;
                fill(x[k], NE, 17 + 31 * (uint64_t)k + 1000 * (uint64_t)i + (uint64_t)off);
            }
            fill(dy, NE, 99 + (uint64_t)i);
            const float *xs[GLIA_EXPR_MAX_VARS] = {x[0], x[1], x[2], x[3]};

            for (int si = 0; si < (int)(sizeof sites / sizeof sites[0]); si++) {
                const struct glia_expr_site *st = &sites[si];
                /* the interpreter's site: the seed a captured launch computes (glia_seed on the host) */
                struct glia_expr_site in = *st, train;
                if (st->step_at) in.seed = glia_seed(st->key, *st->step_at), in.step_at = NULL;
                train = in;
                train.train = true;  /* backward trains */
                const long long *at = (const long long *)st->step_at;
                /* forward */
                fwd(got[0], x[0], x[1], x[2], x[3], NE, st->seed, st->train, st->C, st->HW, st->key, at);
                CU_ASSERT(glia_expr_eval_ex(p.f, xs, NE, NULL, false, &in, want[0]) == 0);
                CU_ASSERT_EQUAL(mismatches("forward", cases[i].text, got[0], want[0], NE), 0);

                /* backward: every input, written (acc 0) then accumulated onto that (acc all) */
                int all = (1 << n_in) - 1;
                for (int pass = 0; pass < 2; pass++) {
                    bwd(dy, x[0], x[1], x[2], x[3], got[0], n_in > 1 ? got[1] : NULL, n_in > 2 ? got[2] : NULL,
                        n_in > 3 ? got[3] : NULL, pass ? all : 0, NE, st->seed, 1, st->C, st->HW, st->key, at);
                    for (int k = 0; k < n_in; k++)
                        CU_ASSERT(glia_expr_eval_ex(p.df[k], xs, NE, dy, pass == 1, &train, want[k]) == 0);
                    for (int k = 0; k < n_in; k++)
                        CU_ASSERT_EQUAL(mismatches(pass ? "accumulated gradient" : "gradient", cases[i].text, got[k],
                                                   want[k], NE), 0);
                }

                /* some gradients only, the last one accumulating; with two or more inputs, input 0's and
                 * input 1's gradients in one tensor (an input fed twice): d0 written, then d1 added */
                if (n_in > 1) {
                    for (int j = 0; j < NE; j++) got[0][j] = want[0][j] = 0.25f;
                    bwd(dy, x[0], x[1], x[2], x[3], got[0], got[0], NULL, NULL, 2, NE, st->seed, 1, st->C, st->HW, st->key,
                        at);
                    CU_ASSERT(glia_expr_eval_ex(p.df[0], xs, NE, dy, false, &train, want[0]) == 0);
                    CU_ASSERT(glia_expr_eval_ex(p.df[1], xs, NE, dy, true, &train, want[0]) == 0);
                    CU_ASSERT_EQUAL(mismatches("aliased gradient", cases[i].text, got[0], want[0], NE), 0);
                }
                for (int j = 0; j < NE; j++) got[n_in - 1][j] = want[n_in - 1][j] = -3.0f;
                bwd(dy, x[0], x[1], x[2], x[3], n_in == 1 ? got[0] : NULL, n_in == 2 ? got[1] : NULL,
                    n_in == 3 ? got[2] : NULL, n_in == 4 ? got[3] : NULL, 1 << (n_in - 1), NE, st->seed, 1, st->C,
                    st->HW, st->key, at);
                CU_ASSERT(glia_expr_eval_ex(p.df[n_in - 1], xs, NE, dy, true, &train, want[n_in - 1]) == 0);
                CU_ASSERT_EQUAL(mismatches("one gradient", cases[i].text, got[n_in - 1], want[n_in - 1], NE), 0);
            }
        }
    next:
        if (h) dlclose(h);
        free(src);
        clear(&p);
    }
}

/* The activations' kernels: the type's expression forward, and backward its gradient over (s, dy) as
 * glia_expr_grad builds it (dy taken into select's branches: relu gives 0 for an inf or NaN dy where y <= 0),
 * s the output where the gradient is a function of it (relu, sigmoid, tanh), else the input. */
static void test_host_run_activation_gradients(void)
{
    static const struct {
        const char *text;
        bool over_output;
    } acts[] = {
        {"relu(x)", true},
        {"select(gt(x, 0), x, 0.200000003 * x)", false},
        {"sigmoid(x)", true},
        {"tanh(x)", true},
        {"0.5 * x * (1 + erf(x * 0.70710678118654752))", false},
    };
    for (int i = 0; i < (int)(sizeof acts / sizeof acts[0]); i++) {
        struct glia_expr *f = NULL, *g = NULL, *grad = NULL;
        char err[256];
        CU_ASSERT_FATAL(glia_expr_parse(acts[i].text, 1, &f, err, sizeof err) == 0);
        CU_ASSERT_FATAL((g = glia_expr_grad(f, 0, 1)) != NULL);
        if (acts[i].over_output) {
            CU_ASSERT_FATAL(glia_expr_over_result(g, f, 0, &grad) == 0);
            glia_expr_free(g);
        } else {
            grad = g;
        }
        struct glia__pw_spec spec = {.f = f, .df = {grad}, .n_in = 1, .grad = true};
        char *src = glia__pw_jit_source(&spec);
        CU_ASSERT_FATAL(src != NULL);
        CU_ASSERT(strstr(src, "gradient over (x, dy)") != NULL);
        void *h = host_build(src, 100 + i);
        CU_ASSERT(h != NULL);
        fwd_fn fwd = h ? (fwd_fn)(uintptr_t)dlsym(h, "glia_pw_forward") : NULL;
        bwd_fn bwd = h ? (bwd_fn)(uintptr_t)dlsym(h, "glia_pw_backward") : NULL;
        CU_ASSERT(!h || (fwd && bwd));
        for (int off = 0; off < 2 && fwd && bwd; off++) {
            float *x = x_[0] + off, *y = x_[1] + off, *dy = dy_ + off, *dx = got_[0] + off;
            fill(x, NE, 500 + (uint64_t)i);
            fill(dy, NE, 600 + (uint64_t)i);
            const float *xs[1] = {x};
            fwd(y, x, NULL, NULL, NULL, NE, 0, 0, 0, 0, 0, NULL);
            CU_ASSERT(glia_expr_eval_ex(f, xs, NE, NULL, false, NULL, want[0]) == 0);
            CU_ASSERT_EQUAL(mismatches("forward", acts[i].text, y, want[0], NE), 0);
            const float *saved = acts[i].over_output ? y : x, *vs[2] = {saved, dy};
            for (int acc = 0; acc < 2; acc++) {
                for (int j = 0; j < NE; j++) dx[j] = want[1][j] = acc ? 0.75f : NAN;
                bwd(dy, saved, NULL, NULL, NULL, dx, NULL, NULL, NULL, acc, NE, 0, 1, 0, 0, 0, NULL);
                CU_ASSERT(glia_expr_eval_ex(grad, vs, NE, NULL, acc, NULL, want[1]) == 0);
                CU_ASSERT_EQUAL(mismatches(acc ? "accumulated gradient" : "gradient", acts[i].text, dx, want[1], NE), 0);
            }
        }
        if (h) dlclose(h);
        free(src);
        glia_expr_free(f);
        glia_expr_free(grad);
    }
}

/* ---- half activations ---- */

typedef void (*fwd16_fn)(uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *, long long,
                         unsigned long long, int, long long, long long, unsigned long long, const long long *);
typedef void (*bwd16_fn)(const uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *,
                         uint16_t *, uint16_t *, uint16_t *, uint16_t *, int, long long, unsigned long long, int,
                         long long, long long, unsigned long long, const long long *);

static uint16_t to16(float v, enum glia_dtype t) { return t == GLIA_BF16 ? glia_f32_to_bf16(v) : glia_f32_to_f16(v); }
static float from16(uint16_t h, enum glia_dtype t) { return t == GLIA_BF16 ? glia_bf16_to_f32(h) : glia_f16_to_f32(h); }

/* rows 16-byte aligned: at offset 0 the kernels go by quads (four values in 8 bytes), at offset 1 one by one */
static uint16_t h_x_[GLIA_EXPR_MAX_VARS][NP] __attribute__((aligned(16))), h_dy_[NP] __attribute__((aligned(16)));
static uint16_t h_got_[GLIA_EXPR_MAX_VARS][NP] __attribute__((aligned(16)));

/* Count of elements whose bits differ from want rounded to t (NaN equals NaN); prints the first. */
static int mismatches16(const char *what, const char *text, const uint16_t *got, const float *want, enum glia_dtype t)
{
    int bad = 0;
    for (int i = 0; i < NE; i++)
        if (!same(from16(got[i], t), from16(to16(want[i], t), t)) && !bad++)
            printf("\n  %s %s of '%s' at %d: jit %.9g, interpreter %.9g\n", glia_dtype_name(t), what, text, i,
                   (double)from16(got[i], t), (double)want[i]);
    return bad;
}

/* The kernels generated for bf16 and f16 values compile with NVRTC and, built for the host, give the interpreter's
 * f32 result on the widened inputs rounded once to nearest even: forward, backward written and accumulated (the sum
 * of the old value and the gradient in f32, rounded once), by quads of values and one by one. */
static void test_host_run_half(void)
{
    for (int i = 0; i < N_CASES; i++)
        for (int h = 0; h < 4; h++) {
            int off = h / 2;
            uint16_t *h_x[GLIA_EXPR_MAX_VARS], *h_got[GLIA_EXPR_MAX_VARS], *h_dy = h_dy_ + off;
            for (int k = 0; k < GLIA_EXPR_MAX_VARS; k++) h_x[k] = h_x_[k] + off, h_got[k] = h_got_[k] + off;
            enum glia_dtype t = h % 2 ? GLIA_F16 : GLIA_BF16;
            struct built p;
            build(i, &p);
            p.s.dtype = t;
            char *src = glia__pw_jit_source(&p.s);
            CU_ASSERT_FATAL(src != NULL);
            CU_ASSERT(strstr(src, "glia_t") != NULL && strstr(src, "glia_ld4(dy, q)") != NULL);
            void *img = NULL;
            size_t size = 0;
            bool cubin = false;
            char err[512] = "";
            glia_status st = glia__pw_jit_compile(src, 90, &img, &size, &cubin, err, sizeof err);
            if (st) printf("\n  %s (%s) for sm_90: %s\n", cases[i].text, glia_dtype_name(t), err);
            CU_ASSERT(st == GLIA_OK && cubin);
            free(img);
            void *so = host_build(src, 200 + 4 * i + h);
            CU_ASSERT(so != NULL);
            fwd16_fn fwd = so ? (fwd16_fn)(uintptr_t)dlsym(so, "glia_pw_forward") : NULL;
            bwd16_fn bwd = so ? (bwd16_fn)(uintptr_t)dlsym(so, "glia_pw_backward") : NULL;
            CU_ASSERT(!so || (fwd && bwd));
            int n_in = p.s.n_in, all = (1 << n_in) - 1;
            float *x[GLIA_EXPR_MAX_VARS], *dy = dy_;
            for (int k = 0; k < GLIA_EXPR_MAX_VARS && fwd && bwd; k++) {  /* the inputs as the kernel sees them */
                x[k] = x_[k];
                fill(x[k], NE, 17 + 31 * (uint64_t)k + 1000 * (uint64_t)i);
                for (int j = 0; j < NE; j++) x[k][j] = from16(h_x[k][j] = to16(x[k][j], t), t);
            }
            fill(dy, NE, 99 + (uint64_t)i);
            for (int j = 0; j < NE; j++) dy[j] = from16(h_dy[j] = to16(dy[j], t), t);
            const float *xs[GLIA_EXPR_MAX_VARS] = {x[0], x[1], x[2], x[3]};
            for (int si = 0; si < 3 && fwd && bwd; si += 2) {  /* training, eval */
                const struct glia_expr_site *at = &sites[si];
                struct glia_expr_site train = *at;
                train.train = true;
                fwd(h_got[0], h_x[0], h_x[1], h_x[2], h_x[3], NE, at->seed, at->train, at->C, at->HW, 0, NULL);
                CU_ASSERT(glia_expr_eval_ex(p.f, xs, NE, NULL, false, at, want[0]) == 0);
                CU_ASSERT_EQUAL(mismatches16("forward", cases[i].text, h_got[0], want[0], t), 0);
                for (int pass = 0; pass < 2; pass++) {
                    for (int k = 0; k < n_in && pass; k++)  /* the interpreter adds onto the widened old values */
                        for (int j = 0; j < NE; j++) want[k][j] = from16(h_got[k][j], t);
                    bwd(h_dy, h_x[0], h_x[1], h_x[2], h_x[3], h_got[0], n_in > 1 ? h_got[1] : NULL,
                        n_in > 2 ? h_got[2] : NULL, n_in > 3 ? h_got[3] : NULL, pass ? all : 0, NE, at->seed, 1, at->C,
                        at->HW, 0, NULL);
                    for (int k = 0; k < n_in; k++) {
                        CU_ASSERT(glia_expr_eval_ex(p.df[k], xs, NE, dy, pass == 1, &train, want[k]) == 0);
                        CU_ASSERT_EQUAL(mismatches16(pass ? "accumulated gradient" : "gradient", cases[i].text,
                                                     h_got[k], want[k], t), 0);
                    }
                }
            }
            if (so) dlclose(so);
            free(src);
            clear(&p);
        }
}

GLIA_TEST_MAIN("pointwise jit", GLIA_TEST(test_nvrtc_compiles_every_case), GLIA_TEST(test_nvrtc_ptx_fallback_and_refusal),
               GLIA_TEST(test_host_run_equals_interpreter), GLIA_TEST(test_host_run_activation_gradients),
               GLIA_TEST(test_host_run_half))
