/* redco/shard.h - the tensor-parallel plan: how each parameter is split over the model
 * axis, derived from the graph (never from parameter names or layouts).
 *
 * The paper's two rules, stated on dataflow: a linear layer (a matmul whose right operand
 * is a parameter) fed a replicated activation splits its output features (column
 * parallel); the split travels through element-wise ops, reshapes and permutes; where it
 * meets attention (a matmul between activations) it lands on the head axis, so q, k and v
 * keep whole heads; a linear fed a feature-split activation splits its input features
 * (row parallel) and its output is a partial sum, all-reduced before it is needed whole.
 * Embeddings looked up by the token inputs, and heads tied to them, split the vocabulary;
 * norms and the biases of row-parallel layers stay replicated; the biases of column
 * parallel layers split with their outputs. A conv2d whose weight [O, C/groups, KH, KW] is
 * a parameter does the same on the channel axis: fed a whole input, its weight and bias
 * split by output channels (axis 0, RC_SHARD_COLUMN); fed a channel split, its weight by
 * input channels (axis 1, RC_SHARD_ROW), the bias added once after the all-reduce. Grouped
 * convs keep whole groups on each shard (a depthwise conv carries a split), or stay whole
 * with a note when the shards would cut a group.
 *
 * This is the analysis and its report (`redco plan`); executing the split graph is the
 * partitioner's job. */
#ifndef REDCO_SHARD_H
#define REDCO_SHARD_H

#include "redco.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    RC_SHARD_REPLICATED = 0,
    RC_SHARD_COLUMN,             /* a linear's output features */
    RC_SHARD_ROW,                /* a linear's input features; output all-reduced */
    RC_SHARD_VOCAB,              /* embedding rows / LM head vocabulary */
    RC_SHARD_BIAS                /* a column-parallel layer's bias */
} rc_shard_role;

/* How one parameter is split. Its axis `axis` is viewed as [outer, groups, inner] and the
 * groups are dealt out to the model shards in contiguous runs: GPT-2's c_attn [C, 3C] is
 * axis 1 viewed as [3, heads, head_dim] split on heads, so each shard has whole heads of q,
 * k and v. A vocabulary the shard count does not divide is padded to padded_groups. */
typedef struct {
    rc_shard_role role;
    int axis;                    /* -1 when replicated */
    int64_t outer, groups, inner;
    int64_t padded_groups;       /* groups rounded up to a multiple of mp (vocabulary only) */
    char note[160];              /* why a parameter that could split stays replicated */
    int fixed;                   /* set by the caller: an override the plan must follow
                                    (rc_shard_fix), not a split the rules derive */
} rc_shard_spec;

/* What the plan implies for one training step, counted on the forward graph: the
 * all-reduces of partial sums forward (the row-parallel outputs, the vocabulary-parallel
 * embedding and cross-entropy) and, by Megatron's symmetry, the all-reduces of the input
 * gradients of column-parallel layers backward. */
typedef struct {
    int64_t allreduce_fwd, allreduce_bwd;
    double bytes_fwd, bytes_bwd;   /* f32 bytes reduced per rank */
    int64_t allgather_fwd;         /* tensors gathered whole because an op could not use their
                                      split (0 for the built-in models' training; each is a
                                      sum of zero-padded shards, its bytes in bytes_fwd) */
} rc_shard_comm;

/* Derives the split of every parameter in params[0..n) from the graph that computes
 * `out` (a loss or logits) for mp model shards. A dimension mp does not divide is an error
 * listing the offending tensors and the shard counts that would work, unless
 * allow_replicate, which replicates those weights and says so in their notes.
 * Entries of specs with `fixed` set are overrides: the plan takes them as given and fits
 * the rest around them (a fixed split a linear's output features gives a column-parallel
 * layer, its input features a row-parallel one; activations that arrive in another form
 * are gathered or cut, never silently wrong). Every other entry is written. */
int rc_shard_plan(rc_graph *g, rc_tensor *out, rc_tensor *const *params, int n, int mp,
                  int allow_replicate, rc_shard_spec *specs, rc_shard_comm *comm, rc_error *err);

/* ---- the partitioner: one rank's share of the graph --------------------------------------- */

typedef struct {
    rc_graph *g;                 /* the rank's local graph */
    rc_tensor *out;              /* outs[0] */
    rc_tensor **outs;            /* [nout] the outputs' counterparts: whole on every rank, or
                                    this rank's part where the caller keeps the split */
    int nout;
    rc_tensor **params;          /* [n] the local parameter leaves (shards), unbound */
} rc_shard_graph;

/* Plans (as rc_shard_plan) and builds rank `rank`'s graph of the global graph computing
 * `out`. Inputs keep their names and global shapes; parameters become their shards. The
 * model-parallel ops need the plan's collective callback (rc_plan_set_collective) over the
 * model axis when the local graph runs. Differentiate the local graph with rc_backward:
 * the gradients are the shards' gradients. */
int rc_shard_partition(rc_graph *g, rc_tensor *out, rc_tensor *const *params, int n, int mp, int rank,
                       int allow_replicate, rc_shard_spec *specs, rc_shard_graph *local, rc_error *err);
/* Several outputs (a step of generation: the logits and the new key/value cache). An
 * output the plan splits is gathered whole unless keep_split[k] (keep_split may be NULL);
 * a kept split is this rank's part, of the shape its local node has. Inputs flagged
 * RC_FLAG_SPLITTABLE that only meet a split through a concatenation (a cache joined to the
 * new keys) become leaves of this rank's part: bind the part a kept output gave. */
int rc_shard_partition_outputs(rc_graph *g, rc_tensor *const *outs, int nout, const int *keep_split,
                               rc_tensor *const *params, int n, int mp, int rank, int allow_replicate,
                               rc_shard_spec *specs, rc_shard_graph *local, rc_error *err);
void rc_shard_graph_free(rc_shard_graph *local);
/* parameter `param`'s shard for `rank` copied out of its full tensor, and back into one */
void rc_shard_take(const rc_shard_spec *s, const rc_tensor *param, int mp, int rank, const float *full,
                   float *local_data);
void rc_shard_put(const rc_shard_spec *s, const rc_tensor *param, int mp, int rank, const float *local_data,
                  float *full);

/* An override for one parameter: axis -1 keeps it replicated; otherwise it splits `axis`
 * into `groups` contiguous runs per shard (0: the axis's whole extent, i.e. features;
 * heads when the axis holds heads of head_dim). The axis's extent must be a multiple of
 * groups and groups of mp (a 0-D or 1-D parameter splits like a bias). Returns 0, or -1
 * with err naming the parameter and the extent at fault. The role (column, row,
 * vocabulary, bias) follows from how the graph uses it. */
int rc_shard_fix(rc_shard_spec *s, const rc_tensor *param, int axis, int64_t groups, int mp, rc_error *err);

/* A user's override of one parameter's split, by name (rc_train_options, `--shard`). */
typedef struct {
    const char *param;            /* the parameter's name */
    int axis;                     /* the axis to split; -1 keeps it replicated */
    int64_t groups;               /* the runs the axis is dealt in (0: its extent) */
} rc_shard_override;

/* rc_shard_fix for each override, on the spec of the parameter leaf of that name among
 * params[0..n); an unknown name is an error listing none of the rest. */
int rc_shard_apply(rc_shard_spec *specs, rc_tensor *const *params, int n, const rc_shard_override *o,
                   int n_overrides, int mp, rc_error *err);

/* The shape of parameter `param` on one shard (the padded vocabulary included). */
void rc_shard_local_shape(const rc_shard_spec *s, const rc_tensor *param, int mp, int64_t *shape);
const char *rc_shard_role_name(rc_shard_role r);

#ifdef __cplusplus
}
#endif

#endif
