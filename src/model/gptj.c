/* gptj.c - GPT-J: attention and MLP in parallel off one layer norm, interleaved rotary
 * embedding on the first rotary_dim dims of each head, no attention biases, LM head with a
 * bias. Weights are torch Linear, stored (out, in). GPTJConfig's keys (GPT-2's and
 * rotary_dim), defaults and presets, the parameter table and count, the forward pass. */
#include "internal.h"
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>

/* ---- config.json ---------------------------------------------------------------------- */

/* GPTJConfig() */
static void gptj_defaults(rc_model_config *c)
{
    c->vocab_size = 50400, c->max_positions = 2048, c->d_model = 4096;
    c->n_layer = 28, c->n_head = 16, c->d_ff = -1;  /* n_inner None: 4 n_embd */
    c->rotary_dim = 64;
    c->rope_theta = 10000.0;  /* fixed in GPT-J's sinusoid table */
    c->norm_eps = 1e-5;
    snprintf(c->activation, sizeof c->activation, "gelu_new");
    c->bos_token_id = c->eos_token_id = 50256;
}

static int gptj_read(rci_cfg_reader *r, rc_model_config *c)
{
    return rci_nn_gpt2_read_keys(r, c) || rci_cfg_int(r, "rotary_dim", NULL, &c->rotary_dim) ? -1 : 0;
}

/* rotary_dim null: the whole head */
static void gptj_derive(rc_model_config *c)
{
    if (c->rotary_dim < 0)
        c->rotary_dim = c->head_dim;
}

static const rci_nn_keys gptj_keys = {
    .d_model = "n_embd", .n_layer = "n_layer", .n_decoder_layer = "-", .n_head = "n_head",
    .head_dim = "head_dim", .d_ff = "n_inner", .max_positions = "n_positions",
    .norm_eps = "layer_norm_epsilon", .activation = "activation_function",
};

static int gptj_check(const rc_model_config *c, const char *where, rc_error *err)
{
    if (rci_cfg_check_split_heads(c, &gptj_keys, where, err))
        return -1;
    if (c->rotary_dim < 2 || c->rotary_dim % 2 != 0 || c->rotary_dim > c->head_dim)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: rotary_dim %d must be even and in "
                            "[2, %d] (the head size n_embd / n_head)", where, c->rotary_dim,
                            c->head_dim);
    return 0;
}

static void gptj_write(json_t *o, const rc_model_config *c)
{
    rci_nn_gpt2_write_keys(o, c);
    rci_cfg_put_int(o, "rotary_dim", c->rotary_dim);
}

static double gptj_count(const rc_model_config *c)
{
    double d = c->d_model, V = c->vocab_size, ff = c->d_ff;
    double layer = 2 * d + 4 * d * d + rci_nn_linear_params(d, ff, 1) + rci_nn_linear_params(ff, d, 1);
    return V * d + c->n_layer * layer + 2 * d + (c->tie_word_embeddings ? 0 : V * d) + V;
}

static void tiny_gptj(rc_model_config *c)
{
    c->rotary_dim = 8;  /* less than the head: the unrotated part of a head is tested */
}

/* GPT-J-6B, and a tiny one for tests (bos = eos inside its vocabulary) */
static const rci_nn_preset gptj_presets[] = {
    {.name = "gpt-j-6b", 50400, 4096, 28, 16, 16384, 2048},
    {.name = "tiny-gptj", 256, 64, 2, 4, 256, 128, .eos = 255, .more = tiny_gptj},
    {0},
};

/* ---- the model ------------------------------------------------------------------------ */

static int gptj_weights(const rc_model_config *c, rci_nn_weights *w)
{
    int64_t C = c->d_model, F = c->d_ff;
    char name[96];
    int rc = rci_nn_weights_add(w, "transformer.wte.weight", 2, (int64_t[]){c->vocab_size, C});
    for (int l = 0; l < c->n_layer; l++) {
        const struct {
            const char *name;
            int ndim;
            int64_t shape[2];
        } p[10] = {{"ln_1.weight", 1, {C}}, {"ln_1.bias", 1, {C}},
                   {"attn.k_proj.weight", 2, {C, C}}, {"attn.v_proj.weight", 2, {C, C}},
                   {"attn.q_proj.weight", 2, {C, C}}, {"attn.out_proj.weight", 2, {C, C}},
                   {"mlp.fc_in.weight", 2, {F, C}}, {"mlp.fc_in.bias", 1, {F}},
                   {"mlp.fc_out.weight", 2, {C, F}}, {"mlp.fc_out.bias", 1, {C}}};
        for (int k = 0; k < 10; k++) {
            snprintf(name, sizeof name, "transformer.h.%d.%s", l, p[k].name);
            rc |= rci_nn_weights_add(w, name, p[k].ndim, p[k].shape);
        }
    }
    rc |= rci_nn_weights_add(w, "transformer.ln_f.weight", 1, (int64_t[]){C});
    rc |= rci_nn_weights_add(w, "transformer.ln_f.bias", 1, (int64_t[]){C});
    if (!c->tie_word_embeddings) /* tied: the head's weight is wte (its bias stays its own) */
        rc |= rci_nn_weights_add(w, "lm_head.weight", 2, (int64_t[]){c->vocab_size, C});
    rc |= rci_nn_weights_add(w, "lm_head.bias", 1, (int64_t[]){c->vocab_size});
    return rc ? -1 : 0;
}

/* [B, T, C] -> [B, H, T, D], rotated on the first rotary_dim dims when `rotate` */
static rc_tensor *heads(rci_nn_ctx *x, rc_tensor *h, rc_tensor *pos, int rotate)
{
    rc_graph *g = x->g;
    int64_t B = h->shape[0], T = h->shape[1], H = x->c->n_head, D = x->c->head_dim;
    h = rc_reshape(g, h, 4, (int64_t[]){B, T, H, D});
    if (rotate)
        h = rc_rope(g, h, pos, x->c->rotary_dim, RC_ROPE_INTERLEAVED, x->c->rope_theta);
    return rc_permute(g, h, (int[]){0, 2, 1, 3});
}

static rc_tensor *attention(rci_nn_ctx *x, int l, rc_tensor *h, rc_tensor *pos)
{
    rc_graph *g = x->g;
    rc_tensor *q = heads(x, rci_nn_linear(g, h, rci_nn_p(x, "transformer.h.%d.attn.q_proj.weight", l), NULL), pos, 1);
    rc_tensor *k = heads(x, rci_nn_linear(g, h, rci_nn_p(x, "transformer.h.%d.attn.k_proj.weight", l), NULL), pos, 1);
    rc_tensor *v = heads(x, rci_nn_linear(g, h, rci_nn_p(x, "transformer.h.%d.attn.v_proj.weight", l), NULL), pos, 0);
    rci_nn_cache(x, l, &k, &v);
    rc_tensor *y = rci_nn_attention(x, q, k, v, rci_nn_mask_bias(x), 1.0 / sqrt((double)x->c->head_dim), 1);
    y = rci_nn_linear(g, y, rci_nn_p(x, "transformer.h.%d.attn.out_proj.weight", l), NULL);
    return rci_nn_dropout(x, y, x->c->resid_dropout);
}

static rc_tensor *mlp(rci_nn_ctx *x, int l, rc_tensor *h)
{
    rc_graph *g = x->g;
    h = rci_nn_linear(g, h, rci_nn_p(x, "transformer.h.%d.mlp.fc_in.weight", l), rci_nn_p(x, "transformer.h.%d.mlp.fc_in.bias", l));
    h = rci_nn_linear(g, rci_nn_act(x, h), rci_nn_p(x, "transformer.h.%d.mlp.fc_out.weight", l),
                      rci_nn_p(x, "transformer.h.%d.mlp.fc_out.bias", l));
    return rci_nn_dropout(x, h, x->c->resid_dropout);
}

static rc_tensor *gptj_logits(rci_nn_ctx *x)
{
    rc_graph *g = x->g;
    double eps = x->c->norm_eps;
    rc_tensor *pos = rci_nn_positions(x, x->in->ids->shape[1], 0);
    rc_tensor *wte = rci_nn_p(x, "transformer.wte.weight");
    rc_tensor *h = rci_nn_dropout(x, rc_embedding(g, wte, x->in->ids), x->c->embd_dropout);
    for (int l = 0; l < x->c->n_layer; l++) {
        rci_nn_block_begin(x, l);
        rc_tensor *a = rc_layer_norm(g, h, rci_nn_p(x, "transformer.h.%d.ln_1.weight", l),
                                     rci_nn_p(x, "transformer.h.%d.ln_1.bias", l), eps);
        rc_tensor *y = attention(x, l, a, pos); /* before the MLP: its dropout sites first, as HF's */
        h = rc_add(g, rc_add(g, h, y), mlp(x, l, a));
        rci_nn_block_end(x, l, x->c->n_layer);
    }
    h = rc_layer_norm(g, h, rci_nn_p(x, "transformer.ln_f.weight"), rci_nn_p(x, "transformer.ln_f.bias"), eps);
    rc_tensor *head = x->c->tie_word_embeddings ? wte : rci_nn_p(x, "lm_head.weight");
    return rci_nn_linear(g, h, head, rci_nn_p(x, "lm_head.bias"));
}

const rci_nn_family rci_nn_gptj_family = {
    .type = RC_MODEL_GPTJ,
    .variants = (const rci_nn_variant[]){{"gptj", "GPTJForCausalLM"}, {0}},
    .keys = &gptj_keys,
    .defaults = gptj_defaults,
    .read = gptj_read,
    .derive = gptj_derive,
    .check = gptj_check,
    .write = gptj_write,
    .count = gptj_count,
    .presets = gptj_presets,
    .tied = (const char *const[]){"lm_head.weight", NULL},
    .weights = gptj_weights,
    .logits = gptj_logits,
};
