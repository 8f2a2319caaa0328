/* cmd_privacy.c - `redco privacy`: the (epsilon, delta) of a differentially private
 * training run (DP-SGD: Poisson sampling at rate q, Gaussian noise of multiplier sigma),
 * or the noise multiplier reaching a target epsilon, by Renyi-DP accounting. */
#include "cli.h"
#include "redco/privacy.h"

#include <jansson.h>
#include <stdio.h>

static const char *help =
    "usage: redco privacy --q Q --steps N --delta D (--sigma S | --epsilon E) [--json]\n"
    "\n"
    "The privacy of DP-SGD: each step samples each example with probability Q (batch size\n"
    "over dataset size), clips per-example gradients to norm C and adds Gaussian noise of\n"
    "standard deviation S * C. With --sigma: the run's epsilon at delta D after N steps, by\n"
    "Renyi-DP accounting of the subsampled Gaussian mechanism (the orders and the RDP ->\n"
    "(epsilon, delta) conversion of dp-accounting's RdpAccountant). With --epsilon: the\n"
    "smallest noise multiplier S whose epsilon is at most E (to a relative 1e-6).\n"
    "\n"
    "  --q Q          sampling rate in [0, 1] ((0, 1] with --epsilon)\n"
    "  --steps N      training steps (>= 0; >= 1 with --epsilon)\n"
    "  --delta D      delta in (0, 1), e.g. below 1 / dataset size\n"
    "  --sigma S      noise multiplier (> 0)\n"
    "  --epsilon E    target epsilon (> 0): solve for the noise multiplier\n"
    "  --json         one JSON line: q, sigma, steps, delta, epsilon, order\n"
    "  --help         print this message\n";

enum { F_Q = CLI_FLAG0, F_SIGMA, F_STEPS, F_DELTA, F_EPSILON, F_JSON };

static const struct option flags[] = {
    {"q", required_argument, NULL, F_Q},
    {"sigma", required_argument, NULL, F_SIGMA},
    {"steps", required_argument, NULL, F_STEPS},
    {"delta", required_argument, NULL, F_DELTA},
    {"epsilon", required_argument, NULL, F_EPSILON},
    {"json", no_argument, NULL, F_JSON},
    {"help", no_argument, NULL, CLI_HELP},
    {NULL, 0, NULL, 0},
};

typedef struct {
    double q, sigma, delta, epsilon;
    int64_t steps;
    int has_q, has_sigma, has_steps, has_delta, has_epsilon, json;
} options;

static int take_flag(const char *cmd, int c, const cli_args *a, void *user)
{
    options *o = user;
    const char *f = a->flag, *v = a->value;
    switch (c) {
    case F_Q: o->has_q = 1; return cli_double(cmd, f, v, 0.0, 1.0, &o->q);
    case F_SIGMA: o->has_sigma = 1; return cli_double(cmd, f, v, 0.0, 1e6, &o->sigma);
    case F_STEPS: o->has_steps = 1; return cli_int64(cmd, f, v, 0, INT64_C(1) << 40, &o->steps);
    case F_DELTA: o->has_delta = 1; return cli_double(cmd, f, v, 0.0, 1.0, &o->delta);
    case F_EPSILON: o->has_epsilon = 1; return cli_double(cmd, f, v, 0.0, 1e6, &o->epsilon);
    case F_JSON: o->json = 1; return 0;
    default: /* CLI_ARG */ return cli_usage(cmd, "unexpected argument '%s'", v);
    }
}

static int parse(int argc, char **argv, options *o)
{
    const char *cmd = "privacy";
    *o = (options){0};
    int rc = cli_parse(cmd, argc, argv, flags, help, take_flag, o);
    if (rc)
        return rc;
    if (!o->has_q || !o->has_steps || !o->has_delta)
        return cli_usage(cmd, "--q, --steps and --delta are required");
    if (o->has_sigma == o->has_epsilon)
        return cli_usage(cmd, "give one of --sigma (to get epsilon) and --epsilon (to get sigma)");
    if (o->delta <= 0.0 || o->delta >= 1.0)
        return cli_usage(cmd, "--delta: %g is not in (0, 1)", o->delta);
    if (o->has_sigma && o->sigma <= 0.0)
        return cli_usage(cmd, "--sigma: must be positive");
    if (o->has_epsilon && o->epsilon <= 0.0)
        return cli_usage(cmd, "--epsilon: must be positive");
    if (o->has_epsilon && o->q <= 0.0)
        return cli_usage(cmd, "--q: must be positive with --epsilon (q = 0 spends no privacy)");
    if (o->has_epsilon && o->steps < 1)
        return cli_usage(cmd, "--steps: must be at least 1 with --epsilon");
    return 0;
}

int cmd_privacy(int argc, char **argv)
{
    const char *cmd = "privacy";
    options o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    rc_error err = {0};
    if (o.has_epsilon && rc_dp_sigma(o.q, o.steps, o.delta, o.epsilon, &o.sigma, &err))
        return cli_fail(cmd, "%s", err.msg);
    double eps, order;
    if (rc_dp_epsilon(o.q, o.sigma, o.steps, o.delta, &eps, &order, &err))
        return cli_fail(cmd, "%s", err.msg);
    if (o.json) {
        json_t *j = json_object();
        json_object_set_new(j, "q", cli_json_real(o.q));
        json_object_set_new(j, "sigma", cli_json_real(o.sigma));
        json_object_set_new(j, "steps", json_integer(o.steps));
        json_object_set_new(j, "delta", cli_json_real(o.delta));
        json_object_set_new(j, "epsilon", cli_json_real(eps));
        json_object_set_new(j, "order", cli_json_real(order));
        cli_print_json(j);
    } else if (o.has_epsilon) {
        printf("sigma %.6g reaches epsilon %.6g (target %g) at delta %g after %lld steps at q = %g (order %g)\n",
               o.sigma, eps, o.epsilon, o.delta, (long long)o.steps, o.q, order);
    } else {
        printf("epsilon %.6g at delta %g after %lld steps at q = %g, sigma = %g (order %g)\n", eps, o.delta,
               (long long)o.steps, o.q, o.sigma, order);
    }
    return 0;
}
