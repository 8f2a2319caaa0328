/* tok_train.c - learning a byte-level BPE vocabulary from text (GPT-2 style), written as
 * vocab.json + merges.txt for rc_tokenizer_load.
 *
 * 1. The text is cut into words by the GPT-2 pattern (the pre-tokenizer the loaded
 *    tokenizer uses), and equal words are counted once with their frequency.
 * 2. Every word starts as its bytes: ids 0-255 are the bytes by value.
 * 3. Repeatedly, the adjacent pair of symbols seen most often (over all words, weighted by
 *    their counts; ties to the pair of smaller ids, left id first) is merged into one new
 *    symbol everywhere, left to right, until the vocabulary is full or no pair is seen
 *    min_frequency times. A merge whose text is already a token reuses that token's id.
 * 4. <|endoftext|> takes the last id.
 *
 * Pair counts are kept up to date per merge: only the words holding the merged pair are
 * touched (each pair keeps the list of words it was seen in); the best pair comes from a
 * max-heap whose stale entries are fixed when they reach the top (a count only grows for
 * pairs holding the new symbol, and those are pushed again after each merge). */
#include "tok_stages.h"
#include "unicode.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *eot_text = "<|endoftext|>";

typedef struct {
    int64_t count;
    int32_t a, b;
} heap_ent;

typedef struct {
    /* distinct words: their text (in `words`), counts and current symbols */
    rci_tok_strmap words;
    int64_t n_words;
    int64_t *wcount;
    int64_t *woff;            /* start of each word's symbols in sym */
    int32_t *wlen;            /* its current number of symbols */
    int32_t *sym;

    /* pairs (a, b): an open-addressing table of key + 1 -> pair index */
    uint64_t *slot_key;
    int64_t *slot_idx;
    uint64_t nslot;
    int64_t n_pairs, cap_pairs;
    int32_t *pa, *pb;
    int64_t *pcount;
    int32_t **pwords;         /* words the pair was seen in (may hold words it left) */
    int32_t *pwlen, *pwcap;
    int64_t *pstamp;          /* the merge step that last pushed it */
    int64_t *touched;         /* pairs to push after this step */
    int64_t n_touched;

    heap_ent *heap;
    int64_t heap_len, heap_cap;

    /* tokens: raw bytes by id, and text -> id */
    rci_tok_strmap tokens;
    rci_tok_buf merges;           /* (a, b) int32 pairs in the order learned */
} trainer;

static void trainer_free(trainer *t)
{
    rci_strmap_free(&t->words);
    free(t->wcount);
    free(t->woff);
    free(t->wlen);
    free(t->sym);
    free(t->slot_key);
    free(t->slot_idx);
    for (int64_t i = 0; i < t->n_pairs; i++)
        free(t->pwords[i]);
    free(t->pa);
    free(t->pb);
    free(t->pcount);
    free(t->pwords);
    free(t->pwlen);
    free(t->pwcap);
    free(t->pstamp);
    free(t->touched);
    free(t->heap);
    rci_strmap_free(&t->tokens);
    free(t->merges.p);
}

/* ---- the heap: most frequent first, then smaller (a, b) ------------------------------- */

static int ent_before(const heap_ent *x, const heap_ent *y)
{
    if (x->count != y->count) return x->count > y->count;
    if (x->a != y->a) return x->a < y->a;
    return x->b < y->b;
}

static int heap_add(trainer *t, heap_ent e)
{
    if (t->heap_len == t->heap_cap) {
        int64_t cap = t->heap_cap ? t->heap_cap * 2 : 1024;
        heap_ent *h = realloc(t->heap, (size_t)cap * sizeof *h);
        if (!h) return -1;
        t->heap = h;
        t->heap_cap = cap;
    }
    int64_t i = t->heap_len++;
    while (i > 0) {
        int64_t up = (i - 1) / 2;
        if (!ent_before(&e, &t->heap[up])) break;
        t->heap[i] = t->heap[up];
        i = up;
    }
    t->heap[i] = e;
    return 0;
}

static heap_ent heap_take(trainer *t)
{
    heap_ent top = t->heap[0], last = t->heap[--t->heap_len];
    int64_t i = 0, n = t->heap_len;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && ent_before(&t->heap[c + 1], &t->heap[c])) c++;
        if (!ent_before(&t->heap[c], &last)) break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    if (n) t->heap[i] = last;
    return top;
}

/* ---- pairs ---------------------------------------------------------------------------- */

static uint64_t pair_key(int32_t a, int32_t b)
{
    return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
}

static uint64_t key_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    k ^= k >> 33;
    return k;
}

static int pairs_grow_table(trainer *t)
{
    uint64_t nslot = t->nslot ? t->nslot * 2 : 4096;
    uint64_t *key = calloc(nslot, sizeof *key);
    int64_t *idx = malloc(nslot * sizeof *idx);
    if (!key || !idx) {
        free(key);
        free(idx);
        return -1;
    }
    for (uint64_t s = 0; s < t->nslot; s++) {
        if (!t->slot_key[s]) continue;
        uint64_t i = key_hash(t->slot_key[s]) & (nslot - 1);
        while (key[i]) i = (i + 1) & (nslot - 1);
        key[i] = t->slot_key[s];
        idx[i] = t->slot_idx[s];
    }
    free(t->slot_key);
    free(t->slot_idx);
    t->slot_key = key;
    t->slot_idx = idx;
    t->nslot = nslot;
    return 0;
}

static int pairs_grow_arrays(trainer *t)
{
    int64_t cap = t->cap_pairs ? t->cap_pairs * 2 : 4096;
    size_t n = (size_t)cap;
    int32_t *pa = realloc(t->pa, n * sizeof *pa);
    if (pa) t->pa = pa;
    int32_t *pb = realloc(t->pb, n * sizeof *pb);
    if (pb) t->pb = pb;
    int64_t *pc = realloc(t->pcount, n * sizeof *pc);
    if (pc) t->pcount = pc;
    int32_t **pw = realloc(t->pwords, n * sizeof *pw);
    if (pw) t->pwords = pw;
    int32_t *pl = realloc(t->pwlen, n * sizeof *pl);
    if (pl) t->pwlen = pl;
    int32_t *pp = realloc(t->pwcap, n * sizeof *pp);
    if (pp) t->pwcap = pp;
    int64_t *ps = realloc(t->pstamp, n * sizeof *ps);
    if (ps) t->pstamp = ps;
    int64_t *tt = realloc(t->touched, n * sizeof *tt);
    if (tt) t->touched = tt;
    if (!pa || !pb || !pc || !pw || !pl || !pp || !ps || !tt) return -1;
    t->cap_pairs = cap;
    return 0;
}

/* The index of pair (a, b), created with count 0 when new; -1 when out of memory. */
static int64_t pair_index(trainer *t, int32_t a, int32_t b)
{
    if ((uint64_t)(t->n_pairs + 1) * 2 > t->nslot && pairs_grow_table(t)) return -1;
    uint64_t k = pair_key(a, b), i = key_hash(k) & (t->nslot - 1);
    while (t->slot_key[i]) {
        if (t->slot_key[i] == k) return t->slot_idx[i];
        i = (i + 1) & (t->nslot - 1);
    }
    if (t->n_pairs == t->cap_pairs && pairs_grow_arrays(t)) return -1;
    int64_t p = t->n_pairs++;
    t->pa[p] = a, t->pb[p] = b, t->pcount[p] = 0;
    t->pwords[p] = NULL, t->pwlen[p] = 0, t->pwcap[p] = 0, t->pstamp[p] = -1;
    t->slot_key[i] = k;
    t->slot_idx[i] = p;
    return p;
}

static int pair_note_word(trainer *t, int64_t p, int32_t w)
{
    if (t->pwlen[p] && t->pwords[p][t->pwlen[p] - 1] == w) return 0;
    if (t->pwlen[p] == t->pwcap[p]) {
        int32_t cap = t->pwcap[p] ? t->pwcap[p] * 2 : 4;
        int32_t *l = realloc(t->pwords[p], (size_t)cap * sizeof *l);
        if (!l) return -1;
        t->pwords[p] = l;
        t->pwcap[p] = cap;
    }
    t->pwords[p][t->pwlen[p]++] = w;
    return 0;
}

/* Adds sign x the word's count to each of its adjacent pairs. When sign > 0, pairs holding
 * the id `fresh` (every pair when fresh < 0) note the word and are queued for the heap. */
static int word_count_pairs(trainer *t, int32_t w, int sign, int32_t fresh, int64_t step)
{
    const int32_t *s = t->sym + t->woff[w];
    for (int32_t i = 0; i + 1 < t->wlen[w]; i++) {
        int64_t p = pair_index(t, s[i], s[i + 1]);
        if (p < 0) return -1;
        t->pcount[p] += sign * t->wcount[w];
        if (sign < 0 || (fresh >= 0 && s[i] != fresh && s[i + 1] != fresh)) continue;
        if (pair_note_word(t, p, w)) return -1;
        if (t->pstamp[p] != step) {
            t->pstamp[p] = step;
            t->touched[t->n_touched++] = p;
        }
    }
    return 0;
}

/* Pushes the queued pairs with their counts now. */
static int push_touched(trainer *t, int64_t min_frequency)
{
    for (int64_t k = 0; k < t->n_touched; k++) {
        int64_t p = t->touched[k];
        if (t->pcount[p] >= min_frequency &&
            heap_add(t, (heap_ent){t->pcount[p], t->pa[p], t->pb[p]}))
            return -1;
    }
    t->n_touched = 0;
    return 0;
}

/* The pair to merge next, or -1 when none is seen min_frequency times; -2 out of memory. */
static int64_t best_pair(trainer *t, int64_t min_frequency)
{
    while (t->heap_len) {
        heap_ent e = heap_take(t);
        int64_t p = pair_index(t, e.a, e.b);
        if (p < 0) return -2;
        int64_t now = t->pcount[p];
        if (now == e.count) return p;
        /* stale: a fresher entry exists when the count grew; re-queue it when it shrank */
        if (now < e.count && now >= min_frequency &&
            heap_add(t, (heap_ent){now, e.a, e.b}))
            return -2;
    }
    return -1;
}

/* ---- words and tokens ---------------------------------------------------------------- */

typedef struct {
    trainer *t;
    const char *text;
} split_ctx;

static int count_word(void *ctx, size_t start, size_t end)
{
    split_ctx *c = ctx;
    trainer *t = c->t;
    int64_t w = rci_strmap_add(&t->words, c->text + start, end - start, t->n_words);
    if (w == INT64_MIN) return -1;
    if (w == t->n_words) {
        if ((t->n_words & (t->n_words - 1)) == 0) {
            size_t cap = t->n_words ? (size_t)t->n_words * 2 : 1;
            int64_t *wc = realloc(t->wcount, cap * sizeof *wc);
            if (!wc) return -1;
            t->wcount = wc;
        }
        t->wcount[t->n_words++] = 0;
    }
    t->wcount[w]++;
    return 0;
}

/* Each word's bytes become its first symbols. */
static int words_to_symbols(trainer *t)
{
    size_t total = t->words.arena_len;
    t->sym = malloc((total ? total : 1) * sizeof *t->sym);
    t->woff = malloc((size_t)(t->n_words ? t->n_words : 1) * sizeof *t->woff);
    t->wlen = malloc((size_t)(t->n_words ? t->n_words : 1) * sizeof *t->wlen);
    if (!t->sym || !t->woff || !t->wlen) return -1;
    int64_t at = 0;
    for (int64_t w = 0; w < t->n_words; w++) {
        const unsigned char *s = (const unsigned char *)t->words.arena + t->words.key_off[w];
        t->woff[w] = at;
        t->wlen[w] = (int32_t)t->words.key_len[w];
        for (uint32_t i = 0; i < t->words.key_len[w]; i++) t->sym[at++] = s[i];
    }
    return 0;
}

static const char *token_text(const trainer *t, int32_t id, size_t *n)
{
    *n = t->tokens.key_len[id];
    return t->tokens.arena + t->tokens.key_off[id];
}

/* The id of a's text followed by b's, a new one when it is not a token yet. */
static int64_t merged_id(trainer *t, int32_t a, int32_t b, rci_tok_buf *scratch)
{
    size_t na, nb;
    const char *sa = token_text(t, a, &na), *sb = token_text(t, b, &nb);
    scratch->len = 0;
    if (rci_buf_put(scratch, sa, na) || rci_buf_put(scratch, sb, nb)) return INT64_MIN;
    return rci_strmap_add(&t->tokens, scratch->p, scratch->len, t->tokens.n);
}

/* Merges (a, b) -> id in every word that holds the pair, keeping the pair counts. */
static int apply_merge(trainer *t, int64_t p, int32_t id, int64_t step)
{
    int32_t a = t->pa[p], b = t->pb[p];
    int32_t n_list = t->pwlen[p];
    for (int32_t k = 0; k < n_list; k++) {
        int32_t w = t->pwords[p][k];
        int32_t *s = t->sym + t->woff[w];
        int32_t n = t->wlen[w], i = 0;
        while (i + 1 < n && !(s[i] == a && s[i + 1] == b)) i++;
        if (i + 1 >= n) continue;         /* the pair left this word in an earlier merge */
        if (word_count_pairs(t, w, -1, id, step)) return -1;
        int32_t j = 0;
        for (i = 0; i < n;) {
            if (i + 1 < n && s[i] == a && s[i + 1] == b) {
                s[j++] = id;
                i += 2;
            } else {
                s[j++] = s[i++];
            }
        }
        t->wlen[w] = j;
        if (word_count_pairs(t, w, +1, id, step)) return -1;
    }
    return 0;
}

/* ---- output ------------------------------------------------------------------------- */

/* A token's bytes in the byte-level alphabet (each byte one code point) into out. */
static int bytelevel_text(const char *s, size_t n, rci_tok_buf *out)
{
    out->len = 0;
    if (rci_bytelevel_spell(s, n, out)) return -1;
    return rci_buf_put(out, "", 1) ? -1 : 0;   /* NUL-terminated for jansson */
}

static int write_vocab(const trainer *t, const char *path, rc_error *err)
{
    json_t *o = json_object();
    rci_tok_buf b = {0};
    int rc = o ? 0 : -1;
    for (int64_t id = 0; !rc && id < t->tokens.n; id++) {
        size_t n;
        const char *s = token_text(t, (int32_t)id, &n);
        rc = bytelevel_text(s, n, &b) || json_object_set_new(o, b.p, json_integer(id));
    }
    if (!rc) rc = json_object_set_new(o, eot_text, json_integer(t->tokens.n));
    free(b.p);
    if (rc) {
        json_decref(o);
        return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
    }
    rc = json_dump_file(o, path, JSON_PRESERVE_ORDER | JSON_COMPACT);
    json_decref(o);
    if (rc) return rc_error_set(err, RC_ERR_IO, "%s: cannot write", path);
    return 0;
}

static int write_merges(const trainer *t, const char *path, rc_error *err)
{
    FILE *f = fopen(path, "wb");
    if (!f) return rc_error_set(err, RC_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
    const int32_t *m = (const int32_t *)t->merges.p;
    size_t n_merges = t->merges.len / (2 * sizeof *m);
    rci_tok_buf x = {0}, y = {0};
    int bad = fputs("#version: 0.2\n", f) < 0;
    for (size_t k = 0; !bad && k < n_merges; k++) {
        size_t na, nb;
        const char *sa = token_text(t, m[2 * k], &na), *sb = token_text(t, m[2 * k + 1], &nb);
        bad = bytelevel_text(sa, na, &x) || bytelevel_text(sb, nb, &y) ||
              fprintf(f, "%s %s\n", x.p, y.p) < 0;
    }
    free(x.p);
    free(y.p);
    if (fclose(f) || bad) return rc_error_set(err, RC_ERR_IO, "%s: cannot write", path);
    return 0;
}

static int make_dir(const char *dir, rc_error *err)
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return rc_error_set(err, RC_ERR_IO, "%s: exists and is not a directory", dir);
        return 0;
    }
    if (mkdir(dir, 0777) && errno != EEXIST)
        return rc_error_set(err, RC_ERR_IO, "%s: cannot create the directory: %s", dir, strerror(errno));
    return 0;
}

/* ---- training ------------------------------------------------------------------------ */

static int learn(trainer *t, const char *text, size_t len, const rc_bpe_train_opts *o, rc_error *err)
{
    int64_t min_frequency = o->min_frequency < 1 ? 2 : o->min_frequency;
    rci_tok_buf scratch = {0};
    int rc = 0;
    for (int c = 0; c < 256; c++) {
        char s = (char)c;
        if (rci_strmap_add(&t->tokens, &s, 1, c) == INT64_MIN) goto oom;
    }
    split_ctx ctx = {t, text};
    if (rci_bytelevel_split(text, len, count_word, &ctx) || words_to_symbols(t)) goto oom;
    for (int64_t w = 0; w < t->n_words; w++)
        if (word_count_pairs(t, (int32_t)w, +1, -1, 0)) goto oom;
    if (push_touched(t, min_frequency)) goto oom;
    for (int64_t step = 1; !rc && t->tokens.n < o->vocab_size - 1; step++) {
        int64_t p = best_pair(t, min_frequency);
        if (p == -1) break;
        int64_t id = p < 0 ? INT64_MIN : merged_id(t, t->pa[p], t->pb[p], &scratch);
        int32_t ab[2] = {p < 0 ? 0 : t->pa[p], p < 0 ? 0 : t->pb[p]};
        rc = id == INT64_MIN || rci_buf_put(&t->merges, ab, sizeof ab) ||
             apply_merge(t, p, (int32_t)id, step) || push_touched(t, min_frequency);
    }
    if (!rc) {
        free(scratch.p);
        return 0;
    }
oom:
    free(scratch.p);
    return rc_error_set(err, RC_ERR_MEMORY, "tokenizer training: out of memory");
}

int64_t rc_tokenizer_train_bpe(const char *text, size_t len, const rc_bpe_train_opts *opts,
                               const char *dir, rc_error *err)
{
    if (!text || !opts || !dir) {
        rc_error_set(err, RC_ERR_ARG, "tokenizer training: %s is NULL", !text ? "text" : !opts ? "opts" : "dir");
        return -1;
    }
    if (opts->vocab_size < 257 || opts->vocab_size > INT32_MAX) {
        rc_error_set(err, RC_ERR_ARG,
                     "tokenizer training: vocab_size %lld is not in [257, %d] (256 bytes + %s at least)",
                     (long long)opts->vocab_size, INT32_MAX, eot_text);
        return -1;
    }
    size_t bad = rci_utf8_check(text, len);
    if (bad < len) {
        rc_error_set(err, RC_ERR_FORMAT, "tokenizer training: the text is not valid UTF-8 at byte %zu", bad);
        return -1;
    }
    if (len > (size_t)INT32_MAX) {
        rc_error_set(err, RC_ERR_ARG, "tokenizer training: %zu bytes of text is more than %d", len, INT32_MAX);
        return -1;
    }
    trainer t = {0};
    char vocab_path[4200], merges_path[4200];
    snprintf(vocab_path, sizeof vocab_path, "%s/vocab.json", dir);
    snprintf(merges_path, sizeof merges_path, "%s/merges.txt", dir);
    int rc = learn(&t, text, len, opts, err);
    if (!rc && rci_strmap_get(&t.tokens, eot_text, strlen(eot_text)) >= 0)
        rc = rc_error_set(err, RC_ERR_FORMAT, "tokenizer training: a merge spells %s, the special token", eot_text);
    if (!rc) rc = make_dir(dir, err) || write_vocab(&t, vocab_path, err) || write_merges(&t, merges_path, err);
    int64_t n = t.tokens.n + 1;
    trainer_free(&t);
    return rc ? -1 : n;
}
