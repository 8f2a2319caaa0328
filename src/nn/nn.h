/* nn.h - parameter tables and the model builders made of graph ops. */
#ifndef REDCO_NN_H
#define REDCO_NN_H

#include "redco.h"

/* One parameter: its name (Hugging Face's), shape and place in the flat buffer. */
typedef struct {
    char name[96];
    int ndim;
    int64_t shape[4];
    int64_t offset;               /* elements from the start of the buffer */
    int64_t numel;
} nn_param;

/* All parameters of a model in one flat f32 buffer (as llm.c), described by a table. */
typedef struct {
    int n, cap;
    nn_param *p;
    int64_t numel;
    float *data;                  /* numel floats, after nn_weights_alloc */
} nn_weights;

int nn_weights_add(nn_weights *w, const char *name, int ndim, const int64_t *shape);
/* Allocates the zeroed buffer once the table is complete. */
int nn_weights_alloc(nn_weights *w);
void nn_weights_free(nn_weights *w);
float *nn_weights_get(const nn_weights *w, int i);
/* A parameter leaf of graph g bound to parameter i's memory. */
rc_tensor *nn_weights_leaf(rc_graph *g, const nn_weights *w, int i);

/* A GPT-2 shaped decoder: learned positions, pre-LN blocks, gelu (tanh form) MLP,
 * causal attention, LM head tied to the token embedding. */
typedef struct {
    int vocab, max_seq, n_layer, n_head, d_model;
} nn_gpt_config;

/* Fills the table with GPT-2's parameters (HF names, Conv1D weights stored (in, out)). */
int nn_gpt_weights(const nn_gpt_config *c, nn_weights *w);
/* GPT-2's initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 layers),
 * layer-norm weights 1, biases 0. */
void nn_gpt_init(const nn_gpt_config *c, nn_weights *w, uint64_t seed);
/* logits [B, T, vocab] for ids [B, T] (i32); p[i] are the leaves of the table's params */
rc_tensor *nn_gpt_logits(rc_graph *g, const nn_gpt_config *c, rc_tensor *const *p, rc_tensor *ids);

#endif
