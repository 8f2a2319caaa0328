/* bench_tp.c - the training step and greedy decoding on this process's mesh: one JSON
 * line per model from rank 0. Run it alone and under mpiexec with --mp to compare data
 * and tensor parallelism on the same processes:
 *   mpiexec -n 2 bench_tp --mp 2 [PRESET ...]      default: gpt2-mini
 * The step time is (fit of 6 steps - fit of 2 steps) / 4, so compiling and planning the
 * step (once per fit) is not counted; the global batch is 4 sequences of 64 tokens. */
#include "redco/predict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { T = 64, GLOBAL_BATCH = 4, NTOK = 8192 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    rc_model *model;
    int32_t tok[NTOK];
} lm;

static int64_t count(int epoch, void *user)
{
    (void)epoch, (void)user;
    return (NTOK - 1) / T;
}

static int collate(rc_batch *out, const int64_t *ex, int n, void *user)
{
    lm *d = user;
    int32_t *ids = rc_batch_add(out, "ids", RC_I32, 2, (int64_t[]){n, T});
    int32_t *tg = rc_batch_add(out, "targets", RC_I32, 2, (int64_t[]){n, T});
    if (!ids || !tg)
        return -1;
    for (int i = 0; i < n; i++)
        for (int t = 0; t < T; t++) {
            ids[i * T + t] = d->tok[ex[i] * T + t];
            tg[i * T + t] = d->tok[ex[i] * T + t + 1];
        }
    return 0;
}

static rc_tensor *loss(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user)
{
    lm *d = user;
    (void)p, (void)rng;
    return rc_cross_entropy(g, rc_model_logits(g, d->model, rc_batch_input(g, b, "ids"), NULL, NULL),
                            rc_batch_input(g, b, "targets"), -100);
}

/* seconds for a fit of `steps` SGD steps, or -1 */
static double fit_time(rc_deployer *d, lm *data, const char *preset, int64_t steps, rc_error *err)
{
    data->model = rc_model_create(preset, 1, err);
    rc_trainer *t = data->model ? rc_trainer_new(d, collate, loss, data, data->model->params, data->model, err) : NULL;
    int dp = rc_deployer_mesh(d)->dp;
    rc_train_options o = {.steps = steps, .batch_size = GLOBAL_BATCH / dp, .optimizer = "sgd", .lr = 1e-3};
    double t0 = now_s();
    int rc = t ? rc_trainer_fit(t, &o, (rc_examples){count, data}, NULL, NULL, err) : -1;
    double dt = now_s() - t0;
    rc_trainer_free(t);
    rc_model_free(data->model);
    return rc ? -1 : dt;
}

/* ms per decoded token (greedy, 16 new tokens after an 8-token prompt) */
static double decode_ms(rc_deployer *d, const char *preset, rc_error *err)
{
    rc_model *m = rc_model_create(preset, 1, err);
    if (!m)
        return -1;
    int32_t prompt[8];
    for (int i = 0; i < 8; i++)
        prompt[i] = (i * 37 + 5) % m->config.vocab_size;
    rc_generate_options o = rc_generate_defaults(m);
    o.eos_id = -1;
    o.deployer = d;
    double t[2];
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        o.max_new_tokens = k ? 17 : 1;
        int32_t *out = NULL;
        int64_t n = 0;
        double t0 = now_s();
        rc = rc_generate(m, prompt, 8, &o, &out, &n, err);
        t[k] = now_s() - t0;
        free(out);
    }
    rc_model_free(m);
    return rc ? -1 : 1e3 * (t[1] - t[0]) / 16;
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
    if (!d) {
        fprintf(stderr, "bench_tp: %s\n", err.msg);
        return 1;
    }
    const rc_mesh *mesh = rc_deployer_mesh(d);
    const char *def[] = {"gpt2-mini"};
    const char *const *names = argc > first ? (const char *const *)argv + first : def;
    int n = argc > first ? argc - first : 1;
    lm *data = calloc(1, sizeof *data);
    for (int i = 0; i < NTOK; i++)
        data->tok[i] = (int32_t)((i * 7 + i / 5) % 200);
    int status = 0;
    for (int i = 0; i < n && !status; i++) {
        double t2 = fit_time(d, data, names[i], 2, &err);
        double t6 = t2 < 0 ? -1 : fit_time(d, data, names[i], 6, &err);
        double ms = t6 < 0 ? -1 : decode_ms(d, names[i], &err);
        if (ms < 0) {
            fprintf(stderr, "bench_tp %s: %s\n", names[i], err.msg);
            status = 1;
        } else if (rc_deployer_is_main(d)) {
            double step = (t6 - t2) / 4;
            printf("{\"bench\": \"train_step_mesh\", \"model\": \"%s\", \"dp\": %d, \"mp\": %d, \"batch\": %d, "
                   "\"seq_len\": %d, \"step_s\": %.4f, \"tokens_per_s\": %.0f, \"decode_ms_per_token\": %.2f}\n",
                   names[i], mesh->dp, mesh->mp, GLOBAL_BATCH, T, step, GLOBAL_BATCH * T / step, ms);
        }
    }
    free(data);
    rc_deployer_free(d);
    rc_dist_finalize();
    return status;
}
