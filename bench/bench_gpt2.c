/* bench_gpt2.c - one forward+backward step of a GPT-2 124M shaped transformer
 * (B=4, T=64, fp32): time, tokens/s, achieved GFLOP/s against the device's own GEMM rate
 * on the step's matmul shapes (measured in the same run), the host transfers of a step,
 * memory, the executor's own overhead, and the AdamW update (on the CPU, against the
 * machine's memory bandwidth). One JSON line per figure.
 *   bench_gpt2 [--device D] [--remat N] [--dropout] [--shapes FILE] [--gemm-bf16] [--bf16] [REPS [PRESET B T]]
 *       GPT-2 124M at B=4, T=64 unless a preset is named; D: cpu (default), opencl:N, cuda:N;
 *       --dropout records the step as the trainer does, a training graph with GPT-2's dropout
 *       of 0.1 (embeddings, probabilities, residual branches; field "dropout"), else none;
 *       --remat N recomputes every N blocks in the backward pass (the arena shows the saving);
 *       --shapes FILE writes the step's matmul shapes there, one JSON line per distinct
 *       product ({"a": [...], "b": [...], "ta": 0|1, "tb": 0|1, "count": n}: what
 *       scripts/torch_gpt2_step.py times with cuBLAS); --gemm-bf16 also times the step's
 *       matmuls alone in bf16 (gemm_gflops_same_shapes_bf16); --bf16 also runs the same step
 *       with bf16 weights and activations after the f32 one (line gpt2_124m_bf16_vs_f32: both
 *       steps, their GEMM rates on the step's shapes, the ratios, and on the CPU the same bf16
 *       step and GEMMs on the widening path, bf16 products widened to f32 for sgemm; and the
 *       bf16 step's kernels: bf16_kernel_ms, bf16_top_ops); gpt2_124m_breakdown's top_ops: the
 *       f32 step's twelve ops with the most kernel time
 *   bench_gpt2 [--device D] --attention-compare [--attention-seqs T:B,...] [REPS [PRESET]]
 *       only the fused against unfused attention lines (gpt2_124m_attention_fused_vs_unfused,
 *       one per T): the f32 step recorded with attention as product, softmax, product and
 *       then as the fused op (rc_set_fused_attention off, on), best of REPS (default 2)
 *       after one warm-up each, and the planned arena's activation peak of each;
 *       default 256:4,1024:1,2048:1 (T:B; B left out: 4 up to T = 256, else 1), GPT-2 124M
 *       unless a preset is named, its position table lengthened to the longest T
 * Any failing call prints one line naming it and exits 1. */
#include "common.h"
#include "internal.h"
#include "nn.h"
#include "redco/device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static const char *NAME = "bench_gpt2";

/* --dropout: the steps recorded as training graphs (rc_graph_set_training), the config's
 * dropout set to GPT-2's 0.1 */
static int train_dropout;

/* the CPU's bf16 products on oneDNN (src/backend/cpu/cpu.h): turned on or off (< 0 asks);
 * the kernel a product of these dims runs on, NULL on the widening path */
int rci_cpu_dnnl_use(int on);
const char *rci_cpu_dnnl_kernel(rc_dtype t, const rci_matmul_dims *d);

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

static void *alloc_or_fail(size_t bytes, const char *what)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p)
        bench_fail(NAME, what, "out of memory");
    return p;
}

static rc_backend *be;            /* the device the step runs on */

static rc_buffer *buffer_or_fail(size_t bytes, const char *what)
{
    rc_error err = {0};
    rc_buffer *b = rc_buffer_new(be, bytes, &err);
    if (!b)
        bench_fail(NAME, what, err.msg);
    return b;
}

/* seconds of one AdamW update over all parameters, held flat as a trainer holds them
 * (parameters, gradient, moments: one buffer each) */
static double time_adamw(rci_nn_weights *w, rc_buffer *grad, rc_buffer *m, rc_buffer *v, int64_t step)
{
    rc_adam opt = {.lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1, .step = step};
    rc_error err = {0};
    double t0 = bench_now();
    if (rc_adamw_update(w->buf, grad, m, v, 0, w->numel, &opt, &err) || rc_backend_wait(be, &err))
        bench_fail(NAME, "rc_adamw_update", err.msg);
    return bench_now() - t0;
}

/* seconds of the step's matmuls alone on the device: each MATMUL node of g copied, with
 * inputs of its operands' shapes, into one graph (best of reps runs) */
static double gemm_seconds(const rc_graph *g, rc_dtype dtype, int reps)
{
    rc_graph *mg = rc_graph_new();
    rc_tensor **outs = alloc_or_fail((size_t)rc_graph_size(g) * sizeof *outs, "matmul outputs");
    int n = 0;
    for (int i = 0; i < rc_graph_size(g); i++) {
        const rc_tensor *t = rc_graph_node(g, i);
        if (t->op != RC_OP_MATMUL)
            continue;
        const rc_tensor *a = t->src[0], *b = t->src[1];
        outs[n++] = rc_matmul(mg, rc_input(mg, "a", dtype, a->ndim, a->shape),
                              rc_input(mg, "b", dtype, b->ndim, b->shape), t->iparam[0], t->iparam[1]);
    }
    rc_error err = {0};
    rc_plan *plan = rc_graph_error(mg) ? NULL : rc_plan_new_on(be, mg, outs, n, &err);
    if (!plan)
        bench_fail(NAME, "the matmuls' plan", rc_graph_error(mg) ? rc_graph_error(mg) : err.msg);
    rc_buffer **bufs = alloc_or_fail((size_t)rc_graph_size(mg) * sizeof *bufs, "operands");
    for (int i = 0; i < rc_graph_size(mg); i++) { /* inputs: zeros in device buffers */
        rc_tensor *x = rc_graph_node(mg, i);
        bufs[i] = x->op == RC_OP_LEAF ? buffer_or_fail(rc_tensor_nbytes(x), "a matmul operand") : NULL;
        if (bufs[i] && rc_plan_bind(plan, x, bufs[i], 0, &err))
            bench_fail(NAME, "rc_plan_bind", err.msg);
    }
    double best = 1e30;
    for (int r = 0; r <= reps; r++) { /* the first run warms up */
        double t0 = bench_now();
        if (rc_plan_run(plan, &err))
            bench_fail(NAME, "the matmuls' run", err.msg);
        double dt = bench_now() - t0;
        best = r && dt < best ? dt : best;
    }
    for (int i = 0; i < rc_graph_size(mg); i++)
        rc_buffer_free(bufs[i]);
    free(bufs);
    rc_plan_free(plan);
    rc_graph_free(mg);
    free(outs);
    return best;
}

static int same_shape(const rc_tensor *a, const rc_tensor *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}

/* the step's matmul shapes into path: one JSON line per distinct (a, b, ta, tb) with its
 * count of nodes */
static void write_shapes(const rc_graph *g, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        bench_fail(NAME, "--shapes", "cannot open the file for writing");
    for (int i = 0; i < rc_graph_size(g); i++) {
        const rc_tensor *t = rc_graph_node(g, i), *seen = NULL;
        if (t->op != RC_OP_MATMUL)
            continue;
        int count = 0;
        for (int j = 0; j < rc_graph_size(g) && !seen; j++) { /* counted at its first node */
            const rc_tensor *u = rc_graph_node(g, j);
            if (u->op != RC_OP_MATMUL || u->iparam[0] != t->iparam[0] || u->iparam[1] != t->iparam[1] ||
                !same_shape(u->src[0], t->src[0]) || !same_shape(u->src[1], t->src[1]))
                continue;
            if (j < i)
                seen = u;
            count++;
        }
        if (seen)
            continue;
        for (int k = 0; k < 2; k++) {
            const rc_tensor *x = t->src[k];
            fprintf(f, k ? "], \"b\": [" : "{\"a\": [");
            for (int d = 0; d < x->ndim; d++)
                fprintf(f, d ? ", %lld" : "%lld", (long long)x->shape[d]);
        }
        fprintf(f, "], \"ta\": %d, \"tb\": %d, \"count\": %d}\n", (int)t->iparam[0], (int)t->iparam[1], count);
    }
    if (fclose(f))
        bench_fail(NAME, "--shapes", "writing the file failed");
}

/* best seconds of reps runs (after one warm-up) of the step's graph, recorded with w's
 * dtype; the graph (for its matmuls) in *gout, the plan's figures in *stats (when not
 * NULL), its plan freed */
static double step_seconds(const rc_model_config *cfg, const rci_nn_weights *w, int B, int T, int reps,
                           const int32_t *xb, const int32_t *yb, rc_graph **gout, rc_plan_stats *stats)
{
    rc_error err = {0};
    rc_graph *g = rc_graph_new();
    rc_graph_set_training(g, train_dropout);
    rc_tensor **p = alloc_or_fail((size_t)w->n * sizeof *p, "parameter leaves");
    rc_tensor **outs = alloc_or_fail((size_t)(w->n + 1) * sizeof *outs, "outputs");
    if (!g || rci_nn_model_leaves(g, w, p))
        bench_fail(NAME, "rci_nn_model_leaves", g ? rc_graph_error(g) : "out of memory");
    rc_tensor *ids = rc_input(g, "ids", RC_I32, 2, (int64_t[]){B, T});
    rc_tensor *tg = rc_input(g, "targets", RC_I32, 2, (int64_t[]){B, T});
    rci_nn_inputs in = {.ids = ids};
    outs[0] = rc_cross_entropy(g, rci_nn_model_logits(g, cfg, w, p, &in), tg, -100);
    if (!rc_graph_error(g))
        rc_backward(g, outs[0], p, w->n, outs + 1);
    if (rc_graph_error(g))
        bench_fail(NAME, "recording the step", rc_graph_error(g));
    rc_plan *plan = rc_plan_new_on(be, g, outs, w->n + 1, &err);
    if (!plan || rc_plan_set_input(plan, ids, xb, &err) || rc_plan_set_input(plan, tg, yb, &err))
        bench_fail(NAME, "the step's plan", err.msg);
    double best = 1e30;
    for (int r = 0; r <= reps; r++) { /* the first run warms up */
        double t0 = bench_now();
        if (rc_plan_run(plan, &err))
            bench_fail(NAME, "rc_plan_run", err.msg);
        double dt = bench_now() - t0;
        best = r && dt < best ? dt : best;
    }
    if (stats) { /* one more run with every kernel timed, for the breakdown */
        rc_plan_set_timing(plan, 1);
        if (rc_plan_run(plan, &err))
            bench_fail(NAME, "rc_plan_run (timed kernels)", err.msg);
        *stats = rc_plan_get_stats(plan);
    }
    rc_plan_free(plan);
    free(p), free(outs);
    *gout = g;
    return best;
}

/* the kernel the CPU runs bf16 products of g's first matmul on: oneDNN's name, or
 * "widen+sgemm" */
static const char *bf16_kernel(const rc_graph *g)
{
    for (int i = 0; i < rc_graph_size(g); i++) {
        const rc_tensor *t = rc_graph_node(g, i);
        if (t->op != RC_OP_MATMUL)
            continue;
        rci_matmul_dims d = rci_matmul_dims_of(t);
        const char *k = rci_cpu_dnnl_kernel(RC_BF16, &d);
        return k ? k : "widen+sgemm";
    }
    return "none";
}

/* --bf16: the step again with w in bf16, against the f32 figures measured before in this
 * run (f32_s, f32_gemm_s); on the CPU also with the oneDNN path off */
static void bf16_vs_f32(const rc_model_config *cfg, rci_nn_weights *w, int B, int T, int reps, const int32_t *xb,
                        const int32_t *yb, double flop, double f32_s, double f32_gemm_s)
{
    rc_error err = {0};
    int on_cpu = be == rc_device_open("cpu", 0, NULL);
    if (rci_nn_weights_convert(w, RC_BF16, &err))
        bench_fail(NAME, "rci_nn_weights_convert", err.msg);
    rc_graph *g;
    rc_plan_stats st;
    double bf16_s = step_seconds(cfg, w, B, T, reps, xb, yb, &g, &st);
    char top[512];
    bench_top_ops(st.op_s, 1e3, 12, top, sizeof top);
    double bf16_gemm_s = gemm_seconds(g, RC_BF16, reps);
    const char *kernel = on_cpu ? bf16_kernel(g) : "device";
    double widen_s = NAN, widen_gemm_s = NAN;
    if (on_cpu && rci_cpu_dnnl_use(-1) && strcmp(kernel, "widen+sgemm")) {
        rc_graph *g2;
        rci_cpu_dnnl_use(0);
        widen_s = step_seconds(cfg, w, B, T, reps, xb, yb, &g2, NULL);
        widen_gemm_s = gemm_seconds(g2, RC_BF16, reps);
        rci_cpu_dnnl_use(1);
        rc_graph_free(g2);
    }
    json_t *o = bench_line("gpt2_124m_bf16_vs_f32");
    bench_set_str(o, "device", rc_backend_name(be));
    bench_set_int(o, "batch", B);
    bench_set_int(o, "seq", T);
    bench_set_int(o, "threads", rc_get_threads());
    bench_set_str(o, "bf16_matmul_kernel", kernel);
    rc_cpu_info cpu;
    rc_cpu_device_info(&cpu);
    bench_set_str(o, "f32_matmul_library", cpu.f32_products);
    bench_set_num(o, "f32_step_s", f32_s);
    bench_set_num(o, "bf16_step_s", bf16_s);
    bench_set_num(o, "bf16_speedup", f32_s / bf16_s); /* the goal: >= 1.6 with AVX512_BF16 */
    bench_set_num(o, "f32_gemm_gflops", flop / f32_gemm_s * 1e-9);
    bench_set_num(o, "bf16_gemm_gflops", flop / bf16_gemm_s * 1e-9);
    bench_set_num(o, "bf16_gemm_speedup", f32_gemm_s / bf16_gemm_s);
    /* the bf16 step's kernels, each waited for: their sum and the twelve ops with the most
     * time ("op ms, ...") */
    bench_set_num(o, "bf16_kernel_ms", 1e3 * st.last_kernel_s);
    bench_set_str(o, "bf16_top_ops", top);
    /* the same bf16 step with products widened to f32 for sgemm (the path before oneDNN;
     * null where that is the only path) */
    bench_set_num(o, "bf16_widen_step_s", widen_s);
    bench_set_num(o, "bf16_widen_gemm_gflops", flop / widen_gemm_s * 1e-9);
    if (bench_print(o))
        bench_fail(NAME, "writing a JSON line", "jansson or stdout failed");
    rc_graph_free(g);
}

/* --attention-compare: the sequence lengths and batches it runs, "T:B,..." (B left out:
 * 4 up to T = 256, else 1) */
enum { MAX_SEQS = 8 };
typedef struct {
    int T, B;
} seq_batch;

static int parse_seqs(const char *list, seq_batch *sb)
{
    char copy[256];
    int n = 0;
    snprintf(copy, sizeof copy, "%s", list);
    for (char *t = strtok(copy, ","); t; t = strtok(NULL, ",")) {
        char *colon = strchr(t, ':');
        int T = atoi(t), B = colon ? atoi(colon + 1) : T <= 256 ? 4 : 1;
        if (n == MAX_SEQS || T < 1 || B < 1)
            bench_fail(NAME, "--attention-seqs", "at most 8 entries T or T:B with T, B >= 1");
        sb[n++] = (seq_batch){T, B};
    }
    if (!n)
        bench_fail(NAME, "--attention-seqs", "no entry");
    return n;
}

/* n ids below vocab, for the batch and the targets */
static void random_ids(int32_t *xb, int32_t *yb, int n, int vocab)
{
    rc_rng r = rc_rng_new(2);
    for (int i = 0; i < n; i++) {
        xb[i] = (int32_t)(rc_rng_next_u64(&r) % (uint64_t)vocab);
        yb[i] = (int32_t)(rc_rng_next_u64(&r) % (uint64_t)vocab);
    }
}

static int count_op(const rc_graph *g, rc_op op)
{
    int n = 0;
    for (int i = 0; i < rc_graph_size(g); i++)
        n += rc_graph_node(g, i)->op == op;
    return n;
}

/* --attention-compare: for each (T, B), the step with attention as product, softmax,
 * product (unfused) and then as the fused op: best step time and the planned arena's
 * activation peak (the arena less the gradients, as gpt2_124m_memory reports it) */
static void attention_compare(const rc_model_config *cfg, const rci_nn_weights *w, const seq_batch *sb, int n,
                              int reps, const char *model)
{
    for (int i = 0; i < n; i++) {
        int B = sb[i].B, T = sb[i].T;
        int32_t *xb = alloc_or_fail(sizeof(int32_t) * B * T, "batch");
        int32_t *yb = alloc_or_fail(sizeof(int32_t) * B * T, "batch");
        random_ids(xb, yb, B * T, cfg->vocab_size);
        double step_s[2], act_mb[2];
        for (int on = 0; on < 2; on++) {
            rc_graph *g;
            rc_plan_stats st;
            rc_set_fused_attention(on);
            step_s[on] = step_seconds(cfg, w, B, T, reps, xb, yb, &g, &st);
            if ((count_op(g, RC_OP_ATTENTION) > 0) != on)
                bench_fail(NAME, "--attention-compare", "the switch did not change the recorded attention");
            rc_graph_free(g);
            double grads = (double)w->numel * (double)rc_dtype_size(w->dtype);
            act_mb[on] = ((double)st.peak_bytes - grads) * 1e-6;
            fprintf(stderr, "  T=%d B=%d %s: step %.3f s, activations %.1f MB\n", T, B, on ? "fused" : "unfused",
                    step_s[on], act_mb[on]);
        }
        json_t *o = bench_line("gpt2_124m_attention_fused_vs_unfused");
        bench_set_str(o, "model", model);
        bench_set_str(o, "device", rc_backend_name(be));
        bench_set_int(o, "T", T);
        bench_set_int(o, "B", B);
        bench_set_int(o, "threads", rc_get_threads());
        bench_set_int(o, "reps", reps);
        bench_set_num(o, "unfused_step_s", step_s[0]);
        bench_set_num(o, "fused_step_s", step_s[1]);
        bench_set_num(o, "speedup", step_s[0] / step_s[1]);          /* > 1: fused is faster */
        bench_set_num(o, "unfused_activation_peak_mb", act_mb[0]);  /* 1 MB = 1e6 bytes */
        bench_set_num(o, "fused_activation_peak_mb", act_mb[1]);
        bench_set_num(o, "peak_ratio", act_mb[1] / act_mb[0]);      /* < 1: fused needs less */
        if (bench_print(o))
            bench_fail(NAME, "writing a JSON line", "jansson or stdout failed");
        free(xb), free(yb);
    }
}

/* --attention-compare [--attention-seqs LIST] [REPS [PRESET]]: only the fused against
 * unfused lines; the position table as long as the longest sequence asks */
static int compare_main(int argc, char **argv, const char *seqs)
{
    rc_error err = {0};
    seq_batch sb[MAX_SEQS];
    int n = parse_seqs(seqs ? seqs : "256:4,1024:1,2048:1", sb);
    int reps = argc > 1 ? atoi(argv[1]) : 2;
    if (reps < 1)
        bench_fail(NAME, "arguments", "usage: bench_gpt2 --attention-compare [--attention-seqs T:B,...] [REPS [PRESET]]");
    rc_model_config cfg = rci_nn_gpt2_config(50257, 1024, 12, 12, 768);
    if (argc > 2 && rc_config_preset(argv[2], &cfg, &err))
        bench_fail(NAME, "rc_config_preset", err.msg);
    for (int i = 0; i < n; i++)
        cfg.max_positions = sb[i].T > cfg.max_positions ? sb[i].T : cfg.max_positions;
    rc_set_threads(0);
    rci_nn_weights w = {0};
    if (rci_nn_model_weights(&cfg, &w, &err) || rci_nn_weights_alloc(&w, be, &err) ||
        rci_nn_model_init(&cfg, &w, 1, &err))
        bench_fail(NAME, "the model's weights", err.msg);
    attention_compare(&cfg, &w, sb, n, reps, argc > 2 ? argv[2] : "gpt2_124m");
    rci_nn_weights_free(&w);
    return 0;
}

int main(int argc, char **argv)
{
    rc_error err = {0};
    const char *device = bench_take_flag(&argc, argv, "--device"), *remat = bench_take_flag(&argc, argv, "--remat");
    const char *shapes = bench_take_flag(&argc, argv, "--shapes"), *seqs = bench_take_flag(&argc, argv, "--attention-seqs");
    int gemm_bf16 = bench_take_switch(&argc, argv, "--gemm-bf16");
    int bf16 = bench_take_switch(&argc, argv, "--bf16");
    int compare = bench_take_switch(&argc, argv, "--attention-compare");
    train_dropout = bench_take_switch(&argc, argv, "--dropout");
    if (!(be = rc_device_open(device ? device : "cpu", 0, &err)))
        bench_fail(NAME, "rc_device_open", err.msg);
    if (compare)
        return compare_main(argc, argv, seqs);
    int reps = argc > 1 ? atoi(argv[1]) : 3;
    int B = argc > 4 ? atoi(argv[3]) : 4, T = argc > 4 ? atoi(argv[4]) : 64;
    if (reps < 1 || B < 1 || T < 1)
        bench_fail(NAME, "arguments", "usage: bench_gpt2 [--device D] [REPS [PRESET B T]] with REPS, B, T >= 1");
    rc_model_config cfg = rci_nn_gpt2_config(50257, 1024, 12, 12, 768);
    if (argc > 4 && rc_config_preset(argv[2], &cfg, &err))
        bench_fail(NAME, "rc_config_preset", err.msg);
    cfg.resid_dropout = cfg.embd_dropout = cfg.attn_dropout = train_dropout ? 0.1 : 0;
    rc_set_threads(0);
    rci_nn_weights w = {0};
    if (rci_nn_model_weights(&cfg, &w, &err))
        bench_fail(NAME, "rci_nn_model_weights", err.msg);
    if (rci_nn_weights_alloc(&w, be, &err))
        bench_fail(NAME, "rci_nn_weights_alloc", err.msg);
    if (rci_nn_model_init(&cfg, &w, 1, &err))
        bench_fail(NAME, "rci_nn_model_init", err.msg);

    rc_graph *g = rc_graph_new();
    if (!g)
        bench_fail(NAME, "rc_graph_new", "out of memory");
    rc_graph_set_remat(g, remat ? atoi(remat) : 0);
    rc_graph_set_training(g, train_dropout);
    rc_tensor **p = alloc_or_fail((size_t)w.n * sizeof *p, "parameter leaves");
    rc_tensor **outs = alloc_or_fail((size_t)(w.n + 1) * sizeof *outs, "outputs");
    if (rci_nn_model_leaves(g, &w, p))
        bench_fail(NAME, "rci_nn_model_leaves", rc_graph_error(g));
    rc_tensor *ids = rc_input(g, "ids", RC_I32, 2, (int64_t[]){B, T});
    rc_tensor *tg = rc_input(g, "targets", RC_I32, 2, (int64_t[]){B, T});
    rci_nn_inputs in = {.ids = ids};
    outs[0] = rc_cross_entropy(g, rci_nn_model_logits(g, &cfg, &w, p, &in), tg, -100);
    if (!rc_graph_error(g))
        rc_backward(g, outs[0], p, w.n, outs + 1);
    if (rc_graph_error(g))
        bench_fail(NAME, "recording the step", rc_graph_error(g));
    int32_t *xb = alloc_or_fail(sizeof(int32_t) * B * T, "batch");
    int32_t *yb = alloc_or_fail(sizeof(int32_t) * B * T, "batch");
    random_ids(xb, yb, B * T, cfg.vocab_size);
    double t0 = bench_now();
    rc_plan *plan = rc_plan_new_on(be, g, outs, w.n + 1, &err);
    double plan_s = bench_now() - t0;
    if (!plan)
        bench_fail(NAME, "rc_plan_new_on", err.msg);
    if (rc_plan_set_input(plan, ids, xb, &err) || rc_plan_set_input(plan, tg, yb, &err))
        bench_fail(NAME, "rc_plan_set_input", err.msg);
    if (rc_plan_run(plan, &err)) /* the first run warms caches and pages */
        bench_fail(NAME, "rc_plan_run (warm-up)", err.msg);
    /* a step as a trainer runs it: the batch copied in, the run, the loss copied out */
    double best = 1e30, transfer = 1e30;
    for (int i = 0; i < reps; i++) {
        float loss;
        t0 = bench_now();
        if (rc_plan_set_input(plan, ids, xb, &err) || rc_plan_set_input(plan, tg, yb, &err))
            bench_fail(NAME, "rc_plan_set_input", err.msg);
        double t1 = bench_now();
        if (rc_plan_run(plan, &err))
            bench_fail(NAME, "rc_plan_run", err.msg);
        double t2 = bench_now();
        if (rc_plan_read(plan, outs[0], &loss, &err))
            bench_fail(NAME, "rc_plan_read", err.msg);
        double t3 = bench_now();
        best = t2 - t1 < best ? t2 - t1 : best;
        transfer = (t1 - t0) + (t3 - t2) < transfer ? (t1 - t0) + (t3 - t2) : transfer;
    }
    double gemm_s = gemm_seconds(g, RC_F32, reps);
    double gemm_bf16_s = gemm_bf16 ? gemm_seconds(g, RC_BF16, reps) : NAN;
    if (shapes)
        write_shapes(g, shapes);
    /* the same step with per-kernel timing, for the breakdown */
    rc_plan_set_timing(plan, 1);
    if (rc_plan_run(plan, &err))
        bench_fail(NAME, "rc_plan_run (timed kernels)", err.msg);
    rc_plan_stats st = rc_plan_get_stats(plan);

    /* AdamW over all parameters: reads w, g, m, v and writes w, m, v (7 x 4 bytes per
     * parameter); the first pass also faults in the moments' pages */
    size_t bytes = (size_t)w.numel * sizeof(float);
    rc_buffer *m = buffer_or_fail(bytes, "first moments"), *v = buffer_or_fail(bytes, "second moments");
    rc_buffer *grad = buffer_or_fail(bytes, "gradient");
    for (int i = 0; i < w.n; i++) {
        rc_buffer *from;
        size_t at;
        if (rc_plan_memory(plan, outs[1 + i], &from, &at) ||
            rc_buffer_copy(grad, rci_nn_weights_offset(&w, i), from, at, (size_t)w.p[i].numel * sizeof(float), &err))
            bench_fail(NAME, "copying the gradients", err.msg);
    }
    /* against a streaming copy in the same run at the same threads: arrays as large as
     * one of the update's (at least 256 MB), and as many passes as make about the update's
     * bytes, so both take about as long; update and copy alternate, best of 5 each, so
     * both see the same machine */
    bench_copy copy;
    int64_t copy_n = w.numel > (1 << 26) ? w.numel : (1 << 26);
    int passes = (int)((28.0 * (double)w.numel) / (8.0 * (double)copy_n) + 0.5);
    int on_cpu = be == rc_device_open("cpu", 0, NULL); /* the streaming copy measures host memory */
    passes = passes < 1 ? 1 : passes;
    if (on_cpu && bench_copy_init(&copy, copy_n))
        bench_fail(NAME, "streaming copy", "cannot allocate its arrays");
    time_adamw(&w, grad, m, v, 1);
    if (on_cpu)
        bench_copy_run(&copy, passes);
    double adam_s = 1e30, copy_s = 1e30;
    for (int i = 0; i < 5; i++) {
        double a = time_adamw(&w, grad, m, v, 2 + i), c = on_cpu ? bench_copy_run(&copy, passes) : NAN;
        adam_s = a < adam_s ? a : adam_s;
        copy_s = c < copy_s ? c : copy_s;
    }
    double copy_gbs = on_cpu ? bench_copy_gbs(&copy, passes, copy_s) : NAN; /* null on a device */
    if (on_cpu)
        bench_copy_free(&copy);
    double adam_gbs = 7.0 * 4.0 * (double)w.numel / adam_s * 1e-9;

    double flop = matmul_flop(g);
    double movement = st.op_s[RC_OP_PERMUTE] + st.op_s[RC_OP_SLICE] + st.op_s[RC_OP_PAD] +
                      st.op_s[RC_OP_CONCAT] + st.op_s[RC_OP_EXPAND] + st.op_s[RC_OP_CAST];
    double bookkeeping = st.last_run_s - st.last_kernel_s;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru))
        bench_fail(NAME, "getrusage", "no resource usage");
    const char *model = argc > 4 ? argv[2] : "gpt2_124m";

    json_t *o = bench_line("gpt2_124m_fwd_bwd");
    bench_set_str(o, "model", model);
    bench_set_str(o, "device", rc_backend_name(be));
    bench_set_int(o, "remat", rc_graph_remat(g));
    bench_set_num(o, "dropout", cfg.resid_dropout);
    bench_set_int(o, "batch", B);
    bench_set_int(o, "seq", T);
    bench_set_int(o, "threads", rc_get_threads());
    bench_set_int(o, "params", (long long)w.numel);
    bench_set_num(o, "step_s", best);
    bench_set_num(o, "matmul_gflop", flop * 1e-9);
    bench_set_num(o, "gflops", flop / best * 1e-9);
    bench_set_num(o, "tokens_per_s", (double)B * T / best);
    /* the device's GEMM rate on the step's own matmul shapes, in this run: how close the
     * step comes to what its matmuls alone reach */
    bench_set_num(o, "gemm_gflops_same_shapes", flop / gemm_s * 1e-9);
    bench_set_num(o, "step_vs_gemm_rate", gemm_s / best);
    bench_set_num(o, "gemm_gflops_same_shapes_bf16", flop / gemm_bf16_s * 1e-9); /* null without --gemm-bf16 */
    bench_set_num(o, "host_transfer_s", transfer);
    bench_set_int(o, "nodes", (long long)st.nodes);
    bench_set_num(o, "plan_s", plan_s);
    int bad = bench_print(o);

    o = bench_line("gpt2_124m_memory");
    bench_set_int(o, "arena_peak_bytes", (long long)st.peak_bytes);
    bench_set_int(o, "arena_naive_bytes", (long long)st.naive_bytes);
    /* the arena less the gradients it returns (as large as the parameters): activations and
     * temporaries at their peak, what recomputation (--remat) reduces */
    bench_set_int(o, "activation_peak_bytes", (long long)st.peak_bytes - (long long)w.numel * 4);
    bench_set_int(o, "param_bytes", (long long)w.numel * 4);
    bench_set_int(o, "max_rss_bytes", (long long)ru.ru_maxrss * 1024);
    bad |= bench_print(o);

    o = bench_line("gpt2_124m_breakdown");
    bench_set_num(o, "run_s", st.last_run_s);
    bench_set_num(o, "matmul_s", st.op_s[RC_OP_MATMUL]);
    bench_set_num(o, "other_kernels_s", st.last_kernel_s - st.op_s[RC_OP_MATMUL] - movement);
    bench_set_num(o, "data_movement_s", movement);
    bench_set_num(o, "executor_bookkeeping_s", bookkeeping);
    bench_set_num(o, "overhead_pct", 100.0 * (bookkeeping + movement) / st.last_run_s);
    char top[512];
    bench_top_ops(st.op_s, 1e3, 12, top, sizeof top);
    bench_set_str(o, "top_ops", top); /* the twelve ops with the most kernel time, "op ms, ..." */
    bad |= bench_print(o);

    /* bytes moved / time for both; copy_vs_update <= 1.5 is the goal */
    o = bench_line("gpt2_124m_adamw");
    bench_set_int(o, "threads", rc_get_threads());
    bench_set_num(o, "update_s", adam_s);
    bench_set_num(o, "update_gb", 7.0 * 4.0 * (double)w.numel * 1e-9);
    bench_set_num(o, "update_gbs", adam_gbs);
    bench_set_num(o, "copy_gbs", copy_gbs);
    bench_set_num(o, "copy_vs_update", copy_gbs / adam_gbs);
    bench_set_num(o, "train_step_s", best + adam_s);
    bad |= bench_print(o);
    if (bad)
        bench_fail(NAME, "writing a JSON line", "jansson or stdout failed");

    for (int op = 0; op < RC_OP_COUNT; op++)
        if (st.op_count[op])
            fprintf(stderr, "  %-16s %4lld kernels %8.2f ms\n", rc_op_name((rc_op)op),
                    (long long)st.op_count[op], 1e3 * st.op_s[op]);
    if (bf16)
        bf16_vs_f32(&cfg, &w, B, T, reps, xb, yb, flop, best, gemm_s);
    rc_plan_free(plan);
    rc_graph_free(g);
    rci_nn_weights_free(&w);
    free(p), free(outs), rc_buffer_free(m), rc_buffer_free(v), rc_buffer_free(grad), free(xb), free(yb);
    return 0;
}
