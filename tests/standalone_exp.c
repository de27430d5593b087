/* The exp of favor.h (section 4.3, FAVOR__DEFINE_EXP) against libm.
 *
 * Both instances of the algorithm are tested: the vector one (favor__v_exp,
 * reached through favor__exp_add on whole vectors, with a = -0.0f so that
 * x + a == x for every x, -0 and quiet NaNs included) and the scalar one
 * (favor__s_exp). Within one build they must agree bit-for-bit on every input:
 * the scalar fma is fused wherever the vector one is.
 *
 * 1. Sweep: every SWEEP_STRIDE-th float (by bit pattern) of [-104, 89], both
 *    signs, the end points included (about 2.3e7 points). Error in ULP:
 *      - against libm expf, as the distance in representable floats: at most
 *        2 where expf's result is a normal float; at most 1 where it is
 *        subnormal or zero (one ULP = 2^-149 there); +inf exactly where expf
 *        overflows, finite where expf is finite;
 *      - against the exact value exp((double)x) (glibc's double exp, whose own
 *        error is ~2^-29 of a float ULP), as |y - e| / ulp(e): printed, and
 *        bounded (at most 2 over the normal range, as above).
 *    Measured (glibc 2.36; x86-64 gcc 12 and clang 14, AArch64 gcc 12 under
 *    qemu; 23,091,647 points): over the normal range max 1 ULP from expf and
 *    from the correctly rounded exp, max 1.003 ULP from the exact value with a
 *    fused multiply-add (AVX2, NEON, scalar built with -mfma or on AArch64) and
 *    0.959 ULP without (scalar on plain x86-64); glibc's expf itself is 0.502
 *    ULP from exact. Subnormal results: max 1 ULP from expf, 0.75 ULP from exact
 *    (in units of 2^-149). Vector and scalar paths: no mismatch.
 * 2. Directed cases: exp(+-0) = 1 exactly; exp(+inf) = +inf; exp(-inf) = +0;
 *    NaN (quiet, signalling, with payloads, negative) -> NaN; large |x| (1e30,
 *    FLT_MAX) -> +inf / +0.
 * 3. Thresholds (measured, identical to glibc's expf):
 *      overflow:  x = 88.72283172607421875 (0x42b17217) is the largest x with a
 *                 finite result (3.40279852e38, as expf's); the next float, 88.72283935546875
 *                 (0x42b17218), and everything above it gives +inf;
 *      underflow: results are subnormal for x < -87.336548 (ln FLT_MIN) and are
 *                 checked for every float in [-104, -87.33]; the most negative x
 *                 with a nonzero result is -103.97207641601562 (0xc2cff1b4, result
 *                 2^-149); the next float below, -103.97208404541016 (0xc2cff1b5),
 *                 and every x below (down to -inf) give +0.
 * Every directed case is checked on the vector and the scalar path, which must
 * return the same bits.
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

#define SWEEP_STRIDE 97u   /* prime, so the low mantissa bits take every value */
#define BLOCK 4096u        /* points per favor__exp_add call, a multiple of FAVOR__W */

#define X_LO (-104.0f)
#define X_HI 89.0f
#define OVERFLOW_LAST 0x42b17217u   /* 88.72283172607421875f: last finite */
#define UNDERFLOW_LAST 0xc2cff1b4u  /* -103.97207641601562f: last nonzero */
#define SUBNORMAL_MIN 0x1p-149f     /* FLT_TRUE_MIN (C11) */

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Distance in representable floats between two results that are not NaN and
 * not negative (exp never is): the difference of their bit patterns. */
static uint32_t ulp_dist(float a, float b)
{
    uint32_t ua = bits_of(a), ub = bits_of(b);
    return ua > ub ? ua - ub : ub - ua;
}

/* |y - e| in units of the float ULP at the exact value e > 0. */
static double ulp_err_exact(float y, double e)
{
    double ulp;
    if (e < (double)FLT_MIN) {
        ulp = 0x1p-149;
    } else {
        int k;
        (void)frexp(e, &k); /* e = m 2^k, m in [0.5, 1) */
        ulp = ldexp(1.0, k - 24);
    }
    return fabs((double)y - e) / ulp;
}

/* exp through the vector path: every lane of a full vector gets x; the lanes
 * must agree. */
static float vec_exp(float x)
{
    float in[FAVOR__W], out[FAVOR__W];
    size_t i;
    volatile size_t n = FAVOR__W; /* keeps gcc from reasoning about the empty tail loop */
    for (i = 0; i < FAVOR__W; ++i) in[i] = x;
    favor__exp_add(out, in, -0.0f, n);
    for (i = 1; i < FAVOR__W; ++i) assert_int_equal(bits_of(out[i]), bits_of(out[0]));
    return out[0];
}

/* exp on both paths; they must return the same bits. */
static float both_exp(float x)
{
    float v = vec_exp(x), s = favor__s_exp(x);
    if (bits_of(v) != bits_of(s))
        print_error("  x = %a (0x%08x): vector %a (0x%08x), scalar %a (0x%08x)\n", (double)x,
                    (unsigned)bits_of(x), (double)v, (unsigned)bits_of(v), (double)s,
                    (unsigned)bits_of(s));
    assert_int_equal(bits_of(v), bits_of(s));
    return v;
}

static double seconds(void) { return (double)clock() / CLOCKS_PER_SEC; }

/* ------------------------------------------------------------------------ */
/* 1. The sweep */

typedef struct {
    unsigned long long points, mismatches, failures;
    uint32_t max_ulp_normal, max_ulp_sub;     /* favor vs expf                  */
    uint32_t max_ulp_rounded;                 /* favor vs exp rounded to float  */
    double max_exact_normal, max_exact_sub;   /* favor vs exact                 */
    double libm_exact_normal;                 /* expf vs exact, for comparison */
    float worst_normal, worst_exact;          /* where the maxima were met      */
} sweep_stats;

/* Check the points xs[0..n); xs[n..padded) repeat the last one so that the
 * vector path sees whole vectors only (padded is a multiple of FAVOR__W). */
static void sweep_block(const float *xs, float *ys, size_t n, size_t padded, sweep_stats *st)
{
    size_t i;
    favor__exp_add(ys, xs, -0.0f, padded);
    for (i = 0; i < n; ++i) {
        float x = xs[i], y = ys[i], s = favor__s_exp(x), l = expf(x);
        double e = exp((double)x);
        ++st->points;
        if (bits_of(y) != bits_of(s)) {
            if (st->mismatches++ < 10)
                print_error("  vector/scalar mismatch at x = %.9g (0x%08x): %a vs %a\n",
                            (double)x, (unsigned)bits_of(x), (double)y, (double)s);
        }
        if (isinf(l)) {
            if (!(isinf(y) && y > 0)) {
                if (st->failures++ < 10)
                    print_error("  x = %.9g: expf overflows, favor gives %a\n", (double)x,
                                (double)y);
            }
        } else if (l >= FLT_MIN) {
            uint32_t d = ulp_dist(y, l);
            double ex = ulp_err_exact(y, e), lx = ulp_err_exact(l, e);
            uint32_t dr = ulp_dist(y, (float)e);
            if (dr > st->max_ulp_rounded) st->max_ulp_rounded = dr;
            if (!(d <= 2 && isfinite(y))) {
                if (st->failures++ < 10)
                    print_error("  x = %.9g (0x%08x): favor %a, expf %a: %u ULP\n", (double)x,
                                (unsigned)bits_of(x), (double)y, (double)l, (unsigned)d);
            }
            if (d > st->max_ulp_normal) { st->max_ulp_normal = d; st->worst_normal = x; }
            if (!(ex <= st->max_exact_normal)) { st->max_exact_normal = ex; st->worst_exact = x; }
            if (lx > st->libm_exact_normal) st->libm_exact_normal = lx;
        } else {
            uint32_t d = ulp_dist(y, l);
            double ex = ulp_err_exact(y, e);
            if (!(d <= 1)) {
                if (st->failures++ < 10)
                    print_error("  x = %.9g (0x%08x): favor %a, expf %a (subnormal): %u ULP\n",
                                (double)x, (unsigned)bits_of(x), (double)y, (double)l,
                                (unsigned)d);
            }
            if (d > st->max_ulp_sub) st->max_ulp_sub = d;
            if (!(ex <= st->max_exact_sub)) st->max_exact_sub = ex;
        }
    }
}

/* Every SWEEP_STRIDE-th bit pattern of [from, to] (bit patterns, from <= to, one
 * sign), plus `to` itself. */
static void sweep_bits(uint32_t from, uint32_t to, float *xs, float *ys, sweep_stats *st)
{
    uint64_t u = from;
    size_t n = 0;
    int last = 0;
    while (!last) {
        if (u >= to) {
            u = to;
            last = 1;
        }
        xs[n++] = float_of((uint32_t)u);
        u += SWEEP_STRIDE;
        if (n == BLOCK || last) {
            size_t padded = n;
            while (padded % FAVOR__W) { xs[padded] = xs[padded - 1]; ++padded; }
            sweep_block(xs, ys, n, padded, st);
            n = 0;
        }
    }
}

static void test_exp_sweep(void **state)
{
    float *xs = (float *)malloc(BLOCK * sizeof *xs), *ys = (float *)malloc(BLOCK * sizeof *ys);
    sweep_stats st;
    double t0 = seconds();
    (void)state;
    assert_non_null(xs);
    assert_non_null(ys);
    memset(&st, 0, sizeof st);
    sweep_bits(bits_of(0.0f), bits_of(X_HI), xs, ys, &st);   /* [+0, 89]    */
    sweep_bits(bits_of(-0.0f), bits_of(X_LO), xs, ys, &st);  /* [-104, -0]  */
    printf("exp sweep [-104, 89], every %u-th float: %llu points, %.1f s (%s)\n",
           SWEEP_STRIDE, st.points, seconds() - t0, favor_backend());
    printf("  normal results:    max %u ULP vs expf (x = %.9g), max %u ULP vs the "
           "correctly rounded exp, max %.3f ULP vs exact (x = %.9g); expf itself: %.3f ULP "
           "vs exact\n",
           (unsigned)st.max_ulp_normal, (double)st.worst_normal, (unsigned)st.max_ulp_rounded,
           st.max_exact_normal, (double)st.worst_exact, st.libm_exact_normal);
    printf("  subnormal results: max %u ULP vs expf, max %.3f ULP vs exact (ULP = 2^-149)\n",
           (unsigned)st.max_ulp_sub, st.max_exact_sub);
    printf("  vector/scalar mismatches: %llu\n", st.mismatches);
    free(xs);
    free(ys);
    assert_true(st.points >= 10000000ull);
    assert_true(st.mismatches == 0);
    assert_true(st.failures == 0);
    assert_true(st.max_ulp_normal <= 2);
    assert_true(st.max_ulp_rounded <= 2);
    assert_true(st.max_exact_normal <= 2.0);
    assert_true(st.max_ulp_sub <= 1);
}

/* ------------------------------------------------------------------------ */
/* 2. Directed cases */

static void test_exp_zero_inf(void **state)
{
    (void)state;
    assert_int_equal(bits_of(both_exp(0.0f)), bits_of(1.0f));
    assert_int_equal(bits_of(both_exp(-0.0f)), bits_of(1.0f));
    assert_int_equal(bits_of(both_exp(INFINITY)), bits_of(INFINITY));
    assert_int_equal(bits_of(both_exp(-INFINITY)), bits_of(0.0f)); /* +0, not -0 */
    /* the smallest magnitudes: exp(x) rounds to 1 */
    assert_int_equal(bits_of(both_exp(SUBNORMAL_MIN)), bits_of(1.0f));
    assert_int_equal(bits_of(both_exp(-SUBNORMAL_MIN)), bits_of(1.0f));
    assert_int_equal(bits_of(both_exp(FLT_MIN)), bits_of(1.0f));
    assert_int_equal(bits_of(both_exp(-FLT_MIN)), bits_of(1.0f));
    /* exp(1) within 1 ULP of expf */
    assert_true(ulp_dist(both_exp(1.0f), expf(1.0f)) <= 1);
}

static void test_exp_nan(void **state)
{
    static const uint32_t nans[] = {
        0x7fc00000u, /* the default quiet NaN        */
        0xffc00000u, /* negative quiet NaN           */
        0x7fc12345u, /* quiet, with a payload        */
        0xffd5aa55u, /* negative quiet with payload  */
        0x7fffffffu, /* all ones                     */
        0xffffffffu,
        0x7f800001u, /* signalling NaNs              */
        0xff800001u,
        0x7fa00000u,
    };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof nans / sizeof nans[0]; ++i) {
        float x = float_of(nans[i]);
        float v = vec_exp(x), s = favor__s_exp(x);
        if (!isnan(v) || !isnan(s))
            print_error("  exp(NaN 0x%08x): vector %a, scalar %a\n", (unsigned)nans[i],
                        (double)v, (double)s);
        assert_true(isnan(v));
        assert_true(isnan(s));
        assert_int_equal(bits_of(v), bits_of(s));
    }
    /* a NaN lane does not disturb its neighbours in the same vector */
    {
        float in[4 * FAVOR__W], out[4 * FAVOR__W];
        volatile size_t n = 4 * FAVOR__W;
        for (i = 0; i < 4 * FAVOR__W; ++i) in[i] = (i % 3 == 1) ? NAN : (float)i - 5.0f;
        favor__exp_add(out, in, -0.0f, n);
        for (i = 0; i < 4 * FAVOR__W; ++i) {
            if (i % 3 == 1) assert_true(isnan(out[i]));
            else assert_int_equal(bits_of(out[i]), bits_of(favor__s_exp(in[i])));
        }
    }
}

static void test_exp_overflow_threshold(void **state)
{
    const float last = float_of(OVERFLOW_LAST), next = nextafterf(last, INFINITY);
    uint32_t u;
    float y;
    (void)state;
    assert_true(last == 88.72283172607421875f);
    /* libm agrees on where the threshold is */
    assert_true(isfinite(expf(last)));
    assert_true(isinf(expf(next)));
    y = both_exp(last);
    printf("overflow: exp(%.17g) = %.9g (expf %.9g); exp(%.17g) = %g\n", (double)last,
           (double)y, (double)expf(last), (double)next, (double)both_exp(next));
    assert_true(isfinite(y));
    assert_true(ulp_dist(y, expf(last)) <= 2);
    /* every float from the threshold up to 89 overflows (the clamp's edge) */
    for (u = bits_of(next); u <= bits_of(89.0f); ++u) {
        y = both_exp(float_of(u));
        if (!(isinf(y) && y > 0)) print_error("  exp(%.9g) = %a\n", (double)float_of(u), (double)y);
        assert_true(isinf(y) && y > 0);
    }
    /* and the floats just below it are finite, within 2 ULP of expf */
    for (u = OVERFLOW_LAST - 1000; u <= OVERFLOW_LAST; ++u) {
        y = both_exp(float_of(u));
        assert_true(isfinite(y));
        assert_true(ulp_dist(y, expf(float_of(u))) <= 2);
    }
}

static void test_exp_underflow(void **state)
{
    const float last = float_of(UNDERFLOW_LAST), below = nextafterf(last, -INFINITY);
    const float normal_edge = -87.33f; /* > ln FLT_MIN = -87.336548 */
    uint32_t u, maxd = 0;
    unsigned long long points = 0, subnormal = 0;
    double maxex = 0;
    float y, l;
    (void)state;
    /* every float in [-104, -87.33]: within 1 ULP (2^-149 for subnormal results)
     * of expf, and vector == scalar */
    for (u = bits_of(normal_edge); u <= bits_of(X_LO); ++u) {
        float x = float_of(u);
        double ex;
        uint32_t d;
        y = both_exp(x);
        l = expf(x);
        d = ulp_dist(y, l);
        ex = ulp_err_exact(y, exp((double)x));
        ++points;
        if (l < FLT_MIN) ++subnormal;
        if (d > 1 || !(ex <= 2.0))
            print_error("  x = %.9g (0x%08x): favor %a, expf %a: %u ULP\n", (double)x,
                        (unsigned)u, (double)y, (double)l, (unsigned)d);
        assert_true(d <= 1);
        assert_true(ex <= 2.0);
        if (u > UNDERFLOW_LAST) assert_int_equal(bits_of(y), 0u); /* below the last nonzero */
        if (d > maxd) maxd = d;
        if (l < FLT_MIN && ex > maxex) maxex = ex;
    }
    printf("underflow: every float in [-104, -87.33] (%llu, %llu with subnormal or zero "
           "expf): max %u ULP vs expf, subnormal max %.3f ULP vs exact\n",
           points, subnormal, (unsigned)maxd, maxex);
    /* the last nonzero result: 2^-149 at x = UNDERFLOW_LAST, +0 below it (expf
     * agrees) */
    printf("underflow: exp(%.17g) = %a, exp(%.17g) = %a\n", (double)last,
           (double)both_exp(last), (double)below, (double)both_exp(below));
    assert_true(expf(last) == SUBNORMAL_MIN);
    assert_true(expf(below) == 0.0f);
    assert_true(both_exp(last) == SUBNORMAL_MIN);
    assert_int_equal(bits_of(both_exp(below)), bits_of(0.0f));
    assert_int_equal(bits_of(both_exp(nextafterf(below, -INFINITY))), bits_of(0.0f));
    /* x <= -104: +0 */
    assert_int_equal(bits_of(both_exp(-104.0f)), bits_of(0.0f));
    assert_int_equal(bits_of(both_exp(nextafterf(-104.0f, -INFINITY))), bits_of(0.0f));
    assert_int_equal(bits_of(both_exp(-150.0f)), bits_of(0.0f));
    /* the normal/subnormal boundary: exp(ln FLT_MIN) is FLT_MIN within 1 ULP */
    y = both_exp(-87.33654475f);
    assert_true(ulp_dist(y, expf(-87.33654475f)) <= 1);
}

static void test_exp_large(void **state)
{
    static const float big[] = { 104.0f, 104.5f, 128.0f, 1e4f, 3e9f, 1e30f, FLT_MAX };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof big / sizeof big[0]; ++i) {
        float yp = both_exp(big[i]), yn = both_exp(-big[i]);
        assert_int_equal(bits_of(yp), bits_of(INFINITY));
        assert_int_equal(bits_of(yp), bits_of(expf(big[i])));
        assert_int_equal(bits_of(yn), bits_of(0.0f));
        assert_int_equal(bits_of(yn), bits_of(expf(-big[i])));
    }
    /* between the thresholds and the clamp: inf above, tiny or 0 below */
    assert_int_equal(bits_of(both_exp(89.0f)), bits_of(INFINITY));
    assert_int_equal(bits_of(both_exp(100.0f)), bits_of(INFINITY));
    assert_true(ulp_dist(both_exp(-89.0f), expf(-89.0f)) <= 1);
    assert_true(ulp_dist(both_exp(-100.0f), expf(-100.0f)) <= 1);
}

/* favor__exp_add itself: y[i] = exp(x[i] + a) with the sum rounded to float, on
 * whole vectors and on the tail, in place too; the same bits as the scalar exp of
 * the same sum. */
static void test_exp_add_offset_and_tail(void **state)
{
    enum { N = 5 * FAVOR__W + 3 };
    static const float offsets[] = { 0.0f, -0.0f, 1.5f, -30.25f, 88.0f, -200.0f };
    float x[N], y[N], z[N];
    size_t i, j, n;
    tu_rng r;
    (void)state;
    r.s = 7;
    for (i = 0; i < N; ++i) x[i] = (float)(20.0 * tu_normal(&r));
    for (j = 0; j < sizeof offsets / sizeof offsets[0]; ++j) {
        for (n = 0; n <= N; ++n) {
            volatile size_t vn = n;
            memset(y, 0, sizeof y);
            favor__exp_add(y, x, offsets[j], vn);
            for (i = 0; i < n; ++i)
                assert_int_equal(bits_of(y[i]), bits_of(favor__s_exp(x[i] + offsets[j])));
            for (; i < N; ++i) assert_int_equal(bits_of(y[i]), 0u); /* untouched */
        }
        memcpy(z, x, sizeof z); /* in place */
        favor__exp_add(z, z, offsets[j], N);
        for (i = 0; i < N; ++i)
            assert_int_equal(bits_of(z[i]), bits_of(favor__s_exp(x[i] + offsets[j])));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp_zero_inf),
        cmocka_unit_test(test_exp_nan),
        cmocka_unit_test(test_exp_large),
        cmocka_unit_test(test_exp_overflow_threshold),
        cmocka_unit_test(test_exp_underflow),
        cmocka_unit_test(test_exp_add_offset_and_tail),
        cmocka_unit_test(test_exp_sweep),
    };
    if (tu_check_backend() != 0) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
