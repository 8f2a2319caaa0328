/* trainer.c - fit: the order of examples per epoch, data-parallel micro-batches, gradient
 * accumulation, averaging over the data axis, clipping, the optimizer and its schedule,
 * evaluation, checkpoints and exact resume. */
#include "backend.h"
#include "ckpt.h"
#include "profile.h"
#include "workdir.h"
#include "infer.h"
#include "step.h"
#include "redco/data.h"
#include "redco/predict.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { GRAD_BUCKET = 1 << 22 }; /* floats per all-reduce */
/* ZeRO stage 2: the f32 window its gradient outputs are reduce-scattered through holds
 * min(ZERO2_WINDOW, the largest share) floats (memory_plan.c's rule too); stage 1 reduce-
 * scatters its mean gradient in pieces of that size too (over 2 processes, 2^22-float
 * pieces took 1.5x the step time of plain dp on this machine's Open MPI, 2^20 0.98x) */
enum { ZERO2_WINDOW = 1 << 20 };

/* A compiled step: the user's loss (and gradients) for one batch shape, built once. */
typedef struct {
    rci_step st;                  /* record, run graph, plan; st.outs[0] is the loss */
    rc_tensor *targets;           /* the first cross-entropy's targets (in st.g): they count
                                     tokens, read from the batch array of their name ... */
    int ignore;                   /* ... except this id */
    int64_t batch_rows;
    int per_token;                /* a language model's step: more targets than examples (its
                                     counts are tokens, a classifier's examples) */
    int loss_out;                 /* the loss is st.outs[loss_out]: 1 with loss scaling, where
                                     st.outs[0] is the loss x the scale (the batch's array
                                     RCI_LOSS_SCALE) that the gradients are taken of */
    rci_gather gather;            /* zero 3: its parameters' units, visits and slots */
} compiled_step;

/* the name of the batch array that carries the loss scale into a train step */
#define RCI_LOSS_SCALE "redco.loss_scale"

struct rc_trainer {
    rc_deployer *d;
    rc_collate_fn collate;
    rc_loss_fn loss_fn;
    void *user;
    rc_params *params;
    const rc_model *model;
    uint64_t seed;
    int shuffle;
    compiled_step train, eval, eval_tail;
    int mp;                       /* model shards (1: the plain data-parallel path) */
    rci_sharded shards;            /* mp > 1: the plan and this rank's parameter shards */
    int remat;                    /* the fit's rc_train_options.remat */
    int dropout;                  /* 1: the training step's graph applies the model's dropout
                                     (rc_graph_set_training; rc_train_options.no_dropout 0) */
    rc_shard_spec *specs;         /* mp > 1: how each parameter splits (shards.specs) */
    rc_backend *be;               /* where the state lives and the updates run */
    rc_buffer *local;             /* each parameter's shard, flat f32 (shards.local; mp 1: the
                                     parameters' own buffer); not the trainer's to free */
    int64_t *loff, *lnum;         /* per parameter: element offset and size in local, grad, m, v */
    int64_t local_numel;
    rc_buffer *grad;              /* the f32 gradient accumulation, made by the first fit: flat
                                     like local, or with zero 2 only local's elements
                                     [share_lo, share_lo + share_n) */
    int64_t grad_at;              /* where grad[0] sits in local (zero 2: share_lo, else 0) */
    rc_buffer *window;            /* zero 2 over dp > 1: window_n f32, the reduce-scatter's */
    int64_t window_n;
    rc_buffer *m, *v;             /* AdamW's moments of local's elements [share_lo, share_lo +
                                     share_n), made by the first fit */
    int zero;                     /* the ZeRO stage (rc_train_options.zero): 1 and 2: the moments
                                     are this rank's share of the data axis's (else share_lo 0,
                                     share_n all); 2: the gradients too */
    int64_t share_lo, share_n;
    rc_dtype dtype;               /* the weights' dtype (local's): rc_train_options.dtype */
    rc_buffer *master;            /* 16-bit weights, or zero 3: the f32 master weights of local's
                                     elements [share_lo, share_lo + share_n), laid out like m and v
                                     (the checkpoints' weights); else NULL (local is the master) */
    rc_buffer *wshare;            /* zero 3 with 16-bit weights: master rounded, what the steps
                                     gather (f32: master itself); local is then released */
    rc_buffer *gathered;          /* zero 3: the slots the steps gather parameters into, the
                                     largest any compiled step needs */
    rc_buffer *fshare;            /* zero 3 with LoRA: this rank's share of the frozen base
                                     weights (their layout: the base's table, or with model
                                     shards its shards'), gathered with the adapters; the
                                     base's own buffer (mp 1) or shards are released */
    int64_t frozen_numel, fshare_lo, fshare_n;
    int nfrozen;
    int64_t *gloff, *glnum;       /* zero 3 with LoRA: loff, lnum, then each frozen weight's
                                     place in the gather layout (from local_numel on) */
    int64_t gathered_numel;
    float grad_scale;             /* zero 3: what the train step's gradients are scaled by as
                                     they are scattered (its events), and whether they are the */
    int grad_first;               /* step's first micro-batch (written, not added) */
    int scaling;                  /* dynamic loss scaling (rc_train_options.loss_scale) */
    double scale;                 /* the loss scale S (1 without scaling) */
    int64_t good_steps;           /* steps with finite gradients since S last changed */
    int64_t skipped;              /* steps skipped for non-finite gradients, this fit */
    int64_t step, opt_step;       /* optimizer steps done (opt_step counts AdamW's bias terms) */
    int epoch;
    int64_t epoch_step;           /* steps done in the current epoch */
    double eval_loss, best_eval;
    int64_t eval_tokens;
    char last_ckpt[256];          /* name of the last complete checkpoint */
    int tail_noted;               /* the epoch-tail note was printed */
    struct rc_predictor *eval_predictor; /* made at the first evaluation with a metric */
    rci_profile prof;             /* rc_train_options.profile: where the steps' time goes */
};

/* ---- compiled steps ----------------------------------------------------------------------- */

static void step_free(compiled_step *s)
{
    rci_gather_free(&s->gather);
    rci_step_free(&s->st);
    memset(s, 0, sizeof *s);
}

/* The f32 gradient accumulation on the trainer's backend: laid out as local, or with zero
 * 2 as the moments (this rank's share) plus the window its gradients pass through. */
static int grad_buffers(rc_trainer *t, rc_error *err)
{
    const rc_mesh *m = rc_deployer_mesh(t->d);
    int64_t n = t->zero >= 2 ? t->share_n : t->local_numel;
    t->grad_at = t->zero >= 2 ? t->share_lo : 0;
    if (!(t->grad = rc_buffer_new(t->be, (size_t)(n ? n : 1) * sizeof(float), err)))
        return rci_error_prefix(err, "trainer: the gradients of %lld parameters%s", (long long)n,
                                t->zero >= 2 ? " (this rank's share)" : "");
    if (t->zero < 2 || m->dp == 1) /* one rank: its share is all, nothing to scatter */
        return 0;
    int64_t most = (t->local_numel + m->dp - 1) / m->dp;
    t->window_n = most < ZERO2_WINDOW ? most : ZERO2_WINDOW;
    if (!(t->window = rc_buffer_new(t->be, (size_t)(t->window_n ? t->window_n : 1) * sizeof(float), err)))
        return rci_error_prefix(err, "trainer: the gradients' reduce-scatter window of %lld floats",
                                (long long)t->window_n);
    return 0;
}

/* AdamW's moments and the gradient buffers, made by the first fit (once the layout of
 * local is known): of all of local, or with zero of this rank's share of it over the data
 * axis (rc_comm_share of local_numel over dp). A later fit of the same trainer keeps that
 * layout. */
static int moment_buffers(rc_trainer *t, int zero, rc_error *err)
{
    const rc_mesh *m = rc_deployer_mesh(t->d);
    if (t->m && t->zero != zero)
        return rc_error_set(err, RC_ERR_ARG, "train: zero %d, but an earlier fit of this trainer made its AdamW "
                            "moments with zero %d: use a new trainer (a checkpoint resumes either way)",
                            zero, t->zero);
    if (t->m) /* (the gradients too, unless an earlier fit ran out of memory making them) */
        return t->grad ? 0 : grad_buffers(t, err);
    int64_t hi;
    t->zero = zero;
    rc_comm_share(t->local_numel, zero ? m->dp : 1, m->dp_rank, &t->share_lo, &hi);
    t->share_n = hi - t->share_lo;
    size_t bytes = (size_t)(t->share_n ? t->share_n : 1) * sizeof(float);
    if (!(t->m = rc_buffer_new(t->be, bytes, err)) || !(t->v = rc_buffer_new(t->be, bytes, err)))
        return rci_error_prefix(err, "trainer: the AdamW moments of %lld parameters%s", (long long)t->share_n,
                                zero ? " (this rank's share)" : "");
    return grad_buffers(t, err);
}

/* mp > 1, once the first step took the shards: their layout (the gradient and moment
 * buffers, made next by fit, are shaped like them); the full copy of the weights goes until
 * the end of fit */
static void shard_state(rc_trainer *t)
{
    rci_nn_weights *w = rci_params_table(t->params);
    t->specs = t->shards.specs;
    t->local = t->shards.local;
    t->local_numel = rci_sharded_layout(t->specs, w, t->mp, t->loff, t->lnum);
    rci_params_release(t->params);
}

static int scatter_unit(void *ctx, const int64_t *lo, const int64_t *hi, int nrange, rc_error *err);

/* zero 3: where the steps gather from (the weights' shares, with LoRA the frozen base's) */
static rci_gather_run share_run(const rc_trainer *t)
{
    return (rci_gather_run){.dp = rc_deployer_mesh(t->d)->dp_comm, .share = t->wshare ? t->wshare : t->master,
                            .numel = t->local_numel, .loff = t->gloff ? t->gloff : t->loff,
                            .lnum = t->glnum ? t->glnum : t->lnum, .dtype = t->dtype, .frozen = t->fshare,
                            .frozen_numel = t->frozen_numel};
}

/* zero 3: step s's gathers and scatters bound to the trainer's state; the gathered buffer
 * grown first if s needs more (every compiled step bound to the new one) */
static int gather_attach(rc_trainer *t, compiled_step *s, rc_error *err)
{
    compiled_step *all[3] = {&t->train, &t->eval, &t->eval_tail};
    size_t es = rc_dtype_size(t->dtype);
    int grown = s->gather.numel > t->gathered_numel;
    if (grown) {
        rc_buffer_free(t->gathered);
        t->gathered_numel = 0;
        if (!(t->gathered = rc_buffer_new(t->be, (size_t)s->gather.numel * es, err)))
            return rci_error_prefix(err, "trainer: the gathered parameters (%lld elements)",
                                    (long long)s->gather.numel);
        t->gathered_numel = s->gather.numel;
    }
    for (int k = 0; k < 3; k++) {
        compiled_step *c = all[k];
        if (!c->st.plan || (c != s && !grown))
            continue;
        rci_gather_run run = share_run(t);
        run.gathered = t->gathered;
        run.scatter = c->st.grads ? scatter_unit : NULL;
        run.ctx = t;
        if (rci_gather_attach(&c->gather, c->st.plan, &run, err))
            return -1;
    }
    return 0;
}

/* The loss function's record for batches shaped like b, checked, into loss[0]; with scaled,
 * loss[0] is the loss x the scale S (an input of the step, RCI_LOSS_SCALE) and loss[1] the
 * loss. training: a training step's graph (rc_graph_set_training). NULL with err set. */
static rc_graph *record_loss(rc_trainer *t, void *user, const rc_batch *b, int scaled, int training,
                             rc_tensor **loss, rc_tensor **leaves, rc_error *err)
{
    rc_graph *g = rc_graph_new();
    if (!g) {
        rc_error_set(err, RC_ERR_MEMORY, "trainer: out of memory");
        return NULL;
    }
    rc_graph_set_remat(g, t->remat);
    rc_graph_set_training(g, training);
    rc_error why = {0};
    loss[0] = t->loss_fn(g, t->params, b, rc_rng_new(t->seed), user, &why);
    if (!rc_graph_error(g) && !loss[0]) {
        rc_graph_free(g);
        rci_user_failed(err, &why, "loss: the loss function returned no tensor");
        return NULL;
    }
    if (!rc_graph_error(g) && rc_tensor_numel(loss[0]) != 1)
        rci_fail(g, RC_ERR_SHAPE, "loss function returned %lld values, not a scalar",
                (long long)rc_tensor_numel(loss[0]));
    for (int i = 0; i < rc_params_count(t->params) && !rc_graph_error(g); i++)
        leaves[i] = rc_params_get(g, t->params, rc_params_name(t->params, i));
    if (!rc_graph_error(g) && scaled) { /* loss x S, S fed with the batch */
        rc_tensor *s = rc_input(g, RCI_LOSS_SCALE, RC_F32, 1, (int64_t[]){1});
        loss[1] = loss[0];
        loss[0] = rc_mul(g, loss[1], rc_reshape(g, s, loss[1]->ndim, loss[1]->shape));
    }
    if (rc_graph_error(g)) {
        rc_error_set(err, rc_graph_error_code(g), "loss: %s", rc_graph_error(g));
        rc_graph_free(g);
        return NULL;
    }
    return g;
}

/* Records the user's loss for batches shaped like b and builds its step (step.h): with
 * model shards this rank runs its share, with_grads adds the gradients. */
static int step_compile(compiled_step *s, rc_trainer *t, void *user, const rc_batch *b, int with_grads, rc_error *err)
{
    memset(s, 0, sizeof *s);
    int np = rc_params_count(t->params), first_shards = t->mp > 1 && !t->shards.specs;
    int nf = t->zero == 3 ? t->nfrozen : 0; /* LoRA's frozen base, gathered too */
    rc_tensor *loss[2] = {NULL, NULL}, **leaves = calloc((size_t)(np + nf) + 1, sizeof *leaves);
    int scaled = with_grads && t->scaling; /* evaluation: the loss alone */
    rc_graph *g = leaves ? record_loss(t, user, b, scaled, with_grads && t->dropout, loss, leaves, err) : NULL;
    if (!leaves)
        rc_error_set(err, RC_ERR_MEMORY, "trainer: out of memory");
    /* the first cross-entropy's targets count the tokens */
    for (int i = 0; g && i < rc_graph_size(g) && !s->targets; i++) {
        rc_tensor *n = rc_graph_node(g, i);
        if (n->op == RC_OP_CROSS_ENTROPY) {
            s->targets = n->src[1];
            s->ignore = n->iparam[0];
        }
    }
    if (g && nf)
        rci_params_frozen_leaves(g, t->params, leaves + np);
    rci_step_spec spec = {loss, scaled ? 2 : 1, NULL, leaves, np, with_grads, t->zero == 3 ? &s->gather : NULL,
                          nf ? t->gloff : t->loff, nf ? t->glnum : t->lnum, nf, t->local_numel};
    int rc = g ? rci_step_build(&s->st, g, &spec, t->mp > 1 ? &t->shards : NULL, t->be, err) : -1;
    free(leaves);
    if (!rc && first_shards)
        shard_state(t);
    if (!rc && t->zero == 3)
        rc = gather_attach(t, s, err);
    if (rc) {
        step_free(s);
        return -1;
    }
    s->batch_rows = b->n ? b->a[0].shape[0] : 0;
    s->per_token = s->targets && rc_tensor_numel(s->targets) > s->batch_rows;
    s->loss_out = scaled;
    return 0;
}

/* predicted tokens of batch b: targets of the first cross-entropy not ignored (read from
 * the batch, on the host), or the batch's rows when the loss has none */
static int64_t step_tokens(const compiled_step *s, const rc_batch *b)
{
    const rc_array *a = s->targets ? rc_batch_get(b, s->targets->name) : NULL;
    if (!a || a->dtype != RC_I32 || s->targets->dtype != RC_I32)
        return s->batch_rows;
    const int32_t *ids = a->data;
    int64_t n = 0, count = rc_tensor_numel(s->targets);
    for (int64_t i = 0; i < count; i++)
        n += ids[i] != s->ignore;
    return n;
}

/* The step key of optimizer step `step` (rc_plan_set_step_rng): from the run's seed and the
 * step alone, so every data-parallel rank and micro-batch draws the same RC_RNG_STEP
 * normals (DP-SGD's noise is added once per step, whatever the mesh). */
static rc_rng step_key(const rc_trainer *t, int64_t step)
{
    return rc_rng_fold(rc_rng_fold(rc_rng_new(t->seed), 0x57E9C0DEull), (uint64_t)step);
}

static int step_run(compiled_step *s, const rc_batch *b, rc_rng key, rc_rng shared, double *loss, int64_t *tokens,
                    rc_error *err)
{
    float l;
    rc_plan *plan = s->st.plan;
    if (rc_batch_feed(b, plan, err))
        return -1;
    rc_plan_set_rng(plan, key);
    rc_plan_set_step_rng(plan, shared);
    if (rc_plan_run(plan, err) || rc_plan_read(plan, s->st.outs[s->loss_out], &l, err))
        return -1;
    *loss = l;
    *tokens = step_tokens(s, b);
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
    if (rc_params_to(params, rc_deployer_backend(d), err) || rci_deployer_init_params(d, params, "trainer", err))
        return NULL;
    rc_trainer *t = calloc(1, sizeof *t);
    int64_t n = rc_params_numel(params);
    int np = rc_params_count(params);
    if (t) {
        t->mp = rc_deployer_mesh(d)->mp;
        t->be = rci_params_backend(params);
        if (t->mp > 1)
            rci_sharded_init(&t->shards, rc_deployer_mesh(d), params, 0);
        t->loff = calloc((size_t)np + 1, sizeof *t->loff);
        t->lnum = calloc((size_t)np + 1, sizeof *t->lnum);
    }
    /* one shard: the state is the parameters' own layout (the buffer once fit has the
     * values read: weights_dtype); with shards it is made once the plan is known (the
     * first compiled step) */
    rci_nn_weights *w = np ? rci_params_table(params) : NULL;
    if (t && t->mp == 1 && w) {
        t->local = w->buf;
        t->local_numel = n;
        for (int i = 0; t->loff && t->lnum && i < np; i++) {
            t->loff[i] = w->p[i].offset;
            t->lnum[i] = w->p[i].numel;
        }
    }
    if (!t || !t->loff || !t->lnum) {
        rc_trainer_free(t);
        if (!err || !err->code) /* else the allocation's own message, naming the device */
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
    t->dtype = rc_params_dtype(params);
    t->scale = 1;
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
    rc_buffer_free(t->grad);
    rc_buffer_free(t->window);
    rc_buffer_free(t->m);
    rc_buffer_free(t->v);
    rc_buffer_free(t->master);
    rc_buffer_free(t->wshare);
    rc_buffer_free(t->gathered);
    rc_buffer_free(t->fshare);
    rci_sharded_free(&t->shards);
    free(t->loff);
    free(t->lnum);
    free(t->gloff);
    free(t->glnum);
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
    rc_error why = {0};
    if (t->collate(b, idx, n, user, &why)) {
        rc_batch_free(b);
        return rci_user_failed(err, &why, "collate failed for %d examples starting at example %lld", n,
                               (long long)idx[0]);
    }
    return 0;
}

/* dst = (add ? dst : 0) + scale x the gradients of local elements [a, b) of the last run of
 * the train step (in their dtype: 16-bit with 16-bit weights, widened exactly); dst's element
 * 0 is local element dst_at */
static int grads_into(rc_trainer *t, rc_buffer *dst, int64_t dst_at, int64_t a, int64_t b, float scale, int add,
                      rc_error *err)
{
    int np = rc_params_count(t->params);
    for (int i = 0; i < np; i++) {
        int64_t lo = t->loff[i] > a ? t->loff[i] : a;
        int64_t hi = t->loff[i] + t->lnum[i] < b ? t->loff[i] + t->lnum[i] : b;
        rc_buffer *g;
        size_t off;
        if (hi <= lo)
            continue;
        if (rc_plan_memory(t->train.st.plan, t->train.st.grads[i], &g, &off))
            return rc_error_set(err, RC_ERR_ARG, "trainer: the gradient of '%s' has no memory",
                                rc_params_name(t->params, i));
        rc_dtype dt = t->train.st.grads[i]->dtype;
        if (t->be->accumulate(t->be, dst, lo - dst_at, g, off + (size_t)(lo - t->loff[i]) * rc_dtype_size(dt),
                              hi - lo, dt, scale, add, err))
            return -1;
    }
    return 0;
}

/* ZeRO stages 2 and 3: scale x the gradients of local elements [a, b) of the last run of the
 * train step reduce-scattered over the data axis, and this rank's share of the mean written
 * (first) or added into grad. A window at a time: the gradients widened into it (exactly,
 * from 16-bit ones), the window reduce-scattered (every rank keeps its share's part,
 * rc_comm_share of local_numel), that part accumulated in f32. One rank (no window): added
 * into grad directly. */
static int scatter_grads(rc_trainer *t, int64_t a, int64_t b, float scale, int first, rc_error *err)
{
    rc_comm *dp = rc_deployer_mesh(t->d)->dp_comm;
    int64_t share_hi = t->share_lo + t->share_n;
    if (!t->window)
        return grads_into(t, t->grad, t->grad_at, a, b, scale, !first, err);
    for (int64_t at = a; at < b; at += t->window_n) {
        int64_t len = b - at < t->window_n ? b - at : t->window_n;
        if (grads_into(t, t->window, at, at, at + len, scale, 0, err) ||
            rc_comm_reduce_scatter_window_mean_f32(dp, t->window, 0, t->local_numel, at, len, err))
            return -1;
        int64_t lo = at > t->share_lo ? at : t->share_lo, hi = at + len < share_hi ? at + len : share_hi;
        if (hi > lo && t->be->accumulate(t->be, t->grad, lo - t->share_lo, t->window, (size_t)(lo - at) * sizeof(float),
                                         hi - lo, RC_F32, 1.0f, !first, err))
            return -1;
    }
    return 0;
}

/* zero 3: a unit's gradients are complete in the train step's run (its event): scattered */
static int scatter_unit(void *ctx, const int64_t *lo, const int64_t *hi, int nrange, rc_error *err)
{
    rc_trainer *t = ctx;
    for (int r = 0; r < nrange; r++)
        if (scatter_grads(t, lo[r], hi[r], t->grad_scale, t->grad_first, err))
            return -1;
    return 0;
}

/* the global norm: split parameters summed over the model shards, replicated ones once;
 * with zero, parts are this rank's share and the shares' sums meet over the data axis */
static int grad_norm(const rc_trainer *t, const rci_update_part *parts, double *norm, rc_error *err)
{
    double sq[2] = {0, 0}; /* split, replicated */
    int np = rc_params_count(t->params);
    double *part = malloc((size_t)(np ? np : 1) * sizeof *part);
    /* every parameter's sum in one call: one read back from a device */
    int rc = part ? t->be->sum_squares(t->be, t->grad, parts, np, part, err)
                  : rc_error_set(err, RC_ERR_MEMORY, "trainer: out of memory");
    for (int i = 0; !rc && i < np; i++)
        sq[t->mp > 1 && t->specs[i].axis >= 0 ? 0 : 1] += part[i];
    free(part);
    if (rc)
        return -1;
    if (t->zero && rc_comm_allreduce_sum_f64(rc_deployer_mesh(t->d)->dp_comm, sq, 2, err))
        return -1;
    if (t->mp > 1 && rc_comm_allreduce_sum_f64(rc_deployer_mesh(t->d)->mp_comm, sq, 1, err))
        return -1;
    *norm = sqrt(sq[0] + sq[1]);
    return 0;
}

/* AdamW's betas and eps as a fit uses them: as given with adam_as_given, else a field
 * left 0 takes its default */
static void adam_consts(const rc_train_options *o, double *beta1, double *beta2, double *eps)
{
    int given = o->adam_as_given;
    *beta1 = given || o->beta1 != 0 ? o->beta1 : 0.9;
    *beta2 = given || o->beta2 != 0 ? o->beta2 : 0.999;
    *eps = given || o->eps != 0 ? o->eps : 1e-8;
}

/* One optimizer step on the backend over every parameter's share of local, grad, m and v
 * (parts, in grad's layout), the gradient first multiplied by clip (1: none); m and v start
 * at local's share_lo, grad at grad_at. */
static int optimizer_update(rc_trainer *t, const rc_train_options *o, const rci_update_part *parts,
                            double lr, double clip, rc_error *err)
{
    double b1, b2, eps;
    adam_consts(o, &b1, &b2, &eps);
    rci_update u = {t->local, t->grad, t->m, t->v, parts, rc_params_count(t->params), lr, b1, b2, eps,
                    ++t->opt_step, clip,
                    !o->optimizer || !strcmp(o->optimizer, "adamw"), t->share_lo - t->grad_at, -t->grad_at};
    return t->be->update(t->be, &u, err);
}

/* Each parameter's elements in local that this rank updates (element offset in grad's
 * layout, count: its model shard, cut to this rank's share with zero; possibly none) and
 * its weight decay: none on 1-D parameters unless asked. malloc'ed; NULL when memory runs
 * out. */
static rci_update_part *state_parts(const rc_trainer *t, const rc_train_options *o)
{
    rci_nn_weights *w = rci_params_table(t->params);
    rci_update_part *parts = malloc((size_t)(w->n ? w->n : 1) * sizeof *parts);
    int64_t end = t->share_lo + t->share_n;
    for (int i = 0; parts && i < w->n; i++) {
        int decay = w->p[i].ndim >= 2 || o->decay_norms_and_biases;
        int64_t lo = t->loff[i] > t->share_lo ? t->loff[i] : t->share_lo;
        int64_t hi = t->loff[i] + t->lnum[i] < end ? t->loff[i] + t->lnum[i] : end;
        parts[i] = (rci_update_part){lo - t->grad_at, hi > lo ? hi - lo : 0, decay ? o->weight_decay : 0.0};
    }
    return parts;
}

/* the loss scale as one more array of batch b (fed to the step's RCI_LOSS_SCALE input) */
static int add_scale(rc_batch *b, double scale, rc_error *err)
{
    float *s = rc_batch_add(b, RCI_LOSS_SCALE, RC_F32, 1, (int64_t[]){1});
    if (!s)
        return rc_error_set(err, RC_ERR_ARG, "trainer: the batch has no room for the loss scale '%s' (%d arrays at "
                            "most, no array of that name)", RCI_LOSS_SCALE, RC_BATCH_MAX);
    *s = (float)scale;
    return 0;
}

/* Non-finite gradients under loss scaling: no update (weights, moments and AdamW's step
 * count untouched), the scale halved, a note. */
static int skip_step(rc_trainer *t, double norm, rc_error *err)
{
    rci_deployer_note(t->d, "step %lld: the gradients are not finite (norm %s) at loss scale %g: update skipped, "
                      "loss scale now %g", (long long)t->step + 1, isnan(norm) ? "nan" : "inf", t->scale,
                      t->scale / 2);
    t->scale /= 2;
    t->good_steps = 0;
    t->skipped++;
    if (t->scale < 0x1p-64)
        return rc_error_set(err, RC_ERR_ARG, "step %lld: the gradients are not finite at loss scale %g: stopping "
                            "(the last complete checkpoint is %s)", (long long)t->step + 1, t->scale,
                            t->last_ckpt[0] ? t->last_ckpt : "none");
    return 0;
}

/* The update of 16-bit weights: on the f32 master share, which is laid out like the
 * moments (element 0: local's share_lo), with the gradient's share where the
 * reduce-scatter left it. */
static int master_update(rc_trainer *t, const rc_train_options *o, const rci_update_part *parts, double lr,
                         double clip, rc_error *err)
{
    double b1, b2, eps;
    adam_consts(o, &b1, &b2, &eps);
    rci_update u = {t->master, t->grad, t->m, t->v, parts, rc_params_count(t->params), lr, b1, b2, eps,
                    t->opt_step + 1, clip,
                    !o->optimizer || !strcmp(o->optimizer, "adamw"), t->share_lo - t->grad_at,
                    t->share_lo - t->grad_at};
    int rc = t->be->update(t->be, &u, err);
    if (!rc)
        t->opt_step++;
    return rc;
}

/* The f32 master share rounded into the 16-bit weights, then (zero 1 and 2) all-gathered
 * over the data axis: every rank's local whole again. Zero 3: into the share the steps
 * gather from (f32: the master is that share). */
static int round_master(rc_trainer *t, rc_error *err)
{
    const rc_mesh *m = rc_deployer_mesh(t->d);
    if (t->zero == 3)
        return t->wshare ? t->be->round_f32(t->be, t->wshare, 0, t->dtype, t->master, 0, t->share_n, err) : 0;
    if (t->be->round_f32(t->be, t->local, t->share_lo, t->dtype, t->master, 0, t->share_n, err))
        return -1;
    return t->zero ? rc_comm_allgather(m->dp_comm, t->local, 0, t->local_numel, t->dtype, GRAD_BUCKET, err) : 0;
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
        if (!rc && t->scaling)
            rc = add_scale(&b, t->scale, err);
        if (!rc && !t->train.st.plan && !(rc = step_compile(&t->train, t, user, &b, 1, err)) && t->prof.on)
            rc_plan_set_timing(t->train.st.plan, 1);
        if (!rc)
            rc = rci_profile_mark(&t->prof, RCI_PROF_DATA, err);
        double loss = 0;
        int64_t tokens = 0;
        rc_rng key = rc_rng_fold(rc_deployer_step_rng(t->d, t->step), (uint64_t)j);
        float scale = (float)(1.0 / (k * t->scale)); /* the mean, unscaled */
        if (t->zero == 3) { /* gathers and scatters run inside the step: every rank must get there */
            t->grad_scale = scale;
            t->grad_first = j == 0;
            rc = rc_deployer_agree(t->d, rc, err);
        }
        if (!rc && !(rc = step_run(&t->train, &b, key, step_key(t, t->step), &loss, &tokens, err)) &&
            !(rc = rci_profile_mark(&t->prof, RCI_PROF_RUN, err)))
            rci_profile_kernels(&t->prof, t->train.st.plan);
        if (t->zero == 3 && rc)
            rci_gather_drain(&t->train.gather, NULL);
        /* zero 2: reduce-scattered now (every rank must get there) */
        if (t->zero == 2 && t->window)
            rc = rc_deployer_agree(t->d, rc, err) ? -1 : scatter_grads(t, 0, t->local_numel, scale, j == 0, err);
        else if (!rc && t->zero < 3)
            rc = scatter_grads(t, 0, t->local_numel, scale, j == 0, err);
        if (!rc) {
            sums[0] += loss / k;
            sums[1] += (double)tokens;
            rc = rci_profile_mark(&t->prof, RCI_PROF_GRADS, err);
        }
        rc_batch_free(&b);
    }
    free(idx);
    if (rc_deployer_agree(t->d, rc, err))
        return -1;
    /* the mean gradient: everywhere, or with zero each rank's share of it only (zero 2: done) */
    rc = t->zero >= 2 ? 0
         : t->zero    ? rc_comm_reduce_scatter_mean_f32(m->dp_comm, t->grad, 0, t->local_numel, ZERO2_WINDOW, err)
                      : rc_comm_allreduce_mean_f32(m->dp_comm, t->grad, 0, t->local_numel, GRAD_BUCKET, err);
    if (rc || rc_comm_allreduce_sum_f64(m->dp_comm, sums, 2, err) || rci_profile_mark(&t->prof, RCI_PROF_GRADS, err))
        return -1;
    *loss_out = sums[0] / m->dp;
    *tokens_out = (int64_t)sums[1];
    if (!isfinite(*loss_out))
        return rc_error_set(err, RC_ERR_ARG, "step %lld: the loss is %s; stopping (the last complete checkpoint is %s)",
                            (long long)t->step + 1, isnan(*loss_out) ? "NaN" : "infinite",
                            t->last_ckpt[0] ? t->last_ckpt : "none");
    rci_update_part *parts = state_parts(t, o);
    if (!parts)
        return rc_error_set(err, RC_ERR_MEMORY, "trainer: out of memory");
    rc = grad_norm(t, parts, norm_out, err); /* the same on every rank */
    if (!rc)
        rc = rci_profile_mark(&t->prof, RCI_PROF_NORM, err);
    if (!rc && t->scaling && !isfinite(*norm_out)) {
        free(parts);
        return skip_step(t, *norm_out, err);
    }
    if (!rc) { /* clipping is applied inside the update's pass */
        float clip = o->grad_clip > 0 && *norm_out > o->grad_clip ? (float)(o->grad_clip / (*norm_out + 1e-6)) : 1.0f;
        rc = t->master ? master_update(t, o, parts, lr, clip, err) : optimizer_update(t, o, parts, lr, clip, err);
    }
    free(parts);
    if (!rc && t->scaling && ++t->good_steps >= (o->loss_scale_window > 0 ? o->loss_scale_window : 2000)) {
        t->scale *= 2;
        t->good_steps = 0;
    }
    if (t->master) /* the weights from the master (zero 1 and 2: all-gathered) */
        return rc_deployer_agree(t->d, rc, err) ? -1 : round_master(t, err);
    if (!t->zero)
        return rc;
    /* zero: each rank updated its share of the f32 weights in local, which are the master
     * weights; every rank takes the others' shares */
    if (rc_deployer_agree(t->d, rc, err))
        return -1;
    return rc_comm_allgather_f32(m->dp_comm, t->local, 0, t->local_numel, GRAD_BUCKET, err);
}

/* ---- checkpoints: the state lent to ckpt.c as a view ------------------------------------ */

static rci_ckpt_state ckpt_state(const rc_trainer *t)
{
    return (rci_ckpt_state){t->d, rci_params_weights(t->params), t->specs, t->loff, t->lnum,
                            t->master ? t->master : t->local, t->master != NULL, t->m, t->v, t->zero != 0,
                            t->share_lo, t->share_n, t->model ? &t->model->config : NULL};
}

static rci_ckpt_counters ckpt_counters(const rc_trainer *t)
{
    return (rci_ckpt_counters){t->step, t->opt_step, t->epoch, t->epoch_step, t->seed, t->best_eval, t->dtype,
                               t->scaling, t->scale, t->good_steps};
}

/* checkpoint-STEP (name NULL) or a named one ("best") */
static int save(rc_trainer *t, const rc_train_options *o, const char *name, rc_error *err)
{
    rci_ckpt_state s = ckpt_state(t);
    rci_ckpt_counters c = ckpt_counters(t);
    if (rci_ckpt_save(&s, &c, o, name, err))
        return -1;
    if (!name && rci_deployer_workdir(t->d))
        rci_workdir_checkpoint_name(t->step, t->last_ckpt, sizeof t->last_ckpt);
    return 0;
}

/* the workdir's last complete checkpoint, if any, continued from: with 16-bit weights the
 * master is rounded into them, as after a step */
static int resume(rc_trainer *t, const rc_train_options *o, rc_error *err)
{
    rci_ckpt_state s = ckpt_state(t);
    rci_ckpt_counters c = ckpt_counters(t);
    char name[256];
    int resumed = rci_ckpt_resume(&s, &c, o, name, sizeof name, err);
    if (resumed <= 0)
        return resumed;
    t->step = c.step;
    t->opt_step = c.opt_step;
    t->epoch = c.epoch;
    t->epoch_step = c.epoch_step;
    t->best_eval = c.best;
    t->scale = c.scale;
    t->good_steps = c.good_steps;
    snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", name);
    return t->master ? rc_deployer_agree(t->d, round_master(t, err), err) : 0;
}

/* ---- evaluation ------------------------------------------------------------------------ */

/* One evaluation batch: examples order[at, at + count) of ex; its loss x tokens and tokens
 * added to sums unless it ran only to keep the replicas in step (weight 0). */
static int eval_batch(rc_trainer *t, rc_examples ex, const int64_t *order, int64_t at, int count, int batch_size,
                      int weight, double *sums, rc_error *err)
{
    compiled_step *s = count == batch_size ? &t->eval : &t->eval_tail;
    rc_batch b;
    int rc = collate(t, user_of(t, ex), &b, order + at, count, err);
    if (!rc && s->st.plan && s->batch_rows != count)
        step_free(s);
    if (!rc && !s->st.plan)
        rc = step_compile(s, t, user_of(t, ex), &b, 0, err);
    double l = 0;
    int64_t tk = 0;
    if (t->zero == 3) /* the step gathers: every rank must get there */
        rc = rc_deployer_agree(t->d, rc, err);
    if (!rc)
        rc = step_run(s, &b, rc_rng_new(t->seed), step_key(t, t->step), &l, &tk, err);
    if (!rc && weight) {
        sums[0] += l * (double)tk;
        sums[1] += (double)tk;
    }
    if (rc && t->zero == 3)
        rci_gather_drain(&s->gather, NULL);
    rc_batch_free(&b);
    return rc;
}

/* Each replica takes a contiguous slice of the examples, in full batches and one smaller
 * tail batch; the sums of loss x tokens and tokens meet on every rank. With zero 3 (the
 * steps gather over the data axis) every replica runs the same batches: slices of n / dp
 * examples, then one more example each for the first n mod dp replicas while the others
 * run one of weight 0. */
int rc_trainer_eval(rc_trainer *t, rc_examples ex, int batch_size, double *loss, int64_t *tokens,
                    rc_error *err)
{
    const rc_mesh *m = rc_deployer_mesh(t->d);
    int lockstep = t->zero == 3 && m->dp > 1;
    int64_t n = ex.count(0, ex.user), per = lockstep ? n / m->dp : (n + m->dp - 1) / m->dp;
    int64_t lo = m->dp_rank * per, hi = lo + per < n ? lo + per : n, rest = n - per * m->dp;
    int64_t *order = epoch_order(0, 0, n, 0);
    double sums[2] = {0, 0};
    int rc = order ? 0 : rc_error_set(err, RC_ERR_MEMORY, "eval: out of memory");
    for (int64_t at = lo; !rc && at < hi; at += batch_size)
        rc = eval_batch(t, ex, order, at, (int)(hi - at < batch_size ? hi - at : batch_size), batch_size, 1, sums, err);
    if (!rc && lockstep && rest > 0)
        rc = eval_batch(t, ex, order, m->dp_rank < rest ? per * m->dp + m->dp_rank : 0, 1, batch_size,
                        m->dp_rank < rest, sums, err);
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

/* Values still in a model directory (rc_model_load, or the last fit's final checkpoint)
 * are read from it in parts: each model shard its own, ZeRO stage 3 this rank's share; the
 * whole buffer is never made. */
static void read_in_parts(rc_trainer *t, const rc_train_options *o)
{
    const rci_frozen *fz = rci_params_frozen(t->params);
    if (rci_params_waiting(t->params) && (t->mp > 1 || o->zero == 3))
        rci_params_release(t->params);
    if (fz && rci_params_waiting(fz->base) && (t->mp > 1 || o->zero == 3)) /* LoRA's base too */
        rci_params_release(fz->base);
}

/* The weights in the fit's dtype, at the first fit (the steps are recorded in it): the
 * parameters converted in place; with one shard local is their buffer again. */
static int weights_dtype(rc_trainer *t, const rc_train_options *o, rc_error *err)
{
    rc_dtype dt = o->dtype;
    if (dt != RC_F32 && dt != RC_BF16 && dt != RC_F16)
        return rc_error_set(err, RC_ERR_ARG, "train: dtype %s (f32, bf16 or f16)", rc_dtype_name(dt));
    if (t->train.st.plan || t->m) {
        if (dt != t->dtype || (dt != RC_F32 || t->zero == 3) != (t->master != NULL))
            return rc_error_set(err, RC_ERR_ARG, "train: dtype %s, but an earlier fit of this trainer trained in %s: "
                                "use a new trainer (a checkpoint resumes in either)", rc_dtype_name(dt),
                                rc_dtype_name(t->dtype));
        read_in_parts(t, o);
        return 0;
    }
    if (rc_params_dtype(t->params) != dt && rc_params_to_dtype(t->params, dt, err))
        return -1;
    t->dtype = dt;
    read_in_parts(t, o);
    rci_nn_weights *w = t->mp == 1 && rc_params_count(t->params) ? rci_params_weights(t->params) : NULL;
    if (w)
        t->local = w->buf;
    return 0;
}

/* zero 3, once the master share is made: local goes (the parameters' buffer, or with model
 * shards the shards' buffer), until the end of fit gathers the weights back */
static void release_local(rc_trainer *t)
{
    if (t->mp > 1) {
        rc_buffer_free(t->shards.local);
        t->shards.local = NULL;
    } else {
        rci_params_release(t->params);
    }
    t->local = NULL;
}

/* zero 3 with 16-bit weights: this rank's share of them, what the steps gather (f32: the
 * master is), the master rounded: the words it was widened from */
static int weight_share(rc_trainer *t, rc_error *err)
{
    size_t es = rc_dtype_size(t->dtype), bytes = (size_t)t->share_n * es;
    if (t->zero < 3 || t->dtype == RC_F32)
        return 0;
    if (!(t->wshare = rc_buffer_new(t->be, bytes ? bytes : es, err)))
        return rci_error_prefix(err, "trainer: this rank's share of the %s weights (%lld)", rc_dtype_name(t->dtype),
                                (long long)t->share_n);
    return bytes ? t->be->round_f32(t->be, t->wshare, 0, t->dtype, t->master, 0, t->share_n, err) : 0;
}

/* Elements [lo, lo + n) of a layout of p's parameters (parameter i at element off[i], num[i]
 * of them) in p's dtype into host: from buf, or without one (one model shard, the values
 * still in their model directory) from p's file, a parameter's part at a time. */
static int layout_words(rc_params *p, rc_buffer *buf, const int64_t *off, const int64_t *num, int64_t lo, int64_t n,
                        void *host, rc_error *err)
{
    size_t es = rc_dtype_size(rc_params_dtype(p));
    if (buf)
        return rc_buffer_download(buf, (size_t)lo * es, host, (size_t)n * es, err);
    for (int i = 0; i < rc_params_count(p); i++) {
        int64_t a = lo > off[i] ? lo : off[i];
        int64_t b = lo + n < off[i] + num[i] ? lo + n : off[i] + num[i];
        if (a < b && rci_params_read_range(p, i, a - off[i], b - a, (char *)host + (size_t)(a - lo) * es, err))
            return -1;
    }
    return 0;
}

static int local_words(rc_trainer *t, int64_t lo, int64_t n, void *host, rc_error *err)
{
    return layout_words(t->params, t->local, t->loff, t->lnum, lo, n, host, err);
}

/* zero 3 with LoRA: the gather layout (gloff, glnum), the adapters' places then the frozen
 * base weights' from local_numel on (the base's table, or with model shards its shards'
 * layout); off[j] gets frozen weight j's offset in the frozen layout alone. -1 out of
 * memory. */
static int frozen_layout(rc_trainer *t, const rci_nn_weights *bw, int64_t *off, rc_error *err)
{
    int np = rc_params_count(t->params), nf = bw->n;
    t->gloff = malloc((size_t)(np + nf + 1) * sizeof *t->gloff);
    t->glnum = malloc((size_t)(np + nf + 1) * sizeof *t->glnum);
    if (!t->gloff || !t->glnum)
        return rc_error_set(err, RC_ERR_MEMORY, "trainer: out of memory");
    memcpy(t->gloff, t->loff, (size_t)np * sizeof *t->gloff);
    memcpy(t->glnum, t->lnum, (size_t)np * sizeof *t->glnum);
    if (t->mp > 1)
        t->frozen_numel = rci_sharded_layout(t->specs + np, bw, t->mp, off, t->glnum + np);
    for (int j = 0; t->mp == 1 && j < nf; j++) {
        off[j] = bw->p[j].offset;
        t->glnum[np + j] = bw->p[j].numel;
    }
    if (t->mp == 1)
        t->frozen_numel = bw->numel;
    for (int j = 0; j < nf; j++)
        t->gloff[np + j] = t->local_numel + off[j];
    t->nfrozen = nf;
    return 0;
}

/* zero 3 with LoRA: this rank's share of the frozen base weights (their words, chunk by
 * chunk from the base's buffer, its shards or its file), gathered with the adapters' layers;
 * then the base's buffer (one model shard) or its shards go. A later fit: the buffer the
 * last one gave back goes again. */
static int frozen_share(rc_trainer *t, rc_error *err)
{
    enum { CHUNK = 1 << 20 };
    const rci_frozen *fz = rci_params_frozen(t->params);
    rci_nn_weights *bw = fz ? rci_params_table(fz->base) : NULL;
    if (t->zero < 3 || !fz)
        return 0;
    if (t->fshare) {
        if (t->mp == 1 && bw->buf)
            rci_params_release(fz->base);
        return 0;
    }
    if (bw->dtype != t->dtype)
        return rc_error_set(err, RC_ERR_ARG, "train: zero 3 with LoRA: the frozen base weights are %s, the adapters "
                            "train in %s (load the model in the training dtype)", rc_dtype_name(bw->dtype),
                            rc_dtype_name(t->dtype));
    int64_t *off = malloc((size_t)(bw->n + 1) * sizeof *off), hi;
    size_t es = rc_dtype_size(t->dtype);
    void *words = malloc(CHUNK * es);
    int rc = off && words ? frozen_layout(t, bw, off, err) : rc_error_set(err, RC_ERR_MEMORY, "trainer: out of memory");
    const rc_mesh *m = rc_deployer_mesh(t->d);
    rc_comm_share(t->frozen_numel, m->dp, m->dp_rank, &t->fshare_lo, &hi);
    t->fshare_n = hi - t->fshare_lo;
    if (!rc && !(t->fshare = rc_buffer_new(t->be, (size_t)(t->fshare_n ? t->fshare_n : 1) * es, err)))
        rc = rci_error_prefix(err, "trainer: this rank's share of the frozen weights (%lld)", (long long)t->fshare_n);
    rc_buffer *from = t->mp > 1 ? t->shards.frozen_local : bw->buf;
    for (int64_t at = 0; !rc && at < t->fshare_n; at += CHUNK) {
        int64_t len = t->fshare_n - at < CHUNK ? t->fshare_n - at : CHUNK;
        rc = layout_words(fz->base, from, off, t->glnum + rc_params_count(t->params), t->fshare_lo + at, len, words,
                          err) || rc_buffer_upload(t->fshare, (size_t)at * es, words, (size_t)len * es, err) ? -1 : 0;
    }
    free(off);
    free(words);
    if (!rc && t->mp > 1) {
        rc_buffer_free(t->shards.frozen_local);
        t->shards.frozen_local = NULL;
    } else if (!rc) {
        rci_params_release(fz->base);
    }
    return rc;
}

/* zero 3 with LoRA, when fit ends: the frozen base's values where the base keeps them
 * again: waiting in its file (a model directory), else (one model shard) its buffer made
 * whole from the shares. Collective. */
static int frozen_back(rc_trainer *t, rc_error *err)
{
    const rci_frozen *fz = rci_params_frozen(t->params);
    rci_nn_weights *bw = fz ? rci_params_table(fz->base) : NULL;
    if (!t->fshare || bw->buf) /* (with model shards the base kept its buffer) */
        return 0;
    if (rci_params_unrelease(fz->base) == 0) /* waiting in its file again */
        return 0;
    if (rci_params_restore(fz->base))
        return rc_error_set(err, RC_ERR_MEMORY, "trainer: cannot allocate the frozen weights (%lld)",
                            (long long)bw->numel);
    size_t es = rc_dtype_size(t->dtype);
    const rc_mesh *m = rc_deployer_mesh(t->d);
    int rc = t->fshare_n ? t->be->copy(t->be, bw->buf, (size_t)t->fshare_lo * es, t->fshare, 0,
                                       (size_t)t->fshare_n * es, err) : 0;
    return rc ? -1 : rc_comm_allgather(m->dp_comm, bw->buf, 0, bw->numel, t->dtype, GRAD_BUCKET, err);
}

/* 16-bit weights, or zero 3: the f32 master of this rank's share (made with the moments'
 * layout), from the weights (widened exactly: training starts from the weights as the steps
 * read them, on any mesh), through host memory a chunk at a time; zero 3 then holds no more
 * than its share (local goes: the parameters' buffer is released until the end of fit). */
static int master_buffer(rc_trainer *t, rc_error *err)
{
    enum { CHUNK = 1 << 20 };
    if (t->master || (t->dtype == RC_F32 && t->zero < 3)) {
        rci_nn_weights *w = rci_params_weights(t->params);
        if (t->zero == 3 && t->mp == 1 && w && w->buf) /* a later fit: the end of the last */
            release_local(t);                           /* gathered the weights back */
        return 0;
    }
    int64_t n = t->share_n;
    size_t es = rc_dtype_size(t->dtype);
    if (!(t->master = rc_buffer_new(t->be, (size_t)(n ? n : 1) * sizeof(float), err)))
        return rci_error_prefix(err, "trainer: the f32 master weights of %lld parameters%s", (long long)n,
                                t->zero ? " (this rank's share)" : "");
    if (t->dtype == RC_F32 && t->local) { /* zero 3 */
        int rc = n ? t->be->copy(t->be, t->master, 0, t->local, (size_t)t->share_lo * es, (size_t)n * es, err) : 0;
        if (!rc)
            release_local(t);
        return rc;
    }
    void *words = malloc(CHUNK * sizeof(float));
    float *wide = malloc(CHUNK * sizeof *wide);
    int rc = words && wide ? 0 : rc_error_set(err, RC_ERR_MEMORY, "trainer: out of memory");
    for (int64_t at = 0; !rc && at < n; at += CHUNK) {
        int64_t len = n - at < CHUNK ? n - at : CHUNK;
        rc = local_words(t, t->share_lo + at, len, words, err);
        if (!rc) {
            rc_convert(wide, RC_F32, words, t->dtype, len);
            rc = rc_buffer_upload(t->master, (size_t)at * sizeof *wide, wide, (size_t)len * sizeof *wide, err);
        }
    }
    free(words);
    free(wide);
    if (!rc)
        rc = weight_share(t, err);
    if (!rc && t->zero == 3)
        release_local(t);
    return rc;
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

/* AdamW's constants in range (SGD reads none of them) */
static int check_adam(const rc_train_options *o, rc_error *err)
{
    double beta[2], eps;
    if (o->optimizer && strcmp(o->optimizer, "adamw"))
        return 0;
    adam_consts(o, &beta[0], &beta[1], &eps);
    for (int k = 0; k < 2; k++)
        if (!(beta[k] >= 0 && beta[k] < 1))
            return rc_error_set(err, RC_ERR_ARG, "train: AdamW's beta%d %g is outside [0, 1)", k + 1, beta[k]);
    if (!(eps >= 0) || isinf(eps))
        return rc_error_set(err, RC_ERR_ARG, "train: AdamW's eps %g (finite, >= 0)", eps);
    return 0;
}

static int check_options(const rc_trainer *t, const rc_train_options *o, rc_examples ex, rc_error *err)
{
    if (o->batch_size < 1)
        return rc_error_set(err, RC_ERR_ARG, "train: batch size %d (at least 1)", o->batch_size);
    if (o->optimizer && strcmp(o->optimizer, "adamw") && strcmp(o->optimizer, "sgd"))
        return rc_error_set(err, RC_ERR_ARG, "train: optimizer '%s' (adamw or sgd)", o->optimizer);
    if (o->steps <= 0 && o->epochs <= 0)
        return rc_error_set(err, RC_ERR_ARG, "train: give a number of steps or epochs");
    if (check_adam(o, err))
        return -1;
    if (o->zero < 0 || o->zero > 3)
        return rc_error_set(err, RC_ERR_ARG, "train: zero %d: the ZeRO stage is 0 (none), 1 (optimizer state sharded), "
                            "2 (gradients too) or 3 (parameters too)", o->zero);
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
        rci_predictor_use_shards(t->eval_predictor, t->specs, t->local, t->loff, t->shards.frozen_local,
                                 t->shards.frozen_off);
    if (t->zero == 3) { /* the weights' shares, gathered layer by layer as the train step does */
        rci_gather_run share = share_run(t);
        rci_predictor_use_gather(t->eval_predictor, &share);
    }
    if (o->eval_begin) /* the metric's counters start afresh on every rank */
        o->eval_begin(user_of(t, ex));
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
    /* a language model's loss per token, with its perplexity; a classifier's per example */
    int lm = t->eval.st.plan ? t->eval.per_token : t->eval_tail.per_token;
    const char *keys[4] = {"eval/loss", lm ? "eval/tokens" : "eval/examples", metric_key, "eval/ppl"};
    double vals[4] = {t->eval_loss, (double)t->eval_tokens, NAN, exp(t->eval_loss)};
    int with_metric = o->eval_predict && o->eval_metric;
    if (with_metric && eval_metric(t, o, *eval, &vals[2], err))
        return -1;
    if (lm)
        rci_deployer_note(t->d, "step %lld: eval loss %.4f (ppl %.2f) over %lld tokens", (long long)t->step,
                         t->eval_loss, exp(t->eval_loss), (long long)t->eval_tokens);
    else
        rci_deployer_note(t->d, "step %lld: eval loss %.4f over %lld examples", (long long)t->step, t->eval_loss,
                         (long long)t->eval_tokens);
    if (with_metric)
        rci_deployer_note(t->d, "step %lld: %s %.6g", (long long)t->step, metric_key, vals[2]);
    if (!with_metric) { /* the perplexity takes the metric's place */
        keys[2] = keys[3];
        vals[2] = vals[3];
    }
    if (rci_deployer_log(t->d, t->step, keys, vals, 2 + with_metric + lm, err))
        return -1;
    /* best/: by the metric when there is one (its direction given), else by eval loss */
    double score = with_metric ? (o->metric_higher_is_better ? -vals[2] : vals[2]) : t->eval_loss;
    if (score < t->best_eval) {
        t->best_eval = score;
        return save(t, o, "best", err);
    }
    return 0;
}

/* ---- stopping well: SIGINT and SIGTERM (Slurm's notice before preemption or the time
 * limit) end the fit after the step in progress, with a checkpoint ------------------------ */

static volatile sig_atomic_t stop_signal;
static struct timespec stop_first; /* when the first stop signal came */

static void on_stop_signal(int sig)
{
    int as = rc_dist_stop_signal(sig); /* SIGUSR1 / SIGUSR2: forwarded by redco's launcher */
    if (stop_signal && as != sig) /* the launcher repeats its notice until the job ends */
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); /* async-signal-safe */
    double ms = 1e3 * (double)(now.tv_sec - stop_first.tv_sec) + 1e-6 * (double)(now.tv_nsec - stop_first.tv_nsec);
    if (stop_signal && ms < RC_STOP_REPEAT_MS) /* a copy of the first: mpiexec's or srun's, or the scheduler's own */
        return;
    if (stop_signal) { /* a second signal: stop now (the checkpoint writes are atomic) */
        signal(as, SIG_DFL);
        raise(as);
        return;
    }
    stop_first = now;
    stop_signal = as;
}

/* SIGINT, SIGTERM and, in a job of redco's launcher, the SIGUSR1 and SIGUSR2 that stand for them */
enum { STOP_SIGNALS = 4 };
static const int stop_signals[STOP_SIGNALS] = {SIGINT, SIGTERM, SIGUSR1, SIGUSR2};

typedef struct {
    struct sigaction old[STOP_SIGNALS];
    int n;                        /* signals caught: 0, 2 or 4 */
} stop_handlers;

static void stop_handlers_set(stop_handlers *h, int on)
{
    h->n = !on ? 0 : rc_dist_signals_forwarded() ? 4 : 2;
    stop_signal = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < h->n; i++)
        sigaction(stop_signals[i], &sa, &h->old[i]);
}

static void stop_handlers_restore(stop_handlers *h)
{
    for (int i = 0; i < h->n; i++)
        sigaction(stop_signals[i], &h->old[i], NULL);
}

/* the signal any rank received (the largest number), agreed by all ranks; 0: none */
static int stop_agreed(rc_trainer *t, int *sig, rc_error *err)
{
    const rc_mesh *m = rc_deployer_mesh(t->d);
    double v = (double)stop_signal;
    if (m->size > 1 && rc_comm_allreduce_max_f64(m->world, &v, 1, err))
        return -1;
    *sig = (int)v;
    return 0;
}

/* A test hook: REDCO_TEST_SLEEP_RANK=R and REDCO_TEST_SLEEP_STEP=S make world rank R sleep
 * REDCO_TEST_SLEEP_SECONDS (default 3600) before step S, a hung rank for the watchdog's test. */
static void test_sleep(const rc_trainer *t, int64_t step)
{
    const char *rank = getenv("REDCO_TEST_SLEEP_RANK"), *at = getenv("REDCO_TEST_SLEEP_STEP");
    if (!rank || !at || atoi(rank) != rc_deployer_mesh(t->d)->rank || atoll(at) != step)
        return;
    const char *secs = getenv("REDCO_TEST_SLEEP_SECONDS");
    sleep(secs ? (unsigned)atoi(secs) : 3600u);
}

/* A test hook: REDCO_TEST_STOP_SECONDS=S makes every rank wait S seconds (signals do not cut
 * it short) after a stop is agreed, before its checkpoint is written: the save of a large
 * model, for the tests of signals that come while one is written. */
static void test_stop_wait(void)
{
    const char *secs = getenv("REDCO_TEST_STOP_SECONDS");
    double end = rci_clock_s() + (secs ? atof(secs) : 0.0);
    while (rci_clock_s() < end) {
        struct timespec tick = {0, 10000000};
        nanosleep(&tick, NULL);
    }
}

/* The bytes of the trainer's state during the steps: weights of local (zero 3: the 16-bit
 * share and the gathered slots); f32 gradients of local (zero 2 and 3: of the share, and the
 * window); f32 moments (and master) of the share */
static int64_t state_size(const rc_trainer *t)
{
    int64_t grads = t->zero >= 2 ? t->share_n + t->window_n : t->local_numel;
    int64_t weights = t->zero < 3 ? t->local_numel : (t->wshare ? t->share_n : 0) + t->gathered_numel + t->fshare_n;
    return weights * (int64_t)rc_dtype_size(t->dtype) + grads * (int64_t)sizeof(float) +
           t->share_n * (int64_t)sizeof(float) * (t->master ? 3 : 2);
}

/* Zero 3, before the end of fit gathers the whole weights back into the parameters: what a
 * later fit or evaluation makes again goes first (the compiled steps with their arenas, the
 * gathered slots, the eval predictor, the gradient share and window), so that the whole
 * weights sit beside the shares of the master, moments and 16-bit weights alone. */
static void shrink(rc_trainer *t)
{
    step_free(&t->train);
    step_free(&t->eval);
    step_free(&t->eval_tail);
    rc_predictor_free(t->eval_predictor);
    t->eval_predictor = NULL;
    rc_buffer_free(t->gathered);
    rc_buffer_free(t->grad);
    rc_buffer_free(t->window);
    t->gathered = t->grad = t->window = NULL;
    t->gathered_numel = t->window_n = 0;
}

int rc_trainer_fit(rc_trainer *t, const rc_train_options *o, rc_examples train,
                   const rc_examples *eval, rc_train_result *out, rc_error *err)
{
    if (check_options(t, o, train, err) || rci_deployer_fresh_start(t->d, o->resume, err))
        return -1;
    t->seed = rci_deployer_seed(t->d);
    t->shuffle = o->shuffle;
    t->remat = o->remat;
    if (t->train.st.plan && t->dropout != !o->no_dropout)
        step_free(&t->train); /* an earlier fit's step, recorded with the other dropout setting */
    t->dropout = !o->no_dropout;
    rci_profile_init(&t->prof, t->be, o->profile);
    if (t->train.st.plan) /* compiled by an earlier fit */
        rc_plan_set_timing(t->train.st.plan, o->profile);
    t->shards.overrides = o->shard_overrides;
    t->shards.n_overrides = o->n_shard_overrides;
    if (rc_deployer_agree(t->d, weights_dtype(t, o, err), err))
        return -1;

    if (!t->train.st.plan && !t->m) { /* the loss scale is part of the step: set before the first */
        t->scaling = o->loss_scale > 0 || t->dtype == RC_F16;
        t->scale = o->loss_scale > 0 ? o->loss_scale : t->scaling ? 65536.0 : 1.0;
        t->good_steps = 0;
    }
    t->skipped = 0;
    if (t->mp > 1 && !t->train.st.plan && compile_first(t, o, train, err))
        return -1;
    if (rc_deployer_agree(t->d, moment_buffers(t, o->zero, err), err) ||
        rc_deployer_agree(t->d, master_buffer(t, err), err) ||
        rc_deployer_agree(t->d, frozen_share(t, err), err))
        return -1;
    if (t->zero == 3 && t->train.st.plan && !t->train.gather.np)
        step_free(&t->train); /* compiled for the shards' layout: again, gathering */
    if (rci_deployer_open_workdir(t->d, err) || (o->resume && resume(t, o, err)))
        return -1;
    int64_t total = o->steps > 0 ? o->steps : o->epochs * steps_in_epoch(t, o, train, 0);
    rc_schedule sched = {o->schedule, o->lr, 0.0, o->warmup, total};
    const rc_mesh *m = rc_deployer_mesh(t->d);
    int64_t per_step = (int64_t)o->batch_size * m->dp * (o->grad_accum > 0 ? o->grad_accum : 1);
    int64_t *order = NULL;
    rc_data_split split;
    int order_epoch = -1, rc = 0;
    double loss = NAN, lr = o->lr;
    /* the logging interval so far: its losses averaged, its tokens (or examples) over the
     * time in its steps (evaluations and saves left out) */
    double loss_sum = 0, tokens_sum = 0, step_time = 0;
    int64_t interval_steps = 0;
    int stopped = 0;
    stop_handlers handlers;
    stop_handlers_set(&handlers, o->catch_signals);
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
        test_sleep(t, t->step);
        double t0 = rci_clock_s();
        rci_profile_step(&t->prof);
        rc = train_step(t, o, user_of(t, train), &split, order, lr, &loss, &tokens, &norm, err);
        if (!rc)
            rc = rci_profile_mark(&t->prof, RCI_PROF_UPDATE, err);
        step_time += rci_clock_s() - t0;
        if (rc)
            break;
        rci_profile_done(&t->prof);
        t->step++;
        t->epoch_step++;
        loss_sum += loss;
        tokens_sum += (double)tokens;
        interval_steps++;
        int lm = t->train.per_token, tick = t->step == total || (o->log_every > 0 && t->step % o->log_every == 0);
        double mean = loss_sum / (double)interval_steps, rate = tokens_sum / fmax(step_time, 1e-9);
        if (tick && o->log_every > 0) {
            /* the epoch with its fraction done: 1.5 is half-way through the second */
            double epoch = t->epoch + (double)t->epoch_step / (double)(in_epoch > 0 ? in_epoch : 1);
            const char *keys[6] = {"train/loss", "train/lr", "train/grad_norm",
                                   lm ? "train/tokens_per_s" : "train/examples_per_s", "train/epoch",
                                   "train/loss_scale"};
            double vals[6] = {mean, lr, norm, rate, epoch, t->scale};
            rc = rci_deployer_log(t->d, t->step, keys, vals, t->scaling ? 6 : 5, err);
        }
        rci_deployer_progress(t->d, t->step, total, mean, lr, rate, lm ? "tok/s" : "ex/s", tick);
        if (!rc && o->eval_every > 0 && t->step % o->eval_every == 0 && t->step < total)
            rc = evaluate_and_log(t, o, eval, err);
        if (!rc && o->save_every > 0 && t->step % o->save_every == 0 && t->step < total)
            rc = save(t, o, NULL, err);
        if (tick) { /* a new interval */
            loss_sum = tokens_sum = step_time = 0;
            interval_steps = 0;
        }
        if (!rc && o->catch_signals && t->step < total && !(rc = stop_agreed(t, &stopped, err)) && stopped)
            break;
    }
    free(order);
    if (stopped)
        test_stop_wait();
    if (!rc)
        rc = rci_profile_report(&t->prof, t->d, t->step, err);
    if (!rc && !stopped)
        rc = evaluate_and_log(t, o, eval, err);
    if (!rc)
        rc = save(t, o, NULL, err);
    rci_ckpt_state state = ckpt_state(t);
    int final = !rc && !stopped;
    if (final)
        rc = rci_ckpt_save_final(&state, o, err);
    rci_nn_weights *w = rci_params_weights(t->params);
    int64_t held = w && w->buf ? w->numel * (int64_t)rc_dtype_size(w->dtype) : 0;
    int64_t state_bytes = state_size(t);
    if (t->zero == 3)
        shrink(t);
    if (!rc)
        rc = rci_ckpt_gather_params(&state, t->params, final, err);
    if (!rc && t->zero == 3)
        rc = frozen_back(t, err);
    rci_params_touch(t->params); /* updated in place, or gathered from the shards */
    if (!rc) /* the last update done before fit returns, on a device that queues work */
        rc = rc_backend_wait(t->be, err);
    if (out) {
        out->state_bytes = state_bytes;
        out->loss_scale = t->scale;
        out->skipped_steps = t->skipped;
        out->full_weight_bytes = t->mp > 1 ? held : 0;
        out->step = t->step;
        out->loss = loss;
        out->eval_loss = t->eval_loss;
        out->eval_tokens = t->eval_tokens;
        out->lr = lr;
        out->stop_signal = stopped;
    }
    stop_handlers_restore(&handlers);
    if (!rc && stopped) {
        const char *dir = rci_deployer_workdir(t->d);
        if (dir)
            return rc_error_set(err, RC_ERR_INTERRUPTED, "stopped by %s at step %lld; checkpoint written to %s/checkpoint-%lld",
                                stopped == SIGINT ? "SIGINT" : stopped == SIGTERM ? "SIGTERM" : "a signal",
                                (long long)t->step, dir, (long long)t->step);
        return rc_error_set(err, RC_ERR_INTERRUPTED, "stopped by %s at step %lld (no workdir: no checkpoint)",
                            stopped == SIGINT ? "SIGINT" : stopped == SIGTERM ? "SIGTERM" : "a signal",
                            (long long)t->step);
    }
    return rc;
}
