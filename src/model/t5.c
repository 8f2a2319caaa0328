/* t5.c - T5: encoder-decoder with relative position buckets (bidirectional in the encoder,
 * causal in the decoder) shared by all layers of a stack, RMS-style layer norm without bias
 * or mean, no score scaling, ReLU or gated-gelu (v1.1 / Flan) feed-forward, and a tied head
 * scaled by d_model^-0.5. Weights are torch Linear, stored (out, in). T5Config's keys,
 * defaults and presets, the parameter table and count, the forward pass. */
#include "internal.h"
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- config.json ---------------------------------------------------------------------- */

/* T5Config() */
static void t5_defaults(rc_model_config *c)
{
    c->vocab_size = 32128, c->d_model = 512, c->head_dim = 64, c->d_ff = 2048;
    c->n_layer = 6, c->n_decoder_layer = -1, c->n_head = 8;
    c->rel_buckets = 32, c->rel_max_distance = 128;
    c->norm_eps = 1e-6;
    snprintf(c->activation, sizeof c->activation, "relu");
    c->tie_word_embeddings = 1;
    c->resid_dropout = c->embd_dropout = c->attn_dropout = 0.1;
    c->pad_token_id = 0, c->eos_token_id = 1;
}

/* feed_forward_proj "ACT" or "gated-ACT" ("gated-gelu" means gelu_new); the derived
 * dense_act_fn / is_gated_act keys, when present, override it as they do in T5Config */
static int read_ffn(rci_cfg_reader *r, rc_model_config *c)
{
    char proj[48] = "relu";
    if (rci_cfg_str(r, "feed_forward_proj", proj, sizeof proj))
        return -1;
    const char *dash = strchr(proj, '-');
    if (dash && (strncmp(proj, "gated-", 6) != 0 || strchr(dash + 1, '-')))
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: feed_forward_proj '%s' is not of the "
                            "form ACT or gated-ACT", r->file, proj);
    c->gated_ffn = dash != NULL;
    const char *act = dash ? dash + 1 : proj;
    if (strcmp(proj, "gated-gelu") == 0)
        act = "gelu_new";
    if (strlen(act) >= sizeof c->activation)
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: feed_forward_proj '%s' is too long",
                            r->file, proj);
    snprintf(c->activation, sizeof c->activation, "%.*s", (int)sizeof c->activation - 1, act);
    return rci_cfg_str(r, "dense_act_fn", c->activation, sizeof c->activation) ||
           rci_cfg_bool(r, "is_gated_act", &c->gated_ffn) ? -1 : 0;
}

static int t5_read(rci_cfg_reader *r, rc_model_config *c)
{
    if (rci_cfg_need_int(r, "d_model", "hidden_size", &c->d_model) ||
        rci_cfg_need_int(r, "num_layers", "num_hidden_layers", &c->n_layer) ||
        rci_cfg_need_int(r, "num_heads", "num_attention_heads", &c->n_head) ||
        rci_cfg_need_int(r, "d_ff", NULL, &c->d_ff) ||
        rci_cfg_need_int(r, "d_kv", NULL, &c->head_dim) ||
        rci_cfg_int(r, "num_decoder_layers", NULL, &c->n_decoder_layer) ||
        rci_cfg_int_strict(r, "relative_attention_num_buckets", NULL, &c->rel_buckets) ||
        rci_cfg_int_strict(r, "relative_attention_max_distance", NULL, &c->rel_max_distance) ||
        rci_cfg_real(r, "layer_norm_epsilon", &c->norm_eps) ||
        rci_cfg_real(r, "dropout_rate", &c->resid_dropout) ||
        rci_cfg_id(r, "decoder_start_token_id", &c->decoder_start_token_id))
        return -1;
    c->embd_dropout = c->attn_dropout = c->resid_dropout;
    return read_ffn(r, c);
}

/* num_decoder_layers null: num_layers; the decoder starts from the pad token */
static void t5_derive(rc_model_config *c)
{
    if (c->n_decoder_layer < 0)
        c->n_decoder_layer = c->n_layer;
    if (c->decoder_start_token_id < 0)
        c->decoder_start_token_id = c->pad_token_id;
}

static const rci_nn_keys t5_keys = {
    .d_model = "d_model", .n_layer = "num_layers", .n_decoder_layer = "num_decoder_layers",
    .n_head = "num_heads", .head_dim = "d_kv", .d_ff = "d_ff", .max_positions = "n_positions",
    .norm_eps = "layer_norm_epsilon", .activation = "dense_act_fn",
};

/* no positions (relative buckets instead); d_kv free of d_model / num_heads */
static int t5_check(const rc_model_config *c, const char *where, rc_error *err)
{
    if (rci_cfg_positive(where, "num_decoder_layers", c->n_decoder_layer, err) ||
        rci_cfg_positive(where, "d_kv", c->head_dim, err) || rci_cfg_check_no_kv_groups(c, &t5_keys, where, err))
        return -1;
    /* the bucket formula takes log(max_distance / max_exact), max_exact = buckets / 2
     * (decoder) or buckets / 4 (encoder): both must be positive and smaller */
    if (c->rel_buckets < 4 || c->rel_buckets % 2 != 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: relative_attention_num_buckets %d "
                            "must be even and at least 4", where, c->rel_buckets);
    if (c->rel_max_distance <= c->rel_buckets / 2)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: relative_attention_max_distance %d "
                            "must exceed relative_attention_num_buckets / 2 = %d", where,
                            c->rel_max_distance, c->rel_buckets / 2);
    return 0;
}

static void t5_write(json_t *o, const rc_model_config *c)
{
    char proj[48];
    if (c->gated_ffn && strcmp(c->activation, "gelu_new") == 0)
        snprintf(proj, sizeof proj, "gated-gelu");
    else
        snprintf(proj, sizeof proj, "%s%s", c->gated_ffn ? "gated-" : "", c->activation);
    rci_cfg_put_int(o, "d_model", c->d_model);
    rci_cfg_put_int(o, "num_layers", c->n_layer);
    rci_cfg_put_int(o, "num_decoder_layers", c->n_decoder_layer);
    rci_cfg_put_int(o, "num_heads", c->n_head);
    rci_cfg_put_int(o, "d_kv", c->head_dim);
    rci_cfg_put_int(o, "d_ff", c->d_ff);
    rci_cfg_put_str(o, "feed_forward_proj", proj);
    rci_cfg_put_str(o, "dense_act_fn", c->activation);
    rci_cfg_put_bool(o, "is_gated_act", c->gated_ffn);
    rci_cfg_put_int(o, "relative_attention_num_buckets", c->rel_buckets);
    rci_cfg_put_int(o, "relative_attention_max_distance", c->rel_max_distance);
    rci_cfg_put_real(o, "layer_norm_epsilon", c->norm_eps);
    rci_cfg_put_real(o, "dropout_rate", c->resid_dropout);
    rci_cfg_put_bool(o, "is_encoder_decoder", 1);
    rci_cfg_put_id(o, "decoder_start_token_id", c->decoder_start_token_id);
}

static double t5_count(const rc_model_config *c)
{
    double d = c->d_model, V = c->vocab_size, inner = (double)c->n_head * c->head_dim;
    double attn = 4 * d * inner + d;  /* q, k, v, o and the layer norm before it */
    double ff = (c->gated_ffn ? 3 : 2) * d * c->d_ff + d;
    double rel = (double)c->rel_buckets * c->n_head;  /* first layer of each stack */
    double enc = c->n_layer * (attn + ff) + rel + d;
    double dec = c->n_decoder_layer * (2 * attn + ff) + rel + d;
    return V * d + enc + dec + (c->tie_word_embeddings ? 0 : V * d);
}

/* t5-3b and t5-11b: heads of 128 */
static void t5_wide_heads(rc_model_config *c)
{
    c->head_dim = 128;
}

/* for tests: small heads, a gated-gelu (v1.1) feed-forward, an untied head, few buckets */
static void tiny_t5(rc_model_config *c)
{
    c->head_dim = 16;
    c->gated_ffn = 1;
    snprintf(c->activation, sizeof c->activation, "gelu_new");
    c->tie_word_embeddings = 0;
    c->rel_buckets = 8, c->rel_max_distance = 16;
}

/* T5 v1.0's sizes (no max_positions: relative buckets), and a tiny one */
static const rci_nn_preset t5_presets[] = {
    {.name = "t5-small", 32128, 512, 6, 8, 2048, 0},
    {.name = "t5-base", 32128, 768, 12, 12, 3072, 0},
    {.name = "t5-large", 32128, 1024, 24, 16, 4096, 0},
    {.name = "t5-3b", 32128, 1024, 24, 32, 16384, 0, .more = t5_wide_heads},
    {.name = "t5-11b", 32128, 1024, 24, 128, 65536, 0, .more = t5_wide_heads},
    {.name = "tiny-t5", 256, 64, 2, 4, 128, 0, .more = tiny_t5},
    {0},
};

/* ---- the model ------------------------------------------------------------------------ */

static int t5_weights(const rc_model_config *c, rci_nn_weights *w)
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
static rc_tensor *position_bias(rci_nn_ctx *x, const char *stack, int64_t Tq, int64_t Tk, int64_t q0, int bidir)
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

static rc_tensor *norm(rci_nn_ctx *x, const char *stack, int l, int sub, rc_tensor *h)
{
    return rc_rms_norm(x->g, h, rci_nn_p(x, "%s.block.%d.layer.%d.layer_norm.weight", stack, l, sub),
                       x->c->norm_eps, 0.0);
}

/* attention of h over kv (itself for self-attention) with an additive bias; no scaling */
static rc_tensor *attention(rci_nn_ctx *x, const char *stack, int l, int sub, rc_tensor *h, rc_tensor *kv,
                            rc_tensor *bias, int causal)
{
    rc_graph *g = x->g;
    const char *kind = sub ? "EncDecAttention" : "SelfAttention";
    const char *pre = "%s.block.%d.layer.%d.%s.%s.weight";
    int H = x->c->n_head;
    rc_tensor *q = rci_nn_heads(g, rci_nn_linear(g, h, rci_nn_p(x, pre, stack, l, sub, kind, "q"), NULL), H);
    rc_tensor *k = rci_nn_heads(g, rci_nn_linear(g, kv, rci_nn_p(x, pre, stack, l, sub, kind, "k"), NULL), H);
    rc_tensor *v = rci_nn_heads(g, rci_nn_linear(g, kv, rci_nn_p(x, pre, stack, l, sub, kind, "v"), NULL), H);
    rc_tensor *y = rci_nn_attention(x, q, k, v, bias, 1.0, causal);
    y = rci_nn_linear(g, y, rci_nn_p(x, pre, stack, l, sub, kind, "o"), NULL);
    return rci_nn_dropout(x, y, x->c->resid_dropout);
}

static rc_tensor *ffn(rci_nn_ctx *x, const char *stack, int l, int sub, rc_tensor *h)
{
    rc_graph *g = x->g;
    const char *pre = "%s.block.%d.layer.%d.DenseReluDense.%s.weight";
    rc_tensor *a;
    if (x->c->gated_ffn)
        a = rc_mul(g, rci_nn_act(x, rci_nn_linear(g, h, rci_nn_p(x, pre, stack, l, sub, "wi_0"), NULL)),
                   rci_nn_linear(g, h, rci_nn_p(x, pre, stack, l, sub, "wi_1"), NULL));
    else
        a = rci_nn_act(x, rci_nn_linear(g, h, rci_nn_p(x, pre, stack, l, sub, "wi"), NULL));
    a = rci_nn_dropout(x, a, x->c->resid_dropout);
    return rci_nn_dropout(x, rci_nn_linear(g, a, rci_nn_p(x, pre, stack, l, sub, "wo"), NULL), x->c->resid_dropout);
}

static rc_tensor *encoder(rci_nn_ctx *x, rc_tensor *mask_bias)
{
    rc_graph *g = x->g;
    int64_t S = x->in->enc_ids->shape[1];
    rc_tensor *h = rci_nn_dropout(x, rc_embedding(g, rci_nn_p(x, "shared.weight"), x->in->enc_ids), x->c->embd_dropout);
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
    h = rc_rms_norm(g, h, rci_nn_p(x, "encoder.final_layer_norm.weight"), x->c->norm_eps, 0.0);
    return rci_nn_dropout(x, h, x->c->resid_dropout);
}

static rc_tensor *t5_logits(rci_nn_ctx *x)
{
    rc_graph *g = x->g;
    rc_tensor *mask_bias = rci_nn_mask_bias(x);
    rc_tensor *enc = encoder(x, mask_bias);
    int64_t T = x->in->ids->shape[1];
    rc_tensor *shared = rci_nn_p(x, "shared.weight");
    rc_tensor *h = rci_nn_dropout(x, rc_embedding(g, shared, x->in->ids), x->c->embd_dropout);
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
    h = rci_nn_dropout(x, h, x->c->resid_dropout);
    if (x->c->tie_word_embeddings)
        return rc_matmul(g, rc_scale(g, h, 1.0 / sqrt((double)x->c->d_model)), shared, 0, 1);
    return rc_matmul(g, h, rci_nn_p(x, "lm_head.weight"), 0, 1);
}

const rci_nn_family rci_nn_t5_family = {
    .type = RC_MODEL_T5,
    .variants = (const rci_nn_variant[]){{"t5", "T5ForConditionalGeneration"}, {0}},
    .keys = &t5_keys,
    .defaults = t5_defaults,
    .read = t5_read,
    .derive = t5_derive,
    .check = t5_check,
    .write = t5_write,
    .count = t5_count,
    .presets = t5_presets,
    .encoder_decoder = 1,
    .tied = (const char *const[]){"encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                                  "lm_head.weight", NULL},
    .weights = t5_weights,
    .logits = t5_logits,
};
