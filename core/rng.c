/* core/rng.c — the seeded random generator (xoshiro256**, seeded through splitmix64) and
 * seeded permutations. Not cryptographic; identical streams on every platform. */
#include <math.h>
#include "internal.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void glia__rng_seed(struct glia_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t glia__rng_next(struct glia_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double glia__rng_uniform(struct glia_rng *r)
{
    return (double)(glia__rng_next(r) >> 11) * 0x1.0p-53;
}

double glia__rng_normal(struct glia_rng *r)
{
    double u1 = glia__rng_uniform(r), u2 = glia__rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t glia__hash_str(uint64_t h, const char *s)
{
    if (!h) h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

void glia__permutation(int64_t *perm, int64_t n, uint64_t seed)
{
    struct glia_rng r;
    glia__rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(glia__rng_next(&r) % (uint64_t)(i + 1));
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}
