/* bench_zero.c - what ZeRO's stages cost a training step on the data axis: for stages 0
 * (plain data parallelism), 1, 2 and 3, one AdamW training step of a preset over every
 * process (dp = the process count), its time and the bytes each process sends. Run it on
 * two processes or more:
 *   mpiexec -n 2 build/bench_zero [--rounds N] [--dtype f32|bf16|f16] [--stages 0,1,2,3]
 *                                 [PRESET [BATCH SEQ]]   default: gpt2 1 64, f32, every stage
 * (BATCH sequences per process; --dtype: the weights the steps read, rc_train_options.dtype;
 * --stages: which stages run; the ratios are to stage 0's figures, null without it). Alone
 * it prints one line saying it was skipped.
 * The step time is rank 0's span between the collate calls of steps 1 and 5 of a fit of 6
 * steps, over 4 (compiling, planning and the first step's allocations come before step 1's
 * collate), as bench_tp; with --rounds N the stages run N times in turn (0 1 2 3 0 1 2 3 ...)
 * and the best span is kept. cpu_s is rank 0's CPU time in the same span per step (every
 * thread's, the spinning waits included; other programs on the machine inflate it less than
 * step_s).
 * The bytes are counted in the same span by wrapping MPI's non-blocking collectives, which
 * every redco collective starts (the PMPI profiling interface: this program's
 * MPI_Iallreduce, ... count, then call PMPI_Iallreduce, ...), at the call that starts them
 * (stage 3's gathers are started ahead and waited for later): payload_bytes sums each
 * call's whole vector; sent_bytes is what this rank sends under the ring algorithms, the
 * bandwidth-optimal ones: an all-reduce of N bytes sends 2 N (p-1)/p, an all-gather N less
 * the share the rank receives last (its successor's), a broadcast N from the root. redco's
 * reduce-scatter is a pairwise exchange of MPI_Isend / MPI_Irecv (comm.c), counted as the
 * bytes sent: the bucket less the rank's own share, the ring's.
 * comm_s is rank 0's time per step that the step spends in collectives: inside the calls
 * that start them, and waiting for them, from the first MPI_Test on a request (the
 * watchdog, rci_comm_watched, waits on one collective at a time, spinning on MPI_Test) to
 * the one that finds it done. Stages 0 to 2 wait for each collective right after starting
 * it, so for them that is each call's start to its completion; stage 3 starts the gather
 * of the next layer while the current one computes and the time until its wait begins is
 * not counted. A collective that returns early to wait for a slower rank counts that wait.
 * comm_by_op splits the step's collectives by MPI call, per step: calls, sent_bytes, wait_s
 * (its part of comm_s) and span_s (start to completion: wait_s without any overlap). A wait
 * moves every collective in flight (MPI progresses them all inside MPI_Test), so a gather
 * moved while a reduce-scatter is waited for counts to the reduce-scatter.
 * Rank 0 prints one JSON line per stage ("zero_stage_step") with the ratios to stage 0's
 * bytes and time beside the goal #27 sets for stage 3 (at most 1.5x the bytes, 1.25x the
 * time). Any failure prints one line naming the call and exits 1. */
#include "common.h"
#include "redco/dist.h"
#include "redco/pipeline.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NAME "bench_zero"

enum { NTOK = 1 << 16, STEPS = 6, MAX_STAMPS = 64, STAGES = 4, MAX_FLIGHT = 1024 };
static const double GOAL_BYTES = 1.5, GOAL_TIME = 1.25; /* #27's goal for stage 3 */

/* ---- the collectives' bytes and time, counted on the way to MPI ------------------------- */

enum { OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHERV, OP_BCAST, OP_SEND, OP_RECV, OPS };
static const char *const op_name[OPS] = {"MPI_Iallreduce", "MPI_Ireduce_scatter", "MPI_Iallgatherv", "MPI_Ibcast",
                                         "MPI_Isend", "MPI_Irecv"};

typedef struct {
    int64_t calls, sent, payload;
    double wait_s, span_s;
} op_count;
static op_count counted[OPS]; /* since the start: the stamps below take differences */

/* the collectives started and not yet found done: when each started and was first tested */
static struct {
    MPI_Request req;
    int op;
    double started, tested; /* tested: 0 until the first MPI_Test */
} flight[MAX_FLIGHT];
static int n_flight;

static int64_t type_bytes(MPI_Datatype t)
{
    int s = 0;
    PMPI_Type_size(t, &s);
    return s;
}

/* a collective started at t0 (its call took until now) with request *req: counted, and
 * followed to its completion (MPI_Test) */
static void count_comm(int op, MPI_Comm comm, int64_t payload, int64_t sent, double t0, int rc, const MPI_Request *req)
{
    int p = 1;
    PMPI_Comm_size(comm, &p);
    if (p < 2)
        return;
    double t1 = bench_now();
    op_count *c = &counted[op];
    c->calls++;
    c->payload += payload;
    c->sent += sent;
    c->wait_s += t1 - t0; /* in the call that starts it */
    c->span_s += t1 - t0;
    if (rc != MPI_SUCCESS || *req == MPI_REQUEST_NULL)
        return;
    if (n_flight == MAX_FLIGHT)
        bench_fail(NAME, "counting collectives", "more than MAX_FLIGHT in flight at once");
    flight[n_flight].req = *req;
    flight[n_flight].op = op;
    flight[n_flight].started = t1;
    flight[n_flight].tested = 0;
    n_flight++;
}

int MPI_Test(MPI_Request *req, int *flag, MPI_Status *status)
{
    double t0 = bench_now();
    int f = 0;
    while (f < n_flight && flight[f].req != *req)
        f++;
    if (f < n_flight && flight[f].tested == 0)
        flight[f].tested = t0;
    int rc = PMPI_Test(req, flag, status);
    if (rc == MPI_SUCCESS && *flag && f < n_flight) {
        double t1 = bench_now();
        op_count *c = &counted[flight[f].op];
        c->wait_s += t1 - flight[f].tested;
        c->span_s += t1 - flight[f].started;
        flight[f] = flight[--n_flight];
    }
    return rc;
}

int MPI_Iallreduce(const void *sb, void *rb, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm, MPI_Request *req)
{
    double t0 = bench_now();
    int p = 1;
    PMPI_Comm_size(comm, &p);
    int64_t n = count * type_bytes(t);
    int rc = PMPI_Iallreduce(sb, rb, count, t, op, comm, req);
    count_comm(OP_ALLREDUCE, comm, n, 2 * n * (p - 1) / p, t0, rc, req);
    return rc;
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
    double t0 = bench_now();
    int p, me;
    int64_t n = counts_total(comm, counts, &p, &me), es = type_bytes(t), mine = counts[me];
    int rc = PMPI_Ireduce_scatter(sb, rb, counts, t, op, comm, req);
    count_comm(OP_REDUCE_SCATTER, comm, n * es, (n - mine) * es, t0, rc, req);
    return rc;
}

int MPI_Iallgatherv(const void *sb, int scount, MPI_Datatype st, void *rb, const int counts[], const int displ[],
                    MPI_Datatype rt, MPI_Comm comm, MPI_Request *req)
{
    double t0 = bench_now();
    int p, me;
    int64_t n = counts_total(comm, counts, &p, &me), es = type_bytes(rt), last = counts[(me + 1) % p];
    int rc = PMPI_Iallgatherv(sb, scount, st, rb, counts, displ, rt, comm, req);
    count_comm(OP_ALLGATHERV, comm, n * es, (n - last) * es, t0, rc, req);
    return rc;
}

/* the reduce-scatter's pairwise exchange (comm.c): the parts sent, and the parts received
 * (no bytes sent; their waits are the exchange's) */
int MPI_Isend(const void *buf, int count, MPI_Datatype t, int to, int tag, MPI_Comm comm, MPI_Request *req)
{
    double t0 = bench_now();
    int64_t n = count * type_bytes(t);
    int rc = PMPI_Isend(buf, count, t, to, tag, comm, req);
    count_comm(OP_SEND, comm, n, n, t0, rc, req);
    return rc;
}

int MPI_Irecv(void *buf, int count, MPI_Datatype t, int from, int tag, MPI_Comm comm, MPI_Request *req)
{
    double t0 = bench_now();
    int64_t n = count * type_bytes(t);
    int rc = PMPI_Irecv(buf, count, t, from, tag, comm, req);
    count_comm(OP_RECV, comm, n, 0, t0, rc, req);
    return rc;
}

int MPI_Ibcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm, MPI_Request *req)
{
    double t0 = bench_now();
    int me = 0;
    PMPI_Comm_rank(comm, &me);
    int64_t n = count * type_bytes(t);
    int rc = PMPI_Ibcast(buf, count, t, root, comm, req);
    count_comm(OP_BCAST, comm, n, me == root ? n : 0, t0, rc, req);
    return rc;
}

/* ---- one fit per stage --------------------------------------------------------------- */

typedef struct {
    rc_model *model;
    int T;
    int32_t tok[NTOK];
    double stamp[MAX_STAMPS];        /* when collate was called */
    double cpu[MAX_STAMPS];          /* this process's CPU time then */
    op_count comm[MAX_STAMPS][OPS];  /* the counts then */
    int n_stamps;
} lm;

/* this process's CPU time in seconds, every thread's */
static double cpu_now(void)
{
    struct timespec ts;
    return clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) ? NAN : (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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
        d->cpu[d->n_stamps] = cpu_now();
        memcpy(d->comm[d->n_stamps], counted, sizeof counted);
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
    double step_s, cpu_s, comm_s;
    int64_t sent, payload; /* per step */
    op_count op[OPS];      /* per step */
    int64_t params;
} figures;

/* one fit of STEPS AdamW steps at ZeRO stage `zero` with weights of dtype dt: as
 * bench_fit_preset, the model converted to dt first when that is 16-bit; -1 with err set
 * and *what the call */
static int fit_stage(rc_deployer *d, lm *data, const char *preset, int batch, int zero, rc_dtype dt, figures *f,
                     const char **what, rc_error *err)
{
    rc_train_options o = {.steps = STEPS, .batch_size = batch, .optimizer = "adamw", .lr = 1e-4, .zero = zero,
                          .dtype = dt};
    data->n_stamps = 0;
    *what = "rc_model_create";
    if (!(data->model = rc_model_create(preset, 1, err)))
        return -1;
    f->params = rc_params_numel(data->model->params);
    int rc = -1;
    rc_trainer *t = NULL;
    *what = "rc_model_to_dtype";
    if (dt == RC_F32 || !rc_model_to_dtype(data->model, dt, err)) {
        *what = "rc_trainer_new";
        t = rc_trainer_new(d, collate, loss, data, data->model->params, data->model, err);
    }
    if (t) {
        *what = "rc_trainer_fit";
        rc = rc_trainer_fit(t, &o, (rc_examples){count, data}, NULL, NULL, err);
    }
    rc_trainer_free(t);
    rc_model_free(data->model);
    data->model = NULL;
    if (rc)
        return -1;
    int last = data->n_stamps - 1; /* step 5's collate; step 1's four before */
    if (last < 4 || last >= MAX_STAMPS) {
        *what = "counting steps";
        return rc_error_set(err, RC_ERR_ARG, "bench_zero: %d collate calls for %d steps", data->n_stamps, STEPS);
    }
    f->step_s = (data->stamp[last] - data->stamp[last - 4]) / 4;
    f->cpu_s = (data->cpu[last] - data->cpu[last - 4]) / 4;
    f->sent = f->payload = 0;
    f->comm_s = 0;
    for (int k = 0; k < OPS; k++) {
        const op_count *a = &data->comm[last - 4][k], *b = &data->comm[last][k];
        f->op[k] = (op_count){(b->calls - a->calls) / 4, (b->sent - a->sent) / 4, (b->payload - a->payload) / 4,
                              (b->wait_s - a->wait_s) / 4, (b->span_s - a->span_s) / 4};
        f->sent += f->op[k].sent;
        f->payload += f->op[k].payload;
        f->comm_s += f->op[k].wait_s;
    }
    return 0;
}

static void report(const char *preset, int dp, int batch, int T, rc_dtype dt, int zero, int rounds, const figures *f,
                   const figures *plain)
{
    double rb = plain ? (double)f->sent / (double)plain->sent : NAN, rt = plain ? f->step_s / plain->step_s : NAN;
    json_t *o = bench_line("zero_stage_step");
    bench_set_str(o, "model", preset);
    bench_set_int(o, "params", f->params);
    bench_set_int(o, "dp", dp);
    bench_set_int(o, "batch_per_rank", batch);
    bench_set_int(o, "seq_len", T);
    bench_set_str(o, "dtype", rc_dtype_name(dt));
    bench_set_int(o, "zero", zero);
    bench_set_int(o, "rounds", rounds);
    bench_set_num(o, "step_s", f->step_s);
    bench_set_num(o, "cpu_s", f->cpu_s);
    bench_set_num(o, "comm_s", f->comm_s);
    bench_set_int(o, "sent_bytes", f->sent);
    bench_set_int(o, "payload_bytes", f->payload);
    bench_set_num(o, "sent_bytes_per_param", (double)f->sent / (double)f->params);
    bench_set_num(o, "bytes_vs_plain", rb);
    bench_set_num(o, "time_vs_plain", rt);
    bench_set_num(o, "goal_bytes_vs_plain", GOAL_BYTES);
    bench_set_num(o, "goal_time_vs_plain", GOAL_TIME);
    if (plain)
        bench_set_str(o, "within_goal", rb <= GOAL_BYTES && rt <= GOAL_TIME ? "yes" : "no");
    json_t *by = json_object();
    for (int k = 0; by && k < OPS; k++) {
        json_t *c = f->op[k].calls ? json_object() : NULL;
        if (!c)
            continue;
        bench_set_int(c, "calls", f->op[k].calls);
        bench_set_int(c, "sent_bytes", f->op[k].sent);
        bench_set_num(c, "wait_s", f->op[k].wait_s);
        bench_set_num(c, "span_s", f->op[k].span_s);
        json_object_set_new(by, op_name[k], c);
    }
    json_object_set_new(o, "comm_by_op", by);
    if (bench_print(o))
        bench_fail(NAME, "writing a JSON line", "jansson or stdout failed");
}

static const char *const USAGE =
    "usage: bench_zero [--rounds N] [--dtype f32|bf16|f16] [--stages 0,1,2,3] [PRESET [BATCH SEQ]]";

int main(int argc, char **argv)
{
    const char *dts = bench_take_flag(&argc, argv, "--dtype"), *stages = bench_take_flag(&argc, argv, "--stages");
    const char *rs = bench_take_flag(&argc, argv, "--rounds");
    int rounds = rs ? atoi(rs) : 1, first = 1;
    rc_dtype dt = bench_float_dtype(dts);
    int run[STAGES] = {1, 1, 1, 1}, bad_stage = 0;
    if (stages) {
        memset(run, 0, sizeof run);
        for (const char *c = stages; *c; c++)
            if (*c >= '0' && *c < '0' + STAGES && (c[1] == ',' || !c[1]))
                run[*c - '0'] = 1;
            else if (*c != ',')
                bad_stage = 1;
    }
    const char *preset = argc > first ? argv[first] : "gpt2";
    int batch = argc > first + 2 ? atoi(argv[first + 1]) : 1;
    lm *data = calloc(1, sizeof *data);
    if (!data)
        bench_fail(NAME, "calloc", "out of memory");
    data->T = argc > first + 2 ? atoi(argv[first + 2]) : 64;
    if (rounds < 1 || batch < 1 || data->T < 1 || data->T * 2 > NTOK || dt == RC_DTYPE_COUNT || bad_stage)
        bench_fail(NAME, "reading the arguments", USAGE);
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
                if (!run[z])
                    continue;
                const char *what = "";
                figures f;
                if (fit_stage(d, data, preset, batch, z, dt, &f, &what, &err)) {
                    char name[160];
                    snprintf(name, sizeof name, NAME " %s --zero %d --dtype %s (rank %d)", preset, z, rc_dtype_name(dt),
                             mesh->rank);
                    bench_fail(name, what, err.msg);
                }
                if (r == 0 || f.step_s < best[z].step_s)
                    best[z] = f;
            }
        if (rc_deployer_is_main(d))
            for (int z = 0; z < STAGES; z++)
                if (run[z])
                    report(preset, mesh->dp, batch, data->T, dt, z, rounds, &best[z], run[0] ? &best[0] : NULL);
    }
    free(data);
    rc_deployer_free(d);
    rc_dist_finalize();
    return 0;
}
