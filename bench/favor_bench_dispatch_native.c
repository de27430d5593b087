/* The -march=native copy of favor.h for favor_bench_dispatch (see
 * favor_bench_dispatch.c): FAVOR_STATIC keeps its favor_ functions private; the
 * native_ wrappers are its entry points. */
#define FAVOR_STATIC
#define FAVOR_IMPLEMENTATION
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
#include "favor.h"
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

const char *native_backend(void);
favor_status native_linear_step(const favor_features *f, favor_state *st, const favor_tensor *q,
                                const favor_tensor *k, const favor_tensor *v,
                                const favor_tensor *out);
favor_status native_softmax_attention(const favor_tensor *q, const favor_tensor *k,
                                      const favor_tensor *v, const favor_tensor *out,
                                      const favor_options *opts);

const char *native_backend(void) { return favor_backend(); }
favor_status native_linear_step(const favor_features *f, favor_state *st, const favor_tensor *q,
                                const favor_tensor *k, const favor_tensor *v,
                                const favor_tensor *out)
{
    return favor_linear_step(f, st, q, k, v, out);
}
favor_status native_softmax_attention(const favor_tensor *q, const favor_tensor *k,
                                      const favor_tensor *v, const favor_tensor *out,
                                      const favor_options *opts)
{
    return favor_softmax_attention(q, k, v, out, opts);
}
