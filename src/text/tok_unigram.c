/* tok_unigram.c - the unigram model, for SentencePiece .model files of model_type UNIGRAM
 * and for tokenizer.json "Unigram": the most likely split of a text into pieces (Viterbi
 * over a lattice of the pieces that match at each char, scores summed as the reference
 * sums them), unknown chars scored min_score - 10, then unknowns read as SentencePiece or
 * tokenizers reads them. Calls tok_vocab.c, tok_tables.c and unicode.c; see tokenizer.c
 * for the layering. */
#include "tok_models.h"
#include "unicode.h"

#include <stdlib.h>

typedef struct {
    double score;
    int32_t start, id;
} lat_node;

/* Viterbi over the pieces that match at each char (sentencepiece's EncodeOptimized; the
 * same walk as tokenizers' Unigram). SentencePiece sums scores in float, tokenizers in
 * double; an unknown char scores min_score - 10. */
int rci_unigram_encode(const rc_tokenizer *t, rci_tok_work *w, const char *s, size_t n, rci_tok_ids *out)
{
    if (n == 0) return 0;
    if (n + 1 > (size_t)INT32_MAX) return -1;
    int spm = t->model == TOK_MODEL_SPM_UNIGRAM;
    if ((int64_t)n + 1 > w->lattice_cap) {
        void *p = realloc(w->lattice, (n + 1) * sizeof(lat_node));
        if (!p) return -1;
        w->lattice = p;
        w->lattice_cap = (int64_t)n + 1;
    }
    lat_node *lat = w->lattice;
    for (size_t i = 0; i <= n; i++) {
        lat[i].score = 0;
        lat[i].start = -1;
        lat[i].id = -1;
    }
    double unk_score = spm ? (double)(float)(t->min_score_f - 10.0f) : t->min_score_d - 10.0;
    for (size_t start = 0; start < n;) {
        double base = lat[start].score;
        size_t mblen = (size_t)rci_utf8_len((unsigned char)s[start]);
        if (mblen > n - start) mblen = n - start;
        int single = 0;
        for (size_t end = start; end < n;) {
            end += (size_t)rci_utf8_len((unsigned char)s[end]);
            if (end > n) end = n;
            int64_t v = rci_strmap_get(&t->prefixes, s + start, end - start);
            if (v == -1) break;
            if (v < 0) continue;
            if (spm && (t->tok_flags[v] & TOKF_UNUSED)) continue;
            double score;
            if (spm && (t->tok_flags[v] & TOKF_USER))
                score = (double)((float)(end - start) * t->max_score_f) - 0.1;   /* float product */
            else
                score = spm ? t->score_f[v] : t->score_d[v];
            double cand = score + base;
            if (spm) cand = (float)cand;
            if (lat[end].start < 0 || cand > lat[end].score) {
                lat[end].score = cand;
                lat[end].start = (int32_t)start;
                lat[end].id = (int32_t)v;
            }
            if (end - start == mblen) single = 1;
        }
        if (!single) {
            double cand = unk_score + base;
            if (spm) cand = (float)cand;
            lat_node *x = &lat[start + mblen];
            if (x->start < 0 || cand > x->score) {
                x->score = cand;
                x->start = (int32_t)start;
                x->id = t->unk_id;
            }
        }
        start += mblen;
    }
    /* backtrack into w->ids as (start, id) pairs, last node first */
    w->ids.len = 0;
    for (int64_t end = (int64_t)n; end > 0; end = lat[end].start)
        if (rci_ids_put(&w->ids, lat[end].start) || rci_ids_put(&w->ids, lat[end].id)) return -1;
    int64_t m = w->ids.len / 2;
    const int32_t *bk = w->ids.p;
    int prev_unk = 0;
    for (int64_t i = 0; i < m; i++) {
        int32_t st = bk[2 * (m - 1 - i)], id = bk[2 * (m - 1 - i) + 1];
        size_t e = i + 1 < m ? (size_t)bk[2 * (m - 2 - i)] : n;
        if (spm) {
            if (rci_spm_put_piece(t, s + st, e - (size_t)st, id, &prev_unk, out)) return -1;
            continue;
        }
        if (id != t->unk_id || id < 0) {
            if (id >= 0 && rci_ids_put(out, id)) return -1;
            continue;
        }
        /* tokenizers fuses a run of unknowns, then looks its text up again */
        while (i + 1 < m && bk[2 * (m - 2 - i) + 1] == t->unk_id) {
            i++;
            e = i + 1 < m ? (size_t)bk[2 * (m - 2 - i)] : n;
        }
        int64_t v = rci_strmap_get(&t->prefixes, s + st, e - (size_t)st);
        if (v >= 0) {
            if (rci_ids_put(out, (int32_t)v)) return -1;
            continue;
        }
        int all = t->byte_fallback;
        for (size_t k = (size_t)st; all && k < e; k++) all = t->byte_piece[(unsigned char)s[k]] >= 0;
        if (all) {
            for (size_t k = (size_t)st; k < e; k++)
                if (rci_ids_put(out, t->byte_piece[(unsigned char)s[k]])) return -1;
        } else if (rci_ids_put(out, t->unk_id)) {
            return -1;
        }
    }
    return 0;
}

/* Every prefix of id's text becomes a key of t->prefixes (-2 unless a piece is spelled so),
 * and the whole text a key for id: the lattice walk stops where no piece continues. */
int rci_unigram_index_piece(rc_tokenizer *t, int32_t id)
{
    const char *s = rci_tok_text(t, id);
    size_t len = (size_t)t->tok_len[id];
    for (size_t k = 1; k < len; k++)
        if (rci_strmap_add(&t->prefixes, s, k, -2) == INT64_MIN) return -1;
    if (len && rci_strmap_set(&t->prefixes, s, len, id)) return -1;
    return 0;
}
