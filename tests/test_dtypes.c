/* Element types: fp16 and bf16 tensors in every entry point.
 *
 * Every tensor here is built in its own type: random values drawn as normals
 * and stored as 16-bit codes (their exact values are the inputs), in a packed,
 * interleaved or padded layout whose gaps hold a byte pattern that must survive.
 * Two checks per call:
 *   reference: against the float64 reference (tests/reference.c) evaluated on
 *     the same rounded inputs, with the fp32 tolerances of test_softmax.c,
 *     test_linear.c and test_backward.c, plus, for a 16-bit output, half an ULP
 *     of that type at the reference value (2^-11 |ref| for fp16, 2^-8 |ref| for
 *     bf16, and 2^-25 absolute below fp16's normal range);
 *   equivalence: the same call on packed fp32 copies of the inputs gives the
 *     same bits: an fp32 output exactly, a 16-bit output as the fp32 output
 *     rounded once to nearest even (rounding computed here, by search over the
 *     codes in double, not with the library's conversions).
 * Cases: softmax and every kernel, causal and not, the decode path (one row
 * against 700 keys, two blocks of the split; softmax rows whose q and P V stay
 * in registers, d = 16 to 128), prefill shapes with n_k above and
 * below n and grouped heads, all-fp16, all-bf16, mixed types, fp32 inputs with a
 * 16-bit output. Backward: the same methods, 16-bit q, k, v, dout (the softmax
 * backward's `out` 16-bit in the equivalence check; fp32 in the reference check,
 * where a rounded out would shift D_i = dout . out by its rounding), 16-bit and
 * mixed gradients. The recurrent state: favor_linear_extend then
 * favor_linear_step with 16-bit tensors. favor_feature_map: every role and
 * kernel with 16-bit x and/or phi, including a width past the stack buffer.
 * Validation: an unknown dtype on any tensor of any entry point is
 * FAVOR_E_ARG with nothing written; overlap is judged in bytes of each
 * tensor's own type (an fp16 output sharing one byte with an fp32 input is
 * FAVOR_E_ALIAS, the next byte on is accepted); the workspace queries' rule for
 * backward calls (enough for any types when q, k or v is 16-bit). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "favor.h"
#include "reference.h"
#include "test_util.h"

#define SOFTMAX (-1)
#define GAP 0xA5u /* every gap byte */

/* ---- 16-bit values, independently of the library ------------------------- */

static double dt_value_slow(favor_dtype t, uint16_t h)
{
    if (t == FAVOR_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    } else {
        int e = (h >> 10) & 31, m = h & 1023;
        double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
        if (e == 31) v = m ? NAN : INFINITY;
        return (h & 0x8000) ? -v : v;
    }
}

/* every code's value, per type (filled on first use) */
static double dt_table[2][65536];
static int dt_filled;

static double dt_value(favor_dtype t, uint16_t h)
{
    if (!dt_filled) {
        unsigned c;
        for (c = 0; c < 65536; ++c) {
            dt_table[0][c] = dt_value_slow(FAVOR_F16, (uint16_t)c);
            dt_table[1][c] = dt_value_slow(FAVOR_BF16, (uint16_t)c);
        }
        dt_filled = 1;
    }
    return dt_table[t == FAVOR_BF16][h];
}

/* the magnitude of positive code c, with the infinity code standing for the
 * next binade's first value (the rounding boundary of IEEE overflow) */
static double dt_mag(favor_dtype t, uint16_t c)
{
    uint16_t inf = t == FAVOR_F16 ? 0x7c00 : 0x7f80;
    if (c == inf) return t == FAVOR_F16 ? 65536.0 : ldexp(1.0, 128);
    return dt_value(t, c);
}

/* x rounded to the nearest code of t, ties to the even code (finite x) */
static uint16_t dt_round(favor_dtype t, double x)
{
    uint16_t sign = x < 0 ? 0x8000 : 0, lo = 0, hi = t == FAVOR_F16 ? 0x7c00 : 0x7f80;
    double a = fabs(x);
    if (a >= dt_mag(t, hi)) return sign | hi;
    while (hi - lo > 1) { /* dt_mag(lo) <= a < dt_mag(hi) */
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (dt_mag(t, mid) <= a) lo = mid;
        else hi = mid;
    }
    {
        double dl = a - dt_mag(t, lo), dh = dt_mag(t, hi) - a;
        uint16_t c = dl < dh ? lo : dh < dl ? hi : (lo & 1) ? hi : lo;
        return sign | c;
    }
}

static size_t dt_size(favor_dtype t) { return t == FAVOR_F32 ? 4 : 2; }

/* ---- tensors of any type ---------------------------------------------------- */

typedef struct {
    favor_tensor t;
    unsigned char *buf, *init; /* bytes, and a copy right after making */
    size_t bytes;
    float *f;                  /* packed fp32 values of the elements */
    double *d;                 /* the same in double */
} dbuf;

/* layout 0 packed, 1 interleaved [rows][heads][cols], 2 padded; sigma < 0: an
 * output (elements start as the gap pattern too) */
static void db_make(dbuf *b, favor_dtype type, size_t heads, size_t rows, size_t cols,
                    int layout, tu_rng *r, double sigma)
{
    size_t hs, rs, h, i, c, es = dt_size(type), n = heads * rows * cols, k = 0;
    if (layout == 1) {
        hs = cols;
        rs = heads * cols;
    } else if (layout == 2) {
        rs = cols + 3;
        hs = rows * rs + 5;
    } else {
        rs = cols;
        hs = rows * cols;
    }
    b->bytes = ((heads - 1) * hs + (rows - 1) * rs + cols) * es;
    b->buf = (unsigned char *)malloc(b->bytes);
    b->init = (unsigned char *)malloc(b->bytes);
    b->f = (float *)malloc(n * sizeof(float));
    b->d = (double *)malloc(n * sizeof(double));
    if (!b->buf || !b->init || !b->f || !b->d) exit(2);
    memset(b->buf, GAP, b->bytes);
    for (h = 0; h < heads; ++h)
        for (i = 0; i < rows; ++i)
            for (c = 0; c < cols; ++c, ++k) {
                unsigned char *p = b->buf + (h * hs + i * rs + c) * es;
                float x = sigma < 0 ? 0.0f : (float)(sigma * tu_normal(r));
                if (sigma < 0) continue;
                if (type == FAVOR_F32) {
                    memcpy(p, &x, 4);
                } else {
                    uint16_t code = dt_round(type, x);
                    memcpy(p, &code, 2);
                    x = (float)dt_value(type, code);
                }
                b->f[k] = x;
                b->d[k] = x;
            }
    memcpy(b->init, b->buf, b->bytes);
    memset(&b->t, 0, sizeof b->t); /* batch 0: one element */
    b->t.data = b->buf;
    b->t.heads = heads;
    b->t.rows = rows;
    b->t.cols = cols;
    b->t.head_stride = hs;
    b->t.row_stride = rs;
    b->t.dtype = type;
}

static void db_free(dbuf *b)
{
    free(b->buf);
    free(b->init);
    free(b->f);
    free(b->d);
}

static int db_unchanged(const dbuf *b) { return memcmp(b->buf, b->init, b->bytes) == 0; }

/* element (h, r, c) widened to double */
static double db_get(const dbuf *b, size_t h, size_t r, size_t c)
{
    const favor_tensor *t = &b->t;
    const unsigned char *p = b->buf + (h * t->head_stride + r * t->row_stride + c) * dt_size(t->dtype);
    if (t->dtype == FAVOR_F32) {
        float x;
        memcpy(&x, p, 4);
        return x;
    } else {
        uint16_t code;
        memcpy(&code, p, 2);
        return dt_value(t->dtype, code);
    }
}

/* 1 when every gap byte of an output still holds the pattern */
static int db_gaps_ok(const dbuf *b)
{
    const favor_tensor *t = &b->t;
    size_t es = dt_size(t->dtype), i, h, r;
    unsigned char *mask = (unsigned char *)calloc(b->bytes, 1);
    int ok = 1;
    for (h = 0; h < t->heads; ++h)
        for (r = 0; r < t->rows; ++r)
            memset(mask + (h * t->head_stride + r * t->row_stride) * es, 1, t->cols * es);
    for (i = 0; i < b->bytes; ++i)
        if (!mask[i] && b->buf[i] != GAP) ok = 0;
    free(mask);
    return ok;
}

/* The output b (any type, any layout) against fp32 results e (packed) of the
 * fp32 call: identical bits after one rounding. Returns the mismatches. */
static size_t db_equiv(const dbuf *b, const float *e)
{
    const favor_tensor *t = &b->t;
    size_t h, r, c, k = 0, bad = 0;
    for (h = 0; h < t->heads; ++h)
        for (r = 0; r < t->rows; ++r)
            for (c = 0; c < t->cols; ++c, ++k) {
                const unsigned char *p =
                    b->buf + (h * t->head_stride + r * t->row_stride + c) * dt_size(t->dtype);
                if (t->dtype == FAVOR_F32) {
                    bad += memcmp(p, &e[k], 4) != 0;
                } else {
                    uint16_t want = dt_round(t->dtype, e[k]), got;
                    memcpy(&got, p, 2);
                    bad += got != want;
                }
            }
    return bad;
}

/* half an ULP of t at |x| (0 for fp32: the fp32 tolerance covers it) */
static double dt_half_ulp(favor_dtype t, double x)
{
    double a = fabs(x);
    if (t == FAVOR_F32) return 0.0;
    if (t == FAVOR_BF16) return ldexp(a, -8);
    return a < ldexp(1.0, -14) ? ldexp(1.0, -25) : ldexp(a, -11);
}

/* max over elements of |o - ref| - half_ulp(ref), relative to scale: <= tol passes */
static double db_err(const dbuf *b, const double *ref, double scale)
{
    const favor_tensor *t = &b->t;
    size_t h, r, c, k = 0;
    double worst = 0.0;
    for (h = 0; h < t->heads; ++h)
        for (r = 0; r < t->rows; ++r)
            for (c = 0; c < t->cols; ++c, ++k) {
                double e = fabs(db_get(b, h, r, c) - ref[k]) - dt_half_ulp(t->dtype, ref[k]);
                if (!(e <= worst)) worst = e; /* NaN wins */
            }
    return worst / scale;
}

/* ---- methods ------------------------------------------------------------- */

typedef struct {
    int method; /* SOFTMAX or a favor_kernel */
    favor_features f;
    float *w;
} meth;

static const char *mname(int m) { return m == SOFTMAX ? "softmax" : tu_kernel_name((favor_kernel)m); }

static void meth_init(meth *mt, int method, size_t d)
{
    size_t m = method == FAVOR_ELU1 ? d : (method == FAVOR_TRIG ? 256 : 32);
    mt->method = method;
    mt->w = NULL;
    memset(&mt->f, 0, sizeof mt->f);
    if (method == SOFTMAX) return;
    mt->w = (float *)malloc(favor_features_floats((favor_kernel)method, d, m) * sizeof(float) + 4);
    assert_int_equal(favor_features_init(&mt->f, (favor_kernel)method, d, m, 0, 7, mt->w), FAVOR_OK);
}

/* inputs N(0,1); TRIG N(0, 0.3^2) with m = 256 as in test_linear.c */
static double meth_sigma(int method) { return method == FAVOR_TRIG ? 0.3 : 1.0; }

static favor_status fwd(const meth *mt, const favor_tensor *q, const favor_tensor *k,
                        const favor_tensor *v, const favor_tensor *o, const favor_options *op)
{
    if (mt->method == SOFTMAX) return favor_softmax_attention(q, k, v, o, op);
    return favor_linear_attention(&mt->f, q, k, v, o, op);
}

static favor_status bwd(const meth *mt, const favor_tensor *q, const favor_tensor *k,
                        const favor_tensor *v, const favor_tensor *o, const favor_tensor *g,
                        const favor_tensor *dq, const favor_tensor *dk, const favor_tensor *dv,
                        const favor_options *op)
{
    if (mt->method == SOFTMAX) return favor_softmax_attention_backward(q, k, v, o, g, dq, dk, dv, op);
    return favor_linear_attention_backward(&mt->f, q, k, v, g, dq, dk, dv, op);
}

static size_t fwd_ws(const meth *mt, const favor_tensor *q, const favor_tensor *k,
                     const favor_tensor *v, const favor_options *op)
{
    if (mt->method == SOFTMAX) return favor_softmax_attention_workspace(q, k, v, op);
    return favor_linear_attention_workspace(&mt->f, q, k, v, op);
}

static size_t bwd_ws(const meth *mt, const favor_tensor *q, const favor_tensor *k,
                     const favor_tensor *v, const favor_options *op)
{
    if (mt->method == SOFTMAX) return favor_softmax_attention_backward_workspace(q, k, v, op);
    return favor_linear_attention_backward_workspace(&mt->f, q, k, v, op);
}

/* packed fp32 view of b's values */
static favor_tensor f32_of(const dbuf *b)
{
    return favor_tensor_packed(b->f, b->t.heads, b->t.rows, b->t.cols);
}

static const int methods[] = { SOFTMAX, FAVOR_ELU1, FAVOR_POSITIVE, FAVOR_HYPERBOLIC, FAVOR_TRIG,
                               FAVOR_RELU };
#define NMETHODS (sizeof methods / sizeof methods[0])

typedef struct {
    size_t hq, hkv, n, nk, d, dv;
} shape;

/* type combinations: q, k, v, out (forward); also dout, dq, dk, dv (backward) */
#define F32 FAVOR_F32
#define F16 FAVOR_F16
#define B16 FAVOR_BF16
static const favor_dtype combos[][8] = {
    { F16, F16, F16, F16, F16, F16, F16, F16 },
    { B16, B16, B16, B16, B16, B16, B16, B16 },
    { F16, B16, F32, F16, B16, F32, F16, B16 },
    { B16, F16, F16, F32, F16, B16, F32, F32 },
    { F32, F32, F32, B16, F32, F16, B16, F16 }, /* fp32 inputs, 16-bit outputs */
};
#define NCOMBOS (sizeof combos / sizeof combos[0])

static const char *tname(favor_dtype t) { return t == F32 ? "f32" : t == F16 ? "f16" : "bf16"; }

/* ---- forward ------------------------------------------------------------- */

static int run_forward(const meth *mt, const shape *s, int causal, const favor_dtype *ty,
                       int layout, int with_ws, tu_rng *rng)
{
    dbuf Q, K, V, O;
    favor_tensor q32, k32, v32, o32;
    favor_options op = favor_default_options();
    double *ref, tol, scale, err;
    float *e;
    size_t no = s->hq * s->n * s->dv, bad, wsb = 0;
    void *ws = NULL;
    favor_status st;
    int fails = 0;
    double sg = meth_sigma(mt->method);
    db_make(&Q, ty[0], s->hq, s->n, s->d, layout, rng, sg);
    db_make(&K, ty[1], s->hkv, s->nk, s->d, (layout + 1) % 3, rng, sg);
    db_make(&V, ty[2], s->hkv, s->nk, s->dv, (layout + 2) % 3, rng, 1.0);
    db_make(&O, ty[3], s->hq, s->n, s->dv, layout, rng, -1.0);
    op.flags = causal ? FAVOR_CAUSAL : 0u;
    if (with_ws) { /* the query sees q, k, v only: its size covers any out type */
        wsb = fwd_ws(mt, &Q.t, &K.t, &V.t, &op);
        assert_true(wsb > 0);
        ws = malloc(wsb);
        op.workspace = ws;
        op.workspace_size = wsb;
    }
    st = fwd(mt, &Q.t, &K.t, &V.t, &O.t, &op);
    ref = (double *)malloc(no * sizeof *ref);
    e = (float *)malloc(no * sizeof *e);
    if (mt->method == SOFTMAX)
        ref_softmax(Q.d, K.d, V.d, ref, s->hq, s->hkv, s->n, s->nk, s->d, s->dv, 0.0, causal);
    else
        ref_linear(&mt->f, Q.d, K.d, V.d, ref, s->hq, s->hkv, s->n, s->nk, s->dv, 0.0, causal);
    /* tolerances of test_softmax.c / test_linear.c */
    if (mt->method == SOFTMAX || mt->method == FAVOR_ELU1) {
        tol = 2e-5;
        scale = tu_max_abs(V.d, s->hkv * s->nk * s->dv);
    } else {
        tol = 1e-4;
        scale = tu_max_abs(ref, no);
    }
    if (scale == 0.0) scale = 1.0;
    err = st == FAVOR_OK ? db_err(&O, ref, scale) : INFINITY;
    q32 = f32_of(&Q);
    k32 = f32_of(&K);
    v32 = f32_of(&V);
    o32 = favor_tensor_packed(e, s->hq, s->n, s->dv);
    op.workspace = NULL;
    op.workspace_size = 0;
    assert_int_equal(fwd(mt, &q32, &k32, &v32, &o32, &op), FAVOR_OK);
    bad = st == FAVOR_OK ? db_equiv(&O, e) : no;
    if (st != FAVOR_OK || !(err <= tol) || bad || !db_unchanged(&Q) || !db_unchanged(&K) ||
        !db_unchanged(&V) || !db_gaps_ok(&O)) {
        print_error("forward %s %s hq %u hkv %u n %u nk %u d %u dv %u types %s %s %s %s "
                    "layout %d ws %d: %s, error %.3g (tol %.1g), %u differ from the fp32 call\n",
                    mname(mt->method), causal ? "causal" : "full", (unsigned)s->hq,
                    (unsigned)s->hkv, (unsigned)s->n, (unsigned)s->nk, (unsigned)s->d,
                    (unsigned)s->dv, tname(ty[0]), tname(ty[1]), tname(ty[2]), tname(ty[3]),
                    layout, with_ws, favor_status_string(st), err, tol, (unsigned)bad);
        fails = 1;
    }
    free(ws);
    free(ref);
    free(e);
    db_free(&Q);
    db_free(&K);
    db_free(&V);
    db_free(&O);
    return fails;
}

static int run_backward(const meth *mt, const shape *s, int causal, const favor_dtype *ty,
                        int layout, tu_rng *rng);

/* every method, causal and not, every type combination, on each shape */
static int run_cases(const shape *shapes, size_t ns, uint64_t seed, int backward)
{
    tu_rng rng;
    size_t mi, si, ci;
    int causal, fails = 0, idx = 0;
    rng.s = seed;
    for (mi = 0; mi < NMETHODS; ++mi)
        for (si = 0; si < ns; ++si) {
            meth mt;
            meth_init(&mt, methods[mi], shapes[si].d);
            for (causal = 0; causal < 2; ++causal)
                for (ci = 0; ci < NCOMBOS; ++ci, ++idx)
                    fails += backward ? run_backward(&mt, &shapes[si], causal, combos[ci], idx % 3, &rng)
                                      : run_forward(&mt, &shapes[si], causal, combos[ci], idx % 3,
                                                    idx % 2, &rng);
            free(mt.w);
        }
    return fails;
}

static void test_forward(void **state)
{
    static const shape shapes[] = {
        { 2, 1, 1, 700, 16, 8 },  /* decode: one row, two blocks of 512 keys */
        { 4, 2, 3, 40, 8, 5 },    /* decode, a few rows, grouped */
        /* decode, widened tiles read by 16 rows (favor__dots_side against the
         * fp32 call's favor__dots4, rows of 160 bytes, bit for bit): rows of
         * several vectors and a remainder on every backend */
        { 4, 1, 4, 150, 40, 24 },
        /* decode, four rows scored at once (favor__dots4) against the fp32 call's
         * favor__dots (rows of 276 bytes, scored one at a time), bit for bit:
         * R = 4, whose 16-bit K is read in place, the causal last tile row by
         * row; R = 6, widened rows of 276 bytes four at once and two alone
         * (favor__dots_side); 69 columns leave a remainder on every backend */
        { 4, 4, 4, 150, 69, 24 },
        { 6, 1, 1, 150, 69, 24 },
        /* decode, 32 rows scored key-major (favor__decode_lanes, on every backend):
         * the 16-bit call's widened tiles against the fp32 call's in place, bit for
         * bit, the causal last tile's keys cut per position */
        { 8, 1, 4, 150, 40, 24 },
        { 4, 2, 70, 130, 16, 12 }, /* prefill, n_k > n */
        { 2, 1, 130, 65, 9, 16 },  /* prefill, n_k < n (causal rows that see nothing) */
    };
    (void)state;
    assert_int_equal(run_cases(shapes, sizeof shapes / sizeof shapes[0], 1401, 0), 0);
}

/* Decode rows whose q and P V the kernel keeps in registers (favor__rows_as: d =
 * d_v = 4 or 8 vectors, up to eight rows, in groups where they see the same
 * keys), in 16-bit types and mixed, against the fp32 call's
 * same kernel, bit for bit, and the reference: softmax only (the linear methods
 * have no decode path), one to eight rows per key/value head (one at a time
 * where their keys differ: a causal call's last keys), past one tile of keys,
 * causal and not. d = 16, 32, 64 and 128: two of them on each SIMD backend. */
static void test_forward_decode_rows(void **state)
{
    static const shape shapes[] = {
        { 1, 1, 1, 150, 64, 64 },
        { 1, 1, 1, 130, 128, 128 },
        { 1, 1, 1, 90, 32, 32 },
        { 2, 1, 1, 130, 128, 128 },
        { 2, 2, 2, 100, 32, 32 },
        { 1, 1, 2, 90, 16, 16 },
        /* four rows: grouped, and causal rows of one head (AVX2's four rows of
         * d = 64 take the kernel's tight form: FAVOR__ROWS_TIGHT) */
        { 4, 1, 1, 150, 64, 64 },
        { 4, 1, 1, 130, 128, 128 },
        { 1, 1, 4, 100, 32, 32 },
        { 4, 2, 1, 80, 16, 16 },
        /* three to eight rows (favor__rows_as by groups of four, two and one,
         * a 64-key tile at a time, in place, or K and V of two types widened):
         * 2 + 1, 4 + 1, 4 + 4, and 4 + 2 over two positions, on each backend */
        { 3, 1, 1, 130, 128, 128 },
        { 3, 1, 1, 90, 16, 16 },
        { 5, 1, 1, 140, 64, 64 },
        { 8, 1, 1, 150, 64, 64 },
        { 3, 1, 2, 100, 32, 32 },
    };
    tu_rng rng;
    size_t si, ci;
    int causal, fails = 0, idx = 0;
    (void)state;
    rng.s = 1451;
    for (si = 0; si < sizeof shapes / sizeof shapes[0]; ++si) {
        meth mt;
        meth_init(&mt, SOFTMAX, shapes[si].d);
        for (causal = 0; causal < 2; ++causal)
            for (ci = 0; ci < NCOMBOS; ++ci, ++idx)
                fails += run_forward(&mt, &shapes[si], causal, combos[ci], idx % 3, idx % 2, &rng);
        free(mt.w);
    }
    assert_int_equal(fails, 0);
}

/* ---- backward ------------------------------------------------------------ */

/* max |g - ref| - half_ulp over max|ref| floored as in test_backward.c */
static int run_backward(const meth *mt, const shape *s, int causal, const favor_dtype *ty,
                        int layout, tu_rng *rng)
{
    dbuf Q, K, V, O, G, DQ, DK, DV, O16;
    favor_tensor q32, k32, v32, o32, g32, dq32, dk32, dv32;
    favor_options op = favor_default_options();
    size_t nq = s->hq * s->n * s->d, nk = s->hkv * s->nk * s->d, nv = s->hkv * s->nk * s->dv;
    size_t no = s->hq * s->n * s->dv, bad;
    double *rq = (double *)malloc(nq * sizeof(double)), *rk = (double *)malloc(nk * sizeof(double));
    double *rv = (double *)malloc(nv * sizeof(double)), *ro = (double *)malloc(no * sizeof(double));
    float *eq = (float *)malloc(nq * 4), *ek = (float *)malloc(nk * 4), *ev = (float *)malloc(nv * 4);
    float *eo = (float *)malloc(no * 4);
    double floor_, eq_, ek_, ev_, sg = meth_sigma(mt->method);
    favor_status st, st2;
    int fails = 0, i;
    db_make(&Q, ty[0], s->hq, s->n, s->d, layout, rng, sg);
    db_make(&K, ty[1], s->hkv, s->nk, s->d, (layout + 1) % 3, rng, sg);
    db_make(&V, ty[2], s->hkv, s->nk, s->dv, (layout + 2) % 3, rng, 1.0);
    db_make(&G, ty[4], s->hq, s->n, s->dv, layout, rng, 1.0);
    db_make(&DQ, ty[5], s->hq, s->n, s->d, layout, rng, -1.0);
    db_make(&DK, ty[6], s->hkv, s->nk, s->d, (layout + 1) % 3, rng, -1.0);
    db_make(&DV, ty[7], s->hkv, s->nk, s->dv, (layout + 2) % 3, rng, -1.0);
    op.flags = causal ? FAVOR_CAUSAL : 0u;
    /* out in fp32 for the reference check: the forward on these inputs */
    db_make(&O, FAVOR_F32, s->hq, s->n, s->dv, 0, rng, -1.0);
    assert_int_equal(fwd(mt, &Q.t, &K.t, &V.t, &O.t, &op), FAVOR_OK);
    memcpy(O.init, O.buf, O.bytes);
    st = bwd(mt, &Q.t, &K.t, &V.t, &O.t, &G.t, &DQ.t, &DK.t, &DV.t, &op);
    if (mt->method == SOFTMAX)
        ref_softmax_backward(Q.d, K.d, V.d, G.d, rq, rk, rv, s->hq, s->hkv, s->n, s->nk, s->d,
                             s->dv, 0.0, causal);
    else
        ref_linear_backward(&mt->f, Q.d, K.d, V.d, G.d, rq, rk, rv, s->hq, s->hkv, s->n, s->nk,
                            s->dv, 0.0, causal);
    floor_ = 1e-2 * tu_max_abs(G.d, no) * tu_max_abs(V.d, nv);
    eq_ = st == FAVOR_OK ? db_err(&DQ, rq, fmax(tu_max_abs(rq, nq), floor_)) : INFINITY;
    ek_ = st == FAVOR_OK ? db_err(&DK, rk, fmax(tu_max_abs(rk, nk), floor_)) : INFINITY;
    ev_ = st == FAVOR_OK ? db_err(&DV, rv, fmax(tu_max_abs(rv, nv), floor_)) : INFINITY;
    /* equivalence, with out in the type of the combination (ty[3]) */
    db_make(&O16, ty[3], s->hq, s->n, s->dv, (layout + 1) % 3, rng, -1.0);
    assert_int_equal(fwd(mt, &Q.t, &K.t, &V.t, &O16.t, &op), FAVOR_OK);
    memcpy(O16.init, O16.buf, O16.bytes);
    for (i = 0; i < 3; ++i) { /* fresh gradients */
        dbuf *d = i == 0 ? &DQ : i == 1 ? &DK : &DV;
        memset(d->buf, GAP, d->bytes);
    }
    st2 = bwd(mt, &Q.t, &K.t, &V.t, &O16.t, &G.t, &DQ.t, &DK.t, &DV.t, &op);
    {
        size_t h, r, c, k = 0;
        for (h = 0; h < s->hq; ++h) /* out's values as fp32, packed */
            for (r = 0; r < s->n; ++r)
                for (c = 0; c < s->dv; ++c) eo[k++] = (float)db_get(&O16, h, r, c);
    }
    q32 = f32_of(&Q);
    k32 = f32_of(&K);
    v32 = f32_of(&V);
    g32 = f32_of(&G);
    o32 = favor_tensor_packed(eo, s->hq, s->n, s->dv);
    dq32 = favor_tensor_packed(eq, s->hq, s->n, s->d);
    dk32 = favor_tensor_packed(ek, s->hkv, s->nk, s->d);
    dv32 = favor_tensor_packed(ev, s->hkv, s->nk, s->dv);
    assert_int_equal(bwd(mt, &q32, &k32, &v32, &o32, &g32, &dq32, &dk32, &dv32, &op), FAVOR_OK);
    bad = st2 == FAVOR_OK ? db_equiv(&DQ, eq) + db_equiv(&DK, ek) + db_equiv(&DV, ev) : 1;
    if (st != FAVOR_OK || !(eq_ <= 1e-4) || !(ek_ <= 1e-4) || !(ev_ <= 1e-4) || bad ||
        !db_unchanged(&Q) || !db_unchanged(&K) || !db_unchanged(&V) || !db_unchanged(&G) ||
        !db_unchanged(&O) || !db_unchanged(&O16) || !db_gaps_ok(&DQ) || !db_gaps_ok(&DK) ||
        !db_gaps_ok(&DV)) {
        print_error("backward %s %s hq %u hkv %u n %u nk %u types q %s k %s v %s out %s dout %s "
                    "dq %s dk %s dv %s: %s, errors %.3g %.3g %.3g (tol 1e-4), %u differ from "
                    "the fp32 call\n",
                    mname(mt->method), causal ? "causal" : "full", (unsigned)s->hq,
                    (unsigned)s->hkv, (unsigned)s->n, (unsigned)s->nk, tname(ty[0]),
                    tname(ty[1]), tname(ty[2]), tname(ty[3]), tname(ty[4]), tname(ty[5]),
                    tname(ty[6]), tname(ty[7]), favor_status_string(st), eq_, ek_, ev_,
                    (unsigned)bad);
        fails = 1;
    }
    free(rq); free(rk); free(rv); free(ro);
    free(eq); free(ek); free(ev); free(eo);
    db_free(&Q); db_free(&K); db_free(&V); db_free(&O); db_free(&G);
    db_free(&DQ); db_free(&DK); db_free(&DV); db_free(&O16);
    return fails;
}

static void test_backward(void **state)
{
    static const shape shapes[] = {
        { 2, 1, 70, 70, 8, 6 },  /* grouped, two chunks */
        { 2, 2, 5, 9, 4, 3 },    /* n_k > n */
        { 3, 1, 9, 6, 5, 4 },    /* n_k < n */
    };
    (void)state;
    assert_int_equal(run_cases(shapes, sizeof shapes / sizeof shapes[0], 1402, 1), 0);
}

/* ---- the recurrent state --------------------------------------------------- */

/* extend over the first `pre` tokens, then step token by token: 16-bit tensors
 * against the same calls on fp32 copies (bit for bit), and the whole output
 * against the causal reference */
static void test_recurrent(void **state)
{
    static const favor_kernel ks[] = { FAVOR_ELU1, FAVOR_POSITIVE, FAVOR_TRIG };
    const size_t H = 2, HK = 1, N = 40, PRE = 21, D = 8, DV = 5;
    tu_rng rng = { 1403 };
    size_t ki, ci;
    int fails = 0;
    (void)state;
    for (ki = 0; ki < 3; ++ki)
        for (ci = 0; ci < NCOMBOS; ++ci) {
            const favor_dtype *ty = combos[ci];
            meth mt;
            dbuf Q, K, V, O;
            favor_state s16, s32;
            float *st16, *st32, *e = (float *)malloc(H * N * DV * 4);
            double *ref = (double *)malloc(H * N * DV * sizeof(double)), err, scale;
            size_t sf, t, bad;
            meth_init(&mt, (int)ks[ki], D);
            db_make(&Q, ty[0], H, N, D, (int)ci % 3, &rng, meth_sigma(mt.method));
            db_make(&K, ty[1], HK, N, D, (int)(ci + 1) % 3, &rng, meth_sigma(mt.method));
            db_make(&V, ty[2], HK, N, DV, (int)(ci + 2) % 3, &rng, 1.0);
            db_make(&O, ty[3], H, N, DV, (int)ci % 3, &rng, -1.0);
            sf = favor_state_floats(&mt.f, HK, DV);
            st16 = (float *)malloc(sf * 4);
            st32 = (float *)malloc(sf * 4);
            assert_int_equal(favor_state_init(&s16, &mt.f, HK, DV, st16), FAVOR_OK);
            assert_int_equal(favor_state_init(&s32, &mt.f, HK, DV, st32), FAVOR_OK);
            for (t = 0; t < N;) {
                size_t len = t == 0 ? PRE : 1;
                favor_tensor q = Q.t, k = K.t, v = V.t, o = O.t, q3, k3, v3, o3;
                favor_status a, b;
                q.data = (unsigned char *)Q.buf + t * Q.t.row_stride * dt_size(ty[0]);
                k.data = (unsigned char *)K.buf + t * K.t.row_stride * dt_size(ty[1]);
                v.data = (unsigned char *)V.buf + t * V.t.row_stride * dt_size(ty[2]);
                o.data = (unsigned char *)O.buf + t * O.t.row_stride * dt_size(ty[3]);
                q.rows = k.rows = v.rows = o.rows = len;
                q3 = favor_tensor_packed(Q.f, H, N, D); /* the fp32 copies */
                k3 = favor_tensor_packed(K.f, HK, N, D);
                v3 = favor_tensor_packed(V.f, HK, N, DV);
                o3 = favor_tensor_packed(e, H, N, DV);
                q3.data = Q.f + t * D; k3.data = K.f + t * D; v3.data = V.f + t * DV;
                o3.data = e + t * DV;
                q3.rows = k3.rows = v3.rows = o3.rows = len;
                if (len == 1) {
                    a = favor_linear_step(&mt.f, &s16, &q, &k, &v, &o);
                    b = favor_linear_step(&mt.f, &s32, &q3, &k3, &v3, &o3);
                } else {
                    a = favor_linear_extend(&mt.f, &s16, &q, &k, &v, &o, NULL);
                    b = favor_linear_extend(&mt.f, &s32, &q3, &k3, &v3, &o3, NULL);
                }
                assert_int_equal(a, FAVOR_OK);
                assert_int_equal(b, FAVOR_OK);
                t += len;
            }
            bad = db_equiv(&O, e);
            ref_linear(&mt.f, Q.d, K.d, V.d, ref, H, HK, N, N, DV, 0.0, 1);
            scale = mt.method == FAVOR_ELU1 ? tu_max_abs(V.d, HK * N * DV) : tu_max_abs(ref, H * N * DV);
            err = db_err(&O, ref, scale);
            if (bad || !(err <= (mt.method == FAVOR_ELU1 ? 2e-5 : 1e-4)) || !db_gaps_ok(&O) ||
                !db_unchanged(&Q) || !db_unchanged(&K) || !db_unchanged(&V)) {
                print_error("recurrent %s types %s %s %s %s: error %.3g, %u differ\n",
                            mname(mt.method), tname(ty[0]), tname(ty[1]), tname(ty[2]),
                            tname(ty[3]), err, (unsigned)bad);
                fails++;
            }
            free(st16); free(st32); free(e); free(ref); free(mt.w);
            db_free(&Q); db_free(&K); db_free(&V); db_free(&O);
        }
    assert_int_equal(fails, 0);
}

/* ---- the feature map --------------------------------------------------------- */

static void test_feature_map(void **state)
{
    static const favor_dtype tys[][2] = { { F16, F32 }, { F32, B16 }, { B16, F16 }, { F16, F16 } };
    static const favor_role roles[] = { FAVOR_QUERY, FAVOR_KEY, FAVOR_PLAIN };
    tu_rng rng = { 1404 };
    size_t mi, ti, ri, wide;
    int fails = 0;
    (void)state;
    for (wide = 0; wide < 2; ++wide)
        for (mi = 1; mi < NMETHODS; ++mi)
            for (ti = 0; ti < 4; ++ti)
                for (ri = 0; ri < 3; ++ri) {
                    /* wide: m = 1100 (width up to 2200 floats, past the stack buffer;
                     * 5 rows, of x and phi both 16-bit or phi alone) */
                    size_t H = 2, N = wide ? 5 : 70, D = 12, m = wide ? 1100 : 24, w, bad;
                    favor_kernel k = (favor_kernel)methods[mi];
                    favor_features f;
                    float *ws_, *e;
                    dbuf X, P;
                    favor_tensor x32, p32;
                    favor_status st;
                    if (wide && (k == FAVOR_ELU1 || ti == 0 || ti == 2)) continue;
                    ws_ = (float *)malloc(favor_features_floats(k, D, k == FAVOR_ELU1 ? D : m) * 4 + 4);
                    assert_int_equal(favor_features_init(&f, k, D, k == FAVOR_ELU1 ? D : m, 0, 3, ws_), FAVOR_OK);
                    w = favor_features_width(&f);
                    db_make(&X, tys[ti][0], H, N, D, (int)(ri % 3), &rng, k == FAVOR_TRIG ? 0.3 : 1.0);
                    db_make(&P, tys[ti][1], H, N, w, (int)((ri + 1) % 3), &rng, -1.0);
                    st = favor_feature_map(&f, &X.t, &P.t, roles[ri]);
                    e = (float *)malloc(H * N * w * 4);
                    x32 = f32_of(&X);
                    p32 = favor_tensor_packed(e, H, N, w);
                    assert_int_equal(favor_feature_map(&f, &x32, &p32, roles[ri]), FAVOR_OK);
                    bad = st == FAVOR_OK ? db_equiv(&P, e) : 1;
                    if (st != FAVOR_OK || bad || !db_unchanged(&X) || !db_gaps_ok(&P)) {
                        print_error("feature map %s m %u role %d x %s phi %s: %s, %u differ\n",
                                    mname(methods[mi]), (unsigned)m, (int)roles[ri],
                                    tname(tys[ti][0]), tname(tys[ti][1]), favor_status_string(st),
                                    (unsigned)bad);
                        fails++;
                    }
                    free(e);
                    free(ws_);
                    db_free(&X);
                    db_free(&P);
                }
    assert_int_equal(fails, 0);
}

/* ---- validation ------------------------------------------------------------ */

/* An unknown dtype on each tensor of each entry point: FAVOR_E_ARG, nothing
 * written (outputs, state, lse, workspace guard). */
static void test_unknown_dtype(void **state)
{
    const size_t H = 2, N = 6, D = 4, DV = 3;
    static const int bad_types[] = { 3, -1, 255 };
    tu_rng rng = { 1405 };
    meth mt;
    dbuf T[8]; /* q k v out dout dq dk dv */
    float lse[2 * 6], lse0[2 * 6], *stor, *stor0;
    favor_state fs;
    size_t sf, i, bt;
    int op, role, fails = 0;
    (void)state;
    meth_init(&mt, FAVOR_POSITIVE, D);
    for (i = 0; i < 8; ++i) {
        int kv = i == 1 || i == 2 || i == 6 || i == 7;
        size_t cols = (i == 2 || i == 3 || i == 4 || i == 7) ? DV : D;
        db_make(&T[i], FAVOR_F16, kv ? 1 : H, N, cols, 0, &rng, i >= 5 ? -1.0 : 1.0);
    }
    sf = favor_state_floats(&mt.f, 1, DV);
    stor = (float *)malloc(sf * 4);
    stor0 = (float *)malloc(sf * 4);
    assert_int_equal(favor_state_init(&fs, &mt.f, 1, DV, stor), FAVOR_OK);
    memcpy(stor0, stor, sf * 4);
    for (i = 0; i < 12; ++i) lse[i] = lse0[i] = 7.0f;
    for (bt = 0; bt < 3; ++bt)
        for (op = 0; op < 7; ++op)
            for (role = 0; role < 8; ++role) {
                favor_tensor t[8], one[4];
                favor_options o = favor_default_options();
                favor_status st = FAVOR_OK;
                int r;
                for (r = 0; r < 8; ++r) t[r] = T[r].t;
                t[role].dtype = (favor_dtype)bad_types[bt];
                o.lse = lse;
                for (r = 0; r < 4; ++r) { /* one-row views for the step */
                    one[r] = t[r];
                    one[r].rows = 1;
                }
                switch (op) {
                case 0: if (role > 3) continue; st = favor_softmax_attention(&t[0], &t[1], &t[2], &t[3], &o); break;
                case 1: if (role > 3) continue; st = favor_linear_attention(&mt.f, &t[0], &t[1], &t[2], &t[3], &o); break;
                case 2: st = favor_softmax_attention_backward(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], &t[7], &o); break;
                case 3: if (role == 3) continue; st = favor_linear_attention_backward(&mt.f, &t[0], &t[1], &t[2], &t[4], &t[5], &t[6], &t[7], NULL); break;
                case 4: if (role > 3) continue; st = favor_linear_extend(&mt.f, &fs, &t[0], &t[1], &t[2], &t[3], NULL); break;
                case 5: if (role > 3) continue; st = favor_linear_step(&mt.f, &fs, &one[0], &one[1], &one[2], &one[3]); break;
                case 6: { /* feature map: x = q (D columns), phi = dq's buffer as width columns */
                    favor_tensor x = t[0], phi = T[5].t;
                    if (role != 0 && role != 5) continue;
                    phi.cols = favor_features_width(&mt.f);
                    phi.rows = 1;
                    phi.heads = 1;
                    phi.dtype = role == 5 ? (favor_dtype)bad_types[bt] : FAVOR_F16;
                    x.rows = 1;
                    x.heads = 1;
                    st = favor_feature_map(&mt.f, &x, &phi, FAVOR_QUERY);
                    break;
                }
                }
                for (r = 0; r < 8; ++r)
                    if (!db_unchanged(&T[r])) {
                        print_error("op %d role %d dtype %d: tensor %d written\n", op, role,
                                    bad_types[bt], r);
                        fails++;
                        memcpy(T[r].buf, T[r].init, T[r].bytes);
                    }
                if (st != FAVOR_E_ARG || memcmp(lse, lse0, sizeof lse) ||
                    memcmp(stor, stor0, sf * 4)) {
                    print_error("op %d role %d dtype %d: %s (want FAVOR_E_ARG), or lse/state written\n",
                                op, role, bad_types[bt], favor_status_string(st));
                    fails++;
                }
            }
    for (i = 0; i < 8; ++i) db_free(&T[i]);
    free(stor);
    free(stor0);
    free(mt.w);
    assert_int_equal(fails, 0);
}

/* Overlap is judged in bytes of each tensor's own type. */
static void test_alias_bytes(void **state)
{
    const size_t N = 8, D = 4;
    unsigned char *buf = (unsigned char *)malloc(N * D * 4 * 3 + 64);
    favor_tensor q, k, v, o;
    int shift;
    (void)state;
    memset(buf, 0, N * D * 4 * 3 + 64);
    /* q, k, v fp32 back to back; an fp16 out just after v, or one byte into it */
    q = favor_tensor_packed((float *)(void *)buf, 1, N, D);
    k = favor_tensor_packed((float *)(void *)(buf + N * D * 4), 1, N, D);
    v = favor_tensor_packed((float *)(void *)(buf + 2 * N * D * 4), 1, N, D);
    for (shift = 0; shift < 3; ++shift) {
        /* shift 0: out starts where v ends; 1: one byte earlier (shares v's last
         * byte); 2: two bytes earlier */
        unsigned char *at = buf + 3 * N * D * 4 - (size_t)shift;
        favor_status want = shift ? FAVOR_E_ALIAS : FAVOR_OK;
        o = favor_tensor_packed_as(FAVOR_F16, at, 1, N, D);
        assert_int_equal(favor_softmax_attention(&q, &k, &v, &o, NULL), want);
    }
    /* a 16-bit input's span is half the fp32 one: an fp32 out right after a
     * 16-bit v is fine, 2 bytes in is not */
    v = favor_tensor_packed_as(FAVOR_BF16, buf + 2 * N * D * 4, 1, N, D);
    o = favor_tensor_packed((float *)(void *)(buf + 2 * N * D * 4 + N * D * 2), 1, N, D);
    assert_int_equal(favor_softmax_attention(&q, &k, &v, &o, NULL), FAVOR_OK);
    o.data = buf + 2 * N * D * 4 + N * D * 2 - 2;
    assert_int_equal(favor_softmax_attention(&q, &k, &v, &o, NULL), FAVOR_E_ALIAS);
    /* the sizes of favor_dtype_size and favor_tensor_packed_as */
    assert_int_equal(favor_dtype_size(FAVOR_F32), 4);
    assert_int_equal(favor_dtype_size(FAVOR_F16), 2);
    assert_int_equal(favor_dtype_size(FAVOR_BF16), 2);
    assert_int_equal(favor_dtype_size((favor_dtype)3), 0);
    o = favor_tensor_packed_as(FAVOR_BF16, buf, 3, 5, 7);
    assert_int_equal(o.head_stride, 35);
    assert_int_equal(o.row_stride, 7);
    assert_int_equal(o.dtype, FAVOR_BF16);
    assert_int_equal(favor_tensor_packed((float *)(void *)buf, 1, 1, 1).dtype, FAVOR_F32);
    free(buf);
}

/* The backward workspace queries see q, k and v only. When one of them is
 * 16-bit the size covers any types of the other tensors; with fp32 q, k, v it
 * covers fp32 gradients, and a 16-bit gradient then needs the size queried with
 * a 16-bit view in place of q: the smaller workspace is refused
 * (FAVOR_E_WORKSPACE, nothing written). */
static void test_backward_workspace_rule(void **state)
{
    const size_t H = 2, N = 20, D = 4, DV = 3;
    tu_rng rng = { 1406 };
    size_t mi;
    (void)state;
    for (mi = 0; mi < 2; ++mi) {
        meth mt;
        dbuf Q, K, V, O, G, DQ, DK, DV_;
        favor_options op = favor_default_options();
        favor_tensor q16;
        size_t small, big;
        void *ws;
        meth_init(&mt, mi ? FAVOR_POSITIVE : SOFTMAX, D);
        db_make(&Q, F32, H, N, D, 0, &rng, 1.0);
        db_make(&K, F32, 1, N, D, 0, &rng, 1.0);
        db_make(&V, F32, 1, N, DV, 0, &rng, 1.0);
        db_make(&O, F32, H, N, DV, 0, &rng, 1.0);
        db_make(&G, F16, H, N, DV, 0, &rng, 1.0);
        db_make(&DQ, F16, H, N, D, 0, &rng, -1.0);
        db_make(&DK, B16, 1, N, D, 0, &rng, -1.0);
        db_make(&DV_, F16, 1, N, DV, 0, &rng, -1.0);
        op.threads = 1;
        small = bwd_ws(&mt, &Q.t, &K.t, &V.t, &op);
        q16 = Q.t;
        q16.dtype = FAVOR_F16;
        big = bwd_ws(&mt, &q16, &K.t, &V.t, &op);
        assert_true(small > 0 && big > small);
        ws = malloc(big);
        op.workspace = ws;
        op.workspace_size = small;
        assert_int_equal(bwd(&mt, &Q.t, &K.t, &V.t, &O.t, &G.t, &DQ.t, &DK.t, &DV_.t, &op),
                         FAVOR_E_WORKSPACE);
        assert_true(db_unchanged(&DQ) && db_unchanged(&DK) && db_unchanged(&DV_));
        op.workspace_size = big;
        assert_int_equal(bwd(&mt, &Q.t, &K.t, &V.t, &O.t, &G.t, &DQ.t, &DK.t, &DV_.t, &op),
                         FAVOR_OK);
        free(ws);
        /* a 16-bit q: the size queried for it is enough for these gradients */
        db_free(&Q);
        db_make(&Q, B16, H, N, D, 0, &rng, 1.0);
        op.workspace_size = bwd_ws(&mt, &Q.t, &K.t, &V.t, &op);
        ws = malloc(op.workspace_size);
        op.workspace = ws;
        assert_int_equal(bwd(&mt, &Q.t, &K.t, &V.t, &O.t, &G.t, &DQ.t, &DK.t, &DV_.t, &op),
                         FAVOR_OK);
        free(ws);
        free(mt.w);
        db_free(&Q); db_free(&K); db_free(&V); db_free(&O); db_free(&G);
        db_free(&DQ); db_free(&DK); db_free(&DV_);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward),
        cmocka_unit_test(test_forward_decode_rows),
        cmocka_unit_test(test_backward),
        cmocka_unit_test(test_recurrent),
        cmocka_unit_test(test_feature_map),
        cmocka_unit_test(test_unknown_dtype),
        cmocka_unit_test(test_alias_bytes),
        cmocka_unit_test(test_backward_workspace_rule),
    };
    if (tu_check_backend()) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
