/* backends/cuda/pointwise.c — the CUDA kernels of the elementwise types: relu, leaky_relu, sigmoid, tanh and
 * gelu (the type's expression and its gradient, compiled with NVRTC at prepare: pointwise_jit.c, for f32 and, with
 * precision bf16 or fp16, that type's activations), add (fixed kernels, pointwise_kernels.cu, on f32, f16 or bf16
 * activations) and pointwise (its expression and derivatives, compiled likewise). Not the types (keys, create,
 * shapes, flops, expressions): their own plugins register those. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <glia/types/activation.h>
#include <glia/types/pointwise.h>
#include "cuda_internal.h"
#include "pointwise_jit.h"
#include "pointwise_kernels.h"

static cudaStream_t stream_of(const struct glia_layer *l) { return glia__cuda_of(l->backend)->stream; }

/* ---- operands ---- */

/* What the operands of one elementwise call checked so far have in common. */
struct operands {
    int64_t n;                        /* elements of each */
    enum glia_dtype dt;               /* of each: GLIA_F32 (0), or the call's half type for a kernel that takes it */
    bool any;                         /* one was checked: f is set */
    enum glia_memory_format f;        /* the format of the first */
};

/* t must be of type o->dt on a CUDA device, have o->n elements, be dense (contiguous or channels_last) and
 * share the others' memory format: then elementwise over memory is elementwise over elements.
 * role names it in the error ("input 2", "output"). */
static glia_status check_operand(const struct glia_layer *l, struct operands *o, const struct glia_tensor *t,
                                 const char *role)
{
    const char *type = l->type->name;
    if (t->dtype != o->dt || t->device.type != GLIA_DEVICE_CUDA)
        return glia_error(l->ctx, GLIA_EUNSUPPORTED,
                          "%s [%s]: the %s is %s on %s; the cuda impl takes %s on the GPU here", type, l->name, role,
                          glia_dtype_name(t->dtype),
                          t->device.type == GLIA_DEVICE_CUDA ? "the GPU" : "the host", glia_dtype_name(o->dt));
    if (glia_tensor_numel(t) != o->n)
        return glia_error(l->ctx, GLIA_ESHAPE, "%s [%s]: the %s has %lld elements, expected %lld", type, l->name, role,
                          (long long)glia_tensor_numel(t), (long long)o->n);
    enum glia_memory_format f = glia_tensor_memory_format(t);
    if (f != GLIA_CHANNELS_LAST && !glia_tensor_is_contiguous(t))
        return glia_error(l->ctx, GLIA_EUNSUPPORTED, "%s [%s]: the %s is strided (neither contiguous nor channels_last)",
                          type, l->name, role);
    if (!o->any) {
        o->any = true;
        o->f = f;
    } else if (f != o->f) {
        return glia_error(l->ctx, GLIA_EUNSUPPORTED, "%s [%s]: the %s is %s but the first operand is %s; elementwise "
                          "operands must share one memory format", type, l->name, role, glia_memory_format_name(f),
                          glia_memory_format_name(o->f));
    }
    return GLIA_OK;
}


/* ---- the kernels compiled at prepare: relu, leaky_relu, sigmoid, tanh, gelu and pointwise ---- */

/* l->state of these kernels */
struct jit_state {
    struct glia__pw_kernels k;  /* f32 tensors; borrowed from the process-wide JIT cache */
    struct glia__pw_kernels kh; /* tensors of type half, when it is not GLIA_F32 (likewise) */
    enum glia_dtype half;       /* the half type of the backend's precision (bf16, fp16) when the layer was prepared:
                                   what half activations the core may hand it; else GLIA_F32 */
    struct glia_seed_at seed;   /* pointwise: of the last training forward, for backward's dropout() mask */
};

/* The kernels of spec for l's GPU into its state, for f32 tensors and, with precision bf16 or fp16, for that type's
 * too; what is wrong with the expression names it (text). The debug log says how long they took (NVRTC's compiles,
 * or the process's cache). */
static glia_status jit_prepare(struct glia_layer *l, const struct glia__pw_spec *spec)
{
    if (!l->backend || l->backend->ops->device_type != GLIA_DEVICE_CUDA)
        return glia_error(l->ctx, GLIA_EINVAL, "%s [%s]: kernel 'cuda' runs on a CUDA device only", l->type->name,
                          l->name);
    struct jit_state *js = l->state;
    const struct glia__cuda *c = glia__cuda_of(l->backend);
    js->half = glia__cuda_half_of(l->backend->options.precision);
    struct glia__pw_spec hs = *spec;
    hs.dtype = js->half;
    char err[512];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    glia_status st = glia__pw_jit_get(spec, c->cc_major, c->cc_minor, &js->k, err, sizeof err);
    if (!st && js->half != GLIA_F32) st = glia__pw_jit_get(&hs, c->cc_major, c->cc_minor, &js->kh, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!st)
        glia_log(l->ctx, GLIA_LOG_DEBUG, "%s [%s]: kernels ready in %.1f ms", l->type->name, l->name,
                 1e3 * (double)(t1.tv_sec - t0.tv_sec) + 1e-6 * (double)(t1.tv_nsec - t0.tv_nsec));
    if (st) {
        char text[160];
        if (glia_expr_print(spec->f, text, sizeof text) < 0) strcpy(text + sizeof text - 4, "...");
        glia_error(l->ctx, st, "%s [%s]: '%s' on cuda:%d (sm_%d%d): %s", l->type->name, l->name, text, c->device,
                   c->cc_major, c->cc_minor, err);
    }
    return st;
}

/* the activation's expression and gradient, compiled */
static glia_status act_prepare(struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    struct glia_expr *f, *grad;
    glia_status st = glia_activation_exprs(l, &f, &grad);
    if (st) return st;
    struct glia__pw_spec spec = {.f = f, .df = {grad}, .n_in = 1, .grad = true};
    st = jit_prepare(l, &spec);
    glia_expr_free(f);
    glia_expr_free(grad);
    return st;
}

/* The compiled kernels for a call whose tensors are of t's dtype (f32, or the half type they were prepared for; the
 * operands' check refuses any other), and that type into o. */
static const struct glia__pw_kernels *jit_kernels(const struct jit_state *js, const struct glia_tensor *t,
                                                  struct operands *o)
{
    bool half = js->half != GLIA_F32 && t->dtype == js->half;
    o->dt = half ? js->half : GLIA_F32;
    return half ? &js->kh : &js->k;
}

/* y(n) = f(x(n)) */
static glia_status act_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct jit_state *js = l->state;
    const void *x[GLIA_EXPR_MAX_VARS] = {a->in[0]->data};
    struct operands o = {.n = glia_tensor_numel(a->out)};
    const struct glia__pw_kernels *k = jit_kernels(js, a->out, &o);
    glia_status st = check_operand(l, &o, a->in[0], "input");
    if (!st) st = check_operand(l, &o, a->out, "output");
    if (st) return st;
    CUDA_TRY(l->ctx, glia__pw_jit_forward(k, a->out->data, x, o.n, NULL, stream_of(l)));
fail:
    return st;
}

/* dx(n) (+)= grad(s(n), dy(n)), s the output or the input as the kernel's flags say (glia_activation_exprs) */
static glia_status act_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    if (!a->din[0]) return GLIA_OK;
    const struct jit_state *js = l->state;
    const struct glia_tensor *saved = l->kernel->flags & GLIA_KERNEL_BWD_NO_INPUT ? a->out : a->in[0];
    struct operands o = {.n = glia_tensor_numel(a->dout)};
    const struct glia__pw_kernels *k = jit_kernels(js, a->dout, &o);
    glia_status st = check_operand(l, &o, a->dout, "output gradient");
    if (!st) st = check_operand(l, &o, saved, saved == a->out ? "output" : "input");
    if (!st) st = check_operand(l, &o, a->din[0], "input gradient");
    if (st) return st;
    const void *x[GLIA_EXPR_MAX_VARS] = {saved->data};
    void *d[GLIA_EXPR_MAX_VARS] = {a->din[0]->data};
    bool acc[GLIA_EXPR_MAX_VARS] = {a->din_accumulate[0]};
    CUDA_TRY(l->ctx, glia__pw_jit_backward(k, d, acc, a->dout->data, x, o.n, NULL, stream_of(l)));
fail:
    return st;
}

/* Backward reads what the type's gradient is a function of, as the CPU kernels do: the output for relu,
 * sigmoid, tanh; the input for leaky_relu (its sign) and gelu. */
#define ACT_KERNEL(name, flags_)                                                                   \
    static const struct glia_kernel name##_kernel = {                                              \
        .struct_size = sizeof(struct glia_kernel),                                                 \
        .type = #name,                                                                             \
        .impl = "cuda",                                                                            \
        .doc = "its expression, compiled with NVRTC",                                              \
        .device_type = GLIA_DEVICE_CUDA,                                                           \
        .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_CAPTURABLE | GLIA_KERNEL_HALF | GLIA_KERNEL_DECODE |     \
                 (flags_),                                                                         \
        .state_size = sizeof(struct jit_state),                                                    \
        .prepare = act_prepare,                                                                    \
        .forward = act_forward,                                                                    \
        .backward = act_backward,                                                                  \
    };
ACT_KERNEL(relu, GLIA_KERNEL_BWD_NO_INPUT)
ACT_KERNEL(leaky_relu, GLIA_KERNEL_BWD_NO_OUTPUT)
ACT_KERNEL(sigmoid, GLIA_KERNEL_BWD_NO_INPUT)
ACT_KERNEL(tanh, GLIA_KERNEL_BWD_NO_INPUT)
ACT_KERNEL(gelu, GLIA_KERNEL_BWD_NO_OUTPUT)
#undef ACT_KERNEL

/* ---- add ---- */

#define ADD_STACK 16   /* inputs handled without a heap array */

/* A type add takes: f32, f16 or bf16 (the call's, read from the output or its gradient). */
static enum glia_dtype add_dtype(const struct glia_tensor *t)
{
    return t->dtype == GLIA_F16 || t->dtype == GLIA_BF16 ? t->dtype : GLIA_F32;
}

/* y(n) = x_0(n) + x_1(n) + ... (left to right, as the CPU; in f32 for f16 and bf16 values) */
static glia_status add_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const void *stack[ADD_STACK], **x = stack;
    struct operands o = {.n = glia_tensor_numel(a->out), .dt = add_dtype(a->out)};
    glia_status st = check_operand(l, &o, a->out, "output");
    char role[32];
    for (int k = 0; k < a->n_in && !st; k++) {
        snprintf(role, sizeof role, "input %d", k + 1);
        st = check_operand(l, &o, a->in[k], role);
    }
    if (st) return st;
    if (a->n_in > ADD_STACK && !(x = malloc((size_t)a->n_in * sizeof *x)))
        return glia_error(l->ctx, GLIA_ENOMEM, "add [%s]: out of memory", l->name);
    for (int k = 0; k < a->n_in; k++) x[k] = a->in[k]->data;
    CUDA_TRY(l->ctx, glia__cuda_add_forward(a->out->data, x, o.dt, a->n_in, o.n, stream_of(l)));
fail:
    if (x != stack) free(x);
    return st;
}

/* dx_k(n) (+)= dy(n) for every input k with a gradient */
static glia_status add_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    void *stack[ADD_STACK], **dx = stack;
    bool stack_acc[ADD_STACK], *acc = stack_acc;
    struct operands o = {.n = glia_tensor_numel(a->dout), .dt = add_dtype(a->dout)};
    glia_status st = check_operand(l, &o, a->dout, "output gradient");
    char role[40];
    for (int k = 0; k < a->n_in && !st; k++) {
        if (!a->din[k]) continue;
        snprintf(role, sizeof role, "gradient of input %d", k + 1);
        st = check_operand(l, &o, a->din[k], role);
    }
    if (st) return st;
    if (a->n_in > ADD_STACK) {
        dx = malloc((size_t)a->n_in * sizeof *dx);
        acc = malloc((size_t)a->n_in * sizeof *acc);
        if (!dx || !acc) {
            st = glia_error(l->ctx, GLIA_ENOMEM, "add [%s]: out of memory", l->name);
            goto fail;
        }
    }
    for (int k = 0; k < a->n_in; k++) {
        dx[k] = a->din[k] ? a->din[k]->data : NULL;
        acc[k] = a->din[k] && a->din_accumulate[k];
    }
    CUDA_TRY(l->ctx, glia__cuda_add_backward(dx, acc, o.dt, a->n_in, a->dout->data, o.n, stream_of(l)));
fail:
    if (dx != stack) free(dx);
    if (acc != stack_acc) free(acc);
    return st;
}

static const struct glia_kernel add_kernel = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "add",
    .impl = "cuda",
    .doc = "up to 8 inputs a launch",
    .device_type = GLIA_DEVICE_CUDA,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_INPUT | GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_CAPTURABLE |
             GLIA_KERNEL_HALF | GLIA_KERNEL_DECODE, /* any format; f32, f16 or bf16 */
    .forward = add_forward,
    .backward = add_backward,
};

/* ---- pointwise ---- */

/* the expression and its derivatives (the type parsed them), compiled for this GPU */
static glia_status pw_prepare(struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    const struct glia_pointwise_attrs *p = l->attrs;
    struct glia__pw_spec spec = {.f = p->f, .n_in = p->n_in, .grad = false};
    for (int k = 0; k < GLIA_EXPR_MAX_VARS; k++) spec.df[k] = p->df[k];
    return jit_prepare(l, &spec);
}

/* y(n) = f(x_1(n), ..., x_k(n)); dropout() draws its mask from the step's seed */
static glia_status pw_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    struct jit_state *js = l->state;
    const void *x[GLIA_EXPR_MAX_VARS] = {0};
    struct operands o = {.n = glia_tensor_numel(a->out)};
    const struct glia__pw_kernels *kern = jit_kernels(js, a->out, &o);
    glia_status st = check_operand(l, &o, a->out, "output");
    char role[32];
    for (int k = 0; k < a->n_in && k < GLIA_EXPR_MAX_VARS && !st; k++) {
        snprintf(role, sizeof role, "input %d", k + 1);
        st = check_operand(l, &o, a->in[k], role);
        x[k] = a->in[k]->data;
    }
    if (st) return st;
    struct glia_seed_at seed = glia_seed_of(a);
    if (a->train) js->seed = seed;
    struct glia_expr_site site = glia_pointwise_site(a->out, seed, a->train);
    CUDA_TRY(l->ctx, glia__pw_jit_forward(kern, a->out->data, x, o.n, &site, stream_of(l)));
fail:
    return st;
}

/* dx_k(n) (+)= dy(n) * df/dx_k(x_1(n), ..., x_k(n)), all k in one pass, with the last training
 * forward's mask */
static glia_status pw_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct jit_state *js = l->state;
    const void *x[GLIA_EXPR_MAX_VARS] = {0};
    void *d[GLIA_EXPR_MAX_VARS] = {0};
    bool acc[GLIA_EXPR_MAX_VARS] = {0};
    struct operands o = {.n = glia_tensor_numel(a->dout)};
    const struct glia__pw_kernels *kern = jit_kernels(js, a->dout, &o);
    glia_status st = check_operand(l, &o, a->dout, "output gradient");
    char role[40];
    for (int k = 0; k < a->n_in && k < GLIA_EXPR_MAX_VARS && !st; k++) {
        snprintf(role, sizeof role, "input %d", k + 1);
        st = check_operand(l, &o, a->in[k], role);
        x[k] = a->in[k]->data;
        if (st || !a->din[k]) continue;
        snprintf(role, sizeof role, "gradient of input %d", k + 1);
        st = check_operand(l, &o, a->din[k], role);
        d[k] = a->din[k]->data;
        acc[k] = a->din_accumulate[k];
    }
    if (st) return st;
    struct glia_expr_site site = glia_pointwise_site(a->dout, js->seed, true);
    CUDA_TRY(l->ctx, glia__pw_jit_backward(kern, d, acc, a->dout->data, x, o.n, &site, stream_of(l)));
fail:
    return st;
}

static const struct glia_kernel pointwise_kernel = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "pointwise",
    .impl = "cuda",
    .doc = "its expression, compiled with NVRTC",
    .device_type = GLIA_DEVICE_CUDA,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_CAPTURABLE |
             GLIA_KERNEL_HALF | GLIA_KERNEL_DECODE, /* any memory format; backward reads the inputs */
    .state_size = sizeof(struct jit_state),
    .prepare = pw_prepare,
    .forward = pw_forward,
    .backward = pw_backward,
};

glia_status glia__cuda_register_pointwise(struct glia_registry *r)
{
    const struct glia_kernel *all[] = {&relu_kernel, &leaky_relu_kernel, &sigmoid_kernel, &tanh_kernel,
                                       &gelu_kernel, &add_kernel,        &pointwise_kernel};
    glia_status st = GLIA_OK;
    for (size_t i = 0; i < sizeof all / sizeof all[0] && !st; i++) st = glia_register_kernel(r, all[i]);
    return st;
}
