#!/usr/bin/env python3
"""Write the seed corpus of favor_fuzz.c (tests/fuzz/corpus/) and the finding
reproducers (tests/fuzz/repro/). The byte format is the one favor_fuzz.c decodes
(see its header comment); the seeds are small and cover every entry point.

    python3 tests/fuzz/make_corpus.py            # rewrites corpus/ and repro/
"""
import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# ---- encoders, mirroring the decoders of favor_fuzz.c ----------------------
LEN_TAB = [0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 66, 70, 79, 80]


def enc_len(n):
    if 1 <= n <= 12:
        return n - 1
    return 176 + LEN_TAB.index(n)


def enc_dim(d):
    return 255 if d == 0 else d - 1


def shape(hkv=1, grp=1, n=4, nk=5, d=8, dv=3, not_multiple=False):
    b = (hkv - 1) | (grp - 1) << 2
    if not_multiple:
        b |= 0xF0
    return bytes([b, enc_len(n), enc_len(nk), enc_dim(d), enc_dim(dv)])


KERNELS = {"elu1": 0, "positive": 1, "hyperbolic": 2, "trig": 3, "relu": 4}


def fcfg(kernel="positive", m=8, flags=0, seed=1, mut=0, mutp=0):
    k = KERNELS[kernel] if isinstance(kernel, str) else kernel
    return bytes([k, 255 if m == 0 else m - 1, flags, seed, mut, mutp])


def ocfg(causal=False, null=False, scale_b=0, scale_b2=0, threads_b=0, ws_mode=0, ws_p=0,
         lse_mode=0, lse_p=0, flags_b=None):
    fb = 0xFF if null else (flags_b if flags_b is not None else int(causal))
    return bytes([fb, scale_b, scale_b2, threads_b, ws_mode, ws_p, lse_mode, lse_p])


LAYOUT = {"packed": 0, "interleaved": 5, "padded": 6, "interpad": 7, "raw": 8, "fused": 9,
          "alias": 10, "absurd": 11, "null": 12, "zero": 13, "offset": 14}
# value modes: 0 nice +-2, 1 bytes/32, 2 bytes up to 1e4, 3 raw float bits,
# 4 specials, 5 nice with sparse specials, 6 one special everywhere, 7 +-1e4; +8: nice +-20
def view(layout="packed", vmode=0, p1=0, p2=0, p3=0):
    return bytes([LAYOUT[layout] | vmode << 4, p1, p2, p3])


# Element types (the extended format: bit 3 of the first byte set, then every
# tensor view takes a fifth byte; dec_dtype in favor_fuzz.c). "bad*" are values
# outside the enum: 3, -1, 7, INT_MIN.
DT = {"f32": 0, "f16": 128, "bf16": 190, "bad3": 252, "bad-1": 253, "bad7": 254, "badmin": 255}
EXT = 8


def tview(dt, layout="packed", vmode=0, p1=0, p2=0, p3=0):
    return view(layout, vmode, p1, p2, p3) + bytes([DT[dt]])


def tviews(*dts):
    return b"".join(tview(d) for d in dts)


P = view()  # a packed view of nice values

# Batches (the extended format: bit 4 of the first byte set, then every tensor
# view takes two more bytes after its dtype byte, if any: dec_batch and
# set_batch_stride in favor_fuzz.c). The batch: "call" (byte 0) is the call's
# batch (the first tensor's, or the state's; a first tensor given "call" gets
# 0), an int 0..4 is that batch (byte 160 + b), ("huge", i) the i-th huge value
# (SIZE_MAX, SIZE_MAX/2+1, 2^62, 2^32+1, SIZE_MAX/3+1, 2^33). The stride modes:
# "packed" outermost (one element's extent; for the column blocks of a fused
# group: the group's stride, [batch][rows][q|k|v|out] as in llm.c), "gap"
# outermost with a gap of 1 + par % 13 elements (fused: the group's, from its
# first member), "inter" interleaved below the smallest (par even) or the middle
# (par odd) of rows and heads (fused: the group's first member makes it
# [rows][batch][q|k|v|out]), "small" below one element's extent (batch elements
# that overlap), "zero", "huge" (par % 6: SIZE_MAX, SIZE_MAX/2+1, 2^62, 2^40+3,
# 2^32+1, SIZE_MAX-64).
BT = 16
BMODE = {"packed": 0, "gap": 3, "inter": 4, "small": 5, "zero": 6, "huge": 7}


def bat(b="call", mode="packed", par=0):
    if b == "call":
        bb = 0
    elif isinstance(b, int):
        bb = 160 + b
    else:
        bb = 240 + b[1]
    return bytes([bb, BMODE[mode] | par << 3])


def bview(layout="packed", vmode=0, p1=0, p2=0, p3=0, b="call", mode="packed", par=0, dt=None):
    return view(layout, vmode, p1, p2, p3) + (bytes([DT[dt]]) if dt else b"") + bat(b, mode, par)


def bviews(n, b=2, dt=None):
    """n packed views of batch b (the first explicit, the others the call's)"""
    return bview(b=b, dt=dt) + bview(dt=dt) * (n - 1)


# Score variants and packed sequences (the extended format: bit 5 of the first
# byte set, then the options take 10 more bytes after their 8: dec_ocfg and
# add_sv_views in favor_fuzz.c). on: "window", "softcap", "alibi", "sinks",
# "dsinks", "mask", "seqs". The window's sides (a negative side is unbounded)
# and the softcap are encoded by searching the harness's decoders; the modes:
# alibi/sinks value mode (bits 0-2), placement (bits 3-4: 2 aliased onto the
# par-th view holding enough, 3 alibi onto sinks), par (bits 5-7); dsinks mode
# (0-2 own buffer, 3 aliased onto the par-th view, 4 onto sinks, 5 onto alibi,
# 6 past the address space, 7 onto the mask; par in bits 3-7); the mask: bit 0
# one head per query head, bits 1-3 its pattern (0 the payload, 1 zeros, 2 -inf
# at random, 3 documents of L positions, 4 rows of -inf, 5 all -inf, 6 +inf at
# random, 7 NaN at random), bits 4-6 L - 1. The mask view follows the call's
# tensors; then the sequences' cuts: count - 1 bytes for q, then (unless seq_k
# is NULL) count - 1 for k.
SV = 32
SV_ON = {"window": 1, "softcap": 2, "alibi": 4, "sinks": 8, "dsinks": 16, "mask": 32, "seqs": 64}


def dec_win(b):
    tab = [(1 << 63) - 1, -(1 << 63), ((1 << 63) - 1) // 2, 1 << 40, 79, 80, 81, 100]
    if b < 192:
        return b % 48
    if b < 224:
        return 60 + b % 8
    if b < 248:
        return -(1 + b % 3)
    return tab[b - 248]


def enc_win(x):
    return next(b for b in range(256) if dec_win(b) == x)


CAP_TAB = ["nan", -1.0, "inf", "-inf", "-0", "FLT_MIN", 1e-45, 1e-40, "FLT_MAX", 1e-20, 1e30, 0.0,
           "-FLT_MIN", 3e38, 1e-3, 65504.0]


def enc_cap(c):
    if isinstance(c, str) or c in CAP_TAB:
        return 240 + CAP_TAB.index(c)
    return next(b for b in range(160) if abs(0.25 + b * 0.3 - c) < 0.151)


SEQ_KIND = {"valid": 0, "knull": 4, "order": 5, "ends": 6, "special": 7}


def sv(on=(), wl=0, wr=0, cap=2.0, am=0, sm=0, dm=0, mm=0, seqs=0, seq_kind="valid", seq_knull=False, qp=0):
    b0 = sum(SV_ON[x] for x in on)
    qm = seqs | SEQ_KIND[seq_kind] << 3 | (64 if seq_knull else 0)
    return bytes([b0, enc_win(wl), enc_win(wr), enc_cap(cap), am, sm, dm, mm, qm, qp])


# Gated linear attention (the extended format: bit 6 of the first byte set;
# dec_gt in favor_fuzz.c). Every feature configuration takes one more byte
# (gfcfg: bits 0-1 = 1 make the map FAVOR_IDENTITY, bit 2 initializes a map
# without W with count d), and the options 4 more bytes after the variants'
# (gt): which of FAVOR_NO_NORM, decay, gates, dgates, FAVOR_CAUSAL are on; the
# decay's values (0 typical, 1 all 1, 2 FLT_MIN/1e-45, 3 0.5, then one bad head:
# 4 zero, 5 1.5, 6 NaN, 7 -0.5), placement (0 own buffer, 2 over the par-th
# view, 3 over the gates) and par; the gates' pattern (0 uniform [-1, 0], 1
# zeros, 2 log sigmoid with exact zeros, 3 -80 at random, 4 edges, 5 -|payload|,
# 6 log 1/2, 7 all -80), one bad value (+0.5, NaN, -inf, +1e-45) and a forced
# dtype; the dgates' forced dtype and "dgates is the gates tensor". The gates
# and dgates views follow the call's tensors and the variants' views and cuts.
GT = 64
GT_ON = {"nonorm": 1, "decay": 2, "gates": 4, "dgates": 8, "causal": 16}
GT_BAD = {"pos": 0, "nan": 1, "-inf": 2, "tiny": 3}


def gfcfg(kernel="positive", m=8, flags=0, seed=1, mut=0, mutp=0, identity=False, count_d=False):
    return fcfg(kernel, m, flags, seed, mut, mutp) + bytes([(1 if identity else 0) | (4 if count_d else 0)])


def gt(on=(), decay=0, dplace=0, dpar=0, gates=0, bad=None, gdt=0, dgdt=0, dg_is_gates=False):
    b0 = sum(GT_ON[x] for x in on)
    b1 = decay | dplace << 3 | dpar << 5
    b2 = gates | (8 if bad is not None else 0) | gdt << 4 | (GT_BAD[bad] if bad is not None else 0) << 6
    b3 = dgdt | (4 if dg_is_gates else 0)
    return bytes([b0, b1, b2, b3])


def write(dirname, name, data):
    with open(os.path.join(dirname, name), "wb") as fp:
        fp.write(data)


def seeds():
    s = {}
    # ---- op 0: softmax forward ------------------------------------------------
    s["sm-packed"] = bytes([0, 0]) + shape() + ocfg() + P * 4
    s["sm-causal-gqa-chunks"] = (bytes([0, 1 | 4 | 8 * 5]) + shape(2, 2, 70, 65, 16, 8) +
                                 ocfg(True, ws_mode=1, ws_p=3, lse_mode=1) + P * 4)
    s["sm-causal-n-gt-nk"] = bytes([0, 0]) + shape(1, 3, 9, 3, 5, 4) + ocfg(True, lse_mode=1) + P * 4
    s["sm-layouts"] = (bytes([0, 1]) + shape(2, 1, 8, 8, 6, 6) + ocfg(ws_mode=3, ws_p=17) +
                       view("interleaved") + view("padded", 0, 2, 3) + view("interpad", 0, 1, 2) +
                       view("offset", 0, 0, 5, 3))
    s["sm-fused-qkvo"] = (bytes([0, 0]) + shape(2, 1, 7, 7, 4, 4) + ocfg() +
                          view("fused") * 4)  # [n][q|k|v|o]: FAVOR_E_ALIAS (FINDINGS.md)
    s["sm-absurd"] = bytes([0, 0]) + shape() + ocfg() + view("absurd", 0, 0, 1) + P * 3
    s["sm-absurd-addr"] = bytes([0, 0]) + shape() + ocfg() + P * 2 + view("absurd", 0, 7 << 2, 3) + P
    s["sm-raw-strides"] = (bytes([0, 0]) + shape(2, 1, 5, 5, 4, 4) + ocfg() +
                           view("raw", 0, 0x80 | 60, 0x80 | 30) + P * 3)
    s["sm-bad-options"] = bytes([0, 0]) + shape() + ocfg(flags_b=251, scale_b=203) + P * 4
    s["sm-bad-threads"] = bytes([0, 0]) + shape() + ocfg(threads_b=204) + P * 4
    s["sm-ws-small"] = bytes([0, 0]) + shape() + ocfg(ws_mode=2, ws_p=1) + P * 4
    s["sm-ws-alias"] = bytes([0, 0]) + shape() + ocfg(ws_mode=5, ws_p=0) + P * 4
    s["sm-nomem"] = bytes([0, 0]) + shape() + ocfg(ws_mode=6) + P * 4
    s["sm-specials"] = (bytes([0, 1]) + shape(1, 1, 6, 6, 3, 3) + ocfg(True, lse_mode=1) +
                        view(vmode=4) * 3 + P + bytes(range(0, 96, 1)))
    s["sm-big-values"] = bytes([0, 1 | 4]) + shape(1, 2, 17, 17, 20, 20) + ocfg(True) + view(vmode=7) * 3 + P
    s["sm-out-aliases-q"] = bytes([0, 0]) + shape() + ocfg() + P * 3 + view("alias", 0, 0, 0, 0)
    s["sm-null-zero"] = bytes([0, 0]) + shape() + ocfg() + view("null", 0, 0) + view("zero", 0, 0, 1) + P * 2
    # ---- op 1: softmax backward ----------------------------------------------
    s["smb-consistent-causal"] = (bytes([1, 1 | 2]) + shape(2, 2, 66, 64, 8, 5) +
                                  ocfg(True, lse_mode=3, ws_mode=1) + P * 8)
    s["smb-noncausal-80"] = bytes([1, 2]) + shape(1, 1, 80, 80, 20, 20) + ocfg() + P * 8
    s["smb-dq-aliases-q"] = bytes([1, 0]) + shape() + ocfg() + P * 5 + view("alias", 0, 0, 0, 1) + P * 2
    s["smb-off-by-one"] = bytes([1, 0]) + shape() + ocfg() + P * 6 + view(p3=0xF0 | 4 | 1) + P
    s["smb-lse-garbage"] = bytes([1, 0]) + shape(1, 1, 5, 7, 4, 4) + ocfg(True, lse_mode=1) + P * 8
    # ---- op 2: linear forward --------------------------------------------------
    for k, m in (("elu1", 0), ("positive", 24), ("hyperbolic", 12), ("trig", 16), ("relu", 20)):
        s["lin-causal-" + k] = (bytes([2, 1 | 4 | 8 * 25]) + shape(2, 2, 70, 70, 6, 5) +
                                fcfg(k, m if m else 6) + ocfg(True, ws_mode=1) + P * 4)
    s["lin-noncausal-gqa"] = bytes([2, 0]) + shape(1, 4, 9, 15, 7, 3) + fcfg("positive", 9, 1) + ocfg() + P * 4
    s["lin-decode"] = bytes([2, 4]) + shape(2, 1, 1, 33, 8, 8) + fcfg("hyperbolic", 4, 2) + ocfg(True) + P * 4
    s["lin-bad-kernel"] = bytes([2, 0]) + shape() + fcfg("positive", 8, mut=1) + ocfg() + P * 4
    s["lin-scale-nan"] = bytes([2, 0]) + shape() + fcfg("relu", 8, mut=3, mutp=11) + ocfg() + P * 4
    s["lin-out-aliases-w"] = bytes([2, 0]) + shape() + fcfg("positive", 8) + ocfg() + P * 3 + view("alias", 0, 0)
    s["lin-shrunk-count"] = bytes([2, 1]) + shape() + fcfg("trig", 8, mut=8, mutp=3) + ocfg(True) + P * 4
    # ---- op 3: linear backward -------------------------------------------------
    for k, m in (("elu1", 0), ("positive", 10), ("hyperbolic", 6), ("trig", 8), ("relu", 12)):
        s["linb-causal-" + k] = (bytes([3, 1]) + shape(2, 2, 66, 66, 5, 4) + fcfg(k, m if m else 5) +
                                 ocfg(True, ws_mode=1) + P * 7)
    s["linb-stash-in-ws"] = bytes([3, 1]) + shape(1, 4, 12, 9, 1, 1) + fcfg("positive", 3) + ocfg(True, ws_mode=1) + P * 7
    s["linb-noncausal"] = bytes([3, 0]) + shape(2, 1, 10, 15, 4, 6) + fcfg("relu", 7) + ocfg() + P * 7
    # ---- op 4: feature map -----------------------------------------------------
    for k, role in (("positive", 0), ("positive", 1), ("hyperbolic", 2), ("trig", 1), ("relu", 0),
                    ("elu1", 0)):
        s["fmap-%s-role%d" % (k, role)] = (bytes([4, 0]) + shape(2, 1, 66, 1, 9, 1) +
                                           fcfg(k, 5 if k != "elu1" else 9) + bytes([role]) + P * 2)
    s["fmap-bad-role"] = bytes([4, 0]) + shape() + fcfg() + bytes([241]) + P * 2
    # ---- op 5: the recurrent state ---------------------------------------------
    def step(kind, n=None, opts=None, smut=0):
        b = bytes([kind, smut])
        if kind % 8 == 7:  # reset: nothing more
            return b
        if kind % 8 < 5:
            b += bytes([enc_len(n)])
        return b + (opts if opts is not None else ocfg(True)) + P * 4
    s["state-extend-step-reset"] = (bytes([5, 1]) + shape(2, 2, 1, 1, 6, 4) + fcfg("positive", 8) +
                                    bytes([0, 3]) + step(0, 9) + step(5) + step(0, 70, ocfg(True, ws_mode=1)) +
                                    step(7))
    s["state-elu1-steps"] = (bytes([5, 0]) + shape(1, 2, 1, 1, 5, 5) + fcfg("elu1", 5) + bytes([0, 3]) +
                             step(5) + step(6) + step(5, smut=3) + step(6))
    s["state-trig-long"] = (bytes([5, 0]) + shape(1, 1, 1, 1, 4, 3) + fcfg("trig", 6) + bytes([0, 1]) +
                            step(0, 80) + step(0, 33))
    s["state-init-bad"] = bytes([5, 0]) + shape() + fcfg() + bytes([0xF0, 0])
    s["state-no-storage"] = bytes([5, 0]) + shape() + fcfg() + bytes([0xE8, 0])
    # ---- op 6: features ----------------------------------------------------------
    for k in range(5):
        for flags in (0, 1, 2, 3):
            if k == 0 and flags:
                continue
            s["features-k%d-f%d" % (k, flags)] = (bytes([6, 0, k, 0, 11, 23 if k else 12, flags]) +
                                                  struct.pack("<Q", 1000 * k + flags) + bytes([flags]))
    s["features-huge"] = bytes([6, 0, 1, 2, 255, 255, 0]) + struct.pack("<Q", 5)
    s["features-bad-kernel"] = bytes([6, 0, 251, 0, 3, 3, 0]) + struct.pack("<Q", 5)
    # ---- op 7: small functions -----------------------------------------------------
    s["misc"] = bytes([7, 0]) + struct.pack("<IIQQ", 9, 3, 1 << 62, 5)
    s["misc-small"] = bytes([7, 0]) + struct.pack("<IIQQ", 0xFFFFFFFF, 2, 3, 4)
    s.update(dtype_seeds())
    s.update(batch_seeds())
    s.update(variant_seeds())
    s.update(gated_seeds())
    return s


def dtype_seeds():
    """Seeds of the extended format: element types per tensor (I11, I12)."""
    s = {}
    # ---- softmax forward ----
    s["dt-sm-f16"] = bytes([0 | EXT, 0]) + shape() + ocfg() + tviews("f16", "f16", "f16", "f16")
    s["dt-sm-bf16-causal-chunks"] = (bytes([0 | EXT, 1 | 4 | 8 * 5]) + shape(2, 2, 70, 65, 16, 8) +
                                     ocfg(True, ws_mode=1, ws_p=3, lse_mode=1) + tviews("bf16", "bf16", "bf16", "bf16"))
    s["dt-sm-mixed-decode"] = (bytes([0 | EXT, 1]) + shape(2, 2, 1, 70, 8, 8) + ocfg(True, ws_mode=1, lse_mode=1) +
                               tviews("bf16", "f16", "f32", "f16"))
    s["dt-sm-f32-in-f16-out"] = (bytes([0 | EXT, 1]) + shape(1, 1, 66, 66, 5, 7) + ocfg(ws_mode=1) +
                                 tviews("f32", "f32", "f32", "f16"))
    s["dt-sm-layouts"] = (bytes([0 | EXT, 1]) + shape(2, 1, 8, 8, 6, 6) + ocfg(ws_mode=3, ws_p=17) +
                          tview("f16", "interleaved") + tview("bf16", "padded", 0, 2, 3) +
                          tview("f32", "interpad", 0, 1, 2) + tview("f16", "offset", 0, 0, 5, 3))
    s["dt-sm-fused-mixed"] = (bytes([0 | EXT, 0]) + shape(2, 1, 7, 7, 3, 3) + ocfg() +
                              tview("f16", "fused") + tview("f32", "fused") + tview("bf16", "fused") +
                              tview("f16", "fused"))
    s["dt-sm-raw16"] = (bytes([0 | EXT, 0]) + shape(1, 1, 6, 6, 3, 3) + ocfg(True, lse_mode=1) +
                        tview("f16", vmode=3) * 2 + tview("bf16", vmode=3) + tview("f16") + bytes(range(7, 250, 3)))
    s["dt-sm-big-values"] = (bytes([0 | EXT, 1 | 4]) + shape(1, 2, 17, 17, 20, 20) + ocfg(True) +
                             tview("f16", vmode=7) * 3 + tview("f16"))
    s["dt-sm-out-aliases-q"] = bytes([0 | EXT, 0]) + shape() + ocfg() + tviews("f16", "f32", "f32") + tview("f16", "alias")
    s["dt-sm-bad-k"] = bytes([0 | EXT, 0]) + shape() + ocfg() + tviews("f32", "bad3", "f16", "f16")
    s["dt-sm-bad-out-null-q"] = (bytes([0 | EXT, 0]) + shape() + ocfg() + tview("f16", "null") +
                                 tviews("f32", "f32", "bad-1"))
    s["dt-sm-bad-zero-q"] = (bytes([0 | EXT, 0]) + shape() + ocfg() + tview("bad3", "zero", 0, 0, 1) +
                             tviews("f16", "f16", "f16"))  # the dtype is checked before the sizes
    s["dt-sm-bad-after-zero"] = (bytes([0 | EXT, 0]) + shape() + ocfg() + tview("f16", "zero", 0, 0, 1) +
                                 tviews("f32", "badmin", "f16"))
    # ---- softmax backward ----
    s["dt-smb-consistent-bf16"] = (bytes([1 | EXT, 1 | 2]) + shape(2, 2, 66, 64, 8, 5) +
                                   ocfg(True, lse_mode=3, ws_mode=1) + tviews(*["bf16"] * 8))
    s["dt-smb-f32-in-f16-grads"] = (bytes([1 | EXT, 2]) + shape(1, 1, 9, 9, 4, 4) + ocfg(ws_mode=1) +
                                    tviews("f32", "f32", "f32", "f32", "f32", "f16", "f16", "f16"))
    s["dt-smb-mixed"] = (bytes([1 | EXT, 1 | 2]) + shape(1, 2, 12, 10, 6, 3) + ocfg(True, lse_mode=1) +
                         tviews("f16", "bf16", "f32", "f16", "bf16", "f32", "bf16", "f16"))
    s["dt-smb-bad-dv"] = bytes([1 | EXT, 0]) + shape() + ocfg() + tviews("f16", "f16", "f16", "f16", "f16", "f16", "f16", "bad7")
    s["dt-smb-bad-dk-shape"] = (bytes([1 | EXT, 0]) + shape() + ocfg() + tviews("f32", "f32", "f32", "f32") +
                                tview("f32", p3=0xF0 | 4 | 1) + tviews("f16", "bad3", "f16"))
    # ---- linear forward and backward ----
    for k, m in (("positive", 24), ("elu1", 0), ("trig", 16)):
        s["dt-lin-causal-" + k] = (bytes([2 | EXT, 1 | 4 | 8 * 25]) + shape(2, 2, 70, 70, 6, 5) +
                                   fcfg(k, m if m else 6) + ocfg(True, ws_mode=1) + tviews("f16", "bf16", "f16", "bf16"))
    s["dt-lin-noncausal-f32-in-bf16-out"] = (bytes([2 | EXT, 0]) + shape(1, 4, 9, 15, 7, 3) + fcfg("positive", 9, 1) +
                                             ocfg(ws_mode=1) + tviews("f32", "f32", "f32", "bf16"))
    s["dt-lin-bad-q-f-null"] = (bytes([2 | EXT, 0]) + shape() + fcfg("positive", 8, mut=15, mutp=1) + ocfg() +
                                tviews("bad3", "f16", "f16", "f16"))
    for k, m in (("positive", 10), ("relu", 12)):
        s["dt-linb-causal-" + k] = (bytes([3 | EXT, 1]) + shape(2, 2, 66, 66, 5, 4) + fcfg(k, m) +
                                    ocfg(True, ws_mode=1) + tviews("bf16", "f16", "f16", "bf16", "f16", "bf16", "f16"))
    s["dt-linb-f32-in-f16-grads"] = (bytes([3 | EXT, 1]) + shape(2, 1, 10, 15, 4, 6) + fcfg("relu", 7) +
                                     ocfg(ws_mode=1) + tviews("f32", "f32", "f32", "f32", "f16", "f16", "f16"))
    s["dt-linb-stash-in-ws"] = (bytes([3 | EXT, 1]) + shape(1, 4, 12, 9, 1, 1) + fcfg("positive", 3) +
                                ocfg(True, ws_mode=1) + tviews("f16", "f16", "f16", "f16", "bf16", "bf16", "bf16"))
    s["dt-linb-bad-dout"] = (bytes([3 | EXT, 0]) + shape() + fcfg("positive", 8) + ocfg() +
                             tviews("f16", "f16", "f16", "bad-1", "f16", "f16", "f16"))
    # ---- feature map ----
    for k, role, dx, dp in (("positive", 1, "f16", "f16"), ("hyperbolic", 0, "bf16", "f32"),
                            ("trig", 1, "f32", "bf16"), ("elu1", 2, "f16", "bf16")):
        s["dt-fmap-%s-role%d" % (k, role)] = (bytes([4 | EXT, 0]) + shape(2, 1, 66, 1, 9, 1) +
                                              fcfg(k, 5 if k != "elu1" else 9) + bytes([role]) + tviews(dx, dp))
    s["dt-fmap-bad-phi"] = bytes([4 | EXT, 0]) + shape() + fcfg() + bytes([0]) + tviews("f16", "bad7")
    s["dt-fmap-bad-x-bad-features"] = bytes([4 | EXT, 0]) + shape() + fcfg(mut=1) + bytes([0]) + tviews("bad3", "f16")

    # ---- the recurrent state ----
    def step(kind, dts, n=None, opts=None, smut=0):
        b = bytes([kind, smut])
        if kind % 8 == 7:
            return b
        if kind % 8 < 5:
            b += bytes([enc_len(n)])
        return b + (opts if opts is not None else ocfg(True)) + tviews(*dts)
    s["dt-state-extend-step"] = (bytes([5 | EXT, 1]) + shape(2, 2, 1, 1, 6, 4) + fcfg("positive", 8) + bytes([0, 3]) +
                                 step(0, ("f16", "f16", "f16", "f16"), 9) + step(5, ("bf16", "bf16", "bf16", "bf16")) +
                                 step(0, ("f32", "bf16", "f16", "f32"), 70, ocfg(True, ws_mode=1)) +
                                 step(5, ("f16", "f32", "bf16", "f16")))
    s["dt-state-elu1-steps"] = (bytes([5 | EXT, 0]) + shape(1, 2, 1, 1, 5, 5) + fcfg("elu1", 5) + bytes([0, 3]) +
                                step(5, ("f16",) * 4) + step(6, ("bf16",) * 4) + step(5, ("f16", "bad3", "f16", "f16")) +
                                step(6, ("f16",) * 4))
    # ---- small functions: a trailing byte picks favor_tensor_packed_as's type ----
    s["dt-misc-f16"] = bytes([7 | EXT, 0]) + struct.pack("<IIQQ", 1, 3, 1 << 62, 5) + bytes([1])
    s["dt-misc-bf16"] = bytes([7 | EXT, 0]) + struct.pack("<IIQQ", 2, 3, 1 << 62, 7) + bytes([2])
    return s


def batch_seeds():
    """Seeds of the batch extension (bit 4): batch counts and strides per tensor."""
    s = {}
    F = lambda **kw: bview("fused", **kw)  # a column block of fused group 0
    # ---- softmax forward ----
    s["bt-sm-packed-lse"] = bytes([0 | BT, 1]) + shape(2, 1, 7, 9, 8, 5) + ocfg(lse_mode=1) + bviews(4, 3)
    s["bt-sm-causal-gqa-chunks"] = (bytes([0 | BT, 1 | 4 | 8 * 5]) + shape(2, 2, 70, 65, 16, 8) +
                                    ocfg(True, ws_mode=1, lse_mode=1) + bviews(4, 2))
    # llm.c: q, k, v column blocks of one [B][T][q|k|v] buffer (batch stride T x row)
    s["bt-sm-llmc"] = (bytes([0 | BT, 1 | 4 | 8 * 3]) + shape(2, 1, 12, 12, 8, 8) + ocfg(True, lse_mode=1) +
                       F(b=4) + F() + F() + bview())
    s["bt-sm-llmc-out-block"] = (bytes([0 | BT, 1]) + shape(2, 1, 9, 9, 4, 4) + ocfg(ws_mode=1) +
                                 F(b=3) + F() + F() + F())  # [B][T][q|k|v|out]: accepted
    s["bt-sm-llmc-gap-decode"] = (bytes([0 | BT, 1]) + shape(2, 2, 1, 33, 8, 8) + ocfg(True) +
                                  F(b=2, mode="gap", par=3) + F() + F() + bview())
    s["bt-sm-fused-batch-inner"] = (bytes([0 | BT, 1]) + shape(2, 1, 7, 7, 3, 3) + ocfg() +
                                    F(b=3, mode="inter") + F() + F() + F())  # [T][B][q|k|v|out]
    s["bt-sm-interleaved"] = (bytes([0 | BT, 1]) + shape(2, 1, 8, 8, 6, 6) + ocfg(ws_mode=3, ws_p=17) +
                              bview("interleaved", b=2, mode="inter", par=0) +
                              bview("padded", 0, 2, 3, mode="inter", par=1) +
                              bview("interpad", 0, 1, 2, mode="gap", par=5) +
                              bview("offset", 0, 0, 5, 3, mode="inter", par=3))
    # a huge batch on the first member of an interleaved fused group (that view is
    # absurd): the others, of batch 1, keep their small strides
    s["bt-sm-fused-huge-first"] = (bytes([0 | BT, 1]) + shape(2, 1, 9, 9, 4, 4) + ocfg() +
                                   F(b=("huge", 0), mode="inter") + F(b=1) + F() + bview())
    s["bt-sm-zero-and-one"] = (bytes([0 | BT, 1]) + shape(1, 2, 5, 6, 4, 3) + ocfg() +
                               bview(b=0) + bview(b=1, mode="huge") + bview(b=0, mode="zero") +
                               bview(b=1, mode="small", par=7))  # one element each: strides ignored
    s["bt-sm-mismatch"] = bytes([0 | BT, 0]) + shape() + ocfg() + bview(b=2) + bview(b=3) + bview() * 2
    s["bt-sm-out-overlap"] = (bytes([0 | BT, 0]) + shape(2, 1, 5, 5, 4, 4) + ocfg() + bviews(3, 2) +
                              bview(mode="small", par=4))
    s["bt-sm-stride-zero"] = bytes([0 | BT, 0]) + shape() + ocfg() + bview(b=2, mode="zero") + bview() * 3
    s["bt-sm-huge-batch"] = bytes([0 | BT, 0]) + shape(2, 1) + ocfg() + bview(b=2) + bview(b=("huge", 0)) + bview() * 2
    s["bt-sm-huge-batch-addr"] = bytes([0 | BT, 0]) + shape() + ocfg() + bview(b=("huge", 3)) + bviews(3, 2)
    s["bt-sm-huge-stride"] = bytes([0 | BT, 0]) + shape() + ocfg() + bviews(3, 2) + bview(mode="huge", par=0)
    s["bt-sm-huge-stride-addr"] = bytes([0 | BT, 0]) + shape() + ocfg() + bview(b=2, mode="huge", par=3) + bview() * 3
    s["bt-sm-f16-llmc"] = (bytes([0 | EXT | BT, 1]) + shape(2, 1, 10, 10, 8, 8) + ocfg(True, lse_mode=1) +
                           F(b=2, dt="f16") + F(dt="bf16") + F(dt="f32") + bview(dt="f16"))
    # ---- softmax backward ----
    s["bt-smb-consistent"] = (bytes([1 | BT, 1 | 2]) + shape(2, 2, 66, 64, 8, 5) +
                              ocfg(True, lse_mode=3, ws_mode=1) + bviews(8, 2))
    s["bt-smb-llmc"] = (bytes([1 | BT, 2]) + shape(2, 1, 9, 9, 4, 4) + ocfg(True, ws_mode=1) +
                        F(b=3) + F() + F() + bview() * 2 + bview("fused", 0, 1) * 3)  # grads: group 1
    s["bt-smb-grad-mismatch"] = (bytes([1 | BT, 0]) + shape() + ocfg() + bviews(6, 2) + bview(b=3) + bview())
    s["bt-smb-f16"] = (bytes([1 | EXT | BT, 1 | 2]) + shape(1, 2, 12, 10, 6, 3) + ocfg(True, lse_mode=1) +
                       bviews(8, 2, "bf16"))
    # dout an f16 view over the bytes the forward writes as out (fp32): the promise
    # of finite dout must be judged after the forward (the CI crash of 6dbfe62, as
    # the fuzzer wrote it; the harness once judged it before, and called NaN dq a bug)
    s["dt-smb-dout-over-out"] = bytes.fromhex(
        "090302f7050b020000000008050429b9b91313010000000000000000807000000001000a030095"
        "95959595959595959574959595959595959595959595800000000000002900be004300000080")
    # ---- linear forward and backward ----
    s["bt-lin-causal-positive"] = (bytes([2 | BT, 1 | 4 | 8 * 25]) + shape(2, 2, 70, 70, 6, 5) +
                                   fcfg("positive", 24) + ocfg(True, ws_mode=1) +
                                   bview(b=2) + bview(mode="inter") + bview(mode="gap", par=2) + bview("interleaved"))
    s["bt-lin-llmc-elu1"] = (bytes([2 | BT, 1 | 4 | 8 * 3]) + shape(2, 1, 12, 12, 6, 6) + fcfg("elu1", 6) +
                             ocfg(True) + F(b=3) + F() + F() + bview())
    s["bt-lin-f16-trig"] = (bytes([2 | EXT | BT, 1]) + shape(1, 4, 9, 15, 7, 3) + fcfg("trig", 9, 1) +
                            ocfg(ws_mode=1) + bviews(3, 2, "f16") + bview(dt="bf16"))
    s["bt-linb-causal-relu"] = (bytes([3 | BT, 1]) + shape(2, 2, 66, 66, 5, 4) + fcfg("relu", 12) +
                                ocfg(True, ws_mode=1) + bviews(7, 2))
    s["bt-linb-inter-positive"] = (bytes([3 | BT, 1]) + shape(2, 1, 10, 15, 4, 6) + fcfg("positive", 7) +
                                   ocfg(ws_mode=1) + bview("interleaved", b=3, mode="inter", par=1) +
                                   bview(mode="inter") * 3 + bview(mode="gap", par=9) * 3)
    # ---- feature map ----
    s["bt-fmap-positive"] = (bytes([4 | BT, 0]) + shape(2, 1, 66, 1, 9, 1) + fcfg("positive", 5) + bytes([1]) +
                             bview(b=3) + bview(mode="inter", par=1))
    s["bt-fmap-mismatch"] = bytes([4 | BT, 0]) + shape() + fcfg() + bytes([0]) + bview(b=2) + bview(b=3)

    # ---- the recurrent state: one byte after the init mutation, the state's batch ----
    def step(kind, n=None, opts=None, smut=0, views=None):
        b = bytes([kind, smut])
        if kind % 8 == 7:
            return b
        if kind % 8 < 5:
            b += bytes([enc_len(n)])
        return b + (opts if opts is not None else ocfg(True)) + (views if views is not None else bview() * 4)
    s["bt-state-extend-step"] = (bytes([5 | BT, 1]) + shape(2, 2, 1, 1, 6, 4) + fcfg("positive", 8) +
                                 bytes([0, 2, 3]) + step(0, 9) + step(5) + step(0, 70, ocfg(True, ws_mode=1)) +
                                 step(5))
    s["bt-state-mismatch-reset"] = (bytes([5 | BT, 0]) + shape(1, 2, 1, 1, 5, 5) + fcfg("elu1", 5) +
                                    bytes([0, 3, 3]) + step(5, views=bview(b=2) + bview() * 3) +
                                    step(0, 7, views=bview(b=3) * 4) + step(7) + step(6))
    s["bt-state-f16"] = (bytes([5 | EXT | BT, 0]) + shape(2, 1, 1, 1, 4, 3) + fcfg("trig", 6) + bytes([0, 4, 1]) +
                         step(0, 33, views=bview(dt="f16") + bview(dt="bf16") + bview(dt="f16") + bview(dt="f32")) +
                         step(5, views=bview(dt="bf16") * 4))
    # ---- small functions: 8 more bytes, favor_tensor_batched's batch ----
    s["bt-misc"] = bytes([7 | BT, 0]) + struct.pack("<IIQQ", 1, 3, 5, 7) + bytes([1]) + struct.pack("<Q", 4)
    s["bt-misc-overflow"] = (bytes([7 | BT, 0]) + struct.pack("<IIQQ", 2, 3, 1 << 20, 1 << 20) + bytes([0]) +
                             struct.pack("<Q", 1 << 40))
    return s


def variant_seeds():
    """Seeds of the variant extension (bit 5): window, softcap, alibi, sinks,
    dsinks, masks and packed sequences in every entry point taking options."""
    s = {}
    M = P  # a packed mask view (fp32)
    # ---- softmax forward ----
    # GPT-OSS: causal, window 16, a sink per head; lse; the causality check (cut 40)
    s["sv-sm-gptoss"] = (bytes([0 | SV, 1 | 4 | 8 * 12]) + shape(2, 2, 70, 70, 8, 8) +
                         ocfg(True, lse_mode=1) + sv(("window", "sinks"), wl=16, wr=0, sm=1) + P * 4)
    # Gemma 2: softcap 30, a window of 8 on each side, not causal, n < n_k
    s["sv-sm-gemma"] = (bytes([0 | SV, 1 | 4 | 8 * 30]) + shape(1, 2, 33, 80, 16, 8) +
                        ocfg(lse_mode=1, ws_mode=1) + sv(("window", "softcap"), wl=8, wr=8, cap=30.0) +
                        view(vmode=8) * 3 + P)
    s["sv-sm-alibi-causal"] = (bytes([0 | SV, 1 | 4 | 8 * 20]) + shape(1, 4, 66, 66, 8, 4) +
                               ocfg(True, lse_mode=1) + sv(("alibi",)) + P * 4)
    s["sv-sm-all"] = (bytes([0 | SV, 1]) + shape(2, 2, 17, 33, 6, 5) + ocfg(True, lse_mode=1) +
                      sv(("window", "softcap", "alibi", "sinks", "mask"), wl=-1, wr=3, cap=5.0, sm=3, mm=1 | 2 << 1) +
                      P * 4 + M)
    s["sv-sm-mask-f16-heads"] = (bytes([0 | EXT | SV, 1]) + shape(2, 2, 65, 70, 8, 8) + ocfg(lse_mode=1) +
                                 sv(("mask",), mm=1 | 2 << 1) + tviews("f16", "f16", "bf16", "f16") + tview("f16"))
    s["sv-sm-mask-doc-batched"] = (bytes([0 | BT | SV, 1]) + shape(2, 1, 64, 64, 8, 8) + ocfg(lse_mode=1) +
                                   sv(("mask",), mm=3 << 1 | 5 << 4) + bviews(4, 2) + bview())
    s["sv-sm-mask-one-batch"] = (bytes([0 | BT | EXT | SV, 1]) + shape(1, 2, 9, 12, 4, 4) + ocfg(True) +
                                 sv(("mask",), mm=1 | 4 << 1) + bviews(4, 3, "bf16") + bview(b=1, dt="bf16"))
    s["sv-sm-mask-empty-rows-sinks"] = (bytes([0 | SV, 1]) + shape(1, 2, 9, 9, 4, 4) + ocfg(lse_mode=1) +
                                        sv(("mask", "sinks"), mm=4 << 1, sm=3) + P * 4 + M)
    s["sv-sm-mask-all-neginf"] = (bytes([0 | SV, 1]) + shape(2, 1, 5, 33, 4, 4) + ocfg(lse_mode=1) +
                                  sv(("mask",), mm=5 << 1) + P * 4 + M)
    s["sv-sm-mask-nan"] = bytes([0 | SV, 1]) + shape(1, 1, 8, 8, 4, 4) + ocfg(lse_mode=1) + sv(("mask",), mm=7 << 1) + P * 5
    s["sv-sm-mask-inf"] = bytes([0 | SV, 0]) + shape(1, 1, 8, 8, 4, 4) + ocfg() + sv(("mask",), mm=6 << 1) + P * 5
    s["sv-sm-mask-aliases-out"] = (bytes([0 | SV, 0]) + shape(1, 1, 6, 6, 6, 6) + ocfg() + sv(("mask",), mm=1 << 1) +
                                   P * 4 + view("alias", 0, 3, 0))
    s["sv-sm-mask-aliases-q"] = (bytes([0 | SV, 1]) + shape(1, 1, 6, 6, 6, 6) + ocfg() + sv(("mask",)) +
                                 P * 4 + view("alias", 0, 0, 1))
    s["sv-sm-mask-off-by-one"] = (bytes([0 | SV, 0]) + shape(1, 1, 6, 7, 4, 4) + ocfg() + sv(("mask",)) +
                                  P * 4 + view(p3=0xF0 | 2))
    s["sv-sm-mask-null"] = bytes([0 | SV, 0]) + shape() + ocfg() + sv(("mask",)) + P * 4 + view("null", 0, 1)
    s["sv-sm-seqs-causal"] = (bytes([0 | SV, 1 | 4 | 8 * 30]) + shape(2, 1, 66, 66, 8, 8) + ocfg(True, lse_mode=1) +
                              sv(("seqs",), seqs=3, seq_knull=True) + P * 4 + bytes([20, 45]))
    s["sv-sm-seqs-unequal"] = (bytes([0 | SV, 1 | 4 | 8 * 9]) + shape(1, 2, 17, 33, 4, 4) + ocfg(True, lse_mode=1) +
                               sv(("seqs", "mask"), seqs=4, mm=2 << 1) + P * 4 + M + bytes([0, 5, 5, 10, 30, 39]))
    s["sv-sm-seqs-window-sinks"] = (bytes([0 | SV, 1 | 4 | 8 * 15]) + shape(2, 2, 64, 64, 8, 8) +
                                    ocfg(lse_mode=1) + sv(("seqs", "window", "sinks"), wl=4, wr=2, sm=1, seqs=2) +
                                    P * 4 + bytes([33, 33]))
    s["sv-sm-decode-window"] = (bytes([0 | SV, 1]) + shape(2, 2, 1, 80, 8, 8) + ocfg(lse_mode=1, ws_mode=1) +
                                sv(("window", "sinks", "alibi"), wl=7, wr=-1, sm=3) + P * 4)
    s["sv-sm-window-flag-only"] = (bytes([0 | SV, 1 | 4 | 8 * 3]) + shape(1, 1, 9, 9, 4, 4) + ocfg(lse_mode=1) +
                                   sv(("window",), wl=0, wr=0) + P * 4)
    s["sv-sm-softcap-tiny"] = bytes([0 | SV, 1]) + shape(1, 1, 5, 5, 4, 4) + ocfg() + sv(("softcap",), cap=1e-45) + P * 4
    s["sv-sm-softcap-nan"] = bytes([0 | SV, 0]) + shape() + ocfg() + sv(("softcap",), cap="nan") + P * 4
    s["sv-sm-alibi-inf"] = bytes([0 | SV, 0]) + shape(1, 2) + ocfg() + sv(("alibi",), am=5) + P * 4
    s["sv-sm-sinks-nan"] = bytes([0 | SV, 0]) + shape(1, 2) + ocfg() + sv(("sinks",), sm=4) + P * 4
    s["sv-sm-seqs-order"] = bytes([0 | SV, 0]) + shape(1, 1, 9, 9) + ocfg() + sv(("seqs",), seqs=3, seq_kind="order") + P * 4 + bytes([3, 6, 3, 6])
    s["sv-sm-seqs-null"] = bytes([0 | SV, 0]) + shape() + ocfg() + sv(("seqs",), seqs=2, seq_kind="special", qp=0) + P * 4 + bytes([1, 1])
    s["sv-sm-seqs-max"] = bytes([0 | SV, 0]) + shape() + ocfg() + sv(("seqs",), seqs=2, seq_kind="special", qp=1) + P * 4 + bytes([1, 1])
    s["sv-sm-seqs-knull-unequal"] = bytes([0 | SV, 0]) + shape(1, 1, 4, 5) + ocfg() + sv(("seqs",), seqs=2, seq_kind="knull") + P * 4 + bytes([2])
    s["sv-sm-lse-onto-mask"] = (bytes([0 | SV, 0]) + shape(1, 1, 6, 6, 4, 4) + ocfg(lse_mode=2, lse_p=4) +
                                sv(("mask",)) + P * 5)
    s["sv-sm-ws-onto-mask"] = bytes([0 | SV, 0]) + shape(1, 1, 6, 6, 4, 4) + ocfg(ws_mode=5, ws_p=4) + sv(("mask",)) + P * 5
    # alibi and sinks over the bytes of out, lse and the workspace (FINDING-8)
    s["sv-sm-alibi-onto-out"] = (bytes([0 | SV, 1]) + shape(1, 2, 6, 6, 4, 4) + ocfg() +
                                 sv(("alibi",), am=2 << 3 | 3 << 5) + P * 4)
    s["sv-sm-sinks-onto-lse"] = (bytes([0 | SV, 1]) + shape(1, 2, 6, 6, 4, 4) + ocfg(lse_mode=1) +
                                 sv(("sinks",), sm=1 | 2 << 3 | 4 << 5) + P * 4)
    s["sv-sm-ws-onto-sinks"] = (bytes([0 | SV, 1]) + shape(1, 2, 6, 6, 4, 4) + ocfg(ws_mode=5, ws_p=4) +
                                sv(("sinks",), sm=1) + P * 4)
    # ---- softmax backward ----
    s["sv-smb-gptoss"] = (bytes([1 | SV, 1 | 2]) + shape(2, 2, 66, 70, 8, 5) + ocfg(True, lse_mode=3, ws_mode=1) +
                          sv(("window", "sinks", "dsinks"), wl=16, sm=1) + P * 8)
    s["sv-smb-gemma"] = (bytes([1 | SV, 1 | 2]) + shape(1, 2, 33, 33, 8, 8) + ocfg(lse_mode=1) +
                         sv(("window", "softcap", "alibi"), wl=8, wr=8, cap=20.0) + P * 8)
    s["sv-smb-mask-seqs"] = (bytes([1 | SV, 1 | 2]) + shape(2, 1, 33, 33, 6, 6) + ocfg(True, lse_mode=1) +
                             sv(("mask", "seqs", "sinks", "dsinks"), mm=1 | 2 << 1, seqs=3, seq_knull=True, sm=2) +
                             P * 8 + M + bytes([0, 25]))
    s["sv-smb-seqs-no-rows"] = (bytes([1 | SV, 1 | 2]) + shape(1, 1, 12, 17, 4, 4) + ocfg(lse_mode=1) +
                                sv(("seqs",), seqs=3) + P * 8 + bytes([6, 6, 5, 15]))
    s["sv-smb-f16-all"] = (bytes([1 | EXT | SV, 1 | 2]) + shape(1, 2, 12, 10, 6, 3) + ocfg(True, lse_mode=1) +
                           sv(("window", "softcap", "alibi", "sinks", "dsinks", "mask"), wl=3, cap=4.0, sm=1, mm=1 | 2 << 1) +
                           tviews("f16", "bf16", "f32", "f16", "bf16", "f32", "bf16", "f16") + tview("bf16"))
    s["sv-smb-dsinks-no-sinks"] = bytes([1 | SV, 0]) + shape() + ocfg() + sv(("dsinks",)) + P * 8
    s["sv-smb-dsinks-onto-sinks"] = bytes([1 | SV, 0]) + shape(1, 2) + ocfg() + sv(("sinks", "dsinks"), dm=4) + P * 8
    s["sv-smb-dsinks-onto-q"] = bytes([1 | SV, 0]) + shape(1, 2) + ocfg() + sv(("sinks", "dsinks"), dm=3) + P * 8
    s["sv-smb-dsinks-onto-mask"] = bytes([1 | SV, 0]) + shape(1, 2) + ocfg() + sv(("sinks", "dsinks", "mask"), dm=7) + P * 9
    s["sv-smb-dsinks-top"] = bytes([1 | SV, 0]) + shape(1, 2) + ocfg() + sv(("sinks", "dsinks"), dm=6) + P * 8
    s["sv-smb-mask-onto-dq"] = (bytes([1 | SV, 0]) + shape(1, 1, 6, 6, 6, 6) + ocfg() + sv(("mask",)) + P * 8 +
                                view("alias", 0, 5, 0))
    # ---- linear attention: the sequences apply, the score variants are refused ----
    s["sv-lin-seqs-causal"] = (bytes([2 | SV, 1 | 4 | 8 * 30]) + shape(2, 1, 33, 33, 6, 5) + fcfg("positive", 12) +
                               ocfg(True, ws_mode=1) + sv(("seqs",), seqs=3, seq_knull=True) + P * 4 + bytes([10, 30]))
    s["sv-lin-seqs-unequal-elu1"] = (bytes([2 | SV, 1]) + shape(1, 2, 17, 31, 6, 5) + fcfg("elu1", 6) + ocfg() +
                                     sv(("seqs",), seqs=4) + P * 4 + bytes([0, 5, 9, 3, 3, 20]))
    s["sv-lin-mask"] = bytes([2 | SV, 0]) + shape() + fcfg("positive", 8) + ocfg() + sv(("mask",)) + P * 5
    s["sv-lin-window"] = bytes([2 | SV, 0]) + shape() + fcfg("relu", 8) + ocfg() + sv(("window",), wl=3) + P * 4
    s["sv-lin-softcap-sinks"] = bytes([2 | SV, 0]) + shape() + fcfg("trig", 8) + ocfg() + sv(("softcap", "sinks")) + P * 4
    s["sv-linb-seqs"] = (bytes([3 | SV, 1]) + shape(2, 1, 33, 33, 5, 4) + fcfg("relu", 12) + ocfg(True, ws_mode=1) +
                         sv(("seqs",), seqs=3) + P * 7 + bytes([11, 11, 20, 20]))
    s["sv-linb-alibi"] = bytes([3 | SV, 0]) + shape() + fcfg("positive", 8) + ocfg() + sv(("alibi",)) + P * 7
    s["sv-linb-mask"] = bytes([3 | SV, 0]) + shape() + fcfg("positive", 8) + ocfg() + sv(("mask",)) + P * 8

    # ---- the recurrent state: favor_linear_extend refuses seqs and the variants ----
    def step(kind, n=None, svb=b"", extra=b""):
        b = bytes([kind, 0])
        if kind % 8 < 5:
            b += bytes([enc_len(n)])
        return b + ocfg(True) + svb + P * 4 + extra
    s["sv-state-extend"] = (bytes([5 | SV, 1]) + shape(2, 2, 1, 1, 6, 4) + fcfg("positive", 8) + bytes([0, 3]) +
                            step(0, 9, sv(("seqs",), seqs=2), bytes([4, 4])) + step(0, 9, sv(("window",), wl=2)) +
                            step(5, None, sv(("mask",)), P) + step(0, 9, sv()))
    # harness regressions the fuzzer found (as it wrote them): variant buffers
    # with opts NULL (not the call's: no overlap verdict), and FAVOR_WINDOW from
    # the flag byte of an input without the extension on favor_linear_extend
    s["sv-smb-opts-null"] = bytes.fromhex(
        "210304bcbc0707ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
        "ffffffffffffffffffffffffffffffffffffffffffffffff0000000000000100070808420000000000000000"
        "000000000000000000000000090000000000000000000000000000000000")
    s["sv-state-window-flag"] = bytes.fromhex(
        "0501050000050301070001000000030000080100000000000000000000000000000000000000000000000000"
        "00fa00000000c10100000001000000000000000000000000000000000000000700")
    return s


def gated_seeds():
    """Seeds of the gated extension (bit 6): FAVOR_NO_NORM, FAVOR_IDENTITY, decay,
    gates and dgates on linear attention, its backward, extend and step_ex."""
    s = {}
    # RetNet / Mamba-2 style forward: IDENTITY, NO_NORM, a decay per head and
    # log-sigmoid gates, two 64-row chunks, grouped heads; the repeat (flag 1)
    # and the causality check (flag 4) with NaN/inf later keys (0x80), whose
    # later gates change too
    s["gt-lin-identity-retnet"] = (bytes([2 | GT, 1 | 4 | 8 * 13 | 0x80]) + shape(2, 2, 70, 70, 6, 5) +
                                   gfcfg("elu1", 6, identity=True) + ocfg(True, ws_mode=1) +
                                   gt(("nonorm", "decay", "gates"), decay=0, gates=2) + P * 5)
    # the backward of normalized FAVOR+ with decay, gates (-80 at random) and
    # dgates over three packed sequences (dg of each one's first key is 0)
    s["gt-linb-seqs-dgates"] = (bytes([3 | SV | GT, 1]) + shape(2, 1, 33, 33, 5, 4) + gfcfg("positive", 10) +
                                ocfg(True, ws_mode=1) + sv(("seqs",), seqs=3) +
                                gt(("decay", "gates", "dgates"), decay=0, gates=3) + P * 7 +
                                bytes([11, 11, 20, 20]) + P * 2)
    # dgates over the bytes of dq (the alias layout's 7th candidate: W, Wt, q,
    # k, v, dout, dq): FAVOR_E_ALIAS, nothing written
    s["gt-linb-dgates-over-dq"] = (bytes([3 | GT, 0]) + shape(1, 1, 9, 9, 4, 4) + gfcfg("relu", 6) + ocfg(True) +
                                   gt(("gates", "dgates"), gates=0) + P * 7 + P + view("alias", 0, 6, 0))
    # bf16 tensors of batch 2 (the fp32 twin, I12) with ELU1 gates of the
    # call's batch and a decay of 1/2
    s["gt-lin-bf16-batched"] = (bytes([2 | EXT | BT | GT, 1 | 4 | 8 * 5]) + shape(2, 1, 17, 17, 6, 4) +
                                gfcfg("elu1", 6) + ocfg(True, ws_mode=1) +
                                gt(("decay", "gates"), decay=3, gates=0) +
                                bviews(4, 2, "bf16") + bview(dt="f32"))

    # the recurrent state with IDENTITY: extend (NO_NORM, decay, gates),
    # step_ex (NO_NORM, one row of gates), favor_linear_step (refused: IDENTITY
    # without NO_NORM), extend without NO_NORM (refused)
    def step(kind, n=None, g=b"", views=P * 4):
        b = bytes([kind, 0])
        if kind % 8 < 5:
            b += bytes([enc_len(n)])
        return b + ocfg(True) + g + views
    s["gt-state-identity-stepex"] = (bytes([5 | GT, 1]) + shape(2, 2, 1, 1, 6, 4) + gfcfg("elu1", 6, identity=True) +
                                     bytes([0, 3]) +
                                     step(0, 9, gt(("nonorm", "decay", "gates"), gates=2), P * 5) +
                                     step(5, None, gt(("nonorm", "gates"), gates=3), P * 5) +
                                     step(6, None, gt()) +
                                     step(0, 3, gt(("gates",)), P * 5))
    # harness regression the fuzzer found (as it wrote it): step_ex with sinks
    # placed over the state's bytes (refused); the harness wrote the sinks' -inf
    # into the state, and the next extend's NaN looked like the library's
    s["gt-state-sinks-over-state"] = bytes.fromhex(
        "65db7260fa657373238c8c8c8c8c1365656565656520000080703a5252525252000000000000")
    return s


def repros():
    r = {}
    # FINDING-1: uniform +-20 inputs (value mode 8), POSITIVE, causal, default scale:
    # favor_linear_attention_backward returns NaN gradients. The seed byte picks a
    # draw that fails (most do).
    r["finding1-linear-backward-nan"] = (bytes([3, 0]) + shape(2, 1, 11, 11, 7, 7) + fcfg("positive", 7, 0, 0) +
                                         ocfg(True) + view(vmode=8) * 4 + P * 3)
    # FINDING-1 again, ELU1, causal, inputs uniform +-1e4 (value mode 7): still NaN
    # after the working-tree fixes of the random-feature cases (seed byte 217: a
    # failing draw).
    r["finding1-linear-backward-nan-elu1"] = (bytes([3, 0]) + shape(2, 1, 11, 11, 7, 7) + fcfg("elu1", 7, 0, 217) +
                                              ocfg(True) + view(vmode=7) * 4 + P * 3)
    # FINDING-2 (fixed in c993bf1): causal softmax and linear attention; the
    # causality check (flag 4) puts NaN/inf (flag 0x80) in the keys and values from
    # token 7 on; rows that cannot see them used to become NaN.
    r["finding2-causal-nan-leak"] = bytes([0, 4 | 8 * 7 | 0x80]) + shape(1, 1, 10, 10, 4, 4) + ocfg(True) + P * 4
    r["finding2-causal-nan-leak-linear"] = (bytes([2, 4 | 8 * 7 | 0x80]) + shape(1, 1, 10, 10, 4, 4) +
                                            fcfg("relu", 8) + ocfg(True) + P * 4)
    # FINDING-5 (documented in 8d5e29b): the backward workspace queries see only q,
    # k, v; with those fp32 and the gradients fp16, a workspace of exactly the plain
    # query's bytes was refused with FAVOR_E_WORKSPACE. ws_mode 1: exactly the
    # query, which the harness now makes with a 16-bit view in place of q.
    r["finding5-softmax-backward-ws-query"] = (bytes([1 | EXT, 2]) + shape(1, 1, 9, 9, 4, 4) + ocfg(ws_mode=1) +
                                               tviews("f32", "f32", "f32", "f32", "f32", "f16", "f16", "f16"))
    r["finding5-linear-backward-ws-query"] = (bytes([3 | EXT, 1]) + shape(2, 1, 10, 15, 4, 6) + fcfg("relu", 7) +
                                              ocfg(ws_mode=1) + tviews("f32", "f32", "f32", "f32", "f16", "f16", "f16"))
    # FINDING-6 (fixed in 0.4): q and out one row of a batched [B][T][q|k|v|out]
    # buffer, refused with FAVOR_E_ALIAS. FINDING-7 (fixed in 0.4): a softmax
    # backward from a decode-path forward's lse, scores of order 1e13, NaN dq.
    # Both as the fuzzer wrote them (CI seed 1, and a 240 s run with seed 1).
    r["finding6-batched-fused-one-row"] = bytes.fromhex(
        "10010500bc0707010000000000000009000000a21b09000000000009000000000009000000000027000000")
    r["finding7-softmax-backward-decode-lse"] = bytes.fromhex(
        "09020008ebeeeeeeeeee2929292929ee12eeeeee1111111111110eeeeef8eeeeeeeeeeeeeeeeeeeeeeeeeeee"
        "eeeeeeeeee000000565656565656d656565656565656565656565656565656565656565656565656565656"
        "5656560000000000000000000080ffff7ffff5000080")
    # FINDING-8: alibi (own values 2^-8h/H, placed over out's bytes) accepted
    # although out overlaps it; the call reads slopes it has overwritten.
    r["finding8-alibi-overlaps-out"] = (bytes([0 | SV, 0]) + shape(1, 2, 6, 6, 4, 4) + ocfg() +
                                        sv(("alibi",), am=2 << 3 | 3 << 5) + P * 4)
    # FINDING-9: the workspace queries walk opts.seq_q unchecked: seq_q NULL is
    # dereferenced, seqs = SIZE_MAX reads past the offsets (harness guard:
    # fz_query_skip; the calls themselves refuse both)
    r["finding9-query-seq-q-null"] = (bytes([0 | SV, 0]) + shape() + ocfg() +
                                      sv(("seqs",), seqs=2, seq_kind="special", qp=0) + P * 4 + bytes([1, 1]))
    r["finding9-query-seqs-max"] = (bytes([0 | SV, 0]) + shape() + ocfg() +
                                    sv(("seqs",), seqs=2, seq_kind="special", qp=1) + P * 4 + bytes([1, 1]))
    r["finding9-linear-query-seqs-max"] = (bytes([2 | SV, 0]) + shape() + fcfg("positive", 8) + ocfg() +
                                           sv(("seqs",), seqs=2, seq_kind="special", qp=1) + P * 4 + bytes([1, 1]))
    # FINDING-9 again: a mask with NULL data (the query takes row views of it:
    # UBSan "applying zero offset to null pointer" in favor__rows), and the input
    # the fuzzer found it with (60 s, seed 1)
    r["finding9-query-mask-null-data"] = (bytes([0 | SV, 0]) + shape() + ocfg() + sv(("mask",)) + P * 4 +
                                          view("null", 0, 0))
    r["finding9-query-mask-fuzzer"] = bytes.fromhex(
        "204d0439bc03030100000000000100600000000000000000000000000000000005050a1eacacacacacacacac"
        "acacacacacacacacacacacacacacacacacacacacacacacacacacacacacacacacacacacacacacacacacacacac"
        "acacacacacacacacacacacacacacacacacacac27")
    # FINDING-10 (fixed on main in 4dfcd7e): linear attention accepted opts.mask
    r["finding10-linear-mask"] = bytes([2 | SV, 0]) + shape() + fcfg("positive", 8) + ocfg() + sv(("mask",)) + P * 5
    # FINDING-11 (fixed): a window's bounded right side let a later inf value
    # reach a row as 0 * inf; FINDING-12 (fixed): a subnormal softcap made a
    # zero score NaN. Both as CI's fuzz runs wrote them.
    r["finding11-window-right-inf-value"] = bytes.fromhex(
        "20f504bc9a0f0700000000010001000308086300000000000080000000800000008000000000000000")
    r["finding12-softcap-subnormal"] = bytes.fromhex(
        "200100050403030000000000000000020000f6000000001d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d"
        "1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d0000000000001d1d1d1d1d1d1d1d1d1d1d"
        "1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d"
        "1d1d1d1d000000000000000000000000000000")
    # FINDING-13 (the working tree of 24f8023, favor.h md5 0bd72bd5...): causal
    # ELU1 with log-gates, 9 rows; the causality check (flag 4, cut 2) changes
    # the keys, values and log-gates from token 2 on, and rows 0 and 1 change in
    # their last bits: the separable chunk factors exp(D_j - D_last) exp(D_last -
    # D_i) bring the chunk's last token into every row
    r["finding13-gated-later-gates"] = (bytes([2 | GT, 4 | 8 * 2]) + shape(1, 1, 9, 9, 4, 4) + gfcfg("elu1", 4) +
                                        ocfg(True) + gt(("gates",), gates=0) + P * 5)
    # FINDING-14 (fixed): a state struct whose heads was lowered after
    # favor_state_init (state mutation 5) made favor_linear_extend read a head's
    # log-scale, -inf, as the count of pending tokens, cast to size_t (UBSan; a
    # large finite value would index past the pending block). As the 1500 s
    # AVX-512 run of 2026-11-30 wrote it.
    r["finding14-state-heads-lowered"] = bytes.fromhex(
        "2501010000000000001c05000005030801000000000100f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f001"
        "000000000000002d91fb01d100011c05000005030801000000000100f0f0f0f0f0f0f0f0f0f0f0f0f0f0"
        "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0"
        "f0f0e7c9d63cbcd66015151115010611150106")
    # FINDING-15 (fixed): the linear backward's workspace query planned all of
    # q's rows, not the largest packed sequence (gated, causal, d = 1: the plan
    # grows with the rows), so the call took a workspace below the query. And a
    # harness fix from the same runs: sinks inside an output's gaps (a fused
    # [rows][v|out|mask] buffer) may be accepted. As the 1800 s runs of
    # 2026-11-30 wrote them (AVX-512, scalar).
    r["finding15-linear-bwd-query-seqs"] = bytes.fromhex(
        "630101bc010000000000001700000100000032000000400000060000000003000e090300be3d0040f8ff"
        "bd00000000be00000000bebf00000000be0000000003be")
    r["harness-sinks-in-out-gap"] = bytes.fromhex(
        "203939393939393939393939393939393995959595959595959595959595959539393939393939393939"
        "393939393939393939393939393939393939393939393939390460800001000000390460393939393939"
        "393939393939393939393939393939393939393939393939393939393939393939393939393939390460"
        "8000010000003904608000010080000100000000000000000000")
    # A harness fix (AVX2, 780 s, 2026-11-30): a linear backward queried with a
    # 16-bit q of batch 2^32 + 1 over one row needs 6.6 TB, a valid answer for
    # views the call never reads; the harness tried to allocate it (ASan's
    # allocation-size-too-big). Workspaces above FZ_WS_CAP are not allocated now.
    r["harness-huge-query"] = bytes.fromhex(
        "7b8f8484b984848484847b7b7b7b004406020300007e000000ff037b7b004406020300007e0000000dff"
        "03000000000000000c07010200c4c4c4c4c4c4c4c4c4c4002b0e000503001c000000000000000c070102"
        "00002b0e000503001c")
    return r


def main():
    corpus = os.path.join(HERE, "corpus")
    repro = os.path.join(HERE, "repro")
    for d in (corpus, repro):
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
    total = 0
    for name, data in sorted(seeds().items()):
        write(corpus, name, data)
        total += len(data)
    for name, data in sorted(repros().items()):
        write(repro, name, data)
    print("%d seeds (%d bytes) in %s; %d reproducers in %s" %
          (len(seeds()), total, corpus, len(repros()), repro), file=sys.stderr)


if __name__ == "__main__":
    main()
