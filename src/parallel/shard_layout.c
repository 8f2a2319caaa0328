/* shard_layout.c - the layout rules of the tensor-parallel plan: what a split is and how
 * a parameter gets one. An activation's layout is a state (shard_internal.h); a linear
 * fed a whole activation starts a split-any of its output features, with candidates for
 * the sub-axes (q/k/v, heads, head_dim) the features may be dealt on. Here the choice is
 * made and recorded: choosing a candidate resolves the linear (its origin) to a column
 * split, or a vocabulary split for an embedding or LM head, and its biases follow it; a
 * linear fed a feature-split activation is recorded as a row split; a count of groups the
 * shard count does not divide is noted for the next round to replicate. Fixed splits (the
 * caller's overrides) are checked here and only take the role their use gives them. This
 * file calls nothing else of the plan; the propagation (shard_propagate.c) and the
 * analysis (shard_analysis.c) call it. */
#include "shard_layout.h"

#include <stdlib.h>
#include <string.h>

int rci_shard_same_cut(int64_t outer_a, int64_t groups_a, int64_t inner_a, int64_t outer_b, int64_t groups_b,
                       int64_t inner_b, int mp)
{
    return outer_a == outer_b && groups_a * inner_a == groups_b * inner_b &&
           (groups_a + mp - 1) / mp * inner_a == (groups_b + mp - 1) / mp * inner_b;
}

void rci_shard_fixed_role(rci_shard_analysis *p, int param, rc_shard_role role)
{
    if (param >= 0 && p->forced[param] && p->spec[param].axis >= 0 && p->spec[param].role == RC_SHARD_REPLICATED)
        p->spec[param].role = role;
}

int rci_shard_set_spec(rci_shard_analysis *p, int param, rc_shard_role role, int axis, int64_t outer, int64_t groups,
                       int64_t inner, int vocab)
{
    if (param >= 0 && p->forced[param] && p->spec[param].axis == axis)
        rci_shard_fixed_role(p, param, role);
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

int rci_shard_new_origin(rci_shard_analysis *p, int param, int axis)
{
    if (p->norig == p->cap_orig) {
        int cap = p->cap_orig ? 2 * p->cap_orig : 64;
        rci_shard_origin *o = realloc(p->orig, (size_t)cap * sizeof *o);
        if (!o)
            return -1;
        p->orig = o;
        p->cap_orig = cap;
    }
    p->orig[p->norig] = (rci_shard_origin){.param = param, .axis = axis};
    return p->norig++;
}

/* Records the resolution of the origins of s with candidate c (vocab: padding allowed). */
static void resolve(rci_shard_analysis *p, const rci_shard_state *s, const rci_shard_cand *c, int vocab)
{
    for (int k = 0; k < s->norig; k++) {
        rci_shard_origin *o = &p->orig[s->orig[k]];
        if (o->resolved)
            continue;
        o->resolved = 1;
        o->vocab = vocab;
        o->outer = c->o_outer;
        o->groups = c->groups;
        o->inner = c->o_inner;
        rci_shard_set_spec(p, o->param, vocab ? RC_SHARD_VOCAB : RC_SHARD_COLUMN, o->axis, o->outer, o->groups,
                           o->inner, vocab);
        for (int b = 0; b < o->nbias; b++)
            rci_shard_set_spec(p, o->bias[b], RC_SHARD_BIAS, o->bias_axis[b], o->outer, o->groups, o->inner,
                               vocab);
    }
}

void rci_shard_choose(rci_shard_analysis *p, rci_shard_state *s, int k, int vocab)
{
    rci_shard_cand c = s->c[k];
    resolve(p, s, &c, vocab);
    s->kind = ST_SPLIT;
    s->ncand = 1;
    s->c[0] = c;
}

int rci_shard_find_cand(const rci_shard_state *s, int axis)
{
    for (int k = 0; k < s->ncand; k++)
        if (s->c[k].axis == axis)
            return k;
    return -1;
}

/* 1 when some origin of the split-any s is already decided */
static int any_resolved(const rci_shard_analysis *p, const rci_shard_state *s)
{
    for (int k = 0; k < s->norig; k++)
        if (p->orig[s->orig[k]].resolved)
            return 1;
    return 0;
}

void rci_shard_resolve_outputs(rci_shard_analysis *p)
{
    for (int k = 0; k < p->nout; k++) {
        rci_shard_state *last = &p->st[p->outs[k]->id];
        int c = last->kind == ST_SPLIT_ANY ? rci_shard_find_cand(last, p->outs[k]->ndim - 1) : -1;
        if (c >= 0 && !any_resolved(p, last))
            rci_shard_choose(p, last, c, 1);
    }
}

/* The candidate the origin's resolution refines, seen in this tensor. */
void rci_shard_finalize_state(const rci_shard_analysis *p, rci_shard_state *s)
{
    if (s->kind != ST_SPLIT_ANY)
        return;
    const rci_shard_origin *o = s->norig ? &p->orig[s->orig[0]] : NULL;
    for (int k = 0; o && o->resolved && k < s->ncand; k++) {
        const rci_shard_cand *c = &s->c[k];
        if (o->outer % c->o_outer || o->inner % c->o_inner)
            continue;
        int64_t a = o->outer / c->o_outer, b = o->inner / c->o_inner;
        if (a * o->groups * b != c->groups)
            continue;
        rci_shard_cand r = {c->axis, c->c_outer * a, o->groups, c->c_inner * b, o->outer, o->inner};
        *s = (rci_shard_state){.kind = ST_SPLIT, .ncand = 1};
        s->c[0] = r;
        return;
    }
    memset(s, 0, sizeof *s);
}

int rci_shard_check_fixed(rc_shard_spec *s, const rc_tensor *param, int mp, rc_error *err)
{
    if (s->axis < 0) {
        *s = (rc_shard_spec){RC_SHARD_REPLICATED, -1, 1, 1, 1, 1, "", 1};
        return 0;
    }
    if (s->axis >= param->ndim || s->outer < 1 || s->groups < 1 || s->inner < 1 ||
        s->outer * s->groups * s->inner != param->shape[s->axis])
        return rc_error_set(err, RC_ERR_ARG, "plan: the override of %s (axis %d, %lld x %lld x %lld) does not fit its shape",
                            param->name, s->axis, (long long)s->outer, (long long)s->groups, (long long)s->inner);
    /* a vocabulary pads, and so does the bias of a head split on it (a plan kept for the
     * next graphs has it padded) */
    int pads = s->role == RC_SHARD_VOCAB || (s->role == RC_SHARD_BIAS && s->padded_groups > s->groups &&
                                             s->padded_groups % mp == 0);
    if (s->groups % mp && !pads)
        return rc_error_set(err, RC_ERR_SHAPE, "plan: the override of %s splits %lld groups, which %d shards do not divide",
                            param->name, (long long)s->groups, mp);
    s->padded_groups = (s->groups + mp - 1) / mp * mp;
    return 0;
}
