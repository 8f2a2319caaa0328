/* redco/model.h - model configurations (Hugging Face config.json) and presets, and a model's
 * forward pass recorded from its configuration alone. */
#ifndef REDCO_MODEL_H
#define REDCO_MODEL_H

#include "redco.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    RC_MODEL_GPT2 = 0,
    RC_MODEL_LLAMA,        /* also Mistral-style configs (model_type "mistral") */
    RC_MODEL_OPT,
    RC_MODEL_GPTJ,
    RC_MODEL_T5,
    RC_MODEL_TYPE_COUNT
} rc_model_type;

/* One struct for every family; fields a family doesn't use stay 0. The comment after each
 * field names the HF keys (and aliases) it is read from. */
typedef struct {
    rc_model_type type;
    char model_type[32];        /* "model_type" as written in config.json */
    int vocab_size;             /* vocab_size */
    int d_model;                /* n_embd | hidden_size | d_model */
    int n_layer;                /* n_layer | num_hidden_layers | num_layers (T5: encoder) */
    int n_decoder_layer;        /* T5: num_decoder_layers (default num_layers) */
    int n_head;                 /* n_head | num_attention_heads | num_heads */
    int n_kv_head;              /* num_key_value_heads (default n_head; Mistral 8); = n_head in
                                   the families without key/value head groups */
    int head_dim;               /* d_kv (T5) | head_dim; default d_model / n_head */
    int d_ff;                   /* n_inner | intermediate_size | ffn_dim | d_ff; default 4 d_model */
    int max_positions;          /* n_positions | max_position_embeddings (0: none, T5) */
    double norm_eps;            /* layer_norm_epsilon | rms_norm_eps | layer_norm_eps */
    double rope_theta;          /* rope_theta (LLaMA, default 10000); GPT-J: 10000 (fixed) */
    int rotary_dim;             /* GPT-J rotary_dim (absent: 64 as GPTJConfig; null: head_dim);
                                   LLaMA: head_dim (rotary over the whole head) */
    int tie_word_embeddings;    /* tie_word_embeddings (family default) */
    char activation[32];        /* activation_function | hidden_act | dense_act_fn */
    int gated_ffn;              /* T5 feed_forward_proj "gated-*"; LLaMA always 1 */
    int do_layer_norm_before;   /* OPT (default 1) */
    int remove_final_layer_norm;/* OPT _remove_final_layer_norm (default 0); OPT has a final
                                   layer norm iff do_layer_norm_before && !this */
    int layer_norm_affine;      /* OPT layer_norm_elementwise_affine (default 1) */
    int word_embed_proj_dim;    /* OPT (default d_model) */
    int enable_bias;            /* OPT enable_bias (default 1) */
    int attention_bias;         /* LLaMA attention_bias (default 0) */
    int mlp_bias;               /* LLaMA mlp_bias (default 0) */
    int rel_buckets;            /* T5 relative_attention_num_buckets (default 32) */
    int rel_max_distance;       /* T5 relative_attention_max_distance (default 128) */
    int decoder_start_token_id; /* T5 (default pad) */
    int bos_token_id, eos_token_id, pad_token_id; /* -1 when absent or null; a list gives its
                                                     first id */
    int sliding_window;         /* Mistral sliding_window (default 4096; null: 0 = none) */
    double resid_dropout;       /* resid_pdrop (GPT-2 0.1, GPT-J 0) | dropout (OPT 0.1) |
                                   dropout_rate (T5 0.1); LLaMA 0 */
    double embd_dropout;        /* embd_pdrop | dropout_rate (T5); OPT and LLaMA 0 (they drop no
                                   embeddings) */
    double attn_dropout;        /* attn_pdrop | attention_dropout (OPT, LLaMA 0) | dropout_rate */
} rc_model_config;

/* Keys a config.json must have: model_type, vocab_size, and the family's keys for d_model,
 * n_layer and n_head; for LLaMA/Mistral intermediate_size, for OPT ffn_dim, for T5 d_ff and
 * d_kv. (transformers would silently use its class defaults, which are full-size models.)
 * Every other key takes the transformers 4.36 class default. Aliases follow the classes'
 * attribute_map: GPT-2 / GPT-J accept hidden_size, num_hidden_layers, num_attention_heads,
 * max_position_embeddings; T5 hidden_size, num_hidden_layers, num_attention_heads; both
 * spellings present with different values is an error. Settings the model families do not
 * implement are errors rather than silently different models: GPT-2 scale_attn_weights
 * false, scale_attn_by_inverse_layer_idx true or add_cross_attention true; LLaMA/Mistral
 * rope_scaling not null. */

/* Reads and validates DIR/config.json (or a path to a .json file). A missing key that has
 * no default, a wrong type, an unknown model_type, or inconsistent sizes (heads not
 * dividing d_model, kv heads not dividing heads, ...) is an error naming the file and key. */
int rc_config_load(const char *path, rc_model_config *c, rc_error *err);
/* Writes config.json with the family's own HF keys, atomically (temporary name, rename). */
int rc_config_save(const char *path, const rc_model_config *c, rc_error *err);
/* Architecture presets: gpt2, gpt2-medium, gpt2-large, gpt2-xl, opt-125m ... opt-66b,
 * llama-7b, llama-13b, llama-65b, gpt-j-6b, t5-small ... t5-11b, and tiny-gpt2,
 * tiny-llama, tiny-opt, tiny-gptj, tiny-t5 for tests. Unknown names are an error that
 * lists the known ones. */
int rc_config_preset(const char *name, rc_model_config *c, rc_error *err);
/* Names of the presets, NULL-terminated. */
const char *const *rc_config_preset_names(void);
/* Checks sizes and settings; errors name the family's HF key, e.g. "llama config:
 * num_key_value_heads 3 does not divide num_attention_heads 8". */
int rc_config_validate(const rc_model_config *c, rc_error *err);

/* Number of parameters of the Hugging Face model the config describes (GPT2LMHeadModel,
 * LlamaForCausalLM, OPTForCausalLM, GPTJForCausalLM, T5ForConditionalGeneration), tied
 * matrices counted once, non-parameter buffers not counted: gpt2 124439808. */
int64_t rc_config_param_count(const rc_model_config *c);
/* The HF class name written into "architectures", e.g. "GPT2LMHeadModel". */
const char *rc_config_architecture(const rc_model_config *c);
/* Activation name (HF spelling) -> rc_act_kind: relu; gelu (erf); gelu_new, gelu_fast,
 * gelu_pytorch_tanh (tanh form); silu, swish; sigmoid. -1 when unknown. */
int rc_config_activation(const char *name);

/* ---- a model's graph from its configuration ------------------------------------------- */

/* What rc_model_record recorded. */
typedef struct {
    rc_tensor *logits;            /* [B, T, vocab_size] in the weights' dtype */
    int n_params;
    rc_tensor **params;           /* [n_params] the parameter leaves in the family's order (that
                                     of rc_model_create's params): each weight's dtype and shape,
                                     bound to no memory */
    char **names;                 /* [n_params] their Hugging Face names, whole (a leaf's own
                                     name keeps 63 bytes), e.g. "transformer.h.0.attn.c_attn.weight" */
    int64_t numel;                /* elements of them all: rc_config_param_count(c) */
} rc_model_graph;

/* Records the forward pass of the model that c describes into g, without its weights: one
 * parameter leaf per weight of the family's Hugging Face table, unbound (no weight memory
 * is allocated: a 65B model records in milliseconds), and the logits of ids, i32 [B, T]
 * (T5: the decoder's input, with enc_ids i32 [B, S] the encoder's; other families NULL),
 * with mask [B, Tk] (any float dtype: 1 attend, 0 padding; Tk = T, T5: S) or NULL. dtype
 * (f32, bf16, f16) is the weights' and so the graph's. The graph is an ordinary one: add a
 * loss, differentiate, partition and plan it (rc_plan_estimate) as recorded; bind the
 * leaves to run it. A config that rc_config_validate refuses is an error naming its HF key;
 * bad inputs are the graph's error, also copied to err. In a graph marked as a training step's
 * (rc_graph_set_training) the config's dropout is recorded too. 0, or -1 with out zeroed. */
int rc_model_record(rc_graph *g, const rc_model_config *c, rc_dtype dtype, rc_tensor *ids,
                    rc_tensor *enc_ids, rc_tensor *mask, rc_model_graph *out, rc_error *err);
/* Frees out's arrays (the nodes are the graph's) and zeroes it. */
void rc_model_graph_free(rc_model_graph *out);

/* How the families record attention in the graphs recorded after the call, process-wide
 * (as rc_set_threads): on (the default) as the fused op, rc_attention, which keeps no
 * [T, T] tensor; off as product, softmax, product (Hugging Face's "eager" attention), whose
 * scores and probabilities of every layer stay for the backward pass: far more activation
 * memory (`redco plan` shows it), and faster only where the fused kernels are slower than
 * the matrix products (the README's GPU figures). Both compute the same function. */
void rc_set_fused_attention(int on);
int rc_get_fused_attention(void);

#ifdef __cplusplus
}
#endif

#endif
