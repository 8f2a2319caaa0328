/* tok_models.h - the models, which turn one word (or a whole normalized text) into ids:
 * Hugging Face BPE (tok_bpe.c), SentencePiece BPE (tok_spm_bpe.c) and unigram
 * (tok_unigram.c). The three never call each other; they share the tables of
 * tok_tables.h and the tokenizer object of tok_vocab.h. On an error they return -1, which
 * only means out of memory (the caller names the tokenizer in the message). */
#ifndef REDCO_TEXT_TOK_MODELS_H
#define REDCO_TEXT_TOK_MODELS_H

#include "tok_vocab.h"

/* ---- tok_bpe.c -------------------------------------------------------------------------- */

/* A byte-level word s[0..n) (raw bytes): the one-char tokens of its bytes, then merges. */
int rci_bpe_bytes(const rc_tokenizer *t, rci_tok_work *w, const char *s, size_t n, rci_tok_ids *out);
/* A word s[0..n) for a tokenizer.json BPE model without byte-level: chars, byte
 * fallback, unknowns, then merges. */
int rci_bpe_word(const rc_tokenizer *t, rci_tok_work *w, const char *s, size_t n, rci_tok_ids *out);

/* ---- tok_spm_bpe.c ---------------------------------------------------------------------- */

/* SentencePiece BPE on a text already through SentencePiece's normalizer. */
int rci_spm_bpe_encode(const rc_tokenizer *t, rci_tok_work *w, const char *s, size_t n, rci_tok_ids *out);

/* ---- tok_unigram.c ---------------------------------------------------------------------- */

/* The unigram model (SentencePiece's or tokenizer.json's, by t->model) on s[0..n). */
int rci_unigram_encode(const rc_tokenizer *t, rci_tok_work *w, const char *s, size_t n, rci_tok_ids *out);
/* Adds piece id to the prefix table the lattice walk reads (the loaders call it per piece). */
int rci_unigram_index_piece(rc_tokenizer *t, int32_t id);

#endif
