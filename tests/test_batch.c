/* Batches: views with a batch axis, in every entry point.
 *
 * Three layouts of a batched call's tensors:
 *   LLMC    llm.c's: q, k and v are column blocks of one [B][T][q|k|v] buffer
 *           (head stride d, row stride the whole row, batch stride T rows plus
 *           a gap), out a [B][T][heads*d_v] buffer with gaps, and the backward's
 *           dq, dk, dv the column blocks of one more such buffer;
 *   PACKED  favor_tensor_batched: [B][heads][rows][cols];
 *   HOUTER  [heads][B][rows][cols] with gaps: the batch stride below the head
 *           stride (the axes are sorted by stride, not taken in their order).
 * Each call is checked three ways:
 *   per element: the batched call gives the bits of one call per batch element
 *     (views moved by b batch strides, lse moved by b heads_q n), and writes
 *     nothing in the gaps;
 *   reference: the float64 reference (tests/reference.c) on the batch x heads
 *     heads of the call, with the tolerances of test_softmax.c, test_linear.c
 *     and test_backward.c;
 *   threads: 1, 2, 3, 4 and 16 threads give the same bits.
 * Covered: softmax (prefill and the decode path, with lse), elu+1 and FAVOR+,
 * causal and not, grouped heads, forward and backward; favor_linear_extend and
 * favor_linear_step with a state of batch x heads_kv heads; favor_feature_map;
 * a 16-bit batched call against its fp32 copy. Validation: batches that differ,
 * a batch above 1 with no stride, batches that overlap, a batch stride whose
 * span overflows, an output whose second element overlaps an input: each a
 * status with nothing written; batch 0 and 1 (any stride) are the unbatched
 * view; q and out as one row of a [B][T][q|k|v|out] buffer whose k and v have
 * all T rows, accepted, and refused one float further. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "favor.h"
#include "reference.h"
#include "test_util.h"

enum { LLMC, PACKED, HOUTER, NLAYOUT };
static const char *lname[NLAYOUT] = { "llm.c", "packed", "heads-outer" };

typedef struct {
    size_t B, hq, hkv, n, nk, d, dv;
} shape;

/* a buffer of floats, NaN outside the views it holds */
typedef struct {
    float *p;
    size_t len;
} fbuf;

static fbuf fb_new(size_t len)
{
    fbuf b;
    size_t i;
    b.len = len;
    b.p = (float *)malloc(len * sizeof(float));
    assert_non_null(b.p);
    for (i = 0; i < len; ++i) b.p[i] = (float)NAN;
    return b;
}

static fbuf fb_copy(const fbuf *a)
{
    fbuf b = fb_new(a->len);
    memcpy(b.p, a->p, a->len * sizeof(float));
    return b;
}

/* the same bytes, NaN gaps included */
static int fb_same(const fbuf *a, const fbuf *b) { return memcmp(a->p, b->p, a->len * 4) == 0; }

static favor_tensor view(void *data, size_t B, size_t H, size_t T, size_t cols, size_t bs,
                         size_t hs, size_t rs)
{
    favor_tensor t = favor_tensor_batched(FAVOR_F32, data, B, H, T, cols);
    t.batch_stride = bs;
    t.head_stride = hs;
    t.row_stride = rs;
    return t;
}

static float *at(const favor_tensor *t, size_t b, size_t h, size_t r)
{
    return (float *)t->data + b * t->batch_stride + h * t->head_stride + r * t->row_stride;
}

static void fill(const favor_tensor *t, tu_rng *rng, double sigma)
{
    size_t b, h, r, c;
    for (b = 0; b < t->batch; ++b)
        for (h = 0; h < t->heads; ++h)
            for (r = 0; r < t->rows; ++r)
                for (c = 0; c < t->cols; ++c) at(t, b, h, r)[c] = (float)(sigma * tu_normal(rng));
}

/* packed double [B heads][rows][cols] */
static double *gather(const favor_tensor *t)
{
    double *x = (double *)malloc(t->batch * t->heads * t->rows * t->cols * sizeof(double));
    size_t b, h, r, c, k = 0;
    assert_non_null(x);
    for (b = 0; b < t->batch; ++b)
        for (h = 0; h < t->heads; ++h)
            for (r = 0; r < t->rows; ++r)
                for (c = 0; c < t->cols; ++c) x[k++] = at(t, b, h, r)[c];
    return x;
}

/* max |t - ref| / scale */
static double err_of(const favor_tensor *t, const double *ref, double scale)
{
    double e = 0.0;
    size_t b, h, r, c, k = 0;
    for (b = 0; b < t->batch; ++b)
        for (h = 0; h < t->heads; ++h)
            for (r = 0; r < t->rows; ++r)
                for (c = 0; c < t->cols; ++c) {
                    double x = fabs((double)at(t, b, h, r)[c] - ref[k++]);
                    if (!(x <= e)) e = x; /* NaN wins */
                }
    return e / (scale > 0.0 ? scale : 1.0);
}

/* batch element b of t as an unbatched view */
static favor_tensor elem(const favor_tensor *t, size_t b)
{
    favor_tensor e = *t;
    e.data = at(t, b, 0, 0);
    e.batch = 0;
    e.batch_stride = 0;
    return e;
}

/* The tensors of a call in layout lay: q k v o, and dout dq dk dv. */
enum { TQ, TK, TV, TO, TG, TDQ, TDK, TDV, NT };
typedef struct {
    favor_tensor t[NT];
    fbuf buf[NT]; /* buffers; a tensor sharing another's has len 0 */
} call;

static void make_call(call *c, int lay, const shape *s, tu_rng *rng, double sq)
{
    size_t cols[NT], heads[NT], rows[NT], i;
    cols[TQ] = cols[TK] = cols[TDQ] = cols[TDK] = s->d;
    cols[TV] = cols[TO] = cols[TG] = cols[TDV] = s->dv;
    heads[TQ] = heads[TO] = heads[TG] = heads[TDQ] = s->hq;
    heads[TK] = heads[TV] = heads[TDK] = heads[TDV] = s->hkv;
    rows[TQ] = rows[TO] = rows[TG] = rows[TDQ] = s->n;
    rows[TK] = rows[TV] = rows[TDK] = rows[TDV] = s->nk;
    memset(c, 0, sizeof *c);
    if (lay == LLMC) { /* needs n == nk */
        size_t w = s->hq * s->d + s->hkv * (s->d + s->dv) + 3, bs = s->n * w + 5, g;
        size_t wo = s->hq * s->dv + 1, bso = s->n * wo + 2;
        assert_int_equal(s->n, s->nk);
        for (g = 0; g < 2; ++g) { /* q k v, then dq dk dv */
            size_t base = g ? TDQ : TQ;
            c->buf[base] = fb_new(s->B * bs);
            c->t[base] = view(c->buf[base].p, s->B, s->hq, s->n, s->d, bs, s->d, w);
            c->t[base + 1] = view(c->buf[base].p + s->hq * s->d, s->B, s->hkv, s->n, s->d, bs,
                                  s->d, w);
            c->t[base + 2] = view(c->buf[base].p + (s->hq + s->hkv) * s->d, s->B, s->hkv, s->n,
                                  s->dv, bs, s->dv, w);
        }
        for (i = TO; i <= TG; ++i) {
            c->buf[i] = fb_new(s->B * bso);
            c->t[i] = view(c->buf[i].p, s->B, s->hq, s->n, s->dv, bso, s->dv, wo);
        }
    } else {
        for (i = 0; i < NT; ++i) {
            favor_tensor t;
            if (lay == PACKED) {
                t = favor_tensor_batched(FAVOR_F32, NULL, s->B, heads[i], rows[i], cols[i]);
            } else {
                size_t rs = cols[i] + 1, bs = rows[i] * rs + 2, hs = s->B * bs + 3;
                t = view(NULL, s->B, heads[i], rows[i], cols[i], bs, hs, rs);
            }
            c->buf[i] = fb_new((heads[i] - 1) * t.head_stride + (s->B - 1) * t.batch_stride +
                               (rows[i] - 1) * t.row_stride + cols[i]);
            t.data = c->buf[i].p;
            c->t[i] = t;
        }
    }
    fill(&c->t[TQ], rng, sq);
    fill(&c->t[TK], rng, sq);
    fill(&c->t[TV], rng, 1.0);
    fill(&c->t[TG], rng, 1.0);
}

static void free_call(call *c)
{
    size_t i;
    for (i = 0; i < NT; ++i) free(c->buf[i].p);
}

/* the output buffers of c (o, dq dk dv) copied, and c's views moved onto them */
static void twin(const call *c, call *w)
{
    size_t i;
    *w = *c;
    for (i = 0; i < NT; ++i) {
        w->buf[i].p = NULL;
        w->buf[i].len = 0;
    }
    for (i = 0; i < NT; ++i) {
        size_t j;
        if (!c->buf[i].p) continue;
        w->buf[i] = fb_copy(&c->buf[i]);
        for (j = 0; j < NT; ++j) /* every view into that buffer */
            if ((float *)c->t[j].data >= c->buf[i].p &&
                (float *)c->t[j].data < c->buf[i].p + c->buf[i].len)
                w->t[j].data = w->buf[i].p + ((float *)c->t[j].data - c->buf[i].p);
    }
}

static int same_outputs(const call *a, const call *b)
{
    size_t i;
    for (i = 0; i < NT; ++i)
        if (a->buf[i].p && !fb_same(&a->buf[i], &b->buf[i])) return 0;
    return 1;
}

/* ---- methods ---------------------------------------------------------------- */

enum { SOFTMAX = -1 };
typedef struct {
    int method; /* SOFTMAX or a favor_kernel */
    favor_features f;
    float *w;
} meth;

static void meth_init(meth *mt, int method, size_t d)
{
    size_t m = method == FAVOR_ELU1 ? d : 32;
    mt->method = method;
    mt->w = NULL;
    if (method == SOFTMAX) return;
    mt->w = (float *)malloc(favor_features_floats((favor_kernel)method, d, m) * sizeof(float));
    assert_int_equal(favor_features_init(&mt->f, (favor_kernel)method, d, m, 0, 11, mt->w),
                     FAVOR_OK);
}

static const char *mname(int m)
{
    return m == SOFTMAX ? "softmax" : tu_kernel_name((favor_kernel)m);
}

static favor_status fwd(const meth *mt, const favor_tensor *t, const favor_options *o)
{
    if (mt->method == SOFTMAX) return favor_softmax_attention(&t[TQ], &t[TK], &t[TV], &t[TO], o);
    return favor_linear_attention(&mt->f, &t[TQ], &t[TK], &t[TV], &t[TO], o);
}

static favor_status bwd(const meth *mt, const favor_tensor *t, const favor_options *o)
{
    if (mt->method == SOFTMAX)
        return favor_softmax_attention_backward(&t[TQ], &t[TK], &t[TV], &t[TO], &t[TG], &t[TDQ],
                                                &t[TDK], &t[TDV], o);
    return favor_linear_attention_backward(&mt->f, &t[TQ], &t[TK], &t[TV], &t[TG], &t[TDQ],
                                           &t[TDK], &t[TDV], o);
}

/* one call per batch element of c's views, lse moved along */
static favor_status per_element(const meth *mt, const call *c, const favor_options *o, int back,
                                size_t B, size_t hq, size_t n)
{
    size_t b, i;
    favor_status st = FAVOR_OK;
    for (b = 0; b < B && st == FAVOR_OK; ++b) {
        favor_tensor e[NT];
        favor_options oe = *o;
        for (i = 0; i < NT; ++i) e[i] = elem(&c->t[i], b);
        if (o->lse) oe.lse = o->lse + b * hq * n;
        st = back ? bwd(mt, e, &oe) : fwd(mt, e, &oe);
    }
    return st;
}

/* forward then backward of method mt on shape s in layout lay: per element,
 * reference and thread checks; returns failures */
static int run_case(const meth *mt, const shape *s, int lay, int causal, tu_rng *rng)
{
    call c, w;
    favor_options o = favor_default_options();
    size_t B = s->B, nl = B * s->hq * s->n, no = nl * s->dv, nq = nl * s->d;
    size_t nk = B * s->hkv * s->nk * s->d, nv = B * s->hkv * s->nk * s->dv;
    float *lse = NULL, *lse2 = NULL;
    double *q, *k, *v, *g, *ref, *rq, *rk, *rv, scale, e, eq, ek, ev, fl;
    int fails = 0, thr[] = { 1, 2, 3, 4, 16 }, ti;
    double sq = mt->method == SOFTMAX || mt->method == FAVOR_ELU1 ? 1.0 : 0.5;
    make_call(&c, lay, s, rng, sq);
    o.flags = causal ? FAVOR_CAUSAL : 0u;
    o.threads = 2;
    if (mt->method == SOFTMAX) {
        lse = (float *)malloc(nl * sizeof(float));
        lse2 = (float *)malloc(nl * sizeof(float));
        o.lse = lse;
    }
    /* forward: batched, then per element on a twin of the outputs */
    twin(&c, &w);
    assert_int_equal(fwd(mt, c.t, &o), FAVOR_OK);
    {
        favor_options o2 = o;
        o2.lse = lse2;
        assert_int_equal(per_element(mt, &w, &o2, 0, B, s->hq, s->n), FAVOR_OK);
    }
    if (!same_outputs(&c, &w) || (lse && memcmp(lse, lse2, nl * sizeof(float)))) {
        print_error("forward %s %s %s: the batched call differs from per-element calls\n",
                    mname(mt->method), lname[lay], causal ? "causal" : "full");
        fails++;
    }
    q = gather(&c.t[TQ]);
    k = gather(&c.t[TK]);
    v = gather(&c.t[TV]);
    g = gather(&c.t[TG]);
    ref = (double *)malloc(no * sizeof(double));
    if (mt->method == SOFTMAX)
        ref_softmax(q, k, v, ref, B * s->hq, B * s->hkv, s->n, s->nk, s->d, s->dv, 0.0, causal);
    else
        ref_linear(&mt->f, q, k, v, ref, B * s->hq, B * s->hkv, s->n, s->nk, s->dv, 0.0, causal);
    scale = mt->method == SOFTMAX || mt->method == FAVOR_ELU1 ? tu_max_abs(v, nv)
                                                               : tu_max_abs(ref, no);
    e = err_of(&c.t[TO], ref, scale);
    if (!(e <= (mt->method == SOFTMAX || mt->method == FAVOR_ELU1 ? 2e-5 : 1e-4))) {
        print_error("forward %s %s %s: error %.3g against float64\n", mname(mt->method),
                    lname[lay], causal ? "causal" : "full", e);
        fails++;
    }
    /* backward, lse from the forward */
    assert_int_equal(bwd(mt, c.t, &o), FAVOR_OK);
    assert_int_equal(per_element(mt, &w, &o, 1, B, s->hq, s->n), FAVOR_OK);
    if (!same_outputs(&c, &w)) {
        print_error("backward %s %s %s: the batched call differs from per-element calls\n",
                    mname(mt->method), lname[lay], causal ? "causal" : "full");
        fails++;
    }
    rq = (double *)malloc(nq * sizeof(double));
    rk = (double *)malloc(nk * sizeof(double));
    rv = (double *)malloc(nv * sizeof(double));
    if (mt->method == SOFTMAX)
        ref_softmax_backward(q, k, v, g, rq, rk, rv, B * s->hq, B * s->hkv, s->n, s->nk, s->d,
                             s->dv, 0.0, causal);
    else
        ref_linear_backward(&mt->f, q, k, v, g, rq, rk, rv, B * s->hq, B * s->hkv, s->n, s->nk,
                            s->dv, 0.0, causal);
    fl = 1e-2 * tu_max_abs(g, no) * tu_max_abs(v, nv); /* test_dtypes.c's floor */
    eq = err_of(&c.t[TDQ], rq, fmax(tu_max_abs(rq, nq), fl));
    ek = err_of(&c.t[TDK], rk, fmax(tu_max_abs(rk, nk), fl));
    ev = err_of(&c.t[TDV], rv, fmax(tu_max_abs(rv, nv), fl));
    if (!(eq <= 1e-4) || !(ek <= 1e-4) || !(ev <= 1e-4)) {
        print_error("backward %s %s %s: errors %.3g %.3g %.3g against float64\n",
                    mname(mt->method), lname[lay], causal ? "causal" : "full", eq, ek, ev);
        fails++;
    }
    /* threads: the same bits for every count */
    for (ti = 0; ti < TU_COUNTS(5, 1); ++ti) {
        call t;
        favor_options ot = o;
        twin(&c, &t);
        ot.threads = thr[ti];
        ot.lse = lse2;
        assert_int_equal(fwd(mt, t.t, &ot), FAVOR_OK);
        assert_int_equal(bwd(mt, t.t, &ot), FAVOR_OK);
        if (!same_outputs(&c, &t) || (lse && memcmp(lse, lse2, nl * sizeof(float)))) {
            print_error("%s %s %s: %d threads give other bits\n", mname(mt->method),
                        lname[lay], causal ? "causal" : "full", thr[ti]);
            fails++;
        }
        free_call(&t);
    }
    free(q); free(k); free(v); free(g); free(ref); free(rq); free(rk); free(rv);
    free(lse); free(lse2);
    free_call(&w);
    free_call(&c);
    return fails;
}

static void test_batched_calls(void **state)
{
    static const shape shapes[] = {
        { 3, 4, 2, 37, 37, 16, 8 },   /* grouped heads, every layout */
        { 2, 2, 2, 70, 70, 8, 12 },   /* two chunks of causal linear attention */
    };
    static const shape decode[] = {
        { 3, 4, 2, 1, 600, 16, 8 },   /* the decode path: two blocks of keys */
        { 2, 2, 1, 3, 45, 8, 8 },     /* a few rows, n < n_k */
    };
    const int methods[] = { SOFTMAX, FAVOR_ELU1, FAVOR_POSITIVE };
    tu_rng rng;
    size_t si, mi, lay;
    int causal, fails = 0;
    (void)state;
    rng.s = 1501;
    for (mi = 0; mi < 3; ++mi) {
        meth mt;
        meth_init(&mt, methods[mi], 16);
        for (si = 0; si < 2; ++si)
            for (lay = 0; lay < NLAYOUT; ++lay)
                for (causal = 0; causal < 2; ++causal) {
                    shape s = shapes[si];
                    if (mt.method != SOFTMAX) {
                        free(mt.w);
                        meth_init(&mt, methods[mi], s.d);
                    }
                    fails += run_case(&mt, &s, (int)lay, causal, &rng);
                }
        free(mt.w);
    }
    for (si = 0; si < 2; ++si)
        for (lay = PACKED; lay < NLAYOUT; ++lay)
            for (causal = 0; causal < 2; ++causal) {
                meth mt;
                meth_init(&mt, SOFTMAX, decode[si].d);
                fails += run_case(&mt, &decode[si], (int)lay, causal, &rng);
            }
    assert_int_equal(fails, 0);
}

/* favor_linear_extend then favor_linear_step on a state of batch x heads_kv
 * heads, against one state per batch element */
static void test_batched_state(void **state)
{
    const shape s = { 3, 4, 2, 21, 21, 8, 8 };
    const int kernels[] = { FAVOR_ELU1, FAVOR_POSITIVE };
    tu_rng rng;
    int ki, lay, fails = 0;
    (void)state;
    rng.s = 1502;
    for (ki = 0; ki < 2; ++ki)
        for (lay = 0; lay < NLAYOUT; ++lay) {
            meth mt;
            call c, w, c1, w1;
            shape s1 = s;
            favor_state st, se[3];
            float *sb, *seb[3];
            size_t b, fl;
            meth_init(&mt, kernels[ki], s.d);
            make_call(&c, lay, &s, &rng, 0.5);
            s1.n = s1.nk = 1;
            make_call(&c1, lay == LLMC ? PACKED : lay, &s1, &rng, 0.5);
            twin(&c, &w);
            twin(&c1, &w1);
            fl = favor_state_floats(&mt.f, s.B * s.hkv, s.dv);
            sb = (float *)malloc(fl * sizeof(float));
            assert_int_equal(favor_state_init(&st, &mt.f, s.B * s.hkv, s.dv, sb), FAVOR_OK);
            assert_int_equal(favor_linear_extend(&mt.f, &st, &c.t[TQ], &c.t[TK], &c.t[TV],
                                                 &c.t[TO], NULL),
                             FAVOR_OK);
            assert_int_equal(favor_linear_step(&mt.f, &st, &c1.t[TQ], &c1.t[TK], &c1.t[TV],
                                               &c1.t[TO]),
                             FAVOR_OK);
            for (b = 0; b < s.B; ++b) {
                favor_tensor e[NT], e1[NT];
                size_t i;
                for (i = 0; i < NT; ++i) {
                    e[i] = elem(&w.t[i], b);
                    e1[i] = elem(&w1.t[i], b);
                }
                fl = favor_state_floats(&mt.f, s.hkv, s.dv);
                seb[b] = (float *)malloc(fl * sizeof(float));
                assert_int_equal(favor_state_init(&se[b], &mt.f, s.hkv, s.dv, seb[b]), FAVOR_OK);
                assert_int_equal(favor_linear_extend(&mt.f, &se[b], &e[TQ], &e[TK], &e[TV],
                                                     &e[TO], NULL),
                                 FAVOR_OK);
                assert_int_equal(favor_linear_step(&mt.f, &se[b], &e1[TQ], &e1[TK], &e1[TV],
                                                   &e1[TO]),
                                 FAVOR_OK);
            }
            if (!same_outputs(&c, &w) || !same_outputs(&c1, &w1)) {
                print_error("state %s %s: batched extend/step differ from per-element states\n",
                            mname(mt.method), lname[lay]);
                fails++;
            }
            for (b = 0; b < s.B; ++b) free(seb[b]);
            free(sb);
            free(mt.w);
            free_call(&c); free_call(&w); free_call(&c1); free_call(&w1);
        }
    assert_int_equal(fails, 0);
}

/* favor_feature_map on batched x and phi, against per-element calls */
static void test_batched_feature_map(void **state)
{
    tu_rng rng;
    meth mt;
    const size_t B = 3, H = 2, T = 9, d = 8;
    size_t wdt, b, i;
    int role;
    (void)state;
    rng.s = 1503;
    meth_init(&mt, FAVOR_POSITIVE, d);
    wdt = favor_features_width(&mt.f);
    for (role = 0; role < 3; ++role) {
        favor_role r = role == 0 ? FAVOR_QUERY : role == 1 ? FAVOR_KEY : FAVOR_PLAIN;
        fbuf xb = fb_new(B * (H * T * (d + 1) + 4)), pb = fb_new(H * (B * T * (wdt + 2) + 3));
        fbuf pb2;
        favor_tensor x = view(xb.p, B, H, T, d, H * T * (d + 1) + 4, T * (d + 1), d + 1);
        favor_tensor p = view(pb.p, B, H, T, wdt, T * (wdt + 2), B * T * (wdt + 2) + 3, wdt + 2);
        favor_tensor p2;
        fill(&x, &rng, 0.5);
        pb2 = fb_copy(&pb);
        p2 = p;
        p2.data = pb2.p;
        assert_int_equal(favor_feature_map(&mt.f, &x, &p, r), FAVOR_OK);
        for (b = 0; b < B; ++b) {
            favor_tensor xe = elem(&x, b), pe = elem(&p2, b);
            assert_int_equal(favor_feature_map(&mt.f, &xe, &pe, r), FAVOR_OK);
        }
        for (i = 0; i < pb.len; ++i) /* every element written, the gaps not */
            if (!isnan(pb.p[i]) != !isnan(pb2.p[i])) break;
        assert_true(fb_same(&pb, &pb2));
        assert_true(i == pb.len);
        free(xb.p); free(pb.p); free(pb2.p);
    }
    free(mt.w);
}

/* the value of an fp16 code (exact in double) */
static double f16_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f;
    double m = h & 0x3ff, x = e ? ldexp(1024.0 + m, e - 25) : ldexp(m, -24);
    return (h & 0x8000u) ? -x : x;
}

/* a batched call on fp16 q, k, v (heads-outer layout, gaps) with an fp32 out
 * gives the bits of the same call on fp32 copies of the values */
static void test_batched_f16(void **state)
{
    const size_t B = 3, H = 2, T = 33, d = 8, rs = d + 1, bs = T * rs + 2, hs = B * bs + 3;
    const size_t len = (H - 1) * hs + (B - 1) * bs + (T - 1) * rs + d;
    const int methods[] = { SOFTMAX, FAVOR_ELU1 };
    uint16_t *x16[3];
    float *x32[3], *o16 = (float *)malloc(len * 4), *o32 = (float *)malloc(len * 4);
    favor_tensor t16[NT], t32[NT];
    tu_rng rng;
    size_t i, j;
    int mi, causal;
    (void)state;
    rng.s = 1504;
    memset(t16, 0, sizeof t16);
    for (j = 0; j < 3; ++j) {
        x16[j] = (uint16_t *)malloc(len * 2);
        x32[j] = (float *)malloc(len * 4);
        for (i = 0; i < len; ++i) { /* |x| in [2^-6, 2): sign, exponent 9..15, mantissa */
            uint16_t h = (uint16_t)(((tu_next(&rng) & 1u) << 15) |
                                    ((9u + tu_next(&rng) % 7u) << 10) | (tu_next(&rng) & 0x3ffu));
            x16[j][i] = h;
            x32[j][i] = (float)f16_value(h);
        }
        t16[j] = view(x16[j], B, H, T, d, bs, hs, rs);
        t16[j].dtype = FAVOR_F16;
        t32[j] = view(x32[j], B, H, T, d, bs, hs, rs);
    }
    t16[TO] = view(o16, B, H, T, d, bs, hs, rs);
    t32[TO] = view(o32, B, H, T, d, bs, hs, rs);
    for (mi = 0; mi < 2; ++mi)
        for (causal = 0; causal < 2; ++causal) {
            meth mt;
            favor_options op = favor_default_options();
            op.flags = causal ? FAVOR_CAUSAL : 0u;
            meth_init(&mt, methods[mi], d);
            for (i = 0; i < len; ++i) o16[i] = o32[i] = (float)NAN;
            assert_int_equal(fwd(&mt, t16, &op), FAVOR_OK);
            assert_int_equal(fwd(&mt, t32, &op), FAVOR_OK);
            assert_memory_equal(o16, o32, len * 4);
            for (i = 0; i < B * H * T * d; ++i) /* every element written */
                assert_false(isnan(at(&t32[TO], i / (H * T * d), i / (T * d) % H, i / d % T)[i % d]));
            free(mt.w);
        }
    for (j = 0; j < 3; ++j) {
        free(x16[j]);
        free(x32[j]);
    }
    free(o16);
    free(o32);
}

/* ---- validation ------------------------------------------------------------- */

enum { VB = 2, VH = 2, VT = 8, VD = 4, VN = VB * VH * VT * VD };
static float vq[VN], vk[VN], vv[VN], vo[VN], vbig[4 * VN];

/* a refused softmax call writes nothing (out's buffers and lse keep their
 * bytes) and names the argument in opts->error */
static void expect_refused(favor_tensor *t, favor_status want, const char *text)
{
    static float so[VN], sbig[4 * VN];
    float lse[3 * VH * VT];
    char buf[200];
    favor_options o = favor_default_options();
    size_t i;
    favor_status st;
    for (i = 0; i < sizeof lse / sizeof lse[0]; ++i) lse[i] = 7.0f;
    o.lse = lse;
    o.error = buf;
    o.error_size = sizeof buf;
    memcpy(so, vo, sizeof so);
    memcpy(sbig, vbig, sizeof sbig);
    st = favor_softmax_attention(&t[TQ], &t[TK], &t[TV], &t[TO], &o);
    if (st != want || strcmp(buf, text) != 0) {
        print_error("got %s \"%s\", expected %s \"%s\"\n", favor_status_string(st),
                    st == FAVOR_OK ? "" : buf, favor_status_string(want), text);
        fail();
    }
    assert_memory_equal(so, vo, sizeof so);
    assert_memory_equal(sbig, vbig, sizeof sbig);
    for (i = 0; i < sizeof lse / sizeof lse[0]; ++i) assert_true(lse[i] == 7.0f);
}

static void test_batch_validation(void **state)
{
    favor_tensor t[NT], u[NT];
    char text[200];
    tu_rng rng;
    size_t i;
    (void)state;
    rng.s = 1505;
    for (i = 0; i < VN; ++i) {
        vq[i] = (float)tu_normal(&rng);
        vk[i] = (float)tu_normal(&rng);
        vv[i] = (float)tu_normal(&rng);
        vo[i] = -3.0f;
    }
    memset(t, 0, sizeof t);
    t[TQ] = favor_tensor_batched(FAVOR_F32, vq, VB, VH, VT, VD);
    t[TK] = favor_tensor_batched(FAVOR_F32, vk, VB, VH, VT, VD);
    t[TV] = favor_tensor_batched(FAVOR_F32, vv, VB, VH, VT, VD);
    t[TO] = favor_tensor_batched(FAVOR_F32, vo, VB, VH, VT, VD);
    /* batches that differ */
    memcpy(u, t, sizeof u);
    u[TK].batch = 1;
    expect_refused(u, FAVOR_E_SHAPE, "k: batch is 1, q's is 2");
    memcpy(u, t, sizeof u);
    u[TO].batch = 0;
    expect_refused(u, FAVOR_E_SHAPE, "out: batch is 1, q's is 2");
    memcpy(u, t, sizeof u);
    u[TV].batch = 3;
    u[TV].batch_stride = VH * VT * VD / 2; /* (valid for v alone: no element is read) */
    u[TV].heads = 1;
    u[TV].head_stride = 0;
    u[TK].heads = 1;
    expect_refused(u, FAVOR_E_SHAPE, "v: batch is 3, q's is 2");
    /* a batch above 1 with no stride: its elements would be one */
    memcpy(u, t, sizeof u);
    u[TV].batch_stride = 0;
    snprintf(text, sizeof text, "v: batch_stride 0 is below cols %d", VD);
    expect_refused(u, FAVOR_E_SHAPE, text);
    /* batches that overlap: the stride misses one column of the element before */
    memcpy(u, t, sizeof u);
    u[TQ].batch_stride = VH * VT * VD - 1;
    snprintf(text, sizeof text,
             "q: batch_stride %d is below %d, the span of the head_stride axis under it (its "
             "rows would overlap)", VH * VT * VD - 1, VH * VT * VD);
    expect_refused(u, FAVOR_E_SHAPE, text);
    /* a span past the address space, and batch x heads past SIZE_MAX */
    memcpy(u, t, sizeof u);
    u[TK].batch_stride = SIZE_MAX - 10;
    expect_refused(u, FAVOR_E_OVERFLOW, "k: the span of its batch_stride overflows size_t");
    memcpy(u, t, sizeof u);
    u[TK].batch = SIZE_MAX / 2 + 2;
    snprintf(text, sizeof text, "k: batch %lu x heads %d overflows size_t",
             (unsigned long)(SIZE_MAX / 2 + 2), VH);
    expect_refused(u, FAVOR_E_OVERFLOW, text);
    /* out's first element inside q's second */
    memcpy(u, t, sizeof u);
    memcpy(vbig, vq, sizeof vq);
    u[TQ].data = vbig;
    u[TO].data = vbig + VH * VT * VD + 5;
    expect_refused(u, FAVOR_E_ALIAS, "out overlaps q");
    /* q and out as the two halves of each [2 H T D] block of one buffer: told
     * apart batch element by batch element; one float further, refused */
    {
        size_t bs = 2 * VH * VT * VD;
        memcpy(u, t, sizeof u);
        for (i = 0; i < VB; ++i) memcpy(vbig + i * bs, vq + i * VH * VT * VD, sizeof vq / VB);
        u[TQ].data = vbig;
        u[TQ].batch_stride = bs;
        u[TO].data = vbig + VH * VT * VD;
        u[TO].batch_stride = bs;
        assert_int_equal(favor_softmax_attention(&u[TQ], &u[TK], &u[TV], &u[TO], NULL), FAVOR_OK);
        u[TO].data = vbig + VH * VT * VD - 1;
        expect_refused(u, FAVOR_E_ALIAS, "out overlaps q");
    }
    /* batch 0 and 1 are the unbatched view, whatever the stride */
    {
        static float o1[VH * VT * VD], o2[VH * VT * VD];
        favor_tensor a[NT];
        memcpy(a, t, sizeof a);
        for (i = 0; i < NT; ++i) {
            a[i].batch = 0;
            a[i].batch_stride = 12345;
        }
        a[TO].data = o1;
        assert_int_equal(favor_softmax_attention(&a[TQ], &a[TK], &a[TV], &a[TO], NULL), FAVOR_OK);
        for (i = 0; i < NT; ++i) {
            a[i].batch = 1;
            a[i].batch_stride = 0;
        }
        a[TO].data = o2;
        assert_int_equal(favor_softmax_attention(&a[TQ], &a[TK], &a[TV], &a[TO], NULL), FAVOR_OK);
        assert_memory_equal(o1, o2, sizeof o1);
        assert_int_equal(favor_softmax_attention(&t[TQ], &t[TK], &t[TV], &t[TO], NULL), FAVOR_OK);
        assert_memory_equal(o1, vo, sizeof o1); /* batch element 0 of the batched call */
    }
}

/* One [B][T][q|k|v|out] buffer with gaps between batch elements, q and out one
 * row of it (a step that reads T keys): q's and out's axes are heads and batch,
 * k's and v's heads, rows and batch, so the batch stride is the largest axis of
 * all four but not the same axis of each. Accepted, with the bits of the same
 * call on packed copies, and nothing outside out written; out moved one float
 * into v is refused with nothing written. */
enum { FB = 2, FH = 2, FT = 9, FD = 4, FROW = 4 * FH * FD, FBS = FT * FROW + 3 };
static float fbuf_[FB * FBS], fsnap[FB * FBS];

static void test_batch_fused_row(void **state)
{
    float pq[FB * FH * FD], pk[FB * FH * FT * FD], pv[FB * FH * FT * FD], po[FB * FH * FD];
    favor_tensor t[NT], p[NT];
    favor_options o = favor_default_options();
    char text[200];
    tu_rng rng;
    size_t b, h, r, c, i, at = FT - 1; /* q's and out's row */
    (void)state;
    rng.s = 1506;
    for (i = 0; i < FB * FBS; ++i) fbuf_[i] = (float)tu_normal(&rng);
    for (i = TQ; i <= TO; ++i) { /* column block i */
        t[i] = favor_tensor_batched(FAVOR_F32, fbuf_ + i * FH * FD, FB, FH, FT, FD);
        t[i].head_stride = FD;
        t[i].row_stride = FROW;
        t[i].batch_stride = FBS;
    }
    for (i = TQ; i <= TO; i += TO - TQ) { /* q and out: one row */
        t[i].data = (float *)t[i].data + at * FROW;
        t[i].rows = 1;
    }
    p[TQ] = favor_tensor_batched(FAVOR_F32, pq, FB, FH, 1, FD);
    p[TK] = favor_tensor_batched(FAVOR_F32, pk, FB, FH, FT, FD);
    p[TV] = favor_tensor_batched(FAVOR_F32, pv, FB, FH, FT, FD);
    p[TO] = favor_tensor_batched(FAVOR_F32, po, FB, FH, 1, FD);
    for (b = 0; b < FB; ++b)
        for (h = 0; h < FH; ++h)
            for (r = 0; r < FT; ++r)
                for (c = 0; c < FD; ++c) {
                    const float *row = fbuf_ + b * FBS + r * FROW + h * FD + c;
                    size_t e = ((b * FH + h) * FT + r) * FD + c;
                    pk[e] = row[FH * FD];
                    pv[e] = row[2 * FH * FD];
                    if (r == at) pq[(b * FH + h) * FD + c] = row[0];
                }
    memcpy(fsnap, fbuf_, sizeof fsnap);
    assert_int_equal(favor_softmax_attention(&p[TQ], &p[TK], &p[TV], &p[TO], NULL), FAVOR_OK);
    assert_int_equal(favor_softmax_attention(&t[TQ], &t[TK], &t[TV], &t[TO], NULL), FAVOR_OK);
    for (i = 0; i < FB * FBS; ++i) {
        size_t e = i % FBS, col = e % FROW - 3 * FH * FD;
        if (e / FROW == at && e < FT * FROW && e % FROW >= 3 * FH * FD) /* out */
            assert_true(fbuf_[i] == po[(i / FBS * FH + col / FD) * FD + col % FD]);
        else
            assert_true(fbuf_[i] == fsnap[i]);
    }
    /* one float into v: refused, and nothing written */
    memcpy(fsnap, fbuf_, sizeof fsnap);
    t[TO].data = (float *)t[TO].data - 1;
    o.error = text;
    o.error_size = sizeof text;
    assert_int_equal(favor_softmax_attention(&t[TQ], &t[TK], &t[TV], &t[TO], &o), FAVOR_E_ALIAS);
    assert_string_equal(text, "out overlaps v");
    assert_memory_equal(fbuf_, fsnap, sizeof fsnap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_calls),
        cmocka_unit_test(test_batched_state),
        cmocka_unit_test(test_batched_feature_map),
        cmocka_unit_test(test_batched_f16),
        cmocka_unit_test(test_batch_validation),
        cmocka_unit_test(test_batch_fused_row),
    };
    if (tu_check_backend()) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
