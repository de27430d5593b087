/* favor_fuzz.c - a libFuzzer harness for favor.h (every public entry point).
 *
 * Build (see run.sh and README.md in this directory):
 *     clang -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
 *           -Iinclude [-mavx512f -mfma | -mavx2 -mfma | -DFAVOR_NO_SIMD] tests/fuzz/favor_fuzz.c -lm
 * or, without libFuzzer, with tests/fuzz/replay_main.c (gcc, valgrind, ...).
 *
 * One input is one scenario. Its first byte picks the operation (bits 0-2), the
 * element-type extension (bit 3), the batch extension (bit 4), the variant
 * extension (bit 5) and the gated extension (bit 6; bit 7 is ignored):
 *     0 favor_softmax_attention (+_workspace)
 *     1 favor_softmax_attention_backward (+_workspace)
 *     2 favor_linear_attention (+_workspace)
 *     3 favor_linear_attention_backward (+_workspace)
 *     4 favor_feature_map
 *     5 favor_state_floats/init/reset, favor_linear_extend (+_workspace), favor_linear_step,
 *       favor_linear_step_ex (gated extension: step kind 5; kind 6 stays favor_linear_step)
 *     6 favor_features_init/redraw/width/floats (gated extension: FAVOR_IDENTITY too)
 *     7 favor_status_string, favor_tensor_packed(_as), favor_tensor_batched (batch
 *       extension: 8 more bytes, the batch), favor_default_options, favor_backend,
 *       and every entry point with NULL arguments
 * The following bytes give shapes (heads_q, heads_kv, n, n_k, d, d_v), the feature
 * map (kernel, including out-of-range values; m; flags, including unknown bits; a
 * mutation of the favor_features struct), options (flags, scale, threads), the
 * workspace (NULL, exactly the query, smaller, larger, a raw size, aliased onto a
 * tensor, NULL with a failing FAVOR_MALLOC), opts->lse, and 4 bytes per tensor:
 * its layout (packed, interleaved, padded, raw strides that may be below the row
 * or overlapping, a [rows][q|k|v|o] buffer shared column-wise, a view aliased onto
 * another one, absurd sizes that overflow size_t, NULL data, zero sizes, a NULL
 * tensor pointer, a shape off by one) and how its values are drawn (nice values,
 * values up to 1e4, raw bit patterns, NaN/inf/subnormal/huge specials). With the
 * extension bit of the first byte set, each tensor takes a fifth byte, its element
 * type (dec_dtype: FAVOR_F32 below 128, FAVOR_F16 up to 189, FAVOR_BF16 up to 251,
 * then values outside the enum: 3, -1, 7, INT_MIN); without it (every input written
 * before element types existed) every tensor is FAVOR_F32. W, the state and lse
 * are always fp32. With the batch bit set, each tensor then takes two more bytes,
 * its batch count and its batch stride (dec_batch, set_batch_stride): the count
 * is 0..4 (0 and 1: one element), or "the call's batch" (the first tensor's, or
 * for favor_linear_extend/step the state's, which then takes one byte after the
 * init mutation: the state has batch x heads_kv heads), or rarely a huge value
 * (2^32 + 1 .. SIZE_MAX: batch x heads or the span overflows); the stride byte
 * picks the batch axis's place: outermost and packed (one element's extent),
 * outermost with a gap, interleaved inside the rows or heads (the larger strides
 * grow to make room), too small (batch elements that overlap or break the
 * nesting rule), 0, or huge (an overflowing span, or one that fits size_t but
 * not the address space above the data pointer). The column blocks of one
 * [rows][q|k|v|out] buffer take the stride of their group ([batch][rows][...] as
 * in llm.c, or [rows][batch][...]) unless their own mode is too small, 0 or huge.
 * Without the bit every batch is 0, so older inputs decode exactly as before. A
 * batched view is, as in the library, batch x heads "flat" heads (b outer): every
 * loop, message ("out[h][r][c]": h counts flat heads), lse ([batch][heads_q][n])
 * and state size of the harness uses them. With the variant bit set, the options
 * take 10 more bytes after their 8 (dec_ocfg): which of FAVOR_WINDOW, softcap,
 * alibi, sinks, dsinks, mask, seqs are on, the window's two sides (dec_win:
 * 0..47, around 64, negative = unbounded, huge), the softcap (dec_cap: 0.25..48,
 * then NaN, -1, +-inf, -0, FLT_MIN, denormals, FLT_MAX, ...), the modes of alibi
 * and sinks (values: typical, 0, negative, 1e4, one NaN, one inf, FLT_MAX, tiny /
 * 0, random, -inf, alternating -inf, NaN, +inf, +-1e4, FLT_MAX; placement: own
 * buffer of exactly heads_q floats, over the bytes of another view (q, out, lse,
 * the mask, W, ...), or alibi over sinks), of dsinks (own buffer, over a view,
 * over sinks, alibi or the mask, or past the end of the address space), of the
 * mask (1 or heads_q heads; values: the payload, 0, random -inf, documents,
 * rows of -inf, all -inf, +inf or NaN at random) and of the sequences (count
 * 0..4; valid, seq_k NULL, out of order, wrong ends, seq_q NULL, SIZE_MAX, q's
 * offsets for k), and a parameter. Every entry point taking options decodes
 * them (favor_linear_step takes none: its bytes are read, their buffers unused).
 * The mask is a tensor view after the call's tensors (its layout, dtype and batch
 * bytes as any view's: aliased onto another view, NULL tensor = no mask, off by
 * one, ...), then count - 1 bytes of query cuts and count - 1 of key cuts. Without
 * the bit nothing more is read and every variant is off (the flag byte's
 * FAVOR_WINDOW, once an unknown flag, is then a window of sides 0). With bit 6
 * set (gated linear attention; dec_gt has the details), every feature
 * configuration takes one more byte (FAVOR_IDENTITY instead of the kernel; a
 * map without W initialized with count d or 0) and the options 4 more bytes
 * after the variants' (if any): which of FAVOR_NO_NORM, opts.decay, opts.gates,
 * opts.dgates and FAVOR_CAUSAL are on; the decay's values (in (0, 1]: typical,
 * 1, FLT_MIN and 1e-45, 1/2; or one head 0, 1.5, NaN or -0.5) and placement
 * (its own buffer of exactly heads_kv floats, or over another view's bytes or
 * the gates'); the log-gates' pattern (uniform in [-1, 0], exact zeros, log
 * sigmoids, -80, edges down to -FLT_MAX, -|payload|, log 1/2), one bad value
 * (+0.5, NaN, -inf, +1e-45) and a forced dtype; dgates' forced dtype, or dgates
 * passed as the gates tensor itself. The gates ([batch][heads_kv][n_k][1]) and
 * dgates (shaped as the gates) are tensor views after the variants' views and
 * cuts, decoded as any view (layout, off by one in heads, rows or cols,
 * aliased onto another view, dtype and batch bytes; a NULL tensor pointer is
 * none). Every call taking options reads them: softmax must refuse any of them,
 * the linear forward, extend and step_ex ignore dgates, favor_linear_step
 * takes none (but refuses FAVOR_IDENTITY). Without the bit nothing more is read
 * and FAVOR_IDENTITY, FAVOR_NO_NORM and the gates are never drawn, so older
 * inputs decode exactly as before. The rest of
 * the input is the value payload; when it runs out a PRNG continues. A 16-bit tensor's values are drawn
 * as floats and rounded to its type (raw bit patterns: 16 raw bits).
 *
 * Every buffer a call can see is a separate malloc of exactly the bytes its views
 * span (so ASan sees any access outside), filled first with a NaN canary; gaps
 * between the rows of a view must never change. Buffers are measured in 16-bit
 * units: a 16-bit tensor is a view of uint16_t elements at any 2-byte offset, an
 * fp32 tensor one of floats at a 4-byte aligned offset; strides are in elements of
 * the tensor's own type, spans and overlaps in bytes (elements * favor_dtype_size).
 * Invariants (abort() with a message on violation):
 *   I1  no crash, no sanitizer report, no leak, FAVOR_ASSERT holds.
 *   I2  a call returning anything but FAVOR_OK leaves every byte it could see (out,
 *       dq/dk/dv, phi, lse, state, workspace, W, inputs, gaps, the structs passed
 *       by pointer) bit-identical.
 *   I3  a call returning FAVOR_OK changes nothing but its outputs (and the
 *       workspace), writes every output element, and zeroes the query rows that see
 *       no key: by the rules (causal, window, packed sequences: vis_row, the
 *       library's documented rule) always, and under I4 the rows whose every key a
 *       mask of finite and -inf values hides; their lse is -inf, or the head's sink
 *       logit exactly when it has one.
 *   I4  finite in -> finite out: when every input float is finite and at most 1e4 in
 *       magnitude, the scale is the default or in (0, 1e4], W is finite, a softmax
 *       backward's lse is NULL or the forward's, and the map role is not
 *       FAVOR_PLAIN (which "may overflow"), every output float of a FAVOR_OK call
 *       is finite (lse may be -inf for a row that sees no key, as documented).
 *       Variants: the mask and sinks may also hold -inf (a NaN or +inf in the mask,
 *       a slope or sink above 1e4 drop the promise), any accepted softcap keeps it;
 *       dsinks is an output like the others. Gated: decay and the log-gates are
 *       inputs (a log-gate below -1e4 drops the promise), dgates an output;
 *       FAVOR_NO_NORM with POSITIVE, HYPERBOLIC or TRIG drops the promise, as
 *       the manual says (every other map keeps it without the normalizer).
 *   I5  a call given exactly favor_*_workspace() bytes never returns
 *       FAVOR_E_WORKSPACE; a call given a workspace never calls FAVOR_MALLOC.
 *   I6  a call that is certainly invalid (NULL, zero size, rows that overlap,
 *       batch elements that overlap, sizes that overflow (batch x heads included),
 *       mismatched shapes or batches, an output sharing an element with
 *       another buffer of the call, bad options/features/role, a workspace smaller
 *       than the query, FAVOR_MALLOC failing; variants: a NaN/negative/subnormal/inf softcap,
 *       a non-finite slope, a NaN or +inf sink, dsinks without sinks, past the address
 *       space or sharing a byte with a tensor, lse, the mask, sinks or alibi; a mask
 *       of the wrong rows, cols, heads, batch or dtype, or under an output; bad
 *       sequence offsets; any score variant (window flag, softcap, alibi, sinks,
 *       dsinks, mask) on linear attention, seqs on favor_linear_extend; gated:
 *       FAVOR_NO_NORM, decay, gates or dgates on softmax, decay or gates on a
 *       non-causal linear call, a gamma outside (0, 1], a log-gate > 0, NaN or
 *       -inf, gates not fp32 or not shaped [batch][heads_kv][n_k][1], FAVOR_IDENTITY
 *       without FAVOR_NO_NORM (also with opts NULL and for favor_linear_step),
 *       dgates without gates, not fp32, shaped unlike the gates, the gates
 *       tensor itself, or sharing an element with anything, an output over the
 *       gates or the decay) does not
 *       return FAVOR_OK; a call that
 *       is certainly valid (every tensor laid out by the library's documented rule,
 *       over its rows, heads and batch, no output's byte span meeting another's
 *       except column blocks of one buffer with the same row and batch strides,
 *       enough workspace) returns FAVOR_OK.
 *       Calls in between (e.g. column-interleaved outputs whose byte spans overlap
 *       but no element does: see FINDINGS.md) may go either way.
 *   I7  with the flag bit set, the call is repeated with the other workspace kind
 *       and outputs pre-filled with different garbage: bit-identical results (a
 *       read of uninitialised workspace or output would show).
 *   I8  softmax outputs (and positive-feature linear outputs of nice inputs) lie in
 *       the range of the visible values, within the documented accuracy (decay
 *       and gates only reweight the keys, so also with them; not with
 *       FAVOR_NO_NORM or FAVOR_IDENTITY).
 *   I9  features: W finite, W^T its transpose, orthogonal blocks, regular norms,
 *       redraw with the same seed bit-identical; state init/reset contents.
 *   I10 forward calls whose rules hide keys (causal, a window, packed sequences;
 *       flag 4): keys and values from a cut on, replaced by other values (NaN and
 *       inf included with flag 0x80), do not change the rows whose keys all lie
 *       before the cut; nor do the log-gates from the cut on (other valid values,
 *       -80 and 0 with flag 0x80), when they are alone in their buffer.
 *   I11 element types: a tensor whose dtype is outside the enum makes the call
 *       return FAVOR_E_ARG (or FAVOR_E_NULL, _SHAPE, _OVERFLOW, but only when a check
 *       the library makes first, in its order, may fail: a NULL pointer, the
 *       features of favor_feature_map, a tensor checked earlier, the shapes of a
 *       backward call's inputs before its gradients) and writes nothing (I2).
 *   I12 a successful call with 16-bit tensors is repeated with packed fp32 copies
 *       of them (inputs: the widened values; the other tensors, W, lse and the
 *       state as they were): the fp32 call succeeds, its outputs are finite under
 *       I4, its outputs rounded to nearest even equal the 16-bit outputs bit for
 *       bit, and its fp32 outputs, lse and state (S, z, c, the compensation, the
 *       pending block) are bit-identical (a NaN matches any NaN). Under I4 a 16-bit
 *       output is never NaN, nor inf unless it is fp16 (overflow: I12 decides).
 *   I13 backward calls: a key no row can see by the rules has zero dk and dv (always
 *       for the keys of a packed sequence without rows; under I4 for the others).
 *   I14 OpenMP builds only (run.sh builds none; see README.md): with the flag bit
 *       set, 1, 2 and 3 threads (allocated workspaces, other output garbage) give
 *       the first call's bits, every call taking options (the gated ones too).
 *       Thread counts above 8 are decoded as 8 there (a slice per thread).
 *   I15 gated: a successful linear backward with dgates writes every element of
 *       dgates (I3), finite under I4, and dg of each sequence's first key is 0
 *       exactly; FAVOR_IDENTITY's feature map is sqrt(s) x within its roundings.
 * FINDING-8 and FINDING-9 are fixed: an output over alibi's or sinks' bytes must
 * be refused (the workspace is still never placed over them), and the workspace
 * queries are asked with any offsets and masks. A backward call with fp32 q, k, v and
 * a 16-bit out, dout or gradient queries its workspace with a 16-bit view in
 * place of q, as the manual says (WORKSPACE; FINDING-5). */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the library, with a failing-on-demand allocator and live assertions ---- */
static int g_malloc_fail;      /* FAVOR_MALLOC returns NULL                     */
static size_t g_malloc_calls;  /* FAVOR_MALLOC calls during the current call    */
static unsigned g_garbage = 1; /* pattern of fresh allocations                  */
static void *fz_lib_malloc(size_t n);
static void fz_lib_free(void *p);
static void fz_assert_fail(const char *what, const char *file, int line);
#define FAVOR_MALLOC(n) fz_lib_malloc(n)
#define FAVOR_FREE(p) fz_lib_free(p)
#define FAVOR_ASSERT(x) ((x) ? (void)0 : fz_assert_fail(#x, __FILE__, __LINE__))
#define FAVOR_IMPLEMENTATION
#include "favor.h"

/* ------------------------------------------------------------------------ */
/* Context for failure messages                                             */
/* ------------------------------------------------------------------------ */
static char g_ctx[4096];
static size_t g_ctxn;
static int g_verbose = -1;

static void ctx(const char *fmt, ...)
{
    va_list ap;
    int k;
    if (g_ctxn >= sizeof g_ctx - 1) return;
    va_start(ap, fmt);
    k = vsnprintf(g_ctx + g_ctxn, sizeof g_ctx - g_ctxn, fmt, ap);
    va_end(ap);
    if (k > 0) g_ctxn += (size_t)k;
    if (g_ctxn > sizeof g_ctx - 1) g_ctxn = sizeof g_ctx - 1;
}

static void fz_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "\n==favor_fuzz== INVARIANT VIOLATION at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n==favor_fuzz== backend %s; scenario: %s\n", favor_backend(), g_ctx);
    fflush(stderr);
    abort();
}
#define FZ_FAIL(...) fz_fail(__FILE__, __LINE__, __VA_ARGS__)

static void fz_assert_fail(const char *what, const char *file, int line)
{
    fz_fail(file, line, "FAVOR_ASSERT(%s) failed", what);
}

static int verbose(void)
{
    if (g_verbose < 0) {
        const char *e = getenv("FAVOR_FUZZ_VERBOSE");
        g_verbose = e && *e && *e != '0';
    }
    return g_verbose;
}

/* ------------------------------------------------------------------------ */
/* Input reader and PRNG                                                    */
/* ------------------------------------------------------------------------ */
typedef struct {
    const uint8_t *p;
    size_t n, i;
    uint64_t rng;
} fz_rd;

static unsigned rd8(fz_rd *r) { return r->i < r->n ? r->p[r->i++] : 0u; }
static int rd_has(const fz_rd *r, size_t k) { return r->n - r->i >= k; }
static uint32_t rd32(fz_rd *r)
{
    uint32_t v = rd8(r);
    v |= (uint32_t)rd8(r) << 8;
    v |= (uint32_t)rd8(r) << 16;
    v |= (uint32_t)rd8(r) << 24;
    return v;
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint64_t prng(fz_rd *r) { return mix64(r->rng += 0x9e3779b97f4a7c15ull); }
/* uniform in [-a, a] */
static float prng_unif(fz_rd *r, float a)
{
    double u = (double)(prng(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)((2.0 * u - 1.0) * a);
}

static float bits2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f2bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* 16-bit element types, written here from their definitions (not with the
 * library's conversions, which they check): widening is exact (a NaN comes out
 * quiet with its payload on top, as the manual says); narrowing rounds to
 * nearest, ties to even, in double (x / quantum is exact), fp16 overflowing to
 * inf above 65504 and bf16 above its largest finite value. */
static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    double x;
    if (e == 0x1fu) return bits2f(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
    x = e ? ldexp(1024.0 + m, (int)e - 25) : ldexp((double)m, -24);
    return sign ? -(float)x : (float)x;
}
static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x400000u;
    return bits2f(u);
}
static uint16_t f32_to_f16(float x)
{
    uint16_t sign = (uint16_t)((f2bits(x) >> 16) & 0x8000u);
    double a = fabs((double)x), q, r;
    int e;
    if (isnan(x)) return (uint16_t)(sign | 0x7e00u | ((f2bits(x) >> 13) & 0x1ffu));
    if (a == 0.0) return sign;
    frexp(a, &e);                        /* a = f 2^e, f in [0.5, 1) */
    q = ldexp(1.0, (e - 1 < -14 ? -14 : e - 1) - 10); /* the spacing of fp16 near a */
    r = rint(a / q) * q;                 /* to nearest, ties to even (default mode) */
    if (!(r <= 65504.0)) return (uint16_t)(sign | 0x7c00u);
    if (r < ldexp(1.0, -14)) return (uint16_t)(sign | (uint16_t)(r / ldexp(1.0, -24)));
    frexp(r, &e);
    return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)(r / ldexp(1.0, e - 11) - 1024.0));
}
static uint16_t f32_to_bf16(float x)
{
    uint32_t u = f2bits(x);
    double a = fabs((double)x), q, r;
    int e;
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x40u);
    if (a == 0.0 || isinf(x)) return (uint16_t)(u >> 16);
    frexp(a, &e);
    q = ldexp(1.0, (e - 1 < -126 ? -126 : e - 1) - 7); /* the spacing of bf16 near a */
    r = rint(a / q) * q;
    if (!(r <= (double)bits2f(0x7f7f0000u))) return (uint16_t)((u >> 16 & 0x8000u) | 0x7f80u);
    return (uint16_t)((u >> 16 & 0x8000u) | (f2bits((float)r) >> 16));
}

#define CANARY_OUT 0x7fa5a5a5u /* a signalling NaN: output not yet written */
#define CANARY_GAP 0x7fbadbadu /* a signalling NaN: a byte no view owns    */
/* the same for 16-bit outputs: signalling NaNs, which no conversion produces */
#define CANARY_OUT_F16 0x7d25u
#define CANARY_OUT_BF16 0x7fa5u

static const float k_specials[] = {
    0.0f,     -0.0f,   1.0f,      -1.0f,   0.5f,     2.0f,      1e4f,     -1e4f,
    9999.5f,  1e-3f,   FLT_MIN,   -FLT_MIN, 1e-45f,  -1e-40f,   88.7f,    -104.0f,
    100.0f,   -100.0f, 1e5f,      1e30f,   -1e30f,   FLT_MAX,   -FLT_MAX, INFINITY,
    -INFINITY, NAN,    -NAN,      3.0f,    1e-20f,   50.0f,     -50.0f,   20.0f,
};
#define N_SPECIALS (sizeof k_specials / sizeof k_specials[0])

/* ------------------------------------------------------------------------ */
/* Allocation bookkeeping (everything is freed at the end of an input)     */
/* ------------------------------------------------------------------------ */
#define FZ_MAXALLOC 1024
static void *g_allocs[FZ_MAXALLOC];
static int g_nallocs;

static void *fz_alloc(size_t bytes)
{
    void *p;
    if (g_nallocs >= FZ_MAXALLOC) FZ_FAIL("harness: too many allocations");
    p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "favor_fuzz: out of memory (%zu bytes)\n", bytes);
        abort();
    }
    g_allocs[g_nallocs++] = p;
    return p;
}

static void fz_free_all(void)
{
    int i;
    for (i = 0; i < g_nallocs; ++i) free(g_allocs[i]);
    g_nallocs = 0;
}

static void fill_garbage(void *p, size_t bytes, unsigned pattern)
{
    unsigned char *b = (unsigned char *)p;
    size_t i;
    for (i = 0; i + 4 <= bytes; i += 4) {
        /* finite garbage that differs between patterns, with a few NaNs */
        float v = (float)((int)((i / 4 * 2654435761u + pattern * 40503u) % 2001u) - 1000) *
                  (pattern & 1 ? 0.37f : 123.25f);
        if ((i / 4 + pattern) % 97 == 0) v = bits2f(0x7fc00000u + (pattern & 0xffff));
        memcpy(b + i, &v, 4);
    }
    for (; i < bytes; ++i) b[i] = (unsigned char)(0xa5 ^ pattern);
}

/* Workspaces above this are not allocated: a huge shape of views whose memory is
 * never touched (a batch of 2^32 + 1 over one row, say) can have a valid query of
 * terabytes. Such a call gets no workspace and a FAVOR_MALLOC that returns NULL
 * above the cap (FAVOR_E_NOMEM), and either outcome is allowed. */
#define FZ_WS_CAP ((size_t)1 << 28)

static void *fz_lib_malloc(size_t n)
{
    void *p;
    ++g_malloc_calls;
    if (g_malloc_fail || n > FZ_WS_CAP) return NULL;
    p = malloc(n ? n : 1);
    if (p) fill_garbage(p, n, g_garbage++);
    return p;
}
static void fz_lib_free(void *p) { free(p); }

/* ------------------------------------------------------------------------ */
/* Buffers and views                                                        */
/* ------------------------------------------------------------------------ */
enum { R_IN, R_OUT, R_LSE_IN, R_STATE, R_WS, R_IGN };

/* Buffers are measured in 16-bit units (an fp32 element is two) */
#define UNIT 2
typedef struct {
    unsigned char *mem; /* exactly len units (bytes for the workspace)       */
    size_t len;         /* units (R_WS: bytes)                                  */
    unsigned char *snap;
    unsigned char *mayw; /* per unit: may change on FAVOR_OK                    */
    int *owner;          /* scratch for the overlap computation                 */
    int is_ws;
} fz_buf;

static size_t buf_bytes(const fz_buf *B) { return B->is_ws ? B->len : B->len * UNIT; }

enum {
    L_PACKED = 0, L_INTERLEAVED, L_PADDED, L_INTERPAD, L_RAW, L_FUSED, L_ALIAS, L_ABSURD,
    L_NULLDATA, L_ZERO, L_NULLPTR, L_OFFSET
};

typedef struct {
    const char *name;
    int role;
    int used;          /* part of the call (else only must stay untouched) */
    int layout;
    unsigned p1, p2, p3, vmode, vseed;
    favor_tensor t;
    size_t es;         /* bytes per element: 2 (fp16, bf16) or 4 (fp32, and
                          the storage of a dtype outside the enum)           */
    int dt_valid;      /* t.dtype is in the enum                            */
    int present;       /* tensor pointer non-NULL                           */
    int buf;           /* -1: none                                          */
    size_t off;        /* units into the buffer                             */
    size_t span;       /* elements (when mem_ok)                            */
    int mem_ok;        /* present, data non-NULL, sizes non-zero, not absurd */
    int absurd, zero, nulldata;
    int self_overlap;  /* two of its rows share an element                  */
    int nested_ok;     /* the library's layout rule holds                   */
    int inprom;        /* every element finite, |x| <= 1e4                  */
    int nice;          /* every element |x| <= 4                            */
    int group;         /* fused group or -1                                 */
    size_t gcol;       /* column offset in the fused group (units)          */
    int alias_of;      /* view index or -1                                  */
    size_t alias_off;
    unsigned bm;       /* batch stride byte (mode: bits 0-2, parameter above) */
    int bgroup;        /* the batch stride is its fused group's             */
    int topaddr;       /* data near the top of the address space            */
    int kind;          /* a score-variant buffer (K_MASK, ...) or K_TENSOR  */
} fz_view;
enum { K_TENSOR = 0, K_MASK, K_ALIBI, K_SINKS, K_DSINKS, K_GATES, K_DGATES, K_DECAY };

#define FZ_MAXV 24
#define FZ_MAXB 32
static fz_view g_v[FZ_MAXV];
static int g_nv;
static fz_buf g_b[FZ_MAXB];
static int g_nb;
static float g_dummy_store[4];

/* the structs the call sees */
static favor_features g_f;
static int g_have_f;
static int g_fbuf = -1;      /* W storage buffer */
static favor_state g_st;
static int g_have_st;
static int g_stbuf = -1;     /* state storage buffer */

static size_t fz_add(size_t a, size_t b, int *ovf)
{
    if (b > SIZE_MAX - a) *ovf = 1;
    return a + b;
}
static size_t fz_mul(size_t a, size_t b, int *ovf)
{
    if (a && b > SIZE_MAX / a) *ovf = 1;
    return a * b;
}

/* batch elements of a view (0 and 1: one) and its heads over all of them */
static size_t tnb(const favor_tensor *t) { return t->batch > 1 ? t->batch : 1; }
static size_t theads(const favor_tensor *t) { return tnb(t) * t->heads; }

/* span of a view in elements; *ovf set when it (in bytes: es per element), or
 * batch x heads, overflows size_t */
static size_t view_span(const favor_tensor *t, size_t es, int *ovf)
{
    size_t s;
    *ovf = 0;
    fz_mul(tnb(t), t->heads, ovf);
    s = fz_mul(t->heads - 1, t->head_stride, ovf);
    s = fz_add(s, fz_mul(t->rows - 1, t->row_stride, ovf), ovf);
    if (t->batch > 1) s = fz_add(s, fz_mul(t->batch - 1, t->batch_stride, ovf), ovf);
    s = fz_add(s, t->cols, ovf);
    fz_mul(s, es, ovf);
    return s;
}

/* the axes of a view with more than one element, rows, heads, batch, sorted by
 * stride (a tie keeps that order); pointers to the strides; returns how many */
static int sorted_axes(favor_tensor *t, size_t **st, size_t *cnt)
{
    int n = 0, i, j;
    if (t->rows > 1) { st[n] = &t->row_stride; cnt[n++] = t->rows; }
    if (t->heads > 1) { st[n] = &t->head_stride; cnt[n++] = t->heads; }
    if (t->batch > 1) { st[n] = &t->batch_stride; cnt[n++] = t->batch; }
    for (i = 1; i < n; ++i) /* insertion sort: stable */
        for (j = i; j > 0 && *st[j] < *st[j - 1]; --j) {
            size_t *ps = st[j], c = cnt[j];
            st[j] = st[j - 1]; cnt[j] = cnt[j - 1];
            st[j - 1] = ps; cnt[j - 1] = c;
        }
    return n;
}

/* the library's documented layout rule: taken by increasing stride, each stride
 * covers all the rows of the smaller axes (rows, heads and batch; an
 * overflowing extent breaks it) */
static int nested_rule(const favor_tensor *t0)
{
    favor_tensor t = *t0;
    size_t *st[3], cnt[3], ext = t.cols;
    int n = sorted_axes(&t, st, cnt), i, ovf = 0;
    for (i = 0; i < n; ++i) {
        if (*st[i] < ext) return 0;
        ext = fz_add(ext, fz_mul(cnt[i] - 1, *st[i], &ovf), &ovf);
        if (ovf) return 0;
    }
    return 1;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* element (h, r, c) of a view, h counting batch x heads flat heads (b outer) */
static size_t tindex(const favor_tensor *t, size_t h, size_t r, size_t c)
{
    if (t->batch > 1) return h / t->heads * t->batch_stride + h % t->heads * t->head_stride + r * t->row_stride + c;
    return h * t->head_stride + r * t->row_stride + c;
}

/* 1 when two (batch, head, row) rows share an element (small views only) */
static int rows_overlap(const favor_tensor *t)
{
    size_t H = theads(t), n = H * t->rows, h, r, i, *st;
    int res = 0;
    if (n < 2) return 0;
    st = (size_t *)malloc(n * sizeof *st);
    if (!st) abort();
    for (h = 0; h < H; ++h)
        for (r = 0; r < t->rows; ++r) st[h * t->rows + r] = tindex(t, h, r, 0);
    qsort(st, n, sizeof *st, cmp_size);
    for (i = 1; i < n; ++i)
        if (st[i] - st[i - 1] < t->cols) res = 1;
    free(st);
    return res;
}

/* Elements of a view: their address, their value widened to fp32, a value
 * rounded into them (fp32, and a dtype outside the enum, are stored as floats) */
static size_t elem_index(const fz_view *v, size_t h, size_t r, size_t c)
{
    return tindex(&v->t, h, r, c);
}
/* the flat heads of a view (batch x heads; mem_ok views only) */
static size_t vheads(const fz_view *v) { return theads(&v->t); }
static unsigned char *EAT(const fz_view *v, size_t h, size_t r, size_t c)
{
    return (unsigned char *)v->t.data + elem_index(v, h, r, c) * v->es;
}
/* units from the start of the view's buffer to element (h, r, c) */
static size_t elem_unit(const fz_view *v, size_t h, size_t r, size_t c)
{
    return v->off + elem_index(v, h, r, c) * v->es / UNIT;
}
static int is16(const fz_view *v) { return v->es == 2; }
static float load_elem(const fz_view *v, const unsigned char *p)
{
    uint16_t u;
    float f;
    if (!is16(v)) {
        memcpy(&f, p, 4);
        return f;
    }
    memcpy(&u, p, 2);
    return v->t.dtype == FAVOR_F16 ? f16_to_f32(u) : bf16_to_f32(u);
}
static uint16_t narrow_to(favor_dtype dt, float x) { return dt == FAVOR_F16 ? f32_to_f16(x) : f32_to_bf16(x); }
static void store_elem(const fz_view *v, unsigned char *p, float x)
{
    if (is16(v)) {
        uint16_t u = narrow_to(v->t.dtype, x);
        memcpy(p, &u, 2);
    } else {
        memcpy(p, &x, 4);
    }
}
static float VGET(const fz_view *v, size_t h, size_t r, size_t c) { return load_elem(v, EAT(v, h, r, c)); }
static void VSET(const fz_view *v, size_t h, size_t r, size_t c, float x) { store_elem(v, EAT(v, h, r, c), x); }
static uint32_t out_canary(const fz_view *v)
{
    return !is16(v) ? CANARY_OUT : v->t.dtype == FAVOR_F16 ? CANARY_OUT_F16 : CANARY_OUT_BF16;
}
static void put_canary(const fz_view *v, unsigned char *p)
{
    uint32_t c = out_canary(v);
    uint16_t c16 = (uint16_t)c;
    if (is16(v)) memcpy(p, &c16, 2);
    else memcpy(p, &c, 4);
}
static int is_canary(const fz_view *v, const unsigned char *p)
{
    uint32_t c = 0;
    uint16_t c16 = 0;
    if (is16(v)) {
        memcpy(&c16, p, 2);
        return c16 == (uint16_t)out_canary(v);
    }
    memcpy(&c, p, 4);
    return c == CANARY_OUT;
}
static const char *dtype_name(favor_dtype dt)
{
    switch ((int)dt) {
    case FAVOR_F32: return "f32";
    case FAVOR_F16: return "f16";
    case FAVOR_BF16: return "bf16";
    default: return "bad";
    }
}

/* ------------------------------------------------------------------------ */
/* Decoding small numbers                                                   */
/* ------------------------------------------------------------------------ */
static size_t dec_len(unsigned b)
{
    static const size_t tab[] = {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 66,
                                 70, 79, 80};
    if (b < 176) return 1 + b % 12;
    return tab[(b - 176) % (sizeof tab / sizeof tab[0])];
}
static size_t dec_dim(unsigned b)
{
    if (b == 255) return 0;
    if (b >= 240) return 16 + b % 5; /* 16..20 */
    return 1 + b % 20;
}
static int dec_kernel(unsigned b)
{
    /* 6, FAVOR_IDENTITY, comes from the gated extension's byte (dec_fcfg) */
    static const int bad[] = {7, 8, -1, 100, INT_MAX, INT_MIN};
    if (b < 250) return (int)(b % 6);
    return bad[b - 250];
}
/* the maps without W (ELU1, POLY2, IDENTITY): count is d, no storage */
static int fz_fixed(int kernel)
{
    return kernel == FAVOR_ELU1 || kernel == FAVOR_POLY2 || kernel == FAVOR_IDENTITY;
}
/* the maps of exponential features: their unnormalized sums (FAVOR_NO_NORM) may
 * overflow, as the manual says */
static int fz_exp_map(int kernel)
{
    return kernel == FAVOR_POSITIVE || kernel == FAVOR_HYPERBOLIC || kernel == FAVOR_TRIG;
}
static unsigned dec_oflags(unsigned b)
{
    static const unsigned bad[] = {2u, 0x80u, 0xffffffffu, 0x80000001u, 8u, 0x100u};
    if (b < 250) return b & 1u;
    return bad[b - 250];
}
static float dec_scale(unsigned b, unsigned b2)
{
    static const float tab[] = {0.0f,  -0.0f,   1.0f,     0.125f,  0.5f,    2.0f,     1e4f,
                                1e-3f, FLT_MIN, 1e-45f,   -1.0f,   NAN,     INFINITY, -INFINITY,
                                FLT_MAX, 1e20f, 1.0001e4f, 0.05f,  7.0f,    -FLT_MIN};
    if (b < 128) return 0.0f;
    if (b < 192) return 0.01f + (float)b2 / 64.0f; /* a legal explicit scale, 0.01..4 */
    return tab[(b - 192) % (sizeof tab / sizeof tab[0])];
}
/* the element type of a tensor (extended inputs): mostly fp32, often 16-bit,
 * rarely a value outside the enum */
static int g_dt_ext;     /* the first byte's bit 3: each tensor has a dtype byte */
static int g_gt_ext;     /* the first byte's bit 6: gated linear attention (dec_gt) */
static int g_twin_block; /* the operation forbids the fp32 twin (I12; see op_state) */
static size_t g_twins;   /* fp32 twins run */
static favor_dtype dec_dtype(unsigned b)
{
    static const int bad[] = {3, -1, 7, INT_MIN};
    if (b < 128) return FAVOR_F32;
    if (b < 190) return FAVOR_F16;
    if (b < 252) return FAVOR_BF16;
    return (favor_dtype)bad[b - 252];
}
static int dtype_ok(favor_dtype dt) { return dt == FAVOR_F32 || dt == FAVOR_F16 || dt == FAVOR_BF16; }

/* the batch count of a tensor (extended inputs): 0..4 (0 and 1: one element),
 * rarely huge (batch x heads overflows, or the span does, or it does not fit the
 * address space: see layout_views); below 160, once the call has a batch (its
 * first tensor's, or the state's), that batch */
static int g_bt_ext;          /* the first byte's bit 4: each tensor has two batch bytes */
static int g_call_batch_set;  /* g_call_batch holds the call's batch                 */
static size_t g_call_batch;
#define FZ_HUGE_BATCH 64      /* a batch above this is never real memory            */
static size_t dec_batch(unsigned b)
{
    static const size_t huge[] = {SIZE_MAX, SIZE_MAX / 2 + 1, (size_t)1 << 62, ((size_t)1 << 32) + 1,
                                  SIZE_MAX / 3 + 1, (size_t)1 << 33};
    if (g_call_batch_set && b < 160) return g_call_batch;
    if (b < 240) return b % 5;
    return huge[(b - 240) % 6];
}

static int dec_threads(unsigned b)
{
    static const int tab[] = {1, 2, 3, 64, -1, INT_MIN, INT_MAX, -7};
    if (b < 200) return 0;
#ifdef _OPENMP
    /* OpenMP builds: the workspace (and its query) holds a slice per thread, so
     * 64 and INT_MAX become 8 (without OpenMP the count is only validated) */
    if (tab[(b - 200) % 8] > 8) return 8;
#endif
    return tab[(b - 200) % 8];
}

/* ------------------------------------------------------------------------ */
/* Views: decode, lay out, allocate, fill                                   */
/* ------------------------------------------------------------------------ */
static fz_view *add_view(fz_rd *r, const char *name, int role, size_t h, size_t rows,
                         size_t c)
{
    fz_view *v;
    unsigned b0, b3;
    if (g_nv >= FZ_MAXV) FZ_FAIL("harness: too many views");
    v = &g_v[g_nv++];
    memset(v, 0, sizeof *v);
    v->name = name;
    v->role = role;
    v->used = 1;
    v->buf = -1;
    v->group = -1;
    v->alias_of = -1;
    b0 = rd8(r);
    v->p1 = rd8(r);
    v->p2 = rd8(r);
    b3 = v->p3 = rd8(r);
    v->t.dtype = g_dt_ext ? dec_dtype(rd8(r)) : FAVOR_F32;
    v->dt_valid = dtype_ok(v->t.dtype);
    v->es = v->dt_valid && v->t.dtype != FAVOR_F32 ? 2 : 4;
    if (v->t.dtype != FAVOR_F32) ctx("[%s %s=%d] ", name, dtype_name(v->t.dtype), (int)v->t.dtype);
    if (g_bt_ext) { /* the batch count now, its stride once the layout is known */
        v->t.batch = dec_batch(rd8(r));
        v->bm = rd8(r);
        if (!g_call_batch_set && v->t.batch <= 4) {
            g_call_batch = v->t.batch;
            g_call_batch_set = 1;
        }
        ctx("[%s batch=%zu bmode=%u/%u] ", name, v->t.batch, v->bm & 7, v->bm >> 3);
    }
    v->vmode = b0 >> 4;
    v->vseed = b0 * 131u + v->p1 * 7u + v->p2 + (unsigned)g_nv * 977u;
    switch (b0 & 15) {
    case 0: case 1: case 2: case 3: case 4: v->layout = L_PACKED; break;
    case 5: v->layout = L_INTERLEAVED; break;
    case 6: v->layout = L_PADDED; break;
    case 7: v->layout = L_INTERPAD; break;
    case 8: v->layout = L_RAW; break;
    case 9: v->layout = L_FUSED; break;
    case 10: v->layout = L_ALIAS; break;
    case 11: v->layout = (v->p1 & 3) == 0 ? L_ABSURD : L_PACKED; break;
    case 12: v->layout = (v->p1 & 3) == 0 ? L_NULLDATA : (v->p1 & 3) == 1 ? L_NULLPTR : L_OFFSET; break;
    case 13: v->layout = (v->p1 & 3) == 0 ? L_ZERO : L_OFFSET; break;
    case 14: v->layout = L_OFFSET; break;
    default: v->layout = L_PACKED; break;
    }
    if ((b3 & 0xf0) == 0xf0) { /* a shape off by one */
        size_t *dim = (b3 & 3) == 0 ? &h : (b3 & 3) == 1 ? &rows : &c;
        if (b3 & 4) *dim += 1;
        else if (*dim > 1) *dim -= 1;
        else *dim += 2;
        ctx("[%s off-by-one] ", name);
    }
    v->t.heads = h;
    v->t.rows = rows;
    v->t.cols = c;
    return v;
}

/* a view that is not a favor_tensor (lse, W, the state): 1 x 1 x len floats at
 * buffer b + off units */
static fz_view *add_range_view(const char *name, int role, int b, size_t off, size_t len)
{
    fz_view *v;
    if (g_nv >= FZ_MAXV) FZ_FAIL("harness: too many views");
    v = &g_v[g_nv++];
    memset(v, 0, sizeof *v);
    v->name = name;
    v->role = role;
    v->used = 1;
    v->layout = L_PACKED;
    v->buf = b;
    v->off = off;
    v->group = -1;
    v->alias_of = -1;
    v->present = 1;
    v->t.heads = 1;
    v->t.rows = 1;
    v->t.cols = len;
    v->t.head_stride = len;
    v->t.row_stride = len;
    v->t.dtype = FAVOR_F32;
    v->es = 4;
    v->dt_valid = 1;
    v->span = len;
    v->mem_ok = len > 0;
    v->nested_ok = 1;
    v->inprom = 1;
    v->nice = 1;
    return v;
}

static int new_buf(size_t len)
{
    if (g_nb >= FZ_MAXB) FZ_FAIL("harness: too many buffers");
    memset(&g_b[g_nb], 0, sizeof g_b[g_nb]);
    g_b[g_nb].len = len;
    return g_nb++;
}

static void alloc_buf(int b)
{
    fz_buf *B = &g_b[b];
    size_t bytes = buf_bytes(B);
    B->mem = (unsigned char *)fz_alloc(bytes);
    B->snap = (unsigned char *)fz_alloc(bytes);
    B->mayw = (unsigned char *)fz_alloc(B->len + 1);
    B->owner = (int *)fz_alloc((B->len + 1) * sizeof(int));
    memset(B->mayw, 0, B->len + 1);
    if (!B->is_ws) {
        size_t i;
        uint32_t gap = CANARY_GAP;
        for (i = 0; i < bytes; i += 4) memcpy(B->mem + i, &gap, bytes - i < 4 ? bytes - i : 4);
    }
}

/* units of a view's span */
static size_t view_units(const fz_view *v) { return v->span * v->es / UNIT; }

/* The batch stride of a view whose heads and rows are laid out (extended
 * inputs), from its mode byte: 0-2 outermost and packed (the extent of one
 * element), 3 outermost with a gap, 4 interleaved (the batch axis goes below the
 * smallest or the middle one of rows and heads, whose strides grow by
 * (batch - 1) x its stride), 5 too small (overlapping batch elements, or a
 * layout that breaks the nesting rule), 6 zero, 7 huge. A batch of 0 or 1 never
 * reads it (nor changes the other strides). */
static void set_batch_stride(fz_view *v)
{
    static const size_t huge[] = {SIZE_MAX, SIZE_MAX / 2 + 1, (size_t)1 << 62, ((size_t)1 << 40) + 3,
                                  ((size_t)1 << 32) + 1, SIZE_MAX - 64};
    favor_tensor *t = &v->t;
    unsigned mode = v->bm & 7, par = v->bm >> 3;
    size_t nb = tnb(t), e1;
    int ovf = 0;
    if (!t->heads || !t->rows || !t->cols) {
        t->batch_stride = par;
        return;
    }
    e1 = fz_add(fz_add(fz_mul(t->heads - 1, t->head_stride, &ovf), fz_mul(t->rows - 1, t->row_stride, &ovf), &ovf),
                t->cols, &ovf);
    if (ovf) e1 = SIZE_MAX;
    switch (mode) {
    case 3: t->batch_stride = e1 > SIZE_MAX - 14 ? SIZE_MAX : e1 + 1 + par % 13; break;
    case 4:
        if (v->layout != L_ABSURD && v->layout != L_FUSED) {
            /* the axes from the k-th on keep their slack over the extent below
             * them (a stride that broke the rule still breaks it) */
            size_t *st[3], cnt[3], B = t->batch, ext0 = t->cols, ext1 = t->cols, bs = 0, s0;
            int n, k, i;
            t->batch = 0; /* rows and heads only */
            n = sorted_axes(t, st, cnt);
            t->batch = B;
            k = (int)(par & 1) < n ? (int)(par & 1) : n;
            for (i = 0; i <= n; ++i) {
                if (i == k) { /* the batch axis: ext1 grows by it */
                    bs = ext1 + (par >> 1) % 4;
                    ext1 += (nb - 1) * bs;
                }
                if (i == n) break;
                s0 = *st[i];
                *st[i] = s0 + (ext1 - ext0);
                ext0 += (cnt[i] - 1) * s0;
                ext1 += (cnt[i] - 1) * *st[i];
            }
            t->batch_stride = bs;
        } else {
            t->batch_stride = e1;
        }
        break;
    case 5: t->batch_stride = e1 - 1 - par % e1; break;
    case 6: t->batch_stride = 0; break;
    case 7: t->batch_stride = huge[par % 6]; break;
    default: t->batch_stride = e1; break;
    }
}

/* Lay out every decoded tensor view (layouts, buffers, absurd sizes) and allocate. */
static void layout_views(void)
{
    size_t gw[2] = {0, 0}, grows[2] = {0, 0}, gpad[2] = {0, 0}; /* gw: units */
    size_t gbat[2] = {1, 1};  /* the batch of a group's first member           */
    unsigned gbm[2] = {0, 0}; /* and its batch stride byte: the group's layout */
    int gbuf[2] = {-1, -1}, gseen[2] = {0, 0}, g32[2] = {0, 0};
    int i, ovf;
    for (i = 0; i < g_nv; ++i) {
        fz_view *v = &g_v[i];
        favor_tensor *t = &v->t;
        size_t h = t->heads, r = t->rows, c = t->cols;
        if (v->buf >= 0) continue; /* range views are placed already */
        v->present = v->layout != L_NULLPTR;
        switch (v->layout) {
        case L_INTERLEAVED: t->head_stride = c; t->row_stride = h * c; break;
        case L_PADDED:
            t->row_stride = c + v->p1 % 5;
            t->head_stride = r * t->row_stride + v->p2 % 7;
            break;
        case L_INTERPAD:
            t->head_stride = c + 1 + v->p1 % 3;
            t->row_stride = h * t->head_stride + v->p2 % 4;
            break;
        case L_RAW: {
            long hs = (v->p1 & 0x80) ? (long)(r * c) + (long)(v->p1 & 0x7f) - 64 : (long)(v->p1 & 0x7f);
            long rs = (v->p2 & 0x80) ? (long)c + (long)(v->p2 & 0x3f) - 32 : (long)(v->p2 & 0x7f);
            t->head_stride = hs < 0 ? 0 : (size_t)hs;
            t->row_stride = rs < 0 ? 0 : (size_t)rs;
            break;
        }
        case L_FUSED: { /* column blocks in units; an fp32 block starts 4-byte aligned */
            size_t eu = v->es / UNIT;
            v->group = (int)(v->p1 & 1);
            if (!gseen[v->group]) {
                gpad[v->group] = v->p2 % 3; /* the group's row padding */
                /* a huge batch is never laid out (the view is absurd): its group is not
                 * interleaved by it, so the other members' strides stay small */
                gbat[v->group] = tnb(t) <= FZ_HUGE_BATCH ? tnb(t) : 1;
                gbm[v->group] = v->bm;
            }
            gseen[v->group] = 1;
            if (eu == 2) g32[v->group] = 1;
            gw[v->group] = (gw[v->group] + eu - 1) / eu * eu;
            v->gcol = gw[v->group];
            gw[v->group] += h * c * eu;
            if (r > grows[v->group]) grows[v->group] = r;
            t->head_stride = c;
            break;
        }
        case L_ABSURD: {
            static const size_t big[] = {(size_t)1 << 62, SIZE_MAX, SIZE_MAX / 2 + 1,
                                         SIZE_MAX / 4 + 1, ((size_t)1 << 32) + 1};
            size_t B = big[v->p2 % 5];
            t->head_stride = r * c;
            t->row_stride = c;
            switch (v->p1 >> 2 & 7) {
            case 0: t->heads = B; t->head_stride = (size_t)1 << 40; break;
            case 1: t->rows = B; t->row_stride = 8; t->head_stride = 0; t->heads = 1; break;
            case 2: t->cols = B; t->rows = 1; t->heads = 1; break;
            case 3: t->row_stride = B; if (t->rows < 2) t->rows = 2; break;
            case 4: t->head_stride = SIZE_MAX - (v->p2 & 15); t->heads = 2; break;
            case 5: t->cols = SIZE_MAX / 4 + 1 + (v->p2 & 7); t->heads = t->rows = 1; break;
            case 6: t->rows = B; t->heads = B; t->row_stride = c; t->head_stride = B; break;
            default: break; /* the data pointer near the top of the address space */
            }
            break;
        }
        case L_ZERO:
            t->head_stride = r * c;
            t->row_stride = c;
            if (v->p2 % 3 == 0) t->heads = 0;
            else if (v->p2 % 3 == 1) t->rows = 0;
            else t->cols = 0;
            break;
        default: /* packed, offset, alias, NULL */
            t->head_stride = r * c;
            t->row_stride = c;
            if (v->layout == L_ALIAS && (v->p3 & 2)) { t->head_stride = c; t->row_stride = h * c; }
            break;
        }
    }
    for (i = 0; i < g_nv; ++i) {
        fz_view *v = &g_v[i];
        favor_tensor *t = &v->t;
        if (v->buf >= 0) continue;
        if (v->layout == L_FUSED) { /* one row stride (in bytes) for the group; rarely a member's own */
            size_t base = gw[v->group] + (g32[v->group] ? gw[v->group] % 2 : 0); /* units */
            size_t rowu = base + 2 * ((v->p3 & 8) ? v->p2 % 3 : gpad[v->group]), rsu = rowu;
            unsigned gm = gbm[v->group] & 7;
            int inter = g_bt_ext && gm == 4 && gbat[v->group] > 1; /* [rows][batch][q|k|v|out] */
            if (inter) rsu = gbat[v->group] * rowu;
            t->row_stride = rsu * UNIT / v->es;
            if (g_bt_ext && (v->bm & 7) < 5) { /* the group's batch stride (units: even with fp32 members) */
                size_t bsu = inter ? rowu : grows[v->group] * rsu + (gm == 3 ? 2 * (1 + (gbm[v->group] >> 3) % 5) : 0);
                t->batch_stride = bsu * UNIT / v->es;
                v->bgroup = 1;
            } else if (g_bt_ext) {
                set_batch_stride(v);
            }
        } else if (g_bt_ext) {
            set_batch_stride(v);
        }
        v->zero = !t->heads || !t->rows || !t->cols;
        v->span = v->zero ? 0 : view_span(t, v->es, &ovf);
        v->absurd = v->layout == L_ABSURD;
        v->topaddr = v->absurd && (v->p1 >> 2 & 7) == 7;
        if (v->absurd && !v->zero && !ovf && (v->p1 >> 2 & 7) != 7) { /* make sure */
            t->rows = SIZE_MAX;
            if (t->row_stride == 0) t->row_stride = 1;
            v->span = view_span(t, v->es, &ovf);
        }
        if (!v->absurd && !v->zero && t->batch > 1 &&
            (ovf || t->batch > FZ_HUGE_BATCH || v->span > (size_t)1 << 22)) {
            /* a huge batch or batch stride: the span overflows size_t, or it does
             * not, and the data pointer goes near the top of the address space
             * (the library must see that data + span wraps, unless the layout
             * breaks its rule first) */
            v->absurd = 1;
            v->topaddr = !ovf;
            ctx("[%s: batch %zu x stride %zu: %s] ", v->name, t->batch, t->batch_stride,
                ovf ? "overflows size_t" : "past the address space");
        }
        v->nulldata = v->layout == L_NULLDATA;
        v->mem_ok = v->present && !v->nulldata && !v->zero && !v->absurd;
        if (v->mem_ok && v->span > (size_t)1 << 22) FZ_FAIL("harness: view %s too large", v->name);
        v->nested_ok = v->mem_ok && nested_rule(t);
        v->self_overlap = v->mem_ok && rows_overlap(t);
    }
    /* buffers */
    for (i = 0; i < g_nv; ++i) {
        fz_view *v = &g_v[i];
        size_t eu, units;
        if (v->buf >= 0 || !v->mem_ok) continue;
        eu = v->es / UNIT;
        units = view_units(v);
        if (v->layout == L_FUSED) {
            size_t rs = v->t.row_stride * eu, end; /* units */
            if (gbuf[v->group] < 0) gbuf[v->group] = new_buf(0);
            v->buf = gbuf[v->group];
            v->off = v->gcol;
            end = (grows[v->group] ? grows[v->group] - 1 : 0) * rs + gw[v->group];
            if (v->t.batch > 1) end += (v->t.batch - 1) * v->t.batch_stride * eu; /* the last batch element's rows */
            if (end < v->off + units) end = v->off + units;
            if (g_b[v->buf].len < end) g_b[v->buf].len = end;
            continue;
        }
        if (v->layout == L_ALIAS) { /* onto an earlier view with memory, or W, or the state */
            int j, cand[FZ_MAXV + 2], nc = 0;
            for (j = 0; j < g_nv; ++j)
                if (j != i && g_v[j].buf >= 0 && g_v[j].mem_ok) cand[nc++] = j;
            if (nc) {
                int tgt = cand[v->p1 % nc];
                size_t delta = (v->p2 % 48) * ((v->p3 & 1) ? 1 : v->t.cols) * eu;
                v->alias_of = tgt;
                v->buf = g_v[tgt].buf;
                v->off = g_v[tgt].off + delta;
                v->off += v->off % eu; /* an fp32 view starts 4-byte aligned */
                if (g_b[v->buf].len < v->off + units) {
                    if (g_b[v->buf].mem) { /* a fixed buffer (W, state): place at its start */
                        if (g_b[v->buf].len >= units) v->off = 0;
                        else { v->alias_of = -1; v->buf = -1; }
                    } else {
                        g_b[v->buf].len = v->off + units;
                    }
                }
                if (v->buf >= 0) continue;
            }
        }
        if (v->layout == L_OFFSET) { /* 16-bit: any 2-byte offset */
            v->buf = new_buf(units + (v->p2 % 8 + v->p3 % 5) * eu);
            v->off = v->p2 % 8 * eu;
            continue;
        }
        v->buf = new_buf(units);
        v->off = 0;
    }
    for (i = 0; i < g_nb; ++i)
        if (!g_b[i].mem) alloc_buf(i);
    for (i = 0; i < g_nv; ++i) {
        fz_view *v = &g_v[i];
        if (v->mem_ok) {
            v->t.data = g_b[v->buf].mem + v->off * UNIT;
        } else if (v->nulldata || !v->present) {
            v->t.data = NULL;
        } else if (v->topaddr && !v->zero && v->span) {
            /* data + span bytes wraps past the end of the address space */
            size_t bytes = v->span * v->es;
            v->t.data = (void *)(uintptr_t)(UINTPTR_MAX - bytes + 1 + v->es * (v->p2 % v->span));
        } else {
            v->t.data = g_dummy_store; /* never to be touched */
        }
    }
}

static float gen_value(fz_rd *r, fz_view *v, unsigned mode)
{
    switch (mode & 7) {
    case 1:
        if (rd_has(r, 1)) return (float)(int8_t)rd8(r) / 32.0f;
        break;
    case 2:
        if (rd_has(r, 2)) {
            int16_t s = (int16_t)(rd8(r) | rd8(r) << 8);
            return (float)s * (1e4f / 32768.0f);
        }
        break;
    case 3:
        if (rd_has(r, 4)) return bits2f(rd32(r));
        break;
    case 4:
        if (rd_has(r, 1)) return k_specials[rd8(r) % N_SPECIALS];
        break;
    case 5:
        if ((prng(r) & 15) == 0 && rd_has(r, 1)) return k_specials[rd8(r) % N_SPECIALS];
        break;
    case 6:
        return k_specials[v->vseed % N_SPECIALS];
    case 7:
        return prng_unif(r, 1e4f);
    default:
        break;
    }
    return prng_unif(r, (mode & 8) ? 20.0f : 2.0f);
}

/* Outputs get the output canary, inputs a payload. */
static void set_promises(void);
static void fill_views(fz_rd *r)
{
    int i, pass;
    for (pass = 0; pass < 2; ++pass)
        for (i = 0; i < g_nv; ++i) {
            fz_view *v = &g_v[i];
            size_t h, rr, c;
            int is_out = v->role == R_OUT;
            if (!v->mem_ok || v->buf == g_fbuf || v->buf == g_stbuf || is_out != (pass == 0))
                continue;
            if (v->role == R_STATE || v->role == R_WS) continue;
            v->inprom = 1;
            v->nice = 1;
            r->rng ^= mix64(v->vseed);
            for (h = 0; h < vheads(v); ++h)
                for (rr = 0; rr < v->t.rows; ++rr)
                    for (c = 0; c < v->t.cols; ++c) {
                        if (is_out) {
                            put_canary(v, EAT(v, h, rr, c));
                        } else if (is16(v) && (v->vmode & 7) == 3 && rd_has(r, 2)) {
                            uint16_t u = (uint16_t)(rd8(r) | rd8(r) << 8); /* raw 16-bit patterns */
                            memcpy(EAT(v, h, rr, c), &u, 2);
                        } else {
                            VSET(v, h, rr, c, gen_value(r, v, v->vmode));
                        }
                    }
        }
    set_promises();
}

/* promise flags of every input view, from what its elements hold now: after
   everything is written, since aliasing views may share elements, and again
   after any call writes into a buffer that other views read (a backward's dout
   may be an f16 view of the bytes the forward writes as out) */
static void set_promises(void)
{
    int i;
    for (i = 0; i < g_nv; ++i) {
        fz_view *v = &g_v[i];
        size_t h, rr, c;
        if (!v->mem_ok) continue;
        v->inprom = 1;
        v->nice = 1;
        if (v->role == R_OUT || v->role == R_STATE || v->role == R_WS) continue;
        for (h = 0; h < vheads(v); ++h)
            for (rr = 0; rr < v->t.rows; ++rr)
                for (c = 0; c < v->t.cols; ++c) {
                    float x = VGET(v, h, rr, c);
                    if ((v->kind == K_MASK || v->kind == K_SINKS) && x == -INFINITY) continue;
                    if (!(fabsf(x) <= 1e4f)) v->inprom = 0;
                    if (!(fabsf(x) <= 4.0f)) v->nice = 0;
                }
    }
}

/* ------------------------------------------------------------------------ */
/* Overlap analysis                                                         */
/* ------------------------------------------------------------------------ */
static int exclusive_role(int role) { return role == R_OUT || role == R_STATE || role == R_WS || role == R_LSE_IN; }
static int harmful_role(int role) { return role == R_OUT || role == R_STATE || role == R_WS; }

static void mark_elems(const fz_view *v, int *owner, int id, int *hit, int check_only)
{
    size_t h, r, c, u;
    /* alibi and sinks: only dsinks is checked against them (FINDING-8) */
    int only_dsinks = v->kind == K_ALIBI || v->kind == K_SINKS;
    for (h = 0; h < vheads(v); ++h)
        for (r = 0; r < v->t.rows; ++r)
            for (c = 0; c < v->t.cols; ++c)
                for (u = 0; u < v->es / UNIT; ++u) {
                    size_t at = elem_unit(v, h, r, c) + u;
                    if (owner[at] >= 0 && owner[at] != id && (!only_dsinks || g_v[owner[at]].kind == K_DSINKS))
                        *hit = 1;
                    if (!check_only) owner[at] = id;
                }
}

/* 1 when an output (harmful role) shares a byte with another view of the call
 * (an element, when they have the same type) */
static int harmful_overlap(void)
{
    int b, i, j, hit = 0;
    for (b = 0; b < g_nb; ++b) {
        fz_buf *B = &g_b[b];
        size_t k;
        if (B->is_ws) continue;
        for (k = 0; k <= B->len; ++k) B->owner[k] = -1;
        for (i = 0; i < g_nv; ++i) /* outputs among themselves */
            if (g_v[i].used && g_v[i].mem_ok && g_v[i].buf == b && harmful_role(g_v[i].role))
                mark_elems(&g_v[i], B->owner, i, &hit, 0);
        for (j = 0; j < g_nv; ++j)
            if (g_v[j].used && g_v[j].mem_ok && g_v[j].buf == b && !harmful_role(g_v[j].role))
                mark_elems(&g_v[j], B->owner, -2 - j, &hit, 1);
    }
    return hit;
}

/* 1 when the byte span of an exclusive view meets the span of another view */
static int span_overlap(const fz_view *a, const fz_view *b)
{
    uintptr_t alo = (uintptr_t)a->t.data, ahi = alo + a->span * a->es;
    uintptr_t blo = (uintptr_t)b->t.data, bhi = blo + b->span * b->es;
    return alo < bhi && blo < ahi;
}
/* two members of one fused group with the same row stride in bytes: the column
 * blocks of one [rows][q|k|v|out] buffer, which the manual says are accepted */
static int column_blocks(const fz_view *a, const fz_view *b)
{
    return a->layout == L_FUSED && b->layout == L_FUSED && a->group == b->group &&
           a->t.row_stride * a->es == b->t.row_stride * b->es && tnb(&a->t) == tnb(&b->t) &&
           (tnb(&a->t) == 1 || (a->bgroup && b->bgroup)); /* batched: the group's batch stride */
}
static int exclusive_span_overlap(void)
{
    int i, j;
    for (i = 0; i < g_nv; ++i) {
        if (!g_v[i].used || !g_v[i].mem_ok || !exclusive_role(g_v[i].role)) continue;
        for (j = 0; j < g_nv; ++j)
            if (j != i && g_v[j].used && g_v[j].mem_ok && span_overlap(&g_v[i], &g_v[j]) &&
                !column_blocks(&g_v[i], &g_v[j]))
                return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Snapshots and checks                                                     */
/* ------------------------------------------------------------------------ */
static void snapshot_all(void)
{
    int b;
    for (b = 0; b < g_nb; ++b) memcpy(g_b[b].snap, g_b[b].mem, buf_bytes(&g_b[b]));
}

static void restore_all(void)
{
    int b;
    for (b = 0; b < g_nb; ++b) memcpy(g_b[b].mem, g_b[b].snap, buf_bytes(&g_b[b]));
}

/* which units may change when the call succeeds */
static void mark_writable(void)
{
    int b, i;
    for (b = 0; b < g_nb; ++b) memset(g_b[b].mayw, g_b[b].is_ws ? 1 : 0, g_b[b].len + 1);
    for (i = 0; i < g_nv; ++i) {
        fz_view *v = &g_v[i];
        size_t h, r, c;
        if (!v->used || !v->mem_ok || !harmful_role(v->role)) continue;
        for (h = 0; h < vheads(v); ++h)
            for (r = 0; r < v->t.rows; ++r)
                for (c = 0; c < v->t.cols; ++c) {
                    size_t at = elem_unit(v, h, r, c);
                    g_b[v->buf].mayw[at] = 1;
                    if (!is16(v)) g_b[v->buf].mayw[at + 1] = 1;
                }
    }
}

static void check_unchanged(int ok, const char *what)
{
    int b;
    for (b = 0; b < g_nb; ++b) {
        fz_buf *B = &g_b[b];
        size_t k;
        if (B->is_ws) {
            if (!ok && memcmp(B->mem, B->snap, B->len))
                FZ_FAIL("%s: failed call wrote its workspace", what);
            continue;
        }
        for (k = 0; k < B->len; ++k) {
            if (ok && B->mayw[k]) continue;
            if (memcmp(B->mem + UNIT * k, B->snap + UNIT * k, UNIT)) {
                const char *owner = "a gap";
                int i;
                for (i = 0; i < g_nv; ++i)
                    if (g_v[i].mem_ok && g_v[i].buf == b && k >= g_v[i].off &&
                        k < g_v[i].off + view_units(&g_v[i])) {
                        owner = g_v[i].name;
                        break;
                    }
                FZ_FAIL("%s: %s call changed bytes %zu..%zu of buffer %d (in the span of %s)", what,
                        ok ? "successful" : "failed", UNIT * k, UNIT * k + 1, b, owner);
            }
        }
    }
}

static int all_inprom(void)
{
    int i;
    for (i = 0; i < g_nv; ++i)
        if (g_v[i].used && g_v[i].mem_ok && (g_v[i].role == R_IN || g_v[i].role == R_LSE_IN) &&
            !g_v[i].inprom)
            return 0;
    return 1;
}
/* the inputs are nice (|x| <= 4); log-gates and decays only scale the weights
 * of a convex combination, so they do not count */
static int all_nice(void)
{
    int i;
    for (i = 0; i < g_nv; ++i)
        if (g_v[i].used && g_v[i].mem_ok && g_v[i].role == R_IN && !g_v[i].nice && g_v[i].kind != K_GATES &&
            g_v[i].kind != K_DECAY)
            return 0;
    return 1;
}

/* every output element written (no canary left) and, when asked, finite */
static void check_outputs(const char *what, int want_finite)
{
    int i;
    for (i = 0; i < g_nv; ++i) {
        fz_view *v = &g_v[i];
        size_t h, r, c;
        if (!v->used || !v->mem_ok || v->role != R_OUT) continue;
        for (h = 0; h < vheads(v); ++h)
            for (r = 0; r < v->t.rows; ++r)
                for (c = 0; c < v->t.cols; ++c) {
                    float x = VGET(v, h, r, c);
                    if (is_canary(v, EAT(v, h, r, c)))
                        FZ_FAIL("%s: OK but %s[%zu][%zu][%zu] was never written", what, v->name, h, r, c);
                    /* fp16 overflows to inf above 65504: the fp32 twin (I12) decides */
                    if (want_finite && !isfinite(x) && !(strcmp(v->name, "lse") == 0 && x == -INFINITY) &&
                        !(v->t.dtype == FAVOR_F16 && isinf(x)))
                        FZ_FAIL("%s: finite inputs (|x| <= 1e4) but %s[%zu][%zu][%zu] = %g (%s)", what,
                                v->name, h, r, c, (double)x, dtype_name(v->t.dtype));
                }
    }
}

/* keep the outputs of the first call for the repeat */
static unsigned char *g_first[FZ_MAXB];
static void keep_first(void)
{
    int b;
    for (b = 0; b < g_nb; ++b) {
        size_t bytes = g_b[b].is_ws ? 0 : buf_bytes(&g_b[b]);
        g_first[b] = (unsigned char *)fz_alloc(bytes);
        memcpy(g_first[b], g_b[b].mem, bytes);
    }
}
static void compare_first(const char *what)
{
    int b;
    for (b = 0; b < g_nb; ++b) {
        size_t k;
        if (g_b[b].is_ws) continue;
        for (k = 0; k < g_b[b].len; ++k)
            if (memcmp(g_first[b] + UNIT * k, g_b[b].mem + UNIT * k, UNIT)) {
                uint16_t x, y;
                memcpy(&x, g_first[b] + UNIT * k, UNIT);
                memcpy(&y, g_b[b].mem + UNIT * k, UNIT);
                FZ_FAIL("%s: the repeated call (other workspace, other output garbage) differs "
                        "at bytes %zu..%zu of buffer %d: %#06x vs %#06x", what, UNIT * k, UNIT * k + 1, b,
                        (unsigned)x, (unsigned)y);
            }
    }
}
/* outputs pre-filled with other garbage for the repeat */
static void garble_outputs(unsigned pat)
{
    int i;
    for (i = 0; i < g_nv; ++i) {
        fz_view *v = &g_v[i];
        size_t h, r;
        if (!v->used || !v->mem_ok || v->role != R_OUT) continue;
        for (h = 0; h < vheads(v); ++h)
            for (r = 0; r < v->t.rows; ++r) fill_garbage(EAT(v, h, r, 0), v->t.cols * v->es, pat + (unsigned)(h * 131 + r));
    }
}

/* ------------------------------------------------------------------------ */
/* Features, options, workspace                                             */
/* ------------------------------------------------------------------------ */
typedef struct {
    int kernel;
    size_t d, m;
    unsigned flags;
    unsigned seed;
    unsigned mut, mutp;
    int count_d;       /* a map without W initialized with count d (else 0) */
} fz_fcfg;

static int feat_valid(const favor_features *f)
{
    if (!((int)f->kernel >= 0 && (int)f->kernel <= FAVOR_IDENTITY)) return 0;
    if (f->flags & ~3u) return 0;
    if (!f->dim || !f->count) return 0;
    if (fz_fixed((int)f->kernel)) {
        if (f->count != f->dim) return 0;
        if (f->kernel == FAVOR_POLY2 && f->dim > 4096) return 0;
    } else if (!f->w || !f->wt) {
        return 0;
    }
    return f->scale > 0.0f && f->scale <= FLT_MAX;
}
static size_t feat_width(const favor_features *f)
{
    switch ((int)f->kernel) {
    case FAVOR_ELU1: case FAVOR_IDENTITY: return f->dim;
    case FAVOR_POSITIVE: case FAVOR_RELU: return f->count;
    case FAVOR_HYPERBOLIC: case FAVOR_TRIG: return 2 * f->count;
    case FAVOR_POLY2: return f->dim <= 4096 ? 1 + f->dim + f->dim * (f->dim + 1) / 2 : 0;
    default: return 0;
    }
}

static void dec_fcfg(fz_rd *r, fz_fcfg *c, size_t d)
{
    unsigned b = rd8(r);
    c->kernel = dec_kernel(b);
    b = rd8(r);
    c->m = b == 255 ? 0 : 1 + b % 40;
    b = rd8(r);
    c->flags = b < 252 ? (b & 3u) : (b == 252 ? 4u : b == 253 ? 0x80000000u : b == 254 ? 7u : 0x10u);
    c->seed = rd8(r);
    c->mut = rd8(r);
    c->mutp = rd8(r);
    c->d = d;
    c->count_d = 0;
    if (g_gt_ext) { /* one more byte: FAVOR_IDENTITY (bits 0-1 = 1), count d (bit 2) */
        b = rd8(r);
        if ((b & 3u) == 1u) c->kernel = FAVOR_IDENTITY;
        c->count_d = (b >> 2) & 1;
    }
}

/* The state's count of pending tokens, c[heads], as favor_linear_extend and the
 * steps check it: a whole number in [0, 16). A struct whose heads was lowered
 * (state mutation 5) reads a head's log-scale there (FINDING-14). */
static int pend_count_ok(const favor_state *st)
{
    float p = st->c[st->heads];
    return p >= 0.0f && p < 16.0f && p == (float)(int)p;
}

/* favor_features_init into exact storage, then (maybe) a mutation of the struct.
 * Returns 0 when no features could be made (init rejected the configuration: the
 * calls are then made with f = NULL sometimes, else skipped). */
static int make_features(const fz_fcfg *c)
{
    favor_status s;
    size_t fl;
    int kernel = c->kernel;
    g_have_f = 0;
    g_fbuf = -1;
    if (kernel < 0 || kernel > FAVOR_IDENTITY || (c->flags & ~3u) || c->d == 0 ||
        (!fz_fixed(kernel) && c->m == 0))
        kernel = FAVOR_POSITIVE; /* make something valid; mutate below */
    fl = favor_features_floats((favor_kernel)kernel, c->d ? c->d : 1, c->m ? c->m : 1);
    if (!fz_fixed(kernel)) {
        g_fbuf = new_buf(fl * 2);
        alloc_buf(g_fbuf);
    }
    s = favor_features_init(&g_f, (favor_kernel)kernel, c->d ? c->d : 1,
                            fz_fixed(kernel) ? (c->count_d ? (c->d ? c->d : 1) : 0) : (c->m ? c->m : 1),
                            c->flags & 3u, c->seed, g_fbuf >= 0 ? (float *)(void *)g_b[g_fbuf].mem : NULL);
    if (s != FAVOR_OK) FZ_FAIL("favor_features_init rejected a valid configuration: %s", favor_status_string(s));
    g_have_f = 1;
    /* the requested invalid parts, and other mutations */
    if (c->kernel != kernel) g_f.kernel = (favor_kernel)c->kernel;
    if (c->flags & ~3u) g_f.flags = c->flags;
    if (c->d == 0) g_f.dim = 0;
    switch (c->mut % 16) {
    case 1: g_f.kernel = (favor_kernel)dec_kernel(250 + c->mutp % 6); break;
    case 2: g_f.flags |= 1u << (2 + c->mutp % 30); break;
    case 3: g_f.scale = dec_scale(192 + c->mutp % 20, c->mutp); break;
    case 4: g_f.scale = 0.01f + (float)c->mutp / 32.0f; break; /* a legal changed scale */
    case 5: if (!fz_fixed((int)g_f.kernel)) g_f.w = NULL; else g_f.count += 1; break;
    case 6: if (!fz_fixed((int)g_f.kernel)) g_f.wt = NULL; break;
    case 7: /* another random-feature kernel over the same W */
        if (!fz_fixed((int)g_f.kernel)) g_f.kernel = (favor_kernel)(1 + c->mutp % 4);
        break;
    case 8: /* fewer rows of W: still inside the storage */
        if (!fz_fixed((int)g_f.kernel) && g_f.count > 1) g_f.count = 1 + c->mutp % g_f.count;
        break;
    case 9: /* a smaller d: W stays inside the storage; the tensors no longer match */
        if (g_f.dim > 1) g_f.dim -= 1;
        break;
    case 10: g_f.count = 0; break;
    default: break;
    }
    ctx("features{kernel=%d d=%zu m=%zu flags=%#x scale=%g w=%p} ", (int)g_f.kernel, g_f.dim,
        g_f.count, g_f.flags, (double)g_f.scale, (void *)g_f.w);
    return 1;
}

/* W and W^T as views (protected inputs) */
static void add_w_views(void)
{
    size_t md;
    if (!g_have_f || g_fbuf < 0 || !g_f.w) return;
    md = g_f.count * g_f.dim;
    if (2 * md > g_b[g_fbuf].len || !g_f.wt) return;
    add_range_view("W", R_IN, g_fbuf, 0, md);
    if (g_f.wt && 2 * ((size_t)(g_f.wt - (float *)(void *)g_b[g_fbuf].mem) + md) <= g_b[g_fbuf].len)
        add_range_view("Wt", R_IN, g_fbuf, 2 * (size_t)(g_f.wt - (float *)(void *)g_b[g_fbuf].mem), md);
}

typedef struct {
    favor_options o;
    int use_opts;
    int opt_ok;
    int ws_mode;
    unsigned ws_p;
    size_t ws_query;
    int ws_exact, ws_small, ws_alias;
    int ws_huge; /* the query passed FZ_WS_CAP: no workspace given, the call may fail */
    int ws_buf;
    int malloc_fail;
    int lse_mode;
    unsigned lse_p;
    /* score variants and packed sequences (bit 5 of the first byte) */
    unsigned sv_on;          /* 1 window, 2 softcap, 4 alibi, 8 sinks, 16 dsinks, 32 mask, 64 seqs */
    unsigned sv_b[10];       /* the variant bytes (see dec_sv) */
    fz_view *mask, *alibi, *sinks, *dsinks;
    size_t *seq_q, *seq_k;   /* exact-size copies (offsets), or NULL */
    int dsinks_top;          /* dsinks near the top of the address space */
    /* gated linear attention (bit 6 of the first byte; see dec_gt) */
    unsigned gt_on;          /* 1 FAVOR_NO_NORM, 2 decay, 4 gates, 8 dgates, 16 FAVOR_CAUSAL */
    unsigned gt_b[4];        /* the gated bytes: on, decay mode, gates mode, dgates mode */
    int gk;                  /* which call (GK_*) the gated options go to */
    fz_view *gates, *dgates, *decay;
} fz_ocfg;
/* the calls that see the gated options: softmax (refuses them), linear forward
 * and backward, favor_linear_extend, favor_linear_step_ex, favor_linear_step
 * (no options) */
enum { GK_SOFTMAX = 0, GK_LIN, GK_LINB, GK_EXT, GK_STEPX, GK_STEP };

/* Score variants: bit 5 of the first byte (ignored before variants existed)
 * makes dec_ocfg read 10 more bytes after its 8: which variants are on (bit 0
 * FAVOR_WINDOW, 1 softcap, 2 alibi, 3 sinks, 4 dsinks, 5 mask, 6 seqs), the
 * window's sides (set whether the flag is or not), the softcap, the modes of
 * alibi, sinks, dsinks, the mask and the sequences, and a parameter of the
 * sequences. Without the bit nothing is read, so older inputs decode as before. */
static int g_sv_ext;
static ptrdiff_t dec_win(unsigned b)
{
    static const ptrdiff_t tab[] = {PTRDIFF_MAX, PTRDIFF_MIN, PTRDIFF_MAX / 2, (ptrdiff_t)1 << 40,
                                    79, 80, 81, 100};
    if (b < 192) return (ptrdiff_t)(b % 48);
    if (b < 224) return (ptrdiff_t)(60 + b % 8); /* around the 64-row blocks */
    if (b < 248) return -(ptrdiff_t)(1 + b % 3); /* negative: unbounded */
    return tab[b - 248];
}
static float dec_cap(unsigned b)
{
    static const float tab[] = {NAN, -1.0f, INFINITY, -INFINITY, -0.0f, FLT_MIN, 1e-45f, 1e-40f,
                                FLT_MAX, 1e-20f, 1e30f, 0.0f, -FLT_MIN, 3e38f, 1e-3f, 65504.0f};
    if (b < 160) return 0.25f + (float)b * 0.3f; /* 0.25 .. 48 */
    if (b < 240) return (float)(1 + b % 50) * 0.5f;
    return tab[b - 240];
}

static void dec_ocfg(fz_rd *r, fz_ocfg *c)
{
    unsigned b;
    memset(c, 0, sizeof *c);
    c->o = favor_default_options();
    b = rd8(r);
    c->use_opts = b != 0xff;
    c->o.flags = dec_oflags(b);
    b = rd8(r);
    c->o.scale = dec_scale(b, rd8(r));
    c->o.threads = dec_threads(rd8(r));
    c->ws_mode = (int)(rd8(r) % 8);
    c->ws_p = rd8(r);
    c->lse_mode = (int)(rd8(r) % 4);
    c->lse_p = rd8(r);
    if (g_sv_ext) {
        int i;
        for (i = 0; i < 10; ++i) c->sv_b[i] = rd8(r);
        c->sv_on = c->sv_b[0] & 0x7fu;
        c->o.window_left = dec_win(c->sv_b[1]);
        c->o.window_right = dec_win(c->sv_b[2]);
        if (c->sv_on & 1u) c->o.flags |= FAVOR_WINDOW;
        if (c->sv_on & 2u) c->o.softcap = dec_cap(c->sv_b[3]);
    }
    if (g_gt_ext) { /* after the variants' bytes: see dec_gt */
        int i;
        for (i = 0; i < 4; ++i) c->gt_b[i] = rd8(r);
        c->gt_on = c->gt_b[0] & 0x1fu;
        if (c->gt_on & 1u) c->o.flags |= FAVOR_NO_NORM;
        if (c->gt_on & 16u) c->o.flags |= FAVOR_CAUSAL;
    }
    /* FAVOR_CAUSAL, FAVOR_WINDOW, FAVOR_NO_NORM (which softmax refuses: verdict_gt) */
    c->opt_ok = !c->use_opts || (!(c->o.flags & ~7u) && c->o.scale >= 0.0f &&
                                  c->o.scale <= FLT_MAX && c->o.threads >= 0);
    c->ws_buf = -1;
    ctx("opts{%s flags=%#x scale=%g threads=%d ws_mode=%d lse_mode=%d} ", c->use_opts ? "" : "NULL",
        c->o.flags, (double)c->o.scale, c->o.threads, c->ws_mode, c->lse_mode);
    if (g_sv_ext)
        ctx("variants{on=%#x window=%td,%td softcap=%g modes alibi=%u sinks=%u dsinks=%u mask=%u seqs=%u/%u} ",
            c->sv_on, c->o.window_left, c->o.window_right, (double)c->o.softcap, c->sv_b[4], c->sv_b[5],
            c->sv_b[6], c->sv_b[7], c->sv_b[8], c->sv_b[9]);
    if (g_gt_ext)
        ctx("gated{%s%s%s%s%s modes decay=%u gates=%u dgates=%u} ", c->gt_on & 1u ? " NO_NORM" : "",
            c->gt_on & 2u ? " decay" : "", c->gt_on & 4u ? " gates" : "", c->gt_on & 8u ? " dgates" : "",
            c->gt_on & 16u ? " +CAUSAL" : "", c->gt_b[1], c->gt_b[2], c->gt_b[3]);
}

/* The workspace of a call from its query: modes 0 NULL (allocate), 1 exact,
 * 2 smaller, 3 larger, 4 a raw size, 5 aliased onto a tensor, 6 NULL with
 * FAVOR_MALLOC failing, 7 a buffer of size 0. Any alignment. */
static void setup_ws(fz_ocfg *c, size_t query)
{
    size_t bytes = 0, align = c->ws_p % 64;
    c->ws_query = query;
    c->o.workspace = NULL;
    c->o.workspace_size = 0;
    c->malloc_fail = 0;
    c->ws_exact = c->ws_small = c->ws_alias = c->ws_huge = 0;
    c->ws_buf = -1;
    if (query > FZ_WS_CAP - 4096) { /* see FZ_WS_CAP */
        c->ws_huge = 1;
        ctx("[workspace query %zu: above the harness's cap, none given] ", query);
        return;
    }
    if (!c->use_opts && c->ws_mode != 6) return; /* opts NULL: the call allocates */
    switch (c->ws_mode) {
    case 0: return;
    case 6: c->malloc_fail = 1; return;
    case 1: bytes = query; c->ws_exact = 1; break;
    case 2:
        if (!query) return;
        bytes = query - 1 - (c->ws_p % 5 ? (size_t)c->ws_p % (query < 200 ? query : 200) : 0);
        if (bytes >= query) bytes = 0;
        c->ws_small = 1;
        break;
    case 3: bytes = query + 1 + c->ws_p * 3; break;
    case 4: bytes = (size_t)c->ws_p * 37; c->ws_small = bytes < query; break;
    case 5: {
        int i, cand[FZ_MAXV], nc = 0;
        for (i = 0; i < g_nv; ++i)
            if (g_v[i].used && g_v[i].mem_ok && g_v[i].buf >= 0 &&
                g_v[i].kind != K_ALIBI && g_v[i].kind != K_SINKS) /* FINDING-8: would be written */
                cand[nc++] = i;
        if (!nc || !query) { bytes = query; c->ws_exact = 1; break; }
        i = cand[c->ws_p % nc];
        c->o.workspace = g_v[i].t.data;
        c->o.workspace_size = query;
        c->ws_alias = 1;
        ctx("[ws aliased onto %s] ", g_v[i].name);
        return;
    }
    case 7: bytes = 0; c->ws_small = query > 0; break;
    }
    c->ws_buf = new_buf(bytes + align);
    g_b[c->ws_buf].is_ws = 1;
    alloc_buf(c->ws_buf);
    fill_garbage(g_b[c->ws_buf].mem, bytes + align, 77u + c->ws_p);
    c->o.workspace = g_b[c->ws_buf].mem + align;
    c->o.workspace_size = bytes;
}

/* the effective scale is within the promise: default, or finite in (0, 1e4] */
static int scale_in_promise(float s) { return s == 0.0f || (s > 0.0f && s <= 1e4f); }

/* ------------------------------------------------------------------------ */
/* Statistics (FAVOR_FUZZ_VERBOSE=1)                                        */
/* ------------------------------------------------------------------------ */
static void report(const char *what, favor_status s, int must_fail, int should_ok, int inprom)
{
    if (verbose())
        fprintf(stderr, "favor_fuzz: %-28s -> %-18s must_fail=%d should_ok=%d finite_promise=%d | %s\n",
                what, s == FAVOR_OK ? "FAVOR_OK" : favor_status_string(s), must_fail, should_ok, inprom,
                g_ctx);
}

static void dump_views(const char *what)
{
    int i;
    if (!verbose()) return;
    fprintf(stderr, "favor_fuzz: calling %s | %s\n", what, g_ctx);
    for (i = 0; i < g_nv; ++i) {
        const fz_view *v = &g_v[i];
        fprintf(stderr, "    %-10s %s layout=%d %s data=%p %s batch=%zu bs=%zu heads=%zu rows=%zu cols=%zu hs=%zu "
                "rs=%zu buf=%d off=%zu span=%zu%s%s%s%s inprom=%d\n", v->name,
                v->role == R_OUT ? "OUT" : v->role == R_IN ? "IN " : v->role == R_STATE ? "ST " : "oth",
                v->layout, v->present ? "" : "(NULL tensor)", (void *)v->t.data, dtype_name(v->t.dtype),
                v->t.batch, v->t.batch_stride, v->t.heads, v->t.rows, v->t.cols, v->t.head_stride,
                v->t.row_stride, v->buf,
                v->off * UNIT / v->es, v->span,
                v->absurd ? " absurd" : "", v->zero ? " zero" : "", v->self_overlap ? " self-overlap" : "",
                v->used ? "" : " unused", v->inprom);
    }
}

/* run `call` (a macro-ish closure through a function pointer and a struct) */
typedef favor_status (*fz_call_fn)(void *);

/* The common verdict of an attention-style call. */
typedef struct {
    int must_fail, should_ok;
    const char *why_fail;
    int bad_dtype, want_arg; /* I11: a dtype outside the enum; nothing may fail before it */
    const char *bad_name;
} fz_verdict;

static void verdict_views(fz_verdict *vd)
{
    int i;
    for (i = 0; i < g_nv; ++i) {
        fz_view *v = &g_v[i];
        if (!v->used || v->role == R_WS || v->role == R_STATE) continue;
        if (!v->present) { vd->must_fail = 1; vd->why_fail = "NULL tensor"; }
        else if (v->nulldata) { vd->must_fail = 1; vd->why_fail = "NULL data"; }
        else if (v->zero) { vd->must_fail = 1; vd->why_fail = "zero size"; }
        else if (v->absurd) { vd->must_fail = 1; vd->why_fail = "size overflow"; }
        else if (v->self_overlap) { vd->must_fail = 1; vd->why_fail = "rows overlap"; }
        if (!v->nested_ok) vd->should_ok = 0;
    }
    if (!vd->must_fail && harmful_overlap()) { vd->must_fail = 1; vd->why_fail = "an output shares an element"; }
    if (!vd->must_fail && exclusive_span_overlap()) vd->should_ok = 0;
}

/* the workspace's part of the verdict (query: what the workspace query said) */
static void verdict_ws(fz_verdict *vd, const fz_ocfg *c, size_t query)
{
    if (c->malloc_fail) { vd->must_fail = 1; vd->why_fail = "FAVOR_MALLOC fails"; vd->should_ok = 0; }
    if (c->ws_huge) vd->should_ok = 0; /* FAVOR_MALLOC returns NULL above FZ_WS_CAP */
    if (c->ws_alias) { vd->must_fail = 1; vd->why_fail = "workspace overlaps a tensor"; vd->should_ok = 0; }
    if (c->ws_small && c->o.workspace) { vd->must_fail = 1; vd->why_fail = "workspace below the query"; vd->should_ok = 0; }
    if (c->use_opts && c->o.workspace && !c->ws_small && !c->ws_alias && query == 0) vd->should_ok = 0;
}

/* set up the workspace from the query, then the verdict on the views and options */
static void verdict_call(fz_verdict *vd, fz_ocfg *c, size_t query)
{
    setup_ws(c, query);
    verdict_views(vd);
    if (!c->opt_ok) { vd->must_fail = 1; vd->why_fail = "bad options"; }
}

/* I11. ord: the call's tensors in the order the library checks them (each: NULL
 * data, then its dtype, then its sizes and layout); pre: a check made before any
 * tensor may fail (a NULL pointer, favor_feature_map's features); gate[i]: a
 * check made between tensors i - 1 and i may fail (a backward call's input
 * shapes before its gradients). The first tensor with a dtype outside the enum
 * makes the call fail, with FAVOR_E_ARG when nothing before it may fail. */
static void verdict_dtype(fz_verdict *vd, fz_view *const *ord, const int *gate, int n, int pre)
{
    int i;
    for (i = 0; i < n; ++i) {
        const fz_view *v = ord[i];
        if (gate && gate[i]) pre = 1;
        if (!v->present || v->nulldata) {
            pre = 1;
            continue;
        }
        if (!v->dt_valid) {
            vd->must_fail = 1;
            vd->why_fail = "a dtype outside the enum";
            vd->bad_dtype = 1;
            vd->want_arg = !pre;
            vd->bad_name = v->name;
            return;
        }
        if (!v->nested_ok) pre = 1; /* zero, absurd or overlapping sizes, or unnested */
    }
}

/* 1 when one of the n views is a NULL tensor pointer */
static int any_nullptr(fz_view *const *ord, int n)
{
    int i;
    for (i = 0; i < n; ++i)
        if (!ord[i]->present) return 1;
    return 0;
}

/* The workspace of a backward call (the manual, WORKSPACE): its query sees q, k
 * and v only. When one of them is 16-bit the query covers any types of the
 * other tensors (every tensor counted as 16-bit); when all three are fp32 it
 * covers fp32 out, dout and gradients, and a 16-bit one of those needs the size
 * queried with a 16-bit view in place of q (FINDING-5). bwd_query_q returns the q
 * to query with; *upper: the query counts every tensor as 16-bit although some
 * is not (the linear backward has no out: always), an upper bound of what the
 * call needs (a workspace below it may then go either way: verdict_bwd_ws,
 * before verdict_ws). */
static const favor_tensor *bwd_query_q(favor_tensor *tmp, int *upper, int with_out, const fz_view *q,
                                       const fz_view *k, const fz_view *v, fz_view *const *rest, int nrest)
{
    int i, qkv16, rest16 = 0, rest32 = 0;
    *upper = 0;
    if (!q->present) return NULL;
    qkv16 = is16(q) || is16(k) || is16(v);
    for (i = 0; i < nrest; ++i)
        if (rest[i]->present) {
            if (is16(rest[i])) rest16 = 1;
            else rest32 = 1;
        }
    if (qkv16) {
        *upper = !with_out || rest32 || !is16(q) || !is16(k) || !is16(v);
        return &q->t;
    }
    if (!rest16 || !q->dt_valid || !k->dt_valid || !v->dt_valid) return &q->t;
    *tmp = q->t;
    tmp->dtype = FAVOR_F16;
    *upper = 1;
    ctx("[workspace queried with a 16-bit q] ");
    return tmp;
}

/* After a successful backward call whose workspace was queried with a 16-bit q
 * (fp32 q, k, v; a 16-bit out, dout or gradient), the same call with a workspace
 * of the bytes the plain query gives: the manual says "a smaller workspace is
 * FAVOR_E_WORKSPACE", but when the staging fits in the slack of the per-thread
 * slice it is accepted (e.g. linear, ELU1, d = 9, d_v = 1, n = 12, n_k = 1, only
 * dk fp16); so either FAVOR_E_WORKSPACE writing nothing (not even the
 * workspace), or FAVOR_OK with the same results bit for bit. */
static size_t g_plain_refused, g_plain_ok;
static void check_plain_query(const char *what, fz_call_fn fn, void *arg, fz_ocfg *oc, size_t plain)
{
    unsigned char *keep[FZ_MAXB], *w, *wsnap;
    void *ws0 = oc->o.workspace;
    size_t sz0 = oc->o.workspace_size;
    favor_status s;
    int b;
    if (!oc->use_opts || !plain) return;
    for (b = 0; b < g_nb; ++b) {
        keep[b] = (unsigned char *)fz_alloc(buf_bytes(&g_b[b]));
        memcpy(keep[b], g_b[b].mem, buf_bytes(&g_b[b]));
    }
    w = (unsigned char *)fz_alloc(plain + 1);
    wsnap = (unsigned char *)fz_alloc(plain + 1);
    fill_garbage(w, plain + 1, 6161u);
    memcpy(wsnap, w, plain + 1);
    oc->o.workspace = w + 1;
    oc->o.workspace_size = plain;
    s = fn(arg);
    oc->o.workspace = ws0;
    oc->o.workspace_size = sz0;
    if (s != FAVOR_E_WORKSPACE && s != FAVOR_OK)
        FZ_FAIL("%s: with a workspace of the %zu bytes queried with the fp32 q (fp32 q, k, v and a 16-bit out, "
                "dout or gradient) the call returned %s", what, plain, favor_status_string(s));
    if (s == FAVOR_OK) ++g_plain_ok;
    else ++g_plain_refused;
    if (s != FAVOR_OK && memcmp(w, wsnap, plain + 1)) FZ_FAIL("%s: the refused call wrote its workspace", what);
    for (b = 0; b < g_nb; ++b)
        if (!g_b[b].is_ws && memcmp(keep[b], g_b[b].mem, buf_bytes(&g_b[b])))
            FZ_FAIL("%s: with a workspace of the %zu bytes queried with the fp32 q, %s, buffer %d differs from the "
                    "call with the 16-bit q's", what, plain, s == FAVOR_OK ? "accepted" : "refused", b);
    if (verbose())
        fprintf(stderr, "favor_fuzz: %s with the fp32 q's %zu bytes of workspace -> %s\n", what, plain,
                favor_status_string(s));
}

static void verdict_bwd_ws(fz_verdict *vd, fz_ocfg *oc, int upper)
{
    if (upper && oc->use_opts && oc->o.workspace && oc->ws_small && !oc->ws_alias) {
        oc->ws_small = 0;
        vd->should_ok = 0;
    }
}

/* mismatch: the views are valid memory but their shapes do not fit the call */
static void verdict_mismatch(fz_verdict *vd, int mismatch)
{
    if (!vd->must_fail && mismatch) {
        vd->must_fail = 1;
        vd->why_fail = "shapes do not match";
    }
}

/* ------------------------------------------------------------------------ */
/* Score variants and packed sequences (bit 5 of the first byte)            */
/* ------------------------------------------------------------------------ */
/* The mask, after the call's tensors: a tensor view [batch][heads][n][n_k]
 * (add_view: its layout, dtype and batch bytes as any tensor's) of 1 or heads_q
 * heads (bit 0 of its mode byte); a NULL tensor pointer means no mask. Then the
 * offsets of the packed sequences: count = mode % 5, kind = mode >> 3 & 7 (0-3
 * valid, 4 seq_k NULL, 5 out of order, 6 a wrong first or last offset, 7 seq_q
 * NULL, seqs SIZE_MAX or q's offsets for k), seq_k NULL also when bit 6 is set;
 * count - 1 bytes of query cuts then (with seq_k) count - 1 bytes of key cuts,
 * each byte % (rows + 1), sorted. */
static size_t *dec_offsets(fz_rd *r, size_t count, size_t rows)
{
    size_t *p = (size_t *)fz_alloc((count + 1) * sizeof *p), i;
    p[0] = 0;
    for (i = 1; i < count; ++i) p[i] = rd8(r) % (rows + 1);
    p[count] = rows;
    if (count > 2) qsort(p + 1, count - 1, sizeof *p, cmp_size);
    return p;
}

static void add_sv_views(fz_rd *r, fz_ocfg *oc, size_t hq, size_t n, size_t nk)
{
    unsigned qm = oc->sv_b[8], qp = oc->sv_b[9];
    oc->mask = NULL;
    oc->seq_q = oc->seq_k = NULL;
    if (!g_sv_ext) return;
    if (oc->sv_on & 32u) {
        oc->mask = add_view(r, "mask", R_IN, (oc->sv_b[7] & 1) ? hq : 1, n, nk);
        oc->mask->kind = K_MASK;
    }
    if (oc->sv_on & 64u) {
        size_t count = qm % 5, kind = qm >> 3 & 7, cnt = count ? count : 1;
        oc->o.seqs = count;
        oc->seq_q = dec_offsets(r, cnt, n);
        oc->seq_k = (kind == 4 || (qm & 64)) ? NULL : dec_offsets(r, cnt, nk);
        switch (kind) {
        case 5: if (cnt >= 1) { size_t t = oc->seq_q[0]; oc->seq_q[0] = oc->seq_q[cnt]; oc->seq_q[cnt] = t; }
                if (cnt >= 2 && oc->seq_k) { size_t t = oc->seq_k[1]; oc->seq_k[1] = oc->seq_k[2]; oc->seq_k[2] = t; }
                break;
        case 6: if (qp & 1) oc->seq_q[cnt] += (qp & 2) ? 1 : (size_t)-1;
                else if (oc->seq_k) oc->seq_k[qp & 2 ? 0 : cnt] += 1;
                else oc->seq_q[0] = 1;
                break;
        case 7: if (qp % 3 == 0) oc->seq_q = NULL;
                else if (qp % 3 == 1) oc->o.seqs = SIZE_MAX;
                else oc->seq_k = oc->seq_q;
                break;
        default: break;
        }
        oc->o.seq_q = oc->seq_q;
        oc->o.seq_k = oc->seq_k;
        ctx("[seqs %zu:", oc->o.seqs);
        {
            size_t i;
            for (i = 0; oc->seq_q && i <= cnt; ++i) ctx(" %zu", oc->seq_q[i]);
            ctx(" |");
            for (i = 0; oc->seq_k && i <= cnt; ++i) ctx(" %zu", oc->seq_k[i]);
            ctx("%s] ", oc->seq_k ? "" : " NULL");
        }
    }
}

/* a view of `count` floats for alibi, sinks or dsinks: its own buffer, or
 * (alias) the bytes of the par-th view holding enough, or of view `onto` */
static fz_view *add_float_view(const char *name, int role, int kind, size_t count, int alias, unsigned par,
                               const fz_view *onto)
{
    fz_view *v;
    if (alias || onto) {
        int i, cand[FZ_MAXV], nc = 0;
        for (i = 0; i < g_nv; ++i)
            if (g_v[i].mem_ok && g_v[i].buf >= 0 && view_units(&g_v[i]) >= 2 * count + g_v[i].off % 2 &&
                (!onto || &g_v[i] == onto))
                cand[nc++] = i;
        if (nc) {
            i = cand[par % nc];
            v = add_range_view(name, role, g_v[i].buf, g_v[i].off + g_v[i].off % 2 + 2 * (par / 16 % 2), count);
            if (v->off + 2 * count > g_b[v->buf].len) v->off = g_v[i].off + g_v[i].off % 2;
            v->kind = kind;
            ctx("[%s aliased onto %s] ", name, g_v[i].name);
            return v;
        }
    }
    v = add_range_view(name, role, new_buf(2 * count), 0, count);
    alloc_buf(v->buf);
    v->kind = kind;
    return v;
}

/* After the layout (and lse): alibi, sinks, dsinks. hq: the floats of each
 * (q's heads); grad: the call writes dsinks (softmax backward). */
static void add_sv_ranges(fz_ocfg *oc, size_t hq, int grad)
{
    unsigned am = oc->sv_b[4], sm = oc->sv_b[5], dm = oc->sv_b[6];
    oc->alibi = oc->sinks = oc->dsinks = NULL;
    oc->dsinks_top = 0;
    if (!g_sv_ext || !hq || hq > 64) return;
    if (oc->sv_on & 8u) oc->sinks = add_float_view("sinks", R_IN, K_SINKS, hq, (sm >> 3 & 3) == 2, sm >> 5, NULL);
    if (oc->sv_on & 4u)
        oc->alibi = add_float_view("alibi", R_IN, K_ALIBI, hq, (am >> 3 & 3) == 2, am >> 5,
                                   (am >> 3 & 3) == 3 ? oc->sinks : NULL);
    if (oc->sv_on & 16u) {
        const fz_view *onto = (dm & 7) == 4 ? oc->sinks : (dm & 7) == 5 ? oc->alibi : (dm & 7) == 7 ? oc->mask : NULL;
        if ((dm & 7) == 6) {
            oc->dsinks_top = 1; /* hq floats pass the end of the address space */
        } else {
            oc->dsinks = add_float_view("dsinks", R_OUT, K_DSINKS, hq, (dm & 7) == 3, dm >> 3, onto);
            oc->dsinks->used = grad; /* the forward ignores it: never written */
        }
    }
    if (oc->mask && !oc->mask->present) oc->mask->used = 0; /* a NULL mask: none */
    if (!oc->use_opts) { /* opts NULL: the call sees none of them (they must stay untouched) */
        if (oc->mask) oc->mask->used = 0;
        if (oc->alibi) oc->alibi->used = 0;
        if (oc->sinks) oc->sinks->used = 0;
        if (oc->dsinks) oc->dsinks->used = 0;
    }
}

/* slope h of H (alibi mode am) */
static float alibi_value(unsigned am, size_t h, size_t H)
{
    switch (am & 7) {
    case 1: return 0.0f;
    case 2: return -0.5f * (float)(h + 1);
    case 3: return 1e4f;
    case 4: return h == (am >> 3) % H ? NAN : 0.25f;
    case 5: return h == (am >> 3) % H ? ((am & 128) ? -INFINITY : INFINITY) : 0.5f;
    case 6: return FLT_MAX;
    case 7: return (h & 1) ? 1e-45f : FLT_MIN;
    default: return (float)ldexp(1.0, -(int)(8 * (h + 1) / H));
    }
}

/* sink logit h of H (sinks mode sm) */
static float sink_value(fz_rd *r, unsigned sm, size_t h, size_t H)
{
    switch (sm & 7) {
    case 1: return prng_unif(r, 2.0f);
    case 2: return -INFINITY;
    case 3: return (h & 1) ? -INFINITY : 1.0f;
    case 4: return h == (sm >> 3) % H ? NAN : 0.5f;
    case 5: return h == (sm >> 3) % H ? INFINITY : -1.0f;
    case 6: return (h & 1) ? -1e4f : 1e4f;
    case 7: return FLT_MAX;
    default: return 0.0f;
    }
}

/* a view over W or the state keeps what they hold (as in fill_views): writing
 * values there would change the features or the state the later calls of the
 * scenario use, behind the verdicts' back */
static int over_fixed(const fz_view *v) { return v->buf == g_fbuf || v->buf == g_stbuf; }

/* values of alibi, sinks and the mask (after fill_views; then the promises again) */
static void fill_sv(fz_rd *r, fz_ocfg *oc)
{
    size_t h;
    int k;
    if (!g_sv_ext) return;
    for (k = 0; k < 2; ++k) {
        const fz_view *v = k ? oc->sinks : oc->alibi;
        size_t H = v ? v->t.cols : 0;
        if (v && over_fixed(v)) continue;
        for (h = 0; v && v->mem_ok && h < H; ++h) {
            float x = k ? sink_value(r, oc->sv_b[5], h, H) : alibi_value(oc->sv_b[4], h, H);
            memcpy((float *)v->t.data + h, &x, 4);
        }
    }
    if (oc->mask && oc->mask->mem_ok && oc->mask->used && !over_fixed(oc->mask)) {
        fz_view *m = oc->mask;
        unsigned mm = oc->sv_b[7], pat = mm >> 1 & 7;
        size_t i, j, n = m->t.rows, nk = m->t.cols, L = 1 + (mm >> 4) % 8;
        if (pat)
            for (h = 0; h < vheads(m); ++h)
                for (i = 0; i < n; ++i)
                    for (j = 0; j < nk; ++j) {
                        float x = prng_unif(r, 4.0f);
                        uint64_t u = prng(r);
                        switch (pat) {
                        case 1: x = 0.0f; break;
                        case 2: if ((u & 3) == 0) x = -INFINITY; break;
                        case 3: /* documents of L positions (the rows bottom-right aligned) */
                            x = (i + nk) / L == (j + n) / L ? 0.0f : -INFINITY;
                            break;
                        case 4: if ((i + h) % 3 == 0) x = -INFINITY; break;
                        case 5: x = -INFINITY; break;
                        case 6: if ((u & 15) == 0) x = INFINITY; else if ((u & 15) == 1) x = -INFINITY; break;
                        default: if ((u & 15) == 0) x = NAN; else if ((u & 15) == 1) x = -INFINITY; break;
                        }
                        VSET(m, h, i, j, x);
                    }
    }
    set_promises();
}

/* the options' pointers to the variant buffers (the views' structs, which the
 * fp32 twin swaps) */
static void bind_sv(fz_ocfg *oc)
{
    if (!g_sv_ext) return;
    oc->o.mask = oc->mask && oc->mask->used ? &oc->mask->t : NULL;
    oc->o.alibi = oc->alibi ? (const float *)oc->alibi->t.data : NULL;
    oc->o.sinks = oc->sinks ? (const float *)oc->sinks->t.data : NULL;
    /* dsinks_top: the last 4-byte aligned float of the address space (its heads_q
     * floats pass the end; never NULL) */
    oc->o.dsinks = oc->dsinks_top ? (float *)(uintptr_t)(UINTPTR_MAX - 3)
                   : oc->dsinks ? (float *)oc->dsinks->t.data : NULL;
}

/* 1 when a unit of view a is an element unit of view b (one buffer) */
static int elems_meet(const fz_view *a, const fz_view *b)
{
    int *owner = g_b[a->buf].owner, hit = 0;
    size_t k, h, r, c, u;
    for (k = 0; k <= g_b[a->buf].len; ++k) owner[k] = -1;
    mark_elems(b, owner, 0, &hit, 0);
    for (h = 0; h < vheads(a); ++h)
        for (r = 0; r < a->t.rows; ++r)
            for (c = 0; c < a->t.cols; ++c)
                for (u = 0; u < a->es / UNIT; ++u)
                    if (owner[elem_unit(a, h, r, c) + u] == 0) return 1;
    return 0;
}

/* An alibi or sinks view and the outputs of the call (FINDING-8: the library did
 * not check them): 2 when it shares a unit with an output's elements (the call
 * must fail), 1 when it lies only within an output's span, in its gaps (the
 * library's range test may refuse that or not: the finer test of fused layouts
 * accepts it, as the fuzzer's 2026-11-30 scalar run found), else 0 */
static int ptr_overlap(const fz_ocfg *oc)
{
    int i, j, found = 0;
    for (i = 0; i < g_nv; ++i) {
        const fz_view *a = &g_v[i];
        if (!a->used || !a->mem_ok || (a->kind != K_ALIBI && a->kind != K_SINKS)) continue;
        if (a != oc->alibi && a != oc->sinks) continue;
        for (j = 0; j < g_nv; ++j) {
            const fz_view *b = &g_v[j];
            if (!b->used || !b->mem_ok || !harmful_role(b->role) || b->buf != a->buf || b->kind == K_DSINKS) continue;
            if (!span_overlap(a, b)) continue;
            if (elems_meet(a, b)) return 2;
            found = 1;
        }
    }
    return found;
}

/* the sequences the library sees are valid (rows of q and k as given) */
static int seqs_valid(const fz_ocfg *oc, size_t n, size_t nk)
{
    const favor_options *o = &oc->o;
    size_t s, i;
    if (!o->seqs) return 1;
    if (!o->seq_q || o->seqs == SIZE_MAX) return 0;
    if (!o->seq_k && n != nk) return 0;
    for (i = 0; i < 2; ++i) {
        const size_t *p = i ? (o->seq_k ? o->seq_k : o->seq_q) : o->seq_q;
        if (p[0] != 0 || p[o->seqs] != (i ? nk : n)) return 0;
        for (s = 0; s < o->seqs; ++s)
            if (p[s + 1] < p[s]) return 0;
    }
    return 1;
}

static int float_view_all(const fz_view *v, int want_finite_or_neg_inf, int want_finite)
{
    size_t h;
    for (h = 0; v && v->mem_ok && h < v->t.cols; ++h) {
        float x;
        memcpy(&x, (const float *)v->t.data + h, 4);
        if (want_finite && !isfinite(x)) return 0;
        if (want_finite_or_neg_inf && !(x <= FLT_MAX) && x != -INFINITY) return 0;
    }
    return 1;
}

/* The verdict on the variants (after the values are in place). softmax: 1 for
 * softmax attention, 0 for linear attention and its backward, 2 for
 * favor_linear_extend (which refuses seqs too); grad: a backward call. */
static void verdict_sv(fz_verdict *vd, fz_ocfg *oc, const fz_view *q, const fz_view *k, int softmax, int grad)
{
    const favor_options *o = &oc->o;
    int fail = 0;
    const char *why = NULL;
    if (!oc->use_opts) return; /* (without the extension, a FAVOR_WINDOW flag may still be set) */
    bind_sv(oc);
    if (q->mem_ok && k->mem_ok && !seqs_valid(oc, q->t.rows, k->t.rows)) { fail = 1; why = "bad sequence offsets"; }
    if (o->seqs && (!o->seq_q || o->seqs == SIZE_MAX)) { fail = 1; why = "seq_q NULL or seqs SIZE_MAX"; }
    if (softmax != 1) {
        if ((o->flags & FAVOR_WINDOW) || o->softcap != 0.0f || o->alibi || o->sinks || o->dsinks || o->mask) {
            fail = 1;
            why = "a score variant on linear attention";
        }
        if (softmax == 2 && o->seqs) { fail = 1; why = "favor_linear_extend with seqs"; }
    } else {
        const fz_view *m = oc->mask && oc->mask->used ? oc->mask : NULL;
        if (m && m->mem_ok && q->mem_ok && k->mem_ok &&
            (m->t.rows != q->t.rows || m->t.cols != k->t.rows || (m->t.heads != 1 && m->t.heads != q->t.heads) ||
             (tnb(&m->t) != 1 && tnb(&m->t) != tnb(&q->t)))) {
            fail = 1;
            why = "mask shape";
        }
        if (m && !m->dt_valid) { fail = 1; why = "mask dtype outside the enum"; }
        if (!(o->softcap >= 0.0f) || !(o->softcap <= FLT_MAX) || (o->softcap != 0.0f && o->softcap < FLT_MIN)) {
            fail = 1;
            why = "bad softcap";
        }
        if (o->alibi && !float_view_all(oc->alibi, 0, 1)) { fail = 1; why = "alibi not finite"; }
        if (o->sinks && !float_view_all(oc->sinks, 1, 0)) { fail = 1; why = "sinks NaN or +inf"; }
        if (grad && o->dsinks && !o->sinks) { fail = 1; why = "dsinks without sinks"; }
        if (grad && oc->dsinks_top) { fail = 1; why = "dsinks past the address space"; }
        switch (ptr_overlap(oc)) {
        case 2: /* FINDING-8, fixed */
            if (!vd->must_fail) {
                vd->must_fail = 1;
                vd->why_fail = "alibi or sinks under an output (FINDING-8)";
            }
            break;
        case 1: vd->should_ok = 0; break; /* in an output's gaps: either way */
        default: break;
        }
    }
    if (fail && !vd->must_fail) {
        vd->must_fail = 1;
        vd->why_fail = why;
    }
}

/* ------------------------------------------------------------------------ */
/* Gated linear attention (bit 6 of the first byte)                         */
/* ------------------------------------------------------------------------ */
/* dec_gt: with bit 6 of the first byte set (ignored before gated attention
 * existed), dec_fcfg reads one more byte (FAVOR_IDENTITY when its bits 0-1 are
 * 1; bit 2: a map without W initialized with count d, else 0) and dec_ocfg 4
 * more bytes after the variants' (if any):
 *     on      bit 0 FAVOR_NO_NORM, 1 decay, 2 gates, 3 dgates, 4 FAVOR_CAUSAL
 *     decay   bits 0-2 values (below), 3-4 placement (0-1 its own buffer of
 *             exactly heads_kv floats, 2 over the bytes of the par-th view
 *             holding enough, 3 over the gates' bytes), 5-7 par
 *     gates   bits 0-2 the pattern of valid log-gates, 3 one bad value (bits
 *             6-7: +0.5, NaN, -inf, +1e-45), 4-5 a forced dtype (f16, bf16, 3)
 *     dgates  bits 0-1 a forced dtype, bit 2: dgates is the gates tensor itself
 * The gates and dgates are tensor views after the variants' views and cuts
 * (add_view: their layout, dtype and batch bytes as any view's; a NULL tensor
 * pointer is none): gates [batch][heads_kv][n_k][1], dgates shaped as the
 * gates (before its own off-by-one). Every call taking options reads the bytes;
 * softmax must refuse any of them, linear attention validates them (verdict_gt). */
static void force_dtype(fz_view *v, unsigned m)
{
    static const int dt[] = {FAVOR_F32, FAVOR_F16, FAVOR_BF16, 3};
    if (!(m & 3u)) return;
    v->t.dtype = (favor_dtype)dt[m & 3u];
    v->dt_valid = dtype_ok(v->t.dtype);
    v->es = v->dt_valid && v->t.dtype != FAVOR_F32 ? 2 : 4;
    ctx("[%s forced %s] ", v->name, dtype_name(v->t.dtype));
}

/* the gates and dgates views (after the variants' views) of a call of kind gk */
static void add_gt_views(fz_rd *r, fz_ocfg *oc, size_t hkv, size_t nk, int gk)
{
    oc->gates = oc->dgates = oc->decay = NULL;
    oc->gk = gk;
    if (!g_gt_ext) return;
    if (oc->gt_on & 4u) {
        oc->gates = add_view(r, "gates", R_IN, hkv, nk, 1);
        oc->gates->kind = K_GATES;
        force_dtype(oc->gates, oc->gt_b[2] >> 4);
    }
    if (oc->gt_on & 8u) {
        const fz_view *g = oc->gates;
        oc->dgates = add_view(r, "dgates", R_OUT, g ? g->t.heads : hkv, g ? g->t.rows : nk, g ? g->t.cols : 1);
        oc->dgates->kind = K_DGATES;
        force_dtype(oc->dgates, oc->gt_b[3]);
    }
}

/* the calls that read the gated options (not favor_linear_step, nor any with
 * opts NULL) */
static int gt_sees(const fz_ocfg *oc) { return oc->use_opts && oc->gk != GK_STEP; }

/* After the layout: decay (k's heads floats, as the library reads them; its own
 * buffer or over another view's bytes), and which gated views the call sees */
static void add_gt_ranges(fz_ocfg *oc, const fz_view *k, size_t hkv)
{
    unsigned dm = oc->gt_b[1];
    size_t H = k->mem_ok ? k->t.heads : hkv;
    int sees = gt_sees(oc);
    if (!g_gt_ext) return;
    if ((oc->gt_on & 2u) && H && H <= 64) {
        int place = (int)(dm >> 3 & 3);
        const fz_view *onto = place == 3 && oc->gates && oc->gates->mem_ok ? oc->gates : NULL;
        oc->decay = add_float_view("decay", R_IN, K_DECAY, H, place >= 2, dm >> 5, onto);
    }
    if (oc->gates && (!sees || !oc->gates->present)) oc->gates->used = 0;
    /* dgates: written by the linear backward only (the forward, extend and
     * step_ex ignore it, softmax refuses it); not when the gates are passed */
    if (oc->dgates && (!sees || !oc->dgates->present || oc->gk != GK_LINB || (oc->gt_b[3] & 4u)))
        oc->dgates->used = 0;
    if (oc->decay && !sees) oc->decay->used = 0;
}

/* gamma_h of H (decay mode dm): 0 typical, 1 all 1, 2 FLT_MIN and 1e-45, 3 0.5,
 * then one bad head (index par % H): 4 zero, 5 1.5, 6 NaN, 7 -0.5 */
static float decay_value(unsigned dm, size_t h, size_t H)
{
    int bad = h == (size_t)(dm >> 5) % H;
    switch (dm & 7u) {
    case 1: return 1.0f;
    case 2: return (h & 1) ? 1e-45f : FLT_MIN;
    case 3: return 0.5f;
    case 4: return bad ? 0.0f : 0.9f;
    case 5: return bad ? 1.5f : 0.99f;
    case 6: return bad ? NAN : 0.75f;
    case 7: return bad ? -0.5f : 1.0f;
    default: return 1.0f - ldexpf(1.0f, -(int)(3 + h % 8));
    }
}

/* log-gate number i (gates mode gm; the bad one at index bad): 0 uniform in
 * [-1, 0], 1 all exact 0, 2 log sigmoid of a logit in [-2, 10] with every 5th
 * an exact 0, 3 -80 at random among small ones, 4 edges (-1e4, -FLT_MAX,
 * -0, -1e-45, -FLT_MIN, -1e30, 0, -88), 5 -|payload| (up to 1e4), 6 log 1/2,
 * 7 all -80 */
static float gate_value(fz_rd *r, const fz_view *g, unsigned gm, size_t i, size_t bad)
{
    static const float badv[] = {0.5f, NAN, -INFINITY, 1e-45f};
    static const float edge[] = {-1e4f, -FLT_MAX, -0.0f, -1e-45f, -FLT_MIN, -1e30f, 0.0f, -88.0f};
    float u = prng_unif(r, 1.0f);
    if ((gm & 8u) && i == bad) return badv[gm >> 6 & 3];
    switch (gm & 7u) {
    case 1: return 0.0f;
    case 2: return i % 5 == 0 ? 0.0f : (float)-log1p(exp(-(4.0 + 6.0 * (double)u)));
    case 3: return (prng(r) & 3) == 0 ? -80.0f : -0.05f * fabsf(u);
    case 4: return edge[prng(r) & 7];
    case 5: return -fabsf(gen_value(r, (fz_view *)(uintptr_t)g, 2));
    case 6: return -0.69314718f;
    case 7: return -80.0f;
    default: return -0.5f * (u + 1.0f);
    }
}

/* values of the gates and decay (after fill_views, fill_sv; then the promises
 * again). Views over W or the state keep what those hold, as fill_views does. */
static void fill_gt(fz_rd *r, fz_ocfg *oc)
{
    if (!g_gt_ext) return;
    if (oc->gates && oc->gates->mem_ok && !over_fixed(oc->gates)) {
        fz_view *g = oc->gates;
        size_t h, i, c, N = vheads(g) * g->t.rows * g->t.cols, at = 0, bad = N ? (size_t)(prng(r) % N) : 0;
        for (h = 0; h < vheads(g); ++h)
            for (i = 0; i < g->t.rows; ++i)
                for (c = 0; c < g->t.cols; ++c) VSET(g, h, i, c, gate_value(r, g, oc->gt_b[2], at++, bad));
    }
    if (oc->decay && oc->decay->mem_ok && !over_fixed(oc->decay)) {
        size_t h, H = oc->decay->t.cols;
        for (h = 0; h < H; ++h) {
            float x = decay_value(oc->gt_b[1], h, H);
            memcpy((float *)oc->decay->t.data + h, &x, 4);
        }
    }
    set_promises();
}

/* the options' pointers to the gated buffers (the views' structs, which the
 * fp32 twin would swap) */
static void bind_gt(fz_ocfg *oc)
{
    if (!g_gt_ext) return;
    oc->o.gates = oc->gates && oc->gates->present ? &oc->gates->t : NULL;
    oc->o.dgates = (oc->gt_on & 8u) && (oc->gt_b[3] & 4u) ? oc->o.gates
                   : oc->dgates && oc->dgates->present ? &oc->dgates->t : NULL;
    oc->o.decay = oc->decay ? (const float *)oc->decay->t.data : NULL;
}

/* The verdict on the gated options (favor__check_gates, favor__check_mods): f
 * the features the call gets (NULL for softmax), k its keys. Overlaps (an
 * output over gates or decay, dgates over anything) are in the views' overlap
 * model (harmful_overlap), the gates' layout in verdict_views. */
static void verdict_gt(fz_verdict *vd, const fz_ocfg *oc, const favor_features *f, const fz_view *k)
{
    const favor_options *o = &oc->o;
    int gk = oc->gk, sees = gt_sees(oc), fail = 0;
    int nonorm = sees && (o->flags & FAVOR_NO_NORM);
    const char *why = NULL;
    if (gk != GK_SOFTMAX && f && (int)f->kernel == FAVOR_IDENTITY && !nonorm) {
        fail = 1; /* with opts NULL too, and favor_linear_step */
        why = "FAVOR_IDENTITY without FAVOR_NO_NORM";
    }
    if (sees && gk == GK_SOFTMAX && (nonorm || o->decay || o->gates || o->dgates)) {
        fail = 1;
        why = "FAVOR_NO_NORM, decay, gates or dgates on softmax attention";
    }
    if (sees && gk != GK_SOFTMAX) {
        int causal = (gk != GK_LIN && gk != GK_LINB) || (o->flags & FAVOR_CAUSAL);
        if ((o->decay || o->gates) && !causal) { fail = 1; why = "decay or gates without FAVOR_CAUSAL"; }
        if (o->decay && k->mem_ok && oc->decay && oc->decay->t.cols >= k->t.heads) {
            size_t h;
            for (h = 0; h < k->t.heads; ++h) {
                float x;
                memcpy(&x, o->decay + h, 4);
                if (!(x > 0.0f && x <= 1.0f)) { fail = 1; why = "a decay outside (0, 1]"; }
            }
        }
        if (o->gates) {
            const fz_view *g = oc->gates;
            if (g->t.dtype != FAVOR_F32) { fail = 1; why = "gates not fp32"; }
            if (k->mem_ok && (g->t.heads != k->t.heads || g->t.rows != k->t.rows || tnb(&g->t) != tnb(&k->t) ||
                              g->t.cols != 1)) {
                fail = 1;
                why = "gates not shaped [batch][heads_kv][n_k][1]";
            }
            if (g->mem_ok) {
                size_t h, i;
                for (h = 0; h < vheads(g); ++h)
                    for (i = 0; i < g->t.rows; ++i) {
                        float x = VGET(g, h, i, 0);
                        if (!(x <= 0.0f && x >= -FLT_MAX)) { fail = 1; why = "a log-gate > 0, NaN or -inf"; }
                    }
            }
        }
        if (gk == GK_LINB && o->dgates) {
            const favor_tensor *dg = o->dgates, *g = o->gates;
            if (!g) { fail = 1; why = "dgates without gates"; }
            else if (dg == g) { fail = 1; why = "dgates is the gates tensor"; }
            else {
                if (dg->dtype != FAVOR_F32) { fail = 1; why = "dgates not fp32"; }
                if (dg->heads != g->heads || dg->rows != g->rows || tnb(dg) != tnb(g) || dg->cols != 1) {
                    fail = 1;
                    why = "dgates shaped unlike the gates";
                }
            }
        }
    }
    if (fail && !vd->must_fail) {
        vd->must_fail = 1;
        vd->why_fail = why;
    }
}

/* the finite-output promise with the gated options: FAVOR_NO_NORM with an
 * exponential map drops it (the manual: the unnormalized sums may leave
 * float's range) */
static int gt_fin_ok(const fz_ocfg *oc, const favor_features *f)
{
    return !(g_gt_ext && gt_sees(oc) && (oc->o.flags & FAVOR_NO_NORM) && f && fz_exp_map((int)f->kernel));
}
/* FAVOR_NO_NORM in effect (no convex combinations: no range check) */
static int gt_nonorm(const fz_ocfg *oc) { return g_gt_ext && gt_sees(oc) && (oc->o.flags & FAVOR_NO_NORM); }

/* after a successful linear backward with dgates: every element written and
 * finite under I4 (check_outputs: dgates is an output), and the first key of
 * each sequence has dg = 0 exactly (nothing before it decays; the manual) */
static void check_dgates_first(const char *what, const fz_ocfg *oc, size_t nk)
{
    const fz_view *g = oc->dgates;
    const size_t *sk = oc->o.seq_k ? oc->o.seq_k : oc->o.seq_q;
    size_t s, h, ns = oc->o.seqs ? oc->o.seqs : 1;
    if (!g || !g->used || !g->mem_ok || g->t.rows != nk) return;
    for (s = 0; s < ns; ++s) {
        size_t k0 = oc->o.seqs ? sk[s] : 0, k1 = oc->o.seqs ? sk[s + 1] : nk;
        if (k1 <= k0) continue;
        for (h = 0; h < vheads(g); ++h)
            if (VGET(g, h, k0, 0) != 0.0f)
                FZ_FAIL("%s: dgates[%zu][%zu][0] = %g, but the first key of sequence %zu has dg = 0", what, h, k0,
                        (double)VGET(g, h, k0, 0), s);
    }
}

static void judge(const char *what, favor_status s, const fz_verdict *vd, const fz_ocfg *c)
{
    if (verbose() && s == FAVOR_E_ALIAS && !vd->must_fail)
        fprintf(stderr, "favor_fuzz: NOTE false rejection: %s says FAVOR_E_ALIAS but no output shares an "
                "element with another buffer (byte spans overlap)\n", what);
    if (verbose() && s == FAVOR_E_SHAPE && !vd->must_fail) {
        int i;
        for (i = 0; i < g_nv; ++i)
            if (g_v[i].used && g_v[i].mem_ok && !g_v[i].nested_ok && !g_v[i].self_overlap)
                fprintf(stderr, "favor_fuzz: NOTE false rejection: %s says FAVOR_E_SHAPE; %s's rows do not "
                        "overlap but break the nesting rule (heads=%zu rows=%zu cols=%zu hs=%zu rs=%zu "
                        "batch=%zu bs=%zu)\n",
                        what, g_v[i].name, g_v[i].t.heads, g_v[i].t.rows, g_v[i].t.cols,
                        g_v[i].t.head_stride, g_v[i].t.row_stride, g_v[i].t.batch, g_v[i].t.batch_stride);
    }
    if (s == FAVOR_OK && vd->must_fail) FZ_FAIL("%s accepted an invalid call (%s)", what, vd->why_fail);
    if (s != FAVOR_OK && vd->should_ok && !vd->must_fail)
        FZ_FAIL("%s rejected a valid call with %s", what, favor_status_string(s));
    if (c && c->ws_exact && s == FAVOR_E_WORKSPACE)
        FZ_FAIL("%s: given exactly the %zu bytes its query returned, it says FAVOR_E_WORKSPACE", what, c->ws_query);
    if (c && c->o.workspace && c->use_opts && g_malloc_calls)
        FZ_FAIL("%s called FAVOR_MALLOC although it was given a workspace", what);
    if (s != FAVOR_OK && s != FAVOR_E_NULL && s != FAVOR_E_SHAPE && s != FAVOR_E_OVERFLOW &&
        s != FAVOR_E_ALIAS && s != FAVOR_E_WORKSPACE && s != FAVOR_E_NOMEM && s != FAVOR_E_ARG)
        FZ_FAIL("%s returned an undocumented status %d", what, (int)s);
    if (s == FAVOR_E_NOMEM && !(c && c->malloc_fail)) FZ_FAIL("%s: FAVOR_E_NOMEM without a failing FAVOR_MALLOC", what);
    if (vd->bad_dtype && s != FAVOR_OK) {
        if (vd->want_arg && s != FAVOR_E_ARG)
            FZ_FAIL("%s: %s has a dtype outside the enum and no check before it can fail, but the call "
                    "returned %s, not FAVOR_E_ARG", what, vd->bad_name, favor_status_string(s));
        if (s != FAVOR_E_ARG && s != FAVOR_E_NULL && s != FAVOR_E_SHAPE && s != FAVOR_E_OVERFLOW)
            FZ_FAIL("%s: %s has a dtype outside the enum, but the call returned %s (a check made after "
                    "the tensors')", what, vd->bad_name, favor_status_string(s));
    }
}

/* ------------------------------------------------------------------------ */
/* Shape helpers                                                            */
/* ------------------------------------------------------------------------ */
typedef struct {
    size_t hq, hkv, n, nk, d, dv;
} fz_shape;

static void dec_shape(fz_rd *r, fz_shape *s)
{
    unsigned b = rd8(r);
    size_t grp;
    s->hkv = 1 + (b & 3);
    grp = 1 + (b >> 2 & 3);
    if (s->hkv * grp > 4) grp = 4 / s->hkv;
    if (grp < 1) grp = 1;
    s->hq = s->hkv * grp;
    if ((b & 0xf0) == 0xf0) s->hq = s->hkv + 1; /* not a multiple */
    s->n = dec_len(rd8(r));
    s->nk = dec_len(rd8(r));
    s->d = dec_dim(rd8(r));
    s->dv = dec_dim(rd8(r));
    ctx("shape{hq=%zu hkv=%zu n=%zu nk=%zu d=%zu dv=%zu} ", s->hq, s->hkv, s->n, s->nk, s->d, s->dv);
}

#define T(v) ((v)->present ? &(v)->t : (const favor_tensor *)NULL)

/* shapes, and every tensor of the call with the same batch (0 and 1 alike) */
static int qkvo_shape_ok(const favor_tensor *q, const favor_tensor *k, const favor_tensor *v,
                         const favor_tensor *o)
{
    return k->cols == q->cols && v->rows == k->rows && v->heads == k->heads && k->heads &&
           q->heads % k->heads == 0 && o->heads == q->heads && o->rows == q->rows &&
           o->cols == v->cols && tnb(k) == tnb(q) && tnb(v) == tnb(q) && tnb(o) == tnb(q);
}
static int same_shape(const favor_tensor *a, const favor_tensor *b)
{
    return a->heads == b->heads && a->rows == b->rows && a->cols == b->cols && tnb(a) == tnb(b);
}

/* Which keys a query row sees (the library's rule, from its documentation):
 * row i of a sequence of ns rows over nks keys sits at p = i + nks - ns; the
 * causal rule (right = 0) and the window cut [p - left, p + right] (a negative
 * side unbounded); packed sequences see only their own keys, with their own
 * positions; the mask hides keys where it is -inf (only a mask whose values are
 * all finite or -inf is used to decide). */
typedef struct {
    ptrdiff_t left, right;
    size_t n, nk, seqs, hq;
    const size_t *sq, *sk;
    const fz_view *mask;  /* a clean mask, or NULL */
    const float *sinks;   /* heads_q sink logits, or NULL */
    int restricts;        /* some key is hidden from some row by the rules */
} fz_vis;

static void vis_make(fz_vis *V, const fz_ocfg *oc, const fz_view *q, const fz_view *k, int softmax)
{
    const favor_options *o = &oc->o;
    int win = oc->use_opts && (o->flags & FAVOR_WINDOW) && softmax;
    memset(V, 0, sizeof *V);
    V->n = q->t.rows;
    V->nk = k->t.rows;
    V->hq = q->t.heads;
    V->left = win && o->window_left >= 0 ? o->window_left : -1;
    V->right = win && o->window_right >= 0 ? o->window_right : -1;
    if (oc->use_opts && (o->flags & FAVOR_CAUSAL)) V->right = 0;
    if (oc->use_opts && o->seqs && seqs_valid(oc, V->n, V->nk)) {
        V->seqs = o->seqs;
        V->sq = o->seq_q;
        V->sk = o->seq_k ? o->seq_k : o->seq_q;
    }
    if (softmax && oc->use_opts && o->mask && oc->mask->mem_ok) {
        const fz_view *m = oc->mask;
        size_t h, i, j;
        int clean = 1;
        for (h = 0; h < vheads(m) && clean; ++h)
            for (i = 0; i < m->t.rows && clean; ++i)
                for (j = 0; j < m->t.cols; ++j) {
                    float x = VGET(m, h, i, j);
                    if (!isfinite(x) && x != -INFINITY) { clean = 0; break; }
                }
        if (clean) V->mask = m;
    }
    if (softmax && oc->use_opts && o->sinks) V->sinks = o->sinks;
    V->restricts = V->right >= 0 || V->left >= 0 || V->seqs > 1;
}

/* the keys [*lo, *hi) (global indices) row i sees by the rules */
static void vis_row(const fz_vis *V, size_t i, size_t *lo, size_t *hi)
{
    size_t q0 = 0, q1 = V->n, k0 = 0, k1 = V->nk, s;
    ptrdiff_t p, a, b;
    for (s = 0; V->seqs && s < V->seqs; ++s)
        if (i >= V->sq[s] && i < V->sq[s + 1]) {
            q0 = V->sq[s]; q1 = V->sq[s + 1];
            k0 = V->sk[s]; k1 = V->sk[s + 1];
            break;
        }
    p = (ptrdiff_t)(i - q0 + (k1 - k0)) - (ptrdiff_t)(q1 - q0);
    a = 0;
    b = (ptrdiff_t)(k1 - k0);
    if (V->right >= 0 && V->right < b - p) b = p + V->right + 1;
    if (V->left >= 0 && p > V->left) a = p - V->left;
    if (b < 0) b = 0;
    if (a > b) a = b;
    *lo = k0 + (size_t)a;
    *hi = k0 + (size_t)b;
}

/* the mask value flat query head fh adds to (i, j) */
static float mask_at(const fz_view *m, size_t hq, size_t fh, size_t i, size_t j)
{
    size_t b = m->t.batch > 1 ? fh / hq : 0;
    return VGET(m, b * m->t.heads + (m->t.heads > 1 ? fh % hq : 0), i, j);
}

/* row i of flat head fh: 2 when the rules leave it no key, 1 when a clean mask
 * hides every key they leave, 0 when it sees a key */
static int vis_empty(const fz_vis *V, size_t fh, size_t i)
{
    size_t lo, hi, j;
    vis_row(V, i, &lo, &hi);
    if (lo == hi) return 2;
    if (!V->mask) return 0;
    for (j = lo; j < hi; ++j)
        if (mask_at(V->mask, V->hq, fh, i, j) != -INFINITY) return 0;
    return 1;
}

/* the sink logit of flat head fh (-inf: none) */
static float vis_sink(const fz_vis *V, size_t fh)
{
    return V->sinks ? V->sinks[fh % V->hq] : -INFINITY;
}

/* rows of out that see no key are exactly zero (those the rules leave no key:
 * always; those a clean mask hides every key from: with fin); with want_range,
 * every element lies in the range of the visible v values (and 0, with a sink;
 * tolerance tol * max|V| of the head, plus the rounding of a 16-bit out) */
static void check_rows(const char *what, const fz_view *o, const fz_view *vv, const fz_vis *V, int fin,
                       int want_range, double tol)
{
    size_t h, i, c, j, grp = vheads(o) / vheads(vv), n = o->t.rows, nk = vv->t.rows;
    double tiny = o->t.dtype == FAVOR_F16 ? ldexp(1.0, -24) : 1e-30;
    if (is16(o)) tol += 2.0 * ldexp(1.0, o->t.dtype == FAVOR_F16 ? -11 : -8);
    for (h = 0; h < vheads(o); ++h) { /* flat heads: b * heads + h, grouped within each batch element */
        size_t g = h / grp;
        double M = 0.0;
        int sink = vis_sink(V, h) > -INFINITY;
        for (j = 0; want_range && j < nk; ++j)
            for (c = 0; c < vv->t.cols; ++c) M = fmax(M, fabs((double)VGET(vv, g, j, c)));
        for (i = 0; i < n; ++i) {
            size_t lo, hi;
            int e = vis_empty(V, h, i);
            vis_row(V, i, &lo, &hi);
            for (c = 0; c < o->t.cols; ++c) {
                double x = VGET(o, h, i, c), mn = sink ? 0.0 : INFINITY, mx = sink ? 0.0 : -INFINITY;
                if (e == 2 || (e == 1 && fin)) {
                    if (x != 0.0)
                        FZ_FAIL("%s: %s[%zu][%zu][%zu] = %g but the row sees no key%s", what, o->name,
                                h, i, c, x, e == 1 ? " (the mask hides them)" : "");
                    continue;
                }
                if (!want_range || e) continue;
                for (j = lo; j < hi; ++j) {
                    double y;
                    if (V->mask && mask_at(V->mask, V->hq, h, i, j) == -INFINITY) continue;
                    y = VGET(vv, g, j, c);
                    mn = fmin(mn, y);
                    mx = fmax(mx, y);
                }
                if (!(x >= mn - tol * M - tiny && x <= mx + tol * M + tiny))
                    FZ_FAIL("%s: %s[%zu][%zu][%zu] = %.9g outside the range [%.9g, %.9g] of the "
                            "visible values%s (tolerance %g * %g)", what, o->name, h, i, c, x, mn, mx,
                            sink ? " and 0 (a sink)" : "", tol, M);
            }
        }
    }
}

/* lse after a successful softmax forward: a row that sees no key has -inf, or
 * its head's sink logit exactly; with fin, a row that sees a key has more */
static void check_lse(const fz_view *lse, const fz_view *q, const fz_vis *V, int fin)
{
    size_t h, i;
    for (h = 0; h < vheads(q); ++h)
        for (i = 0; i < q->t.rows; ++i) {
            float l = ((const float *)lse->t.data)[h * q->t.rows + i], sk = vis_sink(V, h);
            int e = vis_empty(V, h, i);
            if (e == 2 || (e == 1 && fin)) {
                if (!(l == sk))
                    FZ_FAIL("softmax: lse[%zu][%zu] = %g for a row that sees no key (sink %g)", h, i, (double)l,
                            (double)sk);
            } else if (fin && e == 0 && l == -INFINITY) {
                FZ_FAIL("softmax: lse[%zu][%zu] = -inf for a row that sees keys", h, i);
            }
        }
}

/* after a successful backward: keys no row of their sequence can see (by the
 * rules) get zero dk and dv; always for the keys of a sequence without rows,
 * with fin for the others (a NaN elsewhere may reach them as 0 * NaN) */
static void check_key_grads(const char *what, const fz_view *dk, const fz_view *dv, const fz_view *q,
                            const fz_vis *V, int fin)
{
    size_t nk = dk->t.rows, n = q->t.rows, i, j, h, c, lo, hi;
    unsigned char *seen, *norow;
    if (!dk->mem_ok || !dv->mem_ok || !nk) return;
    seen = (unsigned char *)fz_alloc(nk);
    norow = (unsigned char *)fz_alloc(nk);
    memset(seen, 0, nk);
    memset(norow, 0, nk);
    for (i = 0; i < n; ++i) {
        vis_row(V, i, &lo, &hi);
        for (j = lo; j < hi; ++j) seen[j] = 1;
    }
    for (i = 0; V->seqs && i < V->seqs; ++i)
        if (V->sq[i] == V->sq[i + 1])
            for (j = V->sk[i]; j < V->sk[i + 1]; ++j) norow[j] = 1;
    for (j = 0; j < nk; ++j) {
        if (seen[j] || !(norow[j] || fin)) continue;
        for (h = 0; h < vheads(dk); ++h) {
            for (c = 0; c < dk->t.cols; ++c)
                if (VGET(dk, h, j, c) != 0.0f)
                    FZ_FAIL("%s: dk[%zu][%zu][%zu] = %g but no row sees key %zu", what, h, j, c,
                            (double)VGET(dk, h, j, c), j);
            for (c = 0; c < dv->t.cols; ++c)
                if (VGET(dv, h, j, c) != 0.0f)
                    FZ_FAIL("%s: dv[%zu][%zu][%zu] = %g but no row sees key %zu", what, h, j, c,
                            (double)VGET(dv, h, j, c), j);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Operations                                                               */
/* ------------------------------------------------------------------------ */
static void reset_call(void)
{
    g_nv = 0;
    g_nb = 0;
    g_have_f = 0;
    g_fbuf = -1;
    g_have_st = 0;
    g_stbuf = -1;
    g_malloc_fail = 0;
    g_malloc_calls = 0;
    g_twin_block = 0;
    g_call_batch_set = 0;
    g_call_batch = 0;
    g_ctxn = 0;
    g_ctx[0] = 0;
}


/* I12: the fp32 twin of a successful call with 16-bit tensors */

static int twin_wanted(void)
{
    int i;
    if (g_twin_block) return 0;
    for (i = 0; i < g_nv; ++i)
        if (g_v[i].used && g_v[i].mem_ok && is16(&g_v[i]) && (g_v[i].role == R_IN || g_v[i].role == R_OUT))
            return 1;
    return 0;
}

static float widen16(favor_dtype dt, uint16_t u) { return dt == FAVOR_F16 ? f16_to_f32(u) : bf16_to_f32(u); }

/* n floats of the 16-bit call (a) and of its twin (b): bit-identical, or both NaN */
static void twin_floats(const char *what, const char *name, const unsigned char *a, const unsigned char *b,
                        size_t n)
{
    size_t i;
    for (i = 0; i < n; ++i) {
        uint32_t x, y;
        memcpy(&x, a + 4 * i, 4);
        memcpy(&y, b + 4 * i, 4);
        if (x != y && !(isnan(bits2f(x)) && isnan(bits2f(y))))
            FZ_FAIL("%s: %s[%zu] = %.9g (%#010x) with 16-bit tensors but %.9g (%#010x) with fp32 copies of them",
                    what, name, i, (double)bits2f(x), (unsigned)x, (double)bits2f(y), (unsigned)y);
    }
}

/* After a successful call with 16-bit tensors (its results in the buffers, the
 * state struct at sptr; spre: the struct before the call), call again on the
 * inputs as they were, with each 16-bit tensor replaced by a packed fp32 copy
 * (inputs widened, outputs fresh), the same options with an allocated
 * workspace: it must succeed, and its outputs rounded into each output's type
 * must be the first call's bits (I12). The first call's results are put back. */
static void run_twin(const char *what, fz_call_fn fn, void *arg, fz_ocfg *oc, int want_finite, void *sptr,
                     const unsigned char *spre, size_t sbytes)
{
    unsigned char *keep[FZ_MAXB];
    favor_tensor orig[FZ_MAXV];
    size_t orig_es[FZ_MAXV];
    int swapped[FZ_MAXV], b, i;
    favor_state post;
    void *ws0 = oc ? oc->o.workspace : NULL;
    size_t sz0 = oc ? oc->o.workspace_size : 0;
    favor_status s;
    ++g_twins;
    for (b = 0; b < g_nb; ++b) {
        keep[b] = (unsigned char *)fz_alloc(buf_bytes(&g_b[b]));
        memcpy(keep[b], g_b[b].mem, buf_bytes(&g_b[b]));
    }
    restore_all(); /* inputs, outputs and the state as before the call */
    if (sbytes) {
        memcpy(&post, sptr, sizeof post);
        memcpy(sptr, spre, sbytes);
    }
    for (i = 0; i < g_nv; ++i) {
        fz_view *v = &g_v[i];
        size_t h, r, c, rows = v->t.rows, cols = v->t.cols;
        unsigned char *p;
        swapped[i] = v->used && v->mem_ok && is16(v) && (v->role == R_IN || v->role == R_OUT);
        if (!swapped[i]) continue;
        p = (unsigned char *)fz_alloc(vheads(v) * rows * cols * 4);
        for (h = 0; h < vheads(v); ++h)
            for (r = 0; r < rows; ++r)
                for (c = 0; c < cols; ++c) {
                    unsigned char *e = p + 4 * ((h * rows + r) * cols + c);
                    if (v->role == R_IN) {
                        float x = VGET(v, h, r, c);
                        memcpy(e, &x, 4);
                    } else {
                        uint32_t u = CANARY_OUT;
                        memcpy(e, &u, 4);
                    }
                }
        orig[i] = v->t;
        orig_es[i] = v->es;
        v->t.data = p;
        v->t.head_stride = rows * cols;
        v->t.row_stride = cols;
        if (v->t.batch > 1) v->t.batch_stride = v->t.heads * rows * cols; /* the same batch, packed */
        v->t.dtype = FAVOR_F32;
        v->es = 4;
    }
    if (oc) {
        oc->o.workspace = NULL;
        oc->o.workspace_size = 0;
    }
    dump_views("the fp32 twin");
    s = fn(arg);
    if (oc) {
        oc->o.workspace = ws0;
        oc->o.workspace_size = sz0;
    }
    if (s != FAVOR_OK)
        FZ_FAIL("%s succeeded with 16-bit tensors but fails with fp32 copies of them: %s", what, favor_status_string(s));
    for (i = 0; i < g_nv; ++i) {
        fz_view *v = &g_v[i];
        size_t h, r, c;
        if (!v->used || !v->mem_ok || v->role != R_OUT) continue;
        for (h = 0; h < vheads(v); ++h)
            for (r = 0; r < v->t.rows; ++r)
                for (c = 0; c < v->t.cols; ++c) {
                    float y = VGET(v, h, r, c);
                    if (is_canary(v, EAT(v, h, r, c)))
                        FZ_FAIL("%s with fp32 copies of its 16-bit tensors: %s[%zu][%zu][%zu] was never written",
                                what, v->name, h, r, c);
                    if (want_finite && !isfinite(y) && !(strcmp(v->name, "lse") == 0 && y == -INFINITY))
                        FZ_FAIL("%s with fp32 copies of its 16-bit tensors: finite inputs (|x| <= 1e4) but "
                                "%s[%zu][%zu][%zu] = %g", what, v->name, h, r, c, (double)y);
                    if (swapped[i]) {
                        const favor_tensor *o = &orig[i];
                        size_t at = v->off + tindex(o, h, r, c) * orig_es[i] / UNIT;
                        uint16_t got, want = narrow_to(o->dtype, y);
                        memcpy(&got, keep[v->buf] + UNIT * at, 2);
                        if (got != want && !(isnan(widen16(o->dtype, got)) && isnan(widen16(o->dtype, want))))
                            FZ_FAIL("%s: %s[%zu][%zu][%zu] (%s) = %#06x (%.9g) but the fp32 call on the widened "
                                    "inputs gives %.9g, which rounds to %#06x (%.9g)", what, v->name, h, r, c,
                                    dtype_name(o->dtype), (unsigned)got, (double)widen16(o->dtype, got),
                                    (double)y, (unsigned)want, (double)widen16(o->dtype, want));
                    } else {
                        twin_floats(what, v->name, keep[v->buf] + UNIT * elem_unit(v, h, r, c), EAT(v, h, r, c), 1);
                    }
                }
    }
    if (sbytes) { /* the state: S, z, c, the compensation and the pending block (not the scratch) */
        const favor_state *st = (const favor_state *)sptr;
        size_t H = post.heads, w = post.width, dv = post.dv;
        const float *base = (const float *)(const void *)g_b[g_stbuf].mem;
        struct { const char *name; const float *p; size_t n; } reg[5];
        int k;
        reg[0].name = "state S"; reg[0].p = post.s; reg[0].n = H * w * dv;
        reg[1].name = "state z"; reg[1].p = post.z; reg[1].n = H * w;
        reg[2].name = "state c"; reg[2].p = post.c; reg[2].n = H + 1;
        reg[3].name = "state comp"; reg[3].p = post.comp; reg[3].n = H * w * (dv + 1);
        reg[4].name = "state pend"; reg[4].p = post.pend; reg[4].n = H * 16 * (w + dv + 2);
        if (st->tokens != post.tokens)
            FZ_FAIL("%s: tokens %llu with 16-bit tensors, %llu with fp32 copies", what, post.tokens, st->tokens);
        for (k = 0; k < 5; ++k) {
            size_t at = 4 * (size_t)(reg[k].p - base);
            if (at + 4 * reg[k].n > buf_bytes(&g_b[g_stbuf])) FZ_FAIL("harness: state region outside its buffer");
            twin_floats(what, reg[k].name, keep[g_stbuf] + at, g_b[g_stbuf].mem + at, reg[k].n);
        }
        memcpy(sptr, &post, sizeof post);
    }
    for (i = 0; i < g_nv; ++i)
        if (swapped[i]) {
            g_v[i].t = orig[i];
            g_v[i].es = orig_es[i];
        }
    for (b = 0; b < g_nb; ++b) memcpy(g_b[b].mem, keep[b], buf_bytes(&g_b[b]));
}

/* One attention-like call with the snapshot / verdict / repeat protocol. */
static favor_status run_protocol(const char *what, fz_call_fn fn, void *arg, fz_verdict *vd,
                                 fz_ocfg *oc, int want_finite, int repeat, unsigned char *structs,
                                 const void *sptr, size_t sbytes)
{
    favor_status s;
    favor_features f_before;
    memcpy(&f_before, &g_f, sizeof g_f);
    mark_writable();
    snapshot_all();
    if (sbytes) memcpy(structs, sptr, sbytes);
    g_malloc_calls = 0;
    g_malloc_fail = oc ? oc->malloc_fail : 0;
    dump_views(what);
    s = fn(arg);
    g_malloc_fail = 0;
    report(what, s, vd->must_fail, vd->should_ok, want_finite);
    judge(what, s, vd, oc);
    if (!oc && g_malloc_calls) FZ_FAIL("%s called FAVOR_MALLOC", what);
    if (g_have_f && memcmp(&f_before, &g_f, sizeof g_f)) FZ_FAIL("%s changed the features struct", what);
    check_unchanged(s == FAVOR_OK, what);
    if (s != FAVOR_OK && sbytes && memcmp(structs, sptr, sbytes))
        FZ_FAIL("%s: a failed call changed a struct passed by pointer", what);
    if (s != FAVOR_OK) return s;
    check_outputs(what, want_finite);
    if (repeat && oc && !oc->ws_alias) {
        /* the same call with the other kind of workspace and other output garbage */
        void *ws0 = oc->o.workspace;
        size_t sz0 = oc->o.workspace_size;
        unsigned char *fresh = NULL;
        favor_status s2;
#ifdef _OPENMP
        int b2;
#endif
        keep_first();
        restore_all();
        if (sbytes) memcpy((void *)(uintptr_t)sptr, structs, sbytes);
        garble_outputs(999u + oc->ws_p);
        if (ws0) {
            oc->o.workspace = NULL;
            oc->o.workspace_size = 0;
        } else if (oc->use_opts && oc->ws_query) {
            fresh = (unsigned char *)fz_alloc(oc->ws_query + 3);
            fill_garbage(fresh, oc->ws_query + 3, 4242u);
            oc->o.workspace = fresh + 3;
            oc->o.workspace_size = oc->ws_query;
        }
        g_malloc_calls = 0;
        s2 = fn(arg);
        oc->o.workspace = ws0;
        oc->o.workspace_size = sz0;
        if (s2 != FAVOR_OK) FZ_FAIL("%s: the repeated call failed with %s", what, favor_status_string(s2));
        compare_first(what);
#ifdef _OPENMP
        /* I14 (OpenMP builds): 1, 2 and 3 threads (allocated workspaces, other
         * output garbage) give the first call's bits, as the manual says */
        if (oc->use_opts) {
            static const int tc[] = {1, 2, 3};
            int t, th0 = oc->o.threads;
            for (t = 0; t < 3; ++t) {
                restore_all();
                if (sbytes) memcpy((void *)(uintptr_t)sptr, structs, sbytes);
                garble_outputs(7001u + 17u * (unsigned)t);
                oc->o.threads = tc[t];
                oc->o.workspace = NULL;
                oc->o.workspace_size = 0;
                s2 = fn(arg);
                oc->o.threads = th0;
                oc->o.workspace = ws0;
                oc->o.workspace_size = sz0;
                if (s2 != FAVOR_OK)
                    FZ_FAIL("%s: the call with %d threads failed with %s", what, tc[t], favor_status_string(s2));
                for (b2 = 0; b2 < g_nb; ++b2) {
                    size_t k2;
                    if (g_b[b2].is_ws) continue;
                    for (k2 = 0; k2 < g_b[b2].len; ++k2)
                        if (memcmp(g_first[b2] + UNIT * k2, g_b[b2].mem + UNIT * k2, UNIT))
                            FZ_FAIL("%s: with %d threads instead of %d the result differs at bytes %zu..%zu of "
                                    "buffer %d", what, tc[t], th0, UNIT * k2, UNIT * k2 + 1, b2);
                }
                if (verbose()) fprintf(stderr, "favor_fuzz: %s with %d threads: the same bits\n", what, tc[t]);
            }
        }
#endif
    }
    if (twin_wanted()) run_twin(what, fn, arg, oc, want_finite, (void *)(uintptr_t)sptr, structs, sbytes);
    return s;
}

/* Causality: after a successful call whose rules hide keys (causal, a window,
 * packed sequences), give the keys and values from token `cut` on other values
 * (finite, or with flag 0x80 NaN and inf: FINDING-2) and call again; every
 * output row whose keys (by the rules: vis_row) all lie before `cut` must come
 * out the same (==, so -0 and +0 match; NaN where it was NaN). */
static void check_causality(const char *what, fz_call_fn fn, void *arg, const fz_view *o,
                            const fz_view *k, const fz_view *v, const fz_view *gates, unsigned hflags,
                            const fz_vis *V)
{
    size_t n = o->t.rows, nk = k->t.rows, cut, h, i, j, c, len = vheads(o) * n * o->t.cols;
    float *before;
    favor_status s;
    int i2;
    if (!len || !nk || !k->mem_ok || !v->mem_ok || k->buf == v->buf) return;
    for (i2 = 0; i2 < g_nv; ++i2) /* k and v alone in their buffers: nothing else changes */
        if (&g_v[i2] != k && &g_v[i2] != v && g_v[i2].mem_ok && (g_v[i2].buf == k->buf || g_v[i2].buf == v->buf))
            return;
    cut = (hflags >> 3) % nk;
    /* the log-gates from the cut on too (other valid values: -80 and 0 with
     * flag 0x80), when they are alone in their buffer: a row at position p
     * reads the gates of positions up to p only */
    if (gates && gates->used && gates->mem_ok && gates->t.rows == nk && gates->buf != k->buf &&
        gates->buf != v->buf && vheads(gates) == vheads(k)) {
        for (i2 = 0; i2 < g_nv; ++i2)
            if (&g_v[i2] != gates && g_v[i2].mem_ok && g_v[i2].buf == gates->buf) break;
        if (i2 < g_nv) gates = NULL;
    } else {
        gates = NULL;
    }
    for (h = 0; gates && h < vheads(gates); ++h)
        for (j = cut; j < nk; ++j)
            VSET(gates, h, j, 0, (hflags & 0x80) ? ((j & 1) ? -80.0f : 0.0f) : -0.25f * (float)((j + h) % 4));
    before = (float *)fz_alloc(len * sizeof(float));
    for (h = 0; h < vheads(o); ++h)
        for (i = 0; i < n; ++i)
            for (c = 0; c < o->t.cols; ++c) before[(h * n + i) * o->t.cols + c] = VGET(o, h, i, c);
    for (h = 0; h < vheads(k); ++h)
        for (j = cut; j < nk; ++j) {
            for (c = 0; c < k->t.cols; ++c) {
                float x = VGET(k, h, j, c);
                VSET(k, h, j, c, (hflags & 0x80) && c == 1 ? (j & 1 ? -INFINITY : NAN)
                                 : 0.5f - 0.25f * (float)((j + c + h) % 5) + (x > 0.0f ? 0.125f : 0.0f));
            }
            for (c = 0; c < v->t.cols; ++c) {
                float x = VGET(v, h, j, c);
                VSET(v, h, j, c, (hflags & 0x80) && c == 0 ? (j & 1 ? INFINITY : NAN)
                                 : 1.0f + (float)((3 * j + c + h) % 7) - (x > 0.0f ? 9.0f : 0.0f));
            }
        }
    s = fn(arg);
    if (s != FAVOR_OK) FZ_FAIL("%s: the call with other later tokens failed: %s", what, favor_status_string(s));
    for (h = 0; h < vheads(o); ++h)
        for (i = 0; i < n; ++i) {
            size_t lo, hi;
            vis_row(V, i, &lo, &hi);
            if (hi > cut) continue;
            for (c = 0; c < o->t.cols; ++c) {
                float x = before[(h * n + i) * o->t.cols + c], y = VGET(o, h, i, c);
                if (!(x == y || (isnan(x) && isnan(y))))
                    FZ_FAIL("%s: out[%zu][%zu][%zu] (sees keys %zu..%zu) changed from %.9g to %.9g when "
                            "keys/values%s from %zu on changed", what, h, i, c, lo, hi, (double)x,
                            (double)y, gates ? " and log-gates" : "", cut);
            }
        }
}

/* ---- op 0: softmax forward ---- */
typedef struct {
    fz_view *q, *k, *v, *o, *lse;
    fz_ocfg *oc;
} fz_sm_args;

static favor_status call_softmax(void *p)
{
    fz_sm_args *a = (fz_sm_args *)p;
    a->oc->o.lse = a->lse && a->lse->mem_ok ? a->lse->t.data : NULL;
    bind_sv(a->oc);
    return favor_softmax_attention(T(a->q), T(a->k), T(a->v), T(a->o), a->oc->use_opts ? &a->oc->o : NULL);
}

/* lse as a range view (R_OUT for the forward, R_LSE_IN for the backward):
 * mode 0 NULL, 1 its own buffer, 2 aliased onto a tensor, 3 its own (and, for the
 * backward, written by the forward first) */
static fz_view *add_lse(fz_ocfg *oc, int role, size_t count)
{
    fz_view *v;
    if (oc->lse_mode == 0 || !oc->use_opts) return NULL;
    if (oc->lse_mode == 2) {
        int i, cand[FZ_MAXV], nc = 0;
        for (i = 0; i < g_nv; ++i)
            if (g_v[i].mem_ok && g_v[i].buf >= 0 && view_units(&g_v[i]) >= 2 * count + g_v[i].off % 2)
                cand[nc++] = i; /* lse: floats at a 4-byte aligned offset in the view */
        if (nc) {
            i = cand[oc->lse_p % nc];
            v = add_range_view("lse", role, g_v[i].buf, g_v[i].off + g_v[i].off % 2, count);
            v->mem_ok = count > 0;
            ctx("[lse aliased onto %s] ", g_v[i].name);
            return v;
        }
    }
    v = add_range_view("lse", role, new_buf(2 * count), 0, count);
    alloc_buf(v->buf);
    v->mem_ok = count > 0;
    return v;
}

static void finish_range_views(void)
{
    int i;
    for (i = 0; i < g_nv; ++i)
        if (g_v[i].buf >= 0 && g_v[i].mem_ok && !g_v[i].t.data)
            g_v[i].t.data = g_b[g_v[i].buf].mem + g_v[i].off * UNIT;
}

/* the inputs of every attention call: q (hq x n x d), k (hkv x nk x d), v (hkv x nk x dv) */
static void add_qkv(fz_rd *r, const fz_shape *sh, size_t n, size_t nk, fz_view **q, fz_view **k, fz_view **v)
{
    *q = add_view(r, "q", R_IN, sh->hq, n, sh->d);
    *k = add_view(r, "k", R_IN, sh->hkv, nk, sh->d);
    *v = add_view(r, "v", R_IN, sh->hkv, nk, sh->dv);
}

/* lay the views out in their buffers, point the range views at theirs, fill the payloads */
static void place_views(fz_rd *r)
{
    layout_views();
    finish_range_views();
    fill_views(r);
}

/* the same with the variant buffers (alibi, sinks, dsinks of q's heads), the
 * gated ones (decay of k's heads) and their values */
static void place_views_sv(fz_rd *r, fz_ocfg *oc, const fz_view *q, size_t hq, const fz_view *k, size_t hkv)
{
    layout_views();
    add_sv_ranges(oc, q->mem_ok ? q->t.heads : hq, 0);
    add_gt_ranges(oc, k, hkv);
    finish_range_views();
    fill_views(r);
    fill_sv(r, oc);
    fill_gt(r, oc);
    bind_sv(oc);
    bind_gt(oc);
}

static void op_softmax(fz_rd *r, unsigned hflags)
{
    fz_shape sh;
    fz_ocfg oc;
    fz_sm_args a;
    fz_verdict vd = {0, 1, NULL, 0, 0, NULL};
    size_t query, lse_n;
    int fin;
    favor_status s;
    ctx("softmax_attention ");
    dec_shape(r, &sh);
    dec_ocfg(r, &oc);
    add_qkv(r, &sh, sh.n, sh.nk, &a.q, &a.k, &a.v);
    a.o = add_view(r, "out", R_OUT, sh.hq, sh.n, sh.dv);
    add_sv_views(r, &oc, sh.hq, sh.n, sh.nk);
    add_gt_views(r, &oc, sh.hkv, sh.nk, GK_SOFTMAX);
    a.oc = &oc;
    layout_views();
    lse_n = a.q->mem_ok ? vheads(a.q) * a.q->t.rows : 0; /* [batch][heads_q][n] */
    a.lse = add_lse(&oc, R_OUT, lse_n);
    add_sv_ranges(&oc, a.q->mem_ok ? a.q->t.heads : sh.hq, 0);
    add_gt_ranges(&oc, a.k, sh.hkv);
    finish_range_views();
    fill_views(r);
    fill_sv(r, &oc);
    fill_gt(r, &oc);
    bind_sv(&oc);
    bind_gt(&oc);
    query = favor_softmax_attention_workspace(T(a.q), T(a.k), T(a.v), oc.use_opts ? &oc.o : NULL);
    verdict_call(&vd, &oc, query);
    verdict_mismatch(&vd, a.q->mem_ok && a.k->mem_ok && a.v->mem_ok && a.o->mem_ok &&
                          !qkvo_shape_ok(&a.q->t, &a.k->t, &a.v->t, &a.o->t));
    if (oc.lse_mode != 0 && oc.use_opts && !a.lse) vd.should_ok = 0;
    verdict_sv(&vd, &oc, a.q, a.k, 1, 0);
    verdict_gt(&vd, &oc, NULL, a.k);
    verdict_ws(&vd, &oc, query);
    {
        fz_view *ord[4];
        ord[0] = a.q; ord[1] = a.k; ord[2] = a.v; ord[3] = a.o;
        verdict_dtype(&vd, ord, NULL, 4, any_nullptr(ord, 4));
    }
    fin = all_inprom() && scale_in_promise(oc.use_opts ? oc.o.scale : 0.0f);
    s = run_protocol("favor_softmax_attention", call_softmax, &a, &vd, &oc, fin, hflags & 1, NULL, NULL, 0);
    if (s == FAVOR_OK) {
        fz_vis V;
        vis_make(&V, &oc, a.q, a.k, 1);
        /* (FINDING-2, fixed in c993bf1: a NaN/inf value a row cannot see used to
         * reach it as 0 * v; rows that see no key are zero whatever v holds.) */
        check_rows("favor_softmax_attention", a.o, a.v, &V, fin, fin, 4e-5);
        if (a.lse && a.lse->mem_ok) check_lse(a.lse, a.q, &V, fin); /* -inf (or the sink) for no key */
        /* last: it changes the inputs */
        if (V.restricts && (hflags & 4))
            check_causality("favor_softmax_attention", call_softmax, &a, a.o, a.k, a.v, NULL, hflags, &V);
    }
}

/* ---- op 1: softmax backward ---- */
typedef struct {
    fz_view *q, *k, *v, *o, *g, *dq, *dk, *dv, *lse;
    fz_ocfg *oc;
} fz_smb_args;

static favor_status call_softmax_bwd(void *p)
{
    fz_smb_args *a = (fz_smb_args *)p;
    a->oc->o.lse = a->lse && a->lse->mem_ok ? a->lse->t.data : NULL;
    bind_sv(a->oc);
    return favor_softmax_attention_backward(T(a->q), T(a->k), T(a->v), T(a->o), T(a->g), T(a->dq),
                                            T(a->dk), T(a->dv), a->oc->use_opts ? &a->oc->o : NULL);
}

static void op_softmax_bwd(fz_rd *r, unsigned hflags)
{
    fz_shape sh;
    fz_ocfg oc;
    fz_smb_args a;
    fz_verdict vd = {0, 1, NULL, 0, 0, NULL};
    size_t query, lse_n;
    int fin, consistent = 0, upper;
    favor_tensor q16;
    const favor_tensor *qq;
    favor_status s;
    ctx("softmax_attention_backward ");
    dec_shape(r, &sh);
    dec_ocfg(r, &oc);
    add_qkv(r, &sh, sh.n, sh.nk, &a.q, &a.k, &a.v);
    a.o = add_view(r, "out", R_IN, sh.hq, sh.n, sh.dv);
    a.g = add_view(r, "dout", R_IN, sh.hq, sh.n, sh.dv);
    a.dq = add_view(r, "dq", R_OUT, sh.hq, sh.n, sh.d);
    a.dk = add_view(r, "dk", R_OUT, sh.hkv, sh.nk, sh.d);
    a.dv = add_view(r, "dv", R_OUT, sh.hkv, sh.nk, sh.dv);
    add_sv_views(r, &oc, sh.hq, sh.n, sh.nk);
    add_gt_views(r, &oc, sh.hkv, sh.nk, GK_SOFTMAX);
    a.oc = &oc;
    layout_views();
    lse_n = a.q->mem_ok ? vheads(a.q) * a.q->t.rows : 0; /* [batch][heads_q][n] */
    a.lse = add_lse(&oc, R_LSE_IN, lse_n);
    add_sv_ranges(&oc, a.q->mem_ok ? a.q->t.heads : sh.hq, 1);
    add_gt_ranges(&oc, a.k, sh.hkv);
    finish_range_views();
    fill_views(r);
    fill_sv(r, &oc);
    fill_gt(r, &oc);
    bind_sv(&oc);
    bind_gt(&oc);
    if (a.lse && a.lse->mem_ok) { /* lse floats as a payload: in promise only when consistent */
        size_t i;
        for (i = 0; i < lse_n; ++i) ((float *)a.lse->t.data)[i] = gen_value(r, a.lse, i & 7);
        a.lse->inprom = 0;
    }
    if ((hflags & 2) && a.q->mem_ok && a.k->mem_ok && a.v->mem_ok && a.o->mem_ok) {
        /* out (and lse) from the forward, as a training step would have them */
        favor_options fo = favor_default_options();
        if (oc.use_opts) { /* every option of the call: flags, scale, the variants, the sequences */
            fo = oc.o;
            fo.workspace = NULL;
            fo.workspace_size = 0;
            fo.error = NULL;
            fo.error_size = 0;
            fo.dsinks = NULL;
            if (fo.threads < 0) fo.threads = 0;
        }
        fo.lse = a.lse && a.lse->mem_ok ? a.lse->t.data : NULL;
        if (favor_softmax_attention(&a.q->t, &a.k->t, &a.v->t, &a.o->t, &fo) == FAVOR_OK) {
            consistent = 1;
            set_promises(); /* out, and any view over its bytes (dout), changed */
            if (a.lse) a.lse->inprom = 1;
            ctx("[out, lse from the forward] ");
        }
    }
    {
        fz_view *rest[5];
        rest[0] = a.o; rest[1] = a.g; rest[2] = a.dq; rest[3] = a.dk; rest[4] = a.dv;
        qq = bwd_query_q(&q16, &upper, 1, a.q, a.k, a.v, rest, 5);
    }
    query = favor_softmax_attention_backward_workspace(qq, T(a.k), T(a.v), oc.use_opts ? &oc.o : NULL);
    verdict_call(&vd, &oc, query);
    verdict_mismatch(&vd, a.q->mem_ok && a.k->mem_ok && a.v->mem_ok && a.o->mem_ok && a.g->mem_ok &&
                          a.dq->mem_ok && a.dk->mem_ok && a.dv->mem_ok &&
                          !(qkvo_shape_ok(&a.q->t, &a.k->t, &a.v->t, &a.g->t) && same_shape(&a.o->t, &a.g->t) &&
                            same_shape(&a.dq->t, &a.q->t) && same_shape(&a.dk->t, &a.k->t) &&
                            same_shape(&a.dv->t, &a.v->t)));
    if (oc.lse_mode != 0 && oc.use_opts && !a.lse) vd.should_ok = 0;
    verdict_sv(&vd, &oc, a.q, a.k, 1, 1);
    verdict_gt(&vd, &oc, NULL, a.k);
    verdict_bwd_ws(&vd, &oc, upper);
    verdict_ws(&vd, &oc, query);
    { /* q, k, v, dout, out, then the input shapes, then each gradient and its shape */
        fz_view *ord[8];
        int gate[8] = {0};
        ord[0] = a.q; ord[1] = a.k; ord[2] = a.v; ord[3] = a.g; ord[4] = a.o;
        ord[5] = a.dq; ord[6] = a.dk; ord[7] = a.dv;
        gate[5] = !(qkvo_shape_ok(&a.q->t, &a.k->t, &a.v->t, &a.g->t) && same_shape(&a.o->t, &a.g->t));
        gate[6] = !same_shape(&a.dq->t, &a.q->t);
        gate[7] = !same_shape(&a.dk->t, &a.k->t);
        verdict_dtype(&vd, ord, gate, 8, any_nullptr(ord, 8));
    }
    fin = all_inprom() && scale_in_promise(oc.use_opts ? oc.o.scale : 0.0f) &&
          (!a.lse || !a.lse->mem_ok || consistent);
    s = run_protocol("favor_softmax_attention_backward", call_softmax_bwd, &a, &vd, &oc, fin,
                     hflags & 1, NULL, NULL, 0);
    if (s == FAVOR_OK && qq == &q16)
        check_plain_query("favor_softmax_attention_backward", call_softmax_bwd, &a, &oc,
                                  favor_softmax_attention_backward_workspace(T(a.q), T(a.k), T(a.v), &oc.o));
    if (s == FAVOR_OK && fin) { /* a row that sees no key has no gradient, nor a key no row sees */
        fz_vis V;
        vis_make(&V, &oc, a.q, a.k, 1);
        check_rows("favor_softmax_attention_backward", a.dq, a.k, &V, fin, 0, 0.0);
        check_key_grads("favor_softmax_attention_backward", a.dk, a.dv, a.q, &V, fin);
    }
}

/* ---- op 2: linear forward ---- */
typedef struct {
    fz_view *q, *k, *v, *o;
    fz_ocfg *oc;
    favor_features *f;
} fz_lin_args;

static favor_status call_linear(void *p)
{
    fz_lin_args *a = (fz_lin_args *)p;
    return favor_linear_attention(a->f, T(a->q), T(a->k), T(a->v), T(a->o), a->oc->use_opts ? &a->oc->o : NULL);
}

static float lin_scale(const fz_ocfg *oc)
{
    return oc->use_opts && oc->o.scale > 0.0f ? oc->o.scale : g_f.scale;
}

static void verdict_features(fz_verdict *vd, const favor_features *f, size_t d)
{
    if (!f) { vd->must_fail = 1; vd->why_fail = "features NULL"; return; }
    if (!feat_valid(f)) { vd->must_fail = 1; vd->why_fail = "bad features"; return; }
    if (d != f->dim) { vd->must_fail = 1; vd->why_fail = "d != f->dim"; }
}

/* make the features of c and add W's views; 1 when the call is to get f = NULL */
static int use_features(const fz_fcfg *c)
{
    make_features(c);
    add_w_views();
    return (c->mut % 16) == 15 && (c->mutp & 1);
}

/* decode what a linear attention call takes besides its tensors */
static int dec_linear(fz_rd *r, fz_shape *sh, fz_fcfg *fc, fz_ocfg *oc)
{
    dec_shape(r, sh);
    dec_fcfg(r, fc, sh->d);
    dec_ocfg(r, oc);
    return use_features(fc);
}

/* an ignored lse (linear attention ignores opts->lse): it must stay untouched */
static void add_ignored_lse(fz_ocfg *oc)
{
    if (oc->use_opts && oc->lse_mode) {
        fz_view *v = add_range_view("ignored-lse", R_IGN, new_buf(14), 0, 7);
        alloc_buf(v->buf);
        v->used = 0;
        v->t.data = (float *)(void *)g_b[v->buf].mem;
        oc->o.lse = v->t.data;
    }
}

static void op_linear(fz_rd *r, unsigned hflags)
{
    fz_shape sh;
    fz_ocfg oc;
    fz_fcfg fc;
    fz_lin_args a;
    fz_verdict vd = {0, 1, NULL, 0, 0, NULL};
    size_t query;
    int fin, fnull;
    favor_status s;
    ctx("linear_attention ");
    fnull = dec_linear(r, &sh, &fc, &oc);
    add_qkv(r, &sh, sh.n, sh.nk, &a.q, &a.k, &a.v);
    a.o = add_view(r, "out", R_OUT, sh.hq, sh.n, sh.dv);
    add_sv_views(r, &oc, sh.hq, sh.n, sh.nk);
    add_gt_views(r, &oc, sh.hkv, sh.nk, GK_LIN);
    a.oc = &oc;
    a.f = fnull ? NULL : &g_f;
    place_views_sv(r, &oc, a.q, sh.hq, a.k, sh.hkv);
    add_ignored_lse(&oc);
    query = favor_linear_attention_workspace(a.f, T(a.q), T(a.k), T(a.v), oc.use_opts ? &oc.o : NULL);
    verdict_call(&vd, &oc, query);
    verdict_features(&vd, a.f, a.q->t.cols);
    verdict_mismatch(&vd, a.q->mem_ok && a.k->mem_ok && a.v->mem_ok && a.o->mem_ok &&
                          !qkvo_shape_ok(&a.q->t, &a.k->t, &a.v->t, &a.o->t));
    verdict_sv(&vd, &oc, a.q, a.k, 0, 0);
    verdict_gt(&vd, &oc, a.f, a.k);
    verdict_ws(&vd, &oc, query);
    {
        fz_view *ord[4];
        ord[0] = a.q; ord[1] = a.k; ord[2] = a.v; ord[3] = a.o;
        verdict_dtype(&vd, ord, NULL, 4, !a.f || any_nullptr(ord, 4));
    }
    fin = all_inprom() && feat_valid(&g_f) && scale_in_promise(lin_scale(&oc)) && gt_fin_ok(&oc, &g_f);
    s = run_protocol("favor_linear_attention", call_linear, &a, &vd, &oc, fin, hflags & 1,
                     NULL, NULL, 0);
    if (s == FAVOR_OK) {
        /* a convex combination of the visible values: positive features,
         * normalized (decay and gates only scale the weights) */
        int positive = g_f.kernel != FAVOR_TRIG && g_f.kernel != FAVOR_IDENTITY && !gt_nonorm(&oc);
        int range = fin && positive && all_nice() && lin_scale(&oc) <= 1.0f;
        fz_vis V;
        vis_make(&V, &oc, a.q, a.k, 0);
        check_rows("favor_linear_attention", a.o, a.v, &V, fin, range, 1e-3);
        if (V.restricts && (hflags & 4))
            check_causality("favor_linear_attention", call_linear, &a, a.o, a.k, a.v,
                            oc.o.gates ? oc.gates : NULL, hflags, &V);
    }
}

/* ---- op 3: linear backward ---- */
typedef struct {
    fz_view *q, *k, *v, *g, *dq, *dk, *dv;
    fz_ocfg *oc;
    favor_features *f;
} fz_linb_args;

static favor_status call_linear_bwd(void *p)
{
    fz_linb_args *a = (fz_linb_args *)p;
    return favor_linear_attention_backward(a->f, T(a->q), T(a->k), T(a->v), T(a->g), T(a->dq), T(a->dk),
                                           T(a->dv), a->oc->use_opts ? &a->oc->o : NULL);
}

static void op_linear_bwd(fz_rd *r, unsigned hflags)
{
    fz_shape sh;
    fz_ocfg oc;
    fz_fcfg fc;
    fz_linb_args a;
    fz_verdict vd = {0, 1, NULL, 0, 0, NULL};
    size_t query;
    int fin, fnull, upper;
    favor_tensor q16;
    const favor_tensor *qq;
    favor_status s;
    ctx("linear_attention_backward ");
    fnull = dec_linear(r, &sh, &fc, &oc);
    add_qkv(r, &sh, sh.n, sh.nk, &a.q, &a.k, &a.v);
    a.g = add_view(r, "dout", R_IN, sh.hq, sh.n, sh.dv);
    a.dq = add_view(r, "dq", R_OUT, sh.hq, sh.n, sh.d);
    a.dk = add_view(r, "dk", R_OUT, sh.hkv, sh.nk, sh.d);
    a.dv = add_view(r, "dv", R_OUT, sh.hkv, sh.nk, sh.dv);
    add_sv_views(r, &oc, sh.hq, sh.n, sh.nk);
    add_gt_views(r, &oc, sh.hkv, sh.nk, GK_LINB);
    a.oc = &oc;
    a.f = fnull ? NULL : &g_f;
    place_views_sv(r, &oc, a.q, sh.hq, a.k, sh.hkv);
    add_ignored_lse(&oc);
    {
        fz_view *rest[4];
        rest[0] = a.g; rest[1] = a.dq; rest[2] = a.dk; rest[3] = a.dv;
        qq = bwd_query_q(&q16, &upper, 0, a.q, a.k, a.v, rest, 4);
    }
    query = favor_linear_attention_backward_workspace(a.f, qq, T(a.k), T(a.v), oc.use_opts ? &oc.o : NULL);
    verdict_call(&vd, &oc, query);
    verdict_features(&vd, a.f, a.q->t.cols);
    verdict_mismatch(&vd, a.q->mem_ok && a.k->mem_ok && a.v->mem_ok && a.g->mem_ok && a.dq->mem_ok &&
                          a.dk->mem_ok && a.dv->mem_ok &&
                          !(qkvo_shape_ok(&a.q->t, &a.k->t, &a.v->t, &a.g->t) && same_shape(&a.dq->t, &a.q->t) &&
                            same_shape(&a.dk->t, &a.k->t) && same_shape(&a.dv->t, &a.v->t)));
    verdict_sv(&vd, &oc, a.q, a.k, 0, 1);
    verdict_gt(&vd, &oc, a.f, a.k);
    verdict_bwd_ws(&vd, &oc, upper);
    verdict_ws(&vd, &oc, query);
    { /* f, then q, k, v, dout, the input shapes, each gradient and its shape */
        fz_view *ord[7];
        int gate[7] = {0};
        ord[0] = a.q; ord[1] = a.k; ord[2] = a.v; ord[3] = a.g;
        ord[4] = a.dq; ord[5] = a.dk; ord[6] = a.dv;
        gate[4] = !qkvo_shape_ok(&a.q->t, &a.k->t, &a.v->t, &a.g->t);
        gate[5] = !same_shape(&a.dq->t, &a.q->t);
        gate[6] = !same_shape(&a.dk->t, &a.k->t);
        verdict_dtype(&vd, ord, gate, 7, !a.f || any_nullptr(ord, 7));
    }
    fin = all_inprom() && feat_valid(&g_f) && scale_in_promise(lin_scale(&oc)) && gt_fin_ok(&oc, &g_f);
    s = run_protocol("favor_linear_attention_backward", call_linear_bwd, &a, &vd, &oc, fin,
                     hflags & 1, NULL, NULL, 0);
    if (s == FAVOR_OK && qq == &q16)
        check_plain_query("favor_linear_attention_backward", call_linear_bwd, &a, &oc,
                                  favor_linear_attention_backward_workspace(a.f, T(a.q), T(a.k), T(a.v), &oc.o));
    if (s == FAVOR_OK) { /* rows that see no key, keys no row sees: zero gradients, always */
        fz_vis V;
        vis_make(&V, &oc, a.q, a.k, 0);
        if (V.restricts) {
            check_rows("favor_linear_attention_backward", a.dq, a.k, &V, 0, 0, 0.0);
            check_key_grads("favor_linear_attention_backward", a.dk, a.dv, a.q, &V, 0);
        }
        if (a.k->mem_ok) check_dgates_first("favor_linear_attention_backward", &oc, a.k->t.rows);
    }
}

/* ---- op 4: feature map ---- */
typedef struct {
    fz_view *x, *phi;
    favor_features *f;
    favor_role role;
} fz_fm_args;

static favor_status call_fmap(void *p)
{
    fz_fm_args *a = (fz_fm_args *)p;
    return favor_feature_map(a->f, T(a->x), T(a->phi), a->role);
}

/* FAVOR_IDENTITY's map is phi(x) = sqrt(s) x: within the roundings of sqrt(s),
 * the product and phi's type (finite values only) */
static void check_identity_map(const fz_view *x, const fz_view *phi, float scale)
{
    double sq = sqrt((double)scale), rel, tiny, top;
    size_t h, r, c;
    if (!x->mem_ok || !phi->mem_ok || phi->t.cols != x->t.cols || vheads(phi) != vheads(x)) return;
    rel = !is16(phi) ? 4e-7 : phi->t.dtype == FAVOR_F16 ? ldexp(1.0, -10) : ldexp(1.0, -7);
    tiny = !is16(phi) ? ldexp(1.0, -148) : phi->t.dtype == FAVOR_F16 ? ldexp(1.0, -24) : ldexp(1.0, -132);
    top = phi->t.dtype == FAVOR_F16 ? 65504.0 : (double)FLT_MAX;
    for (h = 0; h < vheads(x); ++h)
        for (r = 0; r < x->t.rows; ++r)
            for (c = 0; c < x->t.cols; ++c) {
                double xv = VGET(x, h, r, c), want = sq * xv, got = VGET(phi, h, r, c);
                if (!isfinite(xv) || !(fabs(want) < top * (1.0 - rel))) continue;
                if (!(fabs(got - want) <= rel * fabs(want) + tiny))
                    FZ_FAIL("favor_feature_map (FAVOR_IDENTITY, scale %g): phi[%zu][%zu][%zu] = %.9g, but sqrt(s) x "
                            "= %.9g", (double)scale, h, r, c, got, want);
            }
}

static void op_feature_map(fz_rd *r, unsigned hflags)
{
    fz_shape sh;
    fz_fcfg fc;
    fz_fm_args a;
    fz_verdict vd = {0, 1, NULL, 0, 0, NULL};
    unsigned rb;
    int fin, fnull;
    size_t w;
    favor_status s;
    ctx("feature_map ");
    dec_shape(r, &sh);
    dec_fcfg(r, &fc, sh.d);
    rb = rd8(r);
    a.role = rb < 240 ? (favor_role)(rb % 3) : (favor_role)(rb == 240 ? 3 : rb == 241 ? -1 : rb == 242 ? INT_MAX : 7);
    fnull = use_features(&fc);
    w = feat_width(&g_f);
    if (!w) w = sh.d;
    a.x = add_view(r, "x", R_IN, sh.hq, sh.n, sh.d);
    a.phi = add_view(r, "phi", R_OUT, sh.hq, sh.n, w);
    a.f = fnull ? NULL : &g_f;
    ctx("role=%d ", (int)a.role);
    place_views(r);
    verdict_views(&vd);
    verdict_features(&vd, a.f, a.x->t.cols);
    if (a.role != FAVOR_QUERY && a.role != FAVOR_KEY && a.role != FAVOR_PLAIN) {
        vd.must_fail = 1;
        vd.why_fail = "bad role";
    }
    verdict_mismatch(&vd, a.x->mem_ok && a.phi->mem_ok &&
                          !(a.phi->t.cols == feat_width(&g_f) && a.x->t.heads == a.phi->t.heads &&
                            a.x->t.rows == a.phi->t.rows && tnb(&a.x->t) == tnb(&a.phi->t)));
    { /* f, x, phi (NULL), then the features, then x, phi */
        fz_view *ord[2];
        ord[0] = a.x; ord[1] = a.phi;
        verdict_dtype(&vd, ord, NULL, 2, !a.f || !feat_valid(&g_f) || any_nullptr(ord, 2));
    }
    fin = all_inprom() && feat_valid(&g_f) && scale_in_promise(g_f.scale) && a.role != FAVOR_PLAIN;
    s = run_protocol("favor_feature_map", call_fmap, &a, &vd, NULL, fin, 0, NULL, NULL, 0);
    if (s == FAVOR_OK && (int)g_f.kernel == FAVOR_IDENTITY) check_identity_map(a.x, a.phi, g_f.scale);
    (void)hflags;
}

/* ---- op 5: the recurrent state ---- */
/* The least favor_state_floats() can be: S, z, c per head and the step scratch
 * (the manual's formula has changed as the state grew; see favor.h) */
#define FZ_STATE_FLOATS_MIN(heads, w, dv) ((heads) * ((w) * ((dv) + 1) + 1) + 3 * (w) + 5)

typedef struct {
    fz_view *q, *k, *v, *o;
    fz_ocfg *oc;
    favor_features *f;
    favor_state *st;
    int step;
    int ex; /* a step through favor_linear_step_ex (with the options) */
} fz_ext_args;

static favor_status call_extend(void *p)
{
    fz_ext_args *a = (fz_ext_args *)p;
    if (a->step && a->ex)
        return favor_linear_step_ex(a->f, a->st, T(a->q), T(a->k), T(a->v), T(a->o),
                                    a->oc->use_opts ? &a->oc->o : NULL);
    if (a->step) return favor_linear_step(a->f, a->st, T(a->q), T(a->k), T(a->v), T(a->o));
    return favor_linear_extend(a->f, a->st, T(a->q), T(a->k), T(a->v), T(a->o), a->oc->use_opts ? &a->oc->o : NULL);
}

static void check_state_contents(const favor_state *st, int fresh, int want_finite, const char *what)
{
    size_t i, ns = st->heads * st->width * st->dv, nz = st->heads * st->width;
    for (i = 0; i < ns; ++i) {
        if (fresh && st->s[i] != 0.0f) FZ_FAIL("%s: state S[%zu] = %g, not 0", what, i, (double)st->s[i]);
        if (want_finite && !isfinite(st->s[i])) FZ_FAIL("%s: finite inputs but state S[%zu] = %g", what, i, (double)st->s[i]);
    }
    for (i = 0; i < nz; ++i) {
        if (fresh && st->z[i] != 0.0f) FZ_FAIL("%s: state z[%zu] = %g, not 0", what, i, (double)st->z[i]);
        if (want_finite && !isfinite(st->z[i])) FZ_FAIL("%s: finite inputs but state z[%zu] = %g", what, i, (double)st->z[i]);
    }
    /* c[heads]: the tokens favor_linear_step holds in the pending block, not yet
       folded into S and z (a whole number below 16; 0 after an extend) */
    {
        float p = st->c[st->heads];
        if (!(p >= 0.0f && p < 16.0f && p == (float)(size_t)p) || (double)p > (double)st->tokens)
            FZ_FAIL("%s: pending count %g after %llu tokens", what, (double)p, st->tokens);
        if (fresh && p != 0.0f) FZ_FAIL("%s: pending count %g, not 0", what, (double)p);
        for (i = 0; i < st->heads; ++i) {
            if (fresh && st->c[i] != -INFINITY) FZ_FAIL("%s: state c[%zu] = %g, not -inf", what, i, (double)st->c[i]);
            if (want_finite && !fresh && (double)st->tokens > (double)p && !isfinite(st->c[i]))
                FZ_FAIL("%s: finite inputs but state c[%zu] = %g after %llu tokens (%g pending)", what, i,
                        (double)st->c[i], st->tokens, (double)p);
        }
        for (i = 0; want_finite && i < st->heads * 16 * (st->width + st->dv + 1); ++i)
            if (!isfinite(st->pend[i])) FZ_FAIL("%s: finite inputs but pending[%zu] = %g", what, i, (double)st->pend[i]);
    }
    if (fresh && st->tokens) FZ_FAIL("%s: state tokens = %llu, not 0", what, st->tokens);
}

static void op_state(fz_rd *r, unsigned hflags)
{
    fz_shape sh;
    fz_fcfg fc;
    unsigned b, nsteps, it, imut;
    size_t sfl, w, heads, dv, sbatch = 0;
    int tainted = 0, fok;
    favor_status s;
    favor_state before;
    ctx("state ");
    dec_shape(r, &sh);
    dec_fcfg(r, &fc, sh.d);
    make_features(&fc);
    fok = feat_valid(&g_f);
    w = feat_width(&g_f);
    b = rd8(r);
    imut = b;
    if (g_bt_ext) { /* the state's batch: batch x heads_kv heads; the views default to it */
        sbatch = rd8(r) % 5;
        ctx("state batch %zu ", sbatch);
    }
    heads = sh.hkv * (sbatch > 1 ? sbatch : 1);
    dv = sh.dv;
    if ((b & 0xf0) == 0xf0) { /* init mutations */
        if ((b & 3) == 0) heads = 0;
        if ((b & 3) == 1) dv = 0;
        if ((b & 3) == 2) heads = SIZE_MAX / 2;
        if ((b & 3) == 3) dv = SIZE_MAX / 3;
    }
    sfl = favor_state_floats(&g_f, heads, dv);
    if (fok && heads && dv && heads <= 64 && dv <= 64) {
        /* at least S, z, c and the scratch; affine in heads (a fixed part per head) */
        size_t least = FZ_STATE_FLOATS_MIN(heads, w, dv);
        size_t one = favor_state_floats(&g_f, 1, dv), two = favor_state_floats(&g_f, 2, dv);
        if (sfl < least) FZ_FAIL("favor_state_floats = %zu < %zu (S, z, c and scratch)", sfl, least);
        if (sfl != one + (heads - 1) * (two - one))
            FZ_FAIL("favor_state_floats is not affine in heads: %zu, %zu, %zu", one, two, sfl);
    } else if (sfl && !(fok && heads && dv)) {
        FZ_FAIL("favor_state_floats = %zu for arguments favor_state_init rejects", sfl);
    }
    if (sfl && sfl <= ((size_t)1 << 22)) {
        g_stbuf = new_buf(2 * sfl);
        alloc_buf(g_stbuf);
        fill_garbage(g_b[g_stbuf].mem, sfl * 4, 31u);
    }
    memset(&g_st, 0xab, sizeof g_st);
    before = g_st;
    {
        float *storage = g_stbuf >= 0 && (imut & 0xf8) != 0xe8 ? (float *)(void *)g_b[g_stbuf].mem : NULL;
        favor_features *fp = (imut & 0xfc) == 0xe4 ? NULL : &g_f;
        int want_ok = fp && fok && heads && dv && sfl && storage;
        if (g_stbuf >= 0) memcpy(g_b[g_stbuf].snap, g_b[g_stbuf].mem, sfl * 4);
        s = favor_state_init((imut & 0xfc) == 0xe0 ? NULL : &g_st, fp, heads, dv, storage);
        ctx("state_init(heads=%zu dv=%zu storage=%p) ", heads, dv, (void *)storage);
        report("favor_state_init", s, !want_ok, want_ok && (imut & 0xfc) != 0xe0, 0);
        if ((imut & 0xfc) == 0xe0) {
            if (s == FAVOR_OK) FZ_FAIL("favor_state_init(NULL, ...) returned FAVOR_OK");
            return;
        }
        if (s != FAVOR_OK) {
            if (want_ok) FZ_FAIL("favor_state_init rejected valid arguments: %s", favor_status_string(s));
            if (memcmp(&before, &g_st, sizeof g_st)) FZ_FAIL("failed favor_state_init changed the state struct");
            if (g_stbuf >= 0 && memcmp(g_b[g_stbuf].snap, g_b[g_stbuf].mem, sfl * 4))
                FZ_FAIL("failed favor_state_init wrote its storage");
            favor_state_reset(NULL);
            return;
        }
        if (!want_ok) FZ_FAIL("favor_state_init accepted invalid arguments");
    }
    g_have_st = 1;
    if (g_st.heads != heads || g_st.width != w || g_st.dv != dv || g_st.dim != g_f.dim ||
        g_st.kernel != g_f.kernel || g_st.s != (float *)(void *)g_b[g_stbuf].mem)
        FZ_FAIL("favor_state_init: wrong fields");
    check_state_contents(&g_st, 1, 0, "favor_state_init");
    nsteps = 1 + rd8(r) % 4;
    for (it = 0; it < nsteps; ++it) {
        unsigned kind = rd8(r), smut = rd8(r);
        float pend_saved = 0.0f;
        int pend_mut = 0;
        fz_ocfg oc;
        fz_ext_args a;
        fz_verdict vd = {0, 1, NULL, 0, 0, NULL};
        size_t n, query = 0, gnv = 0;
        favor_state saved = g_st;
        int fin, i;
        char what[64];
        unsigned long long tok0 = g_st.tokens;
        if (kind % 8 == 7) { /* reset */
            favor_state_reset(&g_st);
            check_state_contents(&g_st, 1, 0, "favor_state_reset");
            tainted = 0;
            ctx("| reset ");
            continue;
        }
        a.step = kind % 8 >= 5;
        a.ex = a.step && g_gt_ext && kind % 8 == 5; /* gated extension: 5 step_ex, 6 step */
        n = a.step ? ((kind & 0x80) ? 2 : 1) : dec_len(rd8(r));
        ctx("| %s n=%zu ", a.ex ? "step_ex" : a.step ? "step" : "extend", n);
        dec_ocfg(r, &oc);
        /* drop the views of the previous step, keep W and the state */
        g_nv = 0;
        g_nb = g_stbuf + 1 > g_fbuf + 1 ? g_stbuf + 1 : g_fbuf + 1;
        add_w_views();
        add_range_view("state", R_STATE, g_stbuf, 0, sfl);
        gnv = (size_t)g_nv;
        (void)gnv;
        g_call_batch = sbatch;
        g_call_batch_set = g_bt_ext;
        add_qkv(r, &sh, n, n, &a.q, &a.k, &a.v);
        a.o = add_view(r, "out", R_OUT, sh.hq, n, sh.dv);
        add_sv_views(r, &oc, sh.hq, n, n);
        add_gt_views(r, &oc, sh.hkv, n, a.ex ? GK_STEPX : a.step ? GK_STEP : GK_EXT);
        a.oc = &oc;
        a.f = &g_f;
        a.st = &g_st;
        switch (smut % 16) { /* state struct mutations (restored below) */
        case 1: g_st.s = NULL; break;
        case 2: g_st.scratch = NULL; break;
        case 3: g_st.kernel = (favor_kernel)((g_st.kernel + 1) % 6); break;
        case 4: g_st.dim += 1; break;
        case 5: if (g_st.heads > 1) g_st.heads -= 1; break; /* smaller: stays inside the storage */
        case 6: g_st.width += 1; break;
        case 7: a.st = NULL; break;
        case 8: a.f = NULL; break;
        case 9: g_st.c = NULL; break;
        case 10: { /* the storage's pending count overwritten (FINDING-14; restored below) */
            static const float bad_count[] = { -INFINITY, 16.0f, 2.5f, 1e30f, NAN, -1.0f };
            pend_saved = g_st.c[g_st.heads];
            g_st.c[g_st.heads] = bad_count[(smut >> 4) % 6];
            pend_mut = 1;
            break;
        }
        default: break;
        }
        if (smut % 16) ctx("[state mutation %u] ", smut % 16);
        place_views_sv(r, &oc, a.q, sh.hq, a.k, sh.hkv);
        if (a.step && !a.ex) { /* favor_linear_step takes no options: the variant buffers are not its */
            if (oc.mask) oc.mask->used = 0;
            if (oc.alibi) oc.alibi->used = 0;
            if (oc.sinks) oc.sinks->used = 0;
        }
        if (!a.step) add_ignored_lse(&oc);
        if (!a.step) {
            query = favor_linear_extend_workspace(a.f, a.st, T(a.q), T(a.k), T(a.v), oc.use_opts ? &oc.o : NULL);
            setup_ws(&oc, query);
        } else {
            oc.ws_mode = 0;
        }
        verdict_views(&vd);
        if (!a.st || !g_st.s || !g_st.z || !g_st.c || !g_st.scratch) { vd.must_fail = 1; vd.why_fail = "state NULL"; }
        else if (!pend_count_ok(&g_st)) { /* FINDING-14: the struct's heads moved c[heads] */
            vd.must_fail = 1;
            vd.why_fail = "the state's pending count is not a whole number below 16";
        }
        verdict_features(&vd, a.f, a.q->t.cols);
        /* favor_linear_step_ex validates its options as favor_linear_extend does
         * (but takes no workspace) */
        if ((!a.step || a.ex) && !oc.opt_ok) { vd.must_fail = 1; vd.why_fail = "bad options"; }
        if (!a.step || a.ex) verdict_sv(&vd, &oc, a.q, a.k, 2, 0);
        verdict_gt(&vd, &oc, a.f, a.k);
        verdict_mismatch(&vd, a.q->mem_ok && a.k->mem_ok && a.v->mem_ok && a.o->mem_ok &&
                              !(qkvo_shape_ok(&a.q->t, &a.k->t, &a.v->t, &a.o->t) && a.k->t.rows == a.q->t.rows &&
                                vheads(a.k) == g_st.heads && a.v->t.cols == g_st.dv && g_st.kernel == g_f.kernel &&
                                g_st.dim == g_f.dim && g_st.width == feat_width(&g_f) &&
                                (!a.step || a.q->t.rows == 1)));
        if (!a.step) {
            verdict_ws(&vd, &oc, query);
        }
        { /* st, f, the NULL tensors, then q, k, v, out */
            fz_view *ord[4];
            ord[0] = a.q; ord[1] = a.k; ord[2] = a.v; ord[3] = a.o;
            verdict_dtype(&vd, ord, NULL, 4, !a.st || !a.f || any_nullptr(ord, 4));
        }
        /* I12 compares the state after an fp32 twin started from the same state:
         * not when an input lives in the state's storage (the call reads it
         * while it updates the state) */
        g_twin_block = 0;
        for (i = 0; i < g_nv; ++i)
            if (g_v[i].used && g_v[i].mem_ok && g_v[i].role == R_IN && g_v[i].buf == g_stbuf) g_twin_block = 1;
        fin = !tainted && all_inprom() && fok &&
              scale_in_promise(a.step && !a.ex ? g_f.scale : lin_scale(&oc)) && gt_fin_ok(&oc, &g_f);
        snprintf(what, sizeof what, "%s (call %u)",
                 a.ex ? "favor_linear_step_ex" : a.step ? "favor_linear_step" : "favor_linear_extend", it);
        {
            favor_state copy = g_st;
            s = run_protocol(what, call_extend, &a, &vd, a.step ? NULL : &oc, fin,
                             !a.step && (hflags & 1), (unsigned char *)&copy, &g_st, sizeof g_st);
            (void)copy;
        }
        /* undo the struct mutations (and mutation 10's count, which the call refused) */
        {
            unsigned long long tok = g_st.tokens;
            g_st = saved;
            g_st.tokens = tok;
            if (pend_mut) g_st.c[g_st.heads] = pend_saved;
            pend_mut = 0;
        }
        if (s == FAVOR_OK) {
            if (g_st.tokens != tok0 + a.q->t.rows)
                FZ_FAIL("%s: tokens %llu -> %llu after %zu rows", what, tok0, g_st.tokens, a.q->t.rows);
            if (!fin) tainted = 1;
            check_state_contents(&g_st, 0, !tainted, what);
        } else if (g_st.tokens != tok0) {
            FZ_FAIL("%s failed but tokens changed", what);
        }
        for (i = 0; i < g_nv; ++i) g_v[i].used = 0;
    }
    favor_state_reset(&g_st);
    check_state_contents(&g_st, 1, 0, "favor_state_reset");
}

/* ---- op 6: features init / redraw / width / floats ---- */
static void op_features(fz_rd *r, unsigned hflags)
{
    unsigned b = rd8(r);
    int kernel = g_gt_ext && b < 250 ? (int)(b % 7) : dec_kernel(b); /* gated extension: IDENTITY too */
    size_t dim, count, fl, want = 0, md, i, j, l;
    unsigned flags, sm = rd8(r);
    unsigned long long seed;
    favor_features f, f0;
    favor_status s;
    float *storage = NULL;
    int sb = -1, valid;
    static const size_t bigs[] = {SIZE_MAX, SIZE_MAX / 2, SIZE_MAX / 8 + 1, (size_t)1 << 32, (size_t)1 << 31,
                                  ((size_t)1 << 62) + 1, 3037000500u, 100000};
    (void)hflags;
    b = rd8(r);
    dim = b >= 248 ? bigs[b - 248] : b == 247 ? 0 : 1 + b % 40;
    b = rd8(r);
    count = b >= 248 ? bigs[b - 248] : b == 247 ? 0 : b % 64;
    b = rd8(r);
    flags = b < 248 ? (b & 3u) : 1u << (2 + b % 30);
    seed = rd32(r);
    seed |= (unsigned long long)rd32(r) << 32;
    ctx("features_init(kernel=%d dim=%zu count=%zu flags=%#x seed=%llu) ", kernel, dim, count, flags, seed);
    fl = favor_features_floats((favor_kernel)kernel, dim, count);
    valid = kernel >= 0 && kernel <= FAVOR_IDENTITY && !(flags & ~3u) && dim &&
            (fz_fixed(kernel) ? (count == 0 || count == dim) : count != 0) &&
            !(kernel == FAVOR_POLY2 && dim > 4096); /* POLY2's width: FAVOR_E_OVERFLOW */
    if (kernel >= 1 && kernel <= 4 && dim && count) {
        int ovf = 0;
        want = fz_add(fz_mul(fz_mul(count, dim, &ovf), 2, &ovf), fz_mul(2, dim, &ovf), &ovf);
        fz_mul(want, sizeof(float), &ovf);
        if (ovf) want = 0;
    }
    if (fl != want) FZ_FAIL("favor_features_floats = %zu, expected %zu", fl, want);
    if (kernel >= 1 && kernel <= 4 && dim && count && !fl) valid = 0; /* overflow */
    if (fl && fl <= ((size_t)1 << 20) && (sm & 3) != 3) {
        sb = new_buf(2 * fl);
        alloc_buf(sb);
        fill_garbage(g_b[sb].mem, fl * 4, 5u);
        memcpy(g_b[sb].snap, g_b[sb].mem, fl * 4);
        storage = (float *)(void *)g_b[sb].mem;
    } else if (fl) {
        valid = 0; /* too big to give: NULL storage must be refused */
    } else if ((sm & 3) == 2) {
        storage = g_dummy_store; /* overflowing sizes: must be refused before use */
    }
    if (!fz_fixed(kernel) && !storage) valid = 0;
    memset(&f, 0x5a, sizeof f);
    f0 = f;
    s = favor_features_init((sm & 0xfc) == 0xfc ? NULL : &f, (favor_kernel)kernel, dim, count, flags, seed, storage);
    report("favor_features_init", s, !valid, valid, 1);
    if ((sm & 0xfc) == 0xfc) {
        if (s != FAVOR_E_NULL) FZ_FAIL("favor_features_init(NULL, ...) returned %d", (int)s);
        return;
    }
    if (s != FAVOR_OK) {
        if (valid) FZ_FAIL("favor_features_init rejected valid arguments: %s", favor_status_string(s));
        if (memcmp(&f, &f0, sizeof f)) FZ_FAIL("failed favor_features_init changed the struct");
        if (sb >= 0 && memcmp(g_b[sb].mem, g_b[sb].snap, fl * 4)) FZ_FAIL("failed favor_features_init wrote its storage");
        if (favor_features_width(&f) != 0) FZ_FAIL("favor_features_width of garbage != 0");
        return;
    }
    if (!valid) FZ_FAIL("favor_features_init accepted invalid arguments");
    if ((int)f.kernel != kernel || f.flags != flags || f.dim != dim || f.seed != seed ||
        f.count != (fz_fixed(kernel) ? dim : count) ||
        f.scale != (float)(1.0 / sqrt((double)dim)) ||
        (fz_fixed(kernel) ? (f.w != NULL || f.wt != NULL) : (f.w != storage || f.wt != storage + count * dim)))
        FZ_FAIL("favor_features_init: wrong fields");
    if (favor_features_width(&f) != feat_width(&f)) FZ_FAIL("favor_features_width = %zu", favor_features_width(&f));
    if (fz_fixed(kernel)) {
        if (favor_features_redraw(&f, seed + 1) != FAVOR_OK) FZ_FAIL("redraw of ELU1/POLY2 failed");
        return;
    }
    md = count * dim;
    for (i = 0; i < md; ++i)
        if (!isfinite(f.w[i])) FZ_FAIL("W[%zu] = %g", i, (double)f.w[i]);
    for (i = 0; i < count; ++i)
        for (j = 0; j < dim; ++j)
            if (f2bits(f.w[i * dim + j]) != f2bits(f.wt[j * count + i])) FZ_FAIL("W^T is not the transpose of W at (%zu, %zu)", i, j);
    if (count * dim * dim <= 200000) /* orthogonal blocks, regular norms */
        for (i = 0; i < count; ++i) {
            double ni = 0.0;
            for (l = 0; l < dim; ++l) ni += (double)f.w[i * dim + l] * f.w[i * dim + l];
            if ((flags & FAVOR_REGULAR_NORM) && fabs(sqrt(ni) - sqrt((double)dim)) > 1e-4 * sqrt((double)dim))
                FZ_FAIL("FAVOR_REGULAR_NORM: |W row %zu| = %g, not sqrt(%zu)", i, sqrt(ni), dim);
            if (!(flags & FAVOR_IID))
                for (j = i / dim * dim; j < i; ++j) {
                    double nj = 0.0, dot = 0.0;
                    for (l = 0; l < dim; ++l) {
                        nj += (double)f.w[j * dim + l] * f.w[j * dim + l];
                        dot += (double)f.w[i * dim + l] * f.w[j * dim + l];
                    }
                    if (fabs(dot) > 1e-4 * sqrt(ni * nj))
                        FZ_FAIL("W rows %zu and %zu of one block are not orthogonal: %g", i, j, dot / sqrt(ni * nj));
                }
        }
    /* redraw with the same seed: bit-identical W; invalid structs are refused untouched */
    memcpy(g_b[sb].snap, g_b[sb].mem, fl * 4);
    memset(g_b[sb].mem + md * 8, 0x77, dim * 8); /* the sampling scratch row */
    if (favor_features_redraw(&f, seed) != FAVOR_OK) FZ_FAIL("favor_features_redraw failed");
    if (memcmp(g_b[sb].mem, g_b[sb].snap, md * 8)) FZ_FAIL("favor_features_redraw with the same seed changed W");
    {
        favor_features g = f;
        unsigned m2 = rd8(r);
        switch (m2 % 6) {
        case 0: g.kernel = (favor_kernel)dec_kernel(250 + m2 / 6 % 6); break;
        case 1: g.flags |= 1u << (2 + m2 % 30); break;
        case 2: g.scale = dec_scale(192 + m2 % 20, m2); if (g.scale > 0.0f && g.scale <= FLT_MAX) g.w = NULL; break;
        case 3: g.w = NULL; break;
        case 4: g.dim = 0; break;
        default: g.count = 0; break;
        }
        memcpy(g_b[sb].snap, g_b[sb].mem, fl * 4);
        f0 = g;
        s = favor_features_redraw(&g, seed + 7);
        if (s == FAVOR_OK) FZ_FAIL("favor_features_redraw accepted invalid features");
        if (memcmp(&f0, &g, sizeof g) || memcmp(g_b[sb].mem, g_b[sb].snap, fl * 4))
            FZ_FAIL("failed favor_features_redraw changed something");
        if (favor_features_width(&g) != 0) FZ_FAIL("favor_features_width of invalid features != 0");
        if (favor_features_redraw(NULL, 1) != FAVOR_E_NULL) FZ_FAIL("favor_features_redraw(NULL)");
        if (favor_features_width(NULL) != 0) FZ_FAIL("favor_features_width(NULL)");
    }
}

/* ---- op 7: small functions and NULL arguments ---- */
static void op_misc(fz_rd *r, unsigned hflags)
{
    int k;
    uint32_t sv;
    size_t h, rows, cols;
    favor_tensor t;
    favor_options o = favor_default_options();
    const char *be = favor_backend();
    static float one[8];
    favor_tensor T1;
    favor_features fe;
    favor_state st;
    (void)hflags;
    (void)be; /* unused when the backend is not known at compile time */
    ctx("misc ");
#if defined(FAVOR_NO_SIMD)
    if (strcmp(be, "scalar")) FZ_FAIL("favor_backend() = %s under FAVOR_NO_SIMD", be);
#elif defined(__AVX512F__) && defined(__FMA__)
    if (strcmp(be, "avx512")) FZ_FAIL("favor_backend() = %s with AVX-512F+FMA", be);
#elif defined(__AVX2__) && defined(__FMA__)
    if (strcmp(be, "avx2")) FZ_FAIL("favor_backend() = %s with AVX2+FMA", be);
#endif
    if (o.flags || o.scale != 0.0f || o.threads || o.workspace || o.workspace_size || o.lse)
        FZ_FAIL("favor_default_options is not all zero");
    for (k = -3; k < 12; ++k) {
        const char *s = favor_status_string((favor_status)k);
        if (!s) FZ_FAIL("favor_status_string(%d) = NULL", k);
        if ((k >= 0 && k <= 7) != (strncmp(s, "FAVOR_", 6) == 0)) FZ_FAIL("favor_status_string(%d) = %s", k, s);
    }
    sv = rd32(r);
    if (!favor_status_string((favor_status)(int)sv)) FZ_FAIL("favor_status_string(%d) = NULL", (int)sv);
    h = rd32(r);
    rows = (size_t)rd32(r) | (size_t)rd32(r) << 32;
    cols = (size_t)rd32(r) | (size_t)rd32(r) << 32;
    t = favor_tensor_packed(one, h, rows, cols);
    if (t.data != one || t.heads != h || t.rows != rows || t.cols != cols || t.row_stride != cols ||
        t.dtype != FAVOR_F32)
        FZ_FAIL("favor_tensor_packed: wrong fields");
    {
        int ovf = 0;
        size_t hs = fz_mul(rows, cols, &ovf);
        if (t.head_stride != (ovf ? SIZE_MAX : hs)) FZ_FAIL("favor_tensor_packed: head_stride %zu", t.head_stride);
    }
    /* element types: sizes, the packed view of any type (a trailing byte picks
     * it: inputs written before element types keep fp32) */
    {
        favor_dtype dt = (favor_dtype)(rd8(r) % 3);
        favor_tensor t2 = favor_tensor_packed_as(dt, one + 1, h, rows, cols);
        if (favor_dtype_size(FAVOR_F32) != 4 || favor_dtype_size(FAVOR_F16) != 2 ||
            favor_dtype_size(FAVOR_BF16) != 2 || favor_dtype_size((favor_dtype)3) ||
            favor_dtype_size((favor_dtype)-1) || favor_dtype_size((favor_dtype)INT_MIN) ||
            favor_dtype_size((favor_dtype)(int)sv) != (sv == 0 ? 4u : sv <= 2 ? 2u : 0u))
            FZ_FAIL("favor_dtype_size: wrong sizes (%zu for %d)", favor_dtype_size((favor_dtype)(int)sv), (int)sv);
        if (t2.data != (void *)(one + 1) || t2.dtype != dt || t2.heads != h || t2.rows != rows || t2.cols != cols ||
            t2.row_stride != cols || t2.head_stride != t.head_stride || t2.batch > 1)
            FZ_FAIL("favor_tensor_packed_as: wrong fields");
        t = t2;
    }
    /* batches (extended inputs: 8 more bytes, the batch): favor_tensor_batched's
     * fields, and an overflowing batched view refused */
    if (g_bt_ext) {
        size_t bat = (size_t)rd32(r);
        int ovf = 0;
        size_t bs;
        favor_tensor tb;
        bat |= (size_t)rd32(r) << 32;
        tb = favor_tensor_batched(t.dtype, one + 2, bat, h, rows, cols);
        bs = fz_mul(h, t.head_stride, &ovf);
        if (tb.data != (void *)(one + 2) || tb.dtype != t.dtype || tb.heads != h || tb.rows != rows ||
            tb.cols != cols || tb.row_stride != cols || tb.head_stride != t.head_stride || tb.batch != bat ||
            tb.batch_stride != (ovf ? SIZE_MAX : bs))
            FZ_FAIL("favor_tensor_batched: wrong fields (batch %zu, batch_stride %zu)", tb.batch, tb.batch_stride);
        ctx("batched(batch=%zu h=%zu rows=%zu cols=%zu) ", bat, h, rows, cols);
        if (bat > 1 && h && rows && cols) {
            size_t span;
            span = view_span(&tb, favor_dtype_size(tb.dtype), &ovf);
            (void)span;
            if (ovf) {
                favor_tensor small = favor_tensor_batched(FAVOR_F32, one, bat, 1, 1, 1);
                if (favor_softmax_attention(&tb, &small, &small, &small, NULL) == FAVOR_OK ||
                    favor_softmax_attention(&small, &small, &small, &tb, NULL) == FAVOR_OK)
                    FZ_FAIL("an overflowing batched tensor was accepted");
            }
        }
    }
    /* an absurd packed tensor is refused by every entry point */
    if (h > 1 || rows > 1 || cols > 2) {
        int ovf = 0;
        size_t span = fz_add(fz_add(fz_mul(h ? h - 1 : 0, t.head_stride, &ovf), fz_mul(rows ? rows - 1 : 0, cols, &ovf), &ovf), cols, &ovf);
        fz_mul(span, favor_dtype_size(t.dtype), &ovf);
        if (ovf && h && rows && cols) {
            favor_tensor small = favor_tensor_packed(one, 1, 1, 1);
            if (favor_softmax_attention(&t, &small, &small, &small, NULL) == FAVOR_OK ||
                favor_softmax_attention(&small, &small, &small, &t, NULL) == FAVOR_OK)
                FZ_FAIL("an overflowing packed tensor was accepted");
        }
    }
    /* a dtype outside the enum: FAVOR_E_ARG, after FAVOR_E_NULL for NULL data */
    {
        static const int bad[] = {3, -1, 100, INT_MIN, INT_MAX};
        favor_tensor a = favor_tensor_packed(one, 1, 1, 1), out = favor_tensor_packed(one + 4, 1, 1, 1), b;
        int i;
        for (i = 0; i < 5; ++i) {
            b = a;
            b.dtype = (favor_dtype)bad[i];
            if (favor_softmax_attention(&b, &a, &a, &out, NULL) != FAVOR_E_ARG ||
                favor_softmax_attention(&a, &a, &a, &b, NULL) != FAVOR_E_ARG ||
                favor_softmax_attention_workspace(&b, &a, &a, NULL) != 0)
                FZ_FAIL("a tensor of dtype %d was not refused with FAVOR_E_ARG", bad[i]);
            b.data = NULL;
            if (favor_softmax_attention(&b, &a, &a, &out, NULL) != FAVOR_E_NULL)
                FZ_FAIL("a tensor of dtype %d with NULL data did not give FAVOR_E_NULL", bad[i]);
        }
        if (one[4] != 0.0f) FZ_FAIL("a refused call wrote its output");
    }
    /* NULL everywhere: never a crash, never FAVOR_OK */
    T1 = favor_tensor_packed(one, 1, 1, 1);
    memset(&fe, 0, sizeof fe);
    memset(&st, 0, sizeof st);
    if (favor_softmax_attention(NULL, &T1, &T1, &T1, NULL) != FAVOR_E_NULL ||
        favor_softmax_attention(&T1, &T1, &T1, NULL, NULL) != FAVOR_E_NULL ||
        favor_softmax_attention_backward(&T1, &T1, &T1, &T1, &T1, &T1, &T1, NULL, NULL) != FAVOR_E_NULL ||
        favor_linear_attention(NULL, &T1, &T1, &T1, &T1, NULL) != FAVOR_E_NULL ||
        favor_linear_attention_backward(NULL, &T1, &T1, &T1, &T1, &T1, &T1, &T1, NULL) != FAVOR_E_NULL ||
        favor_feature_map(NULL, &T1, &T1, FAVOR_QUERY) != FAVOR_E_NULL ||
        favor_linear_extend(NULL, &st, &T1, &T1, &T1, &T1, NULL) != FAVOR_E_NULL ||
        favor_linear_extend(&fe, NULL, &T1, &T1, &T1, &T1, NULL) != FAVOR_E_NULL ||
        favor_linear_step(NULL, &st, &T1, &T1, &T1, &T1) != FAVOR_E_NULL ||
        favor_state_init(NULL, &fe, 1, 1, one) != FAVOR_E_NULL ||
        favor_features_init(NULL, FAVOR_ELU1, 1, 1, 0, 0, NULL) != FAVOR_E_NULL)
        FZ_FAIL("a NULL argument did not give FAVOR_E_NULL");
    if (favor_softmax_attention_workspace(NULL, NULL, NULL, NULL) ||
        favor_softmax_attention_backward_workspace(NULL, NULL, NULL, NULL) ||
        favor_linear_attention_workspace(NULL, NULL, NULL, NULL, NULL) ||
        favor_linear_attention_backward_workspace(NULL, NULL, NULL, NULL, NULL) ||
        favor_linear_extend_workspace(NULL, NULL, NULL, NULL, NULL, NULL) ||
        favor_state_floats(NULL, 1, 1) || favor_features_width(NULL))
        FZ_FAIL("a query with NULL arguments is not 0");
    favor_state_reset(NULL);
    favor_state_reset(&st); /* s == NULL: nothing */
    if (favor_softmax_attention(&T1, &T1, &T1, &T1, NULL) != FAVOR_E_ALIAS)
        FZ_FAIL("out == q was not refused with FAVOR_E_ALIAS");
}

/* ------------------------------------------------------------------------ */
/* Entry point                                                              */
/* ------------------------------------------------------------------------ */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_rd r;
    unsigned op, hflags;
    uint64_t h = 0x12345;
    size_t i;
    r.p = data;
    r.n = size;
    r.i = 0;
    for (i = 0; i < size && i < 64; ++i) h = mix64(h ^ data[i]);
    r.rng = h;
    reset_call();
    op = rd8(&r);
    g_dt_ext = (op & 8) != 0;
    g_bt_ext = (op & 16) != 0;
    g_sv_ext = (op & 32) != 0;
    g_gt_ext = (op & 64) != 0; /* bit 7: ignored */
    op %= 8;
    hflags = rd8(&r);
    switch (op) {
    case 0: op_softmax(&r, hflags); break;
    case 1: op_softmax_bwd(&r, hflags); break;
    case 2: op_linear(&r, hflags); break;
    case 3: op_linear_bwd(&r, hflags); break;
    case 4: op_feature_map(&r, hflags); break;
    case 5: op_state(&r, hflags); break;
    case 6: op_features(&r, hflags); break;
    default: op_misc(&r, hflags); break;
    }
    fz_free_all();
    for (i = 0; i < sizeof g_dummy_store / sizeof g_dummy_store[0]; ++i)
        if (g_dummy_store[i] != 0.0f) FZ_FAIL("the dummy buffer behind an invalid view was written");
    return 0;
}
