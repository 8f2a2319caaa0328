/* redco/predict.h - the Predictor (batched, padded, order-preserving prediction over the
 * data-parallel replicas) and text generation with the built-in models.
 *
 * Predictor. rc_predictor_run(p, n, B) predicts examples 0 .. n-1 in rounds of one global
 * batch of B x dp examples, as upstream redco's Predictor and the trainer's micro-batches:
 * in each round replica r takes the contiguous slice [start + r b, start + (r + 1) b) with
 * b = B, except in the last round, where b = ceil(remaining / dp) so a short tail is not
 * padded to a whole global batch. Rows past the last example repeat the last example's
 * index (n - 1); they are computed and dropped. A replica whose slice is all padding skips
 * its batch. The predict function's output has the batch rows as its leading dimension;
 * each valid row (f32; i32 and f64 outputs are converted to float) is gathered to rank 0,
 * which calls output(example, row, row_len, user) once per example, in input order, as
 * each round completes (memory on rank 0 is one global batch of rows, not the whole run).
 * Graphs are compiled per batch signature (array names, dtypes and shapes) and cached:
 * the full batch and the tail batch each compile once. Randomness: the predict function
 * is recorded with a key of the deployer's seed; dropout (if the function uses any) is
 * re-keyed per batch from the seed and the batch's first example index. A failure on any
 * rank (collate, predict, output) stops every rank with the same message
 * (rc_deployer_agree); rank 0 may already have received the rounds before it.
 *
 * Generation. rc_generate continues a prompt with a built-in model (rc_model). Decoder-only
 * models (GPT-2, LLaMA, OPT, GPT-J) run the prompt once, keep the key/value cache in host
 * buffers and then feed one token per step; T5 takes the prompt as the encoder input and
 * decodes from config.decoder_start_token_id. Choice of the next token, in Hugging Face's
 * order (transformers 4.36):
 *   temperature == 0   greedy: the arg-max of the logits (the lowest id among equal maxima);
 *   temperature  > 0   sampling: logits / temperature, then top-k (keep logits >= the k-th
 *                      largest; ties at the threshold kept), then top-p (drop the smallest
 *                      tokens while their cumulative probability <= 1 - top_p; the most
 *                      likely token is always kept), softmax in double and one uniform draw
 *                      from rc_rng_uniform of a key folded from (seed, step, row). The same
 *                      seed gives the same tokens on every machine and rank count.
 *   num_beams > 1      beam search as transformers' generate(num_beams=k, do_sample=False,
 *                      early_stopping=False, length_penalty=1.0): log-softmax scores summed
 *                      along each beam, the top 2k candidates per step, hypotheses that end
 *                      in EOS scored by sum / generated length (EOS included, the decoder
 *                      start / prompt excluded), the same "done" heuristic (worst kept
 *                      hypothesis >= best candidate / current length) and finalisation of
 *                      the open beams at max length. Scores are kept in double where
 *                      torch uses float, so only near-ties (< ~1e-6) could order differently.
 * Generation stops at eos_id (which is included in the output) or after max_new_tokens.
 * The output holds the new tokens only (not the prompt, nor T5's decoder start token).
 *
 * Costs, honestly: each decoding step records and plans a new graph (the cache grows by one
 * position per step), about as much host work as a small forward; the cache is copied once
 * per step. With model shards each step's graph is also partitioned, and each rank keeps
 * the caller's full weights beside its shards for the duration of the call. T5 has no decoder cache in nn yet: every step re-runs the encoder and the
 * decoder over the whole prefix (quadratic in the output length). */
#ifndef REDCO_PREDICT_H
#define REDCO_PREDICT_H

#include "redco/pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- predictor ------------------------------------------------------------------------- */

typedef struct rc_predictor rc_predictor;

/* collate, predict and params are required; output may be NULL (rows are computed and
 * dropped, e.g. for timing). params must stay alive (and at the same address) while the
 * predictor is used; the compiled graphs read its buffer, so updates between runs (a
 * trainer's steps) are seen. */
rc_predictor *rc_predictor_new(rc_deployer *d, rc_collate_fn collate, rc_predict_fn predict,
                               rc_output_fn output, void *user, rc_params *params, rc_error *err);
/* Predicts examples 0 .. n_examples-1 with batch_size examples per data-parallel replica.
 * Collective: every rank calls it with the same arguments. Returns 0, or -1 on every rank
 * with err holding the (lowest failing rank's) message. */
int rc_predictor_run(rc_predictor *p, int64_t n_examples, int batch_size, rc_error *err);
void rc_predictor_free(rc_predictor *p);

/* ---- generation ---------------------------------------------------------------------------- */

typedef struct {
    int max_new_tokens;           /* >= 1 */
    double temperature;           /* 0: greedy (top_k, top_p, seed unused); > 0: sampling */
    int top_k;                    /* 0: off */
    double top_p;                 /* in (0, 1]; 0 or 1: off */
    uint64_t seed;
    int eos_id;                   /* stop token; negative: none (an id >= vocab never occurs) */
    int num_beams;                /* 0 or 1: no beam search; > 1: beam search (temperature 0) */
    /* optional: called with each new token of row `row` as it is chosen (beam search: the
     * best hypothesis's tokens once it is known); non-zero stops that row */
    int (*on_token)(int row, int32_t id, void *user);
    void *user;
    /* optional: a deployer with model shards (mp > 1) runs the model split over each model
     * group, every rank of a group calling with the same arguments and getting the same
     * tokens. The weights split by the plan training would use (derived once per call from
     * the first step's graph), the key/value cache by heads (a rank keeps kv_heads / mp of
     * them), and the logits are gathered whole for the choice of each token. NULL or mp 1:
     * the whole model in this process. */
    rc_deployer *deployer;
    int allow_replicate;          /* with shards: replicate weights the count does not divide */
    struct rc_generate_stats *stats; /* optional out: what this rank held, where time went */
    /* with stats: every kernel of the decode steps timed (rc_plan_set_timing: one wait per
     * kernel, so slower; for benchmarks) into stats' kernel_s and op_s */
    int time_kernels;
} rc_generate_options;

/* Memory of one rank in a generation call (the largest over a batch's beam searches), and
 * the wall time of its decode steps (every step after the prompt's, each feeding one token
 * per row) by phase, summed over the steps: where a token's time goes. */
typedef struct rc_generate_stats {
    int64_t cache_bytes;          /* key/value cache buffers */
    int64_t shard_bytes;          /* weight shards (0 without model shards) */
    int64_t kv_heads;             /* key/value heads cached per layer on this rank */
    int64_t decode_steps;         /* the steps the times below are summed over */
    double graph_s;               /* recording the step's graph */
    double plan_s;                /* making it runnable: partition, plan, arena, weights bound */
    double bind_s;                /* token ids copied in, the cache buffers bound */
    double run_s;                 /* rc_plan_run, until the device has finished */
    double read_s;                /* the last position's logits read back */
    double keep_s;                /* the new cache copied into the cache buffers */
    double free_s;                /* the step's graph and plan freed */
    double pick_s;                /* choosing the tokens (and the on_token calls) */
    double reorder_s;             /* beam search: the cache rows reordered */
    double kernel_s;              /* with time_kernels: of run_s, inside kernels */
    double op_s[RC_OP_COUNT];     /* with time_kernels: kernel_s by op */
} rc_generate_stats;

/* max_new_tokens 20, greedy, top_p 1, seed 0, eos_id from the model's config (-1 when it
 * has none), one beam, no callback. Start from these: a zeroed struct has eos_id 0. */
rc_generate_options rc_generate_defaults(const rc_model *m);

/* Continues prompt[0 .. n_prompt) (T5: encodes it and decodes an answer). On success
 * *out is a malloc'ed array of *n_out new tokens (1 .. max_new_tokens) and 0 is returned.
 * An empty prompt, an id outside [0, vocab), a prompt plus max_new_tokens beyond the
 * model's positions, or bad options are errors naming the value at fault. */
int rc_generate(rc_model *m, const int32_t *prompt, int64_t n_prompt, const rc_generate_options *o,
                int32_t **out, int64_t *n_out, rc_error *err);

/* n_batch prompts of n_prompt tokens each (prompts is [n_batch, n_prompt]) decoded
 * together: one graph per step for the whole batch (beam search runs them one by one).
 * *out is malloc'ed [n_batch, max_new_tokens]; n_out[b] (caller's array of n_batch)
 * counts row b's tokens. Row b samples from keys folded with b, so rc_generate of prompt b
 * alone gives the same tokens only for b = 0 (and always when greedy). Prompts of
 * different lengths go through rc_generate one at a time (the model families take one
 * position range per batch, so left padding would shift positions). */
int rc_generate_batch(rc_model *m, const int32_t *prompts, int n_batch, int64_t n_prompt,
                      const rc_generate_options *o, int32_t **out, int64_t *n_out, rc_error *err);

#ifdef __cplusplus
}
#endif

#endif
