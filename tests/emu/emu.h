/* tests/emu/emu.h — what the emulation's C files share: the one lock around the emulated runtime and
 * libraries, and the stream calls emu_libs.c and emu_nccl.c make into emu_runtime.c. Not seen by the
 * backend's code, which calls the CUDA, cuDNN, cuBLASLt and NCCL APIs only. */
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

/* Runs what is queued on stream s (every stream for NULL), so that a library call computing now sees it. */
void glia_emu_flush_stream(cudaStream_t s);
/* Queues fn(arg) on stream s as a one-thread kernel named name; drop(arg) once it has run. */
void glia_emu_submit_host(const char *name, cudaStream_t s, void (*fn)(void *), void *arg, void (*drop)(void *));
/* Whether [p, p + n) lies inside one block of emulated device memory. */
bool glia_emu_is_device(const void *p, size_t n);

#endif
