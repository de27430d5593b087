/* favor_softmax_attention on decode shapes: a few query rows (n <= 32, where the
 * header may take a decode path) against a long key/value cache, checked against
 * the float64 reference (tests/reference.c). The results must hold whichever path
 * a call takes.
 *
 * Accuracy (the prefill's tolerance): max |O - O_ref| <= 2e-5 * max|V| on N(0,1)
 * inputs, and with opts.lse |lse - lse_ref| <= 1e-5 * (1 + |lse_ref|), for n in
 * {1, 2, 3, 8, 16, 32}, n_k from 1 to 100000 (around the 512-key blocks: 511, 512,
 * 513, 1537, 4101), grouped-query ratios 1, 4 and 8, causal (bottom-right
 * aligned) and not, d in {1, 4, 16, 32, 64, 128, 256} with d_v != d in some cases, K
 * and V as strided views of a [tokens][heads*dim] cache (also K and V sharing one
 * cache buffer whose capacity exceeds n_k, the tail NaN), caller workspace and
 * library allocation. Causal calls with n > n_k have rows that see no key: those
 * rows must be exactly 0 and their lse -inf. Every call must leave its inputs,
 * the gaps of its output and the floats around lse untouched and write every
 * output element.
 *
 * The switch: n = 31, 32 and 33 rows of the same inputs each match the
 * reference, and rows shared by two of those calls (the first rows when not
 * causal; the last rows, with the same visible keys, when causal) agree within
 * 2e-5 * max|V| (O) and 2e-5 * (1 + |lse|) (lse).
 *
 * Threads: opts.threads 1, 2, 3, 4 give outputs and lse bit-identical to
 * threads = 1, n_k a multiple of 512 and not, with fewer blocks than 8 per
 * thread and more (runs of several blocks). Without OpenMP this holds
 * trivially and is still checked.
 *
 * No future dependence: n = 4 causal rows against n_k keys; a key only later
 * rows see is set to +-1e30, +-inf or NaN (in K, in V); the rows that do not see
 * it are bit-identical to before (O and lse), and the last row does change.
 *
 * Workspace: on decode shapes the queried size works (also at an odd address)
 * and gives the library allocation's bits; one byte short is refused with
 * FAVOR_E_WORKSPACE and nothing is written. The sizes queried for n_k = 1000
 * and 100000 are printed.
 *
 * Validation on decode shapes: NULL pointers, mismatched shapes, an output, lse
 * or workspace overlapping an input, bad options: the exact status, nothing
 * written.
 *
 * Caches off the 64-byte lines: 2 to 8 rows per key/value head (the grouped
 * kernels), d = 64 and 128, K and V at float offsets 0 to 15 from a line, packed
 * and interleaved with rows of d + 1 floats, NaN around them: the bits of the
 * call on the lines, which matches the reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "favor.h"
#include "reference.h"
#include "test_util.h"
#include "test_views.h"

/* ---- shared helpers ----------------------------------------------------------- */

/* lse buffers: DC_GUARD floats of 0xff bytes (NaN) either side of the hq x n
 * floats the call writes (which start as the same NaN: never written shows). */
#define DC_GUARD 8

static float *lse_make(size_t cnt)
{
    float *p = (float *)tu_xmalloc((cnt + 2 * DC_GUARD) * sizeof *p);
    memset(p, 0xff, (cnt + 2 * DC_GUARD) * sizeof *p);
    return p;
}

static void lse_reset(float *p, size_t cnt) { memset(p, 0xff, (cnt + 2 * DC_GUARD) * sizeof *p); }

/* 1 when the guards around the cnt floats at p + DC_GUARD are untouched */
static int lse_guards_intact(const float *p, size_t cnt)
{
    const unsigned char *b = (const unsigned char *)p;
    size_t i, g = DC_GUARD * sizeof *p, all = (cnt + 2 * DC_GUARD) * sizeof *p;
    for (i = 0; i < g; ++i)
        if (b[i] != 0xff || b[all - 1 - i] != 0xff) return 0;
    return 1;
}

/* 1 when all `bytes` bytes at p are 0xff (an lse nobody wrote) */
static int all_ff(const void *p, size_t bytes)
{
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < bytes; ++i)
        if (b[i] != 0xff) return 0;
    return 1;
}

/* Compare out (and lse, hq x n floats, when not NULL) of a call on q, k, v with
 * ref_softmax (and ref_softmax_lse). Rows that see no key must be exactly 0 with
 * lse -inf. Returns the number of failed checks (reported). */
static int dc_compare(const favor_tensor *q, const favor_tensor *k, const favor_tensor *v,
                      const favor_tensor *o, const float *lse, float scale, int causal)
{
    size_t hq = q->heads, hkv = k->heads, n = q->rows, nk = k->rows, d = q->cols,
           dv = v->cols, h, i, c;
    double *dq = tu_tensor_to_double(q), *dk = tu_tensor_to_double(k);
    double *dvv = tu_tensor_to_double(v);
    double *ref = (double *)tu_xmalloc(hq * n * dv * sizeof *ref);
    double err, tol;
    int fails = 0;
    ref_softmax(dq, dk, dvv, ref, hq, hkv, n, nk, d, dv, scale, causal);
    err = tu_max_abs_diff(o, ref);
    tol = 2e-5 * tu_max_abs(dvv, hkv * nk * dv);
    print_message("  max|err| %.3g  tol %.3g  (err/tol %.3f)\n", err, tol, err / tol);
    if (!(err <= tol)) {
        print_error("  accuracy: max|err| %.6g > %.6g\n", err, tol);
        ++fails;
    }
    if (causal && n > nk) { /* rows i < n - nk see no key */
        int nz = 0;
        for (h = 0; h < hq; ++h)
            for (i = 0; i < n - nk; ++i)
                for (c = 0; c < dv; ++c)
                    if (tu_at(o, h, i, c) != 0.0f) ++nz;
        if (nz) {
            print_error("  %d elements of rows that see no key are not 0\n", nz);
            ++fails;
        }
    }
    if (lse) {
        double *rl = (double *)tu_xmalloc(hq * n * sizeof *rl), worst = 0;
        int bad = 0;
        ref_softmax_lse(dq, dk, rl, hq, hkv, n, nk, d, scale, causal);
        for (i = 0; i < hq * n; ++i) {
            if (isinf(rl[i])) {
                if (!(lse[i] == -INFINITY)) {
                    if (bad < 3)
                        print_error("  lse[%zu] = %.9g, expected -inf (row sees no key)\n", i,
                                    (double)lse[i]);
                    ++bad;
                }
            } else {
                double e = fabs((double)lse[i] - rl[i]) / (1e-5 * (1 + fabs(rl[i])));
                if (!(e <= 1)) {
                    if (bad < 3)
                        print_error("  lse[%zu] = %.9g, reference %.9g\n", i, (double)lse[i],
                                    rl[i]);
                    ++bad;
                }
                if (!(e <= worst)) worst = e;
            }
        }
        print_message("  lse: max|err| / (1e-5 (1 + |lse|)) %.3f\n", worst);
        if (bad) ++fails;
        free(rl);
    }
    free(dq);
    free(dk);
    free(dvv);
    free(ref);
    return fails;
}

/* max |a - b| over rows [a0, a0 + rows) of a and [b0, b0 + rows) of b */
static double rows_max_diff(const favor_tensor *a, size_t a0, const favor_tensor *b, size_t b0,
                            size_t rows)
{
    size_t h, i, c;
    double m = 0;
    for (h = 0; h < a->heads; ++h)
        for (i = 0; i < rows; ++i)
            for (c = 0; c < a->cols; ++c) {
                double e = fabs((double)tu_at(a, h, a0 + i, c) - (double)tu_at(b, h, b0 + i, c));
                if (!(e <= m)) m = e;
            }
    return m;
}

/* 1 when rows [0, rows) of every head of a and b are bit-identical */
static int rows_identical(const favor_tensor *a, const favor_tensor *b, size_t rows)
{
    size_t h, i;
    for (h = 0; h < a->heads; ++h)
        for (i = 0; i < rows; ++i)
            if (memcmp((float *)a->data + h * a->head_stride + i * a->row_stride,
                       (float *)b->data + h * b->head_stride + i * b->row_stride,
                       a->cols * sizeof(float)) != 0)
                return 0;
    return 1;
}

/* ---- 1. accuracy --------------------------------------------------------------- */

typedef struct {
    size_t hq, hkv, n, nk, d, dv;
    int causal;
    float scale;           /* 0 = default 1/sqrt(d) */
    tv_layout lq, lkv, lo; /* layouts of Q, of K and V, of O */
    int workspace;         /* 1: a caller workspace of the queried size */
    int lse;               /* 1: ask for opts.lse */
} dc_case;

#define P TV_PACKED
#define IL TV_INTERLEAVED
#define IP TV_INTERPAD
#define PD TV_PADDED

static const dc_case cases[] = {
    /* hq hkv  n      nk    d   dv  causal scale Q   KV  O  ws lse */
    {  1, 1,   1,      1,   1,   1, 0, 0.0f,  P,  P,  P, 0, 1 },
    {  1, 1,   1,      1,  64,  64, 1, 0.0f, PD, IL,  P, 1, 1 },
    {  4, 1,   1,      2,  64,  64, 1, 0.0f,  P, IL, IL, 0, 1 },
    {  8, 1,   2,      7, 128, 128, 1, 0.0f, IL, IP, IL, 1, 1 },
    {  8, 1,   2,      7, 128, 128, 0, 0.0f,  P, IP,  P, 0, 0 },
    {  4, 4,   3,    511,  64,  32, 0, 0.0f,  P, IP, PD, 0, 1 },
    {  4, 4,   3,    511,  64,  32, 1, 0.2f,  P, IL,  P, 1, 1 },
    {  8, 2,   8,    512, 128, 128, 1, 0.0f,  P, IL,  P, 1, 1 },
    {  8, 2,   8,    512, 128,  64, 0, 0.0f, IP, IP, IP, 0, 1 },
    {  8, 1,  16,    513,  64,  64, 0, 0.0f,  P, IL,  P, 0, 1 },
    {  8, 1,  16,    513,  64,  64, 1, 0.0f,  P, IP,  P, 1, 0 },
    {  4, 1,   8,    600, 256, 256, 1, 0.0f,  P, IL,  P, 1, 1 },
    {  2, 2,   1,   1000,   1,   1, 0, 0.0f,  P, IP,  P, 0, 1 },
    {  2, 2,   3,   1537, 128,  64, 1, 0.0f,  P, IL, IL, 0, 1 },
    {  8, 1,   1,   1537, 256,  64, 0, 0.0f,  P, IP,  P, 1, 1 },
    {  8, 1,   1,   4101,  64,  64, 0, 0.0f,  P, IL,  P, 1, 1 },
    {  4, 1,  16,   4101,  32,  32, 1, 0.0f,  P, IP,  P, 0, 1 },
    {  2, 1,   2, 100000,   1,   1, 0, 0.0f,  P, IL,  P, 1, 1 },
    {  4, 1,   2, 100000,   4,   4, 1, 0.0f,  P, IP,  P, 0, 1 },
    {  1, 1,  16, 100000,   1,   2, 1, 0.0f,  P, IL,  P, 1, 1 },
    /* causal with n > nk: the first n - nk rows see no key */
    {  4, 1,   8,      3,  64,  64, 1, 0.0f,  P, IL,  P, 0, 1 },
    {  8, 2,  16,      7,   1,   3, 1, 0.5f, IL, IP, IL, 1, 1 },
    {  4, 4,  16,      1, 128, 128, 1, 0.0f,  P, IL, PD, 0, 1 },
    {  4, 1,  32,    700,  64,  48, 1, 0.0f,  P, IL,  P, 1, 1 },
    {  2, 2,  32,     20,  16,  16, 1, 0.0f, IL, IP,  P, 0, 1 },
    {  8, 8,   2,      1,  64,  64, 1, 0.0f,  P, IP,  P, 1, 1 },
    /* one or two rows per key/value head with d = d_v = 4 and 8 vectors (16, 32,
     * 64 and 128: NEON, AVX2 and AVX-512 each meet two of them), past one tile
     * of keys, with a last tile that is not whole: favor__rows_as, their q and
     * P V in registers; two causal rows of one head end their keys at
     * different keys of the last tile (those keys a row at a time) */
    {  1, 1,   1,   1000,  64,  64, 0, 0.0f,  P, IL,  P, 0, 1 },
    {  2, 1,   1,    700, 128, 128, 1, 0.0f, IL,  P,  P, 1, 1 },
    {  2, 2,   2,    601,  32,  32, 1, 0.0f,  P, IP,  P, 0, 1 },
    {  1, 1,   2,    300,  16,  16, 1, 0.0f,  P,  P, IL, 1, 1 },
    /* four rows per key/value head with d = d_v = 4 and 8 vectors, past one tile:
     * favor__rows_as, the four rows' keys and values read once for the four
     * (four query heads on one, two heads of two rows, one head of four causal
     * rows whose last keys go row by row) */
    {  4, 1,   1,    700,  64,  64, 0, 0.0f,  P, IL,  P, 0, 1 },
    {  4, 2,   1,    300,  16,  16, 1, 0.0f, IL, IP,  P, 1, 1 },
    {  2, 1,   2,    601, 128, 128, 1, 0.0f,  P, IL, IL, 0, 1 },
    {  1, 1,   4,   1000,  32,  32, 1, 0.0f,  P, IP,  P, 1, 1 },
};

/* Run one case on N(0,1) inputs. Returns the number of failed checks. */
static int run_case(const dc_case *c, unsigned long long seed)
{
    tu_rng rng;
    tv_buf Q, K, V, O;
    favor_options opt = favor_default_options();
    favor_status st;
    float *lse = NULL;
    void *ws = NULL;
    int fails = 0;

    rng.s = seed;
    tv_make(&Q, c->hq, c->n, c->d, c->lq, &rng, 1.0);
    tv_make(&K, c->hkv, c->nk, c->d, c->lkv, &rng, 1.0);
    tv_make(&V, c->hkv, c->nk, c->dv, c->lkv, &rng, 1.0);
    tv_make(&O, c->hq, c->n, c->dv, c->lo, &rng, -1);
    opt.flags = c->causal ? FAVOR_CAUSAL : 0u;
    opt.scale = c->scale;
    if (c->lse) {
        lse = lse_make(c->hq * c->n);
        opt.lse = lse + DC_GUARD;
    }
    if (c->workspace) {
        size_t bytes = favor_softmax_attention_workspace(&Q.t, &K.t, &V.t, &opt);
        if (!bytes) {
            print_error("  the workspace query returned 0\n");
            ++fails;
        }
        ws = tu_xmalloc(bytes);
        opt.workspace = ws;
        opt.workspace_size = bytes;
    }
    st = favor_softmax_attention(&Q.t, &K.t, &V.t, &O.t, &opt);
    if (st != FAVOR_OK) {
        print_error("  status %s\n", favor_status_string(st));
        ++fails;
    } else {
        if (!tv_unchanged(&Q) || !tv_unchanged(&K) || !tv_unchanged(&V)) {
            print_error("  an input buffer was written\n");
            ++fails;
        }
        if (!tv_gaps_unchanged(&O)) {
            print_error("  a gap of the output view was written\n");
            ++fails;
        }
        if (!tv_view_finite(&O)) {
            print_error("  an output element is not finite (or was never written)\n");
            ++fails;
        }
        if (lse && !lse_guards_intact(lse, c->hq * c->n)) {
            print_error("  a float next to opts.lse was written\n");
            ++fails;
        }
        fails += dc_compare(&Q.t, &K.t, &V.t, &O.t, opt.lse, c->scale, c->causal);
    }
    free(ws);
    free(lse);
    tv_free(&Q);
    tv_free(&K);
    tv_free(&V);
    tv_free(&O);
    return fails;
}

static void print_case(size_t i, const dc_case *c)
{
    print_message("case %2u: hq %u hkv %u n %u nk %u d %u dv %u %s scale %g  Q %s KV %s O %s%s%s\n",
                  (unsigned)i, (unsigned)c->hq, (unsigned)c->hkv, (unsigned)c->n,
                  (unsigned)c->nk, (unsigned)c->d, (unsigned)c->dv,
                  c->causal ? "causal" : "full", (double)c->scale, tv_layout_name(c->lq),
                  tv_layout_name(c->lkv), tv_layout_name(c->lo),
                  c->workspace ? " workspace" : "", c->lse ? " lse" : "");
}

static void test_decode_accuracy(void **state)
{
    size_t i;
    int fails = 0;
    (void)state;
    for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        print_case(i, &cases[i]);
        fails += run_case(&cases[i], 7000 + i);
    }
    assert_int_equal(fails, 0);
}

/* A KV cache as inference keeps it: one buffer [cap][hkv*d | hkv*dv] holding K
 * and V side by side for cap >= nk tokens, of which the first nk are filled (the
 * rest NaN: never read). Q and O likewise share a [n][hq*d | hq*dv] buffer. */
static int run_shared_cache(size_t hq, size_t hkv, size_t n, size_t nk, size_t cap, size_t d,
                            size_t dv, int causal, unsigned long long seed)
{
    tu_rng rng;
    size_t wc = hkv * (d + dv), wq = hq * (d + dv), i, h, c;
    float *kv = (float *)tu_xmalloc(cap * wc * sizeof *kv), *kv0;
    float *qo = (float *)tu_xmalloc(n * wq * sizeof *qo), *qo0;
    float *lse = lse_make(hq * n);
    favor_tensor Q, K, V, O;
    favor_options opt = favor_default_options();
    favor_status st;
    int fails = 0;
    memset(&Q, 0, sizeof Q); /* batch 0: one element */
    K = V = O = Q;
    rng.s = seed;
    for (i = 0; i < cap * wc; ++i) kv[i] = (float)NAN;
    for (i = 0; i < n * wq; ++i) qo[i] = (float)NAN;
    for (i = 0; i < nk; ++i)
        for (c = 0; c < wc; ++c) kv[i * wc + c] = (float)tu_normal(&rng);
    for (i = 0; i < n; ++i)
        for (c = 0; c < hq * d; ++c) qo[i * wq + c] = (float)tu_normal(&rng);
    kv0 = (float *)tu_xmalloc(cap * wc * sizeof *kv0);
    qo0 = (float *)tu_xmalloc(n * wq * sizeof *qo0);
    memcpy(kv0, kv, cap * wc * sizeof *kv);
    memcpy(qo0, qo, n * wq * sizeof *qo);
    Q.dtype = K.dtype = V.dtype = O.dtype = FAVOR_F32;
    K.data = kv;
    K.heads = hkv; K.rows = nk; K.cols = d; K.head_stride = d; K.row_stride = wc;
    V.data = kv + hkv * d;
    V.heads = hkv; V.rows = nk; V.cols = dv; V.head_stride = dv; V.row_stride = wc;
    Q.data = qo;
    Q.heads = hq; Q.rows = n; Q.cols = d; Q.head_stride = d; Q.row_stride = wq;
    O.data = qo + hq * d;
    O.heads = hq; O.rows = n; O.cols = dv; O.head_stride = dv; O.row_stride = wq;
    print_message("shared cache: hq %u hkv %u n %u nk %u (capacity %u) d %u dv %u %s\n",
                  (unsigned)hq, (unsigned)hkv, (unsigned)n, (unsigned)nk, (unsigned)cap,
                  (unsigned)d, (unsigned)dv, causal ? "causal" : "full");
    opt.flags = causal ? FAVOR_CAUSAL : 0u;
    opt.lse = lse + DC_GUARD;
    st = favor_softmax_attention(&Q, &K, &V, &O, &opt);
    if (st != FAVOR_OK) {
        print_error("  status %s\n", favor_status_string(st));
        ++fails;
    } else {
        int written = 1, qsame = 1;
        if (memcmp(kv, kv0, cap * wc * sizeof *kv) != 0) {
            print_error("  the cache buffer was written\n");
            ++fails;
        }
        for (i = 0; i < n; ++i) {
            if (memcmp(qo + i * wq, qo0 + i * wq, hq * d * sizeof *qo) != 0) qsame = 0;
            for (h = 0; h < hq; ++h)
                for (c = 0; c < dv; ++c)
                    if (!isfinite(tu_at(&O, h, i, c))) written = 0;
        }
        if (!qsame) {
            print_error("  the queries (beside the output in one buffer) were written\n");
            ++fails;
        }
        if (!written) {
            print_error("  an output element is not finite (or was never written)\n");
            ++fails;
        }
        if (!lse_guards_intact(lse, hq * n)) {
            print_error("  a float next to opts.lse was written\n");
            ++fails;
        }
        fails += dc_compare(&Q, &K, &V, &O, opt.lse, 0.0f, causal);
    }
    free(kv);
    free(kv0);
    free(qo);
    free(qo0);
    free(lse);
    return fails;
}

static void test_decode_shared_cache_buffer(void **state)
{
    int fails = 0;
    (void)state;
    fails += run_shared_cache(8, 2, 1, 3000, 3100, 32, 32, 0, 71);
    fails += run_shared_cache(8, 1, 16, 1025, 2048, 128, 64, 1, 72);
    fails += run_shared_cache(4, 4, 5, 512, 513, 32, 48, 1, 73);
    assert_int_equal(fails, 0);
}

/* The switch point: calls of at most SW query rows take favor.h's decode path
 * (FAVOR__DEC_ROWS), longer ones the prefill's. */
#define SW 32

/* ---- 2. both sides of the switch ---------------------------------------------- */

/* Q with SW + 1 rows; calls with n = SW - 1, SW, SW + 1 take the first n rows of Q when not
 * causal, the last n when causal: either way row i of the n-row call is row
 * off + i of the (SW + 1)-row problem (off = 0, or SW + 1 - n) and sees the same keys. So
 * the (SW + 1)-row reference serves all three calls; then each pair of calls is
 * compared on the rows they share. */
static int run_switch(size_t hq, size_t hkv, size_t nk, size_t d, size_t dv,
                      unsigned long long seed)
{
    static const size_t ns[3] = { SW - 1, SW, SW + 1 };
    static const size_t pa[3] = { 0, 1, 0 }, pb[3] = { 2, 2, 1 }; /* the pairs */
    tu_rng rng;
    tv_buf Q, K, V, O[3];
    float *lse[3];
    double *dq, *dk, *dvv, *ref, *rl, tol;
    int causal, fails = 0;
    size_t i;
    rng.s = seed;
    tv_make(&Q, hq, (SW + 1), d, TV_INTERLEAVED, &rng, 1.0);
    tv_make(&K, hkv, nk, d, TV_INTERPAD, &rng, 1.0);
    tv_make(&V, hkv, nk, dv, TV_INTERPAD, &rng, 1.0);
    for (i = 0; i < 3; ++i) {
        tv_make(&O[i], hq, ns[i], dv, TV_PACKED, &rng, -1);
        lse[i] = lse_make(hq * ns[i]);
    }
    dq = tu_tensor_to_double(&Q.t);
    dk = tu_tensor_to_double(&K.t);
    dvv = tu_tensor_to_double(&V.t);
    ref = (double *)tu_xmalloc(hq * (SW + 1) * dv * sizeof *ref);
    rl = (double *)tu_xmalloc(hq * (SW + 1) * sizeof *rl);
    tol = 2e-5 * tv_max_abs(&V);
    for (causal = 0; causal < 2; ++causal) {
        favor_options opt = favor_default_options();
        opt.flags = causal ? FAVOR_CAUSAL : 0u;
        ref_softmax(dq, dk, dvv, ref, hq, hkv, (SW + 1), nk, d, dv, 0.0, causal);
        ref_softmax_lse(dq, dk, rl, hq, hkv, (SW + 1), nk, d, 0.0, causal);
        for (i = 0; i < 3; ++i) {
            size_t m = ns[i], off = causal ? (SW + 1) - m : 0, h, r, c;
            favor_tensor q = tv_rows(&Q.t, off, m);
            favor_status st;
            double err = 0, lerr = 0;
            print_message("switch: hq %u hkv %u n %u nk %u d %u dv %u %s\n", (unsigned)hq,
                          (unsigned)hkv, (unsigned)m, (unsigned)nk, (unsigned)d,
                          (unsigned)dv, causal ? "causal (last rows)" : "full (first rows)");
            tv_reset(&O[i]);
            lse_reset(lse[i], hq * m);
            opt.lse = lse[i] + DC_GUARD;
            st = favor_softmax_attention(&q, &K.t, &V.t, &O[i].t, &opt);
            if (st != FAVOR_OK) {
                print_error("  status %s\n", favor_status_string(st));
                ++fails;
                continue;
            }
            if (!tv_unchanged(&Q) || !tv_unchanged(&K) || !tv_unchanged(&V)) {
                print_error("  an input buffer was written\n");
                ++fails;
            }
            if (!tv_view_finite(&O[i])) {
                print_error("  an output element is not finite (or was never written)\n");
                ++fails;
            }
            if (!lse_guards_intact(lse[i], hq * m)) {
                print_error("  a float next to opts.lse was written\n");
                ++fails;
            }
            for (h = 0; h < hq; ++h)
                for (r = 0; r < m; ++r) {
                    double y = rl[h * (SW + 1) + off + r], t;
                    t = fabs((double)lse[i][DC_GUARD + h * m + r] - y) / (1e-5 * (1 + fabs(y)));
                    if (!(t <= lerr)) lerr = t;
                    for (c = 0; c < dv; ++c) {
                        double e = fabs((double)tu_at(&O[i].t, h, r, c) -
                                        ref[(h * (SW + 1) + off + r) * dv + c]);
                        if (!(e <= err)) err = e;
                    }
                }
            print_message("  max|err| %.3g  tol %.3g  (err/tol %.3f); lse err/tol %.3f\n", err,
                          tol, err / tol, lerr);
            if (!(err <= tol)) {
                print_error("  accuracy: max|err| %.6g > %.6g\n", err, tol);
                ++fails;
            }
            if (!(lerr <= 1)) {
                print_error("  lse: error %.3f x its tolerance\n", lerr);
                ++fails;
            }
        }
        /* rows of call a against the same rows of call b */
        for (i = 0; i < 3; ++i) {
            size_t a = pa[i], b = pb[i], rows = ns[a], off = causal ? ns[b] - ns[a] : 0, h, r;
            double e = rows_max_diff(&O[a].t, 0, &O[b].t, off, rows), le = 0;
            for (h = 0; h < hq; ++h)
                for (r = 0; r < rows; ++r) {
                    double x = lse[a][DC_GUARD + h * ns[a] + r];
                    double y = lse[b][DC_GUARD + h * ns[b] + off + r];
                    double t = fabs(x - y) / (2e-5 * (1 + fabs(y)));
                    if (!(t <= le)) le = t;
                }
            print_message("  n %u vs n %u, %u shared rows: max|dO| %.3g (tol %.3g), "
                          "lse diff/tol %.3f\n", (unsigned)ns[a], (unsigned)ns[b],
                          (unsigned)rows, e, tol, le);
            if (!(e <= tol)) {
                print_error("  n %u and n %u disagree: max|dO| %.6g > %.6g\n",
                            (unsigned)ns[a], (unsigned)ns[b], e, tol);
                ++fails;
            }
            if (!(le <= 1)) {
                print_error("  n %u and n %u disagree on lse (%.3f x tol)\n", (unsigned)ns[a],
                            (unsigned)ns[b], le);
                ++fails;
            }
        }
    }
    for (i = 0; i < 3; ++i) {
        tv_free(&O[i]);
        free(lse[i]);
    }
    free(dq);
    free(dk);
    free(dvv);
    free(ref);
    free(rl);
    tv_free(&Q);
    tv_free(&K);
    tv_free(&V);
    return fails;
}

static void test_decode_switch(void **state)
{
    int fails = 0;
    (void)state;
    fails += run_switch(4, 4, 1000, 32, 32, 81);
    fails += run_switch(8, 1, 513, 128, 64, 82);
    assert_int_equal(fails, 0);
}

/* ---- 3. thread identity ------------------------------------------------------ */

typedef struct {
    size_t hq, hkv, n, nk, d, dv;
    int causal;
} th_case;

static void test_decode_threads_identical(void **state)
{
    static const th_case tc[] = {
        {  8, 2,  1, 1536,  32,  32, 0 },
        {  8, 2,  4, 1536,  32,  32, 1 },
        {  8, 2, 16, 1537,  32,  32, 1 },
        {  4, 4, 16, 2000,  32,  16, 0 },
        {  4, 4,  4, 2000,  64,  32, 1 },
        {  8, 1, 16,  511,  32,  32, 0 },
        {  8, 8,  1,  511,  32,  32, 1 },
        { 16, 2,  1, 1537,  64,  64, 0 },
        {  4, 1, 16, 1536,  32,  16, 1 },
        {  4, 2,  1, 4700,  32,  32, 1 }, /* 20 blocks: on 2 threads, 16 runs of 1-2 */
    };
    static const int threads[] = { 1, 2, 3, 4 };
    size_t ci, ti;
    int fails = 0;
    (void)state;
    for (ci = 0; ci < sizeof tc / sizeof tc[0]; ++ci) {
        const th_case *c = &tc[ci];
        size_t cnt = c->hq * c->n;
        tu_rng rng;
        tv_buf Q, K, V, O;
        float *lse = lse_make(cnt), *o1 = NULL, *l1 = NULL;
        rng.s = 9000 + ci;
        tv_make(&Q, c->hq, c->n, c->d, TV_PACKED, &rng, 1.0);
        tv_make(&K, c->hkv, c->nk, c->d, ci % 2 ? TV_INTERPAD : TV_INTERLEAVED, &rng, 1.0);
        tv_make(&V, c->hkv, c->nk, c->dv, ci % 2 ? TV_INTERPAD : TV_INTERLEAVED, &rng, 1.0);
        tv_make(&O, c->hq, c->n, c->dv, ci % 3 ? TV_PACKED : TV_INTERPAD, &rng, -1);
        print_message("threads: hq %u hkv %u n %u nk %u d %u dv %u %s\n", (unsigned)c->hq,
                      (unsigned)c->hkv, (unsigned)c->n, (unsigned)c->nk, (unsigned)c->d,
                      (unsigned)c->dv, c->causal ? "causal" : "full");
        for (ti = 0; ti < TU_COUNTS(sizeof threads / sizeof threads[0], 2); ++ti) {
            favor_options opt = favor_default_options();
            favor_status st;
            size_t bytes;
            void *ws;
            opt.flags = c->causal ? FAVOR_CAUSAL : 0u;
            opt.threads = threads[ti];
            opt.lse = lse + DC_GUARD;
            bytes = favor_softmax_attention_workspace(&Q.t, &K.t, &V.t, &opt);
            if (!bytes) {
                print_error("  threads %d: the workspace query returned 0\n", threads[ti]);
                ++fails;
            }
            ws = tu_xmalloc(bytes);
            opt.workspace = ws;
            opt.workspace_size = bytes;
            tv_reset(&O);
            lse_reset(lse, cnt);
            st = favor_softmax_attention(&Q.t, &K.t, &V.t, &O.t, &opt);
            free(ws);
            if (st != FAVOR_OK) {
                print_error("  threads %d: status %s\n", threads[ti], favor_status_string(st));
                ++fails;
                continue;
            }
            if (!tv_view_finite(&O) || !tv_gaps_unchanged(&O) ||
                !lse_guards_intact(lse, cnt)) {
                print_error("  threads %d: output not fully written, or a gap written\n",
                            threads[ti]);
                ++fails;
            }
            if (threads[ti] == 1) {
                o1 = (float *)tu_xmalloc(O.len * sizeof *o1);
                l1 = (float *)tu_xmalloc(cnt * sizeof *l1);
                memcpy(o1, O.buf, O.len * sizeof *o1);
                memcpy(l1, lse + DC_GUARD, cnt * sizeof *l1);
                /* accuracy is test_decode_accuracy's: here a softmax row is a convex
                 * combination of value rows */
                if (!(tv_max_abs(&O) <= tv_max_abs(&V) * (1 + 1e-5))) {
                    print_error("  threads 1: max|O| %.6g exceeds max|V| %.6g\n",
                                tv_max_abs(&O), tv_max_abs(&V));
                    ++fails;
                }
            } else if (o1) {
                int same_o = memcmp(o1, O.buf, O.len * sizeof *o1) == 0;
                int same_l = memcmp(l1, lse + DC_GUARD, cnt * sizeof *l1) == 0;
                print_message("  threads %d (workspace %zu bytes): %s\n", threads[ti], bytes,
                              same_o && same_l ? "bit-identical" : "DIFFERS");
                if (!same_o) {
                    size_t i;
                    for (i = 0; i < O.len && !memcmp(&o1[i], &O.buf[i], sizeof *o1); ++i)
                        continue;
                    print_error("  threads %d: output differs from threads 1 at float %zu "
                                "(%.9g vs %.9g)\n", threads[ti], i, (double)O.buf[i],
                                (double)o1[i]);
                    ++fails;
                }
                if (!same_l) {
                    print_error("  threads %d: lse differs from threads 1\n", threads[ti]);
                    ++fails;
                }
            }
        }
        free(o1);
        free(l1);
        free(lse);
        tv_free(&Q);
        tv_free(&K);
        tv_free(&V);
        tv_free(&O);
    }
    assert_int_equal(fails, 0);
}

/* ---- 4. no future dependence ------------------------------------------------- */

/* every element of key/value row j of t (all heads) = x */
static void set_row(const favor_tensor *t, size_t j, float x)
{
    size_t h, c;
    for (h = 0; h < t->heads; ++h)
        for (c = 0; c < t->cols; ++c) ((float *)t->data)[h * t->head_stride + j * t->row_stride + c] = x;
}

/* Four causal rows of 4 query heads on one (R = 16 rows per key/value head) and
 * of 16 heads (R = 64: scored key-major, favor__decode_lanes, on every backend) */
static void test_decode_no_future_dependence(void **state)
{
    static const size_t nks[] = { 1000, 513, 700 }, hqs[] = { 4, 4, 16 };
    static const float bad[] = { 1e30f, -1e30f, INFINITY, -INFINITY, NAN };
    static const char *bad_name[] = { "1e30", "-1e30", "inf", "-inf", "NaN" };
    const size_t hkv = 1, n = 4, d = 32, dv = 32;
    size_t ni, back, bi, where;
    int fails = 0;
    (void)state;
    for (ni = 0; ni < sizeof nks / sizeof nks[0]; ++ni) {
        size_t nk = nks[ni], hq = hqs[ni];
        tu_rng rng;
        tv_buf Q, K, V, O0, O1;
        float *l0 = lse_make(hq * n), *l1 = lse_make(hq * n);
        favor_options opt = favor_default_options();
        favor_status st;
        rng.s = 300 + ni;
        tv_make(&Q, hq, n, d, TV_PACKED, &rng, 1.0);
        tv_make(&K, hkv, nk, d, TV_INTERLEAVED, &rng, 1.0);
        tv_make(&V, hkv, nk, dv, TV_INTERLEAVED, &rng, 1.0);
        tv_make(&O0, hq, n, dv, TV_PACKED, &rng, -1);
        tv_make(&O1, hq, n, dv, TV_PACKED, &rng, -1);
        opt.flags = FAVOR_CAUSAL;
        opt.threads = 1; /* thread counts are test_decode_threads_identical's */
        opt.lse = l0 + DC_GUARD;
        st = favor_softmax_attention(&Q.t, &K.t, &V.t, &O0.t, &opt);
        assert_int_equal(st, FAVOR_OK);
        assert_true(tv_view_finite(&O0));
        fails += dc_compare(&Q.t, &K.t, &V.t, &O0.t, opt.lse, 0.0f, 1);
        opt.lse = l1 + DC_GUARD;
        /* key nk - back is seen by rows i >= n - back: rows [0, n - back) do not */
        for (back = 1; back <= 3; ++back) {
            size_t j = nk - back, clean = n - back, h;
            for (where = 0; where < 2; ++where)
                for (bi = 0; bi < sizeof bad / sizeof bad[0]; ++bi) {
                    int last_changed = 0, lse_same = 1;
                    set_row(where ? &V.t : &K.t, j, bad[bi]);
                    tv_reset(&O1);
                    lse_reset(l1, hq * n);
                    st = favor_softmax_attention(&Q.t, &K.t, &V.t, &O1.t, &opt);
                    tv_reset(&K);
                    tv_reset(&V);
                    if (st != FAVOR_OK) {
                        print_error("  nk %u key %u %s = %s: status %s\n", (unsigned)nk,
                                    (unsigned)j, where ? "V" : "K", bad_name[bi],
                                    favor_status_string(st));
                        ++fails;
                        continue;
                    }
                    for (h = 0; h < hq; ++h) {
                        if (memcmp(l0 + DC_GUARD + h * n, l1 + DC_GUARD + h * n,
                                   clean * sizeof(float)) != 0)
                            lse_same = 0;
                        if (memcmp((float *)O0.t.data + h * O0.t.head_stride + (n - 1) * O0.t.row_stride,
                                   (float *)O1.t.data + h * O1.t.head_stride + (n - 1) * O1.t.row_stride,
                                   dv * sizeof(float)) != 0)
                            last_changed = 1;
                    }
                    if (!rows_identical(&O0.t, &O1.t, clean) || !lse_same) {
                        print_error("  nk %u: key %u %s = %s changed row(s) [0, %u) that do "
                                    "not see it (%s)\n", (unsigned)nk, (unsigned)j,
                                    where ? "V" : "K", bad_name[bi], (unsigned)clean,
                                    lse_same ? "O" : "lse");
                        ++fails;
                    }
                    if (!last_changed) {
                        print_error("  nk %u: key %u %s = %s did not change the last row, "
                                    "which sees it\n", (unsigned)nk, (unsigned)j,
                                    where ? "V" : "K", bad_name[bi]);
                        ++fails;
                    }
                    if (!lse_guards_intact(l1, hq * n)) {
                        print_error("  a float next to opts.lse was written\n");
                        ++fails;
                    }
                }
            print_message("no future dependence: hq %u nk %u, key %u (+-1e30, +-inf, NaN in "
                          "K, in V): rows [0, %u) checked\n", (unsigned)hq, (unsigned)nk,
                          (unsigned)j, (unsigned)clean);
        }
        free(l0);
        free(l1);
        tv_free(&Q);
        tv_free(&K);
        tv_free(&V);
        tv_free(&O0);
        tv_free(&O1);
    }
    assert_int_equal(fails, 0);
}

/* ---- 5. workspace ------------------------------------------------------------ */

static void test_decode_workspace(void **state)
{
    static const size_t ns[] = { 1, 16 };
    const size_t hq = 4, hkv = 1, nk = 5000, d = 32, dv = 32;
    size_t ni;
    (void)state;
    for (ni = 0; ni < sizeof ns / sizeof ns[0]; ++ni) {
        size_t n = ns[ni], bytes, off;
        int causal = ni == 1;
        tu_rng rng;
        tv_buf Q, K, V, O, Oa;
        float *lse = lse_make(hq * n), *la = lse_make(hq * n);
        unsigned char *ws;
        favor_options opt = favor_default_options();
        rng.s = 400 + ni;
        tv_make(&Q, hq, n, d, TV_PACKED, &rng, 1.0);
        tv_make(&K, hkv, nk, d, TV_INTERLEAVED, &rng, 1.0);
        tv_make(&V, hkv, nk, dv, TV_INTERLEAVED, &rng, 1.0);
        tv_make(&O, hq, n, dv, TV_PACKED, &rng, -1);
        tv_make(&Oa, hq, n, dv, TV_PACKED, &rng, -1);
        opt.flags = causal ? FAVOR_CAUSAL : 0u;
        bytes = favor_softmax_attention_workspace(&Q.t, &K.t, &V.t, &opt);
        print_message("workspace: hq %u hkv %u n %u nk %u d %u %s: %zu bytes\n", (unsigned)hq,
                      (unsigned)hkv, (unsigned)n, (unsigned)nk, (unsigned)d,
                      causal ? "causal" : "full", bytes);
        assert_true(bytes > 0);
        /* the library's own allocation: the reference result */
        opt.lse = la + DC_GUARD;
        assert_int_equal(favor_softmax_attention(&Q.t, &K.t, &V.t, &Oa.t, &opt), FAVOR_OK);
        assert_true(tv_view_finite(&Oa));
        assert_true(tv_max_abs(&Oa) <= tv_max_abs(&V) * (1 + 1e-5)); /* convex combinations */
        /* the queried size, at an aligned and at an odd address: the same bits */
        ws = (unsigned char *)tu_xmalloc(bytes + 64);
        opt.lse = lse + DC_GUARD;
        for (off = 0; off < 4; off += 3) {
            opt.workspace = ws + off;
            opt.workspace_size = bytes;
            tv_reset(&O);
            lse_reset(lse, hq * n);
            assert_int_equal(favor_softmax_attention(&Q.t, &K.t, &V.t, &O.t, &opt), FAVOR_OK);
            assert_memory_equal(O.buf, Oa.buf, O.len * sizeof *O.buf);
            assert_memory_equal(lse, la, (hq * n + 2 * DC_GUARD) * sizeof *lse);
        }
        /* one byte short: refused, nothing written */
        tv_reset(&O);
        lse_reset(lse, hq * n);
        opt.workspace = ws;
        opt.workspace_size = bytes - 1;
        assert_int_equal(favor_softmax_attention(&Q.t, &K.t, &V.t, &O.t, &opt),
                         FAVOR_E_WORKSPACE);
        assert_true(tv_unchanged(&O));
        assert_true(all_ff(lse, (hq * n + 2 * DC_GUARD) * sizeof *lse));
        assert_true(tv_unchanged(&Q) && tv_unchanged(&K) && tv_unchanged(&V));
        free(ws);
        free(lse);
        free(la);
        tv_free(&Q);
        tv_free(&K);
        tv_free(&V);
        tv_free(&O);
        tv_free(&Oa);
    }
    {
        /* only queried, never read: views at a low fake address (fits 32 bits) */
        float *base = (float *)(void *)(uintptr_t)4096;
        favor_tensor q1 = favor_tensor_packed(base, 8, 1, 128);
        favor_tensor q16 = favor_tensor_packed(base, 8, 16, 128);
        favor_tensor ks = favor_tensor_packed(base, 2, 1000, 128);
        favor_tensor kb = favor_tensor_packed(base, 2, 100000, 128);
        favor_options opt = favor_default_options();
        size_t s1 = favor_softmax_attention_workspace(&q1, &ks, &ks, &opt);
        size_t b1 = favor_softmax_attention_workspace(&q1, &kb, &kb, &opt);
        size_t s16 = favor_softmax_attention_workspace(&q16, &ks, &ks, &opt);
        size_t b16 = favor_softmax_attention_workspace(&q16, &kb, &kb, &opt);
        printf("workspace bytes, hq 8 hkv 2 d 128, default threads: n 1: nk 1000 %zu, "
               "nk 100000 %zu; n 16: nk 1000 %zu, nk 100000 %zu\n", s1, b1, s16, b16);
        assert_true(s1 > 0);
        assert_true(b1 > 0);
        assert_true(s16 > 0);
        assert_true(b16 > 0);
    }
}

/* ---- 6. validation on decode shapes ------------------------------------------ */

/* one rejected call: the expected status, and no byte of O, Q, K, V or lse
 * (hq x n floats plus guards at lsebuf) written. Returns 1 on a failure. */
static int expect_refused(favor_status want, const favor_tensor *q, const favor_tensor *k,
                          const favor_tensor *v, const favor_tensor *o,
                          const favor_options *opt, tv_buf *Q, tv_buf *K, tv_buf *V, tv_buf *O,
                          float *lsebuf, size_t lse_cnt, const char *what)
{
    favor_status st;
    tv_reset(O);
    lse_reset(lsebuf, lse_cnt);
    st = favor_softmax_attention(q, k, v, o, opt);
    if (st != want) {
        print_error("  %s: status %s, expected %s\n", what, favor_status_string(st),
                    favor_status_string(want));
        return 1;
    }
    if (!tv_unchanged(O) || !tv_unchanged(Q) || !tv_unchanged(K) || !tv_unchanged(V) ||
        !all_ff(lsebuf, (lse_cnt + 2 * DC_GUARD) * sizeof *lsebuf)) {
        print_error("  %s: refused, but something was written\n", what);
        return 1;
    }
    return 0;
}

static void test_decode_validation(void **state)
{
    static const size_t ns[] = { 1, 16 };
    const size_t hq = 8, hkv = 2, nk = 1000, d = 64, dv = 32;
    size_t ni;
    int fails = 0;
    (void)state;
    for (ni = 0; ni < sizeof ns / sizeof ns[0]; ++ni) {
        size_t n = ns[ni];
        tu_rng rng;
        tv_buf Q, K, V, O;
        float *lse = lse_make(hq * n);
        favor_options opt = favor_default_options(), o2;
        favor_tensor t, t2;
        unsigned char *ws;
        size_t bytes;
        rng.s = 500 + ni;
        tv_make(&Q, hq, n, d, TV_PACKED, &rng, 1.0);
        tv_make(&K, hkv, nk, d, TV_INTERLEAVED, &rng, 1.0);
        tv_make(&V, hkv, nk, dv, TV_INTERLEAVED, &rng, 1.0);
        tv_make(&O, hq, n, dv, TV_PACKED, &rng, -1);
        opt.flags = ni ? FAVOR_CAUSAL : 0u;
        opt.lse = lse + DC_GUARD;
        print_message("validation: hq %u hkv %u n %u nk %u d %u dv %u\n", (unsigned)hq,
                      (unsigned)hkv, (unsigned)n, (unsigned)nk, (unsigned)d, (unsigned)dv);
#define REFUSED(want, q, k, v, o, op, what) \
    (fails += expect_refused(want, q, k, v, o, op, &Q, &K, &V, &O, lse, hq * n, what))
        /* the valid call first: the cases below each change one thing */
        tv_reset(&O);
        assert_int_equal(favor_softmax_attention(&Q.t, &K.t, &V.t, &O.t, &opt), FAVOR_OK);
        assert_true(tv_view_finite(&O));

        REFUSED(FAVOR_E_NULL, NULL, &K.t, &V.t, &O.t, &opt, "q NULL");
        REFUSED(FAVOR_E_NULL, &Q.t, NULL, &V.t, &O.t, &opt, "k NULL");
        REFUSED(FAVOR_E_NULL, &Q.t, &K.t, NULL, &O.t, &opt, "v NULL");
        REFUSED(FAVOR_E_NULL, &Q.t, &K.t, &V.t, NULL, &opt, "out NULL");
        t = K.t;
        t.data = NULL;
        REFUSED(FAVOR_E_NULL, &Q.t, &t, &V.t, &O.t, &opt, "k->data NULL");
        t = Q.t;
        t.data = NULL;
        REFUSED(FAVOR_E_NULL, &t, &K.t, &V.t, &O.t, &opt, "q->data NULL");

        t = K.t;
        t.cols = d - 1;
        REFUSED(FAVOR_E_SHAPE, &Q.t, &t, &V.t, &O.t, &opt, "k->cols != q->cols");
        t = V.t;
        t.rows = nk - 1;
        REFUSED(FAVOR_E_SHAPE, &Q.t, &K.t, &t, &O.t, &opt, "v->rows != k->rows");
        t = K.t;
        t2 = V.t;
        t.heads = t2.heads = 3; /* 8 query heads over 3 kv heads */
        t.head_stride = d;
        t2.head_stride = dv;
        t.row_stride = 3 * d;
        t2.row_stride = 3 * dv;
        t.rows = t2.rows = nk * 2 / 3;
        REFUSED(FAVOR_E_SHAPE, &Q.t, &t, &t2, &O.t, &opt, "hq % hkv != 0");
        t = O.t;
        t.rows = n + 1;
        t.head_stride = (n + 1) * dv;
        REFUSED(FAVOR_E_SHAPE, &Q.t, &K.t, &V.t, &t, &opt, "out->rows != q->rows");
        t = O.t;
        t.cols = dv - 1;
        REFUSED(FAVOR_E_SHAPE, &Q.t, &K.t, &V.t, &t, &opt, "out->cols != v->cols");
        t = O.t;
        t.heads = hq / 2;
        REFUSED(FAVOR_E_SHAPE, &Q.t, &K.t, &V.t, &t, &opt, "out->heads != q->heads");
        t = K.t;
        t.rows = 0;
        t2 = V.t;
        t2.rows = 0;
        REFUSED(FAVOR_E_SHAPE, &Q.t, &t, &t2, &O.t, &opt, "nk = 0");

        /* an output inside K (or V, Q): the call must not write it */
        t = favor_tensor_packed(K.buf, hq, n, dv);
        REFUSED(FAVOR_E_ALIAS, &Q.t, &K.t, &V.t, &t, &opt, "out overlaps K");
        t = favor_tensor_packed(V.buf + 7, hq, n, dv);
        REFUSED(FAVOR_E_ALIAS, &Q.t, &K.t, &V.t, &t, &opt, "out overlaps V");
        t = favor_tensor_packed(Q.buf, hq, n, dv);
        REFUSED(FAVOR_E_ALIAS, &Q.t, &K.t, &V.t, &t, &opt, "out overlaps Q");
        /* lse over the output or over K */
        o2 = opt;
        o2.lse = O.buf;
        REFUSED(FAVOR_E_ALIAS, &Q.t, &K.t, &V.t, &O.t, &o2, "lse overlaps out");
        o2.lse = K.buf + 3;
        REFUSED(FAVOR_E_ALIAS, &Q.t, &K.t, &V.t, &O.t, &o2, "lse overlaps K");
        /* a workspace over K, big enough */
        o2 = opt;
        bytes = favor_softmax_attention_workspace(&Q.t, &K.t, &V.t, &opt);
        if (bytes <= K.len * sizeof(float)) {
            o2.workspace = K.buf;
            o2.workspace_size = bytes;
            REFUSED(FAVOR_E_ALIAS, &Q.t, &K.t, &V.t, &O.t, &o2, "workspace overlaps K");
        } else {
            print_message("  (workspace of %zu bytes larger than K: overlap case skipped)\n",
                          bytes);
        }
        /* a workspace one byte short (with lse requested) */
        ws = (unsigned char *)tu_xmalloc(bytes);
        o2.workspace = ws;
        o2.workspace_size = bytes - 1;
        REFUSED(FAVOR_E_WORKSPACE, &Q.t, &K.t, &V.t, &O.t, &o2, "workspace one byte short");
        free(ws);
        /* bad options */
        o2 = opt;
        o2.threads = -1;
        REFUSED(FAVOR_E_ARG, &Q.t, &K.t, &V.t, &O.t, &o2, "threads -1");
        o2 = opt;
        o2.scale = (float)NAN;
        REFUSED(FAVOR_E_ARG, &Q.t, &K.t, &V.t, &O.t, &o2, "scale NaN");
        o2 = opt;
        o2.flags = 4u;
        REFUSED(FAVOR_E_ARG, &Q.t, &K.t, &V.t, &O.t, &o2, "unknown flag");
        o2 = opt;
        o2.threads = -1;
        if (favor_softmax_attention_workspace(&Q.t, &K.t, &V.t, &o2) != 0) {
            print_error("  the workspace query accepted threads -1\n");
            ++fails;
        }
        if (favor_softmax_attention_workspace(NULL, &K.t, &V.t, &opt) != 0) {
            print_error("  the workspace query accepted q NULL\n");
            ++fails;
        }
#undef REFUSED
        free(lse);
        tv_free(&Q);
        tv_free(&K);
        tv_free(&V);
        tv_free(&O);
    }
    assert_int_equal(fails, 0);
}

/* ---- 8. caches off the 64-byte lines ------------------------------------------- */

/* hkv heads of nk rows of d floats at base + off (base on a 64-byte line): packed
 * ([head][row][col], rs = d) or interleaved with a pad of `pad` floats per row
 * ([row][heads * d + pad], each row then starting at another offset in its line);
 * every float of buf outside the view is NaN. Returns the view. */
static favor_tensor ua_place(float *buf, size_t cap, const float *src, size_t hkv, size_t nk,
                             size_t d, int inter, size_t pad, size_t off)
{
    float *base = (float *)(void *)((unsigned char *)buf + (64 - (uintptr_t)buf % 64) % 64);
    favor_tensor t = favor_tensor_packed(base + off, hkv, nk, d);
    size_t h, j, c;
    for (h = 0; h < cap; ++h) buf[h] = (float)NAN;
    if (inter) {
        t.head_stride = d;
        t.row_stride = hkv * d + pad;
    }
    for (h = 0; h < hkv; ++h)
        for (j = 0; j < nk; ++j)
            for (c = 0; c < d; ++c)
                base[off + h * t.head_stride + j * t.row_stride + c] = src[(h * nk + j) * d + c];
    return t;
}

/* One query row or a few, 2 to 8 rows per key/value head (the grouped decode
 * kernels, which take a cache off the lines in aligned loads on AVX-512), K and V
 * at float offsets 0 to 15 from a 64-byte line, packed and interleaved with
 * padded rows (each row at another offset), the floats around them NaN: every
 * call gives the bits of the call on the lines, and that call matches the
 * reference. */
static void test_decode_unaligned(void **state)
{
    static const size_t cfg[][3] = { { 2, 1, 1 }, { 4, 1, 1 }, { 8, 1, 1 }, { 4, 2, 2 },
                                     { 1, 1, 4 } }; /* hq, hkv, n */
    static const size_t offs[][2] = { { 1, 5 }, { 4, 4 }, { 15, 12 }, { 8, 0 }, { 0, 3 } };
    static const size_t ds[2] = { 64, 128 };
    const size_t nk = 700;
    int fails = 0;
    size_t ci, di, oi, lay;
    (void)state;
    for (ci = 0; ci < sizeof cfg / sizeof cfg[0]; ++ci)
        for (di = 0; di < 2; ++di)
            for (lay = 0; lay < 2; ++lay) {
                const size_t hq = cfg[ci][0], hkv = cfg[ci][1], n = cfg[ci][2], d = ds[di];
                const size_t pad = lay ? 1 : 0, cap = hkv * nk * (d + pad) + 48;
                tu_rng rng;
                float *q, *k, *v, *kb, *vb, *o0, *o;
                favor_tensor Q, K, V, O0, O;
                favor_options opt = favor_default_options();
                rng.s = 0x5eedull + 16 * ci + 4 * di + lay;
                q = tu_normal_floats(&rng, hq * n * d, 1.0);
                k = tu_normal_floats(&rng, hkv * nk * d, 1.0);
                v = tu_normal_floats(&rng, hkv * nk * d, 1.0);
                kb = (float *)tu_xmalloc(cap * sizeof *kb);
                vb = (float *)tu_xmalloc(cap * sizeof *vb);
                o0 = (float *)tu_xmalloc(hq * n * d * sizeof *o0);
                o = (float *)tu_xmalloc(hq * n * d * sizeof *o);
                Q = favor_tensor_packed(q, hq, n, d);
                O0 = favor_tensor_packed(o0, hq, n, d);
                O = favor_tensor_packed(o, hq, n, d);
                opt.flags = FAVOR_CAUSAL;
                opt.threads = 1;
                K = ua_place(kb, cap, k, hkv, nk, d, (int)lay, pad, 0);
                V = ua_place(vb, cap, v, hkv, nk, d, (int)lay, pad, 0);
                print_message("unaligned: hq %u hkv %u n %u d %u %s\n", (unsigned)hq,
                              (unsigned)hkv, (unsigned)n, (unsigned)d,
                              lay ? "interleaved, rows of d + 1" : "packed");
                if (favor_softmax_attention(&Q, &K, &V, &O0, &opt) != FAVOR_OK) {
                    print_error("  the call on the lines failed\n");
                    ++fails;
                } else
                    fails += dc_compare(&Q, &K, &V, &O0, NULL, 0.0f, 1);
                for (oi = 0; oi < sizeof offs / sizeof offs[0]; ++oi) {
                    K = ua_place(kb, cap, k, hkv, nk, d, (int)lay, pad, offs[oi][0]);
                    V = ua_place(vb, cap, v, hkv, nk, d, (int)lay, pad, offs[oi][1]);
                    memset(o, 0xff, hq * n * d * sizeof *o);
                    if (favor_softmax_attention(&Q, &K, &V, &O, &opt) != FAVOR_OK ||
                        memcmp(o, o0, hq * n * d * sizeof *o)) {
                        print_error("  K at +%u floats, V at +%u: not the bits on the lines\n",
                                    (unsigned)offs[oi][0], (unsigned)offs[oi][1]);
                        ++fails;
                    }
                }
                free(q);
                free(k);
                free(v);
                free(kb);
                free(vb);
                free(o0);
                free(o);
            }
    assert_int_equal(fails, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_accuracy),
        cmocka_unit_test(test_decode_shared_cache_buffer),
        cmocka_unit_test(test_decode_switch),
        cmocka_unit_test(test_decode_threads_identical),
        cmocka_unit_test(test_decode_no_future_dependence),
        cmocka_unit_test(test_decode_workspace),
        cmocka_unit_test(test_decode_validation),
        cmocka_unit_test(test_decode_unaligned),
    };
    if (tu_check_backend() != 0) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
