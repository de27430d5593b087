/* The float64 reference of the favor.h tests (see reference.h): design.md
 * section 1 evaluated directly, O(n n_k) per head, in double.
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
 * ratio, so this is the same formula, not an approximation of it. */
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
    case FAVOR_ELU1: return f->dim;
    case FAVOR_POSITIVE:
    case FAVOR_RELU: return f->count;
    case FAVOR_HYPERBOLIC:
    case FAVOR_TRIG: return 2 * f->count;
    }
    return 0;
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
    for (c = 0; c < d; ++c) n2 += (rs * x[c]) * (rs * x[c]);
    for (l = 0; l < m; ++l) {
        const float *w = f->w + l * d;
        double s = 0;
        for (c = 0; c < d; ++c) s += (double)w[c] * (rs * x[c]);
        u[l] = s;
    }
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
        break;
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
            double mx = -HUGE_VAL, den = 0;
            for (c = 0; c < dv; ++c) o[c] = 0;
            if (vis == 0) continue;
            for (j = 0; j < vis; ++j) {
                double t = 0;
                for (c = 0; c < d; ++c) t += qi[c] * K[j * d + c];
                s[j] = scale * t;
                if (s[j] > mx) mx = s[j];
            }
            for (j = 0; j < vis; ++j) {
                double p = exp(s[j] - mx);
                den += p;
                for (c = 0; c < dv; ++c) o[c] += p * V[j * dv + c];
            }
            for (c = 0; c < dv; ++c) o[c] /= den;
        }
    }
    free(s);
}

void ref_linear(const favor_features *f, const double *q, const double *k,
                const double *v, double *out, size_t hq, size_t hkv, size_t n,
                size_t nk, size_t dv, double scale, int causal)
{
    size_t group = hq / hkv, d = f->dim, width = ref_width(f), h, g, i, j, c, l;
    double *pq = (double *)ref_alloc(width, sizeof *pq);
    double *pk = (double *)ref_alloc(nk * width, sizeof *pk);
    double *lc = (double *)ref_alloc(nk, sizeof *lc);
    double *u = (double *)ref_alloc(f->count ? f->count : 1, sizeof *u);
    if (scale == 0) scale = f->scale;

    for (g = 0; g < hkv; ++g) {
        /* Keys of kv head g: phi(k_j) exp(-C), C the largest row constant. */
        double C = -HUGE_VAL;
        for (j = 0; j < nk; ++j) {
            ref_feature_row(f, k + (g * nk + j) * d, scale, pk + j * width, u, &lc[j]);
            if (lc[j] > C) C = lc[j];
        }
        for (j = 0; j < nk; ++j) {
            double e = exp(lc[j] - C);
            for (l = 0; l < width; ++l) pk[j * width + l] *= e;
        }
        for (h = g * group; h < (g + 1) * group; ++h) {
            const double *V = v + g * nk * dv;
            for (i = 0; i < n; ++i) {
                double logc, den = 0;
                double *o = out + (h * n + i) * dv;
                size_t vis = ref_visible(i, n, nk, causal);
                ref_feature_row(f, q + (h * n + i) * d, scale, pq, u, &logc);
                for (c = 0; c < dv; ++c) o[c] = 0;
                for (j = 0; j < vis; ++j) {
                    double a = 0;
                    for (l = 0; l < width; ++l) a += pq[l] * pk[j * width + l];
                    den += a;
                    for (c = 0; c < dv; ++c) o[c] += a * V[j * dv + c];
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
}
