/* core/tensor.c — tensor objects: shapes, views, refcounted storage from a backend allocator.
 * Not maths: elementwise and GEMM kernels belong to backends and layer plugins. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include <glia/half.h>

struct glia_storage {
    struct glia_backend *backend;  /* (borrowed) allocator owner */
    void *ptr;
    size_t nbytes;
    int refcount;
};

int64_t glia_shape_numel(const struct glia_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->dim[i];
    return n;
}

bool glia_shape_equal(const struct glia_shape *a, const struct glia_shape *b)
{
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dim[i] != b->dim[i]) return false;
    return true;
}

struct glia_shape glia_shape_make(int ndim, const int64_t *dim)
{
    struct glia_shape s = {0};
    GLIA_ASSERT(ndim >= 0 && ndim <= GLIA_MAX_DIMS);
    s.ndim = ndim;
    for (int i = 0; i < ndim; i++) s.dim[i] = dim[i];
    return s;
}

char *glia_shape_str(const struct glia_shape *s, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->ndim && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", i ? "x" : "", (long long)s->dim[i]);
    if (s->ndim == 0) snprintf(buf, n, "scalar");
    return buf;
}

static void set_contiguous(struct glia_tensor *t, const struct glia_shape *shape)
{
    t->shape = *shape;
    int64_t st = 1;
    for (int i = shape->ndim - 1; i >= 0; i--) {
        t->stride[i] = st;
        st *= shape->dim[i];
    }
}

static void set_channels_last(struct glia_tensor *t, const struct glia_shape *shape)
{
    int64_t C = shape->dim[1], H = shape->dim[2], W = shape->dim[3];
    t->shape = *shape;
    t->stride[0] = H * W * C;
    t->stride[1] = 1;
    t->stride[2] = W * C;
    t->stride[3] = C;
}

static bool shape_ok(const struct glia_shape *s)
{
    if (s->ndim < 0 || s->ndim > GLIA_MAX_DIMS) return false;
    for (int i = 0; i < s->ndim; i++)
        if (s->dim[i] < 0) return false;
    return true;
}

glia_status glia_tensor_new(struct glia_backend *b, enum glia_dtype dtype,
                            const struct glia_shape *shape, struct glia_tensor **out)
{
    if (!b || !shape_ok(shape) || !glia_dtype_size(dtype)) return GLIA_EINVAL;
    /* a size that overflows, or more bytes than an allocation can have, is out of memory (not a small buffer) */
    int64_t numel = 1;
    size_t nbytes;
    for (int i = 0; i < shape->ndim; i++)
        if (__builtin_mul_overflow(numel, shape->dim[i], &numel)) return GLIA_ENOMEM;
    if (__builtin_mul_overflow((size_t)numel, glia_dtype_size(dtype), &nbytes) || nbytes > PTRDIFF_MAX)
        return GLIA_ENOMEM;
    struct glia_tensor *t = calloc(1, sizeof *t);
    struct glia_storage *st = calloc(1, sizeof *st);
    if (!t || !st) goto nomem;
    if (glia_backend_alloc(b, nbytes ? nbytes : 1, &st->ptr)) goto nomem;
    st->backend = b;
    st->nbytes = nbytes;
    st->refcount = 1;
    t->dtype = dtype;
    t->device = b->device;
    t->data = st->ptr;
    t->storage = st;
    t->refcount = 1;
    set_contiguous(t, shape);
    *out = t;
    return GLIA_OK;
nomem:
    free(t);
    free(st);
    return GLIA_ENOMEM;
}

glia_status glia_tensor_zeros(struct glia_backend *b, enum glia_dtype dtype,
                              const struct glia_shape *shape, struct glia_tensor **out)
{
    glia_status s = glia_tensor_new(b, dtype, shape, out);
    if (s) return s;
    s = glia_tensor_fill_zero(*out);
    if (s) {
        glia_tensor_release(*out);
        *out = NULL;
    }
    return s;
}

glia_status glia_tensor_view(struct glia_tensor *t, int64_t offset, const struct glia_shape *shape,
                             struct glia_tensor **out)
{
    return glia_tensor_view_as(t, offset, shape, GLIA_CONTIGUOUS, out);
}

/* *out = a view of t's storage of dtype dt from byte start (of the storage) on, shaped and laid out as asked. */
static glia_status make_view(struct glia_tensor *t, size_t start, enum glia_dtype dt, const struct glia_shape *shape,
                             enum glia_memory_format f, struct glia_tensor **out)
{
    if (!shape_ok(shape)) return GLIA_EINVAL;
    if (f != GLIA_CONTIGUOUS && (f != GLIA_CHANNELS_LAST || shape->ndim != 4)) return GLIA_EINVAL;
    if (start + (size_t)glia_shape_numel(shape) * glia_dtype_size(dt) > t->storage->nbytes) return GLIA_EINVAL;
    struct glia_tensor *v = calloc(1, sizeof *v);
    if (!v) return GLIA_ENOMEM;
    v->dtype = dt;
    v->device = t->device;
    v->data = (char *)t->storage->ptr + start;
    v->storage = t->storage;
    v->storage->refcount++;
    v->refcount = 1;
    if (f == GLIA_CHANNELS_LAST) set_channels_last(v, shape);
    else set_contiguous(v, shape);
    *out = v;
    return GLIA_OK;
}

/* Where t's data starts in its storage, in bytes. */
static size_t data_at(const struct glia_tensor *t) { return (size_t)((char *)t->data - (char *)t->storage->ptr); }

glia_status glia_tensor_view_as(struct glia_tensor *t, int64_t offset, const struct glia_shape *shape,
                                enum glia_memory_format f, struct glia_tensor **out)
{
    if (offset < 0) return GLIA_EINVAL;
    return make_view(t, data_at(t) + (size_t)offset * glia_dtype_size(t->dtype), t->dtype, shape, f, out);
}

glia_status glia_tensor_reshape(struct glia_tensor *t, const struct glia_shape *shape,
                                struct glia_tensor **out)
{
    if (!glia_tensor_is_contiguous(t) || glia_shape_numel(shape) != glia_tensor_numel(t))
        return GLIA_EINVAL;
    return glia_tensor_view(t, 0, shape, out);
}

struct glia_tensor *glia_tensor_retain(struct glia_tensor *t)
{
    if (t) t->refcount++;
    return t;
}

void glia_tensor_release(struct glia_tensor *t)
{
    if (!t || --t->refcount > 0) return;
    struct glia_storage *st = t->storage;
    if (st && --st->refcount == 0) {
        glia_backend_free(st->backend, st->ptr);
        free(st);
    }
    free(t);
}

int64_t glia_tensor_numel(const struct glia_tensor *t) { return glia_shape_numel(&t->shape); }

size_t glia_tensor_nbytes(const struct glia_tensor *t)
{
    return (size_t)glia_tensor_numel(t) * glia_dtype_size(t->dtype);
}

bool glia_tensor_is_contiguous(const struct glia_tensor *t)
{
    int64_t st = 1;
    for (int i = t->shape.ndim - 1; i >= 0; i--) {
        if (t->shape.dim[i] != 1 && t->stride[i] != st) return false;
        st *= t->shape.dim[i];
    }
    return true;
}

enum glia_memory_format glia_tensor_memory_format(const struct glia_tensor *t)
{
    if (t->shape.ndim != 4 || glia_tensor_is_contiguous(t)) return GLIA_CONTIGUOUS;
    struct glia_tensor cl;
    set_channels_last(&cl, &t->shape);
    return memcmp(cl.stride, t->stride, 4 * sizeof(int64_t)) ? GLIA_CONTIGUOUS : GLIA_CHANNELS_LAST;
}

const char *glia_memory_format_name(enum glia_memory_format f)
{
    return f == GLIA_CHANNELS_LAST ? "channels_last" : "contiguous";
}

struct glia_backend *glia_tensor_backend(const struct glia_tensor *t)
{
    return t->storage ? t->storage->backend : NULL;
}

glia_status glia_tensor_copy(struct glia_tensor *dst, const struct glia_tensor *src)
{
    if (dst->dtype != src->dtype || glia_tensor_numel(dst) != glia_tensor_numel(src) ||
        !glia_tensor_is_contiguous(dst) || !glia_tensor_is_contiguous(src))
        return GLIA_EINVAL;
    struct glia_backend *bd = glia_tensor_backend(dst), *bs = glia_tensor_backend(src);
    size_t n = glia_tensor_nbytes(src);
    bool dh = dst->device.type == GLIA_DEVICE_CPU, sh = src->device.type == GLIA_DEVICE_CPU;
    if (dh && sh) {
        memmove(dst->data, src->data, n);
        return GLIA_OK;
    }
    struct glia_backend *b = dh ? bs : bd;
    if (!dh && !sh && bd != bs) return GLIA_EUNSUPPORTED;
    return glia_backend_copy(b, dst->data, dh, src->data, sh, n);
}

glia_status glia_tensor_from_host(struct glia_tensor *t, const void *src, size_t nbytes)
{
    if (nbytes != glia_tensor_nbytes(t)) return GLIA_EINVAL;
    struct glia_backend *b = glia_tensor_backend(t);
    return glia_backend_copy(b, t->data, t->device.type == GLIA_DEVICE_CPU, src, true, nbytes);
}

glia_status glia_tensor_to_host(const struct glia_tensor *t, void *dst, size_t nbytes)
{
    if (nbytes != glia_tensor_nbytes(t)) return GLIA_EINVAL;
    struct glia_backend *b = glia_tensor_backend(t);
    return glia_backend_copy(b, dst, true, t->data, t->device.type == GLIA_DEVICE_CPU, nbytes);
}

glia_status glia__tensor_to_host_f32(const struct glia_tensor *t, float *dst, size_t n)
{
    if (t->dtype == GLIA_F32) return glia_tensor_to_host(t, dst, n * sizeof(float));
    if ((t->dtype != GLIA_BF16 && t->dtype != GLIA_F16) || (int64_t)n != glia_tensor_numel(t)) return GLIA_EINVAL;
    /* the halves into dst's upper half (bytes 2n ..), widened in place front to back: float i, written once half i
     * is read, ends at byte 4i + 4, not past the 2n + 2i + 2 where the halves still to read begin */
    unsigned char *b = (unsigned char *)dst;
    glia_status st = glia_tensor_to_host(t, b + 2 * n, 2 * n);
    for (size_t i = 0; i < n && !st; i++) {
        uint16_t h;
        memcpy(&h, b + 2 * n + 2 * i, sizeof h);
        float v = t->dtype == GLIA_BF16 ? glia_bf16_to_f32(h) : glia_f16_to_f32(h);
        memcpy(b + 4 * i, &v, sizeof v);
    }
    return st;
}

glia_status glia_tensor_fill_zero(struct glia_tensor *t)
{
    return glia_backend_memzero(glia_tensor_backend(t), t->data, glia_tensor_nbytes(t));
}

float *glia_tensor_f32(const struct glia_tensor *t)
{
    return t && t->dtype == GLIA_F32 && t->device.type == GLIA_DEVICE_CPU ? t->data : NULL;
}

int32_t *glia_tensor_i32(const struct glia_tensor *t)
{
    return t && t->dtype == GLIA_I32 && t->device.type == GLIA_DEVICE_CPU ? t->data : NULL;
}

glia_status glia_tensor_convert(struct glia_tensor *dst, const struct glia_tensor *src, bool accumulate)
{
    if (!glia__float_dtype(dst->dtype) || !glia__float_dtype(src->dtype) || !glia_shape_equal(&dst->shape, &src->shape) ||
        dst->device.type != src->device.type || dst->device.index != src->device.index)
        return GLIA_EINVAL;
    enum glia_memory_format fd = glia_tensor_memory_format(dst), fs = glia_tensor_memory_format(src);
    if ((fd == GLIA_CONTIGUOUS && !glia_tensor_is_contiguous(dst)) ||
        (fs == GLIA_CONTIGUOUS && !glia_tensor_is_contiguous(src)))
        return GLIA_EINVAL;
    const struct glia_shape *s = &src->shape;
    int64_t B = 1, rows = 1, cols = glia_shape_numel(s);  /* same layout: a copy, as 1 x n */
    if (fd != fs) {
        B = s->dim[0];
        int64_t C = s->dim[1], HW = s->dim[2] * s->dim[3];
        rows = fs == GLIA_CONTIGUOUS ? C : HW;   /* NCHW: (C, HW) per sample; NHWC: (HW, C) */
        cols = fs == GLIA_CONTIGUOUS ? HW : C;
    }
    struct glia_backend *b = glia_tensor_backend(dst);
    bool host = dst->device.type == GLIA_DEVICE_CPU, same = fd == fs || rows == 1 || cols == 1;
    if (same && !accumulate && dst->dtype == src->dtype)  /* the same bytes */
        return glia_backend_copy(b, dst->data, host, src->data, host, glia_tensor_nbytes(src));
    if (dst->dtype != GLIA_F32 || src->dtype != GLIA_F32)
        return glia_backend_convert(b, dst->data, dst->dtype, src->data, src->dtype, same ? 1 : B, same ? 1 : rows,
                                    same ? glia_shape_numel(s) : cols, accumulate ? 1.0f : 0.0f);
    if (same)  /* dst += src */
        return glia_backend_axpy_f32(b, dst->data, src->data, (size_t)glia_tensor_numel(src), 1.0f);
    return glia_backend_transpose_f32(b, dst->data, src->data, B, rows, cols, accumulate ? 1.0f : 0.0f);
}

glia_status glia__tensor_view_typed(struct glia_tensor *t, size_t byte_offset, enum glia_dtype dtype,
                                    const struct glia_shape *shape, enum glia_memory_format f, struct glia_tensor **out)
{
    size_t es = glia_dtype_size(dtype);
    if (!es || (data_at(t) + byte_offset) % es) return GLIA_EINVAL;
    return make_view(t, data_at(t) + byte_offset, dtype, shape, f, out);
}
