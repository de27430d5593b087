/* Helpers shared by the gated linear attention tests, test_gated.c (the forward)
 * and test_gated_bwd.c (the backward): the gate modes and styles and the gate
 * draws, fp16 codes written independently of the library, [B][H][R][C] buffers
 * of fp32 or fp16 (gbuf, gb_*), and the float64 reference's feature map and
 * token-by-token gated recurrence (gref_linear). Static functions, every one of
 * them used by both tests; include after <cmocka.h> (feat_make prints with it). */
#ifndef FAVOR_TEST_GATED_UTIL_H
#define FAVOR_TEST_GATED_UTIL_H

#include <time.h>

#include "favor.h"
#include "reference.h"
#include "test_util.h"

/* which of decay and gates a case has; G_FULL (the backward's): not causal, no gates */
enum { G_NONE, G_DECAY, G_GATES, G_BOTH, G_FULL };
enum { GS_REAL, GS_EXTREME, GS_MILD, GS_RUNS }; /* how its gates are drawn */
static const char *const gmode_names[] = { "none", "decay", "gates", "both", "full" };

static double now(void) { return (double)clock() / CLOCKS_PER_SEC; }

static double *dalloc(size_t count) { return (double *)tu_xmalloc(count * sizeof(double)); }

/* ---- fp16 codes, independently of the library ------------------------------ */

/* the fp16 code of x rounded to nearest even (overflow: inf), as the library
 * rounds a 16-bit output; inputs drawn with it are exact fp16 values */
static uint16_t to_f16(double x)
{
    unsigned s = signbit(x) ? 0x8000u : 0u;
    double a = fabs(x);
    int e;
    long mant;
    if (isnan(x)) return 0x7e00u;
    if (a < ldexp(1.0, -14)) return (uint16_t)(s | (unsigned)lrint(ldexp(a, 24)));
    a = frexp(a, &e); /* a in [0.5, 1) */
    mant = lrint(a * 2048.0); /* exact product; the default mode rounds half to even */
    if (mant == 2048) {
        mant = 1024;
        ++e;
    }
    if (e + 14 >= 31) return (uint16_t)(s | 0x7c00u);
    return (uint16_t)(s | ((unsigned)(e + 14) << 10) | (unsigned)(mant - 1024));
}

static double f16_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f;
    double m = h & 0x3ff, x = e ? ldexp(1024.0 + m, e - 25) : ldexp(m, -24);
    if (e == 31) x = m != 0 ? (double)NAN : (double)INFINITY;
    return (h & 0x8000u) ? -x : x;
}

/* ---- buffers: [B][H][R][C] views, fp32 or fp16 ------------------------------ */

typedef struct {
    favor_tensor t;
    void *data;
    size_t len; /* elements */
    size_t esz; /* bytes of one */
} gbuf;

static void gb_put(gbuf *b, size_t i, double x)
{
    if (b->esz == 4) ((float *)b->data)[i] = (float)x;
    else ((uint16_t *)b->data)[i] = to_f16(x);
}

/* a B x H x R x C view, packed (inter 0) or rows outside heads ([B][R][H][C],
 * inter 1), elements N(0, sigma^2) (sigma < 0: NaN, an output to be written) */
static void gb_make(gbuf *b, favor_dtype dt, size_t B, size_t H, size_t R, size_t C,
                    int inter, tu_rng *rng, double sigma)
{
    size_t i;
    b->esz = dt == FAVOR_F32 ? 4 : 2;
    b->len = B * H * R * C;
    b->data = tu_xmalloc(b->len * b->esz);
    b->t = favor_tensor_batched(dt, b->data, B, H, R, C);
    if (inter) { /* [B][R][H][C] */
        b->t.head_stride = C;
        b->t.row_stride = H * C;
    }
    for (i = 0; i < b->len; ++i) gb_put(b, i, sigma < 0 ? (double)NAN : sigma * tu_normal(rng));
}

static size_t gb_index(const favor_tensor *t, size_t b, size_t h, size_t r, size_t c)
{
    return (t->batch > 1 ? b * t->batch_stride : 0) + h * t->head_stride + r * t->row_stride + c;
}

static double gb_get(const favor_tensor *t, size_t b, size_t h, size_t r, size_t c)
{
    size_t i = gb_index(t, b, h, r, c);
    return t->dtype == FAVOR_F32 ? (double)((const float *)t->data)[i]
                                 : f16_value(((const uint16_t *)t->data)[i]);
}

static void gb_set(const favor_tensor *t, size_t b, size_t h, size_t r, size_t c, double x)
{
    size_t i = gb_index(t, b, h, r, c);
    if (t->dtype == FAVOR_F32) ((float *)t->data)[i] = (float)x;
    else ((uint16_t *)t->data)[i] = to_f16(x);
}

/* a copy of b's elements (to free) */
static void *gb_snap(const gbuf *b)
{
    void *p = tu_xmalloc(b->len * b->esz);
    memcpy(p, b->data, b->len * b->esz);
    return p;
}

/* batch element b as a packed double array [H][R][C] */
static double *gb_elem(const favor_tensor *t, size_t b)
{
    size_t h, r, c, i = 0;
    double *p = dalloc(t->heads * t->rows * t->cols);
    for (h = 0; h < t->heads; ++h)
        for (r = 0; r < t->rows; ++r)
            for (c = 0; c < t->cols; ++c) p[i++] = gb_get(t, b, h, r, c);
    return p;
}

/* ---- gates -------------------------------------------------------------------- */

/* log(sigmoid(x)), x ~ N(1, 1.5^2) (GS_MILD: N(7, 1.5^2)); GS_EXTREME: -20 at
 * t % 7 == 3, exactly 0 at t % 5 == 1; GS_RUNS: exactly 0 at t % 16 < 5 */
static float draw_gate(tu_rng *r, int style, size_t t)
{
    double x = (style == GS_MILD ? 7.0 : 1.0) + 1.5 * tu_normal(r);
    if (style == GS_EXTREME && t % 7 == 3) return -20.0f;
    if (style == GS_EXTREME && t % 5 == 1) return 0.0f;
    if (style == GS_RUNS && t % 16 < 5) return 0.0f;
    return (float)-log1p(exp(-x)); /* log(sigmoid(x)) */
}

/* rows r0 onwards of an fp32 gates view, drawn batch by batch, head by head */
static void fill_gates(const favor_tensor *G, tu_rng *rng, int style, size_t r0)
{
    size_t b, h, r, B = G->batch ? G->batch : 1;
    for (b = 0; b < B; ++b)
        for (h = 0; h < G->heads; ++h)
            for (r = r0; r < G->rows; ++r) gb_set(G, b, h, r, 0, draw_gate(rng, style, r));
}

/* The log-decays of batch element b of a call with options o into lg (hkv x nk):
 * g_t (o->gates, fp32) + log gamma_h (o->decay). Returns lg, or NULL when o has
 * neither gates nor decay. */
static const double *gate_logs(const favor_options *o, size_t b, size_t hkv, size_t nk,
                               double *lg)
{
    size_t h, t;
    if (!o->gates && !o->decay) return NULL;
    for (h = 0; h < hkv; ++h)
        for (t = 0; t < nk; ++t)
            lg[h * nk + t] = (o->gates ? gb_get(o->gates, b, h, t, 0) : 0.0) +
                             (o->decay ? log((double)o->decay[h]) : 0.0);
    return lg;
}

/* ---- the float64 reference ---------------------------------------------------- */

/* f with `kernel` (fixed maps: count d); storage in *store (to free). 0 on success */
static int feat_make(favor_features *f, float **store, favor_kernel kernel, size_t d, size_t m,
                     unsigned long long seed)
{
    size_t floats;
    favor_status st;
    if (tu_fixed(kernel)) m = d;
    floats = favor_features_floats(kernel, d, m);
    *store = floats ? (float *)tu_xmalloc(floats * sizeof(float)) : NULL;
    st = favor_features_init(f, kernel, d, m, 0, seed, *store);
    if (st != FAVOR_OK) {
        print_error("  favor_features_init(%s, d %u, m %u): %s\n", tu_kernel_name(kernel),
                    (unsigned)d, (unsigned)m, favor_status_string(st));
        free(*store);
        *store = NULL;
        return 1;
    }
    return 0;
}

/* the width of f's map */
static size_t ref_w(const favor_features *f)
{
    return f->kernel == FAVOR_IDENTITY ? f->dim : favor_features_width(f);
}

/* the unstabilized map of `rows` rows of x (sqrt(s) x for IDENTITY) */
static void ref_phi(const favor_features *f, const double *x, size_t rows, double *phi)
{
    size_t i;
    if (f->kernel == FAVOR_IDENTITY) {
        double rs = sqrt((double)f->scale);
        for (i = 0; i < rows * f->dim; ++i) phi[i] = rs * x[i];
    } else {
        ref_features(f, x, rows, 0, phi);
    }
}

/* the shape of one batch element of the reference */
typedef struct {
    size_t hq, hkv, n, nk, dv;
    int causal, no_norm;
} rdims;

static rdims rdims_make(size_t hq, size_t hkv, size_t n, size_t nk, size_t dv, int causal,
                        int no_norm)
{
    rdims r;
    r.hq = hq;
    r.hkv = hkv;
    r.n = n;
    r.nk = nk;
    r.dv = dv;
    r.causal = causal;
    r.no_norm = no_norm;
    return r;
}

/* The forward of one batch element, token by token: per key/value head, with
 * a_t = exp(lg_t), S_t = a_t S_{t-1} + phi(k_t) v_t^T, z_t = a_t z_{t-1} +
 * phi(k_t), o_i = phi(q_i)^T S_{p_i} [/ phi(q_i)^T z_{p_i}]. q hq x n x d, k hkv
 * x nk x d, v hkv x nk x dv (packed double), lg hkv x nk log-decays g_t + log
 * gamma (NULL: none), out hq x n x dv, mag (NULL: not wanted) hq x n: M_i =
 * sum_{j <= p_i} w_ij |phi(q_i)|.|phi(k_j)| (test_gated.c's header). Not causal:
 * every row after the last key. */
static void gref_linear(const favor_features *f, const rdims *r, const double *q,
                        const double *k, const double *v, const double *lg, double *out,
                        double *mag)
{
    size_t d = f->dim, w = ref_w(f), dv = r->dv, n = r->n, nk = r->nk;
    size_t group = r->hq / r->hkv, g, h, i, t, l, c;
    double *pq = dalloc(r->hq * n * w), *pk = dalloc(nk * w);
    double *S = dalloc(w * dv), *z = dalloc(w), *za = dalloc(w);
    ref_phi(f, q, r->hq * n, pq);
    for (i = 0; i < r->hq * n * dv; ++i) out[i] = 0;
    if (mag) for (i = 0; i < r->hq * n; ++i) mag[i] = 0;
    for (g = 0; g < r->hkv; ++g) {
        ref_phi(f, k + g * nk * d, nk, pk);
        memset(S, 0, w * dv * sizeof *S);
        memset(z, 0, w * sizeof *z);
        memset(za, 0, w * sizeof *za);
        for (t = 0; t < nk; ++t) {
            double a = lg ? exp(lg[g * nk + t]) : 1.0;
            const double *p = pk + t * w, *vt = v + (g * nk + t) * dv;
            size_t i0, i1;
            for (l = 0; l < w; ++l) {
                for (c = 0; c < dv; ++c) S[l * dv + c] = a * S[l * dv + c] + p[l] * vt[c];
                z[l] = a * z[l] + p[l];
                za[l] = a * za[l] + fabs(p[l]);
            }
            if (r->causal ? t + n < nk : t + 1 < nk) continue; /* no row at position t */
            i0 = r->causal ? t + n - nk : 0;
            i1 = r->causal ? i0 + 1 : n;
            for (h = g * group; h < (g + 1) * group; ++h)
                for (i = i0; i < i1; ++i) {
                    const double *pi = pq + (h * n + i) * w;
                    double *o = out + (h * n + i) * dv, den = 0, mg = 0;
                    for (l = 0; l < w; ++l) {
                        den += pi[l] * z[l];
                        mg += fabs(pi[l]) * za[l];
                        for (c = 0; c < dv; ++c) o[c] += pi[l] * S[l * dv + c];
                    }
                    if (!r->no_norm)
                        for (c = 0; c < dv; ++c) o[c] = den != 0 ? o[c] / den : 0.0;
                    if (mag) mag[h * n + i] = mg;
                }
        }
    }
    free(pq);
    free(pk);
    free(S);
    free(z);
    free(za);
}

#endif
