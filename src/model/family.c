/* family.c - the table of model families, and a model from its family: each family file
 * exports one rci_nn_family (its config.json keys, presets, parameter table and forward pass),
 * and this file picks from the table; also initialisation and the parameter leaves. The
 * layers the families share are layers.c. */
#include "internal.h"
#include "nn_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The families, in the order their names and presets are listed. A new family is a file that
 * exports its rci_nn_family, and its line here. */
extern const rci_nn_family rci_nn_gpt2_family, rci_nn_llama_family, rci_nn_opt_family, rci_nn_gptj_family,
    rci_nn_t5_family;
const rci_nn_family *const rci_nn_families[] = {
    &rci_nn_gpt2_family, &rci_nn_llama_family, &rci_nn_opt_family, &rci_nn_gptj_family, &rci_nn_t5_family,
    NULL,
};

const rci_nn_family *rci_nn_family_of(rc_model_type type)
{
    for (int i = 0; rci_nn_families[i]; i++)
        if (rci_nn_families[i]->type == type)
            return rci_nn_families[i];
    return NULL;
}

const rci_nn_family *rci_nn_family_named(const char *model_type)
{
    for (int i = 0; rci_nn_families[i]; i++)
        for (const rci_nn_variant *v = rci_nn_families[i]->variants; v->model_type; v++)
            if (strcmp(model_type, v->model_type) == 0)
                return rci_nn_families[i];
    return NULL;
}

int rci_nn_model_weights(const rc_model_config *c, rci_nn_weights *w, rc_error *err)
{
    if (c->vocab_size <= 0 || c->d_model <= 0 || c->n_head <= 0 || c->head_dim <= 0 || c->n_layer < 0)
        return rc_error_set(err, RC_ERR_ARG, "model %s: vocab %d, d_model %d, %d heads of %d: not a model",
                            c->model_type, c->vocab_size, c->d_model, c->n_head, c->head_dim);
    const rci_nn_family *f = rci_nn_family_of(c->type);
    if (!f)
        return rc_error_set(err, RC_ERR_ARG, "model: unknown model type %d", (int)c->type);
    if (f->weights(c, w))
        return rc_error_set(err, RC_ERR_MEMORY, "model: out of memory for the parameter table");
    return 0;
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

/* Parameter p's initial values into x (numel floats); normal draws come from rng; weights
 * whose names end in `scaled` (or none: NULL) start smaller. */
static void init_values(const rc_model_config *c, const char *scaled, const rci_nn_param *p, float *x, rc_rng *rng)
{
    double resid = 0.02 / sqrt(2.0 * (c->n_layer > 0 ? c->n_layer : 1));
    int is_norm = strstr(p->name, "norm") || strstr(p->name, "ln_");
    double std = scaled && ends_with(p->name, scaled) ? resid : 0.02;
    for (int64_t j = 0; j < p->numel; j++) {
        if (p->ndim == 1)
            x[j] = is_norm && ends_with(p->name, "weight") ? 1.0f : 0.0f;
        else
            x[j] = (float)(std * rc_rng_normal(rng));
    }
}

int rci_nn_model_init(const rc_model_config *c, rci_nn_weights *w, uint64_t seed, rc_error *err)
{
    const rci_nn_family *f = rci_nn_family_of(c->type);
    rc_rng rng = rc_rng_new(seed);
    int64_t most = 1;
    for (int i = 0; i < w->n; i++)
        most = w->p[i].numel > most ? w->p[i].numel : most;
    float *x = malloc((size_t)most * sizeof *x);
    if (!x)
        return rc_error_set(err, RC_ERR_MEMORY, "model: out of memory for %lld floats", (long long)most);
    int rc = 0;
    for (int i = 0; !rc && i < w->n; i++) {
        init_values(c, f ? f->scaled_init : NULL, &w->p[i], x, &rng);
        rc = rci_nn_weights_write(w, i, x, err);
    }
    free(x);
    return rc;
}

int rci_nn_model_leaves(rc_graph *g, const rci_nn_weights *w, rc_tensor **p)
{
    for (int i = 0; i < w->n; i++) {
        p[i] = rc_param(g, w->p[i].name, w->dtype, w->p[i].ndim, w->p[i].shape);
        if (!p[i])
            return -1;
        if (w->buf)
            rc_graph_bind(g, p[i], w->buf, rci_nn_weights_offset(w, i));
    }
    return 0;
}

rc_tensor *rci_nn_model_logits(rc_graph *g, const rc_model_config *c, const rci_nn_weights *w,
                           rc_tensor *const *p, const rci_nn_inputs *in)
{
    if (!g || rc_graph_error(g))
        return NULL;
    if (!in || !in->ids || in->ids->ndim != 2 || in->ids->dtype != RC_I32)
        return rci_fail(g, RC_ERR_ARG, "model: ids must be an i32 [batch, tokens] tensor");
    const rci_nn_family *f = rci_nn_family_of(c->type);
    if (!f)
        return rci_fail(g, RC_ERR_ARG, "model: unknown model type %d", (int)c->type);
    if (f->encoder_decoder && (!in->enc_ids || in->enc_ids->ndim != 2))
        return rci_fail(g, RC_ERR_ARG, "model: %s needs encoder ids [batch, tokens]", c->model_type);
    if (c->max_positions && in->past + in->ids->shape[1] > c->max_positions)
        return rci_fail(g, RC_ERR_SHAPE, "model: %lld positions exceed the model's %d",
                       (long long)(in->past + in->ids->shape[1]), c->max_positions);
    if (c->sliding_window > 0 && in->past + in->ids->shape[1] > c->sliding_window)
        return rci_fail(g, RC_ERR_UNSUPPORTED,
                       "model %s: %lld positions exceed sliding_window %d, which redco does not implement",
                       c->model_type, (long long)(in->past + in->ids->shape[1]), c->sliding_window);
    rci_nn_ctx x = {.g = g, .c = c, .w = w, .p = p, .in = in};
    return f->logits(&x);
}
