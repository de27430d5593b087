/* Threads: with OpenMP a call splits its work over favor_options.threads
 * threads: softmax over query blocks of every head; linear attention and extend
 * over key/value heads, and, with fewer than 8 key/value heads, over segments of
 * keys and blocks of output rows (the split is fixed by the shape). Every piece
 * is computed the same way whichever thread runs it, so the results must be
 * bit-for-bit those of threads = 1 for 2, 3, 4 and 16 threads, for every method,
 * on a grouped shape (4 query heads on 2) and on a multi-query one (4 on 1, n =
 * 1100: three key segments); and the workspace a call asks for grows with the
 * thread count, never with n. Without OpenMP (the scalar variants) the same
 * assertions hold trivially and are still checked. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_util.h"

#ifdef _OPENMP
#include <omp.h>
#define FAVOR__TEST_TID() omp_get_thread_num()
#define FAVOR__TEST_NUM() omp_get_num_threads()
#else
#define FAVOR__TEST_TID() 0
#define FAVOR__TEST_NUM() 1
#endif

#define D 32
#define DV 24
#define M 64
/* outputs of run_all: per mask, softmax and every kernel; then the two extends */
#define RUN_ALL_OUTPUTS (2 * (1 + 6) + 1)

typedef struct {
    size_t h, hkv, n, cut; /* cut: rows of the first of two extend calls */
} shape;

/* every method on one shape; 13 outputs of h n DV floats, one after another */
static int run_all(const shape *sh, int threads, const float *q, const float *k,
                   const float *v, float *out)
{
    static const favor_kernel kernels[] = TU_ALL_KERNELS;
    const size_t nk = sizeof kernels / sizeof kernels[0], per_c = 1 + nk; /* softmax, kernels */
    if (2 * per_c + 1 != RUN_ALL_OUTPUTS) return 1; /* the buffer's size */
    size_t H = sh->h, HKV = sh->hkv, N = sh->n, per_call = H * N * DV;
    float *qq = (float *)q, *kk = (float *)k, *vv = (float *)v;
    favor_tensor Q = favor_tensor_packed(qq, H, N, D), K = favor_tensor_packed(kk, HKV, N, D),
                 V = favor_tensor_packed(vv, HKV, N, DV);
    favor_options o = favor_default_options();
    size_t c, ki;
    o.threads = threads;
    for (c = 0; c < 2; ++c) {
        favor_tensor O = favor_tensor_packed(out + (c * per_c) * per_call, H, N, DV);
        o.flags = c ? FAVOR_CAUSAL : 0;
        if (favor_softmax_attention(&Q, &K, &V, &O, &o) != FAVOR_OK) return 1;
        for (ki = 0; ki < nk; ++ki) {
            favor_features f;
            float *w = (float *)malloc((favor_features_floats(kernels[ki], D, M) + 1) * sizeof *w);
            favor_tensor Ok = favor_tensor_packed(out + (c * per_c + 1 + ki) * per_call, H, N, DV);
            if (!w || favor_features_init(&f, kernels[ki], D, tu_fixed(kernels[ki]) ? D : M, 0,
                                          7 + ki, w) != FAVOR_OK)
                return 1;
            if (favor_linear_attention(&f, &Q, &K, &V, &Ok, &o) != FAVOR_OK) return 1;
            free(w);
        }
    }
    { /* extend in two blocks */
        favor_features f;
        favor_state st;
        float *w = (float *)malloc(favor_features_floats(FAVOR_POSITIVE, D, M) * sizeof *w), *sto;
        favor_tensor q1 = Q, k1 = K, v1 = V, o1;
        if (!w || favor_features_init(&f, FAVOR_POSITIVE, D, M, 0, 3, w) != FAVOR_OK) return 1;
        sto = (float *)malloc(favor_state_floats(&f, HKV, DV) * sizeof *sto);
        if (!sto || favor_state_init(&st, &f, HKV, DV, sto) != FAVOR_OK) return 1;
        o1 = favor_tensor_packed(out + 2 * per_c * per_call, H, N, DV);
        q1.rows = k1.rows = v1.rows = o1.rows = sh->cut;
        if (favor_linear_extend(&f, &st, &q1, &k1, &v1, &o1, &o) != FAVOR_OK) return 1;
        q1.data = (float *)q1.data + sh->cut * D;
        k1.data = (float *)k1.data + sh->cut * D;
        v1.data = (float *)v1.data + sh->cut * DV;
        o1.data = (float *)o1.data + sh->cut * DV;
        q1.rows = k1.rows = v1.rows = o1.rows = N - sh->cut;
        if (favor_linear_extend(&f, &st, &q1, &k1, &v1, &o1, &o) != FAVOR_OK) return 1;
        free(sto);
        free(w);
    }
    return 0;
}

static void test_threads_identical(void **state)
{
    static const shape shapes[] = { { 4, 2, 300, 100 }, { 4, 1, 1100, 700 } };
    static const int counts[] = { 2, 3, 4, 16 };
    size_t si;
    (void)state;
    for (si = 0; si < sizeof shapes / sizeof shapes[0]; ++si) {
        const shape *sh = &shapes[si];
        tu_rng r = { 2024 };
        size_t per = sh->h * sh->n * DV, total = RUN_ALL_OUTPUTS * per, ci;
        float *q = tu_normal_floats(&r, sh->h * sh->n * D, 1.0);
        float *k = tu_normal_floats(&r, sh->hkv * sh->n * D, 1.0);
        float *v = tu_normal_floats(&r, sh->hkv * sh->n * DV, 1.0);
        float *o1 = (float *)calloc(total, sizeof *o1), *o2 = (float *)calloc(total, sizeof *o2);
        assert_non_null(o1);
        assert_non_null(o2);
        assert_int_equal(run_all(sh, 1, q, k, v, o1), 0);
        assert_true(tu_all_finite(o1, total));
        for (ci = 0; ci < TU_COUNTS(sizeof counts / sizeof counts[0], 1); ++ci) {
            int t = counts[ci];
            memset(o2, 0xff, total * sizeof *o2);
            assert_int_equal(run_all(sh, t, q, k, v, o2), 0);
            if (memcmp(o1, o2, total * sizeof *o1) != 0) {
                size_t i;
                for (i = 0; i < total && o1[i] == o2[i]; ++i) continue;
                fail_msg("%u query heads on %u, n %u: threads = %d differs from threads = 1 at "
                         "element %zu (output %zu: %g vs %g)",
                         (unsigned)sh->h, (unsigned)sh->hkv, (unsigned)sh->n, t, i, i / per,
                         (double)o2[i], (double)o1[i]);
            }
        }
        free(q);
        free(k);
        free(v);
        free(o1);
        free(o2);
    }
}

static void test_workspace_scales_with_threads_not_n(void **state)
{
    /* views that are only queried, never read: a low base address, so that even
     * the 2 GB view fits a 32-bit address space (a stack buffer's would not) */
    float *base = (float *)(void *)(uintptr_t)4096;
    favor_tensor q = favor_tensor_packed(base, 8, 1000, 64), qbig = q, v = q;
    favor_options o1 = favor_default_options(), o2 = o1;
    favor_features f;
    float *w = (float *)malloc(favor_features_floats(FAVOR_POSITIVE, 64, 256) * sizeof *w);
    size_t s1, s2, l1, l2;
    (void)state;
    assert_non_null(w);
    assert_int_equal(favor_features_init(&f, FAVOR_POSITIVE, 64, 256, 0, 1, w), FAVOR_OK);
    o1.threads = 1;
    o2.threads = 2;
    qbig.rows = 1000000;
    qbig.head_stride = qbig.rows * qbig.cols;
    s1 = favor_softmax_attention_workspace(&q, &q, &q, &o1);
    s2 = favor_softmax_attention_workspace(&q, &q, &q, &o2);
    assert_true(s1 > 0);
    assert_int_equal(favor_softmax_attention_workspace(&qbig, &qbig, &qbig, &o1), s1);
    l1 = favor_linear_attention_workspace(&f, &q, &q, &v, &o1);
    l2 = favor_linear_attention_workspace(&f, &q, &q, &v, &o2);
    assert_true(l1 > 0);
    assert_int_equal(favor_linear_attention_workspace(&f, &qbig, &qbig, &qbig, &o1), l1);
#ifdef _OPENMP
    assert_true(s2 > s1 && s2 <= 2 * s1);
    assert_true(l2 > l1 && l2 <= 2 * l1);
#else
    assert_int_equal(s2, s1);
    assert_int_equal(l2, l1);
#endif
    printf("workspace bytes: softmax %zu (1 thread) %zu (2); linear %zu (1) %zu (2)\n", s1, s2,
           l1, l2);
    free(w);
}

/* A call with threads = 1 from inside the caller's own OpenMP region, on each
 * of its threads: there omp_get_thread_num() is the caller's thread, not 0,
 * and a call on one thread runs its loops with no region of its own, so each
 * must use its workspace's first slice. Each call gets exactly the workspace it
 * asks for, followed by guard bytes that must stay as they were, and must give
 * the bits of the same call outside the region: the decode (one query row),
 * the prefill with and without a mask, linear attention and extend (on two
 * key/value heads of 300 keys: one segment each, and on one head of 600 keys:
 * two, each call split), and the softmax and linear backward (the linear one
 * by heads). */
#define GUARD 4096
#define JOBS 9
static int guarded_job(int j, const float *q, const float *k, const float *v, const float *g,
                       const float *mask, float *out)
{
    const size_t H = 4, HKV = 2, N = 300;
    favor_tensor Q = favor_tensor_packed((float *)q, H, N, D),
                 K = favor_tensor_packed((float *)k, HKV, N, D),
                 V = favor_tensor_packed((float *)v, HKV, N, DV),
                 O = favor_tensor_packed(out, H, N, DV), G = favor_tensor_packed((float *)g, H, N, DV),
                 Mk = favor_tensor_packed((float *)mask, 1, N, N);
    favor_options o = favor_default_options();
    favor_features f;
    favor_state st;
    float *fw = NULL, *sto = NULL;
    size_t bytes = 0, i;
    unsigned char *ws;
    int bad = 0;
    o.threads = 1;
    o.flags = FAVOR_CAUSAL;
    if (j == 0) Q.rows = O.rows = 1; /* decode */
    if (j >= 7) { /* the same floats as one key/value head of twice the rows */
        Q = favor_tensor_packed((float *)q, 2, 2 * N, D);
        K = favor_tensor_packed((float *)k, 1, 2 * N, D);
        V = favor_tensor_packed((float *)v, 1, 2 * N, DV);
        O = favor_tensor_packed(out, 2, 2 * N, DV);
    }
    if (j == 2) o.mask = &Mk;
    if (j >= 3 && j != 5) {
        fw = (float *)malloc(favor_features_floats(FAVOR_POSITIVE, D, M) * sizeof *fw);
        if (!fw || favor_features_init(&f, FAVOR_POSITIVE, D, M, 0, 5, fw) != FAVOR_OK) return 1;
    }
    if (j == 4 || j == 7) {
        const size_t hs = j == 4 ? HKV : 1;
        sto = (float *)malloc(favor_state_floats(&f, hs, DV) * sizeof *sto);
        if (!sto || favor_state_init(&st, &f, hs, DV, sto) != FAVOR_OK) return 1;
    }
    bytes = j <= 2 ? favor_softmax_attention_workspace(&Q, &K, &V, &o)
          : j == 3 || j == 8 ? favor_linear_attention_workspace(&f, &Q, &K, &V, &o)
          : j == 4 || j == 7 ? favor_linear_extend_workspace(&f, &st, &Q, &K, &V, &o)
          : j == 5 ? favor_softmax_attention_backward_workspace(&Q, &K, &V, &o)
                   : favor_linear_attention_backward_workspace(&f, &Q, &K, &V, &o);
    if (!bytes || !(ws = (unsigned char *)malloc(bytes + GUARD))) return 1;
    memset(ws + bytes, 0xa5, GUARD);
    o.workspace = ws;
    o.workspace_size = bytes;
    if (j <= 2) bad = favor_softmax_attention(&Q, &K, &V, &O, &o) != FAVOR_OK;
    else if (j == 3 || j == 8) bad = favor_linear_attention(&f, &Q, &K, &V, &O, &o) != FAVOR_OK;
    else if (j == 4 || j == 7)
        bad = favor_linear_extend(&f, &st, &Q, &K, &V, &O, &o) != FAVOR_OK;
    else { /* dq, dk, dv after the forward's output (O's rows hold it) */
        favor_tensor F = favor_tensor_packed(out + H * N * DV, H, N, DV);
        favor_tensor dQ = favor_tensor_packed(out + 2 * H * N * DV, H, N, D);
        favor_tensor dK = favor_tensor_packed(out + 2 * H * N * DV + H * N * D, HKV, N, D);
        favor_tensor dV = favor_tensor_packed(out + 2 * H * N * DV + (H + HKV) * N * D, HKV, N, DV);
        favor_options of = o;
        of.workspace = NULL;
        of.workspace_size = 0;
        if (j == 5)
            bad = favor_softmax_attention(&Q, &K, &V, &F, &of) != FAVOR_OK ||
                  favor_softmax_attention_backward(&Q, &K, &V, &F, &G, &dQ, &dK, &dV, &o) !=
                      FAVOR_OK;
        else /* the linear backward takes no forward output */
            bad = favor_linear_attention_backward(&f, &Q, &K, &V, &G, &dQ, &dK, &dV, &o) !=
                  FAVOR_OK;
    }
    for (i = 0; i < GUARD; ++i) bad |= ws[bytes + i] != 0xa5;
    free(ws);
    free(sto);
    free(fw);
    return bad;
}

static void test_inside_callers_region(void **state)
{
    const size_t H = 4, HKV = 2, N = 300;
    /* out: the forward's and, for the backward, the forward's again, dq, dk, dv */
    const size_t per = 2 * H * N * DV + (H + HKV) * N * D + HKV * N * DV;
    tu_rng r = { 77 };
    float *q = tu_normal_floats(&r, H * N * D, 1.0), *k = tu_normal_floats(&r, HKV * N * D, 1.0);
    float *v = tu_normal_floats(&r, HKV * N * DV, 1.0), *g = tu_normal_floats(&r, H * N * DV, 1.0);
    float *mask = tu_normal_floats(&r, N * N, 1.0);
    float *ref = (float *)calloc(JOBS * per, sizeof *ref);
    float *got = (float *)calloc(2 * JOBS * per, sizeof *got);
    int j, ran = 1, fails[2] = { 0, 0 };
    (void)state;
    assert_non_null(ref);
    assert_non_null(got);
    for (j = 0; j < JOBS; ++j) assert_int_equal(guarded_job(j, q, k, v, g, mask, ref + j * per), 0);
#ifdef _OPENMP
#pragma omp parallel num_threads(2)
#endif
    {
        int t = (int)FAVOR__TEST_TID(), jj;
        if (t == 0) ran = FAVOR__TEST_NUM();
        for (jj = 0; jj < JOBS; ++jj)
            fails[t] += guarded_job(jj, q, k, v, g, mask, got + ((size_t)t * JOBS + jj) * per);
    }
    assert_int_equal(fails[0], 0);
    assert_int_equal(fails[1], 0);
    printf("inside a region of %d threads: %d calls each give the bits of the calls outside\n",
           ran, JOBS);
    for (j = 0; j < ran * JOBS; ++j)
        if (memcmp(got + j * per, ref + (j % JOBS) * per, per * sizeof *ref) != 0)
            fail_msg("thread %d of the caller's region: call %d differs from outside it",
                     j / JOBS, j % JOBS);
    free(q);
    free(k);
    free(v);
    free(g);
    free(mask);
    free(ref);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_identical),
        cmocka_unit_test(test_workspace_scales_with_threads_not_n),
        cmocka_unit_test(test_inside_callers_region),
    };
    if (tu_check_backend()) return 1;
#ifdef _OPENMP
    printf("OpenMP: %d threads available\n", omp_get_max_threads());
#else
    printf("built without OpenMP\n");
#endif
    return cmocka_run_group_tests(tests, NULL, NULL);
}
