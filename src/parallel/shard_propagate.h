/* shard_propagate.h - the per-op transfer rules of the tensor-parallel rci_shard_analysis
 * (shard_propagate.c): one node's layout from its inputs', and the marks for the
 * partitioner. */
#ifndef REDCO_SHARD_PROPAGATE_H
#define REDCO_SHARD_PROPAGATE_H

#include "shard_internal.h"

/* Node y's state from its inputs' (visited in graph order), recording parameter splits
 * and the actions the partitioner takes on y's inputs. */
void rci_shard_propagate(rci_shard_analysis *p, rc_tensor *y);
/* After the pass: the inputs of column-parallel linears and the replicated activations
 * sliced to a shard go through mp_enter (col_input, ACT_ENTER). */
void rci_shard_mark_column_inputs(rci_shard_analysis *p);

#endif
