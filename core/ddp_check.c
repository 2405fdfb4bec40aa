/* core/ddp_check.c — the start-up check of a ddp job: every rank runs with the same settings (the
 * effective configuration less the per-rank keys, the data sets' sizes, glia's and the plugins'
 * versions), compared by one exchange of hashes; only when they differ are the settings themselves
 * sent, to name the first difference. Not the per-call check of collectives (plugins/comm/mpi) and
 * not the same-model check when training starts (ddp.c). */
#include <stdlib.h>
#include <string.h>
#include "parts.h"

/* Keys that may differ between ranks: where a rank runs (its device, its threads, its loader's
 * threads and buffers), where it reads its files from (the data sets' sizes are compared instead,
 * and the plugins' versions instead of their paths) and what only it writes. Listed in README. */
static const char *const per_rank_keys[][2] = {
    {"runtime", "device"},       {"runtime", "threads"},       {"data", "train_images"},
    {"data", "train_labels"},    {"data", "test_images"},      {"data", "test_labels"},
    {"data", "train"},           {"data", "test"},             {"data", "workers"},
    {"data", "prefetch"},        {"data", "persistent_workers"}, {"data", "pin_memory"},
    {"train", "metrics"},        {"train", "checkpoint_dir"},  {"train", "log_every"},
    {"distributed", "rank_log"}, {"distributed", "timeout_s"}, {"plugins", "path"},
    {"plugins", "load"},         {"data", "train_tokens"},     {"data", "val_tokens"},
    {"train", "tensorboard"},
};

const char *glia__ddp_per_rank_key(int i, const char **key)
{
    if (i < 0 || (size_t)i >= GLIA__ARRAY_LEN(per_rank_keys)) return NULL;
    *key = per_rank_keys[i][1];
    return per_rank_keys[i][0];
}

static bool per_rank(const char *section, const char *key)
{
    for (size_t i = 0; i < GLIA__ARRAY_LEN(per_rank_keys); i++)
        if (!strcmp(per_rank_keys[i][0], section) && !strcmp(per_rank_keys[i][1], key)) return true;
    return false;
}

/* The settings as (section, key, value) strings one after the other, each ending in '\0'; a
 * section "" marks what is not a key (key: what it is, "the training set"). */
struct settings {
    char *buf;
    size_t len, cap;
};

static glia_status add(struct settings *s, const char *section, const char *key, const char *value)
{
    const char *part[3] = {section, key, value};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(part[i]) + 1;
        if (s->len + n > s->cap) {
            size_t cap = s->cap ? 2 * s->cap : 4096;
            while (cap < s->len + n) cap *= 2;
            char *b = realloc(s->buf, cap);
            if (!b) return GLIA_ENOMEM;
            s->buf = b, s->cap = cap;
        }
        memcpy(s->buf + s->len, part[i], n);
        s->len += n;
    }
    return GLIA_OK;
}

/* Every key of a validated section with its effective value (written or default); a section no
 * schema validated gives what was written. */
static glia_status add_section(struct settings *out, const struct glia_section *s)
{
    glia_status st = GLIA_OK;
    for (int i = 0; i < s->n_schemas && !st; i++)
        for (const struct glia_key *k = s->schemas[i]; k->name && !st; k++) {
            char *v = NULL;
            if (per_rank(s->name, k->name)) continue;
            if (!(st = glia__section_canonical(s, k, &v))) st = add(out, s->name, k->name, v ? v : "(not set)");
            free(v);
        }
    for (int i = 0; i < s->n_entries && !s->n_schemas && !st; i++)
        st = add(out, s->name, s->entries[i].key, s->entries[i].value);
    return st;
}

static glia_status add_dataset(struct settings *out, const char *what, const struct glia__dataset *d)
{
    char v[160];
    if (d->stream)
        snprintf(v, sizeof v, "%lld windows of %d tokens, %lld tokens in %d files, %d classes", (long long)d->n, d->cols,
                 (long long)d->n_tok, d->n_shards, d->n_classes);
    else if (d->tokens)
        snprintf(v, sizeof v, "%lld samples of up to %d tokens, %lld tokens in all, %d classes", (long long)d->n, d->cols,
                 (long long)(d->offsets ? d->offsets[d->n] : 0), d->n_classes);
    else
        snprintf(v, sizeof v, "%lld samples of %dx%dx%d, %d classes", (long long)d->n, d->channels, d->rows, d->cols,
                 d->n_classes);
    return add(out, "", what, v);
}

/* Whether plugin p registers a backend: which one a rank loads follows its own device. */
static bool backend_plugin(const struct glia_context *ctx, int p)
{
    for (int i = 0; i < ctx->n_features; i++)
        if (ctx->features[i].plugin == p && ctx->features[i].kind == GLIA__FEAT_BACKEND) return true;
    return false;
}

static glia_status collect(struct glia_model *m, struct settings *out)
{
    glia_status st = add(out, "", "glia's version", GLIA_VERSION_STRING);
    for (int i = 0; i < m->cfg->n_sections && !st; i++) st = add_section(out, m->cfg->sections[i]);
    if (!st) st = add_dataset(out, "the training set", &m->data.train);
    if (!st) st = add_dataset(out, "the test set", &m->data.test);
    for (int i = 0; i < m->ctx->n_plugins && !st; i++) {
        const struct glia_plugin_desc *d = m->ctx->plugins[i].desc;
        if (!d || backend_plugin(m->ctx, i)) continue;
        char what[160];
        snprintf(what, sizeof what, "the version of plugin %s", d->name);
        st = add(out, "", what, d->version ? d->version : "");
    }
    return st;
}

static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
    return h;
}

/* The value of (section, key) in the settings s (NULL: not there). */
static const char *lookup(const char *s, size_t n, const char *section, const char *key)
{
    for (const char *p = s; p < s + n;) {
        const char *k = p + strlen(p) + 1, *v = k + strlen(k) + 1;
        if (!strcmp(p, section) && !strcmp(k, key)) return v;
        p = v + strlen(v) + 1;
    }
    return NULL;
}

/* The first entry of a (rank 0's order) whose value b lacks or differs, else b's first entry that a
 * lacks: its section, key and the two values (NULL where absent). false when none differs. */
static bool first_difference(const char *a, size_t na, const char *b, size_t nb, const char *d[4])
{
    for (int pass = 0; pass < 2; pass++) {
        const char *s = pass ? b : a, *t = pass ? a : b;
        size_t ns = pass ? nb : na, nt = pass ? na : nb;
        for (const char *p = s; p < s + ns;) {
            const char *k = p + strlen(p) + 1, *v = k + strlen(k) + 1, *w = lookup(t, nt, p, k);
            if (!w || strcmp(v, w)) {
                d[0] = p, d[1] = k, d[2] = pass ? w : v, d[3] = pass ? v : w;
                return true;
            }
            p = v + strlen(v) + 1;
        }
    }
    return false;
}

/* The one-line refusal: ranks 0 and r differ in d (section, key, rank 0's value, rank r's). */
static glia_status refuse(struct glia_model *m, int r, const char *const d[4])
{
    char vals[128] = "";
    const char *v0 = d[2] ? d[2] : "absent", *vr = d[3] ? d[3] : "absent";
    if (strlen(v0) <= 40 && strlen(vr) <= 40) snprintf(vals, sizeof vals, " (%s vs %s)", v0, vr);
    static const char why[] = "every rank of a ddp job must run with the same settings (docs/distributed.md, "
                              "per-rank keys: the keys that may differ)";
    struct glia_section *s = d[0][0] ? glia__config_find(m->cfg, d[0]) : NULL;
    if (s) return glia_section_error(s, d[1], GLIA_ECONFIG, "ranks 0 and %d differ%s: %s", r, vals, why);
    if (d[0][0])
        return glia_error(m->ctx, GLIA_ECONFIG, "%s: [%s] %s: ranks 0 and %d differ%s: %s", m->cfg->path, d[0], d[1], r,
                          vals, why);
    return glia_error(m->ctx, GLIA_ECONFIG, "ranks 0 and %d differ in %s%s: %s", r, d[1], vals, why);
}

/* Rank root's settings (n bytes; mine when I am root), in a buffer of the caller's. */
static glia_status receive(struct glia_comm *c, const struct settings *mine, int root, size_t n, char **out)
{
    if (!(*out = malloc(n ? n : 1))) return GLIA_ENOMEM;
    if (root == c->info.rank) memcpy(*out, mine->buf, n);
    return glia__comm_broadcast_host(c, *out, n, GLIA_U8, root);
}

glia_status glia__ddp_check_settings(struct glia_model *m)
{
    struct glia_comm *c = m->dist.comm;
    int world = c->info.world;
    struct settings mine = {0};
    /* an all-gather of (hash, length) as a sum of slots that only their rank fills */
    int64_t *all = calloc(2 * (size_t)world, sizeof *all);
    glia_status st = all ? collect(m, &mine) : GLIA_ENOMEM;
    if (!st) {
        all[2 * c->info.rank] = (int64_t)fnv1a(mine.buf, mine.len);
        all[2 * c->info.rank + 1] = (int64_t)mine.len;
        st = glia__comm_all_reduce_host(c, all, 2 * (size_t)world, GLIA_I64, GLIA_REDUCE_SUM);
    }
    int r = 1;
    while (!st && r < world && all[2 * r] == all[0] && all[2 * r + 1] == all[1]) r++;
    if (!st && r < world) {  /* every rank knows r: all of them take part in the two broadcasts */
        char *a = NULL, *b = NULL;
        const char *d[4];
        st = receive(c, &mine, 0, (size_t)all[1], &a);
        if (!st) st = receive(c, &mine, r, (size_t)all[2 * r + 1], &b);
        if (!st && first_difference(a, (size_t)all[1], b, (size_t)all[2 * r + 1], d)) st = refuse(m, r, d);
        else if (!st)  /* the same entries in another order: the layer sections' order is the model's */
            st = glia_error(m->ctx, GLIA_ECONFIG, "%s: ranks 0 and %d list the same sections in a different order: "
                            "every rank of a ddp job must run with the same settings", m->cfg->path, r);
        free(a);
        free(b);
    }
    free(all);
    free(mine.buf);
    return st;
}
