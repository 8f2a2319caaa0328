/* unicode.h - UTF-8 and the Unicode properties the tokenizers need (unicode.c). The
 * lowest layer of src/text: it knows nothing of tokenizers. */
#ifndef REDCO_TEXT_UNICODE_H
#define REDCO_TEXT_UNICODE_H

#include <stddef.h>
#include <stdint.h>

enum { UNI_OTHER = 0, UNI_LETTER = 1, UNI_NUMBER = 2, UNI_SPACE = 3 };

/* Decodes one UTF-8 character at s[0..n): its length (1-4), or 0 when the bytes there are
 * not valid UTF-8 (overlong, surrogate, past U+10FFFF, truncated). */
int rci_utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Byte offset of the first invalid UTF-8 sequence, or n when all of s is valid. */
size_t rci_utf8_check(const char *s, size_t n);
/* Length of the UTF-8 character starting with byte c (1 for a stray byte). */
int rci_utf8_len(unsigned char c);
/* Writes cp as UTF-8 into out (4 bytes room); returns the length. */
int rci_utf8_encode(uint32_t cp, char *out);
/* The code point that ends just before s[pos] (s valid UTF-8); 0 at the start. */
uint32_t rci_utf8_before(const char *s, size_t pos);
/* The regex class (UNI_*) of a code point: \p{L}, \p{N}, White_Space, or other. */
int rci_uni_class(uint32_t cp);
/* Length in bytes of the extended grapheme cluster (UAX #29) that starts s[0..n); s valid. */
size_t rci_uni_grapheme_len(const char *s, size_t n);

#endif
