/* mpi_train.c - the trainer over MPI: with P > 1 processes of batch 4/P, the weights after
 * 5 steps equal one local process with batch 4 to float rounding (per tensor, relative L2:
 * SGD 1e-5; AdamW 1e-4, see below), with and without shuffling; with --dump PATH, rank 0
 * writes those weights so that runs without a launcher and under mpiexec -n 1, 2, 4 are
 * compared with each other (CTest mpi_train_launcher);
 * gradient accumulation of 2 x 2 equals one batch of 4; stopping at step 5 and resuming
 * to 10 gives the same weights as 10 steps straight (bitwise). */
#include "check.h"
#include "lm_task.h"
#include "redco/pipeline.h"
#include "redco/shard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { T = 8, NTOK = 2000 };

typedef struct {
    lm_task lm;                   /* first: the kit's functions take the task as their user */
    int64_t seen, correct, last;  /* eval metric: next-token accuracy at the last position */
    int in_order;
} task;

/* eval predictor: logits of the last position [n, V] */
static rc_tensor *predict(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    task *k = user;
    (void)p, (void)rng, (void)err;
    rc_tensor *logits = rc_model_logits(g, k->lm.model, rc_batch_input(g, b, "ids"), NULL, NULL);
    rc_tensor *last = rc_slice(g, logits, 1, T - 1, T);
    return rc_reshape(g, last, 2, (int64_t[]){logits->shape[0], logits->shape[2]});
}

static int output(int64_t example, const float *row, int64_t len, void *user, rc_error *err)
{
    (void)err;
    task *k = user;
    int64_t best = 0;
    for (int64_t v = 1; v < len; v++)
        best = row[v] > row[best] ? v : best;
    k->in_order &= example == k->last + 1;
    k->last = example;
    k->seen++;
    k->correct += best == k->lm.tok[example * T + T];
    return 0;
}

static double accuracy(void *user)
{
    task *k = user;
    double a = k->seen ? (double)k->correct / (double)k->seen : 0.0;
    k->seen = k->correct = 0;
    k->last = -1;
    return a;
}

/* trains with an eval predictor and metric on mp model shards (ZeRO stage `zero`); the
 * metric is logged, best/ kept by it; returns the logged metrics (rank 0) */
static void test_eval_metric(task *k, const char *dir, int rank, int mp, int zero, double *metric)
{
    rc_error err = {0};
    rc_deployer_options dopt = {.seed = 3, .mp = mp, .workdir = dir};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &dopt, &err);
    k->lm.model = d ? rc_model_create("tiny-gpt2", 1, &err) : NULL;
    rc_model *model = k->lm.model;
    rc_trainer *t = model ? rc_trainer_new(d, lm_task_collate, lm_task_loss, k, model->params, model, &err) : NULL;
    int dp = d ? rc_deployer_mesh(d)->dp : 1;
    rc_train_options o = {.steps = 6, .batch_size = 4 % dp ? 2 : 4 / dp, .optimizer = "adamw", .lr = 1e-2, .log_every = 3,
                          .eval_every = 3, .eval_predict = predict, .eval_output = output,
                          .eval_metric = accuracy, .metric_name = "accuracy", .metric_higher_is_better = 1,
                          .zero = zero, .no_dropout = 1 /* the meshes must agree (see run below) */};
    rc_examples ex = {lm_task_count, k};
    k->last = -1;
    k->in_order = 1;
    rc_train_result r = {0};
    CHECKF(t && rc_trainer_fit(t, &o, ex, &ex, &r, &err) == 0, "fit with a metric: %s", err.msg);
    if (rank == 0) {
        char path[300], line[512];
        snprintf(path, sizeof path, "%s/log.jsonl", dir);
        FILE *f = fopen(path, "r");
        int metrics = 0;
        while (f && fgets(line, sizeof line, f)) {
            const char *at = strstr(line, "\"eval/accuracy\"");
            if (at && metrics < 2)
                metric[metrics] = atof(strchr(at, ':') + 1);
            metrics += at != NULL;
        }
        if (f)
            fclose(f);
        CHECKF(metrics == 2, "%d eval/accuracy records in log.jsonl", metrics);
        snprintf(path, sizeof path, "%s/best/model.safetensors", dir);
        CHECK(access(path, R_OK) == 0);
        CHECK(k->in_order);
    }
    rc_trainer_free(t);
    rc_model_free(k->lm.model);
    rc_deployer_free(d);
}

/* trains a fresh tiny-gpt2; appends its weights to *w, names prefixed, with tolerance tol */
static void train(task *k, int local, int batch, int accum, const char *opt, int shuffle, int64_t steps,
                  const char *workdir, int resume, rc_schedule_kind sched, check_weights *w, const char *prefix,
                  double tol)
{
    rc_error err = {0};
    rc_deployer_options dopt = {.seed = 3, .mp = 1, .workdir = workdir, .local = local};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &dopt, &err);
    k->lm.model = d ? rc_model_create("tiny-gpt2", 1, &err) : NULL;
    rc_model *model = k->lm.model;
    rc_trainer *t = model ? rc_trainer_new(d, lm_task_collate, lm_task_loss, k, model->params, model, &err) : NULL;
    rc_train_options o = {.steps = steps, .batch_size = batch, .grad_accum = accum, .shuffle = shuffle,
                          .optimizer = opt, .lr = !strcmp(opt, "sgd") ? 0.5 : 1e-2, .weight_decay = 0.01,
                          .grad_clip = 1.0, .eps = 1e-6, .schedule = sched, .warmup = 2, .resume = resume,
                          /* no dropout: its masks differ with the mesh and the micro-batches (a
                           * key per data-parallel replica and micro-batch), which must not */
                          .no_dropout = 1};
    rc_examples ex = {lm_task_count, k};
    int ok = t && rc_trainer_fit(t, &o, ex, NULL, NULL, &err) == 0;
    CHECKF(ok, "train: %s", err.msg);
    if (ok)
        CHECK(check_weights_add_params(w, prefix, k->lm.model->params, tol) == 0);
    rc_trainer_free(t);
    rc_model_free(k->lm.model);
    rc_deployer_free(d);
}

/* With every process a model shard (mp = world size), the trainer's memory per rank is the
 * shards: within 5% of split parameters / mp + replicated ones, for the parameters,
 * gradients and both AdamW moments; and no full copy of the weights during the steps. */
static void test_memory(task *k, int P, int rank)
{
    rc_error err = {0};
    rc_deployer_options dopt = {.seed = 3, .mp = P};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &dopt, &err);
    k->lm.model = d ? rc_model_create("tiny-gpt2", 1, &err) : NULL;
    rc_model *model = k->lm.model;
    rc_trainer *t = model ? rc_trainer_new(d, lm_task_collate, lm_task_loss, k, model->params, model, &err) : NULL;
    /* the expected figure, from the plan of the same loss */
    double expect = 0;
    if (t) {
        rc_graph *g = rc_graph_new();
        rc_batch b = {0};
        lm_task_collate(&b, (int64_t[]){0, 1}, 2, k, &err);
        rc_tensor *l = lm_task_loss(g, k->lm.model->params, &b, rc_rng_new(1), k, &err);
        int n = rc_params_count(k->lm.model->params);
        rc_tensor **p = calloc((size_t)n, sizeof *p);
        rc_shard_spec *s = calloc((size_t)n, sizeof *s);
        for (int i = 0; i < n; i++)
            p[i] = rc_params_get(g, k->lm.model->params, rc_params_name(k->lm.model->params, i));
        CHECK(rc_shard_plan(g, l, p, n, P, 0, s, NULL, &err) == 0);
        for (int i = 0; i < n; i++)
            expect += (double)rc_tensor_numel(p[i]) / (s[i].axis >= 0 ? P : 1);
        expect *= 4 * sizeof(float); /* parameters, gradients, two moments */
        free(p), free(s);
        rc_batch_free(&b);
        rc_graph_free(g);
    }
    rc_train_options o = {.steps = 2, .batch_size = 2, .optimizer = "adamw", .lr = 1e-3};
    rc_train_result r = {0};
    CHECKF(t && rc_trainer_fit(t, &o, (rc_examples){lm_task_count, k}, NULL, &r, &err) == 0, "mp %d: %s", P, err.msg);
    CHECKF(r.state_bytes > 0 && fabs((double)r.state_bytes / expect - 1) < 0.05 && r.full_weight_bytes == 0,
           "mp %d: state %lld bytes, expected %.0f; full copy %lld", P, (long long)r.state_bytes, expect,
           (long long)r.full_weight_bytes);
    if (rank == 0)
        printf("mp %d: trainer state %lld bytes per rank (expected %.0f), full weights kept %lld bytes\n", P,
               (long long)r.state_bytes, expect, (long long)r.full_weight_bytes);
    rc_trainer_free(t);
    rc_model_free(k->lm.model);
    rc_deployer_free(d);
}

int main(int argc, char **argv)
{
    rc_error err = {0};
    rc_dist_init(&argc, &argv, &err);
    rc_mesh world;
    rc_mesh_init(&world, 1, &err);
    int P = world.size, rank = world.rank;
    const char *dump = check_dump_path(argc, argv);
    if (dump && rank == 0)
        remove(dump); /* a failed run leaves no dump behind */
    task *k = calloc(1, sizeof *k);
    CHECK(k && lm_task_init(&k->lm, T, NTOK, 11) == 0); /* a failure ends in a crash below */
    const char *opts[2] = {"sgd", "adamw"};
    /* SGD shows the rounding of the summation order; AdamW divides each gradient by its
     * own running scale, so rounding in near-zero gradients shows more. A direction with no
     * gradient at all (the attention key bias: softmax ignores it) gets rounding noise
     * alone, which AdamW's default eps (1e-8) would turn into full steps of lr that differ
     * between runs; train() uses eps 1e-6, which keeps such noise at noise size (per tensor
     * the key bias otherwise differs by 5e-4). */
    const double tols[2] = {1e-5, 1e-4};
    check_weights dumped = {0}; /* the data-parallel runs' weights (--dump) */
    char worst[256];
    for (int o = 0; o < 2; o++)
        for (int shuffle = 0; shuffle < 2; shuffle++) {
            if (4 % P)
                break;
            char prefix[32];
            snprintf(prefix, sizeof prefix, "%s%s/", opts[o], shuffle ? " shuffled" : "");
            int n0 = dumped.n;
            train(k, 0, 4 / P, 1, opts[o], shuffle, 5, NULL, 0, RC_SCHEDULE_COSINE, &dumped, prefix, tols[o]);
            if (P == 1)
                continue; /* one process: the same run as the reference; compared across launchers by --dump */
            check_weights ref = {0}, dist = {0};
            train(k, 1, 4, 1, opts[o], shuffle, 5, NULL, 0, RC_SCHEDULE_COSINE, &ref, prefix, tols[o]);
            for (int i = n0; i < dumped.n; i++)
                check_weights_add(&dist, "", dumped.names[i], dumped.data[i], dumped.numel[i], dumped.tol[i]);
            double e = check_weights_diff(&dist, &ref, worst, sizeof worst, NULL);
            CHECKF(e < tols[o], "%s shuffle %d: %d processes x batch %d vs 1 x 4: tensor %s differs by %.3g", opts[o],
                   shuffle, P, 4 / P, worst, e);
            if (rank == 0)
                printf("%s%s: %d x batch %d vs 1 x batch 4 after 5 steps: worst tensor %s, rel L2 diff %.2e\n",
                       opts[o], shuffle ? " shuffled" : "", P, 4 / P, worst, e);
            check_weights_free(&ref), check_weights_free(&dist);
        }
    if (dump && rank == 0)
        CHECK(check_weights_save(&dumped, dump) == 0);
    check_weights_free(&dumped);
    /* accumulation: 2 micro-batches of 2 = one batch of 4 (AdamW divides by the gradient's
     * own scale, so its rounding shows more) */
    for (int o = 0; o < 2; o++) {
        check_weights one = {0}, acc = {0};
        train(k, 1, 4, 1, opts[o], 1, 5, NULL, 0, RC_SCHEDULE_LINEAR, &one, "", tols[o]);
        train(k, 1, 2, 2, opts[o], 1, 5, NULL, 0, RC_SCHEDULE_LINEAR, &acc, "", tols[o]);
        double e = check_weights_diff(&acc, &one, worst, sizeof worst, NULL);
        CHECKF(e < tols[o], "%s accumulation 2 x 2 vs 4: tensor %s differs by %.3g", opts[o], worst, e);
        if (rank == 0)
            printf("%s: 2 micro-batches of 2 vs one batch of 4: worst tensor %s, rel L2 diff %.2e\n", opts[o], worst,
                   e);
        check_weights_free(&one), check_weights_free(&acc);
    }
    /* resume: 10 straight vs 5 then resume to 10, on this mesh */
    char dir[64] = "/tmp/redco-resume-XXXXXX";
    if (rank == 0 && !mkdtemp(dir))
        CHECK(0);
    rc_comm_bcast(world.world, dir, sizeof dir, 0, &err);
    int b = 4 % P ? 1 : 4 / P; /* a constant schedule: a 5-step run is the first half of 10 */
    check_weights straight = {0}, half = {0}, resumed = {0};
    train(k, 0, b, 1, "adamw", 1, 10, NULL, 0, RC_SCHEDULE_CONSTANT, &straight, "", 0);
    train(k, 0, b, 1, "adamw", 1, 5, dir, 0, RC_SCHEDULE_CONSTANT, &half, "", 0);
    train(k, 0, b, 1, "adamw", 1, 10, dir, 1, RC_SCHEDULE_CONSTANT, &resumed, "", 0);
    double er = check_weights_diff(&resumed, &straight, worst, sizeof worst, NULL);
    CHECKF(er == 0, "resumed run differs from the straight run (tensor %s, rel %.3g)", worst, er);
    check_weights_free(&straight), check_weights_free(&half), check_weights_free(&resumed);
    char metric_dir[128];
    snprintf(metric_dir, sizeof metric_dir, "%s/metric", dir);
    double acc1[2] = {0}, accp[2] = {-1, -1};
    test_eval_metric(k, metric_dir, rank, 1, 0, acc1);
    if (P > 1) { /* zero 3: the eval predictor gathers the weights' shares as the step does */
        double acc3[2] = {-1, -1};
        snprintf(metric_dir, sizeof metric_dir, "%s/metric-zero3", dir);
        test_eval_metric(k, metric_dir, rank, 1, 3, acc3);
        if (rank == 0)
            printf("eval accuracy at steps 3 and 6: %.4f %.4f, with zero 3 %.4f %.4f\n", acc1[0], acc1[1], acc3[0],
                   acc3[1]);
        CHECKF(rank || (fabs(acc1[0] - acc3[0]) < 1e-9 && fabs(acc1[1] - acc3[1]) < 1e-9),
               "eval accuracy %g %g, with zero 3 %g %g", acc1[0], acc1[1], acc3[0], acc3[1]);
    }
    if (P > 1) { /* the eval predictor on P model shards sees the same predictions */
        snprintf(metric_dir, sizeof metric_dir, "%s/metric-mp", dir);
        test_eval_metric(k, metric_dir, rank, P, 0, accp);
        if (rank == 0)
            printf("eval accuracy at steps 3 and 6: %.4f %.4f on one shard, %.4f %.4f on %d\n", acc1[0], acc1[1],
                   accp[0], accp[1], P);
        CHECKF(rank || (fabs(acc1[0] - accp[0]) < 1e-9 && fabs(acc1[1] - accp[1]) < 1e-9),
               "eval accuracy %g %g on one shard, %g %g on %d", acc1[0], acc1[1], accp[0], accp[1], P);
    }
    if (P > 1)
        test_memory(k, P, rank);
    rc_comm_barrier(world.world, &err);
    if (rank == 0) {
        check_rm_tree(dir);
        CHECK(access(dir, F_OK) != 0);
    }
    lm_task_free(&k->lm);
    free(k);
    char name[64];
    snprintf(name, sizeof name, "mpi_train rank %d/%d", rank, P);
    int status = check_summary(name);
    rc_mesh_free(&world);
    rc_dist_finalize();
    return status;
}
