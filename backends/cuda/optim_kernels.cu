/* backends/cuda/optim_kernels.cu — the fused optimizer step kernels: one grid-stride pass over the
 * arena that reads each element's weight, gradient, state and decay flag once and writes the new
 * weight and state; lamb's, lars's and novograd's, which need per-tensor norms, in a few launches over the arena's tensors. Not the scalars' computation: the host does it in double, as the CPU kernels do
 * (glia/types/optimizers.h); each kernel takes them by value, or reads them from device memory (dk not NULL)
 * where the host wrote them before a CUDA graph's replay. With a.skip set and nonzero (fp16's loss scaler found the
 * gradients not finite) every thread returns at once.
 *
 * Every operation is an IEEE fp32 one in the CPU plugins' order (__f*_rn: no FMA contraction), so
 * a step gives the CPU's results bit for bit when the CPU code is not contracted either. */
#include "optim_kernels.h"

#include "launch.cuh"

static __device__ __forceinline__ float rn_add(float a, float b) { return __fadd_rn(a, b); }
static __device__ __forceinline__ float rn_sub(float a, float b) { return __fsub_rn(a, b); }
static __device__ __forceinline__ float rn_mul(float a, float b) { return __fmul_rn(a, b); }
static __device__ __forceinline__ float rn_div(float a, float b) { return __fdiv_rn(a, b); }
static __device__ __forceinline__ float rn_sqrt(float a) { return __fsqrt_rn(a); }

/* The decay flag of element i: mask[i], or 1 without a mask. */
static __device__ __forceinline__ float flag(const float *mask, int64_t i) { return mask ? mask[i] : 1.0f; }

/* g' = g + wd w;  buf = g' (first step) or mu buf + (1 - damp) g';
 * d = nesterov ? g' + mu buf : buf (or g' without momentum);  w -= lr d
 * w(n), buf = s0(n) from g(n), mask(n) */
static __global__ void sgd_kernel(struct glia__cuda_opt_arrays a, struct glia_sgd_coef k, const struct glia_sgd_coef *dk)
{
    if (a.skip && *a.skip) return;
    if (dk) k = *dk;
    float undamped = rn_sub(1.0f, k.damp);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += (int64_t)gridDim.x * blockDim.x) {
        float w = a.w[i];
        float d = rn_add(a.g[i], rn_mul(rn_mul(flag(a.mask, i), k.wd), w));
        if (k.mu != 0.0f) {
            float b = k.first ? d : rn_add(rn_mul(k.mu, a.s0[i]), rn_mul(undamped, d));
            a.s0[i] = b;
            d = k.nesterov ? rn_add(d, rn_mul(k.mu, b)) : b;
        }
        a.w[i] = rn_sub(w, rn_mul(k.lr, d));
    }
}

/* w -= step_size * (m / (sqrt(v) / bc2_sqrt + eps)), torch's order of operations */
static __device__ __forceinline__ float adam_delta(float step_size, float m, float v, float bc2_sqrt, float eps)
{
    return rn_mul(step_size, rn_div(m, rn_add(rn_div(rn_sqrt(v), bc2_sqrt), eps)));
}

/* adam (decoupled false): g' = g + wd w;  adamw (decoupled true): w *= keep where the flag is not 0; then
 * m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2;  w -= adam_delta
 * w(n), m = s0(n), v = s1(n) from g(n), mask(n) */
template <bool decoupled>
static __global__ void adam_kernel(struct glia__cuda_opt_arrays a, struct glia_adam_coef k, const struct glia_adam_coef *dk)
{
    if (a.skip && *a.skip) return;
    if (dk) k = *dk;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += (int64_t)gridDim.x * blockDim.x) {
        float w = a.w[i], g = a.g[i];
        if (decoupled)
            w = a.mask && a.mask[i] == 0.0f ? w : rn_mul(w, k.keep);
        else
            g = rn_add(g, rn_mul(rn_mul(flag(a.mask, i), k.wd), w));
        float m = rn_add(rn_mul(k.b1, a.s0[i]), rn_mul(k.c1, g));
        float v = rn_add(rn_mul(k.b2, a.s1[i]), rn_mul(rn_mul(k.c2, g), g));
        a.s0[i] = m;
        a.s1[i] = v;
        a.w[i] = rn_sub(w, adam_delta(k.step_size, m, v, k.bc2_sqrt, k.eps));
    }
}

/* g' = g + wd w;  sq = rho sq + (1 - rho) g'^2;  d = sqrt(acc + eps) / sqrt(sq + eps) g';
 * acc = rho acc + (1 - rho) d^2;  w -= lr d
 * w(n), sq = s0(n), acc = s1(n) from g(n), mask(n) */
static __global__ void adadelta_kernel(struct glia__cuda_opt_arrays a, struct glia_adadelta_coef k,
                                       const struct glia_adadelta_coef *dk)
{
    if (a.skip && *a.skip) return;
    if (dk) k = *dk;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += (int64_t)gridDim.x * blockDim.x) {
        float w = a.w[i], acc = a.s1[i];
        float g = rn_add(a.g[i], rn_mul(rn_mul(flag(a.mask, i), k.wd), w));
        float sq = rn_add(rn_mul(k.rho, a.s0[i]), rn_mul(rn_mul(k.c, g), g));
        float d = rn_mul(rn_div(rn_sqrt(rn_add(acc, k.eps)), rn_sqrt(rn_add(sq, k.eps))), g);
        a.s0[i] = sq;
        a.s1[i] = rn_add(rn_mul(k.rho, acc), rn_mul(rn_mul(k.c, d), d));
        a.w[i] = rn_sub(w, rn_mul(k.lr, d));
    }
}

/* ---- lamb, lars and novograd: per-tensor norms over the arena's segments, in glia/types/optimizers.h's order ---- */

/* The scratch of a step: the chunks' sums of w, g and u (slots each), the tensors' sums of w, g and u (n_seg each),
 * the clip factor f. */
struct norm_scratch {
    float *pw, *pg, *pu, *sw, *sg, *su, *f;
};

static __device__ __forceinline__ struct norm_scratch scratch_of(struct glia__cuda_opt_tensors t, int64_t n)
{
    int64_t slots = glia_norm_slots(n, t.n_seg);
    struct norm_scratch r;
    r.pw = t.scratch, r.pg = r.pw + slots, r.pu = r.pg + slots;
    r.sw = r.pu + slots, r.sg = r.sw + t.n_seg, r.su = r.sg + t.n_seg, r.f = r.su + t.n_seg;
    return r;
}

/* The block's sum of its lanes' values, glia_sumsq_chunk's halving order (blockDim.x = GLIA_NORM_LANES); every
 * thread gets it. sh: GLIA_NORM_LANES floats of shared memory. */
static __device__ float lanes_sum(float mine, float *sh)
{
    __syncthreads();  /* the previous call's readers are done with sh */
    sh[threadIdx.x] = mine;
    __syncthreads();
    for (int h = GLIA_NORM_LANES / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h) sh[threadIdx.x] = rn_add(sh[threadIdx.x], sh[threadIdx.x + h]);
        __syncthreads();
    }
    return sh[0];
}

/* Chunk j of tensor i: its first element *at and length *len. */
static __device__ __forceinline__ void chunk_at(const int64_t *seg, int i, int64_t j, int64_t *at, int64_t *len)
{
    *at = seg[2 * i] + j * GLIA_NORM_CHUNK;
    int64_t left = seg[2 * i + 1] - j * GLIA_NORM_CHUNK;
    *len = left < GLIA_NORM_CHUNK ? left : GLIA_NORM_CHUNK;
}

static __device__ __forceinline__ bool tensor_decays(const float *mask, const int64_t *seg, int i)
{
    return !mask || mask[seg[2 * i]] != 0.0f;
}

/* The chunks' sums of squares of w (with_w) and g: blocks (x: chunks, y: tensors) of GLIA_NORM_LANES threads. */
template <bool with_w>
static __global__ void norms_kernel(struct glia__cuda_opt_arrays a, struct glia__cuda_opt_tensors t)
{
    __shared__ float sh[GLIA_NORM_LANES];
    if (a.skip && *a.skip) return;
    struct norm_scratch r = scratch_of(t, a.n);
    for (int i = blockIdx.y; i < t.n_seg; i += gridDim.y)
        for (int64_t j = blockIdx.x; j < glia_norm_chunks(t.seg[2 * i + 1]); j += gridDim.x) {
            int64_t at, len;
            chunk_at(t.seg, i, j, &at, &len);
            float aw = 0.0f, ag = 0.0f;
            for (int64_t e = threadIdx.x; e < len; e += GLIA_NORM_LANES) {
                float g = a.g[at + e];
                if (with_w) aw = rn_add(aw, rn_mul(a.w[at + e], a.w[at + e]));
                ag = rn_add(ag, rn_mul(g, g));
            }
            float sw = with_w ? lanes_sum(aw, sh) : 0.0f, sg = lanes_sum(ag, sh);
            if (threadIdx.x == 0) {
                int64_t slot = glia_norm_slot(t.seg[2 * i], i, j);
                if (with_w) r.pw[slot] = sw;
                r.pg[slot] = sg;
            }
        }
}

/* Each tensor's sum of its chunks' sums, in turn: parts (pw, pg or pu) into sums (sw, sg or su); one thread a tensor. */
static __global__ void sums_kernel(struct glia__cuda_opt_arrays a, struct glia__cuda_opt_tensors t, int which)
{
    if (a.skip && *a.skip) return;
    struct norm_scratch r = scratch_of(t, a.n);
    const float *parts = which == 0 ? r.pw : which == 1 ? r.pg : r.pu;
    float *sums = which == 0 ? r.sw : which == 1 ? r.sg : r.su;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < t.n_seg; i += gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int64_t j = 0; j < glia_norm_chunks(t.seg[2 * i + 1]); j++)
            acc = rn_add(acc, parts[glia_norm_slot(t.seg[2 * i], i, j)]);
        sums[i] = acc;
    }
}

/* f from the global gradient norm, the tensors' sums added in turn (one thread). */
static __global__ void lamb_clip_kernel(struct glia__cuda_opt_arrays a, struct glia__cuda_opt_tensors t,
                                        struct glia_lamb_coef k, const struct glia_lamb_coef *dk)
{
    if (a.skip && *a.skip) return;
    if (dk) k = *dk;
    struct norm_scratch r = scratch_of(t, a.n);
    float all = 0.0f;
    for (int i = 0; i < t.n_seg; i++) all = rn_add(all, r.sg[i]);
    float gn = rn_sqrt(all);
    *r.f = k.max_norm > 0.0f && gn > k.max_norm ? rn_div(gn, k.max_norm) : 1.0f;
}

/* u = (m / bc1) / (sqrt(v / bc2) + eps) + wd w */
static __device__ __forceinline__ float lamb_u(const struct glia_lamb_coef &k, float wd, float w, float m, float v)
{
    float denom = rn_add(rn_sqrt(rn_div(v, k.bc2)), k.eps);
    return rn_add(rn_div(rn_div(m, k.bc1), denom), rn_mul(wd, w));
}

/* g' = g / f;  m = m b1 + c1 g';  v = v b2 + (c2 g') g';  the chunks' sums of squares of u. */
static __global__ void lamb_moments_kernel(struct glia__cuda_opt_arrays a, struct glia__cuda_opt_tensors t,
                                           struct glia_lamb_coef k, const struct glia_lamb_coef *dk)
{
    __shared__ float sh[GLIA_NORM_LANES];
    if (a.skip && *a.skip) return;
    if (dk) k = *dk;
    struct norm_scratch r = scratch_of(t, a.n);
    float f = *r.f;
    for (int i = blockIdx.y; i < t.n_seg; i += gridDim.y) {
        float wd = tensor_decays(a.mask, t.seg, i) ? k.wd : 0.0f;
        for (int64_t j = blockIdx.x; j < glia_norm_chunks(t.seg[2 * i + 1]); j += gridDim.x) {
            int64_t at, len;
            chunk_at(t.seg, i, j, &at, &len);
            float au = 0.0f;
            for (int64_t e = at + threadIdx.x; e < at + len; e += GLIA_NORM_LANES) {
                float sg = rn_div(a.g[e], f);
                float m = rn_add(rn_mul(a.s0[e], k.b1), rn_mul(k.c1, sg));
                float v = rn_add(rn_mul(a.s1[e], k.b2), rn_mul(rn_mul(k.c2, sg), sg));
                a.s0[e] = m;
                a.s1[e] = v;
                float u = lamb_u(k, wd, a.w[e], m, v);
                au = rn_add(au, rn_mul(u, u));
            }
            float su = lanes_sum(au, sh);
            if (threadIdx.x == 0) r.pu[glia_norm_slot(t.seg[2 * i], i, j)] = su;
        }
    }
}

/* r = lr (|w| / |u|) where the trust ratio applies and both norms are nonzero, else lr;  w = w - r u */
static __global__ void lamb_update_kernel(struct glia__cuda_opt_arrays a, struct glia__cuda_opt_tensors t,
                                          struct glia_lamb_coef k, const struct glia_lamb_coef *dk)
{
    if (a.skip && *a.skip) return;
    if (dk) k = *dk;
    struct norm_scratch r = scratch_of(t, a.n);
    for (int i = blockIdx.y; i < t.n_seg; i += gridDim.y) {
        bool decay = tensor_decays(a.mask, t.seg, i);
        float wd = decay ? k.wd : 0.0f, wn = rn_sqrt(r.sw[i]), un = rn_sqrt(r.su[i]), ratio = k.lr;
        if ((k.nvlamb || (decay && k.wd != 0.0f)) && un != 0.0f && wn != 0.0f) ratio = rn_mul(k.lr, rn_div(wn, un));
        for (int64_t j = blockIdx.x; j < glia_norm_chunks(t.seg[2 * i + 1]); j += gridDim.x) {
            int64_t at, len;
            chunk_at(t.seg, i, j, &at, &len);
            for (int64_t e = at + threadIdx.x; e < at + len; e += GLIA_NORM_LANES) {
                float w = a.w[e];
                a.w[e] = rn_sub(w, rn_mul(ratio, lamb_u(k, wd, w, a.s0[e], a.s1[e])));
            }
        }
    }
}

/* lars: a = tc |w| / ((|g| + |w| wd) + eps), clip: min(a / lr, 1), g' = (g + wd w) a where the tensor decays and
 * both norms are nonzero, else g' = g; then sgd_kernel's update of g' without decay. */
static __global__ void lars_update_kernel(struct glia__cuda_opt_arrays a, struct glia__cuda_opt_tensors t,
                                          struct glia_lars_coef k, const struct glia_lars_coef *dk)
{
    if (a.skip && *a.skip) return;
    if (dk) k = *dk;
    struct norm_scratch r = scratch_of(t, a.n);
    float undamped = rn_sub(1.0f, k.sgd.damp);
    for (int i = blockIdx.y; i < t.n_seg; i += gridDim.y) {
        float wn = rn_sqrt(r.sw[i]), gn = rn_sqrt(r.sg[i]), f = -1.0f;
        if (tensor_decays(a.mask, t.seg, i) && wn != 0.0f && gn != 0.0f) {
            f = rn_div(rn_mul(k.tc, wn), rn_add(rn_add(gn, rn_mul(wn, k.sgd.wd)), k.eps));
            if (k.clip) {
                f = rn_div(f, k.sgd.lr);
                f = f < 1.0f ? f : 1.0f;
            }
        }
        for (int64_t j = blockIdx.x; j < glia_norm_chunks(t.seg[2 * i + 1]); j += gridDim.x) {
            int64_t at, len;
            chunk_at(t.seg, i, j, &at, &len);
            for (int64_t e = at + threadIdx.x; e < at + len; e += GLIA_NORM_LANES) {
                float w = a.w[e], d = a.g[e];
                if (f >= 0.0f) d = rn_mul(rn_add(d, rn_mul(k.sgd.wd, w)), f);
                if (k.sgd.mu != 0.0f) {
                    float b = k.sgd.first ? d : rn_add(rn_mul(k.sgd.mu, a.s0[e]), rn_mul(undamped, d));
                    a.s0[e] = b;
                    d = k.sgd.nesterov ? rn_add(d, rn_mul(k.sgd.mu, b)) : b;
                }
                a.w[e] = rn_sub(w, rn_mul(k.sgd.lr, d));
            }
        }
    }
}

/* novograd: n = sqrt(b2 n n + c2 S) of each tensor (n = sqrt(S) first), S its gradient's sum of squares, kept in s1 at
 * the tensor's offset; one thread a tensor. */
static __global__ void novograd_norm_kernel(struct glia__cuda_opt_arrays a, struct glia__cuda_opt_tensors t,
                                            struct glia_novograd_coef k, const struct glia_novograd_coef *dk)
{
    if (a.skip && *a.skip) return;
    if (dk) k = *dk;
    struct norm_scratch r = scratch_of(t, a.n);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < t.n_seg; i += gridDim.x * blockDim.x) {
        if (t.seg[2 * i + 1] == 0) continue;  /* no element to keep its n in */
        float sq = r.sg[i], n = k.first ? rn_sqrt(sq) : a.s1[t.seg[2 * i]];
        a.s1[t.seg[2 * i]] = rn_sqrt(rn_add(rn_mul(rn_mul(k.b2, n), n), rn_mul(k.c2, sq)));
    }
}

/* novograd: m = b1 m + b3 g;  w = w - lr ((m / bc1) / (n / bc2 + eps) + wd w) */
static __global__ void novograd_update_kernel(struct glia__cuda_opt_arrays a, struct glia__cuda_opt_tensors t,
                                              struct glia_novograd_coef k, const struct glia_novograd_coef *dk)
{
    if (a.skip && *a.skip) return;
    if (dk) k = *dk;
    for (int i = blockIdx.y; i < t.n_seg; i += gridDim.y) {
        if (t.seg[2 * i + 1] == 0) continue;
        float denom = rn_add(rn_div(a.s1[t.seg[2 * i]], k.bc2), k.eps);
        float wd = tensor_decays(a.mask, t.seg, i) ? k.wd : 0.0f;
        for (int64_t j = blockIdx.x; j < glia_norm_chunks(t.seg[2 * i + 1]); j += gridDim.x) {
            int64_t at, len;
            chunk_at(t.seg, i, j, &at, &len);
            for (int64_t e = at + threadIdx.x; e < at + len; e += GLIA_NORM_LANES) {
                float w = a.w[e], m = rn_add(rn_mul(k.b1, a.s0[e]), rn_mul(k.b3, a.g[e]));
                a.s0[e] = m;
                a.w[e] = rn_sub(w, rn_mul(k.lr, rn_add(rn_div(rn_div(m, k.bc1), denom), rn_mul(wd, w))));
            }
        }
    }
}

/* The launch shape of the per-tensor kernels: chunks by tensors. */
static dim3 tensor_grid(struct glia__cuda_opt_tensors t)
{
    return dim3((unsigned)(t.max_chunks < 1 ? 1 : t.max_chunks > 1024 ? 1024 : t.max_chunks),
                (unsigned)(t.n_seg > 65535 ? 65535 : t.n_seg));
}

extern "C" cudaError_t glia__cuda_lars_step(struct glia__cuda_opt_arrays a, struct glia__cuda_opt_tensors t,
                                            struct glia_lars_coef k, const struct glia_lars_coef *dk, cudaStream_t s)
{
    if (a.n <= 0 || t.n_seg <= 0) return cudaSuccess;
    dim3 grid = tensor_grid(t);
    unsigned sums = (unsigned)((t.n_seg + GLIA_NORM_LANES - 1) / GLIA_NORM_LANES);
    norms_kernel<true><<<grid, GLIA_NORM_LANES, 0, s>>>(a, t);
    sums_kernel<<<sums, GLIA_NORM_LANES, 0, s>>>(a, t, 0);
    sums_kernel<<<sums, GLIA_NORM_LANES, 0, s>>>(a, t, 1);
    lars_update_kernel<<<grid, GLIA_NORM_LANES, 0, s>>>(a, t, k, dk);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_novograd_step(struct glia__cuda_opt_arrays a, struct glia__cuda_opt_tensors t,
                                                struct glia_novograd_coef k, const struct glia_novograd_coef *dk,
                                                cudaStream_t s)
{
    if (a.n <= 0 || t.n_seg <= 0) return cudaSuccess;
    dim3 grid = tensor_grid(t);
    unsigned sums = (unsigned)((t.n_seg + GLIA_NORM_LANES - 1) / GLIA_NORM_LANES);
    norms_kernel<false><<<grid, GLIA_NORM_LANES, 0, s>>>(a, t);
    sums_kernel<<<sums, GLIA_NORM_LANES, 0, s>>>(a, t, 1);
    novograd_norm_kernel<<<sums, GLIA_NORM_LANES, 0, s>>>(a, t, k, dk);
    novograd_update_kernel<<<grid, GLIA_NORM_LANES, 0, s>>>(a, t, k, dk);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_lamb_step(struct glia__cuda_opt_arrays a, struct glia__cuda_opt_tensors t,
                                            struct glia_lamb_coef k, const struct glia_lamb_coef *dk, cudaStream_t s)
{
    if (a.n <= 0 || t.n_seg <= 0) return cudaSuccess;
    dim3 grid = tensor_grid(t);
    unsigned sums = (unsigned)((t.n_seg + GLIA_NORM_LANES - 1) / GLIA_NORM_LANES);
    norms_kernel<true><<<grid, GLIA_NORM_LANES, 0, s>>>(a, t);
    sums_kernel<<<sums, GLIA_NORM_LANES, 0, s>>>(a, t, 0);
    sums_kernel<<<sums, GLIA_NORM_LANES, 0, s>>>(a, t, 1);
    lamb_clip_kernel<<<1, 1, 0, s>>>(a, t, k, dk);
    lamb_moments_kernel<<<grid, GLIA_NORM_LANES, 0, s>>>(a, t, k, dk);
    sums_kernel<<<sums, GLIA_NORM_LANES, 0, s>>>(a, t, 2);
    lamb_update_kernel<<<grid, GLIA_NORM_LANES, 0, s>>>(a, t, k, dk);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_sgd_step(struct glia__cuda_opt_arrays a, struct glia_sgd_coef k,
                                           const struct glia_sgd_coef *dk, cudaStream_t s)
{
    if (a.n <= 0) return cudaSuccess;
    sgd_kernel<<<grid_for(a.n), THREADS, 0, s>>>(a, k, dk);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_adam_step(struct glia__cuda_opt_arrays a, struct glia_adam_coef k,
                                            const struct glia_adam_coef *dk, bool decoupled, cudaStream_t s)
{
    if (a.n <= 0) return cudaSuccess;
    if (decoupled)
        adam_kernel<true><<<grid_for(a.n), THREADS, 0, s>>>(a, k, dk);
    else
        adam_kernel<false><<<grid_for(a.n), THREADS, 0, s>>>(a, k, dk);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_adadelta_step(struct glia__cuda_opt_arrays a, struct glia_adadelta_coef k,
                                                const struct glia_adadelta_coef *dk, cudaStream_t s)
{
    if (a.n <= 0) return cudaSuccess;
    adadelta_kernel<<<grid_for(a.n), THREADS, 0, s>>>(a, k, dk);
    return cudaGetLastError();
}
