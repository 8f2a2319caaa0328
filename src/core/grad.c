/* grad.c - the gradient rule of every op, built from ordinary ops so that the
 * backward graph can itself be differentiated (gradients of gradients). */
#include "internal.h"

#include <string.h>

/* Reduces a broadcast gradient back to the shape of the input it flows into. */
static rc_tensor *to_shape_of(rc_graph *g, rc_tensor *grad, const rc_tensor *like)
{
    return rc_sum_to(g, grad, like->ndim, like->shape);
}

/* t in the dtype 16-bit values compute in (f32 for bf16 and f16; t itself otherwise): the
 * rules whose sums cancel (softmax, the norms) run there and round their results once. */
static rc_tensor *widen(rc_graph *g, rc_tensor *t)
{
    return t ? rc_cast(g, t, rci_compute_dtype(t->dtype)) : NULL;
}

/* t back in dtype like's (no node when it already is) */
static rc_tensor *narrow(rc_graph *g, rc_tensor *t, const rc_tensor *like)
{
    return t ? rc_cast(g, t, like->dtype) : NULL;
}

static int grad_binary(rc_graph *g, rc_tensor *y, rc_tensor *G, rc_tensor **gs)
{
    rc_tensor *a = y->src[0], *b = y->src[1];
    switch (y->op) {
    case RC_OP_ADD:
        gs[0] = to_shape_of(g, G, a);
        gs[1] = to_shape_of(g, G, b);
        break;
    case RC_OP_SUB:
        gs[0] = to_shape_of(g, G, a);
        gs[1] = to_shape_of(g, rc_neg(g, G), b);
        break;
    case RC_OP_MUL:
        gs[0] = to_shape_of(g, rc_mul(g, G, b), a);
        gs[1] = to_shape_of(g, rc_mul(g, G, a), b);
        break;
    default: /* DIV: d(a/b)/db = -y / b */
        gs[0] = to_shape_of(g, rc_div(g, G, b), a);
        gs[1] = to_shape_of(g, rc_neg(g, rc_div(g, rc_mul(g, G, y), b)), b);
        break;
    }
    return 0;
}

static rc_tensor *grad_unary(rc_graph *g, rc_tensor *y, rc_tensor *G)
{
    rc_tensor *a = y->src[0];
    switch (y->op) {
    case RC_OP_AFFINE:
        return rc_scale(g, G, y->fparam[0]);
    case RC_OP_EXP:
        return rc_mul(g, G, y);
    case RC_OP_LOG:
        return rc_div(g, G, a);
    case RC_OP_SQRT: /* 0.5 / sqrt(a) */
        return rc_div(g, rc_scale(g, G, 0.5), y);
    case RC_OP_RSQRT: /* -0.5 a^-3/2 = -0.5 y^3 */
        return rc_mul(g, G, rc_scale(g, rc_mul(g, y, rc_mul(g, y, y)), -0.5));
    default: /* TANH: 1 - y^2 */
        return rc_mul(g, G, rc_affine(g, rc_mul(g, y, y), -1.0, 1.0));
    }
}

/* ACT, y = m f^(k)(x) (m 1 without a multiplier): dx = (G m) f^(k+1)(x) and dm = G f^(k)(x).
 * The first derivative times G is one node of the same op (rci_act_times: a GELU's
 * backward one pass, not a derivative written and multiplied); the second stays a product
 * with its own ACT node, whose gradient is the one that has none (third order) only where
 * it is needed. */
static int grad_act(rc_graph *g, rc_tensor *y, rc_tensor *G, rc_tensor **gs)
{
    rc_tensor *x = y->src[0], *m = y->nsrc > 1 ? y->src[1] : NULL;
    rc_act_kind kind = (rc_act_kind)y->iparam[0];
    int order = y->iparam[1];
    if (order >= 2) {
        rci_fail(g, RC_ERR_UNSUPPORTED, "act: no gradient for the second derivative of activation %d (third order)",
                 (int)kind);
        return -1;
    }
    rc_tensor *Gm = m ? rc_mul(g, G, m) : G;
    gs[0] = order == 0 ? rci_act_times(g, x, kind, 1, Gm) : rc_mul(g, Gm, rc_act(g, x, kind, order + 1));
    if (m)
        gs[1] = rci_act_times(g, x, kind, order, G);
    return 0;
}

/* C = op(A) op(B). Gradients of the operands as stored, with no transpose copies. */
static int grad_matmul(rc_graph *g, rc_tensor *y, rc_tensor *G, rc_tensor **gs)
{
    rc_tensor *A = y->src[0], *B = y->src[1];
    int ta = y->iparam[0], tb = y->iparam[1];
    if (B->ndim == 2 && A->ndim > 2 && !ta) {
        /* shared weight: fold the batch into rows and use the 2-D rules */
        int64_t k = A->shape[A->ndim - 1], n = G->shape[G->ndim - 1];
        rc_tensor *A2 = rc_reshape(g, A, 2, (int64_t[]){-1, k});
        rc_tensor *G2 = rc_reshape(g, G, 2, (int64_t[]){-1, n});
        gs[0] = rc_reshape(g, rc_matmul(g, G2, B, 0, !tb), A->ndim, A->shape);
        gs[1] = tb ? rc_matmul(g, G2, A2, 1, 0) : rc_matmul(g, A2, G2, 1, 0);
        return 0;
    }
    if (B->ndim == 2 && A->ndim > 2) {
        /* A stored transposed and batched, B shared: dA^T = G op(B)^T, dB summed over batch */
        rc_tensor *dAt = rc_matmul(g, G, B, 0, !tb);
        gs[0] = rc_transpose(g, dAt, -1, -2);
        rc_tensor *dB = tb ? rc_matmul(g, G, A, 1, 1) : rc_matmul(g, A, G, 0, 0);
        gs[1] = to_shape_of(g, dB, B);
        return 0;
    }
    if (!ta && !tb) {
        gs[0] = rc_matmul(g, G, B, 0, 1);
        gs[1] = rc_matmul(g, A, G, 1, 0);
    } else if (!ta && tb) {
        gs[0] = rc_matmul(g, G, B, 0, 0);
        gs[1] = rc_matmul(g, G, A, 1, 0);
    } else if (ta && !tb) {
        gs[0] = rc_matmul(g, B, G, 0, 1);
        gs[1] = rc_matmul(g, A, G, 0, 0);
    } else {
        gs[0] = rc_matmul(g, B, G, 1, 1);
        gs[1] = rc_matmul(g, G, A, 1, 1);
    }
    return 0;
}

/* ATTENTION: the row statistics once, then dq, dk and dv from one packed ATTENTION_GRAD
 * (one pass that recomputes each tile's probabilities once for all three), each a view of
 * it (a leading slice, reshaped), and the bias's from its own node (an unused node is never
 * planned). Past 2^31 elements in all (a slice's offsets are 32-bit) each input has its own
 * node. */
static int grad_attention(rc_graph *g, rc_tensor *y, rc_tensor *G, rc_tensor **gs)
{
    rc_tensor *st = rci_attention_stats(g, y, G);
    int64_t total = 0;
    for (int k = 0; k < 3; k++)
        total += rc_tensor_numel(y->src[k]);
    if (total > INT32_MAX) { /* past a slice's offsets: one node per input */
        for (int k = 0; k < 3 && st; k++)
            gs[k] = rci_attention_grad(g, y, G, st, k);
        if (st && y->src[3])
            gs[3] = rci_attention_grad(g, y, G, st, 3);
        return 0;
    }
    rc_tensor *all = st ? rci_attention_grad(g, y, G, st, 4) : NULL;
    int64_t off = 0;
    for (int k = 0; k < 3 && all; k++) {
        const rc_tensor *x = y->src[k];
        int64_t n = rc_tensor_numel(x);
        rc_tensor *part = rc_slice(g, all, 0, off, off + n);
        gs[k] = part ? rc_reshape(g, part, x->ndim, x->shape) : NULL;
        off += n;
    }
    if (st && y->src[3])
        gs[3] = rci_attention_grad(g, y, G, st, 3);
    return 0;
}

static int grad_softmax(rc_graph *g, rc_tensor *y, rc_tensor *G, rc_tensor **gs)
{
    /* dz = y * (G - sum(G y)) for z = x * scale + mask (in f32 for 16-bit y) */
    rc_tensor *yw = widen(g, y), *Gw = widen(g, G);
    rc_tensor *dz = rc_mul(g, yw, rc_sub(g, Gw, rc_sum(g, rc_mul(g, Gw, yw), -1, 1)));
    gs[0] = narrow(g, rc_scale(g, dz, y->fparam[0]), y);
    if (y->src[1])
        gs[1] = narrow(g, to_shape_of(g, dz, y->src[1]), y);
    return 0;
}

/* The norms: x's gradient from one NORM_GRAD node (each row's statistics recomputed in
 * its pass, nothing saved), the weight's from another, the rows' sum of G xhat (in f32 for
 * 16-bit x, rounded once), the bias's the rows' sum of G (a 16-bit sum_to sums in f32 and
 * rounds once, as a widened one). */
static int grad_norm(rc_graph *g, rc_tensor *y, rc_tensor *G, rc_tensor **gs)
{
    gs[0] = rci_norm_grad(g, y, G, 0);
    if (y->src[1])
        gs[1] = narrow(g, rci_norm_grad(g, y, G, 1), y->src[1]);
    if (y->op == RC_OP_LAYER_NORM && y->src[2])
        gs[2] = to_shape_of(g, G, y->src[2]);
    return 0;
}

int rci_grad_by_value(const rc_tensor *node)
{
    return node->op == RC_OP_NORM_GRAD;
}

/* A NORM_GRAD node's value written with ops from src (its inputs, or stand-ins), in the
 * compute dtype: xhat and 1/sigma from x, then dx = rstd (g - xhat mean(g xhat) - [mean(g)])
 * (the bracket for layer norm), plus its addend src3 when it has one, or the rows' sum of
 * G xhat */
rc_tensor *rci_value_as_ops(rc_graph *g, const rc_tensor *y, rc_tensor *const *src)
{
    rc_tensor *x = widen(g, src[0]), *w = widen(g, src[1]), *G = widen(g, src[2]);
    int layer = y->iparam[0];
    rc_tensor *xc = layer ? rc_sub(g, x, rc_mean(g, x, -1, 1)) : x;
    rc_tensor *var = rc_mean(g, rc_mul(g, xc, xc), -1, 1);
    rc_tensor *rstd = rc_rsqrt(g, rc_add_scalar(g, var, y->fparam[0]));
    rc_tensor *xhat = rc_mul(g, xc, rstd);
    if (y->iparam[1])
        return rc_sum_to(g, rc_mul(g, G, xhat), 1, y->shape);
    rc_tensor *gxh = w ? rc_mul(g, G, layer ? w : rc_add_scalar(g, w, y->fparam[1])) : G;
    rc_tensor *inner = rc_sub(g, gxh, rc_mul(g, xhat, rc_mean(g, rc_mul(g, gxh, xhat), -1, 1)));
    if (layer)
        inner = rc_sub(g, inner, rc_mean(g, gxh, -1, 1));
    rc_tensor *dx = rc_mul(g, rstd, inner);
    return y->nsrc > 3 && src[3] ? rc_add(g, dx, widen(g, src[3])) : dx;
}

static int grad_cross_entropy(rc_graph *g, rc_tensor *y, rc_tensor *G, rc_tensor **gs)
{
    /* d/dx = (softmax(x) - onehot) * G / count over valid rows: one fused pass */
    gs[0] = rc_cross_entropy_grad(g, y->src[0], y->src[1], G, y->iparam[0]);
    return 0;
}

/* The gradient of CROSS_ENTROPY_GRAD d = (p * valid - onehot) * c, c = G / count, written
 * with ops so third derivatives of the loss exist: for upstream H,
 *   d/dx = c * valid * p * (H - sum(H p)),   d/dG = sum(H * (p * valid - onehot)) / count.
 * Computed in the loss's dtype (f32 for 16-bit logits, whose G is f32). */
static int grad_cross_entropy_grad(rc_graph *g, rc_tensor *y, rc_tensor *H, rc_tensor **gs)
{
    rc_tensor *x = widen(g, y->src[0]), *t = y->src[1], *G = y->src[2];
    H = widen(g, H);
    int64_t v = x->shape[x->ndim - 1];
    rc_tensor *oh = rc_one_hot(g, t, v, y->iparam[0], x->dtype);
    rc_tensor *valid = rc_sum(g, oh, -1, 1);
    rc_tensor *count = rc_sum_all(g, valid);
    rc_tensor *denom = rc_add(g, count, rc_equal(g, count, rc_scalar(g, x->dtype, 0.0)));
    rc_tensor *p = rc_softmax(g, x);
    rc_tensor *jac = rc_mul(g, p, rc_sub(g, H, rc_sum(g, rc_mul(g, H, p), -1, 1)));
    gs[0] = narrow(g, rc_mul(g, rc_mul(g, jac, valid), rc_div(g, G, denom)), y);
    gs[2] = rc_div(g, rc_sum_all(g, rc_mul(g, H, rc_sub(g, rc_mul(g, p, valid), oh))), denom);
    return 0;
}

static int grad_reduce(rc_graph *g, rc_tensor *y, rc_tensor *G, rc_tensor **gs)
{
    rc_tensor *a = y->src[0];
    int ax = y->iparam[0];
    rc_tensor *Gk = G, *yk = y;
    if (!y->iparam[1]) {
        int64_t shape[RC_MAX_DIMS];
        for (int i = 0; i < a->ndim; i++)
            shape[i] = i == ax ? 1 : a->shape[i];
        Gk = rc_reshape(g, G, a->ndim, shape);
        yk = rc_reshape(g, y, a->ndim, shape);
    }
    rc_tensor *Ge = rc_expand(g, Gk, a->ndim, a->shape);
    if (y->op == RC_OP_SUM)
        gs[0] = Ge;
    else /* MAX: the gradient goes to the maxima */
        gs[0] = rc_mul(g, Ge, rc_equal(g, a, yk));
    return 0;
}

static int grad_move(rc_graph *g, rc_tensor *y, rc_tensor *G, rc_tensor **gs)
{
    rc_tensor *a = y->src[0];
    switch (y->op) {
    case RC_OP_RESHAPE:
        gs[0] = rc_reshape(g, G, a->ndim, a->shape);
        break;
    case RC_OP_PERMUTE: {
        int inv[RC_MAX_DIMS];
        for (int i = 0; i < y->ndim; i++)
            inv[y->iparam[i]] = i;
        gs[0] = rc_permute(g, G, inv);
        break;
    }
    case RC_OP_SLICE:
        gs[0] = rc_pad(g, G, y->iparam[0], y->iparam[1], a->shape[y->iparam[0]]);
        break;
    case RC_OP_PAD:
        gs[0] = rc_slice(g, G, y->iparam[0], y->iparam[1], y->iparam[1] + a->shape[y->iparam[0]]);
        break;
    case RC_OP_CONCAT: {
        int64_t off = 0;
        for (int i = 0; i < y->nsrc; i++) {
            int64_t len = y->src[i]->shape[y->iparam[0]];
            gs[i] = rc_slice(g, G, y->iparam[0], off, off + len);
            off += len;
        }
        break;
    }
    case RC_OP_EXPAND:
        gs[0] = to_shape_of(g, G, a);
        break;
    default: /* SUM_TO */
        gs[0] = rc_expand(g, G, a->ndim, a->shape);
        break;
    }
    return 0;
}

/* The rows of G at ids, zero where the id is the skipped padding id. */
static rc_tensor *grad_embedding_grad(rc_graph *g, rc_tensor *y, rc_tensor *G)
{
    rc_tensor *ids = y->src[0], *rows = rc_embedding(g, G, ids);
    if (y->iparam[1] < 0)
        return rows;
    int32_t pad = y->iparam[1];
    rc_tensor *is_pad = rc_cast(g, rc_equal(g, ids, rc_const(g, "padding_idx", RC_I32, 0, NULL, &pad)), G->dtype);
    int64_t shape[RC_MAX_DIMS];
    for (int i = 0; i < ids->ndim; i++)
        shape[i] = ids->shape[i];
    shape[ids->ndim] = 1;
    rc_tensor *keep = rc_affine(g, rc_reshape(g, is_pad, ids->ndim + 1, shape), -1.0, 1.0);
    return rc_mul(g, rows, keep);
}

/* The same dropout mask applied to the gradient: a copy of the node's parameters. */
static rc_tensor *grad_dropout(rc_graph *g, rc_tensor *y, rc_tensor *G)
{
    rc_tensor *d = rci_node_new(g, RC_OP_DROPOUT, G->dtype, G->ndim, G->shape, 1, &G);
    if (d) {
        d->iparam[0] = y->iparam[0];
        d->iparam[1] = y->iparam[1];
        d->fparam[0] = y->fparam[0];
    }
    return d;
}

/* conv2d: the input and weight gradients as ops of their own; the bias's sums G over N, H, W */
static int grad_conv2d(rc_graph *g, rc_tensor *y, rc_tensor *G, rc_tensor **gs)
{
    const int32_t *ip = y->iparam;
    rc_conv2d_params q = {{ip[0], ip[1]}, {ip[2], ip[3]}, {ip[4], ip[5]}, ip[6]};
    rc_tensor *x = y->src[0], *w = y->src[1];
    gs[0] = rc_conv2d_grad_input(g, G, w, x->shape[2], x->shape[3], &q);
    gs[1] = rc_conv2d_grad_weight(g, G, x, w->shape[2], w->shape[3], &q);
    if (y->nsrc > 2 && y->src[2])
        gs[2] = rc_sum(g, rc_sum(g, rc_sum(g, G, 3, 0), 2, 0), 0, 0);
    return 0;
}

static int grad_pool2d(rc_graph *g, rc_tensor *y, rc_tensor *G, rc_tensor **gs)
{
    const int32_t *ip = y->iparam;
    rc_pool2d_params q = {{ip[1], ip[2]}, {ip[3], ip[4]}, {ip[5], ip[6]}};
    gs[0] = rc_pool2d_grad(g, G, y->src[0], (rc_pool_kind)ip[0], &q);
    return 0;
}

int rci_grad_node(rc_graph *g, rc_tensor *y, rc_tensor *G, rc_tensor **gs)
{
    for (int i = 0; i < y->nsrc; i++)
        gs[i] = NULL;
    switch (y->op) {
    case RC_OP_LEAF:
    case RC_OP_FULL:
    case RC_OP_NORMAL:
    case RC_OP_ONE_HOT:
    case RC_OP_EQUAL:
    case RC_OP_STOP_GRADIENT:
    case RC_OP_MP_MAX:
        return 0;
    case RC_OP_MP_ENTER:
        gs[0] = rc_mp_reduce(g, G);
        return 0;
    case RC_OP_MP_REDUCE:
        gs[0] = rc_mp_enter(g, G);
        return 0;
    case RC_OP_ADD:
    case RC_OP_SUB:
    case RC_OP_MUL:
    case RC_OP_DIV:
        return grad_binary(g, y, G, gs);
    case RC_OP_AFFINE:
    case RC_OP_EXP:
    case RC_OP_LOG:
    case RC_OP_SQRT:
    case RC_OP_RSQRT:
    case RC_OP_TANH:
        gs[0] = grad_unary(g, y, G);
        return 0;
    case RC_OP_ACT:
        return grad_act(g, y, G, gs);
    case RC_OP_MATMUL:
        return grad_matmul(g, y, G, gs);
    case RC_OP_SOFTMAX:
        return grad_softmax(g, y, G, gs);
    case RC_OP_ATTENTION:
        return grad_attention(g, y, G, gs);
    case RC_OP_LAYER_NORM:
    case RC_OP_RMS_NORM:
        return grad_norm(g, y, G, gs);
    case RC_OP_EMBEDDING:
        gs[0] = rc_embedding_grad(g, y->src[1], G, y->src[0]->shape[0], y->iparam[0]);
        if (gs[0] && y->iparam[2]) /* a vocabulary shard: the same rows */
            memcpy(gs[0]->iparam + 2, y->iparam + 2, 3 * sizeof *y->iparam);
        return 0;
    case RC_OP_EMBEDDING_GRAD:
        gs[1] = grad_embedding_grad(g, y, G);
        return 0;
    case RC_OP_ROPE:
        gs[0] = (y->iparam[2] ? rc_rope : rc_rope_inverse)(g, G, y->src[1], y->iparam[0],
                                                           (rc_rope_mode)y->iparam[1], y->fparam[0]);
        return 0;
    case RC_OP_RESHAPE:
    case RC_OP_PERMUTE:
    case RC_OP_SLICE:
    case RC_OP_PAD:
    case RC_OP_CONCAT:
    case RC_OP_EXPAND:
    case RC_OP_SUM_TO:
        return grad_move(g, y, G, gs);
    case RC_OP_SUM:
    case RC_OP_MAX:
        return grad_reduce(g, y, G, gs);
    case RC_OP_CROSS_ENTROPY:
        return grad_cross_entropy(g, y, G, gs);
    case RC_OP_CROSS_ENTROPY_GRAD:
        return grad_cross_entropy_grad(g, y, G, gs);
    case RC_OP_CONV2D:
        return grad_conv2d(g, y, G, gs);
    case RC_OP_POOL2D:
        return grad_pool2d(g, y, G, gs);
    case RC_OP_DROPOUT:
        gs[0] = grad_dropout(g, y, G);
        return 0;
    case RC_OP_WHERE: {
        rc_tensor *zero = rc_scalar(g, G->dtype, 0.0);
        gs[1] = to_shape_of(g, rc_where(g, y->src[0], G, zero), y->src[1]);
        gs[2] = to_shape_of(g, rc_where(g, y->src[0], zero, G), y->src[2]);
        return 0;
    }
    case RC_OP_CAST:
        if (rc_dtype_is_float(y->src[0]->dtype))
            gs[0] = rc_cast(g, G, y->src[0]->dtype);
        return 0;
    default:
        rci_fail(g, RC_ERR_UNSUPPORTED, "backward: op %s has no gradient rule", rc_op_name(y->op));
        return -1;
    }
}
