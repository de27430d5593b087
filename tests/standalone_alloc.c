/* The allocator hooks: FAVOR_MALLOC / FAVOR_FREE are counting wrappers that can
 * be made to fail. Checks that a call without workspace frees everything it
 * allocates, that a failed allocation gives FAVOR_E_NOMEM with nothing written
 * and nothing leaked, that a caller workspace means no allocation at all, that
 * nothing but the three workspace-taking operations allocates, and that the
 * library never calls malloc/free directly when the hooks are defined.
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

/* The hooks. fail_at: the index of the first allocation call that fails
 * (SIZE_MAX = none). */
static size_t alloc_calls, alloc_ok, free_calls, fail_at = SIZE_MAX;

static void *counting_malloc(size_t bytes)
{
    void *p;
    if (alloc_calls++ >= fail_at) return NULL;
    p = malloc(bytes ? bytes : 1);
    if (p) ++alloc_ok;
    return p;
}

static void counting_free(void *p)
{
    if (p) ++free_calls;
    free(p);
}

static void reset_counts(size_t fail)
{
    alloc_calls = alloc_ok = free_calls = 0;
    fail_at = fail;
}

/* Direct use of the C allocator inside the library is an error. */
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
#define FAVOR_MALLOC(bytes) counting_malloc(bytes)
#define FAVOR_FREE(ptr) counting_free(ptr)
#define FAVOR_IMPLEMENTATION
#include "favor.h"

#undef malloc
#undef calloc
#undef realloc
#undef free

#include "test_util.h"

enum { HQ = 4, HKV = 2, N = 37, D = 16, DV = 8, M = 24 };

typedef struct {
    float *q, *k, *v, *o, *o2;
    favor_tensor Q, K, V, O, O2;
    favor_features f, felu;
    float *fmem;
    favor_state st, st2;
    float *stmem, *stmem2;
} world;

static world W;

static int setup(void **state)
{
    tu_rng rng = {77};
    (void)state;
    W.q = tu_normal_floats(&rng, HQ * N * D, 0.5);
    W.k = tu_normal_floats(&rng, HKV * N * D, 0.5);
    W.v = tu_normal_floats(&rng, HKV * N * DV, 1.0);
    W.o = (float *)calloc(HQ * N * DV, sizeof(float));
    W.o2 = (float *)calloc(HQ * N * DV, sizeof(float));
    W.Q = favor_tensor_packed(W.q, HQ, N, D);
    W.K = favor_tensor_packed(W.k, HKV, N, D);
    W.V = favor_tensor_packed(W.v, HKV, N, DV);
    W.O = favor_tensor_packed(W.o, HQ, N, DV);
    W.O2 = favor_tensor_packed(W.o2, HQ, N, DV);
    W.fmem = (float *)malloc(favor_features_floats(FAVOR_POSITIVE, D, M) * sizeof(float));
    reset_counts(SIZE_MAX);
    direct_calls = 0;
    (void)&direct_malloc; /* referenced only through the macros above */
    (void)&direct_free;
    if (favor_features_init(&W.f, FAVOR_POSITIVE, D, M, 0, 5, W.fmem) != FAVOR_OK) return -1;
    if (favor_features_init(&W.felu, FAVOR_ELU1, D, D, 0, 5, NULL) != FAVOR_OK) return -1;
    W.stmem = (float *)malloc(favor_state_floats(&W.f, HKV, DV) * sizeof(float));
    W.stmem2 = (float *)malloc(favor_state_floats(&W.f, HKV, DV) * sizeof(float));
    if (favor_state_init(&W.st, &W.f, HKV, DV, W.stmem) != FAVOR_OK) return -1;
    if (favor_state_init(&W.st2, &W.f, HKV, DV, W.stmem2) != FAVOR_OK) return -1;
    /* none of that allocates */
    if (alloc_calls != 0 || direct_calls != 0) return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(W.q);
    free(W.k);
    free(W.v);
    free(W.o);
    free(W.o2);
    free(W.fmem);
    free(W.stmem);
    free(W.stmem2);
    return 0;
}

/* The operations that take a workspace. */
typedef enum { OP_SOFTMAX, OP_LINEAR_POS, OP_LINEAR_ELU, OP_EXTEND } op_kind;
static const char *const op_names[4] = {"softmax", "linear positive", "linear elu1",
                                        "extend"};

static favor_status run(op_kind op, const favor_tensor *out, favor_state *st,
                        const favor_options *o)
{
    switch (op) {
    case OP_SOFTMAX: return favor_softmax_attention(&W.Q, &W.K, &W.V, out, o);
    case OP_LINEAR_POS: return favor_linear_attention(&W.f, &W.Q, &W.K, &W.V, out, o);
    case OP_LINEAR_ELU: return favor_linear_attention(&W.felu, &W.Q, &W.K, &W.V, out, o);
    case OP_EXTEND: return favor_linear_extend(&W.f, st, &W.Q, &W.K, &W.V, out, o);
    }
    return FAVOR_E_ARG;
}

static size_t need_of(op_kind op, const favor_state *st, const favor_options *o)
{
    switch (op) {
    case OP_SOFTMAX: return favor_softmax_attention_workspace(&W.Q, &W.K, &W.V, o);
    case OP_LINEAR_POS: return favor_linear_attention_workspace(&W.f, &W.Q, &W.K, &W.V, o);
    case OP_LINEAR_ELU: return favor_linear_attention_workspace(&W.felu, &W.Q, &W.K, &W.V, o);
    case OP_EXTEND: return favor_linear_extend_workspace(&W.f, st, &W.Q, &W.K, &W.V, o);
    }
    return 0;
}

static void sentinel(float *p, size_t n) { memset(p, 0xA5, n * sizeof(float)); }

static int state_equal(const favor_state *a, const favor_state *b, size_t floats)
{
    return a->tokens == b->tokens &&
           memcmp(a->s, b->s, a->heads * a->width * a->dv * sizeof(float)) == 0 &&
           memcmp(a->z, b->z, a->heads * a->width * sizeof(float)) == 0 &&
           memcmp(a->c, b->c, a->heads * sizeof(float)) == 0 && floats > 0;
}

static void check_op(op_kind op, unsigned flags, int threads)
{
    const size_t nout = HQ * N * DV, nst = favor_state_floats(&W.f, HKV, DV);
    favor_options o = favor_default_options();
    size_t need, allocs_needed, k;
    void *ws;
    float *st_before = (float *)malloc(nst * sizeof(float));
    float *ref = (float *)malloc(nout * sizeof(float));
    unsigned long long tokens_before;
    o.flags = flags;
    o.threads = threads;
    need = need_of(op, &W.st, &o);
    printf("%-16s flags %u threads %d: workspace %zu bytes\n", op_names[op], flags, threads,
           need);

    /* 1. NULL workspace: allocates (if it needs anything) and frees it all */
    favor_state_reset(&W.st);
    favor_state_reset(&W.st2);
    sentinel(W.o, nout);
    reset_counts(SIZE_MAX);
    direct_calls = 0;
    assert_int_equal(run(op, &W.O, &W.st, &o), FAVOR_OK);
    printf("    NULL workspace: %zu allocations, %zu frees\n", alloc_ok, free_calls);
    assert_int_equal(alloc_ok, alloc_calls);
    assert_int_equal(free_calls, alloc_ok);
    assert_int_equal(direct_calls, 0);
    if (need > 0) assert_true(alloc_ok >= 1);
    assert_true(tu_all_finite(W.o, nout));
    allocs_needed = alloc_calls;
    memcpy(ref, W.o, nout * sizeof(float));

    /* 2. caller workspace: no allocation, the same result bit for bit */
    ws = malloc(need ? need : 1);
    o.workspace = ws;
    o.workspace_size = need;
    sentinel(W.o2, nout);
    reset_counts(SIZE_MAX);
    assert_int_equal(run(op, &W.O2, &W.st2, &o), FAVOR_OK);
    assert_int_equal(alloc_calls, 0);
    assert_int_equal(free_calls, 0);
    assert_int_equal(direct_calls, 0);
    assert_memory_equal(W.o2, ref, nout * sizeof(float));
    if (op == OP_EXTEND) assert_true(state_equal(&W.st, &W.st2, nst));
    o.workspace = NULL;
    o.workspace_size = 0;

    /* 3. every allocation of the call failing in turn: FAVOR_E_NOMEM, output and
       state untouched, no leak */
    for (k = 0; k < allocs_needed; ++k) {
        favor_state_reset(&W.st);
        if (op == OP_EXTEND) {
            /* a state with tokens in it, so a partial update would show */
            reset_counts(SIZE_MAX);
            assert_int_equal(run(op, &W.O, &W.st, &o), FAVOR_OK);
        }
        memcpy(st_before, W.stmem, nst * sizeof(float));
        tokens_before = W.st.tokens;
        sentinel(W.o, nout);
        memcpy(W.o2, W.o, nout * sizeof(float));
        reset_counts(k);
        assert_int_equal(run(op, &W.O, &W.st, &o), FAVOR_E_NOMEM);
        printf("    allocation %zu fails: FAVOR_E_NOMEM, %zu allocated, %zu freed\n", k,
               alloc_ok, free_calls);
        assert_int_equal(free_calls, alloc_ok);
        assert_memory_equal(W.o, W.o2, nout * sizeof(float));
        assert_memory_equal(W.stmem, st_before, nst * sizeof(float));
        assert_true(W.st.tokens == tokens_before);
    }
    /* and an allocator that always fails, when there is something to allocate */
    if (allocs_needed > 0) {
        sentinel(W.o, nout);
        memcpy(W.o2, W.o, nout * sizeof(float));
        reset_counts(0);
        assert_int_equal(run(op, &W.O, &W.st, &o), FAVOR_E_NOMEM);
        assert_memory_equal(W.o, W.o2, nout * sizeof(float));
        assert_int_equal(free_calls, 0);
    }
    reset_counts(SIZE_MAX);
    free(ws);
    free(st_before);
    free(ref);
}

static void test_softmax(void **state)
{
    (void)state;
    check_op(OP_SOFTMAX, 0, 1);
    check_op(OP_SOFTMAX, FAVOR_CAUSAL, 1);
    check_op(OP_SOFTMAX, 0, 0);
    check_op(OP_SOFTMAX, FAVOR_CAUSAL, 3);
}

static void test_linear(void **state)
{
    (void)state;
    check_op(OP_LINEAR_POS, 0, 1);
    check_op(OP_LINEAR_POS, FAVOR_CAUSAL, 1);
    check_op(OP_LINEAR_POS, FAVOR_CAUSAL, 3);
    check_op(OP_LINEAR_ELU, 0, 1);
    check_op(OP_LINEAR_ELU, FAVOR_CAUSAL, 0);
}

static void test_extend(void **state)
{
    (void)state;
    check_op(OP_EXTEND, 0, 1);
    check_op(OP_EXTEND, 0, 3);
}

/* A rejected call does not allocate; neither do the workspace-free entry points. */
static void test_no_allocation_elsewhere(void **state)
{
    favor_tensor bad = W.O, Q1, K1, V1, O1, P;
    float *phi = (float *)malloc(HQ * N * M * sizeof(float));
    float *fm2 = (float *)malloc(favor_features_floats(FAVOR_TRIG, D, M) * sizeof(float));
    float *stm = (float *)malloc(favor_state_floats(&W.f, HKV, DV) * sizeof(float));
    favor_features f2;
    favor_state st;
    (void)state;
    memset(&f2, 0, sizeof f2); /* gcc -O3 cannot see that a failed assert ends the test */
    reset_counts(SIZE_MAX);
    direct_calls = 0;
    bad.cols = DV + 1;
    assert_int_equal(favor_softmax_attention(&W.Q, &W.K, &W.V, &bad, NULL), FAVOR_E_SHAPE);
    assert_int_equal(favor_linear_attention(&W.f, &W.Q, &W.K, &W.V, &bad, NULL), FAVOR_E_SHAPE);
    assert_int_equal(favor_linear_extend(&W.f, &W.st, &W.Q, &W.K, &W.V, &bad, NULL),
                     FAVOR_E_SHAPE);
    assert_int_equal(favor_features_init(&f2, FAVOR_TRIG, D, M, FAVOR_IID, 9, fm2), FAVOR_OK);
    assert_int_equal(favor_features_redraw(&f2, 10), FAVOR_OK);
    assert_int_equal(favor_features_width(&f2), 2 * M);
    P = favor_tensor_packed(phi, HQ, N, M);
    assert_int_equal(favor_feature_map(&W.f, &W.Q, &P, FAVOR_QUERY), FAVOR_OK);
    assert_int_equal(favor_feature_map(&W.f, &W.Q, &P, FAVOR_KEY), FAVOR_OK);
    assert_int_equal(favor_state_init(&st, &W.f, HKV, DV, stm), FAVOR_OK);
    Q1 = favor_tensor_packed(W.q, HQ, 1, D);
    K1 = favor_tensor_packed(W.k, HKV, 1, D);
    V1 = favor_tensor_packed(W.v, HKV, 1, DV);
    O1 = favor_tensor_packed(W.o, HQ, 1, DV);
    assert_int_equal(favor_linear_step(&W.f, &st, &Q1, &K1, &V1, &O1), FAVOR_OK);
    assert_int_equal(favor_linear_step(&W.f, &st, &Q1, &K1, &V1, &O1), FAVOR_OK);
    favor_state_reset(&st);
    assert_true(st.tokens == 0);
    assert_non_null(favor_status_string(FAVOR_E_NOMEM));
    assert_int_equal(alloc_calls, 0);
    assert_int_equal(free_calls, 0);
    assert_int_equal(direct_calls, 0);
    free(phi);
    free(fm2);
    free(stm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_softmax, setup, teardown),
        cmocka_unit_test_setup_teardown(test_linear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_extend, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_allocation_elsewhere, setup, teardown),
    };
    if (tu_check_backend() != 0) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
