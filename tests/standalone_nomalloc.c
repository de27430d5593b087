/* FAVOR_NO_MALLOC: allocation is compiled out. A call without workspace that
 * needs one returns FAVOR_E_WORKSPACE and writes nothing; with a workspace of the
 * queried size it succeeds. So does favor_feature_map, which takes no workspace,
 * on a 16-bit row too wide for its stack buffer. The C allocator is redefined around the
 * implementation to a counting stub, so any malloc/calloc/realloc/free the
 * library expands shows up as a failure (the hooks must really be compiled out,
 * not merely unused).
 *
 * Self-contained: the implementation is expanded here (FAVOR_STATIC). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t direct_calls;
static void *direct_malloc(size_t n)
{
    (void)n;
    ++direct_calls;
    return NULL;
}
static void direct_free(void *p)
{
    (void)p;
    ++direct_calls;
}
#define malloc(n) direct_malloc(n)
#define calloc(n, s) direct_malloc((n) * (s))
#define realloc(p, n) (direct_free(p), direct_malloc(n))
#define free(p) direct_free(p)

#define FAVOR_STATIC
#define FAVOR_NO_MALLOC
#define FAVOR_IMPLEMENTATION
#include "favor.h"

#undef malloc
#undef calloc
#undef realloc
#undef free

#include "test_util.h"

enum { HQ = 4, HKV = 2, N = 29, D = 16, DV = 8, M = 24 };

static float *q, *k, *v, *o, *fmem, *stmem;
static favor_tensor Q, K, V, O;
static favor_features F, Felu;
static favor_state St;

static int setup(void **state)
{
    tu_rng rng = {99};
    (void)state;
    (void)&direct_malloc; /* referenced only through the macros above */
    (void)&direct_free;
    q = tu_normal_floats(&rng, HQ * N * D, 0.5);
    k = tu_normal_floats(&rng, HKV * N * D, 0.5);
    v = tu_normal_floats(&rng, HKV * N * DV, 1.0);
    o = (float *)malloc(HQ * N * DV * sizeof(float));
    fmem = (float *)malloc(favor_features_floats(FAVOR_HYPERBOLIC, D, M) * sizeof(float));
    Q = favor_tensor_packed(q, HQ, N, D);
    K = favor_tensor_packed(k, HKV, N, D);
    V = favor_tensor_packed(v, HKV, N, DV);
    O = favor_tensor_packed(o, HQ, N, DV);
    if (favor_features_init(&F, FAVOR_HYPERBOLIC, D, M, 0, 3, fmem) != FAVOR_OK) return -1;
    if (favor_features_init(&Felu, FAVOR_ELU1, D, 0, 0, 3, NULL) != FAVOR_OK) return -1;
    stmem = (float *)malloc(favor_state_floats(&F, HKV, DV) * sizeof(float));
    if (favor_state_init(&St, &F, HKV, DV, stmem) != FAVOR_OK) return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(q);
    free(k);
    free(v);
    free(o);
    free(fmem);
    free(stmem);
    return 0;
}

typedef enum { OP_SOFTMAX, OP_LINEAR, OP_LINEAR_ELU, OP_EXTEND } op_kind;
static const char *const op_names[4] = {"softmax", "linear hyperbolic", "linear elu1",
                                        "extend"};

static favor_status run(op_kind op, const favor_options *opt)
{
    switch (op) {
    case OP_SOFTMAX: return favor_softmax_attention(&Q, &K, &V, &O, opt);
    case OP_LINEAR: return favor_linear_attention(&F, &Q, &K, &V, &O, opt);
    case OP_LINEAR_ELU: return favor_linear_attention(&Felu, &Q, &K, &V, &O, opt);
    case OP_EXTEND: return favor_linear_extend(&F, &St, &Q, &K, &V, &O, opt);
    }
    return FAVOR_E_ARG;
}

static size_t need_of(op_kind op, const favor_options *opt)
{
    switch (op) {
    case OP_SOFTMAX: return favor_softmax_attention_workspace(&Q, &K, &V, opt);
    case OP_LINEAR: return favor_linear_attention_workspace(&F, &Q, &K, &V, opt);
    case OP_LINEAR_ELU: return favor_linear_attention_workspace(&Felu, &Q, &K, &V, opt);
    case OP_EXTEND: return favor_linear_extend_workspace(&F, &St, &Q, &K, &V, opt);
    }
    return 0;
}

static void check(op_kind op, unsigned flags)
{
    const size_t nout = HQ * N * DV, nst = favor_state_floats(&F, HKV, DV);
    favor_options opt = favor_default_options();
    float *o_before = (float *)malloc(nout * sizeof(float));
    float *st_before = (float *)malloc(nst * sizeof(float));
    unsigned long long tokens;
    size_t need;
    void *ws;
    opt.flags = flags;
    need = need_of(op, &opt);
    printf("%-18s flags %u: workspace %zu bytes\n", op_names[op], flags, need);
    if (op == OP_LINEAR || op == OP_LINEAR_ELU || op == OP_EXTEND) assert_true(need > 0);

    /* without workspace */
    memset(o, 0xA5, nout * sizeof(float));
    memcpy(o_before, o, nout * sizeof(float));
    memcpy(st_before, stmem, nst * sizeof(float));
    tokens = St.tokens;
    direct_calls = 0;
    if (need > 0) {
        assert_int_equal(run(op, &opt), FAVOR_E_WORKSPACE);
        assert_memory_equal(o, o_before, nout * sizeof(float));
        assert_memory_equal(stmem, st_before, nst * sizeof(float));
        assert_true(St.tokens == tokens);
        /* a workspace one byte short is no better */
        ws = malloc(need);
        opt.workspace = ws;
        opt.workspace_size = need - 1;
        assert_int_equal(run(op, &opt), FAVOR_E_WORKSPACE);
        assert_memory_equal(o, o_before, nout * sizeof(float));
        assert_memory_equal(stmem, st_before, nst * sizeof(float));
    } else {
        assert_int_equal(run(op, &opt), FAVOR_OK);
        ws = malloc(1);
    }
    /* with the queried workspace */
    opt.workspace = ws;
    opt.workspace_size = need;
    assert_int_equal(run(op, &opt), FAVOR_OK);
    assert_true(tu_all_finite(o, nout));
    assert_memory_not_equal(o, o_before, nout * sizeof(float));
    if (op == OP_EXTEND) assert_true(St.tokens == tokens + N);
    assert_int_equal(direct_calls, 0);
    free(ws);
    free(o_before);
    free(st_before);
}

static void test_workspace_required(void **state)
{
    (void)state;
    check(OP_SOFTMAX, 0);
    check(OP_SOFTMAX, FAVOR_CAUSAL);
    check(OP_LINEAR, 0);
    check(OP_LINEAR, FAVOR_CAUSAL);
    check(OP_LINEAR_ELU, 0);
    check(OP_LINEAR_ELU, FAVOR_CAUSAL);
    check(OP_EXTEND, 0);
    check(OP_EXTEND, 0);
}

/* The entry points without workspace work as usual. */
static void test_rest_works(void **state)
{
    favor_tensor Q1 = favor_tensor_packed(q, HQ, 1, D), K1 = favor_tensor_packed(k, HKV, 1, D);
    favor_tensor V1 = favor_tensor_packed(v, HKV, 1, DV), O1 = favor_tensor_packed(o, HQ, 1, DV);
    float *phi = (float *)malloc(HQ * N * 2 * M * sizeof(float));
    favor_tensor P = favor_tensor_packed(phi, HQ, N, 2 * M);
    (void)state;
    direct_calls = 0;
    assert_int_equal(favor_features_redraw(&F, 4), FAVOR_OK);
    assert_int_equal(favor_features_width(&F), 2 * M);
    assert_int_equal(favor_feature_map(&F, &Q, &P, FAVOR_QUERY), FAVOR_OK);
    assert_true(tu_all_finite(phi, HQ * N * 2 * M));
    favor_state_reset(&St);
    assert_int_equal(favor_linear_step(&F, &St, &Q1, &K1, &V1, &O1), FAVOR_OK);
    assert_true(tu_all_finite(o, HQ * DV));
    assert_true(St.tokens == 1);
    assert_non_null(favor_status_string(FAVOR_E_WORKSPACE));
    assert_int_equal(direct_calls, 0);
    free(phi);
}

/* favor_feature_map passes 16-bit rows through a stack buffer of 2048 floats;
 * a row above it would need an allocation: FAVOR_E_WORKSPACE, phi untouched. */
static void test_feature_map_wide(void **state)
{
    enum { WIDE = 2100 };
    favor_features f;
    uint16_t *x = (uint16_t *)malloc(WIDE * sizeof *x);
    float *phi = (float *)malloc(WIDE * sizeof *phi);
    favor_tensor X = favor_tensor_batched(FAVOR_F16, x, 1, 1, 1, WIDE);
    favor_tensor P = favor_tensor_packed(phi, 1, 1, WIDE);
    size_t i;
    (void)state;
    for (i = 0; i < WIDE; ++i) {
        x[i] = 0x3c00; /* 1.0 */
        phi[i] = -7.0f;
    }
    assert_int_equal(favor_features_init(&f, FAVOR_ELU1, WIDE, 0, 0, 3, NULL), FAVOR_OK);
    direct_calls = 0;
    assert_int_equal(favor_feature_map(&f, &X, &P, FAVOR_QUERY), FAVOR_E_WORKSPACE);
    for (i = 0; i < WIDE; ++i) assert_true(phi[i] == -7.0f);
    assert_int_equal(direct_calls, 0);
    /* a row within the stack buffer is mapped */
    X = favor_tensor_batched(FAVOR_F16, x, 1, 1, 1, 2000);
    P = favor_tensor_packed(phi, 1, 1, 2000);
    assert_int_equal(favor_features_init(&f, FAVOR_ELU1, 2000, 0, 0, 3, NULL), FAVOR_OK);
    assert_int_equal(favor_feature_map(&f, &X, &P, FAVOR_QUERY), FAVOR_OK);
    for (i = 0; i < 2000; ++i) assert_true(phi[i] == 2.0f); /* elu(1) + 1 */
    assert_int_equal(direct_calls, 0);
    free(x);
    free(phi);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_workspace_required, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rest_works, setup, teardown),
        cmocka_unit_test(test_feature_map_wide),
    };
    if (tu_check_backend() != 0) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
