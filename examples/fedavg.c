/* fedavg.c - federated averaging (FedAvg, McMahan et al. 2017) on Fashion-MNIST, with the
 * three functions.
 *
 * K clients each hold a shard of the training images. In every round each client starts
 * from the server's weights, trains on its own shard for E epochs (SGD, its own trainer),
 * and the server replaces its weights by the clients' average weighted by their numbers
 * of examples, sum_k n_k w_k / sum_k n_k. After R rounds the server's weights are saved as
 * --workdir/model.safetensors. Each round prints the accuracy on the joint test set of
 * every client's local model (its weights after local training, before averaging) and of
 * the averaged model; the same figures go to --workdir/log.jsonl.
 *
 * Each client is a small redco program of its own: a deployer with a world of one
 * (rc_deployer_options.local) and the seed + k, a trainer and a predictor. The trainer of
 * a client continues across rounds (its epochs count on, so every round sees a new
 * shuffle), so with one client and any R and E the result is ordinary training for R x E
 * epochs, which --plain runs (one trainer over all the images; its final/ lands in
 * --workdir too). With --optimizer adamw a client's moments stay with it from round to
 * round (FedAvg proper, as in the paper, is SGD: the default).
 *
 * Under mpiexec -n P each process runs the clients k with k % P == its rank (P <= K), and
 * the weighted sums meet in an all-reduce over host memory (f64); without a launcher the
 * clients run in turn in one process. Both give the same averaged weights.
 *
 * --split iid gives each client a random 1/K of the images; --split labels (non-identical)
 * deals the 10 classes out in a seeded order, ceil(10 / K) of them (at least 2) to each
 * client, wrapping around, and divides each class's images among the clients that hold
 * it, so each client sees only a few classes. The model is McMahan et al.'s "2NN":
 *
 *     x [B, 1, 28, 28] -> flatten [B, 784] -> linear (200) -> relu -> linear (200) -> relu
 *       -> linear (10)
 *
 *   build/fedavg [--clients K] [--rounds 5] [--local-epochs 1] [--split iid|labels]
 *                [--train-limit 60000] [--test-limit 10000] [--batch 32] [--lr 0.05]
 *                [--optimizer sgd|adamw] [--device cpu|opencl] [--seed 1] [--data DIR]
 *                [--workdir DIR] [--plain]
 *   build/fedavg --clients 4 --split labels        (4 clients in turn; K defaults to P)
 *   mpiexec -n 4 build/fedavg --clients 8 --split labels --workdir run   (2 clients a process)
 *
 * The first of these, on all 60,000 images: each client's local model reaches about 0.29
 * (it knows 3 classes), the averaged one 0.43 after round 1 and 0.71 after round 5.
 */
#include "redco/data.h"
#include "redco/pipeline.h"
#include "redco/predict.h"
#include "redco/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NP = 6, HIDDEN = 200, CLASSES = 10, PIXELS = 28 * 28 };

/* the parameters: name, dimensions and shape */
static const struct {
    const char *name;
    int ndim;
    int64_t shape[2];
} layers[NP] = {
    {"fc1.weight", 2, {PIXELS, HIDDEN}}, {"fc1.bias", 1, {HIDDEN}},
    {"fc2.weight", 2, {HIDDEN, HIDDEN}}, {"fc2.bias", 1, {HIDDEN}},
    {"fc3.weight", 2, {HIDDEN, CLASSES}}, {"fc3.bias", 1, {CLASSES}},
};

/* Some images of a set: a client's shard, or the test set. The three functions' user. */
typedef struct {
    const rc_image_set *set;
    int64_t *rows;                /* the set's rows, ascending (NULL: all of them in order) */
    int64_t n;
    int64_t correct, seen;        /* predictions tallied by output */
} shard;

static int64_t row_of(const shard *s, int64_t example)
{
    return s->rows ? s->rows[example] : example;
}

/* ---- the model ----------------------------------------------------------------------------- */

/* x [B, 1, 28, 28] -> logits [B, 10] */
static rc_tensor *mlp(rc_graph *g, rc_params *params, rc_tensor *x)
{
    rc_tensor *w[NP];
    for (int i = 0; i < NP; i++)
        w[i] = rc_params_get(g, params, layers[i].name);
    rc_tensor *h = rc_reshape(g, x, 2, (int64_t[]){x->shape[0], PIXELS});  /* [B, 784] */
    h = rc_relu(g, rc_add(g, rc_matmul(g, h, w[0], 0, 0), w[1]));         /* [B, 200] */
    h = rc_relu(g, rc_add(g, rc_matmul(g, h, w[2], 0, 0), w[3]));         /* [B, 200] */
    return rc_add(g, rc_matmul(g, h, w[4], 0, 0), w[5]);                  /* [B, 10] */
}

/* Kaiming-normal weights (std sqrt(2 / fan in)), zero biases. */
static rc_params *mlp_params(uint64_t seed)
{
    rc_params *p = rc_params_new();
    for (int i = 0; p && i < NP; i++) {
        rc_init init = {.kind = RC_INIT_ZEROS};
        if (layers[i].ndim > 1)
            init = (rc_init){.kind = RC_INIT_NORMAL, .std = sqrt(2.0 / (double)layers[i].shape[0])};
        if (rc_params_add_init(p, layers[i].name, layers[i].ndim, layers[i].shape, &init)) {
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

/* collate: n examples of the shard -> images [n, 1, 28, 28] (in [0, 1]) and labels [n] */
static int collate(rc_batch *out, const int64_t *examples, int n, void *user, rc_error *err)
{
    const shard *s = user;
    int64_t hw = s->set->h * s->set->w;
    float *x = rc_batch_add(out, "images", RC_F32, 4, (int64_t[]){n, 1, s->set->h, s->set->w});
    int32_t *y = rc_batch_add(out, "labels", RC_I32, 1, (int64_t[]){n});
    if (!x || !y)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int i = 0; i < n; i++) {
        int64_t r = row_of(s, examples[i]);
        memcpy(x + i * hw, s->set->pixels + r * hw, (size_t)hw * sizeof *x);
        y[i] = s->set->labels[r];
    }
    return 0;
}

/* loss: the mean cross-entropy of the batch */
static rc_tensor *loss(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)rng, (void)user, (void)err;
    rc_tensor *logits = mlp(g, params, rc_batch_input(g, b, "images"));
    return rc_cross_entropy(g, logits, rc_batch_input(g, b, "labels"), -100);
}

/* predict: the logits [B, 10] */
static rc_tensor *predict(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)rng, (void)user, (void)err;
    return mlp(g, params, rc_batch_input(g, b, "images"));
}

/* output: one row of logits per example, in order; counts the right guesses */
static int output(int64_t example, const float *row, int64_t row_len, void *user, rc_error *err)
{
    (void)err;
    shard *s = user;
    int best = 0;
    for (int k = 1; k < row_len; k++)
        if (row[k] > row[best])
            best = k;
    s->correct += best == s->set->labels[row_of(s, example)];
    s->seen++;
    return 0;
}

static int64_t count(int epoch, void *user)
{
    (void)epoch;
    return ((const shard *)user)->n;
}

/* The accuracy of the predictor's weights on test (on rank 0 of its deployer; every rank
 * learns it). */
static int accuracy(rc_predictor *p, const rc_mesh *mesh, shard *test, int batch, double *acc,
                    rc_error *err)
{
    test->correct = test->seen = 0;
    if (rc_predictor_run(p, test->n, batch, err))
        return -1;
    *acc = test->seen ? (double)test->correct / (double)test->seen : 0.0;
    return rc_comm_bcast(mesh->world, acc, sizeof *acc, 0, err);
}

/* ---- the clients' shards ------------------------------------------------------------------ */

static int ascending(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Deals the n images of train out to K clients (c[k].rows, c[k].n): iid, a seeded random
 * 1/K each; labels, per the header. Every process makes the same shards. */
static int split(const rc_image_set *train, int K, int by_labels, uint64_t seed, shard *c)
{
    int64_t n = train->n, *perm = malloc((size_t)n * sizeof *perm), cls[CLASSES];
    int m = by_labels ? (CLASSES + K - 1) / K : 0, holders[CLASSES] = {0}, dealt[CLASSES] = {0};
    m = by_labels && m < 2 ? 2 : m;
    for (int k = 0; k < K; k++)
        c[k] = (shard){.set = train, .rows = malloc((size_t)n * sizeof(int64_t))};
    int ok = perm != NULL;
    for (int k = 0; k < K; k++)
        ok = ok && c[k].rows;
    if (!ok) {
        free(perm);
        return -1;
    }
    rc_epoch_order(n, seed, 0, 1, perm);
    rc_epoch_order(CLASSES, seed, 1, 1, cls);
    for (int k = 0; k < K * m; k++) /* client k has the slots k m + j, j < m, of class cls[slot % 10] */
        holders[cls[k % CLASSES]]++;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = perm[i];
        int k = (int)(i * K / n); /* iid: by place in the random order */
        if (by_labels) {          /* the j-th image of its class goes to its (j % h)-th holder */
            int y = train->labels[r], pos = 0;
            while (cls[pos] != y)
                pos++;
            k = (pos + CLASSES * (dealt[y]++ % holders[y])) / m; /* holder slot s: client s / m */
        }
        c[k].rows[c[k].n++] = r;
    }
    for (int k = 0; k < K; k++) {
        qsort(c[k].rows, (size_t)c[k].n, sizeof(int64_t), ascending);
        int64_t *fit = realloc(c[k].rows, (size_t)(c[k].n ? c[k].n : 1) * sizeof(int64_t));
        c[k].rows = fit ? fit : c[k].rows;
    }
    free(perm);
    return 0;
}

/* ---- clients and server ------------------------------------------------------------------ */

typedef struct {
    int epochs, batch, clients, rounds, plain, by_labels;
    int64_t train_limit, test_limit;
    double lr;
    uint64_t seed;
    const char *optimizer, *device, *data, *workdir;
} args;

/* A client: its deployer (a world of one), model, trainer and predictor. */
typedef struct {
    rc_deployer *dep;
    rc_params *params;
    rc_trainer *trainer;
    rc_predictor *predictor;
} client;

static int client_open(client *c, const args *a, int k, shard *data, shard *test, int *argc, char ***argv,
                       rc_error *err)
{
    rc_deployer_options o = {.seed = a->seed + (uint64_t)k, .local = 1, .device = a->device};
    *c = (client){0};
    if (!(c->dep = rc_deployer_new(argc, argv, &o, err)))
        return -1;
    if (!(c->params = mlp_params(a->seed)))
        return rc_error_set(err, RC_ERR_MEMORY, "client %d: cannot make the parameters", k);
    c->trainer = rc_trainer_new(c->dep, collate, loss, data, c->params, NULL, err);
    c->predictor = c->trainer ? rc_predictor_new(c->dep, collate, predict, output, test, c->params, err) : NULL;
    return c->predictor ? 0 : -1;
}

static void client_close(client *c)
{
    rc_predictor_free(c->predictor);
    rc_trainer_free(c->trainer);
    rc_params_free(c->params);
    rc_deployer_free(c->dep);
}

static rc_train_options train_options(const args *a, int epochs, int batch)
{
    return (rc_train_options){.epochs = epochs, .batch_size = batch, .shuffle = 1, .optimizer = a->optimizer,
                              .lr = a->lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                              .schedule = RC_SCHEDULE_CONSTANT};
}

/* the flat weights w (declaration order) into p */
static int params_set(rc_params *p, const float *w, rc_error *err)
{
    for (int i = 0; i < rc_params_count(p); i++) {
        if (rc_params_write(p, i, w, err))
            return -1;
        w += rc_params_tensor_numel(p, i);
    }
    return 0;
}

/* the flat weights w as DIR/model.safetensors */
static int save(const char *dir, rc_params *p, const float *w, rc_error *err)
{
    const char *names[NP];
    int ndims[NP];
    const int64_t *shapes[NP];
    const float *data[NP];
    for (int i = 0; i < NP; i++) {
        names[i] = rc_params_name(p, i);
        rc_params_shape(p, i, &ndims[i], &shapes[i]);
        data[i] = w;
        w += rc_params_tensor_numel(p, i);
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    return rc_safetensors_write(path, NP, names, ndims, shapes, data, 0, NULL, err);
}

/* One round: every client of this process from the server's weights w, then w = the
 * weighted average. acc[k]: client k's local accuracy; room for numel floats in local and
 * numel doubles in sum. */
static int round_run(const args *a, int r, client *cl, shard *c, shard *test, const rc_mesh *world, float *w,
                     float *local, double *sum, double *acc, rc_error *err)
{
    int64_t numel = rc_params_numel(cl[0].params), total = 0;
    int rc = 0;
    memset(sum, 0, (size_t)numel * sizeof *sum);
    for (int k = 0; k < a->clients; k++) {
        total += c[k].n;
        acc[k] = 0;
        if (k % world->size != world->rank || rc)
            continue;
        client *me = &cl[k / world->size];
        rc_train_options o = train_options(a, (r + 1) * a->epochs, a->batch);
        rc = params_set(me->params, w, err) ||
             rc_trainer_fit(me->trainer, &o, (rc_examples){count, &c[k]}, NULL, NULL, err) ||
             accuracy(me->predictor, rc_deployer_mesh(me->dep), test, a->batch, &acc[k], err) ||
             rc_params_read_all(me->params, local, err) ? -1 : 0;
        for (int64_t i = 0; !rc && i < numel; i++)
            sum[i] += (double)c[k].n * local[i];
    }
    if (rc_comm_agree(world->world, rc, err) || rc_comm_allreduce_sum_f64(world->world, sum, numel, err) ||
        rc_comm_allreduce_sum_f64(world->world, acc, a->clients, err))
        return -1;
    for (int64_t i = 0; i < numel; i++)
        w[i] = (float)(sum[i] / (double)total);
    return 0;
}

/* R rounds of FedAvg from the server's weights in params; prints and logs each round. */
static int fedavg(const args *a, rc_deployer *server, rc_params *params, shard *c, shard *test, int *argc,
                  char ***argv, rc_error *err)
{
    const rc_mesh *world = rc_deployer_mesh(server);
    int K = a->clients, mine = (K - world->rank + world->size - 1) / world->size, rc = 0;
    int64_t numel = rc_params_numel(params);
    client *cl = calloc((size_t)mine, sizeof *cl);
    float *w = malloc((size_t)numel * sizeof *w), *local = malloc((size_t)numel * sizeof *local);
    double *sum = malloc((size_t)numel * sizeof *sum), *vals = calloc((size_t)K + 1, sizeof *vals);
    char (*names)[32] = calloc((size_t)K + 1, sizeof *names);
    const char **keys = calloc((size_t)K + 1, sizeof *keys);
    rc_predictor *p = rc_predictor_new(server, collate, predict, output, test, params, err);
    if (!p)
        rc = -1;
    else if (!cl || !w || !local || !sum || !vals || !names || !keys)
        rc = rc_error_set(err, RC_ERR_MEMORY, "fedavg: out of memory");
    for (int j = 0; !rc && j < mine; j++) /* this process's clients: k = rank, rank + P, ... */
        rc = client_open(&cl[j], a, world->rank + j * world->size, &c[world->rank + j * world->size], test,
                         argc, argv, err);
    rc = rc_comm_agree(world->world, rc || rc_params_read_all(params, w, err) ? -1 : 0, err);
    for (int k = 0; !rc && k <= K; k++) {
        if (k < K)
            snprintf(names[k], sizeof names[k], "client%d/accuracy", k);
        else
            snprintf(names[k], sizeof names[k], "fedavg/accuracy");
        keys[k] = names[k];
    }
    for (int r = 0; !rc && r < a->rounds; r++) {
        rc = round_run(a, r, cl, c, test, world, w, local, sum, vals, err) || params_set(params, w, err) ||
             accuracy(p, world, test, a->batch, &vals[K], err) ||
             rc_deployer_log(server, r + 1, keys, vals, K + 1, err) ? -1 : 0;
        if (!rc && rc_deployer_is_main(server)) {
            printf("round %d: local accuracy", r + 1);
            for (int k = 0; k < K; k++)
                printf(" %.4f", vals[k]);
            printf(", averaged %.4f\n", vals[K]);
            fflush(stdout);
        }
    }
    if (!rc && a->workdir && rc_deployer_is_main(server))
        rc = save(a->workdir, params, w, err);
    rc = rc_comm_agree(world->world, rc, err);
    for (int j = 0; cl && j < mine; j++)
        client_close(&cl[j]);
    rc_predictor_free(p);
    free(cl), free(w), free(local), free(sum), free(vals), free(names), free(keys);
    return rc;
}

/* --plain: ordinary training over all the images for R x E epochs, as one client would. */
static int plain(const args *a, rc_deployer *d, rc_params *params, shard *train, shard *test, rc_error *err)
{
    const rc_mesh *mesh = rc_deployer_mesh(d);
    if (a->batch % mesh->dp)
        return rc_error_set(err, RC_ERR_ARG, "--batch %d does not divide among %d processes", a->batch, mesh->dp);
    rc_trainer *t = rc_trainer_new(d, collate, loss, train, params, NULL, err);
    rc_predictor *p = t ? rc_predictor_new(d, collate, predict, output, test, params, err) : NULL;
    float *w = malloc((size_t)rc_params_numel(params) * sizeof *w);
    rc_train_options o = train_options(a, a->rounds * a->epochs, a->batch / mesh->dp);
    double acc = 0;
    int rc = !p || !w || rc_trainer_fit(t, &o, (rc_examples){count, train}, NULL, NULL, err) ||
             accuracy(p, mesh, test, a->batch / mesh->dp, &acc, err) || rc_params_read_all(params, w, err);
    if (!rc && rc_deployer_is_main(d)) {
        printf("plain training, %d epochs: accuracy %.4f\n", a->rounds * a->epochs, acc);
        if (a->workdir)
            rc = save(a->workdir, params, w, err);
    }
    free(w);
    rc_predictor_free(p);
    rc_trainer_free(t);
    return rc_comm_agree(mesh->world, rc ? -1 : 0, err);
}

/* ---- main ------------------------------------------------------------------------------- */

static int parse_args(int argc, char **argv, args *a)
{
    *a = (args){.epochs = 1, .batch = 32, .clients = 0, .rounds = 5, .train_limit = 60000, .test_limit = 10000,
                .lr = 0.05, .seed = 1, .optimizer = "sgd"};
    const char *how = "iid";
    int ok = 1;
    for (int i = 1; ok && i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--plain")) a->plain = 1, i--;
        else if (!v) ok = 0;
        else if (!strcmp(k, "--clients")) a->clients = atoi(v);
        else if (!strcmp(k, "--rounds")) a->rounds = atoi(v);
        else if (!strcmp(k, "--local-epochs")) a->epochs = atoi(v);
        else if (!strcmp(k, "--split")) how = v;
        else if (!strcmp(k, "--train-limit")) a->train_limit = atoll(v);
        else if (!strcmp(k, "--test-limit")) a->test_limit = atoll(v);
        else if (!strcmp(k, "--batch")) a->batch = atoi(v);
        else if (!strcmp(k, "--lr")) a->lr = atof(v);
        else if (!strcmp(k, "--optimizer")) a->optimizer = v;
        else if (!strcmp(k, "--seed")) a->seed = strtoull(v, NULL, 10);
        else if (!strcmp(k, "--device")) a->device = v;
        else if (!strcmp(k, "--data")) a->data = v;
        else if (!strcmp(k, "--workdir")) a->workdir = v;
        else ok = 0;
    }
    a->by_labels = !strcmp(how, "labels");
    if (!ok || a->epochs < 1 || a->rounds < 1 || a->clients < 0 || a->train_limit < 1 || a->test_limit < 1 ||
        a->batch < 1 || !(a->lr > 0) || (strcmp(how, "iid") && !a->by_labels) ||
        (strcmp(a->optimizer, "adamw") && strcmp(a->optimizer, "sgd"))) {
        fprintf(stderr, "usage: fedavg [--clients K] [--rounds R] [--local-epochs E] [--split iid|labels]\n"
                        "              [--train-limit N] [--test-limit N] [--batch B] [--lr LR]\n"
                        "              [--optimizer sgd|adamw] [--device cpu|opencl] [--seed S] [--data DIR]\n"
                        "              [--workdir DIR] [--plain]\n");
        return -1;
    }
    return 0;
}

/* the clients' shards, told on rank 0 */
static void describe(const shard *c, int K)
{
    for (int k = 0; k < K; k++) {
        int64_t per[CLASSES] = {0};
        for (int64_t i = 0; i < c[k].n; i++)
            per[c[k].set->labels[c[k].rows[i]]]++;
        printf("client %d: %lld images, classes", k, (long long)c[k].n);
        for (int y = 0; y < CLASSES; y++)
            if (per[y])
                printf(" %d", y);
        printf("\n");
    }
}

int main(int argc, char **argv)
{
    args a;
    if (parse_args(argc, argv, &a))
        return 2;
    rc_error err = {0};
    rc_image_set train = {0}, test = {0};
    shard all = {.set = &train}, tests = {.set = &test}, *c = NULL;
    rc_deployer_options o = {.seed = a.seed, .workdir = a.workdir, .verbose = a.plain, .device = a.device};
    rc_deployer *server = NULL;
    rc_params *params = NULL;
    /* MPI first: several deployers live in this process (see rc_deployer_free) */
    int rc = rc_dist_init(&argc, &argv, &err) || !(server = rc_deployer_new(&argc, &argv, &o, &err)) ||
             rc_fashion_mnist_load(&train, a.data, "train", a.train_limit, &err) ||
             rc_fashion_mnist_load(&test, a.data, "t10k", a.test_limit, &err);
    const rc_mesh *world = rc ? NULL : rc_deployer_mesh(server);
    if (!rc && !a.clients)
        a.clients = world->size;
    if (!rc && !a.plain && a.clients < world->size)
        rc = rc_error_set(&err, RC_ERR_ARG, "--clients %d: fewer clients than the %d processes", a.clients,
                          world->size);
    if (!rc && !(params = mlp_params(a.seed)))
        rc = rc_error_set(&err, RC_ERR_MEMORY, "cannot make the parameters");
    if (!rc && !a.plain && (!(c = calloc((size_t)a.clients, sizeof *c)) ||
                            split(&train, a.clients, a.by_labels, a.seed, c)))
        rc = rc_error_set(&err, RC_ERR_MEMORY, "cannot make the clients' shards");
    for (int k = 0; !rc && !a.plain && k < a.clients; k++)
        if (c[k].n < a.batch)
            rc = rc_error_set(&err, RC_ERR_ARG, "client %d has %lld images, fewer than a batch of %d "
                              "(more --train-limit, fewer --clients)", k, (long long)c[k].n, a.batch);
    all.n = train.n, tests.n = test.n;
    if (!rc && rc_deployer_is_main(server)) {
        printf("Fashion-MNIST: %lld training and %lld test images; MLP of %lld parameters on %s; ",
               (long long)train.n, (long long)test.n, (long long)rc_params_numel(params),
               rc_backend_name(rc_deployer_backend(server)));
        if (a.plain)
            printf("plain training\n");
        else
            printf("%d clients (%s split) on %d processes, %d rounds of %d local epochs\n", a.clients,
                   a.by_labels ? "labels" : "iid", world->size, a.rounds, a.epochs);
        if (!a.plain)
            describe(c, a.clients);
    }
    if (!rc)
        rc = a.plain ? plain(&a, server, params, &all, &tests, &err)
                     : fedavg(&a, server, params, c, &tests, &argc, &argv, &err);
    if (rc)
        fprintf(stderr, "fedavg: %s\n", err.msg);
    for (int k = 0; c && k < a.clients; k++)
        free(c[k].rows);
    free(c);
    rc_image_set_free(&train);
    rc_image_set_free(&test);
    rc_params_free(params);
    rc_deployer_free(server);
    rc_dist_finalize();
    return rc ? 1 : 0;
}
