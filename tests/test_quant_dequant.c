/* test_quant_dequant.c: dequantization of blocks built byte by byte here.
 * Every expected value is derived by hand from the format definition (ggml's
 * block layouts, ggml-common.h) in the comment beside it; fields are placed
 * at byte offsets written out here, not through tela's structs.
 * fp16 constants: 0x3400 = 0.25, 0x3800 = 0.5, 0x3C00 = 1.0, 0xBC00 = -1.0. */
#include <stdint.h>
#include <string.h>

#include "quant/quant.h"
#include "test.h"

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

/* Dequantizes n elements of type from blk and compares all of them with
 * want[], exactly (the expected values are exact in binary). */
static void check_all(tela_type type, const uint8_t *blk, int n, const float *want) {
    float got[256];
    CHECK_OK(tela_dequantize_row(type, blk, got, n));
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            if (bad++ < 5) fprintf(stderr, "  %s element %d: got %.9g, want %.9g\n", tela_type_name(type), i, got[i], want[i]);
        }
    }
    CHECK_MSG(bad == 0, "%s: %d of %d elements wrong", tela_type_name(type), bad, n);
}

static void fill(float *a, int from, int to, float v) { for (int i = from; i < to; i++) a[i] = v; }

static void test_q4_0(void) {
    /* bytes 0-1: d (fp16), bytes 2..17: qs. Element j < 16 = d * (low nibble
     * of qs[j] - 8); element j + 16 = d * (high nibble of qs[j] - 8). */
    uint8_t b[18];
    put16(b, 0x3800);                 /* d = 0.5 */
    memset(b + 2, 0x88, 16);          /* nibbles 8: value 0 */
    b[2 + 1] = 0xC3;                  /* qs[1] */
    b[2 + 15] = 0x0F;                 /* qs[15] */
    float w[32];
    fill(w, 0, 32, 0.0f);
    w[1] = -2.5f;   /* 0.5 * (3 - 8) */
    w[17] = 2.0f;   /* 0.5 * (12 - 8): the high nibble of qs[1] is element 17 */
    w[15] = 3.5f;   /* 0.5 * (15 - 8) */
    w[31] = -4.0f;  /* 0.5 * (0 - 8) */
    check_all(TELA_TYPE_Q4_0, b, 32, w);
}

static void test_q4_1(void) {
    /* bytes 0-1 d, 2-3 m, 4..19 qs; value = d * q + m. */
    uint8_t b[20];
    put16(b, 0x3800);      /* d = 0.5 */
    put16(b + 2, 0xBC00);  /* m = -1 */
    memset(b + 4, 0, 16);
    b[4 + 0] = 0x52;
    b[4 + 7] = 0xF0;
    float w[32];
    fill(w, 0, 32, -1.0f);  /* q = 0: m */
    w[0] = 0.0f;   /* 0.5 * 2 - 1 */
    w[16] = 1.5f;  /* 0.5 * 5 - 1 */
    w[7] = -1.0f;  /* 0.5 * 0 - 1 */
    w[23] = 6.5f;  /* 0.5 * 15 - 1 */
    check_all(TELA_TYPE_Q4_1, b, 32, w);
}

static void test_q5_0(void) {
    /* bytes 0-1 d, 2..5 qh (little-endian u32: bit j = fifth bit of element
     * j), 6..21 qs (nibbles as Q4_0); value = d * (q - 16). */
    uint8_t b[22];
    put16(b, 0x3400);  /* d = 0.25 */
    memset(b + 2, 0, 20);
    b[2] = 0x08;       /* qh bit 3 */
    b[4] = 0x10;       /* qh bit 20 (byte 2 of qh holds bits 16..23) */
    b[5] = 0x80;       /* qh bit 31 */
    b[6 + 4] = 0xA0;   /* qs[4] */
    b[6 + 15] = 0xF5;  /* qs[15] */
    float w[32];
    fill(w, 0, 32, -4.0f);  /* q = 0: 0.25 * (0 - 16) */
    w[3] = 0.0f;     /* q = 0 | 16: 0.25 * 0 */
    w[4] = -4.0f;    /* low nibble of qs[4] = 0, no fifth bit */
    w[20] = 2.5f;    /* high nibble 10 | 16 = 26: 0.25 * 10 */
    w[15] = -2.75f;  /* 5: 0.25 * (5 - 16) */
    w[31] = 3.75f;   /* 15 | 16 = 31: 0.25 * 15 */
    check_all(TELA_TYPE_Q5_0, b, 32, w);
}

static void test_q5_1(void) {
    /* bytes 0-1 d, 2-3 m, 4..7 qh, 8..23 qs; value = d * q + m. */
    uint8_t b[24];
    put16(b, 0x3C00);      /* d = 1 */
    put16(b + 2, 0x3800);  /* m = 0.5 */
    memset(b + 4, 0, 20);
    b[4] = 0x01;           /* qh bit 0 */
    b[7] = 0x02;           /* qh bit 25 */
    b[8 + 0] = 0x31;
    b[8 + 9] = 0x70;
    float w[32];
    fill(w, 0, 32, 0.5f);
    w[0] = 17.5f;   /* (1 | 16) * 1 + 0.5 */
    w[16] = 3.5f;   /* 3 + 0.5 (bit 16 clear) */
    w[9] = 0.5f;    /* 0 + 0.5 */
    w[25] = 23.5f;  /* (7 | 16) + 0.5 */
    check_all(TELA_TYPE_Q5_1, b, 32, w);
}

static void test_q8_0_q8_1(void) {
    /* Q8_0: bytes 0-1 d, 2..33 int8 qs; value = d * q. */
    uint8_t b[34];
    put16(b, 0x3400);  /* d = 0.25 */
    memset(b + 2, 0, 32);
    b[2 + 0] = 0x80;   /* -128 */
    b[2 + 5] = 0x7F;   /* 127 */
    b[2 + 31] = 0xFD;  /* -3 */
    float w[32];
    fill(w, 0, 32, 0.0f);
    w[0] = -32.0f;   /* 0.25 * -128 */
    w[5] = 31.75f;   /* 0.25 * 127 */
    w[31] = -0.75f;  /* 0.25 * -3 */
    check_all(TELA_TYPE_Q8_0, b, 32, w);

    /* Q8_1: bytes 0-1 d, 2-3 s (a dot-product helper, no effect on values),
     * 4..35 qs. */
    uint8_t c[36];
    put16(c, 0x3800);      /* d = 0.5 */
    put16(c + 2, 0x4000);  /* s = 2, ignored */
    memset(c + 4, 0, 32);
    c[4 + 2] = 10;
    c[4 + 30] = 0xF6;  /* -10 */
    fill(w, 0, 32, 0.0f);
    w[2] = 5.0f;
    w[30] = -5.0f;
    check_all(TELA_TYPE_Q8_1, c, 32, w);
}

/* The IQ4_NL grid as the format defines it. */
static const float iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static void test_iq4_nl(void) {
    /* bytes 0-1 d, 2..17 qs; element j = d * grid[low nibble of qs[j]],
     * element j + 16 = d * grid[high nibble]. qs[j] = j | (15 - j) << 4. */
    uint8_t b[18];
    put16(b, 0x3800);  /* d = 0.5 */
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | (15 - j) << 4);
    float w[32];
    for (int j = 0; j < 16; j++) {
        w[j] = 0.5f * iq4nl[j];
        w[j + 16] = 0.5f * iq4nl[15 - j];
    }
    CHECK(w[0] == -63.5f && w[7] == -5.0f && w[8] == 0.5f && w[31] == -63.5f);  /* spot values */
    check_all(TELA_TYPE_IQ4_NL, b, 32, w);
}

static void test_iq4_xs(void) {
    /* bytes 0-1 d, 2-3 scales_h (u16), 4..7 scales_l, 8..135 qs. Sub-block
     * ib (32 values) has ls = (nibble ib%2 of scales_l[ib/2]) | (bits 2ib..
     * 2ib+1 of scales_h) << 4 and dl = d * (ls - 32); its 16 qs bytes start
     * at 16 * ib, nibbles ordered as in IQ4_NL.
     * Chosen: ib0 ls 33 (low 1, high 2) -> dl 0.25; ib5 ls 28 (low 12, high
     * 1) -> dl -1; ib7 ls 63 (low 15, high 3) -> dl 7.75; others ls 32
     * (low 0, high 2) -> dl 0.
     * scales_h = 2 + 2<<2 + 2<<4 + 2<<6 + 2<<8 + 1<<10 + 2<<12 + 3<<14 = 0xE6AA. */
    uint8_t b[136];
    memset(b, 0, sizeof b);
    put16(b, 0x3400);      /* d = 0.25 */
    put16(b + 2, 0xE6AA);
    b[4 + 0] = 0x01;       /* ib0 low nibble 1, ib1 0 */
    b[4 + 2] = 0xC0;       /* ib4 0, ib5 12 */
    b[4 + 3] = 0xF0;       /* ib6 0, ib7 15 */
    b[8 + 0] = 0xF0;       /* ib0, qs[0] */
    b[8 + 80 + 3] = 0x98;  /* ib5, its qs[3] */
    b[8 + 112 + 15] = 0x07; /* ib7, its qs[15] */
    const float dl[8] = {0.25f, 0, 0, 0, 0, -1.0f, 0, 7.75f};
    float w[256];
    for (int ib = 0; ib < 8; ib++) fill(w, 32 * ib, 32 * ib + 32, dl[ib] * -127.0f);  /* nibble 0: grid -127 */
    w[0] = -31.75f;    /* 0.25 * grid[0] */
    w[16] = 28.25f;    /* 0.25 * grid[15] = 0.25 * 113 */
    w[163] = -1.0f;    /* ib5 element 3: -1 * grid[8] = -1 * 1 */
    w[179] = -13.0f;   /* ib5 element 19: -1 * grid[9] */
    w[239] = -77.5f;   /* ib7 element 15: 7.75 * grid[7] = 7.75 * -10 */
    w[255] = -984.25f; /* ib7 element 31: 7.75 * grid[0] */
    check_all(TELA_TYPE_IQ4_XS, b, 256, w);
}

static void test_q8_K(void) {
    /* bytes 0..3 d (f32), 4..259 int8 qs, 260..291 bsums (not used for
     * values); value = d * q. */
    uint8_t b[292];
    memset(b, 0, sizeof b);
    const uint8_t half[4] = {0x00, 0x00, 0x00, 0x3F};  /* 0.5f */
    memcpy(b, half, 4);
    b[4 + 0] = 0x80;    /* -128 */
    b[4 + 100] = 3;
    b[4 + 255] = 0x7F;  /* 127 */
    b[260] = 0x55;      /* garbage bsums must not matter */
    float w[256];
    fill(w, 0, 256, 0.0f);
    w[0] = -64.0f;
    w[100] = 1.5f;
    w[255] = 63.5f;
    check_all(TELA_TYPE_Q8_K, b, 256, w);
}

static void test_q2_K(void) {
    /* bytes 0..15 scales (low nibble scale, high nibble min, per 16 values),
     * 16..79 qs, 80-81 d, 82-83 dmin. Element e: h = e/128, g = (e%128)/32,
     * l = e%32, q = bits 2g..2g+1 of qs[32h + l]; value = d * scale[e/16] * q
     * - dmin * min[e/16]. d = 0.5, dmin = 0.25. */
    uint8_t b[84];
    memset(b, 0, sizeof b);
    put16(b + 80, 0x3800);
    put16(b + 82, 0x3400);
    b[0] = 0x21;   /* group 0: scale 1, min 2 */
    b[5] = 0x3F;   /* group 5: scale 15, min 3 */
    b[15] = 0xF4;  /* group 15: scale 4, min 15 */
    b[16 + 0] = 0x03;   /* qs[0] bits 0-1 = 3: element 0 */
    b[16 + 20] = 0x20;  /* qs[20] bits 4-5 = 2: element 64 + 20 = 84 */
    b[16 + 63] = 0xC0;  /* qs[63] bits 6-7 = 3: element 128 + 96 + 31 = 255 */
    float w[256];
    fill(w, 0, 256, 0.0f);
    fill(w, 0, 16, -0.5f);      /* q = 0: -0.25 * 2 */
    fill(w, 80, 96, -0.75f);    /* -0.25 * 3 */
    fill(w, 240, 256, -3.75f);  /* -0.25 * 15 */
    w[0] = 1.0f;     /* 0.5 * 1 * 3 - 0.5 */
    w[84] = 14.25f;  /* 0.5 * 15 * 2 - 0.75 */
    w[255] = 2.25f;  /* 0.5 * 4 * 3 - 3.75 */
    check_all(TELA_TYPE_Q2_K, b, 256, w);
}

static void test_q3_K(void) {
    /* bytes 0..31 hmask, 32..95 qs, 96..107 scales, 108-109 d. Scale s
     * (6 bits, minus 32): low 4 bits in the low (s < 8) or high (s >= 8)
     * nibble of byte s % 8, top 2 bits at bits 2(s/4) of byte 8 + s % 4.
     * Element e: h, g, l as Q2_K; q = (bits 2g of qs[32h + l]) - (bit 4h + g
     * of hmask[l] set ? 0 : 4); value = d * scale[e/16] * q. d = 0.25.
     * Scales: s1 = -32 (raw 0: low 0 high 0), s6 = 31 (raw 63: 15, 3),
     * s10 = 2 (raw 34: 2, 2), s13 = -5 (raw 27: 11, 1), others 0 (raw 32:
     * low 0, high 2). */
    uint8_t b[110];
    memset(b, 0, sizeof b);
    put16(b + 108, 0x3400);
    uint8_t *sc = b + 96;
    sc[2] = 0x20;  /* s2 low 0, s10 low 2 */
    sc[5] = 0xB0;  /* s5 low 0, s13 low 11 */
    sc[6] = 0x0F;  /* s6 low 15, s14 low 0 */
    sc[8] = 0xAA;  /* s0, s4, s8, s12: high 2 each */
    sc[9] = 0x68;  /* s1 high 0, s5 2, s9 2, s13 1: 0 | 2<<2 | 2<<4 | 1<<6 */
    sc[10] = 0xAE; /* s2 2, s6 3, s10 2, s14 2: 2 | 3<<2 | 2<<4 | 2<<6 */
    sc[11] = 0xAA; /* s3, s7, s11, s15: 2 */
    uint8_t *qs = b + 32, *hm = b;
    qs[20] = 0x03; hm[20] = 0x01;  /* element 20: q = 3 - 0 */
    qs[4] = 0x40;                  /* element 96 + 4 = 100: q = 1 - 4 (bit 3 of hmask[4] clear) */
    qs[42] = 0x08; hm[10] = 0x20;  /* element 128 + 32 + 10 = 170: q = 2, hmask bit 4 + 1 */
    qs[63] = 0x30; hm[31] = 0x40;  /* element 128 + 64 + 31 = 223: q = 3, hmask bit 4 + 2 */
    float w[256];
    /* all other elements: q = 0 - 4, value = 0.25 * scale * -4 = -scale */
    fill(w, 0, 256, 0.0f);
    fill(w, 16, 32, 32.0f);
    fill(w, 96, 112, -31.0f);
    fill(w, 160, 176, -2.0f);
    fill(w, 208, 224, 5.0f);
    w[20] = -24.0f;    /* 0.25 * -32 * 3 */
    w[100] = -23.25f;  /* 0.25 * 31 * -3 */
    w[170] = 1.0f;     /* 0.25 * 2 * 2 */
    w[223] = -3.75f;   /* 0.25 * -5 * 3 */
    check_all(TELA_TYPE_Q3_K, b, 256, w);
}

/* The 12 scale bytes of the Q4_K/Q5_K tests, packing scales {1, 2, 3, 4,
 * 37, 50, 63, 17} and mins {0, 5, 10, 63, 45, 1, 32, 60}: bytes 0..3 =
 * scale j | (top 2 bits of scale j+4) << 6; bytes 4..7 = min j | (top 2 bits
 * of min j+4) << 6; bytes 8..11 = (low 4 bits of scale j+4) | (low 4 bits of
 * min j+4) << 4. 37 = 0b10'0101, 50 = 0b11'0010, 63 = 0b11'1111,
 * 17 = 0b01'0001; 45 = 0b10'1101, 1, 32 = 0b10'0000, 60 = 0b11'1100. */
static const uint8_t k4_scales[12] = {
    1 | 2 << 6, 2 | 3 << 6, 3 | 3 << 6, 4 | 1 << 6,
    0 | 2 << 6, 5 | 0 << 6, 10 | 2 << 6, 63 | 3 << 6,
    5 | 13 << 4, 2 | 1 << 4, 15 | 0 << 4, 1 | 12 << 4,
};
static const float k4_min_value[8] = {0, -1.25f, -2.5f, -15.75f, -11.25f, -0.25f, -8.0f, -15.0f}; /* -0.25 * min */

static void test_q4_K(void) {
    /* bytes 0-1 d, 2-3 dmin, 4..15 scales, 16..143 qs. Sub-block j (32
     * values) = d * scale_j * q - dmin * min_j; chunk c = j / 2 uses qs[32c +
     * l], low nibbles for even j, high for odd. d = 0.5, dmin = 0.25. */
    CHECK(k4_scales[0] == 0x81 && k4_scales[7] == 0xFF && k4_scales[8] == 0xD5 && k4_scales[11] == 0xC1);
    uint8_t b[144];
    memset(b, 0, sizeof b);
    put16(b, 0x3800);
    put16(b + 2, 0x3400);
    memcpy(b + 4, k4_scales, 12);
    uint8_t *qs = b + 16;
    qs[0] = 0x21;
    qs[32 + 16] = 0x44;
    qs[64 + 7] = 0x9F;
    qs[96 + 31] = 0xA3;
    float w[256];
    for (int j = 0; j < 8; j++) fill(w, 32 * j, 32 * j + 32, k4_min_value[j]);  /* q = 0 */
    w[0] = 0.5f;      /* 0.5 * 1 * 1 - 0 */
    w[32] = 0.75f;    /* 0.5 * 2 * 2 - 1.25 */
    w[80] = 3.5f;     /* sub-block 2, l 16: 0.5 * 3 * 4 - 2.5 */
    w[112] = -7.75f;  /* sub-block 3, l 16: 0.5 * 4 * 4 - 15.75 */
    w[135] = 266.25f; /* sub-block 4 (scale 37, min 45), l 7: 0.5 * 37 * 15 - 11.25 */
    w[167] = 224.75f; /* sub-block 5 (50, 1): 0.5 * 50 * 9 - 0.25 */
    w[223] = 86.5f;   /* sub-block 6 (63, 32), l 31: 0.5 * 63 * 3 - 8 */
    w[255] = 70.0f;   /* sub-block 7 (17, 60): 0.5 * 17 * 10 - 15 */
    check_all(TELA_TYPE_Q4_K, b, 256, w);
}

static void test_q5_K(void) {
    /* bytes 0-1 d, 2-3 dmin, 4..15 scales (as Q4_K), 16..47 qh, 48..175 qs.
     * The fifth bit of the value at l in sub-block j is bit j of qh[l]. */
    uint8_t b[176];
    memset(b, 0, sizeof b);
    put16(b, 0x3800);
    put16(b + 2, 0x3400);
    memcpy(b + 4, k4_scales, 12);
    uint8_t *qh = b + 16, *qs = b + 48;
    qh[0] = 0x01;               /* element 0 (j 0): q = 0 + 16 */
    qh[3] = 0x08;               /* element 96 + 3 (j 3): q = 16 */
    qs[64 + 7] = 0x9F; qh[7] = 0x10;   /* element 135 (j 4): 15 + 16; element 167 (j 5): 9 */
    qs[96 + 31] = 0xA3; qh[31] = 0x80; /* element 223 (j 6): 3; element 255 (j 7): 10 + 16 */
    float w[256];
    for (int j = 0; j < 8; j++) fill(w, 32 * j, 32 * j + 32, k4_min_value[j]);
    w[0] = 8.0f;      /* 0.5 * 1 * 16 - 0 */
    w[99] = 16.25f;   /* 0.5 * 4 * 16 - 15.75 */
    w[135] = 562.25f; /* 0.5 * 37 * 31 - 11.25 */
    w[167] = 224.75f; /* 0.5 * 50 * 9 - 0.25 */
    w[223] = 86.5f;   /* 0.5 * 63 * 3 - 8 */
    w[255] = 206.0f;  /* 0.5 * 17 * 26 - 15 */
    check_all(TELA_TYPE_Q5_K, b, 256, w);
}

static void test_q6_K(void) {
    /* bytes 0..127 ql, 128..191 qh, 192..207 int8 scales, 208-209 d.
     * Element e: h = e/128, g = (e%128)/32, l = e%32; low 4 bits: low nibble
     * of ql[64h + l] (g 0), of ql[64h + l + 32] (g 1), high nibbles of the
     * same (g 2, 3); top 2 bits: bits 2g..2g+1 of qh[32h + l]; value = d *
     * scale[e/16] * (q - 32). d = 0.5; scales s0 = 1, s3 = -2, s9 = 127,
     * s12 = 3, s14 = -128, others 0. */
    uint8_t b[210];
    memset(b, 0, sizeof b);
    put16(b + 208, 0x3800);
    uint8_t *ql = b, *qh = b + 128, *sc = b + 192;
    sc[0] = 1; sc[3] = 0xFE; sc[9] = 127; sc[12] = 3; sc[14] = 0x80;
    ql[5] = 0x0F; qh[5] = 0x03;    /* element 5: q = 15 | 3<<4 = 63 */
    ql[50] = 0x05; qh[18] = 0x04;  /* element 50 (g 1, l 18): q = 5 | 1<<4 = 21 */
    ql[86] = 0x01; qh[54] = 0x02;  /* element 150 (h 1, g 0, l 22): q = 1 | 2<<4 = 33 */
    ql[72] = 0xC0; qh[40] = 0x30;  /* element 200 (h 1, g 2, l 8): q = 12 | 3<<4 = 60 */
    ql[102] = 0x70; qh[38] = 0x40; /* element 230 (h 1, g 3, l 6): q = 7 | 1<<4 = 23 */
    float w[256];
    /* other elements: q = 0, value = 0.5 * scale * -32 = -16 * scale */
    fill(w, 0, 256, 0.0f);
    fill(w, 0, 16, -16.0f);
    fill(w, 48, 64, 32.0f);
    fill(w, 144, 160, -2032.0f);
    fill(w, 192, 208, -48.0f);
    fill(w, 224, 240, 2048.0f);
    w[5] = 15.5f;     /* 0.5 * 1 * (63 - 32) */
    w[50] = 11.0f;    /* 0.5 * -2 * (21 - 32) */
    w[150] = 63.5f;   /* 0.5 * 127 * (33 - 32) */
    w[200] = 42.0f;   /* 0.5 * 3 * (60 - 32) */
    w[230] = 576.0f;  /* 0.5 * -128 * (23 - 32) */
    check_all(TELA_TYPE_Q6_K, b, 256, w);
}

static void test_plain(void) {
    const uint8_t f16[6] = {0x00, 0x3C, 0x00, 0xC0, 0x01, 0x00};  /* 1, -2, 2^-24 (smallest subnormal) */
    float w[4] = {1.0f, -2.0f, 5.9604644775390625e-8f};
    check_all(TELA_TYPE_F16, f16, 3, w);
    const uint8_t bf16[4] = {0x80, 0x3F, 0x49, 0x40};  /* 0x3F80 = 1, 0x4049 = 3.140625 */
    w[0] = 1.0f; w[1] = 3.140625f;
    check_all(TELA_TYPE_BF16, bf16, 2, w);
    const uint8_t f32[4] = {0x00, 0x00, 0xC0, 0x3F};  /* 1.5f */
    w[0] = 1.5f;
    check_all(TELA_TYPE_F32, f32, 1, w);
    const uint8_t f64[8] = {0, 0, 0, 0, 0, 0, 0xE0, 0x3F};  /* 0x3FE0... = 0.5 */
    w[0] = 0.5f;
    check_all(TELA_TYPE_F64, f64, 1, w);
    const uint8_t i8[2] = {0xFF, 0x7F};
    w[0] = -1.0f; w[1] = 127.0f;
    check_all(TELA_TYPE_I8, i8, 2, w);
    const uint8_t i16[4] = {0x00, 0x80, 0x34, 0x12};
    w[0] = -32768.0f; w[1] = 4660.0f;  /* 0x1234 */
    check_all(TELA_TYPE_I16, i16, 2, w);
    const uint8_t i32[4] = {0x01, 0x00, 0x00, 0x80};  /* 0x80000001 = -2147483647, nearest float -2^31 */
    w[0] = -2147483648.0f;
    check_all(TELA_TYPE_I32, i32, 1, w);
    const uint8_t i64[8] = {0, 0, 0, 0, 0, 1, 0, 0};  /* 2^40 */
    w[0] = 1099511627776.0f;
    check_all(TELA_TYPE_I64, i64, 1, w);
}

/* Blocks in a mapped file need not be aligned: Q8_0 blocks at an odd
 * address (ASan/UBSan builds would flag a misaligned access) and two blocks
 * back to back give the same values as one aligned block. */
static void test_unaligned_and_multi_block(void) {
    static uint8_t buf[1 + 2 * 34];
    uint8_t *b = buf + 1;
    for (int k = 0; k < 2; k++) {
        put16(b + 34 * k, k == 0 ? 0x3C00 : 0xBC00);  /* d = 1, then -1 */
        for (int j = 0; j < 32; j++) b[34 * k + 2 + j] = (uint8_t)(j - 16);
    }
    float got[64];
    CHECK_OK(tela_dequantize_row(TELA_TYPE_Q8_0, b, got, 64));
    for (int j = 0; j < 32; j++) {
        CHECK(got[j] == (float)(j - 16));
        CHECK(got[32 + j] == (float)(16 - j));
    }
}

static void test_errors(void) {
    uint8_t blk[144] = {0};
    float out[256];
    CHECK(tela_dequantize_row(TELA_TYPE_Q4_K, blk, out, 100) == TELA_ERR_ARG);  /* not whole blocks */
    CHECK(strstr(tela_last_error(), "q4_K") != NULL);
    CHECK(tela_dequantize_row(TELA_TYPE_Q4_K, blk, out, -256) == TELA_ERR_ARG);
    CHECK(tela_dequantize_row((tela_type)4, blk, out, 32) != TELA_OK);
    CHECK(tela_dequantize_row((tela_type)99, blk, out, 32) != TELA_OK);
    CHECK(tela_dequantize_row(TELA_TYPE_Q4_K, NULL, out, 256) == TELA_ERR_ARG);
    CHECK_OK(tela_dequantize_row(TELA_TYPE_Q4_K, NULL, NULL, 0));  /* nothing to do */
}

int main(void) {
    test_q4_0();
    test_q4_1();
    test_q5_0();
    test_q5_1();
    test_q8_0_q8_1();
    test_iq4_nl();
    test_iq4_xs();
    test_q8_K();
    test_q2_K();
    test_q3_K();
    test_q4_K();
    test_q5_K();
    test_q6_K();
    test_plain();
    test_unaligned_and_multi_block();
    test_errors();
    return test_finish();
}
