/* peer_ggml: ggml's CPU flash attention (ggml_flash_attn_ext, what llama.cpp runs
 * on CPUs) as a peer of favor_bench, through ggml's public C API only.
 *
 * Compiled into favor_bench when CMake is given a ggml source tree
 * (FAVOR_GGML_DIR, see bench/README.md), with FAVOR_BENCH_GGML defined. This
 * interface keeps ggml's headers out of favor_bench.c, which includes favor.h's
 * implementation: the two libraries never share a translation unit. */
#ifndef FAVOR_BENCH_PEER_GGML_H
#define FAVOR_BENCH_PEER_GGML_H

#include <stddef.h>

/* One attention call in favor.h's layout, on the caller's buffers (ggml reads
 * them in place: the same bytes favor.h reads, and no copy of a long cache):
 *   q  [heads_q][n][d] fp32, packed;
 *   k, v [heads_kv][n_k][d], rows contiguous, head h at h * kv_head_stride
 *        elements; fp32, or IEEE binary16 (uint16_t) when kv_f16;
 *   causal: row i sees keys j <= i + n_k - n (bottom-right, FAVOR_CAUSAL);
 *   scale 1/sqrt(d). heads_q must be a multiple of heads_kv. */
typedef struct {
    const float *q;
    const void *k, *v;
    int kv_f16;
    size_t d, n, n_k, heads_q, heads_kv, kv_head_stride;
    int causal;
} peer_ggml_call;

typedef struct peer_ggml peer_ggml;

/* The linked ggml's version and commit, as ggml reports them (its commit is
 * "unknown" when it was built from a tree that is not a git checkout). */
const char *peer_ggml_version(void);
const char *peer_ggml_commit(void);

/* Builds the graph of one call (once: the timed calls only compute it) and plans
 * it for `threads` threads. NULL with a reason in why when the shape is one this
 * peer does not take or memory runs out. */
peer_ggml *peer_ggml_new(const peer_ggml_call *c, int threads, char *why, size_t whylen);

/* Plans the graph again for another thread count (the work buffer grows when
 * needed). 0, or -1 when out of memory. */
int peer_ggml_threads(peer_ggml *g, int threads);

/* Computes the graph once. 0, or -1 when ggml reports a failure. */
int peer_ggml_run(peer_ggml *g);

/* The output of the last run in favor.h's layout, o [heads_q][n][d] fp32
 * (ggml's result is [n][heads_q][d]). */
void peer_ggml_output(const peer_ggml *g, float *o);

/* The bytes of the context this peer allocates for a call beyond the caller's
 * buffers (result, mask, tensors and graph): what a memory budget has to allow
 * for. The work buffer comes on top: a few tiles per thread. */
size_t peer_ggml_bytes(const peer_ggml_call *c);

void peer_ggml_free(peer_ggml *g);

#endif
