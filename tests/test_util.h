/* Shared helpers of the favor.h tests: an allocation that exits when out of
 * memory, a seeded generator, tensors in float and double, comparisons, and the
 * backend check every test binary runs first. */
#ifndef FAVOR_TEST_UTIL_H
#define FAVOR_TEST_UTIL_H

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "favor.h"

/* malloc that never returns NULL: out of memory ends the test (exit code 2);
 * 0 bytes allocate 1. */
static inline void *tu_xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

/* splitmix64: a small deterministic generator for test inputs. */
typedef struct { uint64_t s; } tu_rng;

static inline uint64_t tu_next(tu_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double tu_uniform(tu_rng *r) { return (double)(tu_next(r) >> 11) * 0x1p-53; }

/* Standard normal (Box-Muller). */
static inline double tu_normal(tu_rng *r)
{
    double u1 = tu_uniform(r), u2 = tu_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* n floats, normal with standard deviation sigma. Caller frees. */
static inline float *tu_normal_floats(tu_rng *r, size_t n, double sigma)
{
    float *p = (float *)malloc((n ? n : 1) * sizeof *p);
    size_t i;
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    for (i = 0; i < n; ++i) p[i] = (float)(sigma * tu_normal(r));
    return p;
}

static inline double *tu_to_double(const float *x, size_t n)
{
    double *p = (double *)malloc((n ? n : 1) * sizeof *p);
    size_t i;
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    for (i = 0; i < n; ++i) p[i] = x[i];
    return p;
}

/* Copy a strided tensor's elements into a packed double array [heads][rows][cols]. */
static inline double *tu_tensor_to_double(const favor_tensor *t)
{
    size_t h, r, c, i = 0, cnt = t->heads * t->rows * t->cols;
    double *p = (double *)malloc((cnt ? cnt : 1) * sizeof *p);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    for (h = 0; h < t->heads; ++h)
        for (r = 0; r < t->rows; ++r)
            for (c = 0; c < t->cols; ++c)
                p[i++] = ((float *)t->data)[h * t->head_stride + r * t->row_stride + c];
    return p;
}

static inline float tu_at(const favor_tensor *t, size_t h, size_t r, size_t c)
{
    return ((float *)t->data)[h * t->head_stride + r * t->row_stride + c];
}

/* max |a - b| over two fp32 views of one shape (no batch); NaN is the maximum */
static inline double tu_max_diff(const favor_tensor *a, const favor_tensor *b)
{
    size_t h, r, c;
    double m = 0;
    for (h = 0; h < a->heads; ++h)
        for (r = 0; r < a->rows; ++r)
            for (c = 0; c < a->cols; ++c) {
                double e = fabs((double)tu_at(a, h, r, c) - (double)tu_at(b, h, r, c));
                if (!(e <= m)) m = e;
            }
    return m;
}

/* max |t - ref| over a strided tensor and a packed double array. */
static inline double tu_max_abs_diff(const favor_tensor *t, const double *ref)
{
    size_t h, r, c, i = 0;
    double m = 0;
    for (h = 0; h < t->heads; ++h)
        for (r = 0; r < t->rows; ++r)
            for (c = 0; c < t->cols; ++c, ++i) {
                double e = fabs((double)tu_at(t, h, r, c) - ref[i]);
                if (!(e <= m)) m = e; /* NaN propagates as the maximum */
            }
    return m;
}

static inline double tu_max_abs(const double *x, size_t n)
{
    double m = 0;
    size_t i;
    for (i = 0; i < n; ++i) if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

static inline double tu_max_abs_f(const float *x, size_t n)
{
    double m = 0;
    size_t i;
    for (i = 0; i < n; ++i) if (fabs((double)x[i]) > m) m = fabs((double)x[i]);
    return m;
}

/* 1 when every element is finite. */
static inline int tu_all_finite(const float *x, size_t n)
{
    size_t i;
    for (i = 0; i < n; ++i) if (!isfinite(x[i])) return 0;
    return 1;
}

/* Every kernel, for tests that loop over them, and their names. */
#define TU_ALL_KERNELS { FAVOR_ELU1, FAVOR_POSITIVE, FAVOR_HYPERBOLIC, FAVOR_TRIG, FAVOR_RELU, \
                        FAVOR_POLY2 }

/* The maps without W: count is d, and their bounds are elu+1's (max|V|-relative) */
static inline int tu_fixed(favor_kernel k)
{
    return k == FAVOR_ELU1 || k == FAVOR_POLY2 || k == FAVOR_IDENTITY;
}

static inline const char *tu_kernel_name(favor_kernel k)
{
    switch (k) {
    case FAVOR_ELU1: return "ELU1";
    case FAVOR_POSITIVE: return "POSITIVE";
    case FAVOR_HYPERBOLIC: return "HYPERBOLIC";
    case FAVOR_TRIG: return "TRIG";
    case FAVOR_RELU: return "RELU";
    case FAVOR_POLY2: return "POLY2";
    case FAVOR_IDENTITY: return "IDENTITY";
    }
    return "?";
}

/* The backend this binary was configured for: CMake passes -DFAVOR_EXPECT_BACKEND;
 * for a FAVOR_DISPATCH build (FAVOR_TEST_DISPATCH), the target it is forced to
 * by the environment variable FAVOR_TEST_BACKEND (tu_check_backend). */
#ifdef FAVOR_TEST_DISPATCH
static inline const char *tu_dispatch_target(void)
{
    const char *t = getenv("FAVOR_TEST_BACKEND");
    return t ? t : "(FAVOR_TEST_BACKEND unset)";
}
#define FAVOR_EXPECT_BACKEND tu_dispatch_target()
#endif
#ifndef FAVOR_EXPECT_BACKEND
#ifdef FAVOR_NO_SIMD
#define FAVOR_EXPECT_BACKEND "scalar"
#endif
#endif

/* The thread counts a bit-identity test compares: all n of them where OpenMP
 * runs the calls; without it (the scalar variants) the library runs one thread
 * whatever opts.threads says, so only the first `plain` of them, the others
 * being the same call again (under valgrind, minutes of it). */
#ifdef _OPENMP
#define TU_COUNTS(n, plain) (n)
#else
#define TU_COUNTS(n, plain) (plain)
#endif

/* Every test binary calls this first from main(); a misconfigured build fails. */
static inline int tu_check_backend(void)
{
#ifdef FAVOR_TEST_DISPATCH
    if (favor_set_backend(getenv("FAVOR_TEST_BACKEND")) != FAVOR_OK) {
        fprintf(stderr, "cannot force the backend %s\n", tu_dispatch_target());
        return 1;
    }
#endif
#ifdef FAVOR_EXPECT_BACKEND
    if (strcmp(favor_backend(), FAVOR_EXPECT_BACKEND) != 0) {
        fprintf(stderr, "backend is %s, this build expected %s\n", favor_backend(),
                FAVOR_EXPECT_BACKEND);
        return 1;
    }
#endif
    printf("backend: %s\n", favor_backend());
#ifdef CMOCKA_H_
    /* FAVOR_TEST_SKIP: a cmocka pattern (* and ?) of test functions not to run.
     * The valgrind and qemu runs skip the thread tests, '*threads*': their
     * builds have no OpenMP, so those tests make the same call again. */
    {
        const char *skip = getenv("FAVOR_TEST_SKIP");
        if (skip && *skip) {
            printf("skipped: the tests matching %s (FAVOR_TEST_SKIP)\n", skip);
            cmocka_set_skip_filter(skip);
        }
    }
#endif
    return 0;
}

#endif
