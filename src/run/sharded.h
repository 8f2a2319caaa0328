/* sharded.h - running graphs over the model shards outside the training step: the
 * Predictor and generation (sharded.c). */
#ifndef REDCO_SHARDED_H
#define REDCO_SHARDED_H

#include "params.h"
#include "redco/dist.h"
#include "redco/shard.h"

typedef struct {
    const rc_mesh *mesh;          /* the model axis: mesh->mp shards, this rank mesh->mp_rank */
    rc_params *params;
    int allow_replicate;
    const rc_shard_override *overrides; /* the user's splits for the first plan */
    int n_overrides;
    rc_shard_spec *specs;         /* [n] the plan; NULL until the first graph */
    rc_buffer *local;             /* the shards, flat f32 */
    int64_t *off;                 /* parameter i's shard at element off[i] of local */
    int64_t bytes;                /* the shards' bytes (taken here) */
    int owned;                    /* specs, local and off are this object's (not a trainer's) */
    uint64_t version;             /* rci_params_version of the weights the shards were taken from */
    /* LoRA (rci_params_frozen of params): the frozen base weights' shards, planned with the
     * adapters (specs[n ..) after params' n), flat like local */
    rc_buffer *frozen_local;
    int64_t *frozen_off;
} rci_sharded;

void rci_sharded_init(rci_sharded *s, const rc_mesh *mesh, rc_params *params, int allow_replicate);
/* Runs on a trainer's plan and shards (which stay the trainer's and must outlive s); with
 * LoRA also on its frozen base shards (NULL, NULL without). */
void rci_sharded_use(rci_sharded *s, const rc_shard_spec *specs, rc_buffer *local, const int64_t *off,
                     rc_buffer *frozen_local, const int64_t *frozen_off);
void rci_sharded_free(rci_sharded *s);
/* Takes the shards again when they are this object's and the full weights changed since
 * they were taken (written by the user, updated by a fit): a Predictor made before training
 * predicts with the trained weights. */
int rci_sharded_refresh(rci_sharded *s, rc_error *err);

/* Shards of the weights w in one flat buffer: parameter i's at off[i], num[i] floats (num
 * may be NULL); returns the total floats. */
int64_t rci_sharded_layout(const rc_shard_spec *specs, const rci_nn_weights *w, int mp, int64_t *off, int64_t *num);
/* Every parameter's shard for `rank` copied from the full weights of p into local (at
 * element off[i]), through host memory a parameter at a time: from p's buffer, or from the
 * file its values wait in (rci_params_set_source), never all of them at once. */
int rci_sharded_take(const rc_shard_spec *specs, rc_params *p, int mp, int rank, rc_buffer *local,
                     const int64_t *off, rc_error *err);
/* specs = plan, every entry fixed: a later graph follows the plan of the first. */
void rci_sharded_fix(rc_shard_spec *specs, const rc_shard_spec *plan, int n);

/* This rank's graph of the global graph g computing outs (see rc_shard_partition_outputs),
 * with leaves[i] the leaf of parameter i in g (NULL or a leaf the outputs do not use when
 * unused): the first call plans (with s's overrides) and takes the shards from the full
 * weights, later calls follow that plan. The local parameters are bound to the shards;
 * the caller frees sg. */
int rci_sharded_partition(rci_sharded *s, rc_graph *g, rc_tensor *const *outs, int nout, const int *keep_split,
                          rc_tensor *const *leaves, rc_shard_graph *sg, rc_error *err);

#endif
