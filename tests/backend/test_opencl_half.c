/* test_opencl_half.c - the OpenCL backend in bf16 and f16 against the CPU backend in the
 * same dtype: every op's forward and gradient on the same 16-bit inputs (bitwise where
 * both compute the same f32 expression and round once; within an ulp of 16 bits where
 * sums run in another order or a math library function differs), casts between f32, i32,
 * bf16 and f16 on every 16-bit pattern and on f32 patterns that test the rounding (ties,
 * f16 subnormals, overflow, NaN), the gradients of a small MLP with a cross-entropy in
 * bf16, the 16-bit support of every op, and a printed figure for a one-row product over
 * 16-bit weights (a decoding step) against f32.
 *
 * Without an OpenCL device the test prints why and passes, unless REDCO_REQUIRE_OPENCL=1
 * (CI sets it): then it fails. */
#include "check.h"
#include "redco.h"
#include "redco/device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static rc_backend *gpu;

static float widen(rc_dtype t, uint16_t h)
{
    return t == RC_BF16 ? rc_bf16_to_f32(h) : rc_f16_to_f32(h);
}

static uint16_t narrow(rc_dtype t, float f)
{
    return t == RC_BF16 ? rc_f32_to_bf16(f) : rc_f32_to_f16(f);
}

/* 16-bit ulps between two patterns (ordered), 0 for two NaNs, 1 << 16 for NaN and a number */
static int ulp_diff(rc_dtype t, uint16_t a, uint16_t b)
{
    int na = isnan(widen(t, a)), nb = isnan(widen(t, b));
    if (na || nb)
        return na && nb ? 0 : 1 << 16;
    int ia = a & 0x8000 ? -(a & 0x7fff) : a, ib = b & 0x8000 ? -(b & 0x7fff) : b;
    return abs(ia - ib);
}

/* ---- one graph on both backends -------------------------------------------------------- */

enum { FLOAT, IDS, LOSS };   /* a leaf of the tested dtype, i32 ids, the loss's dtype (f32) */

typedef struct {
    int kind;
    int ndim;
    int64_t shape[4];
    double lo, hi;               /* values uniform in [lo, hi) (ids: integers in [lo, hi)) */
} leaf_spec;

typedef rc_tensor *(*build_fn)(rc_graph *g, rc_tensor **x, rc_dtype t);

typedef struct {
    const char *name;
    int n;
    leaf_spec in[4];
    build_fn build;
    int ulps;                    /* forward: 16-bit ulps allowed between the backends */
    int gulps;                   /* gradients (-1: none taken) */
} op_case;

static int64_t spec_numel(const leaf_spec *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= s->shape[i];
    return n;
}

/* The largest difference between the backends' values of t: 16-bit ulps, f32 relative
 * error scaled by 1e7 (so that 1 is about an f32 ulp), or i32 inequality (1 << 16); -1
 * when a read fails. With reordered (sums in another order), 16-bit values closer than
 * 2^-20 of the largest magnitude count as equal: f32 sums of terms that cancel differ by
 * that much, which near zero is many ulps of f16's subnormals. */
static long out_diff(rc_plan *pc, rc_plan *pg, const rc_tensor *t, const char *name, int reordered)
{
    int64_t n = rc_tensor_numel(t);
    size_t bytes = rc_tensor_nbytes(t);
    void *a = malloc(bytes + 8), *b = malloc(bytes + 8);
    rc_error err = {0};
    long worst = 0;
    if (rc_plan_read(pg, t, a, &err) || rc_plan_read(pc, t, b, &err)) {
        CHECKF(0, "%s: read: %s", name, err.msg);
        worst = -1;
    } else if (t->dtype == RC_BF16 || t->dtype == RC_F16) {
        double big = 0;
        for (int64_t i = 0; i < n; i++)
            big = fmax(big, fabs(widen(t->dtype, ((uint16_t *)b)[i])));
        for (int64_t i = 0; i < n; i++) {
            uint16_t x = ((uint16_t *)a)[i], y = ((uint16_t *)b)[i];
            long d = ulp_diff(t->dtype, x, y);
            if (reordered && fabs((double)widen(t->dtype, x) - widen(t->dtype, y)) <= 0x1p-20 * big)
                d = 0;
            worst = d > worst ? d : worst;
        }
    } else if (t->dtype == RC_F32) {
        for (int64_t i = 0; i < n; i++) {
            float x = ((float *)a)[i], y = ((float *)b)[i];
            double d = isnan(x) && isnan(y) ? 0 : fabs((double)x - y) / fmax(fabs(y), 1e-30) * 1e7;
            long l = d < 1e9 ? (long)ceil(d) : 1 << 16;
            worst = l > worst ? l : worst;
        }
    } else {
        worst = memcmp(a, b, bytes) ? 1 << 16 : 0;
    }
    free(a);
    free(b);
    return worst;
}

/* Binds the same values to leaf on both plans: 16-bit leaves get the words of vals
 * rounded, f32 leaves vals, ids the ints. */
static int bind_both(rc_plan *pc, rc_plan *pg, rc_tensor *leaf, const float *vals, const int32_t *ids)
{
    int64_t n = rc_tensor_numel(leaf);
    const void *host = ids ? (const void *)ids : (const void *)vals;
    uint16_t *h = NULL;
    rc_error err = {0};
    if (!ids && leaf->dtype != RC_F32) {
        h = malloc((size_t)n * 2 + 2);
        rc_convert(h, leaf->dtype, vals, RC_F32, n);
        host = h;
    }
    int rc = rc_plan_set_input(pc, leaf, host, &err) || rc_plan_set_input(pg, leaf, host, &err);
    CHECKF(!rc, "set %s: %s", leaf->name, err.msg);
    free(h);
    return rc ? -1 : 0;
}

static void run_case(const op_case *c, rc_dtype h, rc_rng *rng)
{
    float *vals[4] = {0};
    int32_t *ids[4] = {0};
    rc_graph *g = rc_graph_new();
    rc_tensor *leaves[4], *wrt[4], *outs[5];
    int nwrt = 0, nout = 1;
    for (int i = 0; i < c->n; i++) {
        const leaf_spec *s = &c->in[i];
        int64_t n = spec_numel(s);
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        leaves[i] = rc_input(g, name, s->kind == IDS ? RC_I32 : s->kind == LOSS ? RC_F32 : h, s->ndim, s->shape);
        if (s->kind == IDS) {
            ids[i] = malloc((size_t)n * 4 + 4);
            for (int64_t k = 0; k < n; k++)
                ids[i][k] = (int32_t)(s->lo + floor(rc_rng_uniform(rng) * (s->hi - s->lo)));
            continue;
        }
        vals[i] = malloc((size_t)n * 4 + 4);
        for (int64_t k = 0; k < n; k++) {
            float v = (float)(s->lo + rc_rng_uniform(rng) * (s->hi - s->lo));
            vals[i][k] = s->kind == LOSS ? v : widen(h, narrow(h, v));
        }
        if (c->gulps >= 0)
            wrt[nwrt++] = leaves[i];
    }
    rc_tensor *y = outs[0] = c->build(g, leaves, h);
    if (y && c->gulps >= 0) {
        /* the gradient of sum(y * r), r a constant in y's dtype */
        int64_t n = rc_tensor_numel(y);
        float *r = malloc((size_t)n * 4 + 4);
        for (int64_t k = 0; k < n; k++)
            r[k] = widen(RC_BF16, narrow(RC_BF16, (float)(rc_rng_uniform(rng) - 0.5)));
        rc_tensor *rt = rc_cast(g, rc_const(g, "r", RC_F32, y->ndim, y->shape, r), y->dtype);
        free(r);
        rc_tensor *loss = rc_sum_all(g, rc_mul(g, y, rt));
        rc_backward(g, loss, wrt, nwrt, outs + 1);
        nout += nwrt;
    }
    rc_error err = {0};
    rc_plan *pc = NULL, *pg = NULL;
    CHECKF(!rc_graph_error(g), "%s %s: graph: %s", c->name, rc_dtype_name(h), rc_graph_error(g));
    if (!rc_graph_error(g)) {
        pc = rc_plan_new(g, outs, nout, &err);
        CHECKF(pc, "%s %s: cpu plan: %s", c->name, rc_dtype_name(h), err.msg);
        pg = pc ? rc_plan_new_on(gpu, g, outs, nout, &err) : NULL;
        CHECKF(!pc || pg, "%s %s: opencl plan: %s", c->name, rc_dtype_name(h), err.msg);
    }
    int ok = pc && pg;
    for (int i = 0; ok && i < c->n; i++)
        ok = !bind_both(pc, pg, leaves[i], vals[i], ids[i]);
    if (ok) {
        rc_rng key = rc_rng_new(77);
        rc_plan_set_rng(pc, key);
        rc_plan_set_rng(pg, key);
        ok = !rc_plan_run(pc, &err);
        CHECKF(ok, "%s %s: cpu run: %s", c->name, rc_dtype_name(h), err.msg);
        ok = ok && !rc_plan_run(pg, &err);
        CHECKF(ok, "%s %s: opencl run: %s", c->name, rc_dtype_name(h), err.msg);
    }
    if (ok) {
        long f = out_diff(pc, pg, y, c->name, c->ulps > 0), gw = 0;
        CHECKF(f >= 0 && f <= c->ulps, "%s %s: forward differs by %ld (allowed %d)", c->name,
               rc_dtype_name(h), f, c->ulps);
        for (int k = 1; k < nout; k++) {
            long d = out_diff(pc, pg, outs[k], c->name, c->gulps > 0);
            CHECKF(outs[k]->dtype == wrt[k - 1]->dtype, "%s %s: gradient %d is %s", c->name,
                   rc_dtype_name(h), k - 1, rc_dtype_name(outs[k]->dtype));
            CHECKF(d >= 0 && d <= c->gulps, "%s %s: gradient %d differs by %ld (allowed %d)", c->name,
                   rc_dtype_name(h), k - 1, d, c->gulps);
            gw = d > gw ? d : gw;
        }
        printf("  %-20s %-4s forward %ld%s", c->name, rc_dtype_name(h), f,
               y->dtype == RC_F32 ? " (f32 1e-7)" : y->dtype == RC_I32 ? "" : " ulp");
        if (nout > 1)
            printf(", gradients %ld ulp", gw);
        printf("\n");
    }
    rc_plan_free(pc);
    rc_plan_free(pg);
    rc_graph_free(g);
    for (int i = 0; i < c->n; i++) {
        free(vals[i]);
        free(ids[i]);
    }
}

/* ---- the cases ---------------------------------------------------------------------------- */

static rc_tensor *b_full(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    return rc_add(g, x[0], rc_full(g, t, 2, (int64_t[]){3, 5}, 0.375));
}
static rc_tensor *b_add(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_add(g, x[0], x[1]); }
static rc_tensor *b_sub(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_sub(g, x[0], x[1]); }
static rc_tensor *b_mul(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_mul(g, x[0], x[1]); }
static rc_tensor *b_div(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_div(g, x[0], x[1]); }
static rc_tensor *b_affine(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_affine(g, x[0], 1.7, -0.25); }
static rc_tensor *b_exp(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_exp(g, x[0]); }
static rc_tensor *b_log(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_log(g, x[0]); }
static rc_tensor *b_sqrt(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_sqrt(g, x[0]); }
static rc_tensor *b_rsqrt(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_rsqrt(g, x[0]); }
static rc_tensor *b_tanh(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_tanh(g, x[0]); }
/* every activation and its first two derivatives, side by side */
static rc_tensor *b_act(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    rc_tensor *acts[RC_ACT_COUNT];
    for (int a = 0; a < RC_ACT_COUNT; a++) {
        rc_tensor *orders[3];
        for (int o = 0; o < 3; o++)
            orders[o] = rc_act(g, x[0], (rc_act_kind)a, o);
        acts[a] = rc_concat(g, orders, 3, 0);
    }
    return rc_concat(g, acts, RC_ACT_COUNT, 0);
}
static rc_tensor *b_mm(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_matmul(g, x[0], x[1], 0, 0); }
static rc_tensor *b_mm_tb(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_matmul(g, x[0], x[1], 0, 1); }
static rc_tensor *b_mm_ta(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_matmul(g, x[0], x[1], 1, 0); }
static rc_tensor *b_mm_tt(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_matmul(g, x[0], x[1], 1, 1); }
static rc_tensor *b_softmax(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_softmax(g, x[0]); }
static rc_tensor *b_softmax_ext(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    return rc_softmax_ext(g, x[0], x[1], 0.125, 1);
}
static rc_tensor *b_layer_norm(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    return rc_layer_norm(g, x[0], x[1], x[2], 1e-5);
}
static rc_tensor *b_rms_norm(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    return rc_rms_norm(g, x[0], x[1], 1e-6, 1.0);
}
static rc_tensor *b_embedding(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_embedding(g, x[0], x[1]); }
static rc_tensor *b_embedding_pad(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    return rc_embedding_pad(g, x[0], x[1], 2);
}
static rc_tensor *b_embedding_shard(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    return rc_embedding_shard(g, x[0], x[1], 4, 12);
}
static rc_tensor *b_embedding_grad(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    return rc_embedding_grad(g, x[0], x[1], 8, 3);
}
static rc_tensor *b_rope(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    return rc_rope(g, x[0], x[1], 6, RC_ROPE_HALF, 10000.0);
}
static rc_tensor *b_rope_il(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    return rc_rope_inverse(g, x[0], x[1], 8, RC_ROPE_INTERLEAVED, 500.0);
}
static rc_tensor *b_moves(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    rc_tensor *p = rc_permute(g, x[0], (int[]){2, 0, 1});                  /* [5, 3, 4] */
    rc_tensor *s = rc_slice(g, p, 1, 1, 3);                                /* [5, 2, 4] */
    rc_tensor *d = rc_pad(g, s, 2, 1, 7);                                  /* [5, 2, 7] */
    rc_tensor *e = rc_expand(g, rc_slice(g, x[0], 0, 0, 1), 3, (int64_t[]){2, 4, 5}); /* [2, 4, 5] */
    rc_tensor *r = rc_reshape(g, e, 3, (int64_t[]){5, 2, 4});
    rc_tensor *parts[3] = {rc_slice(g, d, 2, 0, 4), r, s};
    return rc_concat(g, parts, 3, 1);                                      /* [5, 6, 4] */
}
/* odd element offsets: a slice of a 16-bit tensor starting at element 1 */
static rc_tensor *b_odd_slice(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    return rc_exp(g, rc_slice(g, x[0], 0, 1, 6));
}
static rc_tensor *b_sum(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_sum(g, x[0], 1, 0); }
static rc_tensor *b_mean(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_mean(g, x[0], -1, 1); }
static rc_tensor *b_sum0(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_sum(g, x[0], 0, 0); }
static rc_tensor *b_max(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_max(g, x[0], 0, 1); }
static rc_tensor *b_sum_to(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    return rc_sum_to(g, x[0], 2, (int64_t[]){1, 5});
}
static rc_tensor *b_ce(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    return rc_cross_entropy(g, x[0], x[1], 1);
}
static rc_tensor *b_ce_grad(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    return rc_cross_entropy_grad(g, x[0], x[1], x[2], 1);
}
static rc_tensor *b_one_hot(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    return rc_add(g, x[1], rc_one_hot(g, x[0], 6, 2, t));
}
static rc_tensor *b_dropout(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    return rc_dropout(g, x[0], 0.3, rc_rng_new(5));
}
/* x times normal draws of the tested dtype (the f32 draws rounded; the gradient: the draws) */
static rc_tensor *b_normal(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    return rc_mul(g, x[0], rc_normal(g, t, x[0]->ndim, x[0]->shape, rc_rng_new(5), RC_RNG_STEP));
}
static rc_tensor *b_where(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    rc_tensor *cond = rc_equal(g, rc_max(g, x[0], -1, 1), x[0]);          /* the dtype's own 0/1 */
    rc_tensor *ci = rc_cast(g, rc_affine(g, x[1], 1.0, 0.0), RC_I32);     /* i32 condition */
    return rc_add(g, rc_where(g, cond, x[0], x[1]), rc_where(g, ci, x[1], x[0]));
}
static rc_tensor *b_cast_f32(rc_graph *g, rc_tensor **x, rc_dtype t) { return rc_cast(g, rc_exp(g, rc_cast(g, x[0], RC_F32)), t); }
static rc_tensor *b_cast_i32(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_cast(g, x[0], RC_I32); }
static rc_tensor *b_cast_from_i32(rc_graph *g, rc_tensor **x, rc_dtype t) { return rc_cast(g, x[0], t); }
static rc_tensor *b_collectives(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    rc_tensor *a = rc_mp_enter(g, x[0]);
    return rc_add(g, rc_mp_reduce(g, rc_stop_gradient(g, a)), rc_mp_reduce(g, rc_mul(g, a, rc_mp_max(g, a))));
}

/* forward ulps 0: the same f32 expression rounded once on both backends (the decoding
 * product, a few rows times shared 16-bit weights, sums in the CPU's order too). 1: sums
 * in another order (CLBlast's GEMM against OpenBLAS) or a math library function (log,
 * tanh, erf) that may be an f32 ulp off the CPU's; on PoCL these measure 0 as well.
 * Gradients add the roundings of the graph's 16-bit intermediate nodes. */
static const op_case cases[] = {
    {"full", 1, {{FLOAT, 2, {3, 5}, -1, 1}}, b_full, 0, 0},
    {"add", 2, {{FLOAT, 3, {2, 3, 5}, -2, 2}, {FLOAT, 1, {5}, -2, 2}}, b_add, 0, 0},
    {"sub", 2, {{FLOAT, 2, {3, 1}, -2, 2}, {FLOAT, 2, {1, 5}, -2, 2}}, b_sub, 0, 0},
    {"mul", 2, {{FLOAT, 2, {300, 257}, -2, 2}, {FLOAT, 2, {300, 257}, -2, 2}}, b_mul, 0, 0},
    {"div", 2, {{FLOAT, 2, {4, 6}, -2, 2}, {FLOAT, 0, {0}, 0.5, 2}}, b_div, 0, 0},
    {"affine", 1, {{FLOAT, 1, {50000}, -3, 3}}, b_affine, 0, 0},
    {"exp", 1, {{FLOAT, 2, {70, 90}, -4, 4}}, b_exp, 0, 0},
    {"log", 1, {{FLOAT, 2, {70, 90}, 0.1, 4}}, b_log, 1, 1},
    {"sqrt", 1, {{FLOAT, 2, {70, 90}, 0.1, 4}}, b_sqrt, 0, 0},
    {"rsqrt", 1, {{FLOAT, 2, {70, 90}, 0.1, 4}}, b_rsqrt, 0, 0},
    {"tanh", 1, {{FLOAT, 2, {70, 90}, -3, 3}}, b_tanh, 1, 1},
    {"act", 1, {{FLOAT, 2, {40, 33}, -4, 4}}, b_act, 1, -1},
    /* a few rows by a shared 16-bit matrix: the decoding kernel (the CPU splits the
     * columns over threads and fuses the widening: sums may round 1 ulp apart) */
    {"matmul_row", 2, {{FLOAT, 2, {1, 300}, -1, 1}, {FLOAT, 2, {300, 700}, -1, 1}}, b_mm, 1, 1},
    {"matmul_row_tb", 2, {{FLOAT, 3, {1, 3, 301}, -1, 1}, {FLOAT, 2, {517, 301}, -1, 1}}, b_mm_tb, 1, 1},
    {"matmul_row_ta", 2, {{FLOAT, 2, {37, 2}, -1, 1}, {FLOAT, 2, {37, 19}, -1, 1}}, b_mm_ta, 1, 1},
    {"matmul_row_tt", 2, {{FLOAT, 2, {37, 4}, -1, 1}, {FLOAT, 2, {300, 37}, -1, 1}}, b_mm_tt, 1, 1},
    /* the general products: SGEMM on widened operands */
    {"matmul", 2, {{FLOAT, 3, {2, 9, 33}, -1, 1}, {FLOAT, 2, {33, 17}, -1, 1}}, b_mm, 1, 1},
    {"matmul_batched", 2, {{FLOAT, 3, {3, 9, 12}, -1, 1}, {FLOAT, 3, {3, 7, 12}, -1, 1}}, b_mm_tb, 1, 1},
    {"matmul_ta", 2, {{FLOAT, 3, {2, 40, 9}, -1, 1}, {FLOAT, 3, {2, 40, 11}, -1, 1}}, b_mm_ta, 1, 1},
    /* results larger than a chunk of the f32 scratch: rows, columns of a (ta), batches */
    {"matmul_chunks", 2, {{FLOAT, 2, {300, 8}, -1, 1}, {FLOAT, 2, {8, 30000}, -1, 1}}, b_mm, 1, -1},
    {"matmul_chunks_ta", 2, {{FLOAT, 2, {8, 300}, -1, 1}, {FLOAT, 2, {8, 30000}, -1, 1}}, b_mm_ta, 1, -1},
    {"matmul_chunks_batch", 2, {{FLOAT, 3, {3, 1700, 4}, -1, 1}, {FLOAT, 3, {3, 4, 1700}, -1, 1}}, b_mm, 1, -1},
    {"softmax", 1, {{FLOAT, 2, {5, 40}, -6, 6}}, b_softmax, 0, 0},
    {"softmax_ext", 2, {{FLOAT, 4, {2, 3, 4, 6}, -6, 6}, {FLOAT, 2, {4, 6}, -1, 0}}, b_softmax_ext, 0, 0},
    {"layer_norm", 3, {{FLOAT, 3, {2, 3, 48}, -3, 5}, {FLOAT, 1, {48}, 0.5, 1.5}, {FLOAT, 1, {48}, -1, 1}},
     b_layer_norm, 0, 0},
    {"rms_norm", 2, {{FLOAT, 2, {6, 48}, -3, 3}, {FLOAT, 1, {48}, -0.5, 0.5}}, b_rms_norm, 0, 0},
    {"embedding", 2, {{FLOAT, 2, {8, 6}, -1, 1}, {IDS, 2, {3, 4}, 0, 8}}, b_embedding, 0, 0},
    {"embedding_pad", 2, {{FLOAT, 2, {8, 6}, -1, 1}, {IDS, 1, {9}, 0, 4}}, b_embedding_pad, 0, 0},
    {"embedding_shard", 2, {{FLOAT, 2, {4, 6}, -1, 1}, {IDS, 1, {9}, 0, 12}}, b_embedding_shard, 0, 0},
    {"embedding_grad", 2, {{IDS, 2, {3, 4}, 0, 8}, {FLOAT, 3, {3, 4, 5}, -1, 1}}, b_embedding_grad, 0, 0},
    {"rope", 2, {{FLOAT, 4, {2, 5, 3, 8}, -1, 1}, {IDS, 1, {5}, 0, 50}}, b_rope, 0, 0},
    {"rope_interleaved", 2, {{FLOAT, 3, {5, 2, 8}, -1, 1}, {IDS, 1, {5}, 0, 50}}, b_rope_il, 0, 0},
    {"moves", 1, {{FLOAT, 3, {3, 4, 5}, -1, 1}}, b_moves, 0, 0},
    {"odd_slice", 1, {{FLOAT, 2, {7, 3}, -1, 1}}, b_odd_slice, 0, 0},
    {"sum", 1, {{FLOAT, 3, {4, 300, 5}, -1, 1}}, b_sum, 0, 0},
    {"mean", 1, {{FLOAT, 2, {3, 70000}, -1, 1}}, b_mean, 0, 0},
    {"sum_two_pass", 1, {{FLOAT, 2, {5000, 3}, -1, 1}}, b_sum0, 0, 0},
    {"max", 1, {{FLOAT, 2, {30, 7}, -1, 1}}, b_max, 0, 0},
    {"sum_to", 1, {{FLOAT, 3, {4, 3, 5}, -1, 1}}, b_sum_to, 0, 0},
    {"cross_entropy", 2, {{FLOAT, 3, {2, 3, 50}, -5, 5}, {IDS, 2, {2, 3}, 0, 50}}, b_ce, 1, 1},
    {"cross_entropy_wide", 2, {{FLOAT, 2, {7, 1100}, -5, 5}, {IDS, 1, {7}, 0, 1100}}, b_ce, 1, 1},
    {"cross_entropy_grad", 3, {{FLOAT, 2, {6, 20}, -5, 5}, {IDS, 1, {6}, 0, 20}, {LOSS, 0, {0}, 0.5, 2}},
     b_ce_grad, 0, 1},
    {"one_hot", 2, {{IDS, 2, {2, 5}, 0, 6}, {FLOAT, 1, {6}, -1, 1}}, b_one_hot, 0, 0},
    {"dropout", 1, {{FLOAT, 2, {300, 200}, -1, 1}}, b_dropout, 0, 0},
    {"normal", 1, {{FLOAT, 2, {300, 200}, -1, 1}}, b_normal, 1, 1},
    {"where_equal", 2, {{FLOAT, 2, {4, 9}, -1, 1}, {FLOAT, 2, {4, 9}, -1, 1}}, b_where, 0, 0},
    {"cast_f32", 1, {{FLOAT, 2, {40, 9}, -10, 10}}, b_cast_f32, 0, 0},
    {"cast_i32", 1, {{FLOAT, 1, {99}, -300, 300}}, b_cast_i32, 0, -1},
    {"cast_from_i32", 1, {{IDS, 1, {99}, -3000, 3000}}, b_cast_from_i32, 0, -1},
    {"collectives", 1, {{FLOAT, 2, {3, 4}, -1, 1}}, b_collectives, 0, 0},
};

static void test_ops(rc_dtype h)
{
    rc_rng rng = rc_rng_new(h == RC_BF16 ? 21 : 22);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i], h, &rng);
}

/* ---- casts on every pattern ------------------------------------------------------------------ */

/* x (n elements of dtype from, given as host words) cast to `to` on both backends: the
 * elements whose bits differ */
static int64_t cast_both(rc_dtype from, rc_dtype to, const void *x, int64_t n)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *in = rc_input(g, "x", from, 1, (int64_t[]){n});
    rc_tensor *y = rc_cast(g, in, to);
    rc_error err = {0};
    rc_plan *pc = rc_plan_new(g, &y, 1, &err), *pg = pc ? rc_plan_new_on(gpu, g, &y, 1, &err) : NULL;
    size_t bytes = rc_tensor_nbytes(y);
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    int64_t bad = -1;
    if (pg && !rc_plan_set_input(pc, in, x, &err) && !rc_plan_set_input(pg, in, x, &err) &&
        !rc_plan_run(pc, &err) && !rc_plan_run(pg, &err) && !rc_plan_read(pc, y, a, &err) &&
        !rc_plan_read(pg, y, b, &err)) {
        size_t es = rc_dtype_size(to);
        bad = 0;
        for (int64_t i = 0; i < n; i++)
            if (memcmp(a + i * es, b + i * es, es) && bad++ < 3)
                fprintf(stderr, "cast %s -> %s [%lld] differs\n", rc_dtype_name(from), rc_dtype_name(to),
                        (long long)i);
    }
    CHECKF(bad == 0, "cast %s -> %s: %lld elements differ (%s)", rc_dtype_name(from), rc_dtype_name(to),
           (long long)bad, err.msg);
    free(a);
    free(b);
    rc_plan_free(pc);
    rc_plan_free(pg);
    rc_graph_free(g);
    return bad;
}

static void test_casts(void)
{
    enum { NF = 300000 };
    static uint16_t every[65536];
    static uint32_t f32s[NF];
    static int32_t ints[NF];
    for (int i = 0; i < 65536; i++)
        every[i] = (uint16_t)i;
    rc_rng r = rc_rng_new(9);
    for (int i = 0; i < NF; i++) {
        uint32_t u = (uint32_t)rc_rng_next_u64(&r);
        switch (i % 5) {
        case 1: u = (u & 0xffff0000u) | 0x8000u; break;                  /* bf16 ties */
        case 2: u = (u & 0xffffe000u) | 0x1000u; break;                  /* f16 ties */
        case 3: u = (u & 0x80000000u) | (0x33000000u + (u & 0x7fffffffu) % (0x47800000u - 0x33000000u)); break;
        default: break;                                                  /* any pattern: NaN, inf too */
        }
        f32s[i] = u;
        ints[i] = (int32_t)(rc_rng_next_u64(&r) >> (32 + i % 31));
    }
    f32s[0] = 0x7f800001u; /* a signalling NaN */
    f32s[5] = 0x477ff000u; /* f16's overflow edge */
    f32s[10] = 0x7f7fffffu;
    rc_dtype halfs[2] = {RC_BF16, RC_F16};
    int64_t bad = 0;
    for (int k = 0; k < 2; k++) {
        rc_dtype h = halfs[k], other = halfs[1 - k];
        bad += cast_both(h, RC_F32, every, 65536) != 0;
        bad += cast_both(h, other, every, 65536) != 0;
        bad += cast_both(h, RC_I32, every, 65536) != 0;
        bad += cast_both(RC_F32, h, f32s, NF) != 0;
        bad += cast_both(RC_I32, h, ints, NF) != 0;
    }
    printf("  casts f32, i32, bf16, f16 (every 16-bit pattern, %d f32 and i32 patterns): %s\n", NF,
           bad ? "differ" : "bitwise the CPU's");
}

/* ---- a small MLP with a softmax cross-entropy in bf16 ---------------------------------------- */

static void test_mlp(void)
{
    enum { B = 16, D = 32, H = 64, V = 24 };
    const rc_dtype t = RC_BF16;
    rc_rng rng = rc_rng_new(3);
    static float x[B * D], w1[D * H], b1[H], w2[H * V];
    static int32_t tg[B];
    float *vals[4] = {x, w1, b1, w2};
    int64_t sizes[4] = {B * D, D * H, H, H * V};
    double scale[4] = {2, 0.4, 0.2, 0.3};
    for (int k = 0; k < 4; k++)
        for (int64_t i = 0; i < sizes[k]; i++)
            vals[k][i] = widen(t, narrow(t, (float)((rc_rng_uniform(&rng) - 0.5) * scale[k])));
    for (int i = 0; i < B; i++)
        tg[i] = (int32_t)(rc_rng_next_u64(&rng) % V);
    tg[3] = -100; /* ignored */
    rc_graph *g = rc_graph_new();
    rc_tensor *xi = rc_input(g, "x", t, 2, (int64_t[]){B, D});
    rc_tensor *W1 = rc_param(g, "w1", t, 2, (int64_t[]){D, H});
    rc_tensor *B1 = rc_param(g, "b1", t, 1, (int64_t[]){H});
    rc_tensor *W2 = rc_param(g, "w2", t, 2, (int64_t[]){H, V});
    rc_tensor *ti = rc_input(g, "t", RC_I32, 1, (int64_t[]){B});
    rc_tensor *hid = rc_gelu(g, rc_add(g, rc_matmul(g, xi, W1, 0, 0), B1));
    rc_tensor *loss = rc_cross_entropy(g, rc_matmul(g, hid, W2, 0, 0), ti, RC_IGNORE_INDEX);
    rc_tensor *wrt[3] = {W1, B1, W2}, *outs[4] = {loss};
    rc_backward(g, loss, wrt, 3, outs + 1);
    CHECKF(!rc_graph_error(g), "mlp: %s", rc_graph_error(g));
    rc_error err = {0};
    rc_plan *pc = rc_graph_error(g) ? NULL : rc_plan_new(g, outs, 4, &err);
    rc_plan *pg = pc ? rc_plan_new_on(gpu, g, outs, 4, &err) : NULL;
    CHECKF(pg, "mlp: %s", err.msg);
    rc_tensor *leaves[4] = {xi, W1, B1, W2};
    int ok = pg != NULL;
    for (int k = 0; ok && k < 4; k++)
        ok = !bind_both(pc, pg, leaves[k], vals[k], NULL);
    ok = ok && !bind_both(pc, pg, ti, NULL, tg) && !rc_plan_run(pc, &err) && !rc_plan_run(pg, &err);
    CHECKF(ok, "mlp: %s", err.msg);
    if (ok) {
        long dl = out_diff(pc, pg, loss, "mlp", 1), dg = 0;
        for (int k = 1; k < 4; k++) {
            long d = out_diff(pc, pg, outs[k], "mlp", 1);
            CHECKF(outs[k]->dtype == t && d >= 0 && d <= 2, "mlp: gradient %d differs by %ld ulps", k - 1, d);
            dg = d > dg ? d : dg;
        }
        /* the loss is f32: its sums see logits that may differ by an ulp of bf16 */
        CHECKF(loss->dtype == RC_F32 && dl >= 0 && dl <= 20000, "mlp: loss differs by %.2g relative",
               dl * 1e-7);
        printf("  mlp bf16: loss %.2g relative, gradients %ld ulp\n", dl * 1e-7, dg);
    }
    rc_plan_free(pc);
    rc_plan_free(pg);
    rc_graph_free(g);
}

/* A causal attention block with a tied-embedding head and a cross-entropy, all in dtype t:
 * the loss and every parameter's gradient on both backends (views, permutes, batched
 * products, rope, the norms and softmax in one plan's arena). */
static void test_block(rc_dtype t)
{
    enum { B = 2, T = 6, C = 16, NH = 2, HD = 8, V = 20, NP = 6 };
    rc_rng rng = rc_rng_new(t == RC_BF16 ? 31 : 32);
    rc_graph *g = rc_graph_new();
    rc_tensor *ids = rc_input(g, "ids", RC_I32, 2, (int64_t[]){B, T});
    rc_tensor *tg = rc_input(g, "targets", RC_I32, 2, (int64_t[]){B, T});
    rc_tensor *pos = rc_input(g, "pos", RC_I32, 1, (int64_t[]){T});
    rc_tensor *p[NP] = {
        rc_param(g, "wte", t, 2, (int64_t[]){V, C}), rc_param(g, "ln_w", t, 1, (int64_t[]){C}),
        rc_param(g, "ln_b", t, 1, (int64_t[]){C}), rc_param(g, "qkv", t, 2, (int64_t[]){C, 3 * C}),
        rc_param(g, "proj", t, 2, (int64_t[]){C, C}), rc_param(g, "rms_w", t, 1, (int64_t[]){C}),
    };
    rc_tensor *x = rc_embedding(g, p[0], ids);                                     /* [B, T, C] */
    rc_tensor *qkv = rc_matmul(g, rc_layer_norm(g, x, p[1], p[2], 1e-5), p[3], 0, 0);
    rc_tensor *hs[3];
    for (int k = 0; k < 3; k++) {
        rc_tensor *s = rc_reshape(g, rc_slice(g, qkv, 2, k * C, (k + 1) * C), 4, (int64_t[]){B, T, NH, HD});
        if (k < 2)
            s = rc_rope(g, s, pos, HD, RC_ROPE_HALF, 10000.0);
        hs[k] = rc_permute(g, s, (int[]){0, 2, 1, 3});                             /* [B, NH, T, HD] */
    }
    rc_tensor *att = rc_softmax_ext(g, rc_matmul(g, hs[0], hs[1], 0, 1), NULL, 1 / sqrt((double)HD), 1);
    rc_tensor *o = rc_reshape(g, rc_permute(g, rc_matmul(g, att, hs[2], 0, 0), (int[]){0, 2, 1, 3}), 3,
                              (int64_t[]){B, T, C});
    x = rc_add(g, x, rc_matmul(g, rc_silu(g, o), p[4], 0, 0));
    rc_tensor *logits = rc_matmul(g, rc_rms_norm(g, x, p[5], 1e-6, 0.0), p[0], 0, 1);
    rc_tensor *loss = rc_cross_entropy(g, logits, tg, RC_IGNORE_INDEX), *outs[NP + 1] = {loss};
    rc_backward(g, loss, p, NP, outs + 1);
    CHECKF(!rc_graph_error(g), "block %s: %s", rc_dtype_name(t), rc_graph_error(g));
    rc_error err = {0};
    rc_plan *pc = rc_graph_error(g) ? NULL : rc_plan_new(g, outs, NP + 1, &err);
    rc_plan *pg = pc ? rc_plan_new_on(gpu, g, outs, NP + 1, &err) : NULL;
    CHECKF(pg, "block %s: %s", rc_dtype_name(t), err.msg);
    int ok = pg != NULL;
    for (int k = 0; ok && k < NP; k++) {
        int64_t n = rc_tensor_numel(p[k]);
        float *v = malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++)
            v[i] = k == 1 || k == 5 ? (float)(0.8 + 0.4 * rc_rng_uniform(&rng)) : (float)(rc_rng_uniform(&rng) - 0.5);
        ok = !bind_both(pc, pg, p[k], v, NULL);
        free(v);
    }
    int32_t iv[B * T], tv[B * T], pv[T];
    for (int i = 0; i < B * T; i++) {
        iv[i] = (int32_t)(rc_rng_next_u64(&rng) % V);
        tv[i] = i == 4 ? RC_IGNORE_INDEX : (int32_t)(rc_rng_next_u64(&rng) % V);
    }
    for (int i = 0; i < T; i++)
        pv[i] = 3 + i;
    ok = ok && !bind_both(pc, pg, ids, NULL, iv) && !bind_both(pc, pg, tg, NULL, tv) &&
         !bind_both(pc, pg, pos, NULL, pv) && !rc_plan_run(pc, &err) && !rc_plan_run(pg, &err);
    CHECKF(ok, "block %s: %s", rc_dtype_name(t), err.msg);
    if (ok) {
        long dl = out_diff(pc, pg, loss, "block", 1), dg = 0;
        for (int k = 1; k <= NP; k++) {
            long d = out_diff(pc, pg, outs[k], "block", 1);
            CHECKF(d >= 0 && d <= 2, "block %s: gradient of %s differs by %ld ulps", rc_dtype_name(t),
                   p[k - 1]->name, d);
            dg = d > dg ? d : dg;
        }
        CHECKF(dl >= 0 && dl <= 20000, "block %s: loss differs by %.2g relative", rc_dtype_name(t), dl * 1e-7);
        printf("  attention block %s: loss %.2g relative, %d gradients %ld ulp\n", rc_dtype_name(t),
               dl * 1e-7, NP, dg);
    }
    rc_plan_free(pc);
    rc_plan_free(pg);
    rc_graph_free(g);
}

/* The f32 copies a 16-bit product works in are device memory counted in the backend's
 * used and peak bytes (run first: the scratch has not grown yet). */
static void test_scratch_counted(void)
{
    enum { M = 64, K = 256, N = 512 };
    size_t used0 = 0, used1 = 0, peak = 0;
    rc_backend_memory(gpu, NULL, &used0, NULL);
    rc_graph *g = rc_graph_new();
    rc_tensor *a = rc_input(g, "a", RC_BF16, 2, (int64_t[]){M, K});
    rc_tensor *b = rc_input(g, "b", RC_BF16, 2, (int64_t[]){K, N});
    rc_tensor *y = rc_matmul(g, a, b, 0, 0);
    rc_error err = {0};
    rc_plan *p = rc_plan_new_on(gpu, g, &y, 1, &err);
    static uint16_t zeros[K * N];
    int ok = p && !rc_plan_set_input(p, a, zeros, &err) && !rc_plan_set_input(p, b, zeros, &err) &&
             !rc_plan_run(p, &err);
    CHECKF(ok, "scratch: %s", err.msg);
    rc_plan_free(p);
    rc_graph_free(g);
    rc_backend_memory(gpu, NULL, &used1, &peak);
    size_t f32_copies = (size_t)(M * K + K * N + M * N) * 4;
    CHECKF(used1 >= used0 + f32_copies && peak >= used1, "scratch: %zu bytes in use after, %zu before",
           used1, used0);
}

/* Every op the device runs in f32 it runs in bf16 and f16: nothing falls back. */
static void test_supported(void)
{
    int missing = 0;
    for (int op = 0; op < RC_OP_COUNT; op++)
        if (rc_backend_supports(gpu, (rc_op)op, RC_F32)) {
            int ok = rc_backend_supports(gpu, (rc_op)op, RC_BF16) && rc_backend_supports(gpu, (rc_op)op, RC_F16);
            CHECKF(ok, "opencl: no 16-bit kernel for %s", rc_op_name((rc_op)op));
            missing += !ok;
        }
    CHECK(missing == 0 && !rc_backend_supports(gpu, RC_OP_EXP, RC_F64));
}

/* ---- a decoding step: one row times 16-bit weights, against f32 (a figure, no assert) ----- */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* seconds per run of x [1, K] @ W [K, N] in dtype t (best of a few), or -1 */
static double decode_time(rc_dtype t, int tb)
{
    enum { K = 768, N = 3072, RUNS = 20 };
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", t, 2, (int64_t[]){1, K});
    rc_tensor *w = rc_param(g, "w", t, 2, tb ? (int64_t[]){N, K} : (int64_t[]){K, N});
    rc_tensor *y = rc_matmul(g, x, w, 0, tb);
    rc_error err = {0};
    rc_plan *p = rc_plan_new_on(gpu, g, &y, 1, &err);
    float *v = malloc((size_t)K * N * 4);
    for (int64_t i = 0; i < (int64_t)K * N; i++)
        v[i] = (float)((i * 7919 % 1000) * 1e-3 - 0.5);
    uint16_t *h = malloc((size_t)K * N * 2);
    rc_convert(h, t == RC_F32 ? RC_BF16 : t, v, RC_F32, (int64_t)K * N);
    double best = -1;
    const void *data = t == RC_F32 ? (const void *)v : (const void *)h;
    if (p && !rc_plan_set_input(p, x, data, &err) && !rc_plan_set_input(p, w, data, &err) &&
        !rc_plan_run(p, &err) && !rc_backend_wait(gpu, &err)) {
        for (int r = 0; r < RUNS; r++) {
            double t0 = now();
            if (rc_plan_run(p, &err) || rc_backend_wait(gpu, &err))
                break;
            double dt = now() - t0;
            best = best < 0 || dt < best ? dt : best;
        }
    }
    CHECKF(best > 0, "decode %s: %s", rc_dtype_name(t), err.msg);
    free(v);
    free(h);
    rc_plan_free(p);
    rc_graph_free(g);
    return best;
}

static void bench_decode(void)
{
    for (int tb = 0; tb < 2; tb++) {
        double f = decode_time(RC_F32, tb), b = decode_time(RC_BF16, tb);
        printf("  decode [1, 768] @ %s (opencl): f32 %.3f ms, bf16 %.3f ms (%.2fx)\n",
               tb ? "[3072, 768]^T" : "[768, 3072]", f * 1e3, b * 1e3, f / b);
    }
}

int main(void)
{
    rc_set_threads(2);
    if (!(gpu = check_opencl("test_opencl_half")))
        return check_summary("opencl_half");
    test_scratch_counted();
    test_supported();
    test_casts();
    test_ops(RC_BF16);
    test_ops(RC_F16);
    test_mlp();
    test_block(RC_BF16);
    test_block(RC_F16);
    bench_decode();
    return check_summary("opencl_half");
}
