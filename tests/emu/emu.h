/* tests/emu/emu.h — what the emulation's C files share: the one lock around the emulated runtime and
 * libraries, and the stream calls emu_libs.c, emu_nccl.c and emu_jit.c make into emu_runtime.c. Not
 * seen by the backend's code, which calls the CUDA, cuDNN, cuBLASLt and NCCL APIs only. */
#ifndef GLIA_EMU_H
#define GLIA_EMU_H

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

/* The emulation is called from several host threads (the nccl transport's watchdog polls events
 * while its owner queues work) and a stream's queued work runs in whichever thread makes it run:
 * every entry point holds one recursive lock for its whole call. */
extern pthread_mutex_t glia_emu_mutex;
static inline void glia_emu_unlock_(pthread_mutex_t **m) { pthread_mutex_unlock(*m); }
#define GLIA_EMU_GUARD \
    pthread_mutex_t *glia_emu_guard_ __attribute__((cleanup(glia_emu_unlock_), unused)) = \
        (pthread_mutex_lock(&glia_emu_mutex), &glia_emu_mutex)

/* A count the tests read through dlsym (glia_emu_cudnn_*_runs and the like): its value, set back to 0 with reset. */
static inline long glia_emu_count_take(long *count, bool reset)
{
    long n = __atomic_load_n(count, __ATOMIC_RELAXED);
    if (reset) __atomic_store_n(count, 0, __ATOMIC_RELAXED);
    return n;
}

/* Runs what is queued on stream s (every stream for NULL), so that what the caller does next sees it. */
void glia_emu_flush_stream(cudaStream_t s);
/* Runs what is queued on stream s (every stream for NULL), as the host waiting for it in `call`
 * would: cudaErrorStreamCaptureUnsupported, and the capture invalidated, when s is capturing. */
cudaError_t glia_emu_host_sync(cudaStream_t s, const char *call);
/* For a call that a GPU refuses while a stream captures (in global mode, or in thread-local mode
 * from this thread; not if this thread is relaxed): cudaErrorStreamCaptureUnsupported, every such
 * capture invalidated; otherwise cudaSuccess. */
cudaError_t glia_emu_unsafe(const char *call);
/* Queues fn(arg) on stream s as a one-thread kernel named name, or records it into s's capture:
 * then fn runs once per launch of the graph, all with the same arg. drop(arg) once nothing needs
 * arg any more (at once when the call fails). Returns what submitting gave (an invalidated
 * capture's cudaErrorStreamCaptureInvalidated, or the sticky error). */
cudaError_t glia_emu_submit_host(const char *name, cudaStream_t s, void (*fn)(void *), void *arg, void (*drop)(void *));
/* Whether [p, p + n) lies inside one block of emulated device memory. */
bool glia_emu_is_device(const void *p, size_t n);
/* How many graphs (captures under way, graphs, execs and launches still queued) are alive: their
 * kernels must stay loaded. */
unsigned long glia_emu_graphs_alive(void);
/* The largest workspace (bytes) handed to a cuDNN convolution or Find*Ex since the last call with reset (tests
 * look it up with dlsym: it exists in the emulator only). */
size_t glia_emu_cudnn_workspace_seen(bool reset);
/* Convolutions run through cuDNN's graph API (emu_cudnn_graph.c) since the last reset; for tests, through dlsym. */
long glia_emu_cudnn_conv_graph_runs(bool reset);
/* Graphs run that hold a convolution forward and other operations (a fused convolution) since the last reset. */
long glia_emu_cudnn_fused_conv_runs(bool reset);
/* cublasLtMatmul calls with the DGELU epilogue since the last reset; for tests, through dlsym. */
long glia_emu_lt_dgelu_runs(bool reset);
/* Moves the simulated clock that events read on by ms: cudaEventElapsedTime gives the simulated time queued between
 * two records (work that says what it would take: the convolution graphs of emu_cudnn_graph.c; everything else
 * takes none). One clock for every stream: the callers that time work time one stream at a time. */
void glia_emu_sim_advance(double ms);
/* The stream a cuDNN handle computes on (emu_libs.c), for the graph API's executions (emu_cudnn_graph.c). */
struct cudnnContext;
cudaStream_t glia_emu_cudnn_stream(struct cudnnContext *h);

#endif
