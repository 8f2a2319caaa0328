/* nn_internal.h - what the family builders share. */
#ifndef REDCO_NN_INTERNAL_H
#define REDCO_NN_INTERNAL_H

#include "nn.h"

/* A builder's view of one forward pass. */
typedef struct {
    rc_graph *g;
    const rc_model_config *c;
    const nn_weights *w;
    rc_tensor *const *p;
    const nn_inputs *in;
} nn_ctx;

/* The leaf of the parameter named by the printf-style format; NULL (graph error set) if
 * the table has no such parameter. */
rc_tensor *rci_nn_p(nn_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1 when the table has the named parameter (optional biases, heads) */
int rci_nn_has(nn_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* x [..., in] @ w^T + b for a torch Linear weight [out, in]; b may be NULL */
rc_tensor *rci_nn_linear(rc_graph *g, rc_tensor *x, rc_tensor *w, rc_tensor *b);
/* x [..., in] @ w + b for GPT-2's Conv1D weight [in, out] */
rc_tensor *rci_nn_conv1d(rc_graph *g, rc_tensor *x, rc_tensor *w, rc_tensor *b);
/* y (the output of projection w applied to h) plus its LoRA adapter's
 * scale (h a^T) b^T when the inputs carry one for w; else y */
rc_tensor *rci_nn_lora(nn_ctx *x, rc_tensor *h, rc_tensor *y, rc_tensor *w);
/* [B, T, H*D] -> [B, H, T, D] */
rc_tensor *rci_nn_heads(rc_graph *g, rc_tensor *x, int heads);
/* Attention of q [B, H, Tq, D] over k, v [B, KV, Tk, D] (KV divides H: grouped queries);
 * bias is added to the scaled scores (broadcast to [B, H, Tq, Tk]) and may be NULL.
 * Returns [B, Tq, H*D]. */
rc_tensor *rci_nn_attention(rc_graph *g, rc_tensor *q, rc_tensor *k, rc_tensor *v, rc_tensor *bias,
                        double scale, int causal);
/* Joins the cache of layer l (if any) before k, v ([B, KV, T, D]) and stores the result in
 * the caller's new_kv (if asked). */
void rci_nn_cache(nn_ctx *x, int layer, rc_tensor **k, rc_tensor **v);
/* The additive attention bias [B, 1, 1, Tk] of in->mask (0 keep, -1e9 pad), or NULL. */
rc_tensor *rci_nn_mask_bias(nn_ctx *x);
/* The activation named by a HF config (gelu_new, gelu, relu, silu, ...); NULL with the
 * graph's error set for a name redco does not know. */
rc_tensor *rci_nn_act(nn_ctx *x, rc_tensor *h);
/* Recomputation: blocks l .. l + every - 1 form one segment when the graph asks for it
 * (rc_graph_set_remat); call begin before block l of n and end after it. */
void rci_nn_block_begin(nn_ctx *x, int l);
void rci_nn_block_end(nn_ctx *x, int l, int n);
/* positions first + past .. first + past + T - 1 as an i32 constant [T] */
rc_tensor *rci_nn_positions(nn_ctx *x, int64_t T, int first);

/* One model family: its Hugging Face parameter table and its forward pass. Each family
 * file (gpt2.c, llama.c, opt.c, gptj.c, t5.c) exports one; model.c picks by type. */
typedef struct {
    rc_model_type type;
    int (*weights)(const rc_model_config *c, nn_weights *w);   /* adds every parameter; -1: memory */
    rc_tensor *(*logits)(nn_ctx *x);                          /* logits [B, T, vocab] */
} nn_family;

extern const nn_family rci_nn_gpt2_family, rci_nn_llama_family, rci_nn_opt_family, rci_nn_gptj_family,
    rci_nn_t5_family;

#endif
