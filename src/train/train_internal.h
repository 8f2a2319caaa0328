/* train_internal.h - what the pipeline's modules share. */
#ifndef REDCO_TRAIN_INTERNAL_H
#define REDCO_TRAIN_INTERNAL_H

#include "internal.h"
#include "nn.h"
#include "redco/pipeline.h"

/* the flat table behind a params object (allocated, unless released) */
nn_weights *rci_params_weights(rc_params *p);
/* the backend the parameters live on */
rc_backend *rci_params_backend(const rc_params *p);
/* Frees the full buffer while model shards hold the values (leaves then unbound), and
 * gets a zeroed one back for them to be gathered into. */
void rci_params_release(rc_params *p);
int rci_params_restore(rc_params *p);
/* A counter that changes whenever the values may have changed (written, converted, moved,
 * restored, updated by a fit), so that copies taken from them (a Predictor's model shards)
 * know when they are stale. */
void rci_params_touch(rc_params *p);
uint64_t rci_params_version(const rc_params *p);

/* ---- parameters trained on top of frozen ones ------------------------------------------ */
/* LoRA's adapters (a trainer's parameters) on a model whose weights the loss also reads but
 * nobody trains: with model shards those weights are split by the same plan, each adapter
 * with its base weight (B [out, r] like a column-parallel weight's output features, A
 * [r, in] like a row-parallel weight's input features, the other one whole). */
typedef struct {
    rc_params *base;              /* the frozen weights (NULL: none) */
    int n;                        /* adapter k: parameters 2k (A) and 2k + 1 (B) ... */
    const int *base_of;           /* [n] ... sit on base weight base_of[k] */
    int conv1d;                   /* the base weights are Conv1D [in, out] (else Linear [out, in]) */
} rci_frozen;
void rci_params_set_frozen(rc_params *p, const rci_frozen *f);
/* NULL when p has no frozen companion */
const rci_frozen *rci_params_frozen(const rc_params *p);

/* ---- LoRA (lora.c) ------------------------------------------------------------------- */
struct rc_lora;
/* the adapters' leaves in g, indexed by the model's table (out->a and out->b malloc'ed:
 * the caller frees them, also after a failure) */
int rci_lora_leaves(rc_graph *g, struct rc_lora *l, nn_lora *out);
/* adapted modules, and adapter k's base weight (its index in the model's table) */
int rci_lora_count(const struct rc_lora *l);
int rci_lora_base_of(const struct rc_lora *l, int k);
/* the model is going away: the adapters forget it (rc_lora_free then only frees them) */
void rci_lora_detach(struct rc_lora *l);

/* ---- deployer internals ---------------------------------------------------------------- */
const char *rci_deployer_workdir(const rc_deployer *d);
/* log.jsonl (one record per call, written with jansson: {"step": S, "key": value, ...}, a
 * non-finite value written as null) and TensorBoard scalars (finite values only), rank 0
 * only */
int rci_deployer_log(rc_deployer *d, int64_t step, const char *const *keys, const double *values,
                    int n, rc_error *err);
/* removes what a save killed midway leaves in the workdir (ckpt.c's temporary names:
 * .tmp-NAME directories, last_checkpoint.tmp, NAME.old beside a complete NAME, and
 * log.jsonl.tmp); rank 0 calls it when the deployer opens the workdir. Returns how many
 * entries it removed. */
int rci_ckpt_clean(const char *workdir);
/* the name of the workdir's last complete checkpoint (its last_checkpoint pointer) into
 * name; -1 when there is none */
int rci_ckpt_last(const char *workdir, char *name, size_t size);
/* after a resume from the checkpoint of `step`, rank 0: log.jsonl keeps only the records of
 * steps <= step (rewritten through a temporary file and a rename; a torn last line is
 * dropped) and the TensorBoard file marks a restart at step + 1 */
int rci_deployer_log_resume(rc_deployer *d, int64_t step, rc_error *err);
/* At the start of a fit, on every rank: the first fit of a deployer that does not resume
 * refuses a workdir holding an earlier run's checkpoint (a workdir is one run: --resume
 * continues it); an earlier try's records in log.jsonl with no checkpoint are dropped, as
 * a resume from nothing drops them. Later fits (and resumes) pass. */
int rci_deployer_fresh_start(rc_deployer *d, int resume, rc_error *err);
/* progress on rank 0's stderr: a bar redrawn every step on a terminal; otherwise a plain
 * line on the steps marked `tick` (the logging steps and the last) */
void rci_deployer_progress(rc_deployer *d, int64_t step, int64_t total, double loss, double lr,
                          double tokens_per_s, int tick);
void rci_deployer_note(rc_deployer *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
