/* params.h - what the rooms above the model room see of parameters beyond the public API:
 * the weights table behind an rc_params, where it lives, giving it up while model shards
 * hold the values, its version, and the frozen base that LoRA's adapters sit on. */
#ifndef REDCO_PARAMS_H
#define REDCO_PARAMS_H

#include "internal.h"
#include "nn.h"
#include "redco/pipeline.h"
#include "redco/safetensors.h"

/* A params object holding table w and its buffer on be (a built-in model's weights): w is
 * taken, left zeroed. NULL when out of memory (w is then still the caller's). */
rc_params *rci_params_adopt(rci_nn_weights *w, rc_backend *be);
/* Every parameter's leaf in g, in table order (the order the families index them); NULL with
 * g's error set. The array is the params object's, valid until the next graph. */
rc_tensor **rci_params_leaves(rc_graph *g, rc_params *p);
/* the flat table behind a params object (allocated, unless released) */
rci_nn_weights *rci_params_weights(rc_params *p);
/* the table alone (names, shapes, offsets, dtype): its buffer may be NULL (not yet read
 * from the source, or released) */
rci_nn_weights *rci_params_table(rc_params *p);
/* the backend the parameters live on */
rc_backend *rci_params_backend(const rc_params *p);
/* Frees the full buffer while model shards hold the values (leaves then unbound), and
 * gets a zeroed one back for them to be gathered into (the source, if any, is closed:
 * the shards' values win). */
void rci_params_release(rc_params *p);
int rci_params_restore(rc_params *p);
/* rci_params_restore with the values waiting in ck (taken: a checkpoint of the shards'
 * values whose tensors match p's table), not gathered into a buffer */
void rci_params_restore_from(rc_params *p, rc_checkpoint *ck);
/* Released parameters whose values still wait unchanged in their source (frozen weights read
 * from a model directory) back to waiting there; -1 (nothing done) without a source. */
int rci_params_unrelease(rc_params *p);

/* ---- values that wait in a model directory --------------------------------------------- */
/* The values of p are in ck (a checkpoint whose names and shapes match p's table, taken):
 * the buffer is not allocated until something needs it, then filled from ck a parameter at
 * a time and ck closed. Until then rci_params_read_range reads any part straight from the
 * file, so that a rank keeping model shards or a ZeRO share never holds the whole model;
 * releasing p first (rci_params_release) keeps the buffer from ever being made. */
void rci_params_set_source(rc_params *p, rc_checkpoint *ck);
/* 1 while the values are only in the source (no buffer) */
int rci_params_waiting(const rc_params *p);
/* Elements [first, first + n) of parameter i in the parameters' dtype (the stored words)
 * into host: from the buffer, else from the source, else (not released) from the buffer
 * allocated now. */
int rci_params_read_range(rc_params *p, int i, int64_t first, int64_t n, void *host, rc_error *err);
/* A counter that changes whenever the values may have changed (written, converted, moved,
 * restored, updated by a fit), so that copies taken from them (a Predictor's model shards)
 * know when they are stale. */
void rci_params_touch(rc_params *p);
/* Gives each parameter that has no values yet (never drawn, written or handed out by
 * rc_params_buffer) those rc_params_init_normal(p, RC_INIT_STD, seed) would give it, the
 * same whichever others have values. Returns how many it gave values (then *first, when
 * not NULL, names the first of them), or -1 with err set. */
int rci_params_init_missing(rc_params *p, uint64_t seed, const char **first, rc_error *err);
uint64_t rci_params_version(const rc_params *p);

/* ---- parameters trained on top of frozen ones ------------------------------------------ */
/* LoRA's adapters (a trainer's parameters) on a model whose weights the loss also reads but
 * nobody trains: with model shards those weights are split by the same plan, each adapter
 * with its base weight (B [out, r] like a column-parallel weight's output features, A
 * [r, in] like a row-parallel weight's input features, the other one whole). */
typedef struct {
    rc_params *base;              /* the frozen weights (NULL: none) */
    int n;                        /* adapter k: parameters 2k (A) and 2k + 1 (B) ... */
    const int *base_of;           /* [n] ... sit on base weight base_of[k] */
    int conv1d;                   /* the base weights are Conv1D [in, out] (else Linear [out, in]) */
} rci_frozen;
void rci_params_set_frozen(rc_params *p, const rci_frozen *f);
/* NULL when p has no frozen companion */
const rci_frozen *rci_params_frozen(const rc_params *p);
/* The leaves in g of p's frozen base weights, in the base's order, into out (room for
 * rc_params_count of the base; an entry is NULL once g has an error); none without a base. */
void rci_params_frozen_leaves(rc_graph *g, const rc_params *p, rc_tensor **out);

#endif
