/* gather.c - ZeRO stage 3's schedule (gather.h): units of parameters from the graph, their
 * visits in a plan's order, slots in one gathered buffer, and the plan events that gather
 * each visit's unit (the next one started while the current computes) and scatter each
 * unit's gradients once they are complete. */
#include "gather.h"
#include "exec.h"
#include "internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const rc_tensor *storage_of(const rc_tensor *t)
{
    return t->view_src ? t->view_src : t;
}

/* a node the plan runs (leaves and views hold memory, they do not run) */
static int runs(const rc_tensor *t)
{
    return t->op != RC_OP_LEAF && !t->view_src;
}

/* param_of[id] = i for the leaf of parameter i, else -1: [graph size] */
static int *params_by_id(const rc_graph *g, rc_tensor *const *leaves, int np)
{
    int n = rc_graph_size(g);
    int *of = malloc(((size_t)n + 1) * sizeof *of);
    for (int i = 0; of && i < n; i++)
        of[i] = -1;
    for (int i = 0; of && i < np; i++)
        if (leaves[i] && leaves[i]->id < n)
            of[leaves[i]->id] = i;
    return of;
}

void rci_gather_free(rci_gather *z)
{
    if (!z)
        return;
    rci_gather_drain(z, NULL);
    for (int u = 0; z->lo && u < z->nunit; u++) {
        free(z->lo[u]);
        free(z->hi[u]);
    }
    free(z->lo);
    free(z->hi);
    free(z->nrange);
    free(z->ntrained);
    free(z->unit);
    free(z->at);
    free(z->release);
    free(z->visit_unit);
    free(z->visit_start);
    free(z->visit_end);
    free(z->visit_gathers);
    free(z->slot_at);
    free(z->slot_numel);
    free(z->slot);
    free(z->event_at);
    free(z->event_what);
    free(z->pending);
    free(z->leaves);
    memset(z, 0, sizeof *z);
}

/* ---- units ---------------------------------------------------------------------------- */

/* first[i]: the id of the first node reading parameter i (INT64_MAX: none); seg[i] its segment */
static void first_readers(const rc_graph *g, const int *param_of, int np, int64_t *first, int *seg)
{
    for (int i = 0; i < np; i++) {
        first[i] = INT64_MAX;
        seg[i] = 0;
    }
    for (int id = 0; id < rc_graph_size(g); id++) {
        const rc_tensor *t = rc_graph_node(g, id);
        for (int s = 0; runs(t) && s < t->nsrc; s++) {
            int i = t->src[s] ? param_of[storage_of(t->src[s])->id] : -1;
            if (i >= 0 && first[i] == INT64_MAX) {
                first[i] = id;
                seg[i] = t->segment;
            }
        }
    }
}

/* idx[0..n) ordered by key[idx] (ties keep their order): a few hundred parameters at most */
static void sort_by(int *idx, int n, const int64_t *key)
{
    for (int j = 1; j < n; j++) {
        int i = idx[j], k = j;
        for (; k > 0 && key[idx[k - 1]] > key[i]; k--)
            idx[k] = idx[k - 1];
        idx[k] = i;
    }
}

/* unit u's parameters' local ranges, merged where contiguous, and each parameter's offset
 * in the unit (in local order, so merged ranges are contiguous in the slot too) */
static int unit_ranges(rci_gather *z, int u, const int64_t *loff, const int64_t *lnum, int *tmp)
{
    int k = 0;
    for (int i = 0; i < z->np; i++)
        if (z->unit[i] == u)
            tmp[k++] = i;
    sort_by(tmp, k, loff);
    z->lo[u] = malloc(((size_t)k + 1) * sizeof **z->lo);
    z->hi[u] = malloc(((size_t)k + 1) * sizeof **z->hi);
    if (!z->lo[u] || !z->hi[u])
        return -1;
    int64_t at = 0;
    for (int j = 0; j < k; j++) {
        int i = tmp[j], r = z->nrange[u];
        z->at[i] = at;
        at += lnum[i];
        if (r && z->hi[u][r - 1] == loff[i] && loff[i] != z->split)
            z->hi[u][r - 1] += lnum[i];
        else {
            z->lo[u][r] = loff[i];
            z->hi[u][r] = loff[i] + lnum[i];
            z->nrange[u]++;
        }
        if (loff[i] < z->split)
            z->ntrained[u] = z->nrange[u];
    }
    return 0;
}

/* parameters in order of first read cut into units: one per recomputation segment, else
 * up to the largest parameter's size */
static void cut_units(rci_gather *z, const int *order, const int *seg, const int64_t *lnum)
{
    int64_t most = 0, in_unit = 0;
    for (int i = 0; i < z->np; i++)
        most = lnum[i] > most ? lnum[i] : most;
    int prev_seg = -1;
    z->nunit = 0;
    for (int j = 0; j < z->np; j++) {
        int i = order[j];
        int fresh = z->nunit == 0 || seg[i] != prev_seg || (seg[i] == 0 && in_unit + lnum[i] > most);
        if (fresh) {
            z->nunit++;
            in_unit = 0;
        }
        z->unit[i] = z->nunit - 1;
        in_unit += lnum[i];
        prev_seg = seg[i];
    }
}

/* the node of unit u's gradients created last (each unit's gradients are complete after it) */
static void release_nodes(rci_gather *z, rc_tensor *const *grads)
{
    rc_tensor **last = calloc((size_t)z->nunit + 1, sizeof *last);
    for (int i = 0; last && i < z->np; i++) {
        rc_tensor *r = grads[i] ? (rc_tensor *)storage_of(grads[i]) : NULL;
        int u = z->unit[i];
        if (r && (!last[u] || r->id > last[u]->id))
            last[u] = r;
    }
    for (int i = 0; last && i < z->np; i++)
        z->release[i] = last[z->unit[i]];
    free(last);
}

int rci_gather_units(rci_gather *z, const rc_graph *g, rc_tensor *const *leaves, rc_tensor *const *grads, int np,
                     const int64_t *loff, const int64_t *lnum, int64_t split, rc_error *err)
{
    memset(z, 0, sizeof *z);
    z->np = np;
    z->split = split;
    int *param_of = params_by_id(g, leaves, np);
    int64_t *first = malloc(((size_t)np + 1) * sizeof *first);
    int *seg = malloc(((size_t)np + 1) * sizeof *seg);
    int *order = malloc(((size_t)np + 1) * sizeof *order);
    z->unit = malloc(((size_t)np + 1) * sizeof *z->unit);
    z->at = calloc((size_t)np + 1, sizeof *z->at);
    z->release = calloc((size_t)np + 1, sizeof *z->release);
    int rc = param_of && first && seg && order && z->unit && z->at && z->release ? 0 : -1;
    if (!rc) {
        first_readers(g, param_of, np, first, seg);
        for (int i = 0; i < np; i++)
            order[i] = i;
        sort_by(order, np, first);
        cut_units(z, order, seg, lnum);
        z->nrange = calloc((size_t)z->nunit + 1, sizeof *z->nrange);
        z->ntrained = calloc((size_t)z->nunit + 1, sizeof *z->ntrained);
        z->lo = calloc((size_t)z->nunit + 1, sizeof *z->lo);
        z->hi = calloc((size_t)z->nunit + 1, sizeof *z->hi);
        rc = z->nrange && z->ntrained && z->lo && z->hi ? 0 : -1;
    }
    for (int u = 0; !rc && u < z->nunit; u++)
        rc = unit_ranges(z, u, loff, lnum, order);
    if (!rc && grads)
        release_nodes(z, grads);
    free(param_of);
    free(first);
    free(seg);
    free(order);
    if (rc) {
        rci_gather_free(z);
        return rc_error_set(err, RC_ERR_MEMORY, "zero 3: out of memory for the units of %d parameters", np);
    }
    return 0;
}

/* ---- visits, slots, events ------------------------------------------------------------ */

/* the elements of unit u's parameters */
static int64_t unit_numel(const rci_gather *z, int u)
{
    int64_t n = 0;
    for (int r = 0; r < z->nrange[u]; r++)
        n += z->hi[u][r] - z->lo[u][r];
    return n;
}

/* appends visit (u, pos) or extends the open one; -1 out of memory */
static int visit_add(rci_gather *z, int *cap, int u, int pos)
{
    int k = z->nvisit;
    if (k && z->visit_unit[k - 1] == u) {
        z->visit_end[k - 1] = pos;
        return 0;
    }
    if (k == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        int *a = realloc(z->visit_unit, (size_t)*cap * sizeof *a);
        if (a)
            z->visit_unit = a;
        int *b = a ? realloc(z->visit_start, (size_t)*cap * sizeof *b) : NULL;
        if (b)
            z->visit_start = b;
        int *c = b ? realloc(z->visit_end, (size_t)*cap * sizeof *c) : NULL;
        if (!c)
            return -1;
        z->visit_end = c;
    }
    z->visit_unit[k] = u;
    z->visit_start[k] = z->visit_end[k] = pos;
    z->nvisit++;
    return 0;
}

/* the reads of parameters in the run's order, as visits */
static int find_visits(rci_gather *z, rc_tensor *const *order, int n, const int *param_of)
{
    int cap = 0;
    for (int pos = 0; pos < n; pos++) {
        const rc_tensor *t = order[pos];
        for (int s = 0; runs(t) && s < t->nsrc; s++) {
            int i = t->src[s] ? param_of[storage_of(t->src[s])->id] : -1;
            if (i >= 0 && visit_add(z, &cap, z->unit[i], pos))
                return -1;
        }
    }
    return 0;
}

/* visit k holds its slot from the start of the visit before it (its gather's start) to its end */
static int overlap(const rci_gather *z, int k, int j)
{
    int k0 = z->visit_start[k > 0 ? k - 1 : 0], j0 = z->visit_start[j > 0 ? j - 1 : 0];
    return k0 <= z->visit_end[j] && j0 <= z->visit_end[k];
}

/* 1 when unit u may share slot s: no visit of u overlaps a visit of another unit there */
static int slot_free(const rci_gather *z, int u, int s)
{
    for (int k = 0; k < z->nvisit; k++) {
        if (z->visit_unit[k] != u)
            continue;
        for (int j = 0; j < z->nvisit; j++) {
            int w = z->visit_unit[j];
            if (w != u && z->slot[w] == s && overlap(z, k, j))
                return 0;
        }
    }
    return 1;
}

/* greedy colouring of units (in order of first visit) into slots, then the slots' places */
static void assign_slots(rci_gather *z)
{
    for (int u = 0; u < z->nunit; u++)
        z->slot[u] = -1;
    z->nslot = 0;
    for (int k = 0; k < z->nvisit; k++) {
        int u = z->visit_unit[k], s = 0;
        if (z->slot[u] >= 0)
            continue;
        while (s < z->nslot && !slot_free(z, u, s))
            s++;
        if (s == z->nslot)
            z->slot_numel[z->nslot++] = 0;
        z->slot[u] = s;
    }
    for (int u = 0; u < z->nunit; u++)
        if (z->slot[u] >= 0 && unit_numel(z, u) > z->slot_numel[z->slot[u]])
            z->slot_numel[z->slot[u]] = unit_numel(z, u);
    z->numel = 0;
    for (int s = 0; s < z->nslot; s++) {
        z->slot_at[s] = z->numel;
        z->numel += (z->slot_numel[s] + 31) / 32 * 32; /* each slot starts on 32 elements */
    }
    /* a visit gathers unless its unit was the last in its slot (and so is still there) */
    for (int k = 0; k < z->nvisit; k++) {
        int u = z->visit_unit[k], prev = -1;
        for (int j = k - 1; j >= 0 && prev < 0; j--)
            if (z->slot[z->visit_unit[j]] == z->slot[u])
                prev = j;
        z->visit_gathers[k] = prev < 0 || z->visit_unit[prev] != u;
    }
}

/* the events in position order: each unit's scatter right after its release node, before
 * any visit starting there; each visit at its start */
static int make_events(rci_gather *z, int n_order, const int *pos_of)
{
    int n = 0, cap = z->nvisit + z->nunit + 1;
    z->event_at = malloc((size_t)cap * sizeof *z->event_at);
    z->event_what = malloc((size_t)cap * sizeof *z->event_what);
    int *scatter_at = malloc(((size_t)z->nunit + 1) * sizeof *scatter_at);
    if (!z->event_at || !z->event_what || !scatter_at) {
        free(scatter_at);
        return -1;
    }
    for (int u = 0; u < z->nunit; u++)
        scatter_at[u] = -1;
    for (int i = 0; i < z->np; i++)
        if (z->release[i])
            scatter_at[z->unit[i]] = pos_of[z->release[i]->id] + 1;
    for (int pos = 0, k = 0; pos <= n_order; pos++) {
        for (int u = 0; u < z->nunit; u++)
            if (scatter_at[u] == pos) {
                z->event_at[n] = pos;
                z->event_what[n++] = -1 - u;
            }
        for (; k < z->nvisit && z->visit_start[k] == pos; k++) {
            z->event_at[n] = pos;
            z->event_what[n++] = k;
        }
    }
    z->nevent = n;
    free(scatter_at);
    return 0;
}

int rci_gather_schedule(rci_gather *z, const rc_graph *g, rc_tensor *const *order, int n_order,
                        rc_tensor *const *leaves, rc_error *err)
{
    int *param_of = params_by_id(g, leaves, z->np), *pos_of = malloc(((size_t)rc_graph_size(g) + 1) * sizeof *pos_of);
    for (int i = 0; pos_of && i < rc_graph_size(g); i++)
        pos_of[i] = -1;
    for (int k = 0; pos_of && k < n_order; k++)
        pos_of[order[k]->id] = k;
    for (int i = 0; pos_of && i < z->np; i++)
        if (z->release[i] && pos_of[z->release[i]->id] < 0)
            z->release[i] = NULL; /* (a gradient the run does not compute) */
    int rc = param_of && pos_of ? find_visits(z, order, n_order, param_of) : -1;
    size_t nu = (size_t)z->nunit + 1, nv = (size_t)z->nvisit + 1;
    if (!rc) {
        z->slot = malloc(nu * sizeof *z->slot);
        z->slot_at = calloc(nu, sizeof *z->slot_at);
        z->slot_numel = calloc(nu, sizeof *z->slot_numel);
        z->visit_gathers = calloc(nv, sizeof *z->visit_gathers);
        z->pending = calloc(nv, sizeof *z->pending);
        z->leaves = malloc(((size_t)z->np + 1) * sizeof *z->leaves);
        rc = z->slot && z->slot_at && z->slot_numel && z->visit_gathers && z->pending && z->leaves ? 0 : -1;
    }
    if (!rc) {
        memcpy(z->leaves, leaves, (size_t)z->np * sizeof *z->leaves);
        assign_slots(z);
        rc = make_events(z, n_order, pos_of);
    }
    free(param_of);
    free(pos_of);
    if (rc)
        return rc_error_set(err, RC_ERR_MEMORY, "zero 3: out of memory for the schedule of %d units", z->nunit);
    return 0;
}

rc_plan *rci_gather_plan(rci_gather *z, rc_backend *be, rc_graph *run, rc_tensor *const *outs, int nplan, int nout,
                         const rci_gather_params *gp, rc_error *err)
{
    rc_tensor **grads = gp->grads ? calloc((size_t)gp->np + 1, sizeof *grads) : NULL; /* the frozen: none */
    if (grads)
        memcpy(grads, gp->grads, (size_t)gp->n * sizeof *grads);
    int rc = gp->grads && !grads ? rc_error_set(err, RC_ERR_MEMORY, "zero 3: out of memory")
             : rci_gather_units(z, run, gp->leaves, grads, gp->np, gp->loff, gp->lnum, gp->split, err);
    free(grads);
    rc_tensor **release = rc ? NULL : calloc((size_t)nplan + 1, sizeof *release);
    if (!rc && !release)
        rc = rc_error_set(err, RC_ERR_MEMORY, "zero 3: out of memory");
    for (int i = 0; !rc && gp->grads && i < gp->n; i++)
        release[nout + i] = z->release[i];
    rc_plan *p = rc ? NULL : be ? rci_plan_new_released(be, run, outs, nplan, release, err)
                                : rci_plan_new_estimate(run, outs, nplan, release, err);
    int n = p ? rci_plan_size(p) : 0;
    rc_tensor **order = p ? realloc(release, ((size_t)n + 1) * sizeof *order) : NULL;
    if (!order)
        free(release);
    for (int k = 0; order && k < n; k++)
        order[k] = rci_plan_node(p, k);
    rc = !p ? -1 : !order ? rc_error_set(err, RC_ERR_MEMORY, "zero 3: out of memory")
                          : rci_gather_schedule(z, run, order, n, gp->leaves, err);
    free(order);
    if (rc) {
        rc_plan_free(p);
        return NULL;
    }
    return p;
}

/* ---- running ---------------------------------------------------------------------------- */

/* starts the gathers of visit k's unit into its slot (unless it is still there) */
static int visit_start(rci_gather *z, int k, rc_error *err)
{
    const rci_gather_run *r = &z->run;
    int u = z->visit_unit[k];
    if (!z->visit_gathers[k] || z->pending[k])
        return 0;
    if (!(z->pending[k] = calloc((size_t)z->nrange[u] + 1, sizeof **z->pending)))
        return rc_error_set(err, RC_ERR_MEMORY, "zero 3: out of memory");
    size_t es = rc_dtype_size(r->dtype);
    int64_t at = z->slot_at[z->slot[u]];
    for (int j = 0; j < z->nrange[u]; j++) {
        int frozen = z->lo[u][j] >= z->split; /* from the frozen weights' shares */
        int64_t base = frozen ? z->split : 0;
        z->pending[k][j] = rci_comm_gather_range_start(r->dp, frozen ? r->frozen : r->share, 0, r->gathered,
                                                       (size_t)at * es, frozen ? r->frozen_numel : r->numel,
                                                       z->lo[u][j] - base, z->hi[u][j] - base, r->dtype, err);
        if (!z->pending[k][j])
            return rci_error_prefix(err, "zero 3: gathering unit %d", u);
        at += z->hi[u][j] - z->lo[u][j];
    }
    return 0;
}

static int visit_wait(rci_gather *z, int k, rc_error *err)
{
    int rc = 0;
    for (int j = 0; z->pending[k] && j < z->nrange[z->visit_unit[k]]; j++) {
        rc_error e = {0};
        if (rci_comm_pending_wait(z->pending[k][j], &e) && !rc) {
            rc = -1;
            if (err)
                *err = e;
        }
    }
    free(z->pending[k]);
    z->pending[k] = NULL;
    return rc;
}

static int on_event(void *ctx, int e, rc_error *err)
{
    rci_gather *z = ctx;
    int what = z->event_what[e];
    if (what < 0) {
        int u = -1 - what;
        return z->run.scatter ? z->run.scatter(z->run.ctx, z->lo[u], z->hi[u], z->ntrained[u], err) : 0;
    }
    if (what == 0 && visit_start(z, 0, err))
        return -1;
    if (visit_wait(z, what, err))
        return -1;
    return what + 1 < z->nvisit ? visit_start(z, what + 1, err) : 0;
}

int rci_gather_attach(rci_gather *z, rc_plan *p, const rci_gather_run *run, rc_error *err)
{
    rc_tensor *const *leaves = z->leaves;
    z->run = *run;
    size_t es = rc_dtype_size(run->dtype);
    for (int i = 0; i < z->np; i++) {
        int u = z->unit[i];
        if (!leaves[i] || z->slot[u] < 0 || !rci_plan_has(p, leaves[i]))
            continue;
        if (rc_plan_bind(p, leaves[i], run->gathered, (size_t)(z->slot_at[z->slot[u]] + z->at[i]) * es, err))
            return rci_error_prefix(err, "zero 3");
    }
    return rci_plan_set_events(p, z->event_at, z->nevent, on_event, z, err);
}

int rci_gather_drain(rci_gather *z, rc_error *err)
{
    int rc = 0;
    for (int k = 0; z->pending && k < z->nvisit; k++)
        if (z->pending[k] && visit_wait(z, k, err))
            rc = -1;
    return rc;
}

int64_t rci_gather_elements(const rci_gather *z)
{
    int64_t n = 0;
    for (int k = 0; k < z->nvisit; k++)
        n += z->visit_gathers[k] ? unit_numel(z, z->visit_unit[k]) : 0;
    return n;
}
