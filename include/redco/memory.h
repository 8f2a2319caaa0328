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
    int zero;                     /* the ZeRO stage (rc_train_options.zero): 1: optimizer state
                                     (and master weights) sharded over dp; 2: the f32
                                     gradients too; 0: none */
    int remat;                    /* N > 0: every N-th block recomputed (rc_train_options.remat) */
    rc_dtype dtype;               /* the weights: RC_F32 (0, default), RC_BF16 or RC_F16 */
    int allow_replicate;          /* as rc_shard_plan, with mp > 1 */
    const rc_shard_override *overrides; /* as rc_train_options, with mp > 1 */
    int n_overrides;
    rc_backend *backend;          /* the device whose kernels' scratch is planned (NULL: the CPU) */
} rc_memory_options;

/* Bytes of one rank (model shard 0 of data-parallel rank 0) during training steps, by the
 * Trainer's own allocations: total = weights + gradients + optimizer + master +
 * activations + scratch = its buffers, the step plan's arena and the backend's scratch. */
typedef struct {
    int64_t params;               /* the model's parameter elements */
    int64_t local;                /* the rank's: its model shard's elements */
    int64_t share;                /* the elements its optimizer keeps: ceil(local / dp) with
                                     zero (1 or 2), else local */
    int64_t weights;              /* local x bytes(dtype) */
    int64_t gradients;            /* the f32 accumulation buffer, 4 local (zero 2: 4 share + the
                                     reduce-scatter's window, 4 min(2^20, share) with dp > 1),
                                     + the step's own gradient outputs in its arena,
                                     local x bytes(dtype) */
    int64_t window;               /* zero 2 with dp > 1: the window's floats, else 0 */
    int64_t optimizer;            /* AdamW moments m, v in f32: 8 share */
    int64_t master;               /* f32 master weights for a 16-bit dtype: 4 share; f32: 0 */
    int64_t activations;          /* the step's arena less its gradient outputs, plus the
                                     batch's inputs and the graph's constants: the graph is
                                     recorded in the dtype (16-bit activations as the trainer
                                     runs them; f16 with its loss scale) */
    int64_t scratch;              /* the scratch the backend's kernels keep after a step (its
                                     own rule over the step's nodes, in order): on the CPU the
                                     f32 copies of 16-bit nodes (0 for f32), on OpenCL the
                                     16-bit products' f32 copies, the f32 temporaries of
                                     16-bit softmax and losses, reduction partials */
    int64_t arena;                /* the step plan's arena (rc_plan_estimate) */
    int64_t total;
    int64_t full_copy;            /* mp > 1: the full weights (in the dtype) a rank holds while
                                     it takes its shards (the first step's build); peak = total
                                     + this */
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
