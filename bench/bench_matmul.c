/* bench_matmul.c - BLAS matmul through the executor vs cblas_sgemm called directly,
 * on the shapes of a GPT-2 small step. One JSON line per shape. */
#include "redco.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fill(float *x, int64_t n, rc_rng *r)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(rc_rng_uniform(r) - 0.5);
}

/* best of `reps` runs, in seconds */
static double time_executor(int m, int k, int n, int ta, int tb, const float *a, const float *b, int reps)
{
    rc_graph *g = rc_graph_new();
    int64_t sa[2] = {ta ? k : m, ta ? m : k}, sb[2] = {tb ? n : k, tb ? k : n};
    rc_tensor *x = rc_input(g, "a", RC_F32, 2, sa), *w = rc_input(g, "b", RC_F32, 2, sb);
    rc_tensor *y = rc_matmul(g, x, w, ta, tb);
    rc_tensor_bind(x, (void *)a);
    rc_tensor_bind(w, (void *)b);
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, &y, 1, &err);
    double best = 1e30;
    for (int r = 0; p && r < reps; r++) {
        double t0 = now_s();
        rc_plan_run(p, &err);
        double dt = now_s() - t0;
        best = dt < best ? dt : best;
    }
    rc_plan_free(p);
    rc_graph_free(g);
    return best;
}

static double time_cblas(int m, int k, int n, int ta, int tb, const float *a, const float *b, float *c, int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k,
                    1.0f, a, ta ? m : k, b, tb ? k : n, 0.0f, c, n);
        double dt = now_s() - t0;
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
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int m = shapes[s][0], k = shapes[s][1], n = shapes[s][2], ta = shapes[s][3], tb = shapes[s][4];
        float *a = malloc(sizeof(float) * m * k), *b = malloc(sizeof(float) * k * n);
        float *c = malloc(sizeof(float) * m * n);
        fill(a, (int64_t)m * k, &r);
        fill(b, (int64_t)k * n, &r);
        int reps = 10;
        double flop = 2.0 * m * n * k;
        double tc = time_cblas(m, k, n, ta, tb, a, b, c, reps);
        double te = time_executor(m, k, n, ta, tb, a, b, reps);
        printf("{\"bench\": \"matmul\", \"m\": %d, \"k\": %d, \"n\": %d, \"trans_a\": %d, \"trans_b\": %d, "
               "\"threads\": %d, \"executor_gflops\": %.1f, \"cblas_gflops\": %.1f, \"executor_vs_cblas\": %.3f}\n",
               m, k, n, ta, tb, rc_get_threads(), flop / te * 1e-9, flop / tc * 1e-9, tc / te);
        free(a);
        free(b);
        free(c);
    }
    return 0;
}
