/* test_attention.c - the fused attention op (rc_attention) against today's unfused graph:
 * matmul(softmax_ext(matmul(q, repeat(k)^T), bias, scale, causal), repeat(v)) in f64, the
 * key/value heads repeated by expand. Forward and the gradients of sum(y * r) for q, k, v
 * and the bias, at odd sizes (no size a multiple of a tile), every mask kind (none, causal,
 * a padding bias, T5's [1, H, Tq, Tk] bias, causal with padding), grouped-query heads
 * (H = 6 over KV = 2 and KV = 1), decoding against a cache (Tq = 1 and 3, Tk = 40), causal
 * rows that see no key (Tq > Tk), attention dropout (p = 0.3: the fused op's mask is
 * rc_dropout's with the same key over the [B, H, Tq, Tk] probabilities of the unfused
 * graph, under a run key set on the plan), in f64, f32, bf16 and f16 (16-bit values against the f64
 * graph on the same rounded inputs, with the op table's 16-bit tolerances; the unfused graph
 * in the same dtype is printed beside it, as [unfused forward/gradients]). The gradients
 * are also checked by finite differences (tests/kit/gradcheck.h). Last, the activation
 * memory of a forward + backward graph at T = 512: the fused plan's arena against the
 * unfused one's (printed with the time of a run), and no node of the fused graph the size of
 * [B, H, T, T]. Besides: dropout 0 is no dropout whatever the key, a new run key draws a new
 * mask (the same key the same one), a probability outside [0, 1) is an error naming the op. */
#include "check.h"
#include "gradcheck.h"
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NONE = 0, PAD, T5 };

typedef struct {
    const char *name;
    int64_t B, H, KV, Tq, Tk, D, Dv;
    int bias;     /* NONE, PAD ([B, 1, 1, Tk]: 0 or a large negative), T5 ([1, H, Tq, Tk]) */
    int causal;
    double drop;  /* attention dropout (0: none) */
} att_cfg;

/* the dropout key of every graph here, and the run key of the plans */
static const rc_rng drop_key = {0x5eed, 3}, run_key = {77, 1};

static const att_cfg cfgs[] = {
    {"plain", 2, 6, 6, 37, 37, 24, 24, NONE, 0, 0},
    {"causal", 2, 6, 6, 37, 37, 24, 24, NONE, 1, 0},
    {"causal_129_gqa", 1, 6, 2, 129, 129, 24, 16, NONE, 1, 0},
    {"padding_gqa", 2, 6, 2, 37, 37, 24, 24, PAD, 0, 0},
    {"causal_padding_mqa", 2, 6, 1, 37, 37, 24, 24, PAD, 1, 0},
    {"t5_bias", 2, 6, 6, 37, 37, 24, 24, T5, 0, 0},
    {"t5_bias_causal_gqa", 2, 6, 2, 37, 37, 24, 24, T5, 1, 0},
    {"decode_1", 2, 6, 2, 1, 40, 24, 24, NONE, 1, 0},
    {"decode_3_padding", 2, 6, 2, 3, 40, 24, 24, PAD, 1, 0},
    {"rows_without_keys", 1, 2, 1, 5, 3, 4, 4, NONE, 1, 0},
    {"drop_plain", 2, 6, 6, 37, 37, 24, 24, NONE, 0, 0.3},
    {"drop_causal_129_gqa", 1, 6, 2, 129, 129, 24, 16, NONE, 1, 0.3},
    {"drop_padding_gqa", 2, 6, 2, 37, 37, 24, 24, PAD, 0, 0.3},
    {"drop_t5_bias_causal_gqa", 2, 6, 2, 37, 37, 24, 24, T5, 1, 0.3},
    {"drop_decode_3_padding", 2, 6, 2, 3, 40, 24, 24, PAD, 1, 0.3},
    {"drop_rows_without_keys", 1, 2, 1, 5, 3, 4, 4, NONE, 1, 0.5},
};

static uint64_t rng_state = 99;
static double uniform(double lo, double hi)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (double)(rng_state >> 11) * 0x1.0p-53;
}

static void bias_shape(const att_cfg *c, int64_t *s)
{
    int64_t pad[4] = {c->B, 1, 1, c->Tk}, t5[4] = {1, c->H, c->Tq, c->Tk};
    memcpy(s, c->bias == PAD ? pad : t5, sizeof pad);
}

static int64_t numel4(const int64_t *s)
{
    return s[0] * s[1] * s[2] * s[3];
}

/* The unfused graph of today's attention layer, the kv heads repeated by expand, dropout
 * (rc_dropout with drop_key) on the probabilities when drop > 0. */
static rc_tensor *unfused(rc_graph *g, rc_tensor *q, rc_tensor *k, rc_tensor *v, rc_tensor *bias,
                          double scale, int causal, double drop)
{
    int64_t B = q->shape[0], H = q->shape[1], KV = k->shape[1], Tk = k->shape[2];
    rc_tensor *kv[2] = {k, v};
    for (int i = 0; i < 2; i++) {
        int64_t d = kv[i]->shape[3];
        rc_tensor *x = rc_reshape(g, kv[i], 5, (int64_t[]){B, KV, 1, Tk, d});
        x = rc_expand(g, x, 5, (int64_t[]){B, KV, H / KV, Tk, d});
        kv[i] = rc_reshape(g, x, 4, (int64_t[]){B, H, Tk, d});
    }
    rc_tensor *p = rc_softmax_ext(g, rc_matmul(g, q, kv[0], 0, 1), bias, scale, causal);
    return rc_matmul(g, rc_dropout(g, p, drop, drop_key), kv[1], 0, 0);
}

typedef struct {
    int n;               /* outputs: y, dq, dk, dv, dbias */
    int64_t numel[5];
    double *val[5];
} outputs;

/* y and the gradients of sum(y * r) for config c in dtype t, fused or not, from the values
 * vals (q, k, v, bias, r); 0 or -1 with msg */
static int run(const att_cfg *c, int fused, rc_dtype t, double *const *vals, outputs *o, char *msg, size_t size)
{
    int64_t sq[4] = {c->B, c->H, c->Tq, c->D}, sk[4] = {c->B, c->KV, c->Tk, c->D};
    int64_t sv[4] = {c->B, c->KV, c->Tk, c->Dv}, sy[4] = {c->B, c->H, c->Tq, c->Dv}, sb[4];
    bias_shape(c, sb);
    const int64_t *shapes[5] = {sq, sk, sv, sb, sy};
    rc_graph *g = rc_graph_new();
    rc_tensor *leaf[4] = {rc_input(g, "q", t, 4, sq), rc_input(g, "k", t, 4, sk), rc_input(g, "v", t, 4, sv),
                          c->bias ? rc_input(g, "bias", t, 4, sb) : NULL};
    int nl = c->bias ? 4 : 3;
    void *host[5] = {0};
    for (int i = 0; i < 5; i++) {
        if (i == 3 && !c->bias)
            continue;
        host[i] = malloc((size_t)numel4(shapes[i]) * 8);
        rc_convert(host[i], t, vals[i], RC_F64, numel4(shapes[i]));
    }
    double scale = 1 / sqrt((double)c->D);
    rc_tensor *y = fused ? rc_attention(g, leaf[0], leaf[1], leaf[2], leaf[3], scale, c->causal, c->drop, drop_key)
                         : unfused(g, leaf[0], leaf[1], leaf[2], leaf[3], scale, c->causal, c->drop);
    rc_tensor *r = rc_const(g, "r", t, 4, sy, host[4]);
    rc_tensor *outs[5] = {y};
    rc_backward(g, rc_sum_all(g, rc_mul(g, y, r)), leaf, nl, outs + 1);
    rc_error err = {0};
    rc_plan *p = NULL;
    int rc = -1;
    if (rc_graph_error(g)) {
        snprintf(msg, size, "graph: %s", rc_graph_error(g));
        goto done;
    }
    if (!(p = rc_plan_new(g, outs, 1 + nl, &err))) {
        snprintf(msg, size, "plan: %s", err.msg);
        goto done;
    }
    rc_plan_set_rng(p, run_key);
    for (int i = 0; i < nl; i++)
        if (rc_plan_set_input(p, leaf[i], host[i], &err)) {
            snprintf(msg, size, "input %d: %s", i, err.msg);
            goto done;
        }
    if (rc_plan_run(p, &err)) {
        snprintf(msg, size, "run: %s", err.msg);
        goto done;
    }
    o->n = 1 + nl;
    for (int k = 0; k < o->n; k++) {
        int64_t n = rc_tensor_numel(outs[k]);
        void *raw = malloc(rc_tensor_nbytes(outs[k]));
        o->numel[k] = n;
        o->val[k] = malloc((size_t)n * 8);
        rc_plan_read(p, outs[k], raw, &err);
        rc_convert(o->val[k], RC_F64, raw, outs[k]->dtype, n);
        free(raw);
    }
    rc = 0;
done:
    for (int i = 0; i < 5; i++)
        free(host[i]);
    rc_plan_free(p);
    rc_graph_free(g);
    return rc;
}

static void outputs_free(outputs *o)
{
    for (int k = 0; k < o->n; k++)
        free(o->val[k]);
    o->n = 0;
}

/* Every config in every dtype against the unfused f64 graph on the same (rounded) values. */
static void test_against_unfused(void)
{
    static const rc_dtype dts[4] = {RC_F64, RC_F32, RC_BF16, RC_F16};
    /* the op table's tolerances (forward, gradients) and floors near zero, f32's times 30 as
     * the table's matrix products (sums of products in f32, as the unfused f32 graph's
     * errors); f64 tight */
    static const double tol_y[4] = {1e-12, 3e-4, 8e-3, 2e-3}, tol_g[4] = {1e-10, 3e-3, 3e-2, 1e-2};
    static const double floor[4] = {1e-3, 1e-3, 1e-2, 1e-2};
    static const char *what[5] = {"y", "dq", "dk", "dv", "dbias"};
    for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs; ci++) {
        const att_cfg *c = &cfgs[ci];
        int64_t sb[4];
        bias_shape(c, sb);
        int64_t n[5] = {c->B * c->H * c->Tq * c->D, c->B * c->KV * c->Tk * c->D, c->B * c->KV * c->Tk * c->Dv,
                        numel4(sb), c->B * c->H * c->Tq * c->Dv};
        printf("  %-24s", c->name);
        for (int d = 0; d < 4; d++) {
            rc_dtype t = dts[d];
            double *vals[5];
            for (int i = 0; i < 5; i++) {
                vals[i] = malloc((size_t)n[i] * 8);
                for (int64_t e = 0; e < n[i]; e++)
                    vals[i][e] = i == 3 && c->bias == PAD ? 0 : uniform(-2, 2);
                if (i == 3 && c->bias == PAD) /* batch 1's last 5 keys are padding */
                    for (int64_t e = c->Tk - 5; c->B > 1 && e < c->Tk; e++)
                        vals[i][c->Tk + e] = t == RC_F16 ? -3e4 : -1e9;
                void *held = malloc((size_t)n[i] * 8); /* the values the dtype holds */
                rc_convert(held, t, vals[i], RC_F64, n[i]);
                rc_convert(vals[i], RC_F64, held, t, n[i]);
                free(held);
            }
            outputs ref = {0}, got = {0};
            char msg[600] = "";
            int ok = run(c, 0, RC_F64, vals, &ref, msg, sizeof msg) == 0;
            CHECKF(ok, "%s: unfused f64: %s", c->name, msg);
            ok = ok && run(c, 1, t, vals, &got, msg, sizeof msg) == 0;
            CHECKF(ok || !ref.n, "%s: fused %s: %s", c->name, rc_dtype_name(t), msg);
            outputs un = {0};
            if (t != RC_F64 && run(c, 0, t, vals, &un, msg, sizeof msg) == 0) { /* for the figure */
                double a = 0, b = 0;
                for (int k = 0; k < un.n; k++) {
                    double e = check_rel_error(un.val[k], ref.val[k], un.numel[k], floor[d]);
                    if (k) b = e > b ? e : b; else a = e;
                }
                printf(" [unfused %.1e/%.1e]", a, b);
                outputs_free(&un);
            }
            double ey = 0, eg = 0;
            for (int k = 0; ok && k < got.n; k++) {
                double e = check_rel_error(got.val[k], ref.val[k], got.numel[k], floor[d]);
                double tol = k ? tol_g[d] : tol_y[d];
                CHECKF(e <= tol, "%s %s: %s off by %.3g (tolerance %.1g)", c->name, rc_dtype_name(t), what[k], e, tol);
                if (k)
                    eg = e > eg ? e : eg;
                else
                    ey = e;
            }
            printf(" %s %.1e/%.1e", rc_dtype_name(t), ey, eg);
            outputs_free(&ref);
            outputs_free(&got);
            for (int i = 0; i < 5; i++)
                free(vals[i]);
        }
        printf("\n");
    }
}

/* ---- finite differences ---------------------------------------------------------------- */

static rc_tensor *gc_t5_causal(rc_graph *g, rc_tensor **x)
{
    return rc_attention(g, x[0], x[1], x[2], x[3], 0.6, 1, 0, drop_key);
}

static rc_tensor *gc_plain(rc_graph *g, rc_tensor **x)
{
    return rc_attention(g, x[0], x[1], x[2], NULL, 0.45, 0, 0, drop_key);
}

/* the mask stays for every run of the plan (one run key) */
static rc_tensor *gc_t5_causal_dropout(rc_graph *g, rc_tensor **x)
{
    return rc_attention(g, x[0], x[1], x[2], x[3], 0.6, 1, 0.3, drop_key);
}

#define F64(...) {.dtype = RC_F64, .ndim = 4, .shape = {__VA_ARGS__}}

static void test_finite_differences(void)
{
    static const gc_case cases[] = {
        {"attention_t5_causal_gqa", 4, {F64(1, 4, 5, 3), F64(1, 2, 7, 3), F64(1, 2, 7, 2), F64(1, 4, 5, 7)},
         gc_t5_causal, 1, 0, 0},
        {"attention_padding_bias", 4, {F64(2, 2, 4, 3), F64(2, 1, 6, 3), F64(2, 1, 6, 3), F64(2, 1, 1, 6)},
         gc_t5_causal, 1, 0, 0},
        {"attention_plain_mqa", 3, {F64(2, 3, 4, 5), F64(2, 1, 3, 5), F64(2, 1, 3, 2)}, gc_plain, 1, 0, 0},
        {"attention_dropout_t5_gqa", 4, {F64(1, 4, 5, 3), F64(1, 2, 7, 3), F64(1, 2, 7, 2), F64(1, 4, 5, 7)},
         gc_t5_causal_dropout, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double e = gc_run(&cases[i], 0);
        CHECKF(e >= 0 && e <= 1e-6, "%s: finite differences off by %.3g", cases[i].name, e);
        printf("  %-24s finite differences %.1e\n", cases[i].name, e);
    }
}

/* ---- memory ------------------------------------------------------------------------------ */

/* The arena of a forward + backward plan at T = 512 (f32, causal): fused against unfused,
 * and the time of one run of each (a figure, not a check: GPT-2's head size, 12 heads). */
static void test_memory(void)
{
    enum { B = 1, H = 12, T = 512, D = 64 };
    size_t peak[2] = {0};
    double secs[2] = {0};
    int64_t big = 0; /* the largest node of the fused graph */
    float *vals = malloc((size_t)B * H * T * D * sizeof *vals);
    for (int64_t i = 0; i < (int64_t)B * H * T * D; i++)
        vals[i] = (float)uniform(-2, 2);
    for (int fused = 0; fused < 2; fused++) {
        rc_graph *g = rc_graph_new();
        int64_t s[4] = {B, H, T, D};
        rc_tensor *x[4] = {rc_input(g, "q", RC_F32, 4, s), rc_input(g, "k", RC_F32, 4, s), rc_input(g, "v", RC_F32, 4, s),
                           rc_input(g, "r", RC_F32, 4, s)};
        double scale = 1 / sqrt((double)D);
        rc_tensor *y = fused ? rc_attention(g, x[0], x[1], x[2], NULL, scale, 1, 0, drop_key)
                             : unfused(g, x[0], x[1], x[2], NULL, scale, 1, 0);
        rc_tensor *outs[4];
        rc_backward(g, rc_sum_all(g, rc_mul(g, y, x[3])), x, 3, outs + 1);
        outs[0] = y;
        rc_error err = {0};
        rc_plan *p = rc_graph_error(g) ? NULL : rc_plan_new(g, outs, 4, &err);
        CHECKF(p, "plan at T = %d: %s %s", T, rc_graph_error(g) ? rc_graph_error(g) : "", err.msg);
        for (int i = 0; p && i < 4; i++)
            CHECK(!rc_plan_set_input(p, x[i], vals, &err));
        for (int run = 0; p && run < 2; run++)
            CHECKF(!rc_plan_run(p, &err), "run: %s", err.msg);
        if (p) {
            rc_plan_stats st = rc_plan_get_stats(p);
            peak[fused] = st.peak_bytes;
            secs[fused] = st.last_run_s;
        }
        for (int i = 0; fused && i < rc_graph_size(g); i++) {
            int64_t n = rc_tensor_numel(rc_graph_node(g, i));
            big = n > big ? n : big;
        }
        rc_plan_free(p);
        rc_graph_free(g);
    }
    free(vals);
    printf("  forward + backward, B %d, H %d, T %d, D %d, causal, f32, %d threads: activation arena unfused %.1f MB, "
           "fused %.1f MB; one run unfused %.1f ms, fused %.1f ms\n", B, H, T, D, rc_get_threads(), peak[0] / 1e6,
           peak[1] / 1e6, secs[0] * 1e3, secs[1] * 1e3);
    /* the unfused plan holds several [B, H, T, T] scores and probabilities; the fused one's
     * whole arena is below one of them */
    CHECKF(peak[1] * 4 < peak[0] && peak[1] < (size_t)B * H * T * T * sizeof(float),
           "the fused arena %zu bytes is not far below the unfused %zu", peak[1], peak[0]);
    CHECKF(big < (int64_t)B * H * T * T, "the fused graph holds a node of %lld elements (a [B, H, T, T] has %lld)",
           (long long)big, (long long)B * H * T * T);
}

/* ---- one gradient per node -------------------------------------------------------------- */

/* The per-input ATTENTION_GRAD nodes (iparam[1] 0, 1, 2: what a backend may run one at a
 * time) against the packed one rc_backward builds (4), f64, causal GQA with Tq < Tk and
 * sizes not a multiple of a tile, without and with dropout (drop): the same sums in the same
 * order */
static void test_single_grads(double drop)
{
    enum { B = 2, H = 6, KV = 2, TQ = 70, TK = 75, D = 8 };
    rc_graph *g = rc_graph_new();
    int64_t sq[4] = {B, H, TQ, D}, sk[4] = {B, KV, TK, D};
    rc_tensor *x[4] = {rc_input(g, "q", RC_F64, 4, sq), rc_input(g, "k", RC_F64, 4, sk), rc_input(g, "v", RC_F64, 4, sk),
                       rc_input(g, "do", RC_F64, 4, sq)};
    rc_tensor *att = rc_attention(g, x[0], x[1], x[2], NULL, 0.3, 1, drop, drop_key);
    rc_tensor *st = att ? rci_attention_stats(g, att, x[3]) : NULL;
    rc_tensor *outs[4] = {st ? rci_attention_grad(g, att, x[3], st, 4) : NULL};
    for (int w = 0; w < 3 && st; w++)
        outs[1 + w] = rci_attention_grad(g, att, x[3], st, w);
    rc_error err = {0};
    rc_plan *p = rc_graph_error(g) ? NULL : rc_plan_new(g, outs, 4, &err);
    CHECKF(p, "single gradients: %s %s", rc_graph_error(g) ? rc_graph_error(g) : "", err.msg);
    int64_t n[3] = {B * H * TQ * D, B * KV * TK * D, B * KV * TK * D}, total = n[0] + n[1] + n[2];
    double *vals = malloc((size_t)total * sizeof *vals), *packed = malloc((size_t)total * sizeof *packed);
    for (int64_t i = 0; i < total; i++)
        vals[i] = uniform(-2, 2);
    double *in[4] = {vals, vals + n[0], vals + n[0] + n[1], vals + total - n[0]};
    for (int i = 0; p && i < 4; i++)
        CHECK(!rc_plan_set_input(p, x[i], in[i], &err));
    CHECKF(!p || (!rc_plan_run(p, &err) && !rc_plan_read(p, outs[0], packed, &err)), "run: %s", err.msg);
    for (int w = 0, off = 0; p && w < 3; off += (int)n[w], w++) {
        double *one = malloc((size_t)n[w] * sizeof *one), worst = 0;
        CHECK(!rc_plan_read(p, outs[1 + w], one, &err));
        for (int64_t i = 0; i < n[w]; i++)
            worst = fmax(worst, fabs(one[i] - packed[off + i]) / (1 + fabs(one[i])));
        CHECKF(worst < 1e-12, "gradient %d alone differs from the packed one by %.3g (dropout %g)", w, worst, drop);
        free(one);
    }
    free(vals), free(packed);
    rc_plan_free(p);
    rc_graph_free(g);
}

/* ---- dropout's keys ------------------------------------------------------------------------ */

/* y [1, 2, 9, 4] of causal attention with dropout p and key `key` under run key `run`
 * (into y); 0 or -1 */
static int dropout_run(double p, rc_rng key, rc_rng run, double *y)
{
    enum { T = 9, D = 4 };
    int64_t s[4] = {1, 2, T, D};
    double vals[2 * T * D];
    for (int i = 0; i < 2 * T * D; i++)
        vals[i] = sin(0.37 * i + 1);
    rc_graph *g = rc_graph_new();
    rc_tensor *x[3] = {rc_input(g, "q", RC_F64, 4, s), rc_input(g, "k", RC_F64, 4, s), rc_input(g, "v", RC_F64, 4, s)};
    rc_tensor *out = rc_attention(g, x[0], x[1], x[2], NULL, 0.5, 1, p, key);
    rc_error err = {0};
    rc_plan *pl = out ? rc_plan_new(g, &out, 1, &err) : NULL;
    int rc = pl ? 0 : -1;
    if (pl)
        rc_plan_set_rng(pl, run);
    for (int i = 0; pl && i < 3; i++)
        rc |= rc_plan_set_input(pl, x[i], vals, &err);
    rc = rc || !pl || rc_plan_run(pl, &err) || rc_plan_read(pl, out, y, &err) ? -1 : 0;
    rc_plan_free(pl);
    rc_graph_free(g);
    return rc;
}

/* dropout 0 is no dropout whatever the key; the run key and the node's key choose the mask */
static void test_dropout_keys(void)
{
    enum { N = 2 * 9 * 4 };
    double plain[N], zero[N], a[N], b[N], other_run[N], other_key[N];
    rc_rng k2 = {0x5eed, 4}, run2 = {78, 1};
    CHECK(!dropout_run(0, (rc_rng){0, 0}, run_key, plain));
    CHECK(!dropout_run(0, drop_key, run2, zero));
    CHECKF(!memcmp(plain, zero, sizeof plain), "dropout 0 with a key differs from no dropout");
    CHECK(!dropout_run(0.3, drop_key, run_key, a));
    CHECK(!dropout_run(0.3, drop_key, run_key, b));
    CHECK(!dropout_run(0.3, drop_key, run2, other_run));
    CHECK(!dropout_run(0.3, k2, run_key, other_key));
    CHECKF(!memcmp(a, b, sizeof a), "the same keys drew different masks");
    CHECKF(memcmp(a, other_run, sizeof a) && memcmp(a, other_key, sizeof a) && memcmp(a, plain, sizeof a),
           "another run key or node key drew the same mask");
}

/* ---- what the forward keeps ------------------------------------------------------------- */

/* An ATTENTION keeps its rows' log-sum-exps (and a 16-bit one its f32 output) in a block of
 * its own, which the plan places beside its values (a plan whose only node is the attention
 * holds both), and only the node itself, not a view of it, may feed its stats. What the
 * stats compute from the block is test_against_unfused's and test_single_grads'. */
static void test_kept(void)
{
    enum { B = 2, H = 3, T = 5, D = 4 };
    static const rc_dtype types[3] = {RC_F32, RC_F64, RC_BF16};
    for (int i = 0; i < 3; i++) {
        rc_graph *g = rc_graph_new();
        int64_t s[4] = {B, H, T, D};
        rc_tensor *q = rc_input(g, "q", types[i], 4, s);
        rc_tensor *att = rc_attention(g, q, q, q, NULL, 0.5, 1, 0, drop_key);
        size_t rows = B * H * T, cs = types[i] == RC_F64 ? 8 : 4, n = B * H * T * D;
        size_t want = types[i] == RC_BF16 ? (n * 4 + 63) / 64 * 64 + rows * 4 : rows * cs;
        CHECKF(att && rci_kept_bytes(att) == want, "%s: kept %zu bytes, expected %zu", rc_dtype_name(types[i]),
               att ? rci_kept_bytes(att) : 0, want);
        CHECK(rci_kept_bytes(q) == 0);
        rc_error err = {0};
        rc_plan *p = att ? rc_plan_new(g, &att, 1, &err) : NULL;
        CHECKF(p && rc_plan_get_stats(p).peak_bytes >= (n * rc_dtype_size(types[i]) + 63) / 64 * 64 + want,
               "%s: the plan of the attention alone has %zu bytes, less than its values and what it keeps",
               rc_dtype_name(types[i]), p ? rc_plan_get_stats(p).peak_bytes : 0);
        rc_plan_free(p);
        /* a view of the attention is not the node whose kept block the stats read */
        rc_tensor *view = att ? rc_reshape(g, rc_reshape(g, att, 2, (int64_t[]){-1, D}), 4, s) : NULL;
        CHECK(view && view != att && !rci_attention_stats(g, view, q));
        CHECKF(check_has(rc_graph_error(g), "attention_stats") && check_has(rc_graph_error(g), "ATTENTION node itself"),
               "%s", rc_graph_error(g) ? rc_graph_error(g) : "no error");
        rc_graph_free(g);
    }
}

/* ---- errors ------------------------------------------------------------------------------ */

static void test_errors(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *q = rc_input(g, "q", RC_F32, 4, (int64_t[]){2, 6, 5, 8});
    rc_tensor *k = rc_input(g, "k", RC_F32, 4, (int64_t[]){2, 4, 7, 8});
    rc_tensor *v = rc_input(g, "v", RC_F32, 4, (int64_t[]){2, 4, 7, 8});
    CHECK(!rc_attention(g, q, k, v, NULL, 1, 0, 0, drop_key));
    CHECKF(check_has(rc_graph_error(g), "KV dividing H") && check_has(rc_graph_error(g), "[2, 4, 7, 8]"), "%s",
           rc_graph_error(g));
    rc_graph_free(g);
    g = rc_graph_new();
    q = rc_input(g, "q", RC_F32, 4, (int64_t[]){2, 6, 5, 8});
    k = rc_input(g, "k", RC_F32, 4, (int64_t[]){2, 2, 7, 8});
    v = rc_input(g, "v", RC_F32, 4, (int64_t[]){2, 2, 7, 8});
    rc_tensor *bias = rc_input(g, "bias", RC_F32, 4, (int64_t[]){1, 6, 5, 6});
    CHECK(!rc_attention(g, q, k, v, bias, 1, 0, 0, drop_key));
    CHECKF(check_has(rc_graph_error(g), "bias [1, 6, 5, 6]") && check_has(rc_graph_error(g), "[2, 6, 5, 7]"), "%s",
           rc_graph_error(g));
    rc_graph_free(g);
    g = rc_graph_new();
    q = rc_input(g, "q", RC_F32, 3, (int64_t[]){6, 5, 8});
    k = rc_input(g, "k", RC_F32, 4, (int64_t[]){2, 2, 7, 8});
    v = rc_input(g, "v", RC_F32, 4, (int64_t[]){2, 2, 7, 8});
    CHECK(!rc_attention(g, q, k, v, NULL, 1, 0, 0, drop_key));
    CHECKF(check_has(rc_graph_error(g), "attention: q [6, 5, 8]"), "%s", rc_graph_error(g));
    rc_graph_free(g);
    static const double bad_p[3] = {1, -0.1, NAN};
    for (int i = 0; i < 3; i++) {
        g = rc_graph_new();
        q = rc_input(g, "q", RC_F32, 4, (int64_t[]){2, 6, 5, 8});
        k = rc_input(g, "k", RC_F32, 4, (int64_t[]){2, 2, 7, 8});
        v = rc_input(g, "v", RC_F32, 4, (int64_t[]){2, 2, 7, 8});
        CHECK(!rc_attention(g, q, k, v, NULL, 1, 0, bad_p[i], drop_key));
        CHECKF(check_has(rc_graph_error(g), "attention: dropout probability") &&
               check_has(rc_graph_error(g), "outside [0, 1)"), "%s", rc_graph_error(g));
        rc_graph_free(g);
    }
}

int main(void)
{
    test_errors();
    test_kept();
    test_against_unfused();
    test_finite_differences();
    test_single_grads(0);
    test_single_grads(0.3);
    test_dropout_keys();
    test_memory();
    return check_summary("test_attention");
}
