"""`perfmodel` command line. Heavy modules (torch, scipy, matplotlib) are imported lazily so
that `perfmodel --help` and `perfmodel project` start fast on a laptop."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Measure decode kernels here, project LLM decode throughput there, and explain the bottleneck.")
hw_app = typer.Typer(no_args_is_help=True, help="Hardware specs (hwspecs/).")
models_app = typer.Typer(no_args_is_help=True, help="Model presets.")
app.add_typer(hw_app, name="hw")
app.add_typer(models_app, name="models")


class Fmt(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


class Par(str, Enum):
    tp = "tp"
    ep = "ep"
    tp_attn_ep_moe = "tp-attn-ep-moe"


class Spec(str, Enum):
    none = "none"
    chain = "chain"
    ddtree = "ddtree"


class TreeImpl(str, Enum):
    cpu = "cpu"
    gpu = "gpu"


def fail(msg: str) -> None:
    """One clear line on stderr, exit code 2."""
    typer.echo(f"perfmodel: {msg}", err=True)
    raise typer.Exit(2)


def _ints(s: str, flag: str) -> list[int]:
    try:
        out = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        fail(f"{flag} '{s}': expected comma-separated integers like 1,8,32,128")
    if not out or any(x < 1 for x in out):
        fail(f"{flag} '{s}': values must be positive integers")
    return out


def _budget(s: str):
    if s == "auto":
        return "auto"
    try:
        b = int(s)
    except ValueError:
        fail(f"--budget '{s}': expected a positive integer or 'auto'")
    if b < 1:
        fail(f"--budget '{s}': must be ≥ 1")
    return b


def _request(target, gpus, model, parallel, concurrency, context, spec, budget, acceptance, graphs, tree_build,
             profile, link, host_cpu_factor, observed, hw_file, model_file):
    from perfmodel.model.project import Request

    return Request(target=target, gpus=gpus, model=model, parallel=parallel.value,
                   concurrency=_ints(concurrency, "--concurrency"), context=context, spec=spec.value,
                   budget=_budget(budget), acceptance=acceptance, graphs=graphs, tree_build=tree_build.value,
                   profile=profile, link=link, host_cpu_factor=host_cpu_factor, observed=observed,
                   hw_file=hw_file, model_file=model_file)


# Shared projection options (typer reads defaults from these).
O_TARGET = typer.Option("b300", "--target", "-t", help="GPU name or alias (perfmodel hw list).")
O_GPUS = typer.Option(8, "--gpus", "-n", help="GPUs in the system.")
O_MODEL = typer.Option("kimi-k2.6", "--model", "-m", help="Model preset (perfmodel models list).")
O_PAR = typer.Option(Par.tp, "--parallel", help="tp | ep | tp-attn-ep-moe.")
O_CONC = typer.Option("1,8,32,128", "--concurrency", "-c", help="Comma-separated concurrencies.")
O_CTX = typer.Option(8192, "--context", help="Context length (tokens) of each sequence.")
O_SPEC = typer.Option(Spec.none, "--spec", help="Speculative decoding: none | chain | ddtree.")
O_BUDGET = typer.Option("auto", "--budget", help="Tree budget B (verify B+1 tokens) or 'auto'.")
O_ACC = typer.Option("dflash_default", "--acceptance",
                     help="Acceptance: preset name, scalar α ('0.8'), 'table:16=6.1,64=7.8' or 'file:calib.json'.")
O_GRAPHS = typer.Option(True, "--graphs/--no-graphs", help="CUDA-graph replay (default) or eager launches.")
O_TREE = typer.Option(TreeImpl.gpu, "--tree-build", help="Where DDTree trees are built: gpu | cpu.")
O_PROFILE = typer.Option(None, "--profile", help="Profile JSON (default: the embedded measured H200 profile; 'spec' = spec-derived).")
O_LINK = typer.Option(None, "--link", help="Interconnect (hwspecs/links); default: the GPU's own.")
O_HOST = typer.Option(1.0, "--host-cpu-factor", help="Host CPU time relative to the profile's host.")
O_OBS = typer.Option(None, "--observed", help="Known figure on a source machine, e.g. 'rtx-pro-6000,tp8,c=1,98tok/s'.")
O_HWF = typer.Option(None, "--hw-file", help="Your own GPU YAML (overrides --target).")
O_MF = typer.Option(None, "--model-file", help="Your own model YAML (overrides --model).")


def _emit(res: dict, fmt: Fmt, to_csv, to_table) -> None:
    """A result as JSON, as CSV text from `to_csv`, or as the rich table `to_table` prints."""
    if fmt == Fmt.json:
        typer.echo(json.dumps(res, indent=1))
    elif fmt == Fmt.csv:
        typer.echo(to_csv(res), nl=False)
    else:
        to_table(res)


@app.command()
def project(target: str = O_TARGET, gpus: int = O_GPUS, model: str = O_MODEL, parallel: Par = O_PAR,
            concurrency: str = O_CONC, context: int = O_CTX, spec: Spec = O_SPEC, budget: str = O_BUDGET,
            acceptance: str = O_ACC, graphs: bool = O_GRAPHS, tree_build: TreeImpl = O_TREE,
            profile: str | None = O_PROFILE, link: str | None = O_LINK, host_cpu_factor: float = O_HOST,
            observed: str | None = O_OBS, hw_file: str | None = O_HWF, model_file: str | None = O_MF,
            sensitivity: bool = typer.Option(False, "--sensitivity", help="Rank inputs by how tok/s moves for ±20%."),
            fmt: Fmt = typer.Option(Fmt.table, "--format", "-f")):
    """Project decode throughput per concurrency on a target system."""
    from perfmodel.model.project import ProjectionError
    from perfmodel.model.project import project as run_projection

    req = _request(target, gpus, model, parallel, concurrency, context, spec, budget, acceptance, graphs,
                   tree_build, profile, link, host_cpu_factor, observed, hw_file, model_file)
    try:
        res = run_projection(req)
        if sensitivity:
            from perfmodel.model.sensitivity import sensitivity as sens

            res["sensitivity"] = sens(req)
    except ProjectionError as e:
        fail(str(e))
    from perfmodel import render

    _emit(res, fmt, render.projection_csv, render.projection_table)


@app.command()
def measure(out: Path = typer.Option(Path("profile.json"), "--out", "-o", help="Profile JSON to write."),
            only: str | None = typer.Option(
                None, "--only", help="Comma-separated benches (ceilings,moe,attention,gemm,elementwise,treebuild,dispatch,collectives,e2e)."),
            quick: bool = typer.Option(False, "--quick", help="Fewer sizes and samples."),
            resume: bool = typer.Option(False, "--resume", help="Complete an interrupted profile.")):
    """Run microbenchmarks on the local GPU and write a profile (needs CUDA)."""
    try:
        from perfmodel.measure.runner import run_measure
    except ImportError as e:
        fail(f"measure needs torch and triton ({e.name or e} is missing)")
    names = [x.strip() for x in only.split(",") if x.strip()] if only else None
    raise typer.Exit(run_measure(out, only=names, quick=quick, resume=resume))


@app.command()
def report(target: str = O_TARGET, gpus: int = O_GPUS, model: str = O_MODEL, parallel: Par = O_PAR,
           concurrency: str = O_CONC, context: int = O_CTX, spec: Spec = typer.Option(Spec.ddtree, "--spec"),
           budget: str = O_BUDGET, acceptance: str = O_ACC, graphs: bool = O_GRAPHS, tree_build: TreeImpl = O_TREE,
           profile: str | None = O_PROFILE, link: str | None = O_LINK, host_cpu_factor: float = O_HOST,
           observed: str | None = O_OBS, hw_file: str | None = O_HWF, model_file: str | None = O_MF,
           source: str = typer.Option("rtx-pro-6000", "--source", help="The machine the user has today, compared side by side."),
           out: Path = typer.Option(Path("reports/out"), "--out", "-o", help="Folder for the markdown, JSON and PNGs.")):
    """Write a findings document (markdown + PNG figures + JSON) for a target."""
    from perfmodel.model.project import ProjectionError

    req = _request(target, gpus, model, parallel, concurrency, context, spec, budget, acceptance, graphs,
                   tree_build, profile, link, host_cpu_factor, observed, hw_file, model_file)
    try:
        from perfmodel.reports.findings import ReportError, write_report
    except ImportError as e:
        fail(f"report needs matplotlib ({e.name or e} is missing)")
    try:
        path = write_report(req, out, source=source)
    except (ProjectionError, ReportError) as e:
        fail(str(e))
    typer.echo(str(path))


@app.command()
def validate(profile: list[str] | None = typer.Option(None, "--profile", help="Profiles whose e2e points to check (default: the shipped ones)."),
             published: bool = typer.Option(True, "--published/--no-published", help="Also check the shipped table of published figures."),
             tolerance: float = typer.Option(0.25, "--tolerance", help="Exit 1 if the median |error| exceeds this."),
             base: str | None = typer.Option(None, "--base", help="Profile to predict from (default: each checked profile predicts its own e2e "
                                             "points; the published figures use the embedded profile)."),
             fmt: Fmt = typer.Option(Fmt.table, "--format", "-f")):
    """Compare projections with measured end-to-end steps and published decode figures."""
    from perfmodel.model.project import ProjectionError
    from perfmodel.validate import run_validation

    try:
        res = run_validation(profile, published=published, base=base)
    except ProjectionError as e:
        fail(str(e))
    from perfmodel import render

    _emit(res, fmt, render.validation_csv, render.validation_table)
    med = res["summary"]["median_abs_err"]
    if med is not None and med > tolerance:
        typer.echo(f"median |error| {med:.1%} > tolerance {tolerance:.1%}", err=True)
        raise typer.Exit(1)


@app.command()
def schema(kind: str = typer.Argument("gpu", help="gpu | link | model | profile | memory-kinds")):
    """Print the JSON Schema for writing your own YAML (or reading profiles)."""
    from perfmodel.profile import Profile
    from perfmodel.specs.schema import GpuSpec, InterconnectSpec, MemoryKinds, ModelSpec

    kinds = {"gpu": GpuSpec, "link": InterconnectSpec, "model": ModelSpec, "profile": Profile, "memory-kinds": MemoryKinds}
    if kind not in kinds:
        fail(f"unknown schema '{kind}'; choose one of: {', '.join(kinds)}")
    typer.echo(json.dumps(kinds[kind].model_json_schema(), indent=1))


def _spec_call(fn, *a):
    from perfmodel.specs.registry import SpecError

    try:
        return fn(*a)
    except SpecError as e:
        fail(str(e))


@hw_app.command("list")
def hw_list():
    """List GPUs and interconnects."""
    from perfmodel import render
    from perfmodel.specs import registry

    render.gpu_table([_spec_call(registry.load_gpu, n) for n in registry.list_gpus()])
    render.link_table([_spec_call(registry.load_link, n) for n in registry.list_links()])


@hw_app.command("show")
def hw_show(name: str, fmt: Fmt = typer.Option(Fmt.table, "--format", "-f")):
    """Show one GPU or interconnect, with the source of every number."""
    from perfmodel import render
    from perfmodel.specs import registry

    if name in registry.list_links():
        spec = _spec_call(registry.load_link, name)
    else:
        spec = _spec_call(registry.load_gpu, name)
    if fmt == Fmt.json:
        typer.echo(spec.model_dump_json(indent=1))
    else:
        render.spec_tree(spec)


@models_app.command("list")
def models_list():
    """List model presets."""
    from perfmodel import render
    from perfmodel.specs import registry

    render.model_table([_spec_call(registry.load_model, n) for n in registry.list_models()])


@models_app.command("show")
def models_show(name: str, fmt: Fmt = typer.Option(Fmt.table, "--format", "-f")):
    """Show one model preset and its parameter counts."""
    from perfmodel import render
    from perfmodel.specs import registry

    m = _spec_call(registry.load_model, name)
    if fmt == Fmt.json:
        typer.echo(m.model_dump_json(indent=1))
    else:
        render.spec_tree(m)
        render.param_table(m)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
