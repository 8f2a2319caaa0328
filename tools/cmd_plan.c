/* cmd_plan.c - `redco plan`: the tensor-parallel plan of a model, without allocating its
 * weights: each parameter's split, the memory of one rank, the collectives of one step. */
#include "cli.h"
#include "redco/device.h"
#include "redco/memory.h"
#include "redco/shard.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *help =
    "usage: redco plan --model PRESET|DIR --mp N [--dp N] [--batch-size B] [--seq-len T]\n"
    "                  [--shard NAME=AXIS[:GROUPS]|NAME=replicated ...] [--allow-replicate]\n"
    "                  [--zero [1|2|3]] [--remat[=N]] [--no-dropout] [--dtype f32|bf16|f16] [--memory SIZE]\n"
    "                  [--attention fused|products|unfused] [--device D] [--ranks-per-host N] [--json]\n"
    "\n"
    "Derives from the model's graph how each parameter splits over N model shards (whole\n"
    "heads for attention, alternating column/row splits for linear chains, the vocabulary\n"
    "for embeddings and heads) and prints each parameter's shape, split and local shape; the\n"
    "memory of one rank as the trainer allocates it: weights, gradients (its f32 accumulation\n"
    "and the step's own gradient outputs), AdamW moments, f32 master weights (16-bit\n"
    "dtypes) and activations (the step's planned arena less its gradient outputs, on model\n"
    "shard 0's graph); and the collectives of one training step (model axis: all-reduces\n"
    "of partial sums forward and of input gradients backward; data axis: the gradient\n"
    "all-reduce, or ZeRO's collectives) with the bytes each process sends per step (ring\n"
    "collectives, one micro-batch). No weight is allocated: large presets plan in well under\n"
    "a second.\n"
    "A shard count that divides nothing is an error naming the tensors and the counts that\n"
    "would work; --allow-replicate keeps those weights whole instead, noted per weight.\n"
    "--shard overrides one parameter's split (repeatable): split axis AXIS into GROUPS runs\n"
    "(default: its extent), or keep it replicated; the rest of the plan fits around it.\n"
    "--device D (cpu, opencl, opencl:N, cuda, cuda:N) also says whether one rank's memory\n"
    "fits the device's memory and which of the step's ops the device has no kernel for.\n"
    "--zero (stage 1): each data-parallel rank keeps a 1/dp share of the optimizer state\n"
    "(and master weights); per step the f32 gradients are reduce-scattered and the updated\n"
    "weights all-gathered in their dtype. --zero 2: the f32 gradients are a 1/dp share too\n"
    "(plus a reduce-scatter window of at most 4 MiB); the same collectives. --zero 3 (mp 1\n"
    "only): the weights are a 1/dp share too; the step gathers each layer (a --remat block,\n"
    "else runs of parameters up to the largest one) into slots that hold a few of the largest\n"
    "layers at once, forward and again backward, and reduce-scatters each layer's gradients\n"
    "as soon as they are complete. A preset's random weights are whole until the shares are\n"
    "taken and come back whole when training ends (shown beside the total); a model directory\n"
    "is read in parts (each rank its shards or share) and left in the workdir's final/ when\n"
    "training ends, so no rank holds it whole. --remat[=N]: every N-th transformer block\n"
    "recomputed in the backward pass (default 1). --no-dropout: the step without the model's\n"
    "dropout, as `redco train --no-dropout` (by default the step drops as training does).\n"
    "--dtype bf16|f16: 16-bit weights and activations with f32 master weights, as `redco\n"
    "train --dtype` (the step's graph recorded in that dtype). --attention unfused:\n"
    "attention as product, softmax, product, as `redco train --attention unfused` (every\n"
    "layer's [T, T] probabilities among the activations); --attention products: with\n"
    "--device cuda, bf16 attention from products over scratch, not in tiles. --memory SIZE\n"
    "(80GB = 80e9 bytes, 24GiB = 24 x 2^30, 512MiB): whether one rank fits, and the largest\n"
    "preset of the model's family that fits under the same mesh and options.\n"
    "--ranks-per-host N: how the mesh lies on hosts of N ranks each (mpiexec and Slurm place\n"
    "ranks in order, N a host), whether each axis' groups stay inside a host, and the bytes\n"
    "of one step that cross the network (each group's collective counted as a ring).\n";

typedef struct {
    const char *model, *device, *memory_text;
    int64_t mp, dp, batch, seq_len, remat, memory, per_host;
    int allow, json, zero, unfused, no_dropout;
    rc_dtype dtype;
    cli_shards shards;
} options;

enum { F_MODEL = CLI_FLAG0, F_MP, F_DP, F_BATCH, F_SEQ_LEN, F_SHARD, F_ALLOW_REPLICATE, F_JSON, F_DEVICE,
       F_ZERO, F_REMAT, F_DTYPE, F_MEMORY, F_PER_HOST, F_ATTENTION, F_NO_DROPOUT };

static const struct option flags[] = {
    {"help", no_argument, NULL, CLI_HELP},
    {"model", required_argument, NULL, F_MODEL},
    {"mp", required_argument, NULL, F_MP},
    {"dp", required_argument, NULL, F_DP},
    {"batch-size", required_argument, NULL, F_BATCH},
    {"seq-len", required_argument, NULL, F_SEQ_LEN},
    {"shard", required_argument, NULL, F_SHARD},
    {"allow-replicate", no_argument, NULL, F_ALLOW_REPLICATE},
    {"json", no_argument, NULL, F_JSON},
    {"device", required_argument, NULL, F_DEVICE},
    {"zero", optional_argument, NULL, F_ZERO},
    {"remat", optional_argument, NULL, F_REMAT},
    {"no-dropout", no_argument, NULL, F_NO_DROPOUT},
    {"dtype", required_argument, NULL, F_DTYPE},
    {"attention", required_argument, NULL, F_ATTENTION},
    {"memory", required_argument, NULL, F_MEMORY},
    {"ranks-per-host", required_argument, NULL, F_PER_HOST},
    {NULL, 0, NULL, 0},
};

/* --dtype's value; RC_DTYPE_COUNT when it is none of f32, bf16, f16 */
static rc_dtype weight_dtype(const char *v)
{
    if (!strcmp(v, "f32"))
        return RC_F32;
    if (!strcmp(v, "bf16"))
        return RC_BF16;
    return !strcmp(v, "f16") ? RC_F16 : RC_DTYPE_COUNT;
}

/* Reads one flag into o; 0, or 2 after a usage error. */
static int take_flag(const char *cmd, int c, const cli_args *a, void *user)
{
    options *o = user;
    const char *f = a->flag, *v = a->value;
    switch (c) {
    case F_MODEL: o->model = v; return 0;
    case F_DEVICE: o->device = v; return 0;
    case F_ALLOW_REPLICATE: o->allow = 1; return 0;
    case F_JSON: o->json = 1; return 0;
    case F_NO_DROPOUT: o->no_dropout = 1; return 0;
    case F_MP: return cli_int64(cmd, f, v, 1, 1 << 16, &o->mp);
    case F_DP: return cli_int64(cmd, f, v, 1, 1 << 16, &o->dp);
    case F_BATCH: return cli_int64(cmd, f, v, 1, 1 << 16, &o->batch);
    case F_PER_HOST: return cli_int64(cmd, f, v, 1, 1 << 16, &o->per_host);
    case F_SEQ_LEN: return cli_int64(cmd, f, v, 1, 1 << 20, &o->seq_len);
    case F_SHARD: return cli_shard(cmd, v, &o->shards);
    case F_ZERO: return cli_zero(cmd, v, &o->zero);
    case F_REMAT: return v ? cli_int64(cmd, f, v, 1, 1 << 16, &o->remat) : (o->remat = 1, 0);
    case F_ATTENTION: o->unfused = !strcmp(v, "unfused"); return cli_attention(cmd, v);
    case F_DTYPE:
        o->dtype = weight_dtype(v);
        return o->dtype == RC_DTYPE_COUNT ? cli_usage(cmd, "--dtype '%s': f32, bf16 or f16", v) : 0;
    case F_MEMORY: {
        rc_error err = {0};
        o->memory_text = v;
        return rc_memory_parse(v, &o->memory, &err) ? cli_usage(cmd, "--memory: %s", err.msg) : 0;
    }
    default: /* CLI_ARG */ return cli_usage(cmd, "unexpected argument '%s'", v);
    }
}

/* 0, -1 after --help, or the exit status of a bad flag */
static int parse(int argc, char **argv, options *o)
{
    const char *cmd = "plan";
    *o = (options){.mp = 1, .dp = 1, .batch = 1, .seq_len = 64};
    int rc = cli_parse(cmd, argc, argv, flags, help, take_flag, o);
    if (rc)
        return rc;
    if (!o->model)
        return cli_usage(cmd, "--model is required");
    return 0;
}

/* config only: a preset, or DIR/config.json (the weights are never read) */
typedef struct {
    rc_graph *g;
    rc_model_graph m;             /* the parameter leaves, never allocated */
    rc_tensor *loss;
} model_graph;

/* the loss of one replica's batch, with unbound (never allocated) parameters */
static int build(const rc_model_config *c, const options *o, model_graph *m, rc_error *err)
{
    memset(m, 0, sizeof *m);
    if (!(m->g = rc_graph_new()))
        return rc_error_set(err, RC_ERR_MEMORY, "plan: out of memory");
    int64_t shape[2] = {o->batch, o->seq_len};
    rc_tensor *ids = rc_input(m->g, "ids", RC_I32, 2, shape), *enc_ids = NULL;
    if (c->type == RC_MODEL_T5)
        enc_ids = rc_input(m->g, "enc_ids", RC_I32, 2, shape);
    rc_tensor *tg = rc_input(m->g, "targets", RC_I32, 2, shape);
    if (rc_model_record(m->g, c, RC_F32, ids, enc_ids, NULL, &m->m, err))
        return -1;
    m->loss = rc_cross_entropy(m->g, m->m.logits, tg, -100);
    if (rc_graph_error(m->g))
        return rc_error_set(err, rc_graph_error_code(m->g), "%s", rc_graph_error(m->g));
    return 0;
}

static void free_graph(model_graph *m)
{
    rc_model_graph_free(&m->m);
    rc_graph_free(m->g);
}

static void shape_text(int ndim, const int64_t *shape, char *buf, size_t size)
{
    rc_tensor t = {.ndim = ndim};
    for (int i = 0; i < ndim; i++)
        t.shape[i] = shape[i];
    rc_shape_str(&t, buf, size);
}

/* the memory of one rank, and with --memory the largest preset of the family that fits */
typedef struct {
    rc_memory_options opt;
    rc_rank_memory rank;
    const char *largest;          /* NULL: none fits (or no --memory) */
    rc_rank_memory largest_rank;
} memory;

/* --device: one rank's memory against the device's, and the step's ops it lacks */
typedef struct {
    rc_backend *be;               /* NULL: no --device */
    double need;                  /* the rank's total (and any full copy while sharding) */
    char missing[512];            /* "op dtype, ..." the device has no kernel for */
} device_fit;

/* every op of g (the step with its backward pass) the device lacks, once each */
static void device_check(device_fit *d, const rc_graph *g, const memory *mem)
{
    int seen[RC_OP_COUNT][RC_DTYPE_COUNT] = {{0}};
    d->need = (double)(mem->rank.total + mem->rank.full_copy);
    for (int i = 0; i < rc_graph_size(g); i++) {
        const rc_tensor *t = rc_graph_node(g, i);
        if (t->op == RC_OP_MP_REDUCE || t->op == RC_OP_MP_MAX || seen[t->op][t->dtype] ||
            rc_backend_supports(d->be, t->op, t->dtype))
            continue;
        seen[t->op][t->dtype] = 1;
        size_t n = strlen(d->missing);
        snprintf(d->missing + n, sizeof d->missing - n, "%s%s %s", n ? ", " : "", rc_op_name(t->op),
                 rc_dtype_name(t->dtype));
    }
}

/* "fits", "does not fit" or "unknown" (a device that does not say its memory) */
static const char *fit_word(const device_fit *d)
{
    size_t total;
    rc_backend_memory(d->be, &total, NULL, NULL);
    return !total ? "unknown" : d->need <= (double)total ? "fits" : "does not fit";
}

/* "1.52 GiB", "3.1 MiB" */
static const char *bytes_text(double b, char *buf, size_t size)
{
    if (b >= (double)(1 << 30))
        snprintf(buf, size, "%.2f GiB", b / (1 << 30));
    else
        snprintf(buf, size, "%.1f MiB", b / (1 << 20));
    return buf;
}

/* the options the memory figures assume, in words: "f32, remat every 2 blocks, zero over dp 4" */
static void options_text(const options *o, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s weights, AdamW", rc_dtype_name(o->dtype));
    if (o->unfused)
        n += snprintf(buf + n, size - (size_t)n, ", unfused attention");
    else if (!rc_get_tiled_attention())
        n += snprintf(buf + n, size - (size_t)n, ", attention from products");
    if (o->remat)
        n += snprintf(buf + n, size - (size_t)n, ", remat every %lld block%s", (long long)o->remat,
                      o->remat > 1 ? "s" : "");
    if (o->no_dropout)
        n += snprintf(buf + n, size - (size_t)n, ", no dropout");
    if (o->zero)
        snprintf(buf + n, size - (size_t)n, ", zero %d over dp %lld", o->zero, (long long)o->dp);
}

/* zero 2: the reduce-scatters of one micro-batch's gradients, one a window */
static int64_t zero2_windows(const rc_rank_memory *r)
{
    return r->window ? (r->local + r->window - 1) / r->window : 0;
}

/* zero 3: the weights (the share and the gathered slots) and the f32 gradients' share */
static void print_zero3_state(const options *o, const rc_rank_memory *r)
{
    char a[32], b[32], c[32];
    const char *dt = rc_dtype_name(o->dtype);
    int64_t share = r->weights - r->gathered;
    if (share)
        printf("  weights      %10s  the %s share %s (%lld of %lld parameters) + the largest gathered layers %s\n",
               bytes_text((double)r->weights, a, sizeof a), dt, bytes_text((double)share, b, sizeof b),
               (long long)r->share, (long long)r->params, bytes_text((double)r->gathered, c, sizeof c));
    else
        printf("  weights      %10s  the largest gathered layers (the f32 share is the master)\n",
               bytes_text((double)r->weights, a, sizeof a));
    printf("               %10s  %d slots for %d layers of %lld parameters, each gathered in %s from 1/dp shares\n",
           "", r->slots, r->units, (long long)r->local, dt);
    if (r->window)
        printf("  gradients    %10s  the f32 accumulation of a 1/dp share %s + the reduce-scatter's window %s\n",
               bytes_text((double)r->gradients, a, sizeof a), bytes_text(4.0 * (double)r->share, b, sizeof b),
               bytes_text(4.0 * (double)r->window, c, sizeof c));
    else
        printf("  gradients    %10s  the f32 accumulation (dp 1: nothing to reduce-scatter)\n",
               bytes_text((double)r->gradients, a, sizeof a));
}

static void print_memory(const options *o, const memory *mem)
{
    const rc_rank_memory *r = &mem->rank;
    char a[32], b[32], c[32], w[96];
    const char *dt = rc_dtype_name(o->dtype);
    options_text(o, w, sizeof w);
    printf("\nmemory of one rank (%s):\n", w);
    if (o->zero == 3)
        print_zero3_state(o, r);
    else {
        printf("  weights      %10s  %lld of %lld parameters x %zu bytes (%s)\n",
               bytes_text((double)r->weights, a, sizeof a), (long long)r->local, (long long)r->params,
               rc_dtype_size(o->dtype), dt);
        int64_t sum = 4 * (o->zero >= 2 ? r->share + r->window : r->local); /* the f32 accumulation */
        printf("  gradients    %10s  the f32 accumulation %s%s + the step's gradient outputs %s\n",
               bytes_text((double)r->gradients, a, sizeof a), bytes_text((double)sum, b, sizeof b),
               o->zero >= 2 && r->window ? " (a 1/dp share and the reduce-scatter's window)" : "",
               bytes_text((double)(r->gradients - sum), c, sizeof c));
    }
    printf("  optimizer    %10s  AdamW m and v in f32 of %lld parameters%s\n",
           bytes_text((double)r->optimizer, a, sizeof a), (long long)r->share, o->zero ? " (a 1/dp share)" : "");
    if (r->master)
        printf("  master       %10s  f32 master weights of %lld parameters%s\n",
               bytes_text((double)r->master, a, sizeof a), (long long)r->share,
               o->zero == 3 && o->dtype == RC_F32 ? " (a 1/dp share: what the layers are gathered from)"
               : o->zero ? " (a 1/dp share)" : "");
    else
        printf("  master       %10s  none: the weights are f32\n", "0");
    if (o->zero == 3)
        printf("  activations  %10s  the step's arena %s (each layer's gradients in it until reduce-scattered), "
               "plus inputs (%s)\n", bytes_text((double)r->activations, a, sizeof a),
               bytes_text((double)r->arena, b, sizeof b), dt);
    else
        printf("  activations  %10s  the step's arena %s less its gradient outputs, plus inputs (%s)\n",
               bytes_text((double)r->activations, a, sizeof a), bytes_text((double)r->arena, b, sizeof b), dt);
    if (r->scratch)
        printf("  scratch      %10s  what the %s's kernels keep between nodes (f32 copies, temporaries)\n",
               bytes_text((double)r->scratch, a, sizeof a), o->device ? o->device : "cpu");
    printf("  total        %10s", bytes_text((double)r->total, a, sizeof a));
    if (r->full_copy && o->zero == 3)
        printf("  + %s while the full %s weights are whole beside the shares (as given, and gathered back when "
               "training ends; peak %s)", bytes_text((double)r->full_copy, b, sizeof b), dt,
               bytes_text((double)(r->total + r->full_copy), c, sizeof c));
    else if (r->full_copy)
        printf("  + the full %s weights %s held while a rank takes its shards (peak %s)", dt,
               bytes_text((double)r->full_copy, b, sizeof b), bytes_text((double)(r->total + r->full_copy), c, sizeof c));
    else if (mem->opt.from_dir && (o->zero == 3 || o->mp > 1))
        printf("  (the peak: %s is read in parts, each rank its %s, and left in final/ when training ends: "
               "no rank holds the whole model)", o->model, o->zero == 3 ? "share" : "shards");
    printf("\n");
    if (!o->memory_text)
        return;
    int64_t need = r->total + r->full_copy;
    printf("\nmemory %s (%s): one rank needs %s: %s\n", o->memory_text, bytes_text((double)o->memory, a, sizeof a),
           bytes_text((double)need, b, sizeof b), need <= o->memory ? "fits" : "does not fit");
    if (mem->largest)
        printf("largest preset of the family that fits (%s, mp %lld x dp %lld, batch %lld x %lld): %s, %lld "
               "parameters, %s per rank\n",
               w, (long long)o->mp, (long long)o->dp, (long long)o->batch, (long long)o->seq_len, mem->largest,
               (long long)mem->largest_rank.params,
               bytes_text((double)(mem->largest_rank.total + mem->largest_rank.full_copy), c, sizeof c));
    else
        printf("largest preset of the family that fits: none (try a larger --mp or --dp with --zero)\n");
}

/* zero 1's reduce-scatters of the mean gradient: pieces of 2^20 floats (the trainer's
 * ZERO2_WINDOW: its messages are far faster than larger ones in Open MPI's shared memory) */
static int64_t zero1_pieces(const rc_rank_memory *r)
{
    return (r->local + (1 << 20) - 1) / (1 << 20);
}

/* the data axis' collectives of a step: the gradients' all-reduce; with zero 1 and 2 their
 * reduce-scatter (zero 2: each micro-batch's, a window at a time) and the updated weights'
 * all-gather; with zero 3 each layer gathered where the step reads it (forward, and
 * backward unless still in its slot) and each layer's gradients reduce-scattered once
 * complete */
static void print_data_axis(const options *o, const rc_rank_memory *r, int64_t buckets)
{
    char a[32], b[32], c[32];
    double wb = (double)rc_dtype_size(o->dtype), grads = 4.0 * (double)r->local;
    const char *dt = rc_dtype_name(o->dtype);
    if (o->dp == 1)
        printf("  data axis   none (dp 1)\n");
    else if (o->zero == 3) {
        printf("  data axis   all-gather layers        %4lld  (%s of %s: %d layers, forward and again backward, "
               "each micro-batch)\n", (long long)r->gathers, bytes_text(wb * (double)r->gathered_elems, a, sizeof a), dt,
               r->units);
        printf("  data axis   reduce-scatter gradients %4d  (%s f32: each layer's once complete, through a window of "
               "%s)\n", r->units, bytes_text(grads, b, sizeof b), bytes_text(4.0 * (double)r->window, c, sizeof c));
    } else if (o->zero) {
        if (o->zero >= 2)
            printf("  data axis   reduce-scatter gradients %4lld  (%.1f MiB in windows of %.1f MiB, each micro-batch)\n",
                   (long long)zero2_windows(r), grads / (1 << 20), 4.0 * (double)r->window / (1 << 20));
        else
            printf("  data axis   reduce-scatter gradients %4lld  (%.1f MiB in pieces of 4 MiB)\n",
                   (long long)zero1_pieces(r), grads / (1 << 20));
        printf("  data axis   all-gather weights       %4lld  (%.1f MiB of %s)\n", (long long)buckets,
               wb * (double)r->local / (1 << 20), dt);
    } else
        printf("  data axis   all-reduce gradients %4lld  (%.1f MiB in buckets of 16 MiB)\n", (long long)buckets,
               grads / (1 << 20));
}

static void print_text(const rc_model_config *c, const options *o, const model_graph *m,
                       const rc_shard_spec *s, const memory *mem, const rc_shard_comm *comm, int64_t buckets,
                       const device_fit *dev, const cli_hosts_traffic *hosts)
{
    printf("%s (%s), %lld parameters, mp %lld x dp %lld, batch %lld x %lld tokens per replica\n\n", o->model,
           c->model_type, (long long)m->m.numel, (long long)o->mp, (long long)o->dp, (long long)o->batch,
           (long long)o->seq_len);
    printf("%-58s %-16s %-10s %4s %-16s %s\n", "parameter", "shape", "split", "axis", "local shape", "note");
    for (int i = 0; i < m->m.n_params; i++) {
        const rc_tensor *p = m->m.params[i];
        char sh[64], loc[64];
        int64_t local[4];
        rc_shard_local_shape(&s[i], p, (int)o->mp, local);
        shape_text(p->ndim, p->shape, sh, sizeof sh);
        shape_text(p->ndim, local, loc, sizeof loc);
        char axis[16] = "-";
        if (s[i].axis >= 0)
            snprintf(axis, sizeof axis, "%d", s[i].axis);
        printf("%-58s %-16s %-10s %4s %-16s %s\n", m->m.names[i], sh, rc_shard_role_name(s[i].role), axis, loc,
               s[i].note);
    }
    print_memory(o, mem);
    char b1[32], b2[32];
    printf("\ncollectives per training step and rank:\n");
    if (o->mp == 1)
        printf("  model axis  none (mp 1)\n");
    else
        printf("  model axis  all-reduce forward   %4lld  (%.1f MiB)\n", (long long)comm->allreduce_fwd,
               comm->bytes_fwd / (1 << 20));
    if (comm->allgather_fwd)
        printf("  model axis  gathers forward      %4lld  (splits an op needed whole)\n",
               (long long)comm->allgather_fwd);
    if (o->mp > 1)
        printf("  model axis  all-reduce backward  %4lld  (%.1f MiB)\n", (long long)comm->allreduce_bwd,
               comm->bytes_bwd / (1 << 20));
    print_data_axis(o, &mem->rank, buckets);
    printf("  data axis   sent per step  %s each process (ring collectives, one micro-batch)\n",
           bytes_text((double)mem->rank.sent, b1, sizeof b1));
    if (hosts->per_host)
        cli_hosts_traffic_print(hosts, o->dp, o->mp);
    if (!dev->be)
        return;
    size_t total;
    rc_backend_memory(dev->be, &total, NULL, NULL);
    printf("\ndevice %s: one rank needs %s of %s: %s%s\n", rc_backend_name(dev->be),
           bytes_text(dev->need, b1, sizeof b1), total ? bytes_text((double)total, b2, sizeof b2) : "unknown memory",
           fit_word(dev), !strcmp(fit_word(dev), "does not fit") ? " (try a larger --mp or a smaller --batch-size)" : "");
    printf("kernels the device lacks: %s\n", dev->missing[0] ? dev->missing : "none");
}

/* the figures of rc_rank_memory as a JSON object */
static json_t *rank_json(const rc_rank_memory *r)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "parameters",
                     (json_int_t)r->params, "local_parameters", (json_int_t)r->local, "optimizer_parameters",
                     (json_int_t)r->share, "weights", (json_int_t)r->weights, "gradients", (json_int_t)r->gradients,
                     "optimizer", (json_int_t)r->optimizer, "master", (json_int_t)r->master, "activations",
                     (json_int_t)r->activations, "arena", (json_int_t)r->arena, "total", (json_int_t)r->total,
                     "full_copy", (json_int_t)r->full_copy, "scratch", (json_int_t)r->scratch, "gradient_window",
                     (json_int_t)r->window, "gathered", (json_int_t)r->gathered, "sent_per_step",
                     (json_int_t)r->sent);
}

static void print_json(const rc_model_config *c, const options *o, const model_graph *m,
                       const rc_shard_spec *s, const memory *mem, const rc_shard_comm *comm, int64_t buckets,
                       const device_fit *dev, const cli_hosts_traffic *hosts)
{
    json_t *params = json_array();
    for (int i = 0; i < m->m.n_params; i++) {
        const rc_tensor *p = m->m.params[i];
        int64_t local[4];
        rc_shard_local_shape(&s[i], p, (int)o->mp, local);
        json_t *shape = json_array(), *lshape = json_array();
        for (int k = 0; k < p->ndim; k++) {
            json_array_append_new(shape, json_integer(p->shape[k]));
            json_array_append_new(lshape, json_integer(local[k]));
        }
        json_array_append_new(params, json_pack("{s:s, s:o, s:s, s:i, s:o, s:s}", "name", m->m.names[i], "shape",
                                                shape, "split", rc_shard_role_name(s[i].role), "axis", s[i].axis,
                                                "local_shape", lshape, "note", s[i].note));
    }
    json_t *out = json_pack("{s:s, s:s, s:I, s:I, s:I, s:o, s:o, s:{s:I, s:I, s:b, s:I, s:s}, "
                            "s:{s:I, s:I, s:f, s:f, s:I, s:I}, s:s}",
                            "model", o->model, "model_type", c->model_type, "parameters", (json_int_t)m->m.numel,
                            "mp", (json_int_t)o->mp, "dp", (json_int_t)o->dp, "params", params, "memory_bytes",
                            rank_json(&mem->rank), "options", "batch_size", (json_int_t)o->batch, "seq_len",
                            (json_int_t)o->seq_len, "zero", o->zero, "remat", (json_int_t)o->remat, "dtype",
                            rc_dtype_name(o->dtype), "collectives",
                            "model_allreduce_forward", (json_int_t)comm->allreduce_fwd, "model_allreduce_backward",
                            (json_int_t)comm->allreduce_bwd, "model_bytes_forward", comm->bytes_fwd,
                            "model_bytes_backward", comm->bytes_bwd, "data_allreduce",
                            (json_int_t)(o->zero ? 0 : buckets), "model_allgather", (json_int_t)comm->allgather_fwd,
                            "attention", o->unfused ? "unfused" : rc_get_tiled_attention() ? "fused" : "products");
    /* with zero the gradients are reduce-scattered (zero 2: each micro-batch's, a window at
     * a time; zero 3: each layer's) and the updated weights all-gathered (zero 3: each layer
     * gathered where the step reads it) */
    json_t *coll = json_object_get(out, "collectives");
    const rc_rank_memory *r = &mem->rank;
    int64_t scatters = o->zero == 3 ? (o->dp > 1 ? r->units : 0) : o->zero == 2 ? zero2_windows(r)
                       : o->zero && buckets ? zero1_pieces(r) : 0;
    int64_t gathers = o->zero == 3 ? (o->dp > 1 ? r->gathers : 0) : o->zero ? buckets : 0;
    json_object_set_new(coll, "data_reduce_scatter", json_integer(scatters));
    json_object_set_new(coll, "data_allgather", json_integer(gathers));
    json_object_set_new(coll, "data_sent_per_step", json_integer(r->sent));
    if (o->zero == 3)
        json_object_set_new(coll, "data_layers", json_integer(r->units));
    if (o->memory_text) {
        int64_t need = mem->rank.total + mem->rank.full_copy;
        json_t *fit = json_pack("{s:s, s:I, s:b, s:o, s:o}", "size", o->memory_text, "bytes", (json_int_t)o->memory,
                                "fits", need <= o->memory, "largest",
                                mem->largest ? json_string(mem->largest) : json_null(), "largest_memory_bytes",
                                mem->largest ? rank_json(&mem->largest_rank) : json_null());
        json_object_set_new(out, "memory", fit);
    }
    if (hosts->per_host) /* how the mesh lies on hosts, the bytes of a step by axis */
        json_object_set_new(out, "hosts", json_pack("{s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f}",
                                                    "ranks_per_host", (json_int_t)hosts->per_host, "hosts",
                                                    (json_int_t)hosts->hosts, "model_group_hosts",
                                                    (json_int_t)hosts->model_hosts, "data_group_hosts",
                                                    (json_int_t)hosts->data_hosts, "model_bytes_rank",
                                                    hosts->model_rank, "data_bytes_rank", hosts->data_rank,
                                                    "model_bytes_across", hosts->model_across, "data_bytes_across",
                                                    hosts->data_across, "model_bytes_host_out",
                                                    hosts->model_host_out, "data_bytes_host_out",
                                                    hosts->data_host_out));
    if (dev->be) {
        size_t total;
        rc_backend_memory(dev->be, &total, NULL, NULL);
        json_object_set_new(out, "device", json_pack("{s:s, s:I, s:f, s:s, s:s}", "name", rc_backend_name(dev->be),
                                                     "total_bytes", (json_int_t)total, "need_bytes", dev->need,
                                                     "fit", fit_word(dev), "missing_kernels", dev->missing));
    }
    cli_print_json(out);
}

/* the rank's figures under o, and with --memory the largest preset that fits */
static int plan_memory(const rc_model_config *c, const options *o, rc_backend *be, memory *mem, rc_error *err)
{
    mem->opt = (rc_memory_options){.dp = (int)o->dp, .mp = (int)o->mp, .batch = o->batch, .seq_len = o->seq_len,
                                   .zero = o->zero, .remat = (int)o->remat, .dtype = o->dtype,
                                   .no_dropout = o->no_dropout, .allow_replicate = o->allow, .overrides = o->shards.o,
                                   .n_overrides = o->shards.n, .backend = be,
                                   .from_dir = cli_model_is_dir(o->model)};
    if (rc_memory_plan(c, &mem->opt, &mem->rank, err))
        return -1;
    if (!o->memory_text)
        return 0;
    rc_memory_options plain = mem->opt; /* other presets: the plan's own splits */
    plain.overrides = NULL;
    plain.n_overrides = 0;
    return rc_memory_largest(c, &plain, o->memory, &mem->largest, &mem->largest_rank, err);
}

int cmd_plan(int argc, char **argv)
{
    const char *cmd = "plan";
    options o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    rc_model_config c;
    model_graph m = {0};
    rc_error err = {0};
    if (cli_model_config(o.model, &c, &err) || build(&c, &o, &m, &err)) {
        free_graph(&m);
        return cli_fail(cmd, "%s", err.msg);
    }
    int n = m.m.n_params;
    rc_shard_spec *s = calloc((size_t)n + 1, sizeof *s);
    rc_shard_comm comm = {0};
    rc = s ? rc_shard_apply(s, m.m.params, n, o.shards.o, o.shards.n, (int)o.mp, &err) : -1;
    if (!rc)
        rc = rc_shard_plan(m.g, m.loss, m.m.params, n, (int)o.mp, o.allow, s, &comm, &err);
    if (o.mp == 1) /* one shard: the counts are where collectives would go, none run */
        memset(&comm, 0, sizeof comm);
    device_fit dev = {0};
    if (!rc && o.device && !(dev.be = rc_device_open(o.device, 0, &err)))
        rc = -1;
    memory mem = {0}; /* the scratch is the device's (without --device, the CPU's) */
    if (!rc)
        rc = plan_memory(&c, &o, dev.be, &mem, &err);
    if (!rc && dev.be) { /* the ops of the step with its backward pass */
        rc_tensor **grads = calloc((size_t)n + 1, sizeof *grads);
        if (grads && rc_backward(m.g, m.loss, m.m.params, n, grads) == 0)
            device_check(&dev, m.g, &mem);
        else
            rc = rc_error_set(&err, RC_ERR_MEMORY, "plan: the backward pass: %s", rc_graph_error(m.g));
        free(grads);
    }
    int64_t buckets = (4 * mem.rank.local + (16 << 20) - 1) / (16 << 20);
    cli_hosts_traffic hosts = {0};
    /* a step's vectors: the model axis' all-reduces; the gradients' all-reduce (zero: their
     * reduce-scatter and the weights' all-gather; zero 3: the layers' gathers) */
    double local = (double)mem.rank.local, wb = (double)rc_dtype_size(o.dtype);
    double data = o.zero == 3 ? wb * (double)mem.rank.gathered_elems + 4.0 * local
                  : o.zero    ? (4.0 + wb) * local
                              : 8.0 * local;
    if (!rc && o.per_host && cli_hosts_traffic_of(o.dp, o.mp, o.per_host, comm.bytes_fwd + comm.bytes_bwd, data,
                                                  &hosts))
        rc = rc_error_set(&err, RC_ERR_ARG, "plan: --ranks-per-host: more than 2^24 ranks (mp %lld x dp %lld)",
                          (long long)o.mp, (long long)o.dp);
    if (rc)
        cli_fail(cmd, "%s", err.msg);
    else if (o.json)
        print_json(&c, &o, &m, s, &mem, &comm, o.dp > 1 ? buckets : 0, &dev, &hosts);
    else
        print_text(&c, &o, &m, s, &mem, &comm, o.dp > 1 ? buckets : 0, &dev, &hosts);
    free(s);
    free_graph(&m);
    rc_device_close(dev.be);
    return rc ? 1 : 0;
}
