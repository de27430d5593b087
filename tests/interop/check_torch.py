#!/usr/bin/python3
"""favor-npy against PyTorch, in float64, on random .npy files.

    /usr/bin/python3 tests/interop/check_torch.py path/to/favor_npy

Writes random Q, K, V (and projections W) to a temporary directory, runs
favor-npy on them and compares its output with the same attention written in
PyTorch in float64: exact softmax (causal masks bottom-right aligned, n == n_k,
n < n_k and n > n_k), elu(x)+1 linear attention in the form of
fast-transformers, FAVOR+ (and the hyperbolic, trig and relu maps) given
the same W, in the form of the Performer reference code, unstabilized, and
poly2 (no W) against its kernel 1 + t + t^2/2, t = s q.k, evaluated directly,
not through features. Gated linear attention (--decay, --gates, --no-normalizer,
--kernel identity) against a float64 recurrence over the features, token by
token (elu+1, FAVOR+ given W, POLY2's features, identity's sqrt(s) x). Shapes
[n, d], [heads, n, d] and [batch, heads, n, d], float32 and float64 inputs,
.npy format versions 1.0, 2.0 and 3.0, grouped-query K/V, d_v != d. The
tolerances are favor.h's (its manual, ACCURACY): max|err| <= 2e-5 max|V| for
softmax, elu+1 and poly2, <= 1e-4 max|O_ref| for the random feature maps.
Without the normalizer, where max|V| bounds no output, elu+1, poly2 and identity
take <= 2e-5 max|V| max_i M_i, M_i = sum_j A_ij |phi(q_i)|.|phi(k_j)| (A_ij: the
decay from key j to row i).

16-bit element types: float16 files (passed as FAVOR_F16 views) and float32
files with --storage bf16 (FAVOR_BF16 views), against torch in float64 from the
same rounded values (.half() / .bfloat16(), then .double()), with float32
outputs (the tolerances above) and 16-bit outputs (--out-dtype f2 / bf16: the
tolerance plus half an ULP relative, 2^-11 |ref| or 2^-8 |ref|, per element);
bit-for-bit checks that a 16-bit output is the float32 one rounded, that
16-bit inputs give what their widened values give in float32 files, and that
the tool rounds inputs as torch does (a probe through softmax over one key,
whose output is V itself: ties, subnormals, the largest values, and float64
values just off a tie, which must not be rounded through float32).

Then the failures: malformed, truncated or unsupported files, mismatched
shapes, bad command lines, outputs that cannot be written. Each must exit 1
(data) or 2 (command line) with exactly one line on stderr starting
"favor-npy: error:", and leave no output and no temporary file behind; each is
run twice, the second time with an existing output file, which must survive
unchanged.

Exit status: 0 passed, 1 failed, 77 skipped (numpy or torch missing, unless
FAVOR_REQUIRE_INTEROP=1 is set, which makes that a failure).
"""
import io
import os
import re
import resource
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
import zlib

SKIP = 77

try:
    import numpy as np
    import torch
except ImportError as exc:
    if os.environ.get("FAVOR_REQUIRE_INTEROP") == "1":
        print("interop: FAILED: python3-numpy/python3-torch not found at %s (%s), "
              "and FAVOR_REQUIRE_INTEROP=1" % (sys.executable, exc))
        sys.exit(1)
    print("interop: SKIPPED: python3-numpy/python3-torch not found at %s (%s)"
          % (sys.executable, exc))
    sys.exit(SKIP)

torch.set_num_threads(1)
TOOL = None
PREFIX = []  # an emulator to run TOOL under (qemu-i386 where the kernel cannot exec it)
FAILURES = []


def fail(msg):
    FAILURES.append(msg)
    print("  FAIL: " + msg)


def run(args, max_file_bytes=None):
    """Run the tool; max_file_bytes: RLIMIT_FSIZE, so writes past it fail (EFBIG)."""
    env = dict(os.environ, OMP_WAIT_POLICY="passive")

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))
    return subprocess.run(PREFIX + [TOOL] + [str(a) for a in args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env, timeout=60,
                          preexec_fn=limit if max_file_bytes else None)


# --------------------------------------------------------------------------
# float64 references (torch)
# --------------------------------------------------------------------------
def t64(a):
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def expand_kv(x, hq):
    """Grouped-query attention: repeat each K/V head for its group of Q heads."""
    if x.dim() >= 3 and x.shape[-3] != hq:
        x = x.repeat_interleave(hq // x.shape[-3], dim=-3)
    return x


def visible(n, nk):
    """favor's causal mask: query i sees key j iff j <= i + (nk - n)."""
    i = torch.arange(n)[:, None]
    j = torch.arange(nk)[None, :]
    return j <= i + (nk - n)


def softmax_ref(q, k, v, scale, causal):
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        mask = visible(q.shape[-2], k.shape[-2])
        s = s.masked_fill(~mask, float("-inf"))
        p = torch.softmax(s, -1)
        p = torch.nan_to_num(p, nan=0.0)  # rows that see no key: zero
    else:
        p = torch.softmax(s, -1)
    return p @ v


def linear_ref(pq, pk, v, causal):
    """out_i = phi(q_i) (sum_j phi(k_j) v_j^T) / (phi(q_i) . sum_j phi(k_j)),
    the sums over visible keys: all of them, or prefix sums when causal."""
    if not causal:
        kv = pk.transpose(-1, -2) @ v                 # [.., F, dv]
        z = pk.sum(-2)                                # [.., F]
        num = pq @ kv
        den = (pq * z.unsqueeze(-2)).sum(-1, keepdim=True)
        return num / den
    n, nk = pq.shape[-2], pk.shape[-2]
    S = torch.cumsum(pk.unsqueeze(-1) * v.unsqueeze(-2), dim=-3)  # [.., nk, F, dv]
    Z = torch.cumsum(pk, dim=-2)                                  # [.., nk, F]
    last = torch.arange(n) + (nk - n)     # the last key row i sees
    seen = last >= 0
    idx = last.clamp(min=0)
    num = torch.einsum("...if,...ifv->...iv", pq, S[..., idx, :, :])
    den = torch.einsum("...if,...if->...i", pq, Z[..., idx, :]).unsqueeze(-1)
    out = num / den
    out[..., ~seen, :] = 0.0
    return out


def poly2_ref(q, k, v, scale, causal):
    """FAVOR_POLY2 from its kernel, not its features: a = 1 + t + t^2/2 with
    t = s q.k, masked, normalised over the visible keys: (a @ v) / a.sum(-1).
    Rows that see no key (causal, n > n_k) are zero."""
    t = (q @ k.transpose(-1, -2)) * scale
    a = 1.0 + t + t * t / 2.0
    if causal:
        a = a.masked_fill(~visible(q.shape[-2], k.shape[-2]), 0.0)
    den = a.sum(-1, keepdim=True)
    out = (a @ v) / den
    return torch.where(den > 0, out, torch.zeros_like(out))


def positions(n, nk, seqlens):
    """Positions and sequence ids of the query rows and the keys: p_i = i + (nk - n)
    and j, one sequence; packed (n == nk), each counted from its sequence's start."""
    if seqlens is None:
        return (torch.arange(n) + (nk - n), torch.arange(nk),
                torch.zeros(n, dtype=torch.long), torch.zeros(nk, dtype=torch.long))
    lens = torch.as_tensor(np.asarray(seqlens, dtype=np.int64))
    ids = torch.repeat_interleave(torch.arange(len(lens)), lens)
    pos = torch.arange(n) - (torch.cumsum(lens, 0) - lens)[ids]
    return pos, pos, ids, ids


def variants_ref(q, k, v, scale, causal=False, window=None, softcap=None, alibi=None,
                 sinks=None, mask=None, seqlens=None):
    """Exact softmax on the explicit score matrix, in favor.h's order: x = s q.k,
    softcap c tanh(x/c), minus ALiBi m_h |p_i - j|, plus the mask; -inf for the keys
    outside the causal rule (j <= p_i), the window (p_i - L <= j <= p_i + R, a
    negative side unbounded) and the row's sequence; the sink logits a column of
    the softmax, dropped after it. A row that sees nothing is zero. alibi and
    sinks: one per query head (float64 tensors)."""
    x = (q @ k.transpose(-1, -2)) * scale
    if softcap is not None:
        x = softcap * torch.tanh(x / softcap)
    pq, pk, sq, sk = positions(q.shape[-2], k.shape[-2], seqlens)
    dist = pq[:, None] - pk[None, :]  # p_i - j

    def per_head(t):  # [heads] -> broadcast over rows and keys
        return t.reshape(-1, 1, 1) if q.dim() >= 3 else t.reshape(1, 1)
    if alibi is not None:
        x = x - per_head(alibi) * dist.abs()
    if mask is not None:
        x = x + mask
    see = sq[:, None] == sk[None, :]
    if causal:
        see &= dist >= 0
    if window is not None and window[0] >= 0:
        see &= dist <= window[0]
    if window is not None and window[1] >= 0:
        see &= dist >= -window[1]
    x = x.masked_fill(~see, float("-inf"))
    if sinks is not None:
        x = torch.cat([x, per_head(sinks).expand(*x.shape[:-1], 1)], -1)
    p = torch.nan_to_num(torch.softmax(x, -1), nan=0.0)
    if sinks is not None:
        p = p[..., :-1]
    return p @ v


def phi_ref(x, kernel, w, scale):
    """The feature maps of favor.h's manual, unstabilized (c = 0), x' = sqrt(s) x.
    For FAVOR+ this is the Performer's softmax kernel feature map with
    data_normalizer d^{-1/4} when s = 1/sqrt(d)."""
    if kernel == "elu":
        return torch.nn.functional.elu(x) + 1.0
    if kernel == "identity":  # FAVOR_IDENTITY: sqrt(s) x, width d
        return x * scale ** 0.5
    if kernel == "poly2":
        return poly2_phi(x, scale)
    m = w.shape[0]
    xs = x * scale ** 0.5
    u = xs @ w.T
    h = (xs * xs).sum(-1, keepdim=True) / 2.0
    if kernel == "positive":
        return torch.exp(u - h) / m ** 0.5
    if kernel == "hyperbolic":
        return torch.exp(-h) * torch.cat([torch.exp(u), torch.exp(-u)], -1) / (2 * m) ** 0.5
    if kernel == "trig":
        return torch.exp(h) * torch.cat([torch.sin(u), torch.cos(u)], -1) / m ** 0.5
    if kernel == "relu":
        return torch.relu(u) / m ** 0.5 + 1e-3
    raise ValueError(kernel)


def poly2_phi(x, scale):
    """FAVOR_POLY2's features as the manual lists them: 1, x', then for i = 1..d
    x'_i^2 / sqrt(2) and x'_i x'_j for j > i (x' = sqrt(s) x), so that
    phi(a).phi(b) = 1 + t + t^2/2, t = s a.b."""
    xs = x * scale ** 0.5
    i, j = torch.triu_indices(x.shape[-1], x.shape[-1])
    quad = xs[..., i] * xs[..., j]
    quad = torch.where(i == j, quad / 2.0 ** 0.5, quad)
    return torch.cat([torch.ones_like(xs[..., :1]), xs, quad], -1)


def gated_ref(pq, pk, v, loga, causal, norm):
    """Gated linear attention (favor.h's GATES) from the features, token by token:
    before key t joins it the state decays by a_t = exp(loga[.., t]),
        S_t = a_t S_{t-1} + phi(k_t) v_t^T,   z_t = a_t z_{t-1} + phi(k_t),
    and row i reads it at its position p_i = i + n_k - n: o_i = phi(q_i)^T S_{p_i} /
    phi(q_i)^T z_{p_i}, or phi(q_i)^T S_{p_i} without the normalizer (norm False);
    rows with p_i < 0 are zero. Non-causal (no gates): every key, undecayed. Also
    returns M_i = sum_j A_ij |phi(q_i)|.|phi(k_j)| (elementwise absolute values; A_ij
    the decay from key j to row i), which bounds an unnormalized row's scale.
    pk, v and loga have pq's heads (grouped K/V expanded)."""
    n, nk = pq.shape[-2], pk.shape[-2]
    if not causal:
        num = pq @ (pk.transpose(-1, -2) @ v)
        mag = pq.abs() @ pk.abs().sum(-2).unsqueeze(-1)
        return (num / (pq @ pk.sum(-2).unsqueeze(-1)) if norm else num), mag.squeeze(-1)
    out = torch.zeros(pq.shape[:-1] + v.shape[-1:], dtype=torch.float64)
    mag = torch.zeros(pq.shape[:-1], dtype=torch.float64)
    S = torch.zeros(pk.shape[:-2] + (pk.shape[-1], v.shape[-1]), dtype=torch.float64)
    z = torch.zeros(pk.shape[:-2] + pk.shape[-1:], dtype=torch.float64)
    za = torch.zeros_like(z)  # the same sum of |phi(k)|
    a = torch.exp(loga)
    for t in range(nk):
        at = a[..., t, None]
        S = at[..., None] * S + pk[..., t, :, None] * v[..., t, None, :]
        z = at * z + pk[..., t, :]
        za = at * za + pk[..., t, :].abs()
        i = t - (nk - n)
        if i >= 0:
            qi = pq[..., i, :]
            num = (qi.unsqueeze(-1) * S).sum(-2)
            out[..., i, :] = num / (qi * z).sum(-1, keepdim=True) if norm else num
            mag[..., i] = (qi.abs() * za).sum(-1)
    return out, mag


def performer_w(rng, m, d):
    """gaussian_orthogonal_random_matrix of the Performer code (scaling 0):
    blocks of d orthonormal rows (QR of a Gaussian matrix), each row scaled to
    the norm of a Gaussian d-vector."""
    blocks = []
    for b in range(0, m, d):
        qm, _ = np.linalg.qr(rng.standard_normal((d, d)))
        blocks.append(qm.T[: min(d, m - b)])
    norms = np.linalg.norm(rng.standard_normal((m, d)), axis=1)
    return np.ascontiguousarray(norms[:, None] * np.vstack(blocks))  # np.save: C order


# --------------------------------------------------------------------------
# .npy files
# --------------------------------------------------------------------------
def save(path, arr, version=None):
    if version is None:
        np.save(path, arr)
    else:
        with open(path, "wb") as fh:
            np.lib.format.write_array(fh, arr, version=version)


def raw_npy(path, header, data=b"", version=(1, 0), hlen=None):
    """A .npy file with a hand-written header dict (padded to 64 bytes)."""
    h = header.encode("latin1")
    pre = 10 if version[0] == 1 else 12
    pad = (-(pre + len(h) + 1)) % 64
    h = h + b" " * pad + b"\n"
    n = len(h) if hlen is None else hlen
    ln = struct.pack("<H", n) if version[0] == 1 else struct.pack("<I", n)
    with open(path, "wb") as fh:
        fh.write(b"\x93NUMPY" + bytes(version) + ln + h + data)


# --------------------------------------------------------------------------
# Agreement with torch
# --------------------------------------------------------------------------
RESULTS = []  # (name, err, tol, a 16-bit output?)


def inputs(work, name, qs, ks, vs, dtype=np.float32, versions=(None, None, None)):
    """Random Q, K, V of a case, fixed by its name, saved: (rng, q, k, v, the paths
    of Q, K, V and OUT)."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))  # fixed data per case
    q = rng.normal(0.0, 0.5, qs).astype(dtype)
    k = rng.normal(0.0, 0.5, ks).astype(dtype)
    v = rng.normal(0.0, 1.0, vs).astype(dtype)
    paths = [os.path.join(work, "%s.%s.npy" % (name, t)) for t in "qkvo"]
    for p, a, ver in zip(paths, (q, k, v), versions):
        save(p, a, ver)
    return rng, q, k, v, paths


def case(work, name, method, qs, ks, vs, dtype=np.float32, causal=False, scale=None,
         kernel="positive", m=None, wdtype=np.float64, versions=(None, None, None),
         out_dtype=None):
    rng, q, k, v, paths = inputs(work, name, qs, ks, vs, dtype, versions)
    args = ["--method", method] + (["--causal"] if causal else [])
    if scale is not None:
        args += ["--scale", repr(scale)]
    d = qs[-1]
    s = scale if scale is not None else 1.0 / d ** 0.5
    w = None
    if method == "favor" and kernel == "poly2":  # no W
        args += ["--kernel", kernel]
    elif method == "favor":
        w = performer_w(rng, m, d).astype(wdtype)
        wpath = os.path.join(work, name + ".w.npy")
        save(wpath, w)
        args += ["--kernel", kernel, "--projection", wpath]
    if out_dtype:
        args += ["--out-dtype", out_dtype]
    out = run_case(name, args + paths, tuple(qs[:-1]) + (vs[-1],),
                   np.float64 if out_dtype == "f8" else np.float32)
    if out is None:
        return
    ref, tol = reference(method, t64(q), t64(k), t64(v), causal, s, kernel,
                         None if w is None else t64(w))
    compare(name, out, ref, tol)


def run_case(name, args, want_shape, want_dtype):
    """Run the tool; its output array, or None (a failure recorded)."""
    r = run(args)
    if r.returncode != 0 or r.stderr:
        fail("%s: exit %d, stderr %r" % (name, r.returncode, r.stderr.decode()[:300]))
        return None
    out = np.load(args[-1])
    if out.shape != want_shape or out.dtype != want_dtype:
        fail("%s: output %s %s, expected %s %s" % (name, out.shape, out.dtype, want_shape,
                                                   np.dtype(want_dtype)))
        return None
    return out


def reference(method, tq, tk, tv, causal, s, kernel="positive", tw=None):
    """The float64 reference for Q, K, V (float64 tensors) and its tolerance."""
    hq = tq.shape[-3] if tq.dim() >= 3 else 1
    tk, tv = expand_kv(tk, hq), expand_kv(tv, hq)
    if method == "softmax":
        ref = softmax_ref(tq, tk, tv, s, causal)
        tol = 2e-5 * float(tv.abs().max())
    elif method == "elu":
        ref = linear_ref(phi_ref(tq, "elu", None, s), phi_ref(tk, "elu", None, s), tv, causal)
        tol = 2e-5 * float(tv.abs().max())
    elif kernel == "poly2":  # exact: elu+1's tolerance
        ref = poly2_ref(tq, tk, tv, s, causal)
        tol = 2e-5 * float(tv.abs().max())
    else:
        ref = linear_ref(phi_ref(tq, kernel, tw, s), phi_ref(tk, kernel, tw, s), tv, causal)
        tol = 1e-4 * float(ref.abs().max())
    return ref, tol


def compare(name, out, ref, tol, half_ulp=0.0):
    """Check |out - ref| <= tol + half_ulp |ref| element by element (half_ulp: 0 for
    float32 outputs, half an ULP relative of a 16-bit output type) and record it.
    The element shown is the one closest to its bound (for float32 outputs, the
    largest error)."""
    err = (torch.from_numpy(out.astype(np.float64)) - ref).abs()
    bound = tol + half_ulp * ref.abs()
    i = int(torch.argmax(err / bound))
    err, tol = float(err.flatten()[i]), float(bound.flatten()[i])
    RESULTS.append((name, err, tol, half_ulp > 0))
    status = "ok" if err <= tol else "FAIL"
    print("  %-38s max|err| %.2e  tol %.2e  (%4.1f%% of tol)  %s"
          % (name, err, tol, 100.0 * err / tol, status))
    if not err <= tol:
        fail("%s: max|err| %.3e > tol %.3e" % (name, err, tol))


def agreement(work):
    print("agreement with torch (float64):")
    F64 = np.float64
    # softmax
    case(work, "softmax-2d", "softmax", (130, 32), (130, 32), (130, 32))
    case(work, "softmax-causal-3d-f64", "softmax", (3, 150, 64), (3, 150, 64), (3, 150, 32),
         dtype=F64, causal=True)
    case(work, "softmax-causal-4d-gqa-n<nk", "softmax", (2, 4, 70, 16), (2, 2, 150, 16),
         (2, 2, 150, 24), causal=True, scale=0.3)
    case(work, "softmax-causal-n>nk", "softmax", (2, 100, 16), (2, 60, 16), (2, 60, 16),
         causal=True)
    case(work, "softmax-gqa-nk!=n-out-f8", "softmax", (4, 90, 32), (1, 200, 32), (1, 200, 8),
         out_dtype="f8")
    case(work, "softmax-npy-v2-v3", "softmax", (2, 64, 16), (2, 64, 16), (2, 64, 16),
         versions=((2, 0), (3, 0), (1, 0)), causal=True)
    # elu+1
    case(work, "elu-3d-dv!=d", "elu", (4, 120, 32), (4, 120, 32), (4, 120, 48))
    case(work, "elu-causal-4d-gqa-f64", "elu", (2, 4, 150, 16), (2, 1, 150, 16),
         (2, 1, 150, 16), dtype=F64, causal=True)
    case(work, "elu-causal-n<nk", "elu", (2, 50, 32), (2, 130, 32), (2, 130, 32), causal=True)
    case(work, "elu-causal-n>nk", "elu", (2, 100, 16), (2, 60, 16), (2, 60, 16), causal=True)
    # FAVOR+ with the Performer's W (m not a multiple of d: a partial block)
    case(work, "favor+-3d-W64", "favor", (4, 140, 32), (4, 140, 32), (4, 140, 32), m=128)
    case(work, "favor+-causal-4d-gqa-n<nk-W32", "favor", (2, 4, 90, 32), (2, 2, 160, 32),
         (2, 2, 160, 16), causal=True, m=80, wdtype=np.float32)
    case(work, "favor+-causal-2d-f64-scale", "favor", (150, 16), (150, 16), (150, 24),
         dtype=F64, causal=True, m=64, scale=0.2)
    case(work, "favor+-causal-n>nk", "favor", (2, 100, 16), (2, 60, 16), (2, 60, 16),
         causal=True, m=64)
    # the other maps of favor.h, same W
    case(work, "hyperbolic-causal-3d", "favor", (2, 130, 32), (2, 130, 32), (2, 130, 32),
         causal=True, kernel="hyperbolic", m=64)
    case(work, "relu-3d-gqa", "favor", (4, 110, 32), (2, 110, 32), (2, 110, 16),
         kernel="relu", m=96)
    case(work, "trig-3d", "favor", (2, 100, 16), (2, 100, 16), (2, 100, 16),
         kernel="trig", m=64, scale=0.05)
    # poly2: the exact kernel 1 + t + t^2/2, no W (scale 1: t of order 1, t^2 matters)
    case(work, "poly2-3d-dv!=d", "favor", (4, 120, 32), (4, 120, 32), (4, 120, 48),
         kernel="poly2")
    case(work, "poly2-2d-d64-scale", "favor", (130, 64), (130, 64), (130, 16),
         kernel="poly2", scale=0.5)
    case(work, "poly2-causal-4d-gqa-f64-scale", "favor", (2, 4, 150, 16), (2, 1, 150, 16),
         (2, 1, 150, 16), dtype=F64, causal=True, kernel="poly2", scale=1.0)
    case(work, "poly2-causal-n<nk", "favor", (2, 50, 32), (2, 130, 32), (2, 130, 32),
         causal=True, kernel="poly2")
    case(work, "poly2-causal-n>nk-out-f8", "favor", (2, 100, 16), (2, 60, 16), (2, 60, 16),
         causal=True, kernel="poly2", out_dtype="f8")

    # descr '=f8' and '|f4' (native order) read like '<f8' and '<f4'
    if sys.byteorder == "little":
        rng = np.random.default_rng(5)
        q = rng.normal(0, 0.5, (2, 40, 8))
        k = rng.normal(0, 0.5, (2, 40, 8)).astype(np.float32)
        v = rng.normal(0, 1, (2, 40, 8))
        p = [os.path.join(work, "native.%s.npy" % t) for t in "qkvo"]
        raw_npy(p[0], "{'descr': '=f8', 'fortran_order': False, 'shape': (2, 40, 8), }",
                q.tobytes())
        raw_npy(p[1], "{'shape': (2, 40, 8), 'fortran_order': False, 'descr': '|f4'}",
                k.tobytes())
        save(p[2], v)
        r = run(["--method", "softmax"] + p)
        if r.returncode != 0:
            fail("native byte order: exit %d %r" % (r.returncode, r.stderr.decode()))
        else:
            ref = softmax_ref(t64(q), t64(k), t64(v), 8 ** -0.5, False)
            err = float((t64(np.load(p[3])) - ref).abs().max())
            tol = 2e-5 * float(np.abs(v).max())
            print("  %-38s max|err| %.2e  tol %.2e  (%4.1f%% of tol)  %s"
                  % ("softmax-descr-=f8-|f4", err, tol, 100 * err / tol,
                     "ok" if err <= tol else "FAIL"))
            RESULTS.append(("softmax-descr-=f8-|f4", err, tol, False))
            if not err <= tol:
                fail("native byte order: max|err| %.3e > %.3e" % (err, tol))


# --------------------------------------------------------------------------
# Score variants of softmax (--window, --softcap, --alibi, --sinks, --mask) and
# packed sequences (--seqlens, every method), against the explicit score matrix
# --------------------------------------------------------------------------
def variant_case(work, name, method, qs, ks, vs, causal=False, scale=None, window=None,
                 softcap=None, alibi=False, sinks=False, mask=None, mask_dtype=np.float32,
                 seqlens=None, seqlens_dtype=np.int64):
    """One run with the given variants: alibi, sinks: drawn per query head (slopes
    2^(-8h/H) in a float64 file, logits N(0, 1) with head 1's -inf: no sink); mask:
    "shared" [n, n_k] or "per-head" [heads, n, n_k], N(0, 1) with a quarter of it and
    one row -inf; seqlens: the lengths (n = n_k). The reference: variants_ref for
    softmax; for elu+1, each sequence alone (its own empty state)."""
    rng, q, k, v, paths = inputs(work, name, qs, ks, vs)
    heads, n, nk = (qs[-3] if len(qs) >= 3 else 1), qs[-2], ks[-2]
    s = scale if scale is not None else 1.0 / qs[-1] ** 0.5
    args = ["--method", method] + (["--causal"] if causal else [])
    if scale is not None:
        args += ["--scale", repr(scale)]
    if window is not None:
        args += ["--window", "%d,%d" % window]
    if softcap is not None:
        args += ["--softcap", repr(softcap)]

    def given(flag, arr):
        """arr saved for flag; the values favor.h gets, in float64"""
        path = os.path.join(work, "%s.%s.npy" % (name, flag[2:]))
        save(path, arr)
        args.extend([flag, path])
        return None if arr.dtype.kind == "i" else t64(arr.astype(np.float32))
    ref = dict(window=window, softcap=softcap, seqlens=seqlens)
    if alibi:
        ref["alibi"] = given("--alibi", 2.0 ** (-8.0 * np.arange(1, heads + 1) / heads))
    if sinks:
        logits = rng.normal(0.0, 1.0, heads).astype(np.float32)
        logits[1 % heads] = -np.inf if heads > 1 else logits[0]
        ref["sinks"] = given("--sinks", logits)
    if mask is not None:
        m = rng.normal(0.0, 1.0, ((heads,) if mask == "per-head" else ()) + (n, nk))
        m[rng.random(m.shape) < 0.25] = -np.inf
        m[..., n // 2, :] = -np.inf
        ref["mask"] = given("--mask", m.astype(mask_dtype))
    if seqlens is not None:
        given("--seqlens", np.asarray(seqlens, dtype=seqlens_dtype))
    out = run_case(name, args + paths, tuple(qs[:-1]) + (vs[-1],), np.float32)
    if out is None:
        return
    tq, tk, tv = t64(q), expand_kv(t64(k), heads), expand_kv(t64(v), heads)
    if method == "softmax":
        want = variants_ref(tq, tk, tv, s, causal, **ref)
    else:  # linear: sequence by sequence, each from an empty state
        ends = np.cumsum([0] + list(seqlens))
        want = torch.cat([reference(method, tq[..., a:b, :], tk[..., a:b, :], tv[..., a:b, :],
                                    causal, s)[0] for a, b in zip(ends[:-1], ends[1:]) if b > a],
                         -2)
    compare(name, out, want, 2e-5 * float(tv.abs().max()))


def score_variants(work):
    print("score variants and packed sequences against torch (float64):")
    vc = variant_case
    vc(work, "var-window-3d", "softmax", (2, 90, 16), (2, 90, 16), (2, 90, 16), window=(10, 5))
    vc(work, "var-window-causal-gqa-n<nk", "softmax", (1, 4, 40, 16), (1, 2, 100, 16),
       (1, 2, 100, 24), causal=True, window=(30, -1))
    vc(work, "var-window-right-n>nk", "softmax", (2, 100, 16), (2, 60, 16), (2, 60, 16),
       window=(-1, 7))
    vc(work, "var-softcap-2d-scale1", "softmax", (80, 32), (80, 32), (80, 32), softcap=1.5,
       scale=1.0)
    vc(work, "var-alibi-causal-4d-gqa", "softmax", (2, 4, 70, 16), (2, 2, 90, 16),
       (2, 2, 90, 16), causal=True, alibi=True)
    vc(work, "var-alibi-3d-n<nk", "softmax", (4, 50, 16), (4, 120, 16), (4, 120, 16),
       alibi=True)
    vc(work, "var-sinks-causal-n>nk", "softmax", (3, 90, 16), (3, 60, 16), (3, 60, 16),
       causal=True, sinks=True)
    vc(work, "var-sinks-2d", "softmax", (60, 16), (60, 16), (60, 16), sinks=True)
    # the layers of issue 24: GPT-OSS (causal window + sinks), Gemma 2 (softcap + window)
    vc(work, "gpt-oss-window+sinks-gqa", "softmax", (1, 4, 96, 32), (1, 2, 96, 32),
       (1, 2, 96, 32), causal=True, window=(16, 0), sinks=True)
    vc(work, "gemma2-softcap+window", "softmax", (2, 96, 32), (2, 96, 32), (2, 96, 32),
       causal=True, window=(20, 0), softcap=1.0)
    # favor's decode path (few rows, many keys), every variant at once
    vc(work, "var-decode-window+softcap+alibi+sinks", "softmax", (4, 3, 32), (2, 600, 32),
       (2, 600, 32), causal=True, window=(100, -1), softcap=3.0, alibi=True, sinks=True)
    # additive masks (a quarter -inf, one row all -inf): shared, per head in float16,
    # and after softcap and ALiBi
    vc(work, "var-mask-shared-3d", "softmax", (2, 64, 16), (2, 64, 16), (2, 64, 16),
       mask="shared")
    vc(work, "var-mask-per-head-f16-causal-gqa-n<nk", "softmax", (1, 4, 40, 16),
       (1, 2, 80, 16), (1, 2, 80, 16), causal=True, mask="per-head", mask_dtype=np.float16)
    vc(work, "var-mask+softcap+alibi", "softmax", (2, 60, 16), (2, 60, 16), (2, 60, 16),
       mask="per-head", softcap=1.0, alibi=True)
    # packed sequences (an empty one too): softmax with causal, window and sinks; elu+1,
    # each sequence from an empty state
    vc(work, "var-packed-causal-4d-gqa-i4", "softmax", (2, 4, 90, 16), (2, 2, 90, 16),
       (2, 2, 90, 16), causal=True, seqlens=[30, 1, 45, 14], seqlens_dtype=np.int32)
    vc(work, "var-packed-window+sinks", "softmax", (2, 100, 16), (2, 100, 16), (2, 100, 16),
       window=(8, 3), sinks=True, seqlens=[40, 0, 60])
    vc(work, "var-packed-elu-causal", "elu", (2, 90, 16), (2, 90, 16), (2, 90, 16),
       causal=True, seqlens=[25, 50, 15])
    vc(work, "var-packed-elu-4d-gqa", "elu", (2, 4, 70, 16), (2, 1, 70, 16), (2, 1, 70, 8),
       seqlens=[33, 37])


# --------------------------------------------------------------------------
# Gated linear attention (--decay, --gates, --no-normalizer, --kernel identity)
# against a float64 recurrence over the features, token by token
# --------------------------------------------------------------------------
GATED = []  # (normalized?, err / tol) of each gated case


def gated_case(work, name, method, qs, ks, vs, kernel=None, m=None, scale=None, causal=True,
               decay=None, gates=False, norm=True, gdtype=np.float32):
    """One run: decay, the gammas (one per K/V head of a batch element, saved in
    float64); gates, log(sigmoid(x)) with x ~ N(1, 1.5), shaped as K without its
    last dimension and saved as gdtype; norm False: --no-normalizer. The tolerance:
    the ungated ones when normalized; unnormalized, 2e-5 max|V| max_i M_i for elu,
    poly2 and identity (M_i of gated_ref: the output is not bounded by max|V|) and
    1e-4 max|O_ref| for the random maps."""
    rng, q, k, v, paths = inputs(work, name, qs, ks, vs)
    d, hq = qs[-1], (qs[-3] if len(qs) >= 3 else 1)
    s = scale if scale is not None else 1.0 / d ** 0.5
    args = ["--method", method] + (["--causal"] if causal else []) + \
        ([] if norm else ["--no-normalizer"])
    if scale is not None:
        args += ["--scale", repr(scale)]
    tw = None
    if method == "favor":
        args += ["--kernel", kernel]
        if kernel not in ("poly2", "identity"):
            w = performer_w(rng, m, d)
            wpath = os.path.join(work, name + ".w.npy")
            save(wpath, w)
            args += ["--projection", wpath]
            tw = t64(w)
    loga = torch.zeros(ks[:-1], dtype=torch.float64)  # log a_t, per K/V head and key
    if decay is not None:
        gam = np.array(decay, np.float64)
        path = os.path.join(work, name + ".decay.npy")
        save(path, gam)
        args += ["--decay", path]
        loga += torch.log(t64(gam.astype(np.float32))).reshape((-1, 1) if len(ks) >= 3 else ())
    if gates:
        g = -np.logaddexp(0.0, -rng.normal(1.0, 1.5, ks[:-1]))  # log(sigmoid(x))
        path = os.path.join(work, name + ".gates.npy")
        save(path, g.astype(gdtype))
        args += ["--gates", path]
        loga += t64(g.astype(gdtype).astype(np.float32))
    out = run_case(name, args + paths, tuple(qs[:-1]) + (vs[-1],), np.float32)
    if out is None:
        return
    tk, tv = expand_kv(t64(k), hq), expand_kv(t64(v), hq)
    loga = expand_kv(loga.unsqueeze(-1), hq).squeeze(-1)
    kern = "elu" if method == "elu" else kernel
    ref, mag = gated_ref(phi_ref(t64(q), kern, tw, s), phi_ref(tk, kern, tw, s), tv, loga,
                         causal, norm)
    if kern not in ("elu", "poly2", "identity"):
        tol = 1e-4 * float(ref.abs().max())
    elif norm:
        tol = 2e-5 * float(tv.abs().max())
    else:
        tol = 2e-5 * float(tv.abs().max()) * float(mag.max())
    compare(name, out, ref, tol)
    GATED.append((norm, RESULTS[-1][1] / RESULTS[-1][2]))


def gated(work):
    print("gated linear attention against a float64 recurrence (torch):")
    # the recurrence itself, ungated (a_t = 1): the direct references of elu+1 and
    # of poly2's kernel, before it is trusted with gates
    rng = np.random.default_rng(29)
    q, k, v = (t64(rng.normal(0, 0.5, (2, 9, 8))) for _ in range(3))
    zero = torch.zeros(2, 12)
    for n0, causal in ((0, True), (3, True), (0, False)):
        kk, vv = torch.cat([k, k[:, :n0]], 1), torch.cat([v, v[:, :n0]], 1)  # n <= n_k
        for want, kern in ((linear_ref(phi_ref(q, "elu", None, 1), phi_ref(kk, "elu", None, 1),
                                       vv, causal), "elu"),
                           (poly2_ref(q, kk, vv, 0.3, causal), "poly2")):
            got, _ = gated_ref(phi_ref(q, kern, None, 0.3), phi_ref(kk, kern, None, 0.3), vv,
                               zero[:, :kk.shape[1]], causal, True)
            if not float((got - want).abs().max()) <= 1e-12:
                fail("gated_ref (%s, causal %s, n_k - n = %d) is not the ungated reference"
                     % (kern, causal, n0))
    gc = gated_case
    # elu+1: normalized and not, decay, gates, both; non-causal without the normalizer
    gc(work, "gated-elu-2d-decay", "elu", (120, 16), (120, 16), (120, 16), decay=[0.97])
    gc(work, "gated-elu-2d-decay-nonorm", "elu", (120, 16), (120, 16), (120, 16),
       decay=[0.97], norm=False)
    gc(work, "gated-elu-3d-gqa-n<nk-gates-f8", "elu", (4, 60, 16), (2, 140, 16),
       (2, 140, 24), gates=True, gdtype=np.float64)
    gc(work, "gated-elu-3d-gqa-n<nk-gates-nonorm", "elu", (4, 60, 16), (2, 140, 16),
       (2, 140, 24), gates=True, norm=False)
    gc(work, "gated-elu-4d-batch-both-nonorm", "elu", (2, 4, 50, 16), (2, 2, 90, 16),
       (2, 2, 90, 16), decay=[0.97, 0.9], gates=True, norm=False)
    gc(work, "nonorm-elu-3d-gqa-noncausal", "elu", (4, 80, 16), (2, 100, 16), (2, 100, 16),
       causal=False, norm=False)
    # FAVOR+ given W
    gc(work, "gated-favor+-3d-gqa-n<nk-both", "favor", (4, 70, 16), (2, 120, 16),
       (2, 120, 16), kernel="positive", m=64, decay=[0.97, 0.9], gates=True)
    gc(work, "gated-favor+-4d-batch-gates-nonorm", "favor", (2, 2, 40, 16), (2, 1, 80, 16),
       (2, 1, 80, 16), kernel="positive", m=48, gates=True, norm=False)
    gc(work, "gated-favor+-2d-decay-nonorm", "favor", (100, 16), (100, 16), (100, 8),
       kernel="positive", m=64, decay=[0.9], norm=False)
    # poly2 (its features written out, width 153 at d = 16)
    gc(work, "gated-poly2-3d-gqa-n<nk-gates", "favor", (4, 50, 16), (2, 110, 16),
       (2, 110, 16), kernel="poly2", gates=True)
    gc(work, "gated-poly2-4d-batch-both-nonorm", "favor", (2, 2, 40, 16), (2, 2, 70, 16),
       (2, 2, 70, 16), kernel="poly2", decay=[0.9, 0.97], gates=True, norm=False,
       gdtype=np.float16)
    gc(work, "gated-poly2-n>nk-decay-scale1", "favor", (2, 90, 16), (2, 60, 16), (2, 60, 16),
       kernel="poly2", scale=1.0, decay=[0.97, 0.9])
    # identity (no normalizer only): RetNet's retention (decay), Mamba-2's scalar gates
    gc(work, "gated-identity-2d-decay", "favor", (110, 32), (110, 32), (110, 32),
       kernel="identity", decay=[0.97], norm=False)
    gc(work, "gated-identity-3d-gqa-n<nk-gates", "favor", (4, 60, 16), (2, 130, 16),
       (2, 130, 24), kernel="identity", gates=True, norm=False)
    gc(work, "gated-identity-4d-batch-both-scale", "favor", (2, 4, 50, 16), (2, 2, 80, 16),
       (2, 2, 80, 16), kernel="identity", scale=0.5, decay=[0.9, 0.97], gates=True,
       norm=False)
    # long enough for favor.h to split the keys of a head into segments (fewer than 8
    # key/value heads): the segments merged with their summed gates
    gc(work, "gated-elu-2d-long-both", "elu", (1000, 16), (1200, 16), (1200, 16),
       decay=[0.999], gates=True)
    gc(work, "gated-favor+-3d-gqa-long-both-nonorm", "favor", (2, 600, 16), (1, 1100, 16),
       (1, 1100, 16), kernel="positive", m=32, decay=[0.995], gates=True, norm=False)
    for norm, what in ((True, "normalized"), (False, "without the normalizer")):
        r = [x for nm, x in GATED if nm == norm]
        if r:
            print("  worst gated case %s: %.2f%% of its tolerance" % (what, 100 * max(r)))


# --------------------------------------------------------------------------
# 16-bit inputs and outputs: float16 files, --storage f16/bf16, --out-dtype
# f2/bf16. The reference is computed in float64 from the same rounded values
# (torch's .half() / .bfloat16(), then .double()).
# --------------------------------------------------------------------------
HALF_ULP = {"f2": 2.0 ** -11, "bf16": 2.0 ** -8}  # relative, of the output type


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and \
        a.tobytes() == b.tobytes()


def narrow_case(work, name, method, qs, ks, vs, causal=False, kernel="positive", m=None,
                w16=False, rounding=False):
    """One configuration, five runs of the tool on the same data (seven with
    rounding): float16 files -> float32 and float16 outputs (against torch, and
    the float16 output exactly the float32 one rounded), and the same values
    widened in float32 files (bit for bit the float16-file output); --storage
    bf16 -> float32 and bfloat16 outputs (against torch, the bfloat16 output
    exactly the float32 one rounded). With rounding, also the tool's rounding
    on this data, bit for bit: --storage f16 on the float32 files against the
    float16 files, and --storage bf16 against torch's bfloat16 values in
    float32 files."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x32 = [rng.normal(0.0, sd, sh).astype(np.float32)
           for sd, sh in ((0.5, qs), (0.5, ks), (1.0, vs))]
    x16 = [torch.from_numpy(a).half().numpy() for a in x32]                  # '<f2'
    xb = [torch.from_numpy(a).bfloat16().float().numpy() for a in x32]      # '<f4'
    f = lambda tag, t: os.path.join(work, "%s.%s.%s.npy" % (name, tag, t))  # noqa: E731
    files = {}
    for tag, arrs in (("f32", x32), ("f16", x16), ("f16w", [a.astype(np.float32) for a in x16]),
                      ("bf16w", xb)):
        files[tag] = [f(tag, t) for t in "qkv"]
        for p, a in zip(files[tag], arrs):
            save(p, a)
    d = qs[-1]
    s = 1.0 / d ** 0.5
    args = ["--method", method] + (["--causal"] if causal else [])
    tw = None
    if method == "favor" and kernel == "poly2":  # no W
        args += ["--kernel", kernel]
    elif method == "favor":
        w = performer_w(rng, m, d)
        if w16:  # a float16 W file: widened, not rounded further
            w = w.astype(np.float16)
        wpath = f("w", "w")
        save(wpath, w)
        args += ["--kernel", kernel, "--projection", wpath]
        tw = t64(w)
    shape = tuple(qs[:-1]) + (vs[-1],)
    o = lambda tag: f(tag, "o")  # noqa: E731
    ref16, tol16 = reference(method, *[torch.from_numpy(a).double() for a in x16], causal, s,
                             kernel, tw)
    refb, tolb = reference(method, *[torch.from_numpy(a).double() for a in xb], causal, s,
                           kernel, tw)
    h4 = run_case(name, args + files["f16"] + [o("h4")], shape, np.float32)
    h2 = run_case(name, args + ["--out-dtype", "f2"] + files["f16"] + [o("h2")], shape,
                  np.float16)
    hw = run_case(name, args + files["f16w"] + [o("hw")], shape, np.float32)
    hs = bw = None
    if rounding:
        hs = run_case(name, args + ["--storage", "f16"] + files["f32"] + [o("hs")], shape,
                      np.float32)
        bw = run_case(name, args + files["bf16w"] + [o("bw")], shape, np.float32)
    b4 = run_case(name, args + ["--storage", "bf16"] + files["f32"] + [o("b4")], shape,
                  np.float32)
    bb = run_case(name, args + ["--storage", "bf16", "--out-dtype", "bf16"] + files["f32"]
                  + [o("bb")], shape, np.float32)
    if h4 is not None:
        compare(name + " f16>f32", h4, ref16, tol16)
        if hw is not None and not same_bits(h4, hw):
            fail("%s: float16 inputs and the same values in float32 differ" % name)
        if hs is not None and not same_bits(h4, hs):
            fail("%s: --storage f16 differs from torch's .half() values" % name)
        if h2 is not None:
            compare(name + " f16>f16", h2, ref16, tol16, HALF_ULP["f2"])
            if not same_bits(h2, h4.astype(np.float16)):
                fail("%s: the float16 output is not the float32 output rounded" % name)
    if b4 is not None:
        compare(name + " bf16>f32", b4, refb, tolb)
        if bw is not None and not same_bits(b4, bw):
            fail("%s: --storage bf16 differs from torch's .bfloat16() values" % name)
        if bb is not None:
            compare(name + " bf16>bf16", bb, refb, tolb, HALF_ULP["bf16"])
            if not same_bits(bb, torch.from_numpy(b4).bfloat16().float().numpy()):
                fail("%s: the bfloat16 output is not the float32 output rounded" % name)


def exact_probe(work):
    """Softmax over one key gives V itself, so its output shows the 16-bit values
    the tool passed: ties (to even), just off ties, subnormals, the largest finite
    values, from float32 files against torch's rounding, and from float64 files
    where rounding through float32 first would land on a tie and go the wrong
    way (the expected value is known by construction)."""
    q = np.full((2, 4), 0.25, np.float32)
    p = [os.path.join(work, "probe.%s.npy" % t) for t in ("q", "v32", "v64", "o")]
    save(p[0], q)
    k = q[:1]
    save(p[0].replace(".q.", ".k."), k)
    kp = p[0].replace(".q.", ".k.")
    rng = np.random.default_rng(17)
    for st, f16 in (("f16", True), ("bf16", False)):
        fbits = 10 if f16 else 7
        emin = -14 if f16 else -126
        emax = 15 if f16 else 127
        top = (2.0 - 2.0 ** -fbits) * 2.0 ** emax  # the largest finite value
        vals = list(rng.normal(0, 3, 40)) + list(rng.normal(0, 1e-5 if f16 else 1e-38, 20))
        # halfway between two 16-bit neighbours 1 + j 2^-fbits (even and odd j),
        # exactly and one float32 ULP either side; then the same at the bottom
        # of the subnormals and below the top
        for base, ulp in ((1.0, 2.0 ** -fbits), (0.0, 2.0 ** (emin - fbits)),
                          (top - 4 * 2.0 ** (emax - fbits), 2.0 ** (emax - fbits))):
            for j in range(4):
                t = np.float32(base + (j + 0.5) * ulp)
                vals += [t, np.nextafter(t, np.float32(0)), np.nextafter(t, np.float32(np.inf))]
        vals += [top, -top, 2.0 ** (emin - fbits) / 2, -(2.0 ** (emin - fbits)) / 4]
        v = np.array(vals, np.float32).reshape(1, -1)
        save(p[1], v)
        want = (torch.from_numpy(v).half() if f16 else torch.from_numpy(v).bfloat16()).float()
        out = run_case("probe --storage " + st, ["--method", "softmax", "--storage", st, p[0], kp,
                                                 p[1], p[3]], (2, v.shape[1]), np.float32)
        if out is not None:
            bad = [(float(a), float(b), float(c)) for a, b, c in zip(v[0], out[0], want[0])
                   if b != c]
            if bad or not np.array_equal(out[0], out[1]):
                fail("probe --storage %s (float32 file): %d values rounded unlike torch, "
                     "e.g. (value, got, expected) %s" % (st, len(bad), bad[:3]))
        # float64: a 16-bit value x (random patterns, subnormals included) and the
        # next one away from zero, y; (x + y)/2 nudged by 2^-30 (y - x), far below
        # float32's precision, must round to y (outward) and x (inward)
        h = rng.integers(1, 0x7bff if f16 else 0x7f7f, 60, dtype=np.uint16)
        h[:8] = np.arange(1, 9)  # the smallest subnormals
        h |= (np.arange(60) % 2 * 0x8000).astype(np.uint16)

        def value(bits):
            if f16:
                return bits.view(np.float16).astype(np.float64)
            return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        x, y = value(h), value(h + np.uint16(1))
        mid = (x + y) / 2
        v64 = np.concatenate([mid + (y - x) * 2.0 ** -30, mid - (y - x) * 2.0 ** -30])[None, :]
        want = np.concatenate([y, x])
        save(p[2], v64)
        out = run_case("probe --storage %s f8" % st, ["--method", "softmax", "--storage", st,
                                                      p[0], kp, p[2], p[3]],
                       (2, v64.shape[1]), np.float32)
        if out is not None and not np.array_equal(out[0].astype(np.float64), want):
            n_bad = int((out[0].astype(np.float64) != want).sum())
            fail("probe --storage %s (float64 file): %d of %d values not correctly rounded"
                 % (st, n_bad, want.size))
    print("  %-38s %s" % ("probe: 16-bit rounding of inputs", "ok" if not FAILURES else
                          "see above"))


def sixteen_bit(work):
    print("16-bit inputs and outputs (float16 files, --storage, --out-dtype f2/bf16):")
    narrow_case(work, "h-softmax-3d", "softmax", (2, 70, 32), (2, 70, 32), (2, 70, 16),
                rounding=True)
    narrow_case(work, "h-softmax-causal-gqa-n<nk", "softmax", (2, 4, 40, 16),
                (2, 2, 90, 16), (2, 2, 90, 24), causal=True)
    narrow_case(work, "h-softmax-decode-causal", "softmax", (4, 3, 32), (2, 600, 32),
                (2, 600, 32), causal=True)
    narrow_case(work, "h-elu-3d", "elu", (2, 80, 32), (2, 80, 32), (2, 80, 16))
    narrow_case(work, "h-elu-causal-n>nk", "elu", (2, 90, 16), (2, 60, 16), (2, 60, 16),
                causal=True)
    narrow_case(work, "h-poly2-3d", "favor", (2, 80, 32), (2, 80, 32), (2, 80, 16),
                kernel="poly2")
    narrow_case(work, "h-poly2-causal-n>nk", "favor", (2, 90, 16), (2, 60, 16), (2, 60, 16),
                causal=True, kernel="poly2")
    narrow_case(work, "h-favor+-causal-W16", "favor", (2, 80, 32), (2, 80, 32), (2, 80, 32),
                causal=True, m=64, w16=True, rounding=True)
    # mixed types as read, with the descrs '=f2' and '|f2' (native order)
    if sys.byteorder == "little":
        rng = np.random.default_rng(23)
        q = rng.normal(0, 0.5, (2, 50, 8)).astype(np.float16)
        k = rng.normal(0, 0.5, (2, 50, 8)).astype(np.float32)
        v = rng.normal(0, 1, (2, 50, 8)).astype(np.float16)
        p = [os.path.join(work, "mixed.%s.npy" % t) for t in "qkvo"]
        raw_npy(p[0], "{'descr': '=f2', 'fortran_order': False, 'shape': (2, 50, 8), }",
                q.tobytes())
        save(p[1], k)
        raw_npy(p[2], "{'descr': '|f2', 'fortran_order': False, 'shape': (2, 50, 8), }",
                v.tobytes())
        out = run_case("mixed", ["--method", "softmax", "--causal"] + p, (2, 50, 8), np.float32)
        if out is not None:
            ref, tol = reference("softmax", t64(q), t64(k), t64(v), True, 8 ** -0.5)
            compare("softmax-mixed-=f2-<f4-|f2", out, ref, tol)
    exact_probe(work)


# --------------------------------------------------------------------------
# The tool itself: seeds, timing line, help, replacing an output, its mode
# --------------------------------------------------------------------------
def behaviour(work):
    print("behaviour:")
    rng = np.random.default_rng(11)
    p = [os.path.join(work, "b.%s.npy" % t) for t in ("q", "k", "v")]
    for path, shape in zip(p, ((2, 64, 16), (2, 64, 16), (2, 64, 16))):
        save(path, rng.normal(0, 0.5, shape).astype(np.float32))
    outs = [os.path.join(work, "b.o%d.npy" % i) for i in range(3)]
    r1 = run(["--seed", "7", "--features", "32", "--repeat", "3"] + p + [outs[0]])
    r2 = run(["--seed", "7", "--features", "32", "--threads", "1"] + p + [outs[1]])
    r3 = run(["--seed", "8", "--features", "32", "--causal"] + p + [outs[2]])
    if any(r.returncode for r in (r1, r2, r3)):
        fail("seeded runs: exit %s" % [r.returncode for r in (r1, r2, r3)])
        return
    line = r1.stdout.decode()
    pat = (r"^favor-npy: favor/positive m=32 non-causal heads=2 kv_heads=2 n=64 n_k=64 "
           r"d=16 dv=16 \w+: [0-9.]+ ms \(median of 3\)\n$")
    if not re.match(pat, line):
        fail("timing line %r does not match %r" % (line, pat))
    else:
        print("  timing line: " + line.strip())
    a, b = np.load(outs[0]), np.load(outs[1])
    if not np.array_equal(a, b):
        fail("the same seed gave different outputs")
    # poly2 has no W: its line shows its width, 1 + d + d (d + 1) / 2 = 153 at d = 16,
    # and its output does not depend on the threads
    pp = [os.path.join(work, "b.poly2-%d.npy" % i) for i in range(2)]
    r5 = run(["--kernel", "poly2", "--repeat", "3"] + p + [pp[0]])
    r6 = run(["--kernel", "poly2", "--threads", "1"] + p + [pp[1]])
    pat = (r"^favor-npy: favor/poly2 width=153 non-causal heads=2 kv_heads=2 n=64 n_k=64 "
           r"d=16 dv=16 \w+: [0-9.]+ ms \(median of 3\)\n$")
    if r5.returncode or r6.returncode:
        fail("poly2 runs: exit %d, %d" % (r5.returncode, r6.returncode))
    elif not re.match(pat, r5.stdout.decode()):
        fail("poly2 timing line %r does not match %r" % (r5.stdout.decode(), pat))
    elif not np.array_equal(np.load(pp[0]), np.load(pp[1])):
        fail("poly2: --threads 1 and the default threads gave different outputs")
    else:
        print("  timing line: " + r5.stdout.decode().strip())
    # the variants given are named after causal / non-causal
    sinks = os.path.join(work, "b.sinks.npy")
    save(sinks, np.zeros(2, np.float32))
    r7 = run(["--method", "softmax", "--causal", "--window", "8,-1", "--softcap", "30",
              "--sinks", sinks] + p + [os.path.join(work, "b.variants.npy")])
    pat = (r"^favor-npy: softmax causal window=8,-1 softcap=30 sinks heads=2 kv_heads=2 "
           r"n=64 n_k=64 d=16 dv=16 \w+: [0-9.]+ ms \(median of 1\)\n$")
    if r7.returncode or not re.match(pat, r7.stdout.decode()):
        fail("variants' timing line: exit %d, %r does not match %r"
             % (r7.returncode, r7.stdout.decode(), pat))
    else:
        print("  timing line: " + r7.stdout.decode().strip())
    # identity has no W either: favor/identity and its width d; the linear options given
    # are named after causal
    decay, gates = os.path.join(work, "b.decay.npy"), os.path.join(work, "b.gates.npy")
    save(decay, np.array([0.9, 0.97]))
    save(gates, np.full((2, 64), -0.05, np.float32))
    r8 = run(["--kernel", "identity", "--no-normalizer", "--causal", "--decay", decay,
              "--gates", gates, "--repeat", "2"] + p + [os.path.join(work, "b.identity.npy")])
    pat = (r"^favor-npy: favor/identity width=16 causal no-normalizer decay gates heads=2 "
           r"kv_heads=2 n=64 n_k=64 d=16 dv=16 \w+: [0-9.]+ ms \(median of 2\)\n$")
    if r8.returncode or not re.match(pat, r8.stdout.decode()):
        fail("identity's timing line: exit %d, %r does not match %r"
             % (r8.returncode, r8.stdout.decode(), pat))
    else:
        print("  timing line: " + r8.stdout.decode().strip())
    r4 = run(["--seed", "8", "--features", "32"] + p + [outs[2]])  # replaces outs[2]
    if r4.returncode or np.array_equal(a, np.load(outs[2])):
        fail("another seed gave the same output (or failed: %d)" % r4.returncode)
    umask = os.umask(0)
    os.umask(umask)
    mode = os.stat(outs[2]).st_mode & 0o777
    if mode != 0o666 & ~umask:
        fail("output mode %o, expected %o" % (mode, 0o666 & ~umask))
    # An output that is not a regular file (here a FIFO) is written in place, not
    # replaced. (Not /dev/null: a tool that renamed over its output would replace
    # the device node, and the tests run as root in CI.)
    fifo = os.path.join(work, "fifo")
    os.mkfifo(fifo)
    # Held open read-write (Linux: does not block), so the tool's open succeeds at
    # once; its 8 KiB fit in the pipe's buffer, read after it exits.
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    r = run(["--seed", "7", "--features", "32"] + p + [fifo])
    got = b""
    try:
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            got += chunk
    except BlockingIOError:
        pass
    os.close(fd)
    same = False
    try:
        same = np.array_equal(np.load(io.BytesIO(got)), a)
    except ValueError:
        pass
    if r.returncode or r.stderr or not stat.S_ISFIFO(os.lstat(fifo).st_mode) or not same:
        fail("output a FIFO: exit %d %r, %d bytes read" % (r.returncode, r.stderr, len(got)))
    os.unlink(fifo)
    # A symbolic link is followed: its target is replaced and the link kept.
    target, link = os.path.join(work, "b.target.npy"), os.path.join(work, "b.link.npy")
    with open(target, "wb") as fh:
        fh.write(b"old contents")
    os.symlink(os.path.basename(target), link)
    r = run(["--seed", "7", "--features", "32"] + p + [link])
    if r.returncode or not os.path.islink(link) or not np.array_equal(np.load(target), a):
        fail("output through a symbolic link: exit %d %r, link %s"
             % (r.returncode, r.stderr, "kept" if os.path.islink(link) else "replaced"))
    h = run(["--help"])
    if h.returncode != 0 or not h.stdout.startswith(b"usage: favor-npy") or h.stderr:
        fail("--help: exit %d" % h.returncode)
    leftovers = [f for f in os.listdir(work) if ".tmp." in f]
    if leftovers:
        fail("temporary files left after successful runs: %s" % leftovers)
    print("  seeds, --repeat, --help, output mode %o, replacing an output: %s"
          % (mode, "ok" if not FAILURES else "see above"))


# --------------------------------------------------------------------------
# Failures
# --------------------------------------------------------------------------
NEGATIVE = 0


def expect_error(work, name, args, out, code=None, max_file_bytes=None, text=None):
    """Run twice (no output file; an existing one) and check the failure (text: a
    part its message must have)."""
    global NEGATIVE
    NEGATIVE += 1
    sentinel = b"an existing output that must survive\n"
    # the second run only where an existing output can be planted: not when OUT
    # is a directory, a device or in a directory that does not exist
    preexist = out is not None and os.path.dirname(out) == work and not os.path.lexists(out)
    for existing in (False, True) if preexist else (False,):
        if existing:
            with open(out, "wb") as fh:
                fh.write(sentinel)
        before = sorted(os.listdir(work))
        r = run(args, max_file_bytes)
        err = r.stderr.decode("utf-8", "replace")
        lines = err.splitlines()
        what = "%s%s" % (name, " (existing output)" if existing else "")
        if r.returncode < 0:
            fail("%s: killed by signal %d" % (what, -r.returncode))
        elif r.returncode == 0 or (code is not None and r.returncode != code) \
                or r.returncode not in (1, 2):
            fail("%s: exit %d, expected %s" % (what, r.returncode, code or "1 or 2"))
        if len(lines) != 1 or not err.endswith("\n") or \
                not lines[0].startswith("favor-npy: error: "):
            fail("%s: stderr is not one 'favor-npy: error:' line: %r" % (what, err))
        if text is not None and text not in err:
            fail("%s: the message does not say %r: %r" % (what, text, err))
        if r.stdout:
            fail("%s: wrote to stdout: %r" % (what, r.stdout[:200]))
        after = sorted(os.listdir(work))
        if after != before:
            fail("%s: files appeared or vanished: %s" % (what, sorted(set(before) ^ set(after))))
        if existing:
            with open(out, "rb") as fh:
                if fh.read() != sentinel:
                    fail("%s: the existing output was clobbered" % what)
            os.unlink(out)
        if not existing and lines:
            print("  %-28s exit %d: %s" % (name, r.returncode, lines[0][:110]))


def failures(work):
    print("failures (each must exit non-zero with one line on stderr, no output, no temp file):")
    rng = np.random.default_rng(3)
    bad = os.path.join(work, "bad")
    os.mkdir(bad)
    P = lambda name: os.path.join(bad, name)  # noqa: E731
    q = rng.normal(0, 0.5, (2, 32, 8)).astype(np.float32)
    save(P("q.npy"), q)
    save(P("k.npy"), q)
    save(P("v.npy"), q)
    out = P("out.npy")
    good = [P("q.npy"), P("k.npy"), P("v.npy")]
    raw = open(P("q.npy"), "rb").read()

    def as_q(name, args=()):
        """Q replaced by the file `name`"""
        return list(args) + [P(name), P("k.npy"), P("v.npy"), out]

    def write(name, data):
        with open(P(name), "wb") as fh:
            fh.write(data)
        return name

    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 32, 8), }"
    data = q.tobytes()
    cases = [
        ("truncated data", as_q(write("trunc.npy", raw[:-10]))),
        ("truncated header", as_q(write("trunch.npy", raw[:40]))),
        ("truncated prefix", as_q(write("truncp.npy", raw[:9]))),
        ("empty file", as_q(write("empty.npy", b""))),
        ("bad magic", as_q(write("magic.npy", b"\x93NUMPX" + raw[6:]))),
        ("not npy at all", as_q(write("text.npy", b"hello, world\n" * 20))),
        ("version 4.0", as_q(write("v4.npy", raw[:6] + b"\x04\x00" + raw[8:]))),
        ("trailing bytes", as_q(write("trail.npy", raw + b"\0" * 4))),
    ]
    for name, arr in (("int32", q.astype(np.int32)), ("int64", q.astype(np.int64)),
                      ("complex64", q.astype(np.complex64)), ("big-endian >f2", q.astype(">f2")),
                      ("big-endian >f4", q.astype(">f4")), ("big-endian >f8", q.astype(">f8")),
                      ("structured", np.zeros((2, 32), dtype=[("a", "<f4"), ("b", "<f4")])),
                      ("bool", q > 0)):
        fn = "dt-%s.npy" % name.replace(" ", "_").replace(">", "")
        save(P(fn), arr)
        cases.append(("dtype " + name, as_q(fn)))
    save(P("fortran.npy"), np.asfortranarray(rng.normal(0, 1, (32, 8)).astype(np.float32)))
    cases.append(("fortran_order True", [P("fortran.npy")] * 3 + [out]))
    raw_npy(P("nofortran.npy"), "{'descr': '<f4', 'shape': (2, 32, 8), }", data)
    raw_npy(P("extrakey.npy"), hdr[:-1] + "'x': 1, }", data)
    raw_npy(P("garbage.npy"), "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 32, 8)}",
            data)
    raw_npy(P("badshape.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }",
            data)
    raw_npy(P("notdict.npy"), "[1, 2, 3]", data)
    raw_npy(P("hdr-overflow-v1.npy"), hdr, data, hlen=0xFFFF)
    raw_npy(P("hdr-overflow-v2.npy"), hdr, data, version=(2, 0), hlen=0xFFFFFFFF)
    raw_npy(P("huge-shape.npy"),
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }",
            data)
    raw_npy(P("huge-dim.npy"),
            "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999, 8), }",
            data)
    raw_npy(P("huge-size.npy"),
            "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2147483648, 64), }", data)
    big = q.astype(np.float64)
    big[1, 2, 3] = 1e300
    save(P("f8-range.npy"), big)
    raw_npy(P("f16-descr.npy"),  # float128 where numpy has it, not float16
            "{'descr': '<f16', 'fortran_order': False, 'shape': (2, 32, 8), }", data * 4)
    raw_npy(P("zero-n.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 0, 8), }")
    raw_npy(P("zero-d.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 32, 0), }")
    for name, fn in (("missing fortran_order", "nofortran.npy"), ("extra header key", "extrakey.npy"),
                     ("bad fortran_order", "garbage.npy"), ("bad shape", "badshape.npy"),
                     ("header not a dict", "notdict.npy"),
                     ("header overflow v1", "hdr-overflow-v1.npy"),
                     ("header overflow v2", "hdr-overflow-v2.npy"),
                     ("size overflows size_t", "huge-shape.npy"),
                     ("dimension overflows", "huge-dim.npy"),
                     ("huge declared size", "huge-size.npy"),
                     ("float64 beyond float32", "f8-range.npy"),
                     ("dtype <f16 (float128)", "f16-descr.npy"),
                     ("zero n", "zero-n.npy"), ("zero d", "zero-d.npy")):
        cases.append((name, as_q(fn)))

    def arr(name, shape):
        save(P(name), rng.normal(0, 0.5, shape).astype(np.float32))
        return P(name)

    cases += [
        ("rank 1", [arr("r1.npy", (8,))] * 3 + [out]),
        ("rank 5", [arr("r5.npy", (1, 2, 2, 4, 8))] * 3 + [out]),
        ("rank mismatch", [arr("m2.npy", (32, 8)), P("k.npy"), P("v.npy"), out]),
        ("K d != Q d", [P("q.npy"), arr("k9.npy", (2, 32, 9)), P("v.npy"), out]),
        ("V n_k != K n_k", [P("q.npy"), P("k.npy"), arr("v31.npy", (2, 31, 8)), out]),
        ("V heads != K heads", [P("q.npy"), P("k.npy"), arr("v1h.npy", (1, 32, 8)), out]),
        ("kv heads do not divide", [arr("q3h.npy", (3, 32, 8)), P("k.npy"), P("v.npy"), out]),
        ("batch mismatch", [arr("q4a.npy", (2, 2, 16, 8)), arr("k4b.npy", (3, 2, 16, 8)),
                            arr("v4b.npy", (3, 2, 16, 8)), out]),
        ("W d != Q d", ["--projection", arr("w9.npy", (16, 9))] + good + [out]),
        ("W rank 3", ["--projection", arr("w3.npy", (2, 16, 8))] + good + [out]),
        ("W dtype int32", ["--projection", P("dt-int32.npy")] + good + [out]),
        ("--features != W rows", ["--features", "32", "--projection", arr("w16.npy", (16, 8))]
         + good + [out]),
        ("missing input", [P("nonexistent.npy"), P("k.npy"), P("v.npy"), out]),
        ("input is a directory", [bad, P("k.npy"), P("v.npy"), out]),
        ("output dir does not exist", good + [os.path.join(bad, "no", "such", "dir", "o.npy")]),
    ]
    os.mkdir(P("outdir"))
    with open(os.path.join(P("outdir"), "keep"), "w") as fh:
        fh.write("x")
    cases.append(("output is a directory", good + [P("outdir")]))
    # a finite input that --storage would make infinite: 65520 rounds (to even) to
    # 2^16, beyond float16; 1e39 in float64 beyond bfloat16
    h = q.copy()
    h[1, 5, 2] = 65520.0
    save(P("f16-range.npy"), h)
    cases.append(("--storage f16 overflow", ["--storage", "f16", P("f16-range.npy"), P("k.npy"),
                                             P("v.npy"), out]))
    b = q.astype(np.float64)
    b[0, 3, 1] = -1e39
    save(P("bf16-range.npy"), b)
    cases.append(("--storage bf16 overflow", ["--storage", "bf16", P("q.npy"), P("k.npy"),
                                              P("bf16-range.npy"), out]))
    # poly2's width grows as d^2 / 2: favor.h takes d <= 4096
    cases.append(("--kernel poly2 with d 4097", ["--kernel", "poly2"]
                  + [arr("d4097.npy", (2, 4097))] * 3 + [out]))
    os.symlink("no-such-file.npy", P("dangling.npy"))
    cases.append(("output a dangling link", good + [P("dangling.npy")]))
    # score variants: files of the wrong shape or type, and values favor.h refuses
    # (its own opts.error text: a negative softcap, a NaN slope, a +inf sink)
    sm = ["--method", "softmax"]
    save(P("heads3.npy"), np.array([0.5, 0.25, 0.125], np.float32))
    save(P("heads2x1.npy"), np.zeros((2, 1), np.float32))
    save(P("heads-i4.npy"), np.array([1, 2], np.int32))
    save(P("slope-nan.npy"), np.array([0.5, np.nan]))
    save(P("sink-inf.npy"), np.array([np.inf, 0.0], np.float32))
    save(P("mask-31.npy"), np.zeros((32, 31), np.float32))
    save(P("mask-3h.npy"), np.zeros((3, 32, 32), np.float32))
    save(P("mask-4d.npy"), np.zeros((1, 2, 32, 32), np.float32))
    save(P("lens-short.npy"), np.array([10, 21], np.int64))
    save(P("lens-long.npy"), np.array([10, 30], np.int32))
    save(P("lens-neg.npy"), np.array([8, -8, 32], np.int64))
    save(P("lens-2d.npy"), np.array([[16, 16]], np.int64))
    save(P("lens-f8.npy"), np.array([16.0, 16.0]))
    save(P("lens-u8.npy"), np.array([16, 16], np.uint64))
    cases += [
        ("--alibi of 3 for 2 heads", sm + ["--alibi", P("heads3.npy")] + good + [out]),
        ("--sinks of rank 2", sm + ["--sinks", P("heads2x1.npy")] + good + [out]),
        ("--alibi int32", sm + ["--alibi", P("heads-i4.npy")] + good + [out]),
        ("--alibi missing", sm + ["--alibi", P("nonexistent.npy")] + good + [out]),
        ("--mask [n, n_k - 1]", sm + ["--mask", P("mask-31.npy")] + good + [out]),
        ("--mask of 3 heads for 2", sm + ["--mask", P("mask-3h.npy")] + good + [out]),
        ("--mask of rank 4", sm + ["--mask", P("mask-4d.npy")] + good + [out]),
        ("--seqlens summing below n", ["--seqlens", P("lens-short.npy")] + good + [out]),
        ("--seqlens summing past n", ["--seqlens", P("lens-long.npy")] + good + [out]),
        ("--seqlens negative", ["--seqlens", P("lens-neg.npy")] + good + [out]),
        ("--seqlens of rank 2", ["--seqlens", P("lens-2d.npy")] + good + [out]),
        ("--seqlens float64", ["--seqlens", P("lens-f8.npy")] + good + [out]),
        ("--seqlens uint64", ["--seqlens", P("lens-u8.npy")] + good + [out]),
        ("--seqlens with n != n_k", ["--seqlens", P("lens-short.npy"), P("q.npy"),
                                     arr("k31.npy", (2, 31, 8)), arr("v31b.npy", (2, 31, 8)),
                                     out]),
        ("--mask int32", sm + ["--mask", P("dt-int32.npy")] + good + [out]),
    ]
    # gated linear attention: log-gates shaped as K without its last dimension
    # ([2, 32] here), gammas one per K head; values favor.h refuses (below)
    el = ["--method", "elu", "--causal"]
    save(P("gates-ok.npy"), np.full((2, 32), -0.1, np.float32))
    save(P("gates-31.npy"), np.full((2, 31), -0.1, np.float32))
    save(P("gates-3d.npy"), np.full((1, 2, 32), -0.1, np.float32))
    pos = np.full((2, 32), -0.1)
    pos[1, 7] = 0.25
    save(P("gates-pos.npy"), pos)
    save(P("decay-ok.npy"), np.array([0.9, 0.97], np.float32))
    save(P("decay-3.npy"), np.array([0.9, 0.97, 0.5], np.float32))
    save(P("decay-1.5.npy"), np.array([0.9, 1.5]))
    cases += [
        ("--gates [heads, n_k - 1]", el + ["--gates", P("gates-31.npy")] + good + [out]),
        ("--gates of K's rank", el + ["--gates", P("gates-3d.npy")] + good + [out]),
        ("--gates int32", el + ["--gates", P("dt-int32.npy")] + good + [out]),
        ("--decay of 3 for 2 heads", el + ["--decay", P("decay-3.npy")] + good + [out]),
    ]
    refused = [  # by favor.h, whose opts.error text the tool prints
        ("--softcap -1 (favor.h)", sm + ["--softcap", "-1"], "opts.softcap"),
        ("--alibi NaN (favor.h)", sm + ["--alibi", P("slope-nan.npy")], "opts.alibi[1]"),
        ("--sinks +inf (favor.h)", sm + ["--sinks", P("sink-inf.npy")], "opts.sinks[0]"),
        ("--gates positive (favor.h)", el + ["--gates", P("gates-pos.npy")],
         "opts.gates: head 1 (of batch element 0) row 7 is positive"),
        ("--decay 1.5 (favor.h)", el + ["--decay", P("decay-1.5.npy")], "opts.decay[1]"),
    ]
    for name, args in cases:
        expect_error(bad, name, args, args[-1], 1)
    for name, args, text in refused:
        expect_error(bad, name, args + good + [out], out, 1, text=text)
    # a write that fails half-way: 256 KiB of output against a file size limit of
    # 64 KiB (not smaller: LLVM's OpenMP runtime sizes a small file of its own)
    big = [arr("big.npy", (4, 256, 64))] * 3
    expect_error(bad, "write error (EFBIG)", big + [out], out, 1, max_file_bytes=1 << 16)
    if not os.path.islink(P("dangling.npy")):
        fail("output a dangling link: the link was replaced")
    if os.listdir(P("outdir")) != ["keep"]:
        fail("output is a directory: its contents changed: %s" % os.listdir(P("outdir")))

    usage = [
        ("no arguments", []),
        ("three files", good),
        ("five files", good + [out, out]),
        ("unknown option", ["--bogus"] + good + [out]),
        ("--method bogus", ["--method", "bogus"] + good + [out]),
        ("--kernel bogus", ["--kernel", "bogus"] + good + [out]),
        ("--features 0", ["--features", "0"] + good + [out]),
        ("--features abc", ["--features", "abc"] + good + [out]),
        ("--features -5", ["--features=-5"] + good + [out]),
        ("--scale -1", ["--scale", "-1"] + good + [out]),
        ("--scale nan", ["--scale", "nan"] + good + [out]),
        ("--threads -1", ["--threads", "-1"] + good + [out]),
        ("--repeat 0", ["--repeat", "0"] + good + [out]),
        ("--out-dtype f3", ["--out-dtype", "f3"] + good + [out]),
        ("--out-dtype bf16 alone", ["--out-dtype", "bf16"] + good + [out]),
        ("--out-dtype bf16 --storage f16", ["--storage", "f16", "--out-dtype", "bf16"] + good
         + [out]),
        ("--storage bogus", ["--storage", "f64"] + good + [out]),
        ("missing value", good + [out, "--seed"]),
        ("--kernel for softmax", ["--method", "softmax", "--kernel", "relu"] + good + [out]),
        ("--seed with --projection", ["--seed", "1", "--projection", P("w16.npy")] + good + [out]),
        ("--scale for elu", ["--method", "elu", "--scale", "0.5"] + good + [out]),
        ("--features with poly2", ["--kernel", "poly2", "--features", "8"] + good + [out]),
        ("--seed with poly2", ["--kernel", "poly2", "--seed", "1"] + good + [out]),
        ("--projection with poly2", ["--kernel", "poly2", "--projection", P("w16.npy")] + good
         + [out]),
        ("--kernel poly2 for elu", ["--method", "elu", "--kernel", "poly2"] + good + [out]),
        ("--window for favor", ["--window", "4,0"] + good + [out]),
        ("--softcap for elu", ["--method", "elu", "--softcap", "5"] + good + [out]),
        ("--sinks for elu", ["--method", "elu", "--sinks", P("heads3.npy")] + good + [out]),
        ("--mask for favor", ["--mask", P("mask-31.npy")] + good + [out]),
        ("--window 4", ["--method", "softmax", "--window", "4"] + good + [out]),
        ("--window 4,x", ["--method", "softmax", "--window", "4,x"] + good + [out]),
        ("--window 2^64,0", ["--method", "softmax", "--window", "18446744073709551616,0"]
         + good + [out]),
        ("--softcap abc", ["--method", "softmax", "--softcap", "abc"] + good + [out]),
        ("--softcap 1e-50", ["--method", "softmax", "--softcap", "1e-50"] + good + [out]),
        ("--kernel identity alone", ["--kernel", "identity"] + good + [out]),
        ("--features with identity", ["--kernel", "identity", "--no-normalizer", "--features",
                                      "8"] + good + [out]),
        ("--kernel identity for elu", ["--method", "elu", "--kernel", "identity",
                                       "--no-normalizer"] + good + [out]),
        ("--decay without --causal", ["--method", "elu", "--decay", P("decay-ok.npy")] + good
         + [out]),
        ("--gates without --causal", ["--gates", P("gates-ok.npy")] + good + [out]),
        ("--gates for softmax", ["--method", "softmax", "--causal", "--gates",
                                 P("gates-ok.npy")] + good + [out]),
        ("--no-normalizer for softmax", ["--method", "softmax", "--no-normalizer"] + good
         + [out]),
        ("--no-normalizer=1", ["--no-normalizer=1"] + good + [out]),
    ]
    for name, args in usage:
        expect_error(bad, name, args, out, 2)


def main():
    global TOOL, PREFIX
    if len(sys.argv) < 2:
        print("usage: %s [emulator [its options]] path/to/favor_npy" % sys.argv[0])
        return 2
    PREFIX = sys.argv[1:-1]
    TOOL = os.path.abspath(sys.argv[-1])
    if not os.access(TOOL, os.X_OK):
        print("interop: FAILED: %s is not an executable" % TOOL)
        return 1
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="favor-interop-") as work:
        agreement(work)
        score_variants(work)
        gated(work)
        sixteen_bit(work)
        behaviour(work)
        failures(work)
    summary = "%d comparisons with torch" % len(RESULTS)
    largest = []
    for narrow, what in ((False, "its tolerance"),
                         (True, "its tolerance with the 16-bit output's rounding")):
        group = [r for r in RESULTS if r[3] == narrow]
        if group:
            worst = max(group, key=lambda r: r[1] / r[2])
            largest.append("%s, %.1f%% of %s" % (worst[0], 100 * worst[1] / worst[2], what))
    if largest:
        summary += " (largest: %s)" % "; ".join(largest)
    summary += ", %d failure cases, %.1f s" % (NEGATIVE, time.time() - t0)
    if FAILURES:
        print("interop: FAILED (%d problems): %s" % (len(FAILURES), summary))
        return 1
    print("interop: PASSED: " + summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
