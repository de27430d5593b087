/* favor_linear_attention and favor_feature_map against the float64 reference
 * (tests/reference.c), with the same W: the features are drawn with
 * favor_features_init and the reference reads f.w.
 *
 * The reference itself: ref_linear's prefix sums against the explicit weights
 * of ref_weights, every kernel, small shapes, within 1e-12 of max|o|.
 *
 * Accuracy on N(0,1) inputs, for every kernel over a list of representative
 * shapes that together cover d in {1, 3, 16, 64, 128}, d_v != d, n in
 * {1, 2, 17, 257, 1000, 1300}, n_k > n and n_k < n (causal and not), 1, 4, 8 and
 * 16 heads, one key/value head cut into 2 and 3 segments, 8 key/value heads whole
 * (from 8 on, a head is not split: the non-causal one-head kernel),
 * grouped-query 4:2 (and 2:1, 4:1), packed, interleaved and padded views, default
 * and non-default scales, m below, equal to, above and not a multiple of d,
 * caller workspace and library allocation:
 *     FAVOR_ELU1, FAVOR_POLY2             max |O - O_ref| <= 2e-5 * max|V|
 * (POLY2's reference is its kernel 1 + t + t^2/2 computed directly, not through
 * its features)
 *     POSITIVE, HYPERBOLIC, RELU, TRIG    max |O - O_ref| <= 1e-4 * max|O_ref|
 * Every call must leave its inputs and the gaps of its output untouched and
 * write every output element.
 *
 * Feature map roles: FAVOR_PLAIN equals ref_features (per element within 1e-5 of
 * the row's largest |phi|); FAVOR_QUERY rows are positive multiples of the plain
 * rows, with largest element 1/sqrt(m) (POSITIVE) or 1/sqrt(2m) (HYPERBOLIC);
 * FAVOR_KEY is one positive constant times the plain map per head.
 *
 * Robustness: inputs of magnitude up to 1e4 give finite outputs for every
 * kernel, causal and not (and finite QUERY / KEY features); for the positive
 * maps the output is a convex combination of value rows, |o| <= max|V|. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <time.h>

#include "favor.h"
#include "reference.h"
#include "test_util.h"
#include "test_views.h"

static const favor_kernel kernels[] = TU_ALL_KERNELS;
#define NKERNELS (sizeof kernels / sizeof kernels[0])
#define kernel_name tu_kernel_name

/* Features of `kernel` (count m; ELU1 ignores m) with storage the caller frees. */
static favor_status make_features(favor_features *f, favor_kernel kernel, size_t d, size_t m,
                                  unsigned long long seed, float **storage)
{
    size_t floats;
    if (tu_fixed(kernel)) m = d;
    floats = favor_features_floats(kernel, d, m);
    *storage = floats ? (float *)malloc(floats * sizeof(float)) : NULL;
    return favor_features_init(f, kernel, d, m, 0, seed, *storage);
}

typedef struct {
    size_t hq, hkv, n, nk, d, dv, m;
    int causal;
    float scale;              /* 0 = the features' own scale (1/sqrt(d)) */
    tv_layout lq, lkv, lo;    /* layouts of Q, of K and V, of O */
    int workspace;            /* 1: pass a caller workspace of the queried size */
} lin_case;

/* For FAVOR_TRIG every case uses m = 256 and inputs N(0, 0.3^2): with
 * |q' - k'|^2 = s |q - k|^2 <= ~2.5 the estimate of exp(s q.k) stays well
 * above zero (its mean is at least ~0.3 exp(s q.k) and its noise ~0.05), so the
 * denominator is well away from zero and the ratio is well conditioned. The
 * scales below are chosen so that s * d * 2 * 0.09 <= 2.5 holds for every case. */
static const lin_case cases[] = {
    /* hq hkv    n    nk    d   dv    m causal scale  Q            K, V            O          ws */
    { 1, 1,    1,    1,   1,   1,   4, 0, 0.0f,  TV_PACKED,      TV_PACKED,      TV_PACKED,      0 },
    { 1, 1,    1,    1,   1,   1,   1, 1, 0.0f,  TV_PADDED,      TV_PADDED,      TV_PADDED,      1 },
    { 1, 1,    2,    2,   3,   5,   8, 1, 0.0f,  TV_PADDED,      TV_PACKED,      TV_PADDED,      0 },
    { 1, 1,    2,    1,   3,   3,   7, 1, 0.7f,  TV_PACKED,      TV_PADDED,      TV_PACKED,      1 },
    { 4, 4,   17,   17,  16,  16,  64, 1, 0.0f,  TV_INTERLEAVED, TV_INTERLEAVED, TV_INTERLEAVED, 0 },
    { 4, 4,   17,   17,  16,  16,  16, 0, 0.0f,  TV_INTERPAD,    TV_INTERLEAVED, TV_PADDED,      1 },
    { 4, 2,   17,   40,  16,   8, 100, 0, 0.0f,  TV_PADDED,      TV_INTERLEAVED, TV_INTERPAD,    1 },
    { 4, 2,   17,   40,  16,   8, 100, 1, 0.0f,  TV_INTERLEAVED, TV_PADDED,      TV_INTERLEAVED, 0 },
    { 4, 2,   40,   17,  64,  32, 256, 1, 0.0f,  TV_PACKED,      TV_INTERLEAVED, TV_INTERPAD,    0 },
    { 4, 2,   40,   17,  64,  32,  96, 0, 0.2f,  TV_INTERPAD,    TV_INTERPAD,    TV_PACKED,      1 },
    { 1, 1,  257,  100, 128,  64,  64, 0, 0.02f, TV_PADDED,      TV_PADDED,      TV_PADDED,      0 },
    { 1, 1,  257,  100, 128,  64, 200, 1, 0.0f,  TV_PACKED,      TV_PACKED,      TV_PACKED,      1 },
    { 1, 1,  100,  257,  64,  64, 256, 1, 0.05f, TV_PACKED,      TV_PACKED,      TV_PADDED,      1 },
    { 1, 1, 1000, 1000,  64,  64,  96, 1, 0.0f,  TV_PACKED,      TV_PACKED,      TV_PACKED,      1 },
    { 1, 1,  257, 1000,   3,  17,  32, 0, 1.5f,  TV_PADDED,      TV_PACKED,      TV_PACKED,      0 },
    { 4, 4,  257,  257,   3,   7,  32, 0, 1.5f,  TV_INTERLEAVED, TV_INTERLEAVED, TV_INTERLEAVED, 0 },
    { 4, 4,  257,  257,  16,  20,  64, 1, 0.3f,  TV_INTERPAD,    TV_PACKED,      TV_INTERLEAVED, 0 },
    { 4, 2,    1, 1000,  64,  64, 128, 1, 0.0f,  TV_PACKED,      TV_INTERLEAVED, TV_PACKED,      0 },
    { 4, 1,    1,  257, 128, 128, 128, 0, 0.0f,  TV_INTERLEAVED, TV_PACKED,      TV_INTERLEAVED, 1 },
    { 1, 1, 1000,   17, 128,  32, 256, 1, 0.0f,  TV_PACKED,      TV_PADDED,      TV_PACKED,      0 },
    { 1, 1, 1000,  257,  16,  24,  64, 0, 0.0f,  TV_PADDED,      TV_PACKED,      TV_INTERPAD,    0 },
    { 2, 1,    2, 1000,  16,  16,  64, 0, 0.3f,  TV_INTERPAD,    TV_INTERPAD,    TV_INTERPAD,    1 },
    { 2, 1,    2, 1000,  16,  16,  64, 1, 0.3f,  TV_PACKED,      TV_PACKED,      TV_PACKED,      0 },
    { 1, 1,   17,    2,   1,   4,   3, 1, 2.0f,  TV_PACKED,      TV_PADDED,      TV_PADDED,      0 },
    /* 8 key/value heads and more: whole heads (no split inside a head), the only
     * shapes whose non-causal forward runs the one-head kernel */
    { 8, 8,   33,   45,  16,   8,  32, 0, 0.0f,  TV_PADDED,      TV_INTERLEAVED, TV_PACKED,      1 },
    {16, 8,   45,   33,  16,  16,  32, 0, 0.3f,  TV_INTERLEAVED, TV_PACKED,      TV_INTERPAD,    0 },
    {16, 8,   45,   33,  16,  16,  32, 1, 0.0f,  TV_PACKED,      TV_PADDED,      TV_INTERLEAVED, 1 },
    /* one key/value head cut into segments of 512 keys (see favor.h, "Splitting
     * one key/value head"): 3 segments, causal with rows that see no key and
     * with keys every row sees (the first segment then holds no causal row) */
    { 2, 1, 1300, 1100,  16,   8,  32, 1, 0.0f,  TV_INTERLEAVED, TV_PADDED,      TV_PACKED,      1 },
    { 3, 1,  700, 1500,   8,   8,  32, 1, 0.0f,  TV_PACKED,      TV_INTERLEAVED, TV_PADDED,      0 },
    { 3, 1,  300, 1500,   8,  12,  32, 0, 0.0f,  TV_PADDED,      TV_PACKED,      TV_INTERPAD,    1 },
};

static void print_case(size_t i, const lin_case *c, favor_kernel kernel, size_t m,
                       double sigma)
{
    print_message("case %2u %-10s: hq %u hkv %u n %u nk %u d %u dv %u m %u %s scale %g "
                  "sigma %g  Q %s KV %s O %s%s\n",
                  (unsigned)i, kernel_name(kernel), (unsigned)c->hq, (unsigned)c->hkv,
                  (unsigned)c->n, (unsigned)c->nk, (unsigned)c->d, (unsigned)c->dv,
                  (unsigned)m, c->causal ? "causal" : "full", (double)c->scale, sigma,
                  tv_layout_name(c->lq), tv_layout_name(c->lkv), tv_layout_name(c->lo),
                  c->workspace ? " workspace" : "");
}

/* One case for one kernel. mode 0: accuracy against ref_linear; mode 1: inputs
 * scaled by 1e4, finite output (and |o| <= max|V| for the positive maps).
 * Returns the number of failed checks. */
static int run_case(size_t index, const lin_case *c, favor_kernel kernel, int mode)
{
    tu_rng rng;
    tv_buf Q, K, V, O;
    favor_features f;
    float *wstore = NULL;
    favor_options opt = favor_default_options();
    favor_status st;
    void *ws = NULL;
    int fails = 0;
    size_t m = tu_fixed(kernel) ? c->d : kernel == FAVOR_TRIG && mode == 0 ? 256 : c->m;
    double sigma = kernel == FAVOR_TRIG && mode == 0 ? 0.3 : 1.0;

    clock_t t0 = clock();
    print_case(index, c, kernel, m, mode ? 1e4 : sigma);
    st = make_features(&f, kernel, c->d, m, 77 + index, &wstore);
    if (st != FAVOR_OK) {
        print_error("  favor_features_init: %s\n", favor_status_string(st));
        free(wstore);
        return 1;
    }
    rng.s = 9000 + 31 * index + (unsigned)kernel;
    tv_make(&Q, c->hq, c->n, c->d, c->lq, &rng, sigma);
    tv_make(&K, c->hkv, c->nk, c->d, c->lkv, &rng, sigma);
    tv_make(&V, c->hkv, c->nk, c->dv, c->lkv, &rng, sigma);
    tv_make(&O, c->hq, c->n, c->dv, c->lo, &rng, -1);
    if (mode == 1) {
        tv_scale(&Q, 1e4);
        tv_scale(&K, 1e4);
        tv_scale(&V, 1e4);
    }

    opt.flags = c->causal ? FAVOR_CAUSAL : 0u;
    opt.scale = c->scale;
    if (c->workspace) {
        size_t bytes = favor_linear_attention_workspace(&f, &Q.t, &K.t, &V.t, &opt);
        ws = malloc(bytes ? bytes : 1);
        opt.workspace = ws;
        opt.workspace_size = bytes;
    }
    st = favor_linear_attention(&f, &Q.t, &K.t, &V.t, &O.t, &opt);
    if (st != FAVOR_OK) {
        print_error("  status %s\n", favor_status_string(st));
        ++fails;
    } else {
        if (!tv_unchanged(&Q) || !tv_unchanged(&K) || !tv_unchanged(&V)) {
            print_error("  an input buffer was written\n");
            ++fails;
        }
        if (!tv_gaps_unchanged(&O)) {
            print_error("  a gap of the output view was written\n");
            ++fails;
        }
        if (!tv_view_finite(&O)) {
            print_error("  an output element is not finite (or was never written)\n");
            ++fails;
        }
        if (mode == 0) {
            double *q = tu_tensor_to_double(&Q.t), *k = tu_tensor_to_double(&K.t);
            double *v = tu_tensor_to_double(&V.t);
            double *ref = (double *)malloc(c->hq * c->n * c->dv * sizeof *ref);
            double err, tol;
            ref_linear(&f, q, k, v, ref, c->hq, c->hkv, c->n, c->nk, c->dv, c->scale,
                       c->causal);
            err = tu_max_abs_diff(&O.t, ref);
            if (tu_fixed(kernel))
                tol = 2e-5 * tv_max_abs(&V);
            else
                tol = 1e-4 * tu_max_abs(ref, c->hq * c->n * c->dv);
            print_message("  max|err| %.3g  tol %.3g  (err/tol %.3f)\n", err, tol, err / tol);
            if (!(err <= tol)) {
                print_error("  accuracy: max|err| %.6g > %.6g\n", err, tol);
                ++fails;
            }
            free(q);
            free(k);
            free(v);
            free(ref);
        } else if (kernel != FAVOR_TRIG) {
            /* Non-negative weights: each row is a convex combination of value
             * rows (or zero when every weight underflowed). */
            double mo = tv_max_abs(&O), mv = tv_max_abs(&V);
            if (!(mo <= mv * (1 + 1e-4))) {
                print_error("  max|O| %.6g exceeds max|V| %.6g\n", mo, mv);
                ++fails;
            }
        }
    }
    free(ws);
    free(wstore);
    tv_free(&Q);
    tv_free(&K);
    tv_free(&V);
    tv_free(&O);
    if (mode == 0) print_message("  %.2f s\n", (double)(clock() - t0) / CLOCKS_PER_SEC);
    return fails;
}

/* The associative form ref_linear evaluates (prefix sums over the keys) against
 * the explicit weights of ref_weights (a_ij / sum_j a_ij, pair by pair) on small
 * shapes: every kernel, causal and not, grouped heads, n_k above and below n
 * (rows that see no key), TRIG with its N(0, 0.3^2) inputs. Both are double;
 * they agree to 1e-12 of max|o|, so the O(n + n_k) reference the other tests
 * use is the formula of design.md section 1. (ref_linear_backward is held to
 * central differences of ref_linear in test_backward.c.) */
static void test_reference_explicit(void **state)
{
    static const size_t shapes[][7] = { /* hq hkv n nk d dv m */
        { 2, 1, 9, 13, 5, 3, 16 },
        { 2, 2, 13, 9, 4, 6, 10 },
        { 3, 1, 1, 7, 3, 2, 8 },
    };
    size_t k, s, h, i, j, c;
    int causal, fails = 0;
    (void)state;
    for (k = 0; k < NKERNELS; ++k)
        for (s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
            for (causal = 0; causal < 2; ++causal) {
                const size_t *z = shapes[s], hq = z[0], hkv = z[1], n = z[2], nk = z[3];
                const size_t d = z[4], dv = z[5];
                double sigma = kernels[k] == FAVOR_TRIG ? 0.3 : 1.0, err = 0, big = 0;
                tu_rng rng = { 4242 + 17 * s + (unsigned)kernels[k] };
                favor_features f;
                float *w = NULL;
                double *q = (double *)tu_xmalloc(hq * n * d * sizeof *q);
                double *kk = (double *)tu_xmalloc(hkv * nk * d * sizeof *kk);
                double *v = (double *)tu_xmalloc(hkv * nk * dv * sizeof *v);
                double *o = (double *)tu_xmalloc(hq * n * dv * sizeof *o);
                double *p = (double *)tu_xmalloc(nk * sizeof *p);
                assert_int_equal(make_features(&f, kernels[k], d, z[6], 5 + s, &w), FAVOR_OK);
                for (i = 0; i < hq * n * d; ++i) q[i] = sigma * tu_normal(&rng);
                for (i = 0; i < hkv * nk * d; ++i) kk[i] = sigma * tu_normal(&rng);
                for (i = 0; i < hkv * nk * dv; ++i) v[i] = tu_normal(&rng);
                ref_linear(&f, q, kk, v, o, hq, hkv, n, nk, dv, 0.0, causal);
                for (h = 0; h < hq; ++h)
                    for (i = 0; i < n; ++i) {
                        const size_t g = h / (hq / hkv);
                        size_t vis = !causal ? nk : i + nk < n ? 0 : i + nk - n + 1;
                        for (j = 0; j < vis; ++j) p[j] = 0;
                        ref_weights(&f, q + (h * n + i) * d, kk + g * nk * d, vis, d, 0.0, p);
                        for (c = 0; c < dv; ++c) {
                            double e = 0, r = o[(h * n + i) * dv + c];
                            for (j = 0; j < vis; ++j) e += p[j] * v[(g * nk + j) * dv + c];
                            if (fabs(e - r) > err) err = fabs(e - r);
                            if (fabs(e) > big) big = fabs(e);
                        }
                    }
                if (!(err <= 1e-12 * big) || !(big > 0)) {
                    print_error("%s shape %u %s: max|explicit - ref_linear| %.3g, max|o| %.3g\n",
                                kernel_name(kernels[k]), (unsigned)s,
                                causal ? "causal" : "full", err, big);
                    ++fails;
                }
                free(q);
                free(kk);
                free(v);
                free(o);
                free(p);
                free(w);
            }
    assert_int_equal(fails, 0);
}

static void test_linear_accuracy(void **state)
{
    size_t i, k;
    int fails = 0;
    (void)state;
    for (k = 0; k < NKERNELS; ++k)
        for (i = 0; i < sizeof cases / sizeof cases[0]; ++i)
            fails += run_case(i, &cases[i], kernels[k], 0);
    assert_int_equal(fails, 0);
}

static void test_linear_large_inputs_finite(void **state)
{
    static const lin_case big[] = {
        { 4, 2,  70,  90, 16,  8,  64, 0, 0.0f, TV_PACKED, TV_INTERLEAVED, TV_PADDED, 0 },
        { 4, 2,  70,  90, 16,  8,  64, 1, 0.0f, TV_PACKED, TV_INTERLEAVED, TV_PADDED, 0 },
        { 1, 1, 100,  50, 64, 64, 128, 1, 0.0f, TV_PACKED, TV_PACKED,      TV_PACKED, 1 },
        { 1, 1, 100,  50, 64, 64, 128, 0, 1.0f, TV_PACKED, TV_PACKED,      TV_PACKED, 1 },
        { 1, 1, 257, 257,  3,  5,  16, 1, 0.0f, TV_PADDED, TV_PADDED,      TV_PACKED, 0 },
    };
    size_t i, k;
    int fails = 0;
    (void)state;
    for (k = 0; k < NKERNELS; ++k)
        for (i = 0; i < sizeof big / sizeof big[0]; ++i)
            fails += run_case(i, &big[i], kernels[k], 1);
    assert_int_equal(fails, 0);
}

/* ---- favor_feature_map roles ------------------------------------------------ */

typedef struct {
    size_t heads, rows, d, m;
    float scale;
    double sigma;
} map_case;

/* Checks one role's output phi (packed double, heads x rows x width) against the
 * plain double map p. Returns failures. */
static int check_role(favor_role role, favor_kernel kernel, const double *phi,
                      const double *p, size_t heads, size_t rows, size_t width, size_t m)
{
    size_t h, l;
    int fails = 0;
    double worst = 0;
    for (h = 0; h < heads; ++h) {
        /* rows [r0, r1) share one constant: one row (QUERY, PLAIN) or the head (KEY) */
        size_t r0, group = role == FAVOR_KEY ? rows : 1;
        for (r0 = 0; r0 < rows; r0 += group) {
            const double *a = phi + (h * rows + r0) * width, *b = p + (h * rows + r0) * width;
            size_t cnt = group * width;
            double ab = 0, bb = 0, amax = 0, bmax = 0, ratio, dev = 0;
            for (l = 0; l < cnt; ++l) {
                ab += a[l] * b[l];
                bb += b[l] * b[l];
                if (fabs(a[l]) > amax) amax = fabs(a[l]);
                if (fabs(b[l]) > bmax) bmax = fabs(b[l]);
            }
            if (role == FAVOR_PLAIN) {
                for (l = 0; l < cnt; ++l)
                    if (fabs(a[l] - b[l]) > dev) dev = fabs(a[l] - b[l]);
                if (!(dev <= 1e-5 * bmax)) {
                    print_error("  PLAIN head %u row %u: max|phi - ref| %.6g > 1e-5 * %.6g\n",
                                (unsigned)h, (unsigned)r0, dev, bmax);
                    ++fails;
                }
                if (bmax > 0 && dev / bmax > worst) worst = dev / bmax;
                continue;
            }
            ratio = bb > 0 ? ab / bb : 0;
            if (!(ratio > 0) || !isfinite(ratio)) {
                print_error("  %s head %u row %u: constant %.6g is not positive\n",
                            role == FAVOR_KEY ? "KEY" : "QUERY", (unsigned)h, (unsigned)r0,
                            ratio);
                ++fails;
                continue;
            }
            for (l = 0; l < cnt; ++l)
                if (fabs(a[l] - ratio * b[l]) > dev) dev = fabs(a[l] - ratio * b[l]);
            if (!(dev <= 1e-5 * amax)) {
                print_error("  %s head %u row %u: not proportional to the plain map: "
                            "max|phi - c*ref| %.6g > 1e-5 * %.6g\n",
                            role == FAVOR_KEY ? "KEY" : "QUERY", (unsigned)h, (unsigned)r0,
                            dev, amax);
                ++fails;
            }
            if (amax > 0 && dev / amax > worst) worst = dev / amax;
            if (role == FAVOR_QUERY &&
                (kernel == FAVOR_POSITIVE || kernel == FAVOR_HYPERBOLIC)) {
                double want = 1.0 / sqrt((double)(kernel == FAVOR_HYPERBOLIC ? 2 * m : m));
                if (!(fabs(amax - want) <= 1e-5 * want)) {
                    print_error("  QUERY head %u row %u: largest element %.9g, want %.9g\n",
                                (unsigned)h, (unsigned)r0, amax, want);
                    ++fails;
                }
            }
        }
    }
    print_message("  %-5s worst relative deviation %.3g\n",
                  role == FAVOR_PLAIN ? "PLAIN" : role == FAVOR_KEY ? "KEY" : "QUERY", worst);
    return fails;
}

static void test_feature_map_roles(void **state)
{
    static const map_case mc[] = {
        { 2, 33, 16,  64, 0.0f, 1.0 },
        { 3, 17, 64, 100, 0.0f, 1.0 },
        { 1,  5,  3,   7, 0.5f, 1.0 },
        { 2,  9,  1,   4, 0.0f, 1.0 },
        { 1, 20, 128, 256, 0.0f, 0.7 },
    };
    static const favor_role roles[] = { FAVOR_PLAIN, FAVOR_QUERY, FAVOR_KEY };
    size_t i, k, r;
    int fails = 0;
    (void)state;
    for (i = 0; i < sizeof mc / sizeof mc[0]; ++i)
        for (k = 0; k < NKERNELS; ++k) {
            const map_case *c = &mc[i];
            favor_kernel kernel = kernels[k];
            favor_features f;
            float *wstore = NULL;
            tu_rng rng;
            tv_buf X;
            double *x, *p;
            size_t width, m = tu_fixed(kernel) ? c->d : c->m;
            favor_status st = make_features(&f, kernel, c->d, m, 500 + i, &wstore);
            print_message("map case %u %-10s: heads %u rows %u d %u m %u scale %g sigma %g\n",
                          (unsigned)i, kernel_name(kernel), (unsigned)c->heads,
                          (unsigned)c->rows, (unsigned)c->d, (unsigned)m, (double)c->scale,
                          c->sigma);
            if (st != FAVOR_OK) {
                print_error("  favor_features_init: %s\n", favor_status_string(st));
                free(wstore);
                ++fails;
                continue;
            }
            if (c->scale != 0) f.scale = c->scale;
            width = favor_features_width(&f);
            if (width != (kernel == FAVOR_ELU1    ? c->d
                          : kernel == FAVOR_POLY2 ? 1 + c->d + c->d * (c->d + 1) / 2
                          : kernel == FAVOR_HYPERBOLIC || kernel == FAVOR_TRIG ? 2 * m : m)) {
                print_error("  favor_features_width %u\n", (unsigned)width);
                ++fails;
            }
            rng.s = 4242 + 7 * i + k;
            tv_make(&X, c->heads, c->rows, c->d, TV_PADDED, &rng, c->sigma);
            x = tu_tensor_to_double(&X.t);
            p = (double *)malloc(c->heads * c->rows * width * sizeof *p);
            ref_features(&f, x, c->heads * c->rows, 0, p);
            for (r = 0; r < sizeof roles / sizeof roles[0]; ++r) {
                tv_buf P;
                tv_make(&P, c->heads, c->rows, width, r == 1 ? TV_INTERLEAVED : TV_INTERPAD,
                        &rng, -1);
                st = favor_feature_map(&f, &X.t, &P.t, roles[r]);
                if (st != FAVOR_OK) {
                    print_error("  favor_feature_map role %u: %s\n", (unsigned)roles[r],
                                favor_status_string(st));
                    ++fails;
                } else {
                    double *phi = tu_tensor_to_double(&P.t);
                    if (!tv_unchanged(&X) || !tv_gaps_unchanged(&P) || !tv_view_finite(&P)) {
                        print_error("  role %u: input written, gap written or output "
                                    "not finite\n", (unsigned)roles[r]);
                        ++fails;
                    }
                    fails += check_role(roles[r], kernel, phi, p, c->heads, c->rows, width, m);
                    free(phi);
                }
                tv_free(&P);
            }
            free(x);
            free(p);
            tv_free(&X);
            free(wstore);
        }
    assert_int_equal(fails, 0);
}

/* QUERY and KEY features stay finite (and positive maps non-negative) for inputs
 * of magnitude 1e4; PLAIN may overflow by design and is not checked here. POLY2
 * (finite: its features are about 1e8 here) has signed features: its kernel,
 * not each feature, is positive. */
static void test_feature_map_large_inputs(void **state)
{
    size_t k, r;
    int fails = 0;
    (void)state;
    for (k = 0; k < NKERNELS; ++k) {
        favor_kernel kernel = kernels[k];
        favor_features f;
        float *wstore = NULL;
        tu_rng rng;
        tv_buf X;
        size_t width, d = 16, m = tu_fixed(kernel) ? 16 : 64;
        favor_status st = make_features(&f, kernel, d, m, 99, &wstore);
        print_message("large map %s\n", kernel_name(kernel));
        if (st != FAVOR_OK) {
            print_error("  favor_features_init: %s\n", favor_status_string(st));
            free(wstore);
            ++fails;
            continue;
        }
        width = favor_features_width(&f);
        rng.s = 31337 + k;
        tv_make(&X, 2, 40, d, TV_PACKED, &rng, 1e4);
        for (r = 0; r < 2; ++r) {
            tv_buf P;
            favor_role role = r == 0 ? FAVOR_QUERY : FAVOR_KEY;
            tv_make(&P, 2, 40, width, TV_PACKED, &rng, -1);
            st = favor_feature_map(&f, &X.t, &P.t, role);
            if (st != FAVOR_OK) {
                print_error("  favor_feature_map: %s\n", favor_status_string(st));
                ++fails;
            } else if (!tv_view_finite(&P)) {
                print_error("  %s features not finite\n", r == 0 ? "QUERY" : "KEY");
                ++fails;
            } else if (kernel != FAVOR_TRIG && kernel != FAVOR_POLY2) {
                size_t i;
                for (i = 0; i < P.len; ++i)
                    if (P.buf[i] < 0) {
                        print_error("  negative feature %g\n", (double)P.buf[i]);
                        ++fails;
                        break;
                    }
            }
            tv_free(&P);
        }
        tv_free(&X);
        free(wstore);
    }
    assert_int_equal(fails, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_feature_map_roles),
        cmocka_unit_test(test_feature_map_large_inputs),
        cmocka_unit_test(test_reference_explicit),
        cmocka_unit_test(test_linear_accuracy),
        cmocka_unit_test(test_linear_large_inputs_finite),
    };
    if (tu_check_backend() != 0) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
