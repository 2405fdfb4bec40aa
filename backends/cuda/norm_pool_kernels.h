/* backends/cuda/norm_pool_kernels.h — C entry points into norm_pool_kernels.cu: the kernels of the CUDA
 * batchnorm (and its per-channel sums, which conv2d's bias gradient uses), maxpool2d, avgpool2d,
 * global_avgpool and concat, launched on a given stream. Not the layer
 * logic (norm_pool.c checks shapes, keeps state and picks the arguments); each returns the launch's error. */
#ifndef GLIA_CUDA_NORM_POOL_KERNELS_H
#define GLIA_CUDA_NORM_POOL_KERNELS_H

#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include <glia/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- batchnorm ----
 * A batchnorm tensor is x(N, C, L) in memory: NCHW has L = H*W; channels_last (N, H, W, C) and 2-D (N, C)
 * are "rows" x(M, C) with M = N*H*W (pass N = M, L = 1). Each channel's M = N*L values are cut into S
 * splits of consecutive values (split s: [V*(s*(M/V)/S), V*((s+1)*(M/V)/S)), V = 4 for planes whose L is a
 * multiple of 4 -- float4 loads then never straddle two splits -- else 1), fixed by the shape alone, so every sum
 * runs in the same order on every call: results are reproducible (no float atomics). A pass is one
 * launch of S blocks per channel (or per tile of channels), then a finalize of 32 to 256 threads per
 * channel (about S/4) over the S partials in a fixed tree; forward reads x twice (statistics,
 * normalize), backward x and dy twice (sums, dx).
 * x, y, dy and dx hold values of type t, f32, f16 or bf16 (all four alike), read as f32 and, when written, rounded
 * once (to nearest even); every sum, statistic, coef, saved value, gamma, beta, running statistic and parameter
 * gradient is f32 (or double) for every t, formed from the values in the same order as for f32: f16 and bf16 inputs
 * give the f32 inputs' statistics and parameter gradients bit for bit, and their outputs rounded once. */
struct glia__bn_geom {
    int64_t N, C, L;  /* x(N, C, L); rows layout when L == 1 */
    int S;            /* splits per channel, 1 <= S <= 65535 */
};

/* The geometry of x(N, C, L), with its splits chosen from the shape alone. */
struct glia__bn_geom glia__cuda_bn_geom(int64_t N, int64_t C, int64_t L);

/* y(C) = the sum over n and l of x(N, C, L) (+ y when beta is 1; beta 0 or 1; y is not read when beta is 0):
 * per split into part(S, C) floats, then the splits in order in double; the same bits every run (the
 * conv2d bias gradient). */
cudaError_t glia__cuda_channel_sum(float *y, float *part, const float *x, struct glia__bn_geom g, float beta,
                                   cudaStream_t st);

/* pmean(S, C), pm2(S, C) = Welford mean and sum of squared deviations of split s of channel c of x, less
 * the channel's pivot x(0, c, 0) (float statistics stay accurate for inputs with a large mean); float4 loads
 * where the layout and alignment allow (here and in the gradient sums) */
cudaError_t glia__cuda_bn_stats(float *pmean, float *pm2, const void *x, enum glia_dtype t, struct glia__bn_geom g,
                                cudaStream_t st);

/* glia__cuda_bn_stats and glia__cuda_bn_finalize (without use_running) in one launch (GLIA_CUDA_BN_FUSE=on): the last
 * block of each channel group finalizes its channels from the partials in split order (the mean's shift, then the
 * squared deviations about it, in double), with tickets: at least C unsigned in device memory, zero, which it leaves
 * zero. The same outputs to double rounding. */
cudaError_t glia__cuda_bn_stats_finalize(float *coef, float *saved, float *rmean, float *rvar, const float *gamma,
                                         const float *beta, const void *x, enum glia_dtype t, float *pmean, float *pm2,
                                         unsigned *tickets, struct glia__bn_geom g, bool update, double momentum,
                                         double eps, cudaStream_t st);

/* Per channel c, in double: mean (pivot added back) and biased variance var from the partials (Chan's
 * combination in split order; var = m2/M), or with use_running from rmean(C), rvar(C);
 * invstd = 1/sqrt(var + eps). coef(3, C) = (mean_hi, s, beta - mean_lo*s) as float with s = invstd*gamma
 * (gamma 1 and beta 0 when NULL), mean_hi = (float)mean and mean_lo = mean - mean_hi in double (the x - mean_hi
 * of glia__cuda_bn_normalize is exact near the mean; the low bits count through the shift); saved(3, C)
 * (unless NULL) = (mean_hi, mean_lo, invstd), mean_hi + mean_lo the mean to about 48 bits; with update,
 * rmean = (1-mom)*rmean + mom*mean and rvar = (1-mom)*rvar + mom*var*M/(M-1). x is read (the pivots) unless
 * use_running. */
cudaError_t glia__cuda_bn_finalize(float *coef, float *saved, float *rmean, float *rvar, const float *gamma,
                                   const float *beta, const void *x, enum glia_dtype t, const float *pmean,
                                   const float *pm2, struct glia__bn_geom g, bool use_running, bool update,
                                   double momentum, double eps, cudaStream_t st);

/* y(N, C, L) = (x(N, C, L) - coef(0, C)) * coef(1, C) + coef(2, C), each step rounded to float as on the
 * CPU (16-byte vector loads and stores where the layout and alignment allow); with relu (activation = relu) then
 * y < 0 ? 0 : y, the relu layer's (NaN stays NaN, -0 stays -0) */
cudaError_t glia__cuda_bn_normalize(void *y, const void *x, enum glia_dtype t, const float *coef, bool relu,
                                    struct glia__bn_geom g, cudaStream_t st);

/* pdy(S, C), pdyx(S, C) = sums over split s of channel c of dy and dy*x_hat, with saved(3, C) from the
 * forward: x_hat = ((x - mean_hi(c)) - mean_lo(c))*invstd(c). With relu, saved is (6, C), rows 3..5 the
 * forward's coef, and dy counts unless that forward's y was <= 0 (a NaN y passes it, as the relu layer's
 * gradient does; here and in glia__cuda_bn_dx and glia__cuda_bn_sync_partials). */
cudaError_t glia__cuda_bn_grad_stats(float *pdy, float *pdyx, const void *x, const void *dy, enum glia_dtype t,
                                     const float *saved, bool relu, struct glia__bn_geom g, cudaStream_t st);

/* Per channel c, in double from the partials in split order: sdy, sdyx; dgamma(C) (+)= sdyx and
 * dbeta(C) (+)= sdy when not NULL (add_*: +=, else =); coef(3, C) = k*(M, sdy, sdyx) as float with
 * k = gamma*invstd/M (gamma 1 when NULL, invstd from saved(3, C)). */
cudaError_t glia__cuda_bn_grad_finalize(float *coef, float *dgamma, bool add_dgamma, float *dbeta, bool add_dbeta,
                                        const float *gamma, const float *saved, const float *pdy,
                                        const float *pdyx, struct glia__bn_geom g, cudaStream_t st);

/* glia__cuda_bn_grad_stats and glia__cuda_bn_grad_finalize in one launch (GLIA_CUDA_BN_FUSE=on), tickets as for
 * glia__cuda_bn_stats_finalize. */
cudaError_t glia__cuda_bn_grad_stats_finalize(float *coef, float *dgamma, bool add_dgamma, float *dbeta,
                                              bool add_dbeta, const float *gamma, const float *saved, const void *x,
                                              const void *dy, enum glia_dtype t, bool relu, float *pdy, float *pdyx,
                                              unsigned *tickets, struct glia__bn_geom g, cudaStream_t st);

/* dx(N, C, L) (+)= coef(0, C)*dy - coef(1, C) - x_hat*coef(2, C), x_hat from saved(3, C) as above */
cudaError_t glia__cuda_bn_dx(void *dx, bool add, const void *x, const void *dy, enum glia_dtype t, const float *saved,
                             const float *coef, bool relu, struct glia__bn_geom g, cudaStream_t st);

/* ---- SyncBatchNorm (batchnorm with sync; the sums in double, each in an order fixed by the shape) ---- */

/* pa(S, C), pb(S, C) = sums over split s of channel c in double: without dy, of x and x*x; with dy (like x),
 * of dy and dy*x_hat, x_hat from saved(3, C) as above */
cudaError_t glia__cuda_bn_sync_partials(double *pa, double *pb, const void *x, const void *dy, enum glia_dtype t,
                                        const float *saved, bool relu, struct glia__bn_geom g, cudaStream_t st);

/* sums(2, C) = per channel the splits of pa(S, C), pb(S, C) added in a fixed order; with count, also
 * sums[2C] = N*L (this rank's values per channel); dgamma(C) (+)= sums(1, C) and dbeta(C) (+)= sums(0, C)
 * as float when not NULL (add_*: +=, else =) */
cudaError_t glia__cuda_bn_sync_collect(double *sums, float *dgamma, bool add_dgamma, float *dbeta, bool add_dbeta,
                                       const double *pa, const double *pb, bool count, struct glia__bn_geom g,
                                       cudaStream_t st);

/* From sums(2C + 1) = (sum x(C), sum x^2(C), n) over n values per channel (all ranks; n is read on the device, so
 * the host need not wait for the exchange), per channel in double:
 * mean = sum x / n, var = max(sum x^2 / n - mean^2, 0), invstd = 1/sqrt(var + eps); coef(3, C) and saved(3, C)
 * as glia__cuda_bn_finalize writes them; with update, rmean = (1-mom)*rmean + mom*mean and
 * rvar = (1-mom)*rvar + mom*var*n/(n-1). */
cudaError_t glia__cuda_bn_sync_finalize(float *coef, float *saved, float *rmean, float *rvar, const float *gamma,
                                        const float *beta, const double *sums, struct glia__bn_geom g,
                                        bool update, double momentum, double eps, cudaStream_t st);

/* coef(3, C) = k*(n, sum dy, sum dy*x_hat) as float, k = gamma*invstd/n (gamma 1 when NULL, invstd from
 * saved(3, C)), from sums(2C + 1) = (sum dy(C), sum dy*x_hat(C), n) over n values per channel (all ranks; n as
 * the forward's exchange left it): what
 * glia__cuda_bn_dx takes */
cudaError_t glia__cuda_bn_sync_grad_coef(float *coef, const float *gamma, const float *saved, const double *sums,
                                         struct glia__bn_geom g, cudaStream_t st);

/* ---- windowed pooling ---- */
struct glia__pool_geom {
    int64_t N, C, H, W, OH, OW;  /* x(N, C, H, W), y(N, C, OH, OW) */
    int64_t k, s, p;             /* window, stride, padding (p <= k/2) */
    bool nhwc;                   /* both in channels_last memory order, else NCHW */
};

/* y = max over the window of x (padding -inf; the first max in h, w order, the last NaN winning);
 * arg (NULL: not kept) = its plane offset h*W + w, in y's memory order. Needs H*W < 2^31. x, y, dx, dy here and in
 * the avgpool functions hold values of type t (f32, f16 or bf16); sums are formed in f32 and rounded once. */
cudaError_t glia__cuda_maxpool_forward(void *y, int32_t *arg, const void *x, enum glia_dtype t,
                                       struct glia__pool_geom g, cudaStream_t st);
/* dx(N, C, H, W) (+)= sum in (oh, ow) order of dy over the windows whose arg is this element */
cudaError_t glia__cuda_maxpool_backward(void *dx, bool add, const void *dy, const int32_t *arg, enum glia_dtype t,
                                        struct glia__pool_geom g, cudaStream_t st);
/* y = (sum over the clipped window of x, in h, w order) * inv, inv = 1/(k*k) (padding counts as 0) */
cudaError_t glia__cuda_avgpool_forward(void *y, const void *x, enum glia_dtype t, float inv, struct glia__pool_geom g,
                                       cudaStream_t st);
/* dx(N, C, H, W) (+)= sum in (oh, ow) order over the windows holding this element of dy * inv */
cudaError_t glia__cuda_avgpool_backward(void *dx, bool add, const void *dy, enum glia_dtype t, float inv,
                                        struct glia__pool_geom g, cudaStream_t st);

/* ---- global average pooling ---- */
/* y(N, C) = sum over HW of x(N, C, HW) (nhwc: x(N, HW, C)) * inv; values of type t (f32, f16 or bf16), the sum in
 * f32 and the result rounded once (and in backward) */
cudaError_t glia__cuda_gap_forward(void *y, const void *x, enum glia_dtype t, int64_t N, int64_t C, int64_t HW,
                                   bool nhwc, float inv, cudaStream_t st);
/* dx(N, C, HW) (nhwc: dx(N, HW, C)) (+)= dy(N, C) * inv */
cudaError_t glia__cuda_gap_backward(void *dx, bool add, const void *dy, enum glia_dtype t, int64_t N, int64_t C,
                                    int64_t HW, bool nhwc, float inv, cudaStream_t st);

/* ---- concat ---- */
/* dst(rows, width) (+)= src(rows, width), rows dpitch and spitch elements apart, elements of type t (f32, f16 or bf16;
 * a half sum formed in f32 and rounded once) */
cudaError_t glia__cuda_copy_rows(void *dst, int64_t dpitch, const void *src, int64_t spitch, int64_t rows,
                                 int64_t width, enum glia_dtype t, bool add, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
