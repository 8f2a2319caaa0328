/* cmd_generate.c - `redco generate`: continue a prompt with a model directory's model and
 * tokenizer (greedy, sampling with temperature / top-k / top-p and a seed, or beam search). */
#include "cli.h"
#include "redco/dist.h"
#include "redco/lora.h"
#include "redco/predict.h"
#include "redco/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *help =
    "usage: redco generate --model DIR --prompt TEXT [--max-new-tokens N] [--temperature T]\n"
    "                      [--top-k K] [--top-p P] [--num-beams B] [--seed S] [--tokenizer DIR]\n"
    "                      [--dtype f32|bf16|f16] [--mp N] [--allow-replicate] [--nproc P]\n"
    "                      [--device D] [--tf32] [--attention fused|products|unfused] [--lora DIR] [--json]\n"
    "\n"
    "Continues the prompt with the model (a Hugging Face model directory, e.g. a workdir's\n"
    "final/) and prints the prompt and the new text. Temperature 0 (the default) is greedy;\n"
    "with a temperature the same seed gives the same text. Generation stops at the model's\n"
    "end-of-sequence token or after --max-new-tokens (default 40). For T5 the prompt is the\n"
    "encoder's input. --device cpu|opencl|opencl:N|cuda|cuda:N runs it there (default:\n"
    "$REDCO_DEVICE, else cpu); --tf32 lets a CUDA device's f32 matrix products use TF32 tensor\n"
    "cores (faster, 10-bit mantissas; default exact f32). --dtype bf16 or f16 loads the weights in 16 bits (converted from the\n"
    "checkpoint's dtype; a BF16 checkpoint in bf16 as stored) and runs the model and its\n"
    "key/value cache in that dtype, halving the bytes read per token; default f32.\n"
    "--attention unfused records attention as product, softmax, product instead of the fused\n"
    "op (default), as `redco train --attention`.\n"
    "--lora DIR applies a PEFT LoRA adapter directory (e.g. a workdir's adapter/ from\n"
    "`redco train --lora-r`), folded into the weights.\n"
    "With --json the last line of stdout is\n"
    "{\"prompt\": ..., \"text\": ..., \"ids\": [...], \"prompt_ids\": [...]}.\n"
    "\n"
    "Under a launcher (mpirun -np P, or --nproc P) the model is split over --mp N processes\n"
    "(default: all of them) by the same plan as training: each holds its shards of the\n"
    "weights and its heads of the key/value cache, and the text is the one process's.\n";

typedef struct {
    const char *model, *prompt, *tokenizer, *device, *lora;
    rc_dtype dtype;
    int64_t max_new, top_k, beams, seed, mp, nproc;
    double temperature, top_p;
    int json, allow_replicate, tf32;
} options;

enum {
    F_MODEL = CLI_FLAG0, F_PROMPT, F_TOKENIZER, F_MAX_NEW, F_TOP_K, F_BEAMS, F_SEED, F_TEMPERATURE, F_TOP_P,
    F_MP, F_NPROC, F_JSON, F_ALLOW_REPLICATE, F_DEVICE, F_DTYPE, F_LORA, F_TF32, F_ATTENTION
};

static const struct option flags[] = {
    {"help", no_argument, NULL, CLI_HELP},
    {"model", required_argument, NULL, F_MODEL},
    {"prompt", required_argument, NULL, F_PROMPT},
    {"tokenizer", required_argument, NULL, F_TOKENIZER},
    {"max-new-tokens", required_argument, NULL, F_MAX_NEW},
    {"top-k", required_argument, NULL, F_TOP_K},
    {"num-beams", required_argument, NULL, F_BEAMS},
    {"seed", required_argument, NULL, F_SEED},
    {"temperature", required_argument, NULL, F_TEMPERATURE},
    {"top-p", required_argument, NULL, F_TOP_P},
    {"mp", required_argument, NULL, F_MP},
    {"nproc", required_argument, NULL, F_NPROC},
    {"json", no_argument, NULL, F_JSON},
    {"allow-replicate", no_argument, NULL, F_ALLOW_REPLICATE},
    {"device", required_argument, NULL, F_DEVICE},
    {"tf32", no_argument, NULL, F_TF32},
    {"attention", required_argument, NULL, F_ATTENTION},
    {"dtype", required_argument, NULL, F_DTYPE},
    {"lora", required_argument, NULL, F_LORA},
    {NULL, 0, NULL, 0},
};

/* Reads one flag into o; 0, or 2 after a usage error. */
static int take_flag(const char *cmd, int c, const cli_args *a, void *user)
{
    options *o = user;
    const char *f = a->flag, *v = a->value;
    switch (c) {
    case F_MODEL: o->model = v; return 0;
    case F_DEVICE: o->device = v; return 0;
    case F_TF32: o->tf32 = 1; return 0;
    case F_ATTENTION: return cli_attention(cmd, v);
    case F_LORA: o->lora = v; return 0;
    case F_DTYPE:
        if (!strcmp(v, "f32") || !strcmp(v, "float32"))
            o->dtype = RC_F32;
        else if (!strcmp(v, "bf16") || !strcmp(v, "bfloat16"))
            o->dtype = RC_BF16;
        else if (!strcmp(v, "f16") || !strcmp(v, "float16"))
            o->dtype = RC_F16;
        else
            return cli_usage(cmd, "%s '%s': one of f32, bf16, f16", f, v);
        return 0;
    case F_PROMPT: o->prompt = v; return 0;
    case F_TOKENIZER: o->tokenizer = v; return 0;
    case F_JSON: o->json = 1; return 0;
    case F_ALLOW_REPLICATE: o->allow_replicate = 1; return 0;
    case F_MAX_NEW: return cli_int64(cmd, f, v, 1, 1 << 20, &o->max_new);
    case F_TOP_K: return cli_int64(cmd, f, v, 0, 1 << 30, &o->top_k);
    case F_BEAMS: return cli_int64(cmd, f, v, 1, 64, &o->beams);
    case F_SEED: return cli_int64(cmd, f, v, 0, INT64_MAX, &o->seed);
    case F_TEMPERATURE: return cli_double(cmd, f, v, 0, 1e3, &o->temperature);
    case F_TOP_P: return cli_double(cmd, f, v, 0, 1, &o->top_p);
    case F_MP: return cli_int64(cmd, f, v, 1, 4096, &o->mp);
    case F_NPROC: return cli_int64(cmd, f, v, 1, 4096, &o->nproc);
    default: /* CLI_ARG */ return cli_usage(cmd, "unexpected argument '%s'", v);
    }
}

/* 0, -1 after --help, or the exit status of a bad flag */
static int parse(const char *cmd, int argc, char **argv, options *o)
{
    *o = (options){.max_new = 40, .top_p = 1.0, .beams = 1, .dtype = RC_F32};
    int rc = cli_parse(cmd, argc, argv, flags, help, take_flag, o);
    if (rc)
        return rc;
    if (!o->model || !o->prompt)
        return cli_usage(cmd, "--model and --prompt are required");
    if (o->beams > 1 && o->temperature > 0)
        return cli_usage(cmd, "--num-beams with --temperature: beam search is deterministic");
    return 0;
}

static void print_json(const options *o, const char *text, const int32_t *ids, int64_t n,
                       const int32_t *prompt, int64_t np)
{
    json_t *out = json_object(), *a = json_array(), *p = json_array();
    for (int64_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    for (int64_t i = 0; i < np; i++)
        json_array_append_new(p, json_integer(prompt[i]));
    json_object_set_new(out, "prompt", json_string(o->prompt));
    json_object_set_new(out, "text", json_string(text));
    json_object_set_new(out, "ids", a);
    json_object_set_new(out, "prompt_ids", p);
    cli_print_json(out);
}

/* The prompt continued by the model; 0 or -1 with err set. */
static int generate_text(const options *o, rc_deployer *d, rc_model *m, rc_tokenizer **tok, char **text,
                         int32_t **prompt, int64_t *np, int32_t **ids, int64_t *n, rc_error *err)
{
    size_t len = 0;
    if (!(*tok = rc_tokenizer_load(o->tokenizer ? o->tokenizer : o->model, err)) ||
        rc_tokenizer_encode(*tok, o->prompt, strlen(o->prompt), 1, prompt, np, err))
        return -1;
    rc_generate_options g = rc_generate_defaults(m);
    g.max_new_tokens = (int)o->max_new;
    g.temperature = o->temperature;
    g.top_k = (int)o->top_k;
    g.top_p = o->top_p;
    g.seed = (uint64_t)o->seed;
    g.num_beams = (int)o->beams;
    g.deployer = d;
    g.allow_replicate = o->allow_replicate;
    if (rc_generate(m, *prompt, *np, &g, ids, n, err))
        return -1;
    return rc_tokenizer_decode(*tok, *ids, *n, 1, text, &len, err);
}

int cmd_generate(int argc, char **argv)
{
    const char *cmd = "generate";
    options o;
    int rc = parse(cmd, argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    if ((rc = cli_relaunch(cmd, (int)o.nproc, argc, argv)) >= 0)
        return rc;
    rc_error err = {0};
    rc_deployer *d = NULL;
    rc_model *m = NULL;
    rc_tokenizer *tok = NULL;
    int32_t *prompt = NULL, *ids = NULL;
    int64_t np = 0, n = 0;
    char *text = NULL;
    rc = rc_dist_init(&argc, &argv, &err);
    cli_rank = rc_dist_rank(); /* only rank 0 prints */
    rc_deployer_options dopt = {.seed = (uint64_t)o.seed, .mp = o.mp ? (int)o.mp : rc_dist_size(), .json = o.json,
                                .device = o.device, .tf32 = o.tf32};
    if (!rc && !(d = rc_deployer_new(&argc, &argv, &dopt, &err)))
        rc = -1;
    if (!rc && !(m = rc_model_load(o.model, 0, o.dtype, &err)))
        rc = -1;
    if (!rc && o.lora) { /* the adapter folded into the weights */
        rc_lora *l = rc_lora_load(m, o.lora, &err);
        rc = l ? rc_lora_merge(l, &err) : -1;
        rc_lora_free(l); /* its errors name the adapter's files */
    }
    if (!rc)
        rc = rc_params_to(m->params, rc_deployer_backend(d), &err);
    if (!rc)
        rc = generate_text(&o, d, m, &tok, &text, &prompt, &np, &ids, &n, &err);
    if (d)
        rc = rc_deployer_agree(d, rc, &err);
    if (rc) {
        cli_fail(cmd, "%s", err.msg);
    } else if (rc_deployer_is_main(d) && o.json) {
        print_json(&o, text, ids, n, prompt, np);
    } else if (rc_deployer_is_main(d)) {
        /* a decoder continues the prompt; T5's output stands on its own */
        printf("%s%s\n", m->config.type == RC_MODEL_T5 ? "" : o.prompt, text);
    }
    free(text);
    free(ids);
    free(prompt);
    rc_tokenizer_free(tok);
    rc_model_free(m);
    rc_deployer_free(d);
    rc_dist_finalize();
    return rc ? 1 : 0;
}
