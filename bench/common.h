/* common.h - what every benchmark shares: a clock, the one-line failure, JSON lines
 * written with jansson (a non-finite number becomes null), a streaming copy that
 * measures the machine's memory bandwidth, command-line flags, the batches and loss of a
 * language-model fit over a token stream, and one fit of a preset. */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include "redco.h"
#include "redco/pipeline.h"

#include <jansson.h>
#include <stdint.h>

double bench_now(void);

/* Prints "NAME: WHAT failed: MSG" on stderr and exits 1. */
void bench_fail(const char *name, const char *what, const char *msg);

struct rc_plan;
/* The best of reps runs of plan p in seconds, after one untimed run (it warms caches and
 * sizes the 16-bit scratch); a failed run ends the benchmark (bench_fail under name). */
double bench_plan_best(const char *name, struct rc_plan *p, int reps);

/* {"bench": NAME}: add fields with the setters, print with bench_print */
json_t *bench_line(const char *name);
void bench_set_num(json_t *o, const char *key, double v); /* non-finite: null */
void bench_set_int(json_t *o, const char *key, long long v);
void bench_set_str(json_t *o, const char *key, const char *v);
/* one line on stdout, fields in the order they were set; frees o. -1 when it cannot */
int bench_print(json_t *o);

/* A streaming copy of n floats between two arrays with the current OpenMP threads, to
 * set a figure against the machine's memory bandwidth: init (-1 when it cannot
 * allocate), run (seconds of `passes` copies, back and forth), gbs (bytes read + written
 * per second). */
typedef struct {
    float *a, *b;
    int64_t n;
} bench_copy;
int bench_copy_init(bench_copy *c, int64_t n);
double bench_copy_run(bench_copy *c, int passes);
double bench_copy_gbs(const bench_copy *c, int passes, double seconds);
void bench_copy_free(bench_copy *c);

/* flag's value (e.g. --device D) taken out of argv, the rest left in order; NULL when
 * absent */
const char *bench_take_flag(int *argc, char **argv, const char *flag);
/* 1 when the switch (a flag without a value) is in argv, which it is taken out of */
int bench_take_switch(int *argc, char **argv, const char *flag);
/* a --dtype value: f32 (also for NULL), bf16 or f16; RC_DTYPE_COUNT for anything else */
rc_dtype bench_float_dtype(const char *name);

/* "op ms, ...": the k ops with the most time in op_s[RC_OP_COUNT] (seconds), each times
 * ms_per_s, into out[n] */
void bench_top_ops(const double *op_s, double ms_per_s, int k, char *out, size_t n);

/* A language model's batch: for each of the n examples ex, i32 "ids" [n, T] and next-token
 * "targets" [n, T], example e being tokens e T .. e T + T of tok (T + 1 of them readable) */
int bench_lm_batch(rc_batch *out, const int32_t *tok, int T, const int64_t *ex, int n, rc_error *err);
/* the mean next-token cross-entropy of model m on such a batch */
rc_tensor *bench_lm_loss(rc_graph *g, rc_model *m, const rc_batch *b);

/* One fit of a fresh `preset` model (rc_model_create in f32): made into *model, where the
 * loss reads it, trained with o over ex (ex.user is also the trainer's user), freed again;
 * *numel (when not NULL) its parameter count. 0, or -1 with *what naming the call that
 * failed and err its reason. */
int bench_fit_preset(rc_deployer *d, const char *preset, rc_model **model, int64_t *numel,
                     rc_collate_fn collate, rc_loss_fn loss, rc_examples ex, const rc_train_options *o,
                     const char **what, rc_error *err);

#endif
