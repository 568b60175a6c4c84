"""The re-entry bar, measured at run time: following a request from `perfmodel.project()` through
the code, no perfmodel module is entered more than twice.

Definition (ARCHITECTURE.md, "Entering a module"): a module is *entered* once per separate
stretch of its frames on one call stack. project -> machine -> step -> project holds two
stretches of `model.project` (entered twice); A -> B -> A -> B -> A enters A three times.
Frames outside perfmodel (stdlib, pydantic, numpy, typer) are transparent: they neither count
nor separate stretches. Module-level code run by an import is not part of a request's path and
is transparent too. `trace(fn)` runs fn under `sys.setprofile` and returns, per module, the
largest number of stretches it had on one stack, with the first stack that reached it.
"""

from __future__ import annotations

import sys
import types
from collections import defaultdict
from dataclasses import dataclass, field
from functools import partial

import pytest

import perfmodel
from perfmodel import api, request
from perfmodel.api import projector
from perfmodel.calibrate import write_result
from perfmodel.explore import evaluate, sensitivity
from perfmodel.model.whatif import variants, with_production_floors
from perfmodel.request import production_floors
from perfmodel.specs import registry

LIMIT = 2  # the bar: entered at most twice


@dataclass
class Stretches:
    max_entries: dict[str, int] = field(default_factory=dict)
    worst_stack: dict[str, list[str]] = field(default_factory=dict)  # module names, outer first

    def over(self, limit: int) -> dict[str, int]:
        return {m: n for m, n in sorted(self.max_entries.items()) if n > limit}

    def describe(self, limit: int) -> str:
        return "\n".join(f"{m}: entered {n} times on one stack: {' -> '.join(self.worst_stack[m])}"
                         for m, n in self.over(limit).items())


class _Tracer:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.stack: list[tuple[object, str | None, bool]] = []  # (frame, its module or None, opened a stretch)
        self.mods: list[str] = []  # the stack's modules, consecutive frames of one module folded
        self.count: dict[str, int] = defaultdict(int)  # stretches of each module on the stack now
        self.out = Stretches()

    def __call__(self, frame, event, arg) -> None:
        if event == "call":
            name = frame.f_globals.get("__name__", "")
            mod = name if name.startswith(self.prefix) and frame.f_code.co_name != "<module>" else None
            opened = mod is not None and (not self.mods or self.mods[-1] != mod)
            self.stack.append((frame, mod, opened))
            if opened:
                self.mods.append(mod)
                self.count[mod] += 1
                if self.count[mod] > self.out.max_entries.get(mod, 0):
                    self.out.max_entries[mod] = self.count[mod]
                    self.out.worst_stack[mod] = [m.removeprefix(self.prefix) for m in self.mods]
        elif event == "return" and any(f is frame for f, _, _ in self.stack):
            while True:  # frames entered before tracing began are not on the stack
                f, mod, opened = self.stack.pop()
                if opened:
                    self.mods.pop()
                    self.count[mod] -= 1
                if f is frame:
                    break


def trace(fn, prefix: str = "perfmodel.") -> Stretches:
    t = _Tracer(prefix)
    sys.setprofile(t)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return t.out


def _cold() -> None:
    """Empty the caches of specs, profiles, self-checks and calibrations, so that a traced request
    takes the whole path a first request takes."""
    api._CHECKS.clear()
    api._CALIBRATIONS.clear()
    request._PROFILES.clear()
    for fn in (registry._load_named, registry._names, registry._alias_index, registry.load_memory_kinds):
        fn.cache_clear()


def _table(s: Stretches) -> str:
    return ", ".join(f"{m.removeprefix('perfmodel.')} {n}" for m, n in sorted(s.max_entries.items()))


def _assert_within_bar(s: Stretches) -> None:
    assert s.max_entries, "nothing traced"
    assert not s.over(LIMIT), f"modules entered more than {LIMIT} times:\n{s.describe(LIMIT)}\nall: {_table(s)}"


# ------------------------------------------------------------------------------ the tracer itself
def _fake_modules():
    """fake.a and fake.b calling each other n levels deep, optionally through other.c."""
    mods = {}
    for name, body in (("fake.a", "def f(n, via):\n    return [] if n == 0 else (via or B).g(n - 1, via)\n"),
                       ("fake.b", "def g(n, via):\n    return [] if n == 0 else A.f(n - 1, via)\n"),
                       ("other.c", "def g(n, via):\n    return B.g(n, None)\n")):
        m = types.ModuleType(name)
        exec(body, m.__dict__)
        mods[name] = m
    for m in mods.values():
        m.A, m.B = mods["fake.a"], mods["fake.b"]
    return mods


def test_tracer_counts_separate_stretches():
    mods = _fake_modules()
    s = trace(lambda: mods["fake.a"].f(4, None), prefix="fake.")  # a b a b a
    assert s.max_entries == {"fake.a": 3, "fake.b": 2}
    assert s.worst_stack["fake.a"] == ["a", "b", "a", "b", "a"]
    assert "fake.a: entered 3 times" in s.describe(LIMIT) and "fake.b" not in s.describe(LIMIT)
    # a frame of another package does not separate a stretch: a -> other.c -> b is a then b
    s = trace(lambda: mods["fake.a"].f(2, mods["other.c"]), prefix="fake.")  # a (c) b a
    assert s.max_entries == {"fake.a": 2, "fake.b": 1}


# ------------------------------------------------------------------------------ the bar
OBSERVED = "rtx-pro-6000,tp8,c=1,180tok/s,spec=ddtree,b=16"
REQUESTS = {
    "readme-quickstart": dict(target="b300", gpus=8, model="kimi-k2.6", parallel="tp", concurrency=[1, 8, 32, 128]),
    "ddtree-auto": dict(target="b300", gpus=8, spec="ddtree", budget="auto", concurrency=[1, 8, 32, 128]),
    "eager-chain": dict(target="h200", gpus=8, spec="chain", graphs=False, concurrency=[1, 8]),
    "ep": dict(target="h200", gpus=8, parallel="ep", concurrency=[1, 32]),
    "tp-attn-ep-moe-ddtree": dict(target="h200", gpus=8, parallel="tp-attn-ep-moe", spec="ddtree", budget=16),
    "profile-gpu-dense": dict(target="h200", gpus=1, model="llama-3.1-8b", concurrency=[1, 64]),
    "pcie-ep": dict(target="rtx-pro-6000", gpus=2, parallel="ep", model="qwen3-30b-a3b"),
    "spec-derived-cpu-tree": dict(target="mi300x", gpus=8, spec="ddtree", budget=32, tree_build="cpu", profile="spec"),
    "observed": dict(target="b300", gpus=8, spec="ddtree", observed=OBSERVED),
}


@pytest.mark.parametrize("name", list(REQUESTS))
def test_project_enters_no_module_more_than_twice(name):
    req = perfmodel.Request(**REQUESTS[name])
    _cold()
    _assert_within_bar(trace(lambda: perfmodel.project(req)))


def test_project_with_a_calibration_file(tmp_path):
    req = perfmodel.Request(target="b300", gpus=8, spec="ddtree", observed=OBSERVED)
    path = tmp_path / "calib.json"
    write_result(projector(req).calibration, path)
    req = perfmodel.Request(target="b300", gpus=8, spec="ddtree", calibration=str(path))
    _cold()
    _assert_within_bar(trace(lambda: perfmodel.project(req)))


def test_what_ifs_and_sensitivity():
    req = perfmodel.Request(target="b300", gpus=8, spec="ddtree", concurrency=[1, 32])
    base = [p.to_dict() for p in perfmodel.project(req).points]
    whatifs = variants(req, has_moe=True, has_drafter=True, floors=production_floors())
    _cold()
    _assert_within_bar(trace(lambda: projector(req, whatif=partial(with_production_floors, floors=production_floors())).projection()))
    _assert_within_bar(trace(lambda: [evaluate(req, w, base) for w in whatifs]))
    _assert_within_bar(trace(lambda: sensitivity(req)))
