/* nn.h - parameter tables and the model families, built from graph ops. */
#ifndef REDCO_NN_H
#define REDCO_NN_H

#include "redco.h"
#include "redco/model.h"
#include "redco/safetensors.h"

/* One parameter: its Hugging Face name, shape and place in the flat buffer. */
typedef struct {
    char name[96];
    int ndim;
    int64_t shape[4];
    int64_t offset;               /* elements from the start of the buffer */
    int64_t numel;
} rci_nn_param;

/* All parameters of a model in one flat backend buffer (as llm.c), described by a table.
 * The buffer holds elements of one storage dtype: f32 (the default, a zeroed struct),
 * bf16 or f16; offsets and numel count elements, rci_nn_weights_offset gives bytes. Host
 * code reads and writes a parameter only by copying (read / write convert f32 host values
 * to and from the storage dtype; read_raw / write_raw copy the stored elements). */
typedef struct {
    int n, cap;
    rci_nn_param *p;
    int64_t numel;
    rc_dtype dtype;               /* storage: RC_F32, RC_BF16 or RC_F16 */
    rc_buffer *buf;               /* numel elements of dtype, after rci_nn_weights_alloc */
} rci_nn_weights;

int rci_nn_weights_add(rci_nn_weights *w, const char *name, int ndim, const int64_t *shape);
/* Allocates the zeroed buffer on be once the table is complete. */
int rci_nn_weights_alloc(rci_nn_weights *w, rc_backend *be, rc_error *err);
void rci_nn_weights_free(rci_nn_weights *w);
/* Parameter i copied to / from numel floats of host memory (converted from / to the
 * storage dtype: writing f32 values into bf16 or f16 storage rounds to nearest even). */
int rci_nn_weights_read(const rci_nn_weights *w, int i, float *host, rc_error *err);
int rci_nn_weights_write(rci_nn_weights *w, int i, const float *host, rc_error *err);
/* Parameter i copied as stored: numel elements of w->dtype. */
int rci_nn_weights_read_raw(const rci_nn_weights *w, int i, void *host, rc_error *err);
int rci_nn_weights_write_raw(rci_nn_weights *w, int i, const void *host, rc_error *err);
/* Byte offset of parameter i in the buffer. */
size_t rci_nn_weights_offset(const rci_nn_weights *w, int i);
/* Bytes of the whole buffer (numel elements of dtype). */
size_t rci_nn_weights_bytes(const rci_nn_weights *w);
/* Converts the stored values to dtype dt (f32, bf16, f16) in a new buffer on the same
 * backend (or only sets the dtype when no buffer exists yet). Widening is exact;
 * narrowing rounds to nearest even. */
int rci_nn_weights_convert(rci_nn_weights *w, rc_dtype dt, rc_error *err);
/* index of a parameter by name, -1 when absent */
int rci_nn_weights_find(const rci_nn_weights *w, const char *name);

/* ---- the model families ---------------------------------------------------------------
 * Every family is a table of parameters (Hugging Face names and layouts of its
 * *ForCausalLM / ForConditionalGeneration class) and a function that records the
 * forward pass into a graph. */

/* A GPT-2 configuration of the given sizes with GPT-2's defaults (gelu_new, eps 1e-5,
 * tied head, d_ff = 4 d_model). */
rc_model_config rci_nn_gpt2_config(int vocab, int positions, int layers, int heads, int d_model);
/* Fills w's table with the parameters of the model described by c (validated by
 * rc_config_load or rc_config_preset). */
int rci_nn_model_weights(const rc_model_config *c, rci_nn_weights *w, rc_error *err);
/* Random initialisation: N(0, 0.02) matrices and embeddings, norm weights 1, biases 0,
 * residual output projections of GPT-2 scaled by 1/sqrt(2 layers). */
int rci_nn_model_init(const rc_model_config *c, rci_nn_weights *w, uint64_t seed, rc_error *err);

/* LoRA adapters on some weights of the table: for parameter i, a[i] [r, in] and b[i]
 * [out, r] leaves, or NULL where it has none; that projection's output gains
 * scale (x a^T) b^T (PEFT's LoraLayer). */
typedef struct {
    rc_tensor **a, **b;
    double scale;
} rci_nn_lora_set;

/* The adapters' leaves in g, indexed by the model's table (out->a and out->b malloc'ed: the
 * caller frees them, also after a failure); lora.c. */
struct rc_lora;
int rci_lora_leaves(rc_graph *g, struct rc_lora *l, rci_nn_lora_set *out);
/* The model is going away: the adapters forget it (rc_lora_free then only frees them). */
void rci_lora_detach(struct rc_lora *l);

/* The inputs of one forward pass, in global shapes. */
typedef struct {
    rc_tensor *ids;               /* i32 [B, T]: tokens (T5: decoder input tokens) */
    rc_tensor *enc_ids;           /* T5 only: i32 [B, S] encoder tokens */
    rc_tensor *mask;              /* optional f32 [B, Tk]: 1 for keys to attend to, 0 for padding
                                     (decoder-only: past + new keys; T5: encoder tokens) */
    int past;                     /* decoder-only: length of the key/value cache */
    rc_tensor *const *past_kv;    /* optional: per layer k then v, each [B, KV heads, past, D] */
    rc_tensor **new_kv;           /* optional out: per layer k then v, [B, KV heads, past + T, D] */
    const rci_nn_lora_set *lora;          /* optional adapters (GPT-2 and LLaMA projections) */
} rci_nn_inputs;

/* Records the forward pass; p[i] must be leaves for w's parameters (rci_nn_model_leaves).
 * Returns the logits [B, T, vocab], NULL with the graph's error set on failure. */
rc_tensor *rci_nn_model_logits(rc_graph *g, const rc_model_config *c, const rci_nn_weights *w,
                           rc_tensor *const *p, const rci_nn_inputs *in);
/* Parameter leaves of graph g bound to w's buffer (or unbound when it has none). */
int rci_nn_model_leaves(rc_graph *g, const rci_nn_weights *w, rc_tensor **p);

/* ---- model directories (Hugging Face layout) ----------------------------------------- */

/* Loads DIR/config.json and the weights of DIR (model.safetensors or a sharded index,
 * f32/f64/f16/bf16 converted to dt: f32, bf16 or f16; a tensor already in dt is copied bit
 * for bit) into c and w, newly allocated on be. A parameter missing from
 * the checkpoint, a tensor of the wrong shape, or a checkpoint tensor the model does not
 * use (other than known buffers such as GPT-2's attn.bias) is an error naming the tensor
 * and the file. */
int rci_nn_model_load_dtype(const char *dir, rc_model_config *c, rci_nn_weights *w, rc_backend *be,
                            rc_dtype dt, rc_error *err);
/* rci_nn_model_load_dtype's checks without the values: DIR's config into c, the table of
 * its weights (dtype dt, no buffer) into w, and DIR's checkpoint, open, whose tensors match
 * the table (the same errors); NULL with err set. */
rc_checkpoint *rci_nn_model_open(const char *dir, rc_model_config *c, rci_nn_weights *w, rc_dtype dt,
                                 rc_error *err);
/* Every parameter of w from ck (found by name, its shape checked, converted to w's dtype)
 * into w's buffer, a parameter at a time through one host scratch. */
int rci_nn_weights_load(rci_nn_weights *w, rc_checkpoint *ck, rc_error *err);
/* rci_nn_model_load_dtype in f32 */
int rci_nn_model_load(const char *dir, rc_model_config *c, rci_nn_weights *w, rc_backend *be,
                      rc_error *err);
/* Writes DIR/config.json (torch_dtype: the weights' dtype) and DIR/model.safetensors (the
 * weights' dtype: F32, BF16 or F16, Hugging Face names), creating DIR; each file is
 * written to a temporary name and renamed. */
int rci_nn_model_save(const char *dir, const rc_model_config *c, const rci_nn_weights *w, rc_error *err);

#endif
