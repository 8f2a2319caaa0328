/* test_privacy.c - the Renyi-DP accountant (include/redco/privacy.h) against closed
 * forms: the plain Gaussian (q = 1) and the binomial sums at orders 2 and 3; the
 * fractional-order series against the integer sum next to an integer; no overflow at
 * large orders and small sigma; monotonicity in steps, sigma and q; the inverse search;
 * and errors for bad arguments. (dp-accounting itself: tests/ref/test_privacy_ref.py.) */
#include "check.h"
#include "redco/privacy.h"

#include <math.h>

static double rel(double a, double b)
{
    return fabs(a - b) / fmax(fabs(b), 1e-300);
}

static double eps_of(double q, double sigma, int64_t steps, double delta)
{
    double e = NAN;
    rc_error err = {0};
    CHECKF(rc_dp_epsilon(q, sigma, steps, delta, &e, NULL, &err) == 0, "%s", err.msg);
    return e;
}

static void test_orders(void)
{
    const double *o;
    int n = rc_rdp_default_orders(&o);
    CHECKF(n == 156, "%d orders", n);
    CHECK(fabs(o[0] - 1.1) < 1e-12 && fabs(o[98] - 10.9) < 1e-12 && o[99] == 11.0 && o[151] == 63.0);
    CHECK(o[152] == 128.0 && o[155] == 1024.0);
    for (int i = 1; i < n; i++)
        CHECKF(o[i] > o[i - 1], "orders[%d] = %g after %g", i, o[i], o[i - 1]);
}

/* q = 1: the Gaussian mechanism, RDP alpha / (2 sigma^2) at every order */
static void test_gaussian(void)
{
    rc_error err = {0};
    double sigmas[] = {0.5, 1.0, 3.0, 20.0}, alphas[] = {1.5, 2.0, 7.3, 64.0, 1024.0};
    for (int s = 0; s < 4; s++)
        for (int a = 0; a < 5; a++) {
            double r = -1;
            CHECK(rc_rdp_subsampled_gaussian(1.0, sigmas[s], alphas[a], &r, &err) == 0);
            double want = alphas[a] / (2 * sigmas[s] * sigmas[s]);
            CHECKF(rel(r, want) < 1e-15, "sigma %g alpha %g: %g vs %g", sigmas[s], alphas[a], r, want);
        }
    /* epsilon: min over the grid of steps * a / (2 sigma^2) + log(1 - 1/a) - log(delta a) / (a - 1) */
    const double *o;
    int n = rc_rdp_default_orders(&o);
    int64_t steps[] = {1, 10, 1000};
    double deltas[] = {1e-5, 1e-8};
    for (int s = 0; s < 4; s++)
        for (int k = 0; k < 3; k++)
            for (int d = 0; d < 2; d++) {
                double sg = sigmas[s], dl = deltas[d], best = INFINITY, best_a = 0;
                for (int i = 0; i < n; i++) {
                    double a = o[i], r = steps[k] * a / (2 * sg * sg);
                    double e = dl * dl + expm1(-r) > 0 ? 0 : r + log(1 - 1 / a) - log(dl * a) / (a - 1);
                    if (e < best)
                        best = e, best_a = a;
                }
                double e = NAN, at = 0;
                CHECK(rc_dp_epsilon(1.0, sg, steps[k], dl, &e, &at, &err) == 0);
                CHECKF(rel(e, best) < 1e-12 && at == best_a, "sigma %g steps %lld delta %g: %g (order %g) vs %g (%g)",
                       sg, (long long)steps[k], dl, e, at, best, best_a);
            }
}

/* orders 2 and 3 in closed form: A_alpha = E_{i ~ Bin(alpha, q)} exp((i^2 - i) / (2 sigma^2)) */
static void test_binomial(void)
{
    rc_error err = {0};
    double qs[] = {1e-4, 0.01, 0.3, 0.9}, sigmas[] = {0.5, 1.1, 8.0};
    for (int i = 0; i < 4; i++)
        for (int s = 0; s < 3; s++) {
            double q = qs[i], p = 1 - q, e1 = exp(1 / (sigmas[s] * sigmas[s])), e3 = exp(3 / (sigmas[s] * sigmas[s]));
            /* the binomial weights sum to 1: A_2 = 1 + q^2 (e1 - 1), A_3 = 1 + 3 q^2 p (e1 - 1) + q^3 (e3 - 1) */
            double l2 = log1p(q * q * (e1 - 1)), l3 = log1p(3 * q * q * p * (e1 - 1) + q * q * q * (e3 - 1));
            double r2 = -1, r3 = -1;
            CHECK(rc_rdp_subsampled_gaussian(q, sigmas[s], 2.0, &r2, &err) == 0);
            CHECK(rc_rdp_subsampled_gaussian(q, sigmas[s], 3.0, &r3, &err) == 0);
            /* the sum of the terms' logs is exact to a few ulp of 1 (absolute), not relative
             * to A - 1: 1e-15 absolute for q = 1e-4 */
            CHECKF(fabs(r2 - l2) < 1e-9 * l2 + 1e-15, "q %g sigma %g order 2: %.17g vs %.17g", q, sigmas[s], r2, l2);
            CHECKF(fabs(r3 - l3 / 2) < 1e-9 * l3 + 1e-15, "q %g sigma %g order 3: %.17g vs %.17g", q, sigmas[s], r3,
                   l3 / 2);
        }
}

/* the fractional series just beside an integer order meets the binomial sum there */
static void test_fractional(void)
{
    rc_error err = {0};
    double qs[] = {1e-3, 0.02, 0.2}, sigmas[] = {0.8, 1.5, 5.0}, alphas[] = {2.0, 5.0, 12.0};
    for (int i = 0; i < 3; i++)
        for (int s = 0; s < 3; s++)
            for (int a = 0; a < 3; a++) {
                double r = -1, lo = -1, hi = -1, q = qs[i], sg = sigmas[s], al = alphas[a];
                CHECK(rc_rdp_subsampled_gaussian(q, sg, al, &r, &err) == 0);
                CHECK(rc_rdp_subsampled_gaussian(q, sg, al - 1e-7, &lo, &err) == 0);
                CHECK(rc_rdp_subsampled_gaussian(q, sg, al + 1e-7, &hi, &err) == 0);
                CHECKF(rel(lo, r) < 1e-4 && rel(hi, r) < 1e-4, "q %g sigma %g alpha %g: %.10g | %.10g | %.10g", q,
                       sg, al, lo, r, hi);
                /* RDP grows with the order (for small q: at q = 0.2 the fractional series just
                 * below 2 exceeds the integer sum at 2, in dp-accounting as here) */
                if (q > 0.1)
                    continue;
                CHECK(rc_rdp_subsampled_gaussian(q, sg, al - 0.05, &lo, &err) == 0);
                CHECK(rc_rdp_subsampled_gaussian(q, sg, al + 0.05, &hi, &err) == 0);
                CHECKF(lo < r && r < hi, "q %g sigma %g alpha %g +- 0.05: %.10g | %.10g | %.10g", q, sg, al, lo, r, hi);
            }
}

/* no overflow: terms of exp(alpha^2 / (2 sigma^2)) stay in log space */
static void test_range(void)
{
    rc_error err = {0};
    double qs[] = {1e-4, 0.01, 0.5, 0.999}, sigmas[] = {0.5, 2.0, 20.0}, alphas[] = {63.5, 256.0, 1024.0, 4096.0};
    for (int i = 0; i < 4; i++)
        for (int s = 0; s < 3; s++)
            for (int a = 0; a < 4; a++) {
                double r = NAN;
                CHECK(rc_rdp_subsampled_gaussian(qs[i], sigmas[s], alphas[a], &r, &err) == 0);
                /* at most the Gaussian's alpha / (2 sigma^2) (subsampling only helps); +inf
                 * only where a fractional series does not converge */
                double g = alphas[a] / (2 * sigmas[s] * sigmas[s]);
                CHECKF(r > 0 && (r <= g * (1 + 1e-12) || (isinf(r) && alphas[a] != floor(alphas[a]))),
                       "q %g sigma %g alpha %g: %g (Gaussian %g)", qs[i], sigmas[s], alphas[a], r, g);
            }
}

static void test_monotone(void)
{
    double prev = -1;
    int64_t steps[] = {0, 1, 10, 100, 1000, 100000};
    for (int k = 0; k < 6; k++) {
        double e = eps_of(0.01, 1.0, steps[k], 1e-5);
        CHECKF(k == 0 ? e == 0 : e > prev, "steps %lld: epsilon %g after %g", (long long)steps[k], e, prev);
        prev = e;
    }
    prev = INFINITY;
    double sigmas[] = {0.5, 0.7, 1.0, 2.0, 5.0, 20.0};
    for (int s = 0; s < 6; s++) {
        double e = eps_of(0.01, sigmas[s], 1000, 1e-5);
        CHECKF(e < prev, "sigma %g: epsilon %g after %g", sigmas[s], e, prev);
        prev = e;
    }
    prev = -1;
    double qs[] = {0.0, 1e-4, 1e-3, 0.01, 0.1, 0.5, 1.0};
    for (int i = 0; i < 7; i++) {
        double e = eps_of(qs[i], 1.0, 100, 1e-5);
        CHECKF(i == 0 ? e == 0 : e > prev, "q %g: epsilon %g after %g", qs[i], e, prev);
        prev = e;
    }
    /* a larger delta buys a smaller epsilon */
    CHECK(eps_of(0.01, 1.0, 1000, 1e-3) < eps_of(0.01, 1.0, 1000, 1e-5));
}

static void test_inverse(void)
{
    rc_error err = {0};
    double cases[][4] = {{0.01, 1000, 1e-5, 1.0}, {0.004, 15000, 1e-5, 3.0}, {1.0, 10, 1e-5, 2.0}, {0.2, 50, 1e-6, 10.0}};
    for (int i = 0; i < 4; i++) {
        double q = cases[i][0], dl = cases[i][2], target = cases[i][3], sg = NAN;
        int64_t steps = (int64_t)cases[i][1];
        CHECKF(rc_dp_sigma(q, steps, dl, target, &sg, &err) == 0, "%s", err.msg);
        double at = eps_of(q, sg, steps, dl), below = eps_of(q, sg * (1 - 1e-5), steps, dl);
        CHECKF(at <= target && below > target, "q %g: sigma %.9g gives %.9g, 1e-5 less gives %.9g (target %g)", q, sg,
               at, below, target);
    }
    /* q = 1, one step: epsilon(sigma) from the closed form falls through the target */
    double sg = NAN;
    CHECK(rc_dp_sigma(1.0, 1, 1e-5, 5.0, &sg, &err) == 0);
    CHECKF(eps_of(1.0, sg, 1, 1e-5) <= 5.0 && eps_of(1.0, sg * 0.99999, 1, 1e-5) > 5.0, "sigma %g", sg);
    /* out of reach: epsilon 1e-9 after a million full-batch steps */
    CHECK(rc_dp_sigma(1.0, 1000000, 1e-5, 1e-9, &sg, &err) == -1 && check_has(err.msg, "out of reach"));
}

static void test_errors(void)
{
    rc_error err = {0};
    double x;
    CHECK(rc_rdp_subsampled_gaussian(0.1, 0.0, 2.0, &x, &err) == -1 && check_has(err.msg, "sigma"));
    CHECK(rc_rdp_subsampled_gaussian(0.1, -1.0, 2.0, &x, &err) == -1 && err.code == RC_ERR_ARG);
    CHECK(rc_rdp_subsampled_gaussian(0.1, NAN, 2.0, &x, &err) == -1 && check_has(err.msg, "sigma"));
    CHECK(rc_rdp_subsampled_gaussian(0.1, INFINITY, 2.0, &x, &err) == -1 && check_has(err.msg, "sigma"));
    CHECK(rc_rdp_subsampled_gaussian(-0.1, 1.0, 2.0, &x, &err) == -1 && check_has(err.msg, "q = -0.1"));
    CHECK(rc_rdp_subsampled_gaussian(1.1, 1.0, 2.0, &x, &err) == -1 && check_has(err.msg, "[0, 1]"));
    CHECK(rc_rdp_subsampled_gaussian(NAN, 1.0, 2.0, &x, &err) == -1 && check_has(err.msg, "q = "));
    CHECK(rc_rdp_subsampled_gaussian(0.1, 1.0, 1.0, &x, &err) == -1 && check_has(err.msg, "alpha"));
    CHECK(rc_rdp_subsampled_gaussian(0.1, 1.0, 0.5, &x, &err) == -1 && check_has(err.msg, "alpha"));
    CHECK(rc_dp_epsilon(0.1, 1.0, 10, 0.0, &x, NULL, &err) == -1 && check_has(err.msg, "delta"));
    CHECK(rc_dp_epsilon(0.1, 1.0, 10, 1.0, &x, NULL, &err) == -1 && check_has(err.msg, "(0, 1)"));
    CHECK(rc_dp_epsilon(0.1, 1.0, 10, -1e-5, &x, NULL, &err) == -1 && check_has(err.msg, "delta"));
    CHECK(rc_dp_epsilon(0.1, 1.0, -1, 1e-5, &x, NULL, &err) == -1 && check_has(err.msg, "steps"));
    CHECK(rc_dp_epsilon(0.1, 0.0, 10, 1e-5, &x, NULL, &err) == -1 && check_has(err.msg, "sigma"));
    CHECK(rc_dp_epsilon(2.0, 1.0, 10, 1e-5, &x, NULL, &err) == -1 && check_has(err.msg, "q = 2"));
    CHECK(rc_dp_sigma(0.0, 10, 1e-5, 1.0, &x, &err) == -1 && check_has(err.msg, "(0, 1]"));
    CHECK(rc_dp_sigma(0.1, 0, 1e-5, 1.0, &x, &err) == -1 && check_has(err.msg, "steps"));
    CHECK(rc_dp_sigma(0.1, 10, 1.5, 1.0, &x, &err) == -1 && check_has(err.msg, "delta"));
    CHECK(rc_dp_sigma(0.1, 10, 1e-5, 0.0, &x, &err) == -1 && check_has(err.msg, "epsilon"));
    double o[] = {0.5}, r[] = {1.0};
    CHECK(rc_rdp_epsilon(o, r, 1, 1e-5, &x, NULL, &err) == -1 && check_has(err.msg, "orders[0]"));
    CHECK(rc_rdp_epsilon(o, r, 0, 1e-5, &x, NULL, &err) == -1 && check_has(err.msg, "orders"));
    /* q = 0 spends nothing, at every order */
    CHECK(rc_rdp_subsampled_gaussian(0.0, 1.0, 7.5, &x, &err) == 0 && x == 0.0);
}

int main(void)
{
    test_orders();
    test_gaussian();
    test_binomial();
    test_fractional();
    test_range();
    test_monotone();
    test_inverse();
    test_errors();
    return check_summary("privacy");
}
