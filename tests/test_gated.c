/* Gated linear attention: opts.decay, opts.gates, FAVOR_NO_NORM and
 * FAVOR_IDENTITY, against a float64 reference (gref_linear of gated_util.h: the
 * token-by-token recurrence, per key/value head with a_t = exp(g_t) gamma,
 *     S_t = a_t S_{t-1} + phi(k_t) v_t^T,   z_t = a_t z_{t-1} + phi(k_t),
 *     o_i = phi(q_i)^T S_{p_i} [/ phi(q_i)^T z_{p_i}],  p_i = i + n_k - n,
 * rows with p_i < 0 zero; phi from ref_features, sqrt(s) x for IDENTITY).
 *
 * (1) Forward vs the reference: ELU1, POSITIVE, HYPERBOLIC, RELU, POLY2 (d <= 16),
 *     normalized and FAVOR_NO_NORM, TRIG normalized only (m = 256, inputs
 *     N(0, 0.3^2) as in test_linear.c), IDENTITY with FAVOR_NO_NORM only; over
 *     shapes with decay only, gates only, both, neither (causal and not), n = n_k,
 *     n_k > n, n_k < n, grouped heads 4:2, batch 2 with batched gates, rows-outer
 *     (interleaved) q/k/v/out and gates, fp16 q/k/v, n = 200 and 300 (several
 *     64-row chunks), and one key/value head with n_k = 1100 (split into
 *     segments: the chunk-parallel scan). Gates are log(sigmoid(x)), x ~ N(1,
 *     1.5^2) ("real", g in about [-6, 0]), or the same with every 7th gate -20 and
 *     every 5th exactly 0 ("extreme"), or x ~ N(7, 1.5^2) ("mild", g ~ -1e-3, so
 *     the state carries across 64-row chunks and 512-key segments). Every case
 *     runs with opts.threads 1 and 2: the outputs must be bit-identical (memcmp).
 *     Tolerances on |O - O_ref| (every element of row i):
 *       ELU1, POLY2 normalized               <= 2e-5 * max|V|
 *       ELU1, POLY2, IDENTITY FAVOR_NO_NORM  <= 2e-5 * max|V| * M_i, with
 *           M_i = sum_{j <= p_i} w_ij |phi(q_i)|.|phi(k_j)| (elementwise absolute
 *           values; w_ij = prod_{j<t<=p_i} a_t): fp32 sums err relative to the sum
 *           of the absolute values of their terms, and for the positive maps
 *           normalized M_i is the denominator, so this is the bound above without
 *           the division (per row: a row that sees no key must be exactly 0)
 *       POSITIVE, HYPERBOLIC, RELU, TRIG     <= 1e-4 * max|O_ref| (both forms)
 * (2) No future leakage: changing k, v and gates at every position > t leaves the
 *     rows with p_i <= t bit-identical and changes row p_i = t + 1 (ELU1 and
 *     POSITIVE, both forms; t = 5, 64, 130 at n = 200, and t = 850, 1050 with
 *     n_k = 1100, n = 300, split into segments).
 * (3) Packed sequences with gates and decay: a packed call (4 sequences, one
 *     empty, n_k != n) equals one call per sequence bit for bit.
 * (4) Extend/step parity: one causal call vs favor_linear_extend and
 *     favor_linear_step_ex in turns (extend, steps, extend, steps: 37, 5, 138
 *     and 20 rows for the mild gates, cf[] for the others), ELU1 and POSITIVE,
 *     both forms: max diff <= 1e-5 * max|O_ref|, and both within (1)'s
 *     tolerance of the reference. Gates and decay "mild" (every
 *     pending block folds lazily, 4.11), "real" (some blocks decay by more than
 *     FAVOR__SEP / 2: folded at once), "extreme" (-20: keys past FAVOR__SEP,
 *     exact factors); and gates only, "runs" (extend 32, 64 steps, extend 40, 64
 *     steps: the first run's pending blocks start with 5 tokens of gate 0, taken
 *     by favor_linear_step, whose keys the first gated token rescales; the
 *     second's have them inside).
 * (5) Validation: every refusal of the GATES rules (linear attention, softmax,
 *     extend, step_ex) returns its status and writes nothing (out keeps its
 *     sentinel bytes; a state keeps its bytes), and says why in opts.error; the
 *     same call without the fault passes. IDENTITY: count 0 or d, no storage,
 *     width d, and favor_linear_step refuses it. favor_linear_step_ex with opts
 *     NULL gives favor_linear_step's bits.
 * Decay: gamma_h = 0.97, 1, 0.9, 0.995 by head (0.999 when n_k = 1100). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <float.h>

#include "favor.h"
#include "gated_util.h"
#include "reference.h"
#include "test_util.h"
#include "test_views.h"

static const char *const gstyle_names[] = { "real", "extreme", "mild", "runs" };

/* ---- one problem: features, q/k/v/out, gates, decay, options ------------- */

typedef struct {
    size_t B, hq, hkv, n, nk, d, dv, m;
    int causal, gmode, gstyle, inter, f16;
} gshape;

typedef struct {
    gshape s;          /* d and m as used */
    favor_kernel kernel;
    int no_norm;
    favor_features f;
    float *wstore;
    gbuf Q, K, V, G, O;
    float decay[8];
    favor_options opt; /* flags, decay and gates set; gates point at G.t */
} prob;

static int prob_make(prob *p, const gshape *c, favor_kernel kernel, int no_norm,
                     unsigned long long seed)
{
    static const float gammas[4] = { 0.97f, 1.0f, 0.9f, 0.995f };
    tu_rng rng;
    size_t h;
    double sigma = kernel == FAVOR_TRIG ? 0.3 : 1.0;
    favor_dtype dt = c->f16 ? FAVOR_F16 : FAVOR_F32;
    memset(p, 0, sizeof *p);
    p->s = *c;
    p->kernel = kernel;
    p->no_norm = no_norm;
    if (kernel == FAVOR_POLY2 && p->s.d > 16) p->s.d = 16;
    p->s.m = tu_fixed(kernel) ? p->s.d : kernel == FAVOR_TRIG ? 256 : c->m;
    if (feat_make(&p->f, &p->wstore, kernel, p->s.d, p->s.m, seed)) return 1;
    rng.s = seed * 7919 + 13;
    gb_make(&p->Q, dt, c->B, c->hq, c->n, p->s.d, c->inter, &rng, sigma);
    gb_make(&p->K, dt, c->B, c->hkv, c->nk, p->s.d, c->inter, &rng, sigma);
    gb_make(&p->V, dt, c->B, c->hkv, c->nk, c->dv, c->inter, &rng, 1.0);
    gb_make(&p->O, FAVOR_F32, c->B, c->hq, c->n, c->dv, c->inter, &rng, -1);
    gb_make(&p->G, FAVOR_F32, c->B, c->hkv, c->nk, 1, c->inter, &rng, 0);
    fill_gates(&p->G.t, &rng, c->gstyle, 0);
    for (h = 0; h < c->hkv; ++h) p->decay[h] = c->nk > 1024 ? 0.999f : gammas[h % 4];
    p->opt = favor_default_options();
    p->opt.flags = (c->causal ? FAVOR_CAUSAL : 0u) | (no_norm ? FAVOR_NO_NORM : 0u);
    if (c->gmode == G_DECAY || c->gmode == G_BOTH) p->opt.decay = p->decay;
    if (c->gmode == G_GATES || c->gmode == G_BOTH) p->opt.gates = &p->G.t;
    return 0;
}

static void prob_free(prob *p)
{
    free(p->wstore);
    free(p->Q.data);
    free(p->K.data);
    free(p->V.data);
    free(p->O.data);
    free(p->G.data);
}

/* a fresh NaN-filled output shaped as p's */
static void new_out(const prob *p, gbuf *o)
{
    tu_rng r = { 1 };
    gb_make(o, FAVOR_F32, p->s.B, p->s.hq, p->s.n, p->s.dv, p->s.inter, &r, -1);
}

/* The reference of p's call over every batch element, packed [B][hq][n][dv];
 * *rtol gets (1)'s tolerance of each row ([B][hq][n], to free) and *omax
 * max|O_ref|. */
static double *prob_ref(const prob *p, double **rtol, double *omax)
{
    const gshape *c = &p->s;
    size_t b, t, no = c->hq * c->n * c->dv, nr = c->hq * c->n;
    double *ref = (double *)malloc(c->B * no * sizeof *ref);
    double *mag = (double *)malloc(c->B * nr * sizeof *mag);
    double *lg = (double *)malloc(c->hkv * c->nk * sizeof *lg + 8);
    double vmax = 0;
    rdims rd = rdims_make(c->hq, c->hkv, c->n, c->nk, c->dv, c->causal, p->no_norm);
    for (b = 0; b < c->B; ++b) {
        double *q = gb_elem(&p->Q.t, b), *k = gb_elem(&p->K.t, b), *v = gb_elem(&p->V.t, b);
        gref_linear(&p->f, &rd, q, k, v, gate_logs(&p->opt, b, c->hkv, c->nk, lg), ref + b * no,
                    mag + b * nr);
        if (tu_max_abs(v, c->hkv * c->nk * c->dv) > vmax)
            vmax = tu_max_abs(v, c->hkv * c->nk * c->dv);
        free(q);
        free(k);
        free(v);
    }
    *omax = tu_max_abs(ref, c->B * no);
    for (t = 0; t < c->B * nr; ++t)
        mag[t] = !tu_fixed(p->kernel) ? 1e-4 * *omax
                 : p->no_norm         ? 2e-5 * vmax * mag[t]
                                      : 2e-5 * vmax;
    *rtol = mag;
    free(lg);
    return ref;
}

/* max |o - ref| over every element of o (fp32, p's output shape); with rtol,
 * *ratio = the largest |o - ref| / rtol of its row (NaN and inf: the maximum) */
static double out_err(const prob *p, const favor_tensor *o, const double *ref,
                      const double *rtol, double *ratio)
{
    size_t b, h, i, c, at = 0, row = 0;
    double m = 0, r = 0;
    for (b = 0; b < p->s.B; ++b)
        for (h = 0; h < p->s.hq; ++h)
            for (i = 0; i < p->s.n; ++i, ++row)
                for (c = 0; c < p->s.dv; ++c, ++at) {
                    double e = fabs(gb_get(o, b, h, i, c) - ref[at]);
                    if (!(e <= m)) m = e; /* NaN is the maximum */
                    if (rtol && !(e == 0 || e / rtol[row] <= r)) r = e / rtol[row];
                }
    if (ratio) *ratio = r;
    return m;
}

static favor_status linear(const prob *p, const favor_tensor *out, const favor_options *o)
{
    return favor_linear_attention(&p->f, &p->Q.t, &p->K.t, &p->V.t, out, o);
}

/* ---- (1) forward against the reference ----------------------------------- */

static const gshape fw_shapes[] = {
    /* B hq hkv    n    nk   d  dv   m causal gmode    gstyle   inter f16 */
    { 1, 1, 1,  200,  200, 64, 32, 64, 1, G_BOTH,  GS_REAL,    0, 0 },
    { 1, 4, 2,   70,  150, 16,  8, 32, 1, G_GATES, GS_REAL,    1, 0 },
    { 1, 2, 2,  150,   90, 16, 16, 32, 1, G_DECAY, GS_REAL,    0, 0 },
    { 2, 4, 2,  100,  100, 16, 16, 32, 1, G_BOTH,  GS_REAL,    0, 0 },
    { 2, 2, 1,   90,  130, 16, 16, 32, 1, G_BOTH,  GS_MILD,    1, 0 },
    { 1, 1, 1,  130,  130, 32, 16, 64, 1, G_NONE,  GS_REAL,    0, 0 },
    { 1, 4, 2,   50,  120, 16,  8, 32, 0, G_NONE,  GS_REAL,    1, 0 },
    { 1, 2, 1,  150,  120, 16, 16, 32, 1, G_GATES, GS_EXTREME, 0, 0 },
    { 1, 2, 2,  100,  100, 16, 16, 32, 1, G_BOTH,  GS_REAL,    1, 1 },
    /* one key/value head of 1100 keys: segments of 512 (the chunk-parallel scan) */
    { 2, 2, 1,  300, 1100, 16,  8, 32, 1, G_BOTH,  GS_MILD,    0, 0 },
    { 1, 1, 1,   40, 1100, 16, 16, 32, 1, G_DECAY, GS_REAL,    0, 0 },
};

static int run_forward(size_t idx, const gshape *c, favor_kernel kernel, int no_norm)
{
    prob p;
    gbuf O2;
    favor_status st;
    int fails = 0;
    if (prob_make(&p, c, kernel, no_norm, 100 + idx * 16 + (unsigned)kernel)) return 1;
    new_out(&p, &O2);
    p.opt.threads = 1;
    st = linear(&p, &p.O.t, &p.opt);
    if (st == FAVOR_OK) {
        p.opt.threads = 2;
        st = linear(&p, &O2.t, &p.opt);
    }
    print_message("fwd %2u %-10s %-7s B%u hq%u hkv%u n%u nk%u d%u dv%u m%u %s %s %s%s%s: ",
                  (unsigned)idx, tu_kernel_name(kernel), no_norm ? "no_norm" : "norm",
                  (unsigned)c->B, (unsigned)c->hq, (unsigned)c->hkv, (unsigned)c->n,
                  (unsigned)c->nk, (unsigned)p.s.d, (unsigned)c->dv, (unsigned)p.s.m,
                  c->causal ? "causal" : "full", gmode_names[c->gmode], gstyle_names[c->gstyle],
                  c->inter ? " inter" : "", c->f16 ? " f16" : "");
    if (st != FAVOR_OK) {
        print_message("\n");
        print_error("  status %s\n", favor_status_string(st));
        ++fails;
    } else {
        double *rtol, omax, ratio, *ref = prob_ref(&p, &rtol, &omax);
        double err = out_err(&p, &p.O.t, ref, rtol, &ratio);
        print_message("err %.3g  err/tol %.4f  max|O_ref| %.3g\n", err, ratio, omax);
        if (!(ratio <= 1)) {
            print_error("  accuracy: max|err| %.6g, err/tol %.6g > 1\n", err, ratio);
            ++fails;
        }
        if (memcmp(p.O.data, O2.data, p.O.len * sizeof(float)) != 0) {
            print_error("  threads 1 and 2 differ: max diff %.3g\n",
                        out_err(&p, &O2.t, ref, NULL, NULL));
            ++fails;
        }
        free(rtol);
        free(ref);
    }
    free(O2.data);
    prob_free(&p);
    return fails;
}

static void test_gated_forward(void **state)
{
    static const favor_kernel ks[] = { FAVOR_ELU1, FAVOR_POSITIVE, FAVOR_HYPERBOLIC,
                                       FAVOR_RELU, FAVOR_TRIG, FAVOR_POLY2, FAVOR_IDENTITY };
    size_t i, k;
    int nn, fails = 0;
    double t0 = now();
    (void)state;
    for (i = 0; i < sizeof fw_shapes / sizeof fw_shapes[0]; ++i)
        for (k = 0; k < sizeof ks / sizeof ks[0]; ++k)
            for (nn = 0; nn < 2; ++nn) {
                if (ks[k] == FAVOR_IDENTITY && !nn) continue; /* NO_NORM only */
                if (ks[k] == FAVOR_TRIG && nn) continue;      /* normalized only */
                fails += run_forward(i, &fw_shapes[i], ks[k], nn);
            }
    print_message("forward: %.2f s\n", now() - t0);
    assert_int_equal(fails, 0);
}

/* ---- (2) no future leakage -------------------------------------------------- */

static int leak_case(const gshape *c, favor_kernel kernel, int no_norm, const size_t *ts,
                     size_t nts)
{
    prob p;
    gbuf O1;
    size_t it, b, h, r, col, off = c->nk - c->n;
    int fails = 0;
    favor_status st;
    void *k0, *v0, *g0;
    tu_rng rng = { 4711 };
    if (prob_make(&p, c, kernel, no_norm, 900 + (unsigned)kernel)) return 1;
    k0 = gb_snap(&p.K);
    v0 = gb_snap(&p.V);
    g0 = gb_snap(&p.G);
    st = linear(&p, &p.O.t, &p.opt);
    for (it = 0; it < nts && st == FAVOR_OK; ++it) {
        size_t t = ts[it], bad = 0, changed = 0;
        for (b = 0; b < c->B; ++b)
            for (h = 0; h < c->hkv; ++h)
                for (r = t + 1; r < c->nk; ++r) {
                    for (col = 0; col < p.s.d; ++col)
                        gb_set(&p.K.t, b, h, r, col, 2 * tu_normal(&rng));
                    for (col = 0; col < c->dv; ++col)
                        gb_set(&p.V.t, b, h, r, col, 2 * tu_normal(&rng));
                }
        fill_gates(&p.G.t, &rng, GS_REAL, t + 1);
        new_out(&p, &O1);
        st = linear(&p, &O1.t, &p.opt);
        if (st == FAVOR_OK)
            for (b = 0; b < c->B; ++b)
                for (h = 0; h < c->hq; ++h)
                    for (r = 0; r < c->n && r + off <= t + 1; ++r)
                        for (col = 0; col < c->dv; ++col) {
                            float a = (float)gb_get(&p.O.t, b, h, r, col);
                            float e = (float)gb_get(&O1.t, b, h, r, col);
                            int same = memcmp(&a, &e, sizeof a) == 0;
                            if (r + off <= t && !same) {
                                if (bad++ < 3)
                                    print_error("  t %u: row %u head %u col %u changed: %.9g "
                                                "-> %.9g\n", (unsigned)t, (unsigned)r,
                                                (unsigned)h, (unsigned)col, (double)a,
                                                (double)e);
                            }
                            if (r + off == t + 1 && !same) changed = 1;
                        }
        print_message("leak %-8s %-7s nk %4u t %4u: %u rows' elements changed%s\n",
                      tu_kernel_name(kernel), no_norm ? "no_norm" : "norm", (unsigned)c->nk,
                      (unsigned)t, (unsigned)bad, changed ? "" : ", row t+1 did NOT change");
        if (bad || !changed) ++fails;
        free(O1.data);
        memcpy(p.K.data, k0, p.K.len * 4);
        memcpy(p.V.data, v0, p.V.len * 4);
        memcpy(p.G.data, g0, p.G.len * 4);
    }
    if (st != FAVOR_OK) {
        print_error("  leak %s: status %s\n", tu_kernel_name(kernel), favor_status_string(st));
        ++fails;
    }
    free(k0);
    free(v0);
    free(g0);
    prob_free(&p);
    return fails;
}

static void test_gated_no_future(void **state)
{
    static const gshape s1 = { 1, 4, 2, 200, 200, 16, 16, 32, 1, G_BOTH, GS_REAL, 1, 0 };
    static const gshape s2 = { 1, 2, 1, 300, 1100, 16, 8, 32, 1, G_BOTH, GS_MILD, 0, 0 };
    static const size_t t1[] = { 5, 64, 130 }, t2[] = { 850, 1050 };
    int nn, fails = 0;
    double t0 = now();
    (void)state;
    for (nn = 0; nn < 2; ++nn) {
        fails += leak_case(&s1, FAVOR_ELU1, nn, t1, 3);
        fails += leak_case(&s1, FAVOR_POSITIVE, nn, t1, 3);
        fails += leak_case(&s2, FAVOR_ELU1, nn, t2, 2);
        fails += leak_case(&s2, FAVOR_POSITIVE, nn, t2, 2);
    }
    print_message("no future: %.2f s\n", now() - t0);
    assert_int_equal(fails, 0);
}

/* ---- (3) packed sequences -------------------------------------------------- */

static void test_gated_packed(void **state)
{
    /* 4 sequences, one empty; then 2, the second of 1100 keys (split into segments) */
    static const gshape s[2] = { { 1, 4, 2, 141, 261, 16, 16, 32, 1, G_BOTH, GS_REAL, 1, 0 },
                                 { 1, 2, 1, 330, 1150, 16, 8, 32, 1, G_BOTH, GS_MILD, 0, 0 } };
    static const size_t sq0[] = { 0, 40, 40, 41, 141 }, sk0[] = { 0, 60, 60, 61, 261 };
    static const size_t sq1[] = { 0, 30, 330 }, sk1[] = { 0, 50, 1150 };
    static const favor_kernel ks[] = { FAVOR_ELU1, FAVOR_POSITIVE };
    size_t k, q, l;
    int nn, fails = 0;
    (void)state;
    for (l = 0; l < 2; ++l)
        for (k = 0; k < 2; ++k)
            for (nn = 0; nn < 2; ++nn) {
                const size_t *sq = l ? sq1 : sq0, *sk = l ? sk1 : sk0, ns = l ? 2 : 4;
                prob p;
                gbuf O2;
                favor_options po;
                favor_status st;
                int same;
                if (prob_make(&p, &s[l], ks[k], nn, 300 + k)) {
                    ++fails;
                    continue;
                }
                new_out(&p, &O2);
                po = p.opt;
                po.seqs = ns;
                po.seq_q = sq;
                po.seq_k = sk;
                st = linear(&p, &p.O.t, &po);
                for (q = 0; q < ns && st == FAVOR_OK; ++q) {
                    size_t r0 = sq[q], nr = sq[q + 1] - sq[q], k0 = sk[q], nk = sk[q + 1] - k0;
                    favor_tensor tq = tv_rows(&p.Q.t, r0, nr), to = tv_rows(&O2.t, r0, nr);
                    favor_tensor tk = tv_rows(&p.K.t, k0, nk), tv = tv_rows(&p.V.t, k0, nk);
                    favor_tensor tg = tv_rows(&p.G.t, k0, nk);
                    favor_options so = p.opt;
                    if (nr == 0) continue;
                    so.gates = &tg;
                    st = favor_linear_attention(&p.f, &tq, &tk, &tv, &to, &so);
                }
                same = st == FAVOR_OK && memcmp(p.O.data, O2.data, p.O.len * 4) == 0;
                print_message("packed %u seqs, n_k %4u, %-8s %-7s: %s, %s\n", (unsigned)ns,
                              (unsigned)s[l].nk, tu_kernel_name(ks[k]), nn ? "no_norm" : "norm",
                              favor_status_string(st), same ? "bit-identical" : "DIFFER");
                if (!same) {
                    if (st == FAVOR_OK)
                        print_error("  packed vs per-sequence: max diff %.3g\n",
                                    tu_max_diff(&p.O.t, &O2.t));
                    ++fails;
                }
                free(O2.data);
                prob_free(&p);
            }
    assert_int_equal(fails, 0);
}

/* ---- (4) extend / step parity ----------------------------------------------- */

static void test_gated_recurrent(void **state)
{
    /* gates and runs: extend, steps, extend, steps */
    static const struct {
        int gmode, gstyle;
        size_t runs[4];
    } cf[] = { { G_BOTH, GS_MILD, { 37, 5, 138, 20 } },
               { G_BOTH, GS_REAL, { 37, 45, 98, 20 } },
               { G_BOTH, GS_EXTREME, { 21, 70, 40, 69 } },
               { G_GATES, GS_RUNS, { 32, 64, 40, 64 } } };
    static const favor_kernel ks[] = { FAVOR_ELU1, FAVOR_POSITIVE };
    gshape s = { 1, 4, 2, 200, 200, 16, 16, 32, 1, G_BOTH, GS_MILD, 0, 0 };
    size_t k, i, t, ci;
    int nn, fails = 0;
    double t0 = now();
    (void)state;
    for (ci = 0; ci < sizeof cf / sizeof cf[0]; ++ci)
    for (k = 0; k < 2; ++k)
        for (nn = 0; nn < 2; ++nn) {
            const size_t *runs = cf[ci].runs;
            prob p;
            gbuf O2;
            favor_state rs;
            float *store;
            favor_status st;
            size_t r0 = 0;
            s.gmode = cf[ci].gmode;
            s.gstyle = cf[ci].gstyle;
            if (prob_make(&p, &s, ks[k], nn, 500 + k)) {
                ++fails;
                continue;
            }
            new_out(&p, &O2);
            st = linear(&p, &p.O.t, &p.opt);
            store = (float *)malloc(favor_state_floats(&p.f, s.hkv, s.dv) * sizeof *store);
            if (st == FAVOR_OK) st = favor_state_init(&rs, &p.f, s.hkv, s.dv, store);
            for (i = 0; i < 4 && st == FAVOR_OK; ++i)
                for (t = 0; t < (i % 2 ? runs[i] : 1) && st == FAVOR_OK; ++t) {
                    size_t len = i % 2 ? 1 : runs[i];
                    favor_tensor q = tv_rows(&p.Q.t, r0, len), kk = tv_rows(&p.K.t, r0, len);
                    favor_tensor v = tv_rows(&p.V.t, r0, len), o = tv_rows(&O2.t, r0, len);
                    favor_tensor g = tv_rows(&p.G.t, r0, len);
                    favor_options eo = p.opt;
                    eo.gates = &g;
                    if (i % 2 && s.gmode == G_GATES && gb_get(&p.G.t, 0, 0, r0, 0) == 0.0 &&
                        gb_get(&p.G.t, 0, 1, r0, 0) == 0.0) { /* gate 0: as an ungated step */
                        eo.gates = NULL;
                        st = nn ? favor_linear_step_ex(&p.f, &rs, &q, &kk, &v, &o, &eo)
                                : favor_linear_step(&p.f, &rs, &q, &kk, &v, &o);
                    } else if (i % 2) {
                        eo.flags &= ~FAVOR_CAUSAL; /* optional for a step */
                        st = favor_linear_step_ex(&p.f, &rs, &q, &kk, &v, &o, &eo);
                    } else {
                        st = favor_linear_extend(&p.f, &rs, &q, &kk, &v, &o, &eo);
                    }
                    r0 += len;
                }
            if (st != FAVOR_OK) {
                print_error("recurrent %s: status %s at row %u\n", tu_kernel_name(ks[k]),
                            favor_status_string(st), (unsigned)r0);
                ++fails;
            } else {
                double *rtol, omax, r1, r2, *ref = prob_ref(&p, &rtol, &omax);
                double e1 = out_err(&p, &p.O.t, ref, rtol, &r1);
                double e2 = out_err(&p, &O2.t, ref, rtol, &r2);
                double *one = gb_elem(&p.O.t, 0);
                double par = out_err(&p, &O2.t, one, NULL, NULL);
                print_message("recurrent %-7s %-8s %-7s: call - ref %.3g (err/tol %.4f), "
                              "extend/step - ref %.3g (%.4f), extend/step - call %.3g "
                              "(tol 1e-5 max|O_ref| = %.3g)\n", gstyle_names[s.gstyle],
                              tu_kernel_name(ks[k]), nn ? "no_norm" : "norm", e1, r1, e2, r2,
                              par, 1e-5 * omax);
                if (!(r1 <= 1) || !(r2 <= 1) || !(par <= 1e-5 * omax)) {
                    print_error("  recurrent %s: out of tolerance\n", tu_kernel_name(ks[k]));
                    ++fails;
                }
                free(one);
                free(rtol);
                free(ref);
            }
            free(store);
            free(O2.data);
            prob_free(&p);
        }
    print_message("recurrent: %.2f s\n", now() - t0);
    assert_int_equal(fails, 0);
}

/* ---- (5) validation ------------------------------------------------------------ */

enum { C_LINEAR, C_SOFTMAX, C_EXTEND, C_STEP };          /* the entry point */
enum { GV_OK, GV_ROWS, GV_COLS, GV_HEADS, GV_BATCH, GV_F16 }; /* the gates view */

typedef struct {
    const char *what;
    int call, ident;    /* ident: FAVOR_IDENTITY, else ELU1 */
    unsigned flags;
    int opts;           /* 1: decay, 2: gates */
    int gview, setg;    /* setg: gate value written at head 1, row 3 (row 0 for a step) */
    float gate;
    int setd;           /* setd: decay[1] = gamma */
    float gamma;
    favor_status want;
} vcase;

#define CA FAVOR_CAUSAL
#define NN FAVOR_NO_NORM
#define EA FAVOR_E_ARG
#define ES FAVOR_E_SHAPE
static const vcase vcases[] = {
    { "gates+decay, not causal",    C_LINEAR,  0, 0,       3, GV_OK,    0, 0, 0, 0, EA },
    { "gates, not causal",          C_LINEAR,  0, 0,       2, GV_OK,    0, 0, 0, 0, EA },
    { "decay, not causal",          C_LINEAR,  0, 0,       1, GV_OK,    0, 0, 0, 0, EA },
    { "gates, NO_NORM, not causal", C_LINEAR,  0, NN,      2, GV_OK,    0, 0, 0, 0, EA },
    { "gate 0.5",                   C_LINEAR,  0, CA,      3, GV_OK,    1, 0.5f, 0, 0, EA },
    { "gate 1e-30",                 C_LINEAR,  0, CA,      2, GV_OK,    1, 1e-30f, 0, 0, EA },
    { "gate NaN",                   C_LINEAR,  0, CA | NN, 3, GV_OK,    1, NAN, 0, 0, EA },
    { "gate -inf",                  C_LINEAR,  0, CA,      3, GV_OK,    1, -INFINITY, 0, 0, EA },
    { "gamma 0",                    C_LINEAR,  0, CA,      1, GV_OK,    0, 0, 1, 0.0f, EA },
    { "gamma -0.5",                 C_LINEAR,  0, CA,      3, GV_OK,    0, 0, 1, -0.5f, EA },
    { "gamma 1.5",                  C_LINEAR,  0, CA,      1, GV_OK,    0, 0, 1, 1.5f, EA },
    { "gamma 1 + 2^-23",            C_LINEAR,  0, CA | NN, 1, GV_OK,    0, 0, 1, 1.00000012f, EA },
    { "gamma NaN",                  C_LINEAR,  0, CA,      1, GV_OK,    0, 0, 1, NAN, EA },
    { "gates rows n_k - 1",         C_LINEAR,  0, CA,      2, GV_ROWS,  0, 0, 0, 0, ES },
    { "gates cols 2",               C_LINEAR,  0, CA,      2, GV_COLS,  0, 0, 0, 0, ES },
    { "gates heads 1",              C_LINEAR,  0, CA,      2, GV_HEADS, 0, 0, 0, 0, ES },
    { "gates batch 2, k unbatched", C_LINEAR,  0, CA,      2, GV_BATCH, 0, 0, 0, 0, ES },
    { "gates fp16",                 C_LINEAR,  0, CA,      2, GV_F16,   0, 0, 0, 0, EA },
    { "IDENTITY normalized",        C_LINEAR,  1, 0,       0, GV_OK,    0, 0, 0, 0, EA },
    { "IDENTITY normalized causal", C_LINEAR,  1, CA,      0, GV_OK,    0, 0, 0, 0, EA },
    { "IDENTITY normalized gated",  C_LINEAR,  1, CA,      3, GV_OK,    0, 0, 0, 0, EA },
    { "softmax gates",              C_SOFTMAX, 0, CA,      2, GV_OK,    0, 0, 0, 0, EA },
    { "softmax decay",              C_SOFTMAX, 0, CA,      1, GV_OK,    0, 0, 0, 0, EA },
    { "softmax NO_NORM",            C_SOFTMAX, 0, CA | NN, 0, GV_OK,    0, 0, 0, 0, EA },
    { "softmax NO_NORM, not causal",C_SOFTMAX, 0, NN,      0, GV_OK,    0, 0, 0, 0, EA },
    { "extend gate 0.25",           C_EXTEND,  0, CA,      3, GV_OK,    1, 0.25f, 0, 0, EA },
    { "extend gates rows n - 1",    C_EXTEND,  0, CA | NN, 3, GV_ROWS,  0, 0, 0, 0, ES },
    { "extend gamma 1.5",           C_EXTEND,  0, CA,      3, GV_OK,    0, 0, 1, 1.5f, EA },
    { "extend gates fp16",          C_EXTEND,  0, CA,      2, GV_F16,   0, 0, 0, 0, EA },
    { "extend IDENTITY normalized", C_EXTEND,  1, CA,      3, GV_OK,    0, 0, 0, 0, EA },
    { "step_ex gates rows 2",       C_STEP,    0, NN,      2, GV_ROWS,  0, 0, 0, 0, ES },
    { "step_ex gate NaN",           C_STEP,    0, 0,       3, GV_OK,    1, NAN, 0, 0, EA },
    { "step_ex gamma 0",            C_STEP,    0, NN,      1, GV_OK,    0, 0, 1, 0.0f, EA },
    { "step_ex IDENTITY normalized",C_STEP,    1, 0,       0, GV_OK,    0, 0, 0, 0, EA },
};
#undef CA
#undef NN
#undef EA
#undef ES

#define VH 2  /* heads (q and k/v) */
#define VN 10 /* rows */
#define VD 8  /* d and d_v */

/* Each refusal returns its status, leaves out (sentinel -7) and a state (bytes)
 * as they were, and writes a line to opts.error. The valid calls beside them pass. */
static void test_gated_validation(void **state)
{
    static float vq[VH * VN * VD], vk[VH * VN * VD], vv[VH * VN * VD], vo[VH * VN * VD];
    static float vg[2 * VH * VN * 2]; /* gates, room for cols 2 and batch 2 */
    favor_features fe, fi;
    favor_tensor Q = favor_tensor_packed(vq, VH, VN, VD), K = favor_tensor_packed(vk, VH, VN, VD);
    favor_tensor V = favor_tensor_packed(vv, VH, VN, VD), O = favor_tensor_packed(vo, VH, VN, VD);
    favor_tensor G = favor_tensor_packed(vg, VH, VN, 1);
    float decay[VH] = { 0.9f, 0.95f }, *store, *copy;
    char err[256];
    tu_rng rng = { 2027 };
    size_t i, c, fl;
    int fails = 0;
    (void)state;
    for (i = 0; i < VH * VN * VD; ++i) {
        vq[i] = (float)tu_normal(&rng);
        vk[i] = (float)tu_normal(&rng);
        vv[i] = (float)tu_normal(&rng);
    }
    for (i = 0; i < sizeof vg / sizeof vg[0]; ++i) vg[i] = -0.1f;
    /* IDENTITY: no W, count 0 or d, width d */
    assert_int_equal(favor_features_floats(FAVOR_IDENTITY, VD, VD), 0);
    assert_int_equal(favor_features_init(&fi, FAVOR_IDENTITY, VD, 5, 0, 1, NULL), FAVOR_E_SHAPE);
    assert_int_equal(favor_features_init(&fi, FAVOR_IDENTITY, VD, 0, 0, 1, NULL), FAVOR_OK);
    assert_int_equal(fi.count, VD);
    assert_int_equal(favor_features_width(&fi), VD);
    assert_int_equal(favor_features_init(&fi, FAVOR_IDENTITY, VD, VD, 0, 1, NULL), FAVOR_OK);
    assert_int_equal(favor_features_init(&fe, FAVOR_ELU1, VD, VD, 0, 1, NULL), FAVOR_OK);
    fl = favor_state_floats(&fe, VH, VD);
    assert_int_equal(favor_state_floats(&fi, VH, VD), fl);
    store = (float *)malloc(fl * sizeof *store);
    copy = (float *)malloc(fl * sizeof *copy);

    for (c = 0; c < sizeof vcases / sizeof vcases[0]; ++c) {
        const vcase *vc = &vcases[c];
        favor_features *f = vc->ident ? &fi : &fe;
        int step = vc->call == C_STEP;
        size_t rows = step ? 1 : VN, grow = step ? 0 : 3;
        favor_tensor q = tv_rows(&Q, 0, rows), k = tv_rows(&K, 0, rows), v = tv_rows(&V, 0, rows);
        favor_tensor o = tv_rows(&O, 0, rows), g = tv_rows(&G, 0, rows);
        favor_options op = favor_default_options();
        favor_state st;
        favor_status s = FAVOR_OK;
        switch (vc->gview) {
        case GV_ROWS: g.rows = step ? 2 : VN - 1; break;
        case GV_COLS: g = favor_tensor_packed(vg, VH, VN, 2); break;
        case GV_HEADS: g.heads = 1; break;
        case GV_BATCH: g = favor_tensor_batched(FAVOR_F32, vg, 2, VH, VN, 1); break;
        case GV_F16: g.dtype = FAVOR_F16; break;
        }
        op.flags = vc->flags;
        op.error = err;
        op.error_size = sizeof err;
        if (vc->opts & 1) op.decay = decay;
        if (vc->opts & 2) op.gates = &g;
        if (vc->call == C_EXTEND || step) { /* a state that holds 3 + 1 tokens */
            favor_options ok = favor_default_options();
            favor_tensor g3 = tv_rows(&G, 0, 3), g1 = tv_rows(&G, 0, 1);
            favor_tensor q3 = tv_rows(&Q, 0, 3), k3 = tv_rows(&K, 0, 3), v3 = tv_rows(&V, 0, 3);
            favor_tensor o3 = tv_rows(&O, 0, 3), q1 = tv_rows(&Q, 0, 1), k1 = tv_rows(&K, 0, 1);
            favor_tensor v1 = tv_rows(&V, 0, 1), o1 = tv_rows(&O, 0, 1);
            ok.flags = FAVOR_CAUSAL | FAVOR_NO_NORM;
            ok.decay = decay;
            ok.gates = &g3;
            assert_int_equal(favor_state_init(&st, f, VH, VD, store), FAVOR_OK);
            s = favor_linear_extend(f, &st, &q3, &k3, &v3, &o3, &ok);
            ok.gates = &g1;
            if (s == FAVOR_OK) s = favor_linear_step_ex(f, &st, &q1, &k1, &v1, &o1, &ok);
            if (s != FAVOR_OK) {
                print_error("  %s: the valid extend and step first: %s\n", vc->what,
                            favor_status_string(s));
                ++fails;
            }
            memcpy(copy, store, fl * sizeof *store);
        }
        for (i = 0; i < VH * VN * VD; ++i) vo[i] = -7.0f;
        if (vc->setg) vg[VN + grow] = vc->gate;
        if (vc->setd) decay[1] = vc->gamma;
        err[0] = 0;
        switch (vc->call) {
        case C_LINEAR: s = favor_linear_attention(f, &q, &k, &v, &o, &op); break;
        case C_SOFTMAX: s = favor_softmax_attention(&q, &k, &v, &o, &op); break;
        case C_EXTEND: s = favor_linear_extend(f, &st, &q, &k, &v, &o, &op); break;
        case C_STEP: s = favor_linear_step_ex(f, &st, &q, &k, &v, &o, &op); break;
        }
        vg[VN + grow] = -0.1f;
        decay[1] = 0.95f;
        print_message("validation %-28s %s  \"%s\"\n", vc->what, favor_status_string(s), err);
        if (s != vc->want) {
            print_error("  %s: got %s, want %s\n", vc->what, favor_status_string(s),
                        favor_status_string(vc->want));
            ++fails;
        } else if (err[0] == 0) {
            print_error("  %s: no text in opts.error\n", vc->what);
            ++fails;
        }
        for (i = 0; i < VH * VN * VD; ++i)
            if (vo[i] != -7.0f) {
                print_error("  %s: out written (element %u is %g)\n", vc->what, (unsigned)i,
                            (double)vo[i]);
                ++fails;
                break;
            }
        if ((vc->call == C_EXTEND || step) && memcmp(copy, store, fl * sizeof *store) != 0) {
            print_error("  %s: the state changed\n", vc->what);
            ++fails;
        }
        /* the same call without the fault passes (IDENTITY: with FAVOR_NO_NORM) */
        if (vc->call != C_SOFTMAX && (vc->setg || vc->setd || vc->ident)) {
            op.flags |= FAVOR_CAUSAL | (vc->ident ? FAVOR_NO_NORM : 0u);
            s = vc->call == C_LINEAR   ? favor_linear_attention(f, &q, &k, &v, &o, &op)
                : vc->call == C_EXTEND ? favor_linear_extend(f, &st, &q, &k, &v, &o, &op)
                                       : favor_linear_step_ex(f, &st, &q, &k, &v, &o, &op);
            if (s != FAVOR_OK) {
                print_error("  %s: without the fault: %s\n", vc->what, favor_status_string(s));
                ++fails;
            }
        }
    }
    /* favor_linear_step_ex with opts NULL is favor_linear_step, bit for bit */
    {
        favor_state s1, s2;
        float *m2 = (float *)malloc(fl * sizeof *m2), o2[VH * VN * VD];
        favor_status a = favor_state_init(&s1, &fe, VH, VD, store), b;
        b = favor_state_init(&s2, &fe, VH, VD, m2);
        for (i = 0; i < VN && a == FAVOR_OK && b == FAVOR_OK; ++i) {
            favor_tensor q = tv_rows(&Q, i, 1), k = tv_rows(&K, i, 1), v = tv_rows(&V, i, 1);
            favor_tensor o = tv_rows(&O, i, 1), x = o;
            x.data = o2 + i * VD;
            a = favor_linear_step(&fe, &s1, &q, &k, &v, &o);
            b = favor_linear_step_ex(&fe, &s2, &q, &k, &v, &x, NULL);
        }
        if (a != FAVOR_OK || b != FAVOR_OK || memcmp(vo, o2, sizeof o2) != 0) {
            print_error("  step_ex(NULL) differs from step (%s, %s)\n", favor_status_string(a),
                        favor_status_string(b));
            ++fails;
        }
        /* IDENTITY cannot step without options (it needs FAVOR_NO_NORM) */
        for (i = 0; i < VH * VN * VD; ++i) vo[i] = -7.0f;
        b = favor_state_init(&s2, &fi, VH, VD, m2);
        if (b == FAVOR_OK) {
            favor_tensor q = tv_rows(&Q, 0, 1), k = tv_rows(&K, 0, 1), v = tv_rows(&V, 0, 1);
            favor_tensor o = tv_rows(&O, 0, 1);
            b = favor_linear_step(&fi, &s2, &q, &k, &v, &o);
        }
        print_message("validation %-28s %s\n", "step IDENTITY", favor_status_string(b));
        if (b != FAVOR_E_ARG || vo[0] != -7.0f) {
            print_error("  favor_linear_step with IDENTITY: %s, out[0] %g\n",
                        favor_status_string(b), (double)vo[0]);
            ++fails;
        }
        free(m2);
    }
    free(store);
    free(copy);
    assert_int_equal(fails, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gated_validation),
        cmocka_unit_test(test_gated_forward),
        cmocka_unit_test(test_gated_no_future),
        cmocka_unit_test(test_gated_packed),
        cmocka_unit_test(test_gated_recurrent),
    };
    if (tu_check_backend() != 0) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
