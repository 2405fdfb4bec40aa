// bench/ktrace/ktrace.cc — a CUDA injection library (CUDA_INJECTION64_PATH=libktrace.so) that records each kernel,
// memcpy and memset a program's GPU runs, CUDA graph nodes included, through CUPTI's activity API (durations as the GPU
// saw them in a normal run, where ncu replays each kernel alone with its caches flushed), and at exit prints each name's
// count, total and mean microseconds over a window of training steps, and how much of the window the GPU ran nothing.
// The same for any CUDA program, so glia's step and PyTorch's are measured alike. Not part of glia; a bench tool.
//
//   environment: KTRACE_OUT (a file; default stderr; not written by a process that ran nothing on the GPU),
//   KTRACE_TOP (names listed, default 40), KTRACE_MARK (a substring, case-insensitive, of the kernel that ends a step,
//   e.g. "adam": such kernels at most KTRACE_JOIN, default 8, other records apart end one step), KTRACE_SKIP (steps left
//   out first, default 0), KTRACE_STEPS (steps in the window, default all that follow). Without KTRACE_MARK the window
//   is every record.
//   self-test (no GPU): g++ -std=c++17 -DKTRACE_SELFTEST -I$CUDA/include bench/ktrace/ktrace.cc && ./a.out
//   build: bench/ktrace/build.sh OUT.so
#include <cupti_activity.h>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

struct Rec {
    uint64_t start, end;
    uint32_t name;
};

std::mutex lock;
std::vector<Rec> recs;
std::vector<std::string> names;
std::unordered_map<std::string, uint32_t> name_ids;
size_t dropped;

uint32_t intern(const std::string &s)
{
    auto it = name_ids.find(s);
    if (it != name_ids.end()) return it->second;
    names.push_back(s);
    return name_ids[s] = (uint32_t)(names.size() - 1);
}

std::string demangled(const char *name)
{
    if (!name) return "(unnamed kernel)";
    int status = 0;
    char *d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string s = status == 0 && d ? d : name;
    free(d);
    return s;
}

bool contains_nocase(const std::string &s, const char *sub)
{
    auto it = std::search(s.begin(), s.end(), sub, sub + strlen(sub),
                          [](char a, char b) { return std::tolower((unsigned char)a) == std::tolower((unsigned char)b); });
    return it != s.end();
}

// The window [lo, hi) of records (sorted by start) that KTRACE_MARK, KTRACE_SKIP and KTRACE_STEPS choose; *steps the
// steps it holds (0: no mark given).
void window(const std::vector<Rec> &r, size_t *lo, size_t *hi, long *steps)
{
    const char *mark = getenv("KTRACE_MARK");
    long skip = getenv("KTRACE_SKIP") ? atol(getenv("KTRACE_SKIP")) : 0;
    long want = getenv("KTRACE_STEPS") ? atol(getenv("KTRACE_STEPS")) : -1;
    *lo = 0, *hi = r.size(), *steps = 0;
    if (!mark || !*mark) return;
    // one past the last record of each run of marks: marks at most KTRACE_JOIN (default 8) other records apart are one
    // run (PyTorch's fused AdamW launches once a parameter group, small kernels between)
    long join = getenv("KTRACE_JOIN") ? atol(getenv("KTRACE_JOIN")) : 8;
    std::vector<size_t> ends;
    long prev = -1;  // the last mark's index
    for (size_t i = 0; i < r.size(); i++) {
        if (!contains_nocase(names[r[i].name], mark)) continue;
        if (prev >= 0 && (long)i - prev - 1 <= join && !ends.empty())
            ends.back() = i + 1;
        else
            ends.push_back(i + 1);
        prev = (long)i;
    }
    long n = (long)ends.size();
    if (skip > n) skip = n;
    long last = want < 0 || skip + want > n ? n : skip + want;
    *lo = skip > 0 ? ends[skip - 1] : 0;
    *hi = last > 0 ? ends[last - 1] : 0;
    if (*hi < *lo) *hi = *lo;
    *steps = last - skip;
}

// What report printed last: the window's steps, records, their summed time, span and busy time (ns).
struct Figures {
    long steps;
    size_t records;
    double total, span, busy;
};

Figures report(FILE *f, std::vector<Rec> r)
{
    std::sort(r.begin(), r.end(), [](const Rec &a, const Rec &b) { return a.start < b.start; });
    size_t lo, hi;
    long steps;
    window(r, &lo, &hi, &steps);
    struct Sum {
        uint32_t name;
        long n;
        double ns;
    };
    std::vector<Sum> sums(names.size());
    for (size_t i = 0; i < sums.size(); i++) sums[i] = {(uint32_t)i, 0, 0.0};
    double total = 0.0, busy = 0.0;
    uint64_t cover = 0, first = hi > lo ? r[lo].start : 0, last_end = first;
    for (size_t i = lo; i < hi; i++) {
        double d = (double)(r[i].end - r[i].start);
        sums[r[i].name].n++, sums[r[i].name].ns += d, total += d;
        uint64_t s = std::max(r[i].start, cover);  // the union of [start, end): records sorted by start
        if (r[i].end > s) busy += (double)(r[i].end - s);
        cover = std::max(cover, r[i].end);
        last_end = std::max(last_end, r[i].end);
    }
    std::sort(sums.begin(), sums.end(), [](const Sum &a, const Sum &b) { return a.ns > b.ns; });
    double span = (double)(last_end - first), per = steps > 0 ? (double)steps : 1.0;
    int top = getenv("KTRACE_TOP") ? atoi(getenv("KTRACE_TOP")) : 40;
    fprintf(f, "ktrace: %zu records (%zu dropped by CUPTI), window %zu of them", r.size(), dropped, hi - lo);
    if (steps > 0) fprintf(f, ", %ld steps ending at '%s' kernels", steps, getenv("KTRACE_MARK"));
    fprintf(f, "\n%s  %12s %10s  name\n", steps > 0 ? "per step" : "   count", steps > 0 ? "us a step" : "total us",
            "mean us");
    for (int i = 0; i < (int)sums.size() && i < top && sums[i].n > 0; i++)
        fprintf(f, "%8.1f  %12.1f %10.2f  %.160s\n", (double)sums[i].n / per, sums[i].ns / 1e3 / per,
                sums[i].ns / 1e3 / (double)sums[i].n, names[sums[i].name].c_str());
    fprintf(f, "%s: %.1f records, their time %.1f us; span %.1f us (first start to last end), GPU running one %.1f us, "
            "running none %.1f us (%.1f%% of the span)\n", steps > 0 ? "a step" : "in all", (double)(hi - lo) / per,
            total / 1e3 / per, span / 1e3 / per, busy / 1e3 / per, (span - busy) / 1e3 / per,
            span > 0 ? 100.0 * (span - busy) / span : 0.0);
    return Figures{steps, hi - lo, total, span, busy};
}

#ifndef KTRACE_SELFTEST
constexpr size_t BUF = 8u << 20;

void CUPTIAPI requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = (uint8_t *)aligned_alloc(8, BUF);
    *size = *buffer ? BUF : 0;
    *max_records = 0;
}

const char *copy_kind(uint8_t k)
{
    switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    default: return "other";
    }
}

void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    (void)stream, (void)size;
    CUpti_Activity *a = nullptr;
    std::lock_guard<std::mutex> g(lock);
    while (cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) {
        if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || a->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            auto *k = (CUpti_ActivityKernel10 *)a;
            recs.push_back({k->start, k->end, intern(demangled(k->name))});
        } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            auto *m = (CUpti_ActivityMemcpy6 *)a;
            recs.push_back({m->start, m->end, intern(std::string("[memcpy ") + copy_kind(m->copyKind) + "]")});
        } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            auto *m = (CUpti_ActivityMemset4 *)a;
            recs.push_back({m->start, m->end, intern("[memset]")});
        }
    }
    size_t d = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &d) == CUPTI_SUCCESS) dropped += d;
    free(buffer);
}

void at_exit()
{
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::vector<Rec> r;
    {
        std::lock_guard<std::mutex> g(lock);
        r = recs;
    }
    if (r.empty()) return;  // a process that ran nothing on the GPU (a compile worker) leaves KTRACE_OUT alone
    const char *out = getenv("KTRACE_OUT");
    FILE *f = out && *out ? fopen(out, "w") : stderr;
    if (!f) f = stderr;
    report(f, std::move(r));
    if (f != stderr) fclose(f);
}
#endif

}  // namespace

#ifndef KTRACE_SELFTEST
// Called by the CUDA driver at cuInit when CUDA_INJECTION64_PATH names this library.
extern "C" int InitializeInjection(void)
{
    if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "ktrace: CUPTI refused activity tracing; nothing is recorded\n");
        return 0;
    }
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
    atexit(at_exit);
    return 1;
}
#else
// g++ -DKTRACE_SELFTEST -I$CUDA/include bench/ktrace/ktrace.cc: the window and the sums on made-up records
int main()
{
    // 3 steps of (in us): k1 (mangled) [0,10), k2 [12,20), adam [25,30), k2 [30,31), adam [31,32); then an evaluation
    // kernel
    uint32_t k1 = intern(demangled("_Z6k1_fwdPfi")), k2 = intern("k2"), adam = intern("adam_kernel<true>"),
             ev = intern("eval");
    const uint64_t us = 1000;
    for (uint64_t s = 0; s < 3; s++) {
        uint64_t t = 100 * s * us;
        recs.push_back({t + 25 * us, t + 30 * us, adam});
        recs.push_back({t, t + 10 * us, k1});
        recs.push_back({t + 12 * us, t + 20 * us, k2});
        recs.push_back({t + 30 * us, t + 31 * us, k2});
        recs.push_back({t + 31 * us, t + 32 * us, adam});
    }
    recs.push_back({400 * us, 450 * us, ev});
    setenv("KTRACE_MARK", "ADAM", 1);
    setenv("KTRACE_SKIP", "1", 1);
    setenv("KTRACE_JOIN", "1", 1);  // steps here are 5 records; in a model's step far more lie between two steps' marks
    Figures a = report(stdout, recs);  // steps 2 and 3: 10 records, 50 us of them over 132 us, 82 of them idle
    unsetenv("KTRACE_MARK");
    Figures b = report(stdout, recs);  // every record: 16, 125 us of them over 450 us
    bool ok = a.steps == 2 && a.records == 10 && a.total == 50 * us && a.span == 132 * us && a.busy == 50 * us &&
              b.steps == 0 && b.records == 16 && b.total == 125 * us && b.span == 450 * us && b.busy == 125 * us;
    puts(ok ? "ktrace self-test: ok" : "ktrace self-test: FAILED");
    return ok ? 0 : 1;
}
#endif
