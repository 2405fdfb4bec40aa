/* backends/cuda/cache.c — the caching allocator of cache.h: one array of blocks, each in use or
 * cached, looked up linearly (a model holds a few hundred). Not device code: it never touches
 * the memory it manages, so it is tested on the host with malloc. */
#include "cache.h"
#include <stdbool.h>
#include <stdlib.h>

struct block {
    void *ptr;
    size_t size;   /* class size */
    bool in_use;
    bool pinned;   /* in use during a capture: a live graph may read or write it */
    bool fresh;    /* pinned by the capture under way (unpinned again if it makes no graph) */
};

struct glia__cache {
    glia__raw_alloc_fn ra;
    glia__raw_free_fn rf;
    void *user;
    struct block *b;
    size_t n, cap;
    struct glia__cache_stats st;
    bool capturing;
    int graphs;    /* live graphs: while there are any, a pinned block out of use is held, not handed out */
};

/* During a capture, block k (in use) is pinned; fresh when this capture pinned it. */
static void pin(struct glia__cache *c, struct block *k)
{
    if (!c->capturing || k->pinned) return;
    k->pinned = k->fresh = true;
}

/* Whether block k is out of use but kept for a live graph. */
static bool held(const struct glia__cache *c, const struct block *k) { return !k->in_use && k->pinned && c->graphs > 0; }

struct glia__cache *glia__cache_new(glia__raw_alloc_fn ra, glia__raw_free_fn rf, void *user)
{
    struct glia__cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ra = ra;
    c->rf = rf;
    c->user = user;
    return c;
}

void glia__cache_free(struct glia__cache *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) c->rf(c->user, c->b[i].ptr);
    free(c->b);
    free(c);
}

size_t glia__cache_class(size_t nbytes)
{
    if (nbytes == 0) nbytes = 1;
    if (nbytes <= (1u << 20)) return (nbytes + 511) & ~(size_t)511;
    size_t top = (size_t)1 << 20;
    while (top * 2 < nbytes) top *= 2;  /* top < nbytes <= 2 top */
    size_t step = top / 8;
    return (nbytes + step - 1) / step * step;
}

void glia__cache_trim(struct glia__cache *c)
{
    if (c->capturing) return;  /* a raw free would end the capture */
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (c->b[i].in_use || held(c, &c->b[i])) {
            c->b[k++] = c->b[i];
            continue;
        }
        c->rf(c->user, c->b[i].ptr);
        c->st.reserved -= c->b[i].size;
        c->st.raw_frees++;
    }
    c->n = k;
}

int glia__cache_alloc(struct glia__cache *c, size_t nbytes, void **p)
{
    size_t size = glia__cache_class(nbytes);
    for (size_t i = 0; i < c->n; i++)
        if (!c->b[i].in_use && c->b[i].size == size && !held(c, &c->b[i])) {
            c->b[i].in_use = true;
            pin(c, &c->b[i]);
            c->st.hits++;
            *p = c->b[i].ptr;
            goto done;
        }
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        struct block *nb = realloc(c->b, cap * sizeof *nb);
        if (!nb) return -1;
        c->b = nb;
        c->cap = cap;
    }
    if (c->ra(c->user, size, p)) {
        if (c->capturing) return -1;
        glia__cache_trim(c);  /* cached blocks of other classes may be what the device lacks */
        if (c->ra(c->user, size, p)) return -1;
    }
    c->b[c->n++] = (struct block){*p, size, true, false, false};
    pin(c, &c->b[c->n - 1]);
    c->st.raw_allocs++;
    c->st.reserved += size;
    if (c->st.reserved > c->st.peak_reserved) c->st.peak_reserved = c->st.reserved;
done:
    c->st.allocs++;
    c->st.current += size;
    if (c->st.current > c->st.peak) c->st.peak = c->st.current;
    return 0;
}

/* The block in use at p, or NULL; no longer in use when found (its bytes leave `current`). */
static struct block *take_back(struct glia__cache *c, void *p)
{
    for (size_t i = c->n; i-- > 0;)
        if (c->b[i].ptr == p && c->b[i].in_use) {
            c->b[i].in_use = false;
            c->st.current -= c->b[i].size;
            return &c->b[i];
        }
    return NULL;
}

int glia__cache_release(struct glia__cache *c, void *p) { return take_back(c, p) ? 0 : -1; }

int glia__cache_give_back(struct glia__cache *c, void *p)
{
    struct block *k = take_back(c, p);
    if (!k) return -1;
    if (held(c, k) || c->capturing) return 0;  /* given back with the last graph, or cached */
    c->rf(c->user, p);
    c->st.reserved -= k->size;
    c->st.raw_frees++;
    *k = c->b[--c->n];
    return 0;
}

void glia__cache_capture_begin(struct glia__cache *c)
{
    c->capturing = true;
    for (size_t i = 0; i < c->n; i++)
        if (c->b[i].in_use) pin(c, &c->b[i]);
}

void glia__cache_capture_end(struct glia__cache *c, bool made)
{
    c->capturing = false;
    c->graphs += made;
    for (size_t i = 0; i < c->n; i++) {
        if (!made && c->b[i].fresh) c->b[i].pinned = false;  /* no graph uses it */
        c->b[i].fresh = false;
    }
}

void glia__cache_graph_freed(struct glia__cache *c)
{
    if (c->graphs > 0 && --c->graphs == 0)
        for (size_t i = 0; i < c->n; i++) c->b[i].pinned = c->b[i].fresh;  /* a capture under way keeps its pins */
}

bool glia__cache_capturing(const struct glia__cache *c) { return c->capturing; }

void glia__cache_get_stats(const struct glia__cache *c, struct glia__cache_stats *s) { *s = c->st; }
