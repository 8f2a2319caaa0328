/* mlp_classifier.c - a pipeline of one's own (the README's "Your own pipeline"): a two-layer
 * perceptron classifying Fashion-MNIST images, written as the three functions against the
 * installed library alone, trained, evaluated and run on several processes.
 *
 *     x [B, 784] -> linear (hidden) -> relu -> linear (10) -> logits
 *
 * The parameters are only declared (rc_params_add): the trainer draws them from the seed
 * (RC_INIT_AUTO), the same on every rank. The images are the IDX files DIR/SPLIT-*-ubyte.gz
 * (data/fashion-mnist holds 512 of the test split; Debian's dataset-fashion-mnist all of
 * them); the last eighth of those read is held out as the test set. --batch is the global
 * batch, divided among the processes, so one process and two train the same weights.
 *
 *   cc mlp_classifier.c $(pkg-config --cflags --libs redco) -o mlp_classifier
 *   ./mlp_classifier --data data/fashion-mnist [--split t10k] [--limit N] [--epochs 10]
 *                    [--batch 32] [--lr 2e-3] [--hidden 64] [--seed 1] [--workdir DIR]
 *   mpirun -np 2 ./mlp_classifier --data data/fashion-mnist
 */
#include "redco/data.h"
#include "redco/pipeline.h"
#include "redco/predict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PIXELS = 28 * 28, CLASSES = 10 };

/* Examples first .. first + n - 1 of the images: the training or the test set. */
typedef struct {
    const rc_image_set *images;
    int64_t first, n;
    int64_t correct, seen;        /* the accuracy's counters (the test set's) */
} view;

static int64_t count(int epoch, void *user)
{
    (void)epoch;
    return ((view *)user)->n;
}

/* collate: n example indices -> x [n, 784] (pixels in [0, 1]) and labels [n] */
static int collate(rc_batch *out, const int64_t *examples, int n, void *user, rc_error *err)
{
    const view *v = user;
    float *x = rc_batch_add(out, "x", RC_F32, 2, (int64_t[]){n, PIXELS});
    int32_t *y = rc_batch_add(out, "labels", RC_I32, 1, (int64_t[]){n});
    if (!x || !y)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int i = 0; i < n; i++) {
        int64_t e = v->first + examples[i];
        memcpy(x + i * PIXELS, v->images->pixels + e * PIXELS, PIXELS * sizeof *x);
        y[i] = v->images->labels[e];
    }
    return 0;
}

/* x [B, 784] -> logits [B, 10] */
static rc_tensor *mlp(rc_graph *g, rc_params *p, const rc_batch *b)
{
    rc_tensor *x = rc_batch_input(g, b, "x");
    rc_tensor *h = rc_relu(g, rc_add(g, rc_matmul(g, x, rc_params_get(g, p, "fc1.weight"), 0, 0),
                                     rc_params_get(g, p, "fc1.bias")));
    return rc_add(g, rc_matmul(g, h, rc_params_get(g, p, "fc2.weight"), 0, 0), rc_params_get(g, p, "fc2.bias"));
}

/* loss: the mean cross-entropy of the batch */
static rc_tensor *loss(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)rng, (void)user, (void)err;
    return rc_cross_entropy(g, mlp(g, p, b), rc_batch_input(g, b, "labels"), RC_IGNORE_INDEX);
}

/* predict: the logits */
static rc_tensor *predict(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)rng, (void)user, (void)err;
    return mlp(g, p, b);
}

/* The accuracy, in three parts: counters set to zero, one row of logits per test example
 * (on rank 0, in order), the share right. */
static void accuracy_begin(void *user)
{
    view *v = user;
    v->correct = v->seen = 0;
}

static int accuracy_row(int64_t example, const float *row, int64_t row_len, void *user, rc_error *err)
{
    (void)err;
    view *v = user;
    int best = 0;
    for (int k = 1; k < row_len; k++)
        best = row[k] > row[best] ? k : best;
    v->correct += best == v->images->labels[v->first + example];
    v->seen++;
    return 0;
}

static double accuracy(void *user)
{
    const view *v = user;
    return v->seen ? (double)v->correct / (double)v->seen : 0.0;
}

typedef struct {
    const char *data, *split, *workdir;
    int64_t limit;
    int epochs, batch, hidden;
    double lr;
    unsigned long long seed;
} args;

static int parse(int argc, char **argv, args *a)
{
    *a = (args){.split = "t10k", .epochs = 10, .batch = 32, .hidden = 64, .lr = 2e-3, .seed = 1};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--data")) a->data = v;
        else if (!strcmp(k, "--split")) a->split = v;
        else if (!strcmp(k, "--workdir")) a->workdir = v;
        else if (!strcmp(k, "--limit")) a->limit = atoll(v);
        else if (!strcmp(k, "--epochs")) a->epochs = atoi(v);
        else if (!strcmp(k, "--batch")) a->batch = atoi(v);
        else if (!strcmp(k, "--hidden")) a->hidden = atoi(v);
        else if (!strcmp(k, "--lr")) a->lr = atof(v);
        else if (!strcmp(k, "--seed")) a->seed = strtoull(v, NULL, 10);
        else return -1;
    }
    return argc % 2 == 1 && a->epochs > 0 && a->batch > 0 && a->hidden > 0 && a->lr > 0 ? 0 : -1;
}

/* the four parameters, declared only: the trainer gives them values */
static rc_params *mlp_params(int hidden)
{
    rc_params *p = rc_params_new();
    if (p && (rc_params_add(p, "fc1.weight", 2, (int64_t[]){PIXELS, hidden}) ||
              rc_params_add(p, "fc1.bias", 1, (int64_t[]){hidden}) ||
              rc_params_add(p, "fc2.weight", 2, (int64_t[]){hidden, CLASSES}) ||
              rc_params_add(p, "fc2.bias", 1, (int64_t[]){CLASSES}))) {
        rc_params_free(p);
        return NULL;
    }
    return p;
}

static int run(const args *a, rc_deployer *d, rc_error *err)
{
    rc_image_set images = {0};
    if (rc_fashion_mnist_load(&images, a->data, a->split, a->limit, err))
        return -1;
    int64_t n_test = images.n / 8;
    view train = {&images, 0, images.n - n_test, 0, 0}, test = {&images, images.n - n_test, n_test, 0, 0};
    int dp = rc_deployer_mesh(d)->dp;
    rc_params *params = mlp_params(a->hidden);
    rc_trainer *t = params ? rc_trainer_new(d, collate, loss, &train, params, NULL, err) : NULL;
    rc_train_options o = {.epochs = a->epochs, .batch_size = a->batch / dp, .lr = a->lr, .shuffle = 1,
                          .log_every = 10, .eval_every = train.n / a->batch, .eval_predict = predict,
                          .eval_output = accuracy_row, .eval_metric = accuracy, .eval_begin = accuracy_begin,
                          .metric_name = "accuracy", .metric_higher_is_better = 1};
    rc_train_result r = {0};
    int rc = t ? 0 : -1;
    if (!rc && a->batch % dp)
        rc = rc_error_set(err, RC_ERR_ARG, "--batch %d does not divide among %d processes", a->batch, dp);
    if (!rc)
        rc = rc_trainer_fit(t, &o, (rc_examples){count, &train}, &(rc_examples){count, &test}, &r, err);
    /* the trained network on the test set once more, as an application would use it */
    rc_predictor *p = rc ? NULL : rc_predictor_new(d, collate, predict, accuracy_row, &test, params, err);
    accuracy_begin(&test);
    if (!rc && (!p || rc_predictor_run(p, test.n, a->batch / dp, err)))
        rc = -1;
    if (!rc && rc_deployer_is_main(d)) {
        printf("trained %lld steps on %lld images, final loss %.6f\n", (long long)r.step, (long long)train.n, r.loss);
        printf("test accuracy %.4f on %lld images (%d process%s)\n", accuracy(&test), (long long)test.n, dp,
               dp > 1 ? "es" : "");
    }
    rc_predictor_free(p);
    rc_trainer_free(t);
    rc_params_free(params);
    rc_image_set_free(&images);
    return rc;
}

int main(int argc, char **argv)
{
    args a;
    if (parse(argc, argv, &a)) {
        fprintf(stderr, "usage: mlp_classifier --data DIR [--split t10k] [--limit N] [--epochs E] [--batch B]\n"
                        "                      [--lr LR] [--hidden H] [--seed S] [--workdir DIR]\n");
        return 2;
    }
    rc_error err = {0};
    rc_deployer_options dopt = {.seed = a.seed, .workdir = a.workdir, .verbose = 1};
    rc_deployer *d = rc_deployer_new(&argc, &argv, &dopt, &err);
    int rc = d ? run(&a, d, &err) : -1;
    if (rc)
        fprintf(stderr, "mlp_classifier: %s\n", err.msg);
    rc_deployer_free(d);          /* finalizes MPI if the deployer started it */
    return rc ? 1 : 0;
}
