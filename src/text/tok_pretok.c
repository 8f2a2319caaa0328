/* tok_pretok.c - the pre-tokenizers, which cut a normalized segment into the words a
 * model encodes one at a time (merges never cross a cut): the GPT-2 pattern of byte-level
 * tokenizers and their byte -> character alphabet, and Metaspace (spaces spelled U+2581,
 * optionally prepended, with cuts before a U+2581). Each splitter reports its words through
 * a callback, so it calls no model: the caller decides what a word becomes. Calls
 * unicode.c and tok_tables.c; see tokenizer.c for the layering.
 *
 * GPT-2 pattern: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * tried left to right at each position, first alternative that matches wins. \s is
 * White_Space. The byte-level alphabet maps bytes 33-126, 161-172, 174-255 to themselves
 * and the other 68 bytes, in order, to U+0100.. . */
#include "tok_stages.h"
#include "unicode.h"

#include <string.h>

static const char META[] = "\xE2\x96\x81";

/* ---- byte level -------------------------------------------------------------------------- */

void rci_bytelevel_map(int uni[256])
{
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        uni[b] = keep ? b : next++;
    }
}

/* Appends the byte-level spelling of s[0..n) (each byte one character) to out. */
int rci_bytelevel_spell(const char *s, size_t n, rci_tok_buf *out)
{
    int uni[256];
    rci_bytelevel_map(uni);
    for (size_t i = 0; i < n; i++) {
        char u[4];
        if (rci_buf_put(out, u, (size_t)rci_utf8_encode((uint32_t)uni[(unsigned char)s[i]], u))) return -1;
    }
    return 0;
}

/* ---- the GPT-2 pattern ------------------------------------------------------------------ */

static int class_at(const char *s, size_t n, size_t pos, size_t *len)
{
    uint32_t cp = 0;
    int l = rci_utf8_decode(s + pos, n - pos, &cp);
    if (l == 0) l = 1;                    /* input was validated; keep moving anyway */
    *len = (size_t)l;
    return rci_uni_class(cp);
}

/* End of the run of characters starting at pos whose class is (or, with invert, is not)
 * one of the classes in mask. */
static size_t run_end(const char *s, size_t n, size_t pos, int mask, int invert)
{
    while (pos < n) {
        size_t l;
        int c = class_at(s, n, pos, &l);
        int in = (mask >> c) & 1;
        if (in == invert) break;
        pos += l;
    }
    return pos;
}

/* Length of the contraction ('s 't 're 've 'm 'll 'd) at s[pos] == '\'', or 0. */
static size_t contraction(const char *s, size_t n, size_t pos)
{
    size_t r = n - pos;
    if (r >= 2 && (s[pos + 1] == 's' || s[pos + 1] == 't' || s[pos + 1] == 'm' || s[pos + 1] == 'd')) return 2;
    if (r >= 3 && ((s[pos + 1] == 'r' && s[pos + 2] == 'e') || (s[pos + 1] == 'v' && s[pos + 2] == 'e') ||
                   (s[pos + 1] == 'l' && s[pos + 2] == 'l')))
        return 3;
    return 0;
}

int rci_bytelevel_split(const char *s, size_t n, rci_tok_piece_fn fn, void *ctx)
{
    const int L = 1 << UNI_LETTER, N = 1 << UNI_NUMBER, S = 1 << UNI_SPACE;
    size_t pos = 0;
    while (pos < n) {
        size_t end, l;
        if (s[pos] == '\'' && (end = contraction(s, n, pos)) > 0) {
            if (fn(ctx, pos, pos + end)) return -1;
            pos += end;
            continue;
        }
        int c = class_at(s, n, pos, &l);
        size_t q = pos;                   /* where the run after an optional ' ' starts */
        int cq = c;
        if (s[pos] == ' ' && pos + 1 < n) {
            size_t l2;
            cq = class_at(s, n, pos + 1, &l2);
            q = pos + 1;
            if (cq == UNI_SPACE) {        /* ' ' then more space: the space rules below */
                q = pos;
                cq = c;
            }
        }
        if (cq == UNI_LETTER)
            end = run_end(s, n, q, L, 0);
        else if (cq == UNI_NUMBER)
            end = run_end(s, n, q, N, 0);
        else if (cq != UNI_SPACE)
            end = run_end(s, n, q, L | N | S, 1);
        else {
            /* \s+(?!\S): the whole run at the end of text, else all but its last char
             * (when that leaves one); otherwise \s+ takes the single char. */
            end = run_end(s, n, pos, S, 0);
            if (end < n) {
                size_t last = end - 1;
                while (last > pos && ((unsigned char)s[last] & 0xC0) == 0x80) last--;
                if (last > pos) end = last;
            }
        }
        if (fn(ctx, pos, end)) return -1;
        pos = end;
    }
    return 0;
}

/* ---- Metaspace ---------------------------------------------------------------------------- */

static int is_meta(const char *s, size_t n, size_t i)
{
    return i + 3 <= n && !memcmp(s + i, META, 3);
}

/* Appends s[0..n) with each ' ' spelled U+2581, after one U+2581 first when prepend is
 * set and s starts with neither a space nor U+2581. */
int rci_metaspace_spell(const char *s, size_t n, int prepend, rci_tok_buf *out)
{
    int rc = 0;
    if (prepend && n && s[0] != ' ' && !is_meta(s, n, 0)) rc = rci_buf_put(out, META, 3);
    for (size_t i = 0; i < n && !rc; i++) rc = s[i] == ' ' ? rci_buf_put(out, META, 3) : rci_buf_put(out, s + i, 1);
    return rc;
}

int rci_meta_words(const char *s, size_t n, int split_all, rci_tok_piece_fn fn, void *ctx)
{
    size_t start = 0, i = 0;
    while (i < n) {
        size_t l = (size_t)rci_utf8_len((unsigned char)s[i]);
        if (i > start && is_meta(s, n, i) && (split_all || !(i >= 3 && is_meta(s, n, i - 3)))) {
            if (fn(ctx, start, i)) return -1;
            start = i;
        }
        i += l;
    }
    return fn(ctx, start, n);
}

/* Cutting before each '▁' that follows a non-'▁' char is exact when no piece holds such
 * a '▁' inside, and '▁' itself is a piece. */
int rci_meta_check_split(rc_tokenizer *t)
{
    t->split_meta = 0;
    if (rci_strmap_get(&t->vocab, META, 3) < 0) return 0;
    for (int64_t e = 0; e < t->vocab.n; e++) {
        const char *s = t->vocab.arena + t->vocab.key_off[e];
        size_t n = t->vocab.key_len[e];
        for (size_t i = 1; i + 3 <= n; i++)
            if (!memcmp(s + i, META, 3) && !(i >= 3 && !memcmp(s + i - 3, META, 3))) return 0;
    }
    t->split_meta = 1;
    return 0;
}
