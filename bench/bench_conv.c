/* bench_conv.c - 2-D convolution (f32) through the executor, forward and both gradients,
 * next to cblas_sgemm called directly on the same GEMM shapes (one GEMM per image, as the
 * im2col kernels make), in the same run: the gap is the cost of im2col / col2im. Layers:
 * a ResNet 3x3 layer (N=8, C=O=64, 56x56, pad 1), a stride-2 3x3 layer and a 1x1 layer.
 * One JSON line per layer and pass; any failing call prints one line naming it and exits 1. */
#include "common.h"
#include "redco.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

static const char *NAME = "bench_conv";

typedef struct {
    const char *name;
    int64_t n, c, h, w, o, k;
    int stride, pad;
} layer;

enum { PASS_FWD, PASS_GRAD_INPUT, PASS_GRAD_WEIGHT };
static const char *pass_names[] = {"forward", "grad_input", "grad_weight"};

static void fill(float *x, int64_t n, rc_rng *r)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(rc_rng_uniform(r) - 0.5);
}

static int64_t out_size(const layer *l, int64_t n)
{
    return (n + 2 * l->pad - l->k) / l->stride + 1;
}

/* best of `reps` runs of one pass, in seconds */
static double time_executor(const layer *l, int pass, int reps, rc_rng *r)
{
    rc_graph *g = rc_graph_new();
    int64_t oh = out_size(l, l->h), ow = out_size(l, l->w);
    rc_conv2d_params q = {{l->stride, l->stride}, {l->pad, l->pad}, {1, 1}, 1};
    rc_tensor *x = rc_input(g, "x", RC_F32, 4, (int64_t[]){l->n, l->c, l->h, l->w});
    rc_tensor *w = rc_input(g, "w", RC_F32, 4, (int64_t[]){l->o, l->c, l->k, l->k});
    rc_tensor *gy = rc_input(g, "gy", RC_F32, 4, (int64_t[]){l->n, l->o, oh, ow});
    rc_tensor *y = pass == PASS_FWD ? rc_conv2d(g, x, w, NULL, &q)
                   : pass == PASS_GRAD_INPUT ? rc_conv2d_grad_input(g, gy, w, l->h, l->w, &q)
                   : rc_conv2d_grad_weight(g, gy, x, l->k, l->k, &q);
    if (rc_graph_error(g))
        bench_fail(NAME, "conv2d graph", rc_graph_error(g));
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, &y, 1, &err);
    if (!p)
        bench_fail(NAME, "rc_plan_new", err.msg);
    rc_tensor *in[2] = {pass == PASS_GRAD_INPUT ? gy : x, pass == PASS_GRAD_WEIGHT ? gy : w};
    for (int i = 0; i < 2; i++) {
        float *h = malloc((size_t)rc_tensor_numel(in[i]) * 4);
        if (!h)
            bench_fail(NAME, "malloc", "out of memory");
        fill(h, rc_tensor_numel(in[i]), r);
        if (rc_plan_set_input(p, in[i], h, &err))
            bench_fail(NAME, "rc_plan_set_input", err.msg);
        free(h);
    }
    double best = bench_plan_best(NAME, p, reps);
    rc_plan_free(p);
    rc_graph_free(g);
    return best;
}

/* best of `reps` runs of the pass's GEMMs alone: one per image, on ready columns */
static double time_sgemm(const layer *l, int pass, int reps, rc_rng *r)
{
    int64_t hw = out_size(l, l->h) * out_size(l, l->w), k = l->c * l->k * l->k;
    float *a = malloc((size_t)(l->o * k) * 4), *b = malloc((size_t)(k * hw) * 4);
    float *c = malloc((size_t)(l->o * hw) * 4), *d = malloc((size_t)(l->o * k) * 4);
    if (!a || !b || !c || !d)
        bench_fail(NAME, "malloc", "out of memory");
    fill(a, l->o * k, r), fill(b, k * hw, r), fill(c, l->o * hw, r), fill(d, l->o * k, r);
    double best = 1e30;
    for (int i = 0; i <= reps; i++) {
        double t0 = bench_now();
        for (int64_t n = 0; n < l->n; n++) {
            if (pass == PASS_FWD) /* y [O, HW] = W [O, K] @ col [K, HW] */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)l->o, (blasint)hw, (blasint)k,
                            1, a, (blasint)k, b, (blasint)hw, 0, c, (blasint)hw);
            else if (pass == PASS_GRAD_INPUT) /* col [K, HW] = W^T @ gy [O, HW] */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)k, (blasint)hw, (blasint)l->o,
                            1, a, (blasint)k, c, (blasint)hw, 0, b, (blasint)hw);
            else /* gW [O, K] += gy [O, HW] @ col^T */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)l->o, (blasint)k, (blasint)hw,
                            1, c, (blasint)hw, b, (blasint)hw, n ? 1 : 0, d, (blasint)k);
        }
        double dt = bench_now() - t0;
        if (i > 0) /* the first is a warm-up */
            best = dt < best ? dt : best;
    }
    free(a), free(b), free(c), free(d);
    return best;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1)
        reps = 1;
    static const layer layers[] = {
        {"resnet_3x3", 8, 64, 56, 56, 64, 3, 1, 1},
        {"resnet_3x3_s2", 8, 64, 56, 56, 128, 3, 2, 1},
        {"resnet_1x1", 8, 256, 56, 56, 64, 1, 1, 0},
    };
    rc_rng r = rc_rng_new(7);
    printf("# %d threads; GFLOP/s of the executor's pass vs cblas_sgemm on the same GEMMs\n", rc_get_threads());
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
        const layer *l = &layers[i];
        double flops = 2.0 * l->n * l->o * out_size(l, l->h) * out_size(l, l->w) * l->c * l->k * l->k;
        for (int pass = 0; pass < 3; pass++) {
            double te = time_executor(l, pass, reps, &r), tg = time_sgemm(l, pass, reps, &r);
            json_t *o = bench_line(NAME);
            bench_set_str(o, "layer", l->name);
            bench_set_str(o, "pass", pass_names[pass]);
            bench_set_int(o, "n", l->n), bench_set_int(o, "c", l->c), bench_set_int(o, "hw", l->h);
            bench_set_int(o, "o", l->o), bench_set_int(o, "k", l->k), bench_set_int(o, "stride", l->stride);
            bench_set_num(o, "ms", te * 1e3);
            bench_set_num(o, "gflops", flops / te * 1e-9);
            bench_set_num(o, "sgemm_ms", tg * 1e3);
            bench_set_num(o, "sgemm_gflops", flops / tg * 1e-9);
            bench_set_num(o, "fraction_of_sgemm", tg / te);
            if (bench_print(o))
                bench_fail(NAME, "bench_print", "cannot print");
        }
    }
    return 0;
}
