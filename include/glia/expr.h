/* glia/expr.h — elementwise expressions: the language of the pointwise layer type and of the layer
 * types' `pointwise` slot (glia/layer.h), parsed into an SSA node list (hash-consed, constant-folded,
 * canonical), printed, hashed, evaluated over float arrays on the host and differentiated symbolically.
 * Not a layer (plugins/layers/pointwise is) and not a code generator (cuda.so compiles this node list).
 *
 * The IR
 * ------
 * `nodes[0 .. n-1]` is a list in SSA form: node i computes one value per element from nodes
 * with smaller indices (operands a, b, c; -1 when unused), so a single pass in index order
 * evaluates it. `out` is the node that is the result. Identical nodes (op, operands, constant,
 * variable) exist once (common subexpressions are shared), operations on constants are folded,
 * and operands of commutative operations (+ * max min) are in a canonical order, so equal
 * expressions however spelled ("x*sigmoid(x)", "sigmoid(x) * x") give the same node list, the
 * same glia_expr_print text and the same glia_expr_hash. After construction only the nodes that the
 * result needs remain, numbered by a post-order walk from `out` (operands before users).
 *
 * Value semantics (what an evaluator, and a code generator, must do per element):
 *   CONST value; VAR input `var` (0..3: x y z w); NEG -a; ADD a+b; SUB a-b; MUL a*b; DIV a/b;
 *   POW pow(a, b); EXP LOG SQRT TANH ERF ABS as in C; SIGMOID 1/(1+exp(-a)), computed so that
 *   exp cannot overflow; SIGN (a>0)-(a<0); MAX a>=b ? a : b and MIN a<=b ? a : b, except that
 *   a NaN on either side gives NaN (so that operand order does not matter);
 *   GE a>=b ? 1 : 0; GT a>b ? 1 : 0 (0 when either is NaN); SELECT a != 0 ? b : c (the only
 *   three-operand node); RELU a < 0 ? 0 : a, torch.relu (NaN gives NaN, -0 gives -0), whose
 *   derivative is select(ge(0, relu(a)), 0, da), read from its own value as torch's threshold_backward
 *   reads the output: the gradient passes where a > 0 or a is NaN, and not at +-0.
 *   DROPOUT (text `dropout(a, p)`, p a number in [0, 1) kept in `value`): the dropout layer's
 *   inverted dropout of a, with its mask: in training, keep ? a * s : 0, where s = 1/(1-p) and
 *   keep = glia_dropout_uniform(seed, j) >= p (glia/types/dropout.h), both in float, j the element's
 *   logical NCHW index (struct glia_expr_site); a where no site is given or it is not training (eval),
 *   and in the double interpreters (glia_expr_eval1). Never constant-folded except dropout(0, p) = 0
 *   and dropout(a, 0) = a. Its derivative is dropout(da, p): the same mask. An expression holds at
 *   most one DROPOUT node apart from those its derivatives build from it, so a layer draws one mask.
 */
#ifndef GLIA_EXPR_H
#define GLIA_EXPR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GLIA_EXPR_MAX_VARS 4   /* x y z w */
#define GLIA_EXPR_BLOCK 256    /* elements per interpreter block */

enum glia_expr_op {
    GLIA_EXPR_CONST = 0, GLIA_EXPR_VAR,
    GLIA_EXPR_NEG, GLIA_EXPR_ADD, GLIA_EXPR_SUB, GLIA_EXPR_MUL, GLIA_EXPR_DIV, GLIA_EXPR_POW,
    GLIA_EXPR_EXP, GLIA_EXPR_LOG, GLIA_EXPR_SQRT, GLIA_EXPR_TANH, GLIA_EXPR_SIGMOID, GLIA_EXPR_ERF, GLIA_EXPR_ABS, GLIA_EXPR_SIGN,
    GLIA_EXPR_MAX, GLIA_EXPR_MIN, GLIA_EXPR_GE, GLIA_EXPR_SELECT, GLIA_EXPR_GT, GLIA_EXPR_DROPOUT, GLIA_EXPR_RELU,
    GLIA_EXPR_N_OPS
};

struct glia_expr_node {
    enum glia_expr_op op;
    int a, b, c;      /* operand node indices, each < this node's index; -1 when unused */
    double value;     /* GLIA_EXPR_CONST: the constant; GLIA_EXPR_DROPOUT: p */
    int var;          /* GLIA_EXPR_VAR: 0..GLIA_EXPR_MAX_VARS-1; -1 otherwise */
};

/* An expression. Only glia makes one (glia_expr_parse, _diff, _grad, _over_result) and frees it
 * (glia_expr_free): read n, nodes, out and vars_used; the fields after them are glia's. */
struct glia_expr {
    int n;                           /* nodes */
    struct glia_expr_node *nodes;    /* (owned) */
    int out;                         /* the result node (n - 1 once built) */
    unsigned vars_used;              /* bit k: variable k appears */
    /* construction state (hash-consing table), owned */
    int cap;
    int *table;
    int table_cap;
    struct glia__expr_plan *plan;    /* how glia_expr_eval_ex computes it (owned) */
};

/* Parses text into *out (free with glia_expr_free). Variables x, y, z, w are inputs 0..3; using one
 * at or beyond n_inputs is an error. On error returns -1, *out = NULL and writes a one-line
 * message starting "expr: " to err (e.g. "expr: unexpected ')' at column 7"). Text nested deeper
 * than 200 (parentheses, calls, signs, exponents), an IR deeper than 1000 operations (a long
 * chain such as x/y/y/.../y) and numbers beyond the range of a double are refused. */
int glia_expr_parse(const char *text, int n_inputs, struct glia_expr **out, char *err, size_t err_size);

void glia_expr_free(struct glia_expr *ir);

/* The derivative of ir with respect to variable var, a new IR (NULL when out of memory). */
struct glia_expr *glia_expr_diff(const struct glia_expr *ir, int var);

/* The gradient of ir with respect to variable var carried back from the gradient of its result,
 * variable dy_var (one that ir does not use): dy * d ir / d var, a new IR (NULL when out of memory).
 * Unlike dy * glia_expr_diff(ir, var), when the derivative is a select (relu's is), dy goes into both
 * branches (and so on into selects there): where a branch's derivative is 0 the gradient is 0 whatever
 * dy is, inf and NaN included, as torch's threshold_backward gives for relu. A select under another
 * operation is multiplied as it is. */
struct glia_expr *glia_expr_grad(const struct glia_expr *ir, int var, int dy_var);

/* g rewritten to read the value of f (a function of some of g's variables) as variable var instead
 * of computing it: each part of g that is f becomes that variable. Returns 0 and *out (free it with
 * glia_expr_free) when the rest reads none of f's variables: the gradient of sigmoid(x), (1 - s) * s * dy
 * with s = sigmoid(x), becomes (1 - x) * x * y read over x = the output; 1 and *out = NULL when it
 * still does (leaky_relu's needs the input's sign, which a slope of 0 hides in the output); -1 and
 * *out = NULL when out of memory. var may be one of f's variables. */
int glia_expr_over_result(const struct glia_expr *g, const struct glia_expr *f, int var, struct glia_expr **out);

/* Canonical text of the result ("sigmoid(x) * x"); the text of a parsed expression parses back
 * to the same IR (a derivative's may hold two dropout() nodes, which the parser refuses).
 * Returns its length, or -1 when it did not fit (buf then holds a NUL-terminated prefix). */
int glia_expr_print(const struct glia_expr *ir, char *buf, size_t size);

/* One line per node ("%2 = mul %1 %0"), for debugging. Same return as glia_expr_print. */
int glia_expr_print_ssa(const struct glia_expr *ir, char *buf, size_t size);

/* 64-bit hash of the canonical IR: equal IRs hash equal. */
uint64_t glia_expr_hash(const struct glia_expr *ir);

/* a and b are the same function (the same canonical node list). */
bool glia_expr_same(const struct glia_expr *a, const struct glia_expr *b);

/* Nodes that compute (not variables, not constants): the cost per element. */
int glia_expr_op_count(const struct glia_expr *ir);

/* Number of nodes with this op. */
int glia_expr_count_op(const struct glia_expr *ir, enum glia_expr_op op);

/* The result for one point in double precision; vars holds GLIA_EXPR_MAX_VARS values (unused ones
 * are ignored). NaN when out of memory. */
double glia_expr_eval1(const struct glia_expr *ir, const double *vars);

/* Like glia_expr_eval1, but writes every node's value: regs has room for ir->n. */
void glia_expr_eval1_nodes(const struct glia_expr *ir, const double *vars, double *regs);

/* Elementwise over float arrays: out[i] = f(vars[0][i], vars[1][i], ...) for i < n. vars needs
 * an array for each variable the IR uses. Evaluated in blocks of GLIA_EXPR_BLOCK elements, node by
 * node, with OpenMP over blocks; dropout() as in eval. Returns 0, or -1 when out of memory. */
int glia_expr_eval(const struct glia_expr *ir, const float *const *vars, int64_t n, float *out);

/* Where dropout() draws its mask: the layer's seed of this training step, and how an element's
 * offset in memory maps to its logical NCHW index (the mask's counter). */
struct glia_expr_site {
    uint64_t seed;
    bool train;        /* false: dropout() is the identity (eval) */
    int64_t C, HW;     /* C > 0: channels_last (N,H,W,C) memory of C channels and H*W pixels;
                          C == 0: the offset is the index */
    uint64_t key;            /* step_at set (a forward captured into a CUDA graph): the seed is */
    const int64_t *step_at;  /* glia_seed(key, *step_at), read on the device by generated kernels
                                (the interpreter runs on the host: it needs step_at NULL) */
};

/* Like glia_expr_eval, but out[i] = scale[i] * f(...) (scale may be NULL: 1), and when accumulate
 * is true out[i] += that instead. out is only read when accumulating. site (NULL: eval) places
 * the elements for dropout(). */
int glia_expr_eval_ex(const struct glia_expr *ir, const float *const *vars, int64_t n, const float *scale,
                      bool accumulate, const struct glia_expr_site *site, float *out);

#ifdef __cplusplus
}
#endif
#endif
