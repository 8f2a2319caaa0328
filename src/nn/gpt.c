/* gpt.c - a GPT-2 shaped decoder built from graph ops. */
#include "nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The parameters of one block, in table order. */
enum {
    LN1_W, LN1_B, ATTN_W, ATTN_B, APROJ_W, APROJ_B, LN2_W, LN2_B, FC_W, FC_B, MPROJ_W, MPROJ_B,
    PER_LAYER
};

int nn_gpt_weights(const nn_gpt_config *c, nn_weights *w)
{
    int64_t C = c->d_model;
    char name[96];
    int rc = nn_weights_add(w, "wte.weight", 2, (int64_t[]){c->vocab, C});
    rc |= nn_weights_add(w, "wpe.weight", 2, (int64_t[]){c->max_seq, C});
    for (int l = 0; l < c->n_layer; l++) {
        static const char *names[PER_LAYER] = {
            "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
            "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
            "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
        const int64_t shapes[PER_LAYER][2] = {{C}, {C}, {C, 3 * C}, {3 * C}, {C, C}, {C},
                                              {C}, {C}, {C, 4 * C}, {4 * C}, {4 * C, C}, {C}};
        for (int k = 0; k < PER_LAYER; k++) {
            snprintf(name, sizeof name, "h.%d.%s", l, names[k]);
            rc |= nn_weights_add(w, name, shapes[k][1] ? 2 : 1, shapes[k]);
        }
    }
    rc |= nn_weights_add(w, "ln_f.weight", 1, (int64_t[]){C});
    rc |= nn_weights_add(w, "ln_f.bias", 1, (int64_t[]){C});
    return rc ? -1 : 0;
}

void nn_gpt_init(const nn_gpt_config *c, nn_weights *w, uint64_t seed)
{
    rc_rng rng = rc_rng_new(seed);
    double resid = 0.02 / sqrt(2.0 * c->n_layer);
    for (int i = 0; i < w->n; i++) {
        const nn_param *p = &w->p[i];
        float *x = nn_weights_get(w, i);
        int is_ln_w = strstr(p->name, "ln_") && strstr(p->name, ".weight");
        int is_resid = strstr(p->name, "c_proj.weight") != NULL;
        for (int64_t j = 0; j < p->numel; j++) {
            if (is_ln_w)
                x[j] = 1.0f;
            else if (p->ndim == 1)
                x[j] = 0.0f;
            else
                x[j] = (float)(rc_rng_normal(&rng) * (is_resid ? resid : 0.02));
        }
    }
}

/* x + b with x [..., n] @ w [in, n] */
static rc_tensor *linear(rc_graph *g, rc_tensor *x, rc_tensor *w, rc_tensor *b)
{
    return rc_add(g, rc_matmul(g, x, w, 0, 0), b);
}

/* causal multi-head self-attention of h [B, T, C] */
static rc_tensor *attention(rc_graph *g, const nn_gpt_config *c, rc_tensor *const *p, rc_tensor *h)
{
    int64_t B = h->shape[0], T = h->shape[1], C = c->d_model, H = c->n_head, D = C / H;
    rc_tensor *qkv = linear(g, h, p[ATTN_W], p[ATTN_B]);                 /* [B, T, 3C] */
    qkv = rc_reshape(g, qkv, 5, (int64_t[]){B, T, 3, H, D});
    qkv = rc_permute(g, qkv, (int[]){2, 0, 3, 1, 4});                     /* [3, B, H, T, D] */
    rc_tensor *q = rc_reshape(g, rc_slice(g, qkv, 0, 0, 1), 4, (int64_t[]){B, H, T, D});
    rc_tensor *k = rc_reshape(g, rc_slice(g, qkv, 0, 1, 2), 4, (int64_t[]){B, H, T, D});
    rc_tensor *v = rc_reshape(g, rc_slice(g, qkv, 0, 2, 3), 4, (int64_t[]){B, H, T, D});
    rc_tensor *att = rc_softmax_ext(g, rc_matmul(g, q, k, 0, 1), NULL, 1.0 / sqrt((double)D), 1);
    rc_tensor *y = rc_matmul(g, att, v, 0, 0);                            /* [B, H, T, D] */
    y = rc_reshape(g, rc_permute(g, y, (int[]){0, 2, 1, 3}), 3, (int64_t[]){B, T, C});
    return linear(g, y, p[APROJ_W], p[APROJ_B]);
}

rc_tensor *nn_gpt_logits(rc_graph *g, const nn_gpt_config *c, rc_tensor *const *p, rc_tensor *ids)
{
    if (!ids || ids->ndim != 2)
        return NULL;
    int64_t T = ids->shape[1];
    rc_tensor *x = rc_add(g, rc_embedding(g, p[0], ids), rc_slice(g, p[1], 0, 0, T));
    for (int l = 0; l < c->n_layer; l++) {
        rc_tensor *const *q = p + 2 + l * PER_LAYER;
        x = rc_add(g, x, attention(g, c, q, rc_layer_norm(g, x, q[LN1_W], q[LN1_B], 1e-5)));
        rc_tensor *h = rc_layer_norm(g, x, q[LN2_W], q[LN2_B], 1e-5);
        h = linear(g, rc_gelu(g, linear(g, h, q[FC_W], q[FC_B])), q[MPROJ_W], q[MPROJ_B]);
        x = rc_add(g, x, h);
    }
    rc_tensor *const *f = p + 2 + c->n_layer * PER_LAYER;
    x = rc_layer_norm(g, x, f[0], f[1], 1e-5);
    return rc_matmul(g, x, p[0], 0, 1);                                   /* tied head */
}
