/* move.c - data movement kernels that only care about element sizes: permute, slice
 * (the copying form), pad, concat, expand; and cast between f32, f64, bf16, f16 and i32.
 *
 * Every movement op is one or more strided copies: an n-D box of elements read with one
 * set of element strides and written with another. Size-1 axes are dropped and axes that
 * continue each other in both are merged, so most copies end as rows of memcpy. */
#include "cpu.h"

#include <omp.h>
#include <string.h>

enum {
    PAR_MIN = 32768,  /* elements below which a copy runs on one thread */
    CHUNK_MIN = 4096, /* the shortest piece a long row is split into for threads */
    TILE = 32,        /* side of the square tiles of a transposing copy */
    CAST_BLOCK = 256  /* elements a cast from or to i32 takes through doubles at a time */
};

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Work on [i0, i1) of something. */
typedef void (*range_fn)(void *ctx, int64_t i0, int64_t i1);

/* Runs fn over [0, n): in one call on this thread when work <= PAR_MIN elements (or there
 * is one thread), else in one contiguous part per thread. */
static void par_range(range_fn fn, void *ctx, int64_t n, int64_t work)
{
    int64_t parts = omp_get_max_threads();
    parts = parts < n ? parts : n;
    if (work <= PAR_MIN || parts < 2 || omp_in_parallel()) {
        fn(ctx, 0, n);
        return;
    }
    #pragma omp parallel for schedule(static) num_threads((int)parts)
    for (int64_t p = 0; p < parts; p++)
        fn(ctx, n * p / parts, n * (p + 1) / parts);
}

/* n elements of size es from src (element stride ss) to dst (element stride ds). */
static void copy_row(char *dst, int64_t ds, const char *src, int64_t ss, int64_t n, size_t es)
{
    if (ds == 1 && ss == 1) {
        memcpy(dst, src, (size_t)n * es);
    } else if (es == 4) {
        uint32_t *restrict d = (uint32_t *)(void *)dst;
        const uint32_t *restrict s = (const uint32_t *)(const void *)src;
        for (int64_t i = 0; i < n; i++)
            d[i * ds] = s[i * ss];
    } else if (es == 8) {
        uint64_t *restrict d = (uint64_t *)(void *)dst;
        const uint64_t *restrict s = (const uint64_t *)(const void *)src;
        for (int64_t i = 0; i < n; i++)
            d[i * ds] = s[i * ss];
    } else if (es == 2) {
        uint16_t *restrict d = (uint16_t *)(void *)dst;
        const uint16_t *restrict s = (const uint16_t *)(const void *)src;
        for (int64_t i = 0; i < n; i++)
            d[i * ds] = s[i * ss];
    } else {
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + i * ds * (int64_t)es, src + i * ss * (int64_t)es, es);
    }
}

/* A strided copy after merging axes: rows of the last axis (long rows cut into pieces of
 * len so that every thread gets work), or, for a transpose, square tiles of axis k (where
 * the source is contiguous) and the last axis (where the destination is). */
typedef struct {
    char *dst;
    const char *src;
    size_t es;
    int nd, k;
    int64_t shape[RC_MAX_DIMS], ds[RC_MAX_DIMS], ss[RC_MAX_DIMS];
    int64_t len, pieces;   /* rows */
    int64_t tk, tl;        /* tiles along axis k and the last axis */
} copy_plan;

/* pieces [t0, t1) of the rows */
static void copy_rows_range(void *ctx, int64_t t0, int64_t t1)
{
    const copy_plan *c = ctx;
    int l = c->nd - 1;
    int64_t n = c->shape[l];
    for (int64_t t = t0; t < t1; t++) {
        int64_t r = t / c->pieces, j0 = (t % c->pieces) * c->len, doff = j0 * c->ds[l];
        int64_t soff = j0 * c->ss[l];
        for (int i = l - 1; i >= 0; i--) {
            int64_t idx = r % c->shape[i];
            r /= c->shape[i];
            doff += idx * c->ds[i];
            soff += idx * c->ss[i];
        }
        copy_row(c->dst + doff * (int64_t)c->es, c->ds[l], c->src + soff * (int64_t)c->es, c->ss[l],
                 min64(c->len, n - j0), c->es);
    }
}

/* tiles [t0, t1) of a transposing copy of 4- or 8-byte elements: the source lines read for
 * one tile stay in cache while its destination rows are written */
static void copy_tiles_range(void *ctx, int64_t t0, int64_t t1)
{
    const copy_plan *c = ctx;
    int k = c->k, l = c->nd - 1;
    int64_t nk = c->shape[k], nl = c->shape[l], dk = c->ds[k], sl = c->ss[l];
    for (int64_t t = t0; t < t1; t++) {
        int64_t r = t / (c->tk * c->tl), i0 = (t / c->tl % c->tk) * TILE, j0 = (t % c->tl) * TILE;
        int64_t doff = 0, soff = 0;
        for (int a = l - 1; a >= 0; a--) {
            if (a == k)
                continue;
            int64_t idx = r % c->shape[a];
            r /= c->shape[a];
            doff += idx * c->ds[a];
            soff += idx * c->ss[a];
        }
        int64_t i1 = min64(i0 + TILE, nk), j1 = min64(j0 + TILE, nl);
        if (c->es == 4) {
            uint32_t *restrict d = (uint32_t *)(void *)c->dst + doff;
            const uint32_t *restrict s = (const uint32_t *)(const void *)c->src + soff;
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = j0; j < j1; j++)
                    d[i * dk + j] = s[i + j * sl];
        } else {
            uint64_t *restrict d = (uint64_t *)(void *)c->dst + doff;
            const uint64_t *restrict s = (const uint64_t *)(const void *)c->src + soff;
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = j0; j < j1; j++)
                    d[i * dk + j] = s[i + j * sl];
        }
    }
}

/* Copies the box shape[nd] from src (element strides ss) to dst (element strides ds). */
static void copy_strided(char *dst, const int64_t *ds, const char *src, const int64_t *ss, int nd,
                         const int64_t *shape, size_t es)
{
    copy_plan c;
    c.dst = dst;
    c.src = src;
    c.es = es;
    c.nd = 0;
    int64_t total = 1;
    for (int i = 0; i < nd; i++) {
        int64_t n = shape[i];
        total *= n;
        if (n == 1)
            continue;
        int d = c.nd;
        if (d > 0 && c.ds[d - 1] == ds[i] * n && c.ss[d - 1] == ss[i] * n) {
            c.shape[d - 1] *= n;
            c.ds[d - 1] = ds[i];
            c.ss[d - 1] = ss[i];
            continue;
        }
        c.shape[d] = n;
        c.ds[d] = ds[i];
        c.ss[d] = ss[i];
        c.nd++;
    }
    if (total == 0)
        return;
    if (c.nd == 0) {
        memcpy(dst, src, es);
        return;
    }
    int l = c.nd - 1;
    c.k = -1;
    if (c.ds[l] == 1 && c.ss[l] > 1 && (es == 4 || es == 8))
        for (int i = l - 1; i >= 0 && c.k < 0; i--)
            if (c.ss[i] == 1)
                c.k = i;
    if (c.k >= 0) {
        c.tk = (c.shape[c.k] + TILE - 1) / TILE;
        c.tl = (c.shape[l] + TILE - 1) / TILE;
        int64_t tiles = total / (c.shape[c.k] * c.shape[l]) * c.tk * c.tl;
        par_range(copy_tiles_range, &c, tiles, total);
        return;
    }
    int64_t n = c.shape[l], rows = total / n;
    int64_t want = 4 * (int64_t)omp_get_max_threads();
    c.len = n;
    if (total > PAR_MIN && rows < want) {
        int64_t per_row = (want + rows - 1) / rows;
        int64_t len = (n + per_row - 1) / per_row;
        len = len < CHUNK_MIN ? CHUNK_MIN : len;
        c.len = len < n ? len : n;
    }
    c.pieces = (n + c.len - 1) / c.len;
    par_range(copy_rows_range, &c, rows * c.pieces, total);
}

/* out axis i = src axis iparam[i] */
static void move_permute(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    const rc_tensor *s = node->src[0];
    int nd = node->ndim;
    int64_t sst[RC_MAX_DIMS], ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    rci_contiguous_strides(s->ndim, s->shape, sst);
    rci_contiguous_strides(node->ndim, node->shape, ds);
    for (int i = 0; i < nd; i++)
        ss[i] = sst[node->iparam[i]];
    copy_strided(io->out, ds, io->in[0], ss, nd, node->shape, rc_dtype_size(node->dtype));
}

/* src0 along axis iparam[0], [iparam[1], iparam[2]) */
static void move_slice(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    const rc_tensor *s = node->src[0];
    int nd = node->ndim, ax = node->iparam[0];
    int64_t start = node->iparam[1];
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    rci_contiguous_strides(s->ndim, s->shape, ss);
    rci_contiguous_strides(node->ndim, node->shape, ds);
    size_t es = rc_dtype_size(node->dtype);
    copy_strided(io->out, ds, (const char *)io->in[0] + start * ss[ax] * (int64_t)es, ss, nd,
                 node->shape, es);
}

/* src0 placed at offset iparam[1] along axis iparam[0] in zeros of the node's shape */
static void move_pad(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    const rc_tensor *s = node->src[0];
    int nd = node->ndim, ax = node->iparam[0];
    int64_t before = node->iparam[1];
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    rci_contiguous_strides(s->ndim, s->shape, ss);
    rci_contiguous_strides(node->ndim, node->shape, ds);
    size_t es = rc_dtype_size(node->dtype);
    memset(io->out, 0, rc_tensor_nbytes(node));
    copy_strided((char *)io->out + before * ds[ax] * (int64_t)es, ds, io->in[0], ss, nd, s->shape,
                 es);
}

/* src0 .. src{n-1} joined along axis iparam[0] */
static void move_concat(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    int nd = node->ndim, ax = node->iparam[0];
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS], at = 0;
    rci_contiguous_strides(node->ndim, node->shape, ds);
    size_t es = rc_dtype_size(node->dtype);
    for (int k = 0; k < node->nsrc; k++) {
        const rc_tensor *s = node->src[k];
        rci_contiguous_strides(s->ndim, s->shape, ss);
        copy_strided((char *)io->out + at * ds[ax] * (int64_t)es, ds, io->in[k], ss, nd, s->shape,
                     es);
        at += s->shape[ax];
    }
}

/* src0 broadcast to the node's shape (right-aligned; size-1 or missing axes repeat) */
static void move_expand(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    const rc_tensor *s = node->src[0];
    int nd = node->ndim;
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    rci_bcast_strides(s, nd, node->shape, ss);
    rci_contiguous_strides(node->ndim, node->shape, ds);
    copy_strided(io->out, ds, io->in[0], ss, nd, node->shape, rc_dtype_size(node->dtype));
}

/* float -> i32 truncates toward zero; NaN gives 0, out-of-range values saturate */
static int32_t to_i32(double v)
{
    if (v != v)
        return 0;
    if (v >= 2147483647.0)
        return INT32_MAX;
    if (v <= -2147483648.0)
        return INT32_MIN;
    return (int32_t)v;
}

/* n i32 at x converted to dtype `to` at y, and n elements of dtype `from` at x to i32 at y:
 * f32 and f64 directly, 16 bits through a block of doubles (exact for i32 and for 16-bit
 * values) and rc_convert, so i32 values round to 16 bits through f32 */
static void cast_from_i32(void *y, rc_dtype to, const int32_t *restrict x, int64_t n)
{
    if (to == RC_F32) {
        float *restrict b = y;
        for (int64_t i = 0; i < n; i++)
            b[i] = (float)x[i];
    } else if (to == RC_F64) {
        double *restrict b = y;
        for (int64_t i = 0; i < n; i++)
            b[i] = x[i];
    } else {
        double block[CAST_BLOCK];
        for (int64_t i = 0; i < n; i += CAST_BLOCK) {
            int64_t len = min64(CAST_BLOCK, n - i);
            cast_from_i32(block, RC_F64, x + i, len);
            rc_convert((char *)y + i * (int64_t)rc_dtype_size(to), to, block, RC_F64, len);
        }
    }
}

static void cast_to_i32(int32_t *restrict y, const void *x, rc_dtype from, int64_t n)
{
    if (from == RC_F32) {
        const float *restrict a = x;
        for (int64_t i = 0; i < n; i++)
            y[i] = to_i32(a[i]);
    } else if (from == RC_F64) {
        const double *restrict a = x;
        for (int64_t i = 0; i < n; i++)
            y[i] = to_i32(a[i]);
    } else {
        double block[CAST_BLOCK];
        for (int64_t i = 0; i < n; i += CAST_BLOCK) {
            int64_t len = min64(CAST_BLOCK, n - i);
            rc_convert(block, RC_F64, (const char *)x + i * (int64_t)rc_dtype_size(from), from, len);
            cast_to_i32(y + i, block, RC_F64, len);
        }
    }
}

/* elements [i0, i1) of a cast; the node's src0 holds the input. Between float dtypes it is
 * rc_convert (to 16 bits through f32: f64 values round twice, to f32, then to 16 bits). */
static void cast_range(void *ctx, int64_t i0, int64_t i1)
{
    const rci_cpu_args *io = ctx;
    const rc_tensor *node = io->node;
    rc_dtype from = node->src[0]->dtype, to = node->dtype;
    const char *x = (const char *)io->in[0] + i0 * (int64_t)rc_dtype_size(from);
    char *y = (char *)io->out + i0 * (int64_t)rc_dtype_size(to);
    if (from == RC_I32)
        cast_from_i32(y, to, (const int32_t *)(const void *)x, i1 - i0);
    else if (to == RC_I32)
        cast_to_i32((int32_t *)(void *)y, x, from, i1 - i0);
    else
        rc_convert(y, to, x, from, i1 - i0);
}

static void move_cast(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    int64_t n = rc_tensor_numel(node);
    if (node->src[0]->dtype == node->dtype)
        memcpy(io->out, io->in[0], rc_tensor_nbytes(node));
    else
        par_range(cast_range, (void *)io, n, n);
}

int rci_cpu_is_move(rc_op op)
{
    return op == RC_OP_PERMUTE || op == RC_OP_SLICE || op == RC_OP_PAD || op == RC_OP_CONCAT ||
           op == RC_OP_EXPAND || op == RC_OP_CAST;
}

int rci_cpu_kernel_move(const rci_cpu_args *io)
{
    const rc_tensor *node = io->node;
    if (!rci_cpu_is_move(node->op))
        return 0;
    if (rc_tensor_numel(node) == 0)
        return 1;
    switch (node->op) {
    case RC_OP_PERMUTE: move_permute(io); break;
    case RC_OP_SLICE: move_slice(io); break;
    case RC_OP_PAD: move_pad(io); break;
    case RC_OP_CONCAT: move_concat(io); break;
    case RC_OP_EXPAND: move_expand(io); break;
    default: move_cast(io); break;
    }
    return 1;
}
