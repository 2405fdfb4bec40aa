/* backends/cuda/cache.h — a caching allocator over any raw allocator (cudaMalloc for the CUDA
 * backend, malloc in its tests): freed blocks are kept by size class and handed out again, so a
 * training step allocates nothing from the driver after warm-up. Not thread-safe by itself (the
 * backend locks around it) and not a splitting allocator: a block serves requests of its class. */
#ifndef GLIA_CUDA_CACHE_H
#define GLIA_CUDA_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Raw allocator: 0 and *p on success, nonzero when out of memory. */
typedef int (*glia__raw_alloc_fn)(void *user, size_t nbytes, void **p);
typedef void (*glia__raw_free_fn)(void *user, void *p);

struct glia__cache_stats {
    size_t current;           /* bytes handed out and not yet released (class sizes) */
    size_t peak;              /* largest `current` so far */
    size_t reserved;          /* bytes held from the raw allocator (in use + cached) */
    size_t peak_reserved;     /* largest `reserved` so far */
    uint64_t allocs;          /* glia__cache_alloc calls that succeeded */
    uint64_t hits;            /* ... served from the cache */
    uint64_t raw_allocs;      /* raw allocator calls that succeeded */
    uint64_t raw_frees;       /* blocks given back to the raw allocator */
};

struct glia__cache;

/* A new cache over (ra, rf, user); NULL when out of host memory. (owned) */
struct glia__cache *glia__cache_new(glia__raw_alloc_fn ra, glia__raw_free_fn rf, void *user);
/* Give every block back to the raw allocator (also those still in use) and free the cache. */
void glia__cache_free(struct glia__cache *c);
/* The class size that a request of nbytes gets: 512-byte steps up to 1 MiB, then eight
 * steps per power of two (at most 12.5% slack). */
size_t glia__cache_class(size_t nbytes);
/* A block of at least nbytes: a cached one of the same class, else a raw one; when the raw
 * allocator fails, the cached blocks are given back and it is tried once more (not during a
 * capture). 0 on success. */
int glia__cache_alloc(struct glia__cache *c, size_t nbytes, void **p);
/* Return a block from glia__cache_alloc to the cache. 0, or -1 when p is not a block in use. */
int glia__cache_release(struct glia__cache *c, void *p);
/* Give a block from glia__cache_alloc straight back to the raw allocator, not to the cache (a
 * large block used once). 0, or -1 when p is not a block in use. */
int glia__cache_give_back(struct glia__cache *c, void *p);
/* Give the cached (free) blocks back to the raw allocator (not those held for a graph). */
void glia__cache_trim(struct glia__cache *c);
/* CUDA graphs: the blocks in use when a capture begins, and those handed out during it, are
 * pinned: a graph made from the capture may use them at every replay. While any graph lives, a
 * pinned block that is released is held (neither handed out again nor given back) instead of
 * cached; once the last graph is freed, the pins go and held blocks are cached blocks again.
 * During a capture nothing goes back to the raw allocator (cudaFree would end the capture):
 * give_back caches the block and trim does nothing. capture_end says whether the capture made a
 * graph (one more live graph); one that made none unpins what it pinned. */
void glia__cache_capture_begin(struct glia__cache *c);
void glia__cache_capture_end(struct glia__cache *c, bool made);
void glia__cache_graph_freed(struct glia__cache *c);
/* Whether a capture is under way (between capture_begin and capture_end). */
bool glia__cache_capturing(const struct glia__cache *c);
void glia__cache_get_stats(const struct glia__cache *c, struct glia__cache_stats *s);

#endif
