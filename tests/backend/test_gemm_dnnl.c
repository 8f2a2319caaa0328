/* test_gemm_dnnl.c - the CPU's 16-bit matrix products on oneDNN (src/backend/cpu/gemm_dnnl.c)
 * equal the widening path (16-bit operands widened to f32, sgemm, the sums rounded once)
 * within 1 ulp of the 16-bit result, on shapes whose sizes are no multiple of any tile: each
 * transpose, batches (3-D and 4-D), an operand shared by every batch (A's batches stacked
 * under a shared B, a transposed A under a shared B, a shared A), large inner sizes, one
 * and two threads, and a few rows under a shared B (the decoding kernel, which both runs
 * take). Each product runs twice on the CPU backend, with the oneDNN path on and off
 * (rci_cpu_dnnl_use), from the same bf16 (or f16) values.
 *
 * Where the path runs: with no argument, bf16 products run on oneDNN exactly when the CPU
 * has bf16 dot products (AVX512_BF16; oneDNN's ISA query agrees), and the test prints
 * oneDNN's kernel; with "widen" (CTest runs it with DNNL_MAX_CPU_ISA=AVX512_CORE, a CPU
 * without bf16 units as oneDNN sees it) none does: today's path stays. f16 products take
 * oneDNN only where the CPU has AVX512_FP16 and oneDNN a non-reference f16 kernel (none in
 * Debian's oneDNN 2.6); the test prints which. A product handed to rci_cpu_dnnl_matmul that the path does not take
 * is an error naming the shapes, not an abort. */
#include "check.h"
#include "cpu/cpu.h"
#include "redco/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int nda, ndb;
    int64_t a[4], b[4];
    int ta, tb;
    int threads;
    int few_rows;                 /* the decoding kernel runs it (neither path is oneDNN) */
} mm_case;

static const mm_case cases[] = {
    {2, 2, {7, 19}, {19, 33}, 0, 0, 2, 0},
    {2, 2, {19, 7}, {19, 33}, 1, 0, 2, 0},
    {2, 2, {7, 19}, {33, 19}, 0, 1, 2, 0},
    {2, 2, {19, 7}, {33, 19}, 1, 1, 2, 0},
    {3, 3, {5, 9, 17}, {5, 17, 13}, 0, 0, 2, 0},
    {3, 3, {5, 17, 9}, {5, 13, 17}, 1, 1, 2, 0},
    {3, 3, {5, 9, 17}, {5, 13, 17}, 0, 1, 1, 0},
    {4, 4, {2, 3, 11, 17}, {2, 3, 17, 10}, 0, 0, 2, 0},
    {3, 2, {3, 6, 17}, {17, 21}, 0, 0, 2, 0},      /* shared B: A's rows stacked */
    {3, 2, {3, 17, 6}, {17, 21}, 1, 0, 2, 0},      /* shared B, A transposed: batches */
    {3, 2, {3, 6, 17}, {21, 17}, 0, 1, 2, 0},
    {3, 2, {3, 17, 6}, {21, 17}, 1, 1, 2, 0},
    {2, 2, {130, 301}, {515, 301}, 0, 1, 2, 0},
    {2, 2, {1030, 70}, {1030, 90}, 1, 0, 2, 0},    /* A^T B with a long inner dimension */
    {2, 2, {67, 2049}, {2049, 45}, 0, 0, 1, 0},
    {3, 2, {1, 3, 17}, {17, 40}, 0, 0, 2, 1},      /* a decoding step: 3 rows */
};

/* the case's output in dtype t with the oneDNN path on or off: rc_tensor_numel 16-bit
 * words (malloc'ed), NULL on failure (checked) */
static uint16_t *run_case(const mm_case *c, rc_dtype t, int on, const char *what, int64_t *numel)
{
    rc_error err = {0};
    rc_graph *g = rc_graph_new();
    rc_tensor *a = rc_input(g, "a", t, c->nda, c->a), *b = rc_input(g, "b", t, c->ndb, c->b);
    rc_tensor *y = rc_matmul(g, a, b, c->ta, c->tb);
    uint16_t *out = NULL, *va = NULL, *vb = NULL;
    CHECKF(!rc_graph_error(g), "%s: graph: %s", what, rc_graph_error(g));
    if (rc_graph_error(g)) {
        rc_graph_free(g);
        return NULL;
    }
    int64_t na = rc_tensor_numel(a), nb = rc_tensor_numel(b);
    *numel = rc_tensor_numel(y);
    va = malloc((size_t)na * 2), vb = malloc((size_t)nb * 2), out = malloc((size_t)*numel * 2);
    rc_rng r = rc_rng_new(7);
    for (int64_t i = 0; i < na; i++)
        va[i] = t == RC_BF16 ? rc_f32_to_bf16((float)rc_rng_uniform(&r) * 2 - 1)
                             : rc_f32_to_f16((float)rc_rng_uniform(&r) * 2 - 1);
    for (int64_t i = 0; i < nb; i++)
        vb[i] = t == RC_BF16 ? rc_f32_to_bf16((float)rc_rng_uniform(&r) * 2 - 1)
                             : rc_f32_to_f16((float)rc_rng_uniform(&r) * 2 - 1);
    rc_set_threads(c->threads);
    rci_cpu_dnnl_use(on);
    rc_plan *p = rc_plan_new_on(rc_device_open("cpu", 0, NULL), g, &y, 1, &err);
    int rc = !p || rc_plan_set_input(p, a, va, &err) || rc_plan_set_input(p, b, vb, &err) || rc_plan_run(p, &err) ||
             rc_plan_read(p, y, out, &err);
    CHECKF(rc == 0, "%s (oneDNN %s): %s", what, on ? "on" : "off", err.msg);
    rci_cpu_dnnl_use(1);
    rc_set_threads(2);
    rc_plan_free(p);
    rc_graph_free(g);
    free(va);
    free(vb);
    if (rc) {
        free(out);
        return NULL;
    }
    return out;
}

/* the 16-bit pattern as an integer that orders like its value */
static long ordered(uint16_t h)
{
    return h & 0x8000 ? -(long)(h & 0x7fff) : (long)h;
}

static long ulps_apart(const uint16_t *x, const uint16_t *y, int64_t n)
{
    long worst = 0;
    for (int64_t i = 0; i < n; i++) {
        long d = labs(ordered(x[i]) - ordered(y[i]));
        worst = d > worst ? d : worst;
    }
    return worst;
}

static void check_case(const mm_case *c, rc_dtype t, int expect_dnnl)
{
    char what[160];
    int64_t n = 0;
    int at = snprintf(what, sizeof what, "%s ", rc_dtype_name(t));
    for (int k = 0; k < 2; k++) {
        int nd = k ? c->ndb : c->nda;
        const int64_t *sh = k ? c->b : c->a;
        at += snprintf(what + at, sizeof what - (size_t)at, "%s[", k ? " @ " : "");
        for (int i = 0; i < nd; i++)
            at += snprintf(what + at, sizeof what - (size_t)at, i ? ", %lld" : "%lld", (long long)sh[i]);
        at += snprintf(what + at, sizeof what - (size_t)at, "]%s", (k ? c->tb : c->ta) ? "^T" : "");
    }
    snprintf(what + at, sizeof what - (size_t)at, ", %d thread%s", c->threads, c->threads > 1 ? "s" : "");
    /* where the product runs: its dims as kernels_half.c reads them */
    rc_graph *g = rc_graph_new();
    rc_tensor *y = rc_matmul(g, rc_input(g, "a", t, c->nda, c->a), rc_input(g, "b", t, c->ndb, c->b), c->ta, c->tb);
    CHECKF(y, "%s: graph: %s", what, rc_graph_error(g));
    if (!y) {
        rc_graph_free(g);
        return;
    }
    rci_matmul_dims d = rci_matmul_dims_of(y);
    rc_set_threads(c->threads);
    int takes = !c->few_rows && rci_cpu_dnnl_takes(t, &d);
    const char *kernel = takes ? rci_cpu_dnnl_kernel(t, &d) : NULL;
    rc_set_threads(2);
    rc_graph_free(g);
    if (t == RC_BF16)
        CHECKF(takes == (expect_dnnl && !c->few_rows), "%s: the oneDNN path %s", what,
               takes ? "runs it (expected the widening path)" : "does not run it (the CPU has bf16 units)");
    uint16_t *on = run_case(c, t, 1, what, &n), *off = run_case(c, t, 0, what, &n);
    if (on && off) {
        long u = ulps_apart(on, off, n);
        int nonzero = 0;
        for (int64_t i = 0; i < n; i++)
            nonzero |= (off[i] & 0x7fff) != 0;
        CHECKF(u <= 1, "%s: oneDNN's result is %ld ulps from the widening path's (at most 1)", what, u);
        CHECKF(nonzero, "%s: the product is all zeros", what);
        printf("  %-50s %-22s %ld ulp\n", what, takes ? kernel : c->few_rows ? "few-rows kernel" : "widen + sgemm", u);
    }
    free(on);
    free(off);
}

/* rci_cpu_dnnl_matmul on a product the path does not take (turned off): -1, a message */
static void check_error(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *y = rc_matmul(g, rc_input(g, "a", RC_BF16, 2, (int64_t[]){7, 19}),
                             rc_input(g, "b", RC_BF16, 2, (int64_t[]){19, 33}), 0, 0);
    rci_matmul_dims d = rci_matmul_dims_of(y);
    uint16_t a[7 * 19] = {0}, b[19 * 33] = {0}, c[7 * 33];
    rci_cpu_args io = {y, c, {a, b}, 0, NULL, 0, NULL};
    rc_error err = {0};
    rci_cpu_dnnl_use(0);
    int rc = rci_cpu_dnnl_matmul(&io, &d, &err);
    rci_cpu_dnnl_use(1);
    CHECKF(rc == -1 && err.code != 0, "a product the path does not take: rc %d", rc);
    CHECKF(check_has(err.msg, "matmul: oneDNN") && check_has(err.msg, "7 x 19 @ [1] 19 x 33"),
           "the error names the op and the shapes: '%s'", err.msg);
    rc_graph_free(g);
}

int main(int argc, char **argv)
{
    int widen = argc > 1 && !strcmp(argv[1], "widen");
    __builtin_cpu_init();
    int bf16_units = __builtin_cpu_supports("avx512bf16");
    int expect = bf16_units && !widen;
    printf("test_gemm_dnnl: the CPU %s AVX512_BF16; bf16 products expected on %s\n", bf16_units ? "has" : "lacks",
           expect ? "oneDNN" : "the widening path");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i], RC_BF16, expect);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i += 4)
        check_case(&cases[i], RC_F16, 0);
    check_error();
    return check_summary("test_gemm_dnnl");
}
