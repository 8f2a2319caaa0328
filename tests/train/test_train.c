/* test_train.c - a tiny MLP (SGD) and a tiny causal transformer LM (AdamW) built from
 * the ops must lose at least 90% of their initial loss on synthetic tasks. */
#include "check.h"
#include "redco/device.h"
#include "nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A plan for loss and the gradients of every parameter of w. */
typedef struct {
    rc_graph *g;
    rc_tensor **p, **grads, *loss;
    rc_plan *plan;
} trainer;

static int trainer_plan(trainer *t, const rci_nn_weights *w)
{
    t->grads = calloc((size_t)w->n, sizeof *t->grads);
    rc_tensor **outs = calloc((size_t)w->n + 1, sizeof *outs);
    if (rc_backward(t->g, t->loss, t->p, w->n, t->grads)) {
        fprintf(stderr, "%s\n", rc_graph_error(t->g));
        free(outs);
        return -1;
    }
    outs[0] = t->loss;
    memcpy(outs + 1, t->grads, (size_t)w->n * sizeof *outs);
    rc_error err = {0};
    t->plan = rc_plan_new(t->g, outs, w->n + 1, &err);
    free(outs);
    if (!t->plan)
        fprintf(stderr, "%s\n", err.msg);
    return t->plan ? 0 : -1;
}

/* The gradients of the last run copied into grad, laid out as w's buffer (the optimizers
 * take parameters and gradients at the same element offsets). */
static int trainer_grads(trainer *t, const rci_nn_weights *w, rc_buffer *grad, float *host)
{
    for (int i = 0; i < w->n; i++)
        if (rc_plan_read(t->plan, t->grads[i], host, NULL) ||
            rc_buffer_upload(grad, rci_nn_weights_offset(w, i), host,
                             (size_t)w->p[i].numel * sizeof *host, NULL))
            return -1;
    return 0;
}

static void trainer_free(trainer *t)
{
    rc_plan_free(t->plan);
    rc_graph_free(t->g);
    free(t->p);
    free(t->grads);
}

/* MLP 4 -> 32 -> 1 (tanh) fits a fixed random teacher of the same shape. */
static void test_mlp_sgd(void)
{
    enum { N = 64, IN = 4, HID = 32 };
    rci_nn_weights w = {0}, teacher = {0};
    const char *names[4] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
    int64_t shapes[4][2] = {{IN, HID}, {HID}, {HID, 1}, {1}};
    for (int i = 0; i < 4; i++) {
        rci_nn_weights_add(&w, names[i], shapes[i][1] ? 2 : 1, shapes[i]);
        rci_nn_weights_add(&teacher, names[i], shapes[i][1] ? 2 : 1, shapes[i]);
    }
    rc_error err = {0};
    CHECK(rci_nn_weights_alloc(&w, rc_device_open("cpu", 0, NULL), &err) == 0);
    float *start = malloc((size_t)w.numel * sizeof *start), *tw = malloc((size_t)w.numel * sizeof *tw);
    rc_rng rng = rc_rng_new(3);
    for (int64_t i = 0; i < w.numel; i++) {
        start[i] = (float)(0.3 * rc_rng_normal(&rng));
        tw[i] = (float)(0.8 * rc_rng_normal(&rng));
    }
    CHECK(rc_buffer_upload(w.buf, 0, start, (size_t)w.numel * sizeof *start, &err) == 0);
    float x[N * IN], y[N];
    for (int i = 0; i < N * IN; i++)
        x[i] = (float)rc_rng_normal(&rng);
    for (int n = 0; n < N; n++) { /* y = teacher(x) */
        const float *w1 = tw + teacher.p[0].offset, *b1 = tw + teacher.p[1].offset;
        const float *w2 = tw + teacher.p[2].offset, *b2 = tw + teacher.p[3].offset;
        double out = b2[0];
        for (int h = 0; h < HID; h++) {
            double a = b1[h];
            for (int i = 0; i < IN; i++)
                a += x[n * IN + i] * w1[i * HID + h];
            out += tanh(a) * w2[h];
        }
        y[n] = (float)out;
    }
    trainer t = {.g = rc_graph_new()};
    t.p = calloc(4, sizeof *t.p);
    rci_nn_model_leaves(t.g, &w, t.p);
    rc_tensor *xi = rc_input(t.g, "x", RC_F32, 2, (int64_t[]){N, IN});
    rc_tensor *yi = rc_input(t.g, "y", RC_F32, 2, (int64_t[]){N, 1});
    rc_tensor *h = rc_tanh(t.g, rc_add(t.g, rc_matmul(t.g, xi, t.p[0], 0, 0), t.p[1]));
    rc_tensor *d = rc_sub(t.g, rc_add(t.g, rc_matmul(t.g, h, t.p[2], 0, 0), t.p[3]), yi);
    t.loss = rc_mean_all(t.g, rc_mul(t.g, d, d));
    CHECK(trainer_plan(&t, &w) == 0);
    CHECK(t.plan && rc_plan_set_input(t.plan, xi, x, &err) == 0 && rc_plan_set_input(t.plan, yi, y, &err) == 0);
    rc_buffer *grad = rc_buffer_new(rc_device_open("cpu", 0, NULL), (size_t)w.numel * sizeof(float), &err);
    float first = 0, last = 0;
    for (int step = 0; step < 2000 && t.plan && grad; step++) {
        if (rc_plan_run(t.plan, &err) || rc_plan_read(t.plan, t.loss, &last, &err) ||
            trainer_grads(&t, &w, grad, start))
            break;
        if (step == 0)
            first = last;
        if (rc_sgd_update(w.buf, grad, 0, w.numel, 0.05, &err))
            break;
    }
    printf("mlp sgd: loss %.5f -> %.5f (%.1f%% lower)\n", first, last, 100 * (1 - last / first));
    CHECKF(err.code == 0, "%s", err.msg);
    CHECKF(first > 0 && last < 0.1f * first, "mlp loss %g -> %g", first, last);
    trainer_free(&t);
    rc_buffer_free(grad);
    free(start);
    free(tw);
    rci_nn_weights_free(&w);
    rci_nn_weights_free(&teacher);
}

/* The tiny transformer learns sequences where each token follows from the previous one by
 * a fixed random permutation: a perfect model reaches ~0 loss from ln(V). */
static void test_transformer_adamw(void)
{
    enum { V = 16, B = 8, T = 16 };
    rc_model_config cfg = rci_nn_gpt2_config(V, T, 2, 2, 32);
    rci_nn_weights w = {0};
    rc_error err = {0};
    CHECK(rci_nn_model_weights(&cfg, &w, &err) == 0 && rci_nn_weights_alloc(&w, rc_device_open("cpu", 0, NULL), &err) == 0 &&
          rci_nn_model_init(&cfg, &w, 11, &err) == 0);
    trainer t = {.g = rc_graph_new()};
    t.p = calloc((size_t)w.n, sizeof *t.p);
    rci_nn_model_leaves(t.g, &w, t.p);
    rc_tensor *ids = rc_input(t.g, "ids", RC_I32, 2, (int64_t[]){B, T});
    rc_tensor *tg = rc_input(t.g, "targets", RC_I32, 2, (int64_t[]){B, T});
    rci_nn_inputs in = {.ids = ids};
    t.loss = rc_cross_entropy(t.g, rci_nn_model_logits(t.g, &cfg, &w, t.p, &in), tg, -100);
    CHECK(trainer_plan(&t, &w) == 0);
    int32_t perm[V], xb[B * T], yb[B * T];
    rc_rng rng = rc_rng_new(5);
    for (int i = 0; i < V; i++)
        perm[i] = i;
    for (int i = V - 1; i > 0; i--) {
        int j = (int)(rc_rng_next_u64(&rng) % (uint64_t)(i + 1)), s = perm[i];
        perm[i] = perm[j];
        perm[j] = s;
    }
    size_t bytes = (size_t)w.numel * sizeof(float);
    rc_buffer *grad = rc_buffer_new(rc_device_open("cpu", 0, NULL), bytes, &err), *m = rc_buffer_new(rc_device_open("cpu", 0, NULL), bytes, &err);
    rc_buffer *v = rc_buffer_new(rc_device_open("cpu", 0, NULL), bytes, &err);
    float *host = malloc(bytes);
    CHECK(grad && m && v && host);
    rc_adam opt = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.01};
    float first = 0, last = 0;
    for (int step = 1; step <= 150 && t.plan; step++) {
        for (int b = 0; b < B; b++) {
            int32_t tok = (int32_t)(rc_rng_next_u64(&rng) % V);
            for (int i = 0; i < T; i++) {
                xb[b * T + i] = tok;
                tok = perm[tok];
                yb[b * T + i] = tok;
            }
        }
        if (!grad || !m || !v || !host || rc_plan_set_input(t.plan, ids, xb, &err) ||
            rc_plan_set_input(t.plan, tg, yb, &err) || rc_plan_run(t.plan, &err) ||
            rc_plan_read(t.plan, t.loss, &last, &err) || trainer_grads(&t, &w, grad, host))
            break;
        if (step == 1)
            first = last;
        opt.step = step;
        if (rc_adamw_update(w.buf, grad, m, v, 0, w.numel, &opt, &err))
            break;
    }
    printf("transformer adamw: loss %.4f -> %.4f (%.1f%% lower), arena %zu bytes for %lld nodes\n",
           first, last, 100 * (1 - last / first), rc_plan_get_stats(t.plan).peak_bytes,
           (long long)rc_plan_get_stats(t.plan).nodes);
    CHECKF(err.code == 0, "%s", err.msg);
    CHECKF(fabsf(first - logf(V)) < 0.5f, "initial loss %g should be near ln(%d)", first, V);
    CHECKF(last < 0.1f * first, "transformer loss %g -> %g", first, last);
    rc_buffer_free(grad);
    rc_buffer_free(m);
    rc_buffer_free(v);
    free(host);
    trainer_free(&t);
    rci_nn_weights_free(&w);
}

int main(void)
{
    rc_set_threads(2);
    test_mlp_sgd();
    test_transformer_adamw();
    return check_summary("test_train");
}
