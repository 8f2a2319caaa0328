/* test_train_half.c - training with 16-bit weights and f32 master weights
 * (rc_train_options.dtype), on the CPU or with --device D (opencl):
 * - 50 AdamW steps of tiny-gpt2 and tiny-llama in bf16 track the same run in f32: the mean
 *   loss of every step within 2% (per step, the stricter reading: bf16 rounds the weights
 *   and activations to 8 bits of mantissa, yet the f32 master keeps the small updates, so
 *   the trajectories stay within a fraction of a percent), and the loss falls by far more
 *   than that margin (so tracking means something);
 * - f16 with an initial loss scale of 2^40 (every gradient overflows f16): the first step is
 *   skipped with the 16-bit weights, the master and the moments untouched, the AdamW step
 *   count 0 and the scale halved; training then halves the scale until the gradients are
 *   finite, logs train/loss_scale every step, and the loss falls; a window of 4 good steps
 *   doubles the scale back;
 * - resume in bf16 (and f16, with its scale): 3 steps + 3 resumed equal 6 straight bitwise
 *   (the f32 master in the checkpoint, the 16-bit weights, the scale);
 * - final/ holds the f32 master; loaded in bf16 (rc_model_load, as generate --dtype bf16)
 *   it is the very bf16 weights the trainer ended with;
 * - the backend's entries behind it, on the device: accumulate from bf16 / f16 gradients
 *   (written and added) and round_f32 into bf16 / f16 words equal the host's conversions
 *   (rc_convert) bit for bit, at offsets inside the buffers. */
#include "check.h"
#include "lm_task.h"
#include "backend.h"
#include "redco/device.h"
#include "redco/pipeline.h"
#include "redco/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { T = 16, NTOK = 4000, STEPS = 50, B = 4 };

static const char *device;        /* --device: where the runs are */
static char root[64];

typedef lm_task task;

typedef struct {
    const char *model, *name;
    rc_dtype dtype;
    int64_t steps;
    int resume;
    double loss_scale;
    int64_t window;
    int save_every;
} run_spec;

/* One run in root/name; the trainer's weights (raw words) into *raw (malloc'ed, may be NULL)
 * and their byte count; the result into *r. 0 or -1. */
static int train(task *k, const run_spec *s, rc_train_result *r, void **raw, size_t *raw_bytes)
{
    rc_error err = {0};
    char wd[160];
    snprintf(wd, sizeof wd, "%s/%s", root, s->name);
    rc_deployer_options dopt = {.seed = 5, .workdir = wd, .device = device};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &dopt, &err);
    k->model = d ? rc_model_create(s->model, 1, &err) : NULL;
    rc_model *model = k->model;
    rc_trainer *t = model ? rc_trainer_new(d, lm_task_collate, lm_task_loss, k, model->params, model, &err) : NULL;
    rc_train_options o = {.steps = s->steps, .batch_size = B, .shuffle = 1, .optimizer = "adamw", .lr = 3e-3,
                          .weight_decay = 0.01, .grad_clip = 1.0, .schedule = RC_SCHEDULE_CONSTANT, .log_every = 1,
                          .save_every = s->save_every, .resume = s->resume, .dtype = s->dtype,
                          .loss_scale = s->loss_scale, .loss_scale_window = s->window};
    int ok = t && rc_trainer_fit(t, &o, (rc_examples){lm_task_count, k}, NULL, r, &err) == 0;
    CHECKF(ok, "%s: %s", s->name, err.msg);
    if (ok && raw) {
        rc_params *p = k->model->params;
        size_t es = rc_dtype_size(rc_params_dtype(p)), at = 0;
        CHECKF(rc_params_dtype(p) == s->dtype, "%s: the weights are %s after fit", s->name,
               rc_dtype_name(rc_params_dtype(p)));
        *raw_bytes = (size_t)rc_params_numel(p) * es;
        *raw = malloc(*raw_bytes);
        for (int i = 0; *raw && i < rc_params_count(p); i++) {
            CHECK(rc_params_read_raw(p, i, (char *)*raw + at, &err) == 0);
            at += (size_t)rc_params_tensor_numel(p, i) * es;
        }
    }
    rc_trainer_free(t);
    rc_model_free(k->model);
    rc_deployer_free(d);
    return ok ? 0 : -1;
}

/* the values of `key` in root/name/log.jsonl, by step (1..max); NaN where absent */
static int read_log(const char *name, const char *key, double *out, int max)
{
    char path[300], line[2048], pat[80];
    snprintf(path, sizeof path, "%s/%s/log.jsonl", root, name);
    snprintf(pat, sizeof pat, "\"%s\":", key);
    for (int i = 0; i <= max; i++)
        out[i] = NAN;
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *st = strstr(line, "\"step\":"), *at = strstr(line, pat);
        int step = st ? atoi(st + 7) : -1;
        if (at && step >= 1 && step <= max) {
            out[step] = atof(at + strlen(pat));
            n++;
        }
    }
    if (f)
        fclose(f);
    return n;
}

/* every tensor of root/name/file into *w: all of them f32 (the master, the moments) */
static int read_file_tensors(check_weights *w, const char *name, const char *file)
{
    char path[300];
    snprintf(path, sizeof path, "%s/%s/%s", root, name, file);
    int rc = check_weights_add_file(w, path, RC_F32);
    CHECKF(rc == 0, "%s: cannot be read, or a tensor is not the f32 master (stderr says which)", path);
    return rc;
}

/* bf16 tracks f32 on one model */
static void test_tracking(task *k, const char *model)
{
    char n32[64], n16[64];
    snprintf(n32, sizeof n32, "%s-f32", model);
    snprintf(n16, sizeof n16, "%s-bf16", model);
    run_spec a = {model, n32, RC_F32, STEPS, 0, 0, 0, 0}, b = {model, n16, RC_BF16, STEPS, 0, 0, 0, 0};
    rc_train_result ra = {0}, rb = {0};
    if (train(k, &a, &ra, NULL, NULL) || train(k, &b, &rb, NULL, NULL))
        return;
    double la[STEPS + 1], lb[STEPS + 1], worst = 0, tail_a = 0, tail_b = 0;
    CHECK(read_log(n32, "train/loss", la, STEPS) == STEPS && read_log(n16, "train/loss", lb, STEPS) == STEPS);
    int worst_at = 0;
    for (int s = 1; s <= STEPS; s++) {
        double rel = fabs(lb[s] - la[s]) / la[s];
        if (!(rel <= worst)) /* NaN counts */
            worst = rel, worst_at = s;
        if (s > STEPS - 10)
            tail_a += la[s] / 10, tail_b += lb[s] / 10;
    }
    double tail = fabs(tail_b - tail_a) / tail_a, fall = 1 - tail_a / la[1];
    CHECKF(tail < 0.02, "%s: bf16's mean loss over the last 10 steps %.4f, f32's %.4f: %.2f%% apart (2%% allowed)",
           model, tail_b, tail_a, 100 * tail);
    CHECKF(worst < 0.02, "%s: step %d: bf16 loss %.4f, f32 %.4f: %.2f%% apart (2%% allowed per step)", model,
           worst_at, lb[worst_at], la[worst_at], 100 * worst);
    CHECKF(fall > 0.1, "%s: f32 loss %.4f -> %.4f: falls %.1f%%, too little for the comparison to mean anything",
           model, la[1], tail_a, 100 * fall);
    CHECKF(rb.loss_scale == 1 && rb.skipped_steps == 0, "%s bf16: loss scale %g, %lld skipped (none expected)",
           model, rb.loss_scale, (long long)rb.skipped_steps);
    /* the state: bf16 weights (2 B), f32 gradients, moments and master (4 B each) */
    int64_t n = ra.state_bytes / 16;
    CHECKF(rb.state_bytes == 18 * n, "%s: state %lld bytes in bf16, %lld in f32", model, (long long)rb.state_bytes,
           (long long)ra.state_bytes);
    printf("%-10s %d steps: loss f32 %.4f -> %.4f, bf16 -> %.4f: last 10 steps' mean %.2f%% apart, worst step %d "
           "%.2f%%; state %lld -> %lld bytes\n", model, STEPS, la[1], la[STEPS], lb[STEPS], 100 * tail, worst_at,
           100 * worst, (long long)ra.state_bytes, (long long)rb.state_bytes);
}

/* the f16 loss scale recovers from a forced overflow */
static void test_overflow(task *k)
{
    enum { LONG = 60 };
    const double start = 0x1p40;
    /* one step: skipped, nothing touched */
    run_spec one = {"tiny-gpt2", "f16-one", RC_F16, 1, 0, start, 4, 0};
    rc_train_result r = {0};
    void *w0 = NULL, *w1 = NULL;
    size_t n0 = 0, n1 = 0;
    rc_error err = {0};
    /* the initial weights in f16 as the trainer starts from them */
    rc_model *m = rc_model_load("tiny-gpt2", 1, RC_F16, &err);
    CHECKF(m != NULL, "%s", err.msg);
    if (m) {
        rc_params *p = m->params;
        n0 = (size_t)rc_params_numel(p) * 2;
        w0 = malloc(n0);
        for (size_t i = 0, at = 0; w0 && i < (size_t)rc_params_count(p); i++) {
            CHECK(rc_params_read_raw(p, (int)i, (char *)w0 + at, &err) == 0);
            at += (size_t)rc_params_tensor_numel(p, (int)i) * 2;
        }
        rc_model_free(m);
    }
    if (!train(k, &one, &r, &w1, &n1)) {
        CHECKF(r.skipped_steps == 1 && r.loss_scale == start / 2 && r.step == 1,
               "f16 at scale 2^40: %lld skipped, scale now %g, step %lld", (long long)r.skipped_steps, r.loss_scale,
               (long long)r.step);
        CHECK(w0 && w1 && n0 == n1 && memcmp(w0, w1, n0) == 0); /* the 16-bit weights untouched */
        check_weights mo = {0}, ma = {0}, w = {0};
        CHECK(read_file_tensors(&mo, "f16-one", "checkpoint-1/optimizer.safetensors") == 0);
        double most = 0;
        for (int i = 0; i < mo.n; i++)
            for (int64_t j = 0; j < mo.numel[i]; j++)
                most = fmax(most, fabs(mo.data[i][j]));
        CHECKF(mo.n > 0 && most == 0, "the moments after a skipped step: largest %g", most);
        /* the master in the checkpoint is the f16 weights widened */
        CHECK(read_file_tensors(&w, "f16-one", "checkpoint-1/model.safetensors") == 0);
        rc_model *mm = rc_model_load("tiny-gpt2", 1, RC_F16, &err);
        CHECK(mm && check_weights_add_params(&ma, "", mm->params, 0) == 0);
        char worst[256] = "";
        double e = mm ? check_weights_diff(&w, &ma, worst, sizeof worst, NULL) : 1;
        CHECKF(e == 0, "the master after a skipped step differs from the initial weights: %s %.3g", worst, e);
        rc_model_free(mm);
        check_weights_free(&mo), check_weights_free(&ma), check_weights_free(&w);
        char path[300], *state;
        size_t len = 0;
        snprintf(path, sizeof path, "%s/f16-one/checkpoint-1/trainer_state.json", root);
        state = check_read_file(path, &len);
        CHECKF(state && check_has(state, "\"optimizer_step\": 0") && check_has(state, "\"loss_scale\": 549755813888"),
               "trainer_state.json: %s", state ? state : "missing");
        free(state);
    }
    free(w0), free(w1);
    /* a longer run: the scale halves until finite, then the loss falls and a window of good
     * steps doubles it */
    run_spec run = {"tiny-gpt2", "f16-long", RC_F16, LONG, 0, start, 4, 0};
    if (train(k, &run, &r, NULL, NULL))
        return;
    double sc[LONG + 1], ls[LONG + 1];
    CHECK(read_log("f16-long", "train/loss_scale", sc, LONG) == LONG && read_log("f16-long", "train/loss", ls, LONG) == LONG);
    int skipped = 0, first_good = 0, doubled = 0;
    for (int s = 1; s <= LONG; s++) {
        double ratio = sc[s] / (s == 1 ? start : sc[s - 1]); /* the log keeps 6 digits */
        if (fabs(ratio - 0.5) < 1e-4)
            skipped++;
        else if (!first_good)
            first_good = s;
        if (fabs(ratio - 2) < 1e-4)
            doubled++;
    }
    CHECKF(skipped >= 10 && skipped == r.skipped_steps && first_good > 10,
           "f16: %d halvings in the log, %lld skipped, the first good step %d", skipped, (long long)r.skipped_steps,
           first_good);
    CHECKF(doubled >= 1, "f16: the scale never doubled after a window of 4 good steps");
    double tail = (ls[LONG] + ls[LONG - 1] + ls[LONG - 2]) / 3;
    CHECKF(first_good && tail < 0.9 * ls[first_good], "f16: loss %.4f at the first good step, %.4f at the end",
           first_good ? ls[first_good] : NAN, tail);
    printf("f16 from scale 2^40: %d steps skipped (scale halved each), first good step %d at scale %g, %d doublings, "
           "loss %.4f -> %.4f, final scale %g\n", skipped, first_good, first_good ? sc[first_good] : NAN, doubled,
           first_good ? ls[first_good] : NAN, tail, r.loss_scale);
}

/* 3 steps + 3 resumed equal 6 straight, bitwise */
static void test_resume(task *k, rc_dtype dt)
{
    char straight[64], halves[64], worst[256] = "";
    snprintf(straight, sizeof straight, "resume-%s-straight", rc_dtype_name(dt));
    snprintf(halves, sizeof halves, "resume-%s-halves", rc_dtype_name(dt));
    double scale = dt == RC_F16 ? 0x1p20 : 0; /* f16: some steps skipped on the way */
    run_spec a = {"tiny-llama", straight, dt, 6, 0, scale, 2, 1}, b1 = {"tiny-llama", halves, dt, 3, 0, scale, 2, 1},
             b2 = {"tiny-llama", halves, dt, 6, 1, scale, 2, 1};
    rc_train_result ra = {0}, rb = {0};
    void *wa = NULL, *wb = NULL;
    size_t na = 0, nb = 0;
    if (!train(k, &a, &ra, &wa, &na) && !train(k, &b1, &rb, NULL, NULL) && !train(k, &b2, &rb, &wb, &nb)) {
        CHECKF(wa && wb && na == nb && memcmp(wa, wb, na) == 0, "%s: the 16-bit weights of 3 + 3 steps differ from 6",
               rc_dtype_name(dt));
        check_weights x = {0}, y = {0}, ox = {0}, oy = {0};
        CHECK(read_file_tensors(&x, straight, "checkpoint-6/model.safetensors") == 0 &&
              read_file_tensors(&y, halves, "checkpoint-6/model.safetensors") == 0);
        CHECK(read_file_tensors(&ox, straight, "checkpoint-6/optimizer.safetensors") == 0 &&
              read_file_tensors(&oy, halves, "checkpoint-6/optimizer.safetensors") == 0);
        double e = check_weights_diff(&y, &x, worst, sizeof worst, NULL);
        double eo = check_weights_diff(&oy, &ox, worst, sizeof worst, NULL);
        CHECKF(e == 0 && eo == 0, "%s: 3 + 3 steps vs 6: master %.3g, moments %.3g (%s)", rc_dtype_name(dt), e, eo,
               worst);
        CHECKF(ra.loss_scale == rb.loss_scale && ra.loss == rb.loss, "%s: scale %g vs %g, loss %.9g vs %.9g",
               rc_dtype_name(dt), ra.loss_scale, rb.loss_scale, ra.loss, rb.loss);
        if (dt == RC_F16)
            CHECKF(ra.skipped_steps > 0, "f16 resume: no step was skipped at scale 2^20 (the test means a scale "
                   "restored mid-way)");
        printf("%s resume: 3 + 3 steps equal 6 bitwise (master, moments, 16-bit weights; loss scale %g)\n",
               rc_dtype_name(dt), ra.loss_scale);
        check_weights_free(&x), check_weights_free(&y), check_weights_free(&ox), check_weights_free(&oy);
        /* final/: the f32 master; loaded in bf16 it is the weights the trainer ended with */
        if (dt == RC_BF16) {
            char dir[300];
            rc_error err = {0};
            snprintf(dir, sizeof dir, "%s/%s/final", root, straight);
            rc_model *m = rc_model_load(dir, 0, RC_BF16, &err);
            CHECKF(m != NULL, "final/ in bf16: %s", err.msg);
            void *wf = m ? malloc(na) : NULL;
            for (size_t i = 0, at = 0; wf && i < (size_t)rc_params_count(m->params); i++) {
                CHECK(rc_params_read_raw(m->params, (int)i, (char *)wf + at, &err) == 0);
                at += (size_t)rc_params_tensor_numel(m->params, (int)i) * 2;
            }
            CHECKF(wf && memcmp(wf, wa, na) == 0, "final/ loaded in bf16 differs from the trainer's bf16 weights");
            free(wf);
            rc_model_free(m);
        }
    }
    free(wa), free(wb);
}

/* accumulate and round_f32 on backend be against the host */
static void test_entries(rc_backend *be)
{
    enum { N = 5000, AT = 37 };
    rc_error err = {0};
    rc_dtype dts[2] = {RC_BF16, RC_F16};
    float *x = malloc(N * sizeof *x), *acc = malloc((N + AT) * sizeof *acc), *want = malloc(N * sizeof *want);
    uint16_t *words = malloc((N + AT) * sizeof *words), *back = malloc(N * sizeof *back);
    rc_rng r = rc_rng_new(3);
    for (int i = 0; i < N; i++)
        x[i] = (float)(rc_rng_uniform(&r) * 8 - 4);
    for (int d = 0; d < 2 && x && acc && want && words && back; d++) {
        rc_dtype dt = dts[d];
        rc_buffer *h = rc_buffer_new(be, (N + AT) * 2, &err), *f = rc_buffer_new(be, (N + AT) * 4, &err);
        rc_convert(words + AT, dt, x, RC_F32, N);
        int ok = h && f && !rc_buffer_upload(h, 0, words, (N + AT) * 2, &err);
        /* written (scale 0.5), then added (scale 2): 2.5 x the widened words */
        ok = ok && !be->accumulate(be, f, AT, h, AT * 2, N, dt, 0.5f, 0, &err) &&
             !be->accumulate(be, f, AT, h, AT * 2, N, dt, 2.0f, 1, &err) &&
             !rc_buffer_download(f, AT * 4, acc, N * 4, &err);
        CHECKF(ok, "%s: accumulate from %s: %s", be->name, rc_dtype_name(dt), err.msg);
        rc_convert(want, RC_F32, words + AT, dt, N);
        int same = 1;
        for (int i = 0; ok && i < N; i++)
            same &= acc[i] == 0.5f * want[i] + 2.0f * want[i];
        CHECKF(ok && same, "%s: accumulate from %s differs from the host", be->name, rc_dtype_name(dt));
        /* x (f32, at element AT of f) rounded into words at element 3 of h */
        ok = ok && !rc_buffer_upload(f, AT * 4, x, N * 4, &err) && !be->round_f32(be, h, 3, dt, f, AT, N, &err) &&
             !rc_buffer_download(h, 3 * 2, back, N * 2, &err);
        CHECKF(ok && !memcmp(back, words + AT, N * 2), "%s: round_f32 into %s differs from rc_convert: %s", be->name,
               rc_dtype_name(dt), err.msg);
        rc_buffer_free(h);
        rc_buffer_free(f);
    }
    free(x), free(acc), free(want), free(words), free(back);
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--device"))
            device = argv[i + 1];
    rc_error err = {0};
    if (device && !strncmp(device, "opencl", 6) && !check_opencl("test_train_half on OpenCL"))
        return check_summary("test_train_half");
    rc_set_threads(2);
    rc_backend *be = rc_device_open(device ? device : "cpu", 0, &err);
    CHECKF(be != NULL, "%s: %s", device ? device : "cpu", err.msg);
    if (be)
        test_entries(be);
    snprintf(root, sizeof root, "/tmp/redco-half-XXXXXX");
    CHECK(mkdtemp(root) != NULL);
    lm_task task_data;
    CHECK(lm_task_init(&task_data, T, NTOK, 11) == 0); /* 2000-4000 ids: a failure ends in a crash below */
    task *k = &task_data;
    test_tracking(k, "tiny-gpt2");
    test_tracking(k, "tiny-llama");
    test_overflow(k);
    test_resume(k, RC_BF16);
    test_resume(k, RC_F16);
    lm_task_free(k);
    check_rm_tree(root);
    return check_summary(device ? "test_train_half (device)" : "test_train_half");
}
