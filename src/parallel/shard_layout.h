/* shard_layout.h - the layout rules of the tensor-parallel plan (shard_layout.c): how a
 * parameter's split is recorded, how a split-any state collapses to one split, and when
 * two splits agree. Calls nothing else of the plan. */
#ifndef REDCO_SHARD_LAYOUT_H
#define REDCO_SHARD_LAYOUT_H

#include "shard_internal.h"

/* 1 when two splits of one axis give every shard the same elements */
int rci_shard_same_cut(int64_t outer_a, int64_t groups_a, int64_t inner_a, int64_t outer_b, int64_t groups_b,
                       int64_t inner_b, int mp);
/* A fixed split whose role is left to the graph takes the one its use gives it. */
void rci_shard_fixed_role(rci_shard_analysis *p, int param, rc_shard_role role);
/* Records parameter param's split (the first decision stands). Returns -1, noting the
 * parameter in p->fail_param, when mp does not divide the groups and they are no
 * vocabulary (which pads). */
int rci_shard_set_spec(rci_shard_analysis *p, int param, rc_shard_role role, int axis, int64_t outer, int64_t groups,
                       int64_t inner, int vocab);
/* A new column-parallel origin: parameter param split on its output axis. Returns its
 * index, or -1 out of memory. */
int rci_shard_new_origin(rci_shard_analysis *p, int param, int axis);
/* the split-any candidate on `axis`, or -1 */
int rci_shard_find_cand(const rci_shard_state *s, int axis);
/* Collapses a split-any to candidate k, a concrete split, and resolves its origins (their
 * weights and biases get their specs; vocab: a padded vocabulary split). */
void rci_shard_choose(rci_shard_analysis *p, rci_shard_state *s, int k, int vocab);
/* The outputs' split-any states that nothing resolved (the logits as output) split their
 * whole last axis, as a vocabulary. */
void rci_shard_resolve_outputs(rci_shard_analysis *p);
/* A split-any state made concrete by its origin's resolution; replicated when the rci_shard_origin
 * never resolved. Other states are left as they are. */
void rci_shard_finalize_state(const rci_shard_analysis *p, rci_shard_state *s);
/* A caller's override: in range and dividing (vocabularies may pad); axis < 0 keeps the
 * parameter replicated. */
int rci_shard_check_fixed(rc_shard_spec *s, const rc_tensor *param, int mp, rc_error *err);

#endif
