/* ops_linalg.c - matrix multiplication, plain and batched, with either operand read
 * transposed in place. */
#include "internal.h"

rc_tensor *rc_matmul(rc_graph *g, rc_tensor *a, rc_tensor *b, int trans_a, int trans_b)
{
    rc_tensor *src[2] = {a, b};
    if (rci_inputs_bad(g, 2, src))
        return NULL;
    char sa[96], sb[96]; /* the shapes are written only for a message */
    if (a->dtype != b->dtype || !rc_dtype_is_float(a->dtype))
        return rci_fail(g, RC_ERR_DTYPE, "matmul: dtypes %s and %s (one float dtype for both)",
                       rc_dtype_name(a->dtype), rc_dtype_name(b->dtype));
    if (a->ndim < 2 || b->ndim < 2)
        return rci_fail(g, RC_ERR_SHAPE, "matmul: operands %s and %s need at least 2 dimensions",
                       rc_shape_str(a, sa, sizeof sa), rc_shape_str(b, sb, sizeof sb));
    int64_t m = trans_a ? a->shape[a->ndim - 1] : a->shape[a->ndim - 2];
    int64_t k = trans_a ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    int64_t kb = trans_b ? b->shape[b->ndim - 1] : b->shape[b->ndim - 2];
    int64_t n = trans_b ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
    if (k != kb)
        return rci_fail(g, RC_ERR_SHAPE,
                       "matmul: inner dimensions differ: %s%s @ %s%s (%lld vs %lld)",
                       rc_shape_str(a, sa, sizeof sa), trans_a ? "^T" : "", rc_shape_str(b, sb, sizeof sb),
                       trans_b ? "^T" : "", (long long)k, (long long)kb);
    if (b->ndim != 2) {
        int same = b->ndim == a->ndim;
        for (int i = 0; same && i < a->ndim - 2; i++)
            same = a->shape[i] == b->shape[i];
        if (!same)
            return rci_fail(g, RC_ERR_SHAPE,
                           "matmul: batch dimensions of %s and %s differ (b must be 2-D or match a's batch)",
                           rc_shape_str(a, sa, sizeof sa), rc_shape_str(b, sb, sizeof sb));
    }
    int64_t shape[RC_MAX_DIMS];
    for (int i = 0; i < a->ndim - 2; i++)
        shape[i] = a->shape[i];
    shape[a->ndim - 2] = m;
    shape[a->ndim - 1] = n;
    rc_tensor *y = rci_node_new(g, RC_OP_MATMUL, a->dtype, a->ndim, shape, 2, src);
    if (y) {
        y->iparam[0] = !!trans_a;
        y->iparam[1] = !!trans_b;
    }
    return y;
}
