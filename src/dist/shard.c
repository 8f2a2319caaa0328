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
    if (s->kind != ST_P)
        return;
    const rc_tensor *t = y->src[i];
    if (!p->reduced[t->id]) {
        p->reduced[t->id] = 1;
        allreduce(p, t);
    }
    p->act[y->id * RC_MAX_SRC + i] |= ACT_REDUCE;
    s->kind = ST_R;
}

/* A split that an op cannot work with is gathered (not part of the Megatron pattern). */
static void gather(plan *p, state *s)
{
    if (s->kind == ST_S)
        p->comm.allgather_fwd++;
    memset(s, 0, sizeof *s);
}

static int set_spec(plan *p, int param, rc_shard_role role, int axis, int64_t outer, int64_t groups,
                    int64_t inner, int vocab)
{
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
    *s = (rc_shard_spec){role, axis, outer, groups, inner, padded, ""};
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
    s->kind = ST_S;
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

/* Drops the candidates on `axis` (an op reduces over it); a split there is gathered. */
static void forbid_axis(plan *p, state *s, int axis)
{
    if (s->kind == ST_S && s->c[0].axis == axis) {
        gather(p, s);
        return;
    }
    if (s->kind != ST_A)
        return;
    int k = 0;
    for (int i = 0; i < s->ncand; i++)
        if (s->c[i].axis != axis)
            s->c[k++] = s->c[i];
    s->ncand = k;
    if (!k)
        memset(s, 0, sizeof *s); /* nothing left to split: the linear stays replicated */
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
    if (s->kind != ST_A && s->kind != ST_S)
        return;
    state r = *s;
    r.ncand = 0;
    for (int k = 0; k < s->ncand; k++)
        r.ncand += reshape_cand(&s->c[k], in, out, r.c + r.ncand, MAX_CAND - r.ncand);
    if (s->kind == ST_S && r.ncand != 1) {
        gather(p, s);
        return;
    }
    if (!r.ncand) {
        memset(s, 0, sizeof *s);
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

/* matmul(x, W) with W a parameter: column or row parallel */
static void linear(plan *p, rc_tensor *y, state *out)
{
    rc_tensor *x = y->src[0], *w = y->src[1];
    state xs = p->st[x->id];
    int wi = p->param_of[w->id], tb = y->iparam[1];
    int out_axis = tb ? 0 : 1, in_axis = tb ? 1 : 0, last = x->ndim - 1;
    make_whole(p, &xs, y, 0);
    memset(out, 0, sizeof *out);
    if (xs.kind == ST_A && find_cand(&xs, last) >= 0)
        choose(p, &xs, find_cand(&xs, last), 0);
    if (xs.kind == ST_S && xs.c[0].axis == last) { /* row parallel */
        const cand *c = &xs.c[0];
        if (set_spec(p, wi, RC_SHARD_ROW, in_axis, c->c_outer, c->groups, c->c_inner, 0) == 0)
            out->kind = p->forced[wi] ? ST_R : ST_P;
        if (p->forced[wi])
            p->comm.allgather_fwd++;
        return;
    }
    if (xs.kind != ST_R) { /* split on a batch axis: the linear is local, W replicated */
        *out = xs;
        return;
    }
    const rc_shard_spec *ws = &p->spec[wi];
    if (p->forced[wi])
        return;
    if (ws->role == RC_SHARD_VOCAB && ws->axis == out_axis) { /* a head tied to the table */
        out->kind = ST_S;
        out->ncand = 1;
        out->c[0] = (cand){y->ndim - 1, 1, ws->groups, 1, 1, 1};
        return;
    }
    int o = new_origin(p, wi, out_axis);
    if (o < 0)
        return;
    int64_t N = w->shape[out_axis];
    *out = (state){.kind = ST_A, .ncand = 1, .norig = 1};
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
        if (lead->kind == ST_S) {
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

static void elementwise(plan *p, rc_tensor *y, state *out)
{
    int lead = -1, partial = 0;
    for (int i = 0; i < y->nsrc; i++) {
        const state *s = y->src[i] ? &p->st[y->src[i]->id] : NULL;
        if (s && s->kind == ST_P)
            partial = 1;
        if (s && (s->kind == ST_A || s->kind == ST_S) && lead < 0)
            lead = i;
    }
    memset(out, 0, sizeof *out);
    if (partial) {
        int linear_op = (y->op == RC_OP_ADD || y->op == RC_OP_SUB);
        for (int i = 0; i < y->nsrc; i++)
            if (y->src[i] && p->st[y->src[i]->id].kind != ST_P)
                linear_op = 0;
        if (linear_op) {
            out->kind = ST_P;
            return;
        }
        /* a partial sum meets a bias or the residual stream: made whole first */
        for (int i = 0; i < y->nsrc; i++)
            if (y->src[i] && p->st[y->src[i]->id].kind == ST_P) {
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
        if (os->kind == ST_R || os->kind == ST_P) {
            follow(p, &s, lt, y, o);
            p->act[y->id * RC_MAX_SRC + i] |= ACT_SLICE; /* a parameter: already its shard */
        }
        else if (os->kind == ST_A && s.kind == ST_A && s.norig + os->norig <= MAX_ORIG)
            for (int k = 0; k < os->norig; k++)
                s.orig[s.norig++] = os->orig[k]; /* gate * up: resolved together */
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
        if (s[i].kind == ST_A) {
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
                memset(&s[i], 0, sizeof s[i]);
            } else if (k >= 0) {
                choose(p, &s[i], k, 0);
            } else {
                memset(&s[i], 0, sizeof s[i]);
            }
        }
    }
    for (int i = 0; i < 2; i++)
        if (s[i].kind == ST_S && s[i].c[0].axis < y->ndim - 2) {
            if (s[!i].kind == ST_R) /* e.g. a GQA key replicated: this shard's heads of it */
                p->act[y->id * RC_MAX_SRC + !i] |= ACT_SLICE;
            *out = s[i];
            out->norig = 0;
            return;
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
        if (in.kind == ST_P && y->fparam[1] != 0)
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
        forbid_axis(p, out, a->ndim - 1);
        if (y->op == RC_OP_SOFTMAX && y->src[1] && (out->kind == ST_S || out->kind == ST_A)) {
            state mask = p->st[y->src[1]->id];
            make_whole(p, &mask, y, 1);
            p->act[y->id * RC_MAX_SRC + 1] |= ACT_SLICE; /* T5's position bias: this shard's heads */
        }
        return;
    case RC_OP_RESHAPE:
        *out = in;
        through_reshape(p, out, a, y);
        return;
    case RC_OP_PERMUTE:
        *out = in;
        through_permute(out, y);
        return;
    case RC_OP_SLICE:
        *out = in;
        forbid_axis(p, out, y->iparam[0]);
        return;
    case RC_OP_EXPAND:
        *out = in;
        for (int k = 0; k < out->ncand; k++)
            out->c[k].axis += y->ndim - a->ndim;
        return;
    case RC_OP_SUM: case RC_OP_MAX:
        *out = in;
        make_whole(p, out, y, 0);
        forbid_axis(p, out, y->iparam[0]);
        for (int k = 0; !y->iparam[1] && k < out->ncand; k++)
            out->c[k].axis -= out->c[k].axis > y->iparam[0];
        return;
    case RC_OP_EMBEDDING:
        if (is_param(p, a) && from_input(y->src[1]) &&
            set_spec(p, p->param_of[a->id], RC_SHARD_VOCAB, 0, 1, a->shape[0], 1, 1) == 0 &&
            !p->forced[p->param_of[a->id]])
            out->kind = ST_P; /* masked lookup on each shard, summed */
        return;
    case RC_OP_CROSS_ENTROPY:
        if (in.kind == ST_A && find_cand(&in, a->ndim - 1) >= 0)
            choose(p, &in, find_cand(&in, a->ndim - 1), 1);
        if (in.kind == ST_S && in.c[0].axis == a->ndim - 1) { /* vocabulary-parallel */
            int64_t rows = rc_tensor_numel(a) / a->shape[a->ndim - 1];
            p->comm.allreduce_fwd += 3; /* row max, sum of exp, target logit */
            p->comm.bytes_fwd += 3.0 * (double)rows * 4;
        }
        return;
    default:
        for (int i = 0; i < y->nsrc; i++)
            if (y->src[i] && p->st[y->src[i]->id].kind == ST_P) {
                state s = p->st[y->src[i]->id];
                make_whole(p, &s, y, i);
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
        int whole_input = xs->kind == ST_R || (xs->kind == ST_P && (p->act[y->id * RC_MAX_SRC] & ACT_REDUCE));
        if (ws->axis == out_axis && (ws->role == RC_SHARD_COLUMN || ws->role == RC_SHARD_VOCAB) && whole_input) {
            p->col_input[y->src[0]->id] = 1;
            p->act[y->id * RC_MAX_SRC] |= ACT_ENTER;
        }
    }
    /* replicated activations cut to a shard (GQA keys, T5's position bias) enter too: their
     * gradients are all-reduced backward */
    for (int i = 0; i <= out->id; i++) {
        const rc_tensor *y = rc_graph_node(p->g, i);
        const state *ys = &p->st[i];
        for (int k = 0; k < y->nsrc && ys->kind == ST_S; k++) {
            const rc_tensor *x = y->src[k];
            if (!x || !(p->act[i * RC_MAX_SRC + k] & ACT_SLICE) || is_param(p, x))
                continue;
            int ax = ys->c[0].axis - (y->ndim - x->ndim);
            if (p->mp > 1 && ax >= 0 && x->shape[ax] == y->shape[ys->c[0].axis])
                p->col_input[x->id] = 1;
        }
    }
}

static int analyse(plan *p, rc_tensor *out)
{
    memset(p->st, 0, (size_t)rc_graph_size(p->g) * sizeof *p->st);
    memset(p->col_input, 0, (size_t)rc_graph_size(p->g));
    memset(p->reduced, 0, (size_t)rc_graph_size(p->g));
    memset(p->act, 0, (size_t)rc_graph_size(p->g) * RC_MAX_SRC);
    for (int i = 0; i < p->n; i++)
        if (!p->forced[i])
            p->spec[i] = (rc_shard_spec){RC_SHARD_REPLICATED, -1, 1, 1, 1, 1, ""};
    p->norig = 0;
    p->fail_param = -1;
    p->gqa_param = -1;
    memset(&p->comm, 0, sizeof p->comm);
    for (int i = 0; i <= out->id; i++)
        step(p, rc_graph_node(p->g, i));
    /* splits nothing resolved (the logits as output): the whole axis, a vocabulary */
    state *last = &p->st[out->id];
    if (last->kind == ST_A && find_cand(last, out->ndim - 1) >= 0)
        choose(p, last, find_cand(last, out->ndim - 1), 1);
    mark_column_inputs(p, out);
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

/* A split-any state made concrete by its origin's resolution: the candidate the
 * resolution refines, seen in this tensor; replicated when the origin never resolved. */
static void finalize_state(plan *p, state *s)
{
    if (s->kind != ST_A)
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
        *s = (state){.kind = ST_S, .ncand = 1};
        s->c[0] = r;
        return;
    }
    memset(s, 0, sizeof *s);
}

void shard_plan_free(plan *p)
{
    if (!p)
        return;
    free(p->param_of);
    free(p->st);
    free(p->col_input);
    free(p->reduced);
    free(p->act);
    free(p->orig);
    free((char *)p->forced);
    free(p);
}

int shard_plan_run(rc_graph *g, rc_tensor *out, rc_tensor *const *params, int n, int mp,
                   int allow_replicate, rc_shard_spec *specs, rc_shard_comm *comm, plan **keep,
                   rc_error *err)
{
    if (!g || rc_graph_error(g) || !out || mp < 1 || n < 0)
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
    *p = (plan){.g = g, .mp = mp, .n = n, .params = params, .spec = specs, .forced = forced};
    p->param_of = malloc((size_t)size * sizeof *p->param_of);
    p->st = malloc((size_t)size * sizeof *p->st);
    p->col_input = malloc((size_t)size);
    p->reduced = malloc((size_t)size);
    p->act = malloc((size_t)size * RC_MAX_SRC);
    int rc = p->param_of && p->st && p->col_input && p->reduced && p->act
                 ? 0 : rc_error_set(err, RC_ERR_MEMORY, "plan: out of memory");
    for (int i = 0; !rc && i < size; i++)
        p->param_of[i] = -1;
    for (int i = 0; !rc && i < n; i++)
        p->param_of[params[i]->id] = i;
    int64_t failed[64];
    int nfailed = 0;
    char names[400] = "";
    size_t used = 0;
    for (int round = 0; !rc && round <= n; round++) {
        int bad = analyse(p, out);
        if (bad < 0)
            break;
        if (p->gqa_param >= 0) {
            forced[bad] = 1;
            specs[bad] = (rc_shard_spec){RC_SHARD_REPLICATED, -1, 1, 1, 1, 1, ""};
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
        specs[bad] = (rc_shard_spec){RC_SHARD_REPLICATED, -1, 1, 1, 1, 1, ""};
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
        for (int i = 0; i <= out->id; i++)
            finalize_state(p, &p->st[i]);
        *keep = p;
        return 0;
    }
    shard_plan_free(p);
    return rc ? -1 : 0;
}

int rc_shard_plan(rc_graph *g, rc_tensor *out, rc_tensor *const *params, int n, int mp,
                  int allow_replicate, rc_shard_spec *specs, rc_shard_comm *comm, rc_error *err)
{
    return shard_plan_run(g, out, params, n, mp, allow_replicate, specs, comm, NULL, err);
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
