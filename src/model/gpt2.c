/* gpt2.c - GPT-2: learned positions, pre-LN blocks, gelu (tanh form) MLP, causal
 * attention, LM head tied to the token embedding. Weights are Conv1D, stored (in, out). */
#include "internal.h"
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>

rc_model_config rci_nn_gpt2_config(int vocab, int positions, int layers, int heads, int d_model)
{
    rc_model_config c = {.type = RC_MODEL_GPT2, .model_type = "gpt2", .vocab_size = vocab,
                         .d_model = d_model, .n_layer = layers, .n_head = heads, .n_kv_head = heads,
                         .head_dim = d_model / heads, .d_ff = 4 * d_model, .max_positions = positions,
                         .norm_eps = 1e-5, .activation = "gelu_new", .tie_word_embeddings = 1,
                         .bos_token_id = -1, .eos_token_id = -1, .pad_token_id = -1};
    return c;
}

static int gpt2_weights(const rc_model_config *c, nn_weights *w)
{
    int64_t C = c->d_model, F = c->d_ff;
    char name[96];
    int rc = rci_nn_weights_add(w, "transformer.wte.weight", 2, (int64_t[]){c->vocab_size, C});
    rc |= rci_nn_weights_add(w, "transformer.wpe.weight", 2, (int64_t[]){c->max_positions, C});
    for (int l = 0; l < c->n_layer; l++) {
        static const char *names[12] = {
            "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
            "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
            "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
        const int64_t shapes[12][2] = {{C}, {C}, {C, 3 * C}, {3 * C}, {C, C}, {C},
                                       {C}, {C}, {C, F}, {F}, {F, C}, {C}};
        for (int k = 0; k < 12; k++) {
            snprintf(name, sizeof name, "transformer.h.%d.%s", l, names[k]);
            rc |= rci_nn_weights_add(w, name, shapes[k][1] ? 2 : 1, shapes[k]);
        }
    }
    rc |= rci_nn_weights_add(w, "transformer.ln_f.weight", 1, (int64_t[]){C});
    rc |= rci_nn_weights_add(w, "transformer.ln_f.bias", 1, (int64_t[]){C});
    if (!c->tie_word_embeddings)
        rc |= rci_nn_weights_add(w, "lm_head.weight", 2, (int64_t[]){c->vocab_size, C});
    return rc ? -1 : 0;
}

/* Conv1D `mod` of layer l applied to h, with its bias (and its LoRA adapter, if any) */
static rc_tensor *conv(nn_ctx *x, int l, const char *mod, rc_tensor *h)
{
    rc_tensor *w = rci_nn_p(x, "transformer.h.%d.%s.weight", l, mod);
    rc_tensor *y = rci_nn_conv1d(x->g, h, w, rci_nn_p(x, "transformer.h.%d.%s.bias", l, mod));
    return rci_nn_lora(x, h, y, w);
}

/* causal self-attention of h [B, T, C] in layer l */
static rc_tensor *attention(nn_ctx *x, int l, rc_tensor *h)
{
    rc_graph *g = x->g;
    int64_t B = h->shape[0], T = h->shape[1], C = x->c->d_model, H = x->c->n_head, D = C / H;
    rc_tensor *qkv = conv(x, l, "attn.c_attn", h); /* [B, T, 3C] */
    qkv = rc_reshape(g, qkv, 5, (int64_t[]){B, T, 3, H, D});
    qkv = rc_permute(g, qkv, (int[]){2, 0, 3, 1, 4});                    /* [3, B, H, T, D] */
    rc_tensor *q = rc_reshape(g, rc_slice(g, qkv, 0, 0, 1), 4, (int64_t[]){B, H, T, D});
    rc_tensor *k = rc_reshape(g, rc_slice(g, qkv, 0, 1, 2), 4, (int64_t[]){B, H, T, D});
    rc_tensor *v = rc_reshape(g, rc_slice(g, qkv, 0, 2, 3), 4, (int64_t[]){B, H, T, D});
    rci_nn_cache(x, l, &k, &v);
    rc_tensor *y = rci_nn_attention(g, q, k, v, rci_nn_mask_bias(x), 1.0 / sqrt((double)D), 1);
    return conv(x, l, "attn.c_proj", y);
}

static rc_tensor *mlp(nn_ctx *x, int l, rc_tensor *h)
{
    return conv(x, l, "mlp.c_proj", rci_nn_act(x, conv(x, l, "mlp.c_fc", h)));
}

static rc_tensor *gpt2_logits(nn_ctx *x)
{
    rc_graph *g = x->g;
    double eps = x->c->norm_eps;
    int64_t T = x->in->ids->shape[1];
    rc_tensor *wte = rci_nn_p(x, "transformer.wte.weight");
    rc_tensor *pos = rc_embedding(g, rci_nn_p(x, "transformer.wpe.weight"), rci_nn_positions(x, T, 0));
    rc_tensor *h = rc_add(g, rc_embedding(g, wte, x->in->ids), pos);
    for (int l = 0; l < x->c->n_layer; l++) {
        rci_nn_block_begin(x, l);
        rc_tensor *a = rc_layer_norm(g, h, rci_nn_p(x, "transformer.h.%d.ln_1.weight", l),
                                     rci_nn_p(x, "transformer.h.%d.ln_1.bias", l), eps);
        h = rc_add(g, h, attention(x, l, a));
        rc_tensor *m = rc_layer_norm(g, h, rci_nn_p(x, "transformer.h.%d.ln_2.weight", l),
                                     rci_nn_p(x, "transformer.h.%d.ln_2.bias", l), eps);
        h = rc_add(g, h, mlp(x, l, m));
        rci_nn_block_end(x, l, x->c->n_layer);
    }
    h = rc_layer_norm(g, h, rci_nn_p(x, "transformer.ln_f.weight"), rci_nn_p(x, "transformer.ln_f.bias"), eps);
    rc_tensor *head = x->c->tie_word_embeddings ? wte : rci_nn_p(x, "lm_head.weight");
    return rc_matmul(g, h, head, 0, 1);
}

const nn_family rci_nn_gpt2_family = {RC_MODEL_GPT2, gpt2_weights, gpt2_logits};
