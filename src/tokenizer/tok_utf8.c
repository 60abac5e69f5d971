/* tok_utf8.c: UTF-8 decoding with the replacement rules of Python's
 * bytes.decode(errors="replace") and Rust's String::from_utf8_lossy (each
 * maximal subpart of an ill-formed sequence becomes one U+FFFD), and the two
 * Unicode character classes the added-token matcher needs. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_internal.h"
#include "util/error.h"

/* Unicode Table 3-7 (well-formed byte sequences): the allowed range of the
 * second byte depends on the first; later bytes are always 80..BF. */
int tela_utf8_next(const unsigned char *s, size_t n, size_t *adv, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) {
        *adv = 1;
        *cp = c;
        return 1;
    }
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        else if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        else if (c == 0xF4) hi = 0x8F;
    } else {
        *adv = 1; /* 80..C1, F5..FF never start a sequence */
        return 0;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) {
            *adv = n;
            return -1;
        }
        unsigned b = s[i];
        if (b < lo || b > hi) {
            *adv = i;
            return 0;
        }
        lo = 0x80;
        hi = 0xBF;
        v = (v << 6) | (b & 0x3F);
    }
    *adv = need;
    *cp = v;
    return 1;
}

bool tela_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        /* ASCII fast path, 8 bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t adv;
        uint32_t cp;
        if (tela_utf8_next(s + i, n - i, &adv, &cp) != 1) return false;
        i += adv;
    }
    return true;
}

size_t tela_utf8_encode(uint32_t cp, char *out) {
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

tela_status tela_utf8_repair(const char *str, size_t n, char **out, size_t *out_len) {
    const unsigned char *s = (const unsigned char *)str;
    /* each bad byte can grow to 3 bytes */
    if (n > (SIZE_MAX - 1) / 3) return tela_errorf(TELA_ERR_ARG, "text of %zu bytes is too long", n);
    char *o = malloc(n * 3 + 1);
    if (!o) return tela_errorf(TELA_ERR_NOMEM, "out of memory repairing %zu bytes of UTF-8", n);
    size_t i = 0, k = 0;
    while (i < n) {
        size_t adv;
        uint32_t cp;
        int r = tela_utf8_next(s + i, n - i, &adv, &cp);
        if (r == 1) {
            memcpy(o + k, s + i, adv);
            k += adv;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
        }
        i += adv;
    }
    o[k] = '\0';
    *out = o;
    *out_len = k;
    return TELA_OK;
}

bool tela_unicode_is_space(uint32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
    switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

bool tela_unicode_is_word(uint32_t cp) {
    if (cp < 0x80)
        return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') || cp == '_';
    if (cp == 0x200C || cp == 0x200D) return true; /* Join_Control */
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}

size_t tela_utf8_prev(const char *str, size_t end, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)str;
    size_t start = end - 1;
    while (start > 0 && end - start < 4 && (s[start] & 0xC0) == 0x80) start--;
    size_t adv;
    if (tela_utf8_next(s + start, end - start, &adv, cp) != 1 || start + adv != end) {
        *cp = 0xFFFD;
        return end - 1;
    }
    return start;
}

/* Characters that start a segment NFC can treat on its own: combining class
 * 0, unchanged by NFC, and never the second character of a composition. A
 * conservative list of ranges (checked against utf8proc in the tests): text
 * made only of these is already NFC, and NFC of a string is the NFC of its
 * pieces cut before any of them. */
bool tela_nfc_stable(uint32_t cp) {
    if (cp < 0x300) return true;
    if (cp < 0x370) return false;
    if (cp < 0x400) return cp != 0x374 && cp != 0x37E && cp != 0x387;            /* Greek */
    if (cp < 0x530) return cp < 0x483 || cp > 0x489;                              /* Cyrillic */
    if (cp >= 0x5D0 && cp <= 0x5EA) return true;                                  /* Hebrew letters */
    if ((cp >= 0x621 && cp <= 0x63A) || (cp >= 0x641 && cp <= 0x64A)) return true; /* Arabic letters */
    if (cp >= 0xE01 && cp <= 0xE30) return true;                                  /* Thai consonants */
    if (cp >= 0x3041 && cp <= 0x3096) return true;                                /* Hiragana */
    if (cp >= 0x30A1 && cp <= 0x30FA) return true;                                /* Katakana */
    if (cp >= 0x3400 && cp <= 0x4DBF) return true;                                /* CJK ext. A */
    if (cp >= 0x4E00 && cp <= 0x9FFF) return true;                                /* CJK */
    if (cp >= 0xAC00 && cp <= 0xD7A3) return true;                                /* Hangul syllables */
    if (cp >= 0xFF01 && cp <= 0xFF5E) return true;                                /* fullwidth ASCII */
    if (cp >= 0x1F300 && cp <= 0x1FAFF) return true;                              /* emoji */
    return false;
}
