/* config_keys.c - what the families share of config.json: one key read or written with its
 * type, the checks several families make, and the activation names. Every message names the
 * file (or "<model_type> config") and the family's own spelling of the key. */
#include "internal.h"
#include "nn_internal.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* ---- reading ------------------------------------------------------------------------ */

enum { KEY_ABSENT = 0, KEY_SET = 1, KEY_NULL = 2 };

/* "FILE: KEY must be WHAT" */
static int wrong_type(rci_cfg_reader *r, const char *key, const char *what)
{
    return rc_error_set(r->err, RC_ERR_FORMAT, "%s: %s must be %s", r->file, key, what);
}

/* Reads an integer key: KEY_ABSENT, KEY_SET (stored), KEY_NULL, or -1 (wrong type). */
static int read_int(rci_cfg_reader *r, const char *key, int *dst)
{
    json_t *v = json_object_get(r->root, key);
    if (!v)
        return KEY_ABSENT;
    if (json_is_null(v))
        return KEY_NULL;
    if (!json_is_integer(v))
        return wrong_type(r, key, "an integer");
    json_int_t x = json_integer_value(v);
    if (x < INT_MIN || x > INT_MAX)
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: %s %lld is out of range", r->file, key,
                            (long long)x);
    *dst = (int)x;
    return KEY_SET;
}

/* An integer with an attribute_map alias: both present and different is an error. */
static int read_int2(rci_cfg_reader *r, const char *key, const char *alias, int *dst)
{
    int a = 0, b = 0;
    int ra = read_int(r, key, &a);
    if (ra < 0)
        return -1;
    int rb = alias ? read_int(r, alias, &b) : KEY_ABSENT;
    if (rb < 0)
        return -1;
    if (ra == KEY_SET && rb == KEY_SET && a != b)
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: %s %d and its alias %s %d disagree",
                            r->file, key, a, alias, b);
    if (ra == KEY_SET || rb == KEY_SET) {
        *dst = ra == KEY_SET ? a : b;
        return KEY_SET;
    }
    return ra == KEY_NULL || rb == KEY_NULL ? KEY_NULL : KEY_ABSENT;
}

int rci_cfg_need_int(rci_cfg_reader *r, const char *key, const char *alias, int *dst)
{
    int s = read_int2(r, key, alias, dst);
    if (s < 0)
        return -1;
    if (s == KEY_ABSENT)
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: missing required key \"%s\"", r->file,
                            key);
    return s == KEY_NULL ? wrong_type(r, key, "an integer, not null") : 0;
}

int rci_cfg_int(rci_cfg_reader *r, const char *key, const char *alias, int *dst)
{
    int s = read_int2(r, key, alias, dst);
    if (s == KEY_NULL)
        *dst = -1;
    return s < 0 ? -1 : 0;
}

int rci_cfg_int_strict(rci_cfg_reader *r, const char *key, const char *alias, int *dst)
{
    int s = read_int2(r, key, alias, dst);
    if (s == KEY_NULL)
        return wrong_type(r, key, "an integer, not null");
    return s < 0 ? -1 : 0;
}

int rci_cfg_real(rci_cfg_reader *r, const char *key, double *dst)
{
    json_t *v = json_object_get(r->root, key);
    if (v && !json_is_number(v))
        return wrong_type(r, key, "a number");
    if (v)
        *dst = json_number_value(v);
    return 0;
}

int rci_cfg_bool(rci_cfg_reader *r, const char *key, int *dst)
{
    json_t *v = json_object_get(r->root, key);
    if (v && !json_is_boolean(v))
        return wrong_type(r, key, "true or false");
    if (v)
        *dst = json_is_true(v);
    return 0;
}

int rci_cfg_str(rci_cfg_reader *r, const char *key, char *dst, size_t size)
{
    json_t *v = json_object_get(r->root, key);
    if (v && !json_is_string(v))
        return wrong_type(r, key, "a string");
    if (v && json_string_length(v) >= size)
        return rc_error_set(r->err, RC_ERR_FORMAT, "%s: %s '%s' is too long", r->file, key,
                            json_string_value(v));
    if (v)
        snprintf(dst, size, "%s", json_string_value(v));
    return 0;
}

int rci_cfg_id(rci_cfg_reader *r, const char *key, int *dst)
{
    json_t *v = json_object_get(r->root, key);
    if (!v)
        return 0;
    if (json_is_array(v))
        v = json_array_size(v) ? json_array_get(v, 0) : json_null();
    if (json_is_null(v)) {
        *dst = -1;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) > INT_MAX)
        return wrong_type(r, key, "a token id (an integer, a list of them, or null)");
    json_int_t x = json_integer_value(v);
    *dst = x < 0 ? -1 : (int)x;
    return 0;
}

int rci_cfg_reject_bool(rci_cfg_reader *r, const char *key, int bad)
{
    int v = !bad;
    if (rci_cfg_bool(r, key, &v))
        return -1;
    if (v == bad)
        return rc_error_set(r->err, RC_ERR_UNSUPPORTED, "%s: %s %s is not supported", r->file,
                            key, bad ? "true" : "false");
    return 0;
}

/* ---- writing ------------------------------------------------------------------------ */

void rci_cfg_put_int(json_t *o, const char *key, long long v)
{
    json_object_set_new(o, key, json_integer(v));
}

void rci_cfg_put_real(json_t *o, const char *key, double v)
{
    json_object_set_new(o, key, json_real(v));
}

void rci_cfg_put_bool(json_t *o, const char *key, int v)
{
    json_object_set_new(o, key, json_boolean(v));
}

void rci_cfg_put_str(json_t *o, const char *key, const char *v)
{
    json_object_set_new(o, key, json_string(v));
}

void rci_cfg_put_id(json_t *o, const char *key, int v)
{
    json_object_set_new(o, key, v >= 0 ? json_integer(v) : json_null());
}

/* ---- checks ------------------------------------------------------------------------- */

int rci_cfg_positive(const char *where, const char *key, int v, rc_error *err)
{
    if (v >= 1)
        return 0;
    return rc_error_set(err, RC_ERR_FORMAT, "%s: %s must be positive, got %d", where, key, v);
}

static int heads_do_not_divide(const rc_model_config *c, const rci_nn_keys *k, const char *where, rc_error *err)
{
    return rc_error_set(err, RC_ERR_FORMAT, "%s: %s %d does not divide %s %d", where, k->n_head, c->n_head,
                        k->d_model, c->d_model);
}

int rci_cfg_check_head_dim(const rc_model_config *c, const rci_nn_keys *k, const char *where, rc_error *err)
{
    if (c->head_dim >= 1)
        return 0;
    if (c->d_model % c->n_head != 0)
        return heads_do_not_divide(c, k, where, err);
    return rci_cfg_positive(where, k->head_dim, c->head_dim, err);
}

int rci_cfg_check_no_kv_groups(const rc_model_config *c, const rci_nn_keys *k, const char *where, rc_error *err)
{
    if (c->n_kv_head == 0 || c->n_kv_head == c->n_head)
        return 0;
    return rc_error_set(err, RC_ERR_FORMAT, "%s: n_kv_head %d differs from %s %d; only llama/mistral "
                        "configs have key/value head groups", where, c->n_kv_head, k->n_head, c->n_head);
}

int rci_cfg_check_split_heads(const rc_model_config *c, const rci_nn_keys *k, const char *where, rc_error *err)
{
    if (rci_cfg_positive(where, k->max_positions, c->max_positions, err) ||
        rci_cfg_check_head_dim(c, k, where, err))
        return -1;
    if ((int64_t)c->head_dim * c->n_head != c->d_model)
        return heads_do_not_divide(c, k, where, err);
    return rci_cfg_check_no_kv_groups(c, k, where, err);
}

/* ---- activations -------------------------------------------------------------------- */

int rc_config_activation(const char *name)
{
    static const struct { const char *name; int act; } acts[] = {
        {"relu", RC_ACT_RELU}, {"gelu", RC_ACT_GELU_ERF}, {"gelu_new", RC_ACT_GELU_TANH},
        {"gelu_fast", RC_ACT_GELU_TANH}, {"gelu_pytorch_tanh", RC_ACT_GELU_TANH},
        {"silu", RC_ACT_SILU}, {"swish", RC_ACT_SILU}, {"sigmoid", RC_ACT_SIGMOID},
    };
    for (size_t i = 0; name && i < sizeof acts / sizeof acts[0]; i++)
        if (strcmp(name, acts[i].name) == 0)
            return acts[i].act;
    return -1;
}
