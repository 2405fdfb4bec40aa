/* glia/types/optimizers.h — the settings of glia's optimizers sgd, adam, adamw, adadelta, lamb, lars and
 * novograd (one plugin each),
 * which every kernel of them reads, and the fp32 scalars of one step that all their kernels compute with.
 * Not an update loop: each device's kernel has its own (the CPU one in the optimizer's plugin, the CUDA one in
 * cuda.so). C and C++ (nvcc) alike. */
#ifndef GLIA_TYPES_OPTIMIZERS_H
#define GLIA_TYPES_OPTIMIZERS_H

#include <math.h>
#include <glia/config.h>
#include <glia/optimizer.h>

/* ---- sgd: torch.optim.SGD ---- */

#define GLIA_SGD_N_STATE 1  /* the momentum buffer */

/* o->attrs of sgd. */
struct glia_sgd_attrs {
    float momentum, dampening, weight_decay;  /* keys momentum, dampening, weight_decay */
    int nesterov;                             /* key nesterov (needs momentum > 0, dampening 0) */
};

/* The scalars of a step, in the precision the update computes in:
 * g' = g + wd w;  buf = g' (first step) or mu buf + (1 - damp) g';  d = nesterov ? g' + mu buf : buf (or g'
 * without momentum);  w -= lr d. */
struct glia_sgd_coef {
    float lr, mu, damp, wd;
    int first, nesterov;  /* first: step 1 (the buffer starts as the gradient) */
};

static inline struct glia_sgd_coef glia_sgd_coef(const struct glia_sgd_attrs *p, const struct glia_opt_step *s)
{
    struct glia_sgd_coef c;
    c.lr = (float)s->lr;
    c.mu = p->momentum;
    c.damp = p->dampening;
    c.wd = p->weight_decay;
    c.first = s->step == 1;
    c.nesterov = p->nesterov;
    return c;
}

/* ---- adam (torch.optim.Adam) and adamw (torch.optim.AdamW): amsgrad off, no maximize ---- */

#define GLIA_ADAM_N_STATE 2  /* m (gradient mean), v (squared gradient mean); adamw's too */

/* o->attrs of adam and of adamw: the same keys. adam adds weight_decay w to the gradient (L2); adamw decays
 * the weight itself, w *= 1 - lr weight_decay, before the update. */
struct glia_adam_attrs {
    double beta1, beta2, weight_decay;
    float eps;
};

/* Reads the keys beta1, beta2, eps and weight_decay of adam or adamw into a (its create). The schema's
 * bounds are closed, [0, 1]: a beta of 1 is refused here, as torch refuses it. */
static inline glia_status glia_adam_attrs_read(struct glia_adam_attrs *a, const struct glia_section *cfg)
{
    double b1 = glia_section_float(cfg, "beta1"), b2 = glia_section_float(cfg, "beta2");
    if (b1 >= 1) return glia_section_error(cfg, "beta1", GLIA_ECONFIG, "%.15g is out of range [0, 1)", b1);
    if (b2 >= 1) return glia_section_error(cfg, "beta2", GLIA_ECONFIG, "%.15g is out of range [0, 1)", b2);
    a->beta1 = b1;
    a->beta2 = b2;
    a->eps = (float)glia_section_float(cfg, "eps");
    a->weight_decay = glia_section_float(cfg, "weight_decay");
    return GLIA_OK;
}

/* The scalars of an adam or adamw step, bias corrections in double (torch's order of operations):
 * w *= keep;  g' = g + wd w;  m = b1 m + c1 g';  v = b2 v + c2 g'^2;
 * w -= step_size * (m / (sqrt(v) / bc2_sqrt + eps)),
 * c1 = 1 - b1, c2 = 1 - b2, step_size = lr / (1 - b1^t), bc2_sqrt = sqrt(1 - b2^t). adam's keep is 1 (its
 * kernels skip that product), adamw's wd is 0 (its kernels skip that sum). */
struct glia_adam_coef {
    float b1, c1, b2, c2, eps, wd, keep, step_size, bc2_sqrt;
};

static inline struct glia_adam_coef glia_adam_coef(const struct glia_adam_attrs *p, const struct glia_opt_step *s)
{
    double t = (double)s->step;
    struct glia_adam_coef c;
    c.b1 = (float)p->beta1;
    c.c1 = (float)(1 - p->beta1);
    c.b2 = (float)p->beta2;
    c.c2 = (float)(1 - p->beta2);
    c.eps = p->eps;
    c.wd = (float)p->weight_decay;
    c.keep = 1.0f;
    c.step_size = (float)(s->lr / (1 - pow(p->beta1, t)));
    c.bc2_sqrt = (float)sqrt(1 - pow(p->beta2, t));
    return c;
}

static inline struct glia_adam_coef glia_adamw_coef(const struct glia_adam_attrs *p, const struct glia_opt_step *s)
{
    struct glia_adam_coef c = glia_adam_coef(p, s);
    c.wd = 0.0f;
    c.keep = (float)(1 - s->lr * p->weight_decay);  /* torch: param.mul_(1 - lr * wd) */
    return c;
}

/* The moments of element i of an adam or adamw step, m = b1 m + c1 g and v = b2 v + c2 g^2, stored, and the
 * change of its weight, step_size * (m / (sqrt(v) / bc2_sqrt + eps)), in float, as the CPU kernels compute
 * them (g: the gradient, adam's with wd w added). */
static inline float glia_adam_moments(struct glia_adam_coef k, float g, float *m, float *v)
{
    float mi = k.b1 * *m + k.c1 * g;
    float vi = k.b2 * *v + k.c2 * g * g;
    *m = mi;
    *v = vi;
    return k.step_size * (mi / (sqrtf(vi) / k.bc2_sqrt + k.eps));
}

/* ---- adadelta: torch.optim.Adadelta (no maximize) ---- */

#define GLIA_ADADELTA_N_STATE 2  /* square_avg, acc_delta */

/* o->attrs of adadelta. */
struct glia_adadelta_attrs {
    double rho;
    float eps, weight_decay;
};

/* The scalars of a step: g' = g + wd w;  v = rho v + c g'^2;  d = sqrt(u + eps) / sqrt(v + eps) g';
 * u = rho u + c d^2;  w -= lr d, with c = 1 - rho. */
struct glia_adadelta_coef {
    float lr, rho, c, eps, wd;
};

static inline struct glia_adadelta_coef glia_adadelta_coef(const struct glia_adadelta_attrs *p,
                                                           const struct glia_opt_step *s)
{
    struct glia_adadelta_coef c;
    c.lr = (float)s->lr;
    c.rho = (float)p->rho;
    c.c = (float)(1 - p->rho);
    c.eps = p->eps;
    c.wd = p->weight_decay;
    return c;
}

/* ---- per-tensor norms (lamb): one order of operations for every kernel ----
 * A tensor of the arena (glia_opt_step.seg) is cut into chunks of GLIA_NORM_CHUNK elements; a chunk's sum of squares
 * is that of a block of GLIA_NORM_LANES lanes (lane l adds x[l]^2, x[l + LANES]^2, ... in turn, then lanes l and
 * l + h are added for h = LANES/2, ..., 1); a tensor's sum is its chunks' sums added in turn, its norm the fp32 root
 * of that; the sums of all tensors are added in turn for a global norm. All fp32, so that the CPU and the CUDA
 * kernels give the same norms bit for bit. Chunk j of tensor i (offset off) keeps its sum at
 * glia_norm_slot(off, i, j) of an array of glia_norm_slots(len, n_seg): disjoint for disjoint ascending tensors. */
#define GLIA_NORM_CHUNK 4096
#define GLIA_NORM_LANES 256
#ifdef __CUDACC__
#define GLIA_NORM_FN static inline __host__ __device__  /* the CUDA kernels index with them too */
#else
#define GLIA_NORM_FN static inline
#endif

GLIA_NORM_FN int64_t glia_norm_slot(int64_t off, int i, int64_t j) { return off / GLIA_NORM_CHUNK + i + j; }
GLIA_NORM_FN int64_t glia_norm_slots(int64_t len, int n_seg) { return len / GLIA_NORM_CHUNK + n_seg + 1; }
GLIA_NORM_FN int64_t glia_norm_chunks(int64_t size) { return (size + GLIA_NORM_CHUNK - 1) / GLIA_NORM_CHUNK; }

/* The sum of squares of x[0, n), n <= GLIA_NORM_CHUNK, in the lanes' order (the CPU kernels'). */
static inline float glia_sumsq_chunk(const float *x, int64_t n)
{
    float lane[GLIA_NORM_LANES];
    for (int l = 0; l < GLIA_NORM_LANES; l++) lane[l] = 0.0f;
    int64_t i = 0;
    for (; i + GLIA_NORM_LANES <= n; i += GLIA_NORM_LANES)  /* lane l adds x[l], x[l + LANES], ... in turn */
        for (int l = 0; l < GLIA_NORM_LANES; l++) {
            float sq = x[i + l] * x[i + l];
            lane[l] = lane[l] + sq;
        }
    for (int l = 0; i + l < n; l++) {
        float sq = x[i + l] * x[i + l];
        lane[l] = lane[l] + sq;
    }
    for (int h = GLIA_NORM_LANES / 2; h > 0; h /= 2)
        for (int l = 0; l < h; l++) lane[l] = lane[l] + lane[l + h];
    return lane[0];
}

/* sum[t] = tensor t's sum of squares from its chunks' sums in part (at their glia_norm_slot), added in turn. */
static inline void glia_norm_add(const struct glia_opt_step *s, const float *part, float *sum)
{
    for (int t = 0; t < s->n_seg; t++) {
        float acc = 0.0f;
        for (int64_t j = 0; j < glia_norm_chunks(s->seg[2 * t + 1]); j++)
            acc = acc + part[glia_norm_slot(s->seg[2 * t], t, j)];
        sum[t] = acc;
    }
}

/* sum[t] = the sum of squares of x over tensor t of s, in the order above (the CPU kernels'); part: scratch of
 * glia_norm_slots(s->n, s->n_seg) floats for the chunks' sums. */
static inline void glia_norm_sums(const struct glia_opt_step *s, const float *x, float *part, float *sum)
{
    for (int t = 0; t < s->n_seg; t++) {
        int64_t off = s->seg[2 * t], size = s->seg[2 * t + 1], nc = glia_norm_chunks(size);
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (int64_t j = 0; j < nc; j++) {
            int64_t len = size - j * GLIA_NORM_CHUNK;
            part[glia_norm_slot(off, t, j)] = glia_sumsq_chunk(x + off + j * GLIA_NORM_CHUNK,
                                                               len < GLIA_NORM_CHUNK ? len : GLIA_NORM_CHUNK);
        }
    }
    glia_norm_add(s, part, sum);
}

/* Whether tensor t of s takes weight decay (its decay_mask flag, the same over the tensor; all without a mask). */
static inline bool glia_seg_decays(const struct glia_opt_step *s, int t)
{
    return !s->decay_mask || s->decay_mask[s->seg[2 * t]] != 0.0f;
}

/* ---- lamb: NVIDIA Apex's FusedLAMB (adam_w_mode, grad_averaging on) ---- */

#define GLIA_LAMB_N_STATE 2  /* m, v as adam's */

/* o->attrs of lamb. */
struct glia_lamb_attrs {
    float beta1, beta2, eps, weight_decay, max_grad_norm;  /* keys of the same names */
    int bias_correction, nvlamb;                          /* keys bias_correction, nvlamb */
};

/* The scalars of a step, in fp32 as Apex's multi_tensor_lamb.cu has them. With G the global gradient norm,
 * f = G / max_grad_norm where max_grad_norm > 0 and G > max_grad_norm, else 1; per element of a tensor:
 * g' = g / f;  m = m b1 + c1 g';  v = v b2 + (c2 g') g';  u = (m / bc1) / (sqrt(v / bc2) + eps) + wd w
 * (wd 0 on tensors with decay off); per tensor: r = lr (|w| / |u|) where the tensor decays (every tensor with
 * nvlamb) and both norms are nonzero, else lr;  w = w - r u  (|w| before the step). c1 = 1 - b1, c2 = 1 - b2,
 * bc1 = 1 - b1^t, bc2 = 1 - b2^t (1 without bias_correction). */
struct glia_lamb_coef {
    float lr, b1, c1, b2, c2, bc1, bc2, eps, wd, max_norm;
    int nvlamb;
};

static inline struct glia_lamb_coef glia_lamb_coef(const struct glia_lamb_attrs *p, const struct glia_opt_step *s)
{
    struct glia_lamb_coef c;
    c.lr = (float)s->lr;
    c.b1 = p->beta1;
    c.c1 = 1.0f - p->beta1;
    c.b2 = p->beta2;
    c.c2 = 1.0f - p->beta2;
    c.bc1 = p->bias_correction ? (float)(1 - pow((double)p->beta1, (double)s->step)) : 1.0f;
    c.bc2 = p->bias_correction ? (float)(1 - pow((double)p->beta2, (double)s->step)) : 1.0f;
    c.eps = p->eps;
    c.wd = p->weight_decay;
    c.max_norm = p->max_grad_norm;
    c.nvlamb = p->nvlamb;
    return c;
}

/* f of a step from the global gradient norm gn. */
static inline float glia_lamb_clip(struct glia_lamb_coef k, float gn)
{
    return k.max_norm > 0.0f && gn > k.max_norm ? gn / k.max_norm : 1.0f;
}

/* u of an element from its new moments m, v and its weight w; wd: k.wd, or 0 where the tensor's decay is off. */
static inline float glia_lamb_u(struct glia_lamb_coef k, float wd, float w, float m, float v)
{
    float denom = sqrtf(v / k.bc2) + k.eps;
    return m / k.bc1 / denom + wd * w;
}

/* The step's factor of a tensor: lr (wn / un) where the trust ratio applies (decay: the tensor decays) and both
 * norms are nonzero, else lr. */
static inline float glia_lamb_ratio(struct glia_lamb_coef k, bool decay, float wn, float un)
{
    if (!(k.nvlamb || (decay && k.wd != 0.0f))) return k.lr;
    return un != 0.0f && wn != 0.0f ? k.lr * (wn / un) : k.lr;
}

/* One element's moments, stored, and its u (f: glia_lamb_clip's). */
static inline float glia_lamb_moments(struct glia_lamb_coef k, float f, float wd, float g, float w, float *m, float *v)
{
    float sg = g / f;
    float mi = *m * k.b1 + k.c1 * sg;
    float vi = *v * k.b2 + k.c2 * sg * sg;
    *m = mi;
    *v = vi;
    return glia_lamb_u(k, wd, w, mi, vi);
}

/* ---- lars: NVIDIA Apex's LARC wrapping torch.optim.SGD ---- */

#define GLIA_LARS_N_STATE 1  /* the momentum buffer */

/* o->attrs of lars: sgd's keys and LARC's. */
struct glia_lars_attrs {
    struct glia_sgd_attrs sgd;        /* momentum, dampening, nesterov, weight_decay */
    float trust_coefficient, eps;     /* keys of the same names */
    int clip;                         /* key clip */
};

/* The scalars of a step: sgd's (its wd is LARC's, folded into the gradient; the SGD step itself has none) and
 * LARC's. Per tensor that decays, with |w| and |g| both nonzero: a = tc |w| / ((|g| + |w| wd) + eps), clip: a =
 * min(a / lr, 1); g' = (g + wd w) a; other tensors: g' = g (no decay: LARC takes the decay out of SGD and adds it
 * only where it scales); then sgd's momentum update of g' without decay. */
struct glia_lars_coef {
    struct glia_sgd_coef sgd;
    float tc, eps;
    int clip;
};

static inline struct glia_lars_coef glia_lars_coef(const struct glia_lars_attrs *p, const struct glia_opt_step *s)
{
    struct glia_lars_coef c;
    c.sgd = glia_sgd_coef(&p->sgd, s);
    c.tc = p->trust_coefficient;
    c.eps = p->eps;
    c.clip = p->clip;
    return c;
}

/* The factor a of a tensor (-1: the tensor's gradient is left as it is, no decay and no scaling), fp32 as LARC's
 * torch ops. */
static inline float glia_lars_factor(struct glia_lars_coef k, bool decay, float wn, float gn)
{
    if (!decay || wn == 0.0f || gn == 0.0f) return -1.0f;
    float den = gn + wn * k.sgd.wd;
    den = den + k.eps;
    float a = k.tc * wn / den;
    if (k.clip) {
        a = a / k.sgd.lr;
        a = a < 1.0f ? a : 1.0f;
    }
    return a;
}

/* g' of an element: (g + wd w) a, or g where a is -1. */
static inline float glia_lars_grad(struct glia_lars_coef k, float a, float g, float w)
{
    return a < 0.0f ? g : (g + k.sgd.wd * w) * a;
}

/* ---- novograd: NVIDIA Apex's FusedNovoGrad (norm_type 2, reg_inside_moment off) ---- */

/* m per element; n, the moving norm of a tensor's gradient, one float per tensor: kept in the first element of the
 * tensor's segment of the second state array (the rest of that array stays 0), so that checkpoints carry it. */
#define GLIA_NOVOGRAD_N_STATE 2

/* o->attrs of novograd. */
struct glia_novograd_attrs {
    float beta1, beta2, eps, weight_decay;  /* keys of the same names */
    int grad_averaging, bias_correction;    /* keys of the same names */
};

/* The scalars of a step, fp32 as Apex's multi_tensor_novograd.cu has them. Per tensor, with S its gradient's sum of
 * squares: n = sqrt(b2 n n + c2 S), n starting as sqrt(S) on the first step (Apex's init);  per element:
 * m = b1 m + b3 g;  w = w - lr ((m / bc1) / (n / bc2 + eps) + wd w)  (wd 0 on tensors with decay off);
 * b3 = 1 - b1 with grad_averaging, else 1; c2 = 1 - b2; bc1 = 1 - b1^t, bc2 = sqrt(1 - b2^t) (1 without
 * bias_correction). */
struct glia_novograd_coef {
    float lr, b1, b3, b2, c2, bc1, bc2, eps, wd;
    int first;
};

static inline struct glia_novograd_coef glia_novograd_coef(const struct glia_novograd_attrs *p,
                                                           const struct glia_opt_step *s)
{
    struct glia_novograd_coef c;
    c.lr = (float)s->lr;
    c.b1 = p->beta1;
    c.b3 = p->grad_averaging ? 1.0f - p->beta1 : 1.0f;
    c.b2 = p->beta2;
    c.c2 = 1.0f - p->beta2;
    c.bc1 = p->bias_correction ? (float)(1 - pow((double)p->beta1, (double)s->step)) : 1.0f;
    c.bc2 = p->bias_correction ? (float)sqrt(1 - pow((double)p->beta2, (double)s->step)) : 1.0f;
    c.eps = p->eps;
    c.wd = p->weight_decay;
    c.first = s->step == 1;
    return c;
}

/* A tensor's new n from its old one and its gradient's sum of squares. */
static inline float glia_novograd_norm(struct glia_novograd_coef k, float n, float sumsq)
{
    if (k.first) n = sqrtf(sumsq);
    float a = k.b2 * n * n;
    return sqrtf(a + k.c2 * sumsq);
}

#endif
