/* tests/test_syncbn.c — SyncBatchNorm (batchnorm with sync = on): against plain BatchNorm on the whole
 * batch, in one process through an in-process transport of identical ranks, and over 2 MPI ranks that
 * split one batch unevenly; eval never communicates. Not a test of the transports themselves. */
#include <stdint.h>
#include "layerutil.h"
#include "mpiutil.h"

#define MAX_C 256  /* channels of the cases, at most */

static struct glia_context *ctx;  /* one for the program, freed at exit (closing its communicators) */
static struct glia_backend *cpu;

/* ---- "loop1", "loop3": an in-process transport of 1 or 3 ranks that all hold what this one holds ----
 * A sum over 3 identical ranks is 3 times the value, so SyncBatchNorm over loop3 on a batch X must equal
 * plain BatchNorm on X three times over. loop_calls counts the collectives; loop_fail makes them fail. */

static int loop_calls;
static bool loop_fail;

static int loop_world(void *priv) { return (int)(intptr_t)priv; }

static glia_status loop_open(int world, struct glia_comm_info *info, void **priv)
{
    *info = (struct glia_comm_info){0, world, 0, world};
    *priv = (void *)(intptr_t)world;
    return GLIA_OK;
}
static glia_status loop1_open(struct glia_context *c, const struct glia_comm_open_args *a, struct glia_comm_info *info,
                              void **priv)
{
    (void)c, (void)a;
    return loop_open(1, info, priv);
}
static glia_status loop3_open(struct glia_context *c, const struct glia_comm_open_args *a, struct glia_comm_info *info,
                              void **priv)
{
    (void)c, (void)a;
    return loop_open(3, info, priv);
}
static void loop_close(void *priv) { (void)priv; }

/* v(count) *= k for f32 and f64; other types are refused */
static glia_status loop_scale(void *v, size_t count, enum glia_dtype dt, int k)
{
    if (dt == GLIA_F64)
        for (size_t i = 0; i < count; i++) ((double *)v)[i] *= k;
    else if (dt == GLIA_F32)
        for (size_t i = 0; i < count; i++) ((float *)v)[i] *= (float)k;
    else
        return glia_error(ctx, GLIA_EUNSUPPORTED, "loop transport: f32 and f64 only");
    return GLIA_OK;
}

/* the start of every call: counted, a ticket, and the failure when asked */
static glia_status loop_call(uint64_t *ticket)
{
    *ticket = (uint64_t)++loop_calls;
    return loop_fail ? glia_error(ctx, GLIA_EIO, "link down (test)") : GLIA_OK;
}

/* buf(count) = op over the ranks of buf(count): a sum is world * buf, the other ops leave it */
static glia_status loop_all_reduce(void *priv, void *buf, size_t count, enum glia_dtype dt, enum glia_reduce_op op,
                                   uint64_t *ticket)
{
    glia_status st = loop_call(ticket);
    return st || op != GLIA_REDUCE_SUM ? st : loop_scale(buf, count, dt, loop_world(priv));
}
/* buf(count) = root's buf(count): the same */
static glia_status loop_broadcast(void *priv, void *buf, size_t count, enum glia_dtype dt, int root, uint64_t *ticket)
{
    (void)priv, (void)buf, (void)count, (void)dt, (void)root;
    return loop_call(ticket);
}
/* dst(world, count)[r] = src(count) */
static glia_status loop_all_gather(void *priv, void *dst, const void *src, size_t count, enum glia_dtype dt,
                                   uint64_t *ticket)
{
    glia_status st = loop_call(ticket);
    size_t n = count * glia_dtype_size(dt);
    for (int r = 0; r < loop_world(priv) && !st; r++) memcpy((char *)dst + (size_t)r * n, src, n);
    return st;
}
/* dst(count) = op over the ranks of src(world, count)[0] */
static glia_status loop_reduce_scatter(void *priv, void *dst, const void *src, size_t count, enum glia_dtype dt,
                                       enum glia_reduce_op op, uint64_t *ticket)
{
    glia_status st = loop_call(ticket);
    if (st) return st;
    memcpy(dst, src, count * glia_dtype_size(dt));
    return op == GLIA_REDUCE_SUM ? loop_scale(dst, count, dt, loop_world(priv)) : GLIA_OK;
}
static glia_status loop_barrier(void *priv, uint64_t *ticket)
{
    (void)priv;
    return loop_call(ticket);
}
static glia_status loop_wait(void *priv, uint64_t ticket, bool host)
{
    (void)priv, (void)ticket, (void)host;
    return GLIA_OK;  /* every call is done when it returns */
}

#define LOOP_OPS(name_, open_)                                                                              \
    {                                                                                                       \
        .struct_size = sizeof(struct glia_comm_ops), .name = name_, .description = "identical ranks (test)", \
        .memory = GLIA_COMM_HOST_MEMORY, .device_types = (1u << GLIA_DEVICE_CPU) | (1u << GLIA_DEVICE_CUDA), \
        .open = open_, .close = loop_close, .all_reduce = loop_all_reduce, .broadcast = loop_broadcast,      \
        .all_gather = loop_all_gather, .reduce_scatter = loop_reduce_scatter, .barrier = loop_barrier,      \
        .wait = loop_wait                                                                                   \
    }
static const struct glia_comm_ops loop1_ops = LOOP_OPS("loop1", loop1_open), loop3_ops = LOOP_OPS("loop3", loop3_open);

static void close_context(void) { glia_context_free(ctx); }

/* The program's context (with the loop transports registered) and CPU backend, made on first use. */
static void setup(void)
{
    if (ctx) return;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    atexit(close_context);
    struct glia_registry r = {ctx, -1};
    CU_ASSERT_FATAL(glia_register_comm(&r, &loop1_ops) == GLIA_OK);
    CU_ASSERT_FATAL(glia_register_comm(&r, &loop3_ops) == GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CPU, 0}, &cpu) == GLIA_OK);
}

static struct glia_comm *open_comm(const char *transport, struct glia_backend *b)
{
    setup();
    struct glia_comm *c = NULL;
    glia_status st = glia_comm_open(ctx, transport, b, 30, &c);
    if (st) printf("\n  rank %d: glia_comm_open(%s): %s\n", mpi_env_rank(), transport, glia_context_error(ctx));
    CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
    return c;
}

/* ---- tensors on any backend, read and written as host values in logical NCHW order ---- */

static struct glia_tensor *put(struct glia_backend *b, struct glia_shape s, enum glia_memory_format f, const float *v)
{
    struct glia_tensor *h = tensor_as(cpu, s, GLIA_CONTIGUOUS), *hf = tensor_as(cpu, s, f), *t = tensor_as(b, s, f);
    memcpy(glia_tensor_f32(h), v, glia_tensor_nbytes(h));
    CU_ASSERT_FATAL(glia_tensor_convert(hf, h, false) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_from_host(t, glia_tensor_f32(hf), glia_tensor_nbytes(hf)) == GLIA_OK);
    glia_tensor_release(h);
    glia_tensor_release(hf);
    return t;
}

static void get(const struct glia_tensor *t, float *v)
{
    struct glia_tensor *hf = tensor_as(cpu, t->shape, glia_tensor_memory_format(t));
    struct glia_tensor *h = tensor_as(cpu, t->shape, GLIA_CONTIGUOUS);
    CU_ASSERT_FATAL(glia_tensor_to_host(t, glia_tensor_f32(hf), glia_tensor_nbytes(hf)) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_convert(h, hf, false) == GLIA_OK);
    memcpy(v, glia_tensor_f32(h), glia_tensor_nbytes(h));
    glia_tensor_release(h);
    glia_tensor_release(hf);
}

/* The layer of `ini` built with the impl for backend b (loading its plugin), parameters and buffers at
 * their declared init, parameter gradients allocated. */
static void build(const char *ini, struct glia_backend *b, const struct glia_shape *in, struct built *B)
{
    memset(B, 0, sizeof *B);
    B->b = b;
    CU_ASSERT_FATAL(glia_config_parse_string(ctx, "layer.ini", ini, &B->cfg) == GLIA_OK);
    struct glia_section *s = B->cfg->sections[0];
    CU_ASSERT_FATAL(glia_plugin_load(ctx, "batchnorm") == GLIA_OK);
    B->type = glia__find_type(ctx, "batchnorm");
    B->kernel = glia__find_kernel_for(ctx, "batchnorm", b->device.type);
    CU_ASSERT_PTR_NOT_NULL_FATAL(B->type);
    CU_ASSERT_PTR_NOT_NULL_FATAL(B->kernel);
    const struct glia_key *sch[] = {glia__core_schema("layer"), B->type->keys};
    CU_ASSERT_FATAL(glia__section_validate(s, sch, 2) == GLIA_OK);
    B->l = (struct glia_layer){.name = s->name, .type = B->type, .kernel = B->kernel, .ctx = ctx, .backend = b};
    bool created;
    CU_ASSERT_FATAL(glia__layer_create(&B->l, s, in, 1, &created) == GLIA_OK);
    for (int i = 0; i < B->l.n_params + B->l.n_buffers; i++) {
        bool buf = i >= B->l.n_params;
        struct glia_param *p = buf ? &B->l.buffers[i - B->l.n_params] : &B->l.params[i];
        CU_ASSERT_FATAL(glia_tensor_new(b, GLIA_F32, &p->shape, &p->value) == GLIA_OK);
        if (!buf) CU_ASSERT_FATAL(glia_tensor_new(b, GLIA_F32, &p->shape, &p->grad) == GLIA_OK);
        float v[MAX_C];
        CU_ASSERT_FATAL(glia_shape_numel(&p->shape) <= MAX_C);
        glia__init_values(v, glia_shape_numel(&p->shape), p->init, 0);
        CU_ASSERT_FATAL(glia_tensor_from_host(p->value, v, glia_tensor_nbytes(p->value)) == GLIA_OK);
    }
}

/* ---- the comparison ---- */

static uint32_t lcg(uint32_t *st)
{
    *st = *st * 1103515245u + 12345u;
    return *st >> 8;
}

static double unit(uint32_t *st) { return (double)(lcg(st) % 20001) / 10000.0 - 1.0; } /* [-1, 1] */

/* Largest |a - b| / max(1, |b|) over n values, NaN counting as infinite. */
static double diff(const float *a, const float *b, int64_t n)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / fmax(1.0, fabs(b[i]));
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

struct syncase {
    const char *ini;           /* the plain layer's section; the sync layer's gets "sync = on" */
    struct glia_shape whole;   /* the whole batch: `reps` copies of a base batch of whole.dim[0]/reps rows */
    int reps;
    int64_t r0, r1;            /* this rank's rows of the whole batch */
    enum glia_memory_format format;  /* of the sync layer's 4-D tensors (the plain layer's are NCHW) */
    bool accumulate;           /* backward adds onto gradients of 1 (else writes over NaN) */
    bool no_dx;                /* the input needs no gradient */
    int steps;                 /* training steps, each on new values */
    uint32_t seed;
    bool recompute;            /* the sync layer's forward runs again ([graph] checkpoint_segments) before backward */
};

/* The sync layer S (on backend sb, communicator c) runs k->steps training steps on this rank's rows, the
 * plain layer P (CPU) on the whole batch, from equal weights; after every step S's output rows, input
 * gradient rows, running statistics, and parameter gradients summed over c's ranks must match P's within
 * tol. Then rank 0 alone runs an eval forward, which must match P's and not communicate (the ranks then
 * check with one all-reduce that none of them is left behind). With loop transports, the exchanges are
 * counted: a forward makes one and a backward one (none without an input gradient) when c's world > 1,
 * and none otherwise. */
static void run_case(struct glia_comm *c, struct glia_backend *sb, const struct syncase *k, double tol)
{
    char sync_ini[256];
    snprintf(sync_ini, sizeof sync_ini, "%ssync = on\n", k->ini);
    struct glia_shape whole = k->whole, mine = whole;
    mine.dim[0] = k->r1 - k->r0;
    struct built S, P;
    build(sync_ini, sb, &mine, &S);
    build(k->ini, cpu, &whole, &P);
    S.l.comm = c;
    CU_ASSERT_FATAL(S.l.n_params == P.l.n_params && S.l.n_buffers == P.l.n_buffers);
    int64_t C = whole.dim[1], nw = glia_shape_numel(&whole), row = nw / whole.dim[0], nm = glia_shape_numel(&mine);
    int64_t base = whole.dim[0] / k->reps, off = k->r0 * row;
    uint32_t seed = k->seed;
    float w[MAX_C], g[MAX_C], pg[MAX_C];
    CU_ASSERT_FATAL(C <= MAX_C);
    struct glia_comm *hc = open_comm(c->ops->name, cpu);  /* the same ranks, for host buffers */
    for (int i = 0; i < S.l.n_params; i++) {  /* weights away from their init, so that gamma and beta matter */
        for (int64_t j = 0; j < C; j++) w[j] = (float)(i == 0 ? 1.0 + 0.5 * unit(&seed) : 0.5 * unit(&seed));
        CU_ASSERT_FATAL(glia_tensor_from_host(S.l.params[i].value, w, (size_t)C * sizeof(float)) == GLIA_OK);
        memcpy(glia_tensor_f32(P.l.params[i].value), w, (size_t)C * sizeof(float));
    }
    float *X = malloc((size_t)nw * sizeof(float)), *DY = malloc((size_t)nw * sizeof(float));
    float *out = malloc((size_t)nm * sizeof(float));
    struct glia_tensor *Pdx = tensor_as(cpu, whole, GLIA_CONTIGUOUS), *Py = tensor_as(cpu, whole, GLIA_CONTIGUOUS);
    bool is_loop = c->ops->all_reduce == loop_all_reduce;
    int world = c->info.world;
    for (int step = 0; step < k->steps; step++) {
        for (int64_t i = 0; i < base * row; i++) {  /* mean away from 0, variance away from 1 */
            int64_t ch = (i % row) * C / row;
            X[i] = (float)(0.3 * ch - 0.5 + (1.5 + 0.25 * step) * unit(&seed));
            DY[i] = (float)unit(&seed);
        }
        for (int r = 1; r < k->reps; r++) {
            memcpy(X + r * base * row, X, (size_t)(base * row) * sizeof(float));
            memcpy(DY + r * base * row, DY, (size_t)(base * row) * sizeof(float));
        }
        for (int64_t i = 0; i < nm; i++) out[i] = k->accumulate ? 1.0f : NAN;
        struct glia_tensor *Px = put(cpu, whole, GLIA_CONTIGUOUS, X), *Pdy = put(cpu, whole, GLIA_CONTIGUOUS, DY);
        struct glia_tensor *Sx = put(sb, mine, k->format, X + off), *Sdy = put(sb, mine, k->format, DY + off);
        struct glia_tensor *Sy = tensor_as(sb, mine, k->format), *Sdx = put(sb, mine, k->format, out);
        for (int64_t i = 0; i < nw; i++) glia_tensor_f32(Pdx)[i] = k->accumulate ? 1.0f : NAN;
        for (int i = 0; i < S.l.n_params; i++) {
            for (int64_t j = 0; j < C; j++) g[j] = k->accumulate ? 1.0f : NAN;
            CU_ASSERT_FATAL(glia_tensor_from_host(S.l.params[i].grad, g, (size_t)C * sizeof(float)) == GLIA_OK);
            memcpy(glia_tensor_f32(P.l.params[i].grad), g, (size_t)C * sizeof(float));
            S.l.params[i].grad_unset = P.l.params[i].grad_unset = !k->accumulate;
        }
        const struct glia_tensor *Sin[1] = {Sx}, *Pin[1] = {Px};
        struct glia_tensor *Sdin[1] = {k->no_dx ? NULL : Sdx}, *Pdin[1] = {k->no_dx ? NULL : Pdx};
        bool acc[1] = {k->accumulate};
        struct glia_fwd Sf = {Sin, 1, Sy, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL}, Pf = {Pin, 1, Py, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        struct glia_bwd Sb = {Sin, 1, Sy, Sdy, Sdin, acc, NULL, NULL, NULL, NULL, false}, Pb = {Pin, 1, Py, Pdy, Pdin, acc, NULL, NULL, NULL, NULL, false};
        int calls = loop_calls;
        glia_status st = S.kernel->forward(&S.l, &Sf);
        if (!st && k->recompute) {  /* the same output again, from the statistics already exchanged */
            float *first = malloc((size_t)nm * sizeof(float));
            CU_ASSERT_FATAL(first != NULL);
            get(Sy, first);
            int before = loop_calls;
            struct glia_fwd again = Sf;
            again.recompute = true;
            st = S.kernel->forward(&S.l, &again);
            CU_ASSERT_EQUAL(loop_calls, before);
            get(Sy, out);
            CU_ASSERT(memcmp(first, out, (size_t)nm * sizeof(float)) == 0);
            free(first);
        }
        if (!st) st = S.kernel->backward(&S.l, &Sb);
        if (st) printf("\n  rank %d: sync layer: %s\n", c->info.rank, glia_context_error(ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        if (is_loop) CU_ASSERT_EQUAL(loop_calls - calls, world > 1 ? 2 - k->no_dx : 0);
        CU_ASSERT_FATAL(P.kernel->forward(&P.l, &Pf) == GLIA_OK);
        CU_ASSERT_FATAL(P.kernel->backward(&P.l, &Pb) == GLIA_OK);
        /* this rank's rows of y and dx; running statistics; parameter gradients summed over the ranks */
        get(Sy, out);
        double d_y = diff(out, glia_tensor_f32(Py) + off, nm), d_dx = 0, d_run = 0, d_par = 0;
        if (!k->no_dx) {
            get(Sdx, out);
            d_dx = diff(out, glia_tensor_f32(Pdx) + off, nm);
        }
        for (int i = 0; i < S.l.n_buffers; i++) {
            get(S.l.buffers[i].value, g);
            d_run = fmax(d_run, diff(g, glia_tensor_f32(P.l.buffers[i].value), C));
        }
        for (int i = 0; i < S.l.n_params; i++) {
            get(S.l.params[i].grad, g);
            CU_ASSERT_FATAL(glia_comm_all_reduce_sync(hc, g, (size_t)C, GLIA_F32, GLIA_REDUCE_SUM) == GLIA_OK);
            memcpy(pg, glia_tensor_f32(P.l.params[i].grad), (size_t)C * sizeof(float));
            for (int64_t j = 0; j < C && k->accumulate; j++) g[j] -= (float)world, pg[j] -= 1.0f;  /* the ones */
            d_par = fmax(d_par, diff(g, pg, C));
        }
        bool ok = d_y <= tol && d_dx <= tol && d_run <= tol && d_par <= tol;
        if (!ok) {
            char s[64], one_line[256];
            snprintf(one_line, sizeof one_line, "%s", k->ini);
            for (char *q = one_line; *q; q++) *q = *q == '\n' ? ' ' : *q;
            printf("\n  rank %d of %d, %s(sync on %s, %s, rows %lld..%lld of %s%s) step %d: y %g, dx %g, running %g, "
                   "dgamma/dbeta %g (tol %g)\n", c->info.rank, world, one_line, c->ops->name,
                   glia_memory_format_name(k->format), (long long)k->r0, (long long)k->r1 - 1,
                   glia_shape_str(&whole, s, sizeof s), k->accumulate ? ", accumulate" : "", step, d_y, d_dx, d_run,
                   d_par, tol);
        }
        CU_ASSERT(ok);
        glia_tensor_release(Px), glia_tensor_release(Pdy), glia_tensor_release(Sx), glia_tensor_release(Sdy);
        glia_tensor_release(Sy), glia_tensor_release(Sdx);
    }
    if (c->info.rank == 0) {  /* eval with the running statistics (or this batch's): no exchange */
        struct glia_tensor *Px = put(cpu, whole, GLIA_CONTIGUOUS, X), *Sx = put(sb, mine, k->format, X + off);
        struct glia_tensor *Sy = tensor_as(sb, mine, k->format);
        const struct glia_tensor *Sin[1] = {Sx}, *Pin[1] = {Px};
        struct glia_fwd Sf = {Sin, 1, Sy, NULL, false, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL}, Pf = {Pin, 1, Py, NULL, false, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        int calls = loop_calls;
        CU_ASSERT_FATAL(S.kernel->forward(&S.l, &Sf) == GLIA_OK);
        CU_ASSERT_EQUAL(loop_calls, calls);
        CU_ASSERT_FATAL(P.kernel->forward(&P.l, &Pf) == GLIA_OK);
        get(Sy, out);
        if (S.l.n_buffers) {  /* without running statistics eval normalizes by each one's own batch */
            double d = diff(out, glia_tensor_f32(Py) + off, nm);
            if (!(d <= tol)) printf("\n  %s(sync on %s) eval: y %g (tol %g)\n", k->ini, c->ops->name, d, tol);
            CU_ASSERT(d <= tol);
        }
        glia_tensor_release(Px), glia_tensor_release(Sx), glia_tensor_release(Sy);
    }
    double one = 1;
    glia_status st = glia_comm_all_reduce_sync(hc, &one, 1, GLIA_F64, GLIA_REDUCE_SUM);
    if (st) printf("\n  rank %d: the ranks out of step after the eval: %s\n", c->info.rank, glia_context_error(ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    CU_ASSERT_EQUAL(one, (double)world);
    free(X), free(DY), free(out);
    glia_tensor_release(Pdx), glia_tensor_release(Py);
    layer_unbuild(&S);
    layer_unbuild(&P);
}

/* SyncBatchNorm of inputs with a large mean and a small spread (channel means 1000, -250 and 100, spread
 * 1e-2) over communicator c of identical ranks (whose statistics are this rank's): a training forward's
 * output against the double formula within tol. The float nearest a mean of 1000 is off by up to 3e-5,
 * 0.5% of the std here: folding the rest of the mean into the shift keeps the outputs at float rounding. */
static void sync_large_mean(struct glia_comm *c, struct glia_backend *b, enum glia_memory_format f, double tol)
{
    struct glia_shape sh = S(4, 4, 3, 3, 3);
    int64_t N = sh.dim[0], C = sh.dim[1], HW = sh.dim[2] * sh.dim[3], n = N * C * HW;
    static const double means[3] = {1000.0, -250.0, 100.0};
    struct built L;
    build("[b]\ntype = batchnorm\nsync = on\n", b, &sh, &L);
    L.l.comm = c;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    uint32_t seed = 51;
    for (int64_t k = 0; k < n; k++) x[k] = (float)(means[(k / HW) % C] + 1e-2 * unit(&seed));
    struct glia_tensor *tx = put(b, sh, f, x), *ty = tensor_as(b, sh, f);
    const struct glia_tensor *in[1] = {tx};
    struct glia_fwd fa = {in, 1, ty, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    glia_status st = L.kernel->forward(&L.l, &fa);
    if (st) printf("\n  %s\n", glia_context_error(ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    get(ty, y);
    double worst = 0;
    for (int64_t ch = 0; ch < C; ch++) {
        double m = 0, v = 0;
        for (int64_t k = 0; k < N; k++)
            for (int64_t i = 0; i < HW; i++) m += x[(k * C + ch) * HW + i];
        m /= (double)(N * HW);
        for (int64_t k = 0; k < N; k++)
            for (int64_t i = 0; i < HW; i++) v += (x[(k * C + ch) * HW + i] - m) * (x[(k * C + ch) * HW + i] - m);
        v /= (double)(N * HW);
        for (int64_t k = 0; k < N; k++)
            for (int64_t i = 0; i < HW; i++) {
                int64_t j = (k * C + ch) * HW + i;
                worst = fmax(worst, fabs(y[j] - (x[j] - m) / sqrt(v + 1e-5)));
            }
    }
    if (!(worst <= tol)) printf("\n  large mean, sync on %s (%s): y off by %g (tol %g)\n", c->ops->name, b->ops->name, worst, tol);
    CU_ASSERT(worst <= tol);
    glia_tensor_release(tx);
    glia_tensor_release(ty);
    free(x);
    free(y);
    layer_unbuild(&L);
}

/* ---- one process ---- */

/* world 1: sync on is plain BatchNorm exactly (the same code path, bit for bit) and never communicates */
static void test_world1_is_plain(void)
{
    struct glia_comm *c = open_comm("loop1", (setup(), cpu));
    run_case(c, cpu, &(struct syncase){"[b]\ntype = batchnorm\n", S(4, 6, 3, 4, 4), 1, 0, 6, GLIA_CONTIGUOUS,
                                        false, false, 2, 1, false}, 0);
    run_case(c, cpu, &(struct syncase){"[b]\ntype = batchnorm\nmomentum = 0.3\n", S(4, 6, 3, 4, 4), 1, 0, 6,
                                        GLIA_CHANNELS_LAST, true, false, 2, 2, false}, 0);
}

/* 3 identical ranks: the statistics and gradient sums of the whole batch (3 copies), in both formats */
static void test_replicas_are_whole_batch(void)
{
    struct glia_comm *c = open_comm("loop3", (setup(), cpu));
    const struct syncase k[] = {
        {"[b]\ntype = batchnorm\n", S(4, 12, 3, 4, 4), 3, 0, 4, GLIA_CONTIGUOUS, false, false, 2, 11, false},
        {"[b]\ntype = batchnorm\n", S(4, 12, 3, 4, 4), 3, 0, 4, GLIA_CHANNELS_LAST, false, false, 2, 12, false},
        {"[b]\ntype = batchnorm\nmomentum = 0.3\neps = 1e-3\n", S(4, 6, 5, 3, 2), 3, 0, 2, GLIA_CHANNELS_LAST, true,
         false, 2, 13, false},
        {"[b]\ntype = batchnorm\naffine = off\n", S(4, 9, 2, 5, 3), 3, 0, 3, GLIA_CONTIGUOUS, true, false, 2, 14, false},
        {"[b]\ntype = batchnorm\n", S(4, 6, 4, 2, 2), 3, 0, 2, GLIA_CONTIGUOUS, false, true, 2, 15, false},  /* no dx */
        {"[b]\ntype = batchnorm\ntrack_running_stats = off\n", S(4, 6, 3, 3, 3), 3, 0, 2, GLIA_CHANNELS_LAST,
         false, false, 2, 16, false},
        {"[b]\ntype = batchnorm\n", S(2, 12, 5, 0, 0), 3, 0, 4, GLIA_CONTIGUOUS, false, false, 2, 17, false},  /* (N, C) */
        /* one value per channel here: plain BatchNorm refuses it, the 3 ranks together have 3 */
        {"[b]\ntype = batchnorm\n", S(2, 3, 4, 0, 0), 3, 0, 1, GLIA_CONTIGUOUS, false, false, 2, 18, false},
        {"[b]\ntype = batchnorm\n", S(4, 3, 4, 1, 1), 3, 0, 1, GLIA_CHANNELS_LAST, true, false, 2, 19, false},
        {"[b]\ntype = batchnorm\n", S(4, 6, 70, 7, 9), 3, 0, 2, GLIA_CHANNELS_LAST, false, false, 2, 20, false},  /* 126 rows */
        /* recomputed before backward: no second exchange, running statistics moved once */
        {"[b]\ntype = batchnorm\n", S(4, 12, 3, 4, 4), 3, 0, 4, GLIA_CONTIGUOUS, false, false, 2, 21, true},
        {"[b]\ntype = batchnorm\nmomentum = 0.3\n", S(4, 6, 5, 3, 2), 3, 0, 2, GLIA_CHANNELS_LAST, true, false, 2, 22,
         true},
        /* activation = relu: the gradient sums of the masked dy */
        {"[b]\ntype = batchnorm\nactivation = relu\n", S(4, 12, 3, 4, 4), 3, 0, 4, GLIA_CONTIGUOUS, false, false, 2, 23,
         false},
        {"[b]\ntype = batchnorm\nactivation = relu\nmomentum = 0.3\n", S(4, 6, 5, 3, 2), 3, 0, 2, GLIA_CHANNELS_LAST, true,
         false, 2, 24, true},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) run_case(c, cpu, &k[i], 1e-5);
    sync_large_mean(c, cpu, GLIA_CONTIGUOUS, 1e-5);
    sync_large_mean(c, cpu, GLIA_CHANNELS_LAST, 1e-5);
}

/* A failing exchange fails the layer, and the message names the layer, the exchange, rank and transport. */
static void test_exchange_failure(void)
{
    struct glia_comm *c = open_comm("loop3", (setup(), cpu));
    struct built B;
    struct glia_shape sh = S(4, 2, 3, 2, 2);
    build("[b]\ntype = batchnorm\nsync = on\n", cpu, &sh, &B);
    B.l.comm = c;
    float v[24];
    float dy[24];
    for (int i = 0; i < 24; i++) v[i] = (float)i, dy[i] = (float)(i % 5);
    struct glia_tensor *x = put(cpu, sh, GLIA_CONTIGUOUS, v), *y = tensor_as(cpu, sh, GLIA_CONTIGUOUS);
    const struct glia_tensor *in[1] = {x};
    struct glia_fwd fa = {in, 1, y, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    loop_fail = true;
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa), GLIA_EIO);
    loop_fail = false;
    const char *want = "[b] batchnorm (sync) statistics: rank 0 of 3: loop3 all-reduce failed: link down (test)";
    if (!strstr(glia_context_error(ctx), want)) printf("\n  got: %s\n  want: %s\n", glia_context_error(ctx), want);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), want));
    struct glia_tensor *tdy = put(cpu, sh, GLIA_CONTIGUOUS, dy), *tdx = put(cpu, sh, GLIA_CONTIGUOUS, v);
    struct glia_tensor *din[1] = {tdx};
    bool acc[1] = {false};
    struct glia_bwd ba = {in, 1, y, tdy, din, acc, NULL, NULL, NULL, NULL, false};
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba), GLIA_EINVAL);  /* the failed forward kept nothing */
    glia_tensor_release(x), glia_tensor_release(y), glia_tensor_release(tdy), glia_tensor_release(tdx);
    layer_unbuild(&B);
}

/* The key: off by default, a boolean; on without a communicator the gradients are plain BatchNorm's. */
static void test_key(void)
{
    setup();
    struct built B;
    struct glia_shape sh = S(2, 4, 3, 0, 0);
    build("[b]\ntype = batchnorm\n", cpu, &sh, &B);
    int i = 0;
    while (B.type->keys[i].name && strcmp(B.type->keys[i].name, "sync")) i++;
    CU_ASSERT_PTR_NOT_NULL_FATAL(B.type->keys[i].name);
    CU_ASSERT_STRING_EQUAL(B.type->keys[i].default_value, "off");
    CU_ASSERT_PTR_NOT_NULL(strstr(B.type->keys[i].doc, "mode = ddp"));
    layer_unbuild(&B);
    expect_error("[b]\ntype = batchnorm\nsync = maybe\n", S(2, 4, 3, 0, 0), GLIA_ECONFIG, "gradcheck.ini:3: [b] sync: ");
    struct glia_context *g;
    CU_ASSERT_FATAL(glia_context_new(&g) == GLIA_OK);
    struct glia_shape in = S(4, 3, 2, 3, 2);
    glia_status st = glia_layer_gradcheck(g, "[b]\ntype = batchnorm\nsync = on\n", &in, 1, 5, 2e-2, NULL);
    if (st) printf("\n  %s\n", glia_context_error(g));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    glia_context_free(g);
}

/* ---- SyncBatchNorm on half activations ---- */

/* A copy of device tensor t (its shape and format) of type dt (converted: f16 and bf16 rounded to nearest even). */
static struct glia_tensor *typed(const struct glia_tensor *t, enum glia_dtype dt)
{
    struct glia_tensor *flat, *v;
    struct glia_shape fs = glia_shape_make(1, (int64_t[]){glia_tensor_numel(t)});
    CU_ASSERT_FATAL(glia_tensor_new(glia_tensor_backend(t), dt, &fs, &flat) == GLIA_OK);
    CU_ASSERT_FATAL(glia__tensor_view_typed(flat, 0, dt, &t->shape, glia_tensor_memory_format(t), &v) == GLIA_OK);
    glia_tensor_release(flat);
    CU_ASSERT_FATAL(glia_tensor_convert(v, t, false) == GLIA_OK);
    return v;
}

/* Whether a, rounded to b's type, holds b's bytes (a and b of one shape and format). */
static bool rounds_to(const struct glia_tensor *a, const struct glia_tensor *b)
{
    struct glia_tensor *r = typed(a, b->dtype);
    size_t n = glia_tensor_nbytes(b);
    char *x = malloc(n), *y = malloc(n);
    CU_ASSERT_FATAL(x && y && glia_tensor_to_host(r, x, n) == GLIA_OK && glia_tensor_to_host(b, y, n) == GLIA_OK);
    bool same = memcmp(x, y, n) == 0;
    free(x), free(y);
    glia_tensor_release(r);
    return same;
}

/* SyncBatchNorm (`ini` with sync = on) over communicator c of identical ranks, twice on backend b from equal
 * weights: on f32 tensors and on tensors of type h (f16 or bf16) holding the same values, in format f; a training
 * forward and a backward. The half call's output and input gradient must be the f32 call's rounded once, its
 * parameter gradients and running statistics the f32 call's bit for bit: the local sums read the same values in
 * the same order and add them in double alike; only the loads and the stores differ. */
static void sync_half(struct glia_comm *c, struct glia_backend *b, const char *ini, struct glia_shape s,
                      enum glia_memory_format f, enum glia_dtype h, bool accumulate, uint32_t seed)
{
    char sync_ini[256];
    snprintf(sync_ini, sizeof sync_ini, "%ssync = on\n", ini);
    struct built L[2];  /* f32, half */
    build(sync_ini, b, &s, &L[0]);
    build(sync_ini, b, &s, &L[1]);
    int64_t C = s.dim[1], n = glia_shape_numel(&s);
    float w[MAX_C];
    for (int i = 0; i < L[0].l.n_params; i++) {
        for (int64_t j = 0; j < C; j++) w[j] = (float)(i == 0 ? 1.0 + 0.5 * unit(&seed) : 0.5 * unit(&seed));
        for (int d = 0; d < 2; d++)
            CU_ASSERT_FATAL(glia_tensor_from_host(L[d].l.params[i].value, w, (size_t)C * sizeof(float)) == GLIA_OK);
        for (int64_t j = 0; j < C; j++) w[j] = accumulate ? 1.0f : NAN;
        for (int d = 0; d < 2; d++) {
            CU_ASSERT_FATAL(glia_tensor_from_host(L[d].l.params[i].grad, w, (size_t)C * sizeof(float)) == GLIA_OK);
            L[d].l.params[i].grad_unset = !accumulate;
        }
    }
    float *v = malloc((size_t)n * sizeof(float));
    struct glia_tensor *t[2][4];  /* [f32, half][x, y, dy, dx]: the same values, those of type h */
    for (int i = 0; i < 4; i++) {
        for (int64_t j = 0; j < n; j++)
            v[j] = i == 0 ? (float)(0.3 * (j % C) - 0.5 + 1.5 * unit(&seed)) : i == 2 ? (float)unit(&seed)
                 : i == 3 && accumulate ? 1.0f : NAN;
        struct glia_tensor *x = put(b, s, f, v);
        t[1][i] = typed(x, h);
        t[0][i] = typed(t[1][i], GLIA_F32);
        glia_tensor_release(x);
    }
    free(v);
    for (int d = 0; d < 2; d++) {
        L[d].l.comm = c;
        const struct glia_tensor *in[1] = {t[d][0]};
        struct glia_tensor *din[1] = {t[d][3]};
        bool acc[1] = {accumulate};
        struct glia_fwd fw = {in, 1, t[d][1], NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        struct glia_bwd bw = {in, 1, t[d][1], t[d][2], din, acc, NULL, NULL, NULL, NULL, false};
        glia_status st = L[d].kernel->forward(&L[d].l, &fw);
        if (!st) st = L[d].kernel->backward(&L[d].l, &bw);
        if (st) printf("\n  %s: %s\n", glia_dtype_name(t[d][0]->dtype), glia_context_error(ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
    }
    bool y = rounds_to(t[0][1], t[1][1]), dx = rounds_to(t[0][3], t[1][3]), par = true, run = true;
    for (int i = 0; i < L[0].l.n_params; i++) par = par && rounds_to(L[0].l.params[i].grad, L[1].l.params[i].grad);
    for (int i = 0; i < L[0].l.n_buffers; i++) run = run && rounds_to(L[0].l.buffers[i].value, L[1].l.buffers[i].value);
    if (!(y && dx && par && run)) {
        char str[64];
        printf("\n  sync on %s, %s %s %s%s: y %s, dx %s, dgamma/dbeta %s, running %s\n", c->ops->name,
               glia_shape_str(&s, str, sizeof str), glia_dtype_name(h), glia_memory_format_name(f),
               accumulate ? " accumulate" : "", y ? "ok" : "off", dx ? "ok" : "off", par ? "ok" : "off", run ? "ok" : "off");
    }
    CU_ASSERT(y && dx && par && run);
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < 4; i++) glia_tensor_release(t[d][i]);
    layer_unbuild(&L[0]);
    layer_unbuild(&L[1]);
}

/* The CUDA impl over loop3 (device sums staged through the host) against plain BatchNorm on the CPU. */
static void test_cuda_replicas(void)
{
    setup();
    struct glia_backend *gpu = NULL;
    glia_status st = glia_plugin_load(ctx, "cuda");
    if (!st) st = glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CUDA, 0}, &gpu);
    if (st) {
        printf("skipped (no usable GPU: %s) ", glia_context_error(ctx));
        return;
    }
    struct glia_comm *c = open_comm("loop3", gpu);
    const struct syncase k[] = {
        {"[b]\ntype = batchnorm\n", S(4, 12, 3, 4, 4), 3, 0, 4, GLIA_CONTIGUOUS, false, false, 2, 31, false},
        {"[b]\ntype = batchnorm\nmomentum = 0.3\n", S(4, 12, 3, 4, 4), 3, 0, 4, GLIA_CHANNELS_LAST, true, false, 2, 32, false},
        {"[b]\ntype = batchnorm\naffine = off\n", S(2, 9, 40, 0, 0), 3, 0, 3, GLIA_CONTIGUOUS, false, true, 2, 33, false},
        {"[b]\ntype = batchnorm\n", S(4, 6, 70, 7, 9), 3, 0, 2, GLIA_CHANNELS_LAST, false, false, 2, 34, false},
        {"[b]\ntype = batchnorm\n", S(4, 12, 3, 4, 4), 3, 0, 4, GLIA_CONTIGUOUS, false, false, 2, 35, true},
        {"[b]\ntype = batchnorm\nmomentum = 0.3\n", S(4, 6, 70, 7, 9), 3, 0, 2, GLIA_CHANNELS_LAST, true, false, 2, 36,
         true},
        {"[b]\ntype = batchnorm\nactivation = relu\n", S(4, 12, 3, 4, 4), 3, 0, 4, GLIA_CONTIGUOUS, false, false, 2, 38,
         false},
        {"[b]\ntype = batchnorm\nactivation = relu\n", S(4, 6, 70, 7, 9), 3, 0, 2, GLIA_CHANNELS_LAST, true, false, 2, 39,
         true},
        /* many splits a channel and the float4 paths (C = 16 rows, 28x28 planes) */
        {"[b]\ntype = batchnorm\nactivation = relu\n", S(4, 12, 16, 28, 28), 3, 0, 4, GLIA_CHANNELS_LAST, false, false,
         2, 47, false},
        {"[b]\ntype = batchnorm\n", S(4, 12, 16, 28, 28), 3, 0, 4, GLIA_CONTIGUOUS, true, false, 2, 48, false},
        /* one value a channel on this rank, 3 over the ranks: trains (the count read back from the device) */
        {"[b]\ntype = batchnorm\n", S(2, 3, 5, 0, 0), 3, 0, 1, GLIA_CONTIGUOUS, false, false, 2, 49, false},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) run_case(c, gpu, &k[i], 1e-4);
    sync_large_mean(c, gpu, GLIA_CONTIGUOUS, 1e-5);
    sync_large_mean(c, gpu, GLIA_CHANNELS_LAST, 1e-5);
    struct glia_comm *one = open_comm("loop1", gpu);  /* world 1: the plain CUDA path, no exchange */
    run_case(one, gpu, &(struct syncase){"[b]\ntype = batchnorm\nmomentum = 0.3\n", S(4, 4, 3, 4, 4), 1, 0, 4,
                                          GLIA_CHANNELS_LAST, true, false, 2, 37, false}, 1e-4);
    /* the local parts on f16 and bf16 activations against the same calls on f32 (4x4 planes and channels_last with
     * C = 16: the vector loads; 5x3 planes with C = 6: scalar) */
    for (int h = 0; h < 2; h++) {
        enum glia_dtype dt = h ? GLIA_F16 : GLIA_BF16;
        sync_half(c, gpu, "[b]\ntype = batchnorm\n", S(4, 4, 16, 4, 4), GLIA_CONTIGUOUS, dt, false, 60);
        sync_half(c, gpu, "[b]\ntype = batchnorm\nactivation = relu\n", S(4, 4, 16, 4, 4), GLIA_CHANNELS_LAST, dt, true,
                  61);
        sync_half(c, gpu, "[b]\ntype = batchnorm\nmomentum = 0.3\n", S(4, 3, 6, 5, 3), GLIA_CHANNELS_LAST, dt, false, 62);
        sync_half(c, gpu, "[b]\ntype = batchnorm\naffine = off\n", S(2, 9, 16, 0, 0), GLIA_CONTIGUOUS, dt, true, 63);
    }
}

/* ---- two MPI ranks ---- */

/* One batch of 8 split 3 + 5 over the two ranks (plugin mpi; a missing plugin fails here). */
static void test_two_ranks(void)
{
    struct glia_comm *c = open_comm("mpi", (setup(), cpu));
    CU_ASSERT_EQUAL_FATAL(c->info.world, 2);
    int64_t r0 = c->info.rank == 0 ? 0 : 3, r1 = c->info.rank == 0 ? 3 : 8;
    const struct syncase k[] = {
        {"[b]\ntype = batchnorm\n", S(4, 8, 3, 4, 4), 1, r0, r1, GLIA_CONTIGUOUS, false, false, 2, 41, false},
        {"[b]\ntype = batchnorm\nmomentum = 0.3\n", S(4, 8, 3, 4, 4), 1, r0, r1, GLIA_CHANNELS_LAST, true, false, 2,
         42, false},
        {"[b]\ntype = batchnorm\neps = 1e-3\n", S(2, 8, 5, 0, 0), 1, r0, r1, GLIA_CONTIGUOUS, false, true, 2, 43, false},
        {"[b]\ntype = batchnorm\ntrack_running_stats = off\n", S(4, 8, 3, 4, 4), 1, r0, r1, GLIA_CONTIGUOUS, true,
         false, 1, 44, false},
        {"[b]\ntype = batchnorm\nmomentum = 0.3\n", S(4, 8, 3, 4, 4), 1, r0, r1, GLIA_CHANNELS_LAST, false, false, 2,
         45, true},
        {"[b]\ntype = batchnorm\nactivation = relu\n", S(4, 8, 3, 4, 4), 1, r0, r1, GLIA_CHANNELS_LAST, false, false, 2,
         46, false},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) run_case(c, cpu, &k[i], 1e-5);
}

GLIA_MPI_TEST_MAIN("syncbn", 2, GLIA_TEST(test_key), GLIA_TEST(test_world1_is_plain),
                   GLIA_TEST(test_replicas_are_whole_batch), GLIA_TEST(test_exchange_failure),
                   GLIA_TEST(test_cuda_replicas), GLIA_TEST(test_two_ranks))
