/* bench_attention.c - fused attention (rc_attention) against today's unfused graph
 * (matmul, softmax_ext, matmul), forward + backward, at GPT-2 124M's attention shapes (12
 * heads of 64, causal, f32) for T = 256, 1024 and 2048: the best time of a few runs and the
 * plan's arena (the activations at their peak). One JSON line per (T, fused). */
#include "common.h"
#include "redco.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char *NAME = "bench_attention";

/* the unfused graph (as rci_nn_attention builds it today, no kv heads to repeat) */
static rc_tensor *unfused(rc_graph *g, rc_tensor *q, rc_tensor *k, rc_tensor *v, double scale)
{
    rc_tensor *p = rc_softmax_ext(g, rc_matmul(g, q, k, 0, 1), NULL, scale, 1);
    return rc_matmul(g, p, v, 0, 0);
}

/* one line: y and the gradients of sum(y * r) with respect to q, k, v */
static void bench_one(int B, int H, int T, int D, int fused, int reps, const float *vals)
{
    rc_graph *g = rc_graph_new();
    if (!g)
        bench_fail(NAME, "rc_graph_new", "out of memory");
    int64_t s[4] = {B, H, T, D};
    rc_tensor *x[4] = {rc_input(g, "q", RC_F32, 4, s), rc_input(g, "k", RC_F32, 4, s), rc_input(g, "v", RC_F32, 4, s),
                       rc_input(g, "r", RC_F32, 4, s)};
    double scale = 1 / sqrt((double)D);
    rc_tensor *y = fused ? rc_attention(g, x[0], x[1], x[2], NULL, scale, 1, 0, (rc_rng){0, 0})
                         : unfused(g, x[0], x[1], x[2], scale);
    rc_tensor *outs[4];
    rc_backward(g, rc_sum_all(g, rc_mul(g, y, x[3])), x, 3, outs + 1);
    outs[0] = y;
    if (rc_graph_error(g))
        bench_fail(NAME, "graph", rc_graph_error(g));
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, outs, 4, &err);
    if (!p)
        bench_fail(NAME, "rc_plan_new", err.msg);
    for (int i = 0; i < 4; i++)
        if (rc_plan_set_input(p, x[i], vals, &err))
            bench_fail(NAME, "rc_plan_set_input", err.msg);
    double secs = bench_plan_best(NAME, p, reps);
    rc_plan_stats st = rc_plan_get_stats(p);
    json_t *o = bench_line(NAME);
    bench_set_str(o, "attention", fused ? "fused" : "unfused");
    bench_set_int(o, "batch", B);
    bench_set_int(o, "heads", H);
    bench_set_int(o, "T", T);
    bench_set_int(o, "head_dim", D);
    bench_set_int(o, "threads", rc_get_threads());
    bench_set_num(o, "fwd_bwd_ms", secs * 1e3);
    bench_set_num(o, "arena_mb", (double)st.peak_bytes / 1e6);
    if (bench_print(o))
        bench_fail(NAME, "print", "cannot write");
    rc_plan_free(p);
    rc_graph_free(g);
}

int main(void)
{
    /* batch chosen so that a whole run takes about half a minute on 2 cores */
    static const int cases[][3] = {{8, 256, 3}, {2, 1024, 3}, {1, 2048, 2}}; /* B, T, reps */
    enum { H = 12, D = 64 };
    int64_t most = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t n = (int64_t)cases[c][0] * H * cases[c][1] * D;
        most = n > most ? n : most;
    }
    float *vals = malloc((size_t)most * sizeof *vals);
    if (!vals)
        bench_fail(NAME, "malloc", "out of memory");
    rc_rng r = rc_rng_new(7);
    for (int64_t i = 0; i < most; i++)
        vals[i] = (float)(2 * rc_rng_uniform(&r) - 1);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int fused = 0; fused < 2; fused++)
            bench_one(cases[c][0], H, cases[c][1], D, fused, cases[c][2], vals);
    free(vals);
    return 0;
}
