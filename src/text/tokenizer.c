/* tokenizer.c - loading Hugging Face tokenizer files (tokenizer.json, vocab.json +
 * merges.txt), the shared tables, and the encode/decode pipeline of every tokenizer
 * family. The BPE and byte-level pieces live in tok_bpe.c, SentencePiece in tok_spm.c.
 *
 * Formats (facts used here):
 * - tokenizer.json: {"added_tokens": [{id, content, special, lstrip, rstrip, single_word,
 *   normalized}], "normalizer", "pre_tokenizer", "model": {"type": "BPE", "vocab": {tok: id},
 *   "merges": ["a b" | ["a", "b"]], "unk_token", "byte_fallback", "fuse_unk"} or
 *   {"type": "Unigram", "vocab": [[piece, score]], "unk_id", "byte_fallback"},
 *   "post_processor", "decoder"}.
 * - vocab.json {tok: id} + merges.txt ("#version" line, then "a b" per line, best first).
 * - tokenizer_config.json / special_tokens_map.json beside them: bos_token, eos_token,
 *   pad_token (a string or {"content": ...}), add_bos_token, add_eos_token. */
#include "tokenizer_internal.h"
#include "internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- buffers ------------------------------------------------------------------------- */

int rci_buf_put(tok_buf *b, const void *s, size_t n)
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

int rci_ids_put(tok_ids *v, int32_t id)
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

static int64_t strmap_find(const tok_strmap *m, const char *s, size_t n, uint32_t h)
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

int64_t rci_strmap_get(const tok_strmap *m, const char *s, size_t n)
{
    if (!m->nslot) return -1;
    int64_t e = strmap_find(m, s, n, tok_hash(s, n));
    return e < 0 ? -1 : m->val[e];
}

static int strmap_grow(tok_strmap *m)
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

static int64_t strmap_insert(tok_strmap *m, const char *s, size_t n, int64_t val, int replace)
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

int rci_strmap_set(tok_strmap *m, const char *s, size_t n, int64_t val)
{
    return strmap_insert(m, s, n, val, 1) == INT64_MIN ? -1 : 0;
}

int64_t rci_strmap_add(tok_strmap *m, const char *s, size_t n, int64_t val)
{
    return strmap_insert(m, s, n, val, 0);
}

void rci_strmap_free(tok_strmap *m)
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

static int pairmap_set(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id)
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

int rci_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *id)
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

static void pairmap_free(tok_pairmap *m)
{
    free(m->key);
    free(m->rank);
    free(m->id);
    memset(m, 0, sizeof *m);
}

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
    tok_buf b = {t->tok_arena, t->tok_arena_len, t->tok_arena_cap};
    if (rci_buf_put(&b, s, n)) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    t->tok_arena = b.p;
    t->tok_arena_cap = b.cap;
    t->tok_off[id] = t->tok_arena_len;
    t->tok_len[id] = (int32_t)n;
    t->tok_arena_len = b.len;
    return 0;
}

static const char *tok_text(const rc_tokenizer *t, int32_t id)
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

void rc_tokenizer_free(rc_tokenizer *t)
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
    pairmap_free(&t->merges);
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

/* ---- files ---------------------------------------------------------------------------- */

int rci_tok_read_file(const char *path, char **data, size_t *len, rc_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return rc_error_set(err, RC_ERR_IO, "%s: cannot open", path);
    tok_buf b = {0};
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (rci_buf_put(&b, chunk, got)) {
            fclose(f);
            free(b.p);
            return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b.p);
        return rc_error_set(err, RC_ERR_IO, "%s: read error", path);
    }
    if (!b.p && rci_buf_put(&b, "", 0)) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
    *data = b.p;
    *len = b.len;
    return 0;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static void path_join(char *out, size_t size, const char *dir, const char *name)
{
    size_t n = strlen(dir);
    snprintf(out, size, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name);
}

static void path_dir(char *out, size_t size, const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, size, ".");
    else
        snprintf(out, size, "%.*s", (int)(slash - path + (slash == path)), path);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* flags: jansson's decoding flags (configs read integers as reals: they hold numbers
 * such as model_max_length = 1e30 that overflow a json_int_t) */
static json_t *json_read(const char *path, size_t flags, rc_error *err)
{
    json_error_t je;
    json_t *j = json_load_file(path, flags | JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        if (!is_file(path))
            rc_error_set(err, RC_ERR_IO, "%s: cannot open", path);
        else
            rc_error_set(err, RC_ERR_FORMAT, "%s: bad JSON at line %d, column %d: %s", path, je.line, je.column, je.text);
    }
    return j;
}

/* ---- added tokens ------------------------------------------------------------------------- */

static int added_push(rc_tokenizer *t, int32_t id, const char *s, size_t n, int special,
                      int lstrip, int rstrip, int single_word, rc_error *err)
{
    if (n == 0) return rc_error_set(err, RC_ERR_FORMAT, "%s: added token %d has empty content", t->path, (int)id);
    tok_added *a = realloc(t->added, (size_t)(t->n_added + 1) * sizeof *a);
    if (!a) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    t->added = a;
    tok_added *x = &a[t->n_added];
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

/* ---- shared finishing of a loaded tokenizer ---------------------------------------------- */

static int32_t find_token(const rc_tokenizer *t, const char *s)
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
        int b = rci_tok_byte_value(tok_text(t, (int32_t)i), (size_t)t->tok_len[i]);
        if (b >= 0 && t->byte_piece[b] < 0 && rci_strmap_get(&t->vocab, tok_text(t, (int32_t)i), 6) == i)
            t->byte_piece[b] = (int32_t)i;
    }
    for (int i = 0; i < t->n_added; i++) {
        tok_added *a = &t->added[i];
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

/* ---- tokenizer_config.json / special_tokens_map.json -------------------------------------- */

static const char *config_token_text(json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return json_string_value(json_object_get(v, "content"));
    return NULL;
}

/* Reads bos/eos/pad from the configs beside the tokenizer, when there are any. Returns 1
 * when a config named them, 0 when there is none. add_bos / add_eos: -1 when unset. */
int rci_tok_read_configs(rc_tokenizer *t, const char *dir, int *add_bos, int *add_eos, rc_error *err)
{
    static const char *names[2] = {"tokenizer_config.json", "special_tokens_map.json"};
    static const char *keys[3] = {"bos_token", "eos_token", "pad_token"};
    int32_t *dst[3] = {&t->bos, &t->eos, &t->pad};
    int found = 0, set[3] = {0, 0, 0};
    *add_bos = *add_eos = -1;
    for (int f = 0; f < 2; f++) {
        char p[1100];
        path_join(p, sizeof p, dir, names[f]);
        if (!is_file(p)) continue;
        json_t *cfg = json_read(p, JSON_DECODE_INT_AS_REAL, err);
        if (!cfg) return -1;
        if (!json_is_object(cfg)) {
            json_decref(cfg);
            return rc_error_set(err, RC_ERR_FORMAT, "%s: the top level is not a JSON object", p);
        }
        found = 1;
        for (int k = 0; k < 3; k++) {
            const char *s = config_token_text(cfg, keys[k]);
            if (s && !set[k]) {
                *dst[k] = find_token(t, s);
                set[k] = 1;
            }
        }
        if (f == 0) {
            json_t *b = json_object_get(cfg, "add_bos_token"), *e = json_object_get(cfg, "add_eos_token");
            if (json_is_boolean(b)) *add_bos = json_is_true(b);
            if (json_is_boolean(e)) *add_eos = json_is_true(e);
        }
        json_decref(cfg);
    }
    if (found)
        for (int k = 0; k < 3; k++)
            if (!set[k]) *dst[k] = -1;
    return found;
}

/* Without configs: the post-processor's tokens, then well-known spellings. */
static void guess_specials(rc_tokenizer *t)
{
    static const char *bos[] = {"<s>", "<|endoftext|>", "<|begin_of_text|>", "[CLS]", NULL};
    static const char *eos[] = {"</s>", "<|endoftext|>", "<|end_of_text|>", "[SEP]", NULL};
    static const char *pad[] = {"<pad>", "[PAD]", "<|padding|>", NULL};
    if (t->bos < 0 && t->n_prefix) t->bos = t->prefix_ids[0];
    if (t->eos < 0 && t->n_suffix) t->eos = t->suffix_ids[t->n_suffix - 1];
    for (int i = 0; t->bos < 0 && bos[i]; i++) t->bos = find_token(t, bos[i]);
    for (int i = 0; t->eos < 0 && eos[i]; i++) t->eos = find_token(t, eos[i]);
    for (int i = 0; t->pad < 0 && pad[i]; i++) t->pad = find_token(t, pad[i]);
}

/* ---- tokenizer.json: model ------------------------------------------------------------------ */

static int json_bool(json_t *o, const char *key, int dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* Byte-level BPE: the one-char token of each byte, for encoding without lookups. */
static void bytelevel_ids(rc_tokenizer *t)
{
    int uni[256];
    rci_bytelevel_map(uni);
    for (int b = 0; b < 256; b++) {
        char s[8];
        int l = rci_utf8_encode((uint32_t)uni[b], s);
        int64_t id = rci_strmap_get(&t->vocab, s, (size_t)l);
        t->byte_id[b] = id >= 0 ? (int32_t)id : -1;
    }
}

static int add_merge(rc_tokenizer *t, const char *a, size_t na, const char *b, size_t nb,
                     int32_t rank, const char *where, long line, rc_error *err)
{
    int64_t ia = rci_strmap_get(&t->vocab, a, na), ib = rci_strmap_get(&t->vocab, b, nb);
    if (ia < 0 || ib < 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s %ld: '%.*s' is not in the vocabulary", t->path, where, line,
                            (int)(ia < 0 ? na : nb), ia < 0 ? a : b);
    char stack[256];
    char *ab = na + nb <= sizeof stack ? stack : malloc(na + nb);
    if (!ab) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    memcpy(ab, a, na);
    memcpy(ab + na, b, nb);
    int64_t id = rci_strmap_get(&t->vocab, ab, na + nb);
    if (ab != stack) free(ab);
    if (id < 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s %ld: the merge of '%.*s' and '%.*s' is not in the vocabulary",
                            t->path, where, line, (int)na, a, (int)nb, b);
    if (pairmap_set(&t->merges, (int32_t)ia, (int32_t)ib, rank, (int32_t)id))
        return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    return 0;
}

/* One "a b" merge line; exactly one space. */
static int add_merge_line(rc_tokenizer *t, const char *s, size_t n, int32_t rank,
                          const char *where, long line, rc_error *err)
{
    const char *sp = memchr(s, ' ', n);
    if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1)))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: %s %ld: expected two tokens separated by one space, got '%.*s'",
                            t->path, where, line, (int)(n > 80 ? 80 : n), s);
    return add_merge(t, s, (size_t)(sp - s), sp + 1, (size_t)(s + n - sp - 1), rank, where, line, err);
}

/* Ids far past the number of tokens would only allocate memory for holes. */
static int ids_plausible(rc_tokenizer *t, int64_t n_ids, int64_t n_entries, rc_error *err)
{
    if (n_ids > 16 * n_entries + 65536)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: id %lld is implausible for %lld tokens", t->path,
                            (long long)(n_ids - 1), (long long)n_entries);
    return 0;
}

/* Largest id in a {token: id} object; -1 on a bad entry (error set). */
static int64_t vocab_max_id(rc_tokenizer *t, json_t *vocab, const char *where, rc_error *err)
{
    const char *key;
    json_t *v;
    int64_t max = -1;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX - 1) {
            rc_error_set(err, RC_ERR_FORMAT, "%s: %s: the id of '%s' is not an integer in [0, 2^31)", t->path, where, key);
            return -2;
        }
        if (json_integer_value(v) > max) max = json_integer_value(v);
    }
    return max;
}

static int vocab_fill(rc_tokenizer *t, json_t *vocab, const char *where, rc_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        size_t n = strlen(key);
        if (t->tok_len[id] >= 0)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: %s: id %d is given to two tokens", t->path, where, (int)id);
        if (rci_tok_set_token(t, id, key, n, err)) return -1;
        if (rci_strmap_set(&t->vocab, key, n, id)) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    }
    return 0;
}

/* Ids of the added tokens may lie past the model's vocabulary. */
static int64_t added_max_id(rc_tokenizer *t, json_t *added, rc_error *err)
{
    size_t i;
    json_t *a;
    int64_t max = -1;
    if (!added || json_is_null(added)) return -1;
    if (!json_is_array(added)) {
        rc_error_set(err, RC_ERR_FORMAT, "%s: \"added_tokens\" is not an array", t->path);
        return -2;
    }
    json_array_foreach(added, i, a) {
        json_t *id = json_object_get(a, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > INT32_MAX - 1 ||
            !json_is_string(json_object_get(a, "content"))) {
            rc_error_set(err, RC_ERR_FORMAT, "%s: added_tokens[%zu]: needs an integer \"id\" and a string \"content\"", t->path, i);
            return -2;
        }
        if (json_integer_value(id) > max) max = json_integer_value(id);
    }
    return max;
}

static int load_added(rc_tokenizer *t, json_t *added, rc_error *err)
{
    size_t i;
    json_t *a;
    if (!json_is_array(added)) return 0;
    json_array_foreach(added, i, a) {
        int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
        const char *s = json_string_value(json_object_get(a, "content"));
        size_t n = json_string_length(json_object_get(a, "content"));
        /* as tokenizers: an added token spelled like a vocabulary token takes its id */
        int64_t vid = rci_strmap_get(&t->vocab, s, n);
        if (vid >= 0) id = (int32_t)vid;
        if (t->tok_len[id] < 0 && rci_tok_set_token(t, id, s, n, err)) return -1;
        if (added_push(t, id, s, n, json_bool(a, "special", 0), json_bool(a, "lstrip", 0), json_bool(a, "rstrip", 0),
                       json_bool(a, "single_word", 0), err))
            return -1;
    }
    return 0;
}

static int load_bpe_model(rc_tokenizer *t, json_t *model, json_t *added, rc_error *err)
{
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab)) return rc_error_set(err, RC_ERR_FORMAT, "%s: model.vocab is not an object", t->path);
    if (!json_is_array(merges)) return rc_error_set(err, RC_ERR_FORMAT, "%s: model.merges is not an array", t->path);
    json_t *dropout = json_object_get(model, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) > 0)
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: model.dropout is not supported", t->path);
    static const char *affixes[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const char *s = json_string_value(json_object_get(model, affixes[i]));
        if (s && *s) return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: model.%s is not supported", t->path, affixes[i]);
    }
    int64_t max = vocab_max_id(t, vocab, "model.vocab", err), amax = added_max_id(t, added, err);
    if (max < -1 || amax < -1) return -1;
    int64_t entries = (int64_t)json_object_size(vocab) + (int64_t)json_array_size(added);
    if (ids_plausible(t, (max > amax ? max : amax) + 1, entries, err) ||
        rci_tok_alloc_ids(t, (max > amax ? max : amax) + 1, err) || vocab_fill(t, vocab, "model.vocab", err))
        return -1;
    t->model = TOK_MODEL_BPE;
    t->byte_fallback = json_bool(model, "byte_fallback", 0);
    t->fuse_unk = json_bool(model, "fuse_unk", 0);
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    if (unk) {
        int64_t id = rci_strmap_get(&t->vocab, unk, strlen(unk));
        if (id < 0) return rc_error_set(err, RC_ERR_FORMAT, "%s: model.unk_token '%s' is not in the vocabulary", t->path, unk);
        t->unk_id = (int32_t)id;
    }
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m) {
        int rc;
        if (json_is_string(m)) {
            rc = add_merge_line(t, json_string_value(m), json_string_length(m), (int32_t)i, "model.merges", (long)i, err);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            json_t *a = json_array_get(m, 0), *b = json_array_get(m, 1);
            rc = add_merge(t, json_string_value(a), json_string_length(a), json_string_value(b), json_string_length(b),
                           (int32_t)i, "model.merges", (long)i, err);
        } else {
            rc = rc_error_set(err, RC_ERR_FORMAT, "%s: model.merges %zu: not \"a b\" nor [\"a\", \"b\"]", t->path, i);
        }
        if (rc) return -1;
    }
    return 0;
}

static int load_unigram_model(rc_tokenizer *t, json_t *model, json_t *added, rc_error *err)
{
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_array(vocab)) return rc_error_set(err, RC_ERR_FORMAT, "%s: model.vocab is not an array", t->path);
    size_t n = json_array_size(vocab);
    int64_t amax = added_max_id(t, added, err);
    if (amax < -1) return -1;
    if (n == 0) return rc_error_set(err, RC_ERR_FORMAT, "%s: model.vocab is empty", t->path);
    if (ids_plausible(t, amax + 1, (int64_t)(n + json_array_size(added)), err) ||
        rci_tok_alloc_ids(t, (int64_t)n > amax + 1 ? (int64_t)n : amax + 1, err))
        return -1;
    t->score_d = calloc((size_t)t->n_tokens, sizeof *t->score_d);
    if (!t->score_d) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    t->model = TOK_MODEL_UNIGRAM;
    t->min_score_d = 1e300;
    size_t i;
    json_t *e;
    json_array_foreach(vocab, i, e) {
        json_t *p = json_array_get(e, 0), *s = json_array_get(e, 1);
        if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_string(p) || !json_is_number(s))
            return rc_error_set(err, RC_ERR_FORMAT, "%s: model.vocab[%zu]: expected [piece, score]", t->path, i);
        if (rci_tok_set_token(t, (int32_t)i, json_string_value(p), json_string_length(p), err)) return -1;
        if (rci_strmap_set(&t->vocab, json_string_value(p), json_string_length(p), (int64_t)i))
            return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
        t->score_d[i] = json_number_value(s);
        if (t->score_d[i] < t->min_score_d) t->min_score_d = t->score_d[i];
    }
    json_t *unk = json_object_get(model, "unk_id");
    if (json_is_integer(unk)) {
        if (json_integer_value(unk) < 0 || json_integer_value(unk) >= (json_int_t)n)
            return rc_error_set(err, RC_ERR_FORMAT, "%s: model.unk_id %lld is outside the vocabulary", t->path,
                                (long long)json_integer_value(unk));
        t->unk_id = (int32_t)json_integer_value(unk);
    }
    t->byte_fallback = json_bool(model, "byte_fallback", 0);
    t->fuse_unk = 1;
    /* every prefix of every piece, for the lattice walk */
    for (int32_t id = 0; id < (int32_t)n; id++) {
        const char *s = tok_text(t, id);
        size_t len = (size_t)t->tok_len[id];
        for (size_t k = 1; k < len; k++)
            if (rci_strmap_add(&t->prefixes, s, k, -2) == INT64_MIN) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
        if (len && rci_strmap_set(&t->prefixes, s, len, id)) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    }
    return 0;
}

/* ---- tokenizer.json: normalizer, pre-tokenizer, post-processor, decoder ------------------ */

static int norm_push(rc_tokenizer *t, tok_norm **out, rc_error *err)
{
    tok_norm *n = realloc(t->norm, (size_t)(t->n_norm + 1) * sizeof *n);
    if (!n) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    t->norm = n;
    *out = &n[t->n_norm++];
    memset(*out, 0, sizeof **out);
    return 0;
}

static char *str_dup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

static int base64_value(int c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 with optional '=' padding; NULL when malformed. */
static uint8_t *base64_decode(const char *s, size_t n, size_t *out_len)
{
    uint8_t *out = malloc(n / 4 * 3 + 3);
    if (!out) return NULL;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=') {
            for (size_t k = i; k < n; k++)
                if (s[k] != '=') goto bad;
            break;
        }
        int v = base64_value((unsigned char)s[i]);
        if (v < 0) goto bad;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    *out_len = o;
    return out;
bad:
    free(out);
    return NULL;
}

/* A Replace pattern: {"String": s} or {"Regex": "c{n,}" | "c+"} with one literal char c. */
static int parse_replace(rc_tokenizer *t, json_t *nj, tok_norm *x, rc_error *err)
{
    json_t *pat = json_object_get(nj, "pattern");
    const char *content = json_string_value(json_object_get(nj, "content"));
    if (!content) return rc_error_set(err, RC_ERR_FORMAT, "%s: Replace normalizer without \"content\"", t->path);
    x->str = str_dup(content, strlen(content));
    x->str_len = strlen(content);
    const char *s = json_string_value(json_object_get(pat, "String"));
    const char *re = json_string_value(json_object_get(pat, "Regex"));
    if (s) {
        if (!*s) return rc_error_set(err, RC_ERR_FORMAT, "%s: Replace normalizer with an empty pattern", t->path);
        x->kind = NORM_REPLACE;
        x->pattern = str_dup(s, strlen(s));
        x->pattern_len = strlen(s);
    } else if (re) {
        uint32_t cp;
        int l = rci_utf8_decode(re, strlen(re), &cp);
        int min = 0;
        if (l > 0 && cp != '\\' && cp != '.' && cp != '[' && cp != '(') {
            const char *rest = re + l;
            if (!strcmp(rest, "+"))
                min = 1;
            else if (rest[0] == '{' && sscanf(rest, "{%d,}", &min) == 1 && ends_with(rest, ",}") && min >= 1)
                ;
            else
                min = 0;
        }
        if (!min) return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: Replace normalizer regex '%s' is not supported", t->path, re);
        x->kind = NORM_REPLACE_RUN;
        x->pattern = str_dup(re, (size_t)l);
        x->pattern_len = (size_t)l;
        x->min_run = min;
    } else {
        return rc_error_set(err, RC_ERR_FORMAT, "%s: Replace normalizer without a String or Regex pattern", t->path);
    }
    if (!x->str || !x->pattern) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    return 0;
}

static int parse_normalizer(rc_tokenizer *t, json_t *nj, int depth, rc_error *err)
{
    if (!nj || json_is_null(nj)) return 0;
    const char *type = json_string_value(json_object_get(nj, "type"));
    if (!type || depth > 8) return rc_error_set(err, RC_ERR_FORMAT, "%s: normalizer without a \"type\"", t->path);
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(nj, "normalizers");
        size_t i;
        json_t *e;
        if (!json_is_array(list)) return rc_error_set(err, RC_ERR_FORMAT, "%s: Sequence normalizer without \"normalizers\"", t->path);
        json_array_foreach(list, i, e) if (parse_normalizer(t, e, depth + 1, err)) return -1;
        return 0;
    }
    tok_norm *x = NULL;
    if (!strcmp(type, "Prepend")) {
        const char *s = json_string_value(json_object_get(nj, "prepend"));
        if (!s) return rc_error_set(err, RC_ERR_FORMAT, "%s: Prepend normalizer without \"prepend\"", t->path);
        if (norm_push(t, &x, err)) return -1;
        x->kind = NORM_PREPEND;
        x->str = str_dup(s, strlen(s));
        x->str_len = strlen(s);
        return x->str ? 0 : rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    }
    if (!strcmp(type, "Replace")) {
        if (norm_push(t, &x, err)) return -1;
        return parse_replace(t, nj, x, err);
    }
    if (!strcmp(type, "Strip")) {
        if (norm_push(t, &x, err)) return -1;
        x->kind = NORM_STRIP;
        x->left = json_bool(nj, "strip_left", 1);
        x->right = json_bool(nj, "strip_right", 1);
        return 0;
    }
    if (!strcmp(type, "Precompiled")) {
        json_t *m = json_object_get(nj, "precompiled_charsmap");
        if (json_is_null(m) || (json_is_string(m) && json_string_length(m) == 0)) return 0;
        if (!json_is_string(m)) return rc_error_set(err, RC_ERR_FORMAT, "%s: Precompiled normalizer without a charsmap", t->path);
        if (norm_push(t, &x, err)) return -1;
        x->kind = NORM_PRECOMPILED;
        size_t len;
        x->map_blob = base64_decode(json_string_value(m), json_string_length(m), &len);
        if (!x->map_blob) return rc_error_set(err, RC_ERR_FORMAT, "%s: precompiled_charsmap is not valid base64", t->path);
        return rci_charsmap_init(&x->map, x->map_blob, len, t->path, err);
    }
    return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: normalizer type '%s' is not supported", t->path, type);
}

static int parse_pre_tokenizer(rc_tokenizer *t, json_t *pj, rc_error *err)
{
    if (!pj || json_is_null(pj)) {
        t->pre = TOK_PRE_NONE;
        return 0;
    }
    const char *type = json_string_value(json_object_get(pj, "type"));
    if (!type) return rc_error_set(err, RC_ERR_FORMAT, "%s: pre_tokenizer without a \"type\"", t->path);
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(pj, "pretokenizers");
        if (json_is_array(list) && json_array_size(list) == 1) return parse_pre_tokenizer(t, json_array_get(list, 0), err);
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: a Sequence of several pre-tokenizers is not supported", t->path);
    }
    if (!strcmp(type, "ByteLevel")) {
        if (!json_bool(pj, "use_regex", 1))
            return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: ByteLevel pre-tokenizer without use_regex is not supported", t->path);
        t->pre = TOK_PRE_BYTELEVEL;
        t->add_prefix_space = json_bool(pj, "add_prefix_space", 1);
        return 0;
    }
    if (!strcmp(type, "Metaspace")) {
        const char *rep = json_string_value(json_object_get(pj, "replacement"));
        if (rep && strcmp(rep, "\xE2\x96\x81"))
            return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: Metaspace replacement other than U+2581 is not supported", t->path);
        t->pre = TOK_PRE_METASPACE;
        const char *scheme = json_string_value(json_object_get(pj, "prepend_scheme"));
        int add = json_bool(pj, "add_prefix_space", 1);
        t->prepend_scheme = !add ? TOK_PREPEND_NEVER : TOK_PREPEND_ALWAYS;
        if (scheme && !strcmp(scheme, "first")) t->prepend_scheme = TOK_PREPEND_FIRST;
        if (scheme && !strcmp(scheme, "never")) t->prepend_scheme = TOK_PREPEND_NEVER;
        t->meta_split = json_bool(pj, "split", 1);
        return 0;
    }
    return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: pre_tokenizer type '%s' is not supported", t->path, type);
}

/* A token of a post-processor: [text, id] (Roberta/Bert) must exist with that id. */
static int post_pair(rc_tokenizer *t, json_t *pair, int32_t **arr, int *n, rc_error *err)
{
    json_t *id = json_array_get(pair, 1);
    if (!json_is_array(pair) || !json_is_integer(id))
        return rc_error_set(err, RC_ERR_FORMAT, "%s: post_processor: expected [token, id]", t->path);
    if (rci_tok_ids_append(arr, n, (int32_t)json_integer_value(id))) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    return 0;
}

static int parse_template(rc_tokenizer *t, json_t *pj, rc_error *err)
{
    json_t *single = json_object_get(pj, "single"), *specials = json_object_get(pj, "special_tokens");
    if (!json_is_array(single)) return rc_error_set(err, RC_ERR_FORMAT, "%s: TemplateProcessing without \"single\"", t->path);
    int seen_seq = 0;
    size_t i;
    json_t *item;
    json_array_foreach(single, i, item) {
        if (json_object_get(item, "Sequence")) {
            seen_seq = 1;
            continue;
        }
        const char *name = json_string_value(json_object_get(json_object_get(item, "SpecialToken"), "id"));
        if (!name) return rc_error_set(err, RC_ERR_FORMAT, "%s: TemplateProcessing single[%zu]: not a Sequence nor a SpecialToken", t->path, i);
        json_t *ids = json_object_get(json_object_get(specials, name), "ids");
        if (!json_is_array(ids))
            return rc_error_set(err, RC_ERR_FORMAT, "%s: TemplateProcessing: special token '%s' has no ids", t->path, name);
        size_t k;
        json_t *id;
        json_array_foreach(ids, k, id) {
            if (!json_is_integer(id)) return rc_error_set(err, RC_ERR_FORMAT, "%s: TemplateProcessing: bad id of '%s'", t->path, name);
            int rc = seen_seq ? rci_tok_ids_append(&t->suffix_ids, &t->n_suffix, (int32_t)json_integer_value(id))
                              : rci_tok_ids_append(&t->prefix_ids, &t->n_prefix, (int32_t)json_integer_value(id));
            if (rc) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
        }
    }
    return 0;
}

static int parse_post_processor(rc_tokenizer *t, json_t *pj, int depth, rc_error *err)
{
    if (!pj || json_is_null(pj)) return 0;
    const char *type = json_string_value(json_object_get(pj, "type"));
    if (!type || depth > 8) return rc_error_set(err, RC_ERR_FORMAT, "%s: post_processor without a \"type\"", t->path);
    if (!strcmp(type, "ByteLevel")) return 0;
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(pj, "processors");
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e) if (parse_post_processor(t, e, depth + 1, err)) return -1;
        return 0;
    }
    if (!strcmp(type, "TemplateProcessing")) return parse_template(t, pj, err);
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        if (post_pair(t, json_object_get(pj, "cls"), &t->prefix_ids, &t->n_prefix, err)) return -1;
        return post_pair(t, json_object_get(pj, "sep"), &t->suffix_ids, &t->n_suffix, err);
    }
    return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: post_processor type '%s' is not supported", t->path, type);
}

/* Decoders: ByteLevel; Metaspace; a Sequence of Replace(U+2581 -> " "), ByteFallback, Fuse,
 * Strip(" ", n) as the Llama converter writes. */
static int parse_decoder(rc_tokenizer *t, json_t *dj, int depth, rc_error *err)
{
    if (!dj || json_is_null(dj)) {
        if (depth == 0) t->dec = t->pre == TOK_PRE_BYTELEVEL ? TOK_DEC_BYTELEVEL : TOK_DEC_HF_FALLBACK;
        return 0;
    }
    const char *type = json_string_value(json_object_get(dj, "type"));
    if (!type || depth > 8) return rc_error_set(err, RC_ERR_FORMAT, "%s: decoder without a \"type\"", t->path);
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(dj, "decoders");
        size_t i;
        json_t *e;
        t->dec = TOK_DEC_HF_FALLBACK;
        json_array_foreach(list, i, e) if (parse_decoder(t, e, depth + 1, err)) return -1;
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) {
        t->dec = TOK_DEC_BYTELEVEL;
        return 0;
    }
    if (!strcmp(type, "Metaspace")) {
        const char *scheme = json_string_value(json_object_get(dj, "prepend_scheme"));
        t->dec = TOK_DEC_HF_METASPACE;
        t->dec_strip = json_bool(dj, "add_prefix_space", 1) && !(scheme && !strcmp(scheme, "never"));
        return 0;
    }
    if (!strcmp(type, "Replace")) {
        const char *s = json_string_value(json_object_get(json_object_get(dj, "pattern"), "String"));
        const char *c = json_string_value(json_object_get(dj, "content"));
        if (s && c && !strcmp(s, "\xE2\x96\x81") && !strcmp(c, " ")) return 0;
        return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: decoder Replace other than U+2581 -> ' ' is not supported", t->path);
    }
    if (!strcmp(type, "ByteFallback") || !strcmp(type, "Fuse")) return 0;
    if (!strcmp(type, "Strip")) {
        const char *c = json_string_value(json_object_get(dj, "content"));
        json_t *start = json_object_get(dj, "start"), *stop = json_object_get(dj, "stop");
        if (!c || strcmp(c, " ") || (json_is_integer(stop) && json_integer_value(stop) != 0))
            return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: decoder Strip other than leading spaces is not supported", t->path);
        t->dec_strip = json_is_integer(start) ? (int)json_integer_value(start) : 0;
        return 0;
    }
    return rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: decoder type '%s' is not supported", t->path, type);
}


static rc_tokenizer *load_tokenizer_json(const char *path, rc_error *err)
{
    json_t *root = json_read(path, 0, err);
    if (!root) return NULL;
    rc_tokenizer *t = rci_tok_new(path, err);
    if (!t) goto fail;
    if (!json_is_object(root)) {
        rc_error_set(err, RC_ERR_FORMAT, "%s: the top level is not a JSON object", path);
        goto fail;
    }
    json_t *model = json_object_get(root, "model"), *added = json_object_get(root, "added_tokens");
    if (!json_is_object(model)) {
        rc_error_set(err, RC_ERR_FORMAT, "%s: missing \"model\" object", path);
        goto fail;
    }
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!type) type = json_is_array(json_object_get(model, "vocab")) ? "Unigram" : json_object_get(model, "merges") ? "BPE" : "";
    int rc;
    if (!strcmp(type, "BPE"))
        rc = load_bpe_model(t, model, added, err);
    else if (!strcmp(type, "Unigram"))
        rc = load_unigram_model(t, model, added, err);
    else
        rc = rc_error_set(err, RC_ERR_UNSUPPORTED, "%s: model type '%s' is not supported (BPE and Unigram are)", path, type);
    if (rc || load_added(t, added, err) || parse_normalizer(t, json_object_get(root, "normalizer"), 0, err) ||
        parse_pre_tokenizer(t, json_object_get(root, "pre_tokenizer"), err) ||
        parse_post_processor(t, json_object_get(root, "post_processor"), 0, err) ||
        parse_decoder(t, json_object_get(root, "decoder"), 0, err))
        goto fail;
    if (t->pre == TOK_PRE_BYTELEVEL) bytelevel_ids(t);
    if (t->model == TOK_MODEL_BPE && t->pre != TOK_PRE_BYTELEVEL) rci_meta_check_split(t);
    char dir[1024];
    path_dir(dir, sizeof dir, path);
    int add_bos, add_eos, found = rci_tok_read_configs(t, dir, &add_bos, &add_eos, err);
    if (found < 0) goto fail;
    if (!found) guess_specials(t);
    if (rci_tok_finish(t, err)) goto fail;
    json_decref(root);
    return t;
fail:
    json_decref(root);
    rc_tokenizer_free(t);
    return NULL;
}

/* ---- vocab.json + merges.txt --------------------------------------------------------------- */

static int load_merges_txt(rc_tokenizer *t, const char *path, rc_error *err)
{
    char *data;
    size_t len;
    if (rci_tok_read_file(path, &data, &len, err)) return -1;
    size_t pos = 0;
    long line = 0;
    int32_t rank = 0;
    int rc = 0;
    while (pos < len && !rc) {
        const char *s = data + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl != NULL);
        line++;
        if (n && s[n - 1] == '\r') n--;
        if (n == 0 || (n >= 8 && !memcmp(s, "#version", 8))) continue;
        rc = add_merge_line(t, s, n, rank++, "line", line, err);
    }
    free(data);
    return rc;
}

static rc_tokenizer *load_vocab_merges(const char *vocab_path, const char *merges_path, rc_error *err)
{
    json_t *vocab = json_read(vocab_path, 0, err);
    if (!vocab) return NULL;
    rc_tokenizer *t = rci_tok_new(vocab_path, err);
    if (!t) goto fail;
    if (!json_is_object(vocab)) {
        rc_error_set(err, RC_ERR_FORMAT, "%s: expected an object {token: id}", vocab_path);
        goto fail;
    }
    int64_t max = vocab_max_id(t, vocab, "vocab", err);
    if (max < -1 || ids_plausible(t, max + 1, (int64_t)json_object_size(vocab), err) || rci_tok_alloc_ids(t, max + 1, err) ||
        vocab_fill(t, vocab, "vocab", err))
        goto fail;
    snprintf(t->path, sizeof t->path, "%s", merges_path);
    if (load_merges_txt(t, merges_path, err)) goto fail;
    snprintf(t->path, sizeof t->path, "%s", vocab_path);
    t->model = TOK_MODEL_BPE;
    t->pre = TOK_PRE_BYTELEVEL;
    t->dec = TOK_DEC_BYTELEVEL;
    t->add_prefix_space = 0;
    bytelevel_ids(t);
    /* the slow tokenizers never split these: they are special tokens */
    static const char *specials[] = {"<|endoftext|>", "<s>", "</s>", "<pad>", "<unk>", "<mask>", NULL};
    for (int i = 0; specials[i]; i++) {
        int64_t id = rci_strmap_get(&t->vocab, specials[i], strlen(specials[i]));
        if (id >= 0 && added_push(t, (int32_t)id, specials[i], strlen(specials[i]), 1, 0, 0, 0, err)) goto fail;
    }
    char dir[1024];
    path_dir(dir, sizeof dir, vocab_path);
    int add_bos, add_eos, found = rci_tok_read_configs(t, dir, &add_bos, &add_eos, err);
    if (found < 0) goto fail;
    if (!found) guess_specials(t);
    if (add_bos == 1 && t->bos >= 0 && rci_tok_ids_append(&t->prefix_ids, &t->n_prefix, t->bos)) goto oom;
    if (add_eos == 1 && t->eos >= 0 && rci_tok_ids_append(&t->suffix_ids, &t->n_suffix, t->eos)) goto oom;
    if (rci_tok_finish(t, err)) goto fail;
    json_decref(vocab);
    return t;
oom:
    rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", vocab_path);
fail:
    json_decref(vocab);
    rc_tokenizer_free(t);
    return NULL;
}

/* ---- loading ------------------------------------------------------------------------------- */

rc_tokenizer *rc_tokenizer_load(const char *path, rc_error *err)
{
    char a[1100], b[1100];
    if (!path || !*path) {
        rc_error_set(err, RC_ERR_ARG, "rc_tokenizer_load: no path");
        return NULL;
    }
    if (strlen(path) > 900) {
        rc_error_set(err, RC_ERR_ARG, "rc_tokenizer_load: path too long");
        return NULL;
    }
    if (is_dir(path)) {
        path_join(a, sizeof a, path, "tokenizer.json");
        if (is_file(a)) return load_tokenizer_json(a, err);
        path_join(a, sizeof a, path, "vocab.json");
        path_join(b, sizeof b, path, "merges.txt");
        if (is_file(a) && is_file(b)) return load_vocab_merges(a, b, err);
        path_join(a, sizeof a, path, "tokenizer.model");
        if (is_file(a)) return rci_spm_load(a, err);
        path_join(a, sizeof a, path, "spiece.model");
        if (is_file(a)) return rci_spm_load(a, err);
        rc_error_set(err, RC_ERR_IO, "%s: no tokenizer.json, vocab.json + merges.txt or tokenizer.model in this directory", path);
        return NULL;
    }
    if (!is_file(path)) {
        rc_error_set(err, RC_ERR_IO, "%s: no such file or directory", path);
        return NULL;
    }
    char dir[1024];
    path_dir(dir, sizeof dir, path);
    if (ends_with(path, "vocab.json") || ends_with(path, "merges.txt")) {
        path_join(a, sizeof a, dir, "vocab.json");
        path_join(b, sizeof b, dir, "merges.txt");
        return load_vocab_merges(ends_with(path, "vocab.json") ? path : a, ends_with(path, "merges.txt") ? path : b, err);
    }
    if (ends_with(path, ".model")) return rci_spm_load(path, err);
    if (ends_with(path, ".json")) return load_tokenizer_json(path, err);
    /* otherwise sniff: JSON starts with '{' */
    FILE *f = fopen(path, "rb");
    int c = f ? fgetc(f) : EOF;
    while (c == ' ' || c == '\n' || c == '\r' || c == '\t') c = fgetc(f);
    if (f) fclose(f);
    return c == '{' ? load_tokenizer_json(path, err) : rci_spm_load(path, err);
}

/* ---- encoding --------------------------------------------------------------------------- */

static int is_word_char(uint32_t cp)
{
    return cp == '_' || rci_uni_class(cp) == UNI_LETTER || rci_uni_class(cp) == UNI_NUMBER;
}

/* The code point that ends just before s[pos] (s is valid UTF-8); 0 at the start. */
static uint32_t char_before(const char *s, size_t pos)
{
    if (pos == 0) return 0;
    size_t i = pos - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    uint32_t cp = 0;
    rci_utf8_decode(s + i, pos - i, &cp);
    return cp;
}

/* Finds the leftmost-longest added token in s[from..n). Returns 1 with [*start, *end) the
 * text it takes (with stripped whitespace) and *which, 0 when there is none. */
static int added_find(const rc_tokenizer *t, const char *s, size_t n, size_t from, size_t floor,
                      size_t *start, size_t *end, int *which)
{
    for (size_t p = from; p < n; p++) {
        unsigned char c = (unsigned char)s[p];
        for (int k = t->added_first[c][0]; k < t->added_first[c][1]; k++) {
            const tok_added *a = &t->added[t->added_order[k]];
            if (a->len > n - p || memcmp(s + p, a->text, a->len)) continue;
            size_t b = p, e = p + a->len;
            if (a->single_word) {
                uint32_t after = 0;
                if (e < n) rci_utf8_decode(s + e, n - e, &after);
                if (is_word_char(char_before(s, b)) || (e < n && is_word_char(after))) continue;
            }
            if (a->lstrip)
                while (b > floor) {
                    uint32_t cp = char_before(s, b);
                    if (rci_uni_class(cp) != UNI_SPACE) break;
                    char tmp[4];
                    b -= (size_t)rci_utf8_encode(cp, tmp);
                }
            if (a->rstrip)
                while (e < n) {
                    uint32_t cp;
                    int l = rci_utf8_decode(s + e, n - e, &cp);
                    if (l == 0 || rci_uni_class(cp) != UNI_SPACE) break;
                    e += (size_t)l;
                }
            *start = b;
            *end = e;
            *which = t->added_order[k];
            return 1;
        }
    }
    return 0;
}

/* Applies the tokenizer.json normalizers to s[0..n) into out. */
static int normalize_hf(const rc_tokenizer *t, const char *s, size_t n, tok_buf *out, tok_buf *tmp)
{
    out->len = 0;
    if (rci_buf_put(out, s, n)) return -1;
    for (int i = 0; i < t->n_norm; i++) {
        const tok_norm *x = &t->norm[i];
        tmp->len = 0;
        const char *p = out->p;
        size_t len = out->len;
        if (x->kind == NORM_PREPEND) {
            if (len == 0) continue;
            if (rci_buf_put(tmp, x->str, x->str_len) || rci_buf_put(tmp, p, len)) return -1;
        } else if (x->kind == NORM_REPLACE) {
            size_t k = 0;
            while (k < len) {
                if (k + x->pattern_len <= len && !memcmp(p + k, x->pattern, x->pattern_len)) {
                    if (rci_buf_put(tmp, x->str, x->str_len)) return -1;
                    k += x->pattern_len;
                } else {
                    if (rci_buf_put(tmp, p + k, 1)) return -1;
                    k++;
                }
            }
        } else if (x->kind == NORM_REPLACE_RUN) {
            size_t k = 0, pl = x->pattern_len;
            while (k < len) {
                size_t e = k;
                int run = 0;
                while (e + pl <= len && !memcmp(p + e, x->pattern, pl)) {
                    e += pl;
                    run++;
                }
                if (run >= x->min_run) {
                    if (rci_buf_put(tmp, x->str, x->str_len)) return -1;
                    k = e;
                } else if (run > 0) {
                    if (rci_buf_put(tmp, p + k, e - k)) return -1;
                    k = e;
                } else {
                    if (rci_buf_put(tmp, p + k, 1)) return -1;
                    k++;
                }
            }
        } else if (x->kind == NORM_STRIP) {
            size_t b = 0, e = len;
            while (x->left && b < e) {
                uint32_t cp;
                int l = rci_utf8_decode(p + b, e - b, &cp);
                if (!l || rci_uni_class(cp) != UNI_SPACE) break;
                b += (size_t)l;
            }
            while (x->right && e > b) {
                uint32_t cp = char_before(p, e);
                if (rci_uni_class(cp) != UNI_SPACE) break;
                char u[4];
                e -= (size_t)rci_utf8_encode(cp, u);
            }
            if (rci_buf_put(tmp, p + b, e - b)) return -1;
        } else if (x->kind == NORM_PRECOMPILED) {
            if (rci_precompiled_normalize(&x->map, p, len, tmp)) return -1;
        } else {
            continue;
        }
        tok_buf swap = *out;
        *out = *tmp;
        *tmp = swap;
    }
    return 0;
}

static int encode_text(const rc_tokenizer *t, tok_work *w, const char *s, size_t n, int first,
                       tok_ids *out, rc_error *err)
{
    if (n == 0) return 0;
    if (t->model == TOK_MODEL_SPM_BPE || t->model == TOK_MODEL_SPM_UNIGRAM) {
        w->norm.len = 0;
        if (rci_spm_normalize(t, s, n, &w->norm)) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
        int rc = t->model == TOK_MODEL_SPM_BPE ? rci_spm_bpe_encode(t, w, w->norm.p, w->norm.len, out)
                                               : rci_unigram_encode(t, w, w->norm.p, w->norm.len, out);
        return rc ? rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path) : 0;
    }
    if (t->n_norm) {
        if (normalize_hf(t, s, n, &w->norm, &w->tmp)) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
        return rci_tok_encode_segment(t, w, w->norm.p, w->norm.len, first, out, err);
    }
    return rci_tok_encode_segment(t, w, s, n, first, out, err);
}

int rc_tokenizer_encode(const rc_tokenizer *t, const char *text, size_t len, int add_special,
                        int32_t **ids, int64_t *n, rc_error *err)
{
    if (!t || !ids || !n || (!text && len)) return rc_error_set(err, RC_ERR_ARG, "rc_tokenizer_encode: NULL argument");
    *ids = NULL;
    *n = 0;
    size_t bad = rci_utf8_check(text, len);
    if (bad < len)
        return rc_error_set(err, RC_ERR_ARG, "%s: input is not valid UTF-8 (byte 0x%02X at offset %zu)", t->path,
                            (unsigned char)text[bad], bad);
    tok_ids out = {0};
    tok_work *w = rci_work_new();
    int rc = w ? 0 : rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    for (int i = 0; !rc && add_special && i < t->n_prefix; i++)
        if (rci_ids_put(&out, t->prefix_ids[i])) rc = rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    size_t pos = 0;
    while (!rc && pos < len) {
        size_t b = len, e = len;
        int which = -1;
        if (!t->n_added || !added_find(t, text, len, pos, pos, &b, &e, &which)) b = e = len;
        rc = encode_text(t, w, text + pos, b - pos, pos == 0, &out, err);
        if (!rc && which >= 0 && rci_ids_put(&out, t->added[which].id)) rc = rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
        pos = e;
    }
    for (int i = 0; !rc && add_special && i < t->n_suffix; i++)
        if (rci_ids_put(&out, t->suffix_ids[i])) rc = rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    rci_work_free(w);
    if (rc) {
        free(out.p);
        return -1;
    }
    if (!out.p) out.p = malloc(sizeof(int32_t));
    if (!out.p) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    *ids = out.p;
    *n = out.len;
    return 0;
}

/* ---- decoding ----------------------------------------------------------------------------- */

/* Appends bytes as UTF-8. per_byte: each byte of an invalid sequence becomes U+FFFD (as
 * sentencepiece does); otherwise each maximal invalid subpart does (as from_utf8_lossy). */
static int put_lossy(tok_buf *out, const char *s, size_t n, int per_byte)
{
    static const char rep[] = "\xEF\xBF\xBD";
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int l = rci_utf8_decode(s + i, n - i, &cp);
        if (l > 0) {
            if (rci_buf_put(out, s + i, (size_t)l)) return -1;
            i += (size_t)l;
            continue;
        }
        if (rci_buf_put(out, rep, 3)) return -1;
        size_t skip = 1;
        if (!per_byte) {
            /* the longest prefix of a well-formed sequence counts as one */
            unsigned char c = (unsigned char)s[i];
            int need = rci_utf8_len(c);
            unsigned char lo = 0x80, hi = 0xBF;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
            if (c >= 0xC2 && c <= 0xF4) {
                while ((int)skip < need && i + skip < n) {
                    unsigned char d = (unsigned char)s[i + skip];
                    if (d < (skip == 1 ? lo : 0x80) || d > (skip == 1 ? hi : 0xBF)) break;
                    skip++;
                }
            }
        }
        i += skip;
    }
    return 0;
}

/* Byte-level: every char of a token back to its byte; tokens with other chars as is. */
static int decode_bytelevel(const rc_tokenizer *t, const int32_t *ids, int64_t n, int skip, tok_buf *out)
{
    int uni[256], inv[512];
    rci_bytelevel_map(uni);
    for (int i = 0; i < 512; i++) inv[i] = -1;
    for (int b = 0; b < 256; b++) inv[uni[b]] = b;
    tok_buf raw = {0};
    int rc = 0;
    for (int64_t i = 0; i < n && !rc; i++) {
        if (skip && (t->tok_flags[ids[i]] & TOKF_SPECIAL)) continue;
        const char *s = tok_text(t, ids[i]);
        size_t len = (size_t)t->tok_len[ids[i]], start = raw.len, k = 0;
        int mapped = 1;
        while (k < len && mapped) {
            uint32_t cp;
            int l = rci_utf8_decode(s + k, len - k, &cp);
            if (l == 0 || cp >= 512 || inv[cp] < 0) {
                mapped = 0;
                break;
            }
            char c = (char)inv[cp];
            rc = rci_buf_put(&raw, &c, 1);
            k += (size_t)l;
        }
        if (!mapped) {
            raw.len = start;
            rc = rci_buf_put(&raw, s, len);
        }
    }
    if (!rc) rc = put_lossy(out, raw.p ? raw.p : "", raw.len, 0);
    free(raw.p);
    return rc;
}

/* Replaces U+2581 with ' '; with drop, removes it instead (Metaspace's first token). */
static int put_meta(tok_buf *out, const char *s, size_t n, int drop)
{
    size_t k = 0;
    while (k < n) {
        if (k + 3 <= n && !memcmp(s + k, "\xE2\x96\x81", 3)) {
            if (!drop && rci_buf_put(out, " ", 1)) return -1;
            k += 3;
        } else {
            if (rci_buf_put(out, s + k, 1)) return -1;
            k++;
        }
    }
    return 0;
}

/* sentencepiece's DecodeIds: controls vanish, unknowns read unk_surface, byte pieces join
 * into UTF-8 (U+FFFD per bad byte), U+2581 -> ' ', and the first piece of the text drops
 * one leading U+2581. */
static int decode_spm(const rc_tokenizer *t, const int32_t *ids, int64_t n, int skip, tok_buf *out)
{
    tok_buf bytes = {0};
    int rc = 0;
    for (int64_t i = 0; i <= n && !rc; i++) {
        int f = i < n ? t->tok_flags[ids[i]] : 0;
        if (i < n && (f & TOKF_BYTE)) {
            char c = (char)rci_tok_byte_value(tok_text(t, ids[i]), (size_t)t->tok_len[ids[i]]);
            rc = rci_buf_put(&bytes, &c, 1);
            continue;
        }
        if (bytes.len) {
            rc = put_lossy(out, bytes.p, bytes.len, 1);
            bytes.len = 0;
        }
        if (i == n || rc) break;
        if ((f & TOKF_CONTROL) || (skip && (f & TOKF_SPECIAL))) continue;
        const char *s = tok_text(t, ids[i]);
        size_t len = (size_t)t->tok_len[ids[i]];
        if (f & TOKF_UNKNOWN) {
            rc = rci_buf_put(out, t->unk_surface, strlen(t->unk_surface));
            continue;
        }
        if (out->len == 0 && len >= 3 && !memcmp(s, "\xE2\x96\x81", 3)) {
            s += 3;
            len -= 3;
        }
        rc = put_meta(out, s, len, 0);
    }
    free(bytes.p);
    return rc;
}

/* tokenizers' decoders for Metaspace / byte-fallback models: per token U+2581 -> ' '
 * (Metaspace: dropped in the first token), runs of <0xXX> tokens -> their bytes when
 * valid UTF-8 (else one U+FFFD per token), joined, then dec_strip leading spaces cut. */
static int decode_hf(const rc_tokenizer *t, const int32_t *ids, int64_t n, int skip, tok_buf *out)
{
    tok_buf bytes = {0};
    int rc = 0, nbytes = 0;
    int64_t first = 1;
    size_t start = out->len;
    for (int64_t i = 0; i <= n && !rc; i++) {
        if (i < n && skip && (t->tok_flags[ids[i]] & TOKF_SPECIAL)) continue;
        const char *s = i < n ? tok_text(t, ids[i]) : "";
        size_t len = i < n ? (size_t)t->tok_len[ids[i]] : 0;
        int b = i < n && t->dec == TOK_DEC_HF_FALLBACK ? rci_tok_byte_value(s, len) : -1;
        if (b >= 0) {
            char c = (char)b;
            rc = rci_buf_put(&bytes, &c, 1);
            nbytes++;
            first = 0;
            continue;
        }
        if (nbytes) {
            if (rci_utf8_check(bytes.p, bytes.len) == bytes.len)
                rc = rci_buf_put(out, bytes.p, bytes.len);
            else
                for (int k = 0; k < nbytes && !rc; k++) rc = rci_buf_put(out, "\xEF\xBF\xBD", 3);
            bytes.len = 0;
            nbytes = 0;
        }
        if (i == n || rc) break;
        rc = put_meta(out, s, len, t->dec == TOK_DEC_HF_METASPACE && first && t->dec_strip);
        first = 0;
    }
    free(bytes.p);
    if (!rc && t->dec == TOK_DEC_HF_FALLBACK) {
        size_t cut = 0;
        while ((int)cut < t->dec_strip && start + cut < out->len && out->p[start + cut] == ' ') cut++;
        memmove(out->p + start, out->p + start + cut, out->len - start - cut);
        out->len -= cut;
        out->p[out->len] = 0;
    }
    return rc;
}

int rc_tokenizer_decode(const rc_tokenizer *t, const int32_t *ids, int64_t n, int skip_special,
                        char **text, size_t *len, rc_error *err)
{
    if (!t || !text || (!ids && n > 0) || n < 0) return rc_error_set(err, RC_ERR_ARG, "rc_tokenizer_decode: bad argument");
    *text = NULL;
    if (len) *len = 0;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->n_tokens || t->tok_len[ids[i]] < 0)
            return rc_error_set(err, RC_ERR_INDEX, "%s: token id %d (position %lld) is outside the vocabulary of %lld ids",
                                t->path, (int)ids[i], (long long)i, (long long)t->n_tokens);
    tok_buf out = {0};
    int rc = rci_buf_put(&out, "", 0);
    if (!rc) {
        if (t->dec == TOK_DEC_BYTELEVEL)
            rc = decode_bytelevel(t, ids, n, skip_special, &out);
        else if (t->dec == TOK_DEC_SPM)
            rc = decode_spm(t, ids, n, skip_special, &out);
        else
            rc = decode_hf(t, ids, n, skip_special, &out);
    }
    if (rc) {
        free(out.p);
        return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    }
    *text = out.p;
    if (len) *len = out.len;
    return 0;
}

/* ---- accessors ------------------------------------------------------------------------------- */

int64_t rc_tokenizer_vocab_size(const rc_tokenizer *t)
{
    return t ? t->n_tokens : 0;
}

int32_t rc_tokenizer_bos(const rc_tokenizer *t)
{
    return t ? t->bos : -1;
}

int32_t rc_tokenizer_eos(const rc_tokenizer *t)
{
    return t ? t->eos : -1;
}

int32_t rc_tokenizer_pad(const rc_tokenizer *t)
{
    return t ? t->pad : -1;
}
