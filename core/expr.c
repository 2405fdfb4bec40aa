/* core/expr.c — the elementwise-expression IR of glia/expr.h: builder (hash-consing, constant folding,
 * algebraic simplification, canonical operand order), parser, printers, hash, interpreters (double
 * scalar, float blocks), symbolic differentiation and gradients. Not a layer (plugins/layers/pointwise)
 * and not a code generator (backends/cuda/pointwise_jit.c). See glia/expr.h for the value semantics.
 * Why one file of some 1,500 lines: it is one small language, and every part of it (the parser, the derivatives,
 * the printers, the interpreters) builds or walks the same node list through the builder's invariants (interned,
 * folded, canonically ordered, post-ordered); apart, the builder's internals would become an interface of their own
 * for files that only ever call each other. */
#include <glia/expr.h>
#include <glia/types/dropout.h>  /* the dropout layer's mask, which dropout() draws */
#ifdef _OPENMP
#include <omp.h>
#endif

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPR_PI 3.14159265358979323846
#define EXPR_2_SQRTPI 1.12837916709551257390 /* 2/sqrt(pi) */
#define EXPR_MAX_DEPTH 200                  /* parser nesting limit */
#define EXPR_MAX_IR_DEPTH 1000              /* operations nested in the built IR */

struct glia__expr_plan;
static int plan_build(const struct glia_expr *ir, struct glia__expr_plan **out);
static void plan_free(struct glia__expr_plan *pl);

static const char *const op_names[GLIA_EXPR_N_OPS] = {
    [GLIA_EXPR_CONST] = "const", [GLIA_EXPR_VAR] = "var", [GLIA_EXPR_NEG] = "neg", [GLIA_EXPR_ADD] = "add",
    [GLIA_EXPR_SUB] = "sub", [GLIA_EXPR_MUL] = "mul", [GLIA_EXPR_DIV] = "div", [GLIA_EXPR_POW] = "pow",
    [GLIA_EXPR_EXP] = "exp", [GLIA_EXPR_LOG] = "log", [GLIA_EXPR_SQRT] = "sqrt", [GLIA_EXPR_TANH] = "tanh",
    [GLIA_EXPR_SIGMOID] = "sigmoid", [GLIA_EXPR_ERF] = "erf", [GLIA_EXPR_ABS] = "abs", [GLIA_EXPR_SIGN] = "sign",
    [GLIA_EXPR_MAX] = "max", [GLIA_EXPR_MIN] = "min", [GLIA_EXPR_GE] = "ge", [GLIA_EXPR_SELECT] = "select",
    [GLIA_EXPR_GT] = "gt", [GLIA_EXPR_DROPOUT] = "dropout", [GLIA_EXPR_RELU] = "relu",
};

static int op_arity(enum glia_expr_op op)
{
    switch (op) {
    case GLIA_EXPR_CONST: case GLIA_EXPR_VAR: return 0;
    case GLIA_EXPR_ADD: case GLIA_EXPR_SUB: case GLIA_EXPR_MUL: case GLIA_EXPR_DIV: case GLIA_EXPR_POW:
    case GLIA_EXPR_MAX: case GLIA_EXPR_MIN: case GLIA_EXPR_GE: case GLIA_EXPR_GT: return 2;
    case GLIA_EXPR_SELECT: return 3;
    default: return 1;
    }
}

static bool op_commutative(enum glia_expr_op op)
{
    return op == GLIA_EXPR_ADD || op == GLIA_EXPR_MUL || op == GLIA_EXPR_MAX || op == GLIA_EXPR_MIN;
}

/* ---- scalar semantics (constant folding, glia_expr_eval1) ------------------------------------ */

static double sigmoid_d(double a)
{
    double e = exp(-fabs(a));
    return a >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

static double apply_d(enum glia_expr_op op, double a, double b, double c)
{
    switch (op) {
    case GLIA_EXPR_NEG: return -a;
    case GLIA_EXPR_ADD: return a + b;
    case GLIA_EXPR_SUB: return a - b;
    case GLIA_EXPR_MUL: return a * b;
    case GLIA_EXPR_DIV: return a / b;
    case GLIA_EXPR_POW: return pow(a, b);
    case GLIA_EXPR_EXP: return exp(a);
    case GLIA_EXPR_LOG: return log(a);
    case GLIA_EXPR_SQRT: return sqrt(a);
    case GLIA_EXPR_TANH: return tanh(a);
    case GLIA_EXPR_SIGMOID: return sigmoid_d(a);
    case GLIA_EXPR_ERF: return erf(a);
    case GLIA_EXPR_ABS: return fabs(a);
    case GLIA_EXPR_SIGN: return (double)((a > 0) - (a < 0));
    case GLIA_EXPR_MAX: return a >= b || isnan(a) ? a : b; /* NaN from either side */
    case GLIA_EXPR_MIN: return a <= b || isnan(a) ? a : b;
    case GLIA_EXPR_GE: return a >= b ? 1.0 : 0.0;
    case GLIA_EXPR_GT: return a > b ? 1.0 : 0.0;
    case GLIA_EXPR_SELECT: return a != 0 ? b : c;
    case GLIA_EXPR_DROPOUT: return a; /* as in eval */
    case GLIA_EXPR_RELU: return a < 0 ? 0.0 : a;
    default: return NAN;
    }
}

/* ---- builder ------------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    return h;
}

static uint64_t dbits(double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

static uint64_t node_key(const struct glia_expr_node *nd)
{
    uint64_t h = mix64(0x6a09e667f3bcc908ull, (uint64_t)nd->op);
    h = mix64(h, (uint64_t)(int64_t)nd->a);
    h = mix64(h, (uint64_t)(int64_t)nd->b);
    h = mix64(h, (uint64_t)(int64_t)nd->c);
    h = mix64(h, (uint64_t)(int64_t)nd->var);
    return mix64(h, dbits(nd->value));
}

static bool node_same(const struct glia_expr_node *p, const struct glia_expr_node *q)
{
    return p->op == q->op && p->a == q->a && p->b == q->b && p->c == q->c && p->var == q->var &&
           dbits(p->value) == dbits(q->value);
}

static struct glia_expr *ir_new(void)
{
    return calloc(1, sizeof(struct glia_expr));
}

void glia_expr_free(struct glia_expr *ir)
{
    if (!ir) return;
    free(ir->nodes);
    free(ir->table);
    plan_free(ir->plan);
    free(ir);
}

static int table_rebuild(struct glia_expr *e, int cap)
{
    int *t = malloc((size_t)cap * sizeof *t);
    if (!t) return -1;
    for (int i = 0; i < cap; i++) t[i] = -1;
    for (int i = 0; i < e->n; i++) {
        size_t h = (size_t)node_key(&e->nodes[i]) & (size_t)(cap - 1);
        while (t[h] >= 0) h = (h + 1) & (size_t)(cap - 1);
        t[h] = i;
    }
    free(e->table);
    e->table = t;
    e->table_cap = cap;
    return 0;
}

/* The index of the node equal to nd, appending it when new; -1 when out of memory. */
static int intern(struct glia_expr *e, const struct glia_expr_node *nd)
{
    if (!e->table || 2 * (e->n + 1) > e->table_cap) { /* (none after finalize: building on a finished IR) */
        int cap = e->table_cap ? 2 * e->table_cap : 64;
        while (cap < 2 * (e->n + 1)) cap *= 2;
        if (table_rebuild(e, cap)) return -1;
    }
    size_t mask = (size_t)(e->table_cap - 1), h = (size_t)node_key(nd) & mask;
    for (; e->table[h] >= 0; h = (h + 1) & mask)
        if (node_same(&e->nodes[e->table[h]], nd)) return e->table[h];
    if (e->n == e->cap) {
        int cap = e->cap ? 2 * e->cap : 32;
        struct glia_expr_node *nn = realloc(e->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return -1;
        e->nodes = nn;
        e->cap = cap;
    }
    e->nodes[e->n] = *nd;
    e->table[h] = e->n;
    return e->n++;
}

static int mk_const(struct glia_expr *e, double v)
{
    if (v == 0) v = 0.0;   /* no -0 */
    if (isnan(v)) v = NAN; /* one NaN */
    struct glia_expr_node nd = {.op = GLIA_EXPR_CONST, .a = -1, .b = -1, .c = -1, .value = v, .var = -1};
    return intern(e, &nd);
}

static int mk_var(struct glia_expr *e, int var)
{
    struct glia_expr_node nd = {.op = GLIA_EXPR_VAR, .a = -1, .b = -1, .c = -1, .value = 0, .var = var};
    return intern(e, &nd);
}

static bool is_const(const struct glia_expr *e, int i, double *v)
{
    if (e->nodes[i].op != GLIA_EXPR_CONST) return false;
    if (v) *v = e->nodes[i].value;
    return true;
}

static bool is_val(const struct glia_expr *e, int i, double v)
{
    return e->nodes[i].op == GLIA_EXPR_CONST && e->nodes[i].value == v;
}

static bool is_op(const struct glia_expr *e, int i, enum glia_expr_op op) { return e->nodes[i].op == op; }

/* Canonical total order of structures: constants first, then operations (by op, then
 * operands), variables last. Identical structures are one node (hash-consing), so the walk
 * follows a single path: O(depth). */
static int op_class(enum glia_expr_op op) { return op == GLIA_EXPR_CONST ? 0 : op == GLIA_EXPR_VAR ? 2 : 1; }

static int cmp_nodes(const struct glia_expr *e, int i, int j)
{
    while (i != j) {
        const struct glia_expr_node *p = &e->nodes[i], *q = &e->nodes[j];
        int ci = op_class(p->op), cj = op_class(q->op);
        if (ci != cj) return ci < cj ? -1 : 1;
        if (p->op != q->op) return p->op < q->op ? -1 : 1;
        if (p->op == GLIA_EXPR_CONST) {
            if (p->value < q->value) return -1;
            if (p->value > q->value) return 1;
            return dbits(p->value) < dbits(q->value) ? -1 : 1; /* NaN */
        }
        if (p->op == GLIA_EXPR_VAR) return p->var < q->var ? -1 : p->var > q->var ? 1 : 0;
        if (p->op == GLIA_EXPR_DROPOUT && dbits(p->value) != dbits(q->value)) return p->value < q->value ? -1 : 1;
        if (p->a != q->a) { i = p->a; j = q->a; continue; }
        if (p->b != q->b) { i = p->b; j = q->b; continue; }
        i = p->c;
        j = q->c;
    }
    return 0;
}

static int mk(struct glia_expr *e, enum glia_expr_op op, int a, int b, int c);
static int mk1(struct glia_expr *e, enum glia_expr_op op, int a) { return mk(e, op, a, -1, -1); }
static int mk2(struct glia_expr *e, enum glia_expr_op op, int a, int b) { return mk(e, op, a, b, -1); }

/* dropout(a, p): a random mask is never folded, except where it cannot matter */
static int mk_dropout(struct glia_expr *e, int a, double p)
{
    if (a < 0) return -1;
    if (p == 0 || is_val(e, a, 0)) return a; /* dropout(u, 0) = u, dropout(0, p) = 0 */
    struct glia_expr_node nd = {.op = GLIA_EXPR_DROPOUT, .a = a, .b = -1, .c = -1, .value = p, .var = -1};
    return intern(e, &nd);
}

/* The node for op(a, b, c), folded and simplified; -1 when out of memory (or an operand is
 * -1). Rules only look at operand structure, so equal structures give equal nodes. Not for
 * GLIA_EXPR_DROPOUT (mk_dropout). */
static int mk(struct glia_expr *e, enum glia_expr_op op, int a, int b, int c)
{
    int ar = op_arity(op);
    if (a < 0 || (ar >= 2 && b < 0) || (ar >= 3 && c < 0) || op == GLIA_EXPR_DROPOUT) return -1;
    if (ar < 2) b = -1;
    if (ar < 3) c = -1;
    if (op_commutative(op) && cmp_nodes(e, a, b) > 0) {
        int t = a;
        a = b;
        b = t;
    }
    double va = 0, vb = 0, vc = 0;
    bool ka = is_const(e, a, &va), kb = ar >= 2 && is_const(e, b, &vb), kc = ar >= 3 && is_const(e, c, &vc);
    if (ka && (ar < 2 || kb) && (ar < 3 || kc)) {
        double v = apply_d(op, va, vb, vc);
        if (isfinite(v)) return mk_const(e, v); /* 1/0, log(-1): kept as operations */
    }
    /* copies: building nodes below may move e->nodes */
    const struct glia_expr_node na = e->nodes[a], nb = ar >= 2 ? e->nodes[b] : e->nodes[a];
    switch (op) {
    case GLIA_EXPR_NEG:
        if (na.op == GLIA_EXPR_NEG) return na.a;                                /* --u = u */
        if (na.op == GLIA_EXPR_SUB) return mk2(e, GLIA_EXPR_SUB, na.b, na.a);  /* -(u-v) = v-u */
        if (na.op == GLIA_EXPR_MUL && is_const(e, na.a, &va))                   /* -(c*u) = (-c)*u */
            return mk2(e, GLIA_EXPR_MUL, mk_const(e, -va), na.b);
        break;
    case GLIA_EXPR_ADD:
        if (is_val(e, a, 0)) return b;                                            /* 0+u = u */
        if (a == b) return mk2(e, GLIA_EXPR_MUL, mk_const(e, 2), a);              /* u+u = 2*u */
        if (nb.op == GLIA_EXPR_NEG) return mk2(e, GLIA_EXPR_SUB, a, nb.a);      /* u+(-v) = u-v */
        if (na.op == GLIA_EXPR_NEG) return mk2(e, GLIA_EXPR_SUB, b, na.a);
        break;
    case GLIA_EXPR_SUB:
        if (is_val(e, b, 0)) return a;                                            /* u-0 = u */
        if (is_val(e, a, 0)) return mk1(e, GLIA_EXPR_NEG, b);                     /* 0-u = -u */
        if (a == b) return mk_const(e, 0);                                        /* u-u = 0 */
        if (kb) return mk2(e, GLIA_EXPR_ADD, mk_const(e, -vb), a);                /* u-c = -c+u */
        if (nb.op == GLIA_EXPR_NEG) return mk2(e, GLIA_EXPR_ADD, a, nb.a);      /* u-(-v) = u+v */
        break;
    case GLIA_EXPR_MUL:
        if (ka && va == 0) return a;                                              /* 0*u = 0 */
        if (ka && va == 1) return b;                                              /* 1*u = u */
        if (ka && va == -1) return mk1(e, GLIA_EXPR_NEG, b);                      /* -1*u = -u */
        if (ka && nb.op == GLIA_EXPR_MUL && is_const(e, nb.a, &vb) && isfinite(va * vb)) /* c*(d*u) = (cd)*u */
            return mk2(e, GLIA_EXPR_MUL, mk_const(e, va * vb), nb.b);
        if (ka && nb.op == GLIA_EXPR_NEG) return mk2(e, GLIA_EXPR_MUL, mk_const(e, -va), nb.a);
        if (na.op == GLIA_EXPR_NEG) return mk1(e, GLIA_EXPR_NEG, mk2(e, GLIA_EXPR_MUL, na.a, b)); /* (-u)*v = -(u*v) */
        if (nb.op == GLIA_EXPR_NEG) return mk1(e, GLIA_EXPR_NEG, mk2(e, GLIA_EXPR_MUL, a, nb.a));
        break;
    case GLIA_EXPR_DIV:
        if (kb && vb == 1) return a;                                              /* u/1 = u */
        if (ka && va == 0) return a;                                              /* 0/u = 0 */
        if (na.op == GLIA_EXPR_NEG) return mk1(e, GLIA_EXPR_NEG, mk2(e, GLIA_EXPR_DIV, na.a, b)); /* (-u)/v = -(u/v) */
        if (nb.op == GLIA_EXPR_NEG) return mk1(e, GLIA_EXPR_NEG, mk2(e, GLIA_EXPR_DIV, a, nb.a));
        break;
    case GLIA_EXPR_POW:
        if (kb && vb == 1) return a;                                              /* u^1 = u */
        if (kb && vb == 0) return mk_const(e, 1);                                 /* u^0 = 1 */
        if (ka && va == 1) return a;                                              /* 1^u = 1 */
        break;
    case GLIA_EXPR_RELU:
        if (na.op == GLIA_EXPR_RELU) return a;                                    /* relu(relu(u)) = relu(u) */
        break;
    case GLIA_EXPR_ABS:
        if (na.op == GLIA_EXPR_ABS) return a;                                     /* ||u|| = |u| */
        if (na.op == GLIA_EXPR_NEG) return mk1(e, GLIA_EXPR_ABS, na.a);           /* |-u| = |u| */
        break;
    case GLIA_EXPR_MAX: case GLIA_EXPR_MIN:
        if (a == b) return a;
        break;
    case GLIA_EXPR_GE:
        if (a == b) return mk_const(e, 1);
        break;
    case GLIA_EXPR_GT:
        if (a == b) return mk_const(e, 0);                                       /* also for NaN */
        break;
    case GLIA_EXPR_SELECT:
        if (ka) return va != 0 ? b : c;
        if (b == c) return b;
        if ((na.op == GLIA_EXPR_GE || na.op == GLIA_EXPR_GT) && is_val(e, b, 1) && is_val(e, c, 0)) return a; /* = a */
        break;
    default:
        break;
    }
    struct glia_expr_node nd = {.op = op, .a = a, .b = b, .c = c, .value = 0, .var = -1};
    return intern(e, &nd);
}

/* Keeps only the nodes that `root` needs, numbered in post-order from root (operands in
 * order), so equal canonical expressions give equal lists. 0, or -1 when out of memory. */
static int finalize(struct glia_expr *e, int root)
{
    if (root < 0) return -1;
    int n = e->n;
    int *map = malloc((size_t)n * sizeof *map), *stack = malloc((size_t)n * 2 * sizeof *stack);
    struct glia_expr_node *out = malloc((size_t)n * sizeof *out);
    if (!map || !stack || !out) {
        free(map);
        free(stack);
        free(out);
        return -1;
    }
    for (int i = 0; i < n; i++) map[i] = -1;
    int m = 0, sp = 0;
    /* iterative post-order: entries (node, next operand to visit) */
    stack[sp++] = root;
    stack[sp++] = 0;
    while (sp) {
        int i = stack[sp - 2], k = stack[sp - 1];
        const struct glia_expr_node *nd = &e->nodes[i];
        int ops[3] = {nd->a, nd->b, nd->c};
        if (k < op_arity(nd->op)) {
            stack[sp - 1] = k + 1;
            int o = ops[k];
            if (map[o] < 0 && map[o] != -2) {
                map[o] = -2; /* on the stack */
                stack[sp++] = o;
                stack[sp++] = 0;
            }
            continue;
        }
        sp -= 2;
        struct glia_expr_node c = *nd;
        if (c.a >= 0) c.a = map[c.a];
        if (c.b >= 0) c.b = map[c.b];
        if (c.c >= 0) c.c = map[c.c];
        out[m] = c;
        map[i] = m++;
    }
    free(e->nodes);
    free(e->table);
    e->table = NULL;
    e->table_cap = 0;
    e->nodes = out;
    e->n = e->cap = m;
    e->out = m - 1;
    e->vars_used = 0;
    for (int i = 0; i < m; i++)
        if (out[i].op == GLIA_EXPR_VAR) e->vars_used |= 1u << out[i].var;
    free(map);
    free(stack);
    plan_free(e->plan);  /* how glia_expr_eval_ex computes it */
    return plan_build(e, &e->plan);
}

/* The most operations on a path from a variable or constant to the result (printing recurses
 * that deep); -1 when out of memory. Operands come before their users. */
static int ir_depth(const struct glia_expr *e)
{
    int *d = malloc((size_t)(e->n > 0 ? e->n : 1) * sizeof *d), max = 0;
    if (!d) return -1;
    for (int i = 0; i < e->n; i++) {
        const struct glia_expr_node *nd = &e->nodes[i];
        int ops[3] = {nd->a, nd->b, nd->c}, k = 0;
        for (int j = 0; j < op_arity(nd->op); j++)
            if (d[ops[j]] > k) k = d[ops[j]];
        d[i] = nd->op == GLIA_EXPR_CONST || nd->op == GLIA_EXPR_VAR ? 0 : k + 1;
        if (d[i] > max) max = d[i];
    }
    free(d);
    return max;
}

/* ---- parser --------------------------------------------------------------------------------- */

struct fn_entry {
    const char *name;
    enum glia_expr_op op;
    int arity;
};

static const struct fn_entry functions[] = {
    {"exp", GLIA_EXPR_EXP, 1},   {"log", GLIA_EXPR_LOG, 1}, {"sqrt", GLIA_EXPR_SQRT, 1}, {"tanh", GLIA_EXPR_TANH, 1},
    {"sigmoid", GLIA_EXPR_SIGMOID, 1}, {"erf", GLIA_EXPR_ERF, 1}, {"abs", GLIA_EXPR_ABS, 1}, {"sign", GLIA_EXPR_SIGN, 1},
    {"max", GLIA_EXPR_MAX, 2},   {"min", GLIA_EXPR_MIN, 2}, {"pow", GLIA_EXPR_POW, 2},   {"ge", GLIA_EXPR_GE, 2},
    {"gt", GLIA_EXPR_GT, 2},     {"select", GLIA_EXPR_SELECT, 3}, {"dropout", GLIA_EXPR_DROPOUT, 2},
    {"relu", GLIA_EXPR_RELU, 1},
};
#define N_FUNCTIONS ((int)(sizeof functions / sizeof functions[0]))

struct parser {
    const char *s;
    int pos;
    int n_inputs;
    int depth;
    bool failed;
    struct glia_expr *e;
    char *err;
    size_t err_size;
};

static void perr(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void perr(struct parser *p, const char *fmt, ...)
{
    if (p->failed) return;
    p->failed = true;
    if (!p->err || !p->err_size) return;
    int k = snprintf(p->err, p->err_size, "expr: ");
    va_list ap;
    va_start(ap, fmt);
    if (k >= 0 && (size_t)k < p->err_size) vsnprintf(p->err + k, p->err_size - (size_t)k, fmt, ap);
    va_end(ap);
}

static void skip_ws(struct parser *p)
{
    while (isspace((unsigned char)p->s[p->pos])) p->pos++;
}

static bool is_ident_start(char c) { return isalpha((unsigned char)c) || c == '_'; }
static bool is_ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* The token at pos, for messages: an identifier or number whole, else one character. */
static void token_at(const struct parser *p, int pos, char *buf, size_t size)
{
    const char *s = p->s + pos;
    int len = 1;
    if (is_ident_start(*s) || isdigit((unsigned char)*s) || *s == '.')
        while (is_ident_char(s[len]) || s[len] == '.') len++;
    if (len > 32) len = 32;
    snprintf(buf, size, "%.*s", len, s);
}

static void unexpected(struct parser *p)
{
    if (!p->s[p->pos]) {
        perr(p, "unexpected end of expression at column %d", p->pos + 1);
        return;
    }
    char tok[40];
    token_at(p, p->pos, tok, sizeof tok);
    perr(p, "unexpected '%s' at column %d", tok, p->pos + 1);
}

/* checks the result of a builder call */
static int built(struct parser *p, int v)
{
    if (v < 0 && !p->failed) perr(p, "out of memory");
    return p->failed ? -1 : v;
}

static int edit_distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 31 || lb > 31) return 99;
    int d[32][32];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1; /* a transposition is one edit */
            d[i][j] = best;
        }
    return d[la][lb];
}

static int parse_expr(struct parser *p);
static int parse_unary(struct parser *p);

static int parse_number(struct parser *p)
{
    const char *s = p->s;
    int start = p->pos, i = p->pos, digits = 0;
    while (isdigit((unsigned char)s[i])) i++, digits++;
    if (s[i] == '.') {
        i++;
        while (isdigit((unsigned char)s[i])) i++, digits++;
    }
    bool bad = digits == 0;
    if (!bad && (s[i] == 'e' || s[i] == 'E')) {
        int j = i + 1;
        if (s[j] == '+' || s[j] == '-') j++;
        if (!isdigit((unsigned char)s[j])) bad = true;
        while (isdigit((unsigned char)s[j])) j++;
        i = j;
    }
    if (bad) {
        char tok[40];
        token_at(p, start, tok, sizeof tok);
        perr(p, "bad number '%s' at column %d", tok, start + 1);
        return -1;
    }
    char buf[64];
    int len = i - start;
    if (len >= (int)sizeof buf) {
        perr(p, "number too long at column %d", start + 1);
        return -1;
    }
    memcpy(buf, s + start, (size_t)len);
    buf[len] = 0;
    double v = strtod(buf, NULL);
    if (!isfinite(v)) { /* constants are finite: one that overflowed would print as "inf" */
        perr(p, "number '%s' out of range at column %d", buf, start + 1);
        return -1;
    }
    p->pos = i;
    return built(p, mk_const(p->e, v));
}

static int parse_call(struct parser *p, const char *name, int name_pos)
{
    const struct fn_entry *fn = NULL;
    for (int k = 0; k < N_FUNCTIONS; k++)
        if (!strcmp(functions[k].name, name)) fn = &functions[k];
    if (!fn) {
        const char *best = NULL;
        int bd = strlen(name) <= 4 ? 2 : 3; /* suggest within 1 edit for short names, 2 else */
        for (int k = 0; k < N_FUNCTIONS; k++) {
            int d = edit_distance(name, functions[k].name);
            if (d < bd) {
                bd = d;
                best = functions[k].name;
            }
        }
        if (best) perr(p, "unknown function '%s' (did you mean '%s'?)", name, best);
        else perr(p, "unknown function '%s' at column %d", name, name_pos + 1);
        return -1;
    }
    p->pos++; /* '(' */
    int args[3], n = 0;
    skip_ws(p);
    if (p->s[p->pos] != ')') {
        for (;;) {
            int v = parse_expr(p);
            if (v < 0) return -1;
            if (n < 3) args[n] = v;
            n++;
            skip_ws(p);
            if (p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            break;
        }
    }
    if (p->s[p->pos] != ')') {
        if (!p->s[p->pos]) perr(p, "missing ')' at column %d", p->pos + 1);
        else unexpected(p);
        return -1;
    }
    p->pos++;
    if (n != fn->arity) {
        perr(p, "%s() takes %d argument%s, got %d at column %d", fn->name, fn->arity, fn->arity == 1 ? "" : "s", n,
             name_pos + 1);
        return -1;
    }
    if (fn->op == GLIA_EXPR_DROPOUT) { /* p: a number, so that the mask is the dropout layer's */
        double v;
        if (!is_const(p->e, args[1], &v) || !(v >= 0 && (float)v < 1.0f)) {
            perr(p, "dropout()'s probability must be a number in [0, 1) at column %d", name_pos + 1);
            return -1;
        }
        return built(p, mk_dropout(p->e, args[0], v));
    }
    return built(p, mk(p->e, fn->op, args[0], n > 1 ? args[1] : -1, n > 2 ? args[2] : -1));
}

static int parse_primary(struct parser *p)
{
    skip_ws(p);
    const char *s = p->s;
    char c = s[p->pos];
    if (isdigit((unsigned char)c) || c == '.') return parse_number(p);
    if (c == '(') {
        int open = p->pos;
        p->pos++;
        if (++p->depth > EXPR_MAX_DEPTH) {
            perr(p, "expression nested too deeply at column %d", open + 1);
            return -1;
        }
        int v = parse_expr(p);
        p->depth--;
        if (v < 0) return -1;
        skip_ws(p);
        if (s[p->pos] != ')') {
            if (!s[p->pos]) perr(p, "missing ')' for the '(' at column %d", open + 1);
            else unexpected(p);
            return -1;
        }
        p->pos++;
        return v;
    }
    if (is_ident_start(c)) {
        int start = p->pos, len = 0;
        while (is_ident_char(s[p->pos])) p->pos++, len++;
        char name[33];
        snprintf(name, sizeof name, "%.*s", len > 32 ? 32 : len, s + start);
        int after = p->pos;
        skip_ws(p);
        if (s[p->pos] == '(') {
            if (++p->depth > EXPR_MAX_DEPTH) {
                perr(p, "expression nested too deeply at column %d", p->pos + 1);
                return -1;
            }
            if (len == 1 && strchr("xyzw", name[0])) {
                perr(p, "expected an operator before '(' at column %d", p->pos + 1);
                return -1;
            }
            int v = parse_call(p, name, start);
            p->depth--;
            return v;
        }
        p->pos = after;
        static const char vars[GLIA_EXPR_MAX_VARS + 1] = "xyzw";
        if (len == 1 && strchr(vars, name[0])) {
            int k = (int)(strchr(vars, name[0]) - vars);
            if (k >= p->n_inputs) {
                perr(p, "variable '%c' but the layer has %d input%s", name[0], p->n_inputs, p->n_inputs == 1 ? "" : "s");
                return -1;
            }
            return built(p, mk_var(p->e, k));
        }
        if (!strcmp(name, "pi")) return built(p, mk_const(p->e, EXPR_PI));
        for (int k = 0; k < N_FUNCTIONS; k++)
            if (!strcmp(functions[k].name, name)) {
                perr(p, "function '%s' needs '(' at column %d", name, after + 1);
                return -1;
            }
        perr(p, "unknown name '%s' at column %d (variables are x, y, z, w)", name, start + 1);
        return -1;
    }
    unexpected(p);
    return -1;
}

/* power := primary ['^' unary]   (right-associative; the exponent may be signed) */
static int parse_power(struct parser *p)
{
    int base = parse_primary(p);
    if (base < 0) return -1;
    skip_ws(p);
    if (p->s[p->pos] != '^') return base;
    if (++p->depth > EXPR_MAX_DEPTH) { /* x^x^x^... nests to the right */
        perr(p, "expression nested too deeply at column %d", p->pos + 1);
        return -1;
    }
    p->pos++;
    int ex = parse_unary(p);
    p->depth--;
    if (ex < 0) return -1;
    return built(p, mk2(p->e, GLIA_EXPR_POW, base, ex));
}

/* unary := ('-' | '+') unary | power */
static int parse_unary(struct parser *p)
{
    skip_ws(p);
    char c = p->s[p->pos];
    if (c != '-' && c != '+') return parse_power(p);
    if (++p->depth > EXPR_MAX_DEPTH) {
        perr(p, "expression nested too deeply at column %d", p->pos + 1);
        return -1;
    }
    p->pos++;
    int v = parse_unary(p);
    p->depth--;
    if (v < 0 || c == '+') return v;
    return built(p, mk1(p->e, GLIA_EXPR_NEG, v));
}

/* term := unary (('*' | '/') unary)* */
static int parse_term(struct parser *p)
{
    int l = parse_unary(p);
    while (l >= 0) {
        skip_ws(p);
        char c = p->s[p->pos];
        if (c != '*' && c != '/') break;
        p->pos++;
        int r = parse_unary(p);
        if (r < 0) return -1;
        l = built(p, mk2(p->e, c == '*' ? GLIA_EXPR_MUL : GLIA_EXPR_DIV, l, r));
    }
    return l;
}

/* expr := term (('+' | '-') term)* */
static int parse_expr(struct parser *p)
{
    int l = parse_term(p);
    while (l >= 0) {
        skip_ws(p);
        char c = p->s[p->pos];
        if (c != '+' && c != '-') break;
        p->pos++;
        int r = parse_term(p);
        if (r < 0) return -1;
        l = built(p, mk2(p->e, c == '+' ? GLIA_EXPR_ADD : GLIA_EXPR_SUB, l, r));
    }
    return l;
}

int glia_expr_parse(const char *text, int n_inputs, struct glia_expr **out, char *err, size_t err_size)
{
    *out = NULL;
    if (err && err_size) err[0] = 0;
    struct parser p = {.s = text ? text : "", .n_inputs = n_inputs, .err = err, .err_size = err_size};
    if (!(p.e = ir_new())) {
        perr(&p, "out of memory");
        return -1;
    }
    skip_ws(&p);
    if (!p.s[p.pos]) {
        perr(&p, "empty expression");
        glia_expr_free(p.e);
        return -1;
    }
    int root = parse_expr(&p);
    if (root >= 0) {
        skip_ws(&p);
        if (p.s[p.pos]) {
            unexpected(&p);
            root = -1;
        }
    }
    if (root >= 0 && finalize(p.e, root)) perr(&p, "out of memory");
    if (!p.failed) {
        int depth = ir_depth(p.e);
        if (depth > EXPR_MAX_IR_DEPTH)
            perr(&p, "expression nested too deeply (%d levels of operations, at most %d)", depth, EXPR_MAX_IR_DEPTH);
        if (depth < 0) perr(&p, "out of memory");
        if (glia_expr_count_op(p.e, GLIA_EXPR_DROPOUT) > 1)
            perr(&p, "dropout() of different inputs or probabilities: one expression draws one mask");
    }
    if (p.failed) {
        glia_expr_free(p.e);
        return -1;
    }
    *out = p.e;
    return 0;
}

/* ---- differentiation ------------------------------------------------------------------------ */

struct glia_expr *glia_expr_diff(const struct glia_expr *ir, int var)
{
    struct glia_expr *e = ir_new();
    int *map = malloc((size_t)(ir->n ? ir->n : 1) * sizeof *map), *d = malloc((size_t)(ir->n ? ir->n : 1) * sizeof *d);
    if (!e || !map || !d) goto fail;
    int k0 = mk_const(e, 0), k1 = mk_const(e, 1);
    if (k0 < 0 || k1 < 0) goto fail;
    for (int i = 0; i < ir->n; i++) {
        const struct glia_expr_node *nd = &ir->nodes[i];
        int A = nd->a >= 0 ? map[nd->a] : -1, B = nd->b >= 0 ? map[nd->b] : -1, C = nd->c >= 0 ? map[nd->c] : -1;
        int dA = nd->a >= 0 ? d[nd->a] : -1, dB = nd->b >= 0 ? d[nd->b] : -1, dC = nd->c >= 0 ? d[nd->c] : -1;
        int N;
        if (nd->op == GLIA_EXPR_CONST) N = mk_const(e, nd->value);
        else if (nd->op == GLIA_EXPR_VAR) N = mk_var(e, nd->var);
        else if (nd->op == GLIA_EXPR_DROPOUT) N = mk_dropout(e, A, nd->value);
        else N = mk(e, nd->op, A, B, C);
        if (N < 0) goto fail;
        map[i] = N;
        int r;
        switch (nd->op) {
        case GLIA_EXPR_CONST: r = k0; break;
        case GLIA_EXPR_VAR: r = nd->var == var ? k1 : k0; break;
        case GLIA_EXPR_NEG: r = mk1(e, GLIA_EXPR_NEG, dA); break;
        case GLIA_EXPR_ADD: r = mk2(e, GLIA_EXPR_ADD, dA, dB); break;
        case GLIA_EXPR_SUB: r = mk2(e, GLIA_EXPR_SUB, dA, dB); break;
        case GLIA_EXPR_MUL: /* da*b + a*db */
            r = mk2(e, GLIA_EXPR_ADD, mk2(e, GLIA_EXPR_MUL, dA, B), mk2(e, GLIA_EXPR_MUL, A, dB));
            break;
        case GLIA_EXPR_DIV: /* (da - (a/b)*db) / b */
            r = mk2(e, GLIA_EXPR_DIV, mk2(e, GLIA_EXPR_SUB, dA, mk2(e, GLIA_EXPR_MUL, N, dB)), B);
            break;
        case GLIA_EXPR_POW: /* b a^(b-1) da [+ a^b log(a) db when b depends on var] */
            r = mk2(e, GLIA_EXPR_MUL, mk2(e, GLIA_EXPR_MUL, B, mk2(e, GLIA_EXPR_POW, A, mk2(e, GLIA_EXPR_SUB, B, k1))), dA);
            if (dB >= 0 && !is_val(e, dB, 0))
                r = mk2(e, GLIA_EXPR_ADD, r, mk2(e, GLIA_EXPR_MUL, mk2(e, GLIA_EXPR_MUL, N, mk1(e, GLIA_EXPR_LOG, A)), dB));
            break;
        case GLIA_EXPR_EXP: r = mk2(e, GLIA_EXPR_MUL, N, dA); break;
        case GLIA_EXPR_LOG: r = mk2(e, GLIA_EXPR_DIV, dA, A); break;
        case GLIA_EXPR_SQRT: r = mk2(e, GLIA_EXPR_DIV, dA, mk2(e, GLIA_EXPR_MUL, mk_const(e, 2), N)); break;
        case GLIA_EXPR_TANH: /* (1 - t^2) da */
            r = mk2(e, GLIA_EXPR_MUL, mk2(e, GLIA_EXPR_SUB, k1, mk2(e, GLIA_EXPR_MUL, N, N)), dA);
            break;
        case GLIA_EXPR_SIGMOID: /* s (1 - s) da */
            r = mk2(e, GLIA_EXPR_MUL, mk2(e, GLIA_EXPR_MUL, N, mk2(e, GLIA_EXPR_SUB, k1, N)), dA);
            break;
        case GLIA_EXPR_ERF: /* 2/sqrt(pi) exp(-a^2) da */
            r = mk2(e, GLIA_EXPR_MUL,
                    mk2(e, GLIA_EXPR_MUL, mk_const(e, EXPR_2_SQRTPI), mk1(e, GLIA_EXPR_EXP, mk1(e, GLIA_EXPR_NEG, mk2(e, GLIA_EXPR_MUL, A, A)))),
                    dA);
            break;
        case GLIA_EXPR_ABS: r = mk2(e, GLIA_EXPR_MUL, mk1(e, GLIA_EXPR_SIGN, A), dA); break;
        case GLIA_EXPR_SIGN: case GLIA_EXPR_GE: case GLIA_EXPR_GT: r = k0; break;
        case GLIA_EXPR_MAX: r = mk(e, GLIA_EXPR_SELECT, mk2(e, GLIA_EXPR_GE, A, B), dA, dB); break; /* a >= b ? da : db */
        case GLIA_EXPR_MIN: r = mk(e, GLIA_EXPR_SELECT, mk2(e, GLIA_EXPR_GE, B, A), dA, dB); break; /* a <= b ? da : db */
        case GLIA_EXPR_SELECT: r = mk(e, GLIA_EXPR_SELECT, A, dB, dC); break;
        case GLIA_EXPR_DROPOUT: r = mk_dropout(e, dA, nd->value); break; /* linear in a: the same mask */
        case GLIA_EXPR_RELU: /* relu(a) <= 0 ? 0 : da, as a <= 0 ? 0 : da (NaN included) but over its own value */
            r = mk(e, GLIA_EXPR_SELECT, mk2(e, GLIA_EXPR_GE, k0, N), k0, dA);
            break;
        default: r = -1; break;
        }
        if (r < 0) goto fail;
        d[i] = r;
    }
    if (ir->n == 0 || finalize(e, d[ir->out])) goto fail;
    free(map);
    free(d);
    return e;
fail:
    free(map);
    free(d);
    glia_expr_free(e);
    return NULL;
}

/* dy * node i of e, the product taken into both branches of a select (done[] memoizes, for nodes below
 * n_done); -1 when out of memory. */
static int times_dy(struct glia_expr *e, int i, int dy, int *done, int n_done)
{
    if (i < n_done && done[i] >= 0) return done[i];
    const struct glia_expr_node nd = e->nodes[i];  /* a copy: building may move e->nodes */
    int r = nd.op == GLIA_EXPR_SELECT
                ? mk(e, GLIA_EXPR_SELECT, nd.a, times_dy(e, nd.b, dy, done, n_done), times_dy(e, nd.c, dy, done, n_done))
                : mk2(e, GLIA_EXPR_MUL, i, dy);
    if (i < n_done) done[i] = r;
    return r;
}

struct glia_expr *glia_expr_grad(const struct glia_expr *ir, int var, int dy_var)
{
    struct glia_expr *e = glia_expr_diff(ir, var);  /* built on: intern() remakes the table */
    int n = e ? e->n : 0, *done = e ? malloc((size_t)n * sizeof *done) : NULL;
    int dy = done ? mk_var(e, dy_var) : -1;
    for (int i = 0; i < n && done; i++) done[i] = -1;
    if (dy < 0 || finalize(e, times_dy(e, e->out, dy, done, n))) {
        free(done);
        glia_expr_free(e);
        return NULL;
    }
    free(done);
    return e;
}

/* Node nd (of another IR, its operands there mapped to nodes of e by map) built into e; -1 when out of
 * memory or an operand is -1. */
static int rebuild(struct glia_expr *e, const struct glia_expr_node *nd, const int *map)
{
    int A = nd->a >= 0 ? map[nd->a] : -1;
    if (nd->op == GLIA_EXPR_CONST) return mk_const(e, nd->value);
    if (nd->op == GLIA_EXPR_VAR) return mk_var(e, nd->var);
    if (nd->op == GLIA_EXPR_DROPOUT) return mk_dropout(e, A, nd->value);
    return mk(e, nd->op, A, nd->b >= 0 ? map[nd->b] : -1, nd->c >= 0 ? map[nd->c] : -1);
}

int glia_expr_over_result(const struct glia_expr *g, const struct glia_expr *f, int var, struct glia_expr **out)
{
    *out = NULL;
    if (!f->n || !g->n) return -1;
    /* f and g built into one table: the part of g that is f is then f's own node */
    struct glia_expr *e = ir_new(), *r = ir_new();
    int *mf = malloc((size_t)f->n * sizeof *mf), *mg = malloc((size_t)g->n * sizeof *mg), *m = NULL, rc = -1;
    if (!e || !r || !mf || !mg) goto done;
    for (int i = 0; i < f->n; i++)
        if ((mf[i] = rebuild(e, &f->nodes[i], mf)) < 0) goto done;
    for (int i = 0; i < g->n; i++)
        if ((mg[i] = rebuild(e, &g->nodes[i], mg)) < 0) goto done;
    /* then into r, f's result as variable var; -2: a node that reads one of f's variables otherwise */
    if (!(m = malloc((size_t)e->n * sizeof *m))) goto done;
    for (int i = 0; i < e->n; i++) {
        const struct glia_expr_node *nd = &e->nodes[i];
        bool reads = nd->op == GLIA_EXPR_VAR && (f->vars_used >> nd->var & 1);
        for (int k = 0, ops[3] = {nd->a, nd->b, nd->c}; k < 3; k++) reads |= ops[k] >= 0 && m[ops[k]] == -2;
        m[i] = i == mf[f->out] ? mk_var(r, var) : reads ? -2 : rebuild(r, nd, m);
        if (m[i] == -1) goto done;
    }
    int root = m[mg[g->out]];
    rc = root == -2 ? 1 : finalize(r, root) ? -1 : 0;
    if (!rc) {
        *out = r;
        r = NULL;
    }
done:
    free(mf);
    free(mg);
    free(m);
    glia_expr_free(e);
    glia_expr_free(r);
    return rc;
}

/* ---- printing ----------------------------------------------------------------------------- */

struct wbuf {
    char *buf;
    size_t size, len;
    bool over;
};

static void put(struct wbuf *w, const char *s)
{
    if (w->over) return;
    size_t l = strlen(s);
    if (w->len + l + 1 > w->size) {
        if (w->size) {
            size_t k = w->size - 1 - w->len;
            memcpy(w->buf + w->len, s, k);
            w->len += k;
            w->buf[w->len] = 0;
        }
        w->over = true;
        return;
    }
    memcpy(w->buf + w->len, s, l + 1);
    w->len += l;
}

static void putf(struct wbuf *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct wbuf *w, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    put(w, tmp);
}

/* shortest text that reads back as v */
static void put_number(struct wbuf *w, double v)
{
    if (v == EXPR_PI) {
        put(w, "pi");
        return;
    }
    char tmp[64];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v) break;
    }
    put(w, tmp);
}

enum { P_ADD = 1, P_MUL = 2, P_NEG = 3, P_POW = 4, P_ATOM = 5 };

static int node_prec(const struct glia_expr *e, int i)
{
    const struct glia_expr_node *nd = &e->nodes[i];
    switch (nd->op) {
    case GLIA_EXPR_CONST: return nd->value < 0 ? P_NEG : P_ATOM;
    case GLIA_EXPR_ADD: case GLIA_EXPR_SUB: return P_ADD;
    case GLIA_EXPR_MUL: case GLIA_EXPR_DIV: return P_MUL;
    case GLIA_EXPR_NEG: return P_NEG;
    case GLIA_EXPR_POW: return P_POW;
    default: return P_ATOM;
    }
}

static void pr(struct wbuf *w, const struct glia_expr *e, int i, int min_prec)
{
    if (w->over) return;
    const struct glia_expr_node *nd = &e->nodes[i];
    bool paren = node_prec(e, i) < min_prec;
    if (paren) put(w, "(");
    switch (nd->op) {
    case GLIA_EXPR_CONST: put_number(w, nd->value); break;
    case GLIA_EXPR_VAR: putf(w, "%c", "xyzw"[nd->var]); break;
    case GLIA_EXPR_NEG: put(w, "-"); pr(w, e, nd->a, P_NEG); break;
    case GLIA_EXPR_ADD:
        if (is_op(e, nd->a, GLIA_EXPR_CONST)) { /* constants go first in the IR, last in text */
            double v = e->nodes[nd->a].value;
            pr(w, e, nd->b, P_ADD);
            put(w, v < 0 ? " - " : " + ");
            put_number(w, fabs(v));
        } else {
            pr(w, e, nd->a, P_ADD);
            put(w, " + ");
            pr(w, e, nd->b, P_MUL);
        }
        break;
    case GLIA_EXPR_SUB: pr(w, e, nd->a, P_ADD); put(w, " - "); pr(w, e, nd->b, P_MUL); break;
    case GLIA_EXPR_MUL: pr(w, e, nd->a, P_MUL); put(w, " * "); pr(w, e, nd->b, P_NEG); break;
    case GLIA_EXPR_DIV: pr(w, e, nd->a, P_MUL); put(w, " / "); pr(w, e, nd->b, P_NEG); break;
    case GLIA_EXPR_POW: pr(w, e, nd->a, P_ATOM); put(w, "^"); pr(w, e, nd->b, P_NEG); break;
    case GLIA_EXPR_DROPOUT: put(w, "dropout("); pr(w, e, nd->a, 0); put(w, ", "); put_number(w, nd->value); put(w, ")"); break;
    default: {
        int ar = op_arity(nd->op), ops[3] = {nd->a, nd->b, nd->c};
        put(w, op_names[nd->op]);
        put(w, "(");
        for (int k = 0; k < ar; k++) {
            if (k) put(w, ", ");
            pr(w, e, ops[k], 0);
        }
        put(w, ")");
        break;
    }
    }
    if (paren) put(w, ")");
}

int glia_expr_print(const struct glia_expr *ir, char *buf, size_t size)
{
    struct wbuf w = {buf, size, 0, size == 0};
    if (size) buf[0] = 0;
    if (ir->n) pr(&w, ir, ir->out, 0);
    return w.over ? -1 : (int)w.len;
}

int glia_expr_print_ssa(const struct glia_expr *ir, char *buf, size_t size)
{
    struct wbuf w = {buf, size, 0, size == 0};
    if (size) buf[0] = 0;
    for (int i = 0; i < ir->n && !w.over; i++) {
        const struct glia_expr_node *nd = &ir->nodes[i];
        putf(&w, "%%%d = %s", i, op_names[nd->op]);
        if (nd->op == GLIA_EXPR_CONST) {
            put(&w, " ");
            put_number(&w, nd->value);
        } else if (nd->op == GLIA_EXPR_VAR) {
            putf(&w, " %c", "xyzw"[nd->var]);
        } else {
            int ops[3] = {nd->a, nd->b, nd->c};
            for (int k = 0; k < op_arity(nd->op); k++) putf(&w, " %%%d", ops[k]);
            if (nd->op == GLIA_EXPR_DROPOUT) {
                put(&w, " p=");
                put_number(&w, nd->value);
            }
        }
        put(&w, "\n");
    }
    return w.over ? -1 : (int)w.len;
}

uint64_t glia_expr_hash(const struct glia_expr *ir)
{
    uint64_t h = mix64(0x243f6a8885a308d3ull, (uint64_t)ir->n);
    for (int i = 0; i < ir->n; i++) h = mix64(h, node_key(&ir->nodes[i]));
    return mix64(h, (uint64_t)ir->out);
}

bool glia_expr_same(const struct glia_expr *a, const struct glia_expr *b)
{
    if (a->n != b->n || a->out != b->out) return false;
    for (int i = 0; i < a->n; i++) {
        const struct glia_expr_node *x = &a->nodes[i], *y = &b->nodes[i];
        if (x->op != y->op || x->a != y->a || x->b != y->b || x->c != y->c || x->var != y->var ||
            memcmp(&x->value, &y->value, sizeof x->value))
            return false;
    }
    return true;
}

int glia_expr_op_count(const struct glia_expr *ir)
{
    int k = 0;
    for (int i = 0; i < ir->n; i++) k += ir->nodes[i].op != GLIA_EXPR_CONST && ir->nodes[i].op != GLIA_EXPR_VAR;
    return k;
}

int glia_expr_count_op(const struct glia_expr *ir, enum glia_expr_op op)
{
    int k = 0;
    for (int i = 0; i < ir->n; i++) k += ir->nodes[i].op == op;
    return k;
}

/* ---- evaluation ------------------------------------------------------------------------------ */

void glia_expr_eval1_nodes(const struct glia_expr *ir, const double *vars, double *r)
{
    for (int i = 0; i < ir->n; i++) {
        const struct glia_expr_node *nd = &ir->nodes[i];
        if (nd->op == GLIA_EXPR_CONST) r[i] = nd->value;
        else if (nd->op == GLIA_EXPR_VAR) r[i] = vars[nd->var];
        else
            r[i] = apply_d(nd->op, r[nd->a], nd->b >= 0 ? r[nd->b] : 0, nd->c >= 0 ? r[nd->c] : 0);
    }
}

double glia_expr_eval1(const struct glia_expr *ir, const double *vars)
{
    if (!ir->n) return NAN;
    double *r = malloc((size_t)ir->n * sizeof *r);
    if (!r) return NAN;
    glia_expr_eval1_nodes(ir, vars, r);
    double v = r[ir->out];
    free(r);
    return v;
}

/* Node i over m <= GLIA_EXPR_BLOCK elements into dst. */
/* a loop over a block's elements, vectorized (-O2 alone leaves loops with a remainder scalar) */
#define FOR_J _Pragma("omp simd") for (int j = 0; j < m; j++)

/* start: the block's first element; site: see glia_expr_eval_ex */
static void eval_node(const struct glia_expr_node *nd, const float *const *reg, float *restrict dst, int m, int64_t start,
                      const struct glia_expr_site *site)
{
    const float *A = nd->a >= 0 ? reg[nd->a] : NULL, *B = nd->b >= 0 ? reg[nd->b] : NULL;
    const float *C = nd->c >= 0 ? reg[nd->c] : NULL;
    switch (nd->op) {
    case GLIA_EXPR_NEG: FOR_J dst[j] = -A[j]; break;
    case GLIA_EXPR_ADD: FOR_J dst[j] = A[j] + B[j]; break;
    case GLIA_EXPR_SUB: FOR_J dst[j] = A[j] - B[j]; break;
    case GLIA_EXPR_MUL: FOR_J dst[j] = A[j] * B[j]; break;
    case GLIA_EXPR_DIV: FOR_J dst[j] = A[j] / B[j]; break;
    case GLIA_EXPR_POW: FOR_J dst[j] = powf(A[j], B[j]); break;
    case GLIA_EXPR_EXP: FOR_J dst[j] = expf(A[j]); break;
    case GLIA_EXPR_LOG: FOR_J dst[j] = logf(A[j]); break;
    case GLIA_EXPR_SQRT: FOR_J dst[j] = sqrtf(A[j]); break;
    case GLIA_EXPR_TANH: FOR_J dst[j] = tanhf(A[j]); break;
    case GLIA_EXPR_SIGMOID:
        FOR_J {
            float e = expf(-fabsf(A[j]));
            dst[j] = A[j] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        }
        break;
    case GLIA_EXPR_ERF: FOR_J dst[j] = erff(A[j]); break;
    case GLIA_EXPR_ABS: FOR_J dst[j] = fabsf(A[j]); break;
    case GLIA_EXPR_SIGN: FOR_J dst[j] = (float)((A[j] > 0.0f) - (A[j] < 0.0f)); break;
    /* both operands loaded before the choice, so that it is a blend, not a branch */
    case GLIA_EXPR_MAX: FOR_J { float a = A[j], b = B[j]; dst[j] = a >= b || a != a ? a : b; } break;
    case GLIA_EXPR_MIN: FOR_J { float a = A[j], b = B[j]; dst[j] = a <= b || a != a ? a : b; } break;
    case GLIA_EXPR_GE: FOR_J dst[j] = A[j] >= B[j] ? 1.0f : 0.0f; break;
    case GLIA_EXPR_GT: FOR_J dst[j] = A[j] > B[j] ? 1.0f : 0.0f; break;
    case GLIA_EXPR_SELECT: FOR_J { float b = B[j], c = C[j]; dst[j] = A[j] != 0.0f ? b : c; } break;
    case GLIA_EXPR_RELU: FOR_J { float a = A[j]; dst[j] = a < 0.0f ? 0.0f : a; } break;
    case GLIA_EXPR_DROPOUT:
        if (!site || !site->train) {
            FOR_J dst[j] = A[j];
        } else { /* the dropout layer's loop body: the same mask and the same float product */
            float p = (float)nd->value, scale = 1.0f / (1.0f - p);
            uint64_t seed = site->seed;
            int64_t Cc = site->C, HW = site->HW;
            if (Cc > 0) {
                FOR_J dst[j] = glia_dropout_uniform(seed, glia_dropout_nchw_index(start + j, Cc, HW)) >= p ? A[j] * scale : 0.0f;
            } else {
                FOR_J dst[j] = glia_dropout_uniform(seed, start + j) >= p ? A[j] * scale : 0.0f;
            }
        }
        break;
    default: FOR_J dst[j] = NAN; break;
    }
}

/* ---- the block interpreter's plan ----
 * Node by node, every value goes through a block of memory; what the plan fuses saves those passes without
 * changing a value (each operation still rounds to float as its node does): a select of a comparison that
 * nothing else reads compares in its own loop (relu's gradient: select(ge(0, y), 0, dy)), and a chain of up
 * to 3 additions, subtractions and multiplications, each node read only by the next, is one loop (sigmoid's
 * gradient: (1 - y) * y * dy). The result goes straight into the output when it is only stored there or
 * added to it. Built once with the expression (finalize), so that an evaluation allocates nothing for it. */

#define CHAIN_MAX 3

enum chain_op { CH_ADD, CH_SUB, CH_RSUB, CH_MUL };  /* c + o, c - o, o - c, c * o: c the chain's value */

enum step_kind { STEP_NODE, STEP_SELECT_CMP, STEP_CHAIN };

struct step {
    int node;                    /* the node whose value it computes */
    enum step_kind kind;
    int x, y, gt;                /* STEP_SELECT_CMP: (x > y if gt, else x >= y) ? node.b : node.c */
    int n_ops, a;                /* STEP_CHAIN: c = a, then c = op[k](c, o[k]) for k < n_ops */
    enum chain_op op[CHAIN_MAX];
    int o[CHAIN_MAX];
};

struct glia__expr_plan {
    int n_steps;
    struct step *steps;  /* in node order */
    int n_slots;         /* blocks of scratch: computed values, and constants that a step reads as blocks */
    int n_const_blocks;  /* of those, constants */
    int *slot;           /* per node: its block of scratch, or -1 (variables, values fused into a step,
                            constants read as numbers) */
};

static void plan_free(struct glia__expr_plan *pl)
{
    if (!pl) return;
    free(pl->steps);
    free(pl->slot);
    free(pl);
}

static bool chain_node(enum glia_expr_op op) { return op == GLIA_EXPR_ADD || op == GLIA_EXPR_SUB || op == GLIA_EXPR_MUL; }

/* Whether node i may extend the chain that ends in its operand p: p is read by i alone and the chain is not
 * full. Where the target has a fused multiply-add the compiler may contract a product and a sum in one loop
 * into one rounding: then no sum follows a product. */
static bool chain_extends(const struct glia_expr *ir, const int *uses, const int *len, int i, int p)
{
    if (p < 0 || uses[p] != 1 || !chain_node(ir->nodes[p].op) || len[p] >= CHAIN_MAX) return false;
#ifdef FP_FAST_FMAF
    if (ir->nodes[i].op != GLIA_EXPR_MUL && ir->nodes[p].op == GLIA_EXPR_MUL) return false;
#endif
    return true;
}

/* The steps of the chain ending in node i (len its length, link[j] the node node j extends). */
static void chain_step(const struct glia_expr *ir, int i, int len, const int *link, struct step *st)
{
    st->kind = STEP_CHAIN;
    st->n_ops = len;
    for (int k = len - 1, j = i; k >= 0; k--, j = link[j]) {  /* from the last operation back */
        const struct glia_expr_node *c = &ir->nodes[j];
        int p = link[j];
        bool right = p >= 0 && c->b == p;  /* the chain is c's right operand (read once: not also a) */
        st->o[k] = right ? c->a : c->b;
        st->op[k] = c->op == GLIA_EXPR_ADD ? CH_ADD : c->op == GLIA_EXPR_MUL ? CH_MUL : right ? CH_RSUB : CH_SUB;
        if (p < 0) st->a = c->a;
    }
}

/* The plan of ir into *out; -1 when out of memory. */
static int plan_build(const struct glia_expr *ir, struct glia__expr_plan **out)
{
    int n = ir->n, *uses = calloc((size_t)n, sizeof *uses), *len = calloc((size_t)n, sizeof *len);
    int *link = malloc((size_t)n * sizeof *link);    /* the chain node i extends, or -1 */
    bool *fused = calloc((size_t)n, sizeof *fused);   /* computed inside its only reader's step */
    struct glia__expr_plan *pl = calloc(1, sizeof *pl);
    if (pl) {
        pl->steps = malloc((size_t)n * sizeof *pl->steps);
        pl->slot = malloc((size_t)n * sizeof *pl->slot);
    }
    int rc = uses && len && link && fused && pl && pl->steps && pl->slot ? 0 : -1;
    for (int i = 0; i < n && !rc; i++) {
        const struct glia_expr_node *nd = &ir->nodes[i];
        for (int k = 0, ops[3] = {nd->a, nd->b, nd->c}; k < 3; k++)
            if (ops[k] >= 0) uses[ops[k]]++;
    }
    if (!rc) uses[ir->out]++;
    for (int i = 0; i < n && !rc; i++) {
        const struct glia_expr_node *nd = &ir->nodes[i];
        link[i] = -1;
        if (chain_node(nd->op)) {
            len[i] = 1;
            int p = chain_extends(ir, uses, len, i, nd->a) ? nd->a : chain_extends(ir, uses, len, i, nd->b) ? nd->b : -1;
            if (p >= 0) {
                link[i] = p;
                len[i] = len[p] + 1;
                fused[p] = true;
            }
        } else if (nd->op == GLIA_EXPR_SELECT && uses[nd->a] == 1 &&
                   (ir->nodes[nd->a].op == GLIA_EXPR_GE || ir->nodes[nd->a].op == GLIA_EXPR_GT)) {
            fused[nd->a] = true;
        }
    }
    for (int i = 0; i < n && !rc; i++) {
        const struct glia_expr_node *nd = &ir->nodes[i];
        pl->slot[i] = fused[i] || nd->op == GLIA_EXPR_VAR || nd->op == GLIA_EXPR_CONST ? -1 : pl->n_slots++;
        if (pl->slot[i] < 0) continue;
        struct step *st = &pl->steps[pl->n_steps++];
        *st = (struct step){.node = i, .kind = STEP_NODE};
        if (nd->op == GLIA_EXPR_SELECT && fused[nd->a]) {
            const struct glia_expr_node *c = &ir->nodes[nd->a];
            st->kind = STEP_SELECT_CMP;
            st->x = c->a;
            st->y = c->b;
            st->gt = c->op == GLIA_EXPR_GT;
        } else if (len[i] > 1) {
            chain_step(ir, i, len[i], link, st);
        }
    }
    /* a block of scratch for each constant that a step, or the copy of a constant result, reads as one (a
     * select of a comparison reads numbers) */
    if (!rc && ir->nodes[ir->out].op == GLIA_EXPR_CONST) pl->slot[ir->out] = pl->n_slots++;
    for (int k = 0; k < (rc ? 0 : pl->n_steps); k++) {
        const struct step *st = &pl->steps[k];
        const struct glia_expr_node *nd = &ir->nodes[st->node];
        int ops[CHAIN_MAX + 1] = {nd->a, nd->b, nd->c, -1};
        if (st->kind == STEP_SELECT_CMP) continue;
        if (st->kind == STEP_CHAIN) {
            ops[0] = st->a;
            for (int j = 0; j < CHAIN_MAX; j++) ops[j + 1] = j < st->n_ops ? st->o[j] : -1;
        }
        for (int j = 0; j <= CHAIN_MAX; j++)
            if (ops[j] >= 0 && ir->nodes[ops[j]].op == GLIA_EXPR_CONST && pl->slot[ops[j]] < 0) {
                pl->slot[ops[j]] = pl->n_slots++;
                pl->n_const_blocks++;
            }
    }
    free(uses), free(len), free(link), free(fused);
    if (rc) plan_free(pl);
    *out = rc ? NULL : pl;
    return rc;
}

/* c = f(c, o), one chain operation; with f a constant, each combination below is a loop of its own */
#define CH_APPLY(f, c, o) ((f) == CH_ADD ? (c) + (o) : (f) == CH_SUB ? (c) - (o) : (f) == CH_RSUB ? (o) - (c) : (c) * (o))
/* dst = v, or dst += v (added after v is rounded, as a separate pass would) */
#define CH_STORE(v)                   \
    if (acc)                          \
        FOR_J dst[j] = dst[j] + (v);  \
    else                              \
        FOR_J dst[j] = (v);
#define CH_CASE2(f0, f1) \
    case (f0) * 4 + (f1): CH_STORE(CH_APPLY(f1, CH_APPLY(f0, A[j], O0[j]), O1[j])) break;
#define CH_CASE3(f0, f1, f2) \
    case ((f0) * 4 + (f1)) * 4 + (f2): CH_STORE(CH_APPLY(f2, CH_APPLY(f1, CH_APPLY(f0, A[j], O0[j]), O1[j]), O2[j])) break;
#define CH_ROW2(f0) CH_CASE2(f0, CH_ADD) CH_CASE2(f0, CH_SUB) CH_CASE2(f0, CH_RSUB) CH_CASE2(f0, CH_MUL)
#define CH_ROW3B(f0, f1) CH_CASE3(f0, f1, CH_ADD) CH_CASE3(f0, f1, CH_SUB) CH_CASE3(f0, f1, CH_RSUB) CH_CASE3(f0, f1, CH_MUL)
#define CH_ROW3(f0) CH_ROW3B(f0, CH_ADD) CH_ROW3B(f0, CH_SUB) CH_ROW3B(f0, CH_RSUB) CH_ROW3B(f0, CH_MUL)

/* A chain step in one loop; each operation rounds to float as its node does. acc: dst += the chain. */
static void eval_chain(const struct step *st, const float *const *reg, float *restrict dst, int m, bool acc)
{
    const float *A = reg[st->a], *O0 = reg[st->o[0]], *O1 = reg[st->o[1]];
    const float *O2 = st->n_ops > 2 ? reg[st->o[2]] : NULL;
    if (st->n_ops == 2) {
        switch (st->op[0] * 4 + st->op[1]) {
            CH_ROW2(CH_ADD) CH_ROW2(CH_SUB) CH_ROW2(CH_MUL)  /* the first operation has no chain to reverse */
        }
    } else {
        switch ((st->op[0] * 4 + st->op[1]) * 4 + st->op[2]) {
            CH_ROW3(CH_ADD) CH_ROW3(CH_SUB) CH_ROW3(CH_MUL)
        }
    }
}

/* A select of a comparison in one loop. A constant operand is a number in a register, not a block to load
 * (relu's gradient select(ge(0, y), 0, dy) loads y and dy only); both branches are loaded before the choice,
 * so that it is a blend, not a branch. acc: dst += the choice. */
#define SEL_LOOP(XV, YV, BV, CV, CMP)                                               \
    if (acc)                                                                        \
        FOR_J { float b = BV, c = CV; dst[j] = dst[j] + ((XV) CMP (YV) ? b : c); }  \
    else                                                                            \
        FOR_J { float b = BV, c = CV; dst[j] = (XV) CMP (YV) ? b : c; }
#define SEL_CMP(XV, YV, BV, CV)              \
    if (st->gt) {                            \
        SEL_LOOP(XV, YV, BV, CV, >)          \
    } else {                                 \
        SEL_LOOP(XV, YV, BV, CV, >=)         \
    }
#define SEL_BC(XV, YV)                                               \
    switch (kb ? (kc ? 3 : bs == 0.0f ? 4 : 2) : kc ? (cs == 0.0f ? 5 : 1) : 0) { \
    case 0: SEL_CMP(XV, YV, B[j], C[j]) break;                       \
    case 1: SEL_CMP(XV, YV, B[j], cs) break;                         \
    case 2: SEL_CMP(XV, YV, bs, C[j]) break;                         \
    case 3: SEL_CMP(XV, YV, bs, cs) break;                           \
    case 4: SEL_CMP(XV, YV, 0.0f, C[j]) break; /* a mask, no blend */ \
    default: SEL_CMP(XV, YV, B[j], 0.0f) break;                      \
    }

static void eval_select_cmp(const struct glia_expr *ir, const struct step *st, const float *const *reg,
                            float *restrict dst, int m, bool acc)
{
    const struct glia_expr_node *nd = &ir->nodes[st->node], *nx = &ir->nodes[st->x], *ny = &ir->nodes[st->y];
    const struct glia_expr_node *nb = &ir->nodes[nd->b], *nc = &ir->nodes[nd->c];
    const float *X = reg[st->x], *Y = reg[st->y], *B = reg[nd->b], *C = reg[nd->c];
    int kx = nx->op == GLIA_EXPR_CONST, ky = ny->op == GLIA_EXPR_CONST;  /* not both: that folds */
    int kb = nb->op == GLIA_EXPR_CONST, kc = nc->op == GLIA_EXPR_CONST;
    const float xs = (float)nx->value, ys = (float)ny->value, bs = (float)nb->value, cs = (float)nc->value;
    if (kx) {
        SEL_BC(xs, Y[j])
    } else if (ky) {
        SEL_BC(X[j], ys)
    } else {
        SEL_BC(X[j], Y[j])
    }
}

/* Step st over m <= GLIA_EXPR_BLOCK elements into dst; acc (not for STEP_NODE): dst += its value. */
static void eval_step(const struct glia_expr *ir, const struct step *st, const float *const *reg, float *restrict dst,
                      int m, int64_t start, const struct glia_expr_site *site, bool acc)
{
    const struct glia_expr_node *nd = &ir->nodes[st->node];
    if (st->kind == STEP_NODE) {
        eval_node(nd, reg, dst, m, start, site);
    } else if (st->kind == STEP_CHAIN) {
        eval_chain(st, reg, dst, m, acc);
    } else {
        eval_select_cmp(ir, st, reg, dst, m, acc);
    }
}

/* Elements a block of an evaluation holds: GLIA_EXPR_BLOCK, or when the whole expression is one step straight
 * into the output, more (it writes no scratch, and longer loops have less overhead): ONE_STEP_BLOCK where it
 * reads constants' blocks, else the thread's whole share, as a plain parallel loop takes it. */
#define ONE_STEP_BLOCK 2048
#define MAX_BLOCK (1 << 30)
/* scratch that each thread keeps on its stack (floats) */
#define STACK_SCRATCH 4096

int glia_expr_eval_ex(const struct glia_expr *ir, const float *const *vars, int64_t n, const float *scale,
                      bool accumulate, const struct glia_expr_site *site, float *out)
{
    if (n <= 0) return 0;
    const struct glia__expr_plan *pl = ir->plan;
    if (!ir->n || !pl) return -1;
    /* the result straight into out (stored, or added in the same loop) when no input it reads is out itself */
    const struct step *last = pl->n_steps ? &pl->steps[pl->n_steps - 1] : NULL;
    bool direct = !scale && last && last->node == ir->out && (!accumulate || last->kind != STEP_NODE);
    uintptr_t o0 = (uintptr_t)out, o1 = (uintptr_t)(out + n);
    for (int k = 0; k < GLIA_EXPR_MAX_VARS && direct; k++)
        direct = !(ir->vars_used >> k & 1) || (uintptr_t)(vars[k] + n) <= o0 || o1 <= (uintptr_t)vars[k];
    bool parallel = n >= 16 * GLIA_EXPR_BLOCK, one_step = direct && pl->n_steps == 1;
    bool no_scratch = one_step && !pl->n_const_blocks;
    int64_t bs = one_step ? ONE_STEP_BLOCK : GLIA_EXPR_BLOCK;
    if (no_scratch) {
        int threads = 1;
#ifdef _OPENMP
        if (parallel) threads = omp_get_max_threads();
#endif
        bs = (n + threads - 1) / threads;
        if (bs > MAX_BLOCK) bs = MAX_BLOCK;
    }
    int64_t nb = (n + bs - 1) / bs;
    size_t scratch_size = no_scratch ? 0 : (size_t)pl->n_slots * (size_t)bs;
    int fail = 0;
#pragma omp parallel if (parallel)
    {
        /* a block of scratch per constant and computed node; variables point into the inputs */
        float stack[STACK_SCRATCH] __attribute__((aligned(64)));
        const float *stack_reg[64];
        float *scratch = scratch_size <= STACK_SCRATCH ? stack : malloc(scratch_size * sizeof *scratch);
        const float **reg = ir->n <= 64 ? stack_reg : malloc((size_t)ir->n * sizeof *reg);
        if (!scratch || !reg) {
#pragma omp atomic write
            fail = 1;
        } else {
            int m = (int)(n < bs ? n : bs);  /* the most a block holds */
            for (int i = 0; i < ir->n; i++) {
                int sl = pl->slot[i];
                float *d = sl >= 0 && !no_scratch ? scratch + (size_t)sl * (size_t)bs : NULL, v = (float)ir->nodes[i].value;
                reg[i] = d;
                if (d && ir->nodes[i].op == GLIA_EXPR_CONST) FOR_J d[j] = v;
            }
        }
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < nb; blk++) {
            if (!scratch || !reg) continue;
            int64_t start = blk * bs;
            int m = (int)(n - start < bs ? n - start : bs);
            for (int i = 0; i < ir->n; i++)
                if (ir->nodes[i].op == GLIA_EXPR_VAR) reg[i] = vars[ir->nodes[i].var] + start;
            for (int k = 0; k < pl->n_steps; k++) {
                const struct step *st = &pl->steps[k];
                bool to_out = direct && st == last;
                eval_step(ir, st, reg, to_out ? out + start : (float *)reg[st->node], m, start, site, to_out && accumulate);
            }
            if (direct) continue;
            const float *res = reg[ir->out];
            float *o = out + start;
            if (scale) {
                const float *s = scale + start;
                if (accumulate)
                    FOR_J o[j] += s[j] * res[j];
                else
                    FOR_J o[j] = s[j] * res[j];
            } else if (accumulate) {
                FOR_J o[j] += res[j];
            } else {
                FOR_J o[j] = res[j];
            }
        }
        if (scratch != stack) free(scratch);
        if (reg != stack_reg) free(reg);
    }
    return fail ? -1 : 0;
}

int glia_expr_eval(const struct glia_expr *ir, const float *const *vars, int64_t n, float *out)
{
    return glia_expr_eval_ex(ir, vars, n, NULL, false, NULL, out);
}
