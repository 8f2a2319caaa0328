/* test_models.c - the model families.
 *
 *   test_models                   self-contained checks (save/load round trip, errors)
 *   test_models --compare DIR     compares redco with a reference written by
 *                                 tests/ref/test_models_ref.py: DIR holds a Hugging Face
 *                                 model and ref.safetensors with input_ids, labels,
 *                                 [encoder_ids,] logits, loss and grad.NAME per parameter
 *   test_models --compare-train DIR   the same for a training step's graph (the config's
 *                                 dropout), attention unfused and fused
 *   test_models --dropout-masks DIR   writes DIR/masks.safetensors: the factors of the
 *                                 training graph's dropout sites, for the reference to apply
 *   test_models --resave DIR OUT  loads DIR and saves it to OUT
 */
#include "check.h"
#include "redco/device.h"
#include "internal.h"
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

/* DIR's model on the inputs of DIR/ref.safetensors recorded into a graph: the logits, the
 * LM loss and every parameter's gradient; training: a training step's graph (the config's
 * dropout, rc_graph_set_training), whose forward DROPOUT nodes are kept in drop[] in
 * recording order (with unfused attention, the probabilities' too). */
typedef struct {
    rc_model_config c;
    rci_nn_weights w;
    rc_safetensors *ref;
    rc_graph *g;
    rc_tensor **p, **grads, *logits, *loss;
    rc_tensor **drop;
    int n_drop;
} recorded;

static void recorded_free(recorded *r)
{
    rc_graph_free(r->g);
    rc_safetensors_close(r->ref);
    rci_nn_weights_free(&r->w);
    free(r->p), free(r->grads), free(r->drop);
}

static int record(recorded *r, const char *dir, int training)
{
    rc_error err = {0};
    char path[4096];
    memset(r, 0, sizeof *r);
    if (rci_nn_model_load(dir, &r->c, &r->w, rc_device_open("cpu", 0, NULL), &err)) {
        CHECKF(0, "load: %s", err.msg);
        return -1;
    }
    snprintf(path, sizeof path, "%s/ref.safetensors", dir);
    r->ref = rc_safetensors_open(path, &err);
    CHECKF(r->ref != NULL, "%s", err.msg);
    r->g = rc_graph_new();
    r->p = calloc((size_t)r->w.n, sizeof *r->p);
    r->grads = calloc((size_t)r->w.n, sizeof *r->grads);
    if (!r->ref || !r->g || !r->p || !r->grads)
        return -1;
    rc_graph *g = r->g;
    rc_graph_set_training(g, training);
    rci_nn_model_leaves(g, &r->w, r->p);
    rci_nn_inputs in = {.ids = ref_ids(g, r->ref, "input_ids"), .enc_ids = ref_ids(g, r->ref, "encoder_ids")};
    rc_tensor *labels = ref_ids(g, r->ref, "labels");
    r->logits = rci_nn_model_logits(g, &r->c, &r->w, r->p, &in);
    r->drop = calloc((size_t)rc_graph_size(g) + 1, sizeof *r->drop);
    for (int i = 0; r->drop && i < rc_graph_size(g); i++)
        if (rc_graph_node(g, i)->op == RC_OP_DROPOUT)
            r->drop[r->n_drop++] = rc_graph_node(g, i);
    r->loss = rc_cross_entropy(g, r->logits, labels, -100);
    rc_backward(g, r->loss, r->p, r->w.n, r->grads);
    CHECKF(!rc_graph_error(g), "%s", rc_graph_error(g));
    return rc_graph_error(g) || !r->drop ? -1 : 0;
}

/* redco's logits, loss and gradients against ref.safetensors's */
static void compare_run(const char *dir, int training)
{
    recorded r;
    rc_error err = {0};
    const char *how = !training ? "eval" : rc_get_fused_attention() ? "train, fused attention" : "train, unfused attention";
    if (record(&r, dir, training)) {
        recorded_free(&r);
        return;
    }
    rci_nn_weights *w = &r.w;
    rc_tensor **outs = calloc((size_t)w->n + 2, sizeof *outs);
    outs[0] = r.logits;
    outs[1] = r.loss;
    memcpy(outs + 2, r.grads, (size_t)w->n * sizeof *r.grads);
    rc_plan *plan = rc_plan_new(r.g, outs, w->n + 2, &err);
    if (plan && rc_plan_run(plan, &err) == 0) {
        int64_t n = rc_tensor_numel(r.logits);
        float *want = ref_f32(r.ref, "logits", n), *want_loss = ref_f32(r.ref, "loss", 1);
        float *got = values(plan, r.logits), *got_loss = values(plan, r.loss);
        double e = want && got ? rel_err(got, want, n) : INFINITY;
        double el = want_loss && got_loss ? rel_err(got_loss, want_loss, 1) : INFINITY;
        CHECKF(e < 1e-5, "%s (%s) logits: relative error %.3g", r.c.model_type, how, e);
        CHECKF(el < 1e-5, "%s (%s) loss: relative error %.3g", r.c.model_type, how, el);
        printf("%s (%s): logits %s rel err %.2e, loss %.6f rel err %.2e\n", dir, how, r.c.model_type, e,
               got_loss ? got_loss[0] : NAN, el);
        free(got);
        free(got_loss);
        double worst = 0, scale = 0;
        const char *worst_name = "";
        float **want_grads = calloc((size_t)w->n, sizeof *want_grads);
        for (int i = 0; i < w->n; i++) {
            char name[160];
            snprintf(name, sizeof name, "grad.%s", w->p[i].name);
            want_grads[i] = ref_f32(r.ref, name, w->p[i].numel);
            if (want_grads[i])
                scale = fmax(scale, max_abs(want_grads[i], w->p[i].numel));
        }
        for (int i = 0; i < w->n; i++) {
            float *gw = want_grads[i], *gg = values(plan, r.grads[i]);
            double eg = gw && gg ? rel_err_floor(gg, gw, w->p[i].numel, 1e-3 * scale) : INFINITY;
            free(gg);
            CHECKF(eg < 1e-4, "(%s) gradient of %s: relative error %.3g%s", how, w->p[i].name, eg,
                   gw ? "" : " (missing from the reference)");
            if (eg > worst) {
                worst = eg;
                worst_name = w->p[i].name;
            }
            free(gw);
        }
        free(want_grads);
        printf("%s (%s): %d parameter gradients, worst rel err %.2e (%s)\n", dir, how, w->n, worst, worst_name);
        free(want);
        free(want_loss);
    } else {
        CHECKF(0, "plan/run: %s", err.msg);
    }
    rc_plan_free(plan);
    free(outs);
    recorded_free(&r);
}

/* --compare: the eval graph; --compare-train: the training graph, its attention unfused and
 * fused (the same masks) */
static int compare(const char *dir, int training)
{
    if (!training)
        compare_run(dir, 0);
    for (int fused = 0; training && fused <= 1; fused++) {
        rc_set_fused_attention(fused);
        compare_run(dir, 1);
    }
    return check_summary(training ? "test_models --compare-train" : "test_models --compare");
}

/* --dropout-masks: the factors (0 or 1 / (1 - p)) that the training graph's dropout sites
 * multiply by, in recording order, into DIR/masks.safetensors as mask.0, mask.1, ...: each
 * the site's own node (its key and probability) applied to ones, with attention unfused so
 * that the probabilities' dropout is a node too. The reference applies them where
 * transformers drops. */
static int dropout_masks(const char *dir)
{
    recorded r;
    rc_error err = {0};
    rc_set_fused_attention(0);
    if (record(&r, dir, 1)) {
        recorded_free(&r);
        return check_summary("test_models --dropout-masks");
    }
    int n = r.n_drop;
    rc_tensor **m = calloc((size_t)n + 1, sizeof *m);
    for (int k = 0; m && k < n; k++) {
        rc_tensor *d = r.drop[k], *ones = rc_full(r.g, RC_F32, d->ndim, d->shape, 1.0);
        m[k] = rci_node_new(r.g, RC_OP_DROPOUT, RC_F32, d->ndim, d->shape, 1, &ones);
        memcpy(m[k]->iparam, d->iparam, sizeof d->iparam);
        memcpy(m[k]->fparam, d->fparam, sizeof d->fparam);
    }
    rc_plan *plan = m && n ? rc_plan_new(r.g, m, n, &err) : NULL;
    CHECKF(n > 0, "%s: the training graph has no dropout", dir);
    CHECKF(!n || (plan && rc_plan_run(plan, &err) == 0), "plan/run: %s", err.msg);
    rc_st_entry *e = calloc((size_t)n + 1, sizeof *e);
    char (*names)[32] = calloc((size_t)n + 1, sizeof *names);
    for (int k = 0; plan && e && names && k < n; k++) {
        snprintf(names[k], sizeof names[k], "mask.%d", k);
        e[k] = (rc_st_entry){names[k], "F32", m[k]->ndim, m[k]->shape, values(plan, m[k])};
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/masks.safetensors", dir);
    CHECKF(!plan || rc_safetensors_write_entries(path, n, e, 0, NULL, &err) == 0, "%s", err.msg);
    printf("%s: %d dropout sites\n", dir, n);
    for (int k = 0; e && k < n; k++)
        free((void *)e[k].data);
    free(e), free(names), free(m);
    rc_plan_free(plan);
    recorded_free(&r);
    return check_summary("test_models --dropout-masks");
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
        return compare(argv[2], 0);
    if (argc == 3 && !strcmp(argv[1], "--compare-train"))
        return compare(argv[2], 1);
    if (argc == 3 && !strcmp(argv[1], "--dropout-masks"))
        return dropout_masks(argv[2]);
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
