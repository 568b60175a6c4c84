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


def test_settle_clock_waits_for_the_clock_then_gives_up():
    """Waits (idle) until the SM clock is back to 95% of its peak, at most max_wait_s; returns at
    once where no clock can be read (no GPU, no NVML)."""
    from perfmodel.measure.timing import settle_clock

    slept = []
    readings = iter([1500, 1600, 1900, 1980])
    r = settle_clock(clock=lambda: next(readings), peak=1980, sleep=slept.append, poll_s=0.25)
    assert (r.clock_MHz, r.waited_s, r.settled) == (1900, 0.5, True) and slept == [0.25, 0.25]
    r = settle_clock(clock=lambda: 1500, peak=1980, sleep=slept.append, max_wait_s=2.0, poll_s=0.5)
    assert (r.clock_MHz, r.waited_s, r.settled) == (1500, 2.0, False)
    slept.clear()
    assert settle_clock(clock=lambda: None, peak=1980, sleep=slept.append).settled and not slept
    assert settle_clock(clock=lambda: 1000, peak=None, sleep=slept.append).waited_s == 0 and not slept


def test_bench_context_settle_clock_keeps_the_budget_and_logs(monkeypatch):
    from perfmodel.measure import common
    from perfmodel.measure.timing import ClockSettle

    logs = []
    ctx = common.BenchContext(budget_s=10.0, log=logs.append)
    started = ctx.started
    monkeypatch.setattr(common, "settle_clock", lambda **kw: ClockSettle(1700, 4.0, False))
    ctx.settle_clock("moe w4a16 kimi")
    assert ctx.started == started + 4.0  # the wait is not the bench's time
    assert logs == ["moe w4a16 kimi: waited 4.0 s for the SM clock (1700 MHz, still low)"]
    monkeypatch.setattr(common, "settle_clock", lambda **kw: ClockSettle(None, 0.0, True))
    ctx.settle_clock("again")
    assert len(logs) == 1


def test_sample_carries_the_sm_clock_time_fn_read():
    t = summarize([0.01, 0.012], "graph", 8, "rotate")
    assert "sm_clock_MHz" not in make_sample({"T": 1}, t).model_dump()
    t.extra["sm_clock_MHz"] = 1980
    assert make_sample({"T": 1}, t).model_dump()["sm_clock_MHz"] == 1980


def test_low_clock_samples_names_the_throttled_points(tmp_path):
    """A profile that records the SM clock's maximum and each sample's clock names the samples
    timed below 95% of it, also after a save and load; without a maximum it names none."""
    from perfmodel.measure.runner import low_clock_samples
    from perfmodel.profile import Profile, Provenance, save_profile

    t = summarize([0.02], "graph", 8, "rotate")
    hot, cool = (make_sample({"shape": "kimi", "T": T}, t, sm_clock_MHz=mhz) for T, mhz in ((1, 1725), (2, 1980)))
    prov = Provenance(kind="measured", gpu_name="NVIDIA H200", timestamp="2026-12-01T00:00:00+00:00",
                      sm_clock_max_MHz=1980)
    prof = Profile(provenance=prov, benches={"moe": BenchResult(status="ok", samples=[hot, cool])})
    assert low_clock_samples(prof) == ["moe {'shape': 'kimi', 'T': 1} 1725 MHz"]
    save_profile(prof, tmp_path / "p.json")
    assert low_clock_samples(load_profile(tmp_path / "p.json")) == low_clock_samples(prof)
    prof.provenance.sm_clock_max_MHz = None
    assert low_clock_samples(prof) == []


def test_a_bench_writes_the_results_it_produced_under_other_names(tmp_path):
    """The foreign bench's prefill and mixed steps go to a bench entry of their own beside its
    decode points (BenchOutput.more), and are logged."""
    calls = []
    ok = _ok("foreign", calls)

    def with_more(ctx):
        out = ok(ctx)
        out.more["foreign_prefill"] = BenchResult(status="ok", samples=out.result.samples, note="prefill steps")
        return out

    out = tmp_path / "p.json"
    assert run_measure(out, only=["foreign"], registry={"foreign": with_more}, require_cuda=False, progress=False) == 0
    p = load_profile(out)
    assert set(p.benches) == {"foreign", "foreign_prefill"} and p.benches["foreign_prefill"].note == "prefill steps"
    assert "foreign_prefill (by foreign): ok, 1 samples" in log_path(out).read_text()
