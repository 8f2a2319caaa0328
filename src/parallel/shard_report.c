/* shard_report.c - what the tensor-parallel plan reports: the collectives one training
 * step costs on the model axis (rc_shard_comm, which `redco plan` prints in text or JSON
 * from tools/cmd_plan.c): forward all-reduces of partial sums, the vocabulary-parallel
 * cross-entropy's all-reduces, the gathers of tensors an op cannot use split, the
 * backward all-reduces of column-parallel inputs, and their bytes. It also words the
 * error for a shard count that does not divide some parameters, listing the counts that
 * would. The propagation (shard_propagate.c) and the analysis (shard_analysis.c) call it;
 * it calls the layout rules (shard_layout.c) to see how a tensor ends up split. */
#include "shard_report.h"
#include "shard_layout.h"

#include <stdio.h>
#include <stdlib.h>

static int64_t numel_bytes(const rc_tensor *t)
{
    return rc_tensor_numel(t) * 4;
}

void rci_shard_count_allreduce(rci_shard_analysis *p, const rc_tensor *t)
{
    p->comm.allreduce_fwd++;
    p->comm.bytes_fwd += (double)numel_bytes(t);
}

void rci_shard_count_vocab_loss(rci_shard_analysis *p, const rc_tensor *logits)
{
    int64_t rows = rc_tensor_numel(logits) / logits->shape[logits->ndim - 1];
    p->comm.allreduce_fwd += 3;
    p->comm.bytes_fwd += 3.0 * (double)rows * 4;
}

void rci_shard_count_gathers(rci_shard_analysis *p)
{
    char *seen = calloc((size_t)p->last + 1, 1);
    for (int i = 0; seen && i <= p->last; i++) {
        const rc_tensor *y = rc_graph_node(p->g, i);
        for (int k = 0; k < y->nsrc; k++) {
            const rc_tensor *x = y->src[k];
            if (!x || !(p->act[i * RC_MAX_SRC + k] & ACT_GATHER) || seen[x->id])
                continue;
            rci_shard_state s = p->st[x->id];
            rci_shard_finalize_state(p, &s);
            if (s.kind == ST_SPLIT) {
                seen[x->id] = 1;
                p->comm.allgather_fwd++;
                p->comm.bytes_fwd += (double)numel_bytes(x);
            }
        }
    }
    free(seen);
}

void rci_shard_count_backward(rci_shard_analysis *p)
{
    /* a backward all-reduce only where a gradient flows: inputs that depend on parameters */
    char *grads = calloc((size_t)p->last + 1, 1);
    for (int i = 0; grads && i <= p->last; i++) {
        const rc_tensor *t = rc_graph_node(p->g, i);
        grads[i] = p->param_of[i] >= 0;
        for (int k = 0; k < t->nsrc && !grads[i]; k++)
            grads[i] = t->src[k] && grads[t->src[k]->id];
    }
    for (int i = 0; grads && i <= p->last; i++)
        if (p->col_input[i] && grads[i]) {
            p->comm.allreduce_bwd++;
            p->comm.bytes_bwd += (double)numel_bytes(rc_graph_node(p->g, i));
        }
    free(grads);
}

void rci_shard_undivided_add(rci_shard_undivided *u, const char *name, int64_t groups)
{
    if (u->n < 64)
        u->groups[u->n++] = groups;
    u->used += (size_t)snprintf(u->names + u->used, u->used < sizeof u->names ? sizeof u->names - u->used : 0,
                                "%s%s (%lld groups)", u->used ? ", " : "", name, (long long)groups);
}

/* "1, 2, 4": the shard counts that divide every one of n group counts */
static void workable(const int64_t *groups, int n, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = 0;
    for (int64_t d = 1; d <= groups[0] && used < size; d++) {
        int ok = 1;
        for (int i = 0; i < n && ok; i++)
            ok = groups[i] % d == 0;
        if (ok)
            used += (size_t)snprintf(buf + used, size - used, "%s%lld", used ? ", " : "", (long long)d);
    }
}

int rci_shard_undivided_error(const rci_shard_undivided *u, int mp, rc_error *err)
{
    char ok[256];
    workable(u->groups, u->n, ok, sizeof ok);
    return rc_error_set(err, RC_ERR_SHAPE,
                        "tensor parallelism: %d model shards do not divide %s; shard counts that would: %s "
                        "(or allow replicating those weights: --allow-replicate)", mp, u->names, ok);
}
