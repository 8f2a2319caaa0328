/* bench_tp.c - the training step and greedy decoding on this process's mesh: one JSON
 * line per model from rank 0. Run it alone and under mpiexec with --mp to compare data
 * and tensor parallelism on the same processes:
 *   mpiexec -n 2 bench_tp --mp 2 [PRESET ...]      default: gpt2-mini
 * Both figures time the work itself, never a difference of two runs (which noise can make
 * negative): the step time is the span between the collate calls of steps 1 and 5 of a
 * fit of 6 SGD steps, over 4 (compiling and planning happen before step 1's collate); the
 * decode time is the span between the first and the last of 17 greedy tokens, over 16
 * (the prompt is not in it), best of 3 calls. The global batch is 4 sequences of 64
 * tokens. Any failure prints one line naming the call and exits 1. */
#include "common.h"
#include "redco/predict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T = 64, GLOBAL_BATCH = 4, NTOK = 8192, STEPS = 6, NEW = 17, MAX_STAMPS = 64 };

typedef struct {
    rc_model *model;
    int32_t tok[NTOK];
    double stamp[MAX_STAMPS]; /* when collate (training) or on_token (decoding) was called */
    int n_stamps;
} lm;

static void stamp(lm *d)
{
    if (d->n_stamps < MAX_STAMPS)
        d->stamp[d->n_stamps] = bench_now();
    d->n_stamps++;
}

static int64_t count(int epoch, void *user)
{
    (void)epoch, (void)user;
    return (NTOK - 1) / T;
}

static int collate(rc_batch *out, const int64_t *ex, int n, void *user, rc_error *err)
{
    lm *d = user;
    stamp(d);
    return bench_lm_batch(out, d->tok, T, ex, n, err);
}

static rc_tensor *loss(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    lm *d = user;
    (void)p, (void)rng, (void)err;
    return bench_lm_loss(g, d->model, b);
}

/* seconds per training step (steps 1..4 of a fit of 6), or -1 with err set */
static double step_time(rc_deployer *d, lm *data, const char *preset, const char **what, rc_error *err)
{
    int dp = rc_deployer_mesh(d)->dp;
    rc_train_options o = {.steps = STEPS, .batch_size = GLOBAL_BATCH / dp, .optimizer = "sgd", .lr = 1e-3};
    data->n_stamps = 0;
    if (bench_fit_preset(d, preset, &data->model, NULL, collate, loss, (rc_examples){count, data}, &o, what, err))
        return -1;
    /* one collate per step (and one more before them with model shards): the last is
     * step 5's, four before it step 1's */
    int last = data->n_stamps - 1;
    if (last < 4 || last >= MAX_STAMPS) {
        *what = "counting steps";
        rc_error_set(err, RC_ERR_ARG, "bench_tp: %d collate calls for %d steps", data->n_stamps, STEPS);
        return -1;
    }
    return (data->stamp[last] - data->stamp[last - 4]) / 4;
}

static int on_token(int row, int32_t id, void *user)
{
    (void)row, (void)id;
    stamp(user);
    return 0;
}

/* ms per decoded token: greedy, NEW tokens after an 8-token prompt, best of 3 calls of the
 * span between the first token and the last; -1 with err set */
static double decode_ms(rc_deployer *d, lm *data, const char *preset, const char **what, rc_error *err)
{
    *what = "rc_model_create (decoding)";
    rc_model *m = rc_model_create(preset, 1, err);
    if (!m)
        return -1;
    int32_t prompt[8];
    for (int i = 0; i < 8; i++)
        prompt[i] = (i * 37 + 5) % m->config.vocab_size;
    rc_generate_options o = rc_generate_defaults(m);
    o.eos_id = -1;
    o.deployer = d;
    o.max_new_tokens = NEW;
    o.on_token = on_token;
    o.user = data;
    double best = 1e30;
    int rc = 0;
    *what = "rc_generate";
    for (int k = 0; k < 3 && !rc; k++) {
        int32_t *out = NULL;
        int64_t n = 0;
        data->n_stamps = 0;
        rc = rc_generate(m, prompt, 8, &o, &out, &n, err);
        free(out);
        if (!rc && (n != NEW || data->n_stamps != NEW)) {
            *what = "counting tokens";
            rc = rc_error_set(err, RC_ERR_ARG, "bench_tp: %lld tokens and %d callbacks, not %d", (long long)n,
                              data->n_stamps, NEW);
        }
        if (!rc) {
            double s = (data->stamp[NEW - 1] - data->stamp[0]) / (NEW - 1);
            best = s < best ? s : best;
        }
    }
    rc_model_free(m);
    return rc ? -1 : 1e3 * best;
}

int main(int argc, char **argv)
{
    int mp = 1, first = 1;
    if (argc > 2 && !strcmp(argv[1], "--mp")) {
        mp = atoi(argv[2]);
        first = 3;
    }
    rc_error err = {0};
    rc_deployer_options dopt = {.seed = 1, .mp = mp};
    rc_deployer *d = rc_deployer_new(&argc, &argv, &dopt, &err);
    if (!d)
        bench_fail("bench_tp", "rc_deployer_new", err.msg);
    const rc_mesh *mesh = rc_deployer_mesh(d);
    const char *def[] = {"gpt2-mini"};
    const char *const *names = argc > first ? (const char *const *)argv + first : def;
    int n = argc > first ? argc - first : 1;
    lm *data = calloc(1, sizeof *data);
    if (!data)
        bench_fail("bench_tp", "calloc", "out of memory");
    for (int i = 0; i < NTOK; i++)
        data->tok[i] = (int32_t)((i * 7 + i / 5) % 200);
    for (int i = 0; i < n; i++) {
        const char *what = "";
        double step = step_time(d, data, names[i], &what, &err);
        double ms = step < 0 ? -1 : decode_ms(d, data, names[i], &what, &err);
        if (ms < 0) {
            char name[160];
            snprintf(name, sizeof name, "bench_tp %s (rank %d)", names[i], mesh->rank);
            bench_fail(name, what, err.msg);
        }
        if (rc_deployer_is_main(d)) {
            json_t *o = bench_line("train_step_mesh");
            bench_set_str(o, "model", names[i]);
            bench_set_int(o, "dp", mesh->dp);
            bench_set_int(o, "mp", mesh->mp);
            bench_set_int(o, "batch", GLOBAL_BATCH);
            bench_set_int(o, "seq_len", T);
            bench_set_num(o, "step_s", step);
            bench_set_num(o, "tokens_per_s", GLOBAL_BATCH * T / step);
            bench_set_num(o, "decode_ms_per_token", ms);
            if (bench_print(o))
                bench_fail("bench_tp", "writing a JSON line", "jansson or stdout failed");
        }
    }
    free(data);
    rc_deployer_free(d);
    rc_dist_finalize();
    return 0;
}
