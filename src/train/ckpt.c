/* ckpt.c - training checkpoints and the final model directory.
 *
 * workdir/checkpoint-STEP/  config.json (built-in models), model.safetensors (full
 *                           tensors, HF names), optimizer.safetensors (exp_avg.NAME,
 *                           exp_avg_sq.NAME), trainer_state.json, tokenizer files
 * workdir/last_checkpoint   the name of the last complete checkpoint
 * workdir/best/, final/     the best by eval loss, and the final model
 *
 * The weights are always F32: with 16-bit training they are the f32 master weights (whole
 * tensors gathered from the data-parallel shares with zero, like the moments), so a resume
 * continues the master exactly and final/ loads in any dtype (generate --dtype bf16 rounds
 * it to the very weights the last step read).
 *
 * Every directory is written under a temporary name and renamed when complete, and the
 * pointer is replaced by rename after that: a run killed at any moment leaves the previous
 * checkpoint as the last valid one. Rank 0 writes; all ranks agree on the outcome. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "trainer_internal.h"
#include "redco/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* dir + "/" + name into out; -1 when it does not fit */
static __attribute__((noinline)) int join(char *out, size_t size, const char *dir, const char *name)
{
    int n = snprintf(out, size, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path) ? -1 : 0;
}

/* Removes dir and everything under it (depth first, never following links); an absent
 * dir is not an error. */
static int remove_tree(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) && errno == ENOENT)
        return 0;
    return nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) ? -1 : 0;
}

static int write_state(rc_trainer *t, const rc_train_options *o, const char *dir, rc_error *err)
{
    const rc_mesh *m = rc_deployer_mesh(t->d);
    /* best_score: what best/ was kept by (eval loss, or the metric negated when higher is
     * better); null before the first evaluation */
    json_t *s = json_pack("{s:I, s:I, s:i, s:I, s:I, s:i, s:i, s:i, s:b, s:o, s:s, s:o, s:I}", "step", (json_int_t)t->step,
                          "optimizer_step", (json_int_t)t->opt_step, "epoch", t->epoch, "epoch_step",
                          (json_int_t)t->epoch_step, "seed", (json_int_t)t->seed, "batch_size",
                          o->batch_size, "data_parallel", m->dp, "grad_accum",
                          o->grad_accum > 0 ? o->grad_accum : 1, "shuffle", o->shuffle,
                          "best_score", isfinite(t->best_eval) ? json_real(t->best_eval) : json_null(),
                          "dtype", rc_dtype_name(t->dtype), "loss_scale", t->scaling ? json_real(t->scale) : json_null(), "loss_scale_good_steps",
                          (json_int_t)t->good_steps);
    char path[4200];
    join(path, sizeof path, dir, "trainer_state.json");
    int rc = s && json_dump_file(s, path, JSON_INDENT(2)) == 0
                 ? 0 : rc_error_set(err, RC_ERR_IO, "%s: cannot write", path);
    json_decref(s);
    return rc;
}

/* Replaces workdir/name by the complete directory tmp. */
static int publish(const char *tmp, const char *final, rc_error *err)
{
    char old[4200];
    if (snprintf(old, sizeof old, "%s.old", final) >= (int)sizeof old)
        return rc_error_set(err, RC_ERR_ARG, "%s: path too long", final);
    remove_tree(old);
    if (rename(final, old) && errno != ENOENT)
        return rc_error_set(err, RC_ERR_IO, "%s: cannot replace: %s", final, strerror(errno));
    if (rename(tmp, final))
        return rc_error_set(err, RC_ERR_IO, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    if (remove_tree(old))
        return rc_error_set(err, RC_ERR_IO, "%s: cannot remove the replaced directory: %s", old, strerror(errno));
    return 0;
}

static int set_pointer(const char *workdir, const char *name, rc_error *err)
{
    char tmp[4200], path[4200];
    join(tmp, sizeof tmp, workdir, "last_checkpoint.tmp");
    join(path, sizeof path, workdir, "last_checkpoint");
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%s\n", name) < 0 || fflush(f) || fsync(fileno(f)) || fclose(f)) {
        if (f)
            fclose(f);
        return rc_error_set(err, RC_ERR_IO, "%s: cannot write", tmp);
    }
    if (rename(tmp, path))
        return rc_error_set(err, RC_ERR_IO, "%s: cannot rename: %s", path, strerror(errno));
    return 0;
}

/* Fault injection for the kill test: REDCO_FAULT_KILL_IN_SAVE=STEP makes the process
 * kill itself in the middle of writing the checkpoint of that step, as a crash would. */
static void fault_point(const rc_trainer *t)
{
    const char *at = getenv("REDCO_FAULT_KILL_IN_SAVE");
    if (at && atoll(at) == t->step)
        raise(SIGKILL);
}

/* ---- the files of a directory: full tensors written one at a time -------------------- */

/* the parameter table's entry i as a tensor header (for its shape) */
static rc_tensor param_header(const nn_weights *w, int i)
{
    rc_tensor h = {.dtype = RC_F32, .ndim = w->p[i].ndim};
    for (int k = 0; k < h.ndim; k++)
        h.shape[k] = w->p[i].shape[k];
    return h;
}

/* this rank's share of parameter i's elements in local (an element range, possibly empty)
 * and where it starts in the moments, which hold the share alone (with zero) */
static void share_of(const rc_trainer *t, int i, int64_t *lo, int64_t *n)
{
    int64_t end = t->share_lo + t->share_n, hi = t->loff[i] + t->lnum[i] < end ? t->loff[i] + t->lnum[i] : end;
    *lo = t->loff[i] > t->share_lo ? t->loff[i] : t->share_lo;
    *n = hi > *lo ? hi - *lo : 0;
}

/* Parameter i's lnum[i] elements of this rank's model shard, from `src` laid out as local,
 * or (moments, shared: with zero) holding this rank's share of that layout alone; then
 * gathered over the data axis into `out` on its first rank (out has room for lnum[i]). */
static int shard_elements(rc_trainer *t, int i, const rc_buffer *src, int shared, float *out, rc_error *err)
{
    if (!shared || !t->zero)
        return rc_buffer_download(src, (size_t)t->loff[i] * sizeof(float), out, (size_t)t->lnum[i] * sizeof *out,
                                  err);
    int64_t lo, n, total = 0;
    share_of(t, i, &lo, &n);
    float *mine = n ? out + (lo - t->loff[i]) : out; /* already its place in the whole */
    if (n && rc_buffer_download(src, (size_t)(lo - t->share_lo) * sizeof(float), mine, (size_t)n * sizeof *mine, err))
        return -1;
    /* the shares follow each other in rank order: rank 0 receives the elements whole */
    const rc_mesh *m = rc_deployer_mesh(t->d);
    if (rc_comm_gather_f32(m->dp_comm, mine, n, 0, out, &total, err))
        return -1;
    if (m->dp_rank == 0 && total != t->lnum[i])
        return rc_error_set(err, RC_ERR_ARG, "checkpoint: the data-parallel shares of '%s' hold %lld elements, not %lld",
                            rci_params_weights(t->params)->p[i].name, (long long)total, (long long)t->lnum[i]);
    return 0;
}

/* Assembles tensor i of the trainer-layout buffer `local` (or, shared, of the moments with
 * zero) into `full` (that tensor alone, host memory) on the first rank of the model and
 * data axes: a collective over the model axis, and with shared moments the data axis.
 * `mine` is room for this rank's shard. */
static int gather_tensor(rc_trainer *t, int i, const rc_buffer *local, int shared, float *mine, float *full,
                         rc_error *err)
{
    const rc_mesh *m = rc_deployer_mesh(t->d);
    nn_weights *w = rci_params_weights(t->params);
    size_t bytes = (size_t)t->lnum[i] * sizeof(float);
    if (t->mp == 1 || t->specs[i].axis < 0) /* the shard is the whole tensor */
        return shard_elements(t, i, local, shared, full, err);
    void *all = NULL;
    size_t counts[4096];
    if (m->mp > 4096)
        return rc_error_set(err, RC_ERR_ARG, "checkpoint: %d model shards", m->mp);
    if (shard_elements(t, i, local, shared, mine, err) ||
        rc_comm_gather(m->mp_comm, mine, bytes, 0, &all, counts, err))
        return -1;
    rc_tensor h = param_header(w, i);
    for (int r = 0; m->mp_rank == 0 && r < m->mp; r++)
        rc_shard_put(&t->specs[i], &h, m->mp, r, (const float *)all + r * t->lnum[i], full);
    free(all);
    return 0;
}

/* the element count of the largest parameter (at least 1) */
static int64_t largest_param(const nn_weights *w)
{
    int64_t biggest = 1;
    for (int i = 0; i < w->n; i++)
        biggest = w->p[i].numel > biggest ? w->p[i].numel : biggest;
    return biggest;
}

/* A file of full tensors taken from the trainer's buffers tensor by tensor: the
 * parameters, or the moments (entry 2i: exp_avg of parameter i, 2i + 1: exp_avg_sq). */
typedef struct {
    rc_trainer *t;
    int moments;
    int done;                     /* entries taken so far: every rank takes all of them */
    float *buf;                   /* one full tensor, copied out (and gathered from shards) */
    float *mine;                  /* this rank's share of it */
} stream;

/* entry k copied out into buf (with model shards, a collective over the model axis) */
static int stream_source(void *ctx, int k, const void **data, rc_error *err)
{
    stream *s = ctx;
    rc_trainer *t = s->t;
    int i = s->moments ? k / 2 : k;
    /* the weights: the f32 master (laid out like the moments) with 16-bit weights */
    const rc_buffer *src = s->moments ? (k % 2 ? t->v : t->m) : t->master ? t->master : t->local;
    s->done++;
    *data = s->buf;
    return gather_tensor(t, i, src, s->moments || t->master, s->mine, s->buf, err);
}

/* Every rank: the entries of one file; the writer (rank 0, when `write`) writes them as
 * they come. A writer that fails still takes the remaining entries, so no rank waits
 * forever in a gather. */
static int write_tensors(rc_trainer *t, const char *path, int moments, int write, rc_error *err)
{
    nn_weights *w = rci_params_weights(t->params);
    int n = moments ? 2 * w->n : w->n;
    size_t most = (size_t)largest_param(w) * sizeof(float);
    stream s = {t, moments, 0, malloc(most), malloc(most)};
    rc_st_entry *e = write ? calloc((size_t)n, sizeof *e) : NULL;
    char (*names)[160] = write ? calloc((size_t)n, sizeof *names) : NULL;
    int rc = s.buf && s.mine && (!write || (e && names))
                 ? 0 : rc_error_set(err, RC_ERR_MEMORY, "checkpoint: out of memory");
    for (int k = 0; !rc && write && k < n; k++) {
        int i = moments ? k / 2 : k;
        if (moments)
            snprintf(names[k], sizeof names[k], "%s.%s", k % 2 ? "exp_avg_sq" : "exp_avg", w->p[i].name);
        e[k] = (rc_st_entry){moments ? names[k] : w->p[i].name, "F32", w->p[i].ndim, w->p[i].shape, NULL};
    }
    const char *meta[2] = {"format", "pt"};
    if (!rc && write)
        rc = rc_safetensors_write_from(path, n, e, moments ? 0 : 1, moments ? NULL : meta, stream_source, &s, err);
    rc_error drain = {0};
    const void *unused;
    int collective = t->mp > 1 || ((moments || t->master) && t->zero && rc_deployer_mesh(t->d)->dp > 1);
    while (s.done < n && s.buf && s.mine && collective)
        stream_source(&s, s.done, &unused, rc ? &drain : err);
    free(s.buf);
    free(s.mine);
    free(e);
    free(names);
    return rc;
}

/* One directory (a checkpoint, best/ or final/), written whole under a temporary name then
 * renamed. Every rank calls it: rank 0 writes, and with model shards all ranks take part
 * in the gathers of each tensor. */
static int save_dir(rc_trainer *t, const rc_train_options *o, const char *name, int full, rc_error *err)
{
    const char *wd = rci_deployer_workdir(t->d);
    int main = rc_deployer_is_main(t->d), rc = 0;
    char tmp[4200], final[4200], hidden[300], path[4300];
    snprintf(hidden, sizeof hidden, ".tmp-%.250s", name);
    if (join(tmp, sizeof tmp, wd, hidden) || join(final, sizeof final, wd, name))
        rc = rc_error_set(err, RC_ERR_ARG, "%s: path too long", wd);
    if (main && !rc) {
        remove_tree(tmp);
        if (mkdir(tmp, 0777))
            rc = rc_error_set(err, RC_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        if (!rc && t->model && !join(path, sizeof path, tmp, "config.json"))
            rc = rc_config_save(path, &t->model->config, err);
    }
    join(path, sizeof path, tmp, "model.safetensors");
    int r2 = write_tensors(t, path, 0, main && !rc, err);
    rc = rc ? rc : r2;
    if (main && !rc && full)
        fault_point(t);
    if (full) {
        join(path, sizeof path, tmp, "optimizer.safetensors");
        r2 = write_tensors(t, path, 1, main && !rc, err);
        rc = rc ? rc : r2;
    }
    if (main && !rc && full)
        rc = write_state(t, o, tmp, err);
    if (main && !rc)
        rc = rci_nn_model_copy_tokenizer(o->tokenizer_dir, tmp, err);
    if (main && !rc)
        rc = publish(tmp, final, err);
    return rc;
}

int rci_trainer_sync_params(rc_trainer *t, rc_error *err)
{
    if (t->mp == 1)
        return 0;
    nn_weights *w = rci_params_weights(t->params);
    const rc_mesh *m = rc_deployer_mesh(t->d);
    if (rci_params_restore(t->params))
        return rc_error_set(err, RC_ERR_MEMORY, "trainer: cannot allocate %lld parameters", (long long)w->numel);
    w = rci_params_weights(t->params);
    size_t most = (size_t)largest_param(w) * sizeof(float);
    float *full = malloc(most), *mine = malloc(most);
    int rc = full && mine ? 0 : rc_error_set(err, RC_ERR_MEMORY, "trainer: out of memory");
    for (int i = 0; !rc && i < w->n; i++) {
        rc = gather_tensor(t, i, t->master ? t->master : t->local, t->master != NULL, mine, full, err);
        /* a zero master is whole on the first rank of both axes: down the data axis first */
        if (!rc && t->master && t->zero)
            rc = rc_comm_bcast(m->dp_comm, full, (size_t)w->p[i].numel * sizeof *full, 0, err);
        if (!rc)
            rc = rc_comm_bcast(m->mp_comm, full, (size_t)w->p[i].numel * sizeof *full, 0, err);
        if (!rc)
            rc = rci_nn_weights_write(w, i, full, err);
    }
    free(full);
    free(mine);
    return rc;
}

int rci_trainer_save(rc_trainer *t, const rc_train_options *o, const char *name, rc_error *err)
{
    if (!rci_deployer_workdir(t->d))
        return 0;
    char ck[64];
    snprintf(ck, sizeof ck, "checkpoint-%lld", (long long)t->step);
    int rc = save_dir(t, o, name ? name : ck, 1, err);
    if (!rc && !name && rc_deployer_is_main(t->d))
        rc = set_pointer(rci_deployer_workdir(t->d), ck, err);
    if (rc_deployer_agree(t->d, rc, err))
        return -1;
    if (!name)
        snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", ck);
    return 0;
}

int rci_trainer_save_final(rc_trainer *t, const rc_train_options *o, rc_error *err)
{
    if (!rci_deployer_workdir(t->d))
        return 0;
    return rc_deployer_agree(t->d, save_dir(t, o, "final", 0, err), err);
}

/* ---- leftovers of a killed save ------------------------------------------------------- */

static int is_leftover(const char *workdir, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(name, ".tmp-", 5) == 0 && n > 5)
        return 1;
    if (strcmp(name, "last_checkpoint.tmp") == 0 || strcmp(name, "log.jsonl.tmp") == 0)
        return 1;
    /* NAME.old is the previous NAME, renamed just before the new one took its place: stale
     * only when NAME is there (otherwise it is the one complete copy) */
    char final[4200];
    struct stat st;
    if (n > 4 && strcmp(name + n - 4, ".old") == 0 &&
        snprintf(final, sizeof final, "%s/%.*s", workdir, (int)(n - 4), name) < (int)sizeof final)
        return stat(final, &st) == 0 && S_ISDIR(st.st_mode);
    return 0;
}

int rci_ckpt_clean(const char *workdir)
{
    DIR *dir = opendir(workdir);
    if (!dir)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        char path[4400];
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || !is_leftover(workdir, e->d_name) ||
            join(path, sizeof path, workdir, e->d_name))
            continue;
        struct stat st;
        if (lstat(path, &st) == 0 && (S_ISDIR(st.st_mode) ? remove_tree(path) : remove(path)) == 0)
            removed++;
    }
    closedir(dir);
    return removed;
}

/* ---- resume ---------------------------------------------------------------------------- */

int rci_ckpt_last(const char *workdir, char *name, size_t size)
{
    char path[4200];
    join(path, sizeof path, workdir, "last_checkpoint");
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int ok = fgets(name, (int)size, f) != NULL;
    fclose(f);
    name[strcspn(name, "\r\n")] = 0;
    return ok && name[0] ? 0 : -1;
}

/* reads n floats of tensor `name` of checkpoint ck into dst */
static int read_tensor(rc_checkpoint *ck, const char *name, float *dst, int64_t n, rc_error *err)
{
    rc_safetensors *f;
    int i;
    if (rc_checkpoint_find(ck, name, &f, &i) < 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: tensor '%s' is missing", rc_checkpoint_path(ck), name);
    return rc_safetensors_read_f32(f, i, dst, n, err);
}

/* reads tensor `name` into the trainer layout buffer `dst` (a shard of it with model
 * shards: read whole into tmp, then cut; with shared, dst holds this rank's share of the
 * layout alone: the moments with zero) */
static int load_one(rc_trainer *t, rc_checkpoint *ck, const char *name, int i, float *tmp, float *part,
                    rc_buffer *dst, int shared, rc_error *err)
{
    nn_weights *w = rci_params_weights(t->params);
    if (read_tensor(ck, name, tmp, w->p[i].numel, err))
        return -1;
    const float *mine = tmp;
    if (t->mp > 1) {
        rc_tensor h = param_header(w, i);
        rc_shard_take(&t->specs[i], &h, t->mp, rc_deployer_mesh(t->d)->mp_rank, tmp, part);
        mine = part;
    }
    if (shared && t->zero) {
        int64_t lo, n;
        share_of(t, i, &lo, &n);
        return n ? rc_buffer_upload(dst, (size_t)(lo - t->share_lo) * sizeof(float), mine + (lo - t->loff[i]),
                                    (size_t)n * sizeof(float), err)
                 : 0;
    }
    return rc_buffer_upload(dst, (size_t)t->loff[i] * sizeof(float), mine,
                            (size_t)t->lnum[i] * sizeof(float), err);
}

/* parameters and moments, tensor by tensor, into this rank's buffers */
static int load_tensors(rc_trainer *t, const char *dir, rc_error *err)
{
    nn_weights *w = rci_params_weights(t->params);
    char path[4200], name[160];
    float *tmp = malloc((size_t)largest_param(w) * sizeof *tmp);
    float *part = malloc((size_t)largest_param(w) * sizeof *part);
    if (!tmp || !part) {
        free(tmp);
        free(part);
        return rc_error_set(err, RC_ERR_MEMORY, "resume: out of memory");
    }
    join(path, sizeof path, dir, "model.safetensors");
    rc_checkpoint *ck = rc_checkpoint_open(path, err);
    int rc = ck ? 0 : -1;
    for (int i = 0; !rc && i < w->n; i++) /* 16-bit weights: the master, rounded into them after */
        rc = load_one(t, ck, w->p[i].name, i, tmp, part, t->master ? t->master : t->local, t->master != NULL, err);
    rc_checkpoint_close(ck);
    join(path, sizeof path, dir, "optimizer.safetensors");
    ck = rc ? NULL : rc_checkpoint_open(path, err);
    rc = rc || !ck ? -1 : 0;
    for (int i = 0; !rc && i < w->n; i++) {
        snprintf(name, sizeof name, "exp_avg.%s", w->p[i].name);
        rc = load_one(t, ck, name, i, tmp, part, t->m, 1, err);
        snprintf(name, sizeof name, "exp_avg_sq.%s", w->p[i].name);
        if (!rc)
            rc = load_one(t, ck, name, i, tmp, part, t->v, 1, err);
    }
    rc_checkpoint_close(ck);
    free(tmp);
    free(part);
    return rc;
}

/* Reads integer field key of trainer_state.json into dst, checked against [lo, hi]; an
 * absent optional field leaves dst. Errors name the file and the field. */
static int state_int(json_t *s, const char *path, const char *key, int required, int64_t lo, int64_t hi,
                     int64_t *dst, rc_error *err)
{
    json_t *v = json_object_get(s, key);
    if (!v && !required)
        return 0;
    if (!v)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: missing field \"%s\"", path, key);
    if (!json_is_integer(v))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s must be an integer", path, key);
    json_int_t x = json_integer_value(v);
    if (x < lo && lo == 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s must not be negative, got %lld", path, key, (long long)x);
    if (x < lo || x > hi)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s %lld is out of range [%lld, %lld]", path, key, (long long)x,
                            (long long)lo, (long long)hi);
    *dst = x;
    return 0;
}

/* A number or null (NAN) field; absent when optional leaves dst. */
static int state_real(json_t *s, const char *path, const char *key, int required, double *dst, rc_error *err)
{
    json_t *v = json_object_get(s, key);
    if (!v && !required)
        return 0;
    if (!v)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: missing field \"%s\"", path, key);
    if (!json_is_number(v) && !json_is_null(v))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s must be a number or null", path, key);
    *dst = json_is_null(v) ? NAN : json_number_value(v);
    return 0;
}

/* The saved counters, each range-checked against the file and this run's options. */
typedef struct {
    int64_t step, opt_step, epoch, epoch_step, seed, batch, dp, accum, good;
    double best, scale;
} saved_state;

static int state_read(json_t *s, const char *path, const rc_train_options *o, saved_state *st, rc_error *err)
{
    if (!json_is_object(s))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: the top level is not a JSON object", path);
    *st = (saved_state){.best = NAN, .scale = NAN};
    if (state_int(s, path, "step", 1, 0, INT64_MAX, &st->step, err) ||
        state_int(s, path, "optimizer_step", 1, 0, INT64_MAX, &st->opt_step, err) ||
        state_int(s, path, "epoch", 1, 0, INT_MAX, &st->epoch, err) ||
        state_int(s, path, "epoch_step", 1, 0, INT64_MAX, &st->epoch_step, err) ||
        state_int(s, path, "seed", 1, INT64_MIN, INT64_MAX, &st->seed, err) ||
        state_int(s, path, "batch_size", 1, 1, INT_MAX, &st->batch, err) ||
        state_int(s, path, "data_parallel", 1, 1, INT_MAX, &st->dp, err) ||
        state_int(s, path, "grad_accum", 1, 1, INT_MAX, &st->accum, err) ||
        state_int(s, path, "loss_scale_good_steps", 0, 0, INT64_MAX, &st->good, err) ||
        state_real(s, path, "best_score", 1, &st->best, err) ||
        state_real(s, path, "loss_scale", 0, &st->scale, err))
        return -1;
    if (!isnan(st->scale) && !(st->scale > 0 && isfinite(st->scale)))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: loss_scale must be positive and finite, got %g", path, st->scale);
    if (isinf(st->best))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: best_score must be finite or null", path);
    /* the schedule: past its end is a checkpoint of another run */
    if (o->steps > 0 && st->step > o->steps)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: step %lld is past the schedule's %lld steps", path,
                            (long long)st->step, (long long)o->steps);
    if (o->steps <= 0 && st->epoch >= o->epochs)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: epoch %lld is past the schedule's %d epochs (epochs count from 0)",
                            path, (long long)st->epoch, o->epochs);
    return 0;
}

static int load_state(rc_trainer *t, const rc_train_options *o, const char *dir, rc_error *err)
{
    char path[4200];
    join(path, sizeof path, dir, "trainer_state.json");
    json_error_t je;
    json_t *s = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!s)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: line %d: %s", path, je.line, je.text);
    saved_state st;
    int bad = state_read(s, path, o, &st, err);
    json_decref(s);
    if (bad)
        return -1;
    const rc_mesh *m = rc_deployer_mesh(t->d);
    int64_t was = st.batch * st.dp * st.accum, now = (int64_t)o->batch_size * m->dp * (o->grad_accum > 0 ? o->grad_accum : 1);
    if (was != now)
        return rc_error_set(err, RC_ERR_ARG,
                            "%s: saved with a global batch of %lld examples, resumed with %lld: resume with the same batch size x processes x accumulation",
                            path, (long long)was, (long long)now);
    if ((uint64_t)st.seed != t->seed)
        return rc_error_set(err, RC_ERR_ARG, "%s: saved with seed %llu, resumed with %llu", path,
                            (unsigned long long)st.seed, (unsigned long long)t->seed);
    t->step = st.step;
    t->opt_step = st.opt_step;
    t->epoch = (int)st.epoch;
    t->epoch_step = st.epoch_step;
    t->best_eval = isnan(st.best) ? INFINITY : st.best;
    if (t->scaling) { /* the saved scale carries on (a run saved without scaling: the option's) */
        t->scale = isnan(st.scale) ? t->scale : st.scale;
        t->good_steps = st.good;
    }
    return 0;
}

int rci_trainer_resume(rc_trainer *t, const rc_train_options *o, rc_error *err)
{
    const char *wd = rci_deployer_workdir(t->d);
    char name[256], dir[4400];
    if (!wd || rci_ckpt_last(wd, name, sizeof name)) {
        rci_deployer_note(t->d, "resume: no complete checkpoint in %s; starting at step 0", wd ? wd : "(no workdir)");
        /* every step runs again: the records of an earlier try go */
        return rc_deployer_agree(t->d, wd ? rci_deployer_log_resume(t->d, 0, err) : 0, err) ? -1 : 0;
    }
    if (join(dir, sizeof dir, wd, name))
        return rc_error_set(err, RC_ERR_ARG, "%s: path too long", wd);
    /* every rank reads the same files (the workdir is shared, as a checkpoint directory is) */
    int rc = load_state(t, o, dir, err); /* the small file first: a broken one is refused before the tensors */
    if (!rc)
        rc = load_tensors(t, dir, err);
    if (rc_deployer_agree(t->d, rc, err))
        return -1;
    if (t->master) /* the 16-bit weights rounded from the master, as after a step */
        rc = rci_trainer_round_master(t, err);
    if (rc_deployer_agree(t->d, rc, err))
        return -1;
    /* the steps after the checkpoint run again: their old records go */
    if (rc_deployer_agree(t->d, rci_deployer_log_resume(t->d, t->step, err), err))
        return -1;
    snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", name);
    rci_deployer_note(t->d, "resume: continuing from %s (step %lld)", dir, (long long)t->step);
    return 0;
}
