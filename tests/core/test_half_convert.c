/* test_half_convert.c - 16-bit floats (bf16, f16): the conversions of half.h (every 16-bit
 * pattern, ties to even, subnormals, overflow, NaN; rc_convert over arrays), the graph's
 * rules for 16-bit dtypes (one dtype per op's inputs, the loss in f32, errors naming the
 * dtypes), a plan refused by a backend without 16-bit kernels, and a 16-bit kernel's
 * run-time error. The 16-bit ops' values are test_ops' table. */
#include "check.h"
#include "internal.h"
#include "redco.h"
#include "backend.h"
#include "redco/device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float widen(rc_dtype t, uint16_t h)
{
    return t == RC_BF16 ? rc_bf16_to_f32(h) : rc_f16_to_f32(h);
}

static uint16_t narrow(rc_dtype t, float f)
{
    return t == RC_BF16 ? rc_f32_to_bf16(f) : rc_f32_to_f16(f);
}

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
                bad_trip += rci_f32_bits(f) != h << 16;
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
        float x = rci_bits_f32(u);
        if (isnan(x))
            continue;
        uint16_t got = narrow(t, x), want = nearest_ref(t, x);
        if (got != want && bad++ < 5)
            fprintf(stderr, "%s: %a (0x%08x) -> 0x%04x, nearest 0x%04x\n", rc_dtype_name(t), (double)x, u,
                    got, want);
    }
    CHECKF(bad == 0, "%s: %d roundings differ from the nearest value", rc_dtype_name(t), bad);
    if (t == RC_BF16) {
        CHECK(rc_f32_to_bf16(rci_bits_f32(0x3f808000u)) == 0x3f80); /* tie: to even (down) */
        CHECK(rc_f32_to_bf16(rci_bits_f32(0x3f818000u)) == 0x3f82); /* tie: to even (up) */
        CHECK(rc_f32_to_bf16(rci_bits_f32(0x3f808001u)) == 0x3f81);
        CHECK(rc_f32_to_bf16(rci_bits_f32(0x7f7fffffu)) == 0x7f80); /* FLT_MAX rounds to inf */
        CHECK(rc_f32_to_bf16(rci_bits_f32(0x7f800001u)) == 0x7fc0); /* NaN in the low bits stays NaN */
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
    return check_summary("test_half_convert");
}
