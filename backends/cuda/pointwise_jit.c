/* backends/cuda/pointwise_jit.c — code generation (expression IR -> CUDA C), NVRTC compilation,
 * loading through the CUDA runtime's library API (cudaLibraryLoadData: no driver API, so cuda.so
 * loads on machines without a driver) and the process-wide module cache of the elementwise kernels.
 * Not the layers' kernels (pointwise.c). Generated code follows glia/expr.h's value semantics node by
 * node in float, compiled without FMA contraction, like the CPU interpreter. */
#include "pointwise_jit.h"
#include <glia/types/dropout.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PW_THREADS 256
#define PW_MAX_BLOCKS 65536

/* ---- a growing string ---- */

struct sbuf {
    char *s;
    size_t len, cap;
    bool oom;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if (b->s && b->len + (size_t)k < b->cap) {
            b->len += (size_t)k;
            return;
        }
        size_t cap = b->cap ? 2 * b->cap : 4096;
        while (cap < b->len + (size_t)k + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* ---- code generation ---- */

/* Helpers with glia/expr.h's semantics: sigmoid without overflow, max/min that give NaN from either
 * side, sign of 0 (and NaN) is 0. Plain IEEE float maths otherwise (no fast-math). */
static const char preamble[] =
    "__device__ __forceinline__ float glia_sigmoid(float a)\n"
    "{\n"
    "    float e = expf(-fabsf(a));\n"
    "    return a >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);\n"
    "}\n"
    "__device__ __forceinline__ float glia_max(float a, float b) { return a >= b || a != a ? a : b; }\n"
    "__device__ __forceinline__ float glia_min(float a, float b) { return a <= b || a != a ? a : b; }\n"
    "__device__ __forceinline__ float glia_sign(float a) { return (float)((a > 0.0f) - (a < 0.0f)); }\n"
    "__device__ __forceinline__ bool glia_aligned(const void *p) { return ((unsigned long long)p & 15) == 0; }\n";

/* Half activations: glia_t holds a value's bits; glia_ld widens element i of p to float, glia_st rounds a float to
 * nearest even (core/half.h's rules, in integers so that no header is needed). */
static const char bf16_preamble[] =
    "typedef unsigned short glia_t;\n"
    "__device__ __forceinline__ float glia_w(glia_t h)\n"
    "{\n"
    "    union { unsigned u; float f; } c;\n"
    "    c.u = (unsigned)h << 16;\n"
    "    return c.f;\n"
    "}\n"
    "__device__ __forceinline__ glia_t glia_st(float v)\n"
    "{\n"
    "    union { float f; unsigned u; } c;\n"
    "    c.f = v;\n"
    "    if ((c.u & 0x7fffffffu) > 0x7f800000u) return (glia_t)((c.u >> 16) | 0x40u);\n"
    "    c.u += 0x7fffu + ((c.u >> 16) & 1u);\n"
    "    return (glia_t)(c.u >> 16);\n"
    "}\n";
static const char f16_preamble[] =
    "typedef unsigned short glia_t;\n"
    "__device__ __forceinline__ float glia_w(glia_t v)\n"
    "{\n"
    "    unsigned h = v, sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;\n"
    "    union { unsigned u; float f; } c;\n"
    "    if (e == 31) c.u = sign | 0x7f800000u | (m << 13);\n"
    "    else if (e != 0) c.u = sign | ((e + 112) << 23) | (m << 13);\n"
    "    else if (m == 0) c.u = sign;\n"
    "    else {\n"
    "        e = 113;\n"
    "        while (!(m & 0x400u)) { m <<= 1; e--; }\n"
    "        c.u = sign | (e << 23) | ((m & 0x3ffu) << 13);\n"
    "    }\n"
    "    return c.f;\n"
    "}\n"
    "__device__ __forceinline__ glia_t glia_st(float v)\n"
    "{\n"
    "    union { float f; unsigned u; } c;\n"
    "    c.f = v;\n"
    "    unsigned x = c.u & 0x7fffffffu, sign = (c.u >> 16) & 0x8000u, h, rem, half;\n"
    "    if (x > 0x7f800000u) return (glia_t)(sign | 0x7e00u);\n"
    "    if (x >= 0x477ff000u) return (glia_t)(sign | 0x7c00u);\n"
    "    if (x < 0x38800000u) {\n"
    "        unsigned e = x >> 23, m = (x & 0x7fffffu) | 0x800000u;\n"
    "        if (e < 101) return (glia_t)sign;\n"
    "        h = m >> (126 - e);\n"
    "        rem = m & ((1u << (126 - e)) - 1);\n"
    "        half = 1u << (125 - e);\n"
    "    } else {\n"
    "        unsigned r = x - 0x38000000u;\n"
    "        h = r >> 13;\n"
    "        rem = r & 0x1fffu;\n"
    "        half = 0x1000u;\n"
    "    }\n"
    "    if (rem > half || (rem == half && (h & 1u))) h++;\n"
    "    return (glia_t)(sign | h);\n"
    "}\n";

/* Half activations, after the type's preamble: glia_ld widens element i of p; glia_ld4 and glia_st4 move quad q
 * (elements 4q .. 4q + 3) as one 8-byte access, each element widened and rounded as one by one. */
static const char half_preamble[] =
    "__device__ __forceinline__ float glia_ld(const glia_t *p, long long i) { return glia_w(p[i]); }\n"
    "__device__ __forceinline__ float4 glia_ld4(const glia_t *p, long long q)\n"
    "{\n"
    "    const uint2 u = reinterpret_cast<const uint2 *>(p)[q];\n"
    "    float4 r;\n"
    "    r.x = glia_w((glia_t)(u.x & 0xffffu));\n"
    "    r.y = glia_w((glia_t)(u.x >> 16));\n"
    "    r.z = glia_w((glia_t)(u.y & 0xffffu));\n"
    "    r.w = glia_w((glia_t)(u.y >> 16));\n"
    "    return r;\n"
    "}\n"
    "__device__ __forceinline__ void glia_st4(glia_t *p, long long q, float4 r)\n"
    "{\n"
    "    uint2 u;\n"
    "    u.x = (unsigned)glia_st(r.x) | (unsigned)glia_st(r.y) << 16;\n"
    "    u.y = (unsigned)glia_st(r.z) | (unsigned)glia_st(r.w) << 16;\n"
    "    reinterpret_cast<uint2 *>(p)[q] = u;\n"
    "}\n"
    "__device__ __forceinline__ bool glia_aligned8(const void *p) { return ((unsigned long long)p & 7) == 0; }\n";

/* dropout(): the dropout layer's mask functions, from the one definition in glia/types/dropout.h */
static const char dropout_preamble[] =
    "__device__ __forceinline__ unsigned long long glia_seed(unsigned long long key, long long step)\n"
    "{\n    " GLIA_STR(GLIA_SEED_BODY(unsigned long long)) "\n}\n"
    "__device__ __forceinline__ float glia_dropout_uniform(unsigned long long seed, long long i)\n"
    "{\n    " GLIA_STR(GLIA_DROPOUT_UNIFORM_BODY(unsigned long long)) "\n}\n"
    "__device__ __forceinline__ long long glia_dropout_nchw(long long i, long long C, long long HW)\n"
    "{\n    " GLIA_STR(GLIA_DROPOUT_NCHW_BODY(long long)) "\n}\n";

/* The float as exact bits, an expression. */
static void emit_float(struct sbuf *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    sb_printf(b, "__int_as_float((int)0x%08xu)", (unsigned)u);
}

/* The float constant as exact bits (NaN and infinities included), the value in a comment. */
static void emit_const(struct sbuf *b, double value)
{
    float f = (float)value;
    emit_float(b, f);
    sb_printf(b, "; /* %.9g */\n", (double)f);
}

/* Node i of e as "const float v<i> = ...;": one statement per node, so every value is rounded to
 * float as in the interpreter (glia_expr_eval_ex). Variables are the parameters in0..in3. */
static void emit_node(struct sbuf *b, const struct glia_expr *e, int i)
{
    const struct glia_expr_node *nd = &e->nodes[i];
    int a = nd->a, b2 = nd->b, c = nd->c;
    sb_printf(b, "    const float v%d = ", i);
    switch (nd->op) {
    case GLIA_EXPR_CONST: emit_const(b, nd->value); return;
    case GLIA_EXPR_VAR: sb_printf(b, "in%d", nd->var); break;
    case GLIA_EXPR_NEG: sb_printf(b, "-v%d", a); break;
    case GLIA_EXPR_ADD: sb_printf(b, "v%d + v%d", a, b2); break;
    case GLIA_EXPR_SUB: sb_printf(b, "v%d - v%d", a, b2); break;
    case GLIA_EXPR_MUL: sb_printf(b, "v%d * v%d", a, b2); break;
    case GLIA_EXPR_DIV: sb_printf(b, "v%d / v%d", a, b2); break;
    case GLIA_EXPR_POW: sb_printf(b, "powf(v%d, v%d)", a, b2); break;
    case GLIA_EXPR_EXP: sb_printf(b, "expf(v%d)", a); break;
    case GLIA_EXPR_LOG: sb_printf(b, "logf(v%d)", a); break;
    case GLIA_EXPR_SQRT: sb_printf(b, "sqrtf(v%d)", a); break;
    case GLIA_EXPR_TANH: sb_printf(b, "tanhf(v%d)", a); break;
    case GLIA_EXPR_SIGMOID: sb_printf(b, "glia_sigmoid(v%d)", a); break;
    case GLIA_EXPR_ERF: sb_printf(b, "erff(v%d)", a); break;
    case GLIA_EXPR_ABS: sb_printf(b, "fabsf(v%d)", a); break;
    case GLIA_EXPR_SIGN: sb_printf(b, "glia_sign(v%d)", a); break;
    case GLIA_EXPR_MAX: sb_printf(b, "glia_max(v%d, v%d)", a, b2); break;
    case GLIA_EXPR_MIN: sb_printf(b, "glia_min(v%d, v%d)", a, b2); break;
    case GLIA_EXPR_GE: sb_printf(b, "v%d >= v%d ? 1.0f : 0.0f", a, b2); break;
    case GLIA_EXPR_GT: sb_printf(b, "v%d > v%d ? 1.0f : 0.0f", a, b2); break;
    case GLIA_EXPR_SELECT: sb_printf(b, "v%d != 0.0f ? v%d : v%d", a, b2, c); break;
    case GLIA_EXPR_RELU: sb_printf(b, "v%d < 0.0f ? 0.0f : v%d", a, a); break;
    case GLIA_EXPR_DROPOUT: { /* the dropout layer's loop body over the element's logical index */
        float p = (float)nd->value;
        sb_printf(b, "!train ? v%d : glia_dropout_uniform(seed, C > 0 ? glia_dropout_nchw(i, C, HW) : i) >= ", a);
        emit_float(b, p);
        sb_printf(b, " ? v%d * ", a);
        emit_float(b, 1.0f / (1.0f - p));
        sb_printf(b, " : 0.0f");
        break;
    }
    default: sb_printf(b, "__int_as_float(0x7fc00000)"); break;  /* no such op: NaN, as eval_node */
    }
    sb_printf(b, ";\n");
}

/* One element function of e, name(<the variables e reads>[, g][, i, seed, train, C, HW]): e's value, or with
 * scaled, g * e's value (dy times a derivative). The index and the mask's site only when e draws dropout(). */
static void emit_function(struct sbuf *b, const char *name, const struct glia_expr *e, bool scaled)
{
    bool dropout = glia_expr_count_op(e, GLIA_EXPR_DROPOUT) > 0;
    const char *sep = "";
    sb_printf(b, "__device__ __forceinline__ float %s(", name);
    for (int k = 0; k < GLIA_EXPR_MAX_VARS; k++)
        if (e->vars_used >> k & 1) {
            sb_printf(b, "%sconst float in%d", sep, k);
            sep = ", ";
        }
    if (scaled) {
        sb_printf(b, "%sconst float g", sep);
        sep = ", ";
    }
    if (dropout)
        sb_printf(b, "%sconst long long i, const unsigned long long seed, const int train, const long long C, "
                  "const long long HW", sep);
    sb_printf(b, ")\n{\n");
    for (int i = 0; i < e->n; i++) emit_node(b, e, i);
    sb_printf(b, "    return %sv%d;\n}\n", scaled ? "g * " : "", e->out);
}

/* A value of an element for the kernels' two loops: lane < 0, the one-by-one loop (element i, inputs
 * in<k>, dy g); else lane 0..3 of quad q (inputs q<k>, dy gq). */
static void emit_value(struct sbuf *b, int lane, const char *scalar, const char *quad)
{
    if (lane < 0) sb_printf(b, "%s", scalar);
    else sb_printf(b, "%s.%c", quad, "xyzw"[lane]);
}

/* A call of the element function name of e for one element; dy_var: the variable that is dy (grad), else -1;
 * scaled: pass g (the derivatives' dy). */
static void emit_call(struct sbuf *b, const char *name, const struct glia_expr *e, int dy_var, bool scaled, int lane)
{
    char scalar[8], quad[8];
    const char *sep = "";
    sb_printf(b, "%s(", name);
    for (int k = 0; k < GLIA_EXPR_MAX_VARS; k++) {
        if (!(e->vars_used >> k & 1)) continue;
        sb_printf(b, "%s", sep);
        sep = ", ";
        if (k == dy_var) {
            emit_value(b, lane, "g", "gq");
        } else {
            snprintf(scalar, sizeof scalar, "in%d", k);
            snprintf(quad, sizeof quad, "q%d", k);
            emit_value(b, lane, scalar, quad);
        }
    }
    if (scaled) {
        sb_printf(b, "%s", sep);
        emit_value(b, lane, "g", "gq");
        sep = ", ";
    }
    if (glia_expr_count_op(e, GLIA_EXPR_DROPOUT)) {
        if (lane < 0) sb_printf(b, "%si, seed, train, C, HW", sep);
        else sb_printf(b, "%s4 * q + %d, seed, train, C, HW", sep, lane);
    }
    sb_printf(b, ")");
}

/* Loads of the inputs x<k> for the bits of mask, before any store: a quad of each (q<k>), or one element (in<k>). */
static void emit_loads(struct sbuf *b, unsigned mask, bool quad, bool half)
{
    for (int k = 0; k < GLIA_EXPR_MAX_VARS; k++)
        if (mask >> k & 1)
            sb_printf(b, quad && half ? "        const float4 q%d = glia_ld4(x%d, q);\n"
                         : quad       ? "        const float4 q%d = reinterpret_cast<const float4 *>(x%d)[q];\n"
                         : half       ? "        const float in%d = glia_ld(x%d, i);\n"
                                      : "        const float in%d = x%d[i];\n", k, k);
}

/* With dropout(): a captured launch's seed, from the step that each replay is handed. */
static void emit_seed(struct sbuf *b, bool dropout)
{
    if (dropout) sb_printf(b, "    if (step_at) seed = glia_seed(key, *step_at);\n");
    else sb_printf(b, "    (void)key;\n    (void)step_at;\n");
}

/* The loop heads: quads of elements while every pointer in ptrs (a mask of x0..x3; out, dy and the d_k
 * as the kernel adds them) is 16-byte aligned, then the rest one by one. */
static void emit_grid(struct sbuf *b, const char *aligned)
{
    sb_printf(b, "    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
                 "    const long long step = (long long)gridDim.x * blockDim.x;\n"
                 "    const long long n4 = %s ? n / 4 : 0;\n", aligned);
}

/* The alignment test (fn: glia_aligned, 16 bytes for float4; glia_aligned8, 8 for quads of halves) of the pointers
 * x<k> for the bits of mask, after those in pre (a C condition). */
static void aligned_test(char *buf, size_t size, const char *pre, unsigned mask, const char *fn)
{
    size_t len = (size_t)snprintf(buf, size, "%s", pre);
    for (int k = 0; k < GLIA_EXPR_MAX_VARS && len < size; k++)
        if (mask >> k & 1) len += (size_t)snprintf(buf + len, size - len, " && %s(x%d)", fn, k);
}

/* The alignment function quads of the spec's type need: 16 bytes for f32's float4, 8 for four halves. */
static const char *align_fn(const struct glia__pw_spec *s) { return s->dtype != GLIA_F32 ? "glia_aligned8" : "glia_aligned"; }

/* The inputs the backward functions read (without the dy of a grad spec). */
static unsigned backward_inputs(const struct glia__pw_spec *s)
{
    unsigned m = 0;
    for (int k = 0; k < s->n_in && k < GLIA_EXPR_MAX_VARS; k++)
        if (s->df[k]) m |= s->df[k]->vars_used;
    return s->grad ? m & ~2u : m;
}

static bool any_dropout(const struct glia__pw_spec *s)
{
    bool d = glia_expr_count_op(s->f, GLIA_EXPR_DROPOUT) > 0;
    for (int k = 0; k < s->n_in && k < GLIA_EXPR_MAX_VARS; k++) d |= s->df[k] && glia_expr_count_op(s->df[k], GLIA_EXPR_DROPOUT);
    return d;
}

/* out(n) = f(x0(n), ..., x3(n)); seed, train, C, HW, key, step_at: dropout()'s mask (struct glia_expr_site). By
 * quads where every pointer is aligned (f32: float4; half activations: four values in 8 bytes, glia_ld4 and glia_st4),
 * then one by one (half: glia_ld and glia_st). */
static void emit_forward(struct sbuf *b, const struct glia__pw_spec *s)
{
    unsigned in = s->f->vars_used;
    bool half = s->dtype != GLIA_F32;
    const char *t = half ? "glia_t" : "float", *fn = align_fn(s);
    char aligned[200], pre[40];
    snprintf(pre, sizeof pre, "%s(out)", fn);
    aligned_test(aligned, sizeof aligned, pre, in, fn);
    emit_function(b, "glia_pw_f", s->f, false);
    sb_printf(b, "extern \"C\" __global__ void glia_pw_forward(%s *out, const %s *x0, const %s *x1,\n"
                 "                                           const %s *x2, const %s *x3, long long n,\n"
                 "                                           unsigned long long seed, int train, long long C,\n"
                 "                                           long long HW, unsigned long long key,\n"
                 "                                           const long long *step_at)\n"
                 "{\n", t, t, t, t, t);
    emit_seed(b, glia_expr_count_op(s->f, GLIA_EXPR_DROPOUT) > 0);
    emit_grid(b, aligned);
    sb_printf(b, "    for (long long q = start; q < n4; q += step) {\n");
    emit_loads(b, in, true, half);
    sb_printf(b, "        float4 r;\n");
    for (int lane = 0; lane < 4; lane++) {
        sb_printf(b, "        r.%c = ", "xyzw"[lane]);
        emit_call(b, "glia_pw_f", s->f, -1, false, lane);
        sb_printf(b, ";\n");
    }
    sb_printf(b, half ? "        glia_st4(out, q, r);\n    }\n" : "        reinterpret_cast<float4 *>(out)[q] = r;\n    }\n");
    sb_printf(b, "    for (long long i = 4 * n4 + start; i < n; i += step) {\n");
    emit_loads(b, in, false, half);
    sb_printf(b, half ? "        out[i] = glia_st(" : "        out[i] = ");
    emit_call(b, "glia_pw_f", s->f, -1, false, -1);
    sb_printf(b, half ? ");\n    }\n}\n" : ";\n    }\n}\n");
}

/* d_k(n) (+)= dy(n) * df/dx_k(x0(n), ..., x3(n)) (a grad spec: d_0(n) (+)= grad(x0(n), dy(n))) for each
 * d_k != NULL, in order of k */
static void emit_backward(struct sbuf *b, const struct glia__pw_spec *s)
{
    unsigned in = backward_inputs(s);
    int n_in = s->n_in < GLIA_EXPR_MAX_VARS ? s->n_in : GLIA_EXPR_MAX_VARS, dy_var = s->grad ? 1 : -1;
    bool half = s->dtype != GLIA_F32;
    const char *t = half ? "glia_t" : "float", *fn = align_fn(s);
    char aligned[320], name[16], pre[40];
    snprintf(pre, sizeof pre, "%s(dy)", fn);
    aligned_test(aligned, sizeof aligned, pre, in, fn);
    for (int k = 0; k < n_in; k++) {
        if (!s->df[k]) continue;
        size_t len = strlen(aligned);
        snprintf(aligned + len, sizeof aligned - len, " && %s(d%d)", fn, k);
        snprintf(name, sizeof name, "glia_pw_d%d", k);
        emit_function(b, name, s->df[k], !s->grad);
    }
    sb_printf(b, "extern \"C\" __global__ void glia_pw_backward(const %s *dy, const %s *x0, const %s *x1,\n"
                 "                                            const %s *x2, const %s *x3, %s *d0, %s *d1,\n"
                 "                                            %s *d2, %s *d3, int acc, long long n,\n"
                 "                                            unsigned long long seed, int train, long long C,\n"
                 "                                            long long HW, unsigned long long key,\n"
                 "                                            const long long *step_at)\n"
                 "{\n", t, t, t, t, t, t, t, t, t);
    emit_seed(b, any_dropout(s));
    emit_grid(b, aligned);
    sb_printf(b, half ? "    for (long long q = start; q < n4; q += step) {\n"
                        "        const float4 gq = glia_ld4(dy, q);\n"
                      : "    for (long long q = start; q < n4; q += step) {\n"
                        "        const float4 gq = reinterpret_cast<const float4 *>(dy)[q];\n");
    emit_loads(b, in, true, half);
    for (int k = 0; k < n_in; k++) {
        if (!s->df[k]) continue;
        snprintf(name, sizeof name, "glia_pw_d%d", k);
        sb_printf(b, "        if (d%d) {\n            float4 r;\n", k);
        for (int lane = 0; lane < 4; lane++) {
            sb_printf(b, "            r.%c = ", "xyzw"[lane]);
            emit_call(b, name, s->df[k], dy_var, !s->grad, lane);
            sb_printf(b, ";\n");
        }
        sb_printf(b, half ? "            if (acc & %d) {\n"
                            "                const float4 o = glia_ld4(d%d, q);\n"
                          : "            if (acc & %d) {\n"
                            "                const float4 o = reinterpret_cast<const float4 *>(d%d)[q];\n",
                  1 << k, k);
        sb_printf(b, "                r.x = o.x + r.x;\n                r.y = o.y + r.y;\n"
                     "                r.z = o.z + r.z;\n                r.w = o.w + r.w;\n"
                     "            }\n");
        sb_printf(b, half ? "            glia_st4(d%d, q, r);\n        }\n"
                          : "            reinterpret_cast<float4 *>(d%d)[q] = r;\n        }\n", k);
    }
    sb_printf(b, "    }\n");
    sb_printf(b, "    for (long long i = 4 * n4 + start; i < n; i += step) {\n");
    sb_printf(b, half ? "        const float g = glia_ld(dy, i);\n" : "        const float g = dy[i];\n");
    emit_loads(b, in, false, half);
    for (int k = 0; k < n_in; k++) {
        if (!s->df[k]) continue;
        snprintf(name, sizeof name, "glia_pw_d%d", k);
        sb_printf(b, "        if (d%d) {\n            const float r = ", k);
        emit_call(b, name, s->df[k], dy_var, !s->grad, -1);
        if (half)
            sb_printf(b, ";\n            d%d[i] = glia_st((acc & %d) ? glia_ld(d%d, i) + r : r);\n        }\n", k, 1 << k,
                      k);
        else
            sb_printf(b, ";\n            d%d[i] = (acc & %d) ? d%d[i] + r : r;\n        }\n", k, 1 << k, k);
    }
    sb_printf(b, "    }\n}\n");
}

char *glia__pw_jit_source(const struct glia__pw_spec *s)
{
    struct sbuf b = {0};
    char text[512];
    if (glia_expr_print(s->f, text, sizeof text) < 0) strcpy(text + sizeof text - 5, "...");
    for (char *q = text; *q; q++)
        if (*q == '*' && q[1] == '/') *q = '.';  /* cannot close the comment */
    sb_printf(&b, "/* glia pointwise, %d input%s%s%s%s: %s */\n", s->n_in, s->n_in == 1 ? "" : "s",
              s->grad ? ", gradient over (x, dy)" : "", s->dtype != GLIA_F32 ? ", values " : "",
              s->dtype != GLIA_F32 ? glia_dtype_name(s->dtype) : "", text);
    sb_printf(&b, "%s", preamble);
    if (s->dtype == GLIA_BF16) sb_printf(&b, "%s", bf16_preamble);
    if (s->dtype == GLIA_F16) sb_printf(&b, "%s", f16_preamble);
    if (s->dtype != GLIA_F32) sb_printf(&b, "%s", half_preamble);
    if (any_dropout(s)) sb_printf(&b, "%s", dropout_preamble);
    emit_forward(&b, s);
    emit_backward(&b, s);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* ---- compilation ---- */

/* The first line of NVRTC's log into buf ("" when there is none). */
static void log_first_line(nvrtcProgram prog, char *buf, size_t size)
{
    buf[0] = 0;
    size_t n = 0;
    if (nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n <= 1) return;
    char *log = malloc(n);
    if (!log) return;
    if (nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS) {
        const char *s = log;
        while (*s == '\n' || *s == '\r' || *s == ' ') s++;
        size_t len = strcspn(s, "\r\n");
        snprintf(buf, size, "%.*s", (int)len, s);
    }
    free(log);
}

/* The architecture to compile for: the device's own (SASS, *sass true) when this NVRTC knows it,
 * else the newest older one as PTX for the driver to finish; 0 when there is none. */
static int pick_arch(int device_arch, bool *sass)
{
    int n = 0, best = 0;
    if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return 0;
    int *archs = malloc((size_t)n * sizeof *archs);
    if (!archs) return 0;
    if (nvrtcGetSupportedArchs(archs) == NVRTC_SUCCESS)
        for (int i = 0; i < n; i++)
            if (archs[i] <= device_arch && archs[i] > best) best = archs[i];
    free(archs);
    *sass = best == device_arch;
    return best;
}

glia_status glia__pw_jit_compile(const char *src, int device_arch, void **image, size_t *size, bool *cubin, char *err,
                                 size_t err_size)
{
    *image = NULL;
    *size = 0;
    bool sass = false;
    int arch = pick_arch(device_arch, &sass);
    if (!arch) {
        snprintf(err, err_size, "NVRTC knows no GPU architecture at or below sm_%d", device_arch);
        return GLIA_EUNSUPPORTED;
    }
    char arch_opt[48];
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s_%d", sass ? "sm" : "compute", arch);
    /* IEEE division and square root, denormals kept, no a*b+c contraction: per-node float
     * rounding as in the CPU interpreter */
    const char *opts[] = {arch_opt, "--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true"};
    nvrtcProgram prog = NULL;
    nvrtcResult r = nvrtcCreateProgram(&prog, src, "glia_pointwise.cu", 0, NULL, NULL);
    if (r != NVRTC_SUCCESS) {
        snprintf(err, err_size, "nvrtcCreateProgram: %s", nvrtcGetErrorString(r));
        return r == NVRTC_ERROR_OUT_OF_MEMORY ? GLIA_ENOMEM : GLIA_EDEVICE;
    }
    glia_status st = GLIA_OK;
    r = nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts);
    if (r != NVRTC_SUCCESS) {
        char line[400];
        log_first_line(prog, line, sizeof line);
        snprintf(err, err_size, "NVRTC could not compile it for %s: %s%s%s", arch_opt + 19, nvrtcGetErrorString(r),
                 line[0] ? ": " : "", line);
        st = GLIA_EDEVICE;
        goto done;
    }
    size_t n = 0;
    r = sass ? nvrtcGetCUBINSize(prog, &n) : nvrtcGetPTXSize(prog, &n);
    if (r != NVRTC_SUCCESS || n == 0) {
        snprintf(err, err_size, "NVRTC gave no %s: %s", sass ? "CUBIN" : "PTX", nvrtcGetErrorString(r));
        st = GLIA_EDEVICE;
        goto done;
    }
    char *img = malloc(n);
    if (!img) {
        snprintf(err, err_size, "out of memory");
        st = GLIA_ENOMEM;
        goto done;
    }
    r = sass ? nvrtcGetCUBIN(prog, img) : nvrtcGetPTX(prog, img);
    if (r != NVRTC_SUCCESS) {
        free(img);
        snprintf(err, err_size, "NVRTC gave no %s: %s", sass ? "CUBIN" : "PTX", nvrtcGetErrorString(r));
        st = GLIA_EDEVICE;
        goto done;
    }
    *image = img;
    *size = n;
    *cubin = sass;
done:
    nvrtcDestroyProgram(&prog);
    return st;
}

/* ---- the process-wide cache: one loaded library per (expression, device architecture) ---- */

struct pw_entry {
    uint64_t hash;             /* of the expression and its input count */
    int arch;                  /* the device's: cc_major * 10 + cc_minor */
    char *source;              /* the generated text: the exact key */
    cudaLibrary_t lib;         /* never unloaded: kernels are borrowed until the process ends */
    struct glia__pw_kernels k;
    struct pw_entry *next;
};

static pthread_mutex_t pw_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pw_entry *pw_cache;

static struct pw_entry *cache_find(uint64_t hash, int arch, const char *source)
{
    for (struct pw_entry *e = pw_cache; e; e = e->next)
        if (e->hash == hash && e->arch == arch && !strcmp(e->source, source)) return e;
    return NULL;
}

/* Threads per block for a kernel that allows at most max: PW_THREADS, or whole warps below it. */
static int block_threads(int max)
{
    if (max >= PW_THREADS) return PW_THREADS;
    return max >= 32 ? max / 32 * 32 : (max > 0 ? max : 1);
}

/* Loads image as a library and finds both kernels into e. */
static glia_status load(struct pw_entry *e, const void *image, char *err, size_t err_size)
{
    cudaError_t ce = cudaLibraryLoadData(&e->lib, image, NULL, NULL, 0, NULL, NULL, 0);
    if (ce != cudaSuccess) {
        snprintf(err, err_size, "cudaLibraryLoadData: %s (%s)", cudaGetErrorString(ce), cudaGetErrorName(ce));
        (void)cudaGetLastError();  /* not left for the next launch check to find */
        e->lib = NULL;
        return GLIA_EDEVICE;
    }
    const char *name = "glia_pw_forward";
    ce = cudaLibraryGetKernel(&e->k.forward, e->lib, name);
    if (ce == cudaSuccess) {
        name = "glia_pw_backward";
        ce = cudaLibraryGetKernel(&e->k.backward, e->lib, name);
    }
    if (ce != cudaSuccess) {
        snprintf(err, err_size, "cudaLibraryGetKernel(%s): %s (%s)", name, cudaGetErrorString(ce), cudaGetErrorName(ce));
        goto fail;
    }
    /* loads both into the current device's context now (not at the first launch), and tells how
     * many threads a block may have with their register use */
    struct cudaFuncAttributes fa;
    name = "glia_pw_forward";
    ce = cudaFuncGetAttributes(&fa, (const void *)e->k.forward);
    if (ce == cudaSuccess) {
        e->k.forward_threads = block_threads(fa.maxThreadsPerBlock);
        name = "glia_pw_backward";
        ce = cudaFuncGetAttributes(&fa, (const void *)e->k.backward);
        e->k.backward_threads = block_threads(fa.maxThreadsPerBlock);
    }
    if (ce != cudaSuccess) {
        snprintf(err, err_size, "cudaFuncGetAttributes(%s): %s (%s)", name, cudaGetErrorString(ce), cudaGetErrorName(ce));
        goto fail;
    }
    return GLIA_OK;
fail:
    (void)cudaGetLastError();
    cudaLibraryUnload(e->lib);
    e->lib = NULL;
    return GLIA_EDEVICE;
}

static uint64_t key_hash(const struct glia__pw_spec *s)
{
    return glia_expr_hash(s->f) * 0x9e3779b97f4a7c15ull + (uint64_t)s->n_in * 2 + s->grad + ((uint64_t)s->dtype << 40);
}

glia_status glia__pw_jit_get(const struct glia__pw_spec *s, int cc_major, int cc_minor, struct glia__pw_kernels *out,
                             char *err, size_t err_size)
{
    err[0] = 0;
    char *src = glia__pw_jit_source(s);
    if (!src) {
        snprintf(err, err_size, "out of memory");
        return GLIA_ENOMEM;
    }
    uint64_t hash = key_hash(s);
    int arch = cc_major * 10 + cc_minor;
    glia_status st = GLIA_OK;
    pthread_mutex_lock(&pw_lock);  /* held while compiling: each expression compiles once */
    struct pw_entry *e = cache_find(hash, arch, src);
    if (!e) {
        void *image = NULL;
        size_t image_size = 0;
        bool cubin = false;
        struct pw_entry *ne = calloc(1, sizeof *ne);
        if (!ne) {
            snprintf(err, err_size, "out of memory");
            st = GLIA_ENOMEM;
        }
        if (!st) st = glia__pw_jit_compile(src, arch, &image, &image_size, &cubin, err, err_size);
        if (!st) st = load(ne, image, err, err_size);
        free(image);
        if (st) {
            free(ne);
        } else {
            ne->hash = hash;
            ne->arch = arch;
            ne->source = src;
            src = NULL;  /* owned by the entry */
            ne->next = pw_cache;
            pw_cache = e = ne;
        }
    }
    if (e) *out = e->k;
    pthread_mutex_unlock(&pw_lock);
    free(src);
    return st;
}

/* ---- launches ---- */

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Blocks for n elements: one thread per quad when every pointer is 16-byte aligned (the kernel then goes
 * by quads; a NULL pointer is aligned), else one per element; at most PW_MAX_BLOCKS (the loops stride). */
static dim3 pw_grid(int64_t n, int threads, const void *const *ptrs, int n_ptrs)
{
    bool vec = true;
    for (int i = 0; i < n_ptrs; i++) vec = vec && aligned16(ptrs[i]);
    if (vec) n = (n + 3) / 4;
    int64_t b = (n + threads - 1) / threads;
    dim3 g = {(unsigned)(b < PW_MAX_BLOCKS ? b : PW_MAX_BLOCKS), 1, 1};
    return g;
}

cudaError_t glia__pw_jit_forward(const struct glia__pw_kernels *k, void *out, const void *const *x, int64_t n,
                                 const struct glia_expr_site *site, cudaStream_t s)
{
    if (n <= 0) return cudaSuccess;
    const void *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3];
    long long nn = (long long)n, C = site ? site->C : 0, HW = site ? site->HW : 0;
    unsigned long long seed = site ? site->seed : 0, key = site ? site->key : 0;
    const int64_t *step_at = site ? site->step_at : NULL;
    int train = site && site->train;
    void *args[] = {&out, &x0, &x1, &x2, &x3, &nn, &seed, &train, &C, &HW, &key, &step_at};
    dim3 block = {(unsigned)k->forward_threads, 1, 1};
    const void *ptrs[] = {out, x0, x1, x2, x3};
    return cudaLaunchKernel((const void *)k->forward, pw_grid(n, k->forward_threads, ptrs, 5), block, args, 0, s);
}

cudaError_t glia__pw_jit_backward(const struct glia__pw_kernels *k, void *const *d, const bool *acc, const void *dy,
                                  const void *const *x, int64_t n, const struct glia_expr_site *site, cudaStream_t s)
{
    if (n <= 0) return cudaSuccess;
    const void *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3];
    void *d0 = d[0], *d1 = d[1], *d2 = d[2], *d3 = d[3];
    if (!d0 && !d1 && !d2 && !d3) return cudaSuccess;
    int accmask = 0;
    for (int j = 0; j < GLIA_EXPR_MAX_VARS; j++)
        if (d[j] && acc[j]) accmask |= 1 << j;
    long long nn = (long long)n, C = site ? site->C : 0, HW = site ? site->HW : 0;
    unsigned long long seed = site ? site->seed : 0, key = site ? site->key : 0;
    const int64_t *step_at = site ? site->step_at : NULL;
    int train = site && site->train;
    void *args[] = {(void *)&dy, &x0, &x1, &x2, &x3, &d0, &d1, &d2, &d3, &accmask, &nn, &seed, &train, &C, &HW, &key,
                    &step_at};
    dim3 block = {(unsigned)k->backward_threads, 1, 1};
    const void *ptrs[] = {dy, x0, x1, x2, x3, d0, d1, d2, d3};
    return cudaLaunchKernel((const void *)k->backward, pw_grid(n, k->backward_threads, ptrs, 9), block, args, 0, s);
}
