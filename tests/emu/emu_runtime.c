/* tests/emu/emu_runtime.c — the CPU emulation of CUDA used by tests/emu/run.sh: the runtime calls the
 * backend makes (device memory is host memory, streams and events complete at once) and the kernel
 * runner (blocks one after another, a block's threads as fibers that switch at __syncthreads and warp
 * shuffles, a barrier no thread can reach reported as a deadlock). Not a GPU model: no timing, no
 * concurrency between streams, and a real GPU's ordering bugs do not show here. */
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

static void glia_emu_run(const char *name, dim3 g, dim3 b, size_t smem, void (*fn)(void *), void *arg)
{
    unsigned long long nt = (unsigned long long)b.x * b.y * b.z;
    if (!g.x || !g.y || !g.z || !nt || nt > EMU_MAX_THREADS || b.z > 64 || g.x > 0x7fffffffu || g.y > 65535 ||
        g.z > 65535 || smem > 48 * 1024) {
        fprintf(stderr, "emu: %s: invalid launch grid (%u,%u,%u) block (%u,%u,%u) smem %zu\n", name, g.x, g.y, g.z, b.x,
                b.y, b.z, smem);
        last_error = cudaErrorInvalidConfiguration;
        return;
    }
    if (!stacks) {
        stacks = mmap(NULL, EMU_MAX_THREADS * EMU_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                      -1, 0);
        if (stacks == MAP_FAILED) {
            perror("emu: mmap");
            abort();
        }
    }
    n_launches++;
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
    (void)a;
    (void)d;
    *v = 0;
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
 * when the host has to see it: a stream synchronization, an event synchronization, an event query (each query moves the
 * event's stream one operation on), a copy between device memory and pageable host memory (which
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

enum op_kind { OP_KERNEL, OP_COPY, OP_SET, OP_WAIT };
struct emu_stream;
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
    struct op *next;
};
struct emu_stream {
    int index;  /* in order of creation */
    struct op *head, *tail;
    unsigned long long queued, done;  /* operations queued and run so far */
    struct emu_stream *next_stream;
};
struct emu_event {
    struct emu_stream *s;  /* NULL: never recorded, or recorded on the default stream */
    unsigned long long at;
};
static struct emu_stream *streams;
static int n_streams_made, defer = -1;

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

static void flush(struct emu_stream *s, unsigned long long upto);

static void run_op(struct op *o)
{
    switch (o->kind) {
    case OP_KERNEL: glia_emu_run(o->name, o->g, o->b, o->smem, o->fn, o->arg); break;
    case OP_COPY: memmove(o->dst, o->src, o->n); break;
    case OP_SET: memset(o->dst, o->value, o->n); break;
    case OP_WAIT: flush(o->other, o->upto); break;
    }
    if (o->drop) o->drop(o->arg);
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

/* Runs what is queued on stream s (every stream for the default one): emu_libs.c's cuDNN and
 * cuBLASLt calls compute when called, in their stream's order. */
void glia_emu_flush_stream(cudaStream_t st)
{
    GLIA_EMU_GUARD;
    struct emu_stream *s = (struct emu_stream *)(void *)st;
    if (s) flush(s, s->queued);
    else flush_all();
}

/* Queues o on s (the default stream, NULL, runs at once after every other stream). */
static cudaError_t submit(cudaStream_t st, struct op o)
{
    struct emu_stream *s = (struct emu_stream *)(void *)st;
    if (!s) {
        flush_all();
        run_op(&o);
        return ret();
    }
    struct op *q = malloc(sizeof *q);
    if (!q) return cudaErrorMemoryAllocation;
    *q = o;
    q->next = NULL;
    if (s->tail) s->tail->next = q;
    else s->head = q;
    s->tail = q;
    s->queued++;
    if (!deferring(s)) flush(s, s->queued);
    return ret();
}

void glia_emu_submit(const char *name, dim3 g, dim3 b, size_t smem, cudaStream_t s, void (*fn)(void *), void *arg,
                     void (*drop)(void *))
{
    GLIA_EMU_GUARD;
    submit(s, (struct op){.kind = OP_KERNEL, .name = name, .g = g, .b = b, .smem = smem, .fn = fn, .arg = arg, .drop = drop});
}

void glia_emu_submit_host(const char *name, cudaStream_t s, void (*fn)(void *), void *arg, void (*drop)(void *))
{
    glia_emu_submit(name, (dim3){1, 1, 1}, (dim3){1, 1, 1}, 0, s, fn, arg, drop);
}

bool glia_emu_is_device(const void *p, size_t n)
{
    GLIA_EMU_GUARD;
    const struct range *r = range_of(p);
    return r && r->kind == M_DEVICE && n <= (size_t)(r->p + r->n - (const char *)p);
}

cudaError_t cudaMalloc(void **p, size_t n)
{
    GLIA_EMU_GUARD;
    *p = malloc(n ? n : 1);
    if (*p && track(*p, n ? n : 1, M_DEVICE)) {
        free(*p);
        *p = NULL;
    }
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p)
{
    GLIA_EMU_GUARD;
    flush_all();  /* cudaFree waits for the device */
    untrack(p);
    free(p);
    return ret();
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags)
{
    GLIA_EMU_GUARD;
    (void)flags;
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
    /* between the device and pageable host memory CUDA copies synchronously */
    int kd = kind_of(dst), ks = kind_of(src);
    if ((kd == M_DEVICE && !ks) || (ks == M_DEVICE && !kd)) {
        glia_emu_flush_stream(st);
        memmove(dst, src, n);
        return ret();
    }
    return submit(st, (struct op){.kind = OP_COPY, .dst = dst, .src = src, .n = n});
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k)
{
    GLIA_EMU_GUARD;
    flush_all();
    memmove(dst, src, n);
    (void)k;
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
    flush_all();
    memset(p, v, n);
    return ret();
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *st, unsigned int flags)
{
    GLIA_EMU_GUARD;
    (void)flags;
    struct emu_stream *s = calloc(1, sizeof *s);
    if (!s) return cudaErrorMemoryAllocation;
    s->index = n_streams_made++;
    s->next_stream = streams;
    streams = s;
    *st = (cudaStream_t)(void *)s;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t st)
{
    GLIA_EMU_GUARD;
    struct emu_stream *s = (struct emu_stream *)(void *)st;
    if (!s) return cudaErrorInvalidResourceHandle;
    flush(s, s->queued);  /* queued work still completes */
    for (struct emu_stream **p = &streams; *p; p = &(*p)->next_stream)
        if (*p == s) {
            *p = s->next_stream;
            break;
        }
    free(s);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t st)
{
    GLIA_EMU_GUARD;
    glia_emu_flush_stream(st);
    return ret();
}
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t ev, unsigned int flags)
{
    GLIA_EMU_GUARD;
    (void)flags;
    struct emu_event *e = (struct emu_event *)(void *)ev;
    if (!e->s) return ret();
    return submit(st, (struct op){.kind = OP_WAIT, .other = e->s, .upto = e->at});
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *st)
{
    GLIA_EMU_GUARD;
    (void)s;
    *st = cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void)
{
    GLIA_EMU_GUARD;
    flush_all();
    return ret();
}
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
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st)
{
    GLIA_EMU_GUARD;
    struct emu_event *e = (struct emu_event *)(void *)ev;
    struct emu_stream *s = (struct emu_stream *)(void *)st;
    if (!s) flush_all();
    e->s = s;
    e->at = s ? s->queued : 0;
    return ret();
}
cudaError_t cudaEventQuery(cudaEvent_t ev)
{
    GLIA_EMU_GUARD;
    struct emu_event *e = (struct emu_event *)(void *)ev;
    if (!e->s || e->s->done >= e->at) return ret();
    flush(e->s, e->s->done + 1);  /* the device moves on while the host polls */
    return e->s->done >= e->at ? ret() : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
    GLIA_EMU_GUARD;
    struct emu_event *e = (struct emu_event *)(void *)ev;
    if (e->s) flush(e->s, e->at);
    return ret();
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    GLIA_EMU_GUARD;
    (void)a;
    (void)b;
    *ms = 0.0f;
    return ret();
}

__attribute__((destructor)) static void report(void)
{
    if (getenv("GLIA_EMU_STATS"))
        fprintf(stderr, "emu: %llu launches, %llu threads\n", n_launches, n_threads_run);
}
