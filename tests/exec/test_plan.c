/* test_plan.c - the executor: liveness reuses memory, views alias without copies, outputs
 * survive, inputs are set between runs, a run allocates nothing, two plans over one graph
 * keep their own memory, leaves bound to buffers, events during a run, outputs released
 * early, and the errors of reads, inputs and unsupported dtypes. */
#include "check.h"
#include "exec.h"     /* events and outputs released early (rci_plan_*) */
#include "internal.h" /* rci_node_new: a node no builder makes */
#include "redco.h"
#include "redco/device.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Heap calls are counted through the linker's --wrap (set for this test in CMake). */
static long heap_calls;
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
void *__wrap_malloc(size_t n) { heap_calls++; return __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { heap_calls++; return __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { heap_calls++; return __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { heap_calls++; return __real_aligned_alloc(a, n); }

static void test_liveness_reuse(void)
{
    enum { N = 4096, DEPTH = 16 };
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", RC_F32, 1, (int64_t[]){N}), *y = x;
    for (int i = 0; i < DEPTH; i++)
        y = rc_tanh(g, rc_affine(g, y, 0.9, 0.01));
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, &y, 1, &err);
    rc_plan_stats st = rc_plan_get_stats(p);
    /* a chain needs two live buffers at a time, not one per node */
    CHECKF(st.peak_bytes <= 2 * N * sizeof(float), "peak %zu", st.peak_bytes);
    CHECKF(st.naive_bytes >= 2 * DEPTH * N * sizeof(float), "naive %zu", st.naive_bytes);
    float *xd = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++)
        xd[i] = (float)i / N;
    float *yd = malloc(N * sizeof(float));
    CHECKF(p && rc_plan_set_input(p, x, xd, &err) == 0 && rc_plan_run(p, &err) == 0 &&
           rc_plan_read(p, y, yd, &err) == 0, "%s", err.msg);
    double v = xd[N - 1];
    for (int i = 0; i < DEPTH; i++)
        v = tanh(0.9 * v + 0.01);
    CHECKF(fabs(yd[N - 1] - v) < 1e-5, "%g vs %g", yd[N - 1], v);
    printf("chain of %d ops: arena %zu bytes, %zu without reuse\n", 2 * DEPTH, st.peak_bytes, st.naive_bytes);
    free(xd);
    free(yd);
    rc_plan_free(p);
    rc_graph_free(g);
}

static void test_views_and_outputs(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", RC_F32, 2, (int64_t[]){4, 6});
    rc_tensor *e = rc_exp(g, x);
    rc_tensor *r = rc_reshape(g, e, 3, (int64_t[]){2, 2, 6});
    rc_tensor *s = rc_slice(g, r, 0, 1, 2);            /* leading axis: a view */
    rc_tensor *c = rc_slice(g, x, 1, 2, 4);            /* inner axis: a copy */
    rc_tensor *out = rc_sum_all(g, rc_tanh(g, s));
    CHECK(r->view_src == e && s->view_src == e && c->view_src == NULL);
    rc_tensor *outs[3] = {out, e, c};
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, outs, 3, &err);
    float xd[24];
    for (int i = 0; i < 24; i++)
        xd[i] = 0.1f * (float)i;
    CHECKF(p && rc_plan_set_input(p, x, xd, &err) == 0 && rc_plan_run(p, &err) == 0, "%s", err.msg);
    /* the view is e's memory 12 floats in: the same buffer, no copy */
    rc_buffer *sb = NULL, *eb = NULL;
    size_t so = 0, eo = 0;
    CHECK(rc_plan_memory(p, s, &sb, &so) == 0 && rc_plan_memory(p, e, &eb, &eo) == 0);
    CHECK(sb && sb == eb && so == eo + 12 * sizeof(float));
    float ed[24] = {0}, cd[8] = {0}, od = 0, sd[12] = {0};
    CHECKF(rc_plan_read(p, e, ed, &err) == 0 && rc_plan_read(p, c, cd, &err) == 0 &&
           rc_plan_read(p, out, &od, &err) == 0 && rc_plan_read(p, s, sd, &err) == 0, "%s", err.msg);
    double want = 0;
    for (int i = 12; i < 24; i++)
        want += tanh(exp(0.1 * i));
    CHECKF(fabs(od - want) < 1e-4, "%g vs %g", od, want);
    CHECK(fabsf(ed[5] - expf(0.5f)) < 1e-5f);          /* an intermediate kept as output */
    CHECK(cd[0] == xd[2] && cd[1] == xd[3] && cd[2] == xd[8]);
    CHECK(sd[0] == ed[12] && sd[11] == ed[23]);        /* a view of an output reads */
    /* new input values between runs */
    float xd2[24] = {0};
    CHECKF(rc_plan_set_input(p, x, xd2, &err) == 0 && rc_plan_run(p, &err) == 0 &&
           rc_plan_read(p, out, &od, &err) == 0, "%s", err.msg);
    CHECKF(fabs(od - 12 * tanh(1.0)) < 1e-4, "%g", od);
    rc_plan_free(p);
    rc_graph_free(g);
}

static void test_no_allocation_in_run(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", RC_F32, 3, (int64_t[]){4, 32, 64});
    rc_tensor *w = rc_param(g, "w", RC_F32, 2, (int64_t[]){64, 64});
    rc_tensor *h = rc_softmax_ext(g, rc_matmul(g, rc_gelu(g, rc_matmul(g, x, w, 0, 0)), x, 0, 1), NULL, 0.1, 1);
    rc_tensor *loss = rc_mean_all(g, rc_layer_norm(g, h, NULL, NULL, 1e-5));
    rc_tensor *gw;
    rc_backward(g, loss, &w, 1, &gw);
    rc_tensor *outs[2] = {loss, gw};
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, outs, 2, &err);
    float *xd = calloc(4 * 32 * 64, sizeof(float)), *wd = calloc(64 * 64, sizeof(float));
    for (int i = 0; i < 64 * 64; i++)
        wd[i] = 0.01f * (float)(i % 7);
    /* warm-up: thread pools start here, and the inputs get their memory */
    CHECKF(p && rc_plan_set_input(p, x, xd, &err) == 0 && rc_plan_set_input(p, w, wd, &err) == 0 &&
           rc_plan_run(p, &err) == 0, "%s", err.msg);
    long before = heap_calls;
    float l = 0;
    for (int i = 0; i < 5; i++) /* a training step's calls: inputs in, run, results out */
        CHECK(rc_plan_set_input(p, x, xd, &err) == 0 && rc_plan_set_input(p, w, wd, &err) == 0 &&
              rc_plan_run(p, &err) == 0 && rc_plan_read(p, loss, &l, &err) == 0);
    CHECKF(heap_calls == before, "%ld heap calls in 5 runs", heap_calls - before);
    free(xd);
    free(wd);
    rc_plan_free(p);
    rc_graph_free(g);
}

/* the vectorised f32 exp at its edges: underflow to 0, overflow to infinity, NaN kept */
static void test_exp_edges(void)
{
    enum { N = 9 };
    float x[N] = {-1000.0f, -88.0f, -80.0f, -1.0f, 0.0f, 1.0f, 80.0f, 89.0f, NAN};
    rc_graph *g = rc_graph_new();
    rc_tensor *in = rc_input(g, "x", RC_F32, 1, (int64_t[]){N}), *y = rc_exp(g, in);
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, &y, 1, &err);
    float e[N] = {0};
    CHECKF(p && rc_plan_set_input(p, in, x, &err) == 0 && rc_plan_run(p, &err) == 0 &&
           rc_plan_read(p, y, e, &err) == 0, "%s", err.msg);
    CHECK(e[0] == 0.0f && e[1] == 0.0f && isinf(e[7]) && isnan(e[8]));
    for (int i = 2; i < 7; i++)
        CHECKF(fabs(e[i] / exp((double)x[i]) - 1) < 3e-7, "exp(%g) = %.9g", x[i], e[i]);
    rc_plan_free(p);
    rc_graph_free(g);
}

/* ---- two plans over one graph ------------------------------------------------------------ */

enum { MN = 4, MD = 3, MH = 5, MO = 2 };             /* rows, inputs, hidden, outputs */
enum { W1_AT = 0, B1_AT = MD * MH, W2_AT = MD * MH + MH, MLP_PARAMS = MD * MH + MH + MH * MO };

/* The reference in double: logits o = tanh(x w1 + b1) w2 [MN, MO], loss = mean((o - y)^2) and
 * its gradient g (laid out as the parameters w). y and g may be NULL (logits only). */
static double mlp_ref(const float *w, const float *x, const float *y, double *o, double *g)
{
    double h[MN][MH], loss = 0, dout[MN][MO];
    for (int n = 0; n < MN; n++)
        for (int j = 0; j < MH; j++) {
            double z = w[B1_AT + j];
            for (int i = 0; i < MD; i++)
                z += (double)x[n * MD + i] * w[W1_AT + i * MH + j];
            h[n][j] = tanh(z);
        }
    for (int n = 0; n < MN; n++)
        for (int k = 0; k < MO; k++) {
            double v = 0;
            for (int j = 0; j < MH; j++)
                v += h[n][j] * w[W2_AT + j * MO + k];
            o[n * MO + k] = v;
            double d = y ? v - y[n * MO + k] : 0;
            loss += d * d / (MN * MO);
            dout[n][k] = 2 * d / (MN * MO);
        }
    if (!g || !y)
        return loss;
    for (int i = 0; i < MLP_PARAMS; i++)
        g[i] = 0;
    for (int n = 0; n < MN; n++)
        for (int j = 0; j < MH; j++) {
            double dh = 0;
            for (int k = 0; k < MO; k++) {
                g[W2_AT + j * MO + k] += h[n][j] * dout[n][k];
                dh += dout[n][k] * w[W2_AT + j * MO + k];
            }
            double dz = dh * (1 - h[n][j] * h[n][j]);
            g[B1_AT + j] += dz;
            for (int i = 0; i < MD; i++)
                g[W1_AT + i * MH + j] += x[n * MD + i] * dz;
        }
    return loss;
}

static void fill_uniform(float *v, int n, rc_rng *r)
{
    for (int i = 0; i < n; i++)
        v[i] = (float)(2 * rc_rng_uniform(r) - 1);
}

/* the largest |a - ref| / (1 + |ref|) over n values */
static double max_err(const float *a, const double *ref, int n)
{
    double e = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs(a[i] - ref[i]) / (1 + fabs(ref[i]));
        e = d > e || isnan(d) ? d : e;
    }
    return e;
}

/* Plan A's results (loss and the gradients, read into one flat array laid out as the
 * parameters) against the reference for parameters w and inputs x, y. */
static void check_train(rc_plan *a, rc_tensor *loss, rc_tensor *const *grads, const float *w,
                        const float *x, const float *y, const char *when)
{
    static const int at[3] = {W1_AT, B1_AT, W2_AT};
    float l = 0, g[MLP_PARAMS] = {0};
    double o[MN * MO], gref[MLP_PARAMS];
    rc_error err = {0};
    int rc = rc_plan_read(a, loss, &l, &err);
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = rc_plan_read(a, grads[i], g + at[i], &err);
    CHECKF(rc == 0, "%s: %s", when, err.msg);
    double lref = mlp_ref(w, x, y, o, gref);
    CHECKF(fabs(l - lref) <= 1e-5 * (1 + fabs(lref)), "%s: training plan's loss %.8g, expected %.8g",
           when, l, lref);
    double e = max_err(g, gref, MLP_PARAMS);
    CHECKF(e <= 1e-5, "%s: training plan's gradients off by %.3g", when, e);
}

static void check_eval(rc_plan *b, rc_tensor *logits, const float *w, const float *x, const char *when)
{
    float o[MN * MO] = {0};
    double oref[MN * MO];
    rc_error err = {0};
    CHECKF(rc_plan_read(b, logits, o, &err) == 0, "%s: %s", when, err.msg);
    mlp_ref(w, x, NULL, oref, NULL);
    double e = max_err(o, oref, MN * MO);
    CHECKF(e <= 1e-5, "%s: evaluation plan's logits off by %.3g", when, e);
}

/* A training plan (loss and gradients) and an evaluation plan (logits) over one graph, run
 * alternately with different inputs. The parameters are one buffer bound to the graph
 * (rc_graph_bind): new values uploaded to it reach both plans' next runs with no
 * rc_plan_set_input. After both plans have run, each one's results are checked against
 * the host reference; then the training plan runs again without new inputs and both are
 * checked once more: neither plan's inputs, intermediates or outputs are the other's. */
static void test_two_plans(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", RC_F32, 2, (int64_t[]){MN, MD});
    rc_tensor *y = rc_input(g, "y", RC_F32, 2, (int64_t[]){MN, MO});
    rc_tensor *w[3] = {rc_param(g, "w1", RC_F32, 2, (int64_t[]){MD, MH}),
                       rc_param(g, "b1", RC_F32, 1, (int64_t[]){MH}),
                       rc_param(g, "w2", RC_F32, 2, (int64_t[]){MH, MO})};
    rc_tensor *h = rc_tanh(g, rc_add(g, rc_matmul(g, x, w[0], 0, 0), w[1]));
    rc_tensor *logits = rc_matmul(g, h, w[2], 0, 0);
    rc_tensor *d = rc_sub(g, logits, y);
    rc_tensor *loss = rc_mean_all(g, rc_mul(g, d, d)), *grads[3];
    CHECKF(rc_backward(g, loss, w, 3, grads) == 0, "%s", rc_graph_error(g));
    rc_error err = {0};
    rc_buffer *params = rc_buffer_new(rc_device_open("cpu", 0, NULL), MLP_PARAMS * sizeof(float), &err);
    CHECKF(params, "%s", err.msg);
    static const int at[3] = {W1_AT, B1_AT, W2_AT};
    for (int i = 0; i < 3; i++)
        CHECK(rc_graph_bind(g, w[i], params, at[i] * sizeof(float)) == 0);
    rc_tensor *train_outs[4] = {loss, grads[0], grads[1], grads[2]};
    rc_plan *a = rc_plan_new(g, train_outs, 4, &err);
    CHECKF(a, "training plan: %s", err.msg);
    rc_plan *b = rc_plan_new(g, &logits, 1, &err);
    CHECKF(b, "evaluation plan: %s", err.msg);
    if (!a || !b || !params)
        goto done;
    /* the parameters' memory is the bound buffer in both plans */
    rc_buffer *mb = NULL;
    size_t mo = 0;
    CHECK(rc_plan_memory(a, w[1], &mb, &mo) == 0 && mb == params && mo == B1_AT * sizeof(float));
    CHECK(rc_plan_memory(b, w[2], &mb, &mo) == 0 && mb == params && mo == W2_AT * sizeof(float));

    rc_rng r = rc_rng_new(42);
    for (int round = 0; round < 4; round++) {
        float wv[MLP_PARAMS], xa[MN * MD], ya[MN * MO], xb[MN * MD];
        fill_uniform(wv, MLP_PARAMS, &r);
        fill_uniform(xa, MN * MD, &r);
        fill_uniform(ya, MN * MO, &r);
        fill_uniform(xb, MN * MD, &r);
        char when[64];
        CHECKF(rc_buffer_upload(params, 0, wv, sizeof wv, &err) == 0, "%s", err.msg);
        CHECKF(rc_plan_set_input(a, x, xa, &err) == 0 && rc_plan_set_input(a, y, ya, &err) == 0 &&
               rc_plan_run(a, &err) == 0, "round %d, training: %s", round, err.msg);
        CHECKF(rc_plan_set_input(b, x, xb, &err) == 0 && rc_plan_run(b, &err) == 0,
               "round %d, evaluation: %s", round, err.msg);
        snprintf(when, sizeof when, "round %d, after both runs", round);
        check_train(a, loss, grads, wv, xa, ya, when);
        check_eval(b, logits, wv, xb, when);
        /* the training plan again, on the inputs it was given (not the evaluation plan's) */
        CHECKF(rc_plan_run(a, &err) == 0, "round %d, training again: %s", round, err.msg);
        snprintf(when, sizeof when, "round %d, training run again", round);
        check_train(a, loss, grads, wv, xa, ya, when);
        check_eval(b, logits, wv, xb, when);
    }

    /* what a plan refuses: an intermediate (its memory is reused), a node of the graph that
     * is not in the plan (to read or to set) */
    float buf[MN * MH];
    err = (rc_error){0};
    CHECKF(rc_plan_read(a, h, buf, &err) == -1 && err.code == RC_ERR_ARG &&
           check_has(err.msg, "not an output"), "read of an intermediate: %s", err.msg);
    err = (rc_error){0};
    CHECKF(rc_plan_read(b, loss, buf, &err) == -1 && check_has(err.msg, "not a node of this plan"),
           "read of a node not in the plan: %s", err.msg);
    err = (rc_error){0};
    CHECKF(rc_plan_set_input(b, y, buf, &err) == -1 && check_has(err.msg, "y is not a node of this plan"),
           "set_input on a leaf not in the plan: %s", err.msg);
    err = (rc_error){0};
    CHECKF(rc_plan_set_input(a, h, buf, &err) == -1 && check_has(err.msg, "not an input leaf"),
           "set_input on an intermediate: %s", err.msg);
done:
    rc_plan_free(a);
    rc_plan_free(b);
    rc_buffer_free(params);
    rc_graph_free(g);
}

/* A leaf bound to a buffer for every plan of its graph: values uploaded to the buffer are
 * what the next run reads, with no rc_plan_set_input; a plan's own binding comes first. */
static void test_graph_bind(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", RC_F32, 1, (int64_t[]){3});
    rc_tensor *y = rc_scale(g, x, 2.0);
    rc_error err = {0};
    rc_buffer *xb = rc_buffer_new(rc_device_open("cpu", 0, NULL), 8 * sizeof(float), &err);
    rc_buffer *other = rc_buffer_new(rc_device_open("cpu", 0, NULL), 3 * sizeof(float), &err);
    CHECKF(xb && other, "%s", err.msg);
    if (!xb || !other)
        goto done;
    CHECK(rc_graph_bind(g, x, xb, 4 * sizeof(float)) == 0);
    CHECK(rc_graph_bind(g, x, xb, 6 * sizeof(float)) == -1); /* past the buffer's end */
    rc_plan *p = rc_plan_new(g, &y, 1, &err);
    CHECKF(p, "%s", err.msg);
    float v1[3] = {1, 2, 3}, v2[3] = {-4, 0.5f, 10}, out[3] = {0};
    CHECKF(p && rc_buffer_upload(xb, 4 * sizeof(float), v1, sizeof v1, &err) == 0 &&
           rc_plan_run(p, &err) == 0 && rc_plan_read(p, y, out, &err) == 0, "%s", err.msg);
    CHECKF(out[0] == 2 && out[1] == 4 && out[2] == 6, "%g %g %g", out[0], out[1], out[2]);
    CHECKF(p && rc_buffer_upload(xb, 4 * sizeof(float), v2, sizeof v2, &err) == 0 &&
           rc_plan_run(p, &err) == 0 && rc_plan_read(p, y, out, &err) == 0, "%s", err.msg);
    CHECKF(out[0] == -8 && out[1] == 1 && out[2] == 20, "%g %g %g", out[0], out[1], out[2]);
    /* rc_plan_set_input writes into the bound buffer */
    CHECKF(p && rc_plan_set_input(p, x, v1, &err) == 0, "%s", err.msg);
    float back[3] = {0};
    CHECK(rc_buffer_download(xb, 4 * sizeof(float), back, sizeof back, &err) == 0 && back[2] == 3);
    /* the plan's own binding takes precedence over the graph's */
    CHECKF(p && rc_buffer_upload(other, 0, v2, sizeof v2, &err) == 0 &&
           rc_plan_bind(p, x, other, 0, &err) == 0 &&
           rc_plan_run(p, &err) == 0 && rc_plan_read(p, y, out, &err) == 0, "%s", err.msg);
    CHECKF(out[0] == -8 && out[1] == 1 && out[2] == 20, "%g %g %g", out[0], out[1], out[2]);
    rc_plan_free(p);
done:
    rc_buffer_free(xb);
    rc_buffer_free(other);
    rc_graph_free(g);
}

/* An op the backend has no kernel for at a dtype is refused when the plan is built,
 * naming the op, the dtype and the backend (the CPU runs every float op in every float
 * dtype, so the node is made by hand: exp of i32). */
static void test_unsupported_dtype(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", RC_I32, 2, (int64_t[]){2, 3});
    rc_tensor *y = rci_node_new(g, RC_OP_EXP, RC_I32, 2, x->shape, 1, &x);
    CHECKF(y && !rc_graph_error(g), "%s", rc_graph_error(g));
    rc_error err = {0};
    CHECK(rc_plan_new(g, &y, 1, &err) == NULL);
    CHECKF(err.code == RC_ERR_UNSUPPORTED && check_has(err.msg, "exp") && check_has(err.msg, "i32") &&
           check_has(err.msg, "cpu"), "code %d: %s", err.code, err.msg);
    err = (rc_error){0};
    CHECK(rc_plan_new_on(rc_device_open("cpu", 0, NULL), g, &y, 1, &err) == NULL);
    CHECKF(err.code == RC_ERR_UNSUPPORTED && check_has(err.msg, "exp") && check_has(err.msg, "i32") &&
           check_has(err.msg, "cpu"), "code %d: %s", err.code, err.msg);
    rc_graph_free(g);
}

/* A node that does not fit its op (made by hand: the builders refuse it) is refused when the
 * plan is built, before anything runs: one error naming the op, the node and the shapes. */
static void test_invalid_node(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *src[2] = {rc_input(g, "a", RC_F32, 1, (int64_t[]){4}), rc_input(g, "b", RC_F32, 1, (int64_t[]){3})};
    rc_tensor *y = rci_node_new(g, RC_OP_MUL, RC_F32, 1, (int64_t[]){4}, 2, src);
    CHECKF(y && !rc_graph_error(g), "%s", rc_graph_error(g));
    rc_error err = {0};
    CHECK(rc_plan_new(g, &y, 1, &err) == NULL);
    char node[32];
    snprintf(node, sizeof node, "node %d", y ? y->id : -1);
    CHECKF(err.code == RC_ERR_SHAPE && check_has(err.msg, "mul") && check_has(err.msg, node) &&
           check_has(err.msg, "[3]") && check_has(err.msg, "[4]"), "code %d: %s", err.code, err.msg);
    rc_plan_stats st;
    err = (rc_error){0};
    CHECK(rc_plan_estimate(g, &y, 1, &st, &err) == -1 && check_has(err.msg, "mul"));
    rc_graph_free(g);
}

static void test_threads(void)
{
    rc_set_threads(1);
    CHECK(rc_get_threads() == 1);
    rc_set_threads(2);
    CHECK(rc_get_threads() == 2);
}

/* The CPU backend: its name, the machine's memory, and the bytes its buffers hold; buffer
 * copies check their ranges. */
static void test_backend_memory(void)
{
    rc_backend *be = rc_device_open("cpu", 0, NULL);
    size_t total, used0, used1, peak;
    rc_error err = {0};
    CHECK(!strcmp(rc_backend_name(be), "cpu"));
    rc_backend_memory(be, &total, &used0, NULL);
    rc_buffer *a = rc_buffer_new(be, 1000, &err), *b = rc_buffer_new(be, 24, &err);
    rc_backend_memory(be, NULL, &used1, &peak);
    CHECKF(total > 0 && used1 == used0 + 1024 && peak >= used1, "total %zu, used %zu -> %zu, peak %zu", total,
           used0, used1, peak);
    float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {0};
    CHECK(a && b && rc_buffer_upload(a, 400, x, sizeof x, &err) == 0);
    CHECK(rc_buffer_copy(b, 0, a, 400, sizeof x, &err) == 0 && rc_buffer_download(b, 0, y, sizeof y, &err) == 0);
    CHECK(!memcmp(x, y, sizeof x));
    CHECK(rc_buffer_download(a, 990, y, sizeof y, &err) == -1 && strstr(err.msg, "outside"));
    CHECK(rc_buffer_copy(b, 4, a, 0, sizeof x, &err) == -1); /* 4 + 24 bytes into 24 */
    rc_buffer_free(a);
    rc_buffer_free(b);
    rc_backend_memory(be, NULL, &used1, NULL);
    CHECK(used1 == used0);
}

/* An output takes its input's memory where the op allows (plan.c, op_may_take_input): a
 * sum of two intermediates needs the two, not three; the cross-entropy gradient overwrites
 * the logits it reads last. Values as computed on the host, in f32 and bf16, on the CPU
 * and on OpenCL when present (then required with REDCO_REQUIRE_OPENCL=1). */
static void in_place_on(rc_backend *be, rc_dtype dt)
{
    enum { R = 24, V = 1000 };
    size_t es = dt == RC_F32 ? 4 : 2, slab = ((size_t)R * V * es + 63) / 64 * 64;
    rc_graph *g = rc_graph_new();
    rc_error err = {0};
    rc_tensor *x = rc_input(g, "x", dt, 2, (int64_t[]){R, V});
    rc_tensor *bias = rc_param(g, "bias", dt, 1, (int64_t[]){V});
    rc_tensor *t = rc_input(g, "t", RC_I32, 1, (int64_t[]){R});
    rc_tensor *sum = rc_add(g, rc_tanh(g, x), rc_exp(g, x));
    rc_tensor *logits = rc_add(g, x, bias), *db = NULL;
    rc_tensor *loss = rc_cross_entropy(g, logits, t, -1);
    CHECKF(rc_backward(g, loss, &bias, 1, &db) == 0, "%s", rc_graph_error(g));
    rc_tensor *dlogits = NULL; /* the gradient node db sums over rows */
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i]->op == RC_OP_CROSS_ENTROPY_GRAD)
            dlogits = g->nodes[i];
    rc_tensor *outs[3] = {sum, db, dlogits};
    rc_plan *p = rc_plan_new_on(be, g, outs, 1, &err);
    rc_plan_stats st = rc_plan_get_stats(p);
    CHECKF(p && st.peak_bytes <= 2 * slab, "%s %s sum: arena %zu for two slabs of %zu: %s",
           rc_backend_name(be), rc_dtype_name(dt), st.peak_bytes, slab, err.msg);
    rc_plan_free(p);
    p = rc_plan_new_on(be, g, outs + 1, 1, &err); /* the logits' gradient: one slab, not two */
    st = rc_plan_get_stats(p);
    CHECKF(p && st.peak_bytes < 2 * slab, "%s %s cross-entropy: arena %zu for a slab of %zu: %s",
           rc_backend_name(be), rc_dtype_name(dt), st.peak_bytes, slab, err.msg);
    rc_plan_free(p);
    p = rc_plan_new_on(be, g, outs, 2, &err);
    static float xd[R * V], bd[V], sd[R * V];
    static uint16_t xh[R * V], bh[V];
    int32_t td[R];
    double want[V] = {0};
    for (int i = 0; i < R * V; i++)
        xd[i] = (float)sin(0.37 * i) * 2;
    for (int j = 0; j < V; j++)
        bd[j] = (float)cos(0.11 * j);
    for (int r = 0; r < R; r++)
        td[r] = r == 3 ? -1 : (r * 37) % V;
    if (dt != RC_F32) { /* the values as bf16 holds them */
        rc_convert(xh, dt, xd, RC_F32, R * V);
        rc_convert(xd, RC_F32, xh, dt, R * V);
        rc_convert(bh, dt, bd, RC_F32, V);
        rc_convert(bd, RC_F32, bh, dt, V);
    }
    CHECKF(p && rc_plan_set_input(p, x, dt == RC_F32 ? (void *)xd : xh, &err) == 0 &&
           rc_plan_set_input(p, bias, dt == RC_F32 ? (void *)bd : bh, &err) == 0 &&
           rc_plan_set_input(p, t, td, &err) == 0 && rc_plan_run(p, &err) == 0, "%s", err.msg);
    for (int r = 0; r < R; r++) { /* db = sum over rows of (softmax - onehot) / rows counted */
        if (td[r] < 0)
            continue;
        double mx = -1e30, z = 0;
        for (int j = 0; j < V; j++)
            mx = fmax(mx, xd[r * V + j] + bd[j]);
        for (int j = 0; j < V; j++)
            z += exp(xd[r * V + j] + bd[j] - mx);
        for (int j = 0; j < V; j++)
            want[j] += (exp(xd[r * V + j] + bd[j] - mx) / z - (j == td[r])) / (R - 1);
    }
    float got[V];
    uint16_t goth[R * V];
    double err_db = 0, err_sum = 0;
    CHECKF(rc_plan_read(p, db, dt == RC_F32 ? (void *)got : goth, &err) == 0, "%s", err.msg);
    if (dt != RC_F32)
        rc_convert(got, RC_F32, goth, dt, V);
    for (int j = 0; j < V; j++)
        err_db = fmax(err_db, fabs(got[j] - want[j]));
    CHECKF(rc_plan_read(p, sum, dt == RC_F32 ? (void *)sd : goth, &err) == 0, "%s", err.msg);
    if (dt != RC_F32)
        rc_convert(sd, RC_F32, goth, dt, R * V);
    for (int i = 0; i < R * V; i++)
        err_sum = fmax(err_sum, fabs(sd[i] - (tanh(xd[i]) + exp(xd[i]))) / (1 + exp(xd[i])));
    double tol = dt == RC_F32 ? 1e-5 : 2e-2;
    CHECKF(err_db < tol * 0.05 && err_sum < tol, "%s %s: bias gradient error %g, sum error %g",
           rc_backend_name(be), rc_dtype_name(dt), err_db, err_sum);
    rc_plan_free(p);
    rc_graph_free(g);
}

static void test_in_place(void)
{
    rc_error err = {0};
    rc_backend *cpu = rc_device_open("cpu", 0, NULL), *cl = rc_device_open("opencl:0", 0, &err);
    const char *need = getenv("REDCO_REQUIRE_OPENCL");
    CHECKF(cl || !need || strcmp(need, "1"), "REDCO_REQUIRE_OPENCL=1 but no OpenCL device: %s", err.msg);
    rc_dtype dts[2] = {RC_F32, RC_BF16};
    for (int d = 0; d < 2; d++) {
        in_place_on(cpu, dts[d]);
        if (cl)
            in_place_on(cl, dts[d]);
    }
    rc_device_close(cl);
    rc_device_close(cpu);
}

/* ---- events and outputs released early (exec.h: ZeRO stage 3) ------------------------------ */

enum { EN = 64, EMAX = 8 };

/* What the events of test_events see: the order they fire in, the output y's values each
 * one reads, and the event that fails on purpose. */
typedef struct {
    rc_plan *p;
    rc_tensor *y;
    int fired[EMAX], nfired;
    float seen[EMAX][EN];
    int fail_at;         /* the event that returns -1; -1: none */
    double busy_s;       /* time each event spends (the timing check) */
} event_log;

static int log_event(void *ctx, int k, rc_error *err)
{
    event_log *l = ctx;
    if (l->nfired < EMAX)
        l->fired[l->nfired++] = k;
    if (k == l->fail_at)
        return rc_error_set(err, RC_ERR_ARG, "event %d stops the run", k);
    if (k < EMAX && rc_plan_read(l->p, l->y, l->seen[k], err))
        return -1;
    for (double t0 = rci_clock_s(); rci_clock_s() - t0 < l->busy_s;)
        ;
    return 0;
}

/* Positions are the execution order (leaves included); events fire at theirs, in index order,
 * before the node there runs: an event at y's position still sees y of the previous run,
 * one right after it and one after the last node see this run's. A failing event stops the
 * run with its own error; at[] out of range or not ascending is refused; n = 0 removes the
 * events; with timing on, event time is run time, not kernel time. */
static void test_events(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", RC_F32, 1, (int64_t[]){EN});
    rc_tensor *y = rc_scale(g, rc_tanh(g, x), 2.0);
    rc_tensor *z = rc_exp(g, rc_reshape(g, y, 2, (int64_t[]){8, 8}));
    rc_tensor *unused = rc_exp(g, x), *outs[2] = {y, z};
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, outs, 2, &err);
    CHECKF(p, "%s", err.msg);
    if (!p)
        goto done;
    int n = rci_plan_size(p), py = rci_plan_pos(p, y);
    CHECKF(n == 5, "%d positions: x, tanh, y, the reshape view, z", n);
    CHECK(rci_plan_node(p, 0) == x && rci_plan_pos(p, x) == 0 && rci_plan_node(p, py) == y);
    CHECK(rci_plan_node(p, n - 1) == z && rci_plan_node(p, n) == NULL && rci_plan_node(p, -1) == NULL);
    CHECK(rci_plan_pos(p, unused) == -1 && rci_plan_pos(p, NULL) == -1);

    event_log l = {.p = p, .y = y, .fail_at = -1};
    int at[5] = {0, 0, py, py + 1, n};
    CHECKF(rci_plan_set_events(p, at, 5, log_event, &l, &err) == 0, "%s", err.msg);
    float x1[EN], x2[EN];
    for (int i = 0; i < EN; i++) {
        x1[i] = 0.01f * (float)i;
        x2[i] = -0.02f * (float)i;
    }
    CHECKF(rc_plan_set_input(p, x, x1, &err) == 0 && rc_plan_run(p, &err) == 0 &&
           rc_plan_set_input(p, x, x2, &err) == 0, "%s", err.msg);
    l.nfired = 0;
    CHECKF(rc_plan_run(p, &err) == 0, "%s", err.msg);
    CHECKF(l.nfired == 5 && l.fired[0] == 0 && l.fired[1] == 1 && l.fired[2] == 2 && l.fired[3] == 3 &&
           l.fired[4] == 4, "%d events fired", l.nfired);
    float want1 = 2 * tanhf(x1[EN - 1]), want2 = 2 * tanhf(x2[EN - 1]);
    CHECKF(fabsf(l.seen[2][EN - 1] - want1) < 1e-5f, "before y runs: %g, not the last run's %g",
           l.seen[2][EN - 1], want1);
    CHECKF(fabsf(l.seen[3][EN - 1] - want2) < 1e-5f && fabsf(l.seen[4][EN - 1] - want2) < 1e-5f,
           "after y runs: %g and %g, not %g", l.seen[3][EN - 1], l.seen[4][EN - 1], want2);

    /* a failing event: the run stops with its error as it set it, no later event fires */
    l.nfired = 0;
    l.fail_at = 2;
    err = (rc_error){0};
    CHECK(rc_plan_run(p, &err) == -1);
    CHECKF(!strcmp(err.msg, "event 2 stops the run") && l.nfired == 3, "%d fired: %s", l.nfired, err.msg);
    l.fail_at = -1;

    /* refused: not ascending, out of range; the events set before stay */
    err = (rc_error){0};
    CHECKF(rci_plan_set_events(p, (int[]){3, 1}, 2, log_event, &l, &err) == -1 &&
           check_has(err.msg, "not ascending"), "%s", err.msg);
    err = (rc_error){0};
    CHECKF(rci_plan_set_events(p, (int[]){0, n + 1}, 2, log_event, &l, &err) == -1 &&
           check_has(err.msg, "outside"), "%s", err.msg);
    CHECKF(rci_plan_set_events(p, (int[]){-1}, 1, log_event, &l, &err) == -1, "%s", err.msg);
    l.nfired = 0;
    CHECKF(rc_plan_run(p, &err) == 0 && l.nfired == 5, "%d fired: %s", l.nfired, err.msg);

    /* with timing on, the events' time is the run's, not the kernels' */
    l.busy_s = 0.01;
    rc_plan_set_timing(p, 1);
    CHECKF(rc_plan_run(p, &err) == 0, "%s", err.msg);
    rc_plan_stats st = rc_plan_get_stats(p);
    CHECKF(st.last_run_s - st.last_kernel_s >= 0.045, "run %g s, kernels %g s, events 0.05 s",
           st.last_run_s, st.last_kernel_s);
    rc_plan_set_timing(p, 0);

    /* n = 0 removes them */
    l.nfired = 0;
    CHECKF(rci_plan_set_events(p, NULL, 0, NULL, NULL, &err) == 0 && rc_plan_run(p, &err) == 0 &&
           l.nfired == 0, "%d fired: %s", l.nfired, err.msg);
done:
    rc_plan_free(p);
    rc_graph_free(g);
}

enum { RN = 1024, RD = 8 };

/* The "gradients" of test_released: read by events right after their release. */
typedef struct {
    rc_plan *p;
    rc_tensor **outs;
    int which[RD + 1];   /* event k reads output which[k] */
    float vals[RD][RN];
    int late_k;          /* the event that reads output 0 too late (after its window) */
    int late_rc;         /* that read's result and error */
    char late_msg[512];
} released_log;

static int read_released(void *ctx, int k, rc_error *err)
{
    released_log *l = ctx;
    if (k == l->late_k) { /* output 0's memory may be reused by then */
        rc_error e = {0};
        l->late_rc = rc_plan_read(l->p, l->outs[0], l->vals[0], &e);
        memcpy(l->late_msg, e.msg, sizeof l->late_msg);
        return 0;
    }
    return rc_plan_read(l->p, l->outs[l->which[k]], l->vals[l->which[k]], err);
}

/* A chain a_0 = tanh(x), a_i+1 = tanh(a_i), with an output g_i = exp(a_i) per link (the last a
 * reshape view of it), like a backward's gradients. Released early (g_i after itself, or for
 * odd i after a_i+1, a node that does not read it), the arena holds three links, not every g;
 * events right after each release node read the values the plan that keeps them all reads
 * after its run; after the run a released output is refused, naming the node; the estimate
 * of the released plan has its peak; a release node the outputs do not need is refused. */
static void test_released(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", RC_F32, 1, (int64_t[]){RN});
    rc_tensor *a[RD], *gs[RD], *rel[RD];
    for (int i = 0; i < RD; i++) {
        a[i] = rc_tanh(g, i ? a[i - 1] : x);
        gs[i] = rc_exp(g, a[i]);
        if (i == RD - 1)
            gs[i] = rc_reshape(g, gs[i], 2, (int64_t[]){RN / 4, 4});
        snprintf(gs[i]->name, sizeof gs[i]->name, "g%d", i);
    }
    for (int i = 0; i < RD; i++)
        rel[i] = i % 2 && i < RD - 1 ? a[i + 1] : gs[i];
    rc_tensor *unused = rc_exp(g, x);
    rc_error err = {0};
    rc_backend *cpu = rc_device_open("cpu", 0, NULL);
    rc_plan *keep = rc_plan_new_on(cpu, g, gs, RD, &err);
    CHECKF(keep, "%s", err.msg);
    rc_plan *p = rci_plan_new_released(cpu, g, gs, RD, rel, &err);
    CHECKF(p, "%s", err.msg);
    static released_log l;
    static float want[RD][RN];
    if (!keep || !p)
        goto done;
    size_t slab = RN * sizeof(float);
    rc_plan_stats sk = rc_plan_get_stats(keep), sp = rc_plan_get_stats(p), se;
    CHECKF(sk.peak_bytes >= RD * slab && sp.peak_bytes <= 3 * slab, "peak %zu kept, %zu released (slab %zu)",
           sk.peak_bytes, sp.peak_bytes, slab);
    rc_plan *est = rci_plan_new_estimate(g, gs, RD, rel, &err);
    se = est ? rc_plan_get_stats(est) : (rc_plan_stats){0};
    CHECKF(est && se.peak_bytes == sp.peak_bytes && rci_plan_size(est) == rci_plan_size(p),
           "estimate %zu, plan %zu: %s", se.peak_bytes, sp.peak_bytes, err.msg);
    for (int k = 0; est && k < rci_plan_size(p); k++) /* the order the schedules follow */
        CHECKF(rci_plan_node(est, k) == rci_plan_node(p, k), "position %d", k);
    CHECKF(est && rc_plan_run(est, &err) == -1 && check_has(err.msg, "estimate-only"), "%s", err.msg);
    rc_plan_free(est);
    CHECKF(rc_plan_estimate(g, gs, RD, &se, &err) == 0 && se.peak_bytes == sk.peak_bytes, "estimate %zu, plan %zu",
           se.peak_bytes, sk.peak_bytes);

    float xd[RN];
    for (int i = 0; i < RN; i++)
        xd[i] = (float)sin(0.1 * i);
    CHECKF(rc_plan_set_input(keep, x, xd, &err) == 0 && rc_plan_run(keep, &err) == 0, "%s", err.msg);
    for (int i = 0; i < RD; i++)
        CHECKF(rc_plan_read(keep, gs[i], want[i], &err) == 0, "%s", err.msg);

    int at[RD + 1];
    l.p = p;
    l.outs = gs;
    for (int i = 0; i < RD; i++) {
        l.which[i] = i;
        at[i] = rci_plan_pos(p, rel[i]) + 1;
    }
    at[RD] = rci_plan_size(p);
    l.late_k = RD;
    CHECKF(rci_plan_set_events(p, at, RD + 1, read_released, &l, &err) == 0, "%s", err.msg);
    CHECKF(rc_plan_set_input(p, x, xd, &err) == 0 && rc_plan_run(p, &err) == 0, "%s", err.msg);
    for (int i = 0; i < RD; i++)
        CHECKF(!memcmp(l.vals[i], want[i], sizeof want[i]), "g%d read in its event differs", i);
    CHECKF(l.late_rc == -1 && check_has(l.late_msg, "'g0'") && check_has(l.late_msg, "released after"),
           "g0 read at the end: %s", l.late_msg);
    /* the window ends at the position right after the release node */
    at[1] = at[0] + 1;
    l.late_k = 1;
    l.late_rc = 0;
    CHECKF(rci_plan_set_events(p, at, 2, read_released, &l, &err) == 0 && rc_plan_run(p, &err) == 0,
           "%s", err.msg);
    CHECKF(l.late_rc == -1 && check_has(l.late_msg, "positions up to"), "g0 read one position late: %s",
           l.late_msg);

    /* after the run: refused, naming the output and the node after which it was released */
    char node[32];
    snprintf(node, sizeof node, "node %d", rel[1]->id);
    err = (rc_error){0};
    CHECKF(rc_plan_read(p, gs[1], l.vals[1], &err) == -1 && check_has(err.msg, "'g1'") &&
           check_has(err.msg, node), "%s", err.msg);
    rc_buffer *mb = NULL;
    size_t mo = 0;
    CHECK(rc_plan_memory(p, gs[RD - 1], &mb, &mo) == -1);
    CHECK(rc_plan_memory(keep, gs[RD - 1], &mb, &mo) == 0);

    /* a release node the outputs do not need */
    rc_tensor *bad[RD];
    memcpy(bad, rel, sizeof bad);
    bad[2] = unused;
    snprintf(node, sizeof node, "release node %d", unused->id);
    err = (rc_error){0};
    CHECKF(rci_plan_new_released(cpu, g, gs, RD, bad, &err) == NULL && check_has(err.msg, node),
           "%s", err.msg);
    err = (rc_error){0};
    CHECKF(rci_plan_new_estimate(g, gs, RD, bad, &err) == NULL && check_has(err.msg, node), "%s", err.msg);
done:
    rc_plan_free(keep);
    rc_plan_free(p);
    rc_device_close(cpu);
    rc_graph_free(g);
}

/* An output released after a node that could take its memory in place (an add reading it
 * last) keeps its values for the event right after that node: the add gets its own memory. */
static void test_released_in_place(void)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", RC_F32, 1, (int64_t[]){RN});
    rc_tensor *e = rc_exp(g, x), *sum = rc_add(g, e, x), *outs[2] = {e, sum}, *rel[2] = {sum, NULL};
    rc_error err = {0};
    rc_plan *p = rci_plan_new_released(rc_device_open("cpu", 0, NULL), g, outs, 2, rel, &err);
    CHECKF(p, "%s", err.msg);
    static released_log l;
    l.p = p;
    l.outs = outs;
    l.late_k = -1;
    int at = rci_plan_pos(p, sum) + 1;
    float xd[RN];
    for (int i = 0; i < RN; i++)
        xd[i] = 0.001f * (float)i;
    CHECKF(p && rci_plan_set_events(p, &at, 1, read_released, &l, &err) == 0 &&
           rc_plan_set_input(p, x, xd, &err) == 0 && rc_plan_run(p, &err) == 0, "%s", err.msg);
    CHECKF(fabsf(l.vals[0][RN - 1] - expf(xd[RN - 1])) < 1e-5f, "e read after the add: %g, not exp %g",
           l.vals[0][RN - 1], expf(xd[RN - 1]));
    rc_plan_free(p);
    rc_graph_free(g);
}

int main(void)
{
    test_liveness_reuse();
    test_in_place();
    test_views_and_outputs();
    test_no_allocation_in_run();
    test_exp_edges();
    test_two_plans();
    test_graph_bind();
    test_unsupported_dtype();
    test_invalid_node();
    test_backend_memory();
    test_threads();
    test_events();
    test_released();
    test_released_in_place();
    return check_summary("test_plan");
}
