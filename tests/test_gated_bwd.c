/* The backward of gated linear attention: favor_linear_attention_backward with
 * opts.decay, opts.gates, opts.dgates, FAVOR_NO_NORM and FAVOR_IDENTITY.
 *
 * L = sum dout (.) out throughout. Per key/value head, a_t = gamma_h exp(g_t),
 * A_ij = prod_{j<t<=p_i} a_t (p_i = i + n_k - n, the row's key position; rows
 * with p_i < 0 see no key), c_ij = A_ij phi(q_i).phi(k_j) over the keys j <= p_i
 * (every key, A = 1, when not causal), num_i = sum_j c_ij v_j, den_i = sum_j
 * c_ij, o_i = num_i / den_i (num_i with FAVOR_NO_NORM). The float64 reference
 * gradient written here (gref_backward) is analytic in O(n n_k) per head for
 * the attention part:
 *     dnum_i = dout_i / den_i, dden_i = -dout_i.o_i / den_i (normalized),
 *     dnum_i = dout_i, dden_i = 0 (FAVOR_NO_NORM); dc_ij = v_j.dnum_i + dden_i;
 *     dphi(q_i) = sum_j dc_ij A_ij phi(k_j), dphi(k_j) = sum_i dc_ij A_ij phi(q_i),
 *     dv_j = sum_i c_ij dnum_i, dg_t = sum_{j < t <= p_i} dc_ij c_ij (summed over
 *     the query heads of the key/value head, pair by pair), so dg_0 = 0,
 * and takes the feature map's Jacobian by central differences of the double map
 * (ref_features; sqrt(s) x for IDENTITY) per input element, step h = 1e-6
 * max(1, |x_a|): dx_a = sum_l dphi_l (phi_l(x + h e_a) - phi_l(x - h e_a)) / 2h.
 * Magnitudes of dg's terms, with m_ij = A_ij (|phi(q_i)|.|phi(k_j)|) (|dnum_i|.
 * |v_j| + |dout_i|.|o_i| / den_i) (elementwise absolute values; the last term
 * normalized only):
 *     M_t = sum_{j < t <= p_i} m_ij, the pairs dg_t sums;
 *     N_t = sum_{p >= t} (|X|_p + |Y|_p), |X|_p = sum_{j <= p} m_pj (row p's
 *     pairs), |Y|_p = sum_{p_i >= p} m_ip (key p's pairs): the terms of
 *     dg_t = sum_{p >= t} (X_p - Y_p), X_p = phi(q_p).dphi(q_p), Y_p =
 *     phi(k_p).dphi(k_p), the form the library evaluates (favor__dg_finish).
 *
 * (1a) reference_fd: the reference against central differences (step 1e-5
 *     max(1, |x|)) of L over a token-by-token float64 forward (gref_linear of
 *     gated_util.h, the recurrence S_t = a_t S_{t-1} + phi(k_t) v_t^T that
 *     tests/test_gated.c checks the forward against), for
 *     dq, dk, dv and the gradient of every log-decay (dg; also with decay only),
 *     every map (ELU1, POSITIVE, HYPERBOLIC, RELU, POLY2 normalized and
 *     FAVOR_NO_NORM, TRIG normalized, IDENTITY FAVOR_NO_NORM), gate modes none,
 *     decay, gates, both (causal) and not causal without gates (both forms), on
 *     hq 2 x hkv 1, n 5, n_k 7, m 4 (real gates) and hq 2 x hkv 2, n 6, n_k 4,
 *     m 5 (extreme gates), d 3, d_v 2 (TRIG: m 8 and 10): relative error
 *     max|ref - fd| / max|fd| <= 1e-5 per gradient (worst seen 2.9e-9), and the
 *     reference's dg_0 exactly 0, so a wrong reference cannot hide a wrong
 *     library.
 * (1b) accuracy: the library against the reference, each call with opts.threads
 *     1 (and, with OpenMP, 2: bit-identical dq, dk, dv, dg). Maps as (1a), m 16
 *     (TRIG 256 with inputs N(0, 0.3^2); else N(0, 1)), d 8, d_v 5, on
 *       A  hq 4, hkv 2, n = n_k = 70 (crosses the 32- and 64-row chunks), gate
 *          modes none, decay, gates, both;
 *       B  batch 2 (batched gates), hq 4, hkv 2, n 70, n_k 90 (20 prefix keys
 *          every row sees), rows-outer (interleaved) views, gates and both;
 *       C  hq 2, hkv 2, n 70, n_k 50 (20 rows that see no key), "extreme" gates
 *          (every 7th -20, every 5th exactly 0), decay, gates and both;
 *       D  hq 4, hkv 2, n 70, n_k 90, not causal, no gates (FAVOR_NO_NORM only);
 *       E  fp16 q, k, v, dout, dq, dk, dv (gates, dgates fp32), hq 2, hkv 1,
 *          n = n_k = 70, both;
 *     TRIG (width 512, most of the reference's time) only with gate mode both,
 *     and none on A. Gates log(sigmoid(x)), x ~ N(1, 1.5^2) ("real"); decay
 *     gamma_h 0.97, 0.9 by head. Error per gradient tensor (dq, dk, dv, dg)
 *     max|g - g_ref| / max(max|g_ref|, floor), the floor 1e-2 max|dout| max|V|
 *     (FAVOR_NO_NORM: times max_i sum_j |c_ij|) for dq, dk, dv, 1e-2 max_t M_t
 *     for dg (worst seen over the scalar, AVX2 and AVX-512 builds):
 *         fp32, every map, dq dk dv dg           <= 1e-4  (worst 2.3e-6)
 *         fp16 dq dk dv (the reference on the fp16 values; the gradients
 *         rounded once to fp16, half an ULP = 4.9e-4 relative)
 *                                                 <= 1e-3  (worst 4.1e-4)
 *     and per element |dg_t - dg_ref,t| <= 5e-6 N_t (worst 5.3e-7 N_t). Not
 *     bounded by M_t: where a gate near t is strongly negative, dg_t (of the
 *     order of M_t) is far below the suffix sums it is the difference of, and
 *     the fp32 X_p, Y_p leave an error of about 1e-7 N_t (up to 1.5e3 M_t seen
 *     here, e.g. n = n_k = 8, g_3 = -20, ELU1 FAVOR_NO_NORM: dg_3 4.3e-6 for
 *     2.3e-8; 1e-7 of max|dg|). The fp16 case also gives the bits of the same
 *     call on fp32 copies of its inputs, its gradients rounded once to nearest
 *     even (and the same dgates). dg_0 is exactly 0, rows that see no key have
 *     dq exactly 0, every gradient element is written (they start NaN) and
 *     finite, the inputs are unchanged.
 * (2) threads: opts.threads 1 and 2 give bit-identical dq, dk, dv, dg (memcmp)
 *     on hq 4, hkv 2, n = n_k = 200 (real gates) and batch 2, hq 2, hkv 1, n 300,
 *     n_k 1100 (split into segments; "mild" gates x ~ N(7, 1.5^2), gamma 0.999,
 *     so the state carries across segments), ELU1 and POSITIVE, both forms,
 *     gates and decay; and ELU1 with the last tenth of the query rows moved by
 *     -30 (a later segment's partial sums at a lower scale than an earlier
 *     one's: the other branch of the split's merge). (Without OpenMP, the
 *     scalar variant: one call.)
 * (3) no future leakage (ELU1 and POSITIVE, both forms, gates and decay; hq 4,
 *     hkv 2, n = n_k = 200, interleaved, t = 5, 64, 130, and hq 2, hkv 1, n 300,
 *     n_k 1100, t = 850, 1050): changing k, v and the gates at every position
 *     > t leaves the dq rows with p_i <= t bit-identical and changes the row
 *     p_i = t + 1; changing q and dout at every row with p_i <= t leaves dk and
 *     dv rows > t and dg_s, s > t, bit-identical and changes dk row t and dg_t.
 * (4) validation: dgates without gates (none, or decay only), dgates fp16
 *     (FAVOR_E_ARG); dgates of n_k - 1 rows, 2 cols or 1 head (FAVOR_E_SHAPE);
 *     dgates overlapping dq, dk, dv, the gates, dout, q, k or v (FAVOR_E_ALIAS);
 *     gates or decay on a non-causal backward, a positive or NaN gate, gamma 1.5,
 *     FAVOR_IDENTITY without FAVOR_NO_NORM (FAVOR_E_ARG), gates of n_k - 1 rows
 *     (FAVOR_E_SHAPE); gates on the softmax backward (FAVOR_E_ARG). Each returns
 *     its status, says why in opts.error, leaves dq, dk, dv and dgates with their
 *     sentinel bytes and the inputs unchanged; the same call without the fault
 *     passes (and writes dgates, dg_0 = 0).
 * (5) packed sequences with gates and decay (4 sequences, one with 10 keys and
 *     no query row, n_k != n; and 2, the second of 1100 keys): a packed backward
 *     equals one backward per sequence bit for bit, dgates included; the keys
 *     of the sequence without rows get zero dk, dv and dg.
 * Runtime (native, -O2): 0.6 to 0.8 s per variant, most of it the double
 * reference of (1b); about 45 s under valgrind. */
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

#define TOL_F32 1e-4  /* dq, dk, dv, dg relative to their max, fp32 */
#define TOL_F16 1e-3  /* the same with 16-bit q, k, v, dout and gradients */
#define TOL_DGN 5e-6  /* |dg_t - ref| / N_t, every element */
#define TOL_REF 1e-5  /* the reference against central differences */

/* ---- buffers (gbuf of gated_util.h): fills, bits, row ranges, checks ---------- */

static void gb_fill(gbuf *b, double x)
{
    size_t i;
    for (i = 0; i < b->len; ++i) gb_put(b, i, x);
}

/* the bits of element (b, h, r, c), for bit-identity checks of either width */
static uint32_t gb_bits(const favor_tensor *t, size_t b, size_t h, size_t r, size_t c)
{
    size_t i = gb_index(t, b, h, r, c);
    uint32_t u;
    if (t->dtype != FAVOR_F32) return ((const uint16_t *)t->data)[i];
    memcpy(&u, (const float *)t->data + i, 4);
    return u;
}

/* rows [r0, r0 + rows) of t */
static favor_tensor gb_rows(const favor_tensor *t, size_t r0, size_t rows)
{
    favor_tensor v = *t;
    v.data = (char *)t->data + r0 * t->row_stride * favor_dtype_size(t->dtype);
    v.rows = rows;
    return v;
}

static int gb_same(const gbuf *b, const void *snap)
{
    return memcmp(b->data, snap, b->len * b->esz) == 0;
}

/* an fp32 copy of b, same layout and values */
static gbuf gb_widen(const gbuf *b)
{
    gbuf w = *b;
    size_t i;
    w.esz = 4;
    w.data = tu_xmalloc(b->len * 4);
    w.t.data = w.data;
    w.t.dtype = FAVOR_F32;
    for (i = 0; i < b->len; ++i)
        ((float *)w.data)[i] = b->esz == 4 ? ((const float *)b->data)[i]
                                           : (float)f16_value(((const uint16_t *)b->data)[i]);
    return w;
}

/* max |t - ref| over every element of a batched view (ref packed [B][H][R][C]);
 * NaN and inf are the maximum */
static double gb_err(const favor_tensor *t, const double *ref, size_t B)
{
    size_t b, h, r, c, i = 0;
    double m = 0;
    for (b = 0; b < B; ++b)
        for (h = 0; h < t->heads; ++h)
            for (r = 0; r < t->rows; ++r)
                for (c = 0; c < t->cols; ++c, ++i) {
                    double e = fabs(gb_get(t, b, h, r, c) - ref[i]);
                    if (!(e <= m)) m = isnan(e) ? (double)INFINITY : e;
                }
    return m;
}

/* 1 when every element of the view is finite */
static int gb_finite(const favor_tensor *t, size_t B)
{
    size_t b, h, r, c;
    for (b = 0; b < B; ++b)
        for (h = 0; h < t->heads; ++h)
            for (r = 0; r < t->rows; ++r)
                for (c = 0; c < t->cols; ++c)
                    if (!isfinite(gb_get(t, b, h, r, c))) return 0;
    return 1;
}

/* ---- the float64 reference -------------------------------------------------- */

/* dx = J(x)^T dphi for one row x of f's map, by central differences of the double
 * map (step 1e-6 max(1, |x_a|), the step actually taken dividing); xs (2d x d)
 * and ph (2d x width) are scratch */
static void phi_vjp(const favor_features *f, const double *x, const double *dphi, double *dx,
                    double *xs, double *ph)
{
    size_t d = f->dim, w = ref_w(f), a, l;
    for (a = 0; a < d; ++a) {
        double h = 1e-6 * (fabs(x[a]) > 1 ? fabs(x[a]) : 1.0);
        memcpy(xs + 2 * a * d, x, d * sizeof *x);
        memcpy(xs + (2 * a + 1) * d, x, d * sizeof *x);
        xs[2 * a * d + a] = x[a] + h;
        xs[(2 * a + 1) * d + a] = x[a] - h;
    }
    ref_phi(f, xs, 2 * d, ph);
    for (a = 0; a < d; ++a) {
        const double *pp = ph + 2 * a * w, *pm = pp + w;
        double s = 0;
        for (l = 0; l < w; ++l) s += dphi[l] * (pp[l] - pm[l]);
        dx[a] = s / (xs[2 * a * d + a] - xs[(2 * a + 1) * d + a]);
    }
}

/* The analytic reference gradient of one batch element (the formulas of the
 * header): shapes as gref_linear, dout hq x n x dv; writes dq (hq x n x d), dk
 * (hkv x nk x d), dvv (hkv x nk x dv) and, when dg is not NULL, dg and dgm (hkv x
 * nk: dL/dlg_t and M_t; zero when not causal or lg is NULL). *mass: max_i sum_j
 * |c_ij| (the row scale of FAVOR_NO_NORM). */
static void gref_backward(const favor_features *f, const rdims *r, const double *q,
                          const double *k, const double *v, const double *dout,
                          const double *lg, double *dq, double *dk, double *dvv, double *dg,
                          double *dgm, double *dgn, double *mass)
{
    size_t d = f->dim, w = ref_w(f), dv = r->dv, n = r->n, nk = r->nk;
    size_t group = r->hq / r->hkv, g, h, i, j, l, c, t;
    int gated = lg != NULL && r->causal;
    double *pk = dalloc(nk * w), *apk = dalloc(nk * w), *dpk = dalloc(nk * w);
    double *pq = dalloc(w), *apq = dalloc(w), *dpq = dalloc(w);
    double *cc = dalloc(nk), *aa = dalloc(nk), *xx = dalloc(nk), *xm = dalloc(nk);
    double *L = dalloc(nk), *o = dalloc(dv), *dn = dalloc(dv), *adn = dalloc(dv);
    double *xs = dalloc(2 * d * d), *ph = dalloc(2 * d * w);
    *mass = 0;
    for (g = 0; g < r->hkv; ++g) {
        const double *kg = k + g * nk * d, *vg = v + g * nk * dv;
        double *dvg = dvv + g * nk * dv;
        ref_phi(f, kg, nk, pk);
        for (l = 0; l < nk * w; ++l) {
            apk[l] = fabs(pk[l]);
            dpk[l] = 0;
        }
        for (l = 0; l < nk * dv; ++l) dvg[l] = 0;
        if (dg)
            for (t = 0; t < nk; ++t) dg[g * nk + t] = dgm[g * nk + t] = dgn[g * nk + t] = 0;
        if (gated) {
            L[0] = lg[g * nk];
            for (t = 1; t < nk; ++t) L[t] = L[t - 1] + lg[g * nk + t];
        }
        for (h = g * group; h < (g + 1) * group; ++h)
            for (i = 0; i < n; ++i) {
                const double *qi = q + (h * n + i) * d, *gi = dout + (h * n + i) * dv;
                double *dqi = dq + (h * n + i) * d, den = 0, rowmass = 0, dden = 0, aden = 0;
                ptrdiff_t p = r->causal ? (ptrdiff_t)i + (ptrdiff_t)nk - (ptrdiff_t)n
                                        : (ptrdiff_t)nk - 1;
                size_t vis = p < 0 ? 0 : (size_t)p + 1;
                for (c = 0; c < d; ++c) dqi[c] = 0;
                if (vis == 0) continue;
                ref_phi(f, qi, 1, pq);
                for (l = 0; l < w; ++l) apq[l] = fabs(pq[l]);
                for (c = 0; c < dv; ++c) o[c] = 0;
                for (j = 0; j < vis; ++j) {
                    double s = 0;
                    for (l = 0; l < w; ++l) s += pq[l] * pk[j * w + l];
                    aa[j] = gated ? exp(L[p] - L[j]) : 1.0;
                    cc[j] = aa[j] * s;
                    den += cc[j];
                    rowmass += fabs(cc[j]);
                    for (c = 0; c < dv; ++c) o[c] += cc[j] * vg[j * dv + c];
                }
                if (rowmass > *mass) *mass = rowmass;
                if (!r->no_norm) {
                    double go = 0, ago = 0;
                    if (den == 0) continue; /* a zero row, no gradient */
                    for (c = 0; c < dv; ++c) {
                        o[c] /= den;
                        go += gi[c] * o[c];
                        ago += fabs(gi[c] * o[c]);
                    }
                    dden = -go / den;
                    aden = ago / fabs(den);
                }
                for (c = 0; c < dv; ++c) {
                    dn[c] = r->no_norm ? gi[c] : gi[c] / den;
                    adn[c] = fabs(dn[c]);
                }
                for (l = 0; l < w; ++l) dpq[l] = 0;
                for (j = 0; j < vis; ++j) {
                    double dc = dden, mg = aden, ak = 0;
                    for (c = 0; c < dv; ++c) {
                        dc += vg[j * dv + c] * dn[c];
                        mg += fabs(vg[j * dv + c]) * adn[c];
                        dvg[j * dv + c] += cc[j] * dn[c];
                    }
                    for (l = 0; l < w; ++l) {
                        dpq[l] += dc * aa[j] * pk[j * w + l];
                        dpk[j * w + l] += dc * aa[j] * pq[l];
                        ak += apq[l] * apk[j * w + l];
                    }
                    xx[j] = dc * cc[j];
                    xm[j] = aa[j] * ak * mg;
                }
                phi_vjp(f, qi, dpq, dqi, xs, ph);
                if (dg && gated) { /* the pairs j < t <= p of this row, t by t */
                    double acc = 0, accm = 0;
                    for (t = 1; t < vis; ++t) {
                        acc += xx[t - 1];
                        accm += xm[t - 1];
                        dg[g * nk + t] += acc;
                        dgm[g * nk + t] += accm;
                    }
                    /* N_t, first per position: X_p's terms at p, Y_j's at j */
                    for (j = 0; j < vis; ++j) {
                        dgn[g * nk + (size_t)p] += xm[j];
                        dgn[g * nk + j] += xm[j];
                    }
                }
            }
        for (j = 0; j < nk; ++j) phi_vjp(f, kg + j * d, dpk + j * w, dk + (g * nk + j) * d, xs, ph);
        if (dg && gated) /* N_t = sum_{p >= t} (|X|_p + |Y|_p) */
            for (t = nk - 1; t-- > 0;) dgn[g * nk + t] += dgn[g * nk + t + 1];
    }
    free(pk); free(apk); free(dpk); free(pq); free(apq); free(dpq);
    free(cc); free(aa); free(xx); free(xm); free(L); free(o); free(dn); free(adn);
    free(xs); free(ph);
}

/* ---- (1a) the reference against central differences ------------------------- */

typedef struct {
    size_t hq, hkv, n, nk, d, dv, m;
    int gstyle;
} tshape;

static double rel_d(const double *g, const double *ref, size_t cnt)
{
    double e = 0, m = tu_max_abs(ref, cnt);
    size_t i;
    for (i = 0; i < cnt; ++i) {
        double x = fabs(g[i] - ref[i]);
        if (!(x <= e)) e = isnan(x) ? (double)INFINITY : x;
    }
    return m > 0 ? e / m : e;
}

static double fd_loss(const favor_features *f, const rdims *r, const double *q,
                      const double *k, const double *v, const double *dout, const double *lg,
                      double *obuf)
{
    size_t i;
    double L = 0;
    gref_linear(f, r, q, k, v, lg, obuf, NULL);
    for (i = 0; i < r->hq * r->n * r->dv; ++i) L += dout[i] * obuf[i];
    return L;
}

/* one map, form and gate mode on one tiny shape; *worst gets the largest error */
static int ref_fd_case(const tshape *s, size_t si, favor_kernel kernel, int nn, int gmode,
                       double *worst)
{
    static const char *names[4] = { "dq", "dk", "dv", "dg" };
    static const float gammas[2] = { 0.97f, 0.9f };
    favor_features f;
    float *store;
    rdims r;
    tu_rng rng;
    size_t cnt[4], a, i, t, m = kernel == FAVOR_TRIG ? s->m * 2 : s->m;
    double sigma = kernel == FAVOR_TRIG ? 0.3 : 1.0, *arr[4], *fd[4], *an[4], *dout, *obuf;
    double *dgm, *dgn, mass;
    int fails = 0, nargs;
    if (feat_make(&f, &store, kernel, s->d, m, 50 + si * 8 + (unsigned)kernel)) return 1;
    r = rdims_make(s->hq, s->hkv, s->n, s->nk, s->dv, gmode != G_FULL, nn);
    cnt[0] = s->hq * s->n * s->d;
    cnt[1] = s->hkv * s->nk * s->d;
    cnt[2] = s->hkv * s->nk * s->dv;
    cnt[3] = s->hkv * s->nk;
    rng.s = 31 + 977 * si + 13 * (unsigned)kernel + 5 * (unsigned)gmode + (unsigned)nn;
    for (a = 0; a < 4; ++a) {
        arr[a] = dalloc(cnt[a]);
        fd[a] = dalloc(cnt[a]);
        an[a] = dalloc(cnt[a]);
    }
    for (a = 0; a < 3; ++a)
        for (i = 0; i < cnt[a]; ++i)
            arr[a][i] = (float)((a == 2 ? 1.0 : sigma) * tu_normal(&rng));
    for (a = 0; a < s->hkv; ++a)
        for (t = 0; t < s->nk; ++t)
            arr[3][a * s->nk + t] =
                (gmode == G_GATES || gmode == G_BOTH ? draw_gate(&rng, s->gstyle, t) : 0.0) +
                (gmode == G_DECAY || gmode == G_BOTH ? log((double)gammas[a % 2]) : 0.0);
    nargs = gmode == G_NONE || gmode == G_FULL ? 3 : 4;
    dout = dalloc(s->hq * s->n * s->dv);
    obuf = dalloc(s->hq * s->n * s->dv);
    dgm = dalloc(cnt[3]);
    dgn = dalloc(cnt[3]);
    for (i = 0; i < s->hq * s->n * s->dv; ++i) dout[i] = (float)tu_normal(&rng);
    for (a = 0; a < (size_t)nargs; ++a)
        for (i = 0; i < cnt[a]; ++i) {
            double x0 = arr[a][i], h = 1e-5 * (fabs(x0) > 1 ? fabs(x0) : 1.0), lp, lm, xp, xm;
            arr[a][i] = xp = x0 + h;
            lp = fd_loss(&f, &r, arr[0], arr[1], arr[2], dout, nargs == 4 ? arr[3] : NULL, obuf);
            arr[a][i] = xm = x0 - h;
            lm = fd_loss(&f, &r, arr[0], arr[1], arr[2], dout, nargs == 4 ? arr[3] : NULL, obuf);
            arr[a][i] = x0;
            fd[a][i] = (lp - lm) / (xp - xm);
        }
    gref_backward(&f, &r, arr[0], arr[1], arr[2], dout, nargs == 4 ? arr[3] : NULL, an[0],
                  an[1], an[2], an[3], dgm, dgn, &mass);
    print_message("  ref-fd %u %-10s %-7s %-5s:", (unsigned)si, tu_kernel_name(kernel),
                  nn ? "no_norm" : "norm", gmode_names[gmode]);
    for (a = 0; a < (size_t)nargs; ++a) {
        double e = rel_d(an[a], fd[a], cnt[a]);
        print_message(" %s %.2g", names[a], e);
        if (!(e <= *worst)) *worst = e;
        if (!(e <= TOL_REF) || !(tu_max_abs(fd[a], cnt[a]) > 0)) {
            print_error("\n  ref-fd %s %s %s: %s relative error %.6g > %.0e (max|fd| %.3g)\n",
                        tu_kernel_name(kernel), nn ? "no_norm" : "norm", gmode_names[gmode],
                        names[a], e, TOL_REF, tu_max_abs(fd[a], cnt[a]));
            ++fails;
        }
    }
    if (nargs == 4)
        for (a = 0; a < s->hkv; ++a)
            if (an[3][a * s->nk] != 0.0) {
                print_error("\n  ref-fd: the reference's dg_0 is %g\n", an[3][a * s->nk]);
                ++fails;
            }
    print_message("\n");
    for (a = 0; a < 4; ++a) {
        free(arr[a]);
        free(fd[a]);
        free(an[a]);
    }
    free(dout);
    free(obuf);
    free(dgm);
    free(dgn);
    free(store);
    return fails;
}

/* every map with the forms it takes: (kernel, no_norm) */
static const struct {
    favor_kernel k;
    int nn;
} maps[] = {
    { FAVOR_ELU1, 0 },       { FAVOR_ELU1, 1 },       { FAVOR_POSITIVE, 0 },
    { FAVOR_POSITIVE, 1 },   { FAVOR_HYPERBOLIC, 0 }, { FAVOR_HYPERBOLIC, 1 },
    { FAVOR_RELU, 0 },       { FAVOR_RELU, 1 },       { FAVOR_POLY2, 0 },
    { FAVOR_POLY2, 1 },      { FAVOR_TRIG, 0 },       { FAVOR_IDENTITY, 1 },
};
#define NMAPS (sizeof maps / sizeof maps[0])

static void test_reference_fd(void **state)
{
    static const tshape shapes[2] = { { 2, 1, 5, 7, 3, 2, 4, GS_REAL },
                                      { 2, 2, 6, 4, 3, 2, 5, GS_EXTREME } };
    size_t si, mi;
    int gm, fails = 0;
    double worst = 0, t0 = now();
    (void)state;
    for (si = 0; si < 2; ++si)
        for (mi = 0; mi < NMAPS; ++mi)
            for (gm = G_NONE; gm <= G_FULL; ++gm)
                fails += ref_fd_case(&shapes[si], si, maps[mi].k, maps[mi].nn, gm, &worst);
    print_message("reference vs central differences: worst relative error %.3g (tol %.0e), "
                  "%.2f s\n", worst, TOL_REF, now() - t0);
    assert_int_equal(fails, 0);
}

/* ---- one problem: features, q/k/v/dout, gates, decay, gradients, options ----- */

typedef struct {
    size_t B, hq, hkv, n, nk, d, dv, m;
    int causal, gstyle, inter, f16;
} gshape;

typedef struct {
    gshape s;          /* m as used */
    favor_kernel kernel;
    int no_norm, gmode;
    favor_features f;
    float *wstore;
    gbuf Q, K, V, G, dO, dQ, dK, dV, dG;
    float decay[8];
    favor_options opt; /* flags, decay, gates and dgates (with gates) set */
} prob;

/* fresh NaN-filled gradient buffers shaped as p's */
static void new_grads(const prob *p, gbuf *dq, gbuf *dk, gbuf *dv, gbuf *dg)
{
    const gshape *c = &p->s;
    favor_dtype dt = c->f16 ? FAVOR_F16 : FAVOR_F32;
    tu_rng r = { 1 };
    gb_make(dq, dt, c->B, c->hq, c->n, c->d, c->inter, &r, -1);
    gb_make(dk, dt, c->B, c->hkv, c->nk, c->d, c->inter, &r, -1);
    gb_make(dv, dt, c->B, c->hkv, c->nk, c->dv, c->inter, &r, -1);
    gb_make(dg, FAVOR_F32, c->B, c->hkv, c->nk, 1, c->inter, &r, -1);
}

static int prob_make(prob *p, const gshape *c, favor_kernel kernel, int no_norm, int gmode,
                     unsigned long long seed)
{
    tu_rng rng;
    size_t h;
    double sigma = kernel == FAVOR_TRIG ? 0.3 : 1.0;
    favor_dtype dt = c->f16 ? FAVOR_F16 : FAVOR_F32;
    memset(p, 0, sizeof *p);
    p->s = *c;
    p->kernel = kernel;
    p->no_norm = no_norm;
    p->gmode = gmode;
    p->s.m = tu_fixed(kernel) ? c->d : kernel == FAVOR_TRIG ? 256 : c->m;
    if (feat_make(&p->f, &p->wstore, kernel, c->d, p->s.m, seed)) return 1;
    rng.s = seed * 7919 + 13;
    gb_make(&p->Q, dt, c->B, c->hq, c->n, c->d, c->inter, &rng, sigma);
    gb_make(&p->K, dt, c->B, c->hkv, c->nk, c->d, c->inter, &rng, sigma);
    gb_make(&p->V, dt, c->B, c->hkv, c->nk, c->dv, c->inter, &rng, 1.0);
    gb_make(&p->dO, dt, c->B, c->hq, c->n, c->dv, c->inter, &rng, 1.0);
    gb_make(&p->G, FAVOR_F32, c->B, c->hkv, c->nk, 1, c->inter, &rng, 0);
    fill_gates(&p->G.t, &rng, c->gstyle, 0);
    new_grads(p, &p->dQ, &p->dK, &p->dV, &p->dG);
    for (h = 0; h < c->hkv; ++h)
        p->decay[h] = c->nk > 1024 ? (h % 2 ? 0.995f : 0.999f) : (h % 2 ? 0.9f : 0.97f);
    p->opt = favor_default_options();
    p->opt.flags = (c->causal ? FAVOR_CAUSAL : 0u) | (no_norm ? FAVOR_NO_NORM : 0u);
    if (gmode == G_DECAY || gmode == G_BOTH) p->opt.decay = p->decay;
    if (gmode == G_GATES || gmode == G_BOTH) {
        p->opt.gates = &p->G.t;
        p->opt.dgates = &p->dG.t;
    }
    return 0;
}

static void gfree(gbuf *a, gbuf *b, gbuf *c, gbuf *d)
{
    free(a->data);
    free(b->data);
    free(c->data);
    free(d->data);
}

static void prob_free(prob *p)
{
    free(p->wstore);
    gfree(&p->Q, &p->K, &p->V, &p->G);
    free(p->dO.data);
    gfree(&p->dQ, &p->dK, &p->dV, &p->dG);
}

/* the backward of p into dq, dk, dv and (with gates) dg */
static favor_status bwd(const prob *p, const gbuf *dq, const gbuf *dk, const gbuf *dv,
                        const gbuf *dg, int threads)
{
    favor_options o = p->opt;
    o.threads = threads;
    if (o.dgates) o.dgates = &dg->t;
    return favor_linear_attention_backward(&p->f, &p->Q.t, &p->K.t, &p->V.t, &p->dO.t, &dq->t,
                                           &dk->t, &dv->t, &o);
}

/* ---- (1b) the library against the reference ---------------------------------- */

typedef struct {
    double *dq, *dk, *dv, *dg, *dgm, *dgn; /* packed [B][heads][rows][cols] */
    double fq, fk, fv, fg;           /* floors of the relative errors */
} gref;

static void prob_ref(const prob *p, gref *r)
{
    const gshape *c = &p->s;
    size_t b, nq = c->hq * c->n * c->d, nk = c->hkv * c->nk * c->d;
    size_t nv = c->hkv * c->nk * c->dv, ng = c->hkv * c->nk;
    double *lg = dalloc(ng), gmax = 0, vmax = 0, mass = 0, dgmax = 0;
    rdims rd = rdims_make(c->hq, c->hkv, c->n, c->nk, c->dv, c->causal, p->no_norm);
    r->dq = dalloc(c->B * nq);
    r->dk = dalloc(c->B * nk);
    r->dv = dalloc(c->B * nv);
    r->dg = dalloc(c->B * ng);
    r->dgm = dalloc(c->B * ng);
    r->dgn = dalloc(c->B * ng);
    for (b = 0; b < c->B; ++b) {
        double *q = gb_elem(&p->Q.t, b), *k = gb_elem(&p->K.t, b), *v = gb_elem(&p->V.t, b);
        double *g = gb_elem(&p->dO.t, b), ms;
        gref_backward(&p->f, &rd, q, k, v, g, gate_logs(&p->opt, b, c->hkv, c->nk, lg),
                      r->dq + b * nq, r->dk + b * nk, r->dv + b * nv, r->dg + b * ng,
                      r->dgm + b * ng, r->dgn + b * ng, &ms);
        if (ms > mass) mass = ms;
        if (tu_max_abs(g, c->hq * c->n * c->dv) > gmax) gmax = tu_max_abs(g, c->hq * c->n * c->dv);
        if (tu_max_abs(v, nv) > vmax) vmax = tu_max_abs(v, nv);
        free(q);
        free(k);
        free(v);
        free(g);
    }
    dgmax = tu_max_abs(r->dgm, c->B * ng);
    r->fq = r->fk = r->fv = 1e-2 * gmax * vmax * (p->no_norm ? mass : 1.0);
    r->fg = 1e-2 * dgmax;
    free(lg);
}

static void gref_free(gref *r)
{
    free(r->dq);
    free(r->dk);
    free(r->dv);
    free(r->dg);
    free(r->dgm);
    free(r->dgn);
}

/* 16-bit p: the same call on fp32 copies of q, k, v and dout gives, rounded
 * once to fp16, the bits of dq, dk, dv, and dgates bit for bit. Returns the
 * number of elements that differ. */
static size_t f16_equiv(const prob *p)
{
    gbuf q = gb_widen(&p->Q), k = gb_widen(&p->K), v = gb_widen(&p->V), o = gb_widen(&p->dO);
    gbuf dq = gb_widen(&p->dQ), dk = gb_widen(&p->dK), dv = gb_widen(&p->dV);
    gbuf dg = gb_widen(&p->dG);
    const gbuf *h16[3], *h32[3];
    favor_options op = p->opt;
    favor_status st;
    size_t bad = 0, a, i;
    op.threads = 1;
    if (op.dgates) op.dgates = &dg.t;
    st = favor_linear_attention_backward(&p->f, &q.t, &k.t, &v.t, &o.t, &dq.t, &dk.t, &dv.t, &op);
    h16[0] = &p->dQ; h16[1] = &p->dK; h16[2] = &p->dV;
    h32[0] = &dq; h32[1] = &dk; h32[2] = &dv;
    if (st != FAVOR_OK) {
        print_error("\n  the fp32 call: %s\n", favor_status_string(st));
        bad = 1;
    } else {
        for (a = 0; a < 3; ++a)
            for (i = 0; i < h16[a]->len; ++i)
                if (((const uint16_t *)h16[a]->data)[i] !=
                    to_f16(((const float *)h32[a]->data)[i]))
                    ++bad;
        if (op.dgates && memcmp(dg.data, p->dG.data, dg.len * 4) != 0) ++bad;
    }
    gfree(&q, &k, &v, &o);
    gfree(&dq, &dk, &dv, &dg);
    return bad;
}

/* worst errors seen: [class][gradient], class 0 fp32, 1 fp16; gradient dq, dk,
 * dv, dg, and [0][4], [1][4]: dg per element over N_t, M_t */
static double acc_worst[2][5];

static int run_case(const char *tag, const gshape *c, favor_kernel kernel, int nn, int gmode,
                    unsigned long long seed)
{
    static const char *names[4] = { "dq", "dk", "dv", "dg" };
    prob p;
    gref r;
    favor_status st;
    void *sq, *sk, *sv, *so, *sg;
    int fails = 0, cls = c->f16 ? 1 : 0, a, gates;
    double tol = c->f16 ? TOL_F16 : TOL_F32;
    if (prob_make(&p, c, kernel, nn, gmode, seed)) return 1;
    gates = p.opt.gates != NULL;
    sq = gb_snap(&p.Q);
    sk = gb_snap(&p.K);
    sv = gb_snap(&p.V);
    so = gb_snap(&p.dO);
    sg = gb_snap(&p.G);
    st = bwd(&p, &p.dQ, &p.dK, &p.dV, &p.dG, 1);
    print_message("%s %-10s %-7s %-5s: ", tag, tu_kernel_name(kernel), nn ? "no_norm" : "norm",
                  gmode_names[gmode]);
    if (st != FAVOR_OK) {
        print_message("\n");
        print_error("  %s %s %s %s: status %s\n", tag, tu_kernel_name(kernel),
                    nn ? "no_norm" : "norm", gmode_names[gmode], favor_status_string(st));
        fails = 1;
        goto done;
    }
    if (!gb_same(&p.Q, sq) || !gb_same(&p.K, sk) || !gb_same(&p.V, sv) || !gb_same(&p.dO, so) ||
        !gb_same(&p.G, sg)) {
        print_error("\n  an input was written\n");
        ++fails;
    }
#ifdef _OPENMP
    {
        gbuf q2, k2, v2, g2;
        new_grads(&p, &q2, &k2, &v2, &g2);
        st = bwd(&p, &q2, &k2, &v2, &g2, 2);
        if (st != FAVOR_OK || memcmp(q2.data, p.dQ.data, q2.len * q2.esz) != 0 ||
            memcmp(k2.data, p.dK.data, k2.len * k2.esz) != 0 ||
            memcmp(v2.data, p.dV.data, v2.len * v2.esz) != 0 ||
            (gates && memcmp(g2.data, p.dG.data, g2.len * 4) != 0)) {
            print_error("\n  threads 1 and 2 differ (status %s)\n", favor_status_string(st));
            ++fails;
        }
        gfree(&q2, &k2, &v2, &g2);
    }
#endif
    if (c->f16) {
        size_t bad = f16_equiv(&p);
        if (bad) {
            print_error("\n  fp16: %u elements differ from the fp32 call's rounded once\n",
                        (unsigned)bad);
            ++fails;
        }
    }
    prob_ref(&p, &r);
    {
        const favor_tensor *ts[4];
        const double *refs[4];
        double floors[4];
        size_t cnts[4], b, h, i, t;
        ts[0] = &p.dQ.t; ts[1] = &p.dK.t; ts[2] = &p.dV.t; ts[3] = &p.dG.t;
        refs[0] = r.dq; refs[1] = r.dk; refs[2] = r.dv; refs[3] = r.dg;
        floors[0] = r.fq; floors[1] = r.fk; floors[2] = r.fv; floors[3] = r.fg;
        cnts[0] = c->B * c->hq * c->n * c->d;
        cnts[1] = c->B * c->hkv * c->nk * c->d;
        cnts[2] = c->B * c->hkv * c->nk * c->dv;
        cnts[3] = c->B * c->hkv * c->nk;
        for (a = 0; a < (gates ? 4 : 3); ++a) {
            double m = tu_max_abs(refs[a], cnts[a]);
            double e = gb_err(ts[a], refs[a], c->B) / (m > floors[a] ? m : floors[a]);
            double tl = a == 3 ? TOL_F32 : tol; /* dgates are fp32 */
            print_message(" %s %.2g", names[a], e);
            if (!(e <= acc_worst[a == 3 ? 0 : cls][a])) acc_worst[a == 3 ? 0 : cls][a] = e;
            if (!gb_finite(ts[a], c->B)) {
                print_error("\n  %s: an element is not finite (or was never written)\n",
                            names[a]);
                ++fails;
            }
            if (!(e <= tl)) {
                print_error("\n  %s: relative error %.6g > %.0e (max|ref| %.3g)\n", names[a], e,
                            tl, m);
                ++fails;
            }
        }
        if (gates) { /* dg per element against N_t (and M_t); dg_0 exactly 0 */
            double rn = 0, rm = 0;
            size_t wat = 0;
            for (b = 0; b < c->B; ++b)
                for (h = 0; h < c->hkv; ++h)
                    for (t = 0; t < c->nk; ++t) {
                        size_t at = (b * c->hkv + h) * c->nk + t;
                        double gv = gb_get(&p.dG.t, b, h, t, 0), e = fabs(gv - r.dg[at]);
                        double qn = r.dgn[at] > 0 ? e / r.dgn[at] : e == 0 ? 0 : (double)INFINITY;
                        double qm = r.dgm[at] > 0 ? e / r.dgm[at] : e == 0 ? 0 : (double)INFINITY;
                        if (!(qn <= rn)) rn = isnan(qn) ? (double)INFINITY : qn;
                        if (!(qm <= rm)) {
                            rm = isnan(qm) ? (double)INFINITY : qm;
                            wat = at;
                        }
                        if (t == 0 && gv != 0.0) {
                            print_error("\n  dg_0 of batch %u head %u is %.9g, not 0\n",
                                        (unsigned)b, (unsigned)h, gv);
                            ++fails;
                        }
                    }
            print_message("  dg/N %.2g  dg/M %.2g (t %u: ref %.3g, M %.3g, N %.3g)", rn, rm,
                          (unsigned)(wat % c->nk), r.dg[wat], r.dgm[wat], r.dgn[wat]);
            if (!(rn <= acc_worst[0][4])) acc_worst[0][4] = rn;
            if (!(rm <= acc_worst[1][4])) acc_worst[1][4] = rm;
            if (!(rn <= TOL_DGN)) {
                print_error("\n  dg: |dg_t - ref_t| / N_t reaches %.6g > %.0e\n", rn, TOL_DGN);
                ++fails;
            }
        }
        if (c->causal) /* rows that see no key: dq exactly 0 */
            for (b = 0; b < c->B; ++b)
                for (h = 0; h < c->hq; ++h)
                    for (i = 0; i + c->nk < c->n; ++i)
                        for (t = 0; t < c->d; ++t)
                            if (gb_get(&p.dQ.t, b, h, i, t) != 0.0) {
                                print_error("\n  dq row %u (sees no key) col %u is %g\n",
                                            (unsigned)i, (unsigned)t,
                                            gb_get(&p.dQ.t, b, h, i, t));
                                ++fails;
                                t = c->d;
                                i = c->n;
                            }
    }
    print_message("\n");
    gref_free(&r);
done:
    free(sq);
    free(sk);
    free(sv);
    free(so);
    free(sg);
    prob_free(&p);
    return fails;
}

#define M_NONE (1u << G_NONE)
#define M_DECAY (1u << G_DECAY)
#define M_GATES (1u << G_GATES)
#define M_BOTH (1u << G_BOTH)
#define M_FULL (1u << G_FULL)

static const struct {
    const char *tag;
    gshape s;
    unsigned modes;
} acc_shapes[] = {
    /*      B hq hkv  n  nk d dv  m causal gstyle    inter f16 */
    { "A", { 1, 4, 2, 70, 70, 8, 5, 16, 1, GS_REAL,    0, 0 }, M_NONE | M_DECAY | M_GATES | M_BOTH },
    { "B", { 2, 4, 2, 70, 90, 8, 5, 16, 1, GS_REAL,    1, 0 }, M_GATES | M_BOTH },
    { "C", { 1, 2, 2, 70, 50, 8, 5, 16, 1, GS_EXTREME, 0, 0 }, M_DECAY | M_GATES | M_BOTH },
    { "D", { 1, 4, 2, 70, 90, 8, 5, 16, 0, GS_REAL,    0, 0 }, M_FULL },
    { "E", { 1, 2, 1, 70, 70, 8, 5, 16, 1, GS_REAL,    0, 1 }, M_BOTH },
};

static void test_accuracy(void **state)
{
    size_t si, mi;
    int gm, fails = 0;
    double t0 = now();
    (void)state;
    memset(acc_worst, 0, sizeof acc_worst);
    for (si = 0; si < sizeof acc_shapes / sizeof acc_shapes[0]; ++si)
        for (mi = 0; mi < NMAPS; ++mi)
            for (gm = G_NONE; gm <= G_FULL; ++gm) {
                if (!(acc_shapes[si].modes & (1u << gm))) continue;
                if (gm == G_FULL && !maps[mi].nn) continue; /* not causal: FAVOR_NO_NORM */
                /* TRIG (width 512) costs the reference most: none on A, and both */
                if (maps[mi].k == FAVOR_TRIG && gm != G_BOTH && !(si == 0 && gm == G_NONE))
                    continue;
                fails += run_case(acc_shapes[si].tag, &acc_shapes[si].s, maps[mi].k,
                                  maps[mi].nn, gm, 200 + 37 * si + 3 * mi + (unsigned)gm);
            }
    print_message("accuracy worst: fp32 dq %.3g dk %.3g dv %.3g dg %.3g (tol %.0e); fp16 dq %.3g "
                  "dk %.3g dv %.3g (tol %.0e); dg per element %.3g N_t (tol %.0e), %.3g M_t "
                  "(not a bound); %.2f s\n",
                  acc_worst[0][0], acc_worst[0][1], acc_worst[0][2], acc_worst[0][3], TOL_F32,
                  acc_worst[1][0], acc_worst[1][1], acc_worst[1][2], TOL_F16, acc_worst[0][4],
                  TOL_DGN, acc_worst[1][4], now() - t0);
    assert_int_equal(fails, 0);
}

/* ---- (2) threads: bit-identical ----------------------------------------------- */

static void test_threads(void **state)
{
    static const gshape sh[2] = { { 1, 4, 2, 200, 200, 8, 5, 16, 1, GS_REAL, 0, 0 },
                                  { 2, 2, 1, 300, 1100, 8, 5, 16, 1, GS_MILD, 0, 0 } };
    /* the third: elu+1 with the last tenth of the query rows moved by -30, whose
       log-denominators fall far below the earlier rows': the causal split's suffix
       sums then bring an earlier segment's partials down to a later one's scale
       (favor__bwd_sums_merge_gated's x < 0; no other shape here reaches it) */
    static const favor_kernel ks[3] = { FAVOR_ELU1, FAVOR_POSITIVE, FAVOR_ELU1 };
    size_t si, k;
    int nn, fails = 0;
    double t0 = now();
    (void)state;
    for (si = 0; si < 2; ++si)
        for (k = 0; k < 3; ++k)
            for (nn = 0; nn < 2; ++nn) {
                prob p;
                gbuf q2, k2, v2, g2;
                favor_status s1, s2 = FAVOR_OK;
                int same = 1;
                if (prob_make(&p, &sh[si], ks[k], nn, G_BOTH, 600 + si * 4 + k)) {
                    ++fails;
                    continue;
                }
                if (k == 2) {
                    size_t b, h, i, c, n = sh[si].n;
                    for (b = 0; b < sh[si].B; ++b)
                        for (h = 0; h < sh[si].hq; ++h)
                            for (i = n - n / 10; i < n; ++i)
                                for (c = 0; c < sh[si].d; ++c)
                                    gb_set(&p.Q.t, b, h, i, c, gb_get(&p.Q.t, b, h, i, c) - 30.0);
                }
                new_grads(&p, &q2, &k2, &v2, &g2);
                s1 = bwd(&p, &p.dQ, &p.dK, &p.dV, &p.dG, 1);
#ifdef _OPENMP
                s2 = bwd(&p, &q2, &k2, &v2, &g2, 2);
                same = memcmp(q2.data, p.dQ.data, q2.len * q2.esz) == 0 &&
                       memcmp(k2.data, p.dK.data, k2.len * k2.esz) == 0 &&
                       memcmp(v2.data, p.dV.data, v2.len * v2.esz) == 0 &&
                       memcmp(g2.data, p.dG.data, g2.len * 4) == 0;
#endif
                if (s1 == FAVOR_OK && !(gb_finite(&p.dQ.t, p.s.B) && gb_finite(&p.dK.t, p.s.B) &&
                                        gb_finite(&p.dV.t, p.s.B) && gb_finite(&p.dG.t, p.s.B))) {
                    print_error("  a gradient is not finite or not written\n");
                    ++fails;
                }
                print_message("threads B%u hq%u hkv%u n%u nk%u %-8s%s %-7s: %s %s, %s\n",
                              (unsigned)sh[si].B, (unsigned)sh[si].hq, (unsigned)sh[si].hkv,
                              (unsigned)sh[si].n, (unsigned)sh[si].nk, tu_kernel_name(ks[k]),
                              k == 2 ? " falling" : "",
                              nn ? "no_norm" : "norm", favor_status_string(s1),
                              favor_status_string(s2), same ? "bit-identical" : "DIFFER");
                if (s1 != FAVOR_OK || s2 != FAVOR_OK || !same) ++fails;
                gfree(&q2, &k2, &v2, &g2);
                prob_free(&p);
            }
    print_message("threads: %.2f s\n", now() - t0);
    assert_int_equal(fails, 0);
}

/* ---- (3) no future leakage ----------------------------------------------------- */

/* how many elements of rows [r0, r1) of a gradient differ in their bits from
 * its earlier copy a (same layout) */
static size_t diff_rows(const favor_tensor *t, const void *a, size_t B, size_t r0, size_t r1)
{
    favor_tensor u = *t;
    size_t b, h, r, c, n = 0;
    u.data = (void *)(uintptr_t)a;
    for (b = 0; b < B; ++b)
        for (h = 0; h < t->heads; ++h)
            for (r = r0; r < r1 && r < t->rows; ++r)
                for (c = 0; c < t->cols; ++c)
                    if (gb_bits(t, b, h, r, c) != gb_bits(&u, b, h, r, c)) ++n;
    return n;
}

static int leak_case(const gshape *c, favor_kernel kernel, int nn, const size_t *ts, size_t nts)
{
    prob p;
    size_t it, b, h, r, col, off = c->nk - c->n;
    int fails = 0;
    favor_status st;
    void *q0, *k0, *v0, *o0, *g0, *rq, *rk, *rv, *rg;
    tu_rng rng = { 4711 };
    if (prob_make(&p, c, kernel, nn, G_BOTH, 900 + (unsigned)kernel)) return 1;
    q0 = gb_snap(&p.Q);
    k0 = gb_snap(&p.K);
    v0 = gb_snap(&p.V);
    o0 = gb_snap(&p.dO);
    g0 = gb_snap(&p.G);
    st = bwd(&p, &p.dQ, &p.dK, &p.dV, &p.dG, 1);
    rq = gb_snap(&p.dQ);
    rk = gb_snap(&p.dK);
    rv = gb_snap(&p.dV);
    rg = gb_snap(&p.dG);
    for (it = 0; it < nts && st == FAVOR_OK; ++it) {
        size_t t = ts[it], bad, moved, bad2, moved2;
        /* (a) keys, values and gates after t: dq rows with p_i <= t as they were */
        for (b = 0; b < c->B; ++b)
            for (h = 0; h < c->hkv; ++h)
                for (r = t + 1; r < c->nk; ++r) {
                    for (col = 0; col < c->d; ++col) gb_set(&p.K.t, b, h, r, col, 2 * tu_normal(&rng));
                    for (col = 0; col < c->dv; ++col)
                        gb_set(&p.V.t, b, h, r, col, 2 * tu_normal(&rng));
                }
        fill_gates(&p.G.t, &rng, GS_REAL, t + 1);
        gb_fill(&p.dQ, NAN);
        st = bwd(&p, &p.dQ, &p.dK, &p.dV, &p.dG, 1);
        if (st != FAVOR_OK) break;
        bad = diff_rows(&p.dQ.t, rq, c->B, 0, t + 1 - off);
        moved = diff_rows(&p.dQ.t, rq, c->B, t + 1 - off, t + 2 - off);
        memcpy(p.K.data, k0, p.K.len * p.K.esz);
        memcpy(p.V.data, v0, p.V.len * p.V.esz);
        memcpy(p.G.data, g0, p.G.len * 4);
        /* (b) queries and dout of rows with p_i <= t: dk, dv rows and dg after t */
        for (b = 0; b < c->B; ++b)
            for (h = 0; h < c->hq; ++h)
                for (r = 0; r + off <= t; ++r) {
                    for (col = 0; col < c->d; ++col) gb_set(&p.Q.t, b, h, r, col, tu_normal(&rng));
                    for (col = 0; col < c->dv; ++col)
                        gb_set(&p.dO.t, b, h, r, col, 2 * tu_normal(&rng));
                }
        gb_fill(&p.dK, NAN);
        gb_fill(&p.dV, NAN);
        gb_fill(&p.dG, NAN);
        st = bwd(&p, &p.dQ, &p.dK, &p.dV, &p.dG, 1);
        if (st != FAVOR_OK) break;
        bad2 = diff_rows(&p.dK.t, rk, c->B, t + 1, c->nk) + diff_rows(&p.dV.t, rv, c->B, t + 1, c->nk) +
               diff_rows(&p.dG.t, rg, c->B, t + 1, c->nk);
        moved2 = diff_rows(&p.dK.t, rk, c->B, t, t + 1) != 0 && diff_rows(&p.dG.t, rg, c->B, t, t + 1) != 0;
        memcpy(p.Q.data, q0, p.Q.len * p.Q.esz);
        memcpy(p.dO.data, o0, p.dO.len * p.dO.esz);
        print_message("leak %-8s %-7s nk %4u t %4u: later keys: %u dq elements of rows <= t "
                      "changed%s; earlier rows: %u dk/dv/dg elements after t changed%s\n",
                      tu_kernel_name(kernel), nn ? "no_norm" : "norm", (unsigned)c->nk,
                      (unsigned)t, (unsigned)bad, moved ? "" : ", row t+1 did NOT change",
                      (unsigned)bad2, moved2 ? "" : ", dk/dg at t did NOT change");
        if (bad || !moved || bad2 || !moved2) ++fails;
    }
    if (st != FAVOR_OK) {
        print_error("  leak %s: status %s\n", tu_kernel_name(kernel), favor_status_string(st));
        ++fails;
    }
    free(q0); free(k0); free(v0); free(o0); free(g0);
    free(rq); free(rk); free(rv); free(rg);
    prob_free(&p);
    return fails;
}

static void test_no_future(void **state)
{
    static const gshape s1 = { 1, 4, 2, 200, 200, 8, 5, 16, 1, GS_REAL, 1, 0 };
    static const gshape s2 = { 1, 2, 1, 300, 1100, 8, 5, 16, 1, GS_MILD, 0, 0 };
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

/* ---- (4) validation ------------------------------------------------------------ */

enum {
    V_DG_NO_GATES, V_DG_DECAY_ONLY, V_DG_F16, V_DG_ROWS, V_DG_COLS, V_DG_HEADS,
    V_DG_ON_DQ, V_DG_ON_DK, V_DG_ON_DV, V_DG_ON_GATES, V_DG_ON_DOUT, V_DG_ON_Q, V_DG_ON_K,
    V_DG_ON_V, V_GATES_FULL, V_GATES_FULL_NN, V_DECAY_FULL, V_GATE_POS, V_GATE_NAN,
    V_GAMMA, V_IDENT_NORM, V_IDENT_NORM_FULL, V_GATES_ROWS, V_SOFTMAX_GATES
};

static const struct {
    int fault;
    const char *what;
    favor_status want;
} vcases[] = {
    { V_DG_NO_GATES, "dgates without gates", FAVOR_E_ARG },
    { V_DG_DECAY_ONLY, "dgates with decay only", FAVOR_E_ARG },
    { V_DG_F16, "dgates fp16", FAVOR_E_ARG },
    { V_DG_ROWS, "dgates rows n_k - 1", FAVOR_E_SHAPE },
    { V_DG_COLS, "dgates cols 2", FAVOR_E_SHAPE },
    { V_DG_HEADS, "dgates heads 1", FAVOR_E_SHAPE },
    { V_DG_ON_DQ, "dgates overlaps dq", FAVOR_E_ALIAS },
    { V_DG_ON_DK, "dgates overlaps dk", FAVOR_E_ALIAS },
    { V_DG_ON_DV, "dgates overlaps dv", FAVOR_E_ALIAS },
    { V_DG_ON_GATES, "dgates overlaps gates", FAVOR_E_ALIAS },
    { V_DG_ON_DOUT, "dgates overlaps dout", FAVOR_E_ALIAS },
    { V_DG_ON_Q, "dgates overlaps q", FAVOR_E_ALIAS },
    { V_DG_ON_K, "dgates overlaps k", FAVOR_E_ALIAS },
    { V_DG_ON_V, "dgates overlaps v", FAVOR_E_ALIAS },
    { V_GATES_FULL, "gates, not causal", FAVOR_E_ARG },
    { V_GATES_FULL_NN, "gates, NO_NORM, not causal", FAVOR_E_ARG },
    { V_DECAY_FULL, "decay, not causal", FAVOR_E_ARG },
    { V_GATE_POS, "gate 0.5", FAVOR_E_ARG },
    { V_GATE_NAN, "gate NaN", FAVOR_E_ARG },
    { V_GAMMA, "gamma 1.5", FAVOR_E_ARG },
    { V_IDENT_NORM, "IDENTITY normalized, gated", FAVOR_E_ARG },
    { V_IDENT_NORM_FULL, "IDENTITY normalized, full", FAVOR_E_ARG },
    { V_GATES_ROWS, "gates rows n_k - 1", FAVOR_E_SHAPE },
    { V_SOFTMAX_GATES, "softmax backward, gates", FAVOR_E_ARG },
};

#define VH 2  /* heads (q and k/v) */
#define VN 10 /* rows */
#define VD 8  /* d and d_v */
#define VE (VH * VN * VD)

static float vq[VE], vk[VE], vv[VE], vo[VE], vdo[VE], vdq[VE], vdk[VE], vdv[VE];
static float vg[VH * VN], vdg[VH * VN * 2]; /* room for cols 2 */
static uint16_t vdg16[VH * VN];

/* The backward of case `fault`, with the fault (1) or without it (0): ELU1 (or
 * IDENTITY with FAVOR_NO_NORM), causal, decay and gates, dgates into vdg. */
static favor_status vcall(int fault, int on, const favor_features *fe, const favor_features *fi,
                          char *err, size_t errsz)
{
    favor_tensor Q = favor_tensor_packed(vq, VH, VN, VD), K = favor_tensor_packed(vk, VH, VN, VD);
    favor_tensor V = favor_tensor_packed(vv, VH, VN, VD), O = favor_tensor_packed(vo, VH, VN, VD);
    favor_tensor dO = favor_tensor_packed(vdo, VH, VN, VD);
    favor_tensor dQ = favor_tensor_packed(vdq, VH, VN, VD), dK = favor_tensor_packed(vdk, VH, VN, VD);
    favor_tensor dV = favor_tensor_packed(vdv, VH, VN, VD);
    favor_tensor G = favor_tensor_packed(vg, VH, VN, 1), dG = favor_tensor_packed(vdg, VH, VN, 1);
    const favor_features *f = fe;
    favor_options op = favor_default_options();
    float decay[VH] = { 0.97f, 0.9f };
    favor_status s;
    op.flags = FAVOR_CAUSAL;
    op.decay = decay;
    op.gates = &G;
    op.dgates = &dG;
    op.error = err;
    op.error_size = errsz;
    if (fault == V_IDENT_NORM || fault == V_IDENT_NORM_FULL) {
        f = fi;
        if (!on) op.flags |= FAVOR_NO_NORM;
        if (fault == V_IDENT_NORM_FULL) {
            op.flags &= ~FAVOR_CAUSAL;
            op.decay = NULL;
            op.gates = NULL;
            op.dgates = NULL;
        }
    }
    if (on) {
        switch (fault) {
        case V_DG_NO_GATES: op.gates = NULL; op.decay = NULL; break;
        case V_DG_DECAY_ONLY: op.gates = NULL; break;
        case V_DG_F16: dG = favor_tensor_packed_as(FAVOR_F16, vdg16, VH, VN, 1); break;
        case V_DG_ROWS: dG.rows = VN - 1; break;
        case V_DG_COLS: dG = favor_tensor_packed(vdg, VH, VN, 2); break;
        case V_DG_HEADS: dG.heads = 1; break;
        case V_DG_ON_DQ: dG.data = vdq + 3; break;
        case V_DG_ON_DK: dG.data = vdk + 17; break;
        case V_DG_ON_DV: dG.data = vdv; break;
        case V_DG_ON_GATES: dG.data = vg; break;
        case V_DG_ON_DOUT: dG.data = vdo + 5; break;
        case V_DG_ON_Q: dG.data = vq; break;
        case V_DG_ON_K: dG.data = vk + VE - VH * VN; break;
        case V_DG_ON_V: dG.data = vv + 1; break;
        case V_GATES_FULL: op.flags &= ~FAVOR_CAUSAL; op.decay = NULL; break;
        case V_GATES_FULL_NN: op.flags = FAVOR_NO_NORM; op.decay = NULL; break;
        case V_DECAY_FULL: op.flags &= ~FAVOR_CAUSAL; op.gates = NULL; op.dgates = NULL; break;
        case V_GATE_POS: vg[VN + 3] = 0.5f; break;
        case V_GATE_NAN: vg[VN + 3] = NAN; break;
        case V_GAMMA: decay[1] = 1.5f; break;
        case V_GATES_ROWS: G.rows = VN - 1; break;
        default: break;
        }
    }
    if (fault == V_SOFTMAX_GATES) {
        favor_options so = favor_default_options();
        so.flags = FAVOR_CAUSAL;
        s = favor_softmax_attention(&Q, &K, &V, &O, &so);
        if (s != FAVOR_OK) return s;
        so.error = err;
        so.error_size = errsz;
        if (on) so.gates = &G;
        s = favor_softmax_attention_backward(&Q, &K, &V, &O, &dO, &dQ, &dK, &dV, &so);
    } else {
        s = favor_linear_attention_backward(f, &Q, &K, &V, &dO, &dQ, &dK, &dV, &op);
    }
    vg[VN + 3] = -0.1f;
    return s;
}

static void vsentinels(void)
{
    size_t i;
    for (i = 0; i < VE; ++i) vdq[i] = vdk[i] = vdv[i] = -7.0f;
    for (i = 0; i < VH * VN * 2; ++i) vdg[i] = -7.0f;
    for (i = 0; i < VH * VN; ++i) vdg16[i] = 0x5555u;
}

static int vsentinels_kept(void)
{
    size_t i;
    for (i = 0; i < VE; ++i)
        if (vdq[i] != -7.0f || vdk[i] != -7.0f || vdv[i] != -7.0f) return 0;
    for (i = 0; i < VH * VN * 2; ++i)
        if (vdg[i] != -7.0f) return 0;
    for (i = 0; i < VH * VN; ++i)
        if (vdg16[i] != 0x5555u) return 0;
    return 1;
}

static void test_validation(void **state)
{
    static float in0[6][VE];
    favor_features fe, fi;
    char err[256];
    tu_rng rng = { 2029 };
    size_t i, c;
    int fails = 0;
    (void)state;
    for (i = 0; i < VE; ++i) {
        vq[i] = (float)tu_normal(&rng);
        vk[i] = (float)tu_normal(&rng);
        vv[i] = (float)tu_normal(&rng);
        vdo[i] = (float)tu_normal(&rng);
    }
    for (i = 0; i < VH * VN; ++i) vg[i] = -0.1f;
    assert_int_equal(favor_features_init(&fe, FAVOR_ELU1, VD, VD, 0, 1, NULL), FAVOR_OK);
    assert_int_equal(favor_features_init(&fi, FAVOR_IDENTITY, VD, VD, 0, 1, NULL), FAVOR_OK);
    memcpy(in0[0], vq, sizeof vq);
    memcpy(in0[1], vk, sizeof vk);
    memcpy(in0[2], vv, sizeof vv);
    memcpy(in0[3], vdo, sizeof vdo);
    memcpy(in0[4], vg, sizeof vg);
    for (c = 0; c < sizeof vcases / sizeof vcases[0]; ++c) {
        favor_status s;
        int kept, inputs;
        vsentinels();
        err[0] = 0;
        s = vcall(vcases[c].fault, 1, &fe, &fi, err, sizeof err);
        kept = vsentinels_kept();
        inputs = memcmp(in0[0], vq, sizeof vq) == 0 && memcmp(in0[1], vk, sizeof vk) == 0 &&
                 memcmp(in0[2], vv, sizeof vv) == 0 && memcmp(in0[3], vdo, sizeof vdo) == 0 &&
                 memcmp(in0[4], vg, sizeof vg) == 0;
        print_message("validation %-28s %s  \"%s\"\n", vcases[c].what, favor_status_string(s), err);
        if (s != vcases[c].want) {
            print_error("  %s: got %s, want %s\n", vcases[c].what, favor_status_string(s),
                        favor_status_string(vcases[c].want));
            ++fails;
        } else if (err[0] == 0) {
            print_error("  %s: no text in opts.error\n", vcases[c].what);
            ++fails;
        }
        if (!kept) {
            print_error("  %s: dq, dk, dv or dgates written\n", vcases[c].what);
            ++fails;
        }
        if (!inputs) {
            print_error("  %s: an input changed\n", vcases[c].what);
            ++fails;
        }
        /* the same call without the fault passes and writes dgates (dg_0 = 0) */
        vsentinels();
        s = vcall(vcases[c].fault, 0, &fe, &fi, err, sizeof err);
        if (s != FAVOR_OK) {
            print_error("  %s: without the fault: %s (\"%s\")\n", vcases[c].what,
                        favor_status_string(s), err);
            ++fails;
        } else if (vcases[c].fault != V_SOFTMAX_GATES && vcases[c].fault != V_IDENT_NORM_FULL &&
                   (vdg[0] != 0.0f || vdg[VN] != 0.0f || vdg[VN + 1] == -7.0f ||
                    !isfinite(vdg[VN + 1]) || vdq[0] == -7.0f)) {
            print_error("  %s: without the fault: dgates %g %g %g, dq %g\n", vcases[c].what,
                        (double)vdg[0], (double)vdg[VN], (double)vdg[VN + 1], (double)vdq[0]);
            ++fails;
        }
    }
    assert_int_equal(fails, 0);
}

/* ---- (5) packed sequences -------------------------------------------------------- */

static void test_packed(void **state)
{
    /* 4 sequences, the second with 10 keys and no query row; then 2, the second
     * of 1100 keys (split into segments) */
    static const gshape s[2] = { { 1, 4, 2, 141, 261, 8, 5, 16, 1, GS_REAL, 1, 0 },
                                 { 1, 2, 1, 330, 1150, 8, 5, 16, 1, GS_MILD, 0, 0 } };
    static const size_t sq0[] = { 0, 40, 40, 41, 141 }, sk0[] = { 0, 60, 70, 71, 261 };
    static const size_t sq1[] = { 0, 30, 330 }, sk1[] = { 0, 50, 1150 };
    static const favor_kernel ks[] = { FAVOR_ELU1, FAVOR_POSITIVE };
    size_t k, q, l;
    int nn, fails = 0;
    double t0 = now();
    (void)state;
    for (l = 0; l < 2; ++l)
        for (k = 0; k < 2; ++k)
            for (nn = 0; nn < 2; ++nn) {
                const size_t *sq = l ? sq1 : sq0, *sk = l ? sk1 : sk0, ns = l ? 2 : 4;
                prob p;
                gbuf q2, k2, v2, g2;
                favor_options po;
                favor_status st;
                int same, zeros = 1;
                if (prob_make(&p, &s[l], ks[k], nn, G_BOTH, 300 + k)) {
                    ++fails;
                    continue;
                }
                new_grads(&p, &q2, &k2, &v2, &g2);
                po = p.opt;
                po.seqs = ns;
                po.seq_q = sq;
                po.seq_k = sk;
                st = favor_linear_attention_backward(&p.f, &p.Q.t, &p.K.t, &p.V.t, &p.dO.t,
                                                     &p.dQ.t, &p.dK.t, &p.dV.t, &po);
                for (q = 0; q < ns && st == FAVOR_OK; ++q) {
                    size_t r0 = sq[q], nr = sq[q + 1] - sq[q], k0 = sk[q], nk = sk[q + 1] - k0;
                    favor_tensor tq = gb_rows(&p.Q.t, r0, nr), tdo = gb_rows(&p.dO.t, r0, nr);
                    favor_tensor tk = gb_rows(&p.K.t, k0, nk), tv = gb_rows(&p.V.t, k0, nk);
                    favor_tensor tg = gb_rows(&p.G.t, k0, nk), tdq = gb_rows(&q2.t, r0, nr);
                    favor_tensor tdk = gb_rows(&k2.t, k0, nk), tdv = gb_rows(&v2.t, k0, nk);
                    favor_tensor tdg = gb_rows(&g2.t, k0, nk);
                    favor_options so = p.opt;
                    if (nr == 0) { /* no rows: zero gradients for its keys, in place */
                        size_t h, r, c;
                        for (h = 0; h < s[l].hkv; ++h)
                            for (r = k0; r < k0 + nk; ++r) {
                                for (c = 0; c < s[l].d; ++c) {
                                    if (gb_get(&p.dK.t, 0, h, r, c) != 0.0) zeros = 0;
                                    gb_set(&k2.t, 0, h, r, c, gb_get(&p.dK.t, 0, h, r, c));
                                }
                                for (c = 0; c < s[l].dv; ++c) {
                                    if (gb_get(&p.dV.t, 0, h, r, c) != 0.0) zeros = 0;
                                    gb_set(&v2.t, 0, h, r, c, gb_get(&p.dV.t, 0, h, r, c));
                                }
                                if (gb_get(&p.dG.t, 0, h, r, 0) != 0.0) zeros = 0;
                                gb_set(&g2.t, 0, h, r, 0, gb_get(&p.dG.t, 0, h, r, 0));
                            }
                        continue;
                    }
                    so.gates = &tg;
                    so.dgates = &tdg;
                    st = favor_linear_attention_backward(&p.f, &tq, &tk, &tv, &tdo, &tdq, &tdk,
                                                         &tdv, &so);
                }
                same = st == FAVOR_OK && memcmp(p.dQ.data, q2.data, q2.len * q2.esz) == 0 &&
                       memcmp(p.dK.data, k2.data, k2.len * k2.esz) == 0 &&
                       memcmp(p.dV.data, v2.data, v2.len * v2.esz) == 0 &&
                       memcmp(p.dG.data, g2.data, g2.len * 4) == 0;
                print_message("packed %u seqs, n_k %4u, %-8s %-7s: %s, %s%s\n", (unsigned)ns,
                              (unsigned)s[l].nk, tu_kernel_name(ks[k]), nn ? "no_norm" : "norm",
                              favor_status_string(st), same ? "bit-identical" : "DIFFER",
                              zeros ? "" : ", keys without rows have nonzero gradients");
                if (!same || !zeros) ++fails;
                gfree(&q2, &k2, &v2, &g2);
                prob_free(&p);
            }
    print_message("packed: %.2f s\n", now() - t0);
    assert_int_equal(fails, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_fd),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_accuracy),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_no_future),
        cmocka_unit_test(test_packed),
    };
    if (tu_check_backend() != 0) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
