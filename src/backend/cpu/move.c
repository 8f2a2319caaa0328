/* move.c - data movement kernels that only care about element sizes: permute, slice
 * (the copying form), pad, concat, expand; and cast between f32, f64, bf16, f16 and i32.
 *
 * Every movement op is one or more strided copies: an n-D box of elements read with one
 * set of element strides and written with another. Size-1 axes are dropped and axes that
 * continue each other in both are merged, so most copies end as rows of memcpy. */
#include "cpu.h"
#include "half.h"

#include <omp.h>
#include <string.h>

enum {
    PAR_MIN = 32768,  /* elements below which a copy runs on one thread */
    CHUNK_MIN = 4096, /* the shortest piece a long row is split into for threads */
    TILE = 32         /* side of the square tiles of a transposing copy */
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

static int bad_shape(const rc_tensor *node, rc_error *err)
{
    char s[96];
    return rc_error_set(err, RC_ERR_SHAPE, "%s: input shapes do not fit the output %s",
                        rc_op_name(node->op), rc_shape_str(node, s, sizeof s));
}

/* out axis i = src axis iparam[i] */
static int move_permute(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    const rc_tensor *s = node->src[0];
    int nd = node->ndim;
    if (s->ndim != nd)
        return bad_shape(node, err);
    int64_t sst[RC_MAX_DIMS], ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    rci_contiguous_strides(s->ndim, s->shape, sst);
    rci_contiguous_strides(node->ndim, node->shape, ds);
    int seen = 0;
    for (int i = 0; i < nd; i++) {
        int p = node->iparam[i];
        if (p < 0 || p >= nd || (seen >> p) & 1 || s->shape[p] != node->shape[i])
            return rc_error_set(err, RC_ERR_ARG, "permute: axis %d of the permutation is %d", i, p);
        seen |= 1 << p;
        ss[i] = sst[p];
    }
    copy_strided(io->out, ds, io->in[0], ss, nd, node->shape, rc_dtype_size(node->dtype));
    return 0;
}

/* src0 along axis iparam[0], [iparam[1], iparam[2]) */
static int move_slice(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    const rc_tensor *s = node->src[0];
    int nd = node->ndim, ax = node->iparam[0];
    int64_t start = node->iparam[1], end = node->iparam[2];
    if (s->ndim != nd || ax < 0 || ax >= nd || start < 0 || end > s->shape[ax] ||
        end - start != node->shape[ax])
        return bad_shape(node, err);
    for (int i = 0; i < nd; i++)
        if (i != ax && s->shape[i] != node->shape[i])
            return bad_shape(node, err);
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    rci_contiguous_strides(s->ndim, s->shape, ss);
    rci_contiguous_strides(node->ndim, node->shape, ds);
    size_t es = rc_dtype_size(node->dtype);
    copy_strided(io->out, ds, (const char *)io->in[0] + start * ss[ax] * (int64_t)es, ss, nd,
                 node->shape, es);
    return 0;
}

/* src0 placed at offset iparam[1] along axis iparam[0] in zeros of the node's shape */
static int move_pad(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    const rc_tensor *s = node->src[0];
    int nd = node->ndim, ax = node->iparam[0];
    int64_t before = node->iparam[1];
    if (s->ndim != nd || ax < 0 || ax >= nd || before < 0 || before + s->shape[ax] > node->shape[ax])
        return bad_shape(node, err);
    for (int i = 0; i < nd; i++)
        if (i != ax && s->shape[i] != node->shape[i])
            return bad_shape(node, err);
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    rci_contiguous_strides(s->ndim, s->shape, ss);
    rci_contiguous_strides(node->ndim, node->shape, ds);
    size_t es = rc_dtype_size(node->dtype);
    memset(io->out, 0, rc_tensor_nbytes(node));
    copy_strided((char *)io->out + before * ds[ax] * (int64_t)es, ds, io->in[0], ss, nd, s->shape,
                 es);
    return 0;
}

/* src0 .. src{n-1} joined along axis iparam[0] */
static int move_concat(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    int nd = node->ndim, ax = node->iparam[0];
    if (ax < 0 || ax >= nd)
        return bad_shape(node, err);
    int64_t at = 0;
    for (int k = 0; k < node->nsrc; k++) {
        const rc_tensor *s = node->src[k];
        if (s->ndim != nd)
            return bad_shape(node, err);
        for (int i = 0; i < nd; i++)
            if (i != ax && s->shape[i] != node->shape[i])
                return bad_shape(node, err);
        at += s->shape[ax];
    }
    if (at != node->shape[ax])
        return bad_shape(node, err);
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    rci_contiguous_strides(node->ndim, node->shape, ds);
    size_t es = rc_dtype_size(node->dtype);
    at = 0;
    for (int k = 0; k < node->nsrc; k++) {
        const rc_tensor *s = node->src[k];
        rci_contiguous_strides(s->ndim, s->shape, ss);
        copy_strided((char *)io->out + at * ds[ax] * (int64_t)es, ds, io->in[k], ss, nd, s->shape,
                     es);
        at += s->shape[ax];
    }
    return 0;
}

/* src0 broadcast to the node's shape (right-aligned; size-1 or missing axes repeat) */
static int move_expand(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    const rc_tensor *s = node->src[0];
    int nd = node->ndim;
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    if (rci_bcast_strides(s, nd, node->shape, ss))
        return bad_shape(node, err);
    rci_contiguous_strides(node->ndim, node->shape, ds);
    copy_strided(io->out, ds, io->in[0], ss, nd, node->shape, rc_dtype_size(node->dtype));
    return 0;
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

/* element i of x (dtype t) as a double; 16-bit values widen exactly */
static double cast_load(const void *x, rc_dtype t, int64_t i)
{
    switch (t) {
    case RC_F32: return ((const float *)x)[i];
    case RC_F64: return ((const double *)x)[i];
    case RC_I32: return ((const int32_t *)x)[i];
    case RC_BF16: return rci_bf16_to_f32(((const uint16_t *)x)[i]);
    default: return rci_f16_to_f32(((const uint16_t *)x)[i]);
    }
}

/* v stored as element i of y (dtype t); to 16 bits through f32 (f64 and i32 values round
 * twice: to f32, then to 16 bits) */
static void cast_store(void *y, rc_dtype t, int64_t i, double v)
{
    switch (t) {
    case RC_F32: ((float *)y)[i] = (float)v; break;
    case RC_F64: ((double *)y)[i] = v; break;
    case RC_I32: ((int32_t *)y)[i] = to_i32(v); break;
    case RC_BF16: ((uint16_t *)y)[i] = rci_f32_to_bf16((float)v); break;
    default: ((uint16_t *)y)[i] = rci_f32_to_f16((float)v); break;
    }
}

/* elements [i0, i1) of a cast; the node's src0 holds the input */
static void cast_range(void *ctx, int64_t i0, int64_t i1)
{
    const rci_cpu_args *io = ctx;
    const rc_tensor *node = io->node;
    const void *x = io->in[0];
    void *y = io->out;
    rc_dtype from = node->src[0]->dtype, to = node->dtype;
    if (to == RC_F32 && (from == RC_BF16 || from == RC_F16)) {
        rci_cpu_widen((float *)y + i0, (const uint16_t *)x + i0, from, i1 - i0);
    } else if (from == RC_F32 && (to == RC_BF16 || to == RC_F16)) {
        rci_cpu_narrow((uint16_t *)y + i0, (const float *)x + i0, to, i1 - i0);
    } else if (from == RC_BF16 || from == RC_F16 || to == RC_BF16 || to == RC_F16) {
        for (int64_t i = i0; i < i1; i++)
            cast_store(y, to, i, cast_load(x, from, i));
    } else if (from == RC_F32 && to == RC_F64) {
        const float *restrict a = x;
        double *restrict b = y;
        for (int64_t i = i0; i < i1; i++)
            b[i] = a[i];
    } else if (from == RC_F64 && to == RC_F32) {
        const double *restrict a = x;
        float *restrict b = y;
        for (int64_t i = i0; i < i1; i++)
            b[i] = (float)a[i];
    } else if (from == RC_I32 && to == RC_F32) {
        const int32_t *restrict a = x;
        float *restrict b = y;
        for (int64_t i = i0; i < i1; i++)
            b[i] = (float)a[i];
    } else if (from == RC_I32 && to == RC_F64) {
        const int32_t *restrict a = x;
        double *restrict b = y;
        for (int64_t i = i0; i < i1; i++)
            b[i] = a[i];
    } else if (from == RC_F32 && to == RC_I32) {
        const float *restrict a = x;
        int32_t *restrict b = y;
        for (int64_t i = i0; i < i1; i++)
            b[i] = to_i32(a[i]);
    } else { /* f64 -> i32 */
        const double *restrict a = x;
        int32_t *restrict b = y;
        for (int64_t i = i0; i < i1; i++)
            b[i] = to_i32(a[i]);
    }
}

static int cast_supported(rc_dtype t)
{
    return (unsigned)t < RC_DTYPE_COUNT;
}

static int move_cast(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    const rc_tensor *s = node->src[0];
    int64_t n = rc_tensor_numel(node);
    if (rc_tensor_numel(s) != n)
        return bad_shape(node, err);
    if (s->dtype == node->dtype) {
        memcpy(io->out, io->in[0], rc_tensor_nbytes(node));
        return 0;
    }
    if (!cast_supported(s->dtype) || !cast_supported(node->dtype))
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "cast: %s to %s is not supported",
                            rc_dtype_name(s->dtype), rc_dtype_name(node->dtype));
    par_range(cast_range, (void *)io, n, n);
    return 0;
}

int rci_cpu_is_move(rc_op op)
{
    return op == RC_OP_PERMUTE || op == RC_OP_SLICE || op == RC_OP_PAD || op == RC_OP_CONCAT ||
           op == RC_OP_EXPAND || op == RC_OP_CAST;
}

int rci_cpu_kernel_move(const rci_cpu_args *io, rc_error *err)
{
    const rc_tensor *node = io->node;
    rc_op op = node->op;
    if (op != RC_OP_PERMUTE && op != RC_OP_SLICE && op != RC_OP_PAD && op != RC_OP_CONCAT &&
        op != RC_OP_EXPAND && op != RC_OP_CAST)
        return 0;
    if (node->nsrc < 1)
        return rc_error_set(err, RC_ERR_ARG, "%s: no input", rc_op_name(op));
    for (int k = 0; k < node->nsrc; k++) {
        const rc_tensor *s = node->src[k];
        if (!s)
            return rc_error_set(err, RC_ERR_ARG, "%s: input %d is missing", rc_op_name(op), k);
        if (op != RC_OP_CAST && s->dtype != node->dtype)
            return rc_error_set(err, RC_ERR_DTYPE, "%s: input %d has dtype %s, output %s",
                                rc_op_name(op), k, rc_dtype_name(s->dtype),
                                rc_dtype_name(node->dtype));
    }
    if (rc_dtype_size(node->dtype) == 0)
        return rc_error_set(err, RC_ERR_DTYPE, "%s: unknown dtype %d", rc_op_name(op),
                            (int)node->dtype);
    if (rc_tensor_numel(node) == 0)
        return 1;
    int r;
    switch (op) {
    case RC_OP_PERMUTE: r = move_permute(io, err); break;
    case RC_OP_SLICE: r = move_slice(io, err); break;
    case RC_OP_PAD: r = move_pad(io, err); break;
    case RC_OP_CONCAT: r = move_concat(io, err); break;
    case RC_OP_EXPAND: r = move_expand(io, err); break;
    default: r = move_cast(io, err); break;
    }
    return r < 0 ? -1 : 1;
}
