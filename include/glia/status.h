/* glia/status.h — the one table of error codes and glia_strerror().
 * Not the error details: those are in the context's message (glia_context_error). */
#ifndef GLIA_STATUS_H
#define GLIA_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, text). 0 is success; every error is negative. */
#define GLIA_STATUS_MAP(X)                                              \
    X(OK,           0,   "success")                                     \
    X(ENOMEM,      -1,   "out of memory")                               \
    X(EINVAL,      -2,   "invalid argument")                            \
    X(EIO,         -3,   "input/output error")                          \
    X(EFORMAT,     -4,   "malformed file")                              \
    X(ECONFIG,     -5,   "configuration error")                         \
    X(ENOTFOUND,   -6,   "not found")                                   \
    X(EABI,        -7,   "plugin ABI mismatch")                         \
    X(EPLUGIN,     -8,   "plugin error")                                \
    X(EUNSUPPORTED,-9,   "not supported")                               \
    X(ESHAPE,      -10,  "shape mismatch")                              \
    X(EDEVICE,     -11,  "device error")                                \
    X(EEXIST,      -12,  "already exists")                              \
    X(EPROBE,      -13,  "plugin refused this machine")                 \
    X(ENUMERIC,    -14,  "numerical error")                             \
    X(EINTERNAL,   -15,  "internal error")                              \
    X(ETIMEDOUT,   -16,  "timed out")                                   \
    X(EINTERRUPTED,-17,  "interrupted")

typedef enum glia_status {
#define GLIA__STATUS_ENUM(name, value, text) GLIA_##name = (value),
    GLIA_STATUS_MAP(GLIA__STATUS_ENUM)
#undef GLIA__STATUS_ENUM
} glia_status;

/* Short text of a status code ("configuration error"); never NULL. */
const char *glia_strerror(glia_status s);
/* Symbolic name of a status code ("GLIA_ECONFIG"); never NULL. */
const char *glia_status_name(glia_status s);

#ifdef __cplusplus
}
#endif
#endif
