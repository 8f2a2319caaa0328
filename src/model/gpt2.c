/* gpt2.c - GPT-2: learned positions, pre-LN blocks, gelu (tanh form) MLP, causal
 * attention, LM head tied to the token embedding. Weights are Conv1D, stored (in, out).
 * GPT2Config's keys (shared with GPT-J), defaults and presets, the parameter table and count,
 * the forward pass. */
#include "internal.h"
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>

/* ---- config.json ---------------------------------------------------------------------- */

/* GPT2Config() */
static void gpt2_defaults(rc_model_config *c)
{
    c->vocab_size = 50257, c->max_positions = 1024, c->d_model = 768;
    c->n_layer = 12, c->n_head = 12, c->d_ff = -1;  /* n_inner None: 4 n_embd */
    c->norm_eps = 1e-5;
    snprintf(c->activation, sizeof c->activation, "gelu_new");
    c->bos_token_id = c->eos_token_id = 50256;
    c->tie_word_embeddings = 1;
    c->resid_dropout = c->embd_dropout = c->attn_dropout = 0.1;
}

int rci_nn_gpt2_read_keys(rci_cfg_reader *r, rc_model_config *c)
{
    return rci_cfg_need_int(r, "n_embd", "hidden_size", &c->d_model) ||
           rci_cfg_need_int(r, "n_layer", "num_hidden_layers", &c->n_layer) ||
           rci_cfg_need_int(r, "n_head", "num_attention_heads", &c->n_head) ||
           rci_cfg_int_strict(r, "n_positions", "max_position_embeddings", &c->max_positions) ||
           rci_cfg_int(r, "n_inner", NULL, &c->d_ff) ||
           rci_cfg_real(r, "layer_norm_epsilon", &c->norm_eps) ||
           rci_cfg_str(r, "activation_function", c->activation, sizeof c->activation) ||
           rci_cfg_real(r, "resid_pdrop", &c->resid_dropout) ||
           rci_cfg_real(r, "embd_pdrop", &c->embd_dropout) ||
           rci_cfg_real(r, "attn_pdrop", &c->attn_dropout) ? -1 : 0;
}

/* GPT-2's keys; settings the forward pass does not implement are errors */
static int gpt2_read(rci_cfg_reader *r, rc_model_config *c)
{
    return rci_nn_gpt2_read_keys(r, c) || rci_cfg_reject_bool(r, "scale_attn_weights", 0) ||
           rci_cfg_reject_bool(r, "scale_attn_by_inverse_layer_idx", 1) ||
           rci_cfg_reject_bool(r, "add_cross_attention", 1) ? -1 : 0;
}

static const rci_nn_keys gpt2_keys = {
    .d_model = "n_embd", .n_layer = "n_layer", .n_decoder_layer = "-", .n_head = "n_head",
    .head_dim = "head_dim", .d_ff = "n_inner", .max_positions = "n_positions",
    .norm_eps = "layer_norm_epsilon", .activation = "activation_function",
};

static int gpt2_check(const rc_model_config *c, const char *where, rc_error *err)
{
    return rci_cfg_check_split_heads(c, &gpt2_keys, where, err);
}

void rci_nn_gpt2_write_keys(json_t *o, const rc_model_config *c)
{
    rci_cfg_put_int(o, "n_embd", c->d_model);
    rci_cfg_put_int(o, "n_layer", c->n_layer);
    rci_cfg_put_int(o, "n_head", c->n_head);
    rci_cfg_put_int(o, "n_positions", c->max_positions);
    rci_cfg_put_int(o, "n_inner", c->d_ff);
    rci_cfg_put_real(o, "layer_norm_epsilon", c->norm_eps);
    rci_cfg_put_str(o, "activation_function", c->activation);
    rci_cfg_put_real(o, "resid_pdrop", c->resid_dropout);
    rci_cfg_put_real(o, "embd_pdrop", c->embd_dropout);
    rci_cfg_put_real(o, "attn_pdrop", c->attn_dropout);
}

static double gpt2_count(const rc_model_config *c)
{
    double d = c->d_model, V = c->vocab_size, ff = c->d_ff;
    double layer = 2 * d + rci_nn_linear_params(d, 3 * d, 1) + rci_nn_linear_params(d, d, 1) + 2 * d +
                   rci_nn_linear_params(d, ff, 1) + rci_nn_linear_params(ff, d, 1);
    return V * d + (double)c->max_positions * d + c->n_layer * layer + 2 * d +
           (c->tie_word_embeddings ? 0 : V * d);
}

/* The demo's GPT-2 trains without dropout: a 3-minute run that sees its book about 7 times
 * underfits, and dropout cost it (2.007 held-out bits per byte with GPT-2's 0.1, 1.994
 * without; its steps 24% slower with it on 2 cores). */
static void gpt2_demo(rc_model_config *c)
{
    c->resid_dropout = c->embd_dropout = c->attn_dropout = 0;
}

/* Published sizes (OpenAI) and redco's small ones. */
static const rci_nn_preset gpt2_presets[] = {
    {.name = "gpt2", 50257, 768, 12, 12, 3072, 1024},
    {.name = "gpt2-medium", 50257, 1024, 24, 16, 4096, 1024},
    {.name = "gpt2-large", 50257, 1280, 36, 20, 5120, 1024},
    {.name = "gpt2-xl", 50257, 1600, 48, 25, 6400, 1024},
    /* a GPT-2 of 7.3M parameters with the real vocabulary: the demo trains it on 2 cores */
    {.name = "gpt2-mini", 50257, 128, 4, 4, 512, 256},
    /* the demo's GPT-2: 1.3M parameters over the 4096 ids of a BPE vocabulary learned from
     * the demo's book (redco tokenizer-train), <|endoftext|> last. Sized for a 3-minute run
     * on 2 cores, which sees the book about 7 times */
    {.name = "gpt2-demo", 4096, 128, 4, 4, 512, 256, .eos = 4095, .more = gpt2_demo},
    /* for tests: bos = eos inside the small vocabulary */
    {.name = "tiny-gpt2", 256, 64, 2, 4, 256, 128, .eos = 255},
    {0},
};

/* ---- the model ------------------------------------------------------------------------ */

rc_model_config rci_nn_gpt2_config(int vocab, int positions, int layers, int heads, int d_model)
{
    rc_model_config c = {.type = RC_MODEL_GPT2, .model_type = "gpt2", .vocab_size = vocab,
                         .d_model = d_model, .n_layer = layers, .n_head = heads, .n_kv_head = heads,
                         .head_dim = d_model / heads, .d_ff = 4 * d_model, .max_positions = positions,
                         .norm_eps = 1e-5, .activation = "gelu_new", .tie_word_embeddings = 1,
                         .bos_token_id = -1, .eos_token_id = -1, .pad_token_id = -1};
    return c;
}

static int gpt2_weights(const rc_model_config *c, rci_nn_weights *w)
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
static rc_tensor *conv(rci_nn_ctx *x, int l, const char *mod, rc_tensor *h)
{
    rc_tensor *w = rci_nn_p(x, "transformer.h.%d.%s.weight", l, mod);
    rc_tensor *y = rci_nn_conv1d(x->g, h, w, rci_nn_p(x, "transformer.h.%d.%s.bias", l, mod));
    return rci_nn_lora(x, h, y, w);
}

/* causal self-attention of h [B, T, C] in layer l */
static rc_tensor *attention(rci_nn_ctx *x, int l, rc_tensor *h)
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
    rc_tensor *y = rci_nn_attention(x, q, k, v, rci_nn_mask_bias(x), 1.0 / sqrt((double)D), 1);
    return rci_nn_dropout(x, conv(x, l, "attn.c_proj", y), x->c->resid_dropout);
}

static rc_tensor *mlp(rci_nn_ctx *x, int l, rc_tensor *h)
{
    rc_tensor *y = conv(x, l, "mlp.c_proj", rci_nn_act(x, conv(x, l, "mlp.c_fc", h)));
    return rci_nn_dropout(x, y, x->c->resid_dropout);
}

static rc_tensor *gpt2_logits(rci_nn_ctx *x)
{
    rc_graph *g = x->g;
    double eps = x->c->norm_eps;
    int64_t T = x->in->ids->shape[1];
    rc_tensor *wte = rci_nn_p(x, "transformer.wte.weight");
    rc_tensor *pos = rc_embedding(g, rci_nn_p(x, "transformer.wpe.weight"), rci_nn_positions(x, T, 0));
    rc_tensor *h = rci_nn_dropout(x, rc_add(g, rc_embedding(g, wte, x->in->ids), pos), x->c->embd_dropout);
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

const rci_nn_family rci_nn_gpt2_family = {
    .type = RC_MODEL_GPT2,
    .variants = (const rci_nn_variant[]){{"gpt2", "GPT2LMHeadModel"}, {0}},
    .keys = &gpt2_keys,
    .defaults = gpt2_defaults,
    .read = gpt2_read,
    .check = gpt2_check,
    .write = rci_nn_gpt2_write_keys,
    .count = gpt2_count,
    .presets = gpt2_presets,
    .scaled_init = "c_proj.weight",
    .tied = (const char *const[]){"lm_head.weight", NULL},
    .weights = gpt2_weights,
    .logits = gpt2_logits,
    .lora_targets = "c_attn",
    .lora_modules = "GPT-2: c_attn, c_proj, c_fc",
    .conv1d = 1,
};
