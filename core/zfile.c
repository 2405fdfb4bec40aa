/* core/zfile.c — reading a data file that is raw or gzip, for the data readers (IDX, CIFAR, tokens).
 * Not a general compression library: reading only. A gzip file may hold several members (as gzip(1)
 * writes with `cat a.gz b.gz`); bytes after the last member that do not start another are an error. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "internal.h"

#define ZF_BUF (1 << 17)

struct glia__zfile {
    struct glia_context *ctx;
    const char *path;        /* (borrowed) for messages */
    FILE *f;
    bool gzip;               /* else the bytes are the data */
    bool done;               /* gzip: the last member has ended */
    z_stream z;              /* gzip: its input is in[]; raw: next_in/avail_in are what in[] still holds */
    unsigned char in[ZF_BUF];
};

/* Appends what the file gives to the unread input (moved to the start of in[]); *n: bytes added. */
static glia_status fill(struct glia__zfile *f, size_t *n)
{
    if (f->z.avail_in && f->z.next_in != f->in) memmove(f->in, f->z.next_in, f->z.avail_in);
    f->z.next_in = f->in;
    errno = 0;
    *n = fread(f->in + f->z.avail_in, 1, ZF_BUF - f->z.avail_in, f->f);
    f->z.avail_in += (uInt)*n;
    if (*n == 0 && ferror(f->f))
        return glia_error(f->ctx, GLIA_EIO, "cannot read %s: %s", f->path, strerror(errno ? errno : EIO));
    return GLIA_OK;
}

glia_status glia__zfile_open(struct glia_context *ctx, const char *path, struct glia__zfile **out)
{
    *out = NULL;
    struct glia__zfile *f = calloc(1, sizeof *f);
    if (!f) return glia_error(ctx, GLIA_ENOMEM, "cannot open %s: out of memory", path);
    f->ctx = ctx;
    f->path = path;
    errno = 0;
    if (!(f->f = fopen(path, "rb"))) {
        int e = errno;
        free(f);
        return glia_error(ctx, e == ENOMEM ? GLIA_ENOMEM : GLIA_EIO, "cannot open %s: %s", path,
                          strerror(e ? e : EIO));
    }
    size_t n;
    glia_status st = fill(f, &n);
    if (!st && f->z.avail_in < 2) st = fill(f, &n);  /* a short first read (a pipe) */
    f->gzip = !st && f->z.avail_in >= 2 && f->in[0] == 0x1f && f->in[1] == 0x8b;
    if (f->gzip) {
        unsigned char *at = f->z.next_in;
        uInt have = f->z.avail_in;
        if (inflateInit2(&f->z, 15 + 16) != Z_OK) {  /* gzip framing only */
            st = glia_error(ctx, GLIA_ENOMEM, "%s: out of memory while decompressing", path);
            f->gzip = false;
        }
        f->z.next_in = at, f->z.avail_in = have;
    }
    if (st) {
        glia__zfile_close(f);
        return st;
    }
    *out = f;
    return GLIA_OK;
}

void glia__zfile_close(struct glia__zfile *f)
{
    if (!f) return;
    if (f->gzip) inflateEnd(&f->z);
    if (f->f) fclose(f->f);
    free(f);
}

/* Bytes after a member's end that do not start another one: counted, then refused. */
static glia_status trailing(struct glia__zfile *f)
{
    long long extra = f->z.avail_in;
    f->z.avail_in = 0;
    for (size_t n = 1; n > 0;) {
        glia_status st = fill(f, &n);
        if (st) return st;
        extra += (long long)n;
        f->z.avail_in = 0;
    }
    return glia_error(f->ctx, GLIA_EFORMAT, "%s: %lld byte%s of trailing data after the gzip data (not another gzip "
                      "member): the file is damaged or was appended to", f->path, extra, extra == 1 ? "" : "s");
}

/* After a member ended: another member follows (true), or the data ended (f->done), or an error. */
static glia_status next_member(struct glia__zfile *f, bool *more)
{
    size_t n = 1;
    *more = false;
    while (f->z.avail_in < 2 && n > 0) {
        glia_status st = fill(f, &n);
        if (st) return st;
    }
    if (f->z.avail_in == 0) return f->done = true, GLIA_OK;
    if (f->z.avail_in < 2 || f->z.next_in[0] != 0x1f || f->z.next_in[1] != 0x8b) return trailing(f);
    if (inflateReset(&f->z) != Z_OK) return glia_error(f->ctx, GLIA_EINTERNAL, "%s: zlib: inflateReset failed", f->path);
    *more = true;
    return GLIA_OK;
}

static glia_status inflate_some(struct glia__zfile *f, unsigned char *out, size_t want, size_t *got)
{
    f->z.next_out = out;
    f->z.avail_out = (uInt)want;
    while (f->z.avail_out > 0 && !f->done) {
        size_t n = 1;
        if (f->z.avail_in == 0) {
            glia_status st = fill(f, &n);
            if (st) return st;
            if (n == 0)
                return glia_error(f->ctx, GLIA_EFORMAT, "%s: corrupt gzip data (unexpected end of file)", f->path);
        }
        int r = inflate(&f->z, Z_NO_FLUSH);
        if (r == Z_STREAM_END) {
            bool more;
            glia_status st = next_member(f, &more);
            if (st) return st;
        } else if (r == Z_MEM_ERROR) {
            return glia_error(f->ctx, GLIA_ENOMEM, "%s: out of memory while decompressing", f->path);
        } else if (r != Z_OK && r != Z_BUF_ERROR) {
            return glia_error(f->ctx, GLIA_EFORMAT, "%s: corrupt gzip data (%s)", f->path,
                              f->z.msg ? f->z.msg : "unknown zlib error");
        }
    }
    *got = want - f->z.avail_out;
    return GLIA_OK;
}

glia_status glia__zfile_read(struct glia__zfile *f, void *buf, size_t want, size_t *got)
{
    unsigned char *out = buf;
    *got = 0;
    while (*got < want) {
        size_t ask = want - *got, n = 0;
        if (f->gzip) {
            if (f->done) break;
            glia_status st = inflate_some(f, out + *got, ask < UINT_MAX ? ask : UINT_MAX, &n);
            if (st) return st;
        } else if (f->z.avail_in) {  /* what the format check read first */
            n = ask < f->z.avail_in ? ask : f->z.avail_in;
            memcpy(out + *got, f->z.next_in, n);
            f->z.next_in += n, f->z.avail_in -= (uInt)n;
        } else {
            errno = 0;
            n = fread(out + *got, 1, ask, f->f);
            if (n == 0 && ferror(f->f))
                return glia_error(f->ctx, GLIA_EIO, "cannot read %s: %s", f->path, strerror(errno ? errno : EIO));
            if (n == 0) break;
        }
        *got += n;
    }
    return GLIA_OK;
}
