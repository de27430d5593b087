/* favor-npy: run favor.h's attention on NumPy .npy files.
 *
 *     favor-npy [options] Q.npy K.npy V.npy OUT.npy
 *
 * Reads Q, K and V (float16, float32 or float64, little-endian, C order; .npy
 * format 1.0, 2.0 or 3.0), computes attention with favor.h in float32 and
 * writes OUT as float32 (float64 with --out-dtype f8, float16 with f2), shaped
 * as Q with d_v as its last dimension. Shapes are [n, d], [heads, n, d] or
 * [batch, heads, n, d] (batch and heads become favor's heads); K is
 * [.., n_k, d] and V [.., n_k, d_v], with the same rank and batch as Q and a
 * head count that divides Q's (grouped-query attention). --help lists the
 * options. Each run prints one line of timing:
 *
 *     $ favor-npy --causal --repeat 5 q.npy k.npy v.npy out.npy
 *     favor-npy: favor/positive m=256 causal heads=8 kv_heads=8 n=1024 n_k=1024
 *     d=64 dv=64 avx2: 3.210 ms (median of 5)                    (on one line)
 *
 * --projection W.npy gives the [m, d] random projection of the feature map
 * instead of drawing it from --seed, so results can be compared with another
 * implementation fed the same W (tests/interop/check_torch.py does this).
 * --kernel poly2 (FAVOR_POLY2) has no W: it is the exact kernel 1 + t + t^2/2,
 * t = s q.k, through 1 + d + d (d + 1) / 2 features (d <= 4096), so --features,
 * --seed and --projection do not apply and its timing line shows that width.
 * --kernel identity (FAVOR_IDENTITY) is phi(x) = sqrt(s) x, width d, no W
 * either (its timing line shows favor/identity and the width); its
 * denominators can vanish, so it takes only --no-normalizer.
 *
 * Linear attention's options (--method elu and favor; favor.h's GATES):
 * --no-normalizer (FAVOR_NO_NORM) drops the denominator, o_i = phi(q_i)^T S,
 * causal or not. With --causal the state decays before each key t joins it by
 * a_t = gamma_h exp(g_t): S_t = a_t S_{t-1} + phi(k_t) v_t^T (z_t alike), the
 * gammas from --decay GAMMA.npy (a vector [heads] of floats in (0, 1], one per
 * head of K, or of one batch element of K) and the log-gates g_t <= 0 from
 * --gates G.npy (one per key position, shaped as K without its last dimension:
 * [n_k], [heads, n_k] or [batch, heads, n_k]); either or both. Both files are
 * float16, float32 or float64, read as float32 (the gates pass as an fp32 view
 * [batch][heads][n_k][1]). Softmax refuses all four, and --decay and --gates
 * need --causal (status 2); favor.h judges the values (a gamma outside (0, 1],
 * a positive, NaN or -inf log-gate) and its opts.error text is printed.
 *
 * Score variants (softmax; favor.h's favor_options): --window LEFT,RIGHT
 * (FAVOR_WINDOW; query row i, at position p = i + n_k - n, sees key j when
 * p - LEFT <= j <= p + RIGHT, a negative side unbounded), --softcap C (each
 * scaled score x becomes C tanh(x / C)), --alibi SLOPES.npy and --sinks
 * SINKS.npy (one float per head of Q, or of one batch element of Q: the score
 * loses m_h |p - j|; exp(s_h) joins each row's denominator) and --mask
 * MASK.npy (added to the scores last: [n, n_k] for every head or [heads, n,
 * n_k], float16 or float32 as read, float64 rounded to float32; -inf hides a
 * key). --seqlens LENS.npy (every method) packs sequences along the rows: an
 * int32 or int64 vector of lengths summing to n = n_k, passed as favor.h's
 * seq_q = seq_k offsets (0, then the running sums); each sequence sees only its
 * own keys, with positions from its own start (linear attention: its own
 * state). The tool checks the files' shapes and types and refuses the softmax
 * variants with a linear method (status 2); favor.h judges the values (a
 * negative softcap, a NaN slope), and its opts.error text is printed.
 *
 * Element types. float16 and float32 inputs go to favor.h as they are, as
 * FAVOR_F16 and FAVOR_F32 views (favor.h widens 16-bit elements as it reads
 * them; any mix is fine); float64 is rounded to float32 first. --storage f16
 * or bf16 rounds every input (Q, K, V; not W, which favor.h keeps in float32)
 * straight from its file's type to float16 or bfloat16, to nearest, ties to
 * even, and passes FAVOR_F16 or FAVOR_BF16 views, to see what 16-bit storage
 * costs; a finite input it would make infinite is an error (--storage f32
 * widens float16 inputs to FAVOR_F32 views instead). --out-dtype f2
 * has favor.h write a FAVOR_F16 output, rounded once from its float32 result,
 * saved as '<f2'; with --storage bf16, --out-dtype bf16 has it write a
 * FAVOR_BF16 output, saved widened (exactly) as float32: NumPy has no
 * bfloat16.
 *
 * Errors (an unreadable, malformed or unsupported file, mismatched shapes, an
 * output that cannot be written) print one line "favor-npy: error: ..." to
 * stderr and exit with status 1 (2 for a bad command line). OUT is written to a
 * temporary file in its directory and renamed over OUT only when complete, so a
 * failed run leaves no partial output and never replaces an existing file (an
 * OUT that exists and is not a regular file, such as /dev/null or a pipe, is
 * written to directly; a symbolic link is followed).
 *
 * Built by CMake as build/favor_npy and installed as bin/favor-npy, with
 * FAVOR_DISPATCH: it runs the best backend of whatever x86-64 runs it. */
#define _XOPEN_SOURCE 700 /* POSIX.1-2008 with realpath() */
#define _FILE_OFFSET_BITS 64 /* files over 2 GiB on 32-bit hosts */

#define FAVOR_IMPLEMENTATION
#include "favor.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define PROG "favor-npy"
#define MAX_RANK 32                      /* numpy's own limit on dimensions   */
#define MAX_HEADER ((size_t)1 << 20)     /* longest .npy header we accept     */
#define IO_CHUNK ((size_t)1 << 16)       /* bytes converted per read or write */

/* ------------------------------------------------------------------------
 * Errors and the temporary output file. die() prints one line and exits; the
 * atexit handler (and a handler for the usual terminating signals) removes
 * the temporary file, so no exit path leaves one behind.
 * ---------------------------------------------------------------------- */
static char *tmp_path;                  /* the temporary output, while it exists */
static volatile sig_atomic_t tmp_live;

static void remove_tmp(void)
{
    if (tmp_live) {
        tmp_live = 0;
        unlink(tmp_path);
    }
}

static void on_signal(int sig)
{
    if (tmp_live) unlink(tmp_path); /* async-signal-safe */
    raise(sig);                     /* SA_RESETHAND: the default action now */
}

static void die(int status, const char *fmt, ...)
{
    char msg[1024];
    size_t i;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (i = 0; msg[i]; ++i) /* one line, whatever a file name holds */
        if ((unsigned char)msg[i] < 0x20) msg[i] = '?';
    fflush(stdout);
    fprintf(stderr, PROG ": error: %s\n", msg);
    exit(status);
}

#define usage_error(...) die(2, __VA_ARGS__)
#define data_error(...) die(1, __VA_ARGS__)

/* ------------------------------------------------------------------------
 * Little-endian encoding, independent of the host's byte order.
 * ---------------------------------------------------------------------- */
static uint64_t get_le(const unsigned char *b, int bytes)
{
    uint64_t u = 0;
    while (bytes--) u = (u << 8) | b[bytes];
    return u;
}

static void put_le(unsigned char *b, uint64_t u, int bytes)
{
    int i;
    for (i = 0; i < bytes; ++i, u >>= 8) b[i] = (unsigned char)(u & 0xff);
}

static int host_is_little_endian(void)
{
    const uint32_t one = 1;
    unsigned char b[4];
    memcpy(b, &one, 4);
    return b[0] == 1;
}

static int mul_ok(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

/* ------------------------------------------------------------------------
 * 16-bit floats, stored as uint16_t: IEEE binary16 (1 sign bit, 5 exponent
 * bits, 10 fraction bits) and bfloat16 (the top half of a float: 1, 8, 7).
 * narrow16() rounds a double, hence also any float, straight to either one,
 * correctly: to nearest, ties to even, subnormals included, too large to
 * +-inf, NaN to a quiet NaN of the same sign. Straight from the double matters
 * for float64 input: rounded to float32 first, a value just above a halfway
 * point could land on it and then round down (to even).
 * ---------------------------------------------------------------------- */
typedef struct {
    int ebits, fbits; /* exponent and fraction bits */
} format16;

static const format16 FMT_F16 = {5, 10}, FMT_BF16 = {8, 7};

static uint16_t narrow16(double x, format16 fmt)
{
    const int bias = (1 << (fmt.ebits - 1)) - 1, emin = 1 - bias;
    const uint32_t inf = ((1u << fmt.ebits) - 1) << fmt.fbits;
    const uint32_t sign = signbit(x) ? 0x8000u : 0u;
    double a = fabs(x), q, r;
    uint32_t bits;
    int e;
    if (a != a) { /* NaN: quiet, keeping the top of the payload */
        uint64_t u;
        memcpy(&u, &x, 8);
        u = (u & (((uint64_t)1 << 52) - 1)) >> (52 - fmt.fbits);
        return (uint16_t)(sign | inf | (1u << (fmt.fbits - 1)) | (uint32_t)u);
    }
    if (a == 0.0) return (uint16_t)sign;
    frexp(a, &e); /* a = f 2^e, 1/2 <= f < 1 */
    e -= 1;       /* 2^e <= a < 2^(e+1) (inf: e is unspecified, caught below) */
    if (e < emin) e = emin; /* subnormal: the quantum stops shrinking */
    if (a > DBL_MAX || e > bias) return (uint16_t)(sign | inf); /* a >= 2^(bias+1) */
    q = ldexp(a, fmt.fbits - e); /* a in units of the last place (exact) */
    r = floor(q);
    if (q - r > 0.5 || (q - r == 0.5 && ((uint32_t)r & 1u))) r += 1.0;
    /* exponent field e + bias (0 for a subnormal, whose r < 2^fbits) and the
     * fraction r - 2^fbits: a significand that rounded up to 2^(fbits+1)
     * carries into the exponent, and from the largest binade to inf */
    bits = ((uint32_t)(e + bias - 1) << fmt.fbits) + (uint32_t)r;
    return (uint16_t)(sign | bits);
}

/* the value of a 16-bit float, exactly */
static double widen16(uint16_t h, format16 fmt)
{
    const int bias = (1 << (fmt.ebits - 1)) - 1;
    const unsigned emax = (1u << fmt.ebits) - 1, e = (h >> fmt.fbits) & emax,
                   f = h & ((1u << fmt.fbits) - 1);
    double a;
    if (e == emax) a = f ? NAN : INFINITY;
    else if (e == 0) a = ldexp((double)f, 1 - bias - fmt.fbits);
    else a = ldexp((double)(f | (1u << fmt.fbits)), (int)e - bias - fmt.fbits);
    return h & 0x8000u ? -a : a;
}

/* ------------------------------------------------------------------------
 * Reading .npy files. The format: the magic "\x93NUMPY", a version byte pair,
 * the header length (2 bytes little-endian in 1.0, 4 in 2.0 and 3.0), then a
 * Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and a newline, then the data.
 * ---------------------------------------------------------------------- */
typedef struct {
    const char *path;
    int rank;
    size_t shape[MAX_RANK];
    size_t count;      /* elements */
    int itemsize;      /* in the file: 2, 4 or 8 */
    char kind;         /* in the file: 'f' float or 'i' signed integer */
    favor_dtype dtype; /* in memory: FAVOR_F32, FAVOR_F16 or FAVOR_BF16 */
    void *data;        /* count elements of dtype (integers: int64_t) */
} npy_array;

/* read_npy's `storage` for integer files: int32 or int64, read as int64_t */
#define AS_INT64 (-2)

/* The types a reader takes, for its messages: floats or integers. */
static const char *types_taken(char kind)
{
    return kind == 'i' ? "int32 or int64, little-endian ('<i4', '<i8')"
                       : "float16, float32 or float64, little-endian ('<f2', '<f4', '<f8')";
}

/* The itemsize of descr's type (its byte order aside) when it is one of kind's
 * types, else 0. */
static int descr_size(const char *descr, char kind)
{
    if (descr[0] == '\0' || descr[1] != kind) return 0;
    if (descr[2] != '4' && descr[2] != '8' && (kind != 'f' || descr[2] != '2')) return 0;
    return descr[3] == '\0' ? descr[2] - '0' : 0;
}

typedef struct {
    const char *path, *p, *end;
} hdr_cursor;

static void skip_ws(hdr_cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        ++c->p;
}

static void expect(hdr_cursor *c, char ch)
{
    skip_ws(c);
    if (c->p >= c->end || *c->p != ch)
        data_error("%s: malformed .npy header: expected '%c'", c->path, ch);
    ++c->p;
}

/* a quoted string without escapes, into out (cap bytes) */
static void parse_string(hdr_cursor *c, char *out, size_t cap)
{
    char q;
    size_t n = 0;
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        data_error("%s: malformed .npy header: expected a string", c->path);
    q = *c->p++;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= cap)
            data_error("%s: malformed .npy header: unexpected string", c->path);
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) data_error("%s: malformed .npy header: unterminated string", c->path);
    ++c->p;
    out[n] = '\0';
}

static int parse_bool(hdr_cursor *c)
{
    skip_ws(c);
    if (c->end - c->p >= 4 && !memcmp(c->p, "True", 4)) {
        c->p += 4;
        return 1;
    }
    if (c->end - c->p >= 5 && !memcmp(c->p, "False", 5)) {
        c->p += 5;
        return 0;
    }
    data_error("%s: malformed .npy header: fortran_order is not True or False", c->path);
    return 0;
}

static void parse_shape(hdr_cursor *c, npy_array *a)
{
    expect(c, '(');
    a->rank = 0;
    for (;;) {
        size_t v = 0;
        skip_ws(c);
        if (c->p < c->end && *c->p == ')') break;
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            data_error("%s: malformed .npy header: bad shape", c->path);
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            unsigned digit = (unsigned)(*c->p++ - '0');
            if (v > (SIZE_MAX - digit) / 10)
                data_error("%s: a dimension of the shape does not fit in memory", c->path);
            v = v * 10 + digit;
        }
        if (c->p < c->end && *c->p == 'L') ++c->p; /* Python 2 long */
        if (a->rank == MAX_RANK)
            data_error("%s: malformed .npy header: more than %d dimensions", c->path, MAX_RANK);
        a->shape[a->rank++] = v;
        skip_ws(c);
        if (c->p < c->end && *c->p == ',') {
            ++c->p;
            continue;
        }
        if (c->p < c->end && *c->p == ')') break;
        data_error("%s: malformed .npy header: bad shape", c->path);
    }
    ++c->p;
}

static void shape_string(char *buf, size_t cap, const size_t *shape, int rank)
{
    size_t n = 0;
    int i;
    n += (size_t)snprintf(buf, cap, "(");
    for (i = 0; i < rank && n < cap; ++i)
        n += (size_t)snprintf(buf + n, cap - n, "%s%zu", i ? ", " : "", shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, rank == 1 ? ",)" : ")");
}

/* Parse the header dict into a's rank, shape and itemsize; the type must be
 * one of kind's ('f' floats, 'i' integers). */
static void parse_header(const char *path, const char *h, size_t len, npy_array *a, char kind)
{
    hdr_cursor c;
    char key[32], descr[64];
    int seen_descr = 0, seen_fortran = 0, seen_shape = 0, fortran = 0, size;
    c.path = path;
    c.p = h;
    c.end = h + len;
    expect(&c, '{');
    for (;;) {
        skip_ws(&c);
        if (c.p < c.end && *c.p == '}') break;
        parse_string(&c, key, sizeof key);
        expect(&c, ':');
        if (!strcmp(key, "descr") && !seen_descr) {
            skip_ws(&c);
            if (c.p < c.end && *c.p == '[')
                data_error("%s: structured dtypes are not supported (%s only)", path,
                           types_taken(kind));
            parse_string(&c, descr, sizeof descr);
            seen_descr = 1;
        } else if (!strcmp(key, "fortran_order") && !seen_fortran) {
            fortran = parse_bool(&c);
            seen_fortran = 1;
        } else if (!strcmp(key, "shape") && !seen_shape) {
            parse_shape(&c, a);
            seen_shape = 1;
        } else {
            data_error("%s: malformed .npy header: unexpected key '%s'", path, key);
        }
        skip_ws(&c);
        if (c.p < c.end && *c.p == ',') {
            ++c.p;
            continue;
        }
        if (c.p < c.end && *c.p == '}') break;
        data_error("%s: malformed .npy header: expected ',' or '}'", path);
    }
    ++c.p;
    skip_ws(&c);
    if (c.p != c.end) data_error("%s: malformed .npy header: text after the dict", path);
    if (!seen_descr || !seen_fortran || !seen_shape)
        data_error("%s: malformed .npy header: it needs 'descr', 'fortran_order' and 'shape'",
                   path);
    if (fortran)
        data_error("%s: Fortran-order arrays are not supported (save np.ascontiguousarray(a))",
                   path);
    /* '<' little-endian; '=' native and '|' not applicable mean the same here
     * only on a little-endian host */
    size = descr_size(descr, kind);
    if (size &&
        (descr[0] == '<' || ((descr[0] == '=' || descr[0] == '|') && host_is_little_endian()))) {
        a->itemsize = size;
        a->kind = kind;
    } else if (size && descr[0] == '>') {
        data_error("%s: big-endian data ('%s') is not supported: save it as '<%c%c'", path, descr,
                   kind, descr[2]);
    } else {
        data_error("%s: dtype '%s' is not supported: %s", path, descr, types_taken(kind));
    }
}

/* Read bytes or die: "truncated" when the file ends first. */
static void read_exact(FILE *fp, const char *path, void *buf, size_t n, const char *what)
{
    if (fread(buf, 1, n, fp) != n) {
        if (ferror(fp)) data_error("%s: read error: %s", path, strerror(errno));
        data_error("%s: truncated .npy file (it ends inside the %s)", path, what);
    }
}

static const char *dtype_name(favor_dtype t)
{
    return t == FAVOR_F16 ? "float16" : t == FAVOR_BF16 ? "bfloat16" : "float32";
}

/* Element i of a's storage: the value x read from the file, rounded to a's
 * dtype. A finite x too large for it is an error (not an infinity). */
static void put_value(const npy_array *a, size_t i, double x)
{
    int too_large; /* finite (inf passes as inf, NaN as NaN) but beyond the type */
    if (a->dtype == FAVOR_F32) {
        too_large = (x > FLT_MAX || x < -FLT_MAX) && x - x == 0.0;
        if (!too_large) ((float *)a->data)[i] = (float)x; /* (else undefined) */
    } else {
        uint16_t h = narrow16(x, a->dtype == FAVOR_F16 ? FMT_F16 : FMT_BF16);
        too_large = (h & 0x7fffu) == (a->dtype == FAVOR_F16 ? 0x7c00u : 0x7f80u) && x - x == 0.0;
        ((uint16_t *)a->data)[i] = h;
    }
    if (too_large)
        data_error("%s: element %zu (%g) is outside the range of %s%s", a->path, i, x,
                   dtype_name(a->dtype),
                   a->dtype == FAVOR_F32 ? "" : a->dtype == FAVOR_F16 ? " (--storage f16)"
                                                                       : " (--storage bf16)");
}

/* Read the array at path into a, its elements as `storage` (a favor_dtype), or,
 * for storage -1, as read: float16 and float32 as they are, float64 rounded
 * to float32. AS_INT64 reads an int32 or int64 file into int64_t elements. */
static void read_npy(const char *path, npy_array *a, int storage)
{
    unsigned char pre[12], *buf;
    char *header;
    size_t hlen, prefix, bytes, done, i, elsize;
    int i_dim, version;
    struct stat sb;
    FILE *fp = fopen(path, "rb");
    if (!fp) data_error("%s: cannot open: %s", path, strerror(errno));
    if (fstat(fileno(fp), &sb) != 0) data_error("%s: cannot stat: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) data_error("%s: is a directory", path);
    a->path = path;

    if (fread(pre, 1, 8, fp) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        if (ferror(fp)) data_error("%s: read error: %s", path, strerror(errno));
        data_error("%s: not a .npy file (no \\x93NUMPY magic)", path);
    }
    version = pre[6];
    if ((version < 1 || version > 3) || pre[7] != 0)
        data_error("%s: unsupported .npy format version %d.%d", path, pre[6], pre[7]);
    prefix = version == 1 ? 10 : 12;
    read_exact(fp, path, pre + 8, prefix - 8, "header length");
    hlen = (size_t)get_le(pre + 8, (int)(prefix - 8));
    if (hlen > MAX_HEADER)
        data_error("%s: .npy header of %zu bytes is too long (limit %zu)", path, hlen, MAX_HEADER);
    if (S_ISREG(sb.st_mode) && (uintmax_t)sb.st_size < prefix + hlen)
        data_error("%s: truncated .npy file (header of %zu bytes, file of %jd)", path, hlen,
                   (intmax_t)sb.st_size);
    header = malloc(hlen + 1);
    if (!header) data_error("%s: out of memory", path);
    read_exact(fp, path, header, hlen, "header");
    header[hlen] = '\0';
    if (memchr(header, '\0', hlen)) data_error("%s: malformed .npy header: a NUL byte", path);
    parse_header(path, header, hlen, a, storage == AS_INT64 ? 'i' : 'f');
    free(header);

    a->count = 1;
    for (i_dim = 0; i_dim < a->rank; ++i_dim)
        if (a->shape[i_dim] == 0) {
            char s[256];
            shape_string(s, sizeof s, a->shape, a->rank);
            data_error("%s: empty array, shape %s", path, s);
        }
    for (i_dim = 0; i_dim < a->rank; ++i_dim)
        if (!mul_ok(a->count, a->shape[i_dim], &a->count))
            data_error("%s: the declared shape overflows size_t", path);
    if (!mul_ok(a->count, (size_t)a->itemsize, &bytes))
        data_error("%s: the declared data size overflows size_t", path);
    /* compare with the file before allocating anything that large */
    if (S_ISREG(sb.st_mode)) {
        uintmax_t have = (uintmax_t)sb.st_size - prefix - hlen;
        if (have < bytes)
            data_error("%s: truncated .npy file: the header declares %zu bytes of data, the file "
                       "holds %ju",
                       path, bytes, have);
        if (have > bytes)
            data_error("%s: %ju unexpected bytes after the %zu bytes of data", path,
                       have - (uintmax_t)bytes, bytes);
    }
    a->dtype = storage >= 0 ? (favor_dtype)storage : a->itemsize == 2 ? FAVOR_F16 : FAVOR_F32;
    elsize = a->kind == 'i' ? sizeof(int64_t) : favor_dtype_size(a->dtype);
    if (a->count > SIZE_MAX / elsize) /* float16 or int32 widened */
        data_error("%s: out of memory (%zu elements)", path, a->count);
    a->data = malloc(a->count * elsize);
    buf = malloc(IO_CHUNK);
    if (!a->data || !buf) data_error("%s: out of memory (%zu elements)", path, a->count);
    for (done = 0; done < bytes;) {
        size_t n = bytes - done < IO_CHUNK ? bytes - done : IO_CHUNK, first = done / a->itemsize;
        read_exact(fp, path, buf, n, "data");
        for (i = 0; i < n / a->itemsize; ++i) {
            if (a->kind == 'i') { /* two's complement, widened to 64 bits */
                uint64_t u = get_le(buf + (size_t)a->itemsize * i, a->itemsize);
                if (a->itemsize == 4) u = (u ^ 0x80000000u) - 0x80000000u;
                ((int64_t *)a->data)[first + i] =
                    u >> 63 ? -(int64_t)(~u) - 1 : (int64_t)u;
            } else if (a->itemsize == 2) {
                uint16_t h = (uint16_t)get_le(buf + 2 * i, 2);
                if (a->dtype == FAVOR_F16) ((uint16_t *)a->data)[first + i] = h;
                else put_value(a, first + i, widen16(h, FMT_F16));
            } else if (a->itemsize == 4) {
                uint32_t u = (uint32_t)get_le(buf + 4 * i, 4);
                float x;
                memcpy(&x, &u, 4);
                if (a->dtype == FAVOR_F32) ((float *)a->data)[first + i] = x;
                else put_value(a, first + i, x);
            } else {
                uint64_t u = get_le(buf + 8 * i, 8);
                double x;
                memcpy(&x, &u, 8);
                put_value(a, first + i, x);
            }
        }
        done += n;
    }
    if (fgetc(fp) != EOF) /* a pipe or other non-regular file: checked only now */
        data_error("%s: unexpected bytes after the %zu bytes of data", path, bytes);
    free(buf);
    fclose(fp);
}

/* ------------------------------------------------------------------------
 * Writing OUT: to a temporary file next to it, opened before the computation
 * (so an unwritable OUT fails early) and renamed over OUT when complete. A
 * symbolic link is followed: the file it names is replaced, the link kept. An
 * existing OUT that is not a regular file (/dev/null, a FIFO, /dev/stdout on a
 * pipe) is written directly: there is nothing to replace atomically, and a
 * rename would replace the device node itself.
 * ---------------------------------------------------------------------- */
typedef struct {
    const char *path; /* as given, for messages                      */
    char *target;     /* the file renamed over: path, links resolved  */
    FILE *fp;
    int direct;
} output;

static void open_output(output *o, const char *path, mode_t umask_bits)
{
    struct stat sb, lsb;
    int fd;
    o->path = path;
    o->target = NULL;
    o->direct = 0;
    if (stat(path, &sb) == 0) { /* exists (through any links) */
        if (S_ISDIR(sb.st_mode)) data_error("%s: is a directory", path);
        o->direct = !S_ISREG(sb.st_mode);
        if (!o->direct && lstat(path, &lsb) == 0 && S_ISLNK(lsb.st_mode)) {
            o->target = realpath(path, NULL);
            if (!o->target) data_error("%s: cannot resolve the link: %s", path, strerror(errno));
        }
    } else if (lstat(path, &lsb) == 0 && S_ISLNK(lsb.st_mode)) {
        data_error("%s: a symbolic link to a file that does not exist", path);
    }
    if (o->direct) {
        o->fp = fopen(path, "wb");
        if (!o->fp) data_error("%s: cannot write: %s", path, strerror(errno));
        return;
    }
    if (!o->target) o->target = strdup(path);
    if (o->target) tmp_path = malloc(strlen(o->target) + sizeof ".tmp.XXXXXX");
    if (!o->target || !tmp_path) data_error("out of memory");
    strcpy(tmp_path, o->target);
    strcat(tmp_path, ".tmp.XXXXXX");
    fd = mkstemp(tmp_path);
    if (fd < 0) data_error("%s: cannot write: %s", path, strerror(errno));
    tmp_live = 1;
    /* mkstemp makes the file 0600; give it the mode a plain open would */
    if (fchmod(fd, 0666 & ~umask_bits) != 0)
        data_error("%s: cannot set the mode of %s: %s", path, tmp_path, strerror(errno));
    o->fp = fdopen(fd, "wb");
    if (!o->fp) data_error("%s: cannot write: %s", path, strerror(errno));
}

static void write_all(const output *o, const void *p, size_t n)
{
    if (fwrite(p, 1, n, o->fp) != n) data_error("%s: write error: %s", o->path, strerror(errno));
}

/* The .npy file: header 1.0, the dict padded with spaces and a newline so the
 * data starts at a multiple of 64 bytes; then the data, little-endian, with
 * itemsize bytes per element: data's elements of type dtype as they are
 * (float32 as 4, float16 as 2), or widened: float32 to 8 and bfloat16 to 4. */
static void write_npy(const output *o, const void *data, favor_dtype dtype,
                      const size_t *shape, int rank, int itemsize)
{
    char dict[512], shp[400];
    unsigned char pre[10], *buf;
    size_t len, total, count = 1, i, done;
    int r;

    shape_string(shp, sizeof shp, shape, rank);
    len = (size_t)snprintf(dict, sizeof dict,
                           "{'descr': '<f%d', 'fortran_order': False, 'shape': %s, }", itemsize,
                           shp);
    total = (10 + len + 1 + 63) / 64 * 64;
    while (10 + len + 1 < total) dict[len++] = ' ';
    dict[len++] = '\n';
    memcpy(pre, "\x93NUMPY\x01\x00", 8);
    put_le(pre + 8, len, 2);
    write_all(o, pre, 10);
    write_all(o, dict, len);

    for (r = 0; r < rank; ++r) count *= shape[r]; /* no overflow: the floats exist */
    buf = malloc(IO_CHUNK);
    if (!buf) data_error("out of memory");
    for (done = 0; done < count;) {
        size_t n = IO_CHUNK / (size_t)itemsize;
        if (n > count - done) n = count - done;
        for (i = 0; i < n; ++i) {
            if (dtype != FAVOR_F32) {
                uint32_t u = ((const uint16_t *)data)[done + i];
                if (itemsize == 2) put_le(buf + 2 * i, u, 2);
                else put_le(buf + 4 * i, u << 16, 4); /* bfloat16 */
            } else if (itemsize == 4) {
                uint32_t u;
                memcpy(&u, (const float *)data + done + i, 4);
                put_le(buf + 4 * i, u, 4);
            } else {
                double x = ((const float *)data)[done + i];
                uint64_t u;
                memcpy(&u, &x, 8);
                put_le(buf + 8 * i, u, 8);
            }
        }
        write_all(o, buf, n * (size_t)itemsize);
        done += n;
    }
    free(buf);
}

/* Flush, close and move the temporary file over OUT. */
static void finish_output(output *o)
{
    if (fflush(o->fp) != 0) data_error("%s: write error: %s", o->path, strerror(errno));
    if (!o->direct && fsync(fileno(o->fp)) != 0 && errno != EINVAL)
        data_error("%s: write error: %s", o->path, strerror(errno));
    if (fclose(o->fp) != 0) data_error("%s: write error: %s", o->path, strerror(errno));
    if (!o->direct) {
        if (rename(tmp_path, o->target) != 0)
            data_error("%s: cannot write: %s", o->path, strerror(errno));
        tmp_live = 0;
        free(o->target);
    }
}

/* ------------------------------------------------------------------------
 * Command line
 * ---------------------------------------------------------------------- */
enum { M_SOFTMAX, M_ELU, M_FAVOR };
static const char *const method_names[] = {"softmax", "elu", "favor"};
static const char *const kernel_names[] = {"positive", "hyperbolic", "trig", "relu", "poly2",
                                           "identity"};
static const favor_kernel kernel_ids[] = {FAVOR_POSITIVE, FAVOR_HYPERBOLIC, FAVOR_TRIG,
                                          FAVOR_RELU, FAVOR_POLY2, FAVOR_IDENTITY};
#define N_KERNELS (sizeof kernel_names / sizeof kernel_names[0])

/* the maps of --kernel without W (exact, deterministic): poly2 and identity */
static int kernel_fixed(int kernel)
{
    return kernel_ids[kernel] == FAVOR_POLY2 || kernel_ids[kernel] == FAVOR_IDENTITY;
}

typedef struct {
    int method, kernel, causal, threads;
    int storage;          /* a favor_dtype for every input, or -1: as read */
    favor_dtype out_type; /* of the output view */
    int out_itemsize;     /* in the file: 2 (float16), 4 or 8 */
    size_t features, repeat;
    unsigned long long seed;
    double scale; /* 0: the default */
    const char *projection, *files[4];
    int given_kernel, given_features, given_seed;
    /* softmax's score variants (favor_options); 0 or NULL: not given */
    int window;                    /* --window: FAVOR_WINDOW with these sides */
    long long window_left, window_right;
    float softcap;
    int given_softcap;
    const char *alibi, *sinks, *mask; /* .npy paths */
    const char *seqlens;              /* every method */
    /* linear attention's options (GATES); 0 or NULL: not given */
    int no_norm;                      /* --no-normalizer: FAVOR_NO_NORM */
    const char *decay, *gates;        /* .npy paths (with --causal) */
} config;

static void usage(void)
{
    printf("usage: " PROG " [options] Q.npy K.npy V.npy OUT.npy\n"
           "\n"
           "Attention with favor.h on NumPy arrays: OUT = attention(Q, K, V), computed\n"
           "in float32. Q is [n, d], [heads, n, d] or [batch, heads, n, d]; K is\n"
           "[.., n_k, d] and V [.., n_k, d_v] with the same rank and batch, and a\n"
           "number of heads that divides Q's (grouped-query attention). OUT is shaped\n"
           "as Q with last dimension d_v. Inputs: .npy 1.0, 2.0 or 3.0, float16,\n"
           "float32 or float64 (little-endian), C order; favor.h reads float16 and\n"
           "float32 as they are, float64 rounded to float32.\n"
           "\n"
           "  --method M         softmax (exact), elu (elu(x)+1 linear attention) or\n"
           "                     favor (random features)                default favor\n"
           "  --kernel K         favor's feature map: positive (FAVOR+), hyperbolic,\n"
           "                     trig, relu, poly2 (exact 1 + t + t^2/2, t = s q.k;\n"
           "                     d <= 4096) or identity (sqrt(s) x, width d; only\n"
           "                     with --no-normalizer); poly2 and identity have no\n"
           "                     W: --features, --seed and --projection do not\n"
           "                     apply                                  default positive\n"
           "  --features M       favor's number of random features     default 256\n"
           "  --seed S           seed of favor's random projection W    default 0\n"
           "  --projection W.npy use this W ([m, d], float16, float32 or float64;\n"
           "                     float32 in favor.h) instead of drawing one; m is\n"
           "                     its number of rows\n"
           "  --causal           causal mask: query i sees keys j <= i + (n_k - n)\n"
           "  --scale S          softmax: logits s q.k; favor: x' = sqrt(s) x\n"
           "                     default 1/sqrt(d); not for elu\n"
           "  --threads T        OpenMP threads (0: OpenMP's default)   default 0\n"
           "  --repeat R         run R times, report the median time   default 1\n"
           "  --storage T        pass Q, K and V to favor.h as T: f16 (float16) or\n"
           "                     bf16 (bfloat16), rounded to nearest even, or f32\n"
           "                     (float16 inputs widened); W stays float32\n"
           "                                                            default as read\n"
           "  --out-dtype T      f4 (float32), f8 (float64, widened), f2 (float16,\n"
           "                     rounded once by favor.h) or, with --storage bf16,\n"
           "                     bf16: bfloat16, rounded once by favor.h and saved\n"
           "                     widened exactly as float32 (NumPy has no bfloat16)\n"
           "                                                            default f4\n"
           "  --help             this text\n"
           "\n");
    /* in parts: C99 promises string literals of 4095 characters */
    printf("Softmax's score variants (each off unless given; favor.h's favor_options;\n"
           "a row's scores x = s q.k -> softcap -> minus ALiBi -> plus mask, keys\n"
           "outside the causal rule, the window or the row's sequence hidden):\n"
           "  --window L,R       query i (position p = i + n_k - n) sees key j only\n"
           "                     when p - L <= j <= p + R; a negative side is\n"
           "                     unbounded (with --causal, R is 0)\n"
           "  --softcap C        each score x becomes C tanh(x / C); C > 0 (0: none)\n"
           "  --alibi M.npy      ALiBi: [heads] slopes m_h (Q's heads; float, float32\n"
           "                     in favor.h); score -= m_h |p - j|\n"
           "  --sinks S.npy      [heads] sink logits s_h: exp(s_h) joins each row's\n"
           "                     softmax denominator and adds no value\n"
           "  --mask A.npy       additive mask, [n, n_k] (every head) or [heads, n,\n"
           "                     n_k]: float16 or float32 as read (float64 rounded\n"
           "                     to float32), -inf hides a key\n"
           "Every method:\n"
           "  --seqlens L.npy    packed sequences: their int32 or int64 lengths\n"
           "                     along the rows, summing to n = n_k (Q and K/V\n"
           "                     packed alike); each sequence sees only its own\n"
           "                     keys, with its own positions (linear attention:\n"
           "                     its own state, from empty)\n"
           "\n"
           "Linear attention's options (elu and favor; each off unless given;\n"
           "favor.h's GATES: with --causal the state decays by a_t = gamma_h exp(g_t)\n"
           "before key t joins it, S_t = a_t S_{t-1} + phi(k_t) v_t^T):\n"
           "  --no-normalizer    o_i = phi(q_i)^T S, without the denominator (causal\n"
           "                     or not)\n"
           "  --decay G.npy      with --causal: [heads] gammas gamma_h in (0, 1], one\n"
           "                     per head of K (of one batch element); float,\n"
           "                     float32 in favor.h\n"
           "  --gates L.npy      with --causal: the log-gates g_t <= 0 of the key\n"
           "                     positions, shaped as K without its last dimension\n"
           "                     ([n_k], [heads, n_k] or [batch, heads, n_k]);\n"
           "                     float, float32 in favor.h\n"
           "\n"
           "Prints one line with the method, the sizes and the time of the attention\n"
           "call. Errors print one line to stderr and exit 1 (2: bad command line);\n"
           "OUT is replaced only by a complete result.\n");
}

static unsigned long long parse_uint(const char *opt, const char *val, unsigned long long lo,
                                     unsigned long long hi)
{
    char *end;
    unsigned long long v;
    errno = 0;
    if (*val < '0' || *val > '9') usage_error("%s needs an integer, not '%s'", opt, val);
    v = strtoull(val, &end, 10);
    if (*end || errno == ERANGE || v < lo || v > hi)
        usage_error("%s needs an integer in [%llu, %llu], not '%s'", opt, lo, hi, val);
    return v;
}

/* A number; its value is favor.h's to judge (as a float: beyond float's
 * range +-inf, which it refuses, and a nonzero value that would be 0 refused
 * here, so no option is silently turned off). */
static float parse_float(const char *opt, const char *val)
{
    char *end;
    double x = strtod(val, &end);
    if (end == val || *end) usage_error("%s needs a number, not '%s'", opt, val);
    if (x != 0.0 && fabs(x) < FLT_MIN && (float)x == 0.0f)
        usage_error("%s %s is too small for a float (it would be 0)", opt, val);
    return x > FLT_MAX ? INFINITY : x < -FLT_MAX ? -INFINITY : (float)x;
}

/* --window L,R: two integers; a negative side is unbounded */
static void parse_window(const char *val, long long *left, long long *right)
{
    const char *r = strchr(val, ',');
    char *end;
    errno = 0;
    if (r) {
        *left = strtoll(val, &end, 10);
        if (end != r || end == val) r = NULL;
    }
    if (r) {
        *right = strtoll(r + 1, &end, 10);
        if (*end || end == r + 1 || errno == ERANGE) r = NULL;
    }
    if (!r)
        usage_error("--window needs two integers LEFT,RIGHT (a negative side unbounded), "
                    "not '%s'",
                    val);
    if (*left > PTRDIFF_MAX || *right > PTRDIFF_MAX)
        usage_error("--window %s: a side beyond %td (use a negative side: unbounded)", val,
                    (ptrdiff_t)PTRDIFF_MAX);
}

static int parse_name(const char *opt, const char *val, const char *const *names, int n)
{
    int i;
    for (i = 0; i < n; ++i)
        if (!strcmp(val, names[i])) return i;
    usage_error("%s: unknown value '%s' (see --help)", opt, val);
    return 0;
}

static void parse_args(int argc, char **argv, config *c)
{
    int i, nfiles = 0, options = 1;
    memset(c, 0, sizeof *c);
    c->method = M_FAVOR;
    c->features = 256;
    c->repeat = 1;
    c->storage = -1;
    c->out_type = FAVOR_F32;
    c->out_itemsize = 4;
    for (i = 1; i < argc; ++i) {
        const char *a = argv[i], *eq, *val = NULL;
        char opt[32];
        if (!options || a[0] != '-' || !a[1]) { /* a file ("-" too, as a name) */
            if (nfiles == 4) usage_error("too many arguments (see --help)");
            c->files[nfiles++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            options = 0;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            exit(0);
        }
        eq = strchr(a, '=');
        if (strlen(a) >= sizeof opt || (eq && (size_t)(eq - a) >= sizeof opt))
            usage_error("unknown option '%.40s' (see --help)", a);
        strcpy(opt, a);
        if (eq) {
            opt[eq - a] = '\0';
            val = eq + 1;
        }
        if (!strcmp(opt, "--causal")) {
            if (val) usage_error("--causal takes no value");
            c->causal = 1;
            continue;
        }
        if (!strcmp(opt, "--no-normalizer")) {
            if (val) usage_error("--no-normalizer takes no value");
            c->no_norm = 1;
            continue;
        }
        if (strcmp(opt, "--method") && strcmp(opt, "--kernel") && strcmp(opt, "--features") &&
            strcmp(opt, "--seed") && strcmp(opt, "--projection") && strcmp(opt, "--scale") &&
            strcmp(opt, "--threads") && strcmp(opt, "--repeat") && strcmp(opt, "--out-dtype") &&
            strcmp(opt, "--storage") && strcmp(opt, "--window") && strcmp(opt, "--softcap") &&
            strcmp(opt, "--alibi") && strcmp(opt, "--sinks") && strcmp(opt, "--mask") &&
            strcmp(opt, "--seqlens") && strcmp(opt, "--decay") && strcmp(opt, "--gates"))
            usage_error("unknown option '%s' (see --help)", opt);
        if (!val) {
            if (i + 1 == argc) usage_error("%s needs a value", opt);
            val = argv[++i];
        }
        if (!strcmp(opt, "--method")) {
            c->method = parse_name(opt, val, method_names, 3);
        } else if (!strcmp(opt, "--kernel")) {
            c->kernel = parse_name(opt, val, kernel_names, (int)N_KERNELS);
            c->given_kernel = 1;
        } else if (!strcmp(opt, "--features")) {
            c->features = (size_t)parse_uint(opt, val, 1, 1ull << 24);
            c->given_features = 1;
        } else if (!strcmp(opt, "--seed")) {
            c->seed = parse_uint(opt, val, 0, ~0ull);
            c->given_seed = 1;
        } else if (!strcmp(opt, "--projection")) {
            c->projection = val;
        } else if (!strcmp(opt, "--scale")) {
            char *end;
            c->scale = strtod(val, &end);
            if (end == val || *end || !(c->scale > 0.0) || !((float)c->scale > 0.0f) ||
                !(c->scale <= FLT_MAX))
                usage_error("--scale needs a positive number, not '%s'", val);
        } else if (!strcmp(opt, "--threads")) {
            c->threads = (int)parse_uint(opt, val, 0, 4096);
        } else if (!strcmp(opt, "--repeat")) {
            c->repeat = (size_t)parse_uint(opt, val, 1, 1000000);
        } else if (!strcmp(opt, "--window")) {
            parse_window(val, &c->window_left, &c->window_right);
            c->window = 1;
        } else if (!strcmp(opt, "--softcap")) {
            c->softcap = parse_float(opt, val);
            c->given_softcap = 1;
        } else if (!strcmp(opt, "--alibi")) {
            c->alibi = val;
        } else if (!strcmp(opt, "--sinks")) {
            c->sinks = val;
        } else if (!strcmp(opt, "--mask")) {
            c->mask = val;
        } else if (!strcmp(opt, "--seqlens")) {
            c->seqlens = val;
        } else if (!strcmp(opt, "--decay")) {
            c->decay = val;
        } else if (!strcmp(opt, "--gates")) {
            c->gates = val;
        } else if (!strcmp(opt, "--storage")) {
            if (!strcmp(val, "f32") || !strcmp(val, "f4") || !strcmp(val, "float32"))
                c->storage = FAVOR_F32;
            else if (!strcmp(val, "f16") || !strcmp(val, "f2") || !strcmp(val, "float16"))
                c->storage = FAVOR_F16;
            else if (!strcmp(val, "bf16") || !strcmp(val, "bfloat16"))
                c->storage = FAVOR_BF16;
            else usage_error("--storage is f16, bf16 or f32, not '%s'", val);
        } else { /* --out-dtype */
            if (!strcmp(val, "f4") || !strcmp(val, "float32")) {
                c->out_type = FAVOR_F32;
                c->out_itemsize = 4;
            } else if (!strcmp(val, "f8") || !strcmp(val, "float64")) {
                c->out_type = FAVOR_F32;
                c->out_itemsize = 8;
            } else if (!strcmp(val, "f2") || !strcmp(val, "float16")) {
                c->out_type = FAVOR_F16;
                c->out_itemsize = 2;
            } else if (!strcmp(val, "bf16") || !strcmp(val, "bfloat16")) {
                c->out_type = FAVOR_BF16;
                c->out_itemsize = 4;
            } else {
                usage_error("--out-dtype is f4, f8, f2 or bf16, not '%s'", val);
            }
        }
    }
    if (nfiles != 4)
        usage_error("expected 4 files (Q.npy K.npy V.npy OUT.npy), got %d (see --help)", nfiles);
    if (c->method != M_FAVOR && (c->given_kernel || c->given_features || c->given_seed ||
                                 c->projection))
        usage_error("--kernel, --features, --seed and --projection are for --method favor");
    if (c->method == M_FAVOR && kernel_fixed(c->kernel) &&
        (c->given_features || c->given_seed || c->projection))
        usage_error("--features, --seed and --projection have no effect with --kernel %s "
                    "(no W)",
                    kernel_names[c->kernel]);
    if (c->projection && c->given_seed)
        usage_error("--seed has no effect with --projection");
    if (c->method == M_ELU && c->scale > 0.0)
        usage_error("--scale has no effect with --method elu (elu(x)+1 is not scaled)");
    if (c->out_type == FAVOR_BF16 && c->storage != FAVOR_BF16)
        usage_error("--out-dtype bf16 is for --storage bf16 (NumPy has no bfloat16)");
    if (c->method != M_SOFTMAX &&
        (c->window || c->given_softcap || c->alibi || c->sinks || c->mask))
        usage_error("--window, --softcap, --alibi, --sinks and --mask are for --method softmax "
                    "(linear attention has no scores to change)");
    if (c->method == M_SOFTMAX && (c->no_norm || c->decay || c->gates))
        usage_error("--no-normalizer, --decay and --gates are for linear attention "
                    "(--method elu or favor)");
    if (c->method == M_FAVOR && kernel_ids[c->kernel] == FAVOR_IDENTITY && !c->no_norm)
        usage_error("--kernel identity needs --no-normalizer (its denominators can be zero or "
                    "negative)");
    if ((c->decay || c->gates) && !c->causal)
        usage_error("%s --causal (gated linear attention decays a causal state)",
                    c->decay && c->gates ? "--decay and --gates need"
                    : c->decay           ? "--decay needs"
                                         : "--gates needs");
}

/* ------------------------------------------------------------------------
 * Shapes: [n, d], [heads, n, d] or [batch, heads, n, d]
 * ---------------------------------------------------------------------- */
static void check_rank(const npy_array *a)
{
    if (a->rank < 2 || a->rank > 4) {
        char s[256];
        shape_string(s, sizeof s, a->shape, a->rank);
        data_error("%s: shape %s has rank %d; expected [n, d], [heads, n, d] or "
                   "[batch, heads, n, d]",
                   a->path, s, a->rank);
    }
}

/* favor's head count: the product of the dimensions before the last two */
static size_t heads_of(const npy_array *a)
{
    size_t h = 1;
    int i;
    for (i = 0; i < a->rank - 2; ++i) h *= a->shape[i];
    return h;
}

static void check_shapes(const npy_array *q, const npy_array *k, const npy_array *v)
{
    char sq[256], sk[256], sv[256];
    int r = q->rank;
    check_rank(q);
    check_rank(k);
    check_rank(v);
    shape_string(sq, sizeof sq, q->shape, q->rank);
    shape_string(sk, sizeof sk, k->shape, k->rank);
    shape_string(sv, sizeof sv, v->shape, v->rank);
    if (k->rank != r || v->rank != r)
        data_error("Q %s, K %s and V %s must have the same rank", sq, sk, sv);
    if (k->shape[r - 1] != q->shape[r - 1])
        data_error("K %s and Q %s must have the same last dimension d", sk, sq);
    if (v->shape[r - 2] != k->shape[r - 2] || (r >= 3 && v->shape[r - 3] != k->shape[r - 3]) ||
        (r == 4 && v->shape[0] != k->shape[0]))
        data_error("V %s must be shaped as K %s except for its last dimension", sv, sk);
    if (r == 4 && k->shape[0] != q->shape[0])
        data_error("K %s and Q %s must have the same batch size", sk, sq);
    if (r >= 3 && q->shape[r - 3] % k->shape[r - 3] != 0)
        data_error("K and V have %zu heads, which does not divide Q's %zu", k->shape[r - 3],
                   q->shape[r - 3]);
}

/* ------------------------------------------------------------------------
 * Score variants and packed sequences: their files, checked against the call
 * ---------------------------------------------------------------------- */
static void shape_error(const npy_array *a, const char *what, const char *expected)
{
    char s[256];
    shape_string(s, sizeof s, a->shape, a->rank);
    data_error("%s: %s is %s; expected %s", a->path, what, s, expected);
}

/* --alibi or --sinks: one float per query head of a batch element (favor's
 * heads_q); --decay: per key/value head (whose: "Q" or "K"); as float32 */
static float *read_per_head(const char *path, const char *what, size_t heads, const char *whose)
{
    npy_array a;
    read_npy(path, &a, FAVOR_F32);
    if (a.rank != 1 || a.shape[0] != heads) {
        char e[64];
        snprintf(e, sizeof e, "[%zu], one per head of %s", heads, whose);
        shape_error(&a, what, e);
    }
    return a.data;
}

/* --mask: [n, n_k] or [heads, n, n_k] (heads 1 or Q's), as read */
static favor_tensor read_mask(const char *path, size_t heads, size_t n, size_t nk)
{
    npy_array a;
    int r;
    read_npy(path, &a, -1);
    r = a.rank;
    if ((r != 2 && r != 3) || a.shape[r - 2] != n || a.shape[r - 1] != nk ||
        (r == 3 && a.shape[0] != heads && a.shape[0] != 1)) {
        char e[160];
        snprintf(e, sizeof e, "[n, n_k] = [%zu, %zu] or [heads, n, n_k] = [%zu, %zu, %zu]", n,
                 nk, heads, n, nk);
        shape_error(&a, "--mask", e);
    }
    return favor_tensor_packed_as(a.dtype, a.data, r == 3 ? a.shape[0] : 1, n, nk);
}

/* --gates: one log-gate per key position, shaped as K without its last
 * dimension, as float32: the view [batch][heads_kv][n_k][1] */
static favor_tensor read_gates(const char *path, const npy_array *k, size_t batch)
{
    static const char *const names[] = {"batch", "heads", "n_k"};
    npy_array a;
    int i, r = k->rank - 1, ok;
    read_npy(path, &a, FAVOR_F32);
    ok = a.rank == r;
    for (i = 0; ok && i < r; ++i) ok = a.shape[i] == k->shape[i];
    if (!ok) {
        char e[256];
        size_t n = 0;
        for (i = 0; i < r; ++i) /* [heads, n_k] = [2, 130] */
            n += (size_t)snprintf(e + n, sizeof e - n, "%s%s", i ? ", " : "[", names[3 - r + i]);
        for (i = 0; i < r; ++i)
            n += (size_t)snprintf(e + n, sizeof e - n, "%s%zu", i ? ", " : "] = [", k->shape[i]);
        snprintf(e + n, sizeof e - n, "], K's shape without its last dimension");
        shape_error(&a, "--gates", e);
    }
    return favor_tensor_batched(FAVOR_F32, a.data, batch, heads_of(k) / batch, k->shape[r - 1],
                                1);
}

/* --seqlens: the lengths of the packed sequences, as cu_seqlens-style offsets
 * (seqs + 1 of them, 0 to n) for both Q and K/V, packed alike */
static size_t *read_seqlens(const char *path, size_t n, size_t nk, size_t *seqs)
{
    npy_array a;
    size_t *off, s, sum;
    if (n != nk)
        data_error("--seqlens packs Q and K/V alike, so n (%zu) must equal n_k (%zu)", n, nk);
    read_npy(path, &a, AS_INT64);
    if (a.rank != 1) shape_error(&a, "--seqlens", "a vector [sequences] of lengths");
    /* checked whole before the offsets are allocated: data_error exits, and an
     * allocation made first would be left behind (LeakSanitizer reports it) */
    for (s = 0, sum = 0; s < a.count; ++s) {
        int64_t len = ((const int64_t *)a.data)[s];
        if (len < 0)
            data_error("%s: sequence %zu has the negative length %lld", path, s, (long long)len);
        if ((uint64_t)len > n - sum)
            data_error("%s: the lengths add up past n = %zu (at sequence %zu)", path, n, s);
        sum += (size_t)len;
    }
    if (sum != n) data_error("%s: the lengths add up to %zu, not to n = %zu", path, sum, n);
    off = malloc((a.count + 1) * sizeof *off); /* no overflow: int64_t each */
    if (!off) data_error("%s: out of memory", path);
    off[0] = 0;
    for (s = 0; s < a.count; ++s) off[s + 1] = off[s] + (size_t)((const int64_t *)a.data)[s];
    *seqs = a.count;
    free(a.data);
    return off;
}

/* the variants of the call, for the timing line */
static void print_variants(const config *c, size_t seqs)
{
    if (c->window) printf(" window=%lld,%lld", c->window_left, c->window_right);
    if (c->given_softcap) printf(" softcap=%g", (double)c->softcap);
    if (c->alibi) printf(" alibi");
    if (c->sinks) printf(" sinks");
    if (c->mask) printf(" mask");
    if (c->no_norm) printf(" no-normalizer");
    if (c->decay) printf(" decay");
    if (c->gates) printf(" gates");
    if (c->seqlens) printf(" seqs=%zu", seqs);
}

/* ------------------------------------------------------------------------ */
static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    config c;
    npy_array q, k, v, w;
    favor_features f;
    favor_options opt = favor_default_options();
    favor_tensor tq, tk, tv, to, tm, tg;
    favor_status st = FAVOR_OK;
    char why[200]; /* the library's reason when a call is refused */
    size_t batch;
    float *storage = NULL, *alibi = NULL, *sinks = NULL, *decay = NULL;
    size_t *offsets = NULL, seqs = 0;
    void *out;
    void *workspace = NULL;
    size_t hq, hkv, n, nk, d, dv, ws = 0, oshape[4], rep, i, j;
    double *times, median;
    const char *out_path;
    struct stat sb;
    struct sigaction sa;
    output dest;
    mode_t umask_bits;
    int r;

    parse_args(argc, argv, &c);
    out_path = c.files[3];
    umask_bits = umask(0);
    umask(umask_bits);
    atexit(remove_tmp);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (stat(out_path, &sb) == 0 && S_ISDIR(sb.st_mode)) /* before reading anything */
        data_error("%s: is a directory", out_path);

    read_npy(c.files[0], &q, c.storage);
    read_npy(c.files[1], &k, c.storage);
    read_npy(c.files[2], &v, c.storage);
    check_shapes(&q, &k, &v);
    r = q.rank;
    hq = heads_of(&q);
    hkv = heads_of(&k);
    batch = r == 4 ? q.shape[0] : 1; /* [batch, heads, n, d]: one batched call */
    n = q.shape[r - 2];
    d = q.shape[r - 1];
    nk = k.shape[r - 2];
    dv = v.shape[r - 1];
    /* the variants' files, checked against Q's heads (of one batch element); the
     * gates' against K's */
    if (c.alibi) alibi = read_per_head(c.alibi, "--alibi", hq / batch, "Q");
    if (c.sinks) sinks = read_per_head(c.sinks, "--sinks", hq / batch, "Q");
    if (c.decay) decay = read_per_head(c.decay, "--decay", hkv / batch, "K");
    if (c.gates) tg = read_gates(c.gates, &k, batch);
    if (c.mask) tm = read_mask(c.mask, hq / batch, n, nk);
    if (c.seqlens) offsets = read_seqlens(c.seqlens, n, nk, &seqs);

    if (c.method == M_ELU) {
        st = favor_features_init(&f, FAVOR_ELU1, d, 0, 0, 0, NULL);
    } else if (c.method == M_FAVOR && kernel_fixed(c.kernel)) {
        /* exact, no W: count d and no storage, as ELU1; poly2's width grows as
         * d^2 / 2, identity's is d */
        st = favor_features_init(&f, kernel_ids[c.kernel], d, 0, 0, 0, NULL);
        if (st == FAVOR_E_OVERFLOW && kernel_ids[c.kernel] == FAVOR_POLY2)
            data_error("--kernel poly2 takes d <= 4096; Q has d = %zu", d);
    } else if (c.method == M_FAVOR) {
        favor_kernel kern = kernel_ids[c.kernel];
        size_t floats;
        if (c.projection) {
            read_npy(c.projection, &w, FAVOR_F32); /* W is float32 in favor.h */
            if (w.rank != 2 || w.shape[1] != d) {
                char s[256];
                shape_string(s, sizeof s, w.shape, w.rank);
                data_error("%s: the projection is %s; expected [m, %zu] (d = %zu from Q)",
                           c.projection, s, d, d);
            }
            if (c.given_features && c.features != w.shape[0])
                data_error("--features %zu, but %s has %zu rows", c.features, c.projection,
                           w.shape[0]);
            c.features = w.shape[0];
        }
        floats = favor_features_floats(kern, d, c.features);
        if (!floats) data_error("%zu features of dimension %zu are too many", c.features, d);
        storage = malloc(floats * sizeof *storage);
        if (!storage) data_error("out of memory (%zu features of dimension %zu)", c.features, d);
        st = favor_features_init(&f, kern, d, c.features, 0, c.seed, storage);
        if (st == FAVOR_OK && c.projection) {
            /* Replace the drawn W by the given one: the map reads W (m x d) and
             * its transpose W^T (d x m) from f.w and f.wt and keeps nothing else
             * derived from them. */
            for (i = 0; i < c.features; ++i)
                for (j = 0; j < d; ++j) {
                    f.w[i * d + j] = ((float *)w.data)[i * d + j];
                    f.wt[j * c.features + i] = ((float *)w.data)[i * d + j];
                }
            free(w.data);
        }
    }
    if (st != FAVOR_OK) data_error("favor_features_init: %s", favor_status_string(st));
    open_output(&dest, out_path, umask_bits);

    for (i = 0; i + 1 < (size_t)r; ++i) oshape[i] = q.shape[i];
    oshape[r - 1] = dv;
    if (!mul_ok(hq * n, dv, &i) || i > SIZE_MAX / favor_dtype_size(c.out_type))
        data_error("the output does not fit in memory");
    out = malloc(i * favor_dtype_size(c.out_type));
    times = malloc(c.repeat * sizeof *times);
    if (!out || !times) data_error("out of memory (output of %zu elements)", i);
    /* the inputs as read (or as --storage made them), the output as asked */
    tq = favor_tensor_batched(q.dtype, q.data, batch, hq / batch, n, d);
    tk = favor_tensor_batched(k.dtype, k.data, batch, hkv / batch, nk, d);
    tv = favor_tensor_batched(v.dtype, v.data, batch, hkv / batch, nk, dv);
    to = favor_tensor_batched(c.out_type, out, batch, hq / batch, n, dv);
    opt.error = why;
    opt.error_size = sizeof why;
    why[0] = '\0';
    opt.flags = (c.causal ? FAVOR_CAUSAL : 0u) | (c.window ? FAVOR_WINDOW : 0u) |
                (c.no_norm ? FAVOR_NO_NORM : 0u);
    opt.scale = (float)c.scale;
    opt.threads = c.threads;
    opt.window_left = (ptrdiff_t)c.window_left;
    opt.window_right = (ptrdiff_t)c.window_right;
    opt.softcap = c.softcap;
    opt.alibi = alibi;
    opt.sinks = sinks;
    opt.mask = c.mask ? &tm : NULL;
    opt.seqs = seqs;
    opt.seq_q = offsets;
    opt.seq_k = offsets;
    opt.decay = decay;
    opt.gates = c.gates ? &tg : NULL;
    /* the workspace once, so the timed calls do not allocate */
    ws = c.method == M_SOFTMAX ? favor_softmax_attention_workspace(&tq, &tk, &tv, &opt)
                               : favor_linear_attention_workspace(&f, &tq, &tk, &tv, &opt);
    if (ws) {
        workspace = malloc(ws);
        if (!workspace) data_error("out of memory (workspace of %zu bytes)", ws);
        opt.workspace = workspace;
        opt.workspace_size = ws;
    }
    for (rep = 0; rep < c.repeat && st == FAVOR_OK; ++rep) {
        double t0 = now_ms();
        st = c.method == M_SOFTMAX ? favor_softmax_attention(&tq, &tk, &tv, &to, &opt)
                                   : favor_linear_attention(&f, &tq, &tk, &tv, &to, &opt);
        times[rep] = now_ms() - t0;
    }
    if (st != FAVOR_OK) {
        /* times is dead past here: freed, or LeakSanitizer can find no pointer
         * left to it when exit() runs (gcc -O1 without inlining reuses its
         * register); the other buffers stay reachable through the tensors */
        free(times);
        data_error("favor_%s_attention: %s%s%s", c.method == M_SOFTMAX ? "softmax" : "linear",
                   favor_status_string(st), why[0] ? ": " : "", why);
    }

    write_npy(&dest, out, c.out_type, oshape, r, c.out_itemsize);
    finish_output(&dest);

    qsort(times, c.repeat, sizeof *times, cmp_double);
    median = c.repeat % 2 ? times[c.repeat / 2]
                          : 0.5 * (times[c.repeat / 2 - 1] + times[c.repeat / 2]);
    if (c.method == M_FAVOR && kernel_fixed(c.kernel))
        printf(PROG ": favor/%s width=%zu", kernel_names[c.kernel], favor_features_width(&f));
    else if (c.method == M_FAVOR)
        printf(PROG ": favor/%s m=%zu", kernel_names[c.kernel], c.features);
    else
        printf(PROG ": %s", method_names[c.method]);
    printf(" %s", c.causal ? "causal" : "non-causal");
    print_variants(&c, seqs);
    printf(" heads=%zu kv_heads=%zu n=%zu n_k=%zu d=%zu dv=%zu %s: %.3f ms (median of %zu)\n", hq,
           hkv, n, nk, d, dv, favor_backend(), median, c.repeat);
    free(times);
    free(workspace);
    free(out);
    free(storage);
    free(alibi);
    free(sinks);
    free(decay);
    free(offsets);
    if (c.gates) free(tg.data);
    if (c.mask) free(tm.data);
    free(q.data);
    free(k.data);
    free(v.data);
    return fflush(stdout) == 0 ? 0 : 1;
}
