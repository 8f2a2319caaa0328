/* ckpt.h - training checkpoints (ckpt.c): a view of the training state that the trainer
 * lends, written to and read back from the workdir's checkpoint directories (workdir.h
 * names them). ckpt.c never sees the trainer: only buffers, their layout and the mesh. */
#ifndef REDCO_CKPT_H
#define REDCO_CKPT_H

#include "params.h"
#include "run.h"
#include "redco/shard.h"

/* The tensors this rank holds of the training state. The local layout is this rank's
 * model shard of every parameter, one after the other (all of each parameter with one
 * shard). */
typedef struct {
    rc_deployer *d;               /* its mesh (model and data axes) and its workdir */
    const rci_nn_weights *table;      /* every parameter's name and global shape */
    const rc_shard_spec *specs;   /* with model shards (mesh mp > 1): each parameter's split */
    const int64_t *off, *num;     /* per parameter: element offset and count in the local layout */
    rc_buffer *weights;           /* f32: the weights in the local layout, or with 16-bit
                                     training the f32 master, laid out like the moments */
    int master;                   /* 1: weights is the f32 master */
    rc_buffer *m, *v;             /* AdamW's moments of local elements [share_lo, share_lo + share_n) */
    int zero;                     /* the moments and master are this rank's data-axis share */
    int64_t share_lo, share_n;
    const rc_model_config *config; /* a built-in model's, written as config.json; or NULL */
} rci_ckpt_state;

/* The counters of trainer_state.json. */
typedef struct {
    int64_t step, opt_step;       /* optimizer steps done; AdamW's step count */
    int epoch;
    int64_t epoch_step;           /* steps done in the current epoch */
    uint64_t seed;
    double best;                  /* the score best/ was kept by (INFINITY: none yet) */
    rc_dtype dtype;               /* the weights the steps read */
    int scaling;                  /* dynamic loss scaling: scale and good_steps are kept */
    double scale;
    int64_t good_steps;
} rci_ckpt_counters;

/* workdir/checkpoint-STEP (name NULL; then last_checkpoint points at it) or workdir/NAME
 * ("best"): config.json, model.safetensors, optimizer.safetensors, trainer_state.json and
 * the tokenizer files of o->tokenizer_dir, written whole then published. Every rank calls
 * it (tensors are gathered from the shards and shares); rank 0 writes; all agree on the
 * outcome. Without a workdir nothing is written. */
int rci_ckpt_save(const rci_ckpt_state *s, const rci_ckpt_counters *c, const rc_train_options *o,
                  const char *name, rc_error *err);
/* workdir/final: config.json, model.safetensors and the tokenizer files. */
int rci_ckpt_save_final(const rci_ckpt_state *s, const rc_train_options *o, rc_error *err);
/* Loads the workdir's last complete checkpoint into the state's buffers and c (whose seed,
 * scaling and scale come in as this run's, checked against and continued from the file),
 * its name into name. Returns 1 when it resumed, 0 when there is no checkpoint (a note,
 * and the log's records go: every step runs again), -1 with err set. Collective. */
int rci_ckpt_resume(const rci_ckpt_state *s, rci_ckpt_counters *c, const rc_train_options *o, char *name,
                    size_t size, rc_error *err);
/* With model shards or zero 3 (the parameters' buffer released while they train): params'
 * values back at the end of fit. With `final` (the final checkpoint was just written) they
 * wait in its model file, read when first needed (every rank must see the workdir's final/,
 * and no LoRA base); else the full buffer is made whole again from every rank's shards and
 * shares. Collective. */
int rci_ckpt_gather_params(const rci_ckpt_state *s, rc_params *params, int final, rc_error *err);

#endif
