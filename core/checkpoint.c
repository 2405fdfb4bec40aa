/* core/checkpoint.c — checkpoint files: a versioned, CRC-checked binary snapshot of a model's
 * weights, buffers, optimizer state, training position and loss scaler, written atomically.
 * Not a general serialization library: one format, read back by the same model.
 *
 * Layout (little-endian), version 3:
 *   header (40 bytes): "GLIACKPT", u32 version, u32 0x01020304, u64 payload bytes,
 *                      u32 crc32(payload), u32 crc32(header bytes 0-27 and 32-39), u64 model fingerprint
 *   payload: u64 n_weights, u64 n_buffers, u32 n_state, u32 0, char optimizer[32],
 *            i64 step, i32 epoch, i32 0, i64 next batch in epoch, u64 seed,
 *            f64 loss sum of the epoch so far, i64 samples of the epoch so far,
 *            loss scaler: f64 scale, i64 clean steps, i64 skipped steps, u32 1 when the run
 *            scaled its loss (precision = fp16) else 0, u32 0,
 *            f32 weights[n_weights], f32 buffers[n_buffers], f32 state[n_state][n_weights]
 *   (packed in arena order: the arenas' alignment padding is not stored)
 * So every header byte is checked: the signature, the header's CRC, then what it says. Version 2
 * is version 3 with bytes 28-31 zero (no header CRC: they must be zero, and its fingerprint is
 * checked only against the model); version 1 is version 2 without the loss scaler (an fp16 run
 * resumed from it starts its loss scaler afresh). Both still load. Newer versions are refused;
 * they keep this header, so a newer file is told from a corrupt one by its header CRC.
 * Randomness in glia is a function of (seed, epoch, step, sample), so step, epoch and the
 * batch position are the whole random state: a resumed run repeats the uninterrupted one. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include "parts.h"

#define MAGIC "GLIACKPT"
#define VERSION 3u
#define HEADER 40
#define ENDIAN 0x01020304u
#define MAX_STEP ((int64_t)1 << 62)   /* optimizer steps a checkpoint may count (far from overflow) */

struct meta {
    uint64_t n_weights, n_buffers;
    uint32_t n_state, pad0;
    char optimizer[32];
    int64_t step;
    int32_t epoch, pad1;
    int64_t batch;
    uint64_t seed;
    double loss_sum;
    int64_t samples;
};

/* The loss scaler's state (version 2 on), after struct meta. */
struct scaler_rec {
    double scale;
    int64_t clean, skipped;
    uint32_t on, pad0;  /* on: the saving run scaled its loss (fp16) */
};

uint64_t glia__model_fingerprint(const struct glia_model *m)
{
    uint64_t h = glia__hash_str(0, "glia-model");
    char buf[64];
    for (int i = 0; i < m->graph.n_decl; i++) {  /* as declared: fused layers hash as the layers they were */
        const struct glia__node *nd = &m->graph.nodes[m->graph.decl[i].node];
        const struct glia_layer *l = &nd->layer;
        h = glia__hash_str(glia__hash_str(h, m->graph.decl[i].name), m->graph.decl[i].type);
        if (strcmp(l->name, m->graph.decl[i].name)) continue;  /* merged into a later layer: no parameters */
        if (nd->tie)  /* stored once, with its owner: a file of the untied model has more values */
            h = glia__hash_str(glia__hash_str(h, "tie_weight"), m->graph.nodes[nd->tie_node].layer.name);
        for (int p = 0; p < l->n_params; p++)
            h = glia__hash_str(glia__hash_str(h, l->params[p].name), glia_shape_str(&l->params[p].shape, buf, sizeof buf));
        for (int p = 0; p < l->n_buffers; p++)
            h = glia__hash_str(glia__hash_str(h, l->buffers[p].name), glia_shape_str(&l->buffers[p].shape, buf, sizeof buf));
    }
    return h;
}

static void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

/* The header's CRC (version 3 on): every header byte but its own four. */
static uint32_t header_crc(const unsigned char *h)
{
    return (uint32_t)crc32(crc32(0L, h, 28), h + 32, 8);
}

/* ---- temporaries ----
 * A checkpoint is written to <path>.tmp.<host>.<pid> and renamed: the name says which process on
 * which host writes it, so a later run can remove what a killed one left (glia__checkpoint_sweep)
 * without touching what a live glia writes into the same folder, on this host or another one
 * sharing it. */

/* This host's name as temporaries carry it: letters, digits, '.', '-' and '_'; others become '_'. */
static void host_name(char *buf, size_t n)
{
    if (gethostname(buf, n) || !buf[0]) snprintf(buf, n, "unknown-host");
    buf[n - 1] = '\0';
    for (char *c = buf; *c; c++)
        if (!isalnum((unsigned char)*c) && !strchr("._-", *c)) *c = '_';
}

char *glia__checkpoint_tmp_name(const char *path, long pid)
{
    char host[256];
    host_name(host, sizeof host);
    size_t n = strlen(path) + strlen(host) + 32;
    char *t = malloc(n);
    if (t) snprintf(t, n, "%s.tmp.%s.%ld", path, host, pid);
    return t;
}

/* The writer of this number is gone: no process of it runs here (a number another process took
 * since counts as alive: the file waits for a later sweep), or it is ours, left by an earlier
 * run (in a container glia often has the same number each time), as this process writes no
 * checkpoint while it sweeps. */
static bool process_gone(const char *digits)
{
    char *end;
    errno = 0;
    long pid = strtol(digits, &end, 10);
    if (!isdigit((unsigned char)*digits) || *end || errno || pid <= 0 || pid > INT_MAX) return false;
    return pid == (long)getpid() || (kill((pid_t)pid, 0) && errno == ESRCH);
}

/* A temporary no live writer will rename: <x>.ckpt.tmp.<this host>.<pid> of a process that is
 * gone, or the name glia used before hosts were in it, <x>.ckpt.tmp<pid>, whose process is gone
 * here and which has not changed for a day (its host is unknown: a writer elsewhere may share
 * the number, but none takes a day to write a checkpoint). */
static bool stale_tmp(int dfd, const char *name, const char *host)
{
    const char *t = strstr(name, ".ckpt.tmp");
    if (!t) return false;
    t += strlen(".ckpt.tmp");
    if (*t == '.') {
        size_t hl = strlen(host);
        return !strncmp(t + 1, host, hl) && t[1 + hl] == '.' && process_gone(t + 2 + hl);
    }
    struct stat sb;
    return process_gone(t) && !fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) && S_ISREG(sb.st_mode) &&
           difftime(time(NULL), sb.st_mtime) > 86400;
}

/* step-<digits>.ckpt: its step in *step. */
static bool step_file(const char *name, int64_t *step)
{
    const char *d = name + strlen("step-");
    char *end;
    if (strncmp(name, "step-", 5) || !isdigit((unsigned char)*d)) return false;
    errno = 0;
    long long v = strtoll(d, &end, 10);
    if (errno || strcmp(end, ".ckpt")) return false;
    *step = v;
    return true;
}

struct step_entry {
    int64_t step;
    char *name;  /* (owned) */
};

static int newest_first(const void *a, const void *b)
{
    int64_t x = ((const struct step_entry *)a)->step, y = ((const struct step_entry *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void remove_file(struct glia_model *m, int dfd, const char *dir, const char *name, int *removed)
{
    if (!unlinkat(dfd, name, 0)) (*removed)++;
    else if (errno != ENOENT)  /* ENOENT: another run's sweep was first */
        glia_log(m->ctx, GLIA_LOG_WARN, "cannot remove %s/%s: %s", dir, name, strerror(errno));
}

void glia__checkpoint_sweep(struct glia_model *m, const char *dir, int64_t step, int keep)
{
    DIR *d = opendir(dir);
    if (!d) return;
    char host[256];
    host_name(host, sizeof host);
    struct step_entry *files = NULL;
    int n = 0, cap = 0, stale = 0, pruned = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s;
        if (stale_tmp(dirfd(d), e->d_name, host)) {
            remove_file(m, dirfd(d), dir, e->d_name, &stale);
        } else if (keep > 0 && step_file(e->d_name, &s) && s <= step) {
            char *name = glia__strdup(e->d_name);
            if (!name || glia__grow((void **)&files, &cap, n + 1, sizeof *files)) {
                free(name);
                break;  /* out of memory: nothing is pruned this time */
            }
            files[n++] = (struct step_entry){s, name};
        }
    }
    if (!e) {  /* read to the end: the list is whole */
        if (n > 1) qsort(files, (size_t)n, sizeof *files, newest_first);
        for (int i = keep; i < n; i++) remove_file(m, dirfd(d), dir, files[i].name, &pruned);
    }
    closedir(d);
    for (int i = 0; i < n; i++) free(files[i].name);
    free(files);
    if (stale)
        glia_log(m->ctx, GLIA_LOG_INFO, "%s: removed %d temporary file%s that killed runs left", dir, stale,
                 stale == 1 ? "" : "s");
}

/* dst = the values of arena tensor t, packed; tmp holds a->len floats. */
static glia_status pull(const struct glia_tensor *t, const struct glia__arena *a, float *dst, float *tmp)
{
    if (!a->n) return GLIA_OK;
    glia_status st = glia_tensor_to_host(t, tmp, sizeof(float) * (size_t)a->len);
    if (!st) glia__arena_pack(a, tmp, dst);
    return st;
}

/* arena tensor t = the packed values src, zero padding; tmp holds a->len floats. */
static glia_status push(struct glia_tensor *t, const struct glia__arena *a, const float *src, float *tmp)
{
    if (!a->n) return GLIA_OK;
    glia__arena_unpack(a, src, tmp);
    return glia_tensor_from_host(t, tmp, sizeof(float) * (size_t)a->len);
}

static float *arena_tmp(const struct glia_model *m)
{
    return malloc(sizeof(float) * (size_t)(m->params.wa.len > m->params.ba.len ? m->params.wa.len : m->params.ba.len));
}

glia_status glia__checkpoint_save(struct glia_model *m, const char *path, int epoch, int64_t batch,
                                  double loss_sum, int64_t samples)
{
    int ns = m->trainer.opt.type->n_state;
    size_t nfloat = (size_t)m->params.wa.n * (size_t)(1 + ns) + (size_t)m->params.ba.n;
    size_t payload = sizeof(struct meta) + sizeof(struct scaler_rec) + nfloat * sizeof(float);
    unsigned char *buf = malloc(HEADER + payload);
    float *at = arena_tmp(m);
    if (!buf || !at) {
        free(buf);
        free(at);
        return glia_error(m->ctx, GLIA_ENOMEM, "checkpoint %s: out of memory", path);
    }
    struct meta mt = {(uint64_t)m->params.wa.n, (uint64_t)m->params.ba.n, (uint32_t)ns, 0, {0}, m->trainer.step, epoch, 0,
                      batch, m->seed, loss_sum, samples};
    snprintf(mt.optimizer, sizeof mt.optimizer, "%s", m->trainer.opt.type->name);
    struct scaler_rec sc = {m->trainer.scaler.scale, m->trainer.scaler.clean, m->trainer.scaler.skipped, m->precision == GLIA_PRECISION_FP16, 0};
    unsigned char *p = buf + HEADER;
    memcpy(p, &mt, sizeof mt);
    memcpy(p + sizeof mt, &sc, sizeof sc);
    float *f = (float *)(p + sizeof mt + sizeof sc);
    glia_status st = pull(m->params.w, &m->params.wa, f, at);
    f += m->params.wa.n;
    if (!st) st = pull(m->params.buf, &m->params.ba, f, at);
    f += m->params.ba.n;
    for (int k = 0; k < ns && !st; k++, f += m->params.wa.n) st = pull(m->params.state[k], &m->params.wa, f, at);
    free(at);
    if (st) {
        free(buf);
        return st;
    }
    memcpy(buf, MAGIC, 8);
    put_u32(buf + 8, VERSION);
    put_u32(buf + 12, ENDIAN);
    put_u64(buf + 16, payload);
    put_u32(buf + 24, (uint32_t)crc32(0L, p, (uInt)payload));
    put_u64(buf + 32, glia__model_fingerprint(m));
    put_u32(buf + 28, header_crc(buf));
    /* atomic: temporary file in the same folder, fsync, rename, fsync the folder */
    char *tmp = glia__checkpoint_tmp_name(path, (long)getpid());
    if (!tmp) {
        free(buf);
        return GLIA_ENOMEM;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    size_t left = HEADER + payload, off = 0;
    while (fd >= 0 && left > 0) {
        ssize_t w = write(fd, buf + off, left);
        if (w <= 0) break;
        off += (size_t)w;
        left -= (size_t)w;
    }
    int err = fd < 0 ? errno : left ? (errno ? errno : EIO) : 0;
    if (!err && fsync(fd)) err = errno;
    if (fd >= 0 && close(fd) && !err) err = errno;
    if (!err && rename(tmp, path)) err = errno;
    free(buf);
    if (err) {
        unlink(tmp);
        free(tmp);
        return glia_error(m->ctx, GLIA_EIO, "cannot write checkpoint %s: %s", path, strerror(err));
    }
    free(tmp);
    char *dcopy = glia__strdup(path);
    if (dcopy) {
        int dfd = open(dirname(dcopy), O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        free(dcopy);
    }
    return GLIA_OK;
}

static glia_status bad(struct glia_model *m, const char *path, const char *what)
{
    return glia_error(m->ctx, GLIA_EFORMAT, "%s: %s", path, what);
}

glia_status glia__checkpoint_load(struct glia_model *m, const char *path, bool training, struct glia__resume *out)
{
    FILE *f = fopen(path, "rb");
    if (!f) return glia_error(m->ctx, GLIA_EIO, "cannot open checkpoint %s: %s", path, strerror(errno));
    unsigned char h[HEADER];
    size_t got = fread(h, 1, HEADER, f);
    glia_status st = GLIA_OK;
    uint32_t version, endian, crc, hcrc;
    uint64_t payload, fp;
    memcpy(&version, h + 8, 4);
    memcpy(&endian, h + 12, 4);
    memcpy(&payload, h + 16, 8);
    memcpy(&crc, h + 24, 4);
    memcpy(&hcrc, h + 28, 4);
    memcpy(&fp, h + 32, 8);
    bool old = version == 1 || version == 2;  /* no header CRC: bytes 28-31 are zero */
    if (got < 8 || memcmp(h, MAGIC, 8)) st = bad(m, path, "not a glia checkpoint (no GLIACKPT signature)");
    else if (got < HEADER) st = bad(m, path, "truncated checkpoint header");
    else if (endian == 0x04030201u) st = bad(m, path, "checkpoint written on a machine of the other byte order");
    else if (old && hcrc)
        st = glia_error(m->ctx, GLIA_EFORMAT, "%s: corrupt checkpoint header (version %u, but bytes 28-31 are not zero)",
                        path, version);
    else if (!old && hcrc != header_crc(h)) st = bad(m, path, "corrupt checkpoint header (CRC mismatch)");
    else if (endian != ENDIAN) st = bad(m, path, "corrupt checkpoint header (byte-order mark)");
    else if (version < 1 || version > VERSION)
        st = glia_error(m->ctx, GLIA_EFORMAT, "%s: checkpoint format version %u, this glia reads versions 1 to %u", path,
                        version, VERSION);
    else if (payload < sizeof(struct meta) || payload > ((uint64_t)1 << 40)) st = bad(m, path, "corrupt checkpoint header");
    /* a payload size the file does not hold is refused before it is allocated */
    struct stat sb;
    if (!st && fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size - HEADER < payload)
        st = glia_error(m->ctx, GLIA_EFORMAT, "%s: truncated checkpoint (%llu payload bytes expected, %llu present)", path,
                        (unsigned long long)payload, (unsigned long long)sb.st_size - HEADER);
    unsigned char *p = NULL;
    if (!st && !(p = malloc(payload))) st = GLIA_ENOMEM;
    if (!st && fread(p, 1, payload, f) != payload)
        st = glia_error(m->ctx, GLIA_EFORMAT, "%s: truncated checkpoint (%llu payload bytes expected)", path,
                        (unsigned long long)payload);
    if (!st && fgetc(f) != EOF) st = bad(m, path, "trailing bytes after the checkpoint");
    fclose(f);
    if (!st && (uint32_t)crc32(0L, p, (uInt)payload) != crc) st = bad(m, path, "corrupt checkpoint (CRC mismatch)");
    struct meta mt;
    if (!st) memcpy(&mt, p, sizeof mt);
    if (!st && (fp != glia__model_fingerprint(m) || mt.n_weights != (uint64_t)m->params.wa.n ||
                mt.n_buffers != (uint64_t)m->params.ba.n))
        st = glia_error(m->ctx, GLIA_EINVAL,
                        "%s: checkpoint of another model (%llu parameters, %llu buffer values; this model has %lld and %lld, "
                        "or its layer names, types or shapes differ)",
                        path, (unsigned long long)mt.n_weights, (unsigned long long)mt.n_buffers,
                        (long long)m->params.wa.n, (long long)m->params.ba.n);
    int ns = m->trainer.opt.type->n_state;
    struct scaler_rec sc = {0};
    size_t head = sizeof mt + (version >= 2 ? sizeof sc : 0);  /* bytes before the floats */
    if (!st && payload != head + ((uint64_t)mt.n_weights * (1 + mt.n_state) + mt.n_buffers) * sizeof(float))
        st = bad(m, path, "corrupt checkpoint (sizes do not add up)");
    if (!st && version >= 2) memcpy(&sc, p + sizeof mt, sizeof sc);
    /* what a run writes: a resumed run indexes its data order with batch and counts on from step */
    if (!st && (mt.epoch < 1 || mt.batch < 0 || mt.samples < 0 || mt.step < 0 || mt.step > MAX_STEP))
        st = glia_error(m->ctx, GLIA_EFORMAT, "%s: corrupt checkpoint (epoch %d, batch %lld, samples %lld, step %lld)",
                        path, (int)mt.epoch, (long long)mt.batch, (long long)mt.samples, (long long)mt.step);
    if (!st && sc.on && !(isfinite(sc.scale) && sc.scale > 0 && sc.clean >= 0 && sc.skipped >= 0))
        st = glia_error(m->ctx, GLIA_EFORMAT, "%s: corrupt checkpoint (loss scale %g, %lld clean and %lld skipped steps)",
                        path, sc.scale, (long long)sc.clean, (long long)sc.skipped);
    mt.optimizer[sizeof mt.optimizer - 1] = '\0';
    if (!st && training && (strcmp(mt.optimizer, m->trainer.opt.type->name) || (int)mt.n_state != ns))
        st = glia_error(m->ctx, GLIA_EINVAL, "%s: checkpoint optimizer '%s', the model's [train] optimizer is '%s'", path,
                        mt.optimizer, m->trainer.opt.type->name);
    float *tmp = st ? NULL : arena_tmp(m);
    if (!st && !tmp) st = GLIA_ENOMEM;
    if (!st) {
        const float *fl = (const float *)(p + head);
        st = push(m->params.w, &m->params.wa, fl, tmp);
        fl += m->params.wa.n;
        if (!st) st = push(m->params.buf, &m->params.ba, fl, tmp);
        fl += m->params.ba.n;
        for (int k = 0; k < ns && training && !st; k++, fl += m->params.wa.n) st = push(m->params.state[k], &m->params.wa, fl, tmp);
    }
    free(tmp);
    if (!st && training) {
        m->trainer.step = mt.step;
        out->epoch = mt.epoch;
        out->batch = mt.batch;
        out->loss_sum = mt.loss_sum;
        out->samples = mt.samples;
        if (mt.seed != m->seed)
            glia_log(m->ctx, GLIA_LOG_WARN, "%s: checkpoint seed %llu, [runtime] seed %llu: the resumed run uses %llu",
                     path, (unsigned long long)mt.seed, (unsigned long long)m->seed, (unsigned long long)mt.seed);
        m->seed = mt.seed;
        /* the loss scaler goes on where it was when both runs scale their loss (fp16); else this
         * run's stays as it starts (65536 with fp16, 1 without) */
        if (sc.on && m->precision == GLIA_PRECISION_FP16)
            m->trainer.scaler = (struct glia__scaler){sc.scale, sc.clean, sc.skipped};
    }
    free(p);
    return st;
}

glia_status glia_model_load_checkpoint(struct glia_model *m, const char *path)
{
    return glia__checkpoint_load(m, path, false, NULL);
}
