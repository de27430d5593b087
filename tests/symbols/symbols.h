/* tests/symbols: the functions the two translation units export to main.c. */
#ifndef FAVOR_SYMBOLS_TEST_H
#define FAVOR_SYMBOLS_TEST_H

#include "favor.h"

/* FAVOR+ (d = 16, m = 32, seed 5) causal linear attention and causal softmax of
 * fixed inputs (1 head, 40 rows): 2 * 40 * 8 floats into out. Returns 0 on
 * success. tu_extern.c calls the extern favor_ functions (the ones main.c sees),
 * tu_static.c its own private FAVOR_STATIC copy. */
int tu_extern_run(float *out);
int tu_static_run(float *out);

/* favor_backend as each translation unit sees it: the extern function, or
 * tu_static.c's private copy (a different function). */
typedef const char *(*symbols_backend_fn)(void);
symbols_backend_fn tu_extern_backend(void);
symbols_backend_fn tu_static_backend(void);

#define SYMBOLS_ROWS 40
#define SYMBOLS_D 16
#define SYMBOLS_DV 8

/* the shared body of tu_extern_run and tu_static_run: expanded in each file, so
 * it calls that file's favor_ functions */
#define SYMBOLS_RUN_BODY(out)                                                          \
    do {                                                                               \
        float q[SYMBOLS_ROWS * SYMBOLS_D], k[SYMBOLS_ROWS * SYMBOLS_D];                \
        float v[SYMBOLS_ROWS * SYMBOLS_DV], w[2 * 32 * SYMBOLS_D + 2 * SYMBOLS_D];     \
        favor_tensor Q, K, V, O1, O2;                                                  \
        favor_features f;                                                              \
        favor_options opt = favor_default_options();                                  \
        int i;                                                                         \
        for (i = 0; i < SYMBOLS_ROWS * SYMBOLS_D; ++i) {                               \
            q[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;                             \
            k[i] = (float)((i * 53) % 103) / 51.0f - 1.0f;                             \
        }                                                                              \
        for (i = 0; i < SYMBOLS_ROWS * SYMBOLS_DV; ++i)                                \
            v[i] = (float)((i * 29) % 97) / 48.0f - 1.0f;                              \
        Q = favor_tensor_packed(q, 1, SYMBOLS_ROWS, SYMBOLS_D);                        \
        K = favor_tensor_packed(k, 1, SYMBOLS_ROWS, SYMBOLS_D);                        \
        V = favor_tensor_packed(v, 1, SYMBOLS_ROWS, SYMBOLS_DV);                       \
        O1 = favor_tensor_packed(out, 1, SYMBOLS_ROWS, SYMBOLS_DV);                    \
        O2 = favor_tensor_packed(out + SYMBOLS_ROWS * SYMBOLS_DV, 1, SYMBOLS_ROWS,     \
                                 SYMBOLS_DV);                                          \
        opt.flags = FAVOR_CAUSAL;                                                      \
        opt.threads = 1;                                                               \
        if (favor_features_floats(FAVOR_POSITIVE, SYMBOLS_D, 32) > sizeof w / sizeof w[0]) \
            return 1;                                                                  \
        if (favor_features_init(&f, FAVOR_POSITIVE, SYMBOLS_D, 32, 0, 5, w) != FAVOR_OK) \
            return 2;                                                                  \
        if (favor_linear_attention(&f, &Q, &K, &V, &O1, &opt) != FAVOR_OK) return 3;  \
        if (favor_softmax_attention(&Q, &K, &V, &O2, &opt) != FAVOR_OK) return 4;      \
        return 0;                                                                      \
    } while (0)

#endif
