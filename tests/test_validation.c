/* Argument validation of every entry point: each bad argument gives its exact
 * favor_status, and nothing is written anywhere (outputs, state, features).
 *
 * Every buffer a call can see lives in one arena. Before each rejected call the
 * arena and the structs passed by pointer are snapshotted; afterwards they must be
 * bit-for-bit the same. Outputs are filled with a sentinel byte pattern, so a
 * write of any computed value shows. Each case changes exactly one thing in a
 * valid configuration, so the expected status is unambiguous. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "favor.h"
#include "test_util.h"

/* Overlapping heads within one tensor: a layout error. */
#define E_LAYOUT FAVOR_E_SHAPE

/* ------------------------------------------------------------------------ */
/* The world: shapes, arena, valid tensors, features and state               */
/* ------------------------------------------------------------------------ */

enum { HQ = 4, HKV = 2, N = 5, NK = 6, D = 8, DV = 3, M = 6, M2 = 8 };

/* arena offsets, in floats */
enum {
    OFF_Q = 0,      /* HQ x N x D   = 160 */
    OFF_K = 256,    /* HKV x NK x D = 96  */
    OFF_V = 512,    /* HKV x NK x DV = 36 */
    OFF_O = 768,    /* HQ x N x DV  = 60  (output) */
    OFF_F = 1024,   /* features, 2 M D + 2 D + 1 = 113 */
    OFF_F2 = 1200,  /* features with M2 rows, 2 M2 D + 2 D + 1 = 145 */
    OFF_Q1 = 2048,  /* step: HQ x 1 x D  = 32 */
    OFF_K1 = 2112,  /* HKV x 1 x D = 16 */
    OFF_V1 = 2176,  /* HKV x 1 x DV = 6 */
    OFF_O1 = 2240,  /* HQ x 1 x DV = 12 (output) */
    OFF_PHI = 2304, /* feature map output HQ x N x M = 120 (output) */
    OFF_SELF = 2560, /* HQ x N x D self-attention input = 160 */
    OFF_ST = 2816,  /* state storage (<= 1280; 567 with the pending block) */
    OFF_SPARE = 4096,
    ARENA = 65536 /* room for a caller workspace placed over the other buffers */
};

static float *arena;
static float *snap;

static favor_tensor Tq, Tk, Tv, To;     /* softmax / linear: k, v have NK rows */
static favor_tensor Tke, Tve;           /* extend: k, v with N rows */
static favor_tensor Tq1, Tk1, Tv1, To1; /* step: one row */
static favor_tensor Tphi;               /* feature map of Tq */
static favor_features F, F2, Felu;      /* POSITIVE d=D m=M; m=M2; ELU1 d=D */
static favor_state St;
static favor_options Opt;

static favor_features snapF, snapF2, snapFelu;
static favor_state snapSt;

static const char *label = "";
static unsigned long cases; /* calls checked, printed per test */

static void fill_sentinel(float *p, size_t n) { memset(p, 0xA5, n * sizeof(float)); }

static int world_setup(void **state)
{
    tu_rng rng = {0x5eed};
    size_t i;
    (void)state;
    arena = (float *)malloc(ARENA * sizeof(float));
    snap = (float *)malloc(ARENA * sizeof(float));
    if (!arena || !snap) return -1;
    for (i = 0; i < ARENA; ++i) arena[i] = (float)(0.5 * tu_normal(&rng));
    Tq = favor_tensor_packed(arena + OFF_Q, HQ, N, D);
    Tk = favor_tensor_packed(arena + OFF_K, HKV, NK, D);
    Tv = favor_tensor_packed(arena + OFF_V, HKV, NK, DV);
    To = favor_tensor_packed(arena + OFF_O, HQ, N, DV);
    Tke = favor_tensor_packed(arena + OFF_K, HKV, N, D);
    Tve = favor_tensor_packed(arena + OFF_V, HKV, N, DV);
    Tq1 = favor_tensor_packed(arena + OFF_Q1, HQ, 1, D);
    Tk1 = favor_tensor_packed(arena + OFF_K1, HKV, 1, D);
    Tv1 = favor_tensor_packed(arena + OFF_V1, HKV, 1, DV);
    To1 = favor_tensor_packed(arena + OFF_O1, HQ, 1, DV);
    Tphi = favor_tensor_packed(arena + OFF_PHI, HQ, N, M);
    if (favor_features_init(&F, FAVOR_POSITIVE, D, M, 0, 1, arena + OFF_F) != FAVOR_OK) return -1;
    if (favor_features_init(&F2, FAVOR_POSITIVE, D, M2, 0, 2, arena + OFF_F2) != FAVOR_OK)
        return -1;
    if (favor_features_init(&Felu, FAVOR_ELU1, D, 0, 0, 0, NULL) != FAVOR_OK) return -1;
    if (favor_state_floats(&F, HKV, DV) > OFF_SPARE - OFF_ST) return -1;
    if (favor_state_init(&St, &F, HKV, DV, arena + OFF_ST) != FAVOR_OK) return -1;
    /* put something in the state, so an unwanted rescale or reset would show */
    if (favor_linear_extend(&F, &St, &Tq, &Tke, &Tve, &To, NULL) != FAVOR_OK) return -1;
    Opt = favor_default_options();
    fill_sentinel(arena + OFF_O, HQ * N * DV);
    fill_sentinel(arena + OFF_O1, HQ * DV);
    fill_sentinel(arena + OFF_PHI, HQ * N * M);
    fill_sentinel(arena + OFF_SPARE, ARENA - OFF_SPARE);
    return 0;
}

static int world_teardown(void **state)
{
    (void)state;
    printf("    %lu calls checked\n", cases);
    cases = 0;
    free(arena);
    free(snap);
    return 0;
}

/* Field-wise bitwise equality (struct padding is not compared). */
#define FIELD_EQ(a, b, fld) (memcmp(&(a)->fld, &(b)->fld, sizeof (a)->fld) == 0)
static int features_same(const favor_features *a, const favor_features *b)
{
    return FIELD_EQ(a, b, kernel) && FIELD_EQ(a, b, flags) && FIELD_EQ(a, b, dim) &&
           FIELD_EQ(a, b, count) && FIELD_EQ(a, b, scale) && FIELD_EQ(a, b, seed) &&
           FIELD_EQ(a, b, w) && FIELD_EQ(a, b, wt);
}
static int state_same(const favor_state *a, const favor_state *b)
{
    return FIELD_EQ(a, b, heads) && FIELD_EQ(a, b, width) && FIELD_EQ(a, b, dv) &&
           FIELD_EQ(a, b, dim) && FIELD_EQ(a, b, kernel) && FIELD_EQ(a, b, tokens) &&
           FIELD_EQ(a, b, s) && FIELD_EQ(a, b, z) && FIELD_EQ(a, b, c) &&
           FIELD_EQ(a, b, scratch);
}

static void world_snapshot(void)
{
    memcpy(snap, arena, ARENA * sizeof(float));
    snapF = F;
    snapF2 = F2;
    snapFelu = Felu;
    snapSt = St;
}

static void world_unchanged(void)
{
    size_t i;
    for (i = 0; i < ARENA; ++i)
        if (memcmp(&snap[i], &arena[i], sizeof(float)) != 0) {
            print_error("%s: arena float %zu was written\n", label, i);
            fail();
        }
    if (!features_same(&snapF, &F) || !features_same(&snapF2, &F2) ||
        !features_same(&snapFelu, &Felu) || !state_same(&snapSt, &St)) {
        print_error("%s: a features or state struct was written\n", label);
        fail();
    }
}

static void check_status(favor_status got, favor_status want)
{
    if (got != want) {
        print_error("%s: got %s, expected %s\n", label, favor_status_string(got),
                    favor_status_string(want));
        fail();
    }
}

/* Run `call` on a snapshot; expect `want` and (unless OK) an untouched world. */
#define EXPECT(lbl, want, call)                                                           \
    do {                                                                                  \
        favor_status got_;                                                                \
        label = (lbl);                                                                    \
        ++cases;                                                                          \
        world_snapshot();                                                                 \
        got_ = (call);                                                                    \
        check_status(got_, (want));                                                       \
        if ((want) != FAVOR_OK) world_unchanged();                                        \
    } while (0)

/* ------------------------------------------------------------------------ */
/* The four attention entry points behind one signature                      */
/* ------------------------------------------------------------------------ */

typedef enum { OP_SOFTMAX, OP_LINEAR, OP_EXTEND, OP_STEP } op_kind;
static const char *const op_names[4] = {"softmax", "linear", "extend", "step"};

static favor_status call_op(op_kind op, const favor_features *f, favor_state *st,
                            const favor_tensor *q, const favor_tensor *k,
                            const favor_tensor *v, const favor_tensor *o,
                            const favor_options *opt)
{
    switch (op) {
    case OP_SOFTMAX: return favor_softmax_attention(q, k, v, o, opt);
    case OP_LINEAR: return favor_linear_attention(f, q, k, v, o, opt);
    case OP_EXTEND: return favor_linear_extend(f, st, q, k, v, o, opt);
    case OP_STEP: return favor_linear_step(f, st, q, k, v, o);
    }
    return FAVOR_E_ARG;
}

static size_t op_workspace(op_kind op, const favor_features *f, const favor_state *st,
                           const favor_tensor *q, const favor_tensor *k,
                           const favor_tensor *v, const favor_options *opt)
{
    switch (op) {
    case OP_SOFTMAX: return favor_softmax_attention_workspace(q, k, v, opt);
    case OP_LINEAR: return favor_linear_attention_workspace(f, q, k, v, opt);
    case OP_EXTEND: return favor_linear_extend_workspace(f, st, q, k, v, opt);
    case OP_STEP: return 0;
    }
    return 0;
}

/* The valid tensors of op: t[0..3] = q, k, v, out. */
static void op_tensors(op_kind op, favor_tensor t[4])
{
    switch (op) {
    case OP_SOFTMAX:
    case OP_LINEAR:
        t[0] = Tq, t[1] = Tk, t[2] = Tv, t[3] = To;
        break;
    case OP_EXTEND:
        t[0] = Tq, t[1] = Tke, t[2] = Tve, t[3] = To;
        break;
    case OP_STEP:
        t[0] = Tq1, t[1] = Tk1, t[2] = Tv1, t[3] = To1;
        break;
    }
}

static favor_status run_op(op_kind op, const favor_tensor t[4], const favor_options *opt)
{
    return call_op(op, &F, &St, &t[0], &t[1], &t[2], &t[3], opt);
}

static char lbuf[256];

/* ------------------------------------------------------------------------ */
/* Bad tensors                                                               */
/* ------------------------------------------------------------------------ */

/* The ways one tensor can be bad on its own. Returns 0 when the kind does not
 * apply to this tensor's shape. */
enum {
    BAD_DATA_NULL, BAD_HEADS0, BAD_ROWS0, BAD_COLS0, BAD_ROW_STRIDE, BAD_HEADS_OVERLAP,
    BAD_HEAD_STRIDE0, BAD_HEADS_PARTIAL, BAD_ROWSTRIDE_HUGE, BAD_ROWSTRIDE_BYTES,
    BAD_HEADSTRIDE_HUGE, BAD_ADDRESS_WRAP, BAD_COUNT
};
static const char *const bad_names[BAD_COUNT] = {
    "data NULL", "heads 0", "rows 0", "cols 0", "row_stride < cols",
    "heads overlap (head_stride = row_stride)", "head_stride 0",
    "heads overlap partially (head_stride < cols, interleaved)",
    "row_stride SIZE_MAX/2 (span overflows size_t)",
    "row_stride so span*4 overflows size_t", "head_stride SIZE_MAX/3",
    "span fits size_t but data + span wraps the address space"};

static int make_bad(favor_tensor *t, int kind, favor_status *want)
{
    switch (kind) {
    case BAD_DATA_NULL: t->data = NULL; *want = FAVOR_E_NULL; return 1;
    case BAD_HEADS0: t->heads = 0; *want = FAVOR_E_SHAPE; return 1;
    case BAD_ROWS0: t->rows = 0; *want = FAVOR_E_SHAPE; return 1;
    case BAD_COLS0: t->cols = 0; *want = FAVOR_E_SHAPE; return 1;
    case BAD_ROW_STRIDE:
        if (t->rows < 2) return 0;
        t->row_stride = t->cols - 1;
        *want = FAVOR_E_SHAPE;
        return 1;
    case BAD_HEADS_OVERLAP:
        if (t->heads < 2) return 0;
        t->head_stride = t->rows > 1 ? t->row_stride : t->cols - 1;
        *want = E_LAYOUT;
        return 1;
    case BAD_HEAD_STRIDE0:
        if (t->heads < 2) return 0;
        t->head_stride = 0;
        *want = E_LAYOUT;
        return 1;
    case BAD_HEADS_PARTIAL:
        /* interleaved [rows][heads*cols] but heads one float apart: they overlap */
        if (t->heads < 2 || t->cols < 2) return 0;
        t->row_stride = t->heads * t->cols;
        t->head_stride = t->cols - 1;
        *want = E_LAYOUT;
        return 1;
    case BAD_ROWSTRIDE_HUGE:
        if (t->rows < 3) return 0;
        t->row_stride = SIZE_MAX / 2;
        *want = FAVOR_E_OVERFLOW;
        return 1;
    case BAD_ROWSTRIDE_BYTES:
        if (t->rows < 2) return 0;
        t->row_stride = SIZE_MAX / 4 / (t->rows - 1) + 1; /* floats fit, bytes do not */
        *want = FAVOR_E_OVERFLOW;
        return 1;
    case BAD_HEADSTRIDE_HUGE:
        if (t->heads < 2) return 0;
        t->head_stride = SIZE_MAX / 3;
        *want = FAVOR_E_OVERFLOW;
        return 1;
    case BAD_ADDRESS_WRAP: {
        /* span in bytes just below SIZE_MAX: fits in size_t, but no object that
           large can start at a heap address */
        size_t lead = t->rows > 1 ? t->rows - 1 : t->heads - 1;
        size_t stride = (SIZE_MAX / sizeof(float) - 4096) / lead;
        if (lead == 0) return 0;
        if (t->rows > 1) t->row_stride = stride;
        else t->head_stride = stride;
        *want = FAVOR_E_OVERFLOW;
        return 1;
    }
    }
    return 0;
}

static void check_bad_tensors(op_kind op)
{
    static const char *const roles[4] = {"q", "k", "v", "out"};
    int role, kind;
    for (role = 0; role < 4; ++role)
        for (kind = 0; kind < BAD_COUNT; ++kind) {
            favor_tensor t[4];
            favor_status want;
            op_tensors(op, t);
            if (!make_bad(&t[role], kind, &want)) continue;
            snprintf(lbuf, sizeof lbuf, "%s: %s %s", op_names[op], roles[role],
                     bad_names[kind]);
            EXPECT(lbuf, want, run_op(op, t, &Opt));
            EXPECT(lbuf, want, run_op(op, t, NULL));
        }
}

static void check_null_structs(op_kind op)
{
    favor_tensor t[4];
    op_tensors(op, t);
    snprintf(lbuf, sizeof lbuf, "%s: NULL q", op_names[op]);
    EXPECT(lbuf, FAVOR_E_NULL, call_op(op, &F, &St, NULL, &t[1], &t[2], &t[3], NULL));
    snprintf(lbuf, sizeof lbuf, "%s: NULL k", op_names[op]);
    EXPECT(lbuf, FAVOR_E_NULL, call_op(op, &F, &St, &t[0], NULL, &t[2], &t[3], NULL));
    snprintf(lbuf, sizeof lbuf, "%s: NULL v", op_names[op]);
    EXPECT(lbuf, FAVOR_E_NULL, call_op(op, &F, &St, &t[0], &t[1], NULL, &t[3], NULL));
    snprintf(lbuf, sizeof lbuf, "%s: NULL out", op_names[op]);
    EXPECT(lbuf, FAVOR_E_NULL, call_op(op, &F, &St, &t[0], &t[1], &t[2], NULL, NULL));
    if (op != OP_SOFTMAX) {
        snprintf(lbuf, sizeof lbuf, "%s: NULL features", op_names[op]);
        EXPECT(lbuf, FAVOR_E_NULL, call_op(op, NULL, &St, &t[0], &t[1], &t[2], &t[3], NULL));
    }
    if (op == OP_EXTEND || op == OP_STEP) {
        snprintf(lbuf, sizeof lbuf, "%s: NULL state", op_names[op]);
        EXPECT(lbuf, FAVOR_E_NULL, call_op(op, &F, NULL, &t[0], &t[1], &t[2], &t[3], NULL));
    }
}

/* Mismatched shapes between the tensors. */
static void check_mismatch(op_kind op)
{
    favor_tensor t[4];
    favor_tensor *q = &t[0], *k = &t[1], *v = &t[2], *o = &t[3];
#define MISMATCH(what, stmt)                                                            \
    do {                                                                                \
        op_tensors(op, t);                                                              \
        stmt;                                                                           \
        snprintf(lbuf, sizeof lbuf, "%s: %s", op_names[op], what);                      \
        EXPECT(lbuf, FAVOR_E_SHAPE, run_op(op, t, NULL));                               \
    } while (0)
    /* d of q and k differ (q keeps the features' d where there are features) */
    MISMATCH("k.cols != q.cols", k->cols = D - 1);
    MISMATCH("k.cols != q.cols (larger)", (k->cols = D + 1, k->row_stride = D + 1));
    MISMATCH("v.rows != k.rows", v->rows = k->rows - 1);
    MISMATCH("k.rows != v.rows", k->rows = v->rows - 1);
    MISMATCH("q heads not a multiple of kv heads (k, v 3 heads)",
             (k->heads = 3, v->heads = 3));
    MISMATCH("kv heads > q heads (k, v 8 heads, q 4)",
             (k->heads = 8, v->heads = 8, k->data = arena + OFF_SPARE,
              v->data = arena + OFF_SPARE + 1024));
    MISMATCH("k.heads != v.heads", v->heads = 1);
    MISMATCH("k.heads != v.heads (v 4 heads)",
             (v->heads = 4, v->data = arena + OFF_SPARE + 1024));
    MISMATCH("out.heads != q.heads", o->heads = HQ - 1);
    MISMATCH("out.rows != q.rows", (o->rows = q->rows + 1, o->head_stride = o->rows * DV,
                                    o->data = arena + OFF_SPARE + 2048));
    MISMATCH("out.cols != v.cols", o->cols = DV - 1);
    MISMATCH("out.cols = q.cols (not v.cols)",
             (o->cols = D, o->row_stride = D, o->head_stride = D * o->rows,
              o->data = arena + OFF_SPARE + 2048));
    if (op != OP_SOFTMAX) {
        MISMATCH("q.cols = k.cols != f->dim",
                 (q->cols = D - 1, k->cols = D - 1));
    }
    if (op == OP_EXTEND || op == OP_STEP) {
        /* the new rows of q, k, v are the same tokens */
        MISMATCH("q.rows != k.rows", (k->rows += 1, v->rows += 1,
                                      k->data = arena + OFF_SPARE,
                                      v->data = arena + OFF_SPARE + 1024));
    }
    if (op == OP_STEP) {
        /* two rows each, consistent otherwise */
        MISMATCH("step with 2 rows",
                 (*q = favor_tensor_packed(arena + OFF_Q, HQ, 2, D),
                  *k = favor_tensor_packed(arena + OFF_K, HKV, 2, D),
                  *v = favor_tensor_packed(arena + OFF_V, HKV, 2, DV),
                  *o = favor_tensor_packed(arena + OFF_SPARE, HQ, 2, DV)));
    }
#undef MISMATCH
}

/* Out overlapping an input. */
static void check_alias(op_kind op)
{
    favor_tensor t[4];
    int role;
    for (role = 0; role < 3; ++role) {
        /* out placed exactly on, inside, and straddling the end of the input */
        size_t span, variant;
        op_tensors(op, t);
        span = (t[role].heads - 1) * t[role].head_stride +
               (t[role].rows - 1) * t[role].row_stride + t[role].cols;
        for (variant = 0; variant < 3; ++variant) {
            op_tensors(op, t);
            if (variant == 0) t[3].data = t[role].data;
            else if (variant == 1) t[3].data = (float *)t[role].data + 1;
            else t[3].data = (float *)t[role].data + span - 1;
            snprintf(lbuf, sizeof lbuf, "%s: out overlaps %s (variant %zu)", op_names[op],
                     role == 0 ? "q" : role == 1 ? "k" : "v", variant);
            EXPECT(lbuf, FAVOR_E_ALIAS, run_op(op, t, NULL));
        }
        /* out ending one float into the input */
        op_tensors(op, t);
        {
            size_t outspan = (t[3].heads - 1) * t[3].head_stride +
                             (t[3].rows - 1) * t[3].row_stride + t[3].cols;
            t[role].data = arena + OFF_SPARE + outspan - 1;
            t[3].data = arena + OFF_SPARE;
            snprintf(lbuf, sizeof lbuf, "%s: out's last float is %s's first", op_names[op],
                     role == 0 ? "q" : role == 1 ? "k" : "v");
            EXPECT(lbuf, FAVOR_E_ALIAS, run_op(op, t, NULL));
            /* adjacent, not overlapping: fine */
            t[role].data = arena + OFF_SPARE + outspan;
            snprintf(lbuf, sizeof lbuf, "%s: out just before %s", op_names[op],
                     role == 0 ? "q" : role == 1 ? "k" : "v");
            EXPECT(lbuf, FAVOR_OK, run_op(op, t, NULL));
        }
    }
}

static void check_options(op_kind op)
{
    favor_tensor t[4];
    favor_options o;
    const float bad_scales[4] = {-1.0f, -1e-30f, (float)NAN, (float)INFINITY};
    const unsigned bad_flags[4] = {16u, 8u, 0x100u, 0x80000000u};
    size_t i;
    if (op == OP_STEP) return;
    op_tensors(op, t);
    for (i = 0; i < 4; ++i) {
        o = favor_default_options();
        o.scale = bad_scales[i];
        snprintf(lbuf, sizeof lbuf, "%s: scale %g", op_names[op], (double)bad_scales[i]);
        EXPECT(lbuf, FAVOR_E_ARG, run_op(op, t, &o));
        o.scale = -bad_scales[i];
        if (i >= 2) {
            snprintf(lbuf, sizeof lbuf, "%s: scale %g", op_names[op], -(double)bad_scales[i]);
            EXPECT(lbuf, FAVOR_E_ARG, run_op(op, t, &o));
        }
        o = favor_default_options();
        o.flags = bad_flags[i];
        snprintf(lbuf, sizeof lbuf, "%s: flags 0x%x", op_names[op], bad_flags[i]);
        EXPECT(lbuf, FAVOR_E_ARG, run_op(op, t, &o));
        o.flags = bad_flags[i] | FAVOR_CAUSAL;
        snprintf(lbuf, sizeof lbuf, "%s: flags 0x%x", op_names[op], o.flags);
        EXPECT(lbuf, FAVOR_E_ARG, run_op(op, t, &o));
    }
    o = favor_default_options();
    o.threads = -1;
    snprintf(lbuf, sizeof lbuf, "%s: threads -1", op_names[op]);
    EXPECT(lbuf, FAVOR_E_ARG, run_op(op, t, &o));
    o.threads = -1000000;
    EXPECT(lbuf, FAVOR_E_ARG, run_op(op, t, &o));
    /* valid options */
    o = favor_default_options();
    o.threads = 2;
    o.scale = 0.5f;
    o.flags = FAVOR_CAUSAL;
    snprintf(lbuf, sizeof lbuf, "%s: valid options", op_names[op]);
    EXPECT(lbuf, FAVOR_OK, run_op(op, t, &o));
}

static void check_workspace(op_kind op, unsigned flags)
{
    favor_tensor t[4];
    favor_options o = favor_default_options();
    size_t need;
    unsigned char *ws;
    if (op == OP_STEP) return;
    op_tensors(op, t);
    o.flags = flags;
    need = op_workspace(op, &F, &St, &t[0], &t[1], &t[2], &o);
    ws = (unsigned char *)malloc(need + 64);
    assert_non_null(ws);
    if (need > 0) {
        o.workspace = ws;
        o.workspace_size = need - 1;
        snprintf(lbuf, sizeof lbuf, "%s (flags %u): workspace needed-1 = %zu", op_names[op],
                 flags, need - 1);
        EXPECT(lbuf, FAVOR_E_WORKSPACE, run_op(op, t, &o));
        o.workspace_size = 0;
        EXPECT(lbuf, FAVOR_E_WORKSPACE, run_op(op, t, &o));
    }
    o.workspace = ws;
    o.workspace_size = need;
    snprintf(lbuf, sizeof lbuf, "%s (flags %u): workspace exactly %zu", op_names[op], flags,
             need);
    EXPECT(lbuf, FAVOR_OK, run_op(op, t, &o));
    /* an unaligned caller buffer of the right size: the manual asks for "a buffer
       that large", nothing about alignment (run under -fsanitize=undefined to see
       the library access it as float/SIMD data without aligning it first) */
    o.workspace = ws + 1;
    EXPECT(lbuf, FAVOR_OK, run_op(op, t, &o));
    free(ws);
}

/* Bad features (struct contents) for the linear entry points. */
static void check_bad_features(op_kind op)
{
    favor_tensor t[4];
    favor_features bad;
    if (op == OP_SOFTMAX) return;
    op_tensors(op, t);
#define BADF(what, want, stmt)                                                          \
    do {                                                                                \
        bad = F;                                                                        \
        stmt;                                                                           \
        snprintf(lbuf, sizeof lbuf, "%s: features %s", op_names[op], what);             \
        EXPECT(lbuf, want, call_op(op, &bad, &St, &t[0], &t[1], &t[2], &t[3], NULL));   \
    } while (0)
    BADF("kernel 99", FAVOR_E_ARG, bad.kernel = (favor_kernel)99);
    BADF("kernel -1", FAVOR_E_ARG, bad.kernel = (favor_kernel)-1);
    BADF("w NULL", FAVOR_E_NULL, bad.w = NULL);
    BADF("wt NULL", FAVOR_E_NULL, bad.wt = NULL);
    BADF("scale -1", FAVOR_E_ARG, bad.scale = -1.0f);
    BADF("scale NaN", FAVOR_E_ARG, bad.scale = (float)NAN);
    BADF("scale inf", FAVOR_E_ARG, bad.scale = (float)INFINITY);
#undef BADF
}

/* A state that does not fit the call. */
static void check_bad_state(op_kind op)
{
    favor_tensor t[4];
    favor_state st2;
    float *st2mem;
    favor_features f3;
    if (op != OP_EXTEND && op != OP_STEP) return;
    st2mem = arena + OFF_SPARE;
    op_tensors(op, t);
    /* state with other heads */
    assert_int_equal(favor_state_init(&st2, &F, 1, DV, st2mem), FAVOR_OK);
    snprintf(lbuf, sizeof lbuf, "%s: state heads 1, k/v heads 2", op_names[op]);
    EXPECT(lbuf, FAVOR_E_SHAPE, call_op(op, &F, &st2, &t[0], &t[1], &t[2], &t[3], NULL));
    assert_int_equal(favor_state_init(&st2, &F, 4, DV, st2mem), FAVOR_OK);
    snprintf(lbuf, sizeof lbuf, "%s: state heads 4, k/v heads 2", op_names[op]);
    EXPECT(lbuf, FAVOR_E_SHAPE, call_op(op, &F, &st2, &t[0], &t[1], &t[2], &t[3], NULL));
    /* state with another d_v */
    assert_int_equal(favor_state_init(&st2, &F, HKV, DV + 1, st2mem), FAVOR_OK);
    snprintf(lbuf, sizeof lbuf, "%s: state dv %d, v.cols %d", op_names[op], DV + 1, DV);
    EXPECT(lbuf, FAVOR_E_SHAPE, call_op(op, &F, &st2, &t[0], &t[1], &t[2], &t[3], NULL));
    /* state made for features of another width (m = M2) */
    assert_int_equal(favor_state_init(&st2, &F2, HKV, DV, st2mem), FAVOR_OK);
    snprintf(lbuf, sizeof lbuf, "%s: state width %d, features width %d", op_names[op], M2, M);
    EXPECT(lbuf, FAVOR_E_SHAPE, call_op(op, &F, &st2, &t[0], &t[1], &t[2], &t[3], NULL));
    /* state made for another kernel of the same width and d */
    assert_int_equal(favor_features_init(&f3, FAVOR_RELU, D, M, 0, 3, arena + OFF_SPARE + 1024),
                     FAVOR_OK);
    assert_int_equal(favor_state_init(&st2, &f3, HKV, DV, st2mem), FAVOR_OK);
    snprintf(lbuf, sizeof lbuf, "%s: state of a RELU map, POSITIVE features", op_names[op]);
    EXPECT(lbuf, FAVOR_E_SHAPE, call_op(op, &F, &st2, &t[0], &t[1], &t[2], &t[3], NULL));
    /* state made for another d (ELU1, width D... and the d of ELU1 features is D);
       use an ELU1 map of d = M so the width matches M but d differs */
    assert_int_equal(favor_features_init(&f3, FAVOR_ELU1, M, 0, 0, 0, NULL), FAVOR_OK);
    assert_int_equal(favor_state_init(&st2, &f3, HKV, DV, st2mem), FAVOR_OK);
    snprintf(lbuf, sizeof lbuf, "%s: state of an ELU1 map with d=%d (width %d), features d=%d",
             op_names[op], M, M, D);
    EXPECT(lbuf, FAVOR_E_SHAPE, call_op(op, &F, &st2, &t[0], &t[1], &t[2], &t[3], NULL));
    /* corrupted state */
    st2 = St;
    st2.s = NULL;
    snprintf(lbuf, sizeof lbuf, "%s: state s NULL", op_names[op]);
    EXPECT(lbuf, FAVOR_E_NULL, call_op(op, &F, &st2, &t[0], &t[1], &t[2], &t[3], NULL));
    /* its count of pending tokens, c[heads], is not a whole number below 16: the
     * storage overwritten, or a struct whose heads was lowered, which reads a
     * head's log-scale there (-inf when the head is empty; fuzz finding 14). It
     * indexes the pending block, so the call refuses it, writing nothing. */
    {
        static const float badp[] = { -INFINITY, INFINITY, -1.0f, 16.0f, 2.5f, 1e30f, -0.5f };
        const float keep = St.c[St.heads];
        size_t i;
        for (i = 0; i < sizeof badp / sizeof badp[0]; ++i) {
            St.c[St.heads] = badp[i];
            snprintf(lbuf, sizeof lbuf, "%s: state's pending count %g", op_names[op],
                     (double)badp[i]);
            EXPECT(lbuf, FAVOR_E_ARG, call_op(op, &F, &St, &t[0], &t[1], &t[2], &t[3], NULL));
        }
        St.c[St.heads] = NAN;
        snprintf(lbuf, sizeof lbuf, "%s: state's pending count NaN", op_names[op]);
        EXPECT(lbuf, FAVOR_E_ARG, call_op(op, &F, &St, &t[0], &t[1], &t[2], &t[3], NULL));
        St.c[St.heads] = keep;
    }
    /* out overlapping the state */
    op_tensors(op, t);
    t[3].data = St.s;
    snprintf(lbuf, sizeof lbuf, "%s: out overlaps the state", op_names[op]);
    EXPECT(lbuf, FAVOR_E_ALIAS, run_op(op, t, NULL));
    /* an input overlapping the state, which the call writes */
    op_tensors(op, t);
    t[1].data = St.z;
    snprintf(lbuf, sizeof lbuf, "%s: k overlaps the state", op_names[op]);
    EXPECT(lbuf, FAVOR_E_ALIAS, run_op(op, t, NULL));
    op_tensors(op, t);
    t[0].data = St.c;
    snprintf(lbuf, sizeof lbuf, "%s: q overlaps the state", op_names[op]);
    EXPECT(lbuf, FAVOR_E_ALIAS, run_op(op, t, NULL));
}

/* A valid call of each op succeeds, also in valid unusual layouts. */
static void check_valid_layouts(op_kind op)
{
    favor_tensor t[4];
    size_t r;
    op_tensors(op, t);
    snprintf(lbuf, sizeof lbuf, "%s: valid packed", op_names[op]);
    EXPECT(lbuf, FAVOR_OK, run_op(op, t, NULL));
    /* interleaved [rows][heads*cols] for every tensor, in spare memory */
    for (r = 0; r < 4; ++r) {
        size_t base = OFF_SPARE + 512 * r;
        t[r].data = arena + base;
        t[r].head_stride = t[r].cols;
        t[r].row_stride = t[r].heads * t[r].cols + 1; /* a gap float between rows */
    }
    snprintf(lbuf, sizeof lbuf, "%s: valid interleaved", op_names[op]);
    EXPECT(lbuf, FAVOR_OK, run_op(op, t, NULL));
    /* heads placed backwards is not expressible (size_t strides); single head with
       head_stride 0 is fine, and rows == 1 with any row_stride >= cols */
    op_tensors(op, t);
    t[0].heads = HKV; /* q heads = kv heads */
    t[3].heads = HKV;
    t[0].head_stride = t[0].rows * t[0].cols + 5;
    snprintf(lbuf, sizeof lbuf, "%s: valid padded heads", op_names[op]);
    EXPECT(lbuf, FAVOR_OK, run_op(op, t, NULL));
}

static void check_single_head_stride0(op_kind op)
{
    favor_tensor t[4];
    favor_state st1;
    op_tensors(op, t);
    t[0].heads = t[1].heads = t[2].heads = t[3].heads = 1;
    t[0].head_stride = t[1].head_stride = t[2].head_stride = t[3].head_stride = 0;
    assert_int_equal(favor_state_init(&st1, &F, 1, DV, arena + OFF_SPARE + 2048), FAVOR_OK);
    snprintf(lbuf, sizeof lbuf, "%s: one head, head_stride 0", op_names[op]);
    EXPECT(lbuf, FAVOR_OK, call_op(op, &F, &st1, &t[0], &t[1], &t[2], &t[3], NULL));
}

static void check_self_attention(op_kind op)
{
    favor_tensor t[4], x;
    favor_state st1;
    size_t rows = op == OP_STEP ? 1 : N;
    float *out;
    x = favor_tensor_packed(arena + OFF_SELF, HKV, rows, D);
    op_tensors(op, t);
    t[3].heads = HKV;
    t[3].rows = rows;
    t[3].cols = D;
    t[3].row_stride = D;
    t[3].head_stride = rows * D;
    t[3].data = out = arena + OFF_SPARE;
    assert_int_equal(favor_state_init(&st1, &F, HKV, D, arena + OFF_SPARE + 2048), FAVOR_OK);
    snprintf(lbuf, sizeof lbuf, "%s: self-attention q = k = v", op_names[op]);
    EXPECT(lbuf, FAVOR_OK, call_op(op, &F, &st1, &x, &x, &x, &t[3], NULL));
    assert_true(tu_all_finite(out, HKV * rows * D));
    if (op != OP_STEP) {
        favor_options o = favor_default_options();
        o.flags = FAVOR_CAUSAL;
        EXPECT(lbuf, FAVOR_OK, call_op(op, &F, &st1, &x, &x, &x, &t[3], &o));
        assert_true(tu_all_finite(out, HKV * rows * D));
    }
}

/* Outputs overlapping inputs that are not tensors: out on the features' W or
 * W^T (linear, extend, step), and the caller's workspace (which the call
 * writes) on q, out, W or the state. */
static void check_out_on_w(op_kind op)
{
    favor_tensor t[4];
    op_tensors(op, t);
    t[3].data = F.w + 2;
    snprintf(lbuf, sizeof lbuf, "%s: out overlaps W", op_names[op]);
    EXPECT(lbuf, FAVOR_E_ALIAS, run_op(op, t, NULL));
    op_tensors(op, t);
    t[3].data = F.wt + M * D - 1;
    snprintf(lbuf, sizeof lbuf, "%s: out overlaps W^T", op_names[op]);
    EXPECT(lbuf, FAVOR_E_ALIAS, run_op(op, t, NULL));
}

static void check_workspace_alias(op_kind op, int inputs_only)
{
    favor_tensor t[4];
    favor_options o = favor_default_options();
    size_t need;
    op_tensors(op, t);
    need = op_workspace(op, &F, &St, &t[0], &t[1], &t[2], &o);
    assert_true(need / sizeof(float) + OFF_ST + 64 < ARENA); /* fits in the arena */
    o.workspace_size = need;
    if (inputs_only) {
        o.workspace = arena + OFF_Q + 3;
        snprintf(lbuf, sizeof lbuf, "%s: workspace overlaps q", op_names[op]);
        EXPECT(lbuf, FAVOR_E_ALIAS, run_op(op, t, &o));
        o.workspace = arena + OFF_O + 1;
        snprintf(lbuf, sizeof lbuf, "%s: workspace overlaps out", op_names[op]);
        EXPECT(lbuf, FAVOR_E_ALIAS, run_op(op, t, &o));
        return;
    }
    if (op == OP_EXTEND) {
        o.workspace = St.s;
        snprintf(lbuf, sizeof lbuf, "%s: workspace overlaps the state", op_names[op]);
        EXPECT(lbuf, FAVOR_E_ALIAS, run_op(op, t, &o));
    }
    o.workspace = F.w;
    snprintf(lbuf, sizeof lbuf, "%s: workspace overlaps W", op_names[op]);
    EXPECT(lbuf, FAVOR_E_ALIAS, run_op(op, t, &o));
}

static void test_workspace_overlaps_tensors(void **state)
{
    (void)state;
    check_workspace_alias(OP_SOFTMAX, 1);
    check_workspace_alias(OP_LINEAR, 1);
    check_workspace_alias(OP_EXTEND, 1);
}
static void test_linear_out_on_w(void **state) { (void)state; check_out_on_w(OP_LINEAR); }
static void test_extend_out_on_w(void **state) { (void)state; check_out_on_w(OP_EXTEND); }
static void test_step_out_on_w(void **state) { (void)state; check_out_on_w(OP_STEP); }
static void test_linear_workspace_on_w(void **state)
{
    (void)state;
    check_workspace_alias(OP_LINEAR, 0);
}
static void test_extend_workspace_on_w_or_state(void **state)
{
    (void)state;
    check_workspace_alias(OP_EXTEND, 0);
}

static void run_all(op_kind op)
{
    check_null_structs(op);
    check_bad_tensors(op);
    check_mismatch(op);
    check_alias(op);
    check_options(op);
    check_workspace(op, 0);
    check_workspace(op, FAVOR_CAUSAL);
    check_bad_features(op);
    check_bad_state(op);
    check_valid_layouts(op);
    check_single_head_stride0(op);
    check_self_attention(op);
}

static void test_softmax(void **state) { (void)state; run_all(OP_SOFTMAX); }
static void test_linear(void **state) { (void)state; run_all(OP_LINEAR); }
static void test_extend(void **state) { (void)state; run_all(OP_EXTEND); }
static void test_step(void **state) { (void)state; run_all(OP_STEP); }

/* The brief's example: q and out with SIZE_MAX/2 rows over a small real buffer. */
static void test_huge_rows(void **state)
{
    favor_tensor q = Tq, k = Tk, v = Tv, o = To;
    (void)state;
    q.rows = o.rows = SIZE_MAX / 2;
    EXPECT("softmax: q, out rows SIZE_MAX/2", FAVOR_E_OVERFLOW,
           favor_softmax_attention(&q, &k, &v, &o, NULL));
    EXPECT("linear: q, out rows SIZE_MAX/2", FAVOR_E_OVERFLOW,
           favor_linear_attention(&F, &q, &k, &v, &o, NULL));
    q = Tq, o = To;
    k.rows = v.rows = SIZE_MAX / 2;
    EXPECT("softmax: k, v rows SIZE_MAX/2", FAVOR_E_OVERFLOW,
           favor_softmax_attention(&q, &k, &v, &o, NULL));
    EXPECT("linear: k, v rows SIZE_MAX/2", FAVOR_E_OVERFLOW,
           favor_linear_attention(&F, &q, &k, &v, &o, NULL));
    q.rows = o.rows = SIZE_MAX / 2;
    EXPECT("extend: all rows SIZE_MAX/2", FAVOR_E_OVERFLOW,
           favor_linear_extend(&F, &St, &q, &k, &v, &o, NULL));
    /* heads: q and out with SIZE_MAX/8 heads over kv with 1 head */
    q = Tq, k = Tk, v = Tv, o = To;
    k.heads = v.heads = 1;
    q.heads = o.heads = SIZE_MAX / 8;
    EXPECT("softmax: q, out heads SIZE_MAX/8", FAVOR_E_OVERFLOW,
           favor_softmax_attention(&q, &k, &v, &o, NULL));
    EXPECT("linear: q, out heads SIZE_MAX/8", FAVOR_E_OVERFLOW,
           favor_linear_attention(&F, &q, &k, &v, &o, NULL));
    /* d: q, k cols SIZE_MAX/2 (one row each way) */
    q = Tq, k = Tk, v = Tv, o = To;
    q.cols = k.cols = q.row_stride = k.row_stride = SIZE_MAX / 2;
    q.rows = k.rows = v.rows = o.rows = 1;
    q.heads = k.heads = v.heads = o.heads = 1;
    EXPECT("softmax: d SIZE_MAX/2", FAVOR_E_OVERFLOW,
           favor_softmax_attention(&q, &k, &v, &o, NULL));
    /* d_v: v and out cols SIZE_MAX/2 */
    q = Tq, k = Tk, v = Tv, o = To;
    v.cols = o.cols = v.row_stride = o.row_stride = SIZE_MAX / 2;
    v.rows = k.rows = o.rows = q.rows = 1;
    q.heads = k.heads = v.heads = o.heads = 1;
    EXPECT("softmax: dv SIZE_MAX/2", FAVOR_E_OVERFLOW,
           favor_softmax_attention(&q, &k, &v, &o, NULL));
    EXPECT("linear: dv SIZE_MAX/2", FAVOR_E_OVERFLOW,
           favor_linear_attention(&F, &q, &k, &v, &o, NULL));
    /* the workspace queries of those do not crash */
    (void)favor_softmax_attention_workspace(&q, &k, &v, NULL);
    (void)favor_linear_attention_workspace(&F, &q, &k, &v, NULL);
}

/* ------------------------------------------------------------------------ */
/* Features                                                                  */
/* ------------------------------------------------------------------------ */

static void test_features_init(void **state)
{
    favor_features f;
    float *st = arena + OFF_SPARE;
    (void)state;
    /* f is the output: fill it with a sentinel and check it stays */
#define INIT(lbl, want, kernel, dim, count, flags, storage)                             \
    do {                                                                                \
        favor_features before_;                                                         \
        memset(&f, 0xA5, sizeof f);                                                     \
        before_ = f;                                                                    \
        EXPECT(lbl, want, favor_features_init(&f, kernel, dim, count, flags, 1, storage)); \
        if ((want) != FAVOR_OK) assert_true(features_same(&before_, &f));            \
    } while (0)
    EXPECT("features_init: f NULL", FAVOR_E_NULL,
           favor_features_init(NULL, FAVOR_POSITIVE, D, M, 0, 1, st));
    INIT("features_init: storage NULL", FAVOR_E_NULL, FAVOR_POSITIVE, D, M, 0, NULL);
    INIT("features_init: storage NULL (trig)", FAVOR_E_NULL, FAVOR_TRIG, D, M, 0, NULL);
    INIT("features_init: dim 0", FAVOR_E_SHAPE, FAVOR_POSITIVE, 0, M, 0, st);
    INIT("features_init: count 0", FAVOR_E_SHAPE, FAVOR_POSITIVE, D, 0, 0, st);
    INIT("features_init: ELU1 dim 0", FAVOR_E_SHAPE, FAVOR_ELU1, 0, 0, 0, NULL);
    INIT("features_init: ELU1 count != d", FAVOR_E_SHAPE, FAVOR_ELU1, D, D + 1, 0, NULL);
    INIT("features_init: ELU1 count 1", FAVOR_E_SHAPE, FAVOR_ELU1, D, 1, 0, NULL);
    INIT("features_init: POLY2 dim 0", FAVOR_E_SHAPE, FAVOR_POLY2, 0, 0, 0, NULL);
    INIT("features_init: POLY2 count != d", FAVOR_E_SHAPE, FAVOR_POLY2, D, D + 1, 0, NULL);
    INIT("features_init: POLY2 dim 4097", FAVOR_E_OVERFLOW, FAVOR_POLY2, 4097, 0, 0, NULL);
    INIT("features_init: POLY2 dim SIZE_MAX", FAVOR_E_OVERFLOW, FAVOR_POLY2, SIZE_MAX, 0, 0,
         NULL);
    INIT("features_init: 2 m d overflows size_t", FAVOR_E_OVERFLOW, FAVOR_POSITIVE,
         SIZE_MAX / 2, 4, 0, st);
    INIT("features_init: m d overflows size_t", FAVOR_E_OVERFLOW, FAVOR_POSITIVE,
         SIZE_MAX / 2, SIZE_MAX / 2, 0, st);
    INIT("features_init: 2 m d floats overflow bytes", FAVOR_E_OVERFLOW, FAVOR_POSITIVE,
         SIZE_MAX / 32, 4, 0, st);
    INIT("features_init: kernel 99", FAVOR_E_ARG, (favor_kernel)99, D, M, 0, st);
    INIT("features_init: kernel -1", FAVOR_E_ARG, (favor_kernel)-1, D, M, 0, st);
    INIT("features_init: flag 4", FAVOR_E_ARG, FAVOR_POSITIVE, D, M, 4u, st);
    INIT("features_init: flag 0x80000000", FAVOR_E_ARG, FAVOR_POSITIVE, D, M, 0x80000000u, st);
    INIT("features_init: IID | flag 8", FAVOR_E_ARG, FAVOR_POSITIVE, D, M, FAVOR_IID | 8u, st);
    /* valid edge cases */
    INIT("features_init: ELU1 count d, storage non-NULL", FAVOR_OK, FAVOR_ELU1, D, D, 0, st);
    INIT("features_init: POLY2 count 0", FAVOR_OK, FAVOR_POLY2, D, 0, 0, NULL);
    INIT("features_init: POLY2 dim 4096", FAVOR_OK, FAVOR_POLY2, 4096, 4096, 0, st);
    INIT("features_init: IID | REGULAR_NORM", FAVOR_OK, FAVOR_POSITIVE, D, M,
         FAVOR_IID | FAVOR_REGULAR_NORM, st);
#undef INIT
    /* favor_features_floats: 0 for what init rejects */
    assert_int_equal(favor_features_floats(FAVOR_POSITIVE, D, M), 2 * D * M + 2 * D);
    assert_int_equal(favor_features_floats(FAVOR_POSITIVE, 0, M), 0);
    assert_int_equal(favor_features_floats(FAVOR_POSITIVE, D, 0), 0);
    assert_int_equal(favor_features_floats((favor_kernel)99, D, M), 0);
    assert_int_equal(favor_features_floats(FAVOR_POSITIVE, SIZE_MAX / 2, 4), 0);
    assert_int_equal(favor_features_floats(FAVOR_POSITIVE, SIZE_MAX / 32, 4), 0);
    assert_int_equal(favor_features_floats(FAVOR_ELU1, D, D), 0);
    assert_int_equal(favor_features_floats(FAVOR_ELU1, D, 0), 0);
    assert_int_equal(favor_features_floats(FAVOR_POLY2, D, D), 0);
    assert_int_equal(favor_features_floats(FAVOR_POLY2, D, 0), 0);
}

static void test_features_redraw_width(void **state)
{
    favor_features bad, before;
    (void)state;
    EXPECT("redraw: NULL", FAVOR_E_NULL, favor_features_redraw(NULL, 3));
    bad = F;
    bad.kernel = (favor_kernel)99;
    before = bad;
    EXPECT("redraw: kernel 99", FAVOR_E_ARG, favor_features_redraw(&bad, 3));
    assert_true(features_same(&before, &bad));
    bad = F;
    bad.flags = 64u;
    before = bad;
    EXPECT("redraw: flags 64", FAVOR_E_ARG, favor_features_redraw(&bad, 3));
    assert_true(features_same(&before, &bad));
    bad = F;
    bad.w = NULL;
    before = bad;
    EXPECT("redraw: w NULL", FAVOR_E_NULL, favor_features_redraw(&bad, 3));
    assert_true(features_same(&before, &bad));
    bad = F;
    bad.wt = NULL;
    before = bad;
    EXPECT("redraw: wt NULL", FAVOR_E_NULL, favor_features_redraw(&bad, 3));
    assert_true(features_same(&before, &bad));
    bad = F;
    bad.dim = 0;
    before = bad;
    EXPECT("redraw: dim 0", FAVOR_E_SHAPE, favor_features_redraw(&bad, 3));
    assert_true(features_same(&before, &bad));
    bad = F;
    bad.count = 0;
    before = bad;
    EXPECT("redraw: count 0", FAVOR_E_SHAPE, favor_features_redraw(&bad, 3));
    assert_true(features_same(&before, &bad));
    assert_int_equal(favor_features_init(&bad, FAVOR_POLY2, D, 0, 0, 1, NULL), FAVOR_OK);
    bad.count = D + 1;
    before = bad;
    EXPECT("redraw: POLY2 count != dim", FAVOR_E_SHAPE, favor_features_redraw(&bad, 3));
    assert_true(features_same(&before, &bad));
    bad.dim = bad.count = 5000;
    before = bad;
    EXPECT("redraw: POLY2 dim 5000", FAVOR_E_OVERFLOW, favor_features_redraw(&bad, 3));
    assert_true(features_same(&before, &bad));
    assert_int_equal(favor_features_width(&bad), 0);
    /* width */
    assert_int_equal(favor_features_width(NULL), 0);
    bad = F;
    bad.kernel = (favor_kernel)99;
    assert_int_equal(favor_features_width(&bad), 0);
    assert_int_equal(favor_features_width(&F), M);
    assert_int_equal(favor_features_width(&Felu), D);
}

static void test_feature_map(void **state)
{
    favor_tensor x, p;
    favor_features bad;
    int kind, which;
    (void)state;
#define FMAP(lbl, want, fp, xp, pp, role) EXPECT(lbl, want, favor_feature_map(fp, xp, pp, role))
    x = Tq, p = Tphi;
    FMAP("feature_map: valid", FAVOR_OK, &F, &x, &p, FAVOR_QUERY);
    FMAP("feature_map: f NULL", FAVOR_E_NULL, NULL, &x, &p, FAVOR_QUERY);
    FMAP("feature_map: x NULL", FAVOR_E_NULL, &F, NULL, &p, FAVOR_QUERY);
    FMAP("feature_map: phi NULL", FAVOR_E_NULL, &F, &x, NULL, FAVOR_QUERY);
    FMAP("feature_map: role 3", FAVOR_E_ARG, &F, &x, &p, (favor_role)3);
    FMAP("feature_map: role -1", FAVOR_E_ARG, &F, &x, &p, (favor_role)-1);
    FMAP("feature_map: ELU1 role 3", FAVOR_E_ARG, &Felu, &x, &p, (favor_role)3);
    /* per-tensor defects on x and on phi */
    for (which = 0; which < 2; ++which)
        for (kind = 0; kind < BAD_COUNT; ++kind) {
            favor_status want;
            x = Tq, p = Tphi;
            if (!make_bad(which ? &p : &x, kind, &want)) continue;
            snprintf(lbuf, sizeof lbuf, "feature_map: %s %s", which ? "phi" : "x",
                     bad_names[kind]);
            FMAP(lbuf, want, &F, &x, &p, FAVOR_KEY);
        }
    x = Tq, p = Tphi;
    x.cols = D - 1;
    FMAP("feature_map: x.cols != d", FAVOR_E_SHAPE, &F, &x, &p, FAVOR_QUERY);
    x = Tq, p = Tphi;
    p.cols = M - 1;
    FMAP("feature_map: phi.cols != width", FAVOR_E_SHAPE, &F, &x, &p, FAVOR_QUERY);
    x = Tq, p = Tphi;
    p.cols = M + 1, p.row_stride = M + 1, p.head_stride = N * (M + 1);
    FMAP("feature_map: phi.cols != width (larger)", FAVOR_E_SHAPE, &F, &x, &p, FAVOR_QUERY);
    x = Tq, p = Tphi;
    p.heads = HQ - 1;
    FMAP("feature_map: heads differ", FAVOR_E_SHAPE, &F, &x, &p, FAVOR_QUERY);
    x = Tq, p = Tphi;
    p.rows = N - 1;
    FMAP("feature_map: rows differ", FAVOR_E_SHAPE, &F, &x, &p, FAVOR_QUERY);
    x = Tq, p = Tphi;
    p = favor_tensor_packed(arena + OFF_PHI, HQ, N, D);
    FMAP("feature_map: ELU1 phi.cols != d", FAVOR_E_SHAPE, &Felu, &x, &Tphi, FAVOR_QUERY);
    FMAP("feature_map: ELU1 valid", FAVOR_OK, &Felu, &x, &p, FAVOR_PLAIN);
    /* aliasing */
    x = Tq, p = Tphi;
    p.data = (float *)x.data + 3;
    FMAP("feature_map: phi overlaps x", FAVOR_E_ALIAS, &F, &x, &p, FAVOR_QUERY);
    x = Tq, p = Tphi;
    p.data = F.w + 1;
    FMAP("feature_map: phi overlaps W", FAVOR_E_ALIAS, &F, &x, &p, FAVOR_QUERY);
    p.data = F.wt + M * D - 1;
    FMAP("feature_map: phi overlaps W^T", FAVOR_E_ALIAS, &F, &x, &p, FAVOR_QUERY);
    /* bad features */
    x = Tq, p = Tphi;
    bad = F;
    bad.kernel = (favor_kernel)99;
    FMAP("feature_map: kernel 99", FAVOR_E_ARG, &bad, &x, &p, FAVOR_QUERY);
    bad = F;
    bad.w = NULL;
    FMAP("feature_map: w NULL", FAVOR_E_NULL, &bad, &x, &p, FAVOR_QUERY);
    bad = F;
    bad.scale = -1.0f;
    FMAP("feature_map: scale -1", FAVOR_E_ARG, &bad, &x, &p, FAVOR_QUERY);
    bad = F;
    bad.scale = (float)NAN;
    FMAP("feature_map: scale NaN", FAVOR_E_ARG, &bad, &x, &p, FAVOR_QUERY);
#undef FMAP
}

/* ------------------------------------------------------------------------ */
/* State                                                                     */
/* ------------------------------------------------------------------------ */

static void test_state_init(void **state)
{
    favor_state st;
    favor_features bad;
    float *mem = arena + OFF_SPARE;
    (void)state;
#define SINIT(lbl, want, fp, heads, dv, storage)                                        \
    do {                                                                                \
        favor_state before_;                                                            \
        memset(&st, 0xA5, sizeof st);                                                   \
        before_ = st;                                                                   \
        EXPECT(lbl, want, favor_state_init(&st, fp, heads, dv, storage));               \
        if ((want) != FAVOR_OK) assert_true(state_same(&before_, &st));          \
    } while (0)
    EXPECT("state_init: st NULL", FAVOR_E_NULL, favor_state_init(NULL, &F, HKV, DV, mem));
    SINIT("state_init: f NULL", FAVOR_E_NULL, NULL, HKV, DV, mem);
    SINIT("state_init: storage NULL", FAVOR_E_NULL, &F, HKV, DV, NULL);
    SINIT("state_init: heads 0", FAVOR_E_SHAPE, &F, 0, DV, mem);
    SINIT("state_init: dv 0", FAVOR_E_SHAPE, &F, HKV, 0, mem);
    SINIT("state_init: heads overflow", FAVOR_E_OVERFLOW, &F, SIZE_MAX / 2, DV, mem);
    SINIT("state_init: dv overflow", FAVOR_E_OVERFLOW, &F, HKV, SIZE_MAX / 2, mem);
    SINIT("state_init: bytes overflow", FAVOR_E_OVERFLOW, &F, 1, SIZE_MAX / 4 / M, mem);
    bad = F;
    bad.kernel = (favor_kernel)99;
    SINIT("state_init: kernel 99", FAVOR_E_ARG, &bad, HKV, DV, mem);
    SINIT("state_init: valid", FAVOR_OK, &F, HKV, DV, mem);
    SINIT("state_init: valid ELU1", FAVOR_OK, &Felu, HKV, DV, mem);
#undef SINIT
    assert_int_equal(favor_state_floats(&F, HKV, DV),
                     HKV * (2 * M * (DV + 2) + 2 * D + 3 + 16 * (M + DV + 2)) + M +
                         (M > 16 * DV ? M : 16 * DV) + 35);
    assert_int_equal(favor_state_floats(&F, SIZE_MAX / 2, DV), 0);
    assert_int_equal(favor_state_floats(&F, 0, DV), 0);
    assert_int_equal(favor_state_floats(&F, HKV, 0), 0);
    assert_int_equal(favor_state_floats(NULL, HKV, DV), 0);
}

/* ------------------------------------------------------------------------ */
/* Workspace queries                                                         */
/* ------------------------------------------------------------------------ */

static void test_workspace_queries(void **state)
{
    favor_tensor q = Tq, k = Tk, v = Tv;
    favor_options o = favor_default_options();
    (void)state;
    /* NULL arguments never crash a query. Without the argument the size depends
       on (q: d for softmax; f and v: width and d_v for linear; f and st for
       extend) there is nothing to size and the answer is 0; the sizes of the
       others are not specified. */
    assert_int_equal(favor_softmax_attention_workspace(NULL, &k, &v, NULL), 0);
    (void)favor_softmax_attention_workspace(&q, NULL, &v, NULL);
    (void)favor_softmax_attention_workspace(&q, &k, NULL, NULL);
    (void)favor_softmax_attention_workspace(&q, NULL, NULL, NULL);
    assert_int_equal(favor_linear_attention_workspace(NULL, &q, &k, &v, NULL), 0);
    (void)favor_linear_attention_workspace(&F, NULL, &k, &v, NULL);
    (void)favor_linear_attention_workspace(&F, &q, NULL, &v, NULL);
    assert_int_equal(favor_linear_attention_workspace(&F, &q, &k, NULL, NULL), 0);
    assert_int_equal(favor_linear_extend_workspace(NULL, &St, &q, &Tke, &Tve, NULL), 0);
    assert_int_equal(favor_linear_extend_workspace(&F, NULL, &q, &Tke, &Tve, NULL), 0);
    (void)favor_linear_extend_workspace(&F, &St, NULL, NULL, NULL, NULL);
    /* nor do sizes whose workspace would overflow */
    q.cols = k.cols = q.row_stride = k.row_stride = SIZE_MAX / 2;
    q.rows = k.rows = q.heads = k.heads = 1;
    assert_int_equal(favor_softmax_attention_workspace(&q, &k, &v, NULL), 0);
    q = Tq, k = Tk;
    /* independent of the sequence length (softmax: with more than 32 query rows;
       the decode path's partials grow with n_k, see tests/test_decode.c) */
    {
        size_t a, b = favor_linear_attention_workspace(&F, &q, &k, &v, &o);
        q = favor_tensor_packed(Tq.data, HQ, 33, D);
        a = favor_softmax_attention_workspace(&q, &k, &v, &o);
        /* (the queries read no data: these sizes need not be backed by memory) */
        q = favor_tensor_packed(Tq.data, HQ, 1000000, D);
        k = favor_tensor_packed(Tk.data, HKV, 2000000, D);
        v = favor_tensor_packed(Tv.data, HKV, 2000000, DV);
        assert_int_equal(favor_softmax_attention_workspace(&q, &k, &v, &o), a);
        assert_int_equal(favor_linear_attention_workspace(&F, &q, &k, &v, &o), b);
    }
    /* The queries never touch the arena */
    label = "workspace queries";
    world_snapshot();
    (void)favor_softmax_attention_workspace(&Tq, &Tk, &Tv, NULL);
    (void)favor_linear_attention_workspace(&F, &Tq, &Tk, &Tv, NULL);
    (void)favor_linear_extend_workspace(&F, &St, &Tq, &Tke, &Tve, NULL);
    world_unchanged();
}

/* ------------------------------------------------------------------------ */
/* Status strings                                                            */
/* ------------------------------------------------------------------------ */

/* Option arrays whose floats would pass the end of the address space: each call
 * refuses them with FAVOR_E_OVERFLOW and writes nothing. The pointer is the last
 * float of the address space, so even one float passes the end; it is never
 * read: each of these checks comes before any access (the slopes, sinks and
 * decay are checked there before their values are read). */
static void test_address_end(void **state)
{
    float *top = (float *)(void *)(uintptr_t)(UINTPTR_MAX - 3);
    float *spare = arena + OFF_SPARE, *sinks = spare + 256, *lse_a = spare + 512;
    float *lse_b = spare + 768;
    favor_options o = favor_default_options();
    favor_tensor dq = favor_tensor_packed(spare + 1024, HQ, N, D);
    favor_tensor dk = favor_tensor_packed(spare + 1536, HKV, NK, D);
    favor_tensor dv = favor_tensor_packed(spare + 2048, HKV, NK, DV);
    favor_tensor ob = favor_tensor_packed(spare + 2304, HQ, N, DV);
    favor_tensor om = favor_tensor_packed(spare + 2560, HQ, N, DV);
    size_t h;
    (void)state;
    for (h = 0; h < HQ; ++h) sinks[h] = 0.5f;
    for (h = 0; h < HQ * N; ++h) lse_a[h] = lse_b[h] = 1.0f;
    o.alibi = top;
    EXPECT("softmax: opts.alibi at the end", FAVOR_E_OVERFLOW,
           favor_softmax_attention(&Tq, &Tk, &Tv, &To, &o));
    o.alibi = NULL;
    o.sinks = top;
    EXPECT("softmax: opts.sinks at the end", FAVOR_E_OVERFLOW,
           favor_softmax_attention(&Tq, &Tk, &Tv, &To, &o));
    EXPECT("softmax backward: opts.sinks at the end", FAVOR_E_OVERFLOW,
           favor_softmax_attention_backward(&Tq, &Tk, &Tv, &To, &To, &dq, &dk, &dv, &o));
    o.sinks = sinks;
    o.dsinks = top;
    EXPECT("softmax backward: opts.dsinks at the end", FAVOR_E_OVERFLOW,
           favor_softmax_attention_backward(&Tq, &Tk, &Tv, &To, &To, &dq, &dk, &dv, &o));
    o.sinks = o.dsinks = NULL;
    o.lse = top;
    EXPECT("softmax: opts.lse at the end", FAVOR_E_OVERFLOW,
           favor_softmax_attention(&Tq, &Tk, &Tv, &To, &o));
    EXPECT("softmax backward: opts.lse at the end", FAVOR_E_OVERFLOW,
           favor_softmax_attention_backward(&Tq, &Tk, &Tv, &To, &To, &dq, &dk, &dv, &o));
    o.lse = NULL;
    o.workspace = top;
    o.workspace_size = SIZE_MAX;
    EXPECT("softmax: opts.workspace at the end", FAVOR_E_OVERFLOW,
           favor_softmax_attention(&Tq, &Tk, &Tv, &To, &o));
    EXPECT("linear: opts.workspace at the end", FAVOR_E_OVERFLOW,
           favor_linear_attention(&F, &Tq, &Tk, &Tv, &To, &o));
    o.workspace = NULL;
    o.workspace_size = 0;
    o.flags = FAVOR_CAUSAL;
    o.decay = top;
    EXPECT("linear: opts.decay at the end", FAVOR_E_OVERFLOW,
           favor_linear_attention(&F, &Tq, &Tk, &Tv, &To, &o));
    EXPECT("extend: opts.decay at the end", FAVOR_E_OVERFLOW,
           favor_linear_extend(&F, &St, &Tq, &Tke, &Tve, &To, &o));
    EXPECT("linear backward: opts.decay at the end", FAVOR_E_OVERFLOW,
           favor_linear_attention_backward(&F, &Tq, &Tk, &Tv, &To, &dq, &dk, &dv, &o));
    EXPECT("merge: lse_a at the end", FAVOR_E_OVERFLOW,
           favor_attention_merge(&To, top, &ob, lse_b, &om, NULL, NULL));
    EXPECT("merge: lse_b at the end", FAVOR_E_OVERFLOW,
           favor_attention_merge(&To, lse_a, &ob, top, &om, NULL, NULL));
    EXPECT("merge: lse at the end", FAVOR_E_OVERFLOW,
           favor_attention_merge(&To, lse_a, &ob, lse_b, &om, top, NULL));
}

static void test_status_string(void **state)
{
    const char *s[8];
    int i, j;
    (void)state;
    for (i = 0; i <= (int)FAVOR_E_ARG; ++i) {
        s[i] = favor_status_string((favor_status)i);
        assert_non_null(s[i]);
        assert_true(strlen(s[i]) > 0);
        for (j = 0; j < i; ++j) assert_string_not_equal(s[i], s[j]);
    }
    assert_int_equal(FAVOR_E_ARG, 7);
    assert_non_null(favor_status_string((favor_status)8));
    assert_non_null(favor_status_string((favor_status)1000));
    assert_non_null(favor_status_string((favor_status)-1));
    assert_non_null(favor_backend());
}


/* opts->error: the refused argument and why, in one line; untouched on success */
static void expect_text(favor_status got, favor_status want, const char *buf, const char *text)
{
    ++cases;
    if (got != want || strcmp(buf, text) != 0) {
        print_error("got %s \"%s\", expected %s \"%s\"\n", favor_status_string(got), buf,
                    favor_status_string(want), text);
        fail();
    }
    assert_null(strchr(buf, '\n'));
}

static void test_error_messages(void **state)
{
    char buf[160], want[160];
    favor_options o = favor_default_options();
    favor_tensor t, q2, dk, dv;
    size_t need;
    float *dbuf = arena + OFF_SPARE;
    (void)state;
    o.error = buf;
    o.error_size = sizeof buf;
    /* a stride below the row, named with its values */
    t = Tk;
    t.row_stride = D - 1;
    memset(buf, 'Z', sizeof buf);
    snprintf(want, sizeof want, "k: row_stride %d is below cols %d", D - 1, D);
    expect_text(favor_softmax_attention(&Tq, &t, &Tv, &To, &o), FAVOR_E_SHAPE, buf, want);
    /* heads overlapping rows */
    t = Tq;
    t.head_stride = N * D - 1;
    snprintf(want, sizeof want,
             "q: head_stride %d is below %d, the span of the row_stride axis under it (its rows "
             "would overlap)", N * D - 1, N * D);
    expect_text(favor_softmax_attention(&t, &Tk, &Tv, &To, &o), FAVOR_E_SHAPE, buf, want);
    /* shapes that do not match */
    t = Tv;
    t.rows = NK - 1;
    snprintf(want, sizeof want, "v: rows is %d, k's is %d", NK - 1, NK);
    expect_text(favor_linear_attention(&F, &Tq, &Tk, &t, &To, &o), FAVOR_E_SHAPE, buf, want);
    q2 = favor_tensor_packed(arena + OFF_Q, 3, N, D);
    snprintf(want, sizeof want, "q: heads 3 is not a multiple of k's heads %d", HKV);
    t = favor_tensor_packed(arena + OFF_O, 3, N, DV);
    expect_text(favor_softmax_attention(&q2, &Tk, &Tv, &t, &o), FAVOR_E_SHAPE, buf, want);
    t = Tk;
    t.batch = 2;
    t.batch_stride = HKV * NK * D;
    expect_text(favor_softmax_attention(&Tq, &t, &Tv, &To, &o), FAVOR_E_SHAPE, buf,
                "k: batch is 2, q's is 1");
    t = Tq;
    t.dtype = (favor_dtype)7;
    expect_text(favor_softmax_attention(&t, &Tk, &Tv, &To, &o), FAVOR_E_ARG, buf,
                "q: dtype 7 is not a favor_dtype");
    expect_text(favor_softmax_attention(&Tq, NULL, &Tv, &To, &o), FAVOR_E_NULL, buf,
                "k is NULL");
    /* an output over an input; two gradients over each other */
    t = favor_tensor_packed(arena + OFF_Q, HQ, N, DV);
    expect_text(favor_softmax_attention(&Tq, &Tk, &Tv, &t, &o), FAVOR_E_ALIAS, buf,
                "out overlaps q");
    dk = favor_tensor_packed(dbuf + 256, HKV, NK, D);
    dv = favor_tensor_packed(dbuf + 256 + 8, HKV, NK, DV);
    t = favor_tensor_packed(dbuf, HQ, N, D);
    expect_text(favor_linear_attention_backward(&F, &Tq, &Tk, &Tv, &To, &t, &dk, &dv, &o),
                FAVOR_E_ALIAS, buf, "dv overlaps dk");
    /* options */
    o.threads = -1;
    expect_text(favor_softmax_attention(&Tq, &Tk, &Tv, &To, &o), FAVOR_E_ARG, buf,
                "opts: threads is negative");
    o.threads = 0;
    /* a workspace too small, with the size the call needs */
    need = favor_softmax_attention_workspace(&Tq, &Tk, &Tv, &o);
    assert_true(need > 16);
    o.workspace = dbuf + 1024;
    o.workspace_size = 16;
    snprintf(want, sizeof want, "opts.workspace: 16 bytes, the call needs %lu", (unsigned long)need);
    expect_text(favor_softmax_attention(&Tq, &Tk, &Tv, &To, &o), FAVOR_E_WORKSPACE, buf, want);
    o.workspace = NULL;
    o.workspace_size = 0;
    /* a workspace query that returns 0 says why too */
    t = Tk;
    t.cols = D + 1;
    t.row_stride = D + 1;
    t.head_stride = NK * (D + 1);
    assert_int_equal(favor_linear_attention_workspace(&F, &Tq, &t, &Tv, &o), 0);
    snprintf(want, sizeof want, "k: cols is %d, f's is %d", D + 1, D);
    assert_string_equal(buf, want);
    /* the state of an extend call */
    t = favor_tensor_packed(arena + OFF_V, 2 * HKV, N, DV);
    {
        favor_tensor q4 = favor_tensor_packed(arena + OFF_Q, 2 * HQ, N, D);
        favor_tensor k4 = favor_tensor_packed(arena + OFF_K, 2 * HKV, N, D);
        favor_tensor o4 = favor_tensor_packed(dbuf, 2 * HQ, N, DV);
        snprintf(want, sizeof want, "k: batch x heads is %d, st's is %d", 2 * HKV, HKV);
        expect_text(favor_linear_extend(&F, &St, &q4, &k4, &t, &o4, &o), FAVOR_E_SHAPE, buf, want);
    }
    /* success: the text is left as it was */
    memset(buf, 'Z', sizeof buf);
    assert_int_equal(favor_softmax_attention(&Tq, &Tk, &Tv, &To, &o), FAVOR_OK);
    for (need = 0; need < sizeof buf; ++need) assert_int_equal(buf[need], 'Z');
    fill_sentinel(arena + OFF_O, HQ * N * DV);
    /* cut to error_size with its NUL; error_size 0 writes nothing */
    t = Tk;
    t.row_stride = D - 1;
    o.error_size = 6;
    expect_text(favor_softmax_attention(&Tq, &t, &Tv, &To, &o), FAVOR_E_SHAPE, buf, "k: ro");
    assert_int_equal(buf[6], 'Z');
    memset(buf, 'Z', sizeof buf);
    o.error_size = 0;
    assert_int_equal(favor_softmax_attention(&Tq, &t, &Tv, &To, &o), FAVOR_E_SHAPE);
    assert_int_equal(buf[0], 'Z');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_string),
        cmocka_unit_test_setup_teardown(test_features_init, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(test_features_redraw_width, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(test_feature_map, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(test_state_init, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(test_workspace_queries, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(test_softmax, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(test_linear, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(test_extend, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(test_step, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(test_huge_rows, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(test_address_end, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(test_workspace_overlaps_tensors, world_setup,
                                        world_teardown),
        cmocka_unit_test_setup_teardown(test_linear_out_on_w, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(test_error_messages, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(test_extend_out_on_w, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(test_step_out_on_w, world_setup, world_teardown),
        cmocka_unit_test_setup_teardown(test_linear_workspace_on_w, world_setup,
                                        world_teardown),
        cmocka_unit_test_setup_teardown(test_extend_workspace_on_w_or_state, world_setup,
                                        world_teardown),
    };
    if (tu_check_backend() != 0) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
