/* shard_analysis.c - runs the tensor-parallel analysis over a graph and hands the rci_shard_analysis
 * over. One round visits every node up to the outputs in order and applies its op's rule
 * (shard_propagate.c), then settles what only the whole graph decides: outputs nothing
 * resolved split their vocabulary, the column-parallel inputs are marked, and the
 * gathers and backward all-reduces are counted (shard_report.c). A round that meets a
 * parameter the shard count does not divide replicates it, with a note, and runs again,
 * since the layers after it may change role; with none left, the plan is done, or an
 * error lists the parameters and the counts that would work. With keep, the plan goes to
 * the partitioner (partition.c) with every state final. Called by shard.c and
 * partition.c; calls the propagation, the report and the layout rules. */
#include "shard_layout.h"
#include "shard_propagate.h"
#include "shard_report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const rc_shard_spec replicated_spec = {RC_SHARD_REPLICATED, -1, 1, 1, 1, 1, "", 0};

/* clears what one round of analysis builds */
static void plan_reset(rci_shard_analysis *p)
{
    int size = rc_graph_size(p->g);
    memset(p->st, 0, (size_t)size * sizeof *p->st);
    memset(p->col_input, 0, (size_t)size);
    memset(p->reduced, 0, (size_t)size);
    memset(p->act, 0, (size_t)size * RC_MAX_SRC);
    for (int i = 0; i < p->n; i++)
        if (!p->forced[i])
            p->spec[i] = replicated_spec;
    p->norig = 0;
    p->fail_param = -1;
    p->gqa_param = -1;
    memset(&p->comm, 0, sizeof p->comm);
    for (int i = 0; i < size; i++)
        p->follow[i] = -1;
}

/* One round over the graph. Returns the parameter that must be replicated before the
 * next round (a GQA key/value projection first), or -1 when the plan is complete. */
static int analyse(rci_shard_analysis *p)
{
    plan_reset(p);
    for (int i = 0; i <= p->last; i++)
        rci_shard_propagate(p, rc_graph_node(p->g, i));
    rci_shard_resolve_outputs(p);
    rci_shard_mark_column_inputs(p);
    rci_shard_count_gathers(p);
    rci_shard_count_backward(p);
    return p->gqa_param >= 0 ? p->gqa_param : p->fail_param;
}

/* Rounds until every split divides, each replicating one parameter that did not (noted in
 * its spec); the ones whose groups did not divide are listed in u. */
static void analyse_rounds(rci_shard_analysis *p, rci_shard_undivided *u)
{
    for (int round = 0; round <= p->n; round++) {
        int bad = analyse(p);
        if (bad < 0)
            break;
        rc_shard_spec *s = &p->spec[bad];
        p->forced[bad] = 1;
        *s = replicated_spec;
        if (p->gqa_param >= 0) {
            snprintf(s->note, sizeof s->note,
                     "%lld key/value heads shared by the query heads do not divide into %d shards: replicated",
                     (long long)p->fail_groups, p->mp);
            continue;
        }
        rci_shard_undivided_add(u, p->params[bad]->name, p->fail_groups);
        /* downstream layers may change role in the next round */
        snprintf(s->note, sizeof s->note, "%lld groups do not divide into %d shards: replicated",
                 (long long)p->fail_groups, p->mp);
    }
}

void rci_shard_plan_free(rci_shard_analysis *p)
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
    free(p->forced);
    free(p);
}

/* The plan with its per-node tables; NULL (err set) out of memory. */
static rci_shard_analysis *plan_new(rc_graph *g, rc_tensor *const *outs, int nout, rc_tensor *const *params, int n, int mp,
                      rc_shard_spec *specs, rc_error *err)
{
    int size = rc_graph_size(g);
    rci_shard_analysis *p = calloc(1, sizeof *p);
    char *forced = calloc((size_t)n + 1, 1);
    if (!p || !forced) {
        free(p);
        free(forced);
        rc_error_set(err, RC_ERR_MEMORY, "plan: out of memory");
        return NULL;
    }
    *p = (rci_shard_analysis){.g = g, .mp = mp, .n = n, .params = params, .spec = specs, .forced = forced,
                .outs = outs, .nout = nout};
    for (int k = 0; k < nout; k++)
        p->last = outs[k]->id > p->last ? outs[k]->id : p->last;
    p->param_of = malloc((size_t)size * sizeof *p->param_of);
    p->st = malloc((size_t)size * sizeof *p->st);
    p->col_input = malloc((size_t)size);
    p->reduced = malloc((size_t)size);
    p->act = malloc((size_t)size * RC_MAX_SRC);
    p->follow = malloc((size_t)size * sizeof *p->follow);
    if (!p->param_of || !p->st || !p->col_input || !p->reduced || !p->act || !p->follow) {
        rci_shard_plan_free(p);
        rc_error_set(err, RC_ERR_MEMORY, "plan: out of memory");
        return NULL;
    }
    for (int i = 0; i < size; i++)
        p->param_of[i] = -1;
    return p;
}

/* Finds the parameters among the graph's nodes and takes the caller's fixed splits. */
static int take_params(rci_shard_analysis *p, rc_error *err)
{
    for (int i = 0; i < p->n; i++) {
        if (!p->params[i]) /* a parameter the graph does not use */
            continue;
        p->param_of[p->params[i]->id] = i;
        if (p->spec[i].fixed) {
            p->forced[i] = 1;
            if (rci_shard_check_fixed(&p->spec[i], p->params[i], p->mp, err))
                return -1;
        }
    }
    return 0;
}

/* every rci_shard_state final, for the partitioner */
static void finalize_states(rci_shard_analysis *p)
{
    for (int i = 0; i <= p->last; i++)
        rci_shard_finalize_state(p, &p->st[i]);
    for (int i = 0; i <= p->last; i++) /* splittable inputs take their consumer's split */
        if (p->follow[i] >= 0 && p->st[p->follow[i]].kind == ST_SPLIT)
            p->st[i] = p->st[p->follow[i]];
}

int rci_shard_plan_run(rc_graph *g, rc_tensor *const *outs, int nout, rc_tensor *const *params, int n, int mp,
                       int allow_replicate, rc_shard_spec *specs, rc_shard_comm *comm, rci_shard_analysis **keep,
                       rc_error *err)
{
    int ok_outs = outs && nout >= 1;
    for (int k = 0; ok_outs && k < nout; k++)
        ok_outs = outs[k] != NULL;
    if (!g || rc_graph_error(g) || !ok_outs || mp < 1 || n < 0)
        return rc_error_set(err, RC_ERR_ARG, "plan: a graph without errors, an output and mp >= 1 are needed%s%s",
                            g && rc_graph_error(g) ? ": " : "", g && rc_graph_error(g) ? rc_graph_error(g) : "");
    rci_shard_analysis *p = plan_new(g, outs, nout, params, n, mp, specs, err);
    if (!p)
        return -1;
    rci_shard_undivided u = {0};
    int rc = take_params(p, err);
    if (!rc)
        analyse_rounds(p, &u);
    if (!rc && u.n && !allow_replicate)
        rc = rci_shard_undivided_error(&u, mp, err);
    if (!rc && comm)
        *comm = p->comm;
    if (!rc && keep) {
        finalize_states(p);
        *keep = p;
        return 0;
    }
    rci_shard_plan_free(p);
    return rc ? -1 : 0;
}
