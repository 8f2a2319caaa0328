/* lm_task.c - next-token prediction over a stream of token ids (lm_task.h). */
#include "lm_task.h"

#include <stdlib.h>

int lm_task_init(lm_task *k, int T, int64_t ntok, uint64_t seed)
{
    *k = (lm_task){T, ntok, malloc((size_t)ntok * sizeof *k->tok), NULL};
    if (!k->tok)
        return -1;
    rc_rng r = rc_rng_new(seed);
    for (int64_t i = 0; i < ntok; i++)
        k->tok[i] = i && rc_rng_uniform(&r) < 0.8 ? (k->tok[i - 1] + 1) % 200 : (int32_t)(rc_rng_next_u64(&r) % 200);
    return 0;
}

void lm_task_free(lm_task *k)
{
    free(k->tok);
    k->tok = NULL;
}

int64_t lm_task_count(int epoch, void *user)
{
    const lm_task *k = user;
    (void)epoch;
    return (k->ntok - 1) / k->T;
}

int lm_task_collate(rc_batch *out, const int64_t *ex, int n, void *user, rc_error *err)
{
    const lm_task *k = user;
    int T = k->T;
    int32_t *ids = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, T});
    int32_t *tg = rc_batch_add(out, "targets", RC_I32, 2, (int64_t[]){n, T});
    if (!ids || !tg)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int i = 0; i < n; i++)
        for (int t = 0; t < T; t++) {
            ids[i * T + t] = k->tok[ex[i] * T + t];
            tg[i * T + t] = k->tok[ex[i] * T + t + 1];
        }
    return 0;
}

rc_tensor *lm_task_loss(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    const lm_task *k = user;
    (void)p, (void)rng, (void)err;
    rc_tensor *logits = rc_model_logits(g, k->model, rc_batch_input(g, b, "ids"), NULL, NULL);
    return rc_cross_entropy(g, logits, rc_batch_input(g, b, "targets"), RC_IGNORE_INDEX);
}
