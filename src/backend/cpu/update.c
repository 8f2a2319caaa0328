/* update.c - the CPU backend's optimizer work: SGD and AdamW (decoupled decay) with
 * gradient clipping, gradient accumulation, and the sum of squares behind the gradient
 * norm.
 *
 * The update works in blocks of UPDATE_BLOCK floats: a block's gradient, parameters and
 * moments stay in cache between clipping and the update, and the blocks of every
 * parameter are shared among the threads of one parallel region. The inner loops are
 * vectorised (this file is built with -fno-math-errno so sqrtf becomes the vector
 * instruction; the results are the same correctly rounded floats). Everything that
 * depends only on the step is computed once per call, outside the loops. */
#include "cpu.h"
#include "half.h"

#include <math.h>

/* Fixed, so the gradient norm sums in the same order at any thread count. */
enum { UPDATE_BLOCK = 1 << 16 };

static float *floats(const rc_buffer *b)
{
    return b ? (float *)b->impl : NULL;
}

static void sgd_block(float *restrict w, const float *restrict g, int64_t n, float lr)
{
    for (int64_t i = 0; i < n; i++)
        w[i] -= lr * g[i];
}

/* one pass: reads w, g, m, v and writes w, m, v (28 bytes per parameter) */
static void adamw_block(float *restrict w, const float *restrict g, float *restrict m,
                        float *restrict v, int64_t n, const rci_adam_consts *a, float decay)
{
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = a->b1 * m[i] + a->c1 * gi;
        float vi = a->b2 * v[i] + a->c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w[i] = w[i] * decay - a->step_size * (mi / (sqrtf(vi) / a->bc2_sqrt + a->eps));
    }
}

/* One part's blocks, shared among the threads of the caller's parallel region with no
 * wait at the end (the region's end is the one barrier of the whole update). */
static void update_part(const rci_update *u, const rci_update_part *p, const rci_adam_consts *a)
{
    if (p->n <= 0) /* a part outside this rank's share: its offsets need not point inside */
        return;
    float *w = floats(u->w) + (p->at - u->w_at), *g = floats(u->grad) + p->at;
    int64_t sat = p->at - u->state_at; /* the part's start in m and v */
    float *m = u->adamw ? floats(u->m) + sat : NULL, *v = u->adamw ? floats(u->v) + sat : NULL;
    float decay = (float)(1.0 - u->lr * p->weight_decay), clip = (float)u->grad_scale;
    int64_t nb = (p->n + UPDATE_BLOCK - 1) / UPDATE_BLOCK;
#pragma omp for schedule(static) nowait
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * UPDATE_BLOCK, len = p->n - lo < UPDATE_BLOCK ? p->n - lo : UPDATE_BLOCK;
        if (clip != 1.0f)
            for (int64_t j = lo; j < lo + len; j++)
                g[j] *= clip;
        if (u->adamw) {
            adamw_block(w + lo, g + lo, m + lo, v + lo, len, a, decay);
        } else {
            if (p->weight_decay > 0)
                for (int64_t j = lo; j < lo + len; j++)
                    w[j] *= decay;
            sgd_block(w + lo, g + lo, len, (float)u->lr);
        }
    }
}

int rci_cpu_update(rc_backend *be, const rci_update *u, rc_error *err)
{
    (void)be, (void)err;
    rci_adam_consts a = rci_adam_setup(u);
    int64_t total = 0;
    for (int i = 0; i < u->nparts; i++)
        total += u->parts[i].n;
#pragma omp parallel if (total > UPDATE_BLOCK)
    for (int i = 0; i < u->nparts; i++)
        update_part(u, &u->parts[i], &a);
    return 0;
}

/* acc = scale * g, or acc += scale * g (add), over n f32 */
static void accumulate_f32(float *restrict acc, const float *restrict g, int64_t n, float scale, int add)
{
    if (add) {
#pragma omp parallel for simd schedule(static) if (n > UPDATE_BLOCK)
        for (int64_t j = 0; j < n; j++)
            acc[j] += scale * g[j];
    } else {
#pragma omp parallel for simd schedule(static) if (n > UPDATE_BLOCK)
        for (int64_t j = 0; j < n; j++)
            acc[j] = scale * g[j];
    }
}

/* the same from 16-bit g of dtype st: chunks widened exactly, then accumulated */
static void accumulate_half(float *acc, const uint16_t *g, rc_dtype st, int64_t n, float scale, int add)
{
    enum { CHUNK = 4096 };
    int64_t nb = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (n > UPDATE_BLOCK)
    for (int64_t b = 0; b < nb; b++) {
        float wide[CHUNK];
        int64_t lo = b * CHUNK, len = n - lo < CHUNK ? n - lo : CHUNK;
        rci_half_widen_run(wide, g + lo, st, len);
        accumulate_f32(acc + lo, wide, len, scale, add);
    }
}

int rci_cpu_accumulate(rc_backend *be, rc_buffer *dst, int64_t dat, const rc_buffer *src,
                       size_t soff, int64_t n, rc_dtype st, float scale, int add, rc_error *err)
{
    const void *g = (const char *)src->impl + soff;
    if (st == RC_F32)
        accumulate_f32(floats(dst) + dat, g, n, scale, add);
    else if (st == RC_BF16 || st == RC_F16)
        accumulate_half(floats(dst) + dat, g, st, n, scale, add);
    else
        return rc_error_set(err, RC_ERR_DTYPE, "%s: accumulate from %s gradients (f32, bf16 or f16)", be->name,
                            rc_dtype_name(st));
    return 0;
}

int rci_cpu_round_f32(rc_backend *be, rc_buffer *dst, int64_t dat, rc_dtype dt, const rc_buffer *src,
                      int64_t sat, int64_t n, rc_error *err)
{
    if (dt != RC_BF16 && dt != RC_F16)
        return rc_error_set(err, RC_ERR_DTYPE, "%s: round f32 into %s (bf16 or f16)", be->name, rc_dtype_name(dt));
    if (n > 0)
        rc_convert((uint16_t *)dst->impl + dat, dt, floats(src) + sat, RC_F32, n);
    return 0;
}

/* sum of squares of g[lo..hi) in double, in 8 lanes (lane k takes every 8th element from
 * k) added in a fixed order: vectorisable, and the same result every time */
static double block_squares(const float *g, int64_t lo, int64_t hi)
{
    double lane[8] = {0};
    int64_t j = lo;
    for (; j + 8 <= hi; j += 8)
        for (int k = 0; k < 8; k++)
            lane[k] += (double)g[j + k] * g[j + k];
    for (int k = 0; j < hi; j++, k++)
        lane[k] += (double)g[j] * g[j];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

/* blocks of UPDATE_BLOCK over the threads, their sums added in order */
static double sum_squares(const float *g, int64_t n)
{
    enum { GROUP = 256 }; /* blocks per parallel pass */
    int64_t nb = (n + UPDATE_BLOCK - 1) / UPDATE_BLOCK;
    double total = 0, part[GROUP];
    for (int64_t b0 = 0; b0 < nb; b0 += GROUP) {
        int64_t count = nb - b0 < GROUP ? nb - b0 : GROUP;
#pragma omp parallel for schedule(static) if (count > 1)
        for (int64_t k = 0; k < count; k++) {
            int64_t lo = (b0 + k) * UPDATE_BLOCK, hi = lo + UPDATE_BLOCK < n ? lo + UPDATE_BLOCK : n;
            part[k] = block_squares(g, lo, hi);
        }
        for (int64_t k = 0; k < count; k++)
            total += part[k];
    }
    return total;
}

int rci_cpu_sum_squares(rc_backend *be, const rc_buffer *b, const rci_update_part *parts, int nparts,
                        double *out, rc_error *err)
{
    (void)be, (void)err;
    for (int k = 0; k < nparts; k++)
        out[k] = sum_squares(floats(b) + parts[k].at, parts[k].n);
    return 0;
}
