/* t5.c - T5: encoder-decoder with relative position buckets (bidirectional in the encoder,
 * causal in the decoder) shared by all layers of a stack, RMS-style layer norm without bias
 * or mean, no score scaling, ReLU or gated-gelu (v1.1 / Flan) feed-forward, and a tied head
 * scaled by d_model^-0.5. Weights are torch Linear, stored (out, in). */
#include "internal.h"
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int t5_weights(const rc_model_config *c, nn_weights *w)
{
    int64_t C = c->d_model, F = c->d_ff, I = (int64_t)c->n_head * c->head_dim;
    char name[128];
    int rc = rci_nn_weights_add(w, "shared.weight", 2, (int64_t[]){c->vocab_size, C});
    for (int s = 0; s < 2; s++) {
        const char *stack = s ? "decoder" : "encoder";
        int layers = s ? c->n_decoder_layer : c->n_layer;
        for (int l = 0; l < layers; l++) {
            int ff = s ? 2 : 1; /* the decoder's cross-attention is sub-layer 1 */
            for (int a = 0; a < ff; a++) {
                const char *kind = a ? "EncDecAttention" : "SelfAttention";
                const char *proj[4] = {"q", "k", "v", "o"};
                for (int k = 0; k < 4; k++) {
                    snprintf(name, sizeof name, "%s.block.%d.layer.%d.%s.%s.weight", stack, l, a, kind, proj[k]);
                    rc |= rci_nn_weights_add(w, name, 2, k == 3 ? (int64_t[]){C, I} : (int64_t[]){I, C});
                }
                if (l == 0 && a == 0) {
                    snprintf(name, sizeof name, "%s.block.0.layer.0.SelfAttention.relative_attention_bias.weight", stack);
                    rc |= rci_nn_weights_add(w, name, 2, (int64_t[]){c->rel_buckets, c->n_head});
                }
                snprintf(name, sizeof name, "%s.block.%d.layer.%d.layer_norm.weight", stack, l, a);
                rc |= rci_nn_weights_add(w, name, 1, (int64_t[]){C});
            }
            const char *wi[3] = {"wi", "wi_0", "wi_1"};
            for (int k = c->gated_ffn ? 1 : 0; k < (c->gated_ffn ? 3 : 1); k++) {
                snprintf(name, sizeof name, "%s.block.%d.layer.%d.DenseReluDense.%s.weight", stack, l, ff, wi[k]);
                rc |= rci_nn_weights_add(w, name, 2, (int64_t[]){F, C});
            }
            snprintf(name, sizeof name, "%s.block.%d.layer.%d.DenseReluDense.wo.weight", stack, l, ff);
            rc |= rci_nn_weights_add(w, name, 2, (int64_t[]){C, F});
            snprintf(name, sizeof name, "%s.block.%d.layer.%d.layer_norm.weight", stack, l, ff);
            rc |= rci_nn_weights_add(w, name, 1, (int64_t[]){C});
        }
        snprintf(name, sizeof name, "%s.final_layer_norm.weight", stack);
        rc |= rci_nn_weights_add(w, name, 1, (int64_t[]){C});
    }
    if (!c->tie_word_embeddings)
        rc |= rci_nn_weights_add(w, "lm_head.weight", 2, (int64_t[]){c->vocab_size, C});
    return rc ? -1 : 0;
}

/* The bucket of key j for query i, as Hugging Face's T5 computes it (float32 logarithms). */
static int32_t rel_bucket(int64_t rel, int bidirectional, int buckets, int max_distance)
{
    int32_t ret = 0;
    int64_t n;
    if (bidirectional) {
        buckets /= 2;
        ret += rel > 0 ? buckets : 0;
        n = rel < 0 ? -rel : rel;
    } else {
        n = rel < 0 ? -rel : 0;
    }
    int max_exact = buckets / 2;
    if (n < max_exact)
        return ret + (int32_t)n;
    float scale = (float)log((double)max_distance / max_exact);
    float v = logf((float)n / (float)max_exact) / scale * (float)(buckets - max_exact);
    int32_t large = max_exact + (int32_t)v;
    return ret + (large < buckets - 1 ? large : buckets - 1);
}

/* position bias [1, H, Tq, Tk] from the stack's first-layer bucket table */
static rc_tensor *position_bias(nn_ctx *x, const char *stack, int64_t Tq, int64_t Tk, int64_t q0, int bidir)
{
    rc_graph *g = x->g;
    int32_t *d = malloc((size_t)(Tq * Tk > 0 ? Tq * Tk : 1) * sizeof *d);
    if (!d)
        return rci_fail(g, RC_ERR_MEMORY, "t5: out of memory for [%lld, %lld] position buckets",
                        (long long)Tq, (long long)Tk);
    for (int64_t i = 0; i < Tq; i++)
        for (int64_t j = 0; j < Tk; j++)
            d[i * Tk + j] = rel_bucket(j - (i + q0), bidir, x->c->rel_buckets, x->c->rel_max_distance);
    rc_tensor *ids = rc_const(g, "t5_buckets", RC_I32, 2, (int64_t[]){Tq, Tk}, d);
    free(d);
    rc_tensor *table = rci_nn_p(x, "%s.block.0.layer.0.SelfAttention.relative_attention_bias.weight", stack);
    rc_tensor *b = rc_permute(g, rc_embedding(g, table, ids), (int[]){2, 0, 1}); /* [H, Tq, Tk] */
    return rc_reshape(g, b, 4, (int64_t[]){1, x->c->n_head, Tq, Tk});
}

static rc_tensor *norm(nn_ctx *x, const char *stack, int l, int sub, rc_tensor *h)
{
    return rc_rms_norm(x->g, h, rci_nn_p(x, "%s.block.%d.layer.%d.layer_norm.weight", stack, l, sub),
                       x->c->norm_eps, 0.0);
}

/* attention of h over kv (itself for self-attention) with an additive bias; no scaling */
static rc_tensor *attention(nn_ctx *x, const char *stack, int l, int sub, rc_tensor *h, rc_tensor *kv,
                            rc_tensor *bias, int causal)
{
    rc_graph *g = x->g;
    const char *kind = sub ? "EncDecAttention" : "SelfAttention";
    const char *pre = "%s.block.%d.layer.%d.%s.%s.weight";
    int H = x->c->n_head;
    rc_tensor *q = rci_nn_heads(g, rci_nn_linear(g, h, rci_nn_p(x, pre, stack, l, sub, kind, "q"), NULL), H);
    rc_tensor *k = rci_nn_heads(g, rci_nn_linear(g, kv, rci_nn_p(x, pre, stack, l, sub, kind, "k"), NULL), H);
    rc_tensor *v = rci_nn_heads(g, rci_nn_linear(g, kv, rci_nn_p(x, pre, stack, l, sub, kind, "v"), NULL), H);
    rc_tensor *y = rci_nn_attention(g, q, k, v, bias, 1.0, causal);
    return rci_nn_linear(g, y, rci_nn_p(x, pre, stack, l, sub, kind, "o"), NULL);
}

static rc_tensor *ffn(nn_ctx *x, const char *stack, int l, int sub, rc_tensor *h)
{
    rc_graph *g = x->g;
    const char *pre = "%s.block.%d.layer.%d.DenseReluDense.%s.weight";
    rc_tensor *a;
    if (x->c->gated_ffn)
        a = rc_mul(g, rci_nn_act(x, rci_nn_linear(g, h, rci_nn_p(x, pre, stack, l, sub, "wi_0"), NULL)),
                   rci_nn_linear(g, h, rci_nn_p(x, pre, stack, l, sub, "wi_1"), NULL));
    else
        a = rci_nn_act(x, rci_nn_linear(g, h, rci_nn_p(x, pre, stack, l, sub, "wi"), NULL));
    return rci_nn_linear(g, a, rci_nn_p(x, pre, stack, l, sub, "wo"), NULL);
}

static rc_tensor *encoder(nn_ctx *x, rc_tensor *mask_bias)
{
    rc_graph *g = x->g;
    int64_t S = x->in->enc_ids->shape[1];
    rc_tensor *h = rc_embedding(g, rci_nn_p(x, "shared.weight"), x->in->enc_ids);
    rc_tensor *bias = position_bias(x, "encoder", S, S, 0, 1);
    if (mask_bias)
        bias = rc_add(g, bias, mask_bias);
    for (int l = 0; l < x->c->n_layer; l++) {
        rci_nn_block_begin(x, l);
        rc_tensor *a = norm(x, "encoder", l, 0, h);
        h = rc_add(g, h, attention(x, "encoder", l, 0, a, a, bias, 0));
        h = rc_add(g, h, ffn(x, "encoder", l, 1, norm(x, "encoder", l, 1, h)));
        rci_nn_block_end(x, l, x->c->n_layer);
    }
    return rc_rms_norm(g, h, rci_nn_p(x, "encoder.final_layer_norm.weight"), x->c->norm_eps, 0.0);
}

static rc_tensor *t5_logits(nn_ctx *x)
{
    rc_graph *g = x->g;
    rc_tensor *mask_bias = rci_nn_mask_bias(x);
    rc_tensor *enc = encoder(x, mask_bias);
    int64_t T = x->in->ids->shape[1];
    rc_tensor *shared = rci_nn_p(x, "shared.weight");
    rc_tensor *h = rc_embedding(g, shared, x->in->ids);
    rc_tensor *bias = position_bias(x, "decoder", T, T, 0, 0);
    for (int l = 0; l < x->c->n_decoder_layer; l++) {
        rci_nn_block_begin(x, l);
        rc_tensor *a = norm(x, "decoder", l, 0, h);
        h = rc_add(g, h, attention(x, "decoder", l, 0, a, a, bias, 1));
        h = rc_add(g, h, attention(x, "decoder", l, 1, norm(x, "decoder", l, 1, h), enc, mask_bias, 0));
        h = rc_add(g, h, ffn(x, "decoder", l, 2, norm(x, "decoder", l, 2, h)));
        rci_nn_block_end(x, l, x->c->n_decoder_layer);
    }
    h = rc_rms_norm(g, h, rci_nn_p(x, "decoder.final_layer_norm.weight"), x->c->norm_eps, 0.0);
    if (x->c->tie_word_embeddings)
        return rc_matmul(g, rc_scale(g, h, 1.0 / sqrt((double)x->c->d_model)), shared, 0, 1);
    return rc_matmul(g, h, rci_nn_p(x, "lm_head.weight"), 0, 1);
}

const nn_family rci_nn_t5_family = {RC_MODEL_T5, t5_weights, t5_logits};
