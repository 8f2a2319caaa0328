/* shard.c - the tensor-parallel plan from the graph (see redco/shard.h).
 *
 * Every activation of the forward graph gets a state: replicated, a partial sum, split on
 * one axis, or split-any: the output of a column-parallel linear whose granularity is not
 * decided yet. A split-any keeps candidates, sub-axes of the current tensor that its
 * features are spread over (after reshapes: q/k/v, heads, head_dim); each candidate says
 * where it sits in the current axis ([c_outer, groups, c_inner]) and in the linear's
 * output features ([o_outer, groups, o_inner]). The first op that needs a choice makes it:
 * attention picks a batch axis (the heads), a linear contracting over the features picks
 * the whole axis, norms / softmax / rotary rule out their inner axis. */
#include "shard_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t numel_bytes(const rc_tensor *t)
{
    return rc_tensor_numel(t) * 4;
}

static void allreduce(plan *p, const rc_tensor *t)
{
    p->comm.allreduce_fwd++;
    p->comm.bytes_fwd += (double)numel_bytes(t);
}

/* Input i of y, a partial sum, is made whole: one all-reduce per tensor, however many
 * consumers need it whole. */
static void make_whole(plan *p, state *s, const rc_tensor *y, int i)
{
    if (s->kind != ST_PARTIAL)
        return;
    const rc_tensor *t = y->src[i];
    if (!p->reduced[t->id]) {
        p->reduced[t->id] = 1;
        allreduce(p, t);
    }
    p->act[y->id * RC_MAX_SRC + i] |= ACT_REDUCE;
    s->kind = ST_REPLICATED;
}

/* Input i of y, whose split y cannot work with, is made whole: all-gathered if it ends up
 * split (not part of the Megatron pattern; a split-any may still end replicated). */
static void drop(plan *p, state *s, const rc_tensor *y, int i)
{
    if (s->kind == ST_SPLIT || s->kind == ST_SPLIT_ANY)
        p->act[y->id * RC_MAX_SRC + i] |= ACT_GATHER;
    memset(s, 0, sizeof *s);
}

/* 1 when two splits of one axis give every shard the same elements */
static int same_cut(int64_t outer_a, int64_t groups_a, int64_t inner_a, int64_t outer_b, int64_t groups_b,
                    int64_t inner_b, int mp)
{
    return outer_a == outer_b && groups_a * inner_a == groups_b * inner_b &&
           (groups_a + mp - 1) / mp * inner_a == (groups_b + mp - 1) / mp * inner_b;
}

/* A fixed split whose role is left to the graph takes the one its use gives it. */
static void fixed_role(plan *p, int param, rc_shard_role role)
{
    if (param >= 0 && p->forced[param] && p->spec[param].axis >= 0 && p->spec[param].role == RC_SHARD_REPLICATED)
        p->spec[param].role = role;
}

static int set_spec(plan *p, int param, rc_shard_role role, int axis, int64_t outer, int64_t groups,
                    int64_t inner, int vocab)
{
    if (param >= 0 && p->forced[param] && p->spec[param].axis == axis)
        fixed_role(p, param, role);
    if (param < 0 || p->forced[param])
        return 0;
    rc_shard_spec *s = &p->spec[param];
    if (s->role != RC_SHARD_REPLICATED)
        return 0; /* the first decision stands (a tied table: embedding, then head) */
    int64_t padded = groups;
    if (groups % p->mp) {
        if (!vocab) {
            if (p->fail_param < 0) {
                p->fail_param = param;
                p->fail_groups = groups;
            }
            return -1;
        }
        padded = (groups + p->mp - 1) / p->mp * p->mp;
    }
    *s = (rc_shard_spec){role, axis, outer, groups, inner, padded, "", 0};
    return 0;
}

/* Records the resolution of origins os with candidate c (vocab: padding allowed). */
static void resolve(plan *p, const state *s, const cand *c, int vocab)
{
    for (int k = 0; k < s->norig; k++) {
        origin *o = &p->orig[s->orig[k]];
        if (o->resolved)
            continue;
        o->resolved = 1;
        o->vocab = vocab;
        o->outer = c->o_outer;
        o->groups = c->groups;
        o->inner = c->o_inner;
        set_spec(p, o->param, vocab ? RC_SHARD_VOCAB : RC_SHARD_COLUMN, o->axis, o->outer, o->groups,
                 o->inner, vocab);
        for (int b = 0; b < o->nbias; b++)
            set_spec(p, o->bias[b], RC_SHARD_BIAS, o->bias_axis[b], o->outer, o->groups, o->inner, vocab);
    }
}

/* Collapses a split-any to the candidate k: a concrete split. */
static void choose(plan *p, state *s, int k, int vocab)
{
    cand c = s->c[k];
    resolve(p, s, &c, vocab);
    s->kind = ST_SPLIT;
    s->ncand = 1;
    s->c[0] = c;
}

static int find_cand(const state *s, int axis)
{
    for (int k = 0; k < s->ncand; k++)
        if (s->c[k].axis == axis)
            return k;
    return -1;
}

/* Drops the candidates on `axis` (y reduces over it, input i); a split there is gathered. */
static void forbid_axis(plan *p, state *s, int axis, const rc_tensor *y, int i)
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
static int reshape_cand(const cand *c, const rc_tensor *in, const rc_tensor *out, cand *res, int room)
{
    int64_t stride = c->c_inner * post_of(in, c->axis), size = c->groups;
    int n = 0;
    for (int b = 0; b < out->ndim && n < room; b++) {
        int64_t post = post_of(out, b), ext = out->shape[b];
        if (post <= stride && stride % post == 0) {
            int64_t inner = stride / post;
            if (inner * size <= ext && ext % (inner * size) == 0) {
                res[n++] = (cand){b, ext / (inner * size), size, inner, c->o_outer, c->o_inner};
                return n;
            }
        }
        /* a whole axis inside the candidate's span: a finer factor of it */
        if (ext > 1 && post >= stride && post * ext <= stride * size && post % stride == 0) {
            int64_t in_g = post / stride, out_g = size / (in_g * ext);
            if (size % (in_g * ext) == 0)
                res[n++] = (cand){b, 1, ext, 1, c->o_outer * out_g, c->o_inner * in_g};
        }
    }
    return n;
}

static void through_reshape(plan *p, state *s, const rc_tensor *in, const rc_tensor *out)
{
    /* out is the reshape node, its input 0 is in */
    if (s->kind != ST_SPLIT_ANY && s->kind != ST_SPLIT)
        return;
    state r = *s;
    r.ncand = 0;
    for (int k = 0; k < s->ncand; k++)
        r.ncand += reshape_cand(&s->c[k], in, out, r.c + r.ncand, MAX_CAND - r.ncand);
    if ((s->kind == ST_SPLIT && r.ncand != 1) || !r.ncand) {
        drop(p, s, out, 0);
        return;
    }
    *s = r;
}

static void through_permute(state *s, const rc_tensor *t)
{
    for (int k = 0; k < s->ncand; k++)
        for (int i = 0; i < t->ndim; i++)
            if (t->iparam[i] == s->c[k].axis) {
                s->c[k].axis = i;
                break;
            }
}

/* ---- ops -------------------------------------------------------------------------------- */

static int is_param(const plan *p, const rc_tensor *t)
{
    return t && p->param_of[t->id] >= 0;
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

static int new_origin(plan *p, int param, int axis)
{
    if (p->norig == p->cap_orig) {
        int cap = p->cap_orig ? 2 * p->cap_orig : 64;
        origin *o = realloc(p->orig, (size_t)cap * sizeof *o);
        if (!o)
            return -1;
        p->orig = o;
        p->cap_orig = cap;
    }
    p->orig[p->norig] = (origin){.param = param, .axis = axis};
    return p->norig++;
}

/* matmul(x, W) with W a parameter whose split is fixed (an override): the input is brought
 * to the form the split needs, the output takes the split's form */
static void linear_fixed(plan *p, rc_tensor *y, state *xs, state *out, int in_axis)
{
    int wi = p->param_of[y->src[1]->id], last = y->src[0]->ndim - 1;
    const rc_shard_spec *ws = &p->spec[wi];
    int row_in = xs->kind == ST_SPLIT && xs->c[0].axis == last;
    if (ws->axis == in_axis && row_in &&
        same_cut(xs->c[0].c_outer, xs->c[0].groups, xs->c[0].c_inner, ws->outer, ws->groups, ws->inner, p->mp)) {
        fixed_role(p, wi, RC_SHARD_ROW);
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
        fixed_role(p, wi, RC_SHARD_ROW);
        p->act[y->id * RC_MAX_SRC] |= ACT_ROWCUT;
        out->kind = ST_PARTIAL;
        return;
    }
    fixed_role(p, wi, RC_SHARD_COLUMN);
    *out = (state){.kind = ST_SPLIT, .ncand = 1};
    out->c[0] = (cand){y->ndim - 1, ws->outer, ws->groups, ws->inner, ws->outer, ws->inner};
}

/* matmul(x, W) with W a parameter: column or row parallel */
static void linear(plan *p, rc_tensor *y, state *out)
{
    rc_tensor *x = y->src[0], *w = y->src[1];
    state xs = p->st[x->id];
    int wi = p->param_of[w->id], tb = y->iparam[1];
    int out_axis = tb ? 0 : 1, in_axis = tb ? 1 : 0, last = x->ndim - 1;
    make_whole(p, &xs, y, 0);
    memset(out, 0, sizeof *out);
    if (p->forced[wi]) {
        if (xs.kind == ST_SPLIT_ANY && find_cand(&xs, last) >= 0 && p->spec[wi].axis == in_axis)
            choose(p, &xs, find_cand(&xs, last), 0);
        else
            forbid_axis(p, &xs, last, y, 0); /* the contracted features cannot stay split */
        linear_fixed(p, y, &xs, out, in_axis);
        return;
    }
    if (xs.kind == ST_SPLIT_ANY && find_cand(&xs, last) >= 0)
        choose(p, &xs, find_cand(&xs, last), 0);
    if (xs.kind == ST_SPLIT && xs.c[0].axis == last) { /* row parallel */
        const cand *c = &xs.c[0];
        if (set_spec(p, wi, RC_SHARD_ROW, in_axis, c->c_outer, c->groups, c->c_inner, 0) == 0) {
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
    const rc_shard_spec *ws = &p->spec[wi];
    if (ws->role == RC_SHARD_VOCAB && ws->axis == out_axis) { /* a head tied to the table */
        out->kind = ST_SPLIT;
        out->ncand = 1;
        out->c[0] = (cand){y->ndim - 1, 1, ws->groups, 1, 1, 1};
        return;
    }
    int o = new_origin(p, wi, out_axis);
    if (o < 0)
        return;
    int64_t N = w->shape[out_axis];
    *out = (state){.kind = ST_SPLIT_ANY, .ncand = 1, .norig = 1};
    out->c[0] = (cand){y->ndim - 1, 1, N, 1, 1, 1};
    out->orig[0] = o;
}

/* a replicated operand of an element-wise op: a parameter broadcast along the split axis
 * (a bias) follows the split; an activation is sliced locally */
static void follow(plan *p, const state *lead, const rc_tensor *lead_t, const rc_tensor *y, rc_tensor *r)
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
            const cand *c = &lead->c[0];
            set_spec(p, bi, RC_SHARD_BIAS, ax_r, c->c_outer, c->groups, c->c_inner, 0);
            continue;
        }
        for (int o = 0; o < lead->norig; o++) {
            origin *og = &p->orig[lead->orig[o]];
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
static int split_agrees(plan *p, const state *lead, const rc_tensor *lead_t, const rc_tensor *o, const rc_tensor *y)
{
    state *os = &p->st[o->id];
    if (lead->kind != ST_SPLIT)
        return 0;
    const cand *c = &lead->c[0];
    int ax = c->axis + (y->ndim - lead_t->ndim) - (y->ndim - o->ndim);
    for (int k = 0; k < os->ncand; k++) {
        const cand *d = &os->c[k];
        if (d->axis == ax && same_cut(c->c_outer, c->groups, c->c_inner, d->c_outer, d->groups, d->c_inner, p->mp)) {
            if (os->kind == ST_SPLIT_ANY) {
                state r = *os;
                choose(p, &r, k, 0);
            }
            return 1;
        }
    }
    return 0;
}

static void elementwise(plan *p, rc_tensor *y, state *out)
{
    int lead = -1, partial = 0;
    for (int i = 0; i < y->nsrc; i++) {
        const state *s = y->src[i] ? &p->st[y->src[i]->id] : NULL;
        if (s && s->kind == ST_PARTIAL)
            partial = 1;
        if (s && s->kind == ST_SPLIT && (lead < 0 || p->st[y->src[lead]->id].kind != ST_SPLIT))
            lead = i; /* a concrete split leads over a split-any */
        if (s && s->kind == ST_SPLIT_ANY && lead < 0)
            lead = i;
    }
    memset(out, 0, sizeof *out);
    if (partial) {
        int linear_op = (y->op == RC_OP_ADD || y->op == RC_OP_SUB);
        for (int i = 0; i < y->nsrc; i++)
            if (y->src[i] && p->st[y->src[i]->id].kind != ST_PARTIAL)
                linear_op = 0;
        if (linear_op) {
            out->kind = ST_PARTIAL;
            return;
        }
        /* a partial sum meets a bias or the residual stream: made whole first */
        for (int i = 0; i < y->nsrc; i++)
            if (y->src[i] && p->st[y->src[i]->id].kind == ST_PARTIAL) {
                state s = p->st[y->src[i]->id];
                make_whole(p, &s, y, i);
            }
        if (lead < 0)
            return;
    }
    if (lead < 0)
        return;
    rc_tensor *lt = y->src[lead];
    state s = p->st[lt->id];
    for (int i = 0; i < y->nsrc; i++) {
        rc_tensor *o = y->src[i];
        if (!o || i == lead)
            continue;
        state *os = &p->st[o->id];
        if (os->kind == ST_REPLICATED || os->kind == ST_PARTIAL) {
            follow(p, &s, lt, y, o);
            p->act[y->id * RC_MAX_SRC + i] |= ACT_SLICE; /* a parameter: already its shard */
        }
        else if (os->kind == ST_SPLIT_ANY && s.kind == ST_SPLIT_ANY && s.norig + os->norig <= MAX_ORIG)
            for (int k = 0; k < os->norig; k++)
                s.orig[s.norig++] = os->orig[k]; /* gate * up: resolved together */
        else if (!split_agrees(p, &s, lt, o, y))
            p->act[y->id * RC_MAX_SRC + i] |= ACT_GATHER | ACT_SLICE; /* another split: whole, then cut */
    }
    *out = s;
    for (int k = 0; k < out->ncand; k++)
        out->c[k].axis += y->ndim - lt->ndim;
}

/* a matmul between activations (attention): batch axes may carry the split */
static void batched(plan *p, rc_tensor *y, state *out)
{
    state s[2];
    memset(out, 0, sizeof *out);
    for (int i = 0; i < 2; i++) {
        s[i] = p->st[y->src[i]->id];
        make_whole(p, &s[i], y, i);
        int nb = y->src[i]->ndim - 2;
        if (s[i].kind == ST_SPLIT_ANY) {
            int k = -1;
            for (int c = 0; c < s[i].ncand && k < 0; c++)
                if (s[i].c[c].axis < nb)
                    k = c;
            if (k >= 0 && s[i].c[k].groups % p->mp) {
                /* heads that do not divide; when they are key/value heads shared by groups
                 * of query heads (c_inner > 1: repeated), GQA, that side is replicated */
                for (int o = 0; o < s[i].norig; o++) {
                    int param = p->orig[s[i].orig[o]].param;
                    if (p->forced[param])
                        continue;
                    if (s[i].c[k].c_inner > 1 && p->gqa_param < 0) {
                        p->gqa_param = param;
                        p->fail_groups = s[i].c[k].groups;
                    } else if (s[i].c[k].c_inner == 1 && p->fail_param < 0) {
                        p->fail_param = param;
                        p->fail_groups = s[i].c[k].groups;
                    }
                }
                drop(p, &s[i], y, i);
            } else if (k >= 0) {
                choose(p, &s[i], k, 0);
            } else {
                drop(p, &s[i], y, i);
            }
        }
        if (s[i].kind == ST_SPLIT && s[i].c[0].axis >= nb)
            drop(p, &s[i], y, i); /* split on a contracted or row axis: whole first */
    }
    int lead = s[0].kind == ST_SPLIT ? 0 : s[1].kind == ST_SPLIT ? 1 : -1;
    if (lead < 0)
        return;
    int other = !lead, ax = s[lead].c[0].axis + (y->ndim - y->src[lead]->ndim);
    int ax_o = ax - (y->ndim - y->src[other]->ndim);
    const cand *c = &s[lead].c[0], *d = &s[other].c[0];
    if (s[other].kind == ST_REPLICATED) /* e.g. a GQA key replicated: this shard's heads of it */
        p->act[y->id * RC_MAX_SRC + other] |= ACT_SLICE;
    else if (d->axis != ax_o || !same_cut(c->c_outer, c->groups, c->c_inner, d->c_outer, d->groups, d->c_inner, p->mp))
        p->act[y->id * RC_MAX_SRC + other] |= ACT_GATHER | ACT_SLICE;
    *out = s[lead];
    out->c[0].axis = ax;
    out->norig = 0;
}

/* the additive mask of a softmax (T5's position bias, a padding mask) meets the scores'
 * split: a replicated mask is cut to this shard's heads */
static void softmax_mask(plan *p, rc_tensor *y, const state *out)
{
    rc_tensor *m = y->src[1];
    state mask = p->st[m->id];
    make_whole(p, &mask, y, 1);
    if (out->kind != ST_SPLIT && out->kind != ST_SPLIT_ANY)
        drop(p, &mask, y, 1);
    else if (mask.kind == ST_REPLICATED)
        p->act[y->id * RC_MAX_SRC + 1] |= ACT_SLICE;
    else if (!split_agrees(p, out, y, m, y))
        p->act[y->id * RC_MAX_SRC + 1] |= ACT_GATHER | ACT_SLICE;
}

/* rows of a table by token ids: a table of parameters splits the vocabulary (a fixed split
 * of its columns splits the output features instead) */
static void embedding(plan *p, rc_tensor *y, state *out)
{
    rc_tensor *table = y->src[0], *ids = y->src[1];
    state ts = p->st[table->id], is = p->st[ids->id];
    drop(p, &is, y, 1);
    if (!is_param(p, table)) {
        make_whole(p, &ts, y, 0);
        drop(p, &ts, y, 0);
        return;
    }
    int ti = p->param_of[table->id];
    const rc_shard_spec *s = &p->spec[ti];
    if (p->forced[ti] && s->axis == 1) {
        fixed_role(p, ti, RC_SHARD_COLUMN);
        *out = (state){.kind = ST_SPLIT, .ncand = 1};
        out->c[0] = (cand){y->ndim - 1, s->outer, s->groups, s->inner, s->outer, s->inner};
        return;
    }
    if (p->forced[ti] ? s->axis == 0 : from_input(ids) && set_spec(p, ti, RC_SHARD_VOCAB, 0, 1, table->shape[0], 1, 1) == 0) {
        fixed_role(p, ti, RC_SHARD_VOCAB);
        out->kind = ST_PARTIAL; /* masked lookup on each shard, summed */
    }
}

/* 1 when t is consumed by exactly one node of the graph up to `last` */
static int single_use(const plan *p, const rc_tensor *t, int last)
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
static void concat(plan *p, rc_tensor *y, state *out)
{
    int ax = y->iparam[0], lead = -1;
    state s[RC_MAX_SRC];
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

static void step(plan *p, rc_tensor *y)
{
    state *out = &p->st[y->id];
    memset(out, 0, sizeof *out);
    rc_tensor *a = y->nsrc > 0 ? y->src[0] : NULL;
    state in = a ? p->st[a->id] : (state){0};
    switch (y->op) {
    case RC_OP_MATMUL:
        if (is_param(p, y->src[1]) && y->src[1]->ndim == 2 && !y->iparam[0])
            linear(p, y, out);
        else
            batched(p, y, out);
        return;
    case RC_OP_ADD: case RC_OP_SUB: case RC_OP_MUL: case RC_OP_DIV: case RC_OP_WHERE:
        elementwise(p, y, out);
        return;
    case RC_OP_AFFINE:
        *out = in;
        if (in.kind == ST_PARTIAL && y->fparam[1] != 0)
            make_whole(p, out, y, 0);
        return;
    case RC_OP_EXP: case RC_OP_LOG: case RC_OP_SQRT: case RC_OP_RSQRT: case RC_OP_TANH:
    case RC_OP_ACT: case RC_OP_DROPOUT: case RC_OP_CAST:
        *out = in;
        make_whole(p, out, y, 0);
        return;
    case RC_OP_SOFTMAX: case RC_OP_LAYER_NORM: case RC_OP_RMS_NORM: case RC_OP_ROPE:
        *out = in;
        make_whole(p, out, y, 0);
        forbid_axis(p, out, a->ndim - 1, y, 0);
        if (y->op == RC_OP_SOFTMAX && y->src[1])
            softmax_mask(p, y, out);
        return;
    case RC_OP_RESHAPE:
        *out = in;
        through_reshape(p, out, a, y);
        return;
    case RC_OP_PERMUTE:
        *out = in;
        through_permute(out, y);
        return;
    case RC_OP_SLICE: case RC_OP_PAD:
        *out = in;
        forbid_axis(p, out, y->iparam[0], y, 0);
        return;
    case RC_OP_STOP_GRADIENT:
        *out = in;
        return;
    case RC_OP_CONCAT:
        concat(p, y, out);
        return;
    case RC_OP_EXPAND:
        *out = in;
        for (int k = 0; k < out->ncand; k++)
            out->c[k].axis += y->ndim - a->ndim;
        return;
    case RC_OP_SUM: case RC_OP_MAX:
        *out = in;
        make_whole(p, out, y, 0);
        forbid_axis(p, out, y->iparam[0], y, 0);
        for (int k = 0; !y->iparam[1] && k < out->ncand; k++)
            out->c[k].axis -= out->c[k].axis > y->iparam[0];
        return;
    case RC_OP_EMBEDDING:
        embedding(p, y, out);
        return;
    case RC_OP_CROSS_ENTROPY:
        make_whole(p, &in, y, 0);
        if (in.kind == ST_SPLIT_ANY && find_cand(&in, a->ndim - 1) >= 0)
            choose(p, &in, find_cand(&in, a->ndim - 1), 1);
        if (in.kind == ST_SPLIT && in.c[0].axis == a->ndim - 1 && in.c[0].c_outer == 1 && in.c[0].c_inner == 1) {
            int64_t rows = rc_tensor_numel(a) / a->shape[a->ndim - 1]; /* vocabulary-parallel */
            p->comm.allreduce_fwd += 3; /* row max, sum of exp, target logit */
            p->comm.bytes_fwd += 3.0 * (double)rows * 4;
        } else {
            drop(p, &in, y, 0);
        }
        return;
    default: /* an op the rules do not know: its inputs whole */
        for (int i = 0; i < y->nsrc; i++)
            if (y->src[i]) {
                state s = p->st[y->src[i]->id];
                make_whole(p, &s, y, i);
                drop(p, &s, y, i);
            }
        return;
    }
}

/* "1, 2, 4": the shard counts that divide every one of n group counts */
static void workable(const int64_t *groups, int n, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = 0;
    for (int64_t d = 1; d <= groups[0] && used < size; d++) {
        int ok = 1;
        for (int i = 0; i < n && ok; i++)
            ok = groups[i] % d == 0;
        if (ok)
            used += (size_t)snprintf(buf + used, size - used, "%s%lld", used ? ", " : "", (long long)d);
    }
}

/* A split-any state made concrete by its origin's resolution: the candidate the
 * resolution refines, seen in this tensor; replicated when the origin never resolved. */
static void finalize_state(plan *p, state *s)
{
    if (s->kind != ST_SPLIT_ANY)
        return;
    const origin *o = s->norig ? &p->orig[s->orig[0]] : NULL;
    for (int k = 0; o && o->resolved && k < s->ncand; k++) {
        const cand *c = &s->c[k];
        if (o->outer % c->o_outer || o->inner % c->o_inner)
            continue;
        int64_t a = o->outer / c->o_outer, b = o->inner / c->o_inner;
        if (a * o->groups * b != c->groups)
            continue;
        cand r = {c->axis, c->c_outer * a, o->groups, c->c_inner * b, o->outer, o->inner};
        *s = (state){.kind = ST_SPLIT, .ncand = 1};
        s->c[0] = r;
        return;
    }
    memset(s, 0, sizeof *s);
}

/* The inputs of linears whose weight ended up split on its outputs (column parallel or a
 * vocabulary head): Megatron's f, mp_enter in the partitioned graph. Decided once the
 * plan is complete, since a split-any may end unresolved (its weight then replicated). */
static void mark_column_inputs(plan *p, const rc_tensor *out)
{
    for (int i = 0; i <= out->id; i++) {
        const rc_tensor *y = rc_graph_node(p->g, i);
        if (y->op != RC_OP_MATMUL || !is_param(p, y->src[1]) || y->src[1]->ndim != 2 || y->iparam[0])
            continue;
        const rc_shard_spec *ws = &p->spec[p->param_of[y->src[1]->id]];
        int out_axis = y->iparam[1] ? 0 : 1;
        const state *xs = &p->st[y->src[0]->id];
        unsigned a = p->act[y->id * RC_MAX_SRC];
        int whole_input = xs->kind == ST_REPLICATED || (xs->kind == ST_PARTIAL && (a & ACT_REDUCE)) || (a & ACT_GATHER);
        if (ws->axis == out_axis && (ws->role == RC_SHARD_COLUMN || ws->role == RC_SHARD_VOCAB) && whole_input) {
            p->col_input[y->src[0]->id] = 1;
            p->act[y->id * RC_MAX_SRC] |= ACT_ENTER;
        }
    }
    /* replicated activations cut to a shard (GQA keys, T5's position bias) enter too: their
     * gradients are all-reduced backward */
    for (int i = 0; i <= out->id; i++) {
        const rc_tensor *y = rc_graph_node(p->g, i);
        state fin = p->st[i];
        const state *ys = &fin;
        finalize_state(p, &fin); /* a split-any resolved later is split here too */
        for (int k = 0; k < y->nsrc && ys->kind == ST_SPLIT; k++) {
            const rc_tensor *x = y->src[k];
            if (!x || !(p->act[i * RC_MAX_SRC + k] & ACT_SLICE) || is_param(p, x))
                continue;
            int ax = ys->c[0].axis - (y->ndim - x->ndim);
            if (p->mp > 1 && ax >= 0 && x->shape[ax] == y->shape[ys->c[0].axis])
                p->col_input[x->id] = 1;
        }
    }
}

/* The gathers the partitioner will run: tensors that end up split where a consumer needs
 * them whole (counted once per tensor, as the partitioner gathers once). */
static void count_gathers(plan *p)
{
    char *seen = calloc((size_t)p->last + 1, 1);
    for (int i = 0; seen && i <= p->last; i++) {
        const rc_tensor *y = rc_graph_node(p->g, i);
        for (int k = 0; k < y->nsrc; k++) {
            const rc_tensor *x = y->src[k];
            if (!x || !(p->act[i * RC_MAX_SRC + k] & ACT_GATHER) || seen[x->id])
                continue;
            state s = p->st[x->id];
            finalize_state(p, &s);
            if (s.kind == ST_SPLIT) {
                seen[x->id] = 1;
                p->comm.allgather_fwd++;
                p->comm.bytes_fwd += (double)numel_bytes(x);
            }
        }
    }
    free(seen);
}

/* 1 when some origin of the split-any s is already decided */
static int any_resolved(const plan *p, const state *s)
{
    for (int k = 0; k < s->norig; k++)
        if (p->orig[s->orig[k]].resolved)
            return 1;
    return 0;
}

static int analyse(plan *p)
{
    const rc_tensor *out = rc_graph_node(p->g, p->last);
    memset(p->st, 0, (size_t)rc_graph_size(p->g) * sizeof *p->st);
    memset(p->col_input, 0, (size_t)rc_graph_size(p->g));
    memset(p->reduced, 0, (size_t)rc_graph_size(p->g));
    memset(p->act, 0, (size_t)rc_graph_size(p->g) * RC_MAX_SRC);
    for (int i = 0; i < p->n; i++)
        if (!p->forced[i])
            p->spec[i] = (rc_shard_spec){RC_SHARD_REPLICATED, -1, 1, 1, 1, 1, "", 0};
    p->norig = 0;
    p->fail_param = -1;
    p->gqa_param = -1;
    memset(&p->comm, 0, sizeof p->comm);
    for (int i = 0; i < rc_graph_size(p->g); i++)
        p->follow[i] = -1;
    for (int i = 0; i <= out->id; i++)
        step(p, rc_graph_node(p->g, i));
    /* splits nothing resolved (the logits as output): the whole axis, a vocabulary */
    for (int k = 0; k < p->nout; k++) {
        state *last = &p->st[p->outs[k]->id];
        int c = last->kind == ST_SPLIT_ANY ? find_cand(last, p->outs[k]->ndim - 1) : -1;
        if (c >= 0 && !any_resolved(p, last))
            choose(p, last, c, 1);
    }
    mark_column_inputs(p, out);
    count_gathers(p);
    /* a backward all-reduce only where a gradient flows: inputs that depend on parameters */
    char *grads = calloc((size_t)out->id + 1, 1);
    for (int i = 0; grads && i <= out->id; i++) {
        const rc_tensor *t = rc_graph_node(p->g, i);
        grads[i] = p->param_of[i] >= 0;
        for (int k = 0; k < t->nsrc && !grads[i]; k++)
            grads[i] = t->src[k] && grads[t->src[k]->id];
    }
    for (int i = 0; grads && i <= out->id; i++)
        if (p->col_input[i] && grads[i]) { /* Megatron's f: the input gradient of column layers */
            p->comm.allreduce_bwd++;
            p->comm.bytes_bwd += (double)numel_bytes(rc_graph_node(p->g, i));
        }
    free(grads);
    return p->gqa_param >= 0 ? p->gqa_param : p->fail_param;
}

void rci_shard_plan_free(plan *p)
{
    if (!p)
        return;
    free(p->param_of);
    free(p->st);
    free(p->col_input);
    free(p->reduced);
    free(p->act);
    free(p->follow);
    free(p->orig);
    free((char *)p->forced);
    free(p);
}

/* a caller's override: in range and dividing (vocabularies may pad) */
static int check_fixed(rc_shard_spec *s, const rc_tensor *param, int mp, rc_error *err)
{
    if (s->axis < 0) {
        *s = (rc_shard_spec){RC_SHARD_REPLICATED, -1, 1, 1, 1, 1, "", 1};
        return 0;
    }
    if (s->axis >= param->ndim || s->outer < 1 || s->groups < 1 || s->inner < 1 ||
        s->outer * s->groups * s->inner != param->shape[s->axis])
        return rc_error_set(err, RC_ERR_ARG, "plan: the override of %s (axis %d, %lld x %lld x %lld) does not fit its shape",
                            param->name, s->axis, (long long)s->outer, (long long)s->groups, (long long)s->inner);
    if (s->groups % mp && s->role != RC_SHARD_VOCAB)
        return rc_error_set(err, RC_ERR_SHAPE, "plan: the override of %s splits %lld groups, which %d shards do not divide",
                            param->name, (long long)s->groups, mp);
    s->padded_groups = (s->groups + mp - 1) / mp * mp;
    return 0;
}

int rci_shard_plan_run(rc_graph *g, rc_tensor *const *outs, int nout, rc_tensor *const *params, int n, int mp,
                   int allow_replicate, rc_shard_spec *specs, rc_shard_comm *comm, plan **keep,
                   rc_error *err)
{
    int ok_outs = outs && nout >= 1;
    for (int k = 0; ok_outs && k < nout; k++)
        ok_outs = outs[k] != NULL;
    if (!g || rc_graph_error(g) || !ok_outs || mp < 1 || n < 0)
        return rc_error_set(err, RC_ERR_ARG, "plan: a graph without errors, an output and mp >= 1 are needed%s%s",
                            g && rc_graph_error(g) ? ": " : "", g && rc_graph_error(g) ? rc_graph_error(g) : "");
    int size = rc_graph_size(g);
    plan *p = calloc(1, sizeof *p);
    char *forced = calloc((size_t)n + 1, 1);
    if (!p || !forced) {
        free(p);
        free(forced);
        return rc_error_set(err, RC_ERR_MEMORY, "plan: out of memory");
    }
    *p = (plan){.g = g, .mp = mp, .n = n, .params = params, .spec = specs, .forced = forced,
                .outs = outs, .nout = nout};
    for (int k = 0; k < nout; k++)
        p->last = outs[k]->id > p->last ? outs[k]->id : p->last;
    p->param_of = malloc((size_t)size * sizeof *p->param_of);
    p->st = malloc((size_t)size * sizeof *p->st);
    p->col_input = malloc((size_t)size);
    p->reduced = malloc((size_t)size);
    p->act = malloc((size_t)size * RC_MAX_SRC);
    p->follow = malloc((size_t)size * sizeof *p->follow);
    int rc = p->param_of && p->st && p->col_input && p->reduced && p->act && p->follow
                 ? 0 : rc_error_set(err, RC_ERR_MEMORY, "plan: out of memory");
    for (int i = 0; !rc && i < size; i++)
        p->param_of[i] = -1;
    for (int i = 0; !rc && i < n; i++) {
        if (!params[i]) /* a parameter the graph does not use */
            continue;
        p->param_of[params[i]->id] = i;
        if (specs[i].fixed) {
            forced[i] = 1;
            rc = check_fixed(&specs[i], params[i], mp, err);
        }
    }
    int64_t failed[64];
    int nfailed = 0;
    char names[400] = "";
    size_t used = 0;
    for (int round = 0; !rc && round <= n; round++) {
        int bad = analyse(p);
        if (bad < 0)
            break;
        if (p->gqa_param >= 0) {
            forced[bad] = 1;
            specs[bad] = (rc_shard_spec){RC_SHARD_REPLICATED, -1, 1, 1, 1, 1, "", 0};
            snprintf(specs[bad].note, sizeof specs[bad].note,
                     "%lld key/value heads shared by the query heads do not divide into %d shards: replicated",
                     (long long)p->fail_groups, mp);
            continue;
        }
        if (nfailed < 64)
            failed[nfailed++] = p->fail_groups;
        used += (size_t)snprintf(names + used, used < sizeof names ? sizeof names - used : 0, "%s%s (%lld groups)",
                                 used ? ", " : "", params[bad]->name, (long long)p->fail_groups);
        /* replicate it (noted) and look again: downstream layers may change role */
        forced[bad] = 1;
        specs[bad] = (rc_shard_spec){RC_SHARD_REPLICATED, -1, 1, 1, 1, 1, "", 0};
        snprintf(specs[bad].note, sizeof specs[bad].note,
                 "%lld groups do not divide into %d shards: replicated", (long long)p->fail_groups, mp);
    }
    if (!rc && nfailed && !allow_replicate) {
        char ok[256];
        workable(failed, nfailed, ok, sizeof ok);
        rc = rc_error_set(err, RC_ERR_SHAPE,
                          "tensor parallelism: %d model shards do not divide %s; shard counts that would: %s "
                          "(or allow replicating those weights: --allow-replicate)", mp, names, ok);
    }
    if (!rc && comm)
        *comm = p->comm;
    if (!rc && keep) {
        for (int i = 0; i <= p->last; i++)
            finalize_state(p, &p->st[i]);
        for (int i = 0; i <= p->last; i++) /* splittable inputs take their consumer's split */
            if (p->follow[i] >= 0 && p->st[p->follow[i]].kind == ST_SPLIT)
                p->st[i] = p->st[p->follow[i]];
        *keep = p;
        return 0;
    }
    rci_shard_plan_free(p);
    return rc ? -1 : 0;
}

int rc_shard_plan(rc_graph *g, rc_tensor *out, rc_tensor *const *params, int n, int mp,
                  int allow_replicate, rc_shard_spec *specs, rc_shard_comm *comm, rc_error *err)
{
    return rci_shard_plan_run(g, &out, 1, params, n, mp, allow_replicate, specs, comm, NULL, err);
}

int rc_shard_fix(rc_shard_spec *s, const rc_tensor *param, int axis, int64_t groups, int mp, rc_error *err)
{
    if (!s || !param)
        return rc_error_set(err, RC_ERR_ARG, "plan: an override needs a spec and its parameter");
    memset(s, 0, sizeof *s);
    s->fixed = 1;
    s->axis = axis < 0 ? -1 : axis;
    if (axis >= param->ndim)
        return rc_error_set(err, RC_ERR_ARG, "plan: %s has %d axes; no axis %d to split", param->name, param->ndim, axis);
    if (axis >= 0) {
        int64_t ext = param->shape[axis];
        s->groups = groups > 0 ? groups : ext;
        if (ext % s->groups)
            return rc_error_set(err, RC_ERR_ARG, "plan: axis %d of %s (%lld) is not a multiple of %lld groups",
                                axis, param->name, (long long)ext, (long long)s->groups);
        s->outer = 1;
        s->inner = ext / s->groups;
    }
    return check_fixed(s, param, mp, err);
}

int rc_shard_apply(rc_shard_spec *specs, rc_tensor *const *params, int n, const rc_shard_override *o,
                   int n_overrides, int mp, rc_error *err)
{
    for (int k = 0; k < n_overrides; k++) {
        int i = 0;
        while (i < n && !(params[i] && o[k].param && !strcmp(params[i]->name, o[k].param)))
            i++;
        if (i == n)
            return rc_error_set(err, RC_ERR_ARG, "plan: the override names '%s', which is no parameter the graph uses",
                                o[k].param ? o[k].param : "(null)");
        if (rc_shard_fix(&specs[i], params[i], o[k].axis, o[k].groups, mp, err))
            return -1;
    }
    return 0;
}

void rc_shard_local_shape(const rc_shard_spec *s, const rc_tensor *param, int mp, int64_t *shape)
{
    for (int i = 0; i < param->ndim; i++)
        shape[i] = param->shape[i];
    if (s->axis >= 0)
        shape[s->axis] = s->outer * (s->padded_groups / mp) * s->inner;
}

const char *rc_shard_role_name(rc_shard_role r)
{
    static const char *names[] = {"replicated", "column", "row", "vocab", "bias"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "?";
}
