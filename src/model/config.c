/* config.c - Hugging Face config.json for the five model families: loading with the
 * defaults of the transformers 4.36 config classes, validation, saving, presets and
 * parameter counts. */
#include "redco/model.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- family tables ------------------------------------------------------------------ */

/* The fields whose HF key a validation message names. */
enum {
    K_VOCAB, K_DMODEL, K_NLAYER, K_NDEC, K_NHEAD, K_NKV, K_HEADDIM, K_DFF, K_MAXPOS, K_EPS,
    K_ROTARY, K_ACT, K_WPROJ, K_BUCKETS, K_MAXDIST, K_THETA, K_WINDOW, K_COUNT
};

static const char *const key_table[RC_MODEL_TYPE_COUNT][K_COUNT] = {
    [RC_MODEL_GPT2] = {"vocab_size", "n_embd", "n_layer", "-", "n_head", "-", "head_dim",
                       "n_inner", "n_positions", "layer_norm_epsilon", "-",
                       "activation_function", "-", "-", "-", "-", "-"},
    [RC_MODEL_LLAMA] = {"vocab_size", "hidden_size", "num_hidden_layers", "-",
                        "num_attention_heads", "num_key_value_heads", "head_dim",
                        "intermediate_size", "max_position_embeddings", "rms_norm_eps", "-",
                        "hidden_act", "-", "-", "-", "rope_theta", "sliding_window"},
    [RC_MODEL_OPT] = {"vocab_size", "hidden_size", "num_hidden_layers", "-",
                      "num_attention_heads", "-", "head_dim", "ffn_dim",
                      "max_position_embeddings", "layer_norm_eps", "-", "activation_function",
                      "word_embed_proj_dim", "-", "-", "-", "-"},
    [RC_MODEL_GPTJ] = {"vocab_size", "n_embd", "n_layer", "-", "n_head", "-", "head_dim",
                       "n_inner", "n_positions", "layer_norm_epsilon", "rotary_dim",
                       "activation_function", "-", "-", "-", "-", "-"},
    [RC_MODEL_T5] = {"vocab_size", "d_model", "num_layers", "num_decoder_layers", "num_heads",
                     "-", "d_kv", "d_ff", "n_positions", "layer_norm_epsilon", "-",
                     "dense_act_fn", "-", "relative_attention_num_buckets",
                     "relative_attention_max_distance", "-", "-"},
};

static const char *key_of(const rc_model_config *c, int k)
{
    return c->type < RC_MODEL_TYPE_COUNT ? key_table[c->type][k] : "?";
}

/* transformers' class defaults (GPT2Config(), LlamaConfig(), MistralConfig(), OPTConfig(),
 * GPTJConfig(), T5Config()). -1 in a size marks "derived after reading" (n_inner None,
 * num_key_value_heads None, ...). */
static void config_defaults(rc_model_type type, const char *model_type, rc_model_config *c)
{
    memset(c, 0, sizeof *c);
    c->type = type;
    snprintf(c->model_type, sizeof c->model_type, "%s", model_type);
    c->bos_token_id = c->eos_token_id = c->pad_token_id = c->decoder_start_token_id = -1;
    c->n_kv_head = c->head_dim = -1;
    switch (type) {
    case RC_MODEL_GPT2:
    case RC_MODEL_GPTJ:
        c->d_ff = -1;
        c->norm_eps = 1e-5;
        snprintf(c->activation, sizeof c->activation, "gelu_new");
        c->bos_token_id = c->eos_token_id = 50256;
        if (type == RC_MODEL_GPT2) {
            c->vocab_size = 50257, c->max_positions = 1024, c->d_model = 768;
            c->n_layer = 12, c->n_head = 12;
            c->tie_word_embeddings = 1;
            c->resid_dropout = c->embd_dropout = c->attn_dropout = 0.1;
        } else {
            c->vocab_size = 50400, c->max_positions = 2048, c->d_model = 4096;
            c->n_layer = 28, c->n_head = 16, c->rotary_dim = 64;
            c->rope_theta = 10000.0;  /* fixed in GPT-J's sinusoid table */
        }
        break;
    case RC_MODEL_LLAMA:
        c->vocab_size = 32000, c->d_model = 4096, c->n_layer = 32, c->n_head = 32;
        c->max_positions = 2048, c->d_ff = 11008;
        c->norm_eps = 1e-6, c->rope_theta = 10000.0, c->gated_ffn = 1;
        snprintf(c->activation, sizeof c->activation, "silu");
        c->bos_token_id = 1, c->eos_token_id = 2;
        if (strcmp(model_type, "mistral") == 0) {
            c->n_kv_head = 8, c->max_positions = 4096 * 32, c->d_ff = 14336;
            c->sliding_window = 4096;
        }
        break;
    case RC_MODEL_OPT:
        c->vocab_size = 50272, c->d_model = 768, c->n_layer = 12, c->n_head = 12;
        c->d_ff = 3072, c->max_positions = 2048, c->word_embed_proj_dim = -1;
        c->norm_eps = 1e-5;  /* nn.LayerNorm's default; OPTConfig has no key for it */
        snprintf(c->activation, sizeof c->activation, "relu");
        c->do_layer_norm_before = 1, c->enable_bias = 1, c->layer_norm_affine = 1;
        c->tie_word_embeddings = 1;
        c->resid_dropout = c->embd_dropout = 0.1;
        c->pad_token_id = 1, c->bos_token_id = 2, c->eos_token_id = 2;
        break;
    case RC_MODEL_T5:
        c->vocab_size = 32128, c->d_model = 512, c->head_dim = 64, c->d_ff = 2048;
        c->n_layer = 6, c->n_decoder_layer = -1, c->n_head = 8;
        c->rel_buckets = 32, c->rel_max_distance = 128;
        c->norm_eps = 1e-6;
        snprintf(c->activation, sizeof c->activation, "relu");
        c->tie_word_embeddings = 1;
        c->resid_dropout = c->embd_dropout = c->attn_dropout = 0.1;
        c->pad_token_id = 0, c->eos_token_id = 1;
        break;
    default:
        break;
    }
}

/* Fills the "-1: derive" fields, as the HF classes do with their None defaults; a derived
 * size that does not fit an int (4 x n_embd) is an error naming where. */
static int config_derive(rc_model_config *c, const char *where, rc_error *err)
{
    if (c->d_ff < 0) {
        int64_t ff = 4 * (int64_t)c->d_model;
        if (ff > INT_MAX)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: the default %s, 4 x %s = 4 x %d = "
                                "%lld, is more than %d", where, key_of(c, K_DFF),
                                key_of(c, K_DMODEL), c->d_model, (long long)ff, INT_MAX);
        c->d_ff = (int)ff;
    }
    if (c->type == RC_MODEL_LLAMA && c->n_kv_head < 0)
        c->n_kv_head = c->n_head;
    if (c->type != RC_MODEL_LLAMA)
        c->n_kv_head = c->n_head;
    if (c->head_dim < 0)  /* left 0 when heads don't divide d_model: validation says so */
        c->head_dim = c->n_head > 0 && c->d_model % c->n_head == 0 ? c->d_model / c->n_head : 0;
    if (c->type == RC_MODEL_GPTJ && c->rotary_dim < 0)
        c->rotary_dim = c->head_dim;
    if (c->type == RC_MODEL_LLAMA)
        c->rotary_dim = c->head_dim;
    if (c->type == RC_MODEL_OPT && c->word_embed_proj_dim < 0)
        c->word_embed_proj_dim = c->d_model;
    if (c->type == RC_MODEL_T5 && c->n_decoder_layer < 0)
        c->n_decoder_layer = c->n_layer;
    if (c->type == RC_MODEL_T5 && c->decoder_start_token_id < 0)
        c->decoder_start_token_id = c->pad_token_id;
    return 0;
}

int rc_config_activation(const char *name)
{
    static const struct { const char *name; int act; } acts[] = {
        {"relu", RC_ACT_RELU}, {"gelu", RC_ACT_GELU_ERF}, {"gelu_new", RC_ACT_GELU_TANH},
        {"gelu_fast", RC_ACT_GELU_TANH}, {"gelu_pytorch_tanh", RC_ACT_GELU_TANH},
        {"silu", RC_ACT_SILU}, {"swish", RC_ACT_SILU}, {"sigmoid", RC_ACT_SIGMOID},
    };
    for (size_t i = 0; name && i < sizeof acts / sizeof acts[0]; i++)
        if (strcmp(name, acts[i].name) == 0)
            return acts[i].act;
    return -1;
}

const char *rc_config_architecture(const rc_model_config *c)
{
    switch (c->type) {
    case RC_MODEL_GPT2: return "GPT2LMHeadModel";
    case RC_MODEL_LLAMA:
        return strcmp(c->model_type, "mistral") == 0 ? "MistralForCausalLM" : "LlamaForCausalLM";
    case RC_MODEL_OPT: return "OPTForCausalLM";
    case RC_MODEL_GPTJ: return "GPTJForCausalLM";
    case RC_MODEL_T5: return "T5ForConditionalGeneration";
    default: return "?";
    }
}

/* ---- size limits -------------------------------------------------------------------- */

/* What a config may ask for. Each size field is read into an int (kernels and shapes take
 * int dimensions), so products that form one dimension (n_head x head_dim, 3 x n_embd) must
 * fit an int too. The parameter count is capped at 2^40 (1.1e12, 4.4 TB in float32: above
 * every published dense model, below what 64-bit sizes and offsets address with room for
 * gradients and optimizer state), and the layer count at 4096 (30 times the deepest
 * published model) because the graph and the memory plan hold a record per layer. */
#define MAX_PARAMS 0x1p40
#define MAX_LAYERS 4096

static double count_params(const rc_model_config *c);

/* "4.4 TB": decimal units, as disks and clusters quote them. */
static void bytes_text(double b, char *buf, size_t size)
{
    static const char *units[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
    int u = 0;
    while (b >= 1000 && u < 8)
        b /= 1000, u++;
    snprintf(buf, size, "%.3g %s", b, units[u]);
}

static int config_check_sizes(const rc_model_config *c, const char *where, rc_error *err)
{
    const struct { int k; int v; } layers[] = {{K_NLAYER, c->n_layer}, {K_NDEC, c->n_decoder_layer}};
    for (int i = 0; i < 2; i++)
        if (layers[i].v > MAX_LAYERS)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: %s %d is more than the %d layers "
                                "redco builds", where, key_of(c, layers[i].k), layers[i].v,
                                MAX_LAYERS);
    const int64_t q = (int64_t)c->n_head * c->head_dim;
    if (q > INT_MAX)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s %d x %s %d = %lld is more than %d",
                            where, key_of(c, K_NHEAD), c->n_head, key_of(c, K_HEADDIM),
                            c->head_dim, (long long)q, INT_MAX);
    if ((int64_t)3 * c->d_model > INT_MAX || (int64_t)c->max_positions + 2 > INT_MAX)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s %d or %s %d is too large (3 x %s and "
                            "%s + 2 must be at most %d)", where, key_of(c, K_DMODEL),
                            c->d_model, key_of(c, K_MAXPOS), c->max_positions,
                            key_of(c, K_DMODEL), key_of(c, K_MAXPOS), INT_MAX);
    const double n = count_params(c);
    if (n > MAX_PARAMS) {
        char bytes[32];
        bytes_text(4 * n, bytes, sizeof bytes);
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s %d, %s %d, %s %d and %s %d give %.3g "
                            "parameters (%s in float32), more than the limit of %.3g (2^40)",
                            where, key_of(c, K_NLAYER), c->n_layer, key_of(c, K_DMODEL),
                            c->d_model, key_of(c, K_DFF), c->d_ff, key_of(c, K_VOCAB),
                            c->vocab_size, n, bytes, MAX_PARAMS);
    }
    return 0;
}

/* ---- validation --------------------------------------------------------------------- */

/* where: the file, or "<model_type> config". */
static int config_check(const rc_model_config *c, const char *where, rc_error *err)
{
    if (c->type < 0 || c->type >= RC_MODEL_TYPE_COUNT)
        return rc_error_set(err, RC_ERR_ARG, "%s: unknown model type %d", where, (int)c->type);
    const int t5 = c->type == RC_MODEL_T5;
    const struct { int k, v; } pos[] = {
        {K_VOCAB, c->vocab_size}, {K_DMODEL, c->d_model}, {K_NLAYER, c->n_layer},
        {K_NHEAD, c->n_head}, {K_DFF, c->d_ff},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v < 1)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: %s must be positive, got %d", where,
                                key_of(c, pos[i].k), pos[i].v);
    if (t5 && c->n_decoder_layer < 1)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: num_decoder_layers must be positive, got %d",
                            where, c->n_decoder_layer);
    if (!t5 && c->max_positions < 1)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s must be positive, got %d", where,
                            key_of(c, K_MAXPOS), c->max_positions);
    if (c->head_dim < 1) {
        if (!t5 && c->d_model % c->n_head != 0)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: %s %d does not divide %s %d", where,
                                key_of(c, K_NHEAD), c->n_head, key_of(c, K_DMODEL), c->d_model);
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s must be positive, got %d", where,
                            key_of(c, K_HEADDIM), c->head_dim);
    }
    /* GPT-2, OPT and GPT-J split d_model into heads; LLaMA may set head_dim; T5 has d_kv. */
    if (c->type != RC_MODEL_LLAMA && !t5 && c->head_dim * c->n_head != c->d_model)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s %d does not divide %s %d", where,
                            key_of(c, K_NHEAD), c->n_head, key_of(c, K_DMODEL), c->d_model);
    if (c->type == RC_MODEL_LLAMA) {
        if (c->n_kv_head < 1 || c->n_head % c->n_kv_head != 0)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: %s %d does not divide %s %d", where,
                                key_of(c, K_NKV), c->n_kv_head, key_of(c, K_NHEAD), c->n_head);
        if (c->head_dim % 2 != 0)
            return rc_error_set(err, RC_ERR_FORMAT,
                                "%s: the head size %d (%s / %s) must be even for rotary "
                                "embeddings", where, c->head_dim, key_of(c, K_DMODEL),
                                key_of(c, K_NHEAD));
        if (!(c->rope_theta > 0) || !isfinite(c->rope_theta))
            return rc_error_set(err, RC_ERR_FORMAT, "%s: rope_theta must be positive, got %g",
                                where, c->rope_theta);
        if (c->sliding_window < 0)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: sliding_window must not be negative, "
                                "got %d", where, c->sliding_window);
    } else if (c->n_kv_head != 0 && c->n_kv_head != c->n_head) {
        return rc_error_set(err, RC_ERR_FORMAT, "%s: n_kv_head %d differs from %s %d; only "
                            "llama/mistral configs have key/value head groups", where,
                            c->n_kv_head, key_of(c, K_NHEAD), c->n_head);
    }
    if (c->type == RC_MODEL_GPTJ &&
        (c->rotary_dim < 2 || c->rotary_dim % 2 != 0 || c->rotary_dim > c->head_dim))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: rotary_dim %d must be even and in "
                            "[2, %d] (the head size n_embd / n_head)", where, c->rotary_dim,
                            c->head_dim);
    if (c->type == RC_MODEL_OPT && c->word_embed_proj_dim < 1)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: word_embed_proj_dim must be positive, "
                            "got %d", where, c->word_embed_proj_dim);
    if (t5) {
        /* the bucket formula takes log(max_distance / max_exact), max_exact = buckets / 2
         * (decoder) or buckets / 4 (encoder): both must be positive and smaller */
        if (c->rel_buckets < 4 || c->rel_buckets % 2 != 0)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: relative_attention_num_buckets %d "
                                "must be even and at least 4", where, c->rel_buckets);
        if (c->rel_max_distance <= c->rel_buckets / 2)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: relative_attention_max_distance %d "
                                "must exceed relative_attention_num_buckets / 2 = %d", where,
                                c->rel_max_distance, c->rel_buckets / 2);
    }
    if (!(c->norm_eps > 0) || !isfinite(c->norm_eps))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s must be positive, got %g", where,
                            key_of(c, K_EPS), c->norm_eps);
    if (rc_config_activation(c->activation) < 0)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: %s '%s' is not supported (relu, "
                            "gelu, gelu_new, gelu_fast, gelu_pytorch_tanh, silu, swish, sigmoid)",
                            where, key_of(c, K_ACT), c->activation);
    const double drops[3] = {c->resid_dropout, c->embd_dropout, c->attn_dropout};
    for (int i = 0; i < 3; i++)
        if (!(drops[i] >= 0 && drops[i] < 1))
            return rc_error_set(err, RC_ERR_FORMAT, "%s: dropout probabilities must be in "
                                "[0, 1), got %g", where, drops[i]);
    return config_check_sizes(c, where, err);
}

int rc_config_validate(const rc_model_config *c, rc_error *err)
{
    char where[64];
    snprintf(where, sizeof where, "%s config", c->model_type[0] ? c->model_type : "model");
    return config_check(c, where, err);
}

/* ---- reading ------------------------------------------------------------------------ */

typedef struct {
    json_t *root;
    const char *file;
    rc_error *err;
} cfg_reader;

enum { KEY_ABSENT = 0, KEY_SET = 1, KEY_NULL = 2 };

/* Reads an integer key: KEY_ABSENT, KEY_SET (stored), KEY_NULL, or -1 (wrong type). */
static int read_int(cfg_reader *r, const char *key, int *dst)
{
    json_t *v = json_object_get(r->root, key);
    if (!v)
        return KEY_ABSENT;
    if (json_is_null(v))
        return KEY_NULL;
    if (!json_is_integer(v))
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: %s must be an integer", r->file, key);
    json_int_t x = json_integer_value(v);
    if (x < INT_MIN || x > INT_MAX)
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: %s %lld is out of range", r->file, key,
                            (long long)x);
    *dst = (int)x;
    return KEY_SET;
}

/* An integer with an attribute_map alias: both present and different is an error. */
static int read_int2(cfg_reader *r, const char *key, const char *alias, int *dst)
{
    int a = 0, b = 0;
    int ra = read_int(r, key, &a);
    if (ra < 0)
        return -1;
    int rb = alias ? read_int(r, alias, &b) : KEY_ABSENT;
    if (rb < 0)
        return -1;
    if (ra == KEY_SET && rb == KEY_SET && a != b)
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: %s %d and its alias %s %d disagree",
                            r->file, key, a, alias, b);
    if (ra == KEY_SET || rb == KEY_SET) {
        *dst = ra == KEY_SET ? a : b;
        return KEY_SET;
    }
    return ra == KEY_NULL || rb == KEY_NULL ? KEY_NULL : KEY_ABSENT;
}

/* A required size key (with an optional alias). */
static int need_int(cfg_reader *r, const char *key, const char *alias, int *dst)
{
    int s = read_int2(r, key, alias, dst);
    if (s < 0)
        return -1;
    if (s == KEY_ABSENT)
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: missing required key \"%s\"", r->file,
                            key);
    if (s == KEY_NULL)
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: %s must be an integer, not null",
                            r->file, key);
    return 0;
}

/* An optional integer whose null means "derive" (stored as -1). */
static int opt_int(cfg_reader *r, const char *key, const char *alias, int *dst)
{
    int s = read_int2(r, key, alias, dst);
    if (s == KEY_NULL)
        *dst = -1;
    return s < 0 ? -1 : 0;
}

/* An optional integer where null is not allowed. */
static int opt_int_strict(cfg_reader *r, const char *key, const char *alias, int *dst)
{
    int s = read_int2(r, key, alias, dst);
    if (s == KEY_NULL)
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: %s must be an integer, not null",
                            r->file, key);
    return s < 0 ? -1 : 0;
}

static int opt_real(cfg_reader *r, const char *key, double *dst)
{
    json_t *v = json_object_get(r->root, key);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: %s must be a number", r->file, key);
    *dst = json_number_value(v);
    return 0;
}

static int opt_bool(cfg_reader *r, const char *key, int *dst)
{
    json_t *v = json_object_get(r->root, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: %s must be true or false", r->file, key);
    *dst = json_is_true(v);
    return 0;
}

static int opt_str(cfg_reader *r, const char *key, char *dst, size_t size)
{
    json_t *v = json_object_get(r->root, key);
    if (!v)
        return 0;
    if (!json_is_string(v))
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: %s must be a string", r->file, key);
    if (json_string_length(v) >= size)
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: %s '%s' is too long", r->file, key,
                            json_string_value(v));
    snprintf(dst, size, "%s", json_string_value(v));
    return 0;
}

/* A token id: an integer, null (-1), or a list of integers (its first; empty: -1).
 * Negative ids (some LLaMA configs say pad_token_id -1) mean "none". */
static int opt_id(cfg_reader *r, const char *key, int *dst)
{
    json_t *v = json_object_get(r->root, key);
    if (!v)
        return 0;
    if (json_is_array(v))
        v = json_array_size(v) ? json_array_get(v, 0) : json_null();
    if (json_is_null(v)) {
        *dst = -1;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) > INT_MAX)
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: %s must be a token id (an integer, a "
                            "list of them, or null)", r->file, key);
    json_int_t x = json_integer_value(v);
    *dst = x < 0 ? -1 : (int)x;
    return 0;
}

/* A setting the families don't implement: an error when the key has the given value. */
static int reject_bool(cfg_reader *r, const char *key, int bad)
{
    int v = !bad;
    if (opt_bool(r, key, &v))
        return -1;
    if (v == bad)
        return rc_error_set(r->err, RC_ERR_UNSUPPORTED, "%s: %s %s is not supported", r->file,
                            key, bad ? "true" : "false");
    return 0;
}

static int read_ids(cfg_reader *r, rc_model_config *c)
{
    return opt_id(r, "bos_token_id", &c->bos_token_id) ||
           opt_id(r, "eos_token_id", &c->eos_token_id) ||
           opt_id(r, "pad_token_id", &c->pad_token_id);
}

static int read_gpt2_gptj(cfg_reader *r, rc_model_config *c)
{
    if (need_int(r, "n_embd", "hidden_size", &c->d_model) ||
        need_int(r, "n_layer", "num_hidden_layers", &c->n_layer) ||
        need_int(r, "n_head", "num_attention_heads", &c->n_head) ||
        opt_int_strict(r, "n_positions", "max_position_embeddings", &c->max_positions) ||
        opt_int(r, "n_inner", NULL, &c->d_ff) ||
        opt_real(r, "layer_norm_epsilon", &c->norm_eps) ||
        opt_str(r, "activation_function", c->activation, sizeof c->activation) ||
        opt_real(r, "resid_pdrop", &c->resid_dropout) ||
        opt_real(r, "embd_pdrop", &c->embd_dropout) ||
        opt_real(r, "attn_pdrop", &c->attn_dropout))
        return -1;
    if (c->type == RC_MODEL_GPTJ)
        return opt_int(r, "rotary_dim", NULL, &c->rotary_dim);
    return reject_bool(r, "scale_attn_weights", 0) ||
           reject_bool(r, "scale_attn_by_inverse_layer_idx", 1) ||
           reject_bool(r, "add_cross_attention", 1) ? -1 : 0;
}

static int read_llama(cfg_reader *r, rc_model_config *c)
{
    if (need_int(r, "hidden_size", NULL, &c->d_model) ||
        need_int(r, "num_hidden_layers", NULL, &c->n_layer) ||
        need_int(r, "num_attention_heads", NULL, &c->n_head) ||
        need_int(r, "intermediate_size", NULL, &c->d_ff) ||
        opt_int(r, "num_key_value_heads", NULL, &c->n_kv_head) ||
        opt_int(r, "head_dim", NULL, &c->head_dim) ||
        opt_int_strict(r, "max_position_embeddings", NULL, &c->max_positions) ||
        opt_real(r, "rms_norm_eps", &c->norm_eps) ||
        opt_real(r, "rope_theta", &c->rope_theta) ||
        opt_str(r, "hidden_act", c->activation, sizeof c->activation) ||
        opt_real(r, "attention_dropout", &c->attn_dropout))
        return -1;
    json_t *scaling = json_object_get(r->root, "rope_scaling");
    if (scaling && !json_is_null(scaling))
        return rc_error_set(r->err, RC_ERR_UNSUPPORTED, "%s: rope_scaling is not supported "
                            "(only null)", r->file);
    if (strcmp(c->model_type, "mistral") == 0) {
        /* Mistral has no bias keys; null sliding_window means full attention */
        if (opt_int(r, "sliding_window", NULL, &c->sliding_window))
            return -1;
        if (c->sliding_window < 0)
            c->sliding_window = 0;
        return 0;
    }
    return opt_bool(r, "attention_bias", &c->attention_bias) ||
           opt_bool(r, "mlp_bias", &c->mlp_bias) ? -1 : 0;
}

static int read_opt(cfg_reader *r, rc_model_config *c)
{
    if (need_int(r, "hidden_size", NULL, &c->d_model) ||
        need_int(r, "num_hidden_layers", NULL, &c->n_layer) ||
        need_int(r, "num_attention_heads", NULL, &c->n_head) ||
        need_int(r, "ffn_dim", NULL, &c->d_ff) ||
        opt_int_strict(r, "max_position_embeddings", NULL, &c->max_positions) ||
        opt_int(r, "word_embed_proj_dim", NULL, &c->word_embed_proj_dim) ||
        opt_str(r, "activation_function", c->activation, sizeof c->activation) ||
        opt_bool(r, "do_layer_norm_before", &c->do_layer_norm_before) ||
        opt_bool(r, "_remove_final_layer_norm", &c->remove_final_layer_norm) ||
        opt_bool(r, "enable_bias", &c->enable_bias) ||
        opt_bool(r, "layer_norm_elementwise_affine", &c->layer_norm_affine) ||
        opt_real(r, "dropout", &c->resid_dropout) ||
        opt_real(r, "attention_dropout", &c->attn_dropout))
        return -1;
    c->embd_dropout = c->resid_dropout;
    return 0;
}

/* T5: feed_forward_proj "ACT" or "gated-ACT" ("gated-gelu" means gelu_new); the derived
 * dense_act_fn / is_gated_act keys, when present, override it as they do in T5Config. */
static int read_t5(cfg_reader *r, rc_model_config *c)
{
    if (need_int(r, "d_model", "hidden_size", &c->d_model) ||
        need_int(r, "num_layers", "num_hidden_layers", &c->n_layer) ||
        need_int(r, "num_heads", "num_attention_heads", &c->n_head) ||
        need_int(r, "d_ff", NULL, &c->d_ff) ||
        need_int(r, "d_kv", NULL, &c->head_dim) ||
        opt_int(r, "num_decoder_layers", NULL, &c->n_decoder_layer) ||
        opt_int_strict(r, "relative_attention_num_buckets", NULL, &c->rel_buckets) ||
        opt_int_strict(r, "relative_attention_max_distance", NULL, &c->rel_max_distance) ||
        opt_real(r, "layer_norm_epsilon", &c->norm_eps) ||
        opt_real(r, "dropout_rate", &c->resid_dropout) ||
        opt_id(r, "decoder_start_token_id", &c->decoder_start_token_id))
        return -1;
    c->embd_dropout = c->attn_dropout = c->resid_dropout;
    char proj[48] = "relu";
    if (opt_str(r, "feed_forward_proj", proj, sizeof proj))
        return -1;
    const char *dash = strchr(proj, '-');
    if (dash && (strncmp(proj, "gated-", 6) != 0 || strchr(dash + 1, '-')))
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: feed_forward_proj '%s' is not of the "
                            "form ACT or gated-ACT", r->file, proj);
    c->gated_ffn = dash != NULL;
    const char *act = dash ? dash + 1 : proj;
    if (strcmp(proj, "gated-gelu") == 0)
        act = "gelu_new";
    if (strlen(act) >= sizeof c->activation)
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: feed_forward_proj '%s' is too long",
                            r->file, proj);
    snprintf(c->activation, sizeof c->activation, "%.*s", (int)sizeof c->activation - 1, act);
    return opt_str(r, "dense_act_fn", c->activation, sizeof c->activation) ||
           opt_bool(r, "is_gated_act", &c->gated_ffn) ? -1 : 0;
}

static int model_type_of(const char *s, rc_model_type *t)
{
    static const struct { const char *name; rc_model_type type; } names[] = {
        {"gpt2", RC_MODEL_GPT2}, {"llama", RC_MODEL_LLAMA}, {"mistral", RC_MODEL_LLAMA},
        {"opt", RC_MODEL_OPT}, {"gptj", RC_MODEL_GPTJ}, {"t5", RC_MODEL_T5},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) {
            *t = names[i].type;
            return 0;
        }
    return -1;
}

static int config_from_json(cfg_reader *r, rc_model_config *c)
{
    if (!json_is_object(r->root))
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: the top level is not a JSON object",
                            r->file);
    json_t *mt = json_object_get(r->root, "model_type");
    if (!mt)
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: missing required key \"model_type\"",
                            r->file);
    if (!json_is_string(mt))
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: model_type must be a string", r->file);
    rc_model_type type;
    if (model_type_of(json_string_value(mt), &type))
        return rc_error_set(r->err, RC_ERR_UNSUPPORTED, "%s: model_type '%.64s' is not "
                            "supported (gpt2, llama, mistral, opt, gptj, t5)", r->file,
                            json_string_value(mt));
    config_defaults(type, json_string_value(mt), c);
    if (need_int(r, "vocab_size", NULL, &c->vocab_size) ||
        opt_bool(r, "tie_word_embeddings", &c->tie_word_embeddings) || read_ids(r, c))
        return -1;
    int rc;
    switch (type) {
    case RC_MODEL_GPT2:
    case RC_MODEL_GPTJ: rc = read_gpt2_gptj(r, c); break;
    case RC_MODEL_LLAMA: rc = read_llama(r, c); break;
    case RC_MODEL_OPT: rc = read_opt(r, c); break;
    default: rc = read_t5(r, c); break;
    }
    if (rc)
        return -1;
    if (config_derive(c, r->file, r->err))
        return -1;
    return config_check(c, r->file, r->err);
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* DIR -> DIR/config.json (malloc'ed); a file path is copied. */
static char *config_path(const char *path)
{
    size_t n = strlen(path);
    char *p = malloc(n + 16);
    if (!p)
        return NULL;
    if (is_dir(path))
        snprintf(p, n + 16, "%s%sconfig.json", path, n && path[n - 1] == '/' ? "" : "/");
    else
        memcpy(p, path, n + 1);
    return p;
}

int rc_config_load(const char *path, rc_model_config *c, rc_error *err)
{
    char *file = config_path(path);
    if (!file)
        return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
    json_error_t jerr;
    json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &jerr);
    int rc;
    if (!root) {
        if (access(file, R_OK) != 0)
            rc = rc_error_set(err, RC_ERR_IO, "%s: cannot read: %s", file, strerror(errno));
        else
            rc = rc_error_set(err, RC_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s",
                              file, jerr.line, jerr.column, jerr.text);
    } else {
        cfg_reader r = {root, file, err};
        rc_model_config tmp;
        rc = config_from_json(&r, &tmp);
        if (rc == 0)
            *c = tmp;
    }
    json_decref(root);
    free(file);
    return rc ? -1 : 0;
}

/* ---- saving ------------------------------------------------------------------------- */

static void put_int(json_t *o, const char *key, long long v)
{
    json_object_set_new(o, key, json_integer(v));
}

static void put_real(json_t *o, const char *key, double v)
{
    json_object_set_new(o, key, json_real(v));
}

static void put_bool(json_t *o, const char *key, int v)
{
    json_object_set_new(o, key, json_boolean(v));
}

static void put_str(json_t *o, const char *key, const char *v)
{
    json_object_set_new(o, key, json_string(v));
}

static void put_id(json_t *o, const char *key, int v)
{
    json_object_set_new(o, key, v >= 0 ? json_integer(v) : json_null());
}

static json_t *config_to_json(const rc_model_config *c)
{
    json_t *o = json_object();
    json_t *arch = json_array();
    if (!o || !arch) {
        json_decref(o);
        json_decref(arch);
        return NULL;
    }
    json_array_append_new(arch, json_string(rc_config_architecture(c)));
    json_object_set_new(o, "architectures", arch);
    put_str(o, "model_type", c->model_type);
    put_int(o, "vocab_size", c->vocab_size);
    put_bool(o, "tie_word_embeddings", c->tie_word_embeddings);
    put_id(o, "bos_token_id", c->bos_token_id);
    put_id(o, "eos_token_id", c->eos_token_id);
    put_id(o, "pad_token_id", c->pad_token_id);
    switch (c->type) {
    case RC_MODEL_GPT2:
    case RC_MODEL_GPTJ:
        put_int(o, "n_embd", c->d_model);
        put_int(o, "n_layer", c->n_layer);
        put_int(o, "n_head", c->n_head);
        put_int(o, "n_positions", c->max_positions);
        put_int(o, "n_inner", c->d_ff);
        put_real(o, "layer_norm_epsilon", c->norm_eps);
        put_str(o, "activation_function", c->activation);
        put_real(o, "resid_pdrop", c->resid_dropout);
        put_real(o, "embd_pdrop", c->embd_dropout);
        put_real(o, "attn_pdrop", c->attn_dropout);
        if (c->type == RC_MODEL_GPTJ)
            put_int(o, "rotary_dim", c->rotary_dim);
        break;
    case RC_MODEL_LLAMA:
        put_int(o, "hidden_size", c->d_model);
        put_int(o, "num_hidden_layers", c->n_layer);
        put_int(o, "num_attention_heads", c->n_head);
        put_int(o, "num_key_value_heads", c->n_kv_head);
        if (c->head_dim * c->n_head != c->d_model)
            put_int(o, "head_dim", c->head_dim);  /* newer transformers read it */
        put_int(o, "intermediate_size", c->d_ff);
        put_int(o, "max_position_embeddings", c->max_positions);
        put_real(o, "rms_norm_eps", c->norm_eps);
        put_real(o, "rope_theta", c->rope_theta);
        json_object_set_new(o, "rope_scaling", json_null());
        put_str(o, "hidden_act", c->activation);
        put_real(o, "attention_dropout", c->attn_dropout);
        if (strcmp(c->model_type, "mistral") == 0) {
            json_object_set_new(o, "sliding_window",
                                c->sliding_window ? json_integer(c->sliding_window) : json_null());
        } else {
            put_bool(o, "attention_bias", c->attention_bias);
            if (c->mlp_bias)
                put_bool(o, "mlp_bias", 1);
        }
        break;
    case RC_MODEL_OPT:
        put_int(o, "hidden_size", c->d_model);
        put_int(o, "num_hidden_layers", c->n_layer);
        put_int(o, "num_attention_heads", c->n_head);
        put_int(o, "ffn_dim", c->d_ff);
        put_int(o, "max_position_embeddings", c->max_positions);
        put_int(o, "word_embed_proj_dim", c->word_embed_proj_dim);
        put_str(o, "activation_function", c->activation);
        put_bool(o, "do_layer_norm_before", c->do_layer_norm_before);
        put_bool(o, "_remove_final_layer_norm", c->remove_final_layer_norm);
        put_bool(o, "enable_bias", c->enable_bias);
        put_bool(o, "layer_norm_elementwise_affine", c->layer_norm_affine);
        put_real(o, "dropout", c->resid_dropout);
        put_real(o, "attention_dropout", c->attn_dropout);
        break;
    case RC_MODEL_T5: {
        char proj[48];
        if (c->gated_ffn && strcmp(c->activation, "gelu_new") == 0)
            snprintf(proj, sizeof proj, "gated-gelu");
        else
            snprintf(proj, sizeof proj, "%s%s", c->gated_ffn ? "gated-" : "", c->activation);
        put_int(o, "d_model", c->d_model);
        put_int(o, "num_layers", c->n_layer);
        put_int(o, "num_decoder_layers", c->n_decoder_layer);
        put_int(o, "num_heads", c->n_head);
        put_int(o, "d_kv", c->head_dim);
        put_int(o, "d_ff", c->d_ff);
        put_str(o, "feed_forward_proj", proj);
        put_str(o, "dense_act_fn", c->activation);
        put_bool(o, "is_gated_act", c->gated_ffn);
        put_int(o, "relative_attention_num_buckets", c->rel_buckets);
        put_int(o, "relative_attention_max_distance", c->rel_max_distance);
        put_real(o, "layer_norm_epsilon", c->norm_eps);
        put_real(o, "dropout_rate", c->resid_dropout);
        put_bool(o, "is_encoder_decoder", 1);
        put_id(o, "decoder_start_token_id", c->decoder_start_token_id);
        break;
    }
    default:
        break;
    }
    return o;
}

/* %.15g prints the decimal literals configs hold (1e-05, 0.1, 10000.0) as written; any
 * other double needs 17 digits to read back exactly. */
static int real_precision(const json_t *o)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        if (!json_is_real(v))
            continue;
        char buf[40];
        snprintf(buf, sizeof buf, "%.15g", json_real_value(v));
        if (strtod(buf, NULL) != json_real_value(v))
            return 17;
    }
    return 15;
}

/* Writes len bytes to path through path.tmp.PID, fsync and rename. */
static int write_atomic(const char *path, const char *data, size_t len, rc_error *err)
{
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp)
        return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        rc_error_set(err, RC_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, data + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    int ok = done == len && fsync(fd) == 0;
    int saved = errno;
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, path) != 0) {
        saved = errno;
        ok = 0;
    }
    if (!ok) {
        unlink(tmp);
        rc_error_set(err, RC_ERR_IO, "%s: write failed: %s", path, strerror(saved));
    }
    free(tmp);
    return ok ? 0 : -1;
}

int rc_config_save(const char *path, const rc_model_config *c, rc_error *err)
{
    if (config_check(c, path, err))
        return -1;
    char *file = config_path(path);
    json_t *o = config_to_json(c);
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS |
                                       JSON_REAL_PRECISION(real_precision(o))) : NULL;
    int rc;
    if (!file || !text) {
        rc = rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
    } else {
        size_t len = strlen(text);
        char *withnl = realloc(text, len + 2);
        if (withnl) {
            text = withnl;
            text[len++] = '\n';
            text[len] = 0;
        }
        rc = write_atomic(file, text, len, err);
    }
    free(text);
    json_decref(o);
    free(file);
    return rc;
}

/* ---- presets ------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    rc_model_type type;
    int vocab, d_model, n_layer, n_head, d_ff, max_pos;
    int n_kv_head;      /* LLaMA: 0 = n_head */
    int rotary_dim;     /* GPT-J */
    int word_proj;      /* OPT: 0 = d_model */
    int post_norm;      /* OPT: 1 = do_layer_norm_before false (opt-350m) */
    int d_kv;           /* T5 */
    const char *ffn;    /* T5 feed_forward_proj; NULL = relu */
    int untie;          /* 1: tie_word_embeddings false where the family ties */
    int buckets, max_distance;  /* T5; 0 = 32 / 128 */
    int eos;            /* tiny GPT-2 / GPT-J: bos = eos inside the small vocab */
    int no_dropout;     /* 1: no dropout (short runs that see the data a few times) */
} preset;

/* Published sizes: GPT-2 (OpenAI), OPT (facebook/opt-*), LLaMA-1, GPT-J-6B, T5 v1.0. */
static const preset presets[] = {
    {.name = "gpt2", .type = RC_MODEL_GPT2, 50257, 768, 12, 12, 3072, 1024},
    {.name = "gpt2-medium", .type = RC_MODEL_GPT2, 50257, 1024, 24, 16, 4096, 1024},
    {.name = "gpt2-large", .type = RC_MODEL_GPT2, 50257, 1280, 36, 20, 5120, 1024},
    {.name = "gpt2-xl", .type = RC_MODEL_GPT2, 50257, 1600, 48, 25, 6400, 1024},
    /* a GPT-2 of 7.3M parameters with the real vocabulary: the demo trains it on 2 cores */
    {.name = "gpt2-mini", .type = RC_MODEL_GPT2, 50257, 128, 4, 4, 512, 256},
    /* the demo's GPT-2: 1.3M parameters over the 4096 ids of a BPE vocabulary learned from
     * the demo's book (redco tokenizer-train), <|endoftext|> last. Sized for a 3-minute run
     * on 2 cores, which sees the book about 7 times: GPT-2's dropout stays on */
    {.name = "gpt2-demo", .type = RC_MODEL_GPT2, 4096, 128, 4, 4, 512, 256, .eos = 4095},
    {.name = "opt-125m", .type = RC_MODEL_OPT, 50272, 768, 12, 12, 3072, 2048},
    {.name = "opt-350m", .type = RC_MODEL_OPT, 50272, 1024, 24, 16, 4096, 2048,
     .word_proj = 512, .post_norm = 1},
    {.name = "opt-1.3b", .type = RC_MODEL_OPT, 50272, 2048, 24, 32, 8192, 2048},
    {.name = "opt-2.7b", .type = RC_MODEL_OPT, 50272, 2560, 32, 32, 10240, 2048},
    {.name = "opt-6.7b", .type = RC_MODEL_OPT, 50272, 4096, 32, 32, 16384, 2048},
    {.name = "opt-13b", .type = RC_MODEL_OPT, 50272, 5120, 40, 40, 20480, 2048},
    {.name = "opt-30b", .type = RC_MODEL_OPT, 50272, 7168, 48, 56, 28672, 2048},
    {.name = "opt-66b", .type = RC_MODEL_OPT, 50272, 9216, 64, 72, 36864, 2048},
    {.name = "llama-7b", .type = RC_MODEL_LLAMA, 32000, 4096, 32, 32, 11008, 2048},
    {.name = "llama-13b", .type = RC_MODEL_LLAMA, 32000, 5120, 40, 40, 13824, 2048},
    {.name = "llama-65b", .type = RC_MODEL_LLAMA, 32000, 8192, 80, 64, 22016, 2048},
    {.name = "gpt-j-6b", .type = RC_MODEL_GPTJ, 50400, 4096, 28, 16, 16384, 2048,
     .rotary_dim = 64},
    {.name = "t5-small", .type = RC_MODEL_T5, 32128, 512, 6, 8, 2048, 0, .d_kv = 64},
    {.name = "t5-base", .type = RC_MODEL_T5, 32128, 768, 12, 12, 3072, 0, .d_kv = 64},
    {.name = "t5-large", .type = RC_MODEL_T5, 32128, 1024, 24, 16, 4096, 0, .d_kv = 64},
    {.name = "t5-3b", .type = RC_MODEL_T5, 32128, 1024, 24, 32, 16384, 0, .d_kv = 128},
    {.name = "t5-11b", .type = RC_MODEL_T5, 32128, 1024, 24, 128, 65536, 0, .d_kv = 128},
    /* tiny models for tests: each exercises its family's less common path */
    {.name = "tiny-gpt2", .type = RC_MODEL_GPT2, 256, 64, 2, 4, 256, 128, .eos = 255},
    {.name = "tiny-llama", .type = RC_MODEL_LLAMA, 256, 64, 2, 4, 160, 128, .n_kv_head = 2},
    {.name = "tiny-opt", .type = RC_MODEL_OPT, 256, 64, 2, 4, 256, 128},
    {.name = "tiny-gptj", .type = RC_MODEL_GPTJ, 256, 64, 2, 4, 256, 128, .rotary_dim = 8,
     .eos = 255},
    {.name = "tiny-t5", .type = RC_MODEL_T5, 256, 64, 2, 4, 128, 0, .d_kv = 16,
     .ffn = "gated-gelu", .untie = 1, .buckets = 8, .max_distance = 16},
};
enum { N_PRESETS = sizeof presets / sizeof presets[0] };

const char *const *rc_config_preset_names(void)
{
    static const char *names[N_PRESETS + 1];
    if (!names[0])
        for (int i = 0; i < N_PRESETS; i++)
            names[i] = presets[i].name;
    return names;
}

static const char *family_name(rc_model_type t)
{
    static const char *const names[RC_MODEL_TYPE_COUNT] = {"gpt2", "llama", "opt", "gptj", "t5"};
    return names[t];
}

int rc_config_preset(const char *name, rc_model_config *c, rc_error *err)
{
    const preset *p = NULL;
    for (int i = 0; name && i < N_PRESETS; i++)
        if (strcmp(presets[i].name, name) == 0)
            p = &presets[i];
    if (!p) {
        char list[400] = "";
        size_t len = 0;
        for (int i = 0; i < N_PRESETS && len < sizeof list; i++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
                                    presets[i].name);
        return rc_error_set(err, RC_ERR_ARG, "unknown preset '%.64s' (known: %s)",
                            name ? name : "(null)", list);
    }
    config_defaults(p->type, family_name(p->type), c);
    c->vocab_size = p->vocab, c->d_model = p->d_model, c->n_layer = p->n_layer;
    c->n_head = p->n_head, c->d_ff = p->d_ff, c->max_positions = p->max_pos;
    if (p->n_kv_head)
        c->n_kv_head = p->n_kv_head;
    if (p->rotary_dim)
        c->rotary_dim = p->rotary_dim;
    if (p->word_proj)
        c->word_embed_proj_dim = p->word_proj;
    if (p->post_norm)
        c->do_layer_norm_before = 0;
    if (p->d_kv)
        c->head_dim = p->d_kv;
    if (p->ffn && strcmp(p->ffn, "gated-gelu") == 0) {
        c->gated_ffn = 1;
        snprintf(c->activation, sizeof c->activation, "gelu_new");
    }
    if (p->untie)
        c->tie_word_embeddings = 0;
    if (p->buckets)
        c->rel_buckets = p->buckets, c->rel_max_distance = p->max_distance;
    if (p->eos)
        c->bos_token_id = c->eos_token_id = p->eos;
    if (p->no_dropout)
        c->resid_dropout = c->embd_dropout = c->attn_dropout = 0;
    if (p->type == RC_MODEL_T5)
        c->decoder_start_token_id = 0;
    if (config_derive(c, name, err))
        return -1;
    return config_check(c, name, err);
}

/* ---- parameter counts --------------------------------------------------------------- */

/* Counted in double: exact below 2^53 (far above the limit config_check sets), and a hostile
 * config (n_layer 10^8 x a wide layer) gives a large number instead of overflowing int64. */

/* A linear layer in -> out, with or without bias. */
static double linear(double in, double out, int bias)
{
    return in * out + (bias ? out : 0);
}

static double count_gpt2(const rc_model_config *c)
{
    double d = c->d_model, V = c->vocab_size, ff = c->d_ff;
    double layer = 2 * d + linear(d, 3 * d, 1) + linear(d, d, 1) + 2 * d + linear(d, ff, 1) +
                   linear(ff, d, 1);
    return V * d + (double)c->max_positions * d + c->n_layer * layer + 2 * d +
           (c->tie_word_embeddings ? 0 : V * d);
}

static double count_llama(const rc_model_config *c)
{
    double d = c->d_model, V = c->vocab_size, ff = c->d_ff, q = (double)c->n_head * c->head_dim;
    double kv = (double)c->n_kv_head * c->head_dim;
    int ab = c->attention_bias, mb = c->mlp_bias;
    double layer = linear(d, q, ab) + 2 * linear(d, kv, ab) + linear(q, d, ab) +
                   2 * linear(d, ff, mb) + linear(ff, d, mb) + 2 * d;
    return V * d + c->n_layer * layer + d + (c->tie_word_embeddings ? 0 : V * d);
}

static double count_opt(const rc_model_config *c)
{
    double d = c->d_model, V = c->vocab_size, wp = c->word_embed_proj_dim, ff = c->d_ff;
    int b = c->enable_bias;
    double norm = c->layer_norm_affine ? 2 * d : 0;
    double layer = 4 * linear(d, d, b) + norm + linear(d, ff, b) + linear(ff, d, b) + norm;
    double n = V * wp + ((double)c->max_positions + 2) * d + c->n_layer * layer;
    if (wp != d)
        n += 2 * wp * d;  /* project_in, project_out (no bias) */
    if (c->do_layer_norm_before && !c->remove_final_layer_norm)
        n += norm;
    return n + (c->tie_word_embeddings ? 0 : V * wp);
}

static double count_gptj(const rc_model_config *c)
{
    double d = c->d_model, V = c->vocab_size, ff = c->d_ff;
    double layer = 2 * d + 4 * d * d + linear(d, ff, 1) + linear(ff, d, 1);
    return V * d + c->n_layer * layer + 2 * d + (c->tie_word_embeddings ? 0 : V * d) + V;
}

static double count_t5(const rc_model_config *c)
{
    double d = c->d_model, V = c->vocab_size, inner = (double)c->n_head * c->head_dim;
    double attn = 4 * d * inner + d;  /* q, k, v, o and the layer norm before it */
    double ff = (c->gated_ffn ? 3 : 2) * d * c->d_ff + d;
    double rel = (double)c->rel_buckets * c->n_head;  /* first layer of each stack */
    double enc = c->n_layer * (attn + ff) + rel + d;
    double dec = c->n_decoder_layer * (2 * attn + ff) + rel + d;
    return V * d + enc + dec + (c->tie_word_embeddings ? 0 : V * d);
}

static double count_params(const rc_model_config *c)
{
    switch (c->type) {
    case RC_MODEL_GPT2: return count_gpt2(c);
    case RC_MODEL_LLAMA: return count_llama(c);
    case RC_MODEL_OPT: return count_opt(c);
    case RC_MODEL_GPTJ: return count_gptj(c);
    case RC_MODEL_T5: return count_t5(c);
    default: return 0;
    }
}

int64_t rc_config_param_count(const rc_model_config *c)
{
    double n = count_params(c);
    return n < 0x1p62 ? (int64_t)n : INT64_MAX;
}
