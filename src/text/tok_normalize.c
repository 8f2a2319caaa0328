/* tok_normalize.c - the normalizers, which rewrite a segment of text before it is split
 * and encoded: the steps of a tokenizer.json "normalizer" (Prepend, Replace, Strip,
 * Precompiled), SentencePiece's own normalizer of a .model file (user-defined pieces kept
 * whole, the charsmap's longest match, whitespace removed or escaped to U+2581), and the
 * precompiled charsmap both of them use (a Darts-clone double array). Calls unicode.c and
 * tok_tables.c; see tokenizer.c for the layering.
 *
 * precompiled_charsmap: a little-endian uint32 byte size of a Darts-clone double array,
 * the array (uint32 units), then NUL-terminated replacement strings. A unit holds
 * has_leaf (bit 8), a label (bits 0-7, bit 31), an offset ((u >> 10) << ((u & 512) >> 6));
 * the value (low 31 bits of the unit at a leaf) is the offset of the replacement. */
#include "tok_stages.h"
#include "unicode.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static const char META[] = "\xE2\x96\x81";

/* ---- the charsmap (Darts-clone double array) ----------------------------------------------- */

int rci_charsmap_init(rci_tok_charsmap *m, uint8_t *blob, size_t n, const char *path, rc_error *err)
{
    memset(m, 0, sizeof *m);
    if (n < 4) return rc_error_set(err, RC_ERR_FORMAT, "%s: precompiled_charsmap of %zu bytes is truncated", path, n);
    uint32_t size = (uint32_t)blob[0] | (uint32_t)blob[1] << 8 | (uint32_t)blob[2] << 16 | (uint32_t)blob[3] << 24;
    if (size % 4 || size > n - 4 || size == 0)
        return rc_error_set(err, RC_ERR_FORMAT, "%s: precompiled_charsmap: trie size %u does not fit its %zu bytes", path, size, n);
    /* units are copied out so that reads are aligned and little-endian on any host */
    uint32_t *units = malloc(size);
    if (!units) return rc_error_set(err, RC_ERR_MEMORY, "%s: out of memory", path);
    for (uint32_t i = 0; i < size / 4; i++) {
        const uint8_t *p = blob + 4 + 4 * (size_t)i;
        units[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    }
    /* the blob keeps its bytes; units replace the trie part (same size) */
    memcpy(blob + 4, units, size);
    free(units);
    m->units = (const uint32_t *)(blob + 4);
    m->nunits = size / 4;
    m->strings = (const char *)blob + 4 + size;
    m->nstrings = n - 4 - size;
    return 0;
}

static uint32_t unit_offset(uint32_t u)
{
    return (u >> 10) << ((u & (1u << 9)) >> 6);
}

/* Prefixes of key[0..n) that are keys of the map, shortest first: their lengths and
 * replacement strings. Returns how many (at most max). A NUL byte ends the key. */
static int charsmap_prefixes(const rci_tok_charsmap *m, const char *key, size_t n, size_t *lens,
                             const char **repl, size_t *repl_len, int max)
{
    if (!m->nunits) return 0;
    size_t pos = unit_offset(m->units[0]);
    int found = 0;
    for (size_t i = 0; i < n && found < max; i++) {
        uint8_t c = (uint8_t)key[i];
        if (c == 0) break;
        pos ^= c;
        if (pos >= m->nunits) break;
        uint32_t u = m->units[pos];
        if ((u & ((1u << 31) | 0xFF)) != c) break;
        pos ^= unit_offset(u);
        if (pos >= m->nunits) break;
        if ((u >> 8) & 1) {
            uint32_t v = m->units[pos] & ((1u << 31) - 1);
            if (v >= m->nstrings) continue;                     /* a malformed map: ignore */
            const char *s = m->strings + v, *z = memchr(s, 0, m->nstrings - v);
            lens[found] = i + 1;
            repl[found] = s;
            repl_len[found] = z ? (size_t)(z - s) : m->nstrings - v;
            found++;
        }
    }
    return found;
}

/* ---- SentencePiece's normalizer ------------------------------------------------------------ */

/* sentencepiece's NormalizePrefix: the longest user-defined piece or charsmap key at s,
 * else one character unchanged. */
static size_t spm_prefix(const rc_tokenizer *t, const rci_tok_charsmap *m, const char *s, size_t n,
                         const char **out, size_t *out_len)
{
    size_t best = 0;
    for (int i = 0; i < t->n_user; i++) {
        size_t l = strlen(t->user_pieces[i]);
        if (l > best && l <= n && !memcmp(s, t->user_pieces[i], l)) best = l;
    }
    if (best) {
        *out = s;
        *out_len = best;
        return best;
    }
    size_t lens[32], rl[32];
    const char *r[32];
    int k = charsmap_prefixes(m, s, n, lens, r, rl, 32);
    if (k > 0) {
        *out = r[k - 1];
        *out_len = rl[k - 1];
        return lens[k - 1];
    }
    size_t l = (size_t)rci_utf8_len((unsigned char)s[0]);
    if (l > n) l = n;
    *out = s;
    *out_len = l;
    return l;
}

static int put_ws(rci_tok_buf *out, int escape)
{
    return escape ? rci_buf_put(out, META, 3) : rci_buf_put(out, " ", 1);
}

int rci_spm_normalize(const rc_tokenizer *t, const char *s, size_t n, rci_tok_buf *out)
{
    const rci_tok_charsmap *m = &t->norm[0].map;
    const char *r;
    size_t rl;
    if (t->spm_remove_ws) {               /* leading whitespace goes */
        while (n > 0) {
            size_t c = spm_prefix(t, m, s, n, &r, &rl);
            if (rl != 1 || r[0] != ' ') break;
            s += c;
            n -= c;
        }
    }
    if (n == 0) return 0;
    int prev_space = t->spm_remove_ws;
    if (t->spm_dummy_prefix && put_ws(out, t->spm_escape_ws)) return -1;
    while (n > 0) {
        size_t c = spm_prefix(t, m, s, n, &r, &rl);
        while (prev_space && rl > 0 && r[0] == ' ') {
            r++;
            rl--;
        }
        if (rl > 0) {
            for (size_t i = 0; i < rl; i++) {
                int rc = r[i] == ' ' && t->spm_escape_ws ? rci_buf_put(out, META, 3) : rci_buf_put(out, r + i, 1);
                if (rc) return -1;
            }
            prev_space = r[rl - 1] == ' ';
        }
        s += c;
        n -= c;
        if (!t->spm_remove_ws) prev_space = 0;
    }
    if (t->spm_remove_ws) {               /* and trailing whitespace */
        size_t w = t->spm_escape_ws ? 3 : 1;
        const char *sp = t->spm_escape_ws ? META : " ";
        while (out->len >= w && !memcmp(out->p + out->len - w, sp, w)) out->len -= w;
        out->p[out->len] = 0;
    }
    return 0;
}

/* ---- tokenizer.json normalizers ------------------------------------------------------------ */

/* tokenizers' Precompiled normalizer: per grapheme cluster shorter than 6 bytes, its first
 * (shortest) key prefix replaces the whole cluster; otherwise char by char. */
static int precompiled_normalize(const rci_tok_charsmap *m, const char *s, size_t n, rci_tok_buf *out)
{
    size_t pos = 0, lens[1], rl[1];
    const char *r[1];
    while (pos < n) {
        size_t g = rci_uni_grapheme_len(s + pos, n - pos);
        if (g == 0) g = 1;
        if (g < 6 && charsmap_prefixes(m, s + pos, g, lens, r, rl, 1) == 1) {
            if (rci_buf_put(out, r[0], rl[0])) return -1;
            pos += g;
            continue;
        }
        size_t end = pos + g;
        while (pos < end) {
            size_t l = (size_t)rci_utf8_len((unsigned char)s[pos]);
            if (l > end - pos) l = end - pos;
            int k = charsmap_prefixes(m, s + pos, l, lens, r, rl, 1);
            if (k == 1 ? rci_buf_put(out, r[0], rl[0]) : rci_buf_put(out, s + pos, l)) return -1;
            pos += l;
        }
    }
    return 0;
}

/* Applies the tokenizer.json normalizers to s[0..n) into out. */
int rci_hf_normalize(const rc_tokenizer *t, const char *s, size_t n, rci_tok_buf *out, rci_tok_buf *tmp)
{
    out->len = 0;
    if (rci_buf_put(out, s, n)) return -1;
    for (int i = 0; i < t->n_norm; i++) {
        const rci_tok_norm *x = &t->norm[i];
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
                uint32_t cp = rci_utf8_before(p, e);
                if (rci_uni_class(cp) != UNI_SPACE) break;
                char u[4];
                e -= (size_t)rci_utf8_encode(cp, u);
            }
            if (rci_buf_put(tmp, p + b, e - b)) return -1;
        } else if (x->kind == NORM_PRECOMPILED) {
            if (precompiled_normalize(&x->map, p, len, tmp)) return -1;
        } else {
            continue;
        }
        rci_tok_buf swap = *out;
        *out = *tmp;
        *tmp = swap;
    }
    return 0;
}
