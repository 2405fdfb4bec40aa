/* core/tensorboard.h — TensorBoard event files (core/tensorboard.c): CRC32C, the Event records encoded by hand, one
 * file opened, written, flushed and closed. Not what a run writes there or when (core/report.c). Not installed. */
#ifndef GLIA_CORE_TENSORBOARD_H
#define GLIA_CORE_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One event file being written. */
struct glia__tb {
    FILE *f;     /* NULL: none open */
    char *path;  /* the file's path (owned), kept for messages until glia__tb_close */
    int err;     /* the errno of the first write that failed, 0: none */
};

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of n bytes, as TFRecord uses it. */
uint32_t glia__crc32c(const void *p, size_t n);
/* A TFRecord's stored form of a CRC: rotated right by 15 bits, plus 0xa282ead8 (mod 2^32). */
uint32_t glia__tb_mask(uint32_t crc);

/* An Event holding one scalar: wall_time, step, summary { value { tag, simple_value } }, into buf (cap bytes);
 * its length, or 0 when it does not fit. */
size_t glia__tb_scalar_event(uint8_t *buf, size_t cap, double wall_time, int64_t step, const char *tag, float value);
/* The Event that starts a file: wall_time and file_version "brain.Event:2", no step. */
size_t glia__tb_version_event(uint8_t *buf, size_t cap, double wall_time);

/* Opens dir/events.out.tfevents.<now, in seconds>.<host> (dir and its parents made): 0, or the errno of what
 * failed, tb->path naming the file either way. Appends when the name exists (a run started within the same
 * second on the same host), so no earlier curve is overwritten. */
int glia__tb_open(struct glia__tb *tb, const char *dir);
/* Opens the event file at path (appending) and writes its version record: 0 or an errno. */
int glia__tb_open_file(struct glia__tb *tb, const char *path);
/* Writes one scalar record at step, stamped with the wall-clock time; a failure is kept in tb->err (the first
 * one) and the file is not written further. Nothing when no file is open. */
void glia__tb_scalar(struct glia__tb *tb, const char *tag, int64_t step, double value);
/* Hands what was written to the system, so a running TensorBoard reads it; a failure as glia__tb_scalar's. */
void glia__tb_flush(struct glia__tb *tb);
/* Closes the file (when open): 0, or the errno of the first write or of the close that failed. tb->path stays for
 * the message. */
int glia__tb_close(struct glia__tb *tb);
/* Closes the file without a word (a run that failed to start) and frees the path. */
void glia__tb_free(struct glia__tb *tb);

#endif
