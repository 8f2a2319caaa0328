/* classic_control.c - CartPole-v1 and Pendulum-v1 as Gymnasium 0.29 defines them (see
 * redco/env.h): one table of constants and two step functions. */
#include "internal.h"
#include "redco/env.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ENV_CARTPOLE, ENV_PENDULUM };
enum { STATE_MAX = 4 };

struct rc_env {
    int kind;
    double s[STATE_MAX];          /* the state, in double precision as Gymnasium keeps it */
    int steps;                    /* steps in this episode */
    int done;                     /* the episode ended: reset before stepping again */
};

static const struct {
    const char *name;
    int obs_dim, state_dim, n_actions, max_steps;
    double action_high;
} kinds[] = {
    [ENV_CARTPOLE] = {"CartPole-v1", 4, 4, 2, 500, 0.0},
    [ENV_PENDULUM] = {"Pendulum-v1", 3, 2, 0, 200, 2.0},
};

/* CartPole's physics (Gymnasium's constants) */
static const double CP_GRAVITY = 9.8, CP_MASSCART = 1.0, CP_MASSPOLE = 0.1, CP_LENGTH = 0.5;
static const double CP_FORCE = 10.0, CP_TAU = 0.02, CP_X_LIMIT = 2.4;
static const double CP_THETA_LIMIT = 12.0 * 2.0 * 3.14159265358979323846 / 360.0;
/* Pendulum's */
static const double PD_MAX_SPEED = 8.0, PD_DT = 0.05, PD_G = 10.0, PD_M = 1.0, PD_L = 1.0;
static const double PI = 3.14159265358979323846;

rc_env *rc_env_new(const char *name, rc_error *err)
{
    for (int k = 0; name && k < (int)(sizeof kinds / sizeof kinds[0]); k++)
        if (!strcmp(name, kinds[k].name)) {
            rc_env *e = calloc(1, sizeof *e);
            if (!e)
                rc_error_set(err, RC_ERR_MEMORY, "env %s: out of memory", name);
            else
                e->kind = k, e->done = 1;
            return e;
        }
    rc_error_set(err, RC_ERR_ARG, "env: unknown environment \"%s\" (known: CartPole-v1, Pendulum-v1)",
                 name ? name : "(null)");
    return NULL;
}

void rc_env_free(rc_env *e)
{
    free(e);
}

const char *rc_env_name(const rc_env *e) { return kinds[e->kind].name; }
int rc_env_obs_dim(const rc_env *e) { return kinds[e->kind].obs_dim; }
int rc_env_state_dim(const rc_env *e) { return kinds[e->kind].state_dim; }
int rc_env_n_actions(const rc_env *e) { return kinds[e->kind].n_actions; }
int rc_env_action_dim(const rc_env *e) { (void)e; return 1; }
double rc_env_action_high(const rc_env *e) { return kinds[e->kind].action_high; }
int rc_env_max_steps(const rc_env *e) { return kinds[e->kind].max_steps; }

/* the observation of the current state */
static void observe(const rc_env *e, float *obs)
{
    if (e->kind == ENV_CARTPOLE) {
        for (int i = 0; i < 4; i++)
            obs[i] = (float)e->s[i];
        return;
    }
    obs[0] = (float)cos(e->s[0]);
    obs[1] = (float)sin(e->s[0]);
    obs[2] = (float)e->s[1];
}

int rc_env_set_state(rc_env *e, const double *state, float *obs)
{
    memcpy(e->s, state, (size_t)kinds[e->kind].state_dim * sizeof *state);
    e->steps = 0;
    e->done = 0;
    if (obs)
        observe(e, obs);
    return 0;
}

void rc_env_get_state(const rc_env *e, double *state)
{
    memcpy(state, e->s, (size_t)kinds[e->kind].state_dim * sizeof *state);
}

int rc_env_reset(rc_env *e, uint64_t seed, float *obs)
{
    rc_rng r = rc_rng_new(seed);
    double s[STATE_MAX];
    if (e->kind == ENV_CARTPOLE) {
        for (int i = 0; i < 4; i++)
            s[i] = -0.05 + 0.1 * rc_rng_uniform(&r);
    } else {
        s[0] = -PI + 2.0 * PI * rc_rng_uniform(&r);
        s[1] = -1.0 + 2.0 * rc_rng_uniform(&r);
    }
    return rc_env_set_state(e, s, obs);
}

/* x [x, x_dot, theta, theta_dot] one Euler step on with push `right` (0 or 1); 1 when it fell */
static int cartpole_step(double *s, int right)
{
    double force = right ? CP_FORCE : -CP_FORCE, total = CP_MASSCART + CP_MASSPOLE;
    double pml = CP_MASSPOLE * CP_LENGTH, c = cos(s[2]), sn = sin(s[2]);
    /* the products grouped as Gymnasium's (theta_dot**2, costheta**2): a long balanced
     * episode amplifies any other rounding */
    double temp = (force + pml * (s[3] * s[3]) * sn) / total;
    double theta_acc = (CP_GRAVITY * sn - c * temp) / (CP_LENGTH * (4.0 / 3.0 - CP_MASSPOLE * (c * c) / total));
    double x_acc = temp - pml * theta_acc * c / total;
    s[0] += CP_TAU * s[1];
    s[1] += CP_TAU * x_acc;
    s[2] += CP_TAU * s[3];
    s[3] += CP_TAU * theta_acc;
    return s[0] < -CP_X_LIMIT || s[0] > CP_X_LIMIT || s[2] < -CP_THETA_LIMIT || s[2] > CP_THETA_LIMIT;
}

/* theta in [-pi, pi), as Python's ((x + pi) % (2 pi)) - pi */
static double angle_normalize(double x)
{
    double m = fmod(x + PI, 2.0 * PI);
    return (m < 0 ? m + 2.0 * PI : m) - PI;
}

/* s [theta, theta_dot] one step on under torque u (clipped); returns the reward */
static double pendulum_step(double *s, double u)
{
    u = u < -2.0 ? -2.0 : u > 2.0 ? 2.0 : u;
    double th = s[0], thdot = s[1], a = angle_normalize(th);
    double cost = a * a + 0.1 * thdot * thdot + 0.001 * u * u;
    double v = thdot + (3.0 * PD_G / (2.0 * PD_L) * sin(th) + 3.0 / (PD_M * PD_L * PD_L) * u) * PD_DT;
    v = v < -PD_MAX_SPEED ? -PD_MAX_SPEED : v > PD_MAX_SPEED ? PD_MAX_SPEED : v;
    s[0] = th + v * PD_DT;
    s[1] = v;
    return -cost;
}

int rc_env_step(rc_env *e, const float *action, float *obs, double *reward, int *terminated,
                int *truncated, rc_error *err)
{
    const char *name = kinds[e->kind].name;
    if (e->done)
        return rc_error_set(err, RC_ERR_ARG, "env %s: step after the episode ended (reset first)", name);
    double a = action[0];
    if (!isfinite(a))
        return rc_error_set(err, RC_ERR_ARG, "env %s: action %g is not finite", name, a);
    int ended = 0;
    if (e->kind == ENV_CARTPOLE) {
        if (a != 0.0 && a != 1.0)
            return rc_error_set(err, RC_ERR_ARG, "env %s: action %g is not 0 or 1", name, a);
        ended = cartpole_step(e->s, a == 1.0);
        *reward = 1.0; /* also on the step that ends it, as Gymnasium */
    } else {
        *reward = pendulum_step(e->s, a);
    }
    e->steps++;
    *terminated = ended;
    *truncated = e->steps >= kinds[e->kind].max_steps;
    e->done = *terminated || *truncated;
    observe(e, obs);
    return 0;
}
