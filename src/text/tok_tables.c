/* tok_tables.c - the containers every part of src/text builds on: growable byte and id
 * buffers, an open-addressing string -> int64 map (keys copied into an arena), the
 * (id, id) -> (rank, merged id) map of BPE merges, and the work area of one encode call
 * (symbols, a min-heap of merge candidates ordered by rank then position, a word cache,
 * scratch buffers). It calls nothing else in src/text; see tokenizer.c for the layering. */
#include "tok_tables.h"

#include <stdlib.h>
#include <string.h>

/* ---- buffers ------------------------------------------------------------------------- */

int rci_buf_put(rci_tok_buf *b, const void *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int rci_ids_put(rci_tok_ids *v, int32_t id)
{
    if (v->len == v->cap) {
        int64_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->p, (size_t)cap * sizeof *p);
        if (!p) return -1;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->len++] = id;
    return 0;
}

/* ---- hash tables ----------------------------------------------------------------------- */

static uint32_t tok_hash(const char *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, s + i, 8);
        h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 29;
    }
    uint64_t v = 0;
    for (size_t k = 0; i < n; i++, k++) v |= (uint64_t)(unsigned char)s[i] << (8 * k);
    h = (h ^ v) * 0x94D049BB133111EBull;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return (uint32_t)(h >> 32);
}

static int64_t strmap_find(const rci_tok_strmap *m, const char *s, size_t n, uint32_t h)
{
    uint64_t i = h & (m->nslot - 1);
    for (;;) {
        int64_t e = m->slot[i];
        if (e < 0) return -1 - (int64_t)i;
        if (m->hash[e] == h && m->key_len[e] == n && !memcmp(m->arena + m->key_off[e], s, n))
            return e;
        i = (i + 1) & (m->nslot - 1);
    }
}

int64_t rci_strmap_get(const rci_tok_strmap *m, const char *s, size_t n)
{
    if (!m->nslot) return -1;
    int64_t e = strmap_find(m, s, n, tok_hash(s, n));
    return e < 0 ? -1 : m->val[e];
}

static int strmap_grow(rci_tok_strmap *m)
{
    uint64_t nslot = m->nslot ? m->nslot * 2 : 64;
    int64_t *slot = malloc(nslot * sizeof *slot);
    if (!slot) return -1;
    for (uint64_t i = 0; i < nslot; i++) slot[i] = -1;
    for (int64_t e = 0; e < m->n; e++) {
        uint64_t i = m->hash[e] & (nslot - 1);
        while (slot[i] >= 0) i = (i + 1) & (nslot - 1);
        slot[i] = e;
    }
    free(m->slot);
    m->slot = slot;
    m->nslot = nslot;
    return 0;
}

static int64_t strmap_insert(rci_tok_strmap *m, const char *s, size_t n, int64_t val, int replace)
{
    if ((uint64_t)(m->n + 1) * 2 > m->nslot && strmap_grow(m)) return INT64_MIN;
    uint32_t h = tok_hash(s, n);
    int64_t e = strmap_find(m, s, n, h);
    if (e >= 0) {
        if (replace) m->val[e] = val;
        return m->val[e];
    }
    uint64_t i = (uint64_t)(-1 - e);
    if (m->n == m->cap) {
        int64_t cap = m->cap ? m->cap * 2 : 64;
        uint64_t *off = realloc(m->key_off, (size_t)cap * sizeof *off);
        if (off) m->key_off = off;
        uint32_t *len = realloc(m->key_len, (size_t)cap * sizeof *len);
        if (len) m->key_len = len;
        uint32_t *hs = realloc(m->hash, (size_t)cap * sizeof *hs);
        if (hs) m->hash = hs;
        int64_t *v = realloc(m->val, (size_t)cap * sizeof *v);
        if (v) m->val = v;
        if (!off || !len || !hs || !v) return INT64_MIN;
        m->cap = cap;
    }
    if (m->arena_len + n + 1 > m->arena_cap) {
        size_t cap = m->arena_cap ? m->arena_cap : 1024;
        while (cap < m->arena_len + n + 1) cap *= 2;
        char *a = realloc(m->arena, cap);
        if (!a) return INT64_MIN;
        m->arena = a;
        m->arena_cap = cap;
    }
    if (n) memcpy(m->arena + m->arena_len, s, n);
    m->key_off[m->n] = m->arena_len;
    m->arena_len += n;
    m->key_len[m->n] = (uint32_t)n;
    m->hash[m->n] = h;
    m->val[m->n] = val;
    m->slot[i] = m->n++;
    return val;
}

int rci_strmap_set(rci_tok_strmap *m, const char *s, size_t n, int64_t val)
{
    return strmap_insert(m, s, n, val, 1) == INT64_MIN ? -1 : 0;
}

int64_t rci_strmap_add(rci_tok_strmap *m, const char *s, size_t n, int64_t val)
{
    return strmap_insert(m, s, n, val, 0);
}

void rci_strmap_free(rci_tok_strmap *m)
{
    free(m->arena);
    free(m->key_off);
    free(m->key_len);
    free(m->hash);
    free(m->val);
    free(m->slot);
    memset(m, 0, sizeof *m);
}

static uint64_t pair_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    k ^= k >> 33;
    return k;
}

int rci_pairmap_set(rci_tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id)
{
    if ((uint64_t)(m->n + 1) * 2 > m->nslot) {
        uint64_t nslot = m->nslot ? m->nslot * 2 : 1024;
        uint64_t *key = calloc(nslot, sizeof *key);
        int32_t *r = malloc(nslot * sizeof *r), *d = malloc(nslot * sizeof *d);
        if (!key || !r || !d) {
            free(key);
            free(r);
            free(d);
            return -1;
        }
        for (uint64_t i = 0; i < m->nslot; i++) {
            if (!m->key[i]) continue;
            uint64_t j = pair_hash(m->key[i]) & (nslot - 1);
            while (key[j]) j = (j + 1) & (nslot - 1);
            key[j] = m->key[i];
            r[j] = m->rank[i];
            d[j] = m->id[i];
        }
        free(m->key);
        free(m->rank);
        free(m->id);
        m->key = key;
        m->rank = r;
        m->id = d;
        m->nslot = nslot;
    }
    uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    uint64_t i = pair_hash(k) & (m->nslot - 1);
    while (m->key[i] && m->key[i] != k) i = (i + 1) & (m->nslot - 1);
    if (!m->key[i]) m->n++;
    m->key[i] = k;
    m->rank[i] = rank;
    m->id[i] = id;
    return 0;
}

int rci_pairmap_get(const rci_tok_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *id)
{
    if (!m->nslot) return 0;
    uint64_t k = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    uint64_t i = pair_hash(k) & (m->nslot - 1);
    while (m->key[i]) {
        if (m->key[i] == k) {
            *rank = m->rank[i];
            *id = m->id[i];
            return 1;
        }
        i = (i + 1) & (m->nslot - 1);
    }
    return 0;
}

void rci_pairmap_free(rci_tok_pairmap *m)
{
    free(m->key);
    free(m->rank);
    free(m->id);
    memset(m, 0, sizeof *m);
}

/* ---- the work area ---------------------------------------------------------------------- */

rci_tok_work *rci_work_new(void)
{
    return calloc(1, sizeof(rci_tok_work));
}

void rci_work_free(rci_tok_work *w)
{
    if (!w) return;
    free(w->sym);
    free(w->heap);
    rci_strmap_free(&w->cache);
    rci_strmap_free(&w->cache2);
    free(w->cache_ids.p);
    free(w->tmp.p);
    free(w->norm.p);
    free(w->ids.p);
    free(w->lattice);
    free(w);
}

int rci_work_reserve_sym(rci_tok_work *w, int64_t n, size_t size)
{
    if (n <= w->sym_cap) return 0;
    void *p = realloc(w->sym, (size_t)n * size);
    if (!p) return -1;
    w->sym = p;
    w->sym_cap = n;
    return 0;
}

static int heap_less(const rci_tok_hent *a, const rci_tok_hent *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

int rci_heap_push(rci_tok_work *w, rci_tok_hent e)
{
    if (w->heap_len == w->heap_cap) {
        int64_t cap = w->heap_cap ? w->heap_cap * 2 : 256;
        rci_tok_hent *h = realloc(w->heap, (size_t)cap * sizeof *h);
        if (!h) return -1;
        w->heap = h;
        w->heap_cap = cap;
    }
    rci_tok_hent *h = w->heap;
    int64_t i = w->heap_len++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!heap_less(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
    return 0;
}

rci_tok_hent rci_heap_pop(rci_tok_work *w)
{
    rci_tok_hent *h = w->heap;
    rci_tok_hent top = h[0], last = h[--w->heap_len];
    int64_t i = 0, n = w->heap_len;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (n > 0) h[i] = last;
    return top;
}

enum { CACHE_MAX_WORD = 256 };

/* The cached ids of a word, appended to out: 1 when found, 0 when not. */
int rci_work_cache_get(rci_tok_work *w, const char *s, size_t n, rci_tok_ids *out)
{
    if (n > CACHE_MAX_WORD) return 0;
    int64_t v = rci_strmap_get(&w->cache, s, n);
    if (v < 0) return 0;
    int64_t off = v >> 20, cnt = v & ((1 << 20) - 1);
    for (int64_t i = 0; i < cnt; i++)
        if (rci_ids_put(out, w->cache_ids.p[off + i])) return -1;
    return 1;
}

int rci_work_cache_put(rci_tok_work *w, const char *s, size_t n, const int32_t *ids, int64_t cnt)
{
    if (n > CACHE_MAX_WORD || cnt >= (1 << 20)) return 0;
    int64_t off = w->cache_ids.len;
    for (int64_t i = 0; i < cnt; i++)
        if (rci_ids_put(&w->cache_ids, ids[i])) return -1;
    return rci_strmap_set(&w->cache, s, n, off << 20 | cnt);
}
