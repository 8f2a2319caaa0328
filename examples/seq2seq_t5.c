/* seq2seq_t5.c - an encoder-decoder (T5) trained on source/target pairs, written as the
 * three functions: collate builds the encoder input, its mask, the decoder input and the
 * targets; loss is the cross-entropy of the decoder's logits; predict returns the arg-max
 * token at every target position, which the Predictor gathers in example order.
 *
 * The task is synthetic so that the answer is known exactly: the target is the source
 * reversed. Tokens are raw ids, no tokenizer:
 *   0 = padding (also T5's decoder start), 1 = end of sequence, 2 .. V-1 = symbols.
 * Example i is drawn from a key folded from i, so any number of examples exist without
 * being stored, and the held-out examples come from another key.
 *
 *   build/seq2seq_t5 [--steps 300] [--symbols 8] [--max-len 8] [--batch 16] [--lr 3e-3]
 *                    [--workdir DIR]
 */
#include "redco/pipeline.h"
#include "redco/predict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PAD = 0, EOS = 1, FIRST_SYMBOL = 2 };

typedef struct {
    rc_model *model;
    int symbols;                  /* distinct symbols; the vocabulary is symbols + 2 */
    int max_len;                  /* longest source (symbols), without the end token */
    int eval;                     /* 1: examples come from the held-out stream */
    int64_t correct, counted;     /* predict's tally: target tokens right / compared */
    int64_t exact, sequences;     /* ... and whole targets right */
} reverse_task;

/* Example i: a source of 2 .. max_len symbols + EOS, and its reversal + EOS. Returns the
 * length with EOS; src and tgt hold max_len + 1 ids. */
static int example_get(const reverse_task *d, int64_t i, int32_t *src, int32_t *tgt)
{
    rc_rng r = rc_rng_fold(rc_rng_new(d->eval ? 2 : 1), (uint64_t)i);
    int n = 2 + (int)(rc_rng_next_u64(&r) % (uint64_t)(d->max_len - 1));
    for (int k = 0; k < n; k++)
        src[k] = FIRST_SYMBOL + (int32_t)(rc_rng_next_u64(&r) % (uint64_t)d->symbols);
    for (int k = 0; k < n; k++)
        tgt[k] = src[n - 1 - k];
    src[n] = tgt[n] = EOS;
    return n + 1;
}

/* ---- the three functions -------------------------------------------------------------- */

/* collate: n example indices -> four arrays of [n, S] (S = max_len + 1):
 *   enc_ids   source ids, padded          x3 x7 x5 EOS PAD PAD
 *   enc_mask  1 on the source, 0 on pads  1  1  1  1   0   0
 *   ids       decoder input: the target shifted right behind the start id (teacher forcing)
 *                                         PAD x5 x7 x3  EOS PAD
 *   targets   what each decoder position predicts, -100 past the end
 *                                         x5  x7 x3 EOS -100 -100 */
static int collate(rc_batch *out, const int64_t *examples, int n, void *user, rc_error *err)
{
    reverse_task *d = user;
    int64_t S = d->max_len + 1;
    int32_t *enc = rc_batch_add(out, "enc_ids", RC_I32, 2, (int64_t[]){n, S});
    float *mask = rc_batch_add(out, "enc_mask", RC_F32, 2, (int64_t[]){n, S});
    int32_t *dec = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, S});
    int32_t *targets = rc_batch_add(out, "targets", RC_I32, 2, (int64_t[]){n, S});
    int32_t *src = malloc((size_t)S * sizeof *src), *tgt = malloc((size_t)S * sizeof *tgt);
    if (!enc || !mask || !dec || !targets || !src || !tgt) {
        free(src), free(tgt);
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    }
    for (int i = 0; i < n; i++) {
        int len = example_get(d, examples[i], src, tgt);
        for (int k = 0; k < S; k++) {
            enc[i * S + k] = k < len ? src[k] : PAD;
            mask[i * S + k] = k < len ? 1.0f : 0.0f;
            dec[i * S + k] = k == 0 ? PAD : k - 1 < len ? tgt[k - 1] : PAD;
            targets[i * S + k] = k < len ? tgt[k] : RC_IGNORE_INDEX;
        }
    }
    free(src), free(tgt);
    return 0;
}

/* The decoder's logits [B, S, V] for a batch from collate. */
static rc_tensor *logits_of(rc_graph *g, const reverse_task *d, const rc_batch *b)
{
    return rc_model_logits(g, d->model, rc_batch_input(g, b, "ids"), rc_batch_input(g, b, "enc_ids"),
                           rc_batch_input(g, b, "enc_mask"));
}

/* loss: mean cross-entropy over the target tokens (the -100 padding is skipped) */
static rc_tensor *loss(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)params, (void)rng, (void)err;
    return rc_cross_entropy(g, logits_of(g, user, b), rc_batch_input(g, b, "targets"), RC_IGNORE_INDEX);
}

/* predict: the arg-max id at each decoder position, [B, S], computed in the graph:
 * the positions where a logit equals its row's maximum, times the ids 0 .. V-1, maxed
 * over the vocabulary (ties take the largest id). Teacher forced: position k sees the
 * true target tokens before it. */
static rc_tensor *predict(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    reverse_task *d = user;
    (void)params, (void)rng, (void)err;
    int64_t V = d->model->config.vocab_size;
    float *ids = malloc((size_t)V * sizeof *ids);
    if (!ids)
        return NULL;
    for (int64_t v = 0; v < V; v++)
        ids[v] = (float)v;
    rc_tensor *logits = logits_of(g, d, b);                                    /* [B, S, V] */
    rc_tensor *is_max = rc_equal(g, logits, rc_max(g, logits, -1, 1));         /* [B, S, V] */
    rc_tensor *vocab = rc_const(g, "vocab_ids", RC_F32, 1, &V, ids);           /* [V] */
    free(ids);
    return rc_max(g, rc_mul(g, is_max, vocab), -1, 0);                         /* [B, S] */
}

/* output: called once per example, in order, with its row of predict's output */
static int output(int64_t example, const float *row, int64_t row_len, void *user, rc_error *err)
{
    (void)err;
    reverse_task *d = user;
    int32_t src[64], tgt[64];
    int len = example_get(d, example, src, tgt), all = 1;
    for (int k = 0; k < len && k < row_len; k++) {
        int right = (int32_t)row[k] == tgt[k];
        d->correct += right;
        all &= right;
    }
    d->counted += len;
    d->exact += all;
    d->sequences++;
    return 0;
}

/* ---- examples per epoch ----------------------------------------------------------------- */

/* examples are made on demand: an "epoch" is just how often the order reshuffles */
static int64_t count_train(int epoch, void *user)
{
    (void)epoch, (void)user;
    return 20000;
}

static int64_t count_eval(int epoch, void *user)
{
    (void)epoch, (void)user;
    return 256;
}

/* Held-out loss (through the trainer) and teacher-forced accuracy (through the Predictor). */
static int evaluate(rc_trainer *t, rc_predictor *p, reverse_task *d, int batch, double *loss_out)
{
    rc_error err = {0};
    int64_t tokens = 0;
    d->eval = 1;
    d->correct = d->counted = d->exact = d->sequences = 0;
    int rc = rc_trainer_eval(t, (rc_examples){count_eval, d}, batch, loss_out, &tokens, &err);
    if (!rc)
        rc = rc_predictor_run(p, count_eval(0, d), batch, &err);
    d->eval = 0;
    if (rc)
        fprintf(stderr, "seq2seq_t5: eval: %s\n", err.msg);
    return rc;
}

/* Free-running greedy decoding of held-out example i (no teacher forcing): T5 encodes the
 * source and decodes from the start id until EOS. Returns 1 when the output is right. */
static int decode_one(reverse_task *d, int64_t i)
{
    int32_t src[64], tgt[64], *out = NULL;
    int64_t n_out = 0;
    rc_error err = {0};
    d->eval = 1;
    int len = example_get(d, i, src, tgt);
    d->eval = 0;
    rc_generate_options o = rc_generate_defaults(d->model);
    o.max_new_tokens = len;
    o.eos_id = EOS;
    if (rc_generate(d->model, src, len, &o, &out, &n_out, &err)) {
        fprintf(stderr, "seq2seq_t5: generate: %s\n", err.msg);
        return 0;
    }
    int right = n_out == len && !memcmp(out, tgt, (size_t)len * sizeof *out);
    printf("  source");
    for (int k = 0; k < len - 1; k++)
        printf(" %d", src[k]);
    printf("  ->");
    for (int k = 0; k < n_out && out[k] != EOS; k++)
        printf(" %d", out[k]);
    printf("  %s\n", right ? "right" : "wrong");
    free(out);
    return right;
}

/* ---- main ------------------------------------------------------------------------------- */

typedef struct {
    int64_t steps;
    const char *workdir;
    int symbols, max_len, batch;
    double lr;
} args;

static int parse_args(int argc, char **argv, args *a)
{
    *a = (args){300, NULL, 8, 8, 16, 3e-3};
    int ok = 1;
    for (int i = 1; ok && i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) ok = 0;
        else if (!strcmp(k, "--steps")) a->steps = atoll(v);
        else if (!strcmp(k, "--workdir")) a->workdir = v;
        else if (!strcmp(k, "--symbols")) a->symbols = atoi(v);
        else if (!strcmp(k, "--max-len")) a->max_len = atoi(v);
        else if (!strcmp(k, "--batch")) a->batch = atoi(v);
        else if (!strcmp(k, "--lr")) a->lr = atof(v);
        else ok = 0;
    }
    if (!ok || a->steps < 1 || a->symbols < 1 || a->max_len < 2 || a->max_len > 62 || a->batch < 1) {
        fprintf(stderr, "usage: seq2seq_t5 [--steps N] [--symbols K] [--max-len L (2..62)] [--batch B]\n"
                        "                  [--lr LR] [--workdir DIR]\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    args a;
    if (parse_args(argc, argv, &a))
        return 2;
    rc_error err = {0};
    reverse_task d = {.symbols = a.symbols, .max_len = a.max_len};
    /* tiny-t5 (2 + 2 layers, d_model 64) with this task's vocabulary and special ids */
    rc_model_config c;
    if (rc_config_preset("tiny-t5", &c, &err) == 0) {
        c.vocab_size = FIRST_SYMBOL + a.symbols;
        c.pad_token_id = c.decoder_start_token_id = PAD;
        c.eos_token_id = EOS;
        d.model = rc_model_from_config(&c, 42, &err);
    }
    rc_deployer_options o = {.seed = 1, .workdir = a.workdir, .verbose = 1};
    rc_deployer *dep = d.model ? rc_deployer_new(&argc, &argv, &o, &err) : NULL;
    rc_trainer *t = dep ? rc_trainer_new(dep, collate, loss, &d, d.model->params, d.model, &err) : NULL;
    rc_predictor *p = t ? rc_predictor_new(dep, collate, predict, output, &d, d.model->params, &err) : NULL;
    if (!p) {
        fprintf(stderr, "seq2seq_t5: %s\n", err.msg);
        return 1;
    }
    int main_rank = rc_deployer_is_main(dep);
    if (main_rank)
        printf("reverse %d..%d of %d symbols; tiny-t5 with vocabulary %d, %lld parameters\n", 2, a.max_len,
               a.symbols, c.vocab_size, (long long)rc_params_numel(d.model->params));

    double before = 0, after = 0, acc_before = 0;
    rc_train_options to = {.steps = a.steps, .batch_size = a.batch, .shuffle = 1, .optimizer = "adamw",
                           .lr = a.lr, .weight_decay = 0.01, .grad_clip = 1.0,
                           .schedule = RC_SCHEDULE_COSINE, .warmup = a.steps / 10,
                           .log_every = a.steps >= 10 ? a.steps / 10 : 1};
    int rc = evaluate(t, p, &d, a.batch, &before);
    acc_before = d.counted ? (double)d.correct / d.counted : 0;
    if (!rc && (rc = rc_trainer_fit(t, &to, (rc_examples){count_train, &d}, NULL, NULL, &err)))
        fprintf(stderr, "seq2seq_t5: %s\n", err.msg);
    if (!rc)
        rc = evaluate(t, p, &d, a.batch, &after);
    if (!rc && main_rank) {
        printf("held-out loss: before %.4f, after %.4f (%.0f%% lower)\n", before, after,
               100.0 * (before - after) / before);
        printf("token accuracy (teacher forced): before %.3f, after %.3f; whole targets right %lld of %lld\n",
               acc_before, (double)d.correct / d.counted, (long long)d.exact, (long long)d.sequences);
        int right = 0;
        for (int i = 0; i < 4; i++)
            right += decode_one(&d, i);
        printf("greedy decoding right: %d of 4\n", right);
    }
    rc_predictor_free(p);
    rc_trainer_free(t);
    rc_deployer_free(dep); /* and MPI, which it started when run under mpirun */
    rc_model_free(d.model);
    return rc ? 1 : 0;
}
