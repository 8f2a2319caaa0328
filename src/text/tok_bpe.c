/* tok_bpe.c - byte-level pre-tokenization (the GPT-2 pattern) and BPE merging as Hugging
 * Face tokenizers does it, plus the pre-tokenizer dispatch of tokenizer.json models.
 *
 * GPT-2 pattern: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * tried left to right at each position, first alternative that matches wins. \s is
 * White_Space. The byte-level alphabet maps bytes 33-126, 161-172, 174-255 to themselves
 * and the other 68 bytes, in order, to U+0100.. .
 *
 * BPE merging (per word): a min-heap of adjacent pairs keyed (rank, position); the pair on
 * top merges when it still holds the same two symbols; the merged symbol then pairs with
 * its new neighbours. This is the order of the reference: lowest rank first, leftmost
 * first among equal ranks. */
#include "tokenizer_internal.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

void rci_bytelevel_map(int uni[256])
{
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        uni[b] = keep ? b : next++;
    }
}

/* ---- the GPT-2 pattern ------------------------------------------------------------------ */

static int class_at(const char *s, size_t n, size_t pos, size_t *len)
{
    uint32_t cp = 0;
    int l = rci_utf8_decode(s + pos, n - pos, &cp);
    if (l == 0) l = 1;                    /* input was validated; keep moving anyway */
    *len = (size_t)l;
    return rci_uni_class(cp);
}

/* End of the run of characters starting at pos whose class is (or, with invert, is not)
 * one of the classes in mask. */
static size_t run_end(const char *s, size_t n, size_t pos, int mask, int invert)
{
    while (pos < n) {
        size_t l;
        int c = class_at(s, n, pos, &l);
        int in = (mask >> c) & 1;
        if (in == invert) break;
        pos += l;
    }
    return pos;
}

/* Length of the contraction ('s 't 're 've 'm 'll 'd) at s[pos] == '\'', or 0. */
static size_t contraction(const char *s, size_t n, size_t pos)
{
    size_t r = n - pos;
    if (r >= 2 && (s[pos + 1] == 's' || s[pos + 1] == 't' || s[pos + 1] == 'm' || s[pos + 1] == 'd')) return 2;
    if (r >= 3 && ((s[pos + 1] == 'r' && s[pos + 2] == 'e') || (s[pos + 1] == 'v' && s[pos + 2] == 'e') ||
                   (s[pos + 1] == 'l' && s[pos + 2] == 'l')))
        return 3;
    return 0;
}

int rci_bytelevel_split(const char *s, size_t n, tok_piece_fn fn, void *ctx)
{
    const int L = 1 << UNI_LETTER, N = 1 << UNI_NUMBER, S = 1 << UNI_SPACE;
    size_t pos = 0;
    while (pos < n) {
        size_t end, l;
        if (s[pos] == '\'' && (end = contraction(s, n, pos)) > 0) {
            if (fn(ctx, pos, pos + end)) return -1;
            pos += end;
            continue;
        }
        int c = class_at(s, n, pos, &l);
        size_t q = pos;                   /* where the run after an optional ' ' starts */
        int cq = c;
        if (s[pos] == ' ' && pos + 1 < n) {
            size_t l2;
            cq = class_at(s, n, pos + 1, &l2);
            q = pos + 1;
            if (cq == UNI_SPACE) {        /* ' ' then more space: the space rules below */
                q = pos;
                cq = c;
            }
        }
        if (cq == UNI_LETTER)
            end = run_end(s, n, q, L, 0);
        else if (cq == UNI_NUMBER)
            end = run_end(s, n, q, N, 0);
        else if (cq != UNI_SPACE)
            end = run_end(s, n, q, L | N | S, 1);
        else {
            /* \s+(?!\S): the whole run at the end of text, else all but its last char
             * (when that leaves one); otherwise \s+ takes the single char. */
            end = run_end(s, n, pos, S, 0);
            if (end < n) {
                size_t last = end - 1;
                while (last > pos && ((unsigned char)s[last] & 0xC0) == 0x80) last--;
                if (last > pos) end = last;
            }
        }
        if (fn(ctx, pos, end)) return -1;
        pos = end;
    }
    return 0;
}

/* ---- work areas ------------------------------------------------------------------------------ */

typedef struct {
    int32_t id, prev, next;
} bpe_sym;

tok_work *rci_work_new(void)
{
    return calloc(1, sizeof(tok_work));
}

void rci_work_free(tok_work *w)
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

static int heap_less(const tok_hent *a, const tok_hent *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

int rci_heap_push(tok_work *w, tok_hent e)
{
    if (w->heap_len == w->heap_cap) {
        int64_t cap = w->heap_cap ? w->heap_cap * 2 : 256;
        tok_hent *h = realloc(w->heap, (size_t)cap * sizeof *h);
        if (!h) return -1;
        w->heap = h;
        w->heap_cap = cap;
    }
    tok_hent *h = w->heap;
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

tok_hent rci_heap_pop(tok_work *w)
{
    tok_hent *h = w->heap;
    tok_hent top = h[0], last = h[--w->heap_len];
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

static int sym_reserve(tok_work *w, int64_t n, size_t size)
{
    if (n <= w->sym_cap) return 0;
    void *p = realloc(w->sym, (size_t)n * size);
    if (!p) return -1;
    w->sym = p;
    w->sym_cap = n;
    return 0;
}

/* ---- BPE ----------------------------------------------------------------------------- */

static int push_pair(const rc_tokenizer *t, tok_work *w, const bpe_sym *sym, int32_t left)
{
    int32_t right = sym[left].next, rank, id;
    if (right < 0 || !rci_pairmap_get(&t->merges, sym[left].id, sym[right].id, &rank, &id)) return 0;
    tok_hent e = {rank, left, id, 0};
    return rci_heap_push(w, e);
}

static int bpe_merge_ids(const rc_tokenizer *t, tok_work *w, const int32_t *ids, int64_t n, tok_ids *out)
{
    if (n == 1) return rci_ids_put(out, ids[0]);
    if (sym_reserve(w, n, sizeof(bpe_sym))) return -1;
    bpe_sym *sym = w->sym;
    for (int64_t i = 0; i < n; i++) {
        sym[i].id = ids[i];
        sym[i].prev = (int32_t)i - 1;
        sym[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    w->heap_len = 0;
    for (int64_t i = 0; i + 1 < n; i++)
        if (push_pair(t, w, sym, (int32_t)i)) return -1;
    while (w->heap_len) {
        tok_hent e = rci_heap_pop(w);
        int32_t left = e.pos, right = sym[left].next, rank, id;
        if (sym[left].id < 0 || right < 0) continue;
        if (!rci_pairmap_get(&t->merges, sym[left].id, sym[right].id, &rank, &id) || id != e.a) continue;
        sym[left].id = id;
        sym[right].id = -1;
        sym[left].next = sym[right].next;
        if (sym[right].next >= 0) sym[sym[right].next].prev = left;
        if (sym[left].prev >= 0 && push_pair(t, w, sym, sym[left].prev)) return -1;
        if (push_pair(t, w, sym, left)) return -1;
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next)
        if (rci_ids_put(out, sym[i].id)) return -1;
    return 0;
}

enum { CACHE_MAX_WORD = 256 };

/* The cached ids of a word, appended to out: 1 when found, 0 when not. */
static int cache_get(tok_work *w, const char *s, size_t n, tok_ids *out)
{
    if (n > CACHE_MAX_WORD) return 0;
    int64_t v = rci_strmap_get(&w->cache, s, n);
    if (v < 0) return 0;
    int64_t off = v >> 20, cnt = v & ((1 << 20) - 1);
    for (int64_t i = 0; i < cnt; i++)
        if (rci_ids_put(out, w->cache_ids.p[off + i])) return -1;
    return 1;
}

static int cache_put(tok_work *w, const char *s, size_t n, const int32_t *ids, int64_t cnt)
{
    if (n > CACHE_MAX_WORD || cnt >= (1 << 20)) return 0;
    int64_t off = w->cache_ids.len;
    for (int64_t i = 0; i < cnt; i++)
        if (rci_ids_put(&w->cache_ids, ids[i])) return -1;
    return rci_strmap_set(&w->cache, s, n, off << 20 | cnt);
}

/* A byte-level word: raw bytes -> one-char tokens -> merges. */
static int bpe_bytes(const rc_tokenizer *t, tok_work *w, const char *s, size_t n, tok_ids *out)
{
    int hit = cache_get(w, s, n, out);
    if (hit) return hit < 0 ? -1 : 0;
    w->ids.len = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[(unsigned char)s[i]];
        if (id < 0) id = t->unk_id;       /* a vocabulary without that byte */
        if (id >= 0 && rci_ids_put(&w->ids, id)) return -1;
    }
    if (w->ids.len == 0) return 0;
    int64_t start = out->len;
    if (bpe_merge_ids(t, w, w->ids.p, w->ids.len, out)) return -1;
    return cache_put(w, s, n, out->p + start, out->len - start);
}

/* A word of text for a tokenizer.json BPE model: each char its token, else its <0xXX>
 * pieces (byte_fallback), else unk (runs fused with fuse_unk), then merges. */
/* The whole tokenizer.json BPE model on one word of text (chars looked up in the vocab,
 * byte fallback, unknowns), with a per-call cache. */
static int bpe_word(const rc_tokenizer *t, tok_work *w, const char *s, size_t n, tok_ids *out)
{
    if (n == 0) return 0;
    int hit = cache_get(w, s, n, out);
    if (hit) return hit < 0 ? -1 : 0;
    w->ids.len = 0;
    int in_unk = 0;
    size_t i = 0;
    while (i < n) {
        size_t l = (size_t)rci_utf8_len((unsigned char)s[i]);
        if (l > n - i) l = n - i;
        int64_t id = rci_strmap_get(&t->vocab, s + i, l);
        if (id >= 0) {
            if (rci_ids_put(&w->ids, (int32_t)id)) return -1;
            in_unk = 0;
        } else {
            int all = t->byte_fallback;
            for (size_t k = 0; all && k < l; k++) all = t->byte_piece[(unsigned char)s[i + k]] >= 0;
            if (all) {
                for (size_t k = 0; k < l; k++)
                    if (rci_ids_put(&w->ids, t->byte_piece[(unsigned char)s[i + k]])) return -1;
                in_unk = 0;
            } else if (t->unk_id >= 0) {
                if (!(in_unk && t->fuse_unk) && rci_ids_put(&w->ids, t->unk_id)) return -1;
                in_unk = 1;
            }
        }
        i += l;
    }
    if (w->ids.len == 0) return 0;
    int64_t start = out->len;
    /* bpe_merge_ids uses w->sym and w->heap only, so w->ids may be its input */
    if (bpe_merge_ids(t, w, w->ids.p, w->ids.len, out)) return -1;
    return cache_put(w, s, n, out->p + start, out->len - start);
}

/* ---- tokenizer.json pre-tokenizers -------------------------------------------------------- */

typedef struct {
    const rc_tokenizer *t;
    tok_work *w;
    const char *s;
    tok_ids *out;
} split_ctx;

static int model_word(const rc_tokenizer *t, tok_work *w, const char *s, size_t n, tok_ids *out)
{
    if (t->model == TOK_MODEL_UNIGRAM) return rci_unigram_encode(t, w, s, n, out);
    return bpe_word(t, w, s, n, out);
}

static int on_bytelevel_piece(void *ctx, size_t start, size_t end)
{
    split_ctx *c = ctx;
    if (c->t->model == TOK_MODEL_BPE) return bpe_bytes(c->t, c->w, c->s + start, end - start, c->out);
    /* other models see the byte-level spelling of the piece */
    int uni[256];
    rci_bytelevel_map(uni);
    tok_buf mapped = {0};
    int rc = 0;
    for (size_t i = start; i < end && !rc; i++) {
        char u[4];
        rc = rci_buf_put(&mapped, u, (size_t)rci_utf8_encode((uint32_t)uni[(unsigned char)c->s[i]], u));
    }
    if (!rc) rc = model_word(c->t, c->w, mapped.p, mapped.len, c->out);
    free(mapped.p);
    return rc;
}

static const char META[] = "\xE2\x96\x81";

static int is_meta(const char *s, size_t n, size_t i)
{
    return i + 3 <= n && !memcmp(s + i, META, 3);
}

/* Words of a '▁'-spelled text cut before each '▁' that follows another char (when
 * split_all) or that follows a non-'▁' char (split_meta: merges cannot cross there). */
static int meta_words(const rc_tokenizer *t, tok_work *w, const char *s, size_t n, int split_all,
                      tok_ids *out)
{
    size_t start = 0, i = 0;
    while (i < n) {
        size_t l = (size_t)rci_utf8_len((unsigned char)s[i]);
        if (i > start && is_meta(s, n, i) && (split_all || !is_meta(s, n, i - 3))) {
            if (model_word(t, w, s + start, i - start, out)) return -1;
            start = i;
        }
        i += l;
    }
    return model_word(t, w, s + start, n - start, out);
}

int rci_tok_encode_segment(const rc_tokenizer *t, tok_work *w, const char *s, size_t n, int first,
                       tok_ids *out, rc_error *err)
{
    int rc = 0;
    if (n == 0) return 0;
    if (t->pre == TOK_PRE_BYTELEVEL) {
        tok_buf pre = {0};
        if (t->add_prefix_space && s[0] != ' ') {
            if (rci_buf_put(&pre, " ", 1) || rci_buf_put(&pre, s, n)) {
                free(pre.p);
                return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
            }
            s = pre.p;
            n = pre.len;
        }
        split_ctx c = {t, w, s, out};
        rc = rci_bytelevel_split(s, n, on_bytelevel_piece, &c);
        free(pre.p);
    } else if (t->pre == TOK_PRE_METASPACE) {
        tok_buf m = {0};
        int prepend = t->prepend_scheme == TOK_PREPEND_ALWAYS || (t->prepend_scheme == TOK_PREPEND_FIRST && first);
        if (prepend && s[0] != ' ' && !is_meta(s, n, 0)) rc = rci_buf_put(&m, META, 3);
        for (size_t i = 0; i < n && !rc; i++) rc = s[i] == ' ' ? rci_buf_put(&m, META, 3) : rci_buf_put(&m, s + i, 1);
        if (!rc) rc = meta_words(t, w, m.p, m.len, t->meta_split, out);
        free(m.p);
    } else if (t->model == TOK_MODEL_BPE && t->split_meta) {
        rc = meta_words(t, w, s, n, 0, out);
    } else {
        rc = model_word(t, w, s, n, out);
    }
    return rc ? rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path) : 0;
}
