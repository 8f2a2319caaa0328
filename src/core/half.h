/* half.h - redco's 16-bit float conversions (bf16 and IEEE f16) over runs of values, as
 * static inline functions so that loops over them vectorise. The conversions of one value
 * are scalar.h's (shared with the device kernels): every conversion to 16 bits rounds to
 * nearest, ties to even; NaN stays NaN (sign and the top payload bits kept, made quiet);
 * f16 keeps subnormals and overflows to infinity. Widening is exact, except that a
 * signalling f16 NaN is made quiet (payload kept), as the F16C instructions do, so the
 * scalar, F16C (the runs below) and device paths agree bit for bit.
 * The public wrappers (rc_f32_to_bf16, ...) and the array converter rc_convert (every pair
 * of f32, f64, bf16 and f16, over threads when the array is long) are in half.c. */
#ifndef REDCO_HALF_H
#define REDCO_HALF_H

#include "redco.h"
#include "scalar.h"

#include <stdint.h>
#ifdef __F16C__
#include <immintrin.h>
#endif

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
