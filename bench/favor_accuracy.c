/* favor_accuracy: how far each feature map's attention is from exact softmax
 * attention, measured, for choosing a kernel and a feature count m.
 *
 * For every head size d, input scale r, feature map and m, and for each of
 * --seeds independent trials (new inputs, new W):
 *   - Q and K have n rows each, random directions with |x'| = r exactly, where
 *     x' = s^(1/2) x and s = 1/sqrt(d) (so the logits s q.k = q'.k' lie in
 *     [-r^2, r^2]; for random directions their spread is about r^2/sqrt(d), and
 *     the program prints the measured standard deviation and largest |logit|);
 *     V is N(0, 1), n x d.
 *   - The exact attention A = softmax(s Q K^T) and O = A V, in double.
 *   - The map's attention: phi(Q) and phi(K) from favor_feature_map (query and
 *     key roles, fp32), then, in double, A' = rows of phi(Q) phi(K)^T divided by
 *     their sums, and O' = A' V. The stabilizers cancel in that ratio, so this is
 *     the attention favor_linear_attention computes, without its fp32 rounding
 *     (which the unit tests bound separately, 1e-4 relative).
 *   - Errors: |A' - A|_F / |A|_F and |O' - O|_F / |O|_F.
 * It prints, per (d, r), the mean output error over the trials for every map and
 * m (and the spread, min..max, in the CSV), and writes every figure as CSV.
 *
 * elu+1 and POLY2 have no m (no W): they are measured once per (d, r), with
 * width d and 1 + d + d(d+1)/2 (d = 32: 561, 64: 2145, 128: 8385); POLY2 is
 * exact and deterministic, phi(q).phi(k) = 1 + t + t^2/2 with t = s q.k, so its
 * error is that of the Taylor polynomial (and its trials differ in the inputs
 * only). For a comparison at equal cost, FAVOR+ is also measured at m = POLY2's
 * width for each d when both run: the last column of the printed table, and in
 * the CSV an ordinary "positive" row with that m (= width), after the m list's.
 *
 * --check runs a small configuration (d = 32, r = 1, m = 16, 64, 256, and
 * FAVOR+ at m = 561) and exits 1 unless FAVOR+'s mean output error falls from
 * the smallest to the largest m of the list, and POLY2's mean output error is
 * below FAVOR+'s at m = POLY2's width (statements about the estimators that
 * could fail, not times); ctest runs it as accuracy_check.
 *
 * --cost times instead: one call each of exact softmax, elu+1, FAVOR+ at m = 256,
 * FAVOR+ at m = POLY2's width and POLY2 (favor_softmax_attention and
 * favor_linear_attention, 1 thread, 8 heads, d_v = d, n_k = n), non-causal and
 * causal, for d in --d (default 32, 64) and n in --cost-n (default 1024 to 8192):
 * the median of 5 rounds after a warm-up round, the five interleaved within each
 * round; the CSV (--csv) gets those medians. It backs the README's statement of
 * what POLY2 costs against FAVOR+ at equal width and against softmax.
 *
 * Usage: favor_accuracy [--d LIST] [--m LIST] [--r LIST] [--n N] [--seeds S]
 *                       [--kernels LIST] [--csv FILE] [--check]
 *        favor_accuracy --cost [--d LIST] [--cost-n LIST] [--csv FILE] */
#define _POSIX_C_SOURCE 200809L /* clock_gettime (--cost) */

#define FAVOR_IMPLEMENTATION
#include "favor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAXL 16

typedef struct {
    size_t v[MAXL];
    size_t n;
} sizes;

typedef struct {
    double v[MAXL];
    size_t n;
} reals;

typedef struct {
    const char *name;
    favor_kernel kernel;
} kernel_name;

static const kernel_name KERNELS[] = {
    {"positive", FAVOR_POSITIVE}, {"hyperbolic", FAVOR_HYPERBOLIC}, {"trig", FAVOR_TRIG},
    {"relu", FAVOR_RELU},         {"elu", FAVOR_ELU1},          {"poly2", FAVOR_POLY2},
};
#define NKERNELS (sizeof KERNELS / sizeof KERNELS[0])
#define K_POSITIVE 0 /* KERNELS[K_POSITIVE].kernel == FAVOR_POSITIVE */
#define K_POLY2 5    /* KERNELS[K_POLY2].kernel == FAVOR_POLY2 */

/* splitmix64 and Box-Muller: the trial inputs */
typedef struct { unsigned long long s; } rng;

/* elu+1 and POLY2: no W, no m */
static int fixed_map(favor_kernel k) { return k == FAVOR_ELU1 || k == FAVOR_POLY2; }

/* features per row of x: m for the random maps, d for elu+1 */
static size_t map_width(favor_kernel k, size_t d, size_t m)
{
    switch (k) {
    case FAVOR_ELU1: return d;
    case FAVOR_POLY2: return 1 + d + d * (d + 1) / 2;
    case FAVOR_HYPERBOLIC: case FAVOR_TRIG: return 2 * m;
    default: return m;
    }
}

static unsigned long long next_u64(rng *g)
{
    unsigned long long z = (g->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double normal(rng *g)
{
    double u1 = ((double)(next_u64(g) >> 11) + 0.5) * 0x1p-53;
    double u2 = (double)(next_u64(g) >> 11) * 0x1p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "favor_accuracy: out of memory\n");
        exit(2);
    }
    return p;
}

/* rows of norm `norm` in random directions */
static void directions(rng *g, float *x, size_t n, size_t d, double norm)
{
    size_t i, c;
    for (i = 0; i < n; ++i) {
        double ss = 0.0, t[1024];
        for (c = 0; c < d; ++c) {
            t[c] = normal(g);
            ss += t[c] * t[c];
        }
        for (c = 0; c < d; ++c) x[i * d + c] = (float)(t[c] * norm / sqrt(ss));
    }
}

/* out (n x dv) = rows of P (n x nk, unnormalized, >= 0 or not) normalized, times V;
 * the normalized P is left in P */
static void normalize_times(double *P, size_t n, size_t nk, const float *V, size_t dv, double *out)
{
    size_t i, j, c;
    for (i = 0; i < n; ++i) {
        double sum = 0.0, *p = P + i * nk;
        for (j = 0; j < nk; ++j) sum += p[j];
        for (j = 0; j < nk; ++j) p[j] /= sum;
        for (c = 0; c < dv; ++c) out[i * dv + c] = 0.0;
        for (j = 0; j < nk; ++j)
            for (c = 0; c < dv; ++c) out[i * dv + c] += p[j] * V[j * dv + c];
    }
}

static double rel_frobenius(const double *a, const double *ref, size_t count)
{
    double num = 0.0, den = 0.0;
    size_t i;
    for (i = 0; i < count; ++i) {
        num += (a[i] - ref[i]) * (a[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return sqrt(num / den);
}

typedef struct {
    size_t n, d;
    float *q, *k, *v;
    double *A, *O;          /* exact */
    double logit_std, logit_max;
} trial;

static void trial_make(trial *t, size_t n, size_t d, double r, unsigned long long seed)
{
    rng g;
    size_t i, j, c;
    double s = 1.0 / sqrt((double)d), sum = 0.0, sum2 = 0.0;
    g.s = seed * 0x2545f4914f6cdd1dull + d * 131 + (unsigned long long)(r * 1000.0);
    t->n = n;
    t->d = d;
    t->q = (float *)xmalloc(n * d * sizeof(float));
    t->k = (float *)xmalloc(n * d * sizeof(float));
    t->v = (float *)xmalloc(n * d * sizeof(float));
    t->A = (double *)xmalloc(n * n * sizeof(double));
    t->O = (double *)xmalloc(n * d * sizeof(double));
    directions(&g, t->q, n, d, r / sqrt(s));
    directions(&g, t->k, n, d, r / sqrt(s));
    for (i = 0; i < n * d; ++i) t->v[i] = (float)normal(&g);
    t->logit_max = 0.0;
    for (i = 0; i < n; ++i) {
        double mx = -INFINITY, *a = t->A + i * n;
        for (j = 0; j < n; ++j) {
            double dot = 0.0;
            for (c = 0; c < d; ++c) dot += (double)t->q[i * d + c] * t->k[j * d + c];
            a[j] = s * dot;
            sum += a[j];
            sum2 += a[j] * a[j];
            if (fabs(a[j]) > t->logit_max) t->logit_max = fabs(a[j]);
            if (a[j] > mx) mx = a[j];
        }
        for (j = 0; j < n; ++j) a[j] = exp(a[j] - mx);
    }
    t->logit_std = sqrt(sum2 / (double)(n * n) - (sum / (double)(n * n)) * (sum / (double)(n * n)));
    normalize_times(t->A, n, n, t->v, d, t->O);
}

static void trial_free(trial *t)
{
    free(t->q);
    free(t->k);
    free(t->v);
    free(t->A);
    free(t->O);
}

/* the map's errors on a trial: attention matrix and output; 0 on success */
static int map_errors(const trial *t, favor_kernel kernel, size_t m, unsigned long long seed,
                      double *err_attn, double *err_out)
{
    size_t n = t->n, d = t->d, w, i, j, c;
    favor_features f;
    float *storage = NULL, *pq, *pk;
    double *P, *O;
    favor_tensor tq, tk, fq, fk;
    favor_status st;
    if (fixed_map(kernel)) m = d;
    else storage = (float *)xmalloc(favor_features_floats(kernel, d, m) * sizeof(float));
    st = favor_features_init(&f, kernel, d, fixed_map(kernel) ? 0 : m, 0, seed, storage);
    if (st != FAVOR_OK) {
        fprintf(stderr, "favor_accuracy: features_init: %s\n", favor_status_string(st));
        free(storage);
        return 1;
    }
    w = favor_features_width(&f);
    pq = (float *)xmalloc(n * w * sizeof(float));
    pk = (float *)xmalloc(n * w * sizeof(float));
    tq = favor_tensor_packed(t->q, 1, n, d);
    tk = favor_tensor_packed(t->k, 1, n, d);
    fq = favor_tensor_packed(pq, 1, n, w);
    fk = favor_tensor_packed(pk, 1, n, w);
    st = favor_feature_map(&f, &tq, &fq, FAVOR_QUERY);
    if (st == FAVOR_OK) st = favor_feature_map(&f, &tk, &fk, FAVOR_KEY);
    if (st != FAVOR_OK) {
        fprintf(stderr, "favor_accuracy: feature_map: %s\n", favor_status_string(st));
        free(storage);
        free(pq);
        free(pk);
        return 1;
    }
    P = (double *)xmalloc(n * n * sizeof(double));
    O = (double *)xmalloc(n * d * sizeof(double));
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) {
            double dot = 0.0;
            for (c = 0; c < w; ++c) dot += (double)pq[i * w + c] * pk[j * w + c];
            P[i * n + j] = dot;
        }
    normalize_times(P, n, n, t->v, d, O);
    *err_attn = rel_frobenius(P, t->A, n * n);
    *err_out = rel_frobenius(O, t->O, n * d);
    free(storage);
    free(pq);
    free(pk);
    free(P);
    free(O);
    return 0;
}

/* ------------------------------------------------------------------------- */
/* --cost: what a call costs, for the table's equal-cost comparison           */
/* ------------------------------------------------------------------------- */

#define COST_IMPLS 5
static const char *const COST_NAMES[COST_IMPLS] = {"softmax", "elu+1", "favor+ 256",
                                                   "favor+ =w", "poly2"};
static const char *const COST_CSV[COST_IMPLS] = {"softmax", "elu", "positive", "positive", "poly2"};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One cost configuration: inputs, the maps, and a workspace large enough for all. */
typedef struct {
    favor_tensor q, k, v, o;
    favor_features f[COST_IMPLS]; /* [0] unused: softmax */
    float *w[COST_IMPLS];
    favor_options opts;
} cost_set;

/* impl 0 softmax, 1 elu+1, 2 FAVOR+ m = 256, 3 FAVOR+ m = POLY2's width, 4 POLY2 */
static favor_status cost_call(const cost_set *c, int impl)
{
    return impl == 0 ? favor_softmax_attention(&c->q, &c->k, &c->v, &c->o, &c->opts)
                     : favor_linear_attention(&c->f[impl], &c->q, &c->k, &c->v, &c->o, &c->opts);
}

/* Times one call of each implementation per round, `runs` rounds after a warm-up
 * round (the implementations interleaved, so a slow spell of the machine falls on
 * all of them), 1 thread; prints and writes the medians. 0 on success. */
static int cost_table(const sizes *ds, const sizes *ns, size_t heads, size_t runs, FILE *csv)
{
    size_t di, ni, r;
    int causal, impl;
    printf("favor_accuracy --cost: seconds per call (median of %zu, interleaved), 1 thread, "
           "%s backend;\n%zu heads, d_v = d, n_k = n; Q, K, V ~ N(0, 0.5^2); FAVOR+ at m = 256 "
           "and at m = POLY2's width\n",
           runs, favor_backend(), heads);
    /* the CSV names the kernels as the accuracy CSV does; m tells FAVOR+'s two apart */
    if (csv) fprintf(csv, "kernel,d,causal,n,heads,m,width,state_floats,runs,time_s\n");
    for (di = 0; di < ds->n; ++di)
        for (causal = 0; causal < 2; ++causal) {
            size_t d = ds->v[di], pw = map_width(FAVOR_POLY2, d, 0);
            favor_features fp;
            if (favor_features_init(&fp, FAVOR_POLY2, d, d, 0, 0, NULL) != FAVOR_OK) return 1;
            printf("\nd = %zu, %s; POLY2 width %zu, state %zu floats per head (FAVOR+ at m = "
                   "%zu: the same)\n%8s",
                   d, causal ? "causal" : "non-causal", pw, favor_state_floats(&fp, 1, d), pw, "n");
            for (impl = 0; impl < COST_IMPLS; ++impl) printf(" %11s", COST_NAMES[impl]);
            printf(" %12s %12s\n", "poly2/f+ =w", "poly2/softmx");
            for (ni = 0; ni < ns->n; ++ni) {
                size_t n = ns->v[ni], count = heads * n * d, bytes = 0, need, i;
                float *buf = (float *)xmalloc(4 * count * sizeof(float));
                double *t = (double *)xmalloc(COST_IMPLS * runs * sizeof(double)), med[COST_IMPLS];
                void *ws;
                cost_set c;
                rng g;
                g.s = 7 + n * 31 + d;
                for (i = 0; i < 3 * count; ++i) buf[i] = (float)(0.5 * normal(&g));
                c.q = favor_tensor_packed(buf, heads, n, d);
                c.k = favor_tensor_packed(buf + count, heads, n, d);
                c.v = favor_tensor_packed(buf + 2 * count, heads, n, d);
                c.o = favor_tensor_packed(buf + 3 * count, heads, n, d);
                c.opts = favor_default_options();
                c.opts.flags = causal ? FAVOR_CAUSAL : 0;
                c.opts.threads = 1;
                c.w[0] = NULL;
                for (impl = 1; impl < COST_IMPLS; ++impl) {
                    favor_kernel kern = impl == 1 ? FAVOR_ELU1 : impl == 4 ? FAVOR_POLY2 : FAVOR_POSITIVE;
                    size_t m = impl == 2 ? 256 : impl == 3 ? pw : d;
                    c.w[impl] = (float *)xmalloc(favor_features_floats(kern, d, m) * sizeof(float));
                    if (favor_features_init(&c.f[impl], kern, d, m, 0, 11, c.w[impl]) != FAVOR_OK) {
                        fprintf(stderr, "favor_accuracy: features_init failed\n");
                        return 1;
                    }
                    need = favor_linear_attention_workspace(&c.f[impl], &c.q, &c.k, &c.v, &c.opts);
                    if (need > bytes) bytes = need;
                }
                need = favor_softmax_attention_workspace(&c.q, &c.k, &c.v, &c.opts);
                if (need > bytes) bytes = need;
                ws = xmalloc(bytes);
                c.opts.workspace = ws;
                c.opts.workspace_size = bytes;
                for (r = 0; r <= runs; ++r)
                    for (impl = 0; impl < COST_IMPLS; ++impl) {
                        double t0 = now_s();
                        favor_status st = cost_call(&c, impl);
                        if (st != FAVOR_OK) {
                            fprintf(stderr, "favor_accuracy: %s: %s\n", COST_NAMES[impl],
                                    favor_status_string(st));
                            return 1;
                        }
                        if (r > 0) t[impl * runs + r - 1] = now_s() - t0; /* round 0: warm-up */
                    }
                printf("%8zu", n);
                for (impl = 0; impl < COST_IMPLS; ++impl) {
                    double *ti = t + impl * runs;
                    qsort(ti, runs, sizeof *ti, cmp_double);
                    med[impl] = runs % 2 ? ti[runs / 2] : 0.5 * (ti[runs / 2 - 1] + ti[runs / 2]);
                    printf(" %11.4g", med[impl]);
                    if (csv)
                        fprintf(csv, "%s,%zu,%d,%zu,%zu,%zu,%zu,%zu,%zu,%.6e\n", COST_CSV[impl], d,
                                causal, n, heads,
                                impl == 2 ? (size_t)256 : impl == 3 ? pw : 0,
                                impl == 0 ? 0 : favor_features_width(&c.f[impl]),
                                impl == 0 ? 0 : favor_state_floats(&c.f[impl], 1, d), runs, med[impl]);
                }
                printf(" %12.3f %12.3f\n", med[4] / med[3], med[4] / med[0]);
                fflush(stdout);
                for (impl = 1; impl < COST_IMPLS; ++impl) free(c.w[impl]);
                free(ws);
                free(t);
                free(buf);
            }
        }
    return 0;
}

static int parse_sizes(const char *s, sizes *out)
{
    char *end;
    out->n = 0;
    while (*s && out->n < MAXL) {
        unsigned long v = strtoul(s, &end, 10);
        if (end == s || v == 0) return 1;
        out->v[out->n++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return 1;
    }
    return out->n == 0;
}

static int parse_reals(const char *s, reals *out)
{
    char *end;
    out->n = 0;
    while (*s && out->n < MAXL) {
        double v = strtod(s, &end);
        if (end == s || !(v > 0.0)) return 1;
        out->v[out->n++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return 1;
    }
    return out->n == 0;
}

static void usage(FILE *to)
{
    fprintf(to,
            "usage: favor_accuracy [options]\n"
            "  --d LIST        head sizes                       default: 32,64,128\n"
            "  --m LIST        feature counts (rows of W)       default: 16,32,...,1024\n"
            "                  (with positive and poly2, positive also runs at\n"
            "                  m = poly2's width, 1 + d + d(d+1)/2, for each d)\n"
            "  --r LIST        |q'| = |k'| (input scales)       default: 0.5,1,1.5,2,3\n"
            "  --n N           query and key rows per trial     default: 256\n"
            "  --seeds S       trials per configuration         default: 5\n"
            "  --kernels LIST  positive,hyperbolic,trig,relu,elu,poly2 (default: all;\n"
            "                  elu and poly2 have no m: measured once per d and r)\n"
            "  --csv FILE      write every figure as CSV\n"
            "  --check         a small run (d = 32, r = 1, m = 16,64,256) that fails unless\n"
            "                  FAVOR+'s error falls with m and poly2's error is below\n"
            "                  FAVOR+'s at m = poly2's width (561)\n"
            "  --cost          instead of errors, time one call of softmax, elu+1, FAVOR+\n"
            "                  (m = 256 and m = poly2's width) and poly2, 1 thread, 8\n"
            "                  heads, d from --d (default here: 32,64), non-causal and\n"
            "                  causal, n from --cost-n (default: 1024,2048,4096,8192);\n"
            "                  --csv writes those times\n"
            "  --cost-n LIST   sequence lengths of --cost\n");
}

int main(int argc, char **argv)
{
    sizes ds = {{32, 64, 128}, 3}, ms = {{16, 32, 64, 128, 256, 512, 1024}, 7};
    reals rs = {{0.5, 1.0, 1.5, 2.0, 3.0}, 5};
    size_t n = 256, seeds = 5, di, ri, mi, ki, si;
    sizes cost_ns = {{1024, 2048, 4096, 8192}, 4};
    int use[NKERNELS], check = 0, cost = 0, d_given = 0, a;
    const char *csv_path = NULL;
    FILE *csv = NULL;
    double first_pos = -1.0, last_pos = -1.0, poly2_err = -1.0, pos_eq_err = -1.0;
    size_t pos_eq_m = 0;
    for (ki = 0; ki < NKERNELS; ++ki) use[ki] = 1;
    for (a = 1; a < argc; ++a) {
        const char *o = argv[a], *val = a + 1 < argc ? argv[a + 1] : NULL;
        int bad = 0;
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(o, "--check") == 0) {
            check = 1;
            ds.n = 1;
            ds.v[0] = 32;
            ms.n = 3;
            ms.v[0] = 16;
            ms.v[1] = 64;
            ms.v[2] = 256;
            rs.n = 1;
            rs.v[0] = 1.0;
            n = 128;
            seeds = 3;
            continue;
        } else if (strcmp(o, "--cost") == 0) {
            cost = 1;
            continue;
        } else if (!val) {
            bad = 1;
        } else if (strcmp(o, "--m") == 0) {
            bad = parse_sizes(val, &ms);
        } else if (strcmp(o, "--r") == 0) {
            bad = parse_reals(val, &rs);
        } else if (strcmp(o, "--n") == 0) {
            bad = !(n = strtoul(val, NULL, 10));
        } else if (strcmp(o, "--seeds") == 0) {
            bad = !(seeds = strtoul(val, NULL, 10));
        } else if (strcmp(o, "--cost-n") == 0) {
            bad = parse_sizes(val, &cost_ns);
        } else if (strcmp(o, "--d") == 0) {
            d_given = 1;
            bad = parse_sizes(val, &ds);
        } else if (strcmp(o, "--csv") == 0) {
            csv_path = val;
        } else if (strcmp(o, "--kernels") == 0) {
            for (ki = 0; ki < NKERNELS; ++ki) use[ki] = strstr(val, KERNELS[ki].name) != NULL;
        } else {
            bad = 1;
        }
        if (bad) {
            fprintf(stderr, "favor_accuracy: bad option %s%s%s\n", o, val ? " " : "", val ? val : "");
            usage(stderr);
            return 2;
        }
        ++a;
    }
    for (di = 0; di < ds.n; ++di)
        if (ds.v[di] > 1024) {
            fprintf(stderr, "favor_accuracy: d must be at most 1024\n");
            return 2;
        }
    if (csv_path && !(csv = fopen(csv_path, "w"))) {
        fprintf(stderr, "favor_accuracy: cannot write %s\n", csv_path);
        return 1;
    }
    if (cost) {
        int failed;
        if (!d_given) {
            ds.n = 2;
            ds.v[0] = 32;
            ds.v[1] = 64;
        }
        failed = cost_table(&ds, &cost_ns, 8, 5, csv);
        if (csv) fclose(csv);
        return failed;
    }
    if (csv)
        fprintf(csv, "kernel,d,r,m,width,n,seeds,logit_std,logit_maxabs,err_out_mean,err_out_min,"
                     "err_out_max,err_attn_mean,err_attn_min,err_attn_max\n");
    printf("favor_accuracy: relative Frobenius error of the output against exact softmax\n"
           "attention (mean over %zu trials; n = %zu queries and keys, V ~ N(0,1)), %s backend\n",
           seeds, n, favor_backend());
    for (di = 0; di < ds.n; ++di)
        for (ri = 0; ri < rs.n; ++ri) {
            size_t d = ds.v[di], ncol = ms.n;
            /* FAVOR+ at m = POLY2's width: an extra column when not in the list */
            size_t pw = map_width(FAVOR_POLY2, d, 0);
            int eq_col = use[K_POSITIVE] && use[K_POLY2];
            double r = rs.v[ri], lstd = 0.0, lmax = 0.0;
            trial *tr;
            for (mi = 0; mi < ms.n; ++mi)
                if (ms.v[mi] == pw) eq_col = 0;
            if (eq_col) ncol = ms.n + 1;
            tr = (trial *)xmalloc(seeds * sizeof(trial));
            for (si = 0; si < seeds; ++si) {
                trial_make(&tr[si], n, d, r, si + 1);
                lstd += tr[si].logit_std / (double)seeds;
                if (tr[si].logit_max > lmax) lmax = tr[si].logit_max;
            }
            printf("\nd = %zu, |q'| = |k'| = %g: logits s q.k have std %.3f, max |.| %.2f\n", d, r,
                   lstd, lmax);
            printf("%-11s", "m:");
            for (mi = 0; mi < ms.n; ++mi) printf(" %9zu", ms.v[mi]);
            if (eq_col) printf(" %9zu  (m = poly2's width: positive only)", pw);
            printf("\n");
            for (ki = 0; ki < NKERNELS; ++ki) {
                if (!use[ki]) continue;
                printf("%-11s", KERNELS[ki].name);
                for (mi = 0; mi < ncol; ++mi) {
                    favor_kernel kern = KERNELS[ki].kernel;
                    size_t m = fixed_map(kern) ? d : mi < ms.n ? ms.v[mi] : pw;
                    double eo[64], ea[64], mo = 0.0, ma = 0.0, lo = INFINITY, hi = 0.0,
                                             alo = INFINITY, ahi = 0.0;
                    size_t width = map_width(kern, d, m);
                    if ((fixed_map(kern) && mi > 0) || /* no m: once */
                        (mi == ms.n && kern != FAVOR_POSITIVE)) { /* equal width: FAVOR+ only */
                        printf(" %9s", "");
                        continue;
                    }
                    for (si = 0; si < seeds && si < 64; ++si) {
                        if (map_errors(&tr[si], KERNELS[ki].kernel, m, 1000 + si, &ea[si], &eo[si]))
                            return 1;
                        mo += eo[si];
                        ma += ea[si];
                        if (eo[si] < lo) lo = eo[si];
                        if (eo[si] > hi) hi = eo[si];
                        if (ea[si] < alo) alo = ea[si];
                        if (ea[si] > ahi) ahi = ea[si];
                    }
                    mo /= (double)si;
                    ma /= (double)si;
                    printf(" %9.4f", mo);
                    fflush(stdout);
                    if (csv)
                        fprintf(csv, "%s,%zu,%g,%zu,%zu,%zu,%zu,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g\n",
                                KERNELS[ki].name, d, r, fixed_map(kern) ? 0 : m, width, n, si,
                                lstd, lmax, mo, lo, hi, ma, alo, ahi);
                    if (kern == FAVOR_POSITIVE && mi < ms.n) {
                        if (mi == 0) first_pos = mo;
                        last_pos = mo;
                    }
                    if (kern == FAVOR_POSITIVE && m == pw) {
                        pos_eq_err = mo;
                        pos_eq_m = m;
                    }
                    if (kern == FAVOR_POLY2) poly2_err = mo;
                }
                printf("\n");
            }
            for (si = 0; si < seeds; ++si) trial_free(&tr[si]);
            free(tr);
        }
    if (csv) fclose(csv);
    if (check) {
        int ok = use[K_POSITIVE] && last_pos < first_pos;
        int ok2 = use[K_POSITIVE] && use[K_POLY2] && pos_eq_m > 0 && poly2_err >= 0.0 &&
                  poly2_err < pos_eq_err;
        printf("\ncheck: FAVOR+ mean output error %.4f at m = %zu, %.4f at m = %zu: %s\n", first_pos,
               ms.v[0], last_pos, ms.v[ms.n - 1], ok ? "falls with m" : "FAILED: does not fall");
        if (pos_eq_m == 0 || poly2_err < 0.0)
            printf("check: FAILED: POLY2 against FAVOR+ at equal width needs the kernels "
                   "positive and poly2\n");
        else
            printf("check: POLY2 mean output error %.4f (width %zu), FAVOR+ %.4f at m = %zu: %s\n",
                   poly2_err, map_width(FAVOR_POLY2, ds.v[0], 0), pos_eq_err, pos_eq_m,
                   ok2 ? "POLY2 below FAVOR+ at equal width"
                       : "FAILED: POLY2 not below FAVOR+ at equal width");
        return ok && ok2 ? 0 : 1;
    }
    return 0;
}
