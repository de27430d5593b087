/* The smallest program that uses favor.h from outside this repository: exact and
 * FAVOR+ attention on one head; exits 0 when both calls succeed and the two
 * outputs agree roughly (FAVOR+ estimates softmax attention). */
#define FAVOR_IMPLEMENTATION
#include "favor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    enum { N = 64, D = 16, M = 256 };
    static float q[N * D], k[N * D], v[N * D], o1[N * D], o2[N * D];
    float *w = malloc(favor_features_floats(FAVOR_POSITIVE, D, M) * sizeof *w);
    favor_tensor Q = favor_tensor_packed(q, 1, N, D), K = favor_tensor_packed(k, 1, N, D);
    favor_tensor V = favor_tensor_packed(v, 1, N, D), O1 = favor_tensor_packed(o1, 1, N, D);
    favor_tensor O2 = favor_tensor_packed(o2, 1, N, D);
    favor_features f;
    double err = 0;
    int i;
    if (!w) return 1;
    for (i = 0; i < N * D; ++i) {
        q[i] = 0.3f * sinf(0.37f * (float)i);
        k[i] = 0.3f * cosf(0.23f * (float)i);
        v[i] = sinf(0.11f * (float)i);
    }
    if (favor_softmax_attention(&Q, &K, &V, &O1, NULL) != FAVOR_OK ||
        favor_features_init(&f, FAVOR_POSITIVE, D, M, 0, 7, w) != FAVOR_OK ||
        favor_linear_attention(&f, &Q, &K, &V, &O2, NULL) != FAVOR_OK) {
        fprintf(stderr, "consumer: a favor.h call failed\n");
        return 1;
    }
    for (i = 0; i < N * D; ++i) err = fmax(err, fabs((double)o1[i] - (double)o2[i]));
    printf("consumer: favor.h (%s backend), max |softmax - FAVOR+| = %.3g\n", favor_backend(), err);
    free(w);
    return err < 0.2 ? 0 : 1;
}
