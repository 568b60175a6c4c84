"""`run_measure`: run the benches in order, write the profile atomically after every bench,
survive OOMs and errors in one bench, resume an interrupted run, and print achieved vs
peak. Everything printed also goes to `<out>.log` (plain text)."""

from __future__ import annotations

import datetime as _dt
import importlib
import os
import platform
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from perfmodel.outputs import OutputError
from perfmodel.profile import VALIDATION_BENCHES, BenchResult, Profile, Provenance, load_profile, save_profile, stale_temp_files

from .common import BenchContext, BenchOutput, pct
from .timing import max_sm_clock_MHz

BENCH_ORDER = ("ceilings", "dispatch", "elementwise", "gemm", "moe", "attention", "prefill", "treebuild", "collectives",
               "e2e", "pcie", "foreign")

# Soft wall-clock budget per bench in seconds (full, quick): sweeps stop adding points past
# it; compile time of first Triton calls counts. Most benches finish under budget: the full
# suite's benches summed to 159 s in the embedded profile's run on 1x H200
# (evidence/embedded-profile/anchors.md); the cuts that set the budgets below are in
# evidence/bench-budgets/.
BUDGET_S = {
    "ceilings": (13, 5),
    "dispatch": (6, 3),
    "elementwise": (14, 4),  # perfmodel's small ops and the kernel set "torch"'s
    "gemm": (12, 4),
    "moe": (100, 10),  # 55 s cut the bf16 Qwen sweep at T<128 with the fused decode kernels compiling cold (run at 51dbe64)
    "attention": (130, 12),  # the decode split-KV configs compile per split count: 36 s cut C <= 32 (run at 51dbe64); the last 30 s: SDPA
    # prefill-size GEMMs, causal attention and MoE (shares 0.2 / 0.55 / 1.0 of it end the three
    # sweeps, measure/prefill.py). Not yet cut by a run: the sweeps' counted FLOPs, 12 calls a
    # point, are a few seconds of work on an H200, and each point's setup milliseconds; the MoE
    # sweep, last, takes what the Triton compiles leave (warm after the moe bench in a full run).
    # Kept small for the full suite's 180 s bar (reports/anchors.py)
    "prefill": (30, 12),
    "treebuild": (50, 25),  # compiles per budget B (about 7 s each on the H200 host); 26 s in the embedded profile's run
    "collectives": (22, 8),
    "e2e": (30, 10),  # 18 s cut a cold e2e-only run (--resume --only dispatch,e2e) at 11 of 15 points (run at 3762c89)
    "pcie": (20, 8),  # collectives with NCCL peer-to-peer off (through host memory)
    "foreign": (90, 20),  # torch-only decode stacks on 1 GPU, TP over NVLink and over PCIe
}


BenchFn = Callable[[BenchContext], BenchOutput]


def default_registry() -> dict[str, BenchFn]:
    """name -> bench function, imported lazily so that a broken bench breaks only itself."""

    def lazy(name: str) -> BenchFn:
        def run(ctx: BenchContext) -> BenchOutput:
            return importlib.import_module(f"perfmodel.measure.{name}").run(ctx)

        run.__name__ = name
        return run

    return {n: lazy(n) for n in BENCH_ORDER}


NO_CUDA = "perfmodel measure: no CUDA GPU found (torch.cuda.is_available() is False)"
NO_TORCH = "perfmodel measure: torch is not installed (pip install torch; a CUDA GPU is required)"


def _cuda_problem() -> str | None:
    try:
        import torch
    except ImportError:
        return NO_TORCH
    if not torch.cuda.is_available():
        return NO_CUDA
    return None


def exit_unless_cuda(tool: str) -> None:
    """For the standalone tools (tuning sweeps): without CUDA, one line and exit 2, as
    `perfmodel measure` does."""
    if (problem := _cuda_problem()) is not None:
        print(problem.replace("perfmodel measure", tool), file=sys.stderr)
        sys.exit(2)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _git_sha() -> str | None:
    if os.environ.get("PERFMODEL_GIT_SHA"):  # set by whoever ships a copy of the tree without .git
        return os.environ["PERFMODEL_GIT_SHA"]
    try:
        r = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=5
        )
        return r.stdout.strip() or None if r.returncode == 0 else None
    except Exception:
        return None


def _driver() -> str | None:
    try:
        r = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=10
        )
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else None
    except Exception:
        return None


def low_clock_samples(profile: Profile, frac: float = 0.95) -> list[str]:
    """The samples timed with the SM clock below frac x the profile's maximum, as
    "bench shape-dict MHz" lines (none where the profile has no clock readings)."""
    peak = profile.provenance.sm_clock_max_MHz
    if not peak:
        return []
    out = []
    for name, b in profile.benches.items():
        for smp in b.samples:
            mhz = getattr(smp, "sm_clock_MHz", None)
            if mhz is not None and mhz < frac * peak:
                out.append(f"{name} {dict(smp.shape)} {mhz} MHz")
    return out


def make_provenance(command: str | None = None) -> Provenance:
    gpu_name, n_gpus, cuda, torch_v, triton_v, spec = "unknown", 0, None, None, None, None
    try:
        import torch

        torch_v = torch.__version__
        cuda = torch.version.cuda
        if torch.cuda.is_available():
            gpu_name = torch.cuda.get_device_name(0)
            n_gpus = torch.cuda.device_count()
    except ImportError:
        pass
    try:
        import triton

        triton_v = triton.__version__
    except ImportError:
        pass
    if gpu_name != "unknown":
        from .peaks import find_peak

        p = find_peak(gpu_name)
        spec = p.spec if p else None
    return Provenance(
        kind="measured",
        gpu_name=gpu_name,
        gpu_spec=spec,
        n_gpus=max(n_gpus, 1),
        driver=_driver() if n_gpus else None,
        sm_clock_max_MHz=max_sm_clock_MHz(0) if n_gpus else None,
        cuda=cuda,
        torch=torch_v,
        triton=triton_v,
        python=platform.python_version(),
        git_sha=_git_sha(),
        hostname=socket.gethostname(),
        timestamp=_now(),
        command=command if command is not None else " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
    )


class _Log:
    """Prints to the terminal (rich) and appends the same text to `<out>.log`, which is
    replaced whole (outputs.AtomicText: published every few seconds, after each bench and at
    the end), so a kill leaves the log as last published, never a part of a line."""

    def __init__(self, path: Path, inputs=()):
        from rich.console import Console

        from perfmodel.outputs import AtomicText

        self.console = Console()
        self._f = AtomicText(path, append=True, inputs=inputs, what="--out log")
        self.file_console = Console(file=self._f, width=140, no_color=True, force_terminal=False, soft_wrap=True)

    def __call__(self, msg="", **kw) -> None:
        self.console.print(msg, **kw)
        self.file_console.print(msg, **kw)
        self._f.publish()

    def checkpoint(self) -> None:
        self._f.publish(force=True)

    def close(self) -> None:
        self._f.close()


def log_path(out: Path) -> Path:
    """profile.json -> profile.log beside it (profile -> profile.log)."""
    out = Path(out)
    return out.with_suffix(".log") if out.suffix and out.suffix != ".log" else out.with_name(out.name + ".log")


def _merge(profile: Profile, name: str, out: BenchOutput) -> Profile:
    d = profile.model_copy(deep=True)
    d.benches[name] = out.result
    d.benches.update(out.more)
    if out.ceilings is not None:
        d.ceilings = out.ceilings
    d.fits.update(out.fits)
    if out.collectives:
        new = {(x.op, x.n_gpus, x.graph, x.link) for x in out.collectives}
        keep = [c for c in d.collectives if (c.op, c.n_gpus, c.graph, c.link) not in new]
        d.collectives = keep + out.collectives
    if out.overheads is not None:
        d.overheads = out.overheads
    d.treebuild.update(out.treebuild)
    if out.e2e:
        names = {p.name for p in out.e2e}
        d.e2e = [p for p in d.e2e if p.name not in names] + out.e2e
    return d


def _empty_cache() -> None:
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    except Exception:
        pass


def _is_oom(e: BaseException) -> bool:
    try:
        import torch

        if isinstance(e, torch.cuda.OutOfMemoryError):
            return True
    except ImportError:
        pass
    return "out of memory" in str(e).lower() and isinstance(e, RuntimeError)


def run_measure(
    out: Path,
    only: list[str] | None = None,
    quick: bool = False,
    resume: bool = False,
    progress: bool = True,
    force: bool = False,
    *,
    registry: dict[str, BenchFn] | None = None,
    require_cuda: bool = True,
    command: str | None = None,
) -> int:
    """Run the benches and write the profile to `out`. Returns an exit code:
    0 all ok (skipped counts as ok), 1 some bench failed (error/oom), 2 no CUDA / bad input,
    130 interrupted (the file holds every bench finished before the interrupt).
    `registry` and `require_cuda=False` exist for tests (fake benches on a CPU).

    An existing `out` is never lost: without `resume` or `force` it is an error; with `force`
    it is replaced only once the first bench has finished; every write is atomic (profile.
    save_profile) and keeps the file's mode. SIGTERM is handled like Ctrl-C, so no temp file
    stays behind; temp files of killed runs are removed."""
    out = Path(out)
    registry = registry if registry is not None else default_registry()
    names = list(registry)
    if not only:  # the validation benches run when --only names them
        names = [n for n in names if n not in VALIDATION_BENCHES]
    if only:
        bad = [n for n in only if n not in registry]
        if bad:
            print(f"perfmodel measure: --only: unknown bench {', '.join(bad)} (choose from {', '.join(names)})", file=sys.stderr)
            return 2
        names = [n for n in names if n in only]
    problem = out_problem(out, resume, force)
    if problem:
        print(f"perfmodel measure: {problem}", file=sys.stderr)
        return 2
    if require_cuda:
        problem = _cuda_problem()
        if problem:
            print(problem, file=sys.stderr)
            return 2
    for stale in stale_temp_files(out):
        stale.unlink(missing_ok=True)

    try:
        log = _Log(log_path(out), inputs=[out])
    except (OSError, OutputError) as e:
        print(f"perfmodel measure: --out {out}: cannot write beside it ({e.strerror or e})", file=sys.stderr)
        return 2
    old_term = _sigterm_as_interrupt()
    try:
        return _run(out, names, registry, quick, resume, progress, log, command, force)
    except KeyboardInterrupt:
        print(f"perfmodel measure: interrupted; {out} holds the benches finished before it (rerun with --resume)",
              file=sys.stderr)
        return 130
    except OutputError as e:
        print(f"perfmodel measure: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"perfmodel measure: cannot write {out}: {e.strerror or e}", file=sys.stderr)
        return 2
    finally:
        try:
            log.close()
        except OutputError as e:
            print(f"perfmodel measure: {e}", file=sys.stderr)
        _restore_sigterm(old_term)


def out_problem(out: Path, resume: bool, force: bool) -> str | None:
    """Why `out` cannot take the profile, or None."""
    if out.is_dir():
        return f"--out {out}: is a directory; name the profile file, e.g. {out / 'profile.json'}"
    if out.exists() and not out.is_file():
        return f"--out {out}: not a regular file"
    if out.exists() and not (resume or force):
        return (f"--out {out} already exists; pass --resume to complete it, or --force to replace it "
                f"(it is kept until the first bench finishes)")
    parent = out.parent if str(out.parent) else Path(".")
    if parent.exists() and not parent.is_dir():
        return f"--out {out}: {parent} is not a directory"
    return None


def _sigterm_as_interrupt():
    """SIGTERM raises KeyboardInterrupt, so the interrupted write removes its temp file and the
    profile keeps every bench finished before it. Returns the previous handler."""
    import signal

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        return None


def _restore_sigterm(old) -> None:
    import signal

    if old is not None:
        signal.signal(signal.SIGTERM, old)


PROVENANCE_KEYS = ("gpu_name", "driver", "torch")


def resume_mismatch(old: Provenance, new: Provenance) -> str | None:
    """The first of GPU, driver, torch in which `new` (this machine) differs from `old`."""
    for k in PROVENANCE_KEYS:
        a, b = getattr(old, k), getattr(new, k)
        if a != b:
            return f"{k} {a!r} in the profile, {b!r} here"
    return None


def _run(out, names, registry, quick, resume, progress, log, command, force=False) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    profile = None
    if resume and out.exists():
        try:
            profile = load_profile(out)
        except Exception as e:
            print(f"perfmodel measure: cannot resume from {out}: {e}", file=sys.stderr)
            return 2
        here = make_provenance(command)
        diff = resume_mismatch(profile.provenance, here)
        if diff and not force:
            print(f"perfmodel measure: --resume {out}: taken on another setup ({diff}); its benches would mix "
                  f"with these under the old provenance. Use a new --out, or --force to resume anyway", file=sys.stderr)
            return 2
        done = [n for n in names if n in profile.benches and profile.benches[n].status in ("ok", "skipped")]
        if done:
            log(f"resume: {', '.join(done)} already done in {out}; running {', '.join(n for n in names if n not in done) or 'nothing'}")
        names = [n for n in names if n not in done]
        prov = profile.provenance.model_copy(update={"note": (profile.provenance.note + f" resumed {_now()};").strip()})
        profile = profile.model_copy(update={"provenance": prov})
    if profile is None:
        profile = Profile(provenance=make_provenance(command))
    p = profile.provenance
    log(f"perfmodel measure -> {out}  ({p.gpu_name}, {p.n_gpus} GPU(s), torch {p.torch}, triton {p.triton}, cuda {p.cuda}, "
        f"driver {p.driver}){'  [quick]' if quick else ''}")
    if not out.exists():
        save_profile(profile, out)  # an existing profile is replaced only by one with a finished bench

    source = f"measured: {profile.provenance.timestamp}"
    rc = 0
    budgets = {n: BUDGET_S.get(n, (30, 8))[1 if quick else 0] for n in names}
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed:.0f}/{task.total:.0f} s"),
        TimeElapsedColumn(), console=log.console, disable=not progress, transient=False,
    ) as bar:
        # Overall: the benches' time budgets summed; per bench: its budget, filled as time passes
        # (a bench stops adding points past its budget, so the bar is an honest guide, not a promise).
        task = bar.add_task(f"measure ({len(names)} benches)", total=sum(budgets.values()) or 1)
        for name in names:
            budget = budgets[name]
            ctx = BenchContext(quick=quick, budget_s=budget, source=source, ceilings=profile.ceilings, log=log)
            ticker = _BenchTicker(bar, bar.add_task(f"  {name}", total=budget), budget)
            started, t0 = _now(), time.perf_counter()
            try:
                with ticker:
                    ctx.settle_clock(name)  # the benches before it may have lowered the SM clock
                    res = registry[name](ctx)
                res.result.started, res.result.finished = started, _now()
                res.result.wall_s = round(time.perf_counter() - t0, 3)
            except KeyboardInterrupt:
                log(f"perfmodel measure: interrupted during {name}; {out} holds the benches finished before it (rerun with --resume)")
                return 130
            except BaseException as e:  # one bench's failure must not stop the others
                if isinstance(e, SystemExit):
                    raise
                oom = _is_oom(e)
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                note = f"{type(e).__name__}: {msg}"[:400]
                status = "oom" if oom else "error"
                log(f"[{'yellow' if oom else 'red'}]{name}: {status}[/] {note}")
                log.file_console.print(traceback.format_exc())
                res = BenchOutput(BenchResult(status=status, note=note, started=started, finished=_now(), wall_s=round(time.perf_counter() - t0, 3)))
                rc = 1
                _empty_cache()
            profile = _merge(profile, name, res)
            save_profile(profile, out)
            r = res.result
            log(f"{name}: {r.status} in {r.wall_s:.1f} s, {len(r.samples)} samples{(' — ' + r.note) if r.note else ''}")
            for other, m in res.more.items():
                log(f"  {other} (by {name}): {m.status}, {len(m.samples)} samples{(' — ' + m.note) if m.note else ''}")
            log.checkpoint()  # the log as far as the profile just saved
            bar.advance(task, budget)
            _empty_cache()
    summary_table(profile, log)
    low = low_clock_samples(profile)
    if low:
        log(f"[yellow]{len(low)} samples timed with the SM clock below 95% of its "
            f"{profile.provenance.sm_clock_max_MHz} MHz maximum[/] (throttled: their times are high), first: {low[0]}")
    log(f"profile written to {out}")
    return rc


class _BenchTicker:
    """Fills one bench's progress task with its elapsed time (capped at its budget) while it runs."""

    def __init__(self, bar, task, budget: float):
        self.bar, self.task, self.budget = bar, task, budget
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)

    def _tick(self) -> None:
        t0 = time.perf_counter()
        while not self._stop.wait(0.5):
            self.bar.update(self.task, completed=min(time.perf_counter() - t0, self.budget))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.bar.update(self.task, completed=self.budget)


def summary_table(profile: Profile, log) -> None:
    from rich.table import Table

    c = profile.ceilings
    t = Table(title=f"perfmodel measure — {profile.label}")
    for col in ("bench", "status", "s", "n", "best GB/s", "% read bw", "best TFLOP/s", "% GEMM", "fit"):
        t.add_column(col, justify="right" if col not in ("bench", "status", "fit") else "left")
    fits_by_bench: dict[str, list[str]] = {}
    for cls, f in profile.fits.items():
        fits_by_bench.setdefault(f.bench, []).append(
            f"{cls}: t0 {f.t0_us:.1f} us, {f.bw_GBps:.0f} GB/s, {f.tflops:.0f} TF, rmse {100 * f.rmse_rel:.0f}%"
        )
    for cf in profile.collectives:
        fits_by_bench.setdefault("collectives", []).append(
            f"{cf.op}{' graph' if cf.graph else ''} x{cf.n_gpus}: {cf.latency_us:.1f} us + B/{cf.bw_GBps:.0f} GB/s, rmse {100 * cf.rmse_rel:.0f}%"
        )
    if profile.overheads:
        o = profile.overheads
        fits_by_bench.setdefault("dispatch", []).append(
            f"launch {o.launch_eager_us:.1f} us"
            + (f" (Triton {o.launch_eager_triton_us:.1f} us)" if o.launch_eager_triton_us else "")
            + f", node {o.graph_node_us:.2f} us, graph {o.graph_launch_us:.1f} us, host step {o.host_step_us:.0f} us"
        )
    for impl, tf in profile.treebuild.items():
        fits_by_bench.setdefault("treebuild", []).append(f"{impl}: {tf.t0_us:.0f} us + {tf.per_node_us:.3f} us*C*B, rmse {100 * tf.rmse_rel:.0f}%")
    if c.read_GBps or c.bf16_TFLOPS:
        fits_by_bench.setdefault("ceilings", []).append(
            f"copy {c.copy_GBps or 0:.0f} GB/s, read {c.read_GBps or 0:.0f} GB/s, bf16 {c.bf16_TFLOPS or 0:.0f} TF, fp8 {c.fp8_TFLOPS or 0:.0f} TF"
        )
    if profile.e2e:
        fits_by_bench.setdefault("e2e", []).append(
            ", ".join(f"C{p.concurrency}q{p.q}{'x' + str(p.n_gpus) if p.n_gpus > 1 else ''}: {p.step_ms:.2f} ms" for p in profile.e2e[:6])
            + (" …" if len(profile.e2e) > 6 else "")
        )
    for name, r in profile.benches.items():
        gb = max((s.achieved_GBps or 0 for s in r.samples), default=0) or None
        tf = max((s.achieved_TFLOPS or 0 for s in r.samples), default=0) or None
        f = lambda x, d=0: "" if x is None else f"{x:.{d}f}"  # noqa: E731
        t.add_row(
            name, r.status, f(r.wall_s, 1), str(len(r.samples)), f(gb), f(pct(gb, c.read_GBps)), f(tf), f(pct(tf, c.bf16_TFLOPS)),
            "\n".join(fits_by_bench.get(name, [])) or (r.note[:60] if r.status != "ok" else ""),
        )
    log(t)
