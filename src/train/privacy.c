/* privacy.c - Renyi-DP accounting of the Poisson-subsampled Gaussian mechanism (DP-SGD):
 * the RDP of one step at an order alpha, its composition over steps, the conversion to
 * (epsilon, delta) and the noise multiplier reaching a target epsilon. See
 * include/redco/privacy.h for the formulas and their sources. Everything is computed in
 * log space: the terms of A_alpha reach exp(alpha^2 / (2 sigma^2)), far past double's
 * range for alpha = 1024 and sigma = 0.5. */
#include "redco/privacy.h"

#include <math.h>

/* dp-accounting's DEFAULT_RDP_ORDERS: 1 + x / 10 for x = 1 .. 99 (each the double
 * nearest its decimal, as 1 + x / 10.0 computes it), 11 .. 63, 128, 256, 512, 1024 */
enum { N_ORDERS = 99 + 53 + 4 };
static const double default_orders[N_ORDERS] = {
    1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6, 2.7, 2.8, 2.9,
    3.0, 3.1, 3.2, 3.3, 3.4, 3.5, 3.6, 3.7, 3.8, 3.9, 4.0, 4.1, 4.2, 4.3, 4.4, 4.5, 4.6, 4.7, 4.8,
    4.9, 5.0, 5.1, 5.2, 5.3, 5.4, 5.5, 5.6, 5.7, 5.8, 5.9, 6.0, 6.1, 6.2, 6.3, 6.4, 6.5, 6.6, 6.7,
    6.8, 6.9, 7.0, 7.1, 7.2, 7.3, 7.4, 7.5, 7.6, 7.7, 7.8, 7.9, 8.0, 8.1, 8.2, 8.3, 8.4, 8.5, 8.6,
    8.7, 8.8, 8.9, 9.0, 9.1, 9.2, 9.3, 9.4, 9.5, 9.6, 9.7, 9.8, 9.9, 10.0, 10.1, 10.2, 10.3, 10.4,
    10.5, 10.6, 10.7, 10.8, 10.9, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0, 21.0,
    22.0, 23.0, 24.0, 25.0, 26.0, 27.0, 28.0, 29.0, 30.0, 31.0, 32.0, 33.0, 34.0, 35.0, 36.0, 37.0,
    38.0, 39.0, 40.0, 41.0, 42.0, 43.0, 44.0, 45.0, 46.0, 47.0, 48.0, 49.0, 50.0, 51.0, 52.0, 53.0,
    54.0, 55.0, 56.0, 57.0, 58.0, 59.0, 60.0, 61.0, 62.0, 63.0, 128.0, 256.0, 512.0, 1024.0,
};

int rc_rdp_default_orders(const double **orders)
{
    *orders = default_orders;
    return N_ORDERS;
}

/* log(exp(x) + exp(y)), with -inf as log 0 */
static double log_add(double x, double y)
{
    double lo = x < y ? x : y, hi = x < y ? y : x;
    if (lo == -INFINITY)
        return hi;
    return hi + log1p(exp(lo - hi));
}

/* log |binomial(n, k)| for real n, k (log|Gamma| through lgamma) */
static double log_binom(double n, double k)
{
    return lgamma(n + 1.0) - lgamma(k + 1.0) - lgamma(n - k + 1.0);
}

/* log(erfc(x)), also where erfc(x) underflows (x > 26.5): there the asymptotic series
 * erfc(x) ~ exp(-x^2) / (x sqrt(pi)) * (1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6) + ...), whose
 * truncation error is below 1e-9 relative for such x. */
static double log_erfc(double x)
{
    double r = erfc(x);
    if (r > 0.0)
        return log(r);
    double u = 1.0 / (2.0 * x * x);
    return -x * x - log(x) - 0.57236494292470008 /* log(pi) / 2 */ + log1p(-u + 3.0 * u * u - 15.0 * u * u * u);
}

/* log A_alpha for integer alpha >= 2, 0 < q < 1:
 * A = sum_{i=0}^{alpha} binom(alpha, i) q^i (1-q)^(alpha-i) exp((i^2 - i) / (2 sigma^2)) */
static double log_a_int(double q, double sigma, int alpha)
{
    double lq = log(q), l1q = log1p(-q), s2 = 2.0 * sigma * sigma;
    double acc = -INFINITY;
    for (int i = 0; i <= alpha; i++) {
        double t = log_binom(alpha, i) + i * lq + (alpha - i) * l1q + ((double)i * i - i) / s2;
        acc = log_add(acc, t);
    }
    return acc;
}

/* log A_alpha for fractional alpha, 0 < q < 1: the two series of Mironov et al. 2019
 * (Section 3.3), over the integrals left and right of z0 = sigma^2 log(1/q - 1) + 1/2,
 * summed until both terms decrease and are 30 nats below the total. +inf when 1000
 * terms do not converge. */
static double log_a_frac(double q, double sigma, double alpha)
{
    double lq = log(q), l1q = log1p(-q), s2 = 2.0 * sigma * sigma, rs = sqrt(2.0) * sigma;
    double z0 = sigma * sigma * log(1.0 / q - 1.0) + 0.5;
    double a0 = -INFINITY, a1 = -INFINITY, last0 = -INFINITY, last1 = -INFINITY;
    for (int i = 0; i < 1000; i++) {
        double c = log_binom(alpha, i), j = alpha - i;
        double t0 = c + i * lq + j * l1q, t1 = c + j * lq + i * l1q;
        double e0 = log(0.5) + log_erfc((i - z0) / rs), e1 = log(0.5) + log_erfc((z0 - j) / rs);
        double s0 = t0 + ((double)i * i - i) / s2 + e0;
        double s1 = t1 + (j * j - j) / s2 + e1;
        a0 = log_add(a0, s0);
        a1 = log_add(a1, s1);
        double total = log_add(a0, a1);
        if (s0 < last0 && s1 < last1 && fmax(s0, s1) < total - 30.0)
            return total;
        last0 = s0;
        last1 = s1;
    }
    return INFINITY;
}

static int check_q_sigma(double q, double sigma, const char *fn, rc_error *err)
{
    if (!(q >= 0.0 && q <= 1.0))
        return rc_error_set(err, RC_ERR_ARG, "%s: sampling rate q = %g is outside [0, 1]", fn, q);
    if (!(sigma > 0.0) || !isfinite(sigma))
        return rc_error_set(err, RC_ERR_ARG, "%s: noise multiplier sigma = %g must be positive and finite", fn,
                            sigma);
    return 0;
}

static int check_delta(double delta, const char *fn, rc_error *err)
{
    if (!(delta > 0.0 && delta < 1.0))
        return rc_error_set(err, RC_ERR_ARG, "%s: delta = %g is outside (0, 1)", fn, delta);
    return 0;
}

/* the RDP of one step, arguments already checked */
static double rdp_one(double q, double sigma, double alpha)
{
    if (q == 0.0)
        return 0.0;
    if (q == 1.0)
        return alpha / (2.0 * sigma * sigma);
    double la = alpha == floor(alpha) && alpha <= 1e6 ? log_a_int(q, sigma, (int)alpha) : log_a_frac(q, sigma, alpha);
    return la / (alpha - 1.0);
}

int rc_rdp_subsampled_gaussian(double q, double sigma, double alpha, double *rdp, rc_error *err)
{
    if (check_q_sigma(q, sigma, "rc_rdp_subsampled_gaussian", err))
        return -1;
    if (!(alpha > 1.0) || !isfinite(alpha))
        return rc_error_set(err, RC_ERR_ARG, "rc_rdp_subsampled_gaussian: order alpha = %g must be finite and > 1",
                            alpha);
    *rdp = rdp_one(q, sigma, alpha);
    return 0;
}

/* epsilon of one order's composed RDP r at delta (checked) */
static double epsilon_one(double alpha, double r, double delta)
{
    if (r < 0.0)
        return 0.0;                     /* numerical noise of an extreme event */
    if (delta * delta + expm1(-r) > 0.0)
        return 0.0;                     /* delta <= sqrt(1 - exp(-KL)) already */
    if (alpha > 1.01)                   /* the bound is unstable as alpha -> 1 */
        return r + log1p(-1.0 / alpha) - log(delta * alpha) / (alpha - 1.0);
    return INFINITY;
}

int rc_rdp_epsilon(const double *orders, const double *rdp, int n, double delta, double *epsilon,
                   double *order, rc_error *err)
{
    if (check_delta(delta, "rc_rdp_epsilon", err))
        return -1;
    if (n < 1)
        return rc_error_set(err, RC_ERR_ARG, "rc_rdp_epsilon: %d orders (need at least 1)", n);
    double best = INFINITY, at = orders[0];
    for (int i = 0; i < n; i++) {
        if (!(orders[i] >= 1.0))
            return rc_error_set(err, RC_ERR_ARG, "rc_rdp_epsilon: orders[%d] = %g is below 1", i, orders[i]);
        if (isnan(rdp[i]))
            return rc_error_set(err, RC_ERR_ARG, "rc_rdp_epsilon: rdp[%d] is NaN", i);
        double e = epsilon_one(orders[i], rdp[i], delta);
        if (e < best) {
            best = e;
            at = orders[i];
        }
    }
    *epsilon = best > 0.0 ? best : 0.0;
    if (order)
        *order = at;
    return 0;
}

/* epsilon of checked arguments */
static double epsilon_of(double q, double sigma, int64_t steps, double delta, double *order)
{
    const double *orders;
    int n = rc_rdp_default_orders(&orders);
    double rdp[N_ORDERS], eps = INFINITY;
    for (int i = 0; i < n; i++) /* no steps: 0, also where one step's RDP is +inf */
        rdp[i] = steps == 0 ? 0.0 : (double)steps * rdp_one(q, sigma, orders[i]);
    if (rc_rdp_epsilon(orders, rdp, n, delta, &eps, order, NULL))
        return NAN;
    return eps;
}

int rc_dp_epsilon(double q, double sigma, int64_t steps, double delta, double *epsilon, double *order,
                  rc_error *err)
{
    if (check_q_sigma(q, sigma, "rc_dp_epsilon", err) || check_delta(delta, "rc_dp_epsilon", err))
        return -1;
    if (steps < 0)
        return rc_error_set(err, RC_ERR_ARG, "rc_dp_epsilon: steps = %lld is negative", (long long)steps);
    *epsilon = epsilon_of(q, sigma, steps, delta, order);
    return 0;
}

int rc_dp_sigma(double q, int64_t steps, double delta, double epsilon, double *sigma, rc_error *err)
{
    const char *fn = "rc_dp_sigma";
    if (!(q > 0.0 && q <= 1.0))
        return rc_error_set(err, RC_ERR_ARG, "%s: sampling rate q = %g is outside (0, 1]", fn, q);
    if (check_delta(delta, fn, err))
        return -1;
    if (steps < 1)
        return rc_error_set(err, RC_ERR_ARG, "%s: steps = %lld (need at least 1)", fn, (long long)steps);
    if (!(epsilon > 0.0) || !isfinite(epsilon))
        return rc_error_set(err, RC_ERR_ARG, "%s: target epsilon = %g must be positive and finite", fn, epsilon);
    /* epsilon falls as sigma grows: bracket the target, lo too little noise, hi enough */
    double lo = 0.5, hi = 1.0;
    while (epsilon_of(q, hi, steps, delta, NULL) > epsilon) {
        lo = hi;
        hi *= 2.0;
        if (hi > 1e6)
            return rc_error_set(err, RC_ERR_ARG,
                                "%s: epsilon %g at delta %g after %lld steps at q = %g is out of reach even "
                                "with sigma = 1e6", fn, epsilon, delta, (long long)steps, q);
    }
    if (hi == 1.0) {
        lo = 1.0;
        while (lo > 1e-3 && epsilon_of(q, lo, steps, delta, NULL) <= epsilon) {
            hi = lo;
            lo /= 2.0;
        }
        if (lo <= 1e-3) { /* even sigma = 1e-3 is enough */
            *sigma = hi;
            return 0;
        }
    }
    while (hi - lo > 1e-6 * hi) {
        double mid = 0.5 * (lo + hi);
        if (epsilon_of(q, mid, steps, delta, NULL) > epsilon)
            lo = mid;
        else
            hi = mid;
    }
    *sigma = hi;
    return 0;
}
