/* model.c - the built-in models (rc_model_*): a configuration and its family's weights as an
 * rc_params (params.c), with the LoRA adapters attached to it (lora.c); created from a preset
 * or a Hugging Face directory (model_io.c), saved, converted, and recorded into graphs (with
 * its weights, or from a configuration alone without them). */
#include "internal.h"
#include "backend.h"
#include "params.h"
#include "tok_files.h"
#include "redco/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a model directory: it has a config.json */
static int has_config(const char *path)
{
    char cfg[4200];
    FILE *f;
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    f = fopen(cfg, "r");
    if (f)
        fclose(f);
    return f != NULL;
}

/* The weights of config c in dtype dt on be, drawn from seed (rci_nn_model_init); on failure
 * w is freed. */
static int random_weights(const rc_model_config *c, rci_nn_weights *w, rc_backend *be, rc_dtype dt, uint64_t seed,
                          rc_error *err)
{
    int rc = rci_nn_model_weights(c, w, err);
    w->dtype = dt; /* f32 draws rounded to it */
    if (!rc && rci_nn_weights_alloc(w, be, err))
        rc = rci_error_prefix(err, "model %s", c->model_type);
    if (!rc)
        rc = rci_nn_model_init(c, w, seed, err);
    if (rc)
        rci_nn_weights_free(w);
    return rc;
}

/* A model of config c holding weights w (taken: freed on failure). */
static rc_model *model_new(const rc_model_config *c, rci_nn_weights *w, rc_backend *be, const char *dir, rc_error *err)
{
    rc_model *m = calloc(1, sizeof *m);
    if (m)
        m->params = rci_params_adopt(w, be);
    if (!m || !m->params) {
        free(m);
        rci_nn_weights_free(w);
        rc_error_set(err, RC_ERR_MEMORY, "model: out of memory");
        return NULL;
    }
    m->config = *c;
    snprintf(m->dir, sizeof m->dir, "%s", dir ? dir : "");
    return m;
}

rc_model *rc_model_create(const char *preset_or_dir, uint64_t seed, rc_error *err)
{
    return rc_model_load(preset_or_dir, seed, RC_F32, err);
}

rc_model *rc_model_load(const char *preset_or_dir, uint64_t seed, rc_dtype dtype, rc_error *err)
{
    if (dtype != RC_F32 && dtype != RC_BF16 && dtype != RC_F16) {
        rc_error_set(err, RC_ERR_DTYPE, "model %s: dtype %s is not f32, bf16 or f16", preset_or_dir,
                     rc_dtype_name(dtype));
        return NULL;
    }
    rc_backend *be = rci_backend_cpu();
    rc_model_config c;
    rci_nn_weights w = {0};
    if (has_config(preset_or_dir)) { /* checked now, the values read when first needed */
        rc_checkpoint *ck = rci_nn_model_open(preset_or_dir, &c, &w, dtype, err);
        rc_model *m = ck ? model_new(&c, &w, be, preset_or_dir, err) : NULL;
        if (m)
            rci_params_set_source(m->params, ck);
        else
            rc_checkpoint_close(ck);
        return m;
    }
    if (rc_config_preset(preset_or_dir, &c, err) || random_weights(&c, &w, be, dtype, seed, err))
        return NULL;
    return model_new(&c, &w, be, NULL, err);
}

rc_model *rc_model_from_config(const rc_model_config *c, uint64_t seed, rc_error *err)
{
    rc_backend *be = rci_backend_cpu();
    rci_nn_weights w = {0};
    if (rc_config_validate(c, err) || random_weights(c, &w, be, RC_F32, seed, err))
        return NULL;
    return model_new(c, &w, be, NULL, err);
}

int rc_model_to_dtype(rc_model *m, rc_dtype dt, rc_error *err)
{
    if (!m)
        return rc_error_set(err, RC_ERR_ARG, "model to dtype: no model");
    return rc_params_to_dtype(m->params, dt, err);
}

void rc_model_free(rc_model *m)
{
    if (!m)
        return;
    if (m->lora) /* the adapters outlive their model: detached, they only wait to be freed */
        rci_lora_detach(m->lora);
    rc_params_free(m->params);
    free(m);
}

int rc_model_save(const rc_model *m, const char *dir, const char *tokenizer_dir, rc_error *err)
{
    rci_nn_weights *w = m && m->params ? rci_params_weights(m->params) : NULL;
    if (!m || !dir || !w)
        return rc_error_set(err, RC_ERR_ARG, "model save: %s",
                            !m ? "no model" : !dir ? "no directory" : "the weights are not allocated");
    if (rci_nn_model_save(dir, &m->config, w, err))
        return -1;
    return rci_tok_copy_files(tokenizer_dir, dir, err);
}

rc_tensor *rc_model_logits(rc_graph *g, rc_model *m, rc_tensor *ids, rc_tensor *enc_ids, rc_tensor *mask)
{
    rc_tensor **p = rci_params_leaves(g, m->params);
    if (!p)
        return NULL;
    rci_nn_lora_set lora = {0};
    if (m->lora && rci_lora_leaves(g, m->lora, &lora)) {
        free(lora.a);
        free(lora.b);
        return NULL;
    }
    rci_nn_inputs in = {.ids = ids, .enc_ids = enc_ids, .mask = mask, .lora = m->lora ? &lora : NULL};
    rc_tensor *logits = rci_nn_model_logits(g, &m->config, rci_params_weights(m->params), p, &in);
    free(lora.a);
    free(lora.b);
    return logits;
}

/* ---- a model's graph from its configuration alone -------------------------------------- */

void rc_model_graph_free(rc_model_graph *out)
{
    if (!out)
        return;
    for (int i = 0; out->names && i < out->n_params; i++)
        free(out->names[i]);
    free(out->names);
    free(out->params);
    memset(out, 0, sizeof *out);
}

/* out's leaves and names for table w (unbound: w has no buffer); a graph error stays the
 * graph's */
static int record_leaves(rc_graph *g, const rci_nn_weights *w, rc_model_graph *out, rc_error *err)
{
    out->n_params = w->n;
    out->numel = w->numel;
    out->params = calloc((size_t)w->n + 1, sizeof *out->params);
    out->names = calloc((size_t)w->n + 1, sizeof *out->names);
    int ok = out->params && out->names;
    for (int i = 0; ok && i < w->n; i++)
        ok = (out->names[i] = strdup(w->p[i].name)) != NULL;
    if (!ok)
        return rc_error_set(err, RC_ERR_MEMORY, "model record: out of memory for %d parameters", w->n);
    rci_nn_model_leaves(g, w, out->params);
    return 0;
}

int rc_model_record(rc_graph *g, const rc_model_config *c, rc_dtype dtype, rc_tensor *ids, rc_tensor *enc_ids,
                    rc_tensor *mask, rc_model_graph *out, rc_error *err)
{
    if (!out)
        return rc_error_set(err, RC_ERR_ARG, "model record: no result to fill");
    memset(out, 0, sizeof *out);
    if (!g || !c)
        return rc_error_set(err, RC_ERR_ARG, "model record: %s", !g ? "no graph" : "no configuration");
    if (dtype != RC_F32 && dtype != RC_BF16 && dtype != RC_F16)
        return rc_error_set(err, RC_ERR_DTYPE, "model record: dtype %s is not f32, bf16 or f16",
                            rc_dtype_name(dtype));
    if (rc_config_validate(c, err))
        return -1;
    rci_nn_weights w = {.dtype = dtype};
    int rc = rci_nn_model_weights(c, &w, err);
    if (!rc)
        rc = record_leaves(g, &w, out, err);
    if (!rc) {
        rci_nn_inputs in = {.ids = ids, .enc_ids = enc_ids, .mask = mask};
        out->logits = rci_nn_model_logits(g, c, &w, out->params, &in);
    }
    rci_nn_weights_free(&w);
    if (!rc && rc_graph_error(g))
        rc = rc_error_set(err, rc_graph_error_code(g), "%s", rc_graph_error(g));
    if (rc)
        rc_model_graph_free(out);
    return rc ? -1 : 0;
}
