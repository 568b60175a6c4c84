"""Tree-verify attention (GQA, MLA) against the torch reference."""
import math

import pytest
import torch

from perfmodel.kernels._testing import use_interpreter_if_no_gpu

use_interpreter_if_no_gpu()

from perfmodel.kernels import tree_attention as ta  # noqa: E402
from perfmodel.kernels._testing import assert_close  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def random_tree_mask(C, Q, gen):
    """Random trees: node i>0 has a parent in [0, i); ancestor-or-self mask."""
    m = torch.zeros(C, Q, Q, dtype=torch.bool)
    for c in range(C):
        for i in range(Q):
            m[c, i, i] = True
            if i > 0:
                p = int(torch.randint(0, i, (1,), generator=gen))
                m[c, i] |= m[c, p]
    return m.to(DEV)


# (C, Q, L, Hq, Hkv, D): plain decode, tree over odd prefix, S not a multiple of the tile
GQA_SHAPES = [(2, 1, 37, 4, 2, 32), pytest.param(1, 5, 70, 8, 2, 64, marks=pytest.mark.slow), (3, 7, 13, 2, 1, 16), (2, 4, 0, 4, 4, 32)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("C,Q,L,Hq,Hkv,D", GQA_SHAPES)
def test_tree_attention_gqa(C, Q, L, Hq, Hkv, D, dtype):
    gen = torch.Generator().manual_seed(C * 31 + Q + L)
    S = L + Q
    q = torch.randn(C, Q, Hq, D, generator=gen).to(DEV, dtype)
    k = torch.randn(C, S, Hkv, D, generator=gen).to(DEV, dtype)
    v = torch.randn(C, S, Hkv, D, generator=gen).to(DEV, dtype)
    mask = random_tree_mask(C, Q, gen)
    ref = ta.tree_attention_gqa_reference(q.float(), k.float(), v.float(), mask)
    what = f"gqa {C=} {Q=} {L=} {Hq=} {Hkv=} {D=} {dtype=}"
    assert_close(ta.tree_attention_gqa(q, k, v, mask), ref, dtype, what)
    # several splits and small tiles: split merge and partially-visible splits
    out = ta.tree_attention_gqa(q, k, v, mask, block_s=16, num_splits=3, block_r=16)
    assert_close(out, ref, dtype, what + " splits=3")


def test_gqa_reads_a_head_major_kv_layout():
    """K and V stored [C, Hkv, S, D] (each head's positions contiguous: the HND layout of
    TensorRT-LLM's and FlashInfer's paged caches), given as [C, S, Hkv, D] views: the kernel
    follows the strides."""
    gen = torch.Generator().manual_seed(5)
    C, Q, L, Hq, Hkv, D = 2, 3, 45, 4, 2, 32
    q = torch.randn(C, Q, Hq, D, generator=gen).to(DEV)
    k = torch.randn(C, Hkv, L + Q, D, generator=gen).to(DEV).transpose(1, 2)
    v = torch.randn(C, Hkv, L + Q, D, generator=gen).to(DEV).transpose(1, 2)
    assert k.stride(1) == D and not k.is_contiguous()
    mask = random_tree_mask(C, Q, gen)
    ref = ta.tree_attention_gqa_reference(q, k, v, mask)
    assert_close(ta.tree_attention_gqa(q, k, v, mask, block_s=16, num_splits=2), ref, torch.float32, "gqa HND view")


@pytest.mark.slow
@pytest.mark.parametrize("full_tiles", [False, True])
def test_full_tiles_with_and_without_the_mask(full_tiles):
    """full_tiles (tiles wholly inside the split and the prefix skip the visibility mask; the
    default for MLA at row tiles of <= 16 rows) gives the reference either way: several tiles per split,
    a split ending inside a tile, the tree part, a rescale (scores growing along the sequence),
    GQA and MLA."""
    gen = torch.Generator().manual_seed(17)
    C, Q, L, Hq, Hkv, D = 2, 3, 70, 4, 2, 32
    S = L + Q
    q = torch.randn(C, Q, Hq, D, generator=gen).to(DEV)
    k = torch.randn(C, S, Hkv, D, generator=gen).to(DEV) * torch.linspace(0.1, 4.0, S).to(DEV)[None, :, None, None]
    v = torch.randn(C, S, Hkv, D, generator=gen).to(DEV)
    mask = random_tree_mask(C, Q, gen)
    ref = ta.tree_attention_gqa_reference(q, k, v, mask)
    kw = dict(full_tiles=full_tiles, block_s=16, block_r=16)
    for splits in (1, 3):
        assert_close(ta.tree_attention_gqa(q, k, v, mask, num_splits=splits, **kw), ref, torch.float32,
                     f"gqa {kw} {splits=}")
    ql, qr = (torch.randn(C, Q, 4, d, generator=gen).to(DEV) for d in (512, 64))
    ckv, kpe = (torch.randn(C, S, d, generator=gen).to(DEV) for d in (512, 64))
    ref = ta.tree_attention_mla_reference(ql, qr, ckv, kpe, mask, 0.07)
    assert_close(ta.tree_attention_mla(ql, qr, ckv, kpe, mask, 0.07, num_splits=2, **kw), ref, torch.float32,
                 f"mla {kw}")
    assert ta.default_full_tiles(512, 16) and not ta.default_full_tiles(512, 32)


def test_full_tiles_rule():
    """MLA skips the mask at <= 16-row tiles; GQA too, except at 3 stages where its grid needs
    more than one wave of 2 programs per SM (the branch fits 2 per SM there, the mask 3). GQA's
    3-stage plan (small C x L) keeps its splits within that wave."""
    assert ta.default_full_tiles(512, 16, 2, 10_000) and not ta.default_full_tiles(512, 32, 2, 1)
    assert ta.default_full_tiles(128, 16, 2, 10_000, 132)
    assert ta.default_full_tiles(128, 16, 3, 264, 132) and not ta.default_full_tiles(128, 16, 3, 265, 132)
    assert not ta.default_full_tiles(128, 32, 2, 1) and not ta.default_full_tiles(128, 64, 2, 1)
    for C, Hkv, R, S in ((1, 8, 4, 8193), (8, 4, 8, 4097), (8, 8, 4, 1025), (32, 4, 8, 1025), (4, 8, 16, 4100)):
        plan = ta.split_plan(C, Hkv, R, S, 128, 132)
        assert plan["num_stages"] == 3 and math.prod(plan["grid"]) <= 264 and plan["full_tiles"], (C, Hkv, R, S)
    # splits given past the wave (9 for Qwen3 C=8 L=4096: 288 programs) keep the mask
    past = ta.split_plan(8, 4, 8, 4097, 128, 132, {"num_splits": 9})
    assert math.prod(past["grid"]) == 288 and not past["full_tiles"]
    assert ta.split_plan(8, 4, 8, 4097, 128, 132, {"num_splits": 9}, full_tiles=True)["full_tiles"]
    # MLA's plan still rounds its splits up (64 heads at C=1, L=8192: 260 programs)
    assert math.prod(ta.split_plan(1, 1, 64, 8193, 512, 132)["grid"]) == 260


def test_gqa_small_plan_runs_3_stages_only_with_4_or_more_tiles_per_split():
    """GQA's small-C x L plan: 2 stages where each split has 1-3 KV tiles of 64 positions
    (a third stage only cost shared memory there), 3 from 4 tiles on; larger shapes keep 2."""
    for C, Hkv, R, S, tiles, stages in ((1, 8, 4, 1025, 1, 2), (1, 4, 8, 8193, 2, 2), (2, 8, 4, 1025, 2, 2),
                                        (8, 4, 8, 1025, 3, 2), (1, 8, 4, 8193, 4, 3), (8, 8, 4, 1025, 5, 3),
                                        (1, 4, 8, 32769, 8, 3), (8, 8, 4, 8193, 26, 2)):
        plan = ta.split_plan(C, Hkv, R, S, 128, 132)
        assert (plan["split_len"] // plan["block_s"], plan["num_stages"]) == (tiles, stages), (C, Hkv, R, S)
        assert plan["full_tiles"]


@pytest.mark.parametrize("growth", [0.5, 12.0])
def test_lazy_rescale_when_scores_grow_along_the_sequence(growth):
    """Scores rising along S move the running max tile after tile: by less than the kernel's
    lazy-rescale threshold (growth 0.5: the stale max is kept) and by more (12: it rescales).
    Small tiles make many tiles; the result must match the reference either way."""
    gen = torch.Generator().manual_seed(int(growth * 10))
    C, Q, L, Hq, Hkv, D = 2, 3, 90, 4, 2, 32
    S = L + Q
    q = torch.randn(C, Q, Hq, D, generator=gen)
    ramp = torch.linspace(0.0, growth, S)[None, :, None, None]  # logit of position s grows ~ ramp[s] x |q|
    k = torch.randn(C, S, Hkv, D, generator=gen) * 0.3 + ramp * q[:, :1].mean(2, keepdim=True).sign() / math.sqrt(D)
    v = torch.randn(C, S, Hkv, D, generator=gen)
    mask = random_tree_mask(C, Q, gen)
    q, k, v = (t.to(DEV) for t in (q, k, v))
    ref = ta.tree_attention_gqa_reference(q, k, v, mask)
    out = ta.tree_attention_gqa(q, k, v, mask, block_s=16, num_splits=1, block_r=16)
    assert_close(out, ref, torch.float32, f"gqa lazy rescale {growth=}")


def test_tree_mask_matters():
    gen = torch.Generator().manual_seed(0)
    C, Q, L, H, D = 1, 3, 5, 2, 16
    q = torch.randn(C, Q, H, D, generator=gen)
    k = torch.randn(C, L + Q, H, D, generator=gen)
    v = torch.randn(C, L + Q, H, D, generator=gen)
    chain = torch.tril(torch.ones(Q, Q, dtype=torch.bool))[None]
    star = torch.eye(Q, dtype=torch.bool)[None]
    star[0, :, 0] = True
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    q, k, v, chain, star = (t.to(dev) for t in (q, k, v, chain, star))
    a, b = ta.tree_attention_gqa(q, k, v, chain), ta.tree_attention_gqa(q, k, v, star)
    assert torch.allclose(a[:, :2], b[:, :2], atol=1e-3) and not torch.allclose(a[:, 2], b[:, 2], atol=1e-3)


# (C, Q, L, H) with the real MLA dims 512 / 64
MLA_SHAPES = [(1, 1, 45, 2), pytest.param(2, 3, 20, 4, marks=pytest.mark.slow)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("C,Q,L,H", MLA_SHAPES)
def test_tree_attention_mla(C, Q, L, H, dtype):
    gen = torch.Generator().manual_seed(C + Q + L)
    S = L + Q
    ql = torch.randn(C, Q, H, 512, generator=gen).to(DEV, dtype)
    qr = torch.randn(C, Q, H, 64, generator=gen).to(DEV, dtype)
    ckv = torch.randn(C, S, 512, generator=gen).to(DEV, dtype)
    kpe = torch.randn(C, S, 64, generator=gen).to(DEV, dtype)
    mask = random_tree_mask(C, Q, gen)
    scale = 1.0 / math.sqrt(128 + 64)
    ref = ta.tree_attention_mla_reference(ql.float(), qr.float(), ckv.float(), kpe.float(), mask, scale)
    out = ta.tree_attention_mla(ql, qr, ckv, kpe, mask, scale, num_splits=2)
    assert_close(out, ref, dtype, f"mla {C=} {Q=} {L=} {H=} {dtype=}")
    # bf16 split partials (the (m, lse) stay fp32): the result stays within the dtype's tolerance
    out = ta.tree_attention_mla(ql, qr, ckv, kpe, mask, scale, num_splits=3, partials="bf16")
    assert_close(out, ref, dtype, f"mla bf16 partials {C=} {Q=} {L=} {H=} {dtype=}")


@pytest.mark.slow
@pytest.mark.parametrize("block_dv", [128, 256])
def test_mla_output_columns_split_over_programs(block_dv):
    """block_dv < 512: each program accumulates a slice of the 512 output columns (the value is
    loaded per slice, the scores recomputed), across row tiles, splits and the tree part."""
    gen = torch.Generator().manual_seed(block_dv)
    C, Q, L, H = 2, 3, 40, 8
    S = L + Q
    ql, qr = torch.randn(C, Q, H, 512, generator=gen).to(DEV), torch.randn(C, Q, H, 64, generator=gen).to(DEV)
    ckv, kpe = torch.randn(C, S, 512, generator=gen).to(DEV), torch.randn(C, S, 64, generator=gen).to(DEV)
    mask = random_tree_mask(C, Q, gen)
    ref = ta.tree_attention_mla_reference(ql, qr, ckv, kpe, mask, 0.07)
    out = ta.tree_attention_mla(ql, qr, ckv, kpe, mask, 0.07, block_dv=block_dv, block_r=16, block_s=16, num_splits=3)
    assert_close(out, ref, torch.float32, f"mla {block_dv=}")
    q, k, v = (torch.randn(C, Q if i == 0 else S, 4 if i == 0 else 2, 32, generator=gen).to(DEV) for i in range(3))
    ref = ta.tree_attention_gqa_reference(q, k, v, mask)
    assert_close(ta.tree_attention_gqa(q, k, v, mask, block_dv=16, num_splits=2), ref, torch.float32, "gqa block_dv=16")
    with pytest.raises(ValueError, match="block_dv=96"):
        ta.tree_attention_mla(ql, qr, ckv, kpe, mask, 0.07, block_dv=96)


@pytest.mark.slow
def test_q_loaded_inside_the_kv_loop():
    """q_in_loop: q (and MLA's q_rope) reloaded with each KV tile gives the same result, over
    several tiles per split, the tree part, and partly filled row tiles."""
    gen = torch.Generator().manual_seed(11)
    C, Q, L = 2, 3, 50
    S = L + Q
    mask = random_tree_mask(C, Q, gen)
    q, k, v = (torch.randn(C, Q if i == 0 else S, 6 if i == 0 else 2, 32, generator=gen).to(DEV) for i in range(3))
    ref = ta.tree_attention_gqa_reference(q, k, v, mask)
    out = ta.tree_attention_gqa(q, k, v, mask, q_in_loop=True, block_s=16, num_splits=2)
    assert_close(out, ref, torch.float32, "gqa q_in_loop")
    ql, qr = torch.randn(C, Q, 4, 512, generator=gen).to(DEV), torch.randn(C, Q, 4, 64, generator=gen).to(DEV)
    ckv, kpe = torch.randn(C, S, 512, generator=gen).to(DEV), torch.randn(C, S, 64, generator=gen).to(DEV)
    ref = ta.tree_attention_mla_reference(ql, qr, ckv, kpe, mask, 0.07)
    out = ta.tree_attention_mla(ql, qr, ckv, kpe, mask, 0.07, q_in_loop=True, block_s=16, num_splits=2)
    assert_close(out, ref, torch.float32, "mla q_in_loop")


def test_q_in_loop_default_is_gqa_decode_only():
    assert ta.default_q_in_loop(128, 16)  # GQA, q=1 (Llama / Qwen: 4 / 8 rows in a 16-row tile)
    assert not ta.default_q_in_loop(128, 64)  # GQA tree verification: not measured
    assert not ta.default_q_in_loop(512, 16)  # MLA: slower


def test_partials_knob_rejects_unknown_dtype():
    q = torch.zeros(1, 1, 2, 16, device=DEV)
    kv = torch.zeros(1, 3, 1, 16, device=DEV)
    with pytest.raises(ValueError, match="partials='fp16'"):
        ta.tree_attention_gqa(q, kv, kv, torch.ones(1, 1, 1, dtype=torch.bool, device=DEV), partials="fp16")


def test_bytes_and_flops():
    assert ta.gqa_bytes_moved(1, 1, 7, 8, 2, 128) == 2 * (2 * 8 * 2 * 128 + 2 * 8 * 128)
    assert ta.gqa_flops(1, 1, 7, 8, 128) == 4 * 8 * 8 * 128
    # Kimi MLA KV: (512+64)*2 B per token per layer (facts §1a: 1152 B)
    assert ta.mla_bytes_moved(1, 1, 999, 8) == 1000 * 1152 + 2 * (8 * 576 + 8 * 512)
    assert ta.mla_flops(1, 1, 9, 8) == 2 * 8 * 10 * 1088


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_tree_attention_mla_gpu_large():
    C, Q, L, H = 4, 17, 8192, 8
    ql = torch.randn(C, Q, H, 512, device=DEV, dtype=torch.bfloat16)
    qr = torch.randn(C, Q, H, 64, device=DEV, dtype=torch.bfloat16)
    ckv = torch.randn(C, L + Q, 512, device=DEV, dtype=torch.bfloat16)
    kpe = torch.randn(C, L + Q, 64, device=DEV, dtype=torch.bfloat16)
    mask = random_tree_mask(C, Q, torch.Generator().manual_seed(0))
    ref = ta.tree_attention_mla_reference(ql, qr, ckv, kpe, mask, 0.07)
    assert_close(ta.tree_attention_mla(ql, qr, ckv, kpe, mask, 0.07), ref, torch.bfloat16, f"mla {C=} {Q=} {L=}")


@pytest.mark.slow
def test_many_splits_combine_loops_over_split_chunks():
    """More than 64 KV splits: the combine kernel loops over the splits in chunks."""
    gen = torch.Generator().manual_seed(5)
    C, Q, L, Hq, Hkv, D = 1, 1, 1100, 2, 1, 16
    S = L + Q
    q = torch.randn(C, Q, Hq, D, generator=gen).to(DEV)
    k = torch.randn(C, S, Hkv, D, generator=gen).to(DEV)
    v = torch.randn(C, S, Hkv, D, generator=gen).to(DEV)
    mask = torch.ones(C, Q, Q, dtype=torch.bool, device=DEV)
    ref = ta.tree_attention_gqa_reference(q, k, v, mask)
    out = ta.tree_attention_gqa(q, k, v, mask, block_s=16, num_splits=69)  # 69 splits of one 16-position tile
    assert_close(out, ref, torch.float32, "gqa 69 splits")


def test_default_config_fills_one_wave_at_small_c_and_keeps_large_shapes():
    # C=1 decode: the old rule gave 2 (MLA, L=1024) / 16 (MLA, L=8192) programs; now one resident wave
    assert ta.default_config(1, 1, 8, 1025, 512)["num_splits"] == 17  # one 64-position tile per split
    assert ta.default_config(1, 1, 8, 8193, 512)["num_splits"] == 129  # every tile, 129 <= 132 SMs
    assert ta.default_config(1, 8, 4, 8193, 128)["num_splits"] == 33  # GQA: 2 programs per SM
    # MLA with 64 heads at C=1: 16-row tiles (4 row blocks) and about two programs per SM
    assert ta.default_config(1, 1, 64, 8193, 512) == dict(block_r=16, block_s=64, num_splits=66, num_warps=4,
                                                          num_stages=2)
    assert ta.default_config(1, 1, 64, 1025, 512)["num_splits"] == 17  # every tile
    assert ta.default_config(1, 1, 64, 8193, 512, block_r=32)["block_r"] == 32  # a given row tile stays
    # 64 heads at C=8: 4 row blocks x 8 sequences, 264 // 32 = 8 splits (rounded up, 9 made 288
    # programs for 2 x 132 places: a second wave of 24)
    assert ta.default_config(8, 1, 64, 4097, 512)["num_splits"] == 8
    for C in (1, 2, 3, 4, 5, 8, 16, 32):  # the many-head small plan never passes its one resident wave
        for S in (1025, 4097, 8193):
            plan = ta.split_plan(C, 1, 64, S, 512)
            g = plan["grid"]
            if plan["block_r"] == 16:
                assert g[0] * g[1] * g[2] <= ta.MLA_SMALL_WAVES * 132, (C, S, g)
    # enough sequences to fill the GPU: unchanged (each split keeps >= 8 tiles)
    assert ta.default_config(128, 1, 64, 8193, 512)["block_r"] == 32
    assert ta.default_config(32, 1, 72, 8193, 512)["block_r"] == 32  # C=32, 9-token trees, 8 heads
    assert ta.default_config(128, 1, 8, 32769, 512)["num_splits"] == 9
    assert ta.default_config(32, 4, 8, 32769, 128)["num_splits"] == 3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_eager_calls_after_the_first_launch_from_their_plan():
    """The first call of a signature plans and compiles under the plan's keys; later calls
    launch directly from the plan (FastLauncher hits) with new data and a new scale, also
    inside a CUDA graph, and give the reference results; a misaligned view and a launch hook
    take Triton's own path and still give them."""
    from triton import knobs

    gen = torch.Generator().manual_seed(5)
    C, Q, L, Hq, Hkv, D = 2, 3, 300, 8, 2, 64
    mask = random_tree_mask(C, Q, gen)

    def data():
        return [torch.randn(C, *s, generator=gen).to(DEV, torch.bfloat16)
                for s in ((Q, Hq, D), (L + Q, Hkv, D), (L + Q, Hkv, D))]

    kernel, combine = ta._get_kernel(), ta._get_combine()
    q, k, v = data()
    ta.tree_attention_gqa(q, k, v, mask)
    n_plans, hits = len(ta._PLANS), (kernel.hits, combine.hits)
    for scale in (0.1, 0.2):
        q, k, v = data()
        ref = ta.tree_attention_gqa_reference(q.float(), k.float(), v.float(), mask, scale)
        assert_close(ta.tree_attention_gqa(q, k, v, mask, scale), ref, torch.bfloat16, f"planned gqa {scale=}")
    assert len(ta._PLANS) == n_plans and (kernel.hits, combine.hits) == (hits[0] + 2, hits[1] + 2)
    # MLA, then inside a CUDA graph replayed on new data
    H = 16
    ql, qr = (torch.randn(1, 1, H, d, device=DEV, dtype=torch.bfloat16) for d in (512, 64))
    ckv, kpe = (torch.randn(1, 1025, d, device=DEV, dtype=torch.bfloat16) for d in (512, 64))
    one = torch.ones(1, 1, 1, dtype=torch.bool, device=DEV)
    ta.tree_attention_mla(ql, qr, ckv, kpe, one, 0.07)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        ta.tree_attention_mla(ql, qr, ckv, kpe, one, 0.07)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = ta.tree_attention_mla(ql, qr, ckv, kpe, one, 0.07)
    for _ in range(2):
        for t in (ql, qr, ckv, kpe):
            t.normal_()
        g.replay()
        torch.cuda.synchronize()
        ref = ta.tree_attention_mla_reference(ql, qr, ckv, kpe, one, 0.07)
        assert_close(out, ref, torch.bfloat16, "planned mla in a graph")
    # a view 2 bytes off alignment: Triton's own path, same results
    qq = torch.randn(C * Q * Hq * D + 1, generator=gen).to(DEV, torch.bfloat16)[1:].view(C, Q, Hq, D)
    q, k, v = data()
    ref = ta.tree_attention_gqa_reference(qq.float(), k.float(), v.float(), mask)
    hits = kernel.hits
    assert_close(ta.tree_attention_gqa(qq, k, v, mask), ref, torch.bfloat16, "misaligned q")
    # a launch hook (a profiler): Triton's own path
    seen = []
    knobs.runtime.launch_enter_hook.add(seen.append)
    try:
        ref = ta.tree_attention_gqa_reference(q.float(), k.float(), v.float(), mask)
        assert_close(ta.tree_attention_gqa(q, k, v, mask), ref, torch.bfloat16, "under a launch hook")
    finally:
        knobs.runtime.launch_enter_hook.remove(seen.append)
    assert seen and kernel.hits == hits
