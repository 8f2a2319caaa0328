/* test_config.c - Hugging Face config.json: each family's keys, aliases and transformers
 * defaults, validation errors naming the file and key, missing keys, save -> load round
 * trips, presets and their parameter counts.
 *
 * Extra modes for tests/ref/test_checkpoint_ref.py:
 *   test_config --dump PATH          loads PATH (a directory or a .json file) and prints the
 *                                    rc_model_config as one JSON object (plus
 *                                    "param_count"); exit 1 with the message on error
 *   test_config --save PRESET DIR    writes the preset's config.json into DIR
 *   test_config --presets            prints the preset names, one a line
 */
#include "check.h"
#include "redco.h"
#include "redco/model.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[64];

static const char *tmp_path(const char *name)
{
    static char buf[4][256];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, 256, "%s/%s", tmpdir, name);
    return p;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Loads JSON text through a file; returns 0 on success. */
static int load_text(const char *text, rc_model_config *c, rc_error *err)
{
    const char *p = tmp_path("config.json");
    write_text(p, text);
    *err = (rc_error){0};
    return rc_config_load(p, c, err);
}

/* The text must fail to load with every part in the message (which also names the file). */
#define EXPECT_LOAD_ERROR(text, ...)                                                            \
    do {                                                                                        \
        const char *parts_[] = {"config.json", __VA_ARGS__};                                    \
        rc_model_config c_;                                                                     \
        rc_error e_;                                                                            \
        CHECKF(load_text(text, &c_, &e_) == -1 && e_.code != 0, "loaded: %s", text);            \
        for (size_t i_ = 0; i_ < sizeof parts_ / sizeof parts_[0]; i_++)                        \
            CHECKF(check_has(e_.msg, parts_[i_]), "'%s' not in: %s", parts_[i_], e_.msg);             \
    } while (0)

/* Field-by-field equality; names the first field that differs. */
static const char *config_diff(const rc_model_config *a, const rc_model_config *b)
{
#define SAME(f) if (a->f != b->f) return #f
    SAME(type); SAME(vocab_size); SAME(d_model); SAME(n_layer); SAME(n_decoder_layer);
    SAME(n_head); SAME(n_kv_head); SAME(head_dim); SAME(d_ff); SAME(max_positions);
    SAME(norm_eps); SAME(rope_theta); SAME(rotary_dim); SAME(tie_word_embeddings);
    SAME(gated_ffn); SAME(do_layer_norm_before); SAME(remove_final_layer_norm);
    SAME(layer_norm_affine); SAME(word_embed_proj_dim); SAME(enable_bias);
    SAME(attention_bias); SAME(mlp_bias); SAME(rel_buckets); SAME(rel_max_distance);
    SAME(decoder_start_token_id); SAME(bos_token_id); SAME(eos_token_id); SAME(pad_token_id);
    SAME(sliding_window); SAME(resid_dropout); SAME(embd_dropout); SAME(attn_dropout);
#undef SAME
    if (strcmp(a->model_type, b->model_type) != 0)
        return "model_type";
    if (strcmp(a->activation, b->activation) != 0)
        return "activation";
    return NULL;
}

/* ---- dump modes ----------------------------------------------------------------------- */

static void dump_config(const rc_model_config *c)
{
    printf("{\"type\": %d, \"model_type\": \"%s\", \"vocab_size\": %d, \"d_model\": %d, "
           "\"n_layer\": %d, \"n_decoder_layer\": %d, \"n_head\": %d, \"n_kv_head\": %d, "
           "\"head_dim\": %d, \"d_ff\": %d, \"max_positions\": %d, \"norm_eps\": %.17g, "
           "\"rope_theta\": %.17g, \"rotary_dim\": %d, \"tie_word_embeddings\": %d, "
           "\"activation\": \"%s\", \"gated_ffn\": %d, \"do_layer_norm_before\": %d, "
           "\"remove_final_layer_norm\": %d, \"layer_norm_affine\": %d, "
           "\"word_embed_proj_dim\": %d, \"enable_bias\": %d, \"attention_bias\": %d, "
           "\"mlp_bias\": %d, \"rel_buckets\": %d, \"rel_max_distance\": %d, "
           "\"decoder_start_token_id\": %d, \"bos_token_id\": %d, \"eos_token_id\": %d, "
           "\"pad_token_id\": %d, \"sliding_window\": %d, \"resid_dropout\": %.17g, "
           "\"embd_dropout\": %.17g, \"attn_dropout\": %.17g, \"architecture\": \"%s\", "
           "\"param_count\": %lld}\n",
           (int)c->type, c->model_type, c->vocab_size, c->d_model, c->n_layer,
           c->n_decoder_layer, c->n_head, c->n_kv_head, c->head_dim, c->d_ff, c->max_positions,
           c->norm_eps, c->rope_theta, c->rotary_dim, c->tie_word_embeddings, c->activation,
           c->gated_ffn, c->do_layer_norm_before, c->remove_final_layer_norm,
           c->layer_norm_affine, c->word_embed_proj_dim, c->enable_bias, c->attention_bias,
           c->mlp_bias, c->rel_buckets, c->rel_max_distance, c->decoder_start_token_id,
           c->bos_token_id, c->eos_token_id, c->pad_token_id, c->sliding_window,
           c->resid_dropout, c->embd_dropout, c->attn_dropout, rc_config_architecture(c),
           (long long)rc_config_param_count(c));
}

static int mode_dump(const char *path)
{
    rc_model_config c;
    rc_error err = {0};
    if (rc_config_load(path, &c, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    dump_config(&c);
    return 0;
}

static int mode_save(const char *preset, const char *dir)
{
    rc_model_config c;
    rc_error err = {0};
    if (rc_config_preset(preset, &c, &err) || rc_config_save(dir, &c, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    return 0;
}

/* ---- families ------------------------------------------------------------------------- */

static void test_gpt2(void)
{
    rc_model_config c;
    rc_error err;
    CHECKF(load_text("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                     "\"n_layer\": 2, \"n_head\": 4}", &c, &err) == 0, "%s", err.msg);
    CHECK(c.type == RC_MODEL_GPT2 && strcmp(c.model_type, "gpt2") == 0);
    CHECK(c.vocab_size == 100 && c.d_model == 32 && c.n_layer == 2 && c.n_head == 4);
    /* GPT2Config defaults */
    CHECK(c.d_ff == 128 && c.max_positions == 1024 && c.head_dim == 8 && c.n_kv_head == 4);
    CHECK(c.norm_eps == 1e-5 && strcmp(c.activation, "gelu_new") == 0 && c.tie_word_embeddings);
    CHECK(c.bos_token_id == 50256 && c.eos_token_id == 50256 && c.pad_token_id == -1);
    CHECK(c.resid_dropout == 0.1 && c.embd_dropout == 0.1 && c.attn_dropout == 0.1);
    CHECK(c.gated_ffn == 0 && c.rotary_dim == 0 && c.decoder_start_token_id == -1);
    CHECK(strcmp(rc_config_architecture(&c), "GPT2LMHeadModel") == 0);

    /* attribute_map aliases, n_inner, explicit values */
    CHECKF(load_text("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"hidden_size\": 48, "
                     "\"num_hidden_layers\": 3, \"num_attention_heads\": 6, "
                     "\"max_position_embeddings\": 64, \"n_inner\": 100, "
                     "\"activation_function\": \"relu\", \"layer_norm_epsilon\": 1e-6, "
                     "\"tie_word_embeddings\": false, \"resid_pdrop\": 0, \"embd_pdrop\": 0.2, "
                     "\"attn_pdrop\": 0.3, \"bos_token_id\": 1, \"eos_token_id\": [2, 3], "
                     "\"pad_token_id\": null}", &c, &err) == 0, "%s", err.msg);
    CHECK(c.d_model == 48 && c.n_layer == 3 && c.n_head == 6 && c.max_positions == 64);
    CHECK(c.d_ff == 100 && strcmp(c.activation, "relu") == 0 && c.norm_eps == 1e-6);
    CHECK(!c.tie_word_embeddings && c.resid_dropout == 0 && c.embd_dropout == 0.2 &&
          c.attn_dropout == 0.3);
    CHECK(c.bos_token_id == 1 && c.eos_token_id == 2 && c.pad_token_id == -1);
    CHECKF(load_text("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                     "\"n_layer\": 2, \"n_head\": 4, \"n_inner\": null, \"n_embd\": 32}", &c,
                     &err) == -1, "duplicate key accepted");
    CHECKF(load_text("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                     "\"hidden_size\": 32, \"n_layer\": 2, \"n_head\": 4, \"n_inner\": null}", &c,
                     &err) == 0 && c.d_ff == 128, "%s", err.msg);
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                      "\"hidden_size\": 64, \"n_layer\": 2, \"n_head\": 4}",
                      "n_embd 32", "hidden_size 64", "disagree");
    /* settings the model does not implement */
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                      "\"n_layer\": 2, \"n_head\": 4, \"scale_attn_by_inverse_layer_idx\": true}",
                      "scale_attn_by_inverse_layer_idx true is not supported");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                      "\"n_layer\": 2, \"n_head\": 4, \"scale_attn_weights\": false}",
                      "scale_attn_weights false");
    CHECK(load_text("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                    "\"n_layer\": 2, \"n_head\": 4, \"scale_attn_weights\": true, "
                    "\"reorder_and_upcast_attn\": true, \"unknown_key\": [1]}", &c, &err) == 0);
}

static void test_llama(void)
{
    rc_model_config c;
    rc_error err;
    CHECKF(load_text("{\"model_type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 64, "
                     "\"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
                     "\"intermediate_size\": 172}", &c, &err) == 0, "%s", err.msg);
    CHECK(c.type == RC_MODEL_LLAMA && c.n_kv_head == 8 && c.head_dim == 8 && c.rotary_dim == 8);
    CHECK(c.d_ff == 172 && c.max_positions == 2048 && c.norm_eps == 1e-6 &&
          c.rope_theta == 10000.0);
    CHECK(!c.tie_word_embeddings && c.gated_ffn && strcmp(c.activation, "silu") == 0);
    CHECK(c.bos_token_id == 1 && c.eos_token_id == 2 && c.pad_token_id == -1);
    CHECK(!c.attention_bias && !c.mlp_bias && c.sliding_window == 0 && c.attn_dropout == 0);
    CHECK(strcmp(rc_config_architecture(&c), "LlamaForCausalLM") == 0);

    CHECKF(load_text("{\"model_type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 64, "
                     "\"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
                     "\"num_key_value_heads\": 2, \"intermediate_size\": 172, "
                     "\"rms_norm_eps\": 1e-05, \"rope_theta\": 500000, \"tie_word_embeddings\": "
                     "true, \"attention_bias\": true, \"hidden_act\": \"gelu\", "
                     "\"rope_scaling\": null, \"pad_token_id\": -1, \"head_dim\": 16}", &c,
                     &err) == 0, "%s", err.msg);
    CHECK(c.n_kv_head == 2 && c.norm_eps == 1e-5 && c.rope_theta == 500000.0);
    CHECK(c.tie_word_embeddings && c.attention_bias && strcmp(c.activation, "gelu") == 0);
    CHECK(c.pad_token_id == -1 && c.head_dim == 16 && c.rotary_dim == 16);
    CHECKF(load_text("{\"model_type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 64, "
                     "\"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
                     "\"num_key_value_heads\": null, \"intermediate_size\": 172}", &c,
                     &err) == 0 && c.n_kv_head == 8, "%s", err.msg);
    EXPECT_LOAD_ERROR("{\"model_type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 64, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
                      "\"num_key_value_heads\": 3, \"intermediate_size\": 172}",
                      "config.json: num_key_value_heads 3 does not divide num_attention_heads 8");
    EXPECT_LOAD_ERROR("{\"model_type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 60, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
                      "\"intermediate_size\": 172}",
                      "num_attention_heads 8 does not divide hidden_size 60");
    EXPECT_LOAD_ERROR("{\"model_type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 36, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                      "\"intermediate_size\": 172}", "head size 9", "even");
    EXPECT_LOAD_ERROR("{\"model_type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 64, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
                      "\"intermediate_size\": 172, \"rope_scaling\": {\"type\": \"linear\", "
                      "\"factor\": 2.0}}", "rope_scaling is not supported");
    EXPECT_LOAD_ERROR("{\"model_type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 64, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
                      "\"intermediate_size\": 172, \"rope_theta\": 0}", "rope_theta");

    /* Mistral: a LLaMA with its own defaults */
    CHECKF(load_text("{\"model_type\": \"mistral\", \"vocab_size\": 300, \"hidden_size\": 128, "
                     "\"num_hidden_layers\": 2, \"num_attention_heads\": 16, "
                     "\"intermediate_size\": 256}", &c, &err) == 0, "%s", err.msg);
    CHECK(c.type == RC_MODEL_LLAMA && strcmp(c.model_type, "mistral") == 0);
    CHECK(c.n_kv_head == 8 && c.sliding_window == 4096 && c.max_positions == 131072);
    CHECK(strcmp(rc_config_architecture(&c), "MistralForCausalLM") == 0);
    CHECKF(load_text("{\"model_type\": \"mistral\", \"vocab_size\": 300, \"hidden_size\": 128, "
                     "\"num_hidden_layers\": 2, \"num_attention_heads\": 16, "
                     "\"num_key_value_heads\": 4, \"intermediate_size\": 256, "
                     "\"sliding_window\": null}", &c, &err) == 0, "%s", err.msg);
    CHECK(c.n_kv_head == 4 && c.sliding_window == 0);
}

static void test_opt(void)
{
    rc_model_config c;
    rc_error err;
    CHECKF(load_text("{\"model_type\": \"opt\", \"vocab_size\": 200, \"hidden_size\": 32, "
                     "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"ffn_dim\": 64}", &c,
                     &err) == 0, "%s", err.msg);
    CHECK(c.type == RC_MODEL_OPT && c.d_ff == 64 && c.word_embed_proj_dim == 32);
    CHECK(c.max_positions == 2048 && c.norm_eps == 1e-5 && strcmp(c.activation, "relu") == 0);
    CHECK(c.do_layer_norm_before && !c.remove_final_layer_norm && c.enable_bias &&
          c.layer_norm_affine && c.tie_word_embeddings);
    CHECK(c.pad_token_id == 1 && c.bos_token_id == 2 && c.eos_token_id == 2);
    CHECK(c.resid_dropout == 0.1 && c.embd_dropout == 0 && c.attn_dropout == 0.0); /* no embedding dropout */
    CHECK(strcmp(rc_config_architecture(&c), "OPTForCausalLM") == 0);
    CHECKF(load_text("{\"model_type\": \"opt\", \"vocab_size\": 200, \"hidden_size\": 32, "
                     "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"ffn_dim\": 64, "
                     "\"word_embed_proj_dim\": 16, \"do_layer_norm_before\": false, "
                     "\"_remove_final_layer_norm\": true, \"enable_bias\": false, "
                     "\"layer_norm_elementwise_affine\": false, \"dropout\": 0.0, "
                     "\"attention_dropout\": 0.1, \"max_position_embeddings\": 100}", &c,
                     &err) == 0, "%s", err.msg);
    CHECK(c.word_embed_proj_dim == 16 && !c.do_layer_norm_before && c.remove_final_layer_norm &&
          !c.enable_bias && !c.layer_norm_affine && c.max_positions == 100);
    CHECK(c.resid_dropout == 0 && c.attn_dropout == 0.1);
    CHECKF(load_text("{\"model_type\": \"opt\", \"vocab_size\": 200, \"hidden_size\": 32, "
                     "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"ffn_dim\": 64, "
                     "\"word_embed_proj_dim\": null}", &c, &err) == 0 &&
           c.word_embed_proj_dim == 32, "%s", err.msg);
    EXPECT_LOAD_ERROR("{\"model_type\": \"opt\", \"vocab_size\": 200, \"hidden_size\": 32, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 5, \"ffn_dim\": 64}",
                      "num_attention_heads 5 does not divide hidden_size 32");
    EXPECT_LOAD_ERROR("{\"model_type\": \"opt\", \"vocab_size\": 200, \"hidden_size\": 32, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"ffn_dim\": 64, "
                      "\"do_layer_norm_before\": 1}", "do_layer_norm_before must be true or false");
    /* LayerDrop is not implemented: 0 (every published OPT's) loads, more is refused */
    CHECKF(load_text("{\"model_type\": \"opt\", \"vocab_size\": 200, \"hidden_size\": 32, "
                     "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"ffn_dim\": 64, "
                     "\"layerdrop\": 0.0}", &c, &err) == 0, "%s", err.msg);
    EXPECT_LOAD_ERROR("{\"model_type\": \"opt\", \"vocab_size\": 200, \"hidden_size\": 32, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"ffn_dim\": 64, "
                      "\"layerdrop\": 0.1}", "layerdrop 0.1 is not supported");
}

static void test_gptj(void)
{
    rc_model_config c;
    rc_error err;
    /* rotary_dim absent: GPTJConfig's 64, which must fit the head */
    CHECKF(load_text("{\"model_type\": \"gptj\", \"vocab_size\": 200, \"n_embd\": 256, "
                     "\"n_layer\": 2, \"n_head\": 4}", &c, &err) == 0, "%s", err.msg);
    CHECK(c.type == RC_MODEL_GPTJ && c.rotary_dim == 64 && c.head_dim == 64 && c.d_ff == 1024);
    CHECK(c.max_positions == 2048 && !c.tie_word_embeddings && c.norm_eps == 1e-5);
    CHECK(c.resid_dropout == 0 && c.embd_dropout == 0 && c.attn_dropout == 0);
    CHECK(c.bos_token_id == 50256 && strcmp(c.activation, "gelu_new") == 0 &&
          c.rope_theta == 10000.0);
    CHECK(strcmp(rc_config_architecture(&c), "GPTJForCausalLM") == 0);
    EXPECT_LOAD_ERROR("{\"model_type\": \"gptj\", \"vocab_size\": 200, \"n_embd\": 64, "
                      "\"n_layer\": 2, \"n_head\": 4}", "rotary_dim 64", "[2, 16]");
    /* null: rotary over the whole head */
    CHECKF(load_text("{\"model_type\": \"gptj\", \"vocab_size\": 200, \"n_embd\": 64, "
                     "\"n_layer\": 2, \"n_head\": 4, \"rotary_dim\": null, \"n_inner\": 96, "
                     "\"hidden_size\": 64, \"max_position_embeddings\": 32}", &c, &err) == 0,
           "%s", err.msg);
    CHECK(c.rotary_dim == 16 && c.d_ff == 96 && c.max_positions == 32);
    CHECKF(load_text("{\"model_type\": \"gptj\", \"vocab_size\": 200, \"n_embd\": 64, "
                     "\"n_layer\": 2, \"n_head\": 4, \"rotary_dim\": 8, "
                     "\"tie_word_embeddings\": true}", &c, &err) == 0, "%s", err.msg);
    CHECK(c.rotary_dim == 8 && c.tie_word_embeddings);
    EXPECT_LOAD_ERROR("{\"model_type\": \"gptj\", \"vocab_size\": 200, \"n_embd\": 64, "
                      "\"n_layer\": 2, \"n_head\": 4, \"rotary_dim\": 7}", "rotary_dim 7");
}

static void test_t5(void)
{
    rc_model_config c;
    rc_error err;
    CHECKF(load_text("{\"model_type\": \"t5\", \"vocab_size\": 100, \"d_model\": 32, "
                     "\"num_layers\": 3, \"num_heads\": 4, \"d_kv\": 8, \"d_ff\": 64}", &c,
                     &err) == 0, "%s", err.msg);
    CHECK(c.type == RC_MODEL_T5 && c.n_decoder_layer == 3 && c.head_dim == 8 && c.d_ff == 64);
    CHECK(!c.gated_ffn && strcmp(c.activation, "relu") == 0 && c.tie_word_embeddings);
    CHECK(c.rel_buckets == 32 && c.rel_max_distance == 128 && c.norm_eps == 1e-6);
    CHECK(c.pad_token_id == 0 && c.eos_token_id == 1 && c.bos_token_id == -1 &&
          c.decoder_start_token_id == 0);
    CHECK(c.max_positions == 0 && c.resid_dropout == 0.1 && c.attn_dropout == 0.1);
    CHECK(strcmp(rc_config_architecture(&c), "T5ForConditionalGeneration") == 0);
    /* feed_forward_proj forms; d_kv independent of d_model / num_heads */
    struct { const char *proj; int gated; const char *act; } forms[] = {
        {"relu", 0, "relu"}, {"gated-gelu", 1, "gelu_new"}, {"gated-silu", 1, "silu"},
        {"gelu", 0, "gelu"}, {"gated-relu", 1, "relu"},
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char text[400];
        snprintf(text, sizeof text, "{\"model_type\": \"t5\", \"vocab_size\": 100, "
                 "\"d_model\": 32, \"num_layers\": 2, \"num_decoder_layers\": 1, "
                 "\"num_heads\": 4, \"d_kv\": 16, \"d_ff\": 64, \"feed_forward_proj\": \"%s\", "
                 "\"tie_word_embeddings\": false, \"relative_attention_num_buckets\": 8, "
                 "\"relative_attention_max_distance\": 20, \"decoder_start_token_id\": 5}",
                 forms[i].proj);
        CHECKF(load_text(text, &c, &err) == 0, "%s", err.msg);
        CHECKF(c.gated_ffn == forms[i].gated && strcmp(c.activation, forms[i].act) == 0,
               "%s -> %d %s", forms[i].proj, c.gated_ffn, c.activation);
        CHECK(c.n_decoder_layer == 1 && c.head_dim == 16 && !c.tie_word_embeddings &&
              c.rel_buckets == 8 && c.rel_max_distance == 20 && c.decoder_start_token_id == 5);
    }
    /* transformers writes dense_act_fn / is_gated_act too; they override */
    CHECKF(load_text("{\"model_type\": \"t5\", \"vocab_size\": 100, \"hidden_size\": 32, "
                     "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"d_kv\": 8, "
                     "\"d_ff\": 64, \"feed_forward_proj\": \"gated-gelu\", "
                     "\"dense_act_fn\": \"gelu\", \"is_gated_act\": true, \"pad_token_id\": 3}",
                     &c, &err) == 0, "%s", err.msg);
    CHECK(c.d_model == 32 && c.n_layer == 2 && c.n_head == 4 && c.gated_ffn &&
          strcmp(c.activation, "gelu") == 0 && c.decoder_start_token_id == 3);
    EXPECT_LOAD_ERROR("{\"model_type\": \"t5\", \"vocab_size\": 100, \"d_model\": 32, "
                      "\"num_layers\": 2, \"num_heads\": 4, \"d_kv\": 8, \"d_ff\": 64, "
                      "\"feed_forward_proj\": \"double-gelu\"}",
                      "feed_forward_proj 'double-gelu'", "gated-ACT");
    EXPECT_LOAD_ERROR("{\"model_type\": \"t5\", \"vocab_size\": 100, \"d_model\": 32, "
                      "\"num_layers\": 2, \"num_heads\": 4, \"d_kv\": 8, \"d_ff\": 64, "
                      "\"feed_forward_proj\": \"gated-gelu-x\"}", "feed_forward_proj");
    EXPECT_LOAD_ERROR("{\"model_type\": \"t5\", \"vocab_size\": 100, \"d_model\": 32, "
                      "\"num_layers\": 2, \"num_heads\": 4, \"d_kv\": 8, \"d_ff\": 64, "
                      "\"feed_forward_proj\": \"quick_gelu\"}", "dense_act_fn 'quick_gelu'",
                      "not supported");
    EXPECT_LOAD_ERROR("{\"model_type\": \"t5\", \"vocab_size\": 100, \"d_model\": 32, "
                      "\"num_layers\": 2, \"num_heads\": 4, \"d_kv\": 8, \"d_ff\": 64, "
                      "\"relative_attention_num_buckets\": 3}", "relative_attention_num_buckets 3");
    EXPECT_LOAD_ERROR("{\"model_type\": \"t5\", \"vocab_size\": 100, \"d_model\": 32, "
                      "\"num_layers\": 2, \"num_heads\": 4, \"d_kv\": 8, \"d_ff\": 64, "
                      "\"relative_attention_max_distance\": 10}",
                      "relative_attention_max_distance 10");
    EXPECT_LOAD_ERROR("{\"model_type\": \"t5\", \"vocab_size\": 100, \"d_model\": 32, "
                      "\"num_layers\": 2, \"num_heads\": 4, \"d_kv\": 8, \"d_ff\": 64, "
                      "\"num_decoder_layers\": 0}", "num_decoder_layers must be positive");
}

/* ---- errors --------------------------------------------------------------------------- */

static void test_errors(void)
{
    /* every required key of every family, removed in turn */
    static const struct { const char *type; const char *keys[6]; } req[] = {
        {"gpt2", {"vocab_size", "n_embd", "n_layer", "n_head"}},
        {"gptj", {"vocab_size", "n_embd", "n_layer", "n_head"}},
        {"llama", {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                   "intermediate_size"}},
        {"mistral", {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size"}},
        {"opt", {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "ffn_dim"}},
        {"t5", {"vocab_size", "d_model", "num_layers", "num_heads", "d_ff", "d_kv"}},
    };
    for (size_t f = 0; f < sizeof req / sizeof req[0]; f++) {
        int nk = 0;
        while (nk < 6 && req[f].keys[nk])
            nk++;
        for (int skip = -1; skip < nk; skip++) {
            char text[600];
            size_t len = (size_t)snprintf(text, sizeof text, "{\"model_type\": \"%s\"",
                                          req[f].type);
            for (int k = 0; k < nk; k++)
                if (k != skip)
                    len += (size_t)snprintf(text + len, sizeof text - len, ", \"%s\": %d",
                                            req[f].keys[k], strstr(req[f].keys[k], "head") ? 8 : 64);
            snprintf(text + len, sizeof text - len, ", \"rotary_dim\": 8, \"unknown\": 1}");
            rc_model_config c;
            rc_error err;
            int rc = load_text(text, &c, &err);
            if (skip < 0) {
                CHECKF(rc == 0, "%s: %s", req[f].type, err.msg);
            } else {
                char want[80];
                snprintf(want, sizeof want, "missing required key \"%s\"", req[f].keys[skip]);
                CHECKF(rc == -1 && check_has(err.msg, want) && check_has(err.msg, "config.json"),
                       "%s without %s: %s", req[f].type, req[f].keys[skip], err.msg);
            }
        }
    }
    EXPECT_LOAD_ERROR("{\"vocab_size\": 10}", "missing required key \"model_type\"");
    EXPECT_LOAD_ERROR("{\"model_type\": \"bert\", \"vocab_size\": 10}",
                      "model_type 'bert' is not supported", "gpt2, llama, mistral, opt, gptj, t5");
    EXPECT_LOAD_ERROR("{\"model_type\": 2}", "model_type must be a string");
    EXPECT_LOAD_ERROR("[1, 2]", "not a JSON object");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\",", "invalid JSON");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                      "\"n_layer\": \"2\", \"n_head\": 4}", "n_layer must be an integer");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32.0, "
                      "\"n_layer\": 2, \"n_head\": 4}", "n_embd must be an integer");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": null, \"n_embd\": 32, "
                      "\"n_layer\": 2, \"n_head\": 4}", "vocab_size must be an integer, not null");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                      "\"n_layer\": 2, \"n_head\": 4, \"n_positions\": null}", "n_positions");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                      "\"n_layer\": 2, \"n_head\": 4, \"n_positions\": 99999999999}",
                      "n_positions 99999999999 is out of range");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": -5, \"n_embd\": 32, "
                      "\"n_layer\": 2, \"n_head\": 4}", "vocab_size must be positive, got -5");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                      "\"n_layer\": 0, \"n_head\": 4}", "n_layer must be positive, got 0");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                      "\"n_layer\": 2, \"n_head\": 5}", "n_head 5 does not divide n_embd 32");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                      "\"n_layer\": 2, \"n_head\": 4, \"n_inner\": 0}", "n_inner must be positive");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                      "\"n_layer\": 2, \"n_head\": 4, \"layer_norm_epsilon\": -1}",
                      "layer_norm_epsilon must be positive");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                      "\"n_layer\": 2, \"n_head\": 4, \"layer_norm_epsilon\": \"x\"}",
                      "layer_norm_epsilon must be a number");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                      "\"n_layer\": 2, \"n_head\": 4, \"activation_function\": \"quick_gelu\"}",
                      "activation_function 'quick_gelu' is not supported");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                      "\"n_layer\": 2, \"n_head\": 4, \"resid_pdrop\": 1.5}", "dropout");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                      "\"n_layer\": 2, \"n_head\": 4, \"eos_token_id\": \"x\"}",
                      "eos_token_id must be a token id");
    EXPECT_LOAD_ERROR("{\"model_type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": 64, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
                      "\"intermediate_size\": 172, \"hidden_act\": \"a_very_long_activation_name_"
                      "beyond_the_field\"}", "hidden_act", "too long");

    /* missing file, a directory without config.json, a directory with one */
    rc_model_config c;
    rc_error err = {0};
    CHECK(rc_config_load(tmp_path("nope.json"), &c, &err) == -1);
    CHECKF(err.code == RC_ERR_IO && check_has(err.msg, "nope.json") && check_has(err.msg, "cannot read"),
           "%s", err.msg);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/model", tmpdir);
    mkdir(dir, 0755);
    err = (rc_error){0};
    CHECK(rc_config_load(dir, &c, &err) == -1 && check_has(err.msg, "model/config.json"));
    char path[300];
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, "{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 32, "
                     "\"n_layer\": 2, \"n_head\": 4}");
    CHECK(rc_config_load(dir, &c, &err) == 0 && c.d_model == 32);

    /* rc_config_validate on a hand-made struct names the family's key */
    rc_config_preset("tiny-llama", &c, &err);
    c.n_kv_head = 3;
    err = (rc_error){0};
    CHECK(rc_config_validate(&c, &err) == -1);
    CHECKF(check_has(err.msg, "llama config: num_key_value_heads 3 does not divide "
                        "num_attention_heads 4"), "%s", err.msg);
    rc_config_preset("tiny-t5", &c, &err);
    c.head_dim = 0;
    CHECK(rc_config_validate(&c, &err) == -1 && check_has(err.msg, "d_kv must be positive"));
    rc_config_preset("tiny-gpt2", &c, &err);
    c.n_kv_head = 2;
    CHECK(rc_config_validate(&c, &err) == -1 && check_has(err.msg, "key/value head groups"));
    c.n_kv_head = 0;  /* unused fields may stay 0 */
    CHECK(rc_config_validate(&c, &err) == 0);
    c.type = RC_MODEL_TYPE_COUNT;
    CHECK(rc_config_validate(&c, &err) == -1);
    CHECK(rc_config_activation("gelu_new") == RC_ACT_GELU_TANH &&
          rc_config_activation("gelu") == RC_ACT_GELU_ERF &&
          rc_config_activation("swish") == RC_ACT_SILU && rc_config_activation("tanh") == -1);
}

/* ---- saving and presets --------------------------------------------------------------- */

static int tmp_files_left(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strstr(e->d_name, ".tmp.") != NULL;
    if (d)
        closedir(d);
    return n;
}

static void test_save(void)
{
    const char *const *names = rc_config_preset_names();
    int n = 0;
    while (names[n])
        n++;
    CHECKF(n == 28, "%d presets", n);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/saved", tmpdir);
    mkdir(dir, 0755);
    for (int i = 0; i < n; i++) {
        rc_model_config a, b;
        rc_error err = {0};
        CHECKF(rc_config_preset(names[i], &a, &err) == 0, "%s: %s", names[i], err.msg);
        CHECKF(rc_config_validate(&a, &err) == 0, "%s: %s", names[i], err.msg);
        CHECKF(rc_config_save(dir, &a, &err) == 0, "%s: %s", names[i], err.msg);
        CHECKF(rc_config_load(dir, &b, &err) == 0, "%s: %s", names[i], err.msg);
        const char *d = config_diff(&a, &b);
        CHECKF(d == NULL, "%s: %s differs after save -> load", names[i], d);
    }
    CHECK(tmp_files_left(dir) == 0);

    /* a config with every setting off its default survives too */
    rc_model_config a, b;
    rc_error err = {0};
    rc_config_preset("tiny-opt", &a, &err);
    a.word_embed_proj_dim = 16, a.do_layer_norm_before = 0, a.remove_final_layer_norm = 1;
    a.enable_bias = 0, a.layer_norm_affine = 0, a.tie_word_embeddings = 0;
    a.resid_dropout = 0.05, a.attn_dropout = 1.0 / 3.0;  /* needs 17 digits */
    a.pad_token_id = -1, a.bos_token_id = 7;
    snprintf(a.activation, sizeof a.activation, "gelu");
    CHECKF(rc_config_save(dir, &a, &err) == 0, "%s", err.msg);
    CHECKF(rc_config_load(dir, &b, &err) == 0, "%s", err.msg);
    CHECKF(config_diff(&a, &b) == NULL, "opt: %s", config_diff(&a, &b));
    rc_config_preset("tiny-llama", &a, &err);
    snprintf(a.model_type, sizeof a.model_type, "mistral");
    a.sliding_window = 0, a.norm_eps = 1e-5, a.rope_theta = 500000, a.tie_word_embeddings = 1;
    CHECKF(rc_config_save(dir, &a, &err) == 0, "%s", err.msg);
    CHECKF(rc_config_load(dir, &b, &err) == 0, "%s", err.msg);
    CHECKF(config_diff(&a, &b) == NULL, "mistral: %s", config_diff(&a, &b));
    rc_config_preset("tiny-llama", &a, &err);
    a.head_dim = a.rotary_dim = 32, a.attention_bias = 1, a.mlp_bias = 1;
    CHECKF(rc_config_save(dir, &a, &err) == 0, "%s", err.msg);
    CHECKF(rc_config_load(dir, &b, &err) == 0, "%s", err.msg);
    CHECKF(config_diff(&a, &b) == NULL, "llama: %s", config_diff(&a, &b));
    rc_config_preset("t5-small", &a, &err);
    a.gated_ffn = 1;  /* gated erf-gelu: feed_forward_proj alone can't say it */
    snprintf(a.activation, sizeof a.activation, "gelu");
    a.n_decoder_layer = 3, a.decoder_start_token_id = 2;
    CHECKF(rc_config_save(dir, &a, &err) == 0, "%s", err.msg);
    CHECKF(rc_config_load(dir, &b, &err) == 0, "%s", err.msg);
    CHECKF(config_diff(&a, &b) == NULL, "t5: %s", config_diff(&a, &b));

    /* the text: HF keys, architectures, readable numbers */
    rc_config_preset("gpt2", &a, &err);
    char path[300];
    snprintf(path, sizeof path, "%s/gpt2.json", dir);
    CHECK(rc_config_save(path, &a, &err) == 0);
    FILE *f = fopen(path, "r");
    char text[4096] = "";
    if (f) {
        size_t got = fread(text, 1, sizeof text - 1, f);
        text[got] = 0;
        fclose(f);
    }
    CHECKF(check_has(text, "\"architectures\": [\n    \"GPT2LMHeadModel\"\n  ]"), "%s", text);
    CHECK(check_has(text, "\"model_type\": \"gpt2\"") && check_has(text, "\"n_embd\": 768") &&
          check_has(text, "\"layer_norm_epsilon\": 1e-5") && check_has(text, "\"resid_pdrop\": 0.1,") &&
          check_has(text, "\"pad_token_id\": null") && !check_has(text, "hidden_size"));

    /* errors: an invalid config is not written; an unwritable place */
    a.n_head = 5;
    err = (rc_error){0};
    snprintf(path, sizeof path, "%s/bad.json", dir);
    CHECK(rc_config_save(path, &a, &err) == -1 && check_has(err.msg, "n_head 5 does not divide"));
    CHECK(access(path, F_OK) != 0);
    a.n_head = 12;
    err = (rc_error){0};
    CHECK(rc_config_save(tmp_path("no/such/dir/config.json"), &a, &err) == -1);
    CHECKF(err.code == RC_ERR_IO && check_has(err.msg, "no/such/dir"), "%s", err.msg);
    CHECK(tmp_files_left(dir) == 0);
}

static void test_presets(void)
{
    /* parameter counts of the published models (tied matrices once) */
    static const struct { const char *name; long long params; } known[] = {
        {"gpt2", 124439808LL},        {"gpt2-medium", 354823168LL},
        {"gpt2-large", 774030080LL},  {"gpt2-xl", 1557611200LL},
        {"opt-125m", 125239296LL},    {"opt-350m", 331196416LL},
        {"opt-1.3b", 1315758080LL},   {"opt-2.7b", 2651596800LL},
        {"llama-7b", 6738415616LL},   {"llama-13b", 13015864320LL},
        {"llama-65b", 65285660672LL}, {"gpt-j-6b", 6050882784LL},
        {"t5-small", 60506624LL},     {"t5-base", 222903552LL},
        {"t5-large", 737668096LL},    {"t5-3b", 2851598336LL},
        {"t5-11b", 11307321344LL},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        rc_model_config c;
        rc_error err = {0};
        CHECKF(rc_config_preset(known[i].name, &c, &err) == 0, "%s", err.msg);
        CHECKF(rc_config_param_count(&c) == known[i].params, "%s: %lld parameters, want %lld",
               known[i].name, (long long)rc_config_param_count(&c), known[i].params);
    }
    rc_model_config c;
    rc_error err = {0};
    rc_config_preset("opt-350m", &c, &err);
    CHECK(c.word_embed_proj_dim == 512 && !c.do_layer_norm_before && c.d_model == 1024);
    rc_config_preset("gpt-j-6b", &c, &err);
    CHECK(c.rotary_dim == 64 && c.vocab_size == 50400 && c.max_positions == 2048 &&
          c.head_dim == 256 && c.d_ff == 16384);
    rc_config_preset("llama-65b", &c, &err);
    CHECK(c.d_model == 8192 && c.n_layer == 80 && c.n_head == 64 && c.d_ff == 22016 &&
          c.vocab_size == 32000 && c.n_kv_head == 64);
    rc_config_preset("t5-11b", &c, &err);
    CHECK(c.head_dim == 128 && c.n_head == 128 && c.d_ff == 65536 && !c.gated_ffn &&
          c.tie_word_embeddings);
    /* tiny presets: small, and each on its family's less common path */
    const char *tiny[5] = {"tiny-gpt2", "tiny-llama", "tiny-opt", "tiny-gptj", "tiny-t5"};
    for (int i = 0; i < 5; i++) {
        CHECK(rc_config_preset(tiny[i], &c, &err) == 0);
        CHECKF(c.d_model >= 32 && c.d_model <= 64 && c.n_layer == 2 && c.vocab_size >= 100 &&
               c.vocab_size <= 300 && rc_config_param_count(&c) < 300000, "%s", tiny[i]);
        CHECKF(c.eos_token_id < c.vocab_size && c.bos_token_id < c.vocab_size &&
               c.pad_token_id < c.vocab_size, "%s ids", tiny[i]);
    }
    rc_config_preset("tiny-llama", &c, &err);
    CHECK(c.n_head == 4 && c.n_kv_head == 2);
    rc_config_preset("tiny-gptj", &c, &err);
    CHECK(c.rotary_dim < c.head_dim);
    rc_config_preset("tiny-t5", &c, &err);
    CHECK(c.gated_ffn && strcmp(c.activation, "gelu_new") == 0 && !c.tie_word_embeddings);
    err = (rc_error){0};
    CHECK(rc_config_preset("gpt5", &c, &err) == -1);
    CHECKF(err.code == RC_ERR_ARG && check_has(err.msg, "unknown preset 'gpt5'") &&
           check_has(err.msg, "gpt2-xl") && check_has(err.msg, "tiny-t5"), "%s", err.msg);
}

/* Hostile sizes: overflowing products and huge models are refused with the field named,
 * before anything is built; the count itself does not overflow. */
static void test_sizes(void)
{
    /* 4 x n_embd overflows an int when n_inner is derived */
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 10, \"n_embd\": 1073741824, "
                      "\"n_layer\": 1, \"n_head\": 1}", "4 x 1073741824", "n_inner");
    /* the case: n_layer 10^8 on a GPT-2 small */
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 50257, \"n_embd\": 768, "
                      "\"n_layer\": 100000000, \"n_head\": 12}", "n_layer 100000000",
                      "more than the 4096 layers");
    /* parameters past 2^40 from wide layers and a big vocabulary */
    EXPECT_LOAD_ERROR("{\"model_type\": \"llama\", \"vocab_size\": 2000000000, "
                      "\"hidden_size\": 65536, \"num_hidden_layers\": 2, "
                      "\"num_attention_heads\": 64, \"intermediate_size\": 4}",
                      "vocab_size 2000000000", "parameters", "PB in float32",
                      "more than the limit");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gptj\", \"vocab_size\": 10, \"n_embd\": 1000000000, "
                      "\"n_layer\": 1, \"n_head\": 1, \"n_inner\": 4}", "n_embd 1000000000",
                      "3 x n_embd");
    EXPECT_LOAD_ERROR("{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 8, "
                      "\"num_hidden_layers\": 1, \"num_attention_heads\": 65536, "
                      "\"head_dim\": 65536, \"intermediate_size\": 4}",
                      "num_attention_heads 65536 x head_dim 65536");
    EXPECT_LOAD_ERROR("{\"model_type\": \"t5\", \"vocab_size\": 10, \"d_model\": 8, "
                      "\"num_layers\": 2, \"num_decoder_layers\": 5000, \"num_heads\": 1, "
                      "\"d_ff\": 4, \"d_kv\": 8}", "num_decoder_layers 5000");
    EXPECT_LOAD_ERROR("{\"model_type\": \"gpt2\", \"vocab_size\": 10, \"n_embd\": 8, "
                      "\"n_layer\": 4294967297, \"n_head\": 1}", "n_layer 4294967297 is out "
                      "of range");
    /* rc_config_validate on a hand-built struct checks the same limits, and the count of an
     * unchecked config saturates instead of wrapping */
    rc_model_config c;
    rc_error err = {0};
    CHECKF(rc_config_preset("gpt2", &c, &err) == 0, "%s", err.msg);
    c.n_layer = 2000000000, c.d_model = c.d_ff = 1200000000, c.head_dim = 100000000;
    CHECK(rc_config_param_count(&c) == INT64_MAX);
    CHECKF(rc_config_validate(&c, &err) == -1 && check_has(err.msg, "n_layer 2000000000"),
           "%s", err.msg);
    /* the largest allowed: 4096 layers of a small model still loads and counts exactly */
    CHECKF(load_text("{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 8, "
                     "\"n_layer\": 4096, \"n_head\": 2, \"n_positions\": 16}", &c, &err) == 0,
           "%s", err.msg);
    /* per layer 2*8 + 8*24+24 + 8*8+8 + 2*8 + 8*32+32 + 32*8+8 = 872; plus 100*8 + 16*8 + 16 */
    CHECKF(rc_config_param_count(&c) == 4096LL * 872 + 800 + 128 + 16, "%lld",
           (long long)rc_config_param_count(&c));
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--dump") == 0)
        return mode_dump(argv[2]);
    if (argc == 4 && strcmp(argv[1], "--save") == 0)
        return mode_save(argv[2], argv[3]);
    if (argc == 2 && strcmp(argv[1], "--presets") == 0) {
        for (const char *const *n = rc_config_preset_names(); *n; n++)
            printf("%s\n", *n);
        return 0;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: test_config [--dump PATH | --save PRESET DIR | --presets]\n");
        return 2;
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/redco_cfg_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_gpt2();
    test_llama();
    test_opt();
    test_gptj();
    test_t5();
    test_errors();
    test_sizes();
    test_save();
    test_presets();
    check_rm_tree(tmpdir);
    return check_summary("config");
}
