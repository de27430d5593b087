/* The float64 reference the tests compare favor.h against. Every array here is
 * packed [heads][rows][cols] in double. The formulas are design.md section 1,
 * evaluated directly (softmax O(n n_k) per head, linear attention O(n + n_k) per head
 * through prefix sums; no stabilizers beyond what double needs). */
#ifndef FAVOR_TEST_REFERENCE_H
#define FAVOR_TEST_REFERENCE_H

#include <stddef.h>

#include "favor.h"

/* Exact softmax attention. hq query heads, hkv key/value heads (hq % hkv == 0,
 * query head h uses kv head h / (hq / hkv)); q: hq x n x d, k: hkv x nk x d,
 * v: hkv x nk x dv, out: hq x n x dv. scale 0 means 1/sqrt(d). causal: row i sees
 * keys j <= i + nk - n; a row that sees nothing is zero. */
void ref_softmax(const double *q, const double *k, const double *v, double *out,
                 size_t hq, size_t hkv, size_t n, size_t nk, size_t d, size_t dv,
                 double scale, int causal);

/* The unstabilized feature map of f (c = 0) for `rows` rows of x (rows x f->dim),
 * in double, from f->w (as floats widened to double) and `scale` (0 = f->scale):
 * phi is rows x favor_features_width(f). */
void ref_features(const favor_features *f, const double *x, size_t rows, double scale,
                  double *phi);

/* Linear attention with f's map, evaluated as sum_j (phi(q_i).phi(k_j)) v_j /
 * sum_j phi(q_i).phi(k_j) over the visible keys (summed as prefix sums over
 * the keys, O(n + n_k) per head). Shapes and causal rule as ref_softmax; scale 0
 * = f->scale. A zero denominator gives a zero row. */
void ref_linear(const favor_features *f, const double *q, const double *k,
                const double *v, double *out, size_t hq, size_t hkv, size_t n,
                size_t nk, size_t dv, double scale, int causal);

/* The log-sum-exp of each row's scaled scores, lse[h*n + i] = log sum_j
 * exp(s q_i.k_j) over the keys row i sees (-inf when it sees none). Shapes,
 * scale and causal rule as ref_softmax; lse is hq x n. */
void ref_softmax_lse(const double *q, const double *k, double *lse, size_t hq, size_t hkv,
                     size_t n, size_t nk, size_t d, double scale, int causal);

/* Gradients of ref_softmax for L = sum dout . out (dout: hq x n x dv): with
 * P = softmax(s q k^T, masked), O = P V, dP = dout V^T, D_i = dout_i . O_i,
 * dS = P (dP - D): dq = s dS K (hq x n x d), dk = s dS^T q (hkv x nk x d),
 * dv = P^T dout (hkv x nk x dv); a key/value head's dk and dv are summed over its
 * query heads. A row that sees no key contributes nothing (and has dq = 0). */
void ref_softmax_backward(const double *q, const double *k, const double *v,
                          const double *dout, double *dq, double *dk, double *dv,
                          size_t hq, size_t hkv, size_t n, size_t nk, size_t d,
                          size_t dv_cols, double scale, int causal);

/* Gradients of ref_linear for L = sum dout . out, W constant. With
 * a_ij = phi(q_i).phi(k_j) over the visible keys, den_i = sum_j a_ij and
 * o_i = sum_j a_ij v_j / den_i: dL/da_ij = (g_i.v_j - g_i.o_i) / den_i (g = dout),
 * dphi(q_i) = sum_j dL/da_ij phi(k_j), dphi(k_j) = sum_i dL/da_ij phi(q_i),
 * dv_j = sum_i a_ij g_i / den_i, and the feature gradients are taken back through
 * the map (reference.c lists the formulas; they are summed as prefix and suffix
 * sums, O(n + n_k) per head). Shapes, scale and causal rule as
 * ref_linear; a zero-denominator row contributes nothing (and has dq = 0). */
void ref_linear_backward(const favor_features *f, const double *q, const double *k,
                         const double *v, const double *dout, double *dq, double *dk,
                         double *dv, size_t hq, size_t hkv, size_t n, size_t nk,
                         size_t dv_cols, double scale, int causal);

/* Attention weights of one query row (appended for tests/test_stress.c): p[j],
 * j < vis, the normalized weights row qi (d doubles) gives the first vis rows of
 * K (vis x d): softmax(scale qi.k_j) when f is NULL (scale 0 = 1/sqrt(d)), else
 * a_j / sum a with a_j = phi(qi).phi(k_j) for f's map (scale 0 = f->scale; the
 * rows stabilized as in ref_linear, so large inputs do not overflow). All p are 0
 * when the denominator is. */
void ref_weights(const favor_features *f, const double *qi, const double *K, size_t vis,
                 size_t d, double scale, double *p);

/* The score variants of exact softmax attention, applied explicitly on the full
 * score matrix (design.md section 1). Row i sits at p_i = i + nk - n; key j is
 * visible when j <= p_i (causal), p_i - left <= j (left >= 0) and j <= p_i +
 * right (right >= 0); its score is x = scale q_i.k_j, then softcap c tanh(x / c)
 * (softcap > 0), then - alibi[h] |p_i - j| (alibi not NULL). A sink logit
 * sinks[h] (sinks not NULL; -inf: none) joins every row's denominator. */
typedef struct {
    int causal;
    long left, right; /* the window's sides; negative: unbounded */
    double softcap;   /* 0: none */
    const float *alibi, *sinks; /* hq floats each, or NULL */
    const double *mask;  /* [mask_heads][n][nk], added last (-inf hides); NULL: none */
    size_t mask_heads;   /* 1 (every head) or hq */
    size_t seqs;         /* packed sequences (0: one): row i of sequence s, seq_q[s]
                            <= i < seq_q[s+1], sees only keys seq_k[s] <= j <
                            seq_k[s+1], with positions counted from their starts */
    const size_t *seq_q, *seq_k;
} ref_mods;

/* Forward: out (hq x n x dv) and lse (hq x n, NULL: not wanted; -inf for a row
 * with no key and no sink). Shapes as ref_softmax, scale 0 = 1/sqrt(d). */
void ref_softmax_mods(const double *q, const double *k, const double *v, double *out,
                      double *lse, size_t hq, size_t hkv, size_t n, size_t nk, size_t d,
                      size_t dv, double scale, const ref_mods *md);

/* Gradients of ref_softmax_mods for L = sum dout . out: as ref_softmax_backward,
 * with dS taken back through the softcap (times 1 - tanh^2(x / c)), and dsinks[h]
 * = -sum_i P_sink,i dout_i . out_i (hq doubles; NULL: not wanted). */
void ref_softmax_mods_backward(const double *q, const double *k, const double *v,
                               const double *dout, double *dq, double *dk, double *dv,
                               double *dsinks, size_t hq, size_t hkv, size_t n, size_t nk,
                               size_t d, size_t dv_cols, double scale, const ref_mods *md);

#endif
