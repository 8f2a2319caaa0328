/* step.c - a recorded graph made runnable, the same way for training, evaluation,
 * prediction and generation:
 *
 *   record (the caller) -> partition for the model axis (with shards) -> backward pass
 *   (with gradients) -> plan memory on the backend -> parameters bound (by rc_params_get
 *   or the shards) -> run (the caller feeds inputs and reads outputs through the plan).
 */
#include "step.h"
#include "exec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void rci_step_free(rci_step *s)
{
    if (!s)
        return;
    rc_plan_free(s->plan);
    rc_shard_graph_free(&s->local);
    rc_graph_free(s->g);
    free(s->outs);
    free(s->grads);
    memset(s, 0, sizeof *s);
}

/* the run graph and its outputs: g itself, or this rank's share of it */
static int step_partition(rci_step *s, const rci_step_spec *spec, rci_sharded *shards, rc_error *err)
{
    if (!shards) {
        s->run = s->g;
        memcpy(s->outs, spec->outs, (size_t)spec->nout * sizeof *s->outs);
        return 0;
    }
    if (rci_sharded_partition(shards, s->g, spec->outs, spec->nout, spec->keep_split, spec->leaves,
                              &s->local, err))
        return -1;
    s->run = s->local.g;
    memcpy(s->outs, s->local.outs, (size_t)spec->nout * sizeof *s->outs);
    return 0;
}

/* the gradients of outs[0] with respect to the run graph's parameters */
static int step_backward(rci_step *s, const rci_step_spec *spec, rc_error *err)
{
    rc_tensor *const *params = s->local.g ? s->local.params : spec->leaves;
    if (rc_backward(s->run, s->outs[0], params, spec->n, s->grads))
        return rc_error_set(err, rc_graph_error_code(s->run), "backward: %s", rc_graph_error(s->run));
    return 0;
}

/* the plan of the outputs and gradients; with ZeRO stage 3 the parameters' units first, each
 * gradient's memory released once its unit's are all computed, then the units' schedule */
static rc_plan *step_plan(rci_step *s, const rci_step_spec *spec, rc_backend *be, rc_error *err)
{
    int nplan = spec->nout + (spec->with_grads ? spec->n : 0);
    if (!spec->gather)
        return rc_plan_new_on(be, s->run, s->outs, nplan, err);
    rci_gather_params gp = {s->local.g ? s->local.params : spec->leaves, spec->with_grads ? s->grads : NULL, spec->n,
                            spec->n + spec->nfrozen, spec->loff, spec->lnum, spec->nfrozen ? spec->split : INT64_MAX};
    return rci_gather_plan(spec->gather, be, s->run, s->outs, nplan, spec->nout, &gp, err);
}

int rci_step_build(rci_step *s, rc_graph *g, const rci_step_spec *spec, rci_sharded *shards,
                   rc_backend *be, rc_error *err)
{
    memset(s, 0, sizeof *s);
    s->g = g;
    s->nout = spec->nout;
    int nplan = spec->nout + (spec->with_grads ? spec->n : 0);
    s->outs = calloc((size_t)nplan + 1, sizeof *s->outs);
    s->grads = spec->with_grads ? calloc((size_t)spec->n + 1, sizeof *s->grads) : NULL;
    int rc = s->outs && (!spec->with_grads || s->grads) ? 0 : rc_error_set(err, RC_ERR_MEMORY, "step: out of memory");
    if (!rc)
        rc = step_partition(s, spec, shards, err);
    if (!rc && spec->with_grads)
        rc = step_backward(s, spec, err);
    if (!rc && spec->with_grads) /* planned after the outputs; s->outs keeps its nout */
        memcpy(s->outs + spec->nout, s->grads, (size_t)spec->n * sizeof *s->grads);
    if (!rc && !(s->plan = step_plan(s, spec, be, err)))
        rc = -1;
    if (rc) {
        rci_step_free(s);
        return -1;
    }
    if (shards)
        rc_plan_set_collective(s->plan, rc_comm_collective, shards->mesh->mp_comm);
    return 0;
}
