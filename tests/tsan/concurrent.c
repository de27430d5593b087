/* Thread safety of favor.h (issue 7, item 6): NTHREADS pthreads call every entry
 * point at the same time, repeatedly, and each result must be bit-for-bit the
 * one computed serially first.
 *
 * Shared between the threads, read-only: the inputs q, k, v, dout and two
 * feature maps (FAVOR+ and elu+1; W read concurrently, as a model's layers
 * would share it). Each thread's own: every output, gradient, lse buffer,
 * recurrent state, feature-map storage and workspace. Each thread runs, in an
 * order rotated by its index (so different entry points overlap), and
 * alternating between a workspace it allocated from the *_workspace() query and
 * NULL (the library allocates):
 *     favor_features_init (its own W: must equal the shared one bit for bit),
 *     favor_feature_map (query, key and plain roles),
 *     favor_softmax_attention, non-causal and causal (causal with opts.lse),
 *     favor_linear_attention, FAVOR+ and elu+1, non-causal and causal,
 *     favor_softmax_attention_backward and favor_linear_attention_backward (causal),
 *     favor_linear_extend (two blocks) and favor_linear_step on its own state,
 *     favor_set_backend(NULL) (under FAVOR_DISPATCH: storing the choice again).
 * Before all that, the program's first calls are made by the threads at once,
 * half favor_backend and half favor_set_backend(NULL): under FAVOR_DISPATCH each
 * finds no backend chosen yet and chooses it, racing on the library's one static
 * (an atomic pointer); all must name the same backend.
 * The library claims no global state (but that pointer, under FAVOR_DISPATCH) and
 * reentrant functions; a data race anywhere would show up as a ThreadSanitizer
 * report (tests/tsan/run.sh) and very likely as a mismatch here.
 *
 * Built without OpenMP: libgomp is not instrumented for ThreadSanitizer and
 * its own synchronization is reported as races (false positives), so
 * favor_options.threads is irrelevant here (each call runs on its caller's
 * thread). ctest runs this program natively without TSan (tsan_concurrent_*);
 * run.sh builds it with clang -fsanitize=thread. */
#define FAVOR_IMPLEMENTATION
#include "favor.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef NTHREADS
#define NTHREADS 4
#endif
#ifndef REPS
#define REPS 6
#endif

#define HQ 4
#define HKV 2
#define N 130
#define D 16
#define DVV 8
#define M 32

/* ---- shared, read-only after setup ------------------------------------------------ */
static float g_q[HQ * N * D], g_k[HKV * N * D], g_v[HKV * N * DVV], g_dout[HQ * N * DVV];
static float g_wpos[2 * M * D + 2 * D];
static favor_features g_fpos, g_felu;

/* the results of one run of every entry point, compared with memcmp */
typedef struct {
    float w[2 * M * D + 2 * D];                   /* features_init's W storage      */
    float phi[3][HQ * N * M];                     /* feature_map, three roles       */
    float soft[2][HQ * N * DVV], lse[HQ * N];     /* softmax, non-causal / causal   */
    float lin[4][HQ * N * DVV];                   /* FAVOR+ / elu, non-causal/causal */
    float sdq[HQ * N * D], sdk[HKV * N * D], sdv[HKV * N * DVV]; /* softmax backward */
    float ldq[HQ * N * D], ldk[HKV * N * D], ldv[HKV * N * DVV]; /* linear backward  */
    float ext[HQ * N * DVV];                      /* extend (2 blocks), then steps  */
    float state[4096];                            /* the state after it all         */
} results;

static results serial;

typedef struct {
    int index;
    results *r;
    int fails;
    char msg[160];
} job;

static uint64_t rng_state = 12345;
static float rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)((double)(z >> 40) * 0x1p-24 * 2.0 - 1.0);
}

static favor_tensor T(float *p, size_t h, size_t r, size_t c) { return favor_tensor_packed(p, h, r, c); }

/* options with this call's workspace: its own (bytes from the query) or NULL */
typedef struct {
    favor_options o;
    void *mem;
} opts;

static void opts_make(opts *x, unsigned flags, size_t bytes, int own)
{
    x->o = favor_default_options();
    x->o.flags = flags;
    x->o.threads = 1;
    x->mem = NULL;
    if (own && bytes) {
        x->mem = malloc(bytes);
        x->o.workspace = x->mem;
        x->o.workspace_size = x->mem ? bytes : 0;
    }
}

/* step `which` (0..7) of the run into r; own: use own workspaces. 0 = ok */
static int run_step(int which, results *r, int own)
{
    favor_tensor Q = T(g_q, HQ, N, D), K = T(g_k, HKV, N, D), V = T(g_v, HKV, N, DVV);
    favor_tensor G = T(g_dout, HQ, N, DVV);
    opts x;
    int c, st = 0;
    switch (which) {
    case 0: { /* features_init: the same W as the shared map */
        favor_features f;
        if (favor_features_init(&f, FAVOR_POSITIVE, D, M, 0, 77, r->w) != FAVOR_OK) return 1;
        return 0;
    }
    case 1: { /* feature_map, three roles */
        static const favor_role roles[3] = { FAVOR_QUERY, FAVOR_KEY, FAVOR_PLAIN };
        for (c = 0; c < 3; ++c) {
            favor_tensor P = T(r->phi[c], HQ, N, M);
            if (favor_feature_map(&g_fpos, &Q, &P, roles[c]) != FAVOR_OK) return 1;
        }
        return 0;
    }
    case 2: /* softmax, non-causal and causal (with lse) */
        for (c = 0; c < 2; ++c) {
            favor_tensor O = T(r->soft[c], HQ, N, DVV);
            opts_make(&x, c ? FAVOR_CAUSAL : 0u, favor_softmax_attention_workspace(&Q, &K, &V, NULL), own);
            if (c) x.o.lse = r->lse;
            st |= favor_softmax_attention(&Q, &K, &V, &O, &x.o) != FAVOR_OK;
            free(x.mem);
        }
        return st;
    case 3: /* linear: FAVOR+ and elu+1, non-causal and causal */
        for (c = 0; c < 4; ++c) {
            const favor_features *f = c < 2 ? &g_fpos : &g_felu;
            favor_tensor O = T(r->lin[c], HQ, N, DVV);
            opts_make(&x, c % 2 ? FAVOR_CAUSAL : 0u, 0, 0);
            opts_make(&x, x.o.flags, favor_linear_attention_workspace(f, &Q, &K, &V, &x.o), own);
            st |= favor_linear_attention(f, &Q, &K, &V, &O, &x.o) != FAVOR_OK;
            free(x.mem);
        }
        return st;
    case 4: { /* softmax backward, causal, from the forward's lse */
        favor_tensor O = T(r->soft[1], HQ, N, DVV);
        favor_tensor DQ = T(r->sdq, HQ, N, D), DK = T(r->sdk, HKV, N, D), DV = T(r->sdv, HKV, N, DVV);
        float lse[HQ * N];
        opts_make(&x, FAVOR_CAUSAL, 0, 0);
        opts_make(&x, FAVOR_CAUSAL, favor_softmax_attention_backward_workspace(&Q, &K, &V, &x.o), own);
        memcpy(lse, serial.lse, sizeof lse); /* the serial forward's, read-only copy */
        x.o.lse = lse;
        /* out: the serial forward's (shared, read-only) */
        O.data = serial.soft[1];
        st = favor_softmax_attention_backward(&Q, &K, &V, &O, &G, &DQ, &DK, &DV, &x.o) != FAVOR_OK;
        free(x.mem);
        return st;
    }
    case 5: { /* linear backward, FAVOR+, causal */
        favor_tensor DQ = T(r->ldq, HQ, N, D), DK = T(r->ldk, HKV, N, D), DV = T(r->ldv, HKV, N, DVV);
        opts_make(&x, FAVOR_CAUSAL, 0, 0);
        opts_make(&x, FAVOR_CAUSAL, favor_linear_attention_backward_workspace(&g_fpos, &Q, &K, &V, &x.o),
                  own);
        st = favor_linear_attention_backward(&g_fpos, &Q, &K, &V, &G, &DQ, &DK, &DV, &x.o) != FAVOR_OK;
        free(x.mem);
        return st;
    }
    case 6: { /* extend in two blocks, then 10 steps, on a state of our own */
        favor_state s;
        size_t floats = favor_state_floats(&g_fpos, HKV, DVV), split = 61, t;
        favor_tensor q1 = Q, k1 = K, v1 = V, o1 = T(r->ext, HQ, N, DVV);
        if (floats > sizeof r->state / sizeof r->state[0]) return 1;
        if (favor_state_init(&s, &g_fpos, HKV, DVV, r->state) != FAVOR_OK) return 1;
        q1.rows = k1.rows = v1.rows = o1.rows = split;
        opts_make(&x, FAVOR_CAUSAL, favor_linear_extend_workspace(&g_fpos, &s, &q1, &k1, &v1, NULL), own);
        st |= favor_linear_extend(&g_fpos, &s, &q1, &k1, &v1, &o1, &x.o) != FAVOR_OK;
        q1.data = (float *)q1.data + split * D;
        k1.data = (float *)k1.data + split * D;
        v1.data = (float *)v1.data + split * DVV;
        o1.data = (float *)o1.data + split * DVV;
        q1.rows = k1.rows = v1.rows = o1.rows = N - split - 10;
        st |= favor_linear_extend(&g_fpos, &s, &q1, &k1, &v1, &o1, own ? &x.o : NULL) != FAVOR_OK;
        for (t = N - 10; t < N; ++t) {
            favor_tensor qs = Q, ks = K, vs = V, os = T(r->ext, HQ, N, DVV);
            qs.data = (float *)qs.data + t * D;
            ks.data = (float *)ks.data + t * D;
            vs.data = (float *)vs.data + t * DVV;
            os.data = (float *)os.data + t * DVV;
            qs.rows = ks.rows = vs.rows = os.rows = 1;
            st |= favor_linear_step(&g_fpos, &s, &qs, &ks, &vs, &os) != FAVOR_OK;
        }
        free(x.mem);
        return st;
    }
    case 7: /* queries that touch no data: status strings, defaults, sizes */
        st |= strncmp(favor_status_string(FAVOR_E_SHAPE), "FAVOR_E_SHAPE", 13) != 0;
        st |= favor_set_backend(NULL) != FAVOR_OK; /* the same choice, stored again */
        st |= favor_features_width(&g_fpos) != M;
        st |= favor_state_floats(&g_felu, HKV, DVV) == 0;
        return st;
    }
    return 1;
}

#define NSTEPS 8

static int run_all(int rot, results *r, int own)
{
    int s, st = 0;
    for (s = 0; s < NSTEPS; ++s) st |= run_step((s + rot) % NSTEPS, r, own);
    return st;
}

static int same(const char *what, const void *a, const void *b, size_t bytes, job *j)
{
    if (memcmp(a, b, bytes) == 0) return 1;
    snprintf(j->msg, sizeof j->msg, "thread %d: %s differs from the serial result", j->index, what);
    return 0;
}

static int compare(const results *r, job *j)
{
    const results *s = &serial;
    return same("features_init W", r->w, s->w, sizeof r->w, j) &&
           same("W vs the shared map", r->w, g_wpos, sizeof r->w, j) &&
           same("feature_map", r->phi, s->phi, sizeof r->phi, j) &&
           same("softmax", r->soft, s->soft, sizeof r->soft, j) &&
           same("softmax lse", r->lse, s->lse, sizeof r->lse, j) &&
           same("linear attention", r->lin, s->lin, sizeof r->lin, j) &&
           same("softmax backward dq", r->sdq, s->sdq, sizeof r->sdq, j) &&
           same("softmax backward dk", r->sdk, s->sdk, sizeof r->sdk, j) &&
           same("softmax backward dv", r->sdv, s->sdv, sizeof r->sdv, j) &&
           same("linear backward dq", r->ldq, s->ldq, sizeof r->ldq, j) &&
           same("linear backward dk", r->ldk, s->ldk, sizeof r->ldk, j) &&
           same("linear backward dv", r->ldv, s->ldv, sizeof r->ldv, j) &&
           same("extend/step output", r->ext, s->ext, sizeof r->ext, j) &&
           same("extend/step state", r->state, s->state, sizeof r->state, j);
}

/* every worker waits here until all are created, so their calls overlap */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open;

static void gate_wait(void)
{
    pthread_mutex_lock(&gate_mu);
    while (!gate_open) pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
}

static void gate_release(void)
{
    pthread_mutex_lock(&gate_mu);
    gate_open = 1;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

/* the program's first call into favor.h, from every thread at once (the main
   thread makes none before): favor_set_backend(NULL) or favor_backend() */
typedef struct {
    int set;          /* call favor_set_backend(NULL) first               */
    const char *name; /* then favor_backend(); NULL when set_backend failed */
} first;

static void *first_call(void *arg)
{
    first *f = (first *)arg;
    gate_wait();
    f->name = f->set && favor_set_backend(NULL) != FAVOR_OK ? NULL : favor_backend();
    return NULL;
}

static void *worker(void *arg)
{
    job *j = (job *)arg;
    int rep;
    gate_wait();
    for (rep = 0; rep < REPS && !j->fails; ++rep) {
        int own = (rep + j->index) % 2;
        memset(j->r, 0xff, sizeof *j->r); /* NaN everywhere: a skipped write shows */
        memset(j->r->state, 0, sizeof j->r->state);
        if (run_all(j->index + rep, j->r, own) != 0) {
            snprintf(j->msg, sizeof j->msg, "thread %d: a call failed (rep %d)", j->index, rep);
            j->fails = 1;
        } else if (!compare(j->r, j)) {
            j->fails = 1;
        }
    }
    return NULL;
}

int main(void)
{
    pthread_t th[NTHREADS];
    job jobs[NTHREADS];
    first firsts[NTHREADS];
    size_t i;
    int t, fails = 0;
    float wel[1];
    for (t = 0; t < NTHREADS; ++t) {
        firsts[t].set = t % 2;
        if (pthread_create(&th[t], NULL, first_call, &firsts[t]) != 0) {
            fprintf(stderr, "cannot start thread %d\n", t);
            return 1;
        }
    }
    gate_release();
    for (t = 0; t < NTHREADS; ++t) pthread_join(th[t], NULL);
    gate_open = 0; /* (every thread joined) closed again for the workers */
    for (t = 0; t < NTHREADS; ++t)
        if (!firsts[t].name || strcmp(firsts[t].name, favor_backend()) != 0) {
            fprintf(stderr, "first calls: thread %d got backend %s, then %s\n", t,
                    firsts[t].name ? firsts[t].name : "(favor_set_backend failed)", favor_backend());
            return 1;
        }
    for (i = 0; i < sizeof g_q / sizeof g_q[0]; ++i) g_q[i] = rnd();
    for (i = 0; i < sizeof g_k / sizeof g_k[0]; ++i) g_k[i] = rnd();
    for (i = 0; i < sizeof g_v / sizeof g_v[0]; ++i) g_v[i] = rnd();
    for (i = 0; i < sizeof g_dout / sizeof g_dout[0]; ++i) g_dout[i] = rnd();
    if (favor_features_floats(FAVOR_POSITIVE, D, M) != sizeof g_wpos / sizeof g_wpos[0] ||
        favor_features_init(&g_fpos, FAVOR_POSITIVE, D, M, 0, 77, g_wpos) != FAVOR_OK ||
        favor_features_init(&g_felu, FAVOR_ELU1, D, D, 0, 0, wel) != FAVOR_OK) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    /* the serial results (the softmax backward reads serial.soft[1] and
       serial.lse, so the forward goes first) */
    memset(serial.state, 0, sizeof serial.state);
    for (t = 0; t < NSTEPS; ++t)
        if (run_step(t, &serial, 1) != 0) {
            fprintf(stderr, "serial step %d failed\n", t);
            return 1;
        }
    for (t = 0; t < NTHREADS; ++t) {
        jobs[t].index = t;
        jobs[t].fails = 0;
        jobs[t].msg[0] = 0;
        jobs[t].r = (results *)malloc(sizeof(results));
        if (!jobs[t].r || pthread_create(&th[t], NULL, worker, &jobs[t]) != 0) {
            fprintf(stderr, "cannot start thread %d\n", t);
            return 1;
        }
    }
    gate_release();
    for (t = 0; t < NTHREADS; ++t) {
        pthread_join(th[t], NULL);
        if (jobs[t].fails) {
            fprintf(stderr, "%s\n", jobs[t].msg);
            ++fails;
        }
        free(jobs[t].r);
    }
#ifdef FAVOR_DISPATCH
    printf("concurrent (FAVOR_DISPATCH, %s backend): ", favor_backend());
#else
    printf("concurrent (%s backend): ", favor_backend());
#endif
    printf("%d threads x %d runs of every entry point: %s\n", NTHREADS, REPS,
           fails ? "MISMATCH" : "bit-identical to the serial run");
    return fails ? 1 : 0;
}
