"""The one door from a scenario to the model: `resolve` turns a `Request` into the core's inputs
(specs, profile, calibration, the profile's self-check, all loaded and checked); `projector` and
`project` price it. The CLI, compare, validate, the reports and the Python API all come here.

Profiles are cached by path (`perfmodel.request`); the self-check and calibrations by the
profile object and the request fields they depend on, so that what-ifs, sensitivity, reports and
compare, which re-project one scenario many times, fit and check once.
"""

from __future__ import annotations

import dataclasses

from perfmodel.errors import ProjectionError
from perfmodel.model.e2e import self_check as _self_check
from perfmodel.model.project import Projector
from perfmodel.model.resolved import Resolved
from perfmodel.model.result import Projection, StepResult
from perfmodel.profile import Profile
from perfmodel.request import e2e_inputs, profile_source_gpu, resolve_specs
from perfmodel.scenario import Request

_CHECKS: dict[int, tuple[Profile, dict]] = {}
_CALIBRATIONS: dict[tuple, tuple] = {}


def self_check(profile: Profile, mk=None) -> dict:
    """Predict the profile's own 1-GPU end-to-end steps from its component fits."""
    from perfmodel.specs import registry

    src = profile_source_gpu(profile)
    models, _ = e2e_inputs(profile, src)
    return _self_check(profile, src, mk or registry.load_memory_kinds(), models)


def cached_self_check(profile: Profile, mk=None) -> dict:
    """`self_check` once per profile object (profiles are cached by path in perfmodel.request)."""
    hit = _CHECKS.get(id(profile))
    if hit is None or hit[0] is not profile:
        hit = _CHECKS[id(profile)] = (profile, self_check(profile, mk))
    return hit[1]


def _calibration(rs: Resolved):
    """`--calibration calib.json`, or `--observed` as a one-point calibration (the same fit):
    (the calibration result, the --observed summary)."""
    from perfmodel.calibrate import CalibrationError, CalibrationInput, ObservedPoint, fit, load_result

    r = rs.req
    try:
        if r.calibration:
            from perfmodel.request import calibration_path

            return load_result(str(calibration_path(r.calibration))), None
        o = dict(rs.observed.figure)
        pt = ObservedPoint(
            target=rs.observed.gpu.name, gpus=o["gpus"], link=rs.observed.link.name if rs.observed.link else None,
            model=rs.model.name if not r.model_file else None, model_file=r.model_file or None,
            parallel=o["parallel"], concurrency=o["concurrency"], context=o["context"] or r.context,
            spec=o.get("spec") or "none", budget=o.get("budget"),
            acceptance=r.acceptance if (o.get("spec") or "none") != "none" else None, graphs=r.graphs,
            tokens_per_s_per_stream=o["tokens_per_s"], label=f"--observed {r.observed}")
        cal = fit(CalibrationInput(engine="the engine behind --observed", points=[pt], kernels=r.kernels),
                  rs.profile, rs.profile.label)
        summary = {"point": pt.describe(), "observed_tokens_per_s_per_stream": o["tokens_per_s"],
                   "uncalibrated_tokens_per_s_per_stream": cal.points[0].uncalibrated,
                   "calibrated_tokens_per_s_per_stream": cal.points[0].predicted}
        return cal, summary
    except CalibrationError as e:
        raise ProjectionError(str(e)) from None
    except ProjectionError:  # an unknown shipped engine calibration
        raise
    except ValueError as e:  # pydantic: a field of the observed point
        raise ProjectionError(f"--observed '{r.observed}': {str(e).splitlines()[0]}") from None


def _mtime(path: str | None) -> int | None:
    """A file's modification time: a calibration rewritten in place is read again."""
    import os

    try:
        return os.stat(path).st_mtime_ns if path else None
    except OSError:
        return None


def check_inputs(req: Request) -> None:
    """Read and check every file `req` names, its calibration too; one-line ProjectionError naming
    the file. `compare` calls it before its sweep: a bad file is an error of the whole sweep."""
    from perfmodel.request import check_files

    check_files(req)
    if req.calibration:
        from perfmodel.calibrate import CalibrationError, load_result

        try:
            load_result(req.calibration)
        except CalibrationError as e:
            raise ProjectionError(str(e)) from None


def resolve(req: Request | Resolved) -> Resolved:
    """Load and check everything `req` names, its calibration and the profile's self-check;
    every failure is one-line `ProjectionError`."""
    if isinstance(req, Resolved):
        return req
    if not isinstance(req, Request):
        raise ProjectionError(f"expected a perfmodel Request, got {type(req).__name__}")
    rs = resolve_specs(req)
    try:
        extra: dict = {"self_check": cached_self_check(rs.profile, rs.mk)}
    except ValueError as e:  # a profile the machine cannot be built from (missing fits or overheads)
        raise ProjectionError(str(e).splitlines()[0]) from None
    if req.calibration or req.observed:
        key = (req.calibration, _mtime(req.calibration), req.observed, req.model, req.model_file, req.context, req.graphs,
               req.acceptance, req.kernels, id(rs.profile))
        if key not in _CALIBRATIONS:
            _CALIBRATIONS[key] = _calibration(rs)
        extra["calibration"], extra["observed_summary"] = _CALIBRATIONS[key]
    from dataclasses import replace

    return replace(rs, **extra)


def projector(req: Request | Resolved, **kw) -> Projector:
    """The projector of a scenario (`Projector`'s keywords: machine, acc, whatif, acceptance_fn)."""
    return Projector(resolve(req), **kw)


def step(req: Request | None = None, *, decode: list[str] = (), prefill: list[str] = (), verify: list[str] = (),
         logits: str = "last", **kw) -> StepResult:
    """Price one forward pass of a mixed batch: `step(target="b300", gpus=8, decode=["64@8192"],
    prefill=["1x2048@0"])`. Groups in the command line's notation (`N@CTX`, `NxT@P`, `NxW@CTX`);
    the scenario's other fields as `project` takes them (or a `Request` as `req`)."""
    from perfmodel.model.layers import Batch, parse_group

    if req is not None and kw:
        raise TypeError("step() takes a Request or keyword fields, not both")
    groups = []
    for kind, texts in (("decode", decode), ("prefill", prefill), ("verify", verify)):
        for t in texts:
            try:
                groups.append(parse_group(kind, t))
            except ValueError as e:
                msg = str(e).splitlines()[0]
                raise ProjectionError(msg if msg.startswith(f"--{kind}") else f"--{kind} '{t}': {msg}") from None
    if not groups:
        raise ProjectionError("give the batch: one or more of --decode N@CTX, --prefill NxT@P, --verify NxW@CTX")
    if logits not in ("last", "all"):
        raise ProjectionError(f"--logits '{logits}': choose last or all")
    req = req if req is not None else Request(**kw)
    widths = [g.width for g in groups if getattr(g, "kind", "") == "verify"]
    if req.draft_topk is not None and req.budget == "auto" and widths:
        # an EAGLE tree's kept nodes are the verify's width - 1: --verify NxW names them
        req = dataclasses.replace(req, budget=max(widths) - 1)
    pj = projector(req)
    try:
        return pj.batch(Batch(groups=tuple(groups), logits=logits))
    except ValueError as e:
        raise ProjectionError(str(e).splitlines()[0]) from None


def project(req: Request | None = None, **kw) -> Projection:
    """Project decode throughput: `project(Request(...))` or `project(target="b300", gpus=8, ...)`."""
    if req is not None and kw:
        raise TypeError("project() takes a Request or keyword fields, not both")
    return projector(req if req is not None else Request(**kw)).projection()
