/* model_io.c - model directories: config.json plus safetensors weights, read and written
 * with Hugging Face names and layouts, and the tokenizer files that travel with them. */
#include "internal.h"
#include "nn_internal.h"
#include "redco/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int shapes_equal(const rc_st_tensor *t, const rci_nn_param *p)
{
    if (t->ndim != p->ndim)
        return 0;
    for (int i = 0; i < p->ndim; i++)
        if (t->shape[i] != p->shape[i])
            return 0;
    return 1;
}

static void shape_text(int ndim, const int64_t *shape, char *buf, size_t size)
{
    rc_tensor t = {.ndim = ndim};
    for (int i = 0; i < ndim && i < RC_MAX_DIMS; i++)
        t.shape[i] = shape[i];
    rc_shape_str(&t, buf, size);
}

/* The checkpoint tensor of parameter i, its shape checked. */
static int find_param(rc_checkpoint *ck, const rci_nn_weights *w, int i, rc_safetensors **f, int *idx,
                      rc_error *err)
{
    const rci_nn_param *p = &w->p[i];
    if (rc_checkpoint_find(ck, p->name, f, idx) < 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: parameter '%s' is missing", rc_checkpoint_path(ck),
                            p->name);
    const rc_st_tensor *t = rc_safetensors_info(*f, *idx);
    if (!shapes_equal(t, p)) {
        char have[96], want[96];
        shape_text(t->ndim, t->shape, have, sizeof have);
        shape_text(p->ndim, p->shape, want, sizeof want);
        return rc_error_set(err, RC_ERR_SHAPE, "%s: tensor '%s' has shape %s, the model needs %s",
                            rc_safetensors_path(*f), t->name, have, want);
    }
    return 0;
}

int rci_nn_weights_load(rci_nn_weights *w, rc_checkpoint *ck, rc_error *err)
{
    int64_t most = 1;
    for (int i = 0; i < w->n; i++)
        most = w->p[i].numel > most ? w->p[i].numel : most;
    void *x = malloc((size_t)most * rc_dtype_size(w->dtype));
    int rc = x ? 0 : rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", rc_checkpoint_path(ck));
    for (int i = 0; !rc && i < w->n; i++) {
        rc_safetensors *f;
        int idx;
        rc = find_param(ck, w, i, &f, &idx, err) ||
             rc_safetensors_read(f, idx, w->dtype, x, w->p[i].numel, err) || /* converted to the storage dtype */
             rci_nn_weights_write_raw(w, i, x, err) ? -1 : 0;
    }
    free(x);
    return rc;
}

int rci_nn_model_load(const char *dir, rc_model_config *c, rci_nn_weights *w, rc_backend *be,
                      rc_error *err)
{
    return rci_nn_model_load_dtype(dir, c, w, be, RC_F32, err);
}

rc_checkpoint *rci_nn_model_open(const char *dir, rc_model_config *c, rci_nn_weights *w, rc_dtype dt,
                                 rc_error *err)
{
    memset(w, 0, sizeof *w);
    if (rc_config_load(dir, c, err) || rci_nn_model_weights(c, w, err))
        return NULL;
    w->dtype = dt;
    rc_checkpoint *ck = rc_checkpoint_open(dir, err);
    int rc = ck ? 0 : -1;
    for (int i = 0; !rc && i < w->n; i++) {
        rc_safetensors *f;
        int idx;
        rc = find_param(ck, w, i, &f, &idx, err);
    }
    const char *const *tied = rci_nn_family_of(c->type)->tied; /* a loaded config's family exists */
    for (int k = 0; !rc && tied && tied[k]; k++)
        if (rci_nn_weights_find(w, tied[k]) < 0)
            rc_checkpoint_find(ck, tied[k], NULL, NULL); /* a tied copy: accept it */
    if (!rc && rc_checkpoint_check_unused(ck, err) > 0)
        rc = -1;
    if (rc) {
        rc_checkpoint_close(ck);
        rci_nn_weights_free(w);
        return NULL;
    }
    return ck;
}

int rci_nn_model_load_dtype(const char *dir, rc_model_config *c, rci_nn_weights *w, rc_backend *be,
                            rc_dtype dt, rc_error *err)
{
    rc_checkpoint *ck = rci_nn_model_open(dir, c, w, dt, err);
    if (!ck)
        return -1;
    int rc = rci_nn_weights_alloc(w, be, err) ? rc_error_set(err, RC_ERR_MEMORY, "%s: cannot allocate %lld parameters",
                                                             dir, (long long)w->numel)
                                              : 0;
    if (!rc)
        rc = rci_nn_weights_load(w, ck, err);
    rc_checkpoint_close(ck);
    if (rc)
        rci_nn_weights_free(w);
    return rc;
}

static int make_dir(const char *dir, rc_error *err)
{
    if (mkdir(dir, 0777) == 0 || errno == EEXIST)
        return 0;
    return rc_error_set(err, RC_ERR_IO, "%s: cannot create the directory: %s", dir, strerror(errno));
}

/* the Hugging Face torch_dtype of a storage dtype */
static const char *torch_dtype(rc_dtype t)
{
    return t == RC_BF16 ? "bfloat16" : t == RC_F16 ? "float16" : "float32";
}

/* Adds "torch_dtype" to the config.json at path (written by rc_config_save), atomically. */
static int config_set_dtype(const char *path, rc_dtype t, rc_error *err)
{
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!o)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s", path, je.text);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int rc = json_object_set_new(o, "torch_dtype", json_string(torch_dtype(t))) ||
                     json_dump_file(o, tmp, JSON_INDENT(2) | JSON_SORT_KEYS) || rename(tmp, path)
                 ? rc_error_set(err, RC_ERR_IO, "%s: cannot write torch_dtype: %s", path, strerror(errno))
                 : 0;
    if (rc)
        unlink(tmp);
    json_decref(o);
    return rc;
}

int rci_nn_model_save(const char *dir, const rc_model_config *c, const rci_nn_weights *w, rc_error *err)
{
    char path[4096];
    if (make_dir(dir, err))
        return -1;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (rc_config_save(path, c, err) || (w->dtype != RC_F32 && config_set_dtype(path, w->dtype, err)))
        return -1;
    rc_st_entry *t = malloc((size_t)(w->n ? w->n : 1) * sizeof *t);
    size_t bytes = rci_nn_weights_bytes(w);
    char *host = malloc(bytes ? bytes : 1); /* the stored values, copied out */
    const char *dtype = rc_st_dtype_name(w->dtype);
    int rc = -1;
    if (t && host) {
        rc = rc_buffer_download(w->buf, 0, host, bytes, err);
        for (int i = 0; i < w->n; i++)
            t[i] = (rc_st_entry){w->p[i].name, dtype, w->p[i].ndim, w->p[i].shape,
                                 host + rci_nn_weights_offset(w, i)};
        const char *meta[2] = {"format", "pt"};
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (!rc)
            rc = rc_safetensors_write_entries(path, w->n, t, 1, meta, err);
    } else {
        rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", dir);
    }
    free(t);
    free(host);
    return rc;
}

