/* favor_train: train a small attention model in plain C with favor.h's forward
 * and backward passes, on a task that cannot be solved without attention.
 *
 * THE TASK (associative recall, a query at every position). Each sequence has n
 * positions and its own random dictionary map: {0..K-1} -> {0..V-1} (K keys, V
 * values). Position t stores a pair (key k_t, value map[k_t]), k_t uniform, and
 * holds a query key q_t, the key of a random position j (any j; j <= t with
 * --causal, so the answer is always visible). The target at t is map[q_t].
 * The dictionary is new in every sequence, so the answer can only be found by
 * attending from q_t to the positions whose key is q_t and reading their value.
 * With the defaults (n = 256, K = 128, V = 64) a key occurs about twice in a
 * sequence, chance is 1/64, and counting the values in the sequence (attention
 * without matching keys) gives a few percent. Every position is scored.
 *
 * THE MODEL. Position t is embedded as Ek[k_t] + Ev[map[k_t]] + Eq[q_t]
 * (d_model wide, no positional embedding: the task does not need one). Then one
 * or two residual attention layers, x <- x + Attn(x Wq, x Wk, x Wv) Wo, the
 * heads side by side in d_model (heads x head size = d_model), and a linear
 * read-out to V logits, with a softmax cross-entropy at every position and Adam.
 * Attention is one of:
 *     softmax   exact, favor_softmax_attention; the forward saves its
 *               log-sum-exp (favor_options.lse) for the backward
 *     elu       elu(x)+1 linear attention, FAVOR_ELU1
 *     favor     FAVOR+, m positive orthogonal random features, FAVOR_POSITIVE;
 *               one W per layer, a constant. --redraw R draws a new W every R
 *               steps, Performer-style; here it costs accuracy (the model fits
 *               its W: ~88% held out falls to ~30% after a redraw, and recovers
 *               in ~50 steps)
 * --gates (causal linear attention) adds learned per-token gates per head,
 * g_t = log sigmoid(x_t . wg_h + bg_h) (bg starting at 4: gates near 1), passed
 * as opts.gates and trained through the backward's dL/dg (opts.dgates); the
 * last line then shows the mean and least exp(g) on held-out data. Recall needs
 * the whole past, and the model learns to keep the gates near 1 (mean 0.9997).
 * The attention gradients come from favor_softmax_attention_backward and
 * favor_linear_attention_backward; the rest of the backward (embedding,
 * projections, residual, read-out, cross-entropy) is written out below.
 *
 * THREADS AND MEMORY. A step splits the batch's sequences over the threads
 * (OpenMP, --threads); each sequence's forward and backward run on one thread
 * (favor calls with threads = 1, each thread on its own slice of one workspace,
 * whose size is queried once) and writes its own gradient, and the gradients are
 * summed in sequence order: a build's runs are deterministic given --seed,
 * whatever the thread count. Everything is allocated before the first step; a step allocates
 * nothing. Training and held-out sequences come from different random streams.
 *
 * RUNNING. Built by CMake as build/favor_train (FAVOR_DISPATCH, OpenMP if found).
 * On 2 AVX2 cores a step of the defaults takes about 15 ms (softmax, FAVOR+)
 * or 10 ms (elu) when the machine is otherwise idle:
 *     ./build/favor_train                    FAVOR+, m = 128: 99.8% in ~15-25 s
 *     ./build/favor_train --method softmax --steps 300             99.9%, ~5 s
 *     ./build/favor_train --method elu       loss 4.5 -> 1.2, 70% held out, ~8 s
 *     ./build/favor_train --features 64      FAVOR+ with fewer features: ~83%
 *     ./build/favor_train --causal --layers 2 --threads 1
 * Every --log steps a line shows the step, the mean training loss and accuracy
 * since the previous line, the accuracy on the held-out sequences and the
 * elapsed wall time; the last line sums up. --help lists every option.
 * Exit status: 0; 1 when a loss is not finite or, with --check, when the mean
 * loss of the last --log steps is not below the loss of the first step; 2 for a
 * bad command line. */
#define _POSIX_C_SOURCE 199309L

#define FAVOR_IMPLEMENTATION
#include "favor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#define PARALLEL_FOR _Pragma("omp parallel for schedule(dynamic, 1)")
#define THREAD_ID() ((size_t)omp_get_thread_num())
#define MAX_THREADS() ((size_t)omp_get_max_threads())
#else
#define PARALLEL_FOR
#define THREAD_ID() ((size_t)0)
#define MAX_THREADS() ((size_t)1)
#endif

enum { SOFTMAX, ELU, FAVORP };
static const char *const method_names[] = {"softmax", "elu", "favor"};

typedef struct {
    int method, layers, causal, check, threads, gates;
    size_t features, steps, n, batch, dmodel, heads, keys, values, eval, log, redraw;
    double lr;
    unsigned long long seed;
} config;

/* ---- helpers: time, random numbers, allocation, errors ---------------------- */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static unsigned long long rng_next(unsigned long long *s) /* splitmix64 */
{
    unsigned long long z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t rng_below(unsigned long long *s, size_t n) { return (size_t)(rng_next(s) % n); }

static void fill_normal(float *x, size_t count, double sigma, unsigned long long *s)
{
    size_t i;
    for (i = 0; i < count; ++i) { /* Box-Muller */
        double u1 = ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
        double u2 = (double)(rng_next(s) >> 11) / 9007199254740992.0;
        x[i] = (float)(sigma * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
}

static void check(favor_status st, const char *what)
{
    if (st != FAVOR_OK) {
        fprintf(stderr, "favor_train: %s failed: %s\n", what, favor_status_string(st));
        exit(1);
    }
}

/* ---- dense kernels ------------------------------------------------------------
 * One building block: c = (acc ? c : 0) + sum_p a[p*as] B[p][.], a (strided)
 * vector times a k x m matrix with row stride bs. Columns go in blocks of 16,
 * with four partial sums in registers: loops of constant length, which gcc and
 * clang vectorize at -O2. */
static void vecmat(size_t k, size_t m, const float *a, size_t as, const float *B, size_t bs,
                   float *c, int acc)
{
    size_t p, j, u;
    for (j = 0; j + 16 <= m; j += 16) {
        float t0[16], t1[16], t2[16], t3[16];
        for (u = 0; u < 16; ++u) t0[u] = t1[u] = t2[u] = t3[u] = 0.0f;
        for (p = 0; p + 4 <= k; p += 4) {
            const float *b = B + p * bs + j;
            float s0 = a[p * as], s1 = a[(p + 1) * as], s2 = a[(p + 2) * as],
                  s3 = a[(p + 3) * as];
            for (u = 0; u < 16; ++u) {
                t0[u] += s0 * b[u];
                t1[u] += s1 * b[bs + u];
                t2[u] += s2 * b[2 * bs + u];
                t3[u] += s3 * b[3 * bs + u];
            }
        }
        for (; p < k; ++p)
            for (u = 0; u < 16; ++u) t0[u] += a[p * as] * B[p * bs + j + u];
        for (u = 0; u < 16; ++u)
            c[j + u] = (acc ? c[j + u] : 0.0f) + ((t0[u] + t1[u]) + (t2[u] + t3[u]));
    }
    for (; j < m; ++j) {
        float t = 0.0f;
        for (p = 0; p < k; ++p) t += a[p * as] * B[p * bs + j];
        c[j] = (acc ? c[j] : 0.0f) + t;
    }
}

/* C[n][m] = (acc ? C : 0) + A[n][k] B[k][m] */
static void gemm(size_t n, size_t k, size_t m, const float *A, const float *B, float *C, int acc)
{
    size_t i;
    for (i = 0; i < n; ++i) vecmat(k, m, A + i * k, 1, B, m, C + i * m, acc);
}

/* G[k][m] = A[n][k]^T D[n][m]: a weight's gradient from its input A and the
 * gradient D of its output */
static void gemm_tn(size_t n, size_t k, size_t m, const float *A, const float *D, float *G)
{
    size_t p;
    for (p = 0; p < k; ++p) vecmat(n, m, A + p, k, D, m, G + p * m, 0);
}

static void transpose(size_t r, size_t c, const float *X, float *T) /* T = X^T, X r x c */
{
    size_t i, j;
    for (i = 0; i < r; ++i)
        for (j = 0; j < c; ++j) T[j * r + i] = X[i * c + j];
}

/* ---- parameters: one array, with named pieces ----------------------------------*/

typedef struct {
    float *ek, *ev, *eq; /* embeddings: K x D, V x D, K x D        */
    float *w[2][4];      /* per layer Wq, Wk, Wv, Wo, each D x D   */
    float *wr, *br;      /* read-out: D x V and V                  */
    float *wg[2], *bg[2]; /* --gates: per layer D x H and H        */
} params;

static size_t param_count(const config *c)
{
    size_t d = c->dmodel;
    return (2 * c->keys + c->values) * d + (size_t)c->layers * 4 * d * d + d * c->values +
           c->values + (c->gates ? (size_t)c->layers * (d + 1) * c->heads : 0);
}

static void bind(params *p, float *base, const config *c)
{
    size_t d = c->dmodel;
    int l, i;
    p->ek = base;
    p->ev = p->ek + c->keys * d;
    p->eq = p->ev + c->values * d;
    base = p->eq + c->keys * d;
    for (l = 0; l < 2; ++l)
        for (i = 0; i < 4; ++i) {
            p->w[l][i] = l < c->layers ? base : NULL;
            if (l < c->layers) base += d * d;
        }
    p->wr = base;
    p->br = p->wr + d * c->values;
    base = p->br + c->values;
    for (l = 0; l < 2; ++l) {
        p->wg[l] = c->gates && l < c->layers ? base : NULL;
        p->bg[l] = c->gates && l < c->layers ? base + d * c->heads : NULL;
        if (p->wg[l]) base += (d + 1) * c->heads;
    }
}

/* ---- the model ------------------------------------------------------------------*/

typedef struct {
    config c;
    size_t np;                     /* parameter count                               */
    float *theta, *grad, *m1, *m2; /* parameters, gradient, Adam moments            */
    float *seq_grad;               /* batch x np: the gradient of each sequence     */
    float *theta_t;                /* the weight matrices transposed (backward)     */
    params p, pt;                  /* views of theta and theta_t                    */
    favor_features f[2];           /* the feature map of each layer (elu, favor)    */
    float *fstore[2];
    favor_options opt;             /* flags; threads = 1 (threads split sequences)  */
    char *ws;                      /* workspace: one slice of ws_slice per thread   */
    size_t ws_slice;
    /* the batch: rows = batch x n, sequence b in rows b*n .. b*n + n-1 */
    int *key, *val, *qry, *tgt;
    float *x[3];                   /* inputs of the layers; x[layers]: of read-out  */
    float *q[2], *k[2], *v[2], *a[2], *lse[2];
    float *g[2], *om[2], *dg;      /* --gates: log-gates, 1 - sigmoid, dL/dg (H x n
                                      per sequence)                                 */
    float *logits;                 /* rows x V: probabilities after the forward     */
    float *dx, *da, *dqkv[3];      /* backward: rows x D each                       */
    double *loss;                  /* per sequence: summed cross-entropy            */
    size_t *correct;               /* per sequence: correct argmax predictions      */
    void *blocks[48];              /* every allocation, for model_free()            */
    size_t nblocks;
} model;

/* zeroed memory, recorded in M->blocks; exits when there is none */
static void *xcalloc(model *M, size_t count, size_t size)
{
    void *p = M->nblocks < 48 ? calloc(count ? count : 1, size) : NULL;
    if (!p) {
        fprintf(stderr, "favor_train: out of memory\n");
        exit(1);
    }
    return M->blocks[M->nblocks++] = p;
}

static float *floats(model *M, size_t count) { return (float *)xcalloc(M, count, sizeof(float)); }

/* favor's view of sequence b of a rows x D buffer: heads side by side in a row */
static favor_tensor heads_view(const model *M, float *buf, size_t b)
{
    favor_tensor t;
    memset(&t, 0, sizeof t); /* batch 0: one element */
    t.heads = M->c.heads;
    t.rows = M->c.n;
    t.cols = M->c.dmodel / M->c.heads;
    t.head_stride = t.cols;
    t.row_stride = M->c.dmodel;
    t.dtype = FAVOR_F32;
    t.data = buf + b * M->c.n * M->c.dmodel;
    return t;
}

static void model_init(model *M, const config *c)
{
    size_t d = c->dmodel, rows = c->batch * c->n, dh = d / c->heads, w;
    unsigned long long s = c->seed * 0x2545f4914f6cdd1dull + 1;
    favor_tensor t;
    int l, i;
    memset(M, 0, sizeof *M);
    M->c = *c;
    M->np = param_count(c);
    M->theta = floats(M, M->np);
    M->grad = floats(M, M->np);
    M->m1 = floats(M, M->np);
    M->m2 = floats(M, M->np);
    M->seq_grad = floats(M, c->batch * M->np);
    M->theta_t = floats(M, M->np);
    bind(&M->p, M->theta, c);
    bind(&M->pt, M->theta_t, c);
    /* x = three embeddings ~ N(0, 0.75) per coordinate; the projections keep that
     * scale, so the initial scores q.k / sqrt(head size) are about N(0, 0.6) */
    fill_normal(M->p.ek, (2 * c->keys + c->values) * d, 0.5, &s);
    for (l = 0; l < c->layers; ++l)
        for (i = 0; i < 4; ++i) fill_normal(M->p.w[l][i], d * d, 1.0 / sqrt((double)d), &s);
    fill_normal(M->p.wr, d * c->values, 1.0 / sqrt((double)d), &s);
    for (l = 0; c->gates && l < c->layers; ++l) { /* gates start near 1: sigmoid(4) */
        fill_normal(M->p.wg[l], d * c->heads, 0.01, &s);
        for (i = 0; i < (int)c->heads; ++i) M->p.bg[l][i] = 4.0f;
    }

    M->key = (int *)xcalloc(M, rows, sizeof(int));
    M->val = (int *)xcalloc(M, rows, sizeof(int));
    M->qry = (int *)xcalloc(M, rows, sizeof(int));
    M->tgt = (int *)xcalloc(M, rows, sizeof(int));
    for (l = 0; l <= c->layers; ++l) M->x[l] = floats(M, rows * d);
    for (l = 0; l < c->layers; ++l) {
        M->q[l] = floats(M, rows * d);
        M->k[l] = floats(M, rows * d);
        M->v[l] = floats(M, rows * d);
        M->a[l] = floats(M, rows * d);
        M->lse[l] = floats(M, c->batch * c->heads * c->n);
        if (c->gates) {
            M->g[l] = floats(M, c->batch * c->heads * c->n);
            M->om[l] = floats(M, c->batch * c->heads * c->n);
        }
    }
    if (c->gates) M->dg = floats(M, c->batch * c->heads * c->n);
    M->logits = floats(M, rows * c->values);
    M->dx = floats(M, rows * d);
    M->da = floats(M, rows * d);
    for (i = 0; i < 3; ++i) M->dqkv[i] = floats(M, rows * d);
    M->loss = (double *)xcalloc(M, c->batch, sizeof(double));
    M->correct = (size_t *)xcalloc(M, c->batch, sizeof(size_t));

    for (l = 0; l < c->layers && c->method != SOFTMAX; ++l) { /* one W per layer */
        favor_kernel kern = c->method == FAVORP ? FAVOR_POSITIVE : FAVOR_ELU1;
        size_t m = c->method == FAVORP ? c->features : dh;
        M->fstore[l] = floats(M, favor_features_floats(kern, dh, m));
        check(favor_features_init(&M->f[l], kern, dh, m, 0, c->seed + 1000u * (unsigned)(l + 1),
                                  kern == FAVOR_ELU1 ? NULL : M->fstore[l]),
              "favor_features_init");
    }

    /* the workspace: per thread, the largest of the forward's and backward's */
    M->opt = favor_default_options();
    M->opt.flags = c->causal ? FAVOR_CAUSAL : 0u;
    M->opt.threads = 1;
    t = heads_view(M, M->x[0], 0);
    if (c->method == SOFTMAX) {
        M->ws_slice = favor_softmax_attention_workspace(&t, &t, &t, &M->opt);
        w = favor_softmax_attention_backward_workspace(&t, &t, &t, &M->opt);
    } else {
        M->ws_slice = favor_linear_attention_workspace(&M->f[0], &t, &t, &t, &M->opt);
        w = favor_linear_attention_backward_workspace(&M->f[0], &t, &t, &t, &M->opt);
    }
    if (w > M->ws_slice) M->ws_slice = w;
    if (!M->ws_slice) check(FAVOR_E_OVERFLOW, "the workspace query");
    M->ws = (char *)xcalloc(M, MAX_THREADS(), M->ws_slice);
}

static void model_free(model *M)
{
    while (M->nblocks) free(M->blocks[--M->nblocks]);
}

/* nb sequences of the task into the token arrays */
static void make_batch(model *M, size_t nb, unsigned long long *s)
{
    size_t map[4096], b, t, n = M->c.n;
    for (b = 0; b < nb; ++b) {
        int *key = M->key + b * n, *val = M->val + b * n, *qry = M->qry + b * n,
            *tgt = M->tgt + b * n;
        for (t = 0; t < M->c.keys; ++t) map[t] = rng_below(s, M->c.values);
        for (t = 0; t < n; ++t) {
            key[t] = (int)rng_below(s, M->c.keys);
            val[t] = (int)map[key[t]];
        }
        for (t = 0; t < n; ++t) {
            qry[t] = key[rng_below(s, M->c.causal ? t + 1 : n)];
            tgt[t] = (int)map[qry[t]];
        }
    }
}

/* the options of one favor call: this thread's workspace slice, and the
 * log-sum-exp rows of (layer l, sequence b) for softmax */
static favor_options call_options(const model *M, int l, size_t b)
{
    favor_options o = M->opt;
    o.workspace = M->ws + THREAD_ID() * M->ws_slice;
    o.workspace_size = M->ws_slice;
    if (M->c.method == SOFTMAX) o.lse = M->lse[l] + b * M->c.heads * M->c.n;
    return o;
}

/* favor's view [heads][n][1] of sequence b's per-head, per-position floats */
static favor_tensor gate_view(const model *M, float *buf, size_t b)
{
    favor_tensor t = favor_tensor_packed(buf + b * M->c.heads * M->c.n, M->c.heads, M->c.n, 1);
    return t;
}

/* --gates: the log-gates g[h][t] = log sigmoid(x_t . wg_h + bg_h) of layer l,
 * sequence b (x its rows), and 1 - sigmoid (their derivative) for the backward */
static void make_gates(model *M, int l, size_t b, const float *x)
{
    size_t n = M->c.n, d = M->c.dmodel, H = M->c.heads, t, h, j;
    float *g = M->g[l] + b * H * n, *om = M->om[l] + b * H * n;
    for (t = 0; t < n; ++t)
        for (h = 0; h < H; ++h) {
            double pre = M->p.bg[l][h];
            for (j = 0; j < d; ++j) pre += (double)x[t * d + j] * M->p.wg[l][j * H + h];
            /* log sigmoid and 1 - sigmoid without cancellation */
            g[h * n + t] = (float)(pre >= 0 ? -log1p(exp(-pre)) : pre - log1p(exp(pre)));
            om[h * n + t] = (float)(pre >= 0 ? exp(-pre) / (1 + exp(-pre)) : 1 / (1 + exp(pre)));
        }
}

/* Forward pass of sequence b: M->loss[b] and M->correct[b], and the
 * probabilities in its rows of M->logits. */
static void forward(model *M, size_t b)
{
    const config *c = &M->c;
    size_t n = c->n, d = c->dmodel, V = c->values, r0 = b * n, r, j;
    int l;
    M->loss[b] = 0;
    M->correct[b] = 0;
    for (r = r0; r < r0 + n; ++r) { /* embedding */
        const float *ek = M->p.ek + (size_t)M->key[r] * d, *ev = M->p.ev + (size_t)M->val[r] * d,
                    *eq = M->p.eq + (size_t)M->qry[r] * d;
        float *x = M->x[0] + r * d;
        for (j = 0; j < d; ++j) x[j] = ek[j] + ev[j] + eq[j];
    }
    for (l = 0; l < c->layers; ++l) {
        float *const *w = M->p.w[l], *x = M->x[l] + r0 * d, *y = M->x[l + 1] + r0 * d;
        favor_tensor Q = heads_view(M, M->q[l], b), K = heads_view(M, M->k[l], b),
                     Vt = heads_view(M, M->v[l], b), A = heads_view(M, M->a[l], b);
        favor_options o = call_options(M, l, b);
        favor_tensor Gt = c->gates ? gate_view(M, M->g[l], b) : Q;
        if (c->gates) {
            make_gates(M, l, b, x);
            o.gates = &Gt;
        }
        gemm(n, d, d, x, w[0], Q.data, 0);
        gemm(n, d, d, x, w[1], K.data, 0);
        gemm(n, d, d, x, w[2], Vt.data, 0);
        if (c->method == SOFTMAX)
            check(favor_softmax_attention(&Q, &K, &Vt, &A, &o), "favor_softmax_attention");
        else
            check(favor_linear_attention(&M->f[l], &Q, &K, &Vt, &A, &o), "favor_linear_attention");
        memcpy(y, x, n * d * sizeof *y); /* residual: y = x + A Wo */
        gemm(n, d, d, A.data, w[3], y, 1);
    }
    gemm(n, d, V, M->x[c->layers] + r0 * d, M->p.wr, M->logits + r0 * V, 0); /* read-out */
    for (r = r0; r < r0 + n; ++r) { /* softmax cross-entropy */
        float *z = M->logits + r * V, mx;
        size_t arg = 0;
        double sum = 0;
        for (j = 0; j < V; ++j) z[j] += M->p.br[j];
        for (mx = z[0], j = 1; j < V; ++j)
            if (z[j] > mx) {
                mx = z[j];
                arg = j;
            }
        for (j = 0; j < V; ++j) sum += (z[j] = expf(z[j] - mx));
        for (j = 0; j < V; ++j) z[j] = (float)(z[j] / sum);
        M->loss[b] -= log((double)z[M->tgt[r]] + 1e-30);
        M->correct[b] += arg == (size_t)M->tgt[r];
    }
}

/* Backward pass of sequence b after its forward(): the gradient of its summed
 * cross-entropy, times `scale`, into its slice of M->seq_grad. Needs the
 * transposed weights in M->pt. */
static void backward(model *M, size_t b, float scale)
{
    const config *c = &M->c;
    size_t n = c->n, d = c->dmodel, V = c->values, r0 = b * n, r, j;
    float *dz = M->logits + r0 * V, *dx = M->dx + r0 * d, *da = M->da + r0 * d;
    params g;
    int l, i;
    bind(&g, M->seq_grad + b * M->np, c);
    for (r = 0; r < n; ++r) { /* dlogits = scale (p - onehot), in place */
        dz[r * V + (size_t)M->tgt[r0 + r]] -= 1.0f;
        for (j = 0; j < V; ++j) dz[r * V + j] *= scale;
    }
    gemm_tn(n, d, V, M->x[c->layers] + r0 * d, dz, g.wr);
    for (j = 0; j < V; ++j)
        for (g.br[j] = 0, r = 0; r < n; ++r) g.br[j] += dz[r * V + j];
    gemm(n, V, d, dz, M->pt.wr, dx, 0); /* dx = dL/dx[layers] */

    for (l = c->layers - 1; l >= 0; --l) {
        float *x = M->x[l] + r0 * d;
        favor_tensor Q = heads_view(M, M->q[l], b), K = heads_view(M, M->k[l], b),
                     Vt = heads_view(M, M->v[l], b), A = heads_view(M, M->a[l], b),
                     dA = heads_view(M, M->da, b), dQ = heads_view(M, M->dqkv[0], b),
                     dK = heads_view(M, M->dqkv[1], b), dV = heads_view(M, M->dqkv[2], b);
        favor_options o = call_options(M, l, b);
        favor_tensor Gt = c->gates ? gate_view(M, M->g[l], b) : Q,
                     dG = c->gates ? gate_view(M, M->dg, b) : Q;
        if (c->gates) {
            o.gates = &Gt;
            o.dgates = &dG;
        }
        /* y = x + A Wo: dx passes through the residual; dWo = A^T dy, dA = dy Wo^T */
        gemm_tn(n, d, d, A.data, dx, g.w[l][3]);
        gemm(n, d, d, dx, M->pt.w[l][3], da, 0);
        if (c->method == SOFTMAX)
            check(favor_softmax_attention_backward(&Q, &K, &Vt, &A, &dA, &dQ, &dK, &dV, &o),
                  "favor_softmax_attention_backward");
        else
            check(favor_linear_attention_backward(&M->f[l], &Q, &K, &Vt, &dA, &dQ, &dK, &dV, &o),
                  "favor_linear_attention_backward");
        for (i = 0; i < 3; ++i) { /* Q, K, V = x Wq, x Wk, x Wv */
            float *dy = M->dqkv[i] + r0 * d;
            gemm_tn(n, d, d, x, dy, g.w[l][i]);
            gemm(n, d, d, dy, M->pt.w[l][i], dx, 1);
        }
        if (c->gates) { /* g = log sigmoid(pre): dpre = dg (1 - sigmoid(pre)) */
            size_t H = c->heads, t, h;
            const float *dgs = (const float *)dG.data, *om = M->om[l] + b * H * n;
            memset(g.wg[l], 0, (d + 1) * H * sizeof(float));
            for (t = 0; t < n; ++t)
                for (h = 0; h < H; ++h) {
                    float dp = dgs[h * n + t] * om[h * n + t];
                    g.bg[l][h] += dp;
                    for (j = 0; j < d; ++j) {
                        g.wg[l][j * H + h] += x[t * d + j] * dp;
                        dx[t * d + j] += M->p.wg[l][j * H + h] * dp;
                    }
                }
        }
    }
    memset(g.ek, 0, (2 * c->keys + V) * d * sizeof(float)); /* embeddings */
    for (r = 0; r < n; ++r) {
        const float *dxr = dx + r * d;
        float *gk = g.ek + (size_t)M->key[r0 + r] * d, *gv = g.ev + (size_t)M->val[r0 + r] * d,
              *gq = g.eq + (size_t)M->qry[r0 + r] * d;
        for (j = 0; j < d; ++j) {
            gk[j] += dxr[j];
            gv[j] += dxr[j];
            gq[j] += dxr[j];
        }
    }
}

/* One training step on the batch in the token arrays: forward and backward of
 * every sequence (split over the threads), their gradients summed in order into
 * M->grad. Returns the mean loss; adds the correct predictions to *correct. */
static double train_step(model *M, size_t *correct)
{
    const config *c = &M->c;
    size_t B = c->batch, b, i;
    float scale = 1.0f / (float)(B * c->n);
    double loss = 0;
    long s;
    int l;
    for (l = 0; l < c->layers; ++l)
        for (i = 0; i < 4; ++i) transpose(c->dmodel, c->dmodel, M->p.w[l][i], M->pt.w[l][i]);
    transpose(c->dmodel, c->values, M->p.wr, M->pt.wr);
    PARALLEL_FOR
    for (s = 0; s < (long)B; ++s) {
        forward(M, (size_t)s);
        backward(M, (size_t)s, scale);
    }
    memcpy(M->grad, M->seq_grad, M->np * sizeof(float));
    for (b = 1; b < B; ++b)
        for (i = 0; i < M->np; ++i) M->grad[i] += M->seq_grad[b * M->np + i];
    for (b = 0; b < B; ++b) {
        loss += M->loss[b];
        *correct += M->correct[b];
    }
    return loss * (double)scale;
}

static void adam(model *M, size_t step, double lr)
{
    const double b1 = 0.9, b2 = 0.999;
    double c1 = 1.0 - pow(b1, (double)step), c2 = 1.0 - pow(b2, (double)step);
    size_t i;
    for (i = 0; i < M->np; ++i) {
        double g = M->grad[i];
        M->m1[i] = (float)(b1 * M->m1[i] + (1 - b1) * g);
        M->m2[i] = (float)(b2 * M->m2[i] + (1 - b2) * g * g);
        M->theta[i] -= (float)(lr * (M->m1[i] / c1) / (sqrt(M->m2[i] / c2) + 1e-8));
    }
}

/* accuracy and mean loss on the held-out sequences (the same ones every time,
 * from their own random stream) */
static double evaluate(model *M, double *loss)
{
    unsigned long long s = M->c.seed ^ 0x5eedf00dcafe1234ull;
    size_t done, correct = 0, b;
    double sum = 0;
    for (done = 0; done < M->c.eval; done += M->c.batch) {
        size_t nb = M->c.eval - done < M->c.batch ? M->c.eval - done : M->c.batch;
        long t;
        make_batch(M, nb, &s);
        PARALLEL_FOR
        for (t = 0; t < (long)nb; ++t) forward(M, (size_t)t);
        for (b = 0; b < nb; ++b) {
            sum += M->loss[b];
            correct += M->correct[b];
        }
    }
    *loss = sum / (double)(M->c.eval * M->c.n);
    return (double)correct / (double)(M->c.eval * M->c.n);
}

/* ---- command line ---------------------------------------------------------------*/

static void usage(FILE *to)
{
    fprintf(to,
        "usage: favor_train [options]\n"
        "Trains embedding + attention + read-out on associative recall (see the top\n"
        "of examples/favor_train.c) and prints loss and accuracy as it goes.\n"
        "  --method softmax|elu|favor  attention                    default favor\n"
        "  --features M   FAVOR+ random features                    default 128\n"
        "  --steps S      training steps                            default 800\n"
        "  --seq N        positions per sequence                    default 256\n"
        "  --layers L     attention layers, 1 or 2                  default 1\n"
        "  --batch B      sequences per step                        default 8\n"
        "  --dmodel D     model width                               default 64\n"
        "  --heads H      heads (head size D/H)                     default 2\n"
        "  --keys K       key vocabulary (at most 4096)             default 128\n"
        "  --values V     value vocabulary                          default 64\n"
        "  --lr X         Adam learning rate (warm-up, linear decay) default 0.01\n"
        "  --redraw R     redraw FAVOR+'s W every R steps, 0: never default 0\n"
        "  --eval E       held-out sequences                        default 64\n"
        "  --log L        print a line every L steps                default 50\n"
        "  --threads T    threads, 0: OpenMP's default              default 0\n"
        "  --seed S       seed of the data, the weights and W       default 1\n"
        "  --causal       causal attention (a query sees positions <= its own)\n"
        "  --gates        learned per-token gates (elu, favor; with --causal):\n"
        "                 log sigmoid(x Wg + bg) per head, trained through dL/dg\n"
        "  --check        exit 1 unless the loss fell (for smoke tests)\n");
}

static int parse_args(int argc, char **argv, config *c)
{
    /* the integer options, and their defaults */
    static const char *const names[] = {"--features", "--steps", "--seq",    "--layers",
                                        "--batch",    "--dmodel", "--heads", "--keys",
                                        "--values",   "--redraw", "--eval",  "--log",
                                        "--threads",  "--seed"};
    unsigned long long v[] = {128, 800, 256, 1, 8, 64, 2, 128, 64, 0, 64, 50, 0, 1};
    int i, k;
    c->method = FAVORP;
    c->lr = 0.01;
    c->causal = c->check = c->gates = 0;
    for (i = 1; i < argc; ++i) {
        const char *o = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(o, "--causal")) {
            c->causal = 1;
        } else if (!strcmp(o, "--check")) {
            c->check = 1;
        } else if (!strcmp(o, "--gates")) {
            c->gates = 1;
        } else if (!strcmp(o, "--method") && val) {
            for (c->method = 0; c->method < 3; ++c->method)
                if (!strcmp(val, method_names[c->method])) break;
            if (c->method == 3) {
                fprintf(stderr, "favor_train: --method is softmax, elu or favor\n");
                return 0;
            }
            ++i;
        } else if (!strcmp(o, "--lr") && val) {
            c->lr = strtod(val, &end);
            if (end == val || *end || !(c->lr > 0 && c->lr < 1)) {
                fprintf(stderr, "favor_train: --lr needs a number in (0, 1)\n");
                return 0;
            }
            ++i;
        } else {
            for (k = 0; k < (int)(sizeof v / sizeof v[0]); ++k)
                if (!strcmp(o, names[k])) break;
            if (k == (int)(sizeof v / sizeof v[0]) || !val) {
                fprintf(stderr, "favor_train: %s: unknown option or no value (see --help)\n",
                        o);
                return 0;
            }
            if (*val >= '0' && *val <= '9') v[k] = strtoull(val, &end, 10);
            if (!end || *end || v[k] > (1ull << 24)) {
                fprintf(stderr, "favor_train: %s needs an integer in [0, 2^24]\n", o);
                return 0;
            }
            ++i;
        }
    }
    c->features = (size_t)v[0];
    c->steps = (size_t)v[1];
    c->n = (size_t)v[2];
    c->layers = (int)v[3];
    c->batch = (size_t)v[4];
    c->dmodel = (size_t)v[5];
    c->heads = (size_t)v[6];
    c->keys = (size_t)v[7];
    c->values = (size_t)v[8];
    c->redraw = (size_t)v[9];
    c->eval = (size_t)v[10];
    c->log = (size_t)v[11];
    c->threads = (int)v[12];
    c->seed = v[13];
    if (c->layers < 1 || c->layers > 2 || !c->features || !c->steps || !c->n || !c->batch ||
        !c->dmodel || !c->heads || c->dmodel % c->heads || !c->keys || c->keys > 4096 ||
        c->values < 2 || c->values > 4096 || !c->eval || !c->log || c->threads > 1024 ||
        c->batch * c->n > (1u << 22) || c->dmodel > 1024) {
        fprintf(stderr, "favor_train: layers is 1 or 2, heads divides dmodel, 2 <= values <= "
                        "4096, keys <= 4096, threads <= 1024, batch * seq <= 2^22, dmodel <= "
                        "1024, the rest positive\n");
        return 0;
    }
    if (c->gates && (!c->causal || c->method == SOFTMAX)) {
        fprintf(stderr, "favor_train: --gates needs --causal and --method elu or favor\n");
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    config c;
    model M;
    unsigned long long data;
    size_t step, correct = 0, seen = 0;
    double t0, loss_sum = 0, first = 0, last = 0, acc = 0, eval_loss = 0;
    if (!parse_args(argc, argv, &c)) return 2;
#ifdef _OPENMP
    if (c.threads > 0) omp_set_num_threads(c.threads);
#endif
    model_init(&M, &c);
    data = c.seed;
    printf("favor_train: associative recall, n = %lu, %lu keys -> %lu values (chance %.1f%%)\n"
           "model: d_model %lu, %lu heads of %lu, %d layer%s, %s attention",
           (unsigned long)c.n, (unsigned long)c.keys, (unsigned long)c.values,
           100.0 / (double)c.values, (unsigned long)c.dmodel, (unsigned long)c.heads,
           (unsigned long)(c.dmodel / c.heads), c.layers, c.layers > 1 ? "s" : "",
           c.method == SOFTMAX ? "softmax" : c.method == ELU ? "elu+1" : "FAVOR+");
    if (c.method == FAVORP) printf(" (m = %lu)", (unsigned long)c.features);
    printf("%s%s, %lu parameters\n", c.causal ? ", causal" : "",
           c.gates ? ", learned gates" : "", (unsigned long)M.np);
    printf("training: %lu steps of %lu sequences, Adam lr %g, seed %llu, %s backend, "
           "%lu thread%s\n",
           (unsigned long)c.steps, (unsigned long)c.batch, c.lr, c.seed, favor_backend(),
           (unsigned long)MAX_THREADS(), MAX_THREADS() > 1 ? "s" : "");
    printf("%6s %8s %10s %9s %8s\n", "step", "loss", "train acc", "held-out", "time s");
    t0 = now_s();
    for (step = 1; step <= c.steps; ++step) {
        double loss, lr = c.lr;
        if (c.redraw && c.method == FAVORP && step % c.redraw == 0) {
            int l;
            for (l = 0; l < c.layers; ++l)
                check(favor_features_redraw(&M.f[l], c.seed + 1000u * (unsigned)(l + 1) + step),
                      "favor_features_redraw");
        }
        make_batch(&M, c.batch, &data);
        loss = train_step(&M, &correct);
        if (!isfinite(loss)) {
            fprintf(stderr, "favor_train: the loss is not finite at step %lu\n",
                    (unsigned long)step);
            model_free(&M);
            return 1;
        }
        if (step == 1) first = loss;
        loss_sum += loss;
        seen += c.batch * c.n;
        /* learning rate: linear warm-up over 20 steps, linear decay to lr/10 */
        if (step < 20) lr *= (double)step / 20.0;
        lr *= 1.0 - 0.9 * (double)(step - 1) / (double)c.steps;
        adam(&M, step, lr);
        if (step % c.log == 0 || step == c.steps) {
            last = loss_sum / (double)(step % c.log ? step % c.log : c.log);
            acc = evaluate(&M, &eval_loss);
            printf("%6lu %8.4f %9.1f%% %8.1f%% %8.1f\n", (unsigned long)step, last,
                   100.0 * (double)correct / (double)seen, 100.0 * acc, now_s() - t0);
            fflush(stdout);
            loss_sum = 0;
            correct = seen = 0;
        }
    }
    printf("%s: held-out accuracy %.1f%% on %lu sequences (loss %.4f); training loss "
           "%.4f -> %.4f; %lu steps in %.1f s\n",
           method_names[c.method], 100.0 * acc, (unsigned long)c.eval, eval_loss, first, last,
           (unsigned long)c.steps, now_s() - t0);
    if (c.gates) { /* the learned gates over the last held-out batch */
        size_t i, cnt = (c.eval % c.batch ? c.eval % c.batch : c.batch) * c.heads * c.n;
        int l;
        for (l = 0; l < c.layers; ++l) {
            double sum = 0, lo = 1;
            for (i = 0; i < cnt; ++i) {
                double a = exp((double)M.g[l][i]);
                sum += a;
                if (a < lo) lo = a;
            }
            printf("layer %d gates exp(g): mean %.4f, least %.4f\n", l + 1, sum / (double)cnt, lo);
        }
    }
    model_free(&M);
    if (c.check && !(last < first)) {
        fprintf(stderr, "favor_train: --check: the loss did not fall (%.4f -> %.4f)\n", first,
                last);
        return 1;
    }
    return 0;
}
