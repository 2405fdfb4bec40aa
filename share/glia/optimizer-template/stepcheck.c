/* stepcheck.c — make check of this plugin: three steps of the lion optimizer just built, with
 * weight decay on some elements, against the formula computed here in double. Not a test of glia. */
#include <math.h>
#include <stdio.h>
#include <glia/glia.h>

#define N 6

int main(void)
{
    struct glia_context *ctx;
    if (glia_context_new(&ctx)) return 99; /* 99: the check could not run */
    /* The plugin first, on its own: a refusal (ABI, name, a missing symbol) gets its own message. */
    struct glia_optimizer *o = NULL;
    glia_status st = glia_plugin_load(ctx, "lion");
    if (!st) st = glia_optimizer_new(ctx, "lion", "[optimizer]\nbeta1 = 0.8\nbeta2 = 0.9\nweight_decay = 0.5\n", &o);
    if (st) {
        fprintf(stderr, "stepcheck: %s\n", glia_context_error(ctx));
        glia_context_free(ctx);
        return 1;
    }
    const double b1 = 0.8, b2 = 0.9, wd = 0.5, lr = 0.01;
    float w[N] = {0.5f, -1.0f, 2.0f, 0.0f, -0.25f, 1.5f}, m[N] = {0}, mask[N] = {1, 1, 0, 1, 0, 1};
    double rw[N], rm[N] = {0};
    for (int i = 0; i < N; i++) rw[i] = w[i];
    int bad = 0;
    for (int t = 1; t <= 3; t++) {
        float g[N];
        for (int i = 0; i < N; i++) g[i] = (float)((i % 3) - 1) * (float)t * 0.5f + (i == 4 ? 0.1f * t : 0.0f);
        float *state[1] = {m};
        struct glia_opt_step s = {w, g, state, N, mask, lr, t, NULL, NULL, NULL, 0, NULL, NULL};
        if ((st = o->kernel->step(o, &s))) {
            fprintf(stderr, "stepcheck: step %d: %s\n", t, glia_context_error(ctx));
            bad = 1;
            break;
        }
        for (int i = 0; i < N; i++) {
            double c = b1 * rm[i] + (1 - b1) * g[i], sign = c > 0 ? 1 : c < 0 ? -1 : 0;
            rw[i] -= lr * (sign + mask[i] * wd * rw[i]);
            rm[i] = b2 * rm[i] + (1 - b2) * g[i];
            if (fabs(w[i] - rw[i]) > 1e-6 * (1 + fabs(rw[i])) || fabs(m[i] - rm[i]) > 1e-6 * (1 + fabs(rm[i]))) {
                fprintf(stderr, "stepcheck: step %d, element %d: w %.9g m %.9g, the formula gives w %.9g m %.9g\n", t, i,
                        w[i], m[i], rw[i], rm[i]);
                bad = 1;
            }
        }
    }
    if (!bad) printf("lion: %d elements over 3 steps agree with the formula\n", N);
    glia_optimizer_free(o);
    glia_context_free(ctx);
    return bad;
}
