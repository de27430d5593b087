/* The scalar backend of favor.h as a second translation unit of every test_*.c
 * binary (see scalar_impl.h). FAVOR_STATIC keeps its favor_ functions private to
 * this file, so they do not clash with tests/favor_impl.c; the scalar_ wrappers
 * below are the exported entry points. The scalar path is forced whatever the
 * build's flags (-mavx2 -mfma, AArch64): any FAVOR_SIMD from the command line is
 * overridden, and the check after the include makes a mistake a compile error. */
#undef FAVOR_SIMD
#ifndef FAVOR_NO_SIMD
#define FAVOR_NO_SIMD
#endif
#define FAVOR_STATIC
#define FAVOR_IMPLEMENTATION

/* Under FAVOR_STATIC every public function is static; only a few are wrapped
 * here, and an unused static function is a -Wunused-function warning. */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#include "favor.h"
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#if FAVOR_SIMD != FAVOR_SCALAR || FAVOR__W != 1
#error "tests/scalar_impl.c must compile the scalar backend"
#endif

/* After favor.h: its declarations are the static ones of FAVOR_STATIC. */
#include "scalar_impl.h"

const char *scalar_backend(void) { return favor_backend(); }

favor_status scalar_softmax_attention(const favor_tensor *q, const favor_tensor *k,
                                      const favor_tensor *v, const favor_tensor *out,
                                      const favor_options *opts)
{
    return favor_softmax_attention(q, k, v, out, opts);
}

size_t scalar_softmax_attention_workspace(const favor_tensor *q, const favor_tensor *k,
                                          const favor_tensor *v, const favor_options *opts)
{
    return favor_softmax_attention_workspace(q, k, v, opts);
}

favor_status scalar_features_init(favor_features *f, favor_kernel kernel, size_t dim,
                                  size_t count, unsigned flags, unsigned long long seed,
                                  float *storage)
{
    return favor_features_init(f, kernel, dim, count, flags, seed, storage);
}

favor_status scalar_feature_map(const favor_features *f, const favor_tensor *x,
                                const favor_tensor *phi, favor_role role)
{
    return favor_feature_map(f, x, phi, role);
}

favor_status scalar_linear_attention(const favor_features *f, const favor_tensor *q,
                                     const favor_tensor *k, const favor_tensor *v,
                                     const favor_tensor *out, const favor_options *opts)
{
    return favor_linear_attention(f, q, k, v, out, opts);
}

size_t scalar_state_floats(const favor_features *f, size_t heads, size_t dv)
{
    return favor_state_floats(f, heads, dv);
}

favor_status scalar_state_init(favor_state *st, const favor_features *f, size_t heads,
                               size_t dv, float *storage)
{
    return favor_state_init(st, f, heads, dv, storage);
}

favor_status scalar_linear_step(const favor_features *f, favor_state *st,
                                const favor_tensor *q, const favor_tensor *k,
                                const favor_tensor *v, const favor_tensor *out)
{
    return favor_linear_step(f, st, q, k, v, out);
}
