/* glia/tensor.h — dense tensors: dtype, shape, strides, device, refcounted storage.
 * Not an op library: maths lives in backends and layer plugins. */
#ifndef GLIA_TENSOR_H
#define GLIA_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GLIA_MAX_DIMS 8

enum glia_dtype { GLIA_F32 = 0, GLIA_F16, GLIA_BF16, GLIA_I32, GLIA_I64, GLIA_U8,
                  GLIA_F64 /* sums exchanged between ranks */ };

enum glia_device_type { GLIA_DEVICE_CPU = 0, GLIA_DEVICE_CUDA = 1 };

struct glia_device {
    enum glia_device_type type;
    int index;
};

/* How a 4-D activation (N, C, H, W) is laid out in memory. The shape is always given in
 * NCHW order; the format only changes the strides (PyTorch's memory_format). */
enum glia_memory_format {
    GLIA_CONTIGUOUS = 0,      /* row-major NCHW: strides (CHW, HW, W, 1) */
    GLIA_CHANNELS_LAST = 1    /* NHWC: strides (HWC, 1, WC, C); 4-D tensors only */
};

/* A shape; dim[0] is the batch dimension for activations. */
struct glia_shape {
    int ndim;
    int64_t dim[GLIA_MAX_DIMS];
};

struct glia_backend;
struct glia_storage;

/* Fields are read-only for plugins; create and change tensors through the functions. */
struct glia_tensor {
    enum glia_dtype dtype;
    struct glia_shape shape;
    int64_t stride[GLIA_MAX_DIMS];  /* in elements */
    struct glia_device device;
    void *data;                     /* first element (borrowed from storage) */
    struct glia_storage *storage;   /* (owned reference) */
    int refcount;
};

size_t glia_dtype_size(enum glia_dtype t);
const char *glia_dtype_name(enum glia_dtype t);

/* Shapes. glia_shape_str writes "64x1x28x28" into buf and returns buf. */
int64_t glia_shape_numel(const struct glia_shape *s);
bool glia_shape_equal(const struct glia_shape *a, const struct glia_shape *b);
struct glia_shape glia_shape_make(int ndim, const int64_t *dim);
char *glia_shape_str(const struct glia_shape *s, char *buf, size_t n);

/* New contiguous (row-major) tensor from backend b's allocator, contents undefined.
 * *out is (owned): release with glia_tensor_release. GLIA_ENOMEM when the allocator refuses, or
 * when the element or byte count overflows (then nothing is asked of the allocator). */
glia_status glia_tensor_new(struct glia_backend *b, enum glia_dtype dtype,
                            const struct glia_shape *shape, struct glia_tensor **out);
/* New contiguous tensor filled with zeros. */
glia_status glia_tensor_zeros(struct glia_backend *b, enum glia_dtype dtype,
                              const struct glia_shape *shape, struct glia_tensor **out);
/* A contiguous view of t's storage starting offset elements after t->data, with the given
 * shape (must fit). The view holds a reference to the storage. *out is (owned). */
glia_status glia_tensor_view(struct glia_tensor *t, int64_t offset, const struct glia_shape *shape,
                             struct glia_tensor **out);
/* Same storage, new contiguous shape with the same element count (a reshape). */
glia_status glia_tensor_reshape(struct glia_tensor *t, const struct glia_shape *shape,
                                struct glia_tensor **out);

/* Like glia_tensor_view, laid out in format f (GLIA_CHANNELS_LAST needs a 4-D shape). */
glia_status glia_tensor_view_as(struct glia_tensor *t, int64_t offset, const struct glia_shape *shape,
                                enum glia_memory_format f, struct glia_tensor **out);

struct glia_tensor *glia_tensor_retain(struct glia_tensor *t);
void glia_tensor_release(struct glia_tensor *t);

int64_t glia_tensor_numel(const struct glia_tensor *t);
size_t glia_tensor_nbytes(const struct glia_tensor *t);
bool glia_tensor_is_contiguous(const struct glia_tensor *t);
/* The format of t: GLIA_CHANNELS_LAST when t is 4-D, not contiguous, and its strides are NHWC's;
 * else GLIA_CONTIGUOUS. Where C or H*W is 1 both layouts are the same bytes: a channels_last
 * tensor whose dims of size 1 do not matter reads as contiguous. */
enum glia_memory_format glia_tensor_memory_format(const struct glia_tensor *t);
/* "contiguous" or "channels_last". */
const char *glia_memory_format_name(enum glia_memory_format f);
/* The backend that owns t's storage (borrowed). */
struct glia_backend *glia_tensor_backend(const struct glia_tensor *t);

/* Copy between tensors of equal dtype and element count, across devices if needed. */
glia_status glia_tensor_copy(struct glia_tensor *dst, const struct glia_tensor *src);
/* Host <-> tensor copies of nbytes == glia_tensor_nbytes(t). */
glia_status glia_tensor_from_host(struct glia_tensor *t, const void *src, size_t nbytes);
glia_status glia_tensor_to_host(const struct glia_tensor *t, void *dst, size_t nbytes);
glia_status glia_tensor_fill_zero(struct glia_tensor *t);
/* dst = src (accumulate: dst += src) for tensors of the same shape on the same device whose
 * formats may differ: converts between NCHW and NHWC (the backend's transpose_f32). Since ABI 2.1
 * the dtypes may differ too, each f32, f16 or bf16 (the backend's convert slot, which rounds to
 * nearest even once, after an accumulation's sum; GLIA_EUNSUPPORTED from a backend without it). */
glia_status glia_tensor_convert(struct glia_tensor *dst, const struct glia_tensor *src, bool accumulate);

/* Typed access to host-resident f32/i32 tensor data (NULL if dtype or device differ). */
float *glia_tensor_f32(const struct glia_tensor *t);
int32_t *glia_tensor_i32(const struct glia_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
