/* backends/cuda/norm_pool_kernels.cu — the kernels of the CUDA batchnorm (Welford statistics, normalization,
 * gradients; SyncBatchNorm's sums in double), max and average pooling (forward, and backward as a gather:
 * deterministic), global average pooling and concat's strided copies. Not layer logic: norm_pool.c decides what
 * to launch.
 * Every reduction runs in an order fixed by the shape (no float atomics), so results are reproducible;
 * the pooling kernels add in the CPU kernels' order with explicit roundings (no contraction into FMAs). */
#include <math.h>
#include <stdlib.h>
#include "norm_pool_kernels.h"

#include "half.cuh"

#include "launch.cuh"

/* Everything but the C entry points has internal linkage (an unnamed namespace), so that kernels and
 * helpers cannot clash with those of the other .cu files of cuda.so. */
namespace {

/* ---- index walks ---- */

/* Walks j = j0, j0 + step, ... keeping c = (j / L) % C and i = j % L without a division per step (the
 * channel of element j of x(N, C, L)). */
struct ChanWalk {
    int64_t i, c, si, sc, L, C;
    __device__ ChanWalk(int64_t j0, int64_t step, int64_t L_, int64_t C_) : L(L_), C(C_)
    {
        int64_t o = j0 / L, so = step / L;
        i = j0 - o * L;
        c = o % C;
        si = step - so * L;
        sc = so % C;
    }
    __device__ void next()
    {
        i += si;
        int64_t carry = 0;
        if (i >= L) {
            i -= L;
            carry = 1;
        }
        c += sc + carry;  /* < 2C */
        if (c >= C) c -= C;
    }
};

/* Walks j = j0, j0 + step, ... keeping o = j / L and i = j % L (row and column of an (outer, L) array). */
struct RowWalk {
    int64_t o, i, so, si, L;
    __device__ RowWalk(int64_t j0, int64_t step, int64_t L_) : L(L_)
    {
        o = j0 / L;
        i = j0 - o * L;
        so = step / L;
        si = step - so * L;
    }
    __device__ void next()
    {
        i += si;
        o += so;
        if (i >= L) {
            i -= L;
            o++;
        }
    }
};

/* ---- batchnorm: the per-thread accumulators and their merges ----
 * A state is a float3; Welford: (count, mean, m2) of x - pivot(c); Sums: (unused, sum dy, sum dy*x_hat).
 * The pivot, x's first value of channel c (index c*L), keeps the float statistics of inputs with a
 * large mean as accurate as those of centred ones (the shifted-data algorithm). */

/* Each accumulator reads x (and dy unless NULL), of element type T (f32, f16 or bf16: batchnorm's activations; the
 * values converted to float as loaded, everything after in float or double as for f32), and adds one value of
 * channel c with add_val; the walks call it through acc_add (one element), acc_add4 (4 consecutive elements of one
 * channel) and acc_add4c (4 consecutive channels), which load 4 values at once (a float4; 8 bytes of halves) where
 * the kernel says the layout and alignment allow. State is
 * what a thread keeps, Part what a block writes per split: put(v, pa, pb, i) writes it at pa[i] (and pb[i]). */
#define FLOAT_STATE                                                                                             \
    typedef float3 State;                                                                                       \
    typedef float Part;                                                                                         \
    __device__ static float3 zero() { return make_float3(0.0f, 0.0f, 0.0f); }                                 \
    __device__ static void put(float3 v, float *pa, float *pb, int64_t i)                                       \
    {                                                                                                           \
        pa[i] = v.y;                                                                                            \
        if (pb) pb[i] = v.z;                                                                                    \
    }

template <typename T> struct Welford {
    FLOAT_STATE
    const T *x;
    int64_t L;
    const T *dy = nullptr;
    __device__ float pivot(int64_t c) const { return to_float(x[c * L]); }
    __device__ float3 add_val(float3 v, float x0, float dy0, int64_t c, float k) const
    {
        (void)dy0, (void)c;  /* dy and the channel matter to GradSums only */
        float xv = x0 - k, n = v.x + 1.0f, d = xv - v.y, m = v.y + d / n;
        return make_float3(n, m, v.z + d * (xv - m));
    }
    /* Chan et al.: the statistics of the union of a and b */
    __device__ static float3 merge(float3 a, float3 b)
    {
        float n = a.x + b.x;
        if (n == 0.0f) return a;
        float d = b.y - a.y, f = b.x / n;
        return make_float3(n, a.y + d * f, a.z + b.z + d * d * a.x * f);
    }
};

/* x_hat = ((x - mean_hi) - mean_lo) * invstd: the mean kept as a float pair loses nothing to float */
__device__ static float x_hat(float x, const float *saved, int64_t c, int64_t C)
{
    return ((x - saved[c]) - saved[C + c]) * saved[2 * C + c];
}

/* activation = relu: dy unless the forward's y = (x - f(0, c))*f(1, c) + f(2, c), rounded as bn_normalize
 * rounds it, was <= 0 (a NaN y passes dy, as the relu layer's backward), else 0, with f(3, C) the forward's
 * coef kept at saved(3..5, C); dy without relu */
__device__ static float relu_dy(float dy, float x, const float *saved, int64_t c, int64_t C, bool relu)
{
    const float *f = saved + 3 * C;
    return relu && __fadd_rn(__fmul_rn(__fsub_rn(x, f[c]), f[C + c]), f[2 * C + c]) <= 0.0f ? 0.0f : dy;
}

template <typename T> struct GradSums {
    FLOAT_STATE
    const T *x, *dy;
    const float *saved;  /* saved(3, C) = (mean_hi, mean_lo, invstd); with relu (6, C) */
    int64_t C;
    bool relu;
    __device__ float pivot(int64_t c) const { return (void)c, 0.0f; }
    __device__ float3 add_val(float3 v, float x0, float dy0, int64_t c, float k) const
    {
        (void)k;
        float g = relu_dy(dy0, x0, saved, c, C, relu);
        return make_float3(0.0f, v.y + g, v.z + g * x_hat(x0, saved, c, C));
    }
    __device__ static float3 merge(float3 a, float3 b) { return make_float3(0.0f, a.y + b.y, a.z + b.z); }
};

/* Plain sums of x per channel (the conv2d bias gradient): (unused, sum x, unused). */
struct ChannelSum {
    FLOAT_STATE
    const float *x;
    const float *dy = nullptr;
    __device__ float pivot(int64_t c) const { return (void)c, 0.0f; }
    __device__ float3 add_val(float3 v, float x0, float dy0, int64_t c, float k) const
    {
        (void)dy0, (void)c, (void)k;
        return make_float3(0.0f, v.y + x0, 0.0f);
    }
    __device__ static float3 merge(float3 a, float3 b) { return make_float3(0.0f, a.y + b.y, 0.0f); }
};

/* element e of channel c */
template <class Acc, class T> __device__ static T acc_add(const Acc &a, T v, int64_t e, int64_t c, float k)
{
    return a.add_val(v, to_float(a.x[e]), a.dy ? to_float(a.dy[e]) : 0.0f, c, k);
}

/* The 4 values at p (aligned to 4 of them) as floats: a float4 load; for halves one 8-byte load. */
__device__ static float4 load4(const float *p) { return *(const float4 *)p; }
template <typename T> __device__ static float4 load4(const T *p)
{
    Pack<T, 4> q = *(const Pack<T, 4> *)p;
    return make_float4(to_float(q.v[0]), to_float(q.v[1]), to_float(q.v[2]), to_float(q.v[3]));
}

/* elements e..e+3 of channel c (e a multiple of 4, aligned to 4 values) */
template <class Acc, class T> __device__ static T acc_add4(const Acc &a, T v, int64_t e, int64_t c, float k)
{
    float4 q = load4(a.x + e), g = a.dy ? load4(a.dy + e) : make_float4(0, 0, 0, 0);
    v = a.add_val(v, q.x, g.x, c, k);
    v = a.add_val(v, q.y, g.y, c, k);
    v = a.add_val(v, q.z, g.z, c, k);
    return a.add_val(v, q.w, g.w, c, k);
}

/* elements e..e+3 of channels c..c+3 (rows; e a multiple of 4, aligned to 4 values) into v[0..3] */
template <class Acc, class T> __device__ static void acc_add4c(const Acc &a, T *v, int64_t e, int64_t c, const float *k)
{
    float4 q = load4(a.x + e), g = a.dy ? load4(a.dy + e) : make_float4(0, 0, 0, 0);
    v[0] = a.add_val(v[0], q.x, g.x, c, k[0]);
    v[1] = a.add_val(v[1], q.y, g.y, c + 1, k[1]);
    v[2] = a.add_val(v[2], q.z, g.z, c + 2, k[2]);
    v[3] = a.add_val(v[3], q.w, g.w, c + 3, k[3]);
}

/* The first value of split s of a channel's M values, with the splits cut at multiples of V (4 for planes
 * whose length L is a multiple of 4, so that 4-value loads never straddle two splits; else 1): split s is
 * [split_at(s), split_at(s + 1)). */
__host__ __device__ static inline int split_unit(int64_t L) { return L > 1 && L % 4 == 0 ? 4 : 1; }
__host__ __device__ static inline int64_t split_at(int64_t s, int64_t M, int S, int V) { return V * (s * (M / V) / S); }

/* split_at(s + 1) - split_at(s) with q = M / V, in 32-bit arithmetic where S*q fits in it (a 64-bit division is a
 * long subroutine, and a finalize takes the length of each split it merges, twice): the same value either way. */
__device__ static inline int64_t split_len(int64_t s, int64_t q, int S, int V)
{
    if ((uint64_t)q * (uint64_t)S <= 0xffffffffull) {
        uint32_t u = (uint32_t)q, n = (uint32_t)S;
        return (int64_t)V * (int64_t)(((uint32_t)s + 1u) * u / n - (uint32_t)s * u / n);
    }
    return V * ((s + 1) * q / S - s * q / S);
}

__device__ static float3 shfl_down_state(float3 v, int off)
{
    return make_float3(__shfl_down_sync(0xffffffffu, v.x, off), __shfl_down_sync(0xffffffffu, v.y, off),
                       __shfl_down_sync(0xffffffffu, v.z, off));
}
__device__ static double2 shfl_down_state(double2 v, int off)
{
    return make_double2(__shfl_down_sync(0xffffffffu, v.x, off), __shfl_down_sync(0xffffffffu, v.y, off));
}

/* The merge of v over a 1-D block of THREADS threads, in a fixed tree order; valid in thread 0. */
template <class Acc> __device__ static typename Acc::State block_merge(typename Acc::State v)
{
    __shared__ typename Acc::State warp_part[THREADS / 32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int off = 16; off > 0; off >>= 1) v = Acc::merge(v, shfl_down_state(v, off));
    if (lane == 0) warp_part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < THREADS / 32 ? warp_part[lane] : Acc::zero();
        for (int off = 16; off > 0; off >>= 1) v = Acc::merge(v, shfl_down_state(v, off));
    }
    return v;
}

/* ---- the finalize in the reduce's own launch (GLIA_CUDA_BN_FUSE=on) ----
 * Given a finalize (a Fin other than NoFin) and tickets (an unsigned per channel group, blockIdx.x: zero, and left
 * zero), a reduce finalizes in its own launch, as PyTorch's channels_last statistics do: each block, once it has
 * written its partials, takes a ticket of its group (after a __threadfence: the partials are visible first); the
 * group's last block (ticket S - 1) reads the S partials of each of the group's channels and writes their results,
 * then puts the ticket back to 0 (the next launch, or a CUDA graph's replay). Which block comes last changes nothing:
 * each channel's partials are read in split order by its lanes (s = lane, lane + lanes, ...) and the lanes' sums
 * merged in a fixed tree (fin_tree): the same bits on every run. It saves a launch a pass; the last block then does
 * alone what the finalize launch spreads over C blocks (S partials a channel), which pays at few splits only. */

/* The finalize of a reduce without one. */
struct NoFin {
    template <class P> __device__ void operator()(const P *, const P *, int64_t, int64_t, int, int64_t) const {}
};

/* Whether this block is the last of its group's S to have written its partials (every thread calls it and gets it). */
__device__ static bool last_of_group(unsigned *tickets, int S)
{
    __shared__ bool last;
    __threadfence();  /* this block's partials before its ticket */
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) last = atomicAdd(&tickets[blockIdx.x], 1u) == (unsigned)S - 1;
    __syncthreads();
    if (last) __threadfence();  /* the other blocks' partials after their tickets */
    return last;
}

/* The last block's finalize of channels c0 .. c1 - 1, then its ticket back to 0 (every thread calls it). */
template <class Fin, class P>
__device__ static void finalize_group(const Fin &fin, unsigned *tickets, const P *pa, const P *pb, int64_t c0,
                                      int64_t c1, int S, int64_t C)
{
    fin(pa, pb, c0, c1, S, C);
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) tickets[blockIdx.x] = 0;
}

/* The THREADS threads of a block (flat index i) in groups of `lanes` threads that merge one value: thread i is lane
 * `lane` of the group whose lane 0 is thread `head`, its lanes `stride` threads apart. For a finalize in the reduce's
 * launch (fin_lanes) a group is a channel c (on: one of those being finalized) and stride its channels' count, so that
 * a warp reads consecutive channels of a split's partials; for a finalize launch (split_tree) a group is a row. */
struct FinLanes {
    int i, lane, lanes, stride, head;
    int64_t c;
    bool on;
};

/* The lanes that finalize channels c0 .. c1 - 1 (at most THREADS of them): a power of two of channels, thread i
 * taking channel c0 + i % channels as lane i / channels. */
__device__ static FinLanes fin_lanes(int64_t c0, int64_t c1)
{
    FinLanes f;
    int n = (int)(c1 - c0);
    f.stride = 1;
    while (f.stride < n) f.stride <<= 1;
    f.i = (int)(threadIdx.y * blockDim.x + threadIdx.x);
    f.lanes = THREADS / f.stride;
    f.head = f.i % f.stride;
    f.lane = f.i / f.stride;
    f.c = c0 + f.head;
    f.on = f.head < n;
    return f;
}

/* The merge of v over the lanes of each group, in a fixed tree (lane with lane + h for h = lanes/2, ..., 1); every
 * thread of the block calls it and gets its group's result. */
template <class T, class Merge> __device__ static T fin_tree(T v, const FinLanes &f, Merge merge)
{
    __shared__ T part[THREADS];
    part[f.i] = v;
    __syncthreads();
    for (int h = f.lanes >> 1; h > 0; h >>= 1) {
        if (f.lane < h) part[f.i] = merge(part[f.i], part[f.i + h * f.stride]);
        __syncthreads();
    }
    v = part[f.head];
    __syncthreads();  /* part is written again by the next call */
    return v;
}

/* pa(S, C), pb(S, C) (pb may be NULL) = the state (y, z) of split s = blockIdx.y of channel c = blockIdx.x of
 * x(N, C, L), L > 1: THREADS threads walk the split's values j = n*L + i (consecutive threads, consecutive i). */
template <class Acc, class Fin, class P = typename Acc::Part>
__global__ void bn_reduce_planes(P *pa, P *pb, Acc acc, int64_t N, int64_t C, int64_t L, int S, Fin fin,
                                 unsigned *tickets)
{
    int64_t c = blockIdx.x, s = blockIdx.y, M = N * L;
    int V = split_unit(L);
    int64_t j0 = split_at(s, M, S, V), j1 = split_at(s + 1, M, S, V);
    typename Acc::State v = Acc::zero();
    float k = acc.pivot(c);
    RowWalk w(j0 + threadIdx.x, THREADS, L);
    for (int64_t j = j0 + threadIdx.x; j < j1; j += THREADS, w.next())
        v = acc_add(acc, v, (w.o * C + c) * L + w.i, c, k);
    v = block_merge<Acc>(v);
    if (threadIdx.x == 0) Acc::put(v, pa, pb, s * C + c);
    if (tickets && last_of_group(tickets, S)) finalize_group(fin, tickets, pa, pb, c, c + 1, S, C);  /* a channel */
}

/* The same 4 values a load (L % 4 == 0, x and dy aligned to 4 values): the threads walk the split's groups of 4
 * values u = n*L/4 + i. */
template <class Acc, class Fin, class P = typename Acc::Part>
__global__ void bn_reduce_planes4(P *pa, P *pb, Acc acc, int64_t N, int64_t C, int64_t L, int S, Fin fin,
                                  unsigned *tickets)
{
    int64_t c = blockIdx.x, s = blockIdx.y, M = N * L;
    int64_t u0 = split_at(s, M, S, 4) / 4, u1 = split_at(s + 1, M, S, 4) / 4;
    typename Acc::State v = Acc::zero();
    float k = acc.pivot(c);
    RowWalk w(u0 + threadIdx.x, THREADS, L / 4);
    for (int64_t u = u0 + threadIdx.x; u < u1; u += THREADS, w.next())
        v = acc_add4(acc, v, (w.o * C + c) * L + 4 * w.i, c, k);
    v = block_merge<Acc>(v);
    if (threadIdx.x == 0) Acc::put(v, pa, pb, s * C + c);
    if (tickets && last_of_group(tickets, S)) finalize_group(fin, tickets, pa, pb, c, c + 1, S, C);  /* a channel */
}

#define TILE_C 32  /* channels of a gap_fwd_rows block (threadIdx.x) */
#define TILE_R 8   /* row lanes of a gap_fwd_rows block (threadIdx.y) */

/* The width of a rows block of batchnorm's sums: the power of two >= C up to 32 (a warp reads TX consecutive
 * channels of 32/TX consecutive rows, so C = 16 wastes no lane); THREADS/TX row lanes. A function of C only. */
static inline int rows_tile(int64_t C)
{
    int tx = 1;
    while (tx < 32 && tx < C) tx <<= 1;
    return tx;
}

/* The merge of part[ty*TX + tx] over ty = 0..TY-1 (a power of two) into part[tx], in a fixed tree order
 * (ty with ty + h for h = TY/2, ..., 1); every thread of the block calls it. */
template <class T, class Merge> __device__ static void rows_tree(T *part, Merge merge)
{
    int tx = threadIdx.x, ty = threadIdx.y, TX = blockDim.x;
    __syncthreads();
    for (int h = blockDim.y >> 1; h > 0; h >>= 1) {
        if (ty < h) part[ty * TX + tx] = merge(part[ty * TX + tx], part[(ty + h) * TX + tx]);
        __syncthreads();
    }
}

/* pa(S, C), pb(S, C) as above for rows x(M, C): block (TX, TY) (rows_tile) takes channels
 * blockIdx.x*TX + threadIdx.x and rows threadIdx.y, + TY, ... of split s = blockIdx.y; the row lanes merge in
 * a fixed tree (rows_tree). */
template <class Acc, class Fin, class P = typename Acc::Part>
__global__ void bn_reduce_rows(P *pa, P *pb, Acc acc, int64_t M, int64_t C, int S, Fin fin, unsigned *tickets)
{
    typedef typename Acc::State T;
    __shared__ T part[THREADS];
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y;
    int64_t r0 = s * M / S, r1 = (s + 1) * M / S;
    T v = Acc::zero();
    if (c < C) {
        float k = acc.pivot(c);
        for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y) v = acc_add(acc, v, r * C + c, c, k);
    }
    part[threadIdx.y * blockDim.x + threadIdx.x] = v;
    rows_tree(part, [](T a, T b) { return Acc::merge(a, b); });
    if (threadIdx.y == 0 && c < C) Acc::put(part[threadIdx.x], pa, pb, s * C + c);
    if (tickets && last_of_group(tickets, S)) {  /* the block's TX channels */
        int64_t c0 = (int64_t)blockIdx.x * blockDim.x, c1 = c0 + blockDim.x;
        finalize_group(fin, tickets, pa, pb, c0, c1 < C ? c1 : C, S, C);
    }
}

/* The same 4 values a load over rows x(M, C), C % 4 == 0, x and dy aligned to 4 values: block (TX, TY) with TX =
 * rows_tile(C/4) takes channels 4*(blockIdx.x*TX + threadIdx.x) .. + 3, each with its own state. */
template <class Acc, class Fin, class P = typename Acc::Part>
__global__ void bn_reduce_rows4(P *pa, P *pb, Acc acc, int64_t M, int64_t C, int S, Fin fin, unsigned *tickets)
{
    typedef typename Acc::State T;
    __shared__ T part[4][THREADS];
    int64_t c = 4 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x), s = blockIdx.y;
    int64_t r0 = s * M / S, r1 = (s + 1) * M / S;
    T v[4];
    for (int q = 0; q < 4; q++) v[q] = Acc::zero();
    if (c < C) {
        float k[4] = {acc.pivot(c), acc.pivot(c + 1), acc.pivot(c + 2), acc.pivot(c + 3)};
        for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y) acc_add4c(acc, v, r * C + c, c, k);
    }
    int i = threadIdx.y * blockDim.x + threadIdx.x;
    for (int q = 0; q < 4; q++) part[q][i] = v[q];
    for (int q = 0; q < 4; q++) rows_tree(part[q], [](T a, T b) { return Acc::merge(a, b); });
    if (threadIdx.y == 0 && c < C)
        for (int q = 0; q < 4; q++) Acc::put(part[q][threadIdx.x], pa, pb, s * C + c + q);
    if (tickets && last_of_group(tickets, S)) {  /* the block's 4*TX channels */
        int64_t c0 = 4 * (int64_t)blockIdx.x * blockDim.x, c1 = c0 + 4 * blockDim.x;
        finalize_group(fin, tickets, pa, pb, c0, c1 < C ? c1 : C, S, C);
    }
}

/* Whether p (NULL counts) is aligned to n bytes */
static bool aligned(const void *p, size_t n) { return (uintptr_t)p % n == 0; }

/* The passes over x (and dy) into pa, pb, and with fin and tickets (gridDim.x of them, at most C) the finalize in
 * the same launch (see above). Halves take the f32 walks, 4 values a thread where f32 takes a float4 (an 8-byte load,
 * not 8 halves in 16 bytes): each thread then adds the same values in the same order as for f32, so half inputs of
 * f32 values give the f32 sums bit for bit (the statistics, dgamma and dbeta). */
template <class Acc, class P, class Fin = NoFin>
static cudaError_t bn_reduce(P *pa, P *pb, Acc acc, struct glia__bn_geom g, cudaStream_t st, Fin fin = NoFin(),
                             unsigned *tickets = nullptr)
{
    if (g.N * g.L == 0 || g.C == 0) return cudaSuccess;
    if (g.S < 1 || g.S > 65535) return cudaErrorInvalidValue;
    bool vec = aligned(acc.x, 4 * sizeof *acc.x) && aligned(acc.dy, 4 * sizeof *acc.x);
    if (g.L == 1 && vec && g.C % 4 == 0) {
        int tx = rows_tile(g.C / 4);
        dim3 grid((unsigned)((g.C / 4 + tx - 1) / tx), (unsigned)g.S);
        bn_reduce_rows4<Acc, Fin><<<grid, dim3(tx, THREADS / tx), 0, st>>>(pa, pb, acc, g.N, g.C, g.S, fin, tickets);
    } else if (g.L == 1) {
        int tx = rows_tile(g.C);
        dim3 grid((unsigned)((g.C + tx - 1) / tx), (unsigned)g.S);
        bn_reduce_rows<Acc, Fin><<<grid, dim3(tx, THREADS / tx), 0, st>>>(pa, pb, acc, g.N, g.C, g.S, fin, tickets);
    } else {
        if (g.C > 0x7fffffff) return cudaErrorInvalidValue;
        dim3 grid((unsigned)g.C, (unsigned)g.S);
        if (vec && split_unit(g.L) == 4)
            bn_reduce_planes4<Acc, Fin><<<grid, THREADS, 0, st>>>(pa, pb, acc, g.N, g.C, g.L, g.S, fin, tickets);
        else
            bn_reduce_planes<Acc, Fin><<<grid, THREADS, 0, st>>>(pa, pb, acc, g.N, g.C, g.L, g.S, fin, tickets);
    }
    return cudaGetLastError();
}

/* coef(3, C) of channel c for y = (x - mean)*s + beta, s = invstd*gamma in double, as the CPU's bn_coef:
 * (hi, (float)s, (float)(beta - (mean - hi)*s)) with hi = (float)mean. bn_normalize's x - hi is exact near the
 * mean and the mean's bits below float's count through the shift (a mean of 100 and a std of 1e-3 are
 * normalized to float rounding, not to 0.4% of a std); a float mean (the running one) gives shift = beta. */
__device__ static void normalize_coef(float *coef, int64_t c, int64_t C, double mean, float hi, double s, float beta)
{
    coef[c] = hi;
    coef[C + c] = (float)s;
    coef[2 * C + c] = (float)((double)beta - (mean - (double)hi) * s);
}

/* ---- the finalizes: T threads per channel over its S partials ----
 * Block (T, THREADS/T), a group of THREADS/T channels at a time: each channel's T lanes take its splits l, l + T, ...
 * in order, then merge in a fixed tree: the same order every run (the shape fixes S and T), and S partials of a
 * channel cost about 4 steps and a tree, not S (a thread per channel walking S = 784 splits in double, two int64 and
 * two double divisions a step, took longer than the pass over x itself at 64x16x28x28). Batchnorm's finalize
 * launches merge a group as the reduce's last block merges its own in the reduce's launch (WelfordFin, GradFin:
 * sums in double without division, the lanes of a group interleaved so that a warp reads consecutive channels);
 * SyncBatchNorm's and the channel totals take a row per channel (split_tree). */

/* Threads per channel: the power of two from 32 to THREADS that is >= S/4. A function of S only. */
static inline int fin_threads(int S)
{
    int t = 32;
    while (t < THREADS && 4 * t < S) t <<= 1;
    return t;
}

/* The launch shape of a finalize over C channels of S splits. */
static inline dim3 fin_block(int S) { return dim3((unsigned)fin_threads(S), (unsigned)(THREADS / fin_threads(S))); }
static inline unsigned fin_grid(int64_t C, int S)
{
    int64_t per = THREADS / fin_threads(S), b = (C + per - 1) / per;
    return (unsigned)(b < 1 ? 1 : b > MAX_BLOCKS ? MAX_BLOCKS : b);
}

/* The merge of v over threadIdx.x within each row threadIdx.y of the block (blockDim.x a power of two, THREADS
 * threads in all), in fin_tree's fixed order (x with x + h for h = blockDim.x/2, ..., 1); every thread of the block
 * calls it and gets its row's result. */
template <class T, class Merge> __device__ static T split_tree(T v, Merge merge)
{
    FinLanes f;
    f.i = (int)(threadIdx.y * blockDim.x + threadIdx.x);
    f.lane = (int)threadIdx.x;
    f.lanes = (int)blockDim.x;
    f.stride = 1;
    f.head = f.i - f.lane;
    return fin_tree(v, f, merge);
}

/* Loops c0 over the first channel of each block's turn; c = c0 + threadIdx.y may be past C (then the thread
 * only takes part in the trees: the loop is uniform over the block). */
#define FOR_CHANNEL_ROWS(c0, C) \
    for (int64_t c0 = (int64_t)blockIdx.x * blockDim.y; c0 < (C); c0 += (int64_t)gridDim.x * blockDim.y)

__device__ static double2 add2(double2 a, double2 b) { return make_double2(a.x + b.x, a.y + b.y); }

/* The sums (a, b) over splits s of channel c of pa(S, C), pb(S, C) in a fixed order (see above; (0, 0) when
 * !on); every thread of the block calls it. */
template <class F> __device__ static double2 split_sums(const F *pa, const F *pb, int64_t c, int64_t C, int S, bool on)
{
    double2 v = make_double2(0.0, 0.0);
    if (on)
        for (int s = threadIdx.x; s < S; s += blockDim.x)
            v = add2(v, make_double2(pa[s * C + c], pb ? (double)pb[s * C + c] : 0.0));
    return split_tree(v, [](double2 a, double2 b) { return add2(a, b); });
}

/* Channel c's outputs from its mean and biased variance var over M values: saved(3, C) (unless NULL) = (mean_hi,
 * mean_lo, invstd), with update the running statistics moved toward mean and var*M/(M-1), coef(3, C) by
 * normalize_coef with s = invstd*gamma. */
__device__ static void stats_out(float *coef, float *saved, float *rmean, float *rvar, const float *gamma,
                                 const float *beta, int64_t c, int64_t C, double mean, double var, int64_t M,
                                 bool update, double mom, double eps)
{
    double invstd = 1.0 / sqrt(var + eps);
    float hi = (float)mean;
    if (saved) {
        saved[c] = hi;
        saved[C + c] = (float)(mean - (double)hi);
        saved[2 * C + c] = (float)invstd;
    }
    if (update) {
        rmean[c] = (float)((1.0 - mom) * rmean[c] + mom * mean);
        rvar[c] = (float)((1.0 - mom) * rvar[c] + mom * var * (double)M / (double)(M - 1));
    }
    normalize_coef(coef, c, C, mean, hi, invstd * (gamma ? gamma[c] : 1.0f), beta ? beta[c] : 0.0f);
}

/* The statistics' finalize in the reduce's launch (a Fin; see above): per channel, in double, from the partial
 * (mean, m2) of each split of x(N, C, L) less the pivot x(0, c, 0): the mean's shift mu = sum_s n_s mean_s / M, then
 * m2 = sum_s m2_s + n_s (mean_s - mu)^2 (two passes over the partials in split order, with no division in either),
 * mean = pivot + mu and var = m2 / M (a NaN stays NaN); stats_out's outputs. */
template <typename T> struct WelfordFin {
    float *coef, *saved, *rmean, *rvar;
    const float *gamma, *beta;
    const T *x;
    int64_t L, M;
    bool update;
    double mom, eps;
    __device__ void operator()(const float *pm, const float *pm2, int64_t c0, int64_t c1, int S, int64_t C) const
    {
        FinLanes f = fin_lanes(c0, c1);
        int V = split_unit(L);
        int64_t q = M / V;
        auto add = [](double a, double b) { return a + b; };
        double t = 0.0;
        if (f.on)
            for (int s = f.lane; s < S; s += f.lanes) t += (double)split_len(s, q, S, V) * (double)pm[s * C + f.c];
        double mu = fin_tree(t, f, add) / (double)M;
        t = 0.0;
        if (f.on)
            for (int s = f.lane; s < S; s += f.lanes) {
                double d = (double)pm[s * C + f.c] - mu;
                t += (double)pm2[s * C + f.c] + (double)split_len(s, q, S, V) * d * d;
            }
        double m2 = fin_tree(t, f, add);
        if (f.on && f.lane == 0)
            stats_out(coef, saved, rmean, rvar, gamma, beta, f.c, C, (M > 0 ? (double)to_float(x[f.c * L]) : 0.0) + mu,
                      m2 < 0 ? 0.0 : m2 / (double)M, M, update, mom, eps);
    }
};

/* The loop of a finalize launch (fin_grid, fin_block: blockDim.y channels a block at a time) over the channel groups
 * [c0, c1), uniform over the block. */
#define FOR_FIN_GROUPS(c0, c1, C)                                                                             \
    for (int64_t c0 = (int64_t)blockIdx.x * blockDim.y, c1; c1 = c0 + blockDim.y < (C) ? c0 + blockDim.y : (C), \
         c0 < (C); c0 += (int64_t)gridDim.x * blockDim.y)

/* The statistics' finalize in a launch of its own: each group of channels merged as the reduce's last block merges
 * its group in the reduce's launch (fin, a WelfordFin: division-free sums in double, lanes of a channel reading its
 * partials at once); with use_running, stats_out of rmean and rvar instead (a thread a channel). */
template <typename T>
__global__ void bn_finalize(WelfordFin<T> fin, const float *pmean, const float *pm2, int64_t C, int S, bool use_running)
{
    FOR_FIN_GROUPS(c0, c1, C) {
        if (!use_running) {
            fin(pmean, pm2, c0, c1, S, C);
            continue;
        }
        int64_t c = c0 + threadIdx.y;
        if (c < c1 && threadIdx.x == 0)
            stats_out(fin.coef, fin.saved, fin.rmean, fin.rvar, fin.gamma, fin.beta, c, C, fin.rmean[c], fin.rvar[c],
                      fin.M, fin.update, fin.mom, fin.eps);
    }
}

/* ---- the elementwise passes: normalize and dx ----
 * x, y, dy, dx of element type T (f32, f16 or bf16), each value converted to float as loaded and the result rounded
 * to T once as stored (to nearest even). A thread an element, or W of them in one vector load (Pack<T, W>: every W
 * consecutive values in one channel -- NCHW with L % W == 0 -- or in W consecutive channels -- rows with
 * C % W == 0 -- and the pointers aligned to W values): W = 4 for f32 (a float4), 8 for halves (16 bytes), or 4
 * halves (8 bytes) when the shape or alignment allow only that (14x14 planes: L % 8 != 0). No scalar tail: the
 * vector kernels run only when the shape is a whole number of vectors, else the scalar ones run. */

/* y = (x - coef(0, c)) * coef(1, c) + coef(2, c), rounded like the CPU's float expression; with relu,
 * y < 0 ? 0 : y (the relu layer's: NaN stays NaN, -0 stays -0) */
__device__ static float norm1(float x, const float *coef, int64_t c, int64_t C, bool relu)
{
    float v = __fadd_rn(__fmul_rn(__fsub_rn(x, coef[c]), coef[C + c]), coef[2 * C + c]);
    return relu && v < 0.0f ? 0.0f : v;
}

/* y(N, C, L) = norm1(x(N, C, L)), a thread an element */
template <typename T>
__global__ void bn_normalize(T *y, const T *x, const float *coef, int64_t n, int64_t C, int64_t L, bool relu)
{
    int64_t j0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    ChanWalk w(j0, step, L, C);
    for (int64_t j = j0; j < n; j += step, w.next()) y[j] = from_float<T>(norm1(to_float(x[j]), coef, w.c, C, relu));
}

/* The channel of value k of vector number v (W values): with rows (x(M, C), C % W == 0) the walk is over
 * (M*C/W, C/W) and the channels are W*w.c + k; else (L % W == 0) over (N*C, L/W) and all W are w.c. */
#define CHANW(w, rows, W, k) ((rows) ? (W) * (w).c + (k) : (w).c)

/* The walk over the vectors of W values of x(N, C, L) (see CHANW) from j0 by step. */
__device__ static ChanWalk vec_walk(int64_t j0, int64_t step, int64_t C, int64_t L, bool rows, int W)
{
    return ChanWalk(j0, step, rows ? 1 : L / W, rows ? C / W : C);
}

/* y(N, C, L) = norm1(x(N, C, L)) over nv vectors of W values (see CHANW) */
template <typename T, int W>
__global__ void bn_normalize_vec(Pack<T, W> *y, const Pack<T, W> *x, const float *coef, int64_t nv, int64_t C,
                                 int64_t L, bool rows, bool relu)
{
    int64_t j0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    ChanWalk w = vec_walk(j0, step, C, L, rows, W);
    for (int64_t j = j0; j < nv; j += step, w.next()) {
        Pack<T, W> v = x[j];
#pragma unroll
        for (int k = 0; k < W; k++)
            v.v[k] = from_float<T>(norm1(to_float(v.v[k]), coef, CHANW(w, rows, W, k), C, relu));
        y[j] = v;
    }
}

/* Channel c's outputs of the gradient sums sdy, sdyx: dgamma(C) (+)= sdyx and dbeta(C) (+)= sdy when not NULL
 * (add_*: +=, else =), coef(3, C) = k*(M, sdy, sdyx) as float with k = gamma*invstd/M (gamma 1 when NULL, invstd
 * from saved(3, C)). */
__device__ static void grad_out(float *coef, float *dgamma, bool add_dgamma, float *dbeta, bool add_dbeta,
                                const float *gamma, const float *saved, int64_t c, int64_t C, int64_t M, double sdy,
                                double sdyx)
{
    if (dgamma) dgamma[c] = add_dgamma ? dgamma[c] + (float)sdyx : (float)sdyx;  /* never 0 * old */
    if (dbeta) dbeta[c] = add_dbeta ? dbeta[c] + (float)sdy : (float)sdy;
    double k = (gamma ? gamma[c] : 1.0) * (double)saved[2 * C + c] / (double)M;
    coef[c] = (float)(k * (double)M);
    coef[C + c] = (float)(k * sdy);
    coef[2 * C + c] = (float)(k * sdyx);
}

/* The gradient sums' finalize in the reduce's launch (a Fin; see above): per channel sdy, sdyx in double from the
 * partials in split order; grad_out's outputs. */
struct GradFin {
    float *coef, *dgamma, *dbeta;
    bool add_dgamma, add_dbeta;
    const float *gamma, *saved;
    int64_t M;
    __device__ void operator()(const float *pdy, const float *pdyx, int64_t c0, int64_t c1, int S, int64_t C) const
    {
        FinLanes f = fin_lanes(c0, c1);
        double2 v = make_double2(0.0, 0.0);
        if (f.on)
            for (int s = f.lane; s < S; s += f.lanes) v = add2(v, make_double2(pdy[s * C + f.c], pdyx[s * C + f.c]));
        v = fin_tree(v, f, [](double2 a, double2 b) { return add2(a, b); });
        if (f.on && f.lane == 0)
            grad_out(coef, dgamma, add_dgamma, dbeta, add_dbeta, gamma, saved, f.c, C, M, v.x, v.y);
    }
};

/* The gradient sums' finalize in a launch of its own: each group of channels merged as GradFin merges the reduce's
 * last block's group. */
__global__ void bn_grad_finalize(GradFin fin, const float *pdy, const float *pdyx, int64_t C, int S)
{
    FOR_FIN_GROUPS(c0, c1, C) fin(pdy, pdyx, c0, c1, S, C);
}

/* coef(0, c)*dy - coef(1, c) - x_hat*coef(2, c) (+ old), x_hat from saved(3, C); dy masked with relu */
__device__ static float dx1(float old, bool add, float x, float dy, const float *saved, const float *coef, int64_t c,
                            int64_t C, bool relu)
{
    float d = relu_dy(dy, x, saved, c, C, relu);
    float g = coef[c] * d - coef[C + c] - x_hat(x, saved, c, C) * coef[2 * C + c];
    return add ? old + g : g;
}

/* dx(N, C, L) (+)= dx1(...), a thread an element */
template <typename T>
__global__ void bn_dx(T *dx, bool add, const T *x, const T *dy, const float *saved, const float *coef, int64_t n,
                      int64_t C, int64_t L, bool relu)
{
    int64_t j0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    ChanWalk w(j0, step, L, C);
    for (int64_t j = j0; j < n; j += step, w.next())
        dx[j] = from_float<T>(dx1(add ? to_float(dx[j]) : 0.0f, add, to_float(x[j]), to_float(dy[j]), saved, coef,
                                  w.c, C, relu));
}

/* dx(N, C, L) (+)= dx1(...) over nv vectors of W values (see CHANW) */
template <typename T, int W>
__global__ void bn_dx_vec(Pack<T, W> *dx, bool add, const Pack<T, W> *x, const Pack<T, W> *dy, const float *saved,
                          const float *coef, int64_t nv, int64_t C, int64_t L, bool rows, bool relu)
{
    int64_t j0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    ChanWalk w = vec_walk(j0, step, C, L, rows, W);
    for (int64_t j = j0; j < nv; j += step, w.next()) {
        Pack<T, W> o = {}, xv = x[j], g = dy[j];
        if (add) o = dx[j];
#pragma unroll
        for (int k = 0; k < W; k++)
            o.v[k] = from_float<T>(dx1(add ? to_float(o.v[k]) : 0.0f, add, to_float(xv.v[k]), to_float(g.v[k]), saved,
                                       coef, CHANW(w, rows, W, k), C, relu));
        dx[j] = o;
    }
}

/* ---- SyncBatchNorm: per-split sums in double ----
 * A state is a double2: forward (sum x, sum x*x), backward (sum dy, sum dy*x_hat); states merge by adding,
 * in a fixed tree order. The kernels are bn_reduce's (the same splits, walks and float4 loads) with this
 * accumulator. */

template <typename T> struct SyncSums {
    typedef double2 State;
    typedef double Part;
    const T *x, *dy;              /* dy NULL: forward */
    const float *saved;           /* saved(3, C) for x_hat, (6, C) with relu */
    int64_t C;
    bool relu;                    /* dy masked by the forward's relu */
    __device__ static double2 zero() { return make_double2(0.0, 0.0); }
    __device__ static void put(double2 v, double *pa, double *pb, int64_t i)
    {
        pa[i] = v.x;
        pb[i] = v.y;
    }
    __device__ float pivot(int64_t c) const { return (void)c, 0.0f; }
    __device__ double2 add_val(double2 v, float x0, float dy0, int64_t c, float k) const
    {
        (void)k;
        if (!dy) {
            double xv = x0;
            return make_double2(v.x + xv, v.y + xv * xv);
        }
        double g = relu_dy(dy0, x0, saved, c, C, relu);
        return make_double2(v.x + g, v.y + g * (double)x_hat(x0, saved, c, C));
    }
    __device__ static double2 merge(double2 a, double2 b) { return add2(a, b); }
};

/* sums(2, C) (+ the count), dgamma(C), dbeta(C) from pa(S, C), pb(S, C): T threads per channel, the splits in
 * a fixed order (none when M = 0: this rank has no values) */
__global__ void sync_collect(double *sums, float *dgamma, bool add_dgamma, float *dbeta, bool add_dbeta,
                             const double *pa, const double *pb, bool count, int64_t C, int64_t M, int S)
{
    FOR_CHANNEL_ROWS(c0, C) {
        int64_t c = c0 + threadIdx.y;
        double2 t = split_sums(pa, pb, c, C, S, c < C && M > 0);
        if (c >= C || threadIdx.x != 0) continue;
        double a = t.x, b = t.y;
        sums[c] = a;
        sums[C + c] = b;
        if (count && c == 0) sums[2 * C] = (double)M;
        if (dgamma) dgamma[c] = add_dgamma ? dgamma[c] + (float)b : (float)b;  /* never 0 * old */
        if (dbeta) dbeta[c] = add_dbeta ? dbeta[c] + (float)a : (float)a;
    }
}

/* coef(3, C), saved(3, C), rmean(C), rvar(C) from sums(2, C) over n = sums[2C] values per channel: one thread per
 * channel (no loop over splits) */
__global__ void sync_finalize(float *coef, float *saved, float *rmean, float *rvar, const float *gamma,
                              const float *beta, const double *sums, int64_t C, bool update, double mom, double eps)
{
    double n = sums[2 * C];
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
        double mean = sums[c] / n, var = sums[C + c] / n - mean * mean;
        if (var < 0) var = 0;  /* rounding, for a constant channel */
        double invstd = 1.0 / sqrt(var + eps);
        float hi = (float)mean;
        saved[c] = hi;
        saved[C + c] = (float)(mean - (double)hi);
        saved[2 * C + c] = (float)invstd;
        if (update) {
            rmean[c] = (float)((1.0 - mom) * rmean[c] + mom * mean);
            rvar[c] = (float)((1.0 - mom) * rvar[c] + mom * var * n / (n - 1.0));
        }
        normalize_coef(coef, c, C, mean, hi, invstd * (gamma ? gamma[c] : 1.0f), beta ? beta[c] : 0.0f);
    }
}

/* coef(3, C) from sums(2, C) over n = sums[2C] values per channel: one thread per channel, as bn_grad_finalize */
__global__ void sync_grad_coef(float *coef, const float *gamma, const float *saved, const double *sums, int64_t C)
{
    double n = sums[2 * C];
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
        double k = (gamma ? gamma[c] : 1.0) * (double)saved[2 * C + c] / n;
        coef[c] = (float)(k * n);
        coef[C + c] = (float)(k * sums[c]);
        coef[2 * C + c] = (float)(k * sums[C + c]);
    }
}

/* ---- windowed pooling ----
 * Index type I: int32_t when every index of the call fits, else int64_t (32-bit division is much faster). */

template <typename I> struct Pool {
    I N, C, H, W, OH, OW, k, s, p;
    bool nhwc;
    /* memory index of element (n, c, h, w) of an (N, C, h_n, w_n) tensor */
    __device__ I at(I n, I c, I h, I w, I hn, I wn) const
    {
        return nhwc ? ((n * hn + h) * wn + w) * C + c : ((n * C + c) * hn + h) * wn + w;
    }
    /* (n, c, h, w) of memory index e of an (N, C, hn, wn) tensor */
    __device__ void coords(I e, I hn, I wn, I *n, I *c, I *h, I *w) const
    {
        if (nhwc) {
            *c = e % C;
            e /= C;
            *w = e % wn;
            e /= wn;
            *h = e % hn;
            *n = e / hn;
        } else {
            *w = e % wn;
            e /= wn;
            *h = e % hn;
            e /= hn;
            *c = e % C;
            *n = e / C;
        }
    }
    /* the window of output (oh, ow) clipped to the input: rows [*h0, *h1), columns [*w0, *w1) (never empty:
     * p <= k/2) */
    __device__ void window(I oh, I ow, I *h0, I *h1, I *w0, I *w1) const
    {
        *h0 = oh * s - p;
        *w0 = ow * s - p;
        *h1 = *h0 + k < H ? *h0 + k : H;
        *w1 = *w0 + k < W ? *w0 + k : W;
        if (*h0 < 0) *h0 = 0;
        if (*w0 < 0) *w0 = 0;
    }
    /* the outputs whose windows hold input row h (or column): [*o0, *o1) */
    __device__ void span(I h, I out, I *o0, I *o1) const
    {
        *o0 = h + p - k < 0 ? 0 : (h + p - k) / s + 1;
        *o1 = (h + p) / s + 1;
        if (*o1 > out) *o1 = out;
    }
};

template <typename I> static Pool<I> pool_of(const struct glia__pool_geom &g)
{
    return Pool<I>{(I)g.N, (I)g.C, (I)g.H, (I)g.W, (I)g.OH, (I)g.OW, (I)g.k, (I)g.s, (I)g.p, g.nhwc};
}

/* Whether every index of the call fits int32_t: inputs, outputs, window arithmetic, and a grid-stride
 * loop's last step past the end (at most MAX_BLOCKS * THREADS). */
static bool pool_small(const struct glia__pool_geom &g)
{
    const int64_t lim = 0x7fffffff - (int64_t)MAX_BLOCKS * THREADS;
    int64_t H = g.H + 2 * g.p, W = g.W + 2 * g.p;
    return g.N * g.C * H * W < lim && g.N * g.C * g.OH * g.OW < lim && g.k < lim / 4 && g.s < lim / 4;
}

/* Queues launch(Pool<I>), I = int32_t when every index fits (pool_small), else int64_t, unless there are no n
 * threads to run; returns the launch's error. */
template <class Launch> static cudaError_t pool_launch(int64_t n, const struct glia__pool_geom &g, Launch launch)
{
    if (n == 0) return cudaSuccess;
    if (pool_small(g)) launch(pool_of<int32_t>(g));
    else launch(pool_of<int64_t>(g));
    return cudaGetLastError();
}

/* The pooling kernels' grid-stride walks, one element a thread. Over the outputs: f(o, n, c, h0, h1, w0, w1) with o an
 * output's memory index, (n, c) its sample and channel, [h0, h1) x [w0, w1) its window clipped to the input. */
template <typename I, class F> __device__ static void each_output(Pool<I> g, F f)
{
    I total = g.N * g.C * g.OH * g.OW;
    for (I o = (I)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (I)gridDim.x * blockDim.x) {
        I n, c, oh, ow, h0, h1, w0, w1;
        g.coords(o, g.OH, g.OW, &n, &c, &oh, &ow);
        g.window(oh, ow, &h0, &h1, &w0, &w1);
        f(o, n, c, h0, h1, w0, w1);
    }
}

/* Over the input elements: f(e, n, c, h, w, oh0, oh1, ow0, ow1) with e an element's memory index, (n, c, h, w) its
 * coordinates, [oh0, oh1) x [ow0, ow1) the outputs whose windows hold it. */
template <typename I, class F> __device__ static void each_input(Pool<I> g, F f)
{
    I total = g.N * g.C * g.H * g.W;
    for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (I)gridDim.x * blockDim.x) {
        I n, c, h, w, oh0, oh1, ow0, ow1;
        g.coords(e, g.H, g.W, &n, &c, &h, &w);
        g.span(h, g.OH, &oh0, &oh1);
        g.span(w, g.OW, &ow0, &ow1);
        f(e, n, c, h, w, oh0, oh1, ow0, ow1);
    }
}

/* y(N, C, OH, OW) = max over the window of x(N, C, H, W); arg (if not NULL) = its plane offset. One
 * thread per output, in y's memory order; the window scan and its tie rule are the CPU's. Values of type T, compared
 * as f32 (exactly: every f16 and bf16 is an f32). */
template <typename T, typename I> __global__ void maxpool_fwd(T *y, int32_t *arg, const T *x, Pool<I> g)
{
    each_output(g, [&](I o, I n, I c, I h0, I h1, I w0, I w1) {
        I bi = h0 * g.W + w0;  /* padding <= size/2: every window holds an input element */
        T best = x[g.at(n, c, h0, w0, g.H, g.W)];
        for (I h = h0; h < h1; h++)
            for (I w = w0; w < w1; w++) {
                T v = x[g.at(n, c, h, w, g.H, g.W)];
                if (to_float(v) > to_float(best) || isnan(to_float(v))) {
                    best = v;
                    bi = h * g.W + w;
                }
            }
        y[o] = best;
        if (arg) arg[o] = (int32_t)bi;
    });
}

/* dx(N, C, H, W) (+)= the dy of the outputs whose arg is this element: one thread per input element
 * gathers over the windows holding it in (oh, ow) order, the order of the CPU's scatter; the sum in f32, rounded to
 * T once. */
template <typename T, typename I>
__global__ void maxpool_bwd(T *dx, bool add, const T *dy, const int32_t *arg, Pool<I> g)
{
    each_input(g, [&](I e, I n, I c, I h, I w, I oh0, I oh1, I ow0, I ow1) {
        int32_t me = (int32_t)(h * g.W + w);
        float acc = add ? to_float(dx[e]) : 0.0f;
        for (I oh = oh0; oh < oh1; oh++)
            for (I ow = ow0; ow < ow1; ow++) {
                I o = g.at(n, c, oh, ow, g.OH, g.OW);
                if (arg[o] == me) acc = __fadd_rn(acc, to_float(dy[o]));
            }
        dx[e] = from_float<T>(acc);
    });
}

/* y(N, C, OH, OW) = (sum over the clipped window of x, in h, w order) * inv: one thread per output; f32 arithmetic,
 * rounded to T once */
template <typename T, typename I> __global__ void avgpool_fwd(T *y, const T *x, float inv, Pool<I> g)
{
    each_output(g, [&](I o, I n, I c, I h0, I h1, I w0, I w1) {
        float sum = 0.0f;
        for (I h = h0; h < h1; h++)
            for (I w = w0; w < w1; w++) sum = __fadd_rn(sum, to_float(x[g.at(n, c, h, w, g.H, g.W)]));
        y[o] = from_float<T>(__fmul_rn(sum, inv));
    });
}

/* dx(N, C, H, W) (+)= sum over the windows holding this element, in (oh, ow) order, of dy * inv */
template <typename T, typename I> __global__ void avgpool_bwd(T *dx, bool add, const T *dy, float inv, Pool<I> g)
{
    each_input(g, [&](I e, I n, I c, I h, I w, I oh0, I oh1, I ow0, I ow1) {
        float acc = add ? to_float(dx[e]) : 0.0f;
        for (I oh = oh0; oh < oh1; oh++)
            for (I ow = ow0; ow < ow1; ow++)
                acc = __fadd_rn(acc, __fmul_rn(to_float(dy[g.at(n, c, oh, ow, g.OH, g.OW)]), inv));
        dx[e] = from_float<T>(acc);
    });
}

/* ---- global average pooling ---- */

/* y(P) = (sum over HW of x(P, HW)) * inv, P = N*C planes: one warp per plane, lanes strided over the
 * plane, then a fixed shuffle tree. Values of type T, summed in f32, the mean rounded once (here and below). */
template <typename T> __global__ void gap_fwd_planes(T *y, const T *x, int64_t P, int64_t HW, float inv)
{
    int lane = threadIdx.x & 31;
    int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t pl = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); pl < P; pl += warps) {
        const T *xp = x + pl * HW;
        float sum = 0.0f;
        for (int64_t i = lane; i < HW; i += 32) sum += to_float(xp[i]);
        for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
        if (lane == 0) y[pl] = from_float<T>(sum * inv);
    }
}

/* y(N, C) = (sum over HW of x(N, HW, C)) * inv: block (TILE_C, TILE_R) takes channels
 * blockIdx.x*TILE_C + threadIdx.x of samples blockIdx.y, + gridDim.y, ...; row lanes merge in order. */
template <typename T> __global__ void gap_fwd_rows(T *y, const T *x, int64_t N, int64_t C, int64_t HW, float inv)
{
    __shared__ float part[TILE_R][TILE_C];
    int64_t c = (int64_t)blockIdx.x * TILE_C + threadIdx.x;
    for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
        float sum = 0.0f;
        if (c < C)
            for (int64_t i = threadIdx.y; i < HW; i += TILE_R) sum += to_float(x[(n * HW + i) * C + c]);
        part[threadIdx.y][threadIdx.x] = sum;
        __syncthreads();
        if (threadIdx.y == 0 && c < C) {
            for (int r = 1; r < TILE_R; r++) sum += part[r][threadIdx.x];
            y[n * C + c] = from_float<T>(sum * inv);
        }
        __syncthreads();  /* part is rewritten by the next sample */
    }
}

/* dx(N, C, HW) (+)= dy(N, C) * inv (nhwc: dx(N, HW, C)); one thread per element of dx */
template <typename T>
__global__ void gap_bwd(T *dx, bool add, const T *dy, int64_t n, int64_t C, int64_t HW, bool nhwc, float inv)
{
    int64_t j0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    /* NCHW: row o of (N*C, HW) is dy's index; NHWC: dy(n, c) with n the row of (N, HW*C), c = j % C */
    RowWalk w(j0, step, nhwc ? HW * C : HW);
    ChanWalk cw(j0, step, 1, C);
    for (int64_t j = j0; j < n; j += step, w.next(), cw.next()) {
        float g = to_float(dy[nhwc ? w.o * C + cw.c : w.o]) * inv;
        dx[j] = from_float<T>(add ? to_float(dx[j]) + g : g);
    }
}

/* ---- concat ---- */

__device__ static float4 operator+(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }

/* a + b: for half types in f32, rounded once */
__device__ static float4 add_vals(float4 a, float4 b) { return a + b; }
template <typename T> __device__ static T add_vals(T a, T b) { return from_float<T>(to_float(a) + to_float(b)); }

/* dst(rows, width) (+)= src(rows, width), row pitches dpitch and spitch, in units of T (float, float4 or a half
 * type) */
template <typename T>
__global__ void copy_rows(T *dst, int64_t dpitch, const T *src, int64_t spitch, int64_t rows, int64_t width, bool add)
{
    int64_t n = rows * width, j0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    RowWalk w(j0, step, width);
    for (int64_t j = j0; j < n; j += step, w.next()) {
        T v = src[w.o * spitch + w.i];
        T *d = &dst[w.o * dpitch + w.i];
        if (add) v = add_vals(v, *d);
        *d = v;
    }
}

/* y(C) = the splits of part(S, C) added in double in a fixed order (+ y when beta is 1): T threads a channel, as
 * bn_grad_finalize. */
__global__ void channel_total(float *y, const float *part, int64_t C, int S, float beta)
{
    FOR_CHANNEL_ROWS(c0, C) {
        int64_t c = c0 + threadIdx.y;
        double t = split_sums(part, (const float *)NULL, c, C, S, c < C).x;
        if (c < C && threadIdx.x == 0) y[c] = beta != 0.0f ? (float)((double)y[c] + t) : (float)t;
    }
}

}  // namespace

/* ---- the C entry points ---- */

/* The values a thread of the elementwise passes over x(N, C, L) of element type T takes (see bn_normalize_vec):
 * the most of 16 bytes' worth, then 8 bytes' worth of halves, whose W consecutive values lie in one channel
 * (L % W == 0) or in W consecutive channels (rows, C % W == 0), with the three pointers aligned to W values; else 1. */
template <typename T> static int vec_width(struct glia__bn_geom g, const void *a, const void *b, const void *c)
{
    for (int W = 16 / (int)sizeof(T); W >= 4; W /= 2) {
        bool fits = g.L == 1 ? g.C % W == 0 : g.L % W == 0;
        if (fits && ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % (W * sizeof(T)) == 0) return W;
    }
    return 1;
}

/* Calls f(Pack<T, W>()) for W = w (4, or 8 for halves); false for another w. */
template <typename T, class F> static bool by_width(int w, F f)
{
    if (w == 4) return f(Pack<T, 4>()), true;
    if constexpr (sizeof(T) == 2) {
        if (w == 8) return f(Pack<T, 8>()), true;
    }
    return false;
}

/* About BN_BLOCKS blocks in all (a few waves of 132 SMs at 8 blocks each, so that the statistics pass runs
 * at the memory's rate even for C = 16), at least 2 values of a channel per thread (512 a plane block, 2*TY
 * rows a rows block), at most 2^22 values per block (a block's count stays exact in float); S <= 65535.
 * A function of the shape only (and of GLIA_CUDA_BN_BLOCKS, which replaces BN_BLOCKS for a benchmark's sweep): the
 * sums run in the same order on every call. */
#define BN_BLOCKS 4096
extern "C" struct glia__bn_geom glia__cuda_bn_geom(int64_t N, int64_t C, int64_t L)
{
    int64_t M = N * L;
    bool rows = L == 1;
    int tx = rows_tile(C);
    int64_t units = rows ? (C + tx - 1) / tx : C, least = rows ? 2 * (THREADS / tx) : 2 * THREADS;
    if (units < 1) units = 1;
    const char *knob = getenv("GLIA_CUDA_BN_BLOCKS");  /* a benchmark's sweep (docs/cuda.md) */
    int64_t blocks = knob && atoll(knob) > 0 ? atoll(knob) : BN_BLOCKS;
    int64_t S = (blocks + units - 1) / units, most = M / least, need = (M + (1 << 22) - 1) >> 22;
    if (S > most) S = most;
    if (S < need) S = need;
    if (S < 1) S = 1;
    struct glia__bn_geom g = {N, C, L, (int)(S < 65535 ? S : 65535)};
    return g;
}

extern "C" cudaError_t glia__cuda_channel_sum(float *y, float *part, const float *x, struct glia__bn_geom g,
                                              float beta, cudaStream_t st)
{
    if (g.C == 0) return cudaSuccess;
    if (g.N * g.L == 0) return beta != 0.0f ? cudaSuccess : cudaMemsetAsync(y, 0, (size_t)g.C * sizeof *y, st);
    cudaError_t e = bn_reduce(part, (float *)NULL, ChannelSum{x}, g, st);
    if (e != cudaSuccess) return e;
    channel_total<<<fin_grid(g.C, g.S), fin_block(g.S), 0, st>>>(y, part, g.C, g.S, beta);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_bn_stats(float *pmean, float *pm2, const void *x, enum glia_dtype t,
                                           struct glia__bn_geom g, cudaStream_t st)
{
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        return bn_reduce(pmean, pm2, Welford<T>{(const T *)x, g.L}, g, st);
    });
}

extern "C" cudaError_t glia__cuda_bn_grad_stats(float *pdy, float *pdyx, const void *x, const void *dy,
                                                enum glia_dtype t, const float *saved, bool relu,
                                                struct glia__bn_geom g, cudaStream_t st)
{
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        return bn_reduce(pdy, pdyx, GradSums<T>{(const T *)x, (const T *)dy, saved, g.C, relu}, g, st);
    });
}

extern "C" cudaError_t glia__cuda_bn_stats_finalize(float *coef, float *saved, float *rmean, float *rvar,
                                                    const float *gamma, const float *beta, const void *x,
                                                    enum glia_dtype t, float *pmean, float *pm2, unsigned *tickets,
                                                    struct glia__bn_geom g, bool update, double momentum, double eps,
                                                    cudaStream_t st)
{
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        WelfordFin<T> fin{coef, saved, rmean, rvar, gamma, beta, (const T *)x, g.L, g.N * g.L, update, momentum, eps};
        return bn_reduce(pmean, pm2, Welford<T>{(const T *)x, g.L}, g, st, fin, tickets);
    });
}

extern "C" cudaError_t glia__cuda_bn_grad_stats_finalize(float *coef, float *dgamma, bool add_dgamma, float *dbeta,
                                                         bool add_dbeta, const float *gamma, const float *saved,
                                                         const void *x, const void *dy, enum glia_dtype t, bool relu,
                                                         float *pdy, float *pdyx, unsigned *tickets,
                                                         struct glia__bn_geom g, cudaStream_t st)
{
    GradFin fin{coef, dgamma, dbeta, add_dgamma, add_dbeta, gamma, saved, g.N * g.L};
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        return bn_reduce(pdy, pdyx, GradSums<T>{(const T *)x, (const T *)dy, saved, g.C, relu}, g, st, fin, tickets);
    });
}

extern "C" cudaError_t glia__cuda_bn_finalize(float *coef, float *saved, float *rmean, float *rvar, const float *gamma,
                                              const float *beta, const void *x, enum glia_dtype t, const float *pmean,
                                              const float *pm2, struct glia__bn_geom g, bool use_running, bool update,
                                              double momentum, double eps, cudaStream_t st)
{
    if (g.C == 0) return cudaSuccess;
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        WelfordFin<T> fin{coef, saved, rmean, rvar, gamma, beta, (const T *)x, g.L, g.N * g.L, update, momentum, eps};
        bn_finalize<T><<<fin_grid(g.C, g.S), fin_block(g.S), 0, st>>>(fin, pmean, pm2, g.C, g.S, use_running);
        return cudaGetLastError();
    });
}

extern "C" cudaError_t glia__cuda_bn_normalize(void *y, const void *x, enum glia_dtype t, const float *coef,
                                               bool relu, struct glia__bn_geom g, cudaStream_t st)
{
    int64_t n = g.N * g.C * g.L;
    if (n == 0) return cudaSuccess;
    bool rows = g.L == 1;
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        int W = vec_width<T>(g, y, x, x);
        bool vec = by_width<T>(W, [&](auto p) {
            using P = decltype(p);
            bn_normalize_vec<T, P::width><<<grid_for(n / W), THREADS, 0, st>>>((P *)y, (const P *)x, coef, n / W,
                                                                               g.C, g.L, rows, relu);
        });
        if (!vec) bn_normalize<T><<<grid_for(n), THREADS, 0, st>>>((T *)y, (const T *)x, coef, n, g.C, g.L, relu);
        return cudaGetLastError();
    });
}

extern "C" cudaError_t glia__cuda_bn_grad_finalize(float *coef, float *dgamma, bool add_dgamma, float *dbeta,
                                                   bool add_dbeta, const float *gamma, const float *saved,
                                                   const float *pdy, const float *pdyx, struct glia__bn_geom g,
                                                   cudaStream_t st)
{
    if (g.C == 0) return cudaSuccess;
    GradFin fin{coef, dgamma, dbeta, add_dgamma, add_dbeta, gamma, saved, g.N * g.L};
    bn_grad_finalize<<<fin_grid(g.C, g.S), fin_block(g.S), 0, st>>>(fin, pdy, pdyx, g.C, g.S);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_bn_dx(void *dx, bool add, const void *x, const void *dy, enum glia_dtype t,
                                        const float *saved, const float *coef, bool relu, struct glia__bn_geom g,
                                        cudaStream_t st)
{
    int64_t n = g.N * g.C * g.L;
    if (n == 0) return cudaSuccess;
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        int W = vec_width<T>(g, dx, x, dy);
        bool vec = by_width<T>(W, [&](auto p) {
            using P = decltype(p);
            bn_dx_vec<T, P::width><<<grid_for(n / W), THREADS, 0, st>>>((P *)dx, add, (const P *)x, (const P *)dy,
                                                                        saved, coef, n / W, g.C, g.L, g.L == 1, relu);
        });
        if (!vec)
            bn_dx<T><<<grid_for(n), THREADS, 0, st>>>((T *)dx, add, (const T *)x, (const T *)dy, saved, coef, n, g.C,
                                                      g.L, relu);
        return cudaGetLastError();
    });
}

extern "C" cudaError_t glia__cuda_bn_sync_partials(double *pa, double *pb, const void *x, const void *dy,
                                                   enum glia_dtype t, const float *saved, bool relu,
                                                   struct glia__bn_geom g, cudaStream_t st)
{
    /* with no values sync_collect reads no split */
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        return bn_reduce(pa, pb, SyncSums<T>{(const T *)x, (const T *)dy, saved, g.C, relu}, g, st);
    });
}

extern "C" cudaError_t glia__cuda_bn_sync_collect(double *sums, float *dgamma, bool add_dgamma, float *dbeta,
                                                  bool add_dbeta, const double *pa, const double *pb, bool count,
                                                  struct glia__bn_geom g, cudaStream_t st)
{
    if (g.C == 0) return cudaSuccess;
    sync_collect<<<fin_grid(g.C, g.S), fin_block(g.S), 0, st>>>(sums, dgamma, add_dgamma, dbeta, add_dbeta, pa, pb, count, g.C,
                                                    g.N * g.L, g.S);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_bn_sync_finalize(float *coef, float *saved, float *rmean, float *rvar,
                                                   const float *gamma, const float *beta, const double *sums,
                                                   struct glia__bn_geom g, bool update, double momentum, double eps,
                                                   cudaStream_t st)
{
    if (g.C == 0) return cudaSuccess;
    sync_finalize<<<grid_for(g.C), THREADS, 0, st>>>(coef, saved, rmean, rvar, gamma, beta, sums, g.C, update,
                                                     momentum, eps);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_bn_sync_grad_coef(float *coef, const float *gamma, const float *saved,
                                                    const double *sums, struct glia__bn_geom g,
                                                    cudaStream_t st)
{
    if (g.C == 0) return cudaSuccess;
    sync_grad_coef<<<grid_for(g.C), THREADS, 0, st>>>(coef, gamma, saved, sums, g.C);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_maxpool_forward(void *y, int32_t *arg, const void *x, enum glia_dtype t,
                                                  struct glia__pool_geom g, cudaStream_t st)
{
    int64_t n = g.N * g.C * g.OH * g.OW;
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        return pool_launch(n, g, [&](auto p) {
            using I = decltype(p.N);
            maxpool_fwd<T, I><<<grid_for(n), THREADS, 0, st>>>((T *)y, arg, (const T *)x, p);
        });
    });
}

extern "C" cudaError_t glia__cuda_maxpool_backward(void *dx, bool add, const void *dy, const int32_t *arg,
                                                   enum glia_dtype t, struct glia__pool_geom g, cudaStream_t st)
{
    int64_t n = g.N * g.C * g.H * g.W;
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        return pool_launch(n, g, [&](auto p) {
            using I = decltype(p.N);
            maxpool_bwd<T, I><<<grid_for(n), THREADS, 0, st>>>((T *)dx, add, (const T *)dy, arg, p);
        });
    });
}

extern "C" cudaError_t glia__cuda_avgpool_forward(void *y, const void *x, enum glia_dtype t, float inv,
                                                  struct glia__pool_geom g, cudaStream_t st)
{
    int64_t n = g.N * g.C * g.OH * g.OW;
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        return pool_launch(n, g, [&](auto p) {
            using I = decltype(p.N);
            avgpool_fwd<T, I><<<grid_for(n), THREADS, 0, st>>>((T *)y, (const T *)x, inv, p);
        });
    });
}

extern "C" cudaError_t glia__cuda_avgpool_backward(void *dx, bool add, const void *dy, enum glia_dtype t, float inv,
                                                   struct glia__pool_geom g, cudaStream_t st)
{
    int64_t n = g.N * g.C * g.H * g.W;
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        return pool_launch(n, g, [&](auto p) {
            using I = decltype(p.N);
            avgpool_bwd<T, I><<<grid_for(n), THREADS, 0, st>>>((T *)dx, add, (const T *)dy, inv, p);
        });
    });
}

extern "C" cudaError_t glia__cuda_gap_forward(void *y, const void *x, enum glia_dtype t, int64_t N, int64_t C,
                                              int64_t HW, bool nhwc, float inv, cudaStream_t st)
{
    if (N * C == 0) return cudaSuccess;
    int64_t gx = (C + TILE_C - 1) / TILE_C, blocks = (N * C + THREADS / 32 - 1) / (THREADS / 32);
    if (nhwc && gx > 0x7fffffff) return cudaErrorInvalidValue;
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        if (nhwc) {
            dim3 grid((unsigned)gx, (unsigned)(N < 65535 ? N : 65535));
            gap_fwd_rows<T><<<grid, dim3(TILE_C, TILE_R), 0, st>>>((T *)y, (const T *)x, N, C, HW, inv);
        } else {
            gap_fwd_planes<T><<<(unsigned)(blocks < MAX_BLOCKS ? blocks : MAX_BLOCKS), THREADS, 0, st>>>(
                (T *)y, (const T *)x, N * C, HW, inv);
        }
        return cudaGetLastError();
    });
}

extern "C" cudaError_t glia__cuda_gap_backward(void *dx, bool add, const void *dy, enum glia_dtype t, int64_t N,
                                               int64_t C, int64_t HW, bool nhwc, float inv, cudaStream_t st)
{
    int64_t n = N * C * HW;
    if (n == 0) return cudaSuccess;
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        gap_bwd<T><<<grid_for(n), THREADS, 0, st>>>((T *)dx, add, (const T *)dy, n, C, HW, nhwc, inv);
        return cudaGetLastError();
    });
}

extern "C" cudaError_t glia__cuda_copy_rows(void *dst, int64_t dpitch, const void *src, int64_t spitch, int64_t rows,
                                            int64_t width, enum glia_dtype t, bool add, cudaStream_t st)
{
    if (rows == 0 || width == 0) return cudaSuccess;
    bool vec = t == GLIA_F32 && (dpitch | spitch | width) % 4 == 0 && (uintptr_t)dst % 16 == 0 &&
               (uintptr_t)src % 16 == 0;
    if (vec) {
        copy_rows<float4><<<grid_for(rows * width / 4), THREADS, 0, st>>>((float4 *)dst, dpitch / 4, (const float4 *)src,
                                                                         spitch / 4, rows, width / 4, add);
        return cudaGetLastError();
    }
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        copy_rows<T><<<grid_for(rows * width), THREADS, 0, st>>>((T *)dst, dpitch, (const T *)src, spitch, rows, width,
                                                                 add);
        return cudaGetLastError();
    });
}
