/* The float64 reference the tests compare favor.h against. Every array here is
 * packed [heads][rows][cols] in double. The formulas are design.md section 1,
 * evaluated directly (O(n n_k) per head, no stabilizers beyond what double needs). */
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
 * sum_j phi(q_i).phi(k_j) over the visible keys. Shapes and causal rule as
 * ref_softmax; scale 0 = f->scale. A zero denominator gives a zero row. */
void ref_linear(const favor_features *f, const double *q, const double *k,
                const double *v, double *out, size_t hq, size_t hkv, size_t n,
                size_t nk, size_t dv, double scale, int causal);

#endif
