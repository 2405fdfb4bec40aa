/* plugins/layers/attention — layer type attention (multi-head self-attention over the fused q, k, v projection:
 * keys, shape checks, output shape, flops) and its CPU kernel, flash-style (OpenMP): per (sample, head) and tile of
 * queries an online softmax over tiles of keys, so that no more than a tile of the T x T scores exists at a time;
 * backward recomputes each tile's probabilities from the kept row logsumexp; a cached decode (glia_model_decode) keeps
 * the keys and values of the positions it has seen. Not the projections (linear layers
 * before and after it) and not the CUDA kernel (backends/cuda/attention.c). */
#include <glia/glia.h>
#include <glia/types/attention.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Queries and keys of a tile: a query tile meets at most TILE x TILE scores at a time. */
#define TILE 16

static const struct glia_key attn_keys[] = {
    GLIA_KEY("heads", GLIA_KEY_INT, NULL, "attention heads; must divide C (the input's last dim is 3C)",
             .required = true, .min = 1, .max = 1e6),
    GLIA_KEY("causal", GLIA_KEY_BOOL, "on", "query i attends to keys j <= i only (a decoder's self-attention)"),
    GLIA_KEY("dropout", GLIA_KEY_FLOAT, "0", "probability of zeroing an attention probability in training",
             .min = 0, .max = 0.999999),
    GLIA_KEY_END};

/* Reads the keys and checks qkv (N, T, 3C) against heads. */
static glia_status attn_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                               int n_in)
{
    (void)n_in;
    struct glia_attention_attrs *d = l->attrs;
    d->heads = glia_section_int(cfg, "heads");
    d->causal = glia_section_bool(cfg, "causal");
    d->p = (float)glia_section_float(cfg, "dropout");
    char why[256];
    if (d->heads > 0 && !glia_attention_shape_ok(&in[0], d->heads, why, sizeof why))
        return glia_section_error(cfg, in[0].ndim == 3 && in[0].dim[2] % 3 == 0 ? "heads" : NULL, GLIA_ESHAPE, "%s",
                                  why);
    return GLIA_OK;
}

/* (N, T, 3C) -> (N, T, C) */
static glia_status attn_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                              struct glia_shape *out)
{
    (void)n_in;
    const struct glia_attention_attrs *d = l->attrs;
    char why[256];
    if (!glia_attention_shape_ok(&in[0], d->heads, why, sizeof why)) return GLIA_ESHAPE;
    *out = glia_shape_make(3, (int64_t[]){in[0].dim[0], in[0].dim[1], in[0].dim[2] / 3});
    return GLIA_OK;
}

/* Q Kᵀ and P V: 2 x 2 x D multiply-adds per (query, key) pair that is not masked, per head. */
static uint64_t attn_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    (void)n_in;
    const struct glia_attention_attrs *d = l->attrs;
    uint64_t N = (uint64_t)in[0].dim[0], T = (uint64_t)in[0].dim[1], C = (uint64_t)in[0].dim[2] / 3;
    uint64_t pairs = d->causal ? T * (T + 1) / 2 : T * T;
    return 4 * N * pairs * C;
}

/* ---- the CPU kernel ---- */

/* l->state of the CPU kernel. */
struct attn_state {
    float *lse;              /* (N, heads, T): each query row's logsumexp of the scaled, masked scores in the last
                                training forward */
    int64_t n_lse;           /* elements of lse kept for backward (0: none) */
    int64_t cap;             /* elements allocated */
    struct glia_seed_at seed; /* the dropout seed of that forward */
    float *kv;               /* a cached decode's keys and values (N, H, 2, kv_t, D): positions 0 .. pos + T - 1 of
                                its last call */
    int64_t kv_n, kv_t;      /* the sequences and positions kv has room for */
};

static void attn_destroy(struct glia_layer *l)
{
    struct attn_state *s = l->state;
    free(s->lse);
    free(s->kv);
}

/* The sizes of one call, qkv (N, T, 3C) with C = H * D. */
struct dims {
    int64_t N, T, C, H, D;
};

static struct dims dims_of(const struct glia_layer *l, const struct glia_shape *qkv)
{
    const struct glia_attention_attrs *a = l->attrs;
    struct dims z = {qkv->dim[0], qkv->dim[1], qkv->dim[2] / 3, a->heads, 0};
    z.D = z.C / z.H;
    return z;
}

/* dst(n, D) = rows t0..t0+n-1 of head h of part (0: q, 1: k, 2: v) of sample nn's x(T, 3C) */
static void load_rows(float *dst, const float *x, const struct dims *z, int64_t nn, int64_t h, int part, int64_t t0,
                      int64_t n)
{
    for (int64_t r = 0; r < n; r++)
        memcpy(dst + r * z->D, x + (nn * z->T + t0 + r) * 3 * z->C + part * z->C + h * z->D,
               (size_t)z->D * sizeof(float));
}

static float dot(const float *a, const float *b, int64_t D)
{
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t d = 0; d < D; d++) s += a[d] * b[d];
    return s;
}

/* o(D) += w * v(D) */
static void axpy(float *o, float w, const float *v, int64_t D)
{
#pragma omp simd
    for (int64_t d = 0; d < D; d++) o[d] += w * v[d];
}

/* The last key query i sees, plus one, of keys below jend. */
static int64_t key_end(bool causal, int64_t i, int64_t jend) { return causal && i + 1 < jend ? i + 1 : jend; }

/* y(N, T, C) and, when lse is not NULL, lse(N, H, T) for the query tile i0.. of head h of sample n: an online
 * softmax over the key tiles (running max m and sum l per row, the output rescaled as the max grows), the
 * probabilities dropped with keep(seed) when p > 0. buf holds 4 * TILE * D floats. */
static void forward_tile(float *y, float *lse, const float *x, const struct dims *z, bool causal, float p,
                         uint64_t seed, int64_t n, int64_t h, int64_t i0, float *buf)
{
    int64_t D = z->D, T = z->T, nh = n * z->H + h;
    int64_t nq = i0 + TILE < T ? TILE : T - i0, jend = causal ? i0 + nq : T;
    float *Q = buf, *K = Q + TILE * D, *V = K + TILE * D, *O = V + TILE * D;
    float m[TILE], sum[TILE], s[TILE];
    float scale = 1.0f / sqrtf((float)D), keep_scale = 1.0f / (1.0f - p);
    load_rows(Q, x, z, n, h, 0, i0, nq);
    memset(O, 0, (size_t)(nq * D) * sizeof(float));
    for (int64_t r = 0; r < nq; r++) m[r] = -INFINITY, sum[r] = 0;
    for (int64_t j0 = 0; j0 < jend; j0 += TILE) {
        int64_t nk = j0 + TILE < jend ? TILE : jend - j0;
        load_rows(K, x, z, n, h, 1, j0, nk);
        load_rows(V, x, z, n, h, 2, j0, nk);
        for (int64_t r = 0; r < nq; r++) {
            int64_t i = i0 + r, nc = key_end(causal, i, j0 + nk) - j0;
            if (nc <= 0) continue;
            float mx = -INFINITY;
            for (int64_t c = 0; c < nc; c++) {
                s[c] = dot(Q + r * D, K + c * D, D) * scale;
                mx = s[c] > mx ? s[c] : mx;
            }
            float mnew = mx > m[r] ? mx : m[r], alpha = expf(m[r] - mnew);  /* exp(-inf) = 0 at the first tile */
            float *o = O + r * D;
            sum[r] *= alpha;
#pragma omp simd
            for (int64_t d = 0; d < D; d++) o[d] *= alpha;
            for (int64_t c = 0; c < nc; c++) {
                float e = expf(s[c] - mnew);
                sum[r] += e;
                if (p > 0) e = glia_attention_keep(seed, p, nh, i, j0 + c, T) ? e * keep_scale : 0.0f;
                axpy(o, e, V + c * D, D);
            }
            m[r] = mnew;
        }
    }
    for (int64_t r = 0; r < nq; r++) {
        float *yr = y + (n * T + i0 + r) * z->C + h * D, inv = 1.0f / sum[r];
        for (int64_t d = 0; d < D; d++) yr[d] = O[r * D + d] * inv;
        if (lse) lse[nh * T + i0 + r] = m[r] + logf(sum[r]);
    }
}

/* ---- a cached decode: the queries of positions pos .. pos + T - 1 against the keys kept from earlier calls ---- */

/* Room in st->kv for n sequences of `end` positions; the first `keep` positions of each stay. */
static glia_status kv_room(struct glia_layer *l, struct attn_state *st, const struct dims *z, int64_t end, int64_t keep)
{
    if (st->kv && st->kv_n == z->N && st->kv_t >= end) return GLIA_OK;
    int64_t t = st->kv_n == z->N && 2 * st->kv_t > end ? 2 * st->kv_t : end;
    float *kv = malloc((size_t)(z->N * z->H * 2 * t * z->D) * sizeof(float));
    if (!kv) return glia_error(l->ctx, GLIA_ENOMEM, "[%s] attention: no memory for the keys and values of %lld "
                               "positions", l->name, (long long)t);
    for (int64_t s = 0; s < z->N * z->H * 2 && keep > 0; s++)  /* keep > 0 only when kv_n == N */
        memcpy(kv + s * t * z->D, st->kv + s * st->kv_t * z->D, (size_t)(keep * z->D) * sizeof(float));
    free(st->kv);
    st->kv = kv;
    st->kv_n = z->N;
    st->kv_t = t;
    return GLIA_OK;
}

/* y(N, T, C) of qkv(N, T, 3C) at positions pos.., each query i against the kept keys and values 0 .. i (causal): the
 * scores in buf (i + 1 floats), their softmax, its sum of the values. */
static void decode_row(float *y, const float *x, const float *kv, const struct dims *z, int64_t kv_t, int64_t pos,
                       int64_t n, int64_t h, int64_t r, float *buf)
{
    int64_t D = z->D, nk = pos + r + 1;
    const float *q = x + (n * z->T + r) * 3 * z->C + h * D, *K = kv + (n * z->H + h) * 2 * kv_t * D, *V = K + kv_t * D;
    float scale = 1.0f / sqrtf((float)D), mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < nk; j++) {
        buf[j] = dot(q, K + j * D, D) * scale;
        mx = buf[j] > mx ? buf[j] : mx;
    }
    float *yr = y + (n * z->T + r) * z->C + h * D;
    memset(yr, 0, (size_t)D * sizeof(float));
    for (int64_t j = 0; j < nk; j++) {
        float e = expf(buf[j] - mx);
        sum += e;
        axpy(yr, e, V + j * D, D);
    }
    float inv = 1.0f / sum;
    for (int64_t d = 0; d < D; d++) yr[d] *= inv;
}

/* The eval forward of a cached decode: the keys and values of positions pos .. pos + T - 1 join the kept ones, then
 * each of the T queries attends to positions 0 .. its own. */
static glia_status attn_decode(struct glia_layer *l, const struct glia_fwd *a, const struct dims *z)
{
    const struct glia_attention_attrs *at = l->attrs;
    struct attn_state *st = l->state;
    if (!at->causal)
        return glia_error(l->ctx, GLIA_EUNSUPPORTED, "[%s] attention: a cached decode needs causal = on (with causal = "
                          "off an earlier position attends to later ones)", l->name);
    int64_t pos = a->pos, end = pos + z->T;
    glia_status s = kv_room(l, st, z, end, pos);
    if (s) return s;
    const float *x = glia_tensor_f32(a->in[0]);
    for (int64_t n = 0; n < z->N; n++)
        for (int64_t h = 0; h < z->H; h++)
            for (int part = 1; part <= 2; part++)
                load_rows(st->kv + ((n * z->H + h) * 2 + part - 1) * st->kv_t * z->D + pos * z->D, x, z, n, h, part, 0,
                          z->T);
    int nt = omp_get_max_threads();
    float *buf = malloc((size_t)nt * (size_t)end * sizeof(float));
    if (!buf) return glia_error(l->ctx, GLIA_ENOMEM, "[%s] attention: no memory for its scores", l->name);
    float *y = glia_tensor_f32(a->out);
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int64_t nh = 0; nh < z->N * z->H; nh++)
        for (int64_t r = 0; r < z->T; r++)
            decode_row(y, x, st->kv, z, st->kv_t, pos, nh / z->H, nh % z->H, r,
                       buf + (size_t)omp_get_thread_num() * (size_t)end);
    free(buf);
    return GLIA_OK;
}

/* y(N, T, C) = softmax(q kᵀ / sqrt(D) + mask) v per head (dropped in training when dropout > 0) of qkv(N, T, 3C);
 * training keeps the rows' logsumexp (N, H, T) and the seed. */
static glia_status attn_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_attention_attrs *at = l->attrs;
    struct attn_state *st = l->state;
    struct dims z = dims_of(l, &a->in[0]->shape);
    if (a->decode && !a->train) return attn_decode(l, a, &z);
    int64_t nlse = z.N * z.H * z.T, tiles = (z.T + TILE - 1) / TILE;
    st->n_lse = 0;
    if (a->train && nlse > st->cap) {
        float *p = realloc(st->lse, (size_t)nlse * sizeof(float));
        if (!p) return glia_error(l->ctx, GLIA_ENOMEM, "[%s] attention: no memory for %lld row sums", l->name,
                                  (long long)nlse);
        st->lse = p;
        st->cap = nlse;
    }
    int nt = omp_get_max_threads();
    float *buf = malloc((size_t)nt * 4 * TILE * (size_t)z.D * sizeof(float));
    if (!buf) return glia_error(l->ctx, GLIA_ENOMEM, "[%s] attention: no memory for its tiles", l->name);
    float p = a->train ? at->p : 0.0f;
    float *lse = a->train ? st->lse : NULL;
    if (a->train) st->seed = glia_seed_of(a);
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int64_t nh = 0; nh < z.N * z.H; nh++)
        for (int64_t t = 0; t < tiles; t++)
            forward_tile(y, lse, x, &z, at->causal, p, a->seed, nh / z.H, nh % z.H, t * TILE,
                         buf + (size_t)omp_get_thread_num() * 4 * TILE * (size_t)z.D);
    free(buf);
    if (a->train) st->n_lse = nlse;
    return GLIA_OK;
}

/* Per thread of backward: dq, dk, dv (T, D) of one head, delta (T), and the tiles Q, dY, K, V (TILE, D). */
static size_t bwd_floats(const struct dims *z) { return (size_t)(3 * z->T * z->D + z->T + 4 * TILE * z->D); }

/* d = dqkv (+)= g(T, D) into rows of head h of part `part` of sample n */
static void store_rows(float *d, const float *g, const struct dims *z, int64_t n, int64_t h, int part, bool add)
{
    for (int64_t t = 0; t < z->T; t++) {
        float *row = d + (n * z->T + t) * 3 * z->C + part * z->C + h * z->D;
        const float *gr = g + t * z->D;
        if (add)
            for (int64_t k = 0; k < z->D; k++) row[k] += gr[k];
        else
            memcpy(row, gr, (size_t)z->D * sizeof(float));
    }
}

/* dqkv of head h of sample n from dy, y and lse: each tile's probabilities recomputed, P = exp(s - lse), Z = P
 * dropped and scaled; dV += Zᵀ dY, dZ = dY Vᵀ, dP = dZ dropped and scaled, dS = P ∘ (dP − rowsum(dY ∘ Y)),
 * dQ += dS K / sqrt(D), dK += dSᵀ Q / sqrt(D). Causal tiles above the diagonal are skipped. */
static void backward_head(float *dx, bool add, const float *x, const float *y, const float *dy, const float *lse,
                          const struct dims *z, bool causal, float p, uint64_t seed, int64_t n, int64_t h, float *buf)
{
    int64_t D = z->D, T = z->T, C = z->C, nh = n * z->H + h;
    float *dq = buf, *dk = dq + T * D, *dv = dk + T * D, *delta = dv + T * D;
    float *Q = delta + T, *dY = Q + TILE * D, *K = dY + TILE * D, *V = K + TILE * D;
    float scale = 1.0f / sqrtf((float)D), keep_scale = 1.0f / (1.0f - p);
    memset(dq, 0, (size_t)(3 * T * D) * sizeof(float));
    for (int64_t i = 0; i < T; i++) {
        const float *o = y + (n * T + i) * C + h * D, *g = dy + (n * T + i) * C + h * D;
        delta[i] = dot(o, g, D);
    }
    for (int64_t i0 = 0; i0 < T; i0 += TILE) {
        int64_t nq = i0 + TILE < T ? TILE : T - i0, jend = causal ? i0 + nq : T;
        load_rows(Q, x, z, n, h, 0, i0, nq);
        for (int64_t r = 0; r < nq; r++) memcpy(dY + r * D, dy + (n * T + i0 + r) * C + h * D, (size_t)D * sizeof(float));
        for (int64_t j0 = 0; j0 < jend; j0 += TILE) {
            int64_t nk = j0 + TILE < jend ? TILE : jend - j0;
            load_rows(K, x, z, n, h, 1, j0, nk);
            load_rows(V, x, z, n, h, 2, j0, nk);
            for (int64_t r = 0; r < nq; r++) {
                int64_t i = i0 + r, nc = key_end(causal, i, j0 + nk) - j0;
                float li = lse[nh * T + i];
                for (int64_t c = 0; c < nc; c++) {
                    int64_t j = j0 + c;
                    float pr = expf(dot(Q + r * D, K + c * D, D) * scale - li);
                    float kept = p > 0 ? (glia_attention_keep(seed, p, nh, i, j, T) ? keep_scale : 0.0f) : 1.0f;
                    axpy(dv + j * D, pr * kept, dY + r * D, D);
                    float ds = pr * (dot(dY + r * D, V + c * D, D) * kept - delta[i]) * scale;
                    axpy(dq + i * D, ds, K + c * D, D);
                    axpy(dk + j * D, ds, Q + r * D, D);
                }
            }
        }
    }
    store_rows(dx, dq, z, n, h, 0, add);
    store_rows(dx, dk, z, n, h, 1, add);
    store_rows(dx, dv, z, n, h, 2, add);
}

/* dqkv(N, T, 3C) (+)= the gradient of the last training forward, from qkv, y(N, T, C), dy(N, T, C) and the kept
 * lse (N, H, T). One thread per (sample, head): each adds into its own rows only, in a fixed order. */
static glia_status attn_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_attention_attrs *at = l->attrs;
    const struct attn_state *st = l->state;
    if (!a->din[0]) return GLIA_OK;
    struct dims z = dims_of(l, &a->in[0]->shape);
    if (st->n_lse != z.N * z.H * z.T)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] attention backward needs a training forward just before it",
                          l->name);
    int nt = omp_get_max_threads();
    size_t per = bwd_floats(&z);
    float *buf = malloc((size_t)nt * per * sizeof(float));
    if (!buf) return glia_error(l->ctx, GLIA_ENOMEM, "[%s] attention: no memory for its backward tiles", l->name);
    const float *x = glia_tensor_f32(a->in[0]), *y = glia_tensor_f32(a->out), *dy = glia_tensor_f32(a->dout);
    float *dx = glia_tensor_f32(a->din[0]);
    bool add = a->din_accumulate[0];
#pragma omp parallel for schedule(dynamic)
    for (int64_t nh = 0; nh < z.N * z.H; nh++)
        backward_head(dx, add, x, y, dy, st->lse, &z, at->causal, at->p, st->seed.seed, nh / z.H, nh % z.H,
                      buf + (size_t)omp_get_thread_num() * per);
    free(buf);
    return GLIA_OK;
}

static const struct glia_layer_type attn_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "attention",
    .doc = "multi-head self-attention over a fused q, k, v projection (N, T, 3C) -> (N, T, C), causal by default",
    .keys = attn_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs_size = sizeof(struct glia_attention_attrs),
    .create = attn_create,
    .infer_shape = attn_infer,
    .flops = attn_flops,
};

static const struct glia_kernel attn_cpu = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "attention",
    .impl = "cpu",
    .doc = "OpenMP, flash-style tiles; a cached decode keeps the keys and values",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_DECODE,
    .state_size = sizeof(struct attn_state),
    .destroy = attn_destroy,
    .forward = attn_forward,
    .backward = attn_backward,
};

static glia_status attn_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &attn_type);
    return st ? st : glia_register_kernel(r, &attn_cpu);
}

GLIA_PLUGIN_DEFINE(attention, "2.0", "MIT", "multi-head self-attention (CPU, OpenMP)", attn_init)
