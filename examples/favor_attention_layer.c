/* favor_attention_layer: the attention layer of a GPT-2 training program, laid
 * out as llm.c lays it out, with one favor.h call forward and one backward.
 *
 * THE LAYOUT (llm.c's attention_forward / attention_backward). B sequences of T
 * tokens, C channels = NH heads x d. The layer before it (a matmul by the fused
 * q|k|v weight) writes
 *     qkv   (B, T, 3C): for each token, q of every head (C floats), then k, then v
 *     out   (B, T, C):  for each token, the output of every head, side by side
 * and the backward gets dout (B, T, C) and writes dqkv (B, T, 3C), shaped as qkv.
 * Head h of q is columns h*d .. h*d+d-1 of a token's row, k is C floats further
 * on and v 2C. So each of q, k, v, out is a strided view with a batch axis:
 *     q:   data qkv,       batch_stride T*3C, head_stride d, row_stride 3C
 *     k:   data qkv + C,   the same strides;  v: data qkv + 2C
 *     out: data out,       batch_stride T*C,  head_stride d, row_stride C
 * and dq, dk, dv are the three column blocks of dqkv, as q, k, v are of qkv: the
 * library accepts outputs interleaved in one buffer when it can prove them
 * disjoint (here: different columns of the same rows). No copy, no transpose,
 * and every (sequence, head) pair goes through one call, split over the threads.
 *
 * WHAT THE LAYER KEEPS. llm.c's forward keeps preatt and att, (B, NH, T, T) each,
 * for its backward. favor_softmax_attention keeps instead the log-sum-exp of each
 * query row, opts.lse: (B, NH, T) floats, and the backward recomputes the scores
 * tile by tile from it. Linear attention keeps nothing (lse is ignored).
 * Gradients: favor's backward OVERWRITES dq, dk, dv (llm.c's accumulates with
 * +=); the attention is the only writer of dqkv, so nothing is lost.
 *
 * WORKSPACE. A training loop calls the layer every step with the same shapes, so
 * it queries the workspace once (the larger of the forward's and the backward's
 * sizes, for the thread count it will use) and passes that buffer to every call:
 * the calls then allocate nothing. The size does not depend on T.
 *
 * THE METHOD is one switch (--method): exact causal softmax (GPT-2's), or causal
 * linear attention with elu(x)+1 features or with FAVOR+ (m positive orthogonal
 * random features, favor_features_init with FAVOR_POSITIVE; W is a constant
 * drawn once). Everything else - the views, the buffers, the workspace - is the
 * same; see layer_forward and layer_backward.
 *
 * CHECKING (--check). The program fills qkv and dout with N(0, 1) numbers, runs
 * the forward and the backward, and compares out, dq, dk and dv with a plain
 * reference in double written below (loops over b, t, h as llm.c's: scaled
 * scores, causal mask, softmax, weighted sum of values; the backward through the
 * weighted sum, the softmax and the scores; for linear attention the same with
 * the feature-map kernel phi(q).phi(k) in place of exp(s q.k)). Each error is
 * max |favor - reference| / max |reference| over the tensor; the tolerances are
 * the library's documented accuracy (ACCURACY in include/favor.h):
 *     out        2e-5 (softmax, elu+1), 1e-4 (FAVOR+)
 *     dq, dk, dv 1e-4 each, relative to that gradient's max |reference|
 * The exit status is 1 when an error is above its tolerance or not finite.
 * Timings of the two calls (best of --repeat runs) are informational only.
 *
 * RUNNING. Built by CMake as build/favor_attention_layer (FAVOR_DISPATCH, OpenMP
 * if found); ctest's favor_attention_layer runs `--method all --check` at the
 * defaults (B = 4, T = 64, C = 768, NH = 12: d = 64) with 64 features for
 * FAVOR+. GPT-2 small's own context, and a longer check:
 *     ./build/favor_attention_layer --method all --seq 1024   (timings only)
 *     ./build/favor_attention_layer --method all --seq 256 --check   (~5 s)
 * --help lists every option. Exit status: 0 ok; 1 a check failed or a call
 * returned an error; 2 a bad command line. */
#define _POSIX_C_SOURCE 199309L

#define FAVOR_IMPLEMENTATION
#include "favor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { SOFTMAX, ELU, FAVORP, NMETHOD };
static const char *const method_names[NMETHOD] = {"softmax", "elu", "favor"};

typedef struct {
    size_t B, T, C, NH, features, repeat;
    int method; /* SOFTMAX, ELU, FAVORP, or -1: all three in turn */
    int check, threads;
    unsigned long long seed;
} config;

/* ---- helpers ------------------------------------------------------------------ */

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static unsigned long long rng_next(unsigned long long *s) /* splitmix64 */
{
    unsigned long long z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void fill_normal(float *x, size_t count, unsigned long long *s)
{
    size_t i;
    for (i = 0; i < count; ++i) { /* Box-Muller */
        double u1 = ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
        double u2 = (double)(rng_next(s) >> 11) / 9007199254740992.0;
        x[i] = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "favor_attention_layer: out of memory (%lu bytes)\n",
                (unsigned long)bytes);
        exit(1);
    }
    return p;
}

static void check_status(favor_status st, const char *what, const char *error)
{
    if (st != FAVOR_OK) {
        fprintf(stderr, "favor_attention_layer: %s failed: %s%s%s\n", what,
                favor_status_string(st), error[0] ? ": " : "", error);
        exit(1);
    }
}

/* A strided fp32 view with a batch axis: element (b, h, r, c) of the view is
 * data[b*batch_stride + h*head_stride + r*row_stride + c]. */
static favor_tensor view(float *data, size_t batch, size_t batch_stride, size_t heads,
                         size_t head_stride, size_t rows, size_t row_stride, size_t cols)
{
    favor_tensor t = favor_tensor_batched(FAVOR_F32, data, batch, heads, rows, cols);
    t.batch_stride = batch_stride; /* the packed view's strides, replaced */
    t.head_stride = head_stride;
    t.row_stride = row_stride;
    return t;
}

/* ---- the layer ------------------------------------------------------------------
 * The views of llm.c's buffers, built once; layer_forward and layer_backward are
 * what a training program's attention layer calls each step. */
typedef struct {
    favor_tensor q, k, v, out;    /* into qkv and out   */
    favor_tensor dq, dk, dv, dout; /* into dqkv and dout */
    const favor_features *f;      /* NULL: exact softmax */
    favor_options opt;            /* causal; lse; the shared workspace */
} layer;

static void layer_bind(layer *L, const config *c, float *qkv, float *out, float *dqkv,
                       float *dout)
{
    size_t B = c->B, T = c->T, C = c->C, NH = c->NH, d = C / NH;
    L->q = view(qkv, B, T * 3 * C, NH, d, T, 3 * C, d);
    L->k = view(qkv + C, B, T * 3 * C, NH, d, T, 3 * C, d);
    L->v = view(qkv + 2 * C, B, T * 3 * C, NH, d, T, 3 * C, d);
    L->out = view(out, B, T * C, NH, d, T, C, d);
    L->dq = view(dqkv, B, T * 3 * C, NH, d, T, 3 * C, d);
    L->dk = view(dqkv + C, B, T * 3 * C, NH, d, T, 3 * C, d);
    L->dv = view(dqkv + 2 * C, B, T * 3 * C, NH, d, T, 3 * C, d);
    L->dout = view(dout, B, T * C, NH, d, T, C, d);
}

/* The one forward call: out from qkv (and, for softmax, opt.lse). */
static favor_status layer_forward(const layer *L)
{
    if (!L->f) return favor_softmax_attention(&L->q, &L->k, &L->v, &L->out, &L->opt);
    return favor_linear_attention(L->f, &L->q, &L->k, &L->v, &L->out, &L->opt);
}

/* The one backward call: dqkv from dout (softmax: also out and opt.lse). */
static favor_status layer_backward(const layer *L)
{
    if (!L->f)
        return favor_softmax_attention_backward(&L->q, &L->k, &L->v, &L->out, &L->dout,
                                                &L->dq, &L->dk, &L->dv, &L->opt);
    return favor_linear_attention_backward(L->f, &L->q, &L->k, &L->v, &L->dout, &L->dq,
                                           &L->dk, &L->dv, &L->opt);
}

/* The workspace bytes the two calls need with these options (0: invalid). */
static size_t layer_workspace(const layer *L)
{
    size_t fw, bw;
    if (!L->f) {
        fw = favor_softmax_attention_workspace(&L->q, &L->k, &L->v, &L->opt);
        bw = favor_softmax_attention_backward_workspace(&L->q, &L->k, &L->v, &L->opt);
    } else {
        fw = favor_linear_attention_workspace(L->f, &L->q, &L->k, &L->v, &L->opt);
        bw = favor_linear_attention_backward_workspace(L->f, &L->q, &L->k, &L->v, &L->opt);
    }
    if (!fw || !bw) return 0;
    return fw > bw ? fw : bw;
}

/* ---- the reference, in double ---------------------------------------------------
 * Softmax, as llm.c computes it: for each (b, t, h), the scaled scores of keys
 * 0..t, their softmax att, out = sum att v. Backward, for each (b, t, h):
 * datt[t2] = dout . v[t2], dv[t2] += att[t2] dout, through the softmax
 * dpre[t2] = att[t2] (datt[t2] - sum_t3 att[t3] datt[t3]), and through the
 * scores dq += s dpre[t2] k[t2], dk[t2] += s dpre[t2] q. ref_out is (B, T, C),
 * ref_dqkv (B, T, 3C), both double. */
static void ref_softmax(const config *c, const float *qkv, const float *dout, double *ref_out,
                        double *ref_dqkv)
{
    size_t B = c->B, T = c->T, C = c->C, NH = c->NH, d = C / NH, C3 = 3 * C;
    size_t b, t, h, t2, i;
    double s = 1.0 / sqrt((double)d);
    double *att = xmalloc(T * sizeof *att), *datt = xmalloc(T * sizeof *datt);
    memset(ref_dqkv, 0, B * T * C3 * sizeof *ref_dqkv);
    for (b = 0; b < B; ++b)
        for (t = 0; t < T; ++t)
            for (h = 0; h < NH; ++h) {
                const float *q = qkv + (b * T + t) * C3 + h * d;
                const float *g = dout + (b * T + t) * C + h * d;
                double *o = ref_out + (b * T + t) * C + h * d;
                double *dq = ref_dqkv + (b * T + t) * C3 + h * d;
                double mx = -HUGE_VAL, sum = 0.0, dot = 0.0;
                for (t2 = 0; t2 <= t; ++t2) { /* scores of the keys up to t */
                    const float *k = qkv + (b * T + t2) * C3 + C + h * d;
                    double a = 0.0;
                    for (i = 0; i < d; ++i) a += (double)q[i] * k[i];
                    att[t2] = a * s;
                    if (att[t2] > mx) mx = att[t2];
                }
                for (t2 = 0; t2 <= t; ++t2) sum += att[t2] = exp(att[t2] - mx);
                for (t2 = 0; t2 <= t; ++t2) att[t2] /= sum;
                for (i = 0; i < d; ++i) o[i] = 0.0;
                for (t2 = 0; t2 <= t; ++t2) { /* weighted values */
                    const float *v = qkv + (b * T + t2) * C3 + 2 * C + h * d;
                    for (i = 0; i < d; ++i) o[i] += att[t2] * v[i];
                }
                /* backward of this row */
                for (t2 = 0; t2 <= t; ++t2) {
                    const float *v = qkv + (b * T + t2) * C3 + 2 * C + h * d;
                    double *dv = ref_dqkv + (b * T + t2) * C3 + 2 * C + h * d;
                    double a = 0.0;
                    for (i = 0; i < d; ++i) {
                        a += (double)g[i] * v[i];
                        dv[i] += att[t2] * g[i];
                    }
                    datt[t2] = a;
                    dot += att[t2] * a;
                }
                for (t2 = 0; t2 <= t; ++t2) {
                    const float *k = qkv + (b * T + t2) * C3 + C + h * d;
                    double *dk = ref_dqkv + (b * T + t2) * C3 + C + h * d;
                    double dpre = att[t2] * (datt[t2] - dot) * s;
                    for (i = 0; i < d; ++i) {
                        dq[i] += dpre * k[i];
                        dk[i] += dpre * q[i];
                    }
                }
            }
    free(att);
    free(datt);
}

/* The feature map in double: phi = phi(x) (width floats) for one row x of d;
 * with dphi given, dx = J_phi(x)^T dphi instead (phi must hold phi(x)).
 *     elu+1:  phi_i = elu(x_i) + 1, unscaled
 *     FAVOR+: x' = sqrt(s) x, phi_i = exp(W_i . x' - |x'|^2 / 2) / sqrt(m), so
 *             d phi_i / dx = sqrt(s) phi_i (W_i - x')
 * (the library's stabilizers cancel in the attention ratio: none here). */
static void ref_phi(const favor_features *f, const float *x, double *phi, const double *dphi,
                    double *dx)
{
    size_t d = f->dim, m = f->count, i, j;
    if (f->kernel == FAVOR_ELU1) {
        for (i = 0; i < d; ++i) {
            double e = x[i] > 0.0f ? 1.0 : exp((double)x[i]); /* d phi_i / dx_i */
            if (dphi) dx[i] = dphi[i] * e;
            else phi[i] = x[i] > 0.0f ? x[i] + 1.0 : e;
        }
    } else {
        double rs = sqrt((double)f->scale), n2 = 0.0, sum = 0.0;
        for (i = 0; i < d; ++i) n2 += (rs * x[i]) * (rs * x[i]);
        if (dphi) {
            for (i = 0; i < d; ++i) dx[i] = 0.0;
            for (j = 0; j < m; ++j) {
                double g = dphi[j] * phi[j];
                for (i = 0; i < d; ++i) dx[i] += g * f->w[j * d + i];
                sum += g;
            }
            for (i = 0; i < d; ++i) dx[i] = rs * (dx[i] - sum * rs * x[i]);
        } else {
            for (j = 0; j < m; ++j) {
                double u = 0.0;
                for (i = 0; i < d; ++i) u += f->w[j * d + i] * (rs * x[i]);
                phi[j] = exp(u - n2 / 2.0) / sqrt((double)m);
            }
        }
    }
}

/* Linear attention, the same loops with the kernel A[t2] = phi(q).phi(k[t2]) in
 * place of exp(s q.k[t2]): att = A / sum A, out = sum att v. Backward of a row:
 * datt and dv as for softmax, dA[t2] = (datt[t2] - dout.out) / sum A, then
 * dphi(q) = sum dA[t2] phi(k[t2]) and dphi(k[t2]) += dA[t2] phi(q), and dq, dk
 * through the map. Per (b, h): phi of every q and k row first. */
static void ref_linear(const config *c, const favor_features *f, const float *qkv,
                       const float *dout, double *ref_out, double *ref_dqkv)
{
    size_t B = c->B, T = c->T, C = c->C, NH = c->NH, d = C / NH, C3 = 3 * C;
    size_t W = favor_features_width(f), b, t, h, t2, i;
    double *pq = xmalloc(T * W * sizeof *pq), *pk = xmalloc(T * W * sizeof *pk);
    double *dpq = xmalloc(T * W * sizeof *dpq), *dpk = xmalloc(T * W * sizeof *dpk);
    double *A = xmalloc(T * sizeof *A), *dx = xmalloc(d * sizeof *dx);
    memset(ref_dqkv, 0, B * T * C3 * sizeof *ref_dqkv);
    for (b = 0; b < B; ++b)
        for (h = 0; h < NH; ++h) {
            for (t = 0; t < T; ++t) {
                ref_phi(f, qkv + (b * T + t) * C3 + h * d, pq + t * W, NULL, NULL);
                ref_phi(f, qkv + (b * T + t) * C3 + C + h * d, pk + t * W, NULL, NULL);
            }
            memset(dpq, 0, T * W * sizeof *dpq);
            memset(dpk, 0, T * W * sizeof *dpk);
            for (t = 0; t < T; ++t) {
                const float *g = dout + (b * T + t) * C + h * d;
                double *o = ref_out + (b * T + t) * C + h * d;
                double sum = 0.0, dot = 0.0;
                for (t2 = 0; t2 <= t; ++t2) {
                    double a = 0.0;
                    for (i = 0; i < W; ++i) a += pq[t * W + i] * pk[t2 * W + i];
                    sum += A[t2] = a;
                }
                for (i = 0; i < d; ++i) o[i] = 0.0;
                for (t2 = 0; t2 <= t; ++t2) {
                    const float *v = qkv + (b * T + t2) * C3 + 2 * C + h * d;
                    for (i = 0; i < d; ++i) o[i] += A[t2] / sum * v[i];
                }
                /* backward of this row */
                for (i = 0; i < d; ++i) dot += g[i] * o[i];
                for (t2 = 0; t2 <= t; ++t2) {
                    const float *v = qkv + (b * T + t2) * C3 + 2 * C + h * d;
                    double *dv = ref_dqkv + (b * T + t2) * C3 + 2 * C + h * d;
                    double datt = 0.0, dA;
                    for (i = 0; i < d; ++i) {
                        datt += (double)g[i] * v[i];
                        dv[i] += A[t2] / sum * g[i];
                    }
                    dA = (datt - dot) / sum;
                    for (i = 0; i < W; ++i) {
                        dpq[t * W + i] += dA * pk[t2 * W + i];
                        dpk[t2 * W + i] += dA * pq[t * W + i];
                    }
                }
            }
            for (t = 0; t < T; ++t) { /* through the feature map */
                double *dq = ref_dqkv + (b * T + t) * C3 + h * d;
                ref_phi(f, qkv + (b * T + t) * C3 + h * d, pq + t * W, dpq + t * W, dq);
                ref_phi(f, qkv + (b * T + t) * C3 + C + h * d, pk + t * W, dpk + t * W, dx);
                for (i = 0; i < d; ++i) dq[C + i] = dx[i];
            }
        }
    free(pq);
    free(pk);
    free(dpq);
    free(dpk);
    free(A);
    free(dx);
}

/* max |x - ref| / max |ref| over the elements of (B, T, width) rows whose columns
 * col .. col + cols - 1 are compared (row stride width); NaN when x has one. */
static double rel_error(const float *x, const double *ref, size_t rows, size_t width,
                        size_t col, size_t cols)
{
    double err = 0.0, mx = 0.0;
    size_t r, i;
    for (r = 0; r < rows; ++r)
        for (i = col; i < col + cols; ++i) {
            double e = fabs((double)x[r * width + i] - ref[r * width + i]);
            if (!(e <= err)) err = e; /* NaN sticks */
            if (fabs(ref[r * width + i]) > mx) mx = fabs(ref[r * width + i]);
        }
    return mx > 0.0 ? err / mx : err;
}

/* ---- one method: set up, time, check ---------------------------------------- */

static int run_method(const config *c, int method)
{
    size_t B = c->B, T = c->T, C = c->C, NH = c->NH, d = C / NH, r, ws_bytes;
    unsigned long long seed = c->seed;
    float *qkv = xmalloc(B * T * 3 * C * sizeof *qkv), *out = xmalloc(B * T * C * sizeof *out);
    float *dqkv = xmalloc(B * T * 3 * C * sizeof *dqkv), *dout = xmalloc(B * T * C * sizeof *dout);
    float *lse = xmalloc(B * NH * T * sizeof *lse), *fstore = NULL;
    void *ws;
    favor_features f;
    layer L;
    char error[256] = "";
    double t_fw = HUGE_VAL, t_bw = HUGE_VAL, t0;
    int failed = 0;

    fill_normal(qkv, B * T * 3 * C, &seed);
    fill_normal(dout, B * T * C, &seed);

    layer_bind(&L, c, qkv, out, dqkv, dout);
    L.f = NULL;
    if (method == ELU) {
        check_status(favor_features_init(&f, FAVOR_ELU1, d, d, 0, 0, NULL), "features", "");
        L.f = &f;
    } else if (method == FAVORP) {
        fstore = xmalloc(favor_features_floats(FAVOR_POSITIVE, d, c->features) * sizeof *fstore);
        check_status(favor_features_init(&f, FAVOR_POSITIVE, d, c->features, 0, c->seed, fstore),
                     "features", "");
        L.f = &f;
    }
    L.opt = favor_default_options();
    L.opt.flags = FAVOR_CAUSAL;
    L.opt.threads = c->threads;
    L.opt.lse = method == SOFTMAX ? lse : NULL; /* (B, NH, T): forward -> backward */
    L.opt.error = error;
    L.opt.error_size = sizeof error;

    /* One workspace for both calls, queried once, as a training loop would. */
    ws_bytes = layer_workspace(&L);
    if (!ws_bytes) check_status(FAVOR_E_SHAPE, "workspace query", error);
    ws = xmalloc(ws_bytes);
    L.opt.workspace = ws;
    L.opt.workspace_size = ws_bytes;

    for (r = 0; r < c->repeat; ++r) { /* a few steps; the best time of each call */
        t0 = now_ms();
        check_status(layer_forward(&L), "forward", error);
        t0 = now_ms() - t0;
        if (t0 < t_fw) t_fw = t0;
        t0 = now_ms();
        check_status(layer_backward(&L), "backward", error);
        t0 = now_ms() - t0;
        if (t0 < t_bw) t_bw = t0;
    }
    printf("%-8s workspace %7.1f KiB   forward %8.3f ms   backward %8.3f ms\n",
           method_names[method], (double)ws_bytes / 1024.0, t_fw, t_bw);

    if (c->check) {
        static const char *const names[4] = {"out", "dq", "dk", "dv"};
        double *ref_out = xmalloc(B * T * C * sizeof *ref_out);
        double *ref_dqkv = xmalloc(B * T * 3 * C * sizeof *ref_dqkv);
        double err[4], tol[4];
        int i;
        if (method == SOFTMAX) ref_softmax(c, qkv, dout, ref_out, ref_dqkv);
        else ref_linear(c, &f, qkv, dout, ref_out, ref_dqkv);
        err[0] = rel_error(out, ref_out, B * T, C, 0, C);
        for (i = 0; i < 3; ++i)
            err[1 + i] = rel_error(dqkv, ref_dqkv, B * T, 3 * C, (size_t)i * C, C);
        tol[0] = method == FAVORP ? 1e-4 : 2e-5;
        tol[1] = tol[2] = tol[3] = 1e-4;
        printf("         max |error| / max |reference|:");
        for (i = 0; i < 4; ++i) {
            int bad = !(err[i] <= tol[i]);
            printf("  %s %.2e%s", names[i], err[i], bad ? " (FAIL)" : "");
            failed |= bad;
        }
        printf("   (tolerances: out %.0e, gradients %.0e)\n", tol[0], tol[1]);
        free(ref_out);
        free(ref_dqkv);
    }
    free(qkv);
    free(out);
    free(dqkv);
    free(dout);
    free(lse);
    free(fstore);
    free(ws);
    return failed;
}

/* ---- command line ------------------------------------------------------------------ */

static void usage(FILE *to)
{
    fprintf(to,
            "usage: favor_attention_layer [options]\n"
            "  GPT-2's causal attention layer on llm.c's buffers: qkv (B, T, 3C) -> out\n"
            "  (B, T, C), and dout -> dqkv, one favor.h call each way.\n"
            "  --method M     softmax (exact, the default), elu (elu+1 linear), favor\n"
            "                 (FAVOR+ linear), or all (each in turn)\n"
            "  --batch B      sequences (default 4)\n"
            "  --seq T        tokens per sequence (default 64)\n"
            "  --channels C   channels, heads x head size (default 768)\n"
            "  --heads NH     heads; C must be a multiple (default 12)\n"
            "  --features m   FAVOR+ random features (default 256)\n"
            "  --threads N    threads of each call (default 0: OpenMP's default)\n"
            "  --repeat R     forward+backward runs; the best time is shown (default 3)\n"
            "  --seed S       seed of the inputs and of W (default 1)\n"
            "  --check        compare with a double-precision reference; exit 1 when an\n"
            "                 error is above its tolerance\n");
}

/* a decimal number >= lo that fits in size_t */
static int parse_size(const char *s, size_t lo, size_t *out)
{
    char *end;
    unsigned long long v;
    if (!s || *s < '0' || *s > '9') return 0;
    v = strtoull(s, &end, 10);
    if (*end || v < lo || v > (unsigned long long)((size_t)-1)) return 0;
    *out = (size_t)v;
    return 1;
}

int main(int argc, char **argv)
{
    config c;
    int i, m, failed = 0;
    c.B = 4;
    c.T = 64;
    c.C = 768;
    c.NH = 12;
    c.features = 256;
    c.repeat = 3;
    c.method = SOFTMAX;
    c.check = 0;
    c.threads = 0;
    c.seed = 1;
    for (i = 1; i < argc; ++i) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        size_t n = 0;
        int ok = 1;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--check")) {
            c.check = 1;
            continue;
        } else if (!strcmp(a, "--method") && val) {
            if (!strcmp(val, "all")) c.method = -1;
            else {
                for (m = 0; m < NMETHOD && strcmp(val, method_names[m]); ++m) {}
                ok = m < NMETHOD;
                c.method = m;
            }
        } else if (!strcmp(a, "--batch")) ok = parse_size(val, 1, &c.B);
        else if (!strcmp(a, "--seq")) ok = parse_size(val, 1, &c.T);
        else if (!strcmp(a, "--channels")) ok = parse_size(val, 1, &c.C);
        else if (!strcmp(a, "--heads")) ok = parse_size(val, 1, &c.NH);
        else if (!strcmp(a, "--features")) ok = parse_size(val, 1, &c.features);
        else if (!strcmp(a, "--repeat")) ok = parse_size(val, 1, &c.repeat);
        else if (!strcmp(a, "--threads")) {
            ok = parse_size(val, 0, &n) && n <= 4096;
            c.threads = (int)n;
        } else if (!strcmp(a, "--seed")) {
            ok = parse_size(val, 0, &n);
            c.seed = n;
        } else ok = 0;
        if (!ok) {
            fprintf(stderr, "favor_attention_layer: bad option or value: %s%s%s\n", a,
                    val ? " " : "", val ? val : "");
            usage(stderr);
            return 2;
        }
        ++i; /* the value */
    }
    if (c.C % c.NH) {
        fprintf(stderr, "favor_attention_layer: --channels %lu is not a multiple of --heads %lu\n",
                (unsigned long)c.C, (unsigned long)c.NH);
        return 2;
    }
    printf("favor_attention_layer: B %lu, T %lu, C %lu = %lu heads x %lu, causal; backend %s;"
           " qkv %.1f MiB, lse %lu floats\n",
           (unsigned long)c.B, (unsigned long)c.T, (unsigned long)c.C, (unsigned long)c.NH,
           (unsigned long)(c.C / c.NH), favor_backend(),
           (double)(c.B * c.T * 3 * c.C * sizeof(float)) / 1048576.0,
           (unsigned long)(c.B * c.NH * c.T));
    for (m = 0; m < NMETHOD; ++m)
        if (c.method < 0 || c.method == m) failed |= run_method(&c, m);
    if (c.check) printf("%s\n", failed ? "FAILED" : "all within tolerance");
    return failed;
}
