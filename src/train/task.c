/* task.c - the three functions of the built-in tasks: language modelling over token
 * windows, instruction tuning with the prompt masked out of the loss, and T5 sequence to
 * sequence. */
#include "params.h"
#include "redco/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rc_task {
    rc_model *model;
    struct rc_dataset *data;
    int64_t seq_len;              /* tokens per example (T5: source and target each) */
    int32_t pad;                  /* padding id for inputs */
};

/* the checks of rc_task_new on a filled task */
static int task_check(rc_task *t, rc_error *err)
{
    rc_model *m = t->model;
    int64_t seq_len = t->seq_len;
    rc_data_kind kind = rc_dataset_kind(t->data);
    int t5 = m->config.type == RC_MODEL_T5;
    if (seq_len < 1)
        return rc_error_set(err, RC_ERR_ARG, "task: sequence length %lld", (long long)seq_len);
    if (!t5 && m->config.max_positions && seq_len > m->config.max_positions)
        return rc_error_set(err, RC_ERR_ARG, "task: --seq-len %lld exceeds the model's %d positions",
                            (long long)seq_len, m->config.max_positions);
    if (t5 && kind != RC_DATA_SEQ2SEQ)
        return rc_error_set(err, RC_ERR_ARG, "task: a T5 model trains on {\"source\", \"target\"} .jsonl data");
    if (!t5 && kind == RC_DATA_SEQ2SEQ)
        return rc_error_set(err, RC_ERR_ARG, "task: source/target data needs an encoder-decoder model (t5)");
    if (rc_task_count(0, t) < 1)
        return rc_error_set(err, RC_ERR_ARG, "task: the data has no example of %lld tokens", (long long)seq_len);
    return 0;
}

rc_task *rc_task_new(rc_model *m, struct rc_dataset *data, int64_t seq_len, rc_error *err)
{
    if (!m || !data) {
        rc_error_set(err, RC_ERR_ARG, "task: a model and a dataset are required");
        return NULL;
    }
    rc_task *t = calloc(1, sizeof *t);
    if (!t) {
        rc_error_set(err, RC_ERR_MEMORY, "task: out of memory");
        return NULL;
    }
    t->model = m;
    t->data = data;
    t->seq_len = seq_len;
    t->pad = m->config.pad_token_id >= 0 ? m->config.pad_token_id
           : m->config.eos_token_id >= 0 ? m->config.eos_token_id : 0;
    if (task_check(t, err)) {
        free(t);
        return NULL;
    }
    return t;
}

void rc_task_free(rc_task *t)
{
    free(t);
}

int64_t rc_task_count(int epoch, void *task)
{
    rc_task *t = task;
    (void)epoch;
    if (rc_dataset_kind(t->data) == RC_DATA_LM)
        return rc_dataset_windows(t->data, t->seq_len);
    return rc_dataset_examples(t->data);
}

/* T5: encoder ids and mask from the source, decoder input [start, target...] and targets */
static int collate_seq2seq(rc_task *t, rc_batch *out, const int64_t *ex, int n, rc_error *err)
{
    int64_t T = t->seq_len;
    int32_t *enc = rc_batch_add(out, "enc_ids", RC_I32, 2, (int64_t[]){n, T});
    float *mask = rc_batch_add(out, "enc_mask", RC_F32, 2, (int64_t[]){n, T});
    int32_t *dec = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, T});
    int32_t *tg = rc_batch_add(out, "targets", RC_I32, 2, (int64_t[]){n, T});
    if (!enc || !mask || !dec || !tg)
        return rc_error_set(err, RC_ERR_MEMORY, "collate: out of memory");
    int32_t start = t->model->config.decoder_start_token_id >= 0 ? t->model->config.decoder_start_token_id : t->pad;
    for (int i = 0; i < n; i++) {
        rc_data_example e;
        if (rc_dataset_example(t->data, ex[i], &e, err))
            return -1;
        for (int64_t k = 0; k < T; k++) {
            enc[i * T + k] = k < e.n ? e.ids[k] : t->pad;
            mask[i * T + k] = k < e.n ? 1.0f : 0.0f;
            dec[i * T + k] = k == 0 ? start : k - 1 < e.n_target ? e.target[k - 1] : t->pad;
            tg[i * T + k] = k < e.n_target ? e.target[k] : RC_IGNORE_INDEX;
        }
    }
    return 0;
}

int rc_task_collate(rc_batch *out, const int64_t *ex, int n, void *task, rc_error *err)
{
    rc_task *t = task;
    int64_t T = t->seq_len;
    if (rc_dataset_kind(t->data) == RC_DATA_SEQ2SEQ)
        return collate_seq2seq(t, out, ex, n, err);
    int32_t *ids = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, T});
    int32_t *tg = rc_batch_add(out, "targets", RC_I32, 2, (int64_t[]){n, T});
    if (!ids || !tg)
        return rc_error_set(err, RC_ERR_MEMORY, "collate: out of memory");
    for (int i = 0; i < n; i++) {
        if (rc_dataset_kind(t->data) == RC_DATA_LM) {
            if (rc_dataset_window(t->data, T, ex[i], ids + i * T, tg + i * T, err))
                return -1;
            continue;
        }
        rc_data_example e;
        if (rc_dataset_example(t->data, ex[i], &e, err))
            return -1;
        rc_data_example_pack(&e, T, t->pad, ids + i * T, tg + i * T);
    }
    return 0;
}

rc_tensor *rc_task_loss(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *task, rc_error *err)
{
    rc_task *t = task;
    (void)params, (void)rng, (void)err; /* a failure is the graph's error */
    rc_tensor *enc = NULL, *mask = NULL;
    if (rc_batch_get(b, "enc_ids")) {
        enc = rc_batch_input(g, b, "enc_ids");
        mask = rc_batch_input(g, b, "enc_mask");
    }
    rc_tensor *logits = rc_model_logits(g, t->model, rc_batch_input(g, b, "ids"), enc, mask);
    return rc_cross_entropy(g, logits, rc_batch_input(g, b, "targets"), RC_IGNORE_INDEX);
}
