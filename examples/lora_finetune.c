/* lora_finetune.c - LoRA fine-tuning of a causal LM, written as the three functions.
 *
 * A model (a Hugging Face GPT-2 or LLaMA directory, or a preset with GPT-2's vocabulary)
 * gets rank-r adapters on the chosen projections (redco/lora.h); the trainer is handed the
 * adapters' parameters only, so the model's own weights are read as constants: no
 * gradients, no optimizer state, unchanged bit for bit (checked here). collate cuts the
 * tokenized text into windows, loss is the next-token cross-entropy of model + adapters,
 * and predict generates from the model with the adapters folded in. The held-out loss is
 * measured before and after; the adapters are saved as a PEFT directory
 * (workdir/adapter: PeftModel.from_pretrained loads it) and the merged model as a plain
 * checkpoint (workdir/merged).
 *
 *   build/lora_finetune [--model tiny-gpt2|DIR] [--targets c_attn,c_proj] [--r 8] [--alpha 16]
 *                       [--steps 60] [--data data/austen_excerpt.txt] [--tokenizer data/gpt2]
 *                       [--batch 8] [--seq-len 32] [--lr 1e-2] [--device cpu|opencl]
 *                       [--mp N] [--workdir DIR]
 *   mpiexec -n 2 build/lora_finetune ...            (data parallel; with --mp 2: model shards)
 */
#include "redco/data.h"
#include "redco/lora.h"
#include "redco/pipeline.h"
#include "redco/predict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    rc_model *model;              /* with the adapters attached while training */
    rc_dataset *data;
    int64_t T, n_train, n_eval;   /* windows [0, n_train) train, the next n_eval are held out */
    int eval;
} lm;

/* ---- the three functions -------------------------------------------------------------- */

/* collate: window indices -> ids [n, T] and targets [n, T] (each token's successor) */
static int collate(rc_batch *out, const int64_t *examples, int n, void *user, rc_error *err)
{
    lm *d = user;
    int32_t *ids = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, d->T});
    int32_t *targets = rc_batch_add(out, "targets", RC_I32, 2, (int64_t[]){n, d->T});
    if (!ids || !targets)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's ids and targets");
    for (int i = 0; i < n; i++) /* a failure says why (the trainer prints it) */
        if (rc_dataset_window(d->data, d->T, examples[i] + (d->eval ? d->n_train : 0), ids + i * d->T,
                              targets + i * d->T, err))
            return -1;
    return 0;
}

/* loss: the model's logits already include the attached adapters; `params` (the adapters)
 * are what the trainer differentiates */
static rc_tensor *loss(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    lm *d = user;
    (void)params, (void)rng, (void)err;
    rc_tensor *logits = rc_model_logits(g, d->model, rc_batch_input(g, b, "ids"), NULL, NULL);
    return rc_cross_entropy(g, logits, rc_batch_input(g, b, "targets"), RC_IGNORE_INDEX);
}

/* predict: greedy continuation of a prompt by the merged model */
static int predict(rc_model *m, const rc_tokenizer *tok, const char *prompt)
{
    rc_error err = {0};
    int32_t *ids = NULL, *out = NULL;
    int64_t n = 0, n_out = 0;
    char *text = NULL;
    size_t len = 0;
    rc_generate_options o = rc_generate_defaults(m);
    o.max_new_tokens = 16;
    int rc = rc_tokenizer_encode(tok, prompt, strlen(prompt), 0, &ids, &n, &err);
    if (!rc)
        rc = rc_generate(m, ids, n, &o, &out, &n_out, &err);
    if (!rc)
        rc = rc_tokenizer_decode(tok, out, n_out, 1, &text, &len, &err);
    if (rc)
        fprintf(stderr, "lora_finetune: generate: %s\n", err.msg);
    else
        printf("sample: %s|%s\n", prompt, text);
    free(ids), free(out), free(text);
    return rc;
}

/* ---- main ------------------------------------------------------------------------------- */

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

static int evaluate(rc_trainer *t, lm *d, int batch, double *loss_out)
{
    rc_error err = {0};
    int64_t tokens = 0;
    d->eval = 1;
    int rc = rc_trainer_eval(t, (rc_examples){count_eval, d}, batch, loss_out, &tokens, &err);
    d->eval = 0;
    if (rc)
        fprintf(stderr, "lora_finetune: eval: %s\n", err.msg);
    return rc;
}

typedef struct {
    const char *model, *targets, *data, *tokenizer, *device, *workdir;
    int r, steps, batch, seq_len, mp;
    double alpha, lr;
    int no_dropout;               /* --dropout off: train without the model's dropout */
} args;

static int parse_args(int argc, char **argv, args *a)
{
    *a = (args){"tiny-gpt2", "c_attn,c_proj", "data/austen_excerpt.txt", "data/gpt2", NULL, NULL,
                8, 60, 8, 32, 1, 16, 1e-2, 0};
    int ok = 1;
    for (int i = 1; ok && i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) ok = 0;
        else if (!strcmp(k, "--model")) a->model = v;
        else if (!strcmp(k, "--targets")) a->targets = v;
        else if (!strcmp(k, "--data")) a->data = v;
        else if (!strcmp(k, "--tokenizer")) a->tokenizer = v;
        else if (!strcmp(k, "--device")) a->device = v;
        else if (!strcmp(k, "--workdir")) a->workdir = v;
        else if (!strcmp(k, "--r")) a->r = atoi(v);
        else if (!strcmp(k, "--alpha")) a->alpha = atof(v);
        else if (!strcmp(k, "--steps")) a->steps = atoi(v);
        else if (!strcmp(k, "--batch")) a->batch = atoi(v);
        else if (!strcmp(k, "--seq-len")) a->seq_len = atoi(v);
        else if (!strcmp(k, "--lr")) a->lr = atof(v);
        else if (!strcmp(k, "--mp")) a->mp = atoi(v);
        else if (!strcmp(k, "--dropout") && (!strcmp(v, "on") || !strcmp(v, "off"))) a->no_dropout = !strcmp(v, "off");
        else ok = 0;
    }
    if (!ok || a->r < 1 || a->steps < 1 || a->batch < 1 || a->seq_len < 1 || a->mp < 1) {
        fprintf(stderr, "usage: lora_finetune [--model PRESET|DIR] [--targets M,M] [--r R] [--alpha A] [--steps N]\n"
                        "       [--data FILE] [--tokenizer DIR] [--batch B] [--seq-len T] [--lr LR]\n"
                        "       [--device cpu|opencl] [--mp N] [--dropout on|off] [--workdir DIR]\n");
        return -1;
    }
    return 0;
}

/* a model directory as it is, or a preset resized to the tokenizer's vocabulary */
static rc_model *model_for(const char *name, const rc_tokenizer *tok, rc_error *err)
{
    rc_model_config c;
    if (rc_config_preset(name, &c, NULL))
        return rc_model_create(name, 0, err);
    c.vocab_size = (int)rc_tokenizer_vocab_size(tok);
    c.bos_token_id = c.eos_token_id = rc_tokenizer_eos(tok);
    return rc_model_from_config(&c, 42, err);
}

int main(int argc, char **argv)
{
    args a;
    if (parse_args(argc, argv, &a))
        return 2;
    rc_error err = {0};
    lm d = {.T = a.seq_len};
    rc_deployer_options o = {.seed = 1, .workdir = a.workdir, .verbose = 1, .device = a.device, .mp = a.mp};
    rc_deployer *dep = rc_deployer_new(&argc, &argv, &o, &err);
    rc_tokenizer *tok = dep ? rc_tokenizer_load(a.tokenizer, &err) : NULL;
    rc_dataset_opts dopt = {.tokenizer = tok, .tokenizer_path = a.tokenizer};
    d.data = tok ? rc_dataset_open(a.data, &dopt, &err) : NULL;
    d.model = d.data ? model_for(a.model, tok, &err) : NULL;
    /* the frozen model lives where the steps run; the adapters follow it */
    rc_lora *l = d.model && !rc_params_to(d.model->params, rc_deployer_backend(dep), &err)
                     ? rc_lora_new(d.model, &(rc_lora_options){a.r, a.alpha, a.targets}, 3, &err) : NULL;
    rc_trainer *t = l ? rc_trainer_new(dep, collate, loss, &d, rc_lora_params(l), NULL, &err) : NULL;
    float *base = NULL;
    int64_t nb = d.model ? rc_params_numel(d.model->params) : 0;
    if (t && (base = malloc((size_t)nb * sizeof *base)))
        rc_params_read_all(d.model->params, base, &err);
    if (!t || !base) {
        fprintf(stderr, "lora_finetune: %s\n", err.msg);
        return 1;
    }
    int64_t windows = rc_dataset_windows(d.data, d.T);
    d.n_eval = 4 * (int64_t)a.batch;
    d.n_train = windows - d.n_eval;
    double before = 0, after = 0, merged = 0;
    rc_train_options to = {.steps = a.steps, .batch_size = a.batch, .shuffle = 1, .optimizer = "adamw", .lr = a.lr,
                           .grad_clip = 1.0, .log_every = 10, .no_dropout = a.no_dropout};
    rc_train_result res = {0};
    int rc = evaluate(t, &d, a.batch, &before);
    if (!rc && (rc = rc_trainer_fit(t, &to, (rc_examples){count_train, &d}, NULL, &res, &err)))
        fprintf(stderr, "lora_finetune: %s\n", err.msg);
    if (!rc)
        rc = evaluate(t, &d, a.batch, &after);
    /* the frozen weights: bit for bit what they were */
    float *now = malloc((size_t)nb * sizeof *now);
    int frozen = now && rc_params_read_all(d.model->params, now, &err) == 0 && !memcmp(now, base, (size_t)nb * sizeof *now);
    free(now);
    char dir[4200];
    if (!rc && rc_deployer_is_main(dep)) {
        int64_t trained = rc_lora_numel(l);
        printf("LoRA r=%d on %s: %lld trainable of %lld parameters; trainer state %lld bytes (full fine-tuning: %lld)\n",
               a.r, a.targets, (long long)trained, (long long)(nb + trained), (long long)res.state_bytes,
               (long long)(16 * nb / a.mp));
        printf("base weights unchanged: %s\n", frozen ? "yes" : "NO");
        printf("held-out loss: before %.4f, after %.4f (%.1f%% lower)\n", before, after, 100.0 * (before - after) / before);
        snprintf(dir, sizeof dir, "%s/adapter", a.workdir ? a.workdir : ".");
        if (a.workdir && rc_lora_save(l, dir, &err))
            rc = -1;
    }
    /* inference: the adapters folded into the weights (every rank), saved and sampled by rank 0;
     * then the merged model alone, evaluated like any model, gives the adapted loss */
    if (!rc && rc_lora_merge(l, &err))
        rc = -1;
    if (!rc && rc_deployer_is_main(dep)) {
        snprintf(dir, sizeof dir, "%s/merged", a.workdir ? a.workdir : ".");
        rc = a.workdir ? rc_model_save(d.model, dir, a.tokenizer, &err) : 0;
        if (!rc)
            rc = predict(d.model, tok, "It is a truth universally acknowledged");
    }
    rc_trainer *plain = !rc ? rc_trainer_new(dep, collate, loss, &d, d.model->params, d.model, &err) : NULL;
    rc = plain ? evaluate(plain, &d, a.batch, &merged) : -1;
    if (!rc && rc_deployer_is_main(dep))
        printf("merged model: held-out loss %.4f\n", merged);
    if (rc && err.msg[0])
        fprintf(stderr, "lora_finetune: %s\n", err.msg);
    rc_trainer_free(plain);
    rc_trainer_free(t);
    rc_lora_free(l);
    rc_deployer_free(dep);
    rc_model_free(d.model);
    rc_dataset_close(d.data);
    rc_tokenizer_free(tok);
    free(base);
    return rc || !frozen ? 1 : 0;
}
