/* shard_propagate.c - how each op of the forward graph carries a layout from its inputs
 * to its output: the per-op transfer rules of the tensor-parallel plan. Nodes are visited
 * in order (rci_shard_propagate); each rule reads its inputs' states and writes the
 * node's, and marks what the partitioner must do to an input (ACT_* in p->act): make a
 * partial sum whole, gather a split an op cannot use, slice a replicated operand to the
 * shard. Linears fed a whole activation start a split-any (column parallel), linears fed
 * feature-split ones are row parallel, attention (the products or the fused op) takes the
 * heads, element-wise ops,
 * reshapes, permutes and concatenations carry a split, norms / softmax / reductions rule
 * out the axis they reduce over; an op without a rule gets its inputs whole. Convolutions
 * follow the linears on their channel axis (NCHW axis 1): fed a whole input, column
 * parallel (split by output channels); fed a channel split, row parallel; a grouped conv
 * (depthwise) carries a split that gives each shard whole groups; pooling carries it. After the
 * pass, rci_shard_mark_column_inputs marks the column-parallel inputs (mp_enter). Calls
 * the layout rules (shard_layout.c) to record parameter splits and the report
 * (shard_report.c) to count all-reduces; the analysis (shard_analysis.c) calls it. */
#include "shard_propagate.h"
#include "shard_layout.h"
#include "shard_report.h"

#include <stdio.h>
#include <string.h>

/* ---- what an op does to one input --------------------------------------------------------- */

/* Input i of y, a partial sum, is made whole: one all-reduce per tensor, however many
 * consumers need it whole. */
static void make_whole(rci_shard_analysis *p, rci_shard_state *s, const rc_tensor *y, int i)
{
    if (s->kind != ST_PARTIAL)
        return;
    const rc_tensor *t = y->src[i];
    if (!p->reduced[t->id]) {
        p->reduced[t->id] = 1;
        rci_shard_count_allreduce(p, t);
    }
    p->act[y->id * RC_MAX_SRC + i] |= ACT_REDUCE;
    s->kind = ST_REPLICATED;
}

/* Input i of y, whose split y cannot work with, is made whole: all-gathered if it ends up
 * split (not part of the Megatron pattern; a split-any may still end replicated). */
static void drop(rci_shard_analysis *p, rci_shard_state *s, const rc_tensor *y, int i)
{
    if (s->kind == ST_SPLIT || s->kind == ST_SPLIT_ANY)
        p->act[y->id * RC_MAX_SRC + i] |= ACT_GATHER;
    memset(s, 0, sizeof *s);
}

/* Drops the candidates on `axis` (y reduces over it, input i); a split there is gathered. */
static void forbid_axis(rci_shard_analysis *p, rci_shard_state *s, int axis, const rc_tensor *y, int i)
{
    if (s->kind == ST_SPLIT && s->c[0].axis == axis) {
        drop(p, s, y, i);
        return;
    }
    if (s->kind != ST_SPLIT_ANY)
        return;
    int k = 0;
    for (int c = 0; c < s->ncand; c++)
        if (s->c[c].axis != axis)
            s->c[k++] = s->c[c];
    s->ncand = k;
    if (!k) /* nothing left to split: the linear stays replicated (gathered if split elsewhere) */
        drop(p, s, y, i);
}

/* ---- moving states through shape ops ------------------------------------------------------ */

static int64_t post_of(const rc_tensor *t, int axis)
{
    int64_t n = 1;
    for (int i = axis + 1; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* Candidate c of `in` seen in `out` of a reshape: it lands inside one axis, or spans
 * several whole axes (then one candidate per axis). Returns how many were written. */
static int reshape_cand(const rci_shard_cand *c, const rc_tensor *in, const rc_tensor *out, rci_shard_cand *res, int room)
{
    int64_t stride = c->c_inner * post_of(in, c->axis), size = c->groups;
    int n = 0;
    for (int b = 0; b < out->ndim && n < room; b++) {
        int64_t post = post_of(out, b), ext = out->shape[b];
        if (post <= stride && stride % post == 0) {
            int64_t inner = stride / post;
            if (inner * size <= ext && ext % (inner * size) == 0) {
                res[n++] = (rci_shard_cand){b, ext / (inner * size), size, inner, c->o_outer, c->o_inner};
                return n;
            }
        }
        /* a whole axis inside the candidate's span: a finer factor of it */
        if (ext > 1 && post >= stride && post * ext <= stride * size && post % stride == 0) {
            int64_t in_g = post / stride, out_g = size / (in_g * ext);
            if (size % (in_g * ext) == 0)
                res[n++] = (rci_shard_cand){b, 1, ext, 1, c->o_outer * out_g, c->o_inner * in_g};
        }
    }
    return n;
}

static void through_reshape(rci_shard_analysis *p, rci_shard_state *s, const rc_tensor *in, const rc_tensor *out)
{
    /* out is the reshape node, its input 0 is in */
    if (s->kind != ST_SPLIT_ANY && s->kind != ST_SPLIT)
        return;
    rci_shard_state r = *s;
    r.ncand = 0;
    for (int k = 0; k < s->ncand; k++)
        r.ncand += reshape_cand(&s->c[k], in, out, r.c + r.ncand, MAX_CAND - r.ncand);
    if ((s->kind == ST_SPLIT && r.ncand != 1) || !r.ncand) {
        drop(p, s, out, 0);
        return;
    }
    *s = r;
}

static void through_permute(rci_shard_state *s, const rc_tensor *t)
{
    for (int k = 0; k < s->ncand; k++)
        for (int i = 0; i < t->ndim; i++)
            if (t->iparam[i] == s->c[k].axis) {
                s->c[k].axis = i;
                break;
            }
}

/* ---- ops with parameters: linears and embeddings ------------------------------------------ */

static int is_param(const rci_shard_analysis *p, const rc_tensor *t)
{
    return t && p->param_of[t->id] >= 0;
}

/* matmul(x, W) with W a 2-D parameter: a linear layer */
static int is_linear(const rci_shard_analysis *p, const rc_tensor *y)
{
    return y->op == RC_OP_MATMUL && is_param(p, y->src[1]) && y->src[1]->ndim == 2 && !y->iparam[0];
}

/* 1 when t depends on a graph input (token ids), not only on constants */
static int from_input(const rc_tensor *t)
{
    if (!t)
        return 0;
    if (t->op == RC_OP_LEAF)
        return (t->flags & RC_FLAG_INPUT) != 0;
    for (int i = 0; i < t->nsrc; i++)
        if (from_input(t->src[i]))
            return 1;
    return 0;
}

/* matmul(x, W) with W a parameter whose split is fixed (an override): the input is brought
 * to the form the split needs, the output takes the split's form */
static void linear_fixed(rci_shard_analysis *p, rc_tensor *y, rci_shard_state *xs, rci_shard_state *out, int in_axis)
{
    int wi = p->param_of[y->src[1]->id], last = y->src[0]->ndim - 1;
    const rc_shard_spec *ws = &p->spec[wi];
    int row_in = xs->kind == ST_SPLIT && xs->c[0].axis == last;
    if (ws->axis == in_axis && row_in &&
        rci_shard_same_cut(xs->c[0].c_outer, xs->c[0].groups, xs->c[0].c_inner, ws->outer, ws->groups, ws->inner, p->mp)) {
        rci_shard_fixed_role(p, wi, RC_SHARD_ROW);
        out->kind = ST_PARTIAL;
        return;
    }
    if (xs->kind == ST_SPLIT && (row_in || ws->axis >= 0))
        drop(p, xs, y, 0); /* a split the weight cannot take: whole first */
    if (xs->kind != ST_REPLICATED) {  /* split on a batch axis, W replicated: local */
        *out = *xs;
        return;
    }
    if (ws->axis < 0)
        return;
    if (ws->axis == in_axis) { /* a whole input cut to the shard's features */
        rci_shard_fixed_role(p, wi, RC_SHARD_ROW);
        p->act[y->id * RC_MAX_SRC] |= ACT_ROWCUT;
        out->kind = ST_PARTIAL;
        return;
    }
    rci_shard_fixed_role(p, wi, RC_SHARD_COLUMN);
    *out = (rci_shard_state){.kind = ST_SPLIT, .ncand = 1};
    out->c[0] = (rci_shard_cand){y->ndim - 1, ws->outer, ws->groups, ws->inner, ws->outer, ws->inner};
}

/* matmul(x, W) fed a whole x: column parallel, its output a split-any of the features
 * (or, for a head tied to a vocabulary-split table, split on the vocabulary) */
static void column_output(rci_shard_analysis *p, const rc_tensor *y, int wi, int out_axis, rci_shard_state *out)
{
    const rc_shard_spec *ws = &p->spec[wi];
    if (ws->role == RC_SHARD_VOCAB && ws->axis == out_axis) { /* a head tied to the table */
        out->kind = ST_SPLIT;
        out->ncand = 1;
        out->c[0] = (rci_shard_cand){y->ndim - 1, 1, ws->groups, 1, 1, 1};
        return;
    }
    int o = rci_shard_new_origin(p, wi, out_axis);
    if (o < 0)
        return;
    int64_t N = y->src[1]->shape[out_axis];
    *out = (rci_shard_state){.kind = ST_SPLIT_ANY, .ncand = 1, .norig = 1};
    out->c[0] = (rci_shard_cand){y->ndim - 1, 1, N, 1, 1, 1};
    out->orig[0] = o;
}

/* matmul(x, W) with W a parameter: column or row parallel */
static void linear(rci_shard_analysis *p, rc_tensor *y, rci_shard_state *out)
{
    rc_tensor *x = y->src[0], *w = y->src[1];
    rci_shard_state xs = p->st[x->id];
    int wi = p->param_of[w->id], tb = y->iparam[1];
    int out_axis = tb ? 0 : 1, in_axis = tb ? 1 : 0, last = x->ndim - 1;
    make_whole(p, &xs, y, 0);
    memset(out, 0, sizeof *out);
    if (p->forced[wi]) {
        if (xs.kind == ST_SPLIT_ANY && rci_shard_find_cand(&xs, last) >= 0 && p->spec[wi].axis == in_axis)
            rci_shard_choose(p, &xs, rci_shard_find_cand(&xs, last), 0);
        else
            forbid_axis(p, &xs, last, y, 0); /* the contracted features cannot stay split */
        linear_fixed(p, y, &xs, out, in_axis);
        return;
    }
    if (xs.kind == ST_SPLIT_ANY && rci_shard_find_cand(&xs, last) >= 0)
        rci_shard_choose(p, &xs, rci_shard_find_cand(&xs, last), 0);
    if (xs.kind == ST_SPLIT && xs.c[0].axis == last) { /* row parallel */
        const rci_shard_cand *c = &xs.c[0];
        if (rci_shard_set_spec(p, wi, RC_SHARD_ROW, in_axis, c->c_outer, c->groups, c->c_inner, 0) == 0) {
            out->kind = ST_PARTIAL;
            return;
        }
        drop(p, &xs, y, 0); /* a count that does not divide: the next analysis round replicates W */
        return;
    }
    if (xs.kind != ST_REPLICATED) { /* split on a batch axis: the linear is local, W replicated */
        *out = xs;
        return;
    }
    column_output(p, y, wi, out_axis, out);
}

/* rows of a table by token ids: a table of parameters splits the vocabulary (a fixed split
 * of its columns splits the output features instead) */
static void embedding(rci_shard_analysis *p, rc_tensor *y, rci_shard_state *out)
{
    rc_tensor *table = y->src[0], *ids = y->src[1];
    rci_shard_state ts = p->st[table->id], is = p->st[ids->id];
    drop(p, &is, y, 1);
    if (!is_param(p, table)) {
        make_whole(p, &ts, y, 0);
        drop(p, &ts, y, 0);
        return;
    }
    int ti = p->param_of[table->id];
    const rc_shard_spec *s = &p->spec[ti];
    if (p->forced[ti] && s->axis == 1) {
        rci_shard_fixed_role(p, ti, RC_SHARD_COLUMN);
        *out = (rci_shard_state){.kind = ST_SPLIT, .ncand = 1};
        out->c[0] = (rci_shard_cand){y->ndim - 1, s->outer, s->groups, s->inner, s->outer, s->inner};
        return;
    }
    if (p->forced[ti] ? s->axis == 0 : from_input(ids) && rci_shard_set_spec(p, ti, RC_SHARD_VOCAB, 0, 1, table->shape[0], 1, 1) == 0) {
        rci_shard_fixed_role(p, ti, RC_SHARD_VOCAB);
        out->kind = ST_PARTIAL; /* masked lookup on each shard, summed */
    }
}

/* ---- element-wise ops, attention, concatenation ------------------------------------------- */

/* a replicated operand of an element-wise op: a parameter broadcast along the split axis
 * (a bias) follows the split; an activation is sliced locally */
static void follow(rci_shard_analysis *p, const rci_shard_state *lead, const rc_tensor *lead_t, const rc_tensor *y, rc_tensor *r)
{
    int bi = p->param_of[r->id];
    if (bi < 0)
        return;
    for (int k = 0; k < lead->ncand; k++) {
        int ax_y = lead->c[k].axis + (y->ndim - lead_t->ndim);
        int ax_r = ax_y - (y->ndim - r->ndim);
        if (ax_r < 0 || r->shape[ax_r] != y->shape[ax_y])
            continue;
        if (lead->kind == ST_SPLIT) {
            const rci_shard_cand *c = &lead->c[0];
            rci_shard_set_spec(p, bi, RC_SHARD_BIAS, ax_r, c->c_outer, c->groups, c->c_inner, 0);
            continue;
        }
        for (int o = 0; o < lead->norig; o++) {
            rci_shard_origin *og = &p->orig[lead->orig[o]];
            if (og->nbias < MAX_BIAS) {
                og->bias[og->nbias] = bi;
                og->bias_axis[og->nbias++] = ax_r;
            }
        }
        return;
    }
}

/* Operand o of y, split (or split-any) while the leading operand has the concrete split
 * lead: 1 when o's split can agree with it (a split-any is resolved to match). */
static int split_agrees(rci_shard_analysis *p, const rci_shard_state *lead, const rc_tensor *lead_t, const rc_tensor *o, const rc_tensor *y)
{
    rci_shard_state *os = &p->st[o->id];
    if (lead->kind != ST_SPLIT)
        return 0;
    const rci_shard_cand *c = &lead->c[0];
    int ax = c->axis + (y->ndim - lead_t->ndim) - (y->ndim - o->ndim);
    for (int k = 0; k < os->ncand; k++) {
        const rci_shard_cand *d = &os->c[k];
        if (d->axis == ax && rci_shard_same_cut(c->c_outer, c->groups, c->c_inner, d->c_outer, d->groups, d->c_inner, p->mp)) {
            if (os->kind == ST_SPLIT_ANY) {
                rci_shard_state r = *os;
                rci_shard_choose(p, &r, k, 0);
            }
            return 1;
        }
    }
    return 0;
}

/* the operand that leads an element-wise op: a concrete split before a split-any; -1 when
 * none is split */
static int split_lead(const rci_shard_analysis *p, const rc_tensor *y)
{
    int lead = -1;
    for (int i = 0; i < y->nsrc; i++) {
        const rci_shard_state *s = y->src[i] ? &p->st[y->src[i]->id] : NULL;
        if (s && s->kind == ST_SPLIT && (lead < 0 || p->st[y->src[lead]->id].kind != ST_SPLIT))
            lead = i; /* a concrete split leads over a split-any */
        if (s && s->kind == ST_SPLIT_ANY && lead < 0)
            lead = i;
    }
    return lead;
}

/* Partial sums among y's inputs: 1 when y adds or subtracts partial sums only, so its
 * output is one too; otherwise they are made whole (a partial sum meets a bias or the
 * residual stream). */
static int sums_stay_partial(rci_shard_analysis *p, const rc_tensor *y)
{
    int partial = 0, all_partial = 1;
    for (int i = 0; i < y->nsrc; i++)
        if (y->src[i]) {
            partial |= p->st[y->src[i]->id].kind == ST_PARTIAL;
            all_partial &= p->st[y->src[i]->id].kind == ST_PARTIAL;
        }
    if (!partial)
        return 0;
    if ((y->op == RC_OP_ADD || y->op == RC_OP_SUB) && all_partial)
        return 1;
    for (int i = 0; i < y->nsrc; i++)
        if (y->src[i] && p->st[y->src[i]->id].kind == ST_PARTIAL) {
            rci_shard_state s = p->st[y->src[i]->id];
            make_whole(p, &s, y, i);
        }
    return 0;
}

/* operand i of y beside the leading split s (of operand lt): a replicated one follows it
 * (sliced, or a bias split with it), a split-any joins it, another split is gathered */
static void beside_lead(rci_shard_analysis *p, const rc_tensor *y, int i, rci_shard_state *s, const rc_tensor *lt)
{
    rc_tensor *o = y->src[i];
    const rci_shard_state *os = &p->st[o->id];
    if (os->kind == ST_REPLICATED || os->kind == ST_PARTIAL) {
        follow(p, s, lt, y, o);
        p->act[y->id * RC_MAX_SRC + i] |= ACT_SLICE; /* a parameter: already its shard */
    }
    else if (os->kind == ST_SPLIT_ANY && s->kind == ST_SPLIT_ANY && s->norig + os->norig <= MAX_ORIG)
        for (int k = 0; k < os->norig; k++)
            s->orig[s->norig++] = os->orig[k]; /* gate * up: resolved together */
    else if (!split_agrees(p, s, lt, o, y))
        p->act[y->id * RC_MAX_SRC + i] |= ACT_GATHER | ACT_SLICE; /* another split: whole, then cut */
}

static void elementwise(rci_shard_analysis *p, rc_tensor *y, rci_shard_state *out)
{
    int lead = split_lead(p, y);
    memset(out, 0, sizeof *out);
    if (sums_stay_partial(p, y)) {
        out->kind = ST_PARTIAL;
        return;
    }
    if (lead < 0)
        return;
    rc_tensor *lt = y->src[lead];
    rci_shard_state s = p->st[lt->id];
    for (int i = 0; i < y->nsrc; i++)
        if (y->src[i] && i != lead)
            beside_lead(p, y, i, &s, lt);
    *out = s;
    for (int k = 0; k < out->ncand; k++)
        out->c[k].axis += y->ndim - lt->ndim;
}

/* Heads the shard count does not divide: their projections are noted for the next round
 * to replicate; key/value heads shared by groups of query heads (c_inner > 1: repeated,
 * or shared: a fused attention's own kv heads), GQA, take precedence. */
static void note_heads_undivided(rci_shard_analysis *p, const rci_shard_state *s, const rci_shard_cand *c,
                                 int shared)
{
    for (int o = 0; o < s->norig; o++) {
        int param = p->orig[s->orig[o]].param;
        if (p->forced[param])
            continue;
        if ((c->c_inner > 1 || shared) && p->gqa_param < 0) {
            p->gqa_param = param;
            p->fail_groups = c->groups;
        } else if (c->c_inner == 1 && p->fail_param < 0) {
            p->fail_param = param;
            p->fail_groups = c->groups;
        }
    }
}

/* operand i of an attention matmul: a split-any takes a batch axis (the heads) or is made
 * whole; a split on one of the last two axes is gathered */
static void attention_operand(rci_shard_analysis *p, rc_tensor *y, int i, rci_shard_state *s)
{
    *s = p->st[y->src[i]->id];
    make_whole(p, s, y, i);
    int nb = y->src[i]->ndim - 2;
    if (s->kind == ST_SPLIT_ANY) {
        int k = -1;
        for (int c = 0; c < s->ncand && k < 0; c++)
            if (s->c[c].axis < nb)
                k = c;
        if (k >= 0 && s->c[k].groups % p->mp) {
            int kv = y->op == RC_OP_ATTENTION && (i == 1 || i == 2) && y->src[i]->shape[1] != y->shape[1];
            note_heads_undivided(p, s, &s->c[k], kv);
            drop(p, s, y, i);
        } else if (k >= 0) {
            rci_shard_choose(p, s, k, 0);
        } else {
            drop(p, s, y, i);
        }
    }
    if (s->kind == ST_SPLIT && s->c[0].axis >= nb)
        drop(p, s, y, i); /* split on a contracted or row axis: whole first */
}

/* a matmul between activations (attention): batch axes may carry the split */
static void batched(rci_shard_analysis *p, rc_tensor *y, rci_shard_state *out)
{
    rci_shard_state s[2];
    memset(out, 0, sizeof *out);
    for (int i = 0; i < 2; i++)
        attention_operand(p, y, i, &s[i]);
    int lead = s[0].kind == ST_SPLIT ? 0 : s[1].kind == ST_SPLIT ? 1 : -1;
    if (lead < 0)
        return;
    int other = !lead, ax = s[lead].c[0].axis + (y->ndim - y->src[lead]->ndim);
    int ax_o = ax - (y->ndim - y->src[other]->ndim);
    const rci_shard_cand *c = &s[lead].c[0], *d = &s[other].c[0];
    if (s[other].kind == ST_REPLICATED) /* e.g. a GQA key replicated: this shard's heads of it */
        p->act[y->id * RC_MAX_SRC + other] |= ACT_SLICE;
    else if (d->axis != ax_o || !rci_shard_same_cut(c->c_outer, c->groups, c->c_inner, d->c_outer, d->groups, d->c_inner, p->mp))
        p->act[y->id * RC_MAX_SRC + other] |= ACT_GATHER | ACT_SLICE;
    *out = s[lead];
    out->c[0].axis = ax;
    out->norig = 0;
}

/* the additive mask of a softmax (T5's position bias, a padding mask) meets the scores'
 * split: a replicated mask is cut to this shard's heads */
static void softmax_mask(rci_shard_analysis *p, rc_tensor *y, const rci_shard_state *out)
{
    rc_tensor *m = y->src[1];
    rci_shard_state mask = p->st[m->id];
    make_whole(p, &mask, y, 1);
    if (out->kind != ST_SPLIT && out->kind != ST_SPLIT_ANY)
        drop(p, &mask, y, 1);
    else if (mask.kind == ST_REPLICATED)
        p->act[y->id * RC_MAX_SRC + 1] |= ACT_SLICE;
    else if (!split_agrees(p, out, y, m, y))
        p->act[y->id * RC_MAX_SRC + 1] |= ACT_GATHER | ACT_SLICE;
}

/* key/value operand i (1 k, 2 v) of a fused attention whose output is split as c (axis
 * 0 the batch, 1 the heads): a split that cuts its kv heads as c cuts the query heads (KV
 * and H both divided by the shard count, shard r's query heads then reading shard r's kv
 * heads) is kept; otherwise it is made whole, and partition.c cuts it to the shard's kv
 * heads, or, when each shard's query heads share one kv head (fewer kv heads than shards),
 * enters it whole and takes that head. 0 when that cannot be done. */
static int attention_kv(rci_shard_analysis *p, rc_tensor *y, int i, const rci_shard_cand *c, rci_shard_state *s)
{
    const rc_tensor *x = y->src[i];
    int64_t H = y->shape[1], KV = x->shape[1];
    int heads = c->axis == 1 && KV != H;
    int one_head = H % p->mp == 0 && (H / KV) % (H / p->mp) == 0; /* a shard's heads in one group */
    if (heads && (c->c_outer != 1 || c->c_inner != 1 || (KV % p->mp && !one_head)))
        return 0;
    if (s->kind == ST_SPLIT && s->c[0].axis == c->axis &&
        (heads ? s->c[0].c_outer == 1 && s->c[0].c_inner == 1 && s->c[0].groups == KV
               : rci_shard_same_cut(c->c_outer, c->groups, c->c_inner, s->c[0].c_outer, s->c[0].groups,
                                    s->c[0].c_inner, p->mp)))
        return 1;
    if (s->kind == ST_SPLIT)
        p->act[y->id * RC_MAX_SRC + i] |= ACT_GATHER;
    p->act[y->id * RC_MAX_SRC + i] |= ACT_SLICE; /* whole: partition.c cuts it */
    return 1;
}

/* fused attention (q, k, v, bias): split by heads (or batch) as q is; k and v follow with
 * their own kv heads (attention_kv), the bias as a softmax mask does; any other split, or
 * heads the shard count does not divide, leaves the op whole */
static void attention(rci_shard_analysis *p, rc_tensor *y, rci_shard_state *out)
{
    rci_shard_state s[3];
    memset(out, 0, sizeof *out);
    for (int i = 0; i < 3; i++)
        attention_operand(p, y, i, &s[i]);
    int ok = s[0].kind == ST_SPLIT;
    for (int i = 1; i < 3 && ok; i++)
        ok = attention_kv(p, y, i, &s[0].c[0], &s[i]);
    if (!ok) {
        for (int i = 0; i < 4; i++)
            if (y->src[i]) {
                rci_shard_state w = i < 3 ? s[i] : p->st[y->src[i]->id];
                make_whole(p, &w, y, i);
                drop(p, &w, y, i);
                p->act[y->id * RC_MAX_SRC + i] &= ~(unsigned)ACT_SLICE;
            }
        return;
    }
    *out = s[0];
    out->norig = 0;
    if (!y->src[3])
        return;
    rc_tensor *m = y->src[3];
    rci_shard_state mask = p->st[m->id];
    make_whole(p, &mask, y, 3);
    if (mask.kind == ST_REPLICATED)
        p->act[y->id * RC_MAX_SRC + 3] |= ACT_SLICE;
    else if (!split_agrees(p, out, y, m, y))
        p->act[y->id * RC_MAX_SRC + 3] |= ACT_GATHER | ACT_SLICE;
}

/* 1 when t is consumed by exactly one node of the graph up to `last` */
static int single_use(const rci_shard_analysis *p, const rc_tensor *t, int last)
{
    int uses = 0;
    for (int i = t->id + 1; i <= last && uses < 2; i++) {
        const rc_tensor *y = rc_graph_node(p->g, i);
        for (int k = 0; k < y->nsrc; k++)
            uses += y->src[k] == t;
    }
    return uses == 1;
}

/* concat: a split along another axis carries through; replicated operands are cut to the
 * shard, except a splittable input (a key/value cache) used only here, which arrives as
 * this shard's part */
static void concat(rci_shard_analysis *p, rc_tensor *y, rci_shard_state *out)
{
    int ax = y->iparam[0], lead = -1;
    rci_shard_state s[RC_MAX_SRC];
    for (int i = 0; i < y->nsrc; i++) {
        s[i] = p->st[y->src[i]->id];
        make_whole(p, &s[i], y, i);
        forbid_axis(p, &s[i], ax, y, i);
        if (s[i].kind == ST_SPLIT && (lead < 0 || s[lead].kind != ST_SPLIT))
            lead = i;
        if (s[i].kind == ST_SPLIT_ANY && lead < 0)
            lead = i;
    }
    memset(out, 0, sizeof *out);
    if (lead < 0)
        return;
    *out = s[lead];
    for (int i = 0; i < y->nsrc; i++) {
        rc_tensor *o = y->src[i];
        if (i == lead)
            continue;
        if (s[i].kind == ST_REPLICATED) {
            if (o->op == RC_OP_LEAF && (o->flags & RC_FLAG_SPLITTABLE) && !is_param(p, o) &&
                p->follow[o->id] < 0 && single_use(p, o, p->last))
                p->follow[o->id] = y->id;
            else
                p->act[y->id * RC_MAX_SRC + i] |= ACT_SLICE;
        } else if (s[i].kind == ST_SPLIT_ANY && out->kind == ST_SPLIT_ANY && out->norig + s[i].norig <= MAX_ORIG) {
            for (int k = 0; k < s[i].norig; k++)
                out->orig[out->norig++] = s[i].orig[k];
        } else if (!split_agrees(p, out, y->src[lead], o, y)) {
            p->act[y->id * RC_MAX_SRC + i] |= ACT_GATHER | ACT_SLICE;
        }
    }
}

/* ---- convolutions and pooling (NCHW: the channels on axis 1) ------------------------------- */

/* conv2d(x, W, b) with W [O, C/groups, KH, KW] a parameter */
static int is_conv(const rci_shard_analysis *p, const rc_tensor *y)
{
    return y->op == RC_OP_CONV2D && is_param(p, y->src[1]) && (y->nsrc < 3 || !y->src[2] || is_param(p, y->src[2]));
}

/* 1 when the channel split c gives every shard whole groups of a conv with `groups` groups
 * (contiguous runs of C / mp channels, mp dividing the groups) */
static int groups_aligned(const rci_shard_analysis *p, const rci_shard_cand *c, int groups)
{
    return c->axis == 1 && c->c_outer == 1 && c->groups % p->mp == 0 && groups % p->mp == 0;
}

/* The split of a conv's output channels (and of W's axis 0, b's axis 0) that gives each
 * shard whole groups: [1, groups, O / groups]. */
static rci_shard_cand group_cut(const rc_tensor *y, int groups)
{
    int64_t O = y->shape[1];
    return (rci_shard_cand){1, 1, groups, O / groups, 1, O / groups};
}

/* a row-parallel conv (W split on its input channels): a partial sum, made whole at once
 * when a bias is to be added (once, after the all-reduce: the partitioner does so) */
static void conv_row_output(rci_shard_analysis *p, const rc_tensor *y, rci_shard_state *out)
{
    memset(out, 0, sizeof *out);
    if (y->nsrc > 2 && y->src[2]) {
        rci_shard_count_allreduce(p, y);
        return;
    }
    out->kind = ST_PARTIAL;
}

/* a conv whose output channels split as c, with its weight's and bias's splits recorded */
static void conv_split_output(rci_shard_analysis *p, const rc_tensor *y, const rci_shard_cand *c, rc_shard_role role, rci_shard_state *out)
{
    int wi = p->param_of[y->src[1]->id];
    if (rci_shard_set_spec(p, wi, role, 0, c->c_outer, c->groups, c->c_inner, 0))
        return;
    if (y->nsrc > 2 && y->src[2])
        rci_shard_set_spec(p, p->param_of[y->src[2]->id], RC_SHARD_BIAS, 0, c->c_outer, c->groups, c->c_inner, 0);
    *out = (rci_shard_state){.kind = ST_SPLIT, .ncand = 1};
    out->c[0] = *c;
}

/* a conv with a weight split fixed by the caller: the input brought to the form the split
 * needs (a whole input of a row split is cut to its channels by the partitioner) */
static void conv_fixed(rci_shard_analysis *p, rc_tensor *y, rci_shard_state *xs, rci_shard_state *out)
{
    int wi = p->param_of[y->src[1]->id], groups = y->iparam[6];
    const rc_shard_spec *ws = &p->spec[wi];
    rci_shard_cand wc = {1, ws->outer, ws->groups, ws->inner, ws->outer, ws->inner};
    int k = xs->kind == ST_SPLIT_ANY ? rci_shard_find_cand(xs, 1) : -1;
    if (k >= 0 && (ws->axis == 1 || (ws->axis == 0 && groups > 1)))
        rci_shard_choose(p, xs, k, 0);
    int ch = xs->kind == ST_SPLIT && xs->c[0].axis == 1;
    const rci_shard_cand *c = &xs->c[0];
    if (ch && ws->axis == 1 && groups == 1 &&
        rci_shard_same_cut(c->c_outer, c->groups, c->c_inner, ws->outer, ws->groups, ws->inner, p->mp)) {
        rci_shard_fixed_role(p, wi, RC_SHARD_ROW);
        conv_row_output(p, y, out);
        return;
    }
    if (ch && ws->axis == 0 && groups > 1 && groups_aligned(p, c, groups) && groups_aligned(p, &wc, groups)) {
        conv_split_output(p, y, &wc, RC_SHARD_COLUMN, out); /* whole groups carry the split */
        return;
    }
    if (xs->kind == ST_SPLIT && xs->c[0].axis == 0 && ws->axis < 0) {
        *out = *xs; /* split on the batch: local */
        return;
    }
    drop(p, xs, y, 0);
    if (ws->axis == 1) {
        rci_shard_fixed_role(p, wi, RC_SHARD_ROW);
        p->act[y->id * RC_MAX_SRC] |= ACT_ROWCUT;
        conv_row_output(p, y, out);
    } else if (ws->axis == 0) {
        conv_split_output(p, y, &wc, RC_SHARD_COLUMN, out);
    }
}

/* A grouped conv fed a whole input: column parallel on whole groups (the partitioner cuts
 * the input to their channels), or whole when the shards do not divide the groups. */
static void conv_grouped_column(rci_shard_analysis *p, rc_tensor *y, rci_shard_state *out)
{
    int wi = p->param_of[y->src[1]->id], groups = y->iparam[6];
    if (groups % p->mp) {
        snprintf(p->spec[wi].note, sizeof p->spec[wi].note,
                 "conv with %d groups: %d shards would split a group, kept whole", groups, p->mp);
        return;
    }
    rci_shard_cand c = group_cut(y, groups);
    conv_split_output(p, y, &c, RC_SHARD_COLUMN, out);
}

/* conv2d(x, W, b): fed a whole x, column parallel (W and b split by output channels, the
 * output on its channel axis); fed channel-split x, row parallel (W split on its input
 * channels, the output a partial sum); a grouped conv fed a split of whole groups carries
 * it (depthwise), otherwise its input is made whole. */
static void conv(rci_shard_analysis *p, rc_tensor *y, rci_shard_state *out)
{
    rc_tensor *x = y->src[0];
    int wi = p->param_of[y->src[1]->id], groups = y->iparam[6];
    rci_shard_state xs = p->st[x->id];
    memset(out, 0, sizeof *out);
    make_whole(p, &xs, y, 0);
    if (p->forced[wi]) {
        conv_fixed(p, y, &xs, out);
        return;
    }
    int k = xs.kind == ST_SPLIT_ANY ? rci_shard_find_cand(&xs, 1) : -1;
    if (k >= 0 && (groups == 1 || groups_aligned(p, &xs.c[k], groups)))
        rci_shard_choose(p, &xs, k, 0);
    if (xs.kind == ST_SPLIT && xs.c[0].axis == 1 && groups == 1) { /* row parallel */
        const rci_shard_cand *c = &xs.c[0];
        if (rci_shard_set_spec(p, wi, RC_SHARD_ROW, 1, c->c_outer, c->groups, c->c_inner, 0) == 0)
            conv_row_output(p, y, out);
        else
            drop(p, &xs, y, 0); /* a count that does not divide: the next round replicates W */
        return;
    }
    if (xs.kind == ST_SPLIT && xs.c[0].axis == 1 && groups_aligned(p, &xs.c[0], groups)) {
        rci_shard_cand c = group_cut(y, groups); /* whole groups on every shard: the split carries */
        conv_split_output(p, y, &c, RC_SHARD_COLUMN, out);
        return;
    }
    if (xs.kind == ST_SPLIT && xs.c[0].axis == 0) { /* split on the batch: local, W whole */
        *out = xs;
        return;
    }
    if ((xs.kind == ST_SPLIT && xs.c[0].axis == 1) || k >= 0)
        snprintf(p->spec[wi].note, sizeof p->spec[wi].note,
                 "conv with %d groups: the input's channel split does not give whole groups, input made whole",
                 groups);
    drop(p, &xs, y, 0);
    if (groups > 1) {
        conv_grouped_column(p, y, out);
        return;
    }
    int o = rci_shard_new_origin(p, wi, 0); /* column parallel: a split-any of the channels */
    if (o < 0)
        return;
    *out = (rci_shard_state){.kind = ST_SPLIT_ANY, .ncand = 1, .norig = 1};
    out->c[0] = (rci_shard_cand){1, 1, y->shape[1], 1, 1, 1};
    out->orig[0] = o;
    rci_shard_origin *og = &p->orig[o];
    if (y->nsrc > 2 && y->src[2]) {
        og->bias[og->nbias] = p->param_of[y->src[2]->id];
        og->bias_axis[og->nbias++] = 0;
    }
}

/* max / average pooling: a channel (or batch) split carries, the pooled axes cannot stay split */
static void pool(rci_shard_analysis *p, rc_tensor *y, rci_shard_state *out)
{
    *out = p->st[y->src[0]->id];
    make_whole(p, out, y, 0);
    forbid_axis(p, out, 2, y, 0);
    forbid_axis(p, out, 3, y, 0);
}

/* ---- the other ops, and one node's rule --------------------------------------------------- */

/* exp, log, activations...: element by element, any split carries; a partial sum whole */
static void pointwise(rci_shard_analysis *p, rc_tensor *y, rci_shard_state *out)
{
    *out = p->st[y->src[0]->id];
    make_whole(p, out, y, 0);
}

/* a*x + b: a partial sum stays one when b is 0 */
static void affine(rci_shard_analysis *p, rc_tensor *y, rci_shard_state *out)
{
    *out = p->st[y->src[0]->id];
    if (out->kind == ST_PARTIAL && y->fparam[1] != 0)
        make_whole(p, out, y, 0);
}

/* softmax, norms, rotary: they work along the last axis, which cannot stay split */
static void last_axis_op(rci_shard_analysis *p, rc_tensor *y, rci_shard_state *out)
{
    rc_tensor *a = y->src[0];
    *out = p->st[a->id];
    make_whole(p, out, y, 0);
    forbid_axis(p, out, a->ndim - 1, y, 0);
    if (y->op == RC_OP_SOFTMAX && y->src[1])
        softmax_mask(p, y, out);
}

/* slice, pad: along iparam[0], which cannot stay split */
static void slice_or_pad(rci_shard_analysis *p, rc_tensor *y, rci_shard_state *out)
{
    *out = p->st[y->src[0]->id];
    forbid_axis(p, out, y->iparam[0], y, 0);
}

/* broadcast to more leading axes: the split axis moves along */
static void expand(rci_shard_analysis *p, rc_tensor *y, rci_shard_state *out)
{
    rc_tensor *a = y->src[0];
    *out = p->st[a->id];
    for (int k = 0; k < out->ncand; k++)
        out->c[k].axis += y->ndim - a->ndim;
}

/* sum, max over axis iparam[0] (kept as 1 when iparam[1]): that axis cannot stay split */
static void reduce(rci_shard_analysis *p, rc_tensor *y, rci_shard_state *out)
{
    *out = p->st[y->src[0]->id];
    make_whole(p, out, y, 0);
    forbid_axis(p, out, y->iparam[0], y, 0);
    for (int k = 0; !y->iparam[1] && k < out->ncand; k++)
        out->c[k].axis -= out->c[k].axis > y->iparam[0];
}

/* logits split on the whole vocabulary: the vocabulary-parallel loss; otherwise whole */
static void cross_entropy(rci_shard_analysis *p, rc_tensor *y)
{
    rc_tensor *a = y->src[0];
    rci_shard_state in = p->st[a->id];
    make_whole(p, &in, y, 0);
    if (in.kind == ST_SPLIT_ANY && rci_shard_find_cand(&in, a->ndim - 1) >= 0)
        rci_shard_choose(p, &in, rci_shard_find_cand(&in, a->ndim - 1), 1);
    if (in.kind == ST_SPLIT && in.c[0].axis == a->ndim - 1 && in.c[0].c_outer == 1 && in.c[0].c_inner == 1)
        rci_shard_count_vocab_loss(p, a);
    else
        drop(p, &in, y, 0);
}

/* an op the rules do not know: its inputs whole, its output replicated */
static void unknown_op(rci_shard_analysis *p, rc_tensor *y)
{
    for (int i = 0; i < y->nsrc; i++)
        if (y->src[i]) {
            rci_shard_state s = p->st[y->src[i]->id];
            make_whole(p, &s, y, i);
            drop(p, &s, y, i);
        }
}

void rci_shard_propagate(rci_shard_analysis *p, rc_tensor *y)
{
    rci_shard_state *out = &p->st[y->id];
    memset(out, 0, sizeof *out);
    switch (y->op) {
    case RC_OP_MATMUL:
        if (is_linear(p, y))
            linear(p, y, out);
        else
            batched(p, y, out);
        return;
    case RC_OP_ADD: case RC_OP_SUB: case RC_OP_MUL: case RC_OP_DIV: case RC_OP_WHERE:
        elementwise(p, y, out);
        return;
    case RC_OP_AFFINE:
        affine(p, y, out);
        return;
    case RC_OP_ACT:
        if (y->nsrc > 1 && y->src[1]) /* times a multiplier: two inputs */
            elementwise(p, y, out);
        else
            pointwise(p, y, out);
        return;
    case RC_OP_EXP: case RC_OP_LOG: case RC_OP_SQRT: case RC_OP_RSQRT: case RC_OP_TANH:
    case RC_OP_DROPOUT: case RC_OP_CAST:
        pointwise(p, y, out);
        return;
    case RC_OP_SOFTMAX: case RC_OP_LAYER_NORM: case RC_OP_RMS_NORM: case RC_OP_ROPE:
        last_axis_op(p, y, out);
        return;
    case RC_OP_RESHAPE:
        *out = p->st[y->src[0]->id];
        through_reshape(p, out, y->src[0], y);
        return;
    case RC_OP_PERMUTE:
        *out = p->st[y->src[0]->id];
        through_permute(out, y);
        return;
    case RC_OP_SLICE: case RC_OP_PAD:
        slice_or_pad(p, y, out);
        return;
    case RC_OP_STOP_GRADIENT:
        *out = p->st[y->src[0]->id];
        return;
    case RC_OP_CONCAT:
        concat(p, y, out);
        return;
    case RC_OP_EXPAND:
        expand(p, y, out);
        return;
    case RC_OP_SUM: case RC_OP_MAX:
        reduce(p, y, out);
        return;
    case RC_OP_EMBEDDING:
        embedding(p, y, out);
        return;
    case RC_OP_CROSS_ENTROPY:
        cross_entropy(p, y);
        return;
    case RC_OP_CONV2D:
        if (is_conv(p, y))
            conv(p, y, out);
        else
            unknown_op(p, y);
        return;
    case RC_OP_POOL2D:
        pool(p, y, out);
        return;
    case RC_OP_ATTENTION:
        attention(p, y, out);
        return;
    default:
        unknown_op(p, y);
        return;
    }
}

/* ---- after the pass: the inputs of column-parallel linears -------------------------------- */

/* The inputs of linears and convs whose weight ended up split on its outputs (column
 * parallel or a vocabulary head): Megatron's f, mp_enter in the partitioned graph. Decided once the
 * plan is complete, since a split-any may end unresolved (its weight then replicated). */
void rci_shard_mark_column_inputs(rci_shard_analysis *p)
{
    for (int i = 0; i <= p->last; i++) {
        const rc_tensor *y = rc_graph_node(p->g, i);
        int conv2d = is_conv(p, y);
        if (!is_linear(p, y) && !conv2d)
            continue;
        const rc_shard_spec *ws = &p->spec[p->param_of[y->src[1]->id]];
        int out_axis = conv2d ? 0 : y->iparam[1] ? 0 : 1;
        const rci_shard_state *xs = &p->st[y->src[0]->id];
        unsigned a = p->act[y->id * RC_MAX_SRC];
        int whole_input = xs->kind == ST_REPLICATED || (xs->kind == ST_PARTIAL && (a & ACT_REDUCE)) || (a & ACT_GATHER);
        if (ws->axis == out_axis && (ws->role == RC_SHARD_COLUMN || ws->role == RC_SHARD_VOCAB) && whole_input) {
            p->col_input[y->src[0]->id] = 1;
            /* a grouped conv's input is cut to its groups' channels, entering there */
            if (!conv2d || y->iparam[6] == 1)
                p->act[y->id * RC_MAX_SRC] |= ACT_ENTER;
        }
    }
    /* replicated activations cut to a shard (GQA keys, T5's position bias) enter too: their
     * gradients are all-reduced backward */
    for (int i = 0; i <= p->last; i++) {
        const rc_tensor *y = rc_graph_node(p->g, i);
        rci_shard_state fin = p->st[i];
        const rci_shard_state *ys = &fin;
        rci_shard_finalize_state(p, &fin); /* a split-any resolved later is split here too */
        for (int k = 0; k < y->nsrc && ys->kind == ST_SPLIT; k++) {
            const rc_tensor *x = y->src[k];
            if (!x || !(p->act[i * RC_MAX_SRC + k] & ACT_SLICE) || is_param(p, x))
                continue;
            int ax = ys->c[0].axis - (y->ndim - x->ndim);
            /* a fused attention's whole key/value with fewer heads: cut or entered there */
            int kv = y->op == RC_OP_ATTENTION && (k == 1 || k == 2) && ax == 1 && x->shape[1] != y->shape[1];
            if (p->mp > 1 && ax >= 0 && (kv || x->shape[ax] == y->shape[ys->c[0].axis]))
                p->col_input[x->id] = 1;
        }
    }
}
