/* favor_softmax_attention_backward and favor_linear_attention_backward (and the
 * log-sum-exp favor_softmax_attention writes to favor_options.lse).
 *
 * L = sum dout (.) out throughout; the gradients are dL/dq, dL/dk, dL/dv. An
 * error "relative" to a tensor is max|g - g_ref| / max|g_ref| over that tensor.
 *
 * reference_matches_fd: the float64 analytic references ref_softmax_backward and
 *     ref_linear_backward (tests/reference.c) against central differences of
 *     ref_softmax / ref_linear in double (step 1e-5 max(1, |x|)), every kernel,
 *     causal and not, grouped heads, n_k = n, n_k > n, n_k < n, d = 1, a
 *     non-default scale: relative error <= 1e-5 per gradient (worst seen 4e-7,
 *     RELU with d = 1, where dq nearly cancels and the differences' rounding
 *     shows), so a wrong reference cannot hide a wrong library.
 * library_matches_fd: the library's fp32 gradients against the same central
 *     differences, small shapes (2 query heads sharing 1 key/value head, n 5..9,
 *     d 4, d_v 3, m 8), softmax and every kernel, causal and not:
 *     relative error <= 1e-3 per gradient (worst seen ~1e-6).
 * accuracy: larger shapes (n in {1, 63, 64, 65, 130, 200}, n_k above and below
 *     n, d in {8, 16, 64}, d_v != d, 1, 2 and 4 heads, and 8 key/value heads (8
 *     and 16 query heads: whole heads, the non-causal one-head kernel), grouped
 *     2:1, 4:2 and 4:1,
 *     non-default scales, packed / interleaved / padded views, caller workspace
 *     of the queried size and none) against the float64 references: relative
 *     error <= 1e-4 per gradient (worst seen ~2e-6), for softmax (with opts.lse
 *     NULL and with the lse the forward wrote) and every kernel, TRIG included
 *     (inputs N(0,1); TRIG N(0,0.3^2) with m = 256, as in test_linear.c, so its
 *     denominators stay far from zero and 1e-4 holds for it too). The error is
 *     over max|ref| of that gradient, floored at 1e-2 max|dout| max|V|: with one
 *     visible key dq and dk are exactly zero and their rounding noise has no
 *     scale of its own.
 *     The written lse: |lse - lse_ref| <= 1e-5 max(1, |lse_ref|), -inf for a
 *     row that sees no key, nothing written past hq x n floats. Every call
 *     leaves its inputs (and lse) untouched, writes every element of dq, dk, dv
 *     (which start as NaN: overwritten, not accumulated) and no gap of theirs.
 * stash: the causal linear backward keeps 3 floats per query row in the dk/dv
 *     rows unless 3 * (hq / hkv) > d + d_v, then in the workspace. Both regimes
 *     and the boundary 3 * grp == d + d_v, n_k above and below n, padded views
 *     (the stash must not touch a gap), caller workspace of the queried size:
 *     same checks and tolerance as accuracy.
 * causality (causal, n = n_k = 100, cuts on both sides of the 64-row chunk
 *     boundary, softmax with and without lse, every kernel):
 *     changing dout rows < j leaves rows >= j of dk and dv unchanged, and
 *     changing k and v rows > i leaves rows <= i of dq unchanged, within 1e-6
 *     of the gradient's max|.| (stabilizers may legitimately change rounding);
 *     and each change does change dv rows < j, resp. dq rows > i (by > 1e-3 of
 *     the max), so the test can fail.
 * workspace: the backward workspace queries (dummy tensors, never run) do not
 *     depend on n (n = n_k = 1024 vs 1048576): softmax always; linear non-causal
 *     always, causal when 3 * grp <= d + d_v; causal with 3 * grp > d + d_v it
 *     grows with n.
 * validation: NULL pointers (FAVOR_E_NULL), gradients or dout shaped unlike
 *     their tensors and d != f->dim (FAVOR_E_SHAPE), dq overlapping q, dk
 *     overlapping dv, dq overlapping dout, dv overlapping dq or k, dk overlapping
 *     out or W, lse overlapping dq, the workspace overlapping dk (FAVOR_E_ALIAS),
 *     a workspace one byte too small or of size 0 (FAVOR_E_WORKSPACE), bad flags,
 *     scale, threads or kernel (FAVOR_E_ARG); the forward with lse overlapping q
 *     or k (FAVOR_E_ALIAS). Each returns that status and leaves every buffer
 *     (inputs, dq, dk, dv, lse, W) byte-for-byte untouched.
 * threads: opts.threads = 1, 2, 3, 4 and 16 give bit-identical dq, dk, dv (with
 *     OpenMP; trivially without), on grouped shapes and on one key/value head
 *     with n_k > 512 (split inside the head; softmax also with n_k = 16500, past
 *     32 parts of 512 keys; elu+1 with the last tenth of the query rows moved
 *     by -30, which puts a later segment's partial sums at a lower scale than an
 *     earlier one's); 2 and more with a caller workspace
 *     of the size queried for that thread count (nothing written past it).
 * large scores: softmax with inputs up to 1e4 and scale 1e4, n = 1 to 70 (the
 *     forward's decode path and its prefill), lse given or not: finite
 *     gradients (fuzz finding 7).
 * ELU1 with d = 1 has dq = 0 exactly (phi(q_i) is one number and cancels); its dq
 * error is measured against max|dk| instead. Caller workspaces are queried,
 * handed over 4 bytes off malloc's alignment, with a guard zone after them
 * that must stay untouched (and those calls use threads = 1: one slice). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "favor.h"
#include "reference.h"
#include "test_util.h"
#include "test_views.h"

static const favor_kernel kernels[] = TU_ALL_KERNELS;
#define NKERNELS ((int)(sizeof kernels / sizeof kernels[0]))

/* ---- methods: softmax (-1) or linear attention with a kernel ---------------- */

#define SOFTMAX (-1)

typedef struct {
    int method;          /* SOFTMAX or a favor_kernel */
    favor_features f;    /* linear only */
    float *w;            /* its storage */
} meth;

static const char *method_name(int method)
{
    return method == SOFTMAX ? "softmax" : tu_kernel_name((favor_kernel)method);
}

/* Features of `method` (count m; ELU1 ignores m). Returns 0 on success. */
static int meth_init(meth *mt, int method, size_t d, size_t m, unsigned long long seed)
{
    favor_kernel kernel = (favor_kernel)method;
    size_t floats;
    favor_status st;
    mt->method = method;
    mt->w = NULL;
    memset(&mt->f, 0, sizeof mt->f);
    if (method == SOFTMAX) return 0;
    if (tu_fixed(kernel)) m = d;
    floats = favor_features_floats(kernel, d, m);
    mt->w = floats ? (float *)malloc(floats * sizeof(float)) : NULL;
    st = favor_features_init(&mt->f, kernel, d, m, 0, seed, mt->w);
    if (st != FAVOR_OK) {
        print_error("  favor_features_init %s: %s\n", method_name(method),
                    favor_status_string(st));
        return 1;
    }
    return 0;
}

static void meth_free(meth *mt) { free(mt->w); }

/* Shape of a problem, for the reference. scale 0 = the method's default. */
typedef struct {
    size_t hq, hkv, n, nk, d, dv;
    double scale;
    int causal;
} shp;

static void ref_fwd(const meth *mt, const double *q, const double *k, const double *v,
                    double *out, const shp *s)
{
    if (mt->method == SOFTMAX)
        ref_softmax(q, k, v, out, s->hq, s->hkv, s->n, s->nk, s->d, s->dv, s->scale,
                    s->causal);
    else
        ref_linear(&mt->f, q, k, v, out, s->hq, s->hkv, s->n, s->nk, s->dv, s->scale,
                   s->causal);
}

static void ref_bwd(const meth *mt, const double *q, const double *k, const double *v,
                    const double *dout, double *dq, double *dk, double *dv, const shp *s)
{
    if (mt->method == SOFTMAX)
        ref_softmax_backward(q, k, v, dout, dq, dk, dv, s->hq, s->hkv, s->n, s->nk, s->d,
                             s->dv, s->scale, s->causal);
    else
        ref_linear_backward(&mt->f, q, k, v, dout, dq, dk, dv, s->hq, s->hkv, s->n, s->nk,
                            s->dv, s->scale, s->causal);
}

static favor_status lib_fwd(const meth *mt, const favor_tensor *Q, const favor_tensor *K,
                            const favor_tensor *V, const favor_tensor *O,
                            const favor_options *opt)
{
    if (mt->method == SOFTMAX) return favor_softmax_attention(Q, K, V, O, opt);
    return favor_linear_attention(&mt->f, Q, K, V, O, opt);
}

/* O is read by the softmax backward only. */
static favor_status lib_bwd(const meth *mt, const favor_tensor *Q, const favor_tensor *K,
                            const favor_tensor *V, const favor_tensor *O,
                            const favor_tensor *dO, const favor_tensor *dQ,
                            const favor_tensor *dK, const favor_tensor *dV,
                            const favor_options *opt)
{
    if (mt->method == SOFTMAX)
        return favor_softmax_attention_backward(Q, K, V, O, dO, dQ, dK, dV, opt);
    return favor_linear_attention_backward(&mt->f, Q, K, V, dO, dQ, dK, dV, opt);
}

static size_t lib_bwd_ws(const meth *mt, const favor_tensor *Q, const favor_tensor *K,
                         const favor_tensor *V, const favor_options *opt)
{
    if (mt->method == SOFTMAX) return favor_softmax_attention_backward_workspace(Q, K, V, opt);
    return favor_linear_attention_backward_workspace(&mt->f, Q, K, V, opt);
}

/* ELU1 with d = 1: phi(q_i) is one positive number, which cancels in the ratio,
 * so the output does not depend on q and dq is exactly zero. Its error is then
 * measured against max|dk| (same units) instead of max|dq|. */
static int q_free(int method, size_t d) { return method == FAVOR_ELU1 && d == 1; }

/* Same for two packed double arrays. */
static double rel_err_d(const double *g, const double *ref, size_t cnt)
{
    double e = 0, m = tu_max_abs(ref, cnt);
    size_t i;
    for (i = 0; i < cnt; ++i) {
        double x = fabs(g[i] - ref[i]);
        if (!(x <= e)) e = x;
    }
    return m > 0 ? e / m : e;
}

/* ---- central differences of L = sum dout . ref_forward --------------------- */

static double ref_loss(const meth *mt, const double *q, const double *k, const double *v,
                       const double *dout, const shp *s, double *obuf)
{
    size_t i, cnt = s->hq * s->n * s->dv;
    double L = 0;
    ref_fwd(mt, q, k, v, obuf, s);
    for (i = 0; i < cnt; ++i) L += dout[i] * obuf[i];
    return L;
}

/* gq, gk, gv = dL/dq, dL/dk, dL/dv by central differences with step
 * rel * max(1, |x|) (the step actually taken, after rounding x +- h, divides). */
static void fd_grads(const meth *mt, double *q, double *k, double *v, const double *dout,
                     const shp *s, double rel, double *gq, double *gk, double *gv)
{
    double *arr[3], *grad[3];
    size_t cnt[3], a, i;
    double *obuf = (double *)malloc(s->hq * s->n * s->dv * sizeof *obuf);
    arr[0] = q; arr[1] = k; arr[2] = v;
    grad[0] = gq; grad[1] = gk; grad[2] = gv;
    cnt[0] = s->hq * s->n * s->d;
    cnt[1] = s->hkv * s->nk * s->d;
    cnt[2] = s->hkv * s->nk * s->dv;
    for (a = 0; a < 3; ++a)
        for (i = 0; i < cnt[a]; ++i) {
            volatile double x0 = arr[a][i], xp, xm;
            double h = rel * (fabs(x0) > 1 ? fabs(x0) : 1.0), lp, lm;
            xp = x0 + h;
            xm = x0 - h;
            arr[a][i] = xp;
            lp = ref_loss(mt, q, k, v, dout, s, obuf);
            arr[a][i] = xm;
            lm = ref_loss(mt, q, k, v, dout, s, obuf);
            arr[a][i] = x0;
            grad[a][i] = (lp - lm) / (xp - xm);
        }
    free(obuf);
}

/* ---- finite-difference tests -------------------------------------------------- */

typedef struct {
    size_t hq, hkv, n, nk, d, dv, m;
    float scale; /* 0 = default */
} fd_case;

static const fd_case fd_cases[] = {
    /* hq hkv n nk  d dv  m  scale */
    { 2, 1, 7, 7, 4, 3, 8, 0.0f },
    { 2, 1, 5, 9, 4, 3, 8, 0.0f },
    { 2, 1, 9, 5, 4, 3, 8, 0.7f },
    { 2, 1, 8, 8, 4, 3, 8, 0.3f },
};

/* The reference checks also cover more heads, d = 1 and m not a multiple of d. */
static const fd_case fd_ref_extra[] = {
    { 4, 2, 6, 4, 3, 2, 7, 0.0f },
    { 1, 1, 4, 6, 1, 2, 5, 1.3f },
    { 3, 3, 5, 5, 5, 4, 12, 0.0f },
};

/* One method on one small case, causal or not. check_lib: compare the library's
 * fp32 gradients with the differences (tolerance 1e-3), else the float64
 * reference (tolerance 1e-6). Returns failures. */
static int run_fd(const fd_case *c, size_t index, int method, int causal, int check_lib)
{
    meth mt;
    tu_rng rng;
    shp s;
    size_t nq = c->hq * c->n * c->d, nkk = c->hkv * c->nk * c->d, nv = c->hkv * c->nk * c->dv,
           no = c->hq * c->n * c->dv, t;
    double sigma = method == FAVOR_TRIG ? 0.3 : 1.0, tol = check_lib ? 1e-3 : 1e-5;
    float *q, *k, *v, *dout;
    double *qd, *kd, *vd, *dod, *fq, *fk, *fv, *g[3];
    int fails = 0;
    const double *fds[3];
    static const char *names[3] = { "dq", "dk", "dv" };

    if (meth_init(&mt, method, c->d, c->m, 1234 + index)) return 1;
    s.hq = c->hq; s.hkv = c->hkv; s.n = c->n; s.nk = c->nk; s.d = c->d; s.dv = c->dv;
    s.scale = c->scale;
    s.causal = causal;
    rng.s = 777 + 13 * index + 3 * (unsigned)(method + 1) + (unsigned)causal;
    q = tu_normal_floats(&rng, nq, sigma);
    k = tu_normal_floats(&rng, nkk, sigma);
    v = tu_normal_floats(&rng, nv, 1.0);
    dout = tu_normal_floats(&rng, no, 1.0);
    qd = tu_to_double(q, nq);
    kd = tu_to_double(k, nkk);
    vd = tu_to_double(v, nv);
    dod = tu_to_double(dout, no);
    fq = (double *)malloc(nq * sizeof *fq);
    fk = (double *)malloc(nkk * sizeof *fk);
    fv = (double *)malloc(nv * sizeof *fv);
    g[0] = (double *)malloc(nq * sizeof(double));
    g[1] = (double *)malloc(nkk * sizeof(double));
    g[2] = (double *)malloc(nv * sizeof(double));
    fd_grads(&mt, qd, kd, vd, dod, &s, 1e-5, fq, fk, fv);
    fds[0] = fq; fds[1] = fk; fds[2] = fv;

    if (check_lib) {
        float *o = (float *)malloc(no * sizeof *o), *dq = (float *)malloc(nq * sizeof *dq),
              *dk = (float *)malloc(nkk * sizeof *dk), *dv = (float *)malloc(nv * sizeof *dv);
        favor_tensor Q = favor_tensor_packed(q, c->hq, c->n, c->d),
                     K = favor_tensor_packed(k, c->hkv, c->nk, c->d),
                     V = favor_tensor_packed(v, c->hkv, c->nk, c->dv),
                     O = favor_tensor_packed(o, c->hq, c->n, c->dv),
                     dO = favor_tensor_packed(dout, c->hq, c->n, c->dv),
                     dQ = favor_tensor_packed(dq, c->hq, c->n, c->d),
                     dK = favor_tensor_packed(dk, c->hkv, c->nk, c->d),
                     dV = favor_tensor_packed(dv, c->hkv, c->nk, c->dv);
        favor_options opt = favor_default_options();
        favor_status st;
        opt.flags = causal ? FAVOR_CAUSAL : 0u;
        opt.scale = c->scale;
        st = lib_fwd(&mt, &Q, &K, &V, &O, &opt);
        if (st == FAVOR_OK) st = lib_bwd(&mt, &Q, &K, &V, &O, &dO, &dQ, &dK, &dV, &opt);
        if (st != FAVOR_OK) {
            print_error("  status %s\n", favor_status_string(st));
            ++fails;
        } else {
            for (t = 0; t < nq; ++t) g[0][t] = dq[t];
            for (t = 0; t < nkk; ++t) g[1][t] = dk[t];
            for (t = 0; t < nv; ++t) g[2][t] = dv[t];
        }
        free(o);
        free(dq);
        free(dk);
        free(dv);
        if (st != FAVOR_OK) goto done;
    } else {
        ref_bwd(&mt, qd, kd, vd, dod, g[0], g[1], g[2], &s);
    }
    {
        size_t cnts[3];
        cnts[0] = nq; cnts[1] = nkk; cnts[2] = nv;
        print_message("  %s fd %-10s case %u %s: ", check_lib ? "library" : "reference",
                      method_name(method), (unsigned)index, causal ? "causal" : "full  ");
        for (t = 0; t < 3; ++t) {
            double e = rel_err_d(g[t], fds[t], cnts[t]);
            if (t == 0 && q_free(method, c->d)) { /* dq = 0: measured against max|dk| */
                size_t u;
                e = 0;
                for (u = 0; u < nq; ++u)
                    if (!(fabs(g[0][u] - fq[u]) <= e)) e = fabs(g[0][u] - fq[u]);
                e /= tu_max_abs(fk, nkk);
                print_message("%s %.2g  ", names[t], e);
                if (!(e <= tol)) {
                    print_error("\n  dq (zero): error %.6g of max|dk| > %.3g\n", e, tol);
                    ++fails;
                }
                continue;
            }
            print_message("%s %.2g  ", names[t], e);
            if (!(e <= tol)) {
                print_error("\n  %s: relative error %.6g > %.3g (max|fd| %.6g)\n", names[t], e,
                            tol, tu_max_abs(fds[t], cnts[t]));
                ++fails;
            }
            if (!(tu_max_abs(fds[t], cnts[t]) > 0)) {
                print_error("\n  %s: the differences are all zero: nothing tested\n", names[t]);
                ++fails;
            }
        }
        print_message("\n");
    }
done:
    free(q); free(k); free(v); free(dout);
    free(qd); free(kd); free(vd); free(dod);
    free(fq); free(fk); free(fv);
    free(g[0]); free(g[1]); free(g[2]);
    meth_free(&mt);
    return fails;
}

static void test_reference_matches_fd(void **state)
{
    size_t i;
    int method, causal, fails = 0;
    (void)state;
    for (method = SOFTMAX; method < NKERNELS; ++method)
        for (causal = 0; causal < 2; ++causal) {
            for (i = 0; i < sizeof fd_cases / sizeof fd_cases[0]; ++i)
                fails += run_fd(&fd_cases[i], i, method, causal, 0);
            for (i = 0; i < sizeof fd_ref_extra / sizeof fd_ref_extra[0]; ++i)
                fails += run_fd(&fd_ref_extra[i], 100 + i, method, causal, 0);
        }
    assert_int_equal(fails, 0);
}

static void test_library_matches_fd(void **state)
{
    size_t i;
    int method, causal, fails = 0;
    (void)state;
    for (method = SOFTMAX; method < NKERNELS; ++method)
        for (causal = 0; causal < 2; ++causal)
            for (i = 0; i < sizeof fd_cases / sizeof fd_cases[0]; ++i)
                fails += run_fd(&fd_cases[i], i, method, causal, 1);
    assert_int_equal(fails, 0);
}

/* ---- accuracy against the float64 references ---------------------------------- */

typedef struct {
    size_t hq, hkv, n, nk, d, dv, m;
    int causal;
    float scale;             /* 0 = default */
    tv_layout lq, lkv, lo, lg; /* q; k and v; out and dout; dq, dk and dv */
    int workspace;           /* 1: a caller workspace of the queried size */
} bw_case;

#define LSE_GUARD 8
#define WS_GUARD 4096

/* One case, one method. lse: 1 = the forward writes opts.lse (checked against
 * ref_softmax_lse) and the backward reads it (softmax only). Returns failures. */
static int run_bw_case(size_t index, const bw_case *c, int method, int lse)
{
    meth mt;
    tu_rng rng;
    tv_buf Q, K, V, O, dO, dQ, dK, dV;
    favor_options opt = favor_default_options(), fopt;
    favor_status st;
    void *ws = NULL;
    float *lsebuf = NULL;
    size_t m = method == FAVOR_TRIG ? 256 : c->m, t, wsbytes = 0;
    double sigma = method == FAVOR_TRIG ? 0.3 : 1.0;
    int fails = 0;
    shp s;

    print_message("case %2u %-10s%s: hq %u hkv %u n %u nk %u d %u dv %u m %u %s scale %g "
                  "Q %s KV %s O %s grads %s%s\n",
                  (unsigned)index, method_name(method), lse ? "+lse" : "    ", (unsigned)c->hq,
                  (unsigned)c->hkv, (unsigned)c->n, (unsigned)c->nk, (unsigned)c->d,
                  (unsigned)c->dv, (unsigned)m, c->causal ? "causal" : "full",
                  (double)c->scale, tv_layout_name(c->lq), tv_layout_name(c->lkv),
                  tv_layout_name(c->lo), tv_layout_name(c->lg),
                  c->workspace ? " workspace" : "");
    if (meth_init(&mt, method, c->d, m, 91 + index)) return 1;
    rng.s = 4000 + 17 * index + 5 * (unsigned)(method + 1) + (unsigned)lse;
    tv_make(&Q, c->hq, c->n, c->d, c->lq, &rng, sigma);
    tv_make(&K, c->hkv, c->nk, c->d, c->lkv, &rng, sigma);
    tv_make(&V, c->hkv, c->nk, c->dv, c->lkv, &rng, 1.0);
    tv_make(&dO, c->hq, c->n, c->dv, c->lo, &rng, 1.0);
    tv_make(&O, c->hq, c->n, c->dv, c->lo, &rng, -1);
    tv_make(&dQ, c->hq, c->n, c->d, c->lg, &rng, -1);
    tv_make(&dK, c->hkv, c->nk, c->d, c->lg, &rng, -1);
    tv_make(&dV, c->hkv, c->nk, c->dv, c->lg, &rng, -1);
    s.hq = c->hq; s.hkv = c->hkv; s.n = c->n; s.nk = c->nk; s.d = c->d; s.dv = c->dv;
    s.scale = c->scale;
    s.causal = c->causal;

    opt.flags = c->causal ? FAVOR_CAUSAL : 0u;
    opt.scale = c->scale;
    fopt = opt;
    if (lse) {
        lsebuf = (float *)malloc((c->hq * c->n + LSE_GUARD) * sizeof *lsebuf);
        for (t = 0; t < c->hq * c->n + LSE_GUARD; ++t) lsebuf[t] = 12345.0f;
        fopt.lse = lsebuf;
        opt.lse = lsebuf;
    }
    /* the forward: out for the softmax backward (and lse); linear needs none */
    if (method == SOFTMAX) {
        st = favor_softmax_attention(&Q.t, &K.t, &V.t, &O.t, &fopt);
        if (st != FAVOR_OK) {
            print_error("  forward status %s\n", favor_status_string(st));
            ++fails;
            goto done;
        }
        memcpy(O.init, O.buf, O.len * sizeof *O.buf); /* now an input */
    }
    if (lse) {
        double *q = tu_tensor_to_double(&Q.t), *k = tu_tensor_to_double(&K.t);
        double *lr = (double *)malloc(c->hq * c->n * sizeof *lr), worst = 0;
        ref_softmax_lse(q, k, lr, c->hq, c->hkv, c->n, c->nk, c->d, c->scale, c->causal);
        for (t = 0; t < c->hq * c->n; ++t) {
            double want = lr[t], got = lsebuf[t];
            if (isinf(want)) {
                if (!(isinf(got) && got < 0)) {
                    print_error("  lse[%u] = %g, want -inf (the row sees no key)\n",
                                (unsigned)t, got);
                    ++fails;
                }
            } else {
                double e = fabs(got - want), tol = 1e-5 * (fabs(want) > 1 ? fabs(want) : 1.0);
                if (!(e <= tol)) {
                    if (fails < 10)
                        print_error("  lse[%u] = %.9g, want %.9g\n", (unsigned)t, got, want);
                    ++fails;
                }
                if (!(e / tol <= worst)) worst = e / tol;
            }
        }
        for (t = c->hq * c->n; t < c->hq * c->n + LSE_GUARD; ++t)
            if (lsebuf[t] != 12345.0f) {
                print_error("  the forward wrote lse[%u], past hq x n\n", (unsigned)t);
                ++fails;
                break;
            }
        print_message("  lse: worst err/tol %.3f\n", worst);
        free(q);
        free(k);
        free(lr);
    }
    if (c->workspace) {
        /* one thread: one slice, so any overrun reaches the guard (with more, a
         * slice's overrun may land unseen in an idle thread's slice) */
        opt.threads = 1;
        wsbytes = lib_bwd_ws(&mt, &Q.t, &K.t, &V.t, &opt);
        if (wsbytes == 0) {
            print_error("  the workspace query returned 0\n");
            ++fails;
        }
        /* 4 bytes off malloc's alignment, a guard zone after the queried size */
        ws = malloc(4 + wsbytes + WS_GUARD);
        memset(ws, 0xa5, 4 + wsbytes + WS_GUARD);
        opt.workspace = (unsigned char *)ws + 4;
        opt.workspace_size = wsbytes;
    }
    {
        float *lsecopy = NULL;
        if (lse) {
            lsecopy = (float *)malloc((c->hq * c->n + LSE_GUARD) * sizeof *lsecopy);
            memcpy(lsecopy, lsebuf, (c->hq * c->n + LSE_GUARD) * sizeof *lsecopy);
        }
        st = lib_bwd(&mt, &Q.t, &K.t, &V.t, &O.t, &dO.t, &dQ.t, &dK.t, &dV.t, &opt);
        if (lse && memcmp(lsecopy, lsebuf, (c->hq * c->n + LSE_GUARD) * sizeof *lsecopy) != 0) {
            print_error("  the backward wrote lse\n");
            ++fails;
        }
        free(lsecopy);
    }
    if (ws) {
        const unsigned char *gz = (const unsigned char *)ws + 4 + wsbytes;
        for (t = 0; t < WS_GUARD; ++t)
            if (gz[t] != 0xa5) {
                print_error("  the backward wrote past the queried workspace size (%lu "
                            "bytes): byte %lu after it\n", (unsigned long)wsbytes,
                            (unsigned long)t);
                ++fails;
                break;
            }
    }
    if (st != FAVOR_OK) {
        print_error("  backward status %s\n", favor_status_string(st));
        ++fails;
    } else {
        double *q = tu_tensor_to_double(&Q.t), *k = tu_tensor_to_double(&K.t);
        double *v = tu_tensor_to_double(&V.t), *dout = tu_tensor_to_double(&dO.t);
        double *rq = (double *)malloc(c->hq * c->n * c->d * sizeof *rq);
        double *rk = (double *)malloc(c->hkv * c->nk * c->d * sizeof *rk);
        double *rv = (double *)malloc(c->hkv * c->nk * c->dv * sizeof *rv);
        const tv_buf *grads[3];
        const double *refs[3];
        static const char *names[3] = { "dq", "dk", "dv" };
        if (!tv_unchanged(&Q) || !tv_unchanged(&K) || !tv_unchanged(&V) ||
            !tv_unchanged(&dO) || !tv_unchanged(&O)) {
            print_error("  an input buffer was written\n");
            ++fails;
        }
        ref_bwd(&mt, q, k, v, dout, rq, rk, rv, &s);
        grads[0] = &dQ; grads[1] = &dK; grads[2] = &dV;
        refs[0] = rq; refs[1] = rk; refs[2] = rv;
        print_message("  relative error");
        /* A gradient can be exactly zero: with one visible key the output is that
         * key's value whatever q and k are. Its error is then measured against
         * the natural scale of the gradients, max|dout| max|V|, not its own max
         * (rounding noise); the floor is 1e-2 of that scale, far below every
         * nonzero gradient of these inputs. */
        double gscale = 1e-2 * tu_max_abs(dout, c->hq * c->n * c->dv) *
                        tu_max_abs(v, c->hkv * c->nk * c->dv);
        size_t cnts[3];
        cnts[0] = c->hq * c->n * c->d;
        cnts[1] = c->hkv * c->nk * c->d;
        cnts[2] = c->hkv * c->nk * c->dv;
        for (t = 0; t < 3; ++t) {
            double m = tu_max_abs(refs[t], cnts[t]);
            double e = tu_max_abs_diff(&grads[t]->t, refs[t]) / (m > gscale ? m : gscale);
            if (t == 0 && q_free(method, c->d)) /* dq = 0: against max|dk| instead */
                e = tu_max_abs_diff(&dQ.t, rq) / tu_max_abs(rk, c->hkv * c->nk * c->d);
            print_message("  %s %.3g", names[t], e);
            if (!tv_gaps_unchanged(grads[t])) {
                print_error("\n  a gap of %s was written\n", names[t]);
                ++fails;
            }
            if (!tv_view_finite(grads[t])) {
                print_error("\n  an element of %s is not finite (or was never written)\n",
                            names[t]);
                ++fails;
            }
            if (!(e <= 1e-4)) {
                print_error("\n  %s: relative error %.6g > 1e-4\n", names[t], e);
                ++fails;
            }
        }
        print_message("\n");
        free(q); free(k); free(v); free(dout);
        free(rq); free(rk); free(rv);
    }
done:
    free(ws);
    free(lsebuf);
    tv_free(&Q); tv_free(&K); tv_free(&V); tv_free(&O);
    tv_free(&dO); tv_free(&dQ); tv_free(&dK); tv_free(&dV);
    meth_free(&mt);
    return fails;
}

/* TRIG runs with m = 256 and N(0, 0.3^2) inputs: s * d * 2 * 0.09 <= 2.5 for every
 * case (see test_linear.c), so its denominators stay far from zero. */
static const bw_case acc_cases[] = {
    /* hq hkv    n   nk   d  dv   m caus scale  q               k, v            out, dout       grads        ws */
    { 1, 1,    1,   1, 16, 16, 64, 0, 0.0f,  TV_PACKED,      TV_PACKED,      TV_PACKED,      TV_PACKED,      0 },
    { 1, 1,    1, 130, 16,  8, 64, 1, 0.0f,  TV_PADDED,      TV_PACKED,      TV_PADDED,      TV_PADDED,      1 },
    { 4, 2,   63,  63, 16, 24, 64, 1, 0.0f,  TV_INTERLEAVED, TV_INTERLEAVED, TV_INTERLEAVED, TV_INTERLEAVED, 0 },
    { 4, 4,   64,  64, 64, 64, 64, 0, 0.0f,  TV_INTERPAD,    TV_PADDED,      TV_PACKED,      TV_INTERPAD,    1 },
    { 4, 1,   65, 130, 64, 32, 64, 1, 0.1f,  TV_PACKED,      TV_INTERLEAVED, TV_INTERPAD,    TV_PADDED,      0 },
    { 1, 1,  130,  65, 16, 16, 64, 1, 0.0f,  TV_PADDED,      TV_PADDED,      TV_PADDED,      TV_PACKED,      1 },
    { 2, 1,  200, 200, 64, 48, 64, 1, 0.05f, TV_PACKED,      TV_PACKED,      TV_PACKED,      TV_PACKED,      1 },
    { 4, 2,  200,  63, 16, 20, 64, 0, 0.0f,  TV_INTERLEAVED, TV_PADDED,      TV_PACKED,      TV_INTERLEAVED, 0 },
    { 4, 2,   65, 200, 16,  8, 48, 0, 0.3f,  TV_PACKED,      TV_INTERPAD,    TV_INTERLEAVED, TV_PACKED,      1 },
    { 2, 2,  130, 200, 16, 16, 64, 1, 0.0f,  TV_INTERPAD,    TV_PACKED,      TV_PADDED,      TV_INTERPAD,    0 },
    { 4, 2,  200, 130, 16, 12, 40, 1, 0.2f,  TV_PADDED,      TV_INTERLEAVED, TV_PACKED,      TV_PADDED,      0 },
    /* 8 key/value heads and more: whole heads, not split inside (the only shapes
     * whose non-causal linear backward runs the one-head kernel) */
    { 8, 8,   40,  57, 16,  8, 32, 0, 0.0f,  TV_PADDED,      TV_INTERLEAVED, TV_PACKED,      TV_PADDED,      1 },
    {16, 8,   57,  40, 16, 12, 32, 0, 0.1f,  TV_INTERLEAVED, TV_PACKED,      TV_PADDED,      TV_INTERLEAVED, 0 },
    {16, 8,   57,  40,  8,  8, 32, 1, 0.0f,  TV_PACKED,      TV_PADDED,      TV_INTERPAD,    TV_PACKED,      1 },
    /* one key/value head split inside (non-causal linear: 3 key segments, 2 row parts) */
    { 2, 1,  150, 1100, 16,  8, 32, 0, 0.0f,  TV_INTERLEAVED, TV_PADDED,      TV_PACKED,      TV_PACKED,      1 },
    /* causal linear split inside the head (the chunk-parallel scan both ways): 2
     * segments; keys every row sees filling segment 0 and part of 1 (n_k > n);
     * rows that see no key (n_k < n). (Kept small: valgrind runs them.) */
    { 2, 1,  600,  600, 16,  8, 32, 1, 0.0f,  TV_PACKED,      TV_PADDED,      TV_INTERLEAVED, TV_PACKED,      1 },
    { 2, 1,  100,  700, 16,  8, 32, 1, 0.1f,  TV_INTERLEAVED, TV_PACKED,      TV_PACKED,      TV_PADDED,      0 },
    { 2, 1,  700,  600,  8,  8, 32, 1, 0.0f,  TV_PADDED,      TV_INTERLEAVED, TV_PADDED,      TV_PACKED,      1 },
};

static void test_backward_accuracy(void **state)
{
    size_t i;
    int method, fails = 0;
    (void)state;
    for (i = 0; i < sizeof acc_cases / sizeof acc_cases[0]; ++i) {
        fails += run_bw_case(i, &acc_cases[i], SOFTMAX, 0);
        fails += run_bw_case(i, &acc_cases[i], SOFTMAX, 1);
        for (method = 0; method < NKERNELS; ++method)
            fails += run_bw_case(i, &acc_cases[i], method, 0);
    }
    assert_int_equal(fails, 0);
}

/* The causal linear backward's per-row stash: in the dk/dv rows when
 * 3 * (hq / hkv) <= d + d_v, else in the workspace. */
static const bw_case stash_cases[] = {
    /* hq hkv    n   nk  d dv   m caus scale  q          k, v            out, dout  grads           ws */
    /* 3 > 2: workspace */
    { 1, 1,   70,  70, 1, 1, 16, 1, 0.0f, TV_PADDED, TV_PADDED,      TV_PADDED, TV_PADDED,      1 },
    { 1, 1,  130,  65, 1, 1, 16, 1, 0.0f, TV_PACKED, TV_PACKED,      TV_PACKED, TV_PACKED,      0 },
    { 1, 1,   65, 130, 1, 1, 16, 1, 0.5f, TV_PACKED, TV_PADDED,      TV_PACKED, TV_INTERPAD,    1 },
    /* 12 > 4 and 6 > 5: workspace */
    { 4, 1,   70, 130, 2, 2, 16, 1, 0.0f, TV_PACKED, TV_INTERLEAVED, TV_PADDED, TV_PADDED,      1 },
    { 4, 1,  130,  70, 2, 2, 16, 1, 0.0f, TV_PADDED, TV_PACKED,      TV_PACKED, TV_INTERLEAVED, 0 },
    { 2, 1,  100, 100, 2, 3, 16, 1, 0.0f, TV_PACKED, TV_PACKED,      TV_PACKED, TV_PADDED,      1 },
    /* 6 = 6 and 3 = 3: just fits in the dk/dv rows */
    { 2, 1,  100, 100, 3, 3, 16, 1, 0.0f, TV_PADDED, TV_PADDED,      TV_PADDED, TV_PADDED,      1 },
    { 2, 1,  130,  70, 3, 3, 16, 1, 0.0f, TV_PACKED, TV_PACKED,      TV_PACKED, TV_INTERPAD,    0 },
    { 1, 1,  100, 100, 1, 2, 16, 1, 0.0f, TV_PACKED, TV_PACKED,      TV_PACKED, TV_PADDED,      0 },
    { 4, 1,   70, 130, 4, 8, 16, 1, 0.0f, TV_PACKED, TV_PADDED,      TV_PACKED, TV_PADDED,      1 },
    /* split inside the head (2 segments), the stash of 12 > 4 in the workspace */
    { 4, 1,  600,  600, 2, 2, 16, 1, 0.0f, TV_PACKED, TV_INTERLEAVED, TV_PACKED, TV_PADDED,  1 },
    /* normal shapes */
    { 4, 2,   65,  65, 16, 8, 32, 1, 0.0f, TV_INTERLEAVED, TV_INTERLEAVED, TV_PACKED, TV_INTERLEAVED, 1 },
    { 1, 1,  150, 150, 8, 8, 32, 1, 0.0f, TV_PADDED, TV_PADDED,      TV_PADDED, TV_PADDED,      0 },
};

static void test_backward_stash(void **state)
{
    size_t i;
    int method, fails = 0;
    (void)state;
    for (i = 0; i < sizeof stash_cases / sizeof stash_cases[0]; ++i)
        for (method = 0; method < NKERNELS; ++method)
            fails += run_bw_case(100 + i, &stash_cases[i], method, 0);
    assert_int_equal(fails, 0);
}

/* ---- causality ------------------------------------------------------------------ */

#define CH 2
#define CHKV 1
#define CN 100
#define CD 8
#define CDV 6
#define CM 32

/* max |a - b| over rows [r0, r1) of every head of packed [heads][rows][cols] */
static double rows_diff(const float *a, const float *b, size_t heads, size_t rows, size_t cols,
                        size_t r0, size_t r1)
{
    size_t h, r, c;
    double m = 0;
    for (h = 0; h < heads; ++h)
        for (r = r0; r < r1; ++r)
            for (c = 0; c < cols; ++c) {
                size_t at = (h * rows + r) * cols + c;
                double e = fabs((double)a[at] - (double)b[at]);
                if (!(e <= m)) m = e;
            }
    return m;
}

typedef struct {
    float *dq, *dk, *dv;
} grads;

static favor_status causal_run(const meth *mt, int lse, float *q, float *k, float *v,
                               float *dout, grads *g)
{
    float o[CH * CN * CDV], lsebuf[CH * CN];
    favor_tensor Q = favor_tensor_packed(q, CH, CN, CD), K = favor_tensor_packed(k, CHKV, CN, CD),
                 V = favor_tensor_packed(v, CHKV, CN, CDV),
                 O = favor_tensor_packed(o, CH, CN, CDV),
                 dO = favor_tensor_packed(dout, CH, CN, CDV),
                 dQ = favor_tensor_packed(g->dq, CH, CN, CD),
                 dK = favor_tensor_packed(g->dk, CHKV, CN, CD),
                 dV = favor_tensor_packed(g->dv, CHKV, CN, CDV);
    favor_options opt = favor_default_options();
    favor_status st;
    opt.flags = FAVOR_CAUSAL;
    opt.threads = 1;
    if (lse) opt.lse = lsebuf;
    if (mt->method == SOFTMAX && (st = favor_softmax_attention(&Q, &K, &V, &O, &opt)) != FAVOR_OK)
        return st;
    return lib_bwd(mt, &Q, &K, &V, &O, &dO, &dQ, &dK, &dV, &opt);
}

static void grads_alloc(grads *g)
{
    g->dq = (float *)malloc(CH * CN * CD * sizeof(float));
    g->dk = (float *)malloc(CHKV * CN * CD * sizeof(float));
    g->dv = (float *)malloc(CHKV * CN * CDV * sizeof(float));
}

static void grads_free(grads *g)
{
    free(g->dq);
    free(g->dk);
    free(g->dv);
}

static void test_backward_causality(void **state)
{
    static const size_t cuts[] = { 1, 37, 63, 64, 65, 99 };
    int variant, fails = 0;
    (void)state;
    /* variant 0: softmax without lse, 1: softmax with lse, 2..: the kernels */
    for (variant = 0; variant < 2 + NKERNELS; ++variant) {
        int method = variant < 2 ? SOFTMAX : (int)kernels[variant - 2], lse = variant == 1;
        double sigma = method == FAVOR_TRIG ? 0.3 : 1.0;
        meth mt;
        tu_rng rng;
        float *q, *k, *v, *dout;
        grads g0, g1;
        size_t ci, r, c, h;
        double mq, mk, mv, worst = 0;
        favor_status st;
        print_message("causality %s%s\n", method_name(method), lse ? " + lse" : "");
        if (meth_init(&mt, method, CD, method == FAVOR_TRIG ? 256 : CM, 55)) {
            ++fails;
            continue;
        }
        rng.s = 8080 + (unsigned)variant;
        q = tu_normal_floats(&rng, CH * CN * CD, sigma);
        k = tu_normal_floats(&rng, CHKV * CN * CD, sigma);
        v = tu_normal_floats(&rng, CHKV * CN * CDV, 1.0);
        dout = tu_normal_floats(&rng, CH * CN * CDV, 1.0);
        grads_alloc(&g0);
        grads_alloc(&g1);
        st = causal_run(&mt, lse, q, k, v, dout, &g0);
        if (st != FAVOR_OK) {
            print_error("  status %s\n", favor_status_string(st));
            ++fails;
            goto next;
        }
        mq = tu_max_abs_f(g0.dq, CH * CN * CD);
        mk = tu_max_abs_f(g0.dk, CHKV * CN * CD);
        mv = tu_max_abs_f(g0.dv, CHKV * CN * CDV);
        /* dout rows < j changed: dk, dv rows >= j unchanged, dv rows < j changed */
        for (ci = 0; ci < sizeof cuts / sizeof cuts[0]; ++ci) {
            size_t j = cuts[ci];
            float *d2 = (float *)malloc(CH * CN * CDV * sizeof *d2);
            double ek, ev, ev2;
            memcpy(d2, dout, CH * CN * CDV * sizeof *d2);
            for (h = 0; h < CH; ++h)
                for (r = 0; r < j; ++r)
                    for (c = 0; c < CDV; ++c) d2[(h * CN + r) * CDV + c] = (float)tu_normal(&rng);
            st = causal_run(&mt, lse, q, k, v, d2, &g1);
            free(d2);
            if (st != FAVOR_OK) {
                print_error("  status %s\n", favor_status_string(st));
                ++fails;
                continue;
            }
            ek = rows_diff(g0.dk, g1.dk, CHKV, CN, CD, j, CN) / mk;
            ev = rows_diff(g0.dv, g1.dv, CHKV, CN, CDV, j, CN) / mv;
            /* dv_r = sum_{i >= r} P_ir dout_i includes changed rows for every r < j
             * (dq_0 would not do: row 0 sees one key, weight 1, so dq_0 = 0) */
            ev2 = rows_diff(g0.dv, g1.dv, CHKV, CN, CDV, 0, j) / mv;
            if (ek > worst) worst = ek;
            if (ev > worst) worst = ev;
            if (!(ek <= 1e-6) || !(ev <= 1e-6)) {
                print_error("  dout rows < %u changed dk rows >= it by %.3g, dv rows by %.3g "
                            "(relative; tolerance 1e-6)\n", (unsigned)j, ek, ev);
                ++fails;
            }
            if (!(ev2 > 1e-3)) {
                print_error("  dout rows < %u changed: dv rows < it moved only %.3g\n",
                            (unsigned)j, ev2);
                ++fails;
            }
        }
        /* k, v rows > i changed: dq rows <= i unchanged, dq rows > i changed */
        for (ci = 0; ci < sizeof cuts / sizeof cuts[0]; ++ci) {
            size_t i = cuts[ci] - 1;
            float *k2 = (float *)malloc(CHKV * CN * CD * sizeof *k2);
            float *v2 = (float *)malloc(CHKV * CN * CDV * sizeof *v2);
            double eq, eq2;
            memcpy(k2, k, CHKV * CN * CD * sizeof *k2);
            memcpy(v2, v, CHKV * CN * CDV * sizeof *v2);
            for (h = 0; h < CHKV; ++h)
                for (r = i + 1; r < CN; ++r) {
                    for (c = 0; c < CD; ++c) k2[(h * CN + r) * CD + c] = (float)(sigma * tu_normal(&rng));
                    for (c = 0; c < CDV; ++c) v2[(h * CN + r) * CDV + c] = (float)tu_normal(&rng);
                }
            st = causal_run(&mt, lse, q, k2, v2, dout, &g1);
            free(k2);
            free(v2);
            if (st != FAVOR_OK) {
                print_error("  status %s\n", favor_status_string(st));
                ++fails;
                continue;
            }
            eq = rows_diff(g0.dq, g1.dq, CH, CN, CD, 0, i + 1) / mq;
            eq2 = rows_diff(g0.dq, g1.dq, CH, CN, CD, i + 1, CN) / mq;
            if (eq > worst) worst = eq;
            if (!(eq <= 1e-6)) {
                print_error("  k, v rows > %u changed dq rows <= it by %.3g (relative; "
                            "tolerance 1e-6)\n", (unsigned)i, eq);
                ++fails;
            }
            if (!(eq2 > 1e-3)) {
                print_error("  k, v rows > %u changed: dq rows > it moved only %.3g\n",
                            (unsigned)i, eq2);
                ++fails;
            }
        }
        print_message("  worst relative change where none is allowed: %.3g\n", worst);
    next:
        free(q); free(k); free(v); free(dout);
        grads_free(&g0);
        grads_free(&g1);
        meth_free(&mt);
    }
    assert_int_equal(fails, 0);
}

/* ---- workspace sizes -------------------------------------------------------------- */

static float dummy_data[16];

/* The tensors of a problem, over a dummy pointer: for the queries only. */
static void dummy_qkv(favor_tensor *q, favor_tensor *k, favor_tensor *v, size_t hq, size_t hkv,
                      size_t n, size_t d, size_t dv)
{
    *q = favor_tensor_packed(dummy_data, hq, n, d);
    *k = favor_tensor_packed(dummy_data, hkv, n, d);
    *v = favor_tensor_packed(dummy_data, hkv, n, dv);
}

static void test_backward_workspace(void **state)
{
    static const size_t cfg[][4] = {
        /* hq hkv  d  dv   (3 hq/hkv vs d + dv) */
        { 4, 4, 64, 64 },  /* 3 <= 128 */
        { 8, 2, 16, 16 },  /* 12 <= 32 */
        { 4, 1,  2, 10 },  /* 12 = 12 */
        { 2, 1,  1,  5 },  /* 6 = 6 */
        { 1, 1,  1,  2 },  /* 3 = 3 */
        { 1, 1,  1,  1 },  /* 3 > 2 */
        { 4, 1,  2,  2 },  /* 12 > 4 */
        { 2, 1,  2,  3 },  /* 6 > 5 */
    };
    size_t i;
    int method, causal, fails = 0;
    (void)state;
    for (i = 0; i < sizeof cfg / sizeof cfg[0]; ++i) {
        size_t hq = cfg[i][0], hkv = cfg[i][1], d = cfg[i][2], dv = cfg[i][3];
        int stash_in_ws = 3 * (hq / hkv) > d + dv;
        for (method = SOFTMAX; method < NKERNELS; ++method) {
            meth mt;
            if (meth_init(&mt, method, d, 64, 3)) {
                ++fails;
                continue;
            }
            print_message("workspace %-10s hq %u hkv %u d %u dv %u (n 1024 -> 1048576):",
                          method_name(method), (unsigned)hq, (unsigned)hkv, (unsigned)d,
                          (unsigned)dv);
            for (causal = 0; causal < 2; ++causal) {
                favor_tensor q, k, v;
                favor_options opt = favor_default_options();
                size_t small, big;
                opt.flags = causal ? FAVOR_CAUSAL : 0u;
                dummy_qkv(&q, &k, &v, hq, hkv, 1024, d, dv);
                small = lib_bwd_ws(&mt, &q, &k, &v, &opt);
                dummy_qkv(&q, &k, &v, hq, hkv, 1048576, d, dv);
                big = lib_bwd_ws(&mt, &q, &k, &v, &opt);
                print_message("  %s %lu -> %lu bytes", causal ? "causal" : "full",
                              (unsigned long)small, (unsigned long)big);
                if (small == 0 || big == 0) {
                    print_error("  a query returned 0\n");
                    ++fails;
                } else if (method != SOFTMAX && causal && stash_in_ws) {
                    if (!(big > small)) {
                        print_error("  3 grp > d + dv: the workspace should grow with n\n");
                        ++fails;
                    }
                } else if (big != small) {
                    print_error("  the workspace depends on n\n");
                    ++fails;
                }
            }
            print_message("\n");
            meth_free(&mt);
        }
    }
    assert_int_equal(fails, 0);
}

/* ---- validation ----------------------------------------------------------------- */

#define VHQ 2
#define VHKV 1
#define VN 5
#define VNK 6
#define VD 4
#define VDV 3
#define VM 8
#define VGAP 64

typedef struct {
    float *arena, *snap;
    size_t len;
    float *q, *k, *v, *o, *dout, *dq, *dk, *dv, *lse, *w;
    size_t tail; /* offset of the free tail (for a workspace inside the arena) */
} vfix;

static float *carve(vfix *fx, size_t *pos, size_t count)
{
    float *p = fx->arena + *pos;
    *pos += count + VGAP;
    return p;
}

static void sentinel(float *p, size_t count)
{
    size_t i;
    uint32_t bits = 0x7fc0beefu; /* a NaN: byte comparisons only */
    for (i = 0; i < count; ++i) memcpy(&p[i], &bits, sizeof bits);
}

static int vcheck(const vfix *fx, const char *op, const char *what, favor_status want,
                  favor_status got)
{
    int fails = 0;
    if (got != want) {
        print_error("  %s, %s: status %s, want %s\n", op, what, favor_status_string(got),
                    favor_status_string(want));
        ++fails;
    }
    if (memcmp(fx->arena, fx->snap, fx->len * sizeof(float)) != 0) {
        print_error("  %s, %s: a buffer was written\n", op, what);
        ++fails;
    }
    return fails;
}

enum { VT_Q, VT_K, VT_V, VT_O, VT_DOUT, VT_DQ, VT_DK, VT_DV, VT_COUNT };

static void test_backward_validation(void **state)
{
    vfix fx;
    tu_rng rng;
    favor_features f;
    favor_tensor T[VT_COUNT];
    favor_options good = favor_default_options();
    size_t pos = 0, wsm, wlin, wsmax, i, wfloats = favor_features_floats(FAVOR_POSITIVE, VD, VM);
    favor_status st;
    int fails = 0, op, c, checked = 0;
    void *ws;
    (void)state;

    good.flags = FAVOR_CAUSAL;
    /* workspace sizes first (over dummy tensors of the same shapes), the arena after */
    fx.len = (VHQ * VN * VD + VHKV * VNK * VD + VHKV * VNK * VDV + 2 * VHQ * VN * VDV +
              VHQ * VN * VD + VHKV * VNK * VD + VHKV * VNK * VDV + VHQ * VN + wfloats) +
             10 * VGAP;
    {
        favor_tensor q, k, v;
        favor_features f0;
        float *w0 = (float *)malloc(wfloats * sizeof *w0);
        dummy_qkv(&q, &k, &v, VHQ, VHKV, VN, VD, VDV);
        k.rows = v.rows = VNK;
        k.head_stride = VNK * VD;
        v.head_stride = VNK * VDV;
        favor_features_init(&f0, FAVOR_POSITIVE, VD, VM, 0, 1, w0);
        wsm = favor_softmax_attention_backward_workspace(&q, &k, &v, &good);
        wlin = favor_linear_attention_backward_workspace(&f0, &q, &k, &v, &good);
        free(w0);
    }
    assert_true(wsm > 0);
    assert_true(wlin > 0);
    wsmax = (wsm > wlin ? wsm : wlin) / sizeof(float) + 64;
    fx.len += wsmax;
    fx.arena = (float *)malloc(fx.len * sizeof(float));
    fx.snap = (float *)malloc(fx.len * sizeof(float));
    rng.s = 2024;
    for (i = 0; i < fx.len; ++i) fx.arena[i] = (float)tu_normal(&rng);
    fx.q = carve(&fx, &pos, VHQ * VN * VD);
    fx.k = carve(&fx, &pos, VHKV * VNK * VD);
    fx.v = carve(&fx, &pos, VHKV * VNK * VDV);
    fx.o = carve(&fx, &pos, VHQ * VN * VDV);
    fx.dout = carve(&fx, &pos, VHQ * VN * VDV);
    fx.dq = carve(&fx, &pos, VHQ * VN * VD);
    fx.dk = carve(&fx, &pos, VHKV * VNK * VD);
    fx.dv = carve(&fx, &pos, VHKV * VNK * VDV);
    fx.lse = carve(&fx, &pos, VHQ * VN);
    fx.w = carve(&fx, &pos, wfloats);
    fx.tail = pos;
    assert_true(fx.tail + wsmax <= fx.len);
    assert_int_equal(favor_features_init(&f, FAVOR_POSITIVE, VD, VM, 0, 5, fx.w), FAVOR_OK);

    T[VT_Q] = favor_tensor_packed(fx.q, VHQ, VN, VD);
    T[VT_K] = favor_tensor_packed(fx.k, VHKV, VNK, VD);
    T[VT_V] = favor_tensor_packed(fx.v, VHKV, VNK, VDV);
    T[VT_O] = favor_tensor_packed(fx.o, VHQ, VN, VDV);
    T[VT_DOUT] = favor_tensor_packed(fx.dout, VHQ, VN, VDV);
    T[VT_DQ] = favor_tensor_packed(fx.dq, VHQ, VN, VD);
    T[VT_DK] = favor_tensor_packed(fx.dk, VHKV, VNK, VD);
    T[VT_DV] = favor_tensor_packed(fx.dv, VHKV, VNK, VDV);
    good.lse = fx.lse;
    /* a valid forward (out, lse) and valid backward calls first */
    assert_int_equal(favor_softmax_attention(&T[VT_Q], &T[VT_K], &T[VT_V], &T[VT_O], &good),
                     FAVOR_OK);
    assert_int_equal(favor_softmax_attention_backward(&T[VT_Q], &T[VT_K], &T[VT_V], &T[VT_O],
                                                      &T[VT_DOUT], &T[VT_DQ], &T[VT_DK],
                                                      &T[VT_DV], &good),
                     FAVOR_OK);
    assert_int_equal(favor_linear_attention_backward(&f, &T[VT_Q], &T[VT_K], &T[VT_V],
                                                     &T[VT_DOUT], &T[VT_DQ], &T[VT_DK],
                                                     &T[VT_DV], &good),
                     FAVOR_OK);
    sentinel(fx.dq, VHQ * VN * VD);
    sentinel(fx.dk, VHKV * VNK * VD);
    sentinel(fx.dv, VHKV * VNK * VDV);
    memcpy(fx.snap, fx.arena, fx.len * sizeof(float));
    ws = malloc(wsmax * sizeof(float));

    /* op 0: softmax backward, 1: linear backward */
    for (op = 0; op < 2; ++op) {
        const char *opname = op ? "linear backward" : "softmax backward";
        size_t wsize = op ? wlin : wsm;
        for (c = 0; c < 40; ++c) {
            favor_tensor t[VT_COUNT];
            const favor_tensor *p[VT_COUNT];
            favor_features ff = f;
            const favor_features *pf = &ff;
            favor_options o = good;
            const favor_options *po = &o;
            favor_status want = FAVOR_OK;
            const char *what = "?";
            int j;
            memcpy(t, T, sizeof t);
            for (j = 0; j < VT_COUNT; ++j) p[j] = &t[j];
            o.workspace = ws;
            o.workspace_size = wsize;
            switch (c) {
            case 0: p[VT_Q] = NULL; want = FAVOR_E_NULL; what = "q NULL"; break;
            case 1: p[VT_K] = NULL; want = FAVOR_E_NULL; what = "k NULL"; break;
            case 2: p[VT_V] = NULL; want = FAVOR_E_NULL; what = "v NULL"; break;
            case 3:
                if (op) continue; /* linear has no out */
                p[VT_O] = NULL; want = FAVOR_E_NULL; what = "out NULL"; break;
            case 4: p[VT_DOUT] = NULL; want = FAVOR_E_NULL; what = "dout NULL"; break;
            case 5: p[VT_DQ] = NULL; want = FAVOR_E_NULL; what = "dq NULL"; break;
            case 6: p[VT_DK] = NULL; want = FAVOR_E_NULL; what = "dk NULL"; break;
            case 7: p[VT_DV] = NULL; want = FAVOR_E_NULL; what = "dv NULL"; break;
            case 8: t[VT_DQ].data = NULL; want = FAVOR_E_NULL; what = "dq.data NULL"; break;
            case 9: t[VT_DV].data = NULL; want = FAVOR_E_NULL; what = "dv.data NULL"; break;
            case 10:
                if (!op) continue;
                pf = NULL; want = FAVOR_E_NULL; what = "f NULL"; break;
            case 11: t[VT_DQ].rows = VN + 1; want = FAVOR_E_SHAPE; what = "dq rows n+1"; break;
            case 12:
                t[VT_DQ].cols = VD + 1; t[VT_DQ].row_stride = VD + 1;
                t[VT_DQ].head_stride = VN * (VD + 1);
                want = FAVOR_E_SHAPE; what = "dq cols d+1"; break;
            case 13:
                t[VT_DQ].heads = VHKV; want = FAVOR_E_SHAPE; what = "dq heads hkv"; break;
            case 14: t[VT_DK].rows = VNK - 1; want = FAVOR_E_SHAPE; what = "dk rows nk-1"; break;
            case 15: t[VT_DK].heads = VHQ; want = FAVOR_E_SHAPE; what = "dk heads hq"; break;
            case 16:
                t[VT_DV].cols = VDV + 1; t[VT_DV].row_stride = VDV + 1;
                t[VT_DV].head_stride = VNK * (VDV + 1);
                want = FAVOR_E_SHAPE; what = "dv cols dv+1"; break;
            case 17: t[VT_DV].rows = VNK + 1; want = FAVOR_E_SHAPE; what = "dv rows nk+1"; break;
            case 18:
                t[VT_DOUT].cols = VDV - 1; want = FAVOR_E_SHAPE; what = "dout cols dv-1"; break;
            case 19: t[VT_DOUT].rows = VN - 1; want = FAVOR_E_SHAPE; what = "dout rows n-1"; break;
            case 20: t[VT_DQ].rows = 0; want = FAVOR_E_SHAPE; what = "dq rows 0"; break;
            case 21:
                t[VT_DQ].data = fx.q + 1; want = FAVOR_E_ALIAS; what = "dq overlaps q"; break;
            case 22:
                t[VT_DK].data = fx.dv; want = FAVOR_E_ALIAS; what = "dk overlaps dv"; break;
            case 23:
                t[VT_DQ].data = fx.dout + 2; want = FAVOR_E_ALIAS; what = "dq overlaps dout";
                break;
            case 24: t[VT_DV].data = fx.k; want = FAVOR_E_ALIAS; what = "dv overlaps k"; break;
            case 25:
                if (op) continue;
                t[VT_DK].data = fx.o + 3; want = FAVOR_E_ALIAS; what = "dk overlaps out"; break;
            case 26:
                if (op) continue; /* linear ignores lse */
                o.lse = fx.dq + 2; want = FAVOR_E_ALIAS; what = "lse overlaps dq"; break;
            case 27:
                if (!op) continue;
                t[VT_DK].data = fx.w; want = FAVOR_E_ALIAS; what = "dk overlaps W"; break;
            case 28:
                t[VT_DV].data = fx.dq + VN * VD; want = FAVOR_E_ALIAS; what = "dv overlaps dq";
                break;
            case 29:
                o.workspace_size = wsize - 1; want = FAVOR_E_WORKSPACE;
                what = "workspace one byte short"; break;
            case 30:
                o.workspace_size = 0; want = FAVOR_E_WORKSPACE; what = "workspace size 0"; break;
            case 31:
                o.workspace = fx.dk; want = FAVOR_E_ALIAS; what = "workspace overlaps dk"; break;
            case 32: o.flags = 8u; want = FAVOR_E_ARG; what = "flags 8"; break;
            case 33: o.flags = FAVOR_CAUSAL | 8u; want = FAVOR_E_ARG; what = "flags 9"; break;
            case 34: o.scale = -1.0f; want = FAVOR_E_ARG; what = "scale -1"; break;
            case 35: o.scale = (float)NAN; want = FAVOR_E_ARG; what = "scale NaN"; break;
            case 36: o.threads = -1; want = FAVOR_E_ARG; what = "threads -1"; break;
            case 37:
                if (!op) continue;
                ff.kernel = (favor_kernel)99; want = FAVOR_E_ARG; what = "kernel 99"; break;
            case 38:
                if (!op) continue;
                t[VT_Q].cols = t[VT_K].cols = t[VT_DQ].cols = t[VT_DK].cols = VD - 1;
                want = FAVOR_E_SHAPE; what = "d != f->dim"; break;
            case 39:
                t[VT_DK].cols = VD - 1; want = FAVOR_E_SHAPE; what = "dk cols d-1"; break;
            default: continue;
            }
            st = op ? favor_linear_attention_backward(pf, p[VT_Q], p[VT_K], p[VT_V], p[VT_DOUT],
                                                      p[VT_DQ], p[VT_DK], p[VT_DV], po)
                    : favor_softmax_attention_backward(p[VT_Q], p[VT_K], p[VT_V], p[VT_O],
                                                       p[VT_DOUT], p[VT_DQ], p[VT_DK],
                                                       p[VT_DV], po);
            fails += vcheck(&fx, opname, what, want, st);
            ++checked;
            memcpy(fx.arena, fx.snap, fx.len * sizeof(float)); /* for the next case */
        }
    }
    /* the forward's lse is an output: it may not overlap an input */
    {
        favor_options o = good;
        o.lse = fx.q + 1;
        st = favor_softmax_attention(&T[VT_Q], &T[VT_K], &T[VT_V], &T[VT_O], &o);
        fails += vcheck(&fx, "softmax forward", "lse overlaps q", FAVOR_E_ALIAS, st);
        memcpy(fx.arena, fx.snap, fx.len * sizeof(float));
        o.lse = fx.k;
        st = favor_softmax_attention(&T[VT_Q], &T[VT_K], &T[VT_V], &T[VT_O], &o);
        fails += vcheck(&fx, "softmax forward", "lse overlaps k", FAVOR_E_ALIAS, st);
        memcpy(fx.arena, fx.snap, fx.len * sizeof(float));
    }
    print_message("validation: %d bad calls checked, %d failures\n", checked + 2, fails);
    free(ws);
    free(fx.arena);
    free(fx.snap);
    assert_int_equal(fails, 0);
}

/* ---- threads ---------------------------------------------------------------------- */

static void test_backward_threads(void **state)
{
    static const size_t cfg[][6] = {
        /* hq hkv    n   nk   d  dv */
        { 4, 2, 150, 150, 16, 8 },
        { 4, 2,  90, 150, 16, 8 },
        { 4, 4, 150,  90, 16, 8 },
        { 4, 2, 100, 100,  2, 2 }, /* causal linear stash in the workspace */
        /* one key/value head: split inside it (softmax: key parts and query
           blocks on 2+ threads; linear: 2 key segments, non-causal row parts;
           causal: keys every row sees, then the scan both ways) */
        { 4, 1, 300, 700, 8, 8 },
        { 2, 1, 600, 600, 8, 4 },
        /* softmax only (cheap under valgrind; the shapes above cover the linear
           splits): n_k over 32 parts of 512 keys, so parts of 576 keys, 29 of them */
        { 2, 1, 24, 16500, 1, 1 },
        /* elu+1 only, its last 60 query rows moved by FALL = -30: their
           log-denominators fall far below the earlier rows', so the causal split's
           suffix sums bring an earlier segment's partials down to a later one's
           scale (favor__bwd_sums_merge's x < 0; no other shape reaches it) */
        { 2, 1, 600, 600, 8, 4 },
    };
    const size_t FALL_ROW = sizeof cfg / sizeof cfg[0] - 1; /* the last */
    const float FALL = -30.0f;
    static const int counts[] = { 1, 2, 3, 4, 16 };
#define NCOUNTS (sizeof counts / sizeof counts[0])
    size_t ci;
    int variant, causal, fails = 0;
    (void)state;
    for (ci = 0; ci < sizeof cfg / sizeof cfg[0]; ++ci) {
        size_t hq = cfg[ci][0], hkv = cfg[ci][1], n = cfg[ci][2], nk = cfg[ci][3],
               d = cfg[ci][4], dv = cfg[ci][5];
        size_t nq = hq * n * d, nkk = hkv * nk * d, nv = hkv * nk * dv, no = hq * n * dv;
        for (variant = 0; variant < (nk > 4096 ? 2 : 2 + NKERNELS); ++variant)
            for (causal = 0; causal < 2; ++causal) {
                int method = variant < 2 ? SOFTMAX : (int)kernels[variant - 2], lse = variant == 1;
                double sigma = method == FAVOR_TRIG ? 0.3 : 1.0;
                meth mt;
                tu_rng rng;
                float *q, *k, *v, *o, *dout, *lsebuf, *res[NCOUNTS][3];
                unsigned char *ws = NULL;
                size_t wsb = 0;
                int th, nc = (int)TU_COUNTS(NCOUNTS, 2); /* 2: a caller workspace too */
                favor_tensor Q, K, V, O, dO;
                if (ci == FALL_ROW && method != (int)FAVOR_ELU1) continue;
                if (meth_init(&mt, method, d, 32, 8)) {
                    ++fails;
                    continue;
                }
                rng.s = 99 + ci * 10 + (unsigned)variant;
                q = tu_normal_floats(&rng, nq, sigma);
                if (ci == FALL_ROW) { /* the last tenth of each head's rows */
                    size_t e;
                    for (e = 0; e < nq; ++e)
                        if ((e / d) % n >= n - n / 10) q[e] += FALL;
                }
                k = tu_normal_floats(&rng, nkk, sigma);
                v = tu_normal_floats(&rng, nv, 1.0);
                dout = tu_normal_floats(&rng, no, 1.0);
                o = (float *)malloc(no * sizeof *o);
                lsebuf = (float *)malloc(hq * n * sizeof *lsebuf);
                Q = favor_tensor_packed(q, hq, n, d);
                K = favor_tensor_packed(k, hkv, nk, d);
                V = favor_tensor_packed(v, hkv, nk, dv);
                O = favor_tensor_packed(o, hq, n, dv);
                dO = favor_tensor_packed(dout, hq, n, dv);
                for (th = 0; th < nc; ++th) {
                    favor_options opt = favor_default_options();
                    favor_tensor dQ, dK, dV;
                    favor_status st;
                    res[th][0] = (float *)malloc(nq * sizeof(float));
                    res[th][1] = (float *)malloc(nkk * sizeof(float));
                    res[th][2] = (float *)malloc(nv * sizeof(float));
                    dQ = favor_tensor_packed(res[th][0], hq, n, d);
                    dK = favor_tensor_packed(res[th][1], hkv, nk, d);
                    dV = favor_tensor_packed(res[th][2], hkv, nk, dv);
                    opt.flags = causal ? FAVOR_CAUSAL : 0u;
                    opt.threads = counts[th];
                    if (lse) opt.lse = lsebuf;
                    st = FAVOR_OK;
                    if (method == SOFTMAX) st = favor_softmax_attention(&Q, &K, &V, &O, &opt);
                    if (th > 0) { /* a caller workspace of the size for this thread count */
                        wsb = lib_bwd_ws(&mt, &Q, &K, &V, &opt);
                        ws = (unsigned char *)malloc(wsb + WS_GUARD);
                        memset(ws, 0xa5, wsb + WS_GUARD);
                        opt.workspace = ws;
                        opt.workspace_size = wsb;
                    }
                    if (st == FAVOR_OK)
                        st = lib_bwd(&mt, &Q, &K, &V, &O, &dO, &dQ, &dK, &dV, &opt);
                    if (st != FAVOR_OK) {
                        print_error("  %s status %s\n", method_name(method),
                                    favor_status_string(st));
                        ++fails;
                    }
                    if (ws) {
                        size_t u;
                        for (u = 0; u < WS_GUARD; ++u)
                            if (ws[wsb + u] != 0xa5) {
                                print_error("  %s threads %d: wrote past the queried "
                                            "workspace\n", method_name(method), counts[th]);
                                ++fails;
                                break;
                            }
                        free(ws);
                        ws = NULL;
                    }
                }
                for (th = 1; th < nc; ++th)
                    if (memcmp(res[th][0], res[0][0], nq * sizeof(float)) != 0 ||
                        memcmp(res[th][1], res[0][1], nkk * sizeof(float)) != 0 ||
                        memcmp(res[th][2], res[0][2], nv * sizeof(float)) != 0) {
                        print_error("  %s%s hq %u hkv %u n %u nk %u d %u dv %u %s: threads = %d "
                                    "differs from threads = 1\n", method_name(method),
                                    lse ? "+lse" : "", (unsigned)hq, (unsigned)hkv, (unsigned)n,
                                    (unsigned)nk, (unsigned)d, (unsigned)dv,
                                    causal ? "causal" : "full", counts[th]);
                        ++fails;
                    }
                if (!tu_all_finite(res[0][0], nq) || !tu_all_finite(res[0][1], nkk) ||
                    !tu_all_finite(res[0][2], nv)) {
                    print_error("  %s: a gradient is not finite\n", method_name(method));
                    ++fails;
                }
                for (th = 0; th < nc; ++th) {
                    free(res[th][0]);
                    free(res[th][1]);
                    free(res[th][2]);
                }
                free(q); free(k); free(v); free(o); free(dout); free(lsebuf);
                meth_free(&mt);
            }
    }
    print_message("threads: %d mismatches\n", fails);
    assert_int_equal(fails, 0);
}

/* The promise at its edge: inputs up to 1e4 and scale 1e4 make scores of order
 * 1e13, where one rounding is about 1e6. The backward recomputes the scores in
 * the prefill order; a forward of at most 32 query rows takes the decode path,
 * whose order differs, so the lse it leaves may lie below a recomputed score by
 * far more than exp's range. The gradients must stay finite, with the lse from
 * the forward or recomputed, causal or not, on both forward paths. */
static void test_backward_large_scores(void **state)
{
    static const size_t rows[] = { 1, 9, 32, 33, 70 };
    enum { H = 2, NK = 80, D = 19 };
    size_t ri, i;
    int causal, lse, fails = 0;
    (void)state;
    for (ri = 0; ri < sizeof rows / sizeof rows[0]; ++ri)
        for (causal = 0; causal < 2; ++causal)
            for (lse = 0; lse < 2; ++lse) {
                size_t n = rows[ri], nq = H * n * D, nkv = H * NK * D;
                float *buf = (float *)malloc((4 * nq + 4 * nkv + H * n) * sizeof(float));
                float *q = buf, *o = q + nq, *dout = o + nq, *dq = dout + nq, *k = dq + nq;
                float *v = k + nkv, *dk = v + nkv, *dv = dk + nkv, *lsebuf = dv + nkv;
                favor_options opt = favor_default_options();
                favor_tensor Q = favor_tensor_packed(q, H, n, D), K = favor_tensor_packed(k, H, NK, D),
                             V = favor_tensor_packed(v, H, NK, D), O = favor_tensor_packed(o, H, n, D),
                             dO = favor_tensor_packed(dout, H, n, D),
                             dQ = favor_tensor_packed(dq, H, n, D),
                             dK = favor_tensor_packed(dk, H, NK, D),
                             dV = favor_tensor_packed(dv, H, NK, D);
                tu_rng rng;
                rng.s = 4242 + ri;
                for (i = 0; i < nq; ++i) {
                    q[i] = (float)(2e4 * tu_uniform(&rng) - 1e4);
                    dout[i] = (float)(2e4 * tu_uniform(&rng) - 1e4);
                }
                for (i = 0; i < nkv; ++i) {
                    k[i] = (float)(2e4 * tu_uniform(&rng) - 1e4);
                    v[i] = (float)(2e4 * tu_uniform(&rng) - 1e4);
                }
                opt.flags = causal ? FAVOR_CAUSAL : 0u;
                opt.scale = 1e4f;
                if (lse) opt.lse = lsebuf;
                assert_int_equal(favor_softmax_attention(&Q, &K, &V, &O, &opt), FAVOR_OK);
                assert_int_equal(favor_softmax_attention_backward(&Q, &K, &V, &O, &dO, &dQ, &dK, &dV,
                                                                  &opt),
                                 FAVOR_OK);
                if (!tu_all_finite(o, nq) || !tu_all_finite(dq, nq) || !tu_all_finite(dk, nkv) ||
                    !tu_all_finite(dv, nkv)) {
                    print_error("  n %u %s%s: a gradient is not finite\n", (unsigned)n,
                                causal ? "causal" : "full", lse ? " +lse" : "");
                    ++fails;
                }
                free(buf);
            }
    assert_int_equal(fails, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_matches_fd),
        cmocka_unit_test(test_library_matches_fd),
        cmocka_unit_test(test_backward_accuracy),
        cmocka_unit_test(test_backward_stash),
        cmocka_unit_test(test_backward_causality),
        cmocka_unit_test(test_backward_workspace),
        cmocka_unit_test(test_backward_validation),
        cmocka_unit_test(test_backward_threads),
        cmocka_unit_test(test_backward_large_scores),
    };
    if (tu_check_backend() != 0) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
