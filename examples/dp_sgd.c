/* dp_sgd.c - differentially private training (DP-SGD, Abadi et al. 2016) of a small CNN on
 * Fashion-MNIST, written as the three functions.
 *
 * Each step of DP-SGD takes every example's own gradient g_i, clips it to L2 norm C, sums
 * them and adds Gaussian noise of standard deviation sigma * C to every coordinate:
 *
 *     G = (sum_i g_i min(1, C / |g_i|) + sigma C z) / B,      z ~ N(0, I),  B the global batch
 *
 * and the optimizer (plain SGD, or AdamW) steps along G. All of it is in the loss function:
 *   - per-example gradients: the weights are expanded to one copy per example (rc_expand to
 *     [B, ...]); the convolutions run each example with its own copy as one grouped
 *     convolution (the batch folded into the channels, groups = B) and the linear layers as
 *     batched matrix products; rc_backward of the summed per-example losses with respect to
 *     the copies gives every example's gradient, since example i's loss reads only copy i;
 *   - their norms over all parameters, the clip factors and the clipped sum; the noise
 *     from rc_normal keyed by the trainer's step key (RC_RNG_STEP): the same draws on every
 *     data-parallel rank, so each rank adds 1/dp of it and `mpiexec -n 2` trains exactly as
 *     one process does (to float rounding);
 *   - the loss returned is stop_gradient(mean loss) + sum_p sum(stop_gradient(G_p) *
 *     (w_p - stop_gradient(w_p))): its value is the mean loss (what the trainer logs) and its
 *     gradient with respect to w_p is G_p (what the trainer averages over ranks and steps
 *     along; its own clipping is off).
 *
 * Privacy: the noise multiplier sigma is given (--sigma), or found for a target
 * (--epsilon, --delta) with the Renyi-DP accountant of the subsampled Gaussian mechanism
 * (redco/privacy.h) for the planned steps and the sampling rate q = global batch / training
 * examples; epsilon is reported after every evaluation (printed and logged to log.jsonl as
 * privacy/epsilon). The accountant assumes Poisson subsampling (each example in a step with
 * probability q); the trainer takes shuffled batches of a fixed size, the usual practical
 * approximation (as Opacus and upstream redco's example do).
 *
 * The network: conv 8x8/2 (16) - tanh - avg pool 2/1 - conv 4x4/2 (32) - tanh - avg pool
 * 2/1 - linear 512-32 - tanh - linear 32-10 (26k weights). Tanh, which Papernot et al.
 * 2021 found better than ReLU under DP-SGD; average pooling, smooth like the rest: a max
 * pool's choice flips at near-ties, and data-parallel runs (their sums rounded in another
 * order) would then drift apart from one process's.
 *
 * --check (one process) prints three figures for the tests, then exits: the per-example
 * gradients of the graph against gradients computed one example at a time; the graph's
 * clipped sum against one made on the host from those gradients; and one DP-SGD step with
 * sigma 0 and C = inf against one ordinary SGD step on the plain mean loss.
 *
 *   build/dp_sgd [--epochs 2] [--batch 256] [--lr 2] [--clip 1] [--sigma 1 | --epsilon E]
 *                [--delta 1e-5] [--optimizer sgd|adamw] [--train-limit N] [--test-limit N]
 *                [--eval-every STEPS] [--steps N] [--seed S] [--device cpu|opencl]
 *                [--workdir DIR] [--check]
 *   mpiexec -n 2 build/dp_sgd ...        (data parallel: --batch stays the global batch)
 */
#include "redco/data.h"
#include "redco/pipeline.h"
#include "redco/predict.h"
#include "redco/privacy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NW = 8, SIDE = 28 };

static const char *const weight_names[NW] = {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                             "fc1.weight",   "fc1.bias",   "fc2.weight",   "fc2.bias"};
static const int64_t weight_shapes[NW][4] = {{16, 1, 8, 8}, {16}, {32, 16, 4, 4}, {32}, {32, 512}, {32}, {10, 32}, {10}};
static const int weight_ndims[NW] = {4, 1, 4, 1, 2, 1, 2, 1};

typedef struct {
    double clip, sigma;           /* C (inf: no clipping) and the noise multiplier */
    int replicas;                 /* data-parallel ranks: each adds 1/replicas of the noise */
} dp_config;

/* One split of the data, the user of its collate, loss and predict calls. */
typedef struct {
    rc_image_set set;
    const dp_config *dp;
    int plain;                    /* 1: the plain mean loss (evaluation, the reference SGD step) */
    int64_t correct, seen;        /* predict's tally */
    double accuracy;              /* the last evaluation's */
} split;

/* ---- the network ------------------------------------------------------------------------ */

/* conv2d of x [B, C, H, W]; shared weights wt [O, C, kh, kw], b [O], or per example
 * (per = 1) wt [B, O, C, kh, kw], b [B, O]: then the batch is folded into the channels,
 * [1, B C, H, W], and a convolution of B groups gives each example its own weights */
static rc_tensor *conv(rc_graph *g, rc_tensor *x, rc_tensor *wt, rc_tensor *b, int stride, int pad, int per)
{
    rc_conv2d_params p = {{stride, stride}, {pad, pad}, {1, 1}, 1};
    if (!per || rc_graph_error(g))
        return rc_conv2d(g, x, wt, b, &p);
    int64_t B = x->shape[0], C = x->shape[1], O = wt->shape[1];
    rc_tensor *xs = rc_reshape(g, x, 4, (int64_t[]){1, B * C, x->shape[2], x->shape[3]});
    rc_tensor *ws = rc_reshape(g, wt, 4, (int64_t[]){B * O, C, wt->shape[3], wt->shape[4]});
    p.groups = (int)B;
    rc_tensor *y = rc_conv2d(g, xs, ws, rc_reshape(g, b, 1, (int64_t[]){B * O}), &p);
    return y ? rc_reshape(g, y, 4, (int64_t[]){B, O, y->shape[2], y->shape[3]}) : NULL;
}

/* x [B, in] times wt^T plus b: shared wt [out, in], b [out], or per example wt [B, out, in],
 * b [B, out] (a batched product) -> [B, out] */
static rc_tensor *linear(rc_graph *g, rc_tensor *x, rc_tensor *wt, rc_tensor *b, int per)
{
    if (!per || rc_graph_error(g))
        return rc_add(g, rc_matmul(g, x, wt, 0, 1), b);
    int64_t B = x->shape[0], in = x->shape[1], out = wt->shape[1];
    rc_tensor *y = rc_matmul(g, rc_reshape(g, x, 3, (int64_t[]){B, 1, in}), wt, 0, 1);
    return rc_reshape(g, rc_add(g, y, rc_reshape(g, b, 3, (int64_t[]){B, 1, out})), 2, (int64_t[]){B, out});
}

/* logits [B, 10] of images x [B, 1, 28, 28] */
static rc_tensor *forward(rc_graph *g, rc_tensor *const w[NW], rc_tensor *x, int per)
{
    rc_pool2d_params pool = {{2, 2}, {1, 1}, {0, 0}};
    rc_tensor *h = rc_avg_pool2d(g, rc_tanh(g, conv(g, x, w[0], w[1], 2, 3, per)), &pool);  /* [B, 16, 13, 13] */
    h = rc_avg_pool2d(g, rc_tanh(g, conv(g, h, w[2], w[3], 2, 0, per)), &pool);            /* [B, 32, 4, 4] */
    h = h ? rc_reshape(g, h, 2, (int64_t[]){h->shape[0], 512}) : NULL;
    return linear(g, rc_tanh(g, linear(g, h, w[4], w[5], per)), w[6], w[7], per);
}

static void weights_get(rc_graph *g, rc_params *params, rc_tensor *w[NW])
{
    for (int i = 0; i < NW; i++)
        w[i] = rc_params_get(g, params, weight_names[i]);
}

/* Every example's gradient: grads[i] [B, shape of w[i]] (one copy of the weights per
 * example, rc_backward of the summed losses with respect to the copies). Returns the mean
 * loss over the batch. */
static rc_tensor *per_example_grads(rc_graph *g, rc_tensor *const w[NW], rc_tensor *x, rc_tensor *y,
                                    rc_tensor *grads[NW])
{
    if (rc_graph_error(g))
        return NULL;
    int64_t B = x->shape[0];
    rc_tensor *copies[NW];
    for (int i = 0; i < NW; i++) {
        int64_t shape[RC_MAX_DIMS] = {B};
        memcpy(shape + 1, w[i]->shape, (size_t)w[i]->ndim * sizeof *shape);
        copies[i] = rc_expand(g, w[i], w[i]->ndim + 1, shape);
    }
    rc_tensor *mean = rc_cross_entropy(g, forward(g, copies, x, 1), y, RC_IGNORE_INDEX);
    if (rc_backward(g, rc_scale(g, mean, (double)B), copies, NW, grads))
        return NULL;
    return mean;
}

/* t [B, ...] times f [B] broadcast over the other axes, summed over the batch */
static rc_tensor *weighted_sum(rc_graph *g, rc_tensor *t, rc_tensor *f)
{
    int64_t shape[RC_MAX_DIMS] = {t->shape[0], 1, 1, 1, 1, 1};
    return rc_sum(g, rc_mul(g, t, rc_reshape(g, f, t->ndim, shape)), 0, 0);
}

/* G[p] = sum_i g_i[p] min(1, C / |g_i|) over the batch of per-example gradients grads[p]
 * [B, ...], |g_i| the norm over all parameters; clip: C (a scalar [1]), NULL for C = inf */
static void clipped_sum(rc_graph *g, rc_tensor *const grads[NW], rc_tensor *clip, rc_tensor *G[NW])
{
    if (rc_graph_error(g))
        return;
    int64_t B = grads[0]->shape[0];
    rc_tensor *factor = NULL; /* min(1, C / |g_i|) = C / max(|g_i|, C), [B] */
    if (clip) {
        rc_tensor *sq = NULL;
        for (int i = 0; i < NW; i++) {
            rc_tensor *flat = rc_reshape(g, grads[i], 2, (int64_t[]){B, rc_tensor_numel(grads[i]) / B});
            rc_tensor *s = rc_sum(g, rc_mul(g, flat, flat), 1, 1); /* [B, 1] */
            sq = sq ? rc_add(g, sq, s) : s;
        }
        rc_tensor *c = rc_expand(g, rc_reshape(g, clip, 2, (int64_t[]){1, 1}), 2, (int64_t[]){B, 1});
        rc_tensor *pair[2] = {rc_sqrt(g, sq), c};
        factor = rc_div(g, clip, rc_max(g, rc_concat(g, pair, 2, 1), 1, 0));
    }
    for (int i = 0; i < NW; i++)
        G[i] = factor ? weighted_sum(g, grads[i], factor) : rc_sum(g, grads[i], 0, 0);
}

/* The DP-SGD loss of a batch (see the header): its value the mean loss, its gradient G. */
static rc_tensor *dp_loss(rc_graph *g, rc_tensor *const w[NW], rc_tensor *x, rc_tensor *y, const dp_config *dp)
{
    rc_tensor *grads[NW], *G[NW];
    rc_tensor *mean = per_example_grads(g, w, x, y, grads);
    if (!mean)
        return NULL;
    clipped_sum(g, grads, isfinite(dp->clip) ? rc_full(g, RC_F32, 1, (int64_t[]){1}, dp->clip) : NULL, G);
    /* this rank's share of G: (its clipped sum + sigma C z / replicas) / its batch; the
     * trainer's mean over the ranks makes it (the whole sum + sigma C z) / global batch */
    rc_tensor *surrogate = NULL;
    for (int i = 0; i < NW; i++) {
        if (dp->sigma > 0) {
            rc_tensor *z = rc_normal(g, RC_F32, w[i]->ndim, w[i]->shape, rc_rng_new((uint64_t)i + 1), RC_RNG_STEP);
            G[i] = rc_add(g, G[i], rc_scale(g, z, dp->sigma * dp->clip / dp->replicas));
        }
        rc_tensor *Gi = rc_stop_gradient(g, rc_scale(g, G[i], 1.0 / (double)x->shape[0]));
        rc_tensor *t = rc_sum_all(g, rc_mul(g, Gi, rc_sub(g, w[i], rc_stop_gradient(g, w[i]))));
        surrogate = surrogate ? rc_add(g, surrogate, t) : t;
    }
    return rc_add(g, rc_stop_gradient(g, mean), surrogate);
}

/* ---- the three functions -------------------------------------------------------------- */

/* collate: n image indices -> images [n, 1, 28, 28] (standardised), labels [n] */
static int collate(rc_batch *out, const int64_t *examples, int n, void *user, rc_error *err)
{
    const split *s = user;
    float *x = rc_batch_add(out, "images", RC_F32, 4, (int64_t[]){n, 1, SIDE, SIDE});
    int32_t *y = rc_batch_add(out, "labels", RC_I32, 1, (int64_t[]){n});
    if (!x || !y)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for the batch's arrays");
    for (int b = 0; b < n; b++) {
        int64_t e = examples[b] >= 0 ? examples[b] : 0;
        const float *px = s->set.pixels + e * SIDE * SIDE;
        for (int k = 0; k < SIDE * SIDE; k++)
            x[b * SIDE * SIDE + k] = (px[k] - 0.2860f) / 0.3530f; /* Fashion-MNIST's mean and std */
        y[b] = examples[b] >= 0 ? s->set.labels[e] : RC_IGNORE_INDEX;
    }
    return 0;
}

/* loss: DP-SGD's (training), or the plain mean loss (evaluation) */
static rc_tensor *loss(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    const split *s = user;
    (void)rng, (void)err;
    rc_tensor *w[NW], *x = rc_batch_input(g, b, "images"), *y = rc_batch_input(g, b, "labels");
    weights_get(g, params, w);
    if (s->plain)
        return rc_cross_entropy(g, forward(g, w, x, 0), y, RC_IGNORE_INDEX);
    return dp_loss(g, w, x, y, s->dp);
}

/* predict: the logits [B, 10] */
static rc_tensor *predict(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)rng, (void)user, (void)err;
    rc_tensor *w[NW];
    weights_get(g, params, w);
    return forward(g, w, rc_batch_input(g, b, "images"), 0);
}

/* output: the arg-max against the label */
static int output(int64_t example, const float *row, int64_t row_len, void *user, rc_error *err)
{
    (void)err;
    split *s = user;
    int best = 0;
    for (int k = 1; k < row_len; k++)
        best = row[k] > row[best] ? k : best;
    s->correct += best == s->set.labels[example];
    s->seen++;
    return 0;
}

static double accuracy(void *user)
{
    split *s = user;
    s->accuracy = s->seen ? (double)s->correct / (double)s->seen : 0.0;
    s->correct = s->seen = 0;
    return s->accuracy;
}

static int64_t count(int epoch, void *user)
{
    (void)epoch;
    return ((const split *)user)->set.n;
}

/* ---- parameters ------------------------------------------------------------------------- */

/* weights N(0, 1 / fan in), biases zero, from the seed */
static rc_params *cnn_params(uint64_t seed)
{
    rc_params *p = rc_params_new();
    for (int i = 0; p && i < NW; i++) {
        int64_t fan_in = 1;
        for (int k = 1; k < weight_ndims[i]; k++)
            fan_in *= weight_shapes[i][k];
        rc_init init = {.kind = RC_INIT_ZEROS};
        if (weight_ndims[i] > 1)
            init = (rc_init){.kind = RC_INIT_NORMAL, .std = 1.0 / sqrt((double)fan_in)};
        if (rc_params_add_init(p, weight_names[i], weight_ndims[i], weight_shapes[i], &init)) {
            rc_params_free(p);
            return NULL;
        }
    }
    if (!p || rc_params_init_normal(p, 1.0, seed)) {
        rc_params_free(p);
        return NULL;
    }
    return p;
}

/* ---- the checks ------------------------------------------------------------------------ */

static double rel_error(const float *a, const float *b, int64_t n)
{
    double d = 0, s = 0;
    for (int64_t k = 0; k < n; k++)
        d += ((double)a[k] - b[k]) * ((double)a[k] - b[k]), s += (double)b[k] * b[k];
    return s > 0 ? sqrt(d / s) : sqrt(d);
}

/* On the first B training images: the graph's per-example gradients against each image's
 * gradient from a graph of its own (the plain loss of one example, rc_backward with respect
 * to the shared weights); then the clipped sum at C = the mean norm against the same sum
 * made here from the per-example gradients. Prints the largest relative errors. */
static int check_per_example(rc_params *params, const split *train, int B)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *w[NW], *grads[NW], *G[NW], *single[64][NW], *outs[2 * NW + 64 * NW];
    int64_t idx[64], n[NW], total = 0;
    rc_batch b = {0};
    for (int i = 0; i < B; i++)
        idx[i] = i;
    rc_error err = {0};
    int rc = collate(&b, idx, B, (void *)train, &err);
    rc_tensor *x = rc ? NULL : rc_const(g, "images", RC_F32, 4, b.a[0].shape, b.a[0].data);
    rc_tensor *y = rc ? NULL : rc_const(g, "labels", RC_I32, 1, b.a[1].shape, b.a[1].data);
    rc_tensor *clip = rc_input(g, "clip", RC_F32, 1, (int64_t[]){1});
    weights_get(g, params, w);
    per_example_grads(g, w, x, y, grads);
    clipped_sum(g, grads, clip, G);
    for (int i = 0; i < B && !rc_graph_error(g); i++) {
        rc_tensor *xi = rc_slice(g, x, 0, i, i + 1), *yi = rc_slice(g, y, 0, i, i + 1);
        rc_backward(g, rc_cross_entropy(g, forward(g, w, xi, 0), yi, RC_IGNORE_INDEX), w, NW, single[i]);
    }
    memcpy(outs, grads, sizeof grads);
    memcpy(outs + NW, G, sizeof G);
    for (int i = 0; i < B; i++)
        memcpy(outs + 2 * NW + i * NW, single[i], sizeof single[i]);
    rc_plan *plan = rc_graph_error(g) ? NULL
                    : rc_plan_new_on(rc_buffer_backend(rc_params_buffer(params, 0, NULL)), g, outs, 2 * NW + B * NW, &err);
    for (int p = 0; p < NW && plan; p++)
        total += n[p] = rc_tensor_numel(w[p]);
    float *all = malloc((size_t)(B * total) * sizeof *all), *one = malloc((size_t)total * sizeof *one);
    float *sum = malloc((size_t)total * sizeof *sum), *ref = calloc((size_t)total, sizeof *ref), c = 1e30f;
    double norms[64] = {0}, mean = 0, e_grad = 0, e_sum;
    rc = rc || !plan || !all || !one || !sum || !ref || rc_plan_set_input(plan, clip, &c, &err) ||
         rc_plan_run(plan, &err);
    /* every example's gradient, flat in all[i * total ...]; against its own graph's */
    for (int p = 0, at = 0; p < NW && !rc; at += (int)n[p++]) {
        float *gp = malloc((size_t)(B * n[p]) * sizeof *gp);
        rc = !gp || rc_plan_read(plan, grads[p], gp, &err);
        for (int i = 0; i < B && !rc; i++) {
            memcpy(all + i * total + at, gp + i * n[p], (size_t)n[p] * sizeof *gp);
            rc = rc_plan_read(plan, single[i][p], one, &err);
            e_grad = fmax(e_grad, rc ? 0 : rel_error(gp + i * n[p], one, n[p]));
        }
        free(gp);
    }
    /* the clipped sum at the mean norm, made here */
    for (int i = 0; i < B && !rc; i++) {
        for (int64_t k = 0; k < total; k++)
            norms[i] += (double)all[i * total + k] * all[i * total + k];
        mean += (norms[i] = sqrt(norms[i])) / B;
    }
    c = (float)mean;
    int clipped = 0;
    for (int i = 0; i < B && !rc; i++) {
        double f = norms[i] > c ? c / norms[i] : 1.0;
        clipped += norms[i] > c;
        for (int64_t k = 0; k < total; k++)
            ref[k] += (float)(f * all[i * total + k]);
    }
    rc = rc || rc_plan_set_input(plan, clip, &c, &err) || rc_plan_run(plan, &err);
    for (int p = 0, at = 0; p < NW && !rc; at += (int)n[p++])
        rc = rc_plan_read(plan, G[p], sum + at, &err);
    e_sum = rc ? 0 : rel_error(sum, ref, total);
    if (rc)
        fprintf(stderr, "dp_sgd: check: %s\n", rc_graph_error(g) ? rc_graph_error(g) : err.msg);
    else
        printf("per-example gradients of %d examples vs one example at a time: relative error %.2e\n"
               "clipped sum at C = %.4g (%d of %d examples clipped) vs the same sum made here: relative error %.2e\n",
               B, e_grad, c, clipped, B, e_sum);
    free(all), free(one), free(sum), free(ref);
    rc_plan_free(plan);
    rc_batch_free(&b);
    rc_graph_free(g);
    return rc ? -1 : 0;
}

/* One DP-SGD step with sigma 0 and C = inf against one ordinary SGD step on the plain mean
 * loss, from the same weights on the same batch (two trainers): the largest difference of
 * the weights after it, and the largest move of a weight in the step. */
static int check_sgd_step(rc_deployer *dep, split *train, int batch, double lr, uint64_t seed)
{
    dp_config none = {INFINITY, 0.0, 1};
    const dp_config *keep = train->dp;
    rc_params *pa = cnn_params(seed), *pb = cnn_params(seed);
    rc_error err = {0};
    split plain = *train;
    plain.plain = 1;
    train->dp = &none;
    rc_trainer *ta = pa ? rc_trainer_new(dep, collate, loss, train, pa, NULL, &err) : NULL;
    rc_trainer *tb = pb && ta ? rc_trainer_new(dep, collate, loss, &plain, pb, NULL, &err) : NULL;
    rc_train_options o = {.steps = 1, .batch_size = batch, .optimizer = "sgd", .lr = lr, .shuffle = 1};
    int rc = !tb || rc_trainer_fit(ta, &o, (rc_examples){count, train}, NULL, NULL, &err) ||
             rc_trainer_fit(tb, &o, (rc_examples){count, &plain}, NULL, NULL, &err);
    int64_t n = pa ? rc_params_numel(pa) : 0;
    float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b), *w0 = malloc((size_t)n * sizeof *w0);
    rc_params *p0 = cnn_params(seed);
    rc = rc || !a || !b || !w0 || !p0 || rc_params_read_all(pa, a, &err) || rc_params_read_all(pb, b, &err) ||
         rc_params_read_all(p0, w0, &err);
    double diff = 0, moved = 0;
    for (int64_t k = 0; k < n && !rc; k++) {
        diff = fmax(diff, fabs((double)a[k] - b[k]));
        moved = fmax(moved, fabs((double)b[k] - w0[k]));
    }
    if (rc)
        fprintf(stderr, "dp_sgd: check: %s\n", err.msg);
    else
        printf("one DP-SGD step (sigma 0, C inf) vs one SGD step: largest weight difference %.2e "
               "(the step moved weights by up to %.2e)\n", diff, moved);
    free(a), free(b), free(w0);
    rc_trainer_free(ta), rc_trainer_free(tb);
    rc_params_free(pa), rc_params_free(pb), rc_params_free(p0);
    train->dp = keep;
    return rc ? -1 : 0;
}

/* ---- main ------------------------------------------------------------------------------- */

typedef struct {
    int epochs, batch, check;
    int64_t steps, train_limit, test_limit, eval_every;
    double lr, clip, sigma, epsilon, delta;
    const char *optimizer, *device, *workdir;
    uint64_t seed;
} args;

static int parse_args(int argc, char **argv, args *a)
{
    *a = (args){.epochs = 2, .batch = 256, .lr = 2.0, .clip = 1.0, .sigma = 1.0, .epsilon = 0, .delta = 1e-5,
                .optimizer = "sgd", .seed = 1};
    int ok = 1;
    for (int i = 1; ok && i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--check")) a->check = 1, i--;
        else if (!v) ok = 0;
        else if (!strcmp(k, "--epochs")) a->epochs = atoi(v);
        else if (!strcmp(k, "--steps")) a->steps = atoll(v);
        else if (!strcmp(k, "--batch")) a->batch = atoi(v);
        else if (!strcmp(k, "--lr")) a->lr = atof(v);
        else if (!strcmp(k, "--clip")) a->clip = atof(v);
        else if (!strcmp(k, "--sigma")) a->sigma = atof(v);
        else if (!strcmp(k, "--epsilon")) a->epsilon = atof(v);
        else if (!strcmp(k, "--delta")) a->delta = atof(v);
        else if (!strcmp(k, "--optimizer")) a->optimizer = v;
        else if (!strcmp(k, "--train-limit")) a->train_limit = atoll(v);
        else if (!strcmp(k, "--test-limit")) a->test_limit = atoll(v);
        else if (!strcmp(k, "--eval-every")) a->eval_every = atoll(v);
        else if (!strcmp(k, "--seed")) a->seed = (uint64_t)atoll(v);
        else if (!strcmp(k, "--device")) a->device = v;
        else if (!strcmp(k, "--workdir")) a->workdir = v;
        else ok = 0;
    }
    if (!ok || a->epochs < 1 || a->steps < 0 || a->batch < 1 || !(a->clip > 0) || !(a->sigma >= 0) ||
        a->epsilon < 0 || !(a->delta > 0 && a->delta < 1) || ((a->sigma > 0 || a->epsilon > 0) && isinf(a->clip)) ||
        a->eval_every < 0 || (strcmp(a->optimizer, "sgd") && strcmp(a->optimizer, "adamw"))) {
        fprintf(stderr, "usage: dp_sgd [--epochs N] [--steps N] [--batch B] [--lr LR] [--clip C (inf: none)]\n"
                        "              [--sigma S | --epsilon E] [--delta D] [--optimizer sgd|adamw]\n"
                        "              [--train-limit N] [--test-limit N] [--eval-every STEPS] [--seed S]\n"
                        "              [--device cpu|opencl] [--workdir DIR] [--check]\n"
                        "(noise, sigma > 0, needs a finite --clip)\n");
        return -1;
    }
    return 0;
}

/* The training loop: fit in pieces of eval_every steps; after each, the trainer has
 * evaluated (eval/loss, eval/accuracy) and epsilon so far is printed and logged. */
static int train(rc_deployer *dep, rc_trainer *t, const args *a, split *tr, split *te, int64_t total, double q,
                 double sigma, rc_error *err)
{
    int64_t every = a->eval_every > 0 ? a->eval_every : total / a->epochs > 0 ? total / a->epochs : 1;
    int dp = rc_deployer_mesh(dep)->dp;
    rc_train_options o = {.batch_size = a->batch / dp, .optimizer = a->optimizer, .lr = a->lr, .shuffle = 1,
                          .schedule = RC_SCHEDULE_CONSTANT, .log_every = every >= 10 ? every / 10 : 1,
                          .eval_predict = predict, .eval_output = output, .eval_metric = accuracy,
                          .metric_name = "accuracy", .metric_higher_is_better = 1};
    for (int64_t done = 0; done < total;) {
        o.steps = done + every < total ? done + every : total;
        if (rc_trainer_fit(t, &o, (rc_examples){count, tr}, &(rc_examples){count, te}, NULL, err))
            return -1;
        done = o.steps;
        double eps = 0;
        if (sigma > 0 && rc_dp_epsilon(q, sigma, done, a->delta, &eps, NULL, err))
            return -1;
        if (sigma == 0)
            eps = INFINITY;
        const char *keys[2] = {"privacy/epsilon", "privacy/delta"};
        double vals[2] = {eps, a->delta};
        if (rc_deployer_log(dep, done, keys, vals, 2, err))
            return -1;
        if (rc_deployer_is_main(dep))
            printf("step %lld/%lld (epoch %.2f): test accuracy %.4f, epsilon %.6g at delta %g\n", (long long)done,
                   (long long)total, (double)(done * a->batch) / (double)tr->set.n, te->accuracy, eps, a->delta);
    }
    return 0;
}

int main(int argc, char **argv)
{
    args a;
    if (parse_args(argc, argv, &a))
        return 2;
    rc_error err = {0};
    split tr = {0}, te = {0};
    dp_config dp = {a.clip, a.sigma, 1};
    tr.dp = te.dp = &dp;
    te.plain = 1;
    rc_params *params = cnn_params(a.seed);
    rc_deployer_options o = {.seed = a.seed, .workdir = a.workdir, .verbose = 1, .device = a.device};
    rc_deployer *dep = params ? rc_deployer_new(&argc, &argv, &o, &err) : NULL;
    int rc = !dep || rc_fashion_mnist_load(&tr.set, NULL, "train", a.train_limit, &err) ||
             rc_fashion_mnist_load(&te.set, NULL, "t10k", a.test_limit, &err);
    dp.replicas = dep ? rc_deployer_mesh(dep)->dp : 1;
    if (!rc && a.batch % dp.replicas)
        rc = rc_error_set(&err, RC_ERR_ARG, "the batch %d is not a multiple of the %d data-parallel ranks", a.batch,
                          dp.replicas);
    int64_t per_epoch = rc ? 0 : tr.set.n / a.batch, total = a.steps > 0 ? a.steps : a.epochs * per_epoch;
    if (!rc && per_epoch < 1)
        rc = rc_error_set(&err, RC_ERR_ARG, "%lld training images do not fill a batch of %d", (long long)tr.set.n,
                          a.batch);
    double q = rc ? 0 : (double)a.batch / (double)tr.set.n;
    if (!rc && a.epsilon > 0 && !(rc = rc_dp_sigma(q, total, a.delta, a.epsilon, &dp.sigma, &err)) &&
        rc_deployer_is_main(dep))
        printf("noise multiplier for epsilon %g at delta %g over %lld steps: sigma %.17g\n", a.epsilon, a.delta,
               (long long)total, dp.sigma);
    if (!rc && a.check && dp.replicas > 1)
        rc = rc_error_set(&err, RC_ERR_ARG, "--check runs in one process");
    if (!rc && a.check) {
        rc = check_per_example(params, &tr, 16) || check_sgd_step(dep, &tr, 32, a.lr, a.seed);
    } else if (!rc && !a.check) {
        rc_trainer *t = rc_trainer_new(dep, collate, loss, &tr, params, NULL, &err);
        if (t && rc_deployer_is_main(dep))
            printf("Fashion-MNIST: %lld train, %lld test images; CNN of %lld weights; DP-SGD: batch %d, "
                   "q %.17g, clip %g, sigma %.17g, %lld steps, delta %g\n",
                   (long long)tr.set.n, (long long)te.set.n, (long long)rc_params_numel(params), a.batch, q,
                   a.clip, dp.sigma, (long long)total, a.delta);
        rc = !t || train(dep, t, &a, &tr, &te, total, q, dp.sigma, &err);
        if (!rc && rc_deployer_is_main(dep))
            printf("final test accuracy: %.4f\n", te.accuracy);
        rc_trainer_free(t);
    }
    if (rc && (err.code || !params)) /* (the checks print their own) */
        fprintf(stderr, "dp_sgd: %s\n", params ? err.msg : "cannot make the parameters");
    rc_image_set_free(&tr.set);
    rc_image_set_free(&te.set);
    rc_deployer_free(dep);
    rc_params_free(params);
    return rc ? 1 : 0;
}
