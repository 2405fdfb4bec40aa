/* core/util.c — small string, memory, folder and time helpers used across libglia, and the element types' sizes
 * and names. Not a general utility library: only what the core needs. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "internal.h"

char *glia__strdup(const char *s)
{
    return s ? glia__strndup(s, strlen(s)) : NULL;
}

char *glia__strndup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

void glia__bytes_str(double bytes, char *buf, size_t n)
{
    static const char *const unit[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB"};
    if (bytes < 1000) {
        snprintf(buf, n, "%.0f bytes", bytes);
        return;
    }
    int u = 0;
    for (bytes /= 1000; bytes >= 999.95 && u < 6; u++) bytes /= 1000;
    snprintf(buf, n, "%.1f %s", bytes, unit[u]);
}

char *glia__printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

char *glia__trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

glia_status glia__grow(void **p, int *cap, int need, size_t sz)
{
    if (need <= *cap) return GLIA_OK;
    int c = *cap ? *cap : 8;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * sz);
    if (!q) return GLIA_ENOMEM;
    *p = q;
    *cap = c;
    return GLIA_OK;
}

int glia__mkdir_parents(const char *path)
{
    char *p = glia__strdup(path);
    if (!p) return ENOMEM;
    int err = 0;
    for (char *c = p + 1; *c && !err; c++) {
        if (*c != '/' || c[-1] == '/') continue;  /* "a//b" names a once */
        *c = '\0';
        if (mkdir(p, 0777) && errno != EEXIST) {
            int e = errno;
            struct stat sb;  /* an existing folder may refuse mkdir with EACCES or EROFS rather than EEXIST */
            if (stat(p, &sb) || !S_ISDIR(sb.st_mode)) err = e;
        }
        *c = '/';
    }
    free(p);
    return err;
}

double glia__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- element types (glia/tensor.h), here below the backend and the tensors that both name them ---- */

size_t glia_dtype_size(enum glia_dtype t)
{
    switch (t) {
    case GLIA_F32: case GLIA_I32: return 4;
    case GLIA_F16: case GLIA_BF16: return 2;
    case GLIA_I64: case GLIA_F64: return 8;
    case GLIA_U8: return 1;
    }
    return 0;
}

bool glia__float_dtype(enum glia_dtype t) { return t == GLIA_F32 || t == GLIA_F16 || t == GLIA_BF16; }

const char *glia_dtype_name(enum glia_dtype t)
{
    static const char *n[] = {"f32", "f16", "bf16", "i32", "i64", "u8", "f64"};
    return (unsigned)t < GLIA__ARRAY_LEN(n) ? n[t] : "?";
}
