/* bench_matmul.c - BLAS matmul through the executor vs cblas_sgemm called directly,
 * on the shapes of a GPT-2 small step, with the same product in bf16 beside it; then
 * one-row products (a decoding step: GPT-2's vocabulary head and MLP) in f32, bf16 and
 * f16, where 16-bit weights are read directly. executor_f32_library names OpenBLAS's
 * kernels (`OPENBLAS_CORETYPE` picks others). One JSON line per shape; any failing call
 * prints one line naming it and exits 1. */
#include "common.h"
#include "redco.h"
#include "redco/device.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

static const char *NAME = "bench_matmul";

static void fill(float *x, int64_t n, rc_rng *r)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(rc_rng_uniform(r) - 0.5);
}

/* best of `reps` runs of the product in dtype t (operands given in f32), in seconds */
static double time_executor(rc_dtype t, int m, int k, int n, int ta, int tb, const float *a, const float *b, int reps)
{
    rc_graph *g = rc_graph_new();
    if (!g)
        bench_fail(NAME, "rc_graph_new", "out of memory");
    int64_t sa[2] = {ta ? k : m, ta ? m : k}, sb[2] = {tb ? n : k, tb ? k : n};
    rc_tensor *x = rc_input(g, "a", t, 2, sa), *w = rc_input(g, "b", t, 2, sb);
    rc_tensor *y = rc_matmul(g, x, w, ta, tb);
    if (rc_graph_error(g))
        bench_fail(NAME, "rc_matmul", rc_graph_error(g));
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, &y, 1, &err);
    if (!p)
        bench_fail(NAME, "rc_plan_new", err.msg);
    /* the operands are copied in once, outside the timed runs */
    void *ha = malloc((size_t)m * k * 4), *hb = malloc((size_t)k * n * 4);
    if (!ha || !hb || rc_convert(ha, t, a, RC_F32, (int64_t)m * k) || rc_convert(hb, t, b, RC_F32, (int64_t)k * n))
        bench_fail(NAME, "rc_convert", "out of memory");
    if (rc_plan_set_input(p, x, ha, &err) || rc_plan_set_input(p, w, hb, &err))
        bench_fail(NAME, "rc_plan_set_input", err.msg);
    free(ha);
    free(hb);
    double best = bench_plan_best(NAME, p, reps);
    rc_plan_free(p);
    rc_graph_free(g);
    return best;
}

static double time_cblas(int m, int k, int n, int ta, int tb, const float *a, const float *b, float *c, int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k,
                    1.0f, a, ta ? m : k, b, tb ? k : n, 0.0f, c, n);
        double dt = bench_now() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

int main(void)
{
    rc_set_threads(0);
    static const int shapes[][5] = {
        /* m, k, n, trans_a, trans_b: GPT-2 small at B*T = 256 */
        {256, 768, 2304, 0, 0},   /* qkv projection */
        {256, 768, 3072, 0, 0},   /* mlp up */
        {256, 3072, 768, 0, 0},   /* mlp down */
        {256, 768, 3072, 0, 1},   /* backward: dX = dY W^T */
        {768, 256, 3072, 1, 0},   /* backward: dW = X^T dY */
        {1024, 1024, 1024, 0, 0},
    };
    rc_rng r = rc_rng_new(1);
    rc_cpu_info cpu;
    rc_cpu_device_info(&cpu);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int m = shapes[s][0], k = shapes[s][1], n = shapes[s][2], ta = shapes[s][3], tb = shapes[s][4];
        float *a = malloc(sizeof(float) * m * k), *b = malloc(sizeof(float) * k * n);
        float *c = malloc(sizeof(float) * m * n);
        if (!a || !b || !c)
            bench_fail(NAME, "malloc", "out of memory");
        fill(a, (int64_t)m * k, &r);
        fill(b, (int64_t)k * n, &r);
        int reps = 10;
        double flop = 2.0 * m * n * k;
        double tc = time_cblas(m, k, n, ta, tb, a, b, c, reps);
        double te = time_executor(RC_F32, m, k, n, ta, tb, a, b, reps);
        double tbf = time_executor(RC_BF16, m, k, n, ta, tb, a, b, reps);
        json_t *o = bench_line("matmul");
        bench_set_int(o, "m", m);
        bench_set_int(o, "k", k);
        bench_set_int(o, "n", n);
        bench_set_int(o, "trans_a", ta);
        bench_set_int(o, "trans_b", tb);
        bench_set_int(o, "threads", rc_get_threads());
        bench_set_num(o, "executor_gflops", flop / te * 1e-9);
        bench_set_num(o, "cblas_gflops", flop / tc * 1e-9);
        bench_set_num(o, "executor_vs_cblas", tc / te);
        bench_set_str(o, "executor_f32_library", cpu.f32_products);
        bench_set_num(o, "bf16_gflops", flop / tbf * 1e-9);
        if (bench_print(o))
            bench_fail(NAME, "writing a JSON line", "jansson or stdout failed");
        free(a);
        free(b);
        free(c);
    }
    /* one row by a weight matrix: k, n, trans_b (GPT-2's head reads wte [V, C] transposed) */
    static const int rows[][3] = {{768, 50257, 1}, {768, 3072, 0}, {3072, 768, 0}};
    for (size_t s = 0; s < sizeof rows / sizeof rows[0]; s++) {
        int k = rows[s][0], n = rows[s][1], tb = rows[s][2];
        float *a = malloc(sizeof(float) * k), *b = malloc(sizeof(float) * k * n);
        if (!a || !b)
            bench_fail(NAME, "malloc", "out of memory");
        fill(a, k, &r);
        fill(b, (int64_t)k * n, &r);
        int reps = 20;
        double t32 = time_executor(RC_F32, 1, k, n, 0, tb, a, b, reps);
        double tbf = time_executor(RC_BF16, 1, k, n, 0, tb, a, b, reps);
        double th = time_executor(RC_F16, 1, k, n, 0, tb, a, b, reps);
        json_t *o = bench_line("matmul_row");
        bench_set_int(o, "k", k);
        bench_set_int(o, "n", n);
        bench_set_int(o, "trans_b", tb);
        bench_set_int(o, "threads", rc_get_threads());
        bench_set_num(o, "f32_ms", t32 * 1e3);
        bench_set_num(o, "bf16_ms", tbf * 1e3);
        bench_set_num(o, "f16_ms", th * 1e3);
        bench_set_num(o, "f32_weight_gbs", 4.0 * k * n / t32 * 1e-9);
        bench_set_num(o, "bf16_weight_gbs", 2.0 * k * n / tbf * 1e-9);
        bench_set_num(o, "bf16_speedup", t32 / tbf);
        if (bench_print(o))
            bench_fail(NAME, "writing a JSON line", "jansson or stdout failed");
        free(a);
        free(b);
    }
    return 0;
}
