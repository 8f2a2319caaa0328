/* shard_report.h - what the tensor-parallel plan reports (shard_report.c): the tally of
 * collectives one training step costs (rc_shard_comm, printed by `redco plan`) and the
 * error naming the parameters a shard count does not divide. */
#ifndef REDCO_SHARD_REPORT_H
#define REDCO_SHARD_REPORT_H

#include "shard_internal.h"

/* the parameters whose groups the shard count did not divide, for the error */
typedef struct {
    int64_t groups[64];          /* their group counts (the first 64) */
    int n;
    char names[400];             /* "NAME (G groups), ..." */
    size_t used;
} rci_shard_undivided;

/* one forward all-reduce of tensor t (a partial sum made whole) */
void rci_shard_count_allreduce(rci_shard_analysis *p, const rc_tensor *t);
/* the vocabulary-parallel cross-entropy over logits: three all-reduces per row (the row
 * max, the sum of exponentials, the target logit) */
void rci_shard_count_vocab_loss(rci_shard_analysis *p, const rc_tensor *logits);
/* the gathers the partitioner will run (once per tensor that ends up split where a
 * consumer needs it whole) */
void rci_shard_count_gathers(rci_shard_analysis *p);
/* the backward all-reduces: the input gradients of column-parallel layers (Megatron's f),
 * where a gradient flows */
void rci_shard_count_backward(rci_shard_analysis *p);

void rci_shard_undivided_add(rci_shard_undivided *u, const char *name, int64_t groups);
/* the error for mp shards not dividing u's parameters, with the shard counts that would */
int rci_shard_undivided_error(const rci_shard_undivided *u, int mp, rc_error *err);

#endif
