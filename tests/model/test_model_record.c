/* test_model_record.c - rc_model_record, a model's forward pass recorded from its
 * configuration alone (public headers only):
 *   - the leaves are the family's parameters: the names, shapes and order of the weights
 *     rc_model_create makes, in the dtype asked for, and the logits [B, T, vocab];
 *   - their elements add up to rc_config_param_count for every preset and a few variants
 *     (the closed-form counts and the parameter tables agree);
 *   - no weight memory: llama-65b records with the CPU backend's bytes in use unchanged;
 *   - bound to a model's weights, the recorded graph computes that model's logits bitwise;
 *   - errors: an invalid config names its key, a bad dtype or missing encoder ids says so,
 *     and the result is left zeroed. */
#include "check.h"
#include "redco/device.h"
#include "redco/model.h"
#include "redco/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 8 };

/* ids [B, T] (and T5's encoder ids) as graph inputs */
static rc_tensor *ids_input(rc_graph *g, const char *name)
{
    return rc_input(g, name, RC_I32, 2, (int64_t[]){B, T});
}

static int record(rc_graph *g, const rc_model_config *c, rc_dtype dt, rc_model_graph *out, rc_error *err)
{
    rc_tensor *enc = c->type == RC_MODEL_T5 ? ids_input(g, "enc_ids") : NULL;
    return rc_model_record(g, c, dt, ids_input(g, "ids"), enc, NULL, out, err);
}

/* the leaves match the weights of rc_model_create: names, shapes, order */
static void test_tables(void)
{
    const char *tiny[5] = {"tiny-gpt2", "tiny-llama", "tiny-opt", "tiny-gptj", "tiny-t5"};
    for (int f = 0; f < 5; f++) {
        rc_error err = {0};
        rc_model_config c;
        rc_model *m = rc_model_create(tiny[f], 1, &err);
        CHECKF(m && rc_config_preset(tiny[f], &c, &err) == 0, "%s: %s", tiny[f], err.msg);
        if (!m)
            continue;
        rc_graph *g = rc_graph_new();
        rc_model_graph r;
        CHECKF(record(g, &c, RC_BF16, &r, &err) == 0, "%s: %s", tiny[f], err.msg);
        CHECKF(r.n_params == rc_params_count(m->params) && r.numel == rc_params_numel(m->params),
               "%s: %d parameters, %lld elements", tiny[f], r.n_params, (long long)r.numel);
        for (int i = 0; i < r.n_params && i < rc_params_count(m->params); i++) {
            int nd;
            const int64_t *shape;
            rc_params_shape(m->params, i, &nd, &shape);
            const rc_tensor *p = r.params[i];
            int same = p && p->ndim == nd && !memcmp(p->shape, shape, (size_t)nd * sizeof *shape);
            CHECKF(same && !strcmp(r.names[i], rc_params_name(m->params, i)) && p->op == RC_OP_LEAF &&
                   (p->flags & RC_FLAG_PARAM) && p->dtype == RC_BF16 && !strncmp(p->name, r.names[i], 63),
                   "%s: parameter %d '%s' vs '%s'", tiny[f], i, r.names[i], rc_params_name(m->params, i));
        }
        const rc_tensor *y = r.logits;
        CHECKF(y && y->ndim == 3 && y->shape[0] == B && y->shape[1] == T && y->shape[2] == c.vocab_size &&
               y->dtype == RC_BF16, "%s: logits", tiny[f]);
        rc_model_graph_free(&r);
        CHECK(r.params == NULL && r.names == NULL && r.n_params == 0);
        rc_graph_free(g);
        rc_model_free(m);
    }
    /* the names are whole where a leaf's own is cut (T5's relative attention tables) */
    rc_error err = {0};
    rc_model_config c;
    rc_config_preset("t5-small", &c, &err);
    rc_graph *g = rc_graph_new();
    rc_model_graph r;
    CHECKF(record(g, &c, RC_F32, &r, &err) == 0, "%s", err.msg);
    int found = 0;
    for (int i = 0; i < r.n_params; i++)
        found += !strcmp(r.names[i], "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
    CHECK(found == 1);
    rc_model_graph_free(&r);
    rc_graph_free(g);
}

/* the tables' elements are the closed-form counts: every preset, and variants off the
 * common paths; llama-65b (65e9 parameters) without allocating anything */
static void test_counts(void)
{
    size_t before, after;
    rc_backend_memory(rc_device_open("cpu", 0, NULL), NULL, &before, NULL);
    for (const char *const *n = rc_config_preset_names(); *n; n++) {
        rc_error err = {0};
        rc_model_config c;
        CHECKF(rc_config_preset(*n, &c, &err) == 0, "%s: %s", *n, err.msg);
        rc_graph *g = rc_graph_new();
        rc_model_graph r;
        CHECKF(record(g, &c, RC_F32, &r, &err) == 0, "%s: %s", *n, err.msg);
        CHECKF(r.numel == rc_config_param_count(&c), "%s: %lld elements, count %lld", *n, (long long)r.numel,
               (long long)rc_config_param_count(&c));
        rc_model_graph_free(&r);
        rc_graph_free(g);
    }
    rc_backend_memory(rc_device_open("cpu", 0, NULL), NULL, &after, NULL);
    CHECKF(after == before, "%zu bytes in use after recording, %zu before", after, before);

    rc_model_config v[6];
    rc_error err = {0};
    rc_config_preset("tiny-gpt2", &v[0], &err);
    v[0].tie_word_embeddings = 0;
    rc_config_preset("tiny-opt", &v[1], &err);
    v[1].word_embed_proj_dim = 32, v[1].enable_bias = 0, v[1].layer_norm_affine = 0;
    rc_config_preset("tiny-opt", &v[2], &err);
    v[2].remove_final_layer_norm = 1, v[2].tie_word_embeddings = 0;
    rc_config_preset("tiny-llama", &v[3], &err);
    v[3].attention_bias = v[3].mlp_bias = 1, v[3].tie_word_embeddings = 1;
    v[3].head_dim = v[3].rotary_dim = 32;
    rc_config_preset("tiny-t5", &v[4], &err);
    v[4].gated_ffn = 0, v[4].tie_word_embeddings = 1, v[4].n_decoder_layer = 3;
    rc_config_preset("tiny-gptj", &v[5], &err);
    v[5].tie_word_embeddings = 1;
    for (int i = 0; i < 6; i++) {
        rc_graph *g = rc_graph_new();
        rc_model_graph r;
        CHECKF(record(g, &v[i], RC_F32, &r, &err) == 0, "variant %d: %s", i, err.msg);
        CHECKF(r.numel == rc_config_param_count(&v[i]), "variant %d (%s): %lld elements, count %lld", i,
               v[i].model_type, (long long)r.numel, (long long)rc_config_param_count(&v[i]));
        rc_model_graph_free(&r);
        rc_graph_free(g);
    }
}

/* logits [B, T, vocab] of g's output y for fixed ids (malloc'ed) */
static float *run(rc_graph *g, rc_tensor *ids, rc_tensor *enc, rc_tensor *y)
{
    int32_t v[B * T];
    for (int i = 0; i < B * T; i++)
        v[i] = (i * 37 + 11) % 256;
    rc_error err = {0};
    rc_plan *p = y ? rc_plan_new(g, &y, 1, &err) : NULL;
    float *out = p ? malloc((size_t)rc_tensor_numel(y) * sizeof *out) : NULL;
    int ok = out && rc_plan_set_input(p, ids, v, &err) == 0 && (!enc || rc_plan_set_input(p, enc, v, &err) == 0) &&
             rc_plan_run(p, &err) == 0 && rc_plan_read(p, y, out, &err) == 0;
    CHECKF(ok, "run: %s %s", rc_graph_error(g) ? rc_graph_error(g) : "", err.msg);
    rc_plan_free(p);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

/* bound to a model's weights, the recorded graph is that model's forward pass */
static void test_bound(void)
{
    const char *tiny[2] = {"tiny-llama", "tiny-t5"};
    for (int f = 0; f < 2; f++) {
        rc_error err = {0};
        rc_model *m = rc_model_create(tiny[f], 5, &err);
        CHECKF(m != NULL, "%s", err.msg);
        if (!m)
            continue;
        int t5 = m->config.type == RC_MODEL_T5;
        rc_graph *g = rc_graph_new();
        rc_tensor *ids = ids_input(g, "ids"), *enc = t5 ? ids_input(g, "enc_ids") : NULL;
        rc_model_graph r;
        CHECKF(rc_model_record(g, &m->config, RC_F32, ids, enc, NULL, &r, &err) == 0, "%s", err.msg);
        for (int i = 0; i < r.n_params; i++) {
            size_t off;
            rc_buffer *buf = rc_params_buffer(m->params, rc_params_find(m->params, r.names[i]), &off);
            CHECK(buf && rc_graph_bind(g, r.params[i], buf, off) == 0);
        }
        float *a = run(g, ids, enc, r.logits);
        rc_graph *h = rc_graph_new();
        rc_tensor *ids2 = ids_input(h, "ids"), *enc2 = t5 ? ids_input(h, "enc_ids") : NULL;
        float *b = run(h, ids2, enc2, rc_model_logits(h, m, ids2, enc2, NULL));
        int64_t n = (int64_t)B * T * m->config.vocab_size;
        CHECKF(a && b && !memcmp(a, b, (size_t)n * sizeof *a), "%s: recorded and model logits differ", tiny[f]);
        free(a);
        free(b);
        rc_model_graph_free(&r);
        rc_graph_free(g);
        rc_graph_free(h);
        rc_model_free(m);
    }
}

static void test_errors(void)
{
    rc_model_config c;
    rc_error err = {0};
    rc_config_preset("tiny-gpt2", &c, &err);
    rc_model_graph r;
    rc_graph *g = rc_graph_new();
    c.n_head = 5;
    CHECK(record(g, &c, RC_F32, &r, &err) == -1);
    CHECKF(check_has(err.msg, "gpt2 config: n_head 5 does not divide n_embd 64"), "%s", err.msg);
    CHECK(r.params == NULL && r.names == NULL && r.logits == NULL && r.n_params == 0);
    rc_config_preset("tiny-llama", &c, &err);
    c.n_kv_head = 3;
    CHECK(record(g, &c, RC_F32, &r, &err) == -1 && check_has(err.msg, "num_key_value_heads 3"));
    rc_config_preset("tiny-gpt2", &c, &err);
    err = (rc_error){0};
    CHECK(record(g, &c, RC_I32, &r, &err) == -1 && err.code == RC_ERR_DTYPE && check_has(err.msg, "i32"));
    CHECK(rc_graph_error(g) == NULL); /* config and dtype errors leave the graph alone */
    /* T5 without encoder ids, and ids too long for the positions: the graph's error, in err too */
    rc_config_preset("tiny-t5", &c, &err);
    CHECK(rc_model_record(g, &c, RC_F32, ids_input(g, "ids"), NULL, NULL, &r, &err) == -1);
    CHECKF(check_has(err.msg, "t5 needs encoder ids") && rc_graph_error(g), "%s", err.msg);
    CHECK(r.params == NULL && r.n_params == 0);
    rc_graph_free(g);
    g = rc_graph_new();
    rc_config_preset("tiny-gpt2", &c, &err);
    rc_tensor *ids = rc_input(g, "ids", RC_I32, 2, (int64_t[]){1, c.max_positions + 1});
    CHECK(rc_model_record(g, &c, RC_F32, ids, NULL, NULL, &r, &err) == -1 && check_has(err.msg, "positions exceed"));
    CHECK(rc_model_record(NULL, &c, RC_F32, ids, NULL, NULL, &r, &err) == -1 && check_has(err.msg, "no graph"));
    rc_graph_free(g);
    rc_model_graph_free(&r);
    rc_model_graph_free(NULL);
}

int main(void)
{
    test_tables();
    test_counts();
    test_bound();
    test_errors();
    return check_summary("model_record");
}
