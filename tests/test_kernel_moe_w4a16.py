"""Fused W4A16 MoE against the torch reference (TRITON_INTERPRET=1 on the CPU)."""
import pytest
import torch

from perfmodel.kernels._testing import use_interpreter_if_no_gpu

use_interpreter_if_no_gpu()

from perfmodel.kernels import moe_w4a16 as m  # noqa: E402
from perfmodel.kernels._moe_common import moe_align_block_size  # noqa: E402
from perfmodel.kernels._testing import assert_close, calc_diff  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _routing(T, E, k, gen):
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)]).to(DEV)
    w = torch.rand(T, k, generator=gen).to(DEV)
    return ids, w / w.sum(-1, keepdim=True)


def _weights(E, H, I, gen):
    w13 = torch.randn(E, 2 * I, H, generator=gen) / H**0.5
    w2 = torch.randn(E, H, I, generator=gen) / I**0.5
    return (*m.quantize_int4_g32(w13.to(DEV)), *m.quantize_int4_g32(w2.to(DEV)))


def _case(T, E, H, I, k, seed, dtype=torch.bfloat16):
    """A layer's inputs drawn from one seeded generator (weights, routing, activations in
    dtype) and the reference output: (wts, ids, tw, x, ref)."""
    gen = torch.Generator().manual_seed(seed)
    wts = _weights(E, H, I, gen)
    ids, tw = _routing(T, E, k, gen)
    x = torch.randn(T, H, generator=gen).to(DEV, dtype)
    return wts, ids, tw, x, m.fused_moe_w4a16_reference(x.float(), *wts, ids, tw)


def test_quantize_roundtrip_and_nibble_convention():
    w = torch.randn(2, 3, 64)
    packed, scales = m.quantize_int4_g32(w)
    assert packed.dtype == torch.int32 and packed.shape == (2, 3, 8)
    assert scales.dtype == torch.bfloat16 and scales.shape == (2, 3, 2)
    deq = m.dequantize_int4_g32(packed, scales)
    # error at most half a quantisation step (scale/2) plus bf16 rounding of the result
    step = scales.float().repeat_interleave(32, -1)
    assert ((deq.float() - w).abs() <= step / 2 + w.abs() * 2**-8 + 1e-6).all()
    # element 8j+i lives in bits 4i..4i+3 of word j, stored as q+8
    q = torch.zeros(1, 1, 32, dtype=torch.float32)
    q[0, 0, 1] = 7.0  # absmax 7 -> scale 1, q[1] = 7 -> nibble 15 at bits 4..7 of word 0
    p, s = m.quantize_int4_g32(q)
    assert int(p[0, 0, 0]) == int("888888F8", 16) - 2**32 and float(s[0, 0, 0]) == 1.0


def _kernel_layout(wts):
    w13, s13, w2, s2 = wts
    return (*m.pack_for_kernel(w13, s13), *m.pack_for_kernel(w2, s2))


@pytest.mark.parametrize("N,K", [(64, 256), (5, 96), (130, 544)])
def test_kernel_layout_roundtrip_and_convention(N, K):
    gen = torch.Generator().manual_seed(K + N)
    packed, scales = m.quantize_int4_g32(torch.randn(3, N, K, generator=gen))
    q, s = m.pack_for_kernel(packed, scales)
    Np, Kp = -(-N // 64) * 64, -(-K // 256) * 256
    assert q.shape == (3, Np // 64, Kp // 256, 64, 2, 32) and q.dtype == torch.int16
    assert s.shape == (3, Np // 64, Kp // 256, 64, 8)
    p2, s2 = m.unpack_from_kernel(q, s, N, K)
    assert torch.equal(p2, packed) and torch.equal(s2, scales)
    # W[n = 64t + c, k = 256b + 32i + j] sits in half-word [t, b, c, i // 4, j], nibble i % 4;
    # its scale in scales [t, b, c, i]; padding is nibble 8 (zero weight) with scale 1
    nib = m.dequantize_int4_g32(packed, torch.ones_like(scales)).float() + 8  # [E, N, K] nibbles
    for n in sorted({0, 1, min(63, N - 1), min(64, N - 1), N - 1}):
        t, c = divmod(n, 64)
        for k in sorted({0, 1, 31, 32, 33, min(255, K - 1), K - 1}):
            b, i, j = k // 256, (k % 256) // 32, k % 32
            got = (q[:, t, b, c, i // 4, j].to(torch.int32) >> (4 * (i % 4))) & 0xF
            assert torch.equal(got.float(), nib[:, n, k]), (n, k)
            assert torch.equal(s[:, t, b, c, i], scales[:, n, k // 32]), (n, k)
    if Kp > K:
        assert ((q[:, :, -1, :, 1, :].to(torch.int32) >> 12) & 0xF == 8).all() and (s[:, :, -1, :, 7] == 1).all()
    if Np > N:
        assert (q[:, -1, :, -1] == -0x7778).all() and (s[:, -1, :, -1, :] == 1).all()  # 0x8888


def test_random_kernel_weights_shape():
    q, s = m.random_kernel_weights(2, 96, 300, device="cpu")
    assert q.shape == (2, 2, 2, 64, 2, 32) and q.dtype == torch.int16
    assert s.shape == (2, 2, 2, 64, 8) and s.dtype == torch.bfloat16


@pytest.mark.parametrize("T,E,k,bm", [(7, 10, 3, 4), (1, 384, 8, 16), (33, 4, 2, 16), (20, 64, 8, 16)])
def test_align_triton_matches_torch(T, E, k, bm):
    from perfmodel.kernels import _moe_common as mc

    gen = torch.Generator().manual_seed(T + E)
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)]).to(DEV, torch.int32)
    a, b = mc._align_triton(ids, E, bm), mc.moe_align_block_size_torch(ids, E, bm)
    assert a.max_blocks == b.max_blocks
    assert torch.equal(a.block_expert_ids.long(), b.block_expert_ids.long())
    assert torch.equal(a.sorted_pair_ids, b.sorted_pair_ids)


@pytest.mark.parametrize("T,E,k,bm", [(7, 10, 3, 4), (20, 64, 8, 16)])
def test_align_drops_other_ranks_experts(T, E, k, bm):
    """Expert parallelism: ids shifted to a rank's local range; ids outside [0, E_local)
    get no block (both align paths agree) and every local pair is placed once."""
    from perfmodel.kernels import _moe_common as mc

    gen = torch.Generator().manual_seed(T * E)
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)]).to(DEV, torch.int32)
    E_loc, lo = E // 2, E // 4  # this rank owns experts lo .. lo + E_loc - 1
    local = ids - lo  # negative or >= E_loc: another rank's
    a, b = mc._align_triton(local, E_loc, bm), mc.moe_align_block_size_torch(local, E_loc, bm)
    assert torch.equal(a.block_expert_ids.long(), b.block_expert_ids.long())
    assert torch.equal(a.sorted_pair_ids, b.sorted_pair_ids)
    flat = local.reshape(-1).cpu()
    placed = sorted(int(p) for p in b.sorted_pair_ids.cpu() if p < T * k)
    assert placed == [i for i in range(T * k) if 0 <= flat[i] < E_loc]
    assert int(b.block_expert_ids.max()) < E_loc


def test_fused_moe_w4a16_expert_parallel_shard():
    """A rank holding experts lo .. lo+E_loc-1 computes exactly their share: the shards'
    outputs sum to the full MoE."""
    T, E, H, I, k = 6, 8, 96, 64, 3
    wts, ids, tw, x, ref = _case(T, E, H, I, k, 11)
    for direct in (True, False):  # the two-launch path and the aligned one
        total = torch.zeros(T, H, dtype=torch.float32, device=DEV)
        for lo in (0, 4):
            shard = [w[lo : lo + 4] for w in wts]
            out = m.fused_moe_w4a16(x, *_kernel_layout(shard), (ids - lo).to(torch.int32), tw, direct=direct)
            total += out.float()
        assert_close(total, ref, torch.bfloat16, f"moe_w4a16 EP shards {direct=}")


def test_align_block_size():
    gen = torch.Generator().manual_seed(1)
    ids, _ = _routing(7, 10, 3, gen)
    r = moe_align_block_size(ids, 10, 4)
    flat = ids.reshape(-1).cpu()
    seen = []
    for b, e in enumerate(r.block_expert_ids.cpu().tolist()):
        rows = r.sorted_pair_ids[b * 4 : (b + 1) * 4].cpu()
        valid = rows[rows < 21]
        if e < 0:
            assert valid.numel() == 0
            continue
        assert valid.numel() > 0 and (flat[valid] == e).all(), f"block {b} expert {e}"
        seen += valid.tolist()
    assert sorted(seen) == list(range(21))


# (T, E, H, I, k): decode, awkward T, H/I not multiples of the tiles, one expert hot
SHAPES = [(1, 8, 64, 32, 2), (5, 8, 96, 64, 3), (13, 6, 160, 96, 4), (33, 4, 64, 32, 2)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("T,E,H,I,k", SHAPES)
def test_fused_moe_w4a16_default(T, E, H, I, k, dtype):
    wts, ids, tw, x, ref = _case(T, E, H, I, k, T * 100 + H, dtype)
    out = m.fused_moe_w4a16(x, *_kernel_layout(wts), ids, tw)
    assert out.dtype == dtype
    assert_close(out, ref, dtype, f"moe_w4a16 {T=} {E=} {H=} {I=} {k=} {dtype=}")


@pytest.mark.slow
@pytest.mark.parametrize(
    "gate_up,down",
    [
        (dict(block_n=16, split_k=2, dequant=0), dict(block_n=16, split_k=3, dequant=0)),
        (dict(block_n=32, dequant=0), dict(block_n=128, split_k=1, dequant=0)),
        (dict(block_n=16, split_k=3, dequant=2), dict(block_n=32, dequant=2)),  # PTX on CUDA, else 0
    ],
)
def test_fused_moe_w4a16_knobs(gate_up, down):
    T, E, H, I, k = 9, 5, 544, 96, 2  # H spans 3 K-blocks: split_k 2 and 3 both split it
    wts, ids, tw, x, ref = _case(T, E, H, I, k, 7)
    for bm in (16, 8):  # 8: weights as the MMA's A operand
        out = m.fused_moe_w4a16(x, *_kernel_layout(wts), ids, tw, block_m=bm, gate_up_config=gate_up,
                                down_config=down)
        assert_close(out, ref, torch.bfloat16, f"moe_w4a16 knobs {bm=} {gate_up} {down}")


@pytest.mark.parametrize("bn_gate_up,bn_down,block_m", [(64, 128, 16), (128, 64, 16), pytest.param(16, 32, 16, marks=pytest.mark.slow),
                                                         (64, 128, 8)])
def test_fused_moe_w4a16_tile_aligned(bn_gate_up, bn_down, block_m):
    """H and 2I multiples of 128 and I of 64: the kernel's scalar-base column path (the
    awkward shapes above take the clamped per-column path); block_m 8 swaps the MMA operands."""
    T, E, H, I, k = 6, 4, 256, 64, 2
    wts, ids, tw, x, ref = _case(T, E, H, I, k, bn_gate_up + bn_down)
    out = m.fused_moe_w4a16(x, *_kernel_layout(wts), ids, tw, block_m=block_m,
                            gate_up_config=dict(block_n=bn_gate_up), down_config=dict(block_n=bn_down))
    assert_close(out, ref, torch.bfloat16, f"moe_w4a16 tile-aligned {bn_gate_up=} {bn_down=}")


def test_bytes_and_flops():
    ids = torch.tensor([[0, 1], [1, 2]])
    H, I = 7168, 2048
    per_expert = 3 * H * I * (0.5 + 2 / 32)
    assert m.bytes_moved(ids, 384, H, I) == pytest.approx(3 * per_expert + 2 * 2 * H * 2)
    assert per_expert / 1e6 == pytest.approx(24.77, abs=0.01)  # facts §1b
    assert m.flops(2, 2, H, I) == 6 * 2 * 2 * H * I


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fused_moe_w4a16_kimi_tp8_gpu():
    T, E, H, I, k = 16, 384, 7168, 256, 8
    wts, ids, tw, x, ref = _case(T, E, H, I, k, 0)
    out = m.fused_moe_w4a16(x, *_kernel_layout(wts), ids, tw)
    assert calc_diff(out, ref) < 1e-4, f"{T=} {E=} {H=} {I=} {k=}"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dequant", [0, 2])
@pytest.mark.parametrize("T,E,H,I,k", SHAPES + [(16, 64, 7168, 256, 8)])
def test_fused_moe_w4a16_dequant_modes_gpu(dequant, T, E, H, I, k):
    """Both dequantisations (2 is inline PTX, which only runs on the GPU) against the reference,
    at awkward shapes (masked columns, padded N and K) and a Kimi TP8 shard, with the default
    tiles and with 128-column tiles."""
    wts, ids, tw, x, ref = _case(T, E, H, I, k, T + E + dequant)
    for bn, bm in ((None, None), (128, None), (None, 8), (None, 16)):
        cfg = dict(dequant=dequant) if bn is None else dict(dequant=dequant, block_n=bn, num_stages=2)
        out = m.fused_moe_w4a16(x, *_kernel_layout(wts), ids, tw, block_m=bm, gate_up_config=cfg, down_config=cfg)
        assert calc_diff(out, ref) < 1e-4, f"{dequant=} {bn=} {bm=} {T=} {E=} {H=} {I=} {k=}"


def test_default_configs_pick_swapped_tiles_at_decode():
    from perfmodel.kernels._moe_common import default_moe_configs

    # Kimi K2.6 at decode: about one row per expert -> block_m 8 (swapped MMA operands) for INT4
    bm, gu, dn = m.default_configs(8, 8, 384, 7168, 2048)
    assert bm == 8 and (gu.block_n, gu.num_warps, gu.num_stages) == (64, 4, 3)
    assert (dn.block_n, dn.num_warps, dn.num_stages) == (128, 4, 2)
    # more than 8 rows per expert, or bf16 weights: 16-row blocks
    assert m.default_configs(24, 8, 16, 7168, 2048)[0] == 16  # 12 rows per expert
    # Kimi TP8 slice, T=1 (activation fused): gate_up split once more, 28 K-blocks in 7 splits of 4
    assert m.default_configs(1, 8, 384, 7168, 256)[1].split_k == 8
    assert m.default_configs(2, 8, 384, 7168, 256)[1].split_k == 4  # 288 programs already
    assert m.default_configs(1, 8, 128, 2048, 768)[1].split_k == 2  # 8 K-blocks: not split shallower
    assert default_moe_configs(8, 8, 384, 7168, 2048, int4=False)[0] == 16


def _sm90_tools_present() -> bool:
    import os

    try:
        import triton
    except ImportError:
        return False
    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
    return all(os.path.exists(os.path.join(bin_dir, t)) for t in ("ptxas", "cuobjdump"))


@pytest.mark.slow
@pytest.mark.skipif(not _sm90_tools_present(), reason="needs Triton's bundled ptxas and cuobjdump")
@pytest.mark.parametrize("args,most", [(["--block-m", "8"], 2.6),
                                       (["--block-m", "8", "--gate-up", "0", "--block-n", "128", "--stages", "2"], 2.5)])
def test_sm90_main_loop_stays_lean(args, most):
    """Offline sm_90 compile (no GPU; a subprocess, since this module may run the interpreter):
    the default decode tiles keep the main loop's SASS per weight near the dequantisation's
    1.88 and spill nothing. A static count, not a timing: a layout or pipelining change that
    breaks the vectorised loads shows up here."""
    import os
    import re
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-m", "tools.sass_census", *args], env=env, cwd=root,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    per_weight = float(re.search(r"= ([0-9.]+) per weight", r.stdout).group(1))
    assert per_weight <= most, r.stdout
    assert "0 bytes spill stores" in r.stdout, r.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fused_moe_w4a16_torch_align_under_graph_capture():
    """T*k above the one-program Triton align: the torch align path must stay capturable."""
    from perfmodel.kernels._moe_common import ALIGN_MAX_PAIRS

    T, E, H, I, k = ALIGN_MAX_PAIRS // 4 + 8, 16, 256, 128, 4
    gen = torch.Generator().manual_seed(3)
    wts = _kernel_layout(_weights(E, H, I, gen))
    ids, tw = _routing(T, E, k, gen)
    x = torch.randn(T, H, generator=gen).to(DEV, torch.bfloat16)
    ref = m.fused_moe_w4a16(x, *wts, ids, tw)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = m.fused_moe_w4a16(x, *wts, ids, tw)
    graph.replay()
    torch.cuda.synchronize()
    assert_close(out, ref.float(), torch.bfloat16, "torch align under graph capture")  # atomics: order varies


@pytest.mark.slow
@pytest.mark.parametrize("act_max_t,cast_max_t", [(64, 64), (64, 0), (0, 64), (0, 0)])
def test_fused_epilogues_match_reference(act_max_t, cast_max_t, monkeypatch):
    """The fused activation (last split of a split-K gate_up applies SiLU*mul, arrival counters)
    and the fused cast (down's last program per column tile casts the fp32 sum; unused blocks
    count in too), each on and off, against the reference; block_m 8 and 16."""
    monkeypatch.setattr(m, "FUSED_ACT_MAX_T", act_max_t)
    monkeypatch.setattr(m, "FUSED_CAST_MAX_T", cast_max_t)
    T, E, H, I, k = 3, 6, 544, 96, 2  # 3 K-blocks: gate_up split 3 ways; 6 experts: unused blocks
    wts, ids, tw, x, ref = _case(T, E, H, I, k, 11)
    for bm in (8, 16):
        out = m.fused_moe_w4a16(x, *_kernel_layout(wts), ids, tw, block_m=bm, gate_up_config=dict(split_k=3, dequant=0),
                                down_config=dict(block_n=32, dequant=0))
        assert out.dtype == torch.bfloat16 and out.shape == (T, H)
        assert_close(out, ref, torch.bfloat16, f"fused epilogues {act_max_t=} {cast_max_t=} {bm=}")


def test_align_zeroes_the_workspace():
    ids = torch.tensor([[0, 2], [1, 2]], device=DEV)
    ws = torch.full((1500,), 7.0, device=DEV)  # more than one 1024-wide store loop
    r = moe_align_block_size(ids, 4, 8, zero=ws)
    assert torch.count_nonzero(ws) == 0 and r.num_pairs == 4


# (T, E, H, I, k, gate_up, down): one token; awkward H / I (masked K, clamped columns); every
# expert shared by several tokens (leaders gather up to 8 rows); whole tiles (FAST_COLS)
DIRECT = [
    (1, 8, 64, 32, 2, {}, {}),
    pytest.param(3, 6, 160, 96, 4, dict(split_k=1, block_n=32), dict(block_n=16), marks=pytest.mark.slow),
    pytest.param(8, 4, 544, 96, 2, dict(split_k=3), dict(block_n=32), marks=pytest.mark.slow),
    pytest.param(5, 8, 256, 64, 3, dict(split_k=2), {}, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("T,E,H,I,k,gate_up,down", DIRECT)
def test_direct_layer_matches_reference(T, E, H, I, k, gate_up, down):
    """The two-launch path at T <= 8 (no alignment; per-split partials; SiLU*mul on load in
    down; fp32 atomics and the last program's cast) against the reference, in int64 and int32
    ids, with the default and the given configs."""
    wts, ids, tw, x, ref = _case(T, E, H, I, k, T * 31 + H)
    kl = _kernel_layout(wts)
    for i, cfg in enumerate(({}, dict(gate_up_config=gate_up, down_config=down))):
        for id_dtype in (torch.int64, torch.int32):
            out = m.fused_moe_w4a16(x, *kl, ids.to(id_dtype), tw, direct=True, **cfg)
            assert out.dtype == torch.bfloat16 and out.shape == (T, H) and torch.isfinite(out).all()
            assert_close(out, ref, torch.bfloat16, f"direct {T=} {E=} {H=} {I=} {k=} cfg {i} {id_dtype}")


def test_direct_layer_default_follows_direct_max_t(monkeypatch):
    calls = []
    monkeypatch.setattr(m, "_direct_layer", lambda *a, **kw: calls.append(kw) or a[0])
    x = torch.zeros(2, 256, dtype=torch.bfloat16, device=DEV)
    w = m.random_kernel_weights(4, 128, 256, device=DEV) + m.random_kernel_weights(4, 256, 64, device=DEV)
    ids, tw = torch.tensor([[0, 1], [1, 2]], device=DEV), torch.full((2, 2), 0.5, device=DEV)
    monkeypatch.setattr(m, "DIRECT_MAX_T", 2)
    m.fused_moe_w4a16(x, *w, ids, tw)
    assert len(calls) == 1 and calls[0]["I"] == 64
    m.fused_moe_w4a16(x, *w, ids, tw, block_m=8)  # a given block_m: the aligned path
    monkeypatch.setattr(m, "DIRECT_MAX_T", 1)
    m.fused_moe_w4a16(x, *w, ids, tw)
    assert len(calls) == 1
    with pytest.raises(ValueError, match="at most 8 tokens"):
        m.fused_moe_w4a16(torch.zeros(9, 256, dtype=torch.bfloat16, device=DEV), *w,
                          torch.zeros(9, 2, dtype=torch.int64, device=DEV), torch.ones(9, 2, device=DEV), direct=True)


# (T, E, H, I, k, gate_up, down): one token, the default configs; split-K gate_up (the last split
# applies SiLU*mul); no split; several tokens sharing experts (each pair its own block)
PAIRS = [
    pytest.param(1, 8, 544, 96, 4, dict(split_k=3), dict(block_n=32), marks=pytest.mark.slow),
    (1, 6, 160, 64, 2, dict(split_k=1, block_n=32), dict(block_n=16)),
    pytest.param(3, 4, 544, 96, 2, dict(split_k=2), dict(block_n=32), marks=pytest.mark.slow),
]


@pytest.mark.parametrize("T,E,H,I,k,gate_up,down", PAIRS)
def test_pair_layer_matches_reference_and_cleans_its_workspace(T, E, H, I, k, gate_up, down):
    """The two-launch pair-block path (no alignment; each (token, slot) pair its own block; the
    persistent workspace left zeroed by the last arrivals) against the reference, twice in a row
    (a workspace left dirty by the first call would corrupt the second), with int64 and int32
    ids; afterwards the workspace holds only zeros."""
    wts, ids, tw, x, ref = _case(T, E, H, I, k, T * 7 + H)
    kl = _kernel_layout(wts)
    cfg = dict(gate_up_config={**gate_up, "dequant": 0}, down_config={**down, "dequant": 0})
    for rep, id_dtype in enumerate((torch.int64, torch.int32)):
        out = m.fused_moe_w4a16(x, *kl, ids.to(id_dtype), tw, pair_blocks=True, **cfg)
        assert out.dtype == torch.bfloat16 and out.shape == (T, H)
        assert_close(out, ref, torch.bfloat16, f"pair blocks {T=} {E=} {H=} {I=} {k=} call {rep}")
    ws = m._PAIR_WS[(x.device.type, x.device.index)]
    assert torch.count_nonzero(ws) == 0


# (T, E, H, I, k, down tile): K of several blocks and a ragged last one (I=544), the pair count
# padded to 8 MMA columns (P=3) and to 16 (P=12, three output rows), a ragged column tile (H=224 in 64-column tiles)
DOWN_PAIRS = [
    pytest.param(1, 8, 256, 544, 4, 16, marks=pytest.mark.slow),
    (1, 6, 224, 64, 3, 64),
    pytest.param(3, 8, 256, 96, 4, 64, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("preload", [False, True])
@pytest.mark.parametrize("T,E,H,I,k,block_n", DOWN_PAIRS)
def test_pair_summing_down_matches_reference_and_the_atomic_down(T, E, H, I, k, block_n, preload, monkeypatch):
    """down as one program per column tile that sums every pair in registers (pairs as K-blocks,
    pair j in MMA column j) against the reference and against the pair path's atomic down;
    `preload`: its first K-block dequantised ahead of the rest (as before its PDL wait on the GPU)."""
    real = m._down_pairs
    monkeypatch.setattr(m, "_down_pairs", lambda *a, **kw: real(*a, **{**kw, "preload": preload}))
    wts, ids, tw, x, ref = _case(T, E, H, I, k, 100 + T * H + I)
    kl = _kernel_layout(wts)
    cfg = dict(gate_up_config=dict(dequant=0), down_config=dict(block_n=block_n, dequant=0))
    summed = m.fused_moe_w4a16(x, *kl, ids, tw, pair_blocks=True, down_pairs=True, **cfg)
    atomic = m.fused_moe_w4a16(x, *kl, ids, tw, pair_blocks=True, down_pairs=False, **cfg)
    assert_close(summed, ref, torch.bfloat16, f"pair-summing down {T=} {H=} {I=} {k=}")
    assert calc_diff(summed.float(), atomic.float()) < 1e-5


@pytest.mark.slow
def test_pair_summing_down_is_the_default_up_to_its_pair_count(monkeypatch):
    calls = []
    real = m._down_pairs
    monkeypatch.setattr(m, "_down_pairs", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    for T, k, used in ((1, m.DOWN_PAIRS_MAX_P, True), (2, m.DOWN_PAIRS_MAX_P, False)):
        wts, ids, tw, x, ref = _case(T, 8, 128, 64, k, 3)
        out = m.fused_moe_w4a16(x, *_kernel_layout(wts), ids, tw, gate_up_config=dict(dequant=0),
                                down_config=dict(dequant=0))
        assert_close(out, ref, torch.bfloat16, f"{T=} {k=}")
        assert len(calls) == int(used), (T, k)
        calls.clear()
    with pytest.raises(ValueError, match="at most 16 pairs"):
        wts, ids, tw, x, _ = _case(3, 8, 128, 64, 8, 3)
        m.fused_moe_w4a16(x, *_kernel_layout(wts), ids, tw, pair_blocks=True, down_pairs=True)


def test_down_pairs_config_fills_the_gpu_and_follows_k():
    c = m.down_pairs_config(7168, 256)  # Kimi TP8 slice: 448 tiles of 16 (224 of 32 < 264), one K-block
    assert (c.block_n, c.num_warps, c.num_stages) == (16, 8, 3)
    assert m.down_pairs_config(7168, 256, num_sms=56).block_n == 64  # 112 tiles of 64 fill 56 SMs twice
    c = m.down_pairs_config(2048, 768)  # Qwen3-30B-A3B: never narrower than 16; 3 K-blocks
    assert (c.block_n, c.num_warps, c.num_stages) == (16, 4, 3)
    c = m.down_pairs_config(7168, 2048)  # Kimi I=2048: 8 K-blocks
    assert (c.num_warps, c.num_stages) == (4, 2)
    assert m.down_pairs_config(64, 32).num_warps == 4  # one ragged K-block: 8 warps were wrong (GPU)


@pytest.mark.slow
def test_pair_layer_drops_other_ranks_experts():
    """Expert parallelism: ids outside [0, E) are another rank's experts; their blocks do
    nothing, so the shards' outputs sum to the whole layer."""
    T, E, H, I, k = 1, 8, 256, 64, 4
    wts, ids, tw, x, ref = _case(T, E, H, I, k, 5)
    total = torch.zeros(T, H, device=DEV)
    for lo in (0, E // 2):
        shard = tuple(t[lo:lo + E // 2] for t in wts)
        total += m.fused_moe_w4a16(x, *_kernel_layout(shard), (ids - lo).to(torch.int32), tw, pair_blocks=True,
                                   gate_up_config=dict(dequant=0), down_config=dict(dequant=0)).float()
    assert_close(total, ref, torch.bfloat16, "pair blocks, EP shards")


def test_pair_layer_is_the_default_at_one_token(monkeypatch):
    calls = []
    monkeypatch.setattr(m, "_pair_layer", lambda *a, **kw: calls.append(kw) or a[0])
    x = torch.zeros(1, 256, device=DEV, dtype=torch.bfloat16)
    wts = _kernel_layout(_weights(4, 256, 64, torch.Generator().manual_seed(0)))
    ids, tw = torch.tensor([[0, 1]], device=DEV), torch.full((1, 2), 0.5, device=DEV)
    m.fused_moe_w4a16(x, *wts, ids, tw)
    assert len(calls) == 1
    m.fused_moe_w4a16(x, *wts, ids, tw, block_m=16)  # a given block_m keeps the aligned path
    m.fused_moe_w4a16(x, *wts, ids, tw, direct=False)  # as does a given direct
    assert len(calls) == 1
    T = m.PAIR_BLOCKS_MAX_T
    m.fused_moe_w4a16(torch.zeros(T, 256, device=DEV, dtype=torch.bfloat16), *wts, ids.repeat(T, 1), tw.repeat(T, 1))
    assert len(calls) == 2
    m.fused_moe_w4a16(torch.zeros(T + 1, 256, device=DEV, dtype=torch.bfloat16), *wts, ids.repeat(T + 1, 1),
                      tw.repeat(T + 1, 1))
    assert len(calls) == 2


_EPILOGUE_PTX = """
import json
from perfmodel.kernels import moe_w4a16 as m
from perfmodel.kernels._offline import compile_w4a16
down = dict(A_ROW_DIV=1, C_ROW_DIV=8, MUL_ROUTED_WEIGHT=True, ATOMIC=True, FINAL_CAST=True, SELF_CLEAN=True,
            ATOMIC_READ=m.ATOMIC_READ, ARRIVE_FENCE=m.ARRIVE_FENCE, PDL_WAIT=True)
gate_up = dict(SPLIT_ACT=True, SELF_CLEAN=True, ATOMIC_READ=m.ATOMIC_READ, ARRIVE_FENCE=m.ARRIVE_FENCE,
               PDL_TRIGGER=True)
print(json.dumps({name: compile_w4a16(8, 64 if gu else 128, gu, 4, 2, extra=extra).asm["ptx"]
                  for name, gu, extra in (("down", False, down), ("gate_up", True, gate_up))}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not _sm90_tools_present(), reason="needs Triton's bundled ptxas and cuobjdump")
def test_sm90_last_arrival_reads_the_sums_with_atomics():
    """Offline sm_90 compile of the self-cleaning epilogues as the pair path launches them. The
    last arrival must read the fp32 sums with atomic exchanges (performed where the other
    programs' adds were): plain .cg loads there sometimes missed the latest adds on the H200
    (evidence/kernel-defaults/moe-w4a16-atomic-read-and-pdl/race_pair_atomic_read.log: 9-30 of 400 calls
    wrong, 0 with atomics),
    which no CPU test can reproduce. The dependent down launch must issue its L2 prefetches
    before griddepcontrol.wait, and gate_up must let it launch."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", _EPILOGUE_PTX], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    ptx = json.loads(r.stdout)
    for name in ("down", "gate_up"):
        assert "atom.global.gpu.relaxed.exch.b32" in ptx[name], name
        assert "ld.global.cg" not in ptx[name], name
    assert "prefetch.global.L2" in ptx["down"]
    assert ptx["down"].index("prefetch.global.L2") < ptx["down"].index("griddepcontrol.wait")
    assert "griddepcontrol.launch_dependents" in ptx["gate_up"]


_DOWN_PAIRS_PTX = """
import json
from perfmodel.kernels._offline import compile_down_pairs
print(json.dumps({"down": compile_down_pairs(16, 8, 3, extra=dict(PDL_WAIT=True)).asm["ptx"],
                  "preload": compile_down_pairs(16, 8, 3, extra=dict(PDL_WAIT=True, PRELOAD=True)).asm["ptx"]}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not _sm90_tools_present(), reason="needs Triton's bundled ptxas and cuobjdump")
def test_sm90_pair_summing_down_has_no_atomics_and_prefetches_before_its_wait():
    """Offline sm_90 compile of the pair-summing down as the Kimi TP8 slice launches it (16
    columns, 8 warps, dependent launch): no atomic of any kind (the top-k sum stays in
    registers), the L2 prefetches before griddepcontrol.wait, and an MMA."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", _DOWN_PAIRS_PTX], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    ptx = got["down"]
    import re

    assert not re.findall(r"^\s*(?:@%p\d+\s+)?(?:atom|red)\.", ptx, flags=re.M)  # an atomic instruction
    assert ptx.index("prefetch.global.L2") < ptx.index("griddepcontrol.wait")
    assert "mma.sync" in ptx
    # PRELOAD (DOWN_PAIRS_PRELOAD_MAX_KB): the first K-block is loaded and dequantised before the
    # wait for gate_up, its MMAs (which read gate_up's intermediate) after it
    pre = got["preload"]
    wait = pre.index("griddepcontrol.wait")
    assert "ld.global" in pre[:wait] and "fma.rn.bf16x2" in pre[:wait] and "mma.sync" not in pre[:wait]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pair_layer_never_drops_adds_under_back_to_back_calls():
    """The shape where the last arrival's plain loads missed adds (Kimi H and I=2048, T=2: 16
    pairs, 56 down column tiles): 200 back-to-back eager calls over 8 routings, every output
    against the reference. Before the atomic read about 3% of calls were wrong."""
    T, E, H, I, k = 2, 32, 7168, 2048, 8
    gen = torch.Generator().manual_seed(11)
    ckpt = _weights(E, H, I, gen)
    wts = _kernel_layout(ckpt)
    x = torch.randn(T, H, generator=gen).to(DEV, torch.bfloat16)
    routes = [_routing(T, E, k, gen) for _ in range(8)]
    refs = [m.fused_moe_w4a16_reference(x.float(), *ckpt, ids, tw) for ids, tw in routes]
    outs = [m.fused_moe_w4a16(x, *wts, *routes[i % 8], pair_blocks=True) for i in range(200)]
    torch.cuda.synchronize()
    wrong = [i for i, o in enumerate(outs) if calc_diff(o.float(), refs[i % 8].float()) > 1e-4]
    assert not wrong, f"{len(wrong)} of 200 calls wrong, first {wrong[:5]}"


def test_pdl_default_takes_one_token_and_a_down_small_against_the_l2(monkeypatch):
    """The dependent down launch is the default only at one token and while the touched
    experts' down weights (prefetched into L2) stay within MOE_PDL_MAX_L2_SHARE of it: on an
    H200 (sm_90, 50 MB of L2: hwspecs/SOURCES.md) the Kimi TP8 slice (8.3 MB) and Qwen3-30B-A3B (7.1 MB) take it,
    Kimi I=2048 (66 MB) and two tokens do not; nor does a pre-Hopper GPU or the interpreter."""
    from perfmodel.kernels import _launch
    from perfmodel.kernels._launch import DeviceFacts

    monkeypatch.setattr(m, "interpreting", lambda: False)
    monkeypatch.setattr(_launch, "device_facts", lambda index: DeviceFacts(9, 132, 50 * 2**20))
    cuda = torch.device("cuda", 0)
    assert m.pdl_default(cuda, 1, 8, 7168, 256) and m.pdl_default(cuda, 1, 8, 2048, 768)
    assert not m.pdl_default(cuda, 1, 8, 7168, 2048)
    assert not m.pdl_default(cuda, 2, 8, 7168, 256)
    assert not m.pdl_default(torch.device("cpu"), 1, 8, 7168, 256)
    monkeypatch.setattr(_launch, "device_facts", lambda index: DeviceFacts(8, 132, 50 * 2**20))
    assert not m.pdl_default(cuda, 1, 8, 7168, 256)
    monkeypatch.setattr(_launch, "device_facts", lambda index: DeviceFacts(9, 132, 50 * 2**20))
    monkeypatch.setattr(m, "interpreting", lambda: True)
    assert not m.pdl_default(cuda, 1, 8, 7168, 256)


def test_ptx_fingerprint_ignores_debug_information_only():
    """tools/ptx_fingerprint.py: line locations, the file table, inlined-call labels and
    the debug sections do not change a fingerprint; an instruction does."""
    from tools.ptx_fingerprint import CONFIGS, stripped

    body = "\tld.global.b32 %r1, [%rd1];\n\tmma.sync.aligned.m16n8k16 {%f1}, {%r1}, {%r2}, {%f1};\n"
    a = ".file 1 \"a.py\"\n.loc 1 10 5\n" + body + "$L__tmp3:\n.section .debug_info\n{ 1 2 }\n"
    b = ".file 1 \"b.py\"\n.loc 1 99 2\n$L__tmp7:\n" + body + ".section\t.debug_abbrev\n{ 3 }\n"
    assert stripped(a) == stripped(b) == body
    assert stripped(a.replace("b32", "b64")) != stripped(b)
    assert {"gate_up_pair", "down_pairs_preload", "down_atomic_pair"} <= set(CONFIGS)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("T,ids_dtype,tw_dtype", [(1, torch.int32, torch.float32), (1, torch.int64, torch.bfloat16),
                                                  (3, torch.int64, torch.float32)])
def test_pair_path_eager_calls_launch_from_their_plan(T, ids_dtype, tw_dtype, monkeypatch):
    """The pair path's first call of a signature plans it; later calls with other tokens,
    experts and weights launch directly from the plan (FastLauncher hits, no new plan) and give
    the reference results, also inside a CUDA graph (ids and weights converted per call where
    they are not int32 / fp32); a launch hook, or a replaced function of the path, takes the
    planned-for path again (no direct launches) with the same results."""
    from triton import knobs

    E, H, I, k = 16, 256, 64, 4
    wts, ids, tw, x, _ = _case(T, E, H, I, k, 40 + T)
    kl = _kernel_layout(wts)
    gen = torch.Generator().manual_seed(T)

    def call(x, ids, tw):
        return m.fused_moe_w4a16(x, *kl, ids.to(ids_dtype), tw.to(tw_dtype))

    call(x, ids, tw)
    n_plans, hits = len(m._PAIR_PLANS), (m._MOE_GEMM.hits, m._DOWN_PAIRS.hits)
    for _ in range(3):
        ids, tw = _routing(T, E, k, gen)
        x = torch.randn(T, H, generator=gen).to(DEV, torch.bfloat16)
        ref = m.fused_moe_w4a16_reference(x.float(), *wts, ids, tw.to(tw_dtype).float())
        assert_close(call(x, ids, tw), ref, torch.bfloat16, f"planned {T=}")
    assert len(m._PAIR_PLANS) == n_plans
    hits_now = (m._MOE_GEMM.hits, m._DOWN_PAIRS.hits)
    assert sum(hits_now) - sum(hits) == 3 * 2  # gate_up and down, three calls
    # inside a CUDA graph, replayed on new inputs
    xs, ids_s, tw_s = x.clone(), ids.to(ids_dtype).clone(), tw.to(tw_dtype).clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        m.fused_moe_w4a16(xs, *kl, ids_s, tw_s)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = m.fused_moe_w4a16(xs, *kl, ids_s, tw_s)
    for _ in range(2):
        ids, tw = _routing(T, E, k, gen)
        xs.copy_(torch.randn(T, H, generator=gen).to(DEV, torch.bfloat16))
        ids_s.copy_(ids.to(ids_dtype))
        tw_s.copy_(tw.to(tw_dtype))
        g.replay()
        torch.cuda.synchronize()
        ref = m.fused_moe_w4a16_reference(xs.float(), *wts, ids, tw_s.float())
        assert_close(out, ref, torch.bfloat16, f"planned {T=} in a graph")
    # a launch hook: Triton's own path, no direct launches
    ref = m.fused_moe_w4a16_reference(x.float(), *wts, ids, tw.to(tw_dtype).float())
    hooked = []
    knobs.runtime.launch_enter_hook.add(hooked.append)
    try:
        before = (m._MOE_GEMM.hits, m._DOWN_PAIRS.hits)
        assert_close(call(x, ids, tw), ref, torch.bfloat16, f"under a launch hook {T=}")
        assert (m._MOE_GEMM.hits, m._DOWN_PAIRS.hits) == before and hooked
    finally:
        knobs.runtime.launch_enter_hook.remove(hooked.append)
    # a replaced function of the path: no plan used or made
    calls = []
    real = m._pair_layer
    monkeypatch.setattr(m, "_pair_layer", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    assert_close(call(x, ids, tw), ref, torch.bfloat16, f"patched {T=}")
    assert calls == [1] and len(m._PAIR_PLANS) == n_plans


def test_pair_plan_is_made_only_on_a_cuda_gpu_outside_the_interpreter():
    """On the CPU (the interpreter) no signature is planned: every call takes the full path."""
    if torch.cuda.is_available():
        pytest.skip("checks the CPU path")
    wts, ids, tw, x, ref = _case(1, 8, 128, 64, 2, 9)
    kl = _kernel_layout(wts)
    assert m._pair_sig(x, *kl, ids, tw) is None
    n = len(m._PAIR_PLANS)
    assert_close(m.fused_moe_w4a16(x, *kl, ids, tw, gate_up_config=dict(dequant=0), down_config=dict(dequant=0)),
                 ref, torch.bfloat16, "cpu")
    assert len(m._PAIR_PLANS) == n
