/* lora.c - LoRA adapters on a built-in model: their parameters (PEFT's names), their
 * leaves for the forward pass, PEFT's adapter directory written and read, and the merge
 * into the model's weights. */
#include "nn_internal.h"
#include "params.h"
#include "redco/lora.h"
#include "redco/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { MAX_TARGETS = 16 };

struct rc_lora {
    rc_model *m;
    rc_params *params;            /* adapter k: A at 2k, B at 2k + 1 */
    int r;
    double alpha;
    int conv1d;                   /* GPT-2: the targets are Conv1D weights [in, out] */
    int n;                        /* adapted modules */
    int *base;                    /* [n] the module's weight in the model's table */
    int ntargets;
    char targets[MAX_TARGETS][64];
};

/* the module of weight `name` ("X.weight" -> "X") into mod; 0 when it is no projection
 * LoRA can adapt (not 2-D, an embedding or the head) */
static int module_of(const rci_nn_param *p, char *mod, size_t size)
{
    size_t n = strlen(p->name);
    if (p->ndim != 2 || n < 8 || strcmp(p->name + n - 7, ".weight") || strstr(p->name, "wte") ||
        strstr(p->name, "wpe") || strstr(p->name, "embed_tokens") || strstr(p->name, "lm_head"))
        return 0;
    snprintf(mod, size, "%.*s", (int)(n - 7), p->name);
    return 1;
}

/* PEFT's match of a target list: the module is the target or ends in "." + target */
static int matches(const rc_lora *l, const char *mod)
{
    size_t n = strlen(mod);
    for (int k = 0; k < l->ntargets; k++) {
        size_t m = strlen(l->targets[k]);
        if (!strcmp(mod, l->targets[k]) || (n > m && mod[n - m - 1] == '.' && !strcmp(mod + n - m, l->targets[k])))
            return 1;
    }
    return 0;
}

/* "a,b,c" into l->targets */
static int parse_targets(rc_lora *l, const char *list, rc_error *err)
{
    const char *s = list;
    while (*s) {
        size_t len = strcspn(s, ",");
        if (len == 0 || len >= sizeof l->targets[0] || l->ntargets == MAX_TARGETS)
            return rc_error_set(err, RC_ERR_ARG, "lora: targets '%s': names of 1 to %d bytes, at most %d of them",
                                list, (int)sizeof l->targets[0] - 1, MAX_TARGETS);
        snprintf(l->targets[l->ntargets++], sizeof l->targets[0], "%.*s", (int)len, s);
        s += len + (s[len] == ',');
    }
    return l->ntargets ? 0 : rc_error_set(err, RC_ERR_ARG, "lora: no target modules");
}

/* PEFT's kaiming_uniform_(a = sqrt(5)) on A [r, in]: uniform in +-1/sqrt(in) */
static int fill_a(float *x, int64_t numel, int ndim, const int64_t *shape, rc_rng rng, void *user)
{
    (void)user;
    double bound = ndim == 2 && shape[1] > 0 ? 1.0 / sqrt((double)shape[1]) : 0.0;
    for (int64_t i = 0; i < numel; i++)
        x[i] = (float)(bound * (2.0 * rc_rng_uniform(&rng) - 1.0));
    return 0;
}

/* the adapters' table: A [r, in] and B [out, r] for every matching module */
static int declare(rc_lora *l, rc_error *err)
{
    rci_nn_weights *w = rci_params_table(l->m->params); /* names and shapes (values may wait in a file) */
    if (!(l->base = calloc((size_t)w->n + 1, sizeof *l->base)) || !(l->params = rc_params_new()))
        return rc_error_set(err, RC_ERR_MEMORY, "lora: out of memory");
    for (int i = 0; i < w->n; i++) {
        char mod[96], name[160];
        if (!module_of(&w->p[i], mod, sizeof mod) || !matches(l, mod))
            continue;
        int64_t in = w->p[i].shape[l->conv1d ? 0 : 1], out = w->p[i].shape[l->conv1d ? 1 : 0];
        snprintf(name, sizeof name, "base_model.model.%s.lora_A.weight", mod);
        int rc = rc_params_add_init(l->params, name, 2, (int64_t[]){l->r, in},
                                    &(rc_init){.kind = RC_INIT_FILL, .fill = fill_a});
        snprintf(name, sizeof name, "base_model.model.%s.lora_B.weight", mod);
        rc |= rc_params_add_init(l->params, name, 2, (int64_t[]){out, l->r}, &(rc_init){.kind = RC_INIT_ZEROS});
        if (rc)
            return rc_error_set(err, RC_ERR_ARG, "lora: cannot declare the adapter of '%s' (name too long?)", mod);
        l->base[l->n++] = i;
    }
    if (l->n == 0) {
        char list[MAX_TARGETS * 66] = "";
        for (int k = 0; k < l->ntargets; k++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? "," : "", l->targets[k]);
        return rc_error_set(err, RC_ERR_ARG, "lora: no module of the %s model matches the targets '%s' (%s)",
                            l->m->config.model_type, list, rci_nn_family_of(l->m->config.type)->lora_modules);
    }
    return 0;
}

/* "gpt2 and llama": the families LoRA adapts */
static void lora_families(char *buf, size_t size)
{
    int n = 0, k = 0;
    for (int i = 0; rci_nn_families[i]; i++)
        n += rci_nn_families[i]->lora_targets != NULL;
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; rci_nn_families[i] && len < size; i++)
        if (rci_nn_families[i]->lora_targets) {
            const char *sep = k == 0 ? "" : k == n - 1 ? " and " : ", ";
            len += (size_t)snprintf(buf + len, size - len, "%s%s", sep, rci_nn_families[i]->variants[0].model_type);
            k++;
        }
}

/* a new, unattached set of adapters of model m; NULL with err set */
static rc_lora *lora_make(rc_model *m, int r, double alpha, const char *targets, rc_error *err)
{
    if (!m) {
        rc_error_set(err, RC_ERR_ARG, "lora: no model");
        return NULL;
    }
    const rci_nn_family *f = rci_nn_family_of(m->config.type);
    if (!f || !f->lora_targets) {
        char names[200];
        lora_families(names, sizeof names);
        rc_error_set(err, RC_ERR_UNSUPPORTED, "lora: model type '%s': LoRA supports the %s families",
                     m->config.model_type, names);
        return NULL;
    }
    if (m->lora) {
        rc_error_set(err, RC_ERR_ARG, "lora: the model already has adapters attached");
        return NULL;
    }
    if (r < 1 || !isfinite(alpha) || alpha < 0) {
        rc_error_set(err, RC_ERR_ARG, "lora: rank %d, alpha %g (rank >= 1, alpha >= 0)", r, alpha);
        return NULL;
    }
    rc_lora *l = calloc(1, sizeof *l);
    if (!l) {
        rc_error_set(err, RC_ERR_MEMORY, "lora: out of memory");
        return NULL;
    }
    l->m = m;
    l->r = r;
    l->alpha = alpha > 0 ? alpha : r;
    l->conv1d = f->conv1d;
    if (!targets)
        targets = f->lora_targets;
    if (parse_targets(l, targets, err) || declare(l, err)) {
        rc_lora_free(l);
        return NULL;
    }
    rci_params_set_frozen(l->params, &(rci_frozen){m->params, l->n, l->base, l->conv1d});
    return l;
}

rc_lora *rc_lora_new(rc_model *m, const rc_lora_options *o, uint64_t seed, rc_error *err)
{
    rc_lora_options def = {.r = 8};
    rc_lora *l = lora_make(m, (o ? o : &def)->r, (o ? o : &def)->alpha, (o ? o : &def)->targets, err);
    if (!l)
        return NULL;
    /* A's draws from seed, B zeros: the model starts unchanged */
    if (rc_params_init_normal(l->params, 0.0, seed)) {
        rc_error_set(err, RC_ERR_MEMORY, "lora: cannot allocate %lld adapter values", (long long)rc_params_numel(l->params));
        rc_lora_free(l);
        return NULL;
    }
    if (rc_params_to(l->params, rci_params_backend(m->params), err)) {
        rc_lora_free(l);
        return NULL;
    }
    m->lora = l;
    return l;
}

void rc_lora_free(rc_lora *l)
{
    if (!l)
        return;
    if (l->m && l->m->lora == l)
        l->m->lora = NULL;
    rc_params_free(l->params);
    free(l->base);
    free(l);
}

rc_params *rc_lora_params(rc_lora *l)
{
    return l ? l->params : NULL;
}

int64_t rc_lora_numel(const rc_lora *l)
{
    return l ? rc_params_numel(l->params) : 0;
}

int rc_lora_rank(const rc_lora *l)
{
    return l ? l->r : 0;
}

double rc_lora_scaling(const rc_lora *l)
{
    return l ? l->alpha / l->r : 0.0;
}

int rci_lora_leaves(rc_graph *g, rc_lora *l, rci_nn_lora_set *out)
{
    rci_nn_weights *w = rci_params_table(l->m->params);
    memset(out, 0, sizeof *out);
    out->a = calloc((size_t)w->n + 1, sizeof *out->a);
    out->b = calloc((size_t)w->n + 1, sizeof *out->b);
    out->scale = l->alpha / l->r;
    if (!out->a || !out->b) {
        rci_fail(g, RC_ERR_MEMORY, "lora: out of memory");
        return -1;
    }
    for (int k = 0; k < l->n; k++) {
        out->a[l->base[k]] = rc_params_get(g, l->params, rc_params_name(l->params, 2 * k));
        out->b[l->base[k]] = rc_params_get(g, l->params, rc_params_name(l->params, 2 * k + 1));
    }
    return rc_graph_error(g) ? -1 : 0;
}

void rci_lora_detach(rc_lora *l)
{
    l->m = NULL;
}

/* ---- merge --------------------------------------------------------------------------- */

/* W += s B A (Linear W [out, in]) or W += s (B A)^T (Conv1D W [in, out]) */
static void merge_one(float *W, const float *A, const float *B, int64_t in, int64_t out, int r, double s,
                      int conv1d)
{
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) {
            double d = 0;
            for (int k = 0; k < r; k++)
                d += (double)B[o * r + k] * A[k * in + i];
            W[conv1d ? i * out + o : o * in + i] += (float)(s * d);
        }
}

int rc_lora_merge(rc_lora *l, rc_error *err)
{
    if (!l || !l->m)
        return rc_error_set(err, RC_ERR_ARG, "lora merge: %s", l ? "the model was freed" : "no adapters");
    rci_nn_weights *w = rci_params_weights(l->m->params);
    if (!w)
        return rc_error_set(err, RC_ERR_ARG, "lora merge: the model's weights are not in memory");
    int rc = 0;
    for (int k = 0; !rc && k < l->n; k++) {
        int i = l->base[k];
        int64_t in = w->p[i].shape[l->conv1d ? 0 : 1], out = w->p[i].shape[l->conv1d ? 1 : 0];
        float *W = malloc((size_t)w->p[i].numel * sizeof *W), *A = malloc((size_t)(l->r * in) * sizeof *A),
              *B = malloc((size_t)(l->r * out) * sizeof *B);
        rc = W && A && B ? 0 : rc_error_set(err, RC_ERR_MEMORY, "lora merge: out of memory for '%s'", w->p[i].name);
        if (!rc)
            rc = rci_nn_weights_read(w, i, W, err) || rc_params_read(l->params, 2 * k, A, err) ||
                 rc_params_read(l->params, 2 * k + 1, B, err) ? -1 : 0;
        if (!rc) {
            merge_one(W, A, B, in, out, l->r, l->alpha / l->r, l->conv1d);
            rc = rci_nn_weights_write(w, i, W, err);
        }
        free(W);
        free(A);
        free(B);
    }
    rci_params_touch(l->m->params);
    if (!rc && l->m->lora == l)
        l->m->lora = NULL;
    return rc;
}

/* ---- the PEFT directory --------------------------------------------------------------- */

static int make_dir(const char *dir, rc_error *err)
{
    if (mkdir(dir, 0777) && errno != EEXIST)
        return rc_error_set(err, RC_ERR_IO, "lora save: cannot create %s: %s", dir, strerror(errno));
    return 0;
}

static int write_config(const rc_lora *l, const char *path, rc_error *err)
{
    json_t *targets = json_array();
    for (int k = 0; k < l->ntargets; k++)
        json_array_append_new(targets, json_string(l->targets[k]));
    json_t *c = json_pack("{s:s, s:s, s:b, s:i, s:o, s:f, s:f, s:b, s:s, s:n, s:b, s:s, s:s, s:n, s:n, s:{}, s:{}}",
                          "peft_type", "LORA", "task_type", "CAUSAL_LM", "inference_mode", 1, "r", l->r,
                          "target_modules", targets, "lora_alpha", l->alpha, "lora_dropout", 0.0,
                          "fan_in_fan_out", l->conv1d, "bias", "none", "modules_to_save", "init_lora_weights", 1,
                          "base_model_name_or_path", l->m->dir, "revision", "main", "layers_to_transform",
                          "layers_pattern", "rank_pattern", "alpha_pattern");
    if (!c)
        return rc_error_set(err, RC_ERR_MEMORY, "lora save: out of memory for %s", path);
    int rc = json_dump_file(c, path, JSON_INDENT(2));
    json_decref(c);
    return rc ? rc_error_set(err, RC_ERR_IO, "lora save: cannot write %s", path) : 0;
}

int rc_lora_save(const rc_lora *l, const char *dir, rc_error *err)
{
    if (!l || !dir || !l->m)
        return rc_error_set(err, RC_ERR_ARG, "lora save: %s", !l ? "no adapters" : !dir ? "no directory" : "the model was freed");
    if (make_dir(dir, err))
        return -1;
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    if (write_config(l, path, err))
        return -1;
    int n = rc_params_count(l->params);
    const char **names = calloc((size_t)n, sizeof *names);
    int *ndims = calloc((size_t)n, sizeof *ndims);
    const int64_t **shapes = calloc((size_t)n, sizeof *shapes);
    float **data = calloc((size_t)n, sizeof *data);
    int rc = names && ndims && shapes && data ? 0 : rc_error_set(err, RC_ERR_MEMORY, "lora save: out of memory");
    for (int i = 0; !rc && i < n; i++) {
        names[i] = rc_params_name(l->params, i);
        rc_params_shape(l->params, i, &ndims[i], &shapes[i]);
        data[i] = malloc((size_t)rc_params_tensor_numel(l->params, i) * sizeof **data);
        rc = data[i] ? rc_params_read(l->params, i, data[i], err)
                     : rc_error_set(err, RC_ERR_MEMORY, "lora save: out of memory");
    }
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    const char *meta[2] = {"format", "pt"};
    if (!rc)
        rc = rc_safetensors_write(path, n, names, ndims, shapes, (const float *const *)data, 1, meta, err);
    for (int i = 0; data && i < n; i++)
        free(data[i]);
    free(names);
    free(ndims);
    free(shapes);
    free(data);
    return rc;
}

/* r, lora_alpha and target_modules of DIR/adapter_config.json, checked */
static int read_config(const char *path, int *r, double *alpha, char *targets, size_t size, rc_error *err)
{
    json_error_t je;
    json_t *c = json_load_file(path, 0, &je);
    if (!c)
        return rc_error_set(err, RC_ERR_IO, "lora: %s: %s (line %d)", path, je.text, je.line);
    json_t *type = json_object_get(c, "peft_type"), *jr = json_object_get(c, "r"),
           *ja = json_object_get(c, "lora_alpha"), *jt = json_object_get(c, "target_modules"),
           *jb = json_object_get(c, "bias");
    int rc = 0;
    if (!json_is_string(type) || strcmp(json_string_value(type), "LORA"))
        rc = rc_error_set(err, RC_ERR_ARG, "lora: %s: peft_type is not \"LORA\"", path);
    else if (!json_is_integer(jr) || !json_is_number(ja))
        rc = rc_error_set(err, RC_ERR_ARG, "lora: %s: r (an integer) and lora_alpha (a number) are required", path);
    else if (jb && !json_is_null(jb) && (!json_is_string(jb) || strcmp(json_string_value(jb), "none")))
        rc = rc_error_set(err, RC_ERR_UNSUPPORTED, "lora: %s: bias other than \"none\" is not supported", path);
    else if (!json_is_array(jt) || json_array_size(jt) == 0)
        rc = rc_error_set(err, RC_ERR_UNSUPPORTED, "lora: %s: target_modules must be a list of module names", path);
    if (!rc) {
        *r = (int)json_integer_value(jr);
        *alpha = json_number_value(ja);
        targets[0] = 0;
        for (size_t k = 0; !rc && k < json_array_size(jt); k++) {
            json_t *t = json_array_get(jt, k);
            if (!json_is_string(t))
                rc = rc_error_set(err, RC_ERR_ARG, "lora: %s: target_modules[%zu] is not a string", path, k);
            else
                snprintf(targets + strlen(targets), size - strlen(targets), "%s%s", k ? "," : "",
                         json_string_value(t));
        }
    }
    json_decref(c);
    return rc;
}

/* every adapter tensor from the file, by name and shape; no other tensor in it */
static int read_tensors(rc_lora *l, const char *path, rc_error *err)
{
    rc_safetensors *f = rc_safetensors_open(path, err);
    if (!f)
        return -1;
    int n = rc_params_count(l->params), rc = 0;
    for (int i = 0; !rc && i < n; i++) {
        const char *name = rc_params_name(l->params, i);
        int j = rc_safetensors_find(f, name), nd;
        const int64_t *shape;
        rc_params_shape(l->params, i, &nd, &shape);
        const rc_st_tensor *t = j >= 0 ? rc_safetensors_info(f, j) : NULL;
        if (!t)
            rc = rc_error_set(err, RC_ERR_ARG, "lora: %s has no tensor '%s'", path, name);
        else if (t->ndim != 2 || t->shape[0] != shape[0] || t->shape[1] != shape[1])
            rc = rc_error_set(err, RC_ERR_SHAPE, "lora: %s: '%s' is not [%lld, %lld]", path, name,
                              (long long)shape[0], (long long)shape[1]);
        int64_t k = shape[0] * shape[1];
        float *x = rc ? NULL : malloc((size_t)k * sizeof *x);
        if (!rc && !x)
            rc = rc_error_set(err, RC_ERR_MEMORY, "lora: out of memory");
        if (!rc)
            rc = rc_safetensors_read_f32(f, j, x, k, err) || rc_params_write(l->params, i, x, err) ? -1 : 0;
        free(x);
    }
    if (!rc && rc_safetensors_count(f) != n)
        for (int j = 0; !rc && j < rc_safetensors_count(f); j++)
            if (rc_params_find(l->params, rc_safetensors_info(f, j)->name) < 0)
                rc = rc_error_set(err, RC_ERR_ARG, "lora: %s: tensor '%s' is no adapter of this model", path,
                                  rc_safetensors_info(f, j)->name);
    rc_safetensors_close(f);
    return rc;
}

rc_lora *rc_lora_load(rc_model *m, const char *dir, rc_error *err)
{
    char path[4200], targets[MAX_TARGETS * 66];
    int r = 0;
    double alpha = 0;
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    if (read_config(path, &r, &alpha, targets, sizeof targets, err))
        return NULL;
    rc_lora *l = lora_make(m, r, alpha, targets, err);
    if (!l)
        return NULL;
    /* fan_in_fan_out follows the module, as PEFT sets it (true for Conv1D, false for Linear)
     * whatever the file says; A and B have the same layouts either way */
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (rc_params_to(l->params, rci_params_backend(m->params), err) == 0 && read_tensors(l, path, err) == 0) {
        m->lora = l;
        return l;
    }
    rc_lora_free(l);
    return NULL;
}
