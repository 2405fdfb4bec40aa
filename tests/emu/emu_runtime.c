/* tests/emu/emu_runtime.c — the CPU emulation of CUDA used by tests/emu/run.sh: the runtime calls the
 * backend makes (device memory is host memory, streams and events complete at once or when the host
 * must see them), stream capture into CUDA graphs and their launches (a graph is the sequence of
 * operations captured, replayed with the same arguments; what a GPU refuses during a capture fails
 * with its error and invalidates the capture), and the kernel runner (blocks one after another, a
 * block's threads as fibers that switch at __syncthreads and warp shuffles, a barrier no thread can
 * reach reported as a deadlock). Not a GPU model: no timing, no concurrency between streams, and a
 * real GPU's ordering bugs show only as far as GLIA_EMU_DEFER makes them. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "emu.h"

#if !defined(__x86_64__)
#error "the emulation's fiber switch is written for x86-64"
#endif

/* Saves the callee-saved registers on the current stack, stores its pointer in *from and resumes
 * the fiber whose stack pointer is to (System V x86-64: the rest is caller-saved). */
void glia__emu_switch(void **from, void *to);
__asm__(".text\n"
        ".globl glia__emu_switch\n"
        ".type glia__emu_switch, @function\n"
        "glia__emu_switch:\n"
        "    pushq %rbp\n    pushq %rbx\n    pushq %r12\n    pushq %r13\n    pushq %r14\n    pushq %r15\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    popq %r15\n    popq %r14\n    popq %r13\n    popq %r12\n    popq %rbx\n    popq %rbp\n"
        "    ret\n"
        ".size glia__emu_switch, .-glia__emu_switch\n");

/* ---- the kernel runner ---- */

#define EMU_MAX_THREADS 1024
#define EMU_STACK ((size_t)256 << 10)

struct glia_emu_thread {
    uint3 tid;  /* first: cuda_emu.h sees only this */
    int lane, warp;
    enum { T_RUN, T_WAIT, T_DONE } state;
    struct barrier *wait_on;
    unsigned wait_gen;
    void *sp;  /* saved stack pointer while switched out */
};

struct barrier {
    int arrived, live;
    unsigned gen;
};

struct glia_emu_thread *glia_emu_cur;
uint3 glia_emu_block_idx;
dim3 glia_emu_block_dim, glia_emu_grid_dim;

static struct glia_emu_thread threads[EMU_MAX_THREADS];
static char *stacks;
static void *sched_sp;
static struct barrier block_bar, warp_bar[EMU_MAX_THREADS / 32];
static uint64_t warp_slot[EMU_MAX_THREADS / 32][32];
static void (*run_fn)(void *);
static void *run_arg;
static cudaError_t last_error = cudaSuccess, sticky = cudaSuccess;
static unsigned long long n_launches, n_threads_run;

/* Arrive at b and wait until every live thread has (threads that ended count as arrived). */
static void arrive(struct barrier *b)
{
    if (++b->arrived >= b->live) {
        b->arrived = 0;
        b->gen++;
        return;
    }
    struct glia_emu_thread *t = glia_emu_cur;
    t->state = T_WAIT;
    t->wait_on = b;
    t->wait_gen = b->gen;
    glia__emu_switch(&t->sp, sched_sp);
}

static void leave(struct barrier *b)
{
    b->live--;
    if (b->arrived && b->arrived >= b->live) {
        b->arrived = 0;
        b->gen++;
    }
}

void glia_emu_syncthreads(void) { arrive(&block_bar); }

uint64_t glia_emu_shfl(unsigned mask, uint64_t v, int mode, int arg, int width)
{
    (void)mask;
    struct glia_emu_thread *t = glia_emu_cur;
    int w = t->warp, lane = t->lane;
    if (width <= 0 || width > 32 || (width & (width - 1))) {
        fprintf(stderr, "emu: shuffle width %d is not a power of 2 up to 32\n", width);
        abort();
    }
    warp_slot[w][lane] = v;
    arrive(&warp_bar[w]);
    int base = lane & ~(width - 1), s = lane;
    switch (mode) {
    case 0: s = lane + arg < base + width ? lane + arg : lane; break;
    case 1: s = base + (((lane - base) ^ arg) & (width - 1)); break;
    case 2: s = lane - arg >= base ? lane - arg : lane; break;
    default: s = base + (arg & (width - 1)); break;
    }
    uint64_t r = warp_slot[w][s];
    arrive(&warp_bar[w]);  /* nobody writes the slots again before everyone has read */
    return r;
}

/* A fiber's first frame (entered by glia__emu_switch's ret); it never returns. */
static void thread_main(void)
{
    run_fn(run_arg);
    struct glia_emu_thread *t = glia_emu_cur;
    t->state = T_DONE;
    leave(&block_bar);
    leave(&warp_bar[t->warp]);
    glia__emu_switch(&t->sp, sched_sp);
    abort();  /* a finished fiber is never resumed */
}

/* A new fiber on stack [base, base + size): six zero registers, then thread_main as the return
 * address, placed so that thread_main starts with the stack alignment of a called function. */
static void *fiber_new(char *base, size_t size)
{
    uintptr_t top = ((uintptr_t)(base + size)) & ~(uintptr_t)15;
    void **sp = (void **)(top - 64);
    for (int i = 0; i < 6; i++) sp[i] = NULL;
    sp[6] = (void *)(uintptr_t)thread_main;
    sp[7] = NULL;
    return sp;
}

static int run_block(const char *name, int nt)
{
    int nw = (nt + 31) / 32;
    block_bar = (struct barrier){0, nt, 0};
    for (int w = 0; w < nw; w++) warp_bar[w] = (struct barrier){0, w < nw - 1 ? 32 : nt - 32 * (nw - 1), 0};
    dim3 b = glia_emu_block_dim;
    for (int i = 0; i < nt; i++) {
        struct glia_emu_thread *t = &threads[i];
        t->tid = (uint3){(unsigned)i % b.x, (unsigned)i / b.x % b.y, (unsigned)i / (b.x * b.y)};
        t->lane = i % 32;
        t->warp = i / 32;
        t->state = T_RUN;
        t->sp = fiber_new(stacks + (size_t)i * EMU_STACK, EMU_STACK);
    }
    for (int left = nt;;) {
        int ran = 0;
        for (int i = 0; i < nt; i++) {
            struct glia_emu_thread *t = &threads[i];
            if (t->state == T_DONE || (t->state == T_WAIT && t->wait_on->gen == t->wait_gen)) continue;
            t->state = T_RUN;
            glia_emu_cur = t;
            glia__emu_switch(&sched_sp, t->sp);
            ran++;
            if (t->state == T_DONE) left--;
        }
        if (!left) return 0;
        if (!ran) {
            fprintf(stderr, "emu: %s: deadlock in block (%u,%u,%u): %d of %d threads wait at a barrier the others never reach\n",
                    name, glia_emu_block_idx.x, glia_emu_block_idx.y, glia_emu_block_idx.z, left, nt);
            return -1;
        }
    }
}

/* Launches counted by the prefix of their kernel's name, for tests (glia_emu_launches_named): up to 8 prefixes. */
static struct {
    char prefix[64];
    long n;
} named[8];
static int n_named;
static pthread_mutex_t named_lock = PTHREAD_MUTEX_INITIALIZER;

/* The runs of kernels whose name starts with prefix (a CUDA graph's at each replay) since its first call, or since the
 * last one with reset; -1 when 8 other prefixes are counted already. Tests find it with dlsym. */
long glia_emu_launches_named(const char *prefix, bool reset)
{
    pthread_mutex_lock(&named_lock);
    int i = 0;
    while (i < n_named && strcmp(named[i].prefix, prefix)) i++;
    long n = -1;
    if (i == n_named && n_named < 8) {
        snprintf(named[i].prefix, sizeof named[i].prefix, "%s", prefix);
        named[i].n = 0;
        n_named++;
    }
    if (i < n_named) {
        n = named[i].n;
        if (reset) named[i].n = 0;
    }
    pthread_mutex_unlock(&named_lock);
    return n;
}

static void count_named(const char *name)
{
    pthread_mutex_lock(&named_lock);
    for (int i = 0; i < n_named; i++)
        if (!strncmp(name, named[i].prefix, strlen(named[i].prefix))) named[i].n++;
    pthread_mutex_unlock(&named_lock);
}

/* Checks, counts and traces a launch, and runs it unless compute is false (GLIA_EMU_NO_COMPUTE). */
static void glia_emu_run(const char *name, dim3 g, dim3 b, size_t smem, void (*fn)(void *), void *arg, bool compute)
{
    unsigned long long nt = (unsigned long long)b.x * b.y * b.z;
    if (!g.x || !g.y || !g.z || !nt || nt > EMU_MAX_THREADS || b.z > 64 || g.x > 0x7fffffffu || g.y > 65535 ||
        g.z > 65535 || smem > 48 * 1024) {
        fprintf(stderr, "emu: %s: invalid launch grid (%u,%u,%u) block (%u,%u,%u) smem %zu\n", name, g.x, g.y, g.z, b.x,
                b.y, b.z, smem);
        last_error = cudaErrorInvalidConfiguration;
        return;
    }
    n_launches++;
    if (n_named) count_named(name);
    static int trace = -1;
    if (trace < 0) trace = getenv("GLIA_EMU_TRACE") != NULL;
    if (trace) fprintf(stderr, "emu: launch %s (%u,%u,%u)x(%u,%u,%u)\n", name, g.x, g.y, g.z, b.x, b.y, b.z);
    if (!compute) return;
    if (!stacks) {
        stacks = mmap(NULL, EMU_MAX_THREADS * EMU_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                      -1, 0);
        if (stacks == MAP_FAILED) {
            perror("emu: mmap");
            abort();
        }
    }
    run_fn = fn;
    run_arg = arg;
    glia_emu_grid_dim = g;
    glia_emu_block_dim = b;
    for (unsigned z = 0; z < g.z; z++)
        for (unsigned y = 0; y < g.y; y++)
            for (unsigned x = 0; x < g.x; x++) {
                glia_emu_block_idx = (uint3){x, y, z};
                if (run_block(name, (int)nt)) {
                    last_error = sticky = cudaErrorLaunchFailure;
                    return;
                }
                n_threads_run += nt;
            }
    glia_emu_cur = NULL;
}

/* ---- the runtime ---- */

pthread_mutex_t glia_emu_mutex = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

static cudaError_t ret(void) { return sticky; }

cudaError_t cudaGetLastError(void)
{
    GLIA_EMU_GUARD;
    cudaError_t e = last_error;
    last_error = sticky;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }
const char *cudaGetErrorString(cudaError_t e)
{
    GLIA_EMU_GUARD;
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchFailure: return "unspecified launch failure (emulation: deadlock)";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNotSupported: return "operation not supported (emulation)";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge: return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched: return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    default: return "error (emulation)";
    }
}
const char *cudaGetErrorName(cudaError_t e)
{
    GLIA_EMU_GUARD;
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureMerge: return "cudaErrorStreamCaptureMerge";
    case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorCapturedEvent: return "cudaErrorCapturedEvent";
    default: return "cudaErrorUnknown";
    }
}

cudaError_t cudaGetDeviceCount(int *n)
{
    GLIA_EMU_GUARD;
    *n = 1;
    return cudaSuccess;
}
static int cur_device;
cudaError_t cudaSetDevice(int d)
{
    GLIA_EMU_GUARD;
    if (d != 0) return cudaErrorInvalidDevice;
    cur_device = d;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d)
{
    GLIA_EMU_GUARD;
    *d = cur_device;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
    GLIA_EMU_GUARD;
    if (d != 0) return cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "glia CPU emulation of sm_90");
    p->major = 9;
    p->minor = 0;
    p->totalGlobalMem = (size_t)8 << 30;
    p->multiProcessorCount = 4;
    p->maxThreadsPerBlock = 1024;
    p->warpSize = 32;
    p->sharedMemPerBlock = 48 * 1024;
    p->maxGridSize[0] = 0x7fffffff;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d)
{
    GLIA_EMU_GUARD;
    if (d != 0) return cudaErrorInvalidDevice;
    switch (a) {  /* the emulated sm_90 of cudaGetDeviceProperties; made-up clocks, for glia profile's peak */
    case cudaDevAttrMultiProcessorCount: *v = 4; break;
    case cudaDevAttrClockRate: *v = 1000000; break;          /* kHz */
    case cudaDevAttrMemoryClockRate: *v = 1000000; break;    /* kHz */
    case cudaDevAttrGlobalMemoryBusWidth: *v = 256; break;   /* bits */
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    default: *v = 0;
    }
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
    GLIA_EMU_GUARD;
    *free_b = (size_t)7 << 30;
    *total = (size_t)8 << 30;
    return cudaSuccess;
}

/* ---- memory, streams and events ----
 * Every stream is a queue of operations (kernels, copies, memsets, event records, waits on events).
 * By default each call runs at once. With GLIA_EMU_DEFER (see deferring) a stream's work runs only
 * when the host has to see it: a stream or event synchronization, a stream or event query (each query moves the
 * stream one operation on), a copy between device memory and pageable host memory (which
 * CUDA makes synchronous), cudaFree and cudaDeviceSynchronize. A stream that waits on an event runs
 * the recording stream up to it first. So a missing wait, a host read of a pinned buffer before its
 * copy finished, or a pinned buffer rewritten while its upload is queued gives a wrong value here
 * every time, instead of now and then on a GPU. */

enum { M_DEVICE = 1, M_PINNED = 2 };
struct range {
    char *p;
    size_t n;
    int kind;
};
static struct range *ranges;
static size_t n_ranges, cap_ranges;

static int track(void *p, size_t n, int kind)
{
    if (n_ranges == cap_ranges) {
        size_t cap = cap_ranges ? 2 * cap_ranges : 256;
        struct range *r = realloc(ranges, cap * sizeof *r);
        if (!r) return -1;
        ranges = r;
        cap_ranges = cap;
    }
    ranges[n_ranges++] = (struct range){p, n, kind};
    return 0;
}
static void untrack(void *p)
{
    for (size_t i = 0; i < n_ranges; i++)
        if (ranges[i].p == p) {
            ranges[i] = ranges[--n_ranges];
            return;
        }
}
/* The tracked block holding p, or NULL (pageable host memory). */
static const struct range *range_of(const void *p)
{
    for (size_t i = 0; i < n_ranges; i++)
        if ((const char *)p >= ranges[i].p && (const char *)p < ranges[i].p + ranges[i].n) return &ranges[i];
    return NULL;
}
static int kind_of(const void *p)
{
    const struct range *r = range_of(p);
    return r ? r->kind : 0;
}

/* OP_RECORD and OP_EVENT_WAIT exist only in graphs: a cudaEventRecordExternal or cudaEventWaitExternal
 * captured, done again by each launch when it reaches them */
enum op_kind { OP_KERNEL, OP_COPY, OP_SET, OP_WAIT, OP_RECORD, OP_EVENT_WAIT };
struct emu_stream;
struct emu_event;
struct oplist;
struct op {
    enum op_kind kind;
    const char *name;
    dim3 g, b;
    size_t smem;
    void (*fn)(void *), (*drop)(void *);
    void *arg;
    void *dst;
    const void *src;
    size_t n;
    int value;
    struct emu_stream *other;  /* OP_WAIT: run it up to `upto` */
    unsigned long long upto;
    struct emu_event *event;   /* OP_RECORD, OP_EVENT_WAIT */
    struct oplist *owner;      /* a graph's operation: that list owns arg (and drops it), not the op */
    struct op *next;
};

/* A graph's operations in the order they were captured, shared by the graph, every exec made from
 * it and every operation a launch queued (each holds a reference): their argument blocks are
 * dropped when the last of those is gone, so each launch reuses them. */
struct oplist {
    long refs;
    size_t n, cap;
    struct op *ops;
};
static unsigned long n_oplists;  /* alive: while any is, emu_jit.c keeps libraries loaded */

#define CAP_MEMBERS 16
struct capture;
struct emu_stream {
    int index;  /* in order of creation */
    unsigned flags;
    struct op *head, *tail;
    unsigned long long queued, done;  /* operations queued and run so far */
    struct capture *cap;              /* the capture it takes part in, or NULL */
    int member;                       /* its index among cap's streams (0: it began the capture) */
    struct emu_stream *next_stream;
};
struct emu_event {
    struct emu_stream *s;  /* NULL: never recorded, recorded on the default stream or in a capture */
    unsigned long long at;
    bool recorded;
    unsigned long long cap_id;                /* recorded last inside capture cap_id (0: outside one) */
    unsigned long long clock[CAP_MEMBERS];    /* then: how much of each stream's captured work it follows */
    double sim;                               /* the simulated clock when recorded (glia_emu_sim_advance) */
};
static struct emu_stream *streams, *destroyed;
static int n_streams_made, defer = -1;
static unsigned long long n_graph_launches;

static struct emu_stream *stream_of(cudaStream_t st) { return (struct emu_stream *)(void *)st; }

/* Whether s's work waits until it must run: GLIA_EMU_DEFER=1 every stream's, 2 every stream's but
 * the first made (the backend's compute stream runs at once, its copy stream lags: a compute that
 * does not wait for its upload reads old data), 3 only the first's (a copy that does not wait for
 * the compute still reading its destination overwrites it). */
static bool deferring(const struct emu_stream *s)
{
    if (defer < 0) {
        const char *e = getenv("GLIA_EMU_DEFER");
        defer = e && *e >= '1' && *e <= '3' ? *e - '0' : 0;
    }
    return defer == 1 || (defer == 2 && s->index != 0) || (defer == 3 && s->index == 0);
}

/* An error from an API call: cudaGetLastError reports it too, as on a GPU (not sticky). */
static cudaError_t set_error(cudaError_t e)
{
    last_error = e;
    return e;
}

static void oplist_unref(struct oplist *l);

/* Gives up o's hold on its argument block: drops it, or the reference to the graph list owning it. */
static void release(struct op *o)
{
    if (o->owner) oplist_unref(o->owner);
    else if (o->drop) o->drop(o->arg);
}

static struct oplist *oplist_new(void)
{
    struct oplist *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->refs = 1;
    n_oplists++;
    return l;
}
static void oplist_unref(struct oplist *l)
{
    if (--l->refs) return;
    for (size_t i = 0; i < l->n; i++) release(&l->ops[i]);
    free(l->ops);
    free(l);
    n_oplists--;
}
/* Appends o to l, which takes over o's hold on its argument block. */
static int oplist_append(struct oplist *l, const struct op *o)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        struct op *p = realloc(l->ops, cap * sizeof *p);
        if (!p) return -1;
        l->ops = p;
        l->cap = cap;
    }
    l->ops[l->n] = *o;
    l->ops[l->n++].next = NULL;
    return 0;
}

static void flush(struct emu_stream *s, unsigned long long upto);

/* GLIA_EMU_NO_COMPUTE=1: kernels (the libraries' calls too), and memsets and device-to-device copies of over 64 KiB, do
 * nothing, and device memory starts zeroed, so that a large model's step runs its host code and allocations in
 * moments without touching most of its device memory (glibc maps large blocks lazily): for the peak of the caching
 * allocator, not for any value (the small ones keep flags such as the loss's bad-label flag armed). */
static bool no_compute(void)
{
    static int on = -1;
    if (on < 0) on = getenv("GLIA_EMU_NO_COMPUTE") && strcmp(getenv("GLIA_EMU_NO_COMPUTE"), "0");
    return on;
}

static void run_op(struct op *o)
{
    bool skip = no_compute();
    switch (o->kind) {
    case OP_KERNEL: glia_emu_run(o->name, o->g, o->b, o->smem, o->fn, o->arg, !skip); break;
    case OP_COPY:
        if (!skip || o->n <= 65536 || !range_of(o->dst) || !range_of(o->src) || range_of(o->dst)->kind != M_DEVICE ||
            range_of(o->src)->kind != M_DEVICE)
            memmove(o->dst, o->src, o->n);
        break;
    case OP_SET: if (!skip || o->n <= 65536) memset(o->dst, o->value, o->n); break;
    case OP_WAIT: flush(o->other, o->upto); break;
    case OP_RECORD: case OP_EVENT_WAIT: break;  /* done when launched (cudaGraphLaunch) */
    }
    release(o);
}

/* Runs s's operations until `upto` of them have run. */
static void flush(struct emu_stream *s, unsigned long long upto)
{
    while (s && s->done < upto && s->head) {
        struct op *o = s->head;
        s->head = o->next;
        if (!s->head) s->tail = NULL;
        s->done++;
        run_op(o);
        free(o);
    }
}
static void flush_all(void)
{
    for (struct emu_stream *s = streams; s; s = s->next_stream) flush(s, s->queued);
}

/* ---- stream capture ----
 * cudaStreamBeginCapture runs what its stream has queued, then records instead of running: every
 * operation later submitted to the stream, or to a stream that joined the capture by waiting on an
 * event recorded inside it, is appended to one list in the order submitted (an order every
 * dependency between them allows), and cudaStreamEndCapture hands the list over as the graph. An
 * event record or wait with cudaEventRecordExternal or cudaEventWaitExternal is a node of the list
 * too, which each launch does again in its place. What a GPU refuses during a capture fails here
 * with its error and invalidates the capture (its cudaStreamEndCapture then gives
 * cudaErrorStreamCaptureInvalidated and no graph): synchronizing or querying a capturing stream or
 * an event recorded in a capture, a dependency on work outside the capture, and the potentially
 * unsafe calls, where the capture's and the calling thread's modes forbid them (see forbids), which
 * wait for the device or look at its progress, or allocate outside stream order: cudaDeviceSynchronize,
 * cudaMemcpy, cudaMemset, cudaMalloc, cudaHostAlloc, cudaFree, cudaFreeHost, cudaLibraryUnload, and
 * cudaEventQuery and cudaEventSynchronize of any event.
 * Joins are checked with a vector clock per stream: clock[i][j] is how many of stream j's captured
 * operations stream i's next one follows, and a capture ends only when its first stream follows
 * every other stream's last operation. Not emulated: the graph's nodes and edges (a graph is a
 * sequence here, so a missing edge between two forked streams shows only as a missing join). */

struct emu_graph;
struct capture {
    unsigned long long id;
    enum cudaStreamCaptureMode mode;
    pthread_t thread;                       /* that began it */
    bool invalid;
    int n;                                  /* streams taking part; member[0] began it */
    struct emu_stream *member[CAP_MEMBERS]; /* NULL: destroyed during the capture */
    unsigned long long clock[CAP_MEMBERS][CAP_MEMBERS];
    struct emu_graph *graph;                /* what it records into */
    struct capture *next;
};
static struct capture *captures;  /* those under way */
static unsigned long long n_captures;
static __thread enum cudaStreamCaptureMode thread_mode = cudaStreamCaptureModeGlobal;

#define GRAPH_MAGIC 0x67726170u
#define EXEC_MAGIC 0x65786563u
/* A cudaGraph_t (magic GRAPH_MAGIC) or a cudaGraphExec_t (EXEC_MAGIC): a reference to a list. */
struct emu_graph {
    unsigned magic;
    struct oplist *ops;
};

static struct emu_graph *graph_new(unsigned magic, struct oplist *ops)
{
    struct emu_graph *g = malloc(sizeof *g);
    if (g) *g = (struct emu_graph){magic, ops};
    return g;
}
static void graph_free(struct emu_graph *g)
{
    g->magic = 0;
    oplist_unref(g->ops);
    free(g);
}
static struct emu_graph *as_graph(const void *h, unsigned magic)
{
    struct emu_graph *g = (struct emu_graph *)(uintptr_t)h;
    return g && g->magic == magic ? g : NULL;
}

static struct capture *capture_find(unsigned long long id)
{
    for (struct capture *c = captures; c; c = c->next)
        if (c->id == id) return c;
    return NULL;
}

/* Marks c invalidated, saying why on stderr the first time. */
static void invalidate(struct capture *c, const char *why)
{
    if (!c->invalid) fprintf(stderr, "emu: %s invalidates stream capture %llu\n", why, c->id);
    c->invalid = true;
}

/* Whether c forbids this thread the potentially unsafe calls (cudaThreadExchangeStreamCaptureMode):
 * a capture not begun relaxed forbids them to its own thread, and one begun in global mode to every
 * thread in global mode; a thread in relaxed mode may make them. */
static bool forbids(const struct capture *c)
{
    if (thread_mode == cudaStreamCaptureModeRelaxed || c->mode == cudaStreamCaptureModeRelaxed) return false;
    if (pthread_equal(c->thread, pthread_self())) return true;
    return c->mode == cudaStreamCaptureModeGlobal && thread_mode == cudaStreamCaptureModeGlobal;
}

/* For a potentially unsafe call: cudaErrorStreamCaptureUnsupported, with the captures that forbid
 * it invalidated, or cudaSuccess. */
cudaError_t glia_emu_unsafe(const char *call)
{
    GLIA_EMU_GUARD;
    bool hit = false;
    for (struct capture *c = captures; c; c = c->next)
        if (forbids(c)) {
            invalidate(c, call);
            hit = true;
        }
    return hit ? set_error(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

/* Whether a stream made without cudaStreamNonBlocking takes part in c (the legacy default stream
 * would then depend on captured work). */
static bool blocks_legacy(const struct capture *c)
{
    for (int i = 0; i < c->n; i++)
        if (c->member[i] && !(c->member[i]->flags & cudaStreamNonBlocking)) return true;
    return false;
}

/* For a use of the legacy default stream: cudaErrorStreamCaptureImplicit, with the captures of
 * blocking streams invalidated, or cudaSuccess. */
static cudaError_t legacy_check(const char *call)
{
    bool hit = false;
    for (struct capture *c = captures; c; c = c->next)
        if (blocks_legacy(c)) {
            invalidate(c, call);
            hit = true;
        }
    return hit ? set_error(cudaErrorStreamCaptureImplicit) : cudaSuccess;
}

/* For a call that waits for stream s: cudaErrorStreamCaptureUnsupported, with its capture
 * invalidated, when s captures; for the legacy stream (NULL) as legacy_check. */
static cudaError_t sync_check(struct emu_stream *s, const char *call)
{
    if (!s) return legacy_check(call);
    if (!s->cap) return cudaSuccess;
    invalidate(s->cap, call);
    return set_error(cudaErrorStreamCaptureUnsupported);
}

/* Makes s take part in c, following what clock says (NULL: nothing). What s had queued runs
 * first: it is no part of the capture. */
static int capture_join(struct capture *c, struct emu_stream *s, const unsigned long long *clock)
{
    if (c->n == CAP_MEMBERS) return -1;
    flush(s, s->queued);
    s->cap = c;
    s->member = c->n;
    c->member[c->n] = s;
    if (clock) memcpy(c->clock[c->n], clock, sizeof c->clock[0]);
    c->n++;
    return 0;
}

/* Ends c: its streams run their work again; its graph is the caller's. */
static void capture_end(struct capture *c)
{
    for (int i = 0; i < c->n; i++)
        if (c->member[i]) c->member[i]->cap = NULL;
    for (struct capture **p = &captures; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    free(c);
}

/* The first stream of c whose last captured operation c's first stream does not follow (forked
 * and never joined back), or -1. */
static int unjoined(const struct capture *c)
{
    for (int j = 1; j < c->n; j++)
        if (c->clock[0][j] < c->clock[j][j]) return j;
    return -1;
}

/* Records o into the capture s takes part in. */
static cudaError_t capture_op(struct emu_stream *s, struct op *o)
{
    struct capture *c = s->cap;
    if (!c->invalid && oplist_append(c->graph->ops, o)) invalidate(c, "running out of memory");
    if (c->invalid) {
        release(o);
        return set_error(cudaErrorStreamCaptureInvalidated);
    }
    c->clock[s->member][s->member]++;
    return ret();
}

/* ---- submitting work ---- */

void glia_emu_flush_stream(cudaStream_t st)
{
    GLIA_EMU_GUARD;
    struct emu_stream *s = stream_of(st);
    if (s) flush(s, s->queued);
    else flush_all();
}

/* Runs what is queued on stream s (every stream for NULL) as the host waiting for it would:
 * cudaErrorStreamCaptureUnsupported, and the capture invalidated, when s captures. */
cudaError_t glia_emu_host_sync(cudaStream_t st, const char *call)
{
    GLIA_EMU_GUARD;
    struct emu_stream *s = stream_of(st);
    cudaError_t e = sync_check(s, call);
    if (e) return e;
    if (s) flush(s, s->queued);
    else flush_all();
    return ret();
}

/* Queues o on s (the default stream, NULL, runs at once after every other stream), or records it
 * when s captures. o's argument block is given up on failure. */
static cudaError_t submit(cudaStream_t st, struct op o)
{
    struct emu_stream *s = stream_of(st);
    if (!s) {
        cudaError_t e = legacy_check("work on the legacy default stream");
        if (e) {
            release(&o);
            return e;
        }
        flush_all();
        run_op(&o);
        return ret();
    }
    if (s->cap) return capture_op(s, &o);
    struct op *q = malloc(sizeof *q);
    if (!q) {
        release(&o);
        return cudaErrorMemoryAllocation;
    }
    *q = o;
    q->next = NULL;
    if (s->tail) s->tail->next = q;
    else s->head = q;
    s->tail = q;
    s->queued++;
    if (!deferring(s)) flush(s, s->queued);
    return ret();
}

cudaError_t glia_emu_submit(const char *name, dim3 g, dim3 b, size_t smem, cudaStream_t s, void (*fn)(void *), void *arg,
                            void (*drop)(void *))
{
    GLIA_EMU_GUARD;
    return submit(s, (struct op){.kind = OP_KERNEL, .name = name, .g = g, .b = b, .smem = smem, .fn = fn, .arg = arg, .drop = drop});
}

cudaError_t glia_emu_submit_host(const char *name, cudaStream_t s, void (*fn)(void *), void *arg, void (*drop)(void *))
{
    return glia_emu_submit(name, (dim3){1, 1, 1}, (dim3){1, 1, 1}, 0, s, fn, arg, drop);
}

bool glia_emu_is_device(const void *p, size_t n)
{
    GLIA_EMU_GUARD;
    const struct range *r = range_of(p);
    return r && r->kind == M_DEVICE && n <= (size_t)(r->p + r->n - (const char *)p);
}

unsigned long glia_emu_graphs_alive(void)
{
    GLIA_EMU_GUARD;
    return n_oplists;
}

/* ---- memory ---- */

cudaError_t cudaMalloc(void **p, size_t n)
{
    GLIA_EMU_GUARD;
    cudaError_t e = glia_emu_unsafe("cudaMalloc");
    if (e) return e;
    *p = no_compute() ? calloc(1, n ? n : 1) : malloc(n ? n : 1);  /* zeros: no flag a kernel did not set reads set */
    if (*p && track(*p, n ? n : 1, M_DEVICE)) {
        free(*p);
        *p = NULL;
    }
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p)
{
    GLIA_EMU_GUARD;
    cudaError_t e = glia_emu_unsafe("cudaFree");
    if (e) return e;
    flush_all();  /* cudaFree waits for the device */
    untrack(p);
    free(p);
    return ret();
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags)
{
    GLIA_EMU_GUARD;
    (void)flags;
    cudaError_t e = glia_emu_unsafe("cudaHostAlloc");
    if (e) return e;
    *p = malloc(n ? n : 1);
    if (*p && track(*p, n ? n : 1, M_PINNED)) {
        free(*p);
        *p = NULL;
    }
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaMallocHost(void **p, size_t n) { return cudaHostAlloc(p, n, 0); }
cudaError_t cudaFreeHost(void *p)
{
    GLIA_EMU_GUARD;
    cudaError_t e = glia_emu_unsafe("cudaFreeHost");
    if (e) return e;
    flush_all();
    untrack(p);
    free(p);
    return ret();
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t st)
{
    GLIA_EMU_GUARD;
    (void)k;
    if (!n) return ret();
    /* between the device and pageable host memory CUDA copies synchronously: no capture can hold it */
    int kd = kind_of(dst), ks = kind_of(src);
    if ((kd == M_DEVICE && !ks) || (ks == M_DEVICE && !kd)) {
        cudaError_t e = glia_emu_host_sync(st, "cudaMemcpyAsync between device and pageable host memory");
        if (e) return e;
        memmove(dst, src, n);
        return ret();
    }
    return submit(st, (struct op){.kind = OP_COPY, .dst = dst, .src = src, .n = n});
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k)
{
    GLIA_EMU_GUARD;
    (void)k;
    cudaError_t e = glia_emu_unsafe("cudaMemcpy");
    if (e || (e = legacy_check("cudaMemcpy"))) return e;
    flush_all();
    memmove(dst, src, n);
    return ret();
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    GLIA_EMU_GUARD;
    return submit(s, (struct op){.kind = OP_SET, .dst = p, .value = v, .n = n});
}
cudaError_t cudaMemset(void *p, int v, size_t n)
{
    GLIA_EMU_GUARD;
    cudaError_t e = glia_emu_unsafe("cudaMemset");
    if (e || (e = legacy_check("cudaMemset"))) return e;
    flush_all();
    memset(p, v, n);
    return ret();
}

/* ---- streams ---- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned int flags)
{
    GLIA_EMU_GUARD;
    struct emu_stream *s = calloc(1, sizeof *s);
    if (!s) return cudaErrorMemoryAllocation;
    s->index = n_streams_made++;
    s->flags = flags;
    s->next_stream = streams;
    streams = s;
    *st = (cudaStream_t)(void *)s;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }

/* A capturing stream being destroyed: its capture is invalidated, and abandoned when it began it. */
static void leave_capture(struct emu_stream *s)
{
    struct capture *c = s->cap;
    invalidate(c, "cudaStreamDestroy of a capturing stream");
    if (s->member) {
        c->member[s->member] = NULL;
        return;
    }
    graph_free(c->graph);
    capture_end(c);
}

cudaError_t cudaStreamDestroy(cudaStream_t st)
{
    GLIA_EMU_GUARD;
    struct emu_stream *s = stream_of(st);
    if (!s) return cudaErrorInvalidResourceHandle;
    if (s->cap) leave_capture(s);
    flush(s, s->queued);  /* queued work still completes */
    for (struct emu_stream **p = &streams; *p; p = &(*p)->next_stream)
        if (*p == s) {
            *p = s->next_stream;
            break;
        }
    /* kept, not freed: events recorded on it and other streams' queued waits on them may still
     * point at it, and find all its work done */
    s->next_stream = destroyed;
    destroyed = s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t st)
{
    return glia_emu_host_sync(st, "cudaStreamSynchronize");
}
cudaError_t cudaStreamQuery(cudaStream_t st)
{
    GLIA_EMU_GUARD;
    struct emu_stream *s = stream_of(st);
    cudaError_t e = sync_check(s, "cudaStreamQuery");
    if (e) return e;
    if (!s) {
        flush_all();
        return ret();
    }
    if (s->done < s->queued) flush(s, s->done + 1);  /* the device moves on while the host polls */
    return s->done >= s->queued ? ret() : cudaErrorNotReady;
}

/* s (NULL: the legacy stream) waits on e, last recorded inside a capture. */
static cudaError_t wait_captured(struct emu_stream *s, const struct emu_event *e)
{
    struct capture *c = capture_find(e->cap_id);
    if (!c) {
        fprintf(stderr, "emu: cudaStreamWaitEvent on an event last recorded in a capture that has ended\n");
        if (!s || !s->cap) return set_error(cudaErrorCapturedEvent);
        invalidate(s->cap, "cudaStreamWaitEvent on an event of an ended capture");
        return set_error(cudaErrorStreamCaptureIsolation);
    }
    if (!s) {
        invalidate(c, "the legacy default stream waiting on an event recorded in a capture");
        return set_error(cudaErrorStreamCaptureImplicit);
    }
    if (s->cap && s->cap != c) {
        invalidate(s->cap, "cudaStreamWaitEvent between two captures");
        invalidate(c, "cudaStreamWaitEvent between two captures");
        return set_error(cudaErrorStreamCaptureMerge);
    }
    if (!s->cap && capture_join(c, s, e->clock)) {
        invalidate(c, "a stream joining a capture that has as many streams as the emulation allows");
        return set_error(cudaErrorStreamCaptureUnsupported);
    }
    unsigned long long *clock = c->clock[s->member];
    for (int j = 0; j < CAP_MEMBERS; j++)
        if (e->clock[j] > clock[j]) clock[j] = e->clock[j];
    return c->invalid ? set_error(cudaErrorStreamCaptureInvalidated) : ret();
}

/* Stream st (not capturing) waits for what e was last recorded after, outside a capture. */
static cudaError_t wait_now(cudaStream_t st, const struct emu_event *e)
{
    if (e->cap_id || !e->s) return ret();
    return submit(st, (struct op){.kind = OP_WAIT, .other = e->s, .upto = e->at});
}

cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned int flags)
{
    GLIA_EMU_GUARD;
    struct emu_event *e = (struct emu_event *)(void *)ev;
    struct emu_stream *s = stream_of(st);
    if (flags & ~(unsigned)cudaEventWaitExternal) return set_error(cudaErrorInvalidValue);
    if (s && s->cap && (flags & cudaEventWaitExternal))  /* a node of the graph: each launch waits then */
        return capture_op(s, &(struct op){.kind = OP_EVENT_WAIT, .event = e});
    if (e->cap_id) return wait_captured(s, e);
    if (s && s->cap) {
        if (!e->recorded) return ret();  /* a never recorded event is no dependency */
        invalidate(s->cap, "cudaStreamWaitEvent on an event recorded outside the capture");
        return set_error(cudaErrorStreamCaptureIsolation);
    }
    return wait_now(st, e);
}
cudaError_t cudaDeviceSynchronize(void)
{
    GLIA_EMU_GUARD;
    cudaError_t e = glia_emu_unsafe("cudaDeviceSynchronize");
    if (e) return e;
    flush_all();
    return ret();
}

/* ---- capture and graphs ---- */

cudaError_t cudaStreamBeginCapture(cudaStream_t st, enum cudaStreamCaptureMode mode)
{
    GLIA_EMU_GUARD;
    struct emu_stream *s = stream_of(st);
    if (!s) return set_error(cudaErrorStreamCaptureUnsupported);  /* not the legacy stream */
    if (s->cap) return set_error(cudaErrorIllegalState);
    if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal && mode != cudaStreamCaptureModeRelaxed)
        return set_error(cudaErrorInvalidValue);
    struct capture *c = calloc(1, sizeof *c);
    struct oplist *l = c ? oplist_new() : NULL;
    struct emu_graph *g = l ? graph_new(GRAPH_MAGIC, l) : NULL;
    if (!g) {
        if (l) oplist_unref(l);
        free(c);
        return set_error(cudaErrorMemoryAllocation);
    }
    c->id = ++n_captures;
    c->mode = mode;
    c->thread = pthread_self();
    c->graph = g;
    capture_join(c, s, NULL);
    c->next = captures;
    captures = c;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *graph)
{
    GLIA_EMU_GUARD;
    struct emu_stream *s = stream_of(st);
    if (!graph) return set_error(cudaErrorInvalidValue);
    if (!s || !s->cap) return set_error(cudaErrorIllegalState);
    struct capture *c = s->cap;
    if (s->member) {
        invalidate(c, "cudaStreamEndCapture on a stream that did not begin the capture");
        return set_error(cudaErrorStreamCaptureUnmatched);
    }
    int j = unjoined(c);
    if (j >= 0 && !c->invalid)
        fprintf(stderr, "emu: cudaStreamEndCapture: stream %d forked from capture %llu and was never joined back\n",
                c->member[j] ? c->member[j]->index : -1, c->id);
    if (getenv("GLIA_EMU_FAIL_CAPTURE") && !c->invalid)  /* tests: a capture that something spoilt */
        invalidate(c, "GLIA_EMU_FAIL_CAPTURE is set");
    cudaError_t e = c->invalid ? cudaErrorStreamCaptureInvalidated : j >= 0 ? cudaErrorStreamCaptureUnjoined : cudaSuccess;
    struct emu_graph *g = c->graph;
    capture_end(c);
    *graph = NULL;
    if (e) {
        graph_free(g);
        return set_error(e);
    }
    *graph = (cudaGraph_t)(void *)g;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t st, enum cudaStreamCaptureStatus *status)
{
    GLIA_EMU_GUARD;
    struct emu_stream *s = stream_of(st);
    if (!status) return set_error(cudaErrorInvalidValue);
    *status = cudaStreamCaptureStatusNone;
    if (!s) {
        for (struct capture *c = captures; c; c = c->next)
            if (blocks_legacy(c)) return set_error(cudaErrorStreamCaptureImplicit);  /* not invalidated */
        return cudaSuccess;
    }
    if (s->cap) *status = s->cap->invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

/* The capture's status, id and graph; no dependency nodes (the emulation's graphs have none). */
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t st, enum cudaStreamCaptureStatus *status, unsigned long long *id,
                                     cudaGraph_t *graph, const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                     size_t *n_deps)
{
    GLIA_EMU_GUARD;
    cudaError_t e = cudaStreamIsCapturing(st, status);
    if (e || *status != cudaStreamCaptureStatusActive) return e;
    const struct capture *c = stream_of(st)->cap;
    if (id) *id = c->id;
    if (graph) *graph = (cudaGraph_t)(void *)c->graph;
    if (deps) *deps = NULL;
    if (edges) *edges = NULL;
    if (n_deps) *n_deps = 0;
    return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    GLIA_EMU_GUARD;
    if (!mode || (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
                  *mode != cudaStreamCaptureModeRelaxed))
        return set_error(cudaErrorInvalidValue);
    enum cudaStreamCaptureMode old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return cudaSuccess;
}

/* Whether g is the graph of a capture still under way (not to be instantiated or destroyed). */
static bool capturing_into(const struct emu_graph *g)
{
    for (struct capture *c = captures; c; c = c->next)
        if (c->graph == g) return true;
    return false;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
    GLIA_EMU_GUARD;
    (void)flags;
    struct emu_graph *g = as_graph(graph, GRAPH_MAGIC);
    if (!exec || !g || capturing_into(g)) return set_error(cudaErrorInvalidValue);
    struct emu_graph *x = graph_new(EXEC_MAGIC, g->ops);
    if (!x) return set_error(cudaErrorMemoryAllocation);
    g->ops->refs++;
    *exec = (cudaGraphExec_t)(void *)x;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
    return cudaGraphInstantiate(exec, graph, flags);
}

static cudaError_t record_now(struct emu_event *e, struct emu_stream *s);

/* Submits l's operation o to stream st again, as a launch of the graph does: an external event
 * record or wait is done now, in its place (or stays one in a graph st is capturing); the others
 * are queued holding a reference to the list that owns their argument block. */
static cudaError_t replay(struct oplist *l, const struct op *o, cudaStream_t st)
{
    struct emu_stream *s = stream_of(st);
    if (o->kind == OP_RECORD || o->kind == OP_EVENT_WAIT) {
        struct op q = *o;
        if (s && s->cap) return capture_op(s, &q);
        return o->kind == OP_RECORD ? record_now(o->event, s) : wait_now(st, o->event);
    }
    struct op q = *o;
    if (!q.owner) q.owner = l;
    q.owner->refs++;
    return submit(st, q);
}

/* Queues each of the graph's operations on the stream in order, as if submitted again now. */
/* Nothing to upload here: checks the graph only (a launch on st runs it). */
cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t st)
{
    GLIA_EMU_GUARD;
    (void)st;
    return as_graph(exec, EXEC_MAGIC) ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t st)
{
    GLIA_EMU_GUARD;
    struct emu_graph *x = as_graph(exec, EXEC_MAGIC);
    if (!x) return set_error(cudaErrorInvalidResourceHandle);
    struct oplist *l = x->ops;
    n_graph_launches++;
    for (size_t i = 0; i < l->n; i++) {
        cudaError_t e = replay(l, &l->ops[i], st);
        if (e) return e;
    }
    return ret();
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    GLIA_EMU_GUARD;
    struct emu_graph *x = as_graph(exec, EXEC_MAGIC);
    if (!x) return set_error(cudaErrorInvalidValue);
    graph_free(x);  /* queued launches keep their operations alive */
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    GLIA_EMU_GUARD;
    struct emu_graph *g = as_graph(graph, GRAPH_MAGIC);
    if (!g || capturing_into(g)) return set_error(cudaErrorInvalidValue);
    graph_free(g);
    return cudaSuccess;
}

/* ---- events ---- */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags)
{
    GLIA_EMU_GUARD;
    (void)flags;
    struct emu_event *e = calloc(1, sizeof *e);
    if (!e) return cudaErrorMemoryAllocation;
    *ev = (cudaEvent_t)(void *)e;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    GLIA_EMU_GUARD;
    free(e);
    return cudaSuccess;
}
/* The simulated clock (emu.h). */
static double sim_ms;
void glia_emu_sim_advance(double ms)
{
    GLIA_EMU_GUARD;
    sim_ms += ms;
}

/* e marks what stream s (not capturing; NULL: the legacy stream) has been given so far. */
static cudaError_t record_now(struct emu_event *e, struct emu_stream *s)
{
    if (!s) {
        cudaError_t r = legacy_check("cudaEventRecord on the legacy default stream");
        if (r) return r;
        flush_all();
    }
    *e = (struct emu_event){.s = s, .at = s ? s->queued : 0, .recorded = true, .sim = sim_ms};
    return ret();
}

/* cudaEventRecordExternal in a capture: a node of the graph, recording e at each launch (e itself
 * is left as it was); outside one, a plain record. */
cudaError_t cudaEventRecordWithFlags(cudaEvent_t ev, cudaStream_t st, unsigned int flags)
{
    GLIA_EMU_GUARD;
    struct emu_event *e = (struct emu_event *)(void *)ev;
    struct emu_stream *s = stream_of(st);
    if (flags & ~(unsigned)cudaEventRecordExternal) return set_error(cudaErrorInvalidValue);
    if (!s || !s->cap) return record_now(e, s);
    if (flags & cudaEventRecordExternal) return capture_op(s, &(struct op){.kind = OP_RECORD, .event = e});
    /* it marks the capture's progress: usable only by waits inside the capture */
    *e = (struct emu_event){.recorded = true, .cap_id = s->cap->id};
    memcpy(e->clock, s->cap->clock[s->member], sizeof e->clock);
    return s->cap->invalid ? set_error(cudaErrorStreamCaptureInvalidated) : ret();
}
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st) { return cudaEventRecordWithFlags(ev, st, 0); }

/* A host wait on, or query of, e, last recorded inside a capture: cudaErrorCapturedEvent, in any
 * capture mode, and the capture invalidated if still under way. */
static cudaError_t captured_event(const struct emu_event *e, const char *call)
{
    struct capture *c = capture_find(e->cap_id);
    if (c) invalidate(c, call);
    else fprintf(stderr, "emu: %s of an event last recorded inside a stream capture\n", call);
    return set_error(cudaErrorCapturedEvent);
}

/* Whether the host may look at e now: cudaEventQuery and cudaEventSynchronize are among the calls a
 * global capture forbids (even on an event recorded outside it), and an event last recorded inside
 * a capture never tells the host anything. */
static cudaError_t event_check(const struct emu_event *e, const char *call)
{
    cudaError_t r = glia_emu_unsafe(call);
    if (r) return r;
    return e->cap_id ? captured_event(e, call) : cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t ev)
{
    GLIA_EMU_GUARD;
    struct emu_event *e = (struct emu_event *)(void *)ev;
    cudaError_t r = event_check(e, "cudaEventQuery");
    if (r) return r;
    if (!e->s || e->s->done >= e->at) return ret();
    flush(e->s, e->s->done + 1);  /* the device moves on while the host polls */
    return e->s->done >= e->at ? ret() : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
    GLIA_EMU_GUARD;
    struct emu_event *e = (struct emu_event *)(void *)ev;
    cudaError_t r = event_check(e, "cudaEventSynchronize");
    if (r) return r;
    if (e->s) flush(e->s, e->at);
    return ret();
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    GLIA_EMU_GUARD;
    const struct emu_event *ea = (const struct emu_event *)(void *)a, *eb = (const struct emu_event *)(void *)b;
    *ms = ea->recorded && eb->recorded && !ea->cap_id && !eb->cap_id ? (float)(eb->sim - ea->sim) : 0.0f;
    return ret();
}

__attribute__((destructor)) static void report(void)
{
    if (getenv("GLIA_EMU_STATS"))
        fprintf(stderr, "emu: %llu launches, %llu threads, %llu graph launches\n", n_launches, n_threads_run, n_graph_launches);
}
