/* run.h - the run room's internals that training, inference and pipelines share: the
 * deployer's workdir, its log and progress (the workdir's files: workdir.h). */
#ifndef REDCO_RUN_H
#define REDCO_RUN_H

#include "internal.h"
#include "redco/pipeline.h"

/* ---- deployer internals ---------------------------------------------------------------- */
const char *rci_deployer_workdir(const rc_deployer *d);
/* log.jsonl (one record per call, written with jansson: {"step": S, "key": value, ...}, a
 * non-finite value written as null) and TensorBoard scalars (finite values only), rank 0
 * only */
int rci_deployer_log(rc_deployer *d, int64_t step, const char *const *keys, const double *values,
                    int n, rc_error *err);
/* after a resume from the checkpoint of `step`, rank 0: log.jsonl keeps only the records of
 * steps <= step (rewritten through a temporary file and a rename; a torn last line is
 * dropped) and the TensorBoard file marks a restart at step + 1 */
int rci_deployer_log_resume(rc_deployer *d, int64_t step, rc_error *err);
/* At the start of a fit, on every rank: the first fit of a deployer that does not resume
 * refuses a workdir holding an earlier run's checkpoint (a workdir is one run: --resume
 * continues it); an earlier try's records in log.jsonl with no checkpoint are dropped, as
 * a resume from nothing drops them. Later fits (and resumes) pass. */
int rci_deployer_fresh_start(rc_deployer *d, int resume, rc_error *err);
/* On every rank, once a fit's checks passed and its state is built: rank 0 makes the
 * workdir, opens log.jsonl and the TensorBoard events and writes run_config.json (the
 * options' run_config). Until then a run leaves nothing in the file system: a run refused
 * for bad input makes no workdir. Later calls pass. */
int rci_deployer_open_workdir(rc_deployer *d, rc_error *err);
/* progress on rank 0's stderr: a bar redrawn every step on a terminal (one line: the bar,
 * step, loss, lr, rate and ETA); otherwise a plain line on the steps marked `tick` (the
 * logging steps and the last). rate is in unit ("tok/s", "ex/s"). */
void rci_deployer_progress(rc_deployer *d, int64_t step, int64_t total, double loss, double lr, double rate,
                          const char *unit, int tick);
void rci_deployer_note(rc_deployer *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

uint64_t rci_deployer_seed(const rc_deployer *d);
/* Parameters a trainer or predictor (`who`) is made over that have no values yet get
 * RC_INIT_AUTO's draws from the deployer's seed (rci_params_init_missing: the same on every
 * rank and mesh shape), with a note naming them. 0, or -1 with err set. */
int rci_deployer_init_params(rc_deployer *d, rc_params *p, const char *who, rc_error *err);

/* ---- the user's functions (batch.c) ------------------------------------------------------ */
/* A user's function failed: err = "WHAT: the reason it gave in why" (why's code), or
 * "WHAT (it gave no reason)" when it set none; WHAT from the printf-style format. -1. */
int rci_user_failed(rc_error *err, const rc_error *why, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
