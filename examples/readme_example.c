#define FAVOR_IMPLEMENTATION /* in exactly one .c file; elsewhere just #include */
#include "favor.h"
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    size_t h = 8, n = 1024, d = 64, m = 256, len = h * n * d, i; /* [head][token][dim] */
    float *x = malloc(4 * len * sizeof *x), *w = malloc(favor_features_floats(FAVOR_POSITIVE, d, m) * sizeof *w);
    if (!x || !w) return 1;
    for (i = 0; i < 3 * len; ++i) x[i] = (float)(i % 2003) / 1001.0f - 1.0f; /* q, k, v */
    favor_tensor q = favor_tensor_packed(x, h, n, d), k = favor_tensor_packed(x + len, h, n, d),
                 v = favor_tensor_packed(x + 2 * len, h, n, d), o = favor_tensor_packed(x + 3 * len, h, n, d);
    favor_features f; /* FAVOR+: m positive orthogonal random features, seed 42 */
    favor_status st = favor_features_init(&f, FAVOR_POSITIVE, d, m, 0, 42, w);
    favor_options opt = favor_default_options();
    opt.flags = FAVOR_CAUSAL;                                                  /* or 0 */
    if (st == FAVOR_OK) st = favor_linear_attention(&f, &q, &k, &v, &o, &opt); /* O(n)   */
    if (st == FAVOR_OK) st = favor_softmax_attention(&q, &k, &v, &o, &opt);    /* O(n^2) */
    printf("%s, o[0][0][0] = %f\n", favor_status_string(st), ((float *)o.data)[0]);
    free(x);
    free(w);
    return st != FAVOR_OK;
}
