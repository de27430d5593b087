/* The tanh of favor.h (section 4.3a, FAVOR__DEFINE_TANH) against libm, and the
 * logit softcap built on it (favor__softcap).
 *
 * Both instances of the algorithm are tested: the vector one (favor__v_tanh,
 * reached through favor__softcap on whole vectors with c = 1, where 1/c = 1 and
 * c * t = t, so the array holds tanh(x) itself) and the scalar one
 * (favor__s_tanh). Within one build they must agree bit for bit on every input.
 *
 * 1. Sweep, both signs: every WIDE_STRIDE-th float (by bit pattern) of the
 *    whole range [0, FLT_MAX], and every DENSE_STRIDE-th float of [2^-13, 10],
 *    where tanh(x) is neither x nor 1 after rounding. Error against the
 *    reference tanh((double)x) (glibc's double tanh): in ULP of the float
 *    result as the distance in representable floats from the reference rounded
 *    to float, asserted <= 2; and |y - e| / ulp(e) against the double value,
 *    printed. The maximum absolute error is printed too.
 *    Measured (glibc 2.36; x86-64 gcc 12 and clang 14, AVX2 and scalar;
 *    AArch64 gcc 12 under qemu, NEON and scalar; 8,659,542 points): max 1 ULP
 *    from the correctly rounded tanh, max 1.313 ULP from the exact value, max
 *    |error| 7.83e-8, both just above the switch (x = 0.6336); no vector/scalar
 *    mismatch. Over every float (a one-off exhaustive run, AVX2 and x86-64
 *    scalar without FMA): max 1 ULP, 1.330 ULP from exact, |error| 7.93e-8
 *    (x = 0.6283).
 * 2. Directed cases: tanh(+-0) = +-0; tanh(+-inf) = +-1; NaNs (quiet,
 *    signalling, payloads, negative) -> NaN; tiny (subnormal, FLT_MIN, 2^-13:
 *    tanh(x) = x); huge (1e30, FLT_MAX, the exp's overflow at 44.36) -> +-1;
 *    every float within 4096 bit patterns of the polynomial/exp switch at 0.625,
 *    both signs: within 2 ULP, and monotonic across it; odd symmetry.
 * 3. favor__softcap with c = 30 and c = 50 against c tanh((double)x / c):
 *    absolute error <= SOFTCAP_ABS * c (measured 1.33e-7 c at c = 30, 1.06e-7 c
 *    at c = 50); t[i] = favor__s_tanh(x[i] * (1/c)) and
 *    y[i] = c t[i] bit for bit; every length (tails), t = NULL, no element
 *    beyond n touched.
 *
 * Self-contained: the implementation is expanded here (FAVOR_STATIC), so the
 * internal favor__ functions are callable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Under FAVOR_STATIC every public function is static; this file uses only a few
 * of them, and an unused static function is a -Wunused-function warning. */
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

#define WIDE_STRIDE 1021u  /* primes, so the low mantissa bits take every value */
#define DENSE_STRIDE 61u
#define BLOCK 4096u        /* points per favor__softcap call, a multiple of FAVOR__W */
#define MAX_ULP 2u
#define SWITCH 0.625f      /* where the polynomial hands over to the exp */
#define SOFTCAP_ABS 2.5e-7 /* softcap: |error| <= SOFTCAP_ABS * c */

/* the header's own bit casts */
#define bits_of(x) favor__s_asint(x)
#define float_of(u) favor__s_asfloat(u)

/* Distance in representable floats between two results that are not NaN: the
 * difference of their bit patterns mapped to a monotonic integer scale (+0 and
 * -0 one apart). */
static uint32_t ulp_dist(float a, float b)
{
    uint32_t ua = bits_of(a), ub = bits_of(b);
    int64_t ia = (ua & 0x80000000u) ? -(int64_t)(ua & 0x7fffffffu) - 1 : (int64_t)ua;
    int64_t ib = (ub & 0x80000000u) ? -(int64_t)(ub & 0x7fffffffu) - 1 : (int64_t)ub;
    int64_t d = ia > ib ? ia - ib : ib - ia;
    return d > 0xffffffffll ? 0xffffffffu : (uint32_t)d;
}

/* |y - e| in units of the float ULP at the exact value e: 2^(k - 23) for |e| in
 * [2^k, 2^(k+1)), 2^-149 below FLT_MIN. */
static double ulp_err_exact(float y, double e)
{
    double m = fabs(e) < (double)FLT_MIN ? (double)FLT_MIN : fabs(e);
    return fabs((double)y - e) / ldexp(1.0, ilogb(m) - 23);
}

/* tanh of a non-NaN x on both paths: the vector one is favor__softcap with c = 1
 * on one whole vector whose lanes all hold x; every lane of t and y must give
 * the scalar tanh's bits. */
static float both_tanh(float x)
{
    float y[FAVOR__W], t[FAVOR__W], s = favor__s_tanh(x);
    size_t i;
    volatile size_t n = FAVOR__W; /* keeps gcc from reasoning about the empty tail loop */
    for (i = 0; i < FAVOR__W; ++i) y[i] = x;
    memset(t, 0xff, sizeof t); /* NaN: a lane the call did not write fails below */
    favor__softcap(y, t, 1.0f, n);
    for (i = 0; i < FAVOR__W; ++i) {
        if (bits_of(t[i]) != bits_of(s) || bits_of(y[i]) != bits_of(s))
            print_error("  x = %a (0x%08x), lane %u: vector %a, scalar %a (0x%08x)\n", (double)x,
                        (unsigned)bits_of(x), (unsigned)i, (double)t[i], (double)s,
                        (unsigned)bits_of(s));
        assert_int_equal(bits_of(t[i]), bits_of(s));
        assert_int_equal(bits_of(y[i]), bits_of(s)); /* 1 * t == t */
    }
    return s;
}

static double seconds(void) { return (double)clock() / CLOCKS_PER_SEC; }

/* ------------------------------------------------------------------------ */
/* 1. The sweep */

typedef struct {
    unsigned long long points, mismatches, failures;
    uint32_t max_ulp;          /* vs the reference rounded to float */
    double max_exact, max_abs; /* vs the double reference             */
    float worst_ulp, worst_exact, worst_abs;
} sweep_stats;

/* Check the points xs[0..n); xs[n..padded) repeat the last one so that the
 * vector path sees whole vectors only (padded is a multiple of FAVOR__W). */
static void sweep_block(const float *xs, float *ys, float *ts, size_t n, size_t padded,
                        sweep_stats *st)
{
    size_t i;
    memcpy(ys, xs, padded * sizeof *ys);
    favor__softcap(ys, ts, 1.0f, padded);
    for (i = 0; i < n; ++i) {
        float x = xs[i], y = ts[i], s = favor__s_tanh(x);
        double e = tanh((double)x), ex, ab;
        uint32_t d;
        ++st->points;
        if (bits_of(y) != bits_of(s) || bits_of(ys[i]) != bits_of(y)) {
            if (st->mismatches++ < 10)
                print_error("  vector/scalar mismatch at x = %.9g (0x%08x): %a vs %a\n",
                            (double)x, (unsigned)bits_of(x), (double)y, (double)s);
        }
        d = ulp_dist(y, (float)e);
        ex = ulp_err_exact(y, e);
        ab = fabs((double)y - e);
        if (!(d <= MAX_ULP)) {
            if (st->failures++ < 10)
                print_error("  x = %.9g (0x%08x): favor %a, tanh %a: %u ULP\n", (double)x,
                            (unsigned)bits_of(x), (double)y, e, (unsigned)d);
        }
        if (d > st->max_ulp) { st->max_ulp = d; st->worst_ulp = x; }
        if (!(ex <= st->max_exact)) { st->max_exact = ex; st->worst_exact = x; }
        if (!(ab <= st->max_abs)) { st->max_abs = ab; st->worst_abs = x; }
    }
}

/* Every stride-th bit pattern of [from, to] (from <= to), plus `to` itself, and
 * the same with the sign bit set. */
static void sweep_bits(uint32_t from, uint32_t to, uint32_t stride, float *xs, float *ys,
                       float *ts, sweep_stats *st)
{
    int neg;
    for (neg = 0; neg < 2; ++neg) {
        const uint32_t sign = neg ? 0x80000000u : 0u;
        uint64_t u = from;
        size_t n = 0;
        int last = 0;
        while (!last) {
            if (u >= to) {
                u = to;
                last = 1;
            }
            xs[n++] = float_of((uint32_t)u | sign);
            u += stride;
            if (n == BLOCK || last) {
                size_t padded = n;
                while (padded % FAVOR__W) { xs[padded] = xs[padded - 1]; ++padded; }
                sweep_block(xs, ys, ts, n, padded, st);
                n = 0;
            }
        }
    }
}

static void test_tanh_sweep(void **state)
{
    float *xs = (float *)malloc(BLOCK * sizeof *xs), *ys = (float *)malloc(BLOCK * sizeof *ys);
    float *ts = (float *)malloc(BLOCK * sizeof *ts);
    sweep_stats st;
    double t0 = seconds();
    (void)state;
    assert_non_null(xs);
    assert_non_null(ys);
    assert_non_null(ts);
    memset(&st, 0, sizeof st);
    sweep_bits(0u, bits_of(FLT_MAX), WIDE_STRIDE, xs, ys, ts, &st);
    sweep_bits(bits_of(0x1p-13f), bits_of(10.0f), DENSE_STRIDE, xs, ys, ts, &st);
    printf("tanh sweep, every %u-th float of [-FLT_MAX, FLT_MAX] and every %u-th of "
           "+-[2^-13, 10]: %llu points, %.2f s (%s)\n",
           WIDE_STRIDE, DENSE_STRIDE, st.points, seconds() - t0, favor_backend());
    printf("  max %u ULP vs the correctly rounded tanh (x = %.9g), max %.3f ULP vs exact "
           "(x = %.9g), max |error| %.3g (x = %.9g)\n",
           (unsigned)st.max_ulp, (double)st.worst_ulp, st.max_exact, (double)st.worst_exact,
           st.max_abs, (double)st.worst_abs);
    printf("  vector/scalar mismatches: %llu\n", st.mismatches);
    free(xs);
    free(ys);
    free(ts);
    assert_true(st.points >= 8000000ull);
    assert_true(st.mismatches == 0);
    assert_true(st.failures == 0);
    assert_true(st.max_ulp <= MAX_ULP);
    assert_true(st.max_exact <= (double)MAX_ULP);
}

/* ------------------------------------------------------------------------ */
/* 2. Directed cases */

static void test_tanh_zero_inf_huge(void **state)
{
    static const float huge[] = { 9.1f, 10.0f, 44.0f, 44.5f, 89.0f, 1e4f, 1e30f, FLT_MAX };
    size_t i;
    (void)state;
    assert_int_equal(bits_of(both_tanh(0.0f)), bits_of(0.0f));
    assert_int_equal(bits_of(both_tanh(-0.0f)), bits_of(-0.0f));
    assert_int_equal(bits_of(both_tanh(INFINITY)), bits_of(1.0f));
    assert_int_equal(bits_of(both_tanh(-INFINITY)), bits_of(-1.0f));
    for (i = 0; i < sizeof huge / sizeof huge[0]; ++i) {
        assert_int_equal(bits_of(both_tanh(huge[i])), bits_of(1.0f));
        assert_int_equal(bits_of(both_tanh(-huge[i])), bits_of(-1.0f));
    }
    /* tanh(x) rounds to 1 from 9.010913 on; just below, 1 - 2^-24 */
    assert_true(both_tanh(9.0f) == (float)tanh(9.0));
}

static void test_tanh_tiny(void **state)
{
    static const float tiny[] = { 0x1p-149f, 0x1p-140f, 0x1.fffffcp-127f, FLT_MIN, 1e-30f,
                                  1e-10f, 0x1p-13f };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof tiny / sizeof tiny[0]; ++i) {
        assert_int_equal(bits_of(both_tanh(tiny[i])), bits_of(tiny[i]));
        assert_int_equal(bits_of(both_tanh(-tiny[i])), bits_of(-tiny[i]));
    }
}

/* NaN in, NaN out on both paths: each sign, signalling (quiet bit clear) and
 * quiet, with small and large payloads; and a NaN lane leaves the other lanes
 * of its vector alone. */
static void test_tanh_nan(void **state)
{
    static const uint32_t mantissas[] = { 1u, 0x12345u, 0x200000u, 0x400000u, 0x5aa55u | 0x400000u,
                                          0x7fffffu };
    enum { L = 4 * FAVOR__W };
    float in[L], t[L], y[L];
    size_t i, k;
    (void)state;
    for (k = 0; k < 2 * (sizeof mantissas / sizeof mantissas[0]); ++k) {
        uint32_t u = (k & 1u ? 0xff800000u : 0x7f800000u) | mantissas[k / 2];
        for (i = 0; i < L; ++i) y[i] = float_of(u);
        favor__softcap(y, t, 1.0f, L);
        for (i = 0; i < L; ++i) {
            if (!(isnan(t[i]) && isnan(y[i])))
                print_error("  tanh(0x%08x), lane %u: %a\n", (unsigned)u, (unsigned)i,
                            (double)t[i]);
            assert_true(isnan(t[i]) && isnan(y[i]));
        }
        assert_true(isnan(favor__s_tanh(float_of(u))));
    }
    for (i = 0; i < L; ++i) /* NaN, -inf, and finite values side by side */
        in[i] = y[i] = i % 3 == 1 ? NAN : i % 5 == 2 ? -INFINITY : (float)i * 0.3f - 2.0f;
    favor__softcap(y, t, 1.0f, L);
    for (i = 0; i < L; ++i) {
        if (isnan(in[i])) assert_true(isnan(t[i]) && isnan(y[i]));
        else assert_int_equal(bits_of(t[i]), bits_of(favor__s_tanh(in[i])));
    }
}

/* Every float within 4096 bit patterns of the switch, both signs: within the
 * bound, odd, and non-decreasing across the switch. */
static void test_tanh_switch(void **state)
{
    uint32_t u, maxd = 0;
    float prev = 0.0f;
    (void)state;
    for (u = bits_of(SWITCH) - 4096u; u <= bits_of(SWITCH) + 4096u; ++u) {
        float x = float_of(u), y = both_tanh(x), yn = both_tanh(-x);
        uint32_t d = ulp_dist(y, (float)tanh((double)x));
        if (d > MAX_ULP || (u > bits_of(SWITCH) - 4096u && y < prev))
            print_error("  x = %.9g: favor %a, tanh %a, previous %a\n", (double)x, (double)y,
                        tanh((double)x), (double)prev);
        assert_true(d <= MAX_ULP);
        assert_int_equal(bits_of(yn), bits_of(y) | 0x80000000u);
        if (u > bits_of(SWITCH) - 4096u) assert_true(y >= prev);
        if (d > maxd) maxd = d;
        prev = y;
    }
    printf("switch at %.9g: every float within 4096 of it, both signs: max %u ULP, "
           "monotonic\n", (double)SWITCH, (unsigned)maxd);
}

/* ------------------------------------------------------------------------ */
/* 3. The softcap */

static void test_softcap(void **state)
{
    enum { N = 1 << 16 };
    static const float caps[] = { 30.0f, 50.0f };
    float *x = (float *)malloc(N * sizeof *x), *y = (float *)malloc(N * sizeof *y);
    float *t = (float *)malloc(N * sizeof *t);
    size_t i, j;
    tu_rng r;
    (void)state;
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(t);
    r.s = 11;
    for (j = 0; j < sizeof caps / sizeof caps[0]; ++j) {
        const float c = caps[j], rc = 1.0f / c;
        double maxe = 0, worst = 0;
        /* scores of every scale around the cap: normal with sigma c/8 .. 8c */
        for (i = 0; i < N; ++i) x[i] = (float)(c * ldexp(tu_normal(&r), (int)(i % 7) - 3));
        x[0] = 0.0f;
        x[1] = -0.0f;
        x[2] = 1e4f;
        x[3] = -1e4f;
        memcpy(y, x, N * sizeof *y);
        favor__softcap(y, t, c, N);
        for (i = 0; i < N; ++i) {
            double e = (double)c * tanh((double)x[i] / (double)c), d = fabs((double)y[i] - e);
            float ts = favor__s_tanh(x[i] * rc);
            assert_int_equal(bits_of(t[i]), bits_of(ts));
            assert_int_equal(bits_of(y[i]), bits_of(c * ts));
            if (d > maxe) { maxe = d; worst = x[i]; }
        }
        printf("softcap c = %g: %d scores, max |error| %.3g = %.3g c (x = %.9g)\n", (double)c,
               N, maxe, maxe / c, worst);
        assert_true(maxe <= SOFTCAP_ABS * c);
        assert_int_equal(bits_of(y[0]), bits_of(0.0f));
        assert_int_equal(bits_of(y[1]), bits_of(-0.0f));
        assert_true(y[2] == c && y[3] == -c);
    }
    free(x);
    free(y);
    free(t);
}

/* Every length up to a few vectors: the tail gives the vector body's bits,
 * t = NULL is allowed, nothing beyond n is written. */
static void test_softcap_tail(void **state)
{
    enum { N = 5 * FAVOR__W + 3 };
    /* a float variable, as the library's 1/c: with x87 excess precision
     * (FLT_EVAL_METHOD 2, gcc -m32) the constant expression 1.0f / 30.0f keeps
     * long double precision, and x * it would round differently */
    const float rc = 1.0f / 30.0f;
    float x[N], y[N], t[N];
    size_t i, n;
    tu_rng r;
    (void)state;
    r.s = 5;
    for (i = 0; i < N; ++i) x[i] = (float)(40.0 * tu_normal(&r));
    for (n = 0; n <= N; ++n) {
        volatile size_t vn = n;
        memcpy(y, x, sizeof y);
        memset(t, 0, sizeof t);
        favor__softcap(y, t, 30.0f, vn);
        for (i = 0; i < n; ++i) {
            float ts = favor__s_tanh(x[i] * rc);
            assert_int_equal(bits_of(t[i]), bits_of(ts));
            assert_int_equal(bits_of(y[i]), bits_of(30.0f * ts));
        }
        for (; i < N; ++i) {
            assert_int_equal(bits_of(y[i]), bits_of(x[i])); /* untouched */
            assert_int_equal(bits_of(t[i]), 0u);
        }
        memcpy(y, x, sizeof y);
        favor__softcap(y, NULL, 30.0f, vn);
        for (i = 0; i < n; ++i)
            assert_int_equal(bits_of(y[i]), bits_of(30.0f * favor__s_tanh(x[i] * rc)));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tanh_zero_inf_huge),
        cmocka_unit_test(test_tanh_tiny),
        cmocka_unit_test(test_tanh_nan),
        cmocka_unit_test(test_tanh_switch),
        cmocka_unit_test(test_softcap),
        cmocka_unit_test(test_softcap_tail),
        cmocka_unit_test(test_tanh_sweep),
    };
    if (tu_check_backend() != 0) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
