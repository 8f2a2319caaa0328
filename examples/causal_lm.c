/* causal_lm.c - GPT-2-style language modelling on a text file, written as the three
 * functions.
 *
 * The corpus is tokenized with the real GPT-2 tokenizer and cut into windows of T + 1
 * tokens; example i is window i. collate reads windows, loss is the next-token
 * cross-entropy of a small GPT-2, and the Trainer does the rest (shuffling, batches, data
 * parallelism under mpirun, checkpoints in --workdir). The last windows are held out: their
 * loss is measured before and after training, and the trained model continues a prompt.
 *
 *   build/causal_lm [--steps 200] [--data data/moby_dick.txt] [--tokenizer data/gpt2]
 *                   [--model tiny-gpt2] [--batch 8] [--seq-len 32] [--lr 3e-3] [--workdir DIR]
 */
#include "redco/data.h"
#include "redco/pipeline.h"
#include "redco/predict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The user's data, handed to the three functions as `user`. */
typedef struct {
    rc_model *model;
    rc_dataset *data;             /* the token stream of the corpus */
    int64_t T;                    /* tokens per window */
    int64_t n_train, n_eval;      /* windows [0, n_train) train; the next n_eval are held out */
    int eval;                     /* 1 while the held-out windows are evaluated */
} lm;

/* ---- the three functions -------------------------------------------------------------- */

/* collate: n window indices -> ids [n, T] (the window's first T tokens) and targets [n, T]
 * (each token's successor). */
static int collate(rc_batch *out, const int64_t *examples, int n, void *user, rc_error *err)
{
    lm *d = user;
    int64_t T = d->T;
    int32_t *ids = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, T});
    int32_t *targets = rc_batch_add(out, "targets", RC_I32, 2, (int64_t[]){n, T});
    if (!ids || !targets)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's ids and targets");
    for (int i = 0; i < n; i++) { /* a failure says why (the trainer prints it) */
        int64_t window = examples[i] + (d->eval ? d->n_train : 0);
        if (rc_dataset_window(d->data, T, window, ids + i * T, targets + i * T, err))
            return -1;
    }
    return 0;
}

/* loss: the mean next-token cross-entropy, recorded once for the whole (global) batch;
 * the trainer adds the backward graph and splits the batch over the processes. */
static rc_tensor *loss(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    lm *d = user;
    (void)params, (void)rng, (void)err; /* the built-in model reads its own parameters; no dropout */
    rc_tensor *logits = rc_model_logits(g, d->model, rc_batch_input(g, b, "ids"), NULL, NULL); /* [B, T, V] */
    return rc_cross_entropy(g, logits, rc_batch_input(g, b, "targets"), RC_IGNORE_INDEX);
}

/* predict: for a language model, prediction is generation. rc_generate runs the model one
 * token at a time with a key/value cache; sampling with a fixed seed (temperature 0.8,
 * top-k 40) gives the same text on every run and machine. */
static int predict(rc_model *m, const rc_tokenizer *tok, const char *prompt)
{
    rc_error err = {0};
    int32_t *ids = NULL, *out = NULL;
    int64_t n = 0, n_out = 0;
    char *text = NULL;
    size_t len = 0;
    rc_generate_options o = rc_generate_defaults(m);
    o.max_new_tokens = 24;
    o.temperature = 0.8;
    o.top_k = 40;
    o.seed = 7;
    int rc = rc_tokenizer_encode(tok, prompt, strlen(prompt), 0, &ids, &n, &err);
    if (!rc)
        rc = rc_generate(m, ids, n, &o, &out, &n_out, &err);
    if (!rc)
        rc = rc_tokenizer_decode(tok, out, n_out, 1, &text, &len, &err);
    if (rc)
        fprintf(stderr, "causal_lm: generate: %s\n", err.msg);
    else
        printf("sample: %s|%s\n", prompt, text);
    free(ids), free(out), free(text);
    return rc;
}

/* ---- examples per epoch ----------------------------------------------------------------- */

static int64_t count_train(int epoch, void *user)
{
    (void)epoch;
    return ((lm *)user)->n_train;
}

static int64_t count_eval(int epoch, void *user)
{
    (void)epoch;
    return ((lm *)user)->n_eval;
}

/* The mean loss over the held-out windows (collate reads them while d->eval is set). */
static int evaluate(rc_trainer *t, lm *d, int batch, double *loss_out)
{
    rc_error err = {0};
    int64_t tokens = 0;
    d->eval = 1;
    int rc = rc_trainer_eval(t, (rc_examples){count_eval, d}, batch, loss_out, &tokens, &err);
    d->eval = 0;
    if (rc)
        fprintf(stderr, "causal_lm: eval: %s\n", err.msg);
    return rc;
}

/* ---- main ------------------------------------------------------------------------------- */

typedef struct {
    int64_t steps;
    const char *data, *tokenizer, *model, *workdir;
    int batch, seq_len;
    double lr;
} args;

static int parse_args(int argc, char **argv, args *a)
{
    *a = (args){200, "data/moby_dick.txt", "data/gpt2", "tiny-gpt2", NULL, 8, 32, 3e-3};
    int ok = 1;
    for (int i = 1; ok && i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) ok = 0;
        else if (!strcmp(k, "--steps")) a->steps = atoll(v);
        else if (!strcmp(k, "--data")) a->data = v;
        else if (!strcmp(k, "--tokenizer")) a->tokenizer = v;
        else if (!strcmp(k, "--model")) a->model = v;
        else if (!strcmp(k, "--workdir")) a->workdir = v;
        else if (!strcmp(k, "--batch")) a->batch = atoi(v);
        else if (!strcmp(k, "--seq-len")) a->seq_len = atoi(v);
        else if (!strcmp(k, "--lr")) a->lr = atof(v);
        else ok = 0;
    }
    if (!ok || a->steps < 1 || a->batch < 1 || a->seq_len < 1) {
        fprintf(stderr, "usage: causal_lm [--steps N] [--data FILE] [--tokenizer DIR] [--model PRESET]\n"
                        "                 [--batch B] [--seq-len T] [--lr LR] [--workdir DIR]\n");
        return -1;
    }
    return 0;
}

/* A preset architecture with the tokenizer's vocabulary: tiny-gpt2 has 256 ids, GPT-2's
 * tokenizer 50257, so the embedding (tied with the output layer) is resized. */
static rc_model *model_for(const char *preset, const rc_tokenizer *tok, rc_error *err)
{
    rc_model_config c;
    if (rc_config_preset(preset, &c, err))
        return NULL;
    c.vocab_size = (int)rc_tokenizer_vocab_size(tok);
    c.bos_token_id = c.eos_token_id = rc_tokenizer_eos(tok); /* <|endoftext|> */
    return rc_model_from_config(&c, 42, err);
}

int main(int argc, char **argv)
{
    args a;
    if (parse_args(argc, argv, &a))
        return 2;
    rc_error err = {0};
    lm d = {.T = a.seq_len};
    rc_tokenizer *tok = rc_tokenizer_load(a.tokenizer, &err);
    rc_dataset_opts dopt = {.tokenizer = tok, .tokenizer_path = a.tokenizer};
    if (tok)
        d.data = rc_dataset_open(a.data, &dopt, &err); /* tokens cached beside the file */
    if (d.data)
        d.model = model_for(a.model, tok, &err);
    rc_deployer_options o = {.seed = 1, .workdir = a.workdir, .verbose = 1};
    rc_deployer *dep = d.model ? rc_deployer_new(&argc, &argv, &o, &err) : NULL;
    rc_trainer *t = dep ? rc_trainer_new(dep, collate, loss, &d, d.model->params, d.model, &err) : NULL;
    if (!t) {
        fprintf(stderr, "causal_lm: %s\n", err.msg);
        return 1;
    }
    /* hold out 5% of the windows (at least one batch, at most 8 batches) */
    int64_t windows = rc_dataset_windows(d.data, d.T);
    d.n_eval = windows / 20 / a.batch * a.batch;
    d.n_eval = d.n_eval < a.batch ? a.batch : d.n_eval > 8 * a.batch ? 8 * a.batch : d.n_eval;
    d.n_train = windows - d.n_eval;
    if (d.n_train < a.batch) {
        fprintf(stderr, "causal_lm: %s has %lld windows of %lld tokens; too few\n", a.data,
                (long long)windows, (long long)d.T);
        return 1;
    }
    if (rc_deployer_is_main(dep))
        printf("%s: %lld tokens, %lld train + %lld held-out windows of %lld; model %s, %lld parameters\n",
               a.data, (long long)rc_dataset_tokens(d.data), (long long)d.n_train, (long long)d.n_eval,
               (long long)d.T, a.model, (long long)rc_params_numel(d.model->params));

    double before = 0, after = 0;
    rc_train_options to = {.steps = a.steps, .batch_size = a.batch, .shuffle = 1, .optimizer = "adamw",
                           .lr = a.lr, .weight_decay = 0.01, .grad_clip = 1.0,
                           .schedule = RC_SCHEDULE_COSINE, .warmup = a.steps / 10,
                           .log_every = a.steps >= 10 ? a.steps / 10 : 1, .tokenizer_dir = a.tokenizer};
    int rc = evaluate(t, &d, a.batch, &before);
    if (!rc && (rc = rc_trainer_fit(t, &to, (rc_examples){count_train, &d}, NULL, NULL, &err)))
        fprintf(stderr, "causal_lm: %s\n", err.msg);
    if (!rc)
        rc = evaluate(t, &d, a.batch, &after);
    if (!rc && rc_deployer_is_main(dep)) {
        printf("held-out loss: before %.4f, after %.4f (%.0f%% lower)\n", before, after,
               100.0 * (before - after) / before);
        rc = predict(d.model, tok, "Call me Ishmael. Some years ago");
    }
    rc_trainer_free(t);
    rc_deployer_free(dep); /* and MPI, which it started when run under mpirun */
    rc_model_free(d.model);
    rc_dataset_close(d.data);
    rc_tokenizer_free(tok);
    return rc ? 1 : 0;
}
