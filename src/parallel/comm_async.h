/* comm_async.h - collectives started now and finished later, so that a step's kernels run
 * while they move (ZeRO stage 3 gathers the next layer's parameters while the current one
 * computes). Each is over a range of an n-element vector split over the ranks of a group in
 * contiguous shares (rc_comm_share), which ZeRO's state is. */
#ifndef REDCO_COMM_ASYNC_H
#define REDCO_COMM_ASYNC_H

#include "redco/dist.h"

typedef struct rci_comm_pending rci_comm_pending;

/* Starts the all-gather of elements [a, b) of an n-element vector of dtype t (f32, bf16 or
 * f16) whose rank shares over c are rc_comm_share(n, size, rank): this rank's part of the
 * range comes from `share` (which holds its share, element 0 at byte share_off being the
 * share's first), and every rank's part lands in dst from byte dst_off on (element a
 * there). Device buffers are staged through host memory. Returns the pending collective
 * (finish it with rci_comm_pending_wait on every rank, in the order started), or NULL with
 * err set. */
rci_comm_pending *rci_comm_gather_range_start(rc_comm *c, rc_buffer *share, size_t share_off, rc_buffer *dst,
                                              size_t dst_off, int64_t n, int64_t a, int64_t b, rc_dtype t,
                                              rc_error *err);
/* Waits for it (under the watchdog), puts staged values in place and frees it; NULL is
 * done at once. Returns 0 or -1 with err set (q is freed either way). */
int rci_comm_pending_wait(rci_comm_pending *q, rc_error *err);

#endif
