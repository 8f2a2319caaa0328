/* gradcheck.h - finite-difference checks of rc_backward in double precision. */
#ifndef REDCO_GRADCHECK_H
#define REDCO_GRADCHECK_H

#include "redco.h"

enum { GC_MAX_IN = 8 };

/* How one input of a checked function is made. */
typedef struct {
    rc_dtype dtype;               /* RC_F64, or RC_I32 for ids */
    int ndim;
    int64_t shape[4];
    int nograd;                   /* constant input: not differentiated (ids, masks, conditions) */
    int positive;                 /* values in [0.5, 1.5] (log, sqrt, divisors) */
    int id_max;                   /* ids in [0, id_max); -1 entries allowed when id_max < 0 */
    int binary;                   /* values 0 or 1 */
} gc_input;

typedef rc_tensor *(*gc_build_fn)(rc_graph *g, rc_tensor **in);

typedef struct {
    const char *name;
    int nin;
    gc_input in[GC_MAX_IN];
    gc_build_fn build;
    int order;                    /* 1: gradient of sum(r * f); 2: gradient of sum(r2 * grad) */
    double h, tol;                /* 0: defaults 1e-6 and 1e-6 (relative to the gradient's max) */
} gc_case;

/* Runs one case; returns the largest error relative to max(|grad|, 1) (or -1 on error). */
double gc_run(const gc_case *c, int verbose);

#endif
