/* plugins/layers/pointwise/expr.h — the IR of an elementwise expression: a parser into an SSA
 * node list (hash-consed, constant-folded, canonical), printing, hashing, an interpreter over
 * float arrays and symbolic differentiation. Not a layer (pointwise.c is) and not a code
 * generator: a future JIT (CUDA/NVRTC) fuser compiles this same node list.
 *
 * The IR
 * ------
 * `nodes[0 .. n-1]` is a list in SSA form: node i computes one value per element from nodes
 * with smaller indices (operands a, b, c; -1 when unused), so a single pass in index order
 * evaluates it. `out` is the node that is the result. Identical nodes (op, operands, constant,
 * variable) exist once (common subexpressions are shared), operations on constants are folded,
 * and operands of commutative operations (+ * max min) are in a canonical order, so equal
 * expressions however spelled ("x*sigmoid(x)", "sigmoid(x) * x") give the same node list, the
 * same expr_print text and the same expr_hash. After construction only the nodes that the
 * result needs remain, numbered by a post-order walk from `out` (operands before users).
 *
 * Value semantics (what an evaluator, and a code generator, must do per element):
 *   CONST value; VAR input `var` (0..3: x y z w); NEG -a; ADD a+b; SUB a-b; MUL a*b; DIV a/b;
 *   POW pow(a, b); EXP LOG SQRT TANH ERF ABS as in C; SIGMOID 1/(1+exp(-a)), computed so that
 *   exp cannot overflow; SIGN (a>0)-(a<0); MAX a>=b ? a : b and MIN a<=b ? a : b, except that
 *   a NaN on either side gives NaN (so that operand order does not matter);
 *   GE a>=b ? 1 : 0; GT a>b ? 1 : 0 (0 when either is NaN); SELECT a != 0 ? b : c (the only
 *   three-operand node); RELU a < 0 ? 0 : a, torch.relu (NaN gives NaN, -0 gives -0), whose
 *   derivative is select(ge(0, a), 0, da): the gradient passes where a > 0 or a is NaN, as
 *   torch's threshold_backward, and not at +-0.
 *   DROPOUT (text `dropout(a, p)`, p a number in [0, 1) kept in `value`): the dropout layer's
 *   inverted dropout of a, with its mask: in training, keep ? a * s : 0, where s = 1/(1-p) and
 *   keep = glia__dropout_uniform(seed, j) >= p, both in float, j the element's logical NCHW index
 *   (struct expr_site); a where no site is given or it is not training (eval), and in the double
 *   interpreters (expr_eval1). Never constant-folded except dropout(0, p) = 0 and dropout(a, 0)
 *   = a. Its derivative is dropout(da, p): the same mask. An expression holds at most one
 *   DROPOUT node apart from those its derivatives build from it, so a layer draws one mask.
 */
#ifndef GLIA_POINTWISE_EXPR_H
#define GLIA_POINTWISE_EXPR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EXPR_MAX_VARS 4   /* x y z w */
#define EXPR_BLOCK 256    /* elements per interpreter block */

enum expr_op {
    EXPR_CONST = 0, EXPR_VAR,
    EXPR_NEG, EXPR_ADD, EXPR_SUB, EXPR_MUL, EXPR_DIV, EXPR_POW,
    EXPR_EXP, EXPR_LOG, EXPR_SQRT, EXPR_TANH, EXPR_SIGMOID, EXPR_ERF, EXPR_ABS, EXPR_SIGN,
    EXPR_MAX, EXPR_MIN, EXPR_GE, EXPR_SELECT, EXPR_GT, EXPR_DROPOUT, EXPR_RELU,
    EXPR_N_OPS
};

struct expr_node {
    enum expr_op op;
    int a, b, c;      /* operand node indices, each < this node's index; -1 when unused */
    double value;     /* EXPR_CONST: the constant; EXPR_DROPOUT: p */
    int var;          /* EXPR_VAR: 0..EXPR_MAX_VARS-1; -1 otherwise */
};

struct expr {
    int n;                     /* nodes */
    struct expr_node *nodes;
    int out;                   /* the result node (n - 1 once built) */
    unsigned vars_used;        /* bit k: variable k appears */
    /* construction state (hash-consing table), owned */
    int cap;
    int *table;
    int table_cap;
};

/* Parses text into *out (free with expr_free). Variables x, y, z, w are inputs 0..3; using one
 * at or beyond n_inputs is an error. On error returns -1, *out = NULL and writes a one-line
 * message starting "expr: " to err (e.g. "expr: unexpected ')' at column 7"). Text nested deeper
 * than 200 (parentheses, calls, signs, exponents), an IR deeper than 1000 operations (a long
 * chain such as x/y/y/.../y) and numbers beyond the range of a double are refused. */
int expr_parse(const char *text, int n_inputs, struct expr **out, char *err, size_t err_size);

void expr_free(struct expr *ir);

/* The derivative of ir with respect to variable var, a new IR (NULL when out of memory). */
struct expr *expr_diff(const struct expr *ir, int var);

/* Canonical text of the result ("sigmoid(x) * x"); the text of a parsed expression parses back
 * to the same IR (a derivative's may hold two dropout() nodes, which the parser refuses).
 * Returns its length, or -1 when it did not fit (buf then holds a NUL-terminated prefix). */
int expr_print(const struct expr *ir, char *buf, size_t size);

/* One line per node ("%2 = mul %1 %0"), for debugging. Same return as expr_print. */
int expr_print_ssa(const struct expr *ir, char *buf, size_t size);

/* 64-bit hash of the canonical IR: equal IRs hash equal. */
uint64_t expr_hash(const struct expr *ir);

/* a and b are the same function (the same canonical node list). */
bool expr_same(const struct expr *a, const struct expr *b);

/* Nodes that compute (not variables, not constants): the cost per element. */
int expr_op_count(const struct expr *ir);

/* Number of nodes with this op. */
int expr_count_op(const struct expr *ir, enum expr_op op);

/* The result for one point in double precision; vars holds EXPR_MAX_VARS values (unused ones
 * are ignored). NaN when out of memory. */
double expr_eval1(const struct expr *ir, const double *vars);

/* Like expr_eval1, but writes every node's value: regs has room for ir->n. */
void expr_eval1_nodes(const struct expr *ir, const double *vars, double *regs);

/* Elementwise over float arrays: out[i] = f(vars[0][i], vars[1][i], ...) for i < n. vars needs
 * an array for each variable the IR uses. Evaluated in blocks of EXPR_BLOCK elements, node by
 * node, with OpenMP over blocks; dropout() as in eval. Returns 0, or -1 when out of memory. */
int expr_eval(const struct expr *ir, const float *const *vars, int64_t n, float *out);

/* Where dropout() draws its mask: the layer's seed of this training step, and how an element's
 * offset in memory maps to its logical NCHW index (the mask's counter). */
struct expr_site {
    uint64_t seed;
    bool train;        /* false: dropout() is the identity (eval) */
    int64_t C, HW;     /* C > 0: channels_last (N,H,W,C) memory of C channels and H*W pixels;
                          C == 0: the offset is the index */
    uint64_t key;            /* step_at set (a forward captured into a CUDA graph): the seed is */
    const int64_t *step_at;  /* glia_seed(key, *step_at), read on the device by generated kernels
                                (the interpreter runs on the host: it needs step_at NULL) */
};

/* Like expr_eval, but out[i] = scale[i] * f(...) (scale may be NULL: 1), and when accumulate
 * is true out[i] += that instead. out is only read when accumulating. site (NULL: eval) places
 * the elements for dropout(). */
int expr_eval_ex(const struct expr *ir, const float *const *vars, int64_t n, const float *scale,
                 bool accumulate, const struct expr_site *site, float *out);

#ifdef __cplusplus
}
#endif
#endif
