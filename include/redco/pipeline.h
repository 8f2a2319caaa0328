/* redco/pipeline.h - the three functions, and the Deployer, Trainer and Predictor built
 * from them.
 *
 * A user writes:
 *   collate  turns n examples into one batch of named host arrays;
 *   loss     records the scalar training loss of a batch into a graph, in global shapes;
 *   predict  records the outputs of a batch (logits, generated ids, labels ...);
 * and redco differentiates, shards, plans and runs them on every rank.
 *
 * Examples are indices. C has no generic example type, and upstream's example lists are
 * only ever read by index; so the trainer orders, shuffles, shards, pads and resumes over
 * the indices 0 .. count-1 and the collate function reads example i from the user's own
 * data. */
#ifndef REDCO_PIPELINE_H
#define REDCO_PIPELINE_H

#include "redco.h"
#include "redco/dist.h"
#include "redco/model.h"
#include "redco/shard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- batches ------------------------------------------------------------------------ */

enum { RC_BATCH_MAX = 16 };

/* One named array of a batch; the leading dimension is the batch. */
typedef struct {
    char name[32];
    rc_dtype dtype;               /* RC_I32 or RC_F32 */
    int ndim;
    int64_t shape[RC_MAX_DIMS];
    void *data;                   /* owned by the batch */
} rc_array;

typedef struct {
    int n;
    rc_array a[RC_BATCH_MAX];
} rc_batch;

/* Adds a zeroed array and returns its data (NULL when the batch is full, the name is
 * taken or memory runs out). */
void *rc_batch_add(rc_batch *b, const char *name, rc_dtype t, int ndim, const int64_t *shape);
const rc_array *rc_batch_get(const rc_batch *b, const char *name);
void rc_batch_free(rc_batch *b);
/* The graph input of array `name`: an input leaf (named as the array) of its shape and
 * dtype. Sets the graph's error when the batch has no such array. */
rc_tensor *rc_batch_input(rc_graph *g, const rc_batch *b, const char *name);
/* Copies each array of b into the plan's input leaf of the same name: every input leaf
 * of the plan needs an array of its shape and dtype (the trainer and predictor feed each
 * batch so). */
int rc_batch_feed(const rc_batch *b, rc_plan *p, rc_error *err);

/* ---- parameters ---------------------------------------------------------------------- */

/* Named tensors in one flat buffer (Hugging Face names for the built-in models), stored
 * in one dtype: f32 (the default), bf16 or f16 (rc_params_to_dtype). The host interface
 * stays f32 whatever the storage: rc_params_read / _write / _read_all / _init_normal
 * convert (writing rounds to nearest even); _read_raw / _write_raw copy stored elements.
 * The graph leaves (rc_params_get) take the storage dtype. */
typedef struct rc_params rc_params;

/* How a parameter starts. A parameter gets its first values from whichever comes first:
 *   - rc_params_init_normal (every parameter, each as declared);
 *   - rc_params_write or rc_params_write_raw of it, or rc_params_buffer of it (the caller
 *     may write into the buffer: the parameter counts as given);
 *   - otherwise rc_trainer_new or rc_predictor_new over the parameters: each parameter with
 *     no values yet gets what rc_params_init_normal(p, RC_INIT_STD, seed) would give it, seed
 *     the deployer's (rc_deployer_options.seed), the same on every rank and mesh shape and
 *     whichever others were given (a verbose deployer notes it).
 * Until then its values read as zeros. */
#define RC_INIT_STD 0.02

typedef enum {
    RC_INIT_AUTO = 0,             /* rc_params_add's: N(0, std) for 2-D and larger, std that of
                                     rc_params_init_normal (RC_INIT_STD when a trainer or
                                     predictor draws it); 0 for 1-D (biases). A norm gain
                                     (LayerNorm, RMSNorm weight) must say RC_INIT_ONES */
    RC_INIT_NORMAL,               /* N(0, std) with the std given here */
    RC_INIT_ZEROS,
    RC_INIT_ONES,
    RC_INIT_FILL                  /* the user's fill */
} rc_init_kind;

/* A user fill: writes the numel values of a parameter of shape[ndim] into x, drawing any
 * randomness from rng (a key of its own per parameter: rc_rng_fold(rc_rng_new(seed), i)
 * for parameter i). Returns 0, or -1 to make rc_params_init_normal fail. */
typedef int (*rc_fill_fn)(float *x, int64_t numel, int ndim, const int64_t *shape, rc_rng rng,
                          void *user);

typedef struct {
    rc_init_kind kind;
    double std;                   /* RC_INIT_NORMAL */
    rc_fill_fn fill;              /* RC_INIT_FILL */
    void *user;                   /* passed to fill */
} rc_init;

rc_params *rc_params_new(void);
void rc_params_free(rc_params *p);
/* Declares a parameter that starts as RC_INIT_AUTO; all are declared before the first
 * rc_params_get, _read, _write, _buffer or _init_normal. -1 when the name is taken or longer than
 * 95 bytes, the shape is not 1 to 4 positive dimensions, or the buffer already exists. */
int rc_params_add(rc_params *p, const char *name, int ndim, const int64_t *shape);
/* Declares a parameter that starts as `init` says (NULL: RC_INIT_AUTO); e.g.
 *   rc_params_add_init(p, "ln.weight", 1, (int64_t[]){C}, &(rc_init){.kind = RC_INIT_ONES});
 * -1 also for an unknown kind, a negative or non-finite std, or RC_INIT_FILL without fill. */
int rc_params_add_init(rc_params *p, const char *name, int ndim, const int64_t *shape,
                       const rc_init *init);
/* Initialises every parameter declared so far as it was declared (values written before
 * are replaced). The normal draws of RC_INIT_AUTO and RC_INIT_NORMAL come from one stream
 * of `seed`, parameter after parameter in declaration order; `std` is the std of
 * RC_INIT_AUTO. -1 when the buffer cannot be allocated or a fill fails. */
int rc_params_init_normal(rc_params *p, double std, uint64_t seed);
int rc_params_count(const rc_params *p);
const char *rc_params_name(const rc_params *p, int i);
int64_t rc_params_numel(const rc_params *p);
/* parameter i's shape (-1 when there is no parameter i) and element count */
int rc_params_shape(const rc_params *p, int i, int *ndim, const int64_t **shape);
int64_t rc_params_tensor_numel(const rc_params *p, int i);
/* The values live in a backend buffer; these copy parameter i (its numel floats), or all
 * of them flat in declaration order (rc_params_numel floats), to or from host memory. */
int rc_params_read(rc_params *p, int i, float *host, rc_error *err);
int rc_params_write(rc_params *p, int i, const float *host, rc_error *err);
int rc_params_read_all(rc_params *p, float *host, rc_error *err);
/* Parameter i's numel elements as stored (rc_params_dtype: 4 or 2 bytes each, bf16 and f16
 * as their 16-bit words), copied without conversion. */
int rc_params_read_raw(rc_params *p, int i, void *host, rc_error *err);
int rc_params_write_raw(rc_params *p, int i, const void *host, rc_error *err);
/* The storage dtype: RC_F32, RC_BF16 or RC_F16. */
rc_dtype rc_params_dtype(const rc_params *p);
/* Converts the stored values to dt (f32, bf16, f16) in a new buffer on the same backend
 * (widening is exact, narrowing rounds to nearest even); before the buffer exists it only
 * sets the dtype. Leaves recorded earlier keep the old dtype: record graphs after. */
int rc_params_to_dtype(rc_params *p, rc_dtype dt, rc_error *err);
/* The buffer holding the parameters and parameter i's byte offset in it (NULL when it
 * cannot be allocated); elements are of rc_params_dtype. Parameter i then counts as given
 * values (see rc_init_kind): a trainer or predictor draws none for it. */
rc_buffer *rc_params_buffer(rc_params *p, int i, size_t *offset);
/* Moves the parameters to backend be (their values copied through host memory); the
 * Trainer and Predictor move them to their Deployer's backend. */
int rc_params_to(rc_params *p, rc_backend *be, rc_error *err);
int rc_params_find(const rc_params *p, const char *name);
/* The parameter leaf of `name` in graph g (one leaf per parameter per graph). */
rc_tensor *rc_params_get(rc_graph *g, rc_params *p, const char *name);

/* ---- built-in models -------------------------------------------------------------- */

typedef struct {
    rc_model_config config;
    rc_params *params;
    char dir[4096];               /* where it was loaded from ("" for presets) */
    struct rc_lora *lora;         /* LoRA adapters its forward pass adds (redco/lora.h), or NULL */
} rc_model;

/* A preset architecture with random weights, or a Hugging Face model directory (any
 * float dtype in the checkpoint, converted to f32). A directory's config, tensor names and
 * shapes are checked here; its values are read when first needed, and a trainer that keeps
 * model shards (mp > 1) or ZeRO stage 3 shares reads only those parts from the file, so no
 * process holds the whole model. The directory's files stay mapped until then. */
rc_model *rc_model_create(const char *preset_or_dir, uint64_t seed, rc_error *err);
/* rc_model_create with the weights stored in dtype (RC_F32, RC_BF16 or RC_F16): a
 * checkpoint's tensors are converted to it as they are read (a BF16 tensor into bf16 is
 * copied bit for bit); a preset's random f32 draws are rounded to it. The forward pass
 * then runs in that dtype (activations, key/value cache; losses f32). */
rc_model *rc_model_load(const char *preset_or_dir, uint64_t seed, rc_dtype dtype, rc_error *err);
/* Converts the model's weights to dt in place (rc_params_to_dtype). */
int rc_model_to_dtype(rc_model *m, rc_dtype dt, rc_error *err);
/* A model of the given configuration (e.g. a preset with another vocabulary), random
 * weights; the configuration is validated. */
rc_model *rc_model_from_config(const rc_model_config *c, uint64_t seed, rc_error *err);
void rc_model_free(rc_model *m);
/* DIR/config.json and DIR/model.safetensors (the weights' dtype: F32, BF16 or F16, with
 * torch_dtype "bfloat16" / "float16" in config.json for 16-bit weights; Hugging Face names; DIR is created,
 * each file written under a temporary name and renamed), plus the tokenizer files of
 * tokenizer_dir (tokenizer.json, vocab.json, merges.txt, tokenizer.model,
 * tokenizer_config.json, special_tokens_map.json: those that exist) when it is not NULL.
 * rc_model_create(dir) loads it back. */
int rc_model_save(const rc_model *m, const char *dir, const char *tokenizer_dir, rc_error *err);
/* logits [B, T, vocab] of ids i32 [B, T] (T5: enc_ids [B, S] encoder input, ids the
 * decoder input); mask [B, T] (f32, or any float dtype) or NULL. The logits have the
 * weights' dtype (rc_cross_entropy of 16-bit logits is f32). In a training step's graph
 * (rc_graph_training: the trainer's, unless no_dropout) with the config's dropout. */
rc_tensor *rc_model_logits(rc_graph *g, rc_model *m, rc_tensor *ids, rc_tensor *enc_ids,
                           rc_tensor *mask);

/* ---- the three functions ---------------------------------------------------------------- */

/* Each function receives err: a function that fails returns -1 (collate, output) or NULL
 * (loss, predict) and may say why with rc_error_set(err, code, "..."); the trainer or
 * predictor then stops with that reason, naming the examples of the batch. (A loss or
 * predict that fails through a graph op needs nothing more: the graph's error is used.) */
typedef int (*rc_collate_fn)(rc_batch *out, const int64_t *examples, int n, void *user, rc_error *err);
typedef rc_tensor *(*rc_loss_fn)(rc_graph *g, rc_params *params, const rc_batch *batch,
                                 rc_rng rng, void *user, rc_error *err);
typedef rc_tensor *(*rc_predict_fn)(rc_graph *g, rc_params *params, const rc_batch *batch,
                                    rc_rng rng, void *user, rc_error *err);
/* turns the prediction rows of one batch (valid examples only) into per-example results:
 * called with the predict output's data for example `example` (row `row` of the batch) */
typedef int (*rc_output_fn)(int64_t example, const float *row, int64_t row_len, void *user, rc_error *err);

/* ---- deployer: processes, mesh, randomness, workdir, logging ------------------------------ */

/* A zeroed struct is a run of seed 0 on one model shard per replica, no files, quiet, on
 * the device REDCO_DEVICE names (else the CPU). */
typedef struct {
    uint64_t seed;                /* the run's randomness: shuffling, dropout keys, the parameters
                                     a trainer or predictor draws (RC_INIT_AUTO); 0 is a seed like
                                     any other */
    int mp;                       /* model shards per data-parallel replica (0: 1); the world
                                     size is dp x mp */
    const char *workdir;          /* NULL: no files. Made when the first fit has checked its
                                     options and built its state (or at the first
                                     rc_deployer_log), so a refused run leaves none. Rank 0
                                     appends log.jsonl there: one JSON
                                     object per line, {"step": S, "train/loss": x, ...}, a
                                     NaN or infinite value written as null */
    int verbose;                  /* 1: progress and notes on rank 0's stderr; 0: none */
    int json;                     /* 1: no human output even when verbose (for --json runs) */
    int local;                    /* 1: a world of one even under a launcher (reference runs) */
    const char *device;           /* where the model's state and steps live: "cpu", "opencl",
                                     "opencl:N", "opencl:N,M,...", "cuda", "cuda:N" or
                                     "cuda:N,M,..." (see rc_device_open); NULL: the
                                     environment's REDCO_DEVICE, else the CPU */
    int tf32;                     /* 1: f32 matrix products on a CUDA device may use TF32
                                     tensor cores (rc_device_allow_tf32); 0: exact f32 */
    double collective_timeout;    /* seconds a collective may wait for the other ranks before
                                     the job is aborted naming the op and the missing ranks
                                     (rc_comm_set_timeout); 0: 600, < 0: no limit */
    const char *run_config;       /* NULL, or text (the configuration that made the run, e.g.
                                     JSON) rank 0 writes to workdir/run_config.json, atomically,
                                     when a fit first writes into the workdir */
} rc_deployer_options;

typedef struct rc_deployer rc_deployer;

/* Under a launcher, starts MPI (rc_dist_init) unless it is running already. The mesh has
 * o->mp model shards per replica; without a launcher the world is this one process, so
 * mp > 1 is an error saying how to start more (--nproc N, mpirun -np N). */
rc_deployer *rc_deployer_new(int *argc, char ***argv, const rc_deployer_options *o, rc_error *err);
/* Frees the deployer; when this deployer started MPI, finalizes it too (MPI cannot start
 * again: a program that makes deployers one after another calls rc_dist_init first, and
 * rc_dist_finalize at its end). rc_dist_finalize afterwards does nothing. */
void rc_deployer_free(rc_deployer *d);
const rc_mesh *rc_deployer_mesh(const rc_deployer *d);
int rc_deployer_is_main(const rc_deployer *d);
/* the backend this process runs on (the options' device) */
rc_backend *rc_deployer_backend(const rc_deployer *d);
/* The processes of the job that run on this process's device: the ranks of this host on
 * the CPU, those that opened the same device of this host (OpenCL or CUDA; 1 for a deployer
 * of its own, o->local); the share of its memory a rank may count on (rc_memory_fits).
 * Collective: every rank of the job calls it. */
int rc_deployer_device_sharers(const rc_deployer *d);
/* the key of optimizer step `step` for this data-parallel replica */
rc_rng rc_deployer_step_rng(const rc_deployer *d, int64_t step);
/* Agreement on failure across ranks (see rc_comm_agree). */
int rc_deployer_agree(rc_deployer *d, int status, rc_error *err);
/* A pipeline's own figures at `step` (e.g. a privacy budget): on rank 0 with a workdir, one
 * line {"step": step, keys[i]: values[i], ...} appended to log.jsonl (and TensorBoard's
 * events when they are on), as the trainer logs; elsewhere nothing. Returns 0 or -1. */
int rc_deployer_log(rc_deployer *d, int64_t step, const char *const *keys, const double *values, int n,
                    rc_error *err);

/* ---- trainer ------------------------------------------------------------------------ */

/* A set of examples: count(epoch, user) of them in an epoch (the set may change per epoch,
 * as MAML's tasks do). collate and loss receive this user for these examples (the
 * trainer's own user when it is NULL), so training and evaluation sets can be different
 * data behind the same functions. */
typedef struct {
    int64_t (*count)(int epoch, void *user);
    void *user;
} rc_examples;

/* The options of a fit. A zeroed struct plus steps (or epochs), batch_size and lr is a
 * complete AdamW run; each field says what 0 (or NULL) means. */
typedef struct {
    int64_t steps;                /* optimizer steps in total (0: from epochs) */
    int epochs;                   /* when steps is 0: epochs x the steps of one epoch */
    int batch_size;               /* per data-parallel replica (>= 1; no default) */
    int grad_accum;               /* micro-batches per optimizer step (0: 1) */
    int shuffle;                  /* 1: shuffle examples each epoch from the seed; 0: in order */
    const char *optimizer;        /* "adamw" or "sgd" (NULL: "adamw") */
    double lr;                    /* the peak learning rate (no default: 0 changes nothing) */
    double weight_decay;          /* decoupled weight decay (AdamW's; SGD multiplies the weights
                                     by 1 - lr wd): 0 none. 1-D parameters: see below */
    double beta1, beta2, eps;     /* AdamW's; 0: 0.9, 0.999 and 1e-8 unless adam_as_given. A
                                     beta outside [0, 1) or a negative eps is an error */
    int adam_as_given;            /* 1: beta1, beta2 and eps are used as given, 0 included (beta1
                                     = 0: no momentum, RMSprop-like); set all three then */
    double grad_clip;             /* the global gradient norm's limit (0: no clipping) */
    rc_schedule_kind schedule;    /* 0: RC_SCHEDULE_CONSTANT; LINEAR and COSINE decay to 0 */
    int64_t warmup;               /* optimizer steps of linear warmup (0: none) */
    int decay_norms_and_biases;   /* 0 (default): no weight decay on 1-D parameters */
    int no_dropout;               /* 0 (default): the training steps apply the built-in model's
                                     dropout as its config says (GPT-2's resid_pdrop, embd_pdrop,
                                     attn_pdrop; OPT's dropout and attention_dropout; T5's
                                     dropout_rate; LLaMA's attention_dropout), where Hugging
                                     Face's classes apply it in train mode: the loss function's
                                     graph is a training one (rc_graph_set_training), a mask a
                                     site drawn afresh each step, micro-batch and data-parallel
                                     replica; evaluation never drops. 1: no dropout (runs that
                                     must equal across meshes or micro-batch counts) */
    int remat;                    /* 0: none. N > 0: the built-in models keep only every N-th transformer
                                     block's input and recompute the blocks in the backward pass
                                     (rc_graph_set_remat; gradients unchanged, bitwise) */
    int zero;                     /* the ZeRO stage over the data axis (0: none). 1: optimizer
                                     state sharded: each data-parallel rank keeps the AdamW
                                     moments of its 1/dp share of the parameters (of its model
                                     shard), the mean gradient is reduce-scattered, each rank
                                     updates its share and the updated weights are
                                     all-gathered. 2: the f32 gradients too: each micro-batch's
                                     gradient outputs are reduce-scattered (through a window of
                                     min(2^20, share) floats) and only the rank's share is
                                     accumulated, so no whole-model f32 gradient buffer. The
                                     same trajectory to float rounding (stage 2 sums several
                                     micro-batches in another order); checkpoints unchanged.
                                     3: the weights too: each rank keeps its share of the
                                     weights (and f32 master) alone; a step gathers each
                                     layer's weights (in their dtype) just before the nodes
                                     that read them, starting the next layer's gather while
                                     the current one computes, and reduce-scatters each
                                     layer's gradients as soon as they are complete, reusing
                                     their memory. Layers come from the graph (the
                                     recomputation segments, else runs of parameters in the
                                     order they are read, up to the largest one's size). The
                                     parameters' buffer is released during fit and filled
                                     again at its end. With model shards each rank's shard
                                     layout is what its data-axis group shares; evaluation
                                     (and its eval_predict metric) gathers as the step does */
    rc_dtype dtype;               /* the weights the steps read and their activations: RC_F32 (0,
                                     default), RC_BF16 or RC_F16. 16-bit: the parameters are
                                     converted to it at the first fit (rc_params_to_dtype: they
                                     stay in it after fit), the trainer keeps f32 master weights
                                     (with zero: this rank's share) and f32 moments; each step
                                     accumulates the 16-bit gradients in f32, updates the master
                                     and rounds it into the 16-bit weights. Checkpoints and
                                     final/ hold the f32 master (F32 tensors) */
    double loss_scale;            /* dynamic loss scaling: the loss is multiplied by S before the
                                     backward pass and the gradients divided by S; a non-finite
                                     gradient norm skips the update (weights, moments and the
                                     AdamW step count untouched), halves S and is logged; S
                                     doubles after loss_scale_window good steps in a row.
                                     0: 65536 for f16, none for f32 and bf16; > 0: that initial
                                     S (any dtype) */
    int64_t loss_scale_window;    /* good steps before S doubles (0: 2000) */
    int64_t log_every;            /* train/ figures into log.jsonl every N steps and at the last
                                     (0: never) */
    int64_t eval_every;           /* evaluate every N steps (0: only at the end); fit's eval set
                                     NULL: never */
    int64_t save_every;           /* a checkpoint every N steps (0: only at the end); the
                                     deployer's workdir NULL: none */
    int resume;                   /* 1: continue from the workdir's last complete checkpoint (none
                                     there: from the start); 0: start afresh, and a workdir that
                                     holds an earlier run's checkpoint is refused */
    int catch_signals;            /* 1: SIGINT and SIGTERM during fit finish the step in progress
                                     (all ranks agree on it after each step), write a checkpoint
                                     and fit returns -1 with RC_ERR_INTERRUPTED ("stopped by
                                     SIGTERM at step N; checkpoint written to DIR") and the
                                     result's stop_signal set; a second signal ends the process
                                     at once (checkpoints are written atomically), but one
                                     within RC_STOP_REPEAT_MS (2 s) of the first is a copy of it
                                     (mpiexec's or srun's) and changes nothing. In a job of
                                     redco's --nproc launcher SIGUSR1 and SIGUSR2 are its
                                     forwarded SIGTERM and SIGINT (rc_dist_stop_signal). The
                                     previous handlers are restored when fit returns. 0: the
                                     signals keep the handlers they have */
    int profile;                  /* 1: where the steps' time goes: each step's phases (data,
                                     run, grads, norm, update) timed with the device waited for
                                     after each, and the train step's kernels by op, each kernel
                                     waited for; the mean ms a step after the first into the log
                                     at the end (profile/PHASE_ms, profile/op/OP_ms) and one note
                                     line. Steps run slower with it */
    const char *tokenizer_dir;    /* copied into checkpoints and final/ (NULL: none) */
    /* Optional eval predictor and metric, as upstream's eval_predictor / eval_metric_fn (all
     * NULL: the evaluation is the eval loss alone). With eval_predict and eval_metric, at
     * each evaluation (eval_every, and at the end):
     *   1. eval_begin(user), when given, on every rank: the metric's counters start afresh
     *      (fashion_cnn's correct = seen = 0), so no evaluation sees an earlier one's rows;
     *   2. the predict function runs over the eval examples (a Predictor) and rank 0
     *      receives the rows in order through eval_output (NULL: rows dropped);
     *   3. eval_metric(user) on rank 0 returns the score (shared with every rank), logged as
     *      eval/<metric_name>; best/ then keeps the best score instead of the lowest eval
     *      loss.
     * user is the eval set's (rc_examples.user, else the trainer's). Without eval_begin the
     * counters are the user's to reset (in eval_metric, say). */
    rc_predict_fn eval_predict;
    rc_output_fn eval_output;
    double (*eval_metric)(void *user);
    void (*eval_begin)(void *user);
    const char *metric_name;      /* NULL: "metric" */
    int metric_higher_is_better;  /* 0: lower is better (as a loss); 1: higher (accuracy) */
    /* with model shards: splits the plan must take for these parameters instead of its own
     * (the rest of the plan fits around them); NULL: none */
    const rc_shard_override *shard_overrides;
    int n_shard_overrides;
    int save_total_limit;         /* N > 0: once a checkpoint-STEP/ is complete (and
                                     last_checkpoint names it), the older checkpoint-STEP/
                                     directories beyond the newest N are removed (renamed
                                     aside first, so a kill leaves no partial checkpoint);
                                     best/ and final/ are never removed. 0: all kept */
} rc_train_options;

typedef struct {
    int64_t step;                 /* optimizer steps done */
    double loss;                  /* mean training loss of the last step */
    double eval_loss;             /* last evaluation (NaN when none) */
    int64_t eval_tokens;
    double lr;
    /* memory of this rank during the steps, measured on the trainer's buffers: parameter
     * shards, f32 gradients and AdamW moments (with zero: this rank's share of the moments;
     * zero 2: of the gradients too, plus the reduce-scatter's window);
     * and any full copy of the weights kept beside them (0 with model shards: the full
     * buffer is given up and made again at the end) */
    int64_t state_bytes, full_weight_bytes;
    /* with loss scaling: the scale after the last step, and the steps skipped (non-finite
     * gradients) in this fit; else 1 and 0. state_bytes counts the 16-bit weights, the f32
     * gradients, moments and master */
    double loss_scale;
    int64_t skipped_steps;
    int stop_signal;              /* the signal that stopped the fit early (catch_signals), else 0 */
} rc_train_result;

typedef struct rc_trainer rc_trainer;

/* A trainer of params (moved to the deployer's device; parameters with no values yet get
 * them here, see rc_init_kind) through collate and loss, which receive user. model: the
 * built-in model params belong to (its config.json goes into checkpoints and final/), or
 * NULL for parameters of one's own (checkpoints then hold the weights alone). d, params and
 * model must outlive the trainer. */
rc_trainer *rc_trainer_new(rc_deployer *d, rc_collate_fn collate, rc_loss_fn loss, void *user,
                           rc_params *params, const rc_model *model, rc_error *err);
void rc_trainer_free(rc_trainer *t);
int rc_trainer_fit(rc_trainer *t, const rc_train_options *o, rc_examples train,
                   const rc_examples *eval, rc_train_result *out, rc_error *err);
/* mean loss over the examples weighted by predicted tokens (cross-entropy targets that are
 * not ignored), or by examples when the loss has no cross-entropy */
int rc_trainer_eval(rc_trainer *t, rc_examples ex, int batch_size, double *loss, int64_t *tokens,
                    rc_error *err);

/* ---- built-in tasks: the three functions for a built-in model and a dataset ------------ */

struct rc_dataset;

/* Language modelling (token windows), instruction tuning (prompt masked out of the loss)
 * and, for T5, sequence to sequence, on a dataset from redco/data.h: the three functions
 * for a built-in model. The task reads the model and the dataset, which stay the caller's
 * and must outlive it:
 *     rc_task *task = rc_task_new(model, data, seq_len, &err);
 *     rc_trainer *t = rc_trainer_new(d, rc_task_collate, rc_task_loss, task, model->params, model, &err);
 *     ... rc_trainer_fit(t, &o, (rc_examples){rc_task_count, task}, NULL, &result, &err) ...
 *     rc_task_free(task); */
typedef struct rc_task rc_task;

/* NULL with err set when the data does not suit the model (a T5 needs source/target
 * .jsonl, no window of seq_len tokens, seq_len past the model's positions). */
rc_task *rc_task_new(rc_model *m, struct rc_dataset *data, int64_t seq_len, rc_error *err);
void rc_task_free(rc_task *t);
int64_t rc_task_count(int epoch, void *task);
int rc_task_collate(rc_batch *out, const int64_t *examples, int n, void *task, rc_error *err);
rc_tensor *rc_task_loss(rc_graph *g, rc_params *params, const rc_batch *b, rc_rng rng, void *task, rc_error *err);

#ifdef __cplusplus
}
#endif

#endif
