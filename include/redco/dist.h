/* redco/dist.h - processes, the device mesh and collectives over MPI.
 *
 * Ranks form a mesh of dp x mp: consecutive ranks make one model-parallel group, so rank
 * r sits at data-parallel index r / mp and model-parallel index r % mp. A program started
 * without a launcher (no mpirun, srun) runs as a world of one without initialising MPI.
 * Every collective reports errors through rc_error; none aborts. */
#ifndef REDCO_DIST_H
#define REDCO_DIST_H

#include "redco.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rc_comm rc_comm;

typedef struct {
    int rank, size;               /* in the world */
    int dp, mp;                   /* mesh shape: size = dp * mp */
    int dp_rank, mp_rank;         /* this rank's coordinates */
    rc_comm *world;
    rc_comm *dp_comm;             /* ranks with the same mp_rank (gradient averaging) */
    rc_comm *mp_comm;             /* ranks with the same dp_rank (tensor parallelism) */
} rc_mesh;

/* Starts MPI when a launcher started this process (mpirun, mpiexec, srun). Safe to call
 * more than once; an error once MPI was finalized (it cannot start again). */
int rc_dist_init(int *argc, char ***argv, rc_error *err);
/* 1 when a launcher started this process. */
int rc_dist_launched(void);
/* This process's rank in the world (0 without a launcher, before rc_dist_init or after
 * finalizing). */
int rc_dist_rank(void);
/* The number of processes in the world (1 without a launcher, before rc_dist_init or
 * after finalizing). */
int rc_dist_size(void);
/* Stop notices forwarded by redco's `--nproc` launcher (tools/launch.c): it runs mpiexec,
 * which ends the job on SIGINT and SIGTERM but passes SIGUSR1 and SIGUSR2 on to every rank,
 * and sends it SIGUSR1 for the SIGTERM and SIGUSR2 for the SIGINT it received.
 * rc_dist_signals_forwarded: 1 in a rank of such a job (REDCO_LAUNCHER in the environment
 * and a launcher started the process); rc_dist_stop_signal: the signal a received one stands
 * for there (SIGUSR1 -> SIGTERM, SIGUSR2 -> SIGINT, any other itself; async-signal-safe). */
int rc_dist_signals_forwarded(void);
int rc_dist_stop_signal(int sig);
/* A stop signal that comes within RC_STOP_REPEAT_MS of the first is a copy of it, not a
 * second signal: mpiexec and srun pass on the SIGTERM they receive while a scheduler sends
 * its own to every process of the job (Slurm, in no set order). A signal after that window
 * (a second Ctrl-C) ends the process at once. The trainer's stop and redco's launcher both
 * count signals this way. */
enum { RC_STOP_REPEAT_MS = 2000 };
/* Finalizes MPI when it is running; does nothing otherwise (no launcher, or finalized
 * already, e.g. by rc_deployer_free). */
void rc_dist_finalize(void);

/* The mesh of all ranks with mp model shards; mp must divide the world size (the error
 * says which mp values would work). */
int rc_mesh_init(rc_mesh *m, int mp, rc_error *err);
/* A mesh of this process alone (1 x 1), whatever launched it. */
int rc_mesh_init_local(rc_mesh *m, rc_error *err);
void rc_mesh_free(rc_mesh *m);

int rc_comm_rank(const rc_comm *c);
int rc_comm_size(const rc_comm *c);
/* In-place sum over the ranks of c. */
int rc_comm_allreduce_sum_f32(rc_comm *c, float *data, int64_t n, rc_error *err);
int rc_comm_allreduce_sum_f64(rc_comm *c, double *data, int64_t n, rc_error *err);
int rc_comm_allreduce_max_f64(rc_comm *c, double *data, int64_t n, rc_error *err);
int rc_comm_allreduce_max_f32(rc_comm *c, float *data, int64_t n, rc_error *err);
/* Collectives on backend buffers: host memory (the CPU backend's) goes to MPI as it is;
 * device memory is staged through host memory. n elements (bytes for bcast) at byte
 * `offset` of buf, in place. */
/* sum (op 0) or max (op 1) of f32, f64, bf16 or f16 over the ranks of c (16-bit values reduced
 * in f32 and rounded back once) */
int rc_comm_allreduce_buffer(rc_comm *c, rc_buffer *buf, size_t offset, int64_t n, rc_dtype t, int op,
                             rc_error *err);
/* A plan's collective callback (rc_plan_set_collective) over communicator ctx. */
int rc_comm_collective(void *ctx, rc_buffer *buf, size_t offset, int64_t n, rc_dtype t, int op,
                       rc_error *err);
/* The mean over the ranks of n f32, in buckets of at most bucket floats (0: one bucket). */
int rc_comm_allreduce_mean_f32(rc_comm *c, rc_buffer *buf, size_t offset, int64_t n, int64_t bucket,
                               rc_error *err);
/* Rank `rank`'s share of n elements split over size ranks, [lo, hi) = [n rank / size,
 * n (rank + 1) / size): contiguous, in rank order, sizes differing by at most one. */
void rc_comm_share(int64_t n, int size, int rank, int64_t *lo, int64_t *hi);
/* Reduce-scatter of the mean of n f32 at byte `offset` of buf: afterwards each rank's own
 * share (rc_comm_share) holds, at its place, the mean over the ranks of that share; the
 * rest of the n is left undefined. In buckets of at most `bucket` floats (0: one), which
 * bounds the host memory that stages device buffers. */
int rc_comm_reduce_scatter_mean_f32(rc_comm *c, rc_buffer *buf, size_t offset, int64_t n, int64_t bucket,
                                    rc_error *err);
/* The same for one window of the vector: buf at byte `offset` holds elements [at, at + len)
 * of an n-element vector (len below MPI's int counts); afterwards this rank's share of the n
 * (rc_comm_share) clipped to the window holds, at its place, the mean over the ranks; the
 * rest of the window is left undefined. Every rank passes the same n, at and len (ZeRO
 * stage 2 fills a window from its gradient outputs, then keeps its part). */
int rc_comm_reduce_scatter_window_mean_f32(rc_comm *c, rc_buffer *buf, size_t offset, int64_t n, int64_t at,
                                           int64_t len, rc_error *err);
/* All-gather in place of n f32 at byte `offset` of buf: every rank's share (rc_comm_share)
 * goes to the same place on every rank. Bucketed as above. */
int rc_comm_allgather_f32(rc_comm *c, rc_buffer *buf, size_t offset, int64_t n, int64_t bucket, rc_error *err);
/* The same for n elements of dtype t (f32, bf16 or f16: 16-bit words move as 2 bytes). */
int rc_comm_allgather(rc_comm *c, rc_buffer *buf, size_t offset, int64_t n, rc_dtype t, int64_t bucket,
                      rc_error *err);
int rc_comm_bcast_buffer(rc_comm *c, rc_buffer *buf, size_t offset, size_t bytes, int root,
                         rc_error *err);
int rc_comm_bcast(rc_comm *c, void *data, size_t bytes, int root, rc_error *err);
int rc_comm_barrier(rc_comm *c, rc_error *err);
/* Gathers each rank's bytes to root: *out (malloc'ed on root) holds rank 0's bytes, then
 * rank 1's, ...; counts[r] (root only, size entries) the byte count of rank r. */
int rc_comm_gather(rc_comm *c, const void *data, size_t bytes, int root, void **out,
                   size_t *counts, rc_error *err);
/* Gathers n f32 of each rank (n may differ between ranks) to root: out (root only, room for
 * the total) holds rank 0's, then rank 1's, ...; *total (root only) their count. data may
 * lie inside out. */
int rc_comm_gather_f32(rc_comm *c, const float *data, int64_t n, int root, float *out, int64_t *total,
                       rc_error *err);
/* Agreement on failure: every rank calls it with its own status (0 or -1 and its err).
 * Returns 0 when all succeeded; otherwise -1 on every rank, with err holding the message
 * of the lowest failing rank, prefixed "rank R: " when there is more than one rank. */
int rc_comm_agree(rc_comm *c, int status, rc_error *err);

/* The collective watchdog: a collective that waits longer than `seconds` for the other
 * ranks of its group (a hung rank, a stuck device, a lost node) prints which operation
 * waited and which ranks did not arrive, then aborts every rank (MPI_Abort): the one
 * place the library ends the process, since a hung job cannot be recovered otherwise.
 * The default is 600 s; seconds <= 0: wait forever. For the whole process. */
void rc_comm_set_timeout(double seconds);
double rc_comm_timeout(void);

#ifdef __cplusplus
}
#endif

#endif
