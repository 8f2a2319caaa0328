/* half.h - the one home of redco's 16-bit float conversions (bf16 and IEEE f16), as
 * static inline functions so that loops over them vectorise. Every conversion to 16 bits
 * rounds to nearest, ties to even; NaN stays NaN (sign and the top payload bits kept, made
 * quiet); f16 keeps subnormals and overflows to infinity. Widening is exact, except that
 * a signalling f16 NaN is made quiet (payload kept), as the F16C instructions do, so the
 * scalar, F16C (the runs below) and OpenCL paths agree bit for bit.
 * The public wrappers (rc_f32_to_bf16, ...) and the array converter rc_convert (every pair
 * of f32, f64, bf16 and f16, over threads when the array is long) are in half.c. */
#ifndef REDCO_HALF_H
#define REDCO_HALF_H

#include "redco.h"

#include <stdint.h>
#include <string.h>
#ifdef __F16C__
#include <immintrin.h>
#endif

static inline uint32_t rci_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float rci_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bf16 is the upper half of an f32: widening is a shift. */
static inline float rci_bf16_to_f32(uint16_t h)
{
    return rci_bits_f32((uint32_t)h << 16);
}

static inline uint16_t rci_f32_to_bf16(float f)
{
    uint32_t u = rci_f32_bits(f);
    uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)(nan ? (u >> 16) | 0x40u : rounded);
}

/* Branch-free (masks, not selects) so that loops over it vectorise. */
static inline float rci_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu;
    uint32_t special = 0u - (uint32_t)(em >= 0x7c00u), small = 0u - (uint32_t)(em < 0x0400u);
    /* normal: exponent rebiased; inf and NaN (payload kept, made quiet): the exponent all ones */
    uint32_t quiet = (0u - (uint32_t)(em > 0x7c00u)) & 0x00400000u;
    uint32_t normal = ((em << 13) + ((127u - 15u) << 23) + (special & ((128u - 16u) << 23))) | quiet;
    /* zero and subnormals: em 2^-24, exact in f32 */
    uint32_t sub = rci_f32_bits((float)em * 5.9604644775390625e-8f);
    return rci_bits_f32(sign | (normal & ~small) | (sub & small));
}

static inline uint16_t rci_f32_to_f16(float f)
{
    uint32_t u = rci_f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    /* normal: rebias, round the 13 dropped bits to nearest even */
    uint32_t normal = (a - ((127u - 15u) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
    /* below 2^-14: adding 0.5 leaves |f| rounded to a multiple of 2^-24 in the low bits */
    uint32_t sub = rci_f32_bits(rci_bits_f32(a) + 0.5f) - 0x3f000000u;
    uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
    uint32_t bits = a > 0x7f800000u ? nan : a >= 0x477ff000u ? 0x7c00u : a >= 0x38800000u ? normal : sub;
    return (uint16_t)(sign | bits);
}

/* n 16-bit values of dtype t (bf16 or f16) widened to f32, on the calling thread: for f16
 * by the F16C instructions where the build targets them (the same bits). A kernel's short
 * runs inside its own threads use these; whole arrays go through rc_convert. */
static inline void rci_half_widen_run(float *restrict dst, const uint16_t *restrict src, rc_dtype t, int64_t n)
{
    int64_t i = 0;
    if (t == RC_BF16) {
        for (; i < n; i++)
            dst[i] = rci_bf16_to_f32(src[i]);
        return;
    }
#ifdef __F16C__
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + i))));
#endif
    for (; i < n; i++)
        dst[i] = rci_f16_to_f32(src[i]);
}

/* n f32 rounded to 16-bit values of dtype t (nearest, ties to even), on the calling thread */
static inline void rci_half_narrow_run(uint16_t *restrict dst, const float *restrict src, rc_dtype t, int64_t n)
{
    int64_t i = 0;
    if (t == RC_BF16) {
        for (; i < n; i++)
            dst[i] = rci_f32_to_bf16(src[i]);
        return;
    }
#ifdef __F16C__
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    for (; i < n; i++)
        dst[i] = rci_f32_to_f16(src[i]);
}

#endif
