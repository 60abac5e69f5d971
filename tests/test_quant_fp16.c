/* test_quant_fp16.c: util/fp16.h's IEEE half and bfloat16 conversions
 * against references computed here from the formats' definitions (in
 * double): all 65536 halves, every halfway point between neighbouring
 * halves, subnormals, overflow, NaNs, and pseudo-random floats. */
#include <float.h>
#include <stdint.h>

#include "test.h"
#include "util/fp16.h"

/* Value of half h from its fields: (-1)^s * 2^(e-15) * (1 + m/1024), or
 * 2^-14 * m/1024 for e = 0. Infinity and NaN (e = 31) are handled apart. */
static double half_value(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static void test_f16_to_f32_all(void) {
    int bad = 0, bad_round = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        const uint16_t h = (uint16_t)b;
        const float f = tela_f16_to_f32(h);
        const int e = (h >> 10) & 31, m = h & 1023;
        if (e == 31) {
            if (m == 0 ? !(isinf(f) && (signbit(f) != 0) == (h >> 15)) : !isnan(f)) bad++;
            /* NaN stays NaN (the payload's top bits are kept), inf stays inf */
            const uint16_t back = tela_f32_to_f16(f);
            if (m == 0 ? back != h : !((back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0 && (back & 0x8000) == (h & 0x8000)))
                bad_round++;
            continue;
        }
        if ((double)f != half_value(h) || (signbit(f) != 0) != (h >> 15)) bad++;  /* -0 keeps its sign */
        if (tela_f32_to_f16(f) != h) bad_round++;
    }
    CHECK_MSG(bad == 0, "%d halves convert to the wrong float", bad);
    CHECK_MSG(bad_round == 0, "%d halves do not round-trip", bad_round);
}

/* Halfway between two neighbouring halves, round to the one with an even
 * mantissa; a hair either side, to the nearer one. The midpoint of two
 * halves has 12 significant bits, so it is exact in a float. */
static void test_f16_halfway(void) {
    int bad = 0;
    for (uint32_t b = 0; b < 0x7bff; b++) {  /* all pairs of finite positive halves */
        for (int sign = 0; sign < 2; sign++) {
            const uint16_t lo = (uint16_t)(b | sign << 15), hi = (uint16_t)((b + 1) | sign << 15);
            const float mid = (float)((half_value(lo) + half_value(hi)) / 2);
            if ((double)mid != (half_value(lo) + half_value(hi)) / 2) { bad++; continue; }
            const uint16_t even = (lo & 1) ? hi : lo;
            if (tela_f32_to_f16(mid) != even) bad++;
            const float toward_lo = nextafterf(mid, sign ? INFINITY : -INFINITY);
            const float toward_hi = nextafterf(mid, sign ? -INFINITY : INFINITY);
            if (tela_f32_to_f16(toward_lo) != lo) bad++;
            if (tela_f32_to_f16(toward_hi) != hi) bad++;
        }
    }
    CHECK_MSG(bad == 0, "%d halfway cases wrong", bad);
}

static void test_f16_edges(void) {
    /* largest half 65504 = 0x7bff; the next step would be 65536, so halfway
     * is 65520: below it rounds down, at it ties to even = 65536 = inf */
    CHECK_EQ_INT(tela_f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ_INT(tela_f32_to_f16(65519.996f), 0x7bff);
    CHECK_EQ_INT(tela_f32_to_f16(65520.0f), 0x7c00);
    CHECK_EQ_INT(tela_f32_to_f16(1e6f), 0x7c00);
    CHECK_EQ_INT(tela_f32_to_f16(-1e6f), 0xfc00);
    CHECK_EQ_INT(tela_f32_to_f16(FLT_MAX), 0x7c00);
    CHECK_EQ_INT(tela_f32_to_f16(INFINITY), 0x7c00);
    CHECK_EQ_INT(tela_f32_to_f16(-INFINITY), 0xfc00);
    /* subnormals: smallest half is 2^-24 = 0x0001; 2^-25 is halfway to 0
     * and ties to even (0); 3 * 2^-25 ties between 1 and 2 -> 2 */
    CHECK_EQ_INT(tela_f32_to_f16(0x1p-24f), 0x0001);
    CHECK_EQ_INT(tela_f32_to_f16(0x1p-25f), 0x0000);
    CHECK_EQ_INT(tela_f32_to_f16(0x1.000002p-25f), 0x0001);
    CHECK_EQ_INT(tela_f32_to_f16(0x3p-25f), 0x0002);
    CHECK_EQ_INT(tela_f32_to_f16(-0x1p-25f), 0x8000);
    CHECK_EQ_INT(tela_f32_to_f16(0x1p-26f), 0x0000);
    CHECK_EQ_INT(tela_f32_to_f16(1e-40f), 0x0000);  /* a float subnormal */
    CHECK_EQ_INT(tela_f32_to_f16(-0.0f), 0x8000);
    /* largest subnormal 1023 * 2^-24 = 0x1.ff8p-15; halfway to the smallest
     * normal 2^-14 (0x0400, even) is 0x1.ffcp-15, which rounds up into it */
    CHECK_EQ_INT(tela_f32_to_f16(0x1.ff8p-15f), 0x03ff);
    CHECK_EQ_INT(tela_f32_to_f16(0x1.ffap-15f), 0x03ff);
    CHECK_EQ_INT(tela_f32_to_f16(0x1.ffcp-15f), 0x0400);
    CHECK_EQ_INT(tela_f32_to_f16(0x1p-14f), 0x0400);
    /* well-known values */
    CHECK_EQ_INT(tela_f32_to_f16(1.0f), 0x3c00);
    CHECK_EQ_INT(tela_f32_to_f16(-2.0f), 0xc000);
    CHECK_EQ_INT(tela_f32_to_f16(0.1f), 0x2e66);  /* 0.0999755859375 */
    CHECK_EQ_INT(tela_f32_to_f16(3.14159265f), 0x4248);
    const uint16_t qnan = tela_f32_to_f16(NAN);
    CHECK((qnan & 0x7c00) == 0x7c00 && (qnan & 0x3ff) != 0);
    /* a signalling float NaN whose payload sits only in the low 13 bits
     * must not turn into infinity */
    const uint16_t snan = tela_f32_to_f16(tela_bits_to_f32(0x7f800001u));
    CHECK((snan & 0x7c00) == 0x7c00 && (snan & 0x3ff) != 0);
}

/* Nearest half to v (a finite double) by search over the sorted positive
 * halves, ties to even, beyond 65520 infinity. */
static uint16_t nearest_half(double v) {
    const uint16_t sign = v < 0 || (v == 0 && signbit(v)) ? 0x8000 : 0;
    const double a = fabs(v);
    if (a >= 65520.0) return (uint16_t)(sign | 0x7c00);
    uint32_t lo = 0, hi = 0x7bff;  /* half_value is increasing in the bits */
    while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        if (half_value((uint16_t)mid) <= a) lo = mid; else hi = mid;
    }
    if (half_value((uint16_t)hi) <= a) lo = hi;
    const uint32_t up = lo + 1;
    if (up > 0x7bff) return (uint16_t)(sign | lo);
    const double dl = a - half_value((uint16_t)lo), du = half_value((uint16_t)up) - a;
    const uint32_t pick = dl < du ? lo : du < dl ? up : (lo & 1 ? up : lo);
    return (uint16_t)(sign | pick);
}

static uint64_t rng = 88172645463325252ull;
static uint32_t next_u32(void) {  /* xorshift64 */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static void test_f16_random(void) {
    int bad = 0;
    for (int i = 0; i < 300000; i++) {
        /* exponents spread over 2^-30 .. 2^17: subnormal to overflow */
        const uint32_t bits = (next_u32() & 0x807fffffu) | (uint32_t)(97 + next_u32() % 48) << 23;
        const float f = tela_bits_to_f32(bits);
        if (tela_f32_to_f16(f) != nearest_half(f)) {
            if (bad++ < 5) fprintf(stderr, "  f16(%a) = %04x, want %04x\n", (double)f, tela_f32_to_f16(f), nearest_half(f));
        }
    }
    CHECK_MSG(bad == 0, "%d random floats round to the wrong half", bad);
}

/* bfloat16 is the top half of a float: to_f32 appends 16 zero bits;
 * from_f32 rounds to nearest even on the dropped 16 bits. */
static uint16_t nearest_bf16(float f) {
    const uint32_t bits = tela_f32_to_bits(f);
    const uint32_t lo = bits & 0xffff0000u, hi = lo + 0x10000u;  /* same sign, next magnitude */
    const double a = fabs((double)f), vlo = fabs((double)tela_bits_to_f32(lo));
    /* hi may be the infinity pattern: its "value" is then 2^128 */
    const double vhi = (hi & 0x7f800000u) == 0x7f800000u ? ldexp(1.0, 128) : fabs((double)tela_bits_to_f32(hi));
    const double dl = a - vlo, dh = vhi - a;
    const uint32_t pick = dl < dh ? lo : dh < dl ? hi : ((lo >> 16) & 1 ? hi : lo);
    return (uint16_t)(pick >> 16);
}

static void test_bf16(void) {
    int bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {  /* every bf16 round-trips (NaNs stay NaN) */
        const float f = tela_bf16_to_f32((uint16_t)b);
        if (tela_f32_to_bits(f) != b << 16) bad++;
        const uint16_t back = tela_f32_to_bf16(f);
        if (isnan(f) ? !isnan(tela_bf16_to_f32(back)) : back != b) bad++;
    }
    CHECK_MSG(bad == 0, "%d bf16 values do not round-trip", bad);
    bad = 0;
    for (int i = 0; i < 300000; i++) {
        const float f = tela_bits_to_f32(next_u32());
        if (isnan(f) || isinf(f)) continue;
        if (tela_f32_to_bf16(f) != nearest_bf16(f)) bad++;
    }
    CHECK_MSG(bad == 0, "%d random floats round to the wrong bf16", bad);
    /* 1 + 2^-8 is halfway between 1 (0x3f80) and 1 + 2^-7 (0x3f81): even */
    CHECK_EQ_INT(tela_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    CHECK_EQ_INT(tela_f32_to_bf16(1.0f + 0x3p-8f), 0x3f82);
    CHECK_EQ_INT(tela_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    CHECK_EQ_INT(tela_f32_to_bf16(FLT_MAX), 0x7f80);  /* rounds up to infinity */
    CHECK_EQ_INT(tela_f32_to_bf16(-0.0f), 0x8000);
    /* a float NaN with only low payload bits must stay NaN, not become inf */
    CHECK(isnan(tela_bf16_to_f32(tela_f32_to_bf16(tela_bits_to_f32(0x7f800001u)))));
    CHECK(isnan(tela_bf16_to_f32(tela_f32_to_bf16(tela_bits_to_f32(0xff800001u)))));
}

int main(void) {
    test_f16_to_f32_all();
    test_f16_halfway();
    test_f16_edges();
    test_f16_random();
    test_bf16();
    return test_finish();
}
