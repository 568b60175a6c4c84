"""`perfmodel` command line. Heavy modules (torch, scipy, matplotlib) are imported lazily so
that `perfmodel --help` and `perfmodel project` start fast on a laptop."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from enum import Enum
from pathlib import Path

import typer

from perfmodel.cli_errors import OneLineErrors  # parse errors: one line naming the option and value
from perfmodel.options import ScenarioOptions, scenario_options

HELP = {"help_option_names": ["-h", "--help"]}  # -h as help on every command
app = typer.Typer(cls=OneLineErrors, no_args_is_help=True, pretty_exceptions_enable=False, context_settings=HELP,
                  help="Measure decode kernels here, project LLM decode throughput there, and explain the bottleneck.")
hw_app = typer.Typer(no_args_is_help=True, context_settings=HELP, help="Hardware specs (hwspecs/).")
models_app = typer.Typer(no_args_is_help=True, context_settings=HELP, help="Model presets, and import from a HuggingFace config.json.")
profile_app = typer.Typer(no_args_is_help=True, context_settings=HELP,
                          help="Profiles from elsewhere: import a public database's per-op measurements.")
app.add_typer(hw_app, name="hw")
app.add_typer(models_app, name="models")
app.add_typer(profile_app, name="profile")


class Fmt(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


def fail(msg: str) -> None:
    """One clear line on stderr, exit code 2 (a line break in a name the user gave is shown escaped)."""
    from perfmodel.inputs import escaped

    typer.echo(f"perfmodel: {escaped(msg)}", err=True)
    raise typer.Exit(2)


def _guard(fn, *a, where: str = "", **kw):
    """fn(*a, **kw), with any input error (ValueError: InputError, SpecError, ProjectionError)
    as one line on stderr and exit 2."""
    try:
        return fn(*a, **kw)
    except ValueError as e:
        fail(f"{where}: {e}" if where else str(e))


def _version(value: bool) -> None:
    if value:
        from perfmodel import __version__

        typer.echo(f"perfmodel {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")):
    """Measure decode kernels here, project LLM decode throughput there, and explain the bottleneck."""


@contextlib.contextmanager
def _stdout_may_close():
    """`perfmodel ... | head -5`: a reader that stops early ends the command quietly with 0."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        raise typer.Exit(0) from None


def _jsonable(x):
    """Plain JSON data from results and specs (pydantic models, possibly in lists or dicts)."""
    if hasattr(x, "model_dump"):
        return x.model_dump(mode="json")
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_jsonable(v) for v in x]
    return x


def _emit(res, fmt: Fmt, to_csv, to_table) -> None:
    """A result as JSON, as CSV text from `to_csv`, or as the rich table `to_table` prints."""
    with _stdout_may_close():
        if fmt == Fmt.json:
            typer.echo(json.dumps(_jsonable(res), indent=1, allow_nan=False))  # NaN never reaches JSON
        elif fmt == Fmt.csv:
            typer.echo(to_csv(res), nl=False)
        else:
            to_table(res)


def _request(opts: ScenarioOptions):
    from perfmodel.errors import ProjectionError

    try:
        return opts.request()
    except ProjectionError as e:
        fail(str(e))


@app.command()
@scenario_options
def project(opts: ScenarioOptions,
            sensitivity: bool = typer.Option(False, "--sensitivity", help="Rank inputs by how tok/s moves for ±20%."),
            fmt: Fmt = typer.Option(Fmt.table, "--format", "-f")):
    """Project decode throughput per concurrency on a target system."""
    from perfmodel.api import ProjectionError, projector

    req = _request(opts)
    try:
        res = projector(req).projection()
        if sensitivity:
            from perfmodel.explore import sensitivity as sens
            from perfmodel.model.result import Sensitivity

            res = res.model_copy(update={"sensitivity": [Sensitivity(**r) for r in sens(req)]})
    except ProjectionError as e:
        fail(str(e))
    from perfmodel import render

    _emit(res, fmt, render.projection_csv, render.projection_table)


PLOT_HELP = ("Write a Pareto plot (tok/s per user vs tok/s per GPU). A file: its extension picks the format (png, pdf, svg, "
             "... as matplotlib writes them; none: PNG); a folder (an existing one, or a path ending in /): FOLDER/compare.png.")


def _plot_target(plot: str) -> tuple[Path, str]:
    """The file `--plot` writes and its format, or one line and exit 2 (an unknown extension)."""
    import importlib.util

    from perfmodel.compare import plot_formats

    if importlib.util.find_spec("matplotlib") is None:
        raise ImportError("matplotlib", name="matplotlib")
    path = Path(plot)
    if plot.endswith(("/", os.sep)) or path.is_dir():
        path = path / "compare.png"
    ext = path.suffix[1:].lower()
    kinds = plot_formats()
    if ext and ext not in kinds:
        fail(f"--plot {plot}: unsupported format '.{ext}' (matplotlib writes {', '.join(sorted(kinds))})")
    return path, ext or "png"


@app.command()
@scenario_options
def compare(opts: ScenarioOptions,
            fmt: Fmt = typer.Option(Fmt.table, "--format", "-f"),
            plot: str | None = typer.Option(None, "--plot", help=PLOT_HELP)):
    """Project several targets × GPU counts × layouts in one table (comma lists for --target, --gpus, --parallel)."""
    from perfmodel.compare import CompareError, run_compare
    from perfmodel.errors import ProjectionError

    if plot is not None:
        try:  # said before any work, in one line
            target, kind = _plot_target(plot)
        except ImportError as e:
            fail(f"--plot needs matplotlib ({e.name or e} is missing): pip install 'perfmodel[report]'")
    try:
        reqs = opts.requests()
        if plot is not None:
            from perfmodel.outputs import check_target
            from perfmodel.request import input_files

            inputs = [f for r in reqs for f in input_files(r)]
            check_target(target, inputs, what="--plot")
        cmp = run_compare(reqs)
    except (ProjectionError, CompareError) as e:
        fail(str(e))
    except ValueError as e:  # the plot's target refused (OutputError)
        fail(str(e))
    from perfmodel import render

    _emit(cmp, fmt, render.compare_csv, render.compare_table)
    if plot is not None:
        import io

        from perfmodel.compare import pareto_plot
        from perfmodel.outputs import write_file

        buf = io.BytesIO()
        try:
            pareto_plot(cmp, buf, kind)
        except ImportError as e:  # matplotlib present but broken (a missing part of it)
            fail(f"--plot needs matplotlib ({e.name or e} is missing): pip install 'perfmodel[report]'")
        written = _guard(write_file, target, buf.getvalue(), inputs=inputs, what="--plot")
        typer.echo(f"Pareto plot: {written}", err=True)


STEP_FIELDS = ("target", "gpus", "model", "parallel", "spec", "graphs", "tree_build", "profile", "link", "host_cpu_factor",
               "hw_file", "model_file", "dtypes", "calibration", "kernels", "drafter", "draft_tokens", "draft_topk")


@app.command()
@scenario_options(only=STEP_FIELDS)
def step(opts: ScenarioOptions,
         decode: list[str] = typer.Option([], "--decode", help="N@CTX: N sequences decoding one token each at context CTX "
                                                                "(repeatable)."),
         prefill: list[str] = typer.Option([], "--prefill", help="NxT@P: N sequences of T new tokens after a cached prefix P "
                                                                  "(a whole prompt, P = 0, or a chunk; repeatable)."),
         verify: list[str] = typer.Option([], "--verify", help="NxW@CTX: N sequences verifying W speculative tokens at "
                                                                "context CTX (repeatable; the drafter runs with --spec)."),
         logits: str = typer.Option("last", "--logits", help="last: logits of each prefill's last token (as engines "
                                                              "sample) | all: of every token."),
         fmt: Fmt = typer.Option(Fmt.table, "--format", "-f")):
    """Price one forward pass of any batch an engine runs: decode, prefill chunks and verification, mixed."""
    from perfmodel.api import ProjectionError
    from perfmodel.api import step as price

    req = _request(opts)
    try:
        res = price(req, decode=decode, prefill=prefill, verify=verify, logits=logits)
    except ProjectionError as e:
        fail(str(e))
    from perfmodel import render

    _emit(res, fmt, render.step_csv, render.step_table)


@app.command()
def measure(out: Path = typer.Option(Path("profile.json"), "--out", "-o", help="Profile JSON to write (the log goes beside it, .log)."),
            only: str | None = typer.Option(None, "--only", help="Comma-separated benches (ceilings,moe,attention,gemm,elementwise,"
                                                                  "prefill,treebuild,dispatch,collectives,e2e,pcie,foreign)."),
            quick: bool = typer.Option(False, "--quick", help="Fewer sizes and samples."),
            resume: bool = typer.Option(False, "--resume", help="Complete an interrupted profile."),
            progress: bool = typer.Option(True, "--progress/--no-progress", help="Per-bench progress bars (each bench has a time budget)."),
            force: bool = typer.Option(False, "--force", help="Replace an existing --out (kept until the first bench finishes), "
                                                             "or --resume one taken on another GPU/driver/torch.")):
    """Run microbenchmarks on the local GPU and write a profile (needs CUDA)."""
    try:
        from perfmodel.measure.runner import run_measure
    except ImportError as e:
        fail(f"measure needs torch and triton ({e.name or e} is missing)")
    names = [x.strip() for x in only.split(",") if x.strip()] if only else None
    raise typer.Exit(run_measure(out, only=names, quick=quick, resume=resume, progress=progress, force=force))


@app.command()
@scenario_options
def report(opts: ScenarioOptions,
           source: str = typer.Option("rtx-pro-6000", "--source", help="The machine the user has today, compared side by side."),
           out: Path = typer.Option(Path("reports/out"), "--out", "-o",
                                    help="Folder for the markdown, the JSON beside it and the PNG figures (created if missing)."),
           sla: float | None = typer.Option(None, "--sla-tok-s-per-user", help="Rank the recommendations at a service level: "
                                            "the most tok/s per GPU with at least this many tok/s per user (default: at the "
                                            "concurrencies asked for).")):
    """Write notes on a target (markdown + PNG figures + JSON): answer first, the source's figures, the bottleneck shift,
    what to change."""
    from perfmodel.errors import ProjectionError

    req = _request(opts)
    from perfmodel.specs import registry

    _guard(registry.load_gpu, source, where="--source")
    if sla is not None:
        from perfmodel.inputs import finite_number

        _guard(finite_number, sla, "--sla-tok-s-per-user", lo=0, lo_open=True)
    try:
        from perfmodel.reports.findings import ReportError, write_report
    except ImportError as e:
        fail(f"report needs matplotlib ({e.name or e} is missing): pip install 'perfmodel[report]'")
    from rich.console import Console

    try:
        with Console(stderr=True).status("writing the report (projections, sensitivity, figures)..."):
            path = write_report(req, out, source=source, sla=sla)
    except (ProjectionError, ReportError) as e:
        fail(str(e))
    typer.echo(str(path))


@app.command()
def validate(profile: list[str] | None = typer.Option(None, "--profile", help="Profiles whose e2e points to check (default: the shipped ones)."),
             published: bool = typer.Option(True, "--published/--no-published", help="Also check the shipped table of published figures."),
             tolerance: float = typer.Option(0.25, "--tolerance", help="Exit 1 if the median |error| exceeds this."),
             base: str | None = typer.Option(None, "--base", help="Profile to predict from (default: each checked profile predicts its own "
                                                                   "e2e points; "
                                                                   "the published figures use the embedded profile)."),
             calibration: str | None = typer.Option(None, "--calibration", help="Calibration JSON (`perfmodel calibrate`): the "
                                                     "published figures are projected through it (e2e steps of perfmodel's own "
                                                     "stack are not); with --silicon, the calibrated way's (or "
                                                     "engine=FILE,... per engine)."),
             transfer: bool = typer.Option(False, "--transfer", help="Instead: test the transfer rules on aiconfigurator's per-op "
                                           "database (`pip install 'perfmodel\\[aic]'`): every row priced on its system's GPU from "
                                           "the local profile (--profile, default the embedded one) and from the database's H200 "
                                           "rows of the same engine."),
             silicon: bool = typer.Option(False, "--silicon", help="Instead: the serving projection against aiconfigurator's "
                                          "measured serving points (its silicon_sample.csv, aggregated rows; `pip install "
                                          "'perfmodel\\[aic]'`): TTFT and TPOT errors by engine, system and model."),
             system: str | None = typer.Option(None, "--system", help="With --transfer, --silicon or --published-serving: "
                                               "comma-separated systems (aiconfigurator's, or GPU names; default: all)."),
             engine: str | None = typer.Option(None, "--engine", help="With --transfer, --silicon or --published-serving: "
                                               "comma-separated engines (sglang, vllm, trtllm; default: all; --transfer: each at the package's "
                                               "maintained version)."),
             published_serving: bool = typer.Option(False, "--published-serving", help="Instead: the serving projection "
                                                    "against published aggregated-serving points (perfmodel/data/"
                                                    "published_serving.yaml, or --serving-file), uncalibrated: TTFT and "
                                                    "TPOT per point and errors by engine, GPU and model."),
             serving_file: Path | None = typer.Option(None, "--serving-file", help="With --published-serving: the points "
                                                      "from this YAML file (the schema of the shipped one)."),
             model: str | None = typer.Option(None, "--model", help="With --silicon or --published-serving: comma-separated "
                                              "presets or model paths (published names, e.g. dsr1)."),
             way: str = typer.Option("all", "--way", help="With --silicon: local (the local profile through the transfer "
                                     "rules) | imported (the target's per-op rows from the database) | calibrated (imported "
                                     "+ --calibration) | all (comma list allowed; all = local,imported, and calibrated when "
                                     "--calibration is given)."),
             sample: int | None = typer.Option(None, "--sample", help="With --silicon: at most N rows per model x system x "
                                               "engine, spread over concurrency."),
             limit: int | None = typer.Option(None, "--limit", help="With --silicon: the first N rows only."),
             aic_estimator: bool = typer.Option(False, "--aic-estimator", help="With --silicon: also run aiconfigurator's own "
                                                "estimator on the rows (`pip install 'perfmodel\\[aic-dev]'`; seconds a row) and "
                                                "tabulate its errors beside perfmodel's."),
             aic_results: list[Path] | None = typer.Option(None, "--aic-results", help="With --silicon: the estimator's results of "
                                                           "earlier runs (the JSON lines --aic-out writes; repeat the option "
                                                           "for several files of one estimator version), tabulated beside "
                                                           "perfmodel's."),
             aic_out: Path | None = typer.Option(None, "--aic-out", help="With --aic-estimator: append each estimate to this "
                                                 "file as a JSON line as it comes."),
             fmt: Fmt = typer.Option(Fmt.table, "--format", "-f")):
    """Compare projections with measured end-to-end steps and published decode figures (or, --transfer, per-op rows;
    --silicon, serving points; --published-serving, published serving points)."""
    from perfmodel.errors import ProjectionError
    from perfmodel.inputs import finite_number
    from perfmodel.validate import run_validation

    _guard(finite_number, tolerance, "--tolerance", lo=0)
    silicon_only = {"--sample": sample, "--limit": limit, "--aic-results": aic_results or None, "--aic-out": aic_out,
                    "--aic-estimator": aic_estimator or None, "--way": None if way == "all" else way}
    given = [k for k, v in silicon_only.items() if v is not None]
    if not silicon and given:
        fail(f"{', '.join(given)} go with --silicon")
    if serving_file is not None and not published_serving:
        fail("--serving-file goes with --published-serving")
    if model is not None and not (silicon or published_serving):
        fail("--model goes with --silicon or --published-serving")
    if published_serving:
        if silicon or transfer:
            fail("choose one of --transfer, --silicon and --published-serving")
        if calibration is not None:
            fail("--published-serving projects uncalibrated (no --calibration)")
        _validate_published_serving(profile, system, engine, model, serving_file, tolerance, fmt)
        return
    if silicon:
        if transfer:
            fail("choose one of --transfer and --silicon")
        _validate_silicon(profile, system, engine, model, way, sample, limit, calibration, aic_estimator, aic_results, aic_out,
                          tolerance, fmt)
        return
    if transfer:
        _validate_transfer(profile, system, engine, tolerance, fmt)
        return
    if system or engine:
        fail("--system and --engine go with --transfer, --silicon or --published-serving")
    try:
        res = run_validation(profile, published=published, base=base, calibration=calibration)
    except ProjectionError as e:
        fail(str(e))
    from perfmodel import render

    _emit(res, fmt, render.validation_csv, render.validation_table)
    med = res["summary"]["median_abs_err"]
    if med is not None and med > tolerance:
        typer.echo(f"median |error| {med:.1%} > tolerance {tolerance:.1%}", err=True)
        raise typer.Exit(1)


def _validate_transfer(profile: list[str] | None, system: str | None, engine: str | None, tolerance: float, fmt: Fmt) -> None:
    from perfmodel import render
    from perfmodel.errors import ProjectionError
    from perfmodel.transfer import run_transfer

    if profile and len(profile) > 1:
        fail("--transfer predicts from one --profile")
    split = lambda s: [x.strip() for x in s.split(",") if x.strip()] if s else None  # noqa: E731
    try:
        res = run_transfer(profile[0] if profile else None, split(system), split(engine))
    except ProjectionError as e:
        fail(str(e))
    except ValueError as e:
        fail(str(e))
    _emit(res, fmt, render.transfer_csv, render.transfer_table)
    meds = [r["local"]["median_abs_err"] for r in res["rows"] if r["local"]["median_abs_err"] is not None]
    if meds:
        import statistics

        med = statistics.median(meds)
        if med > tolerance:
            typer.echo(f"median over the groups of the local profile's median |error| {med:.1%} > tolerance {tolerance:.1%}",
                       err=True)
            raise typer.Exit(1)


def _validate_silicon(profile, system, engine, model, way, sample, limit, calibration, aic_estimator, aic_results, aic_out,
                      tolerance: float, fmt: Fmt) -> None:
    from perfmodel import aic, render
    from perfmodel.inputs import read_text
    from perfmodel.silicon_validate import WAYS, merge_aic, read_aic, run_silicon

    split = lambda s: [x.strip() for x in s.split(",") if x.strip()] if s else None  # noqa: E731
    if profile and len(profile) > 1:
        fail("--silicon projects from one --profile")
    for flag, v in (("--sample", sample), ("--limit", limit)):
        if v is not None and v < 1:
            fail(f"{flag} {v}: must be >= 1")
    if aic_out is not None and not aic_estimator:
        fail("--aic-out goes with --aic-estimator")
    ways = [w for w in split(way) or []]
    if ways == ["all"]:
        ways = [w for w in WAYS if w != "calibrated" or calibration]
    for w in ways:
        if w not in WAYS:
            fail(f"--way {w}: choose {' | '.join(WAYS)} or all")
    db = _guard(aic.Database.installed)
    if aic_estimator:
        from perfmodel.silicon_validate import aic_version

        if aic_version() is None:
            fail(f"--aic-estimator: aiconfigurator's estimator is not installed: {aic.INSTALL.replace('[aic]', '[aic-dev]')}")
    from perfmodel.silicon_validate import results_version

    texts = [(path, _guard(read_text, path, "--aic-results")) for path in aic_results or []]
    prior = merge_aic(_guard(read_aic, text, str(path)) for path, text in texts) if texts else None
    versions = {results_version(text) for _, text in texts} - {None}
    if len(versions) > 1:
        fail(f"--aic-results: the files come from different estimator versions ({', '.join(sorted(versions))})")
    progress = None
    if fmt == Fmt.table and sys.stderr.isatty():
        progress = lambda what, i, n: typer.echo(f"\r{what}: row {i + 1}/{n}", err=True, nl=False)  # noqa: E731
    res = _guard(run_silicon, ways=ways, systems=split(system), engines=split(engine), models=split(model), sample=sample,
                 limit=limit, profile=profile[0] if profile else None, calibration=calibration, aic_results=prior,
                 aic_live=aic_estimator, aic_out=aic_out, db=db, progress=progress,
                 aic_results_version=next(iter(versions)) if versions else None)
    if progress:
        typer.echo("", err=True)
    _emit(res, fmt, render.silicon_csv, render.silicon_table)


def _validate_published_serving(profile, system, engine, model, serving_file, tolerance: float, fmt: Fmt) -> None:
    from perfmodel import render
    from perfmodel.published_serving import run_published_serving

    split = lambda s: [x.strip() for x in s.split(",") if x.strip()] if s else None  # noqa: E731
    if profile and len(profile) > 1:
        fail("--published-serving projects from one --profile")
    progress = None
    if fmt == Fmt.table and sys.stderr.isatty():
        progress = lambda what, i, n: typer.echo(f"\r{what}: point {i + 1}/{n}", err=True, nl=False)  # noqa: E731
    res = _guard(run_published_serving, path=str(serving_file) if serving_file is not None else None,
                 profile=profile[0] if profile else None, engines=split(engine), systems=split(system), models=split(model),
                 progress=progress)
    if progress:
        typer.echo("", err=True)
    _emit(res, fmt, render.silicon_csv, render.published_serving_table)
    overall = next((s for s in res["summary"] if s["by"] == "overall"), None)
    med = overall["tpot"]["median_abs"] if overall else None
    if med is not None and med > tolerance:
        typer.echo(f"TPOT median |error| {med:.1%} > tolerance {tolerance:.1%}", err=True)
        raise typer.Exit(1)


def _schemas() -> dict:
    from perfmodel.model.result import Projection
    from perfmodel.profile import Profile
    from perfmodel.scenario import request_schema
    from perfmodel.specs.schema import GpuSpec, InterconnectSpec, MemoryKinds, ModelSpec

    return {"gpu": GpuSpec.model_json_schema, "link": InterconnectSpec.model_json_schema,
            "model": ModelSpec.model_json_schema, "profile": Profile.model_json_schema,
            "memory-kinds": MemoryKinds.model_json_schema, "request": request_schema,
            "projection": Projection.model_json_schema,
            "calibration-input": _calibrate_schema("CalibrationInput"), "calibration": _calibrate_schema("CalibrationResult")}


def _calibrate_schema(name: str):
    def schema():
        from perfmodel import calibrate

        return getattr(calibrate, name).model_json_schema()
    return schema


@app.command()
@scenario_options(only=("target", "gpus", "model", "parallel", "context", "spec", "budget", "graphs"), optional=True,
                  help_prefix="With --from-*: ")
def calibrate(opts: ScenarioOptions,
              observed: str | None = typer.Argument(None, help="OBSERVED.yaml: the figures your engine reached "
                                                                 "(`perfmodel schema calibration-input`); bench files add to it."),
              out: Path = typer.Option(Path("calib.json"), "--out", "-o", help="Calibration JSON to write "
                                       "(`perfmodel schema calibration`); `project/report/validate --calibration` read it."),
              profile: str | None = typer.Option(None, "--profile", help="Profile to fit against (default: the embedded one)."),
              from_vllm: list[str] | None = typer.Option(None, "--from-vllm", help="A `vllm bench serve` result: --save-result "
                                                         "JSON or an --append-result sweep (JSON lines: every record); repeatable."),
              from_sglang: list[str] | None = typer.Option(None, "--from-sglang", help="An SGLang `bench_serving` output (JSON / "
                                                           "JSON lines: every record); repeatable."),
              engine: str | None = typer.Option(None, "--engine", help="With --from-*: the engine and its kernels, free text."),
              concurrency: int | None = typer.Option(None, "--concurrency", help="With --from-*: for records without "
                                                                                 "max_concurrency."),
              fmt: Fmt = typer.Option(Fmt.table, "--format", "-f")):
    """Fit the model to figures from your serving engine (both directions), with leave-one-out errors and what the points
    cannot tell apart."""
    from perfmodel.calibrate import CalibrationError, fit, from_bench_files, load_input, write_result
    from perfmodel.request import ProjectionError, resolve_profile

    files = [("vllm", f) for f in from_vllm or []] + [("sglang", f) for f in from_sglang or []]
    if not observed and not files:
        fail("give OBSERVED.yaml, --from-vllm FILE or --from-sglang FILE (any of them, together)")
    try:
        base = load_input(observed) if observed else None
        if files:
            setup = {"engine": engine, "concurrency": concurrency, "target": None, "model": None, **opts.single()}
            inp = from_bench_files(files, setup, base)
        else:
            inp = base
        prof = resolve_profile(profile)
        try:
            res = fit(inp, prof, profile or prof.label)
        except CalibrationError as e:  # a point of OBSERVED.yaml (they come first): name the file
            i = re.match(r"point (\d+) ", str(e))
            raise CalibrationError(f"calibration input {observed}: {e}" if i and base and int(i[1]) < len(base.points)
                                   else str(e)) from None
        write_result(res, out, inputs=[observed, *(f for _, f in files), _profile_file(profile)])
    except (CalibrationError, ProjectionError) as e:
        fail(str(e))
    from perfmodel import render

    _emit(res, fmt, render.calibration_csv, render.calibration_table)
    typer.echo(f"calibration written to {out}", err=True)


def _profile_file(profile: str | None) -> Path | None:
    """The file a --profile argument reads (a path, a shipped name, none: the embedded one)."""
    from perfmodel.request import embedded_profile_path, profile_path

    return None if profile == "spec" else profile_path(profile) if profile else embedded_profile_path()


@app.command()
def schema(kind: str = typer.Argument("gpu", help="gpu | link | model | profile | memory-kinds | request | projection | "
                                                                 "calibration-input | calibration")):
    """Print the JSON Schema for writing your own YAML, reading profiles, or reading projections."""
    kinds = _schemas()
    if kind not in kinds:
        fail(f"unknown schema '{kind}'; choose one of: {', '.join(kinds)}")
    with _stdout_may_close():
        typer.echo(json.dumps(kinds[kind](), indent=1))


def _spec_call(fn, *a):
    from perfmodel.specs.registry import SpecError

    try:
        return fn(*a)
    except SpecError as e:
        fail(str(e))


@hw_app.command("list")
def hw_list(fmt: Fmt = typer.Option(Fmt.table, "--format", "-f")):
    """List GPUs and interconnects."""
    from perfmodel import render
    from perfmodel.specs import registry

    gpus = [_spec_call(registry.load_gpu, n) for n in registry.list_gpus()]
    links = [_spec_call(registry.load_link, n) for n in registry.list_links()]
    _emit({"gpus": gpus, "links": links}, fmt, render.hw_csv, render.hw_tables)


@hw_app.command("show")
def hw_show(name: str, fmt: Fmt = typer.Option(Fmt.table, "--format", "-f")):
    """Show one GPU or interconnect, with the source of every number."""
    from perfmodel import render
    from perfmodel.specs import registry

    if name in registry.list_links():
        spec = _spec_call(registry.load_link, name)
    else:
        spec = _spec_call(registry.load_gpu, name)
    _emit(spec, fmt, render.spec_csv, render.spec_table)


@models_app.command("list")
def models_list(fmt: Fmt = typer.Option(Fmt.table, "--format", "-f")):
    """List model presets."""
    from perfmodel import render
    from perfmodel.specs import registry

    _emit([_spec_call(registry.load_model, n) for n in registry.list_models()], fmt, render.models_csv,
          render.model_table)


@models_app.command("show")
def models_show(name: str, fmt: Fmt = typer.Option(Fmt.table, "--format", "-f")):
    """Show one model preset and its parameter counts."""
    from perfmodel import render
    from perfmodel.specs import registry

    m = _spec_call(registry.load_model, name)
    _emit(m, fmt, render.spec_csv, render.model_show)


@models_app.command("import")
def models_import(config: Path = typer.Argument(..., help="A HuggingFace config.json."),
                  name: str | None = typer.Option(None, "--name", help="Model name (default: from the config or folder)."),
                  out: Path | None = typer.Option(None, "--out", "-o", help="YAML file to write (default: print it).")):
    """Write a model YAML from a HuggingFace config.json (Llama, Qwen, Mixtral, DeepSeek-V3/Kimi-K2, gpt-oss)."""
    from perfmodel.specs import hf

    text = hf.to_yaml(_spec_call(hf.import_hf_config, config, name))
    if out is None:
        with _stdout_may_close():
            typer.echo(text, nl=False)
        return
    from perfmodel.outputs import write_file

    typer.echo(str(_guard(write_file, out, text, inputs=[config])))


@profile_app.command("import-aic")
def profile_import_aic(system: str | None = typer.Option(None, "--system", help="aiconfigurator's system name, e.g. b300_sxm "
                                                          "(--list prints them)."),
                       engine: str | None = typer.Option(None, "--engine", help="ENGINE[@VERSION]: sglang, vllm or trtllm, e.g. "
                                                          "sglang@0.5.14 (default version: the package's maintained one)."),
                       out: Path | None = typer.Option(None, "--out", "-o", help="Profile JSON to write."),
                       local: str | None = typer.Option(None, "--fallback-profile", help="The measured profile whose laws, carried "
                                                        "to the system's GPU, price what the database lacks (default: the "
                                                        "embedded one)."),
                       list_: bool = typer.Option(False, "--list", help="Print the systems, engines and versions the installed "
                                                  "package holds, and which tables each has."),
                       fmt: Fmt = typer.Option(Fmt.table, "--format", "-f", help="For --list.")):
    """Import aiconfigurator's per-op measurements of a system and engine as a profile (`pip install 'perfmodel\\[aic]'`)."""
    from perfmodel import aic

    db = _guard(aic.Database.installed)
    if list_:
        from perfmodel import render

        _emit(aic.catalogue(db), fmt, render.aic_catalogue_csv, lambda rows: render.aic_catalogue_table(rows, db.version))
        return
    missing = [f for f, v in (("--system", system), ("--engine", engine), ("--out", out)) if v is None]
    if missing:
        fail(f"profile import-aic needs {', '.join(missing)} (or --list)")
    from perfmodel.profile import save_profile
    from perfmodel.request import ProjectionError, resolve_profile

    try:
        base = resolve_profile(local)
    except ProjectionError as e:
        fail(f"--fallback-profile: {e}")
    if base.provenance.kind != "measured" or base.provenance.imported is not None:
        fail(f"--fallback-profile {local}: a profile measured by `perfmodel measure` is needed (got {base.label})")
    command = "perfmodel profile import-aic " + " ".join(sys.argv[sys.argv.index("import-aic") + 1:] if "import-aic" in sys.argv else [])
    prof = _guard(aic.import_profile, db, system, engine, base, command=command)
    _guard(save_profile, prof.model_dump(mode="json", exclude_none=True), out, inputs=[_profile_file(local)])
    im = prof.provenance.imported
    typer.echo(f"{out}: {im.engine} {im.engine_version} on {im.system} ({prof.provenance.gpu_name}, GPU spec {prof.provenance.gpu_spec}) "
               f"from {im.database} {im.database_version}")
    for cls, f in prof.fits.items():
        typer.echo(f"  {cls:<21} imported: {im.dtypes[cls]} rows of {im.tables[cls]} ({', '.join(im.kernel_sources[cls])}); "
                   f"{f.n_points} fitted, rms {f.rmse_rel:.0%}")
    for c in prof.collectives:
        size = f", messages above {c.min_bytes / 2**20:g} MB" if c.min_bytes else ""
        typer.echo(f"  {'all_reduce':<21} imported: {c.n_gpus} GPUs, {'graph' if c.graph else 'eager'}{size}: latency {c.latency_us:.1f} us, "
                   f"rms {c.rmse_rel:.0%} ({im.tables['all_reduce']})")
    for cls in im.lacks:
        typer.echo(f"  {cls:<21} not in the database: priced by the fallback profile's law carried to {prof.provenance.gpu_spec} "
                   f"by the transfer rules ({base.label})")
    typer.echo(f"  host and launch overheads, tree building: from the fallback profile ({base.label})")
    for b, r in prof.benches.items():
        ep = sum("ep" in s.shape for s in r.samples)
        typer.echo(f"  {len(r.samples)} {b} samples kept for lookup" + (
            f" ({ep} of them expert-parallel: the busiest GPU under {aic.EP_DISTRIBUTION} routing, which prices "
            "an expert-parallel layout's experts)" if ep else ""))


def main() -> None:
    """Console entry point (`perfmodel`): the one place standard output is set up and its failures
    handled (perfmodel/outputs.py): a closed or full stdout is one line on stderr and exit 1, a
    reader that stops early (`| head`) ends the command quietly with 0, and a stdout that cannot
    encode the tables' characters gets them in ASCII."""
    from perfmodel.outputs import StdoutError, prepare_stdio, quiet_stdout, stdout_failed

    prepare_stdio()
    try:
        try:
            app()
        finally:
            sys.stdout.flush()  # the output reaches its file here, where its failure is handled
    except BrokenPipeError:
        quiet_stdout()
        sys.exit(0)
    except StdoutError as e:
        sys.exit(stdout_failed(e))


if __name__ == "__main__":  # pragma: no cover
    main()
