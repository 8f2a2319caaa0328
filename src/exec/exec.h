/* exec.h - what the executor (plan.c) offers the rooms above beyond the public API. */
#ifndef REDCO_EXEC_H
#define REDCO_EXEC_H

#include "redco.h"

/* The graph a plan runs, and whether node t is one of the plan's nodes. */
const rc_graph *rci_plan_graph(const rc_plan *p);
int rci_plan_has(const rc_plan *p, const rc_tensor *t);

/* The plan's execution order: its number of positions and the node at each (leaves and
 * views included: every node the outputs need, in the graph's creation order), and the
 * position of node t (-1: not in the plan). */
int rci_plan_size(const rc_plan *p);
rc_tensor *rci_plan_node(const rc_plan *p, int pos);
int rci_plan_pos(const rc_plan *p, const rc_tensor *t);

/* Events: during rc_plan_run, fn(ctx, k, err) is called for event k when the run reaches
 * position at[k] (in [0, rci_plan_size(p)]), before the node there runs; at[k] ==
 * rci_plan_size(p): after the last node, before the run's final wait. at[] must be
 * ascending (events at one position fire in index order). A non-zero return stops the run
 * with -1 (err as fn set it, prefixed with nothing). n = 0 removes the events. The arrays are
 * copied. Returns 0, or -1 with err set (at not ascending or out of range).
 * Events fire at their position whether or not the node there owns memory (leaves and views
 * included). As with the model-axis collective, the run does not wait for the kernels
 * before an event: work fn puts on the plan's backend is ordered after them. With timing on
 * (rc_plan_set_timing), event time is not counted as kernel time. ZeRO stage 3 gathers
 * parameters in events just before the nodes that read them, and reduce-scatters each
 * layer's gradients in events right after they are computed. */
typedef int (*rci_plan_event_fn)(void *ctx, int k, rc_error *err);
int rci_plan_set_events(rc_plan *p, const int *at, int n, rci_plan_event_fn fn, void *ctx, rc_error *err);

/* rc_plan_new_on, where output i's memory may be reused once node release_after[i] (a node of g that
 * the outputs need, at or after output i's storage's last writer/reader) has run: its values are readable
 * (rc_plan_memory, rc_plan_read) only by events at positions up to the one right after that
 * node; release_after NULL, or a NULL entry, keeps that output to the end as
 * rc_plan_new_on does. A release node before the storage's last reader counts as that reader;
 * an output that shares its storage with a kept output (a view of it) is kept too; a leaf
 * output's memory is not the plan's and is always kept. */
rc_plan *rci_plan_new_released(rc_backend *be, rc_graph *g, rc_tensor *const *outputs, int n,
                               rc_tensor *const *release_after, rc_error *err);
/* The plan rci_plan_new_released would make (release_after may be NULL), estimated: its
 * order (rci_plan_size, rci_plan_node) and its memory planner's figures
 * (rc_plan_get_stats), nothing allocated; it cannot run or be read. */
rc_plan *rci_plan_new_estimate(rc_graph *g, rc_tensor *const *outputs, int n, rc_tensor *const *release_after,
                               rc_error *err);

#endif
