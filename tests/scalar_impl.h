/* A second copy of favor.h in the test binaries, compiled with the scalar backend
 * forced (tests/scalar_impl.c), under other names, so a test can run the same
 * inputs through the build's own backend (favor_*, tests/favor_impl.c) and the
 * portable scalar code (scalar_*) and compare. Each function forwards to the
 * favor_ function of the same suffix, with the same signature and semantics; the
 * types are favor.h's, so tensors, features and states pass between the two. */
#ifndef FAVOR_TEST_SCALAR_IMPL_H
#define FAVOR_TEST_SCALAR_IMPL_H

#include <stddef.h>

#include "favor.h"

/* "scalar", whatever the flags of the build. */
const char *scalar_backend(void);

favor_status scalar_softmax_attention(const favor_tensor *q, const favor_tensor *k,
                                      const favor_tensor *v, const favor_tensor *out,
                                      const favor_options *opts);

size_t scalar_softmax_attention_workspace(const favor_tensor *q, const favor_tensor *k,
                                          const favor_tensor *v, const favor_options *opts);

favor_status scalar_features_init(favor_features *f, favor_kernel kernel, size_t dim,
                                  size_t count, unsigned flags, unsigned long long seed,
                                  float *storage);

favor_status scalar_feature_map(const favor_features *f, const favor_tensor *x,
                                const favor_tensor *phi, favor_role role);

favor_status scalar_linear_attention(const favor_features *f, const favor_tensor *q,
                                     const favor_tensor *k, const favor_tensor *v,
                                     const favor_tensor *out, const favor_options *opts);

size_t scalar_state_floats(const favor_features *f, size_t heads, size_t dv);

favor_status scalar_state_init(favor_state *st, const favor_features *f, size_t heads,
                               size_t dv, float *storage);

favor_status scalar_linear_step(const favor_features *f, favor_state *st,
                                const favor_tensor *q, const favor_tensor *k,
                                const favor_tensor *v, const favor_tensor *out);

#endif
