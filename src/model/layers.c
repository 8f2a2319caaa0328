/* layers.c - the pieces every family's forward pass is built from: parameter lookup,
 * linear layers, attention, the key/value cache, masks, positions and activations. */
#include "internal.h"
#include "nn_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int find_v(rci_nn_ctx *x, const char *fmt, va_list ap, char *name, size_t size)
{
    vsnprintf(name, size, fmt, ap);
    return rci_nn_weights_find(x->w, name);
}

rc_tensor *rci_nn_p(rci_nn_ctx *x, const char *fmt, ...)
{
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    int i = find_v(x, fmt, ap, name, sizeof name);
    va_end(ap);
    if (i < 0)
        return rci_fail(x->g, RC_ERR_ARG, "model %s: no parameter '%s'", x->c->model_type, name);
    return x->p[i];
}

int rci_nn_has(rci_nn_ctx *x, const char *fmt, ...)
{
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    int i = find_v(x, fmt, ap, name, sizeof name);
    va_end(ap);
    return i >= 0;
}

rc_tensor *rci_nn_linear(rc_graph *g, rc_tensor *x, rc_tensor *w, rc_tensor *b)
{
    rc_tensor *y = rc_matmul(g, x, w, 0, 1);
    return b ? rc_add(g, y, b) : y;
}

rc_tensor *rci_nn_conv1d(rc_graph *g, rc_tensor *x, rc_tensor *w, rc_tensor *b)
{
    rc_tensor *y = rc_matmul(g, x, w, 0, 0);
    return b ? rc_add(g, y, b) : y;
}

rc_tensor *rci_nn_lora(rci_nn_ctx *x, rc_tensor *h, rc_tensor *y, rc_tensor *w)
{
    const rci_nn_lora_set *lo = x->in->lora;
    if (!lo || !y || !w)
        return y;
    for (int i = 0; i < x->w->n; i++) {
        if (x->p[i] != w || !lo->a[i] || !lo->b[i])
            continue;
        rc_tensor *d = rc_matmul(x->g, rc_matmul(x->g, h, lo->a[i], 0, 1), lo->b[i], 0, 1); /* [..., out] */
        return rc_add(x->g, y, rc_scale(x->g, d, lo->scale));
    }
    return y;
}

rc_tensor *rci_nn_heads(rc_graph *g, rc_tensor *x, int heads)
{
    if (!x)
        return NULL;
    int64_t B = x->shape[0], T = x->shape[1], D = x->shape[2] / heads;
    rc_tensor *y = rc_reshape(g, x, 4, (int64_t[]){B, T, heads, D});
    return rc_permute(g, y, (int[]){0, 2, 1, 3});
}

/* k [B, KV, T, D] repeated to [B, H, T, D]: query head h reads kv head h / (H / KV) */
static rc_tensor *repeat_kv(rc_graph *g, rc_tensor *k, int64_t heads)
{
    int64_t B = k->shape[0], KV = k->shape[1], T = k->shape[2], D = k->shape[3];
    if (KV == heads)
        return k;
    rc_tensor *e = rc_reshape(g, k, 5, (int64_t[]){B, KV, 1, T, D});
    e = rc_expand(g, e, 5, (int64_t[]){B, KV, heads / KV, T, D});
    return rc_reshape(g, e, 4, (int64_t[]){B, heads, T, D});
}

/* on: every backend runs the fused op; off records the products and softmax
 * (rc_set_fused_attention: `--attention unfused`, and benchmarks compare the two) */
static int fused_attention = 1;

void rc_set_fused_attention(int on)
{
    fused_attention = on != 0;
}

int rc_get_fused_attention(void)
{
    return fused_attention;
}

/* the fused op: key/value heads read in place, the bias in q's dtype as the op wants it */
static rc_tensor *attention_fused(rc_graph *g, rc_tensor *q, rc_tensor *k, rc_tensor *v, rc_tensor *bias,
                                  double scale, int causal, double drop, rc_rng key)
{
    int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], D = v->shape[3];
    if (bias && bias->dtype != q->dtype)
        bias = rc_cast(g, bias, q->dtype);
    rc_tensor *y = rc_attention(g, q, k, v, bias, scale, causal, drop, key); /* [B, H, Tq, D] */
    y = rc_permute(g, y, (int[]){0, 2, 1, 3});                        /* [B, Tq, H, D] */
    return rc_reshape(g, y, 3, (int64_t[]){B, Tq, H * D});
}

/* the key of the next dropout site of x's forward pass: fixed per site (the plan's run key,
 * which the trainer sets per step, micro-batch and replica, varies the masks) */
static rc_rng drop_key(rci_nn_ctx *x)
{
    return rc_rng_fold(rc_rng_new(0x64726F706F7574ull), (uint64_t)x->drop_sites++);
}

rc_tensor *rci_nn_dropout(rci_nn_ctx *x, rc_tensor *h, double p)
{
    if (!h || p <= 0 || !rc_graph_training(x->g))
        return h;
    return rc_dropout(x->g, h, p, drop_key(x));
}

rc_tensor *rci_nn_attention(rci_nn_ctx *x, rc_tensor *q, rc_tensor *k, rc_tensor *v, rc_tensor *bias,
                            double scale, int causal)
{
    rc_graph *g = x->g;
    double drop = rc_graph_training(g) ? x->c->attn_dropout : 0;
    rc_rng key = drop > 0 ? drop_key(x) : (rc_rng){0, 0};
    if (fused_attention)
        return attention_fused(g, q, k, v, bias, scale, causal, drop, key);
    rc_tensor *src[3] = {q, k, v};
    if (rci_inputs_bad(g, 3, src))
        return NULL;
    int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], D = q->shape[3];
    if (k->shape[1] == 0 || H % k->shape[1])
        return rci_fail(g, RC_ERR_SHAPE, "attention: %lld key/value heads do not divide %lld heads",
                       (long long)k->shape[1], (long long)H);
    k = repeat_kv(g, k, H);
    v = repeat_kv(g, v, H);
    rc_tensor *att = rc_softmax_ext(g, rc_matmul(g, q, k, 0, 1), bias, scale, causal);
    if (drop > 0) /* the fused op's mask: rc_dropout's with the same key */
        att = rc_dropout(g, att, drop, key);
    rc_tensor *y = rc_matmul(g, att, v, 0, 0);                        /* [B, H, Tq, D] */
    y = rc_permute(g, y, (int[]){0, 2, 1, 3});                        /* [B, Tq, H, D] */
    return rc_reshape(g, y, 3, (int64_t[]){B, Tq, H * D});
}

void rci_nn_cache(rci_nn_ctx *x, int layer, rc_tensor **k, rc_tensor **v)
{
    if (x->in->past_kv && x->in->past > 0) {
        *k = rc_concat(x->g, (rc_tensor *[]){x->in->past_kv[2 * layer], *k}, 2, 2);
        *v = rc_concat(x->g, (rc_tensor *[]){x->in->past_kv[2 * layer + 1], *v}, 2, 2);
    }
    if (x->in->new_kv) {
        x->in->new_kv[2 * layer] = *k;
        x->in->new_kv[2 * layer + 1] = *v;
    }
}

rc_tensor *rci_nn_mask_bias(rci_nn_ctx *x)
{
    rc_tensor *m = x->in->mask;
    if (!m)
        return NULL;
    if (m->ndim != 2 || !rc_dtype_is_float(m->dtype))
        return rci_fail(x->g, RC_ERR_SHAPE, "model: the attention mask must be a float [batch, keys] tensor");
    rc_dtype dt = x->w->dtype;
    if (m->dtype != RC_F32)
        m = rc_cast(x->g, m, RC_F32);
    /* 1 -> 0, 0 -> -big: -1e9, or -3e4 in f16 (whose largest value is 65504) */
    double big = dt == RC_F16 ? 3e4 : 1e9;
    rc_tensor *b = rc_affine(x->g, m, big, -big);
    if (dt != RC_F32)
        b = rc_cast(x->g, b, dt);                                   /* the activations' dtype */
    return rc_reshape(x->g, b, 4, (int64_t[]){m->shape[0], 1, 1, m->shape[1]});
}

void rci_nn_block_begin(rci_nn_ctx *x, int l)
{
    int every = rc_graph_remat(x->g);
    if (every && l % every == 0)
        rc_remat_begin(x->g);
}

void rci_nn_block_end(rci_nn_ctx *x, int l, int n)
{
    int every = rc_graph_remat(x->g);
    if (every && (l % every == every - 1 || l == n - 1))
        rc_remat_end(x->g);
}

rc_tensor *rci_nn_positions(rci_nn_ctx *x, int64_t T, int first)
{
    int32_t *d = malloc((size_t)(T ? T : 1) * sizeof *d);
    if (!d)
        return rci_fail(x->g, RC_ERR_MEMORY, "model: out of memory for %lld positions", (long long)T);
    for (int64_t t = 0; t < T; t++)
        d[t] = (int32_t)(first + x->in->past + t);
    rc_tensor *pos = rc_const(x->g, "positions", RC_I32, 1, &T, d);
    free(d);
    return pos;
}

rc_tensor *rci_nn_act(rci_nn_ctx *x, rc_tensor *h)
{
    int act = rc_config_activation(x->c->activation);
    if (act < 0)
        return rci_fail(x->g, RC_ERR_UNSUPPORTED, "model %s: activation '%s' is not supported",
                        x->c->model_type, x->c->activation);
    return rc_act(x->g, h, (rc_act_kind)act, 0);
}
