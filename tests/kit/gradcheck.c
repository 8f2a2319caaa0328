/* gradcheck.c - builds f(inputs), the scalar L = sum(r * f) with a fixed random r, its
 * gradient through rc_backward, and compares it with central differences of L. For
 * order 2 the checked scalar is sum(r2 * dL/dx) (a gradient of a gradient). */
#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

/* used[id] = 1 for every node the n outputs depend on (a node's sources have lower ids).
 * A plan holds only those nodes: a leaf an output does not need cannot be set in it. */
static char *used_nodes(rc_graph *g, rc_tensor *const *outs, int n)
{
    int size = rc_graph_size(g);
    char *used = calloc((size_t)size, 1);
    if (!used)
        return NULL;
    for (int i = 0; i < n; i++)
        used[outs[i]->id] = 1;
    for (int id = size - 1; id >= 0; id--) {
        rc_tensor *t = rc_graph_node(g, id);
        if (!used[id])
            continue;
        for (int s = 0; s < t->nsrc; s++)
            if (t->src[s])
                used[t->src[s]->id] = 1;
        if (t->view_src)
            used[t->view_src->id] = 1;
    }
    return used;
}

/* Copies the host values of the leaves t[0..n) (a NULL ends the list) that plan p uses. */
static int set_inputs(rc_plan *p, const char *used, rc_tensor *const *t, void *const *data, int n,
                      rc_error *err)
{
    for (int i = 0; i < n && t[i]; i++)
        if (used[t[i]->id] && rc_plan_set_input(p, t[i], data[i], err))
            return -1;
    return 0;
}

/* The loss with leaf x set to the host values xd (x NULL: a leaf the loss does not use). */
static double eval_loss(rc_plan *p, rc_tensor *loss, const rc_tensor *x, const double *xd)
{
    rc_error err = {0};
    double l;
    if ((x && rc_plan_set_input(p, x, xd, &err)) || rc_plan_run(p, &err) ||
        rc_plan_read(p, loss, &l, &err)) {
        fprintf(stderr, "gradcheck: run failed: %s\n", err.msg);
        return NAN;
    }
    return l;
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
    char *used_g = NULL, *used_l = NULL;  /* the nodes of pg and of pl */
    for (int i = 0; i < c->nin; i++) {
        const gc_input *ci = &c->in[i];
        in[i] = rc_input(g, "x", ci->dtype, ci->ndim, ci->shape);
        data[i] = malloc(rc_tensor_nbytes(in[i]) + 8);
        fill(data[i], ci, rc_tensor_numel(in[i]), &rng);
    }
    rc_tensor *loss = checked_scalar(g, c, in, r, grads, &nwrt, wrt);
    if (!loss) {
        fprintf(stderr, "gradcheck %s: %s\n", c->name, rc_graph_error(g));
        goto done;
    }
    for (int i = 0; i < 1 + GC_MAX_IN && r[i]; i++) {
        rdata[i] = malloc(rc_tensor_nbytes(r[i]) + 8);
        fill(rdata[i], &(gc_input){.dtype = RC_F64}, rc_tensor_numel(r[i]), &rng);
    }
    rc_tensor *outs[1 + GC_MAX_IN] = {loss};
    for (int i = 0; i < nwrt; i++)
        outs[1 + i] = grads[i];
    rc_error err = {0};
    pg = rc_plan_new(g, outs, 1 + nwrt, &err);
    pl = rc_plan_new(g, &loss, 1, &err);
    used_g = used_nodes(g, outs, 1 + nwrt);
    used_l = used_nodes(g, &loss, 1);
    if (!used_g || !used_l) {
        fprintf(stderr, "gradcheck %s: out of memory\n", c->name);
        goto done;
    }
    if (!pg || !pl || set_inputs(pg, used_g, in, data, c->nin, &err) ||
        set_inputs(pg, used_g, r, rdata, 1 + GC_MAX_IN, &err) ||
        set_inputs(pl, used_l, in, data, c->nin, &err) ||
        set_inputs(pl, used_l, r, rdata, 1 + GC_MAX_IN, &err) || rc_plan_run(pg, &err)) {
        fprintf(stderr, "gradcheck %s: %s\n", c->name, err.msg);
        goto done;
    }
    double h = c->h > 0 ? c->h : 1e-6;
    worst = 0;
    for (int k = 0; k < nwrt; k++) {
        int64_t n = rc_tensor_numel(wrt[k]);
        double *x = NULL;
        for (int i = 0; i < c->nin; i++)
            if (in[i] == wrt[k])
                x = data[i];
        double *an = malloc((size_t)n * sizeof *an), scale = 1.0;
        if (!an || rc_plan_read(pg, grads[k], an, &err)) {
            fprintf(stderr, "gradcheck %s: %s\n", c->name, an ? err.msg : "out of memory");
            free(an);
            worst = -1;
            goto done;
        }
        for (int64_t i = 0; i < n; i++)
            scale = fmax(scale, fabs(an[i]));
        const rc_tensor *xl = used_l[wrt[k]->id] ? wrt[k] : NULL;
        for (int64_t i = 0; i < n; i++) {
            double x0 = x[i];
            x[i] = x0 + h;
            double lp = eval_loss(pl, loss, xl, x);
            x[i] = x0 - h;
            double lm = eval_loss(pl, loss, xl, x);
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
        /* the plan still holds the last point x - h: the next input is checked at x */
        if (xl && rc_plan_set_input(pl, xl, x, &err)) {
            fprintf(stderr, "gradcheck %s: %s\n", c->name, err.msg);
            worst = -1;
            goto done;
        }
    }
done:
    free(used_g);
    free(used_l);
    rc_plan_free(pg);
    rc_plan_free(pl);
    for (int i = 0; i < GC_MAX_IN; i++)
        free(data[i]);
    for (int i = 0; i < 1 + GC_MAX_IN; i++)
        free(rdata[i]);
    rc_graph_free(g);
    return worst;
}
