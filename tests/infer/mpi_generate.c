/* mpi_generate.c - generation on model shards: with the model split over every process
 * (mp = world size > 1), each family's greedy, sampled and beam-searched tokens equal the
 * whole model's in one process, every rank returns the same tokens, each rank caches only
 * its key/value heads (kv_heads / mp when they divide; GQA heads that do not divide stay
 * whole, as the plan replicates their projections) and holds shards of the weights. With
 * --dump PATH, rank 0 writes the tokens so that runs without a launcher and under mpiexec
 * -n 1, 2, 4 are compared with each other, exactly (CTest mpi_generate_launcher). Then the
 * same with bf16 weights (a bf16 cache, 16-bit model-axis sums): every rank returns the same
 * tokens and caches and holds its share, but the tokens are not compared with the whole
 * model's: a shard rounds its partial sums to bf16 before they are added, which moves
 * logits by bf16 ulps and changes sampled (and near-tied greedy) tokens. */
#include "check.h"
#include "redco/predict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NP = 5, NEW = 8 };

/* the tokens of one request; *stats filled */
static int32_t *generate(rc_model *m, rc_deployer *d, const int32_t *prompt, double temp, int beams,
                         int64_t *n, rc_generate_stats *stats, const char *what)
{
    rc_error err = {0};
    rc_generate_options o = rc_generate_defaults(m);
    o.max_new_tokens = NEW;
    o.eos_id = -1; /* the whole length: every step compared */
    o.temperature = temp;
    o.top_k = temp > 0 ? 20 : 0;
    o.seed = 7;
    o.num_beams = beams;
    o.deployer = d;
    o.stats = stats;
    int32_t *out = NULL;
    CHECKF(rc_generate(m, prompt, NP, &o, &out, n, &err) == 0, "%s: %s", what, err.msg);
    return out;
}

static void check_family(const char *preset, rc_dtype dtype, rc_deployer *d, check_weights *dumped)
{
    const rc_mesh *mesh = rc_deployer_mesh(d);
    int mp = mesh->mp;
    rc_error err = {0};
    rc_model *m = rc_model_create(preset, 3, &err);
    CHECKF(m && rc_model_to_dtype(m, dtype, &err) == 0, "%s %s: %s", preset, rc_dtype_name(dtype), err.msg);
    if (!m)
        return;
    int64_t weight_bytes = rc_params_numel(m->params) * (int64_t)rc_dtype_size(dtype);
    int32_t prompt[NP] = {5, 17, 42, 9, 100};
    const double temps[3] = {0, 0.8, 0};
    const int beams[3] = {1, 1, 3};
    const char *kinds[3] = {"greedy", "sampling", "beam search"};
    int t5 = m->config.type == RC_MODEL_T5;
    int64_t kv = m->config.n_kv_head > 0 ? m->config.n_kv_head : m->config.n_head;
    for (int k = 0; k < 3; k++) {
        char what[96];
        snprintf(what, sizeof what, "%s %s %s on %d shards", preset, rc_dtype_name(dtype), kinds[k], mp);
        int64_t n_whole = 0, n_split = 0;
        rc_generate_stats whole = {0}, split = {0};
        /* on one process the whole model's run would be this same run */
        int32_t *ref = mp > 1 ? generate(m, NULL, prompt, temps[k], beams[k], &n_whole, &whole, what) : NULL;
        int32_t *got = generate(m, d, prompt, temps[k], beams[k], &n_split, &split, what);
        int exact = dtype == RC_F32;
        int same = ref && got && n_whole == n_split && !memcmp(ref, got, (size_t)n_whole * sizeof *ref);
        if (mp > 1 && exact)
            CHECKF(same, "%s: tokens differ from the whole model's", what);
        CHECKF(got && n_split == NEW, "%s: %lld tokens", what, (long long)n_split);
        if (got && mesh->rank == 0 && exact) {
            float ids[NEW];
            for (int64_t i = 0; i < n_split && i < NEW; i++)
                ids[i] = (float)got[i];
            char name[64];
            snprintf(name, sizeof name, "%s %s %s", preset, rc_dtype_name(dtype), kinds[k]);
            CHECK(n_split == NEW && check_weights_add(dumped, "", name, ids, n_split, 0) == 0);
        }
        /* every rank of the group returns the same tokens */
        int32_t first[NEW] = {0};
        memcpy(first, got ? got : first, (size_t)(got ? n_split : 0) * sizeof *first);
        rc_comm_bcast(mesh->mp_comm, first, sizeof first, 0, &err);
        CHECKF(got && !memcmp(first, got, (size_t)n_split * sizeof *got), "%s: rank %d's tokens differ from rank 0's",
               what, mesh->rank);
        if (!t5 && mp > 1) {
            int64_t heads = kv % mp ? kv : kv / mp;
            CHECKF(split.kv_heads == heads && split.cache_bytes * kv == whole.cache_bytes * heads,
                   "%s: %lld heads, %lld cache bytes cached; %lld heads, %lld bytes expected", what,
                   (long long)split.kv_heads, (long long)split.cache_bytes, (long long)heads,
                   (long long)(whole.cache_bytes / kv * heads));
        }
        if (mp > 1)
            CHECKF(split.shard_bytes > 0 && split.shard_bytes < weight_bytes,
                   "%s: %lld bytes of weight shards for %lld bytes of weights", what, (long long)split.shard_bytes,
                   (long long)weight_bytes);
        if (mesh->rank == 0 && k == 0 && mp > 1)
            printf("%-10s %s mp %d: %lld tokens %s the whole model's; cache %lld of %lld bytes (%lld of %lld "
                   "heads), weight shards %lld of %lld bytes\n", preset, rc_dtype_name(dtype), mp, (long long)n_split,
                   same ? "equal" : "differ from (bf16 partial sums)",
                   (long long)split.cache_bytes, (long long)whole.cache_bytes, (long long)split.kv_heads,
                   (long long)whole.kv_heads, (long long)split.shard_bytes, (long long)weight_bytes);
        free(ref);
        free(got);
    }
    rc_model_free(m);
}

int main(int argc, char **argv)
{
    rc_error err = {0};
    rc_dist_init(&argc, &argv, &err);
    rc_mesh world;
    CHECK(rc_mesh_init(&world, 1, &err) == 0);
    int P = world.size, rank = world.rank;
    rc_mesh_free(&world);
    rc_deployer_options o = {.seed = 1, .mp = P};
    rc_deployer *d = rc_deployer_new(NULL, NULL, &o, &err);
    CHECKF(d, "deployer mp %d: %s", P, err.msg);
    const char *dump = check_dump_path(argc, argv);
    if (dump && rank == 0)
        remove(dump); /* a failed run leaves no dump behind */
    check_weights dumped = {0};
    const char *presets[] = {"tiny-gpt2", "tiny-llama", "tiny-opt", "tiny-gptj", "tiny-t5"};
    const rc_dtype dtypes[2] = {RC_F32, RC_BF16};
    for (int t = 0; d && t < 2; t++)
        for (int i = 0; i < 5; i++)
            check_family(presets[i], dtypes[t], d, &dumped);
    rc_deployer_free(d);
    if (dump && rank == 0)
        CHECK(check_weights_save(&dumped, dump) == 0);
    check_weights_free(&dumped);
    char name[64];
    snprintf(name, sizeof name, "mpi_generate rank %d/%d", rank, P);
    int status = check_summary(name);
    rc_dist_finalize();
    return status;
}
