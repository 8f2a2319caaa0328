/* shard_internal.h - the data of the tensor-parallel plan: the layout states of
 * activations, the column-parallel origins, the plan being built and the per-input
 * actions it hands to the partitioner. Shared by the plan's parts and by partition.c.
 *
 * The parts, each calling only the ones listed after it (no circle):
 *   shard.c            the public rc_shard_* entry points          -> analysis, layout
 *   shard_analysis.c   rounds over the graph, the plan handed over -> propagate, report, layout
 *   shard_propagate.c  how each op carries a layout to its output  -> report, layout
 *   shard_report.c     the collectives the rci_shard_analysis costs, and errors  -> layout
 *   shard_layout.c     the layout rules: which parameter splits how
 * partition.c uses the finished plan through rci_shard_plan_run. */
#ifndef REDCO_SHARD_INTERNAL_H
#define REDCO_SHARD_INTERNAL_H

#include "internal.h"
#include "redco/shard.h"

enum { MAX_CAND = 6, MAX_ORIG = 4, MAX_BIAS = 4 };

typedef struct {
    int axis;
    int64_t c_outer, groups, c_inner;  /* in the current tensor's axis */
    int64_t o_outer, o_inner;          /* in the origin linear's output features */
} rci_shard_cand;

/* What an activation is on the model axis:
 *   ST_REPLICATED  whole on every rank;
 *   ST_PARTIAL     each rank holds a partial sum (a row-parallel linear's output);
 *   ST_SPLIT_ANY   split by a column-parallel linear whose granularity is not chosen yet:
 *                  the candidates c[] list the axes its features may be split on;
 *   ST_SPLIT       split on one axis (c[0]). */
typedef enum { ST_REPLICATED = 0, ST_PARTIAL, ST_SPLIT_ANY, ST_SPLIT } rci_shard_kind;

typedef struct {
    rci_shard_kind kind;
    int ncand;                   /* ST_SPLIT_ANY: the candidates; ST_SPLIT: 1, the split */
    rci_shard_cand c[MAX_CAND];
    int norig;
    int orig[MAX_ORIG];          /* the column-parallel linears the split comes from */
} rci_shard_state;

/* A column-parallel linear: its weight, output axis, and how the split was resolved. */
typedef struct {
    int param, axis;
    int resolved, vocab;
    int64_t outer, groups, inner;
    int nbias;
    int bias[MAX_BIAS], bias_axis[MAX_BIAS];
} rci_shard_origin;

typedef struct {
    rc_graph *g;
    rc_tensor *const *outs;      /* the outputs the plan serves */
    int nout, last;              /* last: the highest output node id */
    int mp, n;
    rc_tensor *const *params;
    int *param_of;               /* node id -> parameter index, or -1 */
    rci_shard_state *st;                   /* per node id */
    rci_shard_origin *orig;
    int norig, cap_orig;
    rc_shard_spec *spec;
    char *forced;                /* parameters to keep replicated (notes already written) */
    int fail_param;              /* first parameter a split did not divide, or -1 */
    int64_t fail_groups;
    int gqa_param;               /* a key/value projection shared by query groups that does
                                    not divide: replicated by the rules, with a note */
    rc_shard_comm comm;
    char *col_input;             /* node id -> 1 when it feeds a column-parallel linear */
    char *reduced;               /* node id -> 1 once its partial sum has been made whole */
    unsigned char *act;          /* [node id * RC_MAX_SRC + input]: ACT_* for the partitioner */
    int *follow;                 /* node id -> the node whose split a splittable input takes, or -1 */
} rci_shard_analysis;

/* What the partitioner does to input i of a node (bits). */
enum {
    ACT_REDUCE = 1,              /* use the input's whole (all-reduced) version */
    ACT_ENTER = 2,               /* through mp_enter: a column-parallel linear's input */
    ACT_SLICE = 4,               /* a replicated input sliced to this shard's part */
    ACT_GATHER = 8,              /* the input made whole (all-gathered) if it ends up split */
    ACT_ROWCUT = 16              /* a replicated input of a row-parallel linear cut on its
                                    features (a fixed row split fed a whole activation) */
};

/* Runs the analysis (shard_analysis.c); with keep, hands over the plan with every node's
 * final state (split-any states resolved) for the partitioner. */
int rci_shard_plan_run(rc_graph *g, rc_tensor *const *outs, int nout, rc_tensor *const *params, int n, int mp,
                       int allow_replicate, rc_shard_spec *specs, rc_shard_comm *comm, rci_shard_analysis **keep,
                       rc_error *err);
void rci_shard_plan_free(rci_shard_analysis *p);

#endif
