/* bench_attention.c - fused attention (rc_attention) against today's unfused graph
 * (matmul, softmax_ext, matmul), forward + backward, at GPT-2 124M's attention shapes (12
 * heads of 64, causal, f32) for T = 256, 1024 and 2048: the best time of a few runs, the
 * plan's arena (the activations at their peak) and, from one more run with per-kernel
 * timing, the milliseconds of each op that takes more than a tenth of it (`ms_OP`). One JSON
 * line per (T, fused).
 *   bench_attention [--device D] [--dropout P] [--cases B:T:REPS,...] [--dtype f32|bf16|f16]
 *                   [--tiled]
 *       --dropout: attention dropout with probability P (both graphs draw the same mask);
 *       --cases: the batches, lengths and repetitions instead of 8:256:3,2:1024:3,1:2048:2;
 *       --dtype: q, k, v and the upstream gradient stored so (f32 by default);
 *       --tiled: rc_set_tiled_attention (bf16 on a CUDA device in tiles on tensor cores)
 * On a GPU (scripts/gpu_check.sh) the kernels' split with and without dropout says where the
 * fused kernels' time goes. */
#include "common.h"
#include "redco.h"
#include "redco/device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char *NAME = "bench_attention";

static const rc_rng KEY = {7, 0};   /* the dropout mask's key, both graphs */

/* the unfused graph (as rci_nn_attention builds it today, no kv heads to repeat) */
static rc_tensor *unfused(rc_graph *g, rc_tensor *q, rc_tensor *k, rc_tensor *v, double scale, double drop)
{
    rc_tensor *p = rc_softmax_ext(g, rc_matmul(g, q, k, 0, 1), NULL, scale, 1);
    if (drop > 0)
        p = rc_dropout(g, p, drop, KEY);
    return rc_matmul(g, p, v, 0, 0);
}

/* ms_OP of every op whose kernels took over a tenth of the run, from a timed run */
static void kernel_split(json_t *o, rc_plan *p)
{
    rc_error err = {0};
    rc_plan_set_timing(p, 1);
    if (rc_plan_run(p, &err))
        bench_fail(NAME, "rc_plan_run (timed kernels)", err.msg);
    rc_plan_stats st = rc_plan_get_stats(p);
    double all = 0;
    for (int op = 0; op < RC_OP_COUNT; op++)
        all += st.op_s[op];
    for (int op = 0; op < RC_OP_COUNT; op++)
        if (st.op_s[op] > 0.1 * all) {
            char key[64];
            snprintf(key, sizeof key, "ms_%s", rc_op_name((rc_op)op));
            bench_set_num(o, key, st.op_s[op] * 1e3);
        }
    rc_plan_set_timing(p, 0);
}

/* one line: y and the gradients of sum(y * r) with respect to q, k, v */
static void bench_one(rc_backend *be, int B, int H, int T, int D, int fused, int reps, double drop, rc_dtype t,
                      const void *vals)
{
    rc_graph *g = rc_graph_new();
    if (!g)
        bench_fail(NAME, "rc_graph_new", "out of memory");
    int64_t s[4] = {B, H, T, D};
    rc_tensor *x[4] = {rc_input(g, "q", t, 4, s), rc_input(g, "k", t, 4, s), rc_input(g, "v", t, 4, s),
                       rc_input(g, "r", t, 4, s)};
    double scale = 1 / sqrt((double)D);
    rc_tensor *y = fused ? rc_attention(g, x[0], x[1], x[2], NULL, scale, 1, drop, KEY)
                         : unfused(g, x[0], x[1], x[2], scale, drop);
    rc_tensor *outs[4];
    rc_backward(g, rc_sum_all(g, rc_mul(g, y, x[3])), x, 3, outs + 1);
    outs[0] = y;
    if (rc_graph_error(g))
        bench_fail(NAME, "graph", rc_graph_error(g));
    rc_error err = {0};
    rc_plan *p = rc_plan_new_on(be, g, outs, 4, &err);
    if (!p)
        bench_fail(NAME, "rc_plan_new_on", err.msg);
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
    bench_set_num(o, "dropout", drop);
    bench_set_str(o, "dtype", rc_dtype_name(t));
    bench_set_int(o, "tiled", rc_get_tiled_attention());
    bench_set_str(o, "device", rc_backend_name(be));
    bench_set_int(o, "threads", rc_get_threads());
    bench_set_num(o, "fwd_bwd_ms", secs * 1e3);
    bench_set_num(o, "arena_mb", (double)st.peak_bytes / 1e6);
    kernel_split(o, p);
    if (bench_print(o))
        bench_fail(NAME, "print", "cannot write");
    rc_plan_free(p);
    rc_graph_free(g);
}

/* "B:T:REPS,..." into cases (at most max); their count, 0 when malformed */
static int parse_cases(const char *s, int (*cases)[3], int max)
{
    int n = 0;
    while (s && *s && n < max) {
        int used = 0;
        if (sscanf(s, "%d:%d:%d%n", &cases[n][0], &cases[n][1], &cases[n][2], &used) != 3 || cases[n][0] < 1 ||
            cases[n][1] < 1 || cases[n][2] < 1)
            return 0;
        n++;
        s += used;
        if (*s == ',')
            s++;
        else if (*s)
            return 0;
    }
    return s && *s ? 0 : n;
}

int main(int argc, char **argv)
{
    const char *device = bench_take_flag(&argc, argv, "--device"), *dropout = bench_take_flag(&argc, argv, "--dropout");
    const char *spec = bench_take_flag(&argc, argv, "--cases"), *dtype = bench_take_flag(&argc, argv, "--dtype");
    rc_set_tiled_attention(bench_take_switch(&argc, argv, "--tiled"));
    /* batch chosen so that a whole run takes about half a minute on 2 cores */
    int cases[8][3] = {{8, 256, 3}, {2, 1024, 3}, {1, 2048, 2}}; /* B, T, reps */
    int ncases = spec ? parse_cases(spec, cases, 8) : 3;
    double drop = dropout ? atof(dropout) : 0;
    rc_dtype t = bench_float_dtype(dtype);
    if (argc > 1 || !ncases || !(drop >= 0 && drop < 1) || t == RC_DTYPE_COUNT)
        bench_fail(NAME, "usage", "bench_attention [--device D] [--dropout P in [0, 1)] [--cases B:T:REPS,...] "
                                  "[--dtype f32|bf16|f16] [--tiled]");
    rc_error err = {0};
    rc_backend *be = rc_device_open(device ? device : "cpu", 0, &err);
    if (!be)
        bench_fail(NAME, "rc_device_open", err.msg);
    enum { H = 12, D = 64 };
    int64_t most = 0;
    for (int c = 0; c < ncases; c++) {
        int64_t n = (int64_t)cases[c][0] * H * cases[c][1] * D;
        most = n > most ? n : most;
    }
    float *vals = malloc((size_t)most * sizeof *vals);
    void *stored = malloc((size_t)most * rc_dtype_size(t));
    if (!vals || !stored)
        bench_fail(NAME, "malloc", "out of memory");
    rc_rng r = rc_rng_new(7);
    for (int64_t i = 0; i < most; i++)
        vals[i] = (float)(2 * rc_rng_uniform(&r) - 1);
    rc_convert(stored, t, vals, RC_F32, most);
    for (int c = 0; c < ncases; c++)
        for (int fused = 0; fused < 2; fused++)
            bench_one(be, cases[c][0], H, cases[c][1], D, fused, cases[c][2], drop, t, stored);
    free(vals);
    free(stored);
    return 0;
}
