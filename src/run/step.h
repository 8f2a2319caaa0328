/* step.h - one way to build a runnable step from a recorded graph: partition it for the
 * model axis, add the backward pass, plan its memory, bind the parameters. The trainer,
 * the Predictor and generation all build their steps here (step.c). */
#ifndef REDCO_STEP_H
#define REDCO_STEP_H

#include "gather.h"
#include "sharded.h"

typedef struct {
    rc_graph *g;                  /* the global record (the step's own) */
    rc_graph *run;                /* the graph the plan runs: g, or this rank's local graph */
    rc_shard_graph local;         /* with model shards: this rank's share of g */
    rc_tensor **outs;             /* [nout] the outputs in run */
    int nout;
    rc_tensor **grads;            /* with gradients: [n] d(outs[0])/d(parameter i) in run */
    rc_plan *plan;
} rci_step;

/* What a step computes from a record. */
typedef struct {
    rc_tensor *const *outs;       /* [nout] nodes of g; outs[0] the loss when with_grads */
    int nout;
    const int *keep_split;        /* with shards: per output, 1 keeps this rank's part (NULL: none) */
    rc_tensor *const *leaves;     /* [n] parameter leaves of g (NULL where unused), then with
                                     gather and nfrozen LoRA's frozen base weights' */
    int n;
    int with_grads;
    rci_gather *gather;           /* ZeRO stage 3: the parameters' units and schedule are made
                                     here (the caller attaches them), and each gradient's memory
                                     goes once its unit's are complete; else NULL */
    const int64_t *loff, *lnum;   /* with gather: each parameter's place in the local layout,
                                     then each frozen weight's (from split on: gather.h) */
    int nfrozen;                  /* with gather: frozen weights gathered too (their leaves
                                     follow the n parameters'; with shards, in the local graph) */
    int64_t split;
} rci_step_spec;

/* Builds s from record g (which s then owns, also when the build fails): with shards,
 * this rank's graph under their plan; with gradients, those of outs[0] with respect to
 * every parameter; the plan on be over the outputs and gradients, with the model-axis
 * collective when there are shards. */
int rci_step_build(rci_step *s, rc_graph *g, const rci_step_spec *spec, rci_sharded *shards,
                   rc_backend *be, rc_error *err);
void rci_step_free(rci_step *s);

#endif
