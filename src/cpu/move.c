/* move.c - data movement kernels that only care about element sizes: permute, slice
 * (the copying form), pad, concat, expand; and cast between f32, f64 and i32.
 *
 * Every movement op is one or more strided copies: an n-D box of elements read with one
 * set of element strides and written with another. Size-1 axes are dropped and axes that
 * continue each other in both are merged, so most copies end as rows of memcpy. */
#include "internal.h"

#include <omp.h>
#include <string.h>

enum {
    PAR_MIN = 32768,  /* elements below which a copy runs on one thread */
    CHUNK_MIN = 4096  /* the shortest piece a long row is split into for threads */
};

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Contiguous element strides of t. */
static void contiguous_strides(const rc_tensor *t, int64_t *st)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        st[i] = s;
        s *= t->shape[i];
    }
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

/* Copies the box shape[nd] from src (element strides ss) to dst (element strides ds). */
static void copy_strided(char *dst, const int64_t *ds_in, const char *src, const int64_t *ss_in,
                         int nd_in, const int64_t *shape_in, size_t es)
{
    int nd = 0;
    int64_t shape[RC_MAX_DIMS], ds[RC_MAX_DIMS], ss[RC_MAX_DIMS];
    int64_t total = 1;
    for (int i = 0; i < nd_in; i++) {
        int64_t n = shape_in[i];
        total *= n;
        if (n == 1)
            continue;
        if (nd > 0 && ds[nd - 1] == ds_in[i] * n && ss[nd - 1] == ss_in[i] * n) {
            shape[nd - 1] *= n;
            ds[nd - 1] = ds_in[i];
            ss[nd - 1] = ss_in[i];
            continue;
        }
        shape[nd] = n;
        ds[nd] = ds_in[i];
        ss[nd] = ss_in[i];
        nd++;
    }
    if (total == 0)
        return;
    if (nd == 0) {
        memcpy(dst, src, es);
        return;
    }
    /* rows of the last merged axis, long rows cut into pieces so every thread gets work */
    int64_t n = shape[nd - 1], rows = total / n, len = n;
    if (total > PAR_MIN) {
        int64_t want = 4 * (int64_t)omp_get_max_threads();
        if (rows < want) {
            int64_t per_row = (want + rows - 1) / rows;
            len = (n + per_row - 1) / per_row;
            len = len < CHUNK_MIN ? CHUNK_MIN : len;
            len = len < n ? len : n;
        }
    }
    int64_t pieces = (n + len - 1) / len, tasks = rows * pieces;
    int64_t dsi = ds[nd - 1], ssi = ss[nd - 1];
    #pragma omp parallel for if(total > PAR_MIN) schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t r = t / pieces, j0 = (t % pieces) * len, doff = 0, soff = 0;
        for (int i = nd - 2; i >= 0; i--) {
            int64_t idx = r % shape[i];
            r /= shape[i];
            doff += idx * ds[i];
            soff += idx * ss[i];
        }
        doff += j0 * dsi;
        soff += j0 * ssi;
        copy_row(dst + doff * (int64_t)es, dsi, src + soff * (int64_t)es, ssi, min64(len, n - j0),
                 es);
    }
}

static int bad_shape(const rc_tensor *node, rc_error *err)
{
    char s[96];
    return rc_error_set(err, RC_ERR_SHAPE, "%s: input shapes do not fit the output %s",
                        rc_op_name(node->op), rc_shape_str(node, s, sizeof s));
}

/* out axis i = src axis iparam[i] */
static int move_permute(rc_tensor *node, rc_error *err)
{
    const rc_tensor *s = node->src[0];
    int nd = node->ndim;
    if (s->ndim != nd)
        return bad_shape(node, err);
    int64_t sst[RC_MAX_DIMS], ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    contiguous_strides(s, sst);
    contiguous_strides(node, ds);
    int seen = 0;
    for (int i = 0; i < nd; i++) {
        int p = node->iparam[i];
        if (p < 0 || p >= nd || (seen >> p) & 1 || s->shape[p] != node->shape[i])
            return rc_error_set(err, RC_ERR_ARG, "permute: axis %d of the permutation is %d", i, p);
        seen |= 1 << p;
        ss[i] = sst[p];
    }
    copy_strided(node->data, ds, s->data, ss, nd, node->shape, rc_dtype_size(node->dtype));
    return 0;
}

/* src0 along axis iparam[0], [iparam[1], iparam[2]) */
static int move_slice(rc_tensor *node, rc_error *err)
{
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
    contiguous_strides(s, ss);
    contiguous_strides(node, ds);
    size_t es = rc_dtype_size(node->dtype);
    copy_strided(node->data, ds, (const char *)s->data + start * ss[ax] * (int64_t)es, ss, nd,
                 node->shape, es);
    return 0;
}

/* src0 placed at offset iparam[1] along axis iparam[0] in zeros of the node's shape */
static int move_pad(rc_tensor *node, rc_error *err)
{
    const rc_tensor *s = node->src[0];
    int nd = node->ndim, ax = node->iparam[0];
    int64_t before = node->iparam[1];
    if (s->ndim != nd || ax < 0 || ax >= nd || before < 0 || before + s->shape[ax] > node->shape[ax])
        return bad_shape(node, err);
    for (int i = 0; i < nd; i++)
        if (i != ax && s->shape[i] != node->shape[i])
            return bad_shape(node, err);
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS];
    contiguous_strides(s, ss);
    contiguous_strides(node, ds);
    size_t es = rc_dtype_size(node->dtype);
    memset(node->data, 0, rc_tensor_nbytes(node));
    copy_strided((char *)node->data + before * ds[ax] * (int64_t)es, ds, s->data, ss, nd, s->shape,
                 es);
    return 0;
}

/* src0 .. src{n-1} joined along axis iparam[0] */
static int move_concat(rc_tensor *node, rc_error *err)
{
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
    contiguous_strides(node, ds);
    size_t es = rc_dtype_size(node->dtype);
    at = 0;
    for (int k = 0; k < node->nsrc; k++) {
        const rc_tensor *s = node->src[k];
        contiguous_strides(s, ss);
        copy_strided((char *)node->data + at * ds[ax] * (int64_t)es, ds, s->data, ss, nd, s->shape,
                     es);
        at += s->shape[ax];
    }
    return 0;
}

/* src0 broadcast to the node's shape (right-aligned; size-1 or missing axes repeat) */
static int move_expand(rc_tensor *node, rc_error *err)
{
    const rc_tensor *s = node->src[0];
    int nd = node->ndim, off = nd - s->ndim;
    if (off < 0)
        return bad_shape(node, err);
    int64_t ss[RC_MAX_DIMS], ds[RC_MAX_DIMS], st = 1;
    for (int i = nd - 1; i >= 0; i--) {
        int j = i - off;
        if (j < 0 || s->shape[j] == 1) {
            ss[i] = 0;
        } else if (s->shape[j] == node->shape[i]) {
            ss[i] = st;
            st *= s->shape[j];
        } else {
            return bad_shape(node, err);
        }
    }
    contiguous_strides(node, ds);
    copy_strided(node->data, ds, s->data, ss, nd, node->shape, rc_dtype_size(node->dtype));
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

static int move_cast(rc_tensor *node, rc_error *err)
{
    const rc_tensor *s = node->src[0];
    rc_dtype from = s->dtype, to = node->dtype;
    int64_t n = rc_tensor_numel(node);
    if (rc_tensor_numel(s) != n)
        return bad_shape(node, err);
    if (from == to) {
        memcpy(node->data, s->data, rc_tensor_nbytes(node));
        return 0;
    }
    int par = n > PAR_MIN;
    if (from == RC_F32 && to == RC_F64) {
        const float *restrict x = s->data;
        double *restrict y = node->data;
        #pragma omp parallel for if(par) schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i];
    } else if (from == RC_F64 && to == RC_F32) {
        const double *restrict x = s->data;
        float *restrict y = node->data;
        #pragma omp parallel for if(par) schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = (float)x[i];
    } else if (from == RC_I32 && to == RC_F32) {
        const int32_t *restrict x = s->data;
        float *restrict y = node->data;
        #pragma omp parallel for if(par) schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = (float)x[i];
    } else if (from == RC_I32 && to == RC_F64) {
        const int32_t *restrict x = s->data;
        double *restrict y = node->data;
        #pragma omp parallel for if(par) schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i];
    } else if (from == RC_F32 && to == RC_I32) {
        const float *restrict x = s->data;
        int32_t *restrict y = node->data;
        #pragma omp parallel for if(par) schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = to_i32(x[i]);
    } else if (from == RC_F64 && to == RC_I32) {
        const double *restrict x = s->data;
        int32_t *restrict y = node->data;
        #pragma omp parallel for if(par) schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = to_i32(x[i]);
    } else {
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "cast: %s to %s is not supported",
                            rc_dtype_name(from), rc_dtype_name(to));
    }
    return 0;
}

int rc_cpu_kernel_move(rc_tensor *node, rc_error *err)
{
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
    case RC_OP_PERMUTE: r = move_permute(node, err); break;
    case RC_OP_SLICE: r = move_slice(node, err); break;
    case RC_OP_PAD: r = move_pad(node, err); break;
    case RC_OP_CONCAT: r = move_concat(node, err); break;
    case RC_OP_EXPAND: r = move_expand(node, err); break;
    default: r = move_cast(node, err); break;
    }
    return r < 0 ? -1 : 1;
}
