/* tests/test_pointwise.c — the expression language of glia/expr.h (parser, errors, printing, common
 * subexpressions, hashing, folding, evaluation, symbolic derivatives and gradients), the pointwise layer
 * (gradient checks, forward values, config errors), the expressions of the elementwise types that fusion
 * nests, and the activations' kernels, which compute their type's expression. Not other layers. */
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <glia/expr.h>
#include <glia/types/dropout.h>
#include "layerutil.h"

static struct glia_context *ctx;


static struct glia_expr *parse_ok(const char *text, int n_inputs)
{
    struct glia_expr *e = NULL;
    char err[256];
    if (glia_expr_parse(text, n_inputs, &e, err, sizeof err)) printf("\n  '%s': %s\n", text, err);
    CU_ASSERT_PTR_NOT_NULL(e);
    return e;
}

static const char *printed(const struct glia_expr *e)
{
    static char buf[4][1024];
    static int k;
    char *b = buf[k++ % 4];
    CU_ASSERT(glia_expr_print(e, b, sizeof buf[0]) >= 0);
    return b;
}

/* a small deterministic generator: uniform in [lo, hi) */
static uint64_t rng_state = 0x1234567u;
static double uni(double lo, double hi)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (double)(rng_state >> 11) / 9007199254740992.0;
}

static bool close_to(double got, double want, double tol)
{
    return fabs(got - want) <= tol * fmax(1.0, fabs(want));
}

/* ---- parser ---- */

static void check_value(const char *text, const double *v, double want)
{
    struct glia_expr *e = parse_ok(text, 4);
    if (!e) return;
    double got = glia_expr_eval1(e, v);
    bool ok = close_to(got, want, 1e-12);
    if (!ok) printf("\n  %s = %.17g, want %.17g (printed %s)\n", text, got, want, printed(e));
    CU_ASSERT(ok);
    glia_expr_free(e);
}

static void test_parse_precedence(void)
{
    const double v[4] = {1.3, -0.7, 2.1, 0.4};
    double x = v[0], y = v[1], z = v[2], w = v[3];
    check_value("x + y * z", v, x + y * z);
    check_value("(x + y) * z", v, (x + y) * z);
    check_value("x - y - z", v, (x - y) - z);
    check_value("x / y / z", v, (x / y) / z);
    check_value("x - y * z / w", v, x - y * z / w);
    check_value("-x^2", v, -(x * x));
    check_value("-2^2", v, -4);
    check_value("2^3^2", v, 512);
    check_value("2^-1", v, 0.5);
    check_value("x^-y * z", v, pow(x, -y) * z);
    check_value("--x", v, x);
    check_value("- -x + +y", v, x + y);
    check_value("x*-y", v, -(x * y));
    check_value("-(x + y) * -z", v, (x + y) * z);
    check_value("1e-3 + 0.5 + .25 + 2. + 1E+2", v, 0.001 + 0.5 + 0.25 + 2 + 100);
    check_value("2 * pi", v, 2 * 3.14159265358979323846);
    check_value("pow(x, 3) + pow(w, y)", v, pow(x, 3) + pow(w, y));
    check_value("max(x, y) - min(z, w)", v, fmax(x, y) - fmin(z, w));
    check_value("exp(x) + log(z) + sqrt(w) + tanh(y) + erf(x) + abs(y)", v,
                exp(x) + log(z) + sqrt(w) + tanh(y) + erf(x) + fabs(y));
    check_value("sigmoid(y)", v, 1 / (1 + exp(-y)));
    check_value(" x\t*\n( y+z ) ", v, x * (y + z));
}

static void check_error(const char *text, int n_inputs, const char *want)
{
    struct glia_expr *e = (struct glia_expr *)1;
    char err[256];
    CU_ASSERT_EQUAL(glia_expr_parse(text, n_inputs, &e, err, sizeof err), -1);
    CU_ASSERT_PTR_NULL(e);
    if (strcmp(err, want)) printf("\n  '%s': got \"%s\", want \"%s\"\n", text, err, want);
    CU_ASSERT_STRING_EQUAL(err, want);
}

static void test_parse_errors(void)
{
    check_error("x * 2 )", 1, "expr: unexpected ')' at column 7");
    check_error("x * (1 + )", 1, "expr: unexpected ')' at column 10");
    check_error("sigmod(x)", 1, "expr: unknown function 'sigmod' (did you mean 'sigmoid'?)");
    check_error("x * tahn(x)", 1, "expr: unknown function 'tahn' (did you mean 'tanh'?)");
    check_error("foo(x)", 1, "expr: unknown function 'foo' at column 1");
    check_error("x + y", 1, "expr: variable 'y' but the layer has 1 input");
    check_error("x * z", 2, "expr: variable 'z' but the layer has 2 inputs");
    check_error("", 1, "expr: empty expression");
    check_error("   ", 1, "expr: empty expression");
    check_error("x +", 1, "expr: unexpected end of expression at column 4");
    check_error("(x + 1", 1, "expr: missing ')' for the '(' at column 1");
    check_error("max(x, 1", 1, "expr: missing ')' at column 9");
    check_error("max(x)", 1, "expr: max() takes 2 arguments, got 1 at column 1");
    check_error("2 * exp(x, x)", 1, "expr: exp() takes 1 argument, got 2 at column 5");
    check_error("q + 1", 1, "expr: unknown name 'q' at column 1 (variables are x, y, z, w)");
    check_error("sigmoid + 1", 1, "expr: function 'sigmoid' needs '(' at column 8");
    check_error("2x", 1, "expr: unexpected 'x' at column 2");
    check_error("x y", 2, "expr: unexpected 'y' at column 3");
    check_error("x(2)", 1, "expr: expected an operator before '(' at column 2");
    check_error("1e+ x", 1, "expr: bad number '1e' at column 1");
    check_error("x * 23e11111111 ^ x", 1, "expr: number '23e11111111' out of range at column 5");
    check_error("x $ 1", 1, "expr: unexpected '$' at column 3");
    check_error("x ** 2", 1, "expr: unexpected '*' at column 4");
    check_error("()", 1, "expr: unexpected ')' at column 2");
    char deep[700];
    memset(deep, '(', 300);
    strcpy(deep + 300, "x");
    memset(deep + 301, ')', 300);
    deep[601] = 0;
    check_error(deep, 1, "expr: expression nested too deeply at column 201");
    /* exponents nest to the right; a long chain of divisions nests its IR (which printing
     * recurses over): both bounded, and an IR at the bound prints and reads back */
    static char chain[2100];
    for (int i = 0; i < 300; i++) memcpy(chain + 2 * i, "x^", 2);
    strcpy(chain + 600, "x");
    check_error(chain, 1, "expr: expression nested too deeply at column 402");
    chain[0] = 'x';
    for (int i = 0; i < 1001; i++) memcpy(chain + 1 + 2 * i, "/y", 2);
    chain[2003] = 0;
    check_error(chain, 2, "expr: expression nested too deeply (1001 levels of operations, at most 1000)");
    chain[2001] = 0;
    struct glia_expr *e = parse_ok(chain, 2);
    if (e) {
        static char text[4096];
        CU_ASSERT_EQUAL(glia_expr_print(e, text, sizeof text), 1 + 4 * 1000);  /* "x / y / y ..." */
        struct glia_expr *back = parse_ok(text, 2);
        CU_ASSERT(back && glia_expr_hash(back) == glia_expr_hash(e));
        glia_expr_free(back);
        glia_expr_free(e);
    }
}

/* ---- printing, CSE, hashing, folding ---- */

static void check_print(const char *text, const char *want)
{
    struct glia_expr *e = parse_ok(text, 4);
    if (!e) return;
    const char *got = printed(e);
    if (strcmp(got, want)) printf("\n  '%s' printed \"%s\", want \"%s\"\n", text, got, want);
    CU_ASSERT_STRING_EQUAL(got, want);
    /* the canonical text reads back as the same IR */
    struct glia_expr *back = parse_ok(got, 4);
    if (back) {
        CU_ASSERT_STRING_EQUAL(printed(back), got);
        CU_ASSERT_EQUAL(glia_expr_hash(back), glia_expr_hash(e));
        CU_ASSERT_EQUAL(back->n, e->n);
        glia_expr_free(back);
    }
    glia_expr_free(e);
}

static void test_print(void)
{
    check_print("x*sigmoid(x)", "sigmoid(x) * x");
    check_print("x * y + z", "x * y + z");
    check_print("x - 1", "x - 1");
    check_print("x + -1", "x - 1");
    check_print("1 + x", "x + 1");
    check_print("2 * x", "2 * x");
    check_print("x * 2", "2 * x");
    check_print("-x*y", "-(x * y)");
    check_print("pow(x, 2)", "x^2");
    check_print("(-x)^2", "(-x)^2");
    check_print("-x^2", "-x^2");
    check_print("(-2)^x", "(-2)^x");
    check_print("x^y^z", "x^y^z");
    check_print("(x^y)^z", "(x^y)^z");
    check_print("x^(y + 1)", "x^(y + 1)");
    check_print("x^-y", "x^-y");
    check_print("x - (y - z)", "x - (y - z)");
    check_print("(x - y) - z", "x - y - z");
    check_print("x / (y * z)", "x / (y * z)");
    check_print("x * (y / z)", "y / z * x");
    check_print("max(y, x)", "max(x, y)");
    check_print("min(x*2, y)", "min(2 * x, y)");
    check_print("0.1 * x", "0.1 * x");
    check_print("x / 3", "x / 3");
    check_print("pi * x", "pi * x");
    check_print("1e-7 * x", "1e-07 * x");
    check_print("exp(-(x*x))", "exp(-(x * x))");
    check_print("log(1 + exp(x))", "log(exp(x) + 1)");
    check_print("select(ge(x, y), z, w)", "select(ge(x, y), z, w)");
    check_print("select(gt(x, y), z, w)", "select(gt(x, y), z, w)");
    check_print("select(gt(x, 0), 1, 0)", "gt(x, 0)");
    check_print("gt(x, x) + ge(x, x)", "1");
    check_print("sign(x)", "sign(x)");
    check_print("1 / 0 + x", "1 / 0 + x");
    char buf[8];
    struct glia_expr *e = parse_ok("sigmoid(x) * x", 1);
    CU_ASSERT_EQUAL(glia_expr_print(e, buf, sizeof buf), -1); /* did not fit */
    CU_ASSERT_STRING_EQUAL(buf, "sigmoid");
    char ssa[256];
    CU_ASSERT(glia_expr_print_ssa(e, ssa, sizeof ssa) > 0);
    CU_ASSERT_STRING_EQUAL(ssa, "%0 = var x\n%1 = sigmoid %0\n%2 = mul %1 %0\n");
    glia_expr_free(e);
}

static void test_cse(void)
{
    struct glia_expr *e = parse_ok("x*sigmoid(x) + sigmoid(x)", 1);
    CU_ASSERT_EQUAL(glia_expr_count_op(e, GLIA_EXPR_SIGMOID), 1);
    CU_ASSERT_EQUAL(glia_expr_count_op(e, GLIA_EXPR_VAR), 1);
    CU_ASSERT_EQUAL(e->n, 4); /* x, sigmoid, mul, add */
    CU_ASSERT_EQUAL(glia_expr_op_count(e), 3);
    CU_ASSERT_EQUAL(e->out, e->n - 1);
    for (int i = 0; i < e->n; i++) { /* SSA: operands come first */
        CU_ASSERT(e->nodes[i].a < i);
        CU_ASSERT(e->nodes[i].b < i);
        CU_ASSERT(e->nodes[i].c < i);
    }
    glia_expr_free(e);
    /* commuted spellings are one node too */
    e = parse_ok("exp(x*y) + exp(y*x) * tanh(x + y) - tanh(y + x)", 2);
    CU_ASSERT_EQUAL(glia_expr_count_op(e, GLIA_EXPR_EXP), 1);
    CU_ASSERT_EQUAL(glia_expr_count_op(e, GLIA_EXPR_TANH), 1);
    CU_ASSERT_EQUAL(glia_expr_count_op(e, GLIA_EXPR_MUL), 2);
    CU_ASSERT_EQUAL(glia_expr_count_op(e, GLIA_EXPR_ADD), 2);
    CU_ASSERT_EQUAL(e->vars_used, 3u);
    glia_expr_free(e);
}

static void check_same(const char *a, const char *b, bool same)
{
    struct glia_expr *ea = parse_ok(a, 4), *eb = parse_ok(b, 4);
    if (!ea || !eb) {
        glia_expr_free(ea);
        glia_expr_free(eb);
        return;
    }
    bool h = glia_expr_hash(ea) == glia_expr_hash(eb);
    bool p = !strcmp(printed(ea), printed(eb));
    if (h != same || p != same)
        printf("\n  '%s' (%s) vs '%s' (%s): hash %s, want %s\n", a, printed(ea), b, printed(eb), h ? "equal" : "differs",
               same ? "equal" : "different");
    CU_ASSERT_EQUAL(h, same);
    CU_ASSERT_EQUAL(p, same);
    glia_expr_free(ea);
    glia_expr_free(eb);
}

static void test_hash(void)
{
    check_same("x*sigmoid(x)", "sigmoid(x)*x", true);
    check_same("x*sigmoid(x)", "((sigmoid((x))) * (x))", true);
    check_same("x + y", "y + x", true);
    check_same("exp(y) + exp(x)", "exp(x) + exp(y)", true);
    check_same("2*x + 1", "1 + x*2", true);
    check_same("x^2", "pow(x, 2)", true);
    check_same("-x*x", "-(x*x)", true);
    check_same("x*(-y)", "-(y*x)", true);
    check_same("x - 1", "x + -1", true);
    check_same("x - -y", "x + y", true);
    check_same("x + x", "2 * x", true);
    check_same("max(x, y) * z", "z * max(y, x)", true);
    check_same("x * y * z", "z * (y * x)", true);
    check_same("x * y * z", "x * (y * z)", false); /* associativity is not used */
    check_same("x - y", "y - x", false);
    check_same("x / y", "y / x", false);
    check_same("x ^ y", "y ^ x", false);
    check_same("x", "y", false);
    check_same("x + 1", "x + 2", false);
    check_same("max(x, y)", "min(x, y)", false);
}

static void test_constant_folding(void)
{
    struct glia_expr *e = parse_ok("2 * 3 + 1", 1);
    CU_ASSERT_EQUAL(e->n, 1);
    CU_ASSERT_EQUAL(e->nodes[0].op, GLIA_EXPR_CONST);
    CU_ASSERT_EQUAL(e->nodes[0].value, 7.0);
    glia_expr_free(e);
    check_print("x * 0", "0");
    check_print("x * 1", "x");
    check_print("x + 0", "x");
    check_print("0 + x * 1 - 0", "x");
    check_print("exp(0) * x", "x");
    check_print("sqrt(4) * x + max(1, 2)", "2 * x + 2");
    check_print("x - x", "0");
    check_print("x^1 + y^0", "x + 1");
    check_print("2 * (3 * x)", "6 * x");
    check_print("-(-x)", "x");
    check_print("-(x - y)", "y - x");
    check_print("abs(-x)", "abs(x)");
    check_print("1 - 1 / 2", "0.5");
    check_print("log(-1)", "log(-1)"); /* not folded: NaN stays a runtime value */
    e = parse_ok("log(-1) + 2*pi", 1);
    double v[4] = {0};
    CU_ASSERT(isnan(glia_expr_eval1(e, v)));
    CU_ASSERT_EQUAL(glia_expr_count_op(e, GLIA_EXPR_CONST), 2); /* -1, 2pi */
    glia_expr_free(e);
}

/* A naive evaluator of the same grammar straight from the text, for checking the IR's folding
 * and rewriting against: no IR, no simplification. */
struct naive {
    const char *s;
    const double *v;
};
static double nv_expr(struct naive *n);
static void nv_ws(struct naive *n)
{
    while (*n->s == ' ') n->s++;
}
static double nv_primary(struct naive *n)
{
    nv_ws(n);
    if (*n->s == '(') {
        n->s++;
        double r = nv_expr(n);
        nv_ws(n);
        n->s++; /* ')' */
        return r;
    }
    if ((*n->s >= '0' && *n->s <= '9') || *n->s == '.') {
        char *end;
        double r = strtod(n->s, &end);
        n->s = end;
        return r;
    }
    char name[16];
    int k = 0;
    while ((*n->s >= 'a' && *n->s <= 'z') && k < 15) name[k++] = *n->s++;
    name[k] = 0;
    if (k == 1) return n->v[strchr("xyzw", name[0]) - "xyzw"];
    if (!strcmp(name, "pi")) return 3.14159265358979323846;
    double a[3] = {0};
    int na = 0;
    nv_ws(n);
    n->s++; /* '(' */
    for (;;) {
        a[na++] = nv_expr(n);
        nv_ws(n);
        if (*n->s++ != ',') break; /* ')' */
    }
    if (!strcmp(name, "exp")) return exp(a[0]);
    if (!strcmp(name, "log")) return log(a[0]);
    if (!strcmp(name, "sqrt")) return sqrt(a[0]);
    if (!strcmp(name, "tanh")) return tanh(a[0]);
    if (!strcmp(name, "sigmoid")) return 1 / (1 + exp(-a[0]));
    if (!strcmp(name, "erf")) return erf(a[0]);
    if (!strcmp(name, "abs")) return fabs(a[0]);
    if (isnan(a[0]) || isnan(a[1])) return NAN;
    if (!strcmp(name, "max")) return a[0] >= a[1] ? a[0] : a[1];
    if (!strcmp(name, "min")) return a[0] <= a[1] ? a[0] : a[1];
    if (!strcmp(name, "pow")) return pow(a[0], a[1]);
    return NAN;
}
static double nv_unary(struct naive *n);
static double nv_power(struct naive *n)
{
    double b = nv_primary(n);
    nv_ws(n);
    if (*n->s != '^') return b;
    n->s++;
    return pow(b, nv_unary(n));
}
static double nv_unary(struct naive *n)
{
    nv_ws(n);
    if (*n->s == '-') {
        n->s++;
        return -nv_unary(n);
    }
    return nv_power(n);
}
static double nv_term(struct naive *n)
{
    double l = nv_unary(n);
    for (;;) {
        nv_ws(n);
        char c = *n->s;
        if (c != '*' && c != '/') return l;
        n->s++;
        double r = nv_unary(n);
        l = c == '*' ? l * r : l / r;
    }
}
static double nv_expr(struct naive *n)
{
    double l = nv_term(n);
    for (;;) {
        nv_ws(n);
        char c = *n->s;
        if (c != '+' && c != '-') return l;
        n->s++;
        double r = nv_term(n);
        l = c == '+' ? l + r : l - r;
    }
}

/* appends the NULL-terminated strings to buf (truncating) */
static void cat(char *buf, size_t size, ...)
{
    va_list ap;
    size_t len = 0;
    va_start(ap, size);
    for (const char *p; (p = va_arg(ap, const char *));)
        for (; *p && len + 1 < size; p++) buf[len++] = *p;
    va_end(ap);
    buf[len] = 0;
}

/* a random expression over x, y (lots of repeats, constants 0, 1, -1 for the rewrites) */
static void gen(char *buf, size_t size, int depth)
{
    static const char *leaves[] = {"x", "y", "x", "y", "0", "1", "2", "0.5", "3", "pi"};
    static const char *un[] = {"-", "exp", "tanh", "sigmoid", "erf", "abs", "log", "sqrt"};
    static const char *bin[] = {"+", "-", "*", "/", "^", "max", "min", "*", "+"};
    static const char *powers[] = {"0", "1", "2", "3"};
    char a[2048], b[2048];
    int r = (int)uni(0, 10);
    if (depth <= 0 || r < 3) {
        cat(buf, size, leaves[(int)uni(0, 10)], NULL);
        return;
    }
    if (r < 5) {
        gen(a, sizeof a, depth - 1);
        const char *f = un[(int)uni(0, 8)];
        if (f[0] == '-') cat(buf, size, "-(", a, ")", NULL);
        else cat(buf, size, f, "(", a, ")", NULL);
        return;
    }
    gen(a, sizeof a, depth - 1);
    gen(b, sizeof b, depth - 1);
    const char *o = bin[(int)uni(0, 9)];
    if (o[0] == '^') cat(buf, size, "(", a, ")^", powers[(int)uni(0, 4)], NULL); /* small integer powers */
    else if (strlen(o) > 1) cat(buf, size, o, "(", a, ", ", b, ")", NULL);
    else cat(buf, size, "(", a, ") ", o, " (", b, ")", NULL);
}

/* whether every node of e is finite at v */
static bool all_finite(const struct glia_expr *e, const double *v)
{
    double *regs = malloc((size_t)e->n * sizeof *regs);
    bool finite = regs != NULL;
    if (regs) glia_expr_eval1_nodes(e, v, regs);
    for (int i = 0; finite && i < e->n; i++) finite = isfinite(regs[i]);
    free(regs);
    return finite;
}

static void test_random_round_trip(void)
{
    /* random expressions: canonical print reads back to the same IR, and the IR (folded,
     * rewritten, shared) computes what the text says; derivatives agree with differences */
    int compared = 0, dcompared = 0;
    for (int t = 0; t < 400; t++) {
        char text[2048];
        gen(text, sizeof text, 1 + t % 5);
        struct glia_expr *e = parse_ok(text, 2);
        if (!e) continue;
        char p1[8192];
        CU_ASSERT_FATAL(glia_expr_print(e, p1, sizeof p1) >= 0);
        struct glia_expr *back = parse_ok(p1, 2);
        if (back) {
            char p2[8192];
            CU_ASSERT(glia_expr_print(back, p2, sizeof p2) >= 0);
            bool same = !strcmp(p1, p2) && glia_expr_hash(back) == glia_expr_hash(e) && back->n == e->n;
            if (!same) printf("\n  %s -> %s -> %s\n", text, p1, p2);
            CU_ASSERT(same);
            glia_expr_free(back);
        }
        int var = t % 2; /* d/dx, d/dy */
        struct glia_expr *dx = glia_expr_diff(e, var);
        CU_ASSERT_PTR_NOT_NULL_FATAL(dx);
        for (int k = 0; k < 5; k++) {
            double v[4] = {uni(-1.5, 1.5), uni(-1.5, 1.5), 0, 0};
            struct naive nv = {text, v};
            double want = nv_expr(&nv), got = glia_expr_eval1(e, v);
            if (!isfinite(want) || fabs(want) > 1e6) continue;
            /* an infinite or NaN intermediate (1/0 under a saturating tanh or a max) is outside
             * what the simplifier preserves (signed zeros, 0*u = 0), and makes the chain rule NaN
             * (0 * inf), as in PyTorch */
            if (!all_finite(e, v)) continue;
            bool ok = close_to(got, want, 1e-9);
            if (!ok) printf("\n  %s = %.17g, IR %s = %.17g at (%g, %g)\n", text, want, p1, got, v[0], v[1]);
            CU_ASSERT(ok);
            compared++;
            /* derivative vs central difference where the function is smooth around v */
            const double h = 1e-5;
            double vp[4] = {v[0], v[1]}, vm[4] = {v[0], v[1]}, vp2[4] = {v[0], v[1]}, vm2[4] = {v[0], v[1]};
            vp[var] += h;
            vm[var] -= h;
            vp2[var] += 2 * h;
            vm2[var] -= 2 * h;
            double fp = glia_expr_eval1(e, vp), fm = glia_expr_eval1(e, vm), fp2 = glia_expr_eval1(e, vp2), fm2 = glia_expr_eval1(e, vm2);
            double num1 = (fp - fm) / (2 * h), num2 = (fp2 - fm2) / (4 * h);
            if (!isfinite(num1) || !isfinite(num2) || !close_to(num1, num2, 1e-4)) continue; /* a kink or a pole */
            if (!all_finite(dx, v)) continue; /* sqrt(max(0, x)) at x < 0: 0 / (2 * 0) */
            double sym = glia_expr_eval1(dx, v);
            bool dok = close_to(sym, num1, 1e-3);
            if (!dok)
                printf("\n  d(%s)/d%c = %s: %.12g, numeric %.12g at (%g, %g)\n", p1, "xy"[var], printed(dx), sym, num1, v[0],
                       v[1]);
            CU_ASSERT(dok);
            dcompared++;
        }
        glia_expr_free(dx);
        glia_expr_free(e);
    }
    CU_ASSERT(compared > 800);
    CU_ASSERT(dcompared > 600);
}

/* ---- evaluation against C math ---- */

typedef double (*ref_fn)(const double *v);
static double sg(double a) { return 1 / (1 + exp(-a)); }
static double r0(const double *v) { return v[0] * sg(v[0]); }
static double r1(const double *v) { return pow(tanh(v[0]), 2); }
static double r2(const double *v) { return exp(-v[0] * v[0]); }
static double r3(const double *v) { return log(1 + exp(v[0])); }
static double r4(const double *v) { return v[0] / v[1]; }
static double r5(const double *v) { return fmax(v[0], v[1]) * v[2]; }
static double r6(const double *v) { return erf(v[0] / sqrt(2)); }
static double r7(const double *v) { return pow(v[0], 3); }
static double r8(const double *v) { return fabs(v[0]); }
static double r9(const double *v) { return sqrt(1 + v[0] * v[0]) - fmin(v[1], v[2]) * v[3]; }
static double r10(const double *v) { return pow(1 + v[0] * v[0], v[1]); }
static double r11(const double *v) { return 0.5 * v[0] * (1 + erf(v[0] / sqrt(2))); }
static double r12(const double *v) { return v[0] * tanh(v[1]) - v[2] * v[2] / (1 + v[3] * v[3]); }
static double r13(const double *v) { return (v[0] >= v[1] ? v[2] : v[3]) + sg(-v[1]) * (v[0] < 0 ? -1 : v[0] > 0 ? 1 : 0); }
static double r14(const double *v) { return (v[0] + v[1] > 0 ? v[0] + v[1] : 0) * (v[2] > v[3] ? 1 : 0.25); }
static double r15(const double *v) { return (v[0] - v[1] < 0 ? 0 : v[0] - v[1]) * v[2]; }

static const struct {
    const char *text;
    ref_fn ref;
} cases[] = {
    {"x*sigmoid(x)", r0},       {"tanh(x)^2", r1},
    {"exp(-x*x)", r2},          {"log(1+exp(x))", r3},
    {"x/y", r4},                {"max(x,y)*z", r5},
    {"erf(x/sqrt(2))", r6},     {"pow(x,3)", r7},
    {"abs(x)", r8},             {"sqrt(1+x*x) - min(y,z)*w", r9},
    {"pow(1 + x*x, y)", r10},   {"0.5*x*(1 + erf(x/sqrt(2)))", r11},
    {"x*tanh(y) - z^2/(1+w*w)", r12}, {"select(ge(x, y), z, w) + sigmoid(-y) * sign(x)", r13},
    {"select(gt(x + y, 0), x + y, 0) * select(gt(z, w), 1, 0.25)", r14},
    {"relu(x - y) * z", r15},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static void test_eval_against_libm(void)
{
    enum { N = 1000 }; /* not a multiple of the block */
    static float in[4][N], out[N], acc[N], sc[N];
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < N; i++) in[k][i] = (float)uni(-3, 3);
    for (int i = 0; i < N; i++) {
        if (fabsf(in[1][i]) < 0.05f) in[1][i] = 0.5f; /* x/y */
        sc[i] = (float)uni(-2, 2);
    }
    const float *vars[4] = {in[0], in[1], in[2], in[3]};
    for (int c = 0; c < N_CASES; c++) {
        struct glia_expr *e = parse_ok(cases[c].text, 4);
        if (!e) continue;
        CU_ASSERT_EQUAL(glia_expr_eval(e, vars, N, out), 0);
        for (int i = 0; i < N; i++) acc[i] = 1.0f;
        CU_ASSERT_EQUAL(glia_expr_eval_ex(e, vars, N, sc, true, NULL, acc), 0);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            double v[4] = {in[0][i], in[1][i], in[2][i], in[3][i]};
            double want = cases[c].ref(v), one = glia_expr_eval1(e, v);
            bool ok = close_to(out[i], want, 2e-5) && close_to(one, want, 1e-12) &&
                      close_to(acc[i], 1.0 + sc[i] * want, 2e-5);
            if (!ok && bad++ < 3)
                printf("\n  %s at (%g, %g, %g, %g): float %.9g, double %.17g, want %.17g\n", cases[c].text, v[0], v[1], v[2],
                       v[3], out[i], one, want);
        }
        CU_ASSERT_EQUAL(bad, 0);
        glia_expr_free(e);
    }
}

/* gt is false when either side is NaN: select(gt(x, 0), x, 0) gives 0 for NaN, +0 for -0, and its
 * derivative is 0 at 0 */
static void test_gt_semantics(void)
{
    const float x[6] = {NAN, -0.0f, 0.0f, -2.0f, 3.0f, 1e-30f};
    float y[6], dy[6];
    const float *vars[1] = {x};
    struct glia_expr *e = parse_ok("select(gt(x, 0), x, 0)", 1), *d = e ? glia_expr_diff(e, 0) : NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_EQUAL(glia_expr_eval(e, vars, 6, y), 0);
    CU_ASSERT_EQUAL(glia_expr_eval(d, vars, 6, dy), 0);
    for (int i = 0; i < 6; i++) {
        float want = x[i] > 0.0f ? x[i] : 0.0f;
        CU_ASSERT_EQUAL(memcmp(&y[i], &want, sizeof want), 0);
        CU_ASSERT_EQUAL(dy[i], x[i] > 0.0f ? 1.0f : 0.0f);
        double v[4] = {x[i]};
        CU_ASSERT_EQUAL(glia_expr_eval1(e, v), x[i] > 0.0f ? (double)x[i] : 0.0);
    }
    glia_expr_free(d);
    glia_expr_free(e);
}

/* relu(x) is torch.relu (the relu layer, and what fuse_pointwise makes of one): NaN gives NaN, -0 stays
 * -0, -inf gives +0; its derivative passes where x > 0 or x is NaN and is 0 at +-0 (torch's
 * threshold_backward). Values from torch 1.13 (float32 and float64 agree); bits compared. */
static void test_relu_semantics(void)
{
    enum { n = 9 };
    const float x[n] = {NAN, -0.0f, 0.0f, INFINITY, -INFINITY, 1.5f, -1.5f, 1e-45f, -1e-45f};
    const float want_y[n] = {NAN, -0.0f, 0.0f, INFINITY, 0.0f, 1.5f, 0.0f, 1e-45f, 0.0f};
    const float want_d[n] = {1, 0, 0, 1, 0, 1, 0, 1, 0};
    float y[n], dy[n];
    const float *vars[1] = {x};
    struct glia_expr *e = parse_ok("relu(x)", 1), *d = e ? glia_expr_diff(e, 0) : NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_STRING_EQUAL(printed(e), "relu(x)");
    CU_ASSERT_EQUAL(glia_expr_op_count(e), 1);
    CU_ASSERT_EQUAL(glia_expr_eval(e, vars, n, y), 0);
    CU_ASSERT_EQUAL(glia_expr_eval(d, vars, n, dy), 0);
    for (int i = 0; i < n; i++) {
        bool same = isnan(want_y[i]) ? isnan(y[i]) : memcmp(&y[i], &want_y[i], sizeof y[i]) == 0;
        if (!same) printf("\n  relu(%g) = %g, want %g", x[i], y[i], want_y[i]);
        CU_ASSERT(same);
        CU_ASSERT_EQUAL(dy[i], want_d[i]);
        double v[4] = {x[i]}, r = glia_expr_eval1(e, v);
        CU_ASSERT(isnan(want_y[i]) ? isnan(r) : r == want_y[i] && !signbit(r) == !signbit(want_y[i]));
        CU_ASSERT_EQUAL(glia_expr_eval1(d, v), want_d[i]);
    }
    glia_expr_free(d);
    glia_expr_free(e);
    check_print("relu(relu(x))", "relu(x)");
    check_print("relu(-2) + relu(3) + x", "x + 3");
}

/* Node i of e for one element in float, as glia/expr.h says (no dropout: eval). */
static float ref_node(const struct glia_expr_node *nd, const float *r, const float *v)
{
    float a = nd->a >= 0 ? r[nd->a] : 0, b = nd->b >= 0 ? r[nd->b] : 0, c = nd->c >= 0 ? r[nd->c] : 0;
    switch (nd->op) {
    case GLIA_EXPR_CONST: return (float)nd->value;
    case GLIA_EXPR_VAR: return v[nd->var];
    case GLIA_EXPR_NEG: return -a;
    case GLIA_EXPR_ADD: return a + b;
    case GLIA_EXPR_SUB: return a - b;
    case GLIA_EXPR_MUL: return a * b;
    case GLIA_EXPR_DIV: return a / b;
    case GLIA_EXPR_EXP: return expf(a);
    case GLIA_EXPR_TANH: return tanhf(a);
    case GLIA_EXPR_ABS: return fabsf(a);
    case GLIA_EXPR_MAX: return a >= b || a != a ? a : b;
    case GLIA_EXPR_MIN: return a <= b || a != a ? a : b;
    case GLIA_EXPR_GE: return a >= b ? 1.0f : 0.0f;
    case GLIA_EXPR_GT: return a > b ? 1.0f : 0.0f;
    case GLIA_EXPR_SELECT: return a != 0.0f ? b : c;
    case GLIA_EXPR_RELU: return a < 0.0f ? 0.0f : a;
    default: return NAN;  /* not in the expressions below */
    }
}

/* The interpreter fuses work (a select of a comparison, chains of +, -, * in one loop, the result straight into
 * the output, stored or added) without changing a bit: against each node computed in float element by element,
 * written, accumulated, scaled, in place (the output is an input) and in many blocks on several threads. */
static void test_eval_fused_same_bits(void)
{
    static const char *const exprs[] = {
        "relu(x)", "select(ge(0, x), 0, y)", "select(gt(x, 0), x, 0.2 * x)", "select(gt(x, 0), y, 0.2 * y)",
        "(1 - x) * x * y", "(1 - x * x) * y", "select(ge(x, y), 3, -2)", "select(gt(0.5, x), y, 0)", "select(gt(x, 0), 0, 2)",
        "select(ge(y, x), 2, 0)", "select(ge(0, relu(x)), 0, 1) * y",
        "select(ge(x, y), x - y, y * 2) + select(gt(y, 0), 1, x)", "x * y + z", "x - y * z - w", "(x + y) * (z - w)",
        "x * y * z * w * x", "1 - x - y - z", "2 - (x * y - (z + w))", "max(x, y) * (1 - z) - relu(w) * 3",
        "tanh(x) * (x - y) * (z + 1) + ge(x, y) * abs(w)", "exp(-x * x) * (y - 2) / (1 + w * w)",
        "select(ge(x, 0), select(gt(y, 1), z, w), x * x - y)"};
    enum { N = 5000 };  /* more than 16 blocks: threads, and a partial block */
    static float x[4][N], out[N], want[N], base[N], sc[N];
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < N; i++) x[k][i] = i % 17 == 0 ? 0.0f : i % 23 == 0 ? NAN : (float)uni(-3, 3);
    for (int i = 0; i < N; i++) base[i] = (float)uni(-1, 1), sc[i] = (float)uni(-2, 2);
    for (int e = 0; e < (int)(sizeof exprs / sizeof exprs[0]); e++) {
        struct glia_expr *ir = parse_ok(exprs[e], 4);
        if (!ir) continue;
        float *r = malloc(sizeof(float) * (size_t)ir->n);
        for (int mode = 0; mode < 5; mode++) {  /* store, accumulate, scale, scale and accumulate, in place */
            bool acc = mode == 1 || mode == 3;
            const float *scale = mode == 2 || mode == 3 ? sc : NULL;
            for (int i = 0; i < N; i++) {
                float v[4] = {x[0][i], x[1][i], x[2][i], x[3][i]};
                for (int k = 0; k < ir->n; k++) r[k] = ref_node(&ir->nodes[k], r, v);
                float f = scale ? scale[i] * r[ir->out] : r[ir->out];
                want[i] = acc ? base[i] + f : f;
                out[i] = mode == 4 ? x[0][i] : base[i];
            }
            float *dst = out;
            const float *vars[4] = {mode == 4 ? out : x[0], x[1], x[2], x[3]};
            CU_ASSERT_EQUAL(glia_expr_eval_ex(ir, vars, N, scale, acc, NULL, dst), 0);
            int bad = 0;
            for (int i = 0; i < N; i++)
                if (!(isnan(want[i]) ? isnan(out[i]) : memcmp(&out[i], &want[i], sizeof want[i]) == 0) && !bad++)
                    printf("\n  %s (mode %d) at %d: %.9g, want %.9g", exprs[e], mode, i, out[i], want[i]);
            CU_ASSERT_EQUAL(bad, 0);
        }
        free(r);
        glia_expr_free(ir);
    }
}

static void test_eval_large_and_edge(void)
{
    /* many blocks (the OpenMP path), a constant result, an identity result, n = 0 */
    int64_t n = 100003;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    CU_ASSERT_PTR_NOT_NULL_FATAL(y);
    for (int64_t i = 0; i < n; i++) x[i] = (float)uni(-4, 4);
    const float *vars[1] = {x};
    struct glia_expr *e = parse_ok("x * sigmoid(x) + tanh(x)", 1);
    CU_ASSERT_EQUAL(glia_expr_eval(e, vars, n, y), 0);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double v[4] = {x[i]};
        bad += !close_to(y[i], glia_expr_eval1(e, v), 2e-5);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(glia_expr_eval(e, vars, 0, y), 0);
    glia_expr_free(e);
    e = parse_ok("2 * pi", 1);
    CU_ASSERT_EQUAL(glia_expr_eval(e, vars, 300, y), 0);
    CU_ASSERT(y[0] == (float)(2 * 3.14159265358979323846) && y[299] == y[0]);
    glia_expr_free(e);
    e = parse_ok("x", 1);
    CU_ASSERT_EQUAL(glia_expr_eval(e, vars, n, y), 0);
    CU_ASSERT_EQUAL(memcmp(x, y, (size_t)n * sizeof *x), 0);
    glia_expr_free(e);
    /* sigmoid saturates without overflow */
    float big[4] = {1000.0f, -1000.0f, 88.0f, -88.0f}, sy[4];
    const float *bv[1] = {big};
    e = parse_ok("sigmoid(x)", 1);
    CU_ASSERT_EQUAL(glia_expr_eval(e, bv, 4, sy), 0);
    CU_ASSERT(sy[0] == 1.0f && sy[1] == 0.0f && sy[2] == 1.0f && sy[3] >= 0.0f && sy[3] < 1e-37f);
    glia_expr_free(e);
    free(x);
    free(y);
}

/* ---- symbolic derivatives ---- */

static void check_diff_text(const char *text, int var, const char *want)
{
    struct glia_expr *e = parse_ok(text, 4);
    if (!e) return;
    struct glia_expr *d = glia_expr_diff(e, var);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    const char *got = printed(d);
    if (strcmp(got, want)) printf("\n  d(%s)/d%c = \"%s\", want \"%s\"\n", text, "xyzw"[var], got, want);
    CU_ASSERT_STRING_EQUAL(got, want);
    glia_expr_free(d);
    glia_expr_free(e);
}

static void test_diff_rules(void)
{
    check_diff_text("x + y", 0, "1");
    check_diff_text("x * y", 1, "x");
    check_diff_text("3 * x + 2", 0, "3");
    check_diff_text("pow(x, 3)", 0, "3 * x^2");
    check_diff_text("x^y", 0, "x^(y - 1) * y");
    check_diff_text("x^y", 1, "x^y * log(x)");
    check_diff_text("abs(x)", 0, "sign(x)");
    check_diff_text("sigmoid(x)", 0, "(1 - sigmoid(x)) * sigmoid(x)");
    check_diff_text("tanh(x)", 0, "1 - tanh(x) * tanh(x)");
    check_diff_text("exp(x)", 0, "exp(x)");
    check_diff_text("log(x)", 0, "1 / x");
    check_diff_text("sqrt(x)", 0, "1 / (2 * sqrt(x))");
    check_diff_text("erf(x)", 0, "1.1283791670955126 * exp(-(x * x))");
    check_diff_text("x / y", 0, "1 / y");
    check_diff_text("x / y", 1, "-(x / y / y)");
    check_diff_text("max(x, y)", 0, "ge(x, y)");
    check_diff_text("max(x, y)", 1, "select(ge(x, y), 0, 1)");
    check_diff_text("min(x, y)", 0, "ge(y, x)");
    check_diff_text("max(x, 0)", 0, "select(ge(0, x), 0, 1)");
    check_diff_text("relu(x)", 0, "select(ge(0, relu(x)), 0, 1)");  /* read from relu's own value */
    check_diff_text("relu(x * y)", 1, "select(ge(0, relu(x * y)), 0, x)");
    check_diff_text("gt(x, y)", 0, "0");
    check_diff_text("select(gt(x, 0), x, 0.01 * x)", 0, "select(gt(x, 0), 1, 0.01)");
    check_diff_text("x * sigmoid(x)", 2, "0");
    check_diff_text("exp(-x*x)", 0, "-2 * x * exp(-(x * x))");
    /* a constant exponent has no log term: no log of a negative base, no 0 * NaN */
    struct glia_expr *e = parse_ok("pow(x, 3)", 1), *d = glia_expr_diff(e, 0);
    CU_ASSERT_EQUAL(glia_expr_count_op(d, GLIA_EXPR_LOG), 0);
    double v[4] = {-2};
    CU_ASSERT_EQUAL(glia_expr_eval1(d, v), 12.0);
    glia_expr_free(d);
    glia_expr_free(e);
    /* derivatives share nodes with themselves: d(x*sigmoid(x)) has one sigmoid */
    e = parse_ok("x * sigmoid(x)", 1);
    d = glia_expr_diff(e, 0);
    CU_ASSERT_EQUAL(glia_expr_count_op(d, GLIA_EXPR_SIGMOID), 1);
    glia_expr_free(d);
    glia_expr_free(e);
}

static bool away_from_kinks(const char *text, const double *v)
{
    if (strstr(text, "abs") && fabs(v[0]) < 1e-3) return false;
    if ((strstr(text, "max") || strstr(text, "min") || strstr(text, "ge(")) && fabs(v[0] - v[1]) < 1e-3) return false;
    if (strstr(text, "gt(") && (fabs(v[0] + v[1]) < 1e-3 || fabs(v[2] - v[3]) < 1e-3)) return false;
    if (strstr(text, "sign") && fabs(v[0]) < 1e-3) return false;
    if (strstr(text, "relu(x - y)") && fabs(v[0] - v[1]) < 1e-3) return false;
    if (strstr(text, "min(y,z)") && fabs(v[1] - v[2]) < 1e-3) return false;
    return true;
}

static void test_diff_numeric(void)
{
    int checked = 0;
    for (int c = 0; c < N_CASES; c++) {
        struct glia_expr *e = parse_ok(cases[c].text, 4);
        if (!e) continue;
        for (int var = 0; var < 4; var++) {
            struct glia_expr *d = glia_expr_diff(e, var);
            CU_ASSERT_PTR_NOT_NULL_FATAL(d);
            CU_ASSERT_EQUAL(d->vars_used & ~e->vars_used, 0u);
            int bad = 0;
            for (int t = 0; t < 200; t++) {
                double v[4];
                for (int k = 0; k < 4; k++) v[k] = uni(-2.5, 2.5);
                if (fabs(v[1]) < 0.1) v[1] = 0.7; /* x/y */
                if (!away_from_kinks(cases[c].text, v)) continue;
                const double h = 1e-6;
                double vp[4], vm[4];
                memcpy(vp, v, sizeof v);
                memcpy(vm, v, sizeof v);
                vp[var] += h;
                vm[var] -= h;
                double num = (glia_expr_eval1(e, vp) - glia_expr_eval1(e, vm)) / (2 * h);
                double sym = glia_expr_eval1(d, v);
                bool ok = close_to(sym, num, 1e-5);
                if (!ok && bad++ < 3)
                    printf("\n  d(%s)/d%c = %s at (%g, %g, %g, %g): symbolic %.12g, numeric %.12g\n", cases[c].text,
                           "xyzw"[var], printed(d), v[0], v[1], v[2], v[3], sym, num);
                checked++;
            }
            CU_ASSERT_EQUAL(bad, 0);
            glia_expr_free(d);
        }
        glia_expr_free(e);
    }
    CU_ASSERT(checked > N_CASES * 4 * 150);
}

/* ---- gradients: glia_expr_grad and glia_expr_over_result ---- */

/* The gradient of text's expression with dy as variable y, printed, and over the result when over is set
 * (want_over NULL: over_result says the input is needed). */
static void check_grad(const char *text, const char *want, const char *want_over)
{
    struct glia_expr *e = parse_ok(text, 1), *g = e ? glia_expr_grad(e, 0, 1) : NULL, *o = NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    if (strcmp(printed(g), want)) printf("\n  grad of %s: %s, want %s\n", text, printed(g), want);
    CU_ASSERT_STRING_EQUAL(printed(g), want);
    int rc = glia_expr_over_result(g, e, 0, &o);
    CU_ASSERT_EQUAL(rc, want_over ? 0 : 1);
    CU_ASSERT((o != NULL) == (want_over != NULL));
    if (o && want_over) {
        if (strcmp(printed(o), want_over)) printf("\n  over the result: %s, want %s\n", printed(o), want_over);
        CU_ASSERT_STRING_EQUAL(printed(o), want_over);
        CU_ASSERT_EQUAL(o->vars_used, 3u);
    }
    glia_expr_free(o);
    glia_expr_free(g);
    glia_expr_free(e);
}

/* relu's derivative reads relu's own value; a gradient takes dy into both branches of a select, so relu's
 * is 0 where y <= 0 even for an inf or NaN dy (torch's threshold_backward), where dy * derivative is NaN;
 * sigmoid's, tanh's and relu's gradients are functions of the output, leaky_relu's and gelu's are not. */
static void test_grad_and_over_result(void)
{
    check_print("relu(x) + 0 * x", "relu(x)");
    struct glia_expr *e = parse_ok("relu(x)", 1), *d = e ? glia_expr_diff(e, 0) : NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_STRING_EQUAL(printed(d), "select(ge(0, relu(x)), 0, 1)");
    glia_expr_free(d);
    glia_expr_free(e);
    check_grad("relu(x)", "select(ge(0, relu(x)), 0, y)", "select(ge(0, x), 0, y)");
    check_grad("sigmoid(x)", "(1 - sigmoid(x)) * sigmoid(x) * y", "(1 - x) * x * y");
    check_grad("tanh(x)", "(1 - tanh(x) * tanh(x)) * y", "(1 - x * x) * y");
    check_grad("select(gt(x, 0), x, 0.2 * x)", "select(gt(x, 0), y, 0.2 * y)", NULL);
    check_grad("0.5 * x * (1 + erf(x * 0.70710678118654752))",
               "(0.5 * (erf(0.7071067811865476 * x) + 1) + 0.5 * x * (0.7978845608028654 * "
               "exp(-(0.7071067811865476 * x * (0.7071067811865476 * x))))) * y",
               NULL);
    check_grad("max(x, 0.5) * 3", "3 * select(ge(0.5, x), 0, 1) * y", NULL);  /* a select under a product stays */
    check_grad("x * x", "2 * x * y", NULL);

    /* relu's gradient against torch's threshold_backward, and dy * derivative for the difference */
    enum { n = 8 };
    const float x[n] = {NAN, -0.0f, 0.0f, -1.0f, -INFINITY, 2.0f, 3.0f, -2.0f};
    const float dy[n] = {2.0f, INFINITY, NAN, INFINITY, NAN, NAN, INFINITY, -1.0f};
    const float want[n] = {2.0f, 0.0f, 0.0f, 0.0f, 0.0f, NAN, INFINITY, 0.0f};
    float got[n], prod[n];
    const float *v[2] = {x, dy};
    e = parse_ok("relu(x)", 1);
    struct glia_expr *g = e ? glia_expr_grad(e, 0, 1) : NULL;
    d = e ? glia_expr_diff(e, 0) : NULL;
    CU_ASSERT_FATAL(g && d);
    CU_ASSERT_EQUAL(glia_expr_eval(g, v, n, got), 0);
    CU_ASSERT_EQUAL(glia_expr_eval_ex(d, v, n, dy, false, NULL, prod), 0);
    for (int i = 0; i < n; i++) {
        bool ok = isnan(want[i]) ? isnan(got[i]) : got[i] == want[i];
        if (!ok) printf("\n  relu gradient at x = %g, dy = %g: %g, want %g", x[i], dy[i], got[i], want[i]);
        CU_ASSERT(ok);
    }
    CU_ASSERT(isnan(prod[1]) && isnan(prod[2]));  /* dy * 0 */
    glia_expr_free(g);
    glia_expr_free(d);
    glia_expr_free(e);

    /* a gradient larger than the table a finished expression keeps: building on it grows the table */
    const char *big = "tanh(x) * sigmoid(2 * x) * exp(-x * x) * erf(3 * x) * log(1 + x * x) * sqrt(2 + x * x) * "
                      "pow(1 + abs(x), 1.5) / (3 + x * x * x * x) + max(x, 0.25) * min(x, -0.5)";
    e = parse_ok(big, 1);
    d = e ? glia_expr_diff(e, 0) : NULL;
    g = e ? glia_expr_grad(e, 0, 1) : NULL;
    CU_ASSERT_FATAL(d && g);
    CU_ASSERT(d->n > 64);
    for (int i = 0; i < 40; i++) {
        double p[4] = {uni(-3, 3), uni(-2, 2)}, dd = glia_expr_eval1(d, p), gg = glia_expr_eval1(g, p);
        if (!close_to(gg, p[1] * dd, 1e-12)) printf("\n  %g * %g = %g, gradient %g", p[1], dd, p[1] * dd, gg);
        CU_ASSERT(close_to(gg, p[1] * dd, 1e-12));
    }
    glia_expr_free(g);
    glia_expr_free(d);
    glia_expr_free(e);
}

/* ---- the elementwise types' expressions ---- */

/* The expression that type l gives for fusion, as its pointwise slot writes it (NULL: none). */
static void check_type_text(const char *ini, int n_in, const char *want)
{
    struct glia_shape in[5] = {S(2, 2, 3, 0, 0), S(2, 2, 3, 0, 0), S(2, 2, 3, 0, 0), S(2, 2, 3, 0, 0), S(2, 2, 3, 0, 0)};
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, ini, in, n_in, &B);
    CU_ASSERT_PTR_NOT_NULL_FATAL(B.type->pointwise);
    char buf[128];
    int len = B.type->pointwise(&B.l, n_in, NULL, 0);  /* the length, as snprintf */
    if (!want) {
        CU_ASSERT(len < 0);
    } else {
        CU_ASSERT_EQUAL(B.type->pointwise(&B.l, n_in, buf, sizeof buf), len);
        if (strcmp(buf, want)) printf("\n  %s: '%s', want '%s'\n", ini, buf, want);
        CU_ASSERT_STRING_EQUAL(buf, want);
    }
    layer_unbuild(&B);
    glia_context_free(ctx);
}

/* Exactly the texts the fuse_pointwise pass nested before the types gave them, so that a fused model computes the
 * same bits: leaky_relu's slope as the float the layer multiplies by, dropout's p so that it reads back as the
 * key's double, add over at most the language's four variables. */
static void test_type_expressions(void)
{
    check_type_text("[a]\ntype = relu\n", 1, "relu(x)");
    check_type_text("[a]\ntype = leaky_relu\n", 1, "select(gt(x, 0), x, 0.00999999978 * x)");
    check_type_text("[a]\ntype = leaky_relu\nnegative_slope = 0.2\n", 1, "select(gt(x, 0), x, 0.200000003 * x)");
    check_type_text("[a]\ntype = leaky_relu\nnegative_slope = 0\n", 1, "select(gt(x, 0), x, 0 * x)");
    check_type_text("[a]\ntype = sigmoid\n", 1, "sigmoid(x)");
    check_type_text("[a]\ntype = tanh\n", 1, "tanh(x)");
    check_type_text("[a]\ntype = gelu\n", 1, "0.5 * x * (1 + erf(x * 0.70710678118654752))");
    check_type_text("[a]\ntype = gelu\napproximate = tanh\n", 1,
                    "0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x^3)))");
    check_type_text("[a]\ntype = add\n", 2, "x + y");
    check_type_text("[a]\ntype = add\n", 3, "x + y + z");
    check_type_text("[a]\ntype = add\n", 4, "x + y + z + w");
    check_type_text("[a]\ntype = add\n", 5, NULL);
    check_type_text("[a]\ntype = dropout\n", 1, "dropout(x, 0.5)");
    check_type_text("[a]\ntype = dropout\np = 0.1\n", 1, "dropout(x, 0.1)");
    check_type_text("[a]\ntype = dropout\np = 0.123456789012345678\n", 1, "dropout(x, 0.12345678901234568)");
    check_type_text("[a]\ntype = pointwise\nexpr = x*sigmoid( y )\n", 2, "x*sigmoid( y )");
}

/* ---- the activations' kernels: their type's expression, interpreted ---- */

/* The loops the activation plugins had before they computed their expressions: forward f, backward b. */
static float act_f(int t, float x)
{
    switch (t) {
    case 0: return x < 0.0f ? 0.0f : x;
    case 1: return x > 0.0f ? x : 0.2f * x;
    case 2: return x > 0.0f ? x : 0.0f * x;
    case 3: {
        float e = expf(-fabsf(x));
        return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    }
    case 4: return tanhf(x);
    default: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
    }
}

static float act_b(int t, float x, float y, float dy)
{
    switch (t) {
    case 0: return y <= 0.0f ? 0.0f : dy;
    case 1: return x > 0.0f ? dy : 0.2f * dy;
    case 2: return x > 0.0f ? dy : 0.0f * dy;
    case 3: return dy * y * (1.0f - y);
    case 4: return dy * (1.0f - y * y);
    default: {
        float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752440f));
        float pdf = expf(-0.5f * x * x) * 0.39894228040143267794f;
        return dy * (cdf + x * pdf);
    }
    }
}

/* Values mixing N(0, 3)-ish numbers with the edges of every activation: zeros of both signs, infinities,
 * NaN, denormals, saturation. */
static void edge_fill(float *v, int n, uint64_t seed)
{
    static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 100.0f, -100.0f, 88.7f, -104.0f, 1e-30f, -1e-30f,
                                    1e-45f, -1e-45f, INFINITY, -INFINITY, NAN};
    const int ns = (int)(sizeof special / sizeof special[0]);
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(seed >> 33);
        v[i] = r % 4 == 0 ? special[(r >> 2) % (uint32_t)ns] : (float)((double)(r >> 2) / 134217728.0 * 12.0 - 6.0);
    }
}

static bool same_bits(float a, float b) { return (isnan(a) && isnan(b)) || !memcmp(&a, &b, sizeof a); }

/* The CPU kernels of relu, leaky_relu, sigmoid, tanh and gelu give the bits of the loops they replace forward
 * (but leaky_relu's with a slope of 0, which gives 0 for every x <= 0 and NaN), and backward those of relu, leaky_relu and tanh too
 * (NaN, -0 and an inf or NaN dy included); sigmoid's and gelu's gradients, products in another order, agree
 * within float rounding and nowhere else. Written and accumulated, over more than one block of the
 * interpreter. */
static void test_activation_kernels(void)
{
    static const char *const inis[] = {"[a]\ntype = relu\n", "[a]\ntype = leaky_relu\nnegative_slope = 0.2\n",
                                       "[a]\ntype = leaky_relu\nnegative_slope = 0\n", "[a]\ntype = sigmoid\n",
                                       "[a]\ntype = tanh\n", "[a]\ntype = gelu\n"};
    enum { N = 9001 };
    static float x[N], dy[N], y[N], dx[N];
    struct glia_shape sh = S(2, 1, N, 0, 0);
    for (int t = 0; t < 6; t++) {
        CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
        struct built B;
        layer_build(ctx, inis[t], &sh, 1, &B);
        edge_fill(x, N, 7 + (uint64_t)t);
        edge_fill(dy, N, 70 + (uint64_t)t);
        struct glia_tensor *tx, *ty, *tdy, *tdx;
        CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &tx) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &ty) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &tdy) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &tdx) == GLIA_OK);
        memcpy(glia_tensor_f32(tx), x, sizeof x);
        memcpy(glia_tensor_f32(tdy), dy, sizeof dy);
        const struct glia_tensor *in[1] = {tx};
        struct glia_fwd fa = {in, 1, ty, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        CU_ASSERT_FATAL(B.kernel->forward(&B.l, &fa) == GLIA_OK);
        memcpy(y, glia_tensor_f32(ty), sizeof y);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            /* a slope of 0 folds to select(gt(x, 0), x, 0), what the fused layer computed: +0 where the loop's
             * 0 * x gave -0 or NaN (x = -inf, NaN) */
            bool ok = same_bits(y[i], t == 2 ? (x[i] > 0.0f ? x[i] : 0.0f) : act_f(t, x[i]));
            if (!ok && !bad++) printf("\n  %s f(%g) = %g, want %g", inis[t], x[i], y[i], act_f(t, x[i]));
        }
        CU_ASSERT_EQUAL(bad, 0);
        struct glia_tensor *din[1] = {tdx};
        for (int acc = 0; acc < 2; acc++) {
            bool accumulate[1] = {acc};
            for (int i = 0; i < N; i++) glia_tensor_f32(tdx)[i] = acc ? 0.5f : NAN;
            struct glia_bwd ba = {in, 1, ty, tdy, din, accumulate, NULL, NULL, NULL, NULL, false};
            CU_ASSERT_FATAL(B.kernel->backward(&B.l, &ba) == GLIA_OK);
            memcpy(dx, glia_tensor_f32(tdx), sizeof dx);
            bad = 0;
            for (int i = 0; i < N; i++) {
                float want = act_b(t, x[i], y[i], dy[i]), got = dx[i];
                if (acc) want = 0.5f + want;
                bool ok = same_bits(got, want);
                if (!ok && (t == 3 || t == 5) && isfinite(want) && isfinite(got))  /* sigmoid, gelu: another rounding */
                    ok = fabs((double)got - want) <= (t == 3 ? 3e-7 : 4e-6) * fmax(fabs(want), 1.0);
                if (!ok && !bad++)
                    printf("\n  %s gradient at x = %g, dy = %g (accumulate %d): %.9g, want %.9g", inis[t], x[i], dy[i], acc,
                           got, want);
            }
            CU_ASSERT_EQUAL(bad, 0);
        }
        glia_tensor_release(tx), glia_tensor_release(ty), glia_tensor_release(tdy), glia_tensor_release(tdx);
        layer_unbuild(&B);
        glia_context_free(ctx);
    }
}

/* ---- the layer ---- */

static void gradcheck_ok(const char *expr_text, const struct glia_shape *in, int n, uint64_t seed)
{
    char ini[256];
    snprintf(ini, sizeof ini, "[p]\ntype = pointwise\nexpr = %s\n", expr_text);
    struct glia_gradcheck_report r;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    glia_status st = glia_layer_gradcheck(ctx, ini, in, n, seed, 2e-2, &r);
    if (st) printf("\n  %s: %s\n", expr_text, glia_context_error(ctx));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    CU_ASSERT(r.n_checked > 0);
    CU_ASSERT(r.n_skipped * 10 <= r.n_checked);
    glia_context_free(ctx);
}

static void test_layer_gradcheck_one_input(void)
{
    struct glia_shape a = S(2, 3, 5, 0, 0), b = S(4, 2, 3, 2, 2);
    const char *one[] = {"x * sigmoid(x)", "tanh(x)^2", "exp(-x*x)", "log(1+exp(x))", "sqrt(1+x*x)",
                         "erf(x/sqrt(2))", "pow(x,3)", "abs(x)", "max(x, 0) - 0.1*min(x, 0)",
                         "0.5*x*(1 + erf(x/sqrt(2)))", "x / (1 + x*x)", "2^x"};
    for (int i = 0; i < (int)(sizeof one / sizeof one[0]); i++) {
        gradcheck_ok(one[i], &a, 1, 100 + (uint64_t)i);
        gradcheck_ok(one[i], &b, 1, 200 + (uint64_t)i);
    }
}

static void test_layer_gradcheck_multi_input(void)
{
    struct glia_shape two[2] = {S(2, 3, 4, 0, 0), S(2, 3, 4, 0, 0)};
    gradcheck_ok("x / (1 + y*y)", two, 2, 1);
    gradcheck_ok("x * sigmoid(y)", two, 2, 2);
    gradcheck_ok("max(x, y) * x", two, 2, 3);
    gradcheck_ok("pow(1 + x*x, y)", two, 2, 4);
    gradcheck_ok("x * 2", two, 2, 5); /* y unused: its gradient is written as 0 */
    gradcheck_ok("select(gt(x + y, 0), x + y, 0)", two, 2, 10); /* equal derivatives: y's copied from x's */
    gradcheck_ok("relu(x + y) * x", two, 2, 12);
    struct glia_shape three[3] = {S(4, 2, 2, 2, 2), S(4, 2, 2, 2, 2), S(4, 2, 2, 2, 2)};
    gradcheck_ok("max(x,y)*z", three, 3, 6);
    gradcheck_ok("x*tanh(y) - z^2", three, 3, 7);
    gradcheck_ok("sqrt(1 + x*x + y*y) * sigmoid(z)", three, 3, 8);
    gradcheck_ok("tanh(x + z + y) * 3", three, 3, 11);
    struct glia_shape four[4] = {S(2, 5, 3, 0, 0), S(2, 5, 3, 0, 0), S(2, 5, 3, 0, 0), S(2, 5, 3, 0, 0)};
    gradcheck_ok("x*y + z*w - min(x, w)", four, 4, 9);
}

/* Builds the layer like the gradient checker does and runs an eval-mode forward. */
static void test_layer_forward_and_flops(void)
{
    enum { N = 7 };
    struct glia_shape sh = S(2, 1, N, 0, 0), os, shs[2] = {sh, sh};
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, "[p]\ntype = pointwise\nexpr = x * sigmoid(y) + 1\n", shs, 2, &B);
    CU_ASSERT_EQUAL(B.type->min_inputs, 1);
    CU_ASSERT_EQUAL(B.type->max_inputs, 4);
    CU_ASSERT_FATAL(B.type->infer_shape(&B.l, shs, 2, &os) == GLIA_OK);
    CU_ASSERT(glia_shape_equal(&os, &sh));
    CU_ASSERT_EQUAL(B.type->flops(&B.l, shs, 2), 3u * N); /* sigmoid, mul, add */
    struct glia_tensor *tx, *ty, *to;
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &tx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &ty) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &os, &to) == GLIA_OK);
    const float xs[N] = {1, -1, 0, 2, -3, 0.5f, 100}, ys[N] = {0, 2, -2, 1000, -1000, 0.25f, -1};
    memcpy(glia_tensor_f32(tx), xs, sizeof xs);
    memcpy(glia_tensor_f32(ty), ys, sizeof ys);
    const struct glia_tensor *in[2] = {tx, ty};
    struct glia_fwd a = {in, 2, to, NULL, false, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &a), GLIA_OK);
    for (int i = 0; i < N; i++) {
        double want = xs[i] * sg(ys[i]) + 1, got = glia_tensor_f32(to)[i];
        bool ok = isfinite(got) && close_to(got, want, 1e-6);
        if (!ok) printf("\n  [%d] %.9g, want %.9g\n", i, got, want);
        CU_ASSERT(ok);
    }
    glia_tensor_release(tx);
    glia_tensor_release(ty);
    glia_tensor_release(to);
    layer_unbuild(&B);
    glia_context_free(ctx);
}

/* ---- dropout() ---- */

/* Parsing, printing, folding, derivative and the one-mask rule of dropout(a, p); the interpreter's
 * mask in training, eval and channels_last order. */
static void test_dropout_expr(void)
{
    check_print("dropout(x * 2, 0.25)", "dropout(2 * x, 0.25)");
    check_print("dropout(x, 0)", "x");                         /* nothing dropped */
    check_print("dropout(0 * y, 0.5) + x", "x");               /* 0 stays 0 */
    check_print("dropout(x, 0.5) + dropout(x, 0.5)", "2 * dropout(x, 0.5)");  /* one node */
    check_print("x * dropout(1, 1/4)", "dropout(1, 0.25) * x");  /* not folded to a constant */
    check_error("dropout(x, y)", 2, "expr: dropout()'s probability must be a number in [0, 1) at column 1");
    check_error("x + dropout(x, 1)", 1, "expr: dropout()'s probability must be a number in [0, 1) at column 5");
    check_error("dropout(x, -0.5)", 1, "expr: dropout()'s probability must be a number in [0, 1) at column 1");
    check_error("dropout(x, 0.99999999999)", 1, "expr: dropout()'s probability must be a number in [0, 1) at column 1");
    check_error("dropout(x)", 1, "expr: dropout() takes 2 arguments, got 1 at column 1");
    check_error("dropout(x, 0.5) + dropout(y, 0.5)", 2,
                "expr: dropout() of different inputs or probabilities: one expression draws one mask");
    check_error("dropout(dropout(x, 0.5), 0.5)", 1,
                "expr: dropout() of different inputs or probabilities: one expression draws one mask");
    check_error("dropout(x, 0.5) * dropout(x, 0.25)", 1,
                "expr: dropout() of different inputs or probabilities: one expression draws one mask");
    struct glia_expr *e = parse_ok("dropout(x * x + y, 0.5)", 2), *dx = e ? glia_expr_diff(e, 0) : NULL, *dy = e ? glia_expr_diff(e, 1) : NULL;
    CU_ASSERT_FATAL(dx && dy);
    CU_ASSERT_STRING_EQUAL(printed(dx), "dropout(2 * x, 0.5)");  /* linear: the same mask */
    CU_ASSERT_STRING_EQUAL(printed(dy), "dropout(1, 0.5)");
    double v[4] = {3, 4, 0, 0};
    CU_ASSERT_EQUAL(glia_expr_eval1(e, v), 13.0);  /* the double interpreter: eval */
    char ssa[256];
    CU_ASSERT(glia_expr_print_ssa(dy, ssa, sizeof ssa) > 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(ssa, "= dropout %0 p=0.5"));

    /* the interpreter: the dropout layer's loop, element by element */
    enum { N = 2, C = 3, H = 4, W = 5, NE = N * C * H * W };
    static float x[NE], y[NE], out[NE], g[NE];
    for (int i = 0; i < NE; i++) x[i] = (float)uni(-2, 2), y[i] = (float)uni(-2, 2), g[i] = (float)uni(-1, 1);
    const float *vars[2] = {x, y};
    const float p = 0.5f, scale = 1.0f / (1.0f - p);
    uint64_t seed = 0x5eed;
    for (int fmt = 0; fmt < 2; fmt++) {  /* contiguous; channels_last: the counter is the NCHW index */
        struct glia_expr_site site = {.seed = seed, .train = true, .C = fmt ? C : 0, .HW = fmt ? H * W : 0};
        CU_ASSERT_EQUAL(glia_expr_eval_ex(e, vars, NE, NULL, false, &site, out), 0);
        int bad = 0, dropped = 0;
        for (int i = 0; i < NE; i++) {
            int64_t j = fmt ? glia_dropout_nchw_index(i, C, H * W) : i;
            float a = x[i] * x[i] + y[i], want = glia_dropout_uniform(seed, j) >= p ? a * scale : 0.0f;
            bad += memcmp(&out[i], &want, sizeof want) != 0;
            dropped += want == 0.0f;
        }
        CU_ASSERT_EQUAL(bad, 0);
        CU_ASSERT(dropped > NE / 4 && dropped < 3 * NE / 4);
        /* backward: dy * dropout(1) = the same mask on the gradient, accumulated */
        for (int i = 0; i < NE; i++) out[i] = 1.0f;
        CU_ASSERT_EQUAL(glia_expr_eval_ex(dy, vars, NE, g, true, &site, out), 0);
        bad = 0;
        for (int i = 0; i < NE; i++) {
            int64_t j = fmt ? glia_dropout_nchw_index(i, C, H * W) : i;
            float want = 1.0f + g[i] * (glia_dropout_uniform(seed, j) >= p ? scale : 0.0f);
            bad += memcmp(&out[i], &want, sizeof want) != 0;
        }
        CU_ASSERT_EQUAL(bad, 0);
    }
    /* eval (and no site): the identity */
    struct glia_expr_site eval = {.seed = seed, .train = false};
    CU_ASSERT_EQUAL(glia_expr_eval_ex(e, vars, NE, NULL, false, &eval, out), 0);
    int bad = 0;
    for (int i = 0; i < NE; i++) bad += out[i] != x[i] * x[i] + y[i];
    CU_ASSERT_EQUAL(glia_expr_eval(e, vars, NE, g), 0);
    for (int i = 0; i < NE; i++) bad += g[i] != out[i];
    CU_ASSERT_EQUAL(bad, 0);
    glia_expr_free(e);
    glia_expr_free(dx);
    glia_expr_free(dy);
}

/* A pointwise layer `dropout(x, p)` and a dropout layer given the same step seed drop the same
 * elements with the same values, forward and backward, in both memory formats; in eval both are
 * the identity. */
static void test_layer_dropout_matches_dropout_layer(void)
{
    struct glia_shape sh = S(4, 2, 3, 4, 5);
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct built pw, dr;
    layer_build(ctx, "[d]\ntype = pointwise\nexpr = dropout(x, 0.3)\n", &sh, 1, &pw);
    layer_build(ctx, "[d]\ntype = dropout\np = 0.3\n", &sh, 1, &dr);
    for (int f = 0; f < 2; f++) {
        enum glia_memory_format fmt = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS;
        struct glia_tensor *x = tensor_as(pw.b, sh, fmt), *dy = tensor_as(pw.b, sh, fmt);
        struct glia_tensor *y[2] = {tensor_as(pw.b, sh, fmt), tensor_as(pw.b, sh, fmt)};
        struct glia_tensor *dx[2] = {tensor_as(pw.b, sh, fmt), tensor_as(pw.b, sh, fmt)};
        int64_t n = glia_tensor_numel(x);
        for (int64_t i = 0; i < n; i++) glia_tensor_f32(x)[i] = (float)uni(-3, 3), glia_tensor_f32(dy)[i] = (float)uni(-1, 1);
        struct built *B[2] = {&pw, &dr};
        for (int train = 0; train < 2; train++) {
            for (int k = 0; k < 2; k++) {
                const struct glia_tensor *in[1] = {x};
                struct glia_fwd a = {in, 1, y[k], NULL, train, 0xabcdef + (uint64_t)f, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
                CU_ASSERT_EQUAL(B[k]->kernel->forward(&B[k]->l, &a), GLIA_OK);
                if (!train) continue;
                struct glia_tensor *din[1] = {dx[k]};
                bool acc[1] = {false};
                struct glia_bwd bw = {in, 1, y[k], dy, din, acc, NULL, NULL, NULL, NULL, false};
                CU_ASSERT_EQUAL(B[k]->kernel->backward(&B[k]->l, &bw), GLIA_OK);
            }
            CU_ASSERT_EQUAL(memcmp(glia_tensor_f32(y[0]), glia_tensor_f32(y[1]), sizeof(float) * (size_t)n), 0);
            if (train) {  /* a dropped gradient is dy * 0 fused, which is -0 where dy < 0: equal, not the same bits */
                int differ = 0;
                for (int64_t i = 0; i < n; i++) differ += glia_tensor_f32(dx[0])[i] != glia_tensor_f32(dx[1])[i];
                CU_ASSERT_EQUAL(differ, 0);
                int zeros = 0;
                for (int64_t i = 0; i < n; i++) zeros += glia_tensor_f32(y[0])[i] == 0.0f;
                CU_ASSERT(zeros > n / 10 && zeros < n / 2);  /* p = 0.3 of 120 */
            } else {
                CU_ASSERT_EQUAL(memcmp(glia_tensor_f32(y[0]), glia_tensor_f32(x), sizeof(float) * (size_t)n), 0);
            }
        }
        glia_tensor_release(x), glia_tensor_release(dy);
        for (int k = 0; k < 2; k++) glia_tensor_release(y[k]), glia_tensor_release(dx[k]);
    }
    layer_unbuild(&pw);
    layer_unbuild(&dr);
    glia_context_free(ctx);
}

static void check_config_error(const char *ini, const struct glia_shape *in, int n, glia_status want_st, const char *want)
{
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    glia_status st = glia_layer_gradcheck(ctx, ini, in, n, 1, 1e-2, NULL);
    CU_ASSERT_EQUAL(st, want_st);
    if (!strstr(glia_context_error(ctx), want)) printf("\n  got: %s\n  want: %s\n", glia_context_error(ctx), want);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), want));
    glia_context_free(ctx);
}

static void test_layer_config_errors(void)
{
    struct glia_shape one = S(2, 3, 4, 0, 0), two[2] = {S(2, 3, 4, 0, 0), S(2, 3, 4, 0, 0)};
    check_config_error("[p]\ntype = pointwise\nexpr = x * 2 )\n", &one, 1, GLIA_ECONFIG,
                       "gradcheck.ini:3: [p] expr: unexpected ')' at column 7");
    check_config_error("[p]\ntype = pointwise\n\nexpr = sigmod(x)\n", &one, 1, GLIA_ECONFIG,
                       "gradcheck.ini:4: [p] expr: unknown function 'sigmod' (did you mean 'sigmoid'?)");
    check_config_error("[p]\ntype = pointwise\nexpr = x + y\n", &one, 1, GLIA_ECONFIG,
                       "gradcheck.ini:3: [p] expr: variable 'y' but the layer has 1 input");
    check_config_error("[p]\ntype = pointwise\nexpr = x * y * z\n", two, 2, GLIA_ECONFIG,
                       "gradcheck.ini:3: [p] expr: variable 'z' but the layer has 2 inputs");
    check_config_error("[p]\ntype = pointwise\nexpr = max(x)\n", &one, 1, GLIA_ECONFIG,
                       "gradcheck.ini:3: [p] expr: max() takes 2 arguments, got 1 at column 1");
    /* a missing expr is the core's schema error */
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_layer_gradcheck(ctx, "[p]\ntype = pointwise\n", &one, 1, 1, 1e-2, NULL), GLIA_ECONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "expr"));
    glia_context_free(ctx);
    struct glia_shape bad[2] = {S(2, 3, 4, 0, 0), S(2, 3, 5, 0, 0)};
    check_config_error("[p]\ntype = pointwise\nexpr = x + y\n", bad, 2, GLIA_ESHAPE,
                       "pointwise needs equal shapes: input 1 is 3x4, input 2 is 3x5");
}

GLIA_TEST_MAIN("pointwise", GLIA_TEST(test_parse_precedence), GLIA_TEST(test_parse_errors), GLIA_TEST(test_print),
               GLIA_TEST(test_cse), GLIA_TEST(test_hash), GLIA_TEST(test_constant_folding), GLIA_TEST(test_random_round_trip),
               GLIA_TEST(test_eval_against_libm), GLIA_TEST(test_eval_large_and_edge), GLIA_TEST(test_eval_fused_same_bits), GLIA_TEST(test_gt_semantics), GLIA_TEST(test_relu_semantics),
               GLIA_TEST(test_diff_rules), GLIA_TEST(test_grad_and_over_result), GLIA_TEST(test_type_expressions),
               GLIA_TEST(test_activation_kernels),
               GLIA_TEST(test_diff_numeric), GLIA_TEST(test_layer_gradcheck_one_input),
               GLIA_TEST(test_layer_gradcheck_multi_input), GLIA_TEST(test_layer_forward_and_flops),
               GLIA_TEST(test_layer_config_errors), GLIA_TEST(test_dropout_expr),
               GLIA_TEST(test_layer_dropout_matches_dropout_layer))
