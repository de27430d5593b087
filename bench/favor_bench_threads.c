/* favor_bench_threads: how favor.h's calls use their threads.
 *
 * For two shapes -- "mqa", one sequence of n = 16384 tokens with 8 query heads on
 * one key/value head, and "batched", 4 sequences of n = 1024 with 12 heads (12
 * key/value heads) passed as favor_tensor_batched views, both d = d_v = 64 -- and
 * for exact softmax, elu(x)+1 and FAVOR+ (m = 256 positive random features)
 * attention, non-causal and causal, forward and backward, it measures:
 *   - the wall time (CLOCK_MONOTONIC) of a call at favor_options.threads = 1 and
 *     at 2, each the median of R calls after one warm-up call, the 1- and
 *     2-thread calls interleaved (1, 2, 1, 2, ...) so that a slow spell of this
 *     machine falls on both alike, and the speed-up t1 / t2. R is --runs (5);
 *     fewer, but never below 3, when R pairs of calls would take more than
 *     --budget seconds (the mqa softmax rows, seconds per call); more, up to 41,
 *     while R pairs take under 2 s (calls of up to about 0.2 s, whose medians
 *     would otherwise move with the VM's slow spells);
 *   - the machine's own limit for each call on two cores: in the same rounds,
 *     two 1-thread calls run at once, one per thread of a 2-thread region (they
 *     share only their inputs: no split, no barrier), and twin2 = 2 t1 / their
 *     wall time, the median over the rounds: about the most a split call can
 *     reach (2 only where the two cores do not slow each other down through
 *     shared caches and memory, or the host). Their outputs are compared with
 *     the 1-thread call's too;
 *   - why a 2-thread call is not twice as fast, from the CPU clocks of its two
 *     threads (read as for the balance below): busy2 = their CPU time / (2 t2),
 *     the share of the call both threads spent working (1 - busy2: waiting at
 *     barriers or for the last item), and cpu2x = that CPU time / the CPU time
 *     of the 1-thread call of the same pair: above 1, the same work took longer
 *     on two cores at once than on one (the split adds no work for the linear
 *     methods; the machine's shared caches and memory, or its host, slow each
 *     thread). t1/t2 is about 2 busy2 / cpu2x. Medians over the R pairs;
 *   - the work balance of a call at threads = 16: every thread of a
 *     `#pragma omp parallel num_threads(16)` region reads its CPU clock
 *     (CLOCK_THREAD_CPUTIME_ID) just before and just after the call, which runs
 *     on the same libgomp pool threads, so the difference is the CPU time each
 *     thread spent in the call. Balance = largest / mean of the 16 (1: even;
 *     16: one thread did everything); "work x" = their sum / the 1-thread wall
 *     time (1: the split costs nothing in total; the CSV's work_cpu divides by
 *     the 1-thread call's CPU time instead, which a loaded machine does not
 *     inflate). Median of 3 calls. With more threads than cores the balance
 *     also reflects how the OS shares the cores among threads that take work
 *     items as they come; a call split into fewer pieces than threads shows it
 *     plainly (one piece: 16). A pool thread replaced in between (the call ran
 *     fewer threads and libgomp let the others exit) did none of the call's
 *     work and counts 0. This needs OMP_WAIT_POLICY=passive (idle threads sleep
 *     rather than spin and accumulate CPU time); libgomp reads it when it is
 *     loaded, so when it is unset the program re-executes itself with it set;
 *   - for the batched shape, at 1 thread: the batched call against the 4 calls
 *     on each batch element's packed [12][n][64] views (lse advanced by 12 n per
 *     element for the softmax backward), as the ratio batched / sum of the 4
 *     (target: at most 1), in the same interleaved loop;
 *   - bit-identity: the outputs (out; dq, dk, dv) of the 2- and 16-thread calls
 *     are compared with memcmp against the 1-thread call's (favor.h promises
 *     bit-identical results for any thread count); the exit status is 1 when one
 *     differs or a call fails. Whether the per-element calls give the batched
 *     call's bits is shown too, for information only.
 * Before the table (not with --quick) it measures what 2 threads each reading
 * its own 64 MB array get against 1 thread (machine_reference).
 * Inputs: N(0, 0.5^2) floats from splitmix64 and Box-Muller with a fixed seed.
 * The softmax backward reads the log-sum-exp of an untimed forward call
 * (favor_options.lse) and that call's output.
 *
 * `favor_bench_threads --help` lists the options; `--quick` is the smoke test
 * that ctest runs: tiny sizes, one call each at 1, 2 and 16 threads, checking
 * the bit-identity only. Uses the public favor.h API only. */
#define _POSIX_C_SOURCE 200809L

#define FAVOR_IMPLEMENTATION
#include "favor.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define PROG "favor_bench_threads"
#define MIN_RUNS 3        /* the budget never cuts the timed calls below this */
#define MAX_RUNS 41       /* short calls are repeated up to this many times    */
#define FAST_SECONDS 2.0  /* ... while R pairs take less than this             */
#define BALANCE_CALLS 3   /* calls of the balance measurement (median)         */
#define MAX_WIDE 256      /* most threads --wide accepts                        */

enum { M_SOFTMAX, M_ELU1, M_FAVORP, M_COUNT };
static const char *const method_names[M_COUNT] = {"softmax", "elu1", "favor+"};
enum { S_MQA, S_BATCHED, S_COUNT };
static const char *const shape_names[S_COUNT] = {"mqa", "batched"};
static const char *const pass_names[2] = {"fwd", "bwd"};
static const char *const causal_names[2] = {"0", "1"};

/* Output buffer sets: the 1-thread calls', the 2- and 16-thread calls', the
 * per-element calls', and the second of two 1-thread calls run at once. */
enum { SET_1, SET_N, SET_E, SET_T, SETS };

/* ------------------------------------------------------------------------- */
/* Small utilities                                                            */
/* ------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* CPU time of the calling thread */
static double thread_cpu_s(void)
{
    struct timespec t;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return 0.0;
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *alloc_floats(size_t count)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, (count ? count : 16) * sizeof(float)) != 0 || !p) {
        fprintf(stderr, PROG ": out of memory (%lu floats)\n", (unsigned long)count);
        exit(2);
    }
    return (float *)p;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* median of x[0..n) (sorts x); -1 for n = 0 */
static double median(double *x, int n)
{
    if (n <= 0) return -1.0;
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* The machine's memory bandwidth for 2 threads, measured in the same run (not
 * with --quick): each of T = 1 or 2 threads reads its own array of REF_FLOATS
 * floats (first touched by that thread); median of REF_ROUNDS interleaved
 * rounds. A call that streams its data from memory cannot scale better. (Each
 * row's twin2 is the limit for that call itself.) */
#define REF_FLOATS ((size_t)16 << 20) /* 64 MB per thread: beyond the caches */
#define REF_ROUNDS 5

#ifdef _OPENMP
static volatile double ref_sink; /* keeps the sums */

static double ref_read(const float *x, size_t n)
{
    float s[16] = {0};
    size_t i, j;
    double t = 0.0;
    for (i = 0; i + 16 <= n; i += 16)
        for (j = 0; j < 16; ++j) s[j] += x[i + j];
    for (j = 0; j < 16; ++j) t += s[j];
    return t;
}

static void machine_reference(void)
{
    double rd[2][REF_ROUNDS];
    float *arr[2];
    int r, t;
#pragma omp parallel num_threads(2)
    {
        size_t i;
        int me = omp_get_thread_num();
        arr[me] = alloc_floats(REF_FLOATS);
        for (i = 0; i < REF_FLOATS; ++i) arr[me][i] = (float)(i & 7);
    }
    for (r = 0; r < REF_ROUNDS; ++r)
        for (t = 1; t <= 2; ++t) {
            double t0 = now_s(), s = 0.0;
#pragma omp parallel num_threads(t) reduction(+ : s)
            s += ref_read(arr[omp_get_thread_num()], REF_FLOATS);
            rd[t - 1][r] = now_s() - t0;
            ref_sink += s;
        }
    printf("machine, 2 threads at once against 1 (medians of %d): reading %lu MB each %.2fx "
           "(1 thread %.1f GB/s)\n",
           REF_ROUNDS, (unsigned long)(REF_FLOATS * sizeof(float) >> 20),
           2.0 * median(rd[0], REF_ROUNDS) / median(rd[1], REF_ROUNDS),
           (double)(REF_FLOATS * sizeof(float)) / median(rd[0], REF_ROUNDS) / 1e9);
    free(arr[0]);
    free(arr[1]);
}
#else
static void machine_reference(void) {}
#endif

/* splitmix64 */
static unsigned long long mix64(unsigned long long *s)
{
    unsigned long long z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* count floats N(0, sd^2), Box-Muller on 53-bit uniforms */
static void fill_normal(float *x, size_t count, double sd, unsigned long long *state)
{
    const double two53 = 9007199254740992.0, two_pi = 6.283185307179586477;
    size_t i;
    for (i = 0; i < count; i += 2) {
        double u1 = ((double)(mix64(state) >> 11) + 1.0) / two53; /* (0, 1] */
        double u2 = (double)(mix64(state) >> 11) / two53;         /* [0, 1) */
        double r = sd * sqrt(-2.0 * log(u1)), a = two_pi * u2;
        x[i] = (float)(r * cos(a));
        if (i + 1 < count) x[i + 1] = (float)(r * sin(a));
    }
}

static int is_passive(const char *p)
{
    const char *want = "passive";
    if (!p) return 0;
    for (; *p && *want; ++p, ++want)
        if (*p != *want && *p != *want - 'a' + 'A') return 0;
    return !*p && !*want;
}

static double load_average(void)
{
    double l = -1.0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return -1.0;
    if (fscanf(f, "%lf", &l) != 1) l = -1.0;
    fclose(f);
    return l;
}

/* a time in milliseconds with 3 or 4 significant digits, into buf ("-" for
 * a negative time: not measured) */
static const char *fmt_ms(char *buf, size_t size, double seconds)
{
    double ms = 1e3 * seconds;
    if (seconds < 0) snprintf(buf, size, "-");
    else if (ms >= 1000.0) snprintf(buf, size, "%.0f", ms);
    else if (ms >= 100.0) snprintf(buf, size, "%.1f", ms);
    else if (ms >= 10.0) snprintf(buf, size, "%.2f", ms);
    else snprintf(buf, size, "%.3f", ms);
    return buf;
}

/* ------------------------------------------------------------------------- */
/* Configuration                                                              */
/* ------------------------------------------------------------------------- */

typedef struct {
    int quick, runs, runs_given, wide;
    double budget;
    size_t m, n_mqa, n_batched;
    unsigned long long seed;
    int shapes[S_COUNT], methods[M_COUNT], causal[2], passes[2]; /* 1 = selected */
    const char *csv;
} config;

static void usage(FILE *to)
{
    fprintf(to,
            "usage: " PROG " [options]\n"
            "\n"
            "Times favor.h's softmax, elu+1 and FAVOR+ attention, forward and backward,\n"
            "non-causal and causal, at favor_options.threads = 1 and 2 (speed-up), the\n"
            "work balance over the threads of a 16-thread call, batched calls against\n"
            "per-element calls, and checks that every thread count gives the same bits.\n"
            "Prints one table; exit status 1 when outputs differ or a call fails.\n"
            "\n"
            "  --quick            smoke test: mqa n = 256, batched n = 64, one call each\n"
            "                     at 1, 2 and 16 threads; checks the bit-identity only\n"
            "                     (its times mean nothing)\n"
            "  --shape LIST       mqa,batched                        default: both\n"
            "                       mqa:     batch 1, 8 query heads on 1 kv head, d = 64\n"
            "                       batched: batch 4, 12 heads on 12 kv heads, d = 64\n"
            "  --method LIST      softmax,elu1,favor+                default: all three\n"
            "  --causal LIST      0,1 (non-causal, causal)           default: 0,1\n"
            "  --pass LIST        fwd,bwd                            default: fwd,bwd\n"
            "  --n-mqa N          tokens of the mqa shape            default: 16384\n"
            "  --n-batched N      tokens of each batched sequence    default: 1024\n"
            "  --m M              FAVOR+ random features             default: 256\n"
            "  --runs R           timed calls per thread count after one warm-up call\n"
            "                     each (cut to no fewer than %d by --budget); without\n"
            "                     it, 5, and up to %d while they take under 2 s\n"
            "  --budget SEC       seconds the timed 1- and 2-thread calls of one row may\n"
            "                     take before R is cut; 0: no limit    default: 60\n"
            "  --wide T           threads of the balance measurement default: 16\n"
            "  --csv FILE         also write one CSV row per measurement\n"
            "  --seed S           seed of the inputs and of FAVOR+'s W default: 42\n"
            "  --help             this text\n"
            "\n"
            "Environment: OMP_WAIT_POLICY=passive is needed for the balance columns\n"
            "(idle threads must sleep, not spin): when it is unset the program runs\n"
            "itself again with it set; any other value is kept, with a warning.\n"
            "A full run takes about 13 minutes on 2 cores, most of it the mqa softmax\n"
            "rows (seconds per call).\n",
            MIN_RUNS, MAX_RUNS);
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v;
    if (!s || *s < '0' || *s > '9') return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end || v == 0 || v > (unsigned long long)((size_t)-1)) return -1;
    *out = (size_t)v;
    return 0;
}

/* a comma-separated list of names: sel[i] = 1 for each names[i] listed */
static int parse_names(const char *s, const char *const *names, int count, int *sel)
{
    int i;
    if (!s || !*s) return -1;
    for (i = 0; i < count; ++i) sel[i] = 0;
    while (*s) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        for (i = 0; i < count; ++i)
            if (strlen(names[i]) == len && strncmp(s, names[i], len) == 0) break;
        if (i == count) return -1;
        sel[i] = 1;
        s += len;
        if (*s == ',') ++s;
    }
    return 0;
}

static int parse_args(int argc, char **argv, config *c)
{
    int i, k;
    size_t v;
    memset(c, 0, sizeof *c);
    c->runs = 5;
    c->wide = 16;
    c->budget = 60.0;
    c->m = 256;
    c->n_mqa = 16384;
    c->n_batched = 1024;
    c->seed = 42;
    for (k = 0; k < S_COUNT; ++k) c->shapes[k] = 1;
    for (k = 0; k < M_COUNT; ++k) c->methods[k] = 1;
    c->causal[0] = c->causal[1] = c->passes[0] = c->passes[1] = 1;
    for (i = 1; i < argc; ++i) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0, takes = 1;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--quick") == 0) {
            c->quick = 1;
            takes = 0;
        } else if (strcmp(a, "--shape") == 0) {
            bad = parse_names(val, shape_names, S_COUNT, c->shapes);
        } else if (strcmp(a, "--method") == 0 || strcmp(a, "--methods") == 0) {
            bad = parse_names(val, method_names, M_COUNT, c->methods);
        } else if (strcmp(a, "--causal") == 0) {
            bad = parse_names(val, causal_names, 2, c->causal);
        } else if (strcmp(a, "--pass") == 0) {
            bad = parse_names(val, pass_names, 2, c->passes);
        } else if (strcmp(a, "--n-mqa") == 0) {
            bad = parse_size(val, &c->n_mqa);
        } else if (strcmp(a, "--n-batched") == 0) {
            bad = parse_size(val, &c->n_batched);
        } else if (strcmp(a, "--m") == 0) {
            bad = parse_size(val, &c->m);
        } else if (strcmp(a, "--runs") == 0) {
            bad = parse_size(val, &v) || v > 100000;
            if (!bad) c->runs = (int)v, c->runs_given = 1;
        } else if (strcmp(a, "--wide") == 0) {
            bad = parse_size(val, &v) || v > MAX_WIDE;
            if (!bad) c->wide = (int)v;
        } else if (strcmp(a, "--budget") == 0) {
            char *end;
            errno = 0;
            c->budget = val ? strtod(val, &end) : -1.0;
            bad = !val || errno || *end || !(c->budget >= 0.0);
        } else if (strcmp(a, "--csv") == 0) {
            c->csv = val;
            bad = !val;
        } else if (strcmp(a, "--seed") == 0) {
            char *end;
            errno = 0;
            c->seed = val ? strtoull(val, &end, 10) : 0;
            bad = !val || errno || *end;
        } else {
            fprintf(stderr, PROG ": unknown option %s (see --help)\n", a);
            return -1;
        }
        if (bad) {
            fprintf(stderr, PROG ": bad or missing value for %s\n", a);
            return -1;
        }
        i += takes;
    }
    if (c->quick) {
        c->n_mqa = 256;
        c->n_batched = 64;
        c->runs = 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Buffers and calls                                                          */
/* ------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    size_t batch, hq, hkv, n, d; /* d_v = d */
} shape;

typedef struct {
    shape s;
    size_t nq, nkv, nlse; /* floats of a q-shaped and a k-shaped tensor, of lse */
    float *q, *k, *v, *dout, *lse;
    float *out[SETS], *dq[SETS], *dk[SETS], *dv[SETS];
    char err[SETS][256]; /* favor_options.error of the last call into each set */
} bench;

typedef struct {
    int method, causal, backward;
    const favor_features *f; /* elu1, favor+ */
} job;

static void bench_free(bench *b)
{
    int i;
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->dout);
    free(b->lse);
    for (i = 0; i < SETS; ++i) {
        free(b->out[i]);
        free(b->dq[i]);
        free(b->dk[i]);
        free(b->dv[i]);
    }
    memset(b, 0, sizeof *b);
}

static void bench_init(bench *b, const shape *s, unsigned long long seed)
{
    unsigned long long st = seed * 0x2545f4914f6cdd1dULL + (unsigned long long)s->batch;
    int i;
    memset(b, 0, sizeof *b);
    b->s = *s;
    b->nq = s->batch * s->hq * s->n * s->d;
    b->nkv = s->batch * s->hkv * s->n * s->d;
    b->nlse = s->batch * s->hq * s->n;
    b->q = alloc_floats(b->nq);
    b->k = alloc_floats(b->nkv);
    b->v = alloc_floats(b->nkv);
    b->dout = alloc_floats(b->nq);
    b->lse = alloc_floats(b->nlse);
    for (i = 0; i < SETS; ++i) {
        if (i == SET_E && s->batch < 2) continue; /* per-element calls: batched only */
        b->out[i] = alloc_floats(b->nq);
        b->dq[i] = alloc_floats(b->nq);
        b->dk[i] = alloc_floats(b->nkv);
        b->dv[i] = alloc_floats(b->nkv);
    }
    fill_normal(b->q, b->nq, 0.5, &st);
    fill_normal(b->k, b->nkv, 0.5, &st);
    fill_normal(b->v, b->nkv, 0.5, &st);
    fill_normal(b->dout, b->nq, 0.5, &st);
    memset(b->lse, 0, b->nlse * sizeof(float));
}

/* A view of p shaped as q (heads = hq) or k (hkv): the whole batch (elem < 0)
 * or batch element elem as a packed [heads][n][d] view. */
static favor_tensor view(const bench *b, float *p, size_t heads, long elem)
{
    const shape *s = &b->s;
    if (elem >= 0)
        return favor_tensor_packed(p + (size_t)elem * heads * s->n * s->d, heads, s->n, s->d);
    if (s->batch > 1) return favor_tensor_batched(FAVOR_F32, p, s->batch, heads, s->n, s->d);
    return favor_tensor_packed(p, heads, s->n, s->d);
}

/* One call of j writing buffer set `set`, on `threads` threads, on the whole
 * batch (elem < 0) or on batch element elem. with_lse: a softmax forward also
 * writes lse (the backward's). The softmax backward reads out[SET_1] and lse,
 * written by such a forward. */
static favor_status call_one(bench *b, const job *j, int set, int threads, long elem,
                             int with_lse)
{
    const shape *s = &b->s;
    favor_options o = favor_default_options();
    favor_tensor Q = view(b, b->q, s->hq, elem), K = view(b, b->k, s->hkv, elem),
                 V = view(b, b->v, s->hkv, elem);
    float *lse = b->lse + (elem > 0 ? (size_t)elem * s->hq * s->n : 0);
    o.threads = threads;
    o.flags = j->causal ? FAVOR_CAUSAL : 0u;
    o.error = b->err[set];
    o.error_size = sizeof b->err[set];
    b->err[set][0] = '\0';
    if (!j->backward) {
        favor_tensor O = view(b, b->out[set], s->hq, elem);
        if (j->method != M_SOFTMAX) return favor_linear_attention(j->f, &Q, &K, &V, &O, &o);
        if (with_lse) o.lse = lse;
        return favor_softmax_attention(&Q, &K, &V, &O, &o);
    } else {
        favor_tensor dO = view(b, b->dout, s->hq, elem), dQ = view(b, b->dq[set], s->hq, elem),
                     dK = view(b, b->dk[set], s->hkv, elem),
                     dV = view(b, b->dv[set], s->hkv, elem);
        favor_tensor O = view(b, b->out[SET_1], s->hq, elem);
        if (j->method != M_SOFTMAX)
            return favor_linear_attention_backward(j->f, &Q, &K, &V, &dO, &dQ, &dK, &dV, &o);
        o.lse = lse;
        return favor_softmax_attention_backward(&Q, &K, &V, &O, &dO, &dQ, &dK, &dV, &o);
    }
}

/* The call on the whole batch, or (per_elem) one call per batch element. */
static favor_status call(bench *b, const job *j, int set, int threads, int per_elem)
{
    favor_status st;
    long e;
    if (!per_elem || b->s.batch < 2) return call_one(b, j, set, threads, -1, 0);
    for (e = 0; e < (long)b->s.batch; ++e)
        if ((st = call_one(b, j, set, threads, e, 0)) != FAVOR_OK) return st;
    return FAVOR_OK;
}

static void report_failure(const bench *b, const job *j, favor_status st, const char *what,
                           int set, int threads)
{
    const char *e = b->err[set];
    fprintf(stderr, PROG ": %s %s causal=%d %s (%s, threads %d): %s%s%s\n", b->s.name,
            method_names[j->method], j->causal, pass_names[j->backward], what, threads,
            favor_status_string(st), e[0] ? ": " : "", e);
}

/* Wall time of one call; *fail set when it fails; *cpu (unless NULL) = the
 * calling thread's CPU time in it (all of a 1-thread call's). */
static double timed(bench *b, const job *j, int set, int threads, int per_elem, int *fail,
                    double *cpu)
{
    favor_status st;
    double c0 = cpu ? thread_cpu_s() : 0.0, t0 = now_s(), t;
    st = call(b, j, set, threads, per_elem);
    t = now_s() - t0;
    if (cpu) *cpu = thread_cpu_s() - c0;
    if (st != FAVOR_OK) {
        report_failure(b, j, st, per_elem ? "per-element calls" : "call", set, threads);
        *fail = 1;
    }
    return t;
}

/* Two 1-thread calls of j at once, one on each thread of a 2-thread region,
 * into SET_1 and SET_T: the machine's own limit for this call on two cores, as
 * the two share nothing but their inputs (no split, no barrier). Wall time of
 * the pair; *fail set when one fails. Without OpenMP the two run one after the
 * other. */
static double twin(bench *b, const job *j, int *fail)
{
    favor_status st[2];
    double t0 = now_s(), t;
    int i;
#ifdef _OPENMP
#pragma omp parallel for num_threads(2) schedule(static, 1)
#endif
    for (i = 0; i < 2; ++i) st[i] = call_one(b, j, i ? SET_T : SET_1, 1, -1, 0);
    t = now_s() - t0;
    for (i = 0; i < 2; ++i)
        if (st[i] != FAVOR_OK) {
            report_failure(b, j, st[i], "two 1-thread calls at once", i ? SET_T : SET_1, 1);
            *fail = 1;
        }
    return t;
}

/* Fill the outputs of j in set with a byte pattern of the set's own, so that
 * an output a call did not write cannot compare equal to another set's. */
static void poison(bench *b, const job *j, int set)
{
    int byte = 0xff - set;
    if (!b->out[set]) return;
    if (!j->backward) {
        memset(b->out[set], byte, b->nq * sizeof(float));
    } else {
        memset(b->dq[set], byte, b->nq * sizeof(float));
        memset(b->dk[set], byte, b->nkv * sizeof(float));
        memset(b->dv[set], byte, b->nkv * sizeof(float));
    }
}

/* 1 when the outputs of j in sets x and y are the same bits */
static int same_bits(const bench *b, const job *j, int x, int y)
{
    if (!j->backward) return memcmp(b->out[x], b->out[y], b->nq * sizeof(float)) == 0;
    return memcmp(b->dq[x], b->dq[y], b->nq * sizeof(float)) == 0 &&
           memcmp(b->dk[x], b->dk[y], b->nkv * sizeof(float)) == 0 &&
           memcmp(b->dv[x], b->dv[y], b->nkv * sizeof(float)) == 0;
}

#ifdef _OPENMP
/* The bracket a pool thread last read its clock in; 0 in a thread libgomp has
 * created since (threadprivate: one per thread, zero in a new one). */
static int bracket_seen;
#pragma omp threadprivate(bracket_seen)
#endif

/* One call of j at `wide` threads into SET_N, bracketed by two parallel regions
 * of `wide` threads that read each thread's CPU clock. *wall = its wall time,
 * *cpu_sum = the CPU seconds all threads spent in it, *balance = largest / mean
 * (both -1: not measured: no OpenMP, or a region got fewer threads), *replaced =
 * threads of the first region that were gone by the second (counted 0). */
static favor_status wide_call(bench *b, const job *j, int wide, double *wall, double *balance,
                              double *cpu_sum, int *replaced)
{
#ifdef _OPENMP
    static int bracket;
    double before[MAX_WIDE], after[MAX_WIDE], sum = 0.0, most = 0.0, t0;
    int fresh[MAX_WIDE], team0 = 0, team1 = 0, mark, t;
    favor_status st;
    mark = ++bracket;
#pragma omp parallel num_threads(wide)
    {
        int id = omp_get_thread_num();
        before[id] = thread_cpu_s();
        bracket_seen = mark;
        if (id == 0) team0 = omp_get_num_threads();
    }
    t0 = now_s();
    st = call(b, j, SET_N, wide, 0);
    *wall = now_s() - t0;
#pragma omp parallel num_threads(wide)
    {
        int id = omp_get_thread_num();
        after[id] = thread_cpu_s();
        fresh[id] = bracket_seen != mark;
        if (id == 0) team1 = omp_get_num_threads();
    }
    *balance = -1.0;
    *cpu_sum = -1.0;
    *replaced = 0;
    if (st != FAVOR_OK || team0 != wide || team1 != wide) return st;
    for (t = 0; t < wide; ++t) {
        double d = fresh[t] ? 0.0 : after[t] - before[t];
        if (fresh[t]) ++*replaced;
        if (d < 0) d = 0;
        sum += d;
        if (d > most) most = d;
    }
    *cpu_sum = sum;
    if (sum > 0) *balance = most / (sum / wide);
    return FAVOR_OK;
#else
    double t0 = now_s();
    favor_status st = call(b, j, SET_N, wide, 0);
    *wall = now_s() - t0;
    *balance = -1.0;
    *cpu_sum = -1.0;
    *replaced = 0;
    return st;
#endif
}

/* ------------------------------------------------------------------------- */
/* One row: a shape, method, mask and pass                                    */
/* ------------------------------------------------------------------------- */

typedef struct {
    int failed, runs, ident, ident2, identw, ident_elem, replaced;
    double t1, t2, te, balance, work; /* < 0: not measured */
    double t1cpu, work_cpu; /* CPU time of the 1-thread call; work over that */
    double busy2, work2;    /* the 2-thread calls: CPU / (2 t2), CPU / t1cpu */
    double twin2;           /* 2 t1 / the wall time of two 1-thread calls at once */
    int ident_twin;         /* the second of those gave the 1-thread bits */
} result;

/* R: --runs, cut by the budget (never below MIN_RUNS) or raised for short
 * calls (when --runs was not given) */
static int choose_runs(const config *c, double pair)
{
    int r = c->runs;
    if (c->quick) return 1;
    if (pair <= 0) pair = 1e-9;
    if (c->budget > 0 && pair * r > c->budget) {
        double fit = c->budget / pair;
        r = fit >= (double)c->runs ? c->runs : (int)fit;
        if (r < MIN_RUNS) r = c->runs < MIN_RUNS ? c->runs : MIN_RUNS;
    } else if (!c->runs_given && pair * r < FAST_SECONDS) {
        double fit = FAST_SECONDS / pair;
        r = fit >= MAX_RUNS ? MAX_RUNS : (int)fit;
        if (r < c->runs) r = c->runs;
    }
    return r;
}

static void run_row(bench *b, const config *c, const job *j, result *res)
{
    int batched = b->s.batch > 1, i, r, fail = 0, nbal = c->quick ? 1 : BALANCE_CALLS;
    double *t1, *t2, *te, *c1, *c2, *u2, *tt, bal[BALANCE_CALLS], work[BALANCE_CALLS], wall;
    favor_status st;

    memset(res, 0, sizeof *res);
    res->t1 = res->t2 = res->te = res->balance = res->work = res->t1cpu = res->work_cpu = -1.0;
    res->busy2 = res->work2 = res->twin2 = -1.0;
    res->ident_elem = -1;
    res->failed = 1;

    /* the softmax backward reads a forward's output and lse (untimed) */
    if (j->backward && j->method == M_SOFTMAX) {
        job fwd = *j;
        fwd.backward = 0;
        if ((st = call_one(b, &fwd, SET_1, 2, -1, 1)) != FAVOR_OK) {
            report_failure(b, &fwd, st, "forward for lse", SET_1, 2);
            return;
        }
    }
    poison(b, j, SET_1);
    poison(b, j, SET_N);
    poison(b, j, SET_T);
    if (batched) poison(b, j, SET_E);

    /* warm-up: one call of each kind, also the cost of a pair */
    {
        double pair = 0.0;
        if (!c->quick) {
            pair += timed(b, j, SET_1, 1, 0, &fail, NULL);
            pair += timed(b, j, SET_N, 2, 0, &fail, NULL);
            pair += twin(b, j, &fail);
            if (batched) pair += timed(b, j, SET_E, 1, 1, &fail, NULL);
            if (fail) return;
        }
        r = choose_runs(c, pair);
    }
    t1 = (double *)malloc(7 * (size_t)r * sizeof(double));
    if (!t1) {
        fprintf(stderr, PROG ": out of memory\n");
        exit(2);
    }
    t2 = t1 + r;
    te = t2 + r;
    c1 = te + r;
    c2 = c1 + r;
    u2 = c2 + r;
    tt = u2 + r;
    for (i = 0; i < r && !fail; ++i) {
        double unused;
        int replaced;
        t1[i] = timed(b, j, SET_1, 1, 0, &fail, &c1[i]);
        if (!fail && (st = wide_call(b, j, 2, &t2[i], &unused, &c2[i], &replaced)) != FAVOR_OK) {
            report_failure(b, j, st, "call", SET_N, 2);
            fail = 1;
        }
        if (!fail) tt[i] = twin(b, j, &fail);
        if (batched && !fail) te[i] = timed(b, j, SET_E, 1, 1, &fail, NULL);
    }
    if (fail) {
        free(t1);
        return;
    }
    res->runs = r;
    res->ident2 = same_bits(b, j, SET_1, SET_N);
    res->ident_twin = same_bits(b, j, SET_1, SET_T);
    if (batched) res->ident_elem = same_bits(b, j, SET_1, SET_E);
    /* the 2-thread calls' CPU time, call by call (before median() sorts the
     * times): over twice their wall time (how busy the 2 threads were), and over
     * the 1-thread call of the pair (how much more CPU time the same work took on
     * two cores) */
    for (i = 0; i < r && c2[i] > 0 && t2[i] > 0 && c1[i] > 0; ++i) {
        u2[i] = c2[i] / (2.0 * t2[i]);
        c2[i] /= c1[i];
    }
    if (i == r) {
        res->busy2 = median(u2, r);
        res->work2 = median(c2, r);
    }
    for (i = 0; i < r; ++i) u2[i] = 2.0 * t1[i] / tt[i]; /* the twin pair of the same round */
    res->twin2 = median(u2, r);
    res->t1 = median(t1, r);
    res->t2 = median(t2, r);
    if (batched) res->te = median(te, r);
    res->t1cpu = median(c1, r);
    free(t1);

    /* balance at `wide` threads, whose output SET_N is checked too */
    poison(b, j, SET_N);
    for (i = 0; i < nbal; ++i) {
        int replaced;
        if ((st = wide_call(b, j, c->wide, &wall, &bal[i], &work[i], &replaced)) != FAVOR_OK) {
            report_failure(b, j, st, "balance call", SET_N, c->wide);
            return;
        }
        if (replaced > res->replaced) res->replaced = replaced;
        if (bal[i] < 0) nbal = 0; /* not measurable here */
    }
    res->identw = same_bits(b, j, SET_1, SET_N);
    if (nbal > 0) {
        double cpu = median(work, nbal);
        res->balance = median(bal, nbal);
        res->work = res->t1 > 0 ? cpu / res->t1 : -1.0;
        res->work_cpu = res->t1cpu > 0 ? cpu / res->t1cpu : -1.0;
    }
    res->ident = res->ident2 && res->identw && res->ident_twin;
    res->failed = 0;
}

/* ------------------------------------------------------------------------- */
/* Output                                                                     */
/* ------------------------------------------------------------------------- */

static void print_table_header(int wide)
{
    char bal[16];
    snprintf(bal, sizeof bal, "bal%d", wide);
    printf("\n%-8s %-7s %-6s %-4s %4s %10s %10s %6s %6s %6s %6s %6s %6s %9s %-9s %-5s\n",
           "shape", "method", "causal", "pass", "runs", "t1 ms", "t2 ms", "t1/t2", "twin2", "busy2",
           "cpu2x", bal, "work x", "batch/sum", "ident", "elem=");
}

static void print_row(const bench *b, const job *j, const result *r)
{
    char a[32], c2[32], sp[16], bl[16], wk[16], rt[16], id[16], bu[16], w2[16], tw[16];
    printf("%-8s %-7s %-6s %-4s ", b->s.name, method_names[j->method], j->causal ? "yes" : "no",
           pass_names[j->backward]);
    if (r->failed) {
        printf("%4s %10s %10s %6s %6s %6s %6s %6s %6s %9s %-9s %-5s\n", "-", "-", "-", "-", "-",
               "-", "-", "-", "-", "-", "FAIL", "-");
        return;
    }
    snprintf(sp, sizeof sp, "%.2f", r->t2 > 0 ? r->t1 / r->t2 : 0.0);
    if (r->balance >= 0) snprintf(bl, sizeof bl, "%.2f%s", r->balance, r->replaced ? "*" : "");
    else snprintf(bl, sizeof bl, "-");
    if (r->work >= 0) snprintf(wk, sizeof wk, "%.2f", r->work);
    else snprintf(wk, sizeof wk, "-");
    if (r->twin2 > 0) snprintf(tw, sizeof tw, "%.2f", r->twin2);
    else snprintf(tw, sizeof tw, "-");
    if (r->busy2 >= 0) snprintf(bu, sizeof bu, "%.2f", r->busy2);
    else snprintf(bu, sizeof bu, "-");
    if (r->work2 >= 0) snprintf(w2, sizeof w2, "%.2f", r->work2);
    else snprintf(w2, sizeof w2, "-");
    if (r->te > 0) snprintf(rt, sizeof rt, "%.3f", r->t1 / r->te);
    else snprintf(rt, sizeof rt, "-");
    if (r->ident) snprintf(id, sizeof id, "yes");
    else snprintf(id, sizeof id, "NO(%s%s%s)", r->ident2 ? "" : "2", r->identw ? "" : "w",
                  r->ident_twin ? "" : "t");
    printf("%4d %10s %10s %6s %6s %6s %6s %6s %6s %9s %-9s %-5s\n", r->runs,
           fmt_ms(a, sizeof a, r->t1), fmt_ms(c2, sizeof c2, r->t2), sp, tw, bu, w2, bl, wk, rt,
           id,
           r->ident_elem < 0 ? "-" : r->ident_elem ? "yes" : "no");
}

static void csv_header(FILE *f)
{
    fprintf(f, "shape,batch,heads,kv_heads,n,d,method,causal,pass,runs,t1_s,t2_s,speedup,"
               "wide_threads,balance,work,wide_replaced,per_element_s,batch_ratio,ident,"
               "ident_2,ident_wide,elem_ident,t1_cpu_s,work_cpu,busy2,cpu2x,twin2,ident_twin,ok\n");
}

static void csv_row(FILE *f, const bench *b, const job *j, const result *r, int wide)
{
    const shape *s = &b->s;
    fprintf(f, "%s,%lu,%lu,%lu,%lu,%lu,%s,%d,%s,%d,", s->name, (unsigned long)s->batch,
            (unsigned long)s->hq, (unsigned long)s->hkv, (unsigned long)s->n,
            (unsigned long)s->d, method_names[j->method], j->causal, pass_names[j->backward],
            r->runs);
    if (r->failed) {
        fprintf(f, ",,,%d,,,,,,,,,,,,,,,,0\n", wide);
        return;
    }
    fprintf(f, "%.6e,%.6e,%.4f,%d,", r->t1, r->t2, r->t2 > 0 ? r->t1 / r->t2 : 0.0, wide);
    if (r->balance >= 0) fprintf(f, "%.4f,", r->balance);
    else fprintf(f, ",");
    if (r->work >= 0) fprintf(f, "%.4f,", r->work);
    else fprintf(f, ",");
    fprintf(f, "%d,", r->replaced);
    if (r->te > 0) fprintf(f, "%.6e,%.4f,", r->te, r->t1 / r->te);
    else fprintf(f, ",,");
    fprintf(f, "%d,%d,%d,", r->ident, r->ident2, r->identw);
    if (r->ident_elem >= 0) fprintf(f, "%d,", r->ident_elem);
    else fprintf(f, ",");
    fprintf(f, "%.6e,", r->t1cpu);
    if (r->work_cpu >= 0) fprintf(f, "%.4f,", r->work_cpu);
    else fprintf(f, ",");
    if (r->busy2 >= 0) fprintf(f, "%.4f,%.4f,", r->busy2, r->work2);
    else fprintf(f, ",,");
    if (r->twin2 > 0) fprintf(f, "%.4f,", r->twin2);
    else fprintf(f, ",");
    fprintf(f, "%d,", r->ident_twin);
    fprintf(f, "1\n");
}

/* ------------------------------------------------------------------------- */
/* main                                                                       */
/* ------------------------------------------------------------------------- */

/* libgomp reads OMP_WAIT_POLICY when it is loaded, before main: when the
 * variable is unset, run this program again with it set to passive. Returns
 * only when that is not needed or did not work. */
static void ensure_passive(char **argv)
{
#ifdef _OPENMP
    if (getenv("OMP_WAIT_POLICY")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    fflush(NULL);
    if (argv[0] && strchr(argv[0], '/')) execv(argv[0], argv);
    execv("/proc/self/exe", argv); /* found on PATH (argv[0] has no directory) */
    unsetenv("OMP_WAIT_POLICY");   /* still here: libgomp did not read it */
#else
    (void)argv;
#endif
}

int main(int argc, char **argv)
{
    config c;
    shape shapes[S_COUNT];
    const char *policy;
    FILE *csv = NULL;
    int si, mi, ci, pi, failures = 0, mismatches = 0, rows = 0, replaced_any = 0;
    int elem_differs = 0, omp = 0, max_threads = 1;
    double started = now_s(), load;

    if (argc > 0) ensure_passive(argv);
    policy = getenv("OMP_WAIT_POLICY");
#ifdef _OPENMP
    omp = 1;
    omp_set_dynamic(0); /* a parallel region gets the threads it asks for */
    max_threads = omp_get_max_threads();
#endif
    setvbuf(stdout, NULL, _IOLBF, 0); /* rows show as they are measured */
    if (parse_args(argc, argv, &c) != 0) {
        usage(stderr);
        return 2;
    }

    shapes[S_MQA].name = "mqa";
    shapes[S_MQA].batch = 1;
    shapes[S_MQA].hq = 8;
    shapes[S_MQA].hkv = 1;
    shapes[S_MQA].n = c.n_mqa;
    shapes[S_MQA].d = 64;
    shapes[S_BATCHED].name = "batched";
    shapes[S_BATCHED].batch = 4;
    shapes[S_BATCHED].hq = 12;
    shapes[S_BATCHED].hkv = 12;
    shapes[S_BATCHED].n = c.n_batched;
    shapes[S_BATCHED].d = 64;

    load = load_average();
    printf(PROG "%s: favor.h backend %s, OpenMP %s (max %d threads), OMP_WAIT_POLICY=%s\n",
           c.quick ? " --quick" : "", favor_backend(), omp ? "on" : "off", max_threads,
           policy ? policy : "(unset)");
    if (load >= 0)
        printf("load average at start: %.2f on %ld CPUs (above this program's threads: other "
               "processes share the cores)\n",
               load, sysconf(_SC_NPROCESSORS_ONLN));
    if (!omp) printf("warning: built without OpenMP: every call runs on one thread\n");
    if (omp && !is_passive(policy))
        printf("warning: OMP_WAIT_POLICY is not passive: idle threads spin, so the "
               "bal%d and work x columns count spinning\n",
               c.wide);
    printf("shapes: mqa = batch 1, 8 query heads on 1 kv head, n = %lu, d = d_v = 64;\n"
           "        batched = batch 4, 12 heads on 12 kv heads, n = %lu, d = d_v = 64\n",
           (unsigned long)c.n_mqa, (unsigned long)c.n_batched);
    printf("methods: softmax (exact), elu1 (elu+1), favor+ (m = %lu positive features); "
           "inputs N(0, 0.5^2), seed %llu\n",
           (unsigned long)c.m, c.seed);
    if (c.quick)
        printf("--quick: one call each, the times mean nothing; checks the bit-identity\n");
    else
        printf("t1, t2: median wall time of R (runs) calls at threads 1 and 2, interleaved, "
               "after a warm-up\n"
               "twin2: 2 t1 / the wall time of two 1-thread calls run at once on 2 threads "
               "(same round): what the\n"
               "       machine gives this call on two cores with no split at all, about "
               "the most t1/t2 can reach\n"
               "busy2: the 2-thread call's CPU time / (2 t2), how busy its 2 threads were; "
               "cpu2x: that CPU time /\n"
               "       the 1-thread call's (same work: > 1 means it ran slower on two cores); "
               "t1/t2 ~ 2 busy2 / cpu2x\n"
               "bal%d: largest / mean CPU time of the %d threads of one call at threads = %d "
               "(median of %d; * = some\n"
               "       pool threads were replaced, i.e. the call ran fewer); work x: their "
               "CPU time / t1\n"
               "batch/sum: the batched call / its 4 per-element calls, at 1 thread; ident: "
               "2 and %d threads\n"
               "       and the twin calls give the 1-thread bits (NO(2), NO(w), NO(t): which "
               "differ); elem=: the\n"
               "       per-element calls do too\n",
               c.wide, c.wide, c.wide, BALANCE_CALLS, c.wide);

    if (!c.quick) machine_reference();

    if (c.csv) {
        csv = fopen(c.csv, "w");
        if (!csv) {
            fprintf(stderr, PROG ": cannot write %s: %s\n", c.csv, strerror(errno));
            return 2;
        }
        csv_header(csv);
    }
    print_table_header(c.wide);

    for (si = 0; si < S_COUNT; ++si) {
        bench b;
        favor_features feats[M_COUNT];
        float *fw[M_COUNT];
        int ok = 1;
        if (!c.shapes[si]) continue;
        bench_init(&b, &shapes[si], c.seed);
        for (mi = M_ELU1; mi < M_COUNT; ++mi) {
            favor_kernel kern = mi == M_ELU1 ? FAVOR_ELU1 : FAVOR_POSITIVE;
            size_t count = mi == M_ELU1 ? shapes[si].d : c.m;
            favor_status st;
            fw[mi] = alloc_floats(favor_features_floats(kern, shapes[si].d, count));
            st = favor_features_init(&feats[mi], kern, shapes[si].d, count, 0, c.seed, fw[mi]);
            if (st != FAVOR_OK) {
                fprintf(stderr, PROG ": favor_features_init(%s): %s\n", method_names[mi],
                        favor_status_string(st));
                ok = 0;
            }
        }
        fw[M_SOFTMAX] = NULL;
        for (mi = 0; mi < M_COUNT && ok; ++mi) {
            if (!c.methods[mi]) continue;
            for (ci = 0; ci < 2; ++ci) {
                if (!c.causal[ci]) continue;
                for (pi = 0; pi < 2; ++pi) {
                    job j;
                    result r;
                    if (!c.passes[pi]) continue;
                    j.method = mi;
                    j.causal = ci;
                    j.backward = pi;
                    j.f = mi == M_SOFTMAX ? NULL : &feats[mi];
                    run_row(&b, &c, &j, &r);
                    print_row(&b, &j, &r);
                    if (csv) {
                        csv_row(csv, &b, &j, &r, c.wide);
                        fflush(csv);
                    }
                    ++rows;
                    failures += r.failed;
                    mismatches += !r.failed && !r.ident;
                    elem_differs += !r.failed && r.ident_elem == 0;
                    replaced_any |= !r.failed && r.replaced > 0;
                }
            }
        }
        if (!ok) ++failures;
        for (mi = 0; mi < M_COUNT; ++mi) free(fw[mi]);
        bench_free(&b);
    }

    if (csv && fclose(csv) != 0) {
        fprintf(stderr, PROG ": error writing %s\n", c.csv);
        failures++;
    }
    printf("\n%d rows in %.1f s: %d with outputs that depend on the thread count, %d failed\n",
           rows, now_s() - started, mismatches, failures);
    if (replaced_any)
        printf("* some of the %d pool threads exited during the call (it ran on fewer); they "
               "count as 0 in bal%d\n",
               c.wide, c.wide);
    if (elem_differs)
        printf("note: in %d rows the per-element calls differ in bits from the batched call "
               "(not an error)\n",
               elem_differs);
    return failures || mismatches ? 1 : 0;
}
