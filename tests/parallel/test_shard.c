/* test_shard.c - the tensor-parallel plan derived from graphs: the split of every
 * parameter of each family, GQA, the padded vocabulary, the error for a shard count that
 * divides nothing, the Megatron communication count, and name / layout independence; the
 * fused attention op keeps its dropout's probability and key on every shard. */
#include "check.h"
#include "nn.h"
#include "redco/shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    rc_graph *g;
    rci_nn_weights w;
    rc_tensor **p;
    rc_tensor *loss;
    rc_model_config c;
} built;

/* the LM loss of a preset, weights never allocated */
static int build(built *b, const char *preset, int64_t B, int64_t T)
{
    rc_error err = {0};
    memset(b, 0, sizeof *b);
    if (rc_config_preset(preset, &b->c, &err) || rci_nn_model_weights(&b->c, &b->w, &err))
        return -1;
    b->g = rc_graph_new();
    b->p = calloc((size_t)b->w.n, sizeof *b->p);
    rci_nn_model_leaves(b->g, &b->w, b->p);
    rc_tensor *ids = rc_input(b->g, "ids", RC_I32, 2, (int64_t[]){B, T});
    rc_tensor *tg = rc_input(b->g, "targets", RC_I32, 2, (int64_t[]){B, T});
    rci_nn_inputs in = {.ids = ids};
    if (b->c.type == RC_MODEL_T5)
        in.enc_ids = rc_input(b->g, "enc_ids", RC_I32, 2, (int64_t[]){B, T});
    b->loss = rc_cross_entropy(b->g, rci_nn_model_logits(b->g, &b->c, &b->w, b->p, &in), tg, -100);
    return rc_graph_error(b->g) ? -1 : 0;
}

static void unbuild(built *b)
{
    rc_graph_free(b->g);
    free(b->p);
    rci_nn_weights_free(&b->w);
}

static const rc_shard_spec *spec_of(const built *b, const rc_shard_spec *s, const char *name)
{
    int i = rci_nn_weights_find(&b->w, name);
    return i >= 0 ? &s[i] : NULL;
}

/* checks parameter `name` is split as given */
static void expect(const built *b, const rc_shard_spec *s, const char *name, rc_shard_role role, int axis,
                   int64_t outer, int64_t groups, int64_t inner)
{
    const rc_shard_spec *x = spec_of(b, s, name);
    CHECKF(x && x->role == role && x->axis == axis && (axis < 0 || (x->outer == outer &&
           x->groups == groups && x->inner == inner)),
           "%s: %s axis %d [%lld, %lld, %lld], want %s axis %d [%lld, %lld, %lld]", name,
           x ? rc_shard_role_name(x->role) : "missing", x ? x->axis : -9, x ? (long long)x->outer : 0,
           x ? (long long)x->groups : 0, x ? (long long)x->inner : 0, rc_shard_role_name(role), axis,
           (long long)outer, (long long)groups, (long long)inner);
}

static void test_gpt2(void)
{
    built b;
    CHECK(build(&b, "tiny-gpt2", 2, 8) == 0);
    rc_shard_spec *s = calloc((size_t)b.w.n, sizeof *s);
    rc_shard_comm comm;
    rc_error err = {0};
    CHECKF(rc_shard_plan(b.g, b.loss, b.p, b.w.n, 2, 0, s, &comm, &err) == 0, "%s", err.msg);
    int64_t C = b.c.d_model, H = b.c.n_head, D = C / H, F = b.c.d_ff;
    for (int l = 0; l < b.c.n_layer; l++) {
        char n[96];
        snprintf(n, sizeof n, "transformer.h.%d.attn.c_attn.weight", l);
        expect(&b, s, n, RC_SHARD_COLUMN, 1, 3, H, D); /* whole heads of q, k and v */
        snprintf(n, sizeof n, "transformer.h.%d.attn.c_attn.bias", l);
        expect(&b, s, n, RC_SHARD_BIAS, 0, 3, H, D);
        snprintf(n, sizeof n, "transformer.h.%d.attn.c_proj.weight", l);
        expect(&b, s, n, RC_SHARD_ROW, 0, 1, H, D);
        snprintf(n, sizeof n, "transformer.h.%d.attn.c_proj.bias", l);
        expect(&b, s, n, RC_SHARD_REPLICATED, -1, 0, 0, 0);
        snprintf(n, sizeof n, "transformer.h.%d.mlp.c_fc.weight", l);
        expect(&b, s, n, RC_SHARD_COLUMN, 1, 1, F, 1);
        snprintf(n, sizeof n, "transformer.h.%d.mlp.c_fc.bias", l);
        expect(&b, s, n, RC_SHARD_BIAS, 0, 1, F, 1);
        snprintf(n, sizeof n, "transformer.h.%d.mlp.c_proj.weight", l);
        expect(&b, s, n, RC_SHARD_ROW, 0, 1, F, 1);
        snprintf(n, sizeof n, "transformer.h.%d.ln_1.weight", l);
        expect(&b, s, n, RC_SHARD_REPLICATED, -1, 0, 0, 0);
    }
    expect(&b, s, "transformer.wte.weight", RC_SHARD_VOCAB, 0, 1, b.c.vocab_size, 1);
    expect(&b, s, "transformer.wpe.weight", RC_SHARD_REPLICATED, -1, 0, 0, 0); /* looked up by positions */
    /* Megatron: 2 all-reduces per layer forward (+ the embedding and 3 for the loss), 2 backward
     * per layer (+ the head's input) */
    CHECKF(comm.allreduce_fwd == 2 * b.c.n_layer + 1 + 3 && comm.allreduce_bwd == 2 * b.c.n_layer + 1 &&
           comm.allgather_fwd == 0, "fwd %lld bwd %lld gathers %lld", (long long)comm.allreduce_fwd,
           (long long)comm.allreduce_bwd, (long long)comm.allgather_fwd);
    /* 3 shards divide neither the 4 heads nor the features of the blocks */
    err = (rc_error){0};
    CHECK(rc_shard_plan(b.g, b.loss, b.p, b.w.n, 3, 0, s, &comm, &err) == -1);
    CHECKF(check_has(err.msg, "3 model shards do not divide") && check_has(err.msg, "c_attn.weight") &&
           check_has(err.msg, "would: 1, 2, 4"), "%s", err.msg);
    /* unless replication is allowed: then it says so per weight */
    CHECK(rc_shard_plan(b.g, b.loss, b.p, b.w.n, 3, 1, s, &comm, &err) == 0);
    const rc_shard_spec *qkv = spec_of(&b, s, "transformer.h.0.attn.c_attn.weight");
    CHECKF(qkv && qkv->role == RC_SHARD_REPLICATED && check_has(qkv->note, "replicated"), "%s", qkv ? qkv->note : "");
    free(s);
    unbuild(&b);
}

static void test_llama_gqa(void)
{
    built b;
    CHECK(build(&b, "tiny-llama", 2, 8) == 0);
    rc_shard_spec *s = calloc((size_t)b.w.n, sizeof *s);
    rc_shard_comm comm;
    rc_error err = {0};
    int64_t D = b.c.head_dim, H = b.c.n_head, KV = b.c.n_kv_head, F = b.c.d_ff;
    CHECKF(rc_shard_plan(b.g, b.loss, b.p, b.w.n, 2, 0, s, &comm, &err) == 0, "%s", err.msg);
    expect(&b, s, "model.layers.0.self_attn.q_proj.weight", RC_SHARD_COLUMN, 0, 1, H, D);
    expect(&b, s, "model.layers.0.self_attn.k_proj.weight", RC_SHARD_COLUMN, 0, 1, KV, D);
    expect(&b, s, "model.layers.0.self_attn.v_proj.weight", RC_SHARD_COLUMN, 0, 1, KV, D);
    expect(&b, s, "model.layers.0.self_attn.o_proj.weight", RC_SHARD_ROW, 1, 1, H, D);
    expect(&b, s, "model.layers.0.mlp.gate_proj.weight", RC_SHARD_COLUMN, 0, 1, F, 1);
    expect(&b, s, "model.layers.0.mlp.up_proj.weight", RC_SHARD_COLUMN, 0, 1, F, 1);
    expect(&b, s, "model.layers.0.mlp.down_proj.weight", RC_SHARD_ROW, 1, 1, F, 1);
    expect(&b, s, "model.embed_tokens.weight", RC_SHARD_VOCAB, 0, 1, b.c.vocab_size, 1);
    expect(&b, s, "model.norm.weight", RC_SHARD_REPLICATED, -1, 0, 0, 0);
    /* 4 shards: 2 key/value heads do not divide, so k and v are replicated with a note */
    CHECKF(rc_shard_plan(b.g, b.loss, b.p, b.w.n, 4, 0, s, &comm, &err) == 0, "%s", err.msg);
    expect(&b, s, "model.layers.0.self_attn.q_proj.weight", RC_SHARD_COLUMN, 0, 1, H, D);
    const rc_shard_spec *k = spec_of(&b, s, "model.layers.0.self_attn.k_proj.weight");
    CHECKF(k && k->role == RC_SHARD_REPLICATED && check_has(k->note, "key/value"), "%s", k ? k->note : "");
    free(s);
    unbuild(&b);
}

/* every family plans with 2 shards with no gathers, and the counts follow Megatron */
static void test_families(void)
{
    const char *presets[] = {"tiny-gpt2", "tiny-llama", "tiny-opt", "tiny-gptj", "tiny-t5"};
    for (int f = 0; f < 5; f++) {
        built b;
        CHECKF(build(&b, presets[f], 2, 8) == 0, "%s", presets[f]);
        rc_shard_spec *s = calloc((size_t)b.w.n, sizeof *s);
        rc_shard_comm comm = {0};
        rc_error err = {0};
        CHECKF(rc_shard_plan(b.g, b.loss, b.p, b.w.n, 2, 0, s, &comm, &err) == 0, "%s: %s", presets[f], err.msg);
        int split = 0;
        for (int i = 0; i < b.w.n; i++)
            split += s[i].role != RC_SHARD_REPLICATED;
        int layers = b.c.n_layer + (b.c.type == RC_MODEL_T5 ? b.c.n_decoder_layer : 0);
        int sublayers = b.c.type == RC_MODEL_T5 ? 2 * b.c.n_layer + 3 * b.c.n_decoder_layer : 2 * layers;
        printf("%-10s %d of %d parameters split; all-reduces per step: %lld forward, %lld backward\n",
               presets[f], split, b.w.n, (long long)comm.allreduce_fwd, (long long)comm.allreduce_bwd);
        CHECKF(comm.allgather_fwd == 0, "%s: %lld gathers", presets[f], (long long)comm.allgather_fwd);
        /* GPT-J's attention and MLP read the same normalised input: one backward all-reduce
         * serves both */
        int bwd = b.c.type == RC_MODEL_GPTJ ? layers : sublayers;
        CHECKF(comm.allreduce_fwd >= sublayers && comm.allreduce_bwd >= bwd, "%s: %lld / %lld for %d sublayers",
               presets[f], (long long)comm.allreduce_fwd, (long long)comm.allreduce_bwd, sublayers);
        free(s);
        unbuild(&b);
    }
}

/* GPT-2's vocabulary of 50257 does not divide by 2: padded, never replicated */
static void test_vocab_padding(void)
{
    built b;
    CHECK(build(&b, "gpt2", 1, 4) == 0);
    rc_shard_spec *s = calloc((size_t)b.w.n, sizeof *s);
    rc_error err = {0};
    CHECKF(rc_shard_plan(b.g, b.loss, b.p, b.w.n, 2, 0, s, NULL, &err) == 0, "%s", err.msg);
    const rc_shard_spec *wte = spec_of(&b, s, "transformer.wte.weight");
    int64_t local[4];
    rc_shard_local_shape(wte, b.p[rci_nn_weights_find(&b.w, "transformer.wte.weight")], 2, local);
    CHECKF(wte && wte->role == RC_SHARD_VOCAB && wte->padded_groups == 50258 && local[0] == 25129,
           "wte: %s padded %lld local %lld", wte ? rc_shard_role_name(wte->role) : "?",
           wte ? (long long)wte->padded_groups : 0, (long long)local[0]);
    free(s);
    unbuild(&b);
}

/* a user-written block: the same plan whatever the names and the weight layouts */
static void user_block(rc_graph *g, int out_in, const char *const *names, rc_tensor **p, rc_tensor **loss)
{
    enum { B = 2, T = 4, C = 8, H = 2, F = 16 };
    int64_t qkv[2] = {C, 3 * C}, proj[2] = {C, C}, up[2] = {C, F}, down[2] = {F, C};
    const int64_t *shapes[4] = {qkv, proj, up, down};
    for (int i = 0; i < 4; i++) {
        int64_t s[2] = {shapes[i][out_in], shapes[i][!out_in]};
        p[i] = rc_param(g, names[i], RC_F32, 2, s);
    }
    rc_tensor *x = rc_input(g, "x", RC_F32, 3, (int64_t[]){B, T, C});
    rc_tensor *h = rc_reshape(g, rc_matmul(g, x, p[0], 0, out_in), 5, (int64_t[]){B, T, 3, H, C / H});
    h = rc_permute(g, h, (int[]){2, 0, 3, 1, 4});
    rc_tensor *q = rc_reshape(g, rc_slice(g, h, 0, 0, 1), 4, (int64_t[]){B, H, T, C / H});
    rc_tensor *k = rc_reshape(g, rc_slice(g, h, 0, 1, 2), 4, (int64_t[]){B, H, T, C / H});
    rc_tensor *v = rc_reshape(g, rc_slice(g, h, 0, 2, 3), 4, (int64_t[]){B, H, T, C / H});
    rc_tensor *a = rc_matmul(g, rc_softmax_ext(g, rc_matmul(g, q, k, 0, 1), NULL, 0.5, 1), v, 0, 0);
    a = rc_reshape(g, rc_permute(g, a, (int[]){0, 2, 1, 3}), 3, (int64_t[]){B, T, C});
    x = rc_add(g, x, rc_matmul(g, a, p[1], 0, out_in));
    x = rc_add(g, x, rc_matmul(g, rc_relu(g, rc_matmul(g, x, p[2], 0, out_in)), p[3], 0, out_in));
    *loss = rc_mean_all(g, rc_mul(g, x, x));
}

/* overrides: followed as given, the rest of the plan fitted around them; bad ones refused */
static void test_overrides(void)
{
    built b;
    CHECK(build(&b, "tiny-gpt2", 2, 8) == 0);
    rc_shard_spec *s = calloc((size_t)b.w.n, sizeof *s);
    rc_shard_comm comm;
    rc_error err = {0};
    const rc_shard_override ov[] = {{"transformer.h.0.mlp.c_fc.weight", -1, 0},
                                    {"transformer.h.0.attn.c_attn.weight", 1, 6}, /* q, k, v in 3 x 2 */
                                    {"transformer.h.1.mlp.c_proj.weight", 1, 0}};
    CHECKF(rc_shard_apply(s, b.p, b.w.n, ov, 3, 2, &err) == 0, "%s", err.msg);
    CHECKF(rc_shard_plan(b.g, b.loss, b.p, b.w.n, 2, 0, s, &comm, &err) == 0, "%s", err.msg);
    int64_t C = b.c.d_model;
    expect(&b, s, "transformer.h.0.mlp.c_fc.weight", RC_SHARD_REPLICATED, -1, 0, 0, 0);
    expect(&b, s, "transformer.h.0.attn.c_attn.weight", RC_SHARD_COLUMN, 1, 1, 6, 3 * C / 6);
    expect(&b, s, "transformer.h.1.mlp.c_proj.weight", RC_SHARD_COLUMN, 1, 1, C, 1);
    /* a column split where the rules would split rows: the input is gathered first */
    CHECKF(comm.allgather_fwd > 0, "%lld gathers", (long long)comm.allgather_fwd);
    const rc_shard_override bad[] = {{"no.such.weight", 0, 0}, {"transformer.h.0.mlp.c_fc.weight", 2, 0},
                                     {"transformer.h.0.mlp.c_fc.weight", 1, 3}, {"transformer.h.0.ln_1.weight", 0, 3}};
    const char *why[] = {"no parameter", "no axis 2", "multiple of 3 groups", "3 groups"};
    for (int i = 0; i < 4; i++) {
        memset(s, 0, (size_t)b.w.n * sizeof *s);
        err = (rc_error){0};
        CHECKF(rc_shard_apply(s, b.p, b.w.n, &bad[i], 1, 2, &err) == -1 && check_has(err.msg, why[i]),
               "override %d: %s", i, err.msg);
    }
    free(s);
    unbuild(&b);
}

static void test_names_and_layouts(void)
{
    const char *hf[4] = {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"};
    const char *odd[4] = {"zz_last", "aa_first", "dense", "dense_2"}; /* names that say nothing */
    rc_shard_spec s[4][4];
    memset(s, 0, sizeof s);
    for (int v = 0; v < 4; v++) {
        rc_graph *g = rc_graph_new();
        rc_tensor *p[4], *loss;
        user_block(g, v & 1, v & 2 ? odd : hf, p, &loss);
        rc_error err = {0};
        CHECKF(rc_shard_plan(g, loss, p, 4, 2, 0, s[v], NULL, &err) == 0, "%s", err.msg);
        rc_graph_free(g);
    }
    for (int v = 1; v < 4; v++)
        for (int i = 0; i < 4; i++) {
            /* the same role and groups; the split axis is the out (or in) features of each layout */
            int flip = (v & 1) != 0;
            int want_axis = s[0][i].axis < 0 ? -1 : flip ? 1 - s[0][i].axis : s[0][i].axis;
            CHECKF(s[v][i].role == s[0][i].role && s[v][i].axis == want_axis && s[v][i].outer == s[0][i].outer &&
                   s[v][i].groups == s[0][i].groups && s[v][i].inner == s[0][i].inner,
                   "variant %d weight %d: %s axis %d vs %s axis %d", v, i, rc_shard_role_name(s[v][i].role),
                   s[v][i].axis, rc_shard_role_name(s[0][i].role), s[0][i].axis);
        }
    CHECK(s[0][0].role == RC_SHARD_COLUMN && s[0][0].groups == 2 && s[0][0].outer == 3);
    CHECK(s[0][1].role == RC_SHARD_ROW && s[0][2].role == RC_SHARD_COLUMN && s[0][3].role == RC_SHARD_ROW);
}

/* the fused attention op with dropout, partitioned: every local ATTENTION keeps the
 * probability; its key is the shard's own (its mask drawn by local index over its heads,
 * as a DROPOUT's of a split tensor under the partition), so the shards' masks are not
 * copies of one another: keys[rank][layer] differ across ranks and layers, and a rank's
 * partition gives the same keys again */
static void test_attention_dropout(void)
{
    built b;
    rc_set_fused_attention(1);
    CHECK(build(&b, "tiny-gpt2", 2, 8) == 0);
    rc_set_fused_attention(0);
    int n = 0;
    for (int i = 0; i < rc_graph_size(b.g); i++) {
        rc_tensor *t = rc_graph_node(b.g, i);
        if (t->op != RC_OP_ATTENTION)
            continue;
        t->fparam[1] = 0.25; /* as rc_attention with dropout would store it */
        t->iparam[2] = 12345 + n;
        t->iparam[3] = -7;
        n++;
    }
    CHECKF(n == b.c.n_layer && n <= 8, "%d fused attention nodes for %d layers", n, (int)b.c.n_layer);
    int64_t keys[3][8] = {{0}};
    for (int pass = 0; pass < 3; pass++) { /* ranks 0, 1, then 0 again */
        rc_shard_spec *s = calloc((size_t)b.w.n, sizeof *s);
        rc_shard_graph sg;
        rc_error err = {0};
        CHECKF(rc_shard_partition(b.g, b.loss, b.p, b.w.n, 2, pass & 1, 0, s, &sg, &err) == 0, "%s", err.msg);
        int local = 0;
        for (int i = 0; !err.msg[0] && i < rc_graph_size(sg.g); i++) {
            const rc_tensor *t = rc_graph_node(sg.g, i);
            if (t->op != RC_OP_ATTENTION)
                continue;
            CHECKF(t->fparam[1] == 0.25, "local attention %d: dropout %g", local, t->fparam[1]);
            if (local < 8)
                keys[pass][local] = (int64_t)((uint64_t)(uint32_t)t->iparam[2] | (uint64_t)(uint32_t)t->iparam[3] << 32);
            local++;
        }
        CHECKF(err.msg[0] || local == n, "%d local fused attention nodes for %d", local, n);
        if (!err.msg[0])
            rc_shard_graph_free(&sg);
        free(s);
    }
    for (int l = 0; l < n && l < 8; l++) {
        int64_t global = (int64_t)((uint64_t)(uint32_t)(12345 + l) | (uint64_t)(uint32_t)-7 << 32);
        CHECKF(keys[0][l] != keys[1][l] && keys[0][l] != global && keys[1][l] != global,
               "layer %d: the shards' attention keys %lld, %lld (global %lld)", l, (long long)keys[0][l],
               (long long)keys[1][l], (long long)global);
        CHECKF(keys[2][l] == keys[0][l], "layer %d: rank 0's key %lld, then %lld", l, (long long)keys[0][l],
               (long long)keys[2][l]);
        CHECKF(l == 0 || keys[0][l] != keys[0][l - 1], "layers %d and %d share a key", l - 1, l);
    }
    unbuild(&b);
}

int main(void)
{
    test_gpt2();
    test_llama_gqa();
    test_families();
    test_vocab_padding();
    test_names_and_layouts();
    test_overrides();
    test_attention_dropout();
    return check_summary("test_shard");
}
