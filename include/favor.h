/* favor.h - exact softmax, elu(x)+1 linear and FAVOR+ random-feature attention
 * for C programs, in one header.                    MIT licence; text at the end.
 *
 * favor.h computes multi-head attention O = softmax(s Q K^T) V exactly (an online
 * softmax over key tiles, never an n x n_k matrix), and its linear-time kernel
 * approximations O_i = phi(q_i)^T sum_j phi(k_j) v_j^T / phi(q_i)^T sum_j phi(k_j)
 * with phi = elu(x)+1 ("Transformers are RNNs", Katharopoulos et al. 2020) or the
 * positive orthogonal random features of FAVOR+ ("Rethinking Attention with
 * Performers", Choromanski et al. 2020). Causal linear attention is also available
 * as a recurrence (a saved state, extended block by block or token by token).
 *
 * DO THIS in exactly one C or C++ file:
 *
 *     #define FAVOR_IMPLEMENTATION
 *     #include "favor.h"
 *
 * and plain `#include "favor.h"` elsewhere. Link with -lm.
 *
 * USAGE (8 heads, n tokens, head size 64, FAVOR+ with 256 features):
 *
 *     float *q, *k, *v, *o;                  (each 8*n*64 floats, [head][token][dim])
 *     favor_tensor Q = favor_tensor_packed(q, 8, n, 64), K = ..., V = ...,
 *                  O = favor_tensor_packed(o, 8, n, 64);
 *     favor_features f;
 *     float *w = malloc(favor_features_floats(FAVOR_POSITIVE, 64, 256) * sizeof *w);
 *     favor_features_init(&f, FAVOR_POSITIVE, 64, 256, 0, 42, w);
 *     favor_options opt = favor_default_options();
 *     opt.flags = FAVOR_CAUSAL;
 *     if (favor_linear_attention(&f, &Q, &K, &V, &O, &opt) != FAVOR_OK) ...;
 *     favor_softmax_attention(&Q, &K, &V, &O, NULL);    (exact, non-causal)
 *
 * CONTENTS
 *     1. this manual              4. implementation (under FAVOR_IMPLEMENTATION):
 *     2. configuration macros        backend selection, vector layer, exp/elu,
 *     3. declarations                PRNG and sampling, micro-kernels, operations,
 *                                    validation helpers
 *
 * TENSORS. Every matrix is a view [heads][rows][cols] of elements of its dtype
 * (ELEMENT TYPES below): element (h, r, c) is element number
 * h*head_stride + r*row_stride + c from data. Columns are contiguous. Rows and heads
 * may interleave (a [tokens][heads*dim] buffer is head_stride = dim,
 * row_stride = heads*dim), but no two (head, row) rows may overlap: the smaller
 * stride must cover a row and the larger all rows of the smaller (layouts that
 * interleave otherwise are refused with FAVOR_E_SHAPE). For one head,
 * Q is n x d, K is n_k x d, V is n_k x d_v, O is n x d_v. K and V may have fewer
 * heads than Q when Q's head count is a multiple of theirs (grouped-query
 * attention: query head h uses key/value head h / (heads_q / heads_kv)).
 * Inputs may overlap each other; an output may share no element with an input or
 * another output, but may share a buffer: the column blocks of one [n][q|k|v|out]
 * buffer are fine. Outputs are accepted when their bytes are disjoint from the
 * others' by span, or by residue modulo a common row, head or batch stride, or
 * group by group when their largest strides are equal and their first groups fit
 * in one such stride (batch elements of one buffer, whatever the axes below); a
 * layout this cannot prove disjoint is refused (FAVOR_E_ALIAS).
 *
 * BATCHES. A view may hold `batch` such [heads][rows][cols] elements,
 * batch_stride elements apart: element (b, h, r, c) is number b*batch_stride +
 * h*head_stride + r*row_stride + c. A batch of 0 or 1 is one element (its
 * batch_stride is not read), so a view that leaves the two fields zero is the
 * unbatched view above; a batch above 1 needs a batch_stride that keeps the
 * rows apart, as for heads and rows (three strides, each covering all rows of
 * the smaller ones): a llm.c-style (B, T, 3C) qkv buffer is batch_stride T*3C,
 * head_stride d, row_stride 3C. Every tensor of a call has the same batch;
 * heads are grouped within each batch element, and the heads of a call are its
 * batch x heads (b, h) pairs in that order, b outer: lse is [batch][heads_q][n]
 * and a recurrent state for a batched call is initialized with batch x heads_kv
 * heads. The threads of a call share out all of them.
 *
 * ELEMENT TYPES. favor_tensor.dtype is FAVOR_F32 (float; 0, so a zero-initialized
 * or favor_tensor_packed view is fp32), FAVOR_F16 (IEEE binary16) or FAVOR_BF16
 * (bfloat16), both stored as 16-bit words (uint16_t; _Float16 and __bf16 arrays
 * have the same bits). Q, K, V, out, dout and the gradients, and favor_feature_map's
 * x and phi, may each have any of the three types, in any mix; strides count
 * elements of the tensor's own type. W, the recurrent state, lse and all
 * arithmetic stay fp32: 16-bit rows are widened exactly as a tile enters a kernel
 * (no fp32 copy of a whole tensor, except that a backward pass stages one
 * key/value head at a time: see WORKSPACE), and a 16-bit output is its fp32
 * result rounded once, to nearest even (fp16: overflow to +-inf, subnormals;
 * NaN stays NaN). So a call with 16-bit inputs gives bit for bit the result of
 * the same call on fp32 copies of their values, on every backend. A dtype outside
 * the enum is FAVOR_E_ARG.
 *
 * CAUSAL (FAVOR_CAUSAL): query row i sees keys j <= i + (n_k - n), bottom-right
 * aligned, so one query row against n_k cached keys is the decoding case. A query
 * row that sees no key (possible only when n > n_k) is set to zero.
 *
 * SCORE VARIANTS (exact softmax attention; favor_options fields, each off when
 * zero or NULL, so a default or zero-initialized options struct computes plain
 * attention). Query row i sits at position p_i = i + n_k - n and key j at j
 * (counted from their sequence's start with packed sequences, below). Key j is
 * visible to row i when it passes causality (j <= p_i) and, with FAVOR_WINDOW,
 * the window p_i - window_left <= j <= p_i + window_right (a negative side is
 * unbounded; FAVOR_CAUSAL is window_right = 0, and both flags together take the
 * narrower right side). The score of a visible key is
 *     x = s q_i.k_j  ->  c tanh(x / c)  ->  - m_h |p_i - j|  ->  + mask[i][j]
 * (softcap c > 0, Gemma 2's form; ALiBi slopes m_h = alibi[h] per query head of
 * a batch element; the additive mask, opts.mask, a view [batch][heads][n][n_k]
 * of any dtype with heads 1 (shared) or heads_q and batch 1 (shared) or the
 * call's; -inf hides a key). With sinks (GPT-OSS's form), exp(sinks[h]) joins
 * every row's denominator and contributes no value: o_i = sum_j e^{x_j} v_j /
 * (sum_j e^{x_j} + e^{sink_h}), lse_i = log of that denominator; a sink of -inf
 * is none. Which keys a block of rows sees is one range computed before any
 * arithmetic: key tiles outside it are never read, so a window of w keys costs
 * O(n w d), and decoding reads only the window's keys; a masked call first maps
 * which 64 x 64 tiles its mask leaves (a byte per tile and mask head), and the
 * tiles it hides from every row of a block are skipped too (decoding checks its
 * tile's mask rows before reading the keys). A row that sees no key (or whose
 * every key the mask hides) outputs zeros with lse -inf, or lse = sink with a
 * sink. The backward pass takes the same options; with sinks and opts->dsinks
 * it writes dL/dsink_h = -sum_i P_sink,i dout_i.out_i (P_sink,i = exp(sink_h -
 * lse_i)), summed over rows, sequences and batch elements (in double, in a fixed
 * order). ALiBi's distances are whole numbers, exact below 2^24. Mask values
 * are read as given: +inf or NaN make their rows NaN. Linear attention refuses
 * every variant (FAVOR_E_ARG), as it does bad values: a NaN, negative,
 * subnormal (its 1/c is infinite) or infinite softcap, non-finite slopes, NaN
 * or +inf sinks, dsinks without sinks.
 *
 * PACKED SEQUENCES (opts.seqs, seq_q, seq_k; every method). The rows of q (and
 * of k, v) hold seqs sequences one after another, in the style of cu_seqlens:
 * sequence s has the query rows [seq_q[s], seq_q[s+1]) and the key rows
 * [seq_k[s], seq_k[s+1]) (seq_k NULL: the same as seq_q, for n = n_k); each
 * offset array runs from 0 to n (n_k), non-decreasing (empty sequences are
 * allowed). A sequence sees only its own keys, with its own positions: causal,
 * window and ALiBi apply within it, and its block of the mask ([seq_q[s], ...)
 * x [seq_k[s], ...)) is the one read. Linear attention starts every sequence
 * from an empty state. A packed call gives, bit for bit, the results of one
 * call per sequence on its rows; keys of a sequence without query rows get zero
 * gradients. favor_linear_extend refuses opts.seqs (a state holds one sequence).
 *
 * GATES (causal linear attention: favor_linear_attention with FAVOR_CAUSAL,
 * favor_linear_extend, favor_linear_step_ex). Each key/value head's state
 * decays before each key t joins it, by a_t = gamma_h exp(g_t):
 *     S_t = a_t S_{t-1} + phi(k_t) v_t^T,   z_t = a_t z_{t-1} + phi(k_t),
 *     o_i = phi(q_i)^T S_{p_i} / phi(q_i)^T z_{p_i},
 * p_i the row's position (as FAVOR_CAUSAL aligns it). opts.decay gives the
 * constants gamma_h in (0, 1] (one per key/value head, the same for every batch
 * element), opts.gates the fp32 log-gates g_t <= 0 of every key position (a
 * view [batch][heads_kv][n_k][1]); either or both (they multiply). FAVOR_NO_NORM
 * drops the normalizer, o_i = phi(q_i)^T S_{p_i}, for every map (with or without
 * gates, causal or not); FAVOR_IDENTITY, phi(x) = sqrt(s) x (width d, no W), is
 * allowed only with it, its denominators being able to vanish. Refused with
 * FAVOR_E_ARG: decay or gates on a non-causal call, a log-gate that is positive,
 * NaN or -inf, a gamma outside (0, 1], FAVOR_IDENTITY without FAVOR_NO_NORM, any
 * of them on softmax attention; gates of another shape than [heads_kv][n_k][1]
 * (per batch element) are FAVOR_E_SHAPE. The state keeps nothing of the gates:
 * each call passes its own tokens' (extend: n rows; step_ex: one). Packed
 * sequences read their own key rows of the gates, each from an empty state.
 * Inside a chunk the decays are exponentials of differences of cumulative
 * log-gates taken in double, each rounded once to float, so a factor errs by
 * about 2^-24 times its own exponent, not by the chunk's summed gates; every
 * exponent is <= 0, and the stabilizers of the random maps decay with the state.
 * Layers these options compute exactly: RetNet's retention and lightning
 * attention (FAVOR_IDENTITY, FAVOR_NO_NORM, decay gamma_h; the group norm and
 * output gate are the caller's), the scalar-gated core of Mamba-2's SSD
 * (FAVOR_IDENTITY, FAVOR_NO_NORM, q = C, k = B, v = x dt, gates = dt A; the skip
 * term D x is the caller's), and linear attention of any map with per-head or
 * per-token scalar decay. Not computed: gates that differ per feature (GLA,
 * RWKV-6, Mamba-1's per-channel decay) and the delta rule (DeltaNet, Gated
 * DeltaNet). favor_linear_attention_backward takes all of them, and with
 * opts.dgates (an fp32 view shaped as opts.gates, an output) writes dL/dg_t =
 * sum over pairs (row i, key j) with j < t <= p_i of dL/dc_ij c_ij, c_ij =
 * phi(q_i).phi(k_j) prod_{j<t<=p_i} a_t the pair's term; dg of each sequence's
 * first key is 0. gamma has no gradient. dg_t is formed as the suffix sum over
 * positions p >= t of X_p - Y_p (X_p = phi(q_p).dL/dphi(q_p), Y_p =
 * phi(k_p).dL/dphi(k_p)): its error is relative to sum_{p >= t} (|X_p| +
 * |Y_p|), not to the pairs across t, so behind a strongly negative gate a tiny
 * dg_t carries an absolute error of about 1e-7 of those sums. dq, dk and dv
 * keep the ungated bounds, and one key/value head splits over threads as the
 * forward's does, bit-identically.
 *
 * FEATURE MAPS (x' = sqrt(s) x, s the scale, by default 1/sqrt(d); W is m x d):
 *     FAVOR_ELU1        elu(x)+1 (x itself, unscaled)             width d
 *     FAVOR_POSITIVE    exp(W x' - |x'|^2/2 - c) / sqrt(m)         width m   FAVOR+
 *     FAVOR_HYPERBOLIC  exp(-|x'|^2/2 - c) [exp(Wx'), exp(-Wx')] / sqrt(2m)  2m
 *     FAVOR_TRIG        exp(|x'|^2/2 - c) [sin Wx', cos Wx'] / sqrt(m)       2m
 *     FAVOR_RELU        relu(W x') / sqrt(m) + 1e-3                width m
 *     FAVOR_POLY2       [1, x', then for i = 1..d: x'_i^2 / sqrt(2) and
 *                        x'_i x'_j for j > i]   width 1 + d + d (d + 1) / 2
 * POLY2 is exact and deterministic (no W): phi(q).phi(k) = 1 + t + t^2/2 with t
 * = s q.k, the second-order Taylor expansion of exp(t), which is positive for
 * every t ((1 + t)^2 / 2 + 1/2 >= 1/2), so no stabilizer is needed (the fp32
 * dot product of the features carries an error of about 10 u |phi(q)| |phi(k)|,
 * u = 2^-24, which matters only where t is near -1 while |q'| |k'| >> 1). Its width
 * (2145 at d = 64) sets its cost, as m does FAVOR+'s (measured: about half of
 * FAVOR+'s at m = width, which also projects Wx'), and its state (about 2 width
 * (d_v + 10) floats per key/value head); d <= 4096.
 * POSITIVE, HYPERBOLIC and TRIG are unbiased: E[phi(q).phi(k)] = exp(s q.k) (with
 * c = 0). c is a stabilizer that cancels in the attention ratio: per row for
 * queries; for keys one constant per head (non-causal) or a running maximum over
 * the keys seen so far (causal and recurrent), so no output ever depends on a
 * later token. W has orthogonal rows within each block of d rows (Gram-Schmidt of
 * a Gaussian block, in double), each row rescaled to the norm of an independent
 * Gaussian d-vector; FAVOR_IID draws independent Gaussian rows instead, and
 * FAVOR_REGULAR_NORM gives every row the norm sqrt(d). W comes from a
 * counter-based integer generator: the same seed gives the same W everywhere.
 *
 * DENOMINATORS. A linear-attention row whose denominator is exactly zero (every
 * feature product underflowed, possible only for inputs of huge magnitude) is set
 * to zero. TRIG features can be negative: a TRIG denominator smaller than 1e-20 in
 * magnitude is replaced by +-1e-20, so the output stays finite (and meaningless:
 * TRIG is kept for comparison, not for use).
 *
 * ACCURACY (fp32, against a float64 evaluation of the same formula; enforced by
 * the tests in tests/):
 *     softmax attention            max |error| <= 2e-5 * max|V|, with every
 *                                  score variant too (tests/test_variants.c;
 *                                  dsinks as the gradients below)
 *     elu+1 linear attention       max |error| <= 2e-5 * max|V|
 *     FAVOR+ and the other random
 *     feature maps, same W         max |error| <= 1e-4 * max|O_ref|
 *     gated (GATES), normalized: the bounds above; FAVOR_NO_NORM: elu+1, POLY2,
 *     IDENTITY max |error_i| <= 2e-5 * max|V| * M_i, M_i = sum_{j <= p_i}
 *     A_ij |phi(q_i)|.|phi(k_j)| (row i's sum of absolute weights), the
 *     random maps <= 1e-4 * max|O_ref|; 10^6 gated recurrent tokens stay
 *     within the same bounds (tests/test_gated.c, tests/long_recurrence.c).
 *     causal: block, extend and step forms agree within 1e-5 relative.
 *     long sequences: the running sums S, z are compensated (Kahan), so they do
 *     not drift with length: after 10^7 recurrent tokens the outputs are within
 *     3e-7 * max|V| (elu+1) and 8e-7 * max|O_ref| (FAVOR+) of a float64
 *     recurrence (plain fp32 sums drifted to 1e-2; tests/long_recurrence.c).
 *     backward passes (dq, dk, dv), every method, causal or not, gated too:
 *     max |error| <= 1e-4 * max|gradient| against a float64 analytic backward,
 *     <= 1e-3 against central finite differences of the float64 forward; dL/dg
 *     <= 1e-4 * max|dg| (per position: see GATES).
 *     backends: AVX2, AVX-512 and NEON agree with the scalar build within 5e-7 * max|V|
 *     (softmax, elu+1) and 5e-6 * max|O| (random features); W is bit-identical.
 *     exp (all backends, one algorithm): <= 1 ULP from libm expf over its normal
 *     range (1.003 ULP from the exact value), subnormal results within 1 ULP;
 *     exp(x) = +inf for x > 88.72283172607421875, +0 for x < -103.972076416015625,
 *     exp(+-0) = 1, exp(-inf) = +0, exp(+inf) = +inf, exp(NaN) = NaN.
 *     softmax prefill and backward: a probability below 2^-100 (of exp(s - m),
 *     m the row's running maximum, or exp(s - lse)) is 0 (no subnormal products).
 *     tanh (softcap): <= 2 ULP from the correctly rounded tanh over all floats
 *     (measured over every float: 1 ULP; 1.33 ULP and |error| < 8e-8 from the
 *     exact value); tanh(+-0) = +-0, tanh(+-inf) = +-1, tanh(NaN) = NaN; the
 *     softcap c tanh(x / c), x / c as x * (1/c): |error| <= 2.5e-7 c.
 * Finite inputs up to 1e4 in magnitude give finite outputs for every method
 * (FAVOR_NO_NORM with POSITIVE, HYPERBOLIC or TRIG excepted: the unnormalized
 * sums of exponential features can themselves leave float's range).
 * FAVOR+ itself is an estimate of softmax attention whose mean squared error falls
 * as 1/m (tests/test_features.c measures it).
 *
 * GRADIENTS. favor_softmax_attention_backward and favor_linear_attention_backward
 * give dL/dq, dL/dk, dL/dv from dL/dout for the same call (W is a constant), in
 * the forward's memory class: softmax recomputes its scores tile by tile from the
 * per-row log-sum-exp (favor_options.lse, written by the forward on request);
 * causal linear attention runs a forward pass of prefix sums and a reverse pass
 * of suffix sums ("Transformers are RNNs" 3.3.1), O(width d_v) state per head.
 * For softmax and the maps with positive features (ELU1, RELU, POSITIVE,
 * HYPERBOLIC) the gradients are finite whenever the forward output is, however
 * small a row's denominator (every attention weight is in [0, 1], so |dv_j| <=
 * sum |dout_i| over the rows that see key j, up to rounding); where feature
 * products underflow, the gradients are as coarse as the forward.
 *
 * DECODING. A softmax call with at most 32 query rows (generating a token, or a
 * few speculative ones, against a key/value cache) takes another path, invisibly:
 * for each key/value head, every query row of every query head in its group is
 * scored against each key tile while the tile is in cache, so K and V are read
 * once per key/value head; the keys are cut into fixed blocks of 512 whose
 * partial results merge in block order. Same results within the same bounds.
 *
 * MERGING. favor_attention_merge combines two softmax results of the same
 * queries over disjoint key sets (a shared prefix cache and each sequence's own
 * keys in cascade decoding, a cache split across calls or machines) into the
 * result over their union, exactly, from each part's output and lse: per row,
 * with M = max(lse_a, lse_b) and w_x = exp(lse_x - M), out = (w_a out_a +
 * w_b out_b) / (w_a + w_b) and lse = M + log(w_a + w_b). A part whose lse is
 * -inf saw no key: the row is the other part's, bit for bit (a 16-bit row
 * widened, then rounded once to out's type: the same bits when the types
 * agree), and both -inf give zeros and lse -inf, as a row that sees no key
 * does. A part with lse +inf likewise stands alone (both +inf: NaN, lse +inf),
 * and a NaN lse gives a row of NaN and lse NaN. Otherwise the weights and the
 * sum are computed in double from the fp32 (or widened 16-bit) values: each
 * element of out is within 1 ULP of the exact merge of those values, plus
 * 2^-50 max(|out_a|, |out_b|) where the two cancel, and lse within 1 ULP of
 * the exact one (a 16-bit out then gets that fp32 row rounded once, as
 * everywhere; tests/test_merge.c checks both bounds). A k-way
 * merge is a chain of merges into one buffer: out may be the very view of
 * out_a and lse the very pointer lse_a (or of b), in place.
 *
 * THREADS. Compiled with OpenMP (-fopenmp), a call's work items run on
 * favor_options.threads threads (0: OpenMP's default): softmax attention splits
 * query blocks (decoding: blocks of 512 keys of every key/value head), the others
 * split key/value heads, and inside them when there are fewer than 8 (linear
 * attention/extend: segments of keys, then blocks of output rows or, causal, a
 * chunk-parallel scan; the linear backward likewise, the causal one scanning the
 * segments' row sums back from the end; the softmax backward, when heads alone
 * leave threads idle: one query block after another, the key parts of each, whose
 * dQ partials are then added in part order; favor_attention_merge: rows, for
 * calls of 65536 elements or more). Packed sequences of a softmax prefill
 * without a mask share one loop of (sequence, head, query block) items; the
 * others (decoding, masked, linear, backward) run one after another, each
 * split as a call of its own. The split is fixed by the shape, so
 * results are bit-identical for any thread count. A call on one thread opens
 * no OpenMP region of its own, but for the linear backward split in segments.
 * Calls with threads = 1 may run on the threads of a caller's own parallel
 * region, each with its own workspace.
 *
 * RUNTIME DISPATCH (FAVOR_DISPATCH, defined where FAVOR_IMPLEMENTATION is; x86-64
 * under gcc >= 8 or clang >= 7). The implementation then holds three copies of
 * its kernels, scalar, AVX2+FMA+F16C and AVX-512 (F, DQ, BW, VL), compiled from
 * the same text by including this file again once per target under the
 * compiler's target pragma (section 4.0), so the translation unit needs no -m
 * flag. The first call picks the best target that cpuid reports and the OS saves
 * the registers of (xgetbv); favor_backend() names it and favor_set_backend()
 * forces another the CPU runs. That choice, one pointer behind an atomic load,
 * is the library's only static state: choosing is idempotent, so threads that
 * race to it agree. Each target gives, bit for bit, the results of a static
 * build with its flags (-mavx2 -mfma -mf16c; -mavx512f -mavx512dq -mavx512bw
 * -mavx512vl -mfma -mf16c), in ISO and GNU C modes (-march=native adds other
 * extensions and tuning: under the GNU modes, where gcc contracts a*b+c by
 * itself, that can change a few roundings, between static builds too), at the same speed
 * (favor_linear_step within 1%), for about three times the code (508 KB of text
 * with gcc 12 -O2 against 180 KB for the AVX-512 build). Elsewhere (AArch64,
 * 32-bit x86, other compilers), with FAVOR_SIMD or FAVOR_NO_SIMD, the macro is
 * accepted and ignored: the backend comes from the compiler's flags as before.
 *
 * WORKSPACE. Each operation has a favor_*_workspace() query returning the bytes it
 * needs (a slice per thread; with fewer than 8 key/value heads, ceil(16 / heads)
 * states per key/value head for the split, and for the linear backward
 * ceil(16 / query heads) partial sums per query head (causal: ceil(16 / heads)
 * per key/value head), and for a split softmax backward 32 x 64 x d floats of dQ
 * partials per key/value head (512 KB at d = 64); any alignment; independent of
 * the sequence length,
 * except for softmax decoding, whose per-block partials take R (d_v + 2) floats
 * per 512 keys per key/value head, R = query rows x query heads per key/value
 * head: 0.5% of the cache's bytes for R = 1, d = d_v, and for a backward pass
 * with a 16-bit tensor, which stages a key/value head's rows of every 16-bit
 * tensor in fp32 per thread, or every head's once when split). The backward queries see q, k and v only: when one
 * of them is 16-bit the size covers any types of the others; when all three are
 * fp32 it covers fp32 out, dout and gradients, and a 16-bit one of those needs
 * the size queried with a 16-bit view in place of q (the fp32 size may be too
 * small: FAVOR_E_WORKSPACE, nothing written). Sizes queried with a 16-bit
 * tensor are upper bounds. A softmax call with a mask adds its tile map,
 * ceil(n / 64) ceil(n_k / 64) bytes per mask head (256 KB at n = n_k = 32768),
 * and 52 KB per thread where it stages the mask's rows (prefill and backward),
 * and a decoding one R x 64 floats per thread; a backward with dsinks, 2 floats
 * per query head. With packed sequences the sizes are those of the largest
 * sequence's call (the softmax backward's: of the whole call, which plans all
 * the rows once). The queries read opts for these. Pass a buffer that large in
 * favor_options.workspace, or NULL to let the call allocate with FAVOR_MALLOC and
 * free before it returns. Nothing else is allocated and there is no global state
 * (under FAVOR_DISPATCH, one pointer: see RUNTIME DISPATCH): every function is
 * reentrant.
 *
 * ERRORS. Every entry point validates all its arguments before it writes anything;
 * on a bad argument it returns a favor_status other than FAVOR_OK and leaves every
 * output untouched. favor_status_string() names each status. A call that takes
 * favor_options says more when opts->error is set: the argument it refused and
 * why, in one line ("k: row_stride 32 is below cols 64", "dv overlaps dk",
 * "opts.workspace: 1024 bytes, the call needs 4160"); the workspace queries
 * too, when they return 0. The text is written only on failure, in the
 * caller's buffer: no global state.
 *
 * VERSION HISTORY
 *     0.1  forward passes: softmax, elu+1, FAVOR+ and friends; recurrent state;
 *          scalar, AVX2+FMA and NEON backends.
 *     0.2  backward passes; favor_options.lse; faster causal linear attention.
 *     0.3  compensated state sums (favor_state_floats grows: 2*width*(dv+1) per
 *          head); NaN/inf in a later token no longer reaches earlier rows;
 *          finite gradients for large inputs; interleaved outputs accepted.
 *     0.4  a decode path for softmax calls of at most 32 query rows (K and V read
 *          once per key/value head, keys split over threads; its workspace grows
 *          with n_k); favor_linear_step keeps a pending block of 16 tokens
 *          (favor_state gains `pend`, c holds heads + 1 floats, and
 *          favor_state_floats grows by heads*(16*(width+dv+1) + 2*(width+d+1))
 *          and a little more: see favor_state_floats).
 *          Element types: favor_tensor gains `dtype` (last; FAVOR_F32 = 0) and
 *          its `data` becomes void *: an fp32 program that indexes t.data
 *          directly casts it ((float *)t.data); one that fills a favor_tensor
 *          field by field without zeroing it must set dtype. Strides are in
 *          elements. favor_tensor_packed_as and favor_dtype_size are new. The
 *          linear and extend workspace queries now validate q and k too.
 *          Batches: favor_tensor gains `batch` and `batch_stride` (after dtype;
 *          0 = one element), favor_tensor_batched is new; a favor_tensor filled
 *          field by field without zeroing must set batch to 0 or 1.
 *          favor_options gains `error` and `error_size` (after lse), the text
 *          of a refused call; favor_default_options sets them to NULL and 0.
 *          The workspace queries check q's heads against k's for every path.
 *          With fewer than 8 key/value heads the linear forward, extend and
 *          linear backward split inside each head: their rounding (not their
 *          accuracy bounds) differs from 0.3 when n_k > 512.
 *          FAVOR_POLY2 (after FAVOR_RELU), the exact degree-2 polynomial kernel.
 *     0.5  (in progress) score variants of softmax attention, forward, decode
 *          and backward: favor_options gains, after error_size, window_left,
 *          window_right, softcap, alibi, sinks, dsinks, mask, seqs, seq_q and
 *          seq_k (favor_default_options zeroes them; an options struct filled
 *          field by field without zeroing must set them), and the flag
 *          FAVOR_WINDOW (2; it was refused as unknown before). Packed
 *          sequences for every method. favor_attention_merge: two softmax
 *          results over disjoint key sets merged through their lse (MERGING).
 *          The softmax workspaces grow by a few tiles per thread.
 *          The AVX-512 backend, FAVOR_AVX512 (16 lanes; chosen
 *          by -mavx512f -mfma or -march=native on a CPU that has it, where 0.4
 *          chose AVX2; favor_backend() returns "avx512"). Same algorithm and
 *          bounds; its results round differently from AVX2's, as AVX2's do
 *          from scalar's.
 *          Gated linear attention (GATES): favor_options gains, after seq_k,
 *          decay, gates and dgates; the flag FAVOR_NO_NORM (4); the kernel
 *          FAVOR_IDENTITY (after FAVOR_POLY2); favor_linear_step_ex; the
 *          linear backward takes them and writes dL/dg to dgates. A pending
 *          token keeps its log-gate: favor_state_floats grows by heads*16.
 *          A subnormal softcap is FAVOR_E_ARG (1/c is infinite).
 *          FAVOR_DISPATCH (RUNTIME DISPATCH) and favor_set_backend.
 *          Softmax decoding of 32 or more rows per key/value head (whole
 *          vectors of them, no mask or ALiBi) scores them key-major: their
 *          rounding differs from the row-by-row path's; the workspace grows by
 *          R d floats per thread.
 */
#ifndef FAVOR_H_INCLUDED
#define FAVOR_H_INCLUDED

/* ---------------------------------------------------------------------------
 * 2. Configuration macros (define before including the implementation)
 *
 *   FAVOR_IMPLEMENTATION   expand the implementation in this translation unit.
 *   FAVOR_STATIC           make every function static (private to this file).
 *   FAVOR_API              linkage of the public functions (default: extern, or
 *                          static under FAVOR_STATIC).
 *   FAVOR_SIMD             the backend: FAVOR_SCALAR, FAVOR_AVX2, FAVOR_AVX512
 *                          or FAVOR_NEON. Default: from the compiler's flags:
 *                          AVX-512 (16 lanes) when __AVX512F__ and __FMA__
 *                          (-mavx512f -mfma, or -march=native on a CPU with
 *                          AVX-512: it uses AVX-512F instructions only, no
 *                          DQ, BW or VL), else AVX2 (8 lanes) when __AVX2__
 *                          and __FMA__ (-mavx2 -mfma, -march=native), NEON
 *                          on AArch64, else scalar. -DFAVOR_SIMD=FAVOR_AVX2
 *                          keeps AVX2 on an AVX-512 build. Forcing one the
 *                          compiler cannot build is an #error.
 *   FAVOR_NO_SIMD          force the portable scalar backend (same as
 *                          FAVOR_SIMD=FAVOR_SCALAR).
 *   FAVOR_DISPATCH         choose the backend at run time: the best the CPU
 *                          has, with no -m flag (x86-64, gcc or clang; see
 *                          RUNTIME DISPATCH). Ignored elsewhere, and when
 *                          FAVOR_SIMD or FAVOR_NO_SIMD is defined.
 *   FAVOR_SELF             under FAVOR_DISPATCH, this file's name as it
 *                          includes itself (default "favor.h"): set it when
 *                          the header is copied under another name.
 *   FAVOR_MALLOC(bytes) / FAVOR_FREE(ptr)   allocator for workspaces the caller
 *                          did not supply (default malloc/free; define both or
 *                          neither).
 *   FAVOR_NO_MALLOC        never allocate: a call without workspace that needs
 *                          one returns FAVOR_E_WORKSPACE.
 *   FAVOR_ASSERT(x)        internal consistency checks (default: nothing).
 *   FAVOR_NO_ERROR_TEXT    leave the texts of opts->error out of the build (a
 *                          few KB of strings on a microcontroller): a refused
 *                          call then writes nothing there.
 * ------------------------------------------------------------------------- */
#include <stddef.h>

#ifndef FAVOR_API
#ifdef FAVOR_STATIC
#if defined(__GNUC__) || defined(__clang__)
#define FAVOR_API static __attribute__((unused)) /* no warning for what a file doesn't call */
#else
#define FAVOR_API static
#endif
#else
#define FAVOR_API extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * 3. Declarations
 * ------------------------------------------------------------------------- */

typedef enum {
    FAVOR_OK = 0,
    FAVOR_E_NULL,      /* a required pointer is NULL                          */
    FAVOR_E_SHAPE,     /* zero size, stride below the row, mismatched shapes  */
    FAVOR_E_OVERFLOW,  /* a size or offset does not fit in size_t / address   */
    FAVOR_E_ALIAS,     /* an output overlaps an input or another output      */
    FAVOR_E_WORKSPACE, /* workspace too small (or none under FAVOR_NO_MALLOC) */
    FAVOR_E_NOMEM,     /* FAVOR_MALLOC returned NULL                          */
    FAVOR_E_ARG        /* unknown kernel, flag, role, or bad scale/threads    */
} favor_status;

/* A static English name for a status ("FAVOR_E_SHAPE: ..."), also for values
 * outside the enum; never NULL. O(1), no memory, cannot fail. */
FAVOR_API const char *favor_status_string(favor_status status);

/* Backends, for FAVOR_SIMD (see the configuration macros). */
#define FAVOR_SCALAR 0
#define FAVOR_AVX2 1
#define FAVOR_NEON 2
#define FAVOR_AVX512 3

/* The backend compiled in: "avx512", "avx2", "neon" or "scalar" (a static
 * string). O(1). Under FAVOR_DISPATCH, the one the calls run (see RUNTIME
 * DISPATCH). */
FAVOR_API const char *favor_backend(void);

/* Under FAVOR_DISPATCH: run backend `name` ("scalar", "avx2" or "avx512") from
 * now on, or the best this CPU and OS support when name is NULL (the choice the
 * first call makes by itself). FAVOR_E_ARG, nothing changed, for a name that is
 * not one of those or that this CPU cannot run. Without FAVOR_DISPATCH there is
 * one backend: its name and NULL give FAVOR_OK, any other FAVOR_E_ARG. */
FAVOR_API favor_status favor_set_backend(const char *name);

/* Element types of a tensor (see ELEMENT TYPES above). */
typedef enum {
    FAVOR_F32 = 0, /* float                                                   */
    FAVOR_F16,     /* IEEE binary16, stored as a uint16_t (or _Float16)       */
    FAVOR_BF16     /* bfloat16: the top 16 bits of a float, as a uint16_t     */
} favor_dtype;

/* A strided view [batch][heads][rows][cols] of elements of type dtype; see
 * TENSORS and BATCHES above. A zero-initialized dtype is FAVOR_F32, and a zero
 * batch one element. */
typedef struct {
    void *data;
    size_t heads, rows, cols;
    size_t head_stride, row_stride; /* in elements */
    favor_dtype dtype;
    size_t batch;        /* 0 or 1: one element */
    size_t batch_stride; /* in elements; read when batch > 1 */
} favor_tensor;

/* A packed fp32 view: head_stride = rows*cols, row_stride = cols. O(1), no
 * checks (the calls that take the view validate it). */
FAVOR_API favor_tensor favor_tensor_packed(float *data, size_t heads, size_t rows,
                                           size_t cols);

/* The same for elements of any type (data: floats for FAVOR_F32, 16-bit
 * elements otherwise). O(1), no checks. */
FAVOR_API favor_tensor favor_tensor_packed_as(favor_dtype dtype, void *data, size_t heads,
                                              size_t rows, size_t cols);

/* A packed [batch][heads][rows][cols] view of elements of dtype: batch_stride =
 * heads*rows*cols. O(1), no checks. */
FAVOR_API favor_tensor favor_tensor_batched(favor_dtype dtype, void *data, size_t batch,
                                            size_t heads, size_t rows, size_t cols);

/* Bytes of one element of dtype (4 or 2); 0 for a value outside the enum. O(1). */
FAVOR_API size_t favor_dtype_size(favor_dtype dtype);

/* Flags of favor_options.flags. */
#define FAVOR_CAUSAL 1u
#define FAVOR_WINDOW 2u /* softmax: the window of window_left, window_right applies */
#define FAVOR_NO_NORM 4u /* linear: o = phi(q)^T S, without the normalizer (see GATES) */

/* Per-call options. A NULL options pointer means favor_default_options(). */
typedef struct {
    unsigned flags;        /* FAVOR_CAUSAL, FAVOR_WINDOW (softmax), FAVOR_NO_NORM
                              (linear), or 0                                    */
    float scale;           /* s > 0; 0 = default (1/sqrt(d) for softmax; the
                              features' own scale for linear attention)         */
    int threads;           /* 0 = default (OpenMP's), 1 = single-threaded, n > 1
                              = up to n; threads are used only when compiled
                              with OpenMP (-fopenmp); results do not depend on it */
    void *workspace;       /* NULL = allocate with FAVOR_MALLOC                  */
    size_t workspace_size; /* bytes at workspace                                 */
    float *lse;            /* softmax only, NULL = none: heads_q x n floats,
                              [head][row], the log-sum-exp of each row's scaled
                              scores (-inf for a row that sees no key). Written
                              by favor_softmax_attention, read by its backward
                              (which otherwise recomputes it). Linear ignores it */
    char *error;           /* NULL = none: a call that fails writes here one
                              line saying which argument it refused and why
                              ("k: row_stride 32 is below cols 64"), cut to
                              error_size bytes with its NUL; a call that
                              succeeds does not touch it. See ERRORS */
    size_t error_size;     /* bytes at error                                    */
    /* Score variants of exact softmax attention (see SCORE VARIANTS); each is
       off when zero or NULL, and linear attention refuses them (FAVOR_E_ARG). */
    ptrdiff_t window_left;  /* with FAVOR_WINDOW: row i sees key j only when
                               p_i - window_left <= j <= p_i + window_right;  */
    ptrdiff_t window_right; /* a negative side is unbounded                  */
    float softcap;          /* c >= FLT_MIN: each scaled score x becomes
                               c tanh(x/c); 0: none                           */
    const float *alibi;     /* heads_q slopes m_h: score -= m_h |p_i - j|     */
    const float *sinks;     /* heads_q logits s_h: exp(s_h) joins every row's
                               softmax denominator (-inf: no sink)            */
    float *dsinks;          /* backward, with sinks: heads_q floats written with
                               dL/ds_h, summed over rows and batch elements;
                               the forward ignores it                         */
    const favor_tensor *mask; /* an additive mask [batch][heads][n][n_k] of any
                               dtype, added to the scores last (-inf hides a
                               key): heads 1 (every head) or heads_q, batch
                               0 or 1 (every element) or the call's batch     */
    /* Packed sequences (every method): the rows hold `seqs` sequences one after
       another; sequence s has the query rows [seq_q[s], seq_q[s+1]) and the key
       rows [seq_k[s], seq_k[s+1]), sees only its own keys, and has its own
       positions (and, for linear attention, its own state). 0: one sequence. */
    size_t seqs;
    const size_t *seq_q;    /* seqs + 1 offsets from 0 to n, non-decreasing    */
    const size_t *seq_k;    /* the same to n_k; NULL: seq_q (n_k = n)          */
    /* Gated linear attention (causal linear attention, extend and step; see
       GATES); each off when NULL, and softmax attention refuses them. */
    const float *decay;     /* heads_kv constants gamma_h in (0, 1]: the state
                               decays by gamma_h before each key              */
    const favor_tensor *gates; /* fp32 log-gates g <= 0, [batch][heads_kv][n_k]
                               [1] (rows: key positions, one column): the state
                               decays by exp(g_t) before key t; batch 0 or 1
                               when the call has no batch                     */
    const favor_tensor *dgates; /* linear backward, with gates: dL/dg, an fp32
                               view shaped as gates (written; the forward
                               ignores it)                                    */
} favor_options;

/* No flags, scale 0 (the default), threads 0 (OpenMP's default), no workspace
 * (the call allocates), no lse, no error text. O(1). */
FAVOR_API favor_options favor_default_options(void);

/* Feature maps (see FEATURE MAPS above). */
typedef enum {
    FAVOR_ELU1 = 0,
    FAVOR_POSITIVE,
    FAVOR_HYPERBOLIC,
    FAVOR_TRIG,
    FAVOR_RELU,
    FAVOR_POLY2,
    FAVOR_IDENTITY  /* phi(x) = sqrt(s) x: with FAVOR_NO_NORM only (see GATES) */
} favor_kernel;

/* Flags of favor_features_init(). Orthogonal blocks and chi norms by default. */
#define FAVOR_IID          1u /* independent Gaussian rows                       */
#define FAVOR_REGULAR_NORM 2u /* every row of W has norm sqrt(d)                  */

/* Roles of favor_feature_map(). */
typedef enum {
    FAVOR_QUERY = 0, /* stabilizer per row                                      */
    FAVOR_KEY,       /* one stabilizer per head (maximum over the head's rows)   */
    FAVOR_PLAIN      /* no stabilizer: the unbiased map itself (may overflow)    */
} favor_role;

/* A feature map. Fill it with favor_features_init(); the fields are readable.
 * `scale` (s) may be changed between calls; W = w (count x dim, row-major) and
 * its transpose wt (dim x count) live in the caller's storage. */
typedef struct {
    favor_kernel kernel;
    unsigned flags;
    size_t dim;          /* d                                        */
    size_t count;        /* m (ELU1, POLY2, IDENTITY: d)             */
    float scale;         /* s, initialised to 1/sqrt(d)              */
    unsigned long long seed;
    float *w;            /* count x dim (NULL for ELU1, POLY2, IDENTITY) */
    float *wt;           /* dim x count (NULL for ELU1, POLY2, IDENTITY) */
} favor_features;

/* Floats of storage favor_features_init() needs: 2*count*dim + 2*dim for the
 * random maps (W, its transpose, a sampling scratch row), 0 for FAVOR_ELU1,
 * FAVOR_POLY2 and FAVOR_IDENTITY.
 * Returns 0 as well for arguments init would reject. */
FAVOR_API size_t favor_features_floats(favor_kernel kernel, size_t dim, size_t count);

/* Draw W for `kernel` with `count` = m rows of dimension `dim` = d (any m >= 1;
 * ELU1, POLY2 and IDENTITY take count 0 or d and no storage; POLY2 d <= 4096). Cost
 * O(m d^2) in double. storage must hold favor_features_floats() floats and
 * outlive f. Errors: FAVOR_E_NULL (f, or storage when needed), FAVOR_E_SHAPE
 * (dim or count 0, or count != d for ELU1, POLY2, IDENTITY), FAVOR_E_OVERFLOW (sizes,
 * POLY2's d), FAVOR_E_ARG (unknown kernel or flag). */
FAVOR_API favor_status favor_features_init(favor_features *f, favor_kernel kernel,
                                           size_t dim, size_t count, unsigned flags,
                                           unsigned long long seed, float *storage);

/* Redraw W in place from a new seed (same kernel, sizes, flags, storage).
 * O(m d^2) time in double, no memory beyond the storage. Errors: FAVOR_E_NULL,
 * FAVOR_E_SHAPE or FAVOR_E_ARG for an f that init did not fill; for ELU1,
 * POLY2 and IDENTITY (no W) only the seed changes. */
FAVOR_API favor_status favor_features_redraw(favor_features *f, unsigned long long seed);

/* Width of phi(x): d (ELU1, IDENTITY), m (POSITIVE, RELU), 2m (HYPERBOLIC,
 * TRIG) or 1 + d + d (d + 1) / 2 (POLY2); 0 for a NULL or invalid f. O(1). */
FAVOR_API size_t favor_features_width(const favor_features *f);

/* phi = phi(x) for every row of x ([heads][rows][d] -> [heads][rows][width]),
 * with the stabilizer of `role`. O(rows*m*d) per head, no workspace: rows of a
 * 16-bit x or phi pass through fp32 buffers on the stack (8 KiB), or, when one
 * row of them needs more than 2048 floats (d for x, width for phi), a buffer
 * allocated with FAVOR_MALLOC (FAVOR_E_NOMEM; FAVOR_E_WORKSPACE under
 * FAVOR_NO_MALLOC). A 16-bit phi with FAVOR_KEY computes the map twice (the
 * head's stabilizer first). Errors: FAVOR_E_NULL, FAVOR_E_SHAPE (x.cols != d,
 * phi.cols != width, heads or rows differ), FAVOR_E_OVERFLOW, FAVOR_E_ALIAS
 * (phi overlaps x or W), FAVOR_E_ARG. */
FAVOR_API favor_status favor_feature_map(const favor_features *f, const favor_tensor *x,
                                         const favor_tensor *phi, favor_role role);

/* Exact softmax attention, out = softmax(s q k^T [+ causal mask]) v per head,
 * with the SCORE VARIANTS and PACKED SEQUENCES of opts.
 * Time O(heads n n_k d), memory O(tile): the workspace does not depend on n, nor
 * on n_k except for calls of at most 32 query rows (see DECODING, WORKSPACE).
 * Errors: FAVOR_E_NULL, FAVOR_E_SHAPE, FAVOR_E_OVERFLOW, FAVOR_E_ALIAS (out
 * overlaps q, k or v), FAVOR_E_WORKSPACE, FAVOR_E_NOMEM, FAVOR_E_ARG (flags,
 * scale < 0 or not finite, threads < 0). With opts->lse it also writes each
 * row's log-sum-exp (heads_q x n floats, overlapping nothing). */
FAVOR_API favor_status favor_softmax_attention(const favor_tensor *q, const favor_tensor *k,
                                               const favor_tensor *v, const favor_tensor *out,
                                               const favor_options *opts);
/* Bytes of opts->workspace favor_softmax_attention needs for these shapes and
 * opts->threads: a few tiles per thread, independent of n and n_k, plus, for at
 * most 32 query rows, the decode partials (growing with n_k: see WORKSPACE); 0
 * when the arguments are invalid (the call itself says why; with at most 32
 * query rows k and v are checked too). O(1). Each _workspace query below is the
 * same for its own call. */
FAVOR_API size_t favor_softmax_attention_workspace(const favor_tensor *q,
                                                   const favor_tensor *k,
                                                   const favor_tensor *v,
                                                   const favor_options *opts);

/* Gradients of softmax attention. out = favor_softmax_attention(q, k, v) with
 * the same options, dout = dL/dout; writes dq, dk, dv (shaped as q, k, v;
 * overwritten, not accumulated) = dL/dq, dL/dk, dL/dv. Grouped-query heads: a
 * shared key/value head gets the sum over its query heads. When opts->lse holds
 * the forward's log-sum-exp it is used, else each query block recomputes it
 * first (one more pass over the keys). Scores are recomputed tile by tile:
 * time O(heads n n_k d) (about 2.5x the forward), memory O(tile), independent
 * of n. Threads split key/value heads, or the key parts of each query block when
 * the heads are too few. With opts->sinks and opts->dsinks it also writes
 * dL/dsinks (heads_q floats; see SCORE VARIANTS). Errors as
 * favor_softmax_attention, plus FAVOR_E_SHAPE for a gradient shaped unlike its
 * tensor and FAVOR_E_ALIAS when dq, dk, dv or dsinks overlaps each other, an
 * input, lse or the workspace. */
FAVOR_API favor_status favor_softmax_attention_backward(
    const favor_tensor *q, const favor_tensor *k, const favor_tensor *v,
    const favor_tensor *out, const favor_tensor *dout, const favor_tensor *dq,
    const favor_tensor *dk, const favor_tensor *dv, const favor_options *opts);
FAVOR_API size_t favor_softmax_attention_backward_workspace(const favor_tensor *q,
                                                            const favor_tensor *k,
                                                            const favor_tensor *v,
                                                            const favor_options *opts);

/* Merge two softmax attentions of the same queries over disjoint key sets into
 * the one over their union (see MERGING): out_a, lse_a and out_b, lse_b are the
 * outputs and log-sum-exps of the parts (lse as favor_options.lse: batch x
 * heads x rows floats, [batch][head][row]); out gets, row by row,
 * (w_a out_a + w_b out_b) / (w_a + w_b) with w_x = exp(lse_x - max(lse_a,
 * lse_b)), and lse (NULL: not written) the log-sum-exp over both. out_a, out_b
 * and out have the same batch, heads, rows and cols, each of any element type.
 * In place: out may be the very view out_a or out_b is (same data, strides and
 * dtype), and lse the very pointer lse_a or lse_b is; any other overlap of out
 * with an input, or of lse with a view or another lse, is FAVOR_E_ALIAS. Only
 * opts->threads and opts->error are read (opts may be NULL); threads share out
 * the rows (see THREADS). Time O(batch heads rows cols), no workspace, no
 * allocation (16-bit rows pass through 3 KB of stack, a block of columns at a
 * time). Errors: FAVOR_E_NULL, FAVOR_E_SHAPE (a view's sizes, or unlike
 * out_a's), FAVOR_E_OVERFLOW, FAVOR_E_ALIAS, FAVOR_E_ARG (a dtype outside the
 * enum, threads < 0). */
FAVOR_API favor_status favor_attention_merge(const favor_tensor *out_a, const float *lse_a,
                                             const favor_tensor *out_b, const float *lse_b,
                                             const favor_tensor *out, float *lse,
                                             const favor_options *opts);

/* Linear (kernelized) attention with the feature map f, non-causal or causal.
 * Time O(heads (n + n_k) width (d + d_v)) plus O(heads n C width) for the causal
 * intra-chunk blocks (C = 64); memory O(width d_v) per head, never O(n width).
 * Errors as favor_softmax_attention, plus FAVOR_E_SHAPE when d != f->dim. */
FAVOR_API favor_status favor_linear_attention(const favor_features *f, const favor_tensor *q,
                                              const favor_tensor *k, const favor_tensor *v,
                                              const favor_tensor *out,
                                              const favor_options *opts);
FAVOR_API size_t favor_linear_attention_workspace(const favor_features *f,
                                                  const favor_tensor *q,
                                                  const favor_tensor *k,
                                                  const favor_tensor *v,
                                                  const favor_options *opts);

/* Gradients of linear attention with the map f (W is a constant): dout = dL/dout
 * for out = favor_linear_attention(f, q, k, v) with the same options; writes dq,
 * dk, dv (overwritten; a shared key/value head gets the sum over its query
 * heads). Exact: the stabilizers cancel, and the derivative of the map includes
 * its |x'|^2 term and the scale. Non-causal: two passes over the keys and one
 * over the queries. Causal: a forward pass (dq, by prefix sums) and a reverse
 * pass (dk, dv, by suffix sums), as in "Transformers are RNNs" section 3.3.1;
 * time O(heads (n + n_k) width (d + d_v + C)), memory O(width d_v) per head.
 * Between the passes each query row keeps 3 floats (its denominator, stabilizer
 * and dout.out) in the rows of dk and dv it will later overwrite; only when
 * 3 * (query heads per key/value head) > d + d_v do they go in the workspace,
 * which then grows with n. Gated (opts.decay, opts.gates, FAVOR_NO_NORM,
 * FAVOR_IDENTITY; see GATES) with the same bounds; with opts.gates and
 * opts.dgates it also writes dL/dg into dgates. Errors as
 * favor_linear_attention, plus those of favor_softmax_attention_backward for
 * the gradients, and for dgates: given without gates or not fp32 (FAVOR_E_ARG),
 * shaped unlike the gates (FAVOR_E_SHAPE), overlapping anything of the call
 * (FAVOR_E_ALIAS). */
FAVOR_API favor_status favor_linear_attention_backward(
    const favor_features *f, const favor_tensor *q, const favor_tensor *k,
    const favor_tensor *v, const favor_tensor *dout, const favor_tensor *dq,
    const favor_tensor *dk, const favor_tensor *dv, const favor_options *opts);
FAVOR_API size_t favor_linear_attention_backward_workspace(const favor_features *f,
                                                           const favor_tensor *q,
                                                           const favor_tensor *k,
                                                           const favor_tensor *v,
                                                           const favor_options *opts);

/* The recurrent state of causal linear attention, (S, z) and the key stabilizer
 * of each key/value head. Fill with favor_state_init(); tokens counts the keys
 * absorbed so far. */
typedef struct {
    size_t heads;        /* key/value heads                         */
    size_t width;        /* favor_features_width(f)                 */
    size_t dv;           /* d_v                                     */
    size_t dim;          /* d of the features it was made for       */
    favor_kernel kernel;
    unsigned long long tokens;
    float *s;            /* heads x width x dv                      */
    float *z;            /* heads x width                           */
    float *c;            /* heads + 1: log-scale of s and z per head,
                            then the number of pending tokens       */
    float *scratch;      /* used by favor_linear_step               */
    float *comp;         /* heads x width x (dv+1): the rounding
                            errors of s and z (compensated sums)    */
    float *pend;         /* heads x 16 x (width + dv + 2): the last
                            tokens favor_linear_step took, not yet
                            added to s and z                        */
} favor_state;

/* Floats of storage a state needs: heads*(2*width*(dv+2) + 2*d + 3 +
 * 16*(width+dv+2)) + width + max(width, 16*dv) + 35,
 * constant in the number of tokens. Returns 0 for arguments favor_state_init
 * would reject. O(1). */
FAVOR_API size_t favor_state_floats(const favor_features *f, size_t heads, size_t dv);

/* Bind a state to storage (favor_state_floats() floats) and reset it. Errors:
 * FAVOR_E_NULL, FAVOR_E_SHAPE (heads or dv 0), FAVOR_E_OVERFLOW, FAVOR_E_ARG. */
FAVOR_API favor_status favor_state_init(favor_state *st, const favor_features *f,
                                        size_t heads, size_t dv, float *storage);

/* Forget every absorbed token: O(heads width d_v), no memory; a NULL or unbound
 * state is left alone. Writes every float of the storage (scratch included), so
 * a reset state is the same bytes as a fresh one and can be copied, compared or
 * saved whole. */
FAVOR_API void favor_state_reset(favor_state *st);

/* Causal linear attention of a block of n new tokens after the tokens already in
 * st: row i sees the state and new keys 0..i. q, k, v have n rows each (k, v with
 * st->heads heads, q a multiple of it); st absorbs the block. Same results as one
 * favor_linear_attention call over the whole sequence (within 1e-5 relative).
 * Time O(heads n width (d + d_v + C)), no memory beyond the workspace (O(width
 * (d_v + C)) per thread, independent of n and of the tokens already absorbed).
 * Errors as favor_linear_attention, plus FAVOR_E_NULL for a state without
 * storage, FAVOR_E_SHAPE when st was made for another map, head count or d_v or
 * q and k differ in rows, FAVOR_E_ALIAS when out or the workspace overlaps st's
 * storage, FAVOR_E_ARG when st's count of pending tokens (c[heads]) is not a whole
 * number below 16 (its storage overwritten, or the struct changed after
 * favor_state_init). opts->flags may be 0 or FAVOR_CAUSAL (it is causal either
 * way). On error neither out nor st changes. */
FAVOR_API favor_status favor_linear_extend(const favor_features *f, favor_state *st,
                                           const favor_tensor *q, const favor_tensor *k,
                                           const favor_tensor *v, const favor_tensor *out,
                                           const favor_options *opts);
FAVOR_API size_t favor_linear_extend_workspace(const favor_features *f,
                                               const favor_state *st,
                                               const favor_tensor *q,
                                               const favor_tensor *k,
                                               const favor_tensor *v,
                                               const favor_options *opts);

/* One token for every head: q, k, v, out have one row each; the scale is
 * f->scale. Uses st->scratch, no workspace, no allocation: O(heads width
 * (d + d_v)) time, constant in the number of tokens already absorbed. It reads
 * S and keeps the token in the state's pending block; every 16th token folds the
 * block into the compensated sums as one rank-16 update (favor_linear_extend
 * folds it first too). Errors as favor_linear_extend, plus FAVOR_E_SHAPE when a
 * tensor has more than one row. */
FAVOR_API favor_status favor_linear_step(const favor_features *f, favor_state *st,
                                         const favor_tensor *q, const favor_tensor *k,
                                         const favor_tensor *v, const favor_tensor *out);

/* favor_linear_step with options (NULL: favor_linear_step): opts->flags may
 * hold FAVOR_CAUSAL and FAVOR_NO_NORM, opts->decay and opts->gates (one row per
 * key/value head: this token's log-gates) decay the state before the token's
 * key joins it (see GATES), opts->scale replaces f->scale as in extend, and
 * opts->error takes the text of a refusal; the rest is not read. Same cost and
 * storage as favor_linear_step. Errors as favor_linear_step, plus those of the
 * options (FAVOR_E_ARG, FAVOR_E_SHAPE for gates not shaped [heads][1][1]). */
FAVOR_API favor_status favor_linear_step_ex(const favor_features *f, favor_state *st,
                                            const favor_tensor *q, const favor_tensor *k,
                                            const favor_tensor *v, const favor_tensor *out,
                                            const favor_options *opts);

#ifdef __cplusplus
}
#endif
#endif /* FAVOR_H_INCLUDED */

/* ===========================================================================
 * 4. Implementation
 * ========================================================================= */
#if defined(FAVOR_IMPLEMENTATION) && !defined(FAVOR__IMPLEMENTED)
#define FAVOR__IMPLEMENTED

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#if defined(FAVOR_MALLOC) != defined(FAVOR_FREE)
#error "favor.h: define both FAVOR_MALLOC and FAVOR_FREE, or neither"
#endif
#if !defined(FAVOR_MALLOC) && !defined(FAVOR_NO_MALLOC)
#include <stdlib.h>
#define FAVOR_MALLOC(bytes) malloc(bytes)
#define FAVOR_FREE(ptr) free(ptr)
#endif
#ifndef FAVOR_ASSERT
#define FAVOR_ASSERT(x) ((void)0)
#endif

/* 4.0 Runtime dispatch (FAVOR_DISPATCH) ----------------------------------------
 * Everything from 4.1 to the end of section 4 is the kernel section, FAVOR__PART
 * 2 of this file. Without FAVOR_DISPATCH it is compiled once, for the backend the
 * compiler's flags select, and FAVOR__N(x) is x. With it, on x86-64 under gcc >= 8
 * or clang >= 7, this block includes the file again once per target, each time
 * under that target's instruction set (gcc's target pragma, clang's attribute
 * push) with FAVOR_SIMD set for it, and with every name the section defines at
 * file scope renamed favor__x -> favor__x_avx2 by the list of FAVOR__PART 1
 * (generated by tests/dispatch_names.py; a name missing from it is a
 * redefinition error in the second pass). A function of the vector layer that
 * another backend defines as a macro is renamed by a #define beside its
 * definition instead. After each pass the section's macros are undefined (PART
 * 3); after the last, the names (PART 5); then PART 4 defines the public
 * functions, each calling the target chosen once through a table of pointers. */
#if defined(FAVOR_DISPATCH) && !defined(FAVOR_SIMD) && !defined(FAVOR_NO_SIMD) &&    \
    defined(__x86_64__) &&                                                           \
    ((defined(__clang__) && __clang_major__ >= 7) ||                                 \
     (defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8))
#define FAVOR__DISPATCHING 1
#include <immintrin.h>
#include <cpuid.h>
/* This file, which includes itself: found beside itself under its own name (a
 * quoted include searches the including file's directory first). A copy under
 * another name defines FAVOR_SELF as that name. */
#ifndef FAVOR_SELF
#define FAVOR_SELF "favor.h"
#endif
#define FAVOR__N(x) FAVOR__N2(x, FAVOR__TGT)
#define FAVOR__N2(x, t) FAVOR__N3(x, t)
#define FAVOR__N3(x, t) x##_##t
#define FAVOR__DEF static
/* the instruction set of the functions from here to FAVOR__TARGET_POP */
#define FAVOR__PRAGMA(...) _Pragma(#__VA_ARGS__)
#if defined(__clang__)
#define FAVOR__TARGET_PUSH(isa)                                                         \
    FAVOR__PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define FAVOR__TARGET_POP FAVOR__PRAGMA(clang attribute pop)
#else
#define FAVOR__TARGET_PUSH(isa) FAVOR__PRAGMA(GCC push_options) FAVOR__PRAGMA(GCC target(isa))
#define FAVOR__TARGET_POP FAVOR__PRAGMA(GCC pop_options)
#endif
#define FAVOR__PART 1 /* the names, and FAVOR__API_LIST */
#include FAVOR_SELF
/* the public functions, one pointer each, in the order of FAVOR__API_LIST (the
 * members are named m_ + the public name, which no renaming touches) */
#define FAVOR__DT_MEMBER(ret, name, params, args) ret(*m_##name) params;
struct favor__dispatch {
    FAVOR__API_LIST(FAVOR__DT_MEMBER, FAVOR__DT_MEMBER)
};

/* the passes: FAVOR__PART 2 (the section) and 3 (undefine its macros) per target */
#define FAVOR__TGT scalar /* the target the build's flags give: the baseline */
#define FAVOR_SIMD FAVOR_SCALAR
#define FAVOR__PART 2
#include FAVOR_SELF
#define FAVOR__PART 3
#include FAVOR_SELF
#undef FAVOR__TGT

FAVOR__TARGET_PUSH("avx2,fma,f16c")
#define FAVOR__TGT avx2
#define FAVOR_SIMD FAVOR_AVX2
#define FAVOR__PASS_ISA 1 /* FMA and F16C, whatever the flags say */
#define FAVOR__PART 2
#include FAVOR_SELF
#define FAVOR__PART 3
#include FAVOR_SELF
#undef FAVOR__TGT
FAVOR__TARGET_POP

/* AVX-512 as the test variant builds it: F (all the backend uses), with DQ, BW
 * and VL for the compiler's own code, as every AVX-512 CPU since Skylake-X has */
FAVOR__TARGET_PUSH("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c")
#define FAVOR__TGT avx512
#define FAVOR_SIMD FAVOR_AVX512
#define FAVOR__PASS_ISA 1
#define FAVOR__PART 2
#include FAVOR_SELF
#define FAVOR__PART 3
#include FAVOR_SELF
#undef FAVOR__TGT
FAVOR__TARGET_POP

#define FAVOR__PART 5 /* the names are the public ones again */
#include FAVOR_SELF
#define FAVOR__PART 4 /* the public functions */
#include FAVOR_SELF
#else
#define FAVOR__DISPATCHING 0
#define FAVOR__N(x) x
#define FAVOR__DEF FAVOR_API
#define FAVOR__PART 2 /* the kernel section, once, below */
#endif
#endif /* FAVOR_IMPLEMENTATION */

#if defined(FAVOR__PART) && FAVOR__PART == 2
#if FAVOR__DISPATCHING
/* the public functions of this pass, under their pass names (4.0) */
#define FAVOR__DT_PROTO(ret, name, params, args) static ret name params;
FAVOR__API_LIST(FAVOR__DT_PROTO, FAVOR__DT_PROTO)
#endif
/* 4.1 Backend selection ------------------------------------------------------
 * From the compiler's own predefines unless FAVOR_SIMD or FAVOR_NO_SIMD says
 * otherwise (or a dispatch pass, 4.0, sets FAVOR_SIMD and FAVOR__PASS_ISA).
 * Forcing a backend the compiler cannot build is an error. */
#ifdef FAVOR__PASS_ISA
#define FAVOR__FMA 1
#define FAVOR__F16C 1
#else
#if defined(__FMA__)
#define FAVOR__FMA 1
#else
#define FAVOR__FMA 0
#endif
#if defined(__F16C__)
#define FAVOR__F16C 1
#else
#define FAVOR__F16C 0
#endif
#endif
#ifndef FAVOR_SIMD
#if defined(FAVOR_NO_SIMD)
#define FAVOR_SIMD FAVOR_SCALAR
#elif defined(__AVX512F__) && defined(__FMA__)
#define FAVOR_SIMD FAVOR_AVX512
#elif defined(__AVX2__) && defined(__FMA__)
#define FAVOR_SIMD FAVOR_AVX2
#elif defined(__ARM_NEON) && defined(__aarch64__)
#define FAVOR_SIMD FAVOR_NEON
#else
#define FAVOR_SIMD FAVOR_SCALAR
#endif
#endif
#ifdef FAVOR__PASS_ISA
#elif FAVOR_SIMD == FAVOR_AVX2
#if !(defined(__AVX2__) && defined(__FMA__))
#error "favor.h: FAVOR_SIMD=FAVOR_AVX2 needs AVX2 and FMA: compile with -mavx2 -mfma (or -march=native on such a CPU)"
#endif
#elif FAVOR_SIMD == FAVOR_AVX512
#if !(defined(__AVX512F__) && defined(__FMA__))
#error "favor.h: FAVOR_SIMD=FAVOR_AVX512 needs AVX-512F and FMA: compile with -mavx512f -mfma (or -march=native on such a CPU)"
#endif
#elif FAVOR_SIMD == FAVOR_NEON
#if !(defined(__ARM_NEON) && defined(__aarch64__))
#error "favor.h: FAVOR_SIMD=FAVOR_NEON needs an AArch64 target (NEON is always on there; no flags needed)"
#endif
#elif FAVOR_SIMD != FAVOR_SCALAR
#error "favor.h: FAVOR_SIMD must be FAVOR_SCALAR, FAVOR_AVX2, FAVOR_AVX512 or FAVOR_NEON"
#endif

/* 4.2 The vector layer ------------------------------------------------------
 * The scalar operations favor__s_* are always compiled: they are the width-1
 * backend and the tails of the vector loops. favor__v_* are the vector
 * operations of the selected backend, FAVOR__W floats wide. Every kernel below
 * is written once against these two vocabularies. */
typedef uint32_t favor__su; /* the integer lane matching a float */

static inline float favor__s_set1(float x) { return x; }
static inline float favor__s_load(const float *p) { return *p; }
static inline void favor__s_store(float *p, float x) { *p = x; }
static inline float favor__s_add(float a, float b) { return a + b; }
static inline float favor__s_sub(float a, float b) { return a - b; }
static inline float favor__s_mul(float a, float b) { return a * b; }
static inline float favor__s_div(float a, float b) { return a / b; }
/* A fused multiply-add where the hardware has one (as the vector backends do), so
 * scalar tails and vector bodies round alike; a*b + c otherwise. */
static inline float favor__s_fma(float a, float b, float c)
{
#if FAVOR__FMA || defined(__aarch64__) || defined(FP_FAST_FMAF)
    return fmaf(a, b, c);
#else
    return a * b + c;
#endif
}
/* max/min return b when either is NaN (as x86 maxps does with its 2nd operand). */
static inline float favor__s_max(float a, float b) { return a > b ? a : b; }
static inline float favor__s_min(float a, float b) { return a < b ? a : b; }
static inline favor__su favor__s_asint(float x) { favor__su u; memcpy(&u, &x, 4); return u; }
static inline float favor__s_asfloat(favor__su u) { float x; memcpy(&x, &u, 4); return x; }
static inline favor__su favor__s_iadd(favor__su a, favor__su b) { return a + b; }
static inline favor__su favor__s_isub(favor__su a, favor__su b) { return a - b; }
static inline favor__su favor__s_iset1(favor__su a) { return a; }
static inline favor__su favor__s_iand(favor__su a, favor__su b) { return a & b; }
static inline favor__su favor__s_ior(favor__su a, favor__su b) { return a | b; }
#define favor__s_srli(a, n) ((favor__su)(a) >> (n))
#define favor__s_slli(a, n) ((favor__su)(a) << (n))
/* a where x > 0, else b */
static inline float favor__s_pos_select(float x, float a, float b) { return x > 0.0f ? a : b; }
static inline float favor__s_hsum(float x) { return x; }
static inline float favor__s_hmax(float x) { return x; }

/* Loops over constant bounds that must become straight code with their arrays
 * in registers (the register tile, the block transposes): gcc unrolls them when
 * told (at -O2 it kept a transpose's 16 vectors on the stack, 3x slower), clang
 * by itself. */
#if defined(__GNUC__) || defined(__clang__)
#define FAVOR__INLINE static inline __attribute__((always_inline))
#else
#define FAVOR__INLINE static inline
#endif
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8
#define FAVOR__UNROLL _Pragma("GCC unroll 16") /* clang unrolls these by itself */
#else
#define FAVOR__UNROLL
#endif

#if FAVOR_SIMD == FAVOR_AVX2
/* AVX2 + FMA: 8 lanes. max/min keep maxps' rule (NaN in either -> 2nd operand),
 * which is what the scalar a > b ? a : b does. */
#include <immintrin.h>
#define FAVOR__W 8
#define FAVOR__NREG 16
typedef __m256 favor__vf;
typedef __m256i favor__vu;
#define favor__v_set1(x) _mm256_set1_ps(x)
#define favor__v_load(p) _mm256_loadu_ps(p)
#define favor__v_store(p, x) _mm256_storeu_ps((p), (x))
#define favor__v_add(a, b) _mm256_add_ps((a), (b))
#define favor__v_sub(a, b) _mm256_sub_ps((a), (b))
#define favor__v_mul(a, b) _mm256_mul_ps((a), (b))
#define favor__v_div(a, b) _mm256_div_ps((a), (b))
#define favor__v_fma(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define favor__v_max(a, b) _mm256_max_ps((a), (b))
#define favor__v_min(a, b) _mm256_min_ps((a), (b))
#define favor__v_asint(x) _mm256_castps_si256(x)
#define favor__v_asfloat(x) _mm256_castsi256_ps(x)
#define favor__v_iadd(a, b) _mm256_add_epi32((a), (b))
#define favor__v_isub(a, b) _mm256_sub_epi32((a), (b))
#define favor__v_iset1(a) _mm256_set1_epi32((int)(a))
#define favor__v_iand(a, b) _mm256_and_si256((a), (b))
#define favor__v_ior(a, b) _mm256_or_si256((a), (b))
#define favor__v_srli(a, n) _mm256_srli_epi32((a), (n))
#define favor__v_slli(a, n) _mm256_slli_epi32((a), (n))
#define favor__v_pos_select FAVOR__N(favor__v_pos_select) /* a function here (4.0) */
static inline favor__vf favor__v_pos_select(favor__vf x, favor__vf a, favor__vf b)
{
    return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ));
}
#define favor__v_hsum FAVOR__N(favor__v_hsum) /* a function here (4.0) */
static inline float favor__v_hsum(favor__vf x)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#define favor__v_hmax FAVOR__N(favor__v_hmax) /* a function here (4.0) */
static inline float favor__v_hmax(favor__vf x)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
/* The sums of W vectors as one vector: lane i = the horizontal sum of a[i] (a
 * W x W transpose-and-add, written with the backend's pairwise adds). Lets a
 * kernel keep one accumulator per output (a dot product per key) and reduce W
 * of them at the cost of about one horizontal sum. */
static inline favor__vf favor__v_sums(const favor__vf *a)
{
    __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    t0 = _mm256_hadd_ps(t0, t1); /* a0..a3: lanes 0-3 their low halves, 4-7 high */
    t2 = _mm256_hadd_ps(t2, t3); /* a4..a7 likewise */
    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t2, 0x20),
                         _mm256_permute2f128_ps(t0, t2, 0x31));
}
/* d[c*ldd + r] = s[r*lds + c] for an 8 x 8 block: a data movement the portable
 * layer has no operation for (lane shuffles), so each backend spells it out;
 * every kernel's transposes go through favor__transpose, which uses it. */
static inline void favor__v_transpose(const float *s, size_t lds, float *d, size_t ldd)
{
    __m256 a0 = _mm256_loadu_ps(s), a1 = _mm256_loadu_ps(s + lds);
    __m256 a2 = _mm256_loadu_ps(s + 2 * lds), a3 = _mm256_loadu_ps(s + 3 * lds);
    __m256 a4 = _mm256_loadu_ps(s + 4 * lds), a5 = _mm256_loadu_ps(s + 5 * lds);
    __m256 a6 = _mm256_loadu_ps(s + 6 * lds), a7 = _mm256_loadu_ps(s + 7 * lds);
    __m256 t0 = _mm256_unpacklo_ps(a0, a1), t1 = _mm256_unpackhi_ps(a0, a1);
    __m256 t2 = _mm256_unpacklo_ps(a2, a3), t3 = _mm256_unpackhi_ps(a2, a3);
    __m256 t4 = _mm256_unpacklo_ps(a4, a5), t5 = _mm256_unpackhi_ps(a4, a5);
    __m256 t6 = _mm256_unpacklo_ps(a6, a7), t7 = _mm256_unpackhi_ps(a6, a7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(d + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(d + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(d + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(d + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(d + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(d + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(d + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#elif FAVOR_SIMD == FAVOR_AVX512
/* AVX-512F + FMA: 16 lanes, 32 registers. Only AVX-512F instructions (no DQ, BW
 * or VL): comparisons give mask registers, and the selects blend by them. max/min
 * follow maxps' rule, as on AVX2. */
#include <immintrin.h>
#define FAVOR__W 16
#define FAVOR__NREG 32
typedef __m512 favor__vf;
typedef __m512i favor__vu;
#define favor__v_set1(x) _mm512_set1_ps(x)
#define favor__v_load(p) _mm512_loadu_ps(p)
#define favor__v_store(p, x) _mm512_storeu_ps((p), (x))
#define favor__v_add(a, b) _mm512_add_ps((a), (b))
#define favor__v_sub(a, b) _mm512_sub_ps((a), (b))
#define favor__v_mul(a, b) _mm512_mul_ps((a), (b))
#define favor__v_div(a, b) _mm512_div_ps((a), (b))
#define favor__v_fma(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define favor__v_max(a, b) _mm512_max_ps((a), (b))
#define favor__v_min(a, b) _mm512_min_ps((a), (b))
#define favor__v_asint(x) _mm512_castps_si512(x)
#define favor__v_asfloat(x) _mm512_castsi512_ps(x)
#define favor__v_iadd(a, b) _mm512_add_epi32((a), (b))
#define favor__v_isub(a, b) _mm512_sub_epi32((a), (b))
#define favor__v_iand(a, b) _mm512_and_si512((a), (b))
#define favor__v_ior(a, b) _mm512_or_si512((a), (b))
#define favor__v_iset1(a) _mm512_set1_epi32((int)(a))
#define favor__v_srli(a, n) _mm512_srli_epi32((a), (n))
#define favor__v_slli(a, n) _mm512_slli_epi32((a), (n))
#define favor__v_pos_select FAVOR__N(favor__v_pos_select) /* a function here (4.0) */
static inline favor__vf favor__v_pos_select(favor__vf x, favor__vf a, favor__vf b)
{
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ), b, a);
}
#define favor__v_hsum(x) _mm512_reduce_add_ps(x)
#define favor__v_hmax(x) _mm512_reduce_max_ps(x)
/* the first n < 16 lanes at p (a tail): loads zero the other lanes, stores leave
 * the memory past p + n untouched (masked, no fault past the end) */
#define FAVOR__MASKED 1
#define FAVOR__LANES(n) ((__mmask16)((1u << (n)) - 1u))
#define favor__v_load_n(p, n) _mm512_maskz_loadu_ps(FAVOR__LANES(n), (p))
#define favor__v_store_n(p, x, n) _mm512_mask_storeu_ps((p), FAVOR__LANES(n), (x))
/* Vector c < nv of an fp32 row of nv vectors at p. A row off the 64-byte lines
 * (where malloc leaves a large buffer: 16 bytes past a page) takes each of its
 * vectors across two lines: on a Zen 5 a plain read of such loads took 1.38x
 * the time, and four decode rows of such a cache (favor__rows_as, each vector's
 * load folded into four FMAs) 2.0-2.1x (64K keys; 1.35x in L2). Here an
 * unaligned row takes the lines' own loads instead, masked to its elements at
 * its two ends (nothing outside the row is read), and one two-source permute
 * per vector: the same values. */
#define FAVOR__ROW_LOADS 1
#define favor__v_load_row FAVOR__N(favor__v_load_row) /* a function here */
static inline favor__vf favor__v_load_row(const float *p, size_t c, size_t nv)
{
    const unsigned a = (unsigned)((uintptr_t)p >> 2) & 15u; /* its floats past a line */
    const float *b = p - a;
    __m512 lo, hi;
    if (!a) return _mm512_loadu_ps(p + c * 16);
    lo = c == 0 ? _mm512_maskz_loadu_ps((__mmask16)(0xffffu << a), b)
                : _mm512_loadu_ps(b + c * 16);
    hi = c + 1 == nv ? favor__v_load_n(b + (c + 1) * 16, a) : _mm512_loadu_ps(b + (c + 1) * 16);
    return _mm512_permutex2var_ps(
        lo,
        _mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32((int)a)),
        hi);
}
/* Lane-block helpers of the two below: the 128-bit blocks 0 and 2 (EVEN) or 1
 * and 3 (ODD) of a, then the same of b. */
#define FAVOR__X4_EVEN(a, b) _mm512_shuffle_f32x4((a), (b), 0x88)
#define FAVOR__X4_ODD(a, b) _mm512_shuffle_f32x4((a), (b), 0xDD)
/* see the AVX2 version: 16 vectors in three rounds of pairwise adds (elements
 * within 128-bit blocks by unpack, then by shuffle, then the blocks). The loops
 * are unrolled: left rolled (gcc 12 -O2), the caller's 16 accumulators went
 * through the stack, and decode calls took 1.03-1.18x the time (Xeon, Cascade
 * Lake, d = 64, one to 16 rows; same bits) */
static inline favor__vf favor__v_sums(const favor__vf *a)
{
    __m512 s[8], t[4], u0, u1;
    int i;
    FAVOR__UNROLL for (i = 0; i < 8; ++i) /* a[2i], a[2i+1] interleaved, 8 partials each */
        s[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                             _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    FAVOR__UNROLL for (i = 0; i < 4; ++i) /* a[4i..4i+3] in the 4 lanes of each block */
        t[i] = _mm512_add_ps(_mm512_shuffle_ps(s[2 * i], s[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(s[2 * i], s[2 * i + 1], 0xEE));
    u0 = _mm512_add_ps(FAVOR__X4_EVEN(t[0], t[1]), FAVOR__X4_ODD(t[0], t[1]));
    u1 = _mm512_add_ps(FAVOR__X4_EVEN(t[2], t[3]), FAVOR__X4_ODD(t[2], t[3]));
    return _mm512_add_ps(FAVOR__X4_EVEN(u0, u1), FAVOR__X4_ODD(u0, u1));
}
/* a 16 x 16 block transpose (see the AVX2 version): pairs of rows interleaved,
 * then fours, so each 128-bit block holds one column of four rows; the four
 * blocks of a column then gather by 128-bit shuffles */
static inline void favor__v_transpose(const float *s, size_t lds, float *d, size_t ldd)
{
    __m512 r[16], u[16];
    int i, g, c;
    FAVOR__UNROLL for (i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(s + i * lds);
    FAVOR__UNROLL for (i = 0; i < 16; i += 2) { /* rows i, i+1: columns 4L, 4L+1 | 4L+2, 4L+3 */
        __m512 lo = _mm512_unpacklo_ps(r[i], r[i + 1]), hi = _mm512_unpackhi_ps(r[i], r[i + 1]);
        r[i] = lo;
        r[i + 1] = hi;
    }
    FAVOR__UNROLL for (g = 0; g < 16; g += 4) { /* u[g + c], block L: column 4L + c, rows g..g+3 */
        u[g] = _mm512_shuffle_ps(r[g], r[g + 2], 0x44);
        u[g + 1] = _mm512_shuffle_ps(r[g], r[g + 2], 0xEE);
        u[g + 2] = _mm512_shuffle_ps(r[g + 1], r[g + 3], 0x44);
        u[g + 3] = _mm512_shuffle_ps(r[g + 1], r[g + 3], 0xEE);
    }
    FAVOR__UNROLL for (c = 0; c < 4; ++c) {
        __m512 a = FAVOR__X4_EVEN(u[c], u[4 + c]), b = FAVOR__X4_ODD(u[c], u[4 + c]);
        __m512 e = FAVOR__X4_EVEN(u[8 + c], u[12 + c]), f = FAVOR__X4_ODD(u[8 + c], u[12 + c]);
        _mm512_storeu_ps(d + (size_t)c * ldd, FAVOR__X4_EVEN(a, e));
        _mm512_storeu_ps(d + (size_t)(4 + c) * ldd, FAVOR__X4_EVEN(b, f));
        _mm512_storeu_ps(d + (size_t)(8 + c) * ldd, FAVOR__X4_ODD(a, e));
        _mm512_storeu_ps(d + (size_t)(12 + c) * ldd, FAVOR__X4_ODD(b, f));
    }
}
#elif FAVOR_SIMD == FAVOR_NEON
/* NEON (AArch64): 4 lanes. vmaxq/vminq would turn a NaN in either operand into
 * NaN; max/min are written as selects so every backend follows one rule. */
#include <arm_neon.h>
#define FAVOR__W 4
#define FAVOR__NREG 32
typedef float32x4_t favor__vf;
typedef uint32x4_t favor__vu;
#define favor__v_set1(x) vdupq_n_f32(x)
#define favor__v_load(p) vld1q_f32(p)
#define favor__v_store(p, x) vst1q_f32((p), (x))
#define favor__v_add(a, b) vaddq_f32((a), (b))
#define favor__v_sub(a, b) vsubq_f32((a), (b))
#define favor__v_mul(a, b) vmulq_f32((a), (b))
#define favor__v_div(a, b) vdivq_f32((a), (b))
#define favor__v_fma(a, b, c) vfmaq_f32((c), (a), (b))
#define favor__v_max FAVOR__N(favor__v_max) /* a function here (4.0) */
static inline favor__vf favor__v_max(favor__vf a, favor__vf b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
#define favor__v_min FAVOR__N(favor__v_min) /* a function here (4.0) */
static inline favor__vf favor__v_min(favor__vf a, favor__vf b) { return vbslq_f32(vcltq_f32(a, b), a, b); }
#define favor__v_asint(x) vreinterpretq_u32_f32(x)
#define favor__v_asfloat(x) vreinterpretq_f32_u32(x)
#define favor__v_iadd(a, b) vaddq_u32((a), (b))
#define favor__v_isub(a, b) vsubq_u32((a), (b))
#define favor__v_iset1(a) vdupq_n_u32(a)
#define favor__v_iand(a, b) vandq_u32((a), (b))
#define favor__v_ior(a, b) vorrq_u32((a), (b))
#define favor__v_srli(a, n) vshrq_n_u32((a), (n))
#define favor__v_slli(a, n) vshlq_n_u32((a), (n))
#define favor__v_pos_select FAVOR__N(favor__v_pos_select) /* a function here (4.0) */
static inline favor__vf favor__v_pos_select(favor__vf x, favor__vf a, favor__vf b)
{
    return vbslq_f32(vcgtq_f32(x, vdupq_n_f32(0.0f)), a, b);
}
#define favor__v_hsum FAVOR__N(favor__v_hsum) /* a function here (4.0) */
static inline float favor__v_hsum(favor__vf x) { return vaddvq_f32(x); }
#define favor__v_hmax FAVOR__N(favor__v_hmax) /* a function here (4.0) */
static inline float favor__v_hmax(favor__vf x) { return vmaxvq_f32(x); }
static inline favor__vf favor__v_sums(const favor__vf *a) /* see the AVX2 version */
{
    return vpaddq_f32(vpaddq_f32(a[0], a[1]), vpaddq_f32(a[2], a[3]));
}
/* a 4 x 4 block transpose (see the AVX2 version) */
static inline void favor__v_transpose(const float *s, size_t lds, float *d, size_t ldd)
{
    float32x4x2_t t01 = vtrnq_f32(vld1q_f32(s), vld1q_f32(s + lds));
    float32x4x2_t t23 = vtrnq_f32(vld1q_f32(s + 2 * lds), vld1q_f32(s + 3 * lds));
    vst1q_f32(d, vcombine_f32(vget_low_f32(t01.val[0]), vget_low_f32(t23.val[0])));
    vst1q_f32(d + ldd, vcombine_f32(vget_low_f32(t01.val[1]), vget_low_f32(t23.val[1])));
    vst1q_f32(d + 2 * ldd, vcombine_f32(vget_high_f32(t01.val[0]), vget_high_f32(t23.val[0])));
    vst1q_f32(d + 3 * ldd, vcombine_f32(vget_high_f32(t01.val[1]), vget_high_f32(t23.val[1])));
}
#else
#define FAVOR__W 1
#define FAVOR__NREG 32
typedef float favor__vf;
typedef favor__su favor__vu;
#define favor__v_set1 favor__s_set1
#define favor__v_load favor__s_load
#define favor__v_store favor__s_store
#define favor__v_add favor__s_add
#define favor__v_sub favor__s_sub
#define favor__v_mul favor__s_mul
#define favor__v_div favor__s_div
#define favor__v_fma favor__s_fma
#define favor__v_max favor__s_max
#define favor__v_min favor__s_min
#define favor__v_asint favor__s_asint
#define favor__v_asfloat favor__s_asfloat
#define favor__v_iadd favor__s_iadd
#define favor__v_isub favor__s_isub
#define favor__v_iset1 favor__s_iset1
#define favor__v_iand favor__s_iand
#define favor__v_ior favor__s_ior
#define favor__v_srli favor__s_srli
#define favor__v_slli favor__s_slli
#define favor__v_pos_select favor__s_pos_select
#define favor__v_hsum favor__s_hsum
#define favor__v_hmax favor__s_hmax
static inline favor__vf favor__v_sums(const favor__vf *a) { return a[0]; }
static inline void favor__v_transpose(const float *s, size_t lds, float *d, size_t ldd)
{
    (void)lds;
    (void)ldd;
    *d = *s; /* a 1 x 1 block */
}
#endif
/* favor__v_load_n / favor__v_store_n: the first n < FAVOR__W lanes at p. Where
 * the backend has no masked loads and stores (FAVOR__MASKED 0) they go through a
 * buffer, correct but no faster than the scalar tails the kernels use there. */
#ifndef FAVOR__MASKED
#define FAVOR__MASKED 0
#define favor__v_load_n FAVOR__N(favor__v_load_n) /* a function here (4.0) */
static inline favor__vf favor__v_load_n(const float *p, size_t n)
{
    float t[FAVOR__W] = {0};
    memcpy(t, p, n * sizeof *t);
    return favor__v_load(t);
}
#define favor__v_store_n FAVOR__N(favor__v_store_n) /* a function here (4.0) */
static inline void favor__v_store_n(float *p, favor__vf x, size_t n)
{
    float t[FAVOR__W];
    favor__v_store(t, x);
    memcpy(p, t, n * sizeof *t);
}
#endif

/* 4.3 exp and elu ------------------------------------------------------------
 * exp(x) = 2^n * p(r), n = round(x / ln2), r = x - n*ln2 with ln2 split in a
 * high part (few bits, so n*ln2_hi is exact) and a low part; p is the degree-7
 * minimax-style polynomial of Cephes' expf on |r| <= ln2/2. 2^n is built in the
 * exponent bits as 2^n1 * 2^n2 (n1 = floor(n/2)), so results down in the
 * subnormal range come out right with a single rounding. x is first clamped to
 * [-104, 89] (below -104 exp rounds to 0, above 88.73 it overflows to +inf).
 * NaN needs no test of its own: the clamp is written so that it keeps NaN (max
 * and min return their second operand when either is NaN, on every backend),
 * and a NaN r makes the polynomial, and so the result, NaN. Defined by a macro
 * so the scalar and vector versions are one algorithm; CLAMP is the clamp of x,
 * shorter where x is known to be <= 0 (elu). */
#define FAVOR__DEFINE_EXP(NAME, VF, VU, P, CLAMP)                                    \
    static inline VF NAME(VF x)                                                      \
    {                                                                                \
        const VF magic = P##set1(12582912.0f); /* 1.5 * 2^23 */                    \
        VF xc = CLAMP;                                                               \
        VF t = P##fma(xc, P##set1(1.44269504088896341f), magic);                    \
        VF n = P##sub(t, magic);                                                     \
        VF r = P##fma(n, P##set1(-0.693359375f), xc);                               \
        VF p, r2, y;                                                                 \
        VU ni, u, n1, n2;                                                            \
        r = P##fma(n, P##set1(2.12194440e-4f), r);                                  \
        r2 = P##mul(r, r);                                                           \
        p = P##set1(1.9875691500e-4f);                                               \
        p = P##fma(p, r, P##set1(1.3981999507e-3f));                                 \
        p = P##fma(p, r, P##set1(8.3334519073e-3f));                                 \
        p = P##fma(p, r, P##set1(4.1665795894e-2f));                                 \
        p = P##fma(p, r, P##set1(1.6666665459e-1f));                                 \
        p = P##fma(p, r, P##set1(5.0000001201e-1f));                                 \
        y = P##add(P##fma(p, r2, r), P##set1(1.0f));                                 \
        ni = P##isub(P##asint(t), P##asint(magic)); /* n as a 32-bit integer */     \
        u = P##iadd(ni, P##iset1(256u));              /* n + 256 > 0 */             \
        n1 = P##isub(P##srli(u, 1), P##iset1(128u));  /* floor(n/2) */              \
        n2 = P##isub(ni, n1);                                                        \
        y = P##mul(y, P##asfloat(P##slli(P##iadd(n1, P##iset1(127u)), 23)));        \
        return P##mul(y, P##asfloat(P##slli(P##iadd(n2, P##iset1(127u)), 23)));     \
    }

FAVOR__DEFINE_EXP(favor__s_exp, float, favor__su, favor__s_,
                  favor__s_min(89.0f, favor__s_max(-104.0f, x)))
/* exp of x <= 0 (or NaN): only the lower clamp */
FAVOR__DEFINE_EXP(favor__s_expneg, float, favor__su, favor__s_, favor__s_max(-104.0f, x))
#if FAVOR_SIMD != FAVOR_SCALAR
#define favor__v_exp FAVOR__N(favor__v_exp) /* functions here (4.0) */
#define favor__v_expneg FAVOR__N(favor__v_expneg)
FAVOR__DEFINE_EXP(favor__v_exp, favor__vf, favor__vu, favor__v_,
                  favor__v_min(favor__v_set1(89.0f), favor__v_max(favor__v_set1(-104.0f), x)))
FAVOR__DEFINE_EXP(favor__v_expneg, favor__vf, favor__vu, favor__v_,
                  favor__v_max(favor__v_set1(-104.0f), x))
#else
#define favor__v_exp favor__s_exp
#define favor__v_expneg favor__s_expneg
#endif

/* elu(x) + 1: x + 1 for x > 0, exp(x) otherwise (min(0, NaN) is NaN, so NaN
 * stays NaN). */
static inline float favor__s_elu1(float x)
{
    return favor__s_pos_select(x, favor__s_add(x, 1.0f), favor__s_expneg(favor__s_min(0.0f, x)));
}
static inline favor__vf favor__v_elu1(favor__vf x)
{
    favor__vf zero = favor__v_set1(0.0f);
    return favor__v_pos_select(x, favor__v_add(x, favor__v_set1(1.0f)),
                               favor__v_expneg(favor__v_min(zero, x)));
}

/* Array forms: y[i] = exp(x[i] + a), y[i] = elu1(x[i]), in place allowed.
 * favor__exp_add's last n % W elements take one vector of their own (the same
 * algorithm as favor__s_exp, so the same bits): a recurrent step's few pending
 * keys (fewer than FAVOR__PEND) took as many scalar exponentials. */
static void favor__exp_add(float *y, const float *x, float a, size_t n)
{
    size_t i, nv = n - n % FAVOR__W;
    favor__vf va = favor__v_set1(a);
    for (i = 0; i < nv; i += FAVOR__W)
        favor__v_store(y + i, favor__v_exp(favor__v_add(favor__v_load(x + i), va)));
    if (nv < n)
        favor__v_store_n(y + nv, favor__v_exp(favor__v_add(favor__v_load_n(x + nv, n - nv), va)),
                         n - nv);
}

static void favor__elu1_array(float *y, const float *x, size_t n)
{
    size_t i, nv = n - n % FAVOR__W;
    for (i = 0; i < nv; i += FAVOR__W) favor__v_store(y + i, favor__v_elu1(favor__v_load(x + i)));
    for (i = nv; i < n; ++i) y[i] = favor__s_elu1(x[i]);
}

/* 4.3a tanh and the logit softcap ----------------------------------------------
 * tanh(x) with a = |x| (x's sign bit cleared):
 *   a < 0.625:  a + a^3 P(a^2), P of degree 4 (an odd polynomial of degree 11),
 *               fitted for relative error on [0, 0.625] in double (weighted
 *               minimax by iteratively reweighted least squares on Chebyshev
 *               nodes in a^2), the coefficients then rounded to float:
 *               relative error 0.15 * 2^-24 with them (in exact arithmetic);
 *   otherwise:  1 - 2 / (exp(2a) + 1) with the exp above; tanh(0.625) > 0.55,
 *               so 2 / (exp(2a) + 1) < 0.45 and the subtraction loses nothing.
 *               exp(2a) = +inf for a > 44.36 gives 1 - 0 = 1 exactly, and the
 *               result rounds to 1 from a > 9.01 on, as tanh does.
 * Both are computed and one is chosen per lane; then x's sign bit is copied onto
 * the result, so tanh(-x) = -tanh(x) bit for bit, tanh(+-0) = +-0, tanh(+-inf)
 * = +-1, and NaN stays NaN (it takes the exp branch, whose exp keeps NaN).
 * Error: stated bound 2 ULP from the correctly rounded tanh. Measured over
 * every float (exhaustively, x86-64 with and without FMA): at most 1 ULP from
 * the correctly rounded tanh, 1.33 ULP from the exact value, |error| < 8e-8
 * (all three just above the switch, x = 0.6283); tests/standalone_tanh.c
 * samples every backend. The scalar and vector versions give the same bits.
 * One text for both, as the exp. */
#define FAVOR__DEFINE_TANH(NAME, VF, VU, P)                                         \
    static inline VF NAME##_poly(VF a) /* tanh(a) for 0 <= a < 0.625 */             \
    {                                                                               \
        VF a2 = P##mul(a, a), p;                                                    \
        p = P##fma(P##set1(-5.704978481e-3f), a2, P##set1(2.063907869e-2f));        \
        p = P##fma(p, a2, P##set1(-5.373971164e-2f));                               \
        p = P##fma(p, a2, P##set1(1.333144158e-1f));                                \
        p = P##fma(p, a2, P##set1(-3.333328068e-1f));                               \
        return P##fma(P##mul(a, a2), p, a);                                         \
    }                                                                               \
    static inline VF NAME(VF x)                                                     \
    {                                                                               \
        VU sign = P##iand(P##asint(x), P##iset1(0x80000000u));                      \
        VF a = P##asfloat(P##iand(P##asint(x), P##iset1(0x7fffffffu))); /* |x| */   \
        VF small = NAME##_poly(a), big, r;                                          \
        big = P##add(P##exp(P##add(a, a)), P##set1(1.0f));                          \
        big = P##sub(P##set1(1.0f), P##div(P##set1(2.0f), big));                    \
        r = P##pos_select(P##sub(P##set1(0.625f), a), small, big); /* a < 0.625 */  \
        return P##asfloat(P##ior(P##asint(r), sign));                               \
    }                                                                               \
    static inline VF NAME##_small(VF x) /* the same when every |x| < 0.625 */      \
    {                                                                               \
        VU sign = P##iand(P##asint(x), P##iset1(0x80000000u));                      \
        VF a = P##asfloat(P##iand(P##asint(x), P##iset1(0x7fffffffu)));             \
        return P##asfloat(P##ior(P##asint(NAME##_poly(a)), sign));                  \
    }

FAVOR__DEFINE_TANH(favor__s_tanh, float, favor__su, favor__s_)
#if FAVOR_SIMD != FAVOR_SCALAR
#define favor__v_tanh FAVOR__N(favor__v_tanh) /* functions here (4.0) */
#define favor__v_tanh_small FAVOR__N(favor__v_tanh_small)
FAVOR__DEFINE_TANH(favor__v_tanh, favor__vf, favor__vu, favor__v_)
#else
#define favor__v_tanh favor__s_tanh
#define favor__v_tanh_small favor__s_tanh_small
#endif

/* The logit softcap (Gemma 2): y[i] = c tanh(y[i] / c) in place, and t[i] =
 * tanh(y[i] / c) when t is not NULL (the backward's factor: the derivative is
 * 1 - t^2); t must not overlap y. c > 0 and finite. y[i] / c is computed as
 * y[i] * (1/c), 1/c rounded once: a multiply per score, not a second division,
 * at the cost of about 1 ULP in the argument. Error against c tanh(y / c) of
 * the unrounded quotient: |error| <= 2.5e-7 c (argument <= 5.3e-8 c, tanh
 * <= 1.2e-7 c at 2 ULP, the product 6e-8 c; measured 1.33e-7 c at c = 30, 50).
 * Scalar tail and vector body give the same bits. static inline: no warning
 * in a file that does not call it. */
static inline void favor__softcap(float *y, float *t, float c, size_t n)
{
    size_t i, nv = n - n % FAVOR__W;
    const float rc = 1.0f / c;
    favor__vf vrc = favor__v_set1(rc), vc = favor__v_set1(c), vm = favor__v_set1(0.0f);
    float m = 0.0f;
    int small;
    /* every |y| rc below 0.625 (scores small against c, the common case): the
     * polynomial alone, which is what the full tanh selects for those lanes */
    for (i = 0; i < nv; i += FAVOR__W) {
        favor__vf x = favor__v_load(y + i);
        vm = favor__v_max(vm, favor__v_max(x, favor__v_sub(favor__v_set1(0.0f), x)));
    }
    if (nv) m = favor__v_hmax(vm);
    for (i = nv; i < n; ++i) m = favor__s_max(m, y[i] < 0.0f ? -y[i] : y[i]);
    small = m * rc < 0.625f; /* false for NaN: the full tanh keeps it */
    for (i = 0; i < nv; i += FAVOR__W) {
        favor__vf x = favor__v_mul(favor__v_load(y + i), vrc);
        favor__vf th = small ? favor__v_tanh_small(x) : favor__v_tanh(x);
        if (t) favor__v_store(t + i, th);
        favor__v_store(y + i, favor__v_mul(vc, th));
    }
    for (i = nv; i < n; ++i) {
        float th = small ? favor__s_tanh_small(y[i] * rc) : favor__s_tanh(y[i] * rc);
        if (t) t[i] = th;
        y[i] = c * th;
    }
}

/* 4.3b 16-bit element types ----------------------------------------------------
 * IEEE binary16 (fp16) and bfloat16 (bf16, the top half of an fp32) enter the
 * kernels widened to fp32 and leave them narrowed from fp32, through one
 * load-and-widen and one narrow-and-store per type and backend. Widening is
 * exact; narrowing rounds to nearest, ties to even (fp16: overflow to +-inf,
 * results down to the subnormals, one rounding). NaN stays NaN and comes out
 * quiet with its payload's top bits, as the x86 (F16C) and AArch64 conversion
 * instructions do: fp16 -> fp32 sets bit 22 and shifts the payload up 13 bits,
 * fp32 -> fp16 keeps payload bits 21..13 under the quiet bit 9, and bf16 does
 * the same at bit 6 / bit 22. Every backend gives the same bits for the same
 * inputs: the scalar functions below are the definition (exact integer bit
 * manipulation, no floating-point environment involved), F16C and the NEON
 * conversions match them, and where a backend lacks an instruction its lanes
 * go through the scalar functions. */
static inline float favor__s_from_f16(uint16_t h)
{
    favor__su sign = (favor__su)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) /* inf, or NaN made quiet */
        return favor__s_asfloat(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
    if (e) return favor__s_asfloat(sign | ((e + 112u) << 23) | (m << 13));
    if (!m) return favor__s_asfloat(sign);
    e = 113u; /* a subnormal m * 2^-24: normalize */
    while (!(m & 0x400u)) {
        m <<= 1;
        --e;
    }
    return favor__s_asfloat(sign | (e << 23) | ((m & 0x3ffu) << 13));
}
static inline uint16_t favor__s_to_f16(float x)
{
    favor__su u = favor__s_asint(x), a = u & 0x7fffffffu, q, e, m, sh, rem, half;
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x1ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: inf */
    if (a >= 0x38800000u) { /* a normal fp16: rebias, round the 13 dropped bits */
        q = a - 0x38000000u;
        q += 0xfffu + ((q >> 13) & 1u);
        return (uint16_t)(sign | (q >> 13));
    }
    e = a >> 23; /* below 2^-14: an fp16 subnormal, round(|x| / 2^-24) */
    if (e < 102u) return sign; /* |x| < 2^-25 (fp32 subnormals included): 0 */
    m = (a & 0x7fffffu) | 0x800000u;
    sh = 126u - e; /* 14..24 */
    q = m >> sh;
    rem = m & ((1u << sh) - 1u);
    half = 1u << (sh - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q; /* may carry into 2^-14 */
    return (uint16_t)(sign | q);
}
static inline float favor__s_from_bf16(uint16_t h)
{
    favor__su u = (favor__su)h << 16;
    if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x400000u;
    return favor__s_asfloat(u);
}
static inline uint16_t favor__s_to_bf16(float x)
{
    favor__su u = favor__s_asint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* favor__v_load_f16(p) / favor__v_store_f16(p, x), and _bf16: FAVOR__W lanes
 * of 16-bit storage at p (any alignment) as one vector. favor__v_load_bf16a(p)
 * is favor__v_load_bf16 without the quieting of signaling NaNs, for operands of
 * arithmetic only: an FMA quiets them itself, so the results are the same bits
 * (NaN or not) for two fewer instructions. */
#if FAVOR_SIMD == FAVOR_AVX2
#if FAVOR__F16C
#define favor__v_load_f16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define favor__v_store_f16(p, x)                                                           \
    _mm_storeu_si128((__m128i *)(void *)(p),                                               \
                     _mm256_cvtps_ph((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#else
/* AVX2 without F16C (-mavx2 -mfma alone): the lanes go through the scalar
 * conversion; -mf16c or -march=native gives the instructions. */
#define favor__v_load_f16 FAVOR__N(favor__v_load_f16) /* a function here (4.0) */
static inline favor__vf favor__v_load_f16(const uint16_t *p)
{
    float t[8];
    int i;
    for (i = 0; i < 8; ++i) t[i] = favor__s_from_f16(p[i]);
    return _mm256_loadu_ps(t);
}
#define favor__v_store_f16 FAVOR__N(favor__v_store_f16) /* a function here (4.0) */
static inline void favor__v_store_f16(uint16_t *p, favor__vf x)
{
    float t[8];
    int i;
    _mm256_storeu_ps(t, x);
    for (i = 0; i < 8; ++i) p[i] = favor__s_to_f16(t[i]);
}
#endif
#define favor__v_load_bf16 FAVOR__N(favor__v_load_bf16) /* a function here (4.0) */
static inline favor__vf favor__v_load_bf16(const uint16_t *p)
{
    __m256i u = _mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    return _mm256_castsi256_ps(
        _mm256_or_si256(u, _mm256_and_si256(nan, _mm256_set1_epi32(0x400000))));
}
#define favor__v_load_bf16a(p)                                                             \
    _mm256_castsi256_ps(_mm256_slli_epi32(                                                 \
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p))), 16))
#define favor__v_store_bf16 FAVOR__N(favor__v_store_bf16) /* a function here (4.0) */
static inline void favor__v_store_bf16(uint16_t *p, favor__vf x)
{
    __m256i u = _mm256_castps_si256(x), hi = _mm256_srli_epi32(u, 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                             _mm256_and_si256(hi, _mm256_set1_epi32(1)))),
        16);
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08); /* 8 x u16, low half */
    _mm_storeu_si128((__m128i *)(void *)p, _mm256_castsi256_si128(r));
}
#elif FAVOR_SIMD == FAVOR_AVX512
/* 16 lanes: vcvtph2ps/vcvtps2ph (AVX-512F, the F16C instructions' 512-bit form)
 * and the AVX2 bf16 arithmetic, with mask registers for the NaN lanes and
 * vpmovdw (AVX-512F) to narrow. */
#define FAVOR__LOAD_U16(p) _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define FAVOR__IS_NAN(u)                                                                   \
    _mm512_cmpgt_epu32_mask(_mm512_and_si512((u), _mm512_set1_epi32(0x7fffffff)),          \
                            _mm512_set1_epi32(0x7f800000))
#define favor__v_load_f16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define favor__v_store_f16(p, x)                                                           \
    _mm256_storeu_si256((__m256i *)(void *)(p),                                            \
                        _mm512_cvtps_ph((x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define favor__v_load_bf16 FAVOR__N(favor__v_load_bf16) /* a function here (4.0) */
static inline favor__vf favor__v_load_bf16(const uint16_t *p)
{
    __m512i u = _mm512_slli_epi32(FAVOR__LOAD_U16(p), 16);
    return _mm512_castsi512_ps(_mm512_mask_or_epi32(u, FAVOR__IS_NAN(u), u,
                                                    _mm512_set1_epi32(0x400000)));
}
#define favor__v_load_bf16a(p) _mm512_castsi512_ps(_mm512_slli_epi32(FAVOR__LOAD_U16(p), 16))
#define favor__v_store_bf16 FAVOR__N(favor__v_store_bf16) /* a function here (4.0) */
static inline void favor__v_store_bf16(uint16_t *p, favor__vf x)
{
    __m512i u = _mm512_castps_si512(x), hi = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                             _mm512_and_si512(hi, _mm512_set1_epi32(1)))),
        16);
    r = _mm512_mask_or_epi32(r, FAVOR__IS_NAN(u), hi, _mm512_set1_epi32(0x40));
    _mm256_storeu_si256((__m256i *)(void *)p, _mm512_cvtepi32_epi16(r));
}
#elif FAVOR_SIMD == FAVOR_NEON
#define favor__v_load_f16(p) vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)))
#define favor__v_store_f16(p, x) vst1_u16((p), vreinterpret_u16_f16(vcvt_f16_f32(x)))
#define favor__v_load_bf16 FAVOR__N(favor__v_load_bf16) /* a function here (4.0) */
static inline favor__vf favor__v_load_bf16(const uint16_t *p)
{
    uint32x4_t u = vshll_n_u16(vld1_u16(p), 16);
    uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffffu)), vdupq_n_u32(0x7f800000u));
    return vreinterpretq_f32_u32(vorrq_u32(u, vandq_u32(nan, vdupq_n_u32(0x400000u))));
}
#define favor__v_load_bf16a(p) vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16))
#define favor__v_store_bf16 FAVOR__N(favor__v_store_bf16) /* a function here (4.0) */
static inline void favor__v_store_bf16(uint16_t *p, favor__vf x)
{
    uint32x4_t u = vreinterpretq_u32_f32(x), hi = vshrq_n_u32(u, 16);
    uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffffu)), vdupq_n_u32(0x7f800000u));
    uint32x4_t r = vshrq_n_u32(
        vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7fffu), vandq_u32(hi, vdupq_n_u32(1u)))), 16);
    r = vbslq_u32(nan, vorrq_u32(hi, vdupq_n_u32(0x40u)), r);
    vst1_u16(p, vmovn_u32(r));
}
#else
#define favor__v_load_f16(p) favor__s_from_f16(*(p))
#define favor__v_store_f16(p, x) (*(p) = favor__s_to_f16(x))
#define favor__v_load_bf16(p) favor__s_from_bf16(*(p))
#define favor__v_load_bf16a(p) favor__s_from_bf16(*(p))
#define favor__v_store_bf16(p, x) (*(p) = favor__s_to_bf16(x))
#endif

#ifndef FAVOR__ROW_LOADS /* (AVX-512's is above) */
#define favor__v_load_row(p, c, nv) favor__v_load((p) + (c) * FAVOR__W)
#endif

/* Array forms: favor__widen_T(y, x, n) sets y[i] = widen(x[i]) and
 * favor__narrow_T(y, x, n) sets y[i] = narrow(x[i]), for i < n; one definition
 * for both types. */
#define FAVOR__DEFINE_CONVERT(T)                                                     \
    static inline void favor__widen_##T(float *y, const uint16_t *x, size_t n)       \
    {                                                                                \
        size_t i, nv = n - n % FAVOR__W;                                             \
        for (i = 0; i < nv; i += FAVOR__W) favor__v_store(y + i, favor__v_load_##T(x + i)); \
        for (i = nv; i < n; ++i) y[i] = favor__s_from_##T(x[i]);                     \
    }                                                                                \
    static inline void favor__narrow_##T(uint16_t *y, const float *x, size_t n)      \
    {                                                                                \
        size_t i, nv = n - n % FAVOR__W;                                             \
        for (i = 0; i < nv; i += FAVOR__W) favor__v_store_##T(y + i, favor__v_load(x + i)); \
        for (i = nv; i < n; ++i) y[i] = favor__s_to_##T(x[i]);                       \
    }
FAVOR__DEFINE_CONVERT(f16)
FAVOR__DEFINE_CONVERT(bf16)

/* 4.4 Small vector kernels --------------------------------------------------- */
/* A few kernels read their second operand in any element type: they are
 * defined once by a macro, for each type (T the name's suffix, none for fp32; E
 * the element; LOAD and SLOAD a vector and a scalar of it as fp32). A kernel
 * widens as it loads and adds in the same order for every type, so a 16-bit
 * operand gives the bits its fp32 copy would. */
#define favor__s_from_f32(x) (x)
#define favor__v_load_f32(p) favor__v_load(p)
#define FAVOR__DEFINE_DOT(T, E, LOAD, SLOAD)                                                    \
    static float favor__dot##T(const float *a, const E *b, size_t n)                           \
    {                                                                                           \
        size_t i = 0;                                                                           \
        float s;                                                                                \
        favor__vf s0 = favor__v_set1(0.0f), s1 = s0, s2 = s0, s3 = s0;                          \
        for (; i + 4 * FAVOR__W <= n; i += 4 * FAVOR__W) {                                      \
            s0 = favor__v_fma(favor__v_load(a + i), LOAD(b + i), s0);                           \
            s1 = favor__v_fma(favor__v_load(a + i + FAVOR__W), LOAD(b + i + FAVOR__W), s1);     \
            s2 = favor__v_fma(favor__v_load(a + i + 2 * FAVOR__W), LOAD(b + i + 2 * FAVOR__W),  \
                              s2);                                                              \
            s3 = favor__v_fma(favor__v_load(a + i + 3 * FAVOR__W), LOAD(b + i + 3 * FAVOR__W),  \
                              s3);                                                              \
        }                                                                                       \
        for (; i + FAVOR__W <= n; i += FAVOR__W)                                                \
            s0 = favor__v_fma(favor__v_load(a + i), LOAD(b + i), s0);                           \
        s = favor__v_hsum(favor__v_add(favor__v_add(s0, s1), favor__v_add(s2, s3)));           \
        for (; i < n; ++i) s += a[i] * SLOAD(b[i]);                                             \
        return s;                                                                               \
    }
FAVOR__DEFINE_DOT(, float, favor__v_load, favor__s_from_f32)
FAVOR__DEFINE_DOT(_f16, uint16_t, favor__v_load_f16, favor__s_from_f16)
FAVOR__DEFINE_DOT(_bf16, uint16_t, favor__v_load_bf16a, favor__s_from_bf16)

static float favor__sum(const float *a, size_t n)
{
    size_t i = 0;
    float s;
    favor__vf s0 = favor__v_set1(0.0f), s1 = s0;
    for (; i + 2 * FAVOR__W <= n; i += 2 * FAVOR__W) {
        s0 = favor__v_add(s0, favor__v_load(a + i));
        s1 = favor__v_add(s1, favor__v_load(a + i + FAVOR__W));
    }
    for (; i + FAVOR__W <= n; i += FAVOR__W) s0 = favor__v_add(s0, favor__v_load(a + i));
    s = favor__v_hsum(favor__v_add(s0, s1));
    for (; i < n; ++i) s += a[i];
    return s;
}

/* Maximum of a[0..n), n >= 1; NaN elements are ignored unless all are NaN. */
static float favor__maxval(const float *a, size_t n)
{
    size_t i = 0;
    float m = -INFINITY;
    if (n >= FAVOR__W) {
        favor__vf vm = favor__v_set1(-INFINITY);
        for (; i + FAVOR__W <= n; i += FAVOR__W) vm = favor__v_max(favor__v_load(a + i), vm);
        m = favor__v_hmax(vm);
    }
    for (; i < n; ++i) m = favor__s_max(a[i], m);
    return m;
}

/* y /= a (not y *= 1/a: 1/a overflows for subnormal a) */
static void favor__divs(float *y, float a, size_t n)
{
    size_t i, nv = n - n % FAVOR__W;
    favor__vf va = favor__v_set1(a);
    for (i = 0; i < nv; i += FAVOR__W) favor__v_store(y + i, favor__v_div(favor__v_load(y + i), va));
    for (i = nv; i < n; ++i) y[i] /= a;
}

/* y += x elementwise */
static void favor__vadd(float *y, const float *x, size_t n)
{
    size_t i, nv = n - n % FAVOR__W;
    for (i = 0; i < nv; i += FAVOR__W)
        favor__v_store(y + i, favor__v_add(favor__v_load(y + i), favor__v_load(x + i)));
    for (i = nv; i < n; ++i) y[i] += x[i];
}

/* y *= x elementwise */
static void favor__vmul(float *y, const float *x, size_t n)
{
    size_t i, nv = n - n % FAVOR__W;
    for (i = 0; i < nv; i += FAVOR__W)
        favor__v_store(y + i, favor__v_mul(favor__v_load(y + i), favor__v_load(x + i)));
    for (i = nv; i < n; ++i) y[i] *= x[i];
}

/* y = exp(min(y - c, 0)) elementwise: c is at least y, being its running
 * maximum (the forward) or its row's log-sum-exp (the backward, whose recomputed
 * scores may round above the forward's lse when they come from the decode path's
 * other order: by 1e6 when the scores are 1e13, and exp would give +inf). NaN
 * stays NaN. A probability below 2^-100 (y - c < -100 ln 2) is 0: next to the
 * row's largest, 1 (or 1/n_k and more, from the lse), it is 2^-76 below fp32's
 * rounding, and kept it would make subnormal products (2^-126 and below) in the
 * backward's dS = P (dP - D) s and the products that read them, each of which
 * costs an Intel core a microcode assist (Xeon, Cascade Lake, n = 4096, d = 64,
 * causal: an ALiBi backward, whose far keys land there, took 2.7-3.1 s, 0.74-0.96
 * s with the core's flush-to-zero mode set, 1.3-1.7 s with only the subnormal P
 * made 0, and 0.74-1.08 s with this floor). Every backend flushes alike. */
#define FAVOR__LN_P_MIN (-69.31471806f) /* ln 2^-100 */
static inline favor__vf favor__v_exp_sub(favor__vf y, favor__vf c)
{
    const favor__vf zero = favor__v_set1(0.0f), lo = favor__v_set1(FAVOR__LN_P_MIN);
    favor__vf x = favor__v_min(zero, favor__v_sub(y, c));
    /* lo - x > 0: below the floor (-inf too); NaN keeps exp's NaN */
    return favor__v_pos_select(favor__v_sub(lo, x), zero, favor__v_expneg(favor__v_max(lo, x)));
}
static inline float favor__s_exp_sub(float y, float c)
{
    float x = favor__s_min(0.0f, y - c);
    return favor__s_pos_select(FAVOR__LN_P_MIN - x, 0.0f,
                               favor__s_expneg(favor__s_max(FAVOR__LN_P_MIN, x)));
}
static void favor__exp_sub(float *y, const float *c, size_t n)
{
    size_t i, nv = n - n % FAVOR__W;
    for (i = 0; i < nv; i += FAVOR__W)
        favor__v_store(y + i, favor__v_exp_sub(favor__v_load(y + i), favor__v_load(c + i)));
    for (i = nv; i < n; ++i) y[i] = favor__s_exp_sub(y[i], c[i]);
}

/* The columns c < n of an nb x n block A (rows lda apart, nb >= 1) reduced down
 * their rows, each column's chain kept in registers: mx[c] = the maximum (a NaN
 * ignored unless in the first row), and in favor__cols_exp_sum each element
 * becomes favor__exp_sub's exp(min(a - c_[c], 0)), sum[c] their sum, the rows
 * in order. The prefill's statistics of a tile (favor__softmax_stats) took a
 * row at a time into a row of results, max and add through a store and a load
 * per row, and exp in a pass of its own: here the same bits, the prefill
 * 0.95-0.99x the time (Xeon model 167, 8 heads, n = 1024 and 4096, d = 64 and
 * 128, causal or not, one and two threads). */
static void favor__cols_max(const float *A, size_t lda, size_t nb, size_t n, float *mx)
{
    size_t c, j, nv = n - n % FAVOR__W;
    for (c = 0; c < nv; c += FAVOR__W) {
        favor__vf m0 = favor__v_load(A + c), m1 = m0;
        for (j = 1; j + 1 < nb; j += 2) {
            m0 = favor__v_max(favor__v_load(A + j * lda + c), m0);
            m1 = favor__v_max(favor__v_load(A + (j + 1) * lda + c), m1);
        }
        if (j < nb) m0 = favor__v_max(favor__v_load(A + j * lda + c), m0);
        favor__v_store(mx + c, favor__v_max(m1, m0));
    }
    for (; c < n; ++c)
        for (mx[c] = A[c], j = 1; j < nb; ++j) mx[c] = favor__s_max(A[j * lda + c], mx[c]);
}
static void favor__cols_exp_sum(float *A, size_t lda, size_t nb, size_t n, const float *c_,
                                float *sum)
{
    size_t c, j, nv = n - n % FAVOR__W;
    for (c = 0; c < nv; c += FAVOR__W) {
        const favor__vf cv = favor__v_load(c_ + c);
        favor__vf s = favor__v_set1(0.0f);
        for (j = 0; j < nb; ++j) {
            favor__vf e = favor__v_exp_sub(favor__v_load(A + j * lda + c), cv);
            favor__v_store(A + j * lda + c, e);
            s = favor__v_add(s, e);
        }
        favor__v_store(sum + c, s);
    }
    for (; c < n; ++c)
        for (sum[c] = 0.0f, j = 0; j < nb; ++j) {
            A[j * lda + c] = favor__s_exp_sub(A[j * lda + c], c_[c]);
            sum[c] += A[j * lda + c];
        }
}

/* y[t] += a |b + c t| for t < n <= FAVOR__RAMP (ALiBi's distance term: b, c
 * whole numbers, exact below 2^24) */
#define FAVOR__RAMP 64
static void favor__alibi(float *y, float a, float b, float c, size_t n)
{
    static const float ramp[FAVOR__RAMP] = {
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
        22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42,
        43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63 };
    size_t i, nv = n - n % FAVOR__W;
    favor__vf va = favor__v_set1(a), vb = favor__v_set1(b), vc = favor__v_set1(c);
    favor__vf zero = favor__v_set1(0.0f);
    for (i = 0; i < nv; i += FAVOR__W) {
        favor__vf x = favor__v_fma(vc, favor__v_load(ramp + i), vb);
        x = favor__v_max(x, favor__v_sub(zero, x));
        favor__v_store(y + i, favor__v_fma(va, x, favor__v_load(y + i)));
    }
    for (i = nv; i < n; ++i) {
        float x = favor__s_fma(c, ramp[i], b);
        y[i] = favor__s_fma(a, x < 0.0f ? -x : x, y[i]);
    }
}

/* y *= 1 - t^2 (the derivative of c tanh(x / c) at t = tanh(x / c)) */
static void favor__dtanh(float *y, const float *t, size_t n)
{
    size_t i, nv = n - n % FAVOR__W;
    favor__vf one = favor__v_set1(1.0f), zero = favor__v_set1(0.0f);
    for (i = 0; i < nv; i += FAVOR__W) {
        favor__vf vt = favor__v_load(t + i);
        favor__vf g = favor__v_fma(favor__v_sub(zero, vt), vt, one);
        favor__v_store(y + i, favor__v_mul(favor__v_load(y + i), g));
    }
    for (i = nv; i < n; ++i) y[i] *= favor__s_fma(-t[i], t[i], 1.0f);
}

/* y *= a */
static void favor__scal(float *y, float a, size_t n)
{
    size_t i, nv = n - n % FAVOR__W;
    favor__vf va = favor__v_set1(a);
    for (i = 0; i < nv; i += FAVOR__W) favor__v_store(y + i, favor__v_mul(favor__v_load(y + i), va));
    for (i = nv; i < n; ++i) y[i] *= a;
}

/* y = a x (y and x not overlapping): a copy and a scaling in one pass, with
 * no call per row (IDENTITY's map of short rows) */
static void favor__scal_to(float *y, float a, const float *x, size_t n)
{
    size_t i, nv = n - n % FAVOR__W;
    favor__vf va = favor__v_set1(a);
    for (i = 0; i < nv; i += FAVOR__W) favor__v_store(y + i, favor__v_mul(favor__v_load(x + i), va));
    for (i = nv; i < n; ++i) y[i] = a * x[i];
}

/* y += a x */
static void favor__axpy(float *y, float a, const float *x, size_t n)
{
    size_t i, nv = n - n % FAVOR__W;
    favor__vf va = favor__v_set1(a);
    for (i = 0; i < nv; i += FAVOR__W)
        favor__v_store(y + i, favor__v_fma(va, favor__v_load(x + i), favor__v_load(y + i)));
    for (i = nv; i < n; ++i) y[i] = favor__s_fma(a, x[i], y[i]);
}

/* y = x a - b (a product, then a difference: two roundings), in place allowed */
static void favor__mul_sub(float *y, const float *x, float a, float b, size_t n)
{
    size_t i, nv = n - n % FAVOR__W;
    favor__vf va = favor__v_set1(a), vb = favor__v_set1(b);
    for (i = 0; i < nv; i += FAVOR__W)
        favor__v_store(y + i, favor__v_sub(favor__v_mul(favor__v_load(x + i), va), vb));
    for (i = nv; i < n; ++i) y[i] = x[i] * a - b;
}

/* y = p (y - D) s: the softmax backward's dS from dP and P, per lane */
static void favor__dsoftmax(float *y, const float *p, const float *D, float s, size_t n)
{
    size_t i, nv = n - n % FAVOR__W;
    favor__vf vs = favor__v_set1(s);
    for (i = 0; i < nv; i += FAVOR__W) {
        favor__vf t = favor__v_sub(favor__v_load(y + i), favor__v_load(D + i));
        favor__v_store(y + i, favor__v_mul(favor__v_mul(t, favor__v_load(p + i)), vs));
    }
    for (i = nv; i < n; ++i) y[i] = (y[i] - D[i]) * p[i] * s;
}

/* dx = dphi * (x > 0 ? 1 : phi): the derivative of elu(x) + 1 */
static void favor__elu1_grad(float *dx, const float *x, const float *phi, const float *dphi,
                             size_t n)
{
    size_t i, nv = n - n % FAVOR__W;
    for (i = 0; i < nv; i += FAVOR__W) {
        favor__vf g = favor__v_load(dphi + i);
        favor__v_store(dx + i, favor__v_pos_select(favor__v_load(x + i), g,
                                                   favor__v_mul(g, favor__v_load(phi + i))));
    }
    for (i = nv; i < n; ++i) dx[i] = x[i] > 0.0f ? dphi[i] : dphi[i] * phi[i];
}

/* C[M x N] = (acc ? C : 0) + A[M x K] B[K x N]; row-major with leading dimensions.
 * The micro-kernel keeps a tile of up to FAVOR__MR rows x 2 vectors in registers. */
#if FAVOR_SIMD == FAVOR_AVX512
#define FAVOR__MR 12
#else
#define FAVOR__MR 6
#endif
#define FAVOR__NV1 8
/* The register tile: up to FAVOR__MR rows x 2 vectors of accumulators (AVX2:
 * 6 rows, 12 of its 16 registers, with two for B and one for the broadcast A;
 * AVX-512: 12 rows, 24 of its 32); per k two loads, mr broadcasts and 2*mr FMAs.
 * One or two rows (a decode step, a tail) take 1 x FAVOR__NV1 or
 * 2 x FAVOR__NV1/2 vectors instead (one row of fewer columns: 1 x FAVOR__NV1/2):
 * 8 (4) independent FMA chains rather than 2 or 4 that would wait on the FMA
 * latency. Every shape adds each C element's terms in the same order, so the
 * shape never changes a result. Written once with loops over constant bounds:
 * each call site below passes constants, so the compiler unrolls it and keeps
 * the accumulators in registers (FAVOR__INLINE, FAVOR__UNROLL: section 4.2). */

/* vector v of nv whose last one has nt lanes (nt = FAVOR__W: whole) */
#define FAVOR__TILE_LOAD(p, v) \
    ((v) + 1 < nv || nt == FAVOR__W ? favor__v_load(p) : favor__v_load_n((p), nt))
FAVOR__INLINE void favor__tile(const size_t mr, const size_t nv, const size_t nt, size_t K,
                               const float *A, size_t lda, size_t csa, const float *B,
                               size_t ldb, float *C, size_t ldc, int acc)
{
    favor__vf c[FAVOR__MR][FAVOR__NV1], b[FAVOR__NV1];
    size_t r, v, k;
    FAVOR__UNROLL for (r = 0; r < mr; ++r)
        FAVOR__UNROLL for (v = 0; v < nv; ++v)
            c[r][v] = acc ? FAVOR__TILE_LOAD(C + r * ldc + v * FAVOR__W, v) : favor__v_set1(0.0f);
    for (k = 0; k < K; ++k) {
        const float *Ak = A + k * csa;
        FAVOR__UNROLL for (v = 0; v < nv; ++v) b[v] = FAVOR__TILE_LOAD(B + k * ldb + v * FAVOR__W, v);
        /* row r's A element by a pointer stepped lda at a time: indexed as
         * Ak[r * lda], gcc kept the twelve offsets r * lda of an AVX-512 tile
         * in spilled and mask registers, reloaded every k (Xeon model 167,
         * the same bits: prefill 0.95-0.99x the time, fp32 and 16-bit, d =
         * 64 and 128, causal or not, the AVX2 build too; its backward
         * 0.97-0.99x; decode rows scored key-major 0.96-0.98x). It never
         * steps past the tile's last row: past the end of A, that pointer
         * could be more than one element beyond its array. */
        const float *Ar = Ak;
        FAVOR__UNROLL for (r = 0; r < mr; ++r) {
            favor__vf a = favor__v_set1(*Ar);
            FAVOR__UNROLL for (v = 0; v < nv; ++v) c[r][v] = favor__v_fma(a, b[v], c[r][v]);
            if (r + 1 < mr) Ar += lda;
        }
    }
    FAVOR__UNROLL for (r = 0; r < mr; ++r)
        FAVOR__UNROLL for (v = 0; v < nv; ++v) {
            if (v + 1 < nv || nt == FAVOR__W) favor__v_store(C + r * ldc + v * FAVOR__W, c[r][v]);
            else favor__v_store_n(C + r * ldc + v * FAVOR__W, c[r][v], nt);
        }
}
#undef FAVOR__TILE_LOAD

/* nv vectors of columns; with nv = 1, nt < FAVOR__W makes it the nt columns left
 * over from the vector width, one masked vector (FAVOR__MASKED backends only) */
static void favor__gemm_tile(size_t mr, size_t nv, size_t nt, size_t K, const float *A,
                             size_t lda, size_t csa, const float *B, size_t ldb, float *C,
                             size_t ldc, int acc)
{
    const size_t W = FAVOR__W;
    FAVOR_ASSERT(mr >= 1 && mr <= FAVOR__MR && nv >= 1 &&
                 (nv <= 2 || nv * mr == FAVOR__NV1 || (mr == 1 && nv == FAVOR__NV1 / 2)) &&
                 (nt == W || (nv == 1 && FAVOR__MASKED)));
#define FAVOR__TILE_CASE(n)                                                             \
    case n:                                                                             \
        if (nv == 2) favor__tile(n, 2, W, K, A, lda, csa, B, ldb, C, ldc, acc);         \
        else if (FAVOR__MASKED && nt < W)                                               \
            favor__tile(n, 1, nt, K, A, lda, csa, B, ldb, C, ldc, acc);                 \
        else favor__tile(n, 1, W, K, A, lda, csa, B, ldb, C, ldc, acc);                 \
        break
    if (mr == 1 && nv == FAVOR__NV1) {
        favor__tile(1, FAVOR__NV1, W, K, A, lda, csa, B, ldb, C, ldc, acc);
        return;
    }
    if (mr <= 2 && nv == FAVOR__NV1 / 2) {
        if (mr == 2) favor__tile(2, FAVOR__NV1 / 2, W, K, A, lda, csa, B, ldb, C, ldc, acc);
        else favor__tile(1, FAVOR__NV1 / 2, W, K, A, lda, csa, B, ldb, C, ldc, acc);
        return;
    }
    switch (mr) {
#if FAVOR__MR > 6
        FAVOR__TILE_CASE(12);
        FAVOR__TILE_CASE(11);
        FAVOR__TILE_CASE(10);
        FAVOR__TILE_CASE(9);
        FAVOR__TILE_CASE(8);
        FAVOR__TILE_CASE(7);
#endif
        FAVOR__TILE_CASE(6);
        FAVOR__TILE_CASE(5);
        FAVOR__TILE_CASE(4);
        FAVOR__TILE_CASE(3);
        FAVOR__TILE_CASE(2);
        default: FAVOR__TILE_CASE(1);
    }
#undef FAVOR__TILE_CASE
}

/* C[M x N] = (acc ? C : 0) + A B: A is M x K with element (r, k) at
 * A[r*lda + k*csa] (csa = 1: row-major; lda = 1: A stored transposed), B is K x N
 * and C is M x N, both row-major with leading dimensions ldb, ldc. */
static void favor__gemm(size_t M, size_t N, size_t K, const float *A, size_t lda, size_t csa,
                        const float *B, size_t ldb, float *C, size_t ldc, int acc)
{
    size_t i, j, k, r;
    for (i = 0; i < M; i += FAVOR__MR) {
        size_t mr = M - i < FAVOR__MR ? M - i : FAVOR__MR;
        const float *Ai = A + i * lda;
        float *Ci = C + i * ldc;
        j = 0;
        if (mr <= 2) { /* one or two rows: wider tiles, or too few chains hide the latency */
            size_t nw = FAVOR__NV1 / mr;
            for (; j + nw * FAVOR__W <= N; j += nw * FAVOR__W)
                favor__gemm_tile(mr, nw, FAVOR__W, K, Ai, lda, csa, B + j, ldb, Ci + j, ldc, acc);
            if (mr == 1 && j + nw / 2 * FAVOR__W <= N) {
                favor__gemm_tile(1, nw / 2, FAVOR__W, K, Ai, lda, csa, B + j, ldb, Ci + j, ldc,
                                 acc);
                j += nw / 2 * FAVOR__W;
            }
        }
        for (; j + 2 * FAVOR__W <= N; j += 2 * FAVOR__W)
            favor__gemm_tile(mr, 2, FAVOR__W, K, Ai, lda, csa, B + j, ldb, Ci + j, ldc, acc);
        for (; j + FAVOR__W <= N; j += FAVOR__W)
            favor__gemm_tile(mr, 1, FAVOR__W, K, Ai, lda, csa, B + j, ldb, Ci + j, ldc, acc);
        if (FAVOR__MASKED && j < N) { /* the columns left over, one masked vector */
            favor__gemm_tile(mr, 1, N - j, K, Ai, lda, csa, B + j, ldb, Ci + j, ldc, acc);
            j = N;
        }
        for (; j < N; ++j) /* columns left over from the vector width (same FMAs) */
            for (r = 0; r < mr; ++r) {
                float t = acc ? Ci[r * ldc + j] : 0.0f;
                for (k = 0; k < K; ++k) t = favor__s_fma(Ai[r * lda + k * csa], B[k * ldb + j], t);
                Ci[r * ldc + j] = t;
            }
    }
}

/* Staircase products, the causal mask inside a tile or chunk: C (M x N) += A B
 * (A as in favor__gemm) where row i of C takes only the terms j < hi(i)
 * (lower) or j >= lo(i) (upper), the bound being clamp(base + i, 0, K). Each
 * block of MR rows multiplies the terms all its rows take in register tiles and
 * the rest row by row (a one-row product over that row's own terms, its C row
 * held in registers: the same FMAs in the same order as term-by-term axpys, which
 * reloaded and stored C once per term), so a row never multiplies a term it does
 * not take: a NaN or inf there (a later token's) cannot reach it through a zero
 * weight. */
static size_t favor__stair(ptrdiff_t base, size_t i, size_t K)
{
    ptrdiff_t b = base + (ptrdiff_t)i;
    return b <= 0 ? 0 : (size_t)b >= K ? K : (size_t)b;
}

static void favor__gemm_stair(size_t M, size_t N, size_t K, int upper, ptrdiff_t base,
                              const float *A, size_t lda, size_t csa, const float *B,
                              size_t ldb, float *C, size_t ldc)
{
    size_t i0, i;
    for (i0 = 0; i0 < M; i0 += FAVOR__MR) {
        size_t mr = M - i0 < FAVOR__MR ? M - i0 : FAVOR__MR;
        /* the terms every row of the block takes: [0, common) or [common, K) */
        size_t common = favor__stair(base, upper ? i0 + mr - 1 : i0, K);
        if (upper && common < K)
            favor__gemm(mr, N, K - common, A + i0 * lda + common * csa, lda, csa,
                        B + common * ldb, ldb, C + i0 * ldc, ldc, 1);
        else if (!upper && common)
            favor__gemm(mr, N, common, A + i0 * lda, lda, csa, B, ldb, C + i0 * ldc, ldc, 1);
        for (i = i0; i < i0 + mr; ++i) {
            size_t lo = upper ? favor__stair(base, i, K) : common;
            size_t hi = upper ? common : favor__stair(base, i, K);
            if (hi > lo) /* one row: its C stays in registers over the terms */
                favor__gemm(1, N, hi - lo, A + i * lda + lo * csa, lda, csa, B + lo * ldb, ldb,
                            C + i * ldc, ldc, 1);
        }
    }
}

/* The causal products inside a chunk, where row i needs columns (or terms)
 * j <= i only, by row blocks of MR:
 * favor__gemm_lower: C (M x M) = A B (A row-major, M x K), each row block computed
 * up to its last column rounded up to whole vectors, and every C_ij with j > i
 * set to 0. favor__gemm_tri: C (M x N) += L B with L = A (M x M) lower triangular,
 * or (upper) L = A upper triangular, e.g. the transpose of a lower one read with
 * lda = 1: a staircase whose steps are the diagonal. */
static void favor__gemm_lower(size_t M, size_t K, const float *A, size_t lda, const float *B,
                              size_t ldb, float *C, size_t ldc)
{
    size_t i0, i, j;
    for (i0 = 0; i0 < M; i0 += FAVOR__MR) {
        size_t mr = M - i0 < FAVOR__MR ? M - i0 : FAVOR__MR;
        size_t ncol = (i0 + mr + FAVOR__W - 1) / FAVOR__W * FAVOR__W;
        favor__gemm(mr, ncol < M ? ncol : M, K, A + i0 * lda, lda, 1, B, ldb, C + i0 * ldc, ldc,
                    0);
        for (i = i0; i < i0 + mr; ++i)
            for (j = i + 1; j < M; ++j) C[i * ldc + j] = 0.0f;
    }
}

static void favor__gemm_tri(size_t M, size_t N, int upper, const float *A, size_t lda,
                            size_t csa, const float *B, size_t ldb, float *C, size_t ldc)
{
    favor__gemm_stair(M, N, M, upper, upper ? 0 : 1, A, lda, csa, B, ldb, C, ldc);
}

/* Ask for `rows` rows of `bytes` bytes (stride ld bytes) to be brought into
 * cache: the next chunk's inputs, fetched while this chunk computes. A hint.
 * far: for data read a while later, into the L2 cache rather than L1 (the
 * prefetcht1 hint on x86). A row that does not start on a 64-byte line (as
 * malloc's 16-byte alignment leaves it) spans one line more than its bytes
 * make: its last byte is asked for too (a dense mask at n = 8192, its rows 16
 * bytes off the line, Zen 3: 1.13x the unmasked call without it, 1.11x with
 * it, in one run of a driver). */
static void favor__prefetch(const void *p, size_t rows, size_t ld, size_t bytes, int far)
{
#if defined(__GNUC__) || defined(__clang__)
    size_t r, c;
    for (r = 0; r < rows && bytes; ++r) {
        const char *a = (const char *)p + r * ld;
        size_t span = (size_t)((uintptr_t)a & 63) + bytes; /* from a's line on */
        for (c = 0; c < span; c += 64) {
            const char *x = a + (c < bytes ? c : bytes - 1);
            if (far) __builtin_prefetch(x, 0, 2); /* statements: clang 14 -O0 crashes on */
            else __builtin_prefetch(x, 0, 3);     /* the two in a ?: expression */
        }
    }
#else
    (void)far;
    (void)p;
    (void)rows;
    (void)ld;
    (void)bytes;
#endif
}

/* the lines of one row of `bytes` bytes from p (favor__prefetch's, without its
 * last line when p is not on a line: the next row's first line is that line
 * when rows are contiguous) */
FAVOR__INLINE void favor__prefetch_row(const void *p, size_t bytes)
{
#if defined(__GNUC__) || defined(__clang__)
    size_t c;
    for (c = 0; c < bytes; c += 64) __builtin_prefetch((const char *)p + c, 0, 3);
#else
    (void)p;
    (void)bytes;
#endif
}

/* Rows to prefetch while a kernel computes (the next tile of a stream): `rows`
 * rows of a (a_bytes each, stride lda bytes) and of b (b_bytes, ldb). */
typedef struct {
    const void *a, *b;
    size_t lda, ldb, a_bytes, b_bytes, rows;
} favor__ahead;

/* rows [a0, a1) of both streams of `ahead` (favor__prefetch; far: into L2) */
FAVOR__INLINE void favor__ahead_rows(const favor__ahead *ahead, size_t a0, size_t a1, int far)
{
    favor__prefetch((const char *)ahead->a + a0 * ahead->lda, a1 - a0, ahead->lda,
                    ahead->a_bytes, far);
    favor__prefetch((const char *)ahead->b + a0 * ahead->ldb, a1 - a0, ahead->ldb,
                    ahead->b_bytes, far);
}

/* C[c] += p V[c] for c < dv: one key's term of a row of P V, V of type t (an
 * element's terms go in key order, one FMA each, as favor__gemm adds them) */
#define FAVOR__DEFINE_PV_KEY(T, E, LOAD, SLOAD)                                                  \
    FAVOR__INLINE void favor__pv_key##T(float *C, float p, const E *V, size_t dv)                \
    {                                                                                            \
        const favor__vf pv = favor__v_set1(p);                                                   \
        size_t c = 0;                                                                            \
        for (; c + FAVOR__W <= dv; c += FAVOR__W)                                                \
            favor__v_store(C + c, favor__v_fma(pv, LOAD(V + c), favor__v_load(C + c)));         \
        for (; c < dv; ++c) C[c] = favor__s_fma(p, SLOAD(V[c]), C[c]);                           \
    }
FAVOR__DEFINE_PV_KEY(, float, favor__v_load, favor__s_from_f32)
FAVOR__DEFINE_PV_KEY(_f16, uint16_t, favor__v_load_f16, favor__s_from_f16)
FAVOR__DEFINE_PV_KEY(_bf16, uint16_t, favor__v_load_bf16a, favor__s_from_bf16)

/* A row of P V to add beside the scores of favor__dots: C[c] += sum_j p[j] V_j[c]
 * over keys j < n (V_j = V + j ldv, of type t), c < dv. */
typedef struct {
    float *C;
    const float *p;
    const void *V;
    size_t n, ldv, dv;
    favor_dtype t;
} favor__pvrow;

/* C += P V over keys [ka, kb) of a tile whose probabilities are S and values V
 * (V: key ka's row, of type t) */
static void favor__pvrow_make(favor__pvrow *pv, float *C, const float *S, size_t ka, size_t kb,
                              const void *V, size_t ldv, size_t dv, favor_dtype t)
{
    pv->C = C;
    pv->p = S + ka;
    pv->V = V;
    pv->n = kb - ka;
    pv->ldv = ldv;
    pv->dv = dv;
    pv->t = t;
}

FAVOR__INLINE void favor__pv_key_as(const favor__pvrow *pv, size_t j)
{
    if (pv->t == FAVOR_F16)
        favor__pv_key_f16(pv->C, pv->p[j], (const uint16_t *)pv->V + j * pv->ldv, pv->dv);
    else if (pv->t == FAVOR_BF16)
        favor__pv_key_bf16(pv->C, pv->p[j], (const uint16_t *)pv->V + j * pv->ldv, pv->dv);
    else favor__pv_key(pv->C, pv->p[j], (const float *)pv->V + j * pv->ldv, pv->dv);
}

/* favor__pv_key_as out of line, for favor__dots' W keys unrolled: inlined there,
 * its three types' loops made each of the three favor__dots 15 KB of AVX-512 code
 * and took a sixth of the library's compile (gcc -O2: 6.4-6.5 s against 5.2-5.4 s;
 * the library 30 KB smaller without), and the call costs nothing seen: direct rows of
 * d = 80, 96 and 256, fp32, fp16 and bf16, 4K-64K keys, 0.999-1.015x the time, the
 * same bits (Xeon model 167). Taking the keys' values after their scores instead
 * (K rows of a group, then its V rows) took 1.04-1.17x. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline))
#endif
static void favor__pv_key_call(const favor__pvrow *pv, size_t j) { favor__pv_key_as(pv, j); }

/* S[j] = q . K_j for nb rows K_j = K + j*ldk of d elements: the scores of one
 * query row against a tile of keys (and a projection W x, one row of W per
 * output). W keys at a time, each with its own accumulator along d, reduced
 * together by favor__v_sums: every key row is read once per call, and the FMA
 * chains are independent. Narrow backends (W < 4) take per-key dot products,
 * whose four accumulators hide the FMA latency better. The W rows are read one
 * after another, each whole: in address order, which a decode streaming K from
 * memory needs (Zen 5, 131072 keys, fp32 rows of 512 bytes: 1.3x the time of a
 * plain read of the same bytes, against 1.9x when the rows went a vector of
 * each at a time); each accumulator adds its columns in order either way. With
 * `ahead`, each group of keys also asks for its share of the rows ahead (rows
 * j rows / nb on, for keys j on; the same rows of the next tile when it has as
 * many): spread over the work, the prefetches overlap the arithmetic (issued
 * all at once, they stall it).
 * With `pv`, a decode row's P V of the previous tile goes beside the scores:
 * after each key's dot product, the same key's value row is added (then the
 * keys past nb). The K and V streams are then read together, a row of each in
 * turn, as a core reads memory fastest (Zen 3, fp32, d = 128, 16K to 128K keys:
 * 0.96-1.08x the time of a plain read of K and V, against 1.15-1.28x with P V
 * after the scores a group of 8 keys at a time, and 1.25-1.35x a whole tile at
 * a time). favor__dots_side reads rows already in cache (a widened 16-bit
 * tile) a vector of each at a time instead (SIDE = 1): q's vector is loaded once
 * for the W keys and their FMA chains interleave (Zen 3, fp16, d = 64 and 128,
 * 4 rows or 32 query heads on 8, 16K keys: 0.81-1.0x the time; fp32 rows
 * streamed in place took up to 1.15x in that order). Each accumulator adds its
 * columns in order either way: the bits are the same. */
#define FAVOR__DEFINE_DOTS(NAME, T, E, LOAD, SLOAD, SIDE)                                         \
    static void NAME(const float *q, size_t d, const E *K, size_t ldk, size_t nb, float *S,      \
                     const favor__ahead *ahead, const favor__pvrow *pv)                          \
    {                                                                                            \
        size_t j = 0, c, u, dvec = d - d % FAVOR__W, np = pv ? pv->n : 0;                        \
        if (FAVOR__W >= 4)                                                                       \
            for (; j + FAVOR__W <= nb; j += FAVOR__W) {                                          \
                favor__vf acc[FAVOR__W];                                                         \
                const E *Kj = K + j * ldk;                                                       \
                if (ahead) { /* this group's share of the rows ahead */                          \
                    size_t a0 = j * ahead->rows / nb, a1 = (j + FAVOR__W) * ahead->rows / nb;    \
                    if (a1 > ahead->rows) a1 = ahead->rows;                                      \
                    favor__ahead_rows(ahead, a0, a1, 0);                                         \
                }                                                                                \
                if (SIDE) { /* in cache: the W rows side by side */                              \
                    FAVOR__UNROLL for (u = 0; u < FAVOR__W; ++u) acc[u] = favor__v_set1(0.0f);  \
                    for (c = 0; c < dvec; c += FAVOR__W) {                                       \
                        const favor__vf qc = favor__v_load(q + c);                               \
                        FAVOR__UNROLL for (u = 0; u < FAVOR__W; ++u)                             \
                            acc[u] = favor__v_fma(LOAD(Kj + u * ldk + c), qc, acc[u]);           \
                    }                                                                            \
                } else /* a row whole, then the next: in address order */                        \
                    FAVOR__UNROLL for (u = 0; u < FAVOR__W; ++u) {                               \
                        acc[u] = favor__v_set1(0.0f);                                            \
                        for (c = 0; c < dvec; c += FAVOR__W)                                     \
                            acc[u] = favor__v_fma(LOAD(Kj + u * ldk + c), favor__v_load(q + c),  \
                                                  acc[u]);                                       \
                        if (j + u < np) favor__pv_key_call(pv, j + u);                           \
                    }                                                                            \
                favor__v_store(S + j, favor__v_sums(acc));                                       \
                for (c = dvec; c < d; ++c) /* columns left over from the vector width */        \
                    for (u = 0; u < FAVOR__W; ++u)                                               \
                        S[j + u] = favor__s_fma(q[c], SLOAD(Kj[u * ldk + c]), S[j + u]);         \
            }                                                                                    \
        for (; j < nb; ++j) {                                                                    \
            S[j] = favor__dot##T(q, K + j * ldk, d);                                             \
            if (j < np) favor__pv_key_as(pv, j);                                                 \
        }                                                                                        \
        for (j = nb; j < np; ++j) favor__pv_key_as(pv, j);                                       \
    }
FAVOR__DEFINE_DOTS(favor__dots, , float, favor__v_load, favor__s_from_f32, 0)
FAVOR__DEFINE_DOTS(favor__dots_f16, _f16, uint16_t, favor__v_load_f16, favor__s_from_f16, 0)
FAVOR__DEFINE_DOTS(favor__dots_bf16, _bf16, uint16_t, favor__v_load_bf16a, favor__s_from_bf16, 0)
FAVOR__DEFINE_DOTS(favor__dots_side, , float, favor__v_load, favor__s_from_f32, 1)

/* Decode rows (favor__rows_as) ask for the key and value rows FAVOR__PV_AHEAD
 * bytes past the ones they read (a prefetch per line, within the rows the cache
 * holds). Measured in the one-row kernel that came before (favor__dots_pv, d =
 * d_v of 4 or 8 vectors; favor__rows_as took its place with its reads):
 * a 16-bit row does twice the work per byte of fp32, and the hardware's
 * prefetchers alone kept one fp16 row at 57-63% of a plain fp32 read, about as
 * fast as a plain fp16 convert-and-sum loop (Xeon Emerald Rapids, family 6
 * model 207; with a prefetch per line 4 KiB ahead that loop went from 8.5-9.7
 * to 11.5-12.2 GB/s). In the decode, one row on 8/8 heads, fp16 and bf16, d =
 * 64 and 128: 0.77-0.85x the time at 262144 keys, 0.78-0.98x at 16384 (in L3),
 * 0.87-0.88x on 16/8 heads, 0.81x on two threads; the AVX2 build, d = 32 and
 * 64: 0.72-0.81x and 0.83-0.95x; the same bits. 2 KiB and
 * 4 KiB ahead did alike. fp32 rows ask for the rows as many keys ahead (4 KiB
 * at their size): one row, 8/8 heads, d = 64 and 128, 0.93-1.00x the time at
 * 16384 and 65536 keys (K and V partly in that CPU's L3; one and two threads),
 * 0.95-1.02x at 262144 and 0.98-0.99x at 1024 and 4096; the AVX2 build, d = 32
 * and 64, 0.82-0.95x; the same bits (2 KiB ahead: 0.96-0.99x; the first tries,
 * 0.93-1.01x, had left fp32 rows without). The next tile prefetched at once
 * made rows slower on Zen 3 (favor__decode_block); this prefetch is unmeasured
 * on AMD. On Cascade Lake, fp16 rows prefetching 16 keys ahead (2 KiB at d =
 * 64) took 0.97-1.00x. */
#define FAVOR__PV_AHEAD 2048

/* Vector registers the decode rows' kernel (FAVOR__DEFINE_ROWS) plans on: the
 * backend's. Rows are "tight" when their NR x NV accumulators alone pass them
 * (of the kernels, only AVX2's four rows of d = 64: 32 accumulators, 32 query
 * vectors, 16 registers). A value row between two key rows then reloaded and
 * spilled every accumulator, and each key row reread the four rows' queries; a
 * tight kernel scores two keys per read of the queries and adds a group's values
 * after its keys, FAVOR__PV_CB accumulators of a row at a time. Each accumulator
 * adds the same products in the same order: the same bits. Zen 3 (favor_ab,
 * four rows or 32 to 64 query heads on 8, fp32 and fp16, 2K to 64K keys): built
 * by clang 14, 0.62-0.76x the time (clang's build had taken 1.6-2x gcc's); by
 * gcc 12, 0.85-1.0x, within the VM's drift in most runs. */
#define FAVOR__ROWS_TIGHT(NR, NV) ((NR) * (NV) > FAVOR__NREG)
#define FAVOR__PV_CB(NR, NV) (FAVOR__ROWS_TIGHT(NR, NV) ? FAVOR__NREG / 2 / (NR) : (NV))
#define FAVOR__ROWS_KS(NR, NV) (FAVOR__ROWS_TIGHT(NR, NV) ? 2 : 1) /* keys per read of q */
/* the KS (1 or 2) key rows from Kr, ldk apart: their products with the NR rows
 * q + r ldq into acc[r][u + e], each row's W lanes to be added by favor__v_sums */
#define FAVOR__KEY_ROWS(LOAD, NV, NR, KS, Kr, ldk, u)                                            \
    do {                                                                                         \
        favor__vf k_[KS][NV], a_[KS];                                                            \
        size_t e_;                                                                               \
        FAVOR__UNROLL for (e_ = 0; e_ < KS; ++e_)                                                \
            FAVOR__UNROLL for (c = 0; c < NV; ++c)                                               \
                k_[e_][c] = LOAD((Kr) + e_ * (ldk), c, NV);                                      \
        FAVOR__UNROLL for (r = 0; r < NR; ++r) {                                                 \
            FAVOR__UNROLL for (e_ = 0; e_ < KS; ++e_) a_[e_] = favor__v_set1(0.0f);              \
            FAVOR__UNROLL for (c = 0; c < NV; ++c) {                                             \
                const favor__vf q_ = favor__v_load(q + r * ldq + c * FAVOR__W);                  \
                FAVOR__UNROLL for (e_ = 0; e_ < KS; ++e_)                                        \
                    a_[e_] = favor__v_fma(k_[e_][c], q_, a_[e_]);                                \
            }                                                                                    \
            FAVOR__UNROLL for (e_ = 0; e_ < KS; ++e_) acc[r][(u) + e_] = a_[e_];                 \
        }                                                                                        \
    } while (0)
/* the value row Vr's vectors c0 .. c0 + CB - 1 into the NR rows' accumulators
 * cv[r][c] with their probabilities, row r's at pr[r ps] */
#define FAVOR__PV_ROWS(LOAD, NV, NR, C0, CB, Vr, pr, ps)                                         \
    do {                                                                                         \
        favor__vf v_[CB];                                                                        \
        FAVOR__UNROLL for (c = 0; c < (CB); ++c) v_[c] = LOAD((Vr), (C0) + c, NV);               \
        FAVOR__UNROLL for (r = 0; r < NR; ++r) {                                                 \
            const favor__vf p_ = favor__v_set1((pr)[r * (ps)]);                                  \
            FAVOR__UNROLL for (c = 0; c < (CB); ++c)                                             \
                cv[r][(C0) + c] = favor__v_fma(p_, v_[c], cv[r][(C0) + c]);                      \
        }                                                                                        \
    } while (0)
/* the value rows Vp + u ldv (u < pn) into the accumulators, FAVOR__PV_CB of a
 * row at a time (all of them when the rows are not tight) */
#define FAVOR__PV_GROUP(LOAD, NV, NR, Vp, ldv, pr, pn)                                           \
    do {                                                                                         \
        size_t c0_;                                                                              \
        FAVOR__UNROLL for (c0_ = 0; c0_ < (NV); c0_ += FAVOR__PV_CB(NR, NV))                     \
            for (u = 0; u < (pn); ++u)                                                           \
                FAVOR__PV_ROWS(LOAD, NV, NR, c0_, FAVOR__PV_CB(NR, NV), (Vp) + u * (ldv),        \
                               (pr) + u, FAVOR__W);                                              \
    } while (0)
/* The scores of 4 query rows against a tile: S[r lds + j] = q_r . K_j (q_r = q +
 * r ldq, r < 4, j < nb). favor__dots reads the tile once per row; rows that share
 * a tile in cache read each vector of it once here, for the four rows: a group of
 * W/4 keys keeps W accumulators (4 rows x W/4 keys), reduced together by
 * favor__v_sums. Each accumulator adds its columns in order, and keys past the
 * last whole group of W take favor__dot, as in favor__dots: the bits are
 * favor__dots' row by row. `ahead`: rows to prefetch, spread over the groups.
 * `whole`: a group's key rows are read one after another, each whole (rows
 * streamed from memory: address order), not side by side a vector at a time. */
#define FAVOR__DEFINE_DOTS4(NAME, T, E, LOAD, SLOAD)                                              \
    static void NAME(const float *q, size_t ldq, size_t d, const E *K, size_t ldk, size_t nb,    \
                     float *S, size_t lds, const favor__ahead *ahead, int whole)                 \
    {                                                                                            \
        enum { KT = FAVOR__W >= 4 ? FAVOR__W / 4 : 1 };                                          \
        size_t j = 0, c, r, u, dvec = d - d % FAVOR__W;                                          \
        const size_t nbv = FAVOR__W >= 4 ? nb - nb % FAVOR__W : 0;                               \
        /* rows ahead per key, in 16.16 fixed point, rounded up: no division per group           \
         * (nbv + !nbv is nbv here: on a scalar backend nbv is a constant 0, and gcc             \
         * warns of a division by zero in the branch that never runs) */                         \
        const size_t step =                                                                      \
            ahead && nbv ? ((ahead->rows << 16) + nbv - 1) / (nbv + !nbv) : 0;                   \
        for (; j < nbv; j += KT) {                                                               \
            favor__vf acc[FAVOR__W], kv[KT];                                                     \
            float sums[FAVOR__W];                                                                \
            const E *Kj = K + j * ldk;                                                           \
            if (ahead) { /* this group's share: rows [j step, (j + KT) step) / 2^16 */          \
                size_t a0 = (j * step) >> 16, a1 = ((j + KT) * step) >> 16;                      \
                if (a1 > ahead->rows) a1 = ahead->rows;                                          \
                favor__ahead_rows(ahead, a0, a1, 0);                                             \
            }                                                                                    \
            FAVOR__UNROLL for (u = 0; u < FAVOR__W; ++u) acc[u] = favor__v_set1(0.0f);          \
            if (whole)                                                                           \
                FAVOR__UNROLL for (u = 0; u < KT; ++u)                                           \
                    for (c = 0; c < dvec; c += FAVOR__W) {                                       \
                        const favor__vf kc = LOAD(Kj + u * ldk + c);                             \
                        FAVOR__UNROLL for (r = 0; r < 4; ++r)                                    \
                            acc[r * KT + u] =                                                    \
                                favor__v_fma(kc, favor__v_load(q + r * ldq + c), acc[r * KT + u]); \
                    }                                                                            \
            else                                                                                 \
            for (c = 0; c < dvec; c += FAVOR__W) {                                               \
                FAVOR__UNROLL for (u = 0; u < KT; ++u) kv[u] = LOAD(Kj + u * ldk + c);          \
                FAVOR__UNROLL for (r = 0; r < 4; ++r) {                                          \
                    const favor__vf qr = favor__v_load(q + r * ldq + c);                         \
                    FAVOR__UNROLL for (u = 0; u < KT; ++u)                                       \
                        acc[r * KT + u] = favor__v_fma(kv[u], qr, acc[r * KT + u]);              \
                }                                                                                \
            }                                                                                    \
            favor__v_store(sums, favor__v_sums(acc));                                            \
            if (dvec < d) /* columns past the vector width */                                    \
                for (r = 0; r < 4; ++r)                                                          \
                    for (u = 0; u < KT; ++u)                                                     \
                        for (c = dvec; c < d; ++c)                                               \
                            sums[r * KT + u] = favor__s_fma(q[r * ldq + c], SLOAD(Kj[u * ldk + c]), \
                                                            sums[r * KT + u]);                   \
            FAVOR__UNROLL for (r = 0; r < 4; ++r)                                                \
                memcpy(S + r * lds + j, sums + r * KT, KT * sizeof(float));                      \
        }                                                                                        \
        for (r = 0; r < 4; ++r)                                                                  \
            for (j = nbv; j < nb; ++j) S[r * lds + j] = favor__dot##T(q + r * ldq, K + j * ldk, d); \
    }
FAVOR__DEFINE_DOTS4(favor__dots4, , float, favor__v_load, favor__s_from_f32)
FAVOR__DEFINE_DOTS4(favor__dots4_f16, _f16, uint16_t, favor__v_load_f16, favor__s_from_f16)
FAVOR__DEFINE_DOTS4(favor__dots4_bf16, _bf16, uint16_t, favor__v_load_bf16a, favor__s_from_bf16)

/* favor__dots4 on rows of type t. `whole` is for fp32 rows: the decode reads
 * 16-bit K rows here (k16) side by side, never whole (its `whole` is 0 for
 * them), so their kernels get a constant 0 and drop the other branch */
static void favor__dots4_as(favor_dtype t, const float *q, size_t ldq, size_t d, const void *K,
                            size_t ldk, size_t nb, float *S, size_t lds, const favor__ahead *ahead,
                            int whole)
{
    if (t == FAVOR_F16)
        favor__dots4_f16(q, ldq, d, (const uint16_t *)K, ldk, nb, S, lds, ahead, 0);
    else if (t == FAVOR_BF16)
        favor__dots4_bf16(q, ldq, d, (const uint16_t *)K, ldk, nb, S, lds, ahead, 0);
    else favor__dots4(q, ldq, d, (const float *)K, ldk, nb, S, lds, ahead, whole);
}

/* favor__dots on rows of type t */
static void favor__dots_as(favor_dtype t, const float *q, size_t d, const void *K, size_t ldk,
                           size_t nb, float *S, const favor__ahead *ahead, const favor__pvrow *pv)
{
    if (t == FAVOR_F16) favor__dots_f16(q, d, (const uint16_t *)K, ldk, nb, S, ahead, pv);
    else if (t == FAVOR_BF16) favor__dots_bf16(q, d, (const uint16_t *)K, ldk, nb, S, ahead, pv);
    else favor__dots(q, d, (const float *)K, ldk, nb, S, ahead, pv);
}

/* dst[c][r] = src[r][c] for an R x Cn block: whole W x W blocks with the
 * backend's block transpose, the edges element by element. */
static void favor__transpose(size_t R, size_t Cn, const float *src, size_t lds, float *dst, size_t ldd)
{
    size_t r0, c0, r, c, Rv = R - R % FAVOR__W, Cv = Cn - Cn % FAVOR__W;
    for (r0 = 0; r0 < Rv; r0 += FAVOR__W)
        for (c0 = 0; c0 < Cv; c0 += FAVOR__W)
            favor__v_transpose(src + r0 * lds + c0, lds, dst + c0 * ldd + r0, ldd);
    for (r = 0; r < R; ++r)
        for (c = r < Rv ? Cv : 0; c < Cn; ++c) dst[c * ldd + r] = src[r * lds + c];
}

/* 4.5 PRNG and sampling ------------------------------------------------------
 * A counter-based generator: the i-th 64-bit output for a seed is a fixed
 * integer function of (seed, i) (the splitmix64 finaliser of a Weyl sequence
 * keyed by a hash of the seed), so the same seed gives the same stream on every
 * compiler and architecture. Normals use Marsaglia's polar method in double. */
typedef struct {
    uint64_t key, counter;
    double spare;
    int has_spare;
} favor__rng;

static uint64_t favor__mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void favor__rng_init(favor__rng *g, unsigned long long seed)
{
    g->key = favor__mix64((uint64_t)seed ^ 0x6a09e667f3bcc909ull);
    g->counter = 0;
    g->has_spare = 0;
    g->spare = 0.0;
}

/* Uniform in (-1, 1), never exactly 0 or +-1. */
static double favor__rng_sym(favor__rng *g)
{
    uint64_t x = favor__mix64(g->key + 0x9e3779b97f4a7c15ull * ++g->counter);
    return ((double)(x >> 11) + 0.5) * (1.0 / 4503599627370496.0) - 1.0;
}

static double favor__rng_normal(favor__rng *g)
{
    double u, v, s;
    if (g->has_spare) {
        g->has_spare = 0;
        return g->spare;
    }
    do {
        u = favor__rng_sym(g);
        v = favor__rng_sym(g);
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    s = sqrt(-2.0 * log(s) / s);
    g->spare = v * s;
    g->has_spare = 1;
    return u * s;
}

/* A double in a byte buffer: the sampling scratch row lives in the caller's float
 * storage, so it is reached through memcpy (no alignment or aliasing demands). */
static double favor__xget(const unsigned char *xb, size_t i)
{
    double v;
    memcpy(&v, xb + i * sizeof v, sizeof v);
    return v;
}

static void favor__xset(unsigned char *xb, size_t i, double v) { memcpy(xb + i * sizeof v, &v, sizeof v); }

/* Fill w (m x d). Orthogonal (default): each block of d rows is Gram-Schmidt of
 * Gaussian rows, in double, projected against the block's earlier rows as
 * stored (so the stored rows are orthogonal up to their own fp32 rounding), then
 * scaled to the norm of an independent Gaussian d-vector (chi(d)) or to sqrt(d).
 * xb is a d-double scratch row. */
static void favor__draw(favor__rng *g, size_t m, size_t d, unsigned flags, unsigned char *xb,
                        float *w)
{
    size_t b, i, j, l;
    for (b = 0; b < m; b += d) {
        size_t rows = m - b < d ? m - b : d;
        for (i = 0; i < rows; ++i) {
            double nrm, target;
            int tries = 0;
            do {
                for (l = 0; l < d; ++l) favor__xset(xb, l, favor__rng_normal(g));
                if (!(flags & FAVOR_IID)) {
                    int pass; /* twice is enough: orthogonal to double precision */
                    for (pass = 0; pass < 2; ++pass)
                        for (j = 0; j < i; ++j) {
                            const float *y = w + (b + j) * d;
                            double p = 0.0, yy = 0.0;
                            for (l = 0; l < d; ++l) {
                                p += favor__xget(xb, l) * y[l];
                                yy += (double)y[l] * y[l];
                            }
                            p /= yy;
                            for (l = 0; l < d; ++l) favor__xset(xb, l, favor__xget(xb, l) - p * y[l]);
                        }
                }
                nrm = 0.0;
                for (l = 0; l < d; ++l) nrm += favor__xget(xb, l) * favor__xget(xb, l);
                nrm = sqrt(nrm);
            } while (!(nrm > 1e-6) && ++tries < 64);
            if (flags & FAVOR_REGULAR_NORM) {
                target = sqrt((double)d);
            } else if (flags & FAVOR_IID) {
                target = nrm; /* a Gaussian row has a chi(d) norm already */
            } else {
                double c = 0.0;
                for (l = 0; l < d; ++l) {
                    double e = favor__rng_normal(g);
                    c += e * e;
                }
                target = sqrt(c);
            }
            for (l = 0; l < d; ++l) w[(b + i) * d + l] = (float)(favor__xget(xb, l) * (target / nrm));
        }
    }
}

/* 4.6 Feature maps ------------------------------------------------------------
 * A map is computed in two steps so the stabilizer can be chosen in between:
 * favor__phi_raw writes, for each row, the exponents (POSITIVE, HYPERBOLIC), the
 * unscaled trigonometric features (TRIG) or the final features (ELU1, RELU), and
 * the row's log-scale r: the largest exponent (POSITIVE, HYPERBOLIC), |x'|^2/2
 * (TRIG) or 0. favor__phi_finish then applies a per-row stabilizer c:
 * phi = exp(raw - c) / sqrt(width) or exp(r - c) * raw / sqrt(m). */
typedef struct {
    favor_kernel kernel;
    size_t d, m, width;
    float sqs;    /* sqrt(s) */
    float half_s; /* s / 2 */
    float lognorm;/* log(sqrt(width)) for the exponential maps */
    const float *wt; /* W^T, d x m */
    const float *w;  /* W, m x d */
    /* linear attention (see GATES): outputs without the normalizer; the
       per-token log-gates (rows: key positions of the current sequence, heads:
       key/value heads of every batch element) and per-head decays, or NULL */
    int nonorm;
    const favor_tensor *gates;
    const float *decay;
    size_t dheads; /* key/value heads of a batch element: decay's length */
} favor__map;

static int favor__stabilized(favor_kernel k)
{
    return k == FAVOR_POSITIVE || k == FAVOR_HYPERBOLIC || k == FAVOR_TRIG;
}

/* RELU's feature floor, cast so that it is the float 1e-3f wherever it appears:
 * with x87 excess precision a float constant may stand for the decimal 0.001 and
 * the features (stored as floats) would all compare above it. */
#define FAVOR__RELU_FLOOR ((float)1e-3f)

/* the maps without W (deterministic): count is d */
static int favor__fixed(favor_kernel k)
{
    return k == FAVOR_ELU1 || k == FAVOR_POLY2 || k == FAVOR_IDENTITY;
}

/* POLY2's largest d: its width, about d^2 / 2, times the chunk and d_v stays far
 * from overflow on 32-bit size_t too */
#define FAVOR__POLY2_MAXD 4096

static size_t favor__width(favor_kernel k, size_t d, size_t m)
{
    switch (k) {
    case FAVOR_ELU1: case FAVOR_IDENTITY: return d;
    case FAVOR_POSITIVE: case FAVOR_RELU: return m;
    case FAVOR_HYPERBOLIC: case FAVOR_TRIG: return 2 * m;
    case FAVOR_POLY2: return d <= FAVOR__POLY2_MAXD ? 1 + d + d * (d + 1) / 2 : 0;
    }
    return 0;
}

/* POLY2's features of one row x (d floats) at sqs = sqrt(s): 1, x', then for
 * each i the products x'_i x'_j, j >= i, the square divided by sqrt(2), so that
 * phi(a).phi(b) = 1 + a'.b' + (a'.b')^2 / 2 */
static void favor__poly2_row(float *out, const float *x, size_t d, float sqs)
{
    size_t i;
    float *lin = out + 1, *quad = out + 1 + d;
    out[0] = 1.0f;
    memcpy(lin, x, d * sizeof(float));
    favor__scal(lin, sqs, d);
    for (i = 0; i < d; quad += d - i, ++i) {
        memcpy(quad, lin + i, (d - i) * sizeof(float));
        favor__scal(quad, lin[i], d - i);
        quad[0] *= 0.70710678f; /* 1/sqrt(2) */
    }
}

/* POLY2's map backward of one row: dx = sqrt(s) dphi_lin, and from each packed
 * row i of the products (s x_i x_j, j > i; s x_i^2 / sqrt(2)): dx_i += s
 * (sum_{j>i} g_ij x_j + sqrt(2) g_ii x_i), dx_j += s x_i g_ij */
static void favor__poly2_grad(float *dx, const float *x, const float *g, size_t d, float sqs)
{
    size_t i;
    float s = sqs * sqs;
    const float *quad = g + 1 + d;
    memcpy(dx, g + 1, d * sizeof(float));
    favor__scal(dx, sqs, d);
    for (i = 0; i < d; quad += d - i, ++i) {
        size_t n = d - i - 1;
        dx[i] += s * (favor__dot(quad + 1, x + i + 1, n) + 1.41421356f * quad[0] * x[i]);
        favor__axpy(dx + i + 1, s * x[i], quad + 1, n);
    }
}

static void favor__map_make(favor__map *mp, const favor_features *f, float scale)
{
    mp->kernel = f->kernel;
    mp->d = f->dim;
    mp->m = f->count;
    mp->width = favor__width(f->kernel, f->dim, f->count);
    mp->sqs = (float)sqrt((double)scale);
    mp->half_s = 0.5f * scale;
    mp->lognorm = (float)(0.5 * log((double)mp->width));
    mp->wt = f->wt;
    mp->w = f->w;
    mp->nonorm = 0;
    mp->gates = NULL;
    mp->decay = NULL;
    mp->dheads = 1;
}

/* the linear options of opts into mp: FAVOR_NO_NORM, gates and decay (heads:
 * key/value heads of a batch element) */
static void favor__map_opts(favor__map *mp, const favor_options *opts, size_t heads)
{
    if (!opts) return;
    mp->nonorm = (opts->flags & FAVOR_NO_NORM) != 0;
    mp->gates = opts->gates;
    mp->decay = opts->decay;
    mp->dheads = heads;
}

static int favor__gated(const favor__map *mp) { return mp->gates || mp->decay; }

/* raw features of `rows` rows of x (stride ldx) into buf (stride ldb); r[rows] */
static void favor__phi_raw(const favor__map *mp, const float *x, size_t ldx, size_t rows,
                           float *buf, size_t ldb, float *r)
{
    size_t i, l, m = mp->m;
    if (favor__fixed(mp->kernel)) {
        for (i = 0; i < rows; ++i) {
            if (mp->kernel == FAVOR_ELU1) {
                favor__elu1_array(buf + i * ldb, x + i * ldx, mp->d);
            } else if (mp->kernel == FAVOR_IDENTITY) {
                favor__scal_to(buf + i * ldb, mp->sqs, x + i * ldx, mp->d);
            } else {
                favor__poly2_row(buf + i * ldb, x + i * ldx, mp->d, mp->sqs);
            }
            r[i] = 0.0f;
        }
        return;
    }
    favor__gemm(rows, m, mp->d, x, ldx, 1, mp->wt, m, buf, ldb, 0); /* u = W x */
    for (i = 0; i < rows; ++i) {
        float *u = buf + i * ldb;
        const float *xi = x + i * ldx;
        float h = mp->half_s * favor__dot(xi, xi, mp->d); /* |x'|^2 / 2 */
        float sqs = mp->sqs;
        switch (mp->kernel) {
        case FAVOR_POSITIVE:
            favor__mul_sub(u, u, sqs, h, m);
            r[i] = favor__maxval(u, m);
            break;
        case FAVOR_HYPERBOLIC:
            favor__mul_sub(u + m, u, -sqs, h, m); /* -a - h, a = u sqs */
            favor__mul_sub(u, u, sqs, h, m);
            r[i] = favor__maxval(u, 2 * m);
            break;
        case FAVOR_TRIG:
            for (l = 0; l < m; ++l) {
                float a = u[l] * sqs;
                u[l] = (float)sin((double)a);
                u[m + l] = (float)cos((double)a);
            }
            r[i] = h;
            break;
        case FAVOR_RELU: {
            float inv = 1.0f / (float)sqrt((double)m);
            for (l = 0; l < m; ++l) {
                float a = u[l] * sqs;
                u[l] = (a < 0.0f ? 0.0f : a) * inv + FAVOR__RELU_FLOOR; /* NaN stays NaN */
            }
            r[i] = 0.0f;
            break;
        }
        case FAVOR_ELU1: case FAVOR_POLY2: case FAVOR_IDENTITY:
            break;
        }
    }
}

/* apply the stabilizers c[i] (per row) to raw features; r as from phi_raw */
static void favor__phi_finish(const favor__map *mp, float *buf, size_t ldb, size_t rows,
                              const float *r, const float *c)
{
    size_t i;
    if (mp->kernel == FAVOR_POSITIVE || mp->kernel == FAVOR_HYPERBOLIC) {
        for (i = 0; i < rows; ++i)
            favor__exp_add(buf + i * ldb, buf + i * ldb, -c[i] - mp->lognorm, mp->width);
    } else if (mp->kernel == FAVOR_TRIG) {
        for (i = 0; i < rows; ++i)
            favor__scal(buf + i * ldb, favor__s_exp(r[i] - c[i] - mp->lognorm + 0.34657359f),
                        mp->width); /* 1/sqrt(m) = sqrt(2)/sqrt(width): +log(2)/2 */
    }
}

/* The backward of the map for `rows` rows: dx = J_phi(x)^T dphi, given x, its
 * features phi (any per-row stabilizer: every formula uses p = phi * dphi, which
 * the stabilizer does not change) and dphi (overwritten). With x' = sqrt(s) x,
 * u = W x', h = |x'|^2 / 2 and p = phi * dphi:
 *     ELU1        dx = dphi * (x > 0 ? 1 : phi)
 *     POSITIVE    dx = sqrt(s) W^T p - s x sum(p)
 *     HYPERBOLIC  dx = sqrt(s) W^T (p1 - p2) - s x sum(p)       (halves 1, 2)
 *     TRIG        dx = sqrt(s) W^T (phi_cos dphi_sin - phi_sin dphi_cos) + s x sum(p)
 *     RELU        dx = sqrt(s) W^T (dphi [phi > 1e-3]) / sqrt(m)
 *     POLY2       dx = sqrt(s) dphi_lin + the products' terms (favor__poly2_grad)
 * (RELU's mask reads u > 0 off phi: a u so small that u/sqrt(m) + 1e-3 rounds to
 * 1e-3 counts as 0, an error below 1e-10 relative in that one term). */
static void favor__phi_backward(const favor__map *mp, const float *x, size_t ldx, size_t rows,
                                const float *phi, size_t ldp, float *dphi, size_t ldd,
                                float *dx, size_t lddx, float *sums)
{
    size_t i, l, m = mp->m, d = mp->d;
    float s = 2.0f * mp->half_s, gain = mp->sqs, sgn = -1.0f;
    if (mp->kernel == FAVOR_ELU1) {
        for (i = 0; i < rows; ++i)
            favor__elu1_grad(dx + i * lddx, x + i * ldx, phi + i * ldp, dphi + i * ldd, d);
        return;
    }
    if (mp->kernel == FAVOR_POLY2) {
        for (i = 0; i < rows; ++i)
            favor__poly2_grad(dx + i * lddx, x + i * ldx, dphi + i * ldd, d, gain);
        return;
    }
    if (mp->kernel == FAVOR_IDENTITY) { /* dx = sqrt(s) dphi */
        for (i = 0; i < rows; ++i) favor__scal_to(dx + i * lddx, gain, dphi + i * ldd, d);
        return;
    }
    for (i = 0; i < rows; ++i) { /* dphi row -> the m-wide vector W^T is applied to */
        const float *f = phi + i * ldp;
        float *g = dphi + i * ldd, sum = 0.0f;
        switch (mp->kernel) {
        case FAVOR_POSITIVE:
            favor__vmul(g, f, m);
            sum = favor__sum(g, m);
            break;
        case FAVOR_HYPERBOLIC:
            favor__vmul(g, f, 2 * m);
            sum = favor__sum(g, 2 * m);
            for (l = 0; l < m; ++l) g[l] -= g[m + l];
            break;
        case FAVOR_TRIG:
            for (l = 0; l < m; ++l) {
                float gs = g[l];
                sum += f[l] * gs + f[m + l] * g[m + l];
                g[l] = f[m + l] * gs - f[l] * g[m + l];
            }
            sgn = 1.0f;
            break;
        case FAVOR_RELU:
            for (l = 0; l < m; ++l) g[l] = f[l] > FAVOR__RELU_FLOOR ? g[l] : 0.0f;
            break;
        case FAVOR_ELU1: case FAVOR_POLY2: case FAVOR_IDENTITY:
            break;
        }
        sums[i] = sum;
    }
    if (mp->kernel == FAVOR_RELU) gain /= (float)sqrt((double)m);
    favor__gemm(rows, d, m, dphi, ldd, 1, mp->w, d, dx, lddx, 0);
    for (i = 0; i < rows; ++i) {
        favor__scal(dx + i * lddx, gain, d);
        if (mp->kernel != FAVOR_RELU) favor__axpy(dx + i * lddx, sgn * s * sums[i], x + i * ldx, d);
    }
}

/* 4.7 Validation helpers ---------------------------------------------------- */
static int favor__mul_ok(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

static int favor__add_ok(size_t a, size_t b, size_t *out)
{
    if (b > SIZE_MAX - a) return 0;
    *out = a + b;
    return 1;
}

/* Why a call was refused: the caller's opts->error (none: buf NULL). favor__no
 * writes one line there, from a format where %s is a string and %z a size_t
 * (no stdio), cut to the buffer with its NUL, and returns st. */
typedef struct {
    char *buf;
    size_t size;
} favor__why;

static favor__why favor__why_of(const favor_options *o)
{
    favor__why w;
    w.buf = o && o->error && o->error_size ? o->error : NULL;
    w.size = w.buf ? o->error_size : 0;
    return w;
}

#ifdef FAVOR_NO_ERROR_TEXT
#define favor__no(w, st, ...) ((void)(w), (st))
#else
#define favor__no FAVOR__N(favor__no) /* a function here (4.0) */
static favor_status favor__no(const favor__why *w, favor_status st, const char *fmt, ...)
{
    va_list ap;
    size_t at = 0;
    char num[3 * sizeof(size_t) + 1];
    if (!w || !w->buf) return st;
    va_start(ap, fmt);
    for (; *fmt; ++fmt) {
        const char *t = fmt;
        size_t len = 1;
        if (fmt[0] == '%' && fmt[1] == 's') {
            t = va_arg(ap, const char *);
            len = strlen(t);
            ++fmt;
        } else if (fmt[0] == '%' && fmt[1] == 'z') {
            size_t v = va_arg(ap, size_t);
            char *p = num + sizeof num;
            do *--p = (char)('0' + (int)(v % 10u)); while ((v /= 10u) != 0);
            t = p;
            len = (size_t)(num + sizeof num - p);
            ++fmt;
        }
        for (; len && at + 1 < w->size; --len) w->buf[at++] = *t++;
    }
    va_end(ap);
    w->buf[at] = '\0';
    return st;
}
#endif

/* FAVOR_E_SHAPE unless x (a's `what`) equals y (b's) */
static favor_status favor__same(const favor__why *w, const char *a, const char *what, size_t x,
                                const char *b, size_t y)
{
    (void)a; /* under FAVOR_NO_ERROR_TEXT */
    (void)what;
    (void)b;
    if (x == y) return FAVOR_OK;
    return favor__no(w, FAVOR_E_SHAPE, "%s: %s is %z, %s's is %z", a, what, x, b, y);
}

/* The bytes a tensor (or a plain buffer) occupies, for the alias checks: the
 * span [lo, hi), and its layout: groups `outer` bytes apart (0: one group),
 * each `glen` bytes long, of blocks `per` bytes apart (0: one block), each
 * block `in_len` bytes long, made of rows `in_stride` bytes apart (0: one row)
 * of `row` bytes each. A plain buffer is one block of one row. */
typedef struct {
    uintptr_t lo, hi;
    uintptr_t outer, glen, per, in_len, in_stride, row;
} favor__range;

/* the batch elements of a view (a batch of 0 or 1 is one) and its heads over
 * all of them, b outer (favor__check_tensor checks that the product fits) */
static size_t favor__nbatch(const favor_tensor *t) { return t->batch > 1 ? t->batch : 1; }
static size_t favor__nheads(const favor_tensor *t) { return favor__nbatch(t) * t->heads; }

/* A tensor is valid when its data is non-NULL, every size is non-zero, its rows
 * do not overlap each other (over its axes of more than one element, rows,
 * heads and batch, taken by increasing stride, each stride covers all the rows
 * of the smaller ones) and its byte span fits in size_t and the address space.
 * Its layout is returned for the alias checks. */
static favor_status favor__check_tensor(const favor_tensor *t, const char *name,
                                        const favor__why *w, favor__range *rg)
{
    static const char *const axis[3] = { "row_stride", "head_stride", "batch_stride" };
    size_t st[3], cnt[3], ax[3], na = 0, i, j, ext, tmp, bytes, es;
    (void)name; /* under FAVOR_NO_ERROR_TEXT */
    (void)axis;
    if (!t) return favor__no(w, FAVOR_E_NULL, "%s is NULL", name);
    if (!t->data) return favor__no(w, FAVOR_E_NULL, "%s: data is NULL", name);
    if (!(es = favor_dtype_size(t->dtype)))
        return favor__no(w, FAVOR_E_ARG, "%s: dtype %z is not a favor_dtype", name,
                         (size_t)(unsigned)t->dtype);
    if (!t->heads || !t->rows || !t->cols)
        return favor__no(w, FAVOR_E_SHAPE, "%s: heads %z, rows %z, cols %z: a size is zero",
                         name, t->heads, t->rows, t->cols);
    if (!favor__mul_ok(favor__nbatch(t), t->heads, &tmp))
        return favor__no(w, FAVOR_E_OVERFLOW, "%s: batch %z x heads %z overflows size_t", name,
                         t->batch, t->heads);
    if (t->rows > 1) { st[na] = t->row_stride; cnt[na] = t->rows; ax[na++] = 0; }
    if (t->heads > 1) { st[na] = t->head_stride; cnt[na] = t->heads; ax[na++] = 1; }
    if (t->batch > 1) { st[na] = t->batch_stride; cnt[na] = t->batch; ax[na++] = 2; }
    for (i = 1; i < na; ++i) /* by stride; a tie keeps the order rows, heads, batch */
        for (j = i; j > 0 && st[j] < st[j - 1]; --j) {
            tmp = st[j]; st[j] = st[j - 1]; st[j - 1] = tmp;
            tmp = cnt[j]; cnt[j] = cnt[j - 1]; cnt[j - 1] = tmp;
            tmp = ax[j]; ax[j] = ax[j - 1]; ax[j - 1] = tmp;
        }
    ext = t->cols; /* elements from a row's first to the last of the axes so far */
    for (i = 0; i < na; ++i) {
        if (st[i] < ext) {
            if (i == 0)
                return favor__no(w, FAVOR_E_SHAPE, "%s: %s %z is below cols %z", name,
                                 axis[ax[i]], st[i], ext);
            return favor__no(w, FAVOR_E_SHAPE,
                             "%s: %s %z is below %z, the span of the %s axis under it (its "
                             "rows would overlap)",
                             name, axis[ax[i]], st[i], ext, axis[ax[i - 1]]);
        }
        if (!favor__mul_ok(cnt[i] - 1, st[i], &tmp) || !favor__add_ok(tmp, ext, &ext))
            return favor__no(w, FAVOR_E_OVERFLOW, "%s: the span of its %s overflows size_t",
                             name, axis[ax[i]]);
        if (i == 0) rg->in_len = ext; /* in elements until the end */
        if (i == 1) rg->glen = ext;
    }
    if (!favor__mul_ok(ext, es, &bytes) || (uintptr_t)t->data > UINTPTR_MAX - bytes)
        return favor__no(w, FAVOR_E_OVERFLOW, "%s: its span of %z elements passes the end of "
                                              "the address space", name, ext);
    rg->lo = (uintptr_t)t->data;
    rg->hi = rg->lo + bytes;
    rg->row = t->cols * es;
    rg->in_stride = na > 0 ? st[0] * es : 0;
    rg->in_len = na > 0 ? rg->in_len * es : rg->row; /* <= bytes: no overflow */
    rg->per = na > 1 ? st[1] * es : 0;
    rg->outer = na > 2 ? st[2] * es : 0;
    rg->glen = na > 2 ? rg->glen * es : bytes;
    return FAVOR_OK;
}

/* The residues modulo p of every byte of r lie in [*at, *at + *len) on the
 * circle of p: when p divides the block stride, a block lies in one window (one
 * row wide when p divides the row stride too). 0 when that window is all of p. */
static int favor__window(favor__range r, uintptr_t p, uintptr_t *at, uintptr_t *len)
{
    if (r.per % p || r.outer % p) return 0;
    *len = r.in_stride && r.in_stride % p == 0 ? r.row : r.in_len;
    if (*len >= p) return 0;
    *at = r.lo % p;
    return 1;
}

/* The stride of r's largest axis (0: one row) and the bytes from its first
 * byte to the end of the first of the groups that axis repeats */
static uintptr_t favor__top(favor__range r, uintptr_t *first)
{
    if (r.outer) { *first = r.glen; return r.outer; }
    if (r.per) { *first = r.in_len; return r.per; }
    *first = r.in_stride ? r.row : r.hi - r.lo;
    return r.in_stride;
}

/* r's first group: r without its largest axis */
static favor__range favor__first(favor__range r)
{
    if (r.outer) {
        r.outer = 0;
        r.hi = r.lo + r.glen;
    } else if (r.per) {
        r.per = 0;
        r.hi = r.lo + r.in_len;
    } else {
        r.in_stride = 0;
        r.hi = r.lo + r.row;
        r.in_len = r.row;
    }
    r.glen = r.hi - r.lo;
    return r;
}

/* 1 when a and b may share a byte. Disjoint spans never do; interleaved
 * layouts, such as the column blocks of one [n][q|k|v|out] buffer, do not when
 * some common period puts them in disjoint windows. Otherwise assume they do. */
static int favor__overlap(favor__range a, favor__range b)
{
    uintptr_t per[6], wa, la, wb, lb, fa, fb, ta = favor__top(a, &fa), tb = favor__top(b, &fb);
    int i;
    if (!(a.lo < b.hi && b.lo < a.hi)) return 0;
    if (ta && ta == tb) {
        /* groups one stride apart (the batch elements of two views of one
         * buffer, say, whether or not each has more than one row or head):
         * when the first groups of both fit in one stride, group i of one can
         * meet only group i of the other, a copy of the first two */
        uintptr_t lo = a.lo < b.lo ? a.lo : b.lo;
        uintptr_t hi = a.lo + fa > b.lo + fb ? a.lo + fa : b.lo + fb;
        if (hi - lo <= ta) return favor__overlap(favor__first(a), favor__first(b));
    }
    per[0] = a.per; per[1] = b.per; per[2] = a.in_stride; per[3] = b.in_stride;
    per[4] = a.outer; per[5] = b.outer;
    for (i = 0; i < 6; ++i) {
        uintptr_t p = per[i];
        if (!p || !favor__window(a, p, &wa, &la) || !favor__window(b, p, &wb, &lb)) continue;
        if ((wb + p - wa) % p >= la && (wa + p - wb) % p >= lb) return 0; /* disjoint */
    }
    return 1;
}

static favor__range favor__range_of(const void *p, size_t bytes)
{
    favor__range r;
    r.lo = (uintptr_t)p;
    r.hi = r.lo + bytes;
    r.outer = r.per = r.in_stride = 0;
    r.glen = bytes;
    r.in_len = r.row = bytes;
    return r;
}

static favor_status favor__check_options(const favor_options *o)
{
    favor__why w = favor__why_of(o);
    if (!o) return FAVOR_OK;
    if (o->flags & ~(FAVOR_CAUSAL | FAVOR_WINDOW | FAVOR_NO_NORM))
        return favor__no(&w, FAVOR_E_ARG,
                         "opts: flags %z has bits other than FAVOR_CAUSAL, FAVOR_WINDOW and "
                         "FAVOR_NO_NORM",
                         (size_t)o->flags);
    if (!(o->scale >= 0.0f) || !(o->scale <= FLT_MAX)) /* NaN, < 0, inf */
        return favor__no(&w, FAVOR_E_ARG, "opts: scale is NaN, negative or infinite");
    if (o->threads < 0) return favor__no(&w, FAVOR_E_ARG, "opts: threads is negative");
    return FAVOR_OK;
}

static int favor__kernel_ok(int k) { return k >= FAVOR_ELU1 && k <= FAVOR_IDENTITY; }

static favor_status favor__check_features(const favor_features *f, const favor__why *w)
{
    if (!f) return favor__no(w, FAVOR_E_NULL, "f is NULL");
    if (!favor__kernel_ok((int)f->kernel))
        return favor__no(w, FAVOR_E_ARG, "f: kernel %z is not a favor_kernel",
                         (size_t)(unsigned)f->kernel);
    if (f->flags & ~(FAVOR_IID | FAVOR_REGULAR_NORM))
        return favor__no(w, FAVOR_E_ARG, "f: flags %z has unknown bits", (size_t)f->flags);
    if (!f->dim || !f->count)
        return favor__no(w, FAVOR_E_SHAPE, "f: dim %z, count %z: a size is zero", f->dim,
                         f->count);
    if (favor__fixed(f->kernel)) {
        if (f->count != f->dim)
            return favor__no(w, FAVOR_E_SHAPE, "f: %s with count %z, not dim %z",
                             f->kernel == FAVOR_ELU1    ? "FAVOR_ELU1"
                             : f->kernel == FAVOR_POLY2 ? "FAVOR_POLY2"
                                                        : "FAVOR_IDENTITY",
                             f->count,
                             f->dim);
        if (!favor__width(f->kernel, f->dim, f->count))
            return favor__no(w, FAVOR_E_OVERFLOW, "f: FAVOR_POLY2 with dim %z above 4096",
                             f->dim);
    } else if (!f->w || !f->wt) {
        return favor__no(w, FAVOR_E_NULL, "f: w or wt is NULL");
    }
    if (!(f->scale > 0.0f) || !(f->scale <= FLT_MAX))
        return favor__no(w, FAVOR_E_ARG, "f: scale is not positive and finite");
    return FAVOR_OK;
}

/* The q, k, v, out quartet of an attention call: shapes and aliasing. */
typedef struct {
    favor__range q, k, v, o;
    favor__range other[12]; /* W, W^T, the state, out, dout, lse, the mask, slopes,
                               sinks, dsinks: never written over */
    favor__range grad[3];  /* the gradients of a backward call (outputs too) */
    int nother, ngrad;
    size_t hq, hkv, n, nk, d, dv;
} favor__shape;

/* 1 when r overlaps a tensor or another protected range of sh (with_out: the
 * outputs too) */
static int favor__overlaps_any(const favor__shape *sh, favor__range r, int with_out)
{
    int i;
    if (favor__overlap(r, sh->q) || favor__overlap(r, sh->k) || favor__overlap(r, sh->v) ||
        (with_out && favor__overlap(r, sh->o)))
        return 1;
    for (i = 0; i < sh->nother; ++i)
        if (favor__overlap(r, sh->other[i])) return 1;
    for (i = 0; with_out && i < sh->ngrad; ++i)
        if (favor__overlap(r, sh->grad[i])) return 1;
    return 0;
}

/* the shapes of q, k, v and (`o`, named on) an output or dout shaped as q's
 * rows and v's columns */
static favor_status favor__check_shapes(const favor_tensor *q, const favor_tensor *k,
                                        const favor_tensor *v, const favor_tensor *o,
                                        const char *on, const favor__why *w)
{
    favor_status st;
    size_t b = favor__nbatch(q);
    if ((st = favor__same(w, "k", "cols", k->cols, "q", q->cols)) != FAVOR_OK ||
        (st = favor__same(w, "v", "rows", v->rows, "k", k->rows)) != FAVOR_OK ||
        (st = favor__same(w, "v", "heads", v->heads, "k", k->heads)) != FAVOR_OK ||
        (st = favor__same(w, on, "heads", o->heads, "q", q->heads)) != FAVOR_OK ||
        (st = favor__same(w, on, "rows", o->rows, "q", q->rows)) != FAVOR_OK ||
        (st = favor__same(w, on, "cols", o->cols, "v", v->cols)) != FAVOR_OK ||
        (st = favor__same(w, "k", "batch", favor__nbatch(k), "q", b)) != FAVOR_OK ||
        (st = favor__same(w, "v", "batch", favor__nbatch(v), "q", b)) != FAVOR_OK ||
        (st = favor__same(w, on, "batch", favor__nbatch(o), "q", b)) != FAVOR_OK)
        return st;
    if (q->heads % k->heads)
        return favor__no(w, FAVOR_E_SHAPE, "q: heads %z is not a multiple of k's heads %z",
                         q->heads, k->heads);
    return FAVOR_OK;
}

static favor_status favor__check_qkvo(const favor_tensor *q, const favor_tensor *k,
                                      const favor_tensor *v, const favor_tensor *o,
                                      favor__shape *sh, const favor__why *w)
{
    favor_status st;
    if (!q || !k || !v || !o)
        return favor__no(w, FAVOR_E_NULL, "%s is NULL", !q ? "q" : !k ? "k" : !v ? "v" : "out");
    if ((st = favor__check_tensor(q, "q", w, &sh->q)) != FAVOR_OK) return st;
    if ((st = favor__check_tensor(k, "k", w, &sh->k)) != FAVOR_OK) return st;
    if ((st = favor__check_tensor(v, "v", w, &sh->v)) != FAVOR_OK) return st;
    if ((st = favor__check_tensor(o, "out", w, &sh->o)) != FAVOR_OK) return st;
    if ((st = favor__check_shapes(q, k, v, o, "out", w)) != FAVOR_OK) return st;
    if (favor__overlap(sh->o, sh->q) || favor__overlap(sh->o, sh->k) ||
        favor__overlap(sh->o, sh->v))
        return favor__no(w, FAVOR_E_ALIAS, "out overlaps %s",
                         favor__overlap(sh->o, sh->q) ? "q" : favor__overlap(sh->o, sh->k) ? "k" : "v");
    sh->nother = 0;
    sh->ngrad = 0;
    sh->hq = favor__nheads(q);
    sh->hkv = favor__nheads(k);
    sh->n = q->rows;
    sh->nk = k->rows;
    sh->d = q->cols;
    sh->dv = v->cols;
    return FAVOR_OK;
}

/* The arguments of a backward call: q, k, v, dout (and out for softmax, shaped
 * as dout) checked as a forward call's q, k, v, out, then dq, dk, dv shaped as
 * q, k, v and overlapping nothing (each other, an input, sh->other). The inputs
 * may overlap each other. */
static favor_status favor__check_backward(const favor_tensor *q, const favor_tensor *k,
                                          const favor_tensor *v, const favor_tensor *out,
                                          const favor_tensor *dout, const favor_tensor *dq,
                                          const favor_tensor *dk, const favor_tensor *dv,
                                          int with_out, favor__shape *sh, const favor__why *w)
{
    static const char *const gname[3] = { "dq", "dk", "dv" }, *const lname[3] = { "q", "k", "v" };
    const favor_tensor *g[3], *like[3];
    favor__range r;
    favor_status st;
    int i, j;
    g[0] = dq; g[1] = dk; g[2] = dv;
    like[0] = q; like[1] = k; like[2] = v;
    if (!q || !k || !v || !dout || !dq || !dk || !dv || (with_out && !out))
        return favor__no(w, FAVOR_E_NULL, "%s is NULL",
                         !q ? "q" : !k ? "k" : !v ? "v" : !dout ? "dout" : !dq ? "dq" : !dk ? "dk"
                                                            : !dv ? "dv" : "out");
    if ((st = favor__check_tensor(q, "q", w, &sh->q)) != FAVOR_OK) return st;
    if ((st = favor__check_tensor(k, "k", w, &sh->k)) != FAVOR_OK) return st;
    if ((st = favor__check_tensor(v, "v", w, &sh->v)) != FAVOR_OK) return st;
    sh->nother = 0;
    sh->ngrad = 0;
    if ((st = favor__check_tensor(dout, "dout", w, &r)) != FAVOR_OK) return st;
    sh->other[sh->nother++] = r;
    if (with_out) {
        if ((st = favor__check_tensor(out, "out", w, &r)) != FAVOR_OK) return st;
        if ((st = favor__same(w, "out", "heads", out->heads, "dout", dout->heads)) != FAVOR_OK ||
            (st = favor__same(w, "out", "rows", out->rows, "dout", dout->rows)) != FAVOR_OK ||
            (st = favor__same(w, "out", "cols", out->cols, "dout", dout->cols)) != FAVOR_OK ||
            (st = favor__same(w, "out", "batch", favor__nbatch(out), "dout",
                              favor__nbatch(dout))) != FAVOR_OK)
            return st;
        sh->other[sh->nother++] = r;
    }
    if ((st = favor__check_shapes(q, k, v, dout, "dout", w)) != FAVOR_OK) return st;
    for (i = 0; i < 3; ++i) {
        if ((st = favor__check_tensor(g[i], gname[i], w, &sh->grad[i])) != FAVOR_OK) return st;
        if ((st = favor__same(w, gname[i], "heads", g[i]->heads, lname[i], like[i]->heads)) !=
                FAVOR_OK ||
            (st = favor__same(w, gname[i], "rows", g[i]->rows, lname[i], like[i]->rows)) !=
                FAVOR_OK ||
            (st = favor__same(w, gname[i], "cols", g[i]->cols, lname[i], like[i]->cols)) !=
                FAVOR_OK ||
            (st = favor__same(w, gname[i], "batch", favor__nbatch(g[i]), lname[i],
                              favor__nbatch(like[i]))) != FAVOR_OK)
            return st;
    }
    for (i = 0; i < 3; ++i) {
        if (favor__overlaps_any(sh, sh->grad[i], 0))
            return favor__no(w, FAVOR_E_ALIAS, "%s overlaps an input of the call", gname[i]);
        for (j = 0; j < i; ++j)
            if (favor__overlap(sh->grad[i], sh->grad[j]))
                return favor__no(w, FAVOR_E_ALIAS, "%s overlaps %s", gname[i], gname[j]);
    }
    sh->ngrad = 3;
    sh->o = favor__range_of(NULL, 0);
    sh->hq = favor__nheads(q);
    sh->hkv = favor__nheads(k);
    sh->n = q->rows;
    sh->nk = k->rows;
    sh->d = q->cols;
    sh->dv = v->cols;
    return FAVOR_OK;
}

/* opts->lse, heads_q x n floats (an output of the forward, an input of the
 * backward) may overlap no tensor of the call; added to sh->other so the
 * workspace may not overlap it either. */
static favor_status favor__check_lse(const favor_options *opts, favor__shape *sh)
{
    size_t cnt, bytes;
    favor__range r;
    favor__why w = favor__why_of(opts);
    if (!opts || !opts->lse) return FAVOR_OK;
    if (!favor__mul_ok(sh->hq, sh->n, &cnt) || !favor__mul_ok(cnt, sizeof(float), &bytes) ||
        (uintptr_t)opts->lse > UINTPTR_MAX - bytes)
        return favor__no(&w, FAVOR_E_OVERFLOW, "opts.lse: %z heads x %z rows pass the end of "
                                               "the address space", sh->hq, sh->n);
    r = favor__range_of(opts->lse, bytes);
    if (favor__overlaps_any(sh, r, 1))
        return favor__no(&w, FAVOR_E_ALIAS, "opts.lse overlaps a tensor of the call");
    sh->other[sh->nother++] = r;
    return FAVOR_OK;
}

/* The score variants of a softmax call (opts: window, softcap, alibi, sinks;
 * with grad, dsinks): their values, and dsinks (heads_q floats, an output)
 * overlapping no tensor of the call nor the slopes and sinks (added to
 * sh->other, so the workspace may not overlap it either). heads: query heads of
 * a batch element. */
static favor_status favor__check_seqs(const favor_options *o, size_t n, size_t nk,
                                      const favor__why *w)
{
    size_t s, i;
    if (!o || !o->seqs) return FAVOR_OK;
    if (!o->seq_q) return favor__no(w, FAVOR_E_NULL, "opts.seq_q is NULL with %z seqs", o->seqs);
    if (o->seqs == SIZE_MAX) return favor__no(w, FAVOR_E_OVERFLOW, "opts.seqs is SIZE_MAX");
    if (!o->seq_k && n != nk)
        return favor__no(w, FAVOR_E_ARG, "opts.seq_k is NULL but k has %z rows, q %z", nk, n);
    for (i = 0; i < 2; ++i) {
        const size_t *p = i ? (o->seq_k ? o->seq_k : o->seq_q) : o->seq_q;
        const char *name = i ? "opts.seq_k" : "opts.seq_q";
        size_t end = i ? nk : n;
        (void)name;
        if (p[0] != 0) return favor__no(w, FAVOR_E_ARG, "%s[0] is %z, not 0", name, p[0]);
        for (s = 0; s < o->seqs; ++s)
            if (p[s + 1] < p[s])
                return favor__no(w, FAVOR_E_ARG, "%s[%z] is below %s[%z]", name, s + 1, name, s);
        if (p[o->seqs] != end)
            return favor__no(w, FAVOR_E_ARG, "%s[%z] is %z, not the %z rows of %s", name,
                             o->seqs, p[o->seqs], end, i ? "k" : "q");
    }
    return FAVOR_OK;
}

static favor_status favor__check_mods(const favor_options *o, const favor_tensor *q,
                                      const favor_tensor *k, int grad, favor__shape *sh)
{
    favor__why w = favor__why_of(o);
    size_t h, bytes, heads = q->heads;
    favor__range r;
    favor_status st;
    if (!o) return FAVOR_OK;
    if ((st = favor__check_seqs(o, q->rows, k->rows, &w)) != FAVOR_OK) return st;
    if ((o->flags & FAVOR_NO_NORM) || o->decay || o->gates || o->dgates)
        return favor__no(&w, FAVOR_E_ARG, "%s applies to linear attention only",
                         (o->flags & FAVOR_NO_NORM) ? "FAVOR_NO_NORM"
                         : o->decay                 ? "opts.decay"
                         : o->gates                 ? "opts.gates"
                                                    : "opts.dgates");
    if (o->mask) {
        const favor_tensor *m = o->mask;
        if ((st = favor__check_tensor(m, "opts.mask", &w, &r)) != FAVOR_OK) return st;
        if ((st = favor__same(&w, "opts.mask", "rows", m->rows, "q", q->rows)) != FAVOR_OK ||
            (m->cols != k->rows &&
             (st = favor__no(&w, FAVOR_E_SHAPE, "opts.mask: cols %z are not k's %z rows",
                             m->cols, k->rows)) != FAVOR_OK))
            return st;
        if (m->heads != 1 && m->heads != heads)
            return favor__no(&w, FAVOR_E_SHAPE, "opts.mask: heads %z is neither 1 nor q's %z",
                             m->heads, heads);
        if (favor__nbatch(m) != 1 && favor__nbatch(m) != favor__nbatch(q))
            return favor__no(&w, FAVOR_E_SHAPE, "opts.mask: batch %z is neither 1 nor q's %z",
                             favor__nbatch(m), favor__nbatch(q));
        if (favor__overlap(r, sh->o) || (sh->ngrad && (favor__overlap(r, sh->grad[0]) ||
                                                       favor__overlap(r, sh->grad[1]) ||
                                                       favor__overlap(r, sh->grad[2]))))
            return favor__no(&w, FAVOR_E_ALIAS, "an output overlaps opts.mask");
        sh->other[sh->nother++] = r; /* no later output may overlap it either */
    }
    /* a subnormal c has an infinite 1/c: a zero score would become 0 * inf */
    if (!(o->softcap >= 0.0f) || !(o->softcap <= FLT_MAX) ||
        (o->softcap != 0.0f && o->softcap < FLT_MIN))
        return favor__no(&w, FAVOR_E_ARG, "opts.softcap is NaN, negative, subnormal or infinite");
    for (h = 0; h < 2; ++h) { /* where the slopes and sinks end, before they are read */
        const float *a = h ? o->sinks : o->alibi;
        if (a && (!favor__mul_ok(heads, sizeof(float), &bytes) ||
                  (uintptr_t)a > UINTPTR_MAX - bytes))
            return favor__no(&w, FAVOR_E_OVERFLOW, "%s: %z floats pass the end of the address "
                                                   "space", h ? "opts.sinks" : "opts.alibi", heads);
    }
    for (h = 0; o->alibi && h < heads; ++h)
        if (!(o->alibi[h] >= -FLT_MAX && o->alibi[h] <= FLT_MAX))
            return favor__no(&w, FAVOR_E_ARG, "opts.alibi[%z] is not finite", h);
    for (h = 0; o->sinks && h < heads; ++h)
        if (!(o->sinks[h] <= FLT_MAX) && o->sinks[h] != -INFINITY)
            return favor__no(&w, FAVOR_E_ARG, "opts.sinks[%z] is NaN or +inf", h);
    bytes = heads * sizeof(float); /* used below only for an array given: checked above */
    for (h = 0; h < 2; ++h) { /* the slopes and sinks: inputs no output may overlap */
        const float *a = h ? o->sinks : o->alibi;
        if (!a) continue;
        r = favor__range_of(a, bytes);
        if (favor__overlap(r, sh->o) || (sh->ngrad && (favor__overlap(r, sh->grad[0]) ||
                                                       favor__overlap(r, sh->grad[1]) ||
                                                       favor__overlap(r, sh->grad[2]))))
            return favor__no(&w, FAVOR_E_ALIAS, "an output overlaps %s",
                             h ? "opts.sinks" : "opts.alibi");
        sh->other[sh->nother++] = r;
    }
    if (!grad || !o->dsinks) return FAVOR_OK;
    if (!o->sinks) return favor__no(&w, FAVOR_E_ARG, "opts.dsinks is given without opts.sinks");
    if (!favor__mul_ok(heads, sizeof(float), &bytes) ||
        (uintptr_t)o->dsinks > UINTPTR_MAX - bytes)
        return favor__no(&w, FAVOR_E_OVERFLOW, "opts.dsinks: %z floats pass the end of the "
                                               "address space", heads);
    r = favor__range_of(o->dsinks, bytes);
    if (favor__overlap(r, favor__range_of(o->sinks, bytes)) ||
        (o->alibi && favor__overlap(r, favor__range_of(o->alibi, bytes))) ||
        favor__overlaps_any(sh, r, 1))
        return favor__no(&w, FAVOR_E_ALIAS, "opts.dsinks overlaps %s",
                         favor__overlap(r, favor__range_of(o->sinks, bytes)) ? "opts.sinks"
                         : o->alibi && favor__overlap(r, favor__range_of(o->alibi, bytes))
                             ? "opts.alibi"
                             : "a tensor of the call");
    sh->other[sh->nother++] = r;
    return FAVOR_OK;
}

/* Linear attention takes no score variant: FAVOR_E_ARG naming the first given */
static favor_status favor__check_no_mods(const favor_options *o, const favor__why *w)
{
    const char *what;
    if (!o) return FAVOR_OK;
    what = (o->flags & FAVOR_WINDOW) ? "FAVOR_WINDOW" : o->softcap != 0.0f ? "opts.softcap"
           : o->alibi ? "opts.alibi" : o->sinks ? "opts.sinks" : o->dsinks ? "opts.dsinks"
           : o->mask ? "opts.mask" : NULL;
    if (!what) return FAVOR_OK;
    return favor__no(w, FAVOR_E_ARG, "%s applies to softmax attention only", what);
}

/* Workspace: the caller's (checked for size and overlap) or an allocation. Any
 * address will do: the buffers are carved from the first 64-byte boundary, and
 * the sizes the queries report include that slack. 0 means overflow. */
#define FAVOR__ALIGN 64

static size_t favor__ws_bytes(size_t floats)
{
    size_t bytes;
    if (!floats || !favor__mul_ok(floats, sizeof(float), &bytes) ||
        !favor__add_ok(bytes, FAVOR__ALIGN, &bytes))
        return 0;
    return bytes;
}

static float *favor__align(void *p)
{
    uintptr_t a = (uintptr_t)p, r = a % FAVOR__ALIGN;
    return (float *)(void *)((unsigned char *)p + (r ? FAVOR__ALIGN - r : 0));
}

static favor_status favor__ws_get(const favor_options *o, size_t floats, const favor__shape *sh,
                                  float **ws, void **owned)
{
    size_t bytes = favor__ws_bytes(floats);
    favor__why w = favor__why_of(o);
    *owned = NULL;
    *ws = NULL;
    if (!bytes) return favor__no(&w, FAVOR_E_OVERFLOW, "the workspace size overflows size_t");
    if (o && o->workspace) {
        favor__range r;
        if (o->workspace_size < bytes)
            return favor__no(&w, FAVOR_E_WORKSPACE, "opts.workspace: %z bytes, the call needs %z",
                             o->workspace_size, bytes);
        if ((uintptr_t)o->workspace > UINTPTR_MAX - bytes)
            return favor__no(&w, FAVOR_E_OVERFLOW,
                             "opts.workspace: %z bytes pass the end of the address space", bytes);
        r = favor__range_of(o->workspace, bytes);
        if (sh && favor__overlaps_any(sh, r, 1))
            return favor__no(&w, FAVOR_E_ALIAS, "opts.workspace overlaps a tensor of the call");
        *ws = favor__align(o->workspace);
        return FAVOR_OK;
    }
#ifdef FAVOR_NO_MALLOC
    return favor__no(&w, FAVOR_E_WORKSPACE,
                     "no opts.workspace (%z bytes), and FAVOR_NO_MALLOC allocates nothing", bytes);
#else
    *owned = FAVOR_MALLOC(bytes);
    if (!*owned) return favor__no(&w, FAVOR_E_NOMEM, "FAVOR_MALLOC(%z) returned NULL", bytes);
    *ws = favor__align(*owned);
    return FAVOR_OK;
#endif
}

/* FAVOR_E_OVERFLOW for a workspace whose size does not fit */
static favor_status favor__too_big(const favor_options *o)
{
    favor__why w = favor__why_of(o);
    return favor__no(&w, FAVOR_E_OVERFLOW, "the workspace size overflows size_t");
}

static void favor__ws_put(void *owned)
{
#ifdef FAVOR_NO_MALLOC
    (void)owned;
#else
    if (owned) FAVOR_FREE(owned);
#endif
}

/* Threads: with OpenMP (compiled with -fopenmp) a call runs its independent
 * pieces (softmax: query blocks of every head; linear: key/value heads, or their
 * segments and row blocks, "Splitting one key/value head"; backward: key/value
 * heads, or key parts and query blocks) on up to favor_options.threads threads
 * (0: omp_get_max_threads()), each with its own slice of the workspace. Every
 * piece is computed the same way whichever thread runs it, and how a call is cut
 * into pieces depends on its shape only (the softmax backward's choice between
 * whole heads and the split also on the thread count: both give the same bits),
 * so results do not depend on the thread count. Without OpenMP every call is
 * single-threaded. */
#ifdef _OPENMP
#include <omp.h>
#define FAVOR__TID() ((size_t)omp_get_thread_num())
#else
#define FAVOR__TID() ((size_t)0)
#endif
/* for (it = 0; it < n; ++it) CALL, the items dealt one at a time to the nt
 * threads (a variable of that name at each use), CALL on the thread tid_ (of
 * this region: its slice of the workspace). On one thread a plain loop, tid_
 * 0: a call on one thread enters no OpenMP region, since a region ends in a
 * barrier even for one thread, and libgomp's barrier is a futex system call
 * (one decode row, 64 keys of one head, Zen 5 VM: 7.4 us a call in a region,
 * 0.5 us without; orphaned, the loop constructs alone cost clang's libomp
 * about 1 us). Outside a region of this call omp_get_thread_num() is the
 * caller's thread's, not 0: such code takes tid_ or 0, never FAVOR__TID(). */
#define FAVOR__SEQ_FOR(it, n, CALL) /* the one-thread loop of FAVOR__PAR_FOR */              \
    for (it = 0; it < (n); ++it) {                                                               \
        const size_t tid_ = 0;                                                                   \
        CALL;                                                                                    \
    }
#ifdef _OPENMP
#define FAVOR__PAR_FOR(it, n, CALL)                                                              \
    do {                                                                                         \
        if (nt > 1) {                                                                            \
            _Pragma("omp parallel for num_threads((int)nt) schedule(dynamic, 1)")                \
            for (it = 0; it < (n); ++it) {                                                       \
                const size_t tid_ = FAVOR__TID();                                                \
                CALL;                                                                            \
            }                                                                                    \
        } else                                                                                   \
            FAVOR__SEQ_FOR(it, n, CALL)                                                          \
    } while (0)
#else
#define FAVOR__PAR_FOR(it, n, CALL)                                                              \
    do {                                                                                         \
        (void)nt;                                                                                \
        FAVOR__SEQ_FOR(it, n, CALL)                                                              \
    } while (0)
#endif
/* CALL on every thread of a region of nt threads (a variable of that name at
 * each use), with tid_ its thread and team_ 1; on one thread CALL here, with
 * tid_ 0 and team_ 0 and no region (FAVOR__PAR_FOR's reason). CALL's loops over
 * items are FAVOR__TEAM_FOR(team_, ...). */
#ifdef _OPENMP
#define FAVOR__TEAM(CALL)                                                                        \
    do {                                                                                         \
        if (nt > 1) {                                                                            \
            _Pragma("omp parallel num_threads((int)nt)")                                        \
            {                                                                                    \
                const size_t tid_ = FAVOR__TID();                                                \
                const int team_ = 1;                                                             \
                CALL;                                                                            \
            }                                                                                    \
        } else {                                                                                 \
            const size_t tid_ = 0;                                                               \
            const int team_ = 0;                                                                 \
            CALL;                                                                                \
        }                                                                                        \
    } while (0)
/* for (it = 0; it < n; ++it) CALL: in a region of FAVOR__TEAM (team nonzero)
 * the items dealt one at a time to its threads, each loop ending in the team's
 * barrier; with no region (team 0) a plain loop (an orphaned `omp for` would
 * bind to a caller's region and deal the items among its threads) */
#define FAVOR__TEAM_FOR(team, it, n, CALL)                                                       \
    do {                                                                                         \
        if (team) {                                                                              \
            _Pragma("omp for schedule(dynamic, 1)")                                             \
            for (it = 0; it < (n); ++it) {                                                       \
                CALL;                                                                            \
            }                                                                                    \
        } else                                                                                   \
            for (it = 0; it < (n); ++it) {                                                       \
                CALL;                                                                            \
            }                                                                                    \
    } while (0)
#else
#define FAVOR__TEAM(CALL)                                                                        \
    do {                                                                                         \
        const size_t tid_ = 0;                                                                   \
        const int team_ = 0;                                                                     \
        (void)nt;                                                                                \
        CALL;                                                                                    \
    } while (0)
#define FAVOR__TEAM_FOR(team, it, n, CALL)                                                       \
    do {                                                                                         \
        (void)(team);                                                                            \
        for (it = 0; it < (n); ++it) {                                                           \
            CALL;                                                                                \
        }                                                                                        \
    } while (0)
#endif

static size_t favor__nthreads(const favor_options *o)
{
#ifdef _OPENMP
    int t = (o && o->threads > 0) ? o->threads : omp_get_max_threads();
    return t > 0 ? (size_t)t : 1;
#else
    (void)o;
    return 1;
#endif
}

/* floats of workspace for nt slices of `per` floats, each rounded up to 64 bytes
 * so every slice starts aligned; 0 on overflow */
static size_t favor__slices(size_t per, size_t nt, size_t *stride)
{
    size_t r = (per + FAVOR__ALIGN / sizeof(float) - 1) / (FAVOR__ALIGN / sizeof(float));
    if (!per || r > SIZE_MAX / (FAVOR__ALIGN / sizeof(float))) return 0;
    *stride = r * (FAVOR__ALIGN / sizeof(float));
    if (*stride > SIZE_MAX / nt) return 0;
    return *stride * nt;
}

/* Element types at the edge of a tile. The kernels compute in fp32 on rows they
 * see as (const float *, stride). An fp32 tensor's rows are used in place; the
 * rows of a 16-bit tensor are widened into a buffer of rows x cols floats
 * (stride cols) as they enter a tile, and an output's rows are computed in such
 * a buffer and rounded once into the tensor when they are final. A buffer is
 * needed only for a 16-bit tensor (favor__io_floats). */
static size_t favor__io_floats(const favor_tensor *t, size_t rows)
{
    return t->dtype == FAVOR_F32 ? 0 : rows * t->cols; /* rows, cols of a valid call: fits */
}

/* the address of row r of head h (r may be one past the last) */
static void *favor__at(const favor_tensor *t, size_t h, size_t r)
{
    size_t e = t->batch > 1 ? h / t->heads * t->batch_stride + h % t->heads * t->head_stride
                            : h * t->head_stride; /* h counts the heads of every batch element */
    return (unsigned char *)t->data + (e + r * t->row_stride) * favor_dtype_size(t->dtype);
}

/* nr rows from row r0 of head h into buf (stride ldb), as fp32; rows that are
 * adjacent in the tensor and in buf in one pass */
static void favor__widen_rows(const favor_tensor *t, size_t h, size_t r0, size_t nr, float *buf,
                              size_t ldb)
{
    const unsigned char *row = (const unsigned char *)favor__at(t, h, r0);
    const size_t step = t->row_stride * favor_dtype_size(t->dtype);
    size_t i, cols = t->cols;
    if (t->row_stride == cols && ldb == cols) {
        cols *= nr;
        nr = 1;
    }
    for (i = 0; i < nr; ++i, row += step) {
        const void *src = row;
        if (t->dtype == FAVOR_F16) favor__widen_f16(buf + i * ldb, (const uint16_t *)src, cols);
        else if (t->dtype == FAVOR_BF16) favor__widen_bf16(buf + i * ldb, (const uint16_t *)src, cols);
        else memcpy(buf + i * ldb, src, cols * sizeof(float));
    }
}

/* nr rows from row r0 of head h as fp32: the tensor's own (*ld its row stride)
 * or, for a 16-bit tensor, widened into buf (*ld = cols) */
static const float *favor__in(const favor_tensor *t, size_t h, size_t r0, size_t nr, float *buf,
                              size_t *ld)
{
    if (t->dtype == FAVOR_F32) {
        *ld = t->row_stride;
        return (const float *)favor__at(t, h, r0);
    }
    favor__widen_rows(t, h, r0, nr, buf, t->cols);
    *ld = t->cols;
    return buf;
}

/* where the fp32 rows of an output from row r0 of head h are computed: in the
 * tensor (fp32) or in buf, to be rounded into it by favor__out_done */
static float *favor__out(const favor_tensor *t, size_t h, size_t r0, float *buf, size_t *ld)
{
    if (t->dtype == FAVOR_F32) {
        *ld = t->row_stride;
        return (float *)favor__at(t, h, r0);
    }
    *ld = t->cols;
    return buf;
}

/* nr rows at buf (stride ldb) rounded into rows r0.. of head h of a 16-bit t;
 * nothing for an fp32 t (its rows were computed in place) */
static void favor__out_done(const favor_tensor *t, size_t h, size_t r0, size_t nr,
                            const float *buf, size_t ldb)
{
    size_t i;
    for (i = 0; t->dtype != FAVOR_F32 && i < nr; ++i) {
        uint16_t *dst = (uint16_t *)favor__at(t, h, r0 + i);
        if (t->dtype == FAVOR_F16) favor__narrow_f16(dst, buf + i * ldb, t->cols);
        else favor__narrow_bf16(dst, buf + i * ldb, t->cols);
    }
}

/* prefetch nr rows from row r0 of head h (see favor__prefetch) */
static void favor__prefetch_rows(const favor_tensor *t, size_t h, size_t r0, size_t nr, int far)
{
    size_t es = favor_dtype_size(t->dtype);
    if (nr) favor__prefetch(favor__at(t, h, r0), nr, t->row_stride * es, t->cols * es, far);
}

/* 4.8 Operations: small public functions -------------------------------------- */
FAVOR__DEF const char *favor_status_string(favor_status s)
{
    switch (s) {
    case FAVOR_OK: return "FAVOR_OK: success";
    case FAVOR_E_NULL: return "FAVOR_E_NULL: a required pointer is NULL";
    case FAVOR_E_SHAPE: return "FAVOR_E_SHAPE: a size is zero, a stride is below the row, or shapes do not match";
    case FAVOR_E_OVERFLOW: return "FAVOR_E_OVERFLOW: a size or offset overflows";
    case FAVOR_E_ALIAS: return "FAVOR_E_ALIAS: an output overlaps an input or another output";
    case FAVOR_E_WORKSPACE: return "FAVOR_E_WORKSPACE: workspace too small or missing";
    case FAVOR_E_NOMEM: return "FAVOR_E_NOMEM: allocation failed";
    case FAVOR_E_ARG: return "FAVOR_E_ARG: unknown kernel, flag or role, or a bad option or value";
    }
    return "favor: unknown status";
}

FAVOR__DEF const char *favor_backend(void)
{
#if FAVOR_SIMD == FAVOR_AVX512
    return "avx512";
#elif FAVOR_SIMD == FAVOR_AVX2
    return "avx2";
#elif FAVOR_SIMD == FAVOR_NEON
    return "neon";
#else
    return "scalar";
#endif
}

FAVOR__DEF favor_tensor favor_tensor_packed(float *data, size_t heads, size_t rows, size_t cols)
{
    return favor_tensor_packed_as(FAVOR_F32, data, heads, rows, cols);
}

FAVOR__DEF size_t favor_dtype_size(favor_dtype dtype)
{
    switch (dtype) {
    case FAVOR_F32: return sizeof(float);
    case FAVOR_F16: case FAVOR_BF16: return sizeof(uint16_t);
    }
    return 0;
}

FAVOR__DEF favor_tensor favor_tensor_packed_as(favor_dtype dtype, void *data, size_t heads,
                                              size_t rows, size_t cols)
{
    favor_tensor t;
    t.data = data;
    t.dtype = dtype;
    t.heads = heads;
    t.rows = rows;
    t.cols = cols;
    t.row_stride = cols;
    t.head_stride = rows * cols; /* an overflow here is caught by validation */
    if (cols && t.head_stride / cols != rows) t.head_stride = SIZE_MAX;
    t.batch = 1;
    t.batch_stride = 0;
    return t;
}

FAVOR__DEF favor_tensor favor_tensor_batched(favor_dtype dtype, void *data, size_t batch,
                                            size_t heads, size_t rows, size_t cols)
{
    favor_tensor t = favor_tensor_packed_as(dtype, data, heads, rows, cols);
    t.batch = batch;
    t.batch_stride = heads * t.head_stride; /* as above */
    if (heads && t.batch_stride / heads != t.head_stride) t.batch_stride = SIZE_MAX;
    return t;
}

FAVOR__DEF favor_options favor_default_options(void)
{
    favor_options o;
    o.flags = 0;
    o.scale = 0.0f;
    o.threads = 0;
    o.workspace = NULL;
    o.workspace_size = 0;
    o.lse = NULL;
    o.error = NULL;
    o.error_size = 0;
    o.window_left = 0;
    o.window_right = 0;
    o.softcap = 0.0f;
    o.alibi = NULL;
    o.sinks = NULL;
    o.dsinks = NULL;
    o.mask = NULL;
    o.seqs = 0;
    o.seq_q = NULL;
    o.seq_k = NULL;
    o.decay = NULL;
    o.gates = NULL;
    o.dgates = NULL;
    return o;
}

FAVOR__DEF size_t favor_features_floats(favor_kernel kernel, size_t dim, size_t count)
{
    size_t n;
    if (!favor__kernel_ok((int)kernel) || !dim) return 0;
    if (favor__fixed(kernel)) return 0;
    if (!count || !favor__mul_ok(count, dim, &n) || !favor__mul_ok(n, 2, &n) ||
        !favor__add_ok(n, 2 * dim, &n) || n > SIZE_MAX / sizeof(float))
        return 0;
    return n; /* W, W^T, and a d-double scratch row for sampling */
}

static void favor__features_fill(favor_features *f)
{
    size_t m = f->count, d = f->dim;
    favor__rng g;
    favor__rng_init(&g, f->seed);
    favor__draw(&g, m, d, f->flags, (unsigned char *)(f->wt + m * d), f->w);
    favor__transpose(m, d, f->w, d, f->wt, m);
}

FAVOR__DEF favor_status favor_features_init(favor_features *f, favor_kernel kernel, size_t dim,
                                           size_t count, unsigned flags,
                                           unsigned long long seed, float *storage)
{
    size_t floats;
    if (!f) return FAVOR_E_NULL;
    if (!favor__kernel_ok((int)kernel) || (flags & ~(FAVOR_IID | FAVOR_REGULAR_NORM)))
        return FAVOR_E_ARG;
    if (!dim) return FAVOR_E_SHAPE;
    if (favor__fixed(kernel)) {
        if (count != 0 && count != dim) return FAVOR_E_SHAPE;
        if (!favor__width(kernel, dim, dim)) return FAVOR_E_OVERFLOW;
        count = dim;
    } else {
        if (!count) return FAVOR_E_SHAPE;
        floats = favor_features_floats(kernel, dim, count);
        if (!floats) return FAVOR_E_OVERFLOW;
        if (!storage) return FAVOR_E_NULL;
    }
    f->kernel = kernel;
    f->flags = flags;
    f->dim = dim;
    f->count = count;
    f->scale = (float)(1.0 / sqrt((double)dim));
    f->seed = seed;
    f->w = NULL;
    f->wt = NULL;
    if (!favor__fixed(kernel)) {
        f->w = storage;
        f->wt = storage + count * dim;
        favor__features_fill(f);
    }
    return FAVOR_OK;
}

FAVOR__DEF favor_status favor_features_redraw(favor_features *f, unsigned long long seed)
{
    favor_status st = favor__check_features(f, NULL);
    if (st != FAVOR_OK) return st;
    f->seed = seed;
    if (!favor__fixed(f->kernel)) favor__features_fill(f);
    return FAVOR_OK;
}

FAVOR__DEF size_t favor_features_width(const favor_features *f)
{
    if (favor__check_features(f, NULL) != FAVOR_OK) return 0;
    return favor__width(f->kernel, f->dim, f->count);
}

/* Rows of favor_feature_map pass through buffers of this many floats on the
 * stack when x or phi is 16-bit. */
#define FAVOR__FMAP_STACK 2048

/* head h of favor_feature_map, in blocks of nb rows; xb, pb: nb x d, nb x width
 * buffers for a 16-bit x, phi */
static void favor__feature_head(const favor__map *mp, const favor_tensor *x,
                                const favor_tensor *phi, favor_role role, size_t h, size_t nb,
                                float *xb, float *pb)
{
    size_t i, i0, ldx, ldp, rows = x->rows;
    float r[64], c[64], cmax = -INFINITY;
    int key = role == FAVOR_KEY && favor__stabilized(mp->kernel);
    int later = key && phi->dtype == FAVOR_F32; /* fp32 phi: finished in place afterwards */
    if (key && !later) /* the head's stabilizer first: phi 16-bit holds no raw values */
        for (i0 = 0; i0 < rows; i0 += nb) {
            size_t n = rows - i0 < nb ? rows - i0 : nb;
            const float *X = favor__in(x, h, i0, n, xb, &ldx);
            favor__phi_raw(mp, X, ldx, n, pb, mp->width, r);
            for (i = 0; i < n; ++i) cmax = favor__s_max(r[i], cmax);
        }
    for (i0 = 0; i0 < rows; i0 += nb) {
        size_t n = rows - i0 < nb ? rows - i0 : nb;
        const float *X = favor__in(x, h, i0, n, xb, &ldx);
        float *P = favor__out(phi, h, i0, pb, &ldp);
        favor__phi_raw(mp, X, ldx, n, P, ldp, r);
        for (i = 0; i < n; ++i) {
            c[i] = role == FAVOR_QUERY ? r[i] : key ? cmax : 0.0f;
            if (later) cmax = favor__s_max(r[i], cmax);
        }
        if (!later) {
            favor__phi_finish(mp, P, ldp, n, r, c);
            favor__out_done(phi, h, i0, n, P, ldp);
        }
    }
    if (later) /* second pass: one constant for the whole head */
        for (i0 = 0; i0 < rows; i0 += nb) {
            size_t n = rows - i0 < nb ? rows - i0 : nb;
            const float *X = favor__in(x, h, i0, n, xb, &ldx);
            float *P = favor__out(phi, h, i0, pb, &ldp);
            for (i = 0; i < n; ++i) {
                c[i] = cmax;
                r[i] = mp->half_s * favor__dot(X + i * ldx, X + i * ldx, mp->d); /* TRIG */
            }
            favor__phi_finish(mp, P, ldp, n, r, c);
        }
}

FAVOR__DEF favor_status favor_feature_map(const favor_features *f, const favor_tensor *x,
                                         const favor_tensor *phi, favor_role role)
{
    favor__range rx, rp;
    favor__map mp;
    favor_status st;
    size_t h, per, nb = 64;
    float stack[FAVOR__FMAP_STACK], *buf = stack;
    void *owned = NULL;
    if (!f || !x || !phi) return FAVOR_E_NULL;
    if ((st = favor__check_features(f, NULL)) != FAVOR_OK) return st;
    if ((st = favor__check_tensor(x, "x", NULL, &rx)) != FAVOR_OK) return st;
    if ((st = favor__check_tensor(phi, "phi", NULL, &rp)) != FAVOR_OK) return st;
    if (role != FAVOR_QUERY && role != FAVOR_KEY && role != FAVOR_PLAIN) return FAVOR_E_ARG;
    favor__map_make(&mp, f, f->scale);
    if (x->cols != f->dim || phi->cols != mp.width || x->heads != phi->heads ||
        x->rows != phi->rows || favor__nbatch(x) != favor__nbatch(phi))
        return FAVOR_E_SHAPE;
    if (favor__overlap(rp, rx) ||
        (f->w && (favor__overlap(rp, favor__range_of(f->w, f->count * f->dim * sizeof(float))) ||
                  favor__overlap(rp, favor__range_of(f->wt, f->count * f->dim * sizeof(float))))))
        return FAVOR_E_ALIAS;
    /* a KEY map of a 16-bit phi takes a raw pass into the buffer: as if phi were 16-bit */
    per = favor__io_floats(x, 1) +
          (phi->dtype != FAVOR_F32 ? mp.width : 0); /* the fp32 floats of one row */
    if (per > FAVOR__FMAP_STACK) {
        size_t bytes = favor__ws_bytes(per);
        if (!bytes) return FAVOR_E_OVERFLOW;
#ifdef FAVOR_NO_MALLOC
        return FAVOR_E_WORKSPACE;
#else
        if (!(owned = FAVOR_MALLOC(bytes))) return FAVOR_E_NOMEM;
        buf = favor__align(owned);
        nb = 1;
#endif
    } else if (per) {
        nb = FAVOR__FMAP_STACK / per < 64 ? FAVOR__FMAP_STACK / per : 64;
    }
    for (h = 0; h < favor__nheads(x); ++h)
        favor__feature_head(&mp, x, phi, role, h, nb, buf,
                            buf + nb * favor__io_floats(x, 1));
    favor__ws_put(owned);
    return FAVOR_OK;
}

/* 4.9 Exact softmax attention --------------------------------------------------
 * Online softmax, key-major: for a block of BQ query rows (scaled by s and
 * transposed once, Qt = (sQ)^T, d x BQ), walk the visible keys in tiles of BK.
 * St = K_tile Qt (BK x BQ) holds one key per row and one query per lane, so the
 * per-query statistics (running maximum m, sum l) are vectors across the rows of
 * St: a tile's maximum is an elementwise max of its rows, exp(St - m) is
 * elementwise, and no horizontal operation or key transpose is needed. When a
 * query's maximum rises its accumulated output is rescaled; then O += P V with
 * P = St^T read in place. Masked scores are -inf; a query whose maximum is still
 * -inf uses -FLT_MAX in the subtraction so exp gives 0, not NaN. Memory: the
 * tiles, never n x n_k. */
#define FAVOR__BQ 64
#define FAVOR__BK 64

/* the log-sum-exp of a lane from its statistics; -inf when it saw no key */
static float favor__softmax_lse(float m, double l)
{
    return l > 0.0 ? (float)((double)m + log(l)) : -INFINITY;
}

/* a - b as the signed base of a causal staircase (favor__gemm_stair): row r of
 * a query block at i0 takes the keys j0 + j with j < (i0 + 1 + nk) - (n + j0) + r;
 * key row j takes the query rows r >= (j0 + n) - (nk + i0) + j. Sizes of valid
 * tensors are below PTRDIFF_MAX. */
static ptrdiff_t favor__causal_base(size_t a, size_t b)
{
    return a >= b ? (ptrdiff_t)(a - b) : -(ptrdiff_t)(b - a);
}

/* Score variants (favor_options: window, softcap, alibi, sinks). Query row i of
 * a head of n rows against n_k keys sits at position p_i = i + n_k - n, key j at
 * j. Which keys a row sees is one range, [lo, hi) (favor__keys): the causal
 * rule and the window cut it, and every pass (prefill, decode, backward, the
 * lse) asks the same function, so a tile outside every row's range is never
 * read. The score of a visible key is
 *     x = s q_i . k_j  ->  c tanh(x / c)  ->  - m_h |p_i - j|
 * and a sink logit s_h joins each row's denominator when the row is finished
 * (favor__row_end). */
typedef struct {
    ptrdiff_t left, right; /* the window's sides, -1: unbounded; causal: right 0 */
    float cap;             /* softcap c, 0: none */
    const float *alibi, *sinks;
    size_t heads;          /* query heads of a batch element: alibi[h % heads] */
    const favor_tensor *mask;  /* the call's (a sequence's sub-view), or NULL */
    const unsigned char *map;  /* with a mask, prefill and backward: per mask
                                  head, query block and key tile, 0 when the
                                  tile is -inf for every row (favor__mask_map) */
    size_t map_blocks, map_tiles;
} favor__mods;

/* The window's right side as the offset of a staircase (favor__gemm_stair):
 * row i's last key is p_i + right; past n + n_k every row sees every key, so the
 * side is cut there (no overflow). Only for a bounded side (right >= 0: the
 * causal rule is right = 0). The products over a tile then skip the later keys a
 * row does not see, so a NaN or inf there cannot reach it through a zero
 * weight (fuzz finding 11: a window of 8 keys to the right, inf in a later
 * value, NaN in a row that sees none of them). */
static size_t favor__right(const favor__mods *md, size_t n, size_t nk)
{
    return md->right < (ptrdiff_t)(n + nk) ? (size_t)md->right : n + nk;
}

static void favor__mods_of(favor__mods *md, const favor_options *o, size_t heads)
{
    int win = o && (o->flags & FAVOR_WINDOW);
    md->left = win && o->window_left >= 0 ? o->window_left : -1;
    md->right = win && o->window_right >= 0 ? o->window_right : -1;
    if (o && (o->flags & FAVOR_CAUSAL)) md->right = 0;
    md->cap = o ? o->softcap : 0.0f;
    md->alibi = o ? o->alibi : NULL;
    md->sinks = o ? o->sinks : NULL;
    md->heads = heads;
    md->mask = o ? o->mask : NULL;
    md->map = NULL;
    md->map_blocks = md->map_tiles = 0;
}

/* the head of the mask that flat query head h adds (its batch element's, or the
 * one shared) */
static size_t favor__mask_head(const favor__mods *md, size_t h)
{
    const favor_tensor *m = md->mask;
    size_t b = m->batch > 1 ? h / md->heads : 0;
    return b * m->heads + (m->heads > 1 ? h % md->heads : 0);
}

/* the view of columns [c0, c0 + nc) of t */
static favor_tensor favor__cols(const favor_tensor *t, size_t c0, size_t nc)
{
    favor_tensor c = *t;
    c.data = (unsigned char *)t->data + c0 * favor_dtype_size(t->dtype);
    c.cols = nc;
    return c;
}

/* the view of rows [r0, r0 + nr) of t */
static favor_tensor favor__rows(const favor_tensor *t, size_t r0, size_t nr)
{
    favor_tensor c = *t;
    c.data = (unsigned char *)t->data + r0 * t->row_stride * favor_dtype_size(t->dtype);
    c.rows = nr;
    return c;
}

/* the fp32 rows [r0, r0 + nr), columns [c0, c0 + nc) of mask head mh (*ld
 * apart; 16-bit ones widened into buf, nr x nc) */
static const float *favor__mask_tile(const favor_tensor *m, size_t mh, size_t r0, size_t nr,
                                     size_t c0, size_t nc, float *buf, size_t *ld)
{
    favor_tensor t = favor__cols(m, c0, nc);
    return favor__in(&t, mh, r0, nr, buf, ld);
}

/* 1 when some of the nc mask values at M is not -inf: any bits other than
 * -inf's (so a NaN counts), vectors ORed without early exit */
static int favor__mask_any(const float *M, size_t nc)
{
    const favor__vu ninf = favor__v_iset1(0xFF800000u);
    favor__vu acc = favor__v_iset1(0u);
    float lane[FAVOR__W];
    uint32_t u, any = 0;
    size_t c, nv = nc - nc % FAVOR__W;
    for (c = 0; c < nv; c += FAVOR__W)
        acc = favor__v_ior(acc, favor__v_isub(favor__v_asint(favor__v_load(M + c)), ninf));
    favor__v_store(lane, favor__v_asfloat(acc));
    for (c = 0; c < FAVOR__W; ++c) {
        memcpy(&u, lane + c, sizeof u);
        any |= u;
    }
    for (c = nv; c < nc; ++c) any |= M[c] != -INFINITY;
    return any != 0;
}

/* the keys [*lo, *hi) row i of n sees among nk (empty: *lo == *hi) */
static void favor__keys(const favor__mods *md, size_t n, size_t nk, size_t i, size_t *lo,
                        size_t *hi)
{
    ptrdiff_t p = (ptrdiff_t)(i + nk) - (ptrdiff_t)n, a = 0, b = (ptrdiff_t)nk;
    if (md->right >= 0 && md->right < b - p) b = p + md->right + 1;
    if (md->left >= 0 && p > md->left) a = p - md->left;
    if (b < 0) b = 0;
    if (a > b) a = b;
    *lo = (size_t)a;
    *hi = (size_t)b;
}

/* ALiBi slope and sink logit of flat query head h (0 and -inf: none) */
static float favor__slope(const favor__mods *md, size_t h)
{
    return md->alibi ? md->alibi[h % md->heads] : 0.0f;
}
static float favor__sink(const favor__mods *md, size_t h)
{
    return md->sinks ? md->sinks[h % md->heads] : -INFINITY;
}

/* A row's end: its lse from the running maximum m and sum l (with the sink
 * logit when finite), and *f, the factor of its accumulated output (0 when it
 * saw no key: the row stays zero). Without a sink, exactly 1 / l. */
static float favor__row_end(float m, double l, float sink, float *f)
{
    double M, L, e;
    if (!(sink > -INFINITY)) {
        *f = l > 0.0 ? (float)(1.0 / l) : 0.0f;
        return favor__softmax_lse(m, l);
    }
    M = l > 0.0 && (double)m > (double)sink ? (double)m : (double)sink;
    e = l > 0.0 ? exp((double)m - M) : 0.0;
    L = l * e + exp((double)sink - M);
    *f = (float)(e / L);
    return (float)(M + log(L));
}

/* The rows [i0, i0 + nq) of a block and the keys they see */
typedef struct {
    size_t lo[FAVOR__BQ], hi[FAVOR__BQ]; /* each row's keys */
    size_t beg, end;   /* the keys some row sees: [beg, end) (beg == end: none):
                          the block's tiles start at beg */
    size_t all0, all1; /* the keys every row sees: [all0, all1) when all0 < all1 */
    size_t i0, nq;
    ptrdiff_t p0;      /* position of row i0 */
    float slope;
    size_t mh;         /* the mask's head */
    const unsigned char *map; /* the block's row of the tile map, or NULL */
    size_t stop;       /* the keys the block's loop reads end here (<= end) */
    size_t st0, st1;   /* the keys of the mask's stage (favor__mask_rows) */
    size_t pf0, pf1;   /* the keys of the next stage, whose rows are prefetched */
    size_t pfr;        /* how many of them (favor__mask_ahead) */
} favor__blk;

static void favor__blk_make(favor__blk *bk, const favor__mods *md, size_t n, size_t nk,
                            size_t i0, size_t h)
{
    size_t r;
    bk->i0 = i0;
    bk->nq = n - i0 < FAVOR__BQ ? n - i0 : FAVOR__BQ;
    bk->p0 = (ptrdiff_t)(i0 + nk) - (ptrdiff_t)n;
    bk->slope = favor__slope(md, h);
    bk->beg = nk;
    bk->end = 0;
    bk->all0 = 0;
    bk->all1 = nk;
    for (r = 0; r < bk->nq; ++r) {
        favor__keys(md, n, nk, i0 + r, &bk->lo[r], &bk->hi[r]);
        if (bk->lo[r] < bk->hi[r]) {
            if (bk->lo[r] < bk->beg) bk->beg = bk->lo[r];
            if (bk->hi[r] > bk->end) bk->end = bk->hi[r];
        }
        if (bk->lo[r] > bk->all0) bk->all0 = bk->lo[r];
        if (bk->hi[r] < bk->all1) bk->all1 = bk->hi[r];
    }
    if (bk->beg >= bk->end) bk->beg = bk->end = 0;
    bk->mh = md->mask ? favor__mask_head(md, h) : 0;
    bk->map = md->map ? md->map + (bk->mh * md->map_blocks + i0 / FAVOR__BQ) * md->map_tiles
                      : NULL;
    bk->stop = bk->end;
    bk->st0 = bk->st1 = 0;
    bk->pf0 = bk->pf1 = bk->pfr = 0;
}

/* 0 when the map says the keys [j0, j0 + nb), nb <= BK, are -inf for all the
 * block's rows (the map's tiles are aligned, so these keys meet one or two) */
static int favor__tile_live(const favor__blk *bk, size_t j0, size_t nb)
{
    return !bk->map || bk->map[j0 / FAVOR__BK] || bk->map[(j0 + nb - 1) / FAVOR__BK];
}

/* The mask's stage. A tile's mask is 64 pieces of 256 bytes, one per row, a
 * mask row apart: read tile by tile, the pieces come from DRAM one short run
 * at a time, and with a row stride of a power of two they share cache sets and
 * evict each other before they are used (a dense fp32 mask cost 1.4x the
 * unmasked call on Zen 5, against 1.1x when its tiles were in cache). So the
 * mask is read a stage at a time: the block's rows of up to FAVOR__MSTAGE
 * tiles the loop is about to read, live ones in a row. While the products of
 * one stage's tiles are summed, the next stage's rows are prefetched, a slice
 * of rows between slices of the products (favor__mask_ahead), so that the
 * misses overlap the arithmetic (Zen 3, a driver, a dense fp32 mask at n =
 * 4096: from 1.24-1.29x the unmasked call to 1.09-1.10x; at 8192, 1.29x to
 * 1.08-1.13x; favor_bench's rounds: 1.25x to 1.17-1.23x at both; issued
 * all at once, the prefetches stall the products). An fp32 mask's tiles are
 * then read where they are (a copy of them measured slower); a
 * 16-bit mask's stage is widened into rows FAVOR__MLD floats apart (16 more
 * than the tiles, so its rows do not share sets). The stage holds only what
 * the scores read, so the results do not depend on it. */
#define FAVOR__MSTAGE 2
#define FAVOR__MLD (FAVOR__MSTAGE * FAVOR__BK + 16)
/* floats of a masked block's scratch: the stage and one transposed tile */
#define FAVOR__MASK_FLOATS (FAVOR__BQ * FAVOR__MLD + FAVOR__BK * FAVOR__BQ)
/* key rows of the products between two slices of prefetches: one register
 * tile's rows (the products' bits do not depend on it). Zen 3, n = 8192: 1.08x
 * the unmasked call with 6 (its FAVOR__MR), 1.09 with 8, 1.15 with 12. */
#define FAVOR__MSLICE FAVOR__MR

/* the end of up to FAVOR__MSTAGE tiles from key j on, live ones in a row (the
 * first one too unless `first`: the loop reads it) */
static size_t favor__mask_span(const favor__blk *bk, size_t j, int first)
{
    size_t t;
    for (t = 0; t < FAVOR__MSTAGE && j < bk->stop; ++t) {
        size_t w = bk->stop - j < FAVOR__BK ? bk->stop - j : FAVOR__BK;
        if ((t || !first) && !favor__tile_live(bk, j, w)) break;
        j += w;
    }
    return j;
}

/* the mask's rows of the tile [j0, j0 + nb), *ld floats apart: an fp32 mask's
 * own, or a 16-bit mask's widened into the stage (FAVOR__BQ FAVOR__MLD floats)
 * from j0 on when it does not hold them; a new stage starts the next one's
 * prefetch */
static const float *favor__mask_rows(const favor__mods *md, favor__blk *bk, size_t j0,
                                     size_t nb, float *stage, size_t *ld)
{
    const favor_tensor *m = md->mask;
    if (j0 < bk->st0 || j0 + nb > bk->st1) {
        bk->st0 = j0;
        bk->st1 = favor__mask_span(bk, j0, 1);
        bk->pf0 = bk->st1;
        bk->pf1 = favor__mask_span(bk, bk->pf0, 0);
        bk->pfr = 0;
        if (m->dtype != FAVOR_F32) {
            favor_tensor c = favor__cols(m, j0, bk->st1 - j0);
            favor__widen_rows(&c, bk->mh, bk->i0, bk->nq, stage, FAVOR__MLD);
        }
    }
    if (m->dtype == FAVOR_F32) {
        *ld = m->row_stride;
        return (const float *)favor__at(m, bk->mh, bk->i0) + j0;
    }
    *ld = FAVOR__MLD;
    return stage + (j0 - bk->st0);
}

/* prefetch the next `rows` of the next stage's rows (into L2: L1 holds this
 * tile's work; 1.12x the unmasked call, against 1.15-1.17x into L1, Zen 3) */
static void favor__mask_ahead(const favor__mods *md, favor__blk *bk, size_t rows)
{
    favor_tensor c;
    if (bk->pf0 >= bk->pf1 || bk->pfr >= bk->nq) return;
    if (rows > bk->nq - bk->pfr) rows = bk->nq - bk->pfr;
    c = favor__cols(md->mask, bk->pf0, bk->pf1 - bk->pf0);
    favor__prefetch_rows(&c, bk->mh, bk->i0 + bk->pfr, rows, 1);
    bk->pfr += rows;
}

/* The tile map of a masked call of n rows and nk keys (md->map_blocks query
 * blocks of BQ, md->map_tiles key tiles of BK): item it = (mask head, block),
 * whose mask rows are read once each, in order, skipping the tiles already
 * known to be live; buf: BK floats for a 16-bit mask */
static void favor__mask_map(const favor__mods *md, size_t n, size_t nk, size_t it,
                            unsigned char *map, float *buf)
{
    size_t mh = it / md->map_blocks, i0 = it % md->map_blocks * FAVOR__BQ, j0, ld, r;
    size_t nq = n - i0 < FAVOR__BQ ? n - i0 : FAVOR__BQ;
    unsigned char *row = map + it * md->map_tiles;
    memset(row, 0, md->map_tiles);
    for (r = 0; r < nq; ++r)
        for (j0 = 0; j0 < nk; j0 += FAVOR__BK) {
            size_t nb = nk - j0 < FAVOR__BK ? nk - j0 : FAVOR__BK;
            if (row[j0 / FAVOR__BK]) continue;
            row[j0 / FAVOR__BK] = (unsigned char)favor__mask_any(
                favor__mask_tile(md->mask, mh, i0 + r, 1, j0, nb, buf, &ld), nb);
        }
}

/* Fill md's tile map at map for n rows and nk keys, on nt threads (each with
 * ws + thread slice as scratch) */
static void favor__mask_maps(favor__mods *md, size_t n, size_t nk, float *map, float *ws,
                             size_t slice, size_t nt)
{
    long it;
    md->map_blocks = (n + FAVOR__BQ - 1) / FAVOR__BQ;
    md->map_tiles = (nk + FAVOR__BK - 1) / FAVOR__BK;
    md->map = NULL; /* favor__mask_map reads the mask, not the map */
    FAVOR__PAR_FOR(it, (long)(favor__nheads(md->mask) * md->map_blocks),
                   favor__mask_map(md, n, nk, (size_t)it, (unsigned char *)map,
                                   ws + tid_ * slice));
    md->map = (const unsigned char *)map;
}

/* bytes of the tile map of a masked call (0 without a mask), as floats */
static size_t favor__map_floats(const favor__mods *md, size_t n, size_t nk)
{
    size_t b = (n + FAVOR__BQ - 1) / FAVOR__BQ, t = (nk + FAVOR__BK - 1) / FAVOR__BK, all;
    if (!md->mask) return 0;
    if (!favor__mul_ok(b, t, &all) || !favor__mul_ok(all, favor__nheads(md->mask), &all))
        return SIZE_MAX;
    return all / sizeof(float) + 1;
}

/* Qt = (s Q_block)^T, d x BQ, the lanes past the nq rows zero */
static void favor__softmax_qt(const float *Q, size_t ldq, size_t nq, size_t d, float s, float *Qt)
{
    size_t c, r;
    favor__transpose(nq, d, Q, ldq, Qt, FAVOR__BQ);
    for (c = 0; c < d; ++c) {
        favor__scal(Qt + c * FAVOR__BQ, s, nq);
        for (r = nq; r < FAVOR__BQ; ++r) Qt[c * FAVOR__BQ + r] = 0.0f;
    }
}

/* St = K_tile Qt (nb x BQ) for keys [j0, j0 + nb) (the tile's rows at K) and
 * the rows of bk, each score x then c tanh(x / c) (T: tanh(x / c), when not
 * NULL), less m_h |p_i - j|, plus the mask (mb: FAVOR__MASK_FLOATS of scratch,
 * the stage's, kept from tile to tile of the block), and the keys a row does not
 * see at -inf (lanes past the rows are left as they are). Without softcap the
 * mask's tile, transposed to the key-major lanes, is where the products are
 * summed into (x = mask + q.k, ALiBi then added): the mask costs no pass of
 * its own. With `ahead` (or a mask), the products go a slice of FAVOR__MSLICE
 * keys at a time, each followed by its share of the rows ahead (into L2) and of
 * the mask's next stage; each score is the same sum either way. */
static void favor__softmax_scores(const float *K, size_t ldk, const float *Qt, float *St, float *T,
                                  size_t nb, size_t d, size_t j0, favor__blk *bk,
                                  const favor__mods *md, float *mb, const favor__ahead *ahead)
{
    const size_t BQ = FAVOR__BQ;
    size_t j, r, ldm = 0;
    const float *M = md->mask ? favor__mask_rows(md, bk, j0, nb, mb, &ldm) : NULL;
    int first = M && !(md->cap > 0.0f); /* the mask first, the products onto it */
    if (first) {
        favor__transpose(bk->nq, nb, M, ldm, St, BQ);
        if (bk->nq < BQ) /* the lanes past the rows: 0, as the products are */
            for (j = 0; j < nb; ++j) memset(St + j * BQ + bk->nq, 0, (BQ - bk->nq) * sizeof(float));
    }
    if (M || ahead) { /* the products a slice at a time, rows prefetched between */
        size_t tiles = (bk->st1 - bk->st0 + FAVOR__BK - 1) / FAVOR__BK;
        size_t slices = (nb + FAVOR__MSLICE - 1) / FAVOR__MSLICE;
        size_t rows = M ? ((bk->nq + tiles - 1) / tiles + slices - 1) / slices : 0;
        for (j = 0; j < nb; j += FAVOR__MSLICE) {
            size_t mr = nb - j < FAVOR__MSLICE ? nb - j : FAVOR__MSLICE;
            favor__gemm(mr, BQ, d, K + j * ldk, ldk, 1, Qt, BQ, St + j * BQ, BQ, first);
            if (M) favor__mask_ahead(md, bk, rows);
            if (ahead) {
                size_t a0 = j * ahead->rows / nb, a1 = (j + mr) * ahead->rows / nb;
                favor__ahead_rows(ahead, a0, a1, 1);
            }
        }
    } else favor__gemm(nb, BQ, d, K, ldk, 1, Qt, BQ, St, BQ, 0);
    if (md->cap > 0.0f)
        for (j = 0; j < nb; ++j) favor__softcap(St + j * BQ, T ? T + j * BQ : NULL, md->cap, BQ);
    if (bk->slope != 0.0f)
        for (j = 0; j < nb; ++j)
            favor__alibi(St + j * BQ, -bk->slope, (float)(bk->p0 - (ptrdiff_t)(j0 + j)), 1.0f, BQ);
    if (M && !first) { /* after the softcap: transposed, then added */
        float *Mt = mb + FAVOR__BQ * FAVOR__MLD;
        favor__transpose(bk->nq, nb, M, ldm, Mt, BQ);
        for (j = 0; j < nb; ++j) favor__vadd(St + j * BQ, Mt + j * BQ, bk->nq);
    }
    if (bk->all0 <= j0 && j0 + nb <= bk->all1) return; /* every row sees every key */
    for (j = 0; j < nb; ++j)
        for (r = 0; r < bk->nq; ++r)
            if (j0 + j < bk->lo[r] || j0 + j >= bk->hi[r]) St[j * BQ + r] = -INFINITY;
}

/* The running maximum of the online softmax, shared by the prefill and decode
 * paths: a tile whose largest score is tmax raises *m; returns the value the
 * tile's scores are reduced by before exp (the new maximum, or -FLT_MAX while
 * it is -inf, so a row that has seen no key gets exp(-inf) = 0, not NaN), and
 * *alpha = old maximum - that value, the log of the factor for what was
 * accumulated before. */
static float favor__online_max(float *m, float tmax, float *alpha)
{
    float mnew = favor__s_max(tmax, *m), mc = favor__s_max(mnew, -FLT_MAX);
    *alpha = *m - mc;
    *m = mnew;
    return mc;
}

/* One tile of scores into the running statistics of the query lanes: m the
 * maximum, l the sum of exp(score - m). St becomes exp(St - m_new) and alpha
 * exp(m_old - m_new), the factor of what was accumulated before; mc, tmp: BQ
 * floats of scratch. */
static void favor__softmax_stats(float *St, size_t nb, float *m, double *l, float *alpha,
                                 float *mc, float *tmp)
{
    const size_t BQ = FAVOR__BQ;
    size_t r;
    favor__cols_max(St, BQ, nb, BQ, tmp);
    for (r = 0; r < BQ; ++r) mc[r] = favor__online_max(m + r, tmp[r], alpha + r);
    favor__exp_add(alpha, alpha, 0.0f, BQ);
    favor__cols_exp_sum(St, BQ, nb, BQ, mc, tmp); /* the tile's sums */
    for (r = 0; r < BQ; ++r) l[r] = l[r] * alpha[r] + tmp[r];
}

/* A softmax call: its tensors and sizes (the decode path's fields after R) */
typedef struct {
    const favor_tensor *q, *k, *v, *o;
    float *lse;     /* its rows of head h at lse + h ldl, or NULL */
    size_t ldl;
    float *part;    /* decode: [g][block][row] records of d_v + 2 floats: m, l, A */
    size_t grp, n, nk, d, dv, R, nblk, b0; /* decode: blocks b0 .. b0 + nblk - 1 */
    float s;
    favor__mods md;
} favor__sm;

/* per-thread floats of the prefill: the tiles, and buffers for the 16-bit
 * inputs (the output's buffer is always counted: the query does not see it) */
static size_t favor__softmax_floats(const favor_tensor *q, const favor_tensor *k,
                                    const favor_tensor *v, int masked)
{
    size_t d = q->cols, dv = v->cols, a, b;
    if (d > SIZE_MAX / 8 / FAVOR__BQ || dv > SIZE_MAX / 8 / FAVOR__BQ) return 0;
    a = d * FAVOR__BQ + FAVOR__BK * FAVOR__BQ + (masked ? FAVOR__MASK_FLOATS : 0) +
        4 * FAVOR__BQ + dv * FAVOR__BQ;
    b = favor__io_floats(q, FAVOR__BQ) + favor__io_floats(k, FAVOR__BK) +
        favor__io_floats(v, FAVOR__BK);
    return a + b;
}

/* The prefill reads an fp32 K and V tile in place, and its products touch a
 * tile's lines a few at a time, in the order of the register tiles: little
 * memory-level parallelism when the tile is not in cache. So while one tile is
 * worked, the next one's rows are prefetched into L2, once the keys a query
 * block reads, (end - beg) (d + d_v) 4 bytes, pass FAVOR__PF_MIN: below that
 * they stay in a core's L2 from block to block and the prefetches cost 1-3%
 * (Zen 3, d = 64 and 128 at n = 1024). At n = 4096 and 8192, d = 128, they
 * took the non-causal call to 0.81-0.89 of its time (Zen 3), issued all at once
 * before the tile's products. On the Xeon of model 207 the calls without them
 * took 0.90-0.98 of that time (one thread, d = 64 and 128, n = 4096 and 8192):
 * the prefetches go a share after each slice of the scores' products instead
 * (favor__softmax_scores), the calls 0.95-1.0x the time of all at once there;
 * on a Zen 5 1.01-1.05x (none: 1.07-1.13x at d = 128, 0.96-0.99x at d = 64).
 * A 16-bit tile is widened row after row, a sequential read, and is not
 * prefetched. */
#define FAVOR__PF_MIN ((size_t)1 << 20)

/* query rows [i0, i0 + BQ) of head h: the key tiles they see */
static void favor__softmax_block(const favor__sm *x, size_t h, size_t i0, float *ws)
{
    const size_t BQ = FAVOR__BQ, n = x->n, nk = x->nk, d = x->d, dv = x->dv;
    const size_t g = h / x->grp;
    float *Qt = ws, *St = Qt + d * BQ, *m = St + FAVOR__BK * BQ, *mc = m + BQ, *alpha = mc + BQ;
    float *tmp = alpha + BQ, *Ob = tmp + BQ, *Qb = Ob + dv * BQ;
    float *Kb = Qb + favor__io_floats(x->q, BQ), *Vb = Kb + favor__io_floats(x->k, FAVOR__BK);
    float *mb = Vb + favor__io_floats(x->v, FAVOR__BK);
    float *lse = x->lse ? x->lse + h * x->ldl : NULL, *O, sink = favor__sink(&x->md, h), f;
    const float *Q, *K, *V;
    double l[FAVOR__BQ];
    size_t j0, r, ldq, ldk, ldv, ldo;
    int ahead;
    favor__blk bk;
    favor__ahead pf; /* the next tile's K and V rows (fp32) */
    favor__blk_make(&bk, &x->md, n, nk, i0, h);
    ahead = x->k->dtype == FAVOR_F32 && x->v->dtype == FAVOR_F32 &&
            (bk.end - bk.beg) * (d + dv) > FAVOR__PF_MIN / sizeof(float);
    pf.lda = x->k->row_stride * sizeof(float);
    pf.ldb = x->v->row_stride * sizeof(float);
    pf.a_bytes = x->k->cols * sizeof(float);
    pf.b_bytes = x->v->cols * sizeof(float);
    Q = favor__in(x->q, h, i0, bk.nq, Qb, &ldq);
    favor__softmax_qt(Q, ldq, bk.nq, d, x->s, Qt);
    for (r = 0; r < BQ; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0;
    }
    O = favor__out(x->o, h, i0, Ob, &ldo);
    for (r = 0; r < bk.nq; ++r) memset(O + r * ldo, 0, dv * sizeof(float));
    for (j0 = bk.beg; j0 < bk.end; j0 += FAVOR__BK) {
        size_t nb = bk.end - j0 < FAVOR__BK ? bk.end - j0 : FAVOR__BK;
        if (!favor__tile_live(&bk, j0, nb)) continue; /* masked for every row */
        K = favor__in(x->k, g, j0, nb, Kb, &ldk);
        V = favor__in(x->v, g, j0, nb, Vb, &ldv);
        if (ahead && bk.end - j0 > FAVOR__BK) { /* the next tile's rows, into L2 */
            pf.rows = bk.end - j0 - FAVOR__BK < FAVOR__BK ? bk.end - j0 - FAVOR__BK : FAVOR__BK;
            pf.a = favor__at(x->k, g, j0 + FAVOR__BK);
            pf.b = favor__at(x->v, g, j0 + FAVOR__BK);
        } else pf.rows = 0;
        favor__softmax_scores(K, ldk, Qt, St, NULL, nb, d, j0, &bk, &x->md, mb,
                              pf.rows ? &pf : NULL);
        favor__softmax_stats(St, nb, m, l, alpha, mc, tmp);
        for (r = 0; r < bk.nq; ++r)
            if (alpha[r] != 1.0f) favor__scal(O + r * ldo, alpha[r], dv);
        if (x->md.right >= 0) /* row r takes keys j0 + j < hi(i0 + r), no later one */
            favor__gemm_stair(bk.nq, dv, nb, 0,
                              favor__causal_base(i0 + 1 + nk + favor__right(&x->md, n, nk), n + j0),
                              St, 1, BQ, V, ldv, O, ldo);
        else
            favor__gemm(bk.nq, dv, nb, St, 1, BQ, V, ldv, O, ldo, 1);
    }
    for (r = 0; r < bk.nq; ++r) { /* a row that saw no key stays zero */
        float e = favor__row_end(m[r], l[r], sink, &f);
        if (f != 1.0f) favor__scal(O + r * ldo, f, dv);
        if (lse) lse[i0 + r] = e;
    }
    favor__out_done(x->o, h, i0, bk.nq, O, ldo);
}

/* Decode: few query rows against a long cache. A call with at most
 * FAVOR__DEC_ROWS query rows (one generated token, or a few speculative ones)
 * does little arithmetic per byte of K and V: memory bounds it. The prefill's
 * 64-lane query blocks would do up to 64x the useful work there and read K and
 * V once per query head, so these calls run in another order. For key/value head
 * g, the R = grp n rows of its query heads are gathered, scaled, into Qs: row
 * r = i grp + t is query row i of head g grp + t, so the rows of one position
 * are adjacent and one causal bound covers a run of grp rows. The keys are cut
 * into blocks of FAVOR__DEC_BLOCK (a partition fixed by n_k alone); a work item,
 * (g, block), runs the block's tiles of FAVOR__BK keys through
 *     S (R x nb) = Qs K_tile^T          favor__dots (the tile stays in L1 while
 *                                       every row uses it: K is read once)
 *     m, l, P = exp(S - m)              favor__online_max, per row
 *     A (R x dv) = alpha A + P V_tile   over the keys each row sees
 * and leaves the block's partial (m, l, A) of every row in the workspace. One
 * or two rows read the tiles in their element types (favor__dots_as, which adds
 * the previous tile's P V beside the scores, a row at a time): a 16-bit cache
 * is then read at half the bytes with no pass over a copy, and K and V are read
 * together. Other rows widen a 16-bit tile once
 * into an fp32 buffer that they all read (favor__in), and take P V as one
 * favor__gemm; rows that see the same keys are scored four at a time
 * (favor__dots4, each vector of the tile loaded once for the four), and when
 * there are exactly four, they read a 16-bit K tile in place (only V is
 * widened). Every path above adds each element's terms in the same order. Up
 * to FAVOR__DEC_GROUPED rows with d = d_v of 4 or 8 vectors take none of
 * those paths: favor__rows_as takes their keys, four rows at a time (then
 * two, then one) where the rows see the same keys, one at a time where they do
 * not, each row's running maximum and sum held in registers, K and V read once
 * per group, in place. Which path a call takes depends on its shape and
 * options, never on the element types. From
 * FAVOR__DEC_LANES rows on (whole vectors of them, no mask or ALiBi) the rows
 * are scored key-major instead, one row per lane (favor__decode_lanes), as
 * the prefill scores its query blocks. A
 * second pass merges each row's partials in block order and writes O = A / l
 * (and the lse). Neither pass depends on which thread ran what, so the results
 * do not depend on the thread count. Workspace: R (d + 2 BK) floats per thread
 * (and R d more for Qs^T when scored key-major, R BK with a mask), plus R (d_v
 * + 2) floats per block per key/value head, which grows with n_k. */
#define FAVOR__DEC_ROWS 32
#define FAVOR__DEC_BLOCK 512
#define FAVOR__DEC_DIRECT 2 /* the most rows that read tiles in place, a row at a time */
#define FAVOR__DEC_GROUPED 8 /* the most rows of favor__rows_as, by groups of four */
#define FAVOR__DEC_LANES 32 /* the fewest rows scored key-major (favor__decode_lanes) */

typedef favor__sm favor__dec;

/* 1 when the workspace of a decode call holds Qs^T for favor__decode_lanes:
 * R >= FAVOR__DEC_LANES and no mask or ALiBi, whose terms differ from lane to
 * lane (x->R set). The same for every backend, so that a size queried under one
 * holds for the others (FAVOR_DISPATCH, favor_set_backend). */
static int favor__dec_lanes_room(const favor__dec *x)
{
    return x->R >= FAVOR__DEC_LANES && !x->md.mask && !x->md.alibi;
}
/* 1 when the R rows are scored key-major: that, and whole vectors of rows */
static int favor__dec_lanes(const favor__dec *x)
{
    return favor__dec_lanes_room(x) && x->R % FAVOR__W == 0;
}

/* The decode layout of a call: R, the blocks, and the floats of its workspace
 * (per-thread slices of `*slice` floats, then the partials at *part_at); 0 when
 * a size overflows. */
static size_t favor__decode_floats(favor__dec *x, size_t hkv, size_t nt, size_t *slice,
                                   size_t *part_at)
{
    size_t per, part, all, i, lo, hi, beg = x->nk, end = 0;
    for (i = 0; i < x->n; ++i) { /* the blocks of the keys some row sees */
        favor__keys(&x->md, x->n, x->nk, i, &lo, &hi);
        if (lo < hi && lo < beg) beg = lo;
        if (lo < hi && hi > end) end = hi;
    }
    x->b0 = beg < end ? beg / FAVOR__DEC_BLOCK : 0;
    x->nblk = beg < end ? (end + FAVOR__DEC_BLOCK - 1) / FAVOR__DEC_BLOCK - x->b0 : 0;
    if (!favor__mul_ok(x->grp, x->n, &x->R) ||
        !favor__add_ok(x->d, 2 * FAVOR__BK, &per) ||
        !favor__add_ok(per, x->md.mask ? FAVOR__BK : favor__dec_lanes_room(x) ? x->d : 0, &per) ||
        !favor__mul_ok(per, x->R, &per) ||
        !favor__add_ok(per, x->dv + favor__io_floats(x->k, FAVOR__BK) +
                                favor__io_floats(x->v, FAVOR__BK), &per) ||
        !(*part_at = favor__slices(per, nt, slice)) ||
        !favor__mul_ok(x->dv + 2, x->R, &part) || !favor__mul_ok(part, x->nblk, &part) ||
        !favor__mul_ok(part, hkv, &part) || !favor__add_ok(*part_at, part, &all) ||
        all > SIZE_MAX / sizeof(float))
        return 0;
    return all;
}

/* the keys [*a, *b) of the tile [j0, j0 + nb) decode row i sees, from 0 */
static void favor__tile_keys(const favor__dec *x, size_t i, size_t j0, size_t nb, size_t *a,
                             size_t *b)
{
    size_t lo, hi;
    favor__keys(&x->md, x->n, x->nk, i, &lo, &hi);
    *a = lo <= j0 ? 0 : lo - j0 < nb ? lo - j0 : nb;
    *b = hi <= j0 ? 0 : hi - j0 < nb ? hi - j0 : nb;
    if (*a > *b) *a = *b;
}

/* The mask of the tile [j0, j0 + nb) for decode rows of key/value head g: row r's
 * values of the keys it sees at M + r BK (fp32); 0 when all of them are -inf */
static int favor__decode_mask(const favor__dec *x, size_t g, size_t j0, size_t nb, float *M)
{
    size_t i, r, ka, kb, ld;
    int any = 0;
    for (i = 0; i < x->n; ++i) {
        favor__tile_keys(x, i, j0, nb, &ka, &kb);
        for (r = i * x->grp; kb > ka && r < (i + 1) * x->grp; ++r) {
            float *dst = M + r * FAVOR__BK + ka;
            const float *src = favor__mask_tile(
                x->md.mask, favor__mask_head(&x->md, g * x->grp + r % x->grp), i, 1, j0 + ka,
                kb - ka, dst, &ld);
            if (src != dst) memcpy(dst, src, (kb - ka) * sizeof(float));
            any = any || favor__mask_any(dst, kb - ka);
        }
    }
    return any;
}

/* 1 when decode rows r + 1 .. r + 3 see the keys [ka, kb) of the tile [j0, j0 + nb),
 * as row r does */
static int favor__same_keys(const favor__dec *x, size_t r, size_t j0, size_t nb, size_t ka,
                            size_t kb)
{
    size_t u, a, b;
    for (u = 1; u < 4; ++u) {
        favor__tile_keys(x, (r + u) / x->grp, j0, nb, &a, &b);
        if (a != ka || b != kb) return 0;
    }
    return 1;
}

/* A += P V for the tile [j0, j0 + nb) of a decode work item, P's element (row r,
 * key j) at S[r lda + j csa] (favor__decode_block: row-major, lda = BK; key-major
 * in favor__decode_lanes: lda = 1, csa = R): one favor__gemm when every row
 * sees the whole tile (full), else each position's rows over only the keys they
 * see (a NaN or inf in V past them cannot reach them) */
static void favor__decode_pv(const favor__dec *x, size_t j0, size_t nb, const float *S,
                             size_t lda, size_t csa, const float *V, size_t ldv, float *P,
                             int full)
{
    const size_t rec = x->dv + 2;
    size_t i, ka, kb;
    if (full) {
        favor__gemm(x->R, x->dv, nb, S, lda, csa, V, ldv, P + 2, rec, 1);
        return;
    }
    for (i = 0; i < x->n; ++i) {
        favor__tile_keys(x, i, j0, nb, &ka, &kb);
        if (kb > ka)
            favor__gemm(x->grp, x->dv, kb - ka, S + i * x->grp * lda + ka * csa, lda, csa,
                        V + ka * ldv, ldv, P + i * x->grp * rec + 2, rec, 1);
    }
}

/* The tile [j0, j0 + nb) for the R rows of a key/value head scored key-major,
 * as the prefill scores a query block: St = K_tile Qt (nb x R: a key per row of
 * St, a query row per lane; Qt = Qs^T, d x R), so each row's maximum and sum
 * are elementwise down St's columns (favor__cols_max, favor__cols_exp_sum) and
 * no dot product is reduced across the lanes of a vector; then A += P V with P
 * = St^T read in place. Both products are favor__gemm, the scores a slice of
 * keys at a time, each slice followed by its share of the next tile's rows,
 * asked for into L2 (into L1, up to 1.15x the time; with none, fp32 rows read
 * in place took up to 1.4x). Against favor__decode_block's rows
 * (scored four at a time, each row's products reduced by favor__v_sums, then
 * one favor__gemm), for R >= 32 rows with R a multiple of the vector width
 * (FAVOR__DEC_LANES; 32 query heads on 8 with 8 rows, 64 on 8 with 4, 8 on 8
 * with 32; 16384 and 262144 keys, d = 64 and 128, fp32 and fp16): 0.68-1.01x
 * the time (Xeon model 167, AVX-512, one thread), 0.76-0.96x on two threads and
 * 0.84-0.97x in the AVX2 build at 65536 keys. At 16 rows it took 0.82-0.93x
 * the time at d = 64 and 16384 keys, but 0.95-1.09x at 65536 and 0.97-1.1x at
 * d = 128 (there favor__decode_block's rows stay). The sums add in another order
 * than theirs (the results agree to rounding, not bit for bit). The keys a
 * position's rows do not see are -inf in St and out of their P V (a NaN or inf
 * there cannot reach them), as in favor__decode_block. Scratch: 3 R floats from
 * St + R BK (the second half of decode_block's S). */
static void favor__decode_lanes(const favor__dec *x, size_t j0, size_t nb, const float *K,
                                size_t ldk, const float *V, size_t ldv, const float *Qt,
                                float *St, float *P, const favor__ahead *ahead)
{
    const size_t R = x->R, dv = x->dv, rec = dv + 2, slice = 2 * FAVOR__MR;
    float *mx = St + R * FAVOR__BK, *mc = mx + R, *al = mc + R;
    size_t i, j, r, ka, kb;
    int full = 1;
    for (j = 0; j < nb; j += slice) { /* the scores a slice of keys at a time, each
                                         followed by its share of the rows ahead */
        size_t m = nb - j < slice ? nb - j : slice, a0 = j * ahead->rows / nb,
               a1 = (j + m) * ahead->rows / nb;
        favor__gemm(m, R, x->d, K + j * ldk, ldk, 1, Qt, R, St + j * R, R, 0);
        favor__ahead_rows(ahead, a0, a1, 1);
    }
    if (x->md.cap > 0.0f)
        for (j = 0; j < nb; ++j) favor__softcap(St + j * R, NULL, x->md.cap, R);
    for (i = 0; i < x->n; ++i) { /* the keys a position's rows do not see: -inf */
        favor__tile_keys(x, i, j0, nb, &ka, &kb);
        if (ka == 0 && kb == nb) continue;
        full = 0;
        for (j = 0; j < nb; ++j)
            for (r = i * x->grp; (j < ka || j >= kb) && r < (i + 1) * x->grp; ++r)
                St[j * R + r] = -INFINITY;
    }
    favor__cols_max(St, R, nb, R, mx); /* each row's maximum over the tile */
    for (r = 0; r < R; ++r) mc[r] = favor__online_max(P + r * rec, mx[r], al + r);
    favor__exp_add(al, al, 0.0f, R);
    favor__cols_exp_sum(St, R, nb, R, mc, mx); /* P and each row's sum */
    for (r = 0; r < R; ++r) {
        float *pr = P + r * rec;
        pr[1] = pr[1] * al[r] + mx[r];
        if (al[r] != 1.0f) favor__scal(pr + 2, al[r], dv);
    }
    favor__decode_pv(x, j0, nb, St, 1, R, V, ldv, P, full);
}

/* Score variants of favor__rows_as' rows: softcap c (0: none), then per row
 * ALiBi's slope (0: none) and the row's position less the first key's, and
 * the row's additive mask over the keys. */
typedef struct {
    float cap;
    const float *slope;
    const ptrdiff_t *pos;
    const float *mask; /* row r's additive mask at mask + r ldm (NULL: none) */
    size_t ldm;
} favor__rowvar;

/* the g scores p[r W + u] (u < g) of rows r < nr at keys j + u, softcapped,
 * ALiBi-biased and masked as the tiles do it (favor__decode_block), element by
 * element with the same operations; lanes from g on are left as they are. Out of
 * line: one copy for the eighteen kernels, called once a group of W keys. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline))
#endif
static void favor__rows_var(const favor__rowvar *v, float *p, size_t nr, size_t j, size_t g)
{
    size_t r;
    for (r = 0; r < nr; ++r) {
        if (v->cap > 0.0f) favor__softcap(p + r * FAVOR__W, NULL, v->cap, g);
        if (v->slope[r] != 0.0f)
            favor__alibi(p + r * FAVOR__W, -v->slope[r], (float)(v->pos[r] - (ptrdiff_t)j),
                         -1.0f, g);
        if (v->mask) favor__vadd(p + r * FAVOR__W, v->mask + r * v->ldm + j, g);
    }
}

/* NR decode rows (four, two or one) over keys [0, nb) that all of them see (vx:
 * softcap, ALiBi and a mask, or NULL for none), d = d_v = NV W: the registers and
 * reads of the kernels before it (favor__dots4_pv and favor__dots_pv: a key row
 * and the previous group's value row in turn, or for tight rows two key rows,
 * then the group's values (FAVOR__ROWS_TIGHT); the rows FAVOR__PV_AHEAD bytes on
 * asked for), with each row's running maximum and sum kept in the kernel, a group
 * of W keys at a time, instead of a tile's scores going out to
 * favor__decode_block's passes (maximum, exp, sum, rescale, the tile's
 * bookkeeping: a quarter of the call's time with four fp16 rows, d = 64, 16384
 * keys, Xeon model 167; 12% with one row). Against those passes, on that CPU
 * (favor_ab, 16K-256K keys): four rows or 32 query heads on 8 0.82-0.88x the time
 * with fp16 at d = 64, 0.86-0.88x fp32, 0.91-0.97x at d = 128 and on two threads,
 * 0.75-0.89x in the AVX2 build; one row 0.91-0.96x. The values two groups behind
 * the keys, so that a group's statistics had a group's time to finish, took
 * 1.02-1.04x. A group's scores are reduced by favor__v_sums (keys past the last
 * whole group take favor__dot); a group whose maximum passes the row's rescales
 * its sum and accumulator, then its probabilities exp(s - m) wait in p for the
 * next group's reads, and their sum goes into the row's at once, so that calls
 * over consecutive tiles that start at whole groups give the bits of one call over
 * them all (favor__decode_block's K and V of two types). Row r's partial record is
 * P + r rec (maximum, sum, then its d_v accumulator), read and written; q: the
 * rows, ldq apart, scaled; rows: the key rows from K to the cache's end (the
 * prefetches stay in it; 0: no prefetches, K and V in cache). A group's scores go
 * through favor__rows_var when vx is set (softcap, ALiBi, then the mask, each
 * element as the tiles do it). 0 (nothing done) for other sizes and for backends
 * under 4 lanes. */
#define FAVOR__DEFINE_ROWS(NAME, T, E, LOAD, NV, NR)                                              \
    static int NAME(const float *q, size_t ldq, size_t d, const E *K, size_t ldk, const E *V,    \
                    size_t ldv, size_t nb, size_t rows, float *P, size_t rec,                    \
                    const favor__rowvar *vx)                                                     \
    {                                                                                            \
        favor__vf cv[NR][NV], s[NR];                                                             \
        float m[NR], mc[NR], l[NR], al[NR], p[NR * FAVOR__W]; /* p: the last group's */          \
        size_t j, u, c, r, g, e, pj = 0, pn = 0; /* the last group: pn keys from pj */           \
        enum { ks = FAVOR__ROWS_KS(NR, NV) }; /* keys scored per read of the queries */          \
        const size_t bytes = NV * FAVOR__W * sizeof(E), pd = FAVOR__PV_AHEAD / bytes;            \
        if (FAVOR__W < 4 || d != NV * FAVOR__W) return 0;                                        \
        FAVOR__UNROLL for (r = 0; r < NR; ++r) {                                                 \
            FAVOR__UNROLL for (c = 0; c < NV; ++c)                                               \
                cv[r][c] = favor__v_load(P + r * rec + 2 + c * FAVOR__W);                        \
            m[r] = P[r * rec];                                                                   \
            mc[r] = favor__s_max(m[r], -FLT_MAX);                                                \
            l[r] = P[r * rec + 1];                                                               \
        }                                                                                        \
        for (j = 0;; j += FAVOR__W) {                                                            \
            const E *Vp = V + pj * ldv;                                                          \
            g = j >= nb ? 0 : nb - j < FAVOR__W ? nb - j : FAVOR__W;                             \
            if (g == FAVOR__W) { /* its values, a row between two of this group's keys */        \
                favor__vf acc[NR][FAVOR__W];                                                     \
                for (u = 0; u < FAVOR__W; u += ks) {                                             \
                    FAVOR__KEY_ROWS(LOAD, NV, NR, ks, K + (j + u) * ldk, ldk, u);                \
                    for (e = j + u + pd; e < j + u + ks + pd && e < rows; ++e) {                 \
                        favor__prefetch_row(K + e * ldk, bytes);                                 \
                        favor__prefetch_row(V + e * ldv, bytes);                                 \
                    }                                                                            \
                    if (!FAVOR__ROWS_TIGHT(NR, NV) && u < pn)                                    \
                        FAVOR__PV_ROWS(LOAD, NV, NR, 0, NV, Vp + u * ldv, p + u, FAVOR__W);      \
                }                                                                                \
                if (FAVOR__ROWS_TIGHT(NR, NV)) FAVOR__PV_GROUP(LOAD, NV, NR, Vp, ldv, p, pn);    \
                FAVOR__UNROLL for (r = 0; r < NR; ++r) s[r] = favor__v_sums(acc[r]);             \
            } else { /* its values, then the last keys, if any, one by one */                    \
                FAVOR__PV_GROUP(LOAD, NV, NR, Vp, ldv, p, pn);                                   \
                if (!g) break;                                                                   \
                for (r = 0; r < NR; ++r) {                                                       \
                    for (u = 0; u < FAVOR__W; ++u) p[r * FAVOR__W + u] = -INFINITY;              \
                    for (u = 0; u < g; ++u)                                                      \
                        p[r * FAVOR__W + u] = favor__dot##T(q + r * ldq, K + (j + u) * ldk, d);  \
                    s[r] = favor__v_load(p + r * FAVOR__W);                                      \
                }                                                                                \
            }                                                                                    \
            if (vx) { /* softcap, ALiBi, mask: the scores through p, free till the exp */        \
                FAVOR__UNROLL for (r = 0; r < NR; ++r) favor__v_store(p + r * FAVOR__W, s[r]);   \
                favor__rows_var(vx, p, NR, j, g);                                                \
                FAVOR__UNROLL for (r = 0; r < NR; ++r) s[r] = favor__v_load(p + r * FAVOR__W);   \
            }                                                                                    \
            for (r = 0; r < NR; ++r) { /* one exp in the code: the rows in a loop */             \
                const float mx = favor__v_hmax(s[r]);                                            \
                al[r] = 1.0f;                                                                    \
                if (mx > m[r]) { /* a new maximum: the sums so far scaled to it */               \
                    mc[r] = favor__online_max(m + r, mx, al + r);                                \
                    al[r] = favor__s_exp(al[r]);                                                 \
                    l[r] *= al[r];                                                               \
                }                                                                                \
                s[r] = favor__v_exp(favor__v_add(s[r], favor__v_set1(-mc[r])));                  \
                l[r] += favor__v_hsum(s[r]); /* a group at a time: the same bits by tiles */     \
                favor__v_store(p + r * FAVOR__W, s[r]);                                          \
            }                                                                                    \
            FAVOR__UNROLL for (r = 0; r < NR; ++r) /* and the accumulators */                    \
                if (al[r] != 1.0f)                                                               \
                    FAVOR__UNROLL for (c = 0; c < NV; ++c)                                       \
                        cv[r][c] = favor__v_mul(cv[r][c], favor__v_set1(al[r]));                 \
            pj = j;                                                                              \
            pn = g;                                                                              \
        }                                                                                        \
        FAVOR__UNROLL for (r = 0; r < NR; ++r) {                                                 \
            FAVOR__UNROLL for (c = 0; c < NV; ++c)                                               \
                favor__v_store(P + r * rec + 2 + c * FAVOR__W, cv[r][c]);                        \
            P[r * rec] = m[r];                                                                   \
            P[r * rec + 1] = l[r];                                                               \
        }                                                                                        \
        return 1;                                                                                \
    }
/* The kernels' loads, LOAD(row, c, nv): vector c of a row of nv vectors. Two and
 * four fp32 rows take favor__v_load_row (on AVX-512 a row off the lines in aligned
 * loads; Zen 5, K and V 16 bytes past a line, 64K keys: four rows, 32 and 64 query
 * heads on 8 0.49-0.57x the time, two rows 0.69-0.89x from the L3 and memory and
 * 0.97x in L2; on the lines 0.89-0.92x, each vector now loaded once for the rows
 * where gcc 12 had folded a load into each row's FMA). One row, which does a
 * quarter of the arithmetic per vector loaded, keeps the plain loads (with the
 * permutes, 1.16-1.24x the time in L2, 0.93-1.11x from the L3 and memory). */
#define FAVOR__LD_F32(p, c, nv) favor__v_load((p) + (c) * FAVOR__W)
#define FAVOR__LD_F16(p, c, nv) favor__v_load_f16((p) + (c) * FAVOR__W)
#define FAVOR__LD_BF16(p, c, nv) favor__v_load_bf16a((p) + (c) * FAVOR__W)
/* the four-row, two-row and one-row kernels of a type and size */
#define FAVOR__DEFINE_ROWS421(NAME4, NAME2, NAME1, T, E, LOADN, LOAD1, NV)                       \
    FAVOR__DEFINE_ROWS(NAME4, T, E, LOADN, NV, 4)                                                \
    FAVOR__DEFINE_ROWS(NAME2, T, E, LOADN, NV, 2)                                                \
    FAVOR__DEFINE_ROWS(NAME1, T, E, LOAD1, NV, 1)
FAVOR__DEFINE_ROWS421(favor__rows4_4, favor__rows2_4, favor__rows1_4, , float, favor__v_load_row,
                      FAVOR__LD_F32, 4)
FAVOR__DEFINE_ROWS421(favor__rows4_4_f16, favor__rows2_4_f16, favor__rows1_4_f16, _f16, uint16_t,
                      FAVOR__LD_F16, FAVOR__LD_F16, 4)
FAVOR__DEFINE_ROWS421(favor__rows4_4_bf16, favor__rows2_4_bf16, favor__rows1_4_bf16, _bf16,
                      uint16_t, FAVOR__LD_BF16, FAVOR__LD_BF16, 4)
FAVOR__DEFINE_ROWS421(favor__rows4_8, favor__rows2_8, favor__rows1_8, , float, favor__v_load_row,
                      FAVOR__LD_F32, 8)
FAVOR__DEFINE_ROWS421(favor__rows4_8_f16, favor__rows2_8_f16, favor__rows1_8_f16, _f16, uint16_t,
                      FAVOR__LD_F16, FAVOR__LD_F16, 8)
FAVOR__DEFINE_ROWS421(favor__rows4_8_bf16, favor__rows2_8_bf16, favor__rows1_8_bf16, _bf16,
                      uint16_t, FAVOR__LD_BF16, FAVOR__LD_BF16, 8)

/* favor__rows4_*, favor__rows2_* or favor__rows1_* (nr = 4, 2 or 1) on K and V
 * rows of type t: 0 when no kernel fits */
#define FAVOR__ROWS_AS(NR)                                                                       \
    (t == FAVOR_F16                                                                              \
         ? favor__rows##NR##_4_f16 FAVOR__ROWS_ARGS(16) ||                                       \
               favor__rows##NR##_8_f16 FAVOR__ROWS_ARGS(16)                                      \
     : t == FAVOR_BF16                                                                           \
         ? favor__rows##NR##_4_bf16 FAVOR__ROWS_ARGS(16) ||                                      \
               favor__rows##NR##_8_bf16 FAVOR__ROWS_ARGS(16)                                     \
         : favor__rows##NR##_4 FAVOR__ROWS_ARGS(32) || favor__rows##NR##_8 FAVOR__ROWS_ARGS(32))
#define FAVOR__ROWS_ARGS(B) (q, d, d, K##B, ldk, V##B, ldv, nb, rows, P, rec, vx)
static int favor__rows_as(size_t nr, favor_dtype t, const float *q, size_t d, const void *K,
                          size_t ldk, const void *V, size_t ldv, size_t nb, size_t rows,
                          float *P, size_t rec, const favor__rowvar *vx)
{
    const uint16_t *K16 = (const uint16_t *)K, *V16 = (const uint16_t *)V;
    const float *K32 = (const float *)K, *V32 = (const float *)V;
    return nr == 1 ? FAVOR__ROWS_AS(1) : nr == 2 ? FAVOR__ROWS_AS(2) : FAVOR__ROWS_AS(4);
}

/* work item (g, b): the partials of block b of key/value head g, over the tiles
 * of the keys its rows see; ws: R (d + 2 BK) and the tile buffers of 16-bit K, V
 * (after the merge's row), then the mask's R x BK or Qs^T's d x R. Direct rows
 * add a tile's P V while they score the next tile (favor__dots_as), so their S
 * has two buffers, taken in turn. A block's first tile (no P V yet) and its
 * last P V (no scores left) go to the same kernel, with no keys of P V and no
 * keys to score. */
static void favor__decode_block(const favor__dec *x, size_t g, size_t b, float *ws)
{
    const size_t R = x->R, d = x->d, dv = x->dv, BK = FAVOR__BK, rec = dv + 2;
    float *Qs = ws, *S = ws + R * d, *P = x->part + (g * x->nblk + b) * R * rec, *Sp = NULL;
    float *Kb = S + 2 * R * BK + dv, *Vb = Kb + favor__io_floats(x->k, BK);
    float *Mr = Vb + favor__io_floats(x->v, BK); /* with a mask: R x BK */
    float *Qt = Mr; /* scored key-major (no mask): Qs^T, d x R */
    const int lanes = favor__dec_lanes(x);
    size_t j0 = (x->b0 + b) * FAVOR__DEC_BLOCK, jend = x->nk, i, t, r, j, ldk = 0, ldv = 0, lo,
           hi, beg, end;
    size_t esk = favor_dtype_size(x->k->dtype), esv = favor_dtype_size(x->v->dtype);
    /* up to FAVOR__DEC_GROUPED rows of d = d_v = 4 or 8 vectors go through
     * favor__rows_as (below); of the others, one or two rows read K and V in
     * their own types (a tile widened once would cost as much as the bytes a
     * 16-bit cache saves), and more rows share a widened tile */
    const int fits = FAVOR__W >= 4 && d == dv && (d == 4 * FAVOR__W || d == 8 * FAVOR__W);
    const int direct = R <= 2, widened = !direct && x->k->dtype != FAVOR_F32;
    /* four rows read a 16-bit K tile in place, each vector once (favor__dots4):
     * no pass over a copy of K (Zen 3, fp16, 16384 keys, 4 rows or 32 query heads
     * on 8, d = 64 and 128: 0.88-0.93x the time of scoring the widened tile) */
    const int k16 = widened && R == 4;
    /* rows scored four at a time (favor__dots4): K read in place by four rows;
     * fp32 rows streamed in place (Zen 3, 16384 keys, 4 rows or 32 query heads
     * on 8: d = 64 0.89-0.91x the time of one row at a time), those over 256
     * bytes each key row read whole (`whole`; d = 128, 4 rows: 0.96-1.03x at
     * 16384 keys and 0.90-0.95x at 65536, 16 rows 0.76-0.81x; two key rows side
     * by side a vector at a time took 1.07-1.1x); a widened tile whose
     * fp32 rows pass 256 bytes, 32 KiB that each row would read again from L2
     * (fp16, d = 128, 32 query heads on 8 with 4 rows: 0.93x). A widened tile of
     * rows up to 256 bytes stays in L1 for favor__dots_side, eight keys a row
     * (fp16, d = 64, 8 or 16 rows: dots4 took 1.06-1.12x) */
    const int four_ok = !direct && (k16 || !widened || d * 4 > 256);
    const int whole = !direct && !widened && d * esk > 256;
    /* the types of the K and V rows the kernels read */
    favor_dtype tk = direct || k16 ? x->k->dtype : FAVOR_F32;
    favor_dtype tv = direct ? x->v->dtype : FAVOR_F32;
    /* direct rows: the previous tile's keys of each row, and its values at each
     * position, whose P V is still to add (Sp: its probabilities) */
    size_t pka[FAVOR__DEC_DIRECT], pkb[FAVOR__DEC_DIRECT];
    const void *pva[FAVOR__DEC_DIRECT];
    if (jend - j0 > FAVOR__DEC_BLOCK) jend = j0 + FAVOR__DEC_BLOCK;
    beg = jend;
    end = j0;
    for (i = 0; i < x->n; ++i) {
        favor__keys(&x->md, x->n, x->nk, i, &lo, &hi);
        if (lo < hi && lo < beg) beg = lo;
        if (lo < hi && hi > end) end = hi;
        for (t = 0; t < x->grp; ++t) {
            r = i * x->grp + t;
            favor__widen_rows(x->q, g * x->grp + t, i, 1, Qs + r * d, d);
            favor__scal(Qs + r * d, x->s, d);
            P[r * rec] = -INFINITY;
            memset(P + r * rec + 1, 0, (dv + 1) * sizeof(float));
        }
    }
    if (lanes) favor__transpose(R, d, Qs, d, Qt, R);
    if (beg > j0) j0 = beg; /* the tiles of the keys some row sees */
    if (end < jend) jend = end;
    /* up to FAVOR__DEC_GROUPED rows, d = d_v of 4 or 8 vectors: every key of
     * the block by favor__rows_as, which keeps the rows' statistics in
     * registers (softcap, ALiBi and a mask in the kernel), four rows at a time
     * (then two, then one). With no mask, the keys from j0 that all rows see
     * (every key but a causal call's last few) come first: one group whose K
     * and V have one type in one call, in place; more groups a 64-key tile at
     * a time, each group in turn, the first asking for the rows ahead (the
     * tile in L1 for the others); K and V of two types each tile widened, then
     * the fp32 kernel (the tiles start at whole groups of keys, so the same
     * bits as one type read in place). The keys left go by tiles, rows whose
     * keys differ one at a time over their own keys only. Xeon model 167
     * (favor_ab, 16K-256K keys, 1 and 2 threads): two rows (16 query heads on
     * 8, or two positions), which read K and V a row at a time before,
     * 0.66-0.82x the time, about one row's; three to eight with 16-bit K and V
     * 0.77-0.90x the widened tiles', fp32 0.96-1.13x (its tiles are not
     * widened, and the groups after the first take about 15 ns a key from
     * L1); softcap or a mask on two rows 0.65-0.68x; the AVX2 build alike. A
     * whole block per group instead of a tile: no faster. 16 fp32 rows of d =
     * 128 took 1.17-1.21x: more stay with the tiles below */
    if (fits && R <= FAVOR__DEC_GROUPED && j0 < jend) {
        size_t ka = 0, kb = 0, t0, nb, lk, lv, r0, nr, ph, span[3];
        const int one = x->k->dtype == x->v->dtype, scores = x->md.cap > 0.0f || x->md.alibi;
        float slope[FAVOR__DEC_GROUPED];
        ptrdiff_t pos0[FAVOR__DEC_GROUPED], pos[FAVOR__DEC_GROUPED];
        favor__rowvar var;
        var.cap = x->md.cap > 0.0f ? x->md.cap : 0.0f;
        var.slope = slope;
        var.pos = pos;
        var.mask = NULL;
        var.ldm = BK;
        for (r = 0; r < R; ++r) {
            slope[r] = favor__slope(&x->md, g * x->grp + r % x->grp);
            pos0[r] = (ptrdiff_t)(r / x->grp + x->nk) - (ptrdiff_t)(x->n + j0); /* p_i - j0 */
            pos[r] = pos0[r];
        }
        if (!x->md.mask) { /* the keys from j0 that every row sees: [j0, j0 + kb) */
            favor__tile_keys(x, 0, j0, jend - j0, &ka, &kb);
            for (i = 1; i < x->n && ka == 0; ++i) {
                favor__tile_keys(x, i, j0, jend - j0, &lo, &hi);
                if (lo != 0) ka = lo;
                if (hi < kb) kb = hi;
            }
            if (ka != 0) kb = 0;
        }
        span[0] = j0;
        span[1] = j0 + kb;
        span[2] = jend;
        if (kb && one && (R == 1 || R == 2 || R == 4)) { /* one call, in place */
            favor__rows_as(R, x->k->dtype, Qs, d, favor__at(x->k, g, j0), x->k->row_stride,
                           favor__at(x->v, g, j0), x->v->row_stride, kb, x->nk - j0, P, rec,
                           scores ? &var : NULL);
            span[0] = span[1];
        }
        for (ph = 0; ph < 2; ++ph)
            for (t0 = span[ph]; t0 < span[ph + 1]; t0 += nb) {
                const void *Kt, *Vt;
                size_t ahead, a0 = 0, b0 = 0;
                int same = 1, asked = 0; /* the tile's first call asks for the rows ahead */
                nb = span[ph + 1] - t0 < BK ? span[ph + 1] - t0 : BK;
                for (i = 0; i < x->n; ++i) { /* each position's keys of the tile */
                    favor__tile_keys(x, i, t0, nb, &lo, &hi);
                    if (i && (lo != a0 || hi != b0)) same = 0;
                    a0 = lo;
                    b0 = hi;
                }
                if (x->md.mask && !favor__decode_mask(x, g, t0, nb, S))
                    continue; /* the mask hides the tile from every row */
                if (one) {
                    Kt = favor__at(x->k, g, t0);
                    Vt = favor__at(x->v, g, t0);
                    lk = x->k->row_stride;
                    lv = x->v->row_stride;
                    ahead = x->nk - t0;
                } else {
                    Kt = favor__in(x->k, g, t0, nb, Kb, &lk);
                    Vt = favor__in(x->v, g, t0, nb, Vb, &lv);
                    ahead = nb;
                }
                for (r0 = 0; r0 < R; r0 += nr) {
                    /* rows that see the same keys: groups of four, two, one;
                     * otherwise one at a time, each over its own keys */
                    nr = !same ? 1 : R - r0 >= 4 ? 4 : R - r0 >= 2 ? 2 : 1;
                    if (!same) favor__tile_keys(x, r0 / x->grp, t0, nb, &a0, &b0);
                    if (a0 >= b0) continue;
                    var.slope = slope + r0;
                    var.pos = pos + r0;
                    var.mask = x->md.mask ? S + r0 * BK + a0 : NULL;
                    for (r = r0; r < r0 + nr; ++r)
                        pos[r] = pos0[r] - (ptrdiff_t)(t0 + a0 - j0);
                    favor__rows_as(nr, one ? x->k->dtype : FAVOR_F32, Qs + r0 * d, d,
                                   (const char *)Kt + a0 * lk * (one ? esk : 4), lk,
                                   (const char *)Vt + a0 * lv * (one ? esv : 4), lv, b0 - a0,
                                   asked++ ? 0 : ahead - a0, P + r0 * rec, rec,
                                   scores || x->md.mask ? &var : NULL);
                }
            }
        j0 = jend; /* (fits: the kernels took them all) */
    }
    for (; j0 < jend; j0 += BK) {
        size_t nb = jend - j0 < BK ? jend - j0 : BK, full = 1, next = j0 + nb, ka, kb;
        float *Sc = direct && Sp == S ? S + R * BK : S; /* the other buffer than Sp's */
        const void *K, *V;
        if (x->md.mask && !favor__decode_mask(x, g, j0, nb, Mr))
            continue; /* the mask hides the tile from every row */
        favor__ahead ahead; /* the next tile's keys and values (the next block's
                               first, which is this thread's next item when it
                               has the keys in order), while a widened tile's
                               rows are scored, each row asking for 1/R of them
                               (Zen 3, 4 rows, or 32 query heads on 8, d = 64
                               and 128, 16384 keys: 1.56-1.63x the time of a
                               plain read of K and V, against 2.15-2.36x with
                               all of them in the first row, and 2.8-3.1x
                               with none). Direct rows, which read K and V
                               together, do not ask for the next tile: the
                               hardware's stream prefetchers did better alone
                               (Zen 3, fp32 and fp16 rows of d = 64 and 128:
                               1.0-1.29x the time of a plain read of the
                               bytes, against 1.07-1.54x prefetching) */
        if (direct) {
            K = favor__at(x->k, g, j0);
            V = favor__at(x->v, g, j0);
            ldk = x->k->row_stride;
            ldv = x->v->row_stride;
        } else {
            if (k16) {
                K = favor__at(x->k, g, j0);
                ldk = x->k->row_stride;
            } else
                K = favor__in(x->k, g, j0, nb, Kb, &ldk);
            V = favor__in(x->v, g, j0, nb, Vb, &ldv);
        }
        ahead.rows = x->nk - next < BK ? x->nk - next : BK;
        ahead.a = favor__at(x->k, g, ahead.rows ? next : j0);
        ahead.b = favor__at(x->v, g, ahead.rows ? next : j0);
        ahead.lda = x->k->row_stride * esk;
        ahead.ldb = x->v->row_stride * esv;
        ahead.a_bytes = d * esk;
        ahead.b_bytes = dv * esv;
        if (lanes) {
            favor__decode_lanes(x, j0, nb, (const float *)K, ldk, (const float *)V, ldv, Qt, S, P,
                                &ahead);
            continue;
        }
        size_t four = 0; /* rows below it were scored four at a time */
        /* row r's share of the rows ahead starts at (r step) >> 16: r rows / R
         * rounded up in 16.16 fixed point (R step >> 16 = rows), with no
         * division per row */
        const size_t step = ((ahead.rows << 16) + R - 1) / R;
        for (i = 0; i < x->n; ++i) {
            ptrdiff_t pj = (ptrdiff_t)(i + x->nk) - (ptrdiff_t)(x->n + j0); /* p_i - j0 */
            const void *Ka, *Va;
            favor__tile_keys(x, i, j0, nb, &ka, &kb);
            full &= ka == 0 && kb == nb;
            Ka = direct || k16 ? favor__at(x->k, g, j0 + ka)
                               : (const void *)((const float *)K + ka * ldk);
            Va = direct ? favor__at(x->v, g, j0 + ka) : NULL;
            for (r = i * x->grp; r < (i + 1) * x->grp; ++r) {
                float *Sr = Sc + r * BK, *pr = P + r * rec, alpha, mc;
                float slope = favor__slope(&x->md, g * x->grp + (r - i * x->grp));
                favor__pvrow pv; /* direct: the previous tile's P V beside these scores */
                if (Sp)
                    favor__pvrow_make(&pv, pr + 2, Sp + r * BK, pka[r], pkb[r], pva[i], ldv, dv,
                                      tv);
                else if (direct) /* a block's first tile: no P V yet, but the same kernel */
                    favor__pvrow_make(&pv, pr + 2, Sr, 0, 0, NULL, ldv, dv, tv);
                favor__ahead ar = ahead; /* row r's share of the next tile */
                ar.a = (const char *)ahead.a + (r * step >> 16) * ahead.lda;
                ar.b = (const char *)ahead.b + (r * step >> 16) * ahead.ldb;
                ar.rows = ((r + 1) * step >> 16) - (r * step >> 16);
                if (four_ok && r >= four && r + 4 <= R &&
                    (r + 4 <= (i + 1) * x->grp || /* one position: the same keys */
                     favor__same_keys(x, r, j0, nb, ka, kb))) {
                    ar.rows = ((r + 4) * step >> 16) - (r * step >> 16); /* rows r..r+3's */
                    favor__dots4_as(tk, Qs + r * d, d, d, Ka, ldk, kb - ka, Sr + ka, BK, &ar,
                                    whole);
                    four = r + 4;
                } else if (r >= four && widened && !k16) /* favor__in's copy, in cache */
                    favor__dots_side(Qs + r * d, d, (const float *)Ka, ldk, kb - ka, Sr + ka, &ar,
                                     NULL);
                else if (r >= four)
                    favor__dots_as(tk, Qs + r * d, d, Ka, ldk, kb - ka, Sr + ka,
                                   direct ? NULL : &ar, direct ? &pv : NULL);
                for (j = 0; j < ka; ++j) Sr[j] = -INFINITY;
                for (j = kb; j < nb; ++j) Sr[j] = -INFINITY;
                if (x->md.cap > 0.0f) favor__softcap(Sr + ka, NULL, x->md.cap, kb - ka);
                if (slope != 0.0f)
                    favor__alibi(Sr + ka, -slope, (float)(pj - (ptrdiff_t)ka), -1.0f, kb - ka);
                if (x->md.mask) favor__vadd(Sr + ka, Mr + r * BK + ka, kb - ka);
                mc = favor__online_max(pr, favor__maxval(Sr, nb), &alpha);
                favor__exp_add(Sr, Sr, -mc, nb);
                alpha = favor__s_exp(alpha);
                pr[1] = pr[1] * alpha + favor__sum(Sr, nb);
                if (alpha != 1.0f) favor__scal(pr + 2, alpha, dv);
                if (direct) {
                    pka[r] = ka;
                    pkb[r] = kb;
                }
            }
            if (direct) pva[i] = Va;
        }
        if (direct) {
            Sp = Sc;
            continue;
        }
        favor__decode_pv(x, j0, nb, S, BK, 1, (const float *)V, ldv, P, full);
    }
    for (i = 0; Sp && i < x->n; ++i) /* direct rows: the last tile's P V */
        for (r = i * x->grp; r < (i + 1) * x->grp; ++r) {
            favor__pvrow pv;
            favor__pvrow_make(&pv, P + r * rec + 2, Sp + r * BK, pka[r], pkb[r], pva[i], ldv, dv,
                              tv);
            favor__dots_as(tk, Qs + r * d, d, NULL, 0, 0, NULL, NULL, &pv);
        }
}

/* row r of key/value head g: its blocks' partials merged in block order; ws:
 * the thread's slice (the row is formed after R (d + 2 BK) floats) */
static void favor__decode_merge(const favor__dec *x, size_t g, size_t r, float *ws)
{
    const size_t rec = x->dv + 2, stride = x->R * rec;
    const float *P = x->part + g * x->nblk * stride + r * rec;
    size_t i = r / x->grp, h = g * x->grp + r % x->grp, b, ldo;
    float *o = favor__out(x->o, h, i, ws + x->R * (x->d + 2 * FAVOR__BK), &ldo), M = -INFINITY, Mc;
    float f, e;
    double L = 0.0;
    for (b = 0; b < x->nblk; ++b) M = favor__s_max(P[b * stride], M);
    Mc = favor__s_max(M, -FLT_MAX);
    memset(o, 0, x->dv * sizeof(float));
    for (b = 0; b < x->nblk; ++b) {
        const float *p = P + b * stride;
        float fb;
        if (p[1] == 0.0f) continue; /* the row saw no key of this block */
        fb = favor__s_exp(p[0] - Mc);
        L += (double)p[1] * fb;
        favor__axpy(o, fb, p + 2, x->dv);
    }
    e = favor__row_end(M, L, favor__sink(&x->md, h), &f);
    if (L > 0.0) favor__scal(o, f, x->dv); /* no key seen: stays zero */
    favor__out_done(x->o, h, i, 1, o, ldo);
    if (x->lse) x->lse[h * x->ldl + i] = e;
}

/* Fill x for a call (sizes of valid q, k, v); the decode path applies when it
 * returns 1. */
static int favor__decode_plan(favor__dec *x, const favor_tensor *q, const favor_tensor *k,
                              const favor_tensor *v, const favor_options *opts)
{
    x->q = q;
    x->k = k;
    x->v = v;
    x->n = q->rows;
    x->nk = k->rows;
    x->d = q->cols;
    x->dv = v->cols;
    x->grp = q->heads / k->heads;
    favor__mods_of(&x->md, opts, q->heads);
    return x->n <= FAVOR__DEC_ROWS;
}

/* The arguments of a workspace query: 1 when they are valid (f only when
 * with_f: a linear call's, whose k has f's dim); 0, with the reason in
 * opts->error, when not. */
static int favor__query_ok(const favor_features *f, int with_f, const favor_tensor *q,
                           const favor_tensor *k, const favor_tensor *v, const favor_options *opts)
{
    favor__why w = favor__why_of(opts);
    favor__range r;
    if ((with_f && favor__check_features(f, &w) != FAVOR_OK) ||
        favor__check_options(opts) != FAVOR_OK ||
        (with_f && favor__check_no_mods(opts, &w) != FAVOR_OK) ||
        favor__check_tensor(q, "q", &w, &r) != FAVOR_OK ||
        favor__check_tensor(k, "k", &w, &r) != FAVOR_OK ||
        favor__check_tensor(v, "v", &w, &r) != FAVOR_OK)
        return 0;
    if (q->heads % k->heads) {
        (void)favor__no(&w, FAVOR_E_SHAPE, "q: heads %z is not a multiple of k's heads %z",
                        q->heads, k->heads);
        return 0;
    }
    if (favor__check_seqs(opts, q->rows, k->rows, &w) != FAVOR_OK ||
        (opts && opts->mask && favor__check_tensor(opts->mask, "opts.mask", &w, &r) != FAVOR_OK))
        return 0;
    return !with_f || favor__same(&w, "k", "cols", k->cols, "f", f->dim) == FAVOR_OK;
}

/* Packed sequences (opts->seqs): sequence s's query rows [*q0, *q1) and key
 * rows [*k0, *k1); without them, one sequence of every row and key. */
static size_t favor__nseq(const favor_options *o) { return o && o->seqs ? o->seqs : 1; }
static void favor__seq(const favor_options *o, size_t s, size_t n, size_t nk, size_t *q0,
                       size_t *q1, size_t *k0, size_t *k1)
{
    const size_t *sk;
    if (!o || !o->seqs) {
        *q0 = *k0 = 0;
        *q1 = n;
        *k1 = nk;
        return;
    }
    sk = o->seq_k ? o->seq_k : o->seq_q;
    *q0 = o->seq_q[s];
    *q1 = o->seq_q[s + 1];
    *k0 = sk[s];
    *k1 = sk[s + 1];
}

/* The views of one sequence of a call: its rows of q, k, v, out and its block
 * of the mask */
typedef struct {
    favor_tensor q, k, v, o, mask;
    size_t q0, k0;
} favor__seqv;

static void favor__seqv_make(favor__seqv *sv, const favor_tensor *q, const favor_tensor *k,
                             const favor_tensor *v, const favor_tensor *o,
                             const favor_options *opts, size_t s)
{
    size_t q1, k1;
    favor__seq(opts, s, q->rows, k->rows, &sv->q0, &q1, &sv->k0, &k1);
    sv->q = favor__rows(q, sv->q0, q1 - sv->q0);
    sv->k = favor__rows(k, sv->k0, k1 - sv->k0);
    sv->v = favor__rows(v, sv->k0, k1 - sv->k0);
    sv->o = favor__rows(o, sv->q0, q1 - sv->q0);
    if (opts && opts->mask) {
        sv->mask = favor__rows(opts->mask, sv->q0, q1 - sv->q0);
        sv->mask = favor__cols(&sv->mask, sv->k0, k1 - sv->k0);
    }
}

/* The plan of a softmax call on one sequence's views (x filled from them): the
 * floats of its workspace (0: too big), its per-thread slices, where its decode
 * partials or its tile map begin, and whether it takes the decode path */
static size_t favor__softmax_plan(favor__sm *x, const favor__seqv *sv, const favor_options *opts,
                                  size_t nt, size_t *slice, size_t *at, int *dec)
{
    size_t all, map;
    *dec = favor__decode_plan(x, &sv->q, &sv->k, &sv->v, opts);
    if (opts && opts->mask) x->md.mask = &sv->mask;
    if (*dec) return favor__decode_floats(x, favor__nheads(&sv->k), nt, slice, at);
    if (!(*at = favor__slices(favor__softmax_floats(&sv->q, &sv->k, &sv->v,
                                                             opts && opts->mask), nt, slice)))
        return 0;
    map = favor__map_floats(&x->md, x->n, x->nk);
    return favor__add_ok(*at, map, &all) && all <= SIZE_MAX / sizeof(float) ? all : 0;
}

/* The largest plan of the sequences of a call; 0 when one is too big */
static size_t favor__softmax_floats_all(const favor_tensor *q, const favor_tensor *k,
                                        const favor_tensor *v, const favor_options *opts,
                                        size_t nt)
{
    size_t s, most = 0, f, slice = 0, at = 0;
    favor__seqv sv;
    favor__sm x;
    int dec = 0;
    for (s = 0; s < favor__nseq(opts); ++s) {
        favor__seqv_make(&sv, q, k, v, q, opts, s);
        if (!(f = favor__softmax_plan(&x, &sv, opts, nt, &slice, &at, &dec))) return 0;
        if (f > most) most = f;
    }
    return most;
}

/* Decode work items [i0, i1) of x (a key/value head's block each), then its
 * merges [m0, m1) (a row of a key/value head each), on one thread's workspace */
static void favor__decode_items(const favor__dec *x, long i0, long i1, float *ws)
{
    long b;
    for (b = i0; b < i1; ++b)
        favor__decode_block(x, (size_t)b / x->nblk, (size_t)b % x->nblk, ws);
}
static void favor__decode_merges(const favor__dec *x, long m0, long m1, float *ws)
{
    long it;
    for (it = m0; it < m1; ++it) favor__decode_merge(x, (size_t)it / x->R, (size_t)it % x->R, ws);
}

/* One sequence of a softmax call (x planned by favor__softmax_plan). On one
 * thread the decode enters no OpenMP region, for FAVOR__PAR_FOR's reason. */
static void favor__softmax_run(favor__sm *x, size_t hq, size_t hkv, float *ws, size_t slice,
                               size_t at, int dec, size_t nt)
{
    long it, items, run, runs;
    size_t blocks = (x->n + FAVOR__BQ - 1) / FAVOR__BQ;
    if (dec) {
        x->part = ws + at;
        items = (long)(hkv * x->nblk);
        runs = items < 8 * (long)nt ? items : 8 * (long)nt;
        if (nt <= 1) {
            favor__decode_items(x, 0, items, ws);
            favor__decode_merges(x, 0, (long)(hkv * x->R), ws);
            return;
        }
#ifdef _OPENMP
#pragma omp parallel num_threads((int)nt)
#endif
        {
            /* runs of consecutive blocks, 8 per thread: each thread streams its
             * keys and values in order, so its prefetchers (and the next tile's
             * prefetch, which reaches into the next block) stay on its own
             * rows; single blocks dealt in turn measured 1.1-1.4x the time on 2
             * threads (Zen 5, 131072 keys). With 8 nt blocks or more, the runs
             * differ by at most one block (with fewer, each block is a run).
             * Runs of items/(8 nt) + 1 blocks did not divide evenly: 16384 keys
             * on 8 heads, 256 blocks, made 15 runs of 17 and one of 1, so on 2
             * threads one streamed 136 blocks and the other 120 (Xeon: these
             * runs take 0.97-0.98x the time). */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (run = 0; run < runs; ++run)
                favor__decode_items(x, run * items / runs, (run + 1) * items / runs,
                                    ws + FAVOR__TID() * slice);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (it = 0; it < (long)(hkv * x->R); ++it)
                favor__decode_merges(x, it, it + 1, ws + FAVOR__TID() * slice);
        }
        return;
    }
    items = (long)(hq * blocks);
    if (x->md.mask) favor__mask_maps(&x->md, x->n, x->nk, ws + at, ws, slice, nt);
    FAVOR__PAR_FOR(it, items,
                   favor__softmax_block(x, (size_t)it / blocks, ((size_t)it % blocks) * FAVOR__BQ,
                                        ws + tid_ * slice));
}

/* Sequence seq of a softmax call: its views sv and its call x (planned, with
 * its output, lse and scale); returns 1 when it takes the decode path */
static int favor__softmax_seq(favor__sm *x, favor__seqv *sv, const favor_tensor *q,
                              const favor_tensor *k, const favor_tensor *v,
                              const favor_tensor *out, const favor_options *opts, size_t seq,
                              float s, size_t nt, size_t *slice, size_t *at)
{
    int dec = 0;
    favor__seqv_make(sv, q, k, v, out, opts, seq);
    favor__softmax_plan(x, sv, opts, nt, slice, at, &dec);
    x->o = &sv->o;
    x->lse = opts && opts->lse ? opts->lse + sv->q0 : NULL;
    x->ldl = q->rows;
    x->s = s;
    return dec;
}

/* the prefill items of sequence seq (hq heads x its query blocks; none on the
 * decode path) */
static size_t favor__seq_items(const favor_options *opts, size_t seq, size_t n, size_t nk,
                               size_t hq)
{
    size_t q0, q1, k0, k1;
    favor__seq(opts, seq, n, nk, &q0, &q1, &k0, &k1);
    return q1 - q0 <= FAVOR__DEC_ROWS ? 0 : hq * ((q1 - q0 + FAVOR__BQ - 1) / FAVOR__BQ);
}

/* The prefill items of every sequence of an unmasked call in one loop: item it
 * is (sequence, head, block) in that order, so the threads share out the
 * blocks of all sequences with no barrier between sequences, and each block
 * gives the bits of a call on its sequence alone. Each thread keeps a cursor:
 * the sequence of its last item and that sequence's first item (a dynamic
 * schedule hands a thread increasing items; a smaller one restarts the scan).
 * On one thread the items run in order with no OpenMP region, as the decode's
 * do (favor__softmax_run). */
typedef struct {
    const favor_tensor *q, *k, *v, *out;
    const favor_options *opts;
    float s;
    size_t hq, nt;
} favor__items;

typedef struct {
    favor__seqv sv;
    favor__sm x;
    size_t cur, first, here, slice, at, blocks;
    int made;
} favor__cursor;

static void favor__cursor_start(const favor__items *c, favor__cursor *u)
{
    u->cur = u->first = 0;
    u->here = favor__seq_items(c->opts, 0, c->q->rows, c->k->rows, c->hq);
    u->slice = u->at = 0;
    u->blocks = 1;
    u->made = 0;
}

/* items [i0, i1) on the thread tid, whose cursor is u */
static void favor__items_run(const favor__items *c, favor__cursor *u, size_t i0, size_t i1,
                             float *ws, size_t tid)
{
    size_t i, j;
    for (i = i0; i < i1; ++i) {
        if (i < u->first) favor__cursor_start(c, u); /* restart the scan */
        while (i >= u->first + u->here) {
            u->first += u->here;
            u->here = favor__seq_items(c->opts, ++u->cur, c->q->rows, c->k->rows, c->hq);
            u->made = 0;
        }
        if (!u->made) {
            (void)favor__softmax_seq(&u->x, &u->sv, c->q, c->k, c->v, c->out, c->opts, u->cur,
                                     c->s, c->nt, &u->slice, &u->at);
            u->blocks = (u->x.n + FAVOR__BQ - 1) / FAVOR__BQ;
            u->made = 1;
        }
        j = i - u->first;
        favor__softmax_block(&u->x, j / u->blocks, (j % u->blocks) * FAVOR__BQ,
                             ws + tid * u->slice);
    }
}

static void favor__softmax_items(const favor_tensor *q, const favor_tensor *k,
                                 const favor_tensor *v, const favor_tensor *out,
                                 const favor_options *opts, float s, size_t hq, float *ws,
                                 size_t nt)
{
    size_t seq, all = 0, ns = favor__nseq(opts);
    long it, items;
    const favor__items c = {q, k, v, out, opts, s, hq, nt};
    for (seq = 0; seq < ns; ++seq) all += favor__seq_items(opts, seq, q->rows, k->rows, hq);
    items = (long)all;
    if (!items) return; /* all on the decode path */
    if (nt <= 1) {
        favor__cursor u;
        favor__cursor_start(&c, &u);
        favor__items_run(&c, &u, 0, all, ws, 0);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads((int)nt)
#endif
    {
        favor__cursor u;
        favor__cursor_start(&c, &u);
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (it = 0; it < items; ++it)
            favor__items_run(&c, &u, (size_t)it, (size_t)it + 1, ws, FAVOR__TID());
    }
}

FAVOR__DEF size_t favor_softmax_attention_workspace(const favor_tensor *q, const favor_tensor *k,
                                                   const favor_tensor *v,
                                                   const favor_options *opts)
{
    if (!favor__query_ok(NULL, 0, q, k, v, opts)) return 0;
    return favor__ws_bytes(favor__softmax_floats_all(q, k, v, opts, favor__nthreads(opts)));
}

FAVOR__DEF favor_status favor_softmax_attention(const favor_tensor *q, const favor_tensor *k,
                                               const favor_tensor *v, const favor_tensor *out,
                                               const favor_options *opts)
{
    favor__shape sh;
    favor_status st;
    float *ws, s;
    void *owned;
    size_t floats, nt, seq;
    int masked;
    favor__why w = favor__why_of(opts);
    if ((st = favor__check_qkvo(q, k, v, out, &sh, &w)) != FAVOR_OK) return st;
    if ((st = favor__check_options(opts)) != FAVOR_OK) return st;
    if ((st = favor__check_mods(opts, q, k, 0, &sh)) != FAVOR_OK) return st;
    if ((st = favor__check_lse(opts, &sh)) != FAVOR_OK) return st;
    nt = favor__nthreads(opts);
    s = (opts && opts->scale > 0.0f) ? opts->scale : (float)(1.0 / sqrt((double)sh.d));
    if (!(floats = favor__softmax_floats_all(q, k, v, opts, nt))) return favor__too_big(opts);
    if ((st = favor__ws_get(opts, floats, &sh, &ws, &owned)) != FAVOR_OK) return st;
    /* Sequences on the decode path, and every sequence of a masked call (each
     * builds its own tile map), run one after another; the other sequences'
     * (sequence, head, block) items share one loop (favor__softmax_items). */
    masked = opts && opts->mask;
    for (seq = 0; seq < favor__nseq(opts); ++seq) {
        favor__seqv sv;
        favor__sm x;
        size_t slice = 0, at = 0;
        int dec;
        if (!masked && favor__seq_items(opts, seq, sh.n, sh.nk, sh.hq)) continue;
        dec = favor__softmax_seq(&x, &sv, q, k, v, out, opts, seq, s, nt, &slice, &at);
        if (sv.q.rows) favor__softmax_run(&x, sh.hq, sh.hkv, ws, slice, at, dec, nt);
    }
    if (!masked) favor__softmax_items(q, k, v, out, opts, s, sh.hq, ws, nt);
    favor__ws_put(owned);
    return FAVOR_OK;
}

/* 4.9b Merging partial results ----------------------------------------------------
 * favor_attention_merge, row by row: the two lse give the weights (in double),
 * then the row's columns are merged a block at a time, each element
 * (float)(ca a + cb b) in double with ca + cb = 1. A 16-bit row is widened into
 * a stack buffer block by block and a 16-bit out rounded from one, so no row
 * length needs memory. Rows are independent: the threads share them out, and
 * in place (out the very view out_a or out_b is) each element is read before
 * it is written. */
#define FAVOR__MERGE_COLS 256
#define FAVOR__MERGE_SPLIT 65536 /* elements: smaller calls run on one thread */

typedef struct {
    const favor_tensor *a, *b, *o;
    const float *la, *lb;
    float *lse;
    size_t n;
} favor__merge;

/* columns [c0, c0 + nc) of row r of head h of t as fp32: the tensor's own
 * (fp32) or widened into buf */
static const float *favor__cols_in(const favor_tensor *t, size_t h, size_t r, size_t c0,
                                   size_t nc, float *buf)
{
    const void *p = favor__at(t, h, r);
    if (t->dtype == FAVOR_F32) return (const float *)p + c0;
    if (t->dtype == FAVOR_F16) favor__widen_f16(buf, (const uint16_t *)p + c0, nc);
    else favor__widen_bf16(buf, (const uint16_t *)p + c0, nc);
    return buf;
}

/* nc fp32 values x into columns [c0, c0 + nc) of row r of head h of t, rounded
 * once to its type (x may be those very columns of an fp32 t) */
static void favor__cols_out(const favor_tensor *t, size_t h, size_t r, size_t c0, size_t nc,
                            const float *x)
{
    void *p = favor__at(t, h, r);
    if (t->dtype == FAVOR_F32) memmove((float *)p + c0, x, nc * sizeof(float));
    else if (t->dtype == FAVOR_F16) favor__narrow_f16((uint16_t *)p + c0, x, nc);
    else favor__narrow_bf16((uint16_t *)p + c0, x, nc);
}

/* 1 when x and y (shaped alike) are the very same view: every element of one
 * is the same element of the other */
static int favor__same_view(const favor_tensor *x, const favor_tensor *y)
{
    return x->data == y->data && x->dtype == y->dtype &&
           (x->rows < 2 || x->row_stride == y->row_stride) &&
           (x->heads < 2 || x->head_stride == y->head_stride) &&
           (favor__nbatch(x) < 2 || x->batch_stride == y->batch_stride);
}

/* row i of head h */
static void favor__merge_row(const favor__merge *m, size_t h, size_t i)
{
    float A[FAVOR__MERGE_COLS], B[FAVOR__MERGE_COLS], O[FAVOR__MERGE_COLS], fill = 0.0f;
    size_t at = h * m->n + i, cols = m->o->cols, c0, j;
    float la = m->la[at], lb = m->lb[at], l;
    double ca = 0.0, cb = 0.0;
    const favor_tensor *src = NULL; /* the one side the row is, or none */
    int weigh = 0;
    if (la != la || lb != lb) { /* NaN */
        l = la + lb;
        fill = l;
    } else if (la == lb && (la == INFINITY || la == -INFINITY)) {
        l = la;                                  /* no key on either side: zeros */
        if (la == INFINITY) fill = la - la;     /* both infinitely heavy: NaN */
    } else if (lb == -INFINITY || la == INFINITY) {
        l = la;
        src = m->a;
    } else if (la == -INFINITY || lb == INFINITY) {
        l = lb;
        src = m->b;
    } else { /* both finite: one weight is 1, the other exp(-|la - lb|) */
        double mx = la > lb ? la : lb, wa = exp((double)la - mx), wb = exp((double)lb - mx),
               s = wa + wb;
        ca = wa / s;
        cb = wb / s;
        l = (float)(mx + log(s));
        weigh = 1;
    }
    for (c0 = 0; c0 < cols; c0 += FAVOR__MERGE_COLS) {
        size_t nc = cols - c0 < FAVOR__MERGE_COLS ? cols - c0 : FAVOR__MERGE_COLS;
        if (src) {
            favor__cols_out(m->o, h, i, c0, nc, favor__cols_in(src, h, i, c0, nc, A));
        } else if (weigh) {
            const float *a = favor__cols_in(m->a, h, i, c0, nc, A);
            const float *b = favor__cols_in(m->b, h, i, c0, nc, B);
            float *o = m->o->dtype == FAVOR_F32 ? (float *)favor__at(m->o, h, i) + c0 : O;
            for (j = 0; j < nc; ++j) o[j] = (float)(ca * (double)a[j] + cb * (double)b[j]);
            if (o == O) favor__cols_out(m->o, h, i, c0, nc, O);
        } else {
            for (j = 0; j < nc; ++j) O[j] = fill;
            favor__cols_out(m->o, h, i, c0, nc, O);
        }
    }
    if (m->lse) m->lse[at] = l;
}

/* an output r (`name`) may be the very view or array an input x is (same), or
 * share no byte with it; `how` says what the same would be */
static favor_status favor__merge_alias(const favor__why *w, const char *name, int same,
                                       favor__range r, const char *xname, favor__range x,
                                       const char *how)
{
    (void)name; /* under FAVOR_NO_ERROR_TEXT */
    (void)xname;
    (void)how;
    if (same || !favor__overlap(r, x)) return FAVOR_OK;
    return favor__no(w, FAVOR_E_ALIAS, "%s overlaps %s%s", name, xname, how);
}

FAVOR__DEF favor_status favor_attention_merge(const favor_tensor *out_a, const float *lse_a,
                                             const favor_tensor *out_b, const float *lse_b,
                                             const favor_tensor *out, float *lse,
                                             const favor_options *opts)
{
    favor__why w = favor__why_of(opts);
    favor__range ra, rb, ro, rla, rlb, rl;
    favor__merge m;
    favor_status st;
    size_t cnt, bytes, nt = 1, elems;
    long it, items;
    if (opts && opts->threads < 0) return favor__no(&w, FAVOR_E_ARG, "opts: threads is negative");
    if (!out_a || !lse_a || !out_b || !lse_b || !out)
        return favor__no(&w, FAVOR_E_NULL, "%s is NULL",
                         !out_a ? "out_a" : !lse_a ? "lse_a" : !out_b ? "out_b" : !lse_b ? "lse_b"
                                                                                 : "out");
    if ((st = favor__check_tensor(out_a, "out_a", &w, &ra)) != FAVOR_OK ||
        (st = favor__check_tensor(out_b, "out_b", &w, &rb)) != FAVOR_OK ||
        (st = favor__check_tensor(out, "out", &w, &ro)) != FAVOR_OK)
        return st;
    if ((st = favor__same(&w, "out_b", "batch", favor__nbatch(out_b), "out_a",
                          favor__nbatch(out_a))) != FAVOR_OK ||
        (st = favor__same(&w, "out_b", "heads", out_b->heads, "out_a", out_a->heads)) != FAVOR_OK ||
        (st = favor__same(&w, "out_b", "rows", out_b->rows, "out_a", out_a->rows)) != FAVOR_OK ||
        (st = favor__same(&w, "out_b", "cols", out_b->cols, "out_a", out_a->cols)) != FAVOR_OK ||
        (st = favor__same(&w, "out", "batch", favor__nbatch(out), "out_a",
                          favor__nbatch(out_a))) != FAVOR_OK ||
        (st = favor__same(&w, "out", "heads", out->heads, "out_a", out_a->heads)) != FAVOR_OK ||
        (st = favor__same(&w, "out", "rows", out->rows, "out_a", out_a->rows)) != FAVOR_OK ||
        (st = favor__same(&w, "out", "cols", out->cols, "out_a", out_a->cols)) != FAVOR_OK)
        return st;
    cnt = favor__nheads(out) * out->rows; /* distinct rows of a valid view: fits */
    if (!favor__mul_ok(cnt, sizeof(float), &bytes) ||
        (uintptr_t)lse_a > UINTPTR_MAX - bytes || (uintptr_t)lse_b > UINTPTR_MAX - bytes ||
        (lse && (uintptr_t)lse > UINTPTR_MAX - bytes))
        return favor__no(&w, FAVOR_E_OVERFLOW, "lse: %z heads x %z rows pass the end of the "
                                               "address space", favor__nheads(out), out->rows);
    rla = favor__range_of(lse_a, bytes);
    rlb = favor__range_of(lse_b, bytes);
    {
        static const char *const view = " and is not the same view";
        static const char *const ptr = " and is not the same pointer";
        if ((st = favor__merge_alias(&w, "out", favor__same_view(out, out_a), ro, "out_a", ra,
                                     view)) != FAVOR_OK ||
            (st = favor__merge_alias(&w, "out", favor__same_view(out, out_b), ro, "out_b", rb,
                                     view)) != FAVOR_OK ||
            (st = favor__merge_alias(&w, "out", 0, ro, "lse_a", rla, "")) != FAVOR_OK ||
            (st = favor__merge_alias(&w, "out", 0, ro, "lse_b", rlb, "")) != FAVOR_OK)
            return st;
        if (lse) {
            rl = favor__range_of(lse, bytes);
            if ((st = favor__merge_alias(&w, "lse", lse == lse_a, rl, "lse_a", rla, ptr)) !=
                    FAVOR_OK ||
                (st = favor__merge_alias(&w, "lse", lse == lse_b, rl, "lse_b", rlb, ptr)) !=
                    FAVOR_OK ||
                (st = favor__merge_alias(&w, "lse", 0, rl, "out_a", ra, "")) != FAVOR_OK ||
                (st = favor__merge_alias(&w, "lse", 0, rl, "out_b", rb, "")) != FAVOR_OK ||
                (st = favor__merge_alias(&w, "lse", 0, rl, "out", ro, "")) != FAVOR_OK)
                return st;
        }
    }
    m.a = out_a;
    m.b = out_b;
    m.o = out;
    m.la = lse_a;
    m.lb = lse_b;
    m.lse = lse;
    m.n = out->rows;
    items = (long)cnt;
    elems = cnt * out->cols;
    if (elems >= FAVOR__MERGE_SPLIT) nt = favor__nthreads(opts);
    (void)nt; /* without OpenMP */
#ifdef _OPENMP
    if (nt > 1) { /* on one thread no region, for FAVOR__PAR_FOR's reason */
#pragma omp parallel for num_threads((int)nt) schedule(static)
        for (it = 0; it < items; ++it) favor__merge_row(&m, (size_t)it / m.n, (size_t)it % m.n);
        return FAVOR_OK;
    }
#endif
    for (it = 0; it < items; ++it) favor__merge_row(&m, (size_t)it / m.n, (size_t)it % m.n);
    return FAVOR_OK;
}

/* 4.10 Linear attention ----------------------------------------------------------
 * Per key/value head a state S = sum_j phi(k_j) v_j^T (width x d_v) and
 * z = sum_j phi(k_j), both stored scaled by exp(-c). Keys are processed in chunks
 * of C rows. Non-causal: absorb every chunk (c rises to the running maximum of
 * the keys' log-scales, rescaling S and z), then o_i = phi(q_i)S / phi(q_i)z.
 * Causal: key j of a chunk is stabilized with m_j, the running maximum over keys
 * <= j only, so nothing depends on a later key; row i of the chunk is
 *   o_i = (e_i phi(q_i)S + sum_{j<=i} a_ij v_j) / (e_i phi(q_i)z + sum_{j<=i} a_ij),
 *   a_ij = phi(q_i).phi(k_j) exp(m_j - m_i),   e_i = exp(c - m_i),
 * and the chunk is then absorbed. A step is a chunk of one row.
 * Gated (see GATES), with the chunk's log-gates l_t = g_t + log(gamma) and their
 * cumulative sums G_j = l_0 + .. + l_j from the chunk's start, in double: the
 * running maximum decays, m_j = max(m_{j-1} + l_j, r_j) (from c), so that with
 * D_j = m_j - G_j (double)
 *   a_ij = phi(q_i).phi(k_j) exp(D_j - D_i),   e_i = exp(c - D_i),
 * every exponent <= 0 (D never decreases), and absorbing the chunk takes the
 * keys times exp(D_j - D_last) and the state times exp(c - D_last), at the new
 * scale m_last. The difference D_j - D_i is rounded once to float, so a factor
 * errs by about 2^-24 |D_j - D_i| relative, however long the chunk's gates sum.
 * Without the normalizer (FAVOR_NO_NORM) row i is the numerator times
 * exp(r_q,i + m_i), the scales the stabilizers took out. */
/* the log-gates of rows [r0, r0 + nr) of key/value head g (every batch
 * element's heads counted), g_t + log(gamma), into lg (double) */
static void favor__log_gates(const favor__map *mp, size_t g, size_t r0, size_t nr, double *lg)
{
    size_t i;
    double lgam = mp->decay ? log((double)mp->decay[g % mp->dheads]) : 0.0;
    for (i = 0; i < nr; ++i)
        lg[i] = lgam + (mp->gates ? (double)*(const float *)favor__at(mp->gates, g, r0 + i) : 0.0);
}

#define FAVOR__CHUNK 64

typedef struct {
    float *kf, *kt, *qf, *a, *rk, *mk, *rq, *g;
    float *comp; /* the rounding errors of the state it absorbs into, or NULL */
    float *tile; /* width x d_v: a chunk's sums before they join the state     */
    size_t cap;  /* C: rows of the chunk buffers */
    const double *lg; /* gated: the chunk's log-gates l_t (NULL: ungated)      */
    double *dd;       /* gated: D_j (cap doubles)                              */
    size_t nsep;      /* gated: the chunk's first keys, with D_j - ref <= FAVOR__SEP,
                         that kf holds times exp(D_j - ref) (see below)        */
    double ref;       /* gated: D_0 (a pending block: the state's c)           */
} favor__chunk;

/* A gated chunk's pair factor exp(D_j - D_i) is split, for its first nsep keys
 * (D_j - D_0 <= FAVOR__SEP), into the key's exp(D_j - D_0), applied to kf once,
 * and the row's exp(D_0 - D_i): one exponential per row instead of one per
 * pair; the later keys keep exact pair factors (a pending block of the
 * recurrent step splits them at the state's c instead: ref, 4.11). Every
 * quantity depends on keys <= its own row only, so outputs keep ignoring later
 * keys bit for bit. A split factor errs by about 2^-24 (FAVOR__SEP + D_i -
 * D_0) relative, beside the exact one's 2^-24 (D_i - D_j): at most 5e-7 more. */
#define FAVOR__SEP 8.0

/* nsep of keys whose D are dd[0 .. n): the first keys with D_j - ref <= FAVOR__SEP */
static size_t favor__nsep(const double *dd, size_t n, double ref)
{
    size_t j = 0;
    while (j < n && dd[j] - ref <= FAVOR__SEP) ++j;
    return j;
}

/* keys j < n of kf (stride w) times their share exp(dd[j] - ref) (a share of 1
 * left as it is) */
static void favor__key_shares(float *kf, size_t w, const double *dd, double ref, size_t n)
{
    size_t j;
    for (j = 0; j < n; ++j)
        if (dd[j] != ref) favor__scal(kf + j * w, favor__s_exp((float)(dd[j] - ref)), w);
}

static size_t favor__chunk_floats(size_t C, size_t w) { return 3 * C * w + C * C + 4 * C; }

static void favor__chunk_carve(favor__chunk *cb, float *p, size_t C, size_t w)
{
    cb->cap = C;
    cb->comp = cb->tile = NULL;
    cb->lg = NULL;
    cb->dd = NULL;
    cb->nsep = 0;
    cb->ref = 0.0;
    cb->kf = p; p += C * w;
    cb->kt = p; p += w * C;
    cb->qf = p; p += C * w;
    cb->a = p; p += C * C;
    cb->rk = p; p += C;
    cb->mk = p; p += C;
    cb->rq = p; p += C;
    cb->g = p;
}

/* Compensated (Kahan) addition s += t, e holding what rounding took from s: a
 * running sum of n terms then errs by O(eps), not O(n eps) (a state that has
 * absorbed 10^7 tokens drifts by 1e-6, not 1e-2; tests/long_recurrence.c). */
static void favor__kahan_add(float *s, float *e, const float *t, size_t n)
{
    size_t i, nv = n - n % FAVOR__W;
    for (i = 0; i < nv; i += FAVOR__W) {
        favor__vf y = favor__v_sub(favor__v_load(t + i), favor__v_load(e + i));
        favor__vf sv = favor__v_load(s + i), u = favor__v_add(sv, y);
        favor__v_store(e + i, favor__v_sub(favor__v_sub(u, sv), y));
        favor__v_store(s + i, u);
    }
    for (i = nv; i < n; ++i) {
        float y = t[i] - e[i], u = s[i] + y;
        e[i] = (u - s[i]) - y;
        s[i] = u;
    }
}

/* s = f s + t and e = f e (the sum and its errors scaled by f first, as
 * favor__scal of both would, in the same pass), compensated as favor__kahan_add */
static void favor__kahan_add_sc(float *s, float *e, float f, const float *t, size_t n)
{
    size_t i, nv = n - n % FAVOR__W;
    favor__vf vf = favor__v_set1(f);
    for (i = 0; i < nv; i += FAVOR__W) {
        favor__vf ev = favor__v_mul(favor__v_load(e + i), vf);
        favor__vf y = favor__v_sub(favor__v_load(t + i), ev);
        favor__vf sv = favor__v_mul(favor__v_load(s + i), vf), u = favor__v_add(sv, y);
        favor__v_store(e + i, favor__v_sub(favor__v_sub(u, sv), y));
        favor__v_store(s + i, u);
    }
    for (i = nv; i < n; ++i) {
        float ev = e[i] * f, sv = s[i] * f, y = t[i] - ev, u = sv + y;
        e[i] = (u - sv) - y;
        s[i] = u;
    }
}

/* s += a x compensated, as favor__kahan_add with t = a x */
static void favor__kahan_axpy(float *s, float *e, float a, const float *x, size_t n)
{
    size_t i, nv = n - n % FAVOR__W;
    favor__vf va = favor__v_set1(a);
    for (i = 0; i < nv; i += FAVOR__W) {
        favor__vf y = favor__v_sub(favor__v_mul(va, favor__v_load(x + i)), favor__v_load(e + i));
        favor__vf sv = favor__v_load(s + i), u = favor__v_add(sv, y);
        favor__v_store(e + i, favor__v_sub(favor__v_sub(u, sv), y));
        favor__v_store(s + i, u);
    }
    for (i = nv; i < n; ++i) {
        float y = a * x[i] - e[i], u = s[i] + y;
        e[i] = (u - s[i]) - y;
        s[i] = u;
    }
}

/* S, z (scaled by exp(-*c)) += the chunk whose features kf (nr x width) are
 * stabilized at mnew; c becomes mnew. With E (width x (dv+1): the errors of S
 * and z) the chunk's sums are formed in T (max(width, FOLD dv) floats: FOLD rows
 * of S at a time, while they are in L1; one token: rank 1) and added
 * compensated. */
#define FAVOR__FOLD 16
static void favor__state_add(const favor__map *mp, float *S, float *z, float *c, float mnew,
                             const float *kf, const float *V, size_t ldv, size_t nr, size_t dv,
                             float *E, float *T, float decay)
{
    size_t j, r, w = mp->width;
    if (*c != mnew) {
        decay *= favor__s_exp(*c - mnew); /* gated calls come with c = mnew */
        *c = mnew;
    }
    if (decay != 1.0f && (!E || nr == 1)) { /* else scaled as the sums are added */
        favor__scal(S, decay, w * dv);
        favor__scal(z, decay, w);
        if (E) favor__scal(E, decay, w * (dv + 1));
        decay = 1.0f;
    }
    if (!E) {
        favor__gemm(w, dv, nr, kf, 1, w, V, ldv, S, dv, 1); /* S += kf^T V, kf read in place */
        for (j = 0; j < nr; ++j) favor__vadd(z, kf + j * w, w);
    } else if (nr == 1) { /* S += kf v^T, z += kf */
        for (r = 0; r < w; ++r) favor__kahan_axpy(S + r * dv, E + r * dv, kf[r], V, dv);
        favor__kahan_add(z, E + w * dv, kf, w);
    } else {
        memcpy(T, kf, w * sizeof(float));
        for (j = 1; j < nr; ++j) favor__vadd(T, kf + j * w, w);
        if (decay != 1.0f) favor__kahan_add_sc(z, E + w * dv, decay, T, w);
        else favor__kahan_add(z, E + w * dv, T, w);
        for (r = 0; r < w; r += FAVOR__FOLD) { /* S += kf^T V, FOLD rows at a time */
            size_t rows = w - r < FAVOR__FOLD ? w - r : FAVOR__FOLD;
            favor__gemm(rows, dv, nr, kf + r, 1, w, V, ldv, T, dv, 0);
            if (decay != 1.0f) favor__kahan_add_sc(S + r * dv, E + r * dv, decay, T, rows * dv);
            else favor__kahan_add(S + r * dv, E + r * dv, T, rows * dv);
        }
    }
}

/* absorb nr (<= C) keys, no outputs */
static void favor__lin_absorb(const favor__map *mp, float *S, float *z, float *c,
                              const float *K, size_t ldk, const float *V, size_t ldv,
                              size_t nr, size_t dv, favor__chunk *cb)
{
    size_t j, w = mp->width;
    float mnew;
    favor__phi_raw(mp, K, ldk, nr, cb->kf, w, cb->rk);
    mnew = favor__s_max(favor__maxval(cb->rk, nr), *c);
    for (j = 0; j < nr; ++j) cb->mk[j] = mnew;
    favor__phi_finish(mp, cb->kf, w, nr, cb->rk, cb->mk);
    favor__state_add(mp, S, z, c, mnew, cb->kf, V, ldv, nr, dv, cb->comp, cb->tile, 1.0f);
}

/* The denominator a row is divided by under the rules of the manual (TRIG:
 * floored at +-1e-20); 0 means the row is zero. */
static float favor__den_eff(const favor__map *mp, float den)
{
    if (mp->kernel == FAVOR_TRIG && fabsf(den) < 1e-20f) return den < 0.0f ? -1e-20f : 1e-20f;
    return den;
}

/* out row = num / den with the denominator rules of the manual */
static void favor__divide(const favor__map *mp, float *o, float den, size_t dv)
{
    den = favor__den_eff(mp, den);
    if (den != 0.0f) favor__divs(o, den, dv);
    else favor__scal(o, 0.0f, dv);
}

/* non-causal outputs of nr (<= C) query rows from a finished state */
static void favor__lin_output(const favor__map *mp, const float *S, const float *z, float c,
                              const float *Q, size_t ldq, float *O, size_t ldo, size_t nr,
                              size_t dv, favor__chunk *cb)
{
    size_t i, w = mp->width;
    favor__phi_raw(mp, Q, ldq, nr, cb->qf, w, cb->rq);
    favor__phi_finish(mp, cb->qf, w, nr, cb->rq, cb->rq);
    favor__gemm(nr, dv, w, cb->qf, w, 1, S, dv, O, ldo, 0);
    for (i = 0; i < nr; ++i) {
        if (!mp->nonorm) /* without the normalizer: times the scales taken out */
            favor__divide(mp, O + i * ldo, favor__dot(cb->qf + i * w, z, w), dv);
        else if (favor__stabilized(mp->kernel))
            favor__scal(O + i * ldo, favor__s_exp(cb->rq[i] + c), dv);
    }
}

/* A group of query heads sharing one key/value head (heads h0 .. h0 + count - 1
 * of q and out, rows from r0), and the key/value rows they meet (head g of k
 * and v, rows from kr0), with the buffers for 16-bit rows: qb, kb (C x d), vb,
 * ob (C x d_v). */
typedef struct {
    const favor_tensor *q, *o, *k, *v;
    size_t h0, count, r0, g, kr0;
    float *qb, *ob, *kb, *vb;
} favor__qgroup;

/* zero nr rows from r0 of head h (+0 in every element type) */
static void favor__zero_rows(const favor_tensor *t, size_t h, size_t r0, size_t nr)
{
    size_t i;
    for (i = 0; i < nr; ++i) memset(favor__at(t, h, r0 + i), 0, t->cols * favor_dtype_size(t->dtype));
}

/* The keys of a causal chunk (nr <= C rows): kf stabilized at the running
 * maxima mk (from *c on), and its transpose kt. Returns 1 when the maximum rose
 * within the chunk (else every factor exp(m_j - m_i) is 1); *mrun = the last. */
static int favor__chunk_keys(const favor__map *mp, float c, const float *K, size_t ldk,
                             size_t nr, favor__chunk *cb, float *mrun)
{
    size_t j, w = mp->width;
    float m = c;
    FAVOR_ASSERT(nr >= 1 && nr <= cb->cap);
    favor__phi_raw(mp, K, ldk, nr, cb->kf, w, cb->rk);
    if (cb->lg) { /* the decaying maximum and D_j (4.10) */
        double G = 0.0, t;
        for (j = 0; j < nr; ++j) {
            G += cb->lg[j];
            t = (double)m + cb->lg[j];
            cb->mk[j] = m = (double)cb->rk[j] > t ? cb->rk[j] : (float)t;
            cb->dd[j] = (double)m - G;
        }
        cb->ref = cb->dd[0];
        cb->nsep = favor__nsep(cb->dd, nr, cb->ref);
    } else {
        for (j = 0; j < nr; ++j) cb->mk[j] = m = favor__s_max(cb->rk[j], m);
        cb->nsep = 0;
    }
    favor__phi_finish(mp, cb->kf, w, nr, cb->rk, cb->mk);
    favor__key_shares(cb->kf, w, cb->dd, cb->ref, cb->nsep); /* gated: exp(D_j - D_0) */
    favor__transpose(nr, w, cb->kf, w, cb->kt, cb->cap);
    *mrun = m;
    return cb->lg || (favor__stabilized(mp->kernel) && cb->mk[0] != m);
}

/* e_i of row i of a causal chunk: exp(c - m_i), gated exp(c - D_i) */
static float favor__chunk_e(const favor__chunk *cb, float c, size_t i)
{
    if (cb->lg) return favor__s_exp((float)((double)c - cb->dd[i]));
    return favor__s_exp(c - cb->mk[i]);
}

/* the factors exp(m_j - m_i) (gated: exp(D_j - D_i)) of keys j < n, as kf holds
 * them, into cb->g: gated, the row's exp(ref - D_i) for the first nsep keys */
static void favor__chunk_factors(const favor__chunk *cb, size_t i, size_t n)
{
    size_t j, ns;
    if (!cb->lg) {
        favor__exp_add(cb->g, cb->mk, -cb->mk[i], n);
        return;
    }
    ns = cb->nsep < n ? cb->nsep : n;
    if (ns) {
        float f = favor__s_exp((float)(cb->ref - cb->dd[i]));
        for (j = 0; j < ns; ++j) cb->g[j] = f;
    }
    for (j = ns; j < n; ++j) cb->g[j] = (float)(cb->dd[j] - cb->dd[i]);
    favor__exp_add(cb->g + ns, cb->g + ns, 0.0f, n - ns);
}

/* The scores of a causal chunk for one query head, after favor__chunk_keys: qf,
 * a_ij = phi(q_i).phi(k_j) exp(m_j - m_i) for j <= i (0 after) and the
 * denominators e_i phi(q_i).z + sum_j a_ij in cb->rq (e_i = exp(c - m_i)). The
 * products are triangular (favor__gemm_lower). */
static void favor__chunk_scores(const favor__map *mp, float c, const float *z, const float *Q,
                                size_t ldq, size_t nr, int rising, favor__chunk *cb)
{
    size_t i, w = mp->width, C = cb->cap;
    favor__phi_raw(mp, Q, ldq, nr, cb->qf, w, cb->rq);
    favor__phi_finish(mp, cb->qf, w, nr, cb->rq, cb->rq);
    favor__gemm_lower(nr, w, cb->qf, w, cb->kt, C, cb->a, C); /* future keys: 0 */
    for (i = 0; i < nr; ++i) {
        float *ai = cb->a + i * C;
        size_t nf = cb->lg ? i + 1 : i; /* gated: the diagonal too (kf's share) */
        if (rising && nf) { /* a_ij *= exp(m_j - m_i) */
            favor__chunk_factors(cb, i, nf);
            favor__vmul(ai, cb->g, nf);
        }
        if (mp->nonorm) /* the scale of the row's numerator (4.10) */
            cb->rq[i] = favor__stabilized(mp->kernel) ? favor__s_exp(cb->rq[i] + cb->mk[i]) : 1.0f;
        else
            cb->rq[i] = favor__chunk_e(cb, c, i) * favor__dot(cb->qf + i * w, z, w) +
                        favor__sum(ai, i + 1);
    }
}

/* row i of a causal chunk (numerator in o) finished: divided by its
 * denominator, or, without the normalizer, multiplied by its scale */
static void favor__chunk_finish(const favor__map *mp, float *o, float rq, size_t dv)
{
    if (!mp->nonorm) favor__divide(mp, o, rq, dv);
    else if (rq != 1.0f) favor__scal(o, rq, dv);
}

/* The unnormalized outputs of a causal chunk for one query head:
 * O (nr x d_v) = e_i phi(q_i) S + sum_{j<=i} a_ij v_j, with the denominators in
 * cb->rq (favor__chunk_scores). */
static void favor__chunk_rows(const favor__map *mp, float c, const float *S, const float *z,
                              const float *Q, size_t ldq, const float *V, size_t ldv, float *O,
                              size_t ldo, size_t nr, size_t dv, int rising, favor__chunk *cb)
{
    size_t i, w = mp->width;
    favor__chunk_scores(mp, c, z, Q, ldq, nr, rising, cb);
    favor__gemm(nr, dv, w, cb->qf, w, 1, S, dv, O, ldo, 0);
    for (i = 0; i < nr; ++i) favor__scal(O + i * ldo, favor__chunk_e(cb, c, i), dv);
    favor__gemm_tri(nr, dv, 0, cb->a, cb->cap, 1, V, ldv, O, ldo);
}

/* Absorb a causal chunk after its rows: every key brought to the chunk's final
 * maximum mrun, then added to S, z. */
static void favor__chunk_absorb(const favor__map *mp, float *S, float *z, float *c,
                                float mrun, int rising, const float *V, size_t ldv, size_t nr,
                                size_t dv, favor__chunk *cb)
{
    size_t j, w = mp->width;
    float decay = 1.0f;
    if (rising) { /* gated: the last key too (kf's share) */
        favor__chunk_factors(cb, nr - 1, nr);
        for (j = 0; j + (cb->lg ? 0 : 1) < nr; ++j) favor__scal(cb->kf + j * w, cb->g[j], w);
    }
    if (cb->lg && *c != -INFINITY) { /* the state decays: exp(c - D_last) */
        decay = favor__s_exp((float)((double)*c - cb->dd[nr - 1]));
        *c = mrun;
    }
    favor__state_add(mp, S, z, c, mrun, cb->kf, V, ldv, nr, dv, cb->comp, cb->tile, decay);
}

/* The chunk length of the causal passes: the intra-chunk work per token is
 * O(C (width + d_v)) against O(width d_v) for the state, so narrow maps use
 * shorter chunks to keep the two in proportion. */
static size_t favor__causal_step(const favor__map *mp, size_t cap)
{
    return mp->width * 2 < cap * 3 && cap >= 32 ? cap / 2 : cap;
}

/* Causal rows [0, L) of a query group against keys [0, L) after the state, in
 * chunks: each chunk's rows of every query head, then its keys absorbed. */
static void favor__lin_causal_run(const favor__map *mp, float *S, float *z, float *c,
                                  size_t L, size_t dv, const favor__qgroup *qg,
                                  favor__chunk *cb)
{
    size_t t0, i, t, ldk, ldv, ldq, ldo, step = favor__causal_step(mp, cb->cap);
    double lg[FAVOR__CHUNK], dd[FAVOR__CHUNK];
    if (favor__gated(mp)) {
        cb->lg = lg;
        cb->dd = dd;
    }
    for (t0 = 0; t0 < L; t0 += step) {
        size_t nr = L - t0 < step ? L - t0 : step;
        const float *K, *V;
        float mrun;
        int rising;
        if (t0 + nr < L) { /* the next chunk's rows */
            size_t nn = L - t0 - nr < step ? L - t0 - nr : step;
            favor__prefetch_rows(qg->k, qg->g, qg->kr0 + t0 + nr, nn, 0);
            favor__prefetch_rows(qg->v, qg->g, qg->kr0 + t0 + nr, nn, 0);
            for (t = 0; t < qg->count; ++t)
                favor__prefetch_rows(qg->q, qg->h0 + t, qg->r0 + t0 + nr, nn, 0);
        }
        K = favor__in(qg->k, qg->g, qg->kr0 + t0, nr, qg->kb, &ldk);
        V = favor__in(qg->v, qg->g, qg->kr0 + t0, nr, qg->vb, &ldv);
        if (cb->lg) favor__log_gates(mp, qg->g, qg->kr0 + t0, nr, lg);
        rising = favor__chunk_keys(mp, *c, K, ldk, nr, cb, &mrun);
        for (t = 0; t < qg->count; ++t) {
            size_t h = qg->h0 + t, r0 = qg->r0 + t0;
            const float *Q = favor__in(qg->q, h, r0, nr, qg->qb, &ldq);
            float *O = favor__out(qg->o, h, r0, qg->ob, &ldo);
            favor__chunk_rows(mp, *c, S, z, Q, ldq, V, ldv, O, ldo, nr, dv, rising, cb);
            for (i = 0; i < nr; ++i) favor__chunk_finish(mp, O + i * ldo, cb->rq[i], dv);
            favor__out_done(qg->o, h, r0, nr, O, ldo);
        }
        favor__chunk_absorb(mp, S, z, c, mrun, rising, V, ldv, nr, dv, cb);
    }
    cb->lg = NULL;
    cb->dd = NULL;
}

/* An input array of the call (decay, gates) that no output may overlap: then
 * kept in sh->other, as the tensors are */
static favor_status favor__input_range(favor__shape *sh, favor__range r, const char *name,
                                       const favor__why *w)
{
    (void)name;
    if (favor__overlap(r, sh->o) || (sh->ngrad && (favor__overlap(r, sh->grad[0]) ||
                                                   favor__overlap(r, sh->grad[1]) ||
                                                   favor__overlap(r, sh->grad[2]))))
        return favor__no(w, FAVOR_E_ALIAS, "an output overlaps %s", name);
    sh->other[sh->nother++] = r;
    return FAVOR_OK;
}

/* The options of gated linear attention (GATES): FAVOR_IDENTITY only with
 * FAVOR_NO_NORM; decay and gates only on a causal call (extend and step always
 * are) and with valid values; a backward call (grad) may take dgates, an
 * output shaped as the gates, with them. */
static favor_status favor__check_gates(const favor_options *o, const favor_features *f,
                                       const favor_tensor *k, int causal, int grad,
                                       favor__shape *sh, const favor__why *w)
{
    int nonorm = o && (o->flags & FAVOR_NO_NORM);
    size_t h, r, bytes;
    favor__range rg;
    favor_status st;
    if (f->kernel == FAVOR_IDENTITY && !nonorm)
        return favor__no(w, FAVOR_E_ARG, "f: FAVOR_IDENTITY needs FAVOR_NO_NORM (its "
                                         "denominators can be zero or negative)");
    if (!o) return FAVOR_OK;
    if (grad && o->dgates && !o->gates)
        return favor__no(w, FAVOR_E_ARG, "opts.dgates is given without opts.gates");
    if (!o->decay && !o->gates) return FAVOR_OK;
    if (!causal)
        return favor__no(w, FAVOR_E_ARG, "%s needs FAVOR_CAUSAL (it decays a causal state)",
                         o->decay ? "opts.decay" : "opts.gates");
    if (o->decay) { /* where it ends, before it is read */
        if (!favor__mul_ok(k->heads, sizeof(float), &bytes) ||
            (uintptr_t)o->decay > UINTPTR_MAX - bytes)
            return favor__no(w, FAVOR_E_OVERFLOW, "opts.decay: %z floats pass the end of the "
                                                  "address space", k->heads);
        for (h = 0; h < k->heads; ++h)
            if (!(o->decay[h] > 0.0f && o->decay[h] <= 1.0f))
                return favor__no(w, FAVOR_E_ARG, "opts.decay[%z] is not in (0, 1]", h);
        if ((st = favor__input_range(sh, favor__range_of(o->decay, bytes), "opts.decay", w)) !=
            FAVOR_OK)
            return st;
    }
    if (o->gates) {
        const favor_tensor *g = o->gates;
        if ((st = favor__check_tensor(g, "opts.gates", w, &rg)) != FAVOR_OK) return st;
        if (g->dtype != FAVOR_F32)
            return favor__no(w, FAVOR_E_ARG, "opts.gates: dtype %z is not FAVOR_F32",
                             (size_t)(unsigned)g->dtype);
        if ((st = favor__same(w, "opts.gates", "heads", g->heads, "k", k->heads)) != FAVOR_OK ||
            (st = favor__same(w, "opts.gates", "rows", g->rows, "k", k->rows)) != FAVOR_OK ||
            (st = favor__same(w, "opts.gates", "batch", favor__nbatch(g), "k",
                              favor__nbatch(k))) != FAVOR_OK)
            return st;
        if (g->cols != 1)
            return favor__no(w, FAVOR_E_SHAPE, "opts.gates: cols %z, not 1", g->cols);
        for (h = 0; h < favor__nheads(g); ++h)
            for (r = 0; r < g->rows; ++r) {
                float x = *(const float *)favor__at(g, h, r);
                if (!(x <= 0.0f && x >= -FLT_MAX))
                    return favor__no(w, FAVOR_E_ARG, "opts.gates: head %z (of batch element "
                                                     "%z) row %z is positive, NaN or -inf "
                                                     "(log-gates are finite, <= 0)",
                                     h % g->heads, h / g->heads, r);
            }
        if ((st = favor__input_range(sh, rg, "opts.gates", w)) != FAVOR_OK) return st;
    }
    if (grad && o->dgates) { /* an output: shaped as the gates, overlapping nothing */
        const favor_tensor *g = o->dgates;
        if ((st = favor__check_tensor(g, "opts.dgates", w, &rg)) != FAVOR_OK) return st;
        if (g->dtype != FAVOR_F32)
            return favor__no(w, FAVOR_E_ARG, "opts.dgates: dtype %z is not FAVOR_F32",
                             (size_t)(unsigned)g->dtype);
        if ((st = favor__same(w, "opts.dgates", "heads", g->heads, "opts.gates",
                              o->gates->heads)) != FAVOR_OK ||
            (st = favor__same(w, "opts.dgates", "rows", g->rows, "opts.gates",
                              o->gates->rows)) != FAVOR_OK ||
            (st = favor__same(w, "opts.dgates", "batch", favor__nbatch(g), "opts.gates",
                              favor__nbatch(o->gates))) != FAVOR_OK ||
            (st = favor__same(w, "opts.dgates", "cols", g->cols, "opts.gates", 1)) != FAVOR_OK)
            return st;
        if (favor__overlaps_any(sh, rg, 1))
            return favor__no(w, FAVOR_E_ALIAS, "opts.dgates overlaps a tensor of the call or "
                                               "opts.gates or opts.decay");
        sh->other[sh->nother++] = rg;
    }
    return FAVOR_OK;
}

static favor_status favor__check_linear(const favor_features *f, const favor_tensor *q,
                                        const favor_tensor *k, const favor_tensor *v,
                                        const favor_tensor *out, const favor_options *opts,
                                        int causal, favor__shape *sh)
{
    favor_status st;
    favor__why w = favor__why_of(opts);
    if (!f) return favor__no(&w, FAVOR_E_NULL, "f is NULL");
    if ((st = favor__check_qkvo(q, k, v, out, sh, &w)) != FAVOR_OK) return st;
    if ((st = favor__check_features(f, &w)) != FAVOR_OK) return st;
    if ((st = favor__check_options(opts)) != FAVOR_OK) return st;
    if ((st = favor__check_no_mods(opts, &w)) != FAVOR_OK) return st;
    if ((st = favor__check_seqs(opts, q->rows, k->rows, &w)) != FAVOR_OK) return st;
    if ((st = favor__same(&w, "q", "cols", sh->d, "f", f->dim)) != FAVOR_OK) return st;
    if (f->w) {
        sh->other[sh->nother++] = favor__range_of(f->w, f->count * f->dim * sizeof(float));
        sh->other[sh->nother++] = favor__range_of(f->wt, f->count * f->dim * sizeof(float));
        if (favor__overlaps_any(sh, sh->o, 0))
            return favor__no(&w, FAVOR_E_ALIAS, "out overlaps f's w or wt");
    }
    return favor__check_gates(opts, f, k, causal, 0, sh, &w);
}

/* floats of workspace: one head's S and z, and the chunk buffers */
static size_t favor__linear_floats(const favor_features *f, size_t dv, int with_state)
{
    size_t w = favor__width(f->kernel, f->dim, f->count), n = 0, t;
    if (with_state && (!favor__mul_ok(w, dv + 1, &n) || !favor__mul_ok(n, 2, &n)))
        return 0; /* S, z and their errors */
    if (w > SIZE_MAX / 4 / FAVOR__CHUNK) return 0;
    t = favor__chunk_floats(FAVOR__CHUNK, w);
    if (!favor__add_ok(n, t, &n)) return 0;
    if (!favor__mul_ok(w, dv, &t) || !favor__add_ok(n, t, &n)) return 0; /* the tile */
    if (n > SIZE_MAX / sizeof(float)) return 0;
    return n;
}

/* floats of the row buffers of a chunk (favor__qgroup): for 16-bit q, k, v, and
 * the output's (always counted: the workspace queries do not see it) */
static size_t favor__linear_io_floats(const favor_tensor *q, const favor_tensor *k,
                                      const favor_tensor *v)
{
    size_t C = FAVOR__CHUNK, d = k->cols, dv = v->cols;
    if (d > SIZE_MAX / 8 / C || dv > SIZE_MAX / 8 / C) return 0;
    return favor__io_floats(q, C) + favor__io_floats(k, C) + favor__io_floats(v, C) + C * dv;
}

/* the row buffers of qg from p (favor__linear_io_floats) */
static void favor__qgroup_carve(favor__qgroup *qg, float *p)
{
    qg->qb = p;
    qg->kb = qg->qb + favor__io_floats(qg->q, FAVOR__CHUNK);
    qg->vb = qg->kb + favor__io_floats(qg->k, FAVOR__CHUNK);
    qg->ob = qg->vb + favor__io_floats(qg->v, FAVOR__CHUNK);
}

/* per-thread floats of a linear call: the kernel's and the row buffers' */
static size_t favor__linear_call_floats(const favor_features *f, const favor_tensor *q,
                                        const favor_tensor *k, const favor_tensor *v,
                                        int with_state, size_t *io_at)
{
    size_t a = favor__linear_floats(f, v->cols, with_state), b = favor__linear_io_floats(q, k, v);
    *io_at = a;
    return a && b && favor__add_ok(a, b, &a) && a <= SIZE_MAX / sizeof(float) ? a : 0;
}

static float favor__linear_scale(const favor_features *f, const favor_options *opts)
{
    return (opts && opts->scale > 0.0f) ? opts->scale : f->scale;
}

/* absorb keys [j0, j1) of head qg->g into S, z (scale *c), C rows at a time */
static void favor__lin_absorb_rows(const favor__map *mp, float *S, float *z, float *c,
                                   const favor__qgroup *qg, size_t j0, size_t j1, size_t dv,
                                   favor__chunk *cb)
{
    size_t C = FAVOR__CHUNK, ldk, ldv;
    double lg[FAVOR__CHUNK], dd[FAVOR__CHUNK];
    for (; j0 < j1; j0 += C) {
        size_t nr = j1 - j0 < C ? j1 - j0 : C;
        const float *K, *V;
        if (j0 + nr < j1) {
            size_t nn = j1 - j0 - nr < C ? j1 - j0 - nr : C;
            favor__prefetch_rows(qg->k, qg->g, j0 + nr, nn, 0);
            favor__prefetch_rows(qg->v, qg->g, j0 + nr, nn, 0);
        }
        K = favor__in(qg->k, qg->g, j0, nr, qg->kb, &ldk);
        V = favor__in(qg->v, qg->g, j0, nr, qg->vb, &ldv);
        if (favor__gated(mp)) { /* causal: the chunk's keys decay one by one */
            float mrun;
            cb->lg = lg;
            cb->dd = dd;
            favor__log_gates(mp, qg->g, j0, nr, lg);
            favor__chunk_keys(mp, *c, K, ldk, nr, cb, &mrun);
            favor__chunk_absorb(mp, S, z, c, mrun, 1, V, ldv, nr, dv, cb);
            cb->lg = NULL;
            cb->dd = NULL;
        } else {
            favor__lin_absorb(mp, S, z, c, K, ldk, V, ldv, nr, dv, cb);
        }
    }
}

/* The buffers of a linear pass in a thread's slice ws: S, z and their errors
 * (2 width (d_v + 1) floats), the chunk buffers, the tile, then the row buffers
 * at io; qg set up for key/value head g and its query heads. */
static void favor__lin_carve(const favor__map *mp, const favor_tensor *q, const favor_tensor *k,
                             const favor_tensor *v, const favor_tensor *out,
                             const favor__shape *sh, size_t g, float *ws, size_t io,
                             favor__chunk *cb, favor__qgroup *qg)
{
    size_t w = mp->width, dv = sh->dv, grp = sh->hq / sh->hkv, C = FAVOR__CHUNK;
    favor__chunk_carve(cb, ws + 2 * w * (dv + 1), C, w);
    cb->comp = ws + w * (dv + 1);
    cb->tile = ws + 2 * w * (dv + 1) + favor__chunk_floats(C, w);
    qg->q = q;
    qg->o = out;
    qg->k = k;
    qg->v = v;
    qg->h0 = g * grp;
    qg->count = grp;
    qg->g = g;
    qg->r0 = qg->kr0 = 0;
    favor__qgroup_carve(qg, ws + io);
}

/* non-causal output rows [i0, i1) of query head h from a finished state, C rows
 * at a time from i0 (a multiple of C: a row's result does not depend on which
 * call computes it) */
static void favor__lin_output_rows(const favor__map *mp, const float *S, const float *z,
                                   float c, const favor__qgroup *qg, size_t h, size_t i0, size_t i1,
                                   size_t dv, favor__chunk *cb)
{
    size_t i, ldq, ldo, C = FAVOR__CHUNK;
    for (i = i0; i < i1; i += C) {
        size_t nr = i1 - i < C ? i1 - i : C;
        const float *Q;
        float *O;
        if (i + nr < i1) favor__prefetch_rows(qg->q, h, i + nr, i1 - i - nr < C ? i1 - i - nr : C, 0);
        Q = favor__in(qg->q, h, i, nr, qg->qb, &ldq);
        O = favor__out(qg->o, h, i, qg->ob, &ldo);
        favor__lin_output(mp, S, z, c, Q, ldq, O, ldo, nr, dv, cb);
        favor__out_done(qg->o, h, i, nr, O, ldo);
    }
}

/* keys every causal row sees (n_k > n), and rows that see no key (n_k < n) */
static void favor__causal_edges(const favor__shape *sh, size_t *pre, size_t *skip)
{
    *pre = sh->nk >= sh->n ? sh->nk - sh->n : 0;
    *skip = sh->nk < sh->n ? sh->n - sh->nk : 0;
}

/* one key/value head g and its group of query heads, on the thread's slice ws */
static void favor__linear_kvhead(const favor__map *mp, const favor_tensor *q,
                                 const favor_tensor *k, const favor_tensor *v,
                                 const favor_tensor *out, const favor__shape *sh, int causal,
                                 size_t g, float *ws, size_t io)
{
    size_t w = mp->width, dv = sh->dv, grp = sh->hq / sh->hkv, pre, skip, t;
    float *S = ws, *z = ws + w * dv, c = -INFINITY;
    favor__chunk cb;
    favor__qgroup qg;
    favor__lin_carve(mp, q, k, v, out, sh, g, ws, io, &cb, &qg);
    memset(S, 0, 2 * w * (dv + 1) * sizeof(float)); /* S, z, their errors */
    favor__causal_edges(sh, &pre, &skip);
    if (!causal) {
        favor__lin_absorb_rows(mp, S, z, &c, &qg, 0, sh->nk, dv, &cb);
        for (t = 0; t < grp; ++t)
            favor__lin_output_rows(mp, S, z, c, &qg, g * grp + t, 0, sh->n, dv, &cb);
        return;
    }
    favor__lin_absorb_rows(mp, S, z, &c, &qg, 0, pre, dv, &cb);
    for (t = 0; t < grp; ++t) favor__zero_rows(out, g * grp + t, 0, skip);
    qg.r0 = skip;
    qg.kr0 = pre;
    favor__lin_causal_run(mp, S, z, &c, sh->n - skip, dv, &qg, &cb);
}

/* Splitting one key/value head. When a call has fewer than FAVOR__SPLIT
 * key/value heads, each head's keys are cut into `parts` segments of `seg` rows
 * (a multiple of C, at least FAVOR__SEGMIN; ceil(FAVOR__ITEMS / heads) at most,
 * so about FAVOR__ITEMS in all, twice FAVOR__SPLIT so that the items of a step
 * come out even on a few threads), from the shape alone, never the thread
 * count, so results do not depend on it. A pass then runs in three steps, each
 * a loop of independent items:
 *   1. every segment's sums (S, z with their errors, at their own scale c) from
 *      a zero state, into its slot of a shared array (hkv x parts slots);
 *   2. per head, slot p += slot p - 1 in order: slot p holds the state of keys
 *      [0, end of segment p), compensated (the errors merge with the sums);
 *   3. non-causal: blocks of FAVOR__ROWBLK output rows of every query head from
 *      the last slot; causal (the chunk-parallel scan): segment p's rows of every
 *      query head, run as the one-head pass runs them, from a private copy of
 *      slot p - 1 (the state of every earlier key).
 * With one segment the results are those of the one-head pass bit for bit (step
 * 1 absorbs the keys as it does; step 3 computes each row as it does). The
 * workspace grows by the slots: independent of n. */
#define FAVOR__SPLIT 8
#define FAVOR__ITEMS 16
#define FAVOR__SEGMIN 512
#define FAVOR__ROWBLK 256

typedef struct {
    size_t parts, seg;  /* segments of a key/value head, and their rows */
    size_t cap;         /* the most segments any n gives: the slots reserved */
    size_t slot;        /* floats of a slot: S, z, errors, c, the segment's summed
                           log-gates (rounded to 64 bytes) */
} favor__split;

/* 1 when a call with hkv key/value heads is split (fills sp) */
static int favor__split_plan(size_t hkv, size_t nk, size_t w, size_t dv, favor__split *sp)
{
    size_t want = (FAVOR__ITEMS + hkv - 1) / hkv, seg, a = FAVOR__ALIGN / sizeof(float);
    sp->parts = sp->cap = 1;
    sp->seg = nk;
    sp->slot = 0;
    if (hkv >= FAVOR__SPLIT) return 0;
    sp->cap = want;
    seg = nk / want + (nk % want != 0);
    seg = (seg + FAVOR__CHUNK - 1) / FAVOR__CHUNK * FAVOR__CHUNK;
    if (seg < FAVOR__SEGMIN) seg = FAVOR__SEGMIN;
    sp->seg = seg;
    sp->parts = nk ? nk / seg + (nk % seg != 0) : 1;
    sp->slot = (2 * w * (dv + 1) + 2 + a - 1) / a * a; /* w, dv: already checked small */
    return 1;
}

/* floats of a linear forward on nt threads: the slices (slice floats each; the
 * row buffers at io of a slice), then, when split, the slots at *at */
static size_t favor__linear_fwd_floats(const favor_features *f, const favor_tensor *q,
                                       const favor_tensor *k, const favor_tensor *v, size_t nt,
                                       int extend, size_t *slice, size_t *io, favor__split *sp,
                                       int *split, size_t *at)
{
    size_t all, s;
    *split = favor__split_plan(favor__nheads(k), k->rows,
                               favor__width(f->kernel, f->dim, f->count), v->cols, sp) &&
             (!extend || sp->parts > 1);
    all = favor__slices(favor__linear_call_floats(f, q, k, v, !extend || *split, io), nt, slice);
    *at = all;
    if (!all || !*split) return all;
    if (!favor__mul_ok(favor__nheads(k) * sp->cap, sp->slot, &s) || !favor__add_ok(all, s, &all) ||
        all > SIZE_MAX / sizeof(float))
        return 0;
    return all;
}

/* dst (S, z, errors: 2 n floats, at scale *cd) += src (at scale cs), compensated:
 * src's sums less their errors, brought to the common scale, are added to dst's
 * with dst's errors. tmp: n floats. */
static void favor__state_merge(float *dst, float *cd, const float *src, float cs, size_t n,
                               float *tmp)
{
    float m;
    if (cs == -INFINITY) return; /* src is empty */
    m = *cd > cs ? *cd : cs;
    if (*cd != m) {
        favor__scal(dst, favor__s_exp(*cd - m), 2 * n);
        *cd = m;
    }
    memcpy(tmp, src, n * sizeof(float));
    favor__axpy(tmp, -1.0f, src + n, n);
    if (cs != m) favor__scal(tmp, favor__s_exp(cs - m), n);
    favor__kahan_add(dst, dst + n, tmp, n);
}

/* segment p's keys [*j0, *j1); causal: *ks, where its causal keys begin (the
 * keys before every row sees; NULL: not wanted) */
static void favor__seg_keys(const favor__split *sp, const favor__shape *sh, size_t p,
                            size_t *j0, size_t *j1, size_t *ks)
{
    size_t pre, skip;
    *j0 = p * sp->seg;
    *j1 = sh->nk - *j0 < sp->seg ? sh->nk : *j0 + sp->seg;
    if (!ks) return;
    favor__causal_edges(sh, &pre, &skip);
    *ks = *j0 > pre ? *j0 : pre < *j1 ? pre : *j1;
}

/* step 1: the sums of segment p of head g into its slot */
static void favor__split_sums(const favor__map *mp, const favor__split *sp,
                              const favor__shape *sh, float *slot, size_t p, int comp,
                              favor__qgroup *qg, favor__chunk *cb)
{
    size_t w = mp->width, dv = sh->dv, j0, j1;
    float c = -INFINITY;
    favor__seg_keys(sp, sh, p, &j0, &j1, NULL);
    memset(slot, 0, 2 * w * (dv + 1) * sizeof(float));
    cb->comp = comp ? slot + w * (dv + 1) : NULL; /* else the errors stay 0 */
    favor__lin_absorb_rows(mp, slot, slot + w * dv, &c, qg, j0, j1, dv, cb);
    slot[2 * w * (dv + 1)] = c;
    slot[2 * w * (dv + 1) + 1] = 0.0f;
    if (favor__gated(mp)) { /* the decay of the whole segment, for step 2 */
        double lg[FAVOR__CHUNK], sum = 0.0;
        size_t j, i, nr;
        for (j = j0; j < j1; j += nr) {
            nr = j1 - j < FAVOR__CHUNK ? j1 - j : FAVOR__CHUNK;
            favor__log_gates(mp, qg->g, j, nr, lg);
            for (i = 0; i < nr; ++i) sum += lg[i];
        }
        slot[2 * w * (dv + 1) + 1] = (float)sum;
    }
}

/* step 2: the slots of one head become prefix states; causal: all but the last,
 * whose sums step 1 skips (no segment reads the state after the last one) */
static void favor__split_scan(const favor__split *sp, size_t n, float *slots, float *tmp,
                              int causal)
{
    size_t p;
    for (p = 1; p + (causal ? 1 : 0) < sp->parts; ++p) {
        float *dst = slots + p * sp->slot;
        const float *src = dst - sp->slot;
        /* gated: the keys before segment p decay over its keys */
        favor__state_merge(dst, dst + 2 * n, src, src[2 * n] + dst[2 * n + 1], n, tmp);
    }
}

/* step 3, causal: segment p of head g on the state S, z (errors E, scale *c) of
 * the keys before it */
static void favor__split_causal(const favor__map *mp, const favor__split *sp,
                                const favor__shape *sh, size_t p, float *S, float *z,
                                float *E, float *c, favor__qgroup *qg, favor__chunk *cb)
{
    size_t dv = sh->dv, pre, skip, t, j0, j1, ks;
    favor__causal_edges(sh, &pre, &skip);
    favor__seg_keys(sp, sh, p, &j0, &j1, &ks);
    if (!p)
        for (t = 0; t < qg->count; ++t) favor__zero_rows(qg->o, qg->h0 + t, 0, skip);
    cb->comp = E;
    favor__lin_absorb_rows(mp, S, z, c, qg, j0, ks, dv, cb);
    if (ks == j1) return;
    qg->kr0 = ks;
    qg->r0 = skip + (ks - pre);
    favor__lin_causal_run(mp, S, z, c, j1 - ks, dv, qg, cb);
}

/* a slot's state (S, z, errors, c) copied into ws (c into *c); src NULL: zero */
static void favor__slot_load(const float *src, size_t n, float *ws, float *c)
{
    if (src) {
        memcpy(ws, src, 2 * n * sizeof(float));
        *c = src[2 * n];
    } else {
        memset(ws, 0, 2 * n * sizeof(float));
        *c = -INFINITY;
    }
}

/* A split linear pass's arguments (slots: the shared array of segment states) */
typedef struct {
    const favor__map *mp;
    const favor_tensor *q, *k, *v, *out;
    const favor__shape *sh;
    const favor__split *sp;
    float *slots;
    size_t io;
    int causal;
} favor__lpass;

/* step 1's item it (key/value head it / parts, segment it % parts): its segment's
 * sums into its slot; causal: the last segment's are not needed */
static void favor__split_sum_item(const favor__lpass *a, float *mine, size_t it)
{
    const favor__split *sp = a->sp;
    size_t g = it / sp->parts, p = it % sp->parts;
    favor__chunk cb;
    favor__qgroup qg;
    if (a->causal && p + 1 == sp->parts) return;
    favor__lin_carve(a->mp, a->q, a->k, a->v, a->out, a->sh, g, mine, a->io, &cb, &qg);
    favor__split_sums(a->mp, sp, a->sh, a->slots + g * (sp->parts * sp->slot) + p * sp->slot, p,
                      1, &qg, &cb);
}

/* step 1 for every head (mine: this thread's slice), in a team (FAVOR__TEAM_FOR) */
static void favor__split_step1(const favor__lpass *a, float *mine, int team)
{
    long it;
    FAVOR__TEAM_FOR(team, it, (long)(a->sh->hkv * a->sp->parts),
                    favor__split_sum_item(a, mine, (size_t)it));
}

/* step 3's item it of a linear pass: causal, segment it % parts of key/value
 * head it / parts from the state of the keys before it; otherwise the rows of
 * a block of FAVOR__ROWBLK of a query head from the state of all keys */
static void favor__linear_split_item(const favor__lpass *a, float *mine, size_t it)
{
    const favor__split *sp = a->sp;
    const favor__shape *sh = a->sh;
    size_t w = a->mp->width, dv = sh->dv, per = sp->parts * sp->slot;
    favor__chunk cb;
    favor__qgroup qg;
    if (a->causal) {
        size_t g = it / sp->parts, p = it % sp->parts, n = w * (dv + 1);
        float c;
        favor__lin_carve(a->mp, a->q, a->k, a->v, a->out, sh, g, mine, a->io, &cb, &qg);
        favor__slot_load(p ? a->slots + g * per + (p - 1) * sp->slot : NULL, n, mine, &c);
        favor__split_causal(a->mp, sp, sh, p, mine, mine + w * dv, mine + n, &c, &qg, &cb);
    } else {
        size_t blocks = (sh->n + FAVOR__ROWBLK - 1) / FAVOR__ROWBLK, grp = sh->hq / sh->hkv;
        size_t h = it / blocks, i0 = (it % blocks) * FAVOR__ROWBLK;
        size_t i1 = sh->n - i0 < FAVOR__ROWBLK ? sh->n : i0 + FAVOR__ROWBLK;
        const float *last = a->slots + (h / grp) * per + (sp->parts - 1) * sp->slot;
        favor__lin_carve(a->mp, a->q, a->k, a->v, a->out, sh, h / grp, mine, a->io, &cb, &qg);
        favor__lin_output_rows(a->mp, last, last + w * dv, last[2 * w * (dv + 1)], &qg, h, i0,
                               i1, dv, &cb);
    }
}

/* The three steps of a split linear pass, on one thread of a team */
static void favor__linear_split_run(const favor__lpass *a, float *mine, int team)
{
    const favor__split *sp = a->sp;
    const favor__shape *sh = a->sh;
    size_t w = a->mp->width, dv = sh->dv, per = sp->parts * sp->slot;
    size_t blocks = (sh->n + FAVOR__ROWBLK - 1) / FAVOR__ROWBLK;
    long it;
    favor__split_step1(a, mine, team);
    FAVOR__TEAM_FOR(team, it, (long)sh->hkv,
                    favor__split_scan(sp, w * (dv + 1), a->slots + (size_t)it * per, mine,
                                      a->causal));
    FAVOR__TEAM_FOR(team, it, (long)(a->causal ? sh->hkv * sp->parts : sh->hq * blocks),
                    favor__linear_split_item(a, mine, (size_t)it));
}

/* The three steps of a split linear pass over every key/value head (slots: the
 * shared array, ws + t slice: thread t's buffers); on one thread no region */
static void favor__linear_split(const favor__map *mp, const favor_tensor *q,
                                const favor_tensor *k, const favor_tensor *v,
                                const favor_tensor *out, const favor__shape *sh, int causal,
                                const favor__split *sp, float *slots, float *ws, size_t slice,
                                size_t io, size_t nt)
{
    const favor__lpass a = { mp, q, k, v, out, sh, sp, slots, io, causal };
    FAVOR__TEAM(favor__linear_split_run(&a, ws + tid_ * slice, team_));
}

/* The largest linear forward plan of the sequences of a call; 0 when one is
 * too big */
static size_t favor__linear_floats_all(const favor_features *f, const favor_tensor *q,
                                       const favor_tensor *k, const favor_tensor *v,
                                       const favor_options *opts, size_t nt)
{
    size_t s, most = 0, fl, slice = 0, io = 0, at = 0;
    favor__split sp;
    favor__seqv sv;
    int split = 0;
    for (s = 0; s < favor__nseq(opts); ++s) {
        favor__seqv_make(&sv, q, k, v, q, opts, s);
        if (!sv.q.rows || !sv.k.rows) continue;
        if (!(fl = favor__linear_fwd_floats(f, &sv.q, &sv.k, &sv.v, nt, 0, &slice, &io, &sp,
                                            &split, &at)))
            return 0;
        if (fl > most) most = fl;
    }
    return most ? most : 1;
}

FAVOR__DEF size_t favor_linear_attention_workspace(const favor_features *f,
                                                  const favor_tensor *q, const favor_tensor *k,
                                                  const favor_tensor *v,
                                                  const favor_options *opts)
{
    if (!favor__query_ok(f, 1, q, k, v, opts)) return 0;
    return favor__ws_bytes(favor__linear_floats_all(f, q, k, v, opts, favor__nthreads(opts)));
}

FAVOR__DEF favor_status favor_linear_attention(const favor_features *f, const favor_tensor *q,
                                              const favor_tensor *k, const favor_tensor *v,
                                              const favor_tensor *out,
                                              const favor_options *opts)
{
    favor__shape sh;
    favor__map mp;
    favor_status st;
    float *ws;
    void *owned;
    int causal;
    long g;
    size_t floats, nt, slice = 0, io = 0, at = 0, seq;
    favor__split sp;
    int split = 0;
    if ((st = favor__check_linear(f, q, k, v, out, opts,
                                  opts && (opts->flags & FAVOR_CAUSAL), &sh)) != FAVOR_OK)
        return st;
    nt = favor__nthreads(opts);
    if (!(floats = favor__linear_floats_all(f, q, k, v, opts, nt))) return favor__too_big(opts);
    if ((st = favor__ws_get(opts, floats, &sh, &ws, &owned)) != FAVOR_OK) return st;
    favor__map_make(&mp, f, favor__linear_scale(f, opts));
    favor__map_opts(&mp, opts, k->heads);
    causal = opts && (opts->flags & FAVOR_CAUSAL);
    for (seq = 0; seq < favor__nseq(opts); ++seq) { /* each from an empty state */
        favor__seqv sv;
        favor__shape ss = sh;
        favor_tensor gv;
        favor__seqv_make(&sv, q, k, v, out, opts, seq);
        if (mp.gates) { /* the sequence's rows of the gates */
            gv = favor__rows(opts->gates, sv.k0, sv.k.rows);
            mp.gates = &gv;
        }
        if (!sv.k.rows) { /* rows that see no key are zero */
            for (g = 0; g < (long)sh.hq; ++g) favor__zero_rows(&sv.o, (size_t)g, 0, sv.o.rows);
            continue;
        }
        if (!sv.q.rows) continue;
        ss.n = sv.q.rows;
        ss.nk = sv.k.rows;
        favor__linear_fwd_floats(f, &sv.q, &sv.k, &sv.v, nt, 0, &slice, &io, &sp, &split, &at);
        if (split) {
            favor__linear_split(&mp, &sv.q, &sv.k, &sv.v, &sv.o, &ss, causal, &sp, ws + at, ws,
                                slice, io, nt);
        } else {
            FAVOR__PAR_FOR(g, (long)sh.hkv,
                           favor__linear_kvhead(&mp, &sv.q, &sv.k, &sv.v, &sv.o, &ss, causal,
                                                (size_t)g, ws + tid_ * slice, io));
        }
    }
    favor__ws_put(owned);
    return FAVOR_OK;
}

/* 4.11 The recurrent state ------------------------------------------------------
 * Pending tokens. Adding each token of favor_linear_step to the compensated sums
 * would read and write S and its error array, twice the state, every token. The
 * step instead keeps each head's last tokens in a pending block of C =
 * FAVOR__PEND rows (a key's features stabilized at its running maximum m_j, its
 * value, m_j) and only reads S: a token's output is the causal-chunk formula of
 * 4.10 with the pending block as the chunk so far, for the chunk's last row,
 *     o = (e phi(q) S + sum_j a_j v_j) / (e phi(q).z + sum_j a_j),
 *     a_j = phi(q).phi(k_j) exp(m_j - m),   e = exp(c - m),
 * m the running maximum with the new key. A full block is folded into S and z
 * as one rank-C compensated update (favor__chunk_absorb, as extend absorbs its
 * chunks); favor_linear_extend folds what is pending before its first chunk.
 * The count of pending tokens is stored after the heads' log-scales, so the
 * storage alone is the whole state. Gated, a pending token also keeps its
 * log-gate l_j (0 ungated): the block is then a gated chunk (4.10) whose D_j
 * come from the m_j and the sums of the l_j, and the state decays only when
 * the block is folded: a step reads it through e = exp(c - D). Its keys are
 * split as a chunk's (FAVOR__SEP), at the state's c rather than at D_0: key j
 * is held times exp(D_j - c) while D_j - c <= FAVOR__SEP (the first gated
 * token of a block gives the keys before it their share), so when every key
 * is, a token's output is
 *     o = (phi(q) S + sum_j a'_j v_j) / (phi(q).z + sum_j a'_j),
 *     a'_j = phi(q).phi(k_j) exp(D_j - c),
 * the common factor exp(c - D) cancelled (FAVOR_NO_NORM multiplies it back):
 * one exponential per token, the new key's share, as an ungated step has one.
 * Past FAVOR__SEP the pair factors are exact, as in a chunk. A block whose keys
 * are all held so, and whose D_last - c <= FAVOR__SEP / 2, is folded lazily:
 * S += sum_j phi(k_j) exp(D_j - c) v_j^T (z alike) without scaling S, and c
 * takes the block's decay, c += G (its sum of l_j; exp(c - D) of the next
 * block's tokens then carries it), so S is scaled only when c has fallen
 * FAVOR__SEP / 2 below the block (the fold of a chunk: c = m). c stays the
 * log-scale of S and z, as every reader of it takes it, up to FAVOR__SEP / 2
 * below the running maximum a chunk's fold would leave (the next keys' m_j
 * start from it, still >= their own log-scales). */
#define FAVOR__PEND 16

/* floats of the step's scratch: every head's key and first query row (2 heads d)
 * and their raw features and log-scales (2 heads (w + 1)), the features of a
 * further query (w + 1), a and the exp factors of the pending keys, the fold's
 * product tile; 0 on overflow */
static size_t favor__step_floats(size_t w, size_t d, size_t dv, size_t heads)
{
    size_t t, n;
    if (w > SIZE_MAX / 8 || d > SIZE_MAX / 8 || !favor__mul_ok(dv, FAVOR__FOLD, &t) ||
        t > SIZE_MAX / 4 || !favor__mul_ok(w + d + 1, 2 * heads, &n) || heads > SIZE_MAX / 4 ||
        !favor__add_ok(n, w + 1 + 2 * FAVOR__PEND + (w > t ? w : t) + 1, &n))
        return 0;
    return n;
}

static size_t favor__npend(const favor_state *st) { return (size_t)st->c[st->heads]; }

/* 1 when the float that holds the count of pending tokens is one: a whole number in
 * [0, FAVOR__PEND). A state whose storage was overwritten, or whose struct was
 * changed after favor_state_init (another head count puts c[heads] on a head's
 * log-scale), fails this rather than index past the pending block (fuzz finding 14) */
static int favor__npend_ok(const favor_state *st)
{
    float p = st->c[st->heads];
    return p >= 0.0f && p < (float)FAVOR__PEND && p == (float)(size_t)p;
}

/* chunk buffers over head g's pending block (kf: the features, mk: their
 * maxima), with the scratch buffers (a, g, qf, rq, rk, tile) of `scr` */
static void favor__pend_chunk(const favor_state *st, size_t g, const favor__chunk *scr,
                              favor__chunk *cb, float **pv, float **pl)
{
    size_t w = st->width, dv = st->dv;
    float *p = st->pend + g * FAVOR__PEND * (w + dv + 2);
    *cb = *scr;
    cb->cap = FAVOR__PEND;
    cb->kf = p;
    *pv = p + FAVOR__PEND * w;
    cb->mk = *pv + FAVOR__PEND * dv;
    *pl = cb->mk + FAVOR__PEND;
    cb->comp = st->comp + g * w * (dv + 1);
    cb->lg = NULL;
    cb->dd = NULL;
    cb->nsep = 0; /* ungated, the block keeps its keys at their own m_j */
    cb->ref = (double)st->c[g];
}

/* a gated pending block's l_j (as doubles) and D_j for its first n tokens;
 * 0 when every l_j is 0 (the block is ungated: the ungated formulas hold) */
static int favor__pend_gates(const float *pl, const float *mk, size_t n, double *lg, double *dd)
{
    size_t j;
    int any = 0;
    double G = 0.0;
    for (j = 0; j < n; ++j) {
        lg[j] = (double)pl[j];
        G += lg[j];
        dd[j] = (double)mk[j] - G;
        any |= pl[j] != 0.0f;
    }
    return any;
}

/* fold head g's np pending tokens into its compensated sums */
static void favor__pend_fold(const favor__map *mp, favor_state *st, size_t g, size_t np,
                             const favor__chunk *scr)
{
    favor__chunk cb;
    float *pv, *pl, m;
    size_t w = st->width, dv = st->dv;
    double lg[FAVOR__PEND], dd[FAVOR__PEND];
    favor__pend_chunk(st, g, scr, &cb, &pv, &pl);
    m = cb.mk[np - 1];
    if (favor__pend_gates(pl, cb.mk, np, lg, dd)) { /* kf as a gated block holds it */
        cb.lg = lg;
        cb.dd = dd;
        cb.nsep = favor__nsep(dd, np, cb.ref);
        if (cb.nsep == np && dd[np - 1] - cb.ref <= FAVOR__SEP / 2) {
            float c = st->c[g]; /* lazily: S, z stay at c, which takes the block's decay */
            favor__state_add(mp, st->s + g * w * dv, st->z + g * w, &c, c, cb.kf, pv, dv, np,
                             dv, cb.comp, cb.tile, 1.0f);
            st->c[g] = (float)(cb.ref + ((double)m - dd[np - 1]));
            return;
        }
    }
    favor__chunk_absorb(mp, st->s + g * w * dv, st->z + g * w, st->c + g, m,
                        cb.lg || (favor__stabilized(mp->kernel) && cb.mk[0] != m), pv, dv, np,
                        dv, &cb);
}

/* one token of key/value head g and its query heads, with np tokens pending; F,
 * R: the raw features and log-scales of the head's key and first query; X: d
 * floats for a further query row */
static void favor__step_head(const favor__map *mp, favor_state *st, const favor_tensor *q,
                             const favor_tensor *v, const favor_tensor *out, size_t g,
                             size_t np, const favor__chunk *scr, float *F, const float *R,
                             float *X)
{
    size_t w = st->width, dv = st->dv, grp = favor__nheads(q) / st->heads, t;
    const float *S = st->s + g * w * dv, *z = st->z + g * w;
    float c = st->c[g], *pv, *pl, m, e, f = 1.0f, u = 1.0f, lt = 0.0f;
    double lg[FAVOR__PEND], dd[FAVOR__PEND];
    favor__chunk cb;
    int rising;
    favor__pend_chunk(st, g, scr, &cb, &pv, &pl);
    memcpy(cb.kf + np * w, F, w * sizeof(float));
    if (favor__gated(mp)) { /* the token's l, stored as a float */
        favor__log_gates(mp, g, 0, 1, lg);
        lt = (float)lg[0];
    }
    m = np ? cb.mk[np - 1] : c;
    if (lt != 0.0f) { /* the decaying maximum */
        double tm = (double)m + lt;
        m = (double)R[0] > tm ? R[0] : (float)tm;
    } else {
        m = favor__s_max(R[0], m);
    }
    cb.mk[np] = m;
    pl[np] = lt;
    favor__phi_finish(mp, cb.kf + np * w, w, 1, R, cb.mk + np);
    favor__widen_rows(v, g, 0, 1, pv + np * dv, dv);
    if (favor__pend_gates(pl, cb.mk, np + 1, lg, dd)) { /* gated (4.11) */
        size_t j, ns = favor__nsep(dd, np + 1, cb.ref);
        int first = 1;
        for (j = 0; j < np; ++j) first &= pl[j] == 0.0f;
        if (first) /* the block's first l != 0: the keys before it, at their m_j, get theirs */
            favor__key_shares(cb.kf, w, dd, cb.ref, ns < np ? ns : np);
        if (ns == np + 1) { /* every key in kf times exp(D_j - c): o's factor exp(c - D) is f */
            u = favor__s_exp((float)(dd[np] - cb.ref)); /* the new key's, applied to a_np */
            e = 1.0f;
            if (mp->nonorm) f = favor__s_exp((float)(cb.ref - dd[np]));
            rising = 0;
        } else { /* e = exp(c - D); exp(c - D) for the first ns keys, exp(D_j - D) after */
            cb.lg = lg;
            cb.dd = dd;
            cb.nsep = ns;
            favor__chunk_factors(&cb, np, np);
            e = favor__s_exp((float)((double)c - dd[np]));
            rising = 1;
        }
    } else {
        e = favor__s_exp(c - m);
        rising = favor__stabilized(mp->kernel) && cb.mk[0] != m;
        if (rising) favor__exp_add(cb.g, cb.mk, -m, np); /* exp(m_j - m) */
    }
    for (t = 0; t < grp; ++t) {
        size_t h = g * grp + t, ldo;
        float *o = favor__out(out, h, 0, scr->tile, &ldo), *qf = t ? cb.qf : F + w;
        const float *rq = t ? cb.rq : R + 1;
        if (t) {
            favor__widen_rows(q, h, 0, 1, X, mp->d);
            favor__phi_raw(mp, X, mp->d, 1, qf, w, cb.rq);
        }
        favor__phi_finish(mp, qf, w, 1, rq, rq);
        favor__dots(qf, w, cb.kf, w, np + 1, cb.a, NULL, NULL);
        if (rising) favor__vmul(cb.a, cb.g, np);
        favor__gemm(1, dv, w, qf, w, 1, S, dv, o, dv, 0);
        if (e != 1.0f) favor__scal(o, e, dv);
        cb.a[np] *= u;
        favor__gemm(1, dv, np + 1, cb.a, np + 1, 1, pv, dv, o, dv, 1);
        if (!mp->nonorm)
            favor__divide(mp, o, e * favor__dot(qf, z, w) + favor__sum(cb.a, np + 1), dv);
        else if (f != 1.0f)
            favor__scal(o, f, dv);
        if (mp->nonorm && favor__stabilized(mp->kernel)) /* the scales taken out (4.10) */
            favor__scal(o, favor__s_exp(rq[0] + m), dv);
        favor__out_done(out, h, 0, 1, o, ldo);
    }
    if (u != 1.0f) favor__scal(cb.kf + np * w, u, w); /* the new key's share, for later */
}
FAVOR__DEF size_t favor_state_floats(const favor_features *f, size_t heads, size_t dv)
{
    size_t w, n, t;
    if (favor__check_features(f, NULL) != FAVOR_OK || !heads || !dv) return 0;
    w = favor__width(f->kernel, f->dim, f->count);
    if (!favor__mul_ok(w, dv + 1, &n) || !favor__mul_ok(n, 2, &n) || !favor__add_ok(n, 1, &n) ||
        !favor__add_ok(w, dv + 2, &t) || !favor__mul_ok(t, FAVOR__PEND, &t) ||
        !favor__add_ok(n, t, &n) || !favor__mul_ok(n, heads, &n) ||
        !(t = favor__step_floats(w, f->dim, dv, heads)) || !favor__add_ok(n, t + 1, &n) ||
        n > SIZE_MAX / sizeof(float))
        return 0;
    return n;
}

FAVOR__DEF void favor_state_reset(favor_state *st)
{
    size_t h;
    if (!st || !st->s) return;
    memset(st->s, 0, st->heads * st->width * st->dv * sizeof(float));
    memset(st->z, 0, st->heads * st->width * sizeof(float));
    memset(st->comp, 0, st->heads * st->width * (st->dv + 1) * sizeof(float));
    memset(st->pend, 0, st->heads * FAVOR__PEND * (st->width + st->dv + 2) * sizeof(float));
    /* the step's scratch too: every float of the storage defined (see above) */
    memset(st->scratch, 0, favor__step_floats(st->width, st->dim, st->dv, st->heads) * sizeof(float));
    for (h = 0; h < st->heads; ++h) st->c[h] = -INFINITY;
    st->c[st->heads] = 0.0f; /* nothing pending */
    st->tokens = 0;
}

FAVOR__DEF favor_status favor_state_init(favor_state *st, const favor_features *f, size_t heads,
                                        size_t dv, float *storage)
{
    favor_status s;
    size_t w;
    if (!st || !f) return FAVOR_E_NULL;
    if ((s = favor__check_features(f, NULL)) != FAVOR_OK) return s;
    if (!heads || !dv) return FAVOR_E_SHAPE;
    if (!favor_state_floats(f, heads, dv)) return FAVOR_E_OVERFLOW;
    if (!storage) return FAVOR_E_NULL;
    w = favor__width(f->kernel, f->dim, f->count);
    st->heads = heads;
    st->width = w;
    st->dv = dv;
    st->dim = f->dim;
    st->kernel = f->kernel;
    st->s = storage;
    st->z = st->s + heads * w * dv;
    st->c = st->z + heads * w;
    st->scratch = st->c + heads + 1;
    st->comp = st->scratch + favor__step_floats(w, f->dim, dv, heads);
    st->pend = st->comp + heads * w * (dv + 1);
    favor_state_reset(st);
    return FAVOR_OK;
}

static favor_status favor__check_extend(const favor_features *f, const favor_state *st,
                                        const favor_tensor *q, const favor_tensor *k,
                                        const favor_tensor *v, const favor_tensor *out,
                                        const favor_options *opts, favor__shape *sh)
{
    favor_status s;
    favor__range rs;
    size_t floats;
    favor__why w = favor__why_of(opts);
    if (!st) return favor__no(&w, FAVOR_E_NULL, "st is NULL");
    if ((s = favor__check_linear(f, q, k, v, out, opts, 1, sh)) != FAVOR_OK) return s;
    if (opts && opts->seqs)
        return favor__no(&w, FAVOR_E_ARG, "opts.seqs: a state holds one sequence (call "
                                          "favor_linear_attention for packed ones)");
    if (!st->s || !st->z || !st->c || !st->scratch || !st->comp || !st->pend)
        return favor__no(&w, FAVOR_E_NULL, "st is not bound to storage (favor_state_init)");
    if (st->kernel != f->kernel || st->dim != f->dim ||
        st->width != favor__width(f->kernel, f->dim, f->count))
        return favor__no(&w, FAVOR_E_SHAPE, "st was made for other features than f");
    if (!favor__npend_ok(st)) /* it indexes the pending block: never trusted unchecked */
        return favor__no(&w, FAVOR_E_ARG, "st: its count of pending tokens is not a whole "
                                          "number below 16 (its storage was overwritten, or "
                                          "the struct changed after favor_state_init)");
    if ((s = favor__same(&w, "k", "rows", sh->nk, "q", sh->n)) != FAVOR_OK ||
        (s = favor__same(&w, "k", "batch x heads", sh->hkv, "st", st->heads)) != FAVOR_OK ||
        (s = favor__same(&w, "v", "cols", sh->dv, "st", st->dv)) != FAVOR_OK)
        return s;
    floats = favor_state_floats(f, st->heads, st->dv);
    if (!floats) return favor__no(&w, FAVOR_E_OVERFLOW, "st: its size overflows size_t");
    rs = favor__range_of(st->s, floats * sizeof(float));
    if (favor__overlaps_any(sh, rs, 1))
        return favor__no(&w, FAVOR_E_ALIAS, "st's storage overlaps a tensor of the call");
    sh->other[sh->nother++] = rs;
    return FAVOR_OK;
}

/* the causal recurrence of key/value head g of st (and its query heads), on a
 * thread's workspace `mine`: the chunk buffers, then the row buffers at io */
static void favor__extend_head(const favor__map *mp, favor_state *st, const favor_tensor *q,
                               const favor_tensor *k, const favor_tensor *v,
                               const favor_tensor *out, size_t g, float *mine, size_t io_at)
{
    size_t grp = favor__nheads(q) / st->heads, w = st->width;
    float *io = mine + io_at;
    favor__chunk chunk, *cb = &chunk;
    favor__qgroup qg;
    favor__chunk_carve(cb, mine, FAVOR__CHUNK, w);
    cb->tile = mine + favor__chunk_floats(FAVOR__CHUNK, w);
    qg.q = q;
    qg.o = out;
    qg.k = k;
    qg.v = v;
    qg.h0 = g * grp;
    qg.count = grp;
    qg.r0 = 0;
    qg.g = g;
    qg.kr0 = 0;
    favor__qgroup_carve(&qg, io);
    if (favor__npend(st)) favor__pend_fold(mp, st, g, favor__npend(st), cb);
    cb->comp = st->comp + g * w * (st->dv + 1);
    favor__lin_causal_run(mp, st->s + g * w * st->dv, st->z + g * w, st->c + g, q->rows,
                          st->dv, &qg, cb);
}

/* extend's step 2 for key/value head g: st's pending tokens folded, st's state
 * copied into the free slot (the last segment's) and the scan with st first */
static void favor__extend_scan(const favor__lpass *a, favor_state *st, float *mine, size_t g)
{
    const favor__split *sp = a->sp;
    size_t w = a->mp->width, dv = a->sh->dv, n = w * (dv + 1), p;
    float *mys = a->slots + g * (sp->parts * sp->slot), *spare = mys + (sp->parts - 1) * sp->slot;
    favor__chunk cb;
    favor__qgroup qg;
    favor__lin_carve(a->mp, a->q, a->k, a->v, a->out, a->sh, g, mine, a->io, &cb, &qg);
    if (favor__npend(st)) favor__pend_fold(a->mp, st, g, favor__npend(st), &cb);
    memcpy(spare, st->s + g * w * dv, w * dv * sizeof(float));
    memcpy(spare + w * dv, st->z + g * w, w * sizeof(float));
    memcpy(spare + n, st->comp + g * n, n * sizeof(float));
    spare[2 * n] = st->c[g];
    for (p = 0; p + 1 < sp->parts; ++p) {
        const float *src = p ? mys + (p - 1) * sp->slot : spare;
        float *dst = mys + p * sp->slot;
        favor__state_merge(dst, dst + 2 * n, src, src[2 * n] + dst[2 * n + 1], n, mine);
    }
}

/* extend's step 3, item it: segment it % parts of key/value head it / parts,
 * the last one in st itself */
static void favor__extend_item(const favor__lpass *a, favor_state *st, float *mine, size_t it)
{
    const favor__split *sp = a->sp;
    size_t w = a->mp->width, dv = a->sh->dv, n = w * (dv + 1);
    size_t g = it / sp->parts, p = it % sp->parts, per = sp->parts * sp->slot;
    const float *from = a->slots + g * per + (p ? p - 1 : sp->parts - 1) * sp->slot;
    float c;
    favor__chunk cb;
    favor__qgroup qg;
    favor__lin_carve(a->mp, a->q, a->k, a->v, a->out, a->sh, g, mine, a->io, &cb, &qg);
    if (p + 1 < sp->parts) {
        favor__slot_load(from, n, mine, &c);
        favor__split_causal(a->mp, sp, a->sh, p, mine, mine + w * dv, mine + n, &c, &qg, &cb);
    } else { /* the last segment: in st */
        float *S = st->s + g * w * dv, *z = st->z + g * w, *E = st->comp + g * n;
        memcpy(S, from, w * dv * sizeof(float));
        memcpy(z, from + w * dv, w * sizeof(float));
        memcpy(E, from + n, n * sizeof(float));
        st->c[g] = from[2 * n];
        favor__split_causal(a->mp, sp, a->sh, p, S, z, E, st->c + g, &qg, &cb);
    }
}

/* the three steps of a split extend, on one thread of a team */
static void favor__extend_run(const favor__lpass *a, favor_state *st, float *mine, int team)
{
    long it;
    favor__split_step1(a, mine, team);
    FAVOR__TEAM_FOR(team, it, (long)a->sh->hkv, favor__extend_scan(a, st, mine, (size_t)it));
    FAVOR__TEAM_FOR(team, it, (long)(a->sh->hkv * a->sp->parts),
                    favor__extend_item(a, st, mine, (size_t)it));
}

/* favor_linear_extend split as a causal linear pass is (see "Splitting one
 * key/value head"), st's state entering the first segment: step 1 as there (the
 * last segment's slot is free); step 2 folds st's pending tokens, copies st's
 * state into the free slot and scans with st first (slot 0 += st); step 3 runs
 * the first segment on a copy of st, the middle ones on copies of their slots
 * and the last one in st itself, from the state of every key before it. On one
 * thread no region. */
static void favor__extend_split(const favor__map *mp, favor_state *st, const favor_tensor *q,
                                const favor_tensor *k, const favor_tensor *v,
                                const favor_tensor *out, const favor__shape *sh,
                                const favor__split *sp, float *slots, float *ws, size_t slice,
                                size_t io, size_t nt)
{
    const favor__lpass a = { mp, q, k, v, out, sh, sp, slots, io, 1 };
    FAVOR__TEAM(favor__extend_run(&a, st, ws + tid_ * slice, team_));
}

FAVOR__DEF size_t favor_linear_extend_workspace(const favor_features *f, const favor_state *st,
                                               const favor_tensor *q, const favor_tensor *k,
                                               const favor_tensor *v,
                                               const favor_options *opts)
{
    size_t slice, io, at;
    favor__split sp;
    int split;
    favor__why w = favor__why_of(opts);
    if (!st) {
        (void)favor__no(&w, FAVOR_E_NULL, "st is NULL");
        return 0;
    }
    if (!favor__query_ok(f, 1, q, k, v, opts) ||
        favor__same(&w, "v", "cols", v->cols, "st", st->dv) != FAVOR_OK)
        return 0;
    return favor__ws_bytes(favor__linear_fwd_floats(f, q, k, v, favor__nthreads(opts), 1, &slice,
                                                    &io, &sp, &split, &at));
}

FAVOR__DEF favor_status favor_linear_extend(const favor_features *f, favor_state *st,
                                           const favor_tensor *q, const favor_tensor *k,
                                           const favor_tensor *v, const favor_tensor *out,
                                           const favor_options *opts)
{
    favor__shape sh;
    favor__map mp;
    favor_status s;
    float *ws;
    void *owned;
    long g;
    size_t floats, nt, slice, io, at;
    favor__split sp;
    int split;
    if ((s = favor__check_extend(f, st, q, k, v, out, opts, &sh)) != FAVOR_OK) return s;
    nt = favor__nthreads(opts);
    if (!(floats = favor__linear_fwd_floats(f, q, k, v, nt, 1, &slice, &io, &sp, &split, &at)))
        return favor__too_big(opts);
    if ((s = favor__ws_get(opts, floats, &sh, &ws, &owned)) != FAVOR_OK) return s;
    favor__map_make(&mp, f, favor__linear_scale(f, opts));
    favor__map_opts(&mp, opts, k->heads);
    if (split) {
        favor__extend_split(&mp, st, q, k, v, out, &sh, &sp, ws + at, ws, slice, io, nt);
    } else {
        FAVOR__PAR_FOR(g, (long)st->heads,
                       favor__extend_head(&mp, st, q, k, v, out, (size_t)g,
                                          ws + tid_ * slice, io));
    }
    st->c[st->heads] = 0.0f; /* every head folded what was pending */
    st->tokens += sh.n;
    favor__ws_put(owned);
    return FAVOR_OK;
}

FAVOR__DEF favor_status favor_linear_step(const favor_features *f, favor_state *st,
                                         const favor_tensor *q, const favor_tensor *k,
                                         const favor_tensor *v, const favor_tensor *out)
{
    return favor_linear_step_ex(f, st, q, k, v, out, NULL);
}

FAVOR__DEF favor_status favor_linear_step_ex(const favor_features *f, favor_state *st,
                                            const favor_tensor *q, const favor_tensor *k,
                                            const favor_tensor *v, const favor_tensor *out,
                                            const favor_options *opts)
{
    favor__shape sh;
    favor__chunk scr;
    favor__map mp;
    favor_status s;
    size_t g, np, w, d, H, grp;
    float *F, *R, *X;
    if ((s = favor__check_extend(f, st, q, k, v, out, opts, &sh)) != FAVOR_OK) return s;
    if (sh.n != 1) {
        favor__why wy = favor__why_of(opts);
        return favor__no(&wy, FAVOR_E_SHAPE, "q: %z rows; a step takes one", sh.n);
    }
    np = favor__npend(st);
    w = st->width;
    d = st->dim;
    H = st->heads;
    grp = favor__nheads(q) / H;
    memset(&scr, 0, sizeof scr);
    F = st->scratch; /* 2 H rows: head g's key, then its first query */
    R = F + 2 * H * w;
    scr.qf = R + 2 * H;
    scr.rq = scr.qf + w;
    scr.a = scr.rq + 1;
    scr.g = scr.a + FAVOR__PEND;
    scr.tile = scr.g + FAVOR__PEND;
    X = scr.tile + (w > FAVOR__FOLD * st->dv ? w : FAVOR__FOLD * st->dv);
    favor__map_make(&mp, f, favor__linear_scale(f, opts));
    favor__map_opts(&mp, opts, k->heads);
    for (g = 0; g < H; ++g) { /* one projection of every key and first query: W read once */
        favor__widen_rows(k, g, 0, 1, X + 2 * g * d, d);
        favor__widen_rows(q, g * grp, 0, 1, X + (2 * g + 1) * d, d);
    }
    favor__phi_raw(&mp, X, d, 2 * H, F, w, R);
    for (g = 0; g < H; ++g)
        favor__step_head(&mp, st, q, v, out, g, np, &scr, F + 2 * g * w, R + 2 * g, X);
    if (++np == FAVOR__PEND) { /* the block is full: into the compensated sums */
        for (g = 0; g < st->heads; ++g) favor__pend_fold(&mp, st, g, np, &scr);
        np = 0;
    }
    st->c[st->heads] = (float)np;
    st->tokens += 1;
    return FAVOR_OK;
}

/* Staging, for the backward passes: a key/value head's rows of every tensor of
 * a call as fp32 views. An fp32 tensor is viewed in place (heads h0 .. h0 +
 * count - 1); a 16-bit one gets a packed fp32 copy at *p (advanced past it),
 * widened for an input, narrowed back by favor__unstage for an output, since a
 * gradient row is summed over every query block and head before it is final.
 * The backward kernels then run on fp32 views of one key/value head. */
static size_t favor__stage_floats(const favor_tensor *t, size_t count)
{
    return favor__io_floats(t, t->rows) * count; /* <= the tensor's span: fits */
}

static favor_tensor favor__stage(const favor_tensor *t, size_t h0, size_t count, int input,
                                 float **p)
{
    favor_tensor v = *t;
    size_t h;
    v.heads = count; /* of one batch element: a group never spans two */
    v.batch = v.batch_stride = 0;
    v.dtype = FAVOR_F32;
    if (t->dtype == FAVOR_F32) {
        v.data = favor__at(t, h0, 0);
        return v;
    }
    v.data = *p;
    v.row_stride = t->cols;
    v.head_stride = t->rows * t->cols;
    for (h = 0; input && h < count; ++h)
        favor__widen_rows(t, h0 + h, 0, t->rows, *p + h * v.head_stride, t->cols);
    *p += count * v.head_stride;
    return v;
}

static void favor__unstage(const favor_tensor *t, size_t h0, const favor_tensor *v)
{
    size_t h;
    for (h = 0; t->dtype != FAVOR_F32 && h < v->heads; ++h)
        favor__out_done(t, h0 + h, 0, t->rows, (const float *)v->data + h * v->head_stride,
                        v->row_stride);
}

/* per-thread staging floats of a backward call (out may be NULL); with
 * any16: as if every tensor were 16-bit (the workspace queries, which see only
 * q, k and v, when one of them is) */
static size_t favor__bwd_stage_floats(const favor_tensor *q, const favor_tensor *k,
                                      const favor_tensor *v, const favor_tensor *out,
                                      const favor_tensor *dout, const favor_tensor *dq,
                                      const favor_tensor *dk, const favor_tensor *dv,
                                      int any16)
{
    const favor_tensor *t[8];
    size_t grp = q->heads / k->heads, all = 0, qn, vn, kv, i;
    if (any16) { /* q, dq: grp n d; out, dout: grp n dv; k, dk: n_k d; v, dv: n_k dv */
        if (!favor__mul_ok(grp, q->rows, &qn) || !favor__mul_ok(qn, v->cols, &vn) ||
            !favor__mul_ok(qn, q->cols, &qn) || !favor__mul_ok(k->rows, k->cols + v->cols, &kv) ||
            !favor__add_ok(qn, vn, &all) || !favor__add_ok(all, kv, &all) ||
            !favor__mul_ok(all, 2, &all))
            return SIZE_MAX;
        return all;
    }
    t[0] = q; t[1] = dout; t[2] = dq; t[3] = out; t[4] = k; t[5] = v; t[6] = dk; t[7] = dv;
    for (i = 0; i < 8; ++i)
        if (t[i] && !favor__add_ok(all, favor__stage_floats(t[i], i < 4 ? grp : 1), &all))
            return SIZE_MAX;
    return all;
}

/* 4.12 Backward passes ----------------------------------------------------------
 * Softmax: per block of BQ query rows, the scores are recomputed key-major as in
 * the forward, St = K_tile Qt, and P^T = exp(St - lse) per lane. With the lane
 * constants D_i = dout_i . out_i:
 *     dV_tile += P^T dO,   dP^T = V_tile dO^T,   dS^T = P^T (dP^T - D) s,
 *     dQ_block += dS K_tile (dS^T read in place),   dK_tile += dS^T Q_block.
 * The lse is the forward's (opts->lse) or comes from a first pass over the keys
 * with the forward's running statistics. A work item is a key/value head (its
 * dK, dV rows are shared by its query heads), so threads never write the same
 * row. A query block's dQ is summed over key parts (favor__softmax_bwd_kp, fixed
 * by n_k): a partial per part, the partials added in part order. When whole heads
 * would leave threads idle (fewer heads than threads, or a share of them:
 * favor__softmax_bwd_split), the work is split inside a head without atomics and
 * without computing anything twice: query block by query block in the one-head
 * pass's order, the key parts run in parallel, each adding to its own dK, dV rows
 * and writing its dQ partial; then the block's dQ rows are summed from the
 * partials (the lse, when not given, first comes from a pass over query blocks
 * into the workspace). Every sum is the one-head pass's, term for term and in
 * order, so the results are bit-identical whichever way the call is split. */
/* what a softmax backward needs for softcap (1: T) or a mask (2: T and the
 * mask's scratch) */
static int favor__bwd_more(const favor__mods *md) { return md->mask ? 2 : md->cap > 0.0f; }

static size_t favor__softmax_bwd_floats(size_t d, size_t dv, int more)
{
    size_t a, b;
    if (!favor__add_ok(d, dv, &a) || !favor__add_ok(a, d, &a) || !favor__mul_ok(a, FAVOR__BQ, &a))
        return 0;
    /* St, dP; with softcap or a mask T, with a mask its scratch */
    b = (more ? 3 : 2) * FAVOR__BK * FAVOR__BQ + (more > 1 ? FAVOR__MASK_FLOATS : 0) +
        6 * FAVOR__BQ;
    return favor__add_ok(a, b, &a) && a <= SIZE_MAX / sizeof(float) ? a : 0;
}

/* The lse of the rows of bk (Qt: favor__softmax_qt) over the keys they see,
 * with the forward's running statistics and sink. */
static void favor__softmax_bwd_lse(const float *Qt, const float *K, size_t ldk, size_t d,
                                   favor__blk *bk, const favor__mods *md, float sink,
                                   float *St, float *m, float *alpha, float *mc, float *tmp,
                                   float *L, float *mb)
{
    double l[FAVOR__BQ];
    size_t j0, r;
    float f;
    for (r = 0; r < FAVOR__BQ; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0;
    }
    for (j0 = bk->beg; j0 < bk->end; j0 += FAVOR__BK) {
        size_t nb = bk->end - j0 < FAVOR__BK ? bk->end - j0 : FAVOR__BK;
        if (!favor__tile_live(bk, j0, nb)) continue;
        favor__softmax_scores(K + j0 * ldk, ldk, Qt, St, NULL, nb, d, j0, bk, md, mb, NULL);
        favor__softmax_stats(St, nb, m, l, alpha, mc, tmp);
    }
    for (r = 0; r < bk->nq; ++r) L[r] = favor__row_end(m[r], l[r], sink, &f);
}

/* Key parts of a softmax backward: a query block's dQ is summed part by part (a
 * partial over the part's key tiles, the partials added in part order), so that
 * the parts of a block can run on different threads and give the bits of one.
 * Parts of 8 tiles, or at most FAVOR__SBP parts: fixed by n_k alone. */
#define FAVOR__SBP 32

static size_t favor__softmax_bwd_kp(size_t nk)
{
    size_t kp = nk / FAVOR__SBP + (nk % FAVOR__SBP != 0);
    kp = (kp + FAVOR__BK - 1) / FAVOR__BK * FAVOR__BK;
    return kp > 8 * FAVOR__BK ? kp : 8 * FAVOR__BK;
}

/* Where favor__softmax_bwd_rows leaves L (BQ floats) in its workspace ws */
static float *favor__softmax_bwd_L(float *ws, size_t d, size_t dv)
{
    return ws + (d + dv) * FAVOR__BQ + 2 * FAVOR__BK * FAVOR__BQ + 4 * FAVOR__BQ;
}

/* The parts [*p0, *p1) of a query block's keys (bk), kp keys each; one when
 * the block sees no key (its rows still give their D and the sink's share) */
static void favor__softmax_bwd_parts(const favor__blk *bk, size_t kp, size_t *p0, size_t *p1)
{
    *p0 = bk->beg / kp;
    *p1 = bk->end > bk->beg ? (bk->end + kp - 1) / kp : *p0 + 1; /* at least one */
}

/* Query rows [i0, i0 + BQ) of one query head (flat head h), into ws
 * (favor__softmax_bwd_floats): Qt, Gt (lanes without a row zero), D_r = dout_r .
 * out_r, and L, each lane's lse (read from lse, ldl apart, or computed over the
 * keys the rows see); +inf in a lane without a row or without a key, so that
 * its P is 0. Returns the block's share of the sink's gradient, -sum_r
 * exp(sink - L_r) D_r (0 without a sink). */
static double favor__softmax_bwd_rows(const float *Q, size_t ldq, const float *K, size_t ldk,
                                      const float *O, size_t ldo, const float *G, size_t ldg,
                                      const float *lse, size_t ldl, size_t n, size_t nk,
                                      size_t d, size_t dv, float s, const favor__mods *md,
                                      size_t h, size_t i0, float *ws)
{
    const size_t BQ = FAVOR__BQ, BK = FAVOR__BK;
    float *Qt = ws, *Gt = Qt + d * BQ, *St = Gt + dv * BQ;
    float *m = St + 2 * BK * BQ, *mc = m + BQ, *alpha = mc + BQ, *tmp = alpha + BQ;
    float *L = favor__softmax_bwd_L(ws, d, dv), *D = L + BQ, sink = favor__sink(md, h);
    size_t r, c, nq = n - i0 < BQ ? n - i0 : BQ;
    double ds = 0.0;
    favor__softmax_qt(Q + i0 * ldq, ldq, nq, d, s, Qt);
    if (lse) {
        for (r = 0; r < nq; ++r) L[r] = lse[(i0 + r) * ldl];
    } else {
        favor__blk bk;
        favor__blk_make(&bk, md, n, nk, i0, h);
        favor__softmax_bwd_lse(Qt, K, ldk, d, &bk, md, sink, St, m, alpha, mc, tmp, L,
                               L + 2 * BQ + BK * BQ);
    }
    for (r = 0; r < BQ; ++r)
        if (r >= nq || L[r] == -INFINITY) L[r] = INFINITY;
    favor__transpose(nq, dv, G + i0 * ldg, ldg, Gt, BQ);
    for (c = 0; c < dv; ++c)
        for (r = nq; r < BQ; ++r) Gt[c * BQ + r] = 0.0f;
    for (r = 0; r < BQ; ++r)
        D[r] = r < nq ? favor__dot(G + (i0 + r) * ldg, O + (i0 + r) * ldo, dv) : 0.0f;
    if (sink > -INFINITY)
        for (r = 0; r < nq; ++r) ds -= exp((double)sink - (double)L[r]) * (double)D[r];
    return ds;
}

/* The rows of favor__softmax_bwd_rows (in ws; flat head h) against the key tiles
 * from kb0 (a multiple of kp) to kb1 of their key/value head, within the keys
 * the rows see: adds to dK and dV rows [kb0, kb1), and writes the rows' dQ over
 * these keys to DQP (ldp apart) */
static void favor__softmax_bwd_keys(const float *Q, size_t ldq, const float *K, size_t ldk,
                                    const float *V, size_t ldv, const float *G, size_t ldg,
                                    float *DQP, size_t ldp, float *DK, size_t lddk, float *DV,
                                    size_t lddv, size_t n, size_t nk, size_t d, size_t dv, float s,
                                    const favor__mods *md, size_t h, size_t i0, size_t kb0,
                                    size_t kb1, float *ws)
{
    const size_t BQ = FAVOR__BQ, BK = FAVOR__BK;
    float *Gt = ws + d * BQ, *St = Gt + dv * BQ, *dPt = St + BK * BQ;
    float *L = favor__softmax_bwd_L(ws, d, dv), *D = L + BQ, *T = D + BQ, *mb = T + BK * BQ;
    float *Tt = md->cap > 0.0f ? T : NULL;
    size_t j0, r, kend;
    favor__blk bk;
    favor__blk_make(&bk, md, n, nk, i0, h);
    for (r = 0; r < bk.nq; ++r) memset(DQP + r * ldp, 0, d * sizeof(float));
    kend = bk.end < kb1 ? bk.end : kb1;
    bk.stop = kend; /* the mask's stage reads no key past the part */
    for (j0 = kb0 > bk.beg ? kb0 : bk.beg; j0 < kend; j0 += BK) {
        size_t j, nb = kend - j0 < BK ? kend - j0 : BK, nq = bk.nq;
        if (!favor__tile_live(&bk, j0, nb)) continue;
        favor__softmax_scores(K + j0 * ldk, ldk, ws, St, Tt, nb, d, j0, &bk, md, mb, NULL);
        for (j = 0; j < nb; ++j) favor__exp_sub(St + j * BQ, L, BQ); /* P^T */
        favor__gemm(nb, BQ, dv, V + j0 * ldv, ldv, 1, Gt, BQ, dPt, BQ, 0);
        for (j = 0; j < nb; ++j) favor__dsoftmax(dPt + j * BQ, St + j * BQ, D, s, BQ);
        if (Tt) favor__dtanh(dPt, Tt, nb * BQ);
        if (md->right >= 0) { /* query row r and key j0 + j meet only when r sees the key */
            size_t right = favor__right(md, n, nk);
            ptrdiff_t rows = favor__causal_base(i0 + 1 + nk + right, n + j0);
            ptrdiff_t keys = favor__causal_base(j0 + n, nk + i0 + right);
            favor__gemm_stair(nb, dv, nq, 1, keys, St, BQ, 1, G + i0 * ldg, ldg, DV + j0 * lddv,
                              lddv);
            favor__gemm_stair(nq, d, nb, 0, rows, dPt, 1, BQ, K + j0 * ldk, ldk, DQP, ldp);
            favor__gemm_stair(nb, d, nq, 1, keys, dPt, BQ, 1, Q + i0 * ldq, ldq, DK + j0 * lddk,
                              lddk);
        } else {
            favor__gemm(nb, dv, nq, St, BQ, 1, G + i0 * ldg, ldg, DV + j0 * lddv, lddv, 1);
            favor__gemm(nq, d, nb, dPt, 1, BQ, K + j0 * ldk, ldk, DQP, ldp, 1);
            favor__gemm(nb, d, nq, dPt, BQ, 1, Q + i0 * ldq, ldq, DK + j0 * lddk, lddk, 1);
        }
    }
}

/* 1 when q, k or v is 16-bit: the backward workspace queries then count staging
 * for every tensor of the call */
static int favor__any16(const favor_tensor *q, const favor_tensor *k, const favor_tensor *v)
{
    return q->dtype != FAVOR_F32 || k->dtype != FAVOR_F32 || v->dtype != FAVOR_F32;
}

/* per-thread floats of a softmax backward: its tiles, then the staging */
static size_t favor__softmax_bwd_call_floats(const favor_tensor *q, const favor_tensor *k,
                                             const favor_tensor *v, const favor_tensor *out,
                                             const favor_tensor *dout, const favor_tensor *dq,
                                             const favor_tensor *dk, const favor_tensor *dv,
                                             int any16, int more)
{
    size_t a = favor__softmax_bwd_floats(q->cols, v->cols, more);
    size_t b = favor__bwd_stage_floats(q, k, v, out, dout, dq, dk, dv, any16);
    return a && favor__add_ok(a, b, &a) && a <= SIZE_MAX / sizeof(float) ? a : 0;
}

/* The fp32 views of key/value head hk's tensors and its query heads' (favor__stage
 * from p; widen: copy the 16-bit inputs in) */
typedef struct {
    favor_tensor Q, O, G, DQ, K, V, GK, GV;
} favor__sbv;

static void favor__sbv_make(favor__sbv *x, const favor_tensor *q, const favor_tensor *k,
                            const favor_tensor *v, const favor_tensor *out,
                            const favor_tensor *dout, const favor_tensor *dq,
                            const favor_tensor *dk, const favor_tensor *dv, size_t grp,
                            size_t hk, int widen, float *p)
{
    x->Q = favor__stage(q, hk * grp, grp, widen, &p);
    x->O = favor__stage(out, hk * grp, grp, widen, &p);
    x->G = favor__stage(dout, hk * grp, grp, widen, &p);
    x->DQ = favor__stage(dq, hk * grp, grp, 0, &p);
    x->K = favor__stage(k, hk, 1, widen, &p);
    x->V = favor__stage(v, hk, 1, widen, &p);
    x->GK = favor__stage(dk, hk, 1, 0, &p);
    x->GV = favor__stage(dv, hk, 1, 0, &p);
}

/* what a softmax backward block needs besides the views */
typedef struct {
    const favor__shape *sh;
    const float *lse; /* head h's rows at lse + h ldl, or NULL: each block
                         recomputes its rows' */
    size_t ldl;
    int in_dq;        /* without lse: the split keeps it in column 0 of dq's rows */
    float s;
    favor__mods md;
    double *dsink;    /* with opts->dsinks: one sum per flat query head, or NULL */
} favor__sbp;

/* favor__softmax_bwd_rows for block i0 of query head t of the group x (flat query
 * head h); with sink: its share of dL/dsink added to the head's sum */
static void favor__sbv_rows(const favor__sbv *x, const favor__sbp *bp, size_t t, size_t h,
                            size_t i0, int sink, float *ws)
{
    const favor__shape *sh = bp->sh;
    const float *DQ = (const float *)x->DQ.data + t * x->DQ.head_stride;
    double ds = favor__softmax_bwd_rows(
        (const float *)x->Q.data + t * x->Q.head_stride, x->Q.row_stride,
        (const float *)x->K.data, x->K.row_stride,
        (const float *)x->O.data + t * x->O.head_stride, x->O.row_stride,
        (const float *)x->G.data + t * x->G.head_stride, x->G.row_stride,
        bp->lse ? bp->lse + h * bp->ldl : bp->in_dq ? DQ : NULL, bp->lse ? 1 : x->DQ.row_stride,
        sh->n, sh->nk, sh->d, sh->dv, bp->s, &bp->md, h, i0, ws);
    if (sink && bp->dsink) bp->dsink[h] += ds;
}

/* favor__softmax_bwd_keys for block i0 of query head t of the group x (flat query
 * head h), the key part from kb0, its dQ into P (d apart) */
static void favor__sbv_keys(const favor__sbv *x, const favor__sbp *bp, size_t t, size_t h,
                            size_t i0, size_t kb0, float *P, float *ws)
{
    const favor__shape *sh = bp->sh;
    favor__softmax_bwd_keys(
        (const float *)x->Q.data + t * x->Q.head_stride, x->Q.row_stride,
        (const float *)x->K.data, x->K.row_stride, (const float *)x->V.data, x->V.row_stride,
        (const float *)x->G.data + t * x->G.head_stride, x->G.row_stride, P, sh->d,
        (float *)x->GK.data, x->GK.row_stride, (float *)x->GV.data, x->GV.row_stride, sh->n,
        sh->nk, sh->d, sh->dv, bp->s, &bp->md, h, i0, kb0, kb0 + favor__softmax_bwd_kp(sh->nk),
        ws);
}

/* row r of block i0 of query head t's dQ in the group x */
static float *favor__sbv_dq(const favor__sbv *x, size_t t, size_t i0, size_t r)
{
    return (float *)x->DQ.data + t * x->DQ.head_stride + (i0 + r) * x->DQ.row_stride;
}

/* zero key rows [j0, j1) of dK and dV */
static void favor__sbv_zero_keys(const favor__sbv *x, const favor__shape *sh, size_t j0,
                                 size_t j1)
{
    for (; j0 < j1; ++j0) {
        memset((float *)x->GK.data + j0 * x->GK.row_stride, 0, sh->d * sizeof(float));
        memset((float *)x->GV.data + j0 * x->GV.row_stride, 0, sh->dv * sizeof(float));
    }
}

/* key/value head hk of a softmax backward, on fp32 views of its rows: each query
 * block against each key part in turn, its dQ partial (in the tail of ws) added as
 * it comes */
static void favor__softmax_bwd_head(const favor_tensor *q, const favor_tensor *k,
                                    const favor_tensor *v, const favor_tensor *out,
                                    const favor_tensor *dout, const favor_tensor *dq,
                                    const favor_tensor *dk, const favor_tensor *dv,
                                    const favor__sbp *bp, size_t hk, float *ws)
{
    const favor__shape *sh = bp->sh;
    size_t grp = sh->hq / sh->hkv, kp = favor__softmax_bwd_kp(sh->nk), t, i0, r;
    size_t tiles = favor__softmax_bwd_floats(sh->d, sh->dv, favor__bwd_more(&bp->md));
    float *P = ws + tiles - sh->d * FAVOR__BQ;
    favor__sbv x;
    favor__sbv_make(&x, q, k, v, out, dout, dq, dk, dv, grp, hk, 1, ws + tiles);
    favor__sbv_zero_keys(&x, sh, 0, sh->nk);
    for (t = 0; t < grp; ++t)
        for (i0 = 0; i0 < sh->n; i0 += FAVOR__BQ) {
            size_t nq = sh->n - i0 < FAVOR__BQ ? sh->n - i0 : FAVOR__BQ, p, p0, p1;
            favor__blk bk;
            favor__blk_make(&bk, &bp->md, sh->n, sh->nk, i0, hk * grp + t);
            favor__softmax_bwd_parts(&bk, kp, &p0, &p1);
            favor__sbv_rows(&x, bp, t, hk * grp + t, i0, 1, ws);
            for (r = 0; r < nq; ++r) memset(favor__sbv_dq(&x, t, i0, r), 0, sh->d * sizeof(float));
            for (p = p0; p < p1; ++p) {
                favor__sbv_keys(&x, bp, t, hk * grp + t, i0, p * kp, P, ws);
                for (r = 0; r < nq; ++r) favor__vadd(favor__sbv_dq(&x, t, i0, r), P + r * sh->d, sh->d);
            }
        }
    favor__unstage(dq, hk * grp, &x.DQ);
    favor__unstage(dk, hk, &x.GK);
    favor__unstage(dv, hk, &x.GV);
}

/* 1 when a softmax backward on nt threads splits its heads: when whole heads
 * would keep the threads busy less than 80% of the time */
static int favor__softmax_bwd_split(size_t hkv, size_t nt)
{
    return nt > 1 && 5 * hkv < 4 * nt * ((hkv + nt - 1) / nt);
}

/* Floats of a softmax backward's workspace on nt threads: nt slices of *slice
 * floats (the tiles; with the staging of a head when not split); split: the
 * staging of every head (*stg each) at *stage_at, then FAVOR__SBP dQ partials of
 * a query block per key/value head at *part_at. The queries see q, k and v only:
 * any16 counts staging for every tensor. */
static size_t favor__softmax_bwd_plan(const favor_tensor *q, const favor_tensor *k,
                                      const favor_tensor *v, const favor_tensor *out,
                                      const favor_tensor *dout, const favor_tensor *dq,
                                      const favor_tensor *dk, const favor_tensor *dv,
                                      int any16, int more, size_t nt, int *split, size_t *slice,
                                      size_t *stg, size_t *stage_at, size_t *part_at)
{
    size_t hkv = favor__nheads(k), all, t, p;
    *split = favor__softmax_bwd_split(hkv, nt);
    if (!*split) {
        all = favor__softmax_bwd_call_floats(q, k, v, out, dout, dq, dk, dv, any16, more);
        return all ? favor__slices(all, nt, slice) : 0;
    }
    *stg = favor__bwd_stage_floats(q, k, v, out, dout, dq, dk, dv, any16);
    if (!(all = favor__slices(favor__softmax_bwd_floats(q->cols, v->cols, more), nt, slice)) ||
        *stg == SIZE_MAX || !favor__mul_ok(*stg, hkv, &t) ||
        !favor__mul_ok(q->cols, FAVOR__SBP * FAVOR__BQ, &p) || !favor__mul_ok(p, hkv, &p))
        return 0;
    *stage_at = all;
    if (!favor__add_ok(all, t, &all)) return 0;
    *part_at = all;
    if (!favor__add_ok(all, p, &all)) return 0;
    return all <= SIZE_MAX / sizeof(float) ? all : 0;
}

/* Floats of a backward's per-head sums of dL/dsink (doubles, at an even float)
 * when opts asks for dsinks; 0 otherwise. hq: the flat query heads. */
static size_t favor__dsink_floats(const favor_options *opts, size_t hq)
{
    return opts && opts->sinks && opts->dsinks && hq <= SIZE_MAX / 4 ? 2 * hq + 1 : 0;
}

FAVOR__DEF size_t favor_softmax_attention_backward_workspace(const favor_tensor *q,
                                                            const favor_tensor *k,
                                                            const favor_tensor *v,
                                                            const favor_options *opts)
{
    size_t slice, stg, stage_at, part_at, all;
    int split;
    favor__mods md;
    if (!favor__query_ok(NULL, 0, q, k, v, opts)) return 0;
    favor__mods_of(&md, opts, q->heads);
    all = favor__softmax_bwd_plan(q, k, v, q, q, q, k, v, favor__any16(q, k, v),
                                  favor__bwd_more(&md),
                                  favor__nthreads(opts), &split, &slice, &stg, &stage_at,
                                  &part_at);
    if (!all || !favor__add_ok(all, favor__map_floats(&md, q->rows, k->rows), &all) ||
        !favor__add_ok(all, favor__dsink_floats(opts, favor__nheads(q)), &all))
        return 0;
    return favor__ws_bytes(all);
}

/* The split softmax backward (see 4.12): widen every head's 16-bit inputs; the
 * lse when not given; zero dK, dV; then query block by query block (the one-head
 * pass's order), the key parts of every key/value head in parallel, each adding
 * to its dK, dV rows and writing its dQ partial into part (FAVOR__SBP per head),
 * then the block's dQ rows as the sum of the partials in part order; round the
 * gradients into 16-bit outputs. */
static void favor__softmax_bwd_split_run(const favor_tensor *q, const favor_tensor *k,
                                         const favor_tensor *v, const favor_tensor *out,
                                         const favor_tensor *dout, const favor_tensor *dq,
                                         const favor_tensor *dk, const favor_tensor *dv,
                                         favor__sbp *bp, float *ws, size_t slice, float *stage,
                                         size_t stg, float *part, size_t nt)
{
    const favor__shape *sh = bp->sh;
    size_t grp = sh->hq / sh->hkv, blocks = (sh->n + FAVOR__BQ - 1) / FAVOR__BQ;
    size_t kp = favor__softmax_bwd_kp(sh->nk), parts = (sh->nk + kp - 1) / kp;
    size_t pf = FAVOR__BQ * sh->d; /* floats of a partial */
    int any16 = q->dtype != FAVOR_F32 || k->dtype != FAVOR_F32 || v->dtype != FAVOR_F32 ||
                out->dtype != FAVOR_F32 || dout->dtype != FAVOR_F32 ||
                dq->dtype != FAVOR_F32 || dk->dtype != FAVOR_F32 || dv->dtype != FAVOR_F32;
    long it;
    bp->in_dq = !bp->lse; /* the first loops fill it, the passes read it */
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel num_threads((int)nt)
#endif
    {
        float *mine = ws + FAVOR__TID() * slice;
        favor__sbv x;
        size_t step;
        if (any16) {
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (it = 0; it < (long)sh->hkv; ++it)
                favor__sbv_make(&x, q, k, v, out, dout, dq, dk, dv, grp, (size_t)it, 1,
                                stage + (size_t)it * stg);
        }
        if (bp->in_dq) { /* the lse of every row, into column 0 of its dq row */
            favor__sbp own = *bp;
            const float *L = favor__softmax_bwd_L(mine, sh->d, sh->dv);
            own.in_dq = 0; /* computed, not read */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (it = 0; it < (long)(sh->hq * blocks); ++it) {
                size_t h = (size_t)it / blocks, i0 = ((size_t)it % blocks) * FAVOR__BQ;
                size_t nq = sh->n - i0 < FAVOR__BQ ? sh->n - i0 : FAVOR__BQ, r;
                favor__sbv_make(&x, q, k, v, out, dout, dq, dk, dv, grp, h / grp, 0,
                                stage + (h / grp) * stg);
                favor__sbv_rows(&x, &own, h % grp, h, i0, 0, mine);
                for (r = 0; r < nq; ++r) favor__sbv_dq(&x, h % grp, i0, r)[0] = L[r];
            }
        }
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (it = 0; it < (long)(sh->hkv * parts); ++it) {
            size_t g = (size_t)it / parts, j0 = ((size_t)it % parts) * kp;
            favor__sbv_make(&x, q, k, v, out, dout, dq, dk, dv, grp, g, 0, stage + g * stg);
            favor__sbv_zero_keys(&x, sh, j0, sh->nk - j0 < kp ? sh->nk : j0 + kp);
        }
        for (step = 0; step < grp * blocks; ++step) { /* every thread, in step */
            size_t t = step / blocks, i0 = (step % blocks) * FAVOR__BQ;
            size_t nq = sh->n - i0 < FAVOR__BQ ? sh->n - i0 : FAVOR__BQ, p0, p1, np;
            favor__blk bk; /* the parts of head t's block (the same for every g: the
                              window and causality do not depend on the head) */
            favor__blk_make(&bk, &bp->md, sh->n, sh->nk, i0, t);
            favor__softmax_bwd_parts(&bk, kp, &p0, &p1);
            np = p1 - p0;
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (it = 0; it < (long)(sh->hkv * np); ++it) {
                size_t g = (size_t)it / np, p = p0 + (size_t)it % np;
                favor__sbv_make(&x, q, k, v, out, dout, dq, dk, dv, grp, g, 0, stage + g * stg);
                favor__sbv_rows(&x, bp, t, g * grp + t, i0, p == p0, mine);
                favor__sbv_keys(&x, bp, t, g * grp + t, i0, p * kp,
                                part + (g * FAVOR__SBP + p) * pf, mine);
            }
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (it = 0; it < (long)(sh->hkv * nq); ++it) {
                size_t g = (size_t)it / nq, r = (size_t)it % nq, p;
                float *row;
                favor__sbv_make(&x, q, k, v, out, dout, dq, dk, dv, grp, g, 0, stage + g * stg);
                row = favor__sbv_dq(&x, t, i0, r);
                memset(row, 0, sh->d * sizeof(float));
                for (p = p0; p < p1; ++p)
                    favor__vadd(row, part + (g * FAVOR__SBP + p) * pf + r * sh->d, sh->d);
            }
        }
        if (any16) {
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (it = 0; it < (long)sh->hkv; ++it) {
                size_t g = (size_t)it;
                favor__sbv_make(&x, q, k, v, out, dout, dq, dk, dv, grp, g, 0, stage + g * stg);
                favor__unstage(dq, g * grp, &x.DQ);
                favor__unstage(dk, g, &x.GK);
                favor__unstage(dv, g, &x.GV);
            }
        }
    }
}

FAVOR__DEF favor_status favor_softmax_attention_backward(
    const favor_tensor *q, const favor_tensor *k, const favor_tensor *v,
    const favor_tensor *out, const favor_tensor *dout, const favor_tensor *dq,
    const favor_tensor *dk, const favor_tensor *dv, const favor_options *opts)
{
    favor__shape sh;
    favor__sbp bp;
    favor_status st;
    float *ws;
    void *owned;
    long g;
    int split;
    size_t floats, nt, slice, stg = 0, stage_at = 0, part_at = 0, map_at = 0, seq;
    favor__why w = favor__why_of(opts);
    if ((st = favor__check_backward(q, k, v, out, dout, dq, dk, dv, 1, &sh, &w)) != FAVOR_OK)
        return st;
    if ((st = favor__check_options(opts)) != FAVOR_OK) return st;
    if ((st = favor__check_mods(opts, q, k, 1, &sh)) != FAVOR_OK) return st;
    if ((st = favor__check_lse(opts, &sh)) != FAVOR_OK) return st;
    nt = favor__nthreads(opts);
    favor__mods_of(&bp.md, opts, q->heads);
    if (!(floats = favor__softmax_bwd_plan(q, k, v, out, dout, dq, dk, dv, 0,
                                           favor__bwd_more(&bp.md), nt, &split, &slice,
                                           &stg, &stage_at, &part_at)) ||
        (map_at = floats, 0) ||
        !favor__add_ok(floats, favor__map_floats(&bp.md, sh.n, sh.nk), &floats) ||
        !favor__add_ok(floats, favor__dsink_floats(opts, sh.hq), &floats))
        return favor__too_big(opts);
    if ((st = favor__ws_get(opts, floats, &sh, &ws, &owned)) != FAVOR_OK) return st;
    bp.in_dq = 0;
    bp.ldl = sh.n;
    bp.s = (opts && opts->scale > 0.0f) ? opts->scale : (float)(1.0 / sqrt((double)sh.d));
    bp.dsink = NULL;
    if (favor__dsink_floats(opts, sh.hq)) { /* after the rest, at an even float */
        size_t at = floats - favor__dsink_floats(opts, sh.hq);
        bp.dsink = (double *)(void *)(ws + at + (at & 1));
        memset(bp.dsink, 0, sh.hq * sizeof(double));
    }
    for (seq = 0; seq < favor__nseq(opts); ++seq) { /* one sequence after another */
        favor__seqv sv, gv; /* the sequence's q, k, v, out, mask; dout, dq, dk, dv */
        favor__shape ss = sh;
        favor__seqv_make(&sv, q, k, v, out, opts, seq);
        gv.q = favor__rows(dq, sv.q0, sv.q.rows);
        gv.k = favor__rows(dk, sv.k0, sv.k.rows);
        gv.v = favor__rows(dv, sv.k0, sv.k.rows);
        gv.o = favor__rows(dout, sv.q0, sv.q.rows);
        if (!sv.q.rows) { /* keys no query sees: zero gradients */
            size_t h;
            for (h = 0; h < sh.hkv; ++h) {
                favor__zero_rows(&gv.k, h, 0, sv.k.rows);
                favor__zero_rows(&gv.v, h, 0, sv.k.rows);
            }
            continue;
        }
        ss.n = sv.q.rows;
        ss.nk = sv.k.rows;
        bp.sh = &ss;
        bp.lse = opts && opts->lse ? opts->lse + sv.q0 : NULL;
        if (bp.md.mask) {
            bp.md.mask = &sv.mask;
            favor__mask_maps(&bp.md, ss.n, ss.nk, ws + map_at, ws, slice, nt);
        }
        if (split) {
            favor__softmax_bwd_split_run(&sv.q, &sv.k, &sv.v, &sv.o, &gv.o, &gv.q, &gv.k, &gv.v,
                                         &bp, ws, slice, ws + stage_at, stg, ws + part_at, nt);
        } else {
            FAVOR__PAR_FOR(g, (long)sh.hkv,
                           favor__softmax_bwd_head(&sv.q, &sv.k, &sv.v, &sv.o, &gv.o, &gv.q,
                                                   &gv.k, &gv.v, &bp, (size_t)g,
                                                   ws + tid_ * slice));
        }
    }
    if (bp.dsink) { /* dL/dsink_h: the sums of its heads, batch element by element */
        size_t h, b;
        for (h = 0; h < q->heads; ++h) {
            double a = 0.0;
            for (b = 0; b < sh.hq / q->heads; ++b) a += bp.dsink[b * q->heads + h];
            opts->dsinks[h] = (float)a;
        }
    }
    favor__ws_put(owned);
    return FAVOR_OK;
}

/* Linear attention. With phi stabilized as in the forward, dnum_i = dout_i / den_i,
 * dden_i = -dout_i . o_i / den_i, and the augmented value v'_j = [v_j, 1]:
 *     dphi(q_i) = sum_{j visible} (v'_j . dnum'_i) phi(k_j)
 *     dphi(k_j) = sum_{i that see j} (v'_j . dnum'_i) phi(q_i)
 *     dv_j      = sum_{i that see j} (phi(q_i) . phi(k_j)) dnum_i
 * The output itself is never formed: with u_i = S dout_i, dout_i . o_i =
 * phi(q_i) . u_i / den_i and S dnum_i = u_i / den_i.
 * No 1/den_i is ever formed alone: a stabilized den_i can be subnormal (every
 * feature product nearly underflowed) while the gradients stay bounded (positive
 * features: every a_ij = phi(q_i).phi(k_j) / den_i is in [0, 1]). Queries: a row's
 * den_i dphi(q_i) = u_i - (dout_i . o_i) z (+ the intra-chunk terms) is bounded,
 * the map backward is linear in dphi, and the row of dq is divided by den_i last.
 * Keys: the row i of the sums R = sum_i phi(q_i) dnum_i^T, rz = sum_i phi(q_i)
 * dden_i gets the weight sign(den_i) exp(lam - l_i) in place of 1/den_i, with
 * l_i = m_i + log|den_i| (m_i the row's key scale; kept as the pair (m_i,
 * log|den_i|), which survives a huge m_i) and lam the smallest l_i so far (R, rz
 * rescaled when lam falls), so every weight is at most 1; key j, its
 * features at scale r_j, is multiplied by exp(r_j - lam) at the end, in three
 * steps when that factor overflows (favor__bwd_keys_finish; for the exponential
 * maps applied to phi(k_j) * dphi(k_j), the bounded product the map backward
 * reads).
 * Non-causal: the state (S, z) of every key gives den_i dphi(q_i) row by row
 * while R and rz accumulate (m_i = 0: the key stabilizer c is common to every
 * term and cancels); a second pass over the keys gives dphi(k_j) = R v_j + rz and
 * dv_j = R^T phi(k_j), times exp(-lam) (r_j = 0). Products with S^T or R^T are
 * formed transposed (S times dO^T, R times V^T) and transposed back, O(width) per
 * row, so no transposed state is kept: 10 width d_v FLOP per token against the
 * forward's 4, plus three feature maps and two map backwards.
 * Causal: a forward pass over the chunks recomputes the forward's scores (key j
 * at the running maximum m_j, row i at m_i) and writes dq, with the intra-chunk
 * term den_i b_ij = (v_j . dout_i - dout_i . o_i) exp(m_j - m_i), j <= i. A row
 * keeps (den_i, m_i, dout_i . o_i) for the reverse pass, which walks the chunks
 * backwards with R = sum_{i >= chunk} phi(q_i) dnum'_i^T (weighted as above), a
 * key at its own log-scale r_j. Keys all rows see (n_k > n) take the final R.
 * Without the normalizer (FAVOR_NO_NORM) dnum_i = dout_i and dden_i = 0: a row
 * is given den_i = 1 / (its forward scale exp(r_q,i + m_i)), so l_i = -r_q,i and
 * everything above holds as written (favor__bwd_den).
 * Gated (GATES): pair (i, j) carries A_ij = exp(G_i - G_j) (4.10; G absolute
 * cumulative log-gates). The forward pass recomputes the forward's gated
 * chunks (exp(D_j - D_i) in b_ij, e_i = exp(c - D_i)). In the reverse pass R is
 * kept as key (chunk start - 1) sees it, R = sum_{i >= start} exp(G_i -
 * G_{start-1}) phi(q_i) dnum'_i^T, at scale lam; within a chunk, with local
 * cumulative gates G_i and L_i = l_i - G_i (double), key j's offset is the
 * decaying running minimum P_j = min(min_{i >= j} L_i, lam - G_last) (over the
 * group's heads too), the weight of row i for key j is exp(P_j - L_i) <= 1 (a
 * factor per pair, as the forward's exp(D_j - D_i); the rows' dnum, dden at unit
 * weight), the later rows' sums come in times exp(P_j - (lam - G_last)) <= 1,
 * key j is at scale mu_j = P_j + G_j (keys_finish: exp(r_j - mu_j)), and the
 * sums leave at the chunk's least offset P_0. Keys all rows see decay by the
 * gates after them: mu_j = lam + sum_{j < t < pre} (-l_t). Then, with c_ij the
 * term of pair (i, j) and X_p = sum_{j <= p} dL/dc_pj c_pj = phi(q_p).dphi(q_p)
 * (over the group's heads), Y_p = sum_{i >= p} dL/dc_ip c_ip = phi(k_p).dphi(k_p),
 *     dL/dg_t = sum_{j < t <= i} dL/dc_ij c_ij = sum_{p >= t} (X_p - Y_p),
 * formed as X_p - Y_p per key row of dgates (dphi at the scales above, the
 * dot product taken before the key's factor), then suffix-summed in double;
 * dg_0 = 0 (nothing before key 0 decays). Split inside a head (below), a
 * segment's own sums are as key (its first causal key - 1) sees them, and the
 * suffix scan decays each later partial by the segment's summed gates. */
typedef struct {
    float *S, *z;          /* forward state, width x dv, width             */
    float *R, *rz;         /* reverse sums, same shapes                    */
    float *dnum;           /* C x dv                                       */
    float *dphi;           /* C x width                                    */
    float *tw;             /* width x C: a product formed transposed       */
    float *vt, *gt;        /* dv x C: the chunk's V and dO transposed      */
    float *b;              /* C x C: intra-chunk weights                   */
    float *den, *og, *dden, *sums; /* C each                               */
    float *rows;           /* 3 C grp: the stash of a chunk's rows         */
    float *stash;          /* 3 grp per causal row, when not kept in dk/dv */
    float c;               /* non-causal: the scale of S, z (FAVOR_NO_NORM) */
    float *dg;             /* gated, with opts.dgates: dL/dg of the head's
                              key rows (stride lddg), else NULL             */
    size_t lddg;
    double gseg;           /* gated split: the gates summed from the segment's
                              first causal key to the current chunk          */
    double lg[FAVOR__CHUNK], gg[FAVOR__CHUNK], dd[FAVOR__CHUNK], pp[FAVOR__CHUNK];
    favor__chunk cb;
} favor__bwd;

/* Where a row's three floats wait between the passes: in the workspace, or in
 * slots of its key row's dk and dv (which the reverse pass overwrites last). */
typedef struct {
    float *dk, *dv, *ws;
    size_t lddk, lddv, d, per;
    size_t pre; /* key rows before the causal part: the workspace holds rows after */
} favor__stash;

/* the slot of key row `row` (>= pre) */
static float *favor__stash_at(const favor__stash *st, size_t row, size_t slot)
{
    if (st->ws) return st->ws + (row - st->pre) * st->per + slot;
    return slot < st->d ? st->dk + row * st->lddk + slot
                        : st->dv + row * st->lddv + (slot - st->d);
}

/* 1 when the stash needs the workspace: 3 floats per query head of a group
 * do not fit in a key row's d + d_v */
static int favor__stash_in_ws(size_t grp, size_t d, size_t dv) { return grp > (d + dv) / 3; }

static size_t favor__linear_bwd_floats(const favor_features *f, size_t grp, size_t d, size_t dv,
                                       size_t n, int causal)
{
    size_t w = favor__width(f->kernel, f->dim, f->count), C = FAVOR__CHUNK, wd, cw, a, t;
    /* 2 w dv + 2 w + chunk + C (w + 3 dv + w + C + 4 + 3 grp) [+ 3 grp n] */
    if (w > SIZE_MAX / 8 / C || !favor__mul_ok(w, dv, &wd) || wd > SIZE_MAX / 8) return 0;
    a = 2 * wd + 2 * w;
    if (!favor__add_ok(a, favor__chunk_floats(C, w), &a)) return 0;
    if (dv > SIZE_MAX / 8 / C || grp > SIZE_MAX / 8 / C) return 0;
    cw = 2 * w + 3 * dv + C + 4 + 3 * grp;
    if (!favor__mul_ok(C, cw, &t) || !favor__add_ok(a, t, &a)) return 0;
    if (causal && favor__stash_in_ws(grp, d, dv)) {
        if (!favor__mul_ok(n, 3 * grp, &t) || !favor__add_ok(a, t, &a)) return 0;
    }
    return a <= SIZE_MAX / sizeof(float) ? a : 0;
}

static void favor__bwd_carve(favor__bwd *b, float *p, size_t w, size_t dv, size_t grp,
                             int with_stash)
{
    size_t C = FAVOR__CHUNK;
    b->S = p; p += w * dv;
    b->z = p; p += w;
    b->R = p; p += w * dv;
    b->rz = p; p += w;
    favor__chunk_carve(&b->cb, p, C, w);
    p += favor__chunk_floats(C, w);
    b->dnum = p; p += C * dv;
    b->vt = p; p += C * dv;
    b->gt = p; p += C * dv;
    b->dphi = p; p += C * w;
    b->tw = p; p += C * w;
    b->b = p; p += C * C;
    b->den = p; p += C;
    b->og = p; p += C;
    b->dden = p; p += C;
    b->sums = p; p += C;
    b->rows = p; p += 3 * C * grp;
    b->stash = with_stash ? p : NULL;
    b->c = 0.0f;
    b->dg = NULL;
    b->lddg = 0;
}

/* The denominator of a backward row from the forward's rq: without the
 * normalizer rq is the row's scale exp(r_q + m) (4.10) and the row is treated
 * as divided by 1/rq, so that l_i = m + log|den_i| = -r_q and the weights and
 * dq = (den dphi) / den below hold unchanged; 0 (a zero row) where that scale
 * left the floats, as the forward's row did */
static float favor__bwd_den(const favor__map *mp, float rq)
{
    if (!mp->nonorm) return favor__den_eff(mp, rq);
    return rq >= FLT_MIN && rq <= FLT_MAX ? 1.0f / rq : 0.0f;
}

/* dst (nr x width) = the state (width x dv) times the columns of xt (dv x nr,
 * leading dimension C): the product S x_i for every row i, formed as S X^T and
 * transposed back */
static void favor__bwd_state_times(const favor__map *mp, favor__bwd *b, const float *M,
                                   const float *xt, size_t nr, size_t dv, float *dst)
{
    size_t w = mp->width;
    favor__gemm(w, nr, dv, M, dv, 1, xt, FAVOR__CHUNK, b->tw, FAVOR__CHUNK, 0);
    favor__transpose(w, nr, b->tw, FAVOR__CHUNK, dst, w);
}

/* dphi(k) and dv of nr keys from the reverse sums: dphi = R v_j + rz, dV = kf R;
 * kf, the keys' features, in b->cb.kf and V^T in b->vt */
static void favor__bwd_keys_from_sums(const favor__map *mp, favor__bwd *b, float *DV,
                                      size_t lddv, size_t nr, size_t dv)
{
    size_t j, w = mp->width;
    favor__bwd_state_times(mp, b, b->R, b->vt, nr, dv, b->dphi);
    for (j = 0; j < nr; ++j) favor__vadd(b->dphi + j * w, b->rz, w);
    favor__gemm(nr, dv, w, b->cb.kf, w, 1, b->R, dv, DV, lddv, 0);
}

/* R += qf^T dnum, rz += qf^T dden for nr rows */
static void favor__bwd_accumulate(const favor__map *mp, favor__bwd *b, size_t nr, size_t dv)
{
    size_t i, w = mp->width;
    favor__gemm(w, dv, nr, b->cb.qf, 1, w, b->dnum, dv, b->R, dv, 1);
    for (i = 0; i < nr; ++i) favor__axpy(b->rz, b->dden[i], b->cb.qf + i * w, w);
}

/* the features of nr key rows, each at its own log-scale (rk); kt = kf^T, and
 * vt = V^T */
static void favor__bwd_keys_own(const favor__map *mp, favor__bwd *b, const float *K, size_t ldk,
                                const float *V, size_t ldv, size_t nr, size_t dv)
{
    size_t w = mp->width;
    favor__phi_raw(mp, K, ldk, nr, b->cb.kf, w, b->cb.rk);
    favor__phi_finish(mp, b->cb.kf, w, nr, b->cb.rk, b->cb.rk);
    favor__transpose(nr, w, b->cb.kf, w, b->cb.kt, b->cb.cap);
    favor__transpose(nr, dv, V, ldv, b->vt, FAVOR__CHUNK);
}

/* The log-scale of a row, l_i = m_i + log|den_i| (den_i at key scale m_i), and
 * lam are kept as pairs (m, log|den|): a small log|den| survives a huge m, and
 * differences of pairs are differences of nearby floats. log|den| = +inf: a zero
 * row (weight 0), or no rows yet. */
static float favor__bwd_logden(float den) { return den != 0.0f ? logf(fabsf(den)) : INFINITY; }

/* lo = the least of lo and the l_i of nr rows (den_i, m_i, dout_i . o_i) at ri + 3 i */
static void favor__bwd_min(const float *ri, size_t nr, float *lo)
{
    size_t i;
    for (i = 0; i < nr; ++i, ri += 3) {
        float ld = favor__bwd_logden(ri[0]);
        if (ld < INFINITY && (lo[1] == INFINITY || (ri[1] - lo[0]) + (ld - lo[1]) < 0.0f)) {
            lo[0] = ri[1];
            lo[1] = ld;
        }
    }
}

/* lam (the scale of R, rz) falls to lo when lo is smaller, R and rz rescaled, so
 * that every row weight exp(lam - l_i) stays <= 1 */
static void favor__bwd_lower(const favor__map *mp, favor__bwd *b, const float *lo, float *lam,
                             size_t dv)
{
    if (lo[1] == INFINITY) return;
    if (lam[1] < INFINITY) {
        float x = (lo[0] - lam[0]) + (lo[1] - lam[1]), e;
        if (!(x < 0.0f)) return;
        e = favor__s_exp(x);
        favor__scal(b->R, e, mp->width * dv);
        favor__scal(b->rz, e, mp->width);
    }
    lam[0] = lo[0];
    lam[1] = lo[1];
}

/* dnum_i = w_i dout_i and dden_i = -w_i (dout_i . o_i), w_i = sign(den_i)
 * exp(lam - l_i) (unit: sign(den_i) alone), for nr rows (den_i, m_i,
 * dout_i . o_i) at ri + 3 i */
static void favor__bwd_weigh(favor__bwd *b, const float *ri, const float *G, size_t ldg,
                             size_t nr, size_t dv, const float *lam, int unit)
{
    size_t i;
    for (i = 0; i < nr; ++i, ri += 3) {
        float wi;
        if (ri[0] == 0.0f) { /* a zero row: no gradient */
            memset(b->dnum + i * dv, 0, dv * sizeof(float));
            b->dden[i] = 0.0f;
            continue;
        }
        wi = unit ? 1.0f : favor__s_exp((lam[0] - ri[1]) + (lam[1] - favor__bwd_logden(ri[0])));
        if (ri[0] < 0.0f) wi = -wi;
        memcpy(b->dnum + i * dv, G + i * ldg, dv * sizeof(float));
        favor__scal(b->dnum + i * dv, wi, dv);
        b->dden[i] = -ri[2] * wi;
    }
}

/* dq of nr rows from den_i dphi(q_i) in b->dphi (overwritten; the map backward is
 * linear in dphi), divided by den_i (b->den) at the end: den_i dphi(q_i) stays
 * bounded when den_i is tiny, dphi(q_i) alone need not be representable. */
static void favor__bwd_query_grad(const favor__map *mp, favor__bwd *b, const float *Q,
                                  size_t ldq, float *DQ, size_t lddq, size_t nr)
{
    size_t i, w = mp->width;
    favor__phi_backward(mp, Q, ldq, nr, b->cb.qf, w, b->dphi, w, DQ, lddq, b->sums);
    for (i = 0; i < nr; ++i)
        if (b->den[i] != 0.0f) favor__divs(DQ + i * lddq, b->den[i], mp->d);
}

/* Keys multiplied back to their true scale exp(r_j - lam) (r NULL: r_j = 0), then
 * dk. The factor can overflow while the sums it multiplies have underflowed
 * (their product, a bounded gradient, is finite): past exp(88) it is applied as
 * exp(a/3) three times, every partial product at most the final one, with a
 * capped at 240 so a zero sum stays 0 (no nonzero float times exp(a > 192) is
 * finite, so the sum is 0 there) instead of inf * 0. dv_j and, for the
 * exponential maps, p = phi(k_j) * dphi(k_j) are bounded (p_l is feature l's
 * share of the weights a_ij, times v'_j . dnum'_i), dphi(k_j) alone is not: there
 * p is formed first, and the map backward reads it against features of 1 (ELU1:
 * p = dphi dphi/dx, dphi/dx = 1 for x > 0 and phi = exp(x) below). */
static void favor__bwd_keys_finish(const favor__map *mp, favor__bwd *b, const float *lam,
                                   const double *mu, const float *r, const float *K, size_t ldk,
                                   float *DK, size_t lddk, float *DV, size_t lddv, size_t nr,
                                   size_t dv, float *dgk)
{
    size_t j, k, w = mp->width, ldp = w;
    int elu = mp->kernel == FAVOR_ELU1;
    int pre = elu || mp->kernel == FAVOR_POSITIVE || mp->kernel == FAVOR_HYPERBOLIC;
    const float *phi = b->cb.kf;
    if (pre) { /* one row of ones (in b->tw, free here), read for every key */
        for (k = 0; k < w; ++k) b->tw[k] = 1.0f;
        phi = b->tw;
        ldp = 0;
    }
    for (j = 0; j < nr; ++j) {
        float a = mu ? (float)((double)(r ? r[j] : 0.0f) - mu[j])
                     : ((r ? r[j] : 0.0f) - lam[0]) - lam[1],
              e = 0.0f;
        int steps = 1;
        if (a > 88.0f) {
            e = favor__s_exp((a < 240.0f ? a : 240.0f) / 3.0f);
            steps = 3;
        } else if (mu || lam[1] < INFINITY) { /* gated: mu = +inf, a = -inf, e = 0 */
            e = favor__s_exp(a);
        }
        if (dgk) { /* dL/dg: - Y_j (above), the dot product first */
            float y = favor__dot(b->cb.kf + j * w, b->dphi + j * w, w);
            for (k = 0; k < (size_t)steps; ++k) y *= e;
            dgk[j * b->lddg] -= y;
        }
        if (elu) /* dphi times dphi/dx (1 or phi): elu1_grad in place */
            favor__elu1_grad(b->dphi + j * w, K + j * ldk, b->cb.kf + j * w, b->dphi + j * w, w);
        else if (pre)
            favor__vmul(b->dphi + j * w, b->cb.kf + j * w, w);
        for (k = 0; k < (size_t)steps; ++k) {
            favor__scal(DV + j * lddv, e, dv);
            favor__scal(b->dphi + j * w, e, w);
        }
    }
    favor__phi_backward(mp, K, ldk, nr, phi, ldp, b->dphi, w, DK, lddk, b->sums);
}

typedef struct {
    const favor_tensor *q, *k, *v, *g, *dq, *dk, *dv;
} favor__bwd_args;

/* Non-causal rows [i0, i1) (from a multiple of C) of query head t of the group of
 * key/value head hk, from the state b->S, b->z: dq, with R, rz (at scale lam)
 * accumulating them. */
static void favor__bwd_full_rows(const favor__map *mp, const favor__bwd_args *x,
                                 const favor__shape *sh, size_t hk, size_t t, size_t i0,
                                 size_t i1, favor__bwd *b, float *lam)
{
    size_t w = mp->width, dv = sh->dv, grp = sh->hq / sh->hkv, C = FAVOR__CHUNK, i;
    size_t h = hk * grp + t;
    const float *Q = (float *)x->q->data + h * x->q->head_stride;
    const float *G = (float *)x->g->data + h * x->g->head_stride;
    float *DQ = (float *)x->dq->data + h * x->dq->head_stride;
    size_t ldq = x->q->row_stride, ldg = x->g->row_stride, lddq = x->dq->row_stride;
    for (i = i0; i < i1; i += C) {
        size_t r, nr = i1 - i < C ? i1 - i : C;
        float lo[2] = { 0.0f, INFINITY };
        favor__phi_raw(mp, Q + i * ldq, ldq, nr, b->cb.qf, w, b->cb.rq);
        favor__phi_finish(mp, b->cb.qf, w, nr, b->cb.rq, b->cb.rq);
        favor__transpose(nr, dv, G + i * ldg, ldg, b->gt, C);
        favor__bwd_state_times(mp, b, b->S, b->gt, nr, dv, b->dphi); /* u_r = S g_r */
        for (r = 0; r < nr; ++r) {
            float *u = b->dphi + r * w, *ri = b->rows + 3 * r;
            float den = favor__bwd_den(
                mp, !mp->nonorm                     ? favor__dot(b->cb.qf + r * w, b->z, w)
                    : favor__stabilized(mp->kernel) ? favor__s_exp(b->cb.rq[r] + b->c)
                                                    : 1.0f);
            b->den[r] = ri[0] = den;
            ri[1] = 0.0f; /* m_i: the keys' scale c cancels */
            if (den == 0.0f) { /* a zero row: no gradient */
                ri[2] = 0.0f;
                memset(u, 0, w * sizeof(float));
                continue;
            }
            if (mp->nonorm) { /* dphi(q_r) = S g_r, at the row's scale: u */
                ri[2] = 0.0f;
                continue;
            }
            ri[2] = favor__dot(b->cb.qf + r * w, u, w) / den; /* dout . o */
            favor__axpy(u, -ri[2], b->z, w); /* den dphi(q_r) */
        }
        favor__bwd_query_grad(mp, b, Q + i * ldq, ldq, DQ + i * lddq, lddq, nr);
        favor__bwd_min(b->rows, nr, lo);
        favor__bwd_lower(mp, b, lo, lam, dv);
        favor__bwd_weigh(b, b->rows, G + i * ldg, ldg, nr, dv, lam, 0);
        favor__bwd_accumulate(mp, b, nr, dv);
    }
}

/* Non-causal keys [j0, j1) (from a multiple of C) of key/value head hk, at the
 * state's scale c, from the sums b->R, b->rz at scale lam: dk, dv. */
static void favor__bwd_full_keys(const favor__map *mp, const favor__bwd_args *x,
                                 const favor__shape *sh, size_t hk, float c, const float *lam,
                                 size_t j0, size_t j1, favor__bwd *b)
{
    size_t w = mp->width, dv = sh->dv, C = FAVOR__CHUNK;
    const float *K = (float *)x->k->data + hk * x->k->head_stride, *V = (float *)x->v->data + hk * x->v->head_stride;
    size_t ldk = x->k->row_stride, ldv = x->v->row_stride;
    for (; j0 < j1; j0 += C) {
        size_t j, nr = j1 - j0 < C ? j1 - j0 : C;
        float *DV = (float *)x->dv->data + hk * x->dv->head_stride + j0 * x->dv->row_stride;
        float *DK = (float *)x->dk->data + hk * x->dk->head_stride + j0 * x->dk->row_stride;
        favor__phi_raw(mp, K + j0 * ldk, ldk, nr, b->cb.kf, w, b->cb.rk);
        for (j = 0; j < nr; ++j) b->cb.mk[j] = c;
        favor__phi_finish(mp, b->cb.kf, w, nr, b->cb.rk, b->cb.mk);
        favor__transpose(nr, dv, V + j0 * ldv, ldv, b->vt, C);
        favor__bwd_keys_from_sums(mp, b, DV, x->dv->row_stride, nr, dv);
        favor__bwd_keys_finish(mp, b, lam, NULL, NULL, K + j0 * ldk, ldk, DK, x->dk->row_stride,
                               DV, x->dv->row_stride, nr, dv, NULL);
    }
}

/* Non-causal backward of key/value head hk. */
static void favor__linear_bwd_full(const favor__map *mp, const favor__bwd_args *x,
                                   const favor__shape *sh, size_t hk, favor__bwd *b)
{
    size_t w = mp->width, dv = sh->dv, grp = sh->hq / sh->hkv, C = FAVOR__CHUNK, t, j0;
    const float *K = (float *)x->k->data + hk * x->k->head_stride, *V = (float *)x->v->data + hk * x->v->head_stride;
    size_t ldk = x->k->row_stride, ldv = x->v->row_stride;
    float c = -INFINITY, lam[2] = { 0.0f, INFINITY };
    memset(b->S, 0, (2 * w * dv + 2 * w) * sizeof(float)); /* S, z, R, rz */
    for (j0 = 0; j0 < sh->nk; j0 += C)
        favor__lin_absorb(mp, b->S, b->z, &c, K + j0 * ldk, ldk, V + j0 * ldv, ldv,
                          sh->nk - j0 < C ? sh->nk - j0 : C, dv, &b->cb);
    b->c = c;
    for (t = 0; t < grp; ++t) favor__bwd_full_rows(mp, x, sh, hk, t, 0, sh->n, b, lam);
    favor__bwd_full_keys(mp, x, sh, hk, c, lam, 0, sh->nk, b);
}

/* lam as a double (+inf: no sums yet), and back into its pair of floats */
static double favor__lam_get(const float *lam)
{
    return lam[1] < INFINITY ? (double)lam[0] + lam[1] : INFINITY;
}

static void favor__lam_set(float *lam, double x)
{
    if (!(x < INFINITY)) return;
    lam[0] = (float)x;
    lam[1] = (float)(x - (double)lam[0]);
}

/* Gated: L_i = l_i - G_i of row i (stash ri; +inf: a zero row) */
static double favor__bwd_gated_L(const favor__bwd *b, const float *ri, size_t i)
{
    return ri[0] != 0.0f ? ((double)ri[1] + favor__bwd_logden(ri[0])) - b->gg[i] : INFINITY;
}

/* The gated split's own sums of a chunk's rows (one query head; stash in
 * b->rows, dout rows G), as the reverse pass will need them: R, rz as key
 * (segment start - 1) sees them, at scale lam, L_i = l_i - G_i with G_i the
 * gates summed from the segment's first causal key (b->gseg before the
 * chunk, b->lg within it); every weight exp(lam - L_i) <= 1. */
static void favor__bwd_own_gated(const favor__map *mp, favor__bwd *b, const float *G,
                                 size_t ldg, size_t nr, size_t dv, float *lam)
{
    size_t i;
    double acc = b->gseg, lamd = favor__lam_get(lam), lo = INFINITY;
    for (i = 0; i < nr; ++i) {
        b->gg[i] = acc += b->lg[i];
        b->pp[i] = favor__bwd_gated_L(b, b->rows + 3 * i, i);
        if (b->pp[i] < lo) lo = b->pp[i];
    }
    if (lo < lamd) { /* the sums come down to the new least offset */
        if (lamd < INFINITY) {
            float e = favor__s_exp((float)(lo - lamd));
            favor__scal(b->R, e, mp->width * dv);
            favor__scal(b->rz, e, mp->width);
        }
        lamd = lo;
    }
    favor__bwd_weigh(b, b->rows, G, ldg, nr, dv, lam, 1);
    for (i = 0; i < nr; ++i) {
        float e = b->pp[i] < INFINITY ? favor__s_exp((float)(lamd - b->pp[i])) : 0.0f;
        favor__scal(b->dnum + i * dv, e, dv);
        b->dden[i] *= e;
    }
    favor__bwd_accumulate(mp, b, nr, dv);
    favor__lam_set(lam, lamd);
}

/* Causal forward pass over one chunk of nr rows (keys kr.., rows r0.. of each
 * query head): dq, and every row's stash; lam not NULL: the rows' sums R, rz
 * (at scale lam) too, as the reverse pass forms them (the split's partials). */
static void favor__bwd_causal_rows(const favor__map *mp, const favor__bwd_args *x,
                                   const favor__shape *sh, size_t hk, favor__bwd *b,
                                   const favor__stash *sto, float *c, size_t kr, size_t r0,
                                   size_t nr, float *lam)
{
    size_t w = mp->width, dv = sh->dv, grp = sh->hq / sh->hkv, C = FAVOR__CHUNK, t, i, j, nf;
    size_t ldk = x->k->row_stride, ldv = x->v->row_stride;
    const float *K = (float *)x->k->data + hk * x->k->head_stride + kr * ldk;
    const float *V = (float *)x->v->data + hk * x->v->head_stride + kr * ldv;
    float mrun;
    int rising;
    if (favor__gated(mp)) { /* the forward's gated chunk (4.10) */
        favor__log_gates(mp, 0, kr, nr, b->lg);
        b->cb.lg = b->lg;
        b->cb.dd = b->dd;
    }
    rising = favor__chunk_keys(mp, *c, K, ldk, nr, &b->cb, &mrun);
    favor__transpose(nr, dv, V, ldv, b->vt, C);
    for (t = 0; t < grp; ++t) {
        size_t h = hk * grp + t, ldq = x->q->row_stride, ldg = x->g->row_stride;
        const float *Q = (float *)x->q->data + h * x->q->head_stride + r0 * ldq;
        const float *G = (float *)x->g->data + h * x->g->head_stride + r0 * ldg;
        float *DQ = (float *)x->dq->data + h * x->dq->head_stride + r0 * x->dq->row_stride;
        favor__chunk_scores(mp, *c, b->z, Q, ldq, nr, rising, &b->cb);
        favor__transpose(nr, dv, G, ldg, b->gt, C);
        favor__bwd_state_times(mp, b, b->S, b->gt, nr, dv, b->dphi); /* u_i = S g_i */
        favor__gemm_lower(nr, dv, G, ldg, b->vt, C, b->b, C); /* g_i . v_j, j <= i */
        for (i = 0; i < nr; ++i) {
            float *u = b->dphi + i * w, *bi = b->b + i * C, *ai = b->cb.a + i * C;
            float den = favor__bwd_den(mp, b->cb.rq[i]), e, og, *ri = b->rows + 3 * i;
            *favor__stash_at(sto, kr + i, 3 * t) = b->den[i] = ri[0] = den;
            *favor__stash_at(sto, kr + i, 3 * t + 1) = ri[1] = b->cb.mk[i];
            if (den == 0.0f) { /* a zero row: no gradient */
                *favor__stash_at(sto, kr + i, 3 * t + 2) = ri[2] = 0.0f;
                memset(u, 0, w * sizeof(float));
                memset(bi, 0, nr * sizeof(float));
                continue;
            }
            e = favor__chunk_e(&b->cb, *c, i);
            og = 0.0f; /* dout . o; without the normalizer: unused, 0 */
            for (j = 0; !mp->nonorm && j <= i; ++j) og += ai[j] * bi[j];
            if (!mp->nonorm) og = (e * favor__dot(b->cb.qf + i * w, u, w) + og) / den;
            *favor__stash_at(sto, kr + i, 3 * t + 2) = ri[2] = og;
            favor__scal(u, e, w); /* den dphi(q_i) = e (S g_i - og z) + b_i kf */
            favor__axpy(u, -e * og, b->z, w);
            for (j = 0; j <= i; ++j) bi[j] -= og;
            nf = b->cb.lg ? i + 1 : i; /* gated: the diagonal too (kf's share) */
            if (rising && nf) { /* b_ij as a_ij (favor__chunk_scores) */
                favor__chunk_factors(&b->cb, i, nf);
                favor__vmul(bi, b->cb.g, nf);
            }
        }
        favor__gemm_tri(nr, w, 0, b->b, C, 1, b->cb.kf, w, b->dphi, w); /* += b kf */
        for (i = 0; b->dg && i < nr; ++i) /* dL/dg: + X_i (above) */
            if (b->den[i] != 0.0f)
                b->dg[(kr + i) * b->lddg] +=
                    favor__dot(b->cb.qf + i * w, b->dphi + i * w, w) / b->den[i];
        favor__bwd_query_grad(mp, b, Q, ldq, DQ, x->dq->row_stride, nr);
        if (lam && favor__gated(mp)) {
            favor__bwd_own_gated(mp, b, G, ldg, nr, dv, lam);
        } else if (lam) { /* qf: the rows' features at their own scale, as the reverse pass's */
            float lo[2] = { 0.0f, INFINITY };
            favor__bwd_min(b->rows, nr, lo);
            favor__bwd_lower(mp, b, lo, lam, dv);
            favor__bwd_weigh(b, b->rows, G, ldg, nr, dv, lam, 0);
            favor__bwd_accumulate(mp, b, nr, dv);
        }
    }
    favor__chunk_absorb(mp, b->S, b->z, c, mrun, rising, V, ldv, nr, dv, &b->cb);
    for (i = 0; lam && b->cb.lg && i < nr; ++i) b->gseg += b->lg[i];
    b->cb.lg = NULL;
    b->cb.dd = NULL;
}

/* The gated reverse pass (above) of a chunk of nr keys from kr: the chunk's
 * cumulative log-gates G_i into b->gg and the keys' offsets P_j into b->pp, from
 * the rows' stash in b->rows (grp heads, C apart) and the sums' scale lam; returns
 * the cross offset lam - G_last (+inf: no sums yet). */
static double favor__bwd_gated_offsets(const favor__map *mp, favor__bwd *b, const float *lam,
                                       size_t kr, size_t nr, size_t grp)
{
    size_t i, t, C = FAVOR__CHUNK;
    double G = 0.0, run, cross;
    favor__log_gates(mp, 0, kr, nr, b->lg);
    for (i = 0; i < nr; ++i) b->gg[i] = G += b->lg[i];
    cross = favor__lam_get(lam) - G; /* +inf stays */
    for (run = cross, i = nr; i-- > 0;) {
        for (t = 0; t < grp; ++t) {
            double L = favor__bwd_gated_L(b, b->rows + (t * C + i) * 3, i);
            if (L < run) run = L;
        }
        b->pp[i] = run;
    }
    return cross;
}

/* Gated: the weights exp(P_j - L) <= 1 of a row (L from favor__bwd_gated_L) for
 * keys j < n, into b->cb.g (P_j <= L wherever L is finite) */
static void favor__bwd_gated_pairs(favor__bwd *b, double L, size_t n)
{
    size_t j;
    if (L == INFINITY) {
        memset(b->cb.g, 0, n * sizeof(float));
        return;
    }
    for (j = 0; j < n; ++j) b->cb.g[j] = (float)(b->pp[j] - L);
    favor__exp_add(b->cb.g, b->cb.g, 0.0f, n);
}

/* Causal reverse pass over one chunk: dk, dv of keys kr.., from the stash of rows
 * r0.. and the sums of the later rows. Gated (4.12): every weight is brought to
 * its key's offset P_j by a factor <= 1 per (row, key) pair, and the sums leave
 * at the chunk's least offset P_0. */
static void favor__bwd_causal_keys(const favor__map *mp, const favor__bwd_args *x,
                                   const favor__shape *sh, size_t hk, favor__bwd *b,
                                   const favor__stash *sto, float *lam, size_t kr, size_t r0,
                                   size_t nr)
{
    size_t w = mp->width, dv = sh->dv, grp = sh->hq / sh->hkv, C = FAVOR__CHUNK, t, i, j;
    size_t ldk = x->k->row_stride, ldv = x->v->row_stride, lddv = x->dv->row_stride;
    const float *K = (float *)x->k->data + hk * x->k->head_stride + kr * ldk;
    const float *V = (float *)x->v->data + hk * x->v->head_stride + kr * ldv;
    float *DV = (float *)x->dv->data + hk * x->dv->head_stride + kr * lddv;
    float *DK = (float *)x->dk->data + hk * x->dk->head_stride + kr * x->dk->row_stride;
    float lo[2] = { 0.0f, INFINITY };
    int gated = favor__gated(mp);
    double cross = 0.0;
    for (t = 0; t < grp; ++t) { /* the rows' stash, before their dk/dv rows are written */
        for (i = 0; i < nr; ++i) {
            float *ri = b->rows + (t * C + i) * 3;
            ri[0] = *favor__stash_at(sto, kr + i, 3 * t);
            ri[1] = *favor__stash_at(sto, kr + i, 3 * t + 1);
            ri[2] = *favor__stash_at(sto, kr + i, 3 * t + 2);
        }
        if (!gated) favor__bwd_min(b->rows + t * C * 3, nr, lo);
    }
    if (gated) cross = favor__bwd_gated_offsets(mp, b, lam, kr, nr, grp);
    else favor__bwd_lower(mp, b, lo, lam, dv);
    favor__bwd_keys_own(mp, b, K, ldk, V, ldv, nr, dv);
    favor__bwd_keys_from_sums(mp, b, DV, lddv, nr, dv);
    if (gated) { /* the later rows' sums to the keys' offsets, then to P_0 */
        for (j = 0; j < nr; ++j) {
            float e = cross < INFINITY ? favor__s_exp((float)(b->pp[j] - cross)) : 0.0f;
            favor__scal(DV + j * lddv, e, dv);
            favor__scal(b->dphi + j * w, e, w);
        }
        if (cross < INFINITY && b->pp[0] < INFINITY) {
            float e = favor__s_exp((float)(b->pp[0] - cross));
            favor__scal(b->R, e, w * dv);
            favor__scal(b->rz, e, w);
        }
    }
    for (t = 0; t < grp; ++t) {
        size_t h = hk * grp + t, ldq = x->q->row_stride, ldg = x->g->row_stride;
        const float *Q = (float *)x->q->data + h * x->q->head_stride + r0 * ldq;
        const float *G = (float *)x->g->data + h * x->g->head_stride + r0 * ldg;
        const float *rt = b->rows + t * C * 3;
        favor__phi_raw(mp, Q, ldq, nr, b->cb.qf, w, b->cb.rq);
        favor__phi_finish(mp, b->cb.qf, w, nr, b->cb.rq, b->cb.rq);
        /* gated: unit weights (the sign of den_i), the pairs' factors below */
        favor__bwd_weigh(b, rt, G, ldg, nr, dv, lam, gated);
        /* a = qf kf^T and b_ij = v'_j . dnum'_i (rows i, keys j <= i); key j is
         * seen by rows i >= j: dV += a^T dnum, dphi += b^T qf */
        favor__gemm_lower(nr, w, b->cb.qf, w, b->cb.kt, C, b->cb.a, C);
        favor__gemm_lower(nr, dv, b->dnum, dv, b->vt, C, b->b, C);
        for (i = 0; i < nr; ++i) {
            for (j = 0; j <= i; ++j) b->b[i * C + j] += b->dden[i];
            if (gated) {
                favor__bwd_gated_pairs(b, favor__bwd_gated_L(b, rt + 3 * i, i), i + 1);
                favor__vmul(b->cb.a + i * C, b->cb.g, i + 1);
                favor__vmul(b->b + i * C, b->cb.g, i + 1);
            }
        }
        favor__gemm_tri(nr, dv, 1, b->cb.a, 1, C, b->dnum, dv, DV, lddv);
        favor__gemm_tri(nr, w, 1, b->b, 1, C, b->cb.qf, w, b->dphi, w);
        for (i = 0; gated && i < nr; ++i) { /* the rows join the sums at P_0 */
            double L = favor__bwd_gated_L(b, rt + 3 * i, i);
            float e = L < INFINITY ? favor__s_exp((float)(b->pp[0] - L)) : 0.0f;
            favor__scal(b->dnum + i * dv, e, dv);
            b->dden[i] *= e;
        }
        favor__bwd_accumulate(mp, b, nr, dv);
    }
    if (gated) { /* mu_j = P_j + G_j; the sums' scale becomes P_0 */
        for (j = 0; j < nr; ++j) b->gg[j] += b->pp[j];
        if (b->pp[0] < INFINITY) {
            lam[0] = (float)b->pp[0];
            lam[1] = (float)(b->pp[0] - (double)lam[0]);
        }
    }
    favor__bwd_keys_finish(mp, b, lam, gated ? b->gg : NULL, b->cb.rk, K, ldk, DK,
                           x->dk->row_stride, DV, lddv, nr, dv, b->dg ? b->dg + kr * b->lddg : NULL);
}

/* Keys [j0, j1) every causal row sees (n_k > n): dk, dv from the sums R, rz of
 * every row (at scale lam). */
static void favor__bwd_causal_pre(const favor__map *mp, const favor__bwd_args *x,
                                  const favor__shape *sh, size_t hk, favor__bwd *b,
                                  const float *lam, size_t j0, size_t j1)
{
    size_t dv = sh->dv, C = FAVOR__CHUNK, ldk = x->k->row_stride, ldv = x->v->row_stride;
    size_t lddk = x->dk->row_stride, lddv = x->dv->row_stride;
    const float *K = (float *)x->k->data + hk * x->k->head_stride, *V = (float *)x->v->data + hk * x->v->head_stride;
    float *DK = (float *)x->dk->data + hk * x->dk->head_stride, *DV = (float *)x->dv->data + hk * x->dv->head_stride;
    double lamd = favor__lam_get(lam);
    size_t j, e = j1;
    if (favor__gated(mp)) { /* last chunk first: mu_j = lam + the gates after j */
        while (e > j0) {
            size_t nr = e - j0 < C ? e - j0 : C, s = e - nr;
            double G = 0.0;
            favor__bwd_keys_own(mp, b, K + s * ldk, ldk, V + s * ldv, ldv, nr, dv);
            favor__bwd_keys_from_sums(mp, b, DV + s * lddv, lddv, nr, dv);
            favor__log_gates(mp, 0, s, nr, b->lg);
            for (j = 0; j < nr; ++j) b->gg[j] = G += b->lg[j];
            for (j = 0; j < nr; ++j) b->gg[j] = (lamd - G) + b->gg[j];
            favor__bwd_keys_finish(mp, b, lam, b->gg, b->cb.rk, K + s * ldk, ldk, DK + s * lddk,
                                   lddk, DV + s * lddv, lddv, nr, dv,
                                   b->dg ? b->dg + s * b->lddg : NULL);
            lamd -= G;
            e = s;
        }
        return;
    }
    for (; j0 < j1; j0 += C) {
        size_t nr = j1 - j0 < C ? j1 - j0 : C;
        favor__bwd_keys_own(mp, b, K + j0 * ldk, ldk, V + j0 * ldv, ldv, nr, dv);
        favor__bwd_keys_from_sums(mp, b, DV + j0 * lddv, lddv, nr, dv);
        favor__bwd_keys_finish(mp, b, lam, NULL, b->cb.rk, K + j0 * ldk, ldk, DK + j0 * lddk,
                               lddk, DV + j0 * lddv, lddv, nr, dv, NULL);
    }
}

/* the stash of key/value head hk: in its dk, dv rows, or at ws (NULL: not in
 * the workspace) */
static void favor__stash_make(favor__stash *sto, const favor__bwd_args *x, const favor__shape *sh,
                              size_t hk, float *ws)
{
    size_t pre, skip;
    favor__causal_edges(sh, &pre, &skip);
    sto->dk = (float *)x->dk->data + hk * x->dk->head_stride;
    sto->dv = (float *)x->dv->data + hk * x->dv->head_stride;
    sto->ws = ws;
    sto->lddk = x->dk->row_stride;
    sto->lddv = x->dv->row_stride;
    sto->d = sh->d;
    sto->per = 3 * (sh->hq / sh->hkv);
    sto->pre = pre;
}

/* The causal keys [ks, ks + L) of key/value head hk (rows from skip + ks -
 * pre), in the chunks of the one-head pass. Forward: from the state b->S, b->z
 * (scale *c) of the keys before ks, dq and the stash (lam not NULL: the rows'
 * own sums into b->R, b->rz at lam). Reverse (favor__bwd_causal_back): from the
 * sums b->R, b->rz (at lam) of the rows after, dk and dv, last chunk first. */
static void favor__bwd_causal_fwd(const favor__map *mp, const favor__bwd_args *x,
                                  const favor__shape *sh, size_t hk, favor__bwd *b,
                                  const favor__stash *sto, float *c, size_t ks, size_t L,
                                  float *lam)
{
    size_t pre, skip, t0, step = favor__causal_step(mp, FAVOR__CHUNK);
    favor__causal_edges(sh, &pre, &skip);
    b->gseg = 0.0;
    for (t0 = 0; t0 < L; t0 += step)
        favor__bwd_causal_rows(mp, x, sh, hk, b, sto, c, ks + t0, skip + (ks - pre) + t0,
                               L - t0 < step ? L - t0 : step, lam);
}

static void favor__bwd_causal_back(const favor__map *mp, const favor__bwd_args *x,
                                   const favor__shape *sh, size_t hk, favor__bwd *b,
                                   const favor__stash *sto, float *lam, size_t ks, size_t L)
{
    size_t pre, skip, t0, step = favor__causal_step(mp, FAVOR__CHUNK);
    favor__causal_edges(sh, &pre, &skip);
    for (t0 = L ? (L - 1) / step * step + step : 0; t0 > 0;) {
        t0 -= step;
        favor__bwd_causal_keys(mp, x, sh, hk, b, sto, lam, ks + t0, skip + (ks - pre) + t0,
                               L - t0 < step ? L - t0 : step);
    }
}

/* keys [j0, j1) of key/value head hk absorbed into the state b->S, b->z (scale
 * *c) as the forward absorbs them; with rows [0, skip) of dq zeroed when j0 = 0
 * (rows that see no key: zero gradient) */
static void favor__bwd_causal_head(const favor__map *mp, const favor__bwd_args *x,
                                   const favor__shape *sh, size_t hk, favor__bwd *b, float *c,
                                   size_t j0, size_t j1)
{
    size_t C = FAVOR__CHUNK, ldk = x->k->row_stride, ldv = x->v->row_stride;
    size_t grp = sh->hq / sh->hkv, pre, skip, t, i;
    const float *K = (float *)x->k->data + hk * x->k->head_stride, *V = (float *)x->v->data + hk * x->v->head_stride;
    favor__causal_edges(sh, &pre, &skip);
    for (t = 0; !j0 && t < grp; ++t)
        for (i = 0; i < skip; ++i)
            memset((float *)x->dq->data + (hk * grp + t) * x->dq->head_stride +
                       i * x->dq->row_stride,
                   0, sh->d * sizeof(float));
    if (favor__gated(mp)) { /* the keys decay one by one, as the forward's */
        favor__qgroup qg;
        memset(&qg, 0, sizeof qg);
        qg.k = x->k;
        qg.v = x->v;
        qg.g = hk;
        favor__lin_absorb_rows(mp, b->S, b->z, c, &qg, j0, j1, sh->dv, &b->cb);
        return;
    }
    for (; j0 < j1; j0 += C)
        favor__lin_absorb(mp, b->S, b->z, c, K + j0 * ldk, ldk, V + j0 * ldv, ldv,
                          j1 - j0 < C ? j1 - j0 : C, sh->dv, &b->cb);
}

/* Causal backward of key/value head hk (see above). */
static void favor__linear_bwd_causal(const favor__map *mp, const favor__bwd_args *x,
                                     const favor__shape *sh, size_t hk, favor__bwd *b)
{
    size_t w = mp->width, pre, skip;
    float c = -INFINITY, lam[2] = { 0.0f, INFINITY };
    favor__stash sto;
    favor__stash_make(&sto, x, sh, hk, b->stash);
    favor__causal_edges(sh, &pre, &skip);
    memset(b->S, 0, (2 * w * sh->dv + 2 * w) * sizeof(float)); /* S, z, R, rz */
    favor__bwd_causal_head(mp, x, sh, hk, b, &c, 0, pre);
    favor__bwd_causal_fwd(mp, x, sh, hk, b, &sto, &c, pre, sh->n - skip, NULL);
    favor__bwd_causal_back(mp, x, sh, hk, b, &sto, lam, pre, sh->n - skip);
    favor__bwd_causal_pre(mp, x, sh, hk, b, lam, 0, pre);
}

/* per-thread floats of a linear backward: the kernel's, then the staging */
static size_t favor__linear_bwd_call_floats(const favor_features *f, const favor_tensor *q,
                                            const favor_tensor *k, const favor_tensor *v,
                                            const favor_tensor *dout, const favor_tensor *dq,
                                            const favor_tensor *dk, const favor_tensor *dv,
                                            int causal, int any16)
{
    size_t a = favor__linear_bwd_floats(f, q->heads / k->heads, f->dim, v->cols, q->rows, causal);
    size_t b = favor__bwd_stage_floats(q, k, v, NULL, dout, dq, dk, dv, any16);
    return a && favor__add_ok(a, b, &a) && a <= SIZE_MAX / sizeof(float) ? a : 0;
}

/* The fp32 views of a linear backward's key/value head hk and its query heads
 * (favor__stage from p; widen: copy the 16-bit inputs in), and the arguments of
 * the kernels on them (head 0 of k, v, dk, dv; heads 0 .. grp - 1 of the rest) */
typedef struct {
    favor_tensor Q, G, DQ, K, V, DK, DV;
    favor__bwd_args x;
} favor__lbv;

static void favor__lbv_make(favor__lbv *l, const favor_tensor *q, const favor_tensor *k,
                            const favor_tensor *v, const favor_tensor *dout,
                            const favor_tensor *dq, const favor_tensor *dk,
                            const favor_tensor *dv, size_t grp, size_t hk, int widen, float *p)
{
    l->Q = favor__stage(q, hk * grp, grp, widen, &p);
    l->G = favor__stage(dout, hk * grp, grp, widen, &p);
    l->DQ = favor__stage(dq, hk * grp, grp, 0, &p);
    l->K = favor__stage(k, hk, 1, widen, &p);
    l->V = favor__stage(v, hk, 1, widen, &p);
    l->DK = favor__stage(dk, hk, 1, 0, &p);
    l->DV = favor__stage(dv, hk, 1, 0, &p);
    l->x.q = &l->Q;
    l->x.k = &l->K;
    l->x.v = &l->V;
    l->x.g = &l->G;
    l->x.dq = &l->DQ;
    l->x.dk = &l->DK;
    l->x.dv = &l->DV;
}

/* The map of one key/value head hk of a gated call: its row of the gates (g1)
 * and its decay, as head 0 (the backward's kernels run on head 0 of views) */
static void favor__head_map(favor__map *mh, favor_tensor *g1, const favor__map *mp, size_t hk)
{
    *mh = *mp;
    if (mp->gates) {
        *g1 = *mp->gates;
        g1->data = favor__at(mp->gates, hk, 0);
        g1->heads = 1;
        g1->batch = 0;
        mh->gates = g1;
    }
    if (mp->decay) {
        mh->decay = mp->decay + hk % mp->dheads;
        mh->dheads = 1;
    }
}

/* dL/dg of a head's nk key rows (stride ld) from the sums X_p - Y_p of each
 * position (4.12, linear attention): their suffix sums, in double; key 0's gate
 * has no effect (nothing before it decays), its gradient is 0 */
static void favor__dg_finish(float *dg, size_t ld, size_t nk)
{
    double acc = 0.0;
    size_t t;
    for (t = nk; t-- > 1;) {
        acc += dg[t * ld];
        dg[t * ld] = (float)acc;
    }
    dg[0] = 0.0f;
}

/* The non-causal linear backward split inside key/value heads (fewer than
 * FAVOR__SPLIT of them; from the shape alone, as the forward, "Splitting one
 * key/value head"): the state from segment sums and their scan (the forward's
 * steps 1 and 2, uncompensated as the one-head backward's); then items of rows
 * (rparts per query head: about FAVOR__ITEMS in all, whole chunks) write dq and
 * their own sums R, rz at their own scale lam into a partial slot; per head the
 * partials are brought to the least lam and added in order; then items of
 * FAVOR__ROWBLK keys write dk and dv from them. Partial slots: width (d_v + 1)
 * floats, lam and (gated, causal) the segment's summed gates (two floats each,
 * a double's hi and lo). */
typedef struct {
    favor__split sp;
    size_t rparts, rrows, pslot; /* row parts of a query head, their rows, floats of a partial */
    size_t rcap;                 /* the most row parts any n gives */
} favor__bsplit;

static int favor__bsplit_plan(const favor_features *f, const favor_tensor *q,
                              const favor_tensor *k, const favor_tensor *v, favor__bsplit *bs)
{
    size_t w = favor__width(f->kernel, f->dim, f->count), hq = favor__nheads(q), n = q->rows;
    size_t a = FAVOR__ALIGN / sizeof(float), want;
    bs->rparts = bs->rrows = bs->pslot = bs->rcap = 0;
    if (!favor__split_plan(favor__nheads(k), k->rows, w, v->cols, &bs->sp)) return 0;
    want = (FAVOR__ITEMS + hq - 1) / hq;
    bs->rcap = want;
    bs->rrows = n / want + (n % want != 0);
    bs->rrows = (bs->rrows + FAVOR__CHUNK - 1) / FAVOR__CHUNK * FAVOR__CHUNK;
    bs->rparts = n / bs->rrows + (n % bs->rrows != 0);
    bs->pslot = (w * (v->cols + 1) + 4 + a - 1) / a * a; /* R, rz, lam, the gates' sum */
    return 1;
}

/* partial sums dst (R, rz: n floats, then lam) += src, at the lesser lam */
static void favor__bwd_sums_merge(float *dst, const float *src, size_t n)
{
    const float *ls = src + n;
    float *ld = dst + n, x;
    if (ls[1] == INFINITY) return; /* src is empty */
    if (ld[1] == INFINITY) {
        memcpy(dst, src, (n + 2) * sizeof(float));
        return;
    }
    x = (ls[0] - ld[0]) + (ls[1] - ld[1]);
    if (x < 0.0f) { /* dst brought down to src's lam */
        favor__scal(dst, favor__s_exp(x), n);
        ld[0] = ls[0];
        ld[1] = ls[1];
        favor__vadd(dst, src, n);
    } else {
        favor__axpy(dst, favor__s_exp(-x), src, n);
    }
}

/* gated: partial dst (R, rz: n floats, then lam, then its segment's summed
 * gates) += src, the later segment's, which dst's segment decays: src's lam
 * rises by minus those gates; both brought to the lesser lam */
static void favor__bwd_sums_merge_gated(float *dst, const float *src, size_t n)
{
    double ls = favor__lam_get(src + n), ld = favor__lam_get(dst + n), x;
    if (ls == INFINITY) return; /* src is empty */
    ls -= (double)dst[n + 2] + dst[n + 3];
    if (ld == INFINITY) {
        memcpy(dst, src, n * sizeof(float));
        favor__lam_set(dst + n, ls);
        return;
    }
    x = ls - ld;
    if (x < 0.0) { /* dst brought down to src's lam */
        favor__scal(dst, favor__s_exp((float)x), n);
        favor__lam_set(dst + n, ls);
        favor__vadd(dst, src, n);
    } else {
        favor__axpy(dst, favor__s_exp((float)-x), src, n);
    }
}

/* The causal linear backward split inside key/value heads (fewer than
 * FAVOR__SPLIT of them and more than one segment of keys), after the state's
 * segment sums and scan: the chunk-parallel scan run both ways, as the loops of
 * the parallel region of favor__linear_bwd_split.
 *   a. each segment's causal rows of every query head, from a private copy of
 *      the state of the keys before it, as the one-head forward pass runs them
 *      (dq, the stash), and their own sums R, rz at their own scale lam, into
 *      the segment's partial slot;
 *   b. per head, a suffix scan: partial p += partial p + 1 (at the lesser lam),
 *      so partial p holds the sums of the rows of segments p and later;
 *   c. each segment's keys, last chunk first as the one-head reverse pass, from
 *      a private copy of partial p + 1 (none for the last segment); keys every
 *      row sees (n_k > n) from partial 0.
 * Items touch disjoint rows of dq, dk, dv and of the stash (shared per head).
 * Gated: per head its map (favor__head_map); a segment's own sums are as key
 * (its first causal key - 1) sees them, with its summed gates in its partial,
 * by which step b decays the later partial; keys every row sees take partial
 * 0 decayed by the gates from their segment's end to the first causal key;
 * with dgates, step a zeroes the segment's rows of dL/dg, a and c add X and
 * -Y (4.12), and d takes the suffix sums of each head. */
static void favor__bwd_split_causal(const favor__map *mp0, const favor_tensor *q,
                                    const favor_tensor *k, const favor_tensor *v,
                                    const favor_tensor *dout, const favor_tensor *dq,
                                    const favor_tensor *dk, const favor_tensor *dv,
                                    const favor_tensor *dgv, const favor__shape *sh,
                                    const favor__bsplit *bs, favor__bwd *b, float *stage,
                                    size_t stg, float *slots, float *parts, float *stash)
{
    const favor__split *sp = &bs->sp;
    size_t w = mp0->width, ncol = sh->dv, grp = sh->hq / sh->hkv, n = w * (ncol + 1);
    size_t P = sp->parts, per = P * sp->slot;
    int gated = favor__gated(mp0);
    long it;
    favor__lbv l;
    favor__map hm;
    const favor__map *mp = &hm;
    favor_tensor g1;
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
    for (it = 0; it < (long)(sh->hkv * P); ++it) { /* a: rows, dq, own sums */
        size_t g = (size_t)it / P, p = (size_t)it % P, j0, j1, ks, t;
        float *pt = parts + (size_t)it * bs->pslot, c = -INFINITY;
        favor__bwd bb = *b;
        favor__stash sto;
        favor__head_map(&hm, &g1, mp0, g);
        favor__seg_keys(sp, sh, p, &j0, &j1, &ks);
        if (dgv) { /* this segment's rows of dL/dg, zeroed */
            bb.dg = (float *)favor__at(dgv, g, 0);
            bb.lddg = dgv->row_stride;
            for (t = j0; t < j1; ++t) bb.dg[t * bb.lddg] = 0.0f;
        }
        favor__lbv_make(&l, q, k, v, dout, dq, dk, dv, grp, g, 0, stage + g * stg);
        favor__stash_make(&sto, &l.x, sh, 0, stash ? stash + g * sh->n * 3 * grp : NULL);
        if (p) {
            const float *src = slots + g * per + (p - 1) * sp->slot;
            memcpy(bb.S, src, n * sizeof(float)); /* S, z */
            c = src[2 * n];
        } else {
            memset(bb.S, 0, n * sizeof(float));
        }
        bb.R = pt;
        bb.rz = pt + w * ncol;
        memset(pt, 0, n * sizeof(float));
        pt[n] = 0.0f;
        pt[n + 1] = INFINITY;
        favor__bwd_causal_head(mp, &l.x, sh, 0, &bb, &c, j0, ks);
        favor__bwd_causal_fwd(mp, &l.x, sh, 0, &bb, &sto, &c, ks, j1 - ks, pt + n);
        pt[n + 2] = (float)bb.gseg; /* the gates of keys [ks, j1) */
        pt[n + 3] = (float)(bb.gseg - (double)pt[n + 2]);
    }
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
    for (it = 0; it < (long)sh->hkv; ++it) { /* b: suffix sums */
        float *p0 = parts + (size_t)it * P * bs->pslot;
        size_t p;
        for (p = P - 1; p > 0; --p) {
            if (gated)
                favor__bwd_sums_merge_gated(p0 + (p - 1) * bs->pslot, p0 + p * bs->pslot, n);
            else
                favor__bwd_sums_merge(p0 + (p - 1) * bs->pslot, p0 + p * bs->pslot, n);
        }
    }
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
    for (it = 0; it < (long)(sh->hkv * P); ++it) { /* c: keys, dk and dv */
        size_t g = (size_t)it / P, p = (size_t)it % P, j0, j1, ks;
        const float *p0 = parts + g * P * bs->pslot;
        float lam[2] = { 0.0f, INFINITY };
        favor__stash sto;
        favor__head_map(&hm, &g1, mp0, g);
        favor__seg_keys(sp, sh, p, &j0, &j1, &ks);
        b->dg = dgv ? (float *)favor__at(dgv, g, 0) : NULL;
        b->lddg = dgv ? dgv->row_stride : 0;
        favor__lbv_make(&l, q, k, v, dout, dq, dk, dv, grp, g, 0, stage + g * stg);
        favor__stash_make(&sto, &l.x, sh, 0, stash ? stash + g * sh->n * 3 * grp : NULL);
        if (p + 1 < P) {
            memcpy(b->R, p0 + (p + 1) * bs->pslot, n * sizeof(float)); /* R, rz */
            lam[0] = p0[(p + 1) * bs->pslot + n];
            lam[1] = p0[(p + 1) * bs->pslot + n + 1];
        } else {
            memset(b->R, 0, n * sizeof(float));
        }
        favor__bwd_causal_back(mp, &l.x, sh, 0, b, &sto, lam, ks, j1 - ks);
        if (j0 < ks) { /* keys every row sees: the sums of every row */
            size_t pre, skip, j, nr;
            memcpy(b->R, p0, n * sizeof(float));
            lam[0] = p0[n];
            lam[1] = p0[n + 1];
            favor__causal_edges(sh, &pre, &skip);
            if (gated && ks < pre && lam[1] < INFINITY) { /* seen from ks - 1, not pre - 1 */
                double sum = 0.0;
                for (j = ks; j < pre; j += nr) {
                    size_t i;
                    nr = pre - j < FAVOR__CHUNK ? pre - j : FAVOR__CHUNK;
                    favor__log_gates(mp, 0, j, nr, b->lg);
                    for (i = 0; i < nr; ++i) sum += b->lg[i];
                }
                favor__lam_set(lam, favor__lam_get(lam) - sum);
            }
            favor__bwd_causal_pre(mp, &l.x, sh, 0, b, lam, j0, ks);
        }
    }
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
    for (it = 0; it < (long)(dgv ? sh->hkv : 0); ++it) /* d: dL/dg's suffix sums */
        favor__dg_finish((float *)favor__at(dgv, (size_t)it, 0), dgv->row_stride, sh->nk);
    b->dg = NULL;
}

static void favor__linear_bwd_split(const favor__map *mp, const favor_tensor *q,
                                    const favor_tensor *k, const favor_tensor *v,
                                    const favor_tensor *dout, const favor_tensor *dq,
                                    const favor_tensor *dk, const favor_tensor *dv,
                                    const favor_tensor *dgv, const favor__shape *sh,
                                    const favor__bsplit *bs,
                                    int causal, float *ws, size_t slice, float *stage,
                                    size_t stg, float *slots, float *parts, float *stash,
                                    size_t nt)
{
    const favor__split *sp = &bs->sp;
    size_t w = mp->width, ncol = sh->dv, grp = sh->hq / sh->hkv, n = w * (ncol + 1);
    size_t per = sp->parts * sp->slot, kblocks = (sh->nk + FAVOR__ROWBLK - 1) / FAVOR__ROWBLK;
    int any16 = q->dtype != FAVOR_F32 || k->dtype != FAVOR_F32 || v->dtype != FAVOR_F32 ||
                dout->dtype != FAVOR_F32 || dq->dtype != FAVOR_F32 ||
                dk->dtype != FAVOR_F32 || dv->dtype != FAVOR_F32;
    long it;
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel num_threads((int)nt)
#endif
    {
        float *mine = ws + FAVOR__TID() * slice;
        favor__lbv l;
        favor__bwd b;
        favor__qgroup qg;
        favor__bwd_carve(&b, mine, w, ncol, grp, 0);
        memset(&qg, 0, sizeof qg);
        if (any16) {
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (it = 0; it < (long)sh->hkv; ++it)
                favor__lbv_make(&l, q, k, v, dout, dq, dk, dv, grp, (size_t)it, 1,
                                stage + (size_t)it * stg);
        }
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (it = 0; it < (long)(sh->hkv * sp->parts); ++it) { /* the state: segment sums */
            size_t g = (size_t)it / sp->parts, p = (size_t)it % sp->parts;
            favor__map hm;
            favor_tensor g1;
            if (causal && p + 1 == sp->parts) continue; /* the last: not needed */
            favor__head_map(&hm, &g1, mp, g);
            favor__lbv_make(&l, q, k, v, dout, dq, dk, dv, grp, g, 0, stage + g * stg);
            qg.k = &l.K;
            qg.v = &l.V;
            favor__split_sums(&hm, sp, sh, slots + g * per + p * sp->slot, p, 0, &qg, &b.cb);
        }
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (it = 0; it < (long)sh->hkv; ++it)
            favor__split_scan(sp, n, slots + (size_t)it * per, mine, causal);
        if (causal) {
            favor__bwd_split_causal(mp, q, k, v, dout, dq, dk, dv, dgv, sh, bs, &b, stage, stg,
                                    slots, parts, stash);
        } else { /* rows: dq, partial sums; per head: the partials at the least lam; keys */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (it = 0; it < (long)(sh->hq * bs->rparts); ++it) { /* rows: dq, partial sums */
                size_t h = (size_t)it / bs->rparts, rp = (size_t)it % bs->rparts, g = h / grp;
                size_t i0 = rp * bs->rrows, i1 = sh->n - i0 < bs->rrows ? sh->n : i0 + bs->rrows;
                float *last = slots + g * per + (sp->parts - 1) * sp->slot;
                float *pt = parts + (size_t)it * bs->pslot;
                favor__bwd bb = b;
                favor__lbv_make(&l, q, k, v, dout, dq, dk, dv, grp, g, 0, stage + g * stg);
                bb.S = last;
                bb.z = last + w * ncol;
                bb.c = last[2 * n];
                bb.R = pt;
                bb.rz = pt + w * ncol;
                memset(pt, 0, n * sizeof(float));
                pt[n] = 0.0f;
                pt[n + 1] = INFINITY;
                favor__bwd_full_rows(mp, &l.x, sh, 0, h % grp, i0, i1, &bb, pt + n);
            }
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (it = 0; it < (long)sh->hkv; ++it) { /* per head: the partials at the least lam */
                size_t np = grp * bs->rparts, p;
                float *p0 = parts + (size_t)it * np * bs->pslot, lo[2] = { 0.0f, INFINITY };
                for (p = 0; p < np; ++p) {
                    const float *lp = p0 + p * bs->pslot + n;
                    if (lp[1] < INFINITY &&
                        (lo[1] == INFINITY || (lp[0] - lo[0]) + (lp[1] - lo[1]) < 0.0f)) {
                        lo[0] = lp[0];
                        lo[1] = lp[1];
                    }
                }
                for (p = 0; p < np; ++p) {
                    const float *pp = p0 + p * bs->pslot, *lp = pp + n;
                    float e = lp[1] < INFINITY ? favor__s_exp((lo[0] - lp[0]) + (lo[1] - lp[1])) : 0.0f;
                    if (!p) favor__scal(p0, e, n);
                    else if (e != 0.0f) favor__axpy(p0, e, pp, n);
                }
                p0[n] = lo[0];
                p0[n + 1] = lo[1];
            }
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (it = 0; it < (long)(sh->hkv * kblocks); ++it) { /* keys: dk, dv */
                size_t g = (size_t)it / kblocks, j0 = ((size_t)it % kblocks) * FAVOR__ROWBLK;
                size_t j1 = sh->nk - j0 < FAVOR__ROWBLK ? sh->nk : j0 + FAVOR__ROWBLK;
                float *R = parts + g * grp * bs->rparts * bs->pslot;
                favor__bwd bb = b;
                favor__lbv_make(&l, q, k, v, dout, dq, dk, dv, grp, g, 0, stage + g * stg);
                bb.R = R;
                bb.rz = R + w * ncol;
                favor__bwd_full_keys(mp, &l.x, sh, 0,
                                     slots[g * per + (sp->parts - 1) * sp->slot + 2 * n], R + n,
                                     j0, j1, &bb);
            }
        }
        if (any16) {
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (it = 0; it < (long)sh->hkv; ++it) {
                size_t g = (size_t)it;
                favor__lbv_make(&l, q, k, v, dout, dq, dk, dv, grp, g, 0, stage + g * stg);
                favor__unstage(dq, g * grp, &l.DQ);
                favor__unstage(dk, g, &l.DK);
                favor__unstage(dv, g, &l.DV);
            }
        }
    }
}

/* Floats of a linear backward's workspace on nt threads: nt slices (the
 * kernel's buffers, then, when not split, a head's staging); split (fewer than
 * FAVOR__SPLIT key/value heads; causal: more than one segment): the staging of
 * every head (*stg each) at *stage_at, the key slots at *slots_at, the partials
 * at *parts_at (non-causal: of the row parts; causal: of the segments), and,
 * causal with the stash in the workspace, every head's stash at *stash_at. */
static size_t favor__linear_bwd_plan(const favor_features *f, const favor_tensor *q,
                                     const favor_tensor *k, const favor_tensor *v,
                                     const favor_tensor *dout, const favor_tensor *dq,
                                     const favor_tensor *dk, const favor_tensor *dv, int causal,
                                     int any16, size_t nt, int *split, favor__bsplit *bs,
                                     size_t *slice, size_t *stg, size_t *stage_at,
                                     size_t *slots_at, size_t *parts_at, size_t *stash_at)
{
    size_t all, t, hkv = favor__nheads(k), grp = q->heads / k->heads;
    *split = favor__bsplit_plan(f, q, k, v, bs) && (!causal || bs->sp.parts > 1);
    *stash_at = 0;
    if (!*split)
        return (all = favor__linear_bwd_call_floats(f, q, k, v, dout, dq, dk, dv, causal, any16))
                   ? favor__slices(all, nt, slice)
                   : 0;
    *stg = favor__bwd_stage_floats(q, k, v, NULL, dout, dq, dk, dv, any16);
    if (*stg == SIZE_MAX ||
        !(all = favor__slices(favor__linear_bwd_floats(f, grp, f->dim, v->cols, q->rows, 0), nt,
                              slice)) ||
        !favor__mul_ok(*stg, hkv, &t))
        return 0;
    *stage_at = all;
    if (!favor__add_ok(all, t, &all)) return 0;
    *slots_at = all;
    if (!favor__mul_ok(hkv * bs->sp.cap, bs->sp.slot, &t) || !favor__add_ok(all, t, &all))
        return 0;
    *parts_at = all;
    if (!favor__mul_ok(causal ? hkv * bs->sp.cap : favor__nheads(q) * bs->rcap, bs->pslot, &t) ||
        !favor__add_ok(all, t, &all))
        return 0;
    if (causal && favor__stash_in_ws(grp, f->dim, v->cols)) {
        *stash_at = all;
        if (!favor__mul_ok(hkv * q->rows, 3 * grp, &t) || !favor__add_ok(all, t, &all)) return 0;
    }
    return all <= SIZE_MAX / sizeof(float) ? all : 0;
}

/* The sequence views of a backward call: its q, k, v (sv) and dout, dq, dk, dv
 * (gv: o, q, k, v) */
static void favor__seqv_grads(favor__seqv *sv, favor__seqv *gv, const favor_tensor *q,
                              const favor_tensor *k, const favor_tensor *v,
                              const favor_tensor *dout, const favor_tensor *dq,
                              const favor_tensor *dk, const favor_tensor *dv,
                              const favor_options *opts, size_t s)
{
    favor__seqv_make(sv, q, k, v, dout, opts, s);
    gv->q0 = sv->q0;
    gv->k0 = sv->k0;
    gv->q = favor__rows(dq, sv->q0, sv->q.rows);
    gv->k = favor__rows(dk, sv->k0, sv->k.rows);
    gv->v = favor__rows(dv, sv->k0, sv->k.rows);
    gv->o = favor__rows(dout, sv->q0, sv->q.rows);
}

/* The floats of a linear backward over its packed sequences: the largest
 * sequence's plan (each runs from an empty state on its rows), 1 when no sequence
 * has both a row and a key, 0 when a plan is too big. The call passes its tensors
 * (any16 0: their types decide); the query passes q, k and v in place of dout and
 * the gradients, with q's 16-bit rule (see WORKSPACE). */
static size_t favor__linear_bwd_floats_all(const favor_features *f, const favor_tensor *q,
                                           const favor_tensor *k, const favor_tensor *v,
                                           const favor_tensor *dout, const favor_tensor *dq,
                                           const favor_tensor *dk, const favor_tensor *dv,
                                           const favor_options *opts, int any16, size_t nt)
{
    size_t seq, fl, most = 1, slice, stg, at[4];
    favor__bsplit bs;
    int split, causal = opts && (opts->flags & FAVOR_CAUSAL);
    for (seq = 0; seq < favor__nseq(opts); ++seq) {
        favor__seqv sv, gv;
        favor__seqv_grads(&sv, &gv, q, k, v, dout, dq, dk, dv, opts, seq);
        if (!sv.q.rows || !sv.k.rows) continue;
        if (!(fl = favor__linear_bwd_plan(f, &sv.q, &sv.k, &sv.v, &gv.o, &gv.q, &gv.k, &gv.v,
                                          causal, any16, nt, &split, &bs, &slice, &stg, &at[0],
                                          &at[1], &at[2], &at[3])))
            return 0;
        if (fl > most) most = fl;
    }
    return most;
}

FAVOR__DEF size_t favor_linear_attention_backward_workspace(const favor_features *f,
                                                           const favor_tensor *q,
                                                           const favor_tensor *k,
                                                           const favor_tensor *v,
                                                           const favor_options *opts)
{
    if (!favor__query_ok(f, 1, q, k, v, opts)) return 0;
    return favor__ws_bytes(favor__linear_bwd_floats_all(f, q, k, v, q, q, k, v, opts,
                                                        favor__any16(q, k, v),
                                                        favor__nthreads(opts)));
}

/* The plan of a linear backward on views q, k, v, dout and gradients (one
 * sequence's): its floats, 0 when too big */
static size_t favor__linear_bwd_call(const favor_features *f, const favor_tensor *q,
                                     const favor_tensor *k, const favor_tensor *v,
                                     const favor_tensor *dout, const favor_tensor *dq,
                                     const favor_tensor *dk, const favor_tensor *dv, int causal,
                                     size_t nt, int *split, favor__bsplit *bs, size_t *slice,
                                     size_t *at)
{
    return favor__linear_bwd_plan(f, q, k, v, dout, dq, dk, dv, causal, 0, nt, split, bs, slice,
                                  &at[0], &at[1], &at[2], &at[3], &at[4]);
}

/* the gradients of key/value head hk, unsplit (favor__linear_bwd_run): the
 * kernels on fp32 views of its rows (favor__lbv_make), in the buffers at mine,
 * the kernels' floats first (kern of them); a: the call's rows and gradients
 * (a->g: dO), dgv: the gates' gradients or NULL */
static void favor__linear_bwd_head(const favor__map *mp, const favor__bwd_args *a,
                                   const favor_tensor *dgv, const favor__shape *sh, int causal,
                                   int in_ws, size_t kern, size_t hk, float *mine)
{
    size_t grp = sh->hq / sh->hkv;
    favor__lbv l;
    favor__bwd b;
    favor__map mh;
    favor_tensor g1;
    favor__lbv_make(&l, a->q, a->k, a->v, a->g, a->dq, a->dk, a->dv, grp, hk, 1, mine + kern);
    favor__head_map(&mh, &g1, mp, hk);
    favor__bwd_carve(&b, mine, mp->width, sh->dv, grp, in_ws);
    if (dgv) { /* zeroed, then the sums of 4.12 */
        size_t t;
        b.dg = (float *)favor__at(dgv, hk, 0);
        b.lddg = dgv->row_stride;
        for (t = 0; t < sh->nk; ++t) b.dg[t * b.lddg] = 0.0f;
    }
    if (causal) favor__linear_bwd_causal(&mh, &l.x, sh, 0, &b);
    else favor__linear_bwd_full(&mh, &l.x, sh, 0, &b);
    if (b.dg) favor__dg_finish(b.dg, b.lddg, sh->nk);
    favor__unstage(a->dq, hk * grp, &l.DQ);
    favor__unstage(a->dk, hk, &l.DK);
    favor__unstage(a->dv, hk, &l.DV);
}

/* One sequence of a linear backward (sh: its shape) on ws */
static void favor__linear_bwd_run(const favor_features *f, const favor__map *mp,
                                  const favor_tensor *q, const favor_tensor *k,
                                  const favor_tensor *v, const favor_tensor *dout,
                                  const favor_tensor *dq, const favor_tensor *dk,
                                  const favor_tensor *dv, const favor_tensor *dgv,
                                  const favor__shape *sh, int causal, size_t nt, float *ws)
{
    size_t slice = 0, at[5], grp = sh->hq / sh->hkv, kern;
    favor__bsplit bs;
    const favor__bwd_args a = { q, k, v, dout, dq, dk, dv };
    int split = 0, in_ws = causal && favor__stash_in_ws(grp, sh->d, sh->dv);
    long g;
    at[0] = at[1] = at[2] = at[3] = at[4] = 0; /* staging, slots, parts, ... stash */
    favor__linear_bwd_call(f, q, k, v, dout, dq, dk, dv, causal, nt, &split, &bs, &slice, at);
    kern = favor__linear_bwd_floats(f, grp, sh->d, sh->dv, sh->n, causal);
    if (split) { /* at: the staging per head, where it, the slots, parts, stash begin */
        favor__linear_bwd_split(mp, q, k, v, dout, dq, dk, dv, dgv, sh, &bs, causal, ws, slice,
                                ws + at[1], at[0], ws + at[2], ws + at[3],
                                at[4] ? ws + at[4] : NULL, nt);
        return;
    }
    FAVOR__PAR_FOR(g, (long)sh->hkv,
                   favor__linear_bwd_head(mp, &a, dgv, sh, causal, in_ws, kern, (size_t)g,
                                          ws + tid_ * slice));
}

FAVOR__DEF favor_status favor_linear_attention_backward(
    const favor_features *f, const favor_tensor *q, const favor_tensor *k, const favor_tensor *v,
    const favor_tensor *dout, const favor_tensor *dq, const favor_tensor *dk,
    const favor_tensor *dv, const favor_options *opts)
{
    favor__shape sh;
    favor__map mp;
    favor_status st;
    float *ws;
    void *owned;
    int causal;
    size_t floats, nt, seq, h;
    favor__why w = favor__why_of(opts);
    if (!f) return favor__no(&w, FAVOR_E_NULL, "f is NULL");
    if ((st = favor__check_backward(q, k, v, NULL, dout, dq, dk, dv, 0, &sh, &w)) != FAVOR_OK)
        return st;
    if ((st = favor__check_features(f, &w)) != FAVOR_OK) return st;
    if ((st = favor__check_options(opts)) != FAVOR_OK) return st;
    if ((st = favor__check_no_mods(opts, &w)) != FAVOR_OK) return st;
    if ((st = favor__check_gates(opts, f, k, opts && (opts->flags & FAVOR_CAUSAL), 1, &sh, &w)) !=
        FAVOR_OK)
        return st;
    if ((st = favor__check_seqs(opts, q->rows, k->rows, &w)) != FAVOR_OK) return st;
    if ((st = favor__same(&w, "q", "cols", sh.d, "f", f->dim)) != FAVOR_OK) return st;
    if (f->w) {
        int i;
        sh.other[sh.nother++] = favor__range_of(f->w, f->count * f->dim * sizeof(float));
        sh.other[sh.nother++] = favor__range_of(f->wt, f->count * f->dim * sizeof(float));
        for (i = 0; i < 3; ++i)
            if (favor__overlaps_any(&sh, sh.grad[i], 0))
                return favor__no(&w, FAVOR_E_ALIAS, "%s overlaps f's w or wt",
                                 i == 0 ? "dq" : i == 1 ? "dk" : "dv");
        if (opts && opts->dgates && /* dgates: the range before W's */
            (favor__overlap(sh.other[sh.nother - 3], sh.other[sh.nother - 2]) ||
             favor__overlap(sh.other[sh.nother - 3], sh.other[sh.nother - 1])))
            return favor__no(&w, FAVOR_E_ALIAS, "opts.dgates overlaps f's w or wt");
    }
    causal = opts && (opts->flags & FAVOR_CAUSAL);
    nt = favor__nthreads(opts);
    if (!(floats = favor__linear_bwd_floats_all(f, q, k, v, dout, dq, dk, dv, opts, 0, nt)))
        return favor__too_big(opts);
    if ((st = favor__ws_get(opts, floats, &sh, &ws, &owned)) != FAVOR_OK) return st;
    favor__map_make(&mp, f, favor__linear_scale(f, opts));
    favor__map_opts(&mp, opts, k->heads);
    for (seq = 0; seq < favor__nseq(opts); ++seq) { /* each from an empty state */
        favor__seqv sv, gv;
        favor__shape ss = sh;
        favor_tensor gt, dgt;
        favor__seqv_grads(&sv, &gv, q, k, v, dout, dq, dk, dv, opts, seq);
        if (mp.gates) { /* the sequence's rows of the gates and of dgates */
            gt = favor__rows(opts->gates, sv.k0, sv.k.rows);
            mp.gates = &gt;
        }
        if (opts && opts->dgates) dgt = favor__rows(opts->dgates, sv.k0, sv.k.rows);
        if (!sv.q.rows || !sv.k.rows) { /* no row sees a key: zero gradients */
            for (h = 0; h < sh.hq; ++h) favor__zero_rows(&gv.q, h, 0, gv.q.rows);
            for (h = 0; h < sh.hkv; ++h) {
                favor__zero_rows(&gv.k, h, 0, gv.k.rows);
                favor__zero_rows(&gv.v, h, 0, gv.v.rows);
                if (opts && opts->dgates) favor__zero_rows(&dgt, h, 0, dgt.rows);
            }
            continue;
        }
        ss.n = sv.q.rows;
        ss.nk = sv.k.rows;
        favor__linear_bwd_run(f, &mp, &sv.q, &sv.k, &sv.v, &gv.o, &gv.q, &gv.k, &gv.v,
                              opts && opts->dgates ? &dgt : NULL, &ss, causal, nt, ws);
    }
    favor__ws_put(owned);
    return FAVOR_OK;
}

#if FAVOR__DISPATCHING
/* this pass's table for 4.0's dispatcher */
#define FAVOR__DT_ENTRY(ret, name, params, args) name,
static const struct favor__dispatch favor__dtable = {
    FAVOR__API_LIST(FAVOR__DT_ENTRY, FAVOR__DT_ENTRY)
};
#else
FAVOR_API favor_status favor_set_backend(const char *name)
{
    return !name || strcmp(name, favor_backend()) == 0 ? FAVOR_OK : FAVOR_E_ARG;
}
#endif
#undef FAVOR__PART
#endif /* FAVOR__PART == 2: the kernel section */

#if defined(FAVOR__PART) && FAVOR__PART == 4
/* 4.0 continued: the dispatcher. The CPU's support for a target is cpuid's
 * feature bits and, for the registers' state, the OS's XCR0 (xgetbv). */
static unsigned favor__cpu_targets(void) /* bit 0 scalar, 1 avx2, 2 avx512 */
{
    unsigned a, b, c, d, lo, hi, r = 1;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return r;
    /* FMA (ECX 12), OSXSAVE (27), AVX (28), F16C (29) */
    if ((c & 0x38001000u) != 0x38001000u) return r;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if ((lo & 0x6u) != 0x6u || __get_cpuid_max(0, 0) < 7) return r; /* XMM, YMM state */
    __cpuid_count(7, 0, a, b, c, d);
    if (b & (1u << 5)) r |= 2; /* AVX2 */
    /* AVX-512 F (EBX 16), DQ (17), BW (30), VL (31), and the opmask and ZMM state */
    if ((r & 2) && (b & 0xc0030000u) == 0xc0030000u && (lo & 0xe6u) == 0xe6u) r |= 4;
    return r;
}

static const struct favor__dispatch *const favor__dtables[3] = {
    &favor__dtable_scalar, &favor__dtable_avx2, &favor__dtable_avx512};

/* The library's only static state: the chosen table, NULL until the first
 * call. Choosing is idempotent (every thread that races to it stores the same
 * pointer), so a release store and acquire loads are all it needs. */
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__STDC_NO_ATOMICS__) && \
    !defined(__cplusplus)
#include <stdatomic.h>
static _Atomic(const struct favor__dispatch *) favor__dchosen;
#define favor__dload() atomic_load_explicit(&favor__dchosen, memory_order_acquire)
#define favor__dstore(t) atomic_store_explicit(&favor__dchosen, (t), memory_order_release)
#else
static const struct favor__dispatch *favor__dchosen;
#define favor__dload() __atomic_load_n(&favor__dchosen, __ATOMIC_ACQUIRE)
#define favor__dstore(t) __atomic_store_n(&favor__dchosen, (t), __ATOMIC_RELEASE)
#endif

static const struct favor__dispatch *favor__dbest(void)
{
    unsigned m = favor__cpu_targets();
    const struct favor__dispatch *t = favor__dtables[m & 4 ? 2 : m & 2 ? 1 : 0];
    favor__dstore(t);
    return t;
}

static inline const struct favor__dispatch *favor__dget(void)
{
    const struct favor__dispatch *t = favor__dload();
    return t ? t : favor__dbest();
}

FAVOR_API favor_status favor_set_backend(const char *name)
{
    unsigned i, m;
    if (!name) {
        favor__dbest();
        return FAVOR_OK;
    }
    m = favor__cpu_targets();
    for (i = 0; i < 3; ++i) /* each target's own favor_backend() names it */
        if (strcmp(name, favor__dtables[i]->m_favor_backend()) == 0) {
            if (!(m >> i & 1u)) return FAVOR_E_ARG; /* the CPU (or the OS) lacks it */
            favor__dstore(favor__dtables[i]);
            return FAVOR_OK;
        }
    return FAVOR_E_ARG;
}

#define FAVOR__DT_WRAP(ret, name, params, args)                                        \
    FAVOR_API ret name params { return favor__dget()->m_##name args; }
#define FAVOR__DT_WRAPV(ret, name, params, args)                                       \
    FAVOR_API ret name params { favor__dget()->m_##name args; }
FAVOR__API_LIST(FAVOR__DT_WRAP, FAVOR__DT_WRAPV)
#undef FAVOR__PART
#endif /* FAVOR__PART == 4 */

/* FAVOR__PART 1, 3 and 5 of 4.0, written by tests/dispatch_names.py from the
 * kernel section: run it after adding a function there. */
/* BEGIN GENERATED NAMES */
#if defined(FAVOR__PART) && FAVOR__PART == 1
#define FAVOR__API_LIST(X, XV) \
    X(const char *, favor_status_string, (favor_status status), (status)) \
    X(const char *, favor_backend, (void), ()) \
    X(favor_tensor, favor_tensor_packed, (float *data, size_t heads, size_t rows, size_t cols), (data, heads, rows, cols)) \
    X(favor_tensor, favor_tensor_packed_as, (favor_dtype dtype, void *data, size_t heads, size_t rows, size_t cols), (dtype, data, heads, rows, cols)) \
    X(favor_tensor, favor_tensor_batched, (favor_dtype dtype, void *data, size_t batch, size_t heads, size_t rows, size_t cols), (dtype, data, batch, heads, rows, cols)) \
    X(size_t, favor_dtype_size, (favor_dtype dtype), (dtype)) \
    X(favor_options, favor_default_options, (void), ()) \
    X(size_t, favor_features_floats, (favor_kernel kernel, size_t dim, size_t count), (kernel, dim, count)) \
    X(favor_status, favor_features_init, (favor_features *f, favor_kernel kernel, size_t dim, size_t count, unsigned flags, unsigned long long seed, float *storage), (f, kernel, dim, count, flags, seed, storage)) \
    X(favor_status, favor_features_redraw, (favor_features *f, unsigned long long seed), (f, seed)) \
    X(size_t, favor_features_width, (const favor_features *f), (f)) \
    X(favor_status, favor_feature_map, (const favor_features *f, const favor_tensor *x, const favor_tensor *phi, favor_role role), (f, x, phi, role)) \
    X(favor_status, favor_softmax_attention, (const favor_tensor *q, const favor_tensor *k, const favor_tensor *v, const favor_tensor *out, const favor_options *opts), (q, k, v, out, opts)) \
    X(size_t, favor_softmax_attention_workspace, (const favor_tensor *q, const favor_tensor *k, const favor_tensor *v, const favor_options *opts), (q, k, v, opts)) \
    X(favor_status, favor_softmax_attention_backward, (const favor_tensor *q, const favor_tensor *k, const favor_tensor *v, const favor_tensor *out, const favor_tensor *dout, const favor_tensor *dq, const favor_tensor *dk, const favor_tensor *dv, const favor_options *opts), (q, k, v, out, dout, dq, dk, dv, opts)) \
    X(size_t, favor_softmax_attention_backward_workspace, (const favor_tensor *q, const favor_tensor *k, const favor_tensor *v, const favor_options *opts), (q, k, v, opts)) \
    X(favor_status, favor_attention_merge, (const favor_tensor *out_a, const float *lse_a, const favor_tensor *out_b, const float *lse_b, const favor_tensor *out, float *lse, const favor_options *opts), (out_a, lse_a, out_b, lse_b, out, lse, opts)) \
    X(favor_status, favor_linear_attention, (const favor_features *f, const favor_tensor *q, const favor_tensor *k, const favor_tensor *v, const favor_tensor *out, const favor_options *opts), (f, q, k, v, out, opts)) \
    X(size_t, favor_linear_attention_workspace, (const favor_features *f, const favor_tensor *q, const favor_tensor *k, const favor_tensor *v, const favor_options *opts), (f, q, k, v, opts)) \
    X(favor_status, favor_linear_attention_backward, (const favor_features *f, const favor_tensor *q, const favor_tensor *k, const favor_tensor *v, const favor_tensor *dout, const favor_tensor *dq, const favor_tensor *dk, const favor_tensor *dv, const favor_options *opts), (f, q, k, v, dout, dq, dk, dv, opts)) \
    X(size_t, favor_linear_attention_backward_workspace, (const favor_features *f, const favor_tensor *q, const favor_tensor *k, const favor_tensor *v, const favor_options *opts), (f, q, k, v, opts)) \
    X(size_t, favor_state_floats, (const favor_features *f, size_t heads, size_t dv), (f, heads, dv)) \
    X(favor_status, favor_state_init, (favor_state *st, const favor_features *f, size_t heads, size_t dv, float *storage), (st, f, heads, dv, storage)) \
    XV(void, favor_state_reset, (favor_state *st), (st)) \
    X(favor_status, favor_linear_extend, (const favor_features *f, favor_state *st, const favor_tensor *q, const favor_tensor *k, const favor_tensor *v, const favor_tensor *out, const favor_options *opts), (f, st, q, k, v, out, opts)) \
    X(size_t, favor_linear_extend_workspace, (const favor_features *f, const favor_state *st, const favor_tensor *q, const favor_tensor *k, const favor_tensor *v, const favor_options *opts), (f, st, q, k, v, opts)) \
    X(favor_status, favor_linear_step, (const favor_features *f, favor_state *st, const favor_tensor *q, const favor_tensor *k, const favor_tensor *v, const favor_tensor *out), (f, st, q, k, v, out)) \
    X(favor_status, favor_linear_step_ex, (const favor_features *f, favor_state *st, const favor_tensor *q, const favor_tensor *k, const favor_tensor *v, const favor_tensor *out, const favor_options *opts), (f, st, q, k, v, out, opts))
#define favor__add_ok FAVOR__N(favor__add_ok)
#define favor__ahead FAVOR__N(favor__ahead)
#define favor__ahead_rows FAVOR__N(favor__ahead_rows)
#define favor__alibi FAVOR__N(favor__alibi)
#define favor__align FAVOR__N(favor__align)
#define favor__any16 FAVOR__N(favor__any16)
#define favor__at FAVOR__N(favor__at)
#define favor__axpy FAVOR__N(favor__axpy)
#define favor__blk FAVOR__N(favor__blk)
#define favor__blk_make FAVOR__N(favor__blk_make)
#define favor__bsplit FAVOR__N(favor__bsplit)
#define favor__bsplit_plan FAVOR__N(favor__bsplit_plan)
#define favor__bwd FAVOR__N(favor__bwd)
#define favor__bwd_accumulate FAVOR__N(favor__bwd_accumulate)
#define favor__bwd_args FAVOR__N(favor__bwd_args)
#define favor__bwd_carve FAVOR__N(favor__bwd_carve)
#define favor__bwd_causal_back FAVOR__N(favor__bwd_causal_back)
#define favor__bwd_causal_fwd FAVOR__N(favor__bwd_causal_fwd)
#define favor__bwd_causal_head FAVOR__N(favor__bwd_causal_head)
#define favor__bwd_causal_keys FAVOR__N(favor__bwd_causal_keys)
#define favor__bwd_causal_pre FAVOR__N(favor__bwd_causal_pre)
#define favor__bwd_causal_rows FAVOR__N(favor__bwd_causal_rows)
#define favor__bwd_den FAVOR__N(favor__bwd_den)
#define favor__bwd_full_keys FAVOR__N(favor__bwd_full_keys)
#define favor__bwd_full_rows FAVOR__N(favor__bwd_full_rows)
#define favor__bwd_gated_L FAVOR__N(favor__bwd_gated_L)
#define favor__bwd_gated_offsets FAVOR__N(favor__bwd_gated_offsets)
#define favor__bwd_gated_pairs FAVOR__N(favor__bwd_gated_pairs)
#define favor__bwd_keys_finish FAVOR__N(favor__bwd_keys_finish)
#define favor__bwd_keys_from_sums FAVOR__N(favor__bwd_keys_from_sums)
#define favor__bwd_keys_own FAVOR__N(favor__bwd_keys_own)
#define favor__bwd_logden FAVOR__N(favor__bwd_logden)
#define favor__bwd_lower FAVOR__N(favor__bwd_lower)
#define favor__bwd_min FAVOR__N(favor__bwd_min)
#define favor__bwd_more FAVOR__N(favor__bwd_more)
#define favor__bwd_own_gated FAVOR__N(favor__bwd_own_gated)
#define favor__bwd_query_grad FAVOR__N(favor__bwd_query_grad)
#define favor__bwd_split_causal FAVOR__N(favor__bwd_split_causal)
#define favor__bwd_stage_floats FAVOR__N(favor__bwd_stage_floats)
#define favor__bwd_state_times FAVOR__N(favor__bwd_state_times)
#define favor__bwd_sums_merge FAVOR__N(favor__bwd_sums_merge)
#define favor__bwd_sums_merge_gated FAVOR__N(favor__bwd_sums_merge_gated)
#define favor__bwd_weigh FAVOR__N(favor__bwd_weigh)
#define favor__causal_base FAVOR__N(favor__causal_base)
#define favor__causal_edges FAVOR__N(favor__causal_edges)
#define favor__causal_step FAVOR__N(favor__causal_step)
#define favor__check_backward FAVOR__N(favor__check_backward)
#define favor__check_extend FAVOR__N(favor__check_extend)
#define favor__check_features FAVOR__N(favor__check_features)
#define favor__check_gates FAVOR__N(favor__check_gates)
#define favor__check_linear FAVOR__N(favor__check_linear)
#define favor__check_lse FAVOR__N(favor__check_lse)
#define favor__check_mods FAVOR__N(favor__check_mods)
#define favor__check_no_mods FAVOR__N(favor__check_no_mods)
#define favor__check_options FAVOR__N(favor__check_options)
#define favor__check_qkvo FAVOR__N(favor__check_qkvo)
#define favor__check_seqs FAVOR__N(favor__check_seqs)
#define favor__check_shapes FAVOR__N(favor__check_shapes)
#define favor__check_tensor FAVOR__N(favor__check_tensor)
#define favor__chunk FAVOR__N(favor__chunk)
#define favor__chunk_absorb FAVOR__N(favor__chunk_absorb)
#define favor__chunk_carve FAVOR__N(favor__chunk_carve)
#define favor__chunk_e FAVOR__N(favor__chunk_e)
#define favor__chunk_factors FAVOR__N(favor__chunk_factors)
#define favor__chunk_finish FAVOR__N(favor__chunk_finish)
#define favor__chunk_floats FAVOR__N(favor__chunk_floats)
#define favor__chunk_keys FAVOR__N(favor__chunk_keys)
#define favor__chunk_rows FAVOR__N(favor__chunk_rows)
#define favor__chunk_scores FAVOR__N(favor__chunk_scores)
#define favor__cols FAVOR__N(favor__cols)
#define favor__cols_exp_sum FAVOR__N(favor__cols_exp_sum)
#define favor__cols_in FAVOR__N(favor__cols_in)
#define favor__cols_max FAVOR__N(favor__cols_max)
#define favor__cols_out FAVOR__N(favor__cols_out)
#define favor__cursor FAVOR__N(favor__cursor)
#define favor__cursor_start FAVOR__N(favor__cursor_start)
#define favor__dec FAVOR__N(favor__dec)
#define favor__dec_lanes FAVOR__N(favor__dec_lanes)
#define favor__dec_lanes_room FAVOR__N(favor__dec_lanes_room)
#define favor__decode_block FAVOR__N(favor__decode_block)
#define favor__decode_floats FAVOR__N(favor__decode_floats)
#define favor__decode_items FAVOR__N(favor__decode_items)
#define favor__decode_lanes FAVOR__N(favor__decode_lanes)
#define favor__decode_mask FAVOR__N(favor__decode_mask)
#define favor__decode_merge FAVOR__N(favor__decode_merge)
#define favor__decode_merges FAVOR__N(favor__decode_merges)
#define favor__decode_plan FAVOR__N(favor__decode_plan)
#define favor__decode_pv FAVOR__N(favor__decode_pv)
#define favor__den_eff FAVOR__N(favor__den_eff)
#define favor__dg_finish FAVOR__N(favor__dg_finish)
#define favor__divide FAVOR__N(favor__divide)
#define favor__divs FAVOR__N(favor__divs)
#define favor__dot FAVOR__N(favor__dot)
#define favor__dot_bf16 FAVOR__N(favor__dot_bf16)
#define favor__dot_f16 FAVOR__N(favor__dot_f16)
#define favor__dots FAVOR__N(favor__dots)
#define favor__dots4 FAVOR__N(favor__dots4)
#define favor__dots4_as FAVOR__N(favor__dots4_as)
#define favor__dots4_bf16 FAVOR__N(favor__dots4_bf16)
#define favor__dots4_f16 FAVOR__N(favor__dots4_f16)
#define favor__dots_as FAVOR__N(favor__dots_as)
#define favor__dots_bf16 FAVOR__N(favor__dots_bf16)
#define favor__dots_f16 FAVOR__N(favor__dots_f16)
#define favor__dots_side FAVOR__N(favor__dots_side)
#define favor__draw FAVOR__N(favor__draw)
#define favor__dsink_floats FAVOR__N(favor__dsink_floats)
#define favor__dsoftmax FAVOR__N(favor__dsoftmax)
#define favor__dtable FAVOR__N(favor__dtable)
#define favor__dtanh FAVOR__N(favor__dtanh)
#define favor__elu1_array FAVOR__N(favor__elu1_array)
#define favor__elu1_grad FAVOR__N(favor__elu1_grad)
#define favor__exp_add FAVOR__N(favor__exp_add)
#define favor__exp_sub FAVOR__N(favor__exp_sub)
#define favor__extend_head FAVOR__N(favor__extend_head)
#define favor__extend_item FAVOR__N(favor__extend_item)
#define favor__extend_run FAVOR__N(favor__extend_run)
#define favor__extend_scan FAVOR__N(favor__extend_scan)
#define favor__extend_split FAVOR__N(favor__extend_split)
#define favor__feature_head FAVOR__N(favor__feature_head)
#define favor__features_fill FAVOR__N(favor__features_fill)
#define favor__first FAVOR__N(favor__first)
#define favor__fixed FAVOR__N(favor__fixed)
#define favor__gated FAVOR__N(favor__gated)
#define favor__gemm FAVOR__N(favor__gemm)
#define favor__gemm_lower FAVOR__N(favor__gemm_lower)
#define favor__gemm_stair FAVOR__N(favor__gemm_stair)
#define favor__gemm_tile FAVOR__N(favor__gemm_tile)
#define favor__gemm_tri FAVOR__N(favor__gemm_tri)
#define favor__head_map FAVOR__N(favor__head_map)
#define favor__in FAVOR__N(favor__in)
#define favor__input_range FAVOR__N(favor__input_range)
#define favor__io_floats FAVOR__N(favor__io_floats)
#define favor__items FAVOR__N(favor__items)
#define favor__items_run FAVOR__N(favor__items_run)
#define favor__kahan_add FAVOR__N(favor__kahan_add)
#define favor__kahan_add_sc FAVOR__N(favor__kahan_add_sc)
#define favor__kahan_axpy FAVOR__N(favor__kahan_axpy)
#define favor__kernel_ok FAVOR__N(favor__kernel_ok)
#define favor__key_shares FAVOR__N(favor__key_shares)
#define favor__keys FAVOR__N(favor__keys)
#define favor__lam_get FAVOR__N(favor__lam_get)
#define favor__lam_set FAVOR__N(favor__lam_set)
#define favor__lbv FAVOR__N(favor__lbv)
#define favor__lbv_make FAVOR__N(favor__lbv_make)
#define favor__lin_absorb FAVOR__N(favor__lin_absorb)
#define favor__lin_absorb_rows FAVOR__N(favor__lin_absorb_rows)
#define favor__lin_carve FAVOR__N(favor__lin_carve)
#define favor__lin_causal_run FAVOR__N(favor__lin_causal_run)
#define favor__lin_output FAVOR__N(favor__lin_output)
#define favor__lin_output_rows FAVOR__N(favor__lin_output_rows)
#define favor__linear_bwd_call FAVOR__N(favor__linear_bwd_call)
#define favor__linear_bwd_call_floats FAVOR__N(favor__linear_bwd_call_floats)
#define favor__linear_bwd_causal FAVOR__N(favor__linear_bwd_causal)
#define favor__linear_bwd_floats FAVOR__N(favor__linear_bwd_floats)
#define favor__linear_bwd_floats_all FAVOR__N(favor__linear_bwd_floats_all)
#define favor__linear_bwd_full FAVOR__N(favor__linear_bwd_full)
#define favor__linear_bwd_head FAVOR__N(favor__linear_bwd_head)
#define favor__linear_bwd_plan FAVOR__N(favor__linear_bwd_plan)
#define favor__linear_bwd_run FAVOR__N(favor__linear_bwd_run)
#define favor__linear_bwd_split FAVOR__N(favor__linear_bwd_split)
#define favor__linear_call_floats FAVOR__N(favor__linear_call_floats)
#define favor__linear_floats FAVOR__N(favor__linear_floats)
#define favor__linear_floats_all FAVOR__N(favor__linear_floats_all)
#define favor__linear_fwd_floats FAVOR__N(favor__linear_fwd_floats)
#define favor__linear_io_floats FAVOR__N(favor__linear_io_floats)
#define favor__linear_kvhead FAVOR__N(favor__linear_kvhead)
#define favor__linear_scale FAVOR__N(favor__linear_scale)
#define favor__linear_split FAVOR__N(favor__linear_split)
#define favor__linear_split_item FAVOR__N(favor__linear_split_item)
#define favor__linear_split_run FAVOR__N(favor__linear_split_run)
#define favor__log_gates FAVOR__N(favor__log_gates)
#define favor__lpass FAVOR__N(favor__lpass)
#define favor__map FAVOR__N(favor__map)
#define favor__map_floats FAVOR__N(favor__map_floats)
#define favor__map_make FAVOR__N(favor__map_make)
#define favor__map_opts FAVOR__N(favor__map_opts)
#define favor__mask_ahead FAVOR__N(favor__mask_ahead)
#define favor__mask_any FAVOR__N(favor__mask_any)
#define favor__mask_head FAVOR__N(favor__mask_head)
#define favor__mask_map FAVOR__N(favor__mask_map)
#define favor__mask_maps FAVOR__N(favor__mask_maps)
#define favor__mask_rows FAVOR__N(favor__mask_rows)
#define favor__mask_span FAVOR__N(favor__mask_span)
#define favor__mask_tile FAVOR__N(favor__mask_tile)
#define favor__maxval FAVOR__N(favor__maxval)
#define favor__merge FAVOR__N(favor__merge)
#define favor__merge_alias FAVOR__N(favor__merge_alias)
#define favor__merge_row FAVOR__N(favor__merge_row)
#define favor__mix64 FAVOR__N(favor__mix64)
#define favor__mods FAVOR__N(favor__mods)
#define favor__mods_of FAVOR__N(favor__mods_of)
#define favor__mul_ok FAVOR__N(favor__mul_ok)
#define favor__mul_sub FAVOR__N(favor__mul_sub)
#define favor__narrow_ FAVOR__N(favor__narrow_)
#define favor__narrow_bf16 FAVOR__N(favor__narrow_bf16)
#define favor__narrow_f16 FAVOR__N(favor__narrow_f16)
#define favor__nbatch FAVOR__N(favor__nbatch)
#define favor__nheads FAVOR__N(favor__nheads)
#define favor__npend FAVOR__N(favor__npend)
#define favor__npend_ok FAVOR__N(favor__npend_ok)
#define favor__nsep FAVOR__N(favor__nsep)
#define favor__nseq FAVOR__N(favor__nseq)
#define favor__nthreads FAVOR__N(favor__nthreads)
#define favor__online_max FAVOR__N(favor__online_max)
#define favor__out FAVOR__N(favor__out)
#define favor__out_done FAVOR__N(favor__out_done)
#define favor__overlap FAVOR__N(favor__overlap)
#define favor__overlaps_any FAVOR__N(favor__overlaps_any)
#define favor__pend_chunk FAVOR__N(favor__pend_chunk)
#define favor__pend_fold FAVOR__N(favor__pend_fold)
#define favor__pend_gates FAVOR__N(favor__pend_gates)
#define favor__phi_backward FAVOR__N(favor__phi_backward)
#define favor__phi_finish FAVOR__N(favor__phi_finish)
#define favor__phi_raw FAVOR__N(favor__phi_raw)
#define favor__poly2_grad FAVOR__N(favor__poly2_grad)
#define favor__poly2_row FAVOR__N(favor__poly2_row)
#define favor__prefetch FAVOR__N(favor__prefetch)
#define favor__prefetch_row FAVOR__N(favor__prefetch_row)
#define favor__prefetch_rows FAVOR__N(favor__prefetch_rows)
#define favor__pv_key FAVOR__N(favor__pv_key)
#define favor__pv_key_as FAVOR__N(favor__pv_key_as)
#define favor__pv_key_bf16 FAVOR__N(favor__pv_key_bf16)
#define favor__pv_key_call FAVOR__N(favor__pv_key_call)
#define favor__pv_key_f16 FAVOR__N(favor__pv_key_f16)
#define favor__pvrow FAVOR__N(favor__pvrow)
#define favor__pvrow_make FAVOR__N(favor__pvrow_make)
#define favor__qgroup FAVOR__N(favor__qgroup)
#define favor__qgroup_carve FAVOR__N(favor__qgroup_carve)
#define favor__query_ok FAVOR__N(favor__query_ok)
#define favor__range FAVOR__N(favor__range)
#define favor__range_of FAVOR__N(favor__range_of)
#define favor__right FAVOR__N(favor__right)
#define favor__rng FAVOR__N(favor__rng)
#define favor__rng_init FAVOR__N(favor__rng_init)
#define favor__rng_normal FAVOR__N(favor__rng_normal)
#define favor__rng_sym FAVOR__N(favor__rng_sym)
#define favor__row_end FAVOR__N(favor__row_end)
#define favor__rows FAVOR__N(favor__rows)
#define favor__rows1_4 FAVOR__N(favor__rows1_4)
#define favor__rows1_4_bf16 FAVOR__N(favor__rows1_4_bf16)
#define favor__rows1_4_f16 FAVOR__N(favor__rows1_4_f16)
#define favor__rows1_8 FAVOR__N(favor__rows1_8)
#define favor__rows1_8_bf16 FAVOR__N(favor__rows1_8_bf16)
#define favor__rows1_8_f16 FAVOR__N(favor__rows1_8_f16)
#define favor__rows2_4 FAVOR__N(favor__rows2_4)
#define favor__rows2_4_bf16 FAVOR__N(favor__rows2_4_bf16)
#define favor__rows2_4_f16 FAVOR__N(favor__rows2_4_f16)
#define favor__rows2_8 FAVOR__N(favor__rows2_8)
#define favor__rows2_8_bf16 FAVOR__N(favor__rows2_8_bf16)
#define favor__rows2_8_f16 FAVOR__N(favor__rows2_8_f16)
#define favor__rows4_4 FAVOR__N(favor__rows4_4)
#define favor__rows4_4_bf16 FAVOR__N(favor__rows4_4_bf16)
#define favor__rows4_4_f16 FAVOR__N(favor__rows4_4_f16)
#define favor__rows4_8 FAVOR__N(favor__rows4_8)
#define favor__rows4_8_bf16 FAVOR__N(favor__rows4_8_bf16)
#define favor__rows4_8_f16 FAVOR__N(favor__rows4_8_f16)
#define favor__rows_as FAVOR__N(favor__rows_as)
#define favor__rows_var FAVOR__N(favor__rows_var)
#define favor__rowvar FAVOR__N(favor__rowvar)
#define favor__s_ FAVOR__N(favor__s_)
#define favor__s_add FAVOR__N(favor__s_add)
#define favor__s_asfloat FAVOR__N(favor__s_asfloat)
#define favor__s_asint FAVOR__N(favor__s_asint)
#define favor__s_div FAVOR__N(favor__s_div)
#define favor__s_elu1 FAVOR__N(favor__s_elu1)
#define favor__s_exp FAVOR__N(favor__s_exp)
#define favor__s_exp_sub FAVOR__N(favor__s_exp_sub)
#define favor__s_expneg FAVOR__N(favor__s_expneg)
#define favor__s_fma FAVOR__N(favor__s_fma)
#define favor__s_from_ FAVOR__N(favor__s_from_)
#define favor__s_from_bf16 FAVOR__N(favor__s_from_bf16)
#define favor__s_from_f16 FAVOR__N(favor__s_from_f16)
#define favor__s_hmax FAVOR__N(favor__s_hmax)
#define favor__s_hsum FAVOR__N(favor__s_hsum)
#define favor__s_iadd FAVOR__N(favor__s_iadd)
#define favor__s_iand FAVOR__N(favor__s_iand)
#define favor__s_ior FAVOR__N(favor__s_ior)
#define favor__s_iset1 FAVOR__N(favor__s_iset1)
#define favor__s_isub FAVOR__N(favor__s_isub)
#define favor__s_load FAVOR__N(favor__s_load)
#define favor__s_max FAVOR__N(favor__s_max)
#define favor__s_min FAVOR__N(favor__s_min)
#define favor__s_mul FAVOR__N(favor__s_mul)
#define favor__s_pos_select FAVOR__N(favor__s_pos_select)
#define favor__s_set1 FAVOR__N(favor__s_set1)
#define favor__s_store FAVOR__N(favor__s_store)
#define favor__s_sub FAVOR__N(favor__s_sub)
#define favor__s_tanh FAVOR__N(favor__s_tanh)
#define favor__s_tanh_poly FAVOR__N(favor__s_tanh_poly)
#define favor__s_tanh_small FAVOR__N(favor__s_tanh_small)
#define favor__s_to_ FAVOR__N(favor__s_to_)
#define favor__s_to_bf16 FAVOR__N(favor__s_to_bf16)
#define favor__s_to_f16 FAVOR__N(favor__s_to_f16)
#define favor__same FAVOR__N(favor__same)
#define favor__same_keys FAVOR__N(favor__same_keys)
#define favor__same_view FAVOR__N(favor__same_view)
#define favor__sbp FAVOR__N(favor__sbp)
#define favor__sbv FAVOR__N(favor__sbv)
#define favor__sbv_dq FAVOR__N(favor__sbv_dq)
#define favor__sbv_keys FAVOR__N(favor__sbv_keys)
#define favor__sbv_make FAVOR__N(favor__sbv_make)
#define favor__sbv_rows FAVOR__N(favor__sbv_rows)
#define favor__sbv_zero_keys FAVOR__N(favor__sbv_zero_keys)
#define favor__scal FAVOR__N(favor__scal)
#define favor__scal_to FAVOR__N(favor__scal_to)
#define favor__seg_keys FAVOR__N(favor__seg_keys)
#define favor__seq FAVOR__N(favor__seq)
#define favor__seq_items FAVOR__N(favor__seq_items)
#define favor__seqv FAVOR__N(favor__seqv)
#define favor__seqv_grads FAVOR__N(favor__seqv_grads)
#define favor__seqv_make FAVOR__N(favor__seqv_make)
#define favor__shape FAVOR__N(favor__shape)
#define favor__sink FAVOR__N(favor__sink)
#define favor__slices FAVOR__N(favor__slices)
#define favor__slope FAVOR__N(favor__slope)
#define favor__slot_load FAVOR__N(favor__slot_load)
#define favor__sm FAVOR__N(favor__sm)
#define favor__softcap FAVOR__N(favor__softcap)
#define favor__softmax_block FAVOR__N(favor__softmax_block)
#define favor__softmax_bwd_L FAVOR__N(favor__softmax_bwd_L)
#define favor__softmax_bwd_call_floats FAVOR__N(favor__softmax_bwd_call_floats)
#define favor__softmax_bwd_floats FAVOR__N(favor__softmax_bwd_floats)
#define favor__softmax_bwd_head FAVOR__N(favor__softmax_bwd_head)
#define favor__softmax_bwd_keys FAVOR__N(favor__softmax_bwd_keys)
#define favor__softmax_bwd_kp FAVOR__N(favor__softmax_bwd_kp)
#define favor__softmax_bwd_lse FAVOR__N(favor__softmax_bwd_lse)
#define favor__softmax_bwd_parts FAVOR__N(favor__softmax_bwd_parts)
#define favor__softmax_bwd_plan FAVOR__N(favor__softmax_bwd_plan)
#define favor__softmax_bwd_rows FAVOR__N(favor__softmax_bwd_rows)
#define favor__softmax_bwd_split FAVOR__N(favor__softmax_bwd_split)
#define favor__softmax_bwd_split_run FAVOR__N(favor__softmax_bwd_split_run)
#define favor__softmax_floats FAVOR__N(favor__softmax_floats)
#define favor__softmax_floats_all FAVOR__N(favor__softmax_floats_all)
#define favor__softmax_items FAVOR__N(favor__softmax_items)
#define favor__softmax_lse FAVOR__N(favor__softmax_lse)
#define favor__softmax_plan FAVOR__N(favor__softmax_plan)
#define favor__softmax_qt FAVOR__N(favor__softmax_qt)
#define favor__softmax_run FAVOR__N(favor__softmax_run)
#define favor__softmax_scores FAVOR__N(favor__softmax_scores)
#define favor__softmax_seq FAVOR__N(favor__softmax_seq)
#define favor__softmax_stats FAVOR__N(favor__softmax_stats)
#define favor__split FAVOR__N(favor__split)
#define favor__split_causal FAVOR__N(favor__split_causal)
#define favor__split_plan FAVOR__N(favor__split_plan)
#define favor__split_scan FAVOR__N(favor__split_scan)
#define favor__split_step1 FAVOR__N(favor__split_step1)
#define favor__split_sum_item FAVOR__N(favor__split_sum_item)
#define favor__split_sums FAVOR__N(favor__split_sums)
#define favor__stabilized FAVOR__N(favor__stabilized)
#define favor__stage FAVOR__N(favor__stage)
#define favor__stage_floats FAVOR__N(favor__stage_floats)
#define favor__stair FAVOR__N(favor__stair)
#define favor__stash FAVOR__N(favor__stash)
#define favor__stash_at FAVOR__N(favor__stash_at)
#define favor__stash_in_ws FAVOR__N(favor__stash_in_ws)
#define favor__stash_make FAVOR__N(favor__stash_make)
#define favor__state_add FAVOR__N(favor__state_add)
#define favor__state_merge FAVOR__N(favor__state_merge)
#define favor__step_floats FAVOR__N(favor__step_floats)
#define favor__step_head FAVOR__N(favor__step_head)
#define favor__su FAVOR__N(favor__su)
#define favor__sum FAVOR__N(favor__sum)
#define favor__tile FAVOR__N(favor__tile)
#define favor__tile_keys FAVOR__N(favor__tile_keys)
#define favor__tile_live FAVOR__N(favor__tile_live)
#define favor__too_big FAVOR__N(favor__too_big)
#define favor__top FAVOR__N(favor__top)
#define favor__transpose FAVOR__N(favor__transpose)
#define favor__unstage FAVOR__N(favor__unstage)
#define favor__v_ FAVOR__N(favor__v_)
#define favor__v_elu1 FAVOR__N(favor__v_elu1)
#define favor__v_exp_sub FAVOR__N(favor__v_exp_sub)
#define favor__v_load_ FAVOR__N(favor__v_load_)
#define favor__v_store_ FAVOR__N(favor__v_store_)
#define favor__v_sums FAVOR__N(favor__v_sums)
#define favor__v_tanh_poly FAVOR__N(favor__v_tanh_poly)
#define favor__v_transpose FAVOR__N(favor__v_transpose)
#define favor__vadd FAVOR__N(favor__vadd)
#define favor__vf FAVOR__N(favor__vf)
#define favor__vmul FAVOR__N(favor__vmul)
#define favor__vu FAVOR__N(favor__vu)
#define favor__why FAVOR__N(favor__why)
#define favor__why_of FAVOR__N(favor__why_of)
#define favor__widen_ FAVOR__N(favor__widen_)
#define favor__widen_bf16 FAVOR__N(favor__widen_bf16)
#define favor__widen_f16 FAVOR__N(favor__widen_f16)
#define favor__widen_rows FAVOR__N(favor__widen_rows)
#define favor__width FAVOR__N(favor__width)
#define favor__window FAVOR__N(favor__window)
#define favor__ws_bytes FAVOR__N(favor__ws_bytes)
#define favor__ws_get FAVOR__N(favor__ws_get)
#define favor__ws_put FAVOR__N(favor__ws_put)
#define favor__xget FAVOR__N(favor__xget)
#define favor__xset FAVOR__N(favor__xset)
#define favor__zero_rows FAVOR__N(favor__zero_rows)
#define favor_attention_merge FAVOR__N(favor_attention_merge)
#define favor_backend FAVOR__N(favor_backend)
#define favor_default_options FAVOR__N(favor_default_options)
#define favor_dtype_size FAVOR__N(favor_dtype_size)
#define favor_feature_map FAVOR__N(favor_feature_map)
#define favor_features_floats FAVOR__N(favor_features_floats)
#define favor_features_init FAVOR__N(favor_features_init)
#define favor_features_redraw FAVOR__N(favor_features_redraw)
#define favor_features_width FAVOR__N(favor_features_width)
#define favor_linear_attention FAVOR__N(favor_linear_attention)
#define favor_linear_attention_backward FAVOR__N(favor_linear_attention_backward)
#define favor_linear_attention_backward_workspace FAVOR__N(favor_linear_attention_backward_workspace)
#define favor_linear_attention_workspace FAVOR__N(favor_linear_attention_workspace)
#define favor_linear_extend FAVOR__N(favor_linear_extend)
#define favor_linear_extend_workspace FAVOR__N(favor_linear_extend_workspace)
#define favor_linear_step FAVOR__N(favor_linear_step)
#define favor_linear_step_ex FAVOR__N(favor_linear_step_ex)
#define favor_softmax_attention FAVOR__N(favor_softmax_attention)
#define favor_softmax_attention_backward FAVOR__N(favor_softmax_attention_backward)
#define favor_softmax_attention_backward_workspace FAVOR__N(favor_softmax_attention_backward_workspace)
#define favor_softmax_attention_workspace FAVOR__N(favor_softmax_attention_workspace)
#define favor_state_floats FAVOR__N(favor_state_floats)
#define favor_state_init FAVOR__N(favor_state_init)
#define favor_state_reset FAVOR__N(favor_state_reset)
#define favor_status_string FAVOR__N(favor_status_string)
#define favor_tensor_batched FAVOR__N(favor_tensor_batched)
#define favor_tensor_packed FAVOR__N(favor_tensor_packed)
#define favor_tensor_packed_as FAVOR__N(favor_tensor_packed_as)
#undef FAVOR__PART
#endif
#if defined(FAVOR__PART) && FAVOR__PART == 3
#undef FAVOR_SIMD
#undef FAVOR__ALIGN
#undef FAVOR__BK
#undef FAVOR__BQ
#undef FAVOR__CHUNK
#undef FAVOR__DEC_BLOCK
#undef FAVOR__DEC_DIRECT
#undef FAVOR__DEC_GROUPED
#undef FAVOR__DEC_LANES
#undef FAVOR__DEC_ROWS
#undef FAVOR__DEFINE_CONVERT
#undef FAVOR__DEFINE_DOT
#undef FAVOR__DEFINE_DOTS
#undef FAVOR__DEFINE_DOTS4
#undef FAVOR__DEFINE_EXP
#undef FAVOR__DEFINE_PV_KEY
#undef FAVOR__DEFINE_ROWS
#undef FAVOR__DEFINE_ROWS421
#undef FAVOR__DEFINE_TANH
#undef FAVOR__DT_ENTRY
#undef FAVOR__DT_PROTO
#undef FAVOR__F16C
#undef FAVOR__FMA
#undef FAVOR__FMAP_STACK
#undef FAVOR__FOLD
#undef FAVOR__INLINE
#undef FAVOR__IS_NAN
#undef FAVOR__ITEMS
#undef FAVOR__KEY_ROWS
#undef FAVOR__LANES
#undef FAVOR__LD_BF16
#undef FAVOR__LD_F16
#undef FAVOR__LD_F32
#undef FAVOR__LN_P_MIN
#undef FAVOR__LOAD_U16
#undef FAVOR__MASKED
#undef FAVOR__MASK_FLOATS
#undef FAVOR__MERGE_COLS
#undef FAVOR__MERGE_SPLIT
#undef FAVOR__MLD
#undef FAVOR__MR
#undef FAVOR__MSLICE
#undef FAVOR__MSTAGE
#undef FAVOR__NREG
#undef FAVOR__NV1
#undef FAVOR__PAR_FOR
#undef FAVOR__PEND
#undef FAVOR__PF_MIN
#undef FAVOR__POLY2_MAXD
#undef FAVOR__PV_AHEAD
#undef FAVOR__PV_CB
#undef FAVOR__PV_GROUP
#undef FAVOR__PV_ROWS
#undef FAVOR__RAMP
#undef FAVOR__RELU_FLOOR
#undef FAVOR__ROWBLK
#undef FAVOR__ROWS_ARGS
#undef FAVOR__ROWS_AS
#undef FAVOR__ROWS_KS
#undef FAVOR__ROWS_TIGHT
#undef FAVOR__ROW_LOADS
#undef FAVOR__SBP
#undef FAVOR__SEGMIN
#undef FAVOR__SEP
#undef FAVOR__SEQ_FOR
#undef FAVOR__SPLIT
#undef FAVOR__TEAM
#undef FAVOR__TEAM_FOR
#undef FAVOR__TID
#undef FAVOR__TILE_CASE
#undef FAVOR__TILE_LOAD
#undef FAVOR__UNROLL
#undef FAVOR__W
#undef FAVOR__X4_EVEN
#undef FAVOR__X4_ODD
#undef favor__no
#undef favor__s_from_f32
#undef favor__s_slli
#undef favor__s_srli
#undef favor__v_add
#undef favor__v_asfloat
#undef favor__v_asint
#undef favor__v_div
#undef favor__v_exp
#undef favor__v_expneg
#undef favor__v_fma
#undef favor__v_hmax
#undef favor__v_hsum
#undef favor__v_iadd
#undef favor__v_iand
#undef favor__v_ior
#undef favor__v_iset1
#undef favor__v_isub
#undef favor__v_load
#undef favor__v_load_bf16
#undef favor__v_load_bf16a
#undef favor__v_load_f16
#undef favor__v_load_f32
#undef favor__v_load_n
#undef favor__v_load_row
#undef favor__v_max
#undef favor__v_min
#undef favor__v_mul
#undef favor__v_pos_select
#undef favor__v_set1
#undef favor__v_slli
#undef favor__v_srli
#undef favor__v_store
#undef favor__v_store_bf16
#undef favor__v_store_f16
#undef favor__v_store_n
#undef favor__v_sub
#undef favor__v_tanh
#undef favor__v_tanh_small
#undef FAVOR_SIMD
#undef FAVOR__PASS_ISA
#undef FAVOR__PART
#endif
#if defined(FAVOR__PART) && FAVOR__PART == 5
#undef favor__add_ok
#undef favor__ahead
#undef favor__ahead_rows
#undef favor__alibi
#undef favor__align
#undef favor__any16
#undef favor__at
#undef favor__axpy
#undef favor__blk
#undef favor__blk_make
#undef favor__bsplit
#undef favor__bsplit_plan
#undef favor__bwd
#undef favor__bwd_accumulate
#undef favor__bwd_args
#undef favor__bwd_carve
#undef favor__bwd_causal_back
#undef favor__bwd_causal_fwd
#undef favor__bwd_causal_head
#undef favor__bwd_causal_keys
#undef favor__bwd_causal_pre
#undef favor__bwd_causal_rows
#undef favor__bwd_den
#undef favor__bwd_full_keys
#undef favor__bwd_full_rows
#undef favor__bwd_gated_L
#undef favor__bwd_gated_offsets
#undef favor__bwd_gated_pairs
#undef favor__bwd_keys_finish
#undef favor__bwd_keys_from_sums
#undef favor__bwd_keys_own
#undef favor__bwd_logden
#undef favor__bwd_lower
#undef favor__bwd_min
#undef favor__bwd_more
#undef favor__bwd_own_gated
#undef favor__bwd_query_grad
#undef favor__bwd_split_causal
#undef favor__bwd_stage_floats
#undef favor__bwd_state_times
#undef favor__bwd_sums_merge
#undef favor__bwd_sums_merge_gated
#undef favor__bwd_weigh
#undef favor__causal_base
#undef favor__causal_edges
#undef favor__causal_step
#undef favor__check_backward
#undef favor__check_extend
#undef favor__check_features
#undef favor__check_gates
#undef favor__check_linear
#undef favor__check_lse
#undef favor__check_mods
#undef favor__check_no_mods
#undef favor__check_options
#undef favor__check_qkvo
#undef favor__check_seqs
#undef favor__check_shapes
#undef favor__check_tensor
#undef favor__chunk
#undef favor__chunk_absorb
#undef favor__chunk_carve
#undef favor__chunk_e
#undef favor__chunk_factors
#undef favor__chunk_finish
#undef favor__chunk_floats
#undef favor__chunk_keys
#undef favor__chunk_rows
#undef favor__chunk_scores
#undef favor__cols
#undef favor__cols_exp_sum
#undef favor__cols_in
#undef favor__cols_max
#undef favor__cols_out
#undef favor__cursor
#undef favor__cursor_start
#undef favor__dec
#undef favor__dec_lanes
#undef favor__dec_lanes_room
#undef favor__decode_block
#undef favor__decode_floats
#undef favor__decode_items
#undef favor__decode_lanes
#undef favor__decode_mask
#undef favor__decode_merge
#undef favor__decode_merges
#undef favor__decode_plan
#undef favor__decode_pv
#undef favor__den_eff
#undef favor__dg_finish
#undef favor__divide
#undef favor__divs
#undef favor__dot
#undef favor__dot_bf16
#undef favor__dot_f16
#undef favor__dots
#undef favor__dots4
#undef favor__dots4_as
#undef favor__dots4_bf16
#undef favor__dots4_f16
#undef favor__dots_as
#undef favor__dots_bf16
#undef favor__dots_f16
#undef favor__dots_side
#undef favor__draw
#undef favor__dsink_floats
#undef favor__dsoftmax
#undef favor__dtable
#undef favor__dtanh
#undef favor__elu1_array
#undef favor__elu1_grad
#undef favor__exp_add
#undef favor__exp_sub
#undef favor__extend_head
#undef favor__extend_item
#undef favor__extend_run
#undef favor__extend_scan
#undef favor__extend_split
#undef favor__feature_head
#undef favor__features_fill
#undef favor__first
#undef favor__fixed
#undef favor__gated
#undef favor__gemm
#undef favor__gemm_lower
#undef favor__gemm_stair
#undef favor__gemm_tile
#undef favor__gemm_tri
#undef favor__head_map
#undef favor__in
#undef favor__input_range
#undef favor__io_floats
#undef favor__items
#undef favor__items_run
#undef favor__kahan_add
#undef favor__kahan_add_sc
#undef favor__kahan_axpy
#undef favor__kernel_ok
#undef favor__key_shares
#undef favor__keys
#undef favor__lam_get
#undef favor__lam_set
#undef favor__lbv
#undef favor__lbv_make
#undef favor__lin_absorb
#undef favor__lin_absorb_rows
#undef favor__lin_carve
#undef favor__lin_causal_run
#undef favor__lin_output
#undef favor__lin_output_rows
#undef favor__linear_bwd_call
#undef favor__linear_bwd_call_floats
#undef favor__linear_bwd_causal
#undef favor__linear_bwd_floats
#undef favor__linear_bwd_floats_all
#undef favor__linear_bwd_full
#undef favor__linear_bwd_head
#undef favor__linear_bwd_plan
#undef favor__linear_bwd_run
#undef favor__linear_bwd_split
#undef favor__linear_call_floats
#undef favor__linear_floats
#undef favor__linear_floats_all
#undef favor__linear_fwd_floats
#undef favor__linear_io_floats
#undef favor__linear_kvhead
#undef favor__linear_scale
#undef favor__linear_split
#undef favor__linear_split_item
#undef favor__linear_split_run
#undef favor__log_gates
#undef favor__lpass
#undef favor__map
#undef favor__map_floats
#undef favor__map_make
#undef favor__map_opts
#undef favor__mask_ahead
#undef favor__mask_any
#undef favor__mask_head
#undef favor__mask_map
#undef favor__mask_maps
#undef favor__mask_rows
#undef favor__mask_span
#undef favor__mask_tile
#undef favor__maxval
#undef favor__merge
#undef favor__merge_alias
#undef favor__merge_row
#undef favor__mix64
#undef favor__mods
#undef favor__mods_of
#undef favor__mul_ok
#undef favor__mul_sub
#undef favor__narrow_
#undef favor__narrow_bf16
#undef favor__narrow_f16
#undef favor__nbatch
#undef favor__nheads
#undef favor__npend
#undef favor__npend_ok
#undef favor__nsep
#undef favor__nseq
#undef favor__nthreads
#undef favor__online_max
#undef favor__out
#undef favor__out_done
#undef favor__overlap
#undef favor__overlaps_any
#undef favor__pend_chunk
#undef favor__pend_fold
#undef favor__pend_gates
#undef favor__phi_backward
#undef favor__phi_finish
#undef favor__phi_raw
#undef favor__poly2_grad
#undef favor__poly2_row
#undef favor__prefetch
#undef favor__prefetch_row
#undef favor__prefetch_rows
#undef favor__pv_key
#undef favor__pv_key_as
#undef favor__pv_key_bf16
#undef favor__pv_key_call
#undef favor__pv_key_f16
#undef favor__pvrow
#undef favor__pvrow_make
#undef favor__qgroup
#undef favor__qgroup_carve
#undef favor__query_ok
#undef favor__range
#undef favor__range_of
#undef favor__right
#undef favor__rng
#undef favor__rng_init
#undef favor__rng_normal
#undef favor__rng_sym
#undef favor__row_end
#undef favor__rows
#undef favor__rows1_4
#undef favor__rows1_4_bf16
#undef favor__rows1_4_f16
#undef favor__rows1_8
#undef favor__rows1_8_bf16
#undef favor__rows1_8_f16
#undef favor__rows2_4
#undef favor__rows2_4_bf16
#undef favor__rows2_4_f16
#undef favor__rows2_8
#undef favor__rows2_8_bf16
#undef favor__rows2_8_f16
#undef favor__rows4_4
#undef favor__rows4_4_bf16
#undef favor__rows4_4_f16
#undef favor__rows4_8
#undef favor__rows4_8_bf16
#undef favor__rows4_8_f16
#undef favor__rows_as
#undef favor__rows_var
#undef favor__rowvar
#undef favor__s_
#undef favor__s_add
#undef favor__s_asfloat
#undef favor__s_asint
#undef favor__s_div
#undef favor__s_elu1
#undef favor__s_exp
#undef favor__s_exp_sub
#undef favor__s_expneg
#undef favor__s_fma
#undef favor__s_from_
#undef favor__s_from_bf16
#undef favor__s_from_f16
#undef favor__s_hmax
#undef favor__s_hsum
#undef favor__s_iadd
#undef favor__s_iand
#undef favor__s_ior
#undef favor__s_iset1
#undef favor__s_isub
#undef favor__s_load
#undef favor__s_max
#undef favor__s_min
#undef favor__s_mul
#undef favor__s_pos_select
#undef favor__s_set1
#undef favor__s_store
#undef favor__s_sub
#undef favor__s_tanh
#undef favor__s_tanh_poly
#undef favor__s_tanh_small
#undef favor__s_to_
#undef favor__s_to_bf16
#undef favor__s_to_f16
#undef favor__same
#undef favor__same_keys
#undef favor__same_view
#undef favor__sbp
#undef favor__sbv
#undef favor__sbv_dq
#undef favor__sbv_keys
#undef favor__sbv_make
#undef favor__sbv_rows
#undef favor__sbv_zero_keys
#undef favor__scal
#undef favor__scal_to
#undef favor__seg_keys
#undef favor__seq
#undef favor__seq_items
#undef favor__seqv
#undef favor__seqv_grads
#undef favor__seqv_make
#undef favor__shape
#undef favor__sink
#undef favor__slices
#undef favor__slope
#undef favor__slot_load
#undef favor__sm
#undef favor__softcap
#undef favor__softmax_block
#undef favor__softmax_bwd_L
#undef favor__softmax_bwd_call_floats
#undef favor__softmax_bwd_floats
#undef favor__softmax_bwd_head
#undef favor__softmax_bwd_keys
#undef favor__softmax_bwd_kp
#undef favor__softmax_bwd_lse
#undef favor__softmax_bwd_parts
#undef favor__softmax_bwd_plan
#undef favor__softmax_bwd_rows
#undef favor__softmax_bwd_split
#undef favor__softmax_bwd_split_run
#undef favor__softmax_floats
#undef favor__softmax_floats_all
#undef favor__softmax_items
#undef favor__softmax_lse
#undef favor__softmax_plan
#undef favor__softmax_qt
#undef favor__softmax_run
#undef favor__softmax_scores
#undef favor__softmax_seq
#undef favor__softmax_stats
#undef favor__split
#undef favor__split_causal
#undef favor__split_plan
#undef favor__split_scan
#undef favor__split_step1
#undef favor__split_sum_item
#undef favor__split_sums
#undef favor__stabilized
#undef favor__stage
#undef favor__stage_floats
#undef favor__stair
#undef favor__stash
#undef favor__stash_at
#undef favor__stash_in_ws
#undef favor__stash_make
#undef favor__state_add
#undef favor__state_merge
#undef favor__step_floats
#undef favor__step_head
#undef favor__su
#undef favor__sum
#undef favor__tile
#undef favor__tile_keys
#undef favor__tile_live
#undef favor__too_big
#undef favor__top
#undef favor__transpose
#undef favor__unstage
#undef favor__v_
#undef favor__v_elu1
#undef favor__v_exp_sub
#undef favor__v_load_
#undef favor__v_store_
#undef favor__v_sums
#undef favor__v_tanh_poly
#undef favor__v_transpose
#undef favor__vadd
#undef favor__vf
#undef favor__vmul
#undef favor__vu
#undef favor__why
#undef favor__why_of
#undef favor__widen_
#undef favor__widen_bf16
#undef favor__widen_f16
#undef favor__widen_rows
#undef favor__width
#undef favor__window
#undef favor__ws_bytes
#undef favor__ws_get
#undef favor__ws_put
#undef favor__xget
#undef favor__xset
#undef favor__zero_rows
#undef favor_attention_merge
#undef favor_backend
#undef favor_default_options
#undef favor_dtype_size
#undef favor_feature_map
#undef favor_features_floats
#undef favor_features_init
#undef favor_features_redraw
#undef favor_features_width
#undef favor_linear_attention
#undef favor_linear_attention_backward
#undef favor_linear_attention_backward_workspace
#undef favor_linear_attention_workspace
#undef favor_linear_extend
#undef favor_linear_extend_workspace
#undef favor_linear_step
#undef favor_linear_step_ex
#undef favor_softmax_attention
#undef favor_softmax_attention_backward
#undef favor_softmax_attention_backward_workspace
#undef favor_softmax_attention_workspace
#undef favor_state_floats
#undef favor_state_init
#undef favor_state_reset
#undef favor_status_string
#undef favor_tensor_batched
#undef favor_tensor_packed
#undef favor_tensor_packed_as
#undef FAVOR__PART
#endif
/* END GENERATED NAMES */

/*
------------------------------------------------------------------------------
MIT License

Copyright (c) 2026 the favor.h authors

Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
*/
