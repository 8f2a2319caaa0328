/* infer.h - what the inference room offers the trainer beyond the public API. */
#ifndef REDCO_INFER_H
#define REDCO_INFER_H

#include "redco/predict.h"
#include "redco/shard.h"
#include "gather.h"

/* the eval predictor runs on the trainer's plan and shards (and LoRA's frozen base shards) */
void rci_predictor_use_shards(struct rc_predictor *p, const rc_shard_spec *specs, rc_buffer *local,
                              const int64_t *off, rc_buffer *frozen_local, const int64_t *frozen_off);
/* the trainer's zero 3: the eval predictor gathers the weights from the data axis' shares
 * layer by layer, as the train step does (share.gathered and share.scatter are not used) */
void rci_predictor_use_gather(struct rc_predictor *p, const rci_gather_run *share);

/* a token's scaled logit, or its probability, and its id: generate's sampling work */
typedef struct {
    double v;
    int32_t id;
} rci_scored;

/* one sampled token of logits l [V] under o's temperature (> 0), top-k and top-p, drawn
 * with key; work: V entries (generate.c's sampling, for tests) */
int32_t rci_pick_sample(const float *l, int64_t V, const rc_generate_options *o, rc_rng key, rci_scored *work);

#endif
