/* Causality and the recurrent form of causal linear attention.
 *
 * (a) No future dependence: for every kernel (ELU1, POSITIVE, HYPERBOLIC, TRIG,
 *     RELU, POLY2) in three forms (one causal favor_linear_attention call,
 *     favor_linear_extend in blocks, favor_linear_step token by token) and for
 *     causal softmax attention: changing key and value row j (to values of
 *     magnitude ~1e3, and separately to ordinary random values) leaves every
 *     output row i < j unchanged (|a - b| <= 1e-6 max(|a|, |b|)), and row j does
 *     change (so the test can fail). j = 5 (inside the first 64-token chunk),
 *     64 (a chunk boundary) and 130, n = 200, 4 query heads on 2 kv heads.
 * (b) Recurrent equals parallel: n = 300, 4 query heads on 2 kv heads (GQA) and
 *     on 4: one causal favor_linear_attention call, favor_linear_extend in blocks
 *     of 1, 7, 64 and 228 tokens, and 300 favor_linear_step calls agree within
 *     1e-5 * max|O|, and so do runs of steps and extends in turn (5 steps,
 *     extend 7, 20 steps, extend 1, ...: every extend folds a different number
 *     of pending step tokens). favor_state_reset makes a second extend run bit-for-bit
 *     identical to the first. A causal call with n_k > n (a prefix of n_k - n
 *     keys) equals extend (or step) over the prefix tokens, outputs discarded,
 *     followed by extend (or step) over the last n, and matches ref_linear.
 * (c) State storage fully defined after init and reset (see the test), and the
 *     whole state: a copy of its bytes, pending step tokens included, continues
 *     bit for bit as the original does.
 *
 * Every random-feature map has m = 64. TRIG takes inputs N(0, 0.3^2) throughout
 * (except the ~1e3 rows of (a)): with d = 16, |q' - k'|^2 is about 0.7, so each
 * feature product estimates exp(s q.k) with mean >= ~0.7 exp(s q.k) and noise
 * ~0.1, and the denominators stay well away from zero. The other kernels take
 * N(0, 1) inputs. */
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
#define NKERNELS (sizeof kernels / sizeof kernels[0])
#define kernel_name tu_kernel_name

static size_t kernel_m(favor_kernel k, size_t d)
{
    return tu_fixed(k) ? d : 64;
}

static double kernel_sigma(favor_kernel k) { return k == FAVOR_TRIG ? 0.3 : 1.0; }

/* features of kernel for d-dimensional inputs in new storage (*storage, NULL for
 * ELU1); on a failure, reported, nothing is left allocated */
static favor_status make_features(favor_features *f, favor_kernel kernel, size_t d,
                                  unsigned long long seed, float **storage)
{
    size_t m = kernel_m(kernel, d), floats = favor_features_floats(kernel, d, m);
    favor_status s;
    *storage = floats ? (float *)malloc(floats * sizeof(float)) : NULL;
    s = favor_features_init(f, kernel, d, m, 0, seed, *storage);
    if (s != FAVOR_OK) {
        print_error("  favor_features_init: %s\n", favor_status_string(s));
        free(*storage);
        *storage = NULL;
    }
    return s;
}

enum { FORM_BLOCK, FORM_EXTEND, FORM_STEP, FORM_SOFTMAX, FORM_MIXED };

static const char *form_name(int form)
{
    switch (form) {
    case FORM_BLOCK: return "linear_attention";
    case FORM_EXTEND: return "extend";
    case FORM_STEP: return "step";
    case FORM_SOFTMAX: return "softmax";
    case FORM_MIXED: return "steps and extends";
    }
    return "?";
}

/* favor_linear_extend over consecutive blocks of Q, K, V rows (sizes sum to
 * Q->rows == K->rows), writing the matching rows of O. */
static favor_status extend_blocks(const favor_features *f, favor_state *st,
                                  const favor_tensor *Q, const favor_tensor *K,
                                  const favor_tensor *V, const favor_tensor *O,
                                  const size_t *blocks, size_t nblocks)
{
    size_t b, r0 = 0;
    for (b = 0; b < nblocks; ++b) {
        favor_tensor q = tv_rows(Q, r0, blocks[b]), k = tv_rows(K, r0, blocks[b]);
        favor_tensor v = tv_rows(V, r0, blocks[b]), o = tv_rows(O, r0, blocks[b]);
        favor_status s = favor_linear_extend(f, st, &q, &k, &v, &o, NULL);
        if (s != FAVOR_OK) return s;
        r0 += blocks[b];
    }
    return FAVOR_OK;
}

/* favor_linear_step for every row of Q, K, V. */
static favor_status step_all(const favor_features *f, favor_state *st, const favor_tensor *Q,
                             const favor_tensor *K, const favor_tensor *V,
                             const favor_tensor *O)
{
    size_t t;
    for (t = 0; t < Q->rows; ++t) {
        favor_tensor q = tv_rows(Q, t, 1), k = tv_rows(K, t, 1);
        favor_tensor v = tv_rows(V, t, 1), o = tv_rows(O, t, 1);
        favor_status s = favor_linear_step(f, st, &q, &k, &v, &o);
        if (s != FAVOR_OK) return s;
    }
    return FAVOR_OK;
}

/* Steps and extends in turn: runs of steps leave 0 to 15 tokens in the state's
 * pending block (16 fold), so each extend starts by folding a different count;
 * the last extend takes the rest of the rows. */
static favor_status mixed_all(const favor_features *f, favor_state *st, const favor_tensor *Q,
                              const favor_tensor *K, const favor_tensor *V,
                              const favor_tensor *O)
{
    static const size_t runs[] = { 5, 7, 20, 1, 33, 64, 16, 9, 3, 2 }; /* steps, extend, ... */
    size_t i, r0 = 0;
    for (i = 0; r0 < Q->rows; ++i) {
        size_t len = i < sizeof runs / sizeof runs[0] ? runs[i] : Q->rows - r0;
        favor_tensor q, k, v, o;
        favor_status s;
        if (len > Q->rows - r0 || (i >= sizeof runs / sizeof runs[0] && i % 2 == 0))
            len = Q->rows - r0; /* the rest, as an extend */
        q = tv_rows(Q, r0, len);
        k = tv_rows(K, r0, len);
        v = tv_rows(V, r0, len);
        o = tv_rows(O, r0, len);
        s = i % 2 == 0 && i < sizeof runs / sizeof runs[0] ? step_all(f, st, &q, &k, &v, &o)
                                                           : favor_linear_extend(f, st, &q, &k, &v, &o, NULL);
        if (s != FAVOR_OK) return s;
        r0 += len;
    }
    return FAVOR_OK;
}

/* The causal output of the whole sequence in one of the forms, from a fresh state. */
static favor_status run_form(const favor_features *f, int form, const favor_tensor *Q,
                             const favor_tensor *K, const favor_tensor *V,
                             const favor_tensor *O, const size_t *blocks, size_t nblocks)
{
    favor_options opt = favor_default_options();
    favor_state st;
    float *store;
    favor_status s;
    opt.flags = FAVOR_CAUSAL;
    if (form == FORM_SOFTMAX) return favor_softmax_attention(Q, K, V, O, &opt);
    if (form == FORM_BLOCK) return favor_linear_attention(f, Q, K, V, O, &opt);
    store = (float *)malloc(favor_state_floats(f, K->heads, V->cols) * sizeof *store);
    s = favor_state_init(&st, f, K->heads, V->cols, store);
    if (s == FAVOR_OK)
        s = form == FORM_EXTEND  ? extend_blocks(f, &st, Q, K, V, O, blocks, nblocks)
            : form == FORM_MIXED ? mixed_all(f, &st, Q, K, V, O)
                                 : step_all(f, &st, Q, K, V, O);
    if (s == FAVOR_OK && st.tokens != K->rows) {
        print_error("  state.tokens %llu after %u tokens\n", st.tokens, (unsigned)K->rows);
        s = FAVOR_E_ARG;
    }
    free(store);
    return s;
}

/* ---- (a) no future dependence ------------------------------------------------ */

static int same(float a, float b)
{
    double x = a, y = b;
    return fabs(x - y) <= 1e-6 * (fabs(x) > fabs(y) ? fabs(x) : fabs(y)) + 1e-30;
}

static int check_prefix_unchanged(const tv_buf *O0, const tv_buf *O1, size_t j,
                                  const char *what)
{
    size_t h, i, c;
    int fails = 0, changed = 0;
    for (h = 0; h < O0->t.heads; ++h) {
        for (i = 0; i < j; ++i)
            for (c = 0; c < O0->t.cols; ++c) {
                float a = tu_at(&O0->t, h, i, c), b = tu_at(&O1->t, h, i, c);
                if (!same(a, b)) {
                    if (fails < 3)
                        print_error("  %s: row %u (head %u col %u) changed when key %u "
                                    "changed: %.9g -> %.9g\n", what, (unsigned)i,
                                    (unsigned)h, (unsigned)c, (unsigned)j, (double)a,
                                    (double)b);
                    ++fails;
                }
            }
        for (c = 0; c < O0->t.cols; ++c)
            if (!same(tu_at(&O0->t, h, j, c), tu_at(&O1->t, h, j, c))) changed = 1;
    }
    if (!changed) {
        print_error("  %s: row %u did not change when its own key/value changed\n", what,
                    (unsigned)j);
        ++fails;
    }
    if (!tv_view_finite(O1)) {
        print_error("  %s: output not finite\n", what);
        ++fails;
    }
    return fails ? 1 : 0;
}

/* the buffers of a no-future-dependence case: queries, keys, values and the
 * outputs before (O0) and after (O1) a key changes */
typedef struct {
    tv_buf Q, K, V, O0, O1;
} fd_bufs;

static void fd_make(fd_bufs *b, tu_rng *rng, size_t hq, size_t hkv, size_t n, size_t d,
                    size_t dv, double sq, double sk, double sv)
{
    tv_make(&b->Q, hq, n, d, TV_PACKED, rng, sq);
    tv_make(&b->K, hkv, n, d, TV_INTERLEAVED, rng, sk);
    tv_make(&b->V, hkv, n, dv, TV_INTERLEAVED, rng, sv);
    tv_make(&b->O0, hq, n, dv, TV_PACKED, rng, -1);
    tv_make(&b->O1, hq, n, dv, TV_PACKED, rng, -1);
}

static void fd_free(fd_bufs *b)
{
    tv_free(&b->Q);
    tv_free(&b->K);
    tv_free(&b->V);
    tv_free(&b->O0);
    tv_free(&b->O1);
}

/* the outputs before any change, into O0: 0, or 1 (reported) when the call fails
 * or gives non-finite values */
static int fd_baseline(const favor_features *f, int form, fd_bufs *b, const size_t *blocks)
{
    favor_status s = run_form(f, form, &b->Q.t, &b->K.t, &b->V.t, &b->O0.t, blocks, 3);
    if (s == FAVOR_OK && tv_view_finite(&b->O0)) return 0;
    print_error("  baseline: %s%s\n", favor_status_string(s),
                s == FAVOR_OK ? ", output not finite" : "");
    return 1;
}

/* after key/value row j was changed: run again into O1, check the rows before j,
 * and put K and V back. 0, or 1 on a failure (reported). */
static int fd_rerun(const favor_features *f, int form, fd_bufs *b, const size_t *blocks,
                    size_t j, const char *label)
{
    favor_status s;
    int fails;
    tv_reset(&b->O1);
    s = run_form(f, form, &b->Q.t, &b->K.t, &b->V.t, &b->O1.t, blocks, 3);
    if (s != FAVOR_OK) {
        print_error("  %s: %s\n", label, favor_status_string(s));
        fails = 1;
    } else {
        fails = check_prefix_unchanged(&b->O0, &b->O1, j, label);
    }
    tv_reset(&b->K);
    tv_reset(&b->V);
    return fails;
}

static void test_no_future_dependence(void **state)
{
    static const size_t js[] = { 5, 64, 130 };
    static const size_t blocks[] = { 30, 64, 106 };
    const size_t hq = 4, hkv = 2, n = 200, d = 16, dv = 8;
    size_t method, ji, kind, h, c;
    int fails = 0;
    (void)state;
    for (method = 0; method < NKERNELS * 3 + 1; ++method) {
        int form = method == NKERNELS * 3 ? FORM_SOFTMAX : (int)(method % 3);
        favor_kernel kernel = form == FORM_SOFTMAX ? FAVOR_ELU1 : kernels[method / 3];
        double sigma = form == FORM_SOFTMAX ? 1.0 : kernel_sigma(kernel);
        favor_features f;
        float *wstore = NULL;
        tu_rng rng;
        fd_bufs b;
        char what[64];

        sprintf(what, "%s %s", form == FORM_SOFTMAX ? "" : kernel_name(kernel),
                form_name(form));
        print_message("no future dependence: %s\n", what);
        if (make_features(&f, kernel, d, 11 + method, &wstore) != FAVOR_OK) {
            ++fails;
            continue;
        }
        rng.s = 20000 + method;
        fd_make(&b, &rng, hq, hkv, n, d, dv, sigma, sigma, sigma);
        if (fd_baseline(&f, form, &b, blocks)) {
            ++fails;
        } else {
            for (ji = 0; ji < sizeof js / sizeof js[0]; ++ji)
                for (kind = 0; kind < 2; ++kind) {
                    size_t j = js[ji];
                    /* kind 0: magnitude ~1e3; kind 1: ordinary values */
                    double amp = kind == 0 ? 1e3 : sigma;
                    char label[128];
                    for (h = 0; h < hkv; ++h) {
                        for (c = 0; c < d; ++c)
                            b.K.buf[h * b.K.t.head_stride + j * b.K.t.row_stride + c] =
                                (float)(amp * tu_normal(&rng));
                        for (c = 0; c < dv; ++c)
                            b.V.buf[h * b.V.t.head_stride + j * b.V.t.row_stride + c] =
                                (float)(amp * tu_normal(&rng));
                    }
                    sprintf(label, "%s, key %u set to %s values", what, (unsigned)j,
                            kind == 0 ? "1e3" : "ordinary");
                    fails += fd_rerun(&f, form, &b, blocks, j, label);
                }
        }
        fd_free(&b);
        free(wstore);
    }
    assert_int_equal(fails, 0);
}

/* The same for a key built to raise the key stabilizer as far as any key can:
 * for POSITIVE and HYPERBOLIC the log-scale of phi(k) is max_l |w_l.k'| - |k'|^2/2,
 * which a key of magnitude 1e3 makes very negative (it never raises a running
 * maximum) but k' = w_l (l the row of W with the largest norm) makes |w_l|^2/2.
 * The other keys are N(0, 10^2), whose log-scales are near -150, so a
 * stabilizer that looked ahead at key j would underflow every earlier key and
 * change the earlier rows. Queries and values are N(0, 1). */
static void test_no_future_dependence_stabilizer_rise(void **state)
{
    static const size_t js[] = { 5, 64, 130 };
    static const size_t blocks[] = { 30, 64, 106 };
    static const favor_kernel stab[] = { FAVOR_POSITIVE, FAVOR_HYPERBOLIC };
    const size_t hq = 4, hkv = 2, n = 200, d = 16, dv = 8;
    size_t method, ji, h, c, l, best;
    int fails = 0;
    (void)state;
    for (method = 0; method < 2 * 3; ++method) {
        int form = (int)(method % 3);
        favor_kernel kernel = stab[method / 3];
        favor_features f;
        float *wstore = NULL;
        tu_rng rng;
        fd_bufs b;
        char what[64];
        double bestn = -1, rs;

        sprintf(what, "%s %s", kernel_name(kernel), form_name(form));
        print_message("no future dependence, stabilizer-raising key: %s\n", what);
        if (make_features(&f, kernel, d, 51 + method, &wstore) != FAVOR_OK) {
            ++fails;
            continue;
        }
        for (l = 0, best = 0; l < f.count; ++l) {
            double nn = 0;
            for (c = 0; c < d; ++c) nn += (double)f.w[l * d + c] * f.w[l * d + c];
            if (nn > bestn) bestn = nn, best = l;
        }
        rs = 1.0 / sqrt((double)f.scale);
        rng.s = 25000 + method;
        fd_make(&b, &rng, hq, hkv, n, d, dv, 1.0, 10.0, 1.0);
        if (fd_baseline(&f, form, &b, blocks)) {
            ++fails;
        } else {
            for (ji = 0; ji < sizeof js / sizeof js[0]; ++ji) {
                size_t j = js[ji];
                char label[128];
                for (h = 0; h < hkv; ++h) {
                    for (c = 0; c < d; ++c)
                        b.K.buf[h * b.K.t.head_stride + j * b.K.t.row_stride + c] =
                            (float)(rs * f.w[best * d + c]);
                    for (c = 0; c < dv; ++c)
                        b.V.buf[h * b.V.t.head_stride + j * b.V.t.row_stride + c] =
                            (float)tu_normal(&rng);
                }
                sprintf(label, "%s, key %u set to sqrt(1/s) w_%u", what, (unsigned)j,
                        (unsigned)best);
                fails += fd_rerun(&f, form, &b, blocks, j, label);
            }
        }
        fd_free(&b);
        free(wstore);
    }
    assert_int_equal(fails, 0);
}

/* ---- (b) recurrent equals parallel -------------------------------------------- */

static int check_close(const char *what, const tv_buf *A, const tv_buf *ref)
{
    double err = tu_max_diff(&A->t, &ref->t), tol = 1e-5 * tv_max_abs(ref);
    print_message("  %-28s max|diff| %.3g  tol %.3g\n", what, err, tol);
    if (!(err <= tol) || !tv_view_finite(A)) {
        print_error("  %s: max|diff| %.6g > %.6g (or not finite)\n", what, err, tol);
        return 1;
    }
    return 0;
}

static void test_recurrent_equals_parallel(void **state)
{
    static const size_t blocks[] = { 1, 7, 64, 228 };
    static const size_t hkvs[] = { 2, 4 };
    const size_t hq = 4, n = 300, d = 16, dv = 12;
    size_t k, g;
    int fails = 0;
    (void)state;
    for (k = 0; k < NKERNELS; ++k)
        for (g = 0; g < 2; ++g) {
            favor_kernel kernel = kernels[k];
            size_t hkv = hkvs[g];
            favor_features f;
            float *wstore = NULL, *store;
            favor_state st;
            tu_rng rng;
            tv_buf Q, K, V, Op, Oe, Os, Or;
            favor_status s;
            double sigma = kernel_sigma(kernel);

            print_message("recurrent = parallel: %s, %u query heads, %u kv heads\n",
                          kernel_name(kernel), (unsigned)hq, (unsigned)hkv);
            if (make_features(&f, kernel, d, 300 + k, &wstore) != FAVOR_OK) {
                ++fails;
                continue;
            }
            rng.s = 30000 + 10 * k + g;
            tv_make(&Q, hq, n, d, TV_PACKED, &rng, sigma);
            tv_make(&K, hkv, n, d, TV_INTERLEAVED, &rng, sigma);
            tv_make(&V, hkv, n, dv, TV_PADDED, &rng, sigma);
            tv_make(&Op, hq, n, dv, TV_PACKED, &rng, -1);
            tv_make(&Oe, hq, n, dv, TV_INTERLEAVED, &rng, -1);
            tv_make(&Os, hq, n, dv, TV_PADDED, &rng, -1);
            tv_make(&Or, hq, n, dv, TV_INTERLEAVED, &rng, -1);

            s = run_form(&f, FORM_BLOCK, &Q.t, &K.t, &V.t, &Op.t, NULL, 0);
            if (s != FAVOR_OK || !tv_view_finite(&Op)) {
                print_error("  linear_attention: %s\n", favor_status_string(s));
                ++fails;
            } else {
                s = run_form(&f, FORM_EXTEND, &Q.t, &K.t, &V.t, &Oe.t, blocks, 4);
                if (s != FAVOR_OK) {
                    print_error("  extend: %s\n", favor_status_string(s));
                    ++fails;
                } else {
                    fails += check_close("extend 1+7+64+228", &Oe, &Op);
                }
                s = run_form(&f, FORM_STEP, &Q.t, &K.t, &V.t, &Os.t, NULL, 0);
                if (s != FAVOR_OK) {
                    print_error("  step: %s\n", favor_status_string(s));
                    ++fails;
                } else {
                    fails += check_close("step x300", &Os, &Op);
                }
                tv_reset(&Os);
                s = run_form(&f, FORM_MIXED, &Q.t, &K.t, &V.t, &Os.t, NULL, 0);
                if (s != FAVOR_OK) {
                    print_error("  steps and extends: %s\n", favor_status_string(s));
                    ++fails;
                } else {
                    fails += check_close("steps 5, extend 7, steps 20, ...", &Os, &Op);
                }
            }
            if (!tv_unchanged(&Q) || !tv_unchanged(&K) || !tv_unchanged(&V) ||
                !tv_gaps_unchanged(&Op) || !tv_gaps_unchanged(&Oe) || !tv_gaps_unchanged(&Os)) {
                print_error("  an input or an output gap was written\n");
                ++fails;
            }

            /* favor_state_reset: a second run on the same state is identical. */
            store = (float *)malloc(favor_state_floats(&f, hkv, dv) * sizeof *store);
            s = favor_state_init(&st, &f, hkv, dv, store);
            if (s == FAVOR_OK) {
                tv_reset(&Oe);
                s = extend_blocks(&f, &st, &Q.t, &K.t, &V.t, &Oe.t, blocks, 4);
            }
            if (s == FAVOR_OK && st.tokens != n) {
                print_error("  tokens %llu after %u\n", st.tokens, (unsigned)n);
                ++fails;
            }
            if (s == FAVOR_OK) {
                favor_state_reset(&st);
                if (st.tokens != 0) {
                    print_error("  tokens %llu after favor_state_reset\n", st.tokens);
                    ++fails;
                }
                s = extend_blocks(&f, &st, &Q.t, &K.t, &V.t, &Or.t, blocks, 4);
            }
            if (s != FAVOR_OK) {
                print_error("  state reuse: %s\n", favor_status_string(s));
                ++fails;
            } else if (memcmp(Oe.buf, Or.buf, Oe.len * sizeof(float)) != 0) {
                print_error("  the run after favor_state_reset differs from the first: "
                            "max|diff| %.6g\n", tu_max_diff(&Oe.t, &Or.t));
                ++fails;
            } else {
                print_message("  favor_state_reset: second run bit-for-bit identical\n");
            }
            free(store);

            tv_free(&Q);
            tv_free(&K);
            tv_free(&V);
            tv_free(&Op);
            tv_free(&Oe);
            tv_free(&Os);
            tv_free(&Or);
            free(wstore);
        }
    assert_int_equal(fails, 0);
}

/* A causal call with n_k > n equals the state after the first n_k - n tokens
 * extended by the last n. */
static void test_prefix_extend(void **state)
{
    static const size_t shapes[][3] = { /* hkv, n, nk */ { 2, 100, 300 }, { 4, 1, 129 },
                                        { 1, 64, 65 } };
    const size_t hq = 4, d = 16, dv = 12;
    size_t k, sh;
    int fails = 0;
    (void)state;
    for (k = 0; k < NKERNELS; ++k)
        for (sh = 0; sh < sizeof shapes / sizeof shapes[0]; ++sh) {
            favor_kernel kernel = kernels[k];
            size_t hkv = shapes[sh][0], n = shapes[sh][1], nk = shapes[sh][2], p = nk - n;
            favor_features f;
            float *wstore = NULL, *store;
            favor_state st;
            favor_options opt = favor_default_options();
            tu_rng rng;
            tv_buf Q, Qp, K, V, O, Oe, Os, Op;
            favor_tensor Kp, Vp, Kn, Vn;
            favor_status s;
            double sigma = kernel_sigma(kernel);
            int form;

            print_message("prefix: %s, hq %u hkv %u n %u nk %u\n", kernel_name(kernel),
                          (unsigned)hq, (unsigned)hkv, (unsigned)n, (unsigned)nk);
            if (make_features(&f, kernel, d, 400 + k, &wstore) != FAVOR_OK) {
                ++fails;
                continue;
            }
            rng.s = 40000 + 10 * k + sh;
            tv_make(&Q, hq, n, d, TV_INTERLEAVED, &rng, sigma);
            tv_make(&Qp, hq, p, d, TV_PACKED, &rng, sigma); /* queries of the prefix */
            tv_make(&K, hkv, nk, d, TV_PACKED, &rng, sigma);
            tv_make(&V, hkv, nk, dv, TV_INTERLEAVED, &rng, sigma);
            tv_make(&O, hq, n, dv, TV_PACKED, &rng, -1);
            tv_make(&Oe, hq, n, dv, TV_PADDED, &rng, -1);
            tv_make(&Os, hq, n, dv, TV_PACKED, &rng, -1);
            tv_make(&Op, hq, p, dv, TV_PACKED, &rng, -1);
            Kp = tv_rows(&K.t, 0, p);
            Vp = tv_rows(&V.t, 0, p);
            Kn = tv_rows(&K.t, p, n);
            Vn = tv_rows(&V.t, p, n);

            opt.flags = FAVOR_CAUSAL;
            s = favor_linear_attention(&f, &Q.t, &K.t, &V.t, &O.t, &opt);
            if (s != FAVOR_OK) {
                print_error("  linear_attention: %s\n", favor_status_string(s));
                ++fails;
            } else {
                /* the block form against the reference first */
                double *q = tu_tensor_to_double(&Q.t), *kd = tu_tensor_to_double(&K.t);
                double *v = tu_tensor_to_double(&V.t);
                double *ref = (double *)malloc(hq * n * dv * sizeof *ref);
                double err, tol;
                ref_linear(&f, q, kd, v, ref, hq, hkv, n, nk, dv, 0, 1);
                err = tu_max_abs_diff(&O.t, ref);
                tol = tu_fixed(kernel) ? 2e-5 * tv_max_abs(&V)
                                           : 1e-4 * tu_max_abs(ref, hq * n * dv);
                print_message("  %-28s max|err| %.3g  tol %.3g\n", "vs reference", err, tol);
                if (!(err <= tol)) {
                    print_error("  vs reference: %.6g > %.6g\n", err, tol);
                    ++fails;
                }
                free(q);
                free(kd);
                free(v);
                free(ref);
            }
            store = (float *)malloc(favor_state_floats(&f, hkv, dv) * sizeof *store);
            for (form = 0; form < 2 && s == FAVOR_OK; ++form) {
                const tv_buf *out = form == 0 ? &Oe : &Os;
                s = favor_state_init(&st, &f, hkv, dv, store);
                if (s == FAVOR_OK) {
                    if (form == 0) {
                        s = favor_linear_extend(&f, &st, &Qp.t, &Kp, &Vp, &Op.t, NULL);
                        if (s == FAVOR_OK)
                            s = favor_linear_extend(&f, &st, &Q.t, &Kn, &Vn, &out->t, NULL);
                    } else {
                        s = step_all(&f, &st, &Qp.t, &Kp, &Vp, &Op.t);
                        if (s == FAVOR_OK) s = step_all(&f, &st, &Q.t, &Kn, &Vn, &out->t);
                    }
                }
                if (s != FAVOR_OK) {
                    print_error("  %s: %s\n", form == 0 ? "extend" : "step",
                                favor_status_string(s));
                    ++fails;
                } else {
                    fails += check_close(form == 0 ? "extend prefix, extend rest"
                                                   : "step prefix, step rest",
                                         out, &O);
                }
            }
            free(store);
            tv_free(&Q);
            tv_free(&Qp);
            tv_free(&K);
            tv_free(&V);
            tv_free(&O);
            tv_free(&Oe);
            tv_free(&Os);
            tv_free(&Op);
            free(wstore);
        }
    assert_int_equal(fails, 0);
}

/* (c) favor_state_init and favor_state_reset write every float of the storage:
 * storage filled with a byte pattern first holds none of it after init, and a
 * reset after tokens were absorbed gives the same bytes as a fresh init. */
/* The storage alone is the state: after 21 more steps (one fold of 16, 5 tokens
 * pending), a copy of its bytes bound to another state continues exactly as the
 * original does over 10 more steps (bit for bit). */
static int copy_continues(const favor_features *f, favor_state *st, const float *store,
                          size_t floats, const tv_buf *Q, const tv_buf *K, const tv_buf *V)
{
    const size_t a = 21, b = 10, dv = V->t.cols, hq = Q->t.heads;
    float *copy = (float *)malloc(floats * sizeof *copy);
    float *o1 = (float *)malloc(hq * a * dv * sizeof *o1), *o2 = (float *)malloc(hq * b * dv * sizeof *o2);
    favor_tensor q = tv_rows(&Q->t, 0, a), k = tv_rows(&K->t, 0, a), v = tv_rows(&V->t, 0, a);
    favor_tensor O1 = favor_tensor_packed(o1, hq, a, dv), O2 = favor_tensor_packed(o2, hq, b, dv);
    favor_state st2;
    favor_status s;
    int fails = 0;
    assert_true(copy && o1 && o2);
    s = step_all(f, st, &q, &k, &v, &O1); /* 21 more tokens: a fold, 5 pending */
    if (s == FAVOR_OK) s = favor_state_init(&st2, f, st->heads, dv, copy);
    if (s == FAVOR_OK) {
        memcpy(copy, store, floats * sizeof *copy);
        q = tv_rows(&Q->t, a, b);
        k = tv_rows(&K->t, a, b);
        v = tv_rows(&V->t, a, b);
        O1 = favor_tensor_packed(o1, hq, b, dv);
        s = step_all(f, st, &q, &k, &v, &O1);
        if (s == FAVOR_OK) s = step_all(f, &st2, &q, &k, &v, &O2);
    }
    if (s != FAVOR_OK) {
        print_error("  copy of the state: %s\n", favor_status_string(s));
        ++fails;
    } else if (memcmp(o1, o2, hq * b * dv * sizeof *o1) != 0) {
        print_error("  a copy of the storage continues differently from the original\n");
        ++fails;
    }
    free(copy);
    free(o1);
    free(o2);
    return fails;
}

static void test_state_storage_defined(void **state)
{
    const size_t hkv = 2, hq = 4, n = 70, d = 16, dv = 12;
    size_t k, i;
    int fails = 0;
    (void)state;
    for (k = 0; k < NKERNELS; ++k) {
        favor_features f;
        float *wstore = NULL, *store, *fresh;
        unsigned char *bytes;
        size_t floats, left = 0;
        int differs;
        favor_state st;
        tu_rng rng;
        tv_buf Q, K, V, O;
        favor_status s = make_features(&f, kernels[k], d, 700 + k, &wstore);
        assert_int_equal(s, FAVOR_OK);
        floats = favor_state_floats(&f, hkv, dv);
        assert_true(floats > 0);
        store = (float *)malloc(floats * sizeof *store);
        fresh = (float *)malloc(floats * sizeof *fresh);
        memset(store, 0xA5, floats * sizeof *store);
        assert_int_equal(favor_state_init(&st, &f, hkv, dv, store), FAVOR_OK);
        bytes = (unsigned char *)store;
        for (i = 0; i < floats; ++i) {
            static const unsigned char pat[4] = { 0xA5, 0xA5, 0xA5, 0xA5 };
            if (memcmp(bytes + i * sizeof(float), pat, sizeof pat) == 0) ++left;
        }
        memcpy(fresh, store, floats * sizeof *store);
        rng.s = 7000 + k;
        tv_make(&Q, hq, n, d, TV_PACKED, &rng, kernel_sigma(kernels[k]));
        tv_make(&K, hkv, n, d, TV_PACKED, &rng, kernel_sigma(kernels[k]));
        tv_make(&V, hkv, n, dv, TV_PACKED, &rng, 1.0);
        tv_make(&O, hq, n, dv, TV_PACKED, &rng, -1);
        s = favor_linear_extend(&f, &st, &Q.t, &K.t, &V.t, &O.t, NULL);
        if (s == FAVOR_OK) s = step_all(&f, &st, &Q.t, &K.t, &V.t, &O.t);
        if (s == FAVOR_OK) fails += copy_continues(&f, &st, store, floats, &Q, &K, &V);
        favor_state_reset(&st);
        differs = memcmp(store, fresh, floats * sizeof *store) != 0;
        print_message("%-10s %zu floats: %zu unwritten by init, reset %s fresh\n",
                      kernel_name(kernels[k]), floats, left, differs ? "differs from" : "equals");
        if (s != FAVOR_OK || left != 0 || differs) ++fails;
        tv_free(&Q);
        tv_free(&K);
        tv_free(&V);
        tv_free(&O);
        free(store);
        free(fresh);
        free(wstore);
    }
    assert_int_equal(fails, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_future_dependence),
        cmocka_unit_test(test_no_future_dependence_stabilizer_rise),
        cmocka_unit_test(test_recurrent_equals_parallel),
        cmocka_unit_test(test_prefix_extend),
        cmocka_unit_test(test_state_storage_defined),
    };
    if (tu_check_backend() != 0) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
