/* plugins/comm/nccl/watchdog.h — a thread that watches a communicator's calls, which finish in issue
 * order, and expires the communicator once the oldest unfinished call is older than its timeout.
 * Not NCCL code: it sees the calls through two callbacks, so it is tested on the host (test_watchdog). */
#ifndef GLIA_NCCL_WATCHDOG_H
#define GLIA_NCCL_WATCHDOG_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define GLIA__WATCH_RING 64  /* issue times kept: call t in slot t % RING (the caller's event ring too) */

enum glia__watch_state { GLIA__WATCH_PENDING = 0, GLIA__WATCH_DONE = 1, GLIA__WATCH_FAILED = -1 };

struct glia__watchdog {
    pthread_mutex_t lock;     /* the communicator's: held by its owner around every use of it */
    pthread_cond_t wake;
    pthread_t thread;
    bool running, stop;
    bool expired;             /* expire was called: the communicator is no longer watched */
    double timeout_s, period_s;
    uint64_t issued;          /* calls 1 .. issued were issued (the owner says so with watch_issued) */
    uint64_t checked;         /* calls 1 .. checked are known to be done */
    double issued_at[GLIA__WATCH_RING];
    /* The state of call t (lock held). Once RING later calls reuse its slot it asks about the newest
     * call in that slot, which finishes after t. */
    enum glia__watch_state (*query)(void *user, uint64_t t);
    /* Call t failed, or has waited `waited` seconds (> timeout_s): mark the communicator failed
     * (lock held; called once). */
    void (*expire)(void *user, uint64_t t, double waited, bool failed);
    /* Then, with the lock let go: the slow part of failing it (NCCL's abort), so that the owner
     * meets the failure at once instead of waiting for the lock. Optional. */
    void (*release)(void *user);
    void *user;
};

static inline double glia__watch_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One look at the calls not known to be done (lock held): true when the communicator expired. */
static inline bool glia__watch_scan(struct glia__watchdog *w, double now)
{
    while (!w->expired && w->checked < w->issued) {
        uint64_t t = w->checked + 1;
        if (w->issued - t >= GLIA__WATCH_RING) t = w->issued - GLIA__WATCH_RING + 1;  /* the oldest slot still t's own */
        enum glia__watch_state s = w->query(w->user, t);
        if (s == GLIA__WATCH_DONE) {
            w->checked = t;
            continue;
        }
        double waited = now - w->issued_at[t % GLIA__WATCH_RING];
        if (s == GLIA__WATCH_FAILED || (w->timeout_s > 0 && waited > w->timeout_s)) {
            w->expired = true;
            w->expire(w->user, t, waited, s == GLIA__WATCH_FAILED);
        }
        break;
    }
    return w->expired;
}

static inline void *glia__watch_main(void *arg)
{
    struct glia__watchdog *w = arg;
    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        double next = glia__watch_now() + w->period_s;
        struct timespec ts = {(time_t)next, (long)((next - (double)(time_t)next) * 1e9)};
        int e = 0;
        while (!w->stop && e != ETIMEDOUT) e = pthread_cond_timedwait(&w->wake, &w->lock, &ts);
        if (!w->stop && glia__watch_scan(w, glia__watch_now())) break;
    }
    bool expired = w->expired;
    pthread_mutex_unlock(&w->lock);
    if (expired && w->release) w->release(w->user);
    return NULL;
}

/* Sets up w (lock and all); with timeout_s > 0 it also starts the thread, which looks every
 * period_s. Returns 0 or an errno. */
static inline int glia__watch_init(struct glia__watchdog *w, double timeout_s, double period_s,
                                   enum glia__watch_state (*query)(void *, uint64_t),
                                   void (*expire)(void *, uint64_t, double, bool), void (*release)(void *),
                                   void *user)
{
    *w = (struct glia__watchdog){.timeout_s = timeout_s, .period_s = period_s, .query = query, .expire = expire,
                                 .release = release, .user = user};
    pthread_condattr_t ca;
    int e = pthread_mutex_init(&w->lock, NULL);
    if (e) return e;
    if ((e = pthread_condattr_init(&ca))) goto fail_lock;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    e = pthread_cond_init(&w->wake, &ca);
    pthread_condattr_destroy(&ca);
    if (e) goto fail_lock;
    if (timeout_s > 0) {
        if ((e = pthread_create(&w->thread, NULL, glia__watch_main, w))) goto fail_cond;
        w->running = true;
    }
    return 0;
fail_cond:
    pthread_cond_destroy(&w->wake);
fail_lock:
    pthread_mutex_destroy(&w->lock);
    return e;
}

/* Call t was just issued (lock held). */
static inline void glia__watch_issued(struct glia__watchdog *w, uint64_t t)
{
    w->issued_at[t % GLIA__WATCH_RING] = glia__watch_now();
    w->issued = t;
}

/* Stops the thread (after its release, if it expired) and releases w (lock not held). */
static inline void glia__watch_fini(struct glia__watchdog *w)
{
    pthread_mutex_lock(&w->lock);
    w->stop = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    if (w->running) pthread_join(w->thread, NULL);
    w->running = false;
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
}

#endif
