/* partition.c - a rank's share of a global graph: every node rebuilt through the ordinary
 * builders from its local inputs, with the shapes that name a split axis divided by the
 * shard count, and the model-parallel ops where the plan needs them:
 *   mp_enter   before column-parallel linears (their input gradient is all-reduced);
 *   mp_reduce  where a partial sum must be whole (one per tensor);
 *   a slice    of a replicated input meeting a split one (through mp_enter, so the
 *              replicated tensor's gradient is whole on every rank);
 *   a gather   where an op needs a split tensor whole, and for split outputs: each shard's
 *              part padded with zeros to the whole and summed over the model axis (exact:
 *              one term per element is non-zero; one collective kind, and the gradient is
 *              the shard's cut of the whole gradient);
 *   vocabulary shards for embeddings and the cross-entropy;
 *   fused attention with this shard's heads (a key/value with fewer heads cut to its own);
 *   convs with the local channel counts (a row-parallel conv's bias added after its
 *   all-reduce; a grouped column conv's whole input cut to its groups).
 * Splittable inputs (a key/value cache) become leaves of this shard's shape. */
#include "shard_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const rci_shard_analysis *p;
    rc_graph *lg;
    int mp, rank;
    rc_tensor **map;             /* global node id -> its local node */
    rc_tensor **whole;           /* global node id -> mp_reduce of its local node */
    rc_tensor **entered;         /* global node id -> mp_enter of its local node */
    rc_tensor **sliced;          /* global node id -> its shard cut (one per tensor: every layer
                                    slicing T5's position bias shares it) */
    rc_tensor **gathered;        /* global node id -> its local node made whole */
    const rc_shard_spec *spec;
} local;

/* the extent of a split axis on one shard (vocabularies round up) */
static int64_t shard_len(const rci_shard_cand *c, int mp)
{
    return c->c_outer * ((c->groups + mp - 1) / mp) * c->c_inner;
}

static void local_shape(const local *l, const rc_tensor *y, int64_t *shape)
{
    for (int i = 0; i < y->ndim; i++)
        shape[i] = y->shape[i];
    const rci_shard_state *s = &l->p->st[y->id];
    if (s->kind == ST_SPLIT)
        shape[s->c[0].axis] = shard_len(&s->c[0], l->mp);
}

/* Views axis ax of x as [outer, rest] (a no-op reshape when outer is 1): the axis to cut
 * or pad is then ax + (outer > 1). */
static rc_tensor *split_view(rc_graph *g, rc_tensor *x, int ax, int64_t outer)
{
    if (outer == 1)
        return x;
    int64_t shape[RC_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (i == ax) {
            shape[nd++] = outer;
            shape[nd++] = x->shape[i] / outer;
        } else {
            shape[nd++] = x->shape[i];
        }
    }
    return rc_reshape(g, x, nd, shape);
}

static rc_tensor *merge_view(rc_graph *g, rc_tensor *x, int ax, int64_t outer)
{
    if (outer == 1)
        return x;
    int64_t shape[RC_MAX_DIMS];
    for (int i = 0, j = 0; i < x->ndim; i++, j++) {
        shape[j] = x->shape[i];
        if (i == ax)
            shape[j] *= x->shape[++i];
    }
    return rc_reshape(g, x, x->ndim - 1, shape);
}

/* x, replicated, cut along axis ax to this shard's part of the split c (through mp_enter,
 * so x's gradient is all-reduced whole) */
static rc_tensor *cut(local *l, rc_tensor *x, int ax, const rci_shard_cand *c)
{
    rc_graph *g = l->lg;
    int64_t per = c->groups / l->mp * c->c_inner, first = l->rank * per;
    rc_tensor *v = split_view(g, rc_mp_enter(g, x), ax, c->c_outer);
    return merge_view(g, rc_slice(g, v, ax + (c->c_outer > 1), first, first + per), ax, c->c_outer);
}

/* x, this shard's part of a tensor split on axis ax as c, made whole on every rank: placed
 * in zeros at its offset and summed over the model axis; vocabulary padding cut off */
static rc_tensor *gather(local *l, rc_tensor *x, int ax, const rci_shard_cand *c)
{
    rc_graph *g = l->lg;
    int64_t run = shard_len(c, l->mp) / c->c_outer, whole = run * l->mp;
    int sub = ax + (c->c_outer > 1);
    rc_tensor *v = rc_pad(g, split_view(g, x, ax, c->c_outer), sub, l->rank * run, whole);
    rc_tensor *r = rc_mp_reduce(g, merge_view(g, v, ax, c->c_outer));
    int64_t full = c->c_outer * c->groups * c->c_inner;
    return r && r->shape[ax] != full ? rc_slice(g, r, ax, 0, full) : r;
}

/* x (replicated, full along the consumer's split axis) cut to this shard's part */
static rc_tensor *slice_for(local *l, const rc_tensor *y, const rc_tensor *gx, rc_tensor *x)
{
    const rci_shard_state *s = &l->p->st[y->id];
    if (s->kind != ST_SPLIT || !x)
        return x;
    const rci_shard_cand *c = &s->c[0];
    int ax = c->axis - (y->ndim - gx->ndim);
    int64_t full = c->c_outer * c->groups * c->c_inner;
    if (ax < 0 || x->shape[ax] != full || full == shard_len(c, l->mp))
        return x; /* broadcast along the axis, or already a shard */
    return cut(l, x, ax, c);
}

/* a replicated input of a row-parallel linear (or conv: its channels) cut to the features
 * of its weight's shard */
static rc_tensor *row_cut(local *l, const rc_tensor *y, rc_tensor *x)
{
    int wi = l->p->param_of[y->src[1]->id];
    const rc_shard_spec *s = &l->spec[wi];
    int ax = y->op == RC_OP_CONV2D ? 1 : x->ndim - 1;
    rci_shard_cand c = {ax, s->outer, s->groups, s->inner, s->outer, s->inner};
    return cut(l, x, ax, &c);
}

static rc_tensor *input(local *l, const rc_tensor *y, int i)
{
    const rc_tensor *gx = y->src[i];
    if (!gx)
        return NULL;
    rc_tensor *x = l->map[gx->id];
    unsigned a = l->p->act[y->id * RC_MAX_SRC + i];
    if (a & ACT_REDUCE) {
        if (!l->whole[gx->id])
            l->whole[gx->id] = rc_mp_reduce(l->lg, x);
        x = l->whole[gx->id];
    }
    const rci_shard_state *gs = &l->p->st[gx->id];
    if ((a & ACT_GATHER) && gs->kind == ST_SPLIT) {
        if (!l->gathered[gx->id])
            l->gathered[gx->id] = gather(l, x, gs->c[0].axis, &gs->c[0]);
        x = l->gathered[gx->id];
    }
    if (a & ACT_ENTER) {
        if (!l->entered[gx->id])
            l->entered[gx->id] = rc_mp_enter(l->lg, x);
        x = l->entered[gx->id];
    }
    if (a & ACT_SLICE) {
        if (!l->sliced[gx->id]) {
            rc_tensor *cut = slice_for(l, y, gx, x);
            if (cut == x)
                return x; /* nothing to cut: a shard already, or broadcast */
            l->sliced[gx->id] = cut;
        }
        x = l->sliced[gx->id];
    }
    if (a & ACT_ROWCUT)
        x = row_cut(l, y, x);
    return x;
}

/* mean cross-entropy over vocabulary shards: the row maximum, the sum of exponentials and
 * the target logit all-reduced; padding columns of the last shard masked out */
static rc_tensor *cross_entropy_shards(local *l, const rc_tensor *y, rc_tensor *z, rc_tensor *targets)
{
    rc_graph *g = l->lg;
    const rci_shard_cand *c = &l->p->st[y->src[0]->id].c[0];
    int64_t V = c->groups, Vl = shard_len(c, l->mp), first = l->rank * Vl;
    int ignore = y->iparam[0];
    if (z->dtype != y->dtype) /* 16-bit logits: the loss in f32, as the fused op computes it */
        z = rc_cast(g, z, y->dtype);
    rc_tensor *zm = z;
    if (first + Vl > V) {
        float *pad = calloc((size_t)Vl, sizeof *pad);
        for (int64_t j = 0; pad && j < Vl; j++)
            pad[j] = first + j < V ? 0.0f : -1e30f;
        zm = rc_add(g, z, rc_const(g, "vocab_padding", z->dtype, 1, &Vl, pad));
        free(pad);
    }
    rc_tensor *m = rc_mp_max(g, rc_max(g, zm, -1, 1));
    rc_tensor *s = rc_mp_reduce(g, rc_sum(g, rc_exp(g, rc_sub(g, zm, m)), -1, 1));
    rc_tensor *lse = rc_add(g, rc_log(g, s), m);
    rc_tensor *oh = rc_one_hot_shard(g, targets, Vl, ignore, z->dtype, first, V);
    rc_tensor *tl = rc_mp_reduce(g, rc_sum(g, rc_mul(g, z, oh), -1, 1));
    /* valid rows from the (replicated) targets themselves: no collective */
    int32_t ign = ignore;
    rc_tensor *is_ignored = rc_equal(g, targets, rc_const(g, "ignore_index", RC_I32, 0, NULL, &ign));
    int64_t vshape[RC_MAX_DIMS];
    for (int i = 0; i < targets->ndim; i++)
        vshape[i] = targets->shape[i];
    vshape[targets->ndim] = 1;
    rc_tensor *valid = rc_reshape(g, rc_affine(g, rc_cast(g, is_ignored, z->dtype), -1.0, 1.0),
                                  targets->ndim + 1, vshape);
    rc_tensor *count = rc_sum_all(g, valid);
    rc_tensor *denom = rc_add(g, count, rc_equal(g, count, rc_scalar(g, z->dtype, 0.0)));
    return rc_div(g, rc_sum_all(g, rc_mul(g, rc_sub(g, lse, tl), valid)), denom);
}

/* conv2d on a shard: the weight's local shape says how. Split on its input channels (row
 * parallel): a partial sum, all-reduced before the bias is added once. Split on its output
 * channels with groups: the input, whole, is cut to those groups' channels (through
 * mp_enter), and the local conv has the shard's groups. */
static rc_tensor *conv_shard(local *l, const rc_tensor *y, rc_tensor **x)
{
    rc_graph *g = l->lg;
    const int32_t *ip = y->iparam;
    rc_conv2d_params q = {{ip[0], ip[1]}, {ip[2], ip[3]}, {ip[4], ip[5]}, ip[6]};
    int wi = l->p->param_of[y->src[1]->id];
    int axis = wi >= 0 ? l->spec[wi].axis : -1;
    rc_tensor *in = x[0], *w = x[1];
    if (!in || !w)
        return NULL;
    if (axis == 0 && q.groups > 1 && in->shape[1] == y->src[0]->shape[1] && q.groups % l->mp == 0) {
        rci_shard_cand c = {1, 1, q.groups, in->shape[1] / q.groups, 1, 1};
        in = cut(l, in, 1, &c);
    }
    if (in && w->shape[1] > 0 && q.groups > 1)
        q.groups = (int)(in->shape[1] / w->shape[1]);
    if (axis != 1)
        return rc_conv2d(g, in, w, x[2], &q);
    rc_tensor *z = rc_conv2d(g, in, w, NULL, &q);
    if (!x[2])
        return z;
    int64_t bshape[3] = {x[2]->shape[0], 1, 1};
    return rc_add(g, rc_mp_reduce(g, z), rc_reshape(g, x[2], 3, bshape));
}

static rc_tensor *pool_shard(rc_graph *g, const rc_tensor *y, rc_tensor *x)
{
    const int32_t *ip = y->iparam;
    rc_pool2d_params q = {{ip[1], ip[2]}, {ip[3], ip[4]}, {ip[5], ip[6]}};
    return ip[0] == RC_POOL_MAX ? rc_max_pool2d(g, x, &q) : rc_avg_pool2d(g, x, &q);
}

/* A random mask's key (rci_node_key at `at`) for this shard's part of a split tensor: a
 * shard draws its elements by local index, so it takes a key of its own, and the parts'
 * masks are independent (a replicated or partial-sum tensor keeps the one key: every shard
 * draws the same mask, as one process would). */
static void shard_mask_key(const local *l, rc_tensor *t, int at)
{
    rci_node_set_key(t, at, rci_hash64(rci_node_key(t, at) ^ rci_hash64((uint64_t)l->rank + 1)));
}

/* fused attention on a shard: split by heads, a key or value that arrived whole (its kv
 * heads fewer than the query heads, so the generic cut passed it by) is cut to this shard's
 * kv heads, or, fewer kv heads than shards, entered whole and this shard's one kv head
 * taken; either way through mp_enter, so its gradient, a sum over every shard's query
 * heads, is all-reduced */
static rc_tensor *attention_shard(local *l, const rc_tensor *y, rc_tensor **x)
{
    const rci_shard_state *s = &l->p->st[y->id];
    for (int i = 1; i < 3 && l->mp > 1 && s->kind == ST_SPLIT && s->c[0].axis == 1 && x[i]; i++) {
        int64_t KV = y->src[i]->shape[1];
        if (KV == y->shape[1] || x[i]->shape[1] != KV)
            continue; /* as many kv heads as query heads (cut as q), or already this shard's */
        if (KV % l->mp) {
            /* fewer kv heads than shards: this shard's query heads all read kv head h */
            int64_t h = l->rank * (y->shape[1] / l->mp) / (y->shape[1] / KV);
            int id = y->src[i]->id;
            if (!l->entered[id])
                l->entered[id] = rc_mp_enter(l->lg, x[i]);
            if (KV > 1 && !l->sliced[id])
                l->sliced[id] = rc_slice(l->lg, l->entered[id], 1, h, h + 1);
            x[i] = KV > 1 ? l->sliced[id] : l->entered[id];
        } else {
            rci_shard_cand c = {1, 1, KV, 1, 1, 1};
            if (!l->sliced[y->src[i]->id])
                l->sliced[y->src[i]->id] = cut(l, x[i], 1, &c);
            x[i] = l->sliced[y->src[i]->id];
        }
    }
    rc_tensor *a = rc_attention(l->lg, x[0], x[1], x[2], x[3], y->fparam[0], y->iparam[0], 0, (rc_rng){0, 0});
    if (a) { /* the dropout mask drawn by local index, as a DROPOUT's here: the hashed key copied */
        a->fparam[1] = y->fparam[1];
        a->iparam[2] = y->iparam[2];
        a->iparam[3] = y->iparam[3];
        if (a->fparam[1] > 0 && x[0]->shape[1] < y->src[0]->shape[1])
            shard_mask_key(l, a, 2);
    }
    return a;
}

static rc_tensor *unary(rc_graph *g, rc_op op, rc_tensor *x)
{
    switch (op) {
    case RC_OP_EXP: return rc_exp(g, x);
    case RC_OP_LOG: return rc_log(g, x);
    case RC_OP_SQRT: return rc_sqrt(g, x);
    case RC_OP_RSQRT: return rc_rsqrt(g, x);
    default: return rc_tanh(g, x);
    }
}

static rc_tensor *binary(rc_graph *g, rc_op op, rc_tensor *a, rc_tensor *b)
{
    switch (op) {
    case RC_OP_ADD: return rc_add(g, a, b);
    case RC_OP_SUB: return rc_sub(g, a, b);
    case RC_OP_MUL: return rc_mul(g, a, b);
    default: return rc_div(g, a, b);
    }
}

/* the global node y rebuilt from local inputs x[] with local shape `shape` */
static rc_tensor *rebuild(local *l, const rc_tensor *y, rc_tensor **x, const int64_t *shape)
{
    rc_graph *g = l->lg;
    const int32_t *ip = y->iparam;
    const double *fp = y->fparam;
    switch (y->op) {
    case RC_OP_FULL: return rc_full(g, y->dtype, y->ndim, shape, fp[0]);
    case RC_OP_ADD: case RC_OP_SUB: case RC_OP_MUL: case RC_OP_DIV: return binary(g, y->op, x[0], x[1]);
    case RC_OP_AFFINE: return rc_affine(g, x[0], fp[0], fp[1]);
    case RC_OP_EXP: case RC_OP_LOG: case RC_OP_SQRT: case RC_OP_RSQRT: case RC_OP_TANH:
        return unary(g, y->op, x[0]);
    case RC_OP_ACT:
        return y->nsrc > 1 && y->src[1] ? rci_act_times(g, x[0], (rc_act_kind)ip[0], ip[1], x[1])
                                        : rc_act(g, x[0], (rc_act_kind)ip[0], ip[1]);
    case RC_OP_MATMUL: return rc_matmul(g, x[0], x[1], ip[0], ip[1]);
    case RC_OP_SOFTMAX: return rc_softmax_ext(g, x[0], x[1], fp[0], ip[0]);
    case RC_OP_LAYER_NORM: return rc_layer_norm(g, x[0], x[1], x[2], fp[0]);
    case RC_OP_RMS_NORM: return rc_rms_norm(g, x[0], x[1], fp[0], fp[1]);
    case RC_OP_EMBEDDING: {
        int pi = l->p->param_of[y->src[0]->id];
        if (pi >= 0 && l->spec[pi].role == RC_SHARD_VOCAB) {
            int64_t rows = x[0]->shape[0];
            rc_tensor *e = rc_embedding_shard(g, x[0], x[1], l->rank * rows, y->src[0]->shape[0]);
            if (e)
                e->iparam[0] = ip[0]; /* padding id: global ids are compared */
            return e;
        }
        return rc_embedding_pad(g, x[0], x[1], ip[0]);
    }
    case RC_OP_ROPE:
        return (ip[2] ? rc_rope_inverse : rc_rope)(g, x[0], x[1], ip[0], (rc_rope_mode)ip[1], fp[0]);
    case RC_OP_RESHAPE: return rc_reshape(g, x[0], y->ndim, shape);
    case RC_OP_PERMUTE: return rc_permute(g, x[0], ip);
    case RC_OP_SLICE: return rc_slice(g, x[0], ip[0], ip[1], ip[2]);
    case RC_OP_PAD: return rc_pad(g, x[0], ip[0], ip[1], shape[ip[0]]);
    case RC_OP_CONCAT: return rc_concat(g, x, y->nsrc, ip[0]);
    case RC_OP_SUM: return rc_sum(g, x[0], ip[0], ip[1]);
    case RC_OP_MAX: return rc_max(g, x[0], ip[0], ip[1]);
    case RC_OP_EXPAND: return rc_expand(g, x[0], y->ndim, shape);
    case RC_OP_SUM_TO: return rc_sum_to(g, x[0], y->ndim, shape);
    case RC_OP_CROSS_ENTROPY:
        if (l->p->st[y->src[0]->id].kind == ST_SPLIT &&
            l->p->st[y->src[0]->id].c[0].axis == y->src[0]->ndim - 1)
            return cross_entropy_shards(l, y, x[0], x[1]);
        return rc_cross_entropy(g, x[0], x[1], ip[0]);
    case RC_OP_ONE_HOT: return rc_one_hot(g, x[0], ip[0], ip[1], y->dtype);
    case RC_OP_WHERE: return rc_where(g, x[0], x[1], x[2]);
    case RC_OP_EQUAL: return rc_equal(g, x[0], x[1]);
    case RC_OP_CAST: return rc_cast(g, x[0], y->dtype);
    case RC_OP_STOP_GRADIENT: return rc_stop_gradient(g, x[0]);
    case RC_OP_CONV2D: return conv_shard(l, y, x);
    case RC_OP_POOL2D: return pool_shard(g, y, x[0]);
    case RC_OP_ATTENTION: return attention_shard(l, y, x);
    case RC_OP_MP_ENTER: return rc_mp_enter(g, x[0]);
    case RC_OP_MP_REDUCE: return rc_mp_reduce(g, x[0]);
    case RC_OP_MP_MAX: return rc_mp_max(g, x[0]);
    case RC_OP_DROPOUT: {
        rc_tensor *d = rci_node_new(g, RC_OP_DROPOUT, x[0]->dtype, x[0]->ndim, x[0]->shape, 1, x);
        if (d) {
            memcpy(d->iparam, ip, sizeof d->iparam), memcpy(d->fparam, fp, sizeof d->fparam);
            if (rc_tensor_numel(d) < rc_tensor_numel(y))
                shard_mask_key(l, d, 0);
        }
        return d;
    }
    default:
        return rci_fail(g, RC_ERR_UNSUPPORTED, "partition: op %s in a model-parallel graph", rc_op_name(y->op));
    }
}

/* one global node: its local counterpart, checked against the plan's local shape */
static int localize(local *l, const rc_tensor *y, rc_error *err)
{
    rc_graph *g = l->lg;
    int64_t shape[RC_MAX_DIMS];
    local_shape(l, y, shape);
    rc_tensor *out;
    if (y->op == RC_OP_LEAF) {
        int pi = l->p->param_of[y->id];
        /* constants keep their values; inputs and parameters are bound later */
        const rci_leaf_source *src = rci_graph_source(l->p->g, y->id);
        if (pi < 0 && src && src->host)
            out = rc_const(g, y->name, y->dtype, y->ndim, shape, src->host);
        else
            out = pi >= 0 ? rc_param(g, y->name, y->dtype, y->ndim, shape)
                          : rc_input(g, y->name, y->dtype, y->ndim, shape);
        if (out && pi < 0)
            out->flags = y->flags;
        if (out && pi >= 0 && l->spec[pi].axis >= 0) {
            rc_shard_local_shape(&l->spec[pi], y, l->mp, shape);
            memcpy(out->shape, shape, sizeof(int64_t) * (size_t)y->ndim);
        }
    } else {
        rc_tensor *x[RC_MAX_SRC] = {0};
        for (int i = 0; i < y->nsrc; i++)
            x[i] = input(l, y, i);
        out = rebuild(l, y, x, shape);
    }
    if (!out)
        return rc_error_set(err, RC_ERR_SHAPE, "partition: node %d (%s): %s", y->id, rc_op_name(y->op),
                            rc_graph_error(g) ? rc_graph_error(g) : "no local node");
    if (y->op != RC_OP_LEAF && y->op != RC_OP_CROSS_ENTROPY) {
        int same = out->ndim == y->ndim;
        for (int i = 0; same && i < y->ndim; i++)
            same = out->shape[i] == shape[i];
        if (!same) {
            char have[96], want[96];
            rc_tensor w = {.ndim = y->ndim};
            memcpy(w.shape, shape, sizeof(int64_t) * (size_t)y->ndim);
            return rc_error_set(err, RC_ERR_SHAPE, "partition: node %d (%s) is %s on a shard, the plan says %s",
                                y->id, rc_op_name(y->op), rc_shape_str(out, have, sizeof have),
                                rc_shape_str(&w, want, sizeof want));
        }
    }
    if (out && out->op != RC_OP_LEAF)
        out->segment = y->segment; /* recomputation segments carry over to the shard's graph */
    l->map[y->id] = out;
    return 0;
}

/* output k's local node: whole on every rank (a partial sum reduced, a split gathered),
 * or this rank's part of a split the caller keeps */
static rc_tensor *local_output(local *l, const rc_tensor *y, int keep_split)
{
    rc_tensor *x = l->map[y->id];
    const rci_shard_state *s = &l->p->st[y->id];
    if (s->kind == ST_PARTIAL) {
        if (!l->whole[y->id])
            l->whole[y->id] = rc_mp_reduce(l->lg, x);
        return l->whole[y->id];
    }
    if (s->kind == ST_SPLIT && !keep_split) {
        if (!l->gathered[y->id])
            l->gathered[y->id] = gather(l, x, s->c[0].axis, &s->c[0]);
        return l->gathered[y->id];
    }
    return x;
}

int rc_shard_partition_outputs(rc_graph *g, rc_tensor *const *outs, int nout, const int *keep_split,
                               rc_tensor *const *params, int n, int mp, int rank, int allow_replicate,
                               rc_shard_spec *specs, rc_shard_graph *sg, rc_error *err)
{
    memset(sg, 0, sizeof *sg);
    rci_shard_analysis *p = NULL;
    if (rank < 0 || rank >= mp)
        return rc_error_set(err, RC_ERR_ARG, "partition: rank %d of %d shards", rank, mp);
    if (rci_shard_plan_run(g, outs, nout, params, n, mp, allow_replicate, specs, NULL, &p, err))
        return -1;
    int size = p->last + 1;
    local l = {.p = p, .mp = mp, .rank = rank, .spec = specs, .lg = rc_graph_new()};
    l.map = calloc((size_t)size, sizeof *l.map);
    l.whole = calloc((size_t)size, sizeof *l.whole);
    l.entered = calloc((size_t)size, sizeof *l.entered);
    l.sliced = calloc((size_t)size, sizeof *l.sliced);
    l.gathered = calloc((size_t)size, sizeof *l.gathered);
    sg->params = calloc((size_t)n + 1, sizeof *sg->params);
    sg->outs = calloc((size_t)nout, sizeof *sg->outs);
    int rc = l.lg && l.map && l.whole && l.entered && l.sliced && l.gathered && sg->params && sg->outs
                 ? 0 : rc_error_set(err, RC_ERR_MEMORY, "partition: out of memory");
    /* only what the outputs need (the plan's backward nodes, if any, are rebuilt by autodiff) */
    for (int i = 0; !rc && i < size; i++)
        rc = localize(&l, rc_graph_node(g, i), err);
    for (int i = 0; !rc && i < n; i++) /* NULL: a parameter the outputs do not use */
        sg->params[i] = params[i] && params[i]->id <= p->last ? l.map[params[i]->id] : NULL;
    for (int k = 0; !rc && k < nout; k++)
        if (!(sg->outs[k] = local_output(&l, outs[k], keep_split && keep_split[k])))
            rc = rc_error_set(err, RC_ERR_SHAPE, "partition: output %d: %s", k,
                              rc_graph_error(l.lg) ? rc_graph_error(l.lg) : "no local node");
    if (!rc) {
        sg->g = l.lg;
        sg->out = sg->outs[0];
        sg->nout = nout;
    } else {
        rc_graph_free(l.lg);
        free(sg->params);
        free(sg->outs);
        memset(sg, 0, sizeof *sg);
    }
    free(l.map);
    free(l.whole);
    free(l.entered);
    free(l.sliced);
    free(l.gathered);
    rci_shard_plan_free(p);
    return rc ? -1 : 0;
}

int rc_shard_partition(rc_graph *g, rc_tensor *out, rc_tensor *const *params, int n, int mp, int rank,
                       int allow_replicate, rc_shard_spec *specs, rc_shard_graph *sg, rc_error *err)
{
    return rc_shard_partition_outputs(g, &out, 1, NULL, params, n, mp, rank, allow_replicate, specs, sg, err);
}

void rc_shard_graph_free(rc_shard_graph *sg)
{
    if (!sg)
        return;
    rc_graph_free(sg->g);
    free(sg->params);
    free(sg->outs);
    memset(sg, 0, sizeof *sg);
}

/* Copies between a full tensor and one shard: the split axis viewed as [outer, groups,
 * inner], the shard taking groups [rank * gl, rank * gl + gl) of each outer block (padded
 * groups past the end are zeros). to_local picks the direction. */
static void shard_copy(const rc_shard_spec *s, const rc_tensor *param, int mp, int rank, float *full,
                       float *loc, int to_local)
{
    int ax = s->axis;
    int64_t before = 1, after = 1;
    for (int i = 0; i < ax; i++)
        before *= param->shape[i];
    for (int i = ax + 1; i < param->ndim; i++)
        after *= param->shape[i];
    int64_t gl = s->padded_groups / mp, run = gl * s->inner * after;
    for (int64_t b = 0; b < before; b++)
        for (int64_t o = 0; o < s->outer; o++) {
            int64_t fbase = ((b * s->outer + o) * s->groups + rank * gl) * s->inner * after;
            int64_t lbase = (b * s->outer + o) * run;
            int64_t valid = s->groups - rank * gl; /* groups of this shard inside the tensor */
            valid = valid < 0 ? 0 : valid > gl ? gl : valid;
            int64_t n = valid * s->inner * after;
            if (to_local) {
                memcpy(loc + lbase, full + fbase, (size_t)n * sizeof *loc);
                memset(loc + lbase + n, 0, (size_t)(run - n) * sizeof *loc);
            } else {
                memcpy(full + fbase, loc + lbase, (size_t)n * sizeof *loc);
            }
        }
}

void rc_shard_take(const rc_shard_spec *s, const rc_tensor *param, int mp, int rank, const float *full,
                   float *local_data)
{
    if (s->axis < 0) {
        memcpy(local_data, full, rc_tensor_nbytes(param));
        return;
    }
    shard_copy(s, param, mp, rank, (float *)full, local_data, 1);
}

void rc_shard_put(const rc_shard_spec *s, const rc_tensor *param, int mp, int rank, const float *local_data,
                  float *full)
{
    if (s->axis < 0) {
        memcpy(full, local_data, rc_tensor_nbytes(param));
        return;
    }
    shard_copy(s, param, mp, rank, full, (float *)local_data, 0);
}
