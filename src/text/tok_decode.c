/* tok_decode.c - decoding: ids -> text, by the decoder of the tokenizer's family. Byte
 * level maps every char of a token back to its byte; SentencePiece (.model) drops control
 * pieces, reads unknowns as unk_surface, joins <0xXX> pieces into UTF-8 and spells U+2581
 * as a space; the tokenizer.json decoders of Metaspace and byte-fallback models do the same
 * as tokenizers does. Invalid UTF-8 comes out as U+FFFD, counted the way each reference
 * counts it. Calls tok_pretok.c (the byte-level alphabet), tok_vocab.c, tok_tables.c and
 * unicode.c; see tokenizer.c for the layering. */
#include "tok_pipeline.h"
#include "tok_stages.h"
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

/* Appends bytes as UTF-8. per_byte: each byte of an invalid sequence becomes U+FFFD (as
 * sentencepiece does); otherwise each maximal invalid subpart does (as from_utf8_lossy). */
static int put_lossy(rci_tok_buf *out, const char *s, size_t n, int per_byte)
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
static int decode_bytelevel(const rc_tokenizer *t, const int32_t *ids, int64_t n, int skip, rci_tok_buf *out)
{
    int uni[256], inv[512];
    rci_bytelevel_map(uni);
    for (int i = 0; i < 512; i++) inv[i] = -1;
    for (int b = 0; b < 256; b++) inv[uni[b]] = b;
    rci_tok_buf raw = {0};
    int rc = 0;
    for (int64_t i = 0; i < n && !rc; i++) {
        if (skip && (t->tok_flags[ids[i]] & TOKF_SPECIAL)) continue;
        const char *s = rci_tok_text(t, ids[i]);
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
static int put_meta(rci_tok_buf *out, const char *s, size_t n, int drop)
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
static int decode_spm(const rc_tokenizer *t, const int32_t *ids, int64_t n, int skip, rci_tok_buf *out)
{
    rci_tok_buf bytes = {0};
    int rc = 0;
    for (int64_t i = 0; i <= n && !rc; i++) {
        int f = i < n ? t->tok_flags[ids[i]] : 0;
        if (i < n && (f & TOKF_BYTE)) {
            char c = (char)rci_tok_byte_value(rci_tok_text(t, ids[i]), (size_t)t->tok_len[ids[i]]);
            rc = rci_buf_put(&bytes, &c, 1);
            continue;
        }
        if (bytes.len) {
            rc = put_lossy(out, bytes.p, bytes.len, 1);
            bytes.len = 0;
        }
        if (i == n || rc) break;
        if ((f & TOKF_CONTROL) || (skip && (f & TOKF_SPECIAL))) continue;
        const char *s = rci_tok_text(t, ids[i]);
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
static int decode_hf(const rc_tokenizer *t, const int32_t *ids, int64_t n, int skip, rci_tok_buf *out)
{
    rci_tok_buf bytes = {0};
    int rc = 0, nbytes = 0;
    int64_t first = 1;
    size_t start = out->len;
    for (int64_t i = 0; i <= n && !rc; i++) {
        if (i < n && skip && (t->tok_flags[ids[i]] & TOKF_SPECIAL)) continue;
        const char *s = i < n ? rci_tok_text(t, ids[i]) : "";
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

int rci_tok_decode(const rc_tokenizer *t, const int32_t *ids, int64_t n, int skip_special, rci_tok_buf *out)
{
    if (t->dec == TOK_DEC_BYTELEVEL) return decode_bytelevel(t, ids, n, skip_special, out);
    if (t->dec == TOK_DEC_SPM) return decode_spm(t, ids, n, skip_special, out);
    return decode_hf(t, ids, n, skip_special, out);
}
