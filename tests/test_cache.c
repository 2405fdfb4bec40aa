/* tests/test_cache.c — the CUDA backend's caching allocator (backends/cuda/cache.c) over malloc:
 * size classes, reuse without raw allocations after warm-up, statistics, the retry after
 * giving cached blocks back when the raw allocator runs out, a block given straight back, and what
 * CUDA graphs hold (and that a capture frees nothing). Not device memory: runs anywhere. */
#include <stdlib.h>
#include "testutil.h"
#include "../backends/cuda/cache.h"

struct raw {
    size_t limit, held;   /* bytes the fake device has, bytes handed out */
    int live;             /* blocks not freed */
};

/* malloc with the size kept in front of the block, against a byte limit */
static int raw_alloc(void *user, size_t n, void **p)
{
    struct raw *r = user;
    if (r->held + n > r->limit) return 1;
    size_t *h = malloc(n + sizeof(size_t) * 2);
    if (!h) return 1;
    h[0] = n;
    *p = h + 2;
    r->held += n;
    r->live++;
    return 0;
}

static void raw_free(void *user, void *p)
{
    struct raw *r = user;
    size_t *h = (size_t *)p - 2;
    r->held -= h[0];
    r->live--;
    free(h);
}

static void test_classes(void)
{
    CU_ASSERT_EQUAL(glia__cache_class(0), 512);
    CU_ASSERT_EQUAL(glia__cache_class(1), 512);
    CU_ASSERT_EQUAL(glia__cache_class(512), 512);
    CU_ASSERT_EQUAL(glia__cache_class(513), 1024);
    CU_ASSERT_EQUAL(glia__cache_class(1 << 20), 1 << 20);
    CU_ASSERT_EQUAL(glia__cache_class((1 << 20) + 1), (1 << 20) + (1 << 17));  /* 1 MiB + 1/8 */
    CU_ASSERT_EQUAL(glia__cache_class(3u << 20), (3u << 20));
    CU_ASSERT_EQUAL(glia__cache_class((3u << 20) + 1), (3u << 20) + (1u << 18));
    for (size_t n = 1; n < (64u << 20); n = n * 3 + 7) {  /* never smaller, at most 12.5% + 512 B over */
        size_t c = glia__cache_class(n);
        CU_ASSERT(c >= n);
        CU_ASSERT(c <= n + n / 8 + 512);
    }
}

static void test_reuse_after_warmup(void)
{
    struct raw r = {1u << 30, 0, 0};
    struct glia__cache *c = glia__cache_new(raw_alloc, raw_free, &r);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    static const size_t sizes[] = {100, 4096, 4000, 3u << 20, 777777, 100};
    void *p[6];
    for (int step = 0; step < 5; step++) {  /* the same requests every step, like training */
        for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(glia__cache_alloc(c, sizes[i], &p[i]), 0);
        for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(glia__cache_release(c, p[i]), 0);
    }
    struct glia__cache_stats s;
    glia__cache_get_stats(c, &s);
    CU_ASSERT_EQUAL(s.raw_allocs, 6);     /* 4000 and 4096 share a class but are live together */
    CU_ASSERT_EQUAL(s.allocs, 30);
    CU_ASSERT_EQUAL(s.hits, 24);
    CU_ASSERT_EQUAL(s.current, 0);
    size_t sum = 0;
    for (int i = 0; i < 6; i++) sum += glia__cache_class(sizes[i]);
    CU_ASSERT_EQUAL(s.peak, sum);
    CU_ASSERT_EQUAL(s.reserved, sum);
    CU_ASSERT_EQUAL(glia__cache_release(c, p[0]), -1);  /* not in use any more */
    CU_ASSERT_EQUAL(glia__cache_release(c, &r), -1);    /* never a block */
    glia__cache_trim(c);
    glia__cache_get_stats(c, &s);
    CU_ASSERT_EQUAL(s.reserved, 0);
    CU_ASSERT_EQUAL(s.raw_frees, 6);
    CU_ASSERT_EQUAL(r.live, 0);
    glia__cache_free(c);
}

static void test_out_of_memory_trims_and_retries(void)
{
    struct raw r = {3 * 4096, 0, 0};
    struct glia__cache *c = glia__cache_new(raw_alloc, raw_free, &r);
    void *a, *b, *d;
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 4096, &a), 0);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 8192, &b), 0);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 512, &d), -1);   /* full, and nothing cached to give back */
    CU_ASSERT_EQUAL(glia__cache_release(c, b), 0);        /* cached: the fake device stays full */
    CU_ASSERT_EQUAL(r.held, 3 * 4096);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 1024, &d), 0);   /* the cached 8 KiB block goes back first */
    struct glia__cache_stats s;
    glia__cache_get_stats(c, &s);
    CU_ASSERT_EQUAL(s.raw_frees, 1);
    CU_ASSERT_EQUAL(s.reserved, 4096 + 1024);
    CU_ASSERT_EQUAL(r.held, 4096 + 1024);
    CU_ASSERT_EQUAL(s.current, 4096 + 1024);
    CU_ASSERT_EQUAL(s.peak, 4096 + 8192);
    glia__cache_free(c);                                   /* also the blocks still in use */
    CU_ASSERT_EQUAL(r.live, 0);
    CU_ASSERT_EQUAL(r.held, 0);
}

/* A block given back goes to the raw allocator, not to the cache; the cached blocks stay. */
static void test_give_back(void)
{
    struct raw r = {1u << 30, 0, 0};
    struct glia__cache *c = glia__cache_new(raw_alloc, raw_free, &r);
    void *big, *small, *other;
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 64u << 20, &big), 0);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 4096, &small), 0);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 8192, &other), 0);
    CU_ASSERT_EQUAL(glia__cache_release(c, other), 0);  /* cached */
    CU_ASSERT_EQUAL(glia__cache_give_back(c, big), 0);
    struct glia__cache_stats s;
    glia__cache_get_stats(c, &s);
    CU_ASSERT_EQUAL(r.held, 4096 + 8192);
    CU_ASSERT_EQUAL(r.live, 2);
    CU_ASSERT_EQUAL(s.current, 4096);
    CU_ASSERT_EQUAL(s.reserved, 4096 + 8192);
    CU_ASSERT_EQUAL(s.peak, (64u << 20) + 4096 + 8192);
    CU_ASSERT_EQUAL(s.raw_frees, 1);
    CU_ASSERT_EQUAL(glia__cache_give_back(c, big), -1);    /* gone */
    CU_ASSERT_EQUAL(glia__cache_give_back(c, other), -1);  /* cached, not in use */
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 8192, &big), 0);  /* the cached block still serves */
    CU_ASSERT_PTR_EQUAL(big, other);
    CU_ASSERT_EQUAL(glia__cache_give_back(c, small), 0);
    CU_ASSERT_EQUAL(glia__cache_release(c, big), 0);
    glia__cache_trim(c);
    CU_ASSERT_EQUAL(r.live, 0);
    glia__cache_get_stats(c, &s);
    CU_ASSERT_EQUAL(s.reserved, 0);
    CU_ASSERT_EQUAL(s.current, 0);
    glia__cache_free(c);
}

/* CUDA graphs: a block in use when a capture begins (old), or handed out during it (mid), is held
 * when released while a graph lives: not handed out again, not trimmed, not given back; a block
 * made after the capture is cached as usual. Once the last graph is freed, held blocks serve
 * requests again. A capture that made no graph holds nothing. */
static void test_graph_holds_pinned_blocks(void)
{
    struct raw r = {1u << 30, 0, 0};
    struct glia__cache *c = glia__cache_new(raw_alloc, raw_free, &r);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    void *old, *mid, *tmp, *late, *q;
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 4096, &old), 0);
    glia__cache_capture_begin(c);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 4096, &mid), 0);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 8192, &tmp), 0);
    CU_ASSERT_EQUAL(glia__cache_release(c, tmp), 0);  /* freed inside the capture: the graph's own order */
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 8192, &q), 0);
    CU_ASSERT_PTR_EQUAL(q, tmp);                      /* reused within the capture */
    glia__cache_capture_end(c, true);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 4096, &late), 0);
    CU_ASSERT_EQUAL(glia__cache_release(c, old), 0);
    CU_ASSERT_EQUAL(glia__cache_release(c, mid), 0);
    CU_ASSERT_EQUAL(glia__cache_release(c, late), 0);
    CU_ASSERT_EQUAL(glia__cache_give_back(c, q), 0);  /* held, not given back */
    CU_ASSERT_EQUAL(r.live, 4);
    glia__cache_trim(c);                              /* only late goes */
    CU_ASSERT_EQUAL(r.live, 3);
    void *p1, *p2;
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 4096, &p1), 0);
    CU_ASSERT(p1 != old && p1 != mid);                /* a new block: both are held */
    CU_ASSERT_EQUAL(r.live, 4);
    glia__cache_graph_freed(c);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 4096, &p2), 0);
    CU_ASSERT(p2 == old || p2 == mid);                /* no longer held */
    CU_ASSERT_EQUAL(r.live, 4);
    CU_ASSERT_EQUAL(glia__cache_release(c, p1), 0);
    CU_ASSERT_EQUAL(glia__cache_release(c, p2), 0);
    /* a failed capture: nothing held */
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 4096, &p1), 0);
    glia__cache_capture_begin(c);
    glia__cache_capture_end(c, false);
    CU_ASSERT_EQUAL(glia__cache_release(c, p1), 0);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 4096, &p2), 0);
    CU_ASSERT_PTR_EQUAL(p2, p1);
    CU_ASSERT_EQUAL(glia__cache_release(c, p2), 0);
    /* a failed capture while a graph lives: what it pinned (in use at its start, or made during it) is not
     * held; what the live graph pinned still is */
    void *g1, *f1, *f2, *q1, *q2;
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 4096, &p1), 0);
    glia__cache_capture_begin(c);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 16384, &g1), 0);
    glia__cache_capture_end(c, true);
    CU_ASSERT_EQUAL(glia__cache_release(c, g1), 0);          /* held by the graph */
    CU_ASSERT_EQUAL(glia__cache_release(c, p1), 0);          /* held too */
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 8192, &f1), 0);
    glia__cache_capture_begin(c);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 32768, &f2), 0);
    glia__cache_capture_end(c, false);
    CU_ASSERT_EQUAL(glia__cache_release(c, f1), 0);
    CU_ASSERT_EQUAL(glia__cache_release(c, f2), 0);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 8192, &q1), 0);
    CU_ASSERT_PTR_EQUAL(q1, f1);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 32768, &q2), 0);
    CU_ASSERT_PTR_EQUAL(q2, f2);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 16384, &p2), 0);
    CU_ASSERT(p2 != g1);                                      /* still the graph's */
    CU_ASSERT_EQUAL(glia__cache_release(c, q1), 0);
    CU_ASSERT_EQUAL(glia__cache_release(c, q2), 0);
    CU_ASSERT_EQUAL(glia__cache_release(c, p2), 0);
    glia__cache_graph_freed(c);
    glia__cache_trim(c);
    CU_ASSERT_EQUAL(r.live, 0);
    glia__cache_free(c);
}

/* During a capture nothing goes back to the raw allocator (cudaFree would end it): a block given back
 * is kept (held once the graph is made), trim frees nothing, and running out fails at once instead of
 * trimming and retrying. */
static void test_capture_frees_nothing(void)
{
    struct raw r = {3 * 4096, 0, 0};
    struct glia__cache *c = glia__cache_new(raw_alloc, raw_free, &r);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    void *cached, *big, *again, *p;
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 4096, &cached), 0);
    CU_ASSERT_EQUAL(glia__cache_release(c, cached), 0);
    glia__cache_capture_begin(c);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 8192, &big), 0);
    CU_ASSERT_EQUAL(glia__cache_give_back(c, big), 0);
    glia__cache_trim(c);
    CU_ASSERT_EQUAL(r.live, 2);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 8192, &again), 0);  /* within the capture: reused */
    CU_ASSERT_PTR_EQUAL(again, big);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 8192, &p), -1);     /* no room, and cached stays */
    CU_ASSERT_EQUAL(r.live, 2);
    CU_ASSERT_EQUAL(glia__cache_release(c, again), 0);
    glia__cache_capture_end(c, true);
    glia__cache_trim(c);                                      /* cached goes; big is held */
    CU_ASSERT_EQUAL(r.live, 1);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 8192, &p), -1);      /* big is the graph's */
    glia__cache_graph_freed(c);
    CU_ASSERT_EQUAL(glia__cache_alloc(c, 8192, &p), 0);
    CU_ASSERT_PTR_EQUAL(p, big);
    CU_ASSERT_EQUAL(glia__cache_give_back(c, p), 0);
    CU_ASSERT_EQUAL(r.live, 0);
    glia__cache_free(c);
}

GLIA_TEST_MAIN("cache", GLIA_TEST(test_classes), GLIA_TEST(test_reuse_after_warmup),
               GLIA_TEST(test_out_of_memory_trims_and_retries), GLIA_TEST(test_give_back),
               GLIA_TEST(test_graph_holds_pinned_blocks), GLIA_TEST(test_capture_frees_nothing))
