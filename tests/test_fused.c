/* Fused layouts: q, k, v, out (and for the backward dout, dq, dk, dv) as column
 * blocks of one buffer, as a model that projects [q|k|v] in one matrix product
 * keeps them. The blocks interleave, so their byte spans overlap, but no element
 * is shared: every entry point must accept them (FAVOR_OK), give the results of
 * the same call on packed copies (within 1e-6 relative; the arithmetic is the
 * same, only the addresses differ), and leave every other column untouched.
 * Shifting an output block one float into a neighbour must still be rejected
 * with FAVOR_E_ALIAS and nothing written. Two layouts, each with 2 heads:
 *   per-head   [n][head][q|k|v|out|...]   (head_stride = block, row_stride = 2 blocks)
 *   per-part   [n][q(2d)|k(2d)|v(2dv)|...] (head_stride = d, row_stride = all parts) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "favor.h"
#include "test_util.h"

#define H 2
#define N 70 /* more than one 64-row chunk or tile */
#define D 8
#define DV 5

enum { P_Q, P_K, P_V, P_O, P_DO, P_DQ, P_DK, P_DV, P_COUNT };
static const size_t part_cols[P_COUNT] = { D, D, DV, DV, DV, D, D, DV };

typedef struct {
    float *buf;
    size_t floats;
    favor_tensor t[P_COUNT];
} fused;

/* Lay out every part in one buffer; per_head selects the layout. shift moves
 * part `shifted` that many floats to the left (into its neighbour). */
static void fused_make(fused *fz, int per_head, int shifted, size_t shift, tu_rng *rng)
{
    size_t off[P_COUNT], block = 0, row, i;
    for (i = 0; i < P_COUNT; ++i) {
        off[i] = per_head ? block : H * block;
        block += part_cols[i];
    }
    row = H * block;
    fz->floats = N * row;
    fz->buf = tu_normal_floats(rng, fz->floats, 1.0);
    for (i = 0; i < P_COUNT; ++i) {
        favor_tensor *t = &fz->t[i];
        memset(t, 0, sizeof *t); /* batch 0: one element */
        t->data = fz->buf + off[i] - ((int)i == shifted ? shift : 0);
        t->heads = H;
        t->rows = N;
        t->cols = part_cols[i];
        t->head_stride = per_head ? block : part_cols[i];
        t->row_stride = row;
        t->dtype = FAVOR_F32;
    }
}

/* A packed copy of a strided tensor. */
static favor_tensor packed_copy(const favor_tensor *t)
{
    favor_tensor p;
    size_t h, r;
    p = favor_tensor_packed((float *)malloc(t->heads * t->rows * t->cols * sizeof(float)),
                            t->heads, t->rows, t->cols);
    assert_non_null(p.data);
    for (h = 0; h < t->heads; ++h)
        for (r = 0; r < t->rows; ++r)
            memcpy((float *)p.data + h * p.head_stride + r * p.row_stride,
                   (float *)t->data + h * t->head_stride + r * t->row_stride, t->cols * sizeof(float));
    return p;
}

/* max |a - b| / max(max|b|, tiny) over two views of the same shape */
static double rel_diff(const favor_tensor *a, const favor_tensor *b)
{
    double m = 0, big = 1e-30;
    size_t h, r, c;
    for (h = 0; h < a->heads; ++h)
        for (r = 0; r < a->rows; ++r)
            for (c = 0; c < a->cols; ++c) {
                double x = tu_at(a, h, r, c), y = tu_at(b, h, r, c);
                if (fabs(x - y) > m || x != x) m = x != x ? INFINITY : fabs(x - y);
                if (fabs(y) > big) big = fabs(y);
            }
    return m / big;
}

/* 1 when every element outside the parts in `written` is as in `before` */
static int others_untouched(const fused *fz, const float *before, unsigned written)
{
    unsigned char *mark = (unsigned char *)calloc(fz->floats, 1);
    size_t i, h, r, c;
    int ok = 1;
    assert_non_null(mark);
    for (i = 0; i < P_COUNT; ++i) {
        const favor_tensor *t = &fz->t[i];
        if (!(written >> i & 1u)) continue;
        for (h = 0; h < t->heads; ++h)
            for (r = 0; r < t->rows; ++r)
                for (c = 0; c < t->cols; ++c)
                    mark[(size_t)((float *)t->data - fz->buf) + h * t->head_stride + r * t->row_stride +
                         c] = 1;
    }
    for (i = 0; i < fz->floats; ++i)
        if (!mark[i] && memcmp(&fz->buf[i], &before[i], sizeof(float)) != 0) ok = 0;
    free(mark);
    return ok;
}

typedef enum { M_SOFTMAX, M_ELU1, M_POSITIVE } method;

/* The forward (out) or the backward (dq, dk, dv) of `m` on the views t. */
static favor_status run(method m, int backward, int causal, const favor_tensor *t,
                        const favor_features *f)
{
    favor_options o = favor_default_options();
    o.flags = causal ? FAVOR_CAUSAL : 0;
    if (m == M_SOFTMAX)
        return backward ? favor_softmax_attention_backward(&t[P_Q], &t[P_K], &t[P_V], &t[P_O],
                                                           &t[P_DO], &t[P_DQ], &t[P_DK],
                                                           &t[P_DV], &o)
                        : favor_softmax_attention(&t[P_Q], &t[P_K], &t[P_V], &t[P_O], &o);
    return backward ? favor_linear_attention_backward(f, &t[P_Q], &t[P_K], &t[P_V], &t[P_DO],
                                                      &t[P_DQ], &t[P_DK], &t[P_DV], &o)
                    : favor_linear_attention(f, &t[P_Q], &t[P_K], &t[P_V], &t[P_O], &o);
}

static void test_fused_layouts(void **state)
{
    static const char *names[] = { "softmax", "elu+1", "FAVOR+" };
    favor_features fe, fp;
    float *wp = (float *)malloc(favor_features_floats(FAVOR_POSITIVE, D, 16) * sizeof(float));
    tu_rng rng = { 11 };
    int per_head, m, backward, causal;
    (void)state;
    assert_non_null(wp);
    assert_int_equal(favor_features_init(&fe, FAVOR_ELU1, D, D, 0, 0, NULL), FAVOR_OK);
    assert_int_equal(favor_features_init(&fp, FAVOR_POSITIVE, D, 16, 0, 5, wp), FAVOR_OK);
    for (per_head = 0; per_head < 2; ++per_head)
        for (m = M_SOFTMAX; m <= M_POSITIVE; ++m)
            for (backward = 0; backward < 2; ++backward)
                for (causal = 0; causal < 2; ++causal) {
                    const favor_features *f = m == M_ELU1 ? &fe : &fp;
                    unsigned written = backward ? (1u << P_DQ | 1u << P_DK | 1u << P_DV)
                                                : 1u << P_O;
                    favor_tensor pk[P_COUNT];
                    fused fz;
                    float *before;
                    size_t i;
                    fused_make(&fz, per_head, -1, 0, &rng);
                    before = (float *)malloc(fz.floats * sizeof(float));
                    assert_non_null(before);
                    if (backward && m == M_SOFTMAX) /* out must be the forward's */
                        assert_int_equal(run(m, 0, causal, fz.t, f), FAVOR_OK);
                    memcpy(before, fz.buf, fz.floats * sizeof(float));
                    for (i = 0; i < P_COUNT; ++i) pk[i] = packed_copy(&fz.t[i]);
                    print_message("%s layout, %s %s%s\n", per_head ? "per-head" : "per-part",
                                  names[m], backward ? "backward" : "forward",
                                  causal ? ", causal" : "");
                    assert_int_equal(run(m, backward, causal, fz.t, f), FAVOR_OK);
                    assert_int_equal(run(m, backward, causal, pk, f), FAVOR_OK);
                    for (i = 0; i < P_COUNT; ++i)
                        if (written >> i & 1u) assert_true(rel_diff(&fz.t[i], &pk[i]) <= 1e-6);
                    assert_true(others_untouched(&fz, before, written));
                    for (i = 0; i < P_COUNT; ++i) free(pk[i].data);
                    free(before);
                    free(fz.buf);
                }
    free(wp);
}

/* An output block shifted one float into its left neighbour shares elements
 * with it: FAVOR_E_ALIAS, and the buffer is unchanged. */
static void test_fused_overlap_rejected(void **state)
{
    favor_features fe;
    tu_rng rng = { 12 };
    int per_head, backward, m;
    (void)state;
    assert_int_equal(favor_features_init(&fe, FAVOR_ELU1, D, D, 0, 0, NULL), FAVOR_OK);
    for (per_head = 0; per_head < 2; ++per_head)
        for (backward = 0; backward < 2; ++backward)
            for (m = M_SOFTMAX; m <= M_ELU1; ++m) {
                /* forward: out into v; backward: dq into dout, dk into dq */
                int shifts[2], s;
                shifts[0] = backward ? P_DQ : P_O;
                shifts[1] = backward ? P_DK : P_O;
                for (s = 0; s < 2; ++s) {
                    fused fz;
                    float *before;
                    fused_make(&fz, per_head, shifts[s], 1, &rng);
                    before = (float *)malloc(fz.floats * sizeof(float));
                    assert_non_null(before);
                    memcpy(before, fz.buf, fz.floats * sizeof(float));
                    assert_int_equal(run((method)m, backward, s, fz.t, &fe), FAVOR_E_ALIAS);
                    assert_memory_equal(before, fz.buf, fz.floats * sizeof(float));
                    free(before);
                    free(fz.buf);
                }
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fused_layouts),
        cmocka_unit_test(test_fused_overlap_rejected),
    };
    if (tu_check_backend() != 0) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
