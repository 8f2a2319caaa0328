/* instruction_tuning.c - fine-tuning a GPT-2-style model on prompt/completion pairs, with
 * the prompt masked out of the loss, written as the three functions.
 *
 * Each line of the .jsonl data is {"prompt": ..., "completion": ...}; example i is line i.
 * The model reads prompt + completion + <|endoftext|> but is only trained to predict the
 * completion and the end token: the targets of prompt positions are -100, which the
 * cross-entropy skips. Without --data a small synthetic set is written to a temporary file
 * (word reversal and addition), so the example runs as is. At the end the model answers a
 * few held-out prompts; a model this small trained for seconds mostly learns what answers
 * look like (the masked loss falls from ln(50257) to about the answers' own entropy), not
 * yet how they depend on the prompt: read the answers as a demo of generation.
 *
 *   build/instruction_tuning [--steps 150] [--data FILE.jsonl] [--tokenizer data/gpt2]
 *                            [--model tiny-gpt2] [--batch 8] [--seq-len 24] [--lr 3e-3]
 *                            [--workdir DIR]
 */
#include "redco/data.h"
#include "redco/pipeline.h"
#include "redco/predict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    rc_model *model;
    rc_dataset *data;             /* the examples: ids and a loss mask each */
    int64_t T;                    /* tokens per packed example */
    int32_t pad;                  /* input id after an example's end */
    int64_t n_train, n_eval;      /* examples [0, n_train) train; the last n_eval are held out */
    int eval;                     /* 1 while the held-out examples are evaluated */
} instruct;

/* ---- the three functions -------------------------------------------------------------- */

/* collate: n example indices -> ids [n, T] and targets [n, T]. rc_data_example_pack puts
 * the example's tokens at the start of the row, shifts them by one for the targets and
 * writes -100 where the next token is part of the prompt or past the end:
 *   ids      P0 P1 P2 C0 C1 E  pad pad
 *   targets  -- -- C0 C1 E  -- --  --       (-- = -100, not in the loss) */
static int collate(rc_batch *out, const int64_t *examples, int n, void *user, rc_error *err)
{
    instruct *d = user;
    int64_t T = d->T;
    int32_t *ids = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, T});
    int32_t *targets = rc_batch_add(out, "targets", RC_I32, 2, (int64_t[]){n, T});
    if (!ids || !targets)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's ids and targets");
    for (int i = 0; i < n; i++) { /* a failure says why (the trainer prints it) */
        rc_data_example e;
        if (rc_dataset_example(d->data, examples[i] + (d->eval ? d->n_train : 0), &e, err))
            return -1;
        rc_data_example_pack(&e, T, d->pad, ids + i * T, targets + i * T);
    }
    return 0;
}

/* loss: cross-entropy over the completion tokens only. The mean is over the targets that
 * are not -100, so a batch's loss does not depend on how long its prompts are. */
static rc_tensor *loss(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    instruct *d = user;
    (void)params, (void)rng, (void)err;
    rc_tensor *logits = rc_model_logits(g, d->model, rc_batch_input(g, b, "ids"), NULL, NULL); /* [B, T, V] */
    return rc_cross_entropy(g, logits, rc_batch_input(g, b, "targets"), RC_IGNORE_INDEX);
}

/* text with its newlines shown as \n, so an example stays on one line */
static void print_text(const char *s)
{
    for (; *s; s++)
        fputs(*s == '\n' ? "\\n" : (char[]){*s, 0}, stdout);
}

/* predict: answer a held-out prompt greedily, stopping at <|endoftext|>. Returns 1 when
 * the answer is exactly the expected completion. */
static int predict(rc_model *m, const rc_tokenizer *tok, const rc_data_example *e)
{
    rc_error err = {0};
    int64_t n_prompt = 0; /* the prompt is where the loss mask is 0 */
    while (n_prompt < e->n && !e->loss_mask[n_prompt])
        n_prompt++;
    rc_generate_options o = rc_generate_defaults(m);
    o.max_new_tokens = (int)(e->n - n_prompt);
    int32_t *out = NULL;
    int64_t n_out = 0;
    char *prompt = NULL, *answer = NULL, *expected = NULL;
    size_t len;
    int rc = rc_generate(m, e->ids, n_prompt, &o, &out, &n_out, &err);
    if (!rc)
        rc = rc_tokenizer_decode(tok, e->ids, n_prompt, 1, &prompt, &len, &err) ||
             rc_tokenizer_decode(tok, out, n_out, 1, &answer, &len, &err) ||
             rc_tokenizer_decode(tok, e->ids + n_prompt, e->n - n_prompt, 1, &expected, &len, &err);
    int right = !rc && !strcmp(answer, expected);
    if (rc) {
        fprintf(stderr, "instruction_tuning: generate: %s\n", err.msg);
    } else {
        printf("  ");
        print_text(prompt);
        printf(" ->%s   (expected%s: %s)\n", answer, expected, right ? "right" : "wrong");
    }
    free(out), free(prompt), free(answer), free(expected);
    return right;
}

/* Shows how collate packs example i: the inputs, and the targets with -100 as "--". */
static void show_packing(instruct *d, int64_t i)
{
    rc_batch b = {0};
    rc_error err = {0};
    if (collate(&b, &i, 1, d, &err) == 0) {
        const int32_t *ids = rc_batch_get(&b, "ids")->data, *tg = rc_batch_get(&b, "targets")->data;
        printf("example %lld packed:\n  ids     ", (long long)i);
        for (int64_t t = 0; t < d->T; t++)
            printf(" %5d", ids[t]);
        printf("\n  targets ");
        for (int64_t t = 0; t < d->T; t++) {
            if (tg[t] == RC_IGNORE_INDEX)
                printf("    --");
            else
                printf(" %5d", tg[t]);
        }
        printf("\n");
    }
    rc_batch_free(&b);
}

/* ---- examples per epoch ----------------------------------------------------------------- */

static int64_t count_train(int epoch, void *user)
{
    (void)epoch;
    return ((instruct *)user)->n_train;
}

static int64_t count_eval(int epoch, void *user)
{
    (void)epoch;
    return ((instruct *)user)->n_eval;
}

/* The masked loss over the held-out examples, and how many completion tokens it covers. */
static int evaluate(rc_trainer *t, instruct *d, int batch, double *loss_out, int64_t *tokens)
{
    rc_error err = {0};
    d->eval = 1;
    int rc = rc_trainer_eval(t, (rc_examples){count_eval, d}, batch, loss_out, tokens, &err);
    d->eval = 0;
    if (rc)
        fprintf(stderr, "instruction_tuning: eval: %s\n", err.msg);
    return rc;
}

/* ---- synthetic data ------------------------------------------------------------------- */

/* Writes n instruction examples to path: "Reverse: a b c" -> "c b a" and "Add: 12 + 7" ->
 * "19", drawn from a fixed seed. */
static int write_synthetic(const char *path, int n)
{
    static const char *words[] = {"red", "green", "blue", "cat", "dog", "sun", "moon", "tree",
                                  "fish", "bird", "stone", "river"};
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    rc_rng r = rc_rng_new(2024);
    for (int i = 0; i < n; i++) {
        if (i % 2 == 0) {
            const char *w[3];
            for (int k = 0; k < 3; k++)
                w[k] = words[rc_rng_next_u64(&r) % 12];
            fprintf(f, "{\"prompt\": \"Reverse: %s %s %s\\nAnswer:\", \"completion\": \" %s %s %s\"}\n",
                    w[0], w[1], w[2], w[2], w[1], w[0]);
        } else {
            int x = (int)(rc_rng_next_u64(&r) % 50), y = (int)(rc_rng_next_u64(&r) % 50);
            fprintf(f, "{\"prompt\": \"Add: %d + %d\\nAnswer:\", \"completion\": \" %d\"}\n", x, y, x + y);
        }
    }
    return fclose(f);
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
    *a = (args){150, NULL, "data/gpt2", "tiny-gpt2", NULL, 8, 24, 3e-3};
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
        fprintf(stderr, "usage: instruction_tuning [--steps N] [--data FILE.jsonl] [--tokenizer DIR]\n"
                        "         [--model PRESET] [--batch B] [--seq-len T] [--lr LR] [--workdir DIR]\n");
        return -1;
    }
    return 0;
}

/* A preset architecture with the tokenizer's vocabulary (tiny-gpt2 has 256 ids). */
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
    char tmpdir[] = "/tmp/instruction_tuning-XXXXXX", tmpfile[64] = "";
    if (!a.data) {
        if (!mkdtemp(tmpdir))
            return 1;
        snprintf(tmpfile, sizeof tmpfile, "%s/synthetic.jsonl", tmpdir);
        if (write_synthetic(tmpfile, 600))
            return 1;
        a.data = tmpfile;
    }
    rc_error err = {0};
    instruct d = {.T = a.seq_len};
    rc_tokenizer *tok = rc_tokenizer_load(a.tokenizer, &err);
    rc_dataset_opts dopt = {.tokenizer = tok};
    if (tok)
        d.data = rc_dataset_open(a.data, &dopt, &err);
    if (d.data && rc_dataset_kind(d.data) != RC_DATA_INSTRUCT) {
        fprintf(stderr, "instruction_tuning: %s: expected {\"prompt\", \"completion\"} lines\n", a.data);
        return 1;
    }
    if (d.data)
        d.model = model_for(a.model, tok, &err);
    rc_deployer_options o = {.seed = 1, .workdir = a.workdir, .verbose = 1};
    rc_deployer *dep = d.model ? rc_deployer_new(&argc, &argv, &o, &err) : NULL;
    rc_trainer *t = dep ? rc_trainer_new(dep, collate, loss, &d, d.model->params, d.model, &err) : NULL;
    if (!t) {
        fprintf(stderr, "instruction_tuning: %s\n", err.msg);
        return 1;
    }
    /* GPT-2 has no padding token: pad with <|endoftext|>; those targets are -100 anyway */
    d.pad = rc_tokenizer_eos(tok);
    /* hold out 10% of the examples, in whole batches */
    int64_t n = rc_dataset_examples(d.data);
    d.n_eval = n / 10 / a.batch * a.batch;
    d.n_eval = d.n_eval < a.batch ? a.batch : d.n_eval;
    d.n_train = n - d.n_eval;
    if (d.n_train < a.batch) {
        fprintf(stderr, "instruction_tuning: %s has %lld examples; too few\n", a.data, (long long)n);
        return 1;
    }
    if (rc_deployer_is_main(dep)) {
        printf("%s: %lld train + %lld held-out examples (%lld tokens in all); model %s, %lld parameters\n",
               a.data, (long long)d.n_train, (long long)d.n_eval, (long long)rc_dataset_tokens(d.data),
               a.model, (long long)rc_params_numel(d.model->params));
        show_packing(&d, 0);
    }

    double before = 0, after = 0;
    int64_t tokens = 0;
    rc_train_options to = {.steps = a.steps, .batch_size = a.batch, .shuffle = 1, .optimizer = "adamw",
                           .lr = a.lr, .weight_decay = 0.01, .grad_clip = 1.0,
                           .schedule = RC_SCHEDULE_COSINE, .warmup = a.steps / 10,
                           .log_every = a.steps >= 10 ? a.steps / 10 : 1, .tokenizer_dir = a.tokenizer};
    int rc = evaluate(t, &d, a.batch, &before, &tokens);
    if (!rc && (rc = rc_trainer_fit(t, &to, (rc_examples){count_train, &d}, NULL, NULL, &err)))
        fprintf(stderr, "instruction_tuning: %s\n", err.msg);
    if (!rc)
        rc = evaluate(t, &d, a.batch, &after, &tokens);
    if (!rc && rc_deployer_is_main(dep)) {
        printf("held-out masked loss over %lld completion tokens: before %.4f, after %.4f (%.0f%% lower)\n",
               (long long)tokens, before, after, 100.0 * (before - after) / before);
        int right = 0, shown = d.n_eval < 4 ? (int)d.n_eval : 4;
        for (int i = 0; i < shown; i++) {
            rc_data_example e;
            rc = rc_dataset_example(d.data, d.n_train + i, &e, &err);
            if (rc)
                break;
            right += predict(d.model, tok, &e);
        }
        printf("answers right: %d of %d\n", right, shown);
    }
    rc_trainer_free(t);
    rc_deployer_free(dep); /* and MPI, which it started when run under mpirun */
    rc_model_free(d.model);
    rc_dataset_close(d.data);
    rc_tokenizer_free(tok);
    if (tmpfile[0]) {
        remove(tmpfile);
        rmdir(tmpdir);
    }
    return rc ? 1 : 0;
}
