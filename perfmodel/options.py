"""One typed options object for the CLI commands that project (`project`, `report`, `compare`).

`ProjectionOptions` holds the options as typed on the command line; `@projection_options` adds
them to a typer command, which then receives one `opts` argument instead of 18 parameters.
`--target`, `--gpus` and `--parallel` take comma lists; `project` and `report` accept one value
each (`opts.request()`), `compare` runs the cross product (`opts.requests()`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import typing
from typing import Optional

import typer

from perfmodel.request import DEFAULT_PROFILE, ProjectionError, Request, make_request, shipped_profile_names


def _split(s: str) -> list[str]:
    return [x.strip() for x in str(s).split(",") if x.strip()]


def _ints(s: str, flag: str) -> list[int]:
    try:
        out = [int(x) for x in _split(s)]
    except ValueError:
        raise ProjectionError(f"{flag} '{s}': expected comma-separated integers like 1,8,32,128") from None
    if not out or any(x < 1 for x in out):
        raise ProjectionError(f"{flag} '{s}': values must be positive integers")
    return out


def _budget(s: str):
    if s == "auto":
        return "auto"
    try:
        b = int(s)
    except ValueError:
        raise ProjectionError(f"--budget '{s}': expected a positive integer or 'auto'") from None
    if b < 1:
        raise ProjectionError(f"--budget '{s}': must be ≥ 1")
    return b


def _opt(default, *flags, help: str):
    return dataclasses.field(default=default, metadata={"option": typer.Option(default, *flags, help=help)})


@dataclasses.dataclass(frozen=True)
class ProjectionOptions:
    """The projection options of `project`, `report` and `compare` (and later `calibrate`)."""

    target: str = _opt("b300", "--target", "-t", help="GPU name or alias (perfmodel hw list); compare: a comma list.")
    gpus: str = _opt("8", "--gpus", "-n", help="GPUs in the system; compare: a comma list like 4,8.")
    model: str = _opt("kimi-k2.6", "--model", "-m", help="Model preset (perfmodel models list).")
    parallel: str = _opt("tp", "--parallel", help="tp | ep | tp-attn-ep-moe; compare: a comma list.")
    concurrency: str = _opt("1,8,32,128", "--concurrency", "-c", help="Comma-separated concurrencies.")
    context: int = _opt(8192, "--context", help="Context length (tokens) of each sequence.")
    spec: str = _opt("none", "--spec", help="Speculative decoding: none | chain | ddtree.")
    budget: str = _opt("auto", "--budget", help="Tree budget B (verify B+1 tokens) or 'auto'.")
    acceptance: str = _opt("dflash_default", "--acceptance",
                           help="Acceptance: preset name, scalar α ('0.8'), 'table:16=6.1,64=7.8' or 'file:calib.json'.")
    graphs: bool = _opt(True, "--graphs/--no-graphs", help="CUDA-graph replay (default) or eager launches.")
    tree_build: str = _opt("gpu", "--tree-build", help="Where DDTree trees are built: gpu | cpu.")
    profile: str | None = _opt(None, "--profile",
                                  help="Profile JSON, or the name of a shipped profile ("
                                       + ", ".join(shipped_profile_names()) + f"; default: {DEFAULT_PROFILE[:-5]}, the "
                                       "embedded measured H200 profile); 'spec' = spec-derived.")
    link: str | None = _opt(None, "--link", help="Interconnect (hwspecs/links); default: the GPU's own.")
    host_cpu_factor: float = _opt(1.0, "--host-cpu-factor", help="Host CPU time relative to the profile's host.")
    observed: str | None = _opt(None, "--observed",
                                   help="Known figure on a source machine, e.g. 'rtx-pro-6000,tp8,c=1,98tok/s'.")
    hw_file: str | None = _opt(None, "--hw-file", help="Your own GPU YAML (overrides --target).")
    model_file: str | None = _opt(None, "--model-file",
                                     help="Your own model YAML, or a HuggingFace config.json (overrides --model).")
    calibration: str | None = _opt(None, "--calibration", help="Calibration JSON written by `perfmodel calibrate`.")
    kernels: str = _opt("perfmodel", "--kernels", help="Kernel set priced: perfmodel (its own kernels) | torch (PyTorch's "
                                                      "native ops: SDPA, torch._grouped_mm, unfused norms).")

    def _request(self, target: str, gpus: int, parallel: str) -> Request:
        return make_request(
            target=target, gpus=gpus, model=self.model, parallel=parallel,
            concurrency=_ints(self.concurrency, "--concurrency"), context=self.context, spec=self.spec,
            budget=_budget(self.budget), acceptance=self.acceptance, graphs=self.graphs, tree_build=self.tree_build,
            profile=self.profile, link=self.link, host_cpu_factor=self.host_cpu_factor, observed=self.observed,
            hw_file=self.hw_file, model_file=self.model_file, calibration=self.calibration, kernels=self.kernels)

    def requests(self) -> list[Request]:
        """The cross product target × gpus × parallel, in that order."""
        targets = _split(self.target) or [self.target]
        return [self._request(t, n, p) for t, n, p in
                itertools.product(targets, _ints(self.gpus, "--gpus"), _split(self.parallel) or [self.parallel])]

    def request(self) -> Request:
        """The one request of `project`/`report` (a comma list here is an error)."""
        for flag, v in (("--target", self.target), ("--gpus", self.gpus), ("--parallel", self.parallel)):
            if len(_split(v)) > 1:
                raise ProjectionError(f"{flag} '{v}': one value here; `perfmodel compare` takes lists")
        return self.requests()[0]


def projection_options(fn):
    """Give a typer command the ProjectionOptions as options; it receives them as `opts`."""
    sig = inspect.signature(fn)
    resolved = typing.get_type_hints(fn)
    rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=resolved.get(name, p.annotation))
            for name, p in sig.parameters.items() if name != "opts"]
    fields = dataclasses.fields(ProjectionOptions)
    hints = {f.name: f.type for f in fields}
    types = {"str": str, "int": int, "bool": bool, "float": float, "str | None": Optional[str]}  # noqa: UP045 (typer needs a runtime type)
    params = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.metadata["option"],
                                annotation=types[hints[f.name]]) for f in fields]

    @functools.wraps(fn)
    def wrapper(**kw):
        opts = ProjectionOptions(**{f.name: kw.pop(f.name) for f in fields})
        return fn(opts=opts, **kw)

    wrapper.__signature__ = sig.replace(parameters=params + rest, return_annotation=inspect.Signature.empty)
    wrapper.__annotations__ = {p.name: p.annotation for p in wrapper.__signature__.parameters.values()}
    del wrapper.__wrapped__
    return wrapper
