"""The core's inputs: a request with everything it names loaded and checked
(`perfmodel.api.resolve` builds it; the model only computes on it)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from perfmodel.profile import Profile
from perfmodel.scenario import Request
from perfmodel.specs.schema import GpuSpec, InterconnectSpec, MemoryKinds, ModelSpec

if TYPE_CHECKING:  # loaded only with a calibration (perfmodel.calibrate reads the file)
    from perfmodel.calibration_schema import CalibrationResult


@dataclasses.dataclass(frozen=True)
class Observed:
    """A known figure on a source machine (`--observed`), with its specs resolved."""

    figure: dict  # request.parse_observed's fields
    gpu: GpuSpec
    link: InterconnectSpec | None


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A validated request with every input loaded: what the model computes on."""

    req: Request
    gpu: GpuSpec
    model: ModelSpec
    link: InterconnectSpec | None
    profile: Profile
    source_gpu: GpuSpec
    mk: MemoryKinds
    acc: Any  # acceptance.AcceptanceSource | None
    observed: Observed | None
    profile_path: str  # as reported: the path given, the embedded file's name, or "spec-derived"
    self_check: dict = dataclasses.field(default_factory=lambda: {"n_points": 0, "median_abs_err": None, "points": []})
    calibration: CalibrationResult | None = None  # --calibration, or --observed fitted as a one-point calibration
    observed_summary: dict | None = None  # --observed: the point, its figure, and the model before and after the fit
    lengths: tuple[tuple[int, int], ...] | None = None  # --lengths-file: the (isl, osl) pairs requests draw from
    fallback_gpu: GpuSpec | None = None  # the GPU of the profile's fallback profile (an imported profile's local one)
