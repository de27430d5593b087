/* One build of favor.h for favor_ab (bench/favor_ab.h): compiled into a shared
 * object against the favor.h whose speed is measured, e.g.
 *   cc -O2 -march=native -fopenmp -fPIC -shared -I<dir of that favor.h> \
 *      -Ibench bench/favor_ab_lib.c -o a.so
 * (bench/favor_ab.sh does this for files and git revisions). */
#define FAVOR_IMPLEMENTATION
#include "favor.h"
#include "favor_ab.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

int favor_ab_softmax(const favor_ab_case *c, const float *q, const void *k, const void *v,
                     float *o);

int favor_ab_softmax(const favor_ab_case *c, const float *q, const void *k, const void *v,
                     float *o)
{
    static const favor_dtype types[3] = {FAVOR_F32, FAVOR_F16, FAVOR_BF16};
    favor_tensor Q, K, V, O;
    favor_options op = favor_default_options();
    if (c->type < 0 || c->type > 2) return -1;
    /* the views do not write through q, k, v: the calls take them as const */
    Q = favor_tensor_packed_as(FAVOR_F32, (void *)(uintptr_t)q, c->hq, c->rows, c->d);
    K = favor_tensor_packed_as(types[c->type], (void *)(uintptr_t)k, c->hk, c->n_keys, c->d);
    V = favor_tensor_packed_as(types[c->type], (void *)(uintptr_t)v, c->hk, c->n_keys, c->d);
    O = favor_tensor_packed_as(FAVOR_F32, o, c->hq, c->rows, c->d);
    float *slopes = NULL, *zeros = NULL;
    favor_tensor M;
    int st;
    op.threads = c->threads;
    op.flags = c->decode || c->causal ? FAVOR_CAUSAL : 0u;
    op.softcap = c->cap;
    if (c->alibi) { /* a call's own slopes: the timing includes 8 divisions a call */
        size_t h;
        if (!(slopes = (float *)malloc(c->hq * sizeof *slopes))) return -1;
        for (h = 0; h < c->hq; ++h) slopes[h] = exp2f(-8.0f * (float)(h + 1) / (float)c->hq);
        op.alibi = slopes;
    }
    if (c->mask) { /* allocated and zeroed in the call: the timing includes it */
        if (!(zeros = (float *)calloc(c->rows * c->n_keys, sizeof *zeros))) {
            free(slopes);
            return -1;
        }
        M = favor_tensor_packed_as(FAVOR_F32, zeros, 1, c->rows, c->n_keys);
        op.mask = &M;
    }
    if (c->window > 0) {
        op.flags |= FAVOR_WINDOW;
        op.window_left = (ptrdiff_t)c->window;
        op.window_right = -1;
    }
    if (c->backward) {
        favor_tensor Out, dOut, dK, dV;
        Out = favor_tensor_packed_as(FAVOR_F32, (void *)(uintptr_t)c->out, c->hq, c->rows, c->d);
        dOut = favor_tensor_packed_as(FAVOR_F32, (void *)(uintptr_t)c->dout, c->hq, c->rows,
                                      c->d);
        dK = favor_tensor_packed_as(FAVOR_F32, c->dk, c->hk, c->n_keys, c->d);
        dV = favor_tensor_packed_as(FAVOR_F32, c->dv, c->hk, c->n_keys, c->d);
        st = (int)favor_softmax_attention_backward(&Q, &K, &V, &Out, &dOut, &O, &dK, &dV, &op);
    } else
        st = (int)favor_softmax_attention(&Q, &K, &V, &O, &op);
    free(slopes);
    free(zeros);
    return st;
}
