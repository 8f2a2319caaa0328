/* redco/env.h - classic-control environments for reinforcement-learning pipelines, with the
 * dynamics, rewards, termination and time limits of Gymnasium 0.29's:
 *
 *   CartPole-v1   obs [x, x_dot, theta, theta_dot]; 2 actions (push left, push right);
 *                 reward 1 per step; terminated when |x| > 2.4 or |theta| > 12 degrees;
 *                 truncated at 500 steps; reset draws every state variable from U(-0.05, 0.05)
 *   Pendulum-v1   obs [cos theta, sin theta, theta_dot]; one torque in [-2, 2] (clipped);
 *                 reward -(theta^2 + 0.1 theta_dot^2 + 0.001 u^2), theta normalised to
 *                 [-pi, pi); never terminated; truncated at 200 steps; reset draws theta from
 *                 U(-pi, pi) and theta_dot from U(-1, 1)
 *
 * The state is kept in double precision, as Gymnasium keeps it, and observations are returned
 * as floats, as Gymnasium returns float32 arrays. Initial states come from redco's own
 * generator (rc_rng, a key per seed), not NumPy's: the same seed gives the same episode here,
 * not the same episode as Gymnasium's; rc_env_set_state starts from a given state instead
 * (what the tests use to step both with the same actions). */
#ifndef REDCO_ENV_H
#define REDCO_ENV_H

#include "redco.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rc_env rc_env;

/* "CartPole-v1" or "Pendulum-v1"; NULL with the known names in err otherwise */
rc_env *rc_env_new(const char *name, rc_error *err);
void rc_env_free(rc_env *e);
const char *rc_env_name(const rc_env *e);
int rc_env_obs_dim(const rc_env *e);       /* 4, 3 */
int rc_env_n_actions(const rc_env *e);     /* discrete: the number of actions (2); continuous: 0 */
int rc_env_action_dim(const rc_env *e);    /* 1: the action's index, or the torque */
double rc_env_action_high(const rc_env *e); /* continuous: the bound (2; low = -high); discrete: 0 */
int rc_env_max_steps(const rc_env *e);     /* the time limit: 500, 200 */
/* The state variables (CartPole 4, Pendulum 2: theta, theta_dot) */
int rc_env_state_dim(const rc_env *e);

/* Starts an episode from a state drawn with seed; writes obs[obs_dim]. */
int rc_env_reset(rc_env *e, uint64_t seed, float *obs);
/* Starts an episode from state[state_dim] (as Gymnasium's env.unwrapped.state); writes obs. */
int rc_env_set_state(rc_env *e, const double *state, float *obs);
/* The current state, state_dim values. */
void rc_env_get_state(const rc_env *e, double *state);
/* One step. action[0]: the action's index (discrete; a float holding 0 .. n_actions-1) or the
 * torque (continuous, clipped to the bound). Writes the next observation, the reward and
 * whether the episode ended: terminated (the task's own end) or truncated (the time limit).
 * Errors: an index out of range or not a whole number, a non-finite action, a step after
 * the episode ended (reset first), each naming the environment. */
int rc_env_step(rc_env *e, const float *action, float *obs, double *reward, int *terminated,
                int *truncated, rc_error *err);

#ifdef __cplusplus
}
#endif

#endif
