/* cmd_train.c - `redco train` and `redco eval`: a built-in model, a dataset and the
 * built-in task, run by the Trainer over the processes the launcher started. */
#include "cli.h"
#include "redco/memory.h"
#include "redco/data.h"
#include "redco/dist.h"
#include "redco/lora.h"
#include "redco/pipeline.h"
#include "redco/tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *train_help =
    "usage: redco train --model PRESET|DIR --data PATH [--tokenizer DIR] [--vocab-size N] --workdir DIR [--mp N]\n"
    "                   [--steps N | --epochs N] [--batch-size N] [--seq-len N] [--lr X]\n"
    "                   [--optimizer adamw|sgd] [--weight-decay X] [--grad-clip X] [--warmup N]\n"
    "                   [--schedule constant|linear|cosine] [--grad-accum K] [--seed S]\n"
    "                   [--eval-data PATH] [--eval-every N] [--save-every N] [--save-total-limit N]\n"
    "                   [--log-every N] [--profile]\n"
    "                   [--resume] [--no-shuffle] [--no-dropout] [--nproc P] [--device D] [--tf32] [--remat[=N]]\n"
    "                   [--attention fused|products|unfused]\n"
    "                   [--zero [1|2|3]] [--dtype f32|bf16|f16] [--loss-scale S] [--loss-scale-window N]\n"
    "                   [--json] [--shard NAME=AXIS[:GROUPS]|NAME=replicated ...] [--collective-timeout S]\n"
    "                   [--lora-r R [--lora-alpha A] [--lora-targets M,M,...] [--lora-merge]]\n"
    "                   [--config FILE]\n"
    "\n"
    "Trains a model on .txt, .jsonl ({\"text\"}, {\"prompt\",\"completion\"}, {\"source\",\"target\"})\n"
    "or .npy token data; text needs a tokenizer: --tokenizer DIR (tokenizer.json, vocab.json and\n"
    "merges.txt, or tokenizer.model; `redco tokenizer-train` makes one), or a --model directory\n"
    "that holds one. A preset's vocabulary grows to the tokenizer's size, or --vocab-size N sets\n"
    "it; a tokenizer with ids past the model's vocabulary is refused, one with fewer ids warned\n"
    "about. The workdir is made once the run's inputs are checked: a refused run leaves none.\n"
    "--config FILE reads flags from a JSON object keyed by their long names ({\"lr\": 0.001,\n"
    "\"no-shuffle\": true, \"shard\": [\"NAME=1\"]}; null or false: not given); flags on the\n"
    "command line win. The run's effective configuration is written to WORKDIR/run_config.json\n"
    "(paths from the root), so `redco train --config WORKDIR/run_config.json --workdir NEW`\n"
    "repeats it.\n"
    "--batch-size is per data-parallel process; the global batch is\n"
    "batch-size x processes x grad-accum. --steps counts optimizer steps; with --resume the\n"
    "run continues from the workdir's last complete checkpoint until step N. --nproc P\n"
    "starts P processes with mpiexec (or run the command under mpirun/srun yourself).\n"
    "--mp N splits the model over N of them (the plan of `redco plan`; --shard overrides\n"
    "one parameter's split). --device cpu|opencl|opencl:N|cuda|cuda:N runs the steps and keeps\n"
    "the model and optimizer state there (default: $REDCO_DEVICE, else cpu; `redco devices`\n"
    "lists them). --tf32 lets f32 matrix products on a CUDA device round their operands to\n"
    "TF32 on tensor cores: several times faster, 10-bit mantissas (default: exact f32).\n"
    "The training steps apply the model's dropout as its config.json says (GPT-2's resid_pdrop,\n"
    "embd_pdrop and attn_pdrop, OPT's dropout and attention_dropout, T5's dropout_rate, LLaMA's\n"
    "attention_dropout), as Hugging Face's classes do in train mode; evaluation never drops.\n"
    "--no-dropout trains without it.\n"
    "--remat[=N] keeps only every N-th transformer block's input (default 1: every block's)\n"
    "and recomputes the blocks in the backward pass: less memory, the same gradients.\n"
    "--attention unfused computes attention as product, softmax, product, keeping every\n"
    "layer's [T, T] probabilities for the backward pass, instead of the fused op (default),\n"
    "which keeps none: the same training to rounding, far more activation memory (`redco\n"
    "plan` shows it); faster only where the fused kernels are slower (README: GPU figures).\n"
    "On a CUDA device (sm_80 and later) the fused op's bf16 attention runs in tiles on tensor\n"
    "cores, each tile's scores kept on chip, the probabilities rounded to bf16 for their\n"
    "products as FlashAttention does; --attention products runs it from matrix products over\n"
    "scratch instead, every product float's to its sums (tiled: the same as fused).\n"
    "--zero shards the AdamW moments over the data-parallel processes (ZeRO stage 1): each\n"
    "keeps and updates 1/dp of them; gradients are reduce-scattered and the updated weights\n"
    "all-gathered. The same training to float rounding; checkpoints are unchanged.\n"
    "--zero 2 (or --zero=2) shards the f32 gradients too: each micro-batch's gradients are\n"
    "reduce-scattered as the step ends and each process keeps only its 1/dp share, so no\n"
    "process holds the whole model's f32 gradients.\n"
    "--zero 3 shards the weights too: each process keeps 1/dp of them (and of the f32 master),\n"
    "gathers each layer's weights just before the step reads them (the next layer's gather\n"
    "moving while the current one computes) and reduce-scatters each layer's gradients as\n"
    "soon as they are complete. Layers come from the graph: --remat's blocks, else runs of\n"
    "parameters up to the largest one's size. With --mp, each model shard is shared over its\n"
    "data-parallel group.\n"
    "--dtype bf16|f16 trains with 16-bit weights and activations: the steps read the weights\n"
    "in that dtype, the optimizer updates f32 master weights (with --zero each process's\n"
    "share) and rounds them into the 16-bit weights; checkpoints and final/ hold the f32\n"
    "master (`redco generate --dtype bf16` loads it in bf16). f16 scales the loss dynamically:\n"
    "by --loss-scale S (default 65536) before the backward pass; a step whose gradients are\n"
    "not finite is skipped and S halved (noted, and train/loss_scale in the log); S doubles\n"
    "after --loss-scale-window good steps (default 2000). bf16 scales only when given S.\n"
    "Writes checkpoint-STEP/, last_checkpoint, best/, final/, log.jsonl and TensorBoard\n"
    "event files into the workdir; log.jsonl's train/loss is the mean since the last record,\n"
    "train/epoch counts the fraction done. --profile shows where the steps' time goes: each\n"
    "step's phases (data, run, grads, norm, update) timed with the device waited for after\n"
    "each, and the step's kernels by op, each waited for; the mean ms a step (the first left\n"
    "out) is printed and logged at the end (profile/PHASE_ms, profile/op/OP_ms). Steps run\n"
    "slower with it: not for measuring a throughput.\n"
    "Text is tokenized once and cached in\n"
    "$REDCO_CACHE_DIR, else $XDG_CACHE_HOME/redco, else ~/.cache/redco.\n"
    "--save-total-limit N keeps the newest N checkpoint-STEP/\n"
    "(older ones removed once a new one is complete; best/, the best evaluation's checkpoint,\n"
    "and final/ stay). With --json the last line of stdout is\n"
    "{\"step\": N, \"loss\": ..., \"eval_loss\": ..., \"lr\": ...} (loss: the last step's; eval_loss:\n"
    "the last evaluation's); a value that is NaN or infinite, or eval_loss with no\n"
    "--eval-data, is null; with --lora-r also \"state_bytes\" and \"full_state_bytes\".\n"
    "--lora-r R fine-tunes rank-R LoRA adapters instead of the model (GPT-2 and LLaMA):\n"
    "on the modules named by --lora-targets (PEFT's matching of Hugging Face module names;\n"
    "default c_attn for GPT-2, q_proj,v_proj for LLaMA), scaled by --lora-alpha / R\n"
    "(default alpha R). The model's weights stay frozen: no gradients or optimizer state\n"
    "(the saving is printed). Checkpoints and final/ hold the adapters; workdir/adapter/ is\n"
    "a PEFT directory (adapter_config.json, adapter_model.safetensors) that\n"
    "PeftModel.from_pretrained loads, and `redco eval|generate --lora DIR` applies; with\n"
    "--lora-merge workdir/merged/ also holds the model with the adapters folded in.\n"
    "SIGINT or SIGTERM (Slurm's notice before it ends a job) finishes the step in progress on\n"
    "every process, writes checkpoint-STEP/, prints \"stopped by SIGTERM at step N; checkpoint\n"
    "written to ...\" and exits with 128 + the signal's number (143 for SIGTERM); --resume then\n"
    "continues as if never stopped. A second signal stops at once (checkpoints are atomic);\n"
    "one within 2 s of the first is a copy (mpiexec and srun pass theirs on) and is ignored.\n"
    "--collective-timeout S: a process that waits more than S seconds (default 600) for the\n"
    "others in a collective names the operation and the processes that did not arrive, and\n"
    "the job is aborted (0: wait forever). Defaults: --batch-size 8 --seq-len 64 --lr 3e-4\n"
    "--optimizer adamw --weight-decay 0.01 --grad-clip 1 --schedule constant --seed 0.\n";

static const char *eval_help =
    "usage: redco eval --model DIR --data PATH [--tokenizer DIR] [--seq-len N] [--batch-size N]\n"
    "                  [--mp N] [--nproc P] [--device D] [--tf32] [--dtype f32|bf16|f16] [--lora DIR]\n"
    "                  [--attention fused|products|unfused] [--json] [--collective-timeout S]\n"
    "\n"
    "Mean cross-entropy of the model over every predicted token of the data (language-model\n"
    "windows as in training), its perplexity, and the token count. With --json the last line\n"
    "of stdout is {\"loss\": ..., \"ppl\": ..., \"tokens\": N}; a loss or perplexity that is NaN\n"
    "or infinite is null. Processes split the data, and with --mp N the model too (the\n"
    "training plan). --dtype bf16|f16 runs the model with its weights in that dtype.\n"
    "--device, --tf32 and --attention as for `redco train`.\n"
    "--lora DIR applies a PEFT LoRA adapter directory (folded into the weights).\n";

typedef struct {
    const char *model, *data, *tokenizer, *workdir, *eval_data, *optimizer, *schedule, *device;
    const char *lora, *lora_targets;  /* eval: an adapter directory; train: --lora-targets */
    const char *config;               /* --config FILE */
    json_t *config_doc;               /* its document: the strings taken from it */
    int64_t lora_r, vocab_size, save_total_limit;
    double lora_alpha;
    int lora_merge;
    int64_t steps, epochs, batch, seq_len, warmup, accum, seed, eval_every, save_every, log_every,
        mp, nproc, remat;
    double lr, wd, clip, loss_scale, coll_timeout;
    int64_t loss_scale_window;
    int resume, no_shuffle, no_dropout, json, zero, tf32, profile;
    const char *attention;            /* --attention: "fused" (NULL: not given), "products", "unfused" (or "tiled") */
    rc_dtype dtype;
    cli_shards shards;
} options;

enum {
    F_MODEL = CLI_FLAG0, F_DATA, F_TOKENIZER, F_SEQ_LEN, F_BATCH, F_NPROC, F_MP, F_JSON, F_WORKDIR,
    F_EVAL_DATA, F_OPTIMIZER, F_SCHEDULE, F_STEPS, F_EPOCHS, F_WARMUP, F_ACCUM, F_SEED, F_EVAL_EVERY,
    F_SAVE_EVERY, F_LOG_EVERY, F_SHARD, F_LR, F_WD, F_CLIP, F_RESUME, F_NO_SHUFFLE, F_NO_DROPOUT, F_DEVICE, F_REMAT, F_ZERO,
    F_DTYPE, F_LOSS_SCALE, F_LOSS_SCALE_WINDOW, F_LORA, F_LORA_R, F_LORA_ALPHA, F_LORA_TARGETS, F_LORA_MERGE,
    F_COLL_TIMEOUT, F_TF32, F_VOCAB_SIZE, F_CONFIG, F_SAVE_TOTAL_LIMIT, F_ATTENTION, F_PROFILE
};

static const struct option eval_flags[] = {
    {"help", no_argument, NULL, CLI_HELP},
    {"model", required_argument, NULL, F_MODEL},
    {"data", required_argument, NULL, F_DATA},
    {"tokenizer", required_argument, NULL, F_TOKENIZER},
    {"seq-len", required_argument, NULL, F_SEQ_LEN},
    {"batch-size", required_argument, NULL, F_BATCH},
    {"nproc", required_argument, NULL, F_NPROC},
    {"mp", required_argument, NULL, F_MP},
    {"device", required_argument, NULL, F_DEVICE},
    {"tf32", no_argument, NULL, F_TF32},
    {"attention", required_argument, NULL, F_ATTENTION},
    {"dtype", required_argument, NULL, F_DTYPE},
    {"lora", required_argument, NULL, F_LORA},
    {"json", no_argument, NULL, F_JSON},
    {"collective-timeout", required_argument, NULL, F_COLL_TIMEOUT},
    {NULL, 0, NULL, 0},
};

static const struct option train_flags[] = {
    {"help", no_argument, NULL, CLI_HELP},
    {"model", required_argument, NULL, F_MODEL},
    {"data", required_argument, NULL, F_DATA},
    {"tokenizer", required_argument, NULL, F_TOKENIZER},
    {"seq-len", required_argument, NULL, F_SEQ_LEN},
    {"batch-size", required_argument, NULL, F_BATCH},
    {"nproc", required_argument, NULL, F_NPROC},
    {"mp", required_argument, NULL, F_MP},
    {"device", required_argument, NULL, F_DEVICE},
    {"tf32", no_argument, NULL, F_TF32},
    {"attention", required_argument, NULL, F_ATTENTION},
    {"remat", optional_argument, NULL, F_REMAT},
    {"zero", optional_argument, NULL, F_ZERO},
    {"dtype", required_argument, NULL, F_DTYPE},
    {"loss-scale", required_argument, NULL, F_LOSS_SCALE},
    {"loss-scale-window", required_argument, NULL, F_LOSS_SCALE_WINDOW},
    {"json", no_argument, NULL, F_JSON},
    {"collective-timeout", required_argument, NULL, F_COLL_TIMEOUT},
    {"workdir", required_argument, NULL, F_WORKDIR},
    {"eval-data", required_argument, NULL, F_EVAL_DATA},
    {"optimizer", required_argument, NULL, F_OPTIMIZER},
    {"schedule", required_argument, NULL, F_SCHEDULE},
    {"steps", required_argument, NULL, F_STEPS},
    {"epochs", required_argument, NULL, F_EPOCHS},
    {"warmup", required_argument, NULL, F_WARMUP},
    {"grad-accum", required_argument, NULL, F_ACCUM},
    {"seed", required_argument, NULL, F_SEED},
    {"eval-every", required_argument, NULL, F_EVAL_EVERY},
    {"save-every", required_argument, NULL, F_SAVE_EVERY},
    {"save-total-limit", required_argument, NULL, F_SAVE_TOTAL_LIMIT},
    {"log-every", required_argument, NULL, F_LOG_EVERY},
    {"profile", no_argument, NULL, F_PROFILE},
    {"shard", required_argument, NULL, F_SHARD},
    {"lr", required_argument, NULL, F_LR},
    {"weight-decay", required_argument, NULL, F_WD},
    {"grad-clip", required_argument, NULL, F_CLIP},
    {"resume", no_argument, NULL, F_RESUME},
    {"no-shuffle", no_argument, NULL, F_NO_SHUFFLE},
    {"no-dropout", no_argument, NULL, F_NO_DROPOUT},
    {"lora-r", required_argument, NULL, F_LORA_R},
    {"lora-alpha", required_argument, NULL, F_LORA_ALPHA},
    {"lora-targets", required_argument, NULL, F_LORA_TARGETS},
    {"lora-merge", no_argument, NULL, F_LORA_MERGE},
    {"vocab-size", required_argument, NULL, F_VOCAB_SIZE},
    {"config", required_argument, NULL, F_CONFIG},
    {NULL, 0, NULL, 0},
};

/* --dtype's value; RC_DTYPE_COUNT when it is none of f32, bf16, f16 */
static rc_dtype weight_dtype(const char *v)
{
    if (!strcmp(v, "f32"))
        return RC_F32;
    if (!strcmp(v, "bf16"))
        return RC_BF16;
    return !strcmp(v, "f16") ? RC_F16 : RC_DTYPE_COUNT;
}

/* Reads one flag into o; 0, or 2 after a usage error. */
static int take_flag(const char *cmd, int c, const cli_args *a, void *user)
{
    options *o = user;
    const char *f = a->flag, *v = a->value;
    int64_t big = INT64_C(1) << 40;
    switch (c) {
    case F_MODEL: o->model = v; return 0;
    case F_DATA: o->data = v; return 0;
    case F_TOKENIZER: o->tokenizer = v; return 0;
    case F_WORKDIR: o->workdir = v; return 0;
    case F_EVAL_DATA: o->eval_data = v; return 0;
    case F_OPTIMIZER: o->optimizer = v; return 0;
    case F_SCHEDULE: o->schedule = v; return 0;
    case F_DEVICE: o->device = v; return 0;
    case F_TF32: o->tf32 = 1; return 0;
    case F_PROFILE: o->profile = 1; return 0;
    case F_ATTENTION: o->attention = v; return cli_attention(cmd, v);
    case F_LORA: o->lora = v; return 0;
    case F_LORA_TARGETS: o->lora_targets = v; return 0;
    case F_LORA_MERGE: o->lora_merge = 1; return 0;
    case F_LORA_R: return cli_int64(cmd, f, v, 1, 1 << 16, &o->lora_r);
    case F_LORA_ALPHA: return cli_double(cmd, f, v, 1e-6, 1e6, &o->lora_alpha);
    case F_REMAT: return v ? cli_int64(cmd, f, v, 1, 1 << 16, &o->remat) : (o->remat = 1, 0);
    case F_JSON: o->json = 1; return 0;
    case F_COLL_TIMEOUT: return cli_double(cmd, f, v, 0, 1e9, &o->coll_timeout);
    case F_ZERO: return cli_zero(cmd, v, &o->zero);
    case F_DTYPE:
        o->dtype = weight_dtype(v);
        return o->dtype == RC_DTYPE_COUNT ? cli_usage(cmd, "--dtype '%s': f32, bf16 or f16", v) : 0;
    case F_LOSS_SCALE: return cli_double(cmd, f, v, 1e-30, 1e30, &o->loss_scale);
    case F_LOSS_SCALE_WINDOW: return cli_int64(cmd, f, v, 1, big, &o->loss_scale_window);
    case F_RESUME: o->resume = 1; return 0;
    case F_NO_SHUFFLE: o->no_shuffle = 1; return 0;
    case F_NO_DROPOUT: o->no_dropout = 1; return 0;
    case F_SAVE_TOTAL_LIMIT: return cli_int64(cmd, f, v, 0, 1 << 20, &o->save_total_limit);
    case F_VOCAB_SIZE: return cli_int64(cmd, f, v, 2, 1 << 24, &o->vocab_size);
    case F_SEQ_LEN: return cli_int64(cmd, f, v, 1, 1 << 20, &o->seq_len);
    case F_BATCH: return cli_int64(cmd, f, v, 1, 1 << 20, &o->batch);
    case F_NPROC: return cli_int64(cmd, f, v, 1, 4096, &o->nproc);
    case F_MP: return cli_int64(cmd, f, v, 1, 4096, &o->mp);
    case F_STEPS: return cli_int64(cmd, f, v, 1, big, &o->steps);
    case F_EPOCHS: return cli_int64(cmd, f, v, 1, 1 << 20, &o->epochs);
    case F_WARMUP: return cli_int64(cmd, f, v, 0, big, &o->warmup);
    case F_ACCUM: return cli_int64(cmd, f, v, 1, 1 << 16, &o->accum);
    case F_SEED: return cli_int64(cmd, f, v, 0, INT64_MAX, &o->seed);
    case F_EVAL_EVERY: return cli_int64(cmd, f, v, 0, big, &o->eval_every);
    case F_SAVE_EVERY: return cli_int64(cmd, f, v, 0, big, &o->save_every);
    case F_LOG_EVERY: return cli_int64(cmd, f, v, 0, big, &o->log_every);
    case F_SHARD: return cli_shard(cmd, v, &o->shards);
    case F_LR: return cli_double(cmd, f, v, 0, 1e3, &o->lr);
    case F_WD: return cli_double(cmd, f, v, 0, 1e3, &o->wd);
    case F_CLIP: return cli_double(cmd, f, v, 0, 1e9, &o->clip);
    default: /* CLI_ARG */ return cli_usage(cmd, "unexpected argument '%s'", v);
    }
}

/* The fewest significant digits that give x back (17 at most). */
static int real_digits(double x)
{
    char text[40];
    for (int p = 1; p < 17; p++) {
        snprintf(text, sizeof text, "%.*g", p, x);
        if (strtod(text, NULL) == x)
            return p;
    }
    return 17;
}

/* A path as the run's configuration keeps it: from the root, so that the file works from
 * any directory; a name that is no path (a preset) as it is. */
static json_t *path_json(const char *path, int only_existing)
{
    char cwd[4096], full[8300];
    if (!path)
        return NULL;
    if (path[0] == '/' || (only_existing && access(path, F_OK)) || !getcwd(cwd, sizeof cwd))
        return json_string(path);
    snprintf(full, sizeof full, "%s/%s", cwd, path);
    return json_string(full);
}

/* One flag's value in the run's configuration (NULL: not given); *digits grows to the
 * digits its reals need. */
static json_t *option_json(const options *o, int flag, int *digits)
{
    double real = NAN;
    json_t *v = NULL;
    switch (flag) {
    case F_MODEL: return path_json(o->model, 1);
    case F_DATA: return path_json(o->data, 0);
    case F_TOKENIZER: return path_json(o->tokenizer, 0);
    case F_VOCAB_SIZE: return o->vocab_size ? json_integer(o->vocab_size) : NULL;
    case F_WORKDIR: return path_json(o->workdir, 0);
    case F_EVAL_DATA: return path_json(o->eval_data, 0);
    case F_OPTIMIZER: return json_string(o->optimizer);
    case F_SCHEDULE: return json_string(o->schedule);
    case F_DEVICE: return o->device ? json_string(o->device) : NULL;
    case F_TF32: return json_boolean(o->tf32);
    case F_PROFILE: return json_boolean(o->profile);
    case F_ATTENTION: return json_string(o->attention ? o->attention : "fused");
    case F_REMAT: return o->remat ? json_integer(o->remat) : json_false();
    case F_ZERO: return json_integer(o->zero);
    case F_DTYPE: return json_string(rc_dtype_name(o->dtype));
    case F_JSON: return json_boolean(o->json);
    case F_NO_SHUFFLE: return json_boolean(o->no_shuffle);
    case F_NO_DROPOUT: return json_boolean(o->no_dropout);
    case F_LORA_MERGE: return json_boolean(o->lora_merge);
    case F_LORA_TARGETS: return o->lora_targets ? json_string(o->lora_targets) : NULL;
    case F_SEQ_LEN: return json_integer(o->seq_len);
    case F_BATCH: return json_integer(o->batch);
    case F_NPROC: return rc_dist_size() > 1 ? json_integer(rc_dist_size()) : NULL; /* the processes it ran on */
    case F_MP: return json_integer(o->mp);
    case F_STEPS: return o->steps ? json_integer(o->steps) : NULL;
    case F_EPOCHS: return o->epochs ? json_integer(o->epochs) : NULL;
    case F_WARMUP: return json_integer(o->warmup);
    case F_ACCUM: return json_integer(o->accum);
    case F_SEED: return json_integer(o->seed);
    case F_EVAL_EVERY: return json_integer(o->eval_every);
    case F_SAVE_EVERY: return json_integer(o->save_every);
    case F_SAVE_TOTAL_LIMIT: return json_integer(o->save_total_limit);
    case F_LOG_EVERY: return json_integer(o->log_every);
    case F_LOSS_SCALE_WINDOW: return o->loss_scale_window ? json_integer(o->loss_scale_window) : NULL;
    case F_LORA_R: return o->lora_r ? json_integer(o->lora_r) : NULL;
    case F_SHARD:
        if (!o->shards.n)
            return NULL;
        v = json_array();
        for (int i = 0; i < o->shards.n; i++) {
            char text[200];
            const rc_shard_override *s = &o->shards.o[i];
            if (s->axis < 0)
                snprintf(text, sizeof text, "%s=replicated", o->shards.names[i]);
            else if (s->groups)
                snprintf(text, sizeof text, "%s=%d:%lld", o->shards.names[i], s->axis, (long long)s->groups);
            else
                snprintf(text, sizeof text, "%s=%d", o->shards.names[i], s->axis);
            json_array_append_new(v, json_string(text));
        }
        return v;
    case F_LR: real = o->lr; break;
    case F_WD: real = o->wd; break;
    case F_CLIP: real = o->clip; break;
    case F_COLL_TIMEOUT: real = o->coll_timeout; break;
    case F_LOSS_SCALE: real = o->loss_scale > 0 ? o->loss_scale : NAN; break;
    case F_LORA_ALPHA: real = o->lora_alpha > 0 ? o->lora_alpha : NAN; break;
    default: return NULL; /* --config and --resume: how a run was started, not what it is */
    }
    if (isnan(real))
        return NULL;
    int d = real_digits(real);
    *digits = d > *digits ? d : *digits;
    return json_real(real);
}

/* The run's effective configuration as JSON text (malloc'ed; NULL when out of memory):
 * every flag of train by its long name, null when not given, so that `redco train
 * --config WORKDIR/run_config.json` runs it again. */
static char *run_config_text(const options *o)
{
    json_t *root = json_object();
    int digits = 15; /* enough for what people type: 3e-4 reads 0.0003 */
    for (const struct option *f = train_flags; root && f->name; f++) {
        if (f->val == CLI_HELP || f->val == F_CONFIG || f->val == F_RESUME)
            continue;
        json_t *v = option_json(o, f->val, &digits);
        json_object_set_new(root, f->name, v ? v : json_null());
    }
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(digits)) : NULL;
    json_decref(root);
    size_t n = text ? strlen(text) : 0;
    char *line = text ? realloc(text, n + 2) : NULL;
    if (line)
        memcpy(line + n, "\n", 2);
    else
        free(text);
    return line;
}

/* The command line's flags, then --config's keys for the flags it did not give. */
typedef struct {
    options *o;
    unsigned char given[CLI_MAX_FLAGS];
} parsing;

static int take_given(const char *cmd, int c, const cli_args *a, void *user)
{
    parsing *p = user;
    if (c >= CLI_FLAG0 && c - CLI_FLAG0 < CLI_MAX_FLAGS)
        p->given[c - CLI_FLAG0] = 1;
    if (c == F_CONFIG) {
        p->o->config = a->value;
        return 0;
    }
    return take_flag(cmd, c, a, p->o);
}

/* Parses the flags of train (is_train) or eval; 0, -1 after --help, or the exit status of
 * a bad flag. */
static int parse(const char *cmd, int argc, char **argv, options *o, int is_train)
{
    *o = (options){.optimizer = "adamw", .schedule = "constant", .batch = 8, .seq_len = 64,
                   .accum = 1, .lr = 3e-4, .wd = 0.01, .clip = 1.0, .log_every = 10, .mp = 1,
                   .coll_timeout = 600};
    parsing p = {.o = o};
    const struct option *flags = is_train ? train_flags : eval_flags;
    int rc = cli_parse(cmd, argc, argv, flags, is_train ? train_help : eval_help, take_given, &p);
    if (!rc && o->config)
        rc = cli_config_read(cmd, o->config, flags, p.given, take_flag, o, &o->config_doc);
    if (rc)
        return rc;
    if (!o->model || !o->data)
        return cli_usage(cmd, "--model and --data are required");
    if (is_train && !o->workdir)
        return cli_usage(cmd, "--workdir is required");
    if (is_train && !o->steps && !o->epochs)
        return cli_usage(cmd, "give --steps N or --epochs N");
    if (is_train && o->steps && o->epochs)
        return cli_usage(cmd, "give --steps or --epochs, not both");
    if (!o->lora_r && (o->lora_targets || o->lora_alpha > 0 || o->lora_merge))
        return cli_usage(cmd, "--lora-targets, --lora-alpha and --lora-merge go with --lora-r R");
    if (strcmp(o->optimizer, "adamw") && strcmp(o->optimizer, "sgd"))
        return cli_usage(cmd, "--optimizer '%s' (adamw or sgd)", o->optimizer);
    if (strcmp(o->schedule, "constant") && strcmp(o->schedule, "linear") && strcmp(o->schedule, "cosine"))
        return cli_usage(cmd, "--schedule '%s' (constant, linear or cosine)", o->schedule);
    return 0;
}

/* What a tokenizer directory holds, for the lines that ask for one. */
static const char *tokenizer_dir_help =
    "a tokenizer directory holds tokenizer.json (Hugging Face tokenizers), vocab.json and merges.txt "
    "(GPT-2 byte-level BPE) or tokenizer.model (SentencePiece); 'redco tokenizer-train' makes one";

static int has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* --tokenizer PATH names a directory, or one of a tokenizer directory's own files */
static int tokenizer_path_ok(const char *path)
{
    struct stat st;
    if (stat(path, &st) || S_ISDIR(st.st_mode))
        return 1; /* a directory, or nothing: the loader says what is missing */
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return !strcmp(base, "tokenizer.json") || !strcmp(base, "vocab.json") || !strcmp(base, "merges.txt") ||
           has_suffix(base, ".model");
}

/* The tokenizer: --tokenizer, else the model directory's own files (NULL if it has none). */
static rc_tokenizer *open_tokenizer(const char *cmd, const options *o, const char **path, rc_error *err)
{
    *path = o->tokenizer;
    if (*path && !tokenizer_path_ok(*path)) {
        cli_fail(cmd, "--tokenizer %s is a file, not a tokenizer: %s", *path, tokenizer_dir_help);
        return NULL;
    }
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

/* Text data needs a tokenizer: 0, or 1 after the line that says how to give one. */
static int text_needs_tokenizer(const char *cmd, const char *data, const rc_tokenizer *tok)
{
    if (tok || !data || !(has_suffix(data, ".txt") || has_suffix(data, ".jsonl")))
        return 0;
    return cli_fail(cmd, "%s: text data needs a tokenizer: give --tokenizer DIR (%s), or a --model directory "
                    "that holds one", data, tokenizer_dir_help);
}

/* The model's configuration: DIR/config.json, or the preset's with its vocabulary set by
 * --vocab-size, else grown to the tokenizer's size. A tokenizer with ids past the
 * vocabulary is refused, one with fewer ids warned about. 0, or the exit status. */
static int model_config(const char *cmd, const options *o, const rc_tokenizer *tok, const char *tok_path,
                        rc_model_config *c, int *resized)
{
    rc_error err = {0};
    int is_dir = cli_model_is_dir(o->model);
    if (cli_model_config(o->model, c, &err))
        return cli_fail(cmd, "%s", err.msg);
    int64_t tv = tok ? rc_tokenizer_vocab_size(tok) : 0;
    int preset_vocab = c->vocab_size;
    *resized = 0;
    if (o->vocab_size && is_dir)
        return cli_usage(cmd, "--vocab-size: %s is a model directory; its config.json sets the vocabulary (%d)",
                         o->model, c->vocab_size);
    if (o->vocab_size)
        c->vocab_size = (int)o->vocab_size;
    else if (!is_dir && tv > c->vocab_size)
        c->vocab_size = (int)tv;
    if (tv > c->vocab_size)
        return cli_fail(cmd, "the tokenizer in %s has %lld ids, more than the model's vocabulary of %d: %s",
                        tok_path, (long long)tv, c->vocab_size,
                        is_dir ? "use a model with a vocabulary that large, or a smaller tokenizer"
                               : "give --vocab-size that large, or leave it out to take the tokenizer's");
    if (c->vocab_size != preset_vocab) {
        *resized = 1;
        if (cli_rank == 0 && !o->json)
            fprintf(stderr, "redco %s: %s with a vocabulary of %d ids (the preset has %d)\n", cmd, o->model,
                    c->vocab_size, preset_vocab);
        int32_t eos = tok ? rc_tokenizer_eos(tok) : -1, bos = tok ? rc_tokenizer_bos(tok) : -1;
        c->eos_token_id = eos >= 0 && eos < c->vocab_size ? eos : -1;
        c->bos_token_id = bos >= 0 && bos < c->vocab_size ? bos : c->eos_token_id;
        if (rc_config_validate(c, &err))
            return cli_fail(cmd, "%s", err.msg);
    }
    if (tok && tv < c->vocab_size && cli_rank == 0)
        fprintf(stderr, "redco %s: warning: the tokenizer in %s has %lld ids, fewer than the model's vocabulary "
                "of %d: ids %lld to %d never occur in the data\n", cmd, tok_path, (long long)tv, c->vocab_size,
                (long long)tv, c->vocab_size - 1);
    return 0;
}

/* Where tokenized text is cached: $REDCO_CACHE_DIR, else $XDG_CACHE_HOME/redco, else
 * $HOME/.cache/redco (NULL, beside the data, without a home) */
static const char *cache_dir(char *buf, size_t size)
{
    const char *dir = getenv("REDCO_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (dir && *dir)
        snprintf(buf, size, "%s", dir);
    else if (xdg && *xdg == '/')
        snprintf(buf, size, "%s/redco", xdg);
    else if (home && *home)
        snprintf(buf, size, "%s/.cache/redco", home);
    else
        return NULL;
    return buf;
}

static rc_dataset *open_data(const char *cmd, const char *path, rc_tokenizer *tok, const char *tok_path,
                             int verbose, rc_error *err)
{
    char dir[4200];
    rc_dataset_opts opts = {.tokenizer = tok, .tokenizer_path = tok_path, .cache_dir = cache_dir(dir, sizeof dir)};
    rc_dataset *ds = rc_dataset_open(path, &opts, err);
    if (!ds) {
        cli_fail(cmd, "%s", err->msg);
        return NULL;
    }
    const rc_dataset_info *info = rc_dataset_info_get(ds);
    if (verbose && info->cache == RC_CACHE_UNWRITABLE)
        fprintf(stderr, "redco %s: note: cannot write the token cache of %s in %s; tokens kept in memory\n", cmd,
                path, opts.cache_dir ? opts.cache_dir : "its directory");
    return ds;
}

typedef struct {
    rc_tokenizer *tok;
    rc_model *model;
    rc_lora *lora;
    rc_dataset *train, *eval;
    rc_task *task, *eval_task;
    rc_deployer *d;
} session;

static void session_free(session *s)
{
    rc_task_free(s->task);
    rc_task_free(s->eval_task);
    rc_deployer_free(s->d);
    rc_dataset_close(s->train);
    rc_dataset_close(s->eval);
    rc_lora_free(s->lora);
    rc_model_free(s->model);
    rc_tokenizer_free(s->tok);
}

/* Before the model is loaded: a training run's memory (the plan of its step, nothing
 * allocated) against its share of the device; 0, or 1 after the refusal. A plan that fails
 * says nothing here: building the step reports the same failure where it happens. */
static int preflight(const char *cmd, const options *o, const rc_model_config *c, rc_deployer *d)
{
    const rc_mesh *m = rc_deployer_mesh(d);
    rc_memory_options mo = {.dp = m->dp, .mp = m->mp, .batch = o->batch, .seq_len = o->seq_len, .zero = o->zero,
                            .remat = (int)o->remat, .no_dropout = o->no_dropout, .dtype = o->dtype,
                            .overrides = o->shards.o,
                            .n_overrides = o->shards.n, .backend = rc_deployer_backend(d),
                            .from_dir = cli_model_is_dir(o->model)};
    rc_rank_memory r;
    rc_error err = {0};
    int rc = 0, sharers = rc_deployer_device_sharers(d); /* collective: first, on every rank */
    if (!rc_memory_plan(c, &mo, &r, NULL))
        rc = rc_memory_fits(&r, &mo, sharers, o->model, &err);
    return rc_deployer_agree(d, rc, &err) ? cli_fail(cmd, "%s", err.msg) : 0;
}

/* Everything a run needs; 0 or an exit status. */
static int session_open(const char *cmd, const options *o, session *s, int *argc, char ***argv, int is_train)
{
    rc_error err = {0};
    const char *tok_path = NULL;
    memset(s, 0, sizeof *s);
    rc_deployer_options dopt = {.seed = (uint64_t)o->seed, .mp = (int)o->mp,
                                .workdir = is_train ? o->workdir : NULL, .verbose = 1, .json = o->json,
                                .device = o->device, .tf32 = o->tf32, .collective_timeout = o->coll_timeout > 0 ? o->coll_timeout : -1};
    if (rc_dist_init(argc, argv, &err))
        return cli_fail(cmd, "%s", err.msg);
    cli_rank = rc_dist_rank(); /* only rank 0 prints errors: every rank agrees on them first */
    char *config = is_train ? run_config_text(o) : NULL;
    dopt.run_config = config;
    s->d = rc_deployer_new(argc, argv, &dopt, &err);
    free(config);
    if (!s->d)
        return cli_fail(cmd, "%s", err.msg);
    s->tok = open_tokenizer(cmd, o, &tok_path, &err);
    if (!s->tok && tok_path)
        return 1;
    rc_model_config c;
    int rc, resized = 0;
    if ((rc = model_config(cmd, o, s->tok, tok_path, &c, &resized)) || text_needs_tokenizer(cmd, o->data, s->tok) ||
        text_needs_tokenizer(cmd, o->eval_data, s->tok))
        return rc ? rc : 1;
    if (is_train && !o->lora_r && preflight(cmd, o, &c, s->d))
        return 1;
    int main = rc_deployer_is_main(s->d);
    /* a preset of another vocabulary: made from its configuration */
    if (resized)
        s->model = rc_model_from_config(&c, (uint64_t)o->seed, &err);
    else
        s->model = rc_model_load(o->model, (uint64_t)o->seed, o->dtype, &err);
    if (s->model && o->dtype != RC_F32 && rc_params_dtype(s->model->params) != o->dtype &&
        rc_model_to_dtype(s->model, o->dtype, &err)) {
        rc_model_free(s->model);
        s->model = NULL;
    }
    if (!s->model)
        return cli_fail(cmd, "%s", err.msg);
    /* LoRA: the frozen model's weights live where the steps run (the trainer moves only the
     * adapters it trains) */
    if (o->lora_r && rc_params_to(s->model->params, rc_deployer_backend(s->d), &err))
        return cli_fail(cmd, "%s", err.msg);
    if (o->lora_r && !(s->lora = rc_lora_new(s->model, &(rc_lora_options){(int)o->lora_r, o->lora_alpha, o->lora_targets},
                                             (uint64_t)o->seed, &err)))
        return cli_fail(cmd, "%s", err.msg);
    if (o->lora) { /* eval: the adapter folded into the weights, which then run as any model's */
        rc_lora *l = rc_lora_load(s->model, o->lora, &err);
        int lrc = l ? rc_lora_merge(l, &err) : -1;
        rc_lora_free(l);
        if (lrc)
            return cli_fail(cmd, "--lora %s: %s", o->lora, err.msg);
    }
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
    if (!(s->task = rc_task_new(s->model, s->train, o->seq_len, &err)) ||
        (s->eval && !(s->eval_task = rc_task_new(s->model, s->eval, o->seq_len, &err))))
        return cli_fail(cmd, "%s: %s", o->data, err.msg);
    return 0;
}

/* After a LoRA fit: the saving printed (this process's trainer state, measured, against what
 * full fine-tuning's weights, gradients and AdamW moments of the model would take), then
 * workdir/adapter/ (PEFT) and with --lora-merge workdir/merged/ written by rank 0. */
static int lora_finish(const options *o, session *s, const rc_train_result *res, int64_t *full_state, rc_error *err)
{
    int64_t base = rc_params_numel(s->model->params), trained = rc_lora_numel(s->lora);
    int64_t per = (int64_t)rc_dtype_size(o->dtype) + 4 + 8 + (o->dtype != RC_F32 ? 4 : 0); /* w, grad, m, v (master) */
    *full_state = base * per / (o->mp > 0 ? o->mp : 1);
    int rc = 0;
    if (rc_deployer_is_main(s->d)) {
        if (!o->json)
            printf("LoRA r=%d: %lld trainable parameters of %lld (%.3f%%); trainer state %.3f MiB, full fine-tuning "
                   "would keep %.3f MiB (%.1fx less)\n", rc_lora_rank(s->lora), (long long)trained,
                   (long long)(base + trained), 100.0 * (double)trained / (double)(base + trained),
                   res->state_bytes / 1048576.0, *full_state / 1048576.0,
                   res->state_bytes ? (double)*full_state / (double)res->state_bytes : 0.0);
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/adapter", o->workdir);
        rc = rc_lora_save(s->lora, dir, err);
        snprintf(dir, sizeof dir, "%s/merged", o->workdir);
        if (!rc && o->lora_merge)
            rc = rc_lora_merge(s->lora, err) ||
                 rc_model_save(s->model, dir, o->tokenizer ? o->tokenizer : s->model->dir[0] ? s->model->dir : NULL, err);
    }
    return rc_deployer_agree(s->d, rc, err);
}

static int train(int argc, char **argv, options *op)
{
    const char *cmd = "train";
    options o;
    int rc = parse(cmd, argc, argv, &o, 1);
    op->config_doc = o.config_doc;
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
    /* LoRA: the trainer's parameters are the adapters (no model config in its checkpoints) */
    rc_trainer *t = s.lora ? rc_trainer_new(s.d, rc_task_collate, rc_task_loss, s.task, rc_lora_params(s.lora), NULL, &err)
                           : rc_trainer_new(s.d, rc_task_collate, rc_task_loss, s.task, s.model->params, s.model, &err);
    rc_train_options to = {.steps = o.steps, .epochs = (int)o.epochs, .batch_size = (int)o.batch,
                           .grad_accum = (int)o.accum, .shuffle = !o.no_shuffle, .optimizer = o.optimizer,
                           .lr = o.lr, .weight_decay = o.wd, .grad_clip = o.clip, .remat = (int)o.remat, .zero = o.zero, .no_dropout = o.no_dropout,
                           .profile = o.profile, .dtype = o.dtype, .loss_scale = o.loss_scale, .loss_scale_window = o.loss_scale_window,
                           .warmup = o.warmup,
                           .schedule = !strcmp(o.schedule, "linear") ? RC_SCHEDULE_LINEAR
                                       : !strcmp(o.schedule, "cosine") ? RC_SCHEDULE_COSINE
                                                                        : RC_SCHEDULE_CONSTANT,
                           .log_every = o.log_every, .eval_every = o.eval_every, .save_every = o.save_every,
                           .save_total_limit = (int)o.save_total_limit,
                           .shard_overrides = o.shards.o, .n_shard_overrides = o.shards.n,
                           .resume = o.resume, .catch_signals = 1, .tokenizer_dir = o.tokenizer ? o.tokenizer : s.model->dir[0] ? s.model->dir : NULL};
    rc_examples train = {rc_task_count, s.task}, eval = {rc_task_count, s.eval_task};
    rc_train_result res = {0};
    rc = t ? rc_trainer_fit(t, &to, train, s.eval ? &eval : NULL, &res, &err) : -1;
    int64_t full_state = 0;
    if (!rc && s.lora)
        rc = lora_finish(&o, &s, &res, &full_state, &err);
    int stopped = rc && err.code == RC_ERR_INTERRUPTED ? res.stop_signal : 0;
    if (rc)
        cli_fail(cmd, "%s", err.msg);
    else if (o.json && rc_deployer_is_main(s.d)) {
        json_t *j = json_pack("{s:I, s:o, s:o, s:o}", "step", (json_int_t)res.step, "loss",
                              cli_json_real(res.loss), "eval_loss", cli_json_real(res.eval_loss), "lr",
                              cli_json_real(res.lr));
        if (j && s.lora) { /* the LoRA saving: this process's trainer state against full fine-tuning's */
            json_object_set_new(j, "state_bytes", json_integer((json_int_t)res.state_bytes));
            json_object_set_new(j, "full_state_bytes", json_integer((json_int_t)full_state));
        }
        cli_print_json(j);
    }
    rc_trainer_free(t);
    session_free(&s);
    rc_dist_finalize();
    return stopped ? 128 + stopped : rc ? 1 : 0; /* a shell's code for a death by that signal */
}

int cmd_train(int argc, char **argv)
{
    options o = {0};
    int rc = train(argc, argv, &o);
    json_decref(o.config_doc);
    return rc;
}

int cmd_eval(int argc, char **argv)
{
    const char *cmd = "eval";
    options o;
    int rc = parse(cmd, argc, argv, &o, 0);
    json_decref(o.config_doc); /* eval takes no --config */
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
    rc_trainer *t = rc_trainer_new(s.d, rc_task_collate, rc_task_loss, s.task, s.model->params, s.model, &err);
    double loss = NAN;
    int64_t tokens = 0;
    rc = t ? rc_trainer_eval(t, (rc_examples){rc_task_count, s.task}, (int)o.batch, &loss, &tokens, &err) : -1;
    if (rc) {
        cli_fail(cmd, "%s", err.msg);
    } else if (rc_deployer_is_main(s.d)) {
        if (o.json)
            cli_print_json(json_pack("{s:o, s:o, s:I}", "loss", cli_json_real(loss), "ppl", cli_json_real(exp(loss)),
                                     "tokens", (json_int_t)tokens));
        else
            printf("loss %.4f  ppl %.2f  tokens %lld\n", loss, exp(loss), (long long)tokens);
    }
    rc_trainer_free(t);
    session_free(&s);
    rc_dist_finalize();
    return rc ? 1 : 0;
}
