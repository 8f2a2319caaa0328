/* tok_vocab.c - the tokenizer object itself, as every loader fills it: creating and
 * freeing it, the token table (id -> text and flags, grown as ids appear), the added
 * tokens (kept ordered by first byte, longest first, for leftmost-longest matching), the
 * finishing step every loader ends with (special flags, <0xXX> byte pieces, checks), and
 * how SentencePiece turns one piece or unknown into ids, which both of its models share.
 * Calls only tok_tables.c; see tokenizer.c for the layering. */
#include "tok_vocab.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the token table ---------------------------------------------------------------------- */

rc_tokenizer *rci_tok_new(const char *path, rc_error *err)
{
    rc_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
        return NULL;
    }
    snprintf(t->path, sizeof t->path, "%s", path);
    t->unk_id = t->bos = t->eos = t->pad = -1;
    for (int i = 0; i < 256; i++) t->byte_id[i] = t->byte_piece[i] = -1;
    t->spm_dummy_prefix = t->spm_remove_ws = t->spm_escape_ws = 1;
    t->meta_split = 1;
    return t;
}

/* Grows the per-id arrays to n entries (new ids have no token yet). */
int rci_tok_alloc_ids(rc_tokenizer *t, int64_t n, rc_error *err)
{
    if (n <= t->n_tokens) return 0;
    if (n > INT32_MAX) return rc_error_set(err, RC_ERR_FORMAT, "%s: vocabulary of %lld ids is too large", t->path, (long long)n);
    uint64_t *off = realloc(t->tok_off, (size_t)n * sizeof *off);
    if (off) t->tok_off = off;
    int32_t *len = realloc(t->tok_len, (size_t)n * sizeof *len);
    if (len) t->tok_len = len;
    uint8_t *fl = realloc(t->tok_flags, (size_t)n);
    if (fl) t->tok_flags = fl;
    if (!off || !len || !fl) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    for (int64_t i = t->n_tokens; i < n; i++) {
        t->tok_off[i] = 0;
        t->tok_len[i] = -1;
        t->tok_flags[i] = 0;
    }
    t->n_tokens = n;
    return 0;
}

int rci_tok_set_token(rc_tokenizer *t, int32_t id, const char *s, size_t n, rc_error *err)
{
    if (id < 0 || id >= t->n_tokens) return rc_error_set(err, RC_ERR_FORMAT, "%s: token id %d out of range", t->path, (int)id);
    if (n > (size_t)INT32_MAX) return rc_error_set(err, RC_ERR_FORMAT, "%s: token %d is too long", t->path, (int)id);
    rci_tok_buf b = {t->tok_arena, t->tok_arena_len, t->tok_arena_cap};
    if (rci_buf_put(&b, s, n)) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    t->tok_arena = b.p;
    t->tok_arena_cap = b.cap;
    t->tok_off[id] = t->tok_arena_len;
    t->tok_len[id] = (int32_t)n;
    t->tok_arena_len = b.len;
    return 0;
}

const char *rci_tok_text(const rc_tokenizer *t, int32_t id)
{
    return t->tok_arena + t->tok_off[id];
}

/* <0xXX> -> XX, or -1 */
int rci_tok_byte_value(const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    const char *a = strchr(hex, s[3]), *b = strchr(hex, s[4]);
    if (!a || !b || !s[3] || !s[4]) return -1;
    return (int)((a - hex) * 16 + (b - hex));
}

void rci_tok_free(rc_tokenizer *t)
{
    if (!t) return;
    free(t->tok_arena);
    free(t->tok_off);
    free(t->tok_len);
    free(t->tok_flags);
    free(t->score_f);
    free(t->score_d);
    rci_strmap_free(&t->vocab);
    rci_strmap_free(&t->prefixes);
    rci_pairmap_free(&t->merges);
    free(t->spm_rank);
    for (int i = 0; i < t->n_user; i++) free(t->user_pieces[i]);
    free(t->user_pieces);
    for (int i = 0; i < t->n_norm; i++) {
        free(t->norm[i].str);
        free(t->norm[i].pattern);
        free(t->norm[i].map_blob);
    }
    free(t->norm);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].text);
    free(t->added);
    free(t->added_order);
    free(t->prefix_ids);
    free(t->suffix_ids);
    free(t);
}

/* ---- added tokens ------------------------------------------------------------------------- */

int rci_tok_add_added(rc_tokenizer *t, int32_t id, const char *s, size_t n, int special, int lstrip,
                      int rstrip, int single_word, rc_error *err)
{
    if (n == 0) return rc_error_set(err, RC_ERR_FORMAT, "%s: added token %d has empty content", t->path, (int)id);
    rci_tok_added *a = realloc(t->added, (size_t)(t->n_added + 1) * sizeof *a);
    if (!a) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    t->added = a;
    rci_tok_added *x = &a[t->n_added];
    memset(x, 0, sizeof *x);
    x->text = malloc(n + 1);
    if (!x->text) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    memcpy(x->text, s, n);
    x->text[n] = 0;
    x->len = n;
    x->id = id;
    x->special = special;
    x->lstrip = lstrip;
    x->rstrip = rstrip;
    x->single_word = single_word;
    t->n_added++;
    return 0;
}

typedef struct {
    unsigned char first;
    size_t len;
    int index;
} added_key;

static int added_cmp(const void *a, const void *b)
{
    const added_key *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;   /* longest first */
    return x->index - y->index;
}

/* Orders the added tokens by first byte, longest first, for leftmost-longest matching. */
static int added_index(rc_tokenizer *t, rc_error *err)
{
    memset(t->added_first, 0, sizeof t->added_first);
    if (!t->n_added) return 0;
    if (t->n_added > 30000) return rc_error_set(err, RC_ERR_FORMAT, "%s: too many added tokens (%d)", t->path, t->n_added);
    free(t->added_order);
    t->added_order = malloc((size_t)t->n_added * sizeof *t->added_order);
    added_key *keys = malloc((size_t)t->n_added * sizeof *keys);
    if (!t->added_order || !keys) {
        free(keys);
        return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    }
    for (int i = 0; i < t->n_added; i++) {
        keys[i].first = (unsigned char)t->added[i].text[0];
        keys[i].len = t->added[i].len;
        keys[i].index = i;
    }
    qsort(keys, (size_t)t->n_added, sizeof *keys, added_cmp);
    for (int i = 0; i < t->n_added; i++) {
        int c = keys[i].first;
        t->added_order[i] = keys[i].index;
        if (t->added_first[c][1] == 0) t->added_first[c][0] = (int16_t)i;
        t->added_first[c][1] = (int16_t)(i + 1);
    }
    free(keys);
    return 0;
}

/* ---- finishing a loaded tokenizer -------------------------------------------------------- */

int32_t rci_tok_find(const rc_tokenizer *t, const char *s)
{
    size_t n = strlen(s);
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && !memcmp(t->added[i].text, s, n)) return t->added[i].id;
    int64_t id = rci_strmap_get(&t->vocab, s, n);
    return id >= 0 ? (int32_t)id : -1;
}

/* Marks specials, byte pieces, indexes added tokens and checks ids. */
int rci_tok_finish(rc_tokenizer *t, rc_error *err)
{
    for (int64_t i = 0; i < t->n_tokens; i++) {
        if (t->tok_len[i] < 0) continue;
        int b = rci_tok_byte_value(rci_tok_text(t, (int32_t)i), (size_t)t->tok_len[i]);
        if (b >= 0 && t->byte_piece[b] < 0 && rci_strmap_get(&t->vocab, rci_tok_text(t, (int32_t)i), 6) == i)
            t->byte_piece[b] = (int32_t)i;
    }
    for (int i = 0; i < t->n_added; i++) {
        rci_tok_added *a = &t->added[i];
        if (a->special) t->tok_flags[a->id] |= TOKF_SPECIAL;
    }
    int32_t sp[3] = {t->bos, t->eos, t->pad};
    for (int i = 0; i < 3; i++)
        if (sp[i] >= 0 && sp[i] < t->n_tokens) t->tok_flags[sp[i]] |= TOKF_SPECIAL;
    for (int i = 0; i < t->n_prefix; i++)
        if (t->prefix_ids[i] < 0 || t->prefix_ids[i] >= t->n_tokens || t->tok_len[t->prefix_ids[i]] < 0)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: special token id %d is not in the vocabulary", t->path, (int)t->prefix_ids[i]);
    for (int i = 0; i < t->n_suffix; i++)
        if (t->suffix_ids[i] < 0 || t->suffix_ids[i] >= t->n_tokens || t->tok_len[t->suffix_ids[i]] < 0)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: special token id %d is not in the vocabulary", t->path, (int)t->suffix_ids[i]);
    return added_index(t, err);
}

int rci_tok_ids_append(int32_t **arr, int *n, int32_t id)
{
    int32_t *p = realloc(*arr, (size_t)(*n + 1) * sizeof *p);
    if (!p) return -1;
    p[(*n)++] = id;
    *arr = p;
    return 0;
}

/* ---- SentencePiece output ---------------------------------------------------------------- */

/* Unknowns become their <0xXX> pieces with byte_fallback (unk for a byte without one);
 * otherwise a run of unknowns reads as one unk. */
int rci_spm_put_piece(const rc_tokenizer *t, const char *s, size_t n, int64_t id, int *prev_unk,
                      rci_tok_ids *out)
{
    if (id < 0) id = t->unk_id;
    if (id == t->unk_id && t->byte_fallback) {
        for (size_t i = 0; i < n; i++) {
            int32_t b = t->byte_piece[(unsigned char)s[i]];
            if (rci_ids_put(out, b >= 0 ? b : t->unk_id)) return -1;
        }
        *prev_unk = 1;
        return 0;
    }
    if (id == t->unk_id && *prev_unk) return 0;   /* runs of unknowns read as one */
    *prev_unk = id == t->unk_id;
    return rci_ids_put(out, (int32_t)id);
}
