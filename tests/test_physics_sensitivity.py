"""The ±20% sensitivity table (perfmodel/model/sensitivity.py) against laws it must obey:
tokens/s per stream is tau / step, a time term scaled by k moves the step by its share, and a
rate scaled by k can speed the step by at most k (Amdahl)."""

import pytest

from perfmodel.api import projector
from perfmodel.explore import DELTA, sensitivity
from perfmodel.scenario import Request

RATES = ("memory bandwidth (all kernels)", "compute rate (all kernels)", "collective bandwidth")
TIMES = ("per-kernel latency floor", "graph node cost", "collective latency", "host overhead (per step, per launch)")
ACC = "acceptance (τ − 1)"


@pytest.fixture(scope="module")
def ddtree():
    req = Request(target="b300", gpus=8, spec="ddtree", concurrency=[1, 8])
    return req, {r["input"]: r for r in sensitivity(req, 8)}, projector(req).point(8)


def test_delta_is_twenty_percent():
    assert DELTA == 0.2  # the CLI help (--sensitivity) and the rendered table header say ±20%


def test_acceptance_row_is_tau_over_step_at_the_fixed_budget(ddtree):
    """At a fixed budget the step does not depend on tau, so tok/s per stream scales as tau:
    tau - 1 times 1.2 gives (1 + 1.2 (tau - 1)) / tau - 1, times 0.8 gives (1 + 0.8 (tau - 1)) / tau - 1."""
    _, rows, base = ddtree
    tau = base.tau
    assert base.budget > 0 and tau > 1
    assert rows[ACC]["concurrency"] == 8
    assert rows[ACC]["plus"] == pytest.approx((1 + 1.2 * (tau - 1)) / tau - 1, rel=1e-9)
    assert rows[ACC]["minus"] == pytest.approx((1 + 0.8 * (tau - 1)) / tau - 1, rel=1e-9)


def test_rates_obey_amdahl(ddtree):
    """A rate x 1.2 speeds the step by at most 1.2 and never slows it; x 0.8 slows it by at most
    1 / 0.8 and never speeds it."""
    _, rows, _ = ddtree
    for k in RATES:
        assert 0 <= rows[k]["plus"] <= 0.2 + 1e-12, k
        assert -0.2 - 1e-12 <= rows[k]["minus"] <= 0, k
    assert rows[RATES[0]]["plus"] > 0.01  # decode at C = 8 is bandwidth-bound in good part


def test_time_terms_move_the_step_by_their_share(ddtree):
    """A time term of share s of the step, scaled by k: the step becomes 1 + s (k - 1), so
    tok/s moves by 1 / (1 + 0.2 s) - 1 and 1 / (1 - 0.2 s) - 1. The floor and graph-node
    terms add into the step linearly: the share read off the +20% answer predicts the -20% one."""
    _, rows, _ = ddtree
    for k in TIMES:
        assert 1 / 1.2 - 1 - 1e-12 <= rows[k]["plus"] <= 0, k
        assert 0 <= rows[k]["minus"] <= 1 / 0.8 - 1 + 1e-12, k
    for k in ("per-kernel latency floor", "graph node cost"):
        s = (1 / (1 + rows[k]["plus"]) - 1) / 0.2
        assert 0 < s < 1
        assert rows[k]["minus"] == pytest.approx(1 / (1 - 0.2 * s) - 1, rel=1e-6), k


def test_the_concurrency_asked_for_is_the_one_reported():
    req = Request(target="b300", gpus=8, concurrency=[1, 32])
    assert {r["concurrency"] for r in sensitivity(req)} == {1}
    at32 = sensitivity(req, 32)
    assert {r["concurrency"] for r in at32} == {32}
    assert at32 != sensitivity(req)


def test_no_acceptance_row_when_speculation_does_not_pay():
    """An acceptance table at tau ~ 1.1: the best budget is 0 (plain decode), where tau is 1
    whatever the acceptance, so the table has no acceptance row; the machine rows remain."""
    req = Request(target="b300", gpus=8, spec="ddtree", concurrency=[1],
                  acceptance="table:4=1.05,8=1.08,16=1.1,32=1.1,64=1.1,128=1.1,256=1.1,512=1.1,1024=1.1")
    assert projector(req).point(1).budget == 0
    rows = {r["input"] for r in sensitivity(req)}
    assert ACC not in rows and set(RATES + TIMES) <= rows


def test_ranked_by_the_larger_swing():
    """B300 x 8 with DDTree at C = 32, where ranking by the smaller of the two swings would give
    another order: the rows come by the larger one, descending."""
    rows = sensitivity(Request(target="b300", gpus=8, spec="ddtree", concurrency=[32]))
    swing = [max(abs(r["minus"]), abs(r["plus"])) for r in rows]
    assert swing == sorted(swing, reverse=True)
    small = [min(abs(r["minus"]), abs(r["plus"])) for r in rows]
    assert small != sorted(small, reverse=True)  # the case tells the two rankings apart


def test_the_budget_is_held_at_the_base_points():
    """At C = 128 the best DDTree budget is 4, and with 20% less bandwidth it would be 8. The
    table holds the base point's budget, so the auto request gives the same table as one fixed
    at budget 4."""
    auto = Request(target="b300", gpus=8, spec="ddtree", concurrency=[128])
    assert projector(auto).point(128).budget == 4
    fixed = Request(target="b300", gpus=8, spec="ddtree", concurrency=[128], budget=4)
    assert sensitivity(auto) == sensitivity(fixed)
