"""`perfmodel validate --silicon`: the serving projection against aiconfigurator's measured serving points.

Every aggregated row of the silicon sample that `perfmodel.silicon` expresses is projected as
whole requests under the row's engine scheduler (`perfmodel project --isl --osl --engine`), and
its mean TTFT and mean TPOT compared with the measured ones, three ways of knowing the target:

  local       the local measured profile (default: the embedded H200 one, perfmodel's own kernels)
              carried to the row's GPU by the transfer rules
  imported    the target's per-op rows from aiconfigurator's database (`aic.import_profile`: the
              row's engine at the row's version where the database has it, else the package's
              maintained one; the classes it lacks from the local profile), one import per system
              and engine per run
  calibrated  as imported, through an engine calibration (`--calibration FILE`, or
              `engine=FILE,...` per engine): the file `perfmodel calibrate` writes

Errors are predicted / measured - 1 (+: predicted too slow). Per group (overall, by engine, by
system, by model): the rows, the median and p90 of |error| and the signed median, of TTFT and of
TPOT. aiconfigurator's own estimator (`aiconfigurator.cli.api.cli_estimate`, the call its accuracy
tools make, `perfmodel[aic-dev]`) can be run on the same rows (`run_aic`), or its raw results read
back (`read_aic`); its errors are then tabulated beside perfmodel's on the rows both priced.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from perfmodel import aic, silicon
from perfmodel.errors import ProjectionError
from perfmodel.inputs import InputError, parse_json
from perfmodel.outputs import AtomicText

WAYS = ("local", "imported", "calibrated")
BY = ("overall", "engine", "system", "model")
AIC_MODULE = "aiconfigurator"
AIC_INSTALL = "pip install 'perfmodel[aic-dev]'"


# ------------------------------------------------------------------------------ statistics
def error_stats(errs: Iterable[float]) -> dict:
    """n, median and p90 of |error| (linear interpolation between order statistics, numpy's
    default), and the signed median; None where there are no errors."""
    import numpy as np

    e = [x for x in errs if x is not None and math.isfinite(x)]
    if not e:
        return {"n": 0, "median_abs": None, "p90_abs": None, "signed_median": None}
    a = [abs(x) for x in e]
    return {"n": len(e), "median_abs": statistics.median(a), "p90_abs": float(np.percentile(a, 90)),
            "signed_median": statistics.median(e)}


def _err(pred: float | None, meas: float) -> float | None:
    return None if pred is None else pred / meas - 1.0


def group_of(point: dict, by: str) -> str:
    return "all" if by == "overall" else point[by]


def summarise(points: list[dict], sources: Iterable[str]) -> list[dict]:
    """Per source (a way, or 'aiconfigurator') and group: TTFT and TPOT error statistics over the
    points that source priced."""
    out = []
    for src in sources:
        for by in BY:
            groups: dict[str, list[dict]] = defaultdict(list)
            for p in points:
                if p["predicted"].get(src):
                    groups[group_of(p, by)].append(p)
            for g in sorted(groups):
                ps = groups[g]
                out.append({"source": src, "by": by, "group": g,
                            "ttft": error_stats(_err(p["predicted"][src]["ttft_ms"], p["measured"]["ttft_ms"]) for p in ps),
                            "tpot": error_stats(_err(p["predicted"][src]["tpot_ms"], p["measured"]["tpot_ms"]) for p in ps)})
    return out


def beside(points: list[dict], ways: Iterable[str], other: str = "aiconfigurator") -> list[dict]:
    """Per group, on the rows `other` and each way both priced: both sources' statistics."""
    out = []
    for way in ways:
        both = [p for p in points if p["predicted"].get(way) and p["predicted"].get(other)]
        for row in summarise(both, (way, other)):
            out.append(row | {"way": way})
    return out


# ------------------------------------------------------------------------------ perfmodel's ways
@dataclass
class _Imports:
    """Imported profiles written once per (system, engine, version) into a scratch folder, so the
    request names them by path (profiles are cached by path: each is loaded once)."""

    db: aic.Database
    local: object
    folder: Path

    def __post_init__(self):
        self._paths: dict[tuple, Path | str] = {}

    def version(self, row: silicon.Row) -> str | None:
        vs = self.db.versions(row.system, row.backend)
        return row.backend_version if row.backend_version in vs else self.db.current(row.system, row.backend)

    def path(self, row: silicon.Row) -> Path:
        from perfmodel.profile import save_profile

        version = self.version(row)
        key = (row.system, row.backend, version)
        if key not in self._paths:
            try:
                if version is None:
                    raise aic.AicError(f"{aic.PACKAGE} {self.db.version} has no {row.backend} tables for {row.system}")
                prof = aic.import_profile(self.db, row.system, f"{row.backend}@{version}", self.local)
                p = self.folder / f"{row.system}-{row.backend}-{version}.json"
                save_profile(prof.model_dump(mode="json", exclude_none=True), p)
                self._paths[key] = p
            except (aic.AicError, ProjectionError) as e:
                self._paths[key] = f"no imported profile: {str(e).splitlines()[0]}"
        hit = self._paths[key]
        if isinstance(hit, str):
            raise ProjectionError(hit)
        return hit


def _calibration_for(spec: str | None, engine: str) -> str | None:
    """`--calibration FILE` (every engine) or `vllm=FILE,sglang=FILE` (per engine; others uncalibrated)."""
    if not spec:
        return None
    parts = [x.strip() for x in spec.split(",") if x.strip()]
    if all("=" in x for x in parts):
        table = dict(x.split("=", 1) for x in parts)
        return table.get(engine)
    return spec


def price(e: silicon.Expressed, **req_fields) -> dict:
    """perfmodel's mean TTFT and TPOT of the row (ms), or {'error': one line}."""
    try:
        req = e.request(**req_fields)
    except ValueError as x:  # a pydantic field
        return {"error": str(x).splitlines()[0]}
    return price_request(req)


def price_request(req) -> dict:
    """The serving projection's mean TTFT and TPOT (ms) of a one-concurrency serving `Request`, or
    {'error': one line} (also for `validate --published-serving`)."""
    from perfmodel.api import project

    try:
        pt = project(req).points[0]
    except ValueError as x:  # ProjectionError, a request that does not fit the KV cache
        return {"error": str(x).splitlines()[0]}
    if pt.serving is None:
        return {"error": pt.note or "not served"}
    return {"ttft_ms": pt.serving.ttft_ms["mean"], "tpot_ms": pt.serving.tpot_ms["mean"]}


def price_ways(expressed: list[silicon.Expressed], ways: list[str], *, profile: str | None = None,
               calibration: str | None = None, db: aic.Database | None = None,
               progress: Callable[[str, int, int], None] | None = None) -> tuple[dict[str, dict[str, dict]], dict]:
    """{way: {row id: priced}} and the seconds each way took per row (imports included)."""
    from perfmodel.request import resolve_profile

    out: dict[str, dict[str, dict]] = {}
    timing: dict[str, float] = {}
    need_db = any(w in ("imported", "calibrated") for w in ways)
    db = db or (aic.Database.installed() if need_db else None)
    with tempfile.TemporaryDirectory(prefix="perfmodel-silicon-") as tmp:
        imports = _Imports(db, resolve_profile(profile), Path(tmp)) if need_db else None
        for way in ways:
            t0 = time.perf_counter()
            res: dict[str, dict] = {}
            for i, e in enumerate(expressed):
                if progress:
                    progress(way, i, len(expressed))
                if way == "local":
                    res[e.row.id] = price(e, profile=profile)
                    continue
                try:
                    path = str(imports.path(e.row))
                except ProjectionError as x:
                    res[e.row.id] = {"error": str(x)}
                    continue
                cal = _calibration_for(calibration, e.engine) if way == "calibrated" else None
                if way == "calibrated" and cal is None:
                    res[e.row.id] = {"error": f"no calibration given for {e.engine}"}
                    continue
                res[e.row.id] = price(e, profile=path, calibration=cal)
            out[way] = res
            timing[way] = (time.perf_counter() - t0) / max(len(expressed), 1)
    return out, timing


# ------------------------------------------------------------------------------ aiconfigurator's estimator
def aic_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version(AIC_MODULE)
    except metadata.PackageNotFoundError:
        return None


# Checkpoints whose rows name a Hugging Face repository that aiconfigurator does not ship a config of,
# with the shipped config of the same architecture (aiconfigurator_core/model_configs): Meta's
# Llama 3.1 repositories under their earlier names (meta-llama/Meta-Llama-3.1-*), and NVIDIA's FP8
# copy of the 8B model, whose weight format the row's gemm_quant_mode gives. Offline, the estimator
# cannot fetch the others' config.json (the gated meta-llama repositories need a token online too).
AIC_SHIPPED_CONFIGS = {"meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
                       "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
                       "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B"}


def aic_args(row: silicon.Row) -> dict:
    """The keyword arguments aiconfigurator's accuracy tools pass `cli_estimate` for an agg row
    (tools/accuracy_tracking/run_silicon.py `_estimate_kwargs`): the row's fields as they stand,
    the layout cells that are set; the model as the config aiconfigurator ships of its architecture
    (`AIC_SHIPPED_CONFIGS`)."""
    args = dict(model_path=AIC_SHIPPED_CONFIGS.get(row.model_path, row.model_path), system_name=row.system, mode=row.mode, backend_name=row.backend,
                backend_version=row.backend_version or None, isl=row.isl, osl=row.osl,
                gemm_quant_mode=row.gemm_quant_mode or None, moe_quant_mode=row.moe_quant_mode or None,
                batch_size=row.batch_size, tp_size=row.tp_size, pp_size=row.pp_size, attention_dp_size=row.attention_dp_size)
    if row.moe_tp_size:
        args["moe_tp_size"] = row.moe_tp_size
    if row.moe_ep_size:
        args["moe_ep_size"] = row.moe_ep_size
    return args


def aic_estimate(row: silicon.Row) -> dict:
    """aiconfigurator's SILICON-mode estimate of the row: {'ttft_ms', 'tpot_ms', 'version', 's'} or
    {'error', 's'}. As its tools do, a version the database cannot serve is retried with the
    package's default one (the version used is recorded)."""
    try:
        from aiconfigurator.cli.api import cli_estimate
    except ImportError:
        raise aic.AicError(f"aiconfigurator's estimator is not installed: {AIC_INSTALL}") from None
    args = aic_args(row)
    t0 = time.perf_counter()
    quiet = [logging.getLogger(n) for n in ("aiconfigurator", "aiconfigurator_core")]
    levels = [lg.level for lg in quiet]
    try:
        for lg in quiet:
            lg.setLevel(logging.ERROR)
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                r = cli_estimate(**args)
            except ValueError:
                if args["backend_version"] is None:
                    raise
                args["backend_version"] = None
                r = cli_estimate(**args)
        return {"ttft_ms": float(r.ttft), "tpot_ms": float(r.tpot), "version": str(r.backend_version),
                "s": time.perf_counter() - t0} | ({"model_config": args["model_path"]} if args["model_path"] != row.model_path else {})
    except Exception as x:  # the estimator's own refusals (OOM, missing data, unsupported config), kept as its result
        return {"error": f"{type(x).__name__}: {str(x).splitlines()[0] if str(x) else ''}"[:300], "s": time.perf_counter() - t0}
    finally:
        for lg, lv in zip(quiet, levels):
            lg.setLevel(lv)


def run_aic(rows: Iterable[silicon.Row], out: Path | None = None,
            progress: Callable[[str, int, int], None] | None = None) -> dict[str, dict]:
    """The estimator on each row: {row id: result}; with `out`, each result is appended to it as a
    JSON line as it comes (a run can be stopped and its lines read back with `read_aic`)."""
    rows = list(rows)
    res = {}
    log = AtomicText(out, append=True, what="--aic-out") if out is not None else None
    for i, r in enumerate(rows):
        if progress:
            progress("aiconfigurator", i, len(rows))
        res[r.id] = aic_estimate(r)
        if log is not None:
            log.write(json.dumps({"id": r.id} | res[r.id]) + "\n")
            log.publish(force=True)
    return res


def results_version(text: str) -> str | None:
    """The estimator's version a `run_aic` results file names in its '# {...}' header line (None
    without one): the version that priced the rows, whether or not it is installed here."""
    first = text.lstrip().partition("\n")[0]
    if not first.startswith("#"):
        return None
    try:
        head = parse_json(first[1:].strip(), "--aic-results header", finite=False)
    except InputError:
        return None
    v = head.get("aiconfigurator") if isinstance(head, dict) else None
    return v if isinstance(v, str) else None


def read_aic(text: str, source: str = "--aic-results") -> dict[str, dict]:
    """Results written by `run_aic` (JSON lines; lines that are not records, such as a header
    starting with '#', are skipped); the estimator's version its header names is `results_version`'s."""
    out = {}
    for i, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            rec = parse_json(line, f"{source} line {i}", finite=False)
            out[rec["id"]] = {k: v for k, v in rec.items() if k != "id"}
        except (InputError, KeyError, TypeError, AttributeError):
            raise silicon.SiliconError(f"{source} line {i}: not a result line of the estimator") from None
    return out


def merge_aic(runs: Iterable[dict[str, dict]]) -> dict[str, dict]:
    """Several runs' results (`read_aic`'s) as one: a row in two runs keeps one result, an estimate
    over another run's refusal of it."""
    out: dict[str, dict] = {}
    for run in runs:
        for rid, rec in run.items():
            if rid not in out or ("error" in out[rid] and "error" not in rec):
                out[rid] = rec
    return out


# ------------------------------------------------------------------------------ the run
def select(rows: list[silicon.Row], *, systems=None, engines=None, models=None) -> list[silicon.Row]:
    """Rows matching the filters (a model by preset name or model path)."""
    low = lambda xs: {x.lower() for x in xs} if xs else None  # noqa: E731
    s, e, m = low(systems), low(engines), low(models)
    out = []
    for r in rows:
        preset = silicon.MODELS[r.model_path].preset if r.model_path in silicon.MODELS else None
        if s and r.system.lower() not in s or e and r.backend not in e:
            continue
        if m and r.model_path.lower() not in m and (preset is None or preset not in m):
            continue
        out.append(r)
    return out


def run_silicon(*, ways: list[str], systems=None, engines=None, models=None, sample: int | None = None,
                limit: int | None = None, profile: str | None = None, calibration: str | None = None,
                aic_results: dict[str, dict] | None = None, aic_live: bool = False, aic_out: Path | None = None,
                db: aic.Database | None = None, progress=None, aic_results_version: str | None = None) -> dict:
    """The silicon table (module docstring) as a dict: counts, reasons, per-group statistics of
    each way (and of aiconfigurator's estimator beside them), and every row's figures."""
    for w in ways:
        if w not in WAYS:
            raise ProjectionError(f"--way {w}: choose {', '.join(WAYS)} or all")
    if "calibrated" in ways and not calibration:
        raise ProjectionError("--way calibrated needs --calibration FILE (or engine=FILE,...)")
    db = db or aic.Database.installed()
    rows = select(silicon.load_rows(db), systems=systems, engines=engines, models=models)
    have = [r for r in rows if r.model_path in silicon.MODELS and r.system in aic.SYSTEM_GPUS]
    expressed, refused = silicon.express_all(rows)
    chosen = silicon.stratified(expressed, sample, silicon.group_key) if sample else expressed
    if limit:
        chosen = chosen[:limit]
    priced, seconds = price_ways(chosen, ways, profile=profile, calibration=calibration, db=db, progress=progress)
    aic_res = dict(aic_results or {})
    if aic_live:
        aic_res |= run_aic([e.row for e in chosen if e.row.id not in aic_res], aic_out, progress)
    reasons: dict[str, int] = defaultdict(int)
    for r, why in refused:
        reasons[silicon.reason_kind(why)] += 1
    points = []
    for e in chosen:
        r = e.row
        pred = {w: priced[w][r.id] for w in ways if "error" not in priced[w][r.id]}
        errs = {w: priced[w][r.id]["error"] for w in ways if "error" in priced[w][r.id]}
        a = aic_res.get(r.id)
        if a is not None:
            if "error" in a:
                errs["aiconfigurator"] = a["error"]
            else:
                pred["aiconfigurator"] = {"ttft_ms": a["ttft_ms"], "tpot_ms": a["tpot_ms"]}
        points.append({"id": r.id, "model": e.model, "model_path": r.model_path, "system": r.system, "engine": e.engine,
                       "engine_version": r.backend_version, "scenario": e.describe(),
                       "measured": {"ttft_ms": r.ttft_ms, "tpot_ms": r.tpot_ms}, "predicted": pred, "errors": errs})
    sources = list(ways) + (["aiconfigurator"] if aic_res else [])
    unpriced: dict[str, dict[str, int]] = {}
    for src in sources:
        c: dict[str, int] = defaultdict(int)
        for p in points:
            if src in p["errors"]:
                c[silicon.reason_kind(p["errors"][src])] += 1
        unpriced[src] = dict(sorted(c.items(), key=lambda kv: -kv[1]))
    aic_ver = (aic_version() if aic_live else aic_results_version or aic_version()) if aic_res else None
    return {
        "database": f"{aic.PACKAGE} {db.version}", "aiconfigurator": aic_ver,
        "profile": profile or "embedded", "calibration": calibration, "ways": list(ways),
        "counts": {"agg_rows": len(rows), "rows_of_models_and_systems_with_specs": len(have),
                   "expressed": len(expressed), "expressed_share_of_those": len(expressed) / len(have) if have else None,
                   "chosen": len(chosen), "sample_per_group": sample, "limit": limit,
                   "priced": {s: sum(1 for p in points if s in p["predicted"]) for s in sources}},
        "seconds_per_row": seconds,
        "not_expressed": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
        "not_priced": unpriced,
        "summary": summarise(points, ways),
        "beside_aiconfigurator": beside(points, ways) if aic_res else [],
        "points": points,
    }
