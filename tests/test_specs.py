"""Spec files validate, resolve, and carry sources; bad files fail with one clear line."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from perfmodel.specs import (
    WEIGHT_BYTES,
    GpuSpec,
    ModelSpec,
    Sourced,
    SpecError,
    list_gpus,
    list_links,
    list_models,
    load_gpu,
    load_gpu_file,
    load_link,
    load_memory_kinds,
    load_model,
    load_model_file,
)

EXPECTED_GPUS = {
    "rtx-pro-6000-server", "rtx-pro-6000-ws", "l40s", "a100-sxm", "h100-sxm", "h100-pcie",
    "h200-sxm", "b200-sxm", "b300-sxm", "gb200", "gb300", "mi300x", "mi325x", "mi355x",
}
EXPECTED_LINKS = {
    "pcie4-host", "pcie5-host", "pcie6-host", "pcie5-switch", "nvlink3-nvswitch",
    "nvlink4-nvswitch", "nvlink5-nvswitch", "xgmi-mesh",
}
EXPECTED_MODELS = {
    "kimi-k2.6", "deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b",
    "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "mixtral-8x7b",
}


def _all_specs():
    return (
        [load_gpu(n) for n in list_gpus()]
        + [load_link(n) for n in list_links()]
        + [load_model(n) for n in list_models()]
        + [load_memory_kinds()]
    )


def _walk_sourced(obj, path="spec"):
    if isinstance(obj, Sourced):
        yield path, obj
    if isinstance(obj, BaseModel):
        for field in type(obj).model_fields:
            yield from _walk_sourced(getattr(obj, field), f"{path}.{field}")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk_sourced(v, f"{path}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _walk_sourced(v, f"{path}[{i}]")


# ----------------------------------------------------------------------------- validity


def test_expected_files_present():
    assert EXPECTED_GPUS <= set(list_gpus())
    assert EXPECTED_LINKS <= set(list_links())
    assert EXPECTED_MODELS <= set(list_models())


def test_every_yaml_validates():
    specs = _all_specs()
    assert len(specs) == len(list_gpus()) + len(list_links()) + len(list_models()) + 1
    assert set(load_memory_kinds().kinds) == {"GDDR6", "GDDR7", "HBM2e", "HBM3", "HBM3e"}


def test_every_sourced_has_a_source():
    n = 0
    for spec in _all_specs():
        for path, s in _walk_sourced(spec):
            n += 1
            assert s.source.strip(), f"{getattr(spec, 'name', 'memory_kinds')}: {path} has no source"
    assert n > 100
    for m in (load_model(n) for n in list_models()):
        assert m.source.strip(), m.name
        if m.drafter:
            assert m.drafter.source.strip()


def test_cited_sources_are_in_the_repo():
    """Every [S#] a hardware spec or published figure cites is listed in hwspecs/SOURCES.md, and
    every section a model preset cites (SOURCES.md §1c) is a heading of modelspecs/SOURCES.md."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    listed = set(re.findall(r"^- (S\d+) ", (root / "hwspecs" / "SOURCES.md").read_text(), re.M))
    cited = set()
    for f in [*root.glob("hwspecs/**/*.yaml"), root / "perfmodel" / "data" / "published.yaml"]:
        for group in re.findall(r"\[(S\d+(?:\s*,\s*S\d+)*)\]", f.read_text()):
            cited |= {s.strip() for s in group.split(",")}
    assert len(cited) > 30 and cited <= listed, sorted(cited - listed)
    headings = set(re.findall(r"^#{2,3} (\d[a-z]?)\.", (root / "perfmodel" / "modelspecs" / "SOURCES.md").read_text(), re.M))
    sections = {s for f in root.glob("perfmodel/modelspecs/*.yaml") for s in re.findall(r"SOURCES\.md §(\d[a-z]?)", f.read_text())}
    assert sections and sections <= headings, sorted(sections - headings)


@pytest.mark.parametrize("name", sorted(EXPECTED_GPUS))
def test_gpu_consistency(name):
    g = load_gpu(name)
    assert g.default_interconnect in list_links(), f"{name}: {g.default_interconnect}"
    if g.memory.usable_GB is not None:
        assert g.memory.usable_GB.value <= g.memory.capacity_GB.value
    c = g.compute
    if c.fp8_dense_TFLOPS:
        assert c.fp8_dense_TFLOPS.value >= c.bf16_dense_TFLOPS.value
    if c.fp4_dense_TFLOPS:
        assert c.fp4_dense_TFLOPS.value >= c.fp8_dense_TFLOPS.value
    assert g.host_link.kind != "none"
    if g.scale_up.kind == "none":
        assert g.default_interconnect.startswith("pcie")


def test_default_interconnects():
    want = {
        "h200": "nvlink4-nvswitch", "b300": "nvlink5-nvswitch", "rtx-pro-6000": "pcie5-host",
        "l40s": "pcie4-host", "mi300x": "xgmi-mesh", "h100-pcie": "pcie5-host",
        "a100-sxm": "nvlink3-nvswitch", "b200": "nvlink5-nvswitch",
    }
    for gpu, link in want.items():
        assert load_gpu(gpu).default_interconnect == link, gpu


def test_links_calibrated_below_peak():
    for name in list_links():
        link = load_link(name)
        assert link.calibrated.allreduce_busbw_GBps.value <= link.peak.bw_per_dir_GBps.value, name
        for f in ("allreduce_latency_us", "alltoall_latency_us", "alltoall_busbw_GBps"):
            assert getattr(link.calibrated, f).source


def test_memory_kinds_cover_all_gpus():
    kinds = load_memory_kinds().kinds
    for name in list_gpus():
        assert load_gpu(name).memory.kind in kinds


def test_gpu_measured_streaming_fraction_overrides_memory_kind():
    mk = load_memory_kinds()
    mi, h100 = load_gpu("mi300x"), load_gpu("h100-sxm")
    assert mi.memory.kind == h100.memory.kind == "HBM3"
    assert h100.memory.streaming_fraction(mk) == mk.kinds["HBM3"].achievable_fraction.value
    assert mi.memory.streaming_fraction(mk) == 0.79 < h100.memory.streaming_fraction(mk)
    assert "MI300X STREAM" in mi.memory.achievable_fraction.source


# ----------------------------------------------------------------------------- aliases


@pytest.mark.parametrize(
    "alias,name",
    [
        ("h200", "h200-sxm"), ("b200", "b200-sxm"), ("b300", "b300-sxm"),
        ("rtx-pro-6000", "rtx-pro-6000-server"), ("H200", "h200-sxm"), ("h100", "h100-sxm"),
        ("a100", "a100-sxm"),
    ],
)
def test_gpu_aliases(alias, name):
    assert load_gpu(alias).name == name
    assert load_gpu(alias) is load_gpu(name)  # cached


@pytest.mark.parametrize("alias", ["kimi", "kimi-k2", "kimi-k2.6"])
def test_model_aliases(alias):
    assert load_model(alias).name == "kimi-k2.6"


def test_link_alias():
    assert load_link("nvlink4").name == "nvlink4-nvswitch"


def test_bandwidth_ordering():
    b300, h200, rtx = (load_gpu(n).memory.bandwidth_GBps.value for n in ("b300", "h200", "rtx-pro-6000"))
    assert b300 > h200 > rtx


def test_b200_uses_bus_width_bandwidth():
    assert load_gpu("b200").memory.bandwidth_GBps.value == pytest.approx(7670)


# ----------------------------------------------------------------------------- errors


def test_unknown_gpu_suggests_close_names():
    with pytest.raises(SpecError) as e:
        load_gpu("b3000")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("unknown GPU 'b3000'; did you mean:")
    assert "b300" in msg


def test_unknown_model_and_link_suggest():
    with pytest.raises(SpecError, match="did you mean: .*kimi"):
        load_model("kimmi")
    with pytest.raises(SpecError, match="unknown link"):
        load_link("nvlink9-nvswitch")


def _gpu_yaml(bandwidth="4800", extra=""):
    return f"""\
name: test-gpu
display_name: Test GPU
vendor: nvidia
architecture: test
memory:
  kind: HBM3e
  capacity_GB: {{value: 141, source: "test source"}}
  bandwidth_GBps: {{value: {bandwidth}, source: "test source"}}
compute:
  bf16_dense_TFLOPS: {{value: 989, source: "test source"}}
sm_count: {{value: 132, source: "test source"}}
scale_up: {{kind: none}}
host_link:
  kind: pcie5
  bw_per_dir_GBps: {{value: 64, source: "test source"}}
default_interconnect: pcie5-host
{extra}"""


def _expect_one_line(path, loader, *needles):
    with pytest.raises(SpecError) as e:
        loader(path)
    msg = str(e.value)
    assert "\n" not in msg, msg
    assert str(path) in msg, msg
    for n in needles:
        assert n in msg, msg
    return msg


def test_good_tmp_file_loads(tmp_path):
    p = tmp_path / "test-gpu.yaml"
    p.write_text(_gpu_yaml())
    assert isinstance(load_gpu_file(p), GpuSpec)


def test_negative_bandwidth(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text(_gpu_yaml(bandwidth="-5"))
    msg = _expect_one_line(p, load_gpu_file, "memory.bandwidth_GBps.value", "must be > 0", "-5")
    assert msg == f"{p}: memory.bandwidth_GBps.value: must be > 0, got -5.0"


def test_unknown_field(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text(_gpu_yaml(extra="hbm_speed: 3\n"))
    _expect_one_line(p, load_gpu_file, "hbm_speed", "unknown field")


def test_wrong_type(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text(_gpu_yaml(bandwidth="fast"))
    _expect_one_line(p, load_gpu_file, "memory.bandwidth_GBps.value")


def test_malformed_yaml(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("name: [unclosed\nmemory: {\n")
    _expect_one_line(p, load_gpu_file, "malformed YAML")


def test_not_a_mapping(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("- just\n- a list\n")
    _expect_one_line(p, load_model_file, "expected a mapping")


def test_bad_model_field(tmp_path):
    p = tmp_path / "m.yaml"
    text = (
        "name: m\ndisplay_name: M\nsource: test\nn_layers: 2\nn_dense_layers: 2\nhidden_size: 64\n"
        "vocab_size: 10\nattention: {kind: gqa, n_heads: 4, n_kv_heads: 3, head_dim: 16}\n"
        "dense_intermediate_size: 128\n"
    )
    p.write_text(text)
    _expect_one_line(p, load_model_file, "attention", "n_kv_heads=3")
    p.write_text(text.replace("n_kv_heads: 3", "n_kv_heads: 2"))
    assert isinstance(load_model_file(p), ModelSpec)


# ----------------------------------------------------------------------------- Kimi K2.6


def _mla_params(m: ModelSpec) -> float:
    a, h = m.attention, m.hidden_size
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    q = h * a.q_lora_rank + a.q_lora_rank * a.n_heads * qk if a.q_lora_rank else h * a.n_heads * qk
    kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank * a.n_heads * (a.qk_nope_head_dim + a.v_head_dim)
    o = a.n_heads * a.v_head_dim * h
    return q + kv + o


def test_kimi_k26_matches_facts():
    """perfmodel/modelspecs/SOURCES.md §1a [D]: attention 101.1M/layer, expert 44.04M, total 1026.4B
    (1T in the README), active ~31.7B excluding the embedding lookup; 1b: ~594 GB on disk."""
    m = load_model("kimi")
    h, moe = m.hidden_size, m.moe
    n_moe = m.n_layers - m.n_dense_layers
    attn = _mla_params(m)
    assert attn == pytest.approx(101.1e6, rel=0.01)
    expert = 3 * h * moe.expert_intermediate_size
    assert expert == pytest.approx(44.04e6, rel=0.001)
    routed = n_moe * moe.n_routed_experts * expert
    shared = n_moe * moe.n_shared_experts * expert
    dense = m.n_dense_layers * 3 * h * m.dense_intermediate_size
    router = n_moe * moe.n_routed_experts * h
    embed = 2 * m.vocab_size * h
    total = routed + m.n_layers * attn + shared + dense + router + embed
    assert total == pytest.approx(1.03e12, rel=0.03)
    assert total == pytest.approx(1026.4e9, rel=0.005)
    active = n_moe * moe.top_k * expert + m.n_layers * attn + shared + dense + router + m.vocab_size * h
    assert active == pytest.approx(31.7e9, rel=0.03)
    # Bytes: routed experts INT4 g32, everything else BF16 -> ~594 GB.
    assert m.dtypes.routed_experts == "int4_g32"
    nbytes = routed * WEIGHT_BYTES["int4_g32"] + (total - routed) * WEIGHT_BYTES["bf16"]
    assert nbytes == pytest.approx(594e9, rel=0.02)
    # KV cache: (512 + 64) x 2 B x 61 layers = 70.3 KB/token.
    kv = (m.attention.kv_lora_rank + m.attention.qk_rope_head_dim) * 2 * m.n_layers
    assert kv == pytest.approx(70.3e3, rel=0.01)


def test_kimi_drafter():
    d = load_model("kimi-k2.6").drafter
    assert d is not None
    assert (d.n_layers, d.hidden_size, d.n_heads, d.n_kv_heads, d.head_dim) == (6, 7168, 64, 8, 128)
    assert (d.intermediate_size, d.block_size, d.n_target_layers_fused) == (18432, 16, 6)
    assert "unconfirmed" in d.source.lower()
    # perfmodel/modelspecs/SOURCES.md §2 [D]: 528.5M params per layer, ~3.17B for 6 layers.
    per_layer = d.hidden_size * d.head_dim * (2 * d.n_heads + 2 * d.n_kv_heads) + 3 * d.hidden_size * d.intermediate_size
    assert per_layer == pytest.approx(528.5e6, rel=0.01)


def test_deepseek_v3_total():
    m = load_model("deepseek-v3")
    h, moe = m.hidden_size, m.moe
    n_moe = m.n_layers - m.n_dense_layers
    expert = 3 * h * moe.expert_intermediate_size
    total = (
        n_moe * (moe.n_routed_experts + moe.n_shared_experts) * expert
        + m.n_layers * _mla_params(m)
        + m.n_dense_layers * 3 * h * m.dense_intermediate_size
        + n_moe * moe.n_routed_experts * h
        + 2 * m.vocab_size * h
    )
    assert total == pytest.approx(671e9, rel=0.02)
    assert m.dtypes.routed_experts == m.dtypes.attention == "fp8"


def test_dense_models_have_no_moe():
    for n in ("llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b"):
        m = load_model(n)
        assert m.moe is None and m.n_dense_layers == m.n_layers


def test_gpt_oss_sliding():
    a = load_model("gpt-oss-120b").attention
    assert a.kind == "gqa" and a.sliding_window == 128 and a.sliding_layer_fraction == 0.5
