/* core/backend.c — the opened devices of a context and the one function per backend slot through which the core and
 * kernels use them; device names. Not a backend: the CPU backend is backends/cpu, the CUDA one cuda.so. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

glia_status glia_backend_get(struct glia_context *ctx, struct glia_device dev, struct glia_backend **out)
{
    for (int i = 0; i < ctx->n_backends; i++) {
        struct glia_backend *b = ctx->backends[i];
        if (b->device.type == dev.type && b->device.index == dev.index) {
            *out = b;
            return GLIA_OK;
        }
    }
    char name[32];
    glia_device_str(dev, name, sizeof name);
    const struct glia_backend_ops *ops = glia__find_backend(ctx, dev.type);
    if (!ops) return glia_error(ctx, GLIA_EDEVICE, "no backend for device %s is loaded", name);
    if (glia__grow((void **)&ctx->backends, &ctx->cap_backends, ctx->n_backends + 1, sizeof *ctx->backends))
        return GLIA_ENOMEM;
    struct glia_backend *b = calloc(1, sizeof *b);
    if (!b) return GLIA_ENOMEM;
    b->ops = ops;
    b->device = dev;
    b->ctx = ctx;
    b->options = (struct glia_runtime_options){sizeof b->options, GLIA_PRECISION_FP32, true, (size_t)1 << 30, false};
    glia_status s = ops->device->open(ctx, dev.index, &b->priv);
    if (s) {
        free(b);
        return s;
    }
    if ((s = ops->device->configure(b->priv, &b->options))) {  /* the defaults */
        ops->device->close(b->priv);
        free(b);
        return s;
    }
    ctx->backends[ctx->n_backends++] = b;
    *out = b;
    return GLIA_OK;
}

void glia__backends_close(struct glia_context *ctx)
{
    for (int i = 0; i < ctx->n_backends; i++) {
        struct glia_backend *b = ctx->backends[i];
        b->ops->device->close(b->priv);
        free(b);
    }
    free(ctx->backends);
    ctx->backends = NULL;
    ctx->n_backends = ctx->cap_backends = 0;
}

glia_status glia_backend_configure(struct glia_backend *b, const struct glia_runtime_options *o)
{
    glia_status st = b->ops->device->configure(b->priv, o);
    if (st) return st;
    b->options = *o;
    b->options.struct_size = sizeof b->options;
    return GLIA_OK;
}

void *glia_backend_queue(struct glia_backend *b) { return b->ops->device->queue(b->priv); }

glia_status glia_backend_alloc(struct glia_backend *b, size_t nbytes, void **ptr)
{
    return b->ops->memory->alloc(b->priv, nbytes, ptr);
}

void glia_backend_free(struct glia_backend *b, void *ptr) { b->ops->memory->free(b->priv, ptr); }

glia_status glia_backend_host_alloc(struct glia_backend *b, size_t nbytes, void **ptr)
{
    return b->ops->memory->host_alloc(b->priv, nbytes, ptr);
}

void glia_backend_host_free(struct glia_backend *b, void *ptr) { b->ops->memory->host_free(b->priv, ptr); }

glia_status glia_backend_memory_stats(struct glia_backend *b, struct glia_memory_stats *out)
{
    return b->ops->memory->stats(b->priv, out);
}

bool glia__backend_queues(struct glia_backend *b) { return glia_backend_queue(b) != NULL; }

glia_status glia_backend_peak(struct glia_backend *b, struct glia_device_peak *out)
{
    const struct glia_backend_device_ops *d = b->ops->device;
    if (d->struct_size < GLIA__END_OF(struct glia_backend_device_ops, peak) || !d->peak) return GLIA_EUNSUPPORTED;
    struct glia_device_peak p = {.struct_size = sizeof p};
    glia_status st = d->peak(b->priv, &p);
    if (st) return st;
    p.struct_size = out->struct_size;
    memcpy(out, &p, out->struct_size < sizeof p ? out->struct_size : sizeof p);  /* what the caller's struct has */
    return GLIA_OK;
}

glia_status glia_backend_copy(struct glia_backend *b, void *dst, bool dst_host, const void *src, bool src_host,
                              size_t nbytes)
{
    return b->ops->stream->copy(b->priv, dst, dst_host, src, src_host, nbytes);
}

glia_status glia_backend_memzero(struct glia_backend *b, void *ptr, size_t nbytes)
{
    return b->ops->stream->memzero(b->priv, ptr, nbytes);
}

glia_status glia_backend_sync(struct glia_backend *b) { return b->ops->stream->sync(b->priv); }

glia_status glia_backend_upload(struct glia_backend *b, void *dst, const void *src, size_t nbytes, uint64_t *ticket)
{
    return b->ops->stream->upload(b->priv, dst, src, nbytes, ticket);
}

glia_status glia_backend_download(struct glia_backend *b, void *dst, const void *src, size_t nbytes, uint64_t *ticket)
{
    return b->ops->stream->download(b->priv, dst, src, nbytes, ticket);
}

glia_status glia_backend_wait_copy(struct glia_backend *b, uint64_t ticket, bool host)
{
    return b->ops->stream->wait_copy(b->priv, ticket, host);
}

glia_status glia_backend_gemm_f32(struct glia_backend *b, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                  float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                                  float *C, int64_t ldc)
{
    return b->ops->math->gemm_f32(b->priv, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

glia_status glia_backend_transpose_f32(struct glia_backend *b, float *dst, const float *src, int64_t B, int64_t rows,
                                       int64_t cols, float beta)
{
    return b->ops->math->transpose_f32(b->priv, dst, src, B, rows, cols, beta);
}

glia_status glia_backend_axpy_f32(struct glia_backend *b, float *y, const float *x, size_t n, float a)
{
    return b->ops->math->axpy_f32(b->priv, y, x, n, a);
}

glia_status glia_backend_scale_f32(struct glia_backend *b, float *x, size_t n, float a)
{
    return b->ops->math->scale_f32(b->priv, x, n, a);
}

glia_status glia_backend_sumsq_f32(struct glia_backend *b, const float *x, size_t n, double *out)
{
    return b->ops->math->sumsq_f32(b->priv, x, n, out);
}

glia_status glia_backend_clip_f32(struct glia_backend *b, float *x, size_t n, double max_norm)
{
    return b->ops->math->clip_f32(b->priv, x, n, max_norm);
}

/* Whether the math group reaches convert (ABI 2.1) and has it. */
bool glia_backend_can_convert(const struct glia_backend *b)
{
    const struct glia_backend_math_ops *x = b->ops->math;
    return x->struct_size >= GLIA__END_OF(struct glia_backend_math_ops, convert) && x->convert;
}

glia_status glia_backend_convert(struct glia_backend *b, void *dst, enum glia_dtype dst_dtype, const void *src,
                                 enum glia_dtype src_dtype, int64_t B, int64_t rows, int64_t cols, float beta)
{
    if (!glia_backend_can_convert(b))
        return glia_error(b->ctx, GLIA_EUNSUPPORTED, "the %s backend converts no element types (it has no convert slot)",
                          b->ops->name);
    if (!glia__float_dtype(dst_dtype) || !glia__float_dtype(src_dtype) || B < 0 || rows < 0 || cols < 0 || (beta != 0 && beta != 1))
        return glia_error(b->ctx, GLIA_EINVAL, "glia_backend_convert: %s to %s, %lld x %lld x %lld, beta %g",
                          glia_dtype_name(src_dtype), glia_dtype_name(dst_dtype), (long long)B, (long long)rows,
                          (long long)cols, beta);
    return b->ops->math->convert(b->priv, dst, dst_dtype, src, src_dtype, B, rows, cols, beta);
}

bool glia_backend_can_capture(const struct glia_backend *b) { return b->ops->graph != NULL; }

static glia_status no_graphs(struct glia_backend *b)
{
    return glia_error(b->ctx, GLIA_EUNSUPPORTED, "the %s backend cannot capture CUDA graphs", b->ops->name);
}

glia_status glia_backend_capture_begin(struct glia_backend *b)
{
    return b->ops->graph ? b->ops->graph->capture_begin(b->priv) : no_graphs(b);
}

glia_status glia_backend_capture_end(struct glia_backend *b, void **graph)
{
    return b->ops->graph ? b->ops->graph->capture_end(b->priv, graph) : no_graphs(b);
}

glia_status glia_backend_graph_launch(struct glia_backend *b, void *graph)
{
    return b->ops->graph ? b->ops->graph->launch(b->priv, graph) : no_graphs(b);
}

void glia_backend_graph_free(struct glia_backend *b, void *graph)
{
    if (b->ops->graph && graph) b->ops->graph->free(b->priv, graph);
}

glia_status glia_backend_write_u64(struct glia_backend *b, void *dst, uint64_t v)
{
    return b->ops->graph ? b->ops->graph->write_u64(b->priv, dst, v) : no_graphs(b);
}

/* The data group when the backend's ops reach it and it holds batch_u8 (ABI 2.1), else NULL. */
static const struct glia_backend_data_ops *data_ops(const struct glia_backend *b)
{
    const struct glia_backend_data_ops *d = b->ops->struct_size >= GLIA__END_OF(struct glia_backend_ops, data) ? b->ops->data : NULL;
    return d && d->struct_size >= GLIA__END_OF(struct glia_backend_data_ops, batch_u8) && d->batch_u8 ? d : NULL;
}

bool glia_backend_can_batch_u8(const struct glia_backend *b) { return data_ops(b) != NULL; }

glia_status glia_backend_batch_u8(struct glia_backend *b, float *x, int32_t *y, const uint8_t *images,
                                  const int32_t *labels, const int64_t *idx, int64_t n, int channels, int rows,
                                  int cols, const float *table, int pad, bool flip, uint64_t seed, int epoch)
{
    const struct glia_backend_data_ops *d = data_ops(b);
    if (!d)
        return glia_error(b->ctx, GLIA_EUNSUPPORTED, "the %s backend cannot make batches from a resident training set",
                          b->ops->name);
    return d->batch_u8(b->priv, x, y, images, labels, idx, n, channels, rows, cols, table, pad, flip, seed, epoch);
}

glia_status glia_backend_mem_info(struct glia_backend *b, size_t *free_bytes, size_t *total_bytes)
{
    const struct glia_backend_data_ops *d = data_ops(b);
    if (!d || d->struct_size < GLIA__END_OF(struct glia_backend_data_ops, mem_info) || !d->mem_info)
        return GLIA_EUNSUPPORTED;
    return d->mem_info(b->priv, free_bytes, total_bytes);
}

glia_status glia_backend_write(struct glia_backend *b, void *dst, const void *src, size_t n)
{
    const struct glia_backend_graph_ops *g = b->ops->graph;
    if (!g) return no_graphs(b);
    if (n % 8 || n > GLIA_BACKEND_WRITE_MAX)
        return glia_error(b->ctx, GLIA_EINVAL, "glia_backend_write: %zu bytes (a multiple of 8 up to %d)", n,
                          GLIA_BACKEND_WRITE_MAX);
    if (g->struct_size >= GLIA__END_OF(struct glia_backend_graph_ops, write) && g->write) return g->write(b->priv, dst, src, n);
    glia_status st = GLIA_OK;
    for (size_t i = 0; i < n && !st; i += 8) {  /* a backend of ABI 2.0 */
        uint64_t v;
        memcpy(&v, (const char *)src + i, 8);
        st = g->write_u64(b->priv, (char *)dst + i, v);
    }
    return st;
}

bool glia_backend_can_scale(const struct glia_backend *b)
{
    const struct glia_backend_graph_ops *g = b->ops->graph;
    return g && g->struct_size >= GLIA__END_OF(struct glia_backend_graph_ops, select) && g->scaler_step && g->select;
}

static glia_status no_scaler(struct glia_backend *b)
{
    return glia_error(b->ctx, GLIA_EUNSUPPORTED, "the %s backend keeps no loss scaler on the device (no scaler_step)",
                      b->ops->name);
}

glia_status glia_backend_scaler_step(struct glia_backend *b, struct glia_loss_scaler *s, const struct glia_scaler_args *a)
{
    return glia_backend_can_scale(b) ? b->ops->graph->scaler_step(b->priv, s, a) : no_scaler(b);
}

glia_status glia_backend_select(struct glia_backend *b, int64_t *dst, const int64_t *table, const int64_t *key,
                                size_t words)
{
    return glia_backend_can_scale(b) ? b->ops->graph->select(b->priv, dst, table, key, words) : no_scaler(b);
}

const char *glia_precision_name(enum glia_precision p)
{
    switch (p) {
    case GLIA_PRECISION_FP32: return "fp32";
    case GLIA_PRECISION_TF32: return "tf32";
    case GLIA_PRECISION_BF16: return "bf16";
    case GLIA_PRECISION_FP16: return "fp16";
    }
    return "?";
}

glia_status glia_device_parse(const char *s, struct glia_device *out)
{
    if (strcmp(s, "cpu") == 0) {
        *out = (struct glia_device){GLIA_DEVICE_CPU, 0};
        return GLIA_OK;
    }
    if (strncmp(s, "cuda", 4) == 0) {
        int idx = 0;
        if (s[4] == ':') {
            char *end;
            long v = strtol(s + 5, &end, 10);
            if (end == s + 5 || *end || v < 0 || v > 255) return GLIA_EINVAL;
            idx = (int)v;
        } else if (s[4]) {
            return GLIA_EINVAL;
        }
        *out = (struct glia_device){GLIA_DEVICE_CUDA, idx};
        return GLIA_OK;
    }
    return GLIA_EINVAL;
}

char *glia_device_str(struct glia_device d, char *buf, size_t n)
{
    if (d.type == GLIA_DEVICE_CPU) snprintf(buf, n, "cpu");
    else snprintf(buf, n, "cuda:%d", d.index);
    return buf;
}

/* [runtime] nvtx: the backend's trace group, or NULL when it has none (ABI 2.3). */
static const struct glia_backend_trace_ops *trace_ops(const struct glia_backend *b)
{
    const struct glia_backend_trace_ops *t =
        b->ops->struct_size >= GLIA__END_OF(struct glia_backend_ops, trace) ? b->ops->trace : NULL;
    return t && t->struct_size >= GLIA__END_OF(struct glia_backend_trace_ops, range_pop) ? t : NULL;
}

bool glia__backend_can_trace(const struct glia_backend *b) { return trace_ops(b) != NULL; }

void glia__range_push(struct glia_backend *b, const char *fmt, ...)
{
    const struct glia_backend_trace_ops *t = trace_ops(b);
    if (!t) return;
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    t->range_push(b->priv, name);
}

glia_status glia__backend_pass_begin(struct glia_backend *b, const void *params, size_t bytes)
{
    const struct glia_backend_params_ops *p =
        b->ops->struct_size >= GLIA__END_OF(struct glia_backend_ops, params) ? b->ops->params : NULL;
    if (!p || p->struct_size < GLIA__END_OF(struct glia_backend_params_ops, pass_begin) || !params) return GLIA_OK;
    return p->pass_begin(b->priv, params, bytes);
}

void glia__range_pop(struct glia_backend *b)
{
    const struct glia_backend_trace_ops *t = trace_ops(b);
    if (t) t->range_pop(b->priv);
}
