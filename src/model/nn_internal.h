/* nn_internal.h - what the model families share: the layers their forward passes are built
 * from (layers.c), config.json's typed keys and the checks that name a key (config_keys.c),
 * and the table every family file fills in (rci_nn_family; family.c lists them). */
#ifndef REDCO_NN_INTERNAL_H
#define REDCO_NN_INTERNAL_H

#include "nn.h"

#include <jansson.h>

/* A builder's view of one forward pass. */
typedef struct {
    rc_graph *g;
    const rc_model_config *c;
    const rci_nn_weights *w;
    rc_tensor *const *p;
    const rci_nn_inputs *in;
    int drop_sites;               /* dropout sites recorded so far: each its own key */
} rci_nn_ctx;

/* The leaf of the parameter named by the printf-style format; NULL (graph error set) if
 * the table has no such parameter. */
rc_tensor *rci_nn_p(rci_nn_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1 when the table has the named parameter (optional biases, heads) */
int rci_nn_has(rci_nn_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* x [..., in] @ w^T + b for a torch Linear weight [out, in]; b may be NULL */
rc_tensor *rci_nn_linear(rc_graph *g, rc_tensor *x, rc_tensor *w, rc_tensor *b);
/* x [..., in] @ w + b for GPT-2's Conv1D weight [in, out] */
rc_tensor *rci_nn_conv1d(rc_graph *g, rc_tensor *x, rc_tensor *w, rc_tensor *b);
/* y (the output of projection w applied to h) plus its LoRA adapter's
 * scale (h a^T) b^T when the inputs carry one for w; else y */
rc_tensor *rci_nn_lora(rci_nn_ctx *x, rc_tensor *h, rc_tensor *y, rc_tensor *w);
/* [B, T, H*D] -> [B, H, T, D] */
rc_tensor *rci_nn_heads(rc_graph *g, rc_tensor *x, int heads);
/* Attention of q [B, H, Tq, D] over k, v [B, KV, Tk, D] (KV divides H: grouped queries);
 * bias is added to the scaled scores (broadcast to [B, H, Tq, Tk]) and may be NULL. In a
 * training step's graph the probabilities take the config's attention dropout (a site of
 * rci_nn_dropout's). Returns [B, Tq, H*D]. */
rc_tensor *rci_nn_attention(rci_nn_ctx *x, rc_tensor *q, rc_tensor *k, rc_tensor *v, rc_tensor *bias,
                            double scale, int causal);
/* h with dropout of probability p in a training step's graph (rc_graph_set_training), as
 * Hugging Face's classes apply it in train mode: each call a site with a key of its own
 * (the sites counted in recording order), mixed with the plan's run key; h itself in other
 * graphs or when p is 0. */
rc_tensor *rci_nn_dropout(rci_nn_ctx *x, rc_tensor *h, double p);
/* Joins the cache of layer l (if any) before k, v ([B, KV, T, D]) and stores the result in
 * the caller's new_kv (if asked). */
void rci_nn_cache(rci_nn_ctx *x, int layer, rc_tensor **k, rc_tensor **v);
/* The additive attention bias [B, 1, 1, Tk] of in->mask (0 keep, -1e9 pad), or NULL. */
rc_tensor *rci_nn_mask_bias(rci_nn_ctx *x);
/* The activation named by a HF config (gelu_new, gelu, relu, silu, ...); NULL with the
 * graph's error set for a name redco does not know. */
rc_tensor *rci_nn_act(rci_nn_ctx *x, rc_tensor *h);
/* Recomputation: blocks l .. l + every - 1 form one segment when the graph asks for it
 * (rc_graph_set_remat); call begin before block l of n and end after it. */
void rci_nn_block_begin(rci_nn_ctx *x, int l);
void rci_nn_block_end(rci_nn_ctx *x, int l, int n);
/* positions first + past .. first + past + T - 1 as an i32 constant [T] */
rc_tensor *rci_nn_positions(rci_nn_ctx *x, int64_t T, int first);

/* ---- config.json keys (config_keys.c) ---------------------------------------------------
 * Typed reading and writing of one key, with the messages that name the file and the key. */

/* A config.json being read: its top-level object, the file named in messages, where errors go. */
typedef struct {
    json_t *root;
    const char *file;
    rc_error *err;
} rci_cfg_reader;

/* A required size (alias: the attribute_map's other spelling, or NULL; both present and
 * different is an error); missing or null is an error. */
int rci_cfg_need_int(rci_cfg_reader *r, const char *key, const char *alias, int *dst);
/* An optional integer; null stores -1 ("derive it", as the HF classes' None). */
int rci_cfg_int(rci_cfg_reader *r, const char *key, const char *alias, int *dst);
/* An optional integer that may not be null. */
int rci_cfg_int_strict(rci_cfg_reader *r, const char *key, const char *alias, int *dst);
int rci_cfg_real(rci_cfg_reader *r, const char *key, double *dst);
int rci_cfg_bool(rci_cfg_reader *r, const char *key, int *dst);
/* a string of fewer than size bytes */
int rci_cfg_str(rci_cfg_reader *r, const char *key, char *dst, size_t size);
/* A token id: an integer, null (-1), or a list of integers (its first; empty: -1); a
 * negative id (some LLaMA configs say pad_token_id -1) means none. */
int rci_cfg_id(rci_cfg_reader *r, const char *key, int *dst);
/* A setting the family does not implement: an error when the key has the value bad. */
int rci_cfg_reject_bool(rci_cfg_reader *r, const char *key, int bad);

void rci_cfg_put_int(json_t *o, const char *key, long long v);
void rci_cfg_put_real(json_t *o, const char *key, double v);
void rci_cfg_put_bool(json_t *o, const char *key, int v);
void rci_cfg_put_str(json_t *o, const char *key, const char *v);
/* a token id, null when negative */
void rci_cfg_put_id(json_t *o, const char *key, int v);

/* The HF keys of the fields that the shared messages name, as the family spells them ("-"
 * where it has none). */
typedef struct {
    const char *d_model, *n_layer, *n_decoder_layer, *n_head, *head_dim, *d_ff, *max_positions,
        *norm_eps, *activation;
} rci_nn_keys;

/* Checks of a config shared by several families; where is the file, or "<model_type>
 * config". Each returns 0, or -1 with err saying which key holds what. */
/* "WHERE: KEY must be positive, got V" unless v >= 1 */
int rci_cfg_positive(const char *where, const char *key, int v, rc_error *err);
/* head_dim, d_model / n_head unless a key sets it, is positive: else the error names n_head
 * not dividing d_model, or the head_dim key */
int rci_cfg_check_head_dim(const rc_model_config *c, const rci_nn_keys *k, const char *where, rc_error *err);
/* no key/value head groups: n_kv_head is 0 (unset) or n_head */
int rci_cfg_check_no_kv_groups(const rc_model_config *c, const rci_nn_keys *k, const char *where, rc_error *err);
/* the families that split d_model into n_head heads of head_dim (GPT-2, OPT, GPT-J): max
 * positions, head_dim, n_head x head_dim = d_model, no key/value head groups */
int rci_cfg_check_split_heads(const rc_model_config *c, const rci_nn_keys *k, const char *where, rc_error *err);

/* The parameters of a linear layer in -> out, with or without a bias, for the families' closed-form
 * counts (doubles: a hostile config gives a large number instead of overflowing). */
static inline double rci_nn_linear_params(double in, double out, int bias)
{
    return in * out + (bias ? out : 0);
}

/* ---- the families ----------------------------------------------------------------------- */

/* A preset: a published model's sizes (or a tiny one for the tests) on the family's defaults. */
typedef struct {
    const char *name;
    int vocab, d_model, n_layer, n_head, d_ff, max_positions;
    int eos;                              /* bos = eos = this id (0: the family's own ids) */
    void (*more)(rc_model_config *c);     /* the family's settings beyond the sizes, or NULL */
} rci_nn_preset;

/* A model_type the family reads, and the class written into "architectures" for it. */
typedef struct {
    const char *model_type, *architecture;
} rci_nn_variant;

/* One model family: everything redco knows of it. Each family file (gpt2.c, llama.c, opt.c,
 * gptj.c, t5.c) exports one; family.c lists them, and the generic code (config.c, model_io.c,
 * lora.c, family.c) reads nothing of a family but this. */
typedef struct {
    rc_model_type type;
    const rci_nn_variant *variants;   /* {model_type, architecture} ..., {NULL}: the first is the
                                     family's own name (llama), the others read as it (mistral) */
    const rci_nn_keys *keys;
    /* config.json (config.c does what every family shares: model_type, vocab_size,
     * tie_word_embeddings, the token ids, d_ff = 4 d_model, n_kv_head = n_head,
     * head_dim = d_model / n_head when left to derive, the checks of sizes, norm_eps,
     * activation, dropout and the size limits) */
    void (*defaults)(rc_model_config *c);   /* transformers' class defaults; -1 marks "derive" */
    int (*read)(rci_cfg_reader *r, rc_model_config *c);               /* the family's own keys */
    void (*derive)(rc_model_config *c);     /* its derived fields, after the shared ones (or NULL) */
    int (*check)(const rc_model_config *c, const char *where, rc_error *err);  /* its rules */
    void (*write)(json_t *o, const rc_model_config *c);            /* its own keys */
    double (*count)(const rc_model_config *c);  /* parameters, in closed form (no table is built
                                                  for a hostile config) */
    const rci_nn_preset *presets;     /* ..., {NULL} */
    /* the model */
    int encoder_decoder;          /* takes encoder ids besides the (decoder) ids: T5 */
    const char *scaled_init;      /* weights whose names end so start with std 0.02 / sqrt(2
                                     layers) (GPT-2's residual projections), or NULL */
    const char *const *tied;      /* checkpoint tensors that may alias a parameter the table
                                     lacks (tied embeddings), NULL-terminated; or NULL */
    int (*weights)(const rc_model_config *c, rci_nn_weights *w);   /* adds every parameter; -1: memory */
    rc_tensor *(*logits)(rci_nn_ctx *x);                          /* logits [B, T, vocab] */
    /* LoRA (lora.c) */
    const char *lora_targets;     /* the default target modules; NULL: no LoRA for this family */
    const char *lora_modules;     /* the modules LoRA can adapt, for messages */
    int conv1d;                   /* projections are Conv1D [in, out] (else Linear [out, in]) */
} rci_nn_family;

/* The table of families (family.c), NULL-terminated: a new family is its file and its line in
 * this table. */
extern const rci_nn_family *const rci_nn_families[];
/* the family of type, or of a model_type name ("mistral": LLaMA's); NULL when none */
const rci_nn_family *rci_nn_family_of(rc_model_type type);
const rci_nn_family *rci_nn_family_named(const char *model_type);

/* GPT-2's keys, which GPT-J's config class shares (n_embd, n_layer, n_head, n_positions,
 * n_inner, layer_norm_epsilon, activation_function and the three dropouts, with GPT2Config's
 * aliases), read and written (gpt2.c). */
int rci_nn_gpt2_read_keys(rci_cfg_reader *r, rc_model_config *c);
void rci_nn_gpt2_write_keys(json_t *o, const rc_model_config *c);

#endif
