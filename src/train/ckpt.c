/* ckpt.c - training checkpoints and the final model directory, from and into a view of
 * the training state (ckpt.h).
 *
 * workdir/checkpoint-STEP/  config.json (built-in models), model.safetensors (full
 *                           tensors, HF names), optimizer.safetensors (exp_avg.NAME,
 *                           exp_avg_sq.NAME), trainer_state.json, tokenizer files
 * workdir/best/, final/     the best by eval score, and the final model (no optimizer)
 *
 * The weights are always F32: with 16-bit training they are the f32 master weights (whole
 * tensors gathered from the data-parallel shares with zero, like the moments), so a resume
 * continues the master exactly and final/ loads in any dtype (generate --dtype bf16 rounds
 * it to the very weights the last step read).
 *
 * Directories are staged and published whole, the pointer after them (workdir.h): a run
 * killed at any moment leaves the previous checkpoint as the last valid one. Rank 0
 * writes; all ranks agree on the outcome. */
#include "ckpt.h"
#include "tok_files.h"
#include "workdir.h"
#include "redco/safetensors.h"

#include <errno.h>
#include <signal.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* trainer_state.json: the counters, and the options a resume must match */
static int write_state(const rci_ckpt_state *s, const rci_ckpt_counters *c, const rc_train_options *o,
                       const char *dir, rc_error *err)
{
    const rc_mesh *m = rc_deployer_mesh(s->d);
    /* best_score: what best/ was kept by (eval loss, or the metric negated when higher is
     * better); null before the first evaluation */
    json_t *j = json_pack("{s:I, s:I, s:i, s:I, s:I, s:i, s:i, s:i, s:b, s:o, s:s, s:o, s:I}", "step",
                          (json_int_t)c->step, "optimizer_step", (json_int_t)c->opt_step, "epoch", c->epoch,
                          "epoch_step", (json_int_t)c->epoch_step, "seed", (json_int_t)c->seed, "batch_size",
                          o->batch_size, "data_parallel", m->dp, "grad_accum",
                          o->grad_accum > 0 ? o->grad_accum : 1, "shuffle", o->shuffle,
                          "best_score", isfinite(c->best) ? json_real(c->best) : json_null(),
                          "dtype", rc_dtype_name(c->dtype), "loss_scale", c->scaling ? json_real(c->scale) : json_null(),
                          "loss_scale_good_steps", (json_int_t)c->good_steps);
    char path[4200];
    rci_path_join(path, sizeof path, dir, "trainer_state.json");
    int rc = j && json_dump_file(j, path, JSON_INDENT(2)) == 0
                 ? 0 : rc_error_set(err, RC_ERR_IO, "%s: cannot write", path);
    json_decref(j);
    return rc;
}

/* Fault injection for the kill test: REDCO_FAULT_KILL_IN_SAVE=STEP makes the process
 * kill itself in the middle of writing the checkpoint of that step, as a crash would. */
static void fault_point(int64_t step)
{
    const char *at = getenv("REDCO_FAULT_KILL_IN_SAVE");
    if (at && atoll(at) == step)
        raise(SIGKILL);
}

/* ---- the files of a directory: full tensors written one at a time -------------------- */

/* the parameter table's entry i as a tensor header (for its shape) */
static rc_tensor param_header(const rci_nn_weights *w, int i)
{
    rc_tensor h = {.dtype = RC_F32, .ndim = w->p[i].ndim};
    for (int k = 0; k < h.ndim; k++)
        h.shape[k] = w->p[i].shape[k];
    return h;
}

/* this rank's share of parameter i's elements in the local layout (an element range,
 * possibly empty), which the moments hold alone with zero */
static void share_of(const rci_ckpt_state *s, int i, int64_t *lo, int64_t *n)
{
    int64_t end = s->share_lo + s->share_n, hi = s->off[i] + s->num[i] < end ? s->off[i] + s->num[i] : end;
    *lo = s->off[i] > s->share_lo ? s->off[i] : s->share_lo;
    *n = hi > *lo ? hi - *lo : 0;
}

/* Parameter i's num[i] elements of this rank's model shard, from `src` in the local layout,
 * or (shared: the moments or master with zero) holding this rank's share of that layout
 * alone; then gathered over the data axis into `out` on its first rank (out has room for
 * num[i]). */
static int shard_elements(const rci_ckpt_state *s, int i, const rc_buffer *src, int shared, float *out,
                          rc_error *err)
{
    if (!shared || !s->zero)
        return rc_buffer_download(src, (size_t)s->off[i] * sizeof(float), out, (size_t)s->num[i] * sizeof *out,
                                  err);
    int64_t lo, n, total = 0;
    share_of(s, i, &lo, &n);
    float *mine = n ? out + (lo - s->off[i]) : out; /* already its place in the whole */
    if (n && rc_buffer_download(src, (size_t)(lo - s->share_lo) * sizeof(float), mine, (size_t)n * sizeof *mine, err))
        return -1;
    /* the shares follow each other in rank order: rank 0 receives the elements whole */
    const rc_mesh *m = rc_deployer_mesh(s->d);
    if (rc_comm_gather_f32(m->dp_comm, mine, n, 0, out, &total, err))
        return -1;
    if (m->dp_rank == 0 && total != s->num[i])
        return rc_error_set(err, RC_ERR_ARG, "checkpoint: the data-parallel shares of '%s' hold %lld elements, not %lld",
                            s->table->p[i].name, (long long)total, (long long)s->num[i]);
    return 0;
}

/* Assembles tensor i of the local-layout buffer `src` (or, shared, of a share-sized one)
 * into `full` (that tensor alone, host memory) on the first rank of the model and data
 * axes: a collective over the model axis, and for shared buffers with zero the data axis.
 * `mine` is room for this rank's shard. */
static int gather_tensor(const rci_ckpt_state *s, int i, const rc_buffer *src, int shared, float *mine,
                         float *full, rc_error *err)
{
    const rc_mesh *m = rc_deployer_mesh(s->d);
    size_t bytes = (size_t)s->num[i] * sizeof(float);
    if (m->mp == 1 || s->specs[i].axis < 0) /* the shard is the whole tensor */
        return shard_elements(s, i, src, shared, full, err);
    void *all = NULL;
    size_t counts[4096];
    if (m->mp > 4096)
        return rc_error_set(err, RC_ERR_ARG, "checkpoint: %d model shards", m->mp);
    if (shard_elements(s, i, src, shared, mine, err) || rc_comm_gather(m->mp_comm, mine, bytes, 0, &all, counts, err))
        return -1;
    rc_tensor h = param_header(s->table, i);
    for (int r = 0; m->mp_rank == 0 && r < m->mp; r++)
        rc_shard_put(&s->specs[i], &h, m->mp, r, (const float *)all + r * s->num[i], full);
    free(all);
    return 0;
}

/* the element count of the largest parameter (at least 1) */
static int64_t largest_param(const rci_nn_weights *w)
{
    int64_t biggest = 1;
    for (int i = 0; i < w->n; i++)
        biggest = w->p[i].numel > biggest ? w->p[i].numel : biggest;
    return biggest;
}

/* A file of full tensors taken from the state's buffers tensor by tensor: the weights, or
 * the moments (entry 2i: exp_avg of parameter i, 2i + 1: exp_avg_sq). */
typedef struct {
    const rci_ckpt_state *s;
    int moments;
    int done;                     /* entries taken so far: every rank takes all of them */
    float *buf;                   /* one full tensor, copied out (and gathered from shards) */
    float *mine;                  /* this rank's share of it */
} stream;

/* entry k copied out into buf (with model shards, a collective over the model axis) */
static int stream_source(void *ctx, int k, const void **data, rc_error *err)
{
    stream *st = ctx;
    const rci_ckpt_state *s = st->s;
    int i = st->moments ? k / 2 : k;
    const rc_buffer *src = st->moments ? (k % 2 ? s->v : s->m) : s->weights;
    st->done++;
    *data = st->buf;
    return gather_tensor(s, i, src, st->moments || s->master, st->mine, st->buf, err);
}

/* Every rank: the entries of one file; the writer (rank 0, when `write`) writes them as
 * they come. A writer that fails still takes the remaining entries, so no rank waits
 * forever in a gather. */
static int write_tensors(const rci_ckpt_state *s, const char *path, int moments, int write, rc_error *err)
{
    const rci_nn_weights *w = s->table;
    int n = moments ? 2 * w->n : w->n;
    size_t most = (size_t)largest_param(w) * sizeof(float);
    stream st = {s, moments, 0, malloc(most), malloc(most)};
    rc_st_entry *e = write ? calloc((size_t)n, sizeof *e) : NULL;
    char (*names)[160] = write ? calloc((size_t)n, sizeof *names) : NULL;
    int rc = st.buf && st.mine && (!write || (e && names))
                 ? 0 : rc_error_set(err, RC_ERR_MEMORY, "checkpoint: out of memory");
    for (int k = 0; !rc && write && k < n; k++) {
        int i = moments ? k / 2 : k;
        if (moments)
            snprintf(names[k], sizeof names[k], "%s.%s", k % 2 ? "exp_avg_sq" : "exp_avg", w->p[i].name);
        e[k] = (rc_st_entry){moments ? names[k] : w->p[i].name, "F32", w->p[i].ndim, w->p[i].shape, NULL};
    }
    const char *meta[2] = {"format", "pt"};
    if (!rc && write)
        rc = rc_safetensors_write_from(path, n, e, moments ? 0 : 1, moments ? NULL : meta, stream_source, &st, err);
    rc_error drain = {0};
    const void *unused;
    const rc_mesh *m = rc_deployer_mesh(s->d);
    int collective = m->mp > 1 || ((moments || s->master) && s->zero && m->dp > 1);
    while (st.done < n && st.buf && st.mine && collective)
        stream_source(&st, st.done, &unused, rc ? &drain : err);
    free(st.buf);
    free(st.mine);
    free(e);
    free(names);
    return rc;
}

/* One directory (a checkpoint, best/ or final/: c NULL, no optimizer state), staged whole
 * then published. Every rank calls it: rank 0 writes, and with model shards or shares all
 * ranks take part in the gathers of each tensor. */
static int save_dir(const rci_ckpt_state *s, const rci_ckpt_counters *c, const rc_train_options *o,
                    const char *name, rc_error *err)
{
    const char *wd = rci_deployer_workdir(s->d);
    int main = rc_deployer_is_main(s->d), rc = 0;
    char tmp[4400], path[4500];
    if (main)
        rc = rci_workdir_stage(wd, name, tmp, sizeof tmp, err);
    if (main && !rc && s->config && !rci_path_join(path, sizeof path, tmp, "config.json"))
        rc = rc_config_save(path, s->config, err);
    rci_path_join(path, sizeof path, tmp, "model.safetensors");
    int r2 = write_tensors(s, path, 0, main && !rc, err);
    rc = rc ? rc : r2;
    if (main && !rc && c)
        fault_point(c->step);
    if (c) {
        rci_path_join(path, sizeof path, tmp, "optimizer.safetensors");
        r2 = write_tensors(s, path, 1, main && !rc, err);
        rc = rc ? rc : r2;
    }
    if (main && !rc && c)
        rc = write_state(s, c, o, tmp, err);
    if (main && !rc)
        rc = rci_tok_copy_files(o->tokenizer_dir, tmp, err);
    if (main && !rc)
        rc = rci_workdir_publish(wd, name, tmp, err);
    return rc;
}

/* The final checkpoint's model (the weights just saved, as f32) opened for params, when
 * every rank opens it and finds each parameter in its shape; NULL (on every rank) when not. */
static rc_checkpoint *final_model(const rci_ckpt_state *s, rc_params *params, rc_error *err)
{
    char path[4200];
    const char *wd = rci_deployer_workdir(s->d);
    const rci_nn_weights *w = rci_params_table(params);
    rc_checkpoint *ck = NULL;
    if (wd && !rci_path_join(path, sizeof path, wd, "final"))
        ck = rc_checkpoint_open(path, NULL);
    for (int i = 0; ck && i < w->n; i++) {
        rc_safetensors *f;
        int k;
        if (rc_checkpoint_find(ck, w->p[i].name, &f, &k) < 0 || rc_safetensors_info(f, k)->numel != w->p[i].numel) {
            rc_checkpoint_close(ck);
            ck = NULL;
        }
    }
    double missing = ck == NULL; /* a rank that cannot see the workdir: every rank gathers */
    if (rc_comm_allreduce_sum_f64(rc_deployer_mesh(s->d)->world, &missing, 1, err) || missing > 0) {
        rc_checkpoint_close(ck);
        return NULL;
    }
    return ck;
}

int rci_ckpt_gather_params(const rci_ckpt_state *s, rc_params *params, int final, rc_error *err)
{
    const rc_mesh *m = rc_deployer_mesh(s->d);
    const rci_nn_weights *held = rci_params_weights(params);
    if (m->mp == 1 && (!held || held->buf)) /* one shard and the weights in place (not zero 3) */
        return 0;
    rc_checkpoint *ck = final && !rci_params_frozen(params) ? final_model(s, params, err) : NULL;
    if (ck) { /* read when first needed: no rank holds the whole model meanwhile */
        rci_params_restore_from(params, ck);
        return 0;
    }
    if (err && err->code)
        return -1;
    if (rci_params_restore(params))
        return rc_error_set(err, RC_ERR_MEMORY, "trainer: cannot allocate %lld parameters",
                            (long long)rc_params_numel(params));
    rci_nn_weights *w = rci_params_weights(params);
    size_t most = (size_t)largest_param(w) * sizeof(float);
    float *full = malloc(most), *mine = malloc(most);
    int rc = full && mine ? 0 : rc_error_set(err, RC_ERR_MEMORY, "trainer: out of memory");
    for (int i = 0; !rc && i < w->n; i++) {
        rc = gather_tensor(s, i, s->weights, s->master, mine, full, err);
        /* a zero master is whole on the first rank of both axes: down the data axis first */
        if (!rc && s->master && s->zero)
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

int rci_ckpt_save(const rci_ckpt_state *s, const rci_ckpt_counters *c, const rc_train_options *o,
                  const char *name, rc_error *err)
{
    const char *wd = rci_deployer_workdir(s->d);
    if (!wd)
        return 0;
    char ck[64];
    rci_workdir_checkpoint_name(c->step, ck, sizeof ck);
    int rc = save_dir(s, c, o, name ? name : ck, err);
    if (!rc && !name && rc_deployer_is_main(s->d))
        rc = rci_workdir_set_last(wd, ck, err);
    if (!rc && !name && o->save_total_limit > 0 && rc_deployer_is_main(s->d))
        rc = rci_workdir_rotate(wd, o->save_total_limit, err);
    return rc_deployer_agree(s->d, rc, err);
}

int rci_ckpt_save_final(const rci_ckpt_state *s, const rc_train_options *o, rc_error *err)
{
    if (!rci_deployer_workdir(s->d))
        return 0;
    return rc_deployer_agree(s->d, save_dir(s, NULL, o, "final", err), err);
}

/* ---- resume ---------------------------------------------------------------------------- */

/* reads n floats of tensor `name` of checkpoint ck into dst */
static int read_tensor(rc_checkpoint *ck, const char *name, float *dst, int64_t n, rc_error *err)
{
    rc_safetensors *f;
    int i;
    if (rc_checkpoint_find(ck, name, &f, &i) < 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: tensor '%s' is missing", rc_checkpoint_path(ck), name);
    return rc_safetensors_read_f32(f, i, dst, n, err);
}

/* reads tensor `name` into the local-layout buffer `dst` (a shard of it with model shards:
 * read whole into tmp, then cut; with shared and zero, dst holds this rank's share of the
 * layout alone: the moments and master, of which one shard reads its share alone) */
static int load_one(const rci_ckpt_state *s, rc_checkpoint *ck, const char *name, int i, float *tmp, float *part,
                    rc_buffer *dst, int shared, rc_error *err)
{
    const rc_mesh *m = rc_deployer_mesh(s->d);
    if (m->mp == 1 && shared && s->zero) {
        int64_t lo, n;
        rc_safetensors *f;
        int k;
        share_of(s, i, &lo, &n);
        if (rc_checkpoint_find(ck, name, &f, &k) < 0)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: tensor '%s' is missing", rc_checkpoint_path(ck), name);
        if (rc_safetensors_info(f, k)->numel != s->table->p[i].numel)
            return read_tensor(ck, name, tmp, s->table->p[i].numel, err); /* (its error names the sizes) */
        return n ? rc_safetensors_read_range(f, k, RC_F32, lo - s->off[i], n, tmp, err) ||
                   rc_buffer_upload(dst, (size_t)(lo - s->share_lo) * sizeof(float), tmp, (size_t)n * sizeof(float), err)
                 : 0;
    }
    if (read_tensor(ck, name, tmp, s->table->p[i].numel, err))
        return -1;
    const float *mine = tmp;
    if (m->mp > 1) {
        rc_tensor h = param_header(s->table, i);
        rc_shard_take(&s->specs[i], &h, m->mp, m->mp_rank, tmp, part);
        mine = part;
    }
    if (shared && s->zero) {
        int64_t lo, n;
        share_of(s, i, &lo, &n);
        return n ? rc_buffer_upload(dst, (size_t)(lo - s->share_lo) * sizeof(float), mine + (lo - s->off[i]),
                                    (size_t)n * sizeof(float), err)
                 : 0;
    }
    return rc_buffer_upload(dst, (size_t)s->off[i] * sizeof(float), mine, (size_t)s->num[i] * sizeof(float), err);
}

/* weights and moments, tensor by tensor, into this rank's buffers */
static int load_tensors(const rci_ckpt_state *s, const char *dir, rc_error *err)
{
    const rci_nn_weights *w = s->table;
    char path[4500], name[160];
    float *tmp = malloc((size_t)largest_param(w) * sizeof *tmp);
    float *part = malloc((size_t)largest_param(w) * sizeof *part);
    if (!tmp || !part) {
        free(tmp);
        free(part);
        return rc_error_set(err, RC_ERR_MEMORY, "resume: out of memory");
    }
    rci_path_join(path, sizeof path, dir, "model.safetensors");
    rc_checkpoint *ck = rc_checkpoint_open(path, err);
    int rc = ck ? 0 : -1;
    for (int i = 0; !rc && i < w->n; i++) /* 16-bit weights: the master, rounded into them after */
        rc = load_one(s, ck, w->p[i].name, i, tmp, part, s->weights, s->master, err);
    rc_checkpoint_close(ck);
    rci_path_join(path, sizeof path, dir, "optimizer.safetensors");
    ck = rc ? NULL : rc_checkpoint_open(path, err);
    rc = rc || !ck ? -1 : 0;
    for (int i = 0; !rc && i < w->n; i++) {
        snprintf(name, sizeof name, "exp_avg.%s", w->p[i].name);
        rc = load_one(s, ck, name, i, tmp, part, s->m, 1, err);
        snprintf(name, sizeof name, "exp_avg_sq.%s", w->p[i].name);
        if (!rc)
            rc = load_one(s, ck, name, i, tmp, part, s->v, 1, err);
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

/* trainer_state.json of dir into c, checked against this run: its options (the global
 * batch) and its seed (c->seed) */
static int load_state(const rci_ckpt_state *s, rci_ckpt_counters *c, const rc_train_options *o, const char *dir,
                      rc_error *err)
{
    char path[4500];
    rci_path_join(path, sizeof path, dir, "trainer_state.json");
    json_error_t je;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: line %d: %s", path, je.line, je.text);
    saved_state st;
    int bad = state_read(j, path, o, &st, err);
    json_decref(j);
    if (bad)
        return -1;
    const rc_mesh *m = rc_deployer_mesh(s->d);
    int64_t was = st.batch * st.dp * st.accum, now = (int64_t)o->batch_size * m->dp * (o->grad_accum > 0 ? o->grad_accum : 1);
    if (was != now)
        return rc_error_set(err, RC_ERR_ARG,
                            "%s: saved with a global batch of %lld examples, resumed with %lld: resume with the same batch size x processes x accumulation",
                            path, (long long)was, (long long)now);
    if ((uint64_t)st.seed != c->seed)
        return rc_error_set(err, RC_ERR_ARG, "%s: saved with seed %llu, resumed with %llu", path,
                            (unsigned long long)st.seed, (unsigned long long)c->seed);
    c->step = st.step;
    c->opt_step = st.opt_step;
    c->epoch = (int)st.epoch;
    c->epoch_step = st.epoch_step;
    c->best = isnan(st.best) ? INFINITY : st.best;
    if (c->scaling) { /* the saved scale carries on (a run saved without scaling: the option's) */
        c->scale = isnan(st.scale) ? c->scale : st.scale;
        c->good_steps = st.good;
    }
    return 0;
}

int rci_ckpt_resume(const rci_ckpt_state *s, rci_ckpt_counters *c, const rc_train_options *o, char *name,
                    size_t size, rc_error *err)
{
    const char *wd = rci_deployer_workdir(s->d);
    char dir[4400];
    if (!wd || rci_workdir_last(wd, name, size)) {
        rci_deployer_note(s->d, "resume: no complete checkpoint in %s; starting at step 0", wd ? wd : "(no workdir)");
        /* every step runs again: the records of an earlier try go */
        return rc_deployer_agree(s->d, wd ? rci_deployer_log_resume(s->d, 0, err) : 0, err) ? -1 : 0;
    }
    if (rci_path_join(dir, sizeof dir, wd, name))
        return rc_error_set(err, RC_ERR_ARG, "%s: path too long", wd);
    /* every rank reads the same files (the workdir is shared, as a checkpoint directory is) */
    int rc = load_state(s, c, o, dir, err); /* the small file first: a broken one is refused before the tensors */
    if (!rc)
        rc = load_tensors(s, dir, err);
    if (rc_deployer_agree(s->d, rc, err))
        return -1;
    /* the steps after the checkpoint run again: their old records go */
    if (rc_deployer_agree(s->d, rci_deployer_log_resume(s->d, c->step, err), err))
        return -1;
    rci_deployer_note(s->d, "resume: continuing from %s (step %lld)", dir, (long long)c->step);
    return 1;
}
