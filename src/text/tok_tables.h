/* tok_tables.h - the containers of src/text (tok_tables.c): growable byte and id buffers,
 * the string -> id and (id, id) -> merge hash tables, the min-heap of merge candidates,
 * and the per-call work area with its word cache. Knows nothing of tokenizers: the
 * tokenizer object (tok_vocab.h), the BPE trainer (tok_train.c) and every stage build on
 * these. */
#ifndef REDCO_TEXT_TOK_TABLES_H
#define REDCO_TEXT_TOK_TABLES_H

#include <stddef.h>
#include <stdint.h>

/* ---- growable byte and id buffers ------------------------------------------------------ */

typedef struct {
    char *p;
    size_t len, cap;
} rci_tok_buf;

typedef struct {
    int32_t *p;
    int64_t len, cap;
} rci_tok_ids;

int rci_buf_put(rci_tok_buf *b, const void *s, size_t n);     /* 0, or -1 when out of memory */
int rci_ids_put(rci_tok_ids *v, int32_t id);

/* ---- hash tables ----------------------------------------------------------------------- */

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
} rci_tok_strmap;

/* The value of key s[0..n), or -1 when absent. */
int64_t rci_strmap_get(const rci_tok_strmap *m, const char *s, size_t n);
/* Inserts or overwrites; -1 when out of memory. */
int rci_strmap_set(rci_tok_strmap *m, const char *s, size_t n, int64_t val);
/* Inserts only when absent (keeps the old value); returns the value now stored, or
 * INT64_MIN when out of memory. */
int64_t rci_strmap_add(rci_tok_strmap *m, const char *s, size_t n, int64_t val);
void rci_strmap_free(rci_tok_strmap *m);

/* (id, id) -> (rank, merged id) map for BPE merges. */
typedef struct {
    uint64_t *key;            /* ((uint64_t)a << 32 | b) + 1; 0 marks an empty slot */
    int32_t *rank, *id;
    uint64_t nslot;
    int64_t n;
} rci_tok_pairmap;

/* Inserts or overwrites the merge of (a, b); -1 when out of memory. */
int rci_pairmap_set(rci_tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id);
/* 1 and fills rank and id when the pair merges, else 0. */
int rci_pairmap_get(const rci_tok_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *id);
void rci_pairmap_free(rci_tok_pairmap *m);

/* ---- the work area of one encode call -------------------------------------------------- */

/* work areas reused across words of one encode call (never shared between calls, so
 * encoding with one tokenizer from several threads is safe) */
typedef struct {
    void *sym;                /* a merge model's symbols (its own struct) */
    int64_t sym_cap;
    void *heap;               /* rci_tok_hent */
    int64_t heap_len, heap_cap;
    rci_tok_strmap cache;         /* word -> (offset << 20 | count) into cache_ids */
    rci_tok_ids cache_ids;
    rci_tok_strmap cache2;        /* SentencePiece BPE: unused piece -> length of its left half */
    rci_tok_buf norm, tmp;        /* a segment's normalized text, and scratch */
    rci_tok_ids ids;
    void *lattice;
    int64_t lattice_cap;
} rci_tok_work;

rci_tok_work *rci_work_new(void);
void rci_work_free(rci_tok_work *w);
/* Room for n symbols of size bytes each in w->sym; -1 when out of memory. */
int rci_work_reserve_sym(rci_tok_work *w, int64_t n, size_t size);

/* a heap entry: ordered by (rank, pos); a, b are the caller's */
typedef struct {
    int32_t rank, pos, a, b;
} rci_tok_hent;

/* The min-heap of w->heap (empty it with w->heap_len = 0). */
int rci_heap_push(rci_tok_work *w, rci_tok_hent e);
rci_tok_hent rci_heap_pop(rci_tok_work *w);

/* The word cache of w: the ids of word s[0..n) appended to out (1), none cached (0), or
 * out of memory (-1); and storing them (words over 256 bytes are not cached). */
int rci_work_cache_get(rci_tok_work *w, const char *s, size_t n, rci_tok_ids *out);
int rci_work_cache_put(rci_tok_work *w, const char *s, size_t n, const int32_t *ids, int64_t cnt);

#endif
