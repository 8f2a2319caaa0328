/* test_env.c - the classic-control environments (redco/env.h): sizes, resets in Gymnasium's
 * ranges and the same for the same seed, CartPole ending at its limits and Pendulum at its
 * time limit, torques clipped, errors named.
 *
 *   test_env                              the unit checks
 *   test_env --trace ENV SEED EPISODES    JSON lines for tests/ref/test_env_ref.py: per episode
 *                                         the initial state, then each step's action,
 *                                         observation, reward and end flags (actions from
 *                                         SEED: random, or a balancing push half the time) */
#include "check.h"
#include "redco/env.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_sizes(void)
{
    rc_error err = {0};
    rc_env *cp = rc_env_new("CartPole-v1", &err), *pd = rc_env_new("Pendulum-v1", &err);
    CHECK(cp && pd);
    if (!cp || !pd)
        return;
    CHECK(rc_env_obs_dim(cp) == 4 && rc_env_n_actions(cp) == 2 && rc_env_max_steps(cp) == 500 &&
          rc_env_action_high(cp) == 0.0 && rc_env_state_dim(cp) == 4);
    CHECK(rc_env_obs_dim(pd) == 3 && rc_env_n_actions(pd) == 0 && rc_env_max_steps(pd) == 200 &&
          rc_env_action_high(pd) == 2.0 && rc_env_state_dim(pd) == 2);
    CHECK(!strcmp(rc_env_name(cp), "CartPole-v1") && rc_env_action_dim(pd) == 1);
    CHECK(rc_env_new("MountainCar-v0", &err) == NULL && check_has(err.msg, "MountainCar-v0") &&
          check_has(err.msg, "CartPole-v1"));
    rc_env_free(cp);
    rc_env_free(pd);
}

static void test_resets(void)
{
    rc_error err = {0};
    rc_env *cp = rc_env_new("CartPole-v1", &err), *pd = rc_env_new("Pendulum-v1", &err);
    float a[4], b[4];
    double lo[4] = {1, 1, 1, 1}, hi[4] = {-1, -1, -1, -1}, s[4];
    for (uint64_t seed = 0; seed < 200; seed++) {
        rc_env_reset(cp, seed, a);
        rc_env_get_state(cp, s);
        for (int i = 0; i < 4; i++)
            lo[i] = fmin(lo[i], s[i]), hi[i] = fmax(hi[i], s[i]);
        rc_env_reset(cp, seed, b);
        CHECK(!memcmp(a, b, sizeof a));
    }
    for (int i = 0; i < 4; i++) /* U(-0.05, 0.05), spread over most of it */
        CHECKF(lo[i] >= -0.05 && hi[i] <= 0.05 && hi[i] - lo[i] > 0.09, "state %d in [%g, %g]", i, lo[i], hi[i]);
    rc_env_reset(cp, 1, a);
    rc_env_reset(cp, 2, b);
    CHECK(memcmp(a, b, sizeof a) != 0);
    double thmin = 9, thmax = -9, vmax = 0;
    for (uint64_t seed = 0; seed < 200; seed++) {
        rc_env_reset(pd, seed, a);
        rc_env_get_state(pd, s);
        thmin = fmin(thmin, s[0]), thmax = fmax(thmax, s[0]), vmax = fmax(vmax, fabs(s[1]));
        CHECK(fabs(a[0] - cos(s[0])) < 1e-6 && fabs(a[1] - sin(s[0])) < 1e-6 && a[2] == (float)s[1]);
    }
    CHECKF(thmin >= -3.14159265358979 && thmax <= 3.14159265358979 && thmax - thmin > 6.0 && vmax <= 1.0 && vmax > 0.9,
           "pendulum resets: theta in [%g, %g], |theta_dot| <= %g", thmin, thmax, vmax);
    rc_env_free(cp);
    rc_env_free(pd);
}

static void test_episodes(void)
{
    rc_error err = {0};
    rc_env *cp = rc_env_new("CartPole-v1", &err), *pd = rc_env_new("Pendulum-v1", &err);
    float obs[4], act = 1.0f;
    double r = 0;
    int term = 0, trunc = 0, n = 0;
    /* always pushing right: the pole falls left within a few dozen steps, reward 1 each */
    rc_env_reset(cp, 3, obs);
    double total = 0;
    while (!term && !trunc && rc_env_step(cp, &act, obs, &r, &term, &trunc, &err) == 0)
        total += r, n++;
    CHECKF(term && !trunc && n > 5 && n < 60 && total == n && fabs(obs[2]) > 0.2, "push right: %d steps, theta %g",
           n, obs[2]);
    CHECK(rc_env_step(cp, &act, obs, &r, &term, &trunc, &err) == -1 && check_has(err.msg, "reset first"));
    rc_env_reset(cp, 3, obs);
    float bad[3] = {2.0f, 0.5f, NAN};
    for (int i = 0; i < 3; i++)
        CHECKF(rc_env_step(cp, &bad[i], obs, &r, &term, &trunc, &err) == -1 && check_has(err.msg, "CartPole-v1"),
               "action %g: %s", bad[i], err.msg);
    /* the pendulum: 200 steps, never terminated; a torque of 5 acts as 2 */
    double s0[2] = {0.5, -0.25}, s1[2], s2[2];
    float big = 5.0f, two = 2.0f;
    rc_env_set_state(pd, s0, obs);
    rc_env_step(pd, &big, obs, &r, &term, &trunc, &err);
    rc_env_get_state(pd, s1);
    rc_env_set_state(pd, s0, obs);
    rc_env_step(pd, &two, obs, &r, &term, &trunc, &err);
    rc_env_get_state(pd, s2);
    CHECK(s1[0] == s2[0] && s1[1] == s2[1]);
    /* one step by hand: theta_dot += (15 sin(theta) + 3 u) 0.05; theta += theta_dot 0.05 */
    double v = -0.25 + (15.0 * sin(0.5) + 3.0 * 2.0) * 0.05;
    CHECK(fabs(s2[1] - v) < 1e-12 && fabs(s2[0] - (0.5 + v * 0.05)) < 1e-12);
    CHECK(fabs(r + (0.25 + 0.1 * 0.0625 + 0.001 * 4.0)) < 1e-12);
    for (n = 1; !term && !trunc; n++)
        CHECK(rc_env_step(pd, &two, obs, &r, &term, &trunc, &err) == 0);
    CHECKF(n == 200 && trunc && !term, "pendulum: %d steps, truncated %d, terminated %d", n, trunc, term);
    rc_env_free(cp);
    rc_env_free(pd);
}

/* JSON lines of EPISODES episodes of ENV from SEED (see the header) */
static int trace(const char *name, uint64_t seed, int episodes)
{
    rc_error err = {0};
    rc_env *e = rc_env_new(name, &err);
    if (!e) {
        fprintf(stderr, "test_env: %s\n", err.msg);
        return 1;
    }
    rc_rng r = rc_rng_new(seed);
    float obs[4];
    double s[4], reward;
    for (int ep = 0; ep < episodes; ep++) {
        rc_env_reset(e, seed * 1000 + (uint64_t)ep, obs);
        rc_env_get_state(e, s);
        printf("{\"episode\": %d, \"state\": [%.17g, %.17g, %.17g, %.17g]}\n", ep, s[0], s[1],
               rc_env_state_dim(e) > 2 ? s[2] : 0.0, rc_env_state_dim(e) > 2 ? s[3] : 0.0);
        int term = 0, trunc = 0, balance = ep % 2; /* odd episodes balance CartPole to its time limit */
        while (!term && !trunc) {
            float a;
            if (rc_env_n_actions(e))
                a = balance ? (float)(obs[2] + 0.5f * obs[3] > 0) : (float)(rc_rng_uniform(&r) < 0.5);
            else
                a = (float)(-2.5 + 5.0 * rc_rng_uniform(&r)); /* past the bound half the time */
            if (rc_env_step(e, &a, obs, &reward, &term, &trunc, &err)) {
                fprintf(stderr, "test_env: %s\n", err.msg);
                rc_env_free(e);
                return 1;
            }
            printf("{\"action\": %.9g, \"obs\": [", a);
            for (int i = 0; i < rc_env_obs_dim(e); i++)
                printf("%s%.9g", i ? ", " : "", obs[i]);
            printf("], \"reward\": %.17g, \"terminated\": %d, \"truncated\": %d}\n", reward, term, trunc);
        }
    }
    rc_env_free(e);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--trace"))
        return trace(argv[2], strtoull(argv[3], NULL, 10), atoi(argv[4]));
    test_sizes();
    test_resets();
    test_episodes();
    return check_summary("test_env");
}
