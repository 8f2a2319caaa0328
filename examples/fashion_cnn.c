/* fashion_cnn.c - image classification with a small convolutional network on Fashion-MNIST,
 * written as the three functions.
 *
 * The images come from Debian's dataset-fashion-mnist package (scripts/setup.sh installs it;
 * --data DIR reads the same IDX files from elsewhere). The network:
 *
 *     x [B, 1, 28, 28] -> conv 3x3 (16) -> relu -> max pool 2 -> conv 3x3 (32) -> relu
 *       -> max pool 2 -> flatten [B, 32*7*7] -> linear (128) -> relu -> linear (10)
 *
 * collate reads images and labels, loss is the cross-entropy of the logits, predict returns
 * the logits, and the trainer does the rest: shuffling, data parallelism under mpirun, the
 * test accuracy logged at each evaluation as eval/accuracy, final/ in --workdir. With
 * --mp N the network is split over N model shards by the automatic plan, which knows
 * convolutions by their structure: a convolution fed a whole activation splits its kernels
 * by output channels, the next one by input channels (one all-reduce), as the linear layers
 * alternate. The weights do not depend on the mesh: --batch is the global batch, divided
 * among the data-parallel replicas.
 *
 *   build/fashion_cnn [--epochs 1] [--steps N] [--train-limit 60000] [--test-limit 10000]
 *                     [--batch 64] [--lr 2e-3] [--optimizer adamw|sgd] [--mp 1]
 *                     [--device cpu|opencl] [--seed 1]
 *                     [--data DIR] [--workdir DIR]
 *   mpirun -np 4 build/fashion_cnn --mp 2 --workdir run     (2 replicas x 2 model shards)
 */
#include "redco/data.h"
#include "redco/pipeline.h"
#include "redco/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NP = 8, HIDDEN = 128 };

/* the parameters: name, dimensions and shape */
static const struct {
    const char *name;
    int ndim;
    int64_t shape[4];
} layers[NP] = {
    {"conv1.weight", 4, {16, 1, 3, 3}},  {"conv1.bias", 1, {16}},
    {"conv2.weight", 4, {32, 16, 3, 3}}, {"conv2.bias", 1, {32}},
    {"fc1.weight", 2, {32 * 7 * 7, HIDDEN}}, {"fc1.bias", 1, {HIDDEN}},
    {"fc2.weight", 2, {HIDDEN, 10}},     {"fc2.bias", 1, {10}},
};

/* The user's data, handed to the three functions as `user`. */
typedef struct {
    rc_image_set train, test;
    int eval;                     /* 1 while the test set is read */
    int64_t correct, seen;        /* the tally of the current evaluation */
} fashion;

static const rc_image_set *images(const fashion *d)
{
    return d->eval ? &d->test : &d->train;
}

/* ---- the network --------------------------------------------------------------------------- */

/* x [B, 1, 28, 28] -> logits [B, 10] */
static rc_tensor *cnn(rc_graph *g, rc_params *params, rc_tensor *x)
{
    rc_tensor *w[NP];
    for (int i = 0; i < NP; i++)
        w[i] = rc_params_get(g, params, layers[i].name);
    rc_conv2d_params same = {.padding = {1, 1}};
    rc_pool2d_params pool = {.kernel = {2, 2}};
    rc_tensor *h = rc_relu(g, rc_conv2d(g, x, w[0], w[1], &same));      /* [B, 16, 28, 28] */
    h = rc_max_pool2d(g, h, &pool);                                      /* [B, 16, 14, 14] */
    h = rc_relu(g, rc_conv2d(g, h, w[2], w[3], &same));                  /* [B, 32, 14, 14] */
    h = rc_max_pool2d(g, h, &pool);                                      /* [B, 32, 7, 7] */
    h = rc_reshape(g, h, 2, (int64_t[]){x->shape[0], 32 * 7 * 7});      /* [B, 1568] */
    h = rc_relu(g, rc_add(g, rc_matmul(g, h, w[4], 0, 0), w[5]));        /* [B, 128] */
    return rc_add(g, rc_matmul(g, h, w[6], 0, 0), w[7]);                 /* [B, 10] */
}

/* Kaiming-normal weights (std sqrt(2 / fan in)), zero biases. */
static rc_params *cnn_params(uint64_t seed)
{
    rc_params *p = rc_params_new();
    for (int i = 0; p && i < NP; i++) {
        const int64_t *s = layers[i].shape;
        int64_t fan_in = layers[i].ndim == 4 ? s[1] * s[2] * s[3] : s[0];
        rc_init init = {.kind = RC_INIT_ZEROS};
        if (layers[i].ndim > 1)
            init = (rc_init){.kind = RC_INIT_NORMAL, .std = sqrt(2.0 / (double)fan_in)};
        if (rc_params_add_init(p, layers[i].name, layers[i].ndim, s, &init)) {
            rc_params_free(p);
            return NULL;
        }
    }
    if (p && rc_params_init_normal(p, 0.02, seed)) {
        rc_params_free(p);
        return NULL;
    }
    return p;
}

/* ---- the three functions -------------------------------------------------------------- */

/* collate: n image indices -> images [n, 1, 28, 28] (in [0, 1]) and labels [n] */
static int collate(rc_batch *out, const int64_t *examples, int n, void *user, rc_error *err)
{
    const rc_image_set *s = images(user);
    int64_t hw = s->h * s->w;
    float *x = rc_batch_add(out, "images", RC_F32, 4, (int64_t[]){n, 1, s->h, s->w});
    int32_t *y = rc_batch_add(out, "labels", RC_I32, 1, (int64_t[]){n});
    if (!x || !y)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int i = 0; i < n; i++) {
        memcpy(x + i * hw, s->pixels + examples[i] * hw, (size_t)hw * sizeof *x);
        y[i] = s->labels[examples[i]];
    }
    return 0;
}

/* loss: the mean cross-entropy of the batch */
static rc_tensor *loss(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)rng, (void)user, (void)err;
    rc_tensor *logits = cnn(g, params, rc_batch_input(g, b, "images"));
    return rc_cross_entropy(g, logits, rc_batch_input(g, b, "labels"), -100);
}

/* predict: the logits [B, 10] */
static rc_tensor *predict(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)rng, (void)user, (void)err;
    return cnn(g, params, rc_batch_input(g, b, "images"));
}

/* output: one row of logits per test image, in order; counts the right guesses */
static int output(int64_t example, const float *row, int64_t row_len, void *user, rc_error *err)
{
    (void)err;
    fashion *d = user;
    int best = 0;
    for (int k = 1; k < row_len; k++)
        if (row[k] > row[best])
            best = k;
    d->correct += best == d->test.labels[example];
    d->seen++;
    return 0;
}

/* the trainer's evaluation: the test accuracy of the rows received since the last one */
static double accuracy(void *user)
{
    fashion *d = user;
    double a = d->seen ? (double)d->correct / (double)d->seen : 0.0;
    d->correct = d->seen = 0;
    return a;
}

static int64_t count_train(int epoch, void *user)
{
    (void)epoch;
    fashion *d = user;
    d->eval = 0;
    return d->train.n;
}

static int64_t count_test(int epoch, void *user)
{
    (void)epoch;
    fashion *d = user;
    d->eval = 1;
    return d->test.n;
}

/* ---- main ------------------------------------------------------------------------------- */

typedef struct {
    int epochs, batch, mp;
    int64_t steps, train_limit, test_limit;
    double lr;
    uint64_t seed;
    const char *optimizer, *device, *data, *workdir;
} args;

static int parse_args(int argc, char **argv, args *a)
{
    *a = (args){.epochs = 1, .batch = 64, .mp = 1, .train_limit = 60000, .test_limit = 10000,
                .lr = 2e-3, .seed = 1, .optimizer = "adamw"};
    int ok = 1;
    for (int i = 1; ok && i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) ok = 0;
        else if (!strcmp(k, "--epochs")) a->epochs = atoi(v);
        else if (!strcmp(k, "--steps")) a->steps = atoll(v);
        else if (!strcmp(k, "--train-limit")) a->train_limit = atoll(v);
        else if (!strcmp(k, "--test-limit")) a->test_limit = atoll(v);
        else if (!strcmp(k, "--batch")) a->batch = atoi(v);
        else if (!strcmp(k, "--lr")) a->lr = atof(v);
        else if (!strcmp(k, "--optimizer")) a->optimizer = v;
        else if (!strcmp(k, "--mp")) a->mp = atoi(v);
        else if (!strcmp(k, "--seed")) a->seed = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--device")) a->device = v;
        else if (!strcmp(k, "--data")) a->data = v;
        else if (!strcmp(k, "--workdir")) a->workdir = v;
        else ok = 0;
    }
    if (!ok || a->epochs < 1 || a->steps < 0 || a->train_limit < 1 || a->test_limit < 1 || a->batch < 1 ||
        a->mp < 1 || !(a->lr > 0) || (strcmp(a->optimizer, "adamw") && strcmp(a->optimizer, "sgd"))) {
        fprintf(stderr, "usage: fashion_cnn [--epochs E] [--steps N] [--train-limit N] [--test-limit N]\n"
                        "                   [--batch B] [--lr LR] [--optimizer adamw|sgd] [--mp N]\n"
                        "                   [--device cpu|opencl] [--seed S] [--data DIR] [--workdir DIR]\n");
        return -1;
    }
    return 0;
}

/* The test accuracy of the current weights (a Predictor over the test set). */
static int test_accuracy(rc_predictor *p, fashion *d, int batch, double *acc, rc_error *err)
{
    d->eval = 1;
    d->correct = d->seen = 0;
    int rc = rc_predictor_run(p, d->test.n, batch, err);
    d->eval = 0;
    *acc = accuracy(d);
    return rc;
}

static int run(const args *a, fashion *d, rc_params *params, rc_deployer *dep, rc_error *err)
{
    const rc_mesh *mesh = rc_deployer_mesh(dep);
    if (a->batch % mesh->dp)
        return rc_error_set(err, RC_ERR_ARG, "--batch %d does not divide among %d data-parallel replicas",
                            a->batch, mesh->dp);
    int batch = a->batch / mesh->dp, main_rank = rc_deployer_is_main(dep);
    rc_trainer *t = rc_trainer_new(dep, collate, loss, d, params, NULL, err);
    rc_predictor *p = t ? rc_predictor_new(dep, collate, predict, output, d, params, err) : NULL;
    double before = 0, after = 0;
    rc_train_options o = {.steps = a->steps, .epochs = a->epochs, .batch_size = batch, .shuffle = 1,
                          .optimizer = a->optimizer, .lr = a->lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                          .schedule = RC_SCHEDULE_CONSTANT, .log_every = 20,
                          .eval_predict = predict, .eval_output = output, .eval_metric = accuracy,
                          .metric_name = "accuracy", .metric_higher_is_better = 1};
    int rc = !p || test_accuracy(p, d, batch, &before, err) ||
             rc_trainer_fit(t, &o, (rc_examples){count_train, d}, &(rc_examples){count_test, d}, NULL, err) ||
             test_accuracy(p, d, batch, &after, err);
    if (!rc && main_rank)
        printf("test accuracy (%lld images): before training %.4f, after %.4f\n", (long long)d->test.n,
               before, after);
    rc_predictor_free(p);
    rc_trainer_free(t);
    return rc ? -1 : 0;
}

int main(int argc, char **argv)
{
    args a;
    if (parse_args(argc, argv, &a))
        return 2;
    rc_error err = {0};
    fashion d = {0};
    rc_deployer_options o = {.seed = a.seed, .mp = a.mp, .workdir = a.workdir, .verbose = 1,
                             .device = a.device};
    rc_deployer *dep = rc_deployer_new(&argc, &argv, &o, &err);
    rc_params *params = dep ? cnn_params(a.seed) : NULL;
    int rc = !params || rc_fashion_mnist_load(&d.train, a.data, "train", a.train_limit, &err) ||
             rc_fashion_mnist_load(&d.test, a.data, "t10k", a.test_limit, &err);
    if (!rc && rc_deployer_is_main(dep))
        printf("Fashion-MNIST: %lld training and %lld test images; CNN of %lld parameters on %s, "
               "%d data-parallel x %d model shards\n", (long long)d.train.n, (long long)d.test.n,
               (long long)rc_params_numel(params), rc_backend_name(rc_deployer_backend(dep)),
               rc_deployer_mesh(dep)->dp, rc_deployer_mesh(dep)->mp);
    if (!rc)
        rc = run(&a, &d, params, dep, &err);
    if (rc)
        fprintf(stderr, "fashion_cnn: %s\n", dep && params ? err.msg : !dep ? err.msg : "cannot make the parameters");
    rc_image_set_free(&d.train);
    rc_image_set_free(&d.test);
    rc_params_free(params);
    rc_deployer_free(dep);
    return rc ? 1 : 0;
}
