/* maml.c - model-agnostic meta-learning (MAML, Finn et al. 2017) on sine waves, written as
 * the three functions.
 *
 * A task is a sine wave y = A sin(x - phase) with A in [0.1, 5] and phase in [0, pi]; it
 * comes with K support points and Q query points, x in [-5, 5]. MAML looks for weights
 * from which ONE gradient step on a task's support points fits that task's query points:
 *
 *     w'   = w - alpha * d L_support(w) / d w        (the inner step, per task)
 *     loss = mean over tasks of L_query(w')          (what the trainer minimises over w)
 *
 * The inner step is recorded in the loss graph with rc_backward. The backward graph is
 * made of ordinary ops, so when the trainer differentiates the loss it goes through the
 * inner step too: the meta-gradient has the second-order term -alpha * H_support * (...),
 * which first-order MAML drops. Before training, the example checks that term: on a tiny
 * instance it compares the meta-gradient with finite differences of the meta-loss (in
 * double precision), and shows how far the first-order gradient is from them.
 *
 * The network is a small MLP with user-defined parameters (rc_params), and examples are
 * tasks made on demand: each epoch draws new tasks, derived from (epoch, index).
 *
 *   build/maml [--steps 1500] [--meta-batch 8] [--shots 10] [--alpha 0.01] [--lr 1e-3]
 *              [--hidden 40] [--workdir DIR]
 */
#include "redco/device.h"
#include "redco/pipeline.h"
#include "redco/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TASKS_PER_EPOCH = 800, EVAL_TASKS = 256, NW = 6 };

static const char *const weight_names[NW] = {"w1", "b1", "w2", "b2", "w3", "b3"};

typedef struct {
    int K, Q;                     /* support and query points per task */
    int hidden;
    double alpha;                 /* inner learning rate */
    int epoch;                    /* the epoch whose tasks collate draws (see count_train) */
    int eval;                     /* 1: the fixed held-out tasks */
    double pre, post;             /* predict's tally: query MSE before / after adapting */
    int64_t tasks;
} maml;

/* ---- tasks ------------------------------------------------------------------------------ */

/* Task `index` of `epoch` (or of the held-out set): K + Q points (x[i], y[i]). The key is
 * folded from the epoch and the index, so a task is the same on every rank and run. */
static void task_points(const maml *d, int epoch, int64_t index, double *x, double *y)
{
    rc_rng r = rc_rng_new(d->eval ? 99 : 1);
    r = rc_rng_fold(rc_rng_fold(r, d->eval ? 0 : (uint64_t)epoch), (uint64_t)index);
    double amplitude = 0.1 + 4.9 * rc_rng_uniform(&r), phase = 3.14159265358979 * rc_rng_uniform(&r);
    for (int i = 0; i < d->K + d->Q; i++) {
        x[i] = -5.0 + 10.0 * rc_rng_uniform(&r);
        y[i] = amplitude * sin(x[i] - phase);
    }
}

/* ---- the network and the MAML step (shared by loss, predict and the check) -------------- */

/* y = tanh(tanh(x w1 + b1) w2 + b2) w3 + b3 with one set of weights per task:
 * x [B, N, 1], w1 [B, 1, H], b1 [B, 1, H], w2 [B, H, H], b2 [B, 1, H], w3 [B, H, 1],
 * b3 [B, 1, 1] -> [B, N, 1] (batched matmuls: task b uses its own weights) */
static rc_tensor *mlp(rc_graph *g, rc_tensor *const w[NW], rc_tensor *x)
{
    rc_tensor *h = rc_tanh(g, rc_add(g, rc_matmul(g, x, w[0], 0, 0), w[1]));
    h = rc_tanh(g, rc_add(g, rc_matmul(g, h, w[2], 0, 0), w[3]));
    return rc_add(g, rc_matmul(g, h, w[4], 0, 0), w[5]);
}

/* per-task mean squared error: pred, y [B, N, 1] -> [B] */
static rc_tensor *task_mse(rc_graph *g, rc_tensor *pred, rc_tensor *y)
{
    rc_tensor *e = rc_sub(g, pred, y);
    return rc_mean(g, rc_mean(g, rc_mul(g, e, e), 2, 0), 1, 0);
}

/* One MAML inner step for B tasks at once. w[] are the shared weights (w1 [1, H], b1 [H],
 * w2 [H, H], b2 [H], w3 [H, 1], b3 [1]); xs, ys [B, K, 1] and xq, yq [B, Q, 1].
 * Out: pre, post [B] (query MSE with w and with the adapted w'), adapted[] (w' per task).
 *
 * Every task starts from its own copy of w (rc_expand to [B, ...]). The support losses
 * are summed over tasks, and task b's loss depends only on copy b, so the gradient with
 * respect to the copies is each task's own gradient, all from one rc_backward. */
static void maml_step(rc_graph *g, rc_tensor *const w[NW], rc_tensor *xs, rc_tensor *ys, rc_tensor *xq,
                      rc_tensor *yq, double alpha, rc_tensor **pre, rc_tensor **post, rc_tensor *adapted[NW])
{
    if (rc_graph_error(g)) /* a failed call before (the inputs are NULL): nothing to record */
        return;
    int64_t B = xs->shape[0];
    rc_tensor *copies[NW], *grads[NW];
    for (int i = 0; i < NW; i++) {
        int64_t shape[3] = {B, 1, 1};
        if (w[i]->ndim == 2)            /* a matrix [in, out] -> [B, in, out] */
            shape[1] = w[i]->shape[0], shape[2] = w[i]->shape[1];
        else                            /* a bias [out] -> [B, 1, out] */
            shape[2] = w[i]->shape[0];
        copies[i] = rc_expand(g, w[i], 3, shape);
    }
    rc_tensor *support = rc_sum_all(g, task_mse(g, mlp(g, copies, xs), ys));
    if (rc_backward(g, support, copies, NW, grads))
        return;
    for (int i = 0; i < NW; i++)
        adapted[i] = rc_sub(g, copies[i], rc_scale(g, grads[i], alpha));
    *pre = task_mse(g, mlp(g, copies, xq), yq);
    *post = task_mse(g, mlp(g, adapted, xq), yq);
}

static void weights_get(rc_graph *g, rc_params *params, rc_tensor *w[NW])
{
    for (int i = 0; i < NW; i++)
        w[i] = rc_params_get(g, params, weight_names[i]);
}

/* ---- the three functions -------------------------------------------------------------- */

/* collate: n task indices -> xs, ys [n, K, 1] (support) and xq, yq [n, Q, 1] (query) */
static int collate(rc_batch *out, const int64_t *examples, int n, void *user, rc_error *err)
{
    maml *d = user;
    int K = d->K, Q = d->Q;
    float *xs = rc_batch_add(out, "xs", RC_F32, 3, (int64_t[]){n, K, 1});
    float *ys = rc_batch_add(out, "ys", RC_F32, 3, (int64_t[]){n, K, 1});
    float *xq = rc_batch_add(out, "xq", RC_F32, 3, (int64_t[]){n, Q, 1});
    float *yq = rc_batch_add(out, "yq", RC_F32, 3, (int64_t[]){n, Q, 1});
    double *x = malloc((size_t)(K + Q) * sizeof *x), *y = malloc((size_t)(K + Q) * sizeof *y);
    if (!xs || !ys || !xq || !yq || !x || !y) {
        free(x), free(y);
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    }
    for (int b = 0; b < n; b++) {
        task_points(d, d->epoch, examples[b], x, y);
        for (int i = 0; i < K; i++)
            xs[b * K + i] = (float)x[i], ys[b * K + i] = (float)y[i];
        for (int i = 0; i < Q; i++)
            xq[b * Q + i] = (float)x[K + i], yq[b * Q + i] = (float)y[K + i];
    }
    free(x), free(y);
    return 0;
}

/* loss: the mean query loss after the inner step (the trainer differentiates through it) */
static rc_tensor *loss(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    maml *d = user;
    (void)rng, (void)err;
    rc_tensor *w[NW], *adapted[NW], *pre = NULL, *post = NULL;
    weights_get(g, params, w);
    maml_step(g, w, rc_batch_input(g, b, "xs"), rc_batch_input(g, b, "ys"), rc_batch_input(g, b, "xq"),
              rc_batch_input(g, b, "yq"), d->alpha, &pre, &post, adapted);
    return rc_mean_all(g, post);
}

/* predict: each task's query MSE before and after adapting, [B, 2] */
static rc_tensor *predict(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    maml *d = user;
    (void)rng, (void)err;
    rc_tensor *w[NW], *adapted[NW], *pre = NULL, *post = NULL;
    weights_get(g, params, w);
    maml_step(g, w, rc_batch_input(g, b, "xs"), rc_batch_input(g, b, "ys"), rc_batch_input(g, b, "xq"),
              rc_batch_input(g, b, "yq"), d->alpha, &pre, &post, adapted);
    if (!pre || !post)
        return NULL;
    int64_t col[2] = {pre->shape[0], 1};
    rc_tensor *parts[2] = {rc_reshape(g, pre, 2, col), rc_reshape(g, post, 2, col)};
    return rc_concat(g, parts, 2, 1);
}

/* output: one row [pre, post] per task, in order */
static int output(int64_t example, const float *row, int64_t row_len, void *user, rc_error *err)
{
    maml *d = user;
    (void)example, (void)row_len, (void)err;
    d->pre += row[0];
    d->post += row[1];
    d->tasks++;
    return 0;
}

/* ---- examples per epoch ----------------------------------------------------------------- */

/* New tasks every epoch. collate is not told the epoch, but the trainer asks count(epoch)
 * at every step before collating it, so the epoch is remembered here. */
static int64_t count_train(int epoch, void *user)
{
    ((maml *)user)->epoch = epoch;
    return TASKS_PER_EPOCH;
}

/* Mean query MSE over the held-out tasks, before and after one inner step. */
static int evaluate(rc_predictor *p, maml *d, int batch, double *pre, double *post)
{
    rc_error err = {0};
    d->eval = 1;
    d->pre = d->post = 0;
    d->tasks = 0;
    int rc = rc_predictor_run(p, EVAL_TASKS, batch, &err);
    d->eval = 0;
    if (rc) {
        fprintf(stderr, "maml: predict: %s\n", err.msg);
        return -1;
    }
    *pre = d->pre / (double)d->tasks;
    *post = d->post / (double)d->tasks;
    return 0;
}

/* ---- the second-order check -------------------------------------------------------------- */

/* On a tiny instance in double precision (2 tasks, 3 + 3 points, 4 hidden units):
 * the meta-gradient from rc_backward through the inner step, the first-order MAML
 * gradient (the query gradient at w', summed over tasks: the inner step treated as a
 * constant shift), and central finite differences of the meta-loss. Prints the relative
 * errors of both against the finite differences. */
static int check_second_order(double alpha)
{
    enum { B = 2, N = 3, H = 4 };
    maml d = {.K = N, .Q = N, .hidden = H, .eval = 1};
    int64_t shapes[NW][2] = {{1, H}, {H, 0}, {H, H}, {H, 0}, {H, 1}, {1, 0}};
    double xs[B * N], ys[B * N], xq[B * N], yq[B * N], x[2 * N], y[2 * N], wdata[64];
    for (int b = 0; b < B; b++) {
        task_points(&d, 0, b, x, y);
        memcpy(xs + b * N, x, sizeof(double) * N), memcpy(ys + b * N, y, sizeof(double) * N);
        memcpy(xq + b * N, x + N, sizeof(double) * N), memcpy(yq + b * N, y + N, sizeof(double) * N);
    }
    rc_graph *g = rc_graph_new();
    rc_tensor *w[NW], *adapted[NW], *full[NW], *first[NW], *pre = NULL, *post = NULL;
    rc_rng r = rc_rng_new(5);
    rc_error err = {0};
    /* the weights: one buffer of doubles, each tensor bound to its range */
    rc_backend *cpu = rc_device_open("cpu", 0, &err);
    rc_buffer *wbuf = rc_buffer_new(cpu, sizeof wdata, &err);
    if (!wbuf) {
        fprintf(stderr, "maml: check: %s\n", err.msg);
        rc_device_close(cpu);
        rc_graph_free(g);
        return -1;
    }
    int64_t numel = 0;
    for (int i = 0; i < NW; i++) {
        int nd = shapes[i][1] ? 2 : 1;
        w[i] = rc_param(g, weight_names[i], RC_F64, nd, shapes[i]);
        rc_graph_bind(g, w[i], wbuf, (size_t)numel * sizeof(double));
        for (int64_t j = 0; j < rc_tensor_numel(w[i]); j++)
            wdata[numel + j] = 0.7 * rc_rng_normal(&r);
        numel += rc_tensor_numel(w[i]);
    }
    int64_t pts[3] = {B, N, 1};
    rc_tensor *in[4] = {rc_const(g, "xs", RC_F64, 3, pts, xs), rc_const(g, "ys", RC_F64, 3, pts, ys),
                        rc_const(g, "xq", RC_F64, 3, pts, xq), rc_const(g, "yq", RC_F64, 3, pts, yq)};
    maml_step(g, w, in[0], in[1], in[2], in[3], alpha, &pre, &post, adapted);
    rc_tensor *meta = rc_mean_all(g, post);
    rc_backward(g, meta, w, NW, full);              /* through the inner step */
    rc_backward(g, meta, adapted, NW, first);       /* d meta / d w', per task */
    for (int i = 0; i < NW; i++)                    /* ... summed over the tasks */
        first[i] = rc_sum_to(g, first[i], w[i]->ndim, w[i]->shape);
    rc_tensor *outs[1 + 2 * NW] = {meta};
    memcpy(outs + 1, full, sizeof full);
    memcpy(outs + 1 + NW, first, sizeof first);
    rc_plan *plan = rc_graph_error(g) ? NULL : rc_plan_new(g, outs, 1 + 2 * NW, &err);
    double gfull[64], gfirst[64];
    int rc = !plan || rc_buffer_upload(wbuf, 0, wdata, (size_t)numel * sizeof(double), &err) ||
             rc_plan_run(plan, &err);
    int64_t at = 0;
    for (int i = 0; i < NW && !rc; i++) {
        rc = rc_plan_read(plan, full[i], gfull + at, &err) || rc_plan_read(plan, first[i], gfirst + at, &err);
        at += rc_tensor_numel(w[i]);
    }
    if (rc) {
        fprintf(stderr, "maml: check: %s\n", rc_graph_error(g) ? rc_graph_error(g) : err.msg);
        rc_plan_free(plan);
        rc_buffer_free(wbuf);
        rc_device_close(cpu);
        rc_graph_free(g);
        return -1;
    }
    double e_full = 0, e_first = 0, norm = 0;
    /* central differences: weight j moved by +-h in the buffer, the meta-loss read back */
    for (int64_t j = 0; j < numel && !rc; j++) {
        const double h = 1e-5, keep = wdata[j];
        double lp = 0, lm = 0, v;
        size_t off = (size_t)j * sizeof(double);
        v = keep + h;
        rc |= rc_buffer_upload(wbuf, off, &v, sizeof v, &err) || rc_plan_run(plan, &err) ||
              rc_plan_read(plan, meta, &lp, &err);
        v = keep - h;
        rc |= rc_buffer_upload(wbuf, off, &v, sizeof v, &err) || rc_plan_run(plan, &err) ||
              rc_plan_read(plan, meta, &lm, &err);
        rc |= rc_buffer_upload(wbuf, off, &keep, sizeof keep, &err);
        double fd = (lp - lm) / (2 * h);
        e_full += (gfull[j] - fd) * (gfull[j] - fd);
        e_first += (gfirst[j] - fd) * (gfirst[j] - fd);
        norm += fd * fd;
    }
    if (rc)
        fprintf(stderr, "maml: check: %s\n", err.msg);
    else
        printf("meta-gradient check (%lld weights, alpha %g): relative error vs finite differences: "
               "second-order %.2e, first-order %.2e\n",
               (long long)numel, alpha, sqrt(e_full / norm), sqrt(e_first / norm));
    rc_plan_free(plan);
    rc_buffer_free(wbuf);
    rc_device_close(cpu);
    rc_graph_free(g);
    return rc;
}

/* ---- main ------------------------------------------------------------------------------- */

typedef struct {
    int64_t steps;
    const char *workdir;
    int meta_batch, shots, hidden;
    double alpha, lr;
} args;

static int parse_args(int argc, char **argv, args *a)
{
    *a = (args){1500, NULL, 8, 10, 40, 0.01, 1e-3};
    int ok = 1;
    for (int i = 1; ok && i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) ok = 0;
        else if (!strcmp(k, "--steps")) a->steps = atoll(v);
        else if (!strcmp(k, "--workdir")) a->workdir = v;
        else if (!strcmp(k, "--meta-batch")) a->meta_batch = atoi(v);
        else if (!strcmp(k, "--shots")) a->shots = atoi(v);
        else if (!strcmp(k, "--hidden")) a->hidden = atoi(v);
        else if (!strcmp(k, "--alpha")) a->alpha = atof(v);
        else if (!strcmp(k, "--lr")) a->lr = atof(v);
        else ok = 0;
    }
    if (!ok || a->steps < 1 || a->meta_batch < 1 || a->meta_batch > TASKS_PER_EPOCH || a->shots < 1 ||
        a->hidden < 1) {
        fprintf(stderr, "usage: maml [--steps N] [--meta-batch B] [--shots K] [--alpha A] [--lr LR]\n"
                        "            [--hidden H] [--workdir DIR]\n");
        return -1;
    }
    return 0;
}

/* The MLP's parameters, each declared with how it starts: the matrices N(0, 1 / fan in),
 * the biases zero. */
static rc_params *mlp_params(int hidden)
{
    rc_params *p = rc_params_new();
    int64_t H = hidden;
    int64_t shapes[NW][2] = {{1, H}, {H, 0}, {H, H}, {H, 0}, {H, 1}, {1, 0}};
    for (int i = 0; p && i < NW; i++) {
        int matrix = shapes[i][1] != 0;
        rc_init init = {.kind = RC_INIT_ZEROS};
        if (matrix)
            init = (rc_init){.kind = RC_INIT_NORMAL, .std = 1.0 / sqrt((double)shapes[i][0])};
        if (rc_params_add_init(p, weight_names[i], matrix ? 2 : 1, shapes[i], &init)) {
            rc_params_free(p);
            return NULL;
        }
    }
    if (!p || rc_params_init_normal(p, 1.0, 42)) {
        rc_params_free(p);
        return NULL;
    }
    return p;
}

int main(int argc, char **argv)
{
    args a;
    if (parse_args(argc, argv, &a))
        return 2;
    rc_error err = {0};
    maml d = {.K = a.shots, .Q = a.shots, .hidden = a.hidden, .alpha = a.alpha};
    rc_params *params = mlp_params(a.hidden);
    rc_deployer_options o = {.seed = 1, .workdir = a.workdir, .verbose = 1};
    rc_deployer *dep = params ? rc_deployer_new(&argc, &argv, &o, &err) : NULL;
    /* no built-in model: the trainer gets the parameters alone (model NULL) */
    rc_trainer *t = dep ? rc_trainer_new(dep, collate, loss, &d, params, NULL, &err) : NULL;
    rc_predictor *p = t ? rc_predictor_new(dep, collate, predict, output, &d, params, &err) : NULL;
    if (!p) {
        fprintf(stderr, "maml: %s\n", params ? err.msg : "cannot make the parameters");
        return 1;
    }
    int main_rank = rc_deployer_is_main(dep);
    if (main_rank && check_second_order(a.alpha))
        return 1;
    if (main_rank)
        printf("sine tasks, %d-shot; MLP 1-%d-%d-1 (%lld parameters); inner step alpha %g\n", a.shots,
               a.hidden, a.hidden, (long long)rc_params_numel(params), a.alpha);

    double pre0, post0, pre1, post1;
    rc_train_options to = {.steps = a.steps, .batch_size = a.meta_batch, .optimizer = "adamw", .lr = a.lr,
                           .schedule = RC_SCHEDULE_CONSTANT, .log_every = a.steps >= 10 ? a.steps / 10 : 1};
    int rc = evaluate(p, &d, a.meta_batch, &pre0, &post0);
    if (!rc && (rc = rc_trainer_fit(t, &to, (rc_examples){count_train, &d}, NULL, NULL, &err)))
        fprintf(stderr, "maml: %s\n", err.msg);
    if (!rc)
        rc = evaluate(p, &d, a.meta_batch, &pre1, &post1);
    if (!rc && main_rank) {
        printf("held-out query MSE before meta-training: unadapted %.4f, adapted %.4f\n", pre0, post0);
        printf("held-out query MSE after meta-training:  unadapted %.4f, adapted %.4f (%.0f%% lower)\n", pre1,
               post1, 100.0 * (pre1 - post1) / pre1);
    }
    rc_predictor_free(p);
    rc_trainer_free(t);
    rc_deployer_free(dep); /* and MPI, which it started when run under mpirun */
    rc_params_free(params);
    return rc ? 1 : 0;
}
