/* llama.c - LLaMA (and Mistral-style): RMSNorm, half-split rotary embedding with
 * rope_theta, SwiGLU MLP, grouped-query attention, tied or untied head. Weights are torch
 * Linear, stored (out, in). LlamaConfig's and MistralConfig's keys, defaults and presets,
 * the parameter table and count, the forward pass. */
#include "internal.h"
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- config.json ---------------------------------------------------------------------- */

static int is_mistral(const rc_model_config *c)
{
    return strcmp(c->model_type, "mistral") == 0;
}

/* LlamaConfig(), MistralConfig() */
static void llama_defaults(rc_model_config *c)
{
    c->vocab_size = 32000, c->d_model = 4096, c->n_layer = 32, c->n_head = 32;
    c->max_positions = 2048, c->d_ff = 11008;
    c->norm_eps = 1e-6, c->rope_theta = 10000.0, c->gated_ffn = 1;
    snprintf(c->activation, sizeof c->activation, "silu");
    c->bos_token_id = 1, c->eos_token_id = 2;
    if (is_mistral(c)) {
        c->n_kv_head = 8, c->max_positions = 4096 * 32, c->d_ff = 14336;
        c->sliding_window = 4096;
    }
}

static int llama_read(rci_cfg_reader *r, rc_model_config *c)
{
    if (rci_cfg_need_int(r, "hidden_size", NULL, &c->d_model) ||
        rci_cfg_need_int(r, "num_hidden_layers", NULL, &c->n_layer) ||
        rci_cfg_need_int(r, "num_attention_heads", NULL, &c->n_head) ||
        rci_cfg_need_int(r, "intermediate_size", NULL, &c->d_ff) ||
        rci_cfg_int(r, "num_key_value_heads", NULL, &c->n_kv_head) ||
        rci_cfg_int(r, "head_dim", NULL, &c->head_dim) ||
        rci_cfg_int_strict(r, "max_position_embeddings", NULL, &c->max_positions) ||
        rci_cfg_real(r, "rms_norm_eps", &c->norm_eps) ||
        rci_cfg_real(r, "rope_theta", &c->rope_theta) ||
        rci_cfg_str(r, "hidden_act", c->activation, sizeof c->activation) ||
        rci_cfg_real(r, "attention_dropout", &c->attn_dropout))
        return -1;
    json_t *scaling = json_object_get(r->root, "rope_scaling");
    if (scaling && !json_is_null(scaling))
        return rc_error_set(r->err, RC_ERR_UNSUPPORTED, "%s: rope_scaling is not supported "
                            "(only null)", r->file);
    if (is_mistral(c)) {
        /* Mistral has no bias keys; null sliding_window means full attention */
        if (rci_cfg_int(r, "sliding_window", NULL, &c->sliding_window))
            return -1;
        if (c->sliding_window < 0)
            c->sliding_window = 0;
        return 0;
    }
    return rci_cfg_bool(r, "attention_bias", &c->attention_bias) ||
           rci_cfg_bool(r, "mlp_bias", &c->mlp_bias) ? -1 : 0;
}

/* rotary embeddings over the whole head */
static void llama_derive(rc_model_config *c)
{
    c->rotary_dim = c->head_dim;
}

static const rci_nn_keys llama_keys = {
    .d_model = "hidden_size", .n_layer = "num_hidden_layers", .n_decoder_layer = "-",
    .n_head = "num_attention_heads", .head_dim = "head_dim", .d_ff = "intermediate_size",
    .max_positions = "max_position_embeddings", .norm_eps = "rms_norm_eps", .activation = "hidden_act",
};

/* head_dim may differ from hidden_size / num_attention_heads; key/value head groups */
static int llama_check(const rc_model_config *c, const char *where, rc_error *err)
{
    if (rci_cfg_positive(where, "max_position_embeddings", c->max_positions, err) ||
        rci_cfg_check_head_dim(c, &llama_keys, where, err))
        return -1;
    if (c->n_kv_head < 1 || c->n_head % c->n_kv_head != 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: num_key_value_heads %d does not divide "
                            "num_attention_heads %d", where, c->n_kv_head, c->n_head);
    if (c->head_dim % 2 != 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: the head size %d (hidden_size / "
                            "num_attention_heads) must be even for rotary embeddings", where,
                            c->head_dim);
    if (!(c->rope_theta > 0) || !isfinite(c->rope_theta))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: rope_theta must be positive, got %g",
                            where, c->rope_theta);
    if (c->sliding_window < 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: sliding_window must not be negative, "
                            "got %d", where, c->sliding_window);
    return 0;
}

static void llama_write(json_t *o, const rc_model_config *c)
{
    rci_cfg_put_int(o, "hidden_size", c->d_model);
    rci_cfg_put_int(o, "num_hidden_layers", c->n_layer);
    rci_cfg_put_int(o, "num_attention_heads", c->n_head);
    rci_cfg_put_int(o, "num_key_value_heads", c->n_kv_head);
    if (c->head_dim * c->n_head != c->d_model)
        rci_cfg_put_int(o, "head_dim", c->head_dim);  /* newer transformers read it */
    rci_cfg_put_int(o, "intermediate_size", c->d_ff);
    rci_cfg_put_int(o, "max_position_embeddings", c->max_positions);
    rci_cfg_put_real(o, "rms_norm_eps", c->norm_eps);
    rci_cfg_put_real(o, "rope_theta", c->rope_theta);
    json_object_set_new(o, "rope_scaling", json_null());
    rci_cfg_put_str(o, "hidden_act", c->activation);
    rci_cfg_put_real(o, "attention_dropout", c->attn_dropout);
    if (is_mistral(c)) {
        json_object_set_new(o, "sliding_window",
                            c->sliding_window ? json_integer(c->sliding_window) : json_null());
    } else {
        rci_cfg_put_bool(o, "attention_bias", c->attention_bias);
        if (c->mlp_bias)
            rci_cfg_put_bool(o, "mlp_bias", 1);
    }
}

static double llama_count(const rc_model_config *c)
{
    double d = c->d_model, V = c->vocab_size, ff = c->d_ff, q = (double)c->n_head * c->head_dim;
    double kv = (double)c->n_kv_head * c->head_dim;
    int ab = c->attention_bias, mb = c->mlp_bias;
    double layer = rci_nn_linear_params(d, q, ab) + 2 * rci_nn_linear_params(d, kv, ab) +
                   rci_nn_linear_params(q, d, ab) + 2 * rci_nn_linear_params(d, ff, mb) +
                   rci_nn_linear_params(ff, d, mb) + 2 * d;
    return V * d + c->n_layer * layer + d + (c->tie_word_embeddings ? 0 : V * d);
}

static void tiny_llama(rc_model_config *c)
{
    c->n_kv_head = 2;  /* grouped-query attention */
}

/* LLaMA-1's sizes, and a tiny one for tests */
static const rci_nn_preset llama_presets[] = {
    {.name = "llama-7b", 32000, 4096, 32, 32, 11008, 2048},
    {.name = "llama-13b", 32000, 5120, 40, 40, 13824, 2048},
    {.name = "llama-65b", 32000, 8192, 80, 64, 22016, 2048},
    {.name = "tiny-llama", 256, 64, 2, 4, 160, 128, .more = tiny_llama},
    {0},
};

/* ---- the model ------------------------------------------------------------------------ */

static int llama_weights(const rc_model_config *c, rci_nn_weights *w)
{
    int64_t C = c->d_model, F = c->d_ff, D = c->head_dim;
    int64_t Q = c->n_head * D, KV = c->n_kv_head * D;
    char name[96];
    int rc = rci_nn_weights_add(w, "model.embed_tokens.weight", 2, (int64_t[]){c->vocab_size, C});
    for (int l = 0; l < c->n_layer; l++) {
        const struct {
            const char *name;
            int64_t out, in;
            int bias;
        } lin[7] = {{"self_attn.q_proj", Q, C, c->attention_bias},
                    {"self_attn.k_proj", KV, C, c->attention_bias},
                    {"self_attn.v_proj", KV, C, c->attention_bias},
                    {"self_attn.o_proj", C, Q, c->attention_bias},
                    {"mlp.gate_proj", F, C, c->mlp_bias},
                    {"mlp.up_proj", F, C, c->mlp_bias},
                    {"mlp.down_proj", C, F, c->mlp_bias}};
        for (int k = 0; k < 7; k++) {
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, lin[k].name);
            rc |= rci_nn_weights_add(w, name, 2, (int64_t[]){lin[k].out, lin[k].in});
            if (lin[k].bias) {
                snprintf(name, sizeof name, "model.layers.%d.%s.bias", l, lin[k].name);
                rc |= rci_nn_weights_add(w, name, 1, (int64_t[]){lin[k].out});
            }
        }
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        rc |= rci_nn_weights_add(w, name, 1, (int64_t[]){C});
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
        rc |= rci_nn_weights_add(w, name, 1, (int64_t[]){C});
    }
    rc |= rci_nn_weights_add(w, "model.norm.weight", 1, (int64_t[]){C});
    if (!c->tie_word_embeddings)
        rc |= rci_nn_weights_add(w, "lm_head.weight", 2, (int64_t[]){c->vocab_size, C});
    return rc ? -1 : 0;
}

/* torch Linear of layer l's module `mod`, with its bias when the table has one (and its
 * LoRA adapter when it has one) */
static rc_tensor *proj(rci_nn_ctx *x, int l, const char *mod, rc_tensor *h)
{
    rc_tensor *b = rci_nn_has(x, "model.layers.%d.%s.bias", l, mod) ? rci_nn_p(x, "model.layers.%d.%s.bias", l, mod) : NULL;
    rc_tensor *w = rci_nn_p(x, "model.layers.%d.%s.weight", l, mod);
    return rci_nn_lora(x, h, rci_nn_linear(x->g, h, w, b), w);
}

/* [B, T, heads*D] -> rotated [B, heads, T, D] */
static rc_tensor *rotary_heads(rci_nn_ctx *x, rc_tensor *h, int heads, rc_tensor *pos)
{
    rc_graph *g = x->g;
    int64_t B = h->shape[0], T = h->shape[1], D = x->c->head_dim;
    h = rc_reshape(g, h, 4, (int64_t[]){B, T, heads, D});
    h = rc_rope(g, h, pos, (int)D, RC_ROPE_HALF, x->c->rope_theta);
    return rc_permute(g, h, (int[]){0, 2, 1, 3});
}

static rc_tensor *attention(rci_nn_ctx *x, int l, rc_tensor *h, rc_tensor *pos)
{
    rc_tensor *q = rotary_heads(x, proj(x, l, "self_attn.q_proj", h), x->c->n_head, pos);
    rc_tensor *k = rotary_heads(x, proj(x, l, "self_attn.k_proj", h), x->c->n_kv_head, pos);
    rc_tensor *v = rci_nn_heads(x->g, proj(x, l, "self_attn.v_proj", h), x->c->n_kv_head);
    rci_nn_cache(x, l, &k, &v);
    rc_tensor *y = rci_nn_attention(x, q, k, v, rci_nn_mask_bias(x), 1.0 / sqrt((double)x->c->head_dim), 1);
    return proj(x, l, "self_attn.o_proj", y);
}

/* down(act(gate(h)) * up(h)) */
static rc_tensor *mlp(rci_nn_ctx *x, int l, rc_tensor *h)
{
    rc_tensor *gate = rci_nn_act(x, proj(x, l, "mlp.gate_proj", h));
    return proj(x, l, "mlp.down_proj", rc_mul(x->g, gate, proj(x, l, "mlp.up_proj", h)));
}

static rc_tensor *llama_logits(rci_nn_ctx *x)
{
    rc_graph *g = x->g;
    double eps = x->c->norm_eps;
    rc_tensor *pos = rci_nn_positions(x, x->in->ids->shape[1], 0);
    rc_tensor *emb = rci_nn_p(x, "model.embed_tokens.weight");
    rc_tensor *h = rc_embedding_pad(g, emb, x->in->ids, x->c->pad_token_id); /* torch padding_idx */
    for (int l = 0; l < x->c->n_layer; l++) {
        rci_nn_block_begin(x, l);
        rc_tensor *a = rc_rms_norm(g, h, rci_nn_p(x, "model.layers.%d.input_layernorm.weight", l), eps, 0.0);
        h = rc_add(g, h, attention(x, l, a, pos));
        rc_tensor *m = rc_rms_norm(g, h, rci_nn_p(x, "model.layers.%d.post_attention_layernorm.weight", l), eps, 0.0);
        h = rc_add(g, h, mlp(x, l, m));
        rci_nn_block_end(x, l, x->c->n_layer);
    }
    h = rc_rms_norm(g, h, rci_nn_p(x, "model.norm.weight"), eps, 0.0);
    rc_tensor *head = x->c->tie_word_embeddings ? emb : rci_nn_p(x, "lm_head.weight");
    return rc_matmul(g, h, head, 0, 1);
}

const rci_nn_family rci_nn_llama_family = {
    .type = RC_MODEL_LLAMA,
    .variants = (const rci_nn_variant[]){{"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"}, {0}},
    .keys = &llama_keys,
    .defaults = llama_defaults,
    .read = llama_read,
    .derive = llama_derive,
    .check = llama_check,
    .write = llama_write,
    .count = llama_count,
    .presets = llama_presets,
    .tied = (const char *const[]){"lm_head.weight", NULL},
    .weights = llama_weights,
    .logits = llama_logits,
    .lora_targets = "q_proj,v_proj",
    .lora_modules = "LLaMA: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj",
};
