/* deployer.c - processes and mesh, the seed and its per-step keys, the workdir, and
 * rank 0's logging: a progress bar (plain lines when not a terminal), log.jsonl and
 * TensorBoard event files. */
#include "files.h"
#include "params.h"
#include "run.h"
#include "workdir.h"
#include "redco/device.h"
#include "redco/tboard.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct rc_deployer {
    rc_mesh mesh;
    uint64_t seed;
    char workdir[4096];
    int verbose, json, tty;
    FILE *log;                    /* log.jsonl, rank 0 */
    rc_tboard *tb;                /* rank 0 */
    double t0;                    /* start of the run, for the ETA */
    int64_t step0;                /* first step of this process (resumed runs) */
    int owns_mpi;                 /* this deployer started MPI: rc_deployer_free finalizes it */
    char earlier[256];            /* rank 0: the last checkpoint of an earlier run found in the
                                     workdir when it was opened ("" none) */
    int earlier_log;              /* rank 0: log.jsonl held records then */
    int drop_log;                 /* rank 0: those records go when the workdir is opened */
    int opened;                   /* rank 0: the workdir was made and its logs opened */
    char *run_config;             /* written to workdir/run_config.json when it is opened */
    int fits;                     /* fits begun on this deployer */
    rc_backend *be;               /* the device this process runs on (opened here, closed by free) */
};

static int make_dir(const char *dir, rc_error *err)
{
    if (mkdir(dir, 0777) == 0 || errno == EEXIST)
        return 0;
    return rc_error_set(err, RC_ERR_IO, "%s: cannot create the directory: %s", dir, strerror(errno));
}

/* what an earlier run left in the workdir: its last checkpoint's name, records in the log
 * (read only: a workdir that does not exist holds neither) */
static void earlier_run(rc_deployer *d)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/log.jsonl", d->workdir);
    if (rci_workdir_last(d->workdir, d->earlier, sizeof d->earlier))
        d->earlier[0] = 0;
    d->earlier_log = stat(path, &st) == 0 && st.st_size > 0;
}

int rci_deployer_fresh_start(rc_deployer *d, int resume, rc_error *err)
{
    int rc = 0;
    if (d->fits++ || d->mesh.rank != 0 || resume || !d->workdir[0])
        return rc_comm_agree(d->mesh.world, 0, err);
    earlier_run(d);
    if (d->earlier[0])
        rc = rc_error_set(err, RC_ERR_ARG, "%s holds an earlier run (its last checkpoint: %s): --resume "
                          "(rc_train_options.resume) continues it; another workdir, or this one removed, "
                          "starts afresh", d->workdir, d->earlier);
    d->drop_log = d->earlier_log; /* steps never saved: started again from 0, as a resume would */
    return rc_comm_agree(d->mesh.world, rc, err);
}

/* the processes of this host that run on this process's device (its name: "cpu", "opencl:1") */
int rc_deployer_device_sharers(const rc_deployer *d)
{
    enum { NAME = 32 };
    MPI_Comm host;
    if (d->mesh.size == 1 || !rc_dist_launched() ||
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host) != MPI_SUCCESS)
        return 1;
    int n = 1, same = 0;
    MPI_Comm_size(host, &n);
    char mine[NAME], *all = calloc((size_t)n, NAME);
    snprintf(mine, sizeof mine, "%s", rc_backend_name(d->be));
    if (all && MPI_Allgather(mine, NAME, MPI_CHAR, all, NAME, MPI_CHAR, host) == MPI_SUCCESS)
        for (int i = 0; i < n; i++)
            same += !strncmp(all + (size_t)i * NAME, mine, NAME);
    free(all);
    MPI_Comm_free(&host);
    return same > 0 ? same : 1;
}

/* Rank 0 makes the workdir and opens its logs (log.jsonl, TensorBoard events), writes
 * run_config.json, and drops an earlier try's records when the fit asked for it. */
static int workdir_create(rc_deployer *d, rc_error *err)
{
    char path[4200];
    d->opened = 1;
    if (make_dir(d->workdir, err))
        return -1;
    int removed = rci_workdir_clean(d->workdir);
    if (removed)
        fprintf(stderr, "redco: removed %d temporary entr%s left in %s by an interrupted save\n", removed,
                removed == 1 ? "y" : "ies", d->workdir);
    snprintf(path, sizeof path, "%s/log.jsonl", d->workdir);
    if (!(d->log = fopen(path, "a")))
        return rc_error_set(err, RC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!(d->tb = rc_tboard_open(d->workdir, err)))
        return -1;
    snprintf(path, sizeof path, "%s/run_config.json", d->workdir);
    if (d->run_config && rci_write_atomic(path, d->run_config, strlen(d->run_config), err))
        return -1;
    if (d->drop_log && rci_deployer_log_resume(d, 0, err))
        return -1;
    d->drop_log = 0;
    return 0;
}

int rci_deployer_open_workdir(rc_deployer *d, rc_error *err)
{
    int rc = 0;
    if (d->mesh.rank == 0 && d->workdir[0] && !d->opened)
        rc = workdir_create(d, err);
    return rc_comm_agree(d->mesh.world, rc, err);
}

rc_deployer *rc_deployer_new(int *argc, char ***argv, const rc_deployer_options *o, rc_error *err)
{
    rc_deployer *d = calloc(1, sizeof *d);
    if (!d) {
        rc_error_set(err, RC_ERR_MEMORY, "deployer: out of memory");
        return NULL;
    }
    int before = 0;
    if (rc_dist_launched())
        MPI_Initialized(&before);
    int rc = rc_dist_init(argc, argv, err);
    d->owns_mpi = !rc && rc_dist_launched() && !before;
    if (!rc)
        rc = o->local ? rc_mesh_init_local(&d->mesh, err) : rc_mesh_init(&d->mesh, o->mp > 0 ? o->mp : 1, err);
    if (rc) {
        if (d->owns_mpi)
            rc_dist_finalize();
        free(d);
        return NULL;
    }
    rc_comm_set_timeout(o->collective_timeout ? o->collective_timeout : 600.0);
    d->be = rc_device_open(o->device, -1, err);
    if (d->be && o->tf32)
        rc_device_allow_tf32(d->be, 1);
    if (rc_comm_agree(d->mesh.world, d->be ? 0 : -1, err)) {
        rc_deployer_free(d);
        return NULL;
    }
    d->seed = o->seed;
    d->verbose = o->verbose;
    d->json = o->json;
    d->tty = isatty(2);
    d->t0 = rci_clock_s();
    d->step0 = -1;
    if (o->workdir)
        snprintf(d->workdir, sizeof d->workdir, "%s", o->workdir);
    if (o->run_config && !(d->run_config = strdup(o->run_config))) {
        rc_error_set(err, RC_ERR_MEMORY, "deployer: out of memory");
        rc_deployer_free(d);
        return NULL;
    }
    return d; /* the workdir is made when first written (rci_deployer_open_workdir) */
}

void rc_deployer_free(rc_deployer *d)
{
    if (!d)
        return;
    if (d->log)
        fclose(d->log);
    rc_tboard_close(d->tb);
    rc_device_close(d->be); /* released once the buffers made on it (parameters moved there) go */
    rc_mesh_free(&d->mesh);
    free(d->run_config);
    if (d->owns_mpi)
        rc_dist_finalize();
    free(d);
}

rc_backend *rc_deployer_backend(const rc_deployer *d)
{
    return d->be;
}

const rc_mesh *rc_deployer_mesh(const rc_deployer *d)
{
    return &d->mesh;
}

int rc_deployer_is_main(const rc_deployer *d)
{
    return d->mesh.rank == 0;
}

const char *rci_deployer_workdir(const rc_deployer *d)
{
    return d->workdir[0] ? d->workdir : NULL;
}

static int deployer_verbose(const rc_deployer *d)
{
    return d->verbose && !d->json && d->mesh.rank == 0;
}

rc_rng rc_deployer_step_rng(const rc_deployer *d, int64_t step)
{
    /* one key per step, folded with the data-parallel index: dropout differs across data
     * replicas and agrees across the model shards of one replica */
    return rc_rng_fold(rc_rng_fold(rc_rng_new(d->seed), (uint64_t)step), (uint64_t)d->mesh.dp_rank);
}

int rc_deployer_agree(rc_deployer *d, int status, rc_error *err)
{
    return rc_comm_agree(d->mesh.world, status, err);
}

int rc_deployer_log(rc_deployer *d, int64_t step, const char *const *keys, const double *values, int n,
                    rc_error *err)
{
    if (!d || n < 0 || (n > 0 && (!keys || !values)))
        return rc_error_set(err, RC_ERR_ARG, "deployer log: a deployer and n >= 0 keys with values are required");
    return rci_deployer_log(d, step, keys, values, n, err);
}

int rci_deployer_log(rc_deployer *d, int64_t step, const char *const *keys, const double *values,
                    int n, rc_error *err)
{
    if (d->mesh.rank != 0 || !d->workdir[0])
        return 0;
    if (!d->opened && workdir_create(d, err)) /* a pipeline's own log, before any fit */
        return -1;
    if (!d->log)
        return 0;
    /* {"step": S, "key": value, ...} on one line, values to 9 significant digits (every
     * float's digits); a non-finite value is null */
    json_t *line = json_object();
    int bad = !line || json_object_set_new(line, "step", json_integer((json_int_t)step));
    for (int i = 0; !bad && i < n; i++)
        bad = json_object_set_new(line, keys[i], isfinite(values[i]) ? json_real(values[i]) : json_null());
    char *text = bad ? NULL : json_dumps(line, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(line);
    if (!text)
        return rc_error_set(err, RC_ERR_ARG, "%s/log.jsonl: cannot encode the record of step %lld "
                            "(a key that is not UTF-8, or out of memory)", d->workdir, (long long)step);
    int failed = fprintf(d->log, "%s\n", text) < 0;
    free(text);
    if (failed || fflush(d->log))
        return rc_error_set(err, RC_ERR_IO, "%s/log.jsonl: write failed: %s", d->workdir, strerror(errno));
    for (int i = 0; i < n; i++)
        if (isfinite(values[i]) && rc_tboard_scalar(d->tb, keys[i], values[i], step, err))
            return -1;
    return 0;
}

int rci_deployer_log_resume(rc_deployer *d, int64_t step, rc_error *err)
{
    if (d->mesh.rank != 0 || !d->log)
        return 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/log.jsonl", d->workdir);
    fclose(d->log);
    int rc = rci_workdir_log_keep(path, step, err);
    if (!(d->log = fopen(path, "a")) && !rc)
        rc = rc_error_set(err, RC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!rc && d->tb)
        rc = rc_tboard_restart(d->tb, step + 1, err);
    return rc;
}

static void clock_text(double s, char *buf, size_t size)
{
    long t = s > 0 && s < 1e8 ? (long)(s + 0.5) : 0;
    snprintf(buf, size, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

void rci_deployer_progress(rc_deployer *d, int64_t step, int64_t total, double loss, double lr, double rate,
                          const char *unit, int tick)
{
    if (d->step0 < 0) /* the ETA counts from this process's first step */
        d->step0 = step - 1, d->t0 = rci_clock_s();
    if (!deployer_verbose(d) || (!d->tty && !tick))
        return;
    int final = step == total;
    double done = (double)(step - d->step0), left = (double)(total - step);
    char eta[32];
    clock_text(done > 0 ? (rci_clock_s() - d->t0) / done * left : 0, eta, sizeof eta);
    if (d->tty) {
        enum { WIDTH = 24 };
        int fill = total > 0 ? (int)(WIDTH * step / total) : WIDTH;
        char bar[WIDTH + 1];
        for (int i = 0; i < WIDTH; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[WIDTH] = 0;
        /* \033[K clears what a longer line before left */
        fprintf(stderr, "\r[%s] step %lld/%lld  loss %.4f  lr %.3g  %.0f %s  ETA %s\033[K%s", bar,
                (long long)step, (long long)total, loss, lr, rate, unit, eta, final ? "\n" : "");
    } else {
        fprintf(stderr, "step %lld/%lld  loss %.4f  lr %.3g  %.0f %s  ETA %s\n", (long long)step, (long long)total,
                loss, lr, rate, unit, eta);
    }
    fflush(stderr);
}

void rci_deployer_note(rc_deployer *d, const char *fmt, ...)
{
    if (!deployer_verbose(d))
        return;
    va_list ap;
    va_start(ap, fmt);
    if (d->tty)
        fputc('\n', stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

uint64_t rci_deployer_seed(const rc_deployer *d)
{
    return d->seed;
}

int rci_deployer_init_params(rc_deployer *d, rc_params *p, const char *who, rc_error *err)
{
    const char *first = NULL;
    int drawn = rci_params_init_missing(p, d->seed, &first, err);
    if (drawn < 0)
        return rci_error_prefix(err, "%s", who);
    if (drawn)
        rci_deployer_note(d, "%s: %d parameter%s given no values (the first '%s') start%s as RC_INIT_AUTO draws "
                          "(std %g) of seed %llu", who, drawn, drawn > 1 ? "s" : "", first, drawn > 1 ? "" : "s",
                          RC_INIT_STD, (unsigned long long)d->seed);
    return 0;
}
