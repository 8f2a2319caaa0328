/* llama.c - LLaMA (and Mistral-style): RMSNorm, half-split rotary embedding with
 * rope_theta, SwiGLU MLP, grouped-query attention, tied or untied head. Weights are torch
 * Linear, stored (out, in). */
#include "internal.h"
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>

static int llama_weights(const rc_model_config *c, nn_weights *w)
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
static rc_tensor *proj(nn_ctx *x, int l, const char *mod, rc_tensor *h)
{
    rc_tensor *b = rci_nn_has(x, "model.layers.%d.%s.bias", l, mod) ? rci_nn_p(x, "model.layers.%d.%s.bias", l, mod) : NULL;
    rc_tensor *w = rci_nn_p(x, "model.layers.%d.%s.weight", l, mod);
    return rci_nn_lora(x, h, rci_nn_linear(x->g, h, w, b), w);
}

/* [B, T, heads*D] -> rotated [B, heads, T, D] */
static rc_tensor *rotary_heads(nn_ctx *x, rc_tensor *h, int heads, rc_tensor *pos)
{
    rc_graph *g = x->g;
    int64_t B = h->shape[0], T = h->shape[1], D = x->c->head_dim;
    h = rc_reshape(g, h, 4, (int64_t[]){B, T, heads, D});
    h = rc_rope(g, h, pos, (int)D, RC_ROPE_HALF, x->c->rope_theta);
    return rc_permute(g, h, (int[]){0, 2, 1, 3});
}

static rc_tensor *attention(nn_ctx *x, int l, rc_tensor *h, rc_tensor *pos)
{
    rc_tensor *q = rotary_heads(x, proj(x, l, "self_attn.q_proj", h), x->c->n_head, pos);
    rc_tensor *k = rotary_heads(x, proj(x, l, "self_attn.k_proj", h), x->c->n_kv_head, pos);
    rc_tensor *v = rci_nn_heads(x->g, proj(x, l, "self_attn.v_proj", h), x->c->n_kv_head);
    rci_nn_cache(x, l, &k, &v);
    rc_tensor *y = rci_nn_attention(x->g, q, k, v, rci_nn_mask_bias(x), 1.0 / sqrt((double)x->c->head_dim), 1);
    return proj(x, l, "self_attn.o_proj", y);
}

/* down(act(gate(h)) * up(h)) */
static rc_tensor *mlp(nn_ctx *x, int l, rc_tensor *h)
{
    rc_tensor *gate = rci_nn_act(x, proj(x, l, "mlp.gate_proj", h));
    return proj(x, l, "mlp.down_proj", rc_mul(x->g, gate, proj(x, l, "mlp.up_proj", h)));
}

static rc_tensor *llama_logits(nn_ctx *x)
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

const nn_family rci_nn_llama_family = {RC_MODEL_LLAMA, llama_weights, llama_logits};
