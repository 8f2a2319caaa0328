/* test_device_models.c - the built-in model families on an OpenCL device against the CPU:
 * logits of the five families; five AdamW steps of tiny GPT-2, LLaMA and T5 through the
 * Trainer (per tensor, 1e-4); the same training twice on the device is bitwise identical;
 * greedy generation gives the same tokens and beam search the same beams, with f32 and
 * with bf16 weights (and a bf16 key/value cache).
 *
 * Without an OpenCL device the test prints why and passes, unless REDCO_REQUIRE_OPENCL=1
 * (CI sets it): then it fails. */
#include "check.h"
#include "redco/device.h"
#include "redco/pipeline.h"
#include "redco/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 8, STEPS = 5 };

static rc_backend *gpu;
static const char *const families[] = {"tiny-gpt2", "tiny-llama", "tiny-opt", "tiny-gptj", "tiny-t5"};

/* n ids, encoder ids and targets (one ignored) from a fixed stream */
static void make_ids(int vocab, uint64_t seed, int n, int32_t *ids, int32_t *enc, int32_t *tg)
{
    rc_rng r = rc_rng_new(seed);
    for (int i = 0; i < n; i++) {
        ids[i] = (int32_t)(rc_rng_next_u64(&r) % (uint64_t)vocab);
        enc[i] = (int32_t)(rc_rng_next_u64(&r) % (uint64_t)vocab);
        tg[i] = i == 3 ? RC_IGNORE_INDEX : (int32_t)(rc_rng_next_u64(&r) % (uint64_t)vocab);
    }
}

/* the logits of m on backend be for ids (and enc for T5), copied out */
static float *logits_on(rc_backend *be, rc_model *m, const int32_t *ids, const int32_t *enc, rc_error *err)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *x = rc_input(g, "ids", RC_I32, 2, (int64_t[]){B, T});
    rc_tensor *e = m->config.type == RC_MODEL_T5 ? rc_input(g, "enc", RC_I32, 2, (int64_t[]){B, T}) : NULL;
    rc_tensor *l = rc_model_logits(g, m, x, e, NULL);
    rc_plan *p = NULL;
    float *out = NULL;
    if (rc_graph_error(g))
        rc_error_set(err, RC_ERR_ARG, "%s", rc_graph_error(g));
    else if ((p = rc_plan_new_on(be, g, &l, 1, err)) && !rc_plan_set_input(p, x, ids, err) &&
             (!e || !rc_plan_set_input(p, e, enc, err)) && !rc_plan_run(p, err) &&
             (out = malloc(rc_tensor_nbytes(l))) && rc_plan_read(p, l, out, err)) {
        free(out);
        out = NULL;
    }
    rc_plan_free(p);
    rc_graph_free(g);
    return out;
}

static double rel_diff(const float *a, const float *b, int64_t n)
{
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return isfinite(d) ? sqrt(d / (s > 0 ? s : 1)) : INFINITY;
}

static void test_logits(void)
{
    for (size_t k = 0; k < sizeof families / sizeof *families; k++) {
        rc_error err = {0};
        rc_model *m = rc_model_create(families[k], 5, &err);
        int32_t ids[B * T], enc[B * T], tg[B * T];
        make_ids(m ? m->config.vocab_size : 2, 9 + k, B * T, ids, enc, tg);
        float *cpu = m ? logits_on(rc_device_open("cpu", 0, NULL), m, ids, enc, &err) : NULL;
        float *dev = cpu && !rc_params_to(m->params, gpu, &err) ? logits_on(gpu, m, ids, enc, &err) : NULL;
        int64_t n = m ? (int64_t)B * T * m->config.vocab_size : 0;
        double d = cpu && dev ? rel_diff(dev, cpu, n) : INFINITY;
        CHECKF(d <= 1e-5, "%s logits on %s vs cpu: %.3g (%s)", families[k], rc_backend_name(gpu), d, err.msg);
        printf("%-10s logits: %.2e relative\n", families[k], d);
        free(cpu);
        free(dev);
        rc_model_free(m);
    }
}

/* ---- training through the Trainer ---------------------------------------------------- */

typedef struct {
    rc_model *model;
    int32_t ids[16 * T], enc[16 * T], tg[16 * T];
} lm;

static int64_t count(int epoch, void *user)
{
    (void)epoch, (void)user;
    return 16;
}

static int collate(rc_batch *out, const int64_t *ex, int n, void *user, rc_error *err)
{
    lm *d = user;
    int32_t *ids = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, T});
    int32_t *enc = rc_batch_add(out, "enc", RC_I32, 2, (int64_t[]){n, T});
    int32_t *tg = rc_batch_add(out, "targets", RC_I32, 2, (int64_t[]){n, T});
    if (!ids || !enc || !tg)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int i = 0; i < n; i++) {
        memcpy(ids + i * T, d->ids + ex[i] * T, T * sizeof *ids);
        memcpy(enc + i * T, d->enc + ex[i] * T, T * sizeof *enc);
        memcpy(tg + i * T, d->tg + ex[i] * T, T * sizeof *tg);
    }
    return 0;
}

static rc_tensor *lm_loss(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    lm *d = user;
    (void)p, (void)rng, (void)err;
    rc_tensor *enc = d->model->config.type == RC_MODEL_T5 ? rc_batch_input(g, b, "enc") : NULL;
    rc_tensor *l = rc_model_logits(g, d->model, rc_batch_input(g, b, "ids"), enc, NULL);
    return rc_cross_entropy(g, l, rc_batch_input(g, b, "targets"), RC_IGNORE_INDEX);
}

/* STEPS AdamW steps of preset on device; the final weights into w */
static int train(const char *preset, const char *device, check_weights *w, rc_error *err)
{
    static lm d;
    rc_deployer_options dopt = {.seed = 3, .mp = 1, .local = 1, .device = device};
    rc_deployer *dep = rc_deployer_new(NULL, NULL, &dopt, err);
    d.model = dep ? rc_model_create(preset, 5, err) : NULL;
    if (d.model)
        for (int i = 0; i < 16; i++)
            make_ids(d.model->config.vocab_size, 100 + (uint64_t)i, T, d.ids + i * T, d.enc + i * T, d.tg + i * T);
    rc_trainer *t = d.model ? rc_trainer_new(dep, collate, lm_loss, &d, d.model->params, d.model, err) : NULL;
    /* eps 1e-6: AdamW turns the rounding residue of gradients that are zero in exact
     * arithmetic (GPT-2's key bias) into steps of lr at eps 1e-8 */
    rc_train_options o = {.steps = STEPS, .batch_size = 4, .optimizer = "adamw", .lr = 1e-2, .eps = 1e-6,
                          .weight_decay = 0.01, .grad_clip = 1.0, .shuffle = 1};
    rc_train_result r = {0};
    int rc = t ? rc_trainer_fit(t, &o, (rc_examples){count, &d}, NULL, &r, err) : -1;
    if (!rc) {
        size_t at;
        rc_buffer *buf = rc_params_buffer(d.model->params, 0, &at);
        CHECKF(buf && rc_buffer_backend(buf) == rc_deployer_backend(dep), "%s on %s: the weights are not there",
               preset, device);
        rc = check_weights_add_params(w, "", d.model->params, 1e-4);
        printf("  %s on %s: loss %.9f\n", preset, rc_backend_name(rc_deployer_backend(dep)), r.loss);
    }
    rc_trainer_free(t);
    rc_model_free(d.model);
    rc_deployer_free(dep);
    return rc;
}

static void test_training(void)
{
    const char *presets[3] = {"tiny-gpt2", "tiny-llama", "tiny-t5"};
    for (int k = 0; k < 3; k++) {
        check_weights cpu = {0}, dev = {0}, again = {0};
        rc_error err = {0};
        char worst[160] = "";
        int ok = train(presets[k], "cpu", &cpu, &err) == 0;
        ok = ok && train(presets[k], "opencl:0", &dev, &err) == 0;
        double d = ok ? check_weights_diff(&dev, &cpu, worst, sizeof worst, NULL) : INFINITY;
        CHECKF(d <= 1e-4, "%s: %d steps on opencl vs cpu: %.3g (%s) %s", presets[k], STEPS, d, worst, err.msg);
        ok = ok && train(presets[k], "opencl:0", &again, &err) == 0;
        int same = ok && dev.n == again.n;
        for (int i = 0; same && i < dev.n; i++)
            same = !memcmp(dev.data[i], again.data[i], (size_t)dev.numel[i] * sizeof(float));
        CHECKF(same, "%s: two trainings on opencl are not bitwise identical %s", presets[k], err.msg);
        printf("%-10s %d AdamW steps: opencl vs cpu %.2e (worst %s); twice on opencl bitwise %s\n", presets[k],
               STEPS, d, worst, same ? "equal" : "DIFFERENT");
        check_weights_free(&cpu);
        check_weights_free(&dev);
        check_weights_free(&again);
    }
}

/* ---- generation ---------------------------------------------------------------------- */

/* greedy (beams 1) or beam search tokens of preset with weights in dtype t on be; *n tokens */
static int32_t *generate_on(const char *preset, rc_dtype t, rc_backend *be, int beams, int64_t *n, rc_error *err)
{
    rc_model *m = rc_model_create(preset, 7, err);
    if (m && rc_model_to_dtype(m, t, err)) {
        rc_model_free(m);
        return NULL;
    }
    int32_t prompt[4] = {3, 17, 5, 9}, *out = NULL;
    rc_generate_options o = m ? rc_generate_defaults(m) : (rc_generate_options){0};
    o.max_new_tokens = 8;
    o.num_beams = beams;
    o.eos_id = -1;
    if (m && !rc_params_to(m->params, be, err) && rc_generate(m, prompt, 4, &o, &out, n, err))
        out = NULL;
    rc_model_free(m);
    return out;
}

static void test_generation(void)
{
    const char *presets[3] = {"tiny-gpt2", "tiny-llama", "tiny-t5"};
    const rc_dtype dtypes[2] = {RC_F32, RC_BF16};
    for (int k = 0; k < 3; k++)
        for (int d = 0; d < 2; d++)
            for (int beams = 1; beams <= 3; beams += 2) {
                rc_error err = {0};
                int64_t nc = 0, nd = 0;
                int32_t *cpu = generate_on(presets[k], dtypes[d], rc_device_open("cpu", 0, NULL), beams, &nc, &err);
                int32_t *dev = cpu ? generate_on(presets[k], dtypes[d], gpu, beams, &nd, &err) : NULL;
                CHECKF(cpu && dev && nc == nd && !memcmp(cpu, dev, (size_t)nc * sizeof *cpu),
                       "%s %s %s: tokens on opencl differ from the cpu's %s", presets[k], rc_dtype_name(dtypes[d]),
                       beams > 1 ? "beam search" : "greedy", err.msg);
                free(cpu);
                free(dev);
            }
    printf("generation: greedy and 3-beam tokens equal the cpu's for tiny-gpt2, tiny-llama, tiny-t5, with f32 and "
           "bf16 weights\n");
}

int main(void)
{
    rc_set_threads(2);
    if (!(gpu = check_opencl("test_device_models")))
        return check_summary("test_device_models");
    test_logits();
    test_training();
    test_generation();
    return check_summary("test_device_models");
}
