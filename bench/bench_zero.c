/* bench_zero.c - what ZeRO's stages cost a training step on the data axis: for stages 0
 * (plain data parallelism), 1 and 2, one AdamW training step of a preset over every process
 * (dp = the process count), its time and the bytes each process sends. Run it on two
 * processes or more:
 *   mpiexec -n 2 build/bench_zero [--rounds N] [PRESET [BATCH SEQ]]   default: gpt2 1 64
 * (BATCH sequences per process). Alone it prints one line saying it was skipped.
 * The step time is rank 0's span between the collate calls of steps 1 and 5 of a fit of 6
 * steps, over 4 (compiling, planning and the first step's allocations come before step 1's
 * collate), as bench_tp; with --rounds N the stages run N times in turn (0 1 2 0 1 2 ...)
 * and the best span is kept. The bytes are counted in the same span by wrapping MPI's
 * non-blocking collectives, which every redco collective starts (the PMPI profiling
 * interface: this program's MPI_Iallreduce, ... count, then call PMPI_Iallreduce, ...):
 * payload_bytes sums each call's whole vector; sent_bytes is what this rank sends under the
 * ring algorithms, the bandwidth-optimal ones MPI picks for large vectors: an all-reduce of
 * N bytes sends 2 N (p-1)/p, a reduce-scatter N less the rank's own share, an all-gather N
 * less the share the rank receives last (its successor's), a broadcast N from the root.
 * comm_s is rank 0's time in collectives per step: from each call's start to the MPI_Test
 * that finds it done (the watchdog waits on one collective at a time, spinning on MPI_Test;
 * a collective that returns early to wait for a slower rank counts that wait).
 * Rank 0 prints one JSON line per stage ("zero_stage_step") with the ratios to stage 0's
 * bytes and time beside the goal #27 sets for stage 3 (at most 1.5x the bytes, 1.25x the
 * time). Any failure prints one line naming the call and exits 1. */
#include "common.h"
#include "redco/dist.h"
#include "redco/pipeline.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME "bench_zero"

enum { NTOK = 1 << 16, STEPS = 6, MAX_STAMPS = 64, STAGES = 3 };
static const double GOAL_BYTES = 1.5, GOAL_TIME = 1.25; /* #27's goal for stage 3 */

/* ---- the collectives' bytes, counted on the way to MPI ---------------------------------- */

static int64_t sent_bytes, payload_bytes;
static double comm_s, comm_t0; /* seconds from a collective's start to its completion */

/* every collective starts here: the watchdog waits for one at a time (MPI_Test below) */
static void start_comm(void)
{
    comm_t0 = bench_now();
}

static int64_t type_bytes(MPI_Datatype t)
{
    int s = 0;
    PMPI_Type_size(t, &s);
    return s;
}

static void count_comm(MPI_Comm comm, int64_t payload, int64_t sent)
{
    int p = 1;
    PMPI_Comm_size(comm, &p);
    if (p > 1) {
        payload_bytes += payload;
        sent_bytes += sent;
    }
    start_comm();
}

int MPI_Test(MPI_Request *req, int *flag, MPI_Status *status)
{
    int rc = PMPI_Test(req, flag, status);
    if (rc == MPI_SUCCESS && *flag)
        comm_s += bench_now() - comm_t0;
    return rc;
}

int MPI_Iallreduce(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm, MPI_Request *req)
{
    int p = 1;
    PMPI_Comm_size(comm, &p);
    int64_t n = count * type_bytes(t);
    count_comm(comm, n, 2 * n * (p - 1) / p);
    return PMPI_Iallreduce(sb, rb, count, t, op, comm, req);
}

/* the sum of a v-collective's per-rank counts; the communicator's size and this rank */
static int64_t counts_total(MPI_Comm comm, const int counts[], int *p, int *me)
{
    *p = 1, *me = 0;
    PMPI_Comm_size(comm, p);
    PMPI_Comm_rank(comm, me);
    int64_t n = 0;
    for (int r = 0; r < *p; r++)
        n += counts[r];
    return n;
}

int MPI_Ireduce_scatter(const void *sb, void *rb, const int counts[], MPI_Datatype t, MPI_Op op, MPI_Comm comm,
                        MPI_Request *req)
{
    int p, me;
    int64_t n = counts_total(comm, counts, &p, &me);
    count_comm(comm, n * type_bytes(t), (n - counts[me]) * type_bytes(t));
    return PMPI_Ireduce_scatter(sb, rb, counts, t, op, comm, req);
}

int MPI_Iallgatherv(const void *sb, int scount, MPI_Datatype st, void *rb, const int counts[], const int displ[],
                    MPI_Datatype rt, MPI_Comm comm, MPI_Request *req)
{
    int p, me;
    int64_t n = counts_total(comm, counts, &p, &me);
    count_comm(comm, n * type_bytes(rt), (n - counts[(me + 1) % p]) * type_bytes(rt));
    return PMPI_Iallgatherv(sb, scount, st, rb, counts, displ, rt, comm, req);
}

int MPI_Ibcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm, MPI_Request *req)
{
    int me = 0;
    PMPI_Comm_rank(comm, &me);
    int64_t n = count * type_bytes(t);
    count_comm(comm, n, me == root ? n : 0);
    return PMPI_Ibcast(buf, count, t, root, comm, req);
}

/* ---- one fit per stage --------------------------------------------------------------- */

typedef struct {
    rc_model *model;
    int T;
    int32_t tok[NTOK];
    double stamp[MAX_STAMPS];    /* when collate was called */
    int64_t sent[MAX_STAMPS];    /* sent_bytes then */
    int64_t payload[MAX_STAMPS]; /* payload_bytes then */
    double comm[MAX_STAMPS];     /* comm_s then */
    int n_stamps;
} lm;

static int64_t count(int epoch, void *user)
{
    (void)epoch;
    lm *d = user;
    return (NTOK - 1) / d->T;
}

static int collate(rc_batch *out, const int64_t *ex, int n, void *user, rc_error *err)
{
    lm *d = user;
    int T = d->T;
    if (d->n_stamps < MAX_STAMPS) {
        d->stamp[d->n_stamps] = bench_now();
        d->sent[d->n_stamps] = sent_bytes;
        d->payload[d->n_stamps] = payload_bytes;
        d->comm[d->n_stamps] = comm_s;
    }
    d->n_stamps++;
    return bench_lm_batch(out, d->tok, T, ex, n, err);
}

static rc_tensor *loss(rc_graph *g, rc_params *p, const rc_batch *b, rc_rng rng, void *user, rc_error *err)
{
    lm *d = user;
    (void)p, (void)rng, (void)err;
    return bench_lm_loss(g, d->model, b);
}

typedef struct {
    double step_s, comm_s;
    int64_t sent, payload; /* per step */
    int64_t params;
} figures;

/* one fit of STEPS AdamW steps at ZeRO stage `zero`; -1 with err set and *what the call */
static int fit_stage(rc_deployer *d, lm *data, const char *preset, int batch, int zero, figures *f,
                     const char **what, rc_error *err)
{
    rc_train_options o = {.steps = STEPS, .batch_size = batch, .optimizer = "adamw", .lr = 1e-4, .zero = zero};
    data->n_stamps = 0;
    if (bench_fit_preset(d, preset, &data->model, &f->params, collate, loss, (rc_examples){count, data}, &o,
                         what, err))
        return -1;
    int last = data->n_stamps - 1; /* step 5's collate; step 1's four before */
    if (last < 4 || last >= MAX_STAMPS) {
        *what = "counting steps";
        return rc_error_set(err, RC_ERR_ARG, "bench_zero: %d collate calls for %d steps", data->n_stamps, STEPS);
    }
    f->step_s = (data->stamp[last] - data->stamp[last - 4]) / 4;
    f->sent = (data->sent[last] - data->sent[last - 4]) / 4;
    f->payload = (data->payload[last] - data->payload[last - 4]) / 4;
    f->comm_s = (data->comm[last] - data->comm[last - 4]) / 4;
    return 0;
}

static void report(const char *preset, int dp, int batch, int T, int zero, int rounds, const figures *f,
                   const figures *plain)
{
    double rb = (double)f->sent / (double)plain->sent, rt = f->step_s / plain->step_s;
    json_t *o = bench_line("zero_stage_step");
    bench_set_str(o, "model", preset);
    bench_set_int(o, "params", f->params);
    bench_set_int(o, "dp", dp);
    bench_set_int(o, "batch_per_rank", batch);
    bench_set_int(o, "seq_len", T);
    bench_set_int(o, "zero", zero);
    bench_set_int(o, "rounds", rounds);
    bench_set_num(o, "step_s", f->step_s);
    bench_set_num(o, "comm_s", f->comm_s);
    bench_set_int(o, "sent_bytes", f->sent);
    bench_set_int(o, "payload_bytes", f->payload);
    bench_set_num(o, "sent_bytes_per_param", (double)f->sent / (double)f->params);
    bench_set_num(o, "bytes_vs_plain", rb);
    bench_set_num(o, "time_vs_plain", rt);
    bench_set_num(o, "goal_bytes_vs_plain", GOAL_BYTES);
    bench_set_num(o, "goal_time_vs_plain", GOAL_TIME);
    bench_set_str(o, "within_goal", rb <= GOAL_BYTES && rt <= GOAL_TIME ? "yes" : "no");
    if (bench_print(o))
        bench_fail(NAME, "writing a JSON line", "jansson or stdout failed");
}

int main(int argc, char **argv)
{
    int rounds = 1, first = 1;
    if (argc > 2 && !strcmp(argv[1], "--rounds")) {
        rounds = atoi(argv[2]);
        first = 3;
    }
    const char *preset = argc > first ? argv[first] : "gpt2";
    int batch = argc > first + 2 ? atoi(argv[first + 1]) : 1;
    lm *data = calloc(1, sizeof *data);
    if (!data)
        bench_fail(NAME, "calloc", "out of memory");
    data->T = argc > first + 2 ? atoi(argv[first + 2]) : 64;
    if (rounds < 1 || batch < 1 || data->T < 1 || data->T * 2 > NTOK)
        bench_fail(NAME, "reading the arguments", "usage: bench_zero [--rounds N] [PRESET [BATCH SEQ]]");
    rc_error err = {0};
    rc_deployer_options dopt = {.seed = 1};
    rc_deployer *d = rc_deployer_new(&argc, &argv, &dopt, &err);
    if (!d)
        bench_fail(NAME, "rc_deployer_new", err.msg);
    const rc_mesh *mesh = rc_deployer_mesh(d);
    if (mesh->dp < 2) {
        if (rc_deployer_is_main(d)) {
            json_t *o = bench_line("zero_stage_step");
            bench_set_str(o, "skipped", "one process: run under mpiexec -n 2 (or more)");
            bench_print(o);
        }
    } else {
        for (int i = 0; i < NTOK; i++)
            data->tok[i] = (int32_t)((i * 7 + i / 5) % 200);
        figures best[STAGES];
        for (int r = 0; r < rounds; r++)
            for (int z = 0; z < STAGES; z++) {
                const char *what = "";
                figures f;
                if (fit_stage(d, data, preset, batch, z, &f, &what, &err)) {
                    char name[160];
                    snprintf(name, sizeof name, NAME " %s --zero %d (rank %d)", preset, z, mesh->rank);
                    bench_fail(name, what, err.msg);
                }
                if (r == 0 || f.step_s < best[z].step_s)
                    best[z] = f;
            }
        if (rc_deployer_is_main(d))
            for (int z = 0; z < STAGES; z++)
                report(preset, mesh->dp, batch, data->T, z, rounds, &best[z], &best[0]);
    }
    free(data);
    rc_deployer_free(d);
    rc_dist_finalize();
    return 0;
}
