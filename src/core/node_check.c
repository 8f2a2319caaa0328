/* node_check.c - the one place where a node's structure is decided: for each op, the inputs
 * it takes (present, of which dtype), how their shapes fit the node's shape, and its
 * integer parameters in range. The builders (ops_*.c) record a node and have it checked
 * here (rci_node_checked), and the plan checks every node it will run before anything runs
 * (src/exec/plan.c), so a backend's kernels take the nodes they are given as valid and check
 * only what depends on values (an id out of range) or on the device (a dtype it lacks).
 *
 * What the builders still check themselves is what they need to make the node at all: the
 * output's shape (broadcasting, the product's inner dimension, an axis or a slice in range)
 * and that an op is defined for its input's dtype (exp of i32 is not; whether a backend has
 * a kernel for a dtype is the backend's `supports`). */
#include "internal.h"

#include <stdio.h>

/* ---- shapes ------------------------------------------------------------------------------- */

void rci_contiguous_strides(int nd, const int64_t *shape, int64_t *st)
{
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        st[i] = s;
        s *= shape[i];
    }
}

int rci_bcast_strides(const rc_tensor *t, int nd, const int64_t *shape, int64_t *st)
{
    int off = nd - t->ndim;
    if (off < 0)
        return -1;
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        int j = i - off;
        if (j < 0) {
            st[i] = 0;
            continue;
        }
        if (t->shape[j] == shape[i])
            st[i] = shape[i] == 1 ? 0 : s;
        else if (t->shape[j] == 1)
            st[i] = 0;
        else
            return -1;
        s *= t->shape[j];
    }
    return 0;
}

rci_matmul_dims rci_matmul_dims_of(const rc_tensor *node)
{
    const rc_tensor *A = node->src[0], *B = node->src[1];
    rci_matmul_dims d = {node->iparam[0] != 0, node->iparam[1] != 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    d.m = A->shape[A->ndim - (d.ta ? 1 : 2)], d.k = A->shape[A->ndim - (d.ta ? 2 : 1)];
    d.kb = B->shape[B->ndim - (d.tb ? 1 : 2)], d.n = B->shape[B->ndim - (d.tb ? 2 : 1)];
    d.batch = d.m && d.n ? rc_tensor_numel(node) / (d.m * d.n) : 0;
    d.ba = d.m && d.k ? rc_tensor_numel(A) / (d.m * d.k) : 0;
    d.bb = d.k && d.n ? rc_tensor_numel(B) / (d.k * d.n) : 0;
    return d;
}

static int64_t last_dim(const rc_tensor *t)
{
    return t->ndim ? t->shape[t->ndim - 1] : 1;
}

/* ---- errors ------------------------------------------------------------------------------- */

/* "op: what (node N [shape] dtype 'name')" in err; -1 */
static int bad(rc_error *err, int code, const rc_tensor *node, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int bad(rc_error *err, int code, const rc_tensor *node, const char *fmt, ...)
{
    char what[384], s[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return rc_error_set(err, code, "%s: %s (node %d %s %s%s%s%s)", rc_op_name(node->op), what, node->id,
                        rc_shape_str(node, s, sizeof s), rc_dtype_name(node->dtype), node->name[0] ? " '" : "",
                        node->name, node->name[0] ? "'" : "");
}

/* src[k] of node, present and of dtype t */
static int need(const rc_tensor *node, int k, rc_dtype t, rc_error *err)
{
    const rc_tensor *s = k < node->nsrc ? node->src[k] : NULL;
    char sh[96];
    if (!s)
        return bad(err, RC_ERR_ARG, node, "input %d is missing", k);
    if (s->dtype != t)
        return bad(err, RC_ERR_DTYPE, node, "input %d %s has dtype %s, expected %s", k,
                   rc_shape_str(s, sh, sizeof sh), rc_dtype_name(s->dtype), rc_dtype_name(t));
    return 0;
}

/* src[0 .. n) present and of the node's dtype */
static int need_all(const rc_tensor *node, int n, rc_error *err)
{
    for (int k = 0; k < n; k++)
        if (need(node, k, node->dtype, err))
            return -1;
    return 0;
}

/* src[k] has as many elements as the node */
static int same_size(const rc_tensor *node, int k, rc_error *err)
{
    const rc_tensor *s = node->src[k];
    char sh[96];
    if (rc_tensor_numel(s) == rc_tensor_numel(node))
        return 0;
    return bad(err, RC_ERR_SHAPE, node, "input %d %s has %lld elements, the output %lld", k,
               rc_shape_str(s, sh, sizeof sh), (long long)rc_tensor_numel(s), (long long)rc_tensor_numel(node));
}

/* src[k] broadcasts to the node's shape (right-aligned, size-1 axes repeat) */
static int broadcasts(const rc_tensor *node, int k, rc_error *err)
{
    int64_t st[RC_MAX_DIMS];
    char sh[96];
    if (rci_bcast_strides(node->src[k], node->ndim, node->shape, st) == 0)
        return 0;
    return bad(err, RC_ERR_SHAPE, node, "input %d %s does not broadcast to the output", k,
               rc_shape_str(node->src[k], sh, sizeof sh));
}

/* src[k], when present, is a vector [C] (C the node's last axis) of the node's dtype: the
 * weight or bias of a norm, named `what` */
static int feature_vector(const rc_tensor *node, int k, const char *what, rc_error *err)
{
    const rc_tensor *v = k < node->nsrc ? node->src[k] : NULL;
    int64_t c = last_dim(node);
    char sv[96];
    if (!v || (v->ndim == 1 && v->shape[0] == c && v->dtype == node->dtype))
        return 0;
    return bad(err, RC_ERR_SHAPE, node, "%s %s %s does not fit the input (need [%lld] %s)", what,
               rc_shape_str(v, sv, sizeof sv), rc_dtype_name(v->dtype), (long long)c, rc_dtype_name(node->dtype));
}

/* src[k] has the node's ndim and shape except along axis ax */
static int fits_but_axis(const rc_tensor *node, int k, int ax, rc_error *err)
{
    const rc_tensor *s = node->src[k];
    int ok = s->ndim == node->ndim && ax >= 0 && ax < node->ndim;
    for (int i = 0; ok && i < node->ndim; i++)
        ok = i == ax || s->shape[i] == node->shape[i];
    char sh[96];
    return ok ? 0 : bad(err, RC_ERR_SHAPE, node, "input %d %s does not fit the output off axis %d", k,
                        rc_shape_str(s, sh, sizeof sh), ax);
}

/* ---- the ops' rules ------------------------------------------------------------------------- */

/* element-wise of one input: src0 of the node's dtype and size (an activation's multiplier,
 * src1, of src0's shape and dtype) */
static int check_unary(const rc_tensor *node, rc_error *err)
{
    if (need_all(node, 1, err) || same_size(node, 0, err))
        return -1;
    if (node->op == RC_OP_ACT && ((unsigned)node->iparam[0] >= RC_ACT_COUNT || node->iparam[1] < 0 ||
                                  node->iparam[1] > 2))
        return bad(err, RC_ERR_ARG, node, "activation %d, derivative order %d", node->iparam[0], node->iparam[1]);
    if (node->op != RC_OP_ACT || node->nsrc < 2 || !node->src[1])
        return 0;
    if (need(node, 1, node->dtype, err))
        return -1;
    if (!rci_same_shape(node->src[1], node->src[0]))
        return bad(err, RC_ERR_SHAPE, node, "its multiplier (input 1) is not of input 0's shape");
    return 0;
}

/* The dtype input k of a broadcast op takes: the node's, but where's condition may be i32,
 * and equal's inputs are both i32 or both of the node's dtype. */
static rc_dtype broadcast_dtype(const rc_tensor *node, int k)
{
    const rc_tensor *first = node->nsrc > 0 ? node->src[0] : NULL;
    const rc_tensor *s = k < node->nsrc ? node->src[k] : NULL;
    if (node->op == RC_OP_WHERE && k == 0 && s && s->dtype == RC_I32)
        return RC_I32;
    if (node->op == RC_OP_EQUAL && first && first->dtype == RC_I32)
        return RC_I32;
    return node->dtype;
}

/* the first nin inputs, of their dtypes, broadcast to the node's shape */
static int check_broadcast(const rc_tensor *node, int nin, rc_error *err)
{
    for (int k = 0; k < nin; k++)
        if (need(node, k, broadcast_dtype(node, k), err) || broadcasts(node, k, err))
            return -1;
    return 0;
}

static int check_matmul(const rc_tensor *node, rc_error *err)
{
    if (need_all(node, 2, err))
        return -1;
    const rc_tensor *A = node->src[0], *B = node->src[1];
    char sa[96], sb[96]; /* the shapes are written only for a message */
    if (A->ndim < 2 || B->ndim < 2 || node->ndim < 2)
        return bad(err, RC_ERR_SHAPE, node, "%s @ %s: operands and output need at least 2 dimensions",
                   rc_shape_str(A, sa, sizeof sa), rc_shape_str(B, sb, sizeof sb));
    rci_matmul_dims d = rci_matmul_dims_of(node);
    if (d.k != d.kb || node->shape[node->ndim - 2] != d.m || node->shape[node->ndim - 1] != d.n)
        return bad(err, RC_ERR_SHAPE, node, "%s%s @ %s%s multiplies [%lld, %lld] by [%lld, %lld], which does not "
                   "give the output", rc_shape_str(A, sa, sizeof sa), d.ta ? "^T" : "", rc_shape_str(B, sb, sizeof sb),
                   d.tb ? "^T" : "", (long long)d.m, (long long)d.k, (long long)d.kb, (long long)d.n);
    if (d.m && d.n && d.k && ((d.ba != d.batch && d.ba != 1) || (d.bb != d.batch && d.bb != 1)))
        return bad(err, RC_ERR_SHAPE, node, "%s @ %s: batches %lld @ %lld -> %lld do not match",
                   rc_shape_str(A, sa, sizeof sa), rc_shape_str(B, sb, sizeof sb), (long long)d.ba, (long long)d.bb,
                   (long long)d.batch);
    return 0;
}

static int check_softmax(const rc_tensor *node, rc_error *err)
{
    if (need_all(node, 1, err) || same_size(node, 0, err))
        return -1;
    const rc_tensor *mask = node->nsrc > 1 ? node->src[1] : NULL;
    return mask && (need(node, 1, node->dtype, err) || broadcasts(node, 1, err)) ? -1 : 0;
}

static int check_norm(const rc_tensor *node, rc_error *err)
{
    if (need_all(node, 1, err) || same_size(node, 0, err) || feature_vector(node, 1, "weight", err))
        return -1;
    return node->op == RC_OP_LAYER_NORM ? feature_vector(node, 2, "bias", err) : 0;
}

/* NORM_GRAD: x src0 (float), its weight src1 ([C] or NULL) and G src2 of x's dtype and
 * shape; the output of x's shape and dtype (iparam[1] 0), with an addend src3 of the same
 * (or none), or [C] in its compute dtype (1) */
static int check_norm_grad(const rc_tensor *node, rc_error *err)
{
    const rc_tensor *x = node->nsrc > 0 ? node->src[0] : NULL, *w = node->nsrc > 1 ? node->src[1] : NULL;
    if (!x)
        return bad(err, RC_ERR_ARG, node, "input 0 (x) is missing");
    if (need(node, 2, x->dtype, err))
        return -1;
    char sx[96], sg[96], sw[96];
    if ((node->iparam[0] != 0 && node->iparam[0] != 1) || (node->iparam[1] != 0 && node->iparam[1] != 1))
        return bad(err, RC_ERR_ARG, node, "norm kind %d and gradient %d (0 or 1 each)", node->iparam[0],
                   node->iparam[1]);
    if (!rc_dtype_is_float(x->dtype) || !rci_same_shape(node->src[2], x) || x->ndim < 1)
        return bad(err, RC_ERR_SHAPE, node, "x %s %s and G %s must be float arrays of one shape",
                   rc_shape_str(x, sx, sizeof sx), rc_dtype_name(x->dtype), rc_shape_str(node->src[2], sg, sizeof sg));
    int64_t c = x->shape[x->ndim - 1];
    if (node->iparam[1] ? node->ndim != 1 || node->shape[0] != c : !rci_same_shape(node, x))
        return bad(err, RC_ERR_SHAPE, node, "output %s for x %s (expected %s)", rc_shape_str(node, sg, sizeof sg),
                   rc_shape_str(x, sx, sizeof sx), node->iparam[1] ? "[C], the weight's gradient" : "x's shape");
    if (w && (w->ndim != 1 || w->shape[0] != c || w->dtype != x->dtype))
        return bad(err, RC_ERR_SHAPE, node, "weight %s %s does not fit x %s", rc_shape_str(w, sw, sizeof sw),
                   rc_dtype_name(w->dtype), rc_shape_str(x, sx, sizeof sx));
    const rc_tensor *r = node->nsrc > 3 ? node->src[3] : NULL;
    if (r && (node->iparam[1] || !rci_same_shape(r, x) || r->dtype != x->dtype))
        return bad(err, RC_ERR_SHAPE, node, "addend %s %s for x %s %s (dx alone, of x's shape and dtype)",
                   rc_shape_str(r, sw, sizeof sw), rc_dtype_name(r->dtype), rc_shape_str(x, sx, sizeof sx),
                   rc_dtype_name(x->dtype));
    rc_dtype want = node->iparam[1] ? rci_compute_dtype(x->dtype) : x->dtype;
    if (node->dtype != want)
        return bad(err, RC_ERR_DTYPE, node, "dtype %s for x of %s (expected %s)", rc_dtype_name(node->dtype),
                   rc_dtype_name(x->dtype), rc_dtype_name(want));
    return 0;
}

/* EMBEDDING: table src0 [V, C] and ids src1 -> [..., C]; EMBEDDING_GRAD: ids src0 and
 * gradient src1 [..., C] -> [V, C]; ONE_HOT: ids src0 -> [..., depth] */
static int check_ids_op(const rc_tensor *node, rc_error *err)
{
    int at = node->op == RC_OP_EMBEDDING; /* where the ids are */
    if (need(node, at, RC_I32, err) || (node->op != RC_OP_ONE_HOT && need(node, !at, node->dtype, err)))
        return -1;
    const rc_tensor *ids = node->src[at], *other = node->src[!at];
    int64_t count = rc_tensor_numel(ids), c = last_dim(node);
    char si[96], so[96]; /* the shapes are written only for a message */
    if (node->op == RC_OP_EMBEDDING && (other->ndim != 2 || other->shape[1] != c || count * c != rc_tensor_numel(node)))
        return bad(err, RC_ERR_SHAPE, node, "table %s and ids %s do not fit the output",
                   rc_shape_str(other, so, sizeof so), rc_shape_str(ids, si, sizeof si));
    if (node->op == RC_OP_EMBEDDING_GRAD && (node->ndim != 2 || count * c != rc_tensor_numel(other)))
        return bad(err, RC_ERR_SHAPE, node, "ids %s and gradient %s do not fit the output [vocab, dim]",
                   rc_shape_str(ids, si, sizeof si), rc_shape_str(other, so, sizeof so));
    if (node->op == RC_OP_ONE_HOT && count * c != rc_tensor_numel(node))
        return bad(err, RC_ERR_SHAPE, node, "ids %s do not fit the output", rc_shape_str(ids, si, sizeof si));
    return 0;
}

/* logits src0 [..., V] (the loss's dtype is their compute dtype), targets src1 [...] i32, one
 * per row; the gradient's upstream src2 is a scalar of that dtype */
static int check_loss(const rc_tensor *node, rc_error *err)
{
    int grad = node->op == RC_OP_CROSS_ENTROPY_GRAD;
    const rc_tensor *lt = node->nsrc > 0 ? node->src[0] : NULL;
    rc_dtype logits = grad || !lt ? node->dtype : lt->dtype, loss = rci_compute_dtype(logits);
    if (need(node, 0, logits, err) || need(node, 1, RC_I32, err) || (grad && need(node, 2, loss, err)))
        return -1;
    if (!grad && node->dtype != loss)
        return bad(err, RC_ERR_DTYPE, node, "the loss of %s logits is %s", rc_dtype_name(logits), rc_dtype_name(loss));
    int64_t rows = lt->ndim ? rci_shape_numel(lt->ndim - 1, lt->shape) : 0;
    char sl[96]; /* the shape is written only for a message */
    if (lt->ndim < 1 || rc_tensor_numel(node->src[1]) != rows)
        return bad(err, RC_ERR_SHAPE, node, "%lld targets for the %lld rows of logits %s",
                   (long long)rc_tensor_numel(node->src[1]), (long long)rows, rc_shape_str(lt, sl, sizeof sl));
    if (grad && rc_tensor_numel(node->src[2]) != 1)
        return bad(err, RC_ERR_SHAPE, node, "the upstream gradient is not a scalar");
    if ((grad ? rc_tensor_numel(lt) : 1) != rc_tensor_numel(node))
        return bad(err, RC_ERR_SHAPE, node, "logits %s and output do not fit", rc_shape_str(lt, sl, sizeof sl));
    return 0;
}

static int check_rope(const rc_tensor *node, rc_error *err)
{
    if (need_all(node, 1, err) || need(node, 1, RC_I32, err) || same_size(node, 0, err))
        return -1;
    int nd = node->ndim, mode = node->iparam[1];
    if (nd < 3)
        return bad(err, RC_ERR_SHAPE, node, "input must be [..., T, heads, head_dim]");
    int64_t rot = node->iparam[0], d = node->shape[nd - 1];
    if (rot < 0 || rot % 2 || rot > d || (mode != RC_ROPE_INTERLEAVED && mode != RC_ROPE_HALF))
        return bad(err, RC_ERR_ARG, node, "rotary dims %lld, mode %d for head dim %lld", (long long)rot, mode,
                   (long long)d);
    return rc_tensor_numel(node->src[1]) ? 0 : bad(err, RC_ERR_SHAPE, node, "no positions");
}

/* SUM, MAX over axis iparam[0] (keepdim in the node's shape); SUM_TO down to the node's shape */
static int check_reduce(const rc_tensor *node, rc_error *err)
{
    if (need_all(node, 1, err))
        return -1;
    const rc_tensor *s = node->src[0];
    char sh[96]; /* the shape is written only for a message */
    if (node->op == RC_OP_SUM_TO) {
        int64_t st[RC_MAX_DIMS];
        return node->ndim <= s->ndim && rci_bcast_strides(node, s->ndim, s->shape, st) == 0
                   ? 0 : bad(err, RC_ERR_SHAPE, node, "%s cannot be summed to the output", rc_shape_str(s, sh, sizeof sh));
    }
    int axis = node->iparam[0];
    if (axis < 0 || axis >= s->ndim)
        return bad(err, RC_ERR_ARG, node, "axis %d of input %s", axis, rc_shape_str(s, sh, sizeof sh));
    int64_t kept = rci_shape_numel(axis, s->shape) * rci_shape_numel(s->ndim - axis - 1, s->shape + axis + 1);
    return kept == rc_tensor_numel(node)
               ? 0 : bad(err, RC_ERR_SHAPE, node, "input %s reduced over axis %d does not fit the output",
                         rc_shape_str(s, sh, sizeof sh), axis);
}

/* PERMUTE, SLICE, PAD, CONCAT, EXPAND: inputs of the node's dtype placed in its shape */
static int check_move(const rc_tensor *node, rc_error *err)
{
    int nin = node->op == RC_OP_CONCAT ? node->nsrc : 1;
    if (nin < 1)
        return bad(err, RC_ERR_ARG, node, "no input");
    if (need_all(node, nin, err))
        return -1;
    const rc_tensor *s = node->src[0];
    int nd = node->ndim, ax = node->iparam[0];
    int64_t at = 0;
    switch (node->op) {
    case RC_OP_PERMUTE: {
        int seen = 0, ok = s->ndim == nd;
        for (int i = 0; ok && i < nd; i++) {
            int p = node->iparam[i];
            ok = p >= 0 && p < nd && !((seen >> p) & 1) && s->shape[p] == node->shape[i];
            seen |= ok ? 1 << p : 0;
        }
        return ok ? 0 : bad(err, RC_ERR_ARG, node, "the axis order does not permute the input's %d axes", s->ndim);
    }
    case RC_OP_SLICE:
        if (fits_but_axis(node, 0, ax, err))
            return -1;
        return node->iparam[1] >= 0 && node->iparam[2] <= s->shape[ax] &&
                       node->iparam[2] - node->iparam[1] == node->shape[ax]
                   ? 0 : bad(err, RC_ERR_SHAPE, node, "[%d, %d) of axis %d of the input", node->iparam[1],
                             node->iparam[2], ax);
    case RC_OP_PAD:
        if (fits_but_axis(node, 0, ax, err))
            return -1;
        return node->iparam[1] >= 0 && node->iparam[1] + s->shape[ax] <= node->shape[ax]
                   ? 0 : bad(err, RC_ERR_SHAPE, node, "the input at %d does not fit axis %d", node->iparam[1], ax);
    case RC_OP_CONCAT:
        for (int k = 0; k < nin; k++) {
            if (fits_but_axis(node, k, ax, err))
                return -1;
            at += node->src[k]->shape[ax];
        }
        return at == node->shape[ax] ? 0 : bad(err, RC_ERR_SHAPE, node, "the parts add up to %lld along axis %d",
                                               (long long)at, ax);
    default: /* EXPAND */
        return broadcasts(node, 0, err);
    }
}

/* views (RESHAPE, STOP_GRADIENT, MP_ENTER), the model-axis collectives and casts: one input
 * of as many elements (of the node's dtype but for a cast) */
static int check_same_elements(const rc_tensor *node, rc_error *err)
{
    const rc_tensor *s = node->nsrc > 0 ? node->src[0] : NULL;
    if (node->op != RC_OP_CAST && need_all(node, 1, err))
        return -1;
    if (!s)
        return bad(err, RC_ERR_ARG, node, "input 0 is missing");
    if ((unsigned)s->dtype >= RC_DTYPE_COUNT || (unsigned)node->dtype >= RC_DTYPE_COUNT)
        return bad(err, RC_ERR_DTYPE, node, "%s to %s", rc_dtype_name(s->dtype), rc_dtype_name(node->dtype));
    return same_size(node, 0, err);
}

/* ---- convolution and pooling (NCHW) ---------------------------------------------------------- */

/* the output extent of one axis: (n + 2 pad - dil (k - 1) - 1) / stride + 1, 0 when the
 * (dilated) kernel does not fit */
int64_t rci_conv_out_size(int64_t n, int64_t k, int stride, int pad, int dil)
{
    int64_t span = n + 2 * (int64_t)pad - (int64_t)dil * (k - 1) - 1;
    return span < 0 || stride < 1 ? 0 : span / stride + 1;
}

/* x [N, C, H, W] convolved by w [O, C/groups, KH, KW] is y [N, O, OH, OW]; iparam: stride
 * h, w; padding h, w; dilation h, w; groups */
static int check_conv(const rc_tensor *node, rc_error *err)
{
    int nin = node->op == RC_OP_CONV2D && node->nsrc > 2 && node->src[2] ? 3 : 2;
    if (need_all(node, nin, err))
        return -1;
    const rc_tensor *s0 = node->src[0], *s1 = node->src[1];
    const rc_tensor *x = node->op == RC_OP_CONV2D ? s0 : node->op == RC_OP_CONV2D_GRAD_INPUT ? node : s1;
    const rc_tensor *w = node->op == RC_OP_CONV2D_GRAD_WEIGHT ? node : s1;
    const rc_tensor *y = node->op == RC_OP_CONV2D ? node : s0;
    const int32_t *ip = node->iparam;
    if (x->ndim != 4 || w->ndim != 4 || y->ndim != 4)
        return bad(err, RC_ERR_SHAPE, node, "inputs and output must be 4-D (NCHW)");
    int g = ip[6];
    int ok = g >= 1 && ip[0] >= 1 && ip[1] >= 1 && ip[2] >= 0 && ip[3] >= 0 && ip[4] >= 1 && ip[5] >= 1;
    ok = ok && x->shape[1] % g == 0 && w->shape[0] % g == 0 && w->shape[1] * g == x->shape[1];
    ok = ok && y->shape[0] == x->shape[0] && y->shape[1] == w->shape[0];
    ok = ok && y->shape[2] == rci_conv_out_size(x->shape[2], w->shape[2], ip[0], ip[2], ip[4]);
    ok = ok && y->shape[3] == rci_conv_out_size(x->shape[3], w->shape[3], ip[1], ip[3], ip[5]);
    char sx[96], sw[96], sy[96];
    if (!ok)
        return bad(err, RC_ERR_SHAPE, node, "input %s, weight %s and output %s do not fit (stride %d, %d, padding "
                   "%d, %d, dilation %d, %d, groups %d)", rc_shape_str(x, sx, sizeof sx), rc_shape_str(w, sw, sizeof sw),
                   rc_shape_str(y, sy, sizeof sy), ip[0], ip[1], ip[2], ip[3], ip[4], ip[5], g);
    const rc_tensor *b = nin == 3 ? node->src[2] : NULL;
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return bad(err, RC_ERR_SHAPE, node, "bias %s for %lld output channels", rc_shape_str(b, sx, sizeof sx),
                   (long long)w->shape[0]);
    return 0;
}

/* x [N, C, H, W] pooled is y [N, C, OH, OW]; iparam: kind, kernel h, w, stride h, w,
 * padding h, w */
static int check_pool(const rc_tensor *node, rc_error *err)
{
    int grad = node->op == RC_OP_POOL2D_GRAD;
    if (need_all(node, grad ? 2 : 1, err))
        return -1;
    const rc_tensor *x = grad ? node->src[1] : node->src[0], *y = grad ? node->src[0] : node;
    const int32_t *ip = node->iparam;
    if (x->ndim != 4 || y->ndim != 4 || (grad && !rci_same_shape(node, x)))
        return bad(err, RC_ERR_SHAPE, node, "inputs and output must be 4-D (NCHW)");
    int ok = (ip[0] == RC_POOL_MAX || ip[0] == RC_POOL_AVG) && ip[1] >= 1 && ip[2] >= 1 && ip[3] >= 1 &&
             ip[4] >= 1 && ip[5] >= 0 && ip[6] >= 0;
    ok = ok && y->shape[0] == x->shape[0] && y->shape[1] == x->shape[1];
    ok = ok && y->shape[2] == rci_conv_out_size(x->shape[2], ip[1], ip[3], ip[5], 1);
    ok = ok && y->shape[3] == rci_conv_out_size(x->shape[3], ip[2], ip[4], ip[6], 1);
    char sx[96], sy[96];
    return ok ? 0 : bad(err, RC_ERR_SHAPE, node, "input %s and output %s do not fit (kind %d, kernel %d x %d, "
                        "stride %d, %d, padding %d, %d)", rc_shape_str(x, sx, sizeof sx), rc_shape_str(y, sy, sizeof sy),
                        ip[0], ip[1], ip[2], ip[3], ip[4], ip[5], ip[6]);
}

/* ATTENTION, ATTENTION_GRAD: q [B, H, Tq, D], k [B, KV, Tk, D], v [B, KV, Tk, Dv] (KV
 * divides H), bias (src3, optional) broadcast to [B, H, Tq, Tk], all of q's dtype; GRAD adds
 * dO [B, H, Tq, Dv] and the stats [B, H, Tq, 2] in q's compute dtype and has the shape of
 * the input iparam[1] (0 q, 1 k, 2 v, 3 bias) names, or with iparam[1] 4 is 1-D, q's, k's
 * and v's element counts together (dq, dk, dv packed). The dropout probability fparam[1] is
 * in [0, 1). */
static int check_attention(const rc_tensor *node, rc_error *err)
{
    const rc_tensor *q = node->nsrc > 0 ? node->src[0] : NULL;
    if (!q)
        return bad(err, RC_ERR_ARG, node, "input 0 (q) is missing");
    rc_dtype t = q->dtype;
    for (int i = 0; i < 3; i++)
        if (need(node, i, t, err))
            return -1;
    const rc_tensor *k = node->src[1], *v = node->src[2];
    const rc_tensor *bias = node->nsrc > 3 ? node->src[3] : NULL;
    char sq[96], sk[96], sv[96], sb[96];
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || k->shape[0] != q->shape[0] || v->shape[0] != q->shape[0] ||
        k->shape[1] != v->shape[1] || k->shape[2] != v->shape[2] || k->shape[3] != q->shape[3] ||
        k->shape[1] < 1 || q->shape[1] % k->shape[1])
        return bad(err, RC_ERR_SHAPE, node, "q %s, k %s, v %s must be [B, H, Tq, D], [B, KV, Tk, D], "
                   "[B, KV, Tk, Dv] with KV dividing H", rc_shape_str(q, sq, sizeof sq),
                   rc_shape_str(k, sk, sizeof sk), rc_shape_str(v, sv, sizeof sv));
    int64_t full[4] = {q->shape[0], q->shape[1], q->shape[2], k->shape[2]}, st[4];
    if (bias && (bias->dtype != t || rci_bcast_strides(bias, 4, full, st)))
        return bad(err, RC_ERR_SHAPE, node, "bias %s %s must be %s and broadcast to [%lld, %lld, %lld, %lld]",
                   rc_shape_str(bias, sb, sizeof sb), rc_dtype_name(bias->dtype), rc_dtype_name(t),
                   (long long)full[0], (long long)full[1], (long long)full[2], (long long)full[3]);
    if (node->iparam[0] != 0 && node->iparam[0] != 1)
        return bad(err, RC_ERR_ARG, node, "causal flag %d (0 or 1)", node->iparam[0]);
    if (!(node->fparam[1] >= 0 && node->fparam[1] < 1))
        return bad(err, RC_ERR_ARG, node, "dropout probability %g outside [0, 1)", node->fparam[1]);
    int64_t os[4] = {q->shape[0], q->shape[1], q->shape[2], v->shape[3]};
    const rc_tensor *out = node; /* the tensor of shape [B, H, Tq, Dv]: the output or o and dO */
    if (node->op == RC_OP_ATTENTION_GRAD) {
        if (need(node, 4, t, err) || need(node, 5, rci_compute_dtype(t), err))
            return -1;
        out = node->src[4];
    }
    int ok = out->ndim == 4;
    for (int i = 0; ok && i < 4; i++)
        ok = out->shape[i] == os[i];
    if (ok && node->op == RC_OP_ATTENTION_GRAD) {
        const rc_tensor *s = node->src[5];
        int w = node->iparam[1];
        ok = s->ndim == 4 && s->shape[0] == os[0] && s->shape[1] == os[1] && s->shape[2] == os[2] &&
             s->shape[3] == 2 && w >= 0 && w <= 4 && (w != 3 || bias) &&
             (w == 4 ? node->ndim == 1 && node->shape[0] == rc_tensor_numel(q) + rc_tensor_numel(k) +
                                                               rc_tensor_numel(v)
                     : rci_same_shape(node, node->src[w]));
    }
    if (!ok)
        return bad(err, RC_ERR_SHAPE, node, "output or gradient inputs do not fit q %s, k %s, v %s "
                   "(an ATTENTION is [B, H, Tq, Dv], its stats [B, H, Tq, 2], a gradient its input's shape)",
                   rc_shape_str(q, sq, sizeof sq), rc_shape_str(k, sk, sizeof sk), rc_shape_str(v, sv, sizeof sv));
    if (node->dtype != t)
        return bad(err, RC_ERR_DTYPE, node, "dtype %s for inputs of %s", rc_dtype_name(node->dtype),
                   rc_dtype_name(t));
    return 0;
}

/* ATTENTION_STATS: src0 an ATTENTION node itself, not a view (the stats read what it keeps:
 * rci_kept_bytes), src1 dO of its shape and dtype -> [B, H, Tq, 2] in its compute dtype */
static int check_attention_stats(const rc_tensor *node, rc_error *err)
{
    const rc_tensor *att = node->nsrc > 0 ? node->src[0] : NULL;
    char sa[96], sd[96], sy[96];
    if (!att || att->op != RC_OP_ATTENTION || att->view_src)
        return bad(err, RC_ERR_ARG, node, "input 0 must be an ATTENTION node itself (the stats read what "
                   "it keeps), not %s", att ? rc_op_name(att->op) : "missing");
    if (need(node, 1, att->dtype, err))
        return -1;
    const rc_tensor *dout = node->src[1];
    if (!rci_same_shape(dout, att) || node->ndim != 4 || node->shape[0] != att->shape[0] ||
        node->shape[1] != att->shape[1] || node->shape[2] != att->shape[2] || node->shape[3] != 2)
        return bad(err, RC_ERR_SHAPE, node, "attention %s, dO %s and stats %s (dO is the attention's shape, "
                   "the stats [B, H, Tq, 2])", rc_shape_str(att, sa, sizeof sa), rc_shape_str(dout, sd, sizeof sd),
                   rc_shape_str(node, sy, sizeof sy));
    if (node->dtype != rci_compute_dtype(att->dtype))
        return bad(err, RC_ERR_DTYPE, node, "dtype %s for an attention of %s (expected %s)",
                   rc_dtype_name(node->dtype), rc_dtype_name(att->dtype),
                   rc_dtype_name(rci_compute_dtype(att->dtype)));
    return 0;
}

/* ---- the check ------------------------------------------------------------------------------ */

static int check_none(const rc_tensor *node, rc_error *err)
{
    (void)node, (void)err;
    return 0;
}

static int check_binary(const rc_tensor *node, rc_error *err)
{
    return check_broadcast(node, 2, err);
}

static int check_where(const rc_tensor *node, rc_error *err)
{
    return check_broadcast(node, 3, err);
}

/* Each op's rules: one function per op (a function may serve ops of one kind). */
typedef int (*node_rule)(const rc_tensor *node, rc_error *err);
static const node_rule rules[RC_OP_COUNT] = {
    [RC_OP_LEAF] = check_none, [RC_OP_FULL] = check_none, [RC_OP_NORMAL] = check_none,
    [RC_OP_ADD] = check_binary, [RC_OP_SUB] = check_binary, [RC_OP_MUL] = check_binary,
    [RC_OP_DIV] = check_binary, [RC_OP_EQUAL] = check_binary, [RC_OP_WHERE] = check_where,
    [RC_OP_AFFINE] = check_unary, [RC_OP_EXP] = check_unary, [RC_OP_LOG] = check_unary,
    [RC_OP_SQRT] = check_unary, [RC_OP_RSQRT] = check_unary, [RC_OP_TANH] = check_unary,
    [RC_OP_ACT] = check_unary, [RC_OP_DROPOUT] = check_unary,
    [RC_OP_MATMUL] = check_matmul, [RC_OP_SOFTMAX] = check_softmax,
    [RC_OP_LAYER_NORM] = check_norm, [RC_OP_RMS_NORM] = check_norm,
    [RC_OP_EMBEDDING] = check_ids_op, [RC_OP_EMBEDDING_GRAD] = check_ids_op, [RC_OP_ONE_HOT] = check_ids_op,
    [RC_OP_CROSS_ENTROPY] = check_loss, [RC_OP_CROSS_ENTROPY_GRAD] = check_loss,
    [RC_OP_ROPE] = check_rope,
    [RC_OP_SUM] = check_reduce, [RC_OP_MAX] = check_reduce, [RC_OP_SUM_TO] = check_reduce,
    [RC_OP_PERMUTE] = check_move, [RC_OP_SLICE] = check_move, [RC_OP_PAD] = check_move,
    [RC_OP_CONCAT] = check_move, [RC_OP_EXPAND] = check_move,
    [RC_OP_RESHAPE] = check_same_elements, [RC_OP_STOP_GRADIENT] = check_same_elements,
    [RC_OP_MP_ENTER] = check_same_elements, [RC_OP_MP_REDUCE] = check_same_elements,
    [RC_OP_MP_MAX] = check_same_elements, [RC_OP_CAST] = check_same_elements,
    [RC_OP_CONV2D] = check_conv, [RC_OP_CONV2D_GRAD_INPUT] = check_conv, [RC_OP_CONV2D_GRAD_WEIGHT] = check_conv,
    [RC_OP_POOL2D] = check_pool, [RC_OP_POOL2D_GRAD] = check_pool,
    [RC_OP_ATTENTION] = check_attention, [RC_OP_ATTENTION_STATS] = check_attention_stats,
    [RC_OP_ATTENTION_GRAD] = check_attention, [RC_OP_NORM_GRAD] = check_norm_grad,
};

int rci_node_check(const rc_tensor *node, rc_error *err)
{
    if ((unsigned)node->op >= RC_OP_COUNT || !rules[node->op])
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "op %d: no such op (node %d)", (int)node->op, node->id);
    return rules[node->op](node, err);
}

rc_tensor *rci_node_checked(rc_graph *g, rc_tensor *node)
{
    rc_error err = {0};
    if (!node || !rci_node_check(node, &err))
        return node;
    return rci_fail(g, err.code, "%s", err.msg);
}
