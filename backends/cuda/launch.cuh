/* backends/cuda/launch.cuh — the launch shape the backend's .cu files share: THREADS a block, and a
 * capped grid for grid-stride loops. Not a kernel and not a public header (its names are short). */
#ifndef GLIA_CUDA_LAUNCH_CUH
#define GLIA_CUDA_LAUNCH_CUH

#include <stdint.h>

#define THREADS 256
#define MAX_BLOCKS 65536  /* grid-stride loops cap their grid here and stride over the rest */

/* Blocks of THREADS for n items (at least 1, at most MAX_BLOCKS). */
static inline unsigned grid_for(int64_t n)
{
    int64_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > MAX_BLOCKS ? MAX_BLOCKS : b);
}

#endif
