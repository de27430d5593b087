/* Backend agreement: the build's own backend (favor_*, tests/favor_impl.c: AVX2,
 * NEON or scalar) against the portable scalar code compiled into the same binary
 * (scalar_*, tests/scalar_impl.c), on the same seeded inputs (N(0,1)).
 *
 * Stated tolerances:
 *   W (favor_features_init)    bit-for-bit (memcmp of f.w and f.wt): every flag
 *                              set, 4 seeds, (d, m) from (1, 1) to (128, 300)
 *   softmax attention          max |O - O_scalar| <= 5e-7 * max|V|   (TOL_SOFTMAX)
 *     d in {16, 64, 100}, n in {1, 67, 300}, n_k = n or n + 45, causal and
 *     not, grouped-query 4:2 / 2:1 and not
 *   softmax workspace query    the same bytes (decode shapes of 1 to 64 rows
 *                              per key/value head, and a prefill shape)
 *   elu+1 linear attention     max |O - O_scalar| <= 5e-7 * max|V|   (TOL_ELU1)
 *   and its recurrent step
 *   random-feature linear      max |O - O_scalar| <= 5e-6 * max|O_scalar|
 *   attention and step outputs (TOL_FEATURES; POSITIVE, HYPERBOLIC, TRIG, RELU)
 *   feature maps, every role   max |phi - phi_scalar| <= 5e-6 * max|phi_scalar|
 * Linear attention runs every kernel, causal and not, on 7 shapes (n from 1 to
 * 300, n_k > n and < n, d in {16, 64, 100}, grouped-query 2:1, 4:1, 4:2).
 *
 * The tolerances are 5-8x the largest differences measured and well inside the
 * accuracy bounds of the header's manual (2e-5 * max|V|, 1e-4 * max|O|). Measured
 * maxima (x86-64 AVX2 with gcc 12 and clang 14, AArch64 NEON with gcc 12 under
 * qemu; every run prints its own):
 *     softmax        8.2e-8 * max|V|  (AVX2),  6.9e-8 (NEON)
 *     elu+1          9.3e-8 * max|V|  (both; step 6.2e-8)
 *     features       6.5e-7 * max|O|  (AVX2 attention), 4.5e-7 (NEON); step 6.0e-7
 *     feature maps   9.1e-7 * max|phi| (both)
 * FAVOR_TRIG runs on inputs N(0, 0.3^2) with m = 128, as test_linear.c does
 * (with m = 256), so that its denominators stay away from zero and the comparison
 * measures rounding, not the conditioning of a near-zero denominator.
 *
 * When the build's backend is itself "scalar" the two copies are the same code
 * with the same flags, and every output must be identical bit-for-bit.
 * Without FAVOR_DISPATCH, favor_set_backend accepts NULL and the build's own
 * backend name and refuses any other (FAVOR_E_ARG, the backend unchanged). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "favor.h"
#include "scalar_impl.h"
#include "test_util.h"

#define TOL_SOFTMAX 5e-7   /* x max|V|            measured 8.2e-8 */
#define TOL_ELU1 5e-7      /* x max|V|            measured 9.3e-8 */
#define TOL_FEATURES 5e-6  /* x max|O|, max|phi|  measured 9.1e-7 */
#define W_CHECKSUM 0x068664d7e6c1fb80ull /* see test_same_w */

static const favor_kernel kernels[] = TU_ALL_KERNELS;
#define NKERNELS (sizeof kernels / sizeof kernels[0])
#define kernel_name tu_kernel_name

/* 1 when the build's backend is the scalar one: then everything is bit-for-bit. */
static int same_code(void) { return strcmp(favor_backend(), "scalar") == 0; }

/* The largest difference seen in one category, relative to its scale. */
typedef struct {
    const char *name;
    double tol, max_rel;
    char worst[160];
    unsigned long long compared, identical;
} agg;

static void agg_print(const agg *a)
{
    printf("%-26s max diff %.3g (tol %.3g)  %llu of %llu comparisons bit-identical%s%s\n",
           a->name, a->max_rel, a->tol, a->identical, a->compared, a->max_rel > 0 ? "  worst: " : "",
           a->max_rel > 0 ? a->worst : "");
}

/* Compare n floats of the build's backend (x) and the scalar copy (y); `scale` is
 * the quantity the tolerance multiplies. Returns the number of failed checks. */
static int compare(agg *a, const char *label, const float *x, const float *y, size_t n,
                   double scale)
{
    double m = 0, rel;
    size_t i;
    int same = memcmp(x, y, n * sizeof *x) == 0;
    for (i = 0; i < n; ++i) {
        double e = fabs((double)x[i] - (double)y[i]);
        if (!(e <= m)) m = e; /* NaN is the largest difference */
    }
    rel = scale > 0 ? m / scale : m;
    ++a->compared;
    if (same) ++a->identical;
    if (!(rel <= a->max_rel)) {
        a->max_rel = rel;
        snprintf(a->worst, sizeof a->worst, "%s", label);
    }
    if (!tu_all_finite(x, n) || !tu_all_finite(y, n)) {
        print_error("  %s: an output is not finite\n", label);
        return 1;
    }
    if (same_code() && !same) {
        print_error("  %s: scalar against scalar differs (max %.3g)\n", label, m);
        return 1;
    }
    if (!(rel <= a->tol)) {
        print_error("  %s: max diff %.3g = %.3g x scale, tolerance %.3g\n", label, m, rel,
                    a->tol);
        return 1;
    }
    return 0;
}

static float *nan_floats(size_t n)
{
    float *p = (float *)malloc((n ? n : 1) * sizeof *p);
    size_t i;
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    for (i = 0; i < n; ++i) p[i] = (float)NAN;
    return p;
}

/* FNV-1a over the bits of n floats, chained. */
static uint64_t fnv(uint64_t h, const float *p, size_t n)
{
    size_t i;
    int k;
    for (i = 0; i < n; ++i) {
        uint32_t u;
        memcpy(&u, p + i, sizeof u);
        /* each float's bits, low byte first, whatever the byte order in memory:
         * hashing the bytes as stored gave another checksum on big-endian s390x */
        for (k = 0; k < 4; ++k) h = (h ^ ((u >> (8 * k)) & 0xFFu)) * 0x100000001b3ull;
    }
    return h;
}

/* ------------------------------------------------------------------------ */

static void test_backend_names(void **state)
{
    (void)state;
    printf("build backend %s, second copy %s\n", favor_backend(), scalar_backend());
    assert_string_equal(scalar_backend(), "scalar");
#ifdef FAVOR_EXPECT_BACKEND
    assert_string_equal(favor_backend(), FAVOR_EXPECT_BACKEND);
#endif
#ifndef FAVOR_DISPATCH
    { /* one backend: its name and NULL are accepted, any other name refused
         (tests/dispatch/bits.c checks the dispatching favor_set_backend) */
        const char *name = favor_backend(),
                   *other = strcmp(name, "scalar") != 0 ? "scalar" : "avx2";
        assert_int_equal(favor_set_backend(NULL), FAVOR_OK);
        assert_int_equal(favor_set_backend(name), FAVOR_OK);
        assert_int_equal(favor_set_backend(other), FAVOR_E_ARG);
        assert_int_equal(favor_set_backend(""), FAVOR_E_ARG);
        assert_int_equal(favor_set_backend("bogus"), FAVOR_E_ARG);
        assert_string_equal(favor_backend(), name);
    }
#endif
}

/* Draw W for (kernel, d, m, flags, seed) in both copies; 1 when they differ.
 * Chains W into *hash. */
static int check_w(favor_kernel kernel, size_t d, size_t m, unsigned flags,
                   unsigned long long seed, uint64_t *hash)
{
    size_t floats;
    favor_features f, g;
    float *a, *b;
    favor_status sa, sb;
    int fail = 0;
    if (tu_fixed(kernel)) m = d;
    floats = favor_features_floats(kernel, d, m);
    a = nan_floats(floats);
    b = nan_floats(floats);
    sa = favor_features_init(&f, kernel, d, m, flags, seed, a);
    sb = scalar_features_init(&g, kernel, d, m, flags, seed, b);
    if (sa != FAVOR_OK || sb != FAVOR_OK) {
        print_error("  %s d %u m %u: status %d / %d\n", kernel_name(kernel), (unsigned)d,
                    (unsigned)m, (int)sa, (int)sb);
        fail = 1;
    } else if (f.scale != g.scale || f.count != g.count || (f.w == NULL) != (g.w == NULL) ||
               (f.w && (memcmp(f.w, g.w, m * d * sizeof(float)) != 0 ||
                        memcmp(f.wt, g.wt, m * d * sizeof(float)) != 0))) {
        print_error("  %s d %u m %u flags %u seed %llu: W differs\n", kernel_name(kernel),
                    (unsigned)d, (unsigned)m, flags, seed);
        fail = 1;
    } else if (f.w) {
        *hash = fnv(*hash, f.w, m * d);
    }
    free(a);
    free(b);
    return fail;
}

/* The same seed gives the same W in both copies, bit for bit. W does not depend
 * on the kernel: each (shape, flags, seed) is drawn for one of the four random
 * kernels in turn, and ELU1 (no W) once per shape. */
static void test_same_w(void **state)
{
    static const unsigned long long seeds[] = { 0ull, 1ull, 42ull, 0xdeadbeefcafef00dull };
    static const unsigned flagsets[] = { 0u, FAVOR_IID, FAVOR_REGULAR_NORM,
                                         FAVOR_IID | FAVOR_REGULAR_NORM };
    static const size_t shapes[][2] = { /* d, m */
        { 1, 1 }, { 3, 7 }, { 16, 16 }, { 16, 40 }, { 64, 256 }, { 100, 37 }, { 128, 300 } };
    const size_t nseeds = sizeof seeds / sizeof seeds[0], nflags = sizeof flagsets / sizeof flagsets[0];
    size_t s, fl, sh, configs = 0;
    uint64_t hash = 0xcbf29ce484222325ull;
    int fails = 0;
    (void)state;
    for (sh = 0; sh < sizeof shapes / sizeof shapes[0]; ++sh) {
        size_t d = shapes[sh][0], m = shapes[sh][1];
        fails += check_w(FAVOR_ELU1, d, d, 0u, 1ull, &hash);
        ++configs;
        for (fl = 0; fl < nflags; ++fl)
            for (s = 0; s < nseeds; ++s) {
                favor_kernel kernel = kernels[1 + (s + fl + sh) % 4]; /* the random maps */
                fails += check_w(kernel, d, m, flagsets[fl], seeds[s], &hash);
                ++configs;
            }
    }
    /* The checksum of every W drawn: the generator is portable, so it is the same
     * in every build, compiler and architecture. W_CHECKSUM is the value measured
     * with gcc 12 and clang 14 on x86-64 (scalar and AVX2), gcc 12 on AArch64 and
     * on big-endian s390x (tests/portability.sh s390x);
     * it changes only if the sampler does (then every user's W changes too, so
     * update it only deliberately). */
    printf("W: %u configurations identical in both copies; checksum of all W %016llx "
           "(expected %016llx)\n",
           (unsigned)configs, (unsigned long long)hash, (unsigned long long)W_CHECKSUM);
    assert_int_equal(fails, 0);
    assert_true(hash == W_CHECKSUM);
}

/* ------------------------------------------------------------------------ */
/* Softmax */

static void test_softmax_agree(void **state)
{
    static const size_t ds[] = { 16, 64, 100 }, ns[] = { 1, 67, 300 };
    agg a;
    size_t di, ni, causal, gqa, cases = 0;
    int fails = 0;
    (void)state;
    memset(&a, 0, sizeof a);
    a.name = "softmax (x max|V|)";
    a.tol = TOL_SOFTMAX;
    /* n_k = n or n + 45 (causal: the bottom-right alignment); grouped-query 2:1
     * (4:2 below 300 rows) or not; d_v = d, except 40 for d = 64. */
    for (di = 0; di < 3; ++di)
        for (ni = 0; ni < 3; ++ni)
            for (causal = 0; causal < 2; ++causal)
                for (gqa = 0; gqa < 2; ++gqa) {
                        size_t d = ds[di], n = ns[ni], nk = n + (gqa != causal ? 45 : 0);
                        size_t dv = d == 64 ? 40 : d, hkv = n < 300 ? 2 : 1;
                        size_t hq = gqa ? 2 * hkv : hkv;
                        tu_rng r;
                        float *q, *k, *v, *o1, *o2;
                        favor_tensor Q, K, V, O1, O2;
                        favor_options opt = favor_default_options();
                        favor_status s1, s2;
                        char label[160];
                        r.s = 1000 + cases;
                        q = tu_normal_floats(&r, hq * n * d, 1.0);
                        k = tu_normal_floats(&r, hkv * nk * d, 1.0);
                        v = tu_normal_floats(&r, hkv * nk * dv, 1.0);
                        o1 = nan_floats(hq * n * dv);
                        o2 = nan_floats(hq * n * dv);
                        Q = favor_tensor_packed(q, hq, n, d);
                        K = favor_tensor_packed(k, hkv, nk, d);
                        V = favor_tensor_packed(v, hkv, nk, dv);
                        O1 = favor_tensor_packed(o1, hq, n, dv);
                        O2 = favor_tensor_packed(o2, hq, n, dv);
                        opt.flags = causal ? FAVOR_CAUSAL : 0u;
                        s1 = favor_softmax_attention(&Q, &K, &V, &O1, &opt);
                        s2 = scalar_softmax_attention(&Q, &K, &V, &O2, &opt);
                        snprintf(label, sizeof label, "hq %u hkv %u n %u nk %u d %u dv %u%s",
                                 (unsigned)hq, (unsigned)hkv, (unsigned)n, (unsigned)nk,
                                 (unsigned)d, (unsigned)dv, causal ? " causal" : "");
                        if (s1 != FAVOR_OK || s2 != FAVOR_OK) {
                            print_error("  %s: status %s / %s\n", label, favor_status_string(s1),
                                        favor_status_string(s2));
                            ++fails;
                        } else {
                            fails += compare(&a, label, o1, o2, hq * n * dv,
                                             tu_max_abs_f(v, hkv * nk * dv));
                        }
                        ++cases;
                        free(q);
                        free(k);
                        free(v);
                        free(o1);
                        free(o2);
                    }
    agg_print(&a);
    assert_int_equal(fails, 0);
}

/* The softmax workspace queried under the build's backend and under the scalar
 * one is the same size: a program that queries it once may run the call under
 * any backend (FAVOR_DISPATCH, favor_set_backend). Decode shapes of R = 1 to 64
 * rows per key/value head, whole vectors of rows on some backends and not on
 * others (32 and more are scored key-major where they are whole vectors), fp32
 * and fp16 K and V, with and without ALiBi (which keeps the rows row-major), one
 * and two threads; and a prefill shape. */
static void test_softmax_workspace_agree(void **state)
{
    static const size_t shapes[][3] = { /* hq, hkv, n */
        { 8, 8, 1 }, { 8, 1, 1 }, { 4, 1, 4 }, { 12, 2, 4 }, { 32, 8, 8 }, { 9, 1, 4 },
        { 10, 1, 4 }, { 12, 1, 4 }, { 16, 1, 4 }, { 2, 1, 32 }, { 4, 2, 100 } };
    static const float slopes[32] = { 0.5f };
    static uint16_t kv16[8 * 300 * 64];
    static float q[32 * 100 * 64], kv[8 * 300 * 64];
    size_t si, alibi, half, threads;
    int fails = 0;
    (void)state;
    for (si = 0; si < sizeof shapes / sizeof shapes[0]; ++si)
        for (half = 0; half < 2; ++half)
            for (alibi = 0; alibi < 2; ++alibi)
                for (threads = 1; threads <= 2; ++threads) {
                    size_t hq = shapes[si][0], hkv = shapes[si][1], n = shapes[si][2], a, b;
                    favor_dtype t = half ? FAVOR_F16 : FAVOR_F32;
                    void *kvp = half ? (void *)kv16 : (void *)kv;
                    favor_tensor Q = favor_tensor_packed(q, hq, n, 64),
                                 K = favor_tensor_packed_as(t, kvp, hkv, 300, 64),
                                 V = favor_tensor_packed_as(t, kvp, hkv, 300, 64);
                    favor_options opt = favor_default_options();
                    opt.flags = FAVOR_CAUSAL;
                    opt.threads = (int)threads;
                    opt.alibi = alibi ? slopes : NULL;
                    a = favor_softmax_attention_workspace(&Q, &K, &V, &opt);
                    b = scalar_softmax_attention_workspace(&Q, &K, &V, &opt);
                    if (a == 0 || a != b) {
                        print_error("  hq %u hkv %u n %u %s%s, %u threads: %zu bytes (%s), "
                                    "%zu (scalar)\n", (unsigned)hq, (unsigned)hkv,
                                    (unsigned)n, half ? "fp16" : "fp32",
                                    alibi ? " alibi" : "", (unsigned)threads, a,
                                    favor_backend(), b);
                        ++fails;
                    }
                }
    assert_int_equal(fails, 0);
}

/* ------------------------------------------------------------------------ */
/* Linear attention and the recurrent step */

typedef struct {
    size_t hq, hkv, n, nk, d, dv, m;
} lin_shape;

static const lin_shape lin_shapes[] = {
    /* hq hkv    n   nk    d   dv    m */
    { 2, 2,    1,   1,  16,  16,  64 },
    { 4, 2,   67,  67,  16,  24,  64 },
    { 2, 1,  200, 200,  64,  64, 128 },
    { 1, 1,  150, 150, 100,  40, 150 },
    { 4, 1,   67,  67,  64,  64, 100 },
    { 2, 2,   67, 120,  16,  16,  32 },
    { 2, 1,  300,  67,  16,  20,  40 },
};
#define NSHAPES (sizeof lin_shapes / sizeof lin_shapes[0])

/* Features of `kernel` in both copies (same seed), storage the caller frees. */
static void make_features(favor_kernel kernel, size_t d, size_t m, unsigned long long seed,
                          favor_features *f, favor_features *g, float **fa, float **ga)
{
    size_t floats;
    if (tu_fixed(kernel)) m = d;
    floats = favor_features_floats(kernel, d, m);
    *fa = nan_floats(floats);
    *ga = nan_floats(floats);
    assert_int_equal(favor_features_init(f, kernel, d, m, 0, seed, *fa), FAVOR_OK);
    assert_int_equal(scalar_features_init(g, kernel, d, m, 0, seed, *ga), FAVOR_OK);
}

static void test_linear_agree(void **state)
{
    agg ae, af;
    size_t si, ki, causal, cases = 0;
    int fails = 0;
    (void)state;
    memset(&ae, 0, sizeof ae);
    memset(&af, 0, sizeof af);
    ae.name = "linear ELU1 (x max|V|)";
    ae.tol = TOL_ELU1;
    af.name = "linear features (x max|O|)";
    af.tol = TOL_FEATURES;
    for (si = 0; si < NSHAPES; ++si)
        for (ki = 0; ki < NKERNELS; ++ki)
            for (causal = 0; causal < 2; ++causal) {
                const lin_shape *c = &lin_shapes[si];
                favor_kernel kern = kernels[ki];
                size_t m = kern == FAVOR_TRIG ? 128 : c->m;
                double sigma = kern == FAVOR_TRIG ? 0.3 : 1.0;
                size_t no = c->hq * c->n * c->dv;
                tu_rng r;
                favor_features f, g;
                float *fa, *ga, *q, *k, *v, *o1, *o2;
                favor_tensor Q, K, V, O1, O2;
                favor_options opt = favor_default_options();
                favor_status s1, s2;
                char label[160];
                make_features(kern, c->d, m, 77 + cases, &f, &g, &fa, &ga);
                r.s = 2000 + cases;
                q = tu_normal_floats(&r, c->hq * c->n * c->d, sigma);
                k = tu_normal_floats(&r, c->hkv * c->nk * c->d, sigma);
                v = tu_normal_floats(&r, c->hkv * c->nk * c->dv, 1.0);
                o1 = nan_floats(no);
                o2 = nan_floats(no);
                Q = favor_tensor_packed(q, c->hq, c->n, c->d);
                K = favor_tensor_packed(k, c->hkv, c->nk, c->d);
                V = favor_tensor_packed(v, c->hkv, c->nk, c->dv);
                O1 = favor_tensor_packed(o1, c->hq, c->n, c->dv);
                O2 = favor_tensor_packed(o2, c->hq, c->n, c->dv);
                opt.flags = causal ? FAVOR_CAUSAL : 0u;
                /* each copy reads its own W (they are identical, test_same_w) */
                s1 = favor_linear_attention(&f, &Q, &K, &V, &O1, &opt);
                s2 = scalar_linear_attention(&g, &Q, &K, &V, &O2, &opt);
                snprintf(label, sizeof label, "%s hq %u hkv %u n %u nk %u d %u dv %u m %u%s",
                         kernel_name(kern), (unsigned)c->hq, (unsigned)c->hkv, (unsigned)c->n,
                         (unsigned)c->nk, (unsigned)c->d, (unsigned)c->dv,
                         (unsigned)f.count, causal ? " causal" : "");
                if (s1 != FAVOR_OK || s2 != FAVOR_OK) {
                    print_error("  %s: status %s / %s\n", label, favor_status_string(s1),
                                favor_status_string(s2));
                    ++fails;
                } else if (kern == FAVOR_ELU1) { /* POLY2: ~d^2/2 features, their bound */
                    fails += compare(&ae, label, o1, o2, no,
                                     tu_max_abs_f(v, c->hkv * c->nk * c->dv));
                } else {
                    fails += compare(&af, label, o1, o2, no, tu_max_abs_f(o2, no));
                }
                ++cases;
                free(fa);
                free(ga);
                free(q);
                free(k);
                free(v);
                free(o1);
                free(o2);
            }
    agg_print(&ae);
    agg_print(&af);
    assert_int_equal(fails, 0);
}

/* favor_feature_map in every role. */
static void test_feature_map_agree(void **state)
{
    static const favor_role roles[] = { FAVOR_QUERY, FAVOR_KEY, FAVOR_PLAIN };
    static const char *role_names[] = { "QUERY", "KEY", "PLAIN" };
    agg a;
    size_t ki, ri, si, cases = 0;
    int fails = 0;
    (void)state;
    memset(&a, 0, sizeof a);
    a.name = "feature maps (x max|phi|)";
    a.tol = TOL_FEATURES;
    for (si = 0; si < 3; ++si)
        for (ki = 0; ki < NKERNELS; ++ki)
            for (ri = 0; ri < 3; ++ri) {
                static const size_t dm[3][3] = { { 16, 64, 67 }, { 64, 256, 130 }, { 100, 37, 5 } };
                size_t d = dm[si][0], m = kernels[ki] == FAVOR_TRIG ? 128 : dm[si][1];
                size_t rows = dm[si][2], heads = 2, width, nphi;
                double sigma = kernels[ki] == FAVOR_TRIG ? 0.3 : 1.0;
                favor_features f, g;
                float *fa, *ga, *x, *p1, *p2;
                favor_tensor X, P1, P2;
                tu_rng r;
                char label[160];
                make_features(kernels[ki], d, m, 500 + cases, &f, &g, &fa, &ga);
                width = favor_features_width(&f);
                nphi = heads * rows * width;
                r.s = 3000 + cases;
                x = tu_normal_floats(&r, heads * rows * d, sigma);
                p1 = nan_floats(nphi);
                p2 = nan_floats(nphi);
                X = favor_tensor_packed(x, heads, rows, d);
                P1 = favor_tensor_packed(p1, heads, rows, width);
                P2 = favor_tensor_packed(p2, heads, rows, width);
                snprintf(label, sizeof label, "%s %s d %u m %u rows %u", kernel_name(kernels[ki]),
                         role_names[ri], (unsigned)d, (unsigned)f.count, (unsigned)rows);
                assert_int_equal(favor_feature_map(&f, &X, &P1, roles[ri]), FAVOR_OK);
                assert_int_equal(scalar_feature_map(&g, &X, &P2, roles[ri]), FAVOR_OK);
                fails += compare(&a, label, p1, p2, nphi, tu_max_abs_f(p2, nphi));
                ++cases;
                free(fa);
                free(ga);
                free(x);
                free(p1);
                free(p2);
            }
    agg_print(&a);
    assert_int_equal(fails, 0);
}

/* favor_linear_step token by token from a fresh state in each copy. */
static void test_step_agree(void **state)
{
    static const lin_shape shapes[] = {
        /* hq hkv   n  nk   d  dv    m */
        { 4, 2,  67, 67, 16, 24,  64 },
        { 2, 1, 200, 200, 64, 64, 128 },
        { 1, 1,  40, 40, 100, 40,  37 },
    };
    agg ae, af;
    size_t si, ki, t, cases = 0;
    int fails = 0;
    (void)state;
    memset(&ae, 0, sizeof ae);
    memset(&af, 0, sizeof af);
    ae.name = "step ELU1 (x max|V|)";
    ae.tol = TOL_ELU1;
    af.name = "step features (x max|O|)";
    af.tol = TOL_FEATURES;
    for (si = 0; si < sizeof shapes / sizeof shapes[0]; ++si)
        for (ki = 0; ki < NKERNELS; ++ki) {
            const lin_shape *c = &shapes[si];
            favor_kernel kern = kernels[ki];
            size_t m = kern == FAVOR_TRIG ? 128 : c->m;
            double sigma = kern == FAVOR_TRIG ? 0.3 : 1.0;
            size_t no = c->hq * c->n * c->dv;
            favor_features f, g;
            favor_state s1, s2;
            float *fa, *ga, *q, *k, *v, *o1, *o2, *st1, *st2;
            tu_rng r;
            char label[160];
            make_features(kern, c->d, m, 900 + cases, &f, &g, &fa, &ga);
            r.s = 4000 + cases;
            /* token-major: [n][heads][cols], one token is a 1-row view of every head */
            q = tu_normal_floats(&r, c->n * c->hq * c->d, sigma);
            k = tu_normal_floats(&r, c->n * c->hkv * c->d, sigma);
            v = tu_normal_floats(&r, c->n * c->hkv * c->dv, 1.0);
            o1 = nan_floats(no);
            o2 = nan_floats(no);
            assert_int_equal(favor_state_floats(&f, c->hkv, c->dv),
                             scalar_state_floats(&g, c->hkv, c->dv));
            st1 = nan_floats(favor_state_floats(&f, c->hkv, c->dv));
            st2 = nan_floats(scalar_state_floats(&g, c->hkv, c->dv));
            assert_int_equal(favor_state_init(&s1, &f, c->hkv, c->dv, st1), FAVOR_OK);
            assert_int_equal(scalar_state_init(&s2, &g, c->hkv, c->dv, st2), FAVOR_OK);
            for (t = 0; t < c->n; ++t) {
                favor_tensor Q = favor_tensor_packed(q + t * c->hq * c->d, c->hq, 1, c->d);
                favor_tensor K = favor_tensor_packed(k + t * c->hkv * c->d, c->hkv, 1, c->d);
                favor_tensor V = favor_tensor_packed(v + t * c->hkv * c->dv, c->hkv, 1, c->dv);
                favor_tensor O1 = favor_tensor_packed(o1 + t * c->hq * c->dv, c->hq, 1, c->dv);
                favor_tensor O2 = favor_tensor_packed(o2 + t * c->hq * c->dv, c->hq, 1, c->dv);
                favor_status e1 = favor_linear_step(&f, &s1, &Q, &K, &V, &O1);
                favor_status e2 = scalar_linear_step(&g, &s2, &Q, &K, &V, &O2);
                if (e1 != FAVOR_OK || e2 != FAVOR_OK) {
                    print_error("  step %u: status %s / %s\n", (unsigned)t,
                                favor_status_string(e1), favor_status_string(e2));
                    ++fails;
                    break;
                }
            }
            assert_true(s1.tokens == c->n && s2.tokens == c->n);
            snprintf(label, sizeof label, "%s hq %u hkv %u tokens %u d %u dv %u m %u",
                     kernel_name(kern), (unsigned)c->hq, (unsigned)c->hkv, (unsigned)c->n,
                     (unsigned)c->d, (unsigned)c->dv, (unsigned)f.count);
            if (kern == FAVOR_ELU1)
                fails += compare(&ae, label, o1, o2, no, tu_max_abs_f(v, c->n * c->hkv * c->dv));
            else
                fails += compare(&af, label, o1, o2, no, tu_max_abs_f(o2, no));
            ++cases;
            free(fa);
            free(ga);
            free(q);
            free(k);
            free(v);
            free(o1);
            free(o2);
            free(st1);
            free(st2);
        }
    agg_print(&ae);
    agg_print(&af);
    assert_int_equal(fails, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backend_names),
        cmocka_unit_test(test_same_w),
        cmocka_unit_test(test_softmax_agree),
        cmocka_unit_test(test_softmax_workspace_agree),
        cmocka_unit_test(test_linear_agree),
        cmocka_unit_test(test_feature_map_agree),
        cmocka_unit_test(test_step_agree),
    };
    if (tu_check_backend() != 0) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
