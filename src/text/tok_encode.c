/* tok_encode.c - the encode pipeline: text -> ids. The added tokens are found in the raw
 * text first (leftmost-longest, with their lstrip / rstrip / single_word rules); each
 * stretch between them goes through the normalizer (tokenizer.json's or SentencePiece's),
 * the pre-tokenizer (byte-level GPT-2 pattern, Metaspace, or none) and the model (BPE,
 * SentencePiece BPE, unigram); the post-processor's ids go around the whole. This file
 * only decides which stage runs: the stages themselves are in tok_normalize.c,
 * tok_pretok.c and the model files, which it calls and which never call it back. See
 * tokenizer.c for the layering. */
#include "tok_pipeline.h"
#include "tok_models.h"
#include "tok_stages.h"
#include "unicode.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- added tokens ------------------------------------------------------------------------- */

static int is_word_char(uint32_t cp)
{
    return cp == '_' || rci_uni_class(cp) == UNI_LETTER || rci_uni_class(cp) == UNI_NUMBER;
}

/* Finds the leftmost-longest added token in s[from..n). Returns 1 with [*start, *end) the
 * text it takes (with stripped whitespace) and *which, 0 when there is none. */
static int added_find(const rc_tokenizer *t, const char *s, size_t n, size_t from, size_t floor,
                      size_t *start, size_t *end, int *which)
{
    for (size_t p = from; p < n; p++) {
        unsigned char c = (unsigned char)s[p];
        for (int k = t->added_first[c][0]; k < t->added_first[c][1]; k++) {
            const rci_tok_added *a = &t->added[t->added_order[k]];
            if (a->len > n - p || memcmp(s + p, a->text, a->len)) continue;
            size_t b = p, e = p + a->len;
            if (a->single_word) {
                uint32_t after = 0;
                if (e < n) rci_utf8_decode(s + e, n - e, &after);
                if (is_word_char(rci_utf8_before(s, b)) || (e < n && is_word_char(after))) continue;
            }
            if (a->lstrip)
                while (b > floor) {
                    uint32_t cp = rci_utf8_before(s, b);
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

/* ---- pre-tokenizer and model ------------------------------------------------------------ */

/* One word through the model of a tokenizer.json (or vocab.json) tokenizer. */
static int model_word(const rc_tokenizer *t, rci_tok_work *w, const char *s, size_t n, rci_tok_ids *out)
{
    if (t->model == TOK_MODEL_UNIGRAM) return rci_unigram_encode(t, w, s, n, out);
    return rci_bpe_word(t, w, s, n, out);
}

static int on_model_word(void *ctx, size_t start, size_t end)
{
    rci_tok_word_ctx *c = ctx;
    return model_word(c->t, c->w, c->s + start, end - start, c->out);
}

static int on_bytelevel_piece(void *ctx, size_t start, size_t end)
{
    rci_tok_word_ctx *c = ctx;
    if (c->t->model == TOK_MODEL_BPE) return rci_bpe_bytes(c->t, c->w, c->s + start, end - start, c->out);
    /* other models see the byte-level spelling of the piece */
    rci_tok_buf mapped = {0};
    int rc = rci_bytelevel_spell(c->s + start, end - start, &mapped);
    if (!rc) rc = model_word(c->t, c->w, mapped.p, mapped.len, c->out);
    free(mapped.p);
    return rc;
}

/* One normalized segment through the pre-tokenizer and model of t. */
static int encode_segment(const rc_tokenizer *t, rci_tok_work *w, const char *s, size_t n, int first,
                          rci_tok_ids *out, rc_error *err)
{
    int rc = 0;
    if (n == 0) return 0;
    if (t->pre == TOK_PRE_BYTELEVEL) {
        rci_tok_buf pre = {0};
        if (t->add_prefix_space && s[0] != ' ') {
            if (rci_buf_put(&pre, " ", 1) || rci_buf_put(&pre, s, n)) {
                free(pre.p);
                return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
            }
            s = pre.p;
            n = pre.len;
        }
        rci_tok_word_ctx c = {t, w, s, out};
        rc = rci_bytelevel_split(s, n, on_bytelevel_piece, &c);
        free(pre.p);
    } else if (t->pre == TOK_PRE_METASPACE) {
        rci_tok_buf m = {0};
        int prepend = t->prepend_scheme == TOK_PREPEND_ALWAYS || (t->prepend_scheme == TOK_PREPEND_FIRST && first);
        rc = rci_metaspace_spell(s, n, prepend, &m);
        rci_tok_word_ctx c = {t, w, m.p, out};
        if (!rc) rc = rci_meta_words(m.p, m.len, t->meta_split, on_model_word, &c);
        free(m.p);
    } else if (t->model == TOK_MODEL_BPE && t->split_meta) {
        rci_tok_word_ctx c = {t, w, s, out};
        rc = rci_meta_words(s, n, 0, on_model_word, &c);
    } else {
        rc = model_word(t, w, s, n, out);
    }
    return rc ? rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path) : 0;
}

/* One stretch of text between added tokens: SentencePiece's normalizer and model, or the
 * tokenizer.json normalizers, pre-tokenizer and model. */
static int encode_text(const rc_tokenizer *t, rci_tok_work *w, const char *s, size_t n, int first,
                       rci_tok_ids *out, rc_error *err)
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
        if (rci_hf_normalize(t, s, n, &w->norm, &w->tmp)) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
        return encode_segment(t, w, w->norm.p, w->norm.len, first, out, err);
    }
    return encode_segment(t, w, s, n, first, out, err);
}

/* ---- the whole text ----------------------------------------------------------------------- */

int rci_tok_encode(const rc_tokenizer *t, const char *text, size_t len, int add_special, rci_tok_ids *out,
                   rc_error *err)
{
    rci_tok_work *w = rci_work_new();
    int rc = w ? 0 : rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    for (int i = 0; !rc && add_special && i < t->n_prefix; i++)
        if (rci_ids_put(out, t->prefix_ids[i])) rc = rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    size_t pos = 0;
    while (!rc && pos < len) {
        size_t b = len, e = len;
        int which = -1;
        if (!t->n_added || !added_find(t, text, len, pos, pos, &b, &e, &which)) b = e = len;
        rc = encode_text(t, w, text + pos, b - pos, pos == 0, out, err);
        if (!rc && which >= 0 && rci_ids_put(out, t->added[which].id)) rc = rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
        pos = e;
    }
    for (int i = 0; !rc && add_special && i < t->n_suffix; i++)
        if (rci_ids_put(out, t->suffix_ids[i])) rc = rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", t->path);
    rci_work_free(w);
    return rc;
}
