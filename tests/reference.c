/* The float64 reference of the favor.h tests (see reference.h): design.md
 * section 1 evaluated directly, in double: softmax over the explicit scores,
 * O(n n_k) per head; linear attention through its features in the associative
 * form, prefix sums over the keys, O((n + n_k) width d_v) per head (the explicit
 * weights, O(n n_k width), made the references most of the test time, and
 * under valgrind and qemu most of CI's; test_linear holds the two forms to
 * 1e-12 of each other).
 *
 * Feature maps (x' = sqrt(s) x, W = f->w widened to double, m = f->count):
 *     ELU1        elu(x) + 1 on the unscaled x                  width d
 *     POSITIVE    exp(W x' - |x'|^2/2) / sqrt(m)                 width m
 *     HYPERBOLIC  exp(-|x'|^2/2) / sqrt(2m) [exp(W x'), exp(-W x')]   2m
 *     TRIG        exp(|x'|^2/2) / sqrt(m) [sin W x', cos W x']        2m
 *     RELU        max(W x', 0) / sqrt(m) + 1e-3                  width m
 *
 * The only stabilization is what double needs: every feature row is computed
 * as exp(-c_row) times the map, with c_row the largest exponent of the row, and
 * the ratio of ref_linear multiplies the key rows back by exp(c_row - C) with C
 * the largest c_row of the head. Both constants cancel exactly in the attention
 * ratio, so this is the same formula, not an approximation of it.
 *
 * Backward (ref_linear_backward): the gradient of L with respect to a feature row
 * is taken back to the input row x through the map. With x' = sqrt(s) x,
 * u = W x', p = phi (.) dphi (elementwise) and, for the two-part maps,
 * p = [p1, p2] and phi = [phi1, phi2]:
 *     ELU1        dx_c = dphi_c (x_c > 0 ? 1 : exp(x_c))
 *     POSITIVE    dx = sqrt(s) W^T p - s x sum_l p_l
 *     HYPERBOLIC  dx = sqrt(s) W^T (p1 - p2) - s x sum_l (p1 + p2)_l
 *     TRIG        dx = s x sum_l (p1 + p2)_l + sqrt(s) W^T (phi2 (.) dphi1 - phi1 (.) dphi2)
 *     RELU        dx = sqrt(s) / sqrt(m) W^T (dphi (.) [u > 0])
 * Every random-feature formula is a sum of products phi_l dphi_l: multiplying a
 * row's phi by a constant divides its dphi by the same constant, so they hold
 * for the stabilized rows as they are (ELU1 and RELU have no stabilizer). */
#include "reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static void *ref_alloc(size_t count, size_t size)
{
    void *p = malloc((count ? count : 1) * size);
    if (!p) {
        fprintf(stderr, "reference: out of memory\n");
        exit(2);
    }
    return p;
}

/* Visible keys of query row i: j < ref_visible(...). */
static size_t ref_visible(size_t i, size_t n, size_t nk, int causal)
{
    if (!causal) return nk;
    if (nk >= n) return i + (nk - n) + 1;      /* j <= i + nk - n */
    if (i < n - nk) return 0;                  /* i + nk - n < 0 */
    return i - (n - nk) + 1;
}

static size_t ref_width(const favor_features *f)
{
    switch (f->kernel) {
    case FAVOR_ELU1: case FAVOR_IDENTITY: return f->dim;
    case FAVOR_POSITIVE:
    case FAVOR_RELU: return f->count;
    case FAVOR_HYPERBOLIC:
    case FAVOR_TRIG: return 2 * f->count;
    case FAVOR_POLY2: return 1 + f->dim + f->dim * (f->dim + 1) / 2;
    }
    return 0;
}

/* POLY2's kernel computed directly, not through its features: 1 + t + t^2/2
 * with t = scale a.b; *dt = its derivative in t, 1 + t */
static double ref_poly2(const double *a, const double *b, size_t d, double scale, double *dt)
{
    size_t c;
    double t = 0;
    for (c = 0; c < d; ++c) t += a[c] * b[c];
    t *= scale;
    if (dt) *dt = 1 + t;
    return 1 + t + t * t / 2;
}

/* u = W x' with x' = rs x: the m projections of one row */
static void ref_project(const favor_features *f, const double *x, double rs, double *u)
{
    size_t d = f->dim, l, c;
    for (l = 0; l < f->count; ++l) {
        const float *w = f->w + l * d;
        double s = 0;
        for (c = 0; c < d; ++c) s += (double)w[c] * (rs * x[c]);
        u[l] = s;
    }
}

/* phi(x) * exp(-*logc) for one row x of f->dim doubles. u is m doubles of scratch. */
static void ref_feature_row(const favor_features *f, const double *x, double scale,
                            double *phi, double *u, double *logc)
{
    size_t d = f->dim, m = f->count, l, c;
    double rs = sqrt(scale), n2 = 0, mx;

    *logc = 0;
    if (f->kernel == FAVOR_ELU1) {
        for (c = 0; c < d; ++c) phi[c] = x[c] > 0 ? x[c] + 1.0 : exp(x[c]);
        return;
    }
    if (f->kernel == FAVOR_IDENTITY) {
        for (c = 0; c < d; ++c) phi[c] = rs * x[c];
        return;
    }
    if (f->kernel == FAVOR_POLY2) { /* 1, x', x'_i x'_j (i < j), x'_i^2 / sqrt(2) */
        size_t i, at = 1 + d;
        phi[0] = 1;
        for (c = 0; c < d; ++c) phi[1 + c] = rs * x[c];
        for (i = 0; i < d; ++i)
            for (c = i; c < d; ++c)
                phi[at++] = scale * x[i] * x[c] * (c == i ? sqrt(0.5) : 1.0);
        return;
    }
    for (c = 0; c < d; ++c) n2 += (rs * x[c]) * (rs * x[c]);
    ref_project(f, x, rs, u);
    switch (f->kernel) {
    case FAVOR_POSITIVE:
        mx = -HUGE_VAL;
        for (l = 0; l < m; ++l) if (u[l] - n2 / 2 > mx) mx = u[l] - n2 / 2;
        *logc = mx;
        for (l = 0; l < m; ++l) phi[l] = exp(u[l] - n2 / 2 - mx) / sqrt((double)m);
        break;
    case FAVOR_HYPERBOLIC:
        mx = -HUGE_VAL;
        for (l = 0; l < m; ++l) if (fabs(u[l]) - n2 / 2 > mx) mx = fabs(u[l]) - n2 / 2;
        *logc = mx;
        for (l = 0; l < m; ++l) {
            phi[l] = exp(u[l] - n2 / 2 - mx) / sqrt(2.0 * (double)m);
            phi[m + l] = exp(-u[l] - n2 / 2 - mx) / sqrt(2.0 * (double)m);
        }
        break;
    case FAVOR_TRIG:
        *logc = n2 / 2;
        for (l = 0; l < m; ++l) {
            phi[l] = sin(u[l]) / sqrt((double)m);
            phi[m + l] = cos(u[l]) / sqrt((double)m);
        }
        break;
    case FAVOR_RELU:
        for (l = 0; l < m; ++l) phi[l] = (u[l] > 0 ? u[l] : 0.0) / sqrt((double)m) + 1e-3;
        break;
    case FAVOR_ELU1:
    case FAVOR_POLY2:
    case FAVOR_IDENTITY:
        break;
    }
}

/* The nk key rows K of one head as the linear references use them: phi(k_j)
 * exp(c_j - C) at pk (nk x width), C the largest row constant (lc: nk
 * doubles, u: m doubles of scratch) */
static void ref_stable_keys(const favor_features *f, const double *K, size_t nk, double scale,
                            double *pk, double *lc, double *u)
{
    size_t width = ref_width(f), j, l;
    double C = -HUGE_VAL;
    for (j = 0; j < nk; ++j) {
        ref_feature_row(f, K + j * f->dim, scale, pk + j * width, u, &lc[j]);
        if (lc[j] > C) C = lc[j];
    }
    for (j = 0; j < nk; ++j) {
        double e = exp(lc[j] - C);
        for (l = 0; l < width; ++l) pk[j * width + l] *= e;
    }
}

/* S += a b^T (width x dv) and z += a */
static void ref_prefix_add(double *S, double *z, const double *a, const double *b, size_t width,
                           size_t dv)
{
    size_t l, c;
    for (l = 0; l < width; ++l) {
        z[l] += a[l];
        for (c = 0; c < dv; ++c) S[l * dv + c] += a[l] * b[c];
    }
}

void ref_features(const favor_features *f, const double *x, size_t rows, double scale,
                  double *phi)
{
    size_t width = ref_width(f), r, l;
    double *u = (double *)ref_alloc(f->count ? f->count : 1, sizeof *u);
    if (scale == 0) scale = f->scale;
    for (r = 0; r < rows; ++r) {
        double logc, e;
        double *p = phi + r * width;
        ref_feature_row(f, x + r * f->dim, scale, p, u, &logc);
        e = exp(logc);
        if (logc != 0)
            for (l = 0; l < width; ++l) p[l] *= e;
    }
    free(u);
}

/* p[j] = softmax_j(scale q_i . k_j) over the vis visible keys (vis >= 1) */
static void ref_softmax_probs(const double *qi, const double *K, size_t vis, size_t d,
                              double scale, double *p)
{
    size_t j, c;
    double mx = -HUGE_VAL, den = 0;
    for (j = 0; j < vis; ++j) {
        double t = 0;
        for (c = 0; c < d; ++c) t += qi[c] * K[j * d + c];
        p[j] = scale * t;
        if (p[j] > mx) mx = p[j];
    }
    for (j = 0; j < vis; ++j) {
        p[j] = exp(p[j] - mx);
        den += p[j];
    }
    for (j = 0; j < vis; ++j) p[j] /= den;
}

void ref_softmax(const double *q, const double *k, const double *v, double *out,
                 size_t hq, size_t hkv, size_t n, size_t nk, size_t d, size_t dv,
                 double scale, int causal)
{
    size_t group = hq / hkv, h, i, j, c;
    double *s = (double *)ref_alloc(nk, sizeof *s);
    if (scale == 0) scale = 1.0 / sqrt((double)d);
    for (h = 0; h < hq; ++h) {
        const double *K = k + (h / group) * nk * d, *V = v + (h / group) * nk * dv;
        for (i = 0; i < n; ++i) {
            const double *qi = q + (h * n + i) * d;
            double *o = out + (h * n + i) * dv;
            size_t vis = ref_visible(i, n, nk, causal);
            for (c = 0; c < dv; ++c) o[c] = 0;
            if (vis == 0) continue;
            ref_softmax_probs(qi, K, vis, d, scale, s);
            for (j = 0; j < vis; ++j)
                for (c = 0; c < dv; ++c) o[c] += s[j] * V[j * dv + c];
        }
    }
    free(s);
}

/* POLY2 attention from the kernel itself, not its features */
static void ref_poly2_linear(const double *q, const double *k, const double *v, double *out,
                             size_t hq, size_t hkv, size_t n, size_t nk, size_t d, size_t dv,
                             double scale, int causal)
{
    size_t group = hq / hkv, h, i, j, c;
    for (h = 0; h < hq; ++h)
        for (i = 0; i < n; ++i) {
            const double *K = k + (h / group) * nk * d, *V = v + (h / group) * nk * dv;
            double *o = out + (h * n + i) * dv, den = 0;
            size_t vis = ref_visible(i, n, nk, causal);
            for (c = 0; c < dv; ++c) o[c] = 0;
            for (j = 0; j < vis; ++j) {
                double a = ref_poly2(q + (h * n + i) * d, K + j * d, d, scale, NULL);
                den += a;
                for (c = 0; c < dv; ++c) o[c] += a * V[j * dv + c];
            }
            for (c = 0; c < dv; ++c) o[c] = den != 0 ? o[c] / den : 0.0;
        }
}

/* its backward: with e_ij = (dout_i . v_j - dout_i . o_i) / den_i, dq_i += e_ij
 * (1 + t_ij) s k_j, dk_j += e_ij (1 + t_ij) s q_i, dv_j += a_ij / den_i dout_i */
static void ref_poly2_backward(const double *q, const double *k, const double *v,
                               const double *dout, double *dq, double *dk, double *dv,
                               size_t hq, size_t hkv, size_t n, size_t nk, size_t d,
                               size_t dvc, double scale, int causal)
{
    size_t group = hq / hkv, h, i, j, c;
    double *o = (double *)ref_alloc(dvc, sizeof *o);
    for (i = 0; i < hkv * nk * d; ++i) dk[i] = 0;
    for (i = 0; i < hkv * nk * dvc; ++i) dv[i] = 0;
    for (h = 0; h < hq; ++h)
        for (i = 0; i < n; ++i) {
            const double *K = k + (h / group) * nk * d, *V = v + (h / group) * nk * dvc;
            const double *qi = q + (h * n + i) * d, *gi = dout + (h * n + i) * dvc;
            double *dqi = dq + (h * n + i) * d, *dK = dk + (h / group) * nk * d;
            double *dV = dv + (h / group) * nk * dvc, den = 0, go = 0;
            size_t vis = ref_visible(i, n, nk, causal);
            for (c = 0; c < d; ++c) dqi[c] = 0;
            for (c = 0; c < dvc; ++c) o[c] = 0;
            for (j = 0; j < vis; ++j) {
                double a = ref_poly2(qi, K + j * d, d, scale, NULL);
                den += a;
                for (c = 0; c < dvc; ++c) o[c] += a * V[j * dvc + c];
            }
            if (vis == 0) continue;
            for (c = 0; c < dvc; ++c) go += gi[c] * o[c] / den;
            for (j = 0; j < vis; ++j) {
                double dt, a = ref_poly2(qi, K + j * d, d, scale, &dt), gv = 0, e;
                for (c = 0; c < dvc; ++c) gv += gi[c] * V[j * dvc + c];
                e = (gv - go) / den * dt * scale;
                for (c = 0; c < d; ++c) {
                    dqi[c] += e * K[j * d + c];
                    dK[j * d + c] += e * qi[c];
                }
                for (c = 0; c < dvc; ++c) dV[j * dvc + c] += a / den * gi[c];
            }
        }
    free(o);
}

/* linear attention through the features, in the associative form: the rows
 * of a head in order, each after the prefix sums S = sum_j phi(k_j) v_j^T
 * (width x dv) and z = sum_j phi(k_j) of the keys it sees, o_i = phi(q_i)^T S /
 * phi(q_i).z. That is O((n + n_k) width dv) per head where the explicit weights
 * cost O(n n_k width): the same formula summed in another order (test_linear
 * checks it against the explicit weights of ref_weights). */
static void ref_linear_features(const favor_features *f, const double *q, const double *k,
                                const double *v, double *out, size_t hq, size_t hkv,
                                size_t n, size_t nk, size_t dv, double scale, int causal)
{
    size_t group = hq / hkv, d = f->dim, width = ref_width(f), h, g, i, c, l;
    double *pq = (double *)ref_alloc(width, sizeof *pq);
    double *pk = (double *)ref_alloc(nk * width, sizeof *pk);
    double *lc = (double *)ref_alloc(nk, sizeof *lc);
    double *u = (double *)ref_alloc(f->count ? f->count : 1, sizeof *u);
    double *S = (double *)ref_alloc(width * dv, sizeof *S);
    double *z = (double *)ref_alloc(width, sizeof *z);
    if (scale == 0) scale = f->scale;

    for (g = 0; g < hkv; ++g) {
        const double *V = v + g * nk * dv;
        ref_stable_keys(f, k + g * nk * d, nk, scale, pk, lc, u);
        for (h = g * group; h < (g + 1) * group; ++h) {
            size_t seen = 0;
            for (l = 0; l < width * dv; ++l) S[l] = 0;
            for (l = 0; l < width; ++l) z[l] = 0;
            for (i = 0; i < n; ++i) {
                double logc, den = 0;
                double *o = out + (h * n + i) * dv;
                size_t vis = ref_visible(i, n, nk, causal);
                for (; seen < vis; ++seen) /* vis does not decrease with i */
                    ref_prefix_add(S, z, pk + seen * width, V + seen * dv, width, dv);
                ref_feature_row(f, q + (h * n + i) * d, scale, pq, u, &logc);
                for (c = 0; c < dv; ++c) o[c] = 0;
                for (l = 0; l < width; ++l) {
                    den += pq[l] * z[l];
                    for (c = 0; c < dv; ++c) o[c] += pq[l] * S[l * dv + c];
                }
                if (den != 0)
                    for (c = 0; c < dv; ++c) o[c] /= den;
                else
                    for (c = 0; c < dv; ++c) o[c] = 0;
            }
        }
    }
    free(pq);
    free(pk);
    free(lc);
    free(u);
    free(S);
    free(z);
}

void ref_linear(const favor_features *f, const double *q, const double *k,
                const double *v, double *out, size_t hq, size_t hkv, size_t n,
                size_t nk, size_t dv, double scale, int causal)
{
    if (f->kernel == FAVOR_POLY2) /* the kernel itself, not its features */
        ref_poly2_linear(q, k, v, out, hq, hkv, n, nk, f->dim, dv,
                         scale == 0 ? f->scale : scale, causal);
    else
        ref_linear_features(f, q, k, v, out, hq, hkv, n, nk, dv, scale, causal);
}

void ref_softmax_lse(const double *q, const double *k, double *lse, size_t hq, size_t hkv,
                     size_t n, size_t nk, size_t d, double scale, int causal)
{
    size_t group = hq / hkv, h, i, j, c;
    double *s = (double *)ref_alloc(nk, sizeof *s);
    if (scale == 0) scale = 1.0 / sqrt((double)d);
    for (h = 0; h < hq; ++h) {
        const double *K = k + (h / group) * nk * d;
        for (i = 0; i < n; ++i) {
            const double *qi = q + (h * n + i) * d;
            size_t vis = ref_visible(i, n, nk, causal);
            double mx = -HUGE_VAL, sum = 0;
            for (j = 0; j < vis; ++j) {
                double t = 0;
                for (c = 0; c < d; ++c) t += qi[c] * K[j * d + c];
                s[j] = scale * t;
                if (s[j] > mx) mx = s[j];
            }
            for (j = 0; j < vis; ++j) sum += exp(s[j] - mx);
            lse[h * n + i] = vis ? mx + log(sum) : -HUGE_VAL;
        }
    }
    free(s);
}

void ref_softmax_backward(const double *q, const double *k, const double *v,
                          const double *dout, double *dq, double *dk, double *dv,
                          size_t hq, size_t hkv, size_t n, size_t nk, size_t d,
                          size_t dv_cols, double scale, int causal)
{
    size_t group = hq / hkv, h, i, j, c;
    double *p = (double *)ref_alloc(nk, sizeof *p);
    double *o = (double *)ref_alloc(dv_cols, sizeof *o);
    if (scale == 0) scale = 1.0 / sqrt((double)d);
    for (i = 0; i < hkv * nk * d; ++i) dk[i] = 0;
    for (i = 0; i < hkv * nk * dv_cols; ++i) dv[i] = 0;
    for (h = 0; h < hq; ++h) {
        const double *K = k + (h / group) * nk * d, *V = v + (h / group) * nk * dv_cols;
        double *dK = dk + (h / group) * nk * d, *dV = dv + (h / group) * nk * dv_cols;
        for (i = 0; i < n; ++i) {
            const double *qi = q + (h * n + i) * d, *gi = dout + (h * n + i) * dv_cols;
            double *dqi = dq + (h * n + i) * d;
            size_t vis = ref_visible(i, n, nk, causal);
            double D = 0;
            for (c = 0; c < d; ++c) dqi[c] = 0;
            if (vis == 0) continue;
            ref_softmax_probs(qi, K, vis, d, scale, p);
            for (c = 0; c < dv_cols; ++c) o[c] = 0;
            for (j = 0; j < vis; ++j)
                for (c = 0; c < dv_cols; ++c) o[c] += p[j] * V[j * dv_cols + c];
            for (c = 0; c < dv_cols; ++c) D += gi[c] * o[c];
            for (j = 0; j < vis; ++j) {
                double dp = 0, ds;
                for (c = 0; c < dv_cols; ++c) dp += gi[c] * V[j * dv_cols + c];
                ds = p[j] * (dp - D);
                for (c = 0; c < d; ++c) {
                    dqi[c] += scale * ds * K[j * d + c];
                    dK[j * d + c] += scale * ds * qi[c];
                }
                for (c = 0; c < dv_cols; ++c) dV[j * dv_cols + c] += p[j] * gi[c];
            }
        }
    }
    free(p);
    free(o);
}

/* dx (f->dim doubles) = d/dx of sum_l dphi_l phi_l(x) with dphi held constant, for
 * one row x whose features are phi (times any positive constant, as
 * ref_feature_row gives them) and dphi (times the reciprocal constant); see the
 * table at the top. u is f->count doubles of scratch. */
static void ref_feature_grad(const favor_features *f, const double *x, double scale,
                             const double *phi, const double *dphi, double *u, double *dx)
{
    size_t d = f->dim, m = f->count, l, c;
    double rs = sqrt(scale), sp = 0, xs = 0, wf = rs;

    if (f->kernel == FAVOR_ELU1) {
        for (c = 0; c < d; ++c) dx[c] = dphi[c] * (x[c] > 0 ? 1.0 : exp(x[c]));
        return;
    }
    if (f->kernel == FAVOR_IDENTITY) {
        for (c = 0; c < d; ++c) dx[c] = rs * dphi[c];
        return;
    }
    if (f->kernel == FAVOR_POLY2) { /* d/dx of rs x_c and scale x_i x_c (/sqrt(2) at c = i) */
        size_t i, at = 1 + d;
        for (c = 0; c < d; ++c) dx[c] = rs * dphi[1 + c];
        for (i = 0; i < d; ++i)
            for (c = i; c < d; ++c, ++at) {
                if (c == i) {
                    dx[i] += scale * sqrt(2.0) * x[i] * dphi[at];
                } else {
                    dx[i] += scale * x[c] * dphi[at];
                    dx[c] += scale * x[i] * dphi[at];
                }
            }
        (void)phi;
        return;
    }
    ref_project(f, x, rs, u);
    /* u[l] becomes r_l, the coefficient of W_l in dx = wf W^T r + xs s x */
    switch (f->kernel) {
    case FAVOR_POSITIVE:
        for (l = 0; l < m; ++l) {
            double p = phi[l] * dphi[l];
            sp += p;
            u[l] = p;
        }
        xs = -sp;
        break;
    case FAVOR_HYPERBOLIC:
        for (l = 0; l < m; ++l) {
            double p1 = phi[l] * dphi[l], p2 = phi[m + l] * dphi[m + l];
            sp += p1 + p2;
            u[l] = p1 - p2;
        }
        xs = -sp;
        break;
    case FAVOR_TRIG:
        for (l = 0; l < m; ++l) {
            sp += phi[l] * dphi[l] + phi[m + l] * dphi[m + l];
            u[l] = phi[m + l] * dphi[l] - phi[l] * dphi[m + l];
        }
        xs = sp;
        break;
    case FAVOR_RELU:
        for (l = 0; l < m; ++l) u[l] = u[l] > 0 ? dphi[l] : 0.0;
        wf = rs / sqrt((double)m);
        break;
    case FAVOR_ELU1:
    case FAVOR_POLY2:
    case FAVOR_IDENTITY:
        break;
    }
    for (c = 0; c < d; ++c) dx[c] = xs * scale * x[c];
    for (l = 0; l < m; ++l) {
        const float *w = f->w + l * d;
        double r = wf * u[l];
        for (c = 0; c < d; ++c) dx[c] += r * (double)w[c];
    }
}

/* The gradients in the associative form of ref_linear_features. With a_ij =
 * phi(q_i).phi(k_j), den_i = phi(q_i).z_i, g_i = dout_i and go_i = g_i.o_i, the
 * explicit sums over the pairs (i, j) row i sees,
 *     dphi(q_i) = sum_j e_ij phi(k_j),   e_ij = (g_i.v_j - go_i) / den_i
 *     dphi(k_j) = sum_i e_ij phi(q_i),   dv_j = sum_i a_ij g_i / den_i,
 * regroup into the prefix sums S, z of the forward (dphi(q_i) = (S_i g_i - go_i
 * z_i) / den_i) and suffix sums over the rows that see key j, T_j = sum_i
 * phi(q_i) g_i^T / den_i (width x dv) and w_j = sum_i phi(q_i) go_i / den_i:
 * dphi(k_j) = T_j v_j - w_j and dv_j = T_j^T phi(k_j). */
static void ref_linear_backward_features(const favor_features *f, const double *q,
                                         const double *k, const double *v,
                                         const double *dout, double *dq, double *dk,
                                         double *dv, size_t hq, size_t hkv, size_t n,
                                         size_t nk, size_t dv_cols, double scale, int causal)
{
    size_t group = hq / hkv, d = f->dim, width = ref_width(f), g, h, i, j, c, l;
    double *pq = (double *)ref_alloc(n * width, sizeof *pq);
    double *dpq = (double *)ref_alloc(width, sizeof *dpq);
    double *pk = (double *)ref_alloc(nk * width, sizeof *pk);
    double *dpk = (double *)ref_alloc(nk * width, sizeof *dpk);
    double *lc = (double *)ref_alloc(nk, sizeof *lc);
    double *den = (double *)ref_alloc(n, sizeof *den);
    double *go = (double *)ref_alloc(n, sizeof *go);
    double *o = (double *)ref_alloc(dv_cols, sizeof *o);
    double *u = (double *)ref_alloc(f->count ? f->count : 1, sizeof *u);
    double *S = (double *)ref_alloc(width * dv_cols, sizeof *S);
    double *z = (double *)ref_alloc(width, sizeof *z);
    if (scale == 0) scale = f->scale;

    for (i = 0; i < hkv * nk * dv_cols; ++i) dv[i] = 0;
    for (g = 0; g < hkv; ++g) {
        const double *V = v + g * nk * dv_cols;
        double *dV = dv + g * nk * dv_cols;
        ref_stable_keys(f, k + g * nk * d, nk, scale, pk, lc, u);
        for (l = 0; l < nk * width; ++l) dpk[l] = 0;
        for (h = g * group; h < (g + 1) * group; ++h) {
            size_t seen = 0, r;
            /* rows in order: the forward, go_i and dq_i */
            for (l = 0; l < width * dv_cols; ++l) S[l] = 0;
            for (l = 0; l < width; ++l) z[l] = 0;
            for (i = 0; i < n; ++i) {
                const double *qi = q + (h * n + i) * d, *gi = dout + (h * n + i) * dv_cols;
                double *dqi = dq + (h * n + i) * d, *pqi = pq + i * width, logc;
                size_t vis = ref_visible(i, n, nk, causal);
                for (; seen < vis; ++seen)
                    ref_prefix_add(S, z, pk + seen * width, V + seen * dv_cols, width, dv_cols);
                for (c = 0; c < d; ++c) dqi[c] = 0;
                den[i] = go[i] = 0;
                if (vis == 0) continue; /* den 0: the row contributes nothing */
                ref_feature_row(f, qi, scale, pqi, u, &logc);
                for (c = 0; c < dv_cols; ++c) o[c] = 0;
                for (l = 0; l < width; ++l) {
                    den[i] += pqi[l] * z[l];
                    for (c = 0; c < dv_cols; ++c) o[c] += pqi[l] * S[l * dv_cols + c];
                }
                if (den[i] == 0) continue;
                for (c = 0; c < dv_cols; ++c) go[i] += gi[c] * (o[c] / den[i]);
                for (l = 0; l < width; ++l) {
                    double t = 0;
                    for (c = 0; c < dv_cols; ++c) t += S[l * dv_cols + c] * gi[c];
                    dpq[l] = (t - go[i] * z[l]) / den[i];
                }
                ref_feature_grad(f, qi, scale, pqi, dpq, u, dqi);
            }
            /* keys in reverse: T (in S) and w (in z) over the rows that see key j,
             * a suffix of the rows since vis does not decrease with i */
            for (l = 0; l < width * dv_cols; ++l) S[l] = 0;
            for (l = 0; l < width; ++l) z[l] = 0;
            r = n;
            for (j = nk; j-- > 0;) {
                const double *pkj = pk + j * width, *Vj = V + j * dv_cols;
                double *dpkj = dpk + j * width;
                for (; r > 0 && ref_visible(r - 1, n, nk, causal) > j; --r) {
                    const double *gi = dout + (h * n + r - 1) * dv_cols;
                    double *pqi = pq + (r - 1) * width;
                    if (den[r - 1] == 0) continue;
                    for (l = 0; l < width; ++l) {
                        double e = pqi[l] / den[r - 1];
                        z[l] += e * go[r - 1];
                        for (c = 0; c < dv_cols; ++c) S[l * dv_cols + c] += e * gi[c];
                    }
                }
                for (l = 0; l < width; ++l) {
                    double t = 0;
                    for (c = 0; c < dv_cols; ++c) {
                        t += S[l * dv_cols + c] * Vj[c];
                        dV[j * dv_cols + c] += pkj[l] * S[l * dv_cols + c];
                    }
                    dpkj[l] += t - z[l];
                }
            }
        }
        for (j = 0; j < nk; ++j)
            ref_feature_grad(f, k + (g * nk + j) * d, scale, pk + j * width, dpk + j * width, u,
                             dk + (g * nk + j) * d);
    }
    free(pq);
    free(dpq);
    free(pk);
    free(dpk);
    free(lc);
    free(den);
    free(go);
    free(o);
    free(u);
    free(S);
    free(z);
}

void ref_linear_backward(const favor_features *f, const double *q, const double *k,
                         const double *v, const double *dout, double *dq, double *dk,
                         double *dv, size_t hq, size_t hkv, size_t n, size_t nk,
                         size_t dv_cols, double scale, int causal)
{
    if (f->kernel == FAVOR_POLY2) /* the kernel itself, not its features */
        ref_poly2_backward(q, k, v, dout, dq, dk, dv, hq, hkv, n, nk, f->dim, dv_cols,
                           scale == 0 ? f->scale : scale, causal);
    else
        ref_linear_backward_features(f, q, k, v, dout, dq, dk, dv, hq, hkv, n, nk, dv_cols,
                                     scale, causal);
}

void ref_weights(const favor_features *f, const double *qi, const double *K, size_t vis,
                 size_t d, double scale, double *p)
{
    size_t width, j, l;
    double *pq, *pk, *lc, *u, C = -HUGE_VAL, den = 0, lq;
    if (vis == 0) return;
    if (!f) {
        ref_softmax_probs(qi, K, vis, d, scale == 0 ? 1.0 / sqrt((double)d) : scale, p);
        return;
    }
    if (scale == 0) scale = f->scale;
    if (f->kernel == FAVOR_POLY2) { /* the kernel itself */
        for (j = 0; j < vis; ++j) den += p[j] = ref_poly2(qi, K + j * d, d, scale, NULL);
        for (j = 0; j < vis; ++j) p[j] /= den;
        return;
    }
    width = ref_width(f);
    pq = (double *)ref_alloc(width, sizeof *pq);
    pk = (double *)ref_alloc(vis * width, sizeof *pk);
    lc = (double *)ref_alloc(vis, sizeof *lc);
    u = (double *)ref_alloc(f->count ? f->count : 1, sizeof *u);
    ref_feature_row(f, qi, scale, pq, u, &lq);
    for (j = 0; j < vis; ++j) {
        ref_feature_row(f, K + j * f->dim, scale, pk + j * width, u, &lc[j]);
        if (lc[j] > C) C = lc[j];
    }
    for (j = 0; j < vis; ++j) {
        double a = 0;
        for (l = 0; l < width; ++l) a += pq[l] * pk[j * width + l];
        p[j] = a * exp(lc[j] - C);
        den += p[j];
    }
    for (j = 0; j < vis; ++j) p[j] = den != 0 ? p[j] / den : 0.0;
    free(pq);
    free(pk);
    free(lc);
    free(u);
}

/* The row's visible keys, scores (x[j], -inf where hidden) and the derivative of
 * the softcap (g[j] = 1 - tanh^2, 1 without it); returns the number visible */
static size_t ref_mods_row(const double *qi, const double *K, size_t i, size_t n, size_t nk,
                           size_t d, double scale, const ref_mods *md, size_t h, double *x,
                           double *g)
{
    const size_t nrows = n;
    size_t j, c, vis = 0, s = 0, q0 = 0, k0 = 0, k1 = nk;
    long p;
    if (md->seqs) { /* the row's sequence, its own positions */
        while (!(md->seq_q[s] <= i && i < md->seq_q[s + 1])) ++s;
        q0 = md->seq_q[s];
        k0 = md->seq_k[s];
        k1 = md->seq_k[s + 1];
        n = md->seq_q[s + 1] - q0;
    }
    p = (long)(i - q0) + (long)(k1 - k0) - (long)n;
    for (j = 0; j < nk; ++j) {
        long jj = (long)j - (long)k0;
        double t = 0;
        x[j] = -HUGE_VAL;
        g[j] = 1;
        if (j < k0 || j >= k1 || (md->causal && jj > p) || (md->left >= 0 && jj < p - md->left) ||
            (md->right >= 0 && jj > p + md->right))
            continue;
        for (c = 0; c < d; ++c) t += qi[c] * K[j * d + c];
        t *= scale;
        if (md->softcap > 0) {
            double th = tanh(t / md->softcap);
            t = md->softcap * th;
            g[j] = 1 - th * th;
        }
        if (md->alibi) t -= (double)md->alibi[h] * fabs((double)(p - jj));
        if (md->mask) t += md->mask[((md->mask_heads > 1 ? h : 0) * nrows + i) * nk + j];
        x[j] = t;
        ++vis;
    }
    return vis;
}

/* P (nk) of a row from its scores and the sink; returns P_sink, *lse its lse */
static double ref_mods_probs(double *x, size_t nk, double sink, double *lse)
{
    double mx = sink, den = 0, ps;
    size_t j;
    for (j = 0; j < nk; ++j) if (x[j] > mx) mx = x[j];
    if (mx == -HUGE_VAL) {
        for (j = 0; j < nk; ++j) x[j] = 0;
        *lse = -HUGE_VAL;
        return 0;
    }
    for (j = 0; j < nk; ++j) den += x[j] == -HUGE_VAL ? 0 : exp(x[j] - mx);
    ps = sink == -HUGE_VAL ? 0 : exp(sink - mx);
    den += ps;
    for (j = 0; j < nk; ++j) x[j] = x[j] == -HUGE_VAL ? 0 : exp(x[j] - mx) / den;
    *lse = mx + log(den);
    return ps / den;
}

void ref_softmax_mods(const double *q, const double *k, const double *v, double *out,
                      double *lse, size_t hq, size_t hkv, size_t n, size_t nk, size_t d,
                      size_t dv, double scale, const ref_mods *md)
{
    size_t group = hq / hkv, h, i, j, c;
    double *x = (double *)ref_alloc(nk, sizeof *x), *g = (double *)ref_alloc(nk, sizeof *g);
    if (scale == 0) scale = 1.0 / sqrt((double)d);
    for (h = 0; h < hq; ++h) {
        const double *K = k + (h / group) * nk * d, *V = v + (h / group) * nk * dv;
        double sink = md->sinks ? (double)md->sinks[h] : -HUGE_VAL, l;
        for (i = 0; i < n; ++i) {
            double *o = out + (h * n + i) * dv;
            ref_mods_row(q + (h * n + i) * d, K, i, n, nk, d, scale, md, h, x, g);
            ref_mods_probs(x, nk, sink, &l);
            for (c = 0; c < dv; ++c) o[c] = 0;
            for (j = 0; j < nk; ++j)
                for (c = 0; c < dv; ++c) o[c] += x[j] * V[j * dv + c];
            if (lse) lse[h * n + i] = l;
        }
    }
    free(x);
    free(g);
}

void ref_softmax_mods_backward(const double *q, const double *k, const double *v,
                               const double *dout, double *dq, double *dk, double *dv,
                               double *dsinks, size_t hq, size_t hkv, size_t n, size_t nk,
                               size_t d, size_t dv_cols, double scale, const ref_mods *md)
{
    size_t group = hq / hkv, h, i, j, c;
    double *x = (double *)ref_alloc(nk, sizeof *x), *g = (double *)ref_alloc(nk, sizeof *g);
    double *o = (double *)ref_alloc(dv_cols, sizeof *o);
    if (scale == 0) scale = 1.0 / sqrt((double)d);
    for (c = 0; c < hq * n * d; ++c) dq[c] = 0;
    for (c = 0; c < hkv * nk * d; ++c) dk[c] = 0;
    for (c = 0; c < hkv * nk * dv_cols; ++c) dv[c] = 0;
    for (h = 0; h < hq; ++h) {
        const double *K = k + (h / group) * nk * d, *V = v + (h / group) * nk * dv_cols;
        double *DK = dk + (h / group) * nk * d, *DV = dv + (h / group) * nk * dv_cols;
        double sink = md->sinks ? (double)md->sinks[h] : -HUGE_VAL, l, ps, D;
        if (dsinks) dsinks[h] = 0;
        for (i = 0; i < n; ++i) {
            const double *qi = q + (h * n + i) * d, *gi = dout + (h * n + i) * dv_cols;
            ref_mods_row(qi, K, i, n, nk, d, scale, md, h, x, g);
            ps = ref_mods_probs(x, nk, sink, &l);
            for (c = 0; c < dv_cols; ++c) o[c] = 0;
            for (j = 0; j < nk; ++j)
                for (c = 0; c < dv_cols; ++c) o[c] += x[j] * V[j * dv_cols + c];
            D = 0;
            for (c = 0; c < dv_cols; ++c) D += gi[c] * o[c];
            if (dsinks) dsinks[h] -= ps * D;
            for (j = 0; j < nk; ++j) {
                double dp = 0, ds;
                if (x[j] == 0) continue;
                for (c = 0; c < dv_cols; ++c) {
                    dp += gi[c] * V[j * dv_cols + c];
                    DV[j * dv_cols + c] += x[j] * gi[c];
                }
                ds = x[j] * (dp - D) * g[j] * scale;
                for (c = 0; c < d; ++c) {
                    dq[(h * n + i) * d + c] += ds * K[j * d + c];
                    DK[j * d + c] += ds * qi[c];
                }
            }
        }
    }
    free(x);
    free(g);
    free(o);
}
