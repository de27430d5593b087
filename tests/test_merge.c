/* favor_attention_merge: two softmax results over disjoint key sets merged
 * through their lse into the result over the union (issue 24, item 7).
 *
 *   test_merge_splits     random softmax problems, the keys split at several
 *                         points (an empty side too: output garbage, lse -inf),
 *                         each part run through favor_softmax_attention with
 *                         opts.lse and merged. Tolerances, on N(0,1) inputs:
 *                         against favor_softmax_attention over all keys, out
 *                         within 2e-6 max|V| and lse within 2e-6 max(1, |lse|);
 *                         against the float64 softmax written below, out within
 *                         2e-5 max|V| (the header's softmax bound) and lse
 *                         within 4e-6 max(1, |lse|). A split with an empty side
 *                         gives the other side's bits. Non-causal and
 *                         decode-style causal splits (a prefix cache seen by
 *                         every row, non-causal, then the causal suffix), the
 *                         decode path (<= 32 rows) and the blocked one, grouped
 *                         heads, packed, interleaved and padded views (gaps must
 *                         stay unwritten), and a three-way cascade merged in place.
 *   test_merge_accuracy   random rows with lse differences from 0 to 1e3: each
 *                         element within 1 ULP of the merge in long double plus
 *                         2^-50 max(|a|, |b|) (cancellation), lse within 1 ULP;
 *                         the special rows (one side -inf or +inf: that row's
 *                         bits; both -inf: zeros and -inf; NaN: NaN).
 *   test_merge_dtypes     every mix of fp32, fp16 and bf16 for out_a, out_b and
 *                         out, 300 columns (two blocks of the header's stack
 *                         buffers): bit for bit the merge of fp32 copies of the
 *                         16-bit values, rounded once to out's type.
 *   test_merge_in_place   out the very view of out_a (or out_b), lse the very
 *                         pointer lse_a (or lse_b), fp32 and fp16: the bits of
 *                         the out-of-place merge.
 *   test_merge_batched    batch 3 of [B][T][heads*d_v] views, from batched
 *                         softmax parts: against the full batched call, and bit
 *                         for bit the unbatched merges of each batch element.
 *   test_merge_threads    threads 1, 2, 3 (and 0): the same bits.
 *   test_merge_validation every refused call: its status and text, and out,
 *                         lse and the error buffer of a good call untouched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>

#include "favor.h"
#include "test_util.h"
#include "test_views.h"

/* ------------------------------------------------------------------------ */
/* 16-bit conversions (round to nearest even), written for this test         */
/* ------------------------------------------------------------------------ */

static uint32_t mg_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static float mg_float(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static uint16_t mg_to_f16(float f)
{
    uint32_t x = mg_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* 65520 and up: inf */
    if (ax < 0x38800000u) /* below 2^-14: a subnormal, in units of 2^-24 */
        return (uint16_t)(sign | (uint32_t)nearbyint((double)mg_float(ax) * 16777216.0));
    ax -= 0x38000000u; /* exponent bias 127 -> 15 */
    return (uint16_t)(sign | ((ax + 0xfffu + ((ax >> 13) & 1u)) >> 13));
}

static float mg_from_f16(uint16_t h)
{
    unsigned e = (h >> 10) & 31u, m = h & 0x3ffu;
    float f = e == 0 ? ldexpf((float)m, -24)
            : e == 31 ? (m ? (float)NAN : (float)INFINITY)
                      : ldexpf((float)(m | 0x400u), (int)e - 25);
    return (h & 0x8000u) ? -f : f;
}

static uint16_t mg_to_bf16(float f)
{
    uint32_t x = mg_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static float mg_from_bf16(uint16_t h) { return mg_float((uint32_t)h << 16); }

/* x rounded to dtype t and back (fp32: itself) */
static float mg_round(favor_dtype t, float x)
{
    if (t == FAVOR_F16) return mg_from_f16(mg_to_f16(x));
    return t == FAVOR_BF16 ? mg_from_bf16(mg_to_bf16(x)) : x;
}

/* 1 when a and b are the same bits, or both NaN */
static int mg_same(float a, float b) { return (a != a && b != b) || mg_bits(a) == mg_bits(b); }

static const char *mg_tname(favor_dtype t)
{
    return t == FAVOR_F32 ? "f32" : t == FAVOR_F16 ? "f16" : "bf16";
}

/* ------------------------------------------------------------------------ */
/* A packed [batch][heads][rows][cols] buffer of any element type            */
/* ------------------------------------------------------------------------ */

typedef struct {
    favor_tensor t;
    void *mem;
    size_t count;
} mg_buf;

static void mg_make(mg_buf *b, favor_dtype dt, size_t heads, size_t rows, size_t cols)
{
    b->count = heads * rows * cols;
    b->mem = malloc(b->count * favor_dtype_size(dt));
    if (!b->mem) { fprintf(stderr, "out of memory\n"); exit(2); }
    b->t = favor_tensor_packed_as(dt, b->mem, heads, rows, cols);
}

static float mg_get(const mg_buf *b, size_t i)
{
    if (b->t.dtype == FAVOR_F32) return ((const float *)b->mem)[i];
    if (b->t.dtype == FAVOR_F16) return mg_from_f16(((const uint16_t *)b->mem)[i]);
    return mg_from_bf16(((const uint16_t *)b->mem)[i]);
}

static void mg_set(mg_buf *b, size_t i, float x)
{
    if (b->t.dtype == FAVOR_F32) ((float *)b->mem)[i] = x;
    else if (b->t.dtype == FAVOR_F16) ((uint16_t *)b->mem)[i] = mg_to_f16(x);
    else ((uint16_t *)b->mem)[i] = mg_to_bf16(x);
}

/* ------------------------------------------------------------------------ */
/* The float64 softmax, with each row's lse                                  */
/* ------------------------------------------------------------------------ */

/* q [hq][n][d], k [hkv][nk][d], v [hkv][nk][dv] given as fp32 views (batch 1):
 * out [hq][n][dv] and lse [hq][n] in double; keys [k0, k1) only, causal over
 * the whole key range (row i sees j <= i + nk - n) */
static void mg_ref_softmax(const favor_tensor *q, const favor_tensor *k, const favor_tensor *v,
                           int causal, size_t k0, size_t k1, double *out, double *lse)
{
    size_t hq = q->heads, grp = q->heads / k->heads, n = q->rows, nk = k->rows, d = q->cols,
           dv = v->cols, h, i, j, c;
    double s = 1.0 / sqrt((double)d), *sc = (double *)malloc(nk * sizeof *sc);
    if (!sc) exit(2);
    for (h = 0; h < hq; ++h)
        for (i = 0; i < n; ++i) {
            double m = -INFINITY, l = 0.0, *o = out + (h * n + i) * dv;
            size_t hi = k1;
            if (causal && i + nk - n + 1 < hi) hi = i + nk - n + 1;
            for (j = k0; j < hi; ++j) {
                double x = 0.0;
                for (c = 0; c < d; ++c) x += (double)tu_at(q, h, i, c) * tu_at(k, h / grp, j, c);
                sc[j] = s * x;
                if (sc[j] > m) m = sc[j];
            }
            for (c = 0; c < dv; ++c) o[c] = 0.0;
            for (j = k0; j < hi; ++j) {
                double p = exp(sc[j] - m);
                l += p;
                for (c = 0; c < dv; ++c) o[c] += p * tu_at(v, h / grp, j, c);
            }
            for (c = 0; l > 0.0 && c < dv; ++c) o[c] /= l;
            lse[h * n + i] = l > 0.0 ? m + log(l) : -INFINITY;
        }
    free(sc);
}

/* ------------------------------------------------------------------------ */
/* test_merge_splits                                                         */
/* ------------------------------------------------------------------------ */

typedef struct {
    size_t hq, hkv, n, nk, d, dv;
    int causal; /* the full problem's; a split is then prefix (non-causal) + suffix */
    tv_layout lo, lkv;
} mg_case;

static const mg_case split_cases[] = {
    /* hq hkv   n    nk   d  dv causal  out            K, V */
    { 2, 1, 37, 100, 16, 24, 0, TV_PACKED, TV_PACKED },
    { 4, 2, 3, 300, 32, 20, 0, TV_INTERLEAVED, TV_INTERLEAVED }, /* decode path */
    { 1, 1, 1, 700, 8, 8, 0, TV_PADDED, TV_PADDED },             /* blocks of 512 keys */
    { 2, 2, 4, 300, 16, 16, 1, TV_INTERPAD, TV_PACKED },         /* causal decode */
    { 4, 1, 40, 64, 8, 12, 1, TV_PADDED, TV_INTERLEAVED },       /* causal blocked */
};

/* out and lse of favor_softmax_attention over keys [k0, k1) (causal: over the
 * suffix, with the flag; the prefix without it); an empty range gives garbage
 * rows (1e30) and lse -inf, which the merge must ignore */
static void mg_part(const tv_buf *Q, const tv_buf *K, const tv_buf *V, tv_buf *O, float *lse,
                    size_t k0, size_t k1, int causal)
{
    size_t h, i, c, n = Q->t.rows;
    if (k1 == k0) {
        for (h = 0; h < O->t.heads; ++h)
            for (i = 0; i < n; ++i) {
                for (c = 0; c < O->t.cols; ++c)
                    ((float *)O->t.data)[h * O->t.head_stride + i * O->t.row_stride + c] = 1e30f;
                lse[h * n + i] = -INFINITY;
            }
    } else {
        favor_tensor k = tv_rows(&K->t, k0, k1 - k0), v = tv_rows(&V->t, k0, k1 - k0);
        favor_options opt = favor_default_options();
        opt.flags = causal ? FAVOR_CAUSAL : 0;
        opt.lse = lse;
        assert_int_equal(favor_softmax_attention(&Q->t, &k, &v, &O->t, &opt), FAVOR_OK);
    }
}

static double g_err_full, g_err_ref, g_lerr_full, g_lerr_ref; /* worst, relative */

/* O, lse against the full call (F, lf) and the float64 reference (r, lr) */
static void mg_compare(const tv_buf *O, const float *lse, const tv_buf *F, const float *lf,
                       const double *r, const double *lr, double maxv, const char *what)
{
    size_t h, i, c, n = O->t.rows, dv = O->t.cols;
    double ef = 0, er = 0, lef = 0, ler = 0;
    for (h = 0; h < O->t.heads; ++h)
        for (i = 0; i < n; ++i) {
            double sc = fabs(lr[h * n + i]) > 1.0 ? fabs(lr[h * n + i]) : 1.0;
            double a = fabs((double)lse[h * n + i] - lf[h * n + i]) / sc;
            double b = fabs((double)lse[h * n + i] - lr[h * n + i]) / sc;
            if (!(a <= lef)) lef = a;
            if (!(b <= ler)) ler = b;
            for (c = 0; c < dv; ++c) {
                double o = tu_at(&O->t, h, i, c);
                double x = fabs(o - tu_at(&F->t, h, i, c)) / maxv;
                double y = fabs(o - r[(h * n + i) * dv + c]) / maxv;
                if (!(x <= ef)) ef = x;
                if (!(y <= er)) er = y;
            }
        }
    if (ef > g_err_full) g_err_full = ef;
    if (er > g_err_ref) g_err_ref = er;
    if (lef > g_lerr_full) g_lerr_full = lef;
    if (ler > g_lerr_ref) g_lerr_ref = ler;
    if (!(ef <= 2e-6 && er <= 2e-5 && lef <= 2e-6 && ler <= 4e-6))
        fail_msg("%s: out %.3g (full call) %.3g (float64) x max|V|, lse %.3g, %.3g", what, ef, er,
                 lef, ler);
    assert_true(tv_gaps_unchanged(O));
}

static void mg_merge_ok(const tv_buf *A, const float *la, const tv_buf *B, const float *lb,
                        const tv_buf *O, float *lse)
{
    char err[160] = "";
    favor_options opt = favor_default_options();
    favor_status st;
    opt.error = err;
    opt.error_size = sizeof err;
    st = favor_attention_merge(&A->t, la, &B->t, lb, &O->t, lse, &opt);
    if (st != FAVOR_OK) fail_msg("merge: %s (%s)", favor_status_string(st), err);
}

static void test_merge_splits(void **state)
{
    size_t ci;
    (void)state;
    for (ci = 0; ci < sizeof split_cases / sizeof split_cases[0]; ++ci) {
        const mg_case *cs = &split_cases[ci];
        tu_rng rng = {1000 + ci};
        tv_buf Q, K, V, A, B, M, F;
        size_t rows = cs->hq * cs->n, outn = rows * cs->dv, cut[6], nc = 0, si, i;
        float *la = (float *)malloc(rows * sizeof *la), *lb = (float *)malloc(rows * sizeof *lb);
        float *lm = (float *)malloc(rows * sizeof *lm), *lf = (float *)malloc(rows * sizeof *lf);
        double *r = (double *)malloc(outn * sizeof *r), *lr = (double *)malloc(rows * sizeof *lr);
        double maxv;
        favor_options opt = favor_default_options();
        char what[160];
        assert_true(la && lb && lm && lf && r && lr);
        tv_make(&Q, cs->hq, cs->n, cs->d, TV_PACKED, &rng, 1.0);
        tv_make(&K, cs->hkv, cs->nk, cs->d, cs->lkv, &rng, 1.0);
        tv_make(&V, cs->hkv, cs->nk, cs->dv, cs->lkv, &rng, 1.0);
        tv_make(&A, cs->hq, cs->n, cs->dv, cs->lo, &rng, -1.0);
        tv_make(&B, cs->hq, cs->n, cs->dv, cs->lo, &rng, -1.0);
        tv_make(&M, cs->hq, cs->n, cs->dv, cs->lo, &rng, -1.0);
        tv_make(&F, cs->hq, cs->n, cs->dv, cs->lo, &rng, -1.0);
        maxv = tv_max_abs(&V);
        opt.flags = cs->causal ? FAVOR_CAUSAL : 0;
        opt.lse = lf;
        assert_int_equal(favor_softmax_attention(&Q.t, &K.t, &V.t, &F.t, &opt), FAVOR_OK);
        mg_ref_softmax(&Q.t, &K.t, &V.t, cs->causal, 0, cs->nk, r, lr);
        /* the cuts: non-causal anywhere; causal only where the prefix is seen by
         * every row (at most nk - n) */
        cut[nc++] = 0;
        cut[nc++] = 1;
        cut[nc++] = cs->nk / 3;
        cut[nc++] = cs->nk - cs->n;
        if (!cs->causal) {
            cut[nc++] = cs->nk - 1;
            cut[nc++] = cs->nk;
        }
        for (si = 0; si < nc; ++si) {
            size_t s = cut[si];
            tv_reset(&A);
            tv_reset(&B);
            tv_reset(&M);
            mg_part(&Q, &K, &V, &A, la, 0, s, 0);
            mg_part(&Q, &K, &V, &B, lb, s, cs->nk, cs->causal);
            /* half the calls merge b into a, the others a into b */
            if (si % 2) mg_merge_ok(&A, la, &B, lb, &M, lm);
            else mg_merge_ok(&B, lb, &A, la, &M, lm);
            snprintf(what, sizeof what, "case %zu, split at %zu of %zu keys", ci, s, cs->nk);
            mg_compare(&M, lm, &F, lf, r, lr, maxv, what);
            if (s == 0 || s == cs->nk) { /* one side is the full call: its bits */
                for (i = 0; i < M.len; ++i)
                    if (M.mask[i] && !mg_same(M.buf[i], F.buf[i])) fail_msg("%s: not bits", what);
                assert_memory_equal(lm, lf, rows * sizeof *lm);
            }
        }
        /* a cascade: three parts, merged in place into the first */
        if (!cs->causal && cs->nk >= 3) {
            size_t s1 = cs->nk / 4, s2 = cs->nk / 2;
            tv_reset(&A);
            mg_part(&Q, &K, &V, &A, la, 0, s1, 0);
            mg_part(&Q, &K, &V, &B, lb, s1, s2, 0);
            mg_merge_ok(&A, la, &B, lb, &A, la);
            mg_part(&Q, &K, &V, &B, lb, s2, cs->nk, 0);
            mg_merge_ok(&B, lb, &A, la, &A, la);
            snprintf(what, sizeof what, "case %zu, cascade at %zu, %zu", ci, s1, s2);
            mg_compare(&A, la, &F, lf, r, lr, maxv, what);
        }
        tv_free(&Q); tv_free(&K); tv_free(&V); tv_free(&A); tv_free(&B); tv_free(&M); tv_free(&F);
        free(la); free(lb); free(lm); free(lf); free(r); free(lr);
    }
    printf("splits: worst out error %.3g x max|V| against the full call, %.3g against float64; "
           "lse %.3g, %.3g relative\n", g_err_full, g_err_ref, g_lerr_full, g_lerr_ref);
}

/* ------------------------------------------------------------------------ */
/* Random merge inputs with special rows                                     */
/* ------------------------------------------------------------------------ */

/* lse pairs of row r: mostly finite with differences from 0 to 1e3, every
 * 16th row special (-inf on one side or both, +inf, NaN) */
static void mg_lse_pair(tu_rng *g, size_t r, float *la, float *lb)
{
    static const double spread[] = { 0.0, 1e-6, 1e-3, 0.5, 3.0, 17.0, 40.0, 120.0, 1e3 };
    double base = 20.0 * (tu_uniform(g) - 0.5);
    switch (r % 16) {
    case 3: *la = (float)base; *lb = -INFINITY; return;
    case 7: *la = -INFINITY; *lb = (float)base; return;
    case 11: *la = *lb = r % 32 == 11 ? -INFINITY : INFINITY; return;
    case 13: *la = (float)NAN; *lb = (float)base; return;
    case 14: *la = INFINITY; *lb = (float)base; return;
    case 15: *la = (float)base; *lb = r % 32 == 15 ? INFINITY : (float)NAN; return;
    default: {
        double dlt = spread[tu_next(g) % 9] * (tu_uniform(g) + 0.5);
        *la = (float)base;
        *lb = (float)(tu_next(g) % 2 ? base + dlt : base - dlt);
    }
    }
}

/* fills a, b (any types) with N(0,1) values (some rows of one sign, some of
 * mixed sign and larger spread) and la, lb by mg_lse_pair */
static void mg_fill(tu_rng *g, mg_buf *a, mg_buf *b, float *la, float *lb, size_t rows,
                    size_t cols)
{
    size_t r, c;
    for (r = 0; r < rows; ++r) {
        mg_lse_pair(g, r, la + r, lb + r);
        for (c = 0; c < cols; ++c) {
            double x = tu_normal(g), y = tu_normal(g);
            if (r % 5 == 1) { x = fabs(x); y = fabs(y); }
            if (r % 5 == 2) { x *= 1e3; y *= 1e-3; }
            mg_set(a, r * cols + c, (float)x);
            mg_set(b, r * cols + c, (float)y);
        }
    }
}

static float mg_ulp(float x)
{
    float a = fabsf(x);
    if (!(a < FLT_MAX)) return 0.0f;
    return nextafterf(a, INFINITY) - a;
}

/* ------------------------------------------------------------------------ */
/* test_merge_accuracy                                                       */
/* ------------------------------------------------------------------------ */

static void test_merge_accuracy(void **state)
{
    enum { H = 3, N = 64, C = 37 };
    tu_rng g = {77};
    mg_buf A, B, O;
    float la[H * N], lb[H * N], lo[H * N];
    size_t r, c;
    double worst = 0.0, lworst = 0.0;
    (void)state;
    mg_make(&A, FAVOR_F32, H, N, C);
    mg_make(&B, FAVOR_F32, H, N, C);
    mg_make(&O, FAVOR_F32, H, N, C);
    mg_fill(&g, &A, &B, la, lb, H * N, C);
    assert_int_equal(favor_attention_merge(&A.t, la, &B.t, lb, &O.t, lo, NULL), FAVOR_OK);
    for (r = 0; r < H * N; ++r) {
        const float *a = (const float *)A.mem + r * C, *b = (const float *)B.mem + r * C;
        const float *o = (const float *)O.mem + r * C;
        float x = la[r], y = lb[r];
        if (x != x || y != y) { /* NaN: NaN everywhere */
            assert_true(lo[r] != lo[r]);
            for (c = 0; c < C; ++c) assert_true(o[c] != o[c]);
        } else if (x == -INFINITY && y == -INFINITY) { /* no key: zeros, -inf */
            assert_true(lo[r] == -INFINITY);
            for (c = 0; c < C; ++c) assert_true(mg_bits(o[c]) == 0u);
        } else if (x == INFINITY && y == INFINITY) {
            assert_true(lo[r] == INFINITY);
            for (c = 0; c < C; ++c) assert_true(o[c] != o[c]);
        } else if (y == -INFINITY || x == INFINITY) { /* a alone: its bits */
            assert_true(mg_same(lo[r], x));
            assert_memory_equal(o, a, C * sizeof *o);
        } else if (x == -INFINITY || y == INFINITY) {
            assert_true(mg_same(lo[r], y));
            assert_memory_equal(o, b, C * sizeof *o);
        } else {
            long double M = x > y ? x : y, wa = expl((long double)x - M),
                        wb = expl((long double)y - M), s = wa + wb;
            long double L = M + logl(s);
            double e = fabs((double)((long double)lo[r] - L)) / mg_ulp((float)L);
            if (e > lworst) lworst = e;
            if (!(e <= 1.0)) fail_msg("row %zu: lse %.9g, long double %.12Lg", r, lo[r], L);
            for (c = 0; c < C; ++c) {
                long double ref = (wa * a[c] + wb * b[c]) / s;
                double big = fabsf(a[c]) > fabsf(b[c]) ? fabsf(a[c]) : fabsf(b[c]);
                double tol = mg_ulp((float)ref) + ldexp(big, -50);
                double err = fabs((double)((long double)o[c] - ref));
                if (err / tol > worst) worst = err / tol;
                if (!(err <= tol))
                    fail_msg("row %zu col %zu: %.9g, long double %.12Lg (lse %g, %g)", r, c, o[c],
                             ref, x, y);
            }
        }
    }
    printf("accuracy: worst out error %.3f of its bound (1 ULP + 2^-50 max(|a|, |b|)), lse %.3f "
           "ULP\n", worst, lworst);
    free(A.mem); free(B.mem); free(O.mem);
}

/* ------------------------------------------------------------------------ */
/* test_merge_dtypes                                                         */
/* ------------------------------------------------------------------------ */

static void test_merge_dtypes(void **state)
{
    enum { H = 2, N = 20, C = 300 };
    static const favor_dtype ts[3] = { FAVOR_F32, FAVOR_F16, FAVOR_BF16 };
    size_t ia, ib, io, i, r;
    (void)state;
    for (ia = 0; ia < 3; ++ia)
        for (ib = 0; ib < 3; ++ib)
            for (io = 0; io < 3; ++io) {
                tu_rng g = {500 + 9 * ia + 3 * ib + io};
                mg_buf A, B, O, A32, B32, O32;
                float la[H * N], lb[H * N], lo[H * N], l32[H * N];
                mg_make(&A, ts[ia], H, N, C);
                mg_make(&B, ts[ib], H, N, C);
                mg_make(&O, ts[io], H, N, C);
                mg_make(&A32, FAVOR_F32, H, N, C);
                mg_make(&B32, FAVOR_F32, H, N, C);
                mg_make(&O32, FAVOR_F32, H, N, C);
                mg_fill(&g, &A, &B, la, lb, H * N, C);
                for (i = 0; i < A.count; ++i) { /* the fp32 copies of the values */
                    mg_set(&A32, i, mg_get(&A, i));
                    mg_set(&B32, i, mg_get(&B, i));
                }
                assert_int_equal(favor_attention_merge(&A.t, la, &B.t, lb, &O.t, lo, NULL),
                                 FAVOR_OK);
                assert_int_equal(
                    favor_attention_merge(&A32.t, la, &B32.t, lb, &O32.t, l32, NULL), FAVOR_OK);
                for (i = 0; i < H * N; ++i) assert_true(mg_same(lo[i], l32[i]));
                for (i = 0; i < O.count; ++i) {
                    float want = mg_round(ts[io], mg_get(&O32, i));
                    if (!mg_same(mg_get(&O, i), want))
                        fail_msg("a %s, b %s, out %s: element %zu is %.9g, want %.9g",
                                 mg_tname(ts[ia]), mg_tname(ts[ib]), mg_tname(ts[io]), i,
                                 mg_get(&O, i), want);
                }
                /* one side -inf: the other side's element bits, when types agree */
                for (r = 0; r < H * N; ++r) {
                    const mg_buf *src = lb[r] == -INFINITY && la[r] == la[r] && la[r] != -INFINITY
                                            ? &A
                                        : la[r] == -INFINITY && lb[r] == lb[r] && lb[r] != -INFINITY
                                            ? &B
                                            : NULL;
                    size_t es = favor_dtype_size(ts[io]);
                    if (!src || src->t.dtype != ts[io]) continue;
                    assert_memory_equal((const char *)O.mem + r * C * es,
                                        (const char *)src->mem + r * C * es, C * es);
                }
                free(A.mem); free(B.mem); free(O.mem);
                free(A32.mem); free(B32.mem); free(O32.mem);
            }
}

/* ------------------------------------------------------------------------ */
/* test_merge_in_place                                                       */
/* ------------------------------------------------------------------------ */

static void test_merge_in_place(void **state)
{
    enum { H = 3, N = 33, C = 40 };
    static const favor_dtype ts[2] = { FAVOR_F32, FAVOR_F16 };
    size_t ti, side, r;
    (void)state;
    for (ti = 0; ti < 2; ++ti)
        for (side = 0; side < 2; ++side) {
            tu_rng g = {900 + ti};
            mg_buf A, B, O, X;
            float la[H * N], lb[H * N], lo[H * N], lx[H * N];
            size_t es = favor_dtype_size(ts[ti]);
            favor_tensor view;
            mg_make(&A, ts[ti], H, N, C);
            mg_make(&B, ts[ti], H, N, C);
            mg_make(&O, ts[ti], H, N, C);
            mg_make(&X, ts[ti], H, N, C);
            mg_fill(&g, &A, &B, la, lb, H * N, C);
            assert_int_equal(favor_attention_merge(&A.t, la, &B.t, lb, &O.t, lo, NULL), FAVOR_OK);
            /* X holds the side merged into; its view is a separate struct, equal */
            memcpy(X.mem, side ? B.mem : A.mem, A.count * es);
            memcpy(lx, side ? lb : la, sizeof lx);
            view = X.t;
            if (side)
                assert_int_equal(favor_attention_merge(&A.t, la, &X.t, lx, &view, lx, NULL),
                                 FAVOR_OK);
            else
                assert_int_equal(favor_attention_merge(&X.t, lx, &B.t, lb, &view, lx, NULL),
                                 FAVOR_OK);
            assert_memory_equal(X.mem, O.mem, A.count * es);
            for (r = 0; r < H * N; ++r) assert_true(mg_same(lx[r], lo[r]));
            free(A.mem); free(B.mem); free(O.mem); free(X.mem);
        }
    { /* a result merged with itself, in place: the same rows, lse + log 2 */
        tu_rng g = {901};
        mg_buf A, B;
        float la[H * N], lb[H * N], l2[H * N];
        size_t i;
        mg_make(&A, FAVOR_F32, H, N, C);
        mg_make(&B, FAVOR_F32, H, N, C);
        mg_fill(&g, &A, &B, la, lb, H * N, C);
        memcpy(B.mem, A.mem, A.count * sizeof(float));
        memcpy(l2, la, sizeof l2);
        assert_int_equal(favor_attention_merge(&A.t, la, &A.t, la, &A.t, la, NULL), FAVOR_OK);
        for (i = 0; i < H * N; ++i) {
            if (l2[i] != l2[i] || l2[i] == INFINITY || l2[i] == -INFINITY) continue;
            assert_true(fabs(la[i] - (l2[i] + log(2.0))) <= mg_ulp(la[i]));
            assert_memory_equal((float *)A.mem + i * C, (float *)B.mem + i * C, C * sizeof(float));
        }
        free(A.mem); free(B.mem);
    }
}

/* ------------------------------------------------------------------------ */
/* test_merge_batched                                                        */
/* ------------------------------------------------------------------------ */

static void test_merge_batched(void **state)
{
    enum { BT = 3, H = 2, N = 20, NK = 50, D = 8, DV = 12, S = 18 };
    tu_rng g = {4242};
    float *q = tu_normal_floats(&g, BT * H * N * D, 1.0);
    float *k = tu_normal_floats(&g, BT * H * NK * D, 1.0);
    float *v = tu_normal_floats(&g, BT * H * NK * DV, 1.0);
    float *oa = (float *)malloc(BT * N * H * DV * sizeof(float));
    float *ob = (float *)malloc(BT * N * H * DV * sizeof(float));
    float *om = (float *)malloc(BT * N * H * DV * sizeof(float));
    float *of = (float *)malloc(BT * N * H * DV * sizeof(float));
    float *ou = (float *)malloc(N * H * DV * sizeof(float));
    float la[BT * H * N], lb[BT * H * N], lm[BT * H * N], lf[BT * H * N], lu[H * N];
    favor_tensor Q = favor_tensor_batched(FAVOR_F32, q, BT, H, N, D);
    favor_tensor K = favor_tensor_batched(FAVOR_F32, k, BT, H, NK, D);
    favor_tensor V = favor_tensor_batched(FAVOR_F32, v, BT, H, NK, DV);
    favor_tensor Ka = K, Kb = K, Va = V, Vb = V, Oa, Ob, Om, Of;
    favor_options opt = favor_default_options();
    size_t b, h, i, c;
    double maxv = tu_max_abs_f(v, BT * H * NK * DV), worst = 0.0;
    (void)state;
    assert_true(oa && ob && om && of && ou);
    /* outputs [B][T][H*DV]: the batch stride of a packed view, heads interleaved */
    Oa = favor_tensor_batched(FAVOR_F32, oa, BT, H, N, DV);
    Oa.head_stride = DV;
    Oa.row_stride = H * DV;
    Ob = Oa; Ob.data = ob;
    Om = Oa; Om.data = om;
    Of = Oa; Of.data = of;
    Ka.rows = Va.rows = S;
    Kb.rows = Vb.rows = NK - S;
    Kb.data = k + S * D;
    Vb.data = v + S * DV;
    opt.lse = la;
    assert_int_equal(favor_softmax_attention(&Q, &Ka, &Va, &Oa, &opt), FAVOR_OK);
    opt.lse = lb;
    assert_int_equal(favor_softmax_attention(&Q, &Kb, &Vb, &Ob, &opt), FAVOR_OK);
    opt.lse = lf;
    assert_int_equal(favor_softmax_attention(&Q, &K, &V, &Of, &opt), FAVOR_OK);
    assert_int_equal(favor_attention_merge(&Oa, la, &Ob, lb, &Om, lm, NULL), FAVOR_OK);
    for (i = 0; i < BT * N * H * DV; ++i) {
        double e = fabs((double)om[i] - of[i]) / maxv;
        if (e > worst) worst = e;
    }
    for (i = 0; i < BT * H * N; ++i)
        assert_true(fabs((double)lm[i] - lf[i]) <= 2e-6 * (fabs(lf[i]) > 1 ? fabs(lf[i]) : 1));
    if (!(worst <= 2e-6)) fail_msg("batched: %.3g x max|V| from the full call", worst);
    for (b = 0; b < BT; ++b) { /* each batch element alone: the same bits */
        favor_tensor A1 = Oa, B1 = Ob, U = favor_tensor_packed(ou, H, N, DV);
        A1.batch = B1.batch = 0;
        A1.data = oa + b * Oa.batch_stride;
        B1.data = ob + b * Ob.batch_stride;
        assert_int_equal(
            favor_attention_merge(&A1, la + b * H * N, &B1, lb + b * H * N, &U, lu, NULL),
            FAVOR_OK);
        assert_memory_equal(lu, lm + b * H * N, sizeof lu);
        for (h = 0; h < H; ++h)
            for (i = 0; i < N; ++i)
                for (c = 0; c < DV; ++c)
                    assert_true(mg_same(ou[(h * N + i) * DV + c],
                                        om[b * Om.batch_stride + i * Om.row_stride + h * DV + c]));
    }
    free(q); free(k); free(v); free(oa); free(ob); free(om); free(of); free(ou);
}

/* ------------------------------------------------------------------------ */
/* test_merge_threads                                                        */
/* ------------------------------------------------------------------------ */

static void test_merge_threads(void **state)
{
    enum { H = 8, N = 128, C = 64 }; /* 65536 elements: the threaded size */
    static const int nts[4] = { 1, 2, 3, 0 };
    static const favor_dtype ts[2] = { FAVOR_F32, FAVOR_BF16 };
    size_t ti, t;
    (void)state;
    for (ti = 0; ti < 2; ++ti) {
        tu_rng g = {31337};
        mg_buf A, B, O, O1;
        float la[H * N], lb[H * N], lo[H * N], l1[H * N];
        size_t es = favor_dtype_size(ts[ti]);
        mg_make(&A, FAVOR_F32, H, N, C);
        mg_make(&B, FAVOR_F16, H, N, C);
        mg_make(&O, ts[ti], H, N, C);
        mg_make(&O1, ts[ti], H, N, C);
        mg_fill(&g, &A, &B, la, lb, H * N, C);
        for (t = 0; t < 4; ++t) {
            favor_options opt = favor_default_options();
            opt.threads = nts[t];
            memset(O.mem, 0, O.count * es);
            assert_int_equal(favor_attention_merge(&A.t, la, &B.t, lb, &O.t, lo, &opt), FAVOR_OK);
            if (t == 0) {
                memcpy(O1.mem, O.mem, O.count * es);
                memcpy(l1, lo, sizeof l1);
            } else {
                assert_memory_equal(O.mem, O1.mem, O.count * es);
                assert_memory_equal(lo, l1, sizeof lo);
            }
        }
        free(A.mem); free(B.mem); free(O.mem); free(O1.mem);
    }
}

/* ------------------------------------------------------------------------ */
/* test_merge_validation                                                     */
/* ------------------------------------------------------------------------ */

enum { VH = 2, VN = 4, VC = 5, VROWS = VH * VN, VELEMS = VH * VN * VC };

/* one buffer for everything, so overlaps can be made */
static float varena[8 * VELEMS];
static float vsnap[8 * VELEMS];
#define VA (varena)
#define VB (varena + VELEMS)
#define VO (varena + 2 * VELEMS)
#define VLA (varena + 3 * VELEMS)
#define VLB (varena + 3 * VELEMS + VROWS)
#define VL (varena + 3 * VELEMS + 2 * VROWS)

static void v_reset(void)
{
    tu_rng g = {5};
    size_t i;
    for (i = 0; i < 3 * VELEMS; ++i) varena[i] = (float)tu_normal(&g);
    for (i = 0; i < VROWS; ++i) {
        VLA[i] = (float)tu_normal(&g);
        VLB[i] = (float)tu_normal(&g);
    }
    memset(VO, 0xA5, VELEMS * sizeof(float)); /* canaries: out and lse */
    memset(VL, 0xA5, VROWS * sizeof(float));
}

/* a refused call: its status, text, and every byte of the arena as it was */
static void v_expect(const favor_tensor *a, const float *la, const favor_tensor *b,
                     const float *lb, const favor_tensor *o, float *l, int threads,
                     favor_status want, const char *text)
{
    char err[200];
    favor_options opt = favor_default_options();
    favor_status st;
    opt.threads = threads;
    opt.error = err;
    opt.error_size = sizeof err;
    strcpy(err, "(untouched)");
    memcpy(vsnap, varena, sizeof varena);
    st = favor_attention_merge(a, la, b, lb, o, l, &opt);
    if (st != want)
        fail_msg("want %s, got %s (%s) [%s]", favor_status_string(want), favor_status_string(st),
                 err, text);
    if (!strstr(err, text)) fail_msg("text \"%s\" lacks \"%s\"", err, text);
    assert_memory_equal(vsnap, varena, sizeof varena);
    if (threads >= 0) { /* the same without opts */
        assert_int_equal(favor_attention_merge(a, la, b, lb, o, l, NULL), want);
        assert_memory_equal(vsnap, varena, sizeof varena);
    }
}

static void test_merge_validation(void **state)
{
    favor_tensor A = favor_tensor_packed(VA, VH, VN, VC), B = favor_tensor_packed(VB, VH, VN, VC);
    favor_tensor O = favor_tensor_packed(VO, VH, VN, VC), X;
    favor_options opt = favor_default_options();
    char err[64] = "(untouched)";
    (void)state;
    v_reset();
    /* a good call: opts' other fields are not read, the error text not touched */
    opt.flags = 0xffu;
    opt.scale = (float)NAN;
    opt.error = err;
    opt.error_size = sizeof err;
    assert_int_equal(favor_attention_merge(&A, VLA, &B, VLB, &O, VL, &opt), FAVOR_OK);
    assert_string_equal(err, "(untouched)");
    assert_int_equal(favor_attention_merge(&A, VLA, &B, VLB, &O, NULL, NULL), FAVOR_OK);
    v_reset();

    v_expect(NULL, VLA, &B, VLB, &O, VL, 0, FAVOR_E_NULL, "out_a is NULL");
    v_expect(&A, NULL, &B, VLB, &O, VL, 0, FAVOR_E_NULL, "lse_a is NULL");
    v_expect(&A, VLA, NULL, VLB, &O, VL, 0, FAVOR_E_NULL, "out_b is NULL");
    v_expect(&A, VLA, &B, NULL, &O, VL, 0, FAVOR_E_NULL, "lse_b is NULL");
    v_expect(&A, VLA, &B, VLB, NULL, VL, 0, FAVOR_E_NULL, "out is NULL");
    v_expect(&A, VLA, &B, VLB, &O, VL, -1, FAVOR_E_ARG, "threads is negative");
    X = A; X.data = NULL;
    v_expect(&X, VLA, &B, VLB, &O, VL, 0, FAVOR_E_NULL, "out_a: data is NULL");
    X = B; X.dtype = (favor_dtype)7;
    v_expect(&A, VLA, &X, VLB, &O, VL, 0, FAVOR_E_ARG, "out_b: dtype 7");
    X = O; X.row_stride = VC - 1;
    v_expect(&A, VLA, &B, VLB, &X, VL, 0, FAVOR_E_SHAPE, "out: row_stride 4 is below cols 5");
    X = A; X.rows = 0;
    v_expect(&X, VLA, &B, VLB, &O, VL, 0, FAVOR_E_SHAPE, "out_a: heads 2, rows 0");
    X = A; X.row_stride = SIZE_MAX / 2;
    v_expect(&X, VLA, &B, VLB, &O, VL, 0, FAVOR_E_OVERFLOW, "out_a: ");
    X = favor_tensor_packed(VB, VH, VN - 1, VC);
    v_expect(&A, VLA, &X, VLB, &O, VL, 0, FAVOR_E_SHAPE, "out_b: rows is 3, out_a's is 4");
    X = favor_tensor_packed(VB, 1, VN, VC);
    v_expect(&A, VLA, &X, VLB, &O, VL, 0, FAVOR_E_SHAPE, "out_b: heads is 1, out_a's is 2");
    X = favor_tensor_packed(VO, VH, VN, VC - 1);
    v_expect(&A, VLA, &B, VLB, &X, VL, 0, FAVOR_E_SHAPE, "out: cols is 4, out_a's is 5");
    X = favor_tensor_batched(FAVOR_F32, VO, 2, 1, VN, VC);
    v_expect(&A, VLA, &B, VLB, &X, VL, 0, FAVOR_E_SHAPE, "out: batch is 2, out_a's is 1");
    /* aliasing: out partly over out_a, or the same bytes as another type */
    X = favor_tensor_packed(VA + VC, VH, VN, VC);
    v_expect(&A, VLA, &B, VLB, &X, VL, 0, FAVOR_E_ALIAS, "out overlaps out_a");
    X = favor_tensor_packed_as(FAVOR_F16, VA, VH, VN, VC);
    v_expect(&A, VLA, &B, VLB, &X, VL, 0, FAVOR_E_ALIAS, "out overlaps out_a");
    X = A; X.row_stride = VC + 1; X.head_stride = VN * (VC + 1); X.rows = VN - 1;
    {
        favor_tensor A3 = A, B3 = B;
        A3.rows = B3.rows = VN - 1;
        v_expect(&A3, VLA, &B3, VLB, &X, VL, 0, FAVOR_E_ALIAS,
                 "out overlaps out_a and is not the same view");
    }
    /* out the very view out_a is, while out_b overlaps out_a elsewhere */
    X = favor_tensor_packed(VA + VC, VH, VN, VC);
    v_expect(&A, VLA, &X, VLB, &A, VLA, 0, FAVOR_E_ALIAS, "out overlaps out_b");
    X = favor_tensor_packed(VLA - VC, 1, 2, VC); /* out over lse_a */
    {
        favor_tensor A2 = favor_tensor_packed(VA, 1, 2, VC), B2 = favor_tensor_packed(VB, 1, 2, VC);
        v_expect(&A2, VLA, &B2, VLB, &X, VL, 0, FAVOR_E_ALIAS, "out overlaps lse_a");
        v_expect(&A2, VLB, &B2, VLA, &X, VL, 0, FAVOR_E_ALIAS, "out overlaps lse_b");
    }
    v_expect(&A, VLA, &B, VLB, &O, VLA + 1, 0, FAVOR_E_ALIAS,
             "lse overlaps lse_a and is not the same pointer");
    v_expect(&A, VLA, &B, VLB, &O, VLB + 1, 0, FAVOR_E_ALIAS, "lse overlaps lse_b");
    v_expect(&A, VLA, &B, VLB, &O, VO + 3, 0, FAVOR_E_ALIAS, "lse overlaps out");
    v_expect(&A, VLA, &B, VLB, &O, VA + VELEMS - 2, 0, FAVOR_E_ALIAS, "lse overlaps out_a");
    v_expect(&A, VLA, &B, VLB, &O, VB, 0, FAVOR_E_ALIAS, "lse overlaps out_b");
    /* lse the very pointer lse_a is, while lse_a lies over out_a: refused */
    {
        favor_tensor A2 = favor_tensor_packed(VA, 1, 1, VC), B2 = favor_tensor_packed(VB, 1, 1, VC),
                     O2 = favor_tensor_packed(VO, 1, 1, VC);
        v_expect(&A2, VA + 1, &B2, VLB, &O2, VA + 1, 0, FAVOR_E_ALIAS, "lse overlaps out_a");
        /* inputs may overlap each other: lse_a inside out_a, out_b over out_a */
        v_reset();
        assert_int_equal(favor_attention_merge(&A2, VA + 1, &A2, VA + 2, &O2, VL, NULL), FAVOR_OK);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_splits),
        cmocka_unit_test(test_merge_accuracy),
        cmocka_unit_test(test_merge_dtypes),
        cmocka_unit_test(test_merge_in_place),
        cmocka_unit_test(test_merge_batched),
        cmocka_unit_test(test_merge_threads),
        cmocka_unit_test(test_merge_validation),
    };
    if (tu_check_backend() != 0) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
