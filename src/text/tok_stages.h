/* tok_stages.h - the text stages before a model: the normalizers (tok_normalize.c) and the
 * pre-tokenizers (tok_pretok.c). They read the tokenizer's options but call no model and
 * no loader; the models (tok_models.h) and the pipeline (tok_pipeline.h) build on them. */
#ifndef REDCO_TEXT_TOK_STAGES_H
#define REDCO_TEXT_TOK_STAGES_H

#include "tok_vocab.h"

/* ---- tok_normalize.c -------------------------------------------------------------------- */

/* Reads a precompiled charsmap out of blob[0..n) (the blob stays owned by the caller and
 * must outlive m; its trie part is rewritten in host order). path: for messages. */
int rci_charsmap_init(rci_tok_charsmap *m, uint8_t *blob, size_t n, const char *path, rc_error *err);
/* SentencePiece's normalizer (t->norm[0] of a .model tokenizer) on s[0..n), appended to out. */
int rci_spm_normalize(const rc_tokenizer *t, const char *s, size_t n, rci_tok_buf *out);
/* The tokenizer.json normalizers of t on s[0..n) into out (tmp: scratch). */
int rci_hf_normalize(const rc_tokenizer *t, const char *s, size_t n, rci_tok_buf *out, rci_tok_buf *tmp);

/* ---- tok_pretok.c ----------------------------------------------------------------------- */

/* A splitter's report of one word s[start..end); nonzero stops the split. */
typedef int (*rci_tok_piece_fn)(void *ctx, size_t start, size_t end);

/* The ctx of a rci_tok_piece_fn that encodes each word: the tokenizer, the call's work area,
 * the text the offsets point into, and the ids to append to. */
typedef struct {
    const rc_tokenizer *t;
    rci_tok_work *w;
    const char *s;
    rci_tok_ids *out;
} rci_tok_word_ctx;

/* The byte-level alphabet: the code point that stands for each byte. */
void rci_bytelevel_map(int unicode_of_byte[256]);
/* Appends the byte-level spelling of s[0..n) to out. */
int rci_bytelevel_spell(const char *s, size_t n, rci_tok_buf *out);
/* Calls fn(start, end) for every piece of the GPT-2 pattern over valid UTF-8 s[0..n). */
int rci_bytelevel_split(const char *s, size_t n, rci_tok_piece_fn fn, void *ctx);
/* Metaspace: s[0..n) with spaces spelled U+2581 (and one prepended) appended to out. */
int rci_metaspace_spell(const char *s, size_t n, int prepend, rci_tok_buf *out);
/* Calls fn(start, end) for the words of a U+2581-spelled text: cut before each U+2581
 * that follows another char (split_all), or that follows a char other than U+2581. */
int rci_meta_words(const char *s, size_t n, int split_all, rci_tok_piece_fn fn, void *ctx);
/* Sets t->split_meta: cutting before each U+2581 that follows a char other than U+2581 is
 * exact for t's vocabulary (no piece holds such a U+2581 inside, and U+2581 is a piece). */
int rci_meta_check_split(rc_tokenizer *t);

#endif
