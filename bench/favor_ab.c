/* favor_ab: the speed of two or more builds of favor.h in one process, their
 * calls interleaved, and whether their outputs agree bit for bit
 * (bench/README.md, "Comparing two versions of the header").
 *
 *   favor_ab [--rounds R] [--min-ms M] [--expect-same] [--kv-offset B] LIB.so... -- CASE...
 *   CASE: decode:N_KEYS:D:TYPE:HQ/HK:ROWS:THREADS   (causal, the last ROWS rows)
 *         prefill:N:D:TYPE:HQ/HK:causal|full:THREADS
 *         backward:N:D:TYPE:HQ/HK:causal|full:THREADS (the prefill's gradients)
 *   TYPE: f32, f16 or bf16 (K and V; Q and O are fp32)
 *   then, optionally, :cap=C (softcap C), :alibi (the slopes 2^(-8 (h + 1) / HQ)),
 *   :mask (an fp32 mask of zeros, [1][rows][n_keys]) and :window=L (window_left L)
 *
 * Each LIB.so is bench/favor_ab_lib.c built against one favor.h
 * (bench/favor_ab.sh builds them from files or git revisions). On a shared
 * machine whose clock drifts, two programs run one after the other can differ
 * by more than the change measured: here every round times each build once (a
 * sample: calls repeated for at least M ms), the builds in an order that
 * rotates from round to round, and a build's ratio is the median over the
 * rounds of its time over build 0's in the same round. Also printed: each
 * build's median time and the range of its ratios. K and V start on a 64-byte
 * line, as favor_bench's buffers do (malloc leaves a large buffer 16 bytes past
 * one, which made fp32 rows of several queries up to 2x slower on a Zen 5), or
 * --kv-offset B bytes past one. POSIX (dlopen, posix_memalign). */
#define _POSIX_C_SOURCE 200809L
#include "favor_ab.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AB_MAX_LIBS 16
#define AB_MAX_ROUNDS 101

static double ab_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int ab_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the median of x[0..n), n <= AB_MAX_ROUNDS (x is left as it was) */
static double ab_median(const double *x, int n)
{
    double y[AB_MAX_ROUNDS];
    memcpy(y, x, (size_t)n * sizeof *y);
    qsort(y, (size_t)n, sizeof *y, ab_cmp);
    return n % 2 ? y[n / 2] : 0.5 * (y[n / 2 - 1] + y[n / 2]);
}

static unsigned long long ab_state = 0x9e3779b97f4a7c15ull;
static unsigned long long ab_next(void)
{
    ab_state ^= ab_state << 13;
    ab_state ^= ab_state >> 7;
    ab_state ^= ab_state << 17;
    return ab_state;
}
/* uniform in [-1, 1) */
static float ab_uniform(void)
{
    return (float)((double)(ab_next() >> 11) * (1.0 / 4503599627370496.0) - 1.0);
}

/* n elements of type t: fp32 uniform in [-1, 1); fp16 of magnitude [1/16, 1)
 * (sign, exponent 11 to 14 and mantissa drawn as bits: no conversion needed);
 * bf16 the top half of such a float */
static void ab_fill(void *p, int t, size_t n)
{
    size_t i;
    for (i = 0; i < n; ++i) {
        if (t == 0) {
            ((float *)p)[i] = ab_uniform();
        } else if (t == 1) {
            unsigned long long r = ab_next();
            ((unsigned short *)p)[i] =
                (unsigned short)(((r >> 63) << 15) | ((11 + (r >> 40) % 4) << 10) | (r & 0x3ff));
        } else {
            float f = ab_uniform();
            unsigned int u;
            memcpy(&u, &f, sizeof u);
            ((unsigned short *)p)[i] = (unsigned short)(u >> 16);
        }
    }
}

static int ab_parse_case(const char *s, favor_ab_case *c)
{
    char kind[16], type[8], mode[8];
    unsigned long nk, d, hq, hk, rows = 0;
    int threads, used = 0;
    memset(c, 0, sizeof *c);
    if (sscanf(s, "%15[a-z]:%lu:%lu:%7[a-z0-9]:%lu/%lu:%n", kind, &nk, &d, type, &hq, &hk,
               &used) != 6 || !used)
        return 0;
    s += used;
    if (!strcmp(kind, "decode")) {
        if (sscanf(s, "%lu:%d%n", &rows, &threads, &used) != 2) return 0;
        c->decode = c->causal = 1;
    } else if (!strcmp(kind, "prefill") || !strcmp(kind, "backward")) {
        if (sscanf(s, "%7[a-z]:%d%n", mode, &threads, &used) != 2) return 0;
        if (strcmp(mode, "causal") && strcmp(mode, "full")) return 0;
        c->causal = !strcmp(mode, "causal");
        c->backward = !strcmp(kind, "backward");
        rows = nk;
    } else
        return 0;
    c->type = !strcmp(type, "f32") ? 0 : !strcmp(type, "f16") ? 1 : !strcmp(type, "bf16") ? 2 : -1;
    c->n_keys = nk;
    c->d = d;
    c->hq = hq;
    c->hk = hk;
    c->rows = rows;
    c->threads = threads;
    for (s += used; *s;) { /* the variants: :cap=C, :alibi, :mask, :window=L */
        float cap;
        long win;
        used = 0;
        if (sscanf(s, ":cap=%f%n", &cap, &used) == 1 && used && cap > 0.0f)
            c->cap = cap;
        else if (sscanf(s, ":window=%ld%n", &win, &used) == 1 && used && win > 0)
            c->window = win;
        else if (!strncmp(s, ":alibi", 6) && (s[6] == ':' || !s[6])) {
            c->alibi = 1;
            used = 6;
        } else if (!strncmp(s, ":mask", 5) && (s[5] == ':' || !s[5])) {
            c->mask = 1;
            used = 5;
        } else
            return 0;
        s += used;
    }
    return c->type >= 0 && nk && d && hq && hk && hq % hk == 0 && rows && rows <= nk &&
           threads >= 1;
}

static void ab_usage(void)
{
    fprintf(stderr,
            "usage: favor_ab [--rounds R] [--min-ms M] [--expect-same] [--kv-offset B]\n"
            "                LIB.so... -- CASE...\n"
            "  CASE: decode:N_KEYS:D:TYPE:HQ/HK:ROWS:THREADS (causal, the last ROWS rows)\n"
            "        prefill:N:D:TYPE:HQ/HK:causal|full:THREADS\n"
            "        backward:N:D:TYPE:HQ/HK:causal|full:THREADS (dq compared)\n"
            "  TYPE: f32, f16, bf16 (K and V)\n"
            "  then, optionally, :cap=C (softcap), :alibi (ALiBi, slopes 2^(-8(h+1)/hq)),\n"
            "  :mask (an fp32 mask of zeros) and :window=L (window_left L)\n"
            "  --kv-offset B: K and V B bytes (0 to 63, whole elements) past a 64-byte line\n"
            "  e.g. favor_ab a.so b.so -- decode:16384:64:f16:32/8:1:1\n");
}

int main(int argc, char **argv)
{
    const char *names[AB_MAX_LIBS];
    favor_ab_fn fn[AB_MAX_LIBS];
    int nl = 0, rounds = 7, expect_same = 0, i, failed = 0, kv_off = 0;
    double min_s = 0.02;
    for (i = 1; i < argc && strcmp(argv[i], "--"); ++i) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--min-ms") && i + 1 < argc) {
            min_s = atof(argv[++i]) * 1e-3;
        } else if (!strcmp(argv[i], "--expect-same")) {
            expect_same = 1;
        } else if (!strcmp(argv[i], "--kv-offset") && i + 1 < argc) {
            kv_off = atoi(argv[++i]);
            if (kv_off < 0 || kv_off > 63) kv_off = -1;
        } else if (argv[i][0] == '-' || nl == AB_MAX_LIBS) {
            ab_usage();
            return 2;
        } else {
            /* RTLD_LOCAL: each build keeps its own favor_* symbols */
            void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
            void *sym = h ? dlsym(h, FAVOR_AB_SYMBOL) : NULL;
            if (!sym) {
                fprintf(stderr, "favor_ab: %s: %s\n", argv[i], dlerror());
                return 2;
            }
            memcpy(&fn[nl], &sym, sizeof sym); /* (POSIX: a function's address) */
            names[nl++] = argv[i];
        }
    }
    if (nl < 1 || i + 1 >= argc || rounds < 1 || rounds > AB_MAX_ROUNDS || !(min_s >= 0.0) ||
        kv_off < 0) {
        ab_usage();
        return 2;
    }
    printf("favor_ab: %d build%s, %d round%s, samples of >= %.0f ms, the order rotating\n", nl,
           nl > 1 ? "s" : "", rounds, rounds > 1 ? "s" : "", min_s * 1e3);
    for (int b = 0; b < nl; ++b) printf("  [%d] %s\n", b, names[b]);
    for (++i; i < argc; ++i) {
        favor_ab_case c;
        static double t[AB_MAX_LIBS][AB_MAX_ROUNDS], ratio[AB_MAX_ROUNDS];
        double dmax[AB_MAX_LIBS] = {0.0}, omax = 0.0;
        size_t nq, nkv, es;
        float *q, *o, *o0, *out = NULL, *dout = NULL, *dk = NULL, *dv = NULL;
        void *k, *v, *kbuf = NULL, *vbuf = NULL;
        if (!ab_parse_case(argv[i], &c)) {
            fprintf(stderr, "favor_ab: bad case '%s'\n", argv[i]);
            ab_usage();
            return 2;
        }
        nq = c.hq * c.rows * c.d;
        nkv = c.hk * c.n_keys * c.d;
        es = c.type ? 2 : 4;
        q = malloc(nq * sizeof *q);
        o = malloc(nq * sizeof *o);
        o0 = malloc(nq * sizeof *o0);
        if (kv_off % (int)es) {
            fprintf(stderr, "favor_ab: --kv-offset %d is not whole elements of '%s'\n", kv_off,
                    argv[i]);
            return 2;
        }
        k = v = NULL; /* on a line, or kv_off bytes past one */
        if (!posix_memalign(&kbuf, 64, nkv * es + 64)) k = (char *)kbuf + kv_off;
        if (!posix_memalign(&vbuf, 64, nkv * es + 64)) v = (char *)vbuf + kv_off;
        if (!q || !o || !o0 || !k || !v) {
            fprintf(stderr, "favor_ab: out of memory for '%s'\n", argv[i]);
            return 2;
        }
        ab_fill(q, 0, nq);
        ab_fill(k, c.type, nkv);
        ab_fill(v, c.type, nkv);
        if (c.backward) { /* the forward's output from build 0, and a random dout */
            out = malloc(nq * sizeof *out);
            dout = malloc(nq * sizeof *dout);
            dk = malloc(nkv * sizeof *dk);
            dv = malloc(nkv * sizeof *dv);
            if (!out || !dout || !dk || !dv) {
                fprintf(stderr, "favor_ab: out of memory for '%s'\n", argv[i]);
                return 2;
            }
            c.backward = 0;
            if (fn[0](&c, q, k, v, out)) {
                fprintf(stderr, "favor_ab: [0]'s forward call failed\n");
                return 1;
            }
            ab_fill(dout, 0, nq);
            c.backward = 1;
            c.out = out;
            c.dout = dout;
            c.dk = dk;
            c.dv = dv;
        }
        printf("%s%s: %s K/V, %zu keys, d %zu, %zu query heads on %zu, %zu row%s, %d thread%s"
               "%s%s%s%s\n",
               argv[i], c.backward ? " (dq compared)" : "",
               c.type == 0 ? "fp32" : c.type == 1 ? "fp16" : "bf16", c.n_keys, c.d, c.hq, c.hk,
               c.rows, c.rows > 1 ? "s" : "", c.threads, c.threads > 1 ? "s" : "",
               c.cap > 0.0f ? ", softcap" : "", c.alibi ? ", ALiBi" : "", c.mask ? ", mask" : "",
               c.window ? ", window" : "");
        if (kv_off) printf("  K and V %d bytes past a 64-byte line\n", kv_off);
        /* a warm-up call each, whose output is compared with build 0's */
        for (int b = 0; b < nl; ++b) {
            int st = fn[b](&c, q, k, v, b ? o : o0);
            if (st) {
                fprintf(stderr, "favor_ab: [%d] returned status %d\n", b, st);
                return 1;
            }
            if (b && memcmp(o, o0, nq * sizeof *o)) {
                for (size_t e = 0; e < nq; ++e) {
                    double dd = fabs((double)o[e] - (double)o0[e]);
                    if (dd != dd) dd = HUGE_VAL; /* a NaN on one side or both */
                    if (dd > dmax[b]) dmax[b] = dd;
                    if (fabs((double)o0[e]) > omax) omax = fabs((double)o0[e]);
                }
                if (dmax[b] == 0.0) dmax[b] = -1.0; /* -0 against +0: not the same bits */
                if (expect_same) failed = 1;
            }
        }
        for (int r = 0; r < rounds; ++r)
            for (int s = 0; s < nl; ++s) {
                int b = (r + s) % nl, it = 0;
                double t0 = ab_now(), t1;
                do {
                    if (fn[b](&c, q, k, v, o)) return 1;
                    ++it;
                    t1 = ab_now();
                } while (t1 - t0 < min_s);
                t[b][r] = (t1 - t0) / it;
            }
        for (int b = 0; b < nl; ++b) {
            double lo = 1e300, hi = 0.0, med;
            for (int r = 0; r < rounds; ++r) {
                ratio[r] = t[b][r] / t[0][r];
                lo = ratio[r] < lo ? ratio[r] : lo;
                hi = ratio[r] > hi ? ratio[r] : hi;
            }
            med = ab_median(ratio, rounds);
            printf("  [%d] %10.4f ms", b, ab_median(t[b], rounds) * 1e3);
            if (b) printf("  %.3fx (%.3f-%.3f)", med, lo, hi);
            if (b && dmax[b] == 0.0) printf("  same bits as [0]");
            else if (b && dmax[b] < 0.0) printf("  differs from [0] in the sign of a zero");
            else if (b) printf("  differs from [0]: max |diff| %.3g, max |o| %.3g", dmax[b], omax);
            printf("\n");
        }
        free(q);
        free(o);
        free(o0);
        free(kbuf);
        free(vbuf);
        free(out);
        free(dout);
        free(dk);
        free(dv);
    }
    return failed;
}
