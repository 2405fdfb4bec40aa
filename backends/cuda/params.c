/* backends/cuda/params.c — the CUDA backend's params group: the layers' weight copies (a linear's W and b in the
 * activations' half type, a conv2d's filter in cuDNN's type and KRSC order) refreshed for a whole forward pass by one
 * launch at the pass's start (pass_begin), each layer's forward then taking its copy as made rather than converting
 * it. Not the copies themselves (their layers own them) and not the conversion kernel (conv_kernels.cu). */
#include <stdlib.h>
#include <string.h>
#include "cuda_internal.h"
#include "conv_kernels.h"

/* One layer weight's copy, as its layer last registered it (glia__wcopy_take). */
struct wcopy {
    const float *src;         /* the parameter, f32 */
    void *dst;                /* the copy */
    enum glia__conv_type type;
    int64_t B, rows, cols;    /* dst(B, cols, rows) = src(B, rows, cols)^T (B = rows = 1: plain) */
    uint64_t pass;            /* the pass_begin that refreshed it last (0: none) */
    bool taken;               /* a forward of that pass took it */
    bool live;                /* registered (a dropped one's slot is reused) */
};

/* The jobs of one launch: the live copies whose parameters lie in [lo, hi), in device memory of their own (cudaMalloc:
 * a few bytes a copy), kept until the backend closes: a captured pass_begin reads its table at every replay. */
struct table {
    const char *lo, *hi;
    uint64_t version;         /* the registry's when made or last found to match */
    struct glia__convert_job *jobs, *host;  /* in device memory, and its copy here */
    int n;
    int64_t blocks;
    struct table *next;
};

#define MAX_TABLES 32  /* made in a run at most; then the layers convert their own (copies that keep changing) */

struct glia__wcopies {
    struct wcopy *e;
    int n, cap;
    uint64_t version;         /* bumped whenever a copy is registered, changed or dropped */
    uint64_t pass;            /* pass_begin calls so far */
    const char *lo, *hi;      /* the last pass's parameters */
    struct table *tables;     /* newest first */
};

/* Whether w is live and a copy of a parameter in [lo, hi). */
static bool in(const struct wcopy *w, const char *lo, const char *hi)
{
    return w->live && (const char *)w->src >= lo && (const char *)w->src < hi;
}

static bool same(const struct wcopy *w, const float *src, void *dst, enum glia__conv_type t, int64_t B, int64_t rows,
                 int64_t cols)
{
    return w->live && w->src == src && w->dst == dst && w->type == t && w->B == B && w->rows == rows && w->cols == cols;
}

bool glia__wcopy_take(struct glia__cuda *c, int *id, const float *src, void *dst, enum glia__conv_type t, int64_t B,
                      int64_t rows, int64_t cols)
{
    struct glia__wcopies *r = c->wcopies;
    if (!r) return false;
    if (*id > 0 && *id <= r->n && same(&r->e[*id - 1], src, dst, t, B, rows, cols)) {
        struct wcopy *w = &r->e[*id - 1];
        if (w->pass == r->pass && !w->taken) return w->taken = true;
        return false;
    }
    glia__wcopy_drop(c, id);
    int i = 0;
    while (i < r->n && r->e[i].live) i++;
    if (i == r->cap) {
        int cap = r->cap ? 2 * r->cap : 64;
        struct wcopy *e = realloc(r->e, (size_t)cap * sizeof *e);
        if (!e) return false;  /* not registered: the layer converts its own, as without a params group */
        r->e = e;
        r->cap = cap;
    }
    if (i == r->n) r->n++;
    r->e[i] = (struct wcopy){src, dst, t, B, rows, cols, 0, false, true};
    r->version++;
    *id = i + 1;
    return false;
}

void glia__wcopy_drop(struct glia__cuda *c, int *id)
{
    struct glia__wcopies *r = c->wcopies;
    if (r && *id > 0 && *id <= r->n && r->e[*id - 1].live) {
        r->e[*id - 1].live = false;
        r->version++;
    }
    *id = 0;
}

/* The table of the live copies in [lo, hi) at the registry's version: one made before with the same jobs, else made
 * now (NULL: none to make, or not now: during a capture, past MAX_TABLES, or out of memory; the layers then convert
 * their own). */
static struct table *table_for(struct glia__cuda *c, const char *lo, const char *hi)
{
    struct glia__wcopies *r = c->wcopies;
    int made = 0;
    for (struct table *t = r->tables; t; t = t->next, made++)
        if (t->lo == lo && t->hi == hi && t->version == r->version) return t;
    struct glia__convert_job *host = r->n ? calloc((size_t)r->n, sizeof *host) : NULL;
    if (!host) return NULL;
    int n = 0;
    int64_t blocks = 0;
    for (int i = 0; i < r->n; i++) {
        const struct wcopy *w = &r->e[i];
        if (!in(w, lo, hi)) continue;
        host[n++] = (struct glia__convert_job){w->dst, w->src, w->B, w->rows, w->cols, blocks, (int32_t)w->type, 0};
        blocks += glia__conv_convert_blocks(w->B * w->rows * w->cols);
    }
    if (!n) {
        free(host);
        return NULL;
    }
    for (struct table *t = r->tables; t; t = t->next)  /* the same jobs as an earlier state's: its table again */
        if (t->lo == lo && t->hi == hi && t->n == n && !memcmp(t->host, host, (size_t)n * sizeof *host)) {
            t->version = r->version;
            free(host);
            return t;
        }
    struct table *t = made < MAX_TABLES && !glia__cuda_capturing(c) ? calloc(1, sizeof *t) : NULL;
    if (t) {
        void *jobs = NULL;  /* a failure is not the pass's: its layers convert their own */
        if (cudaMalloc(&jobs, (size_t)n * sizeof *host) == cudaSuccess &&
            cudaMemcpy(jobs, host, (size_t)n * sizeof *host, cudaMemcpyHostToDevice) == cudaSuccess) {
            *t = (struct table){lo, hi, r->version, jobs, host, n, blocks, r->tables};
            r->tables = t;
            return t;
        }
        if (jobs) cudaFree(jobs);
        cudaGetLastError();
    }
    free(t);
    free(host);
    return NULL;
}

/* The params group's pass_begin: every live copy of a parameter in [params, params + bytes) converted in one launch
 * and marked as this pass's, for its layer's forward to take. */
static glia_status cuda_pass_begin(void *priv, const void *params, size_t bytes)
{
    struct glia__cuda *c = priv;
    struct glia__wcopies *r = c->wcopies;
    if (!r) return GLIA_OK;
    r->pass++;
    if (!params || !bytes) return GLIA_OK;
    glia__cuda_use(c);
    const char *lo = params, *hi = lo + bytes;
    r->lo = lo, r->hi = hi;
    struct table *t = table_for(c, lo, hi);
    if (!t) return GLIA_OK;
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, glia__conv_convert_many(t->jobs, t->n, t->blocks, c->stream));
    for (int i = 0; i < r->n; i++) {
        struct wcopy *w = &r->e[i];
        if (in(w, lo, hi)) w->pass = r->pass, w->taken = false;
    }
fail:
    return st;
}

void glia__wcopies_prepare(struct glia__cuda *c)
{
    if (c->wcopies && c->wcopies->lo) table_for(c, c->wcopies->lo, c->wcopies->hi);
}

glia_status glia__wcopies_open(struct glia__cuda *c)
{
    const char *v = getenv("GLIA_CUDA_WCOPY");  /* off: each layer converts its own (docs/cuda.md) */
    if (v && !strcmp(v, "off")) return GLIA_OK;
    if (!(c->wcopies = calloc(1, sizeof *c->wcopies))) return glia_error(c->ctx, GLIA_ENOMEM, "out of host memory");
    return GLIA_OK;
}

void glia__wcopies_close(struct glia__cuda *c)
{
    struct glia__wcopies *r = c->wcopies;
    if (!r) return;
    for (struct table *t = r->tables, *next; t; t = next) {  /* after the stream's work (close syncs it first) */
        next = t->next;
        cudaFree(t->jobs);
        free(t->host);
        free(t);
    }
    free(r->e);
    free(r);
    c->wcopies = NULL;
}

const struct glia_backend_params_ops glia__cuda_params_ops = {
    .struct_size = sizeof(struct glia_backend_params_ops),
    .pass_begin = cuda_pass_begin,
};
