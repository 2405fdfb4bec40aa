/* tests/fuzz/fuzz_expr.c — libFuzzer harness of the expression language (glia/expr.h, core/expr.c):
 * parse, print, parse the printed text back, differentiate, build gradients (also over the result),
 * evaluate. Not a check of the values: those are test_pointwise.c's.
 *
 * Input: a byte choosing the number of inputs (1-4), then the expression text (up to a NUL).
 * Besides memory errors it checks expr.h's promises: a failed parse writes a message starting
 * "expr: ", and the printed text parses back to the same IR (equal hash and node count). */
#include <math.h>
#include <glia/expr.h>
#include "fuzzutil.h"

#define N 300   /* elements: more than one GLIA_EXPR_BLOCK */

static void eval_all(const struct glia_expr *ir)
{
    static float in[GLIA_EXPR_MAX_VARS][N], out[N], scale[N];
    const float *vars[GLIA_EXPR_MAX_VARS];
    for (int v = 0; v < GLIA_EXPR_MAX_VARS; v++) {
        for (int i = 0; i < N; i++) in[v][i] = (float)((i * (v + 3)) % 41 - 20) * 0.37f;
        vars[v] = in[v];
    }
    for (int i = 0; i < N; i++) scale[i] = 0.5f;
    struct glia_expr_site site = {.seed = 7, .train = true, .C = 3, .HW = 7};  /* dropout() in channels_last order */
    if (glia_expr_eval(ir, vars, N, out) || glia_expr_eval_ex(ir, vars, N, scale, true, &site, out))
        fuzz_die("glia_expr_eval: out of memory", NULL);
    double p[GLIA_EXPR_MAX_VARS] = {0.5, -2, 0, 1e30};
    (void)glia_expr_eval1(ir, p);
    (void)glia_expr_op_count(ir);
    (void)glia_expr_count_op(ir, GLIA_EXPR_MUL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int n_inputs = 1 + data[0] % GLIA_EXPR_MAX_VARS;
    char *text = malloc(size);
    if (!text) fuzz_die("out of memory", NULL);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    struct glia_expr *ir = NULL, *back = NULL;
    char err[256] = "", buf[8192], buf2[8192];
    if (glia_expr_parse(text, n_inputs, &ir, err, sizeof err)) {
        if (ir || strncmp(err, "expr: ", 6)) fuzz_die("a failed parse without its message", err);
        free(text);
        return 0;
    }
    if (glia_expr_print(ir, buf, sizeof buf) >= 0) {
        if (glia_expr_parse(buf, n_inputs, &back, err, sizeof err)) fuzz_die("the printed text does not parse", buf);
        if (glia_expr_hash(back) != glia_expr_hash(ir) || back->n != ir->n) {
            glia_expr_print(back, buf2, sizeof buf2);
            fprintf(stderr, "text: %s\nprinted: %s\nreprinted: %s\n", text, buf, buf2);
            fuzz_die("the printed text parses to another IR", NULL);
        }
        glia_expr_free(back);
    }
    (void)glia_expr_print_ssa(ir, buf, sizeof buf);
    eval_all(ir);
    for (int v = 0; v < n_inputs; v++) {
        struct glia_expr *d = glia_expr_diff(ir, v), *g = NULL, *o = NULL;
        if (!d) fuzz_die("glia_expr_diff: out of memory", NULL);
        eval_all(d);
        if (n_inputs < GLIA_EXPR_MAX_VARS) {  /* the gradient of dy, a variable ir does not use, over ir's result */
            if (!(g = glia_expr_grad(ir, v, n_inputs))) fuzz_die("glia_expr_grad: out of memory", NULL);
            eval_all(g);
            int rc = glia_expr_over_result(g, ir, v, &o);
            if (rc < 0 || (rc == 0) != (o != NULL)) fuzz_die("glia_expr_over_result: out of memory or no result", NULL);
            if (o) eval_all(o);
        }
        glia_expr_free(o);
        glia_expr_free(g);
        glia_expr_free(d);
    }
    glia_expr_free(ir);
    free(text);
    return 0;
}
