"""Property tests (hypothesis): random valid requests give finite, positive results that are
valid JSON, and the quantities that must be monotone are."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.api import projector
from perfmodel.errors import ProjectionError
from perfmodel.inputs import finite_json
from perfmodel.model.sanity import layout_problem
from perfmodel.model.whatif import scale_laws
from perfmodel.scenario import Request
from perfmodel.specs import registry

GPUS = registry.list_gpus()
MODELS = registry.list_models()
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@st.composite
def requests(draw, spec=None):
    model = draw(st.sampled_from(MODELS))
    m = registry.load_model(model)
    parallel = draw(st.sampled_from(["tp", "ep", "tp-attn-ep-moe"] if m.moe else ["tp"]))
    n = draw(st.sampled_from([1, 2, 4, 8, 16]))
    if layout_problem(m, parallel, n):
        n = 1
    sp = spec or draw(st.sampled_from(["none", "chain", "ddtree"] if m.drafter else ["none"]))
    return Request(target=draw(st.sampled_from(GPUS)), gpus=n, model=model, parallel=parallel,
                   concurrency=sorted(set(draw(st.lists(st.integers(1, 512), min_size=1, max_size=4)))),
                   context=draw(st.integers(1, 131072)), spec=sp,
                   host_cpu_factor=draw(st.floats(0.25, 4.0)), graphs=draw(st.booleans()))


def _finite_positive(x, path="") -> None:
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return
    if isinstance(x, (int, float)):
        assert math.isfinite(x), path
        return
    if isinstance(x, dict):
        for k, v in x.items():
            _finite_positive(v, f"{path}.{k}")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            _finite_positive(v, f"{path}[{i}]")


def _run(req):
    try:
        return projector(req).run()
    except ProjectionError as e:  # a valid question with a clear answer: does not fit
        assert "does not fit" in str(e), str(e)
        return None


@FAST
@given(requests())
def test_random_valid_requests_give_finite_positive_json(req):
    res = _run(req)
    if res is None:
        return
    finite_json(res)  # no NaN/Infinity anywhere
    _finite_positive(res)
    for p in res["points"]:
        if not p["fits_in_memory"]:
            assert p["budget"] is None and "tokens_per_s" not in p
            continue
        assert p["step_ms"] > 0 and p["tokens_per_s_per_stream"] > 0 and p["tokens_per_s"] > 0 and p["tau"] >= 1
        lo, hi = p["interval"]["tokens_per_s_per_stream"]
        assert 0 < lo <= p["tokens_per_s_per_stream"] <= hi
        assert all(v >= 0 for v in p["breakdown_ms"].values())
        assert sum(p["breakdown_ms"].values()) == pytest.approx(p["step_ms"], rel=1e-9)


@FAST
@given(requests(spec="none"), st.integers(1, 256), st.integers(1, 256))
def test_aggregate_throughput_non_decreasing_in_concurrency(req, a, b):
    """No speculation, one layout: serving more sequences at once never lowers the total tok/s,
    compared at whole rounds of the attention's data-parallel width. Between those rounds it may
    dip: with attention data-parallel over d GPUs, C = k*d + 1 puts one more sequence on one GPU,
    whose attention the step then waits for (DeepSeek-V3 EP on 4 GPUs: C=180 -> 181 lowers the
    total by 3e-6 of it)."""
    pj = _projector(req)
    if pj is None:
        return
    d = pj.layout.dp_attn
    lo, hi = sorted((d * -(-a // d), d * -(-b // d)))
    p_lo, p_hi = pj.point(lo), pj.point(hi)
    if p_lo["fits_in_memory"] and p_hi["fits_in_memory"]:
        assert p_hi["tokens_per_s"] >= p_lo["tokens_per_s"] * (1 - 1e-9), (lo, hi)


@FAST
@given(requests(spec="none"), st.floats(1.0, 4.0))
def test_more_bandwidth_is_never_slower(req, k):
    pj = _projector(req)
    if pj is None:
        return
    faster = pj.variant(machine=scale_laws(k, "bw_GBps")(pj.machine))
    C = req.concurrency[0]
    a, b = pj.point(C), faster.point(C)
    if a["fits_in_memory"]:
        assert b["step_ms"] <= a["step_ms"] * (1 + 1e-9)


@FAST
@given(requests(spec="none"), st.floats(1.0, 4.0))
def test_faster_host_is_never_slower(req, k):
    slow = _projector(req)
    if slow is None:
        return
    fast = _projector(dataclasses.replace(req, host_cpu_factor=req.host_cpu_factor / k))
    C = req.concurrency[0]
    if slow.point(C)["fits_in_memory"]:
        assert fast.point(C)["step_ms"] <= slow.point(C)["step_ms"] * (1 + 1e-9)


def _projector(req):
    try:
        pj = projector(req)
        pj.run()
        return pj
    except ProjectionError:
        return None


def test_tau_never_above_drafted_tokens_plus_bonus():
    """A table clamped at its low end (τ(4) would read 6.1) credits at most B + 1 tokens."""
    res = projector(Request(target="b300", spec="ddtree", acceptance="table:16=6.1,64=7.8", concurrency=[1, 64])).run()
    for p in res["points"]:
        for c in p.get("budget_curve", []):
            if c["fits_in_memory"] and c["budget"]:
                assert c["tau"] <= min(c["budget"], 15) + 1
