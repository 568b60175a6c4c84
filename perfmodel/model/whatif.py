"""What-if variants: pure functions `Machine -> Machine` (and one for the acceptance source).

Each returns a new frozen object built with `dataclasses.replace`; the input is left as it was.
Re-run a variant through the same model with `Projector.variant(machine=...)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from perfmodel.model.machine import Machine

HOST_FIELDS = ("host_step_us", "graph_launch_us", "launch_eager_us", "launch_eager_triton_us")


def scale_laws(m: Machine, k: float, field: str) -> Machine:
    """Every kernel law's `field` (bw_GBps | tflops | t0_us) times k."""
    return replace(m, laws={c: replace(law, **{field: getattr(law, field) * k}) for c, law in m.laws.items()})


def scale_collectives(m: Machine, k: float, field: str) -> Machine:
    """The all-reduce and all-to-all laws' `field` (latency_us | busbw_GBps) times k."""
    upd = {name: replace(law, **{field: getattr(law, field) * k})
           for name in ("all_reduce", "all_to_all") if (law := getattr(m, name)) is not None}
    return replace(m, **upd)


def scale_overheads(m: Machine, k: float, *fields: str) -> Machine:
    """The named overhead terms (see `machine.Overheads`) times k."""
    o = m.overheads
    return replace(m, overheads=replace(o, **{f: getattr(o, f) * k for f in fields}))


@dataclass(frozen=True)
class ScaledAcceptance:
    """An acceptance source whose gain over plain decode (τ − 1) is scaled by k."""

    base: object
    k: float

    @property
    def kind(self) -> str:
        return self.base.kind

    @property
    def description(self) -> str:
        return self.base.description

    def tau(self, budget) -> float:
        return 1 + (self.base.tau(budget) - 1) * self.k


def scale_acceptance(acc, k: float):
    return None if acc is None else ScaledAcceptance(acc, k)


# name -> (Machine, factor) -> Machine; the inputs `perfmodel project --sensitivity` perturbs.
MACHINE_WHATIFS: dict[str, Callable[[Machine, float], Machine]] = {
    "memory bandwidth (all kernels)": lambda m, k: scale_laws(m, k, "bw_GBps"),
    "compute rate (all kernels)": lambda m, k: scale_laws(m, k, "tflops"),
    "per-kernel latency floor": lambda m, k: scale_laws(m, k, "t0_us"),
    "collective latency": lambda m, k: scale_collectives(m, k, "latency_us"),
    "collective bandwidth": lambda m, k: scale_collectives(m, k, "busbw_GBps"),
    "host overhead (per step, per launch)": lambda m, k: scale_overheads(m, k, *HOST_FIELDS),
    "graph node cost": lambda m, k: scale_overheads(m, k, "graph_node_us"),
}
ACCEPTANCE_WHATIF = "acceptance (τ − 1)"
