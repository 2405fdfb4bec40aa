/* gradcheck.c — make check of these plugins: glia's gradient checker (glia_layer_gradcheck) on the softsign
 * layer just built, with each of its kernels (cpu from softsign.so, omp from softsign_omp.so), for a few input
 * shapes. Not a test of glia itself. */
#include <stdio.h>
#include <glia/glia.h>

int main(void)
{
    struct glia_context *ctx;
    if (glia_context_new(&ctx)) return 99; /* 99: the check could not run */
    /* The plugin first, on its own: a refusal (ABI, name, a missing symbol) gets its own message. */
    glia_status st = glia_plugin_load(ctx, "softsign");
    if (!st) st = glia_plugin_load(ctx, "softsign_omp");
    if (st) {
        fprintf(stderr, "gradcheck: %s\n", glia_context_error(ctx));
        glia_context_free(ctx);
        return 1;
    }
    static const struct glia_shape shapes[] = {
        {2, {4, 7}},       /* (N, features) */
        {4, {2, 3, 5, 4}}, /* (N, C, H, W) */
    };
    static const char *const layers[] = {"[l]\ntype = softsign\n", "[l]\ntype = softsign\nimpl = omp\n"};
    int failed = 0;
    for (int k = 0; k < 4; k++) {
        int i = k % 2;
        const char *ini = layers[k / 2];
        struct glia_gradcheck_report r;
        /* every input gradient against central finite differences, and the gradient contract
         * (= when not accumulating, even over NaN garbage; += when asked) */
        st = glia_layer_gradcheck(ctx, ini, &shapes[i], 1, (uint64_t)i + 1, 1e-2, &r);
        if (st || r.n_checked == 0) {
            fprintf(stderr, "gradcheck: kernel %s, shape %d: %s\n", k < 2 ? "cpu" : "omp", i,
                    st ? glia_context_error(ctx) : "nothing was compared");
            failed = 1;
        } else {
            printf("softsign (kernel %s), shape %d: %d gradient elements agree (worst %.2g at %s)\n", k < 2 ? "cpu" : "omp",
                   i, r.n_checked, r.max_err, r.worst);
        }
    }
    glia_context_free(ctx);
    return failed;
}
