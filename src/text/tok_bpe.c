/* tok_bpe.c - the BPE model of Hugging Face files (tokenizer.json "BPE", vocab.json +
 * merges.txt) on one word at a time: a byte-level word goes to the one-char tokens of its
 * bytes, any other word to the tokens of its chars (else their <0xXX> pieces with
 * byte_fallback, else unk, runs fused with fuse_unk); then the merges apply, and the word's
 * ids are cached for the rest of the call. Calls tok_tables.c and unicode.c only; which
 * words reach it is the pre-tokenizer's business (tok_encode.c). See tokenizer.c for the
 * layering.
 *
 * Merging (per word): a min-heap of adjacent pairs keyed (rank, position); the pair on top
 * merges when it still holds the same two symbols; the merged symbol then pairs with its
 * new neighbours. This is the order of the reference: lowest rank first, leftmost first
 * among equal ranks. */
#include "tok_models.h"
#include "unicode.h"

typedef struct {
    int32_t id, prev, next;
} bpe_sym;

static int push_pair(const rc_tokenizer *t, rci_tok_work *w, const bpe_sym *sym, int32_t left)
{
    int32_t right = sym[left].next, rank, id;
    if (right < 0 || !rci_pairmap_get(&t->merges, sym[left].id, sym[right].id, &rank, &id)) return 0;
    rci_tok_hent e = {rank, left, id, 0};
    return rci_heap_push(w, e);
}

static int bpe_merge_ids(const rc_tokenizer *t, rci_tok_work *w, const int32_t *ids, int64_t n, rci_tok_ids *out)
{
    if (n == 1) return rci_ids_put(out, ids[0]);
    if (rci_work_reserve_sym(w, n, sizeof(bpe_sym))) return -1;
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
        rci_tok_hent e = rci_heap_pop(w);
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

/* A byte-level word: raw bytes -> one-char tokens -> merges. */
int rci_bpe_bytes(const rc_tokenizer *t, rci_tok_work *w, const char *s, size_t n, rci_tok_ids *out)
{
    int hit = rci_work_cache_get(w, s, n, out);
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
    return rci_work_cache_put(w, s, n, out->p + start, out->len - start);
}

/* A word of text for a tokenizer.json BPE model: each char its token, else its <0xXX>
 * pieces (byte_fallback), else unk (runs fused with fuse_unk), then merges. */
int rci_bpe_word(const rc_tokenizer *t, rci_tok_work *w, const char *s, size_t n, rci_tok_ids *out)
{
    if (n == 0) return 0;
    int hit = rci_work_cache_get(w, s, n, out);
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
    return rci_work_cache_put(w, s, n, out->p + start, out->len - start);
}
