"""The profile file: the only interface between `perfmodel.measure` and the model.

A profile holds raw samples (per bench), fitted laws (per kernel class), overhead constants,
collective fits, tree-building fits and end-to-end synthetic decode steps, each with
provenance. `measure` writes it (incrementally, atomically); the model reads only the fits,
the ceilings and the e2e points. This module is pure pydantic + json: no torch, no scipy.

Laws (all times in microseconds, bytes in bytes):
  kernel class  t_us = t0_us + max(bytes / (bw_GBps * 1e3), flops / (tflops * 1e6))
  collective    t_us = latency_us + bytes_per_gpu / (bw_GBps * 1e3)
  tree build    t_us = t0_us + per_node_us * C * B
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from perfmodel.inputs import InputError, kind_of, parse_json, read_text, validation_line
from perfmodel.kernel_classes import CLASSES
from perfmodel.outputs import TMP_TAG, fsync_path, stale_temp_files, write_file  # noqa: F401  (re-exported)

SCHEMA_VERSION = 1

# Kernel classes the step model prices (their records: perfmodel/kernel_classes.py). measure fits one law per class.
KERNEL_CLASSES = tuple(c.name for c in CLASSES)

# Kernel sets: which implementation of each kernel class a projection prices. "perfmodel" is
# the package's own kernels (the default). "torch" is PyTorch's native ops, as an engine built
# on them runs a decode step: torch._grouped_mm for the routed experts, SDPA for GQA attention,
# unfused norms, RoPE and routing in plain tensor ops (measure/ops.py torch_*). Per bench, the
# provider whose samples time a set's kernels; a set's fits are keyed `<class>@<set>`. A class
# the set does not re-measure (dense GEMMs are cuBLAS in both; MLA has no SDPA path) keeps
# the default's law.
KERNEL_SETS: dict[str, dict[str, str]] = {
    "perfmodel": {},
    "torch": {"attention": "torch.sdpa", "moe": "torch._grouped_mm", "elementwise": "torch"},
}


# Benches that check the model rather than feed it (a torch-only decode stack, collectives
# through host memory): `perfmodel measure --only pcie,foreign`, not part of the default suite.
VALIDATION_BENCHES = ("pcie", "foreign")
FLOOR_PROBE_BYTES = 1 << 20  # bytes one floor-probe (`dram_wave`) call reads

ROW_TILE = 64  # query rows per CTA of an unsplit attention kernel (FlashAttention-2 / SDPA's efficient backend)


def attention_units(C: int, q: int, hq: int, hkv: int) -> int:
    """Work units of a GQA attention kernel that does not split the prefix: one CTA per
    (sequence, KV head, tile of 64 query rows), the head's query group folded into the rows."""
    return C * hkv * -(-q * (hq // max(hkv, 1)) // ROW_TILE)


def wave_bytes(nbytes: float, units: int, slots: int) -> float:
    """What the busiest SM of such a kernel reads: each unit's share of the bytes, once per
    wave of units over the GPU's SMs (`slots`)."""
    return nbytes / units * -(-units // max(slots, 1)) if units > 0 else 0.0


def check_kernel_set(name: str) -> str:
    """The name, if it is a kernel set (a pydantic validator's body)."""
    if name not in KERNEL_SETS:
        raise ValueError(f"unknown kernel set '{name}' (known: {', '.join(KERNEL_SETS)})")
    return name


def fit_key(cls: str, kernel_set: str = "perfmodel") -> str:
    """The profile's fit key of a kernel class (or `class.variant`) in a kernel set."""
    return cls if kernel_set == "perfmodel" else f"{cls}@{kernel_set}"


class _M(BaseModel):
    # Every number finite: a NaN or Infinity in a profile would silently drop or blow up a term.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


NonNeg = Annotated[float, Field(ge=0)]


class Imported(_M):
    """Where an imported profile's numbers come from (`perfmodel profile import-aic`)."""

    database: str = Field(description="the Python package that ships the measurements")
    database_version: str
    licence: str = Field(description="the database's licence (its rows are kept as samples)")
    system: str = Field(description="the database's name of the system (GPU and host) the rows were measured on")
    engine: str = Field(description="the serving engine whose kernels were timed")
    engine_version: str
    tables: dict[str, str] = Field({}, description="per kernel class (`<class>.prefill`: its prefill law) or collective: "
                                   "the table read, as a path inside the "
                                   "package (its version folder says which engine version's rows were used)")
    dtypes: dict[str, str] = Field({}, description="per kernel class (or `<class>.prefill`): the database dtype of the rows its law is fitted on")
    kernel_sources: dict[str, list[str]] = Field({}, description="per kernel class (or `<class>.prefill`): the engine kernels those rows timed")
    lacks: list[str] = Field([], description="kernel classes the database has no rows for: priced by the fallback profile's "
                             "laws carried to this GPU by the transfer rules (Profile.fallback)")


class Provenance(_M):
    kind: Literal["measured", "spec-derived"]
    gpu_name: str
    gpu_spec: str | None = Field(None, description="hwspecs GPU name this profile was taken on")
    n_gpus: int = Field(1, ge=1)
    driver: str | None = None
    sm_clock_max_MHz: int | None = Field(None, gt=0, description="the SM clock's maximum (NVML), beside each "
                                         "sample's sm_clock_MHz: a sample well below it was timed throttled")
    cuda: str | None = None
    torch: str | None = None
    triton: str | None = None
    python: str | None = None
    git_sha: str | None = None
    hostname: str | None = None
    timestamp: str
    command: str | None = None
    note: str = ""
    imported: Imported | None = Field(None, description="set when the laws and samples were imported from a public "
                                      "database of per-op measurements rather than timed by `perfmodel measure`")


class Sample(BaseModel):
    """One timed configuration. `shape` holds the bench's own parameters (T, C, q, L, ...)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    shape: dict[str, int | float | str | bool]
    bytes: float | None = Field(None, ge=0)
    flops: float | None = Field(None, ge=0)
    times_ms: list[NonNeg] = []
    median_ms: float = Field(gt=0)
    p10_ms: float | None = Field(None, ge=0)
    p90_ms: float | None = Field(None, ge=0)
    achieved_GBps: float | None = Field(None, ge=0)
    achieved_TFLOPS: float | None = Field(None, ge=0)
    provider: str = "triton"


class BenchResult(_M):
    status: Literal["ok", "oom", "error", "skipped"]
    note: str = ""
    started: str | None = None
    finished: str | None = None
    wall_s: float | None = Field(None, ge=0)
    samples: list[Sample] = []


class Ceilings(_M):
    copy_GBps: float | None = Field(None, gt=0, description="device copy, bytes read + written")
    read_GBps: float | None = Field(None, gt=0, description="streaming read (reduction)")
    bf16_TFLOPS: float | None = Field(None, gt=0)
    fp8_TFLOPS: float | None = Field(None, gt=0)
    source: str = ""


class KernelFit(_M):
    law: Literal["t0+max(bytes/bw,flops/F)"] = "t0+max(bytes/bw,flops/F)"
    t0_us: float = Field(ge=0)
    bw_GBps: float = Field(gt=0)
    tflops: float = Field(gt=0)
    n_points: int = Field(0, ge=0)
    residuals_rel: list[float] = []
    rmse_rel: float = Field(0.0, ge=0)
    bench: str = ""
    launcher: Literal["torch", "triton"] = Field(
        "torch", description="what launches the kernel eagerly: a torch op, or a Triton kernel's Python launcher "
                             "(priced by Overheads.launch_eager_triton_us)")
    bytes_range: tuple[float, float] | None = None
    unit_GBps: float | None = Field(
        None, gt=0, description="per work-unit streaming rate of a kernel that keeps each sequence's prefix on one "
        "CTA per (sequence, KV head, 64-row tile) instead of splitting it (SDPA's masked backend): the call takes "
        "at least wave_bytes / unit_GBps (profile.wave_bytes)")
    rows_per_kv_pass: int | None = Field(
        None, description="legacy (older profiles), ignored: attention fits once counted a KV "
        "re-read per row tile in their bytes; see measure/attention.py fit_attention")
    source: str = ""


class CollectiveFit(_M):
    op: Literal["all_reduce", "all_to_all"]
    n_gpus: int = Field(ge=2)
    graph: bool = False
    latency_us: float = Field(ge=0)
    bw_GBps: float = Field(gt=0, description="bytes per GPU / (t - latency)")
    n_points: int = Field(0, ge=0)
    residuals_rel: list[float] = []
    rmse_rel: float = Field(0.0, ge=0)
    link: str = Field("", description="what joined the GPUs, e.g. nvlink4")
    min_bytes: float = Field(0.0, ge=0, description="bytes per GPU from which the fit prices a message: 0 for the "
                                                  "law of every size; above 0, the law of messages larger than that "
                                                  "(an imported profile's prefill-size all-reduces), beside the law of 0")
    source: str = ""


class Overheads(_M):
    launch_eager_us: float = Field(gt=0, description="host cost of one eager kernel launch (a torch op)")
    launch_eager_triton_us: float | None = Field(
        None, gt=0, description="host cost of one eager call of a Triton kernel through its Python launcher "
                                "(None in older profiles: priced as launch_eager_us)")
    launch_eager_call_us: dict[str, Annotated[float, Field(gt=0)]] = Field(
        {}, description="host cost of one eager call of a kernel class's wrapper, all its kernels together "
                        "(attention: split + combine; MoE: align + gate_up + down; gemm_bf16: a torch GEMM "
                        "through cuBLAS), by class or '<class>.<variant>' (a small op as the e2e stack calls "
                        "it), at one token; '<class>@T<n>': the same timed at n tokens, for calls of n or more "
                        "(a wrapper that takes another path past some size); a class not listed is priced "
                        "per kernel at launch_eager_triton_us (Triton) or launch_eager_us (torch)")
    eager_interleave_factor: float = Field(
        1.0, gt=0, description="host time of the timed eager calls made in turn (one of each, as a step interleaves "
                               "them) over the sum of their times each in a loop of its own; 1.0 in older profiles")
    graph_node_us: float = Field(ge=0, description="GPU-side cost per node inside a CUDA graph")
    graph_launch_us: float = Field(ge=0, description="host cost to replay one graph")
    host_step_us: float = Field(ge=0, description="per decode step host work: scheduling, sampling, sync")
    # floor probe (measure/floor.py; None in older profiles): the physical floors of a small kernel
    floor_empty_node_us: float | None = Field(None, gt=0, description="an empty kernel as a CUDA-graph node")
    floor_dram_wave_us: float | None = Field(
        None, gt=0, description="one wave of DRAM reads (one program per SM) over a cold 1 MB working set, as a graph node")
    floor_splitk_pair_us: float | None = Field(
        None, gt=0, description="that DRAM wave plus a 1-program reduce of its partials: two graph nodes")
    source: str = ""


class TreeBuildFit(_M):
    impl: Literal["cpu", "gpu"]
    t0_us: float = Field(ge=0)
    per_node_us: float = Field(ge=0, description="per tree node per sequence (C * B)")
    n_points: int = Field(0, ge=0)
    residuals_rel: list[float] = []
    rmse_rel: float = Field(0.0, ge=0)
    source: str = ""


class E2EPoint(_M):
    """A synthetic decode step measured end to end (graph-captured), for the self-check."""

    name: str
    model: str
    n_layers: int = Field(gt=0, description="layers in the synthetic stack")
    n_dense_layers: int = Field(0, ge=0)
    tp_shape: int = Field(1, ge=1, description="per-GPU shard shapes of this TP degree")
    n_gpus: int = Field(1, ge=1)
    parallel: Literal["tp", "ep", "tp-attn-ep-moe"] = "tp"
    concurrency: int = Field(gt=0)
    q: int = Field(gt=0, description="tokens per sequence in the step")
    context: int = Field(ge=0)
    lm_head: bool = False
    graph: bool = True
    step_ms: float = Field(gt=0)
    p10_ms: float | None = Field(None, gt=0)
    p90_ms: float | None = Field(None, gt=0)
    note: str = ""


class Profile(_M):
    schema_version: int = SCHEMA_VERSION
    provenance: Provenance
    ceilings: Ceilings = Ceilings()
    benches: dict[str, BenchResult] = {}
    fits: dict[str, KernelFit] = {}
    collectives: list[CollectiveFit] = []
    overheads: Overheads | None = None
    treebuild: dict[str, TreeBuildFit] = {}
    e2e: list[E2EPoint] = []
    fallback: Profile | None = Field(None, description="an imported profile's local profile, trimmed to the laws of the "
                                     "classes the database lacks (provenance.imported.lacks): those classes are priced "
                                     "by its laws carried to the target by the transfer rules")

    @property
    def label(self) -> str:
        p = self.provenance
        if p.imported is not None:
            im = p.imported
            return f"imported from {im.database} {im.database_version}: {im.engine} {im.engine_version} on {p.gpu_name} ({im.system})"
        return f"{p.kind} on {p.gpu_name} ({p.timestamp})"


class ProfileError(ValueError):
    pass


def _first_error(path, e: ValidationError) -> ProfileError:
    """One line: the file, the field path and what is wrong, with the bad value."""
    return ProfileError(validation_line(f"profile {path}", e))


def load_profile(path: str | os.PathLike) -> Profile:
    """Read and validate a profile: a JSON object (read and parsed by perfmodel.inputs: size, depth,
    no duplicate keys, no NaN), every number finite and in range, strict types (no bool or string
    where a number belongs). Errors are one line naming the file."""
    path = Path(path)
    try:
        text = read_text(path, "profile")
        data = parse_json(text, f"profile {path}")
    except InputError as e:
        raise ProfileError(str(e)) from None
    if not isinstance(data, dict):
        raise ProfileError(f"profile {path}: expected a JSON object, got {kind_of(data)}")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ProfileError(f"profile {path}: schema_version {data.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    try:
        # strict: JSON true is not 1, "3" is not 3; JSON mode reads arrays into tuples
        return Profile.model_validate_json(text, strict=True)
    except ValidationError as e:
        raise _first_error(path, e) from None


def save_profile(profile: Profile | dict, path: str | os.PathLike, *, inputs=()) -> None:
    """Write through the output layer (perfmodel.outputs.write_file): atomically (a reader sees
    the old profile or the new one, never a part), locked, an existing file's mode kept, never
    onto one of `inputs`; no NaN or Infinity is written. OutputError (one line) if it cannot."""
    data = profile.model_dump(mode="json") if isinstance(profile, Profile) else profile
    write_file(path, json.dumps(data, indent=1, allow_nan=False), inputs=inputs)
