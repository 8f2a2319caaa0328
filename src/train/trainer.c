/* trainer.c - fit: the order of examples per epoch, data-parallel micro-batches, gradient
 * accumulation, averaging over the data axis, clipping, the optimizer and its schedule,
 * evaluation, checkpoints and exact resume. */
#include "sharded.h"
#include "trainer_internal.h"
#include "redco/data.h"
#include "redco/predict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { GRAD_BUCKET = 1 << 22 }; /* floats per all-reduce */
/* The update path works in blocks of this many floats: a block's gradient, parameters and
 * moments stay in cache between clipping and the update, and the blocks are split over the
 * OpenMP threads. Fixed, so the gradient norm sums in the same order at any thread count. */
enum { UPDATE_BLOCK = 1 << 16 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- compiled steps ----------------------------------------------------------------------- */

static void step_free(rc_step *s)
{
    rc_plan_free(s->plan);
    rc_shard_graph_free(&s->local);
    rc_graph_free(s->g);
    free(s->grads);
    memset(s, 0, sizeof *s);
}

/* mp > 1, once: the plan's splits, and shard buffers for parameters, gradients, moments */
static int shard_state(rc_trainer *t, const rc_shard_spec *specs, rc_error *err)
{
    nn_weights *w = rci_params_weights(t->params);
    int mp_rank = rc_deployer_mesh(t->d)->mp_rank;
    t->specs = malloc((size_t)w->n * sizeof *t->specs);
    if (t->specs)
        memcpy(t->specs, specs, (size_t)w->n * sizeof *t->specs);
    t->local_numel = rci_sharded_layout(specs, w, t->mp, t->loff, t->lnum);
    size_t bytes = (size_t)(t->local_numel ? t->local_numel : 1) * sizeof(float);
    t->local = malloc(bytes);
    t->grad = calloc(1, bytes);
    t->m = calloc(1, bytes);
    t->v = calloc(1, bytes);
    if (!t->specs || !t->local || !t->grad || !t->m || !t->v)
        return rc_error_set(err, RC_ERR_MEMORY, "trainer: cannot allocate %lld shard floats", (long long)t->local_numel);
    rci_sharded_take(specs, w, t->mp, mp_rank, t->local, t->loff);
    /* the shards hold the values now: the full copy goes until the end of fit */
    rci_params_release(t->params);
    return 0;
}

/* mp > 1: the global record partitioned; this rank's graph, its gradients, its plan */
static int compile_sharded(rc_step *s, rc_trainer *t, rc_tensor **leaves, int with_grads, rc_error *err)
{
    const rc_mesh *mesh = rc_deployer_mesh(t->d);
    int np = rc_params_count(t->params);
    rc_shard_spec *specs = calloc((size_t)np + 1, sizeof *specs);
    if (specs && t->specs) /* later steps (evaluation, the tail batch) keep the first plan */
        rci_sharded_fix(specs, t->specs, np);
    int rc = specs ? 0 : rc_error_set(err, RC_ERR_MEMORY, "trainer: out of memory");
    if (!rc && !t->specs)
        rc = rc_shard_apply(specs, leaves, np, t->overrides, t->n_overrides, t->mp, err);
    if (!rc)
        rc = rc_shard_partition(s->g, s->loss, leaves, np, t->mp, mesh->mp_rank, 0, specs, &s->local, err);
    if (!rc && !t->specs)
        rc = shard_state(t, specs, err);
    free(specs);
    if (rc)
        return -1;
    rc_graph *lg = s->local.g;
    for (int i = 0; i < np; i++)
        if (s->local.params[i])
            rc_tensor_bind(s->local.params[i], t->local + t->loff[i]);
    if (with_grads)
        rc_backward(lg, s->local.out, s->local.params, np, s->grads);
    if (rc_graph_error(lg))
        return rc_error_set(err, rc_graph_error_code(lg), "loss on the model shards: %s", rc_graph_error(lg));
    s->loss = s->local.out;
    return 0;
}

/* Records the user's loss for batches shaped like b, and (with_grads) its gradients; with
 * model shards, the record is partitioned and this rank runs its share. */
static int step_compile(rc_step *s, rc_trainer *t, void *user, const rc_batch *b, int with_grads, rc_error *err)
{
    memset(s, 0, sizeof *s);
    s->g = rc_graph_new();
    if (!s->g)
        return rc_error_set(err, RC_ERR_MEMORY, "trainer: out of memory");
    rc_graph *g = s->g;
    s->loss = t->loss_fn(g, t->params, b, rc_rng_new(t->seed), user);
    if (!rc_graph_error(g) && !s->loss)
        rci_fail(g, RC_ERR_ARG, "loss function returned no tensor");
    if (!rc_graph_error(g) && rc_tensor_numel(s->loss) != 1)
        rci_fail(g, RC_ERR_SHAPE, "loss function returned %lld values, not a scalar",
                (long long)rc_tensor_numel(s->loss));
    int np = rc_params_count(t->params);
    rc_tensor **leaves = calloc((size_t)np + 1, sizeof *leaves);
    s->grads = calloc((size_t)np + 1, sizeof *s->grads);
    for (int i = 0; leaves && i < np && !rc_graph_error(g); i++)
        leaves[i] = rc_params_get(g, t->params, rc_params_name(t->params, i));
    /* the first cross-entropy's targets count the tokens */
    for (int i = 0; !rc_graph_error(g) && i < rc_graph_size(g) && !s->targets; i++) {
        rc_tensor *n = rc_graph_node(g, i);
        if (n->op == RC_OP_CROSS_ENTROPY) {
            s->targets = n->src[1];
            s->ignore = n->iparam[0];
        }
    }
    int rc = 0;
    if (rc_graph_error(g))
        rc = rc_error_set(err, rc_graph_error_code(g), "loss: %s", rc_graph_error(g));
    else if (t->mp > 1)
        rc = compile_sharded(s, t, leaves, with_grads, err);
    else if (with_grads && rc_backward(g, s->loss, leaves, np, s->grads))
        rc = rc_error_set(err, rc_graph_error_code(g), "loss: %s", rc_graph_error(g));
    free(leaves);
    if (rc) {
        step_free(s);
        return -1;
    }
    /* the batch inputs, rebound every step */
    rc_graph *run = t->mp > 1 ? s->local.g : g;
    for (int i = 0; i < rc_graph_size(run); i++) {
        rc_tensor *n = rc_graph_node(run, i);
        if (n->op == RC_OP_LEAF && (n->flags & RC_FLAG_INPUT) && s->ninputs < RC_BATCH_MAX) {
            s->inputs[s->ninputs++] = n;
            if (s->targets && !strcmp(n->name, s->targets->name))
                s->targets = n;
        }
    }
    rc_tensor **outs = calloc((size_t)np + 1, sizeof *outs);
    if (!outs) {
        step_free(s);
        return rc_error_set(err, RC_ERR_MEMORY, "trainer: out of memory");
    }
    outs[0] = s->loss;
    if (with_grads)
        memcpy(outs + 1, s->grads, (size_t)np * sizeof *outs);
    s->plan = rc_plan_new(run, outs, with_grads ? np + 1 : 1, err);
    free(outs);
    if (!s->plan) {
        step_free(s);
        return -1;
    }
    if (t->mp > 1)
        rc_plan_set_collective(s->plan, rc_comm_collective, rc_deployer_mesh(t->d)->mp_comm);
    s->batch_rows = b->n ? b->a[0].shape[0] : 0;
    return 0;
}

/* Points the step's inputs at batch b; shapes must be those it was compiled for. */
static int step_bind(rc_step *s, const rc_batch *b, rc_error *err)
{
    for (int i = 0; i < s->ninputs; i++) {
        rc_tensor *x = s->inputs[i];
        const rc_array *a = rc_batch_get(b, x->name);
        int same = a && a->dtype == x->dtype && a->ndim == x->ndim;
        for (int k = 0; same && k < a->ndim; k++)
            same = a->shape[k] == x->shape[k];
        if (!same) {
            char want[96];
            return rc_error_set(err, RC_ERR_SHAPE, "collate: array '%s' %s; the step was built for %s %s",
                                x->name, a ? "changed shape or dtype" : "is missing",
                                rc_shape_str(x, want, sizeof want), rc_dtype_name(x->dtype));
        }
        rc_tensor_bind(x, a->data);
    }
    return 0;
}

/* predicted tokens of the last run: targets of the first cross-entropy not ignored, or
 * the batch's rows when the loss has none */
static int64_t step_tokens(const rc_step *s)
{
    if (!s->targets || !s->targets->data || s->targets->dtype != RC_I32)
        return s->batch_rows;
    const int32_t *ids = s->targets->data;
    int64_t n = 0, count = rc_tensor_numel(s->targets);
    for (int64_t i = 0; i < count; i++)
        n += ids[i] != s->ignore;
    return n;
}

static int step_run(rc_step *s, const rc_batch *b, rc_rng key, double *loss, int64_t *tokens, rc_error *err)
{
    if (step_bind(s, b, err))
        return -1;
    rc_plan_set_rng(s->plan, key);
    if (rc_plan_run(s->plan, err))
        return -1;
    *loss = *(const float *)rc_tensor_data(s->loss);
    *tokens = step_tokens(s);
    return 0;
}

/* ---- examples: epoch order and shards ------------------------------------------------- */

/* The order of epoch e (rc_epoch_order: one definition for trainer, data and tests). */
static int64_t *epoch_order(uint64_t seed, int epoch, int64_t n, int shuffle)
{
    int64_t *o = malloc((size_t)(n ? n : 1) * sizeof *o);
    if (o)
        rc_epoch_order(n, seed, (uint64_t)epoch, shuffle, o);
    return o;
}

/* ---- trainer ------------------------------------------------------------------------------ */

rc_trainer *rc_trainer_new(rc_deployer *d, rc_collate_fn collate, rc_loss_fn loss, void *user,
                           rc_params *params, const rc_model *model, rc_error *err)
{
    if (!d || !collate || !loss || !params) {
        rc_error_set(err, RC_ERR_ARG, "trainer: deployer, collate, loss and params are required");
        return NULL;
    }
    rc_trainer *t = calloc(1, sizeof *t);
    int64_t n = rc_params_numel(params);
    int np = rc_params_count(params);
    if (t) {
        t->mp = rc_deployer_mesh(d)->mp;
        t->loff = calloc((size_t)np + 1, sizeof *t->loff);
        t->lnum = calloc((size_t)np + 1, sizeof *t->lnum);
    }
    /* one shard: the state is the parameters' own layout; with shards it is made once the
     * plan is known (the first compiled step) */
    if (t && t->mp == 1 && rc_params_data(params)) {
        nn_weights *w = rci_params_weights(params);
        t->local = w->data;
        t->local_numel = n;
        for (int i = 0; t->loff && t->lnum && i < np; i++) {
            t->loff[i] = w->p[i].offset;
            t->lnum[i] = w->p[i].numel;
        }
        t->grad = calloc((size_t)(n ? n : 1), sizeof *t->grad);
        t->m = calloc((size_t)(n ? n : 1), sizeof *t->m);
        t->v = calloc((size_t)(n ? n : 1), sizeof *t->v);
    }
    if (!t || !t->loff || !t->lnum || !rc_params_data(params) || (t->mp == 1 && (!t->grad || !t->m || !t->v))) {
        rc_trainer_free(t);
        rc_error_set(err, RC_ERR_MEMORY, "trainer: cannot allocate state for %lld parameters", (long long)n);
        return NULL;
    }
    t->d = d;
    t->collate = collate;
    t->loss_fn = loss;
    t->user = user;
    t->params = params;
    t->model = model;
    t->eval_loss = NAN;
    t->best_eval = INFINITY;
    return t;
}

void rc_trainer_free(rc_trainer *t)
{
    if (!t)
        return;
    step_free(&t->train);
    step_free(&t->eval);
    step_free(&t->eval_tail);
    rc_predictor_free(t->eval_predictor);
    free(t->grad);
    free(t->m);
    free(t->v);
    if (t->mp > 1)
        free(t->local);
    free(t->specs);
    free(t->loff);
    free(t->lnum);
    free(t);
}

/* the user the functions get for examples of set ex */
static void *user_of(const rc_trainer *t, rc_examples ex)
{
    return ex.user ? ex.user : t->user;
}

/* Collates the n examples idx[0..n) into b. */
static int collate(rc_trainer *t, void *user, rc_batch *b, const int64_t *idx, int n, rc_error *err)
{
    memset(b, 0, sizeof *b);
    if (t->collate(b, idx, n, user)) {
        rc_batch_free(b);
        return rc_error_set(err, RC_ERR_ARG, "collate failed for %d examples starting at example %lld", n,
                            (long long)idx[0]);
    }
    return 0;
}

/* grad = (first ? 0 : grad) + scale x the gradients of the last run of the train step:
 * the first micro-batch writes the sum, so no pass zeroes it first */
static void add_grads(rc_trainer *t, float scale, int first)
{
    int np = rc_params_count(t->params);
    for (int i = 0; i < np; i++) {
        int64_t n = t->lnum[i];
        if (n == 0)
            continue;
        const float *g = rc_tensor_data(t->train.grads[i]);
        float *acc = t->grad + t->loff[i];
        if (first) {
#pragma omp parallel for simd schedule(static) if (n > UPDATE_BLOCK)
            for (int64_t j = 0; j < n; j++)
                acc[j] = scale * g[j];
        } else {
#pragma omp parallel for simd schedule(static) if (n > UPDATE_BLOCK)
            for (int64_t j = 0; j < n; j++)
                acc[j] += scale * g[j];
        }
    }
}

/* sum of squares of g[lo..hi) in double, in 8 lanes (lane k takes every 8th element from
 * k) added in a fixed order: vectorisable, and the same result every time */
static double block_squares(const float *g, int64_t lo, int64_t hi)
{
    double lane[8] = {0};
    int64_t j = lo;
    for (; j + 8 <= hi; j += 8)
        for (int k = 0; k < 8; k++)
            lane[k] += (double)g[j + k] * g[j + k];
    for (int k = 0; j < hi; j++, k++)
        lane[k] += (double)g[j] * g[j];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

/* sum of squares of g[0..n) in double: blocks of UPDATE_BLOCK over the threads, their sums
 * added in order, so the result does not depend on the thread count */
static double sum_squares(const float *g, int64_t n)
{
    enum { GROUP = 256 }; /* blocks per parallel pass */
    int64_t nb = (n + UPDATE_BLOCK - 1) / UPDATE_BLOCK;
    double total = 0, part[GROUP];
    for (int64_t b0 = 0; b0 < nb; b0 += GROUP) {
        int64_t count = nb - b0 < GROUP ? nb - b0 : GROUP;
#pragma omp parallel for schedule(static) if (count > 1)
        for (int64_t b = 0; b < count; b++) {
            int64_t lo = (b0 + b) * UPDATE_BLOCK, hi = lo + UPDATE_BLOCK < n ? lo + UPDATE_BLOCK : n;
            part[b] = block_squares(g, lo, hi);
        }
        for (int64_t b = 0; b < count; b++)
            total += part[b];
    }
    return total;
}

/* the global norm: split parameters summed over the model shards, replicated ones once */
static double grad_norm(const rc_trainer *t, rc_error *err)
{
    double sq[2] = {0, 0}; /* split, replicated */
    int np = rc_params_count(t->params);
    for (int i = 0; i < np; i++)
        sq[t->mp > 1 && t->specs[i].axis >= 0 ? 0 : 1] += sum_squares(t->grad + t->loff[i], t->lnum[i]);
    if (t->mp > 1)
        rc_comm_allreduce_sum_f64(rc_deployer_mesh(t->d)->mp_comm, sq, 1, err);
    return sqrt(sq[0] + sq[1]);
}

/* One parameter's update over [off, off + n) of the state, gradient first multiplied by
 * clip (1: none). Block by block, so clipping, decay and update are one pass over memory;
 * the arithmetic per element is that of clipping the whole gradient, then updating. Called
 * inside the update's parallel region: the blocks are shared among its threads, with no
 * wait at the end (the region's end is the one barrier of the whole update). */
static void update_param(rc_trainer *t, int64_t off, int64_t n, const rc_adam *adam, double lr, double wd,
                         float clip)
{
    float *w = t->local + off, *g = t->grad + off;
    float keep = (float)(1.0 - lr * wd);
    int64_t nb = (n + UPDATE_BLOCK - 1) / UPDATE_BLOCK;
#pragma omp for schedule(static) nowait
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * UPDATE_BLOCK, len = n - lo < UPDATE_BLOCK ? n - lo : UPDATE_BLOCK;
        if (clip != 1.0f)
            for (int64_t j = lo; j < lo + len; j++)
                g[j] *= clip;
        if (adam) {
            rc_adamw_update(w + lo, g + lo, t->m + off + lo, t->v + off + lo, len, adam);
        } else {
            if (wd > 0)
                for (int64_t j = lo; j < lo + len; j++)
                    w[j] *= keep;
            rc_sgd_update(w + lo, g + lo, len, lr);
        }
    }
}

static void optimizer_update(rc_trainer *t, const rc_train_options *o, double lr, float clip)
{
    nn_weights *w = rci_params_weights(t->params);
    int adamw = !o->optimizer || !strcmp(o->optimizer, "adamw");
    int64_t step = ++t->opt_step;
    /* one parallel region for all parameters */
#pragma omp parallel if (t->local_numel > UPDATE_BLOCK)
    for (int i = 0; i < w->n; i++) {
        int decay = w->p[i].ndim >= 2 || o->decay_norms_and_biases;
        double wd = decay ? o->weight_decay : 0.0;
        rc_adam opt = {lr, o->beta1 > 0 ? o->beta1 : 0.9, o->beta2 > 0 ? o->beta2 : 0.999,
                       o->eps > 0 ? o->eps : 1e-8, wd, step};
        update_param(t, t->loff[i], t->lnum[i], adamw ? &opt : NULL, lr, wd, clip);
    }
}

/* One optimizer step: grad_accum micro-batches per replica, averaged over the data axis. */
static int train_step(rc_trainer *t, const rc_train_options *o, void *user,
                      const rc_data_split *split, const int64_t *order, double lr, double *loss_out,
                      int64_t *tokens_out, double *norm_out, rc_error *err)
{
    const rc_mesh *m = rc_deployer_mesh(t->d);
    int B = o->batch_size, k = o->grad_accum > 0 ? o->grad_accum : 1;
    int64_t *idx = malloc((size_t)B * sizeof *idx);
    double sums[2] = {0, 0}; /* loss, tokens */
    int rc = idx ? 0 : rc_error_set(err, RC_ERR_MEMORY, "trainer: out of memory");
    for (int j = 0; j < k && !rc; j++) {
        rc_batch b;
        rc = rc_data_split_batch(split, order, m->dp_rank, t->epoch_step * k + j, idx, err);
        if (!rc)
            rc = collate(t, user, &b, idx, B, err);
        if (!rc && !t->train.plan)
            rc = step_compile(&t->train, t, user, &b, 1, err);
        double loss = 0;
        int64_t tokens = 0;
        rc_rng key = rc_rng_fold(rc_deployer_step_rng(t->d, t->step), (uint64_t)j);
        if (!rc)
            rc = step_run(&t->train, &b, key, &loss, &tokens, err);
        if (!rc) {
            add_grads(t, 1.0f / (float)k, j == 0);
            sums[0] += loss / k;
            sums[1] += (double)tokens;
        }
        rc_batch_free(&b);
    }
    free(idx);
    if (rc_deployer_agree(t->d, rc, err))
        return -1;
    if (rc_comm_allreduce_mean_f32(m->dp_comm, t->grad, t->local_numel, GRAD_BUCKET, err) ||
        rc_comm_allreduce_sum_f64(m->dp_comm, sums, 2, err))
        return -1;
    *loss_out = sums[0] / m->dp;
    *tokens_out = (int64_t)sums[1];
    if (!isfinite(*loss_out))
        return rc_error_set(err, RC_ERR_ARG, "step %lld: the loss is %s; stopping (the last complete checkpoint is %s)",
                            (long long)t->step + 1, isnan(*loss_out) ? "NaN" : "infinite",
                            t->last_ckpt[0] ? t->last_ckpt : "none");
    *norm_out = grad_norm(t, err);
    /* clipping is applied inside the update's pass */
    float clip = o->grad_clip > 0 && *norm_out > o->grad_clip ? (float)(o->grad_clip / (*norm_out + 1e-6)) : 1.0f;
    optimizer_update(t, o, lr, clip);
    return 0;
}

/* ---- evaluation ------------------------------------------------------------------------ */

/* Each replica takes a contiguous slice of the examples, in full batches and one smaller
 * tail batch; the sums of loss x tokens and tokens meet on every rank. */
int rc_trainer_eval(rc_trainer *t, rc_examples ex, int batch_size, double *loss, int64_t *tokens,
                    rc_error *err)
{
    const rc_mesh *m = rc_deployer_mesh(t->d);
    int64_t n = ex.count(0, ex.user), per = (n + m->dp - 1) / m->dp;
    int64_t lo = m->dp_rank * per, hi = lo + per < n ? lo + per : n;
    int64_t *order = epoch_order(0, 0, n, 0);
    double sums[2] = {0, 0};
    int rc = order ? 0 : rc_error_set(err, RC_ERR_MEMORY, "eval: out of memory");
    for (int64_t at = lo; !rc && at < hi; at += batch_size) {
        int count = (int)(hi - at < batch_size ? hi - at : batch_size);
        rc_step *s = count == batch_size ? &t->eval : &t->eval_tail;
        rc_batch b;
        rc = collate(t, user_of(t, ex), &b, order + at, count, err);
        if (!rc && s->plan && s->batch_rows != count)
            step_free(s);
        if (!rc && !s->plan)
            rc = step_compile(s, t, user_of(t, ex), &b, 0, err);
        double l = 0;
        int64_t tk = 0;
        if (!rc)
            rc = step_run(s, &b, rc_rng_new(t->seed), &l, &tk, err);
        if (!rc) {
            sums[0] += l * (double)tk;
            sums[1] += (double)tk;
        }
        rc_batch_free(&b);
    }
    free(order);
    if (rc_deployer_agree(t->d, rc, err) || rc_comm_allreduce_sum_f64(m->dp_comm, sums, 2, err))
        return -1;
    *tokens = (int64_t)sums[1];
    *loss = sums[1] > 0 ? sums[0] / sums[1] : NAN;
    return 0;
}

/* ---- fit -------------------------------------------------------------------------------- */

static int64_t steps_in_epoch(const rc_trainer *t, const rc_train_options *o, rc_examples ex, int epoch)
{
    const rc_mesh *m = rc_deployer_mesh(t->d);
    int64_t per_step = (int64_t)o->batch_size * m->dp * (o->grad_accum > 0 ? o->grad_accum : 1);
    return ex.count(epoch, ex.user) / per_step;
}

/* With model shards the state (shards of parameters and moments) follows from the plan of
 * the train step: compiled before anything (a resume) needs it. */
static int compile_first(rc_trainer *t, const rc_train_options *o, rc_examples train, rc_error *err)
{
    int B = o->batch_size;
    int64_t *idx = malloc((size_t)B * sizeof *idx);
    rc_batch b;
    int rc = idx ? 0 : rc_error_set(err, RC_ERR_MEMORY, "trainer: out of memory");
    for (int i = 0; !rc && i < B; i++)
        idx[i] = i;
    if (!rc)
        rc = collate(t, user_of(t, train), &b, idx, B, err);
    if (!rc) {
        rc = step_compile(&t->train, t, user_of(t, train), &b, 1, err);
        rc_batch_free(&b);
    }
    free(idx);
    return rc_deployer_agree(t->d, rc, err);
}

static int check_options(const rc_trainer *t, const rc_train_options *o, rc_examples ex, rc_error *err)
{
    if (o->batch_size < 1)
        return rc_error_set(err, RC_ERR_ARG, "train: batch size %d (at least 1)", o->batch_size);
    if (o->optimizer && strcmp(o->optimizer, "adamw") && strcmp(o->optimizer, "sgd"))
        return rc_error_set(err, RC_ERR_ARG, "train: optimizer '%s' (adamw or sgd)", o->optimizer);
    if (o->steps <= 0 && o->epochs <= 0)
        return rc_error_set(err, RC_ERR_ARG, "train: give a number of steps or epochs");
    if (steps_in_epoch(t, o, ex, 0) < 1) {
        const rc_mesh *m = rc_deployer_mesh(t->d);
        return rc_error_set(err, RC_ERR_ARG,
                            "train: %lld examples do not fill one step of %d x %d replicas x %d accumulation",
                            (long long)ex.count(0, ex.user), o->batch_size, m->dp,
                            o->grad_accum > 0 ? o->grad_accum : 1);
    }
    return 0;
}

/* The eval predictor over the eval examples, then the metric (rank 0's, shared). */
static int eval_metric(rc_trainer *t, const rc_train_options *o, rc_examples ex, double *score,
                       rc_error *err)
{
    if (!t->eval_predictor &&
        !(t->eval_predictor = rc_predictor_new(t->d, t->collate, o->eval_predict, o->eval_output,
                                                user_of(t, ex), t->params, err)))
        return -1;
    if (t->mp > 1) /* the trainer's plan and shards: no full weights needed */
        rci_predictor_use_shards(t->eval_predictor, t->specs, t->local, t->loff);
    if (rc_predictor_run(t->eval_predictor, ex.count(0, ex.user), o->batch_size, err))
        return -1;
    *score = rc_deployer_is_main(t->d) ? o->eval_metric(user_of(t, ex)) : 0.0;
    return rc_comm_bcast(rc_deployer_mesh(t->d)->world, score, sizeof *score, 0, err);
}

static int evaluate_and_log(rc_trainer *t, const rc_train_options *o, const rc_examples *eval,
                            rc_error *err)
{
    if (!eval)
        return 0;
    if (rc_trainer_eval(t, *eval, o->batch_size, &t->eval_loss, &t->eval_tokens, err))
        return -1;
    char metric_key[64];
    snprintf(metric_key, sizeof metric_key, "eval/%.50s", o->metric_name ? o->metric_name : "metric");
    const char *keys[4] = {"eval/loss", "eval/ppl", "eval/tokens", metric_key};
    double vals[4] = {t->eval_loss, exp(t->eval_loss), (double)t->eval_tokens, NAN};
    int with_metric = o->eval_predict && o->eval_metric;
    if (with_metric && eval_metric(t, o, *eval, &vals[3], err))
        return -1;
    rci_deployer_note(t->d, "step %lld: eval loss %.4f (ppl %.2f) over %lld tokens", (long long)t->step,
                     t->eval_loss, exp(t->eval_loss), (long long)t->eval_tokens);
    if (with_metric)
        rci_deployer_note(t->d, "step %lld: %s %.6g", (long long)t->step, metric_key, vals[3]);
    if (rci_deployer_log(t->d, t->step, keys, vals, with_metric ? 4 : 3, err))
        return -1;
    /* best/: by the metric when there is one (its direction given), else by eval loss */
    double score = with_metric ? (o->metric_higher_is_better ? -vals[3] : vals[3]) : t->eval_loss;
    if (score < t->best_eval) {
        t->best_eval = score;
        return rci_trainer_save(t, o, "best", err);
    }
    return 0;
}

int rc_trainer_fit(rc_trainer *t, const rc_train_options *o, rc_examples train,
                   const rc_examples *eval, rc_train_result *out, rc_error *err)
{
    if (check_options(t, o, train, err))
        return -1;
    t->seed = rci_deployer_seed(t->d);
    t->shuffle = o->shuffle;
    t->overrides = o->shard_overrides;
    t->n_overrides = o->n_shard_overrides;
    if (t->mp > 1 && !t->train.plan && compile_first(t, o, train, err))
        return -1;
    if (o->resume && rci_trainer_resume(t, o, err))
        return -1;
    int64_t total = o->steps > 0 ? o->steps : o->epochs * steps_in_epoch(t, o, train, 0);
    rc_schedule sched = {o->schedule, o->lr, 0.0, o->warmup, total};
    const rc_mesh *m = rc_deployer_mesh(t->d);
    int64_t per_step = (int64_t)o->batch_size * m->dp * (o->grad_accum > 0 ? o->grad_accum : 1);
    int64_t *order = NULL;
    rc_data_split split;
    int order_epoch = -1, rc = 0;
    double loss = NAN, lr = o->lr, t_last = now_s();
    while (!rc && t->step < total) {
        int64_t in_epoch = steps_in_epoch(t, o, train, t->epoch);
        if (t->epoch_step >= in_epoch) {
            t->epoch++;
            t->epoch_step = 0;
            continue;
        }
        if (order_epoch != t->epoch) {
            free(order);
            int64_t n = train.count(t->epoch, train.user);
            order = epoch_order(t->seed, t->epoch, n, o->shuffle);
            order_epoch = t->epoch;
            rc = order ? rc_data_split_init(&split, n, o->batch_size, m->dp,
                                            o->grad_accum > 0 ? o->grad_accum : 1, RC_TAIL_DROP, err)
                       : rc_error_set(err, RC_ERR_MEMORY, "trainer: out of memory");
            if (rc)
                break;
            if (split.dropped && !t->tail_noted++)
                rci_deployer_note(t->d, "epoch %d: the last %lld of %lld examples do not fill a step of %lld; they are left out this epoch (and in later epochs, from their own order)",
                                 t->epoch, (long long)split.dropped, (long long)n, (long long)per_step);
        }
        lr = rc_schedule_lr(&sched, t->step);
        int64_t tokens = 0;
        double norm = 0;
        rc = train_step(t, o, user_of(t, train), &split, order, lr, &loss, &tokens, &norm, err);
        if (rc)
            break;
        t->step++;
        t->epoch_step++;
        double now = now_s(), tps = tokens / fmax(now - t_last, 1e-9);
        t_last = now;
        int tick = t->step == total || (o->log_every > 0 && t->step % o->log_every == 0);
        if (tick && o->log_every > 0) {
            const char *keys[5] = {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "train/epoch"};
            double vals[5] = {loss, lr, norm, tps, (double)t->epoch};
            rc = rci_deployer_log(t->d, t->step, keys, vals, 5, err);
        }
        rci_deployer_progress(t->d, t->step, total, loss, lr, tps, tick);
        if (!rc && o->eval_every > 0 && t->step % o->eval_every == 0 && t->step < total)
            rc = evaluate_and_log(t, o, eval, err);
        if (!rc && o->save_every > 0 && t->step % o->save_every == 0 && t->step < total)
            rc = rci_trainer_save(t, o, NULL, err);
    }
    free(order);
    if (!rc)
        rc = evaluate_and_log(t, o, eval, err);
    if (!rc)
        rc = rci_trainer_save(t, o, NULL, err);
    if (!rc)
        rc = rci_trainer_save_final(t, o, err);
    nn_weights *w = rci_params_weights(t->params);
    int64_t held = w && w->data ? w->numel * (int64_t)sizeof(float) : 0;
    if (!rc)
        rc = rci_trainer_sync_params(t, err);
    if (out) {
        out->state_bytes = 4 * t->local_numel * (int64_t)sizeof(float);
        out->full_weight_bytes = t->mp > 1 ? held : 0;
        out->step = t->step;
        out->loss = loss;
        out->eval_loss = t->eval_loss;
        out->eval_tokens = t->eval_tokens;
        out->lr = lr;
    }
    return rc;
}
