/* tests/loaderutil.h — one helper for tests that drive the data loader by hand: the next batch
 * of an image set as plain pointers. Not the loader (core/loader.c). */
#ifndef GLIA_TEST_LOADERUTIL_H
#define GLIA_TEST_LOADERUTIL_H

#include <stdbool.h>
#include "loader.h"

/* The next batch as (x, y, n): image sets. */
static inline bool next_batch(struct glia__loader *L, const float **x, const int32_t **y, int64_t *n)
{
    struct glia__batch b;
    if (!glia__loader_next(L, &b)) return false;
    *x = b.x, *y = b.y, *n = b.n;
    return true;
}

#endif
