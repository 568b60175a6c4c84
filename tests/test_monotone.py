"""At a fixed tree budget every step component is non-decreasing in the
concurrency C, over a grid of targets, models and layouts (the profile GPU's own measured
samples included: they are interpolated in C and made monotone along their sweep)."""

import pytest

from perfmodel.api import projector
from perfmodel.scenario import Request

CS = list(range(1, 41)) + [48, 64, 96, 128, 129, 192, 256, 292, 384, 512]

GRID = [
    ("h200", "kimi-k2.6", "tp", "ddtree", 8),
    ("h200", "kimi-k2.6", "tp", "ddtree", 32),
    ("h200", "kimi-k2.6", "tp-attn-ep-moe", "ddtree", 16),
    ("b300", "kimi-k2.6", "tp", "ddtree", 32),
    ("b300", "kimi-k2.6", "ep", "ddtree", 16),
    ("rtx-pro-6000", "kimi-k2.6", "tp", "ddtree", 8),
    ("h200", "kimi-k2.6", "tp", "none", None),
    ("mi300x", "mixtral-8x7b", "ep", "none", None),
    ("h200", "mixtral-8x7b", "ep", "none", None),
    ("h200", "qwen3-30b-a3b", "tp", "none", None),
    ("h200", "llama-3.1-70b", "tp", "none", None),
]


@pytest.mark.parametrize("target,model,parallel,spec,budget", GRID)
def test_components_non_decreasing_in_concurrency(target, model, parallel, spec, budget):
    req = Request(target=target, gpus=8, model=model, parallel=parallel, spec=spec,
                  budget=budget if budget else "auto", concurrency=CS)
    pj = projector(req)
    prev = None
    for C in CS:
        p = pj.point(C)
        if not p["fits_in_memory"]:
            continue
        assert p["budget"] == (budget or 0)
        bd = p["breakdown_ms"]
        if prev is not None:
            for comp, v in prev[1].items():
                assert bd.get(comp, 0.0) >= v * (1 - 1e-9), (f"{comp} falls from C={prev[0]} ({v:.4f} ms) to C={C} "
                                                              f"({bd.get(comp, 0.0):.4f} ms)")
            assert p["step_ms"] >= prev[2] * (1 - 1e-9)
        prev = (C, bd, p["step_ms"])
