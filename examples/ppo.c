/* ppo.c - proximal policy optimisation (PPO, Schulman et al. 2017) on CartPole-v1, written
 * as the three functions.
 *
 * An iteration collects a rollout with the current policy, then takes K epochs of
 * minibatch steps on it:
 *   - collate side: the environments. Each data-parallel rank steps its own --envs copies
 *     of CartPole-v1 (redco/env.h: Gymnasium's dynamics, reward, termination and time
 *     limit), seeded from (--seed, rank, env, episode), for --horizon steps each, acting
 *     with the predict function on its own device. It keeps the transitions, the policy's
 *     log-probabilities and values, and computes the advantages by GAE(lambda) (a time
 *     limit bootstraps from the value of the last observation; a termination does not),
 *     normalised over the rank's rollout. collate hands out minibatches of it.
 *   - loss: the clipped surrogate -min(r A, clip(r, 1 - eps, 1 + eps) A) with the ratio
 *     r = pi(a|s) / pi_old(a|s), plus vf_coef times the value error (V(s) - return)^2,
 *     minus ent_coef times the policy's entropy. Actor and critic are separate MLPs
 *     (obs - 64 - 64 - actions and obs - 64 - 64 - 1, tanh), parameters of the user's own
 *     (rc_params), one optimizer for both.
 *   - predict: the actor's logits and the critic's value, [B, actions + 1].
 * The trainer runs one fit: an epoch is one pass over the rollouts of all ranks, and every
 * K-th epoch count(epoch) collects a new rollout first (the trainer asks count(epoch)
 * before it collates an epoch, with the weights of every step before it), as maml.c draws
 * new tasks per epoch. The trainer does not shuffle; a rank's minibatches are its own
 * rollout in an order drawn per epoch, and the gradients are averaged over the ranks.
 *
 * Printed: the mean episode return of a uniformly random policy, the mean return of the
 * episodes that ended in each iteration's rollouts (all ranks), and at the end the mean
 * return of the trained policy (greedy, one episode per environment of every rank).
 * With --workdir, log.jsonl also gets ppo/mean_return per iteration.
 *
 *   build/ppo [--iterations 40] [--envs 8] [--horizon 64] [--epochs 4] [--batch 64]
 *             [--lr 1e-3] [--gamma 0.99] [--lambda 0.95] [--clip 0.2] [--vf-coef 0.5]
 *             [--ent-coef 0.01] [--seed S] [--device cpu|opencl] [--workdir DIR]
 *   mpiexec -n 2 build/ppo ...        (each rank its own environments and rollout)
 */
#include "redco/env.h"
#include "redco/pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NW = 12, HIDDEN = 64 };

static const char *const weight_names[NW] = {"actor.w1",  "actor.b1",  "actor.w2",  "actor.b2",
                                             "actor.w3",  "actor.b3",  "critic.w1", "critic.b1",
                                             "critic.w2", "critic.b2", "critic.w3", "critic.b3"};

typedef struct {
    int envs, horizon, epochs, batch;
    double gamma, lambda, clip, vf_coef, ent_coef;
    uint64_t seed;
} ppo_config;

/* The state of one rank: its environments, its rollout and the plan it acts with. */
typedef struct {
    ppo_config c;
    int obs_dim, n_actions;
    rc_params *params;
    rc_deployer *dep;
    const rc_mesh *mesh;
    /* environments */
    rc_env **env;
    float *obs;                   /* [envs, obs_dim] the current observations */
    double *ep_return;            /* [envs] return of the running episode */
    int64_t *episode;             /* [envs] episodes begun (the reset seeds) */
    rc_rng rng;                   /* action draws */
    double ret_sum, ret_count;    /* episodes ended since the last report */
    /* the rollout: T = envs x horizon transitions, row t * envs + e */
    float *r_obs, *r_logp, *r_value, *r_reward, *r_adv, *r_ret;
    int32_t *r_act;
    unsigned char *r_done;
    int64_t *perm;                /* [T] the order of this epoch's minibatches */
    int epoch;                    /* the epoch collate serves */
    int iteration;                /* rollouts collected */
    double last_return;           /* the last iteration's mean episode return */
    /* acting: the predict function on [envs, obs_dim] observations */
    rc_graph *act_graph;
    rc_plan *act_plan;
    rc_tensor *act_out;
    rc_batch act_batch;
    int failed;                   /* a rollout failed: collate reports err */
    rc_error err;
} ppo;

/* ---- the networks ------------------------------------------------------------------------ */

/* tanh(tanh(x w1 + b1) w2 + b2) w3 + b3: x [B, in] -> [B, out], weights w[0..5] */
static rc_tensor *mlp(rc_graph *g, rc_tensor *const *w, rc_tensor *x)
{
    rc_tensor *h = rc_tanh(g, rc_add(g, rc_matmul(g, x, w[0], 0, 0), w[1]));
    h = rc_tanh(g, rc_add(g, rc_matmul(g, h, w[2], 0, 0), w[3]));
    return rc_add(g, rc_matmul(g, h, w[4], 0, 0), w[5]);
}

/* logits [B, A] and value [B] of observations [B, obs_dim] */
static void actor_critic(rc_graph *g, rc_params *params, rc_tensor *obs, rc_tensor **logits, rc_tensor **value)
{
    rc_tensor *w[NW];
    for (int i = 0; i < NW; i++)
        w[i] = rc_params_get(g, params, weight_names[i]);
    *logits = mlp(g, w, obs);
    rc_tensor *v = mlp(g, w + 6, obs);
    *value = v ? rc_reshape(g, v, 1, v->shape) : NULL;
}

/* log softmax over the last axis of x [B, A] */
static rc_tensor *log_softmax(rc_graph *g, rc_tensor *x)
{
    rc_tensor *z = rc_sub(g, x, rc_stop_gradient(g, rc_max(g, x, 1, 1)));
    return rc_sub(g, z, rc_log(g, rc_sum(g, rc_exp(g, z), 1, 1)));
}

/* min(a, b) and clip(x, lo, hi) from relu (the ops redco has) */
static rc_tensor *minimum(rc_graph *g, rc_tensor *a, rc_tensor *b)
{
    return rc_sub(g, a, rc_relu(g, rc_sub(g, a, b)));
}

static rc_tensor *clamp(rc_graph *g, rc_tensor *x, double lo, double hi)
{
    return rc_add_scalar(g, rc_sub(g, rc_relu(g, rc_add_scalar(g, x, -lo)), rc_relu(g, rc_add_scalar(g, x, -hi))), lo);
}

/* ---- the three functions ----------------------------------------------------------------- */

/* collate: n trainer indices -> obs [n, obs_dim], act i32 [n], logp, adv, ret [n] from this
 * rank's rollout. Without shuffling, the trainer gives rank r the indices s B dp + r B + k
 * (k < B) at step s of an epoch, so (index / (B dp)) B + index % B numbers this rank's
 * examples 0 .. T-1, and perm puts them in this epoch's order. */
static int collate(rc_batch *out, const int64_t *examples, int n, void *user, rc_error *err)
{
    ppo *d = user;
    if (d->failed) /* acting failed: its reason */
        return rc_error_set(err, d->err.code ? d->err.code : RC_ERR_ARG, "%s", d->err.msg);
    int D = d->obs_dim;
    int64_t B = d->c.batch, dp = d->mesh->dp;
    float *obs = rc_batch_add(out, "obs", RC_F32, 2, (int64_t[]){n, D});
    int32_t *act = rc_batch_add(out, "act", RC_I32, 1, (int64_t[]){n});
    float *logp = rc_batch_add(out, "logp", RC_F32, 1, (int64_t[]){n});
    float *adv = rc_batch_add(out, "adv", RC_F32, 1, (int64_t[]){n});
    float *ret = rc_batch_add(out, "ret", RC_F32, 1, (int64_t[]){n});
    if (!obs || !act || !logp || !adv || !ret)
        return rc_error_set(err, RC_ERR_MEMORY, "no room for %d transitions", n);
    for (int i = 0; i < n; i++) {
        int64_t row = d->perm[(examples[i] / (B * dp)) * B + examples[i] % B];
        memcpy(obs + (int64_t)i * D, d->r_obs + row * D, sizeof(float) * (size_t)D);
        act[i] = d->r_act[row];
        logp[i] = d->r_logp[row];
        adv[i] = d->r_adv[row];
        ret[i] = d->r_ret[row];
    }
    return 0;
}

/* loss: clipped surrogate + vf_coef value error - ent_coef entropy, means over the batch */
static rc_tensor *loss(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    ppo *d = user;
    (void)rng, (void)err;
    rc_tensor *logits, *value, *adv = rc_batch_input(g, b, "adv");
    actor_critic(g, params, rc_batch_input(g, b, "obs"), &logits, &value);
    rc_tensor *logp = log_softmax(g, logits);                                      /* [B, A] */
    rc_tensor *taken = rc_one_hot(g, rc_batch_input(g, b, "act"), d->n_actions, RC_IGNORE_INDEX, RC_F32);
    rc_tensor *logp_a = rc_sum(g, rc_mul(g, logp, taken), 1, 0);                   /* [B] */
    rc_tensor *ratio = rc_exp(g, rc_sub(g, logp_a, rc_batch_input(g, b, "logp")));
    rc_tensor *surrogate = minimum(g, rc_mul(g, ratio, adv),
                                   rc_mul(g, clamp(g, ratio, 1.0 - d->c.clip, 1.0 + d->c.clip), adv));
    rc_tensor *value_err = rc_sub(g, value, rc_batch_input(g, b, "ret"));
    rc_tensor *entropy = rc_neg(g, rc_sum(g, rc_mul(g, rc_exp(g, logp), logp), 1, 0));
    rc_tensor *total = rc_neg(g, rc_mean_all(g, surrogate));
    total = rc_add(g, total, rc_scale(g, rc_mean_all(g, rc_mul(g, value_err, value_err)), d->c.vf_coef));
    return rc_sub(g, total, rc_scale(g, rc_mean_all(g, entropy), d->c.ent_coef));
}

/* predict: [B, A + 1], the actor's logits then the critic's value */
static rc_tensor *predict(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    (void)rng, (void)user, (void)err;
    rc_tensor *logits, *value;
    actor_critic(g, params, rc_batch_input(g, b, "obs"), &logits, &value);
    if (!value)
        return NULL;
    rc_tensor *parts[2] = {logits, rc_reshape(g, value, 2, (int64_t[]){value->shape[0], 1})};
    return rc_concat(g, parts, 2, 1);
}

/* ---- acting ------------------------------------------------------------------------------- */

/* The predict function on this rank's device for [envs, obs_dim] observations, planned once
 * (its weight leaves read the parameters' buffer, which the trainer updates in place). */
static int act_plan(ppo *d)
{
    if (d->act_plan)
        return 0;
    if (!rc_batch_add(&d->act_batch, "obs", RC_F32, 2, (int64_t[]){d->c.envs, d->obs_dim}))
        return rc_error_set(&d->err, RC_ERR_MEMORY, "ppo: out of memory");
    d->act_graph = rc_graph_new();
    d->act_out = predict(d->act_graph, d->params, &d->act_batch, rc_rng_new(d->c.seed), d, &d->err);
    if (rc_graph_error(d->act_graph))
        return rc_error_set(&d->err, RC_ERR_ARG, "ppo: act: %s", rc_graph_error(d->act_graph));
    d->act_plan = rc_plan_new_on(rc_deployer_backend(d->dep), d->act_graph, &d->act_out, 1, &d->err);
    return d->act_plan ? 0 : -1;
}

/* out [envs, A + 1] = predict(obs [envs, obs_dim]) */
static int act(ppo *d, const float *obs, float *out)
{
    if (act_plan(d))
        return -1;
    memcpy(d->act_batch.a[0].data, obs, sizeof(float) * (size_t)(d->c.envs * d->obs_dim));
    return rc_batch_feed(&d->act_batch, d->act_plan, &d->err) || rc_plan_run(d->act_plan, &d->err) ||
                   rc_plan_read(d->act_plan, d->act_out, out, &d->err)
               ? -1
               : 0;
}

/* softmax of logits[A]: a draw (greedy 0) or the arg-max (greedy 1); *logp its log-probability */
static int choose(const float *logits, int A, int greedy, rc_rng *rng, float *logp)
{
    double mx = logits[0], sum = 0;
    for (int k = 1; k < A; k++)
        mx = fmax(mx, logits[k]);
    for (int k = 0; k < A; k++)
        sum += exp(logits[k] - mx);
    int a = 0;
    if (greedy) {
        for (int k = 1; k < A; k++)
            a = logits[k] > logits[a] ? k : a;
    } else {
        double u = rc_rng_uniform(rng) * sum, c = 0;
        for (a = 0; a < A - 1; a++)
            if ((c += exp(logits[a] - mx)) > u)
                break;
    }
    *logp = (float)(logits[a] - mx - log(sum));
    return a;
}

/* Starts env e's next episode, seeded from (seed, rank, env, episode). */
static int env_reset(ppo *d, int e)
{
    rc_rng r = rc_rng_fold(rc_rng_fold(rc_rng_new(d->c.seed), (uint64_t)d->mesh->dp_rank), (uint64_t)e);
    r = rc_rng_fold(r, (uint64_t)d->episode[e]++);
    d->ep_return[e] = 0;
    return rc_env_reset(d->env[e], rc_rng_next_u64(&r), d->obs + (int64_t)e * d->obs_dim);
}

/* ---- the rollout (the collate side) ----------------------------------------------------- */

/* Every environment `horizon` steps with the current policy; then GAE. */
static int rollout(ppo *d)
{
    int N = d->c.envs, D = d->obs_dim, A = d->n_actions;
    float *out = malloc(sizeof(float) * (size_t)(N * (A + 1))), *last = calloc((size_t)(N * D), sizeof(float));
    int rc = out && last ? 0 : rc_error_set(&d->err, RC_ERR_MEMORY, "ppo: out of memory");
    for (int t = 0; !rc && t < d->c.horizon; t++) {
        rc = act(d, d->obs, out);
        int truncated_any = 0;
        for (int e = 0; !rc && e < N; e++) {
            int64_t row = (int64_t)t * N + e;
            memcpy(d->r_obs + row * D, d->obs + e * D, sizeof(float) * (size_t)D);
            int a = choose(out + e * (A + 1), A, 0, &d->rng, &d->r_logp[row]);
            float action = (float)a;
            double reward = 0;
            int term = 0, trunc = 0;
            d->r_act[row] = a;
            d->r_value[row] = out[e * (A + 1) + A];
            rc = rc_env_step(d->env[e], &action, d->obs + e * D, &reward, &term, &trunc, &d->err);
            d->r_reward[row] = (float)reward;
            d->r_done[row] = (unsigned char)(term ? 1 : trunc ? 2 : 0);
            d->ep_return[e] += reward;
            if (!rc && (term || trunc)) {
                d->ret_sum += d->ep_return[e], d->ret_count++;
                memcpy(last + e * D, d->obs + e * D, sizeof(float) * (size_t)D);
                truncated_any |= !term;
                rc = env_reset(d, e);
            }
        }
        /* a time limit is not the end of the task: its reward gets gamma V(last obs) */
        if (!rc && truncated_any && !(rc = act(d, last, out)))
            for (int e = 0; e < N; e++)
                if (d->r_done[(int64_t)t * N + e] == 2)
                    d->r_reward[(int64_t)t * N + e] += (float)(d->c.gamma * out[e * (A + 1) + A]);
    }
    if (!rc)
        rc = act(d, d->obs, out); /* values of the observations after the rollout */
    /* GAE: adv_t = delta_t + gamma lambda adv_{t+1} within an episode */
    double mean = 0, sq = 0;
    int64_t T = (int64_t)N * d->c.horizon;
    for (int e = 0; !rc && e < N; e++) {
        double gae = 0, next_value = out[e * (A + 1) + A];
        for (int t = d->c.horizon - 1; t >= 0; t--) {
            int64_t row = (int64_t)t * N + e;
            double go_on = d->r_done[row] ? 0.0 : 1.0;
            double delta = d->r_reward[row] + d->c.gamma * next_value * go_on - d->r_value[row];
            gae = delta + d->c.gamma * d->c.lambda * go_on * gae;
            d->r_adv[row] = (float)gae;
            d->r_ret[row] = (float)(gae + d->r_value[row]);
            next_value = d->r_value[row];
            mean += gae / (double)T;
        }
    }
    for (int64_t i = 0; !rc && i < T; i++)
        sq += (d->r_adv[i] - mean) * (d->r_adv[i] - mean) / (double)T;
    for (int64_t i = 0; !rc && i < T; i++)
        d->r_adv[i] = (float)((d->r_adv[i] - mean) / (sqrt(sq) + 1e-8));
    free(out), free(last);
    return rc;
}

/* The mean return of the episodes that ended since the last report, over all ranks
 * (collective); the previous report's when none did. */
static int report_return(ppo *d, double *mean)
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

/* count: the examples of an epoch, T per rank. Every K-th epoch starts with a new rollout;
 * every epoch with a new order of it. A failure is kept for collate to report. */
static int64_t count_train(int epoch, void *user)
{
    ppo *d = user;
    int64_t T = (int64_t)d->c.envs * d->c.horizon;
    if (epoch == d->epoch || d->failed)
        return T * d->mesh->dp;
    d->epoch = epoch;
    double mean = 0;
    if (epoch % d->c.epochs == 0) {
        int bad = rollout(d);
        d->failed = report_return(d, &mean) || bad; /* (collective: every rank reports) */
        d->iteration++;
        if (!d->failed && rc_deployer_is_main(d->dep))
            printf("iteration %d: mean episode return %.1f\n", d->iteration, mean);
        const char *key = "ppo/mean_return";
        if (!d->failed)
            d->failed = rc_deployer_log(d->dep, d->iteration, &key, &mean, 1, &d->err) != 0;
    }
    rc_rng r = rc_rng_fold(rc_rng_fold(rc_rng_new(d->c.seed ^ 0x5EED), (uint64_t)epoch), (uint64_t)d->mesh->dp_rank);
    for (int64_t i = 0; i < T; i++) {
        int64_t j = (int64_t)(rc_rng_uniform(&r) * (double)(i + 1));
        d->perm[i] = d->perm[j];
        d->perm[j] = i;
    }
    return T * d->mesh->dp;
}

/* ---- evaluation ---------------------------------------------------------------------- */

/* One whole episode per environment of every rank, greedy (random 0) or uniformly random
 * actions (random 1); the mean return over all of them. */
static int evaluate(ppo *d, int random, double *mean)
{
    int N = d->c.envs, D = d->obs_dim, A = d->n_actions;
    float *out = malloc(sizeof(float) * (size_t)(N * (A + 1)));
    unsigned char *over = calloc((size_t)N, 1);
    int rc = out && over ? 0 : rc_error_set(&d->err, RC_ERR_MEMORY, "ppo: out of memory");
    for (int e = 0; !rc && e < N; e++)
        rc = env_reset(d, e);
    for (int left = N; !rc && left > 0;) {
        if (!random)
            rc = act(d, d->obs, out);
        for (int e = 0; !rc && e < N; e++) {
            if (over[e])
                continue;
            float logp, action = random ? (float)(int)(rc_rng_uniform(&d->rng) * A)
                                        : (float)choose(out + e * (A + 1), A, 1, &d->rng, &logp);
            double reward;
            int term, trunc;
            rc = rc_env_step(d->env[e], &action, d->obs + e * D, &reward, &term, &trunc, &d->err);
            d->ep_return[e] += reward;
            if (term || trunc) {
                over[e] = 1, left--;
                d->ret_sum += d->ep_return[e], d->ret_count++;
            }
        }
    }
    for (int e = 0; !rc && e < N; e++) /* training goes on from fresh episodes */
        rc = env_reset(d, e);
    d->last_return = NAN;
    free(out), free(over);
    return rc_deployer_agree(d->dep, rc, &d->err) || report_return(d, mean);
}

/* ---- setup --------------------------------------------------------------------------- */

/* actor and critic: matrices N(0, 1 / fan in) (the actor's last 0.01 / fan in: a nearly
 * uniform first policy), biases zero */
static rc_params *ppo_params(int obs_dim, int n_actions, uint64_t seed)
{
    rc_params *p = rc_params_new();
    int64_t H = HIDDEN, shapes[6][2] = {{obs_dim, H}, {H, 0}, {H, H}, {H, 0}, {H, n_actions}, {n_actions, 0}};
    for (int i = 0; p && i < NW; i++) {
        int k = i % 6, matrix = shapes[k][1] != 0;
        if (i >= 6 && k >= 4) /* the critic's output: 1 */
            shapes[k][k == 4 ? 1 : 0] = 1;
        rc_init init = {.kind = RC_INIT_ZEROS};
        if (matrix)
            init = (rc_init){.kind = RC_INIT_NORMAL, .std = (i == 4 ? 0.01 : 1.0) / sqrt((double)shapes[k][0])};
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

static int ppo_init(ppo *d, const ppo_config *c, rc_deployer *dep, rc_params *params, rc_error *err)
{
    memset(d, 0, sizeof *d);
    d->c = *c;
    d->dep = dep;
    d->mesh = rc_deployer_mesh(dep);
    d->params = params;
    d->epoch = -1;
    d->last_return = NAN;
    d->rng = rc_rng_fold(rc_rng_fold(rc_rng_new(c->seed), 0xAC7), (uint64_t)d->mesh->dp_rank);
    int N = c->envs;
    int64_t T = (int64_t)N * c->horizon;
    d->env = calloc((size_t)N, sizeof *d->env);
    for (int e = 0; d->env && e < N; e++)
        if (!(d->env[e] = rc_env_new("CartPole-v1", err)))
            return -1;
    if (!d->env)
        return rc_error_set(err, RC_ERR_MEMORY, "ppo: out of memory");
    d->obs_dim = rc_env_obs_dim(d->env[0]);
    d->n_actions = rc_env_n_actions(d->env[0]);
    d->obs = malloc(sizeof(float) * (size_t)(N * d->obs_dim));
    d->ep_return = calloc((size_t)N, sizeof(double));
    d->episode = calloc((size_t)N, sizeof(int64_t));
    d->r_obs = malloc(sizeof(float) * (size_t)(T * d->obs_dim));
    d->r_logp = malloc(sizeof(float) * (size_t)T), d->r_value = malloc(sizeof(float) * (size_t)T);
    d->r_reward = malloc(sizeof(float) * (size_t)T), d->r_adv = malloc(sizeof(float) * (size_t)T);
    d->r_ret = malloc(sizeof(float) * (size_t)T), d->r_act = malloc(sizeof(int32_t) * (size_t)T);
    d->r_done = malloc((size_t)T), d->perm = malloc(sizeof(int64_t) * (size_t)T);
    if (!d->obs || !d->ep_return || !d->episode || !d->r_obs || !d->r_logp || !d->r_value || !d->r_reward ||
        !d->r_adv || !d->r_ret || !d->r_act || !d->r_done || !d->perm)
        return rc_error_set(err, RC_ERR_MEMORY, "ppo: out of memory");
    for (int e = 0; e < N; e++)
        if (env_reset(d, e))
            return rc_error_set(err, RC_ERR_ARG, "ppo: cannot reset CartPole-v1");
    return 0;
}

static void ppo_free(ppo *d)
{
    for (int e = 0; d->env && e < d->c.envs; e++)
        rc_env_free(d->env[e]);
    free(d->env), free(d->obs), free(d->ep_return), free(d->episode);
    free(d->r_obs), free(d->r_logp), free(d->r_value), free(d->r_reward), free(d->r_adv), free(d->r_ret);
    free(d->r_act), free(d->r_done), free(d->perm);
    rc_plan_free(d->act_plan);
    rc_graph_free(d->act_graph);
    rc_batch_free(&d->act_batch);
}

/* ---- main ---------------------------------------------------------------------------- */

typedef struct {
    ppo_config c;
    int iterations;
    double lr;
    const char *device, *workdir;
} args;

static int parse_args(int argc, char **argv, args *a)
{
    *a = (args){{.envs = 8, .horizon = 64, .epochs = 4, .batch = 64, .gamma = 0.99, .lambda = 0.95, .clip = 0.2,
                 .vf_coef = 0.5, .ent_coef = 0.01, .seed = 1},
                40, 1e-3, NULL, NULL};
    int ok = 1;
    for (int i = 1; ok && i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) ok = 0;
        else if (!strcmp(k, "--iterations")) a->iterations = atoi(v);
        else if (!strcmp(k, "--envs")) a->c.envs = atoi(v);
        else if (!strcmp(k, "--horizon")) a->c.horizon = atoi(v);
        else if (!strcmp(k, "--epochs")) a->c.epochs = atoi(v);
        else if (!strcmp(k, "--batch")) a->c.batch = atoi(v);
        else if (!strcmp(k, "--lr")) a->lr = atof(v);
        else if (!strcmp(k, "--gamma")) a->c.gamma = atof(v);
        else if (!strcmp(k, "--lambda")) a->c.lambda = atof(v);
        else if (!strcmp(k, "--clip")) a->c.clip = atof(v);
        else if (!strcmp(k, "--vf-coef")) a->c.vf_coef = atof(v);
        else if (!strcmp(k, "--ent-coef")) a->c.ent_coef = atof(v);
        else if (!strcmp(k, "--seed")) a->c.seed = (uint64_t)atoll(v);
        else if (!strcmp(k, "--device")) a->device = v;
        else if (!strcmp(k, "--workdir")) a->workdir = v;
        else ok = 0;
    }
    int64_t T = (int64_t)a->c.envs * a->c.horizon;
    if (!ok || a->iterations < 1 || a->c.envs < 1 || a->c.horizon < 1 || a->c.epochs < 1 || a->c.batch < 1 ||
        T % a->c.batch) {
        fprintf(stderr, "usage: ppo [--iterations N] [--envs E] [--horizon H] [--epochs K] [--batch B]\n"
                        "           [--lr LR] [--gamma G] [--lambda L] [--clip EPS] [--vf-coef C] [--ent-coef C]\n"
                        "           [--seed S] [--device cpu|opencl] [--workdir DIR]\n"
                        "       (B must divide E x H, the transitions of a rank's rollout)\n");
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
    ppo d = {0};
    rc_deployer_options o = {.seed = a.c.seed, .workdir = a.workdir, .device = a.device};
    rc_deployer *dep = rc_deployer_new(&argc, &argv, &o, &err);
    int rc = dep ? ppo_init(&d, &a.c, dep, NULL, &err) : -1;
    rc_params *params = rc ? NULL : ppo_params(d.obs_dim, d.n_actions, a.c.seed);
    d.params = params;
    rc_trainer *t = params ? rc_trainer_new(dep, collate, loss, &d, params, NULL, &err) : NULL;
    if (!t) {
        fprintf(stderr, "ppo: %s\n", err.msg[0] ? err.msg : "cannot make the parameters");
        return 1;
    }
    int main_rank = rc_deployer_is_main(dep), dp = rc_deployer_mesh(dep)->dp;
    int64_t T = (int64_t)a.c.envs * a.c.horizon;
    if (main_rank)
        printf("CartPole-v1 on %d rank(s) (%s) x %d envs; rollouts of %lld transitions, %d epochs of minibatches of "
               "%d per rank; actor-critic MLPs (%lld parameters)\n",
               dp, rc_backend_name(rc_deployer_backend(dep)), a.c.envs, (long long)(T * dp), a.c.epochs, a.c.batch, (long long)rc_params_numel(params));
    double random_return = 0, final_return = 0;
    rc = evaluate(&d, 1, &random_return);
    if (!rc && main_rank)
        printf("random policy: mean episode return %.1f\n", random_return);
    rc_train_options to = {.steps = (int64_t)a.iterations * a.c.epochs * (T / a.c.batch), .batch_size = a.c.batch,
                           .optimizer = "adamw", .lr = a.lr, .eps = 1e-5, .grad_clip = 0.5,
                           .schedule = RC_SCHEDULE_CONSTANT};
    if (!rc && (rc = rc_trainer_fit(t, &to, (rc_examples){count_train, &d}, NULL, NULL, &err)))
        fprintf(stderr, "ppo: %s\n", d.failed ? d.err.msg : err.msg);
    if (!rc && (rc = evaluate(&d, 0, &final_return)))
        fprintf(stderr, "ppo: %s\n", d.err.msg);
    if (!rc && main_rank)
        printf("trained policy (greedy): mean episode return %.1f over %lld episodes (random policy %.1f)\n",
               final_return, (long long)a.c.envs * dp, random_return);
    ppo_free(&d);
    rc_trainer_free(t);
    rc_deployer_free(dep);
    rc_params_free(params);
    return rc ? 1 : 0;
}
