#!/usr/bin/python3
"""The PyTorch (CPU) peer of favor_bench.

favor_bench starts this script as a child process (`/usr/bin/python3
bench/peers_torch.py --serve`) and sends it one request per line on stdin:

    run METHOD CAUSAL D N HEADS THREADS M RUNS BUDGET_MS CHECK SEED
    grad METHOD CAUSAL D N HEADS THREADS M RUNS BUDGET_MS CHECK SEED

(grad: a training step, the forward with autograd and out.backward(dO); CHECK
is ignored and ERR is -1.)

METHOD is softmax, elu1 or favor+; Q, K and V are HEADS x N x D float32 tensors
(Q, K ~ N(0, 0.5^2), V ~ N(0, 1)). The script times the method the way a PyTorch
user writes it, with torch.set_num_threads(THREADS) (and OpenBLAS, which does
torch's GEMMs in Debian's build, set to the same count), and answers

    ok MEDIAN_S MIN_S RUNS ERR      (ERR: max error / tolerance, or -1)
    skip REASON | fail REASON

The times are the median (and minimum) of >= RUNS calls after a warm-up call
(more calls, up to 50, while they take less than BUDGET_MS together). With
CHECK = 1 the output is also compared with a float64 evaluation of the same
formula, against favor.h's documented tolerances. At start it prints
`ready INFO`, or `unavailable REASON` when torch cannot be imported.

The methods:
  softmax  softmax(Q K^T / sqrt(d)) V, the scores materialised (heads in groups
           so that a group's scores take <= 1 GiB); causal by masked_fill.
  elu1     fast-transformers' LinearAttention: phi = elu(x) + 1, einsum of
           phi(K)^T V, then phi(Q) times it over phi(Q) . sum phi(K).
  favor+   Performer's softmax kernel: x' = d^-1/4 x, phi = exp(W x' - |x'|^2/2
           - max) / sqrt(m) with W m x d orthogonal Gaussian blocks with chi
           norms; the max per row for queries and per head for keys; then the
           same linear attention.
  causal linear attention: a chunked form (chunks of 128): within a chunk the
           masked phi(Q) phi(K)^T, across chunks the state sum phi(K)^T V of
           the chunks before (an exclusive cumulative sum).
"""
import ctypes
import math
import sys
import time

CHUNK = 128
SCORES_BYTES = 1 << 30  # softmax: scores of a group of heads
SOFTMAX_MAX_BYTES = 12 << 30  # skip softmax when one head's n x n tensors pass this


def openblas_handle():
    """The OpenBLAS library this process loaded (torch's GEMMs), or None."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if "openblas" in path and ".so" in path:
                    lib = ctypes.CDLL(path)
                    lib.openblas_get_corename.restype = ctypes.c_char_p
                    lib.openblas_set_num_threads.argtypes = [ctypes.c_int]
                    return lib
    except (OSError, AttributeError):
        pass
    return None


def timed(fn, runs, budget):
    t0 = time.perf_counter()
    fn()
    warm = time.perf_counter() - t0
    r = runs
    if warm * r < budget:
        want = int(budget / warm) if warm > 0 else 50
        r = min(50, max(r, want))
    ts = []
    for _ in range(r):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    median = ts[r // 2] if r % 2 else 0.5 * (ts[r // 2 - 1] + ts[r // 2])
    return median, ts[0], r


def main():
    if "--serve" not in sys.argv[1:]:
        sys.stderr.write(__doc__)
        return 2
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        print("unavailable cannot import torch with %s: %s" % (sys.executable, str(e).splitlines()[0]))
        sys.stdout.flush()
        return 0
    F = torch.nn.functional

    blas = openblas_handle()
    core = blas.openblas_get_corename().decode() if blas else "unknown"
    print("ready torch %s (%s), GEMMs by OpenBLAS core %s" % (torch.__version__, sys.executable, core))
    sys.stdout.flush()

    def softmax_attention(q, k, v, causal, mask, group):
        h, n, d = q.shape
        out = torch.empty_like(v)
        for h0 in range(0, h, group):
            s = torch.matmul(q[h0:h0 + group] * d ** -0.5, k[h0:h0 + group].transpose(1, 2))
            if causal:
                s.masked_fill_(mask, float("-inf"))
            torch.matmul(torch.softmax(s, dim=-1), v[h0:h0 + group], out=out[h0:h0 + group])
        return out

    def elu1(x):
        return F.elu(x) + 1

    def orthogonal_w(m, d, gen, dtype):
        """Performer's gaussian_orthogonal_random_matrix, scaling 0 (chi norms)."""
        blocks = []
        for _ in range((m + d - 1) // d):
            qm, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
            blocks.append(qm.t())
        w = torch.cat(blocks)[:m]
        norms = torch.randn(m, d, generator=gen, dtype=torch.float64).norm(dim=1)
        return (norms[:, None] * w).to(dtype)

    def favor_features(x, w, is_query):
        d = x.shape[-1]
        m = w.shape[0]
        xn = x * d ** -0.25
        dash = torch.matmul(xn, w.t())
        diag = (xn * xn).sum(dim=-1, keepdim=True) / 2
        if is_query:
            stab = dash.amax(dim=-1, keepdim=True)
        else:
            stab = dash.amax(dim=(-1, -2), keepdim=True)
        return torch.exp(dash - diag - stab) * m ** -0.5

    def linear_noncausal(qf, kf, v, eps):
        kv = torch.einsum("hsd,hsm->hdm", kf, v)
        z = 1 / (torch.einsum("hld,hd->hl", qf, kf.sum(dim=1)) + eps)
        return torch.einsum("hld,hdm,hl->hlm", qf, kv, z)

    def linear_causal(qf, kf, v):
        h, n, c = qf.shape
        dv = v.shape[-1]
        ch = CHUNK if n % CHUNK == 0 else n
        b = n // ch
        q4 = qf.reshape(h, b, ch, c)
        k4 = kf.reshape(h, b, ch, c)
        v4 = v.reshape(h, b, ch, dv)
        kv = torch.einsum("hbcm,hbcd->hbmd", k4, v4)
        ks = k4.sum(dim=2)
        # state before each chunk: exclusive cumulative sums over the chunks
        s = torch.cat([torch.zeros_like(kv[:, :1]), torch.cumsum(kv, dim=1)[:, :-1]], dim=1)
        z = torch.cat([torch.zeros_like(ks[:, :1]), torch.cumsum(ks, dim=1)[:, :-1]], dim=1)
        a = torch.matmul(q4, k4.transpose(-1, -2)).tril_()
        num = torch.matmul(a, v4) + torch.matmul(q4, s)
        den = a.sum(dim=-1) + torch.einsum("hbcm,hbm->hbc", q4, z)
        return (num / den.unsqueeze(-1)).reshape(h, n, dv)

    def training_step(method, causal, q, k, v, w, gen):
        """forward with autograd, then out.backward(dO): what one training step
        of the attention costs in PyTorch"""
        g = torch.randn(v.shape, generator=gen)
        q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
        n, d = q.shape[1], q.shape[2]
        mask = torch.ones(n, n, dtype=torch.bool).triu_(1) if causal else None

        def forward():
            if method == "softmax":
                s = torch.matmul(q * d ** -0.5, k.transpose(1, 2))
                if causal:
                    s = s.masked_fill(mask, float("-inf"))
                return torch.matmul(torch.softmax(s, dim=-1), v)
            if method == "elu1":
                qf, kf = elu1(q), elu1(k)
            else:
                qf, kf = favor_features(q, w, True), favor_features(k, w, False)
            if causal:
                return linear_causal(qf, kf, v)
            return linear_noncausal(qf, kf, v, 1e-6 if method == "elu1" else 0.0)

        def step():
            for t in (q, k, v):
                t.grad = None
            forward().backward(g)

        return step

    def reference(method, causal, q, k, v, w):
        q, k, v = q.double(), k.double(), v.double()
        n, d = q.shape[1], q.shape[2]
        mask = torch.ones(n, n, dtype=torch.bool).triu_(1)
        if method == "softmax":
            s = torch.matmul(q, k.transpose(1, 2)) / math.sqrt(d)
            if causal:
                s.masked_fill_(mask, float("-inf"))
            return torch.matmul(torch.softmax(s, dim=-1), v)
        if method == "elu1":
            qf, kf = elu1(q), elu1(k)
        else:
            qf, kf = favor_features(q, w.double(), True), favor_features(k, w.double(), False)
        a = torch.matmul(qf, kf.transpose(1, 2))
        if causal:
            a.masked_fill_(mask, 0.0)
        return torch.matmul(a, v) / a.sum(dim=-1, keepdim=True)

    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "quit":
            break
        try:
            if parts[0] not in ("run", "grad") or len(parts) != 12:
                raise ValueError("bad request")
            grad = parts[0] == "grad"
            method = parts[1]
            causal, d, n, heads, threads, m, runs, budget_ms, check, seed = (int(x) for x in parts[2:])
            if method not in ("softmax", "elu1", "favor+"):
                raise ValueError("unknown method " + method)
        except ValueError as e:
            print("fail", e)
            sys.stdout.flush()
            continue
        try:
            torch.set_num_threads(threads)
            if blas:
                blas.openblas_set_num_threads(threads)
            if method == "softmax" and 3 * n * n * 4 > SOFTMAX_MAX_BYTES:
                print("skip memory: the n x n scores of one head would take %.0f GiB" % (n * n * 4 / 2**30))
                sys.stdout.flush()
                continue
            gen = torch.Generator().manual_seed(seed * 1000003 + n * 131 + d)
            q = torch.randn(heads, n, d, generator=gen) * 0.5
            k = torch.randn(heads, n, d, generator=gen) * 0.5
            v = torch.randn(heads, n, d, generator=gen)
            w = orthogonal_w(m, d, gen, torch.float32) if method == "favor+" else None
            if grad:
                median, best, r = timed(training_step(method, causal, q, k, v, w, gen),
                                        runs, budget_ms * 1e-3)
                print("ok %.9g %.9g %d %.6g" % (median, best, r, -1.0))
                sys.stdout.flush()
                continue
            with torch.inference_mode():
                if method == "softmax":
                    mask = torch.ones(n, n, dtype=torch.bool).triu_(1) if causal else None
                    group = max(1, min(heads, SCORES_BYTES // (n * n * 4)))
                    fn = lambda: softmax_attention(q, k, v, causal, mask, group)
                else:
                    if method == "elu1":
                        feats = lambda: (elu1(q), elu1(k))
                    else:
                        feats = lambda: (favor_features(q, w, True), favor_features(k, w, False))
                    # fast-transformers adds eps = 1e-6 to the denominator; Performer
                    # (whose key features are small: stabilized by the head's max) none
                    eps = 1e-6 if method == "elu1" else 0.0
                    if causal:
                        fn = lambda: linear_causal(*feats(), v)
                    else:
                        fn = lambda: linear_noncausal(*feats(), v, eps)
                median, best, r = timed(fn, runs, budget_ms * 1e-3)
                err = -1.0
                if check:
                    out = fn().double()
                    ref = reference(method, causal, q, k, v, w)
                    if method == "favor+":
                        tol = 1e-4 * ref.abs().max().item()
                    else:
                        tol = 2e-5 * v.abs().max().item()
                    err = (out - ref).abs().max().item() / tol
            print("ok %.9g %.9g %d %.6g" % (median, best, r, err))
        except (RuntimeError, MemoryError) as e:
            print("fail", str(e).splitlines()[0] if str(e) else type(e).__name__)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
