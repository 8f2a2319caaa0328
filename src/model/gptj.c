/* gptj.c - GPT-J: attention and MLP in parallel off one layer norm, interleaved rotary
 * embedding on the first rotary_dim dims of each head, no attention biases, LM head with a
 * bias. Weights are torch Linear, stored (out, in). */
#include "internal.h"
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>

static int gptj_weights(const rc_model_config *c, nn_weights *w)
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
    rc |= rci_nn_weights_add(w, "lm_head.weight", 2, (int64_t[]){c->vocab_size, C});
    rc |= rci_nn_weights_add(w, "lm_head.bias", 1, (int64_t[]){c->vocab_size});
    return rc ? -1 : 0;
}

/* [B, T, C] -> [B, H, T, D], rotated on the first rotary_dim dims when `rotate` */
static rc_tensor *heads(nn_ctx *x, rc_tensor *h, rc_tensor *pos, int rotate)
{
    rc_graph *g = x->g;
    int64_t B = h->shape[0], T = h->shape[1], H = x->c->n_head, D = x->c->head_dim;
    h = rc_reshape(g, h, 4, (int64_t[]){B, T, H, D});
    if (rotate)
        h = rc_rope(g, h, pos, x->c->rotary_dim, RC_ROPE_INTERLEAVED, x->c->rope_theta);
    return rc_permute(g, h, (int[]){0, 2, 1, 3});
}

static rc_tensor *attention(nn_ctx *x, int l, rc_tensor *h, rc_tensor *pos)
{
    rc_graph *g = x->g;
    rc_tensor *q = heads(x, rci_nn_linear(g, h, rci_nn_p(x, "transformer.h.%d.attn.q_proj.weight", l), NULL), pos, 1);
    rc_tensor *k = heads(x, rci_nn_linear(g, h, rci_nn_p(x, "transformer.h.%d.attn.k_proj.weight", l), NULL), pos, 1);
    rc_tensor *v = heads(x, rci_nn_linear(g, h, rci_nn_p(x, "transformer.h.%d.attn.v_proj.weight", l), NULL), pos, 0);
    rci_nn_cache(x, l, &k, &v);
    rc_tensor *y = rci_nn_attention(g, q, k, v, rci_nn_mask_bias(x), 1.0 / sqrt((double)x->c->head_dim), 1);
    return rci_nn_linear(g, y, rci_nn_p(x, "transformer.h.%d.attn.out_proj.weight", l), NULL);
}

static rc_tensor *mlp(nn_ctx *x, int l, rc_tensor *h)
{
    rc_graph *g = x->g;
    h = rci_nn_linear(g, h, rci_nn_p(x, "transformer.h.%d.mlp.fc_in.weight", l), rci_nn_p(x, "transformer.h.%d.mlp.fc_in.bias", l));
    return rci_nn_linear(g, rci_nn_act(x, h), rci_nn_p(x, "transformer.h.%d.mlp.fc_out.weight", l),
                     rci_nn_p(x, "transformer.h.%d.mlp.fc_out.bias", l));
}

static rc_tensor *gptj_logits(nn_ctx *x)
{
    rc_graph *g = x->g;
    double eps = x->c->norm_eps;
    rc_tensor *pos = rci_nn_positions(x, x->in->ids->shape[1], 0);
    rc_tensor *h = rc_embedding(g, rci_nn_p(x, "transformer.wte.weight"), x->in->ids);
    for (int l = 0; l < x->c->n_layer; l++) {
        rci_nn_block_begin(x, l);
        rc_tensor *a = rc_layer_norm(g, h, rci_nn_p(x, "transformer.h.%d.ln_1.weight", l),
                                     rci_nn_p(x, "transformer.h.%d.ln_1.bias", l), eps);
        h = rc_add(g, rc_add(g, h, attention(x, l, a, pos)), mlp(x, l, a));
        rci_nn_block_end(x, l, x->c->n_layer);
    }
    h = rc_layer_norm(g, h, rci_nn_p(x, "transformer.ln_f.weight"), rci_nn_p(x, "transformer.ln_f.bias"), eps);
    return rci_nn_linear(g, h, rci_nn_p(x, "lm_head.weight"), rci_nn_p(x, "lm_head.bias"));
}

const nn_family rci_nn_gptj_family = {RC_MODEL_GPTJ, gptj_weights, gptj_logits};
