/* tok_pipeline.h - what the public entry points of tokenizer.c hand their work to: the
 * loaders (tok_load_hf.c, tok_load_spm.c), the encode pipeline (tok_encode.c) and the
 * decoders (tok_decode.c). None of these four files calls another of them. */
#ifndef REDCO_TEXT_TOK_PIPELINE_H
#define REDCO_TEXT_TOK_PIPELINE_H

#include "tok_vocab.h"

/* ---- tok_load_hf.c ---------------------------------------------------------------------- */

/* A tokenizer.json; NULL (err set) when it cannot be read or is not supported. */
rc_tokenizer *rci_tok_load_json(const char *path, rc_error *err);
/* A vocab.json + merges.txt pair (byte-level BPE). */
rc_tokenizer *rci_tok_load_vocab_merges(const char *vocab_path, const char *merges_path, rc_error *err);

/* ---- tok_load_spm.c --------------------------------------------------------------------- */

/* A SentencePiece .model file. */
rc_tokenizer *rci_tok_load_spm(const char *path, rc_error *err);

/* ---- tok_encode.c ----------------------------------------------------------------------- */

/* The ids of valid UTF-8 text[0..len) appended to out (with the post-processor's ids
 * around them when add_special is set); -1 with err set on failure. */
int rci_tok_encode(const rc_tokenizer *t, const char *text, size_t len, int add_special, rci_tok_ids *out,
                   rc_error *err);

/* ---- tok_decode.c ----------------------------------------------------------------------- */

/* The text of ids[0..n) (each a token of t) appended to out; -1 when out of memory. */
int rci_tok_decode(const rc_tokenizer *t, const int32_t *ids, int64_t n, int skip_special, rci_tok_buf *out);

#endif
