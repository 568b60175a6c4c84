"""The runner on a CPU with fake benches: profile round-trip, interrupted-run recovery,
OOM/error isolation, and the no-CUDA exit."""

import json

import pytest

torch = pytest.importorskip("torch")

from perfmodel.measure.common import BenchOutput, make_sample
from perfmodel.measure.runner import log_path, run_measure
from perfmodel.measure.timing import summarize
from perfmodel.profile import BenchResult, KernelFit, load_profile


def _ok(name, calls):
    def bench(ctx):
        calls.append(name)
        t = summarize([1.0, 1.1, 0.9, 1.05])
        s = make_sample({"T": 1}, t, nbytes=1e9, nflops=1e12, provider="fake")
        return BenchOutput(
            BenchResult(status="ok", samples=[s]),
            fits={f"fit_{name}": KernelFit(t0_us=1.0, bw_GBps=1000.0, tflops=100.0, bench=name, source=ctx.source)},
        )

    return bench


def _raise(exc, calls, name):
    def bench(ctx):
        calls.append(name)
        raise exc

    return bench


def test_profile_round_trip(tmp_path):
    calls = []
    out = tmp_path / "p.json"
    rc = run_measure(out, registry={"a": _ok("a", calls), "b": _ok("b", calls)}, require_cuda=False, progress=False)
    assert rc == 0 and calls == ["a", "b"]
    p = load_profile(out)
    assert set(p.benches) == {"a", "b"} and all(b.status == "ok" for b in p.benches.values())
    s = p.benches["a"].samples[0]
    assert s.median_ms == pytest.approx(1.025) and s.achieved_GBps == pytest.approx(1e9 / 1.025e-3 / 1e9)
    assert p.fits["fit_a"].source == f"measured: {p.provenance.timestamp}"
    assert p.provenance.python and p.provenance.hostname
    assert log_path(out).exists() and "profile written" in log_path(out).read_text()


def test_interrupt_then_resume(tmp_path):
    out = tmp_path / "p.json"
    calls = []
    reg = {"one": _ok("one", calls), "two": _raise(KeyboardInterrupt(), calls, "two"), "three": _ok("three", calls)}
    rc = run_measure(out, registry=reg, require_cuda=False, progress=False)
    assert rc == 130 and calls == ["one", "two"]
    assert set(json.loads(out.read_text())["benches"]) == {"one"}
    calls.clear()
    reg["two"] = _ok("two", calls)
    rc = run_measure(out, registry=reg, require_cuda=False, progress=False, resume=True)
    assert rc == 0 and calls == ["two", "three"]
    p = load_profile(out)
    assert set(p.benches) == {"one", "two", "three"} and "resumed" in p.provenance.note


def test_oom_and_error_recorded_others_run(tmp_path):
    out = tmp_path / "p.json"
    calls = []
    reg = {
        "a": _raise(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"), calls, "a"),
        "b": _raise(ValueError("bad shape\nsecond line"), calls, "b"),
        "c": _ok("c", calls),
    }
    rc = run_measure(out, registry=reg, require_cuda=False, progress=False)
    assert rc == 1 and calls == ["a", "b", "c"]
    p = load_profile(out)
    assert p.benches["a"].status == "oom" and "out of memory" in p.benches["a"].note
    assert p.benches["b"].status == "error" and p.benches["b"].note == "ValueError: bad shape"
    assert p.benches["c"].status == "ok"
    # resume reruns only the failed ones
    calls.clear()
    reg["a"], reg["b"] = _ok("a", calls), _ok("b", calls)
    assert run_measure(out, registry=reg, require_cuda=False, progress=False, resume=True) == 0
    assert calls == ["a", "b"]


def test_only_and_unknown(tmp_path, capsys):
    calls = []
    reg = {"a": _ok("a", calls), "b": _ok("b", calls)}
    assert run_measure(tmp_path / "p.json", only=["b"], registry=reg, require_cuda=False, progress=False) == 0
    assert calls == ["b"]
    assert run_measure(tmp_path / "p.json", only=["zzz"], registry=reg, require_cuda=False, progress=False) == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_no_cuda_exit_2(tmp_path, capsys):
    rc = run_measure(tmp_path / "p.json")
    cap = capsys.readouterr()
    assert rc == 2
    assert cap.out == ""  # errors go to stderr
    assert cap.err.strip().splitlines() == ["perfmodel measure: no CUDA GPU found (torch.cuda.is_available() is False)"]
    assert not (tmp_path / "p.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_main_no_cuda(tmp_path):
    from perfmodel.measure.__main__ import main

    assert main(["--out", str(tmp_path / "p.json"), "--quick"]) == 2
