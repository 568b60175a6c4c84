"""`perfmodel compare`: the cross product of targets × GPU counts × layouts, in one table.

Specs and profiles are cached (perfmodel.specs.registry, perfmodel.request), and the profile's
self-check runs once (perfmodel.model.project), so a sweep costs its arithmetic only.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from perfmodel.api import check_inputs, projector
from perfmodel.errors import ProjectionError
from perfmodel.model.result import Projection
from perfmodel.scenario import Request
from perfmodel.specs import registry


class CompareError(ValueError):
    """A name in the sweep is unknown (one line; exit 2)."""


class CompareRow(BaseModel):
    """One configuration at one concurrency; `error` says why a configuration has no numbers."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    config: str
    target: str
    gpus: int
    parallel: str
    concurrency: int | None
    tokens_per_s_per_stream: float | None = None
    tokens_per_s_per_gpu: float | None = None
    tokens_per_s: float | None = None
    tokens_per_s_per_stream_lo: float | None = None
    tokens_per_s_per_stream_hi: float | None = None
    step_ms: float | None = None
    tpot_ms: float | None = None
    budget: int | None = None
    bottleneck: str | None = None
    ttft_ms: float | None = None  # with --isl/--osl: whole requests (median TTFT, per-user and per-GPU tok/s served)
    tokens_per_s_per_user: float | None = None
    served_tokens_per_s_per_gpu: float | None = None
    error: str | None = None


class Comparison(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str
    context: int
    spec: str
    workload: str | None = None  # with --isl/--osl or --lengths-file: the requests served
    configs: list[str]
    rows: list[CompareRow]
    projections: dict[str, Projection]  # configuration -> its full projection (those that ran)

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")


def config_label(req: Request) -> str:
    return f"{req.gpus}× {req.target_name} {req.parallel}"


def _rows(label: str, req: Request, proj: Projection) -> list[CompareRow]:
    base = {"config": label, "target": proj.target.gpu, "gpus": req.gpus, "parallel": req.parallel}
    rows = []
    for p in proj.points:
        if not p.fits_in_memory:
            rows.append(CompareRow(**base, concurrency=p.concurrency, budget=p.budget, error=p.note))
            continue
        lo, hi = p.interval.tokens_per_s_per_stream
        rows.append(CompareRow(**base, concurrency=p.concurrency, tokens_per_s_per_stream=p.tokens_per_s_per_stream,
                               tokens_per_s_per_gpu=p.tokens_per_s_per_gpu, tokens_per_s=p.tokens_per_s,
                               tokens_per_s_per_stream_lo=lo, tokens_per_s_per_stream_hi=hi, step_ms=p.step_ms,
                               tpot_ms=p.tpot_ms, budget=p.budget, bottleneck=p.bottleneck,
                               **({"ttft_ms": p.serving.ttft_ms["median"], "tokens_per_s_per_user": p.serving.tokens_per_s_per_user,
                                   "served_tokens_per_s_per_gpu": p.serving.tokens_per_s_per_gpu} if p.serving else {})))
    return rows


def run_compare(reqs: list[Request]) -> Comparison:
    """Project every request; a configuration that cannot run is listed with its reason."""
    for req in reqs:  # a misspelt name or a bad file is a user error for the whole sweep, not a row
        try:
            registry.load_gpu(req.target) if isinstance(req.target, str) and not req.hw_file else None
        except registry.SpecError as e:
            raise CompareError(str(e)) from None
    if reqs:
        check_inputs(reqs[0])  # the files are the same in every configuration of the grid
    rows: list[CompareRow] = []
    projections: dict[str, Projection] = {}
    labels = []
    for req in reqs:
        label = config_label(req)
        labels.append(label)
        try:
            proj = projector(req).projection()
        except ProjectionError as e:
            rows.append(CompareRow(config=label, target=req.target_name, gpus=req.gpus, parallel=req.parallel,
                                   concurrency=None, error=str(e).splitlines()[0]))
            continue
        projections[label] = proj
        rows += _rows(label, req, proj)
    r0 = reqs[0]
    model = next(iter(projections.values())).model if projections else r0.model_name
    workload = (f"ISL/OSL {r0.isl}/{r0.osl}" if r0.isl is not None else
                f"lengths from {r0.lengths_file}" if r0.lengths_file else None)
    return Comparison(model=model, context=r0.context, spec=r0.spec, workload=workload, configs=labels, rows=rows,
                      projections=projections)


def pareto_frontier(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both axes (higher is better), by rising x."""
    front, best_y = [], float("-inf")
    for x, y in sorted(points, key=lambda p: (-p[0], -p[1])):
        if y > best_y:
            front.append((x, y))
            best_y = y
    return front[::-1]


def plot_formats() -> dict[str, str]:
    """The file formats matplotlib writes: {extension: description}."""
    from matplotlib.backend_bases import FigureCanvasBase

    return FigureCanvasBase.get_supported_filetypes()


def pareto_plot(cmp: Comparison, path, fmt: str | None = None) -> None:
    """tok/s per user (x) against tok/s per GPU (y), one curve per configuration, frontier marked;
    with --isl/--osl, those of whole requests served (1000 / mean TPOT, output tok/s per GPU).
    `path`: a file name or a binary file object (the CLI draws into memory and writes the bytes
    with perfmodel.outputs.write_file); `fmt`: the format (default: from the name, else PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6))
    colors = plt.get_cmap("tab20").colors
    every = []
    for i, label in enumerate(cmp.configs):
        pts = [(r.tokens_per_s_per_user, r.served_tokens_per_s_per_gpu, r.concurrency) if r.tokens_per_s_per_user is not None
               else (r.tokens_per_s_per_stream, r.tokens_per_s_per_gpu, r.concurrency)
               for r in cmp.rows if r.config == label and r.error is None]
        if not pts:
            continue
        style = "o-" if label.endswith(" tp") else "s--"
        line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], style, ms=4, lw=1.2, label=label,
                        color=colors[i % len(colors)])
        for x, y, c in pts:
            ax.annotate(f"C={c}", (x, y), textcoords="offset points", xytext=(3, 3), fontsize=6, color=line.get_color())
        every += [(x, y) for x, y, _ in pts]
    front = pareto_frontier(every)
    if front:
        ax.plot([p[0] for p in front], [p[1] for p in front], "k--", lw=1.5, alpha=0.7, label="Pareto frontier",
                drawstyle="steps-pre")
        ax.scatter([p[0] for p in front], [p[1] for p in front], s=70, facecolors="none", edgecolors="k", zorder=3)
    ax.set_xlabel("tok/s per user (per stream)")
    ax.set_ylabel("tok/s per GPU")
    served = next((p for proj in cmp.projections.values() for p in proj.points if p.serving is not None), None)
    what = (f"serving ({served.serving.engine} scheduler), {cmp.workload}" if served is not None
            else f"decode throughput, context {cmp.context}")
    ax.set_title(f"{cmp.model}: {what}, spec {cmp.spec}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format=fmt)
    plt.close(fig)
