"""Step laws against hand-computed figures.

A hand-made profile with round numbers (every kernel class: t0 = 10 us, 1000 GB/s, 100 TFLOP/s;
eager launch 5 us, graph node 1 us, graph launch 10 us, host step 100 us; tree build
GPU 50 us + 0.5 us per node, CPU 100 us + 2 us per node) on a one-layer dense GQA model small
enough to count its kernels by hand. Every expected value below is worked out in the
comments, not by calling the model.

The one-layer model's step, one GPU, C = 1, q = 1 (12 ops, 13 kernels):
  attn_norm, qkv_proj, rope, attention_core_full (2 kernels: a GQA call is 2), o_proj,
  mlp_norm_dense, dense_gate_up, dense_silu_mul, dense_down, final_norm, lm_head, sample_argmax.
Each op costs t0 + max(bytes/bw, flops/F); its bytes are at most ~35 KB, so each op is
10 us + < 0.04 us and the GPU work is 120 us + epsilon (epsilon < 0.5 us).
"""

import math

import pytest

from perfmodel import kernel_classes
from perfmodel.model.layers import Layout, decode_ops
from perfmodel.model.machine import build_machine
from perfmodel.model.ops import KernelLaw, Op, estimate
from perfmodel.model.step import step_estimate
from perfmodel.profile import KERNEL_CLASSES, KernelFit, Overheads, Profile, Provenance, TreeBuildFit
from perfmodel.specs import registry
from perfmodel.specs.schema import GQASpec, ModelSpec

T0, BW, TF = 10.0, 1000.0, 100.0
LAUNCH, NODE, GLAUNCH, HOST = 5.0, 1.0, 10.0, 100.0
N_OPS, N_KERNELS = 12, 13


def hand_profile(launcher="torch") -> Profile:
    fits = {c: KernelFit(t0_us=T0, bw_GBps=BW, tflops=TF, launcher=launcher, source="hand-made test profile")
            for c in KERNEL_CLASSES}
    return Profile(
        provenance=Provenance(kind="spec-derived", gpu_name="test", gpu_spec="h200-sxm", timestamp="t"),
        fits=fits,
        overheads=Overheads(launch_eager_us=LAUNCH, graph_node_us=NODE, graph_launch_us=GLAUNCH, host_step_us=HOST),
        treebuild={"gpu": TreeBuildFit(impl="gpu", t0_us=50.0, per_node_us=0.5),
                   "cpu": TreeBuildFit(impl="cpu", t0_us=100.0, per_node_us=2.0)},
    )


def tiny_model(**kw) -> ModelSpec:
    """hidden 64, 4 query heads of dim 32 (head_dim != hidden / n_heads = 16), 2 KV heads."""
    base = dict(name="tiny", display_name="tiny", source="hand-written test model", n_layers=1, n_dense_layers=1,
                hidden_size=64, vocab_size=256, attention=GQASpec(n_heads=4, n_kv_heads=2, head_dim=32),
                dense_intermediate_size=128)
    base.update(kw)
    return ModelSpec(**base)


def hand_machine(host_cpu_factor=1.0, gpu=None, profile=None):
    h200 = registry.load_gpu("h200")
    return build_machine(gpu or h200, 1, None, profile or hand_profile(), h200, registry.load_memory_kinds(),
                         host_cpu_factor=host_cpu_factor)


ONE = Layout("tp", 1)


def test_one_op_roofline_by_hand():
    """t = t0 + max(bytes/bw, flops/F), times count."""
    law = KernelLaw(t0_us=5.0, bw_GBps=2000.0, tflops=100.0)
    # memory 4e6 B / 2000 GB/s = 2 us; compute 1e9 / 100 TF = 10 us -> compute-bound, 15 us a call
    e = estimate(Op("x", "dense", "gemm_bf16", bytes=4e6, flops=1e9, count=3), law)
    assert (e.total_us, e.memory_us, e.compute_us, e.overhead_us) == pytest.approx((45.0, 6.0, 30.0, 15.0), rel=1e-12)
    assert e.bound == "compute"
    # 8e7 B -> 40 us memory vs 10 us compute: memory-bound, 45 us
    e = estimate(Op("y", "dense", "gemm_bf16", bytes=8e7, flops=1e9), law)
    assert (e.total_us, e.bound) == (pytest.approx(45.0), "memory")
    # an fp8 op on a chip whose fp8 rate is twice bf16: compute 5 us
    e = estimate(Op("z", "dense", "gemm_bf16", bytes=0.0, flops=1e9), law, flops_scale=2.0)
    assert e.total_us == pytest.approx(10.0)
    # a tie (memory = compute) counts as memory-bound
    assert estimate(Op("t", "dense", "gemm_bf16", bytes=2e7, flops=1e9), law).bound == "memory"


def test_scaled_sample_keeps_the_split():
    e = estimate(Op("x", "dense", "gemm_bf16", bytes=4e6, flops=1e9, count=2), KernelLaw(5.0, 2000.0, 100.0))
    s = e.scaled(3.0)
    assert (s.total_us, s.memory_us, s.compute_us, s.overhead_us) == pytest.approx((90.0, 12.0, 60.0, 30.0))


def test_hand_counted_step_under_graphs():
    """graph step = GPU work (120 us + eps) + graph launch 10 + host 100; the dispatch term is the
    graph launch plus 13 kernels x 1 us node cost (NOT the 5 us eager launch); the floors are
    12 ops x 10 us less those 13 us of nodes."""
    est = step_estimate(tiny_model(), hand_machine(), ONE, 1, 1, 100)
    assert est.n_kernels == N_KERNELS
    bd = est.breakdown_us
    assert bd["dispatch"] == pytest.approx(GLAUNCH + N_KERNELS * NODE)
    assert bd["latency_floor"] == pytest.approx(N_OPS * T0 - N_KERNELS * NODE)
    assert bd["host"] == pytest.approx(HOST)
    assert 230.0 < est.step_us < 230.5  # 120 + eps + 10 + 100


def test_eager_step_overlaps_launches_with_gpu_work():
    """Eager: each kernel starts once issued and the GPU is free. With the host fast (5 us per
    launch < 10 us of GPU work per op) only the first launch is exposed: the graph step with
    that launch in place of the graph launch. With a 4x slower host (20 us per launch) the
    GPU waits on every launch: the 13 launches (260 us), then the last op's ~10 us of work,
    plus the 400 us host step."""
    fast = step_estimate(tiny_model(), hand_machine(), ONE, 1, 1, 100, graph=False)
    graph = step_estimate(tiny_model(), hand_machine(), ONE, 1, 1, 100)
    assert fast.step_us == pytest.approx(graph.step_us - GLAUNCH + LAUNCH)
    slow = step_estimate(tiny_model(), hand_machine(4.0), ONE, 1, 1, 100, graph=False)
    assert slow.step_us == pytest.approx(N_KERNELS * LAUNCH * 4 + T0 + HOST * 4, abs=0.01)


def test_host_factor_2_doubles_host_step_and_eager_launch():
    """Host-bound eager steps: (step - host - the last op's GPU work) is the launch time; both
    double with the factor."""
    a = step_estimate(tiny_model(), hand_machine(4.0), ONE, 1, 1, 100, graph=False)
    b = step_estimate(tiny_model(), hand_machine(8.0), ONE, 1, 1, 100, graph=False)
    assert b.breakdown_us["host"] == pytest.approx(2 * a.breakdown_us["host"]) == pytest.approx(800.0)
    assert b.step_us - b.breakdown_us["host"] - T0 == pytest.approx(2 * (a.step_us - a.breakdown_us["host"] - T0), abs=0.01)
    g = step_estimate(tiny_model(), hand_machine(2.0), ONE, 1, 1, 100)
    assert g.breakdown_us["host"] == pytest.approx(2 * HOST)
    assert g.breakdown_us["dispatch"] == pytest.approx(2 * GLAUNCH + N_KERNELS * NODE)  # nodes are GPU-side


def test_triton_launcher_priced_apart():
    """Every class launched through Triton's Python launcher: eager launch uses its price."""
    prof = hand_profile("triton").model_copy(update={"overheads": Overheads(
        launch_eager_us=LAUNCH, launch_eager_triton_us=30.0, graph_node_us=NODE, graph_launch_us=GLAUNCH,
        host_step_us=HOST)})
    est = step_estimate(tiny_model(), hand_machine(profile=prof), ONE, 1, 1, 100, graph=False)
    # 390 us of launches, each longer than its op's 10 us of work: the launches, the last op, the host
    assert est.step_us == pytest.approx(N_KERNELS * 30.0 + T0 + HOST, abs=0.01)


def test_tree_build_grows_with_concurrency_times_budget():
    """tree build = t0 + per_node x C x B: GPU 50 + 0.5 x 4 x 8 = 66 us; CPU with a 2x host
    (100 + 2 x 4 x 8) x 2 = 328 us; the GPU build does not scale with the host."""
    m = tiny_model()
    gpu = step_estimate(m, hand_machine(2.0), ONE, 4, 9, 100, tree_budget=8, tree_impl="gpu")
    assert gpu.breakdown_us["tree_build"] == pytest.approx(66.0)
    cpu = step_estimate(m, hand_machine(2.0), ONE, 4, 9, 100, tree_budget=8, tree_impl="cpu")
    assert cpu.breakdown_us["tree_build"] == pytest.approx(328.0)
    assert "tree_build" not in step_estimate(m, hand_machine(), ONE, 4, 9, 100).breakdown_us
    with pytest.raises(ValueError, match="tree-build"):
        step_estimate(m, hand_machine(profile=hand_profile().model_copy(update={"treebuild": {}})), ONE, 4, 9, 100,
                      tree_budget=8)


def test_doubling_bandwidth_halves_the_memory_bound_part():
    """A target with twice the H200's bandwidth (same memory kind and SMs): a memory-bound op
    whose law streams at the profile GPU's read ceiling halves its bandwidth time; one whose law
    is short of it (the hand profile's 1000 GB/s, kept there by what its SMs hold in flight)
    gains as Little's law says, 1/(1/(2 R) + 1/C) with 1/C = 1/1000 - 1/R; the floors do not move."""
    h200 = registry.load_gpu("h200")
    mem = h200.memory.model_copy(update={"bandwidth_GBps": h200.memory.bandwidth_GBps.model_copy(
        update={"value": 2 * h200.memory.bandwidth_GBps.value})})
    fast = h200.model_copy(update={"name": "h200-2x", "memory": mem})
    m = registry.load_model("llama-3.1-8b")
    read = h200.memory.bandwidth_GBps.value * h200.memory.streaming_fraction(registry.load_memory_kinds())
    a = step_estimate(m, hand_machine(), ONE, 64, 1, 8192)
    b = step_estimate(m, hand_machine(gpu=fast), ONE, 64, 1, 8192)
    # attention at C=64, L=8192: 64 x 8193 x 4096 B of KV = 2.1 GB -> 2148 us at 1000 GB/s,
    # against 4 x 64 x 32 x 8193 x 128 FLOP = 8.6 GFLOP -> 86 us at 100 TF: memory-bound
    attn_bytes = 32 * (64 * 8193 * 4096 + 2 * 64 * 32 * 128 * 2)
    assert a.breakdown_us["attention"] == pytest.approx(attn_bytes / 1e6)
    bw_fast = 1 / (1 / (2 * read) + (1 / BW - 1 / read))
    assert b.breakdown_us["attention"] == pytest.approx(attn_bytes / (bw_fast * 1e3))
    assert b.breakdown_us["latency_floor"] == pytest.approx(a.breakdown_us["latency_floor"])
    at_roof = hand_profile()
    at_roof.fits = {c: f.model_copy(update={"bw_GBps": read}) for c, f in at_roof.fits.items()}
    a = step_estimate(m, hand_machine(profile=at_roof), ONE, 64, 1, 8192)
    b = step_estimate(m, hand_machine(gpu=fast, profile=at_roof), ONE, 64, 1, 8192)
    assert b.breakdown_us["attention"] == pytest.approx(a.breakdown_us["attention"] / 2)


def test_gqa_attention_reads_k_and_v_with_the_spec_head_dim():
    """Attention bytes per layer = C x (L+q) x 2 (K and V) x kv_heads x head_dim x 2 B + the q/out
    rows; the tiny model's head_dim is 32 while hidden / n_heads is 16."""
    ops, _ = decode_ops(tiny_model(), ONE, 3, 1, 99)
    core = next(o for o in ops if o.name == "attention_core_full")
    assert core.bytes == 3 * 100 * 2 * 2 * 32 * 2 + 2 * 3 * 4 * 32 * 2  # 76,800 + 1,536
    assert core.flops == 4.0 * 3 * 4 * 100 * 32
    qkv = next(o for o in ops if o.name == "qkv_proj")
    assert qkv.bytes == 64 * (4 + 2 * 2) * 32 * 2 + 3 * (64 + 256) * 2  # weights + activations in/out
    o = next(o for o in ops if o.name == "o_proj")
    assert o.bytes == 4 * 32 * 64 * 2 + 3 * (128 + 64) * 2


def test_fp8_kv_cache_halves_the_kv_read():
    m = tiny_model()
    m8 = m.model_copy(update={"dtypes": m.dtypes.model_copy(update={"kv_cache": "fp8"})})
    core = next(o for o in decode_ops(m8, ONE, 3, 1, 99)[0] if o.name == "attention_core_full")
    assert core.bytes == 3 * 100 * 2 * 2 * 32 * 1 + 2 * 3 * 4 * 32 * 2
    assert core.probe is None  # the profile timed bf16 caches only


def test_sliding_window_layers_read_only_the_window():
    """Half the layers see window + q tokens, the rest the whole context (gpt-oss style)."""
    m = tiny_model(n_layers=4, n_dense_layers=4,
                   attention=GQASpec(n_heads=4, n_kv_heads=2, head_dim=32, sliding_window=16, sliding_layer_fraction=0.5))
    ops, _ = decode_ops(m, ONE, 1, 1, 999)
    full = next(o for o in ops if o.name == "attention_core_full")
    win = next(o for o in ops if o.name == "attention_core_window")
    assert (full.count, win.count) == (2, 2)
    assert full.bytes == 1000 * 2 * 2 * 32 * 2 + 2 * 4 * 32 * 2
    assert win.bytes == 17 * 2 * 2 * 32 * 2 + 2 * 4 * 32 * 2  # 16 + q = 17 positions
    # a context shorter than the window: both read the whole context
    ops, _ = decode_ops(m, ONE, 1, 1, 5)
    assert {o.bytes for o in ops if o.name.startswith("attention_core")} == {6 * 2 * 2 * 32 * 2 + 2 * 4 * 32 * 2}


def test_dense_mlp_and_lm_head_bytes_by_hand():
    ops, _ = decode_ops(tiny_model(), ONE, 2, 1, 10)
    by = {o.name: o for o in ops}
    assert by["dense_gate_up"].bytes == 64 * 256 * 2 + 2 * (64 + 256) * 2
    assert by["dense_gate_up"].flops == 2.0 * 2 * 64 * 256
    assert by["dense_down"].bytes == 128 * 64 * 2 + 2 * (128 + 64) * 2
    assert by["lm_head"].bytes == 256 * 64 * 2 + 2 * (64 + 256) * 2
    assert by["lm_head"].flops == 2.0 * 2 * 64 * 256
    # rmsnorm family: 2 bf16 passes (rmsnorm), 4 (residual add fused into the norm), + the weight vector
    assert by["attn_norm"].bytes == 4 * 2 * 64 * 2 + 64 * 2
    assert by["sample_argmax"].bytes == 1 * 2 * 256 * 2 + 2 * 8  # + a (value, index) pair per token
    assert by["rope"].bytes == 2 * 2 * (4 + 2) * 32 * 2 + 2 * 2 * 32  # q and k heads + cos/sin per token
    assert by["rope"].flops == 6.0 * 2 * (4 + 2) * 32
    # TP2 halves the vocab shard and the MLP columns
    by2 = {o.name: o for o in decode_ops(tiny_model(), Layout("tp", 2), 2, 1, 10)[0]}
    assert by2["lm_head"].bytes == 128 * 64 * 2 + 2 * (64 + 128) * 2
    assert by2["dense_down"].bytes == 64 * 64 * 2 + 2 * (64 + 64) * 2


def test_tp_collectives_two_all_reduces_per_layer_and_logit_gather():
    m = tiny_model(n_layers=3, n_dense_layers=3)
    _, colls = decode_ops(m, Layout("tp", 4), 5, 2, 10)
    by = {c.name: c for c in colls}
    assert (by["tp_allreduce"].op, by["tp_allreduce"].count, by["tp_allreduce"].bytes_per_gpu) == \
        ("all_reduce", 6, 5 * 2 * 64 * 2)
    assert (by["logits_gather"].count, by["logits_gather"].bytes_per_gpu) == (1, 5 * 2 * 8)
    assert decode_ops(m, Layout("tp", 4, comm=False), 5, 2, 10)[1] == []
    assert decode_ops(m, ONE, 5, 2, 10)[1] == []


def test_collective_priced_by_ring_factor_from_link_spec():
    """Without a measured fit for the count: t = latency + bytes x 2(n-1)/n / busbw (all-reduce);
    10 tokens x 64 x 2 B = 1280 B per layer all-reduce, 10 x 8 B for the logit gather."""
    link = registry.load_link("nvlink5-nvswitch")
    gpu = registry.load_gpu("b300")
    h200 = registry.load_gpu("h200")
    mach = build_machine(gpu, 4, link, hand_profile(), h200, registry.load_memory_kinds())
    m = tiny_model(n_layers=3, n_dense_layers=3)
    est = step_estimate(m, mach, Layout("tp", 4), 5, 2, 10)
    c = link.calibrated
    lat, bb = c.allreduce_latency_us.value, c.allreduce_busbw_GBps.value
    want = 6 * (lat + 1280 * 1.5 / (bb * 1e3)) + (lat + 80 * 1.5 / (bb * 1e3))
    assert est.breakdown_us["collectives"] == pytest.approx(want)
    assert math.isclose(mach.all_reduce.latency_us, lat)


@pytest.mark.parametrize("name", ["nvlink5-nvswitch", "pcie5-host"])
def test_all_to_all_priced_from_the_links_all_to_all_calibration(name):
    """Each collective gets its own line of the link's calibration: an all-to-all its
    all-to-all latency and bus bandwidth, an all-reduce its all-reduce ones. The shipped links
    (hwspecs/links/*.yaml) give both the same figures, so the all-to-all line is moved here
    (latency x 3, bus bandwidth / 2) to tell them apart."""
    link = registry.load_link(name)
    c = link.calibrated
    c = c.model_copy(update={
        "alltoall_latency_us": c.alltoall_latency_us.model_copy(update={"value": 3 * c.alltoall_latency_us.value}),
        "alltoall_busbw_GBps": c.alltoall_busbw_GBps.model_copy(update={"value": c.alltoall_busbw_GBps.value / 2})})
    link = link.model_copy(update={"calibrated": c})
    h200 = registry.load_gpu("h200")
    mach = build_machine(registry.load_gpu("b300"), 4, link, hand_profile(), h200, registry.load_memory_kinds())
    a2a = (c.alltoall_latency_us.value, c.alltoall_busbw_GBps.value)
    ar = (c.allreduce_latency_us.value, c.allreduce_busbw_GBps.value)
    assert a2a != ar
    assert (mach.all_to_all.latency_us, mach.all_to_all.busbw_GBps) == a2a
    assert (mach.all_reduce.latency_us, mach.all_reduce.busbw_GBps) == ar


def test_kimi_kernel_count_and_graph_dispatch_by_hand():
    """Kimi K2.6 on one GPU, counted by hand per layer:
      attention (61 layers): norm, q_a, q_norm, q_b, kv_a, kv_norm, q_rope, W_UK absorb,
        attention core (2 kernels), W_UV, latent transposes, o_proj = 13
      MoE FFN (60 layers): norm, router, top-k, routed experts (align + gate_up + down + reduce
        = 4), shared gate_up, SiLU*mul, down = 10;  dense FFN (layer 0): norm, gate_up, SiLU*mul,
        down = 4;  lm_head: final norm, GEMM, argmax = 3.
    1400 kernels; under graphs each costs the 1 us node, so dispatch = 10 + 1400 us; eager with
    a 100x host is launch-bound: 1400 x 500 us of launches + the 10 ms host step (+ the work
    issued last)."""
    m = registry.load_model("kimi-k2.6")
    g = step_estimate(m, hand_machine(), ONE, 1, 1, 1000)
    assert g.n_kernels == 61 * 13 + 60 * 10 + 4 + 3 == 1400
    assert g.breakdown_us["dispatch"] == pytest.approx(GLAUNCH + 1400 * NODE)
    e = step_estimate(m, hand_machine(100.0), ONE, 1, 1, 1000, graph=False)
    assert 0.0 < e.step_us - (1400 * LAUNCH * 100 + HOST * 100) < 100.0
    # TP8 adds 2 all-reduces per layer and the logit gather: 123 more kernels
    h200 = registry.load_gpu("h200")
    m8 = build_machine(h200, 8, registry.load_link("nvlink4-nvswitch"), hand_profile(), h200,
                       registry.load_memory_kinds())
    assert step_estimate(m, m8, Layout("tp", 8), 1, 1, 1000).n_kernels == 1400 + 123
    # each collective is an eager launch too: a 100x host launches 1523 kernels x 500 us
    m8slow = build_machine(h200, 8, registry.load_link("nvlink4-nvswitch"), hand_profile(), h200,
                           registry.load_memory_kinds(), host_cpu_factor=100.0)
    e8 = step_estimate(m, m8slow, Layout("tp", 8), 1, 1, 1000, graph=False)
    # ... and then the GPU runs what was issued last (a fraction of one layer's work: < 100 us)
    assert 0.0 < e8.step_us - (1523 * LAUNCH * 100 + HOST * 100) < 100.0


def test_step_sigma_by_hand():
    """1-sigma of the step: terms priced by one law share its error (added linearly), different
    laws are independent (added in quadrature). Hand profile on its own GPU (fit rmse 0):
    floors +-10%, graph node +-10%, host terms +-10%; the bandwidth terms (< 0.5 us) are
    negligible. Floors less node share: elementwise 6 x 9 us, GEMM 5 x 9 us, attention 1 x 8 us.
      sigma^2 = 5.4^2 + 4.5^2 + 0.8^2 + (13 x 1 x 0.1)^2 + (10 x 0.1)^2 + (100 x 0.1)^2 = 152.74
    On a B300 the carried floors and node are +-30%, the host terms +-25%."""
    est = step_estimate(tiny_model(), hand_machine(), ONE, 1, 1, 100)
    assert est.sigma_us == pytest.approx(math.sqrt(152.74), rel=1e-3)
    b300 = registry.load_gpu("b300")
    est = step_estimate(tiny_model(), hand_machine(gpu=b300), ONE, 1, 1, 100)
    want = (16.2**2 + 13.5**2 + 2.4**2 + 3.9**2 + 2.5**2 + 25.0**2) ** 0.5
    assert est.sigma_us == pytest.approx(want, rel=1e-3)
    # a 2x host on the profile's own GPU: host terms +-25%, the GPU-side terms unchanged
    est = step_estimate(tiny_model(), hand_machine(2.0), ONE, 1, 1, 100)
    assert est.sigma_us == pytest.approx((5.4**2 + 4.5**2 + 0.8**2 + 1.3**2 + 5.0**2 + 50.0**2) ** 0.5, rel=1e-3)


def test_engine_host_adds_its_time_and_its_own_sigma_in_quadrature():
    """A calibrated engine host of 400 +- 30 us is its own term: the step grows by 400 us and
    sigma^2 by 30^2 = 900 (an independent error), whatever the host's other terms."""
    from dataclasses import replace

    m = hand_machine()
    base = step_estimate(tiny_model(), m, ONE, 1, 1, 100)
    eng = replace(m, overheads=replace(m.overheads, engine_host_us=400.0, engine_host_sigma_us=30.0))
    est = step_estimate(tiny_model(), eng, ONE, 1, 1, 100)
    assert est.breakdown_us["engine_host"] == 400.0
    assert est.step_us - base.step_us == pytest.approx(400.0)
    assert est.sigma_us**2 - base.sigma_us**2 == pytest.approx(900.0)
    assert step_estimate(tiny_model(), eng, ONE, 1, 1, 100, host=False).step_us < base.step_us  # no host terms


def _tiny_with_drafter():
    from perfmodel.specs.schema import DrafterSpec

    return tiny_model(drafter=DrafterSpec(name="tiny-draft", source="hand-written test drafter", n_layers=2,
                                          hidden_size=64, n_heads=4, n_kv_heads=2, head_dim=32, intermediate_size=128,
                                          block_size=4, n_target_layers_fused=2))


def test_draft_term_by_hand():
    """A 2-layer drafter (the tiny model's shape), block 4: 2 x 9 layer ops + the fc that fuses
    2 target layers + the target's norm, lm_head and argmax over the block's last 3 positions:
    22 calls of 10 us (+ < 1 us of bandwidth), 24 kernels; its comm-free single GPU adds no
    collectives."""
    m = _tiny_with_drafter()
    est = step_estimate(m, hand_machine(), ONE, 1, 4, 100, draft=True)
    assert 220.0 < est.breakdown_us["draft"] < 221.0
    assert est.n_kernels == N_KERNELS + 24
    from perfmodel.model.step import draft_ops

    by = {o.name: o for o in draft_ops(m, ONE, 3, 100)}
    assert by["draft_fc"].bytes == 2 * 64 * 64 * 2 + 3 * (2 * 64 + 64) * 2  # C=3 rows of 2 fused layers
    assert by["lm_head"].bytes == 256 * 64 * 2 + 3 * 3 * (64 + 256) * 2  # 3 sequences x 3 positions
    assert by["attention_core_full"].bytes == 3 * 104 * 2 * 2 * 32 * 2 + 2 * 12 * 4 * 32 * 2  # 4 block tokens
    assert by["qkv_proj"].count == 2
    # DP attention (EP): the fc and lm_head see this GPU's ceil(3/2) = 2 sequences
    ep = {o.name: o for o in draft_ops(m, Layout("ep", 2), 3, 100)}
    assert ep["draft_fc"].bytes == 2 * 64 * 64 * 2 + 2 * (2 * 64 + 64) * 2
    assert ep["lm_head"].bytes == 128 * 64 * 2 + 2 * 3 * (64 + 128) * 2


def test_transfer_rules_and_their_uncertainty():
    """machine.py's rules on a profile with a 20% fit rmse, from the H200 (HBM3e) to:
      itself: bw carried, +-20% (the rmse), floors +-10%;
      RTX PRO 6000 (GDDR7): the read ceiling R x (1792/4800) x (0.85/0.90) in series with the
        fit's in-flight rate (1/C = 1/bw - 1/R) x 188/132 SMs, +-sqrt(.2^2 + .06^2 + GDDR7^2 + .05^2),
        floors +-30% (another architecture), compute x bf16 peak ratio;
      MI300X (AMD): + the 25% cross-vendor term on bandwidth and floors."""
    mk = registry.load_memory_kinds()
    prof = hand_profile()
    prof = prof.model_copy(update={"fits": {c: f.model_copy(update={"rmse_rel": 0.2}) for c, f in prof.fits.items()},
                                   "treebuild": {k: v.model_copy(update={"rmse_rel": 0.3}) for k, v in prof.treebuild.items()}})
    h200 = registry.load_gpu("h200")
    same = hand_machine(profile=prof).laws["gemm_bf16"]
    # the floor less its one kernel's graph node, which is priced apart as dispatch
    assert (same.bw_GBps, same.tflops, same.t0_us) == pytest.approx((BW, TF, T0 - NODE))
    assert (same.rel_unc_bw, same.rel_unc_t0) == pytest.approx((0.2, 0.1))
    rtx = registry.load_gpu("rtx-pro-6000")
    law = hand_machine(gpu=rtx, profile=prof).laws["gemm_bf16"]
    g7 = mk.kinds["GDDR7"].uncertainty_rel
    read = 4800 * 0.90  # the hand profile measured no ceiling: the H200's datasheet x HBM3e's fraction
    roof = read * rtx.memory.bandwidth_GBps.value / 4800 * 0.85 / 0.90
    in_flight = 1 / (1 / BW - 1 / read) * rtx.sm_count.value / h200.sm_count.value
    assert law.bw_GBps == pytest.approx(1 / (1 / roof + 1 / in_flight))
    assert law.tflops == pytest.approx(TF * rtx.compute.bf16_dense_TFLOPS.value / h200.compute.bf16_dense_TFLOPS.value)
    assert law.rel_unc_bw == pytest.approx((0.2**2 + 0.06**2 + g7**2 + 0.05**2) ** 0.5)
    assert law.rel_unc_t0 == pytest.approx(0.3)
    amd = hand_machine(gpu=registry.load_gpu("mi300x"), profile=prof).laws["gemm_bf16"]
    h3 = mk.kinds["HBM3"].uncertainty_rel
    assert amd.rel_unc_bw == pytest.approx((0.2**2 + 0.06**2 + h3**2 + 0.05**2 + 0.25**2) ** 0.5)
    assert amd.rel_unc_t0 == pytest.approx((0.3**2 + 0.25**2) ** 0.5)
    # a perfect fit on its own GPU still carries a 3% floor on bandwidth
    assert hand_machine().laws["gemm_bf16"].rel_unc_bw == pytest.approx(0.03)
    # tree build: its rmse, at least 15%; collectives from a link spec carry the spec's stated uncertainty
    assert hand_machine(profile=prof).treebuild["cpu"].rel_unc == pytest.approx(0.3)
    assert hand_machine().treebuild["gpu"].rel_unc == pytest.approx(0.15)
    link = registry.load_link("nvlink4-nvswitch")
    m2 = build_machine(h200, 2, link, prof, h200, mk)
    assert (m2.all_reduce.rel_unc_lat, m2.all_reduce.rel_unc_bw) == (link.latency_uncertainty_rel,
                                                                     link.bandwidth_uncertainty_rel)
    assert m2.all_to_all.latency_us == link.calibrated.alltoall_latency_us.value
    with pytest.raises(ValueError, match="interconnect"):
        build_machine(h200, 2, None, prof, h200, mk)
    bare = build_machine(h200, 1, None, prof.model_copy(update={"fits": {}}), h200, mk)  # every class spec-derived
    assert all(law.rule.startswith("spec-derived") for law in bare.laws.values())
    own = {c.name for c in kernel_classes.CLASSES if not c.stand_in}
    assert set(bare.laws) >= own and not set(bare.laws) & (set(KERNEL_CLASSES) - own)
    for c in kernel_classes.CLASSES:  # a class with a stand-in is priced by the stand-in's spec-derived law
        assert bare.law_key(Op("x", "moe", c.name, bytes=1.0, flops=1.0)) == (c.stand_in or c.name)
    with pytest.raises(ValueError, match="overheads"):
        build_machine(h200, 1, None, prof.model_copy(update={"overheads": None}), h200, mk)


def test_measured_collective_fit_chosen_by_link_count_and_mode():
    """A measured fit is used only for the same link kind, GPU count and graph mode; its
    uncertainty is its rmse, at least 10%; busbw = algbw x 2(n-1)/n (all-reduce), (n-1)/n (all-to-all)."""
    from perfmodel.profile import CollectiveFit

    mk = registry.load_memory_kinds()
    h200 = registry.load_gpu("h200")
    fits = [CollectiveFit(op="all_reduce", n_gpus=4, graph=True, latency_us=7.0, bw_GBps=100.0, rmse_rel=0.05,
                          link="nvlink4"),
            CollectiveFit(op="all_to_all", n_gpus=4, graph=True, latency_us=9.0, bw_GBps=100.0, rmse_rel=0.3,
                          link="nvlink4")]
    prof = hand_profile().model_copy(update={"collectives": fits})
    nv4 = registry.load_link("nvlink4-nvswitch")
    m = build_machine(h200, 4, nv4, prof, h200, mk)
    assert (m.all_reduce.latency_us, m.all_reduce.busbw_GBps, m.all_reduce.rel_unc_lat) == pytest.approx((7.0, 150.0, 0.1))
    assert (m.all_to_all.latency_us, m.all_to_all.busbw_GBps, m.all_to_all.rel_unc_bw) == pytest.approx((9.0, 75.0, 0.3))
    for other in (build_machine(h200, 8, nv4, prof, h200, mk), build_machine(h200, 4, nv4, prof, h200, mk, graph=False),
                  build_machine(h200, 4, registry.load_link("pcie5-host"), prof, h200, mk)):
        assert "calibrated spec" in other.all_reduce.rule


def test_calibration_factors_by_hand():
    """calibration.py: a floor factor multiplies the group's floors, a bandwidth factor its
    bandwidth (never past the GPU's streaming roof), `launch` every launch/node cost, collective
    factors their link family's law (another family only widens its uncertainty by |ln k|),
    and tau is scaled but capped; on a GPU the calibration saw, its sigma replaces the rule's."""
    from perfmodel.model.calibration import Factors, calibrated, scaled_tau

    h200 = registry.load_gpu("h200")
    mk = registry.load_memory_kinds()
    m = build_machine(h200, 2, registry.load_link("nvlink4-nvswitch"), hand_profile(), h200, mk)
    f = Factors(values={"floor.gemm": 2.0, "bw.moe": 0.5, "bw.attention": 100.0, "launch": 3.0, "engine_host_us": 40.0,
                        "coll_lat.nvlink": 2.0, "coll_bw.nvlink": 0.5, "tau": 1.5},
                sigma={"floor.gemm": 0.07, "coll_lat.nvlink": 0.2}, gpus=("h200-sxm",))
    c = calibrated(m, f)
    assert c.laws["gemm_bf16"].t0_us == pytest.approx(2 * (T0 - NODE)) and c.laws["gemm_bf16"].rel_unc_t0 == 0.07
    assert c.laws["moe_bf16"].bw_GBps == pytest.approx(BW / 2) and c.laws["moe_bf16"].t0_us == pytest.approx(T0 - 4 * NODE)
    assert BW < c.laws["attention_mla"].bw_GBps <= max(BW, m.roof_GBps or 0.0)  # capped at the roof
    o = c.overheads
    assert (o.graph_node_us, o.graph_launch_us, o.launch_eager_us) == pytest.approx((3 * NODE, 3 * GLAUNCH, 3 * LAUNCH))
    assert o.engine_host_us == 40.0
    assert c.all_reduce.latency_us == pytest.approx(2 * m.all_reduce.latency_us)
    assert c.all_reduce.busbw_GBps == pytest.approx(m.all_reduce.busbw_GBps / 2)
    assert c.all_reduce.rel_unc_lat == pytest.approx(math.hypot(0.2, m.all_reduce.rel_unc_lat))
    pcie = build_machine(h200, 2, registry.load_link("pcie5-host"), hand_profile(), h200, mk)
    cp = calibrated(pcie, f)
    assert cp.all_reduce.latency_us == pcie.all_reduce.latency_us
    assert cp.all_reduce.rel_unc_lat == pytest.approx(math.hypot(pcie.all_reduce.rel_unc_lat, math.log(2)))
    # on a GPU the calibration did not see, its sigma adds to the rule's
    b300 = build_machine(registry.load_gpu("b300"), 1, None, hand_profile(), h200, mk)
    assert calibrated(b300, f).laws["gemm_bf16"].rel_unc_t0 == pytest.approx(math.hypot(0.07, 0.3))
    assert scaled_tau(4.0, f, 17) == pytest.approx(6.0) and scaled_tau(4.0, f, 5) == 5
    assert scaled_tau(4.0, Factors(), 17) == 4.0
    # a latency factor alone still calibrates its family (the bandwidth factor stays 1)
    lat_only = calibrated(m, Factors(values={"coll_lat.nvlink": 2.0}))
    assert lat_only.all_reduce.latency_us == pytest.approx(2 * m.all_reduce.latency_us)
    assert lat_only.all_reduce.busbw_GBps == pytest.approx(m.all_reduce.busbw_GBps)


def test_eager_launch_prices_a_timed_wrapper_per_call_and_other_kernels_per_kernel():
    """A wrapper the profile timed per call (MoE: align + gate_up + down, 30 us for the lot)
    costs 30 us per call, whatever its kernel count; an untimed Triton class costs the
    one-kernel wrapper's 10 us per kernel; a torch op 6 us per kernel, and so does another
    kernel set's implementation of a class whose own wrapper was timed. Hand-worked totals."""
    from types import SimpleNamespace

    from perfmodel.model.ops import Op
    from perfmodel.model.step import eager_launch_us

    o = SimpleNamespace(launch_eager_call_us={"moe_w4a16": 30.0}, launch_eager_triton_us=10.0, launch_eager_us=6.0)
    moe = Op("routed_experts", "moe", "moe_w4a16", bytes=1.0, flops=1.0, count=61)
    norm = Op("attn_norm", "elementwise", "elementwise", bytes=1.0, flops=1.0, count=61)
    gemm = Op("q_a", "dense", "gemm_bf16", bytes=1.0, flops=1.0, count=61)
    assert eager_launch_us(moe, "triton", o) == 61 * 30.0
    assert eager_launch_us(moe, "torch", o, timed=False) == 61 * 4 * 6.0
    assert eager_launch_us(norm, "triton", o) == 61 * 1 * 10.0
    assert eager_launch_us(gemm, "torch", o) == 61 * 1 * 6.0
    # the moe class without a timed wrapper: its 4 kernels at the one-kernel cost each
    assert eager_launch_us(moe, "triton", SimpleNamespace(launch_eager_call_us={}, launch_eager_triton_us=10.0,
                                                          launch_eager_us=6.0)) == 61 * 4 * 10.0


def test_eager_call_cost_by_variant_before_class_and_for_torch_calls():
    """Timed calls price torch-launched ops too (a GEMM through cuBLAS at 22 us, not a 6 us torch
    launch), and an op's "<class>.<variant>" entry before its class's: RoPE at 40 us per call,
    another elementwise variant at the one-kernel Triton launch (no "elementwise" entry), the
    same GEMM of another kernel set at the torch launch. Hand-worked totals."""
    from types import SimpleNamespace

    from perfmodel.model.ops import Op
    from perfmodel.model.step import eager_launch_us

    o = SimpleNamespace(launch_eager_call_us={"gemm_bf16": 22.0, "elementwise.rope": 40.0},
                        launch_eager_triton_us=10.0, launch_eager_us=6.0)
    gemm = Op("q_a", "dense", "gemm_bf16", bytes=1.0, flops=1.0, count=4)
    rope = Op("q_rope", "elementwise", "elementwise", bytes=1.0, flops=1.0, count=4, variant="rope")
    norm = Op("q_norm", "elementwise", "elementwise", bytes=1.0, flops=1.0, count=4, variant="rmsnorm")
    assert eager_launch_us(gemm, "torch", o) == 4 * 22.0
    assert eager_launch_us(rope, "triton", o) == 4 * 40.0
    assert eager_launch_us(norm, "triton", o) == 4 * 10.0
    assert eager_launch_us(gemm, "torch", o, timed=False) == 4 * 6.0


def test_eager_step_prices_the_torch_set_without_perfmodels_timed_calls():
    """The step model passes `timed` by the law's kernel set: with the torch kernel set the
    elementwise ops run torch's implementation, so their eager cost ignores the entries timed on
    perfmodel's Triton ones; the GEMM, the same in both sets, keeps its entry. Checked on the
    embedded profile: inflating the RoPE entry moves the perfmodel-set eager step, not the
    torch-set one."""
    from dataclasses import replace

    from perfmodel.profile import load_profile
    from perfmodel.request import embedded_profile_path

    m = registry.load_model("kimi-k2.6")
    h200 = registry.load_gpu("h200")
    prof = load_profile(str(embedded_profile_path()))
    res = {}
    for kset in ("perfmodel", "torch"):
        mach = build_machine(h200, 1, None, prof, h200, registry.load_memory_kinds(), graph=False, kernel_set=kset)
        big = replace(mach, overheads=replace(mach.overheads, launch_eager_call_us={
            **mach.overheads.launch_eager_call_us, "elementwise.rope": 5000.0}))
        lay = Layout("tp", 1, tp_shape=8)
        a = step_estimate(m, mach, lay, 1, 1, 4096, graph=False, n_layers=4, n_dense=0).step_us
        b = step_estimate(m, big, lay, 1, 1, 4096, graph=False, n_layers=4, n_dense=0).step_us
        res[kset] = b - a
    assert res["perfmodel"] > 4 * 4000.0
    assert res["torch"] == pytest.approx(0.0, abs=1e-6)


def test_eager_interleave_factor_scales_a_host_bound_step():
    """The profile's eager_interleave_factor multiplies every eager call's host cost. Kimi TP8,
    4 layers, C=1, q=1 eagerly on the embedded profile's H200 is host-bound (its launches far
    outlast its ~0.4 ms of kernels), so the step is about the host's sum plus the last kernel:
    doubling the factor doubles the step to within the GPU's share, and the graph step does
    not move."""
    from dataclasses import replace

    from perfmodel.profile import load_profile
    from perfmodel.request import embedded_profile_path

    m = registry.load_model("kimi-k2.6")
    h200 = registry.load_gpu("h200")
    prof = load_profile(str(embedded_profile_path()))
    mach = build_machine(h200, 1, None, prof, h200, registry.load_memory_kinds(), graph=False)
    lay = Layout("tp", 1, tp_shape=8)

    def step(f, graph=False):
        mf = replace(mach, overheads=replace(mach.overheads, eager_interleave_factor=f))
        return step_estimate(m, mf, lay, 1, 1, 4096, graph=graph, n_layers=4, n_dense=0, lm_head=False).step_us

    one, two = step(1.0), step(2.0)
    gpu = step(1.0, graph=True)
    assert one > 2 * gpu  # host-bound
    assert 2 * one - gpu < two <= 2 * one
    assert step(2.0, graph=True) == pytest.approx(gpu)


def test_an_eager_steps_exposed_launch_time_carries_at_least_30_percent(monkeypatch):
    """The exposed eager launch time enters the step's sigma at >= 30% of itself
    (`EAGER_REL_UNC`), not the 10% of a same-GPU host term: the glue between calls is not
    counted, and the host's own timings of one step disagree by a third. Kimi TP8, 4 layers,
    C=1 on the embedded profile's H200 is host-bound, so that term dominates the sigma: at 30%
    it is more than twice the sigma at 10%."""
    from perfmodel.model import step as step_mod
    from perfmodel.profile import load_profile
    from perfmodel.request import embedded_profile_path

    m = registry.load_model("kimi-k2.6")
    h200 = registry.load_gpu("h200")
    prof = load_profile(str(embedded_profile_path()))
    mach = build_machine(h200, 1, None, prof, h200, registry.load_memory_kinds(), graph=False)

    def sigma():
        return step_estimate(m, mach, Layout("tp", 1, tp_shape=8), 1, 1, 4096, graph=False, n_layers=4, n_dense=0,
                             lm_head=False).sigma_us

    assert step_mod.EAGER_REL_UNC >= 0.3 > mach.overheads.rel_unc_host
    wide = sigma()
    monkeypatch.setattr(step_mod, "EAGER_REL_UNC", mach.overheads.rel_unc_host)
    assert wide > 2 * sigma()


def test_eager_call_cost_follows_the_tokens_past_a_wrapper_path_boundary():
    """A wrapper timed at one token (30 us, a planned path) and at 5 tokens (140 us, the path
    past its boundary): calls of 1-4 tokens cost 30 us, of 5 or more 140 us; another class's
    "@T" entry and a malformed one change nothing. Hand-worked."""
    from types import SimpleNamespace

    from perfmodel.model.ops import Op
    from perfmodel.model.step import eager_call_us, eager_launch_us

    table = {"moe_w4a16": 30.0, "moe_w4a16@T5": 140.0, "moe_bf16@T2": 999.0, "moe_w4a16@Tx": 1.0}
    assert [eager_call_us(table, "moe_w4a16", t) for t in (1, 4, 5, 72)] == [30.0, 30.0, 140.0, 140.0]
    assert eager_call_us(table, "attention_mla", 8) is None
    assert eager_call_us({"moe_w4a16@T5": 140.0}, "moe_w4a16", 1) is None
    o = SimpleNamespace(launch_eager_call_us=table, launch_eager_triton_us=10.0, launch_eager_us=6.0)
    moe = Op("routed_experts", "moe", "moe_w4a16", bytes=1.0, flops=1.0, count=61, tokens=72)
    assert eager_launch_us(moe, "triton", o) == 61 * 140.0


def test_eager_timeline_is_the_queue_not_the_sum_or_the_max():
    """Two ops per layer, two layers: A (GPU 10 us, host 2 us), B (GPU 1 us, host 8 us). Worked
    by hand: A issued at 2, ends 12; B issued at 10, ends 13; A issued at 12, ends 23; B
    issued at 20, ends 24. The GPU totals 22 us, the host 20 us: the step takes 24 us. A host
    that keeps ahead costs nothing (the GPU sum); a GPU that keeps ahead leaves the host sum
    plus the last kernel."""
    from perfmodel.model.step import eager_timeline_us

    assert eager_timeline_us([(10.0, 2.0, 2), (1.0, 8.0, 2)]) == pytest.approx(24.0)
    assert eager_timeline_us([(10.0, 1.0, 4)]) == pytest.approx(1.0 + 40.0)
    assert eager_timeline_us([(1.0, 10.0, 4)]) == pytest.approx(40.0 + 1.0)
    # an op called once (lm_head) among per-layer ops issues a quarter of its call per layer
    assert eager_timeline_us([(4.0, 0.0, 4), (8.0, 0.0, 1)]) == pytest.approx(16.0 + 8.0)


# ----------------------------------------------------------------------------- measured lower bound
def _attention_samples(per_call_us):
    """Attention samples of the tiny model's GQA shape at C = 1, 2 and L = 64, 128 (per call)."""
    from perfmodel.profile import BenchResult, Sample

    shape = {"D": 32, "Hkv": 2, "Hq": 4, "kind": "gqa", "q": 1}
    return {"attention": BenchResult(status="ok", samples=[
        Sample(shape=dict(shape, L=L, C=c), median_ms=per_call_us / 1e3, provider="triton")
        for c in (1, 2) for L in (64, 128)])}


@pytest.mark.parametrize("node, sample_us", [(1.0, 50.0), (0.5, 11.5), (1.0, 5.0), (0.5, 10.0)])
def test_past_the_largest_sampled_concurrency_the_sample_grows_as_the_law(node, sample_us):
    """Three layers, C = 8 > the largest sampled C = 2, L = 100. The law's price per call at C
    sequences: t0 (10 us less its 2 graph nodes) + bytes / bw + the 2 nodes, with bytes = C/8 x
    210,944 B (8 sequences x 101 tokens x 2 (K, V) x 2 heads x 32 x 2 B + 2 x 8 x 4 x 32 x 2 B of
    q and output) at 1000 GB/s. The C = 2 sample, less its nodes, grows by the law's own ratio
    from C = 2 to C = 8, (t0 + 0.210944) / (t0 + 0.052736), never below the sample itself, and
    replaces the law's price for each of the 3 calls, whether above or below it (so the price is
    continuous where the samples end)."""
    m = tiny_model(n_layers=3, n_dense_layers=3)
    prof = hand_profile().model_copy(update={"overheads": Overheads(
        launch_eager_us=LAUNCH, graph_node_us=node, graph_launch_us=GLAUNCH, host_step_us=HOST),
        "provenance": Provenance(kind="measured", gpu_name="test", gpu_spec="h200-sxm", timestamp="t")})
    t0 = T0 - 2 * node
    law_per_call = t0 + 210944 / 1e6 + 2 * node
    grown = 2 * node + (sample_us - 2 * node) * (t0 + 0.210944) / (t0 + 0.052736)
    per_call = max(sample_us, grown)
    plain = step_estimate(m, hand_machine(profile=prof), ONE, 8, 1, 100)
    sampled = step_estimate(m, hand_machine(profile=prof.model_copy(update={"benches": _attention_samples(sample_us)})),
                            ONE, 8, 1, 100)
    assert sampled.step_us - plain.step_us == pytest.approx(3 * (per_call - law_per_call), rel=1e-9)


def test_the_price_is_continuous_where_the_sampled_concurrencies_end():
    """Just past the largest sampled C the price is the sample's (grown by a law ratio near 1),
    not the law's: C = 2 (sampled, 50 us per call) and the same op 1% past it differ by about
    1% of the law's byte term, while the law alone would drop to ~10 us. Checked through
    `_past_edge` at C = 2.02 (a fractional C: the op's bytes scale with it)."""
    from dataclasses import replace as _replace

    from perfmodel.model.lookup import Probe
    from perfmodel.model.ops import Op
    from perfmodel.model.step import _past_edge

    prof = hand_profile().model_copy(update={"benches": _attention_samples(50.0), "provenance": Provenance(
        kind="measured", gpu_name="test", gpu_spec="h200-sxm", timestamp="t")})
    mach = hand_machine(profile=prof)
    probe = Probe("attention", (("D", 32), ("Hkv", 2), ("Hq", 4), ("kind", "gqa"), ("q", 1)), "L", 100, "triton", "C", 2.02)
    op = Op("attention_core", "attention", "attention_gqa", bytes=52736 * 1.01, flops=1.0, probe=probe)
    just_past = _past_edge(op, mach, 2.0, 50.0)
    assert 50.0 <= just_past < 50.0 * 1.001
    assert _past_edge(_replace(op, bytes=52736 * 4, probe=_replace(probe, y=8.0)), mach, 2.0, 50.0) > just_past


# ----------------------------------------------------------------------------- drafter layouts
def test_ep_drafter_prices_the_busiest_gpus_sequences():
    """Under EP (DP attention) each GPU drafts for its own ceil(C/2) sequences: C = 3 and C = 4
    on 2 GPUs draft the same work (2 sequences on the busiest GPU); under TP every GPU drafts
    for all C (3 and 4 differ). No collectives (comm off) so only the ops count."""
    m = _tiny_with_drafter()
    mach = hand_machine()

    def draft(par, C):
        return step_estimate(m, mach, Layout(par, 2, comm=False), C, 4, 100, draft=True).breakdown_us["draft"]

    assert draft("ep", 3) == pytest.approx(draft("ep", 4), rel=1e-12)
    assert draft("tp", 3) < draft("tp", 4)
    assert draft("tp-attn-ep-moe", 4) == pytest.approx(draft("tp", 4), rel=1e-12)  # a dense drafter: TP


def test_host_bound_eager_step_is_launches_plus_host_with_a_drafter():
    """A host 20x slower: every launch (13 target + 24 drafter kernels, the collectives' too,
    each 5 us x 20 = 100 us) outlasts any call's GPU work (at most 10 us + eps), so the eager
    step is the launch time, plus the last call's own GPU time, plus the host step, whatever
    the GPU work (draft all-reduces included) adds up to."""
    m = _tiny_with_drafter()
    h200 = registry.load_gpu("h200")
    mach = build_machine(h200, 2, registry.load_link(h200.default_interconnect), hand_profile(), h200,
                         registry.load_memory_kinds(), host_cpu_factor=20.0)
    est = step_estimate(m, mach, Layout("tp", 2), 1, 4, 100, graph=False, draft=True)
    assert est.breakdown_us["draft"] > 0
    assert 0 < est.step_us - (est.n_kernels * LAUNCH * 20 + HOST * 20) < 10.5


def test_unsplit_kernel_waits_for_its_busiest_sm():
    """An unsplit kernel of 10 work units over 4 SMs runs in 3 waves: the busiest SM reads
    3 units' bytes, 3 x 1e6 / 10 = 3e5 B, at its 100 GB/s: 3 us, slower than the whole call's
    1e6 B at 1000 GB/s (1 us); with 400 units the busiest SM's 100 waves of 2500 B: 2.5 us."""
    law = KernelLaw(t0_us=5.0, bw_GBps=1000.0, tflops=100.0, unit_GBps=100.0, slots=4)
    e = estimate(Op("a", "attention", "attention_gqa", bytes=1e6, flops=0.0, units=10), law)
    assert e.memory_us == pytest.approx(3.0) and e.total_us == pytest.approx(8.0)
    e = estimate(Op("a", "attention", "attention_gqa", bytes=1e6, flops=0.0, units=400), law)
    assert e.memory_us == pytest.approx(2.5)
    e = estimate(Op("a", "attention", "attention_gqa", bytes=1e6, flops=0.0, units=4000), law)
    assert e.memory_us == pytest.approx(2.5)  # 1000 waves of 250 B
    # a split kernel (no units) or a law without a per-unit rate: the whole call's rate
    assert estimate(Op("a", "attention", "attention_gqa", bytes=1e6, flops=0.0), law).memory_us == pytest.approx(1.0)


def test_l2_residency_needs_both_gpus_l2_sizes():
    """A fit above the DRAM peak (10,000 GB/s on an H200 of 4,800) is L2-resident, kept for
    calls that fit the smaller of the two GPUs' L2 (H200: 50 MB). A GPU whose spec gives no L2
    size keeps nothing L2-resident: on it even a 1-byte call streams at the DRAM rate, on the
    profile's GPU (the source law) as on the target."""
    h200 = registry.load_gpu("h200")
    fast = hand_profile()
    fast.fits["gemm_bf16"] = fast.fits["gemm_bf16"].model_copy(update={"bw_GBps": 10000.0})
    mk = registry.load_memory_kinds()
    op = Op("o", "dense", "gemm_bf16", bytes=1.0, flops=0.0)
    with_l2 = build_machine(h200, 1, None, fast, h200, mk)
    law, src = with_l2.laws["gemm_bf16"], with_l2.source_law(op)
    assert law.l2_bytes == src.l2_bytes == h200.l2_MB.value * 1e6
    assert law.bandwidth(1.0) == 10000.0 and law.bandwidth(law.l2_bytes + 1) == law.bw_GBps < 10000.0
    no_l2 = h200.model_copy(update={"l2_MB": None})
    for target, source in ((no_l2, h200), (h200, no_l2), (no_l2, no_l2)):
        m = build_machine(target, 1, None, fast, source, mk)
        assert m.laws["gemm_bf16"].bandwidth(1.0) == m.laws["gemm_bf16"].bw_GBps, (target.l2_MB, source.l2_MB)
    src = build_machine(h200, 1, None, fast, no_l2, mk).source_law(op)
    assert src.bandwidth(1.0) == src.bw_GBps < 10000.0


def test_a_collective_is_gpu_work_in_the_eager_queue():
    """Tiny model at TP2 on a slow link (all-reduce 8 us + bytes / 0.01 GB/s, bus factor
    2(n-1)/n = 1): two per layer of 128 B (20.8 us each) and the logits' 8 B (8.8 us), 50.4 us.
    Every call, collectives included, outlasts the next launch (5 us), so the GPU waits only
    for the first issue: the eager step exceeds the graph step less its graph launch by more
    than 0 and at most one launch."""
    from dataclasses import replace

    h200 = registry.load_gpu("h200")
    nv4 = registry.load_link("nvlink4-nvswitch")
    tp2 = Layout("tp", 2)
    est = {}
    for graph in (True, False):
        m = build_machine(h200, 2, nv4, hand_profile(), h200, registry.load_memory_kinds(), graph=graph)
        m = replace(m, all_reduce=replace(m.all_reduce, latency_us=8.0, busbw_GBps=0.01))
        est[graph] = step_estimate(tiny_model(), m, tp2, 1, 1, 100, graph=graph)
    assert est[True].breakdown_us["collectives"] == est[False].breakdown_us["collectives"] == pytest.approx(50.4)
    exposed = est[False].step_us - (est[True].step_us - GLAUNCH)
    assert 0 < exposed <= LAUNCH


def test_moe_flops_and_the_verify_variant_by_hand():
    """Mixtral 8x7B at TP2, C = 3 sequences x q = 1: the routed experts do 2 flops per weight
    for each of T x k = 3 x 2 token-expert pairs over the 3 H x I matrices, split over 2 GPUs:
    2 x 3 x 2 x 3 x 4096 x 14336 / 2 flops. Attention over q > 1 new tokens (here q = 2, a
    one-node tree) is verification, its own variant; q = 1 is plain decode."""
    mix = registry.load_model("mixtral-8x7b")
    by = {o.name: o for o in decode_ops(mix, Layout("tp", 2), 3, 1, 100)[0]}
    assert by["routed_experts"].flops == 2.0 * 3 * 2 * 3 * 4096 * 14336 / 2
    one = {o.name: o for o in decode_ops(tiny_model(), ONE, 1, 1, 100)[0]}
    two = {o.name: o for o in decode_ops(tiny_model(), ONE, 1, 2, 100)[0]}
    assert one["attention_core_full"].variant == "" and two["attention_core_full"].variant == "verify"
