/* half.c - the public 16-bit conversions: scalars, over the inline functions of half.h,
 * and rc_convert, the one converter of arrays between the float dtypes (f32, f64, bf16,
 * f16) that the kernels, the optimizer, the collectives and the file readers share.
 *
 * Every pair converts directly or through f32: 16-bit <-> f32 by the runs of half.h (F16C
 * for f16 where the build targets it), f32 <-> f64 by a cast, and the pairs without f32
 * (16-bit <-> f64, bf16 <-> f16) through a block of f32 on the stack, so a 16-bit value
 * widens exactly and f64 reaches 16 bits through f32. Long arrays are cut into one piece
 * per OpenMP thread (never inside a parallel region). */
#include "half.h"
#include "internal.h"

#include <omp.h>

enum {
    PAR_MIN = 32768,  /* elements below which an array converts on one thread */
    BLOCK = 256       /* elements of the f32 block of the pairs without f32 */
};

float rc_bf16_to_f32(uint16_t h) { return rci_bf16_to_f32(h); }
uint16_t rc_f32_to_bf16(float f) { return rci_f32_to_bf16(f); }
float rc_f16_to_f32(uint16_t h) { return rci_f16_to_f32(h); }
uint16_t rc_f32_to_f16(float f) { return rci_f32_to_f16(f); }

static int convertible(rc_dtype t)
{
    return t == RC_F32 || t == RC_F64 || t == RC_BF16 || t == RC_F16;
}

static const char *at(const void *p, rc_dtype t, int64_t i)
{
    return (const char *)p + i * (int64_t)rc_dtype_size(t);
}

/* n elements from src (st) to dst (dt), two different dtypes, on this thread; dst and src
 * do not overlap */
static void convert_run(void *dst, rc_dtype dt, const void *src, rc_dtype st, int64_t n)
{
    if (st == RC_F32 && dt == RC_F64) {
        const float *restrict a = src;
        double *restrict b = dst;
        for (int64_t i = 0; i < n; i++)
            b[i] = a[i];
    } else if (st == RC_F64 && dt == RC_F32) {
        const double *restrict a = src;
        float *restrict b = dst;
        for (int64_t i = 0; i < n; i++)
            b[i] = (float)a[i];
    } else if (st == RC_F32) {
        rci_half_narrow_run(dst, src, dt, n);
    } else if (dt == RC_F32) {
        rci_half_widen_run(dst, src, st, n);
    } else { /* neither is f32: through an f32 block */
        float block[BLOCK];
        for (int64_t i = 0; i < n; i += BLOCK) {
            int64_t len = n - i < BLOCK ? n - i : BLOCK;
            convert_run(block, RC_F32, at(src, st, i), st, len);
            convert_run((void *)at(dst, dt, i), dt, block, RC_F32, len);
        }
    }
}

/* the same when dst and src overlap (a conversion in place): through a block on the stack,
 * front to back when dt is no wider than st (its writes stay behind the reads), else back
 * to front */
static void convert_overlapping(void *dst, rc_dtype dt, const void *src, rc_dtype st, int64_t n)
{
    double block[BLOCK];   /* BLOCK elements of any dtype */
    int64_t blocks = (n + BLOCK - 1) / BLOCK;
    int forward = rc_dtype_size(dt) <= rc_dtype_size(st);
    for (int64_t b = 0; b < blocks; b++) {
        int64_t i = (forward ? b : blocks - 1 - b) * BLOCK, len = n - i < BLOCK ? n - i : BLOCK;
        convert_run(block, dt, at(src, st, i), st, len);
        memcpy((void *)at(dst, dt, i), block, (size_t)len * rc_dtype_size(dt));
    }
}

static int overlap(const void *dst, size_t dbytes, const void *src, size_t sbytes)
{
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
    return d < s + sbytes && s < d + dbytes;
}

int rc_convert(void *dst, rc_dtype dt, const void *src, rc_dtype st, int64_t n)
{
    if (!convertible(dt) || !convertible(st) || n < 0 || (n > 0 && (!dst || !src)))
        return -1;
    if (n == 0)
        return 0;
    if (dt == st) {
        memmove(dst, src, (size_t)n * rc_dtype_size(dt));
        return 0;
    }
    if (overlap(dst, (size_t)n * rc_dtype_size(dt), src, (size_t)n * rc_dtype_size(st))) {
        convert_overlapping(dst, dt, src, st, n);
        return 0;
    }
    int64_t parts = n > PAR_MIN && !omp_in_parallel() ? omp_get_max_threads() : 1;
    if (parts < 2) {
        convert_run(dst, dt, src, st, n);
        return 0;
    }
    #pragma omp parallel for schedule(static) num_threads((int)parts)
    for (int64_t p = 0; p < parts; p++) {
        int64_t i0 = n * p / parts, i1 = n * (p + 1) / parts;
        convert_run((void *)at(dst, dt, i0), dt, at(src, st, i0), st, i1 - i0);
    }
    return 0;
}
