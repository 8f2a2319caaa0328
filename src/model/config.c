/* config.c - Hugging Face config.json for every model family: loading with the defaults of
 * the transformers 4.36 config classes, validation, saving, presets and parameter counts.
 * What is one family's (its keys, defaults, derived fields, checks, presets and count) is in
 * its own file and reached through the table of families (family.c); this file does what
 * every family shares, and the size limits against hostile configs. */
#include "redco/model.h"
#include "files.h"
#include "internal.h"
#include "nn_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- defaults and derived fields ---------------------------------------------------------- */

/* What every family starts from (ids and the sizes left to derive unset), then transformers'
 * class defaults of the family. */
static void config_defaults(const rci_nn_family *f, const char *model_type, rc_model_config *c)
{
    memset(c, 0, sizeof *c);
    c->type = f->type;
    snprintf(c->model_type, sizeof c->model_type, "%s", model_type);
    c->bos_token_id = c->eos_token_id = c->pad_token_id = c->decoder_start_token_id = -1;
    c->n_kv_head = c->head_dim = -1;
    f->defaults(c);
}

/* Fills the "-1: derive" fields, as the HF classes do with their None defaults; a derived
 * size that does not fit an int (4 x n_embd) is an error naming where. */
static int config_derive(const rci_nn_family *f, rc_model_config *c, const char *where, rc_error *err)
{
    if (c->d_ff < 0) {
        int64_t ff = 4 * (int64_t)c->d_model;
        if (ff > INT_MAX)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: the default %s, 4 x %s = 4 x %d = "
                                "%lld, is more than %d", where, f->keys->d_ff, f->keys->d_model,
                                c->d_model, (long long)ff, INT_MAX);
        c->d_ff = (int)ff;
    }
    if (c->n_kv_head < 0)  /* no key/value head groups unless the family reads them */
        c->n_kv_head = c->n_head;
    if (c->head_dim < 0)  /* left 0 when heads don't divide d_model: validation says so */
        c->head_dim = c->n_head > 0 && c->d_model % c->n_head == 0 ? c->d_model / c->n_head : 0;
    if (f->derive)
        f->derive(c);
    return 0;
}

const char *rc_config_architecture(const rc_model_config *c)
{
    const rci_nn_family *f = rci_nn_family_of(c->type);
    if (!f)
        return "?";
    for (const rci_nn_variant *v = f->variants; v->model_type; v++)
        if (strcmp(c->model_type, v->model_type) == 0)
            return v->architecture;
    return f->variants[0].architecture;
}

/* ---- size limits -------------------------------------------------------------------- */

/* What a config may ask for. Each size field is read into an int (kernels and shapes take
 * int dimensions), so products that form one dimension (n_head x head_dim, 3 x n_embd) must
 * fit an int too. The parameter count is capped at 2^40 (1.1e12, 4.4 TB in float32: above
 * every published dense model, below what 64-bit sizes and offsets address with room for
 * gradients and optimizer state), and the layer count at 4096 (30 times the deepest
 * published model) because the graph and the memory plan hold a record per layer. */
#define MAX_PARAMS 0x1p40
#define MAX_LAYERS 4096

/* "4.4 TB": decimal units, as disks and clusters quote them. */
static void bytes_text(double b, char *buf, size_t size)
{
    static const char *units[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
    int u = 0;
    while (b >= 1000 && u < 8)
        b /= 1000, u++;
    snprintf(buf, size, "%.3g %s", b, units[u]);
}

static int config_check_sizes(const rci_nn_family *f, const rc_model_config *c, const char *where, rc_error *err)
{
    const rci_nn_keys *k = f->keys;
    const struct { const char *key; int v; } layers[] = {{k->n_layer, c->n_layer}, {k->n_decoder_layer, c->n_decoder_layer}};
    for (int i = 0; i < 2; i++)
        if (layers[i].v > MAX_LAYERS)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: %s %d is more than the %d layers "
                                "redco builds", where, layers[i].key, layers[i].v, MAX_LAYERS);
    const int64_t q = (int64_t)c->n_head * c->head_dim;
    if (q > INT_MAX)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s %d x %s %d = %lld is more than %d",
                            where, k->n_head, c->n_head, k->head_dim, c->head_dim, (long long)q, INT_MAX);
    if ((int64_t)3 * c->d_model > INT_MAX || (int64_t)c->max_positions + 2 > INT_MAX)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s %d or %s %d is too large (3 x %s and "
                            "%s + 2 must be at most %d)", where, k->d_model, c->d_model, k->max_positions,
                            c->max_positions, k->d_model, k->max_positions, INT_MAX);
    const double n = f->count(c);
    if (n > MAX_PARAMS) {
        char bytes[32];
        bytes_text(4 * n, bytes, sizeof bytes);
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s %d, %s %d, %s %d and vocab_size %d give %.3g "
                            "parameters (%s in float32), more than the limit of %.3g (2^40)",
                            where, k->n_layer, c->n_layer, k->d_model, c->d_model, k->d_ff, c->d_ff,
                            c->vocab_size, n, bytes, MAX_PARAMS);
    }
    return 0;
}

/* ---- validation --------------------------------------------------------------------- */

/* where: the file, or "<model_type> config". The shared sizes, the family's own rules, then
 * the shared settings and the size limits. */
static int config_check(const rc_model_config *c, const char *where, rc_error *err)
{
    const rci_nn_family *f = rci_nn_family_of(c->type);
    if (!f)
        return rc_error_set(err, RC_ERR_ARG, "%s: unknown model type %d", where, (int)c->type);
    const rci_nn_keys *k = f->keys;
    if (rci_cfg_positive(where, "vocab_size", c->vocab_size, err) ||
        rci_cfg_positive(where, k->d_model, c->d_model, err) ||
        rci_cfg_positive(where, k->n_layer, c->n_layer, err) ||
        rci_cfg_positive(where, k->n_head, c->n_head, err) ||
        rci_cfg_positive(where, k->d_ff, c->d_ff, err) || f->check(c, where, err))
        return -1;
    if (!(c->norm_eps > 0) || !isfinite(c->norm_eps))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s must be positive, got %g", where,
                            k->norm_eps, c->norm_eps);
    if (rc_config_activation(c->activation) < 0)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: %s '%s' is not supported (relu, "
                            "gelu, gelu_new, gelu_fast, gelu_pytorch_tanh, silu, swish, sigmoid)",
                            where, k->activation, c->activation);
    const double drops[3] = {c->resid_dropout, c->embd_dropout, c->attn_dropout};
    for (int i = 0; i < 3; i++)
        if (!(drops[i] >= 0 && drops[i] < 1))
            return rc_error_set(err, RC_ERR_FORMAT, "%s: dropout probabilities must be in "
                                "[0, 1), got %g", where, drops[i]);
    return config_check_sizes(f, c, where, err);
}

int rc_config_validate(const rc_model_config *c, rc_error *err)
{
    char where[64];
    snprintf(where, sizeof where, "%s config", c->model_type[0] ? c->model_type : "model");
    return config_check(c, where, err);
}

/* ---- reading ------------------------------------------------------------------------ */

/* "gpt2, llama, mistral, opt, gptj, t5": every model_type a family reads */
static void model_types_text(char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; rci_nn_families[i]; i++)
        for (const rci_nn_variant *v = rci_nn_families[i]->variants; v->model_type && len < size; v++)
            len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? ", " : "", v->model_type);
}

static int config_from_json(rci_cfg_reader *r, rc_model_config *c)
{
    if (!json_is_object(r->root))
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: the top level is not a JSON object",
                            r->file);
    json_t *mt = json_object_get(r->root, "model_type");
    if (!mt)
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: missing required key \"model_type\"",
                            r->file);
    if (!json_is_string(mt))
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: model_type must be a string", r->file);
    const rci_nn_family *f = rci_nn_family_named(json_string_value(mt));
    if (!f) {
        char known[200];
        model_types_text(known, sizeof known);
        return rc_error_set(r->err, RC_ERR_UNSUPPORTED, "%s: model_type '%.64s' is not "
                            "supported (%s)", r->file, json_string_value(mt), known);
    }
    config_defaults(f, json_string_value(mt), c);
    if (rci_cfg_need_int(r, "vocab_size", NULL, &c->vocab_size) ||
        rci_cfg_bool(r, "tie_word_embeddings", &c->tie_word_embeddings) ||
        rci_cfg_id(r, "bos_token_id", &c->bos_token_id) ||
        rci_cfg_id(r, "eos_token_id", &c->eos_token_id) ||
        rci_cfg_id(r, "pad_token_id", &c->pad_token_id) || f->read(r, c))
        return -1;
    if (config_derive(f, c, r->file, r->err))
        return -1;
    return config_check(c, r->file, r->err);
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* DIR -> DIR/config.json (malloc'ed); a file path is copied. */
static char *config_path(const char *path)
{
    size_t n = strlen(path);
    char *p = malloc(n + 16);
    if (!p)
        return NULL;
    if (is_dir(path))
        snprintf(p, n + 16, "%s%sconfig.json", path, n && path[n - 1] == '/' ? "" : "/");
    else
        memcpy(p, path, n + 1);
    return p;
}

int rc_config_load(const char *path, rc_model_config *c, rc_error *err)
{
    char *file = config_path(path);
    if (!file)
        return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
    json_error_t jerr;
    json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &jerr);
    int rc;
    if (!root) {
        if (access(file, R_OK) != 0)
            rc = rc_error_set(err, RC_ERR_IO, "%s: cannot read: %s", file, strerror(errno));
        else
            rc = rc_error_set(err, RC_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s",
                              file, jerr.line, jerr.column, jerr.text);
    } else {
        rci_cfg_reader r = {root, file, err};
        rc_model_config tmp;
        rc = config_from_json(&r, &tmp);
        if (rc == 0)
            *c = tmp;
    }
    json_decref(root);
    free(file);
    return rc ? -1 : 0;
}

/* ---- saving ------------------------------------------------------------------------- */

/* The keys every family writes, then the family's own. */
static json_t *config_to_json(const rc_model_config *c)
{
    json_t *o = json_object();
    json_t *arch = json_array();
    if (!o || !arch) {
        json_decref(o);
        json_decref(arch);
        return NULL;
    }
    json_array_append_new(arch, json_string(rc_config_architecture(c)));
    json_object_set_new(o, "architectures", arch);
    rci_cfg_put_str(o, "model_type", c->model_type);
    rci_cfg_put_int(o, "vocab_size", c->vocab_size);
    rci_cfg_put_bool(o, "tie_word_embeddings", c->tie_word_embeddings);
    rci_cfg_put_id(o, "bos_token_id", c->bos_token_id);
    rci_cfg_put_id(o, "eos_token_id", c->eos_token_id);
    rci_cfg_put_id(o, "pad_token_id", c->pad_token_id);
    rci_nn_family_of(c->type)->write(o, c);  /* a saved config is validated: its family exists */
    return o;
}

/* %.15g prints the decimal literals configs hold (1e-05, 0.1, 10000.0) as written; any
 * other double needs 17 digits to read back exactly. */
static int real_precision(const json_t *o)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        if (!json_is_real(v))
            continue;
        char buf[40];
        snprintf(buf, sizeof buf, "%.15g", json_real_value(v));
        if (strtod(buf, NULL) != json_real_value(v))
            return 17;
    }
    return 15;
}

int rc_config_save(const char *path, const rc_model_config *c, rc_error *err)
{
    if (config_check(c, path, err))
        return -1;
    char *file = config_path(path);
    json_t *o = config_to_json(c);
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS |
                                       JSON_REAL_PRECISION(real_precision(o))) : NULL;
    int rc;
    if (!file || !text) {
        rc = rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
    } else {
        size_t len = strlen(text);
        char *withnl = realloc(text, len + 2);
        if (withnl) {
            text = withnl;
            text[len++] = '\n';
            text[len] = 0;
        }
        rc = rci_write_atomic(file, text, len, err);
    }
    free(text);
    json_decref(o);
    free(file);
    return rc;
}

/* ---- presets ------------------------------------------------------------------------ */

const char *const *rc_config_preset_names(void)
{
    static const char **names;  /* every family's presets in the table's order, built once */
    static const char *none[1];
    if (names)
        return names;
    int n = 0;
    for (int i = 0; rci_nn_families[i]; i++)
        for (const rci_nn_preset *p = rci_nn_families[i]->presets; p->name; p++)
            n++;
    const char **list = calloc((size_t)n + 1, sizeof *list);
    if (!list)
        return none;
    n = 0;
    for (int i = 0; rci_nn_families[i]; i++)
        for (const rci_nn_preset *p = rci_nn_families[i]->presets; p->name; p++)
            list[n++] = p->name;
    names = list;
    return names;
}

/* the preset called name and its family, or NULL */
static const rci_nn_preset *preset_find(const char *name, const rci_nn_family **family)
{
    for (int i = 0; name && rci_nn_families[i]; i++)
        for (const rci_nn_preset *p = rci_nn_families[i]->presets; p->name; p++)
            if (strcmp(p->name, name) == 0) {
                *family = rci_nn_families[i];
                return p;
            }
    return NULL;
}

int rc_config_preset(const char *name, rc_model_config *c, rc_error *err)
{
    const rci_nn_family *f = NULL;
    const rci_nn_preset *p = preset_find(name, &f);
    if (!p) {
        const char *const *names = rc_config_preset_names();
        char list[400] = "";
        size_t len = 0;
        for (int i = 0; names[i] && len < sizeof list; i++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", names[i]);
        return rc_error_set(err, RC_ERR_ARG, "unknown preset '%.64s' (known: %s)",
                            name ? name : "(null)", list);
    }
    config_defaults(f, f->variants[0].model_type, c);
    c->vocab_size = p->vocab, c->d_model = p->d_model, c->n_layer = p->n_layer;
    c->n_head = p->n_head, c->d_ff = p->d_ff, c->max_positions = p->max_positions;
    if (p->eos)
        c->bos_token_id = c->eos_token_id = p->eos;
    if (p->more)
        p->more(c);
    if (config_derive(f, c, name, err))
        return -1;
    return config_check(c, name, err);
}

/* ---- parameter counts --------------------------------------------------------------- */

/* Counted in double by the family: exact below 2^53 (far above the limit config_check sets),
 * and a hostile config (n_layer 10^8 x a wide layer) gives a large number instead of
 * overflowing int64. */
int64_t rc_config_param_count(const rc_model_config *c)
{
    const rci_nn_family *f = rci_nn_family_of(c->type);
    double n = f ? f->count(c) : 0;
    return n < 0x1p62 ? (int64_t)n : INT64_MAX;
}
