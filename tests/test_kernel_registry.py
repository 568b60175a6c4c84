"""A kernel class is one record (perfmodel/kernel_classes.py): adding one leaves every shipped
profile loadable, and the class is priced by its spec-derived law, said so in the rules."""

import dataclasses
import json

import pytest

from perfmodel import api, kernel_classes
from perfmodel.kernel_classes import KernelClass
from perfmodel.model.machine import build_machine, missing_fits
from perfmodel.profile import load_profile
from perfmodel.request import profile_source_gpu, shipped_profiles
from perfmodel.scenario import Request
from perfmodel.specs import registry

DUMMY = KernelClass("dummy_fp4", "moe", "moe", "dummy FP4 MoE", 3, (0.5, 20.0, 0.25), "a class no profile has measured")


@pytest.fixture
def with_dummy(monkeypatch):
    monkeypatch.setattr(kernel_classes, "CLASSES", kernel_classes.CLASSES + (DUMMY,))


@pytest.mark.parametrize("path", shipped_profiles(), ids=lambda p: p.name)
def test_shipped_profiles_load_and_price_an_added_class(with_dummy, path):
    prof = load_profile(path)
    assert missing_fits(prof) == ["dummy_fp4"]
    src = profile_source_gpu(prof)
    b300 = registry.load_gpu("b300")
    m = build_machine(b300, 1, None, prof, src, registry.load_memory_kinds())
    law = m.laws["dummy_fp4"]
    assert law.rule.startswith("spec-derived (the profile has no fit for this class)")
    # the spec-derived law on the profile's GPU, carried to the target: a floor of t0 less its graph nodes
    node = prof.overheads.graph_node_us
    assert law.t0_us == pytest.approx(20.0 - min(20.0, 3 * node))
    assert kernel_classes.of_key("dummy_fp4.verify@torch") is DUMMY


def test_a_profile_without_a_class_projects_and_says_so(tmp_path):
    prof = load_profile(shipped_profiles()[0])
    data = json.loads(prof.model_dump_json())
    del data["fits"]["attention_mla"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    proj = api.project(Request(target="b300", gpus=8, concurrency=[1], profile=str(path)))
    assert proj.rules["attention_mla"].startswith("spec-derived")
    assert proj.points[0].tokens_per_s_per_stream > 0


def test_records_are_complete():
    optional = {"weight_formats", "stand_in"}
    for c in kernel_classes.CLASSES:
        assert all(v for k, v in dataclasses.asdict(c).items() if k not in optional), c
        assert c.stand_in in ("", *kernel_classes.names()) and c.stand_in != c.name, c  # optional: another class
        assert c.group in {"attention", "moe", "gemm", "elementwise"}
        assert not c.stand_in or kernel_classes.by_name()[c.stand_in].stand_in == "", c  # one step, no chains


def test_each_weight_format_has_one_moe_class():
    formats = [f for c in kernel_classes.CLASSES for f in c.weight_formats]
    assert len(formats) == len(set(formats))
    assert {kernel_classes.moe_class(f) for f in ("fp8", "nvfp4", "mxfp4", "bf16", "int4_g32", "int8")} == {
        "moe_fp8", "moe_nvfp4", "moe_mxfp4", "moe_bf16", "moe_w4a16"}
    assert kernel_classes.moe_class("int8") == "moe_bf16"
