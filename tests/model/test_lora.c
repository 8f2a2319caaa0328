/* test_lora.c - LoRA adapters (redco/lora.h) on tiny-gpt2 and tiny-llama: with B = 0 the
 * model is unchanged (bitwise); merged weights give the adapter-applied logits; a PEFT
 * directory loads back to the same logits; training the adapters leaves every base weight
 * bitwise unchanged, moves the adapters, and keeps state (gradients, moments) for the
 * adapters alone.
 *
 *   test_lora --logits MODEL ADAPTER IN OUT   writes the logits of MODEL with the PEFT
 *       adapter ADAPTER attached (not merged) for IN's "input_ids" (i32 [B, T]
 *       safetensors) to OUT's "logits" (tests/ref/test_lora_ref.py compares them with peft)
 *   test_lora --eval-metric MP      trains tiny-gpt2's adapters 2 SGD steps on MP model shards
 *       (under mpiexec -n MP) with an eval predictor and metric, printing "metric S: X" per
 *       evaluation (the predictor on the trainer's adapter and frozen base shards; the ref
 *       test compares MP 2 with 1) */
#include "check.h"
#include "lm_task.h"
#include "redco/lora.h"
#include "redco/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 16 };
static char root[64];

/* logits [B, T, vocab] of fixed ids (malloc'ed), NULL on failure */
static float *logits_of(rc_model *m, int64_t *n)
{
    int32_t ids[B * T];
    for (int i = 0; i < B * T; i++)
        ids[i] = (i * 37 + 11) % 256;
    rc_error err = {0};
    rc_graph *g = rc_graph_new();
    rc_tensor *y = rc_model_logits(g, m, rc_const(g, "ids", RC_I32, 2, (int64_t[]){B, T}, ids), NULL, NULL);
    rc_plan *p = y ? rc_plan_new(g, &y, 1, &err) : NULL;
    *n = y ? rc_tensor_numel(y) : 0;
    float *out = p ? malloc((size_t)*n * sizeof *out) : NULL;
    int ok = out && rc_plan_run(p, &err) == 0 && rc_plan_read(p, y, out, &err) == 0;
    CHECKF(ok, "logits: %s %s", rc_graph_error(g) ? rc_graph_error(g) : "", err.msg);
    rc_plan_free(p);
    rc_graph_free(g);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

static double max_rel(const float *a, const float *b, int64_t n)
{
    double worst = 0, scale = 1e-6;
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(b[i]));
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]) / scale);
    return worst;
}

/* every adapter B random (std 0.05) */
static void randomise_b(rc_lora *l)
{
    rc_params *p = rc_lora_params(l);
    rc_rng rng = rc_rng_new(9);
    for (int i = 1; i < rc_params_count(p); i += 2) {
        int64_t k = rc_params_tensor_numel(p, i);
        float *x = malloc((size_t)k * sizeof *x);
        for (int64_t j = 0; j < k; j++)
            x[j] = (float)(0.05 * rc_rng_normal(&rng));
        CHECK(rc_params_write(p, i, x, NULL) == 0);
        free(x);
    }
}

static void test_forward(const char *preset, const char *targets, int want_adapters)
{
    rc_error err = {0};
    rc_model *m = rc_model_create(preset, 1, &err);
    CHECKF(m != NULL, "%s: %s", preset, err.msg);
    if (!m)
        return;
    int64_t n = 0, n1 = 0, n2 = 0, n3 = 0;
    float *base = logits_of(m, &n);
    rc_lora *l = rc_lora_new(m, &(rc_lora_options){.r = 4, .alpha = 8, .targets = targets}, 3, &err);
    CHECKF(l != NULL, "%s: %s", preset, err.msg);
    if (!l || !base) {
        rc_model_free(m);
        free(base);
        return;
    }
    CHECKF(rc_params_count(rc_lora_params(l)) == 2 * want_adapters, "%s: %d adapter tensors, want %d", preset,
           rc_params_count(rc_lora_params(l)), 2 * want_adapters);
    CHECK(rc_lora_rank(l) == 4 && rc_lora_scaling(l) == 2.0);
    float *zero_b = logits_of(m, &n1);
    CHECKF(zero_b && n1 == n && !memcmp(zero_b, base, (size_t)n * sizeof *base),
           "%s: B = 0 changes the logits", preset);
    randomise_b(l);
    float *adapted = logits_of(m, &n2);
    CHECKF(adapted && max_rel(adapted, base, n) > 1e-3, "%s: the adapters do not change the logits", preset);
    /* a PEFT directory loads back onto a fresh copy of the model to the same logits */
    char dir[128];
    snprintf(dir, sizeof dir, "%s/%s-adapter", root, preset);
    CHECKF(rc_lora_save(l, dir, &err) == 0, "%s: save: %s", preset, err.msg);
    rc_model *m2 = rc_model_create(preset, 1, &err);
    rc_lora *l2 = m2 ? rc_lora_load(m2, dir, &err) : NULL;
    CHECKF(l2 != NULL, "%s: load: %s", preset, err.msg);
    float *loaded = l2 ? logits_of(m2, &n3) : NULL;
    CHECKF(loaded && adapted && !memcmp(loaded, adapted, (size_t)n * sizeof *loaded),
           "%s: the saved adapter gives other logits", preset);
    /* merged: the model alone computes the adapted logits */
    CHECKF(rc_lora_merge(l, &err) == 0, "%s: merge: %s", preset, err.msg);
    CHECK(m->lora == NULL);
    float *merged = logits_of(m, &n3);
    double d = merged && adapted ? max_rel(merged, adapted, n) : INFINITY;
    CHECKF(d < 1e-5, "%s: merged logits differ from the adapted ones by %g", preset, d);
    /* a wrong target names the modules there are */
    rc_lora *bad = rc_lora_new(m2, &(rc_lora_options){.r = 4, .targets = "nope"}, 3, &err);
    CHECK(bad == NULL); /* m2 has adapters attached already */
    rc_lora_free(l2);
    bad = rc_lora_new(m2, &(rc_lora_options){.r = 4, .targets = "nope"}, 3, &err);
    CHECKF(!bad && check_has(err.msg, "no module") && check_has(err.msg, "nope"), "%s: %s", preset, err.msg);
    rc_lora_free(l);
    rc_model_free(m);
    rc_model_free(m2);
    free(base), free(zero_b), free(adapted), free(loaded), free(merged);
}

/* the model's weights, flat (malloc'ed) */
static float *weights_of(rc_model *m)
{
    return check_params_flat(m->params);
}

static void test_frozen(lm_task *k, const char *preset)
{
    rc_error err = {0};
    char wd[128];
    snprintf(wd, sizeof wd, "%s/%s-train", root, preset);
    rc_deployer *d = rc_deployer_new(NULL, NULL, &(rc_deployer_options){.seed = 5, .workdir = wd}, &err);
    k->model = d ? rc_model_create(preset, 1, &err) : NULL;
    rc_lora *l = k->model ? rc_lora_new(k->model, &(rc_lora_options){.r = 4, .alpha = 16, .targets = "c_attn,q_proj,v_proj"}, 2, &err) : NULL;
    CHECKF(l != NULL, "%s: %s", preset, err.msg);
    if (!l) {
        rc_model_free(k->model);
        rc_deployer_free(d);
        return;
    }
    float *before = weights_of(k->model), *a0 = check_params_flat(rc_lora_params(l));
    rc_trainer *t = rc_trainer_new(d, lm_task_collate, lm_task_loss, k, rc_lora_params(l), NULL, &err);
    rc_train_options o = {.steps = 4, .batch_size = B, .shuffle = 1, .optimizer = "adamw", .lr = 1e-2,
                          .weight_decay = 0.01, .grad_clip = 1.0, .log_every = 1};
    rc_train_result r = {0};
    int ok = t && rc_trainer_fit(t, &o, (rc_examples){lm_task_count, k}, NULL, &r, &err) == 0;
    CHECKF(ok, "%s: fit: %s", preset, err.msg);
    float *after = weights_of(k->model), *a1 = check_params_flat(rc_lora_params(l));
    int64_t nb = rc_params_numel(k->model->params), na = rc_lora_numel(l);
    CHECKF(before && after && !memcmp(before, after, (size_t)nb * sizeof *before),
           "%s: a base weight changed in training", preset);
    double moved = 0;
    for (int64_t i = 0; a0 && a1 && i < na; i++)
        moved = fmax(moved, fabs(a1[i] - a0[i]));
    CHECKF(moved > 1e-4, "%s: the adapters did not move (%g)", preset, moved);
    /* f32: weights and gradients, and AdamW's two moments, of the adapters alone */
    CHECKF(r.state_bytes == na * 16, "%s: state %lld bytes, want %lld (adapters only)", preset,
           (long long)r.state_bytes, (long long)(na * 16));
    CHECKF(r.state_bytes * 20 < nb * 16, "%s: state %lld bytes is not far below full fine-tuning's %lld", preset,
           (long long)r.state_bytes, (long long)(nb * 16));
    printf("%s: LoRA state %lld bytes, full fine-tuning %lld bytes (%.1f%%)\n", preset, (long long)r.state_bytes,
           (long long)(nb * 16), 100.0 * (double)r.state_bytes / (double)(nb * 16));
    rc_trainer_free(t);
    rc_lora_free(l);
    rc_model_free(k->model);
    rc_deployer_free(d);
    free(before), free(after), free(a0), free(a1);
}

/* ---- the --eval-metric mode ------------------------------------------------------------- */

typedef struct {
    rc_model *m;
    double sum;
} metric_task;

static int64_t metric_count(int epoch, void *user)
{
    (void)epoch, (void)user;
    return 32;
}

static int metric_collate(rc_batch *out, const int64_t *ex, int n, void *user, rc_error *err)
{
    (void)user;
    int32_t *ids = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, 8});
    int32_t *tg = rc_batch_add(out, "targets", RC_I32, 2, (int64_t[]){n, 8});
    for (int i = 0; ids && tg && i < n * 8; i++) {
        ids[i] = (int32_t)((ex[i / 8] * 13 + i) % 256);
        tg[i] = (ids[i] + 1) % 256;
    }
    return ids && tg ? 0 : rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
}

static rc_tensor *metric_loss(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)p, (void)rng, (void)err;
    rc_tensor *y = rc_model_logits(g, ((metric_task *)user)->m, rc_batch_input(g, b, "ids"), NULL, NULL);
    return rc_cross_entropy(g, y, rc_batch_input(g, b, "targets"), RC_IGNORE_INDEX);
}

/* every logit of the example as its row */
static rc_tensor *metric_predict(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)p, (void)rng, (void)err;
    rc_tensor *y = rc_model_logits(g, ((metric_task *)user)->m, rc_batch_input(g, b, "ids"), NULL, NULL);
    return y ? rc_reshape(g, y, 2, (int64_t[]){y->shape[0], y->shape[1] * y->shape[2]}) : NULL;
}

static int metric_output(int64_t example, const float *row, int64_t n, void *user, rc_error *err)
{
    (void)err;
    for (int64_t i = 0; i < n; i++)
        ((metric_task *)user)->sum += row[i] * (double)(1 + (example + i) % 7);
    return 0;
}

static double metric_value(void *user)
{
    metric_task *k = user;
    double s = k->sum;
    k->sum = 0;
    printf("metric %.9g\n", s);
    return s;
}

static int eval_metric_run(int argc, char **argv, int mp, int zero)
{
    rc_error err = {0};
    rc_deployer *d = rc_deployer_new(&argc, &argv, &(rc_deployer_options){.seed = 1, .mp = mp}, &err);
    metric_task k = {d ? rc_model_create("tiny-gpt2", 1, &err) : NULL, 0};
    rc_lora *l = k.m ? rc_lora_new(k.m, &(rc_lora_options){4, 8, "c_attn,c_proj"}, 2, &err) : NULL;
    rc_trainer *t = l ? rc_trainer_new(d, metric_collate, metric_loss, &k, rc_lora_params(l), NULL, &err) : NULL;
    int dp = d ? rc_deployer_mesh(d)->dp : 1; /* the global batch is 4 on every mesh */
    rc_train_options o = {.steps = 2, .batch_size = 4 / dp, .optimizer = "sgd", .lr = 0.5, .eval_every = 1,
                          .eval_predict = metric_predict, .eval_output = metric_output, .eval_metric = metric_value,
                          .zero = zero, .no_dropout = 1 /* the meshes must agree */};
    rc_examples ex = {metric_count, &k};
    int rc = t ? rc_trainer_fit(t, &o, ex, &ex, NULL, &err) : -1;
    if (rc)
        fprintf(stderr, "test_lora --eval-metric: %s\n", err.msg);
    rc_trainer_free(t);
    rc_lora_free(l);
    rc_model_free(k.m);
    rc_deployer_free(d);
    return rc ? 1 : 0;
}

/* the --logits mode: 0 or 1 */
static int write_logits(const char *model, const char *adapter, const char *in, const char *out)
{
    rc_error err = {0};
    rc_model *m = rc_model_create(model, 0, &err);
    rc_lora *l = m ? rc_lora_load(m, adapter, &err) : NULL;
    rc_safetensors *f = l ? rc_safetensors_open(in, &err) : NULL;
    int j = f ? rc_safetensors_find(f, "input_ids") : -1;
    const rc_st_tensor *info = j >= 0 ? rc_safetensors_info(f, j) : NULL;
    int32_t *ids = info && info->ndim == 2 ? malloc((size_t)info->numel * sizeof *ids) : NULL;
    int rc = ids && rc_safetensors_read(f, j, RC_I32, ids, info->numel, &err) == 0 ? 0 : -1;
    float *y = NULL;
    int64_t shape[3] = {0};
    if (!rc) {
        rc_graph *g = rc_graph_new();
        rc_tensor *x = rc_const(g, "ids", RC_I32, 2, info->shape, ids);
        rc_tensor *z = rc_model_logits(g, m, x, NULL, NULL);
        rc_plan *p = z ? rc_plan_new(g, &z, 1, &err) : NULL;
        y = p ? malloc((size_t)rc_tensor_numel(z) * sizeof *y) : NULL;
        rc = y && rc_plan_run(p, &err) == 0 && rc_plan_read(p, z, y, &err) == 0 ? 0 : -1;
        if (!rc)
            memcpy(shape, z->shape, sizeof shape);
        if (rc_graph_error(g))
            fprintf(stderr, "test_lora: %s\n", rc_graph_error(g));
        rc_plan_free(p);
        rc_graph_free(g);
    }
    const char *name = "logits";
    const int64_t *shapes[1] = {shape};
    const float *data[1] = {y};
    if (!rc)
        rc = rc_safetensors_write(out, 1, &name, (int[]){3}, shapes, data, 0, NULL, &err);
    if (rc)
        fprintf(stderr, "test_lora --logits: %s\n", err.msg);
    free(y);
    free(ids);
    rc_safetensors_close(f);
    rc_lora_free(l);
    rc_model_free(m);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 6 && !strcmp(argv[1], "--logits"))
        return write_logits(argv[2], argv[3], argv[4], argv[5]);
    if ((argc == 3 || argc == 4) && !strcmp(argv[1], "--eval-metric")) /* MP [ZERO] */
        return eval_metric_run(argc, argv, atoi(argv[2]), argc == 4 ? atoi(argv[3]) : 0);
    rc_set_threads(2);
    snprintf(root, sizeof root, "/tmp/redco-lora-XXXXXX");
    CHECK(mkdtemp(root) != NULL);
    test_forward("tiny-gpt2", "c_attn,c_proj", 6); /* c_proj: attention's and the MLP's, as PEFT */
    test_forward("tiny-llama", "q_proj,v_proj,down_proj", 6);
    lm_task k;
    CHECK(lm_task_init(&k, T, 4000, 11) == 0);
    test_frozen(&k, "tiny-gpt2");
    test_frozen(&k, "tiny-llama");
    lm_task_free(&k);
    check_rm_tree(root);
    return check_summary("test_lora");
}
