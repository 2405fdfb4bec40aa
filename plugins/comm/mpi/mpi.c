/* plugins/comm/mpi — the "mpi" transport: collectives over host memory with MPI, run in issue order
 * by one communication thread per process. Not a launcher (mpirun/srun start the ranks), not for device memory. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <mpi.h>
#include <glia/glia.h>

/* Every MPI call of the process runs on the communication thread: it initializes MPI (when the
 * program has not), executes the queued calls of all communicators in issue order with blocking
 * collectives, and finalizes MPI when the last communicator closes. The issuing thread only
 * queues calls and waits on their sequence numbers (tickets). Calls of different communicators
 * share the one queue, so every rank must interleave them in the same order (a single-threaded
 * program does). A wait that times out leaves its call queued: a later wait may see it finish.
 * Before a collective touches its buffers the ranks check that they all entered the same one
 * (agree): a rank that is a call ahead or behind, or passes another count, would otherwise
 * receive into a buffer of another size. */

enum kind { OPEN, ALL_REDUCE, BROADCAST, ALL_GATHER, REDUCE_SCATTER, BARRIER, CLOSE, ABORT };
static const char *const kind_name[] = {"open", "all-reduce", "broadcast", "all-gather", "reduce-scatter", "barrier",
                                        "close", "abort"};
#define MISMATCH (-1)  /* run()'s answer when the ranks entered different collectives (MPI's codes are >= 0) */

struct comm {
    struct glia_context *ctx;      /* of the issuing side (borrowed) */
    struct glia_backend *b;        /* (borrowed) */
    MPI_Comm mc;                   /* this communicator's duplicate of MPI_COMM_WORLD */
    struct glia_comm_info info;
    double timeout_s;
    uint64_t issued, done;         /* calls issued and finished: ticket t is done when t <= done */
    uint64_t failed;               /* the first call that failed (0: none); later ones are skipped */
    glia_status fail_status;
    char err[512];                 /* what failed, written by the thread */
    int group;                     /* group_begin depth */
    struct call *gh, *gt;          /* calls held back until group_end */
    bool abandoned;                /* close gave up waiting: the thread frees it after its close */
};

struct call {
    struct call *next;
    struct comm *c;
    uint64_t seq;
    enum kind kind;
    void *dst;
    const void *src;
    size_t count;
    enum glia_dtype dt;
    enum glia_reduce_op op;
    int root;
    bool final;                    /* CLOSE of the last communicator: finalize and end the thread */
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t work, done;     /* a call was queued; a call finished */
    struct call *head, *tail;      /* queued calls, all communicators, issue order */
    struct call *current;          /* the call the thread runs now */
    enum { IDLE, RUNNING, ENDING, LEFT } phase;  /* ENDING: the last close is queued; LEFT: the thread
                                                   was left behind in a stuck call */
    pthread_t thread;
    int n_open;                    /* communicators opened and not closed */
    bool stuck;                    /* a wait timed out and the thread has made no progress since */
    bool finalized;                /* MPI was finalized by this plugin: it cannot start again */
    /* the thread's own: */
    int mpi_up;                    /* 0 not yet, 1 up, -1 failed (mpi_err says why) */
    bool mpi_ours;                 /* the plugin initialized MPI and finalizes it */
    char mpi_err[300];
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init_conds(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&g.work, &a);
    pthread_cond_init(&g.done, &a);
    pthread_condattr_destroy(&a);
}

/* ---- on the communication thread ---- */

static MPI_Datatype mpi_type(enum glia_dtype dt)
{
    switch (dt) {
    case GLIA_F32: return MPI_FLOAT;
    case GLIA_F64: return MPI_DOUBLE;
    case GLIA_I32: return MPI_INT32_T;
    case GLIA_I64: return MPI_INT64_T;
    default: return MPI_UINT8_T;
    }
}

static MPI_Op mpi_op(enum glia_reduce_op op)
{
    return op == GLIA_REDUCE_MAX ? MPI_MAX : op == GLIA_REDUCE_MIN ? MPI_MIN : MPI_SUM;
}

/* x(n) /= world, for AVG (floating types only) */
static void divide(void *x, size_t n, enum glia_dtype dt, int world)
{
    if (dt == GLIA_F32)
        for (size_t i = 0; i < n; i++) ((float *)x)[i] /= (float)world;
    else
        for (size_t i = 0; i < n; i++) ((double *)x)[i] /= (double)world;
}

/* Writes "MPI_Xxx: <MPI's text>" into err for a failed MPI call; returns rc. */
static int mpi_fail(int rc, const char *fn, char *err, size_t n)
{
    char s[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
    snprintf(err, n, "%s: %s", fn, s);
    return rc;
}
#define MPI_TRY(fn, args)                                               \
    do {                                                                \
        int rc_ = fn args;                                              \
        if (rc_ != MPI_SUCCESS) return mpi_fail(rc_, #fn, err, n);      \
    } while (0)

/* Promote libmpi (and what it loaded) to the global symbol scope: Open MPI loads its own
 * components with dlopen, and they find libmpi's symbols only there, while glia loads this plugin
 * (and so libmpi) with RTLD_LOCAL. The handle is kept (libmpi stays). */
static void promote_libmpi(void)
{
    Dl_info di;
    if (dladdr((void *)(uintptr_t)MPI_Init, &di) && di.dli_fname)
        (void)dlopen(di.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
}

static int start_mpi(char *err, size_t n)
{
    int inited = 0, finalized = 0, level = MPI_THREAD_SINGLE;
    MPI_TRY(MPI_Finalized, (&finalized));
    if (finalized) {
        snprintf(err, n, "MPI was already finalized by the program");
        return MPI_ERR_OTHER;
    }
    MPI_TRY(MPI_Initialized, (&inited));
    if (inited) {  /* the program's: this thread calls MPI beside the program's own thread */
        MPI_TRY(MPI_Query_thread, (&level));
        if (level < MPI_THREAD_SERIALIZED) {
            snprintf(err, n, "the program initialized MPI with thread level %d; the mpi transport calls MPI from its "
                     "own thread and needs MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE (MPI_Init_thread)", level);
            return MPI_ERR_OTHER;
        }
        return MPI_SUCCESS;
    }
    promote_libmpi();
    MPI_TRY(MPI_Init_thread, (NULL, NULL, MPI_THREAD_FUNNELED, &level));
    g.mpi_ours = true;
    return MPI_SUCCESS;
}

static int run_open(struct comm *c, char *err, size_t n)
{
    if (!g.mpi_up) g.mpi_up = start_mpi(g.mpi_err, sizeof g.mpi_err) == MPI_SUCCESS ? 1 : -1;
    if (g.mpi_up < 0) {
        snprintf(err, n, "%s", g.mpi_err);
        return MPI_ERR_OTHER;
    }
    MPI_Comm node;
    MPI_TRY(MPI_Comm_rank, (MPI_COMM_WORLD, &c->info.rank));
    MPI_TRY(MPI_Comm_size, (MPI_COMM_WORLD, &c->info.world));
    MPI_TRY(MPI_Comm_dup, (MPI_COMM_WORLD, &c->mc));
    MPI_TRY(MPI_Comm_set_errhandler, (c->mc, MPI_ERRORS_RETURN));
    MPI_TRY(MPI_Comm_split_type, (c->mc, MPI_COMM_TYPE_SHARED, c->info.rank, MPI_INFO_NULL, &node));
    int rc = MPI_Comm_rank(node, &c->info.local_rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, &c->info.local_world);
    MPI_Comm_free(&node);
    return rc == MPI_SUCCESS ? rc : mpi_fail(rc, "MPI_Comm_rank/size (node)", err, n);
}

static void describe(const struct call *k, char *buf, size_t n);

/* What every rank's call must match: kind, number, count, dtype, op, root. */
enum { SIG_FIELDS = 6 };
static void signature(const struct call *k, int64_t f[SIG_FIELDS])
{
    f[0] = k->kind, f[1] = (int64_t)k->seq, f[2] = (int64_t)k->count, f[3] = k->dt, f[4] = k->op, f[5] = k->root;
}

/* A hash of the signature (splitmix64 steps). */
static int64_t signature_hash(const int64_t f[SIG_FIELDS])
{
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < SIG_FIELDS; i++) {
        h += (uint64_t)f[i] + 0x9e3779b97f4a7c15ull;
        h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
        h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
        h ^= h >> 31;
    }
    return (int64_t)h;
}

/* Before collective k touches its buffers: whether every rank entered the same call. One
 * all-reduce (max) of this rank's hash and its complement: both come back unchanged exactly when
 * no rank has a larger hash or a smaller one, and every rank sees the same answer. When they differ,
 * an all-gather of the signatures lets every rank name the first rank whose call is not its own
 * (in err); returns MISMATCH then. The collective itself is the same on every rank, so the check
 * is safe whatever the calls were. */
static int agree(const struct call *k, char *err, size_t n)
{
    struct comm *c = k->c;
    int64_t f[SIG_FIELDS], h[2];
    signature(k, f);
    h[0] = signature_hash(f), h[1] = ~h[0];
    int64_t mine = h[0];
    MPI_TRY(MPI_Allreduce, (MPI_IN_PLACE, h, 2, MPI_INT64_T, MPI_MAX, c->mc));
    if (h[0] == mine && h[1] == ~mine) return MPI_SUCCESS;
    int64_t *all = malloc(sizeof *all * SIG_FIELDS * (size_t)c->info.world);
    if (!all) {
        snprintf(err, n, "does not match another rank's call (out of memory naming it)");
        return MISMATCH;
    }
    int rc = MPI_Allgather(f, SIG_FIELDS, MPI_INT64_T, all, SIG_FIELDS, MPI_INT64_T, c->mc);
    int other = -1;
    for (int r = 0; r < c->info.world && rc == MPI_SUCCESS && other < 0; r++)
        if (memcmp(all + (size_t)r * SIG_FIELDS, f, sizeof f)) other = r;
    if (rc != MPI_SUCCESS) {
        mpi_fail(rc, "MPI_Allgather (naming the ranks' calls)", err, n);
        snprintf(err + strlen(err), n - strlen(err), "; the ranks' calls differ");
    } else {
        const int64_t *o = all + (size_t)(other < 0 ? 0 : other) * SIG_FIELDS;
        struct call them = {.kind = (enum kind)o[0], .seq = (uint64_t)o[1], .count = (size_t)o[2],
                            .dt = (enum glia_dtype)o[3], .op = (enum glia_reduce_op)o[4], .root = (int)o[5]};
        char what[160] = "a call of its own";
        if ((size_t)them.kind < sizeof kind_name / sizeof kind_name[0]) describe(&them, what, sizeof what);
        snprintf(err, n, "does not match rank %d's %s: the ranks issued different collectives (do they run with the "
                 "same settings?); no data was exchanged", other, what);
    }
    free(all);
    return MISMATCH;
}

/* Runs call k with blocking MPI; on failure writes what failed into err and returns MPI's code
 * (MISMATCH when the ranks entered different collectives). */
static int run(struct call *k, char *err, size_t n)
{
    struct comm *c = k->c;
    MPI_Datatype t = mpi_type(k->dt);
    size_t esize = glia_dtype_size(k->dt);
    if (k->kind != OPEN && k->kind != CLOSE && k->kind != ABORT) {
        int rc = agree(k, err, n);
        if (rc != MPI_SUCCESS) return rc;
    }
    switch (k->kind) {
    case OPEN: return run_open(c, err, n);
    case ABORT: MPI_TRY(MPI_Abort, (MPI_COMM_WORLD, k->root)); return MPI_SUCCESS;  /* returns only when it failed */
    case ALL_REDUCE:  /* in place, in pieces of at most INT_MAX elements */
        for (size_t off = 0; off < k->count; off += INT_MAX) {
            int m = (int)(k->count - off < INT_MAX ? k->count - off : INT_MAX);
            MPI_TRY(MPI_Allreduce, (MPI_IN_PLACE, (char *)k->dst + off * esize, m, t, mpi_op(k->op), c->mc));
        }
        if (k->op == GLIA_REDUCE_AVG) divide(k->dst, k->count, k->dt, c->info.world);
        return MPI_SUCCESS;
    case BROADCAST:
        for (size_t off = 0; off < k->count; off += INT_MAX) {
            int m = (int)(k->count - off < INT_MAX ? k->count - off : INT_MAX);
            MPI_TRY(MPI_Bcast, ((char *)k->dst + off * esize, m, t, k->root, c->mc));
        }
        return MPI_SUCCESS;
    case ALL_GATHER: {  /* in place when src is this rank's block of dst */
        const void *src = k->src == (char *)k->dst + (size_t)c->info.rank * k->count * esize ? MPI_IN_PLACE : k->src;
        MPI_TRY(MPI_Allgather, (src, (int)k->count, t, k->dst, (int)k->count, t, c->mc));
        return MPI_SUCCESS;
    }
    case REDUCE_SCATTER: {  /* in place when dst is src: the result goes to its first block */
        const void *src = k->src == k->dst ? MPI_IN_PLACE : k->src;
        MPI_TRY(MPI_Reduce_scatter_block, (src, k->dst, (int)k->count, t, mpi_op(k->op), c->mc));
        if (k->op == GLIA_REDUCE_AVG) divide(k->dst, k->count, k->dt, c->info.world);
        return MPI_SUCCESS;
    }
    case BARRIER: MPI_TRY(MPI_Barrier, (c->mc)); return MPI_SUCCESS;
    case CLOSE:
        if (c->mc != MPI_COMM_NULL) MPI_Comm_free(&c->mc);
        if (k->final && g.mpi_up > 0 && g.mpi_ours) MPI_TRY(MPI_Finalize, ());
        return MPI_SUCCESS;
    }
    return MPI_SUCCESS;
}

/* "rank 0 of 2", or "rank ? of ?" before MPI said */
static const char *who(const struct comm *c, char *buf, size_t n)
{
    if (c->info.rank < 0) snprintf(buf, n, "rank ? of ?");
    else snprintf(buf, n, "rank %d of %d", c->info.rank, c->info.world);
    return buf;
}

/* "all-reduce #17 (4096 f32, sum)" */
static void describe(const struct call *k, char *buf, size_t n)
{
    const char *dt = glia_dtype_name(k->dt);
    switch (k->kind) {
    case ALL_REDUCE: case REDUCE_SCATTER:
        snprintf(buf, n, "%s #%llu (%zu %s, %s)", kind_name[k->kind], (unsigned long long)k->seq, k->count, dt,
                 glia_reduce_op_name(k->op));
        break;
    case BROADCAST:
        snprintf(buf, n, "broadcast #%llu (%zu %s from rank %d)", (unsigned long long)k->seq, k->count, dt, k->root);
        break;
    case ALL_GATHER:
        snprintf(buf, n, "all-gather #%llu (%zu %s per rank)", (unsigned long long)k->seq, k->count, dt);
        break;
    case OPEN: snprintf(buf, n, "open (MPI initialization and MPI_Comm_dup of MPI_COMM_WORLD)"); break;
    default: snprintf(buf, n, "%s #%llu", kind_name[k->kind], (unsigned long long)k->seq);
    }
}

static void *thread_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g.lock);
    for (;;) {
        while (!g.head) pthread_cond_wait(&g.work, &g.lock);
        struct call *k = g.head;
        if (!(g.head = k->next)) g.tail = NULL;
        g.current = k;
        struct comm *c = k->c;
        bool skip = c->failed && k->kind != CLOSE && k->kind != ABORT;  /* after a failure the communicator is broken */
        pthread_mutex_unlock(&g.lock);

        char err[300] = "";
        int rc = skip ? MPI_SUCCESS : run(k, err, sizeof err);

        pthread_mutex_lock(&g.lock);
        if (rc != MPI_SUCCESS && !c->failed) {
            char what[160];
            describe(k, what, sizeof what);
            c->failed = k->seq;
            c->fail_status = rc == MISMATCH ? GLIA_EINVAL : k->kind == OPEN ? GLIA_EUNSUPPORTED : GLIA_EIO;
            char w[32];
            snprintf(c->err, sizeof c->err, "%s: mpi %s %s%s", who(c, w, sizeof w), what, rc == MISMATCH ? "" : "failed: ",
                     err);
        }
        c->done = k->seq;
        g.current = NULL;
        g.stuck = false;
        bool quit = k->kind == CLOSE && k->final;
        if (k->kind == CLOSE && c->abandoned) free(c);
        if (quit && g.mpi_ours && g.mpi_up > 0) g.finalized = true;
        free(k);
        pthread_cond_broadcast(&g.done);
        if (quit) {
            if (g.phase == LEFT) g.phase = IDLE;  /* detached: nobody joins */
            pthread_mutex_unlock(&g.lock);
            return NULL;
        }
    }
}

/* ---- on the issuing side ---- */

static struct timespec deadline(double s)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double whole = (double)(time_t)s;
    t.tv_sec += (time_t)s;
    t.tv_nsec += (long)((s - whole) * 1e9);
    if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
    return t;
}

/* Waits (lock held) until call seq of c is done or the time is up (never, for timeout_s <= 0 or
 * beyond 30 years); true when done. */
static bool wait_done(struct comm *c, uint64_t seq, double timeout_s)
{
    bool forever = !(timeout_s > 0 && timeout_s < 1e9);
    struct timespec dl = deadline(forever ? 0 : timeout_s);
    while (c->done < seq)
        if (forever) pthread_cond_wait(&g.done, &g.lock);
        else if (pthread_cond_timedwait(&g.done, &g.lock, &dl) == ETIMEDOUT) return c->done >= seq;
    return true;
}

/* Appends k to the thread's queue (lock held). */
static void enqueue(struct call *k)
{
    if (g.tail) g.tail->next = k;
    else g.head = k;
    g.tail = k;
    k->next = NULL;
    pthread_cond_signal(&g.work);
}

static struct call *new_call(struct comm *c, enum kind kind)
{
    struct call *k = calloc(1, sizeof *k);
    if (k) k->c = c, k->kind = kind;
    return k;
}

/* Queues a CLOSE of c (after its calls) and waits for it unless a call is known to be stuck; a
 * close that does not finish in time leaves c and the thread behind. Frees c otherwise. */
static void leave(struct comm *c, struct call *k)
{
    pthread_mutex_lock(&g.lock);
    if (c->gh) {  /* calls still held by an unfinished group run first */
        g.tail ? (g.tail->next = c->gh) : (g.head = c->gh);
        g.tail = c->gt;
        c->gh = c->gt = NULL;
    }
    bool final = k->final = --g.n_open == 0;  /* k is the thread's from here: it frees k when done */
    if (final) g.phase = ENDING;
    uint64_t seq = k->seq = ++c->issued;
    enqueue(k);
    bool done = !g.stuck && wait_done(c, seq, c->timeout_s);
    if (!done) {
        c->abandoned = true;
        if (final) {
            pthread_detach(g.thread);
            g.phase = LEFT;
        }
        pthread_mutex_unlock(&g.lock);
        return;
    }
    pthread_mutex_unlock(&g.lock);
    if (final) {
        pthread_join(g.thread, NULL);
        pthread_mutex_lock(&g.lock);
        g.phase = IDLE;
        pthread_mutex_unlock(&g.lock);
    }
    free(c);
}

/* Keeps this plugin mapped for the life of the process: the thread may outlive the contexts that
 * loaded it (a call stuck after a timeout), and MPI can be started only once per process. */
static void pin_plugin(void)
{
    static bool pinned;
    Dl_info di;
    if (!pinned && dladdr((void *)(uintptr_t)pin_plugin, &di) && di.dli_fname)
        pinned = dlopen(di.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) != NULL;
}

static glia_status mpi_open(struct glia_context *ctx, const struct glia_comm_open_args *a, struct glia_comm_info *info,
                            void **priv)
{
    pthread_once(&once, init_conds);
    pthread_mutex_lock(&g.lock);
    pin_plugin();
    const char *refuse = g.finalized ? "MPI cannot be started twice in one process: it was finalized when the last "
                                       "mpi communicator closed (keep one glia context open for the whole program)"
                         : g.phase == LEFT   ? "the mpi communication thread is stuck in a call that timed out"
                         : g.phase == ENDING ? "the last mpi communicator is closing (MPI is being finalized)"
                                             : NULL;
    if (refuse) {
        pthread_mutex_unlock(&g.lock);
        return glia_error(ctx, GLIA_EUNSUPPORTED, "mpi open: %s", refuse);
    }
    struct comm *c = calloc(1, sizeof *c);
    struct call *k = new_call(c, OPEN), *kc = new_call(c, CLOSE);
    if (!c || !k || !kc) {
        pthread_mutex_unlock(&g.lock);
        free(c), free(k), free(kc);
        return GLIA_ENOMEM;
    }
    *c = (struct comm){.ctx = ctx, .b = a->backend, .mc = MPI_COMM_NULL, .info = {-1, 0, -1, 0}, .timeout_s = a->timeout_s};
    if (g.phase == IDLE) {
        int e = pthread_create(&g.thread, NULL, thread_main, NULL);
        if (e) {
            pthread_mutex_unlock(&g.lock);
            free(c), free(k), free(kc);
            return glia_error(ctx, GLIA_EINTERNAL, "mpi open: cannot start the communication thread: %s", strerror(e));
        }
        g.phase = RUNNING;
    }
    g.n_open++;
    k->seq = ++c->issued;
    enqueue(k);
    bool done = wait_done(c, k->seq, a->timeout_s);
    glia_status st = !done ? GLIA_ETIMEDOUT : c->failed ? c->fail_status : GLIA_OK;
    char w[32];
    if (st == GLIA_ETIMEDOUT) g.stuck = true;
    if (st == GLIA_ETIMEDOUT)
        glia_error(ctx, st, "%s: mpi open (MPI initialization and MPI_Comm_dup of MPI_COMM_WORLD) did not finish "
                   "within %g s: another rank did not start or stalled", who(c, w, sizeof w), a->timeout_s);
    else if (st)
        glia_error(ctx, st, "%s", c->err);
    pthread_mutex_unlock(&g.lock);
    if (st) {
        leave(c, kc);
        return st;
    }
    free(kc);
    *info = c->info;
    *priv = c;
    return GLIA_OK;
}

static void mpi_close(void *priv)
{
    struct comm *c = priv;
    struct call *k = new_call(c, CLOSE);
    if (k) leave(c, k);  /* out of memory: the communicator is leaked, MPI stays up */
}

/* Checks the dtype (and op) of a call; "reduce" calls take numbers only, AVG floating ones. */
static glia_status check_types(struct comm *c, enum kind kind, enum glia_dtype dt, int op)
{
    bool reduce = kind == ALL_REDUCE || kind == REDUCE_SCATTER;
    bool ok = dt == GLIA_F32 || dt == GLIA_F64 || dt == GLIA_I32 || dt == GLIA_I64 || (dt == GLIA_U8 && !reduce);
    if (!ok)
        return glia_error(c->ctx, GLIA_EUNSUPPORTED, "rank %d of %d: mpi %s: dtype %s is not supported (%s)", c->info.rank,
                          c->info.world, kind_name[kind], glia_dtype_name(dt),
                          reduce ? "reductions take f32, f64, i32, i64" : "it takes f32, f64, i32, i64, u8");
    if (reduce && op == GLIA_REDUCE_AVG && dt != GLIA_F32 && dt != GLIA_F64)
        return glia_error(c->ctx, GLIA_EUNSUPPORTED, "rank %d of %d: mpi %s: avg of %s is not defined (use sum)",
                          c->info.rank, c->info.world, kind_name[kind], glia_dtype_name(dt));
    return GLIA_OK;
}

/* Queues a call (or holds it back in a group) and returns its ticket. Device work queued before
 * (a download into a host buffer) is waited for first. */
static glia_status issue(struct comm *c, struct call k, uint64_t *ticket)
{
    glia_status st = check_types(c, k.kind, k.dt, k.op);
    if (!st) st = glia_backend_sync(c->b);
    if (st) return st;
    if ((k.kind == ALL_GATHER || k.kind == REDUCE_SCATTER) && k.count > INT_MAX)
        return glia_error(c->ctx, GLIA_EUNSUPPORTED, "rank %d of %d: mpi %s: %zu elements per rank is more than MPI's "
                          "int count", c->info.rank, c->info.world, kind_name[k.kind], k.count);
    struct call *p = malloc(sizeof *p);
    if (!p) return GLIA_ENOMEM;
    *p = k;
    p->c = c;
    p->next = NULL;
    pthread_mutex_lock(&g.lock);
    *ticket = p->seq = ++c->issued;
    if (c->group) {
        c->gt ? (c->gt->next = p) : (c->gh = p);
        c->gt = p;
    } else {
        enqueue(p);
    }
    pthread_mutex_unlock(&g.lock);
    return GLIA_OK;
}

/* buf(count) = op over ranks of buf(count) */
static glia_status mpi_all_reduce(void *priv, void *buf, size_t count, enum glia_dtype dt, enum glia_reduce_op op,
                                  uint64_t *ticket)
{
    return issue(priv, (struct call){.kind = ALL_REDUCE, .dst = buf, .count = count, .dt = dt, .op = op}, ticket);
}

/* buf(count) = root's buf(count) */
static glia_status mpi_broadcast(void *priv, void *buf, size_t count, enum glia_dtype dt, int root, uint64_t *ticket)
{
    return issue(priv, (struct call){.kind = BROADCAST, .dst = buf, .count = count, .dt = dt, .root = root}, ticket);
}

/* dst(world, count)[r] = rank r's src(count) */
static glia_status mpi_all_gather(void *priv, void *dst, const void *src, size_t count, enum glia_dtype dt,
                                  uint64_t *ticket)
{
    return issue(priv, (struct call){.kind = ALL_GATHER, .dst = dst, .src = src, .count = count, .dt = dt}, ticket);
}

/* dst(count) = op over ranks of src(world, count)[this rank] */
static glia_status mpi_reduce_scatter(void *priv, void *dst, const void *src, size_t count, enum glia_dtype dt,
                                      enum glia_reduce_op op, uint64_t *ticket)
{
    return issue(priv,
                 (struct call){.kind = REDUCE_SCATTER, .dst = dst, .src = src, .count = count, .dt = dt, .op = op},
                 ticket);
}

static glia_status mpi_barrier(void *priv, uint64_t *ticket)
{
    return issue(priv, (struct call){.kind = BARRIER, .dt = GLIA_U8}, ticket);
}

/* A group holds its calls back and hands them to the thread at once. */
static glia_status mpi_group_begin(void *priv)
{
    struct comm *c = priv;
    pthread_mutex_lock(&g.lock);
    c->group++;
    pthread_mutex_unlock(&g.lock);
    return GLIA_OK;
}

static glia_status mpi_group_end(void *priv)
{
    struct comm *c = priv;
    pthread_mutex_lock(&g.lock);
    if (c->group == 0) {
        pthread_mutex_unlock(&g.lock);
        return glia_error(c->ctx, GLIA_EINVAL, "rank %d of %d: mpi group_end without group_begin", c->info.rank,
                          c->info.world);
    }
    if (--c->group == 0 && c->gh) {
        g.tail ? (g.tail->next = c->gh) : (g.head = c->gh);
        g.tail = c->gt;
        c->gh = c->gt = NULL;
        pthread_cond_signal(&g.work);
    }
    pthread_mutex_unlock(&g.lock);
    return GLIA_OK;
}

/* The queued (or running) call seq of c, or NULL (lock held). */
static const struct call *find(const struct comm *c, uint64_t seq)
{
    if (g.current && g.current->c == c && g.current->seq == seq) return g.current;
    for (const struct call *k = g.head; k; k = k->next)
        if (k->c == c && k->seq == seq) return k;
    return NULL;
}

/* CPU work is synchronous, so host or not, this blocks until call `ticket` is done. */
static glia_status mpi_wait(void *priv, uint64_t ticket, bool host)
{
    (void)host;
    struct comm *c = priv;
    pthread_mutex_lock(&g.lock);
    glia_status st = GLIA_OK;
    if (ticket > c->issued) {
        st = glia_error(c->ctx, GLIA_EINVAL, "rank %d of %d: mpi wait: ticket %llu was never issued (last is %llu)",
                        c->info.rank, c->info.world, (unsigned long long)ticket, (unsigned long long)c->issued);
    } else if (c->group) {
        st = glia_error(c->ctx, GLIA_EINVAL, "rank %d of %d: mpi wait for #%llu inside a group: call group_end first",
                        c->info.rank, c->info.world, (unsigned long long)ticket);
    } else if (!wait_done(c, ticket, c->timeout_s)) {
        char what[160] = "call";
        const struct call *k = find(c, ticket);
        if (k) describe(k, what, sizeof what);
        g.stuck = true;
        st = glia_error(c->ctx, GLIA_ETIMEDOUT, "rank %d of %d: mpi %s did not finish within %g s: another rank died "
                        "or stalled", c->info.rank, c->info.world, what, c->timeout_s);
    } else if (c->failed && c->failed <= ticket) {
        st = glia_error(c->ctx, c->fail_status, "%s", c->err);
    }
    pthread_mutex_unlock(&g.lock);
    return st;
}

/* MPI_Abort of MPI_COMM_WORLD: on the communication thread when it is idle (MPI is called from
 * that thread only), else from this thread, the communication thread being in a call that may
 * never end (a peer that stalled). Returns only when MPI could not end the job. */
static void mpi_abort(void *priv, int status)
{
    struct comm *c = priv;
    pthread_mutex_lock(&g.lock);
    struct call *k = g.phase == RUNNING && !g.current && !g.head && g.mpi_up > 0 ? new_call(c, ABORT) : NULL;
    if (k) {
        k->root = status;
        k->seq = ++c->issued;
        enqueue(k);
        wait_done(c, k->seq, 10);  /* MPI_Abort does not come back; if it hangs, try from here */
    }
    bool up = g.mpi_up > 0 && !g.finalized;
    pthread_mutex_unlock(&g.lock);
    if (up) MPI_Abort(MPI_COMM_WORLD, status);
}

static const struct glia_comm_ops mpi_ops = {
    .struct_size = sizeof(struct glia_comm_ops),
    .name = "mpi",
    .description = "MPI collectives over host memory, on a communication thread (device buffers are staged)",
    .memory = GLIA_COMM_HOST_MEMORY,
    .device_types = (1u << GLIA_DEVICE_CPU) | (1u << GLIA_DEVICE_CUDA),
    .open = mpi_open,
    .close = mpi_close,
    .all_reduce = mpi_all_reduce,
    .broadcast = mpi_broadcast,
    .all_gather = mpi_all_gather,
    .reduce_scatter = mpi_reduce_scatter,
    .barrier = mpi_barrier,
    .group_begin = mpi_group_begin,
    .group_end = mpi_group_end,
    .wait = mpi_wait,
    .abort = mpi_abort,
};

static glia_status mpi_init(struct glia_registry *r) { return glia_register_comm(r, &mpi_ops); }

GLIA_PLUGIN_DEFINE(mpi, "1.0", "MIT", "the mpi transport: MPI collectives over host memory", mpi_init)
