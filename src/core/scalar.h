/* scalar.h - what the CPU kernels and the device kernels compute per element, written once
 * in the common subset of C11, OpenCL C 1.2 and CUDA C++ so that both sides give the same
 * bits: the 16-bit float conversions, the hash of the random streams (dropout, normal
 * draws), the CPU's exp and the activations built on it.
 *
 * The C library includes it (through internal.h and half.h); CMake prepends it, after
 * src/backend/gpu/dialect.h, to the device source kernels.cl (rci_gpu_source). On the
 * device dialect.h supplies what differs: RC_DEVICE_SOURCE, the fixed-width types and the
 * bit casts rci_f32_bits / rci_bits_f32 (memcpy here in C). Functions are static inline
 * (a device build makes them device functions), and only plain expressions appear, so the
 * C compiler vectorises loops over them.
 *
 * The activations are over RC_REAL and present only where it is defined: in the CPU's
 * kernels_real.c (float or double; <tgmath.h> picks the float functions for float) and on
 * the device (float). */
#ifndef REDCO_SCALAR_H
#define REDCO_SCALAR_H

#ifndef RC_DEVICE_SOURCE
#include <math.h>
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
#endif

/* ---- 16-bit floats ------------------------------------------------------------------------
 * Every conversion to 16 bits rounds to nearest, ties to even; NaN stays NaN (sign and the
 * top payload bits kept, made quiet); f16 keeps subnormals and overflows to infinity.
 * Widening is exact, except that a signalling f16 NaN is made quiet (payload kept), as the
 * F16C instructions do. */

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

/* ---- random streams ----------------------------------------------------------------------- */

/* splitmix64's finaliser: a bijective 64-bit mix with good avalanche; every draw of rng.c
 * and of the normal kernels is a hash of a key and a counter. (The UL constants are 64-bit:
 * a hexadecimal constant takes the first type that holds it.) */
static inline uint64_t rci_hash64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15UL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9UL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBUL;
    return x ^ (x >> 31);
}

/* lowbias32 (C. Wellons' search for 32-bit integer hashes): a bijective 32-bit mix of
 * xor-shifts and two odd products, close to full avalanche */
static inline uint32_t rci_mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/* Dropout's draw for element i of the mask of key `key`: a 32-bit d uniform over [0, 2^32),
 *     d = mix32(mix32(lo(i) ^ lo(key)) ^ hi(i) ^ hi(key))
 * (lo, hi: the 64-bit values' 32-bit halves), kept iff d >= thresh = ceil(p 2^32), which
 * keeps it with probability 1 - p to 2^-32. 32-bit operations alone: a GPU runs them at
 * full rate where splitmix64's 64-bit products take several instructions each, and the
 * device's attention tiles draw one for every probability in each of their four kernels
 * (thresh: rci_drop_thresh). */
static inline uint32_t rci_drop_draw(uint64_t key, uint64_t i)
{
    uint32_t x = rci_mix32((uint32_t)i ^ (uint32_t)key);
    return rci_mix32(x ^ (uint32_t)(i >> 32) ^ (uint32_t)(key >> 32));
}

static inline int rci_drop_kept(uint64_t key, uint64_t i, uint64_t thresh)
{
    return (uint64_t)rci_drop_draw(key, i) >= thresh;
}

#ifndef RC_DEVICE_SOURCE
/* rci_drop_kept's threshold of probability p: ceil(p 2^32), within [0, 2^32] */
static inline uint64_t rci_drop_thresh(double p)
{
    double t = ceil(p * 4294967296.0);
    return (uint64_t)(t < 0 ? 0 : t > 4294967296.0 ? 4294967296.0 : t);
}
#endif

/* ---- exp -----------------------------------------------------------------------------------
 * exp in float that vectorises: 2^k p(r) with r = x - k ln2 (Cody-Waite split of ln2),
 * |r| <= ln2 / 2, p the degree-6 Taylor polynomial: relative error below 2e-7, no calls
 * and no branches, so loops over it run 8 lanes wide (libm's expf is a scalar call).
 * Below -87.3 (where expf is subnormal) it gives 0, above 88.7 infinity; NaN gives NaN. */
static inline float rci_fexp_f32(float x)
{
    /* clamped so the exponent bits stay in range; NaN lands on -87.3 here and is passed
     * through at the end */
    float c = x > -87.3f ? (x < 88.7f ? x : 88.7f) : -87.3f;
    int32_t ki = (int32_t)(c * 1.44269504f + 128.5f) - 128; /* round to nearest: the sum is positive */
    float k = (float)ki;
    float r = c - k * 0.693145752f - k * 1.42860677e-6f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    float scale = rci_bits_f32((uint32_t)(ki + 127) << 23);
    return x != x ? x : x < -87.3f ? 0.0f : x > 88.7f ? INFINITY : p * scale;
}

/* ---- activations over RC_REAL --------------------------------------------------------------- */
#ifdef RC_REAL
#ifndef RC_DEVICE_SOURCE
#include <tgmath.h>
#endif

typedef RC_REAL rci_real;

/* exp over rci_real: rci_fexp_f32 for float; double uses libm's exp */
static inline rci_real rci_fexp(rci_real x)
{
#ifndef RC_DEVICE_SOURCE
    if (sizeof(rci_real) == sizeof(double))
        return exp(x);
#endif
    return rci_fexp_f32((float)x);
}

/* sigmoid without overflow: exp of a non-positive number only */
static inline rci_real rci_sigmoid(rci_real x)
{
    if (x >= 0)
        return 1 / (1 + rci_fexp(-x));
    rci_real e = rci_fexp(x);
    return e / (1 + e);
}

/* tanh through one exp (the libm tanhf is several times slower than expf); accurate to
 * a few ulp of 1, which is what gelu needs. */
static inline rci_real rci_tanh_exp(rci_real u)
{
    rci_real e = rci_fexp(-2 * fabs(u)), t = (1 - e) / (1 + e);
    return u < 0 ? -t : t;
}

/* 0.5 x (1 + tanh(u)), u = k (x + a x^3), and its derivatives (order 0, 1, 2). */
static inline rci_real rci_act_gelu_tanh(rci_real x, int order)
{
    const rci_real k = (rci_real)0.7978845608028654, a = (rci_real)0.044715;
    rci_real u = k * (x + a * x * x * x), t = rci_tanh_exp(u);
    if (order == 0)
        return (rci_real)0.5 * x * (1 + t);
    rci_real s = 1 - t * t, u1 = k * (1 + 3 * a * x * x);
    if (order == 1)
        return (rci_real)0.5 * (1 + t) + (rci_real)0.5 * x * s * u1;
    rci_real u2 = 6 * a * k * x;
    return s * u1 + (rci_real)0.5 * x * s * (u2 - 2 * t * u1 * u1);
}

/* x Phi(x) and its derivatives. */
static inline rci_real rci_act_gelu_erf(rci_real x, int order)
{
    rci_real cdf = (rci_real)0.5 * (1 + erf(x * (rci_real)0.7071067811865476));
    if (order == 0)
        return x * cdf;
    rci_real pdf = rci_fexp((rci_real)-0.5 * x * x) * (rci_real)0.3989422804014327;
    if (order == 1)
        return cdf + x * pdf;
    return pdf * (2 - x * x);
}

static inline rci_real rci_act_silu(rci_real x, int order)
{
    rci_real sg = rci_sigmoid(x);
    if (order == 0)
        return x * sg;
    if (order == 1)
        return sg * (1 + x * (1 - sg));
    return sg * (1 - sg) * (2 + x * (1 - 2 * sg));
}

static inline rci_real rci_act_sigmoid(rci_real x, int order)
{
    rci_real sg = rci_sigmoid(x);
    if (order == 0)
        return sg;
    if (order == 1)
        return sg * (1 - sg);
    return sg * (1 - sg) * (1 - 2 * sg);
}
#endif

#endif
