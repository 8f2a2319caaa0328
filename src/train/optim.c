/* optim.c - the public optimizer steps: checks, then one update on the buffers' backend
 * (the trainer builds its own update over all parameters at once). */
#include "internal.h"
#include "backend.h"

/* every buffer present, of one backend, holding n f32 from element at */
static int check_buffers(const char *what, rc_buffer *const *b, int nb, int64_t at, int64_t n,
                         rc_error *err)
{
    if (at < 0 || n < 0)
        return rc_error_set(err, RC_ERR_ARG, "%s: elements [%lld, %lld)", what, (long long)at,
                            (long long)(at + n));
    for (int i = 0; i < nb; i++) {
        if (!b[i])
            return rc_error_set(err, RC_ERR_ARG, "%s: buffer %d is NULL", what, i);
        if (b[i]->be != b[0]->be)
            return rc_error_set(err, RC_ERR_ARG, "%s: buffers on %s and %s", what, b[0]->be->name,
                                b[i]->be->name);
        if ((size_t)(at + n) * sizeof(float) > b[i]->size)
            return rc_error_set(err, RC_ERR_ARG, "%s: elements [%lld, %lld) outside buffer %d of %zu bytes",
                                what, (long long)at, (long long)(at + n), i, b[i]->size);
    }
    return 0;
}

int rc_sgd_update(rc_buffer *w, rc_buffer *grad, int64_t at, int64_t n, double lr, rc_error *err)
{
    rc_buffer *b[2] = {w, grad};
    if (check_buffers("sgd", b, 2, at, n, err))
        return -1;
    rci_update_part part = {at, n, 0.0};
    rci_update u = {w, grad, NULL, NULL, &part, 1, lr, 0, 0, 0, 1, 1.0, 0, 0, 0};
    return w->be->update(w->be, &u, err);
}

int rc_adamw_update(rc_buffer *w, rc_buffer *grad, rc_buffer *m, rc_buffer *v, int64_t at, int64_t n,
                    const rc_adam *opt, rc_error *err)
{
    rc_buffer *b[4] = {w, grad, m, v};
    if (!opt || opt->step < 1)
        return rc_error_set(err, RC_ERR_ARG, "adamw: step %lld (counted from 1)",
                            opt ? (long long)opt->step : 0LL);
    if (check_buffers("adamw", b, 4, at, n, err))
        return -1;
    rci_update_part part = {at, n, opt->weight_decay};
    rci_update u = {w, grad, m, v, &part, 1, opt->lr, opt->beta1, opt->beta2, opt->eps, opt->step, 1.0, 1, 0, 0};
    return w->be->update(w->be, &u, err);
}
