"""Physics on valid input, as hypothesis properties over the shipped GPUs x models x layouts (the
registry's lists) with the embedded profile, at contexts 1..128k and concurrencies 1..512:

1. a step never gets cheaper when the context grows (the same sequences, the same speculation);
2. the total tok/s never falls when the concurrency grows while memory fits, unless the larger
   point carries a note naming the engine effect (an uneven data-parallel attention round,
   speculation or a tree budget that stops fitting), and that note is printed;
3. every number of a projection is finite, the budget curve and the intervals included;
4. every interval contains its point.

tests/test_properties.py holds the neighbouring properties (bandwidth, host, whole DP rounds,
random requests' JSON); tests/test_monotone.py a fixed grid in C. The contexts drawn lean on
the edges of the profile's sampled ranges (where a measured sample meets its fitted law)."""

from __future__ import annotations

import contextlib
import io
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.api import projector
from perfmodel.errors import ProjectionError
from perfmodel.model.sanity import layout_problem
from perfmodel.render import projection_table
from perfmodel.scenario import Request
from perfmodel.specs import registry

GPUS = registry.list_gpus()
MODELS = registry.list_models()
QUICK = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HEAVY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Context lengths where the embedded profile's attention samples begin and end (L = 1024 ...
# 131072) and around them, beside any length.
EDGES = [1, 2, 1000, 1023, 1024, 1025, 1100, 4096, 8192, 32768, 65536, 131071, 131072]
contexts = st.one_of(st.integers(1, 131072), st.sampled_from(EDGES), st.integers(512, 1023))
# The embedded profile's GPU, where measured samples price the ops, drawn as often as all the others.
PROFILE_GPU = "h200-sxm"
targets = st.one_of(st.just(PROFILE_GPU), st.sampled_from(GPUS))


@st.composite
def scenarios(draw, spec=None, budget="auto"):
    """A valid request on a shipped GPU, model and layout (a layout the model cannot run on that
    many GPUs falls back to one GPU)."""
    model = draw(st.sampled_from(MODELS))
    m = registry.load_model(model)
    parallel = draw(st.sampled_from(["tp", "ep", "tp-attn-ep-moe"] if m.moe else ["tp"]))
    n = draw(st.sampled_from([1, 2, 4, 8]))
    if layout_problem(m, parallel, n):
        n = 1
    sp = spec if spec is not None else draw(st.sampled_from(["none", "chain", "ddtree"] if m.drafter else ["none"]))
    if sp != "none" and not m.drafter:
        sp = "none"
    return dict(target=draw(targets), gpus=n, model=model, parallel=parallel, spec=sp,
                budget=budget if sp == "ddtree" else "auto")


def _projector(**kw):
    try:
        return projector(Request(**kw))
    except ProjectionError as e:  # a valid question with a clear answer
        assert "does not fit" in str(e), str(e)
        return None


# ----------------------------------------------------------------------------- 1. context
def _step_never_falls_with_context(sc, C, L, dL):
    a, b = _projector(**sc, context=L, concurrency=[C]), _projector(**sc, context=min(L + dL, 131072), concurrency=[C])
    if a is None or b is None:
        return
    pa, pb = a.point(C), b.point(C)
    if not (pa.fits_in_memory and pb.fits_in_memory) or pa.budget != pb.budget:
        return
    assert pb.step_ms >= pa.step_ms * (1 - 1e-9), (
        f"{sc} C={C}: step falls from {pa.step_ms:.5f} ms at L={L} to {pb.step_ms:.5f} ms at L={L + dL}")
    for comp, v in pa.breakdown_ms.items():
        if comp != "dispatch":  # eager: launch time the GPU waits for shrinks as its work grows
            assert pb.breakdown_ms.get(comp, 0.0) >= v * (1 - 1e-9), (sc, C, L, dL, comp)


@QUICK
@given(scenarios(spec="none"), st.integers(1, 512), contexts, st.one_of(st.integers(1, 300), st.integers(1, 131071)))
def test_step_never_falls_as_context_grows(sc, C, L, dL):
    _step_never_falls_with_context(sc, C, L, dL)


@QUICK
@given(scenarios(spec="ddtree", budget=8), st.integers(1, 256), contexts, st.integers(1, 4096))
def test_a_speculative_step_never_falls_as_context_grows(sc, C, L, dL):
    """At one tree budget (the drafter's forward and the tree build included)."""
    _step_never_falls_with_context(sc, C, L, dL)


@pytest.mark.slow
@HEAVY
@given(scenarios(), st.integers(1, 512), contexts, st.one_of(st.integers(1, 300), st.integers(1, 131071)))
def test_step_never_falls_as_context_grows_heavy(sc, C, L, dL):
    _step_never_falls_with_context(sc | {"budget": 8} if sc["spec"] == "ddtree" else sc, C, L, dL)


def test_the_decode_step_grows_across_the_first_sampled_context():
    """Where the H200 attention samples begin (L = 1024) the step was priced by the law below and
    by the sample above, and fell by 2% from L = 900 to 1024 (Kimi K2.6, TP8, C = 1): carried by
    the law's ratio from the nearest sample, it grows."""
    steps = [projector(Request(target="h200", gpus=8, model="kimi-k2.6", context=L, concurrency=[1])).point(1).step_ms
             for L in (512, 900, 1023, 1024, 1025, 2048)]
    assert steps == sorted(steps) and steps[0] < steps[-1]


# ----------------------------------------------------------------------------- 2. concurrency
CAUSES = ("data-parallel", "does not fit", "do not fit")


def _named_cause(p) -> bool:
    return bool(p.notes) or any(c in (p.budget_note or "") for c in CAUSES)


def _printed(sc, context, C1, C2) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        projection_table(projector(Request(**sc, context=context, concurrency=[C1, C2])).projection())
    return buf.getvalue()


def _throughput_never_falls_with_concurrency(sc, context, C1, dC):
    C2 = min(C1 + dC, 512)
    pj = _projector(**sc, context=context, concurrency=[C1])
    if pj is None or C2 == C1:
        return
    p1, p2 = pj.point(C1), pj.point(C2)
    if not (p1.fits_in_memory and p2.fits_in_memory) or p2.tokens_per_s >= p1.tokens_per_s * (1 - 1e-9):
        return
    assert _named_cause(p2), (f"{sc} context {context}: total tok/s falls from {p1.tokens_per_s:.1f} at C={C1} to "
                              f"{p2.tokens_per_s:.1f} at C={C2} with no note naming why")
    out = " ".join(_printed(sc, context, C1, C2).split())
    for n in (p2.notes or []) + ([p2.budget_note] if p2.budget_note else []):
        assert f"C={C2}: {' '.join(n.split())}" in out


@QUICK
@given(scenarios(), contexts, st.integers(1, 511), st.one_of(st.integers(1, 4), st.integers(1, 511)))
def test_total_throughput_never_falls_with_concurrency_unless_a_note_says_why(sc, context, C1, dC):
    _throughput_never_falls_with_concurrency(sc, context, C1, dC)


@pytest.mark.slow
@HEAVY
@given(scenarios(), contexts, st.integers(1, 511), st.one_of(st.integers(1, 4), st.integers(1, 511)))
def test_total_throughput_never_falls_with_concurrency_unless_a_note_says_why_heavy(sc, context, C1, dC):
    _throughput_never_falls_with_concurrency(sc, context, C1, dC)


@pytest.mark.parametrize("sc, context, C1, C2, cause", [
    # attention data-parallel over 8 GPUs: the 9th sequence doubles the busiest GPU's attention
    (dict(target="h200", gpus=8, model="kimi-k2.6", parallel="ep"), 65536, 8, 9, "data-parallel over 8 GPUs"),
    # the drafter and the smallest tree stop fitting beside the KV: speculation off
    (dict(target="rtx-pro-6000-server", gpus=8, model="kimi-k2.6", spec="ddtree"), 1024, 151, 152,
     "speculation does not fit"),
])
def test_the_known_throughput_drops_are_printed_with_their_cause(sc, context, C1, C2, cause):
    pj = projector(Request(**sc, context=context, concurrency=[C1, C2]))
    p1, p2 = pj.point(C1), pj.point(C2)
    assert p1.fits_in_memory and p2.fits_in_memory and p2.tokens_per_s < p1.tokens_per_s
    out = " ".join(_printed(sc, context, C1, C2).split())
    assert f"C={C2}: " in out and cause in out
    assert cause not in (p1.budget_note or "") + " ".join(p1.notes or [])  # the smaller point has no such cause


# ----------------------------------------------------------------------------- 3, 4. finite, intervals
def _numbers(x, path=""):
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return
    if isinstance(x, (int, float)):
        yield path, x
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from _numbers(v, f"{path}[{i}]")


def _inside(iv, x, what):
    lo, hi = iv
    assert lo <= x * (1 + 1e-12) and x <= hi * (1 + 1e-12), f"{what}: {x} outside [{lo}, {hi}]"


def _finite_and_inside(pj):
    try:
        res = pj.projection()
    except ProjectionError as e:  # the weights alone do not fit: a clear answer
        assert "does not fit" in str(e), str(e)
        return
    for path, v in _numbers(res.model_dump()):  # python mode: a json dump writes NaN as null
        assert math.isfinite(v), path
    for p in res.points:
        if not p.fits_in_memory:
            continue
        iv = p.interval
        _inside(iv.step_ms, p.step_ms, f"C={p.concurrency} step_ms")
        _inside(iv.tokens_per_s_per_stream, p.tokens_per_s_per_stream, f"C={p.concurrency} tok/s per stream")
        _inside(iv.tokens_per_s, p.tokens_per_s, f"C={p.concurrency} tok/s")
        if iv.tau is not None:
            _inside(iv.tau, p.tau, f"C={p.concurrency} tau")
        assert iv.step_ms[0] > 0 and iv.tokens_per_s[0] > 0
        if p.serving is not None:
            s = p.serving
            for key, val in (("tokens_per_s", s.tokens_per_s), ("tokens_per_s_per_gpu", s.tokens_per_s_per_gpu),
                             ("tpot_ms", s.tpot_ms.get("mean")), ("ttft_ms", s.ttft_ms.get("median"))):
                if key in s.interval and val is not None:
                    _inside(s.interval[key], val, f"C={p.concurrency} serving {key}")


@QUICK
@given(scenarios(), contexts, st.lists(st.integers(1, 512), min_size=1, max_size=3, unique=True))
def test_every_number_is_finite_and_every_interval_holds_its_point(sc, context, Cs):
    pj = _projector(**sc, context=context, concurrency=sorted(Cs))
    if pj is not None:
        _finite_and_inside(pj)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(1, 8192), st.integers(2, 2048), st.integers(1, 64))
def test_serving_numbers_are_finite_and_inside_their_intervals(sc, isl, osl, C):
    """Whole requests (--isl/--osl) through the serving simulation. At --osl 1 no request has a
    time per output token (serving.simulate reports TPOT and the per-user rate as NaN, written
    null in JSON), so the outputs start at 2."""
    pj = _projector(**sc, context=isl + osl, concurrency=[C], isl=isl, osl=osl)
    if pj is not None:
        _finite_and_inside(pj)
