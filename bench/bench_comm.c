/* bench_comm.c - what redco's watched collectives cost against MPI's blocking ones: an
 * in-place f32 sum over all ranks, timed as (a) plain MPI_Allreduce on MPI_COMM_WORLD and
 * (b) rc_comm_allreduce_sum_f32 on the world mesh, which starts MPI_Iallreduce and spins on
 * MPI_Test so that the collective watchdog can abort a hung job (its default timeout is
 * on). Run it on two processes or more:
 *   mpiexec -n 2 build/bench_comm
 * Alone it prints one line saying it was skipped. For messages of 1 KiB, 64 KiB, 1 MiB,
 * 16 MiB and 64 MiB, after a warm-up (whose result is checked), a and b alternate, each
 * after a barrier, as many times as fit about a second per size (5 to 200 of each); a
 * call's time is the longest any rank took for it. Rank 0 prints one JSON line per size:
 * the median and the best in ms of each, ratio = watched / blocking (medians), and
 * blocking_gbps, the message bytes over the median blocking time. Any failure prints one
 * line naming the call and exits 1. */
#include "common.h"
#include "redco/dist.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define NAME "bench_comm"

enum { WARMUP = 3, MIN_REPS = 5, MAX_REPS = 200 };
static const double BUDGET_S = 1.0; /* per size, both variants together */
static const long long SIZES[] = {1 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};

static void mpi_check(int rc, const char *what)
{
    if (rc == MPI_SUCCESS)
        return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    bench_fail(NAME, what, msg);
}

/* seconds of one blocking MPI_Allreduce on this rank, after a barrier */
static double blocking(float *buf, int n)
{
    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    double t0 = bench_now();
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    return bench_now() - t0;
}

/* seconds of one rc_comm_allreduce_sum_f32 on this rank, after a barrier */
static double watched(rc_comm *world, float *buf, int n)
{
    rc_error err = {0};
    mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    double t0 = bench_now();
    if (rc_comm_allreduce_sum_f32(world, buf, n, &err))
        bench_fail(NAME, "rc_comm_allreduce_sum_f32", err.msg);
    return bench_now() - t0;
}

static void fill(float *buf, int n, float v)
{
    for (int i = 0; i < n; i++)
        buf[i] = v;
}

/* every element must be `want` after a sum of ones */
static void check_sum(const float *buf, int n, float want, const char *what)
{
    for (int i = 0; i < n; i++)
        if (buf[i] != want) {
            char msg[128];
            snprintf(msg, sizeof msg, "element %d is %g, not %g", i, buf[i], want);
            bench_fail(NAME, what, msg);
        }
}

/* warms both variants up, checks their sums, and returns how many pairs fit the budget
 * (the same on every rank: the slowest rank's warm-up decides); leaves buf zeroed */
static int warm_up(rc_comm *world, float *buf, int n, int ranks)
{
    fill(buf, n, 1.0f);
    blocking(buf, n);
    check_sum(buf, n, (float)ranks, "MPI_Allreduce (result)");
    fill(buf, n, 1.0f);
    watched(world, buf, n);
    check_sum(buf, n, (float)ranks, "rc_comm_allreduce_sum_f32 (result)");
    fill(buf, n, 0.0f); /* sums of zeros stay zero: no overflow, no slow numbers */
    double pair = 0;
    for (int i = 0; i < WARMUP; i++) {
        double t0 = bench_now();
        blocking(buf, n);
        watched(world, buf, n);
        pair = bench_now() - t0;
    }
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &pair, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce (reps)");
    int reps = pair > 0 ? (int)(BUDGET_S / pair) : MAX_REPS;
    return reps < MIN_REPS ? MIN_REPS : reps > MAX_REPS ? MAX_REPS : reps;
}

static int by_value(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* sorts t and returns its median */
static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, by_value);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* a[i], b[i]: rep i of each variant, interleaved; on rank 0 afterwards the longest any
 * rank took for it */
static void measure(rc_comm *world, float *buf, int n, int reps, double *a, double *b, int rank)
{
    for (int i = 0; i < reps; i++) {
        a[i] = blocking(buf, n);
        b[i] = watched(world, buf, n);
    }
    mpi_check(MPI_Reduce(rank ? a : MPI_IN_PLACE, a, reps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD),
              "MPI_Reduce (times)");
    mpi_check(MPI_Reduce(rank ? b : MPI_IN_PLACE, b, reps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD),
              "MPI_Reduce (times)");
}

static void report(int ranks, long long bytes, int reps, double *a, double *b)
{
    double ma = median(a, reps), mb = median(b, reps);
    json_t *o = bench_line("comm_allreduce");
    bench_set_int(o, "ranks", ranks);
    bench_set_int(o, "bytes", bytes);
    bench_set_int(o, "reps", reps);
    bench_set_num(o, "blocking_ms", 1e3 * ma);
    bench_set_num(o, "watched_ms", 1e3 * mb);
    bench_set_num(o, "ratio", mb / ma);
    bench_set_num(o, "blocking_min_ms", 1e3 * a[0]);
    bench_set_num(o, "watched_min_ms", 1e3 * b[0]);
    bench_set_num(o, "blocking_gbps", (double)bytes / ma * 1e-9);
    if (bench_print(o))
        bench_fail(NAME, "writing a JSON line", "jansson or stdout failed");
}

static void run_size(const rc_mesh *m, float *buf, long long bytes)
{
    int n = (int)(bytes / (long long)sizeof(float));
    static double a[MAX_REPS], b[MAX_REPS];
    int reps = warm_up(m->world, buf, n, m->size);
    measure(m->world, buf, n, reps, a, b, m->rank);
    if (m->rank == 0)
        report(m->size, bytes, reps, a, b);
}

static void skipped(void)
{
    json_t *o = bench_line("comm_allreduce");
    bench_set_str(o, "skipped", "one process: needs >= 2 (mpiexec -n 2 build/bench_comm)");
    if (bench_print(o))
        bench_fail(NAME, "writing a JSON line", "jansson or stdout failed");
}

int main(int argc, char **argv)
{
    rc_error err = {0};
    if (rc_dist_init(&argc, &argv, &err))
        bench_fail(NAME, "rc_dist_init", err.msg);
    rc_mesh m;
    if (rc_mesh_init(&m, 1, &err))
        bench_fail(NAME, "rc_mesh_init", err.msg);
    if (m.size < 2) {
        skipped();
    } else {
        long long most = SIZES[sizeof SIZES / sizeof *SIZES - 1];
        float *buf = malloc((size_t)most);
        if (!buf)
            bench_fail(NAME, "malloc", "out of memory");
        for (size_t i = 0; i < sizeof SIZES / sizeof *SIZES; i++)
            run_size(&m, buf, SIZES[i]);
        free(buf);
    }
    rc_mesh_free(&m);
    rc_dist_finalize();
    return 0;
}
