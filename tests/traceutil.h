/* tests/traceutil.h — checks a Chrome trace written by glia profile --trace against the model it
 * profiled: valid JSON, the events each step must have, in order, inside their step. Not timing. */
#ifndef GLIA_TRACEUTIL_H
#define GLIA_TRACEUTIL_H

#include <math.h>
#include "jsonutil.h"

struct trace_expect {
    int steps;
    int n_fwd;
    const char *const *fwd;  /* layer names in forward order */
    int n_bwd;
    const char *const *bwd;  /* layers whose backward runs, in backward order */
    const char *optimizer;
    bool comm;               /* ddp: a "comm" event (gradient wait) each step */
    int pid;
    int n_rec;
    const char *const *rec;  /* layers whose forward runs again in backward (checkpoint_segments), in order */
};

static int trace_problems;

static void trace_problem(const char *what, int i)
{
    if (trace_problems++ < 5) printf("\n  trace: event %d: %s", i, what);
}

static const char *trace_str(const struct jv *o, const char *key)
{
    const struct jv *v = json_get(o, key);
    return v && v->t == J_STR ? v->str : NULL;
}

/* ts or dur in whole nanoseconds (the file has microseconds with 3 decimals); -1 if missing. */
static long long trace_ns(const struct jv *o, const char *key)
{
    const struct jv *v = json_get(o, key);
    return v && v->t == J_NUM && v->num >= 0 ? llround(v->num * 1000) : -1;
}

/* The number of ways the trace at path falls short of e (0: none); prints the first few. */
static int trace_check(const char *path, const struct trace_expect *e)
{
    trace_problems = 0;
    char *text = json_read_file(path);
    struct jv root;
    if (!text || !json_parse(text, &root)) {
        trace_problem(text ? "the file is not valid JSON" : "the file cannot be read", -1);
        free(text);
        return trace_problems;
    }
    free(text);
    const struct jv *ev = json_get(&root, "traceEvents");
    const char *unit = trace_str(&root, "displayTimeUnit");
    if (!ev || ev->t != J_ARR) trace_problem("no traceEvents array", -1);
    if (!unit || strcmp(unit, "ms")) trace_problem("displayTimeUnit is not \"ms\"", -1);
    int per_step = e->n_fwd + e->n_bwd + e->n_rec + 3 + (e->comm ? 1 : 0);  /* + step, input, optimizer */
    if (ev && ev->t == J_ARR && ev->n != e->steps * per_step) {
        char msg[128];
        snprintf(msg, sizeof msg, "%d events, not %d x %d", ev->n, e->steps, per_step);
        trace_problem(msg, -1);
    }
    /* per step, in file order: the step event, then the others in the order they ran */
    long long prev_step_end = -1;
    int i = 0;
    for (int k = 1; ev && ev->t == J_ARR && k <= e->steps && i < ev->n; k++) {
        const struct jv *s = &ev->items[i++];
        char want[32];
        snprintf(want, sizeof want, "step %d", k);
        const char *name = trace_str(s, "name"), *cat = trace_str(s, "cat");
        if (!name || strcmp(name, want) || !cat || strcmp(cat, "step")) trace_problem("not the next step's event", i - 1);
        long long s0 = trace_ns(s, "ts"), s1 = s0 + trace_ns(s, "dur");
        if (s0 < 0 || s1 < s0) trace_problem("the step's ts or dur missing or negative", i - 1);
        if (s0 < prev_step_end) trace_problem("the step starts before the last one ended", i - 1);
        prev_step_end = s1;
        long long end = s0;  /* the last event's end: the next starts after it */
        int f = 0, b = 0, rc = 0, inputs = 0, opts = 0, comms = 0;
        for (; i < ev->n; i++) {
            const struct jv *x = &ev->items[i];
            const struct jv *args = json_get(x, "args"), *step = json_get(args, "step");
            const struct jv *pid = json_get(x, "pid"), *tid = json_get(x, "tid");
            const char *xn = trace_str(x, "name"), *xc = trace_str(x, "cat"), *ph = trace_str(x, "ph");
            if (xc && !strcmp(xc, "step")) break;
            long long t0 = trace_ns(x, "ts"), d = trace_ns(x, "dur");
            if (!xn || !xc) trace_problem("no name or cat", i);
            if (!ph || strcmp(ph, "X")) trace_problem("ph is not \"X\"", i);
            if (t0 < 0 || d < 0) trace_problem("ts or dur missing or negative", i);
            if (!pid || pid->t != J_NUM || pid->num != e->pid || !tid || tid->t != J_NUM || tid->num != 0)
                trace_problem("wrong pid or tid", i);
            if (!args || args->t != J_OBJ || !step || step->t != J_NUM || step->num != k) trace_problem("args.step is not its step", i);
            if (t0 < s0 || t0 + d > s1) trace_problem("outside its step", i);
            if (t0 < end) trace_problem("starts before the event before it ended", i);
            end = t0 + d;
            if (!xn || !xc) continue;
            if (!strcmp(xc, "input")) {
                inputs++;
                if (f || b || opts) trace_problem("input after the layers", i);
            } else if (!strcmp(xc, "forward")) {
                if (f >= e->n_fwd || strcmp(xn, e->fwd[f])) trace_problem("not the next layer's forward", i);
                if (!trace_str(args, "type") || !trace_str(args, "impl") || !trace_str(args, "output"))
                    trace_problem("forward without type, impl or output", i);
                if (b) trace_problem("forward after backward", i);
                f++;
            } else if (!strcmp(xc, "backward")) {
                if (b >= e->n_bwd || strcmp(xn, e->bwd[b])) trace_problem("not the next layer's backward", i);
                if (!trace_str(args, "type") || !trace_str(args, "impl")) trace_problem("backward without type or impl", i);
                b++;
            } else if (!strcmp(xc, "recompute")) {
                if (rc >= e->n_rec || strcmp(xn, e->rec[rc])) trace_problem("not the next layer's recomputation", i);
                if (!trace_str(args, "type") || !trace_str(args, "impl") || !trace_str(args, "output"))
                    trace_problem("recomputation without type, impl or output", i);
                if (!b || b == e->n_bwd) trace_problem("recomputation outside backward", i);
                rc++;
            } else if (!strcmp(xc, "comm")) {
                comms++;
                if (b != e->n_bwd || opts) trace_problem("comm not between backward and optimizer", i);
            } else if (!strcmp(xc, "optimizer")) {
                opts++;
                if (strcmp(xn, e->optimizer)) trace_problem("not the optimizer's name", i);
            } else {
                trace_problem("unknown cat", i);
            }
        }
        if (f != e->n_fwd || b != e->n_bwd || rc != e->n_rec || inputs != 1 || opts != 1 || comms != (e->comm ? 1 : 0))
            trace_problem("a step without all its events", i - 1);
    }
    if (ev && ev->t == J_ARR && i != ev->n) trace_problem("events after the last step", i);
    jv_free(&root);
    return trace_problems;
}

#endif
