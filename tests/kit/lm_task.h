/* lm_task.h - next-token prediction over a stream of token ids, the task the training
 * tests share: example i is the window tok[i T, i T + T) as "ids" and the same window one
 * token later as "targets"; the loss is the model's cross-entropy over every position.
 * The three functions take the lm_task as their user (a test's own task may begin with
 * one and add fields). */
#ifndef REDCO_TESTS_LM_TASK_H
#define REDCO_TESTS_LM_TASK_H

#include "redco/pipeline.h"

typedef struct {
    int T;                        /* tokens per example */
    int64_t ntok;
    int32_t *tok;                 /* ntok ids in [0, 200) */
    rc_model *model;
} lm_task;

/* ntok ids of a learnable stream (mostly the previous id + 1, sometimes a random one) from
 * seed, examples of T tokens; 0, or -1 when memory runs out */
int lm_task_init(lm_task *k, int T, int64_t ntok, uint64_t seed);
void lm_task_free(lm_task *k);

int64_t lm_task_count(int epoch, void *user);
int lm_task_collate(rc_batch *out, const int64_t *ex, int n, void *user, rc_error *err);
rc_tensor *lm_task_loss(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err);

#endif
