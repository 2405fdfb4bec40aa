/* tests/test_watchdog.c — CUnit tests of the nccl transport's watchdog (plugins/comm/nccl/watchdog.h)
 * through fake calls: which call it asks about, when it expires, that it expires once. Not NCCL. */
#include <unistd.h>
#include "../plugins/comm/nccl/watchdog.h"
#include "testutil.h"

struct fake {
    uint64_t done_upto;           /* calls 1 .. done_upto are done */
    uint64_t failed;              /* this call failed (0: none) */
    uint64_t asked[512];          /* the calls asked about, in order */
    int n_asked;
    int n_expired;
    uint64_t expired_t;
    double expired_waited;
    bool expired_failed;
    int n_released;
    bool lock_free_at_release;    /* the watchdog's lock was not held when release ran */
    pthread_mutex_t *lock;
};

static enum glia__watch_state fake_query(void *user, uint64_t t)
{
    struct fake *f = user;
    if (f->n_asked < 512) f->asked[f->n_asked++] = t;
    if (t == f->failed) return GLIA__WATCH_FAILED;
    return t <= f->done_upto ? GLIA__WATCH_DONE : GLIA__WATCH_PENDING;
}

static void fake_expire(void *user, uint64_t t, double waited, bool failed)
{
    struct fake *f = user;
    f->n_expired++;
    f->expired_t = t;
    f->expired_waited = waited;
    f->expired_failed = failed;
}

static void fake_release(void *user)
{
    struct fake *f = user;
    for (int i = 0; i < 1000 && !f->lock_free_at_release; i++) {  /* the test's thread may hold it a moment */
        f->lock_free_at_release = pthread_mutex_trylock(f->lock) == 0;
        if (f->lock_free_at_release) pthread_mutex_unlock(f->lock);
        else usleep(1000);
    }
    f->n_released++;
}

/* A watchdog without its thread (timeout 0 starts none), with the timeout set after: the tests
 * drive glia__watch_scan with made-up times. */
static void setup(struct glia__watchdog *w, struct fake *f, double timeout_s)
{
    memset(f, 0, sizeof *f);
    CU_ASSERT_EQUAL_FATAL(glia__watch_init(w, 0, 1, fake_query, fake_expire, NULL, f), 0);
    CU_ASSERT_FALSE(w->running);
    w->timeout_s = timeout_s;
}

static void issue(struct glia__watchdog *w, uint64_t t, double at)
{
    glia__watch_issued(w, t);
    w->issued_at[t % GLIA__WATCH_RING] = at;
}

static void test_done_calls_never_expire(void)
{
    struct glia__watchdog w;
    struct fake f;
    setup(&w, &f, 10);
    for (uint64_t t = 1; t <= 5; t++) issue(&w, t, (double)t);
    f.done_upto = 5;
    CU_ASSERT_FALSE(glia__watch_scan(&w, 1000));  /* long after, but all done */
    CU_ASSERT_EQUAL(w.checked, 5);
    CU_ASSERT_EQUAL(f.n_asked, 5);
    f.n_asked = 0;
    CU_ASSERT_FALSE(glia__watch_scan(&w, 2000));  /* nothing new: nothing asked */
    CU_ASSERT_EQUAL(f.n_asked, 0);
    CU_ASSERT_EQUAL(f.n_expired, 0);
    glia__watch_fini(&w);
}

static void test_oldest_pending_call_expires_once(void)
{
    struct glia__watchdog w;
    struct fake f;
    setup(&w, &f, 10);
    issue(&w, 1, 0);
    issue(&w, 2, 5);
    issue(&w, 3, 6);
    f.done_upto = 1;
    CU_ASSERT_FALSE(glia__watch_scan(&w, 14.5));  /* call 2 has waited 9.5 s */
    CU_ASSERT_EQUAL(w.checked, 1);
    CU_ASSERT_EQUAL(f.asked[f.n_asked - 1], 2);   /* it stops at the oldest pending call */
    CU_ASSERT_EQUAL(f.n_expired, 0);
    CU_ASSERT_TRUE(glia__watch_scan(&w, 15.5));   /* 10.5 s */
    CU_ASSERT_EQUAL(f.n_expired, 1);
    CU_ASSERT_EQUAL(f.expired_t, 2);
    CU_ASSERT_DOUBLE_EQUAL(f.expired_waited, 10.5, 1e-9);
    CU_ASSERT_FALSE(f.expired_failed);
    int asked = f.n_asked;
    CU_ASSERT_TRUE(glia__watch_scan(&w, 100));    /* expired: no more questions, no second expiry */
    CU_ASSERT_EQUAL(f.n_asked, asked);
    CU_ASSERT_EQUAL(f.n_expired, 1);
    glia__watch_fini(&w);
}

static void test_failed_call_expires_at_once(void)
{
    struct glia__watchdog w;
    struct fake f;
    setup(&w, &f, 10);
    issue(&w, 1, 0);
    issue(&w, 2, 0);
    f.done_upto = 1;
    f.failed = 2;
    CU_ASSERT_TRUE(glia__watch_scan(&w, 0.5));
    CU_ASSERT_EQUAL(f.n_expired, 1);
    CU_ASSERT_EQUAL(f.expired_t, 2);
    CU_ASSERT_TRUE(f.expired_failed);
    glia__watch_fini(&w);
}

/* Once more than RING calls are out, an old call's slot belongs to a newer one: the watchdog asks
 * about the oldest call that still owns its slot (it finishes after the older ones), and times
 * from that call's issue. */
static void test_ring_reuse_asks_the_oldest_owner(void)
{
    struct glia__watchdog w;
    struct fake f;
    setup(&w, &f, 10);
    const uint64_t last = 3 * GLIA__WATCH_RING + 7;
    for (uint64_t t = 1; t <= last; t++) issue(&w, t, (double)t / 1000);
    CU_ASSERT_FALSE(glia__watch_scan(&w, 5));
    CU_ASSERT_EQUAL(f.n_asked, 1);
    CU_ASSERT_EQUAL(f.asked[0], last - GLIA__WATCH_RING + 1);
    f.done_upto = last - 3;
    f.n_asked = 0;
    CU_ASSERT_FALSE(glia__watch_scan(&w, 6));
    CU_ASSERT_EQUAL(w.checked, last - 3);
    CU_ASSERT_EQUAL(f.asked[f.n_asked - 1], last - 2);
    CU_ASSERT_TRUE(glia__watch_scan(&w, (double)(last - 2) / 1000 + 10.01));
    CU_ASSERT_EQUAL(f.expired_t, last - 2);
    glia__watch_fini(&w);
}

static void test_no_timeout_never_expires(void)
{
    struct glia__watchdog w;
    struct fake f;
    setup(&w, &f, 0);
    issue(&w, 1, 0);
    CU_ASSERT_FALSE(glia__watch_scan(&w, 1e9));
    CU_ASSERT_EQUAL(f.n_expired, 0);
    glia__watch_fini(&w);
}

/* *count, read under the watchdog's lock, once it is not 0 (about 0.06 s here; at most 10 s on a
 * loaded machine before giving up with 0). */
static int poll_count(struct glia__watchdog *w, const int *count)
{
    int v = 0;
    for (int i = 0; i < 1000 && !v; i++) {
        usleep(10000);
        pthread_mutex_lock(&w->lock);
        v = *count;
        pthread_mutex_unlock(&w->lock);
    }
    return v;
}

/* The thread: a call that never finishes is expired by the watchdog's own looks, under its lock;
 * fini stops a thread that is still watching too. */
static void test_thread_expires_a_stuck_call(void)
{
    struct glia__watchdog w;
    struct fake f;
    memset(&f, 0, sizeof f);
    f.lock = &w.lock;
    CU_ASSERT_EQUAL_FATAL(glia__watch_init(&w, 0.05, 0.01, fake_query, fake_expire, fake_release, &f), 0);
    CU_ASSERT_TRUE(w.running);
    pthread_mutex_lock(&w.lock);
    glia__watch_issued(&w, 1);
    pthread_mutex_unlock(&w.lock);
    CU_ASSERT_EQUAL(poll_count(&w, &f.n_expired), 1);
    CU_ASSERT_EQUAL(f.expired_t, 1);
    CU_ASSERT(f.expired_waited > 0.05);
    glia__watch_fini(&w);  /* joins: release has run */
    CU_ASSERT_EQUAL(f.n_released, 1);
    CU_ASSERT_TRUE(f.lock_free_at_release);

    memset(&f, 0, sizeof f);
    f.lock = &w.lock;
    CU_ASSERT_EQUAL_FATAL(glia__watch_init(&w, 3600, 0.01, fake_query, fake_expire, fake_release, &f), 0);
    pthread_mutex_lock(&w.lock);
    glia__watch_issued(&w, 1);
    pthread_mutex_unlock(&w.lock);
    CU_ASSERT(poll_count(&w, &f.n_asked) >= 1);  /* it looks at the pending call */
    glia__watch_fini(&w);  /* returns: the thread stops while the call is pending */
    CU_ASSERT_EQUAL(f.n_expired, 0);
    CU_ASSERT_EQUAL(f.n_released, 0);
}

GLIA_TEST_MAIN("watchdog", GLIA_TEST(test_done_calls_never_expire), GLIA_TEST(test_oldest_pending_call_expires_once),
               GLIA_TEST(test_failed_call_expires_at_once), GLIA_TEST(test_ring_reuse_asks_the_oldest_owner),
               GLIA_TEST(test_no_timeout_never_expires), GLIA_TEST(test_thread_expires_a_stuck_call))
