/* redco/safetensors.h - safetensors files and Hugging Face checkpoint directories.
 *
 * The format (https://github.com/huggingface/safetensors):
 *
 *     8 bytes    N, little-endian u64
 *     N bytes    JSON object {"NAME": {"dtype": "F32", "shape": [2, 3],
 *                                      "data_offsets": [BEGIN, END]}, ...,
 *                             "__metadata__": {"KEY": "VALUE", ...}}   (optional)
 *     rest       the data buffer; BEGIN/END are byte offsets into it
 *
 * Reading maps the file into memory and validates the whole header before anything is
 * returned, with the rules of the reference library (safetensors 0.4): N at most 100 MB
 * and within the file; the header valid UTF-8 JSON (spaces may pad it) whose top level is
 * an object; every entry an object with a known dtype string, a shape list of
 * non-negative integers and two integer data_offsets; END - BEGIN = numel * dtype size;
 * and the entries, sorted by BEGIN, tile the buffer exactly: the first begins at 0, each
 * begins where the previous ends, the last ends at the end of the file (no holes, no
 * overlap, no trailing bytes). One rule is stricter than the reference: a name repeated
 * in the header is an error (the reference keeps the last). Errors name the file and the
 * tensor, e.g.
 *     model.safetensors: tensor 'h.0.attn.c_attn.weight': data_offsets [0, 100] outside
 *     the 64-byte buffer
 *
 *     rc_safetensors *f = rc_safetensors_open("model.safetensors", &err);
 *     int i = rc_safetensors_find(f, "wte.weight");
 *     const rc_st_tensor *t = rc_safetensors_info(f, i);   // dtype, shape, numel
 *     rc_safetensors_read_f32(f, i, dst, t->numel, &err);  // F32/F16/BF16/F64 -> f32
 *     rc_safetensors_close(f);
 *
 * Writing produces what the reference library writes: the header padded with spaces to
 * a multiple of 8 bytes (so the buffer starts 8-aligned), tensors stored contiguously in
 * the order given. Files are written to PATH.tmp.PID, flushed, fsync'ed and renamed over
 * PATH, so a crash never leaves a half-written PATH.
 *
 * Checkpoint directories (Hugging Face layout) are either DIR/model.safetensors or
 * DIR/model.safetensors.index.json ({"metadata": {...}, "weight_map": {NAME: FILE}})
 * plus its shards; rc_checkpoint_* opens either and looks names up across shards. */
#ifndef REDCO_SAFETENSORS_H
#define REDCO_SAFETENSORS_H

#include "redco.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- single files ------------------------------------------------------------------- */

typedef struct rc_safetensors rc_safetensors;

/* One tensor of a file; pointers stay valid until the file is closed. */
typedef struct {
    const char *name;
    const char *dtype_name;  /* as in the file: "F32", "F16", "BF16", "F64", "I64", "U8", ... */
    int dtype;               /* the rc_dtype (RC_F32, RC_F16, RC_BF16, RC_F64, RC_I32), or -1
                                for the types redco has no rc_dtype for (I64, U8, BOOL, ...) */
    size_t elem_size;        /* bytes per element */
    int ndim;                /* 0 for a scalar */
    const int64_t *shape;    /* ndim sizes, outermost first */
    int64_t numel;           /* product of shape (1 for a scalar) */
    uint64_t begin, end;     /* data_offsets: bytes [begin, end) of the data buffer */
} rc_st_tensor;

rc_safetensors *rc_safetensors_open(const char *path, rc_error *err);
void rc_safetensors_close(rc_safetensors *f);
const char *rc_safetensors_path(const rc_safetensors *f);
/* Tensors are indexed 0..count-1 in the order of the header. */
int rc_safetensors_count(const rc_safetensors *f);
const rc_st_tensor *rc_safetensors_info(const rc_safetensors *f, int i);
/* Index of the tensor called name, or -1. */
int rc_safetensors_find(const rc_safetensors *f, const char *name);
/* The tensor's bytes inside the mapping (little-endian, possibly not aligned to the
 * element size when another writer did not pad the header). */
const void *rc_safetensors_data(const rc_safetensors *f, int i);
/* "__metadata__": count, i-th key/value, value by key (NULL when absent). */
int rc_safetensors_metadata_count(const rc_safetensors *f);
int rc_safetensors_metadata_at(const rc_safetensors *f, int i, const char **key,
                               const char **value);
const char *rc_safetensors_metadata(const rc_safetensors *f, const char *key);

/* Converts tensor i (F32, F16, BF16 or F64) to n = numel floats in dst. F16 is converted
 * exactly (subnormals, infinities, NaN); BF16 is the upper half of an f32; F64 rounds to
 * nearest. Another dtype, or n != numel, is an error naming the file and tensor. */
int rc_safetensors_read_f32(const rc_safetensors *f, int i, float *dst, int64_t n,
                            rc_error *err);

/* Reads tensor i into n = numel elements of dtype dt at dst: a tensor of that very dtype
 * is copied bit for bit (BF16 into RC_BF16, I32 into RC_I32, ...); F32, F64, BF16 and F16
 * convert between f32, f64, bf16 and f16 (to 16 bits rounding to nearest even, F64
 * through f32). Another pair, or n != numel, is an error naming the file and tensor. */
int rc_safetensors_read(const rc_safetensors *f, int i, rc_dtype dt, void *dst, int64_t n, rc_error *err);
/* The same for elements [first, first + n) of tensor i (flattened, row-major) alone: the
 * file is mapped, so only those bytes are read (ZeRO's shares of a checkpoint). A range
 * outside the tensor is an error naming the file and tensor. */
int rc_safetensors_read_range(const rc_safetensors *f, int i, rc_dtype dt, int64_t first, int64_t n, void *dst,
                              rc_error *err);
/* The safetensors dtype string of an rc_dtype ("F32", "F64", "I32", "BF16", "F16"), NULL
 * for another value. */
const char *rc_st_dtype_name(rc_dtype t);

/* One tensor to write: dtype_name is a safetensors dtype string ("F32", "F16", "BF16", ...)
 * and data points at numel * size bytes in that type's little-endian layout (bf16 and f16
 * tensors: their 16-bit words, e.g. a plan's rc_plan_read of an RC_BF16 node). */
typedef struct {
    const char *name;
    const char *dtype_name;
    int ndim;
    const int64_t *shape;
    const void *data;
} rc_st_entry;

/* Writes n tensors with metadata: n_meta key/value string pairs meta[2k], meta[2k+1]
 * (meta may be NULL when n_meta is 0). Names must be unique and not "__metadata__". */
int rc_safetensors_write_entries(const char *path, int n, const rc_st_entry *t, int n_meta,
                                 const char *const *meta, rc_error *err);
/* Writes like rc_safetensors_write_entries, but an entry whose data is NULL gets its bytes
 * from source(ctx, i, &data, err) just before they are written (tensor by tensor: model
 * shards gathered one tensor at a time); the pointer must stay valid until the next call.
 * A source that fails (-1 with err set) abandons the file. */
typedef int (*rc_st_source)(void *ctx, int i, const void **data, rc_error *err);
int rc_safetensors_write_from(const char *path, int n, const rc_st_entry *t, int n_meta,
                              const char *const *meta, rc_st_source source, void *ctx, rc_error *err);
/* The common case: n F32 tensors, tensor k named names[k] with shape shapes[k][0..ndims[k]). */
int rc_safetensors_write(const char *path, int n, const char *const *names, const int *ndims,
                         const int64_t *const *shapes, const float *const *data, int n_meta,
                         const char *const *meta, rc_error *err);

/* Size in bytes of a safetensors dtype string's element, 0 when unknown. */
size_t rc_st_dtype_size(const char *dtype_name);

/* ---- checkpoint directories --------------------------------------------------------- */

typedef struct rc_checkpoint rc_checkpoint;

/* Opens PATH: a directory holding model.safetensors (preferred) or
 * model.safetensors.index.json, or a path naming such a .safetensors file or index.json
 * directly. Every shard named by the index's weight_map is opened once and must hold the
 * tensors the map assigns to it; a missing shard, a name mapped to a file that lacks it,
 * a name present in two files, or an index that is not {"weight_map": {str: str}} is an
 * error naming the file. */
rc_checkpoint *rc_checkpoint_open(const char *path, rc_error *err);
void rc_checkpoint_close(rc_checkpoint *ck);

/* Tensors across all files: count, and the k-th name (files in the order first named by
 * the weight map, tensors in header order). */
int rc_checkpoint_count(const rc_checkpoint *ck);
const char *rc_checkpoint_name(const rc_checkpoint *ck, int k);
/* The file and index inside it of the k-th tensor. */
int rc_checkpoint_entry(const rc_checkpoint *ck, int k, rc_safetensors **file, int *index);

/* Looks a parameter name up and marks the tensor used. Candidates, the first present wins:
 *   1. the name as given;
 *   2. for each prefix P of "model.decoder.", "transformer.", "model." (in that order)
 *      that the name starts with: the name without P
 *      ("transformer.h.0.ln_1.weight" finds "h.0.ln_1.weight"; "model.decoder.x" tries
 *      "x", then "decoder.x");
 *   3. for each P in the same order: P + name ("h.0.ln_1.weight" finds
 *      "transformer.h.0.ln_1.weight"; "layers.0.fc1.weight" finds
 *      "model.decoder.layers.0.fc1.weight").
 * Returns the checkpoint-wide index k (>= 0) and sets *file / *index (either may be
 * NULL), or -1 when no candidate exists (not an error: err is untouched). */
int rc_checkpoint_find(rc_checkpoint *ck, const char *name, rc_safetensors **file, int *index);
/* 1 when the k-th tensor was returned by rc_checkpoint_find. */
int rc_checkpoint_used(const rc_checkpoint *ck, int k);
/* 1 for the names of non-parameter buffers some Hugging Face checkpoints carry: the causal
 * masks of GPT-2 / GPT-J attention (names ending ".attn.bias", ".attn.masked_bias",
 * ".crossattention.bias", ".crossattention.masked_bias") and rotary tables (ending
 * ".inv_freq", ".cos_cached", ".sin_cached"). GPT-2's real parameters
 * "attn.c_attn.bias" / "attn.c_proj.bias" are not matched. */
int rc_checkpoint_is_known_buffer(const char *name);
/* Number of tensors neither used nor known buffers. When there are any, sets err
 * (RC_ERR_FORMAT) to e.g. "ckpt/model.safetensors: 2 tensors not used by the model:
 * 'foo.weight', 'bar.bias'" (the first few named) and returns their count; 0 otherwise. */
int rc_checkpoint_check_unused(const rc_checkpoint *ck, rc_error *err);
/* The directory or file the checkpoint was opened from. */
const char *rc_checkpoint_path(const rc_checkpoint *ck);

#ifdef __cplusplus
}
#endif

#endif
