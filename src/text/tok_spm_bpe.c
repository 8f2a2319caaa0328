/* tok_spm_bpe.c - the BPE model of SentencePiece (.model files of model_type BPE) on a
 * normalized text: each char (or user-defined piece, kept whole) a symbol, then adjacent
 * symbols whose joined text is a piece merge, the best-scored piece first (leftmost among
 * equals); unused pieces split back into the halves they were merged from, unknowns go
 * through rci_spm_put_piece. When the vocabulary allows it (t->split_meta) the text is
 * first cut into U+2581-led words by the Metaspace splitter and each word's ids cached.
 * Calls tok_pretok.c, tok_vocab.c, tok_tables.c and unicode.c; see tokenizer.c for the
 * layering. */
#include "tok_models.h"
#include "tok_stages.h"
#include "unicode.h"

#include <string.h>

typedef struct {
    int32_t start, len, prev, next;
    int freeze;
} spm_sym;

/* A pair of neighbours whose joined text is a piece goes on the heap. */
static int spm_pair(const rc_tokenizer *t, rci_tok_work *w, const char *s, const spm_sym *sym, int32_t left)
{
    int32_t right = left >= 0 ? sym[left].next : -1;
    if (left < 0 || right < 0 || sym[left].freeze || sym[right].freeze) return 0;
    int32_t size = sym[left].len + sym[right].len;
    int64_t id = rci_strmap_get(&t->vocab, s + sym[left].start, (size_t)size);
    if (id < 0) return 0;
    if ((t->tok_flags[id] & TOKF_UNUSED) &&
        rci_strmap_set(&w->cache2, s + sym[left].start, (size_t)size, sym[left].len))
        return -1;
    rci_tok_hent e = {t->spm_rank[id], left, right, size};
    return rci_heap_push(w, e);
}

/* Appends the ids of piece s[0..n): an unused piece splits back into its halves. */
static int spm_emit(const rc_tokenizer *t, rci_tok_work *w, const char *s, size_t n, int *prev_unk, rci_tok_ids *out)
{
    int64_t id = rci_strmap_get(&t->vocab, s, n);
    if (id >= 0 && (t->tok_flags[id] & TOKF_UNUSED)) {
        int64_t left = rci_strmap_get(&w->cache2, s, n);
        if (left > 0 && (size_t)left < n)
            return spm_emit(t, w, s, (size_t)left, prev_unk, out) ||
                   spm_emit(t, w, s + left, n - (size_t)left, prev_unk, out);
    }
    return rci_spm_put_piece(t, s, n, id, prev_unk, out);
}

static int spm_bpe_piece(const rc_tokenizer *t, rci_tok_work *w, const char *s, size_t n, int *prev_unk,
                         rci_tok_ids *out)
{
    int64_t cnt = 0;
    for (size_t i = 0; i < n; i += (size_t)rci_utf8_len((unsigned char)s[i])) cnt++;
    if (cnt > INT32_MAX / 2) return -1;
    if (rci_work_reserve_sym(w, cnt, sizeof(spm_sym))) return -1;
    spm_sym *sym = w->sym;
    int32_t k = 0;
    for (size_t i = 0; i < n; k++) {
        size_t l = 0;
        for (int u = 0; u < t->n_user; u++) {
            size_t ul = strlen(t->user_pieces[u]);
            if (ul > l && ul <= n - i && !memcmp(s + i, t->user_pieces[u], ul)) l = ul;
        }
        sym[k].freeze = l > 0;
        if (!l) l = (size_t)rci_utf8_len((unsigned char)s[i]);
        if (l > n - i) l = n - i;
        sym[k].start = (int32_t)i;
        sym[k].len = (int32_t)l;
        sym[k].prev = k - 1;
        sym[k].next = -1;
        if (k > 0) sym[k - 1].next = k;
        i += l;
    }
    w->heap_len = 0;
    for (int32_t i = 0; i + 1 < k; i++)
        if (spm_pair(t, w, s, sym, i)) return -1;
    while (w->heap_len) {
        rci_tok_hent e = rci_heap_pop(w);
        int32_t left = e.pos, right = e.a;
        if (sym[left].len == 0 || sym[right].len == 0 || sym[left].len + sym[right].len != e.b) continue;
        sym[left].len += sym[right].len;
        sym[right].len = 0;
        sym[left].next = sym[right].next;
        if (sym[right].next >= 0) sym[sym[right].next].prev = left;
        if (spm_pair(t, w, s, sym, sym[left].prev) || spm_pair(t, w, s, sym, left)) return -1;
    }
    for (int32_t i = k ? 0 : -1; i >= 0; i = sym[i].next)
        if (spm_emit(t, w, s + sym[i].start, (size_t)sym[i].len, prev_unk, out)) return -1;
    return 0;
}

/* One U+2581-led word: its cached ids, else SentencePiece BPE on it (then cached). */
static int on_word(void *ctx, size_t start, size_t end)
{
    rci_tok_word_ctx *c = ctx;
    const char *word = c->s + start;
    size_t len = end - start;
    if (len == 0) return 0;
    /* a word starts with a known U+2581 piece, so no unknown run crosses into it */
    int prev_unk = 0;
    int hit = rci_work_cache_get(c->w, word, len, c->out);
    if (hit) return hit < 0 ? -1 : 0;
    int64_t before = c->out->len;
    if (spm_bpe_piece(c->t, c->w, word, len, &prev_unk, c->out)) return -1;
    return rci_work_cache_put(c->w, word, len, c->out->p + before, c->out->len - before);
}

int rci_spm_bpe_encode(const rc_tokenizer *t, rci_tok_work *w, const char *s, size_t n, rci_tok_ids *out)
{
    int prev_unk = 0;
    if (!t->split_meta) return spm_bpe_piece(t, w, s, n, &prev_unk, out);
    /* merges never cross a U+2581 that follows another char: encode (and cache) the words */
    rci_tok_word_ctx c = {t, w, s, out};
    return rci_meta_words(s, n, 0, on_word, &c);
}
