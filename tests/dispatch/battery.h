/* The calls tests/dispatch/bits.c compares between a FAVOR_DISPATCH build and
 * the statically compiled builds of each target: included after favor.h (the
 * implementation) by tests/dispatch/static_tu.c and tests/dispatch/bits.c.
 *
 * db_battery() runs one call of every public entry point that computes (softmax
 * forward with and without the options of OPTIONS, its 16-bit and decode paths,
 * the backward with dsinks, a merge, FAVOR+ and elu+1 linear attention with their
 * backward passes, gated extend and step) on fixed pseudo-random inputs, and
 * folds every status, size and output byte into one 64-bit FNV-1a hash: equal
 * hashes mean bit-identical results. Shapes have tails on every vector width
 * (d = 40, n = 77) and single-threaded calls. */
#ifndef FAVOR_TEST_DISPATCH_BATTERY_H
#define FAVOR_TEST_DISPATCH_BATTERY_H

#include <stdint.h>
#include <string.h>

#define DB_D 40
#define DB_N 77
#define DB_NK 130
#define DB_HQ 4
#define DB_HK 2
#define DB_M 64 /* random features */

typedef struct {
    uint64_t h;
    unsigned long long bytes;
    unsigned errors; /* calls that did not return FAVOR_OK */
} db_hash;

static void db_fold(db_hash *s, const void *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < n; ++i) s->h = (s->h ^ b[i]) * 0x100000001b3ull;
    s->bytes += n;
}
static void db_fold_u(db_hash *s, unsigned long long x) { db_fold(s, &x, sizeof x); }
static void db_st(db_hash *s, favor_status st)
{
    s->errors += st != FAVOR_OK;
    db_fold_u(s, (unsigned long long)st);
}

static void db_fill(float *x, size_t n, unsigned seed, float amp)
{
    uint32_t r = seed * 2654435761u + 12345u;
    size_t i;
    for (i = 0; i < n; ++i) {
        r = r * 1664525u + 1013904223u;
        x[i] = amp * ((float)(r >> 8) / 16777216.0f - 0.5f);
    }
}

/* fp32 -> fp16 (round to nearest even; the inputs are small normals) */
static uint16_t db_f16(float f)
{
    uint32_t u, m, e, s;
    memcpy(&u, &f, 4);
    s = (u >> 16) & 0x8000u;
    e = (u >> 23) & 0xffu;
    m = u & 0x7fffffu;
    if (e < 113) return (uint16_t)s; /* below fp16's normals: zero (none here) */
    m += 0xfffu + ((m >> 13) & 1u);
    if (m & 0x800000u) {
        m = 0;
        ++e;
    }
    return (uint16_t)(s | ((e - 112) << 10) | (m >> 13));
}

static uint64_t db_battery(unsigned *errors)
{
    enum { QN = DB_HQ * DB_N * DB_D, KN = DB_HK * DB_NK * DB_D };
    static float q[QN], k[KN], v[KN], o[QN], o2[QN], dout[QN], dq[QN], dk[KN], dv[KN];
    static float lse[DB_HQ * DB_N], lse2[DB_HQ * DB_N], lse3[DB_HQ * DB_N], mask[DB_N * DB_NK];
    static uint16_t k16[KN], v16[KN];
    static float w[8192], st_mem[16384], gates[DB_HK * DB_N];
    float alibi[DB_HQ] = {0.5f, 0.25f, 0.125f, 0.0625f}, sinks[DB_HQ] = {0.3f, -1.0f, 2.0f, 0.0f};
    float dsinks[DB_HQ], decay[DB_HK] = {0.9f, 0.99f};
    size_t i, seq[3] = {0, 30, DB_N};
    db_hash s = {0xcbf29ce484222325ull, 0, 0};
    favor_tensor tq = favor_tensor_packed(q, DB_HQ, DB_N, DB_D);
    favor_tensor tk = favor_tensor_packed(k, DB_HK, DB_NK, DB_D);
    favor_tensor tv = favor_tensor_packed(v, DB_HK, DB_NK, DB_D);
    favor_tensor tkn = favor_tensor_packed(k, DB_HK, DB_N, DB_D); /* n_k = n */
    favor_tensor tvn = favor_tensor_packed(v, DB_HK, DB_N, DB_D);
    favor_tensor to = favor_tensor_packed(o, DB_HQ, DB_N, DB_D);
    favor_tensor to2 = favor_tensor_packed(o2, DB_HQ, DB_N, DB_D);
    favor_tensor tdo = favor_tensor_packed(dout, DB_HQ, DB_N, DB_D);
    favor_tensor tdq = favor_tensor_packed(dq, DB_HQ, DB_N, DB_D);
    favor_tensor tdk = favor_tensor_packed(dk, DB_HK, DB_NK, DB_D);
    favor_tensor tdv = favor_tensor_packed(dv, DB_HK, DB_NK, DB_D);
    favor_tensor tdkn = favor_tensor_packed(dk, DB_HK, DB_N, DB_D);
    favor_tensor tdvn = favor_tensor_packed(dv, DB_HK, DB_N, DB_D);
    favor_tensor tk16 = favor_tensor_packed_as(FAVOR_F16, k16, DB_HK, DB_NK, DB_D);
    favor_tensor tv16 = favor_tensor_packed_as(FAVOR_BF16, v16, DB_HK, DB_NK, DB_D);
    favor_tensor tmask = favor_tensor_packed(mask, 1, DB_N, DB_NK);
    favor_tensor tg = favor_tensor_packed(gates, DB_HK, DB_N, 1);
    favor_tensor q1, o1;
    favor_options opt = favor_default_options();
    favor_features f;
    favor_state st;

    db_fill(q, QN, 1, 2.0f);
    db_fill(k, KN, 2, 2.0f);
    db_fill(v, KN, 3, 2.0f);
    db_fill(dout, QN, 4, 1.0f);
    db_fill(mask, DB_N * DB_NK, 5, 3.0f);
    db_fill(gates, DB_HK * DB_N, 6, 0.2f);
    for (i = 0; i < DB_HK * DB_N; ++i) gates[i] = gates[i] - 0.1f; /* <= 0 */
    for (i = 0; i < DB_N * DB_NK; i += 7) mask[i] = -INFINITY;
    for (i = 0; i < (size_t)KN; ++i) {
        k16[i] = db_f16(k[i]);
        memcpy(&v16[i], (const char *)&v[i] + 2, 2); /* bf16: the high half */
    }
    opt.threads = 1;

    /* softmax: plain causal with lse; then window + sinks + softcap + ALiBi on
     * 16-bit K/V; a dense mask; packed sequences; one decode row */
    opt.flags = FAVOR_CAUSAL;
    opt.lse = lse;
    db_st(&s, favor_softmax_attention(&tq, &tk, &tv, &to, &opt));
    db_fold(&s, o, sizeof o);
    db_fold(&s, lse, sizeof lse);
    db_fold_u(&s, favor_softmax_attention_workspace(&tq, &tk, &tv, &opt));
    opt.flags = FAVOR_CAUSAL | FAVOR_WINDOW;
    opt.window_left = 45;
    opt.window_right = 0;
    opt.sinks = sinks;
    opt.softcap = 5.0f;
    opt.alibi = alibi;
    opt.lse = lse2;
    db_st(&s, favor_softmax_attention(&tq, &tk16, &tv16, &to2, &opt));
    db_fold(&s, o2, sizeof o2);
    db_fold(&s, lse2, sizeof lse2);
    opt.flags = 0;
    opt.sinks = NULL;
    opt.alibi = NULL;
    opt.softcap = 0;
    opt.mask = &tmask;
    opt.lse = lse3;
    db_st(&s, favor_softmax_attention(&tq, &tk, &tv, &to2, &opt));
    db_fold(&s, o2, sizeof o2);
    opt.mask = NULL;
    opt.lse = NULL;
    /* merge: the causal result (lse) with the masked one (lse3), as if disjoint */
    db_st(&s, favor_attention_merge(&to, lse, &to2, lse3, &to2, lse2, &opt));
    db_fold(&s, o2, sizeof o2);
    db_fold(&s, lse2, sizeof lse2);
    opt.flags = FAVOR_CAUSAL;
    opt.seqs = 2;
    opt.seq_q = seq;
    db_st(&s, favor_softmax_attention(&tq, &tkn, &tvn, &to2, &opt));
    db_fold(&s, o2, sizeof o2);
    opt.seqs = 0;
    opt.seq_q = NULL;
    q1 = favor_tensor_packed(q, DB_HQ, 1, DB_D);
    q1.head_stride = (size_t)DB_N * DB_D;
    o1 = favor_tensor_packed(o2, DB_HQ, 1, DB_D);
    o1.head_stride = (size_t)DB_N * DB_D;
    db_st(&s, favor_softmax_attention(&q1, &tk, &tv, &o1, &opt));
    db_st(&s, favor_softmax_attention(&q1, &tk16, &tv16, &o1, &opt));
    db_fold(&s, o2, sizeof o2);

    /* softmax backward, causal with sinks (dsinks) */
    opt.sinks = sinks;
    opt.dsinks = dsinks;
    db_st(&s, favor_softmax_attention(&tq, &tk, &tv, &to, &opt));
    db_st(&s, favor_softmax_attention_backward(&tq, &tk, &tv, &to, &tdo, &tdq, &tdk, &tdv,
                                                   &opt));
    db_fold_u(&s, favor_softmax_attention_backward_workspace(&tq, &tk, &tv, &opt));
    db_fold(&s, dq, sizeof dq);
    db_fold(&s, dk, sizeof dk);
    db_fold(&s, dv, sizeof dv);
    db_fold(&s, dsinks, sizeof dsinks);
    opt.sinks = NULL;
    opt.dsinks = NULL;

    /* FAVOR+: features, the map, causal attention and its backward */
    db_fold_u(&s, favor_features_floats(FAVOR_POSITIVE, DB_D, DB_M));
    db_st(&s, favor_features_init(&f, FAVOR_POSITIVE, DB_D, DB_M, 0, 42, w));
    db_fold(&s, w, favor_features_floats(FAVOR_POSITIVE, DB_D, DB_M) * sizeof *w);
    db_st(&s, favor_linear_attention(&f, &tq, &tkn, &tvn, &to, &opt));
    db_fold(&s, o, sizeof o);
    db_st(&s, favor_linear_attention_backward(&f, &tq, &tkn, &tvn, &tdo, &tdq, &tdkn, &tdvn,
                                                  &opt));
    db_fold(&s, dq, sizeof dq);
    db_fold(&s, dk, sizeof dk);

    /* elu+1, not causal; then gated: extend and steps from a state */
    db_st(&s, favor_features_init(&f, FAVOR_ELU1, DB_D, 0, 0, 0, NULL));
    opt.flags = 0;
    db_st(&s, favor_linear_attention(&f, &tq, &tkn, &tvn, &to, &opt));
    db_fold(&s, o, sizeof o);
    opt.flags = FAVOR_CAUSAL;
    opt.gates = &tg;
    db_st(&s, favor_linear_attention(&f, &tq, &tkn, &tvn, &to, &opt));
    db_fold(&s, o, sizeof o);
    opt.gates = NULL;
    if (favor_state_floats(&f, DB_HK, DB_D) <= sizeof st_mem / sizeof *st_mem) {
        favor_tensor q8 = favor_tensor_packed(q, DB_HQ, 8, DB_D);
        favor_tensor k8 = favor_tensor_packed(k, DB_HK, 8, DB_D);
        favor_tensor v8 = favor_tensor_packed(v, DB_HK, 8, DB_D);
        favor_tensor o8 = favor_tensor_packed(o, DB_HQ, 8, DB_D);
        db_st(&s, favor_state_init(&st, &f, DB_HK, DB_D, st_mem));
        opt.decay = decay;
        db_st(&s, favor_linear_extend(&f, &st, &q8, &k8, &v8, &o8, &opt));
        db_fold(&s, o, sizeof o);
        for (i = 0; i < 3; ++i) {
            favor_tensor qs = favor_tensor_packed(q + (8 + i) * DB_D, DB_HQ, 1, DB_D);
            favor_tensor ks = favor_tensor_packed(k + (8 + i) * DB_D, DB_HK, 1, DB_D);
            favor_tensor vs = favor_tensor_packed(v + (8 + i) * DB_D, DB_HK, 1, DB_D);
            favor_tensor os = favor_tensor_packed(o + i * DB_D, DB_HQ, 1, DB_D);
            qs.head_stride = (size_t)DB_N * DB_D;
            ks.head_stride = vs.head_stride = (size_t)DB_NK * DB_D;
            os.head_stride = (size_t)DB_N * DB_D;
            db_st(&s, i ? favor_linear_step_ex(&f, &st, &qs, &ks, &vs, &os, &opt)
                            : favor_linear_step(&f, &st, &qs, &ks, &vs, &os));
        }
        db_fold(&s, o, sizeof o);
        db_fold(&s, st_mem, favor_state_floats(&f, DB_HK, DB_D) * sizeof *st_mem);
        favor_state_reset(&st);
        db_fold(&s, st_mem, favor_state_floats(&f, DB_HK, DB_D) * sizeof *st_mem);
    } else {
        ++s.errors; /* the state would not fit */
    }
    *errors = s.errors;
    return s.h ^ s.bytes;
}

#endif
