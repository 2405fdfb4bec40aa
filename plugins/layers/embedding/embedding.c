/* plugins/layers/embedding — layer type embedding, a learned lookup table (keys, the weight and its padding row,
 * the output shape), and its CPU kernel (OpenMP): token ids (N, L) i32 give the rows weight[token] as
 * (N, dim, 1, L) with output = conv (nn.Embedding followed by a transpose to channels first, in NCHW or
 * channels_last memory, for text CNNs) or as (N, L, dim) with output = sequence (nn.Embedding itself, for
 * transformers); padding_idx as nn.Embedding's (a row that starts at zero, is looked up like any other and gets no
 * gradient). Not max_norm, sparse gradients or a pretrained table. */
#include <glia/glia.h>
#include <glia/types/embedding.h>
#include <string.h>
#include <omp.h>

static const struct glia_key emb_keys[] = {
    GLIA_KEY("vocab", GLIA_KEY_INT, NULL, "rows of the table: token ids are in [0, vocab)", .required = true, .min = 1,
             .max = 1 << 30),
    GLIA_KEY("dim", GLIA_KEY_INT, NULL, "features per token (output channels)", .required = true, .min = 1,
             .max = 1 << 30),
    GLIA_KEY("padding_idx", GLIA_KEY_INT, "0", "token whose row starts at zero and gets no gradient (-1: none)",
             .min = -1, .max = 1 << 30),
    GLIA_KEY("output", GLIA_KEY_ENUM, "conv",
             "conv: (N, dim, 1, L), channels first for conv2d and seq_pool; sequence: (N, L, dim) as nn.Embedding",
             .choices = "conv|sequence"),
    GLIA_KEY("init_std", GLIA_KEY_FLOAT, "1", "standard deviation of the N(0, std^2) initial weight (GPT-2: 0.02)",
             .min = 0, .max = 1e6),
    GLIA_KEY_END};

/* Checks that in[0] is the token batch (N, L), reads the keys (padding_idx -1 or in [0, vocab)) and declares
 * "weight" (vocab, dim), N(0, init_std^2) (N(0, 1) by default, like PyTorch; its padding_idx row then zeroed by
 * emb_init_param). */
static glia_status emb_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                              int n_in)
{
    (void)n_in;
    struct glia_embedding_attrs *d = l->attrs;
    char buf[64];
    if (in[0].ndim != 2)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE,
                                  "embedding takes the token batch (N, L) of a [data] format = tokens dataset, got %s",
                                  glia_shape_str(&in[0], buf, sizeof buf));
    int64_t vocab = glia_section_int(cfg, "vocab"), pad = glia_section_int(cfg, "padding_idx");
    if (pad >= vocab)
        return glia_section_error(cfg, "padding_idx", GLIA_ECONFIG, "%lld is not a token id: -1 (none) or in [0, %lld)",
                                  (long long)pad, (long long)vocab);
    d->vocab = vocab;
    d->dim = glia_section_int(cfg, "dim");
    d->pad = pad;
    d->sequence = !strcmp(glia_section_str(cfg, "output"), "sequence");
    struct glia_shape ws = glia_shape_make(2, (int64_t[]){d->vocab, d->dim});
    struct glia_param_init init = {GLIA_INIT_NORMAL, glia_section_float(cfg, "init_std")};
    return glia_layer_add_param(l, "weight", &ws, init, &d->w);
}

/* (N, L) -> (N, dim, 1, L) (output = conv) or (N, L, dim) (output = sequence) */
static glia_status emb_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in, struct glia_shape *out)
{
    (void)n_in;
    const struct glia_embedding_attrs *d = l->attrs;
    if (in[0].ndim != 2) return GLIA_ESHAPE;
    *out = d->sequence ? glia_shape_make(3, (int64_t[]){in[0].dim[0], in[0].dim[1], d->dim})
                       : glia_shape_make(4, (int64_t[]){in[0].dim[0], d->dim, 1, in[0].dim[1]});
    return GLIA_OK;
}

/* The drawn weight's padding_idx row set to zeros, as nn.Embedding's reset_parameters does (the lookup then reads
 * those zeros, or whatever a checkpoint put there). */
static void emb_init_param(const struct glia_layer *l, int index, float *values)
{
    const struct glia_embedding_attrs *d = l->attrs;
    if (index == d->w && d->pad >= 0) memset(values + d->pad * d->dim, 0, (size_t)d->dim * sizeof *values);
}

/* GLIA_EINVAL naming the first token (in n, l order) not in [0, vocab) (padding_idx is -1 or in it). */
static glia_status check_range(const struct glia_layer *l, const int32_t *tok, int64_t N, int64_t L)
{
    const struct glia_embedding_attrs *d = l->attrs;
    int64_t bad = N * L;
#pragma omp parallel for schedule(static) reduction(min : bad)
    for (int64_t i = 0; i < N * L; i++)
        if ((tok[i] < 0 || tok[i] >= d->vocab) && i < bad) bad = i;  /* padding_idx is -1 or a token id */
    if (bad == N * L) return GLIA_OK;
    return glia_error(l->ctx, GLIA_EINVAL, "[%s] token %d at (%lld, %lld) of the (%lld, %lld) batch is not in [0, %lld)",
                      l->name, (int)tok[bad], (long long)(bad / L), (long long)(bad % L), (long long)N, (long long)L,
                      (long long)d->vocab);
}

/* Whether y (or dy) holds one dim-vector per position, (N, L, dim) or channels_last (N, 1, L, dim) in memory. */
static bool rows_of_dim(const struct glia_embedding_attrs *d, const struct glia_tensor *y)
{
    return d->sequence || glia_tensor_memory_format(y) == GLIA_CHANNELS_LAST;
}

/* y(N, dim, 1, L) = weight(vocab, dim)[tok(N, L)] (channels_last: y(N, 1, L, dim); output = sequence: y(N, L, dim));
 * padding_idx is a row like the others (zeros unless trained weights from elsewhere say otherwise), as in
 * nn.Embedding */
static glia_status emb_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_embedding_attrs *d = l->attrs;
    glia_status st = glia_embedding_check_tokens(l, a->in[0]);
    if (st) return st;
    int64_t N = a->in[0]->shape.dim[0], L = a->in[0]->shape.dim[1], D = d->dim;
    const int32_t *tok = glia_tensor_i32(a->in[0]);
    if ((st = check_range(l, tok, N, L))) return st;
    const float *w = glia_tensor_f32(l->params[d->w].value);
    float *y = glia_tensor_f32(a->out);
    if (rows_of_dim(d, a->out)) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < N * L; i++) memcpy(y + i * D, w + (int64_t)tok[i] * D, (size_t)D * sizeof *y);
        return GLIA_OK;
    }
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const int32_t *tn = tok + n * L;
        float *yn = y + n * D * L;
        for (int64_t l0 = 0; l0 < L; l0++) {
            float *yc = yn + l0;
            const float *wr = w + (int64_t)tn[l0] * D;
            for (int64_t c = 0; c < D; c++) yc[c * L] = wr[c];
        }
    }
    return GLIA_OK;
}

/* dweight(vocab, dim) (+)= sum over the positions (n, l) holding token t of dy(N, dim, 1, L)[n, :, 0, l] (or of
 * dy(N, L, dim)[n, l, :] with output = sequence), except
 * t = padding_idx, whose row's gradient stays 0 (nn.Embedding's). Deterministic: each thread owns a range of
 * table rows and adds into them in (n, l) order, so a row's sum does not depend on the thread count. Written:
 * the thread's rows are zeroed first. No input gradient. */
static glia_status emb_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_embedding_attrs *d = l->attrs;
    glia_status st = glia_embedding_check_tokens(l, a->in[0]);
    if (st) return st;
    struct glia_param *pw = &l->params[d->w];
    int64_t N = a->in[0]->shape.dim[0], L = a->in[0]->shape.dim[1], D = d->dim, V = d->vocab;
    const int32_t *tok = glia_tensor_i32(a->in[0]);
    const float *dy = glia_tensor_f32(a->dout);
    float *dw = glia_tensor_f32(pw->grad);
    bool cl = rows_of_dim(d, a->dout), unset = pw->grad_unset;
#pragma omp parallel
    {
        int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
        int64_t v0 = V * t / nt, v1 = V * (t + 1) / nt;
        if (unset && v1 > v0) memset(dw + v0 * D, 0, (size_t)((v1 - v0) * D) * sizeof *dw);
        for (int64_t i = 0; i < N * L && v1 > v0; i++) {
            int64_t v = tok[i];
            if (v == d->pad || v < v0 || v >= v1) continue;
            float *g = dw + v * D;
            if (cl) {
                const float *r = dy + i * D;
                for (int64_t c = 0; c < D; c++) g[c] += r[c];
            } else {
                const float *r = dy + (i / L) * D * L + i % L;
                for (int64_t c = 0; c < D; c++) g[c] += r[c * L];
            }
        }
    }
    return GLIA_OK;
}

static const struct glia_layer_type emb_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "embedding",
    .doc = "token ids (N, L) i32 -> rows of a learned table as (N, dim, 1, L) (output = conv: nn.Embedding, channels "
           "first) or (N, L, dim) (output = sequence: nn.Embedding)",
    .keys = emb_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .flags = GLIA_TYPE_TOKEN_INPUT,
    .attrs_size = sizeof(struct glia_embedding_attrs),
    .create = emb_create,
    .infer_shape = emb_infer,
    .init_param = emb_init_param,
};

static const struct glia_kernel emb_cpu = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "embedding",
    .impl = "cpu",
    .doc = "OpenMP",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_DECODE, /* backward: ids and dy */
    .forward = emb_forward,
    .backward = emb_backward,
};

static glia_status emb_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &emb_type);
    return st ? st : glia_register_kernel(r, &emb_cpu);
}

GLIA_PLUGIN_DEFINE(embedding, "2.0", "MIT", "token embedding table (CPU, OpenMP)", emb_init)
