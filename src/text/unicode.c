/* unicode.c - UTF-8 decoding and the few Unicode properties the tokenizers need: the
 * classes of the GPT-2 pattern (\p{L}, \p{N}, \s = White_Space) and extended grapheme
 * clusters (UAX #29). The data and the grapheme rules come from utf8proc (Debian
 * libutf8proc-dev; 2.8.0 in Debian 12 carries Unicode 15.0). The lowest layer of src/text:
 * it calls nothing else there (see tokenizer.c for the layering). */
#include "unicode.h"

#include <utf8proc.h>

int rci_utf8_len(unsigned char c)
{
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 1;
}

int rci_utf8_decode(const char *s, size_t n, uint32_t *cp)
{
    if (n == 0) return 0;
    if ((unsigned char)s[0] < 0x80) {
        *cp = (unsigned char)s[0];
        return 1;
    }
    utf8proc_int32_t c;
    utf8proc_ssize_t l = utf8proc_iterate((const utf8proc_uint8_t *)s, n < 4 ? (utf8proc_ssize_t)n : 4, &c);
    if (l <= 0) return 0;
    *cp = (uint32_t)c;
    return (int)l;
}

size_t rci_utf8_check(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int l = rci_utf8_decode(s + i, n - i, &cp);
        if (l == 0) return i;
        i += (size_t)l;
    }
    return n;
}

int rci_utf8_encode(uint32_t cp, char *out)
{
    return (int)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)out);
}

/* The code point that ends just before s[pos] (s is valid UTF-8); 0 at the start. */
uint32_t rci_utf8_before(const char *s, size_t pos)
{
    if (pos == 0) return 0;
    size_t i = pos - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    uint32_t cp = 0;
    rci_utf8_decode(s + i, pos - i, &cp);
    return cp;
}

/* White_Space is not a general category: it is Zs, Zl, Zp plus the controls TAB..CR and
 * NEL (PropList.txt). */
int rci_uni_class(uint32_t cp)
{
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return UNI_LETTER;
        if (cp >= '0' && cp <= '9') return UNI_NUMBER;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return UNI_SPACE;
        return UNI_OTHER;
    }
    if (cp == 0x85) return UNI_SPACE;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        return UNI_LETTER;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return UNI_NUMBER;
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
        return UNI_SPACE;
    default:
        return UNI_OTHER;
    }
}

/* utf8proc gives unassigned code points no grapheme property, but the UCD gives two kinds
 * one (as the references' tables do): reserved default-ignorables are Control
 * (GraphemeBreakProperty.txt) and the reserved emoji blocks are Extended_Pictographic
 * (emoji-data.txt). An assigned stand-in of that property takes their place in the rules. */
static uint32_t grapheme_stand_in(uint32_t cp)
{
    if (cp < 0x2065 || utf8proc_category((utf8proc_int32_t)cp) != UTF8PROC_CATEGORY_CN) return cp;
    if (cp == 0x2065 || (cp >= 0xFFF0 && cp <= 0xFFF8) || (cp >= 0xE0000 && cp <= 0xE0FFF))
        return 0x0001;                  /* a Control */
    if ((cp >= 0x1F000 && cp <= 0x1FAFF) || (cp >= 0x1FC00 && cp <= 0x1FFFD))
        return 0x00A9;                  /* (c), Extended_Pictographic */
    return cp;
}

size_t rci_uni_grapheme_len(const char *s, size_t n)
{
    uint32_t prev, c;
    int l = rci_utf8_decode(s, n, &prev);
    if (l == 0) return n ? 1 : 0;
    prev = grapheme_stand_in(prev);
    utf8proc_int32_t state = 0;
    size_t pos = (size_t)l;
    while (pos < n) {
        l = rci_utf8_decode(s + pos, n - pos, &c);
        if (l == 0) break;
        c = grapheme_stand_in(c);
        if (utf8proc_grapheme_break_stateful((utf8proc_int32_t)prev, (utf8proc_int32_t)c, &state)) break;
        prev = c;
        pos += (size_t)l;
    }
    return pos;
}
