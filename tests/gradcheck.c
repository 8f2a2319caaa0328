/* gradcheck.c - builds f(inputs), the scalar L = sum(r * f) with a fixed random r, its
 * gradient through rc_backward, and compares it with central differences of L. For
 * order 2 the checked scalar is sum(r2 * dL/dx) (a gradient of a gradient). */
#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fill(void *data, const gc_input *in, int64_t n, rc_rng *rng)
{
    if (in->dtype == RC_I32) {
        int32_t *p = data;
        int range = in->id_max < 0 ? -in->id_max : in->id_max;
        for (int64_t i = 0; i < n; i++)
            p[i] = (int32_t)(rc_rng_next_u64(rng) % (uint64_t)range);
        if (in->id_max < 0 && n > 1)
            p[n / 2] = -100; /* an ignored target */
        return;
    }
    double *p = data;
    for (int64_t i = 0; i < n; i++) {
        double u = rc_rng_uniform(rng);
        if (in->binary)
            p[i] = u < 0.5 ? 0.0 : 1.0;
        else if (in->positive)
            p[i] = 0.5 + u;
        else
            p[i] = 2.0 * u - 1.0;
    }
}

/* The scalar to check and the gradients of it, for the differentiable inputs. */
static rc_tensor *checked_scalar(rc_graph *g, const gc_case *c, rc_tensor **in, rc_tensor **r,
                                 rc_tensor **grads, int *nwrt, rc_tensor **wrt)
{
    rc_tensor *f = c->build(g, in);
    if (!f)
        return NULL;
    r[0] = rc_input(g, "r", f->dtype, f->ndim, f->shape);
    rc_tensor *loss = rc_sum_all(g, rc_mul(g, f, r[0]));
    *nwrt = 0;
    for (int i = 0; i < c->nin; i++)
        if (!c->in[i].nograd)
            wrt[(*nwrt)++] = in[i];
    if (c->order == 2) {
        rc_tensor *g1[GC_MAX_IN];
        if (rc_backward(g, loss, wrt, *nwrt, g1))
            return NULL;
        rc_tensor *s = NULL;
        for (int i = 0; i < *nwrt; i++) {
            r[1 + i] = rc_input(g, "r2", g1[i]->dtype, g1[i]->ndim, g1[i]->shape);
            rc_tensor *term = rc_sum_all(g, rc_mul(g, g1[i], r[1 + i]));
            s = s ? rc_add(g, s, term) : term;
        }
        loss = s;
    }
    if (!loss || rc_backward(g, loss, wrt, *nwrt, grads))
        return NULL;
    return loss;
}

static double eval_loss(rc_plan *p, rc_tensor *loss)
{
    rc_error err = {0};
    if (rc_plan_run(p, &err)) {
        fprintf(stderr, "gradcheck: run failed: %s\n", err.msg);
        return NAN;
    }
    return *(double *)rc_tensor_data(loss);
}

double gc_run(const gc_case *c, int verbose)
{
    rc_graph *g = rc_graph_new();
    rc_tensor *in[GC_MAX_IN], *r[1 + GC_MAX_IN] = {0}, *grads[GC_MAX_IN], *wrt[GC_MAX_IN];
    void *data[GC_MAX_IN] = {0}, *rdata[1 + GC_MAX_IN] = {0};
    rc_rng rng = rc_rng_new(1234);
    int nwrt = 0;
    double worst = -1;
    rc_plan *pg = NULL, *pl = NULL;
    for (int i = 0; i < c->nin; i++) {
        const gc_input *ci = &c->in[i];
        in[i] = rc_input(g, "x", ci->dtype, ci->ndim, ci->shape);
        data[i] = malloc(rc_tensor_nbytes(in[i]) + 8);
        fill(data[i], ci, rc_tensor_numel(in[i]), &rng);
        rc_tensor_bind(in[i], data[i]);
    }
    rc_tensor *loss = checked_scalar(g, c, in, r, grads, &nwrt, wrt);
    if (!loss) {
        fprintf(stderr, "gradcheck %s: %s\n", c->name, rc_graph_error(g));
        goto done;
    }
    for (int i = 0; i < 1 + GC_MAX_IN && r[i]; i++) {
        rdata[i] = malloc(rc_tensor_nbytes(r[i]) + 8);
        fill(rdata[i], &(gc_input){.dtype = RC_F64}, rc_tensor_numel(r[i]), &rng);
        rc_tensor_bind(r[i], rdata[i]);
    }
    rc_tensor *outs[1 + GC_MAX_IN] = {loss};
    for (int i = 0; i < nwrt; i++)
        outs[1 + i] = grads[i];
    rc_error err = {0};
    pg = rc_plan_new(g, outs, 1 + nwrt, &err);
    pl = rc_plan_new(g, &loss, 1, &err);
    if (!pg || !pl || rc_plan_run(pg, &err)) {
        fprintf(stderr, "gradcheck %s: %s\n", c->name, err.msg);
        goto done;
    }
    double h = c->h > 0 ? c->h : 1e-6;
    worst = 0;
    for (int k = 0; k < nwrt; k++) {
        int64_t n = rc_tensor_numel(wrt[k]);
        double *x = rc_tensor_data(wrt[k]);
        double *an = malloc((size_t)n * sizeof *an), scale = 1.0;
        memcpy(an, rc_tensor_data(grads[k]), (size_t)n * sizeof *an);
        for (int64_t i = 0; i < n; i++)
            scale = fmax(scale, fabs(an[i]));
        for (int64_t i = 0; i < n; i++) {
            double x0 = x[i];
            x[i] = x0 + h;
            double lp = eval_loss(pl, loss);
            x[i] = x0 - h;
            double lm = eval_loss(pl, loss);
            x[i] = x0;
            double fd = (lp - lm) / (2 * h);
            double e = fabs(fd - an[i]) / scale;
            if (!(e <= worst))
                worst = isnan(e) ? INFINITY : fmax(worst, e);
            if (verbose && e > (c->tol > 0 ? c->tol : 1e-6))
                fprintf(stderr, "  %s input %d [%lld]: analytic %.10g, numeric %.10g\n", c->name, k,
                        (long long)i, an[i], fd);
        }
        free(an);
    }
done:
    rc_plan_free(pg);
    rc_plan_free(pl);
    for (int i = 0; i < GC_MAX_IN; i++)
        free(data[i]);
    for (int i = 0; i < 1 + GC_MAX_IN; i++)
        free(rdata[i]);
    rc_graph_free(g);
    return worst;
}
