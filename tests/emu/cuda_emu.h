/* tests/emu/cuda_emu.h — what the backend's .cu files need to build as host C++ for the CPU emulation
 * of CUDA (tests/emu/run.sh force-includes it): thread and block indices, __syncthreads, warp
 * shuffles, atomics and the launch that run.sh writes in place of <<< >>>. Not a CUDA implementation:
 * blocks run one after another, the threads of a block as fibers (emu_runtime.c). */
#ifndef GLIA_CUDA_EMU_H
#define GLIA_CUDA_EMU_H

#include <cuda_runtime_api.h>
#include <vector_functions.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>
#include <utility>

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static /* blocks run one at a time: one copy serves each block in turn */
#define __launch_bounds__(...)

extern "C" {
struct glia_emu_thread {
    uint3 tid;
};
extern struct glia_emu_thread *glia_emu_cur;
extern uint3 glia_emu_block_idx;
extern dim3 glia_emu_block_dim, glia_emu_grid_dim;
void glia_emu_syncthreads(void);
/* mode 0 down, 1 xor, 2 up, 3 idx */
uint64_t glia_emu_shfl(unsigned mask, uint64_t v, int mode, int arg, int width);
/* Queues fn(arg) as a kernel of grid x block threads on stream s, or records it into s's stream
 * capture (each launch of the graph runs it again with the same arg); drop(arg) once nothing needs it. */
cudaError_t glia_emu_submit(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s, void (*fn)(void *),
                            void *arg, void (*drop)(void *));
}

#define threadIdx (glia_emu_cur->tid)
#define blockIdx glia_emu_block_idx
#define blockDim glia_emu_block_dim
#define gridDim glia_emu_grid_dim
#define warpSize 32

static inline void __syncthreads(void) { glia_emu_syncthreads(); }
static inline void __threadfence(void) {} /* blocks run one after another */

template <typename T> static inline T glia_emu_shfl_t(unsigned mask, T v, int mode, int arg, int width)
{
    static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    u = glia_emu_shfl(mask, u, mode, arg, width);
    T r;
    memcpy(&r, &u, sizeof r);
    return r;
}
template <typename T> static inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) { return glia_emu_shfl_t(m, v, 0, (int)d, w); }
template <typename T> static inline T __shfl_xor_sync(unsigned m, T v, int l, int w = 32) { return glia_emu_shfl_t(m, v, 1, l, w); }
template <typename T> static inline T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) { return glia_emu_shfl_t(m, v, 2, (int)d, w); }
template <typename T> static inline T __shfl_sync(unsigned m, T v, int l, int w = 32) { return glia_emu_shfl_t(m, v, 3, l, w); }
/* a warp barrier: a shuffle waits for every lane of the mask, as __syncwarp does */
static inline void __syncwarp(unsigned m = 0xffffffffu) { (void)glia_emu_shfl_t(m, 0, 1, 0, 32); }

/* One host thread runs every fiber and switches only at barriers and shuffles: plain updates are atomic. */
template <typename T, typename U> static inline T atomicAdd(T *p, U v) { T o = *p; *p = (T)(o + v); return o; }
template <typename T, typename U> static inline T atomicMin(T *p, U v) { T o = *p; if ((T)v < o) *p = (T)v; return o; }
template <typename T, typename U> static inline T atomicMax(T *p, U v) { T o = *p; if ((T)v > o) *p = (T)v; return o; }
template <typename T, typename U> static inline T atomicExch(T *p, U v) { T o = *p; *p = (T)v; return o; }

/* run.sh builds with -ffp-contract=off: every operation is its own rounding */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }

static inline float __int_as_float(int i) { float f; memcpy(&f, &i, sizeof f); return f; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, sizeof i); return i; }
static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, sizeof i); return i; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, sizeof f); return f; }
static inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, sizeof d); return d; }
static inline long long __double_as_longlong(double d) { long long i; memcpy(&i, &d, sizeof i); return i; }

/* kernel<<<grid, block, smem, stream>>>(args) becomes glia_emu_launch("kernel", grid, block, smem, stream, kernel, args) */
template <typename... P, typename... A>
static inline void glia_emu_launch(const char *name, dim3 g, dim3 b, size_t smem, cudaStream_t s, void (*f)(P...), A... a)
{
    auto call = [=]() { f(a...); };  /* the arguments by value: the launch may run later, and again in a graph */
    using C = decltype(call);
    glia_emu_submit(name, g, b, smem, s, [](void *c) { (*(C *)c)(); }, new C(call), [](void *c) { delete (C *)c; });
}

/* cudaLaunchKernel's form, for kernels built at run time (emu_jit.c): the arguments from their
 * addresses in a, copied now, then launched as above. */
template <typename... P, size_t... I>
static inline void glia_emu_launch_args_(const char *name, dim3 g, dim3 b, size_t smem, cudaStream_t s, void (*f)(P...),
                                         void **a, std::index_sequence<I...>)
{
    glia_emu_launch(name, g, b, smem, s, f, *(const std::decay_t<P> *)a[I]...);
}
template <typename... P>
static inline void glia_emu_launch_args(const char *name, dim3 g, dim3 b, size_t smem, cudaStream_t s, void (*f)(P...),
                                        void **a)
{
    glia_emu_launch_args_(name, g, b, smem, s, f, a, std::index_sequence_for<P...>{});
}

#endif
