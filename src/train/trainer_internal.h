/* trainer_internal.h - the trainer's state, shared by trainer.c and ckpt.c. */
#ifndef REDCO_TRAINER_INTERNAL_H
#define REDCO_TRAINER_INTERNAL_H

#include "run.h"
#include "step.h"
#include "redco/shard.h"

/* A compiled step: the user's loss (and gradients) for one batch shape, built once. */
typedef struct {
    rci_step st;                  /* record, run graph, plan; st.outs[0] is the loss */
    rc_tensor *targets;           /* the first cross-entropy's targets (in st.g): they count
                                     tokens, read from the batch array of their name ... */
    int ignore;                   /* ... except this id */
    int64_t batch_rows;
    int loss_out;                 /* the loss is st.outs[loss_out]: 1 with loss scaling, where
                                     st.outs[0] is the loss x the scale (the batch's array
                                     RCI_LOSS_SCALE) that the gradients are taken of */
} rc_step;

/* the name of the batch array that carries the loss scale into a train step */
#define RCI_LOSS_SCALE "redco.loss_scale"

struct rc_trainer {
    rc_deployer *d;
    rc_collate_fn collate;
    rc_loss_fn loss_fn;
    void *user;
    rc_params *params;
    const rc_model *model;
    uint64_t seed;
    int shuffle;
    rc_step train, eval, eval_tail;
    int mp;                       /* model shards (1: the plain data-parallel path) */
    rc_sharded shards;            /* mp > 1: the plan and this rank's parameter shards */
    int remat;                    /* the fit's rc_train_options.remat */
    rc_shard_spec *specs;         /* mp > 1: how each parameter splits (shards.specs) */
    rc_backend *be;               /* where the state lives and the updates run */
    rc_buffer *local;             /* each parameter's shard, flat f32 (shards.local; mp 1: the
                                     parameters' own buffer); not the trainer's to free */
    int64_t *loff, *lnum;         /* per parameter: element offset and size in local, grad, m, v */
    int64_t local_numel;
    rc_buffer *grad;              /* flat, like local */
    rc_buffer *m, *v;             /* AdamW's moments of local's elements [share_lo, share_lo +
                                     share_n), made by the first fit */
    int zero;                     /* the moments are this rank's share of the data axis's
                                     (rc_train_options.zero; else share_lo 0, share_n all) */
    int64_t share_lo, share_n;
    rc_dtype dtype;               /* the weights' dtype (local's): rc_train_options.dtype */
    rc_buffer *master;            /* 16-bit weights: the f32 master weights of local's elements
                                     [share_lo, share_lo + share_n), laid out like m and v (the
                                     checkpoints' weights); NULL with f32 weights */
    int scaling;                  /* dynamic loss scaling (rc_train_options.loss_scale) */
    double scale;                 /* the loss scale S (1 without scaling) */
    int64_t good_steps;           /* steps with finite gradients since S last changed */
    int64_t skipped;              /* steps skipped for non-finite gradients, this fit */
    int64_t step, opt_step;       /* optimizer steps done (opt_step counts AdamW's bias terms) */
    int epoch;
    int64_t epoch_step;           /* steps done in the current epoch */
    double eval_loss, best_eval;
    int64_t eval_tokens;
    char last_ckpt[256];          /* name of the last complete checkpoint */
    int tail_noted;               /* the epoch-tail note was printed */
    struct rc_predictor *eval_predictor; /* made at the first evaluation with a metric */
};

/* checkpoint-STEP (name NULL) or a named one ("best"), written atomically; rank 0 writes */
int rci_trainer_save(rc_trainer *t, const rc_train_options *o, const char *name, rc_error *err);
/* with model shards: every rank's parameters buffer made whole again (the end of fit) */
int rci_trainer_sync_params(rc_trainer *t, rc_error *err);
/* the final model directory workdir/final */
int rci_trainer_save_final(rc_trainer *t, const rc_train_options *o, rc_error *err);
/* the f32 master share rounded into the 16-bit weights, then (zero) all-gathered over the
 * data axis: every rank's local whole again */
int rci_trainer_round_master(rc_trainer *t, rc_error *err);
/* loads the workdir's last complete checkpoint, if any */
int rci_trainer_resume(rc_trainer *t, const rc_train_options *o, rc_error *err);


#endif
