/* unicode.c - UTF-8 decoding and the few Unicode properties the tokenizers need: the
 * classes of the GPT-2 pattern (\p{L}, \p{N}, \s = White_Space) and extended grapheme
 * clusters (UAX #29), from the ranges in unicode_table.h.
 *
 * unicode_table.h is generated with this Python 3 script from Debian's unicode-data
 * package (apt-get install unicode-data), run as `python3 gen.py > unicode_table.h`:
 *
 *   import re
 *   U = "/usr/share/unicode/"
 *   def ranges(path, want):
 *       for line in open(U + path, encoding="utf-8"):
 *           line = line.split("#")[0].strip()
 *           if not line:
 *               continue
 *           f = [x.strip() for x in line.split(";")]
 *           if f[1] != want:
 *               continue
 *           a, _, b = f[0].partition("..")
 *           yield int(a, 16), int(b or a, 16)
 *   N = 0x110000
 *   cat = bytearray(N)          # 1 letter, 2 number, 3 white space
 *   first = None
 *   for line in open(U + "UnicodeData.txt", encoding="utf-8"):
 *       f = line.split(";")
 *       cp, name, gc = int(f[0], 16), f[1], f[2]
 *       if name.endswith(", First>"):
 *           first = cp
 *           continue
 *       lo = first if name.endswith(", Last>") else cp
 *       first = None
 *       c = 1 if gc[0] == "L" else 2 if gc[0] == "N" else 0
 *       for x in range(lo, cp + 1):
 *           cat[x] = c
 *   for a, b in ranges("PropList.txt", "White_Space"):
 *       for x in range(a, b + 1):
 *           cat[x] = 3
 *   GCB = ["Other", "CR", "LF", "Control", "Extend", "ZWJ", "Regional_Indicator", "Prepend",
 *          "SpacingMark", "L", "V", "T", "LV", "LVT"]
 *   gcb = bytearray(N)
 *   for i, name in enumerate(GCB[1:], 1):
 *       for a, b in ranges("auxiliary/GraphemeBreakProperty.txt", name):
 *           for x in range(a, b + 1):
 *               gcb[x] = i
 *   pict = bytearray(N)
 *   for a, b in ranges("emoji/emoji-data.txt", "Extended_Pictographic"):
 *       for x in range(a, b + 1):
 *           pict[x] = 1
 *   val = [cat[x] | (gcb[x] << 2) | (pict[x] << 6) for x in range(N)]
 *   out, x = [], 0
 *   while x < N:
 *       y = x
 *       while y + 1 < N and val[y + 1] == val[x]:
 *           y += 1
 *       if val[x]:
 *           out.append((x, y, val[x]))
 *       x = y + 1
 *   # then print the header comment, UNI_NRANGES = len(out), and the three arrays
 *   # uni_range_lo, uni_range_hi (as 0x%05X, 8 a line) and uni_range_class (16 a line)
 *   # from out, as unicode_table.h shows them.
 */
#include "tokenizer_internal.h"
#include "unicode_table.h"

int utf8_len(unsigned char c)
{
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 1;
}

int utf8_decode(const char *str, size_t n, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *)str;
    if (n == 0) return 0;
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2; v = c & 0x1F; min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3; v = c & 0x0F; min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4; v = c & 0x07; min = 0x10000;
    } else {
        return 0;
    }
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

size_t utf8_check(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int l = utf8_decode(s + i, n - i, &cp);
        if (l == 0) return i;
        i += (size_t)l;
    }
    return n;
}

int utf8_encode(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The class byte of cp (see unicode_table.h) by binary search over the ranges. */
static int uni_lookup(uint32_t cp)
{
    int lo = 0, hi = UNI_NRANGES - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < uni_range_lo[mid])
            hi = mid - 1;
        else if (cp > uni_range_hi[mid])
            lo = mid + 1;
        else
            return uni_range_class[mid];
    }
    return 0;
}

int uni_class(uint32_t cp)
{
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return UNI_LETTER;
        if (cp >= '0' && cp <= '9') return UNI_NUMBER;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return UNI_SPACE;
        return UNI_OTHER;
    }
    return uni_lookup(cp) & 3;
}

int uni_gcb(uint32_t cp)
{
    if (cp >= 0x20 && cp < 0x7F) return GCB_OTHER;
    return (uni_lookup(cp) >> 2) & 15;
}

int uni_pictographic(uint32_t cp)
{
    return cp >= 0xA9 && (uni_lookup(cp) & 64);
}

/* UAX #29 extended grapheme clusters, rules GB3-GB13 (without 15.1's GB9c). */
size_t uni_grapheme_len(const char *s, size_t n)
{
    uint32_t c;
    int l = utf8_decode(s, n, &c);
    if (l == 0) return n ? 1 : 0;
    int prev = uni_gcb(c);
    int ri = prev == GCB_RI;              /* regional indicators in a row */
    int emoji = uni_pictographic(c);      /* 1: after ExtPict Extend*, 2: then ZWJ */
    size_t pos = (size_t)l;
    while (pos < n) {
        l = utf8_decode(s + pos, n - pos, &c);
        if (l == 0) break;
        int g = uni_gcb(c), pict = uni_pictographic(c), join;
        if (prev == GCB_CR && g == GCB_LF)
            join = 1;
        else if (prev == GCB_CR || prev == GCB_LF || prev == GCB_CONTROL)
            join = 0;
        else if (g == GCB_CR || g == GCB_LF || g == GCB_CONTROL)
            join = 0;
        else if (prev == GCB_L && (g == GCB_L || g == GCB_V || g == GCB_LV || g == GCB_LVT))
            join = 1;
        else if ((prev == GCB_LV || prev == GCB_V) && (g == GCB_V || g == GCB_T))
            join = 1;
        else if ((prev == GCB_LVT || prev == GCB_T) && g == GCB_T)
            join = 1;
        else if (g == GCB_EXTEND || g == GCB_ZWJ || g == GCB_SPACINGMARK)
            join = 1;
        else if (prev == GCB_PREPEND)
            join = 1;
        else if (prev == GCB_ZWJ && emoji == 2 && pict)
            join = 1;
        else if (prev == GCB_RI && g == GCB_RI && (ri & 1))
            join = 1;
        else
            join = 0;
        if (!join) break;
        if (pict)
            emoji = 1;
        else if (g == GCB_ZWJ && emoji == 1)
            emoji = 2;
        else if (!(g == GCB_EXTEND && emoji == 1))
            emoji = 0;
        ri = g == GCB_RI ? ri + 1 : 0;
        prev = g;
        pos += (size_t)l;
    }
    return pos;
}
