/* ops_nn.c - builders of the neural-network ops: softmax, norms, embedding lookup,
 * rotary position embedding, cross-entropy and one-hot. What a node's inputs must be beyond
 * what its shape needs (a mask, a norm's weight, the loss gradient's upstream) is
 * rci_node_check's (node_check.c). */
#include "internal.h"

static int ids_input(rc_graph *g, const char *op, const rc_tensor *t)
{
    if (t->dtype == RC_I32)
        return 0;
    char s[96];
    rci_fail(g, RC_ERR_DTYPE, "%s: ids %s have dtype %s (must be i32)", op,
            rc_shape_str(t, s, sizeof s), rc_dtype_name(t->dtype));
    return -1;
}

rc_tensor *rc_softmax(rc_graph *g, rc_tensor *a)
{
    return rc_softmax_ext(g, a, NULL, 1.0, 0);
}

rc_tensor *rc_softmax_ext(rc_graph *g, rc_tensor *a, rc_tensor *mask, double scale, int causal)
{
    if (rci_inputs_bad(g, 1, &a) || rci_float_input(g, "softmax", a))
        return NULL;
    if (a->ndim < 1)
        return rci_fail(g, RC_ERR_SHAPE, "softmax: input is a scalar");
    rc_tensor *src[2] = {a, mask};
    rc_tensor *y = rci_node_new(g, RC_OP_SOFTMAX, a->dtype, a->ndim, a->shape, 2, src);
    if (y) {
        y->fparam[0] = scale;
        y->iparam[0] = !!causal;
    }
    return rci_node_checked(g, y);
}

rc_tensor *rc_layer_norm(rc_graph *g, rc_tensor *x, rc_tensor *weight, rc_tensor *bias, double eps)
{
    if (rci_inputs_bad(g, 1, &x) || rci_float_input(g, "layer_norm", x))
        return NULL;
    if (x->ndim < 1)
        return rci_fail(g, RC_ERR_SHAPE, "layer_norm: input is a scalar");
    rc_tensor *src[3] = {x, weight, bias};
    rc_tensor *y = rci_node_new(g, RC_OP_LAYER_NORM, x->dtype, x->ndim, x->shape, 3, src);
    if (y)
        y->fparam[0] = eps;
    return rci_node_checked(g, y);
}

rc_tensor *rc_rms_norm(rc_graph *g, rc_tensor *x, rc_tensor *weight, double eps, double offset)
{
    if (rci_inputs_bad(g, 1, &x) || rci_float_input(g, "rms_norm", x))
        return NULL;
    if (x->ndim < 1)
        return rci_fail(g, RC_ERR_SHAPE, "rms_norm: input is a scalar");
    rc_tensor *src[2] = {x, weight};
    rc_tensor *y = rci_node_new(g, RC_OP_RMS_NORM, x->dtype, x->ndim, x->shape, 2, src);
    if (y) {
        y->fparam[0] = eps;
        y->fparam[1] = offset;
    }
    return rci_node_checked(g, y);
}

rc_tensor *rci_norm_grad(rc_graph *g, rc_tensor *norm, rc_tensor *dout, int which)
{
    if (rci_inputs_bad(g, 1, &norm) || rci_inputs_bad(g, 1, &dout))
        return NULL;
    if (norm->op != RC_OP_LAYER_NORM && norm->op != RC_OP_RMS_NORM)
        return rci_fail(g, RC_ERR_ARG, "norm_grad: node %s is no layer or RMS norm", rc_op_name(norm->op));
    rc_tensor *x = norm->src[0], *src[3] = {x, norm->src[1], dout};
    if (x->ndim < 1)
        return rci_fail(g, RC_ERR_SHAPE, "norm_grad: x is a scalar");
    rc_dtype t = which ? rci_compute_dtype(x->dtype) : x->dtype;
    rc_tensor *y = which ? rci_node_new(g, RC_OP_NORM_GRAD, t, 1, &x->shape[x->ndim - 1], 3, src) /* [C] */
                         : rci_node_new(g, RC_OP_NORM_GRAD, t, x->ndim, x->shape, 3, src);
    if (y) {
        y->iparam[0] = norm->op == RC_OP_LAYER_NORM;
        y->iparam[1] = which;
        y->fparam[0] = norm->fparam[0];
        y->fparam[1] = norm->op == RC_OP_RMS_NORM ? norm->fparam[1] : 0;
    }
    return rci_node_checked(g, y);
}

rc_tensor *rci_norm_grad_plus(rc_graph *g, rc_tensor *dx, rc_tensor *r)
{
    if (rci_inputs_bad(g, 1, &dx) || rci_inputs_bad(g, 1, &r))
        return NULL;
    if (dx->op != RC_OP_NORM_GRAD || dx->iparam[1] != 0 || dx->nsrc != 3)
        return rci_fail(g, RC_ERR_ARG, "norm_grad_plus: node %s is no norm's dx without an addend",
                        rc_op_name(dx->op));
    rc_tensor *src[4] = {dx->src[0], dx->src[1], dx->src[2], r};
    rc_tensor *y = rci_node_new(g, RC_OP_NORM_GRAD, dx->dtype, dx->ndim, dx->shape, 4, src);
    if (y) {
        memcpy(y->iparam, dx->iparam, sizeof y->iparam);
        memcpy(y->fparam, dx->fparam, sizeof y->fparam);
    }
    return rci_node_checked(g, y);
}

rc_tensor *rc_embedding(rc_graph *g, rc_tensor *table, rc_tensor *ids)
{
    return rc_embedding_pad(g, table, ids, -1);
}

rc_tensor *rc_embedding_pad(rc_graph *g, rc_tensor *table, rc_tensor *ids, int padding_idx)
{
    rc_tensor *src[2] = {table, ids};
    if (rci_inputs_bad(g, 2, src) || rci_float_input(g, "embedding", table) ||
        ids_input(g, "embedding", ids))
        return NULL;
    if (table->ndim != 2) {
        char s[96];
        return rci_fail(g, RC_ERR_SHAPE, "embedding: table %s must be 2-D [vocab, dim]",
                       rc_shape_str(table, s, sizeof s));
    }
    if (ids->ndim + 1 > RC_MAX_DIMS)
        return rci_fail(g, RC_ERR_SHAPE, "embedding: ids have too many dimensions (%d)", ids->ndim);
    int64_t shape[RC_MAX_DIMS];
    for (int i = 0; i < ids->ndim; i++)
        shape[i] = ids->shape[i];
    shape[ids->ndim] = table->shape[1];
    rc_tensor *y = rci_node_new(g, RC_OP_EMBEDDING, table->dtype, ids->ndim + 1, shape, 2, src);
    if (y)
        y->iparam[0] = padding_idx < 0 ? -1 : padding_idx;
    return y;
}

rc_tensor *rc_embedding_grad(rc_graph *g, rc_tensor *ids, rc_tensor *grad, int64_t vocab,
                             int padding_idx)
{
    rc_tensor *src[2] = {ids, grad};
    if (rci_inputs_bad(g, 2, src) || ids_input(g, "embedding_grad", ids) ||
        rci_float_input(g, "embedding_grad", grad))
        return NULL;
    int ok = grad->ndim == ids->ndim + 1;
    for (int i = 0; ok && i < ids->ndim; i++)
        ok = ids->shape[i] == grad->shape[i];
    if (!ok || vocab <= 0 || vocab > INT32_MAX) {
        char si[96], sg[96];
        return rci_fail(g, RC_ERR_SHAPE, "embedding_grad: ids %s, gradient %s, vocab %lld do not fit",
                       rc_shape_str(ids, si, sizeof si), rc_shape_str(grad, sg, sizeof sg),
                       (long long)vocab);
    }
    int64_t shape[2] = {vocab, grad->shape[grad->ndim - 1]};
    rc_tensor *y = rci_node_new(g, RC_OP_EMBEDDING_GRAD, grad->dtype, 2, shape, 2, src);
    if (y) {
        y->iparam[0] = (int32_t)vocab;
        y->iparam[1] = padding_idx < 0 ? -1 : padding_idx;
    }
    return y;
}

static rc_tensor *rope(rc_graph *g, rc_tensor *x, rc_tensor *pos, int rot_dims, rc_rope_mode mode,
                       double theta, int inverse)
{
    rc_tensor *src[2] = {x, pos};
    if (rci_inputs_bad(g, 2, src) || rci_float_input(g, "rope", x) || ids_input(g, "rope", pos))
        return NULL;
    char sx[96], sp[96]; /* the shapes are written only for a message */
    if (x->ndim < 3)
        return rci_fail(g, RC_ERR_SHAPE, "rope: input %s must be [..., T, heads, head_dim]",
                        rc_shape_str(x, sx, sizeof sx));
    int64_t d = x->shape[x->ndim - 1];
    if (rot_dims <= 0 || rot_dims % 2 || rot_dims > d)
        return rci_fail(g, RC_ERR_ARG, "rope: rotary dims %d must be even and in (0, %lld] for input %s",
                       rot_dims, (long long)d, rc_shape_str(x, sx, sizeof sx));
    if (mode != RC_ROPE_INTERLEAVED && mode != RC_ROPE_HALF)
        return rci_fail(g, RC_ERR_ARG, "rope: unknown mode %d", (int)mode);
    int64_t rows = rci_shape_numel(x->ndim - 2, x->shape);
    int64_t np = rc_tensor_numel(pos);
    if (np == 0 || rows % np || np % x->shape[x->ndim - 3])
        return rci_fail(g, RC_ERR_SHAPE,
                       "rope: positions %s must cover the sequence axis of %s ([T] or [..., T])",
                       rc_shape_str(pos, sp, sizeof sp), rc_shape_str(x, sx, sizeof sx));
    if (!(theta > 0))
        return rci_fail(g, RC_ERR_ARG, "rope: theta %g must be positive", theta);
    rc_tensor *y = rci_node_new(g, RC_OP_ROPE, x->dtype, x->ndim, x->shape, 2, src);
    if (y) {
        y->iparam[0] = rot_dims;
        y->iparam[1] = (int32_t)mode;
        y->iparam[2] = inverse;
        y->fparam[0] = theta;
    }
    return y;
}

rc_tensor *rc_rope(rc_graph *g, rc_tensor *x, rc_tensor *pos, int rot_dims, rc_rope_mode mode,
                   double theta)
{
    return rope(g, x, pos, rot_dims, mode, theta, 0);
}

rc_tensor *rc_rope_inverse(rc_graph *g, rc_tensor *x, rc_tensor *pos, int rot_dims,
                           rc_rope_mode mode, double theta)
{
    return rope(g, x, pos, rot_dims, mode, theta, 1);
}

rc_tensor *rc_cross_entropy(rc_graph *g, rc_tensor *logits, rc_tensor *targets, int ignore_index)
{
    rc_tensor *src[2] = {logits, targets};
    if (rci_inputs_bad(g, 2, src) || rci_float_input(g, "cross_entropy", logits) ||
        ids_input(g, "cross_entropy", targets))
        return NULL;
    int ok = logits->ndim >= 1 && targets->ndim == logits->ndim - 1;
    for (int i = 0; ok && i < targets->ndim; i++)
        ok = targets->shape[i] == logits->shape[i];
    if (!ok) {
        char sl[96], st[96];
        return rci_fail(g, RC_ERR_SHAPE, "cross_entropy: targets %s must be the logits %s without the last axis",
                       rc_shape_str(targets, st, sizeof st), rc_shape_str(logits, sl, sizeof sl));
    }
    /* the loss of 16-bit logits is an f32 scalar: a mean over many rows needs the range */
    rc_tensor *y = rci_node_new(g, RC_OP_CROSS_ENTROPY, rci_compute_dtype(logits->dtype), 0, NULL, 2, src);
    if (y)
        y->iparam[0] = ignore_index;
    return y;
}

static rc_tensor *shard_mode(rc_graph *g, rc_tensor *y, int64_t first, int64_t vocab, const char *op)
{
    if (!y)
        return NULL;
    if (first < 0 || vocab <= 0 || vocab > INT32_MAX || first > INT32_MAX)
        return rci_fail(g, RC_ERR_ARG, "%s: shard at %lld of a %lld-id vocabulary", op, (long long)first,
                       (long long)vocab);
    y->iparam[2] = 1;
    y->iparam[3] = (int32_t)first;
    y->iparam[4] = (int32_t)vocab;
    return y;
}

rc_tensor *rc_embedding_shard(rc_graph *g, rc_tensor *table, rc_tensor *ids, int64_t first, int64_t vocab)
{
    return shard_mode(g, rc_embedding(g, table, ids), first, vocab, "embedding");
}

rc_tensor *rc_one_hot_shard(rc_graph *g, rc_tensor *ids, int64_t depth, int ignore_index, rc_dtype t,
                            int64_t first, int64_t vocab)
{
    return shard_mode(g, rc_one_hot(g, ids, depth, ignore_index, t), first, vocab, "one_hot");
}

rc_tensor *rc_cross_entropy_grad(rc_graph *g, rc_tensor *logits, rc_tensor *targets,
                                 rc_tensor *g_out, int ignore_index)
{
    rc_tensor *src[3] = {logits, targets, g_out};
    if (rci_inputs_bad(g, 3, src))
        return NULL;
    if (!rc_cross_entropy(g, logits, targets, ignore_index)) /* the loss's rules for the inputs */
        return NULL;
    rc_tensor *y = rci_node_new(g, RC_OP_CROSS_ENTROPY_GRAD, logits->dtype, logits->ndim, logits->shape, 3, src);
    if (y)
        y->iparam[0] = ignore_index;
    return rci_node_checked(g, y);
}

rc_tensor *rc_one_hot(rc_graph *g, rc_tensor *ids, int64_t depth, int ignore_index, rc_dtype t)
{
    if (rci_inputs_bad(g, 1, &ids) || ids_input(g, "one_hot", ids))
        return NULL;
    if (!rc_dtype_is_float(t))
        return rci_fail(g, RC_ERR_DTYPE, "one_hot: output dtype %s (f32, f64, bf16 or f16)", rc_dtype_name(t));
    if (depth <= 0 || depth > INT32_MAX || ids->ndim + 1 > RC_MAX_DIMS)
        return rci_fail(g, RC_ERR_ARG, "one_hot: depth %lld for ids of %d dimensions",
                       (long long)depth, ids->ndim);
    int64_t shape[RC_MAX_DIMS];
    for (int i = 0; i < ids->ndim; i++)
        shape[i] = ids->shape[i];
    shape[ids->ndim] = depth;
    rc_tensor *y = rci_node_new(g, RC_OP_ONE_HOT, t, ids->ndim + 1, shape, 1, &ids);
    if (y) {
        y->iparam[0] = (int32_t)depth;
        y->iparam[1] = ignore_index;
    }
    return y;
}

/* ATTENTION's parameters that its STATS and GRAD nodes repeat: scale, causal and the
 * dropout probability and key */
static void attention_params_copy(rc_tensor *y, const rc_tensor *att)
{
    y->fparam[0] = att->fparam[0];
    y->fparam[1] = att->fparam[1];
    y->iparam[0] = att->iparam[0];
    y->iparam[2] = att->iparam[2];
    y->iparam[3] = att->iparam[3];
}

/* The node's layout is RC_OP_ATTENTION's (redco.h): srcs q, k, v, bias (NULL: none),
 * fparam[0] = scale, iparam[0] = causal, fparam[1] = dropout and iparam[2..3] its key,
 * hashed as rc_dropout's (0 without dropout); node_check.c's check_attention decides the
 * rest. */
rc_tensor *rc_attention(rc_graph *g, rc_tensor *q, rc_tensor *k, rc_tensor *v, rc_tensor *bias,
                        double scale, int causal, double dropout, rc_rng key)
{
    rc_tensor *src[4] = {q, k, v, bias};
    if (rci_inputs_bad(g, 3, src) || rci_float_input(g, "attention", q))
        return NULL;
    if (!(dropout >= 0.0 && dropout < 1.0))
        return rci_fail(g, RC_ERR_ARG, "attention: dropout probability %g outside [0, 1)", dropout);
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4) {
        char sq[96], sk[96], sv[96];
        return rci_fail(g, RC_ERR_SHAPE, "attention: q %s, k %s, v %s must be [B, H, Tq, D], "
                        "[B, KV, Tk, D], [B, KV, Tk, Dv]", rc_shape_str(q, sq, sizeof sq),
                        rc_shape_str(k, sk, sizeof sk), rc_shape_str(v, sv, sizeof sv));
    }
    int64_t shape[4] = {q->shape[0], q->shape[1], q->shape[2], v->shape[3]};
    rc_tensor *y = rci_node_new(g, RC_OP_ATTENTION, q->dtype, 4, shape, 4, src);
    if (y) {
        y->fparam[0] = scale;
        y->iparam[0] = !!causal;
    }
    if (y && dropout > 0) {
        uint64_t h = rci_hash64(key.key ^ rci_hash64(key.counter));
        y->fparam[1] = dropout;
        rci_node_set_key(y, 2, h);
    }
    return rci_node_checked(g, y);
}

rc_tensor *rci_attention_stats(rc_graph *g, rc_tensor *att, rc_tensor *dout)
{
    rc_tensor *src[2] = {att, dout};
    if (rci_inputs_bad(g, 2, src))
        return NULL;
    int64_t shape[4] = {att->shape[0], att->shape[1], att->ndim > 2 ? att->shape[2] : 0, 2};
    rc_tensor *y = rci_node_new(g, RC_OP_ATTENTION_STATS, rci_compute_dtype(att->dtype), 4, shape, 2, src);
    return rci_node_checked(g, y);
}

rc_tensor *rci_attention_grad(rc_graph *g, rc_tensor *att, rc_tensor *dout, rc_tensor *stats, int which)
{
    rc_tensor *src[6] = {att->src[0], att->src[1], att->src[2], att->src[3], dout, stats};
    if (rci_inputs_bad(g, 1, &stats))
        return NULL;
    if (which < 0 || which > 4 || (which < 4 && !src[which]))
        return rci_fail(g, RC_ERR_ARG, "attention_grad: no input %d to differentiate", which);
    rc_tensor *y;
    if (which == 4) { /* dq, dk, dv packed */
        int64_t n = rc_tensor_numel(src[0]) + rc_tensor_numel(src[1]) + rc_tensor_numel(src[2]);
        y = rci_node_new(g, RC_OP_ATTENTION_GRAD, att->dtype, 1, &n, 6, src);
    } else {
        y = rci_node_new(g, RC_OP_ATTENTION_GRAD, att->dtype, src[which]->ndim, src[which]->shape, 6, src);
    }
    if (y) {
        attention_params_copy(y, att);
        y->iparam[1] = which;
    }
    return rci_node_checked(g, y);
}
