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

#endif
