/* ddpg.c - deep deterministic policy gradient (DDPG, Lillicrap et al. 2016) on Pendulum-v1,
 * written as the three functions.
 *
 * An actor mu(s) = 2 tanh(MLP(s)) picks the torque, a critic Q(s, a) = MLP([s, a / 2])
 * scores it (MLPs 3 - 64 - 64 - 1 and 4 - 64 - 64 - 1, relu; user parameters, rc_params,
 * one optimizer for both). Every trainer step:
 *   - collate side: each environment of this data-parallel rank (redco/env.h's Pendulum-v1:
 *     Gymnasium's dynamics, reward and 200-step time limit; seeded from (--seed, rank, env,
 *     episode)) takes one step with mu(s) plus Gaussian exploration noise, acting with the
 *     predict function on the rank's own device, into the rank's replay buffer. The target
 *     networks (a second rc_params, the same names) move towards the trained ones,
 *     target = tau online + (1 - tau) target. A minibatch is drawn from the replay buffer and
 *     its targets y = r + gamma (1 - terminated) Q'(s', mu'(s')) computed with the target
 *     networks (a plan of their own on the device);
 *   - loss: critic_weight mean (Q(s, a) - y)^2 - mean Q(s, mu(s)), where the second term's
 *     critic reads its weights through rc_stop_gradient: the actor's loss goes through the
 *     critic, but only the actor learns from it, and only the critic from the first;
 *   - predict: the actor's torque mu(s), [B, 1].
 * Before training, --warmup steps of uniformly random torques fill the replay buffer. The
 * trainer runs one fit of --steps steps, its examples only numbering the draws (collate
 * reads the step from them); the gradients are averaged over the ranks.
 *
 * Printed: the mean return of a uniformly random policy, the mean return of the training
 * episodes as they end (all environments of all ranks), and at the end the trained actor's
 * mean return without noise (both over 10 episodes per environment of every rank). With
 * --workdir, log.jsonl also gets ddpg/mean_return as the training episodes end.
 *
 * --check (one process) takes one actor-only SGD step (the loss without its critic term)
 * from the same weights twice, with the stop-gradient and without it, and prints how far
 * each moved the critic's and the actor's weights: with it the critic stays exactly where
 * it was.
 *
 *   build/ddpg [--steps 10000] [--envs 1] [--batch 64] [--lr 1e-3] [--gamma 0.99]
 *              [--tau 0.005] [--critic-weight 1] [--noise 0.2] [--warmup 1000] [--buffer 20000]
 *              [--seed S] [--device cpu|opencl] [--workdir DIR] [--check]
 *   mpiexec -n 2 build/ddpg ...        (each rank its own environments and replay buffer)
 */
#include "redco/env.h"
#include "redco/pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NW = 12, HIDDEN = 64, OBS = 3, EVAL_ROUNDS = 10 };

static const char *const weight_names[NW] = {"actor.w1",  "actor.b1",  "actor.w2",  "actor.b2",
                                             "actor.w3",  "actor.b3",  "critic.w1", "critic.b1",
                                             "critic.w2", "critic.b2", "critic.w3", "critic.b3"};

typedef struct {
    int envs, batch, warmup;
    int64_t buffer;
    double gamma, tau, noise, critic_weight;
    uint64_t seed;
} ddpg_config;

/* A plan of one of the networks' functions over a fixed batch: acting (predict on the
 * trained weights) or the targets (on the target weights). */
typedef struct {
    rc_graph *g;
    rc_plan *plan;
    rc_tensor *out;
    rc_batch in;
} net_plan;

/* The state of one rank. */
typedef struct {
    ddpg_config c;
    double high;                  /* the torque bound */
    int max_steps;                /* the time limit */
    rc_params *params, *target;
    rc_deployer *dep;
    const rc_mesh *mesh;
    int actor_only;               /* --check: the loss without its critic term ... */
    int no_stop;                  /* ... and the critic's weights without the stop-gradient */
    /* environments */
    rc_env **env;
    float *obs;                   /* [envs, OBS] */
    double *ep_return;
    int64_t *episode;
    rc_rng rng;                   /* noise and draws */
    double ret_sum, ret_count;    /* episodes ended since the last report */
    int reports;
    double last_return;
    /* the replay buffer (a ring of `buffer` transitions) */
    float *b_obs, *b_next, *b_act, *b_reward;
    unsigned char *b_term;
    int64_t size, head;
    int t;                        /* steps of the running episodes (all envs in step) */
    /* the target networks' values on the host, and the trained ones' */
    float *target_host, *online_host;
    int64_t step;                 /* the trainer step collate served last */
    int64_t steps;                /* the steps of the fit (count_train) */
    net_plan act, tgt;
    int failed;
    rc_error err;
} ddpg;

/* ---- the networks ------------------------------------------------------------------------ */

/* relu(relu(x w1 + b1) w2 + b2) w3 + b3: x [B, in] -> [B, 1], weights w[0..5] */
static rc_tensor *mlp(rc_graph *g, rc_tensor *const *w, rc_tensor *x)
{
    rc_tensor *h = rc_relu(g, rc_add(g, rc_matmul(g, x, w[0], 0, 0), w[1]));
    h = rc_relu(g, rc_add(g, rc_matmul(g, h, w[2], 0, 0), w[3]));
    return rc_add(g, rc_matmul(g, h, w[4], 0, 0), w[5]);
}

static void weights_get(rc_graph *g, rc_params *p, rc_tensor *w[NW])
{
    for (int i = 0; i < NW; i++)
        w[i] = rc_params_get(g, p, weight_names[i]);
}

/* mu(s) = high tanh(MLP(s)): obs [B, OBS] -> [B, 1] */
static rc_tensor *actor(rc_graph *g, rc_tensor *const w[NW], rc_tensor *obs, double high)
{
    return rc_scale(g, rc_tanh(g, mlp(g, w, obs)), high);
}

/* Q(s, a) = MLP([s, a / high]): obs [B, OBS], act [B, 1] -> [B] */
static rc_tensor *critic(rc_graph *g, rc_tensor *const w[NW], rc_tensor *obs, rc_tensor *act, double high)
{
    rc_tensor *parts[2] = {obs, rc_scale(g, act, 1.0 / high)};
    rc_tensor *q = mlp(g, w + 6, rc_concat(g, parts, 2, 1));
    return q ? rc_reshape(g, q, 1, q->shape) : NULL;
}

/* ---- the three functions ----------------------------------------------------------------- */

static int explore(ddpg *d, int random);
static int soft_update(ddpg *d);
static int targets(ddpg *d, const int64_t *rows, int n, float *y);

/* collate: one step of every environment into the replay buffer, the target networks'
 * soft update, then n transitions drawn from the buffer: obs [n, OBS], act [n, 1] and their
 * targets y [n]. Without shuffling, the trainer's indices at step s start at s B dp. */
static int collate(rc_batch *out, const int64_t *examples, int n, void *user, rc_error *err)
{
    ddpg *d = user;
    int64_t step = examples[0] / ((int64_t)d->c.batch * d->mesh->dp);
    if (!d->failed && step != d->step) { /* a new trainer step (not a second call for one) */
        d->step = step;
        d->failed = explore(d, 0) || soft_update(d);
    }
    if (d->failed) /* acting failed: its reason */
        return rc_error_set(err, d->err.code ? d->err.code : RC_ERR_ARG, "%s", d->err.msg);
    float *obs = rc_batch_add(out, "obs", RC_F32, 2, (int64_t[]){n, OBS});
    float *act = rc_batch_add(out, "act", RC_F32, 2, (int64_t[]){n, 1});
    float *y = rc_batch_add(out, "y", RC_F32, 1, (int64_t[]){n});
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)n);
    if (!obs || !act || !y || !rows) {
        free(rows);
        return rc_error_set(err, RC_ERR_MEMORY, "no room for %d transitions", n);
    }
    for (int i = 0; i < n; i++) {
        int64_t row = rows[i] = (int64_t)(rc_rng_uniform(&d->rng) * (double)d->size);
        memcpy(obs + i * OBS, d->b_obs + row * OBS, sizeof(float) * OBS);
        act[i] = d->b_act[row];
    }
    int rc = targets(d, rows, n, y);
    free(rows);
    return rc ? rc_error_set(err, d->err.code ? d->err.code : RC_ERR_ARG, "%s", d->err.msg) : 0;
}

/* loss: critic_weight times the critic's error, plus the actor's -mean Q(s, mu(s)) through
 * the critic with its weights held (rc_stop_gradient) */
static rc_tensor *loss(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    ddpg *d = user;
    (void)rng, (void)err;
    rc_tensor *w[NW], *held[NW], *obs = rc_batch_input(g, b, "obs");
    weights_get(g, params, w);
    for (int i = 0; i < NW; i++)
        held[i] = i < 6 || d->no_stop ? w[i] : rc_stop_gradient(g, w[i]);
    rc_tensor *actor_loss = rc_neg(g, rc_mean_all(g, critic(g, held, obs, actor(g, w, obs, d->high), d->high)));
    if (d->actor_only)
        return actor_loss;
    rc_tensor *td = rc_sub(g, critic(g, w, obs, rc_batch_input(g, b, "act"), d->high), rc_batch_input(g, b, "y"));
    return rc_add(g, rc_scale(g, rc_mean_all(g, rc_mul(g, td, td)), d->c.critic_weight), actor_loss);
}

/* predict: the actor's torque, [B, 1] */
static rc_tensor *predict(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    ddpg *d = user;
    (void)rng, (void)err;
    rc_tensor *w[NW];
    weights_get(g, params, w);
    return actor(g, w, rc_batch_input(g, b, "obs"), d->high);
}

/* the target networks' Q'(s', mu'(s')) of next [B, OBS], [B] */
static rc_tensor *target_value(rc_graph *g, rc_params *target, const rc_batch *b, double high)
{
    rc_tensor *w[NW], *next = rc_batch_input(g, b, "obs");
    weights_get(g, target, w);
    return critic(g, w, next, actor(g, w, next, high), high);
}

/* ---- plans on this rank's device ---------------------------------------------------------- */

/* Plans predict (is_target 0, the trained weights) or target_value (1) for rows x OBS
 * observations; the weight leaves read the parameters' buffers, updated in place. */
static int net_plan_make(ddpg *d, net_plan *p, int rows, int is_target)
{
    if (p->plan)
        return 0;
    if (!rc_batch_add(&p->in, "obs", RC_F32, 2, (int64_t[]){rows, OBS}))
        return rc_error_set(&d->err, RC_ERR_MEMORY, "ddpg: out of memory");
    p->g = rc_graph_new();
    p->out = is_target ? target_value(p->g, d->target, &p->in, d->high)
                       : predict(p->g, d->params, &p->in, rc_rng_new(d->c.seed), d, &d->err);
    if (rc_graph_error(p->g))
        return rc_error_set(&d->err, RC_ERR_ARG, "ddpg: %s", rc_graph_error(p->g));
    p->plan = rc_plan_new_on(rc_deployer_backend(d->dep), p->g, &p->out, 1, &d->err);
    return p->plan ? 0 : -1;
}

/* out = the plan's function of obs [rows, OBS] */
static int net_plan_run(ddpg *d, net_plan *p, const float *obs, float *out)
{
    memcpy(p->in.a[0].data, obs, (size_t)rc_tensor_numel(p->out) * OBS * sizeof(float));
    return rc_batch_feed(&p->in, p->plan, &d->err) || rc_plan_run(p->plan, &d->err) ||
                   rc_plan_read(p->plan, p->out, out, &d->err)
               ? -1
               : 0;
}

static void net_plan_free(net_plan *p)
{
    rc_plan_free(p->plan);
    rc_graph_free(p->g);
    rc_batch_free(&p->in);
}

/* ---- the collate side: environments, replay buffer, target networks ----------------------- */

/* Starts env e's next episode, seeded from (seed, rank, env, episode). */
static int env_reset(ddpg *d, int e)
{
    rc_rng r = rc_rng_fold(rc_rng_fold(rc_rng_new(d->c.seed), (uint64_t)d->mesh->dp_rank), (uint64_t)e);
    r = rc_rng_fold(r, (uint64_t)d->episode[e]++);
    d->ep_return[e] = 0;
    return rc_env_reset(d->env[e], rc_rng_next_u64(&r), d->obs + (int64_t)e * OBS);
}

/* The mean return of the episodes that ended since the last report, over all ranks
 * (collective); the previous report's when none did. */
static int report_return(ddpg *d, double *mean)
{
    double s[2] = {d->ret_sum, d->ret_count};
    if (rc_comm_allreduce_sum_f64(d->mesh->dp_comm, s, 2, &d->err))
        return -1;
    d->ret_sum = d->ret_count = 0;
    if (s[1] > 0)
        d->last_return = s[0] / s[1];
    *mean = d->last_return;
    return 0;
}

/* One step of every environment: uniformly random torques (random 1), or mu(s) plus noise
 * N(0, noise^2) clipped to the bounds (random 0) or mu(s) alone (random 2). Transitions go
 * into the replay buffer (random 0, 1). When the episodes end (Pendulum's all end together,
 * at the time limit) they start again, and in training their mean return is reported. */
static int explore(ddpg *d, int random)
{
    int N = d->c.envs;
    float *mu = malloc(sizeof(float) * (size_t)N);
    int rc = mu ? 0 : rc_error_set(&d->err, RC_ERR_MEMORY, "ddpg: out of memory");
    if (!rc && random != 1)
        rc = net_plan_make(d, &d->act, N, 0) || net_plan_run(d, &d->act, d->obs, mu);
    for (int e = 0; !rc && e < N; e++) {
        float a, *s = d->obs + e * OBS;
        if (random == 1)
            a = (float)(d->high * (2 * rc_rng_uniform(&d->rng) - 1));
        else
            a = (float)fmax(-d->high, fmin(d->high, mu[e] + (random ? 0 : d->c.noise * rc_rng_normal(&d->rng))));
        int64_t at = d->head;
        double reward = 0;
        int term = 0, trunc = 0;
        if (random != 2) {
            memcpy(d->b_obs + at * OBS, s, sizeof(float) * OBS);
            d->b_act[at] = a;
        }
        rc = rc_env_step(d->env[e], &a, s, &reward, &term, &trunc, &d->err);
        d->ep_return[e] += reward;
        if (!rc && random != 2) {
            memcpy(d->b_next + at * OBS, s, sizeof(float) * OBS);
            d->b_reward[at] = (float)reward;
            d->b_term[at] = (unsigned char)term;
            d->head = (at + 1) % d->c.buffer;
            d->size += d->size < d->c.buffer;
        }
        if (!rc && (term || trunc)) {
            d->ret_sum += d->ep_return[e], d->ret_count++;
            rc = env_reset(d, e);
        }
    }
    free(mu);
    /* Pendulum's episodes all end at the time limit: a round of them ends on every rank at
     * the same step, failed or not, for the collective report */
    int ended = ++d->t == d->max_steps;
    d->t = ended ? 0 : d->t;
    if (!ended || random)
        return rc;
    double mean;
    if (report_return(d, &mean) || rc)
        return -1;
    const char *key = "ddpg/mean_return";
    d->reports++;
    if (rc_deployer_is_main(d->dep))
        printf("step %lld: episodes %d: mean return %.1f\n", (long long)d->step + 1, d->reports, mean);
    return rc_deployer_log(d->dep, d->step + 1, &key, &mean, 1, &d->err);
}

/* target = tau online + (1 - tau) target, on the host, written to the target's buffer */
static int soft_update(ddpg *d)
{
    if (rc_params_read_all(d->params, d->online_host, &d->err))
        return -1;
    int64_t numel = rc_params_numel(d->params), at = 0;
    for (int64_t i = 0; i < numel; i++)
        d->target_host[i] = (float)(d->c.tau * d->online_host[i] + (1 - d->c.tau) * d->target_host[i]);
    for (int i = 0; i < NW; i++) {
        if (rc_params_write(d->target, i, d->target_host + at, &d->err))
            return -1;
        at += rc_params_tensor_numel(d->params, i);
    }
    return 0;
}

/* y[i] = r + gamma (1 - terminated) Q'(s', mu'(s')) of replay rows[i] */
static int targets(ddpg *d, const int64_t *rows, int n, float *y)
{
    float *next = malloc(sizeof(float) * (size_t)n * OBS);
    int rc = next ? net_plan_make(d, &d->tgt, n, 1) : rc_error_set(&d->err, RC_ERR_MEMORY, "ddpg: out of memory");
    for (int i = 0; !rc && i < n; i++)
        memcpy(next + i * OBS, d->b_next + rows[i] * OBS, sizeof(float) * OBS);
    if (!rc)
        rc = net_plan_run(d, &d->tgt, next, y);
    for (int i = 0; !rc && i < n; i++)
        y[i] = (float)(d->b_reward[rows[i]] + d->c.gamma * (1 - d->b_term[rows[i]]) * y[i]);
    free(next);
    return rc;
}

/* `rounds` whole episodes per environment of every rank with uniformly random torques
 * (random 1) or the actor without noise (2); the mean return over all of them. */
static int evaluate(ddpg *d, int random, int rounds, double *mean)
{
    int rc = 0;
    for (int e = 0; !rc && e < d->c.envs; e++)
        rc = env_reset(d, e);
    d->t = 0;
    double keep_sum = d->ret_sum, keep_count = d->ret_count;
    d->ret_sum = d->ret_count = 0;
    d->last_return = NAN;
    int64_t until = d->episode[0] + rounds;
    while (!rc && d->episode[0] < until) /* until the episodes end (and restart) `rounds` times */
        rc = explore(d, random);
    rc = rc_deployer_agree(d->dep, rc, &d->err) || report_return(d, mean);
    d->ret_sum = keep_sum, d->ret_count = keep_count;
    return rc;
}

/* ---- setup ------------------------------------------------------------------------------ */

/* actor and critic: matrices N(0, 1 / fan in) (the last layers 0.01 / fan in), biases zero;
 * the critic's first layer takes OBS + 1 inputs */
static rc_params *ddpg_params(uint64_t seed)
{
    rc_params *p = rc_params_new();
    int64_t H = HIDDEN, shapes[6][2] = {{OBS, H}, {H, 0}, {H, H}, {H, 0}, {H, 1}, {1, 0}};
    for (int i = 0; p && i < NW; i++) {
        int k = i % 6, matrix = shapes[k][1] != 0;
        shapes[0][0] = i < 6 ? OBS : OBS + 1;
        rc_init init = {.kind = RC_INIT_ZEROS};
        if (matrix)
            init = (rc_init){.kind = RC_INIT_NORMAL, .std = (k == 4 ? 0.01 : 1.0) / sqrt((double)shapes[k][0])};
        if (rc_params_add_init(p, weight_names[i], matrix ? 2 : 1, shapes[k], &init)) {
            rc_params_free(p);
            return NULL;
        }
    }
    if (p && rc_params_init_normal(p, 1.0, seed)) {
        rc_params_free(p);
        return NULL;
    }
    return p;
}

static int ddpg_init(ddpg *d, const ddpg_config *c, rc_deployer *dep, rc_error *err)
{
    memset(d, 0, sizeof *d);
    d->c = *c;
    d->dep = dep;
    d->mesh = rc_deployer_mesh(dep);
    d->step = -1;
    d->last_return = NAN;
    d->rng = rc_rng_fold(rc_rng_fold(rc_rng_new(c->seed), 0xDD9), (uint64_t)d->mesh->dp_rank);
    int N = c->envs;
    int64_t C = c->buffer;
    d->env = calloc((size_t)N, sizeof *d->env);
    for (int e = 0; d->env && e < N; e++)
        if (!(d->env[e] = rc_env_new("Pendulum-v1", err)))
            return -1;
    if (!d->env || rc_env_obs_dim(d->env[0]) != OBS || rc_env_action_dim(d->env[0]) != 1)
        return d->env ? rc_error_set(err, RC_ERR_ARG, "ddpg: Pendulum-v1 is not 3 observations and 1 action")
                      : rc_error_set(err, RC_ERR_MEMORY, "ddpg: out of memory");
    d->high = rc_env_action_high(d->env[0]);
    d->max_steps = rc_env_max_steps(d->env[0]);
    d->obs = malloc(sizeof(float) * (size_t)N * OBS);
    d->ep_return = calloc((size_t)N, sizeof(double));
    d->episode = calloc((size_t)N, sizeof(int64_t));
    d->b_obs = malloc(sizeof(float) * (size_t)C * OBS), d->b_next = malloc(sizeof(float) * (size_t)C * OBS);
    d->b_act = malloc(sizeof(float) * (size_t)C), d->b_reward = malloc(sizeof(float) * (size_t)C);
    d->b_term = malloc((size_t)C);
    d->params = ddpg_params(c->seed);
    d->target = ddpg_params(c->seed); /* the same draws: the targets start as the networks */
    int64_t numel = d->params ? rc_params_numel(d->params) : 0;
    d->target_host = malloc(sizeof(float) * (size_t)numel), d->online_host = malloc(sizeof(float) * (size_t)numel);
    if (!d->obs || !d->ep_return || !d->episode || !d->b_obs || !d->b_next || !d->b_act || !d->b_reward ||
        !d->b_term || !d->params || !d->target || !d->target_host || !d->online_host)
        return rc_error_set(err, RC_ERR_MEMORY, "ddpg: out of memory");
    if (rc_params_read_all(d->target, d->target_host, err) ||
        rc_params_to(d->target, rc_deployer_backend(dep), err))
        return -1;
    for (int e = 0; e < N; e++)
        if (env_reset(d, e))
            return rc_error_set(err, RC_ERR_ARG, "ddpg: cannot reset Pendulum-v1");
    return 0;
}

static void ddpg_free(ddpg *d)
{
    for (int e = 0; d->env && e < d->c.envs; e++)
        rc_env_free(d->env[e]);
    free(d->env), free(d->obs), free(d->ep_return), free(d->episode);
    free(d->b_obs), free(d->b_next), free(d->b_act), free(d->b_reward), free(d->b_term);
    free(d->target_host), free(d->online_host);
    net_plan_free(&d->act);
    net_plan_free(&d->tgt);
    rc_params_free(d->params);
    rc_params_free(d->target);
}

/* count: the indices only number the draws; one epoch of all the fit's steps */
static int64_t count_train(int epoch, void *user)
{
    ddpg *d = user;
    (void)epoch;
    return d->steps * d->c.batch * d->mesh->dp;
}

/* ---- the stop-gradient check ------------------------------------------------------------- */

/* The largest |change| of the actor's (part 0) and the critic's (part 1) weights from before */
static void weight_change(rc_params *p, const float *before, double change[2])
{
    int64_t numel = rc_params_numel(p), at = 0;
    float *now = malloc(sizeof(float) * (size_t)numel);
    rc_error err = {0};
    change[0] = change[1] = NAN;
    if (!now || rc_params_read_all(p, now, &err)) {
        free(now);
        return;
    }
    change[0] = change[1] = 0;
    for (int i = 0; i < NW; i++)
        for (int64_t j = 0; j < rc_params_tensor_numel(p, i); j++, at++)
            change[i >= 6] = fmax(change[i >= 6], fabs((double)now[at] - before[at]));
    free(now);
}

/* One actor-only SGD step, with (no_stop 0) or without (1) the stop-gradient, from the
 * warmed-up replay buffer of d; the weights' largest changes in change[2]. */
static int actor_step(ddpg *d, int no_stop, double change[2], rc_error *err)
{
    int64_t numel = rc_params_numel(d->params);
    float *before = malloc(sizeof(float) * (size_t)numel);
    rc_params *keep = d->params;
    d->params = ddpg_params(d->c.seed + 1);
    d->actor_only = 1, d->no_stop = no_stop;
    rc_trainer *t = d->params && before ? rc_trainer_new(d->dep, collate, loss, d, d->params, NULL, err) : NULL;
    int rc = !t || rc_params_read_all(d->params, before, err);
    net_plan_free(&d->act), net_plan_free(&d->tgt); /* (made for other weights) */
    memset(&d->act, 0, sizeof d->act), memset(&d->tgt, 0, sizeof d->tgt);
    rc_train_options o = {.steps = 1, .batch_size = d->c.batch, .optimizer = "sgd", .lr = 0.1};
    d->step = 0, d->steps = 1; /* (step 0 served: no environment step, the same draws twice) */
    rc_rng keep_rng = d->rng;
    if (!rc)
        rc = rc_trainer_fit(t, &o, (rc_examples){count_train, d}, NULL, NULL, err);
    if (!rc)
        weight_change(d->params, before, change);
    rc_trainer_free(t);
    rc_params_free(d->params);
    net_plan_free(&d->act), net_plan_free(&d->tgt);
    memset(&d->act, 0, sizeof d->act), memset(&d->tgt, 0, sizeof d->tgt);
    d->params = keep;
    d->rng = keep_rng;
    d->actor_only = d->no_stop = 0;
    free(before);
    return rc ? -1 : 0;
}

/* ---- main ------------------------------------------------------------------------------- */


typedef struct {
    ddpg_config c;
    int64_t steps;
    double lr;
    int check;
    const char *device, *workdir;
} args;

static int parse_args(int argc, char **argv, args *a)
{
    *a = (args){{.envs = 1, .batch = 64, .warmup = 1000, .buffer = 20000, .gamma = 0.99, .tau = 0.005,
                 .noise = 0.2, .critic_weight = 1.0, .seed = 1},
                10000, 1e-3, 0, NULL, NULL};
    int ok = 1;
    for (int i = 1; ok && i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "--check")) a->check = 1, i--;
        else if (!v) ok = 0;
        else if (!strcmp(k, "--steps")) a->steps = atoll(v);
        else if (!strcmp(k, "--envs")) a->c.envs = atoi(v);
        else if (!strcmp(k, "--batch")) a->c.batch = atoi(v);
        else if (!strcmp(k, "--lr")) a->lr = atof(v);
        else if (!strcmp(k, "--gamma")) a->c.gamma = atof(v);
        else if (!strcmp(k, "--tau")) a->c.tau = atof(v);
        else if (!strcmp(k, "--critic-weight")) a->c.critic_weight = atof(v);
        else if (!strcmp(k, "--noise")) a->c.noise = atof(v);
        else if (!strcmp(k, "--warmup")) a->c.warmup = atoi(v);
        else if (!strcmp(k, "--buffer")) a->c.buffer = atoll(v);
        else if (!strcmp(k, "--seed")) a->c.seed = (uint64_t)atoll(v);
        else if (!strcmp(k, "--device")) a->device = v;
        else if (!strcmp(k, "--workdir")) a->workdir = v;
        else ok = 0;
    }
    if (!ok || a->steps < 1 || a->c.envs < 1 || a->c.batch < 1 || a->c.buffer < 1 ||
        (int64_t)a->c.warmup * a->c.envs < a->c.batch) {
        fprintf(stderr, "usage: ddpg [--steps N] [--envs E] [--batch B] [--lr LR] [--gamma G] [--tau T]\n"
                        "            [--critic-weight C] [--noise SIGMA] [--warmup STEPS] [--buffer N] [--seed S]\n"
                        "            [--device cpu|opencl] [--workdir DIR] [--check]\n"
                        "       (the warmup's transitions, warmup x envs, must fill a batch)\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    args a;
    if (parse_args(argc, argv, &a))
        return 2;
    rc_error err = {0};
    ddpg d = {0};
    rc_deployer_options o = {.seed = a.c.seed, .workdir = a.workdir, .device = a.device};
    rc_deployer *dep = rc_deployer_new(&argc, &argv, &o, &err);
    int rc = dep ? ddpg_init(&d, &a.c, dep, &err) : -1;
    rc_trainer *t = rc ? NULL : rc_trainer_new(dep, collate, loss, &d, d.params, NULL, &err);
    if (!t) {
        fprintf(stderr, "ddpg: %s\n", err.msg);
        return 1;
    }
    int main_rank = rc_deployer_is_main(dep), dp = rc_deployer_mesh(dep)->dp;
    double random_return = 0, final_return = 0;
    if (main_rank)
        printf("Pendulum-v1 on %d rank(s) (%s) x %d envs; batch %d per rank, replay %lld per rank, tau %g; "
               "actor-critic MLPs (%lld parameters)\n",
               dp, rc_backend_name(rc_deployer_backend(dep)), a.c.envs, a.c.batch, (long long)a.c.buffer,
               a.c.tau, (long long)rc_params_numel(d.params));
    if (a.check && dp > 1)
        rc = rc_error_set(&err, RC_ERR_ARG, "--check runs in one process");
    if (!rc)
        rc = evaluate(&d, 1, EVAL_ROUNDS, &random_return);
    if (!rc && main_rank)
        printf("random policy: mean episode return %.1f\n", random_return);
    for (int s = 0; !rc && s < a.c.warmup; s++)
        rc = explore(&d, 1);
    if (!rc && a.check) {
        double with[2], without[2];
        rc = actor_step(&d, 0, with, &err) || actor_step(&d, 1, without, &err);
        if (!rc)
            printf("actor-only step with the stop-gradient: critic weights changed by %.3g, actor weights by %.3g; "
                   "without it: critic by %.3g, actor by %.3g\n",
                   with[1], with[0], without[1], without[0]);
    } else if (!rc) {
        rc_train_options to = {.steps = a.steps, .batch_size = a.c.batch, .optimizer = "adamw", .lr = a.lr,
                               .schedule = RC_SCHEDULE_CONSTANT};
        d.steps = a.steps;
        rc = rc_trainer_fit(t, &to, (rc_examples){count_train, &d}, NULL, NULL, &err);
        if (!rc)
            rc = evaluate(&d, 2, EVAL_ROUNDS, &final_return);
        if (!rc && main_rank)
            printf("trained policy (no noise): mean episode return %.1f over %lld episodes (random policy %.1f)\n",
                   final_return, (long long)a.c.envs * dp * EVAL_ROUNDS, random_return);
    }
    if (rc)
        fprintf(stderr, "ddpg: %s\n", d.failed ? d.err.msg : err.msg[0] ? err.msg : d.err.msg);
    rc_trainer_free(t);
    ddpg_free(&d);
    rc_deployer_free(dep);
    return rc ? 1 : 0;
}
