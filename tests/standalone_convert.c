/* The 16-bit element types of favor.h (section 4.3b): fp16 (IEEE binary16) and
 * bf16 widened to fp32 and fp32 narrowed to them, on the vector path (the array
 * forms favor__widen_* / favor__narrow_*, whose bodies are the backend's
 * load-and-widen and narrow-and-store) and on the scalar path (favor__s_*),
 * against a reference computed here in double arithmetic:
 *
 * 1. Widening, exhaustive: all 65,536 fp16 and all 65,536 bf16 bit patterns.
 *    A finite value must come out exactly (its value rebuilt with ldexp, the
 *    sign of zero kept), +-inf as +-inf, a NaN as the quiet NaN with the same
 *    sign and payload (fp16: payload << 13; both: bit 22 set).
 * 2. Narrowing, a dense sweep: every 4093rd fp32 bit pattern (about 1.05e6,
 *    both signs, NaNs, infinities, subnormals), then every halfway case of
 *    each type (the exact midpoint of two neighbouring finite values, and the
 *    floats just below and above it, both signs), then directed cases. The
 *    reference finds the nearest representable value by bisection in a table
 *    of the type's finite values (in double, where every difference involved
 *    is exact), ties to the even bit pattern; past the largest finite value
 *    the next one up is 2^16 (fp16) or 2^128 (bf16), which is +inf. A NaN
 *    must give sign | quiet bit | the payload's top bits (fp16: 0x7e00 |
 *    bits 21..13; bf16: the top 16 bits | 0x40).
 * 3. Round trip: every finite or infinite fp16 and bf16 value widened and
 *    narrowed again is the same bits (NaNs come back quiet).
 * The vector and the scalar paths must both give the reference's bits, so every
 * backend (scalar, AVX2 with F16C, NEON) gives the same bits for the same input.
 *
 * Self-contained: the implementation is expanded here (FAVOR_STATIC), so the
 * internal favor__ functions are callable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#define FAVOR_STATIC
#define FAVOR_IMPLEMENTATION
#include "favor.h"
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include "test_util.h"

#define SWEEP_STRIDE 4093u /* prime: the low mantissa bits take every value */
#define BLOCK 1021u        /* values per array call: a vector body and a tail */

enum { F16 = 0, BF16 = 1 };

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* the type's layout: mantissa bits, exponent bias */
static int mant_bits(int t) { return t == F16 ? 10 : 7; }
static int exp_bias(int t) { return t == F16 ? 15 : 127; }
static uint32_t exp_mask(int t) { return t == F16 ? 0x7c00u : 0x7f80u; }

/* The exact value of a finite 16-bit pattern, in double. */
static double value_of(int t, uint16_t h)
{
    int mb = mant_bits(t), e = (int)((h & 0x7fffu) >> mb);
    uint32_t m = h & ((1u << mb) - 1u);
    double v = e ? ldexp((double)((1u << mb) | m), e - exp_bias(t) - mb)
                 : ldexp((double)m, 1 - exp_bias(t) - mb);
    return (h & 0x8000u) ? -v : v;
}

/* Expected fp32 bits of widening h. */
static uint32_t ref_widen(int t, uint16_t h)
{
    int mb = mant_bits(t);
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, m = h & ((1u << mb) - 1u);
    if ((h & exp_mask(t)) == exp_mask(t)) {
        if (!m) return sign | 0x7f800000u;
        return sign | 0x7f800000u | 0x400000u | (m << (23 - mb));
    }
    return bits_of((float)value_of(t, h)); /* exact: both types fit in fp32 */
}

/* Positive finite values of each type, increasing with the bit pattern, and the
 * value one past the largest (2^16 or 2^128: where rounding reaches +inf). */
static double *g_table[2];
static uint16_t g_count[2];

static int make_tables(void **state)
{
    int t;
    (void)state;
    for (t = 0; t < 2; ++t) {
        uint16_t n = (uint16_t)(exp_mask(t)), i; /* patterns 0 .. n-1 are finite */
        g_table[t] = (double *)malloc(((size_t)n + 1) * sizeof(double));
        if (!g_table[t]) return -1;
        for (i = 0; i < n; ++i) g_table[t][i] = value_of(t, i);
        g_table[t][n] = t == F16 ? 65536.0 : ldexp(1.0, 128);
        g_count[t] = n;
    }
    return 0;
}

static int free_tables(void **state)
{
    (void)state;
    free(g_table[0]);
    free(g_table[1]);
    return 0;
}

/* Expected bits of narrowing x: nearest, ties to even. */
static uint16_t ref_narrow(int t, float x)
{
    uint32_t u = bits_of(x), a = u & 0x7fffffffu;
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u), lo = 0, hi;
    const double *v = g_table[t];
    double xd = fabs((double)x), dl, dh;
    if (a > 0x7f800000u) {
        if (t == F16) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x1ffu));
        return (uint16_t)((u >> 16) | 0x40u);
    }
    if (a == 0x7f800000u || xd >= v[g_count[t]]) return (uint16_t)(sign | exp_mask(t));
    hi = g_count[t]; /* v[lo] <= xd < v[hi] */
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)(lo + (hi - lo) / 2);
        if (v[mid] <= xd) lo = mid;
        else hi = mid;
    }
    dl = xd - v[lo];
    dh = v[hi] - xd;
    if (dl < dh || (dl == dh && !(lo & 1u))) return (uint16_t)(sign | lo);
    return (uint16_t)(sign | hi); /* hi == the count: the pattern of +inf */
}

static void widen(int t, float *y, const uint16_t *x, size_t n)
{
    if (t == F16) favor__widen_f16(y, x, n);
    else favor__widen_bf16(y, x, n);
}

static void narrow(int t, uint16_t *y, const float *x, size_t n)
{
    if (t == F16) favor__narrow_f16(y, x, n);
    else favor__narrow_bf16(y, x, n);
}

static float s_widen(int t, uint16_t h) { return t == F16 ? favor__s_from_f16(h) : favor__s_from_bf16(h); }
static uint16_t s_narrow(int t, float x) { return t == F16 ? favor__s_to_f16(x) : favor__s_to_bf16(x); }

static const char *name_of(int t) { return t == F16 ? "fp16" : "bf16"; }

static void test_widen_exhaustive(void **state)
{
    int t;
    (void)state;
    for (t = 0; t < 2; ++t) {
        uint16_t *h = (uint16_t *)malloc(65536 * sizeof *h);
        float *y = (float *)malloc(65536 * sizeof *y);
        size_t i, bad = 0, off;
        assert_non_null(h);
        assert_non_null(y);
        for (i = 0; i < 65536; ++i) h[i] = (uint16_t)i;
        for (off = 0; off < 65536; off += BLOCK) /* blocks: vector bodies and tails */
            widen(t, y + off, h + off, 65536 - off < BLOCK ? 65536 - off : BLOCK);
        for (i = 0; i < 65536; ++i) {
            uint32_t want = ref_widen(t, (uint16_t)i);
            if (bits_of(y[i]) != want || bits_of(s_widen(t, (uint16_t)i)) != want) {
                if (bad++ < 8)
                    fprintf(stderr, "%s widen %04zx: vector %08x scalar %08x want %08x\n",
                            name_of(t), i, (unsigned)bits_of(y[i]),
                            (unsigned)bits_of(s_widen(t, (uint16_t)i)), (unsigned)want);
            }
        }
        printf("%s: all 65536 patterns widened exactly (%s backend)\n", name_of(t), favor_backend());
        free(h);
        free(y);
        assert_int_equal(bad, 0);
    }
}

/* Narrow x[0..n) on both paths and compare with the reference; returns misses. */
static size_t check_narrow(int t, const float *x, size_t n, uint16_t *y)
{
    size_t i, bad = 0;
    narrow(t, y, x, n);
    for (i = 0; i < n; ++i) {
        uint16_t want = ref_narrow(t, x[i]), s = s_narrow(t, x[i]);
        if (y[i] != want || s != want) {
            if (bad++ < 8)
                fprintf(stderr, "%s narrow %08x (%.9g): vector %04x scalar %04x want %04x\n",
                        name_of(t), (unsigned)bits_of(x[i]), (double)x[i], y[i], s, want);
        }
    }
    return bad;
}

/* Values to narrow, checked BLOCK at a time (a vector body and a tail per call). */
typedef struct {
    int t;
    float x[BLOCK];
    uint16_t y[BLOCK];
    size_t n, points, bad;
} batch;

static void batch_add(batch *b, float v)
{
    b->x[b->n++] = v;
    if (b->n == BLOCK) {
        b->bad += check_narrow(b->t, b->x, b->n, b->y);
        b->points += b->n;
        b->n = 0;
    }
}

static void batch_end(batch *b, const char *what)
{
    b->bad += check_narrow(b->t, b->x, b->n, b->y);
    b->points += b->n;
    b->n = 0;
    printf("%s: %zu %s narrowed, %zu wrong\n", name_of(b->t), b->points, what, b->bad);
}

static batch *batch_new(int t)
{
    batch *b = (batch *)calloc(1, sizeof *b);
    assert_non_null(b);
    b->t = t;
    return b;
}

static void test_narrow_sweep(void **state)
{
    int t;
    (void)state;
    for (t = 0; t < 2; ++t) {
        batch *b = batch_new(t);
        uint64_t p;
        size_t bad;
        for (p = 0; p <= 0xffffffffull; p += SWEEP_STRIDE) batch_add(b, float_of((uint32_t)p));
        batch_end(b, "fp32 patterns");
        bad = b->bad;
        free(b);
        assert_int_equal(bad, 0);
    }
}

static void test_narrow_halfway(void **state)
{
    int t;
    (void)state;
    for (t = 0; t < 2; ++t) {
        batch *b = batch_new(t);
        size_t bad;
        uint16_t i;
        for (i = 0; i < g_count[t]; ++i) { /* i and i + 1 (the last: with 2^16 or 2^128) */
            double mid = 0.5 * (g_table[t][i] + g_table[t][i + 1]);
            float m = (float)mid, s;
            int k;
            assert_true((double)m == mid); /* midpoints are fp32 values */
            for (k = 0; k < 6; ++k) {
                s = k < 3 ? m : -m;
                if (k % 3 == 0) s = nextafterf(s, 0.0f);
                if (k % 3 == 2) s = nextafterf(s, s > 0 ? INFINITY : -INFINITY);
                batch_add(b, s);
            }
        }
        batch_end(b, "halfway cases and neighbours");
        bad = b->bad;
        free(b);
        assert_int_equal(bad, 0);
    }
}

static void test_narrow_directed(void **state)
{
    static const uint32_t cases[] = {
        0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, /* +-0, +-inf        */
        0x7f800001u, 0xff800001u, 0x7fc00000u, 0xffc00000u, /* NaNs              */
        0x7fbfffffu, 0x7fffffffu, 0x7f802000u, 0x7fa00000u,
        0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x80000001u, /* FLT_MAX, FLT_TRUE_MIN */
        0x007fffffu, 0x00800000u,                           /* fp32 subnormal edge */
        0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477ff001u, /* 65504, 65519.99, 65520 */
        0x47800000u, 0xc77ff000u,                           /* 65536, -65520     */
        0x33000000u, 0x33000001u, 0x33800000u, 0x32ffffffu, /* 2^-25, 2^-24       */
        0x387fc000u, 0x387fe000u, 0x387ff000u, 0x38800000u, /* fp16 subnormal/normal edge */
        0x3f800000u, 0x3f801000u, 0x3f803000u, 0x3f808000u, /* ties near 1 (fp16: even/odd; bf16) */
        0x3f818000u, 0x3f7fffffu, 0x7f7f8000u, 0x7f7f7fffu, /* bf16 ties, overflow   */
    };
    size_t n = sizeof cases / sizeof cases[0], i, bad = 0;
    float x[sizeof cases / sizeof cases[0]];
    uint16_t y[sizeof cases / sizeof cases[0]];
    int t;
    (void)state;
    for (i = 0; i < n; ++i) x[i] = float_of(cases[i]);
    for (t = 0; t < 2; ++t) bad += check_narrow(t, x, n, y);
    /* a few values whose results are known by hand */
    assert_int_equal(favor__s_to_f16(65504.0f), 0x7bff);
    assert_int_equal(favor__s_to_f16(65520.0f), 0x7c00);
    assert_int_equal(favor__s_to_f16(float_of(0x477fefffu)), 0x7bff);
    assert_int_equal(favor__s_to_f16(float_of(0x33000000u)), 0x0000); /* 2^-25: tie to 0 */
    assert_int_equal(favor__s_to_f16(float_of(0x33000001u)), 0x0001);
    assert_int_equal(favor__s_to_f16(-1.0f), 0xbc00);
    assert_int_equal(favor__s_to_f16(float_of(0x7f800001u)), 0x7e00); /* sNaN: quiet */
    assert_int_equal(favor__s_to_bf16(1.0f), 0x3f80);
    assert_int_equal(favor__s_to_bf16(float_of(0x3f808000u)), 0x3f80); /* tie to even */
    assert_int_equal(favor__s_to_bf16(float_of(0x3f818000u)), 0x3f82);
    assert_int_equal(favor__s_to_bf16(float_of(0x7f7fffffu)), 0x7f80); /* FLT_MAX: inf */
    assert_int_equal(favor__s_to_bf16(float_of(0x7f800001u)), 0x7fc0);
    assert_int_equal(bits_of(favor__s_from_f16(0x0001)), 0x33800000u); /* 2^-24 */
    assert_int_equal(bits_of(favor__s_from_f16(0x7c01)), 0x7fc02000u);
    assert_int_equal(bits_of(favor__s_from_bf16(0xff81)), 0xffc10000u);
    assert_int_equal(bad, 0);
}

static void test_round_trip(void **state)
{
    int t;
    (void)state;
    for (t = 0; t < 2; ++t) {
        uint16_t *h = (uint16_t *)malloc(65536 * sizeof *h), *back = (uint16_t *)malloc(65536 * sizeof *back);
        float *y = (float *)malloc(65536 * sizeof *y);
        size_t i, bad = 0;
        assert_non_null(h);
        assert_non_null(back);
        assert_non_null(y);
        for (i = 0; i < 65536; ++i) h[i] = (uint16_t)i;
        widen(t, y, h, 65536);
        narrow(t, back, y, 65536);
        for (i = 0; i < 65536; ++i) {
            int nan = (i & exp_mask(t)) == exp_mask(t) && (i & ((1u << mant_bits(t)) - 1u));
            uint16_t want = (uint16_t)(nan ? i | (1u << (mant_bits(t) - 1)) : i);
            if (back[i] != want && bad++ < 8)
                fprintf(stderr, "%s round trip %04zx -> %04x\n", name_of(t), i, back[i]);
        }
        free(h);
        free(back);
        free(y);
        assert_int_equal(bad, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_widen_exhaustive),
        cmocka_unit_test(test_narrow_sweep),
        cmocka_unit_test(test_narrow_halfway),
        cmocka_unit_test(test_narrow_directed),
        cmocka_unit_test(test_round_trip),
    };
    if (tu_check_backend() != 0) return 1;
    return cmocka_run_group_tests(tests, make_tables, free_tables);
}
