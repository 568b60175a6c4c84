"""`perfmodel validate --transfer`: the transfer rules tested on GPUs we do not have.

"Measure here, project there" checked directly: for every system of aiconfigurator's per-op
database (`perfmodel.aic`) and every op its rows time, each row's op (built as the step builds it:
`perfmodel.model.layers`) is priced as the step prices it (`perfmodel.model.step.price_op`: work,
floor and graph nodes) on a machine built for the system's GPU from a source profile through the
transfer rules (`perfmodel.model.machine.build_machine`), and compared with the row's measured
latency. Two sources:

  local     the local measured profile (default: the embedded H200 profile, perfmodel's own kernels):
            its errors hold the rules' and the kernels' differences (perfmodel's Triton kernels vs
            the engine's)
  aic-h200  the database's H200 rows of the same engine, imported as a profile (`aic.import_profile`,
            its lacking classes from the local profile): the same kernels on both GPUs, so off the
            H200 its errors are the rules' alone; on the H200 system itself it is the import's own
            fit and samples, not a transfer

All-reduce rows are priced by the machine's all-reduce law on that many GPUs over the system GPU's
default interconnect (the local profile has no collectives: the link spec's calibrated figures).
Per group (system, engine, what the rows time, dtype): the median and largest |error|, and the
median signed error (+: predicted too slow) of three parts of the rows, where a rule that is
systematically off shows: the floor-bound rows (measured under FLOOR_US: the carried latency floor;
all-reduce: messages up to SMALL_BYTES, the link's latency), and the others by what bounds the
target's law there, memory (the streaming rule; all-reduce: messages of LARGE_BYTES or more, the
link's bandwidth) or compute (the peak-ratio rule).
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from perfmodel import aic
from perfmodel.model.layers import Collective
from perfmodel.model.machine import build_machine
from perfmodel.model.ops import estimate
from perfmodel.model.step import price_collective, price_op
from perfmodel.profile import Profile
from perfmodel.request import profile_source_gpu, resolve_profile
from perfmodel.specs import registry

FLOOR_US = 20.0
SMALL_BYTES = 64 << 10
LARGE_BYTES = 16 << 20
PARTS = ("floor", "memory", "compute")
SOURCES = ("local", "aic-h200")
H200_SYSTEM = "h200_sxm"


def _stats(errs: list[float], by: dict[str, list[float]]) -> dict:
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    out = {"n": len(errs), "median_abs_err": med([abs(e) for e in errs]), "max_abs_err": max((abs(e) for e in errs), default=None),
           "bias": med(errs)}
    for part in PARTS:
        out[f"{part}_bias"], out[f"{part}_n"] = med(by[part]), len(by[part])
    return out


def _errors(pts: list[aic.Point], price) -> tuple[list[float], dict[str, list[float]]]:
    errs, by = [], {p: [] for p in PARTS}
    for p in pts:
        us, bound = price(p)
        e = us / p.t_us - 1.0
        errs.append(e)
        if p.op is None:  # a collective: latency-bound small messages, bandwidth-bound large ones
            part = "floor" if p.bytes_per_gpu <= SMALL_BYTES else "memory" if p.bytes_per_gpu >= LARGE_BYTES else None
        else:
            part = "floor" if p.t_us < FLOOR_US else bound
        if part:
            by[part].append(e)
    return errs, by


class _Machines:
    """Machines of one source profile on one target GPU, by (GPUs, graph)."""

    def __init__(self, profile: Profile, gpu, mk, fallback_gpu=None):
        self.profile, self.gpu, self.mk, self.fallback_gpu = profile, gpu, mk, fallback_gpu
        self.src = profile_source_gpu(profile)
        self._m: dict = {}

    def get(self, n: int = 1, graph: bool = True):
        if (n, graph) not in self._m:
            link = registry.load_link(self.gpu.default_interconnect) if n > 1 else None
            self._m[(n, graph)] = build_machine(self.gpu, n, link, self.profile, self.src, self.mk, graph=graph,
                                                fallback_gpu=self.fallback_gpu)
        return self._m[(n, graph)]

    def price(self, p: aic.Point) -> tuple[float, str]:
        """µs of the row's op or collective as a step prices it, and whether the target's law is
        memory- or compute-bound there."""
        if p.op is None:
            return price_collective(self.get(p.n_gpus, p.graph), Collective("all_reduce", "all_reduce", p.bytes_per_gpu, 1)), "memory"
        m = self.get()
        return price_op(m, p.op), estimate(p.op, m.law(p.op), m.flops_scale(p.op.compute_dtype)).bound


def imported_machines(db: aic.Database, systems, local: Profile):
    """Each system's engines at the package's maintained version, imported (`aic.import_profile`,
    `local` pricing what the database lacks), with the machines of that import on the system's
    GPU: (system, engine, version, profile, machines), system by system."""
    mk, local_gpu = registry.load_memory_kinds(), profile_source_gpu(local)
    for system in systems:
        gpu = registry.load_gpu(aic.SYSTEM_GPUS[system])
        for engine in aic.ENGINES:
            version = db.current(system, engine)
            if version is None:
                continue
            prof = aic.import_profile(db, system, f"{engine}@{version}", local)
            yield system, engine, version, prof, _Machines(prof, gpu, mk, fallback_gpu=local_gpu)


def run_transfer(profile: str | None = None, systems: list[str] | None = None, engines: list[str] | None = None,
                 db: aic.Database | None = None) -> dict:
    """The transfer table: one row per (system, engine, op, dtype) with each source's errors."""
    db = db or aic.Database.installed()
    local = resolve_profile(profile)
    if local.provenance.kind != "measured" or local.provenance.imported is not None:
        raise aic.AicError(f"--profile: the transfer check predicts from a profile measured by `perfmodel measure` (got {local.label})")
    local_gpu = profile_source_gpu(local)
    mk = registry.load_memory_kinds()
    known = [s for s in db.systems() if s in aic.SYSTEM_GPUS]
    for s in systems or []:
        if s not in known:
            raise aic.AicError(f"--system {s!r}: not a system of {aic.PACKAGE} {db.version} with a GPU spec (known: {', '.join(known)})")
    for e in engines or []:
        aic.parse_engine(e)
    h200: dict[str, Profile | None] = {}
    rows = []
    for system in systems or known:
        gpu = registry.load_gpu(aic.SYSTEM_GPUS[system])
        for engine in [aic.parse_engine(e)[0] for e in engines] if engines else aic.ENGINES:
            version = db.current(system, engine)
            if version is None:
                continue
            if engine not in h200:
                hv = db.current(H200_SYSTEM, engine)
                h200[engine] = aic.import_profile(db, H200_SYSTEM, f"{engine}@{hv}", local) if hv else None
            machines = {"local": _Machines(local, gpu, mk)}
            if h200[engine] is not None:
                machines["aic-h200"] = _Machines(h200[engine], gpu, mk, fallback_gpu=local_gpu)
            by_kind, tables = aic.points(db, system, engine, version)
            tables.pop("device", None)
            for kind, pts in by_kind.items():
                groups = defaultdict(list)
                for p in filter(aic.law_row, pts):  # the rows a law is fitted on: the op each prices is the row's
                    key = (p.dtype, p.cls) if p.op is not None else (f"{p.dtype}, {p.n_gpus} GPUs, {'graph' if p.graph else 'eager'}", p.cls)
                    groups[key].append(p)
                for (dtype, cls), group in sorted(groups.items()):
                    row = {"system": system, "gpu": gpu.name, "memory": gpu.memory.kind, "engine": engine, "version": version,
                           "op": kind, "class": cls, "dtype": dtype, "n": len(group), "table": tables[kind]}
                    for name, m in machines.items():
                        row[name] = _stats(*_errors(group, m.price))
                    rows.append(row)
    return {"database": f"{aic.PACKAGE} {db.version}", "local_profile": local.label,
            "h200_imports": {e: p.label for e, p in h200.items() if p is not None}, "rows": rows,
            "summary": _summary(rows)}


def _family(memory_kind: str) -> str:
    return "HBM" if memory_kind.startswith("HBM") else "GDDR" if memory_kind.startswith("GDDR") else memory_kind


def _summary(rows: list[dict]) -> list[dict]:
    """Per op, dtype and memory family (HBM, GDDR) over the systems and engines: the median of the
    groups' median |error|, the largest |error|, and the median over the groups of each part's bias."""
    by = defaultdict(list)
    for r in rows:
        dtype = r["dtype"].split(",")[0]  # all-reduce groups: the dtype, the GPU counts pooled
        by[(r["op"], dtype, _family(r["memory"]))].append(r)
    out = []
    for (op, dtype, fam), rs in sorted(by.items()):
        entry = {"op": op, "dtype": dtype, "memory": fam, "systems": sorted({r["system"] for r in rs})}
        for src in SOURCES:
            ss = [r[src] for r in rs if src in r and r[src]["n"]]
            if not ss:
                continue
            med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
            entry[src] = {"groups": len(ss), "rows": sum(s["n"] for s in ss),
                          "median_of_medians": med([s["median_abs_err"] for s in ss]),
                          "max_abs_err": max(s["max_abs_err"] for s in ss)}
            for part in PARTS:
                entry[src][f"{part}_bias"] = med([s[f"{part}_bias"] for s in ss if s[f"{part}_bias"] is not None])
        out.append(entry)
    return out
