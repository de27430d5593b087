/* favor_softmax_attention against the float64 reference (tests/reference.c).
 *
 * Accuracy: max |O - O_ref| <= 2e-5 * max|V| on N(0,1) inputs, for a list of
 * representative shapes that together cover d in {1, 3, 16, 64, 128}, d_v != d,
 * n in {1, 2, 17, 257, 1000}, n_k > n and n_k < n (causal and not), 1 and 4
 * heads, grouped-query 4:2 (and 2:1, 4:1), packed, interleaved and padded views,
 * query blocks that read more than 1 MiB of K and V (the prefill prefetches then),
 * default and non-default scales, caller workspace and library allocation.
 * Every call must also leave its inputs and the gaps of its output untouched and
 * write every output element.
 *
 * Robustness: inputs of magnitude up to 1e4 give finite outputs, each a convex
 * combination of the value rows (|o| <= max|V|), causal and not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "favor.h"
#include "reference.h"
#include "test_util.h"
#include "test_views.h"

typedef struct {
    size_t hq, hkv, n, nk, d, dv;
    int causal;
    float scale;              /* 0 = default 1/sqrt(d) */
    tv_layout lq, lkv, lo;    /* layouts of Q, of K and V, of O */
    int workspace;            /* 1: pass a caller workspace of the queried size */
} sm_case;

static const sm_case cases[] = {
    /* hq hkv    n    nk    d   dv  causal scale  Q            K, V            O          ws */
    { 1, 1,    1,    1,   1,   1, 0, 0.0f, TV_PACKED,      TV_PACKED,      TV_PACKED,      0 },
    { 1, 1,    1,    1,   1,   1, 1, 0.0f, TV_PADDED,      TV_PADDED,      TV_PADDED,      1 },
    { 1, 1,    2,    2,   3,   5, 1, 0.0f, TV_PADDED,      TV_PACKED,      TV_PADDED,      0 },
    { 1, 1,    2,    1,   3,   3, 1, 0.7f, TV_PACKED,      TV_PADDED,      TV_PACKED,      1 },
    { 4, 4,   17,   17,  16,  16, 1, 0.0f, TV_INTERLEAVED, TV_INTERLEAVED, TV_INTERLEAVED, 0 },
    { 4, 4,   17,   17,  16,  16, 0, 0.0f, TV_INTERPAD,    TV_INTERLEAVED, TV_PADDED,      1 },
    { 4, 2,   17,   40,  16,   8, 0, 0.0f, TV_PADDED,      TV_INTERLEAVED, TV_INTERPAD,    1 },
    { 4, 2,   17,   40,  16,   8, 1, 0.0f, TV_INTERLEAVED, TV_PADDED,      TV_INTERLEAVED, 0 },
    { 4, 2,   40,   17,  64,  32, 1, 0.0f, TV_PACKED,      TV_INTERLEAVED, TV_INTERPAD,    0 },
    { 4, 2,   40,   17,  64,  32, 0, 0.2f, TV_INTERPAD,    TV_INTERPAD,    TV_PACKED,      1 },
    { 1, 1,  257,  100, 128,  64, 0, 0.02f, TV_PADDED,     TV_PADDED,      TV_PADDED,      0 },
    { 1, 1,  100,  257,  64,  64, 1, 0.05f, TV_PACKED,     TV_PACKED,      TV_PADDED,      1 },
    { 1, 1, 1000, 1000,  64,  64, 1, 0.0f, TV_PACKED,      TV_PACKED,      TV_PACKED,      1 },
    { 1, 1, 1000, 1000,   3,  17, 0, 1.5f, TV_PADDED,      TV_PACKED,      TV_PACKED,      0 },
    { 4, 4,  257,  257,   3,   7, 0, 2.0f, TV_INTERLEAVED, TV_INTERLEAVED, TV_INTERLEAVED, 0 },
    { 4, 2,    1, 1000,  64,  64, 1, 0.0f, TV_PACKED,      TV_INTERLEAVED, TV_PACKED,      0 },
    { 4, 1,    1,  257, 128, 128, 0, 0.0f, TV_INTERLEAVED, TV_PACKED,      TV_INTERLEAVED, 1 },
    { 1, 1, 1000,   17, 128,  32, 1, 0.0f, TV_PACKED,      TV_PADDED,      TV_PACKED,      0 },
    { 1, 1, 1000,  257,  16,  24, 0, 0.0f, TV_PADDED,      TV_PACKED,      TV_INTERPAD,    0 },
    { 2, 1,    2, 1000,  16,  16, 0, 0.3f, TV_INTERPAD,    TV_INTERPAD,    TV_INTERPAD,    1 },
    { 2, 1,    2, 1000,  16,  16, 1, 0.3f, TV_PACKED,      TV_PACKED,      TV_PACKED,      0 },
    { 1, 1,  257,  257, 128, 128, 1, 0.0f, TV_PACKED,      TV_PACKED,      TV_PACKED,      0 },
    { 1, 1,   17,    2,   1,   4, 1, 3.0f, TV_PACKED,      TV_PADDED,      TV_PADDED,      0 },
    /* blocks that read more than 1 MiB of fp32 K and V: the next tile is prefetched */
    { 1, 1,   70, 2200,  64,  64, 0, 0.0f, TV_PACKED,      TV_PADDED,      TV_PACKED,      0 },
    { 1, 1,  130, 1500, 128,  64, 1, 0.0f, TV_PADDED,      TV_INTERLEAVED, TV_PADDED,      1 },
};

/* Run one case with inputs N(0, sigma^2). Returns the number of failed checks;
 * With accuracy != 0 the output is compared with ref_softmax. */
static int run_case(const sm_case *c, unsigned long long seed, double sigma, int accuracy)
{
    tu_rng rng;
    tv_buf Q, K, V, O;
    favor_options opt = favor_default_options();
    favor_status st;
    void *ws = NULL;
    int fails = 0;

    rng.s = seed;
    tv_make(&Q, c->hq, c->n, c->d, c->lq, &rng, sigma);
    tv_make(&K, c->hkv, c->nk, c->d, c->lkv, &rng, sigma);
    tv_make(&V, c->hkv, c->nk, c->dv, c->lkv, &rng, sigma);
    tv_make(&O, c->hq, c->n, c->dv, c->lo, &rng, -1);

    opt.flags = c->causal ? FAVOR_CAUSAL : 0u;
    opt.scale = c->scale;
    if (c->workspace) {
        size_t bytes = favor_softmax_attention_workspace(&Q.t, &K.t, &V.t, &opt);
        ws = malloc(bytes ? bytes : 1);
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
        if (accuracy) {
            double *q = tu_tensor_to_double(&Q.t), *k = tu_tensor_to_double(&K.t);
            double *v = tu_tensor_to_double(&V.t);
            double *ref = (double *)malloc(c->hq * c->n * c->dv * sizeof *ref);
            double err, tol;
            ref_softmax(q, k, v, ref, c->hq, c->hkv, c->n, c->nk, c->d, c->dv, c->scale,
                        c->causal);
            err = tu_max_abs_diff(&O.t, ref);
            tol = 2e-5 * tv_max_abs(&V);
            print_message("  max|err| %.3g  tol %.3g  (err/tol %.3f)\n", err, tol, err / tol);
            if (!(err <= tol)) {
                print_error("  accuracy: max|err| %.6g > %.6g\n", err, tol);
                ++fails;
            }
            free(q);
            free(k);
            free(v);
            free(ref);
        } else {
            /* A softmax row is a convex combination of value rows. */
            double mo = tv_max_abs(&O), mv = tv_max_abs(&V);
            if (!(mo <= mv * (1 + 1e-5))) {
                print_error("  max|O| %.6g exceeds max|V| %.6g\n", mo, mv);
                ++fails;
            }
        }
    }
    free(ws);
    tv_free(&Q);
    tv_free(&K);
    tv_free(&V);
    tv_free(&O);
    return fails;
}

static void print_case(size_t i, const sm_case *c)
{
    print_message("case %2u: hq %u hkv %u n %u nk %u d %u dv %u %s scale %g  Q %s KV %s O %s%s\n",
                  (unsigned)i, (unsigned)c->hq, (unsigned)c->hkv, (unsigned)c->n,
                  (unsigned)c->nk, (unsigned)c->d, (unsigned)c->dv,
                  c->causal ? "causal" : "full", (double)c->scale, tv_layout_name(c->lq),
                  tv_layout_name(c->lkv), tv_layout_name(c->lo),
                  c->workspace ? " workspace" : "");
}

static void test_softmax_accuracy(void **state)
{
    size_t i;
    int fails = 0;
    (void)state;
    for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        print_case(i, &cases[i]);
        fails += run_case(&cases[i], 1000 + i, 1.0, 1);
    }
    assert_int_equal(fails, 0);
}

/* Inputs N(0,1) scaled by 1e4: scores of order 1e8 must not overflow. */
static void test_softmax_large_inputs_finite(void **state)
{
    static const sm_case big[] = {
        { 4, 2,  70,  90, 16,  8, 0, 0.0f, TV_PACKED, TV_INTERLEAVED, TV_PADDED, 0 },
        { 4, 2,  70,  90, 16,  8, 1, 0.0f, TV_PACKED, TV_INTERLEAVED, TV_PADDED, 0 },
        { 1, 1, 100,  50, 64, 64, 1, 0.0f, TV_PACKED, TV_PACKED,      TV_PACKED, 1 },
        { 1, 1, 100,  50, 64, 64, 0, 1.0f, TV_PACKED, TV_PACKED,      TV_PACKED, 1 },
        { 1, 1, 257, 257,  3,  5, 1, 0.0f, TV_PADDED, TV_PADDED,      TV_PACKED, 0 },
    };
    size_t i;
    int fails = 0;
    (void)state;
    for (i = 0; i < sizeof big / sizeof big[0]; ++i) {
        print_case(i, &big[i]);
        fails += run_case(&big[i], 5000 + i, 1e4, 0);
    }
    assert_int_equal(fails, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax_accuracy),
        cmocka_unit_test(test_softmax_large_inputs_finite),
    };
    if (tu_check_backend() != 0) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
