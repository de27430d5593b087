/* peer_ggml: ggml_flash_attn_ext on the CPU, called through ggml's public API
 * (ggml.h, ggml-cpu.h) the way llama.cpp calls it, for favor_bench's ggml
 * tables. See peer_ggml.h. */
#define _POSIX_C_SOURCE 200809L

#include "peer_ggml.h"

#include "ggml-cpu.h"
#include "ggml.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct peer_ggml {
    peer_ggml_call c;
    struct ggml_context *ctx;
    struct ggml_cgraph *graph;
    struct ggml_tensor *out; /* [d][heads_q][n]: ggml's permuted result */
    struct ggml_cplan plan;
    void *work;
    size_t work_cap;
};

/* Graph nodes: three caller buffers, their three views, the mask, the result. */
#define PEER_GGML_NODES 16

/* Causal calls need a mask unless every row sees every key: with n = 1 the only
 * row is the last, and bottom-right alignment lets it see the whole cache. ggml
 * then takes its unmasked path, which is its fastest, as in llama.cpp's
 * decoding of a full cache. */
static int needs_mask(const peer_ggml_call *c) { return c->causal && c->n > 1; }

size_t peer_ggml_bytes(const peer_ggml_call *c)
{
    size_t bytes = 8 * ggml_tensor_overhead() + ggml_graph_overhead_custom(PEER_GGML_NODES, false);
    bytes += c->heads_q * c->n * c->d * sizeof(float); /* the result */
    if (needs_mask(c)) bytes += c->n * c->n_k * sizeof(ggml_fp16_t);
    return bytes + 4096; /* alignment of each object */
}

const char *peer_ggml_version(void) { return ggml_version(); }

const char *peer_ggml_commit(void) { return ggml_commit(); }

/* A tensor of the caller's buffer: a flat leaf over it (no copy) and the 4-d
 * view flash attention reads, ne = {d, rows, heads, 1}, head stride `hs`
 * elements. The context must be in no_alloc mode. */
static struct ggml_tensor *wrap(struct ggml_context *ctx, enum ggml_type type, const void *data,
                                size_t d, size_t rows, size_t heads, size_t hs)
{
    size_t elt = ggml_type_size(type);
    struct ggml_tensor *flat = ggml_new_tensor_1d(ctx, type, (int64_t)((heads - 1) * hs + rows * d));
    /* ggml's tensors are not const; flash attention only reads its sources. */
    flat->data = (void *)(uintptr_t)data;
    return ggml_view_4d(ctx, flat, (int64_t)d, (int64_t)rows, (int64_t)heads, 1, d * elt,
                        hs * elt, heads * hs * elt, 0);
}

int peer_ggml_threads(peer_ggml *g, int threads)
{
    g->plan = ggml_graph_plan(g->graph, threads > 0 ? threads : 1, NULL);
    if (g->plan.work_size > g->work_cap) {
        void *w = NULL;
        if (posix_memalign(&w, 64, g->plan.work_size) != 0) return -1;
        free(g->work);
        g->work = w;
        g->work_cap = g->plan.work_size;
    }
    g->plan.work_data = (uint8_t *)g->work;
    return 0;
}

peer_ggml *peer_ggml_new(const peer_ggml_call *c, int threads, char *why, size_t whylen)
{
    struct ggml_init_params ip;
    struct ggml_tensor *q, *k, *v, *mask = NULL;
    enum ggml_type kv = c->kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    peer_ggml *g;
    /* ggml asserts (and aborts) on a shape it does not take: refuse them here. */
    if (!c->q || !c->k || !c->v || !c->d || !c->n || !c->n_k || !c->heads_kv ||
        c->heads_q % c->heads_kv || c->kv_head_stride < c->n_k * c->d || c->n > c->n_k) {
        snprintf(why, whylen, "shape not supported");
        return NULL;
    }
    g = (peer_ggml *)calloc(1, sizeof *g);
    if (!g) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    g->c = *c;
    ip.mem_size = peer_ggml_bytes(c);
    ip.mem_buffer = NULL;
    ip.no_alloc = false; /* the result and the mask live in the context */
    g->ctx = ggml_init(ip);
    if (!g->ctx) {
        free(g);
        snprintf(why, whylen, "ggml_init failed (%zu bytes)", ip.mem_size);
        return NULL;
    }
    /* Q, K, V are the caller's buffers: created without data, then pointed at
     * them. */
    ggml_set_no_alloc(g->ctx, true);
    q = wrap(g->ctx, GGML_TYPE_F32, c->q, c->d, c->n, c->heads_q, c->n * c->d);
    k = wrap(g->ctx, kv, c->k, c->d, c->n_k, c->heads_kv, c->kv_head_stride);
    v = wrap(g->ctx, kv, c->v, c->d, c->n_k, c->heads_kv, c->kv_head_stride);
    ggml_set_no_alloc(g->ctx, false);
    if (needs_mask(c)) {
        /* [n_k][n] f16, one for every head: 0 where row i sees key j, -inf
         * (0xfc00) elsewhere; visible: j <= i + n_k - n, as FAVOR_CAUSAL. */
        size_t i, j;
        ggml_fp16_t *m;
        mask = ggml_new_tensor_2d(g->ctx, GGML_TYPE_F16, (int64_t)c->n_k, (int64_t)c->n);
        m = (ggml_fp16_t *)mask->data;
        for (i = 0; i < c->n; ++i)
            for (j = 0; j < c->n_k; ++j) m[i * c->n_k + j] = j <= i + c->n_k - c->n ? 0 : 0xfc00;
    }
    g->out = ggml_flash_attn_ext(g->ctx, q, k, v, mask, (float)(1.0 / sqrt((double)c->d)), 0.0f,
                                 0.0f);
    /* llama.cpp's choice; ggml's CPU kernels take the same path at either
     * precision (below 64 query rows with an f16 V, an f16 accumulator). */
    ggml_flash_attn_ext_set_prec(g->out, GGML_PREC_F32);
    g->graph = ggml_new_graph_custom(g->ctx, PEER_GGML_NODES, false);
    ggml_build_forward_expand(g->graph, g->out);
    if (peer_ggml_threads(g, threads) != 0) {
        peer_ggml_free(g);
        snprintf(why, whylen, "out of memory (work buffer)");
        return NULL;
    }
    return g;
}

int peer_ggml_run(peer_ggml *g)
{
    return ggml_graph_compute(g->graph, &g->plan) == GGML_STATUS_SUCCESS ? 0 : -1;
}

void peer_ggml_output(const peer_ggml *g, float *o)
{
    const peer_ggml_call *c = &g->c;
    const float *r = (const float *)g->out->data;
    size_t h, i;
    for (h = 0; h < c->heads_q; ++h)
        for (i = 0; i < c->n; ++i)
            memcpy(o + (h * c->n + i) * c->d, r + (i * c->heads_q + h) * c->d,
                   c->d * sizeof(float));
}

void peer_ggml_free(peer_ggml *g)
{
    if (!g) return;
    if (g->ctx) ggml_free(g->ctx);
    free(g->work);
    free(g);
}
