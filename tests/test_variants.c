/* Score variants of exact softmax attention (favor_options: FAVOR_WINDOW with
 * window_left/right, softcap, alibi, sinks and dsinks) against the float64
 * reference of tests/reference.c (ref_softmax_mods), which applies each one
 * explicitly on the full score matrix.
 *
 * 1. Forward, prefill and decode paths (n <= 32 rows: the direct path with at
 *    most 2 rows per key/value head, or 4 read at once, and the shared-tile
 *    path), every variant
 *    alone and in the combinations models use (GPT-OSS: window + sinks; Gemma 2:
 *    softcap + window; with ALiBi), rows that see no key, windows with one side
 *    unbounded and a window of one key: max |O - O_ref| <= 2e-5 max|V|, lse
 *    within 1e-5 (1 + |lse|).
 * 2. Backward, with and without the forward's lse: dq, dk, dv within 1e-4 of
 *    the largest reference gradient, dsinks within 1e-4 of the largest |dsink|;
 *    the reference's own gradients (dsinks, and dq, dk through softcap and ALiBi)
 *    against central finite differences of its forward.
 * 3. Keys that no row sees are never read: NaN in them changes no output bit,
 *    forward (prefill, decode) and backward (their dk, dv rows are exactly 0).
 * 4. No future leakage: changing key j leaves every row that cannot see it
 *    bit for bit the same, with window, ALiBi, softcap and sinks, and with a
 *    mask that hides the later keys (prefill and decode); packed sequences:
 *    the packed call gives each sequence's own call's bits (below).
 * 5. 16-bit inputs give the bits of fp32 copies; threads 1, 2, 3 give the same
 *    bits (the split backward included); a batched call gives each element's
 *    bits, and dsinks is the sum over the batch.
 * 6. Validation: bad values are refused before anything is written, with the
 *    argument named; linear attention refuses every variant. */
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

#include "favor.h"
#include "reference.h"
#include "test_util.h"

typedef struct {
    size_t hq, hkv, n, nk, d, dv;
    int causal;
    long left, right; /* window sides; both -2: no FAVOR_WINDOW */
    float cap;
    int alibi, sinks;
    double sigma;     /* of the inputs */
} vcase;

#define NOWIN -2, -2

static const vcase cases[] = {
    /* hq hkv   n    nk   d  dv  causal window     cap   alibi sinks sigma */
    { 4, 2, 150,  150, 32, 16, 0,  20,  10,      0.0f, 0, 0, 1.0 }, /* window, both sides */
    { 4, 2, 200,  260, 32, 32, 1,  40,  -1,      3.0f, 1, 1, 2.0 }, /* all of them, causal */
    { 2, 1, 100,   70, 16, 24, 0,  NOWIN,        2.0f, 0, 0, 2.0 }, /* softcap alone */
    { 2, 2,  90,  130, 16, 16, 0,  NOWIN,        0.0f, 1, 0, 1.0 }, /* ALiBi, both sides */
    { 2, 1, 130,  100, 16,  8, 1,  NOWIN,        0.0f, 0, 1, 1.0 }, /* sinks, rows with no key */
    { 8, 2,   1, 1500, 64, 64, 1, 300,  -1,      5.0f, 0, 1, 1.0 }, /* decode, shared tiles */
    { 2, 1,   1, 1200, 32, 32, 1, 600,  -1,      0.0f, 1, 0, 1.0 }, /* decode, direct */
    { 4, 4,   5,  700, 16, 16, 0, 100,   3,      0.0f, 1, 1, 1.0 }, /* decode, partial tiles */
    { 8, 1,   4,  700, 32, 32, 1, 200,  -1,      4.0f, 0, 1, 1.0 }, /* decode, 32 rows
                                                                         key-major */
    /* decode, four causal rows per head at d = 64 with sinks (favor__rows_as on
     * AVX2 and AVX-512): the window's first block goes by tiles (the rows start at
     * different keys), the last block's keys that all rows see in one call and its
     * last three by tiles */
    { 4, 4,   4, 1300, 64, 64, 1, 700,  -1,      0.0f, 0, 1, 1.0 },
    { 2, 2,   1, 1300, 64, 64, 1, 700,  -1,      0.0f, 0, 1, 1.0 }, /* the same, one row:
                                                                         from the window's start */
    /* decode, softcap and ALiBi in favor__rows_as: 6 rows per head (3 query heads
     * by two causal positions: groups of four and two, whose heads and positions
     * differ) at d = 64, and two rows at d = 128 (AVX-512), past the 512-key
     * blocks */
    { 6, 2,   2, 1300, 64, 64, 1,  NOWIN,        2.0f, 1, 0, 1.0 },
    { 2, 1,   1,  900, 128, 128, 1, NOWIN,       3.0f, 1, 1, 1.0 },
    { 1, 1,  80,   50,  8,  8, 0,   2,   0,      0.0f, 0, 1, 1.0 }, /* right 0, rows with none */
    { 2, 1,  70,   70, 16, 16, 1,   0,  -1,      1.0f, 1, 0, 1.0 }, /* a window of one key */
    { 2, 2,  40,   40, 16, 16, 0,  -1,  -1,      0.0f, 0, 0, 1.0 }, /* unbounded both sides */
    { 4, 1,  70,  300, 16, 16, 0,  -1,  25,      0.5f, 1, 1, 3.0 }, /* right side only */
};
#define NCASES (sizeof cases / sizeof cases[0])

typedef struct {
    float *q, *k, *v, *g, *alibi, *sinks;
    favor_tensor Q, K, V, O, G, DQ, DK, DV;
    float *o, *dq, *dk, *dv, *lse, *dsinks;
} prob;

static float *vt_alloc(size_t n) { return (float *)calloc(n ? n : 1, sizeof(float)); }

static void prob_make(prob *p, const vcase *c, uint64_t seed)
{
    tu_rng r;
    size_t h;
    r.s = seed;
    p->q = tu_normal_floats(&r, c->hq * c->n * c->d, c->sigma);
    p->k = tu_normal_floats(&r, c->hkv * c->nk * c->d, c->sigma);
    p->v = tu_normal_floats(&r, c->hkv * c->nk * c->dv, 1.0);
    p->g = tu_normal_floats(&r, c->hq * c->n * c->dv, 1.0);
    p->alibi = vt_alloc(c->hq);
    p->sinks = vt_alloc(c->hq);
    for (h = 0; h < c->hq; ++h) {
        p->alibi[h] = (float)(0.02 + 0.3 * tu_uniform(&r));
        p->sinks[h] = (float)(-1.0 + 4.0 * tu_uniform(&r));
    }
    p->o = vt_alloc(c->hq * c->n * c->dv);
    p->dq = vt_alloc(c->hq * c->n * c->d);
    p->dk = vt_alloc(c->hkv * c->nk * c->d);
    p->dv = vt_alloc(c->hkv * c->nk * c->dv);
    p->lse = vt_alloc(c->hq * c->n);
    p->dsinks = vt_alloc(c->hq);
    p->Q = favor_tensor_packed(p->q, c->hq, c->n, c->d);
    p->K = favor_tensor_packed(p->k, c->hkv, c->nk, c->d);
    p->V = favor_tensor_packed(p->v, c->hkv, c->nk, c->dv);
    p->O = favor_tensor_packed(p->o, c->hq, c->n, c->dv);
    p->G = favor_tensor_packed(p->g, c->hq, c->n, c->dv);
    p->DQ = favor_tensor_packed(p->dq, c->hq, c->n, c->d);
    p->DK = favor_tensor_packed(p->dk, c->hkv, c->nk, c->d);
    p->DV = favor_tensor_packed(p->dv, c->hkv, c->nk, c->dv);
}

static void prob_free(prob *p)
{
    float *all[12];
    size_t i;
    all[0] = p->q; all[1] = p->k; all[2] = p->v; all[3] = p->g; all[4] = p->alibi;
    all[5] = p->sinks; all[6] = p->o; all[7] = p->dq; all[8] = p->dk; all[9] = p->dv;
    all[10] = p->lse; all[11] = p->dsinks;
    for (i = 0; i < 12; ++i) free(all[i]);
}

static favor_options opts_of(const vcase *c, const prob *p, int threads)
{
    favor_options o = favor_default_options();
    o.flags = c->causal ? FAVOR_CAUSAL : 0u;
    if (c->left != -2) {
        o.flags |= FAVOR_WINDOW;
        o.window_left = c->left;
        o.window_right = c->right;
    }
    o.softcap = c->cap;
    o.alibi = c->alibi ? p->alibi : NULL;
    o.sinks = c->sinks ? p->sinks : NULL;
    o.threads = threads;
    return o;
}

static ref_mods mods_of(const vcase *c, const prob *p)
{
    ref_mods m;
    m.causal = c->causal;
    m.left = c->left == -2 ? -1 : c->left;
    m.right = c->left == -2 ? -1 : c->right;
    m.softcap = c->cap;
    m.alibi = c->alibi ? p->alibi : NULL;
    m.sinks = c->sinks ? p->sinks : NULL;
    m.mask = NULL;
    m.mask_heads = 1;
    m.seqs = 0;
    m.seq_q = m.seq_k = NULL;
    return m;
}

static void case_name(const vcase *c, char *buf, size_t size)
{
    snprintf(buf, size, "hq %zu hkv %zu n %zu nk %zu d %zu dv %zu%s window %ld,%ld cap %g%s%s",
             c->hq, c->hkv, c->n, c->nk, c->d, c->dv, c->causal ? " causal" : "", c->left,
             c->right, (double)c->cap, c->alibi ? " alibi" : "", c->sinks ? " sinks" : "");
}

static double max_abs_err(const float *x, const double *ref, size_t n)
{
    double e = 0;
    size_t i;
    for (i = 0; i < n; ++i) {
        double t = fabs((double)x[i] - ref[i]);
        if (!(t <= e)) e = t; /* NaN counts */
    }
    return e;
}

static double max_abs_d(const double *x, size_t n)
{
    double m = 0;
    size_t i;
    for (i = 0; i < n; ++i) if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

/* 1 and 2: every case against the reference, forward then backward */
static void test_accuracy(void **state)
{
    size_t ci;
    int fails = 0;
    (void)state;
    for (ci = 0; ci < NCASES; ++ci) {
        const vcase *c = &cases[ci];
        prob p;
        favor_options o;
        ref_mods m;
        char name[256];
        size_t no = c->hq * c->n * c->dv, i;
        double *qd, *kd, *vd, *gd, *ro, *rl, *rq, *rk, *rv, *rs, eo, el = 0, eq, ek, ev, es = 0;
        double gmax;
        int pass;
        prob_make(&p, c, 1000 + ci);
        case_name(c, name, sizeof name);
        qd = tu_to_double(p.q, c->hq * c->n * c->d);
        kd = tu_to_double(p.k, c->hkv * c->nk * c->d);
        vd = tu_to_double(p.v, c->hkv * c->nk * c->dv);
        gd = tu_to_double(p.g, no);
        ro = (double *)malloc(no * sizeof *ro);
        rl = (double *)malloc(c->hq * c->n * sizeof *rl);
        rq = (double *)malloc(c->hq * c->n * c->d * sizeof *rq);
        rk = (double *)malloc(c->hkv * c->nk * c->d * sizeof *rk);
        rv = (double *)malloc(c->hkv * c->nk * c->dv * sizeof *rv);
        rs = (double *)malloc(c->hq * sizeof *rs);
        m = mods_of(c, &p);
        ref_softmax_mods(qd, kd, vd, ro, rl, c->hq, c->hkv, c->n, c->nk, c->d, c->dv, 0, &m);
        ref_softmax_mods_backward(qd, kd, vd, gd, rq, rk, rv, rs, c->hq, c->hkv, c->n, c->nk,
                                  c->d, c->dv, 0, &m);
        o = opts_of(c, &p, 1);
        o.lse = p.lse;
        o.dsinks = c->sinks ? p.dsinks : NULL;
        assert_int_equal(favor_softmax_attention(&p.Q, &p.K, &p.V, &p.O, &o), FAVOR_OK);
        eo = max_abs_err(p.o, ro, no) / tu_max_abs_f(p.v, c->hkv * c->nk * c->dv);
        for (i = 0; i < c->hq * c->n; ++i) {
            double t = rl[i] == -HUGE_VAL ? (p.lse[i] == -HUGE_VAL ? 0 : 1)
                                          : fabs(p.lse[i] - rl[i]) / (1e-5 * (1 + fabs(rl[i])));
            if (!(t <= el)) el = t;
        }
        pass = eo <= 2e-5 && el <= 1;
        printf("%-2zu %s\n   forward: max|err|/max|V| %.2g  lse err/tol %.3f\n", ci, name, eo, el);
        /* backward from the forward's lse, then recomputing it: the same bounds */
        {
            int with;
            for (with = 1; with >= 0; --with) {
                o.lse = with ? p.lse : NULL;
                assert_int_equal(favor_softmax_attention_backward(&p.Q, &p.K, &p.V, &p.O, &p.G,
                                                                  &p.DQ, &p.DK, &p.DV, &o),
                                 FAVOR_OK);
                gmax = max_abs_d(rq, c->hq * c->n * c->d);
                eq = max_abs_err(p.dq, rq, c->hq * c->n * c->d) / (gmax > 0 ? gmax : 1);
                gmax = max_abs_d(rk, c->hkv * c->nk * c->d);
                ek = max_abs_err(p.dk, rk, c->hkv * c->nk * c->d) / (gmax > 0 ? gmax : 1);
                gmax = max_abs_d(rv, c->hkv * c->nk * c->dv);
                ev = max_abs_err(p.dv, rv, c->hkv * c->nk * c->dv) / (gmax > 0 ? gmax : 1);
                if (c->sinks) {
                    gmax = max_abs_d(rs, c->hq);
                    es = max_abs_err(p.dsinks, rs, c->hq) / (gmax > 0 ? gmax : 1);
                }
                printf("   backward%s: dq %.2g dk %.2g dv %.2g dsinks %.2g\n",
                       with ? " (lse)" : "      ", eq, ek, ev, es);
                pass &= eq <= 1e-4 && ek <= 1e-4 && ev <= 1e-4 && es <= 1e-4;
            }
        }
        if (!pass) {
            printf("   FAILED\n");
            ++fails;
        }
        free(qd); free(kd); free(vd); free(gd); free(ro); free(rl);
        free(rq); free(rk); free(rv); free(rs);
        prob_free(&p);
    }
    assert_int_equal(fails, 0);
}

/* L = sum dout . out of the float64 forward */
static double ref_loss(const double *qd, const double *kd, const double *vd, const double *gd,
                       const vcase *c, const ref_mods *m, double *ro)
{
    size_t i, no = c->hq * c->n * c->dv;
    double L = 0;
    ref_softmax_mods(qd, kd, vd, ro, NULL, c->hq, c->hkv, c->n, c->nk, c->d, c->dv, 0, m);
    for (i = 0; i < no; ++i) L += gd[i] * ro[i];
    return L;
}

/* 2: the reference's gradients against central differences of its forward:
 * dsinks, and a few coordinates of dq and dk through softcap and ALiBi */
static void test_reference_fd(void **state)
{
    static const size_t which[] = { 1, 4, 8, 11 };
    size_t wi;
    (void)state;
    for (wi = 0; wi < sizeof which / sizeof which[0]; ++wi) {
        vcase c = cases[which[wi]];
        prob p;
        ref_mods m;
        size_t no, h, t;
        double *qd, *kd, *vd, *gd, *ro, *rq, *rk, *rv, *rs, worst = 0;
        float sinks[8];
        c.n = c.n > 24 ? 24 : c.n; /* small: the loss is evaluated many times */
        c.nk = c.nk > 40 ? 40 : c.nk;
        if (c.left > 8) c.left = 8;
        no = c.hq * c.n * c.dv;
        prob_make(&p, &c, 77 + wi);
        m = mods_of(&c, &p);
        qd = tu_to_double(p.q, c.hq * c.n * c.d);
        kd = tu_to_double(p.k, c.hkv * c.nk * c.d);
        vd = tu_to_double(p.v, c.hkv * c.nk * c.dv);
        gd = tu_to_double(p.g, no);
        ro = (double *)malloc(no * sizeof *ro);
        rq = (double *)malloc(c.hq * c.n * c.d * sizeof *rq);
        rk = (double *)malloc(c.hkv * c.nk * c.d * sizeof *rk);
        rv = (double *)malloc(c.hkv * c.nk * c.dv * sizeof *rv);
        rs = (double *)malloc(c.hq * sizeof *rs);
        ref_softmax_mods_backward(qd, kd, vd, gd, rq, rk, rv, rs, c.hq, c.hkv, c.n, c.nk, c.d,
                                  c.dv, 0, &m);
        for (h = 0; c.sinks && h < c.hq; ++h) { /* float sinks: steps of a float */
            double e = 1e-3, lp, lm;
            memcpy(sinks, p.sinks, c.hq * sizeof(float));
            m.sinks = sinks;
            sinks[h] = (float)(p.sinks[h] + e);
            lp = ref_loss(qd, kd, vd, gd, &c, &m, ro);
            e = (double)sinks[h] - p.sinks[h];
            sinks[h] = (float)(p.sinks[h] - e);
            lm = ref_loss(qd, kd, vd, gd, &c, &m, ro);
            worst = fmax(worst, fabs((lp - lm) / (2 * e) - rs[h]) / (fabs(rs[h]) + 1e-3));
            m.sinks = p.sinks;
        }
        for (t = 0; t < 6; ++t) {
            double *x = t % 2 ? kd : qd, *gx = t % 2 ? rk : rq, e = 1e-6, keep, lp, lm;
            size_t at = (t * 7919) % (t % 2 ? c.hkv * c.nk * c.d : c.hq * c.n * c.d);
            keep = x[at];
            x[at] = keep + e;
            lp = ref_loss(qd, kd, vd, gd, &c, &m, ro);
            x[at] = keep - e;
            lm = ref_loss(qd, kd, vd, gd, &c, &m, ro);
            x[at] = keep;
            worst = fmax(worst, fabs((lp - lm) / (2 * e) - gx[at]) / (fabs(gx[at]) + 1e-3));
        }
        printf("case %zu (small): reference gradients vs central differences: worst %.2g\n",
               which[wi], worst);
        assert_true(worst <= 1e-5);
        free(qd); free(kd); free(vd); free(gd); free(ro);
        free(rq); free(rk); free(rv); free(rs);
        prob_free(&p);
    }
}

/* 3: NaN in the keys and values no row sees changes nothing */
static void test_unseen_keys(void **state)
{
    static const vcase nan_cases[] = {
        { 4, 2, 100, 1000, 16, 16, 1, 50, -1, 2.0f, 1, 1, 1.0 }, /* prefill */
        { 4, 1,   3, 1000, 16, 16, 1, 50, -1, 2.0f, 1, 1, 1.0 }, /* decode, shared tiles */
        { 2, 2,   1, 1000, 16, 16, 1, 50, -1, 0.0f, 0, 1, 1.0 }, /* decode, direct */
        { 2, 1,  64,  900, 16, 16, 0, 30, 30, 0.0f, 1, 0, 1.0 }, /* both sides */
    };
    size_t ci;
    (void)state;
    for (ci = 0; ci < sizeof nan_cases / sizeof nan_cases[0]; ++ci) {
        const vcase *c = &nan_cases[ci];
        prob p;
        favor_options o;
        size_t no = c->hq * c->n * c->dv, nq = c->hq * c->n * c->d, j, col, h, seen0, seen1;
        float *o1 = vt_alloc(no), *q1 = vt_alloc(nq), *dk1, *dv1;
        prob_make(&p, c, 500 + ci);
        o = opts_of(c, &p, 0);
        o.dsinks = c->sinks ? p.dsinks : NULL;
        assert_int_equal(favor_softmax_attention(&p.Q, &p.K, &p.V, &p.O, &o), FAVOR_OK);
        assert_int_equal(favor_softmax_attention_backward(&p.Q, &p.K, &p.V, &p.O, &p.G, &p.DQ,
                                                          &p.DK, &p.DV, &o), FAVOR_OK);
        memcpy(o1, p.o, no * sizeof(float));
        memcpy(q1, p.dq, nq * sizeof(float));
        dk1 = vt_alloc(c->hkv * c->nk * c->d);
        dv1 = vt_alloc(c->hkv * c->nk * c->dv);
        memcpy(dk1, p.dk, c->hkv * c->nk * c->d * sizeof(float));
        memcpy(dv1, p.dv, c->hkv * c->nk * c->dv * sizeof(float));
        /* the keys some row sees: positions p_0 - left .. p_(n-1) + right */
        seen0 = c->nk - c->n - (size_t)c->left;
        seen1 = c->right < 0 ? c->nk : c->nk - c->n + (size_t)c->right + c->n;
        if (c->causal) seen1 = c->nk;
        if (seen1 > c->nk) seen1 = c->nk;
        for (h = 0; h < c->hkv; ++h)
            for (j = 0; j < c->nk; ++j) {
                if (j >= seen0 && j < seen1) continue;
                for (col = 0; col < c->d; ++col) p.k[(h * c->nk + j) * c->d + col] = NAN;
                for (col = 0; col < c->dv; ++col) p.v[(h * c->nk + j) * c->dv + col] = NAN;
            }
        assert_int_equal(favor_softmax_attention(&p.Q, &p.K, &p.V, &p.O, &o), FAVOR_OK);
        assert_memory_equal(p.o, o1, no * sizeof(float));
        assert_int_equal(favor_softmax_attention_backward(&p.Q, &p.K, &p.V, &p.O, &p.G, &p.DQ,
                                                          &p.DK, &p.DV, &o), FAVOR_OK);
        assert_memory_equal(p.dq, q1, nq * sizeof(float));
        assert_memory_equal(p.dk, dk1, c->hkv * c->nk * c->d * sizeof(float));
        assert_memory_equal(p.dv, dv1, c->hkv * c->nk * c->dv * sizeof(float));
        for (h = 0; h < c->hkv; ++h) /* unseen keys: exactly zero gradients */
            for (j = 0; j < c->nk; ++j)
                if (j < seen0 || j >= seen1) {
                    for (col = 0; col < c->d; ++col)
                        assert_true(p.dk[(h * c->nk + j) * c->d + col] == 0.0f);
                    for (col = 0; col < c->dv; ++col)
                        assert_true(p.dv[(h * c->nk + j) * c->dv + col] == 0.0f);
                }
        printf("NaN case %zu: keys [0, %zu) and [%zu, %zu) never read\n", ci, seen0, seen1, c->nk);
        free(o1); free(q1); free(dk1); free(dv1);
        prob_free(&p);
    }
}

/* 4: a later key changes no row that cannot see it */
static void test_no_future(void **state)
{
    static const vcase fc[] = {
        { 2, 1, 150, 150, 16, 16, 1, 20, -1, 2.0f, 1, 1, 1.0 },
        { 4, 2,   4, 600, 16, 16, 1, 90, -1, 2.0f, 1, 1, 1.0 },
        { 2, 1, 150, 150, 16, 16, 0, NOWIN, 2.0f, 1, 1, 1.0 }, /* causal by a mask */
        { 2, 1,   5, 300, 16, 16, 0, NOWIN, 0.0f, 1, 1, 1.0 }, /* the same, decode */
    };
    size_t ci, jt;
    (void)state;
    for (ci = 0; ci < 4; ++ci) {
        const vcase *c = &fc[ci];
        prob p;
        favor_options o;
        favor_tensor MT;
        size_t no = c->hq * c->n * c->dv, h, i, col;
        float *o1 = vt_alloc(no), *l1 = vt_alloc(c->hq * c->n), *M = vt_alloc(c->n * c->nk);
        prob_make(&p, c, 900 + ci);
        o = opts_of(c, &p, 0);
        o.lse = p.lse;
        if (ci >= 2) { /* -inf after each row's position, finite values before */
            for (i = 0; i < c->n; ++i)
                for (col = 0; col < c->nk; ++col)
                    M[i * c->nk + col] = col > i + c->nk - c->n ? -INFINITY : 0.1f * (float)(col % 5);
            MT = favor_tensor_packed(M, 1, c->n, c->nk);
            o.mask = &MT;
        }
        assert_int_equal(favor_softmax_attention(&p.Q, &p.K, &p.V, &p.O, &o), FAVOR_OK);
        memcpy(o1, p.o, no * sizeof(float));
        memcpy(l1, p.lse, c->hq * c->n * sizeof(float));
        for (jt = 0; jt < 3; ++jt) {
            size_t j = c->nk - 1 - jt * (c->n / 3); /* the key of row i = j - (nk - n) */
            for (h = 0; h < c->hkv; ++h) {
                for (col = 0; col < c->d; ++col) p.k[(h * c->nk + j) * c->d + col] += 3.0f;
                for (col = 0; col < c->dv; ++col) p.v[(h * c->nk + j) * c->dv + col] -= 5.0f;
            }
            assert_int_equal(favor_softmax_attention(&p.Q, &p.K, &p.V, &p.O, &o), FAVOR_OK);
            for (h = 0; h < c->hq; ++h)
                for (i = 0; i < c->n && i + c->nk - c->n < j; ++i) {
                    assert_memory_equal(p.o + (h * c->n + i) * c->dv, o1 + (h * c->n + i) * c->dv,
                                        c->dv * sizeof(float));
                    assert_true(p.lse[h * c->n + i] == l1[h * c->n + i]);
                }
            memcpy(o1, p.o, no * sizeof(float)); /* the next key is an earlier one */
            memcpy(l1, p.lse, c->hq * c->n * sizeof(float));
        }
        free(o1); free(l1); free(M);
        prob_free(&p);
    }
}

/* 5a: bf16 and fp16 inputs against fp32 copies of their values */
static uint16_t half_of(float x) /* x exactly representable in fp16 (normal or 0) */
{
    uint32_t u;
    int e;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) == 0) return (uint16_t)(u >> 16);
    e = (int)((u >> 23) & 0xff) - 127 + 15;
    return (uint16_t)(((u >> 16) & 0x8000u) | ((unsigned)e << 10) | ((u >> 13) & 0x3ffu));
}

static void test_dtypes(void **state)
{
    const vcase *c = &cases[1];
    const vcase *dc = &cases[5];
    int which, ty;
    (void)state;
    for (which = 0; which < 2; ++which) {
        const vcase *cc = which ? dc : c;
        for (ty = 0; ty < 2; ++ty) { /* 0: bf16, 1: fp16 */
            prob p;
            favor_options o;
            size_t nq = cc->hq * cc->n * cc->d, nk = cc->hkv * cc->nk * cc->d;
            size_t nv = cc->hkv * cc->nk * cc->dv, no = cc->hq * cc->n * cc->dv, i;
            uint16_t *q16, *k16, *v16;
            float *o1, *dq1, *dk1, *dv1, *s1;
            favor_tensor Q16, K16, V16;
            prob_make(&p, cc, 40 + which);
            q16 = (uint16_t *)malloc(nq * 2);
            k16 = (uint16_t *)malloc(nk * 2);
            v16 = (uint16_t *)malloc(nv * 2);
            for (i = 0; i < nq + nk + nv; ++i) { /* round to 16 bits, keep both forms */
                float *x = i < nq ? p.q + i : i < nq + nk ? p.k + (i - nq) : p.v + (i - nq - nk);
                uint16_t *y = i < nq ? q16 + i : i < nq + nk ? k16 + (i - nq) : v16 + (i - nq - nk);
                uint32_t u;
                if (ty == 1) *x = fminf(fmaxf(*x, -8.0f), 8.0f);
                memcpy(&u, x, 4);
                u &= ty == 0 ? 0xffff0000u : 0xffffe000u;
                if (ty == 1 && (u & 0x7f800000u) < (0x71u << 23)) u &= 0x80000000u; /* fp16 normal */
                memcpy(x, &u, 4);
                *y = ty == 0 ? (uint16_t)(u >> 16) : half_of(*x);
            }
            Q16 = favor_tensor_packed_as(ty ? FAVOR_F16 : FAVOR_BF16, q16, cc->hq, cc->n, cc->d);
            K16 = favor_tensor_packed_as(ty ? FAVOR_F16 : FAVOR_BF16, k16, cc->hkv, cc->nk, cc->d);
            V16 = favor_tensor_packed_as(ty ? FAVOR_F16 : FAVOR_BF16, v16, cc->hkv, cc->nk, cc->dv);
            o = opts_of(cc, &p, 0);
            o.dsinks = cc->sinks ? p.dsinks : NULL;
            o1 = vt_alloc(no); dq1 = vt_alloc(nq); dk1 = vt_alloc(nk); dv1 = vt_alloc(nv);
            s1 = vt_alloc(cc->hq);
            assert_int_equal(favor_softmax_attention(&p.Q, &p.K, &p.V, &p.O, &o), FAVOR_OK);
            assert_int_equal(favor_softmax_attention_backward(&p.Q, &p.K, &p.V, &p.O, &p.G, &p.DQ,
                                                              &p.DK, &p.DV, &o), FAVOR_OK);
            memcpy(o1, p.o, no * 4); memcpy(dq1, p.dq, nq * 4); memcpy(dk1, p.dk, nk * 4);
            memcpy(dv1, p.dv, nv * 4); memcpy(s1, p.dsinks, cc->hq * 4);
            assert_int_equal(favor_softmax_attention(&Q16, &K16, &V16, &p.O, &o), FAVOR_OK);
            assert_memory_equal(p.o, o1, no * 4);
            assert_int_equal(favor_softmax_attention_backward(&Q16, &K16, &V16, &p.O, &p.G, &p.DQ,
                                                              &p.DK, &p.DV, &o), FAVOR_OK);
            assert_memory_equal(p.dq, dq1, nq * 4);
            assert_memory_equal(p.dk, dk1, nk * 4);
            assert_memory_equal(p.dv, dv1, nv * 4);
            assert_memory_equal(p.dsinks, s1, cc->hq * 4);
            printf("%s case %d: 16-bit inputs give the fp32 copies' bits\n", ty ? "fp16" : "bf16",
                   which ? 5 : 1);
            free(q16); free(k16); free(v16); free(o1); free(dq1);
            free(dk1); free(dv1); free(s1);
            prob_free(&p);
        }
    }
}

/* 5b: threads 1, 2, 3 (and 0) give the same bits, forward and backward; a
 * one-key/value-head shape splits the backward inside the head */
static void test_threads(void **state)
{
    static const vcase tc[] = {
        { 4, 2, 200, 260, 32, 32, 1, 40, -1, 3.0f, 1, 1, 2.0 },
        { 2, 1, 300, 1700, 16, 16, 1, 500, -1, 1.5f, 1, 1, 1.0 },
        { 8, 2, 2, 3000, 32, 32, 1, 900, -1, 5.0f, 1, 1, 1.0 },
    };
    size_t ci;
    int t;
    (void)state;
    for (ci = 0; ci < 3; ++ci) {
        const vcase *c = &tc[ci];
        prob p;
        size_t no = c->hq * c->n * c->dv, nq = c->hq * c->n * c->d;
        size_t nk = c->hkv * c->nk * c->d, nv = c->hkv * c->nk * c->dv;
        float *o1 = vt_alloc(no), *l1 = vt_alloc(c->hq * c->n), *dq1 = vt_alloc(nq);
        float *dk1 = vt_alloc(nk), *dv1 = vt_alloc(nv), *s1 = vt_alloc(c->hq);
        prob_make(&p, c, 300 + ci);
        for (t = 1; t <= (int)TU_COUNTS(4, 2); ++t) {
            favor_options o = opts_of(c, &p, t == 4 ? 0 : t);
            o.lse = p.lse;
            o.dsinks = p.dsinks;
            assert_int_equal(favor_softmax_attention(&p.Q, &p.K, &p.V, &p.O, &o), FAVOR_OK);
            o.lse = ci == 1 ? NULL : p.lse; /* the split's own lse pass too */
            assert_int_equal(favor_softmax_attention_backward(&p.Q, &p.K, &p.V, &p.O, &p.G, &p.DQ,
                                                              &p.DK, &p.DV, &o), FAVOR_OK);
            if (t == 1) {
                memcpy(o1, p.o, no * 4); memcpy(l1, p.lse, c->hq * c->n * 4);
                memcpy(dq1, p.dq, nq * 4); memcpy(dk1, p.dk, nk * 4); memcpy(dv1, p.dv, nv * 4);
                memcpy(s1, p.dsinks, c->hq * 4);
                continue;
            }
            assert_memory_equal(p.o, o1, no * 4);
            assert_memory_equal(p.lse, l1, c->hq * c->n * 4);
            assert_memory_equal(p.dq, dq1, nq * 4);
            assert_memory_equal(p.dk, dk1, nk * 4);
            assert_memory_equal(p.dv, dv1, nv * 4);
            assert_memory_equal(p.dsinks, s1, c->hq * 4);
        }
        printf("threads case %zu: 1, 2, 3 and the default give the same bits\n", ci);
        free(o1); free(l1); free(dq1); free(dk1); free(dv1);
        free(s1);
        prob_free(&p);
    }
}

/* 5c: a batch of 3 is its elements (slopes and sinks per head of an element),
 * and dsinks sums over them */
static void test_batch(void **state)
{
    static const vcase bc[] = {
        { 2, 1, 70, 90, 16, 16, 1, 30, -1, 2.0f, 1, 1, 1.0 },
        { 4, 2, 3, 700, 16, 16, 1, 100, -1, 2.0f, 1, 1, 1.0 },
    };
    const size_t B = 3;
    size_t ci, b, h;
    (void)state;
    for (ci = 0; ci < 2; ++ci) {
        vcase big = bc[ci];
        const vcase *c = &bc[ci];
        prob p, e;
        size_t no = c->hq * c->n * c->dv, nq = c->hq * c->n * c->d;
        size_t nk = c->hkv * c->nk * c->d, nv = c->hkv * c->nk * c->dv;
        favor_tensor Q, K, V, O, G, DQ, DK, DV;
        favor_options o;
        double sum[8] = { 0 };
        big.hq *= B; /* the same floats, as B elements */
        big.hkv *= B;
        prob_make(&p, &big, 60 + ci);
        Q = favor_tensor_batched(FAVOR_F32, p.q, B, c->hq, c->n, c->d);
        K = favor_tensor_batched(FAVOR_F32, p.k, B, c->hkv, c->nk, c->d);
        V = favor_tensor_batched(FAVOR_F32, p.v, B, c->hkv, c->nk, c->dv);
        O = favor_tensor_batched(FAVOR_F32, p.o, B, c->hq, c->n, c->dv);
        G = favor_tensor_batched(FAVOR_F32, p.g, B, c->hq, c->n, c->dv);
        DQ = favor_tensor_batched(FAVOR_F32, p.dq, B, c->hq, c->n, c->d);
        DK = favor_tensor_batched(FAVOR_F32, p.dk, B, c->hkv, c->nk, c->d);
        DV = favor_tensor_batched(FAVOR_F32, p.dv, B, c->hkv, c->nk, c->dv);
        o = opts_of(c, &p, 0);
        o.dsinks = p.dsinks;
        assert_int_equal(favor_softmax_attention(&Q, &K, &V, &O, &o), FAVOR_OK);
        assert_int_equal(favor_softmax_attention_backward(&Q, &K, &V, &O, &G, &DQ, &DK, &DV, &o),
                         FAVOR_OK);
        prob_make(&e, c, 1);
        for (b = 0; b < B; ++b) {
            favor_options oe = opts_of(c, &p, 0); /* the batched call's slopes and sinks */
            oe.dsinks = e.dsinks;
            memcpy(e.q, p.q + b * nq, nq * 4); memcpy(e.k, p.k + b * nk, nk * 4);
            memcpy(e.v, p.v + b * nv, nv * 4); memcpy(e.g, p.g + b * no, no * 4);
            assert_int_equal(favor_softmax_attention(&e.Q, &e.K, &e.V, &e.O, &oe), FAVOR_OK);
            assert_memory_equal(e.o, p.o + b * no, no * 4);
            assert_int_equal(favor_softmax_attention_backward(&e.Q, &e.K, &e.V, &e.O, &e.G, &e.DQ,
                                                              &e.DK, &e.DV, &oe), FAVOR_OK);
            assert_memory_equal(e.dq, p.dq + b * nq, nq * 4);
            assert_memory_equal(e.dk, p.dk + b * nk, nk * 4);
            assert_memory_equal(e.dv, p.dv + b * nv, nv * 4);
            for (h = 0; h < c->hq; ++h) sum[h] += e.dsinks[h];
        }
        for (h = 0; h < c->hq; ++h)
            assert_true(fabs(p.dsinks[h] - sum[h]) <= 1e-6 * (1 + fabs(sum[h])));
        printf("batch case %zu: each element's bits; dsinks the sum over the batch\n", ci);
        prob_free(&e);
        prob_free(&p);
    }
}

/* Masks and packed sequences: a case, its mask ([mask_heads][n][nk], fp32
 * values; -inf with probability ninf, or a block-diagonal document mask of
 * `docs` documents) and its sequences */
typedef struct {
    vcase c;
    int mask;          /* 0 none, 1 random, 2 documents */
    size_t mask_heads; /* 1 or hq */
    favor_dtype mtype;
    double ninf;
    size_t seqs;
    size_t seq_q[6], seq_k[6];
} mcase;

static const mcase mcases[] = {
    /*  hq hkv  n    nk  d  dv causal window  cap  alibi sinks sigma  mask heads type ninf seqs */
    { { 2, 1, 150, 170, 16, 16, 0, NOWIN, 2.0f, 1, 0, 1.0 }, 1, 1, FAVOR_F32, 0.2, 0, {0}, {0} },
    { { 4, 2,   3, 700, 16, 16, 1, NOWIN, 0.0f, 0, 1, 1.0 }, 1, 4, FAVOR_F16, 0.3, 0, {0}, {0} },
    { { 2, 2, 200, 200, 16,  8, 1, NOWIN, 0.0f, 0, 1, 1.0 }, 2, 1, FAVOR_BF16, 0, 0, {0}, {0} },
    { { 4, 2, 251, 251, 16, 16, 1, 30, -1, 0.0f, 1, 1, 1.0 }, 0, 1, FAVOR_F32, 0, 5,
      { 0, 50, 50, 180, 187, 251 }, { 0, 50, 50, 180, 187, 251 } },
    { { 4, 1,   5, 1000, 16, 16, 1, NOWIN, 1.5f, 1, 1, 1.0 }, 0, 1, FAVOR_F32, 0, 2,
      { 0, 3, 5 }, { 0, 600, 1000 } },
    { { 2, 1, 120, 160, 16, 16, 0, 40, 10, 0.0f, 0, 1, 1.0 }, 1, 2, FAVOR_F16, 0.1, 3,
      { 0, 40, 70, 120 }, { 0, 60, 100, 160 } },
    /* decode, four rows per key/value head read at once (favor__rows_as at d =
     * 64 on AVX2 and AVX-512, the mask in the kernel), a mask per query head */
    { { 8, 2,   1, 700, 64, 64, 1, NOWIN, 0.0f, 1, 1, 1.0 }, 1, 8, FAVOR_F32, 0.3, 0, {0}, {0} },
};

/* the mask of a case: values at M (doubles, [mask_heads][n][nk]) and its view */
static void *mask_make(const mcase *mc, tu_rng *r, double *M, favor_tensor *t)
{
    const vcase *c = &mc->c;
    size_t cnt = mc->mask_heads * c->n * c->nk, i, es = mc->mtype == FAVOR_F32 ? 4 : 2;
    unsigned char *buf = (unsigned char *)malloc(cnt * es);
    for (i = 0; i < cnt; ++i) {
        size_t row = i / c->nk % c->n, col = i % c->nk;
        float x = (float)tu_normal(r);
        uint32_t u;
        if (mc->mask == 2) /* documents of 70, 80, 50 rows: keys of one's own only */
            x = (row < 70) == (col < 70) && (row < 150) == (col < 150) ? 0.0f : -INFINITY;
        else if (tu_uniform(r) < mc->ninf)
            x = -INFINITY;
        memcpy(&u, &x, 4);
        if (mc->mtype == FAVOR_BF16) u &= 0xffff0000u;
        if (mc->mtype == FAVOR_F16 && x != -INFINITY) { /* a normal fp16 value: 10 bits */
            u &= 0xffffe000u;
            if ((u & 0x7f800000u) < (0x71u << 23)) u &= 0x80000000u;
        }
        memcpy(&x, &u, 4);
        M[i] = x;
        if (mc->mtype == FAVOR_F32) memcpy(buf + 4 * i, &x, 4);
        else if (mc->mtype == FAVOR_BF16) {
            uint16_t h = (uint16_t)(u >> 16);
            memcpy(buf + 2 * i, &h, 2);
        } else {
            uint16_t h = x == -INFINITY ? 0xfc00u : half_of(x);
            memcpy(buf + 2 * i, &h, 2);
        }
    }
    *t = favor_tensor_packed_as(mc->mtype, buf, mc->mask_heads, c->n, c->nk);
    return buf;
}

static double rel_err(const float *x, const double *ref, size_t n)
{
    double g = max_abs_d(ref, n);
    return max_abs_err(x, ref, n) / (g > 0 ? g : 1);
}

/* masks and packed sequences against the reference, forward and backward; a
 * packed call against its sequences' own calls, bit for bit */
static void test_mask_seqs(void **state)
{
    size_t ci;
    (void)state;
    for (ci = 0; ci < sizeof mcases / sizeof mcases[0]; ++ci) {
        const mcase *mc = &mcases[ci];
        const vcase *c = &mc->c;
        prob p;
        tu_rng r;
        favor_options o;
        favor_tensor MT;
        ref_mods m;
        void *mbuf = NULL;
        size_t nq = c->hq * c->n * c->d, nk = c->hkv * c->nk * c->d, nv = c->hkv * c->nk * c->dv;
        size_t no = c->hq * c->n * c->dv, s;
        double *M = NULL, *qd, *kd, *vd, *gd, *ro, *rl, *rq, *rk, *rv, *rs, eo, eq, ek, ev, es;
        char name[256];
        prob_make(&p, c, 2000 + ci);
        r.s = 99 + ci;
        o = opts_of(c, &p, 0);
        m = mods_of(c, &p);
        if (mc->mask) {
            M = (double *)malloc(mc->mask_heads * c->n * c->nk * sizeof *M);
            mbuf = mask_make(mc, &r, M, &MT);
            o.mask = &MT;
            m.mask = M;
            m.mask_heads = mc->mask_heads;
        }
        if (mc->seqs) {
            o.seqs = m.seqs = mc->seqs;
            o.seq_q = m.seq_q = mc->seq_q;
            o.seq_k = m.seq_k = mc->seq_k;
        }
        o.lse = p.lse;
        o.dsinks = c->sinks ? p.dsinks : NULL;
        qd = tu_to_double(p.q, nq);
        kd = tu_to_double(p.k, nk);
        vd = tu_to_double(p.v, nv);
        gd = tu_to_double(p.g, no);
        ro = (double *)malloc(no * sizeof *ro);
        rl = (double *)malloc(c->hq * c->n * sizeof *rl);
        rq = (double *)malloc(nq * sizeof *rq);
        rk = (double *)malloc(nk * sizeof *rk);
        rv = (double *)malloc(nv * sizeof *rv);
        rs = (double *)malloc(c->hq * sizeof *rs);
        ref_softmax_mods(qd, kd, vd, ro, rl, c->hq, c->hkv, c->n, c->nk, c->d, c->dv, 0, &m);
        ref_softmax_mods_backward(qd, kd, vd, gd, rq, rk, rv, rs, c->hq, c->hkv, c->n, c->nk,
                                  c->d, c->dv, 0, &m);
        assert_int_equal(favor_softmax_attention(&p.Q, &p.K, &p.V, &p.O, &o), FAVOR_OK);
        assert_int_equal(favor_softmax_attention_backward(&p.Q, &p.K, &p.V, &p.O, &p.G, &p.DQ,
                                                          &p.DK, &p.DV, &o), FAVOR_OK);
        eo = max_abs_err(p.o, ro, no) / tu_max_abs_f(p.v, nv);
        eq = rel_err(p.dq, rq, nq);
        ek = rel_err(p.dk, rk, nk);
        ev = rel_err(p.dv, rv, nv);
        es = c->sinks ? rel_err(p.dsinks, rs, c->hq) : 0;
        for (s = 0; s < c->hq * c->n; ++s)
            assert_true(rl[s] == -HUGE_VAL ? p.lse[s] == -INFINITY
                                           : fabs(p.lse[s] - rl[s]) <= 1e-5 * (1 + fabs(rl[s])));
        case_name(c, name, sizeof name);
        printf("%zu %s mask %d (%zu heads) seqs %zu\n   out %.2g  dq %.2g dk %.2g dv %.2g "
               "dsinks %.2g\n", ci, name, mc->mask, mc->mask_heads, mc->seqs, eo, eq, ek, ev, es);
        assert_true(eo <= 2e-5 && eq <= 1e-4 && ek <= 1e-4 && ev <= 1e-4 && es <= 1e-4);
        if (mc->seqs) { /* 1 and 3 threads give the default count's bits */
            float *o1 = vt_alloc(no), *l1 = vt_alloc(c->hq * c->n);
            favor_options ot = o;
            for (ot.threads = 1; ot.threads <= 3; ot.threads += 2) {
                ot.lse = l1;
                assert_int_equal(favor_softmax_attention(&p.Q, &p.K, &p.V, &p.O, &ot), FAVOR_OK);
                assert_memory_equal(l1, p.lse, c->hq * c->n * 4);
                memcpy(o1, p.o, no * 4);
                assert_int_equal(favor_softmax_attention(&p.Q, &p.K, &p.V, &p.O, &o), FAVOR_OK);
                assert_memory_equal(p.o, o1, no * 4);
            }
            free(o1);
            free(l1);
        }
        for (s = 0; s < mc->seqs; ++s) { /* each sequence alone: the same bits */
            size_t q0 = mc->seq_q[s], q1 = mc->seq_q[s + 1], k0 = mc->seq_k[s], k1 = mc->seq_k[s + 1];
            favor_tensor Q = p.Q, K = p.K, V = p.V, O = p.O, G = p.G, DQ = p.DQ, DK = p.DK, DV = p.DV;
            favor_tensor Ms = MT;
            float *o1 = vt_alloc(no), *l1 = vt_alloc(c->hq * c->n), *dq1 = vt_alloc(nq);
            float *dk1 = vt_alloc(nk), *dv1 = vt_alloc(nv), *ds1 = vt_alloc(c->hq);
            favor_options os = o;
            size_t h;
            if (q1 == q0 || k1 == k0) { free(o1); free(l1); free(dq1); free(dk1); free(dv1); free(ds1); continue; }
            memcpy(o1, p.o, no * 4); memcpy(dq1, p.dq, nq * 4);
            memcpy(dk1, p.dk, nk * 4); memcpy(dv1, p.dv, nv * 4);
            Q.data = p.q + q0 * c->d; Q.rows = q1 - q0;
            O.data = p.o + q0 * c->dv; O.rows = q1 - q0;
            G.data = p.g + q0 * c->dv; G.rows = q1 - q0;
            DQ.data = p.dq + q0 * c->d; DQ.rows = q1 - q0;
            K.data = p.k + k0 * c->d; K.rows = k1 - k0;
            V.data = p.v + k0 * c->dv; V.rows = k1 - k0;
            DK.data = p.dk + k0 * c->d; DK.rows = k1 - k0;
            DV.data = p.dv + k0 * c->dv; DV.rows = k1 - k0;
            os.seqs = 0;
            os.lse = l1; /* [hq][q1 - q0]: the packed call's lse rows */
            os.dsinks = c->sinks ? ds1 : NULL;
            if (mc->mask) {
                size_t es2 = mc->mtype == FAVOR_F32 ? 4 : 2;
                Ms.data = (unsigned char *)MT.data + (q0 * c->nk + k0) * es2;
                Ms.rows = q1 - q0;
                Ms.cols = k1 - k0;
                os.mask = &Ms;
            }
            assert_int_equal(favor_softmax_attention(&Q, &K, &V, &O, &os), FAVOR_OK);
            assert_memory_equal(p.o, o1, no * 4);
            for (h = 0; h < c->hq; ++h)
                assert_memory_equal(l1 + h * (q1 - q0), p.lse + h * c->n + q0, (q1 - q0) * 4);
            assert_int_equal(favor_softmax_attention_backward(&Q, &K, &V, &O, &G, &DQ, &DK, &DV, &os),
                             FAVOR_OK);
            for (h = 0; h < c->hq; ++h) /* the sequence's rows (the rest are the packed call's) */
                assert_memory_equal(p.dq + (h * c->n + q0) * c->d, dq1 + (h * c->n + q0) * c->d,
                                    (q1 - q0) * c->d * 4);
            for (h = 0; h < c->hkv; ++h) {
                assert_memory_equal(p.dk + (h * c->nk + k0) * c->d, dk1 + (h * c->nk + k0) * c->d,
                                    (k1 - k0) * c->d * 4);
                assert_memory_equal(p.dv + (h * c->nk + k0) * c->dv, dv1 + (h * c->nk + k0) * c->dv,
                                    (k1 - k0) * c->dv * 4);
            }
            memcpy(p.dq, dq1, nq * 4); memcpy(p.dk, dk1, nk * 4); memcpy(p.dv, dv1, nv * 4);
            free(o1); free(l1); free(dq1); free(dk1); free(dv1); free(ds1);
        }
        if (mc->seqs) printf("   each sequence alone gives the packed call's bits\n");
        free(qd); free(kd); free(vd); free(gd); free(ro); free(rl); free(rq); free(rk); free(rv);
        free(rs); free(M); free(mbuf);
        prob_free(&p);
    }
}

/* tiles that a mask hides from every row are never read: NaN there changes no bit */
static void test_mask_skips(void **state)
{
    static const vcase sc[] = {
        { 2, 1, 128, 320, 16, 16, 0, NOWIN, 0.0f, 0, 1, 1.0 }, /* prefill: the tile map */
        { 4, 2,   2, 1100, 16, 16, 0, NOWIN, 0.0f, 1, 0, 1.0 }, /* decode: its own check */
    };
    size_t ci;
    (void)state;
    for (ci = 0; ci < 2; ++ci) {
        const vcase *c = &sc[ci];
        prob p;
        favor_options o;
        favor_tensor MT;
        size_t no = c->hq * c->n * c->dv, nq = c->hq * c->n * c->d, i, j, h, col;
        size_t cut = ci ? 512 : 128; /* keys from here on are hidden from every row */
        float *M = vt_alloc(c->n * c->nk), *o1 = vt_alloc(no), *q1 = vt_alloc(nq);
        prob_make(&p, c, 70 + ci);
        for (i = 0; i < c->n; ++i)
            for (j = 0; j < c->nk; ++j) M[i * c->nk + j] = j >= cut ? -INFINITY : 0.25f * (float)(j % 7);
        MT = favor_tensor_packed(M, 1, c->n, c->nk);
        o = opts_of(c, &p, 0);
        o.mask = &MT;
        o.dsinks = c->sinks ? p.dsinks : NULL;
        assert_int_equal(favor_softmax_attention(&p.Q, &p.K, &p.V, &p.O, &o), FAVOR_OK);
        assert_int_equal(favor_softmax_attention_backward(&p.Q, &p.K, &p.V, &p.O, &p.G, &p.DQ,
                                                          &p.DK, &p.DV, &o), FAVOR_OK);
        memcpy(o1, p.o, no * 4);
        memcpy(q1, p.dq, nq * 4);
        for (h = 0; h < c->hkv; ++h)
            for (j = cut; j < c->nk; ++j) {
                for (col = 0; col < c->d; ++col) p.k[(h * c->nk + j) * c->d + col] = NAN;
                for (col = 0; col < c->dv; ++col) p.v[(h * c->nk + j) * c->dv + col] = NAN;
            }
        assert_int_equal(favor_softmax_attention(&p.Q, &p.K, &p.V, &p.O, &o), FAVOR_OK);
        assert_memory_equal(p.o, o1, no * 4);
        assert_int_equal(favor_softmax_attention_backward(&p.Q, &p.K, &p.V, &p.O, &p.G, &p.DQ,
                                                          &p.DK, &p.DV, &o), FAVOR_OK);
        assert_memory_equal(p.dq, q1, nq * 4);
        for (h = 0; h < c->hkv; ++h)
            for (j = cut; j < c->nk; ++j) {
                assert_true(p.dk[(h * c->nk + j) * c->d] == 0.0f);
                assert_true(p.dv[(h * c->nk + j) * c->dv] == 0.0f);
            }
        printf("mask case %zu: keys [%zu, %zu), hidden by the mask, never read\n", ci, cut, c->nk);
        free(M); free(o1); free(q1);
        prob_free(&p);
    }
}

/* linear attention over packed sequences: each from an empty state, as its own
 * call (bit for bit) and as the float64 reference of that sequence */
static void test_linear_seqs(void **state)
{
    static const size_t sq[5] = { 0, 90, 90, 300, 333 };
    const size_t hq = 4, hkv = 2, n = 333, d = 16, dv = 8;
    favor_kernel kern[2] = { FAVOR_ELU1, FAVOR_POSITIVE };
    int ki, causal;
    (void)state;
    for (ki = 0; ki < 2; ++ki)
        for (causal = 0; causal < 2; ++causal) {
            vcase c = { 4, 2, 333, 333, 16, 8, 0, NOWIN, 0.0f, 0, 0, 1.0 };
            prob p;
            favor_features f;
            float *w = vt_alloc(favor_features_floats(kern[ki], d, 32) + 1);
            favor_options o = favor_default_options();
            size_t s, h, no = hq * n * dv, nq = hq * n * d, nkk = hkv * n * d, nv = hkv * n * dv;
            float *o1 = vt_alloc(no), *dq1 = vt_alloc(nq), *dk1 = vt_alloc(nkk), *dv1 = vt_alloc(nv);
            double worst = 0;
            c.causal = causal;
            prob_make(&p, &c, 3000 + (uint64_t)(ki * 2 + causal));
            assert_int_equal(favor_features_init(&f, kern[ki], d, ki ? 32 : d, 0, 5, w), FAVOR_OK);
            o.flags = causal ? FAVOR_CAUSAL : 0u;
            o.seqs = 4;
            o.seq_q = sq;
            assert_int_equal(favor_linear_attention(&f, &p.Q, &p.K, &p.V, &p.O, &o), FAVOR_OK);
            assert_int_equal(favor_linear_attention_backward(&f, &p.Q, &p.K, &p.V, &p.G, &p.DQ,
                                                             &p.DK, &p.DV, &o), FAVOR_OK);
            memcpy(o1, p.o, no * 4); memcpy(dq1, p.dq, nq * 4); memcpy(dk1, p.dk, nkk * 4);
            memcpy(dv1, p.dv, nv * 4);
            { /* the queries: the largest sequence's call's (WORKSPACE), forward and
               * backward (the backward's was the whole tensors' plan: fuzz finding 15) */
                size_t most[2] = { 0, 0 }, one;
                favor_options os = favor_default_options();
                os.flags = o.flags;
                for (s = 0; s < 4; ++s) {
                    favor_tensor Q = p.Q, K = p.K, V = p.V;
                    if (sq[s + 1] == sq[s]) continue;
                    Q.data = p.q + sq[s] * d; K.data = p.k + sq[s] * d; V.data = p.v + sq[s] * dv;
                    Q.rows = K.rows = V.rows = sq[s + 1] - sq[s];
                    one = favor_linear_attention_workspace(&f, &Q, &K, &V, &os);
                    if (one > most[0]) most[0] = one;
                    one = favor_linear_attention_backward_workspace(&f, &Q, &K, &V, &os);
                    if (one > most[1]) most[1] = one;
                }
                assert_true(most[0] > 0 && most[1] > 0);
                assert_int_equal(favor_linear_attention_workspace(&f, &p.Q, &p.K, &p.V, &o), most[0]);
                assert_int_equal(favor_linear_attention_backward_workspace(&f, &p.Q, &p.K, &p.V, &o),
                                 most[1]);
            }
            for (s = 0; s < 4; ++s) {
                size_t a = sq[s], b = sq[s + 1], m = b - a, i;
                favor_tensor Q = p.Q, K = p.K, V = p.V, O = p.O, G = p.G, DQ = p.DQ, DK = p.DK, DV = p.DV;
                favor_options os = favor_default_options();
                double *qd, *kd, *vd, *ro;
                if (!m) continue;
                Q.data = p.q + a * d; K.data = p.k + a * d; V.data = p.v + a * dv; O.data = p.o + a * dv;
                G.data = p.g + a * dv; DQ.data = p.dq + a * d; DK.data = p.dk + a * d; DV.data = p.dv + a * dv;
                Q.rows = K.rows = V.rows = O.rows = G.rows = DQ.rows = DK.rows = DV.rows = m;
                os.flags = o.flags;
                assert_int_equal(favor_linear_attention(&f, &Q, &K, &V, &O, &os), FAVOR_OK);
                assert_memory_equal(p.o, o1, no * 4);
                assert_int_equal(favor_linear_attention_backward(&f, &Q, &K, &V, &G, &DQ, &DK, &DV, &os),
                                 FAVOR_OK);
                assert_memory_equal(p.dq, dq1, nq * 4);
                assert_memory_equal(p.dk, dk1, nkk * 4);
                assert_memory_equal(p.dv, dv1, nv * 4);
                /* the sequence against the float64 reference */
                qd = (double *)malloc(hq * m * d * sizeof *qd);
                kd = (double *)malloc(hkv * m * d * sizeof *kd);
                vd = (double *)malloc(hkv * m * dv * sizeof *vd);
                ro = (double *)malloc(hq * m * dv * sizeof *ro);
                for (h = 0; h < hq; ++h)
                    for (i = 0; i < m * d; ++i) qd[h * m * d + i] = p.q[(h * n + a) * d + i];
                for (h = 0; h < hkv; ++h) {
                    for (i = 0; i < m * d; ++i) kd[h * m * d + i] = p.k[(h * n + a) * d + i];
                    for (i = 0; i < m * dv; ++i) vd[h * m * dv + i] = p.v[(h * n + a) * dv + i];
                }
                ref_linear(&f, qd, kd, vd, ro, hq, hkv, m, m, dv, 0, causal);
                for (h = 0; h < hq; ++h)
                    for (i = 0; i < m * dv; ++i)
                        worst = fmax(worst, fabs(p.o[(h * n + a) * dv + i] - ro[h * m * dv + i]));
                free(qd); free(kd); free(vd); free(ro);
            }
            printf("linear %s %s over 4 packed sequences: each its own call's bits; max|err| %.2g\n",
                   tu_kernel_name(kern[ki]), causal ? "causal" : "full", worst);
            assert_true(worst <= 1e-4 * tu_max_abs_f(p.v, nv) * (ki ? 10 : 1));
            free(w); free(o1); free(dq1); free(dk1); free(dv1);
            prob_free(&p);
        }
    { /* fuzz finding 15's shape, where the causal backward's plan grows with the
       * rows (d = d_v = 1): three sequences of 0, 20 and 13 query rows on 0, 0 and
       * 2 keys; the backward query is that of the last one, not of all 33 rows */
        static float Q[2 * 33], K[2 * 2], V[2 * 2];
        static const size_t fq[4] = { 0, 0, 20, 33 }, fk[4] = { 0, 0, 0, 2 };
        favor_features f;
        favor_options o = favor_default_options(), os = favor_default_options();
        favor_tensor q = favor_tensor_packed(Q, 2, 33, 1), k = favor_tensor_packed(K, 2, 2, 1);
        favor_tensor v = favor_tensor_packed(V, 2, 2, 1), q3 = favor_tensor_packed(Q + 20, 2, 13, 1);
        assert_int_equal(favor_features_init(&f, FAVOR_ELU1, 1, 0, 0, 0, NULL), FAVOR_OK);
        o.flags = os.flags = FAVOR_CAUSAL;
        o.seqs = 3;
        o.seq_q = fq;
        o.seq_k = fk;
        q3.head_stride = 33;
        assert_true(favor_linear_attention_backward_workspace(&f, &q3, &k, &v, &os) > 0);
        assert_int_equal(favor_linear_attention_backward_workspace(&f, &q, &k, &v, &o),
                         favor_linear_attention_backward_workspace(&f, &q3, &k, &v, &os));
        printf("linear backward query over packed sequences: the largest sequence's call's\n");
    }
}

/* 6: refused values, nothing written, the argument named */
static void test_validation(void **state)
{
    const vcase *c = &cases[1];
    prob p;
    favor_options o;
    char err[160];
    size_t no = c->hq * c->n * c->dv, i;
    float *snap = vt_alloc(no), bad[4];
    favor_features f;
    favor_state st;
    float *sst;
    favor_tensor Q1, K1, V1, O1;
    struct { int what; const char *text; } bads[] = {
        { 0, "opts.softcap" }, { 1, "opts.softcap" }, { 2, "opts.softcap" },
        { 3, "opts.alibi[1]" }, { 4, "opts.alibi[1]" }, { 5, "opts.sinks[1]" },
        { 6, "opts.sinks[1]" }, { 7, "opts.dsinks is given without" },
        { 8, "opts.dsinks overlaps" }, { 9, "opts.dsinks overlaps opts.sinks" },
        { 10, "flags" }, { 11, "overlaps opts.alibi" }, { 12, "overlaps opts.sinks" },
        { 13, "opts.softcap is NaN, negative, subnormal" },
    };
    (void)state;
    prob_make(&p, c, 5);
    for (i = 0; i < no; ++i) p.o[i] = 12345.0f;
    memcpy(snap, p.o, no * 4);
    for (i = 0; i < sizeof bads / sizeof bads[0]; ++i) {
        int w = bads[i].what, bwd;
        for (bwd = 0; bwd < 2; ++bwd) {
            favor_status s;
            if (!bwd && (w == 7 || w == 8 || w == 9)) continue; /* the forward ignores dsinks */
            o = opts_of(c, &p, 0);
            memcpy(bad, p.alibi, sizeof bad);
            o.alibi = bad;
            o.error = err;
            o.error_size = sizeof err;
            err[0] = 0;
            switch (w) {
            case 0: o.softcap = -1.0f; break;
            case 1: o.softcap = NAN; break;
            case 2: o.softcap = INFINITY; break;
            case 3: bad[1] = NAN; break;
            case 4: bad[1] = -INFINITY; break;
            case 5: memcpy(bad, p.sinks, sizeof bad); bad[1] = NAN; o.sinks = bad; o.alibi = NULL; break;
            case 6: memcpy(bad, p.sinks, sizeof bad); bad[1] = INFINITY; o.sinks = bad; o.alibi = NULL; break;
            case 7: o.sinks = NULL; o.dsinks = p.dsinks; break;
            case 8: o.dsinks = p.dq + 3; break;
            case 9: o.dsinks = (float *)p.sinks + 1; break;
            case 10: o.flags |= 8u; break;
            case 11: o.alibi = bwd ? p.dq + 5 : p.o + 5; break; /* an output over the slopes */
            case 12: o.alibi = NULL; o.sinks = bwd ? p.dk : p.o; break;
            case 13: o.softcap = FLT_MIN / 2.0f; break; /* 1/c is +inf (a fuzzer's NaN) */
            }
            if (bwd)
                s = favor_softmax_attention_backward(&p.Q, &p.K, &p.V, &p.O, &p.G, &p.DQ, &p.DK,
                                                     &p.DV, &o);
            else
                s = favor_softmax_attention(&p.Q, &p.K, &p.V, &p.O, &o);
            printf("%s %-2d: %s\n", bwd ? "backward" : "forward ", w, err);
            assert_int_equal(s, w == 8 || w == 9 || w == 11 || w == 12 ? FAVOR_E_ALIAS : FAVOR_E_ARG);
            assert_non_null(strstr(err, bads[i].text));
            assert_memory_equal(p.o, snap, no * 4);
        }
    }
    /* the smallest normal softcap is allowed, and keeps zero scores finite */
    o = opts_of(c, &p, 0);
    o.softcap = FLT_MIN;
    memset(p.q, 0, c->d * sizeof(float)); /* row 0's scores are 0 */
    o.alibi = NULL;
    o.sinks = NULL;
    assert_int_equal(favor_softmax_attention(&p.Q, &p.K, &p.V, &p.O, &o), FAVOR_OK);
    for (i = 0; i < no; ++i) assert_true(isfinite(p.o[i]));
    /* -inf sinks are allowed: no sink for that head */
    o = opts_of(c, &p, 0);
    memcpy(bad, p.sinks, sizeof bad);
    bad[0] = -INFINITY;
    o.sinks = bad;
    assert_int_equal(favor_softmax_attention(&p.Q, &p.K, &p.V, &p.O, &o), FAVOR_OK);
    /* linear attention refuses every variant, writing nothing */
    assert_int_equal(favor_features_init(&f, FAVOR_ELU1, c->d, c->d, 0, 1, NULL), FAVOR_OK);
    sst = vt_alloc(favor_state_floats(&f, c->hkv, c->dv));
    assert_int_equal(favor_state_init(&st, &f, c->hkv, c->dv, sst), FAVOR_OK);
    Q1 = favor_tensor_packed(p.q, c->hq, 4, c->d);
    K1 = favor_tensor_packed(p.k, c->hkv, 4, c->d);
    V1 = favor_tensor_packed(p.v, c->hkv, 4, c->dv);
    O1 = favor_tensor_packed(p.o, c->hq, 4, c->dv);
    for (i = 0; i < no; ++i) p.o[i] = 12345.0f;
    for (i = 0; i < 6; ++i) {
        static const char *const names[6] = { "FAVOR_WINDOW", "opts.softcap", "opts.alibi",
                                              "opts.sinks", "opts.dsinks", "opts.mask" };
        int op;
        for (op = 0; op < 4; ++op) {
            favor_status s;
            o = favor_default_options();
            o.flags = FAVOR_CAUSAL;
            o.error = err;
            o.error_size = sizeof err;
            if (i == 0) o.flags |= FAVOR_WINDOW;
            if (i == 1) o.softcap = 1.0f;
            if (i == 2) o.alibi = p.alibi;
            if (i == 3) o.sinks = p.sinks;
            if (i == 4) o.dsinks = p.dsinks;
            if (i == 5) o.mask = &p.Q; /* any view: refused before its shape is read */
            err[0] = 0;
            if (op == 0) s = favor_linear_attention(&f, &p.Q, &p.K, &p.V, &p.O, &o);
            else if (op == 1) s = favor_linear_attention_backward(&f, &p.Q, &p.K, &p.V, &p.G, &p.DQ,
                                                                  &p.DK, &p.DV, &o);
            else if (op == 2) s = favor_linear_extend(&f, &st, &Q1, &K1, &V1, &O1, &o);
            else s = favor_linear_attention_workspace(&f, &p.Q, &p.K, &p.V, &o) ? FAVOR_OK
                                                                                  : FAVOR_E_ARG;
            assert_int_equal(s, FAVOR_E_ARG);
            assert_non_null(strstr(err, names[i]));
            assert_memory_equal(p.o, snap, no * 4);
        }
        printf("linear: %s\n", err);
    }
    free(sst);
    free(snap);
    prob_free(&p);
}

/* masks and sequences refused before anything is written */
static void test_validation_mask_seqs(void **state)
{
    const vcase *c = &cases[1]; /* n 200, nk 260 */
    prob p;
    char err[160];
    size_t no = c->hq * c->n * c->dv, i;
    float *snap = vt_alloc(no), *M = vt_alloc(c->hq * c->n * c->nk + 8), *big;
    favor_tensor Obig, DQbig;
    size_t bad0[3] = { 1, 100, 200 }, bad1[3] = { 0, 120, 100 }, bad2[3] = { 0, 100, 199 };
    size_t kok[3] = { 0, 100, 260 }, kbad[3] = { 0, 100, 261 }, ok[3] = { 0, 100, 200 };
    favor_tensor good = favor_tensor_packed(M, 1, c->n, c->nk), mt[7];
    struct { int i; favor_status want; const char *text; } bads[] = {
        { 0, FAVOR_E_SHAPE, "opts.mask: rows" }, { 1, FAVOR_E_SHAPE, "opts.mask: cols 261 are not" },
        { 2, FAVOR_E_SHAPE, "opts.mask: heads 2" }, { 3, FAVOR_E_SHAPE, "opts.mask: batch 2" },
        { 4, FAVOR_E_ALIAS, "overlaps opts.mask" }, { 5, FAVOR_E_ARG, "opts.seq_q[0] is 1" },
        { 6, FAVOR_E_ARG, "opts.seq_q[2] is below" }, { 7, FAVOR_E_ARG, "opts.seq_q[2] is 199" },
        { 8, FAVOR_E_ARG, "opts.seq_k[2] is 261" }, { 9, FAVOR_E_NULL, "opts.seq_q is NULL" },
        { 10, FAVOR_E_ARG, "opts.seq_k is NULL" }, { 11, FAVOR_E_ARG, "opts.mask: dtype" },
    };
    (void)state;
    prob_make(&p, c, 8);
    for (i = 0; i < 7; ++i) mt[i] = good;
    mt[0].rows = c->n - 1;
    mt[1].cols = c->nk + 1;
    mt[1].row_stride = c->nk + 1;
    mt[2].heads = 2;
    mt[2].head_stride = c->n * c->nk;
    mt[3] = favor_tensor_batched(FAVOR_F32, M, 2, 1, c->n / 2, c->nk);
    mt[3].rows = c->n;
    mt[3].batch_stride = c->n * c->nk;
    /* a mask over out (forward) or dq (backward): both views in one buffer */
    big = vt_alloc(c->n * c->nk + c->hq * c->n * c->d);
    mt[4] = favor_tensor_packed(big, 1, c->n, c->nk);
    Obig = favor_tensor_packed(big + 100, c->hq, c->n, c->dv);
    DQbig = favor_tensor_packed(big + 100, c->hq, c->n, c->d);
    mt[5] = good;
    mt[5].dtype = (favor_dtype)7;
    for (i = 0; i < no; ++i) p.o[i] = 777.0f;
    memcpy(snap, p.o, no * 4);
    for (i = 0; i < sizeof bads / sizeof bads[0]; ++i) {
        int bwd;
        for (bwd = 0; bwd < 2; ++bwd) {
            favor_options o = opts_of(c, &p, 0);
            favor_status st;
            o.error = err;
            o.error_size = sizeof err;
            err[0] = 0;
            switch (bads[i].i) {
            case 0: case 1: case 2: case 3: o.mask = &mt[bads[i].i]; break;
            case 4: o.mask = &mt[4]; break;
            case 5: o.seqs = 2; o.seq_q = bad0; o.seq_k = kok; break;
            case 6: o.seqs = 2; o.seq_q = bad1; o.seq_k = kok; break;
            case 7: o.seqs = 2; o.seq_q = bad2; o.seq_k = kok; break;
            case 8: o.seqs = 2; o.seq_q = ok; o.seq_k = kbad; break;
            case 9: o.seqs = 2; o.seq_q = NULL; o.seq_k = kok; break;
            case 10: o.seqs = 2; o.seq_q = ok; o.seq_k = NULL; break;
            case 11: o.mask = &mt[5]; break;
            }
            if (bads[i].i >= 5 && bads[i].i <= 10) { /* the workspace queries see them too */
                assert_true((bwd ? favor_softmax_attention_backward_workspace(&p.Q, &p.K, &p.V, &o)
                                 : favor_softmax_attention_workspace(&p.Q, &p.K, &p.V, &o)) == 0);
                assert_non_null(strstr(err, bads[i].text));
                err[0] = 0;
            }
            if (bwd)
                st = favor_softmax_attention_backward(&p.Q, &p.K, &p.V, &p.O, &p.G,
                                                      bads[i].i == 4 ? &DQbig : &p.DQ, &p.DK,
                                                      &p.DV, &o);
            else
                st = favor_softmax_attention(&p.Q, &p.K, &p.V, bads[i].i == 4 ? &Obig : &p.O, &o);
            printf("%s %-2d: %s\n", bwd ? "backward" : "forward ", bads[i].i, err);
            assert_int_equal(st, bads[i].want);
            assert_non_null(strstr(err, bads[i].text));
            assert_memory_equal(p.o, snap, no * 4);
        }
    }
    { /* the extend takes no packed sequences */
        favor_features f;
        favor_state st;
        float *sst;
        favor_tensor Q1 = favor_tensor_packed(p.q, c->hq, 4, c->d), K1 = favor_tensor_packed(p.k, c->hkv, 4, c->d);
        favor_tensor V1 = favor_tensor_packed(p.v, c->hkv, 4, c->dv), O1 = favor_tensor_packed(p.o, c->hq, 4, c->dv);
        favor_options o = favor_default_options();
        size_t sq[3] = { 0, 2, 4 };
        assert_int_equal(favor_features_init(&f, FAVOR_ELU1, c->d, c->d, 0, 1, NULL), FAVOR_OK);
        sst = vt_alloc(favor_state_floats(&f, c->hkv, c->dv));
        assert_int_equal(favor_state_init(&st, &f, c->hkv, c->dv, sst), FAVOR_OK);
        o.seqs = 2;
        o.seq_q = sq;
        o.error = err;
        o.error_size = sizeof err;
        assert_int_equal(favor_linear_extend(&f, &st, &Q1, &K1, &V1, &O1, &o), FAVOR_E_ARG);
        printf("extend: %s\n", err);
        assert_non_null(strstr(err, "opts.seqs"));
        assert_memory_equal(p.o, snap, no * 4);
        free(sst);
    }
    free(snap);
    free(M);
    free(big);
    prob_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accuracy),     cmocka_unit_test(test_reference_fd),
        cmocka_unit_test(test_unseen_keys),  cmocka_unit_test(test_no_future),
        cmocka_unit_test(test_dtypes),       cmocka_unit_test(test_threads),
        cmocka_unit_test(test_batch),        cmocka_unit_test(test_mask_seqs),
        cmocka_unit_test(test_mask_skips),   cmocka_unit_test(test_linear_seqs),
        cmocka_unit_test(test_validation),   cmocka_unit_test(test_validation_mask_seqs),
    };
    if (tu_check_backend()) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
