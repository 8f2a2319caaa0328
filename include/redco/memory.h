/* redco/memory.h - the memory one rank needs to train a model, known before running: the
 * model's graph is recorded and planned with unbound parameters, so nothing of the model's
 * size is allocated (`redco plan` and its test share this one model of the Trainer). */
#ifndef REDCO_MEMORY_H
#define REDCO_MEMORY_H

#include "redco.h"
#include "redco/model.h"
#include "redco/shard.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int dp, mp;                   /* the mesh (0: 1) */
    int64_t batch, seq_len;       /* one replica's micro-batch (>= 1) */
    int zero;                     /* the ZeRO stage (rc_train_options.zero): 0: none; 1:
                                     optimizer state (and master weights) sharded over dp; 2:
                                     the f32 gradients too; 3: the weights too (mp 1 only) */
    int remat;                    /* N > 0: every N-th block recomputed (rc_train_options.remat) */
    int no_dropout;               /* 1: the step without the model's dropout
                                     (rc_train_options.no_dropout) */
    rc_dtype dtype;               /* the weights: RC_F32 (0, default), RC_BF16 or RC_F16 */
    int allow_replicate;          /* as rc_shard_plan, with mp > 1 */
    const rc_shard_override *overrides; /* as rc_train_options, with mp > 1 */
    int n_overrides;
    rc_backend *backend;          /* the device whose kernels' scratch is planned (NULL: the CPU) */
    int from_dir;                 /* the weights are read from a model directory (rc_model_load)
                                     and the run writes its final checkpoint (a workdir): with
                                     model shards or zero 3 a rank reads only its parts, and
                                     fit leaves the weights in final/ (full_copy 0) */
} rc_memory_options;

/* Bytes of one rank (model shard 0 of data-parallel rank 0) during training steps, by the
 * Trainer's own allocations: total = weights + gradients + optimizer + master +
 * activations + scratch = its buffers, the step plan's arena and the backend's scratch.
 * "share" is the rank's 1/dp part of local (the largest, ceil(local / dp)); wb the bytes
 * of an element of the dtype. By stage (zero):
 *
 *            weights             gradients                     optimizer  master (16-bit / f32)
 *   0        wb local            4 local + the step's outputs  8 local    4 local / 0
 *   1        wb local            4 local + the step's outputs  8 share    4 share / 0
 *   2        wb local            4 (share + window) + outputs  8 share    4 share / 0
 *   3        wb share (16-bit;   4 (share + window)            8 share    4 share / 4 share
 *            f32: 0) + gathered
 *
 * Stage 3 keeps no weights outside its share but the gathered slots, and no gradient
 * outputs past the step: each layer's are released once reduce-scattered, so they live in
 * the arena (activations) only while their layer's backward pass runs. */
typedef struct {
    int64_t params;               /* the model's parameter elements */
    int64_t local;                /* the rank's: its model shard's elements */
    int64_t share;                /* the elements its optimizer keeps: ceil(local / dp) with
                                     zero (1, 2 or 3), else local */
    int64_t weights;              /* the weights the rank holds in their dtype: stages 0-2
                                     local x bytes(dtype); stage 3 its share in a 16-bit dtype
                                     (the words the steps gather from; with f32 the master
                                     share is gathered from and counts as master), plus the
                                     gathered slots (`gathered`) */
    int64_t gathered;             /* stage 3: the buffer the step gathers layers into, in the
                                     dtype: one slot per group of layers whose gathers never
                                     overlap, so at most the few largest layers at once (the
                                     trainer's rci_gather numel); else 0 */
    int64_t gradients;            /* the f32 accumulation: stages 0, 1 4 local, stages 2, 3
                                     4 (share + window); stages 0-2 also the step's own
                                     gradient outputs in its arena, local x bytes(dtype);
                                     stage 3 none (they count among the activations) */
    int64_t window;               /* zero 2 or 3 with dp > 1: the reduce-scatter window's
                                     floats, min(2^20, share), else 0 */
    int64_t optimizer;            /* AdamW moments m, v in f32: 8 share */
    int64_t master;               /* f32 master weights: 4 share for a 16-bit dtype, and with
                                     stage 3 for f32 too (what its steps gather); f32 at stages
                                     0-2: 0 */
    int64_t activations;          /* the step's arena, less its gradient outputs at stages 0-2
                                     (stage 3: the arena of the plan that releases each layer's
                                     gradients once complete, rci_plan_estimate_released),
                                     plus the batch's inputs and the graph's constants: the
                                     graph is recorded in the dtype (16-bit activations as the
                                     trainer runs them; f16 with its loss scale) */
    int64_t scratch;              /* the scratch the backend's kernels keep after a step (its
                                     own rule over the step's nodes, in order): on the CPU the
                                     f32 copies of 16-bit nodes (0 for f32), on OpenCL the
                                     16-bit products' f32 copies, the f32 temporaries of
                                     16-bit softmax and losses, reduction partials */
    int64_t arena;                /* the step plan's arena (rc_plan_estimate; stage 3:
                                     rci_plan_estimate_released) */
    int64_t total;
    int64_t full_copy;            /* what a rank holds beyond the total for a while, peak =
                                     total + this: mp > 1 the full weights (in the dtype) while
                                     it takes its shards (the first step's build); zero 3 the
                                     full weights as given to the trainer (until the first fit
                                     takes its share) and gathered back when fit ends, beside
                                     the master, moments, gradient share and 16-bit share (the
                                     steps and slots not yet made, or freed first): what that
                                     exceeds the total by, else 0; 0 with from_dir */
    int64_t sent;                 /* bytes the rank sends over the data axis per optimizer
                                     step of one micro-batch, ring collectives (an all-reduce
                                     of B bytes sends 2 (dp-1)/dp B, a reduce-scatter or an
                                     all-gather (dp-1)/dp B): stage 0 the all-reduce of the f32
                                     gradients, 4 local; stages 1, 2 their reduce-scatter (4
                                     local) and the all-gather of the updated weights in the
                                     dtype (wb local); stage 3 the all-gathers of the layers in
                                     the dtype, each time the step reads a layer no longer in
                                     its slot (forward, and again backward), and the
                                     reduce-scatter of each layer's f32 gradients (4 local);
                                     0 with dp 1. Model-axis collectives are not counted */
    int units;                    /* stage 3: the layers the parameters are gathered in */
    int slots;                    /* stage 3: the slots of the gathered buffer */
    int64_t gathers;              /* stage 3: the layer gathers of one step (per micro-batch) */
    int64_t gathered_elems;       /* stage 3: the elements those gathers bring, per step */
} rc_rank_memory;

/* The memory of one rank for model c under o. Errors name the option or the model
 * (a shard count that divides nothing, as rc_shard_plan). */
int rc_memory_plan(const rc_model_config *c, const rc_memory_options *o, rc_rank_memory *m, rc_error *err);

/* Among the presets of c's family (rc_config_preset_names, less the tests' tiny-*), the one with the most
 * parameters whose rank total (plus full_copy) fits `budget` bytes under o: its name into
 * *name and its figures into m; *name NULL when none fits. */
int rc_memory_largest(const rc_model_config *c, const rc_memory_options *o, int64_t budget, const char **name,
                      rc_rank_memory *m, rc_error *err);

/* Whether a training run fits, before anything is built: m, one rank's memory under o
 * (rc_memory_plan, o->backend the device the rank runs on; NULL: the CPU), plus the full
 * weights it holds while taking its shards, against the device's memory shared by
 * `sharers` processes (rc_deployer_device_sharers). 0 when it fits, or when the device does
 * not say its memory; otherwise an error naming `what` (the model), the rank's need and its
 * parts, the device's share and what to try. */
int rc_memory_fits(const rc_rank_memory *m, const rc_memory_options *o, int sharers, const char *what,
                   rc_error *err);

/* "80GB" (decimal: 80e9), "24GiB" (binary: 24 x 2^30), "512MiB", "1.5TB", "4096" (bytes);
 * units B, kB/KB, MB, GB, TB and KiB, MiB, GiB, TiB, case as written. */
int rc_memory_parse(const char *text, int64_t *bytes, rc_error *err);

#ifdef __cplusplus
}
#endif

#endif
