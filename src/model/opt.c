/* opt.c - OPT: learned positions offset by 2, pre- or post-LN (do_layer_norm_before),
 * ReLU MLP, biases everywhere (enable_bias), and the word_embed_proj_dim projections of
 * opt-350m. Weights are torch Linear, stored (out, in). OPTConfig's keys, defaults and
 * presets, the parameter table and count, the forward pass. */
#include "internal.h"
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>

enum { OPT_POS_OFFSET = 2 };

/* ---- config.json ---------------------------------------------------------------------- */

/* OPTConfig() */
static void opt_defaults(rc_model_config *c)
{
    c->vocab_size = 50272, c->d_model = 768, c->n_layer = 12, c->n_head = 12;
    c->d_ff = 3072, c->max_positions = 2048, c->word_embed_proj_dim = -1;
    c->norm_eps = 1e-5;  /* nn.LayerNorm's default; OPTConfig has no key for it */
    snprintf(c->activation, sizeof c->activation, "relu");
    c->do_layer_norm_before = 1, c->enable_bias = 1, c->layer_norm_affine = 1;
    c->tie_word_embeddings = 1;
    c->resid_dropout = 0.1; /* OPT drops no embeddings: embd_dropout stays 0 */
    c->pad_token_id = 1, c->bos_token_id = 2, c->eos_token_id = 2;
}

static int opt_read(rci_cfg_reader *r, rc_model_config *c)
{
    if (rci_cfg_need_int(r, "hidden_size", NULL, &c->d_model) ||
        rci_cfg_need_int(r, "num_hidden_layers", NULL, &c->n_layer) ||
        rci_cfg_need_int(r, "num_attention_heads", NULL, &c->n_head) ||
        rci_cfg_need_int(r, "ffn_dim", NULL, &c->d_ff) ||
        rci_cfg_int_strict(r, "max_position_embeddings", NULL, &c->max_positions) ||
        rci_cfg_int(r, "word_embed_proj_dim", NULL, &c->word_embed_proj_dim) ||
        rci_cfg_str(r, "activation_function", c->activation, sizeof c->activation) ||
        rci_cfg_bool(r, "do_layer_norm_before", &c->do_layer_norm_before) ||
        rci_cfg_bool(r, "_remove_final_layer_norm", &c->remove_final_layer_norm) ||
        rci_cfg_bool(r, "enable_bias", &c->enable_bias) ||
        rci_cfg_bool(r, "layer_norm_elementwise_affine", &c->layer_norm_affine) ||
        rci_cfg_real(r, "dropout", &c->resid_dropout) ||
        rci_cfg_real(r, "attention_dropout", &c->attn_dropout))
        return -1;
    /* LayerDrop (whole layers skipped at random in training), which redco does not
     * implement: a nonzero probability is an error rather than a different training */
    double layerdrop = 0;
    if (rci_cfg_real(r, "layerdrop", &layerdrop))
        return -1;
    if (layerdrop != 0)
        return rc_error_set(r->err, RC_ERR_UNSUPPORTED, "%s: layerdrop %g is not supported (LayerDrop; 0 is)",
                            r->file, layerdrop);
    return 0;
}

/* word_embed_proj_dim null: no projection */
static void opt_derive(rc_model_config *c)
{
    if (c->word_embed_proj_dim < 0)
        c->word_embed_proj_dim = c->d_model;
}

static const rci_nn_keys opt_keys = {
    .d_model = "hidden_size", .n_layer = "num_hidden_layers", .n_decoder_layer = "-",
    .n_head = "num_attention_heads", .head_dim = "head_dim", .d_ff = "ffn_dim",
    .max_positions = "max_position_embeddings", .norm_eps = "layer_norm_eps",
    .activation = "activation_function",
};

static int opt_check(const rc_model_config *c, const char *where, rc_error *err)
{
    if (rci_cfg_check_split_heads(c, &opt_keys, where, err))
        return -1;
    if (c->word_embed_proj_dim < 1)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: word_embed_proj_dim must be positive, "
                            "got %d", where, c->word_embed_proj_dim);
    return 0;
}

static void opt_write(json_t *o, const rc_model_config *c)
{
    rci_cfg_put_int(o, "hidden_size", c->d_model);
    rci_cfg_put_int(o, "num_hidden_layers", c->n_layer);
    rci_cfg_put_int(o, "num_attention_heads", c->n_head);
    rci_cfg_put_int(o, "ffn_dim", c->d_ff);
    rci_cfg_put_int(o, "max_position_embeddings", c->max_positions);
    rci_cfg_put_int(o, "word_embed_proj_dim", c->word_embed_proj_dim);
    rci_cfg_put_str(o, "activation_function", c->activation);
    rci_cfg_put_bool(o, "do_layer_norm_before", c->do_layer_norm_before);
    rci_cfg_put_bool(o, "_remove_final_layer_norm", c->remove_final_layer_norm);
    rci_cfg_put_bool(o, "enable_bias", c->enable_bias);
    rci_cfg_put_bool(o, "layer_norm_elementwise_affine", c->layer_norm_affine);
    rci_cfg_put_real(o, "dropout", c->resid_dropout);
    rci_cfg_put_real(o, "attention_dropout", c->attn_dropout);
}

static double opt_count(const rc_model_config *c)
{
    double d = c->d_model, V = c->vocab_size, wp = c->word_embed_proj_dim, ff = c->d_ff;
    int b = c->enable_bias;
    double norm = c->layer_norm_affine ? 2 * d : 0;
    double layer = 4 * rci_nn_linear_params(d, d, b) + norm + rci_nn_linear_params(d, ff, b) +
                   rci_nn_linear_params(ff, d, b) + norm;
    double n = V * wp + ((double)c->max_positions + OPT_POS_OFFSET) * d + c->n_layer * layer;
    if (wp != d)
        n += 2 * wp * d;  /* project_in, project_out (no bias) */
    if (c->do_layer_norm_before && !c->remove_final_layer_norm)
        n += norm;
    return n + (c->tie_word_embeddings ? 0 : V * wp);
}

/* opt-350m: embeddings of 512 projected to 1024, layer norms after the blocks */
static void opt_350m(rc_model_config *c)
{
    c->word_embed_proj_dim = 512;
    c->do_layer_norm_before = 0;
}

/* facebook/opt-* sizes, and a tiny one for tests */
static const rci_nn_preset opt_presets[] = {
    {.name = "opt-125m", 50272, 768, 12, 12, 3072, 2048},
    {.name = "opt-350m", 50272, 1024, 24, 16, 4096, 2048, .more = opt_350m},
    {.name = "opt-1.3b", 50272, 2048, 24, 32, 8192, 2048},
    {.name = "opt-2.7b", 50272, 2560, 32, 32, 10240, 2048},
    {.name = "opt-6.7b", 50272, 4096, 32, 32, 16384, 2048},
    {.name = "opt-13b", 50272, 5120, 40, 40, 20480, 2048},
    {.name = "opt-30b", 50272, 7168, 48, 56, 28672, 2048},
    {.name = "opt-66b", 50272, 9216, 64, 72, 36864, 2048},
    {.name = "tiny-opt", 256, 64, 2, 4, 256, 128},
    {0},
};

/* ---- the model ------------------------------------------------------------------------ */

#define OPT_L "model.decoder.layers.%d."

static int opt_weights(const rc_model_config *c, rci_nn_weights *w)
{
    int64_t C = c->d_model, F = c->d_ff, P = c->word_embed_proj_dim;
    char name[96];
    int rc = rci_nn_weights_add(w, "model.decoder.embed_tokens.weight", 2, (int64_t[]){c->vocab_size, P});
    rc |= rci_nn_weights_add(w, "model.decoder.embed_positions.weight", 2,
                         (int64_t[]){c->max_positions + OPT_POS_OFFSET, C});
    if (P != C) {
        rc |= rci_nn_weights_add(w, "model.decoder.project_out.weight", 2, (int64_t[]){P, C});
        rc |= rci_nn_weights_add(w, "model.decoder.project_in.weight", 2, (int64_t[]){C, P});
    }
    if (c->do_layer_norm_before && !c->remove_final_layer_norm && c->layer_norm_affine) {
        rc |= rci_nn_weights_add(w, "model.decoder.final_layer_norm.weight", 1, (int64_t[]){C});
        rc |= rci_nn_weights_add(w, "model.decoder.final_layer_norm.bias", 1, (int64_t[]){C});
    }
    for (int l = 0; l < c->n_layer; l++) {
        const struct {
            const char *name;
            int64_t out, in;
        } lin[6] = {{"self_attn.k_proj", C, C}, {"self_attn.v_proj", C, C}, {"self_attn.q_proj", C, C},
                    {"self_attn.out_proj", C, C}, {"fc1", F, C}, {"fc2", C, F}};
        for (int k = 0; k < 6; k++) {
            snprintf(name, sizeof name, OPT_L "%s.weight", l, lin[k].name);
            rc |= rci_nn_weights_add(w, name, 2, (int64_t[]){lin[k].out, lin[k].in});
            if (c->enable_bias) {
                snprintf(name, sizeof name, OPT_L "%s.bias", l, lin[k].name);
                rc |= rci_nn_weights_add(w, name, 1, (int64_t[]){lin[k].out});
            }
        }
        const char *norms[2] = {"self_attn_layer_norm", "final_layer_norm"};
        for (int k = 0; k < 2 && c->layer_norm_affine; k++) {
            snprintf(name, sizeof name, OPT_L "%s.weight", l, norms[k]);
            rc |= rci_nn_weights_add(w, name, 1, (int64_t[]){C});
            snprintf(name, sizeof name, OPT_L "%s.bias", l, norms[k]);
            rc |= rci_nn_weights_add(w, name, 1, (int64_t[]){C});
        }
    }
    if (!c->tie_word_embeddings)
        rc |= rci_nn_weights_add(w, "lm_head.weight", 2, (int64_t[]){c->vocab_size, P});
    return rc ? -1 : 0;
}

static rc_tensor *proj(rci_nn_ctx *x, int l, const char *mod, rc_tensor *h)
{
    rc_tensor *b = x->c->enable_bias ? rci_nn_p(x, OPT_L "%s.bias", l, mod) : NULL;
    return rci_nn_linear(x->g, h, rci_nn_p(x, OPT_L "%s.weight", l, mod), b);
}

/* layer norm of layer l's module `mod`; without parameters when layer_norm_affine is 0 */
static rc_tensor *norm(rci_nn_ctx *x, int l, const char *mod, rc_tensor *h)
{
    if (!x->c->layer_norm_affine)
        return rc_layer_norm(x->g, h, NULL, NULL, x->c->norm_eps);
    return rc_layer_norm(x->g, h, rci_nn_p(x, OPT_L "%s.weight", l, mod), rci_nn_p(x, OPT_L "%s.bias", l, mod),
                         x->c->norm_eps);
}

static rc_tensor *attention(rci_nn_ctx *x, int l, rc_tensor *h)
{
    int H = x->c->n_head;
    rc_tensor *q = rci_nn_heads(x->g, proj(x, l, "self_attn.q_proj", h), H);
    rc_tensor *k = rci_nn_heads(x->g, proj(x, l, "self_attn.k_proj", h), H);
    rc_tensor *v = rci_nn_heads(x->g, proj(x, l, "self_attn.v_proj", h), H);
    rci_nn_cache(x, l, &k, &v);
    rc_tensor *y = rci_nn_attention(x, q, k, v, rci_nn_mask_bias(x), 1.0 / sqrt((double)x->c->head_dim), 1);
    return rci_nn_dropout(x, proj(x, l, "self_attn.out_proj", y), x->c->resid_dropout);
}

static rc_tensor *mlp(rci_nn_ctx *x, int l, rc_tensor *h)
{
    return rci_nn_dropout(x, proj(x, l, "fc2", rci_nn_act(x, proj(x, l, "fc1", h))), x->c->resid_dropout);
}

/* positions 2 + (past .. past + T - 1); with a padding mask HF counts only unmasked
 * tokens (cumsum of the mask), which equals this for left-aligned, unpadded prefixes */
static rc_tensor *positions(rci_nn_ctx *x, int64_t T)
{
    return rci_nn_positions(x, T, OPT_POS_OFFSET);
}

static rc_tensor *opt_logits(rci_nn_ctx *x)
{
    rc_graph *g = x->g;
    int pre = x->c->do_layer_norm_before, project = x->c->word_embed_proj_dim != x->c->d_model;
    rc_tensor *emb = rci_nn_p(x, "model.decoder.embed_tokens.weight");
    rc_tensor *h = rc_embedding_pad(g, emb, x->in->ids, x->c->pad_token_id); /* torch padding_idx */
    if (project)
        h = rci_nn_linear(g, h, rci_nn_p(x, "model.decoder.project_in.weight"), NULL);
    rc_tensor *pos = positions(x, x->in->ids->shape[1]);
    h = rc_add(g, h, rc_embedding(g, rci_nn_p(x, "model.decoder.embed_positions.weight"), pos));
    for (int l = 0; l < x->c->n_layer; l++) {
        rci_nn_block_begin(x, l);
        rc_tensor *a = attention(x, l, pre ? norm(x, l, "self_attn_layer_norm", h) : h);
        h = rc_add(g, h, a);
        if (!pre)
            h = norm(x, l, "self_attn_layer_norm", h);
        rc_tensor *m = mlp(x, l, pre ? norm(x, l, "final_layer_norm", h) : h);
        h = rc_add(g, h, m);
        if (!pre)
            h = norm(x, l, "final_layer_norm", h);
        rci_nn_block_end(x, l, x->c->n_layer);
    }
    if (pre && !x->c->remove_final_layer_norm)
        h = x->c->layer_norm_affine
                ? rc_layer_norm(g, h, rci_nn_p(x, "model.decoder.final_layer_norm.weight"),
                                rci_nn_p(x, "model.decoder.final_layer_norm.bias"), x->c->norm_eps)
                : rc_layer_norm(g, h, NULL, NULL, x->c->norm_eps);
    if (project)
        h = rci_nn_linear(g, h, rci_nn_p(x, "model.decoder.project_out.weight"), NULL);
    rc_tensor *head = x->c->tie_word_embeddings ? emb : rci_nn_p(x, "lm_head.weight");
    return rc_matmul(g, h, head, 0, 1);
}

const rci_nn_family rci_nn_opt_family = {
    .type = RC_MODEL_OPT,
    .variants = (const rci_nn_variant[]){{"opt", "OPTForCausalLM"}, {0}},
    .keys = &opt_keys,
    .defaults = opt_defaults,
    .read = opt_read,
    .derive = opt_derive,
    .check = opt_check,
    .write = opt_write,
    .count = opt_count,
    .presets = opt_presets,
    .tied = (const char *const[]){"lm_head.weight", NULL},
    .weights = opt_weights,
    .logits = opt_logits,
};
