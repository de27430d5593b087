/* favor_demo: exact softmax attention against its linear-time approximations.
 *
 * On seeded N(0,1) inputs it times exact softmax attention, elu(x)+1 linear
 * attention and FAVOR+ (positive orthogonal random features), without and with a
 * causal mask, and prints each one's time and its error against the exact
 * softmax output under the same mask. Then it times softmax and FAVOR+ on one
 * head at n/4, n/2 and n to show how their costs grow with the sequence length.
 *
 *     favor_demo [--n N] [--d D] [--m M] [--heads H] [--causal | --noncausal]
 *                [--qk-scale X] [--seed S] [--help]
 *
 * Uses the public favor.h API only. */
#define _POSIX_C_SOURCE 199309L

#define FAVOR_IMPLEMENTATION
#include "favor.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEMO_N 4096
#define DEMO_D 64
#define DEMO_M 256
#define DEMO_HEADS 8
#define DEMO_SEED 1

typedef struct {
    size_t n, d, m, heads;
    unsigned long long seed;
    double qk_scale; /* Q and K are N(0, qk_scale^2) */
    int masks; /* bit 0: non-causal, bit 1: causal */
} demo_args;

static void usage(FILE *to)
{
    fprintf(to,
            "usage: favor_demo [--n N] [--d D] [--m M] [--heads H] [--causal | --noncausal]\n"
            "                  [--qk-scale X] [--seed S] [--help]\n"
            "\n"
            "Times exact softmax attention, elu(x)+1 linear attention and FAVOR+ on\n"
            "seeded N(0,1) queries, keys and values, and prints each method's error\n"
            "against exact softmax under the same mask; then times softmax and FAVOR+\n"
            "on one head at n/4, n/2 and n to show how the cost grows with n.\n"
            "Q and K default to N(0, 0.5^2): logits of the size FAVOR+ estimates well\n"
            "(see the note it prints); --qk-scale 1 shows its variance at larger ones.\n"
            "With the default n, the SIMD build runs in a few seconds and the forced\n"
            "scalar build (favor_demo_scalar) about seven times longer.\n"
            "\n"
            "  --n N        tokens per head (queries = keys)       default %d\n"
            "  --d D        head size (d = d_v)                    default %d\n"
            "  --m M        FAVOR+ random features                 default %d\n"
            "  --heads H    attention heads                        default %d\n"
            "  --causal     run the causal mask only               default: both masks\n"
            "  --noncausal  run the non-causal case only\n"
            "  --qk-scale X draw Q and K from N(0, X^2)             default 0.5\n"
            "               (FAVOR+ is more accurate for smaller logits, e.g. 0.5)\n"
            "  --seed S     seed of the inputs and of FAVOR+'s W   default %d\n"
            "  --help       show this text\n",
            DEMO_N, DEMO_D, DEMO_M, DEMO_HEADS, DEMO_SEED);
}

/* A positive integer option value, or 0 when it is not one. */
static unsigned long long parse_count(const char *s)
{
    char *end;
    unsigned long long x;
    if (!s || *s < '0' || *s > '9') return 0;
    x = strtoull(s, &end, 10);
    if (*end != '\0') return 0;
    return x;
}

static int parse_args(int argc, char **argv, demo_args *a)
{
    int i;
    a->n = DEMO_N;
    a->d = DEMO_D;
    a->m = DEMO_M;
    a->heads = DEMO_HEADS;
    a->seed = DEMO_SEED;
    a->qk_scale = 0.5;
    a->masks = 3;
    for (i = 1; i < argc; ++i) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(o, "--causal")) {
            a->masks = 2;
        } else if (!strcmp(o, "--noncausal")) {
            a->masks = 1;
        } else if (!strcmp(o, "--qk-scale")) {
            char *end = NULL;
            double x = i + 1 < argc ? strtod(argv[i + 1], &end) : 0.0;
            if (i + 1 >= argc || end == argv[i + 1] || *end != '\0' || !(x > 0.0) ||
                x > 1e4) {
                fprintf(stderr, "favor_demo: --qk-scale needs a number in (0, 1e4]\n");
                return 0;
            }
            a->qk_scale = x;
            ++i;
        } else if (!strcmp(o, "--n") || !strcmp(o, "--d") || !strcmp(o, "--m") ||
                   !strcmp(o, "--heads") || !strcmp(o, "--seed")) {
            unsigned long long x = i + 1 < argc ? parse_count(argv[i + 1]) : 0;
            int is_seed = !strcmp(o, "--seed");
            if (i + 1 >= argc || (x == 0 && !(is_seed && !strcmp(argv[i + 1], "0")))) {
                fprintf(stderr, "favor_demo: %s needs a positive integer\n", o);
                return 0;
            }
            if (!is_seed && x > (1ull << 24)) {
                fprintf(stderr, "favor_demo: %s %llu is too large\n", o, x);
                return 0;
            }
            ++i;
            if (!strcmp(o, "--n")) a->n = (size_t)x;
            else if (!strcmp(o, "--d")) a->d = (size_t)x;
            else if (!strcmp(o, "--m")) a->m = (size_t)x;
            else if (!strcmp(o, "--heads")) a->heads = (size_t)x;
            else a->seed = x;
        } else {
            fprintf(stderr, "favor_demo: unknown option %s\n", o);
            usage(stderr);
            return 0;
        }
    }
    if (a->heads > SIZE_MAX / a->n || a->heads * a->n > SIZE_MAX / a->d / sizeof(float)) {
        fprintf(stderr, "favor_demo: heads * n * d is too large\n");
        return 0;
    }
    return 1;
}

/* splitmix64 and Box-Muller: seeded N(0,1) inputs. */
static unsigned long long rng_next(unsigned long long *s)
{
    unsigned long long z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_uniform(unsigned long long *s)
{
    return ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */
}

static void fill_normal(float *x, size_t count, double sigma, unsigned long long *s)
{
    size_t i;
    for (i = 0; i < count; ++i) {
        double u1 = rng_uniform(s), u2 = rng_uniform(s);
        x[i] = (float)(sigma * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "favor_demo: out of memory (%lu bytes)\n", (unsigned long)bytes);
        exit(1);
    }
    return p;
}

static void check(favor_status st, const char *what)
{
    if (st != FAVOR_OK) {
        fprintf(stderr, "favor_demo: %s failed: %s\n", what, favor_status_string(st));
        exit(1);
    }
}

/* One attention call: softmax when f is NULL, else linear attention with f. */
typedef struct {
    const favor_features *f;
    const favor_tensor *q, *k, *v, *o;
    const favor_options *opt;
} demo_call;

static favor_status run(const demo_call *c)
{
    if (!c->f) return favor_softmax_attention(c->q, c->k, c->v, c->o, c->opt);
    return favor_linear_attention(c->f, c->q, c->k, c->v, c->o, c->opt);
}

/* Wall time of one call in ms. Calls are repeated (up to 5 runs or 200 ms in
 * all) and the fastest run is kept, which damps noise from a busy machine. */
static double time_call(const demo_call *c, const char *what)
{
    double best = 0;
    double spent = 0;
    int rep;
    for (rep = 0; rep < 5 && spent < 200.0; ++rep) {
        double t0 = now_ms(), t;
        check(run(c), what);
        t = now_ms() - t0;
        spent += t;
        if (rep == 0 || t < best) best = t;
    }
    return best;
}

static void errors(const float *x, const float *ref, size_t count, double *max_err,
                   double *mean_err)
{
    double mx = 0, sum = 0;
    size_t i;
    for (i = 0; i < count; ++i) {
        double e = fabs((double)x[i] - (double)ref[i]);
        if (!(e <= mx)) mx = e; /* a NaN shows as the maximum */
        sum += e;
    }
    *max_err = mx;
    *mean_err = sum / (double)count;
}

static double mean_abs(const float *x, size_t count)
{
    double sum = 0;
    size_t i;
    for (i = 0; i < count; ++i) sum += fabs((double)x[i]);
    return sum / (double)count;
}

int main(int argc, char **argv)
{
    demo_args a;
    size_t count, wfloats;
    float *q, *k, *v, *ref, *out, *wstore;
    favor_features elu, fp;
    favor_tensor Q, K, V, R, O;
    favor_options opt = favor_default_options();
    unsigned long long rs;
    double t_start = now_ms(), t_draw;
    char fp_name[32];
    int mask;

    if (!parse_args(argc, argv, &a)) return 2;
    count = a.heads * a.n * a.d;
    rs = a.seed;

    q = (float *)xmalloc(count * sizeof *q);
    k = (float *)xmalloc(count * sizeof *k);
    v = (float *)xmalloc(count * sizeof *v);
    ref = (float *)xmalloc(count * sizeof *ref);
    out = (float *)xmalloc(count * sizeof *out);
    fill_normal(q, count, a.qk_scale, &rs);
    fill_normal(k, count, a.qk_scale, &rs);
    fill_normal(v, count, 1.0, &rs);
    Q = favor_tensor_packed(q, a.heads, a.n, a.d);
    K = favor_tensor_packed(k, a.heads, a.n, a.d);
    V = favor_tensor_packed(v, a.heads, a.n, a.d);
    R = favor_tensor_packed(ref, a.heads, a.n, a.d);
    O = favor_tensor_packed(out, a.heads, a.n, a.d);

    check(favor_features_init(&elu, FAVOR_ELU1, a.d, a.d, 0, 0, NULL), "favor_features_init(ELU1)");
    wfloats = favor_features_floats(FAVOR_POSITIVE, a.d, a.m);
    if (wfloats == 0) check(FAVOR_E_OVERFLOW, "favor_features_floats(POSITIVE)");
    wstore = (float *)xmalloc(wfloats * sizeof *wstore);
    t_draw = now_ms();
    check(favor_features_init(&fp, FAVOR_POSITIVE, a.d, a.m, 0, a.seed, wstore),
          "favor_features_init(POSITIVE)");
    t_draw = now_ms() - t_draw;
    sprintf(fp_name, "FAVOR+ m=%lu", (unsigned long)a.m);

    printf("favor.h demo (backend: %s)\n", favor_backend());
    printf("%lu heads, n = %lu queries and keys, d = d_v = %lu, Q, K ~ N(0,%g^2), V ~ N(0,1), "
           "seed %llu\n",
           (unsigned long)a.heads, (unsigned long)a.n, (unsigned long)a.d, a.qk_scale, a.seed);
    printf("FAVOR+: %lu orthogonal random features, W drawn in %.1f ms\n", (unsigned long)a.m,
           t_draw);
    printf("errors are against exact softmax attention with the same mask;\n"
           "relative = mean |err| / mean |exact output|\n\n");
    printf("%-16s %-7s %12s %12s %12s %10s\n", "method", "causal", "time (ms)", "max |err|",
           "mean |err|", "relative");

    for (mask = 0; mask < 2; ++mask) {
        demo_call c;
        double ms, mx, mean, ref_mean;
        const char *causal = mask ? "yes" : "no";
        if (!(a.masks & (1 << mask))) continue;
        opt.flags = mask ? FAVOR_CAUSAL : 0u;
        c.q = &Q; c.k = &K; c.v = &V; c.opt = &opt;

        c.f = NULL; c.o = &R;
        ms = time_call(&c, "favor_softmax_attention");
        printf("%-16s %-7s %12.1f %12s %12s %10s\n", "softmax (exact)", causal, ms, "-", "-", "-");
        ref_mean = mean_abs(ref, count);

        c.f = &elu; c.o = &O;
        ms = time_call(&c, "favor_linear_attention(ELU1)");
        errors(out, ref, count, &mx, &mean);
        printf("%-16s %-7s %12.1f %12.3e %12.3e %10.3f\n", "elu+1", causal, ms, mx, mean,
               mean / ref_mean);

        c.f = &fp; c.o = &O;
        ms = time_call(&c, "favor_linear_attention(POSITIVE)");
        errors(out, ref, count, &mx, &mean);
        printf("%-16s %-7s %12.1f %12.3e %12.3e %10.3f\n", fp_name, causal, ms, mx, mean,
               mean / ref_mean);
    }

    {
        double spread = 2.0 * a.qk_scale * a.qk_scale * sqrt((double)a.d);
        printf("\nFAVOR+ is unbiased; its relative variance per score is about\n"
               "(exp(|q'+k'|^2) - 1) / m, with |q'+k'|^2 ~ 2 X^2 sqrt(d) = %.1f here (X = --qk-scale).\n"
               "Smaller logits are its accurate range; larger ones need more features:\n"
               "README.md, \"Choosing a feature map and m\", has measured errors against m\n"
               "(bench/favor_accuracy).\n",
               spread);
    }

    /* Cost against n: one head, non-causal, at n/4, n/2 and n (the first rows of
     * head 0 are themselves a packed one-head tensor). */
    if (a.n >= 4) {
        size_t sizes[3];
        double ts[3], tf[3];
        int i;
        sizes[0] = a.n / 4;
        sizes[1] = a.n / 2;
        sizes[2] = a.n;
        opt.flags = 0;
        for (i = 0; i < 3; ++i) {
            favor_tensor q1 = favor_tensor_packed(q, 1, sizes[i], a.d);
            favor_tensor k1 = favor_tensor_packed(k, 1, sizes[i], a.d);
            favor_tensor v1 = favor_tensor_packed(v, 1, sizes[i], a.d);
            favor_tensor o1 = favor_tensor_packed(out, 1, sizes[i], a.d);
            demo_call c;
            c.q = &q1; c.k = &k1; c.v = &v1; c.o = &o1; c.opt = &opt;
            c.f = NULL;
            ts[i] = time_call(&c, "favor_softmax_attention");
            c.f = &fp;
            tf[i] = time_call(&c, "favor_linear_attention(POSITIVE)");
        }
        printf("\ncost against n (one head, non-causal), n = %lu, %lu, %lu:\n",
               (unsigned long)sizes[0], (unsigned long)sizes[1], (unsigned long)sizes[2]);
        printf("  %-14s %9.2f ms -> %9.2f ms (x%.2f) -> %9.2f ms (x%.2f)   quadratic: x4 per doubling\n",
               "softmax", ts[0], ts[1], ts[1] / ts[0], ts[2], ts[2] / ts[1]);
        printf("  %-14s %9.2f ms -> %9.2f ms (x%.2f) -> %9.2f ms (x%.2f)   linear: x2 per doubling\n",
               fp_name, tf[0], tf[1], tf[1] / tf[0], tf[2], tf[2] / tf[1]);
    }

    printf("\ntotal %.1f s\n", (now_ms() - t_start) * 1e-3);
    free(q);
    free(k);
    free(v);
    free(ref);
    free(out);
    free(wstore);
    return 0;
}
