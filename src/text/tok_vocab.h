/* tok_vocab.h - the tokenizer object (struct rc_tokenizer) and what tok_vocab.c does with
 * it: the token table (ids, their text and flags), the added tokens, and the finishing
 * every loader ends with. A tokenizer is a pipeline, each stage picked by the file it was
 * loaded from:
 *   added tokens (matched in the raw text first, leftmost-longest)
 *   -> per remaining segment: normalizer -> pre-tokenizer -> model -> ids
 *   -> post-processor (BOS/EOS ids around the whole text when add_special is set).
 * Decoding maps ids back through the decoder of the same family (byte-level or
 * SentencePiece-style). The stages read the fields below; see tokenizer.c for which file
 * holds which stage. */
#ifndef REDCO_TEXT_TOK_VOCAB_H
#define REDCO_TEXT_TOK_VOCAB_H

#include "redco/tokenizer.h"
#include "tok_tables.h"

#include <stddef.h>
#include <stdint.h>

/* ---- the tokenizer --------------------------------------------------------------------- */

enum { TOK_MODEL_BPE = 1, TOK_MODEL_UNIGRAM, TOK_MODEL_SPM_BPE, TOK_MODEL_SPM_UNIGRAM };
enum { TOK_PRE_NONE = 0, TOK_PRE_BYTELEVEL, TOK_PRE_METASPACE };
enum { TOK_DEC_BYTELEVEL = 1, TOK_DEC_SPM, TOK_DEC_HF_METASPACE, TOK_DEC_HF_FALLBACK };
enum { TOK_PREPEND_ALWAYS = 0, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER };

/* per-id flags */
enum {
    TOKF_SPECIAL = 1,         /* dropped by decode when skip_special */
    TOKF_CONTROL = 2,         /* SentencePiece control piece: decodes to nothing */
    TOKF_UNKNOWN = 4,
    TOKF_BYTE = 8,            /* <0xXX> piece: decodes to that byte */
    TOKF_UNUSED = 16,
    TOKF_USER = 32            /* SentencePiece user-defined piece */
};

/* One normalizer step of a tokenizer.json (or the whole SentencePiece normalizer). */
enum {
    NORM_PREPEND = 1,         /* str prepended to a non-empty segment */
    NORM_REPLACE,             /* every occurrence of pattern -> str */
    NORM_REPLACE_RUN,         /* runs of >= min_run copies of the char pattern -> str */
    NORM_PRECOMPILED,         /* Hugging Face Precompiled: charsmap per grapheme cluster */
    NORM_STRIP,               /* strip White_Space: left, right */
    NORM_SPM                  /* SentencePiece's own normalizer (a .model file) */
};

typedef struct {
    const uint32_t *units;    /* Darts double-array units */
    size_t nunits;
    const char *strings;      /* NUL-separated replacement strings */
    size_t nstrings;
} rci_tok_charsmap;

typedef struct {
    int kind;
    char *str;                /* prepend / replacement text */
    char *pattern;            /* replace pattern */
    size_t str_len, pattern_len;
    int min_run;
    int left, right;
    rci_tok_charsmap map;
    uint8_t *map_blob;        /* owns map's memory */
} rci_tok_norm;

typedef struct {
    int32_t id;
    char *text;
    size_t len;
    int special, lstrip, rstrip, single_word;
} rci_tok_added;

struct rc_tokenizer {
    char path[512];           /* the file it came from, for messages */
    int model;                /* TOK_MODEL_* */
    int pre;                  /* TOK_PRE_* */
    int dec;                  /* TOK_DEC_* */

    /* tokens by id: text (the vocabulary's spelling) and flags */
    int64_t n_tokens;
    char *tok_arena;
    size_t tok_arena_len, tok_arena_cap;
    uint64_t *tok_off;
    int32_t *tok_len;         /* -1: no token has this id */
    uint8_t *tok_flags;
    float *score_f;           /* SentencePiece scores (float, as sentencepiece sums them) */
    double *score_d;          /* tokenizer.json unigram scores (f64, as tokenizers sums) */

    rci_tok_strmap vocab;         /* token text -> id (the model's pieces) */
    rci_tok_pairmap merges;       /* BPE (tokenizer.json / vocab.json) */
    int32_t byte_id[256];     /* byte-level: byte -> id of its one-char token, -1 if none */
    int32_t byte_piece[256];  /* <0xXX> piece ids for byte fallback, -1 if none */
    int32_t unk_id;
    int byte_fallback, fuse_unk;

    /* SentencePiece and unigram */
    int32_t *spm_rank;        /* SPM BPE: merge priority of each piece (0 = best) */
    float min_score_f, max_score_f;
    double min_score_d;
    rci_tok_strmap prefixes;      /* unigram: every prefix of a piece -> piece id or -2 */
    int split_meta;           /* text may be cut before each '▁' that follows a non-'▁' */
    char unk_surface[32];
    char **user_pieces;       /* SentencePiece user-defined pieces (matched whole) */
    int n_user;

    /* normalizer, pre-tokenizer options */
    rci_tok_norm *norm;
    int n_norm;
    int spm_dummy_prefix, spm_remove_ws, spm_escape_ws;
    int add_prefix_space;     /* ByteLevel */
    int prepend_scheme;       /* Metaspace */
    int meta_split;           /* Metaspace: split before each '▁' */
    int dec_strip;            /* Strip decoder: leading spaces cut; Metaspace: 1 drops
                                 the '▁' of the first token */

    rci_tok_added *added;
    int n_added;
    int16_t added_first[256][2]; /* per first byte: range [lo, hi) of added_order */
    int *added_order;         /* added tokens by first byte, longest first */

    int32_t *prefix_ids, *suffix_ids;
    int n_prefix, n_suffix;
    int32_t bos, eos, pad;
};

/* ---- tok_vocab.c ------------------------------------------------------------------------ */

/* An empty tokenizer for the file at path (no ids yet); NULL (err set) when out of memory. */
rc_tokenizer *rci_tok_new(const char *path, rc_error *err);
void rci_tok_free(rc_tokenizer *t);
/* Grows the per-id arrays to n entries (new ids have no token yet). */
int rci_tok_alloc_ids(rc_tokenizer *t, int64_t n, rc_error *err);
/* Gives id the text s[0..n) (copied). */
int rci_tok_set_token(rc_tokenizer *t, int32_t id, const char *s, size_t n, rc_error *err);
/* The text of id (tok_len[id] bytes, not NUL-terminated). */
const char *rci_tok_text(const rc_tokenizer *t, int32_t id);
/* The byte XX of a "<0xXX>" token (upper-case hex), else -1. */
int rci_tok_byte_value(const char *s, size_t n);
/* Appends an added token (matched in raw text before normalization). */
int rci_tok_add_added(rc_tokenizer *t, int32_t id, const char *s, size_t n, int special, int lstrip,
                      int rstrip, int single_word, rc_error *err);
/* The id of the token spelled s (added tokens first, then the vocabulary), or -1. */
int32_t rci_tok_find(const rc_tokenizer *t, const char *s);
/* Appends id to the array *arr of *n ids; -1 when out of memory. */
int rci_tok_ids_append(int32_t **arr, int *n, int32_t id);
/* Marks specials and byte pieces, indexes the added tokens, checks the post-processor ids. */
int rci_tok_finish(rc_tokenizer *t, rc_error *err);
/* SentencePiece's output of one piece id for the text s[0..n) it covers: an unknown
 * (id < 0 or unk_id) becomes the <0xXX> pieces of its bytes with byte_fallback, else one
 * unk per run of unknowns (*prev_unk carries the run across calls). */
int rci_spm_put_piece(const rc_tokenizer *t, const char *s, size_t n, int64_t id, int *prev_unk,
                      rci_tok_ids *out);

#endif
