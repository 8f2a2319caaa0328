/* cmd_train.c - `redco train` and `redco eval`: a built-in model, a dataset and the
 * built-in task, run by the Trainer over the processes the launcher started. */
#include "cli.h"
#include "redco/data.h"
#include "redco/pipeline.h"
#include "redco/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *train_help =
    "usage: redco train --model PRESET|DIR --data PATH [--tokenizer DIR] --workdir DIR [--mp N]\n"
    "                   [--steps N | --epochs N] [--batch-size N] [--seq-len N] [--lr X]\n"
    "                   [--optimizer adamw|sgd] [--weight-decay X] [--grad-clip X] [--warmup N]\n"
    "                   [--schedule constant|linear|cosine] [--grad-accum K] [--seed S]\n"
    "                   [--eval-data PATH] [--eval-every N] [--save-every N] [--log-every N]\n"
    "                   [--resume] [--no-shuffle] [--nproc P] [--json]\n"
    "                   [--shard NAME=AXIS[:GROUPS]|NAME=replicated ...]\n"
    "\n"
    "Trains a model on .txt, .jsonl ({\"text\"}, {\"prompt\",\"completion\"}, {\"source\",\"target\"})\n"
    "or .npy token data. --batch-size is per data-parallel process; the global batch is\n"
    "batch-size x processes x grad-accum. --steps counts optimizer steps; with --resume the\n"
    "run continues from the workdir's last complete checkpoint until step N. --nproc P\n"
    "starts P processes with mpiexec (or run the command under mpirun/srun yourself).\n"
    "--mp N splits the model over N of them (the plan of `redco plan`; --shard overrides\n"
    "one parameter's split).\n"
    "Writes checkpoint-STEP/, last_checkpoint, best/, final/, log.jsonl and TensorBoard\n"
    "event files into the workdir. Defaults: --batch-size 8 --seq-len 64 --lr 3e-4\n"
    "--optimizer adamw --weight-decay 0.01 --grad-clip 1 --schedule constant --seed 0.\n";

static const char *eval_help =
    "usage: redco eval --model DIR --data PATH [--tokenizer DIR] [--seq-len N] [--batch-size N]\n"
    "                  [--mp N] [--nproc P] [--json]\n"
    "\n"
    "Mean cross-entropy of the model over every predicted token of the data (language-model\n"
    "windows as in training), its perplexity, and the token count. With --json the last line\n"
    "of stdout is {\"loss\": ..., \"ppl\": ..., \"tokens\": N}. Processes split the data,\n"
    "and with --mp N the model too (the training plan).\n";

typedef struct {
    const char *model, *data, *tokenizer, *workdir, *eval_data, *optimizer, *schedule;
    int64_t steps, epochs, batch, seq_len, warmup, accum, seed, eval_every, save_every, log_every,
        mp, nproc;
    double lr, wd, clip;
    int resume, no_shuffle, json;
    cli_shards shards;
} options;

/* Parses the flags of train (is_train) or eval; 0, or the exit status of a bad flag. */
static int parse(const char *cmd, int argc, char **argv, options *o, int is_train)
{
    *o = (options){.optimizer = "adamw", .schedule = "constant", .batch = 8, .seq_len = 64,
                   .accum = 1, .lr = 3e-4, .wd = 0.01, .clip = 1.0, .log_every = 10, .mp = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int64_t big = INT64_C(1) << 40;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(is_train ? train_help : eval_help, stdout);
            return -1;
        }
        if (!strcmp(a, "--json")) { o->json = 1; continue; }
        if (is_train && !strcmp(a, "--resume")) { o->resume = 1; continue; }
        if (is_train && !strcmp(a, "--no-shuffle")) { o->no_shuffle = 1; continue; }
        if (strncmp(a, "--", 2) || !(v = cli_value(cmd, argc, argv, &i)))
            return v || strncmp(a, "--", 2) ? cli_usage(cmd, "unexpected argument '%s'", a) : 2;
        int bad = 0;
        if (!strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--tokenizer")) o->tokenizer = v;
        else if (!strcmp(a, "--seq-len")) bad = cli_int64(cmd, a, v, 1, 1 << 20, &o->seq_len);
        else if (!strcmp(a, "--batch-size")) bad = cli_int64(cmd, a, v, 1, 1 << 20, &o->batch);
        else if (!strcmp(a, "--nproc")) bad = cli_int64(cmd, a, v, 1, 4096, &o->nproc);
        else if (!strcmp(a, "--mp")) bad = cli_int64(cmd, a, v, 1, 4096, &o->mp);
        else if (!is_train) return cli_usage(cmd, "unknown flag '%s'", a);
        else if (!strcmp(a, "--workdir")) o->workdir = v;
        else if (!strcmp(a, "--eval-data")) o->eval_data = v;
        else if (!strcmp(a, "--optimizer")) o->optimizer = v;
        else if (!strcmp(a, "--schedule")) o->schedule = v;
        else if (!strcmp(a, "--steps")) bad = cli_int64(cmd, a, v, 1, big, &o->steps);
        else if (!strcmp(a, "--epochs")) bad = cli_int64(cmd, a, v, 1, 1 << 20, &o->epochs);
        else if (!strcmp(a, "--warmup")) bad = cli_int64(cmd, a, v, 0, big, &o->warmup);
        else if (!strcmp(a, "--grad-accum")) bad = cli_int64(cmd, a, v, 1, 1 << 16, &o->accum);
        else if (!strcmp(a, "--seed")) bad = cli_int64(cmd, a, v, 0, INT64_MAX, &o->seed);
        else if (!strcmp(a, "--eval-every")) bad = cli_int64(cmd, a, v, 0, big, &o->eval_every);
        else if (!strcmp(a, "--save-every")) bad = cli_int64(cmd, a, v, 0, big, &o->save_every);
        else if (!strcmp(a, "--log-every")) bad = cli_int64(cmd, a, v, 0, big, &o->log_every);
        else if (!strcmp(a, "--shard")) bad = cli_shard(cmd, v, &o->shards);
        else if (!strcmp(a, "--lr")) bad = cli_double(cmd, a, v, 0, 1e3, &o->lr);
        else if (!strcmp(a, "--weight-decay")) bad = cli_double(cmd, a, v, 0, 1e3, &o->wd);
        else if (!strcmp(a, "--grad-clip")) bad = cli_double(cmd, a, v, 0, 1e9, &o->clip);
        else return cli_usage(cmd, "unknown flag '%s'", a);
        if (bad)
            return 2;
    }
    if (!o->model || !o->data)
        return cli_usage(cmd, "--model and --data are required");
    if (is_train && !o->workdir)
        return cli_usage(cmd, "--workdir is required");
    if (is_train && !o->steps && !o->epochs)
        return cli_usage(cmd, "give --steps N or --epochs N");
    if (is_train && o->steps && o->epochs)
        return cli_usage(cmd, "give --steps or --epochs, not both");
    if (strcmp(o->optimizer, "adamw") && strcmp(o->optimizer, "sgd"))
        return cli_usage(cmd, "--optimizer '%s' (adamw or sgd)", o->optimizer);
    if (strcmp(o->schedule, "constant") && strcmp(o->schedule, "linear") && strcmp(o->schedule, "cosine"))
        return cli_usage(cmd, "--schedule '%s' (constant, linear or cosine)", o->schedule);
    return 0;
}

/* The tokenizer: --tokenizer, else the model directory's own files (NULL if it has none). */
static rc_tokenizer *open_tokenizer(const char *cmd, const options *o, const char **path, rc_error *err)
{
    *path = o->tokenizer;
    if (!*path) {
        const char *files[] = {"tokenizer.json", "vocab.json", "tokenizer.model"};
        for (int i = 0; i < 3 && !*path; i++) {
            char p[4200];
            snprintf(p, sizeof p, "%s/%s", o->model, files[i]);
            if (access(p, R_OK) == 0)
                *path = o->model;
        }
    }
    if (!*path)
        return NULL;
    rc_tokenizer *t = rc_tokenizer_load(*path, err);
    if (!t)
        cli_fail(cmd, "%s", err->msg);
    return t;
}

static rc_dataset *open_data(const char *cmd, const char *path, rc_tokenizer *tok, const char *tok_path,
                             int verbose, rc_error *err)
{
    rc_dataset_opts opts = {.tokenizer = tok, .tokenizer_path = tok_path};
    rc_dataset *ds = rc_dataset_open(path, &opts, err);
    if (!ds) {
        cli_fail(cmd, "%s", err->msg);
        return NULL;
    }
    const rc_dataset_info *info = rc_dataset_info_get(ds);
    if (verbose && info->cache == RC_CACHE_UNWRITABLE)
        fprintf(stderr, "redco %s: note: cannot write the token cache beside %s; tokens kept in memory\n",
                cmd, path);
    return ds;
}

typedef struct {
    rc_tokenizer *tok;
    rc_model *model;
    rc_dataset *train, *eval;
    rc_task task, eval_task;
    rc_deployer *d;
} session;

static void session_free(session *s)
{
    rc_deployer_free(s->d);
    rc_dataset_free(s->train);
    rc_dataset_free(s->eval);
    rc_model_free(s->model);
    rc_tokenizer_free(s->tok);
}

/* Everything a run needs; 0 or an exit status. */
static int session_open(const char *cmd, const options *o, session *s, int *argc, char ***argv, int is_train)
{
    rc_error err = {0};
    const char *tok_path = NULL;
    memset(s, 0, sizeof *s);
    rc_deployer_options dopt = {.seed = (uint64_t)o->seed, .mp = (int)o->mp,
                                .workdir = is_train ? o->workdir : NULL, .verbose = 1, .json = o->json};
    if (rc_dist_init(argc, argv, &err))
        return cli_fail(cmd, "%s", err.msg);
    cli_rank = rc_dist_rank(); /* only rank 0 prints errors: every rank agrees on them first */
    if (!(s->d = rc_deployer_new(argc, argv, &dopt, &err)))
        return cli_fail(cmd, "%s", err.msg);
    int main = rc_deployer_is_main(s->d);
    int ok = (s->model = rc_model_create(o->model, (uint64_t)o->seed, &err)) != NULL;
    if (!ok)
        return cli_fail(cmd, "%s", err.msg);
    s->tok = open_tokenizer(cmd, o, &tok_path, &err);
    if (!s->tok && tok_path)
        return 1;
    if (s->tok && rc_tokenizer_vocab_size(s->tok) > s->model->config.vocab_size)
        return cli_fail(cmd, "the tokenizer in %s has %lld ids, more than the model's vocabulary of %d",
                        tok_path, (long long)rc_tokenizer_vocab_size(s->tok), s->model->config.vocab_size);
    /* rank 0 tokenizes and writes the caches; the others then read them */
    for (int turn = 0; turn < 2; turn++) {
        int rc = 0;
        if (main == !turn) {
            if (!(s->train = open_data(cmd, o->data, s->tok, tok_path, main, &err)) ||
                (o->eval_data && !(s->eval = open_data(cmd, o->eval_data, s->tok, tok_path, main, &err))))
                rc = -1;
        }
        if (rc_deployer_agree(s->d, rc, &err))
            return 1;
    }
    if (rc_task_init(&s->task, s->model, s->train, o->seq_len, &err) ||
        (s->eval && rc_task_init(&s->eval_task, s->model, s->eval, o->seq_len, &err)))
        return cli_fail(cmd, "%s: %s", o->data, err.msg);
    return 0;
}

/* A task collate failure carries its own message. */
static const char *reason(const session *s, const rc_error *err)
{
    if (s->task.err.code)
        return s->task.err.msg;
    if (s->eval_task.err.code)
        return s->eval_task.err.msg;
    return err->msg;
}

int cmd_train(int argc, char **argv)
{
    const char *cmd = "train";
    options o;
    int rc = parse(cmd, argc, argv, &o, 1);
    if (rc)
        return rc < 0 ? 0 : rc;
    if ((rc = cli_relaunch(cmd, (int)o.nproc, argc, argv)) >= 0)
        return rc;
    session s;
    if ((rc = session_open(cmd, &o, &s, &argc, &argv, 1))) {
        session_free(&s);
        rc_dist_finalize();
        return rc;
    }
    rc_error err = {0};
    rc_trainer *t = rc_trainer_new(s.d, rc_task_collate, rc_task_loss, &s.task, s.model->params, s.model, &err);
    rc_train_options to = {.steps = o.steps, .epochs = (int)o.epochs, .batch_size = (int)o.batch,
                           .grad_accum = (int)o.accum, .shuffle = !o.no_shuffle, .optimizer = o.optimizer,
                           .lr = o.lr, .weight_decay = o.wd, .grad_clip = o.clip, .warmup = o.warmup,
                           .schedule = !strcmp(o.schedule, "linear") ? RC_SCHEDULE_LINEAR
                                       : !strcmp(o.schedule, "cosine") ? RC_SCHEDULE_COSINE
                                                                        : RC_SCHEDULE_CONSTANT,
                           .log_every = o.log_every, .eval_every = o.eval_every, .save_every = o.save_every,
                           .shard_overrides = o.shards.o, .n_shard_overrides = o.shards.n,
                           .resume = o.resume, .tokenizer_dir = o.tokenizer ? o.tokenizer : s.model->dir[0] ? s.model->dir : NULL};
    rc_examples train = {rc_task_count, &s.task}, eval = {rc_task_count, &s.eval_task};
    rc_train_result res = {0};
    rc = t ? rc_trainer_fit(t, &to, train, s.eval ? &eval : NULL, &res, &err) : -1;
    if (rc)
        cli_fail(cmd, "%s", reason(&s, &err));
    else if (o.json && rc_deployer_is_main(s.d)) {
        char eval_loss[32] = "null";
        if (isfinite(res.eval_loss))
            snprintf(eval_loss, sizeof eval_loss, "%.6f", res.eval_loss);
        printf("{\"step\": %lld, \"loss\": %.6f, \"eval_loss\": %s, \"lr\": %.6g}\n", (long long)res.step,
               res.loss, eval_loss, res.lr);
    }
    rc_trainer_free(t);
    session_free(&s);
    rc_dist_finalize();
    return rc ? 1 : 0;
}

int cmd_eval(int argc, char **argv)
{
    const char *cmd = "eval";
    options o;
    int rc = parse(cmd, argc, argv, &o, 0);
    if (rc)
        return rc < 0 ? 0 : rc;
    if ((rc = cli_relaunch(cmd, (int)o.nproc, argc, argv)) >= 0)
        return rc;
    session s;
    if ((rc = session_open(cmd, &o, &s, &argc, &argv, 0))) {
        session_free(&s);
        rc_dist_finalize();
        return rc;
    }
    rc_error err = {0};
    rc_trainer *t = rc_trainer_new(s.d, rc_task_collate, rc_task_loss, &s.task, s.model->params, s.model, &err);
    double loss = NAN;
    int64_t tokens = 0;
    rc = t ? rc_trainer_eval(t, (rc_examples){rc_task_count, &s.task}, (int)o.batch, &loss, &tokens, &err) : -1;
    if (rc) {
        cli_fail(cmd, "%s", reason(&s, &err));
    } else if (rc_deployer_is_main(s.d)) {
        if (o.json)
            printf("{\"loss\": %.6f, \"ppl\": %.6f, \"tokens\": %lld}\n", loss, exp(loss), (long long)tokens);
        else
            printf("loss %.4f  ppl %.2f  tokens %lld\n", loss, exp(loss), (long long)tokens);
    }
    rc_trainer_free(t);
    session_free(&s);
    rc_dist_finalize();
    return rc ? 1 : 0;
}
