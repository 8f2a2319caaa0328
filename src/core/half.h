/* half.h - the one home of redco's 16-bit float conversions (bf16 and IEEE f16), as
 * static inline functions so that loops over them vectorise. Every conversion to 16 bits
 * rounds to nearest, ties to even; NaN stays NaN (sign and the top payload bits kept, made
 * quiet); f16 keeps subnormals and overflows to infinity. Widening is exact.
 * The public wrappers (rc_bf16_from_f32, ...) and the array converters are in half.c. */
#ifndef REDCO_HALF_H
#define REDCO_HALF_H

#include <stdint.h>
#include <string.h>

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

static inline float rci_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu;
    uint32_t normal = (em << 13) + ((127u - 15u) << 23);        /* exponent rebiased */
    uint32_t special = 0x7f800000u | (em & 0x3ffu) << 13;         /* inf, NaN (payload kept) */
    float sub = (float)em * 5.9604644775390625e-8f;               /* zero, subnormal: em 2^-24 */
    uint32_t bits = em >= 0x7c00u ? special : em >= 0x0400u ? normal : rci_f32_bits(sub);
    return rci_bits_f32(sign | bits);
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

#endif
