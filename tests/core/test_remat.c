/* test_remat.c - activation recomputation (rc_remat_begin / rc_graph_set_remat): the
 * gradients of every model family, and of a user's graph with dropout inside a segment,
 * are bitwise those without recomputation, and the plan's activation peak is smaller.
 * The families and the dropout graph run on the CPU and again on the OpenCL device (the
 * same device with and without recomputation: bitwise). Without an OpenCL device that
 * part prints why and passes, unless REDCO_REQUIRE_OPENCL=1 (CI sets it): then it fails. */
#include "check.h"
#include "redco/device.h"
#include "redco/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* T 32: at 16 the 8-block model's activations without recomputation were few enough for
 * the arena's best fit to pack them below the recomputing graph's (test_peak) */
enum { B = 2, T = 32 };

/* loss and gradients of m on fixed ids on backend be (m's parameters are there),
 * recomputing every `every` blocks (0: none); their values flat into out (malloc'ed), the
 * plan's arena peak into *peak */
static float *model_grads(rc_backend *be, rc_model *m, int every, int64_t *count, size_t *peak)
{
    int32_t ids[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++) {
        ids[i] = (int32_t)((i * 37 + 5) % m->config.vocab_size);
        tg[i] = (int32_t)((i * 11 + 3) % m->config.vocab_size);
    }
    rc_graph *g = rc_graph_new();
    rc_graph_set_remat(g, every);
    rc_tensor *x = rc_const(g, "ids", RC_I32, 2, (int64_t[]){B, T}, ids);
    rc_tensor *enc = m->config.type == RC_MODEL_T5 ? rc_const(g, "enc", RC_I32, 2, (int64_t[]){B, T}, tg) : NULL;
    rc_tensor *y = rc_const(g, "targets", RC_I32, 2, (int64_t[]){B, T}, tg);
    rc_tensor *loss = rc_cross_entropy(g, rc_model_logits(g, m, x, enc, NULL), y, RC_IGNORE_INDEX);
    int n = rc_params_count(m->params);
    rc_tensor **p = calloc((size_t)n + 1, sizeof *p), **outs = calloc((size_t)n + 1, sizeof *outs);
    for (int i = 0; i < n; i++)
        p[i] = rc_params_get(g, m->params, rc_params_name(m->params, i));
    outs[0] = loss;
    rc_backward(g, loss, p, n, outs + 1);
    rc_error err = {0};
    rc_plan *plan = rc_graph_error(g) ? NULL : rc_plan_new_on(be, g, outs, n + 1, &err);
    CHECKF(plan && rc_plan_run(plan, &err) == 0, "%s remat %d on %s: %s %s", m->config.model_type, every,
           rc_backend_name(be),
           rc_graph_error(g) ? rc_graph_error(g) : "", err.msg);
    *count = 1;
    for (int i = 0; i < n; i++)
        *count += rc_tensor_numel(outs[1 + i]);
    float *v = malloc((size_t)*count * sizeof *v), *at = v;
    for (int i = 0; plan && v && i <= n; i++) {
        CHECK(rc_plan_read(plan, outs[i], at, &err) == 0);
        at += rc_tensor_numel(outs[i]);
    }
    *peak = plan ? rc_plan_get_stats(plan).peak_bytes : 0;
    rc_plan_free(plan);
    rc_graph_free(g);
    free(p);
    free(outs);
    return v;
}

static void test_families(rc_backend *be)
{
    const char *presets[5] = {"tiny-gpt2", "tiny-llama", "tiny-opt", "tiny-gptj", "tiny-t5"};
    for (int k = 0; k < 5; k++) {
        rc_error err = {0};
        rc_model *m = rc_model_create(presets[k], 3, &err);
        CHECKF(m && rc_params_to(m->params, be, &err) == 0, "%s on %s: %s", presets[k], rc_backend_name(be), err.msg);
        int64_t n0 = 0, n1 = 0, n2 = 0;
        size_t p0 = 0, p1 = 0, p2 = 0;
        float *plain = m ? model_grads(be, m, 0, &n0, &p0) : NULL;
        float *each = m ? model_grads(be, m, 1, &n1, &p1) : NULL;
        float *pairs = m ? model_grads(be, m, 2, &n2, &p2) : NULL;
        CHECKF(plain && each && pairs && n0 == n1 && n0 == n2 && !memcmp(plain, each, (size_t)n0 * sizeof *plain) &&
                   !memcmp(plain, pairs, (size_t)n0 * sizeof *plain),
               "%s on %s: loss and gradients with recomputation are not bitwise those without", presets[k],
               rc_backend_name(be));
        printf("%-10s on %s: loss and %lld gradient values bitwise equal; arena %zu bytes, %zu recomputing "
               "each block, %zu every 2\n", presets[k], rc_backend_name(be), (long long)n0 - 1, p0, p1, p2);
        free(plain);
        free(each);
        free(pairs);
        rc_model_free(m);
    }
}

/* a deeper model whose activations outweigh its weights: the activation peak falls with
 * recomputation */
static void test_peak(void)
{
    rc_error err = {0};
    rc_model_config c;
    rc_model *m = NULL;
    if (rc_config_preset("tiny-gpt2", &c, &err) == 0) {
        c.n_layer = 8;
        c.vocab_size = 64;
        m = rc_model_from_config(&c, 3, &err);
    }
    int64_t n0, n1;
    size_t p0 = 0, p1 = 0;
    rc_backend *cpu = rc_device_open("cpu", 0, NULL);
    float *a = m ? model_grads(cpu, m, 0, &n0, &p0) : NULL, *b = m ? model_grads(cpu, m, 1, &n1, &p1) : NULL;
    size_t params = m ? (size_t)rc_params_numel(m->params) * sizeof(float) : 0;
    /* the arena holds the gradients (outputs) too: compare what is left, the activations */
    CHECKF(a && b && !memcmp(a, b, (size_t)n0 * sizeof *a) && 2 * (p1 - params) < p0 - params,
           "8-block gpt2: arena %zu with recomputation, %zu without (activations should halve at least)", p1, p0);
    printf("8-block gpt2 B=%d T=%d: activations %.2f MiB without recomputation, %.2f MiB with (%.1fx smaller)\n", B,
           T, (double)(p0 - params) / (1 << 20), (double)(p1 - params) / (1 << 20),
           (double)(p0 - params) / (double)(p1 - params));
    free(a);
    free(b);
    rc_model_free(m);
}

/* a user's graph on backend be: a segment with dropout, recomputed with the same mask */
static void test_dropout(rc_backend *be)
{
    float xv[8 * 6], wv[6 * 6];
    for (int i = 0; i < 48; i++)
        xv[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    for (int i = 0; i < 36; i++)
        wv[i] = (float)((i * 5) % 13) / 6.0f - 1.0f;
    float got[2][1 + 36];
    for (int remat = 0; remat < 2; remat++) {
        rc_graph *g = rc_graph_new();
        rc_tensor *x = rc_const(g, "x", RC_F32, 2, (int64_t[]){8, 6}, xv);
        rc_tensor *w = rc_param(g, "w", RC_F32, 2, (int64_t[]){6, 6});
        if (remat)
            CHECK(rc_remat_begin(g) == 0);
        rc_tensor *h = rc_dropout(g, rc_tanh(g, rc_matmul(g, x, w, 0, 0)), 0.4, rc_rng_new(9));
        h = rc_mul(g, h, rc_tanh(g, h));
        if (remat)
            CHECK(rc_remat_end(g) == 0 && rc_remat_end(g) == -1 && rc_graph_error(g));
        if (remat) { /* the check above recorded an error: start again without it */
            rc_graph_free(g);
            g = rc_graph_new();
            x = rc_const(g, "x", RC_F32, 2, (int64_t[]){8, 6}, xv);
            w = rc_param(g, "w", RC_F32, 2, (int64_t[]){6, 6});
            rc_remat_begin(g);
            h = rc_dropout(g, rc_tanh(g, rc_matmul(g, x, w, 0, 0)), 0.4, rc_rng_new(9));
            h = rc_mul(g, h, rc_tanh(g, h));
            rc_remat_end(g);
        }
        rc_tensor *loss = rc_mean_all(g, h), *dw;
        rc_backward(g, loss, &w, 1, &dw);
        rc_tensor *outs[2] = {loss, dw};
        rc_error err = {0};
        rc_plan *p = rc_plan_new_on(be, g, outs, 2, &err);
        if (p)
            rc_plan_set_rng(p, rc_rng_new(4));
        CHECKF(p && rc_plan_set_input(p, w, wv, &err) == 0 && rc_plan_run(p, &err) == 0 &&
                   rc_plan_read(p, loss, got[remat], &err) == 0 && rc_plan_read(p, dw, got[remat] + 1, &err) == 0,
               "dropout remat %d on %s: %s", remat, rc_backend_name(be), err.msg);
        rc_plan_free(p);
        rc_graph_free(g);
    }
    CHECKF(!memcmp(got[0], got[1], sizeof got[0]), "dropout on %s: recomputation changed the loss or gradient",
           rc_backend_name(be));
    printf("dropout inside a recomputed segment on %s: the same mask, loss %.6f and gradient bitwise equal\n",
           rc_backend_name(be), got[0][0]);
    rc_graph *g = rc_graph_new();
    CHECK(rc_remat_begin(g) == 0 && rc_remat_begin(g) == -1 && strstr(rc_graph_error(g), "nest"));
    rc_graph_free(g);
}

/* the same checks on the OpenCL device, or why they did not run */
static void test_opencl(void)
{
    rc_backend *be = check_opencl("test_remat's OpenCL part");
    if (!be)
        return;
    test_families(be);
    test_dropout(be);
}

int main(void)
{
    rc_set_threads(2);
    test_families(rc_device_open("cpu", 0, NULL));
    test_peak();
    test_dropout(rc_device_open("cpu", 0, NULL));
    test_opencl();
    return check_summary("test_remat");
}
