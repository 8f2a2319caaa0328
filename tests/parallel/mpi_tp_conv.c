/* mpi_tp_conv.c - convolutional networks trained on model shards equal one process. Two
 * CNNs written with graph ops and user parameters (rc_params_add_init, no names the plan
 * could read):
 *   cnn:     conv 1->8 3x3, relu, max pool 2, conv 8->16 3x3, relu, avg pool 2, flatten,
 *            linear -> 10, cross-entropy (the plan: the first conv column parallel, the
 *            second row parallel, the linear column parallel with the class-parallel loss);
 *   grouped: conv 1->8, silu, depthwise conv 8->8 (carries the split), silu, conv 8->16
 *            (row), silu, conv 16->16 in 4 groups (column, its input cut to its groups),
 *            flatten, linear -> 10 (row parallel).
 *   fixed:   cnn with the caller's splits: conv1 whole, conv2 split on its input channels
 *            (its whole input cut to them), fc by its input features.
 * Each trains 3 SGD steps and 3 AdamW steps on the first 24 Fashion-MNIST test images
 * bundled in data/fashion-mnist/ (global batch 8) on every mesh (dp, mp) in {(1,1), (2,1),
 * (1,2), (2,2), (1,4)} whose size is this world's, and is compared with one local process
 * on the CPU: every weight tensor within 1e-5 relative (L2), the last loss and the mean
 * loss of an evaluation over 12 images in batches of 6 (another graph on the same shards)
 * and the logits a Predictor then gives for them (batches of 5: a short tail) within
 * 1e-5. With --device D the meshes run on device D (e.g. opencl). */
#include "check.h"
#include "redco/data.h"
#include "redco/pipeline.h"
#include "redco/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KIND_CNN, KIND_GROUPED, KIND_FIXED, N_KINDS, N_TRAIN = 24, N_EVAL = 12, HW = 28, MAXP = 12 };

static const char *device;        /* --device: where the meshes run (the reference: the CPU) */
static rc_image_set images;

typedef struct {
    const char *name;
    int64_t shape[4];
    int ndim;
    double std;
} pdecl;

/* the parameters of each kind, in the order the loss uses them */
static const pdecl cnn_params[] = {
    {"conv1", {8, 1, 3, 3}, 4, 0.3},  {"conv1_b", {8}, 1, 0.1},  {"conv2", {16, 8, 3, 3}, 4, 0.1},
    {"conv2_b", {16}, 1, 0.1},        {"fc", {400, 10}, 2, 0.05}, {"fc_b", {10}, 1, 0.1}};
static const pdecl grouped_params[] = {
    {"conv1", {8, 1, 3, 3}, 4, 0.3},  {"conv1_b", {8}, 1, 0.1},  {"dw", {8, 1, 3, 3}, 4, 0.3},
    {"dw_b", {8}, 1, 0.1},            {"conv2", {16, 8, 3, 3}, 4, 0.1}, {"conv2_b", {16}, 1, 0.1},
    {"g3", {16, 4, 3, 3}, 4, 0.15},   {"g3_b", {16}, 1, 0.1},    {"fc", {16 * 20 * 20, 10}, 2, 0.01},
    {"fc_b", {10}, 1, 0.1}};

/* KIND_FIXED's splits */
static const rc_shard_override fixed[] = {{"conv1", -1, 0}, {"conv2", 1, 0}, {"fc", 0, 0}};

static int n_params(int kind)
{
    return kind != KIND_GROUPED ? (int)(sizeof cnn_params / sizeof *cnn_params)
                            : (int)(sizeof grouped_params / sizeof *grouped_params);
}

static rc_params *params_new(int kind)
{
    const pdecl *d = kind != KIND_GROUPED ? cnn_params : grouped_params;
    rc_params *p = rc_params_new();
    for (int i = 0; p && i < n_params(kind); i++)
        if (rc_params_add_init(p, d[i].name, d[i].ndim, d[i].shape, &(rc_init){.kind = RC_INIT_NORMAL, .std = d[i].std})) {
            rc_params_free(p);
            return NULL;
        }
    if (p && rc_params_init_normal(p, 0.1, 23)) {
        rc_params_free(p);
        return NULL;
    }
    return p;
}

typedef struct {
    int kind;
    int64_t offset;               /* the first image */
    int64_t n;
} job;

static int64_t count(int epoch, void *user)
{
    (void)epoch;
    return ((job *)user)->n;
}

static int collate(rc_batch *out, const int64_t *ex, int n, void *user, rc_error *err)
{
    job *j = user;
    float *x = rc_batch_add(out, "image", RC_F32, 4, (int64_t[]){n, 1, HW, HW});
    int32_t *y = rc_batch_add(out, "label", RC_I32, 1, (int64_t[]){n});
    if (!x || !y)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int i = 0; i < n; i++) {
        int64_t k = j->offset + ex[i];
        memcpy(x + (int64_t)i * HW * HW, images.pixels + k * HW * HW, HW * HW * sizeof *x);
        y[i] = images.labels[k];
    }
    return 0;
}

/* a conv and its activation: relu for the plain CNN; silu for the grouped one, whose
 * gradients a relu's kink at 0 would make depend on the last bit of a sum (an activation
 * within rounding of 0 on one side of the comparison, over a flat background) */
static rc_tensor *conv(rc_graph *g, rc_params *p, rc_tensor *x, const char *w, const char *b, int groups, int kind)
{
    rc_conv2d_params q = {.groups = groups};
    rc_tensor *y = rc_conv2d(g, x, rc_params_get(g, p, w), rc_params_get(g, p, b), &q);
    return kind != KIND_GROUPED ? rc_relu(g, y) : rc_silu(g, y);
}

/* the logits [B, 10] of the batch's images */
static rc_tensor *logits(rc_graph *g, rc_params *p, const rc_batch *b, const job *j)
{
    rc_tensor *x = rc_batch_input(g, b, "image");
    int64_t B = x ? x->shape[0] : 0;
    rc_pool2d_params pool = {{2, 2}, {0, 0}, {0, 0}};
    x = conv(g, p, x, "conv1", "conv1_b", 1, j->kind);
    if (j->kind != KIND_GROUPED) {
        x = conv(g, p, rc_max_pool2d(g, x, &pool), "conv2", "conv2_b", 1, j->kind);
        x = rc_avg_pool2d(g, x, &pool);
    } else {
        x = conv(g, p, conv(g, p, x, "dw", "dw_b", 8, j->kind), "conv2", "conv2_b", 1, j->kind);
        x = rc_conv2d(g, x, rc_params_get(g, p, "g3"), rc_params_get(g, p, "g3_b"), &(rc_conv2d_params){.groups = 4});
    }
    int64_t f = x ? x->shape[1] * x->shape[2] * x->shape[3] : 0;
    rc_tensor *h = rc_reshape(g, x, 2, (int64_t[]){B, f});
    return rc_add(g, rc_matmul(g, h, rc_params_get(g, p, "fc"), 0, 0), rc_params_get(g, p, "fc_b"));
}

static rc_tensor *loss(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)rng, (void)err;
    return rc_cross_entropy(g, logits(g, p, b, user), rc_batch_input(g, b, "label"), -100);
}

static rc_tensor *predict(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)rng, (void)err;
    return logits(g, p, b, user);
}

/* a Predictor's user: the images (first, as collate and predict read it) and the rows */
typedef struct {
    job j;
    float *rows;                  /* [N_EVAL][10] */
} pjob;

/* the predicted logits, on rank 0 */
static int output(int64_t example, const float *row, int64_t row_len, void *user, rc_error *err)
{
    (void)err;
    if (row_len != 10 || example < 0 || example >= N_EVAL)
        return -1;
    memcpy(((pjob *)user)->rows + example * 10, row, 10 * sizeof *row);
    return 0;
}

typedef struct {
    double loss, eval;            /* the last step's loss, the evaluation's mean loss */
    float logits[N_EVAL * 10];    /* a Predictor's after training (rank 0) */
} result;

/* 3 steps of `optimizer` on a dp x mp mesh (local: one CPU process alone), global batch 8;
 * appends the weights to *w (names prefixed); NAN losses on failure */
static const result *train(int kind, const char *optimizer, int mp, int local, check_weights *w, const char *prefix)
{
    rc_error err = {0};
    rc_deployer_options dopt = {.seed = 5, .mp = mp, .local = local, .device = local ? "cpu" : device};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &dopt, &err);
    job j = {.kind = kind, .offset = 0, .n = N_TRAIN}, e = {.kind = kind, .offset = N_TRAIN, .n = N_EVAL};
    rc_params *params = d ? params_new(kind) : NULL;
    int dp = d ? rc_deployer_mesh(d)->dp : 1;
    rc_trainer *t = params ? rc_trainer_new(d, collate, loss, &j, params, NULL, &err) : NULL;
    int adam = !strcmp(optimizer, "adamw");
    /* AdamW's first steps move each weight by about lr whatever its gradient's size: an eps
     * of 1e-6 keeps gradients near 0 (rounding residue) from deciding a sign */
    rc_train_options o = {.steps = 3, .batch_size = 8 / dp, .optimizer = optimizer, .lr = adam ? 1e-3 : 0.05,
                          .weight_decay = adam ? 0.01 : 0, .eps = adam ? 1e-6 : 0,
                          .shard_overrides = kind == KIND_FIXED && mp > 1 ? fixed : NULL,
                          .n_shard_overrides = kind == KIND_FIXED && mp > 1 ? 3 : 0};
    rc_train_result r = {0};
    static result res;
    res = (result){NAN, NAN, {0}};
    int ok = t && rc_trainer_fit(t, &o, (rc_examples){count, &j}, NULL, &r, &err) == 0;
    CHECKF(ok, "train %d with %s on mp %d: %s", kind, optimizer, mp, err.msg);
    if (ok) {
        int64_t tokens = 0;
        CHECKF(rc_trainer_eval(t, (rc_examples){count, &e}, 6 / dp, &res.eval, &tokens, &err) == 0,
               "eval %d on mp %d: %s", kind, mp, err.msg);
        res.loss = r.loss;
        CHECK(check_weights_add_params(w, prefix, params, 1e-5) == 0);
        /* a Predictor on the trained weights, with its own plan (the logits are the output) */
        pjob pj = {e, res.logits};
        rc_predictor *pr = rc_predictor_new(d, collate, predict, output, &pj, params, &err);
        CHECKF(pr && rc_predictor_run(pr, N_EVAL, 5, &err) == 0, "predict %d on mp %d: %s", kind, mp, err.msg);
        rc_predictor_free(pr);
    }
    rc_trainer_free(t);
    rc_params_free(params);
    rc_deployer_free(d);
    return &res;
}

static double rel(double a, double ref)
{
    return fabs(a - ref) / fmax(fabs(ref), 1e-12);
}

int main(int argc, char **argv)
{
    rc_error err = {0};
    rc_dist_init(&argc, &argv, &err);
    rc_mesh world;
    CHECK(rc_mesh_init(&world, 1, &err) == 0);
    int P = world.size, rank = world.rank;
    rc_mesh_free(&world);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--device"))
            device = argv[i + 1];
    int loaded = rc_fashion_mnist_load(&images, REDCO_DATA_DIR "/fashion-mnist", "t10k", N_TRAIN + N_EVAL, &err) == 0;
    CHECKF(loaded && images.h == HW && images.w == HW, "Fashion-MNIST: %s", err.msg);
    const char *kinds[N_KINDS] = {"cnn", "grouped", "fixed"}, *optimizers[2] = {"sgd", "adamw"};
    static const int meshes[5][2] = {{1, 1}, {2, 1}, {1, 2}, {2, 2}, {1, 4}};
    for (int kind = 0; loaded && kind < N_KINDS; kind++)
        for (int opt = 0; opt < 2; opt++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "%s/%s/", kinds[kind], optimizers[opt]);
            check_weights ref = {0};
            result r0 = *train(kind, optimizers[opt], 1, 1, &ref, prefix);
            for (int m = 0; m < 5; m++) {
                int dp = meshes[m][0], mp = meshes[m][1];
                if (dp * mp != P)
                    continue;
                check_weights w = {0};
                result r = *train(kind, optimizers[opt], mp, 0, &w, prefix);
                char worst[256] = "";
                double e = check_weights_diff(&w, &ref, worst, sizeof worst, NULL), dl = 0, nl = 0;
                for (int i = 0; i < N_EVAL * 10; i++) {
                    dl += (r.logits[i] - r0.logits[i]) * (double)(r.logits[i] - r0.logits[i]);
                    nl += r0.logits[i] * (double)r0.logits[i];
                }
                double el = rank == 0 ? sqrt(dl / fmax(nl, 1e-30)) : 0; /* rows come to rank 0 */
                CHECKF(e < 1e-5 && rel(r.loss, r0.loss) < 1e-5 && rel(r.eval, r0.eval) < 1e-5 && el < 1e-5,
                       "%s with %s on dp %d x mp %d: tensor %s differs by %.3g, loss %.7f vs %.7f, eval %.7f vs %.7f, "
                       "predicted logits by %.3g", kinds[kind], optimizers[opt], dp, mp, worst, e, r.loss, r0.loss,
                       r.eval, r0.eval, el);
                if (rank == 0)
                    printf("%-7s %-5s dp %d x mp %d on %s: loss after 3 steps %.6f (one CPU process %.6f), eval %.6f "
                           "(%.6f), worst tensor %s, rel L2 diff %.2e, predicted logits (norm %.3g) %.2e\n", kinds[kind],
                           optimizers[opt], dp, mp, device ? device : "cpu", r.loss, r0.loss, r.eval, r0.eval, worst, e,
                           sqrt(nl), el);
                check_weights_free(&w);
            }
            check_weights_free(&ref);
        }
    rc_image_set_free(&images);
    char name[64];
    snprintf(name, sizeof name, "mpi_tp_conv rank %d/%d", rank, P);
    int status = check_summary(name);
    rc_dist_finalize();
    return status;
}
