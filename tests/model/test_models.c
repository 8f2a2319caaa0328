/* test_models.c - the model families.
 *
 *   test_models                   self-contained checks (save/load round trip, errors)
 *   test_models --compare DIR     compares redco with a reference written by
 *                                 tests/ref/test_models_ref.py: DIR holds a Hugging Face
 *                                 model and ref.safetensors with input_ids, labels,
 *                                 [encoder_ids,] logits, loss and grad.NAME per parameter
 *   test_models --resave DIR OUT  loads DIR and saves it to OUT
 */
#include "check.h"
#include "redco/device.h"
#include "nn.h"
#include "redco/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* max |a - b| / max(max |b|, floor): the error relative to the reference's scale. The
 * floor keeps gradients that are zero in exact arithmetic (a key bias under softmax)
 * from dividing rounding noise by rounding noise. */
static double rel_err_floor(const float *a, const float *b, int64_t n, double floor)
{
    double num = 0, den = floor;
    for (int64_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return num / (den > 0 ? den : 1);
}

static double rel_err(const float *a, const float *b, int64_t n)
{
    return rel_err_floor(a, b, n, 0);
}

static double max_abs(const float *x, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)x[i]));
    return m;
}

static rc_tensor *ref_ids(rc_graph *g, rc_safetensors *ref, const char *name)
{
    int i = rc_safetensors_find(ref, name);
    if (i < 0)
        return NULL;
    const rc_st_tensor *t = rc_safetensors_info(ref, i);
    if (strcmp(t->dtype_name, "I32") || t->ndim != 2)
        return NULL;
    return rc_const(g, name, RC_I32, 2, t->shape, rc_safetensors_data(ref, i));
}

static float *ref_f32(rc_safetensors *ref, const char *name, int64_t numel)
{
    int i = rc_safetensors_find(ref, name);
    rc_error err = {0};
    float *x = i >= 0 ? malloc((size_t)numel * sizeof *x) : NULL;
    if (x && rc_safetensors_read_f32(ref, i, x, numel, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        free(x);
        return NULL;
    }
    return x;
}

/* t's values after a run, copied out (malloc'ed; NULL on failure) */
static float *values(rc_plan *p, const rc_tensor *t)
{
    float *x = malloc(rc_tensor_nbytes(t) ? rc_tensor_nbytes(t) : 1);
    if (x && rc_plan_read(p, t, x, NULL)) {
        free(x);
        return NULL;
    }
    return x;
}

/* every weight copied out, flat */
static float *weights_flat(const rci_nn_weights *w)
{
    float *x = malloc((size_t)(w->numel ? w->numel : 1) * sizeof *x);
    if (x && rc_buffer_download(w->buf, 0, x, (size_t)w->numel * sizeof *x, NULL)) {
        free(x);
        return NULL;
    }
    return x;
}

static int compare(const char *dir)
{
    rc_model_config c;
    rci_nn_weights w;
    rc_error err = {0};
    char path[4096];
    if (rci_nn_model_load(dir, &c, &w, rc_device_open("cpu", 0, NULL), &err)) {
        fprintf(stderr, "load: %s\n", err.msg);
        return 1;
    }
    snprintf(path, sizeof path, "%s/ref.safetensors", dir);
    rc_safetensors *ref = rc_safetensors_open(path, &err);
    CHECKF(ref != NULL, "%s", err.msg);
    if (!ref)
        return check_summary("test_models --compare");
    rc_graph *g = rc_graph_new();
    rc_tensor **p = calloc((size_t)w.n, sizeof *p), **grads = calloc((size_t)w.n, sizeof *grads);
    rci_nn_model_leaves(g, &w, p);
    rci_nn_inputs in = {.ids = ref_ids(g, ref, "input_ids"), .enc_ids = ref_ids(g, ref, "encoder_ids")};
    rc_tensor *labels = ref_ids(g, ref, "labels");
    rc_tensor *logits = rci_nn_model_logits(g, &c, &w, p, &in);
    rc_tensor *loss = rc_cross_entropy(g, logits, labels, -100);
    rc_backward(g, loss, p, w.n, grads);
    CHECKF(!rc_graph_error(g), "%s", rc_graph_error(g));
    rc_tensor **outs = calloc((size_t)w.n + 2, sizeof *outs);
    outs[0] = logits;
    outs[1] = loss;
    memcpy(outs + 2, grads, (size_t)w.n * sizeof *grads);
    rc_plan *plan = rc_graph_error(g) ? NULL : rc_plan_new(g, outs, w.n + 2, &err);
    if (plan && rc_plan_run(plan, &err) == 0) {
        int64_t n = rc_tensor_numel(logits);
        float *want = ref_f32(ref, "logits", n), *want_loss = ref_f32(ref, "loss", 1);
        float *got = values(plan, logits), *got_loss = values(plan, loss);
        double e = want && got ? rel_err(got, want, n) : INFINITY;
        double el = want_loss && got_loss ? rel_err(got_loss, want_loss, 1) : INFINITY;
        CHECKF(e < 1e-5, "%s logits: relative error %.3g", c.model_type, e);
        CHECKF(el < 1e-5, "%s loss: relative error %.3g", c.model_type, el);
        printf("%s: logits %s rel err %.2e, loss %.6f rel err %.2e\n", dir, c.model_type, e,
               got_loss ? got_loss[0] : NAN, el);
        free(got);
        free(got_loss);
        double worst = 0, scale = 0;
        const char *worst_name = "";
        float **want_grads = calloc((size_t)w.n, sizeof *want_grads);
        for (int i = 0; i < w.n; i++) {
            char name[160];
            snprintf(name, sizeof name, "grad.%s", w.p[i].name);
            want_grads[i] = ref_f32(ref, name, w.p[i].numel);
            if (want_grads[i])
                scale = fmax(scale, max_abs(want_grads[i], w.p[i].numel));
        }
        for (int i = 0; i < w.n; i++) {
            float *gw = want_grads[i], *gg = values(plan, grads[i]);
            double eg = gw && gg ? rel_err_floor(gg, gw, w.p[i].numel, 1e-3 * scale) : INFINITY;
            free(gg);
            CHECKF(eg < 1e-4, "gradient of %s: relative error %.3g%s", w.p[i].name, eg,
                   gw ? "" : " (missing from the reference)");
            if (eg > worst) {
                worst = eg;
                worst_name = w.p[i].name;
            }
            free(gw);
        }
        free(want_grads);
        printf("%s: %d parameter gradients, worst rel err %.2e (%s)\n", dir, w.n, worst, worst_name);
        free(want);
        free(want_loss);
    } else {
        CHECKF(0, "plan/run: %s", err.msg);
    }
    rc_plan_free(plan);
    rc_graph_free(g);
    rc_safetensors_close(ref);
    rci_nn_weights_free(&w);
    free(p), free(grads), free(outs);
    return check_summary("test_models --compare");
}

static int resave(const char *dir, const char *out)
{
    rc_model_config c;
    rci_nn_weights w;
    rc_error err = {0};
    if (rci_nn_model_load(dir, &c, &w, rc_device_open("cpu", 0, NULL), &err) || rci_nn_model_save(out, &c, &w, &err)) {
        fprintf(stderr, "resave: %s\n", err.msg);
        return 1;
    }
    rci_nn_weights_free(&w);
    return 0;
}

static const char *const tiny[] = {"tiny-gpt2", "tiny-llama", "tiny-opt", "tiny-gptj", "tiny-t5"};

/* A preset with random weights: config and allocated, initialised weights. */
static int make_model(const char *preset, rc_model_config *c, rci_nn_weights *w)
{
    rc_error err = {0};
    memset(w, 0, sizeof *w);
    if (rc_config_preset(preset, c, &err) || rci_nn_model_weights(c, w, &err) ||
        rci_nn_weights_alloc(w, rc_device_open("cpu", 0, NULL), &err) || rci_nn_model_init(c, w, 7, &err)) {
        CHECKF(0, "%s: %s", preset, err.msg);
        return -1;
    }
    return 0;
}

/* load(save(model)) has the same config sizes and bit-identical tensors */
static void test_round_trip(const char *tmp)
{
    for (size_t k = 0; k < sizeof tiny / sizeof tiny[0]; k++) {
        rc_model_config c, c2;
        rci_nn_weights w, w2;
        rc_error err = {0};
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/%s", tmp, tiny[k]);
        if (make_model(tiny[k], &c, &w))
            continue;
        CHECKF(rci_nn_model_save(dir, &c, &w, &err) == 0, "%s", err.msg);
        CHECKF(rci_nn_model_load(dir, &c2, &w2, rc_device_open("cpu", 0, NULL), &err) == 0, "%s", err.msg);
        if (err.code) {
            rci_nn_weights_free(&w);
            continue;
        }
        CHECK(c2.type == c.type && c2.d_model == c.d_model && c2.n_layer == c.n_layer &&
              c2.n_kv_head == c.n_kv_head && c2.vocab_size == c.vocab_size);
        float *a = weights_flat(&w), *b = weights_flat(&w2);
        CHECK(a && b && w2.n == w.n && w2.numel == w.numel && !memcmp(a, b, (size_t)w.numel * sizeof *a));
        free(a);
        free(b);
        rci_nn_weights_free(&w);
        rci_nn_weights_free(&w2);
    }
}

/* logits of the last token: run the whole sequence, or the prefix then one token with
 * the key/value cache; both must agree */
static void test_kv_cache(void)
{
    enum { T = 6 };
    for (size_t k = 0; k < sizeof tiny / sizeof tiny[0]; k++) {
        rc_model_config c;
        rci_nn_weights w;
        if (!strcmp(tiny[k], "tiny-t5") || make_model(tiny[k], &c, &w))
            continue;
        int32_t ids[T] = {5, 17, 3, 99, 42, 7};
        rc_graph *g = rc_graph_new();
        rc_tensor **p = calloc((size_t)w.n, sizeof *p), **kv = calloc(2 * (size_t)c.n_layer, sizeof *kv);
        rci_nn_model_leaves(g, &w, p);
        rci_nn_inputs full = {.ids = rc_const(g, "ids", RC_I32, 2, (int64_t[]){1, T}, ids)};
        rc_tensor *lf = rci_nn_model_logits(g, &c, &w, p, &full);
        rci_nn_inputs prefix = {.ids = rc_const(g, "ids", RC_I32, 2, (int64_t[]){1, T - 1}, ids), .new_kv = kv};
        rci_nn_model_logits(g, &c, &w, p, &prefix);
        rci_nn_inputs step = {.ids = rc_const(g, "ids", RC_I32, 2, (int64_t[]){1, 1}, ids + T - 1),
                          .past = T - 1, .past_kv = kv};
        rc_tensor *ls = rci_nn_model_logits(g, &c, &w, p, &step);
        CHECKF(!rc_graph_error(g), "%s: %s", tiny[k], rc_graph_error(g));
        rc_error err = {0};
        rc_tensor *outs[2] = {lf, ls};
        rc_plan *plan = rc_graph_error(g) ? NULL : rc_plan_new(g, outs, 2, &err);
        if (plan && rc_plan_run(plan, &err) == 0) {
            int64_t v = c.vocab_size;
            float *vs = values(plan, ls), *vf = values(plan, lf);
            double e = vs && vf ? rel_err(vs, vf + (T - 1) * v, v) : INFINITY;
            free(vs);
            free(vf);
            CHECKF(e < 1e-5, "%s: cached decoding differs by %.3g", tiny[k], e);
        } else {
            CHECKF(0, "%s: %s", tiny[k], err.msg);
        }
        rc_plan_free(plan);
        rc_graph_free(g);
        free(p);
        free(kv);
        rci_nn_weights_free(&w);
    }
}

/* a missing parameter, a wrong shape and an unused tensor name the tensor and file */
static void test_load_errors(const char *tmp)
{
    rc_model_config c, c2;
    rci_nn_weights w, w2;
    rc_error err = {0};
    char dir[4200], path[4300];
    if (make_model("tiny-gpt2", &c, &w))
        return;
    snprintf(dir, sizeof dir, "%s/broken", tmp);
    CHECK(rci_nn_model_save(dir, &c, &w, &err) == 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *names[2] = {"transformer.wte.weight", "extra.weight"};
    int ndims[2] = {2, 1};
    int64_t s0[2] = {c.vocab_size, c.d_model}, s1[1] = {3};
    const int64_t *shapes[2] = {s0, s1};
    float *zeros = calloc((size_t)(c.vocab_size * c.d_model), sizeof *zeros);
    const float *data[2] = {zeros, zeros};
    /* only one tensor: everything else is missing */
    CHECK(rc_safetensors_write(path, 1, names, ndims, shapes, data, 0, NULL, &err) == 0);
    CHECK(rci_nn_model_load(dir, &c2, &w2, rc_device_open("cpu", 0, NULL), &err) == -1 && strstr(err.msg, "missing") &&
          strstr(err.msg, "wpe.weight"));
    /* a wrong shape */
    err = (rc_error){0};
    snprintf(path, sizeof path, "%s/other", tmp);
    rc_model_config wide = c;
    wide.d_model = c.d_model + 4;
    wide.n_head = 1;
    wide.head_dim = wide.d_model;
    rci_nn_weights ww = {0};
    CHECK(rci_nn_model_weights(&wide, &ww, &err) == 0 && rci_nn_weights_alloc(&ww, rc_device_open("cpu", 0, NULL), &err) == 0);
    CHECK(rci_nn_model_save(path, &c, &ww, &err) == 0); /* config of c, tensors of `wide` */
    err = (rc_error){0};
    CHECK(rci_nn_model_load(path, &c2, &w2, rc_device_open("cpu", 0, NULL), &err) == -1 && strstr(err.msg, "shape") &&
          strstr(err.msg, "transformer.wte.weight") && strstr(err.msg, "model.safetensors"));
    /* an extra tensor the model does not use */
    snprintf(path, sizeof path, "%s/extra", tmp);
    CHECK(rci_nn_model_save(path, &c, &w, &err) == 0);
    rci_nn_weights plus = w;
    plus.p = calloc((size_t)w.n + 1, sizeof *plus.p);
    memcpy(plus.p, w.p, (size_t)w.n * sizeof *plus.p);
    plus.p[w.n] = w.p[w.n - 1];
    snprintf(plus.p[w.n].name, sizeof plus.p[w.n].name, "transformer.h.9.mystery.weight");
    plus.n = w.n + 1;
    CHECK(rci_nn_model_save(path, &c, &plus, &err) == 0);
    err = (rc_error){0};
    CHECK(rci_nn_model_load(path, &c2, &w2, rc_device_open("cpu", 0, NULL), &err) == -1 && strstr(err.msg, "mystery"));
    free(plus.p);
    free(zeros);
    rci_nn_weights_free(&ww);
    rci_nn_weights_free(&w);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--compare"))
        return compare(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "--resave"))
        return resave(argv[2], argv[3]);
    char tmp[] = "/tmp/redco-models-XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    test_round_trip(tmp);
    test_kv_cache();
    test_load_errors(tmp);
    check_rm_tree(tmp);
    CHECK(access(tmp, F_OK) != 0);
    return check_summary("test_models");
}
