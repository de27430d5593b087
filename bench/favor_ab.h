/* favor_ab: two or more builds of favor.h timed in one process (bench/README.md,
 * "Comparing two versions of the header"). The driver, bench/favor_ab.c, loads
 * one shared object per build, each bench/favor_ab_lib.c compiled against its
 * own favor.h, and calls the function below in each; only this header's types
 * cross between them, so builds whose public structs differ can be compared. */
#ifndef FAVOR_AB_H
#define FAVOR_AB_H

#include <stddef.h>

/* One call of favor_softmax_attention: hq query heads on hk key/value heads, d =
 * d_v, K and V of n_keys rows; decode: the last `rows` query rows of a causal
 * call (row i sees keys j <= i + n_keys - rows); prefill: rows = n_keys,
 * causal or not. backward: favor_softmax_attention_backward of that call, given
 * its output `out` and `dout` (hq*rows*d floats each, no lse: the call
 * recomputes it), writing dq into o and dk, dv (hk*n_keys*d floats each).
 * cap, alibi, mask, window: the score variants (favor_options.softcap, .alibi,
 * .mask, .window_left). */
typedef struct {
    int decode, causal, backward;
    int type; /* K and V: 0 fp32, 1 fp16, 2 bf16 (Q, O and the gradients fp32) */
    size_t n_keys, rows, d, hq, hk;
    int threads;
    float cap; /* softcap c (0: none) */
    int alibi; /* 1: ALiBi with the slopes 2^(-8 (h + 1) / hq) */
    int mask;  /* 1: an fp32 mask of zeros, [1][rows][n_keys] */
    long window; /* > 0: FAVOR_WINDOW, window_left = window, right unbounded */
    const float *out, *dout; /* backward only */
    float *dk, *dv;
} favor_ab_case;

/* q: hq*rows*d floats; k, v: hk*n_keys*d elements of c->type (fp16 and bf16
 * as uint16_t); o: hq*rows*d floats (the output, or dq). Returns the call's
 * status (0: success). */
typedef int (*favor_ab_fn)(const favor_ab_case *c, const float *q, const void *k,
                           const void *v, float *o);
#define FAVOR_AB_SYMBOL "favor_ab_softmax"

#endif
