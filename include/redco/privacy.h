/* redco/privacy.h - the privacy accounting of differentially private training (DP-SGD):
 * the Renyi differential privacy (RDP) of the Poisson-subsampled Gaussian mechanism
 * (Mironov, Talwar and Zhang 2019, "Renyi Differential Privacy of the Sampled Gaussian
 * Mechanism"), composed over training steps and converted to (epsilon, delta)-DP.
 *
 * One step samples each example with probability q, clips each example's gradient to L2
 * norm C and adds Gaussian noise of standard deviation sigma * C to their sum; sigma is
 * the noise multiplier. RDP adds over steps; epsilon at delta is the smallest over a grid
 * of orders alpha of the conversion of Canonne, Kamath and Steinke 2020 (Proposition 12
 * of arXiv:2004.00010 v4):
 *   epsilon(alpha) = steps * rdp(alpha) + log(1 - 1/alpha) - log(delta * alpha) / (alpha - 1)
 * (0 when delta^2 + expm1(-steps * rdp(alpha)) > 0, the KL bound), the grid being the
 * default orders of Google's dp-accounting RdpAccountant, so the figures compare. */
#ifndef REDCO_PRIVACY_H
#define REDCO_PRIVACY_H

#include "redco.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The default grid of orders: 1.1, 1.2, ..., 10.9, 11, 12, ..., 63, 128, 256, 512, 1024.
 * Sets *orders to the static array and returns its length. */
int rc_rdp_default_orders(const double **orders);

/* RDP of one step of the Poisson-subsampled Gaussian mechanism at order alpha > 1:
 * 0 for q = 0, alpha / (2 sigma^2) for q = 1, otherwise log(A_alpha) / (alpha - 1) with
 * A_alpha a binomial sum (integer alpha) or two series (fractional alpha), summed in log
 * space. A fractional order whose series does not converge gives +infinity (the order is
 * useless, not an error). Errors: q outside [0, 1], sigma <= 0, alpha <= 1, or any of
 * them not finite. Returns 0 or -1. */
int rc_rdp_subsampled_gaussian(double q, double sigma, double alpha, double *rdp, rc_error *err);

/* Epsilon of `steps` steps at delta in (0, 1), minimised over the default orders; *order
 * (when not NULL) gets the order reaching it. steps = 0 or q = 0 gives 0. Returns 0 or -1. */
int rc_dp_epsilon(double q, double sigma, int64_t steps, double delta, double *epsilon, double *order,
                  rc_error *err);

/* The conversion alone: epsilon at delta from the composed RDP rdp[i] at orders[i] (each
 * order >= 1; a negative or +infinite RDP is allowed). Returns 0 or -1. */
int rc_rdp_epsilon(const double *orders, const double *rdp, int n, double delta, double *epsilon,
                   double *order, rc_error *err);

/* The inverse: the smallest noise multiplier sigma (to a relative 1e-6) whose epsilon
 * after `steps` steps at delta is at most the target epsilon > 0, by bisection (epsilon
 * falls as sigma grows). Needs q in (0, 1] and steps >= 1; an error when even sigma = 1e6
 * does not reach the target; the search stops below at sigma ~ 2e-3 (a target met there
 * gives that sigma). Returns 0 or -1. */
int rc_dp_sigma(double q, int64_t steps, double delta, double epsilon, double *sigma, rc_error *err);

#ifdef __cplusplus
}
#endif

#endif
