/* tokenizer_internal.h - what tokenizer.c, tok_bpe.c, tok_spm.c and unicode.c share.
 *
 * A tokenizer is a pipeline, each stage picked by the file it was loaded from:
 *   added tokens (matched in the raw text first, leftmost-longest)
 *   -> per remaining segment: normalizer -> pre-tokenizer -> model -> ids
 *   -> post-processor (BOS/EOS ids around the whole text when add_special is set).
 * Decoding maps ids back through the decoder of the same family (byte-level or
 * SentencePiece-style). */
#ifndef REDCO_TOKENIZER_INTERNAL_H
#define REDCO_TOKENIZER_INTERNAL_H

#include "redco/tokenizer.h"

#include <stddef.h>
#include <stdint.h>

/* ---- unicode.c ------------------------------------------------------------------------ */

enum { UNI_OTHER = 0, UNI_LETTER = 1, UNI_NUMBER = 2, UNI_SPACE = 3 };

/* Decodes one UTF-8 character at s[0..n): its length (1-4), or 0 when the bytes there are
 * not valid UTF-8 (overlong, surrogate, past U+10FFFF, truncated). */
int rci_utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Byte offset of the first invalid UTF-8 sequence, or n when all of s is valid. */
size_t rci_utf8_check(const char *s, size_t n);
/* Length of the UTF-8 character starting with byte c (1 for a stray byte). */
int rci_utf8_len(unsigned char c);
/* Writes cp as UTF-8 into out (4 bytes room); returns the length. */
int rci_utf8_encode(uint32_t cp, char *out);
/* The regex class (UNI_*) of a code point: \p{L}, \p{N}, White_Space, or other. */
int rci_uni_class(uint32_t cp);
/* Length in bytes of the extended grapheme cluster (UAX #29) that starts s[0..n); s valid. */
size_t rci_uni_grapheme_len(const char *s, size_t n);

/* ---- growable byte and id buffers ------------------------------------------------------ */

typedef struct {
    char *p;
    size_t len, cap;
} tok_buf;

typedef struct {
    int32_t *p;
    int64_t len, cap;
} tok_ids;

int rci_buf_put(tok_buf *b, const void *s, size_t n);     /* 0, or -1 when out of memory */
int rci_ids_put(tok_ids *v, int32_t id);

/* ---- hash tables (tokenizer.c) --------------------------------------------------------- */

/* String -> int64 map. Keys are copied into an arena. */
typedef struct {
    char *arena;
    size_t arena_len, arena_cap;
    uint64_t *key_off;
    uint32_t *key_len;
    uint32_t *hash;
    int64_t *val;
    int64_t n, cap;
    int64_t *slot;            /* entry index, -1 empty; nslot is a power of two */
    uint64_t nslot;
} tok_strmap;

/* The value of key s[0..n), or -1 when absent. */
int64_t rci_strmap_get(const tok_strmap *m, const char *s, size_t n);
/* Inserts or overwrites; -1 when out of memory. */
int rci_strmap_set(tok_strmap *m, const char *s, size_t n, int64_t val);
/* Inserts only when absent (keeps the old value); returns the value now stored, or
 * INT64_MIN when out of memory. */
int64_t rci_strmap_add(tok_strmap *m, const char *s, size_t n, int64_t val);
void rci_strmap_free(tok_strmap *m);

/* (id, id) -> (rank, merged id) map for BPE merges. */
typedef struct {
    uint64_t *key;            /* ((uint64_t)a << 32 | b) + 1; 0 marks an empty slot */
    int32_t *rank, *id;
    uint64_t nslot;
    int64_t n;
} tok_pairmap;

/* 1 and fills rank and id when the pair merges, else 0. */
int rci_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *id);

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
} tok_charsmap;

typedef struct {
    int kind;
    char *str;                /* prepend / replacement text */
    char *pattern;            /* replace pattern */
    size_t str_len, pattern_len;
    int min_run;
    int left, right;
    tok_charsmap map;
    uint8_t *map_blob;        /* owns map's memory */
} tok_norm;

typedef struct {
    int32_t id;
    char *text;
    size_t len;
    int special, lstrip, rstrip, single_word;
} tok_added;

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

    tok_strmap vocab;         /* token text -> id (the model's pieces) */
    tok_pairmap merges;       /* BPE (tokenizer.json / vocab.json) */
    int32_t byte_id[256];     /* byte-level: byte -> id of its one-char token, -1 if none */
    int32_t byte_piece[256];  /* <0xXX> piece ids for byte fallback, -1 if none */
    int32_t unk_id;
    int byte_fallback, fuse_unk;

    /* SentencePiece and unigram */
    int32_t *spm_rank;        /* SPM BPE: merge priority of each piece (0 = best) */
    float min_score_f, max_score_f;
    double min_score_d;
    tok_strmap prefixes;      /* unigram: every prefix of a piece -> piece id or -2 */
    int split_meta;           /* text may be cut before each '▁' that follows a non-'▁' */
    char unk_surface[32];
    char **user_pieces;       /* SentencePiece user-defined pieces (matched whole) */
    int n_user;

    /* normalizer, pre-tokenizer options */
    tok_norm *norm;
    int n_norm;
    int spm_dummy_prefix, spm_remove_ws, spm_escape_ws;
    int add_prefix_space;     /* ByteLevel */
    int prepend_scheme;       /* Metaspace */
    int meta_split;           /* Metaspace: split before each '▁' */
    int dec_strip;            /* Strip decoder: leading spaces cut; Metaspace: 1 drops
                                 the '▁' of the first token */

    tok_added *added;
    int n_added;
    int16_t added_first[256][2]; /* per first byte: range [lo, hi) of added_order */
    int *added_order;         /* added tokens by first byte, longest first */

    int32_t *prefix_ids, *suffix_ids;
    int n_prefix, n_suffix;
    int32_t bos, eos, pad;
};

/* tokenizer.c */
int rci_tok_alloc_ids(rc_tokenizer *t, int64_t n, rc_error *err);
int rci_tok_set_token(rc_tokenizer *t, int32_t id, const char *s, size_t n, rc_error *err);
int rci_tok_finish(rc_tokenizer *t, rc_error *err);
rc_tokenizer *rci_tok_new(const char *path, rc_error *err);
int rci_tok_read_file(const char *path, char **data, size_t *len, rc_error *err);
int rci_tok_ids_append(int32_t **arr, int *n, int32_t id);
/* The byte XX of a "<0xXX>" token (upper-case hex), else -1. */
int rci_tok_byte_value(const char *s, size_t n);
/* bos/eos/pad from tokenizer_config.json / special_tokens_map.json in dir (when one
 * exists it decides: tokens it does not name are -1); add_bos_token / add_eos_token into
 * add_bos / add_eos (-1 when unset). Returns 1 when a config was read, 0 when there is
 * none, -1 (err set) when one is not a JSON object. */
int rci_tok_read_configs(rc_tokenizer *t, const char *dir, int *add_bos, int *add_eos, rc_error *err);

/* tok_bpe.c: byte-level pre-tokenization and BPE merging */
/* Calls fn(start, end) for every piece of the GPT-2 pattern over valid UTF-8 s[0..n). */
typedef int (*tok_piece_fn)(void *ctx, size_t start, size_t end);
int rci_bytelevel_split(const char *s, size_t n, tok_piece_fn fn, void *ctx);
void rci_bytelevel_map(int unicode_of_byte[256]);
/* BPE over one word of symbol ids (tokenizer.json / vocab.json semantics); ids appended. */
typedef struct tok_work tok_work;
tok_work *rci_work_new(void);
void rci_work_free(tok_work *w);
/* Encodes one normalized segment with the pre-tokenizer and model of t. */
int rci_tok_encode_segment(const rc_tokenizer *t, tok_work *w, const char *s, size_t n,
                       int first, tok_ids *out, rc_error *err);

/* tok_spm.c: SentencePiece models, normalizers, unigram */
rc_tokenizer *rci_spm_load(const char *path, rc_error *err);
int rci_charsmap_init(tok_charsmap *m, uint8_t *blob, size_t n, const char *path,
                  rc_error *err);
int rci_spm_normalize(const rc_tokenizer *t, const char *s, size_t n, tok_buf *out);
int rci_precompiled_normalize(const tok_charsmap *m, const char *s, size_t n, tok_buf *out);
int rci_spm_bpe_encode(const rc_tokenizer *t, tok_work *w, const char *s, size_t n, tok_ids *out);
int rci_unigram_encode(const rc_tokenizer *t, tok_work *w, const char *s, size_t n, tok_ids *out);
int rci_meta_check_split(rc_tokenizer *t);

/* a heap entry: ordered by (rank, pos); a, b are the caller's */
typedef struct {
    int32_t rank, pos, a, b;
} tok_hent;

int rci_heap_push(tok_work *w, tok_hent e);
tok_hent rci_heap_pop(tok_work *w);

/* work areas reused across words of one encode call (never shared between calls, so
 * encoding with one tokenizer from several threads is safe) */
struct tok_work {
    void *sym;                /* BPE symbols */
    int64_t sym_cap;
    void *heap;
    int64_t heap_len, heap_cap;
    tok_strmap cache;         /* word -> (offset << 20 | count) into cache_ids */
    tok_ids cache_ids;
    tok_strmap cache2;        /* SentencePiece BPE: unused piece -> length of its left half */
    tok_buf norm, tmp;        /* a segment's normalized text, and scratch */
    tok_ids ids;
    void *lattice;
    int64_t lattice_cap;
};

#endif
