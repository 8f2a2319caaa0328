/* test_device_train.c - the Trainer on an OpenCL device: the Deployer's device moves the
 * parameters there, the gradients, AdamW moments and every step stay there, and five steps
 * of a small MLP (AdamW, clipping, weight decay, gradient accumulation) end with the same
 * weights as on the CPU (per tensor, 1e-5). Also: an unknown device name is one clear
 * error, and a model whose ops the device lacks fails when its step is built, naming the op.
 *
 * Without an OpenCL device the test prints why and passes, unless REDCO_REQUIRE_OPENCL=1
 * (CI sets it): then it fails. */
#include "check.h"
#include "redco/device.h"
#include "redco/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 48, IN = 5, HID = 16, B = 6 };

static float xs[N * IN], ys[N];

static int64_t count(int epoch, void *user)
{
    (void)epoch, (void)user;
    return N;
}

/* x [n, IN], y [n, 1] */
static int collate(rc_batch *out, const int64_t *ex, int n, void *user, rc_error *err)
{
    (void)user;
    float *x = rc_batch_add(out, "x", RC_F32, 2, (int64_t[]){n, IN});
    float *y = rc_batch_add(out, "y", RC_F32, 2, (int64_t[]){n, 1});
    if (!x || !y)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int i = 0; i < n; i++) {
        memcpy(x + i * IN, xs + ex[i] * IN, IN * sizeof *x);
        y[i] = ys[ex[i]];
    }
    return 0;
}

/* mean((tanh(x W1 + b1) W2 + b2 - y)^2) */
static rc_tensor *mse(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)rng, (void)user, (void)err;
    rc_tensor *h = rc_tanh(g, rc_add(g, rc_matmul(g, rc_batch_input(g, b, "x"), rc_params_get(g, p, "w1"), 0, 0),
                                     rc_params_get(g, p, "b1")));
    rc_tensor *out = rc_add(g, rc_matmul(g, h, rc_params_get(g, p, "w2"), 0, 0), rc_params_get(g, p, "b2"));
    rc_tensor *d = rc_sub(g, out, rc_batch_input(g, b, "y"));
    return rc_mean_all(g, rc_mul(g, d, d));
}

/* a loss with a softmax: an op the device may lack */
static rc_tensor *with_softmax(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    rc_tensor *h = rc_matmul(g, rc_batch_input(g, b, "x"), rc_params_get(g, p, "w1"), 0, 0);
    (void)rng, (void)user, (void)err;
    return rc_mean_all(g, rc_softmax(g, h));
}

static rc_params *mlp(void)
{
    rc_params *p = rc_params_new();
    rc_params_add(p, "w1", 2, (int64_t[]){IN, HID});
    rc_params_add_init(p, "b1", 1, (int64_t[]){HID}, &(rc_init){.kind = RC_INIT_NORMAL, .std = 0.1});
    rc_params_add(p, "w2", 2, (int64_t[]){HID, 1});
    rc_params_add(p, "b2", 1, (int64_t[]){1});
    if (rc_params_init_normal(p, 0.5, 3)) {
        rc_params_free(p);
        return NULL;
    }
    return p;
}

/* five optimizer steps on device `device`; the final weights into w (prefix "") */
static int train_on(const char *device, check_weights *w, rc_error *err)
{
    rc_deployer_options dopt = {.seed = 7, .mp = 1, .local = 1, .device = device};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &dopt, err);
    rc_params *p = d ? mlp() : NULL;
    rc_trainer *t = p ? rc_trainer_new(d, collate, mse, NULL, p, NULL, err) : NULL;
    rc_train_options o = {.steps = 5, .batch_size = B, .grad_accum = 2, .optimizer = "adamw", .lr = 0.05,
                          .weight_decay = 0.1, .grad_clip = 0.5, .shuffle = 1};
    rc_train_result r = {0};
    int rc = t ? rc_trainer_fit(t, &o, (rc_examples){count, NULL}, NULL, &r, err) : -1;
    if (!rc) {
        size_t at;
        rc_buffer *buf = rc_params_buffer(p, 0, &at);
        CHECKF(buf && rc_buffer_backend(buf) == rc_deployer_backend(d), "%s: the parameters are not on the device",
               device);
        rc = check_weights_add_params(w, "", p, 1e-5);
        printf("%s: 5 steps, loss %.6f\n", rc_backend_name(rc_deployer_backend(d)), r.loss);
    }
    rc_trainer_free(t);
    rc_params_free(p);
    rc_deployer_free(d);
    return rc;
}

static void test_same_weights(void)
{
    check_weights cpu = {0}, dev = {0};
    rc_error err = {0};
    CHECKF(train_on("cpu", &cpu, &err) == 0, "cpu: %s", err.msg);
    CHECKF(train_on("opencl:0", &dev, &err) == 0, "opencl: %s", err.msg);
    char worst[128] = "";
    double diff = check_weights_diff(&dev, &cpu, worst, sizeof worst, NULL);
    CHECKF(diff <= 1e-5, "opencl vs cpu after 5 steps: %.3g relative (%s)", diff, worst);
    printf("opencl vs cpu after 5 AdamW steps: worst tensor %s, %.2e relative\n", worst, diff);
    check_weights_free(&cpu);
    check_weights_free(&dev);
}

static void test_errors(void)
{
    rc_error err = {0};
    CHECK(rc_device_open("tpu", 0, &err) == NULL && check_has(err.msg, "tpu") && check_has(err.msg, "opencl:N"));
    CHECK(rc_device_open("opencl:x", 0, &err) == NULL && check_has(err.msg, "opencl:x"));
    rc_backend *cpu = rc_device_open("cpu", 0, &err);
    CHECK(cpu && !strcmp(rc_backend_name(cpu), "cpu") && rc_device_open("cpu", 3, &err) == cpu);
    CHECK(rc_device_open("opencl:0,0", 1, &err) == rc_device_open("opencl:0", 0, &err));
    /* a softmax on a device without that kernel: the step fails when it is built, naming it */
    rc_deployer_options dopt = {.seed = 7, .mp = 1, .local = 1, .device = "opencl:0"};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &dopt, &err);
    rc_params *p = mlp();
    rc_trainer *t = d && p ? rc_trainer_new(d, collate, with_softmax, NULL, p, NULL, &err) : NULL;
    rc_train_options o = {.steps = 1, .batch_size = B, .optimizer = "sgd", .lr = 0.1};
    rc_backend *be = d ? rc_deployer_backend(d) : NULL;
    int has_softmax = 0;
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", RC_F32, 2, (int64_t[]){2, 3}), *s = rc_softmax(g, x);
    rc_plan *probe = rc_plan_new_on(be, g, &s, 1, NULL);
    has_softmax = probe != NULL;
    rc_plan_free(probe);
    rc_graph_free(g);
    int rc = t ? rc_trainer_fit(t, &o, (rc_examples){count, NULL}, NULL, NULL, &err) : -1;
    if (has_softmax)
        CHECKF(rc == 0, "a softmax loss on %s: %s", rc_backend_name(be), err.msg);
    else
        CHECKF(rc == -1 && check_has(err.msg, "softmax") && check_has(err.msg, "opencl"),
               "a missing kernel is named when the step is built: %s", err.msg);
    rc_trainer_free(t);
    rc_params_free(p);
    rc_deployer_free(d);
}

/* More than the device holds: one error naming what was being allocated, the bytes, and
 * what to try; nothing is left allocated. */
static void test_out_of_memory(void)
{
    rc_error err = {0};
    rc_backend *gpu = rc_device_open("opencl:0", 0, &err);
    size_t used0, used1;
    rc_backend_memory(gpu, NULL, &used0, NULL);
    rc_params *p = rc_params_new();
    rc_params_add(p, "huge", 2, (int64_t[]){1 << 17, 1 << 16}); /* 32 GiB */
    CHECK(p && rc_params_to(p, gpu, &err) == 0); /* not allocated yet: it will be there */
    CHECK(rc_params_buffer(p, 0, NULL) == NULL);
    CHECK(rc_params_read(p, 0, NULL, &err) == -1 && check_has(err.msg, "parameters") &&
          check_has(err.msg, "8589934592 floats") && check_has(err.msg, "--mp"));
    printf("parameters too large: %s\n", err.msg);
    rc_params_free(p);
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "x", RC_F32, 2, (int64_t[]){1 << 17, 1 << 16});
    rc_tensor *y = rc_tanh(g, x);
    err = (rc_error){0};
    rc_plan *plan = rc_plan_new_on(gpu, g, &y, 1, &err);
    CHECK(plan == NULL && check_has(err.msg, "arena") && check_has(err.msg, "--mp"));
    printf("activations too large: %s\n", err.msg);
    rc_graph_free(g);
    rc_backend_memory(gpu, NULL, &used1, NULL);
    CHECK(used1 == used0);
}

/* parameters on the device read by a CPU plan: one error naming both, never a crash */
static void test_foreign_buffer(void)
{
    rc_error err = {0};
    rc_backend *gpu = rc_device_open("opencl:0", 0, &err);
    rc_params *p = mlp();
    CHECK(p && rc_params_to(p, gpu, &err) == 0);
    rc_graph *g = rc_graph_new();
    rc_tensor *y = rc_tanh(g, rc_params_get(g, p, "w1"));
    rc_plan *plan = rc_plan_new(g, &y, 1, &err);
    CHECK(plan && rc_plan_run(plan, &err) == -1 && check_has(err.msg, "w1") && check_has(err.msg, "opencl:0") &&
          check_has(err.msg, "cpu plan"));
    printf("a device buffer in a CPU plan: %s\n", err.msg);
    rc_plan_free(plan);
    rc_graph_free(g);
    rc_params_free(p);
}

int main(void)
{
    rc_set_threads(2);
    if (!check_opencl("test_device_train"))
        return check_summary("test_device_train");
    rc_rng r = rc_rng_new(11);
    for (int i = 0; i < N * IN; i++)
        xs[i] = (float)rc_rng_normal(&r);
    for (int i = 0; i < N; i++)
        ys[i] = (float)(xs[i * IN] * xs[i * IN + 1] - 0.5 * xs[i * IN + 2]);
    test_same_weights();
    test_errors();
    test_out_of_memory();
    test_foreign_buffer();
    return check_summary("test_device_train");
}
