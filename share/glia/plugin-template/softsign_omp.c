/* softsign_omp.c — a second out-of-tree plugin that adds a kernel to a type it does not own: softsign's forward and
 * backward over OpenMP threads, `impl = omp`. Not a type: layer type softsign is softsign.so's; a model names this
 * plugin in [plugins] load = softsign_omp and picks the kernel with impl = omp. */
#include <math.h>
#include <glia/glia.h>

static glia_status omp_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    int64_t n = glia_tensor_numel(a->out);
    if (!x || !y) return glia_error(l->ctx, GLIA_EINVAL, "[%s] softsign (omp): expects host f32 tensors", l->name);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + fabsf(x[i]));
    return GLIA_OK;
}

static glia_status omp_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    if (!a->din[0]) return GLIA_OK;
    const float *x = glia_tensor_f32(a->in[0]), *dy = glia_tensor_f32(a->dout);
    float *dx = glia_tensor_f32(a->din[0]);
    int64_t n = glia_tensor_numel(a->in[0]);
    if (!x || !dy || !dx) return glia_error(l->ctx, GLIA_EINVAL, "[%s] softsign (omp): expects host f32 tensors", l->name);
    bool acc = a->din_accumulate[0];
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float d = 1.0f + fabsf(x[i]), g = dy[i] / (d * d);
        dx[i] = acc ? dx[i] + g : g;
    }
    return GLIA_OK;
}

static const struct glia_kernel softsign_omp = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "softsign",  /* registered by softsign.so; glia pairs them by name */
    .impl = "omp",
    .doc = "OpenMP threads",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_BWD_NO_OUTPUT,
    .forward = omp_forward,
    .backward = omp_backward,
};

static glia_status softsign_omp_init(struct glia_registry *r) { return glia_register_kernel(r, &softsign_omp); }

GLIA_PLUGIN_DEFINE(softsign_omp, "1.0", "MIT", "softsign on OpenMP threads (a kernel for softsign.so's type)",
                   softsign_omp_init)
