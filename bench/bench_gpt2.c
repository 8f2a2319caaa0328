/* bench_gpt2.c - one forward+backward step of a GPT-2 124M shaped transformer
 * (B=4, T=64, fp32): time, achieved GFLOP/s, memory, and the executor's own overhead.
 * One JSON line per figure. */
#include "nn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 2 M N K over the matmuls of the graph */
static double matmul_flop(const rc_graph *g)
{
    double f = 0;
    for (int i = 0; i < rc_graph_size(g); i++) {
        const rc_tensor *t = rc_graph_node(g, i);
        if (t->op != RC_OP_MATMUL)
            continue;
        const rc_tensor *a = t->src[0];
        int64_t k = t->iparam[0] ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
        f += 2.0 * (double)rc_tensor_numel(t) * (double)k;
    }
    return f;
}

int main(int argc, char **argv)
{
    /* bench_gpt2 [REPS [PRESET B T]]: GPT-2 124M at B=4, T=64 unless another preset is named */
    int reps = argc > 1 ? atoi(argv[1]) : 3;
    int B = argc > 4 ? atoi(argv[3]) : 4, T = argc > 4 ? atoi(argv[4]) : 64;
    rc_model_config cfg = nn_gpt2_config(50257, 1024, 12, 12, 768);
    rc_error cerr = {0};
    if (argc > 4 && rc_config_preset(argv[2], &cfg, &cerr)) {
        fprintf(stderr, "bench_gpt2: %s\n", cerr.msg);
        return 1;
    }
    rc_set_threads(0);
    nn_weights w = {0};
    rc_error err = {0};
    if (nn_model_weights(&cfg, &w, &err) || nn_weights_alloc(&w))
        return 1;
    nn_model_init(&cfg, &w, 1);

    rc_graph *g = rc_graph_new();
    rc_tensor **p = malloc((size_t)w.n * sizeof *p), **outs = malloc((size_t)(w.n + 1) * sizeof *outs);
    nn_model_leaves(g, &w, p);
    rc_tensor *ids = rc_input(g, "ids", RC_I32, 2, (int64_t[]){B, T});
    rc_tensor *tg = rc_input(g, "targets", RC_I32, 2, (int64_t[]){B, T});
    nn_inputs in = {.ids = ids};
    outs[0] = rc_cross_entropy(g, nn_model_logits(g, &cfg, &w, p, &in), tg, -100);
    rc_backward(g, outs[0], p, w.n, outs + 1);
    if (rc_graph_error(g)) {
        fprintf(stderr, "bench_gpt2: %s\n", rc_graph_error(g));
        return 1;
    }
    int32_t *xb = malloc(sizeof(int32_t) * B * T), *yb = malloc(sizeof(int32_t) * B * T);
    rc_rng r = rc_rng_new(2);
    for (int i = 0; i < B * T; i++) {
        xb[i] = (int32_t)(rc_rng_next_u64(&r) % (uint64_t)cfg.vocab_size);
        yb[i] = (int32_t)(rc_rng_next_u64(&r) % (uint64_t)cfg.vocab_size);
    }
    rc_tensor_bind(ids, xb);
    rc_tensor_bind(tg, yb);
    double t0 = now_s();
    rc_plan *plan = rc_plan_new(g, outs, w.n + 1, &err);
    double plan_s = now_s() - t0;
    if (!plan || rc_plan_run(plan, &err)) { /* the first run warms caches and pages */
        fprintf(stderr, "bench_gpt2: %s\n", err.msg);
        return 1;
    }
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        t0 = now_s();
        rc_plan_run(plan, &err);
        double dt = now_s() - t0;
        best = dt < best ? dt : best;
    }
    /* the same step with per-kernel timing, for the breakdown */
    rc_plan_set_timing(plan, 1);
    rc_plan_run(plan, &err);
    rc_plan_stats st = rc_plan_get_stats(plan);

    /* AdamW over all parameters, as a trainer would run after the step */
    float *m = calloc((size_t)w.numel, sizeof *m), *v = calloc((size_t)w.numel, sizeof *v);
    rc_adam opt = {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0, .step = 1};
    double adam_s = 1e30;
    for (int r = 0; r < 2; r++) { /* the first pass also faults in the moments' pages */
        t0 = now_s();
        for (int i = 0; i < w.n; i++) {
            int64_t o = w.p[i].offset;
            rc_adamw_update(w.data + o, rc_tensor_data(outs[1 + i]), m + o, v + o, w.p[i].numel, &opt);
        }
        double dt = now_s() - t0;
        adam_s = dt < adam_s ? dt : adam_s;
    }

    double flop = matmul_flop(g);
    double movement = st.op_s[RC_OP_PERMUTE] + st.op_s[RC_OP_SLICE] + st.op_s[RC_OP_PAD] +
                      st.op_s[RC_OP_CONCAT] + st.op_s[RC_OP_EXPAND] + st.op_s[RC_OP_CAST];
    double bookkeeping = st.last_run_s - st.last_kernel_s;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"bench\": \"gpt2_124m_fwd_bwd\", \"batch\": %d, \"seq\": %d, \"threads\": %d, \"params\": %lld, "
           "\"step_s\": %.4f, \"matmul_gflop\": %.1f, \"gflops\": %.1f, \"nodes\": %lld, \"plan_s\": %.3f}\n",
           B, T, rc_get_threads(), (long long)w.numel, best, flop * 1e-9, flop / best * 1e-9,
           (long long)st.nodes, plan_s);
    printf("{\"bench\": \"gpt2_124m_memory\", \"arena_peak_bytes\": %zu, \"arena_naive_bytes\": %zu, "
           "\"param_bytes\": %lld, \"max_rss_bytes\": %lld}\n",
           st.peak_bytes, st.naive_bytes, (long long)w.numel * 4, (long long)ru.ru_maxrss * 1024);
    printf("{\"bench\": \"gpt2_124m_breakdown\", \"run_s\": %.4f, \"matmul_s\": %.4f, \"other_kernels_s\": %.4f, "
           "\"data_movement_s\": %.4f, \"executor_bookkeeping_s\": %.6f, \"overhead_pct\": %.2f}\n",
           st.last_run_s, st.op_s[RC_OP_MATMUL], st.last_kernel_s - st.op_s[RC_OP_MATMUL] - movement,
           movement, bookkeeping, 100.0 * (bookkeeping + movement) / st.last_run_s);
    printf("{\"bench\": \"gpt2_124m_adamw\", \"update_s\": %.4f, \"train_step_s\": %.4f}\n", adam_s, best + adam_s);
    for (int op = 0; op < RC_OP_COUNT; op++)
        if (st.op_count[op])
            fprintf(stderr, "  %-16s %4lld kernels %8.2f ms\n", rc_op_name((rc_op)op),
                    (long long)st.op_count[op], 1e3 * st.op_s[op]);
    rc_plan_free(plan);
    rc_graph_free(g);
    nn_weights_free(&w);
    free(p), free(outs), free(m), free(v), free(xb), free(yb);
    return 0;
}
