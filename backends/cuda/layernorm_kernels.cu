/* backends/cuda/layernorm_kernels.cu — the kernels of the CUDA layernorm: forward and the input gradient one warp
 * per row (statistics by warp shuffles, in registers; rows moved in 16-byte packs where they allow), the weight and
 * bias gradients summed in the input gradient's pass (per block partials in shared memory, as llm.c's layernorm
 * backward) or, for rows too wide for that, a column reduction of their own (per split of rows partials); then one
 * thread per column over the partials. Not layer
 * logic: layernorm.c decides what to launch. Sums run in a fixed order (no atomics): the same bits on every run. */
#include "layernorm_kernels.h"

#include <type_traits>

#include "half.cuh"
#include "launch.cuh"

/* Everything but the C entry points has internal linkage (an unnamed namespace), so that kernels and
 * helpers cannot clash with those of the other .cu files of cuda.so. */
namespace {

#define WARPS (THREADS / 32)  /* rows a block of the row kernels takes at a time */
#define COLS 32               /* columns a block of the column reduction takes */
#define ROW_LANES 8           /* its threads per column (a block is COLS x ROW_LANES) */
#define SPLIT_ROWS 64         /* rows per split of the column reduction, at least */
#define MAX_SPLITS 512

/* v summed over the 32 lanes of a warp, the same tree for every lane (every lane gets the same bits). */
__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Splits of the column reduction over R rows: about one per SPLIT_ROWS rows, at most MAX_SPLITS, at least 1. */
static int64_t n_splits(int64_t R)
{
    int64_t s = (R + SPLIT_ROWS - 1) / SPLIT_ROWS;
    return s < 1 ? 1 : s > MAX_SPLITS ? MAX_SPLITS : s;
}

/* Blocks of WARPS rows for R rows (at least 1, at most MAX_BLOCKS: the kernels stride over the rest). */
static unsigned row_grid(int64_t R)
{
    int64_t b = (R + WARPS - 1) / WARPS;
    return (unsigned)(b < 1 ? 1 : b > MAX_BLOCKS ? MAX_BLOCKS : b);
}

/* The row kernels take a row as C / V packs of V consecutive values (half.cuh's Pack: one access each), lane k packs
 * k, k + 32, ...; V = 16 / sizeof(T) (16-byte loads and stores) where C is a multiple of it and every row pointer is
 * 16-byte aligned, else 1 (one value at a time). */

/* y(R, C) = (x(R, C) - mean)*rstd*w(C) + b(C) per row; mean(R), rstd(R) unless NULL. One warp per row, in packs of V;
 * two passes over the row for the mean and the squared deviations (the row stays in L1), a third writes y. The mean
 * is the row's first value p plus the mean of x - p: a constant row gets its mean exactly, so var = 0 and y = b
 * exactly (as on the CPU), and a row of large mean loses no bits to it. */
template <typename T, int V>
__global__ void ln_fwd(T *y, float *mean, float *rstd, const T *x, const T *res, T *sum, const float *w, const float *b,
                       int64_t R, int64_t C, float eps)
{
    typedef Pack<T, V> P;
    int lane = threadIdx.x % 32;
    int64_t CV = C / V;
    for (int64_t r = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32; r < R; r += (int64_t)gridDim.x * WARPS) {
        const T *xr = x + r * C;
        T *yr = y + r * C;
        float p, s = 0.0f;
        if (res) {  /* the residual sum first, rounded to T as the add writes it; each lane then reads what it wrote */
            const T *rr = res + r * C;
            T *sr = sum + r * C;
            p = to_float(from_float<T>(to_float(xr[0]) + to_float(rr[0])));
            for (int64_t j = lane; j < CV; j += 32) {
                P a = reinterpret_cast<const P *>(xr)[j], c = reinterpret_cast<const P *>(rr)[j], o;
                for (int e = 0; e < V; e++) {
                    o.v[e] = from_float<T>(to_float(a.v[e]) + to_float(c.v[e]));
                    s += to_float(o.v[e]) - p;
                }
                reinterpret_cast<P *>(sr)[j] = o;
            }
            xr = sr;
        } else {
            p = to_float(xr[0]);
            for (int64_t j = lane; j < CV; j += 32) {
                P a = reinterpret_cast<const P *>(xr)[j];
                for (int e = 0; e < V; e++) s += to_float(a.v[e]) - p;
            }
        }
        float m = p + warp_sum(s) / (float)C;
        float q = 0.0f;
        for (int64_t j = lane; j < CV; j += 32) {
            P a = reinterpret_cast<const P *>(xr)[j];
            for (int e = 0; e < V; e++) {
                float d = to_float(a.v[e]) - m;
                q += d * d;
            }
        }
        float rs = 1.0f / sqrtf(warp_sum(q) / (float)C + eps);
        for (int64_t j = lane; j < CV; j += 32) {
            P a = reinterpret_cast<const P *>(xr)[j], o;
            for (int e = 0; e < V; e++) {
                int64_t i = j * V + e;
                float v = (to_float(a.v[e]) - m) * rs;
                o.v[e] = from_float<T>(w ? v * w[i] + b[i] : v);
            }
            reinterpret_cast<P *>(yr)[j] = o;
        }
        if (lane == 0 && mean) {
            mean[r] = m;
            rstd[r] = rs;
        }
    }
}

/* Row r of dx(R, C) (+)= rstd*(g - mean(g) - x_hat*mean(g*x_hat)), g = dy*w, x_hat = (x - mean(R))*rstd(R), by the
 * calling warp (this lane's packs j = lane, lane + 32, ... of V values): a pass for the two sums, a second for dx. With
 * aw not NULL the second pass also adds dy*x_hat and dy of column j V + e into aw and ab at e CV + j (the fused
 * backward's column sums; CV = C / V). */
template <typename T, int V>
__device__ __forceinline__ void ln_dx_row(T *dx, bool add, const T *x, const T *dy, const float *mean,
                                          const float *rstd, const float *w, int64_t r, int64_t C, int lane, float *aw,
                                          float *ab)
{
    typedef Pack<T, V> P;
    int64_t CV = C / V;
    const P *xr = reinterpret_cast<const P *>(x + r * C), *dyr = reinterpret_cast<const P *>(dy + r * C);
    P *dxr = reinterpret_cast<P *>(dx + r * C);
    float m = mean[r], rs = rstd[r], sg = 0.0f, sgx = 0.0f;
    for (int64_t j = lane; j < CV; j += 32) {
        P a = xr[j], d = dyr[j];
        for (int e = 0; e < V; e++) {
            float g = to_float(d.v[e]) * (w ? w[j * V + e] : 1.0f);
            sg += g;
            sgx += g * ((to_float(a.v[e]) - m) * rs);
        }
    }
    float mg = warp_sum(sg) / (float)C, mgx = warp_sum(sgx) / (float)C;
    for (int64_t j = lane; j < CV; j += 32) {
        P a = xr[j], d = dyr[j], o;
        if (add) o = dxr[j];
        for (int e = 0; e < V; e++) {
            float dv = to_float(d.v[e]), g = dv * (w ? w[j * V + e] : 1.0f), xh = (to_float(a.v[e]) - m) * rs;
            float v = rs * (g - mg - xh * mgx);
            o.v[e] = from_float<T>(add ? to_float(o.v[e]) + v : v);
            if (aw) {
                aw[e * CV + j] += dv * xh;
                ab[e * CV + j] += dv;
            }
        }
        dxr[j] = o;
    }
}

/* dx(R, C) (+)= as ln_dx_row, one warp per row. */
template <typename T, int V>
__global__ void ln_dx(T *dx, bool add, const T *x, const T *dy, const float *mean, const float *rstd, const float *w,
                      int64_t R, int64_t C)
{
    for (int64_t r = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32; r < R; r += (int64_t)gridDim.x * WARPS)
        ln_dx_row<T, V>(dx, add, x, dy, mean, rstd, w, r, C, threadIdx.x % 32, nullptr, nullptr);
}

/* Whether every pointer given (NULL ones aside) is 16-byte aligned: the row kernels' packs of 16 bytes. */
static bool aligned16(const void *a, const void *b, const void *c = nullptr, const void *d = nullptr)
{
    return !(((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d) & 15);
}

/* pw(S, C), pb(S, C) = over the rows of split s (blockIdx.y) of sum dy*x_hat and sum dy, columns
 * blockIdx.x*COLS + threadIdx.x. Thread (c, k) adds rows k, k + ROW_LANES, ... of the split, then lane k = 0 adds the
 * ROW_LANES sums in k order: reads of a row are coalesced over the block's columns. */
template <typename T>
__global__ void ln_dparams_part(float *pw, float *pb, const T *x, const T *dy, const float *mean, const float *rstd,
                                int64_t R, int64_t C)
{
    __shared__ float sw[ROW_LANES][COLS], sb[ROW_LANES][COLS];
    int tx = threadIdx.x, k = threadIdx.y;
    int64_t c = (int64_t)blockIdx.x * COLS + tx, S = gridDim.y, s = blockIdx.y;
    int64_t r0 = s * R / S, r1 = (s + 1) * R / S;
    float aw = 0.0f, ab = 0.0f;
    if (c < C)
        for (int64_t r = r0 + k; r < r1; r += ROW_LANES) {
            float g = to_float(dy[r * C + c]);
            aw += g * ((to_float(x[r * C + c]) - mean[r]) * rstd[r]);
            ab += g;
        }
    sw[k][tx] = aw;
    sb[k][tx] = ab;
    __syncthreads();
    if (k == 0 && c < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int j = 0; j < ROW_LANES; j++) {
            tw += sw[j][tx];
            tb += sb[j][tx];
        }
        pw[s * C + c] = tw;
        pb[s * C + c] = tb;
    }
}

/* dw(C), db(C) (+)= the S partials of each column in split order, in double. One thread per column. */
__global__ void ln_dparams_total(float *dw, bool add_w, float *db, bool add_b, const float *pw, const float *pb,
                                 int64_t S, int64_t C)
{
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
        double tw = 0, tb = 0;
        for (int64_t s = 0; s < S; s++) {
            tw += pw[s * C + c];
            tb += pb[s * C + c];
        }
        if (dw) dw[c] = add_w ? dw[c] + (float)tw : (float)tw;  /* never 0 * old: old may be garbage */
        if (db) db[c] = add_b ? db[c] + (float)tb : (float)tb;
    }
}

/* The fused backward's per-warp column sums: at most FUSED_FLOATS floats of shared memory (48 KiB, the static limit), two
 * rows of C (dw's and db's) a warp, so a block has min(WARPS, FUSED_FLOATS / (2 C)) warps, and C up to
 * FUSED_FLOATS / 2 takes this path at all. FUSED_BLOCKS caps the grid (about one wave of blocks of this size on an
 * H100), so that the partials stay few: each warp strides over its rows. */
#define FUSED_FLOATS 12288
#define FUSED_BLOCKS 512

static int fused_warps(int64_t C)
{
    int64_t w = FUSED_FLOATS / (2 * C);
    return (int)(w > WARPS ? WARPS : w);
}

static unsigned fused_grid(int64_t R, int64_t C)
{
    int w = fused_warps(C);
    int64_t b = (R + w - 1) / w;
    return (unsigned)(b < 1 ? 1 : b > FUSED_BLOCKS ? FUSED_BLOCKS : b);
}

/* ln_dx with the weight and bias gradients' partials in the same pass over x and dy: dx(R, C) (+)= as ln_dx, and
 * pw(S, C), pb(S, C) = over the rows of block s = blockIdx.x of sum dy*x_hat and sum dy. Each warp adds its rows'
 * terms to its own two rows of shared memory (a lane owns its columns there: no atomics), in the order it takes its
 * rows; the block then adds its warps' rows in warp order. The same bits on every run; other bits than
 * ln_dparams_part's splits give. */
template <typename T, int V, int F>
__global__ void ln_bwd_fused(T *dx, bool add, float *pw, float *pb, const T *x, const T *dy, const float *mean,
                             const float *rstd, const float *w, int64_t R, int64_t C)
{
    __shared__ float acc[F];  /* F >= 2 C a warp: the smallest of 2048, 4096, 8192 and FUSED_FLOATS that holds them */
    int lane = threadIdx.x % 32, wi = threadIdx.x / 32, nw = blockDim.x / 32;
    int64_t CV = C / V;
    float *aw = acc + (int64_t)wi * 2 * C, *ab = aw + C;  /* column j V + e at e CV + j: a warp's lanes on 32 banks */
    for (int64_t j = lane; j < CV; j += 32)
        for (int e = 0; e < V; e++) aw[e * CV + j] = ab[e * CV + j] = 0.0f;
    for (int64_t r = (int64_t)blockIdx.x * nw + wi; r < R; r += (int64_t)gridDim.x * nw)
        ln_dx_row<T, V>(dx, add, x, dy, mean, rstd, w, r, C, lane, aw, ab);
    __syncthreads();
    for (int64_t k = threadIdx.x; k < C; k += blockDim.x) {  /* slot k holds column (k % CV) V + k / CV */
        float tw = 0.0f, tb = 0.0f;
        for (int u = 0; u < nw; u++) {
            tw += acc[(int64_t)u * 2 * C + k];
            tb += acc[(int64_t)u * 2 * C + C + k];
        }
        int64_t c = (k % CV) * V + k / CV;
        pw[(int64_t)blockIdx.x * C + c] = tw;
        pb[(int64_t)blockIdx.x * C + c] = tb;
    }
}

}  // namespace

extern "C" cudaError_t glia__cuda_layernorm_forward(void *y, float *mean, float *rstd, const void *x, const void *res,
                                                    void *sum, enum glia_dtype t, const float *w, const float *b,
                                                    int64_t R, int64_t C, float eps, cudaStream_t st)
{
    if (R == 0 || C == 0) return cudaSuccess;
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        constexpr int V = 16 / sizeof(T);
        if (C % V == 0 && aligned16(y, x, res, sum))
            ln_fwd<T, V><<<row_grid(R), THREADS, 0, st>>>((T *)y, mean, rstd, (const T *)x, (const T *)res, (T *)sum, w, b, R, C, eps);
        else
            ln_fwd<T, 1><<<row_grid(R), THREADS, 0, st>>>((T *)y, mean, rstd, (const T *)x, (const T *)res, (T *)sum, w, b, R, C, eps);
        return cudaGetLastError();
    });
}

extern "C" cudaError_t glia__cuda_layernorm_dx(void *dx, bool add, const void *x, const void *dy, enum glia_dtype t,
                                               const float *mean, const float *rstd, const float *w, int64_t R,
                                               int64_t C, cudaStream_t st)
{
    if (R == 0 || C == 0) return cudaSuccess;
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        constexpr int V = 16 / sizeof(T);
        if (C % V == 0 && aligned16(dx, x, dy))
            ln_dx<T, V><<<row_grid(R), THREADS, 0, st>>>((T *)dx, add, (const T *)x, (const T *)dy, mean, rstd, w, R, C);
        else
            ln_dx<T, 1><<<row_grid(R), THREADS, 0, st>>>((T *)dx, add, (const T *)x, (const T *)dy, mean, rstd, w, R, C);
        return cudaGetLastError();
    });
}

extern "C" size_t glia__cuda_layernorm_dparams_scratch(int64_t R, int64_t C)
{
    int64_t S = n_splits(R), F = glia__cuda_layernorm_fused_ok(C) ? (int64_t)fused_grid(R, C) : 0;
    return (size_t)(2 * (S > F ? S : F) * C);
}

extern "C" bool glia__cuda_layernorm_fused_ok(int64_t C) { return C > 0 && C <= FUSED_FLOATS / 2; }

extern "C" cudaError_t glia__cuda_layernorm_backward(void *dx, bool add, float *dw, bool add_w, float *db, bool add_b,
                                                     float *part, const void *x, const void *dy, enum glia_dtype t,
                                                     const float *mean, const float *rstd, const float *w, int64_t R,
                                                     int64_t C, cudaStream_t st)
{
    if (C == 0) return cudaSuccess;
    if (C > FUSED_FLOATS / 2) return cudaErrorInvalidValue;
    unsigned S = fused_grid(R, C);
    float *pw = part, *pb = part + (int64_t)S * C;
    cudaError_t e = by_type(t, [&](auto v) {
        using T = decltype(v);
        constexpr int V = 16 / sizeof(T);
        unsigned threads = 32u * (unsigned)fused_warps(C);
        int64_t need = 2 * C * (threads / 32);  /* shared floats: the smaller, the more blocks an SM holds */
        auto go = [&](auto f) {
            constexpr int F = decltype(f)::value;
            if (C % V == 0 && aligned16(dx, x, dy))
                ln_bwd_fused<T, V, F><<<S, threads, 0, st>>>((T *)dx, add, pw, pb, (const T *)x, (const T *)dy, mean,
                                                             rstd, w, R, C);
            else
                ln_bwd_fused<T, 1, F><<<S, threads, 0, st>>>((T *)dx, add, pw, pb, (const T *)x, (const T *)dy, mean,
                                                             rstd, w, R, C);
        };
        if (need <= 2048) go(std::integral_constant<int, 2048>());
        else if (need <= 4096) go(std::integral_constant<int, 4096>());
        else if (need <= 8192) go(std::integral_constant<int, 8192>());
        else go(std::integral_constant<int, FUSED_FLOATS>());
        return cudaGetLastError();
    });
    if (e != cudaSuccess) return e;
    ln_dparams_total<<<grid_for(C), THREADS, 0, st>>>(dw, add_w, db, add_b, pw, pb, S, C);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_layernorm_dparams(float *dw, bool add_w, float *db, bool add_b, float *part,
                                                    const void *x, const void *dy, enum glia_dtype t,
                                                    const float *mean, const float *rstd, int64_t R, int64_t C,
                                                    cudaStream_t st)
{
    if (C == 0) return cudaSuccess;
    int64_t S = n_splits(R);
    float *pw = part, *pb = part + S * C;
    cudaError_t e = by_type(t, [&](auto v) {
        using T = decltype(v);
        dim3 grid((unsigned)((C + COLS - 1) / COLS), (unsigned)S);
        ln_dparams_part<T><<<grid, dim3(COLS, ROW_LANES), 0, st>>>(pw, pb, (const T *)x, (const T *)dy, mean, rstd,
                                                                     R, C);
        return cudaGetLastError();
    });
    if (e != cudaSuccess) return e;
    ln_dparams_total<<<grid_for(C), THREADS, 0, st>>>(dw, add_w, db, add_b, pw, pb, S, C);
    return cudaGetLastError();
}
