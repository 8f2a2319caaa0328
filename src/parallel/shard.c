/* shard.c - the public entry points of the tensor-parallel plan (see redco/shard.h):
 * planning a graph, the caller's overrides, a parameter's local shape and a role's name.
 *
 * How the plan is made, part by part (each calls only the parts below it):
 *   shard_analysis.c   rounds over the graph until every split divides; the plan for
 *                      the partitioner (partition.c)
 *   shard_propagate.c  the rule of each op: how a layout passes from inputs to output
 *   shard_report.c     the collectives the plan costs (rc_shard_comm) and its errors
 *   shard_layout.c     the layout rules: candidates chosen, parameter splits recorded
 * Every activation of the forward graph gets a state: replicated, a partial sum, split on
 * one axis, or split-any: the output of a column-parallel linear whose granularity is not
 * decided yet. A split-any keeps candidates, sub-axes of the current tensor that its
 * features are spread over (after reshapes: q/k/v, heads, head_dim); each candidate says
 * where it sits in the current axis ([c_outer, groups, c_inner]) and in the linear's
 * output features ([o_outer, groups, o_inner]). The first op that needs a choice makes it:
 * attention picks a batch axis (the heads), a linear contracting over the features picks
 * the whole axis, norms / softmax / rotary rule out their inner axis.
 * This file calls the analysis (rci_shard_plan_run) and the check of a fixed split. */
#include "shard_layout.h"

#include <string.h>

int rc_shard_plan(rc_graph *g, rc_tensor *out, rc_tensor *const *params, int n, int mp,
                  int allow_replicate, rc_shard_spec *specs, rc_shard_comm *comm, rc_error *err)
{
    return rci_shard_plan_run(g, &out, 1, params, n, mp, allow_replicate, specs, comm, NULL, err);
}

int rc_shard_fix(rc_shard_spec *s, const rc_tensor *param, int axis, int64_t groups, int mp, rc_error *err)
{
    if (!s || !param)
        return rc_error_set(err, RC_ERR_ARG, "plan: an override needs a spec and its parameter");
    memset(s, 0, sizeof *s);
    s->fixed = 1;
    s->axis = axis < 0 ? -1 : axis;
    if (axis >= param->ndim)
        return rc_error_set(err, RC_ERR_ARG, "plan: %s has %d axes; no axis %d to split", param->name, param->ndim, axis);
    if (axis >= 0) {
        int64_t ext = param->shape[axis];
        s->groups = groups > 0 ? groups : ext;
        if (ext % s->groups)
            return rc_error_set(err, RC_ERR_ARG, "plan: axis %d of %s (%lld) is not a multiple of %lld groups",
                                axis, param->name, (long long)ext, (long long)s->groups);
        s->outer = 1;
        s->inner = ext / s->groups;
    }
    return rci_shard_check_fixed(s, param, mp, err);
}

int rc_shard_apply(rc_shard_spec *specs, rc_tensor *const *params, int n, const rc_shard_override *o,
                   int n_overrides, int mp, rc_error *err)
{
    for (int k = 0; k < n_overrides; k++) {
        int i = 0;
        while (i < n && !(params[i] && o[k].param && !strcmp(params[i]->name, o[k].param)))
            i++;
        if (i == n)
            return rc_error_set(err, RC_ERR_ARG, "plan: the override names '%s', which is no parameter the graph uses",
                                o[k].param ? o[k].param : "(null)");
        if (rc_shard_fix(&specs[i], params[i], o[k].axis, o[k].groups, mp, err))
            return -1;
    }
    return 0;
}

void rc_shard_local_shape(const rc_shard_spec *s, const rc_tensor *param, int mp, int64_t *shape)
{
    for (int i = 0; i < param->ndim; i++)
        shape[i] = param->shape[i];
    if (s->axis >= 0)
        shape[s->axis] = s->outer * (s->padded_groups / mp) * s->inner;
}

const char *rc_shard_role_name(rc_shard_role r)
{
    static const char *names[] = {"replicated", "column", "row", "vocab", "bias"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "?";
}
