/* ops_shape.c - builders that change shapes: reshape and leading slices (free views),
 * permute, pad, concat, split, reductions, expand and sum_to. */
#include "internal.h"

/* Makes y a view of a at a byte offset into a's storage. */
static rc_tensor *as_view(rc_tensor *y, rc_tensor *a, int64_t byte_offset)
{
    if (!y)
        return NULL;
    y->view_src = a->view_src ? a->view_src : a;
    y->view_offset = a->view_offset + byte_offset;
    return y;
}

rc_tensor *rc_reshape(rc_graph *g, rc_tensor *a, int ndim, const int64_t *shape)
{
    if (rci_inputs_bad(g, 1, &a))
        return NULL;
    if (ndim < 0 || ndim > RC_MAX_DIMS || (ndim > 0 && !shape))
        return rci_fail(g, RC_ERR_ARG, "reshape: %d dimensions", ndim);
    int64_t s[RC_MAX_DIMS], known = 1;
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        s[i] = shape[i];
        if (s[i] == -1 && infer < 0)
            infer = i;
        else if (s[i] < 0)
            return rci_fail(g, RC_ERR_SHAPE, "reshape: bad extent %lld in dimension %d",
                           (long long)s[i], i);
        else
            known *= s[i];
    }
    int64_t n = rc_tensor_numel(a);
    if (infer >= 0 && known > 0 && n % known == 0)
        s[infer] = n / known;
    if (rci_shape_numel(ndim, s) != n || (infer >= 0 && known == 0)) {
        char sa[96];
        rc_tensor want = {.ndim = ndim};
        for (int i = 0; i < ndim; i++)
            want.shape[i] = shape[i];
        char sw[96];
        return rci_fail(g, RC_ERR_SHAPE, "reshape: %s (%lld elements) cannot become %s",
                       rc_shape_str(a, sa, sizeof sa), (long long)n, rc_shape_str(&want, sw, sizeof sw));
    }
    rc_tensor same = {.ndim = ndim};
    for (int i = 0; i < ndim; i++)
        same.shape[i] = s[i];
    if (rci_same_shape(a, &same))
        return a;
    return as_view(rci_node_new(g, RC_OP_RESHAPE, a->dtype, ndim, s, 1, &a), a, 0);
}

rc_tensor *rc_stop_gradient(rc_graph *g, rc_tensor *a)
{
    if (rci_inputs_bad(g, 1, &a))
        return NULL;
    return as_view(rci_node_new(g, RC_OP_STOP_GRADIENT, a->dtype, a->ndim, a->shape, 1, &a), a, 0);
}

rc_tensor *rc_mp_enter(rc_graph *g, rc_tensor *a)
{
    if (rci_inputs_bad(g, 1, &a) || rci_float_input(g, "mp_enter", a))
        return NULL;
    return as_view(rci_node_new(g, RC_OP_MP_ENTER, a->dtype, a->ndim, a->shape, 1, &a), a, 0);
}

static rc_tensor *collective(rc_graph *g, rc_op op, rc_tensor *a)
{
    if (rci_inputs_bad(g, 1, &a) || rci_float_input(g, rc_op_name(op), a))
        return NULL;
    return rci_node_new(g, op, a->dtype, a->ndim, a->shape, 1, &a);
}

rc_tensor *rc_mp_reduce(rc_graph *g, rc_tensor *a)
{
    return collective(g, RC_OP_MP_REDUCE, a);
}

rc_tensor *rc_mp_max(rc_graph *g, rc_tensor *a)
{
    return collective(g, RC_OP_MP_MAX, a);
}

rc_tensor *rc_permute(rc_graph *g, rc_tensor *a, const int *perm)
{
    if (rci_inputs_bad(g, 1, &a))
        return NULL;
    if (!perm)
        return rci_fail(g, RC_ERR_ARG, "permute: NULL axis order");
    int seen[RC_MAX_DIMS] = {0}, identity = 1;
    int64_t shape[RC_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++) {
        int p = perm[i];
        if (p < 0 || p >= a->ndim || seen[p]) {
            char s[96];
            return rci_fail(g, RC_ERR_ARG, "permute: axis order is not a permutation of %d axes of %s",
                           a->ndim, rc_shape_str(a, s, sizeof s));
        }
        seen[p] = 1;
        shape[i] = a->shape[p];
        identity &= p == i;
    }
    if (identity)
        return a;
    rc_tensor *y = rci_node_new(g, RC_OP_PERMUTE, a->dtype, a->ndim, shape, 1, &a);
    for (int i = 0; y && i < a->ndim; i++)
        y->iparam[i] = perm[i];
    return y;
}

rc_tensor *rc_transpose(rc_graph *g, rc_tensor *a, int axis0, int axis1)
{
    if (rci_inputs_bad(g, 1, &a))
        return NULL;
    int i0 = rci_axis_check(g, "transpose", a, axis0);
    int i1 = rci_axis_check(g, "transpose", a, axis1);
    if (i0 < 0 || i1 < 0)
        return NULL;
    int perm[RC_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++)
        perm[i] = i;
    perm[i0] = i1;
    perm[i1] = i0;
    return rc_permute(g, a, perm);
}

/* 1 (the graph's error set) when an offset along axis ax does not fit the node's 32-bit
 * parameters (slice's start and end, pad's before) */
static int offset_past_32bit(rc_graph *g, const char *op, int ax, int64_t offset)
{
    if (offset <= INT32_MAX)
        return 0;
    rci_fail(g, RC_ERR_UNSUPPORTED, "%s: offset %lld on axis %d: offsets past 2^31 are not supported", op,
             (long long)offset, ax);
    return 1;
}

rc_tensor *rc_slice(rc_graph *g, rc_tensor *a, int axis, int64_t start, int64_t end)
{
    if (rci_inputs_bad(g, 1, &a))
        return NULL;
    int ax = rci_axis_check(g, "slice", a, axis);
    if (ax < 0)
        return NULL;
    if (start < 0 || end > a->shape[ax] || start > end) {
        char s[96];
        return rci_fail(g, RC_ERR_INDEX, "slice: [%lld, %lld) out of range for axis %d of %s",
                       (long long)start, (long long)end, ax, rc_shape_str(a, s, sizeof s));
    }
    if (start == 0 && end == a->shape[ax])
        return a;
    if (offset_past_32bit(g, "slice", ax, end))
        return NULL;
    int64_t shape[RC_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++)
        shape[i] = a->shape[i];
    shape[ax] = end - start;
    rc_tensor *y = rci_node_new(g, RC_OP_SLICE, a->dtype, a->ndim, shape, 1, &a);
    if (!y)
        return NULL;
    y->iparam[0] = ax;
    y->iparam[1] = (int32_t)start;
    y->iparam[2] = (int32_t)end;
    /* contiguous when every axis before `ax` has extent 1: then it is a free view */
    if (rci_shape_numel(ax, a->shape) == 1) {
        int64_t inner = rci_shape_numel(a->ndim - ax - 1, a->shape + ax + 1);
        as_view(y, a, start * inner * (int64_t)rc_dtype_size(a->dtype));
    }
    return y;
}

rc_tensor *rc_pad(rc_graph *g, rc_tensor *a, int axis, int64_t before, int64_t size)
{
    if (rci_inputs_bad(g, 1, &a))
        return NULL;
    int ax = rci_axis_check(g, "pad", a, axis);
    if (ax < 0)
        return NULL;
    if (before < 0 || before + a->shape[ax] > size) {
        char s[96];
        return rci_fail(g, RC_ERR_SHAPE, "pad: %s at offset %lld does not fit extent %lld on axis %d",
                       rc_shape_str(a, s, sizeof s), (long long)before, (long long)size, ax);
    }
    if (offset_past_32bit(g, "pad", ax, before))
        return NULL;
    int64_t shape[RC_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++)
        shape[i] = a->shape[i];
    shape[ax] = size;
    rc_tensor *y = rci_node_new(g, RC_OP_PAD, a->dtype, a->ndim, shape, 1, &a);
    if (y) {
        y->iparam[0] = ax;
        y->iparam[1] = (int32_t)before;
    }
    return y;
}

rc_tensor *rc_concat(rc_graph *g, rc_tensor *const *parts, int n, int axis)
{
    if (!g || g->err_code)
        return NULL;
    if (!parts || n < 1 || n > RC_MAX_SRC)
        return rci_fail(g, RC_ERR_ARG, "concat: %d parts (1 to %d)", n, RC_MAX_SRC);
    if (rci_inputs_bad(g, n, parts))
        return NULL;
    int ax = rci_axis_check(g, "concat", parts[0], axis);
    if (ax < 0)
        return NULL;
    if (n == 1)
        return parts[0];
    int64_t shape[RC_MAX_DIMS];
    for (int i = 0; i < parts[0]->ndim; i++)
        shape[i] = parts[0]->shape[i];
    shape[ax] = 0;
    for (int p = 0; p < n; p++) {
        const rc_tensor *t = parts[p];
        int ok = t->ndim == parts[0]->ndim && t->dtype == parts[0]->dtype;
        for (int i = 0; ok && i < t->ndim; i++)
            ok = i == ax || t->shape[i] == parts[0]->shape[i];
        if (!ok) {
            char s0[96], sp[96];
            return rci_fail(g, RC_ERR_SHAPE, "concat: part %d %s %s does not match part 0 %s %s off axis %d",
                           p, rc_shape_str(t, sp, sizeof sp), rc_dtype_name(t->dtype),
                           rc_shape_str(parts[0], s0, sizeof s0), rc_dtype_name(parts[0]->dtype), ax);
        }
        shape[ax] += t->shape[ax];
    }
    rc_tensor *y = rci_node_new(g, RC_OP_CONCAT, parts[0]->dtype, parts[0]->ndim, shape, n, parts);
    if (y)
        y->iparam[0] = ax;
    return y;
}

int rc_split(rc_graph *g, rc_tensor *a, int axis, int n, rc_tensor **out)
{
    if (rci_inputs_bad(g, 1, &a))
        return -1;
    int ax = rci_axis_check(g, "split", a, axis);
    if (ax < 0)
        return -1;
    if (n < 1 || !out || a->shape[ax] % n) {
        char s[96];
        rci_fail(g, RC_ERR_SHAPE, "split: axis %d of %s does not split into %d equal parts", ax,
                rc_shape_str(a, s, sizeof s), n);
        return -1;
    }
    int64_t step = a->shape[ax] / n;
    for (int i = 0; i < n; i++)
        if (!(out[i] = rc_slice(g, a, ax, i * step, (i + 1) * step)))
            return -1;
    return 0;
}

static rc_tensor *reduce(rc_graph *g, rc_op op, rc_tensor *a, int axis, int keepdim)
{
    if (rci_inputs_bad(g, 1, &a))
        return NULL;
    if (!rc_dtype_is_float(a->dtype))
        return rci_fail(g, RC_ERR_DTYPE, "%s: dtype %s (f32, f64, bf16 or f16)", rc_op_name(op),
                       rc_dtype_name(a->dtype));
    int ax = rci_axis_check(g, rc_op_name(op), a, axis);
    if (ax < 0)
        return NULL;
    int64_t shape[RC_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < a->ndim; i++) {
        if (i != ax)
            shape[nd++] = a->shape[i];
        else if (keepdim)
            shape[nd++] = 1;
    }
    rc_tensor *y = rci_node_new(g, op, a->dtype, nd, shape, 1, &a);
    if (y) {
        y->iparam[0] = ax;
        y->iparam[1] = !!keepdim;
    }
    return y;
}

rc_tensor *rc_sum(rc_graph *g, rc_tensor *a, int axis, int keepdim)
{
    return reduce(g, RC_OP_SUM, a, axis, keepdim);
}

rc_tensor *rc_max(rc_graph *g, rc_tensor *a, int axis, int keepdim)
{
    return reduce(g, RC_OP_MAX, a, axis, keepdim);
}

rc_tensor *rc_mean(rc_graph *g, rc_tensor *a, int axis, int keepdim)
{
    rc_tensor *s = rc_sum(g, a, axis, keepdim);
    if (!s)
        return NULL;
    int ax = axis < 0 ? axis + a->ndim : axis;
    return rc_scale(g, s, 1.0 / (double)a->shape[ax]);
}

rc_tensor *rc_sum_all(rc_graph *g, rc_tensor *a)
{
    return rc_sum_to(g, a, 0, NULL);
}

rc_tensor *rc_mean_all(rc_graph *g, rc_tensor *a)
{
    rc_tensor *s = rc_sum_all(g, a);
    return s ? rc_scale(g, s, 1.0 / (double)rc_tensor_numel(a)) : NULL;
}

/* 1 when `small` broadcasts to `big` (right-aligned, size-1 axes repeat). */
static int broadcasts_to(int nsmall, const int64_t *small, int nbig, const int64_t *big)
{
    if (nsmall > nbig)
        return 0;
    for (int i = 0; i < nsmall; i++) {
        int64_t s = small[nsmall - 1 - i], b = big[nbig - 1 - i];
        if (s != b && s != 1)
            return 0;
    }
    return 1;
}

static rc_tensor *broadcast_op(rc_graph *g, rc_op op, rc_tensor *a, int ndim, const int64_t *shape)
{
    if (rci_inputs_bad(g, 1, &a))
        return NULL;
    if (ndim < 0 || ndim > RC_MAX_DIMS || (ndim > 0 && !shape))
        return rci_fail(g, RC_ERR_ARG, "%s: %d dimensions", rc_op_name(op), ndim);
    int ok = op == RC_OP_EXPAND ? broadcasts_to(a->ndim, a->shape, ndim, shape)
                                : broadcasts_to(ndim, shape, a->ndim, a->shape);
    rc_tensor want = {.ndim = ndim};
    for (int i = 0; i < ndim; i++)
        want.shape[i] = shape[i];
    if (!ok) {
        char sa[96], sw[96];
        return rci_fail(g, RC_ERR_SHAPE, "%s: %s and %s are not broadcast-compatible", rc_op_name(op),
                       rc_shape_str(a, sa, sizeof sa), rc_shape_str(&want, sw, sizeof sw));
    }
    if (rci_same_shape(a, &want))
        return a;
    if (op == RC_OP_SUM_TO && !rc_dtype_is_float(a->dtype))
        return rci_fail(g, RC_ERR_DTYPE, "sum_to: dtype %s (f32, f64, bf16 or f16)", rc_dtype_name(a->dtype));
    if (rc_tensor_numel(a) == rci_shape_numel(ndim, shape))
        return rc_reshape(g, a, ndim, shape);
    return rci_node_new(g, op, a->dtype, ndim, shape, 1, &a);
}

rc_tensor *rc_expand(rc_graph *g, rc_tensor *a, int ndim, const int64_t *shape)
{
    return broadcast_op(g, RC_OP_EXPAND, a, ndim, shape);
}

rc_tensor *rc_sum_to(rc_graph *g, rc_tensor *a, int ndim, const int64_t *shape)
{
    return broadcast_op(g, RC_OP_SUM_TO, a, ndim, shape);
}
