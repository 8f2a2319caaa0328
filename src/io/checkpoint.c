/* checkpoint.c - Hugging Face checkpoint directories: model.safetensors, or
 * model.safetensors.index.json and its shards, with name lookup across the shards. */
#include "redco/safetensors.h"
#include "internal.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const char *name;  /* owned by the file */
    int file, index;   /* the shard and the tensor's index in it */
    int used;
} ck_entry;

typedef struct {
    const char *name;
    int k;             /* index into e */
} ck_name;

struct rc_checkpoint {
    char *path;
    int n_files;
    rc_safetensors **files;
    int n;
    ck_entry *e;       /* files in order, tensors in header order */
    ck_name *by_name;  /* sorted by name */
};

/* The prefixes under which transformers' head classes nest their base models. */
static const char *const ck_prefixes[] = {"model.decoder.", "transformer.", "model."};
enum { N_PREFIXES = 3 };

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* dir + "/" + name, malloc'ed. */
static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s%s%s", dir, dir[0] && dir[strlen(dir) - 1] != '/' ? "/" : "", name);
    return p;
}

/* The directory part of a path ("." when none), malloc'ed. */
static char *path_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, path, n);
        d[n] = 0;
    }
    return d;
}

void rc_checkpoint_close(rc_checkpoint *ck)
{
    if (!ck)
        return;
    for (int i = 0; i < ck->n_files; i++)
        rc_safetensors_close(ck->files[i]);
    free(ck->files);
    free(ck->e);
    free(ck->by_name);
    free(ck->path);
    free(ck);
}

static int add_file(rc_checkpoint *ck, const char *file, rc_error *err)
{
    rc_safetensors **fs = realloc(ck->files, (size_t)(ck->n_files + 1) * sizeof *fs);
    if (!fs)
        return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", file);
    ck->files = fs;
    ck->files[ck->n_files] = rc_safetensors_open(file, err);
    if (!ck->files[ck->n_files])
        return -1;
    ck->n_files++;
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const ck_name *)a)->name, ((const ck_name *)b)->name);
}

/* Index into e of name, or -1. */
static int lookup(const rc_checkpoint *ck, const char *name)
{
    ck_name key = {name, 0};
    const ck_name *hit = ck->n ? bsearch(&key, ck->by_name, (size_t)ck->n, sizeof key, cmp_name)
                               : NULL;
    return hit ? hit->k : -1;
}

/* Builds the tensor table over all files; a name in two files is an error. */
static int build_table(rc_checkpoint *ck, rc_error *err)
{
    int n = 0;
    for (int f = 0; f < ck->n_files; f++)
        n += rc_safetensors_count(ck->files[f]);
    ck->e = calloc((size_t)n + 1, sizeof *ck->e);
    ck->by_name = malloc(((size_t)n + 1) * sizeof *ck->by_name);
    if (!ck->e || !ck->by_name)
        return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", ck->path);
    for (int f = 0; f < ck->n_files; f++)
        for (int i = 0; i < rc_safetensors_count(ck->files[f]); i++) {
            ck->e[ck->n] = (ck_entry){rc_safetensors_info(ck->files[f], i)->name, f, i, 0};
            ck->by_name[ck->n] = (ck_name){ck->e[ck->n].name, ck->n};
            ck->n++;
        }
    qsort(ck->by_name, (size_t)ck->n, sizeof *ck->by_name, cmp_name);
    for (int i = 1; i < ck->n; i++) {
        const ck_entry *a = &ck->e[ck->by_name[i - 1].k], *b = &ck->e[ck->by_name[i].k];
        if (strcmp(a->name, b->name) == 0)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: tensor '%s' is in both %s and %s",
                                ck->path, a->name, rc_safetensors_path(ck->files[a->file]),
                                rc_safetensors_path(ck->files[b->file]));
    }
    return 0;
}

/* Index of the already opened shard called name (relative to dir), or -1. */
static int shard_find(const rc_checkpoint *ck, const char *const *shard_names, const char *name)
{
    for (int i = 0; i < ck->n_files; i++)
        if (strcmp(shard_names[i], name) == 0)
            return i;
    return -1;
}

/* Opens every shard the weight map names (each once) and checks that each mapped name is
 * in its shard. */
static int open_index(rc_checkpoint *ck, const char *index_path, rc_error *err)
{
    json_error_t jerr;
    json_t *root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (!file_exists(index_path))
            return rc_error_set(err, RC_ERR_IO, "%s: cannot read: %s", index_path,
                                strerror(errno));
        return rc_error_set(err, RC_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s",
                            index_path, jerr.line, jerr.column, jerr.text);
    }
    json_t *map = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    json_t *meta = json_is_object(root) ? json_object_get(root, "metadata") : NULL;
    char *dir = path_dir(index_path);
    const char **shard_names = malloc((json_object_size(map) + 1) * sizeof *shard_names);
    int rc = 0;
    if (!dir || !shard_names)
        rc = rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", index_path);
    else if (!json_is_object(root))
        rc = rc_error_set(err, RC_ERR_FORMAT, "%s: the top level is not a JSON object",
                          index_path);
    else if (!json_is_object(map))
        rc = rc_error_set(err, RC_ERR_FORMAT, "%s: \"weight_map\" is missing or not an object",
                          index_path);
    else if (json_object_size(map) == 0)
        rc = rc_error_set(err, RC_ERR_FORMAT, "%s: \"weight_map\" is empty", index_path);
    else if (meta && !json_is_object(meta) && !json_is_null(meta))
        rc = rc_error_set(err, RC_ERR_FORMAT, "%s: \"metadata\" is not an object", index_path);
    const char *name;
    json_t *v;
    if (!rc)
        json_object_foreach(map, name, v) {
            const char *shard = json_string_value(v);
            if (!json_is_string(v) || !shard[0] || shard[0] == '/') {
                rc = rc_error_set(err, RC_ERR_FORMAT, "%s: weight_map entry '%s' is not a "
                                  "relative file name", index_path, name);
                break;
            }
            if (shard_find(ck, shard_names, shard) >= 0)
                continue;
            char *file = path_join(dir, shard);
            if (!file) {
                rc = rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", index_path);
                break;
            }
            if (!file_exists(file))
                rc = rc_error_set(err, RC_ERR_IO, "%s: weight_map names shard '%s' (for '%s') "
                                  "but %s does not exist", index_path, shard, name, file);
            else
                rc = add_file(ck, file, err);
            free(file);
            if (rc)
                break;
            shard_names[ck->n_files - 1] = shard;
        }
    if (!rc)
        json_object_foreach(map, name, v) {
            int f = shard_find(ck, shard_names, json_string_value(v));
            if (rc_safetensors_find(ck->files[f], name) < 0) {
                rc = rc_error_set(err, RC_ERR_FORMAT, "%s: weight_map puts '%s' in '%s' but that "
                                  "file has no such tensor", index_path, name,
                                  json_string_value(v));
                break;
            }
        }
    free(shard_names);
    free(dir);
    json_decref(root);
    return rc;
}

rc_checkpoint *rc_checkpoint_open(const char *path, rc_error *err)
{
    rc_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck || !(ck->path = strdup(path))) {
        free(ck);
        rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
        return NULL;
    }
    int rc;
    if (is_dir(path)) {
        char *single = path_join(path, "model.safetensors");
        char *index = path_join(path, "model.safetensors.index.json");
        if (!single || !index)
            rc = rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
        else if (file_exists(single))
            rc = add_file(ck, single, err);
        else if (file_exists(index))
            rc = open_index(ck, index, err);
        else
            rc = rc_error_set(err, RC_ERR_IO, "%s: no model.safetensors or "
                              "model.safetensors.index.json in this directory", path);
        free(single);
        free(index);
    } else if (!file_exists(path)) {
        rc = rc_error_set(err, RC_ERR_IO, "%s: no such file or directory", path);
    } else if (ends_with(path, ".json")) {
        rc = open_index(ck, path, err);
    } else {
        rc = add_file(ck, path, err);
    }
    if (rc || build_table(ck, err)) {
        rc_checkpoint_close(ck);
        return NULL;
    }
    return ck;
}

int rc_checkpoint_count(const rc_checkpoint *ck)
{
    return ck->n;
}

const char *rc_checkpoint_name(const rc_checkpoint *ck, int k)
{
    return k >= 0 && k < ck->n ? ck->e[k].name : NULL;
}

int rc_checkpoint_entry(const rc_checkpoint *ck, int k, rc_safetensors **file, int *index)
{
    if (k < 0 || k >= ck->n)
        return -1;
    if (file)
        *file = ck->files[ck->e[k].file];
    if (index)
        *index = ck->e[k].index;
    return 0;
}

const char *rc_checkpoint_path(const rc_checkpoint *ck)
{
    return ck->path;
}

int rc_checkpoint_used(const rc_checkpoint *ck, int k)
{
    return k >= 0 && k < ck->n ? ck->e[k].used : 0;
}

/* Candidates in the documented order; returns the index into e of the first present. */
static int find_candidates(const rc_checkpoint *ck, const char *name, char *buf)
{
    int k = lookup(ck, name);
    for (int p = 0; p < N_PREFIXES && k < 0; p++) {
        size_t n = strlen(ck_prefixes[p]);
        if (strncmp(name, ck_prefixes[p], n) == 0)
            k = lookup(ck, name + n);
    }
    for (int p = 0; p < N_PREFIXES && k < 0; p++) {
        sprintf(buf, "%s%s", ck_prefixes[p], name);
        k = lookup(ck, buf);
    }
    return k;
}

int rc_checkpoint_find(rc_checkpoint *ck, const char *name, rc_safetensors **file, int *index)
{
    if (!name)
        return -1;
    char small[256];
    size_t need = strlen(name) + 32;
    char *buf = need <= sizeof small ? small : malloc(need);
    if (!buf)
        return -1;
    int k = find_candidates(ck, name, buf);
    if (buf != small)
        free(buf);
    if (k < 0)
        return -1;
    ck->e[k].used = 1;
    rc_checkpoint_entry(ck, k, file, index);
    return k;
}

int rc_checkpoint_is_known_buffer(const char *name)
{
    static const char *const suffixes[] = {
        ".attn.bias", ".attn.masked_bias", ".crossattention.bias",
        ".crossattention.masked_bias", ".inv_freq", ".cos_cached", ".sin_cached",
    };
    for (size_t i = 0; name && i < sizeof suffixes / sizeof suffixes[0]; i++) {
        /* also a bare "attn.bias" (no parent module) */
        if (ends_with(name, suffixes[i]) || strcmp(name, suffixes[i] + 1) == 0)
            return 1;
    }
    return 0;
}

int rc_checkpoint_check_unused(const rc_checkpoint *ck, rc_error *err)
{
    int count = 0;
    char names[400] = "";
    size_t len = 0;
    for (int k = 0; k < ck->n; k++) {
        if (ck->e[k].used || rc_checkpoint_is_known_buffer(ck->e[k].name))
            continue;
        if (count < 4 && len < sizeof names)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s'%s'", count ? ", " : "",
                                    ck->e[k].name);
        count++;
    }
    if (count)
        rc_error_set(err, RC_ERR_FORMAT, "%s: %d tensor%s not used by the model: %s%s", ck->path,
                     count, count == 1 ? "" : "s", names, count > 4 ? ", ..." : "");
    return count;
}
