/* glia/half.h — f32 <-> bf16 / f16 conversion of single values on the host, rounding to nearest even (what CUDA's
 * __float2bfloat16_rn and __float2half_rn do), for CPU kernels with GLIA_KERNEL_HALF and tools that read half tensors.
 * Header-only (static inline: no ABI); not a tensor conversion: glia_tensor_convert. */
#ifndef GLIA_HALF_H
#define GLIA_HALF_H

#include <stdint.h>
#include <string.h>
#include <glia/tensor.h>

/* The bits of f, and the float of bits u */
static inline uint32_t glia_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float glia_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f rounded to bf16 (the top 16 bits of an f32); a NaN stays a (quiet) NaN. */
static inline uint16_t glia_f32_to_bf16(float f)
{
    uint32_t u = glia_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float glia_bf16_to_f32(uint16_t h) { return glia_bits_f32((uint32_t)h << 16); }

/* f rounded to IEEE binary16: beyond 65520 in magnitude it is infinite, below 2^-24 subnormal or zero. */
static inline uint16_t glia_f32_to_f16(float f)
{
    uint32_t x = glia_f32_bits(f), sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);   /* NaN */
    if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* 65520 and up (and infinity) round to infinity */
    uint32_t h, rem, half;
    if (x < 0x38800000u) {  /* below 2^-14: a subnormal, in units of 2^-24 */
        uint32_t e = x >> 23, m = (x & 0x7fffffu) | 0x800000u;
        if (e < 101) return (uint16_t)sign;  /* under 2^-25: zero */
        uint32_t shift = 126 - e;            /* 14 .. 25 */
        h = m >> shift;
        rem = m & ((1u << shift) - 1);
        half = 1u << (shift - 1);
    } else {  /* normal: the exponent rebiased, 13 mantissa bits dropped */
        uint32_t r = x - 0x38000000u;
        h = r >> 13;
        rem = r & 0x1fffu;
        half = 0x1000u;
    }
    if (rem > half || (rem == half && (h & 1u))) h++;  /* a carry into the exponent is right too */
    return (uint16_t)(sign | h);
}

static inline float glia_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 31) return glia_bits_f32(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        if (!m) return glia_bits_f32(sign);
        e = 113;  /* a subnormal: normalize */
        while (!(m & 0x400u)) m <<= 1, e--;
        return glia_bits_f32(sign | (e << 23) | ((m & 0x3ffu) << 13));
    }
    return glia_bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

/* Element i of p, a buffer of dtype t (F32, F16 or BF16), as f32. */
static inline float glia_load_f32(const void *p, enum glia_dtype t, int64_t i)
{
    if (t == GLIA_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == GLIA_BF16 ? glia_bf16_to_f32(h) : glia_f16_to_f32(h);
}

/* Element i of p, a buffer of dtype t (F32, F16 or BF16), = v rounded to t. */
static inline void glia_store_f32(void *p, enum glia_dtype t, int64_t i, float v)
{
    if (t == GLIA_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = t == GLIA_BF16 ? glia_f32_to_bf16(v) : glia_f32_to_f16(v);
}

#endif
