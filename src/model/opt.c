/* opt.c - OPT: learned positions offset by 2, pre- or post-LN (do_layer_norm_before),
 * ReLU MLP, biases everywhere (enable_bias), and the word_embed_proj_dim projections of
 * opt-350m. Weights are torch Linear, stored (out, in). */
#include "internal.h"
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>

enum { OPT_POS_OFFSET = 2 };

#define OPT_L "model.decoder.layers.%d."

static int opt_weights(const rc_model_config *c, nn_weights *w)
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

static rc_tensor *proj(nn_ctx *x, int l, const char *mod, rc_tensor *h)
{
    rc_tensor *b = x->c->enable_bias ? rci_nn_p(x, OPT_L "%s.bias", l, mod) : NULL;
    return rci_nn_linear(x->g, h, rci_nn_p(x, OPT_L "%s.weight", l, mod), b);
}

/* layer norm of layer l's module `mod`; without parameters when layer_norm_affine is 0 */
static rc_tensor *norm(nn_ctx *x, int l, const char *mod, rc_tensor *h)
{
    if (!x->c->layer_norm_affine)
        return rc_layer_norm(x->g, h, NULL, NULL, x->c->norm_eps);
    return rc_layer_norm(x->g, h, rci_nn_p(x, OPT_L "%s.weight", l, mod), rci_nn_p(x, OPT_L "%s.bias", l, mod),
                         x->c->norm_eps);
}

static rc_tensor *attention(nn_ctx *x, int l, rc_tensor *h)
{
    int H = x->c->n_head;
    rc_tensor *q = rci_nn_heads(x->g, proj(x, l, "self_attn.q_proj", h), H);
    rc_tensor *k = rci_nn_heads(x->g, proj(x, l, "self_attn.k_proj", h), H);
    rc_tensor *v = rci_nn_heads(x->g, proj(x, l, "self_attn.v_proj", h), H);
    rci_nn_cache(x, l, &k, &v);
    rc_tensor *y = rci_nn_attention(x->g, q, k, v, rci_nn_mask_bias(x), 1.0 / sqrt((double)x->c->head_dim), 1);
    return proj(x, l, "self_attn.out_proj", y);
}

static rc_tensor *mlp(nn_ctx *x, int l, rc_tensor *h)
{
    return proj(x, l, "fc2", rci_nn_act(x, proj(x, l, "fc1", h)));
}

/* positions 2 + (past .. past + T - 1); with a padding mask HF counts only unmasked
 * tokens (cumsum of the mask), which equals this for left-aligned, unpadded prefixes */
static rc_tensor *positions(nn_ctx *x, int64_t T)
{
    return rci_nn_positions(x, T, OPT_POS_OFFSET);
}

static rc_tensor *opt_logits(nn_ctx *x)
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

const nn_family rci_nn_opt_family = {RC_MODEL_OPT, opt_weights, opt_logits};
