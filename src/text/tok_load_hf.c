/* tok_load_hf.c - loading Hugging Face tokenizer files into a tokenizer object: a
 * tokenizer.json (its model, added tokens, normalizer, pre-tokenizer, post-processor and
 * decoder, each checked and turned into the fields the pipeline reads), or a vocab.json +
 * merges.txt pair (byte-level BPE, as the slow GPT-2 tokenizer reads them). Calls
 * tok_files.c (reading, special-token configs), tok_normalize.c (the precompiled
 * charsmap), tok_pretok.c (the byte-level alphabet, the Metaspace check), tok_unigram.c
 * (its prefix table), tok_vocab.c, tok_tables.c and unicode.c; see tokenizer.c for the
 * layering.
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
#include "tok_pipeline.h"
#include "tok_files.h"
#include "tok_models.h"
#include "tok_stages.h"
#include "unicode.h"
#include "internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (rci_pairmap_set(&t->merges, (int32_t)ia, (int32_t)ib, rank, (int32_t)id))
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
        if (rci_tok_add_added(t, id, s, n, json_bool(a, "special", 0), json_bool(a, "lstrip", 0),
                              json_bool(a, "rstrip", 0), json_bool(a, "single_word", 0), err))
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
    for (int32_t id = 0; id < (int32_t)n; id++)
        if (rci_unigram_index_piece(t, id)) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    return 0;
}

/* ---- tokenizer.json: normalizer, pre-tokenizer, post-processor, decoder ------------------ */

static int norm_push(rc_tokenizer *t, rci_tok_norm **out, rc_error *err)
{
    rci_tok_norm *n = realloc(t->norm, (size_t)(t->n_norm + 1) * sizeof *n);
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
static int parse_replace(rc_tokenizer *t, json_t *nj, rci_tok_norm *x, rc_error *err)
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
            else if (rest[0] == '{' && sscanf(rest, "{%d,}", &min) == 1 && rci_tok_ends_with(rest, ",}") && min >= 1)
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
    rci_tok_norm *x = NULL;
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

rc_tokenizer *rci_tok_load_json(const char *path, rc_error *err)
{
    json_t *root = rci_tok_read_json(path, 0, err);
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
    rci_tok_path_dir(dir, sizeof dir, path);
    int add_bos, add_eos, found = rci_tok_read_configs(t, dir, &add_bos, &add_eos, err);
    if (found < 0) goto fail;
    if (!found) rci_tok_guess_specials(t);
    if (rci_tok_finish(t, err)) goto fail;
    json_decref(root);
    return t;
fail:
    json_decref(root);
    rci_tok_free(t);
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

rc_tokenizer *rci_tok_load_vocab_merges(const char *vocab_path, const char *merges_path, rc_error *err)
{
    json_t *vocab = rci_tok_read_json(vocab_path, 0, err);
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
        if (id >= 0 && rci_tok_add_added(t, (int32_t)id, specials[i], strlen(specials[i]), 1, 0, 0, 0, err)) goto fail;
    }
    char dir[1024];
    rci_tok_path_dir(dir, sizeof dir, vocab_path);
    int add_bos, add_eos, found = rci_tok_read_configs(t, dir, &add_bos, &add_eos, err);
    if (found < 0) goto fail;
    if (!found) rci_tok_guess_specials(t);
    if (add_bos == 1 && t->bos >= 0 && rci_tok_ids_append(&t->prefix_ids, &t->n_prefix, t->bos)) goto oom;
    if (add_eos == 1 && t->eos >= 0 && rci_tok_ids_append(&t->suffix_ids, &t->n_suffix, t->eos)) goto oom;
    if (rci_tok_finish(t, err)) goto fail;
    json_decref(vocab);
    return t;
oom:
    rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", vocab_path);
fail:
    json_decref(vocab);
    rci_tok_free(t);
    return NULL;
}
