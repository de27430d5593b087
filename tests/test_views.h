/* Strided tensor views for the accuracy tests (test_softmax.c, test_linear.c,
 * test_recurrent.c): a buffer with a packed, interleaved or padded layout, whose
 * gaps and (for outputs) unwritten elements are NaN, plus checks that a call
 * never wrote an input or a gap. */
#ifndef FAVOR_TEST_VIEWS_H
#define FAVOR_TEST_VIEWS_H

#include "test_util.h"

typedef enum {
    TV_PACKED = 0,   /* [heads][rows][cols]                                   */
    TV_INTERLEAVED,  /* [rows][heads*cols]: head_stride cols, row_stride h*c   */
    TV_PADDED,       /* [heads][rows][cols+3], 5 floats between heads          */
    TV_INTERPAD      /* [rows][heads*(cols+1)+2]: interleaved with padding     */
} tv_layout;

static inline const char *tv_layout_name(tv_layout l)
{
    switch (l) {
    case TV_PACKED: return "packed";
    case TV_INTERLEAVED: return "interleaved";
    case TV_PADDED: return "padded";
    case TV_INTERPAD: return "interpad";
    }
    return "?";
}

typedef struct {
    favor_tensor t;
    float *buf;           /* the whole buffer (t.data == buf)                */
    float *init;          /* its contents right after tv_make                */
    unsigned char *mask;  /* 1 where an element of the view lives            */
    size_t len;           /* floats in buf                                   */
} tv_buf;

/* A heads x rows x cols view in layout `lay`. Gaps are NaN; the view's elements
 * are N(0, sigma^2) from r, or NaN when sigma < 0 (an output to be written). */
static inline void tv_make(tv_buf *b, size_t heads, size_t rows, size_t cols,
                           tv_layout lay, tu_rng *r, double sigma)
{
    size_t hs = 0, rs = 0, h, i, c;
    switch (lay) {
    case TV_PACKED: rs = cols; hs = rows * cols; break;
    case TV_INTERLEAVED: hs = cols; rs = heads * cols; break;
    case TV_PADDED: rs = cols + 3; hs = rows * rs + 5; break;
    case TV_INTERPAD: hs = cols + 1; rs = heads * (cols + 1) + 2; break;
    }
    b->len = (heads - 1) * hs + (rows - 1) * rs + cols;
    b->buf = (float *)malloc(b->len * sizeof *b->buf);
    b->init = (float *)malloc(b->len * sizeof *b->init);
    b->mask = (unsigned char *)calloc(b->len, 1);
    if (!b->buf || !b->init || !b->mask) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (i = 0; i < b->len; ++i) b->buf[i] = (float)NAN;
    for (h = 0; h < heads; ++h)
        for (i = 0; i < rows; ++i)
            for (c = 0; c < cols; ++c) {
                size_t at = h * hs + i * rs + c;
                b->mask[at] = 1;
                b->buf[at] = sigma < 0 ? (float)NAN : (float)(sigma * tu_normal(r));
            }
    memcpy(b->init, b->buf, b->len * sizeof *b->buf);
    memset(&b->t, 0, sizeof b->t); /* batch 0: one element */
    b->t.data = b->buf;
    b->t.heads = heads;
    b->t.rows = rows;
    b->t.cols = cols;
    b->t.head_stride = hs;
    b->t.row_stride = rs;
    b->t.dtype = FAVOR_F32;
}

static inline void tv_free(tv_buf *b)
{
    free(b->buf);
    free(b->init);
    free(b->mask);
}

/* Multiply the view's elements by s (and remember the result as the initial state). */
static inline void tv_scale(tv_buf *b, double s)
{
    size_t i;
    for (i = 0; i < b->len; ++i)
        if (b->mask[i]) b->buf[i] = (float)(s * b->buf[i]);
    memcpy(b->init, b->buf, b->len * sizeof *b->buf);
}

/* Back to the initial contents (an output: all NaN again). */
static inline void tv_reset(tv_buf *b) { memcpy(b->buf, b->init, b->len * sizeof *b->buf); }

/* 1 when the whole buffer is bit-for-bit as initialised (an input nobody wrote). */
static inline int tv_unchanged(const tv_buf *b)
{
    return memcmp(b->buf, b->init, b->len * sizeof *b->buf) == 0;
}

/* 1 when every gap outside the view is bit-for-bit as initialised. */
static inline int tv_gaps_unchanged(const tv_buf *b)
{
    size_t i;
    for (i = 0; i < b->len; ++i)
        if (!b->mask[i] && memcmp(&b->buf[i], &b->init[i], sizeof(float)) != 0) return 0;
    return 1;
}

/* 1 when every element of the view is finite (an output fully written). */
static inline int tv_view_finite(const tv_buf *b)
{
    size_t i;
    for (i = 0; i < b->len; ++i)
        if (b->mask[i] && !isfinite(b->buf[i])) return 0;
    return 1;
}

/* max |x| over the view's elements. */
static inline double tv_max_abs(const tv_buf *b)
{
    size_t i;
    double m = 0;
    for (i = 0; i < b->len; ++i)
        if (b->mask[i] && fabs((double)b->buf[i]) > m) m = fabs((double)b->buf[i]);
    return m;
}

/* A view of rows [r0, r0 + rows) of t (same strides, data offset). */
static inline favor_tensor tv_rows(const favor_tensor *t, size_t r0, size_t rows)
{
    favor_tensor v = *t;
    v.data = (float *)t->data + r0 * t->row_stride;
    v.rows = rows;
    return v;
}

#endif
