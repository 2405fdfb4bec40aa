/* core/tensorboard.c — TensorBoard event files: TFRecord framing with masked CRC32C, and the few Event fields glia
 * writes encoded by hand. Not what a run writes or when (core/report.c), and no protobuf library: five fields of
 * three messages do not justify a build and runtime dependency and generated code. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "internal.h"
#include "tensorboard.h"

uint32_t glia__crc32c(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {  /* bit by bit: a record is tens of bytes, a table would not pay */
        crc ^= b[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

uint32_t glia__tb_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* ---- protobuf wire format, the part glia needs ---- */

/* An output buffer; `over` once something did not fit (the rest is dropped). */
struct pb {
    uint8_t *p;
    size_t n, cap;
    bool over;
};

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_BYTES = 2, WIRE_FIXED32 = 5 };

static void put_raw(struct pb *b, const void *src, size_t n)
{
    if (b->over || n > b->cap - b->n) {
        b->over = true;
        return;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_varint(struct pb *b, uint64_t v)
{
    uint8_t t[10];
    size_t n = 0;
    do {
        t[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put_raw(b, t, n);
}

static void put_key(struct pb *b, unsigned field, unsigned wire) { put_varint(b, (uint64_t)field << 3 | wire); }

/* bytes little-endian bytes of v */
static void put_le(struct pb *b, uint64_t v, int bytes)
{
    uint8_t t[8];
    for (int i = 0; i < bytes; i++) t[i] = (uint8_t)(v >> (8 * i));
    put_raw(b, t, (size_t)bytes);
}

static void put_double(struct pb *b, unsigned field, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    put_key(b, field, WIRE_FIXED64);
    put_le(b, u, 8);
}

static void put_float(struct pb *b, unsigned field, float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    put_key(b, field, WIRE_FIXED32);
    put_le(b, u, 4);
}

/* A length-delimited field: a string or an embedded message's bytes. */
static void put_bytes(struct pb *b, unsigned field, const void *src, size_t n)
{
    put_key(b, field, WIRE_BYTES);
    put_varint(b, n);
    put_raw(b, src, n);
}

/* ---- the messages (tensorflow/core/util/event.proto, framework/summary.proto) ---- */

enum { EVENT_WALL_TIME = 1, EVENT_STEP = 2, EVENT_FILE_VERSION = 3, EVENT_SUMMARY = 5 };
enum { SUMMARY_VALUE = 1 };
enum { VALUE_TAG = 1, VALUE_SIMPLE_VALUE = 2 };

#define TB_MSG_MAX 512  /* room for a nested message: a Value with its tag, a Summary of one Value */

size_t glia__tb_scalar_event(uint8_t *buf, size_t cap, double wall_time, int64_t step, const char *tag, float value)
{
    uint8_t vb[TB_MSG_MAX], sb[TB_MSG_MAX];
    struct pb v = {vb, 0, sizeof vb, false}, s = {sb, 0, sizeof sb, false}, e = {buf, 0, cap, false};
    put_bytes(&v, VALUE_TAG, tag, strlen(tag));
    put_float(&v, VALUE_SIMPLE_VALUE, value);
    put_bytes(&s, SUMMARY_VALUE, vb, v.n);
    put_double(&e, EVENT_WALL_TIME, wall_time);
    put_key(&e, EVENT_STEP, WIRE_VARINT);
    put_varint(&e, (uint64_t)step);  /* int64: two's complement, as protobuf encodes a negative int64 */
    put_bytes(&e, EVENT_SUMMARY, sb, s.n);
    return v.over || s.over || e.over ? 0 : e.n;
}

size_t glia__tb_version_event(uint8_t *buf, size_t cap, double wall_time)
{
    static const char version[] = "brain.Event:2";
    struct pb e = {buf, 0, cap, false};
    put_double(&e, EVENT_WALL_TIME, wall_time);
    put_bytes(&e, EVENT_FILE_VERSION, version, sizeof version - 1);
    return e.over ? 0 : e.n;
}

/* ---- the file ---- */

/* Seconds since the epoch, with the fraction: an Event's wall_time. */
static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One TFRecord: u64 length, masked CRC of those 8 bytes, the data, masked CRC of the data (all little-endian).
 * 0 or an errno. */
static int write_record(FILE *f, const uint8_t *data, size_t n)
{
    uint8_t head[12], tail[4];
    struct pb h = {head, 0, sizeof head, false}, t = {tail, 0, sizeof tail, false};
    put_le(&h, n, 8);
    put_le(&h, glia__tb_mask(glia__crc32c(head, 8)), 4);
    put_le(&t, glia__tb_mask(glia__crc32c(data, n)), 4);
    errno = 0;
    if (fwrite(head, 1, sizeof head, f) == sizeof head && fwrite(data, 1, n, f) == n &&
        fwrite(tail, 1, sizeof tail, f) == sizeof tail)
        return 0;
    return errno ? errno : EIO;
}

/* Writes an encoded event (n bytes; 0: it did not fit) unless an earlier write failed. */
static void write_event(struct glia__tb *tb, const uint8_t *data, size_t n)
{
    if (!tb->f || tb->err) return;
    tb->err = n ? write_record(tb->f, data, n) : EMSGSIZE;
}

int glia__tb_open_file(struct glia__tb *tb, const char *path)
{
    *tb = (struct glia__tb){.path = glia__strdup(path)};
    if (!tb->path) return ENOMEM;
    if (!(tb->f = fopen(path, "ab"))) return errno;
    uint8_t buf[64];
    write_event(tb, buf, glia__tb_version_event(buf, sizeof buf, wall_now()));
    return tb->err;
}

int glia__tb_open(struct glia__tb *tb, const char *dir)
{
    char host[256];
    if (gethostname(host, sizeof host) || !host[0]) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    char *path = glia__printf("%s/events.out.tfevents.%lld.%s", dir, (long long)time(NULL), host);
    if (!path) {
        *tb = (struct glia__tb){0};
        return ENOMEM;
    }
    int err = glia__mkdir_parents(path);
    if (err) *tb = (struct glia__tb){.path = path};
    else {
        err = glia__tb_open_file(tb, path);
        free(path);
    }
    return err;
}

void glia__tb_scalar(struct glia__tb *tb, const char *tag, int64_t step, double value)
{
    uint8_t buf[TB_MSG_MAX + 32];
    if (tb->f && !tb->err)
        write_event(tb, buf, glia__tb_scalar_event(buf, sizeof buf, wall_now(), step, tag, (float)value));
}

void glia__tb_flush(struct glia__tb *tb)
{
    if (tb->f && !tb->err && fflush(tb->f)) tb->err = errno ? errno : EIO;
}

int glia__tb_close(struct glia__tb *tb)
{
    if (!tb->f) return tb->err;
    errno = 0;
    if (fclose(tb->f) && !tb->err) tb->err = errno ? errno : EIO;
    tb->f = NULL;
    return tb->err;
}

void glia__tb_free(struct glia__tb *tb)
{
    if (tb->f) fclose(tb->f);
    free(tb->path);
    *tb = (struct glia__tb){0};
}
