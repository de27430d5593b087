/* favor.h on a microcontroller: built by tests/portability.sh cortex-m4 with
 * arm-none-eabi-gcc -mcpu=cortex-m4 -mfloat-abi=hard (newlib, nosys specs), the
 * scalar backend and FAVOR_NO_MALLOC, so every call runs on caller workspaces in
 * static memory. It is compiled and linked there, and its code size reported; it
 * is not run (no board), but it is an ordinary C program that a host compiler
 * can build and run too: it returns 0 when every call succeeds. */
#define FAVOR_NO_SIMD
#define FAVOR_NO_MALLOC
#define FAVOR_IMPLEMENTATION
#include "favor.h"

#define H 2
#define N 16
#define D 8
#define DV 8
#define M 16

static float q[H * N * D], k[H * N * D], v[H * N * DV], o[H * N * DV];
static float dq[H * N * D], dk[H * N * D], dv[H * N * DV], phi[H * N * M];
static float wstore[2 * M * D + 2 * D];
/* favor_state_floats: heads (2 m (dv + 2) + 2 d + 3 + 16 (m + dv + 2)) + m +
 * max(m, 16 dv) + 35 (the size is checked below) */
static float ststore[H * (2 * M * (DV + 2) + 2 * D + 3 + 16 * (M + DV + 2)) + M +
                     (M > 16 * DV ? M : 16 * DV) + 35];
static unsigned char work[64 * 1024];

int main(void)
{
    favor_tensor Q = favor_tensor_packed(q, H, N, D), K = favor_tensor_packed(k, H, N, D),
                 V = favor_tensor_packed(v, H, N, DV), O = favor_tensor_packed(o, H, N, DV),
                 DQ = favor_tensor_packed(dq, H, N, D), DK = favor_tensor_packed(dk, H, N, D),
                 DVt = favor_tensor_packed(dv, H, N, DV), P = favor_tensor_packed(phi, H, N, M);
    favor_options opt = favor_default_options();
    favor_features f;
    favor_state st;
    unsigned i, bad = 0;
    for (i = 0; i < H * N * D; ++i) q[i] = k[i] = (float)(i % 7) * 0.1f - 0.3f;
    for (i = 0; i < H * N * DV; ++i) v[i] = (float)(i % 5) * 0.2f;
    opt.workspace = work;
    opt.workspace_size = sizeof work;
    opt.flags = FAVOR_CAUSAL;
    if (favor_features_floats(FAVOR_POSITIVE, D, M) > sizeof wstore / sizeof *wstore) return 1;
    bad |= favor_features_init(&f, FAVOR_POSITIVE, D, M, 0, 1, wstore) != FAVOR_OK;
    bad |= favor_features_redraw(&f, 2) != FAVOR_OK;
    bad |= favor_feature_map(&f, &Q, &P, FAVOR_QUERY) != FAVOR_OK;
    bad |= favor_softmax_attention_workspace(&Q, &K, &V, &opt) > sizeof work;
    bad |= favor_softmax_attention(&Q, &K, &V, &O, &opt) != FAVOR_OK;
    bad |= favor_softmax_attention_backward_workspace(&Q, &K, &V, &opt) > sizeof work;
    bad |= favor_softmax_attention_backward(&Q, &K, &V, &O, &O, &DQ, &DK, &DVt, &opt) != FAVOR_OK;
    bad |= favor_linear_attention_workspace(&f, &Q, &K, &V, &opt) > sizeof work;
    bad |= favor_linear_attention(&f, &Q, &K, &V, &O, &opt) != FAVOR_OK;
    bad |= favor_linear_attention_backward_workspace(&f, &Q, &K, &V, &opt) > sizeof work;
    bad |= favor_linear_attention_backward(&f, &Q, &K, &V, &O, &DQ, &DK, &DVt, &opt) != FAVOR_OK;
    if (favor_state_floats(&f, H, DV) > sizeof ststore / sizeof *ststore) return 1;
    bad |= favor_state_init(&st, &f, H, DV, ststore) != FAVOR_OK;
    bad |= favor_linear_extend_workspace(&f, &st, &Q, &K, &V, &opt) > sizeof work;
    bad |= favor_linear_extend(&f, &st, &Q, &K, &V, &O, &opt) != FAVOR_OK;
    Q.rows = K.rows = V.rows = O.rows = 1;
    bad |= favor_linear_step(&f, &st, &Q, &K, &V, &O) != FAVOR_OK;
    favor_state_reset(&st);
    bad |= favor_features_width(&f) != M;
    bad |= favor_status_string(FAVOR_E_ARG)[0] != 'F' || favor_backend()[0] != 's';
    return (int)bad;
}
