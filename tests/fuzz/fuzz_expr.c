/* tests/fuzz/fuzz_expr.c — libFuzzer harness of the pointwise layer's expression parser
 * (plugins/layers/pointwise/expr.c): parse, print, parse the printed text back, differentiate,
 * evaluate. Not a check of the values: those are test_pointwise.c's.
 *
 * Input: a byte choosing the number of inputs (1-4), then the expression text (up to a NUL).
 * Besides memory errors it checks expr.h's promises: a failed parse writes a message starting
 * "expr: ", and the printed text parses back to the same IR (equal hash and node count). */
#include <math.h>
#include "expr.h"
#include "fuzzutil.h"

#define N 300   /* elements: more than one EXPR_BLOCK */

static void eval_all(const struct expr *ir)
{
    static float in[EXPR_MAX_VARS][N], out[N], scale[N];
    const float *vars[EXPR_MAX_VARS];
    for (int v = 0; v < EXPR_MAX_VARS; v++) {
        for (int i = 0; i < N; i++) in[v][i] = (float)((i * (v + 3)) % 41 - 20) * 0.37f;
        vars[v] = in[v];
    }
    for (int i = 0; i < N; i++) scale[i] = 0.5f;
    struct expr_site site = {.seed = 7, .train = true, .C = 3, .HW = 7};  /* dropout() in channels_last order */
    if (expr_eval(ir, vars, N, out) || expr_eval_ex(ir, vars, N, scale, true, &site, out))
        fuzz_die("expr_eval: out of memory", NULL);
    double p[EXPR_MAX_VARS] = {0.5, -2, 0, 1e30};
    (void)expr_eval1(ir, p);
    (void)expr_op_count(ir);
    (void)expr_count_op(ir, EXPR_MUL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int n_inputs = 1 + data[0] % EXPR_MAX_VARS;
    char *text = malloc(size);
    if (!text) fuzz_die("out of memory", NULL);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    struct expr *ir = NULL, *back = NULL;
    char err[256] = "", buf[8192], buf2[8192];
    if (expr_parse(text, n_inputs, &ir, err, sizeof err)) {
        if (ir || strncmp(err, "expr: ", 6)) fuzz_die("a failed parse without its message", err);
        free(text);
        return 0;
    }
    if (expr_print(ir, buf, sizeof buf) >= 0) {
        if (expr_parse(buf, n_inputs, &back, err, sizeof err)) fuzz_die("the printed text does not parse", buf);
        if (expr_hash(back) != expr_hash(ir) || back->n != ir->n) {
            expr_print(back, buf2, sizeof buf2);
            fprintf(stderr, "text: %s\nprinted: %s\nreprinted: %s\n", text, buf, buf2);
            fuzz_die("the printed text parses to another IR", NULL);
        }
        expr_free(back);
    }
    (void)expr_print_ssa(ir, buf, sizeof buf);
    eval_all(ir);
    for (int v = 0; v < n_inputs; v++) {
        struct expr *d = expr_diff(ir, v);
        if (!d) fuzz_die("expr_diff: out of memory", NULL);
        eval_all(d);
        expr_free(d);
    }
    expr_free(ir);
    free(text);
    return 0;
}
