/* favor_bench_dispatch: what FAVOR_DISPATCH costs. This file is a FAVOR_DISPATCH
 * build of favor.h compiled without any -m flag; favor_bench_dispatch_native.c is
 * a static copy built with -march=native (the same target on this CPU). In one
 * run, alternately, both time
 *   - favor_linear_step (elu+1, 8 heads, d = 64: one generated token of a
 *     recurrent model, the smallest call that does real work), and
 *   - favor_softmax_attention (causal prefill, n = 2048, 8 heads, d = 64),
 * and it prints the medians and the ratio dispatched / native. Both paths run the
 * same kernel code for the same target, so the difference is the indirect call
 * through the table (and its one atomic load) and whatever the target pragma
 * changes in the compiler's choices. Usage: favor_bench_dispatch [repeats]. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#define FAVOR_IMPLEMENTATION
#define FAVOR_DISPATCH
#include "favor.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

const char *native_backend(void);
favor_status native_linear_step(const favor_features *f, favor_state *st, const favor_tensor *q,
                                const favor_tensor *k, const favor_tensor *v,
                                const favor_tensor *out);
favor_status native_softmax_attention(const favor_tensor *q, const favor_tensor *k,
                                      const favor_tensor *v, const favor_tensor *out,
                                      const favor_options *opts);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static void fill(float *x, size_t n, unsigned s)
{
    size_t i;
    for (i = 0; i < n; ++i) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
}

enum { H = 8, D = 64, N = 2048, STEPS = 2000, MAXREP = 101 };

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 31, r, i, which;
    static double t_step[2][MAXREP], t_pre[2][MAXREP];
    float *q = malloc(sizeof(float) * H * N * D), *k = malloc(sizeof(float) * H * N * D);
    float *v = malloc(sizeof(float) * H * N * D), *o = malloc(sizeof(float) * H * N * D);
    float *st_mem[2];
    favor_features f;
    favor_state st[2];
    favor_options opt = favor_default_options();
    favor_tensor tq = favor_tensor_packed(q, H, N, D), tk = favor_tensor_packed(k, H, N, D);
    favor_tensor tv = favor_tensor_packed(v, H, N, D), to = favor_tensor_packed(o, H, N, D);
    favor_tensor q1 = favor_tensor_packed(q, H, 1, D), k1 = favor_tensor_packed(k, H, 1, D);
    favor_tensor v1 = favor_tensor_packed(v, H, 1, D), o1 = favor_tensor_packed(o, H, 1, D);
    if (reps < 1 || reps > MAXREP) reps = 31;
    if (!q || !k || !v || !o) return 1;
    fill(q, (size_t)H * N * D, 1);
    fill(k, (size_t)H * N * D, 2);
    fill(v, (size_t)H * N * D, 3);
    favor_features_init(&f, FAVOR_ELU1, D, 0, 0, 0, NULL);
    for (which = 0; which < 2; ++which) {
        st_mem[which] = malloc(sizeof(float) * favor_state_floats(&f, H, D));
        if (!st_mem[which] || favor_state_init(&st[which], &f, H, D, st_mem[which]) != FAVOR_OK)
            return 1;
    }
    opt.flags = FAVOR_CAUSAL;
    opt.threads = 1;
    printf("favor_bench_dispatch: dispatched %s (no -m flags) against static %s "
           "(-march=native), %d alternating repeats, medians\n",
           favor_backend(), native_backend(), reps);
    for (r = 0; r < reps; ++r)
        for (which = 0; which < 2; ++which) {
            double t0 = now();
            for (i = 0; i < STEPS; ++i) {
                favor_status s = which ? native_linear_step(&f, &st[1], &q1, &k1, &v1, &o1)
                                       : favor_linear_step(&f, &st[0], &q1, &k1, &v1, &o1);
                if (s != FAVOR_OK) return 1;
            }
            t_step[which][r] = (now() - t0) / STEPS;
            t0 = now();
            if ((which ? native_softmax_attention(&tq, &tk, &tv, &to, &opt)
                       : favor_softmax_attention(&tq, &tk, &tv, &to, &opt)) != FAVOR_OK)
                return 1;
            t_pre[which][r] = now() - t0;
        }
    {
        double sd = median(t_step[0], reps), sn = median(t_step[1], reps);
        double pd = median(t_pre[0], reps), pn = median(t_pre[1], reps);
        printf("%-44s %10s %10s %8s\n", "call", "dispatched", "native", "ratio");
        printf("%-44s %8.0f ns %8.0f ns %8.3f\n", "favor_linear_step, elu+1, 8 heads, d 64",
               1e9 * sd, 1e9 * sn, sd / sn);
        printf("%-44s %8.2f ms %8.2f ms %8.3f\n", "favor_softmax_attention, causal 2048, 8x64",
               1e3 * pd, 1e3 * pn, pd / pn);
    }
    return 0;
}
