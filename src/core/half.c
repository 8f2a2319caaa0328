/* half.c - the public 16-bit conversions (scalars, and arrays between the float dtypes),
 * over the inline functions of half.h. */
#include "half.h"
#include "internal.h"

float rc_bf16_to_f32(uint16_t h) { return rci_bf16_to_f32(h); }
uint16_t rc_f32_to_bf16(float f) { return rci_f32_to_bf16(f); }
float rc_f16_to_f32(uint16_t h) { return rci_f16_to_f32(h); }
uint16_t rc_f32_to_f16(float f) { return rci_f32_to_f16(f); }

/* element i of src (dtype t) widened to double */
static double load_at(const void *src, rc_dtype t, int64_t i)
{
    switch (t) {
    case RC_F32: return ((const float *)src)[i];
    case RC_F64: return ((const double *)src)[i];
    case RC_BF16: return rci_bf16_to_f32(((const uint16_t *)src)[i]);
    default: return rci_f16_to_f32(((const uint16_t *)src)[i]);
    }
}

static int convertible(rc_dtype t)
{
    return t == RC_F32 || t == RC_F64 || t == RC_BF16 || t == RC_F16;
}

int rc_convert(void *dst, rc_dtype dt, const void *src, rc_dtype st, int64_t n)
{
    if (!convertible(dt) || !convertible(st) || n < 0 || (n > 0 && (!dst || !src)))
        return -1;
    if (dt == st) {
        memmove(dst, src, (size_t)n * rc_dtype_size(dt));
        return 0;
    }
    for (int64_t i = 0; i < n; i++) {
        /* a 16-bit source widens exactly to f32; f64 -> 16-bit goes through f32, which can
         * round twice (the f64 value within 2^-25 relative of a 16-bit tie) */
        double v = load_at(src, st, i);
        switch (dt) {
        case RC_F32: ((float *)dst)[i] = (float)v; break;
        case RC_F64: ((double *)dst)[i] = v; break;
        case RC_BF16: ((uint16_t *)dst)[i] = rci_f32_to_bf16((float)v); break;
        default: ((uint16_t *)dst)[i] = rci_f32_to_f16((float)v); break;
        }
    }
    return 0;
}
