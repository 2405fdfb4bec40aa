/* core/data_stream.c — the token-stream readers of [data] format = token_stream (llm.c's .bin shards) and bytes (any
 * files, one token per byte), and the windows a language model's batches are cut from. Not the [data] keys
 * (core/data.c) nor the loader's threads (core/loader.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

#define LLMC_MAGIC 20240520
#define LLMC_VERSION 1
#define LLMC_HEADER_INTS 256

/* Room for `more` tokens after the n_tok held (amortized doubling). */
static glia_status reserve(struct glia__dataset *d, int64_t *cap, int64_t more)
{
    if (d->n_tok + more <= *cap) return GLIA_OK;
    int64_t c = *cap ? *cap : 1 << 16;
    while (c < d->n_tok + more) c *= 2;
    uint16_t *t = realloc(d->tok, sizeof *t * (size_t)c);
    if (!t) return GLIA_ENOMEM;
    d->tok = t;
    *cap = c;
    return GLIA_OK;
}

/* The file ends here: its end in the stream. */
static glia_status end_shard(struct glia__dataset *d)
{
    int64_t *e = realloc(d->shard_end, sizeof *e * (size_t)(d->n_shards + 1));
    if (!e) return GLIA_ENOMEM;
    d->shard_end = e;
    d->shard_end[d->n_shards++] = d->n_tok;
    return GLIA_OK;
}

static glia_status open_file(struct glia_context *ctx, const char *path, FILE **f)
{
    errno = 0;
    if ((*f = fopen(path, "rb"))) return GLIA_OK;
    return glia_error(ctx, errno == ENOMEM ? GLIA_ENOMEM : GLIA_EIO, "cannot open %s: %s", path, strerror(errno));
}

/* One llm.c token file appended to d: the 256 x int32 little-endian header (magic 20240520, version 1, token
 * count), then that many little-endian uint16 tokens, nothing after them; every token below vocab (> 0). */
static glia_status read_llmc(struct glia_context *ctx, const char *path, int64_t vocab, struct glia__dataset *d,
                             int64_t *cap)
{
    FILE *f;
    glia_status st = open_file(ctx, path, &f);
    if (st) return st;
    uint8_t h[4 * LLMC_HEADER_INTS];
    size_t got = fread(h, 1, sizeof h, f);
    int32_t w[3];
    for (int i = 0; i < 3; i++)
        w[i] = (int32_t)((uint32_t)h[4 * i] | (uint32_t)h[4 * i + 1] << 8 | (uint32_t)h[4 * i + 2] << 16 |
                         (uint32_t)h[4 * i + 3] << 24);
    if (got < sizeof h)
        st = glia_error(ctx, GLIA_EFORMAT, "%s: truncated header: %zu bytes, an llm.c token file starts with %zu", path,
                        got, sizeof h);
    else if (w[0] != LLMC_MAGIC)
        st = glia_error(ctx, GLIA_EFORMAT, "%s: bad magic %d (an llm.c token file has %d)", path, w[0], LLMC_MAGIC);
    else if (w[1] != LLMC_VERSION)
        st = glia_error(ctx, GLIA_EFORMAT, "%s: version %d (glia reads llm.c token files of version %d: uint16 tokens)",
                        path, w[1], LLMC_VERSION);
    else if (w[2] < 0)
        st = glia_error(ctx, GLIA_EFORMAT, "%s: the header's token count %d is negative", path, w[2]);
    else st = reserve(d, cap, w[2]);
    uint8_t *raw = st ? NULL : malloc((size_t)w[2] * 2 + 1);
    if (!st && !raw) st = GLIA_ENOMEM;
    if (!st) {
        got = fread(raw, 1, (size_t)w[2] * 2 + 1, f);
        if (got < (size_t)w[2] * 2)
            st = glia_error(ctx, GLIA_EFORMAT, "%s: truncated: the header says %d tokens, the file holds %zu", path,
                            w[2], got / 2);
        else if (got > (size_t)w[2] * 2)
            st = glia_error(ctx, GLIA_EFORMAT, "%s: bytes after the %d tokens the header says", path, w[2]);
    }
    for (int64_t i = 0; !st && i < w[2]; i++) {
        uint16_t t = (uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8);
        if (vocab > 0 && t >= vocab)
            st = glia_error(ctx, GLIA_EFORMAT, "%s: token %u at position %lld is not below the vocabulary's %lld", path,
                            t, (long long)i, (long long)vocab);
        d->tok[d->n_tok + i] = t;
    }
    if (!st && ferror(f)) st = glia_error(ctx, GLIA_EIO, "%s: read error", path);
    if (!st) d->n_tok += w[2];
    free(raw);
    fclose(f);
    return st;
}

/* One file's bytes appended to d, a token each. */
static glia_status read_bytes(struct glia_context *ctx, const char *path, struct glia__dataset *d, int64_t *cap)
{
    FILE *f;
    glia_status st = open_file(ctx, path, &f);
    uint8_t buf[1 << 16];
    size_t got;
    while (!st && (got = fread(buf, 1, sizeof buf, f)) > 0) {
        if ((st = reserve(d, cap, (int64_t)got))) break;
        for (size_t i = 0; i < got; i++) d->tok[d->n_tok + (int64_t)i] = buf[i];
        d->n_tok += (int64_t)got;
    }
    if (!st && ferror(f)) st = glia_error(ctx, GLIA_EIO, "%s: read error", path);
    if (f) fclose(f);
    return st;
}

glia_status glia__stream_load(struct glia_context *ctx, const char *const *paths, int n_paths, bool bytes,
                              int64_t vocab, struct glia__dataset *out)
{
    *out = (struct glia__dataset){.channels = 1, .rows = 1, .tokens = true, .stream = true};
    int64_t cap = 0;
    glia_status st = GLIA_OK;
    for (int i = 0; i < n_paths && !st; i++) {
        st = bytes ? read_bytes(ctx, paths[i], out, &cap) : read_llmc(ctx, paths[i], vocab, out, &cap);
        if (!st) st = end_shard(out);
    }
    if (st == GLIA_ENOMEM && !glia_context_error(ctx)[0])
        st = glia_error(ctx, GLIA_ENOMEM, "out of memory holding the %lld tokens of %s and the files before it",
                        (long long)out->n_tok, paths[out->n_shards < n_paths ? out->n_shards : n_paths - 1]);
    if (st) glia__dataset_free(out);
    return st;
}

glia_status glia__stream_split(struct glia__dataset *all, double fraction, struct glia__dataset *tail)
{
    int64_t at = all->n_tok - (int64_t)((double)all->n_tok * fraction);
    *tail = (struct glia__dataset){.channels = 1, .rows = 1, .tokens = true, .stream = true};
    int first = 0;  /* the first file that reaches past the cut */
    while (first < all->n_shards && all->shard_end[first] <= at) first++;
    tail->n_tok = all->n_tok - at;
    tail->n_shards = all->n_shards - first;
    tail->tok = malloc(sizeof *tail->tok * (size_t)(tail->n_tok > 0 ? tail->n_tok : 1));
    tail->shard_end = malloc(sizeof *tail->shard_end * (size_t)(tail->n_shards > 0 ? tail->n_shards : 1));
    if (!tail->tok || !tail->shard_end) return glia__dataset_free(tail), GLIA_ENOMEM;
    if (tail->n_tok > 0) memcpy(tail->tok, all->tok + at, sizeof *tail->tok * (size_t)tail->n_tok);
    for (int i = 0; i < tail->n_shards; i++) tail->shard_end[i] = all->shard_end[first + i] - at;
    all->n_tok = at;  /* the head keeps its files up to the cut, the one it cuts ending there */
    all->n_shards = first + (first < all->n_shards && (first == 0 || all->shard_end[first - 1] < at) ? 1 : 0);
    if (all->n_shards > 0) all->shard_end[all->n_shards - 1] = at;
    return GLIA_OK;
}

/* Where shard s starts in the stream. */
static int64_t shard_begin(const struct glia__dataset *d, int s) { return s == 0 ? 0 : d->shard_end[s - 1]; }

/* Windows of T + 1 tokens a shard of len tokens has: sequential (starts 0, T, 2T, ...) or at any start. */
static int64_t seq_windows(int64_t len, int64_t T) { return len > T ? (len - 1) / T : 0; }
static int64_t any_windows(int64_t len, int64_t T) { return len > T ? len - T : 0; }

int64_t glia__stream_count(const struct glia__dataset *d, int64_t T, bool sequential)
{
    int64_t n = 0;
    for (int s = 0; s < d->n_shards; s++) {
        int64_t len = d->shard_end[s] - shard_begin(d, s);
        n += sequential ? seq_windows(len, T) : any_windows(len, T);
    }
    return n;
}

/* splitmix64's finalizer: the window draws are a pure function of (seed, epoch, index). */
static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Start of window k (0 <= k < total) among the windows of kind `sequential` of d, shards in order. */
static int64_t window_start(const struct glia__dataset *d, int64_t T, bool sequential, int64_t k)
{
    for (int s = 0; s < d->n_shards; s++) {
        int64_t b = shard_begin(d, s), len = d->shard_end[s] - b;
        int64_t n = sequential ? seq_windows(len, T) : any_windows(len, T);
        if (k < n) return b + (sequential ? k * T : k);
        k -= n;
    }
    return 0;  /* not reached for k < total */
}

void glia__stream_starts(const struct glia__dataset *d, bool random, uint64_t seed, int epoch, int64_t *starts)
{
    int64_t T = d->cols, total = glia__stream_count(d, T, !random);
    if (total == 0) return;
    if (!random) {  /* in order, from the first window again when an epoch asks for more than there are */
        int64_t k = 0;
        for (int64_t i = 0; i < d->n; i++, k = k + 1 == total ? 0 : k + 1) {
            if (i < total) starts[i] = window_start(d, T, true, k);
            else starts[i] = starts[k];
        }
        return;
    }
    uint64_t base = mix(seed ^ mix((uint64_t)epoch + 0x5eed5eedull));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < d->n; i++) {
        /* the high half of a 64x64-bit product: uniform on 0 .. total-1 */
        uint64_t r = mix(base ^ (uint64_t)i * 0xd1b54a32d192ed03ull);
        int64_t k = (int64_t)(((unsigned __int128)r * (uint64_t)total) >> 64);
        starts[i] = window_start(d, T, false, k);
    }
}

void glia__stream_fill(const struct glia__dataset *d, const int64_t *starts, int64_t n, int32_t *x, int32_t *y)
{
    int64_t T = d->cols;
    for (int64_t i = 0; i < n; i++) {
        const uint16_t *t = d->tok + starts[i];
        for (int64_t j = 0; j < T; j++) {
            x[i * T + j] = t[j];
            y[i * T + j] = t[j + 1];
        }
    }
}
