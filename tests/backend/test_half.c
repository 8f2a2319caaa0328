/* test_half.c - 16-bit floats (bf16, f16): the conversions (every 16-bit pattern, ties
 * to even, subnormals, overflow, NaN), every op's forward in bf16 and f16 against the f32
 * kernels on the same rounded inputs, every op's gradient in 16 bits against f32, the
 * gradients of a small MLP with a softmax cross-entropy, and the CPU's support of every
 * op in both dtypes. */
#include "check.h"
#include "redco.h"
#include "backend.h"
#include "redco/device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float widen(rc_dtype t, uint16_t h)
{
    return t == RC_BF16 ? rc_bf16_to_f32(h) : rc_f16_to_f32(h);
}

static uint16_t narrow(rc_dtype t, float f)
{
    return t == RC_BF16 ? rc_f32_to_bf16(f) : rc_f32_to_f16(f);
}

/* The CPU backend's size of a 16-bit node's pieces (src/backend/cpu/cpu.h): made small,
 * every op runs in many pieces on the tests' small tensors. */
void rci_cpu_half_chunk(int64_t floats);
static int in_pieces; /* the pieces sum in other orders: 1 ulp, and 1e-6 for f32 outputs */

/* ---- conversions ------------------------------------------------------------------------ */

/* The 16-bit value nearest to x by a reference search (ties to even): the largest
 * pattern not above |x| among the ordered non-negative patterns, or the next one. */
static uint16_t nearest_ref(rc_dtype t, float x)
{
    uint16_t top = t == RC_BF16 ? 0x7f80 : 0x7c00;   /* infinity */
    double a = fabs((double)x);
    uint16_t lo = 0, hi = top;
    while (hi - lo > 1) {                              /* widen(lo) <= a < widen(hi) */
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if ((double)widen(t, mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double vlo = widen(t, lo), vhi;
    if (hi == top) /* past the largest finite value the next step is where infinity starts */
        vhi = 2 * (double)widen(t, (uint16_t)(top - 1)) - (double)widen(t, (uint16_t)(top - 2));
    else
        vhi = widen(t, hi);
    uint16_t r;
    if (a == vlo)
        r = lo;
    else if (a - vlo < vhi - a)
        r = lo;
    else if (a - vlo > vhi - a)
        r = hi;
    else
        r = (lo & 1) ? hi : lo;
    return (uint16_t)(r | (signbit(x) ? 0x8000 : 0));
}

static void test_conversions(rc_dtype t)
{
    int bad_trip = 0, bad_nan = 0;
    uint16_t exp_mask = t == RC_BF16 ? 0x7f80 : 0x7c00, quiet = t == RC_BF16 ? 0x0040 : 0x0200;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = widen(t, (uint16_t)h);
        uint16_t back = narrow(t, f);
        int is_nan = (h & exp_mask) == exp_mask && (h & ~exp_mask & 0x7fff);
        if (is_nan) {
            /* NaN stays NaN, sign and payload kept, made quiet */
            bad_nan += !isnan(f) || back != (h | quiet);
        } else {
            bad_trip += back != h;
            if (t == RC_BF16)
                bad_trip += f32_bits(f) != h << 16;
        }
    }
    CHECKF(bad_trip == 0 && bad_nan == 0, "%s: %d round trips and %d NaNs differ", rc_dtype_name(t),
           bad_trip, bad_nan);
    /* ties to even, overflow, subnormals, against the reference search */
    int bad = 0;
    rc_rng r = rc_rng_new(7);
    for (int i = 0; i < 400000; i++) {
        uint32_t u = (uint32_t)rc_rng_next_u64(&r);
        if (i % 4 == 1) /* exactly halfway between two 16-bit values */
            u = (u & (t == RC_BF16 ? 0xffff0000u : 0xffffe000u)) | (t == RC_BF16 ? 0x8000u : 0x1000u);
        if (i % 4 == 2 && t == RC_F16) /* the f16 range, subnormals included */
            u = (u & 0x80000000u) | (0x33000000u + (u & 0x7fffffffu) % (0x47800000u - 0x33000000u));
        float x = bits_f32(u);
        if (isnan(x))
            continue;
        uint16_t got = narrow(t, x), want = nearest_ref(t, x);
        if (got != want && bad++ < 5)
            fprintf(stderr, "%s: %a (0x%08x) -> 0x%04x, nearest 0x%04x\n", rc_dtype_name(t), (double)x, u,
                    got, want);
    }
    CHECKF(bad == 0, "%s: %d roundings differ from the nearest value", rc_dtype_name(t), bad);
    if (t == RC_BF16) {
        CHECK(rc_f32_to_bf16(bits_f32(0x3f808000u)) == 0x3f80); /* tie: to even (down) */
        CHECK(rc_f32_to_bf16(bits_f32(0x3f818000u)) == 0x3f82); /* tie: to even (up) */
        CHECK(rc_f32_to_bf16(bits_f32(0x3f808001u)) == 0x3f81);
        CHECK(rc_f32_to_bf16(bits_f32(0x7f7fffffu)) == 0x7f80); /* FLT_MAX rounds to inf */
        CHECK(rc_f32_to_bf16(bits_f32(0x7f800001u)) == 0x7fc0); /* NaN in the low bits stays NaN */
    } else {
        CHECK(rc_f32_to_f16(65504.0f) == 0x7bff);
        CHECK(rc_f32_to_f16(65519.99f) == 0x7bff);
        CHECK(rc_f32_to_f16(65520.0f) == 0x7c00);                /* tie past the top: inf */
        CHECK(rc_f32_to_f16(-1e9f) == 0xfc00);
        CHECK(rc_f32_to_f16(0x1p-24f) == 0x0001);                /* smallest subnormal */
        CHECK(rc_f32_to_f16(0x1p-25f) == 0x0000);                /* tie: to even (zero) */
        CHECK(rc_f32_to_f16(0x1.8p-24f) == 0x0002);              /* tie: to even (up) */
        CHECK(rc_f32_to_f16(0x1.ff8p-15f) == 0x03ff);            /* the largest subnormal */
        CHECK(rc_f32_to_f16(0x1.ffcp-15f) == 0x0400);            /* tie: up to the smallest normal */
        CHECK(rc_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00);         /* tie: to even (down) */
        CHECK(rc_f32_to_f16(1.0f + 0x3p-11f) == 0x3c02);         /* tie: to even (up) */
        CHECK(rc_f16_to_f32(0x0001) == 0x1p-24f && rc_f16_to_f32(0x8000) == 0 && signbit(rc_f16_to_f32(0x8000)));
    }
    /* rc_convert over arrays, through every pair of float dtypes */
    float src[6] = {1.0f, -2.5f, 0x1.0101p0f, 1e-6f, 3e38f, NAN};
    uint16_t h[6], h2[6];
    double d[6];
    float back[6];
    CHECK(rc_convert(h, t, src, RC_F32, 6) == 0);
    CHECK(rc_convert(d, RC_F64, h, t, 6) == 0 && rc_convert(h2, t, d, RC_F64, 6) == 0);
    CHECK(rc_convert(back, RC_F32, h2, t, 6) == 0);
    int same = 1;
    for (int i = 0; i < 6; i++) {
        same &= h[i] == narrow(t, src[i]) && h2[i] == h[i];
        same &= isnan(back[i]) ? isnan(src[i]) : back[i] == widen(t, h[i]);
    }
    CHECK(same);
    rc_dtype other = t == RC_BF16 ? RC_F16 : RC_BF16;
    CHECK(rc_convert(h2, other, h, t, 6) == 0 && h2[0] == narrow(other, 1.0f));
    CHECK(rc_convert(h2, RC_I32, h, t, 6) == -1);
}

/* ---- forward and gradients of every op ------------------------------------------------- */

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
    int ulps;                    /* 16-bit ulps allowed off round(f32 result) */
    int grad;                    /* 1: check the gradient too */
    int out;                     /* the output's dtype: OUT_H (the tested one), OUT_F32, OUT_I32 */
} op_case;

enum { OUT_H, OUT_F32, OUT_I32 };

static int64_t spec_numel(const leaf_spec *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= s->shape[i];
    return n;
}

/* 16-bit ulps between a and b (ordered patterns), 0 when both are NaN */
static int ulp_diff(uint16_t a, uint16_t b)
{
    int ia = a & 0x8000 ? -(a & 0x7fff) : a, ib = b & 0x8000 ? -(b & 0x7fff) : b;
    return abs(ia - ib);
}

static int is_nan16(rc_dtype t, uint16_t h)
{
    return isnan(widen(t, h));
}

typedef struct {
    rc_graph *g;
    rc_plan *p;
    rc_tensor *y, *loss;
    rc_tensor *leaves[4], *wrt[4], *grads[4];
    int nwrt;
} built;

/* builds case c in dtype t with the leaves' values (f32 values exactly representable in
 * the 16-bit dtype h); with grad, also sum(y * r) and its gradient for every float leaf */
static int build_run(const op_case *c, rc_dtype t, float *const *vals, int32_t *const *ids,
                     const float *r, int grad, built *b)
{
    memset(b, 0, sizeof *b);
    b->g = rc_graph_new();
    for (int i = 0; i < c->n; i++) {
        const leaf_spec *s = &c->in[i];
        rc_dtype lt = s->kind == IDS ? RC_I32 : s->kind == LOSS ? RC_F32 : t;
        char name[16];
        snprintf(name, sizeof name, "x%d", i);
        b->leaves[i] = rc_input(b->g, name, lt, s->ndim, s->shape);
    }
    b->y = c->build(b->g, b->leaves, t);
    rc_tensor *outs[6] = {b->y};
    int nout = 1;
    if (grad && b->y) {
        rc_tensor *rt = rc_const(b->g, "r", RC_F32, b->y->ndim, b->y->shape, r);
        rt = rc_cast(b->g, rt, b->y->dtype);
        b->loss = rc_sum_all(b->g, rc_mul(b->g, b->y, rt));
        for (int i = 0; i < c->n; i++)
            if (c->in[i].kind != IDS)
                b->wrt[b->nwrt++] = b->leaves[i];
        rc_backward(b->g, b->loss, b->wrt, b->nwrt, b->grads);
        for (int i = 0; i < b->nwrt; i++)
            outs[nout++] = b->grads[i];
    }
    if (rc_graph_error(b->g)) {
        CHECKF(0, "%s in %s: %s", c->name, rc_dtype_name(t), rc_graph_error(b->g));
        return -1;
    }
    rc_error err = {0};
    b->p = rc_plan_new(b->g, outs, nout, &err);
    CHECKF(b->p, "%s in %s: %s", c->name, rc_dtype_name(t), err.msg);
    if (!b->p)
        return -1;
    for (int i = 0; i < c->n; i++) {
        const leaf_spec *s = &c->in[i];
        int64_t n = spec_numel(s);
        rc_dtype lt = b->leaves[i]->dtype;
        void *host = ids[i];
        uint16_t *h = NULL;
        if (s->kind != IDS && lt != RC_F32) {
            h = malloc((size_t)n * 2 + 2);
            rc_convert(h, lt, vals[i], RC_F32, n);
            host = h;
        } else if (s->kind != IDS) {
            host = vals[i];
        }
        if (rc_plan_set_input(b->p, b->leaves[i], host, &err))
            CHECKF(0, "%s: %s", c->name, err.msg);
        free(h);
    }
    if (rc_plan_run(b->p, &err)) {
        CHECKF(0, "%s in %s: run: %s", c->name, rc_dtype_name(t), err.msg);
        return -1;
    }
    return 0;
}

static void built_free(built *b)
{
    rc_plan_free(b->p);
    rc_graph_free(b->g);
}

/* t's values as f32 */
static float *read_f32(const built *b, const rc_tensor *t)
{
    int64_t n = rc_tensor_numel(t);
    void *raw = malloc((size_t)n * 8 + 8);
    float *f = malloc((size_t)n * 4 + 4);
    rc_error err = {0};
    rc_plan_read(b->p, t, raw, &err);
    if (t->dtype == RC_I32)
        for (int64_t i = 0; i < n; i++)
            f[i] = (float)((int32_t *)raw)[i];
    else
        rc_convert(f, RC_F32, raw, t->dtype, n);
    free(raw);
    return f;
}

/* ||a - b|| / ||b|| */
static double rel_diff(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void run_case(const op_case *c, rc_dtype h, rc_rng *rng)
{
    float *vals[4] = {0};
    int32_t *ids[4] = {0};
    for (int i = 0; i < c->n; i++) {
        const leaf_spec *s = &c->in[i];
        int64_t n = spec_numel(s);
        if (s->kind == IDS) {
            ids[i] = malloc((size_t)n * 4 + 4);
            for (int64_t k = 0; k < n; k++)
                ids[i][k] = (int32_t)(s->lo + floor(rc_rng_uniform(rng) * (s->hi - s->lo)));
            continue;
        }
        vals[i] = malloc((size_t)n * 4 + 4);
        for (int64_t k = 0; k < n; k++) {
            float v = (float)(s->lo + rc_rng_uniform(rng) * (s->hi - s->lo));
            vals[i][k] = s->kind == LOSS ? v : widen(h, narrow(h, v)); /* exact in both dtypes */
        }
    }
    built b16, b32;
    if (build_run(c, h, vals, ids, NULL, 0, &b16) == 0 && build_run(c, RC_F32, vals, ids, NULL, 0, &b32) == 0) {
        rc_tensor *y = b16.y, *y32 = b32.y;
        rc_dtype want = c->out == OUT_H ? h : c->out == OUT_F32 ? RC_F32 : RC_I32;
        CHECKF(y->dtype == want, "%s in %s: output dtype %s", c->name, rc_dtype_name(h),
               rc_dtype_name(y->dtype));
        int64_t n = rc_tensor_numel(y);
        void *raw = malloc((size_t)n * 4 + 4);
        float *ref = read_f32(&b32, y32);
        rc_error err = {0};
        rc_plan_read(b16.p, y, raw, &err);
        int worst = 0, bad = 0;
        for (int64_t i = 0; i < n && c->ulps >= 0; i++) {
            if (y->dtype == RC_F32 || y->dtype == RC_I32) {
                float v = y->dtype == RC_F32 ? ((float *)raw)[i] : (float)((int32_t *)raw)[i];
                bad += !(v == ref[i] || (isnan(v) && isnan(ref[i])) ||
                         (in_pieces && fabs(v - ref[i]) <= 1e-6 * fabs(ref[i])));
                continue;
            }
            uint16_t got = ((uint16_t *)raw)[i], exp = narrow(h, ref[i]);
            if (is_nan16(h, got) || is_nan16(h, exp)) {
                bad += is_nan16(h, got) != is_nan16(h, exp);
                continue;
            }
            int d = ulp_diff(got, exp);
            worst = d > worst ? d : worst;
            if (d > (in_pieces && c->ulps < 1 ? 1 : c->ulps) && bad++ < 3)
                fprintf(stderr, "%s %s [%lld]: 0x%04x vs round(%g) = 0x%04x\n", c->name, rc_dtype_name(h),
                        (long long)i, got, (double)ref[i], exp);
        }
        CHECKF(bad == 0, "%s in %s: %d of %lld elements beyond %d ulps (worst %d)", c->name,
               rc_dtype_name(h), bad, (long long)n, c->ulps, worst);
        free(raw);
        free(ref);
    }
    built_free(&b16);
    built_free(&b32);
    if (c->grad) {
        /* the gradient of sum(y * r), r rounded to 16 bits too */
        built probe;
        memset(&probe, 0, sizeof probe);
        if (build_run(c, RC_F32, vals, ids, NULL, 0, &probe) == 0) {
            int64_t n = rc_tensor_numel(probe.y);
            float *r = malloc((size_t)n * 4 + 4);
            for (int64_t k = 0; k < n; k++)
                r[k] = widen(RC_BF16, narrow(RC_BF16, (float)(rc_rng_uniform(rng) - 0.5)));
            if (build_run(c, h, vals, ids, r, 1, &b16) == 0 && build_run(c, RC_F32, vals, ids, r, 1, &b32) == 0)
                for (int i = 0; i < b16.nwrt; i++) {
                    rc_tensor *gi = b16.grads[i];
                    rc_tensor *leaf = b16.wrt[i];
                    CHECKF(gi->dtype == leaf->dtype, "%s %s: gradient %d is %s", c->name,
                           rc_dtype_name(h), i, rc_dtype_name(gi->dtype));
                    float *a = read_f32(&b16, gi), *e = read_f32(&b32, b32.grads[i]);
                    double d = rel_diff(a, e, rc_tensor_numel(gi));
                    /* bf16 rules reach 5e-3 (tanh, rsqrt); f16 3.5e-3 where a mean's
                     * gradient falls among f16's subnormals */
                    double tol = 1e-2;
                    CHECKF(d < tol, "%s %s: gradient %d differs from f32 by %.3g (tolerance %g)", c->name,
                           rc_dtype_name(h), i, d, tol);
                    free(a);
                    free(e);
                }
            built_free(&b16);
            built_free(&b32);
            free(r);
        }
        built_free(&probe);
    }
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
static rc_tensor *b_act1(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    rc_tensor *acts[RC_ACT_COUNT];
    for (int a = 0; a < RC_ACT_COUNT; a++) {
        rc_tensor *orders[2] = {rc_act(g, x[0], (rc_act_kind)a, 0), rc_act(g, x[0], (rc_act_kind)a, 1)};
        acts[a] = rc_concat(g, orders, 2, 0);
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
static rc_tensor *b_sum(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_sum(g, x[0], 1, 0); }
static rc_tensor *b_sum_last(rc_graph *g, rc_tensor **x, rc_dtype t) { (void)t; return rc_mean(g, x[0], -1, 1); }
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
/* through f64 and back: exact */
static rc_tensor *b_cast_f64(rc_graph *g, rc_tensor **x, rc_dtype t) { return rc_cast(g, rc_cast(g, x[0], RC_F64), t); }
/* an f32 leaf rounded to t (in the f32 graph: the leaf itself) */
static rc_tensor *b_cast_round(rc_graph *g, rc_tensor **x, rc_dtype t) { return rc_cast(g, rc_affine(g, x[0], 1, 0), t); }
static rc_tensor *b_cast_i32(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    return rc_cast(g, x[0], RC_I32);
}
static rc_tensor *b_cast_from_i32(rc_graph *g, rc_tensor **x, rc_dtype t) { return rc_cast(g, x[0], t); }
static rc_tensor *b_collectives(rc_graph *g, rc_tensor **x, rc_dtype t)
{
    (void)t;
    rc_tensor *a = rc_mp_enter(g, x[0]);
    rc_tensor *parts[3] = {rc_mp_reduce(g, a), rc_mp_max(g, a), rc_stop_gradient(g, a)};
    return rc_concat(g, parts, 3, 0);
}

#define L(kind, nd, ...) {kind, nd, {__VA_ARGS__}, 0, 0}
static const op_case cases[] = {
    {"full", 1, {{FLOAT, 2, {3, 5}, -1, 1}}, b_full, 0, 1, OUT_H},
    {"add", 2, {{FLOAT, 3, {2, 3, 5}, -2, 2}, {FLOAT, 1, {5}, -2, 2}}, b_add, 0, 1, OUT_H},
    {"sub", 2, {{FLOAT, 2, {3, 1}, -2, 2}, {FLOAT, 2, {1, 5}, -2, 2}}, b_sub, 0, 1, OUT_H},
    {"mul", 2, {{FLOAT, 2, {300, 257}, -2, 2}, {FLOAT, 2, {300, 257}, -2, 2}}, b_mul, 0, 1, OUT_H},
    {"div", 2, {{FLOAT, 2, {4, 6}, -2, 2}, {FLOAT, 0, {0}, 0.5, 2}}, b_div, 0, 1, OUT_H},
    {"affine", 1, {{FLOAT, 1, {50000}, -3, 3}}, b_affine, 0, 1, OUT_H},
    {"exp", 1, {{FLOAT, 2, {7, 9}, -4, 4}}, b_exp, 0, 1, OUT_H},
    {"log", 1, {{FLOAT, 2, {7, 9}, 0.1, 4}}, b_log, 0, 1, OUT_H},
    {"sqrt", 1, {{FLOAT, 2, {7, 9}, 0.1, 4}}, b_sqrt, 0, 1, OUT_H},
    {"rsqrt", 1, {{FLOAT, 2, {7, 9}, 0.1, 4}}, b_rsqrt, 0, 1, OUT_H},
    {"tanh", 1, {{FLOAT, 2, {7, 9}, -3, 3}}, b_tanh, 0, 1, OUT_H},
    {"act", 1, {{FLOAT, 2, {4, 33}, -4, 4}}, b_act, 0, 0, OUT_H},
    {"act_grad", 1, {{FLOAT, 2, {4, 33}, -4, 4}}, b_act1, 0, 1, OUT_H},
    /* a few rows by a shared 16-bit matrix read directly (f32 sums in another order) */
    {"matmul_row", 2, {{FLOAT, 2, {1, 300}, -1, 1}, {FLOAT, 2, {300, 700}, -1, 1}}, b_mm, 1, 1, OUT_H},
    {"matmul_row_tb", 2, {{FLOAT, 3, {1, 3, 301}, -1, 1}, {FLOAT, 2, {517, 301}, -1, 1}}, b_mm_tb, 1, 1, OUT_H},
    /* one row: the bf16 sums fused with the widening; columns in several blocks per thread */
    {"matmul_row_1", 2, {{FLOAT, 2, {1, 67}, -1, 1}, {FLOAT, 2, {67, 5003}, -1, 1}}, b_mm, 1, 1, OUT_H},
    {"matmul_row_tb1", 2, {{FLOAT, 2, {1, 301}, -1, 1}, {FLOAT, 2, {517, 301}, -1, 1}}, b_mm_tb, 1, 1, OUT_H},
    {"matmul_row_ta", 2, {{FLOAT, 2, {37, 2}, -1, 1}, {FLOAT, 2, {37, 19}, -1, 1}}, b_mm_ta, 1, 1, OUT_H},
    {"matmul_row_tt", 2, {{FLOAT, 2, {37, 4}, -1, 1}, {FLOAT, 2, {300, 37}, -1, 1}}, b_mm_tt, 1, 1, OUT_H},
    /* the general products: the f32 kernel on the widened operands */
    {"matmul", 2, {{FLOAT, 3, {2, 9, 33}, -1, 1}, {FLOAT, 2, {33, 17}, -1, 1}}, b_mm, 1, 1, OUT_H},
    {"matmul_ta", 2, {{FLOAT, 2, {30, 6}, -1, 1}, {FLOAT, 2, {30, 5}, -1, 1}}, b_mm_ta, 1, 1, OUT_H},
    {"matmul_batched", 2, {{FLOAT, 3, {3, 9, 12}, -1, 1}, {FLOAT, 3, {3, 7, 12}, -1, 1}}, b_mm_tb, 1, 1, OUT_H},
    {"softmax", 1, {{FLOAT, 2, {5, 40}, -6, 6}}, b_softmax, 0, 1, OUT_H},
    {"softmax_ext", 2, {{FLOAT, 4, {2, 3, 4, 6}, -6, 6}, {FLOAT, 2, {4, 6}, -1, 0}}, b_softmax_ext, 0, 1, OUT_H},
    {"layer_norm", 3, {{FLOAT, 3, {2, 3, 48}, -3, 5}, {FLOAT, 1, {48}, 0.5, 1.5}, {FLOAT, 1, {48}, -1, 1}},
     b_layer_norm, 0, 1, OUT_H},
    {"rms_norm", 2, {{FLOAT, 2, {6, 48}, -3, 3}, {FLOAT, 1, {48}, -0.5, 0.5}}, b_rms_norm, 0, 1, OUT_H},
    {"embedding", 2, {{FLOAT, 2, {8, 6}, -1, 1}, {IDS, 2, {3, 4}, 0, 8}}, b_embedding, 0, 1, OUT_H},
    {"embedding_pad", 2, {{FLOAT, 2, {8, 6}, -1, 1}, {IDS, 1, {9}, 0, 4}}, b_embedding_pad, 0, 1, OUT_H},
    {"embedding_shard", 2, {{FLOAT, 2, {4, 6}, -1, 1}, {IDS, 1, {9}, 0, 12}}, b_embedding_shard, 0, 1, OUT_H},
    {"embedding_grad", 2, {{IDS, 2, {3, 4}, 0, 8}, {FLOAT, 3, {3, 4, 5}, -1, 1}}, b_embedding_grad, 0, 1, OUT_H},
    {"rope", 2, {{FLOAT, 4, {2, 5, 3, 8}, -1, 1}, {IDS, 1, {5}, 0, 50}}, b_rope, 0, 1, OUT_H},
    {"rope_interleaved", 2, {{FLOAT, 3, {5, 2, 8}, -1, 1}, {IDS, 1, {5}, 0, 50}}, b_rope_il, 0, 1, OUT_H},
    {"moves", 1, {{FLOAT, 3, {3, 4, 5}, -1, 1}}, b_moves, 0, 1, OUT_H},
    {"sum", 1, {{FLOAT, 3, {4, 300, 5}, -1, 1}}, b_sum, 0, 1, OUT_H},
    /* the sum is rounded to 16 bits, then scaled: 2 roundings */
    {"mean", 1, {{FLOAT, 2, {3, 70000}, -1, 1}}, b_sum_last, 1, 1, OUT_H},
    {"max", 1, {{FLOAT, 2, {30, 7}, -1, 1}}, b_max, 0, 1, OUT_H},
    {"sum_to", 1, {{FLOAT, 3, {4, 3, 5}, -1, 1}}, b_sum_to, 0, 1, OUT_H},
    {"cross_entropy", 2, {{FLOAT, 3, {2, 3, 50}, -5, 5}, {IDS, 2, {2, 3}, 0, 50}}, b_ce, 0, 1, OUT_F32},
    {"cross_entropy_grad", 3, {{FLOAT, 2, {6, 20}, -5, 5}, {IDS, 1, {6}, 0, 20}, {LOSS, 0, {0}, 0.5, 2}},
     b_ce_grad, 0, 1, OUT_H},
    {"one_hot", 2, {{IDS, 2, {2, 5}, 0, 6}, {FLOAT, 1, {6}, -1, 1}}, b_one_hot, 0, 1, OUT_H},
    {"dropout", 1, {{FLOAT, 2, {300, 200}, -1, 1}}, b_dropout, 0, 1, OUT_H},
    {"normal", 1, {{FLOAT, 2, {300, 200}, -1, 1}}, b_normal, 1, 1, OUT_H},
    {"where_equal", 2, {{FLOAT, 2, {4, 9}, -1, 1}, {FLOAT, 2, {4, 9}, -1, 1}}, b_where, 0, 1, OUT_H},
    {"cast_f64", 1, {{FLOAT, 2, {40, 9}, -100, 100}}, b_cast_f64, 0, 1, OUT_H},
    {"cast_round", 1, {{LOSS, 2, {400, 90}, -100, 100}}, b_cast_round, 0, 1, OUT_H},
    {"cast_i32", 1, {{FLOAT, 1, {99}, -300, 300}}, b_cast_i32, 0, 0, OUT_I32},
    {"cast_from_i32", 1, {{IDS, 1, {99}, -3000, 3000}}, b_cast_from_i32, 0, 0, OUT_H},
    {"collectives", 1, {{FLOAT, 2, {3, 4}, -1, 1}}, b_collectives, 0, 1, OUT_H},
};

static void test_ops(rc_dtype h)
{
    rc_rng rng = rc_rng_new(h == RC_BF16 ? 11 : 12);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i], h, &rng);
}

/* ---- a small MLP with a softmax cross-entropy ------------------------------------------- */

static void test_mlp(rc_dtype h)
{
    enum { B = 16, D = 32, H = 64, V = 24 };
    rc_rng rng = rc_rng_new(3);
    static float x[B * D], w1[D * H], b1[H], w2[H * V];
    static int32_t tg[B];
    float *vals[4] = {x, w1, b1, w2};
    int64_t sizes[4] = {B * D, D * H, H, H * V};
    double scale[4] = {2, 0.4, 0.2, 0.3};
    for (int k = 0; k < 4; k++)
        for (int64_t i = 0; i < sizes[k]; i++)
            vals[k][i] = widen(h, narrow(h, (float)((rc_rng_uniform(&rng) - 0.5) * scale[k])));
    for (int i = 0; i < B; i++)
        tg[i] = (int32_t)(rc_rng_next_u64(&rng) % V);
    tg[3] = -100; /* ignored */
    float *grads[2][3];
    for (int run = 0; run < 2; run++) {
        rc_dtype t = run ? h : RC_F32;
        rc_graph *g = rc_graph_new();
        rc_tensor *xi = rc_input(g, "x", t, 2, (int64_t[]){B, D});
        rc_tensor *W1 = rc_param(g, "w1", t, 2, (int64_t[]){D, H});
        rc_tensor *B1 = rc_param(g, "b1", t, 1, (int64_t[]){H});
        rc_tensor *W2 = rc_param(g, "w2", t, 2, (int64_t[]){H, V});
        rc_tensor *ti = rc_input(g, "t", RC_I32, 1, (int64_t[]){B});
        rc_tensor *hid = rc_gelu(g, rc_add(g, rc_matmul(g, xi, W1, 0, 0), B1));
        rc_tensor *loss = rc_cross_entropy(g, rc_matmul(g, hid, W2, 0, 0), ti, RC_IGNORE_INDEX);
        rc_tensor *wrt[3] = {W1, B1, W2}, *gr[3];
        rc_backward(g, loss, wrt, 3, gr);
        CHECKF(!rc_graph_error(g), "mlp %s: %s", rc_dtype_name(t), rc_graph_error(g));
        if (rc_graph_error(g)) {
            rc_graph_free(g);
            return;
        }
        CHECK(loss->dtype == RC_F32 && gr[0]->dtype == t && gr[1]->dtype == t && gr[2]->dtype == t);
        rc_tensor *outs[4] = {loss, gr[0], gr[1], gr[2]};
        rc_error err = {0};
        rc_plan *p = rc_plan_new(g, outs, 4, &err);
        CHECKF(p, "%s", err.msg);
        if (!p) {
            rc_graph_free(g);
            return;
        }
        rc_tensor *leaves[4] = {xi, W1, B1, W2};
        for (int k = 0; k < 4; k++) {
            uint16_t *hv = malloc((size_t)sizes[k] * 4);
            rc_convert(hv, t, vals[k], RC_F32, sizes[k]);
            rc_plan_set_input(p, leaves[k], t == RC_F32 ? (void *)vals[k] : (void *)hv, &err);
            free(hv);
        }
        rc_plan_set_input(p, ti, tg, &err);
        CHECKF(rc_plan_run(p, &err) == 0, "%s", err.msg);
        for (int k = 0; k < 3; k++) {
            int64_t n = rc_tensor_numel(gr[k]);
            void *raw = malloc((size_t)n * 4);
            grads[run][k] = malloc((size_t)n * 4);
            rc_plan_read(p, gr[k], raw, &err);
            rc_convert(grads[run][k], RC_F32, raw, t, n);
            free(raw);
        }
        rc_plan_free(p);
        rc_graph_free(g);
    }
    for (int k = 0; k < 3; k++) {
        double d = rel_diff(grads[1][k], grads[0][k], sizes[k + 1]);
        CHECKF(d < 1e-2, "mlp %s: gradient %d differs from f32 by %.3g", rc_dtype_name(h), k, d);
        free(grads[0][k]);
        free(grads[1][k]);
    }
}

/* The CPU's casts on every 16-bit pattern (from bf16 or f16) or 2^20 f32 patterns (random
 * bits: NaN payloads, subnormals, ties), bit for bit as the scalar conversions (as through
 * f32 between bf16 and f16): the vectorised and F16C paths included. */
static void test_cast_all(rc_dtype from, rc_dtype to)
{
    enum { N = 1 << 20 };
    int64_t n = from == RC_F32 ? N : 65536;
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", from, 1, (int64_t[]){n});
    rc_tensor *y = rc_cast(g, x, to);
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, &y, 1, &err);
    uint32_t *in = malloc(N * 4), *out = malloc(N * 4);
    uint16_t *in16 = (uint16_t *)in, *out16 = (uint16_t *)out;
    rc_rng r = rc_rng_new(9);
    for (int64_t i = 0; i < n; i++) {
        if (from == RC_F32)
            in[i] = (uint32_t)rc_rng_next_u64(&r) >> (i % 3 == 0 ? 4 : 0); /* some small values */
        else
            in16[i] = (uint16_t)i;
    }
    int bad = -1;
    if (p && !rc_plan_set_input(p, x, in, &err) && !rc_plan_run(p, &err) && !rc_plan_read(p, y, out, &err)) {
        bad = 0;
        for (int64_t i = 0; i < n; i++) {
            float v = from == RC_F32 ? bits_f32(in[i]) : widen(from, in16[i]);
            int ok = to == RC_F32 ? out[i] == f32_bits(v) : out16[i] == narrow(to, v);
            if (!ok && bad++ < 3)
                fprintf(stderr, "cast %s -> %s: 0x%x gives 0x%x\n", rc_dtype_name(from), rc_dtype_name(to),
                        from == RC_F32 ? in[i] : in16[i], to == RC_F32 ? out[i] : out16[i]);
        }
    }
    CHECKF(bad == 0, "cast %s -> %s: %d patterns differ (%s)", rc_dtype_name(from), rc_dtype_name(to), bad, err.msg);
    free(in);
    free(out);
    rc_plan_free(p);
    rc_graph_free(g);
}

/* The CPU runs every op it runs in f32 in bf16 and f16 too: nothing is left to refuse. */
static void test_supported(void)
{
    rc_backend *cpu = rc_device_open("cpu", 0, NULL);
    int missing = 0;
    for (int op = 0; op < RC_OP_COUNT; op++)
        if (rc_backend_supports(cpu, (rc_op)op, RC_F32)) {
            int ok = rc_backend_supports(cpu, (rc_op)op, RC_BF16) && rc_backend_supports(cpu, (rc_op)op, RC_F16);
            CHECKF(ok, "cpu: no 16-bit kernel for %s", rc_op_name((rc_op)op));
            missing += !ok;
        }
    CHECK(missing == 0);
    CHECK(rc_backend_supports(cpu, RC_OP_CAST, RC_BF16) && rc_backend_supports(cpu, RC_OP_PAD, RC_F16));
}

/* f32 kernels only: the CPU's table with a supports() that refuses 16-bit dtypes */
static int f32_only(const rc_backend *be, rc_op op, rc_dtype t)
{
    return t != RC_BF16 && t != RC_F16 && rc_device_open("cpu", 0, NULL)->supports(be, op, t);
}

/* A backend without 16-bit kernels refuses a plan that needs one, naming the op and the
 * dtype, even where the node's own dtype is f32 (the loss of bf16 logits). Both real
 * backends have every 16-bit kernel now, so the backend here is the CPU's table with 16-bit
 * support taken away; its plan is built, never run. */
static void test_refused_elsewhere(void)
{
    rc_backend f32_cpu = *rc_device_open("cpu", 0, NULL);
    f32_cpu.name = "f32-only";
    f32_cpu.supports = f32_only;
    rc_error err = {0};
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "logits", RC_BF16, 2, (int64_t[]){2, 5});
    rc_tensor *t = rc_input(g, "t", RC_I32, 1, (int64_t[]){2});
    rc_tensor *loss = rc_cross_entropy(g, x, t, -100);
    CHECK(loss && loss->dtype == RC_F32);
    rc_plan *p = rc_plan_new_on(&f32_cpu, g, &loss, 1, &err);
    CHECKF(!p && err.code == RC_ERR_UNSUPPORTED && check_has(err.msg, "cross_entropy") &&
           check_has(err.msg, "bf16") && check_has(err.msg, "f32-only"), "%s", err.msg);
    rc_plan_free(p);
    rc_graph_free(g);
}

/* A 16-bit kernel's run-time error names the op and the value, as the f32 one does. */
static void test_run_errors(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *tab = rc_input(g, "table", RC_BF16, 2, (int64_t[]){8, 4});
    rc_tensor *ids = rc_input(g, "ids", RC_I32, 1, (int64_t[]){3});
    rc_tensor *y = rc_embedding(g, tab, ids);
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, &y, 1, &err);
    uint16_t words[32] = {0};
    int32_t bad_ids[3] = {1, 9, 2};
    CHECK(p && !rc_plan_set_input(p, tab, words, &err) && !rc_plan_set_input(p, ids, bad_ids, &err));
    err = (rc_error){0};
    CHECKF(p && rc_plan_run(p, &err) == -1 && err.code == RC_ERR_INDEX && check_has(err.msg, "embedding") &&
           check_has(err.msg, "9"), "%s", err.msg);
    rc_plan_free(p);
    rc_graph_free(g);
}

/* graph rules: one dtype per op's inputs, the loss's dtype, errors naming the dtypes */
static void test_rules(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *a = rc_input(g, "a", RC_BF16, 2, (int64_t[]){2, 3});
    rc_tensor *b = rc_input(g, "b", RC_F16, 2, (int64_t[]){2, 3});
    CHECK(rc_add(g, a, b) == NULL && rc_graph_error_code(g) == RC_ERR_DTYPE &&
          check_has(rc_graph_error(g), "bf16") && check_has(rc_graph_error(g), "f16"));
    rc_graph_free(g);
    g = rc_graph_new();
    a = rc_input(g, "a", RC_BF16, 2, (int64_t[]){2, 3});
    rc_tensor *t = rc_input(g, "t", RC_I32, 1, (int64_t[]){2});
    rc_tensor *ce = rc_cross_entropy(g, a, t, -100);
    CHECK(ce && ce->dtype == RC_F32);
    CHECK(rc_cross_entropy_grad(g, a, t, rc_scalar(g, RC_BF16, 1.0), -100) == NULL &&
          check_has(rc_graph_error(g), "f32"));
    rc_graph_free(g);
    g = rc_graph_new();
    a = rc_input(g, "a", RC_F16, 2, (int64_t[]){2, 3});
    CHECK(rc_scalar(g, RC_F16, 2.0)->dtype == RC_F16 && rc_one_hot(g, t = rc_input(g, "t", RC_I32, 0, NULL), 4, -1, RC_BF16)->dtype == RC_BF16);
    CHECK(rc_cast(g, a, RC_BF16)->dtype == RC_BF16 && rc_cast(g, a, RC_F16) == a);
    CHECK(rc_matmul(g, a, rc_input(g, "w", RC_F32, 2, (int64_t[]){3, 2}), 0, 0) == NULL &&
          check_has(rc_graph_error(g), "f16"));
    rc_graph_free(g);
}

int main(void)
{
    rc_set_threads(2);
    test_conversions(RC_BF16);
    test_conversions(RC_F16);
    test_rules();
    test_refused_elsewhere();
    test_run_errors();
    test_supported();
    test_cast_all(RC_BF16, RC_F16);
    test_cast_all(RC_F16, RC_BF16);
    test_cast_all(RC_F16, RC_F32);
    test_cast_all(RC_BF16, RC_F32);
    test_cast_all(RC_F32, RC_F16);
    test_cast_all(RC_F32, RC_BF16);
    test_ops(RC_BF16);
    test_ops(RC_F16);
    test_mlp(RC_BF16);
    test_mlp(RC_F16);
    /* again with every large-node path in pieces (rows, batches, inner slices) */
    rci_cpu_half_chunk(40);
    in_pieces = 1;
    test_ops(RC_BF16);
    test_ops(RC_F16);
    test_mlp(RC_BF16);
    rci_cpu_half_chunk(0);
    return check_summary("test_half");
}
