/* test_plan.c - the executor: liveness reuses memory, views alias without copies, outputs
 * survive, leaves rebind between runs, and a run allocates nothing. */
#include "check.h"
#include "redco.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

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
    rc_tensor_bind(x, xd);
    CHECK(rc_plan_run(p, &err) == 0);
    double v = xd[N - 1];
    for (int i = 0; i < DEPTH; i++)
        v = tanh(0.9 * v + 0.01);
    CHECKF(fabs(((float *)rc_tensor_data(y))[N - 1] - v) < 1e-5, "%g vs %g", ((float *)rc_tensor_data(y))[N - 1], v);
    printf("chain of %d ops: arena %zu bytes, %zu without reuse\n", 2 * DEPTH, st.peak_bytes, st.naive_bytes);
    free(xd);
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
    rc_tensor_bind(x, xd);
    CHECK(p && rc_plan_run(p, &err) == 0);
    CHECK((char *)rc_tensor_data(s) == (char *)rc_tensor_data(e) + 12 * sizeof(float));
    const float *ed = rc_tensor_data(e), *cd = rc_tensor_data(c);
    double want = 0;
    for (int i = 12; i < 24; i++)
        want += tanh(exp(0.1 * i));
    CHECKF(fabs(*(float *)rc_tensor_data(out) - want) < 1e-4, "%g vs %g", *(float *)rc_tensor_data(out), want);
    CHECK(fabsf(ed[5] - expf(0.5f)) < 1e-5f);          /* an intermediate kept as output */
    CHECK(cd[0] == xd[2] && cd[1] == xd[3] && cd[2] == xd[8]);
    /* rebinding a leaf between runs */
    float xd2[24] = {0};
    rc_tensor_bind(x, xd2);
    CHECK(rc_plan_run(p, &err) == 0);
    CHECKF(fabs(*(float *)rc_tensor_data(out) - 12 * tanh(1.0)) < 1e-4, "%g", *(float *)rc_tensor_data(out));
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
    rc_tensor_bind(x, xd);
    rc_tensor_bind(w, wd);
    CHECK(p && rc_plan_run(p, &err) == 0); /* warm-up: thread pools start here */
    long before = heap_calls;
    for (int i = 0; i < 5; i++)
        CHECK(rc_plan_run(p, &err) == 0);
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
    rc_tensor_bind(in, x);
    rc_error err = {0};
    rc_plan *p = rc_plan_new(g, &y, 1, &err);
    CHECK(p && rc_plan_run(p, &err) == 0);
    const float *e = p ? rc_tensor_data(y) : x;
    CHECK(e[0] == 0.0f && e[1] == 0.0f && isinf(e[7]) && isnan(e[8]));
    for (int i = 2; i < 7; i++)
        CHECKF(fabs(e[i] / exp((double)x[i]) - 1) < 3e-7, "exp(%g) = %.9g", x[i], e[i]);
    rc_plan_free(p);
    rc_graph_free(g);
}

static void test_threads(void)
{
    rc_set_threads(1);
    CHECK(rc_get_threads() == 1);
    rc_set_threads(2);
    CHECK(rc_get_threads() == 2);
}

int main(void)
{
    test_liveness_reuse();
    test_views_and_outputs();
    test_no_allocation_in_run();
    test_exp_edges();
    test_threads();
    return check_summary("test_plan");
}
