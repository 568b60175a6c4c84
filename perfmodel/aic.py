"""aiconfigurator's public per-op database, read where the package installs it, as perfmodel profiles.

`aiconfigurator-core` (NVIDIA, Apache-2.0, on PyPI; `pip install 'perfmodel[aic]'`) ships, per
system (a GPU in a given host) and per serving-engine version, the latencies its collectors timed
of the ops a serving step is made of. Its layout (0.12.0):

    aiconfigurator_core/systems/<system>.yaml                 data_dir, datasheet figures, nccl_version
    aiconfigurator_core/systems/query_versions.yaml           the maintained ("current") version per engine
    aiconfigurator_core/systems/data/<system>/<family>/<engine>/<version>/<table>.parquet
        gemm/…/gemm_perf                                      m, n, k, gemm_dtype -> latency (ms)
        moe/…/moe_perf                                        num_tokens, hidden, inter, topk, experts, tp, ep, routing
        attention/…/{context,generation}_attention_perf       GQA prefill / decode: batch, isl or step, heads, head_dim
        mla/…/{context,generation}_mla_perf                   MLA prefill / decode: batch, isl or step, heads per GPU
        comm/<engine>/…/custom_allreduce_perf, comm/nccl/<nccl>/nccl_perf   by GPU count and message size (elements)
    aiconfigurator_core/systems/silicon_sample.csv            measured end-to-end serving points

This module finds that folder through importlib.resources (the package's own location; nothing is
copied), reads the tables (pandas; CSV for the test fixtures) and turns the rows the step model
has an op for into points: each row's op built as the step builds it (`perfmodel.model.layers`
builders) and its measured time. `import_profile` fits perfmodel's kernel laws per class on them
(the same fits as `perfmodel measure`'s samples, `perfmodel.measure.fits`): each class's law on its
decode-size rows (FP8 dense GEMMs' law, `gemm_fp8`, on the FP8 rows), and its prefill law
(`<class>.prefill`, the variant a prefill step prices its causal attention and routed experts by,
as `measure`'s prefill bench fits it) on the context attention, context MLA and 256+-token MoE
rows; it keeps the decode-size rows as samples filed under the bench, shape fields and provider the step's probes name (so
`perfmodel.model.lookup` prices an op from them on that GPU; each sample's `kernel_source` names
the engine's kernel), records where every law came from (`Provenance.imported`), and embeds the
local profile, trimmed, as the fallback for the classes the database lacks (elementwise, and any
table an engine has no rows for): those are priced by the local profile's laws carried to the
system's GPU by the transfer rules (`perfmodel.model.machine`).

Row conventions (from the tables and aiconfigurator's collectors): latency in ms; a decode row's
`step` is the KV prefix length (q = 1 new token); a prefill row's `isl` is the new tokens per
sequence over no prefix; MLA rows are DeepSeek-shaped (latent 512 + rope 64) with the heads on one
GPU; message sizes are elements (bf16 for the custom all-reduce); "balanced" MoE routing sends token
t's i-th pick to expert (t + i·⌈E/k⌉) mod E (spread out when there are fewer tokens than that
stride), so the experts a call reads are counted from that rule; an expert-parallel row times one
GPU's experts, the busiest, under the routing it names (`EP_DISTRIBUTION`: those rows are kept as
samples of the expert-parallel probe, `layers._routed_experts`, and no law is fitted on them).
Where several kernels timed one shape, the fastest is kept.
"""

from __future__ import annotations

import csv
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

from perfmodel.kernel_classes import by_name as class_by_name
from perfmodel.kernel_classes import moe_class, of_key
from perfmodel.model.layers import (
    MOE_PROVIDERS,
    PREFILL,
    expected_max_distinct_per_gpu,
    gemm_op,
    gqa_attention_op,
    gqa_prefill_attention_op,
    mla_attention_op,
    mla_latent_prefill_attention_op,
    mla_prefill_attention_op,
    moe_probe,
    routed_experts_op,
)
from perfmodel.model.ops import Op
from perfmodel.profile import BenchResult, Ceilings, Imported, KernelFit, Profile, Provenance, Sample
from perfmodel.specs.schema import WEIGHT_BYTES

PACKAGE = "aiconfigurator-core"
MODULE = "aiconfigurator_core"
LICENCE = "Apache-2.0"
INSTALL = "pip install 'perfmodel[aic]'"
ENGINES = ("sglang", "vllm", "trtllm")

# aiconfigurator's system names -> hwspecs/gpus/*.yaml. Systems without a GPU spec here are listed
# by `--list` but cannot be imported.
SYSTEM_GPUS: dict[str, str] = {
    "a100_sxm": "a100-sxm", "h100_sxm": "h100-sxm", "h100_pcie": "h100-pcie", "h200_sxm": "h200-sxm",
    "b200_sxm": "b200-sxm", "b300_sxm": "b300-sxm", "gb200": "gb200", "gb300": "gb300",
    "l40s": "l40s", "rtx_pro_6000_server": "rtx-pro-6000-server",
}

# database dtype -> the weight format the step model prices it as (specs.schema.WEIGHT_BYTES)
GEMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "nvfp4"}
MOE_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "nvfp4", "int4_wo": "int4_g32",
              "w4a16_mxfp4": "mxfp4"}
KV_BYTES = {"bfloat16": 2.0, "fp8": 1.0}
# The routing of the expert-parallel MoE rows read (as samples of the expert-parallel probe only):
# aiconfigurator's collectors draw each expert's token count from a power law (exponent 1.01) and
# time the GPU whose experts got the most (ai-dynamo/aiconfigurator collector/helper.py
# `_generate_power_law_distribution`, "Find EP rank with max load and swap to rank 0"), and its
# estimator prices MoE from these rows (aiconfigurator_core/sdk/config.py workload_distribution
# "power_law", models/deepseek.py alpha 1.01). The "balanced" rows spread the pairs evenly over the
# GPUs, so no GPU waits for a busier one: the idle case an expert-parallel step never is.
EP_DISTRIBUTION = "power_law_1.01"
# ... of whole experts per GPU (moe_tp 1), over up to this many GPUs: the layouts expert parallelism
# runs in, kept few enough that an imported profile stays under the 10 MB cap on input files
# (another split falls to the law fitted on the tensor-parallel rows)
EP_MAX_GPUS = 64
MLA_LATENT, MLA_ROPE = 512, 64  # DeepSeek-V3's MLA (the shape aiconfigurator's MLA tables time)
MLA_NOPE, MLA_V = 128, 128  # its per-head K (nope part) and V dims, uncompressed as prefill runs them
# The (engine, kernel source) whose context MLA rows time a prompt in the latent (absorbed) form, one
# shared K head of 576 dims and V of 512, where the engine runs a prompt with no cached prefix
# uncompressed (K of 192, V of 128 per head): aiconfigurator's SGLang collector takes the projected
# form for trtllm_mla only and the latent form for every other backend
# (ai-dynamo/aiconfigurator collector/sglang/collect_mla.py `run_mla`, since its commit cc24d1377),
# while SGLang's fa3 (Hopper) and triton (SM89, SM120) backends send such a prompt through MHA
# (sgl-project/sglang python/sglang/srt/models/deepseek_v2.py `handle_attention_fa3`,
# `handle_attention_triton`). Such rows are read as the op they timed, so the prefill law learns the
# kernel's rate on the work it did (evidence/sglang-mla-prefill/).
LATENT_PREFILL_SOURCES = {"sglang": frozenset({"flash_attention", "triton"})}


def latent_prefill_sources(engine: str) -> frozenset[str]:
    """`LATENT_PREFILL_SOURCES` of an engine (none for most)."""
    return LATENT_PREFILL_SOURCES.get(engine, frozenset())

# Which rows each imported law is fitted on: (class, database dtype, or dtypes: per shape the fastest
# row of any of them). FP8 GEMMs on the per-tensor and the block-scaled rows, the faster per shape:
# perfmodel's one FP8 weight format stands for both (Llama-3.1-70B FP8 is per-tensor, DeepSeek's and
# Qwen3's FP8 checkpoints 128x128 blocks), and an engine's block kernel is at times several times
# slower than its per-tensor one at decode sizes (vLLM's rows: evidence/fp8-gemm-import/).
# The quantised-expert classes are fitted on the rows of the format the checkpoints hold: FP8 ones
# use 128x128 block scales (DeepSeek-R1/V3, Qwen3-235B-FP8, MiniMax-M2.5: fp8_block, not the
# per-tensor fp8 rows), MXFP4 ones run weight-only with bf16 activations on Hopper (gpt-oss:
# w4a16_mxfp4).
FIT_ROWS = {"gemm_bf16": ("gemm", "bfloat16"), "gemm_fp8": ("gemm", ("fp8", "fp8_block")),
            "moe_bf16": ("moe", "bfloat16"), "moe_w4a16": ("moe", "int4_wo"),
            "moe_fp8": ("moe", "fp8_block"), "moe_nvfp4": ("moe", "nvfp4"), "moe_mxfp4": ("moe", "w4a16_mxfp4"),
            "attention_gqa": ("attention_decode", "bfloat16"), "attention_mla": ("mla_decode", "bfloat16")}
# Which rows each imported prefill law (`<class>.prefill`, the `layers.PREFILL` variant a prefill step
# prices its causal attention and routed experts by) is fitted on: (class, rows, database dtype).
PREFILL_FIT_ROWS = {"attention_gqa": ("attention_prefill", "bfloat16"), "attention_mla": ("mla_prefill", "bfloat16"),
                    "moe_bf16": ("moe", "bfloat16"), "moe_w4a16": ("moe", "int4_wo"), "moe_fp8": ("moe", "fp8_block"),
                    "moe_nvfp4": ("moe", "nvfp4"), "moe_mxfp4": ("moe", "w4a16_mxfp4")}
PREFILL_MIN_TOKENS = 256  # MoE rows a step carrying prefill reaches: from a short chunk to the step budget (as measure/prefill.py)
FIT_POINTS = 240  # points per law: evenly spaced over the decode-size rows sorted by bytes (the fit is O(n^2))
DECODE_MAX_TOKENS = 4096  # rows a decode or verify step reaches: GEMM M and MoE tokens up to this
SAMPLE_MAX_TOKENS = 1024  # GEMM / MoE rows kept as samples for lookup, and attention rows up to
SAMPLE_MAX_SEQS = 256  # this many sequences over prefixes of SAMPLE_MIN_CONTEXT or more (an imported profile
SAMPLE_MIN_CONTEXT = 1023  # stays a few MB: input files are capped at 10 MB)
COLL_MAX_BYTES = 4 << 20  # collective laws on decode-range messages, as measure/collectives.py fits them
# and a second law on the larger messages a prompt's step sends (`CollectiveFit.min_bytes`): carried
# to them, the decode-range law priced 117 MB all-reduces (DeepSeek's 8192-token prompt on TP8) 2-3x
# slower than the database's own rows at that size (evidence/collective-sizes/)


class AicError(ValueError):
    """A one-line input error: the package missing, an unknown system, engine or version."""


# ------------------------------------------------------------------------------ the database on disk
def _version_key(v: str) -> tuple:
    """Sortable key of '0.5.14', '1.3.0rc20', '0.5.6.post2', '0.1.dev19262' (pre-releases before the release)."""
    m = re.match(r"^v?(\d+(?:\.\d+)*)(?:\.?(rc|a|b|dev)(\d+))?(?:\.post(\d+))?", v)
    if not m:
        return ((), 0, 0, 0, v)
    nums = tuple(int(x) for x in m[1].split("."))
    pre = {"dev": -4, "a": -3, "b": -2, "rc": -1, None: 0}[m[2]]
    return (nums, pre, int(m[3] or 0), int(m[4] or 0), v)


def package_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return None


def _read_table(path: Path, where: dict | None = None) -> list[dict]:
    """A table's rows as dicts, keeping those whose column `c` is in `where[c]` (a set of values)."""
    where = {k: set(v) for k, v in (where or {}).items()}
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise AicError(f"reading {path.name} needs pyarrow: {INSTALL}") from None
        names = set(pq.read_schema(path).names)
        filters = [(k, "in", sorted(v)) for k, v in where.items() if k in names] or None
        cols = pq.read_table(path, filters=filters).to_pydict()
        keys = list(cols)
        return [dict(zip(keys, vals)) for vals in zip(*cols.values())]
    with open(path, newline="") as f:
        rows = [{k: _cell(v) for k, v in r.items()} for r in csv.DictReader(f)]
    return [r for r in rows if all(k not in r or r[k] in v for k, v in where.items())]


def _cell(s: str):
    for cast in (int, float):
        try:
            return cast(s)
        except ValueError:
            pass
    return s


@dataclass(frozen=True)
class Table:
    family: str  # gemm, moe, attention, mla, comm
    file: str  # the table's file name without suffix


TABLES = {
    "gemm": Table("gemm", "gemm_perf"), "moe": Table("moe", "moe_perf"),
    "attention_decode": Table("attention", "generation_attention_perf"),
    "attention_prefill": Table("attention", "context_attention_perf"),
    "mla_decode": Table("mla", "generation_mla_perf"), "mla_prefill": Table("mla", "context_mla_perf"),
    "custom_allreduce": Table("comm", "custom_allreduce_perf"),
}


class Database:
    """aiconfigurator's systems folder: the installed package's (`installed()`), or a tree laid out
    like it (the test fixtures)."""

    def __init__(self, root: Path, version: str):
        self.root = Path(root)
        self.version = version
        self._yaml: dict[str, dict] = {}

    @classmethod
    def installed(cls) -> Database:
        from importlib import resources

        try:
            root = resources.files(MODULE) / "systems"
        except ModuleNotFoundError:
            raise AicError(f"aiconfigurator's database is not installed ({PACKAGE}): {INSTALL}") from None
        return cls(Path(str(root)), package_version() or "unknown")

    def where(self, rel: Path) -> str:
        """A file's path as recorded: inside the package (`aiconfigurator_core/systems/...`)."""
        return f"{MODULE}/systems/{rel.as_posix()}"

    def _system_yaml(self, system: str) -> dict:
        import yaml

        if system not in self._yaml:
            path = self.root / f"{system}.yaml"
            if not path.is_file():
                raise AicError(f"--system {system!r}: not in {PACKAGE} {self.version} (known: {', '.join(self.systems())})")
            self._yaml[system] = yaml.safe_load(path.read_text()) or {}
        return self._yaml[system]

    def data_dir(self, system: str) -> Path:
        return self.root / self._system_yaml(system).get("data_dir", f"data/{system}")

    def systems(self) -> list[str]:
        """Systems with at least one data table."""
        out = []
        for y in sorted(self.root.glob("*.yaml")):
            try:
                import yaml

                spec = yaml.safe_load(y.read_text()) or {}
            except Exception:  # the package's other yaml files (query_versions, lane defaults)
                continue
            if isinstance(spec, dict) and "data_dir" in spec and any((self.root / spec["data_dir"]).glob("*/*/*/*_perf.*")):
                out.append(y.stem)
        return out

    def versions(self, system: str, engine: str) -> list[str]:
        """Versions of `engine` with at least one kernel table on `system`, oldest first."""
        d = self.data_dir(system)
        vs = {p.parent.name for t in TABLES.values() if t.family != "comm"
              for p in d.glob(f"{t.family}/{engine}/*/{t.file}.*")}
        return sorted(vs, key=_version_key)

    def current(self, system: str, engine: str) -> str | None:
        """The package's maintained version of `engine` on `system` (query_versions.yaml), else the newest."""
        import yaml

        path = self.root / "query_versions.yaml"
        vs = self.versions(system, engine)
        if path.is_file():
            doc = yaml.safe_load(path.read_text()) or {}
            entry = (doc.get("overrides") or {}).get(system, {}).get(engine) or (doc.get("defaults") or {}).get(engine) or {}
            cur = str(entry.get("current") or "")
            if cur in vs:
                return cur
        return vs[-1] if vs else None

    def table(self, system: str, engine: str, version: str, name: str) -> tuple[Path, str] | None:
        """The file of table `name` for engine@version on system, and the version it holds: that
        version's, else the newest older version's (the package's own backward fill), else None."""
        t = TABLES[name]
        base = self.data_dir(system) / t.family / engine
        found = []
        for p in base.glob(f"*/{t.file}.*"):
            v = p.parent.name
            if p.suffix in (".parquet", ".csv") and _version_key(v) <= _version_key(version):
                found.append((_version_key(v), p, v))
        if not found:
            return None
        _, p, v = max(found)
        return p, v

    def nccl_table(self, system: str) -> Path | None:
        """The NCCL table of the system's NCCL version (its yaml's misc.nccl_version), else the newest."""
        d = self.data_dir(system) / "comm" / "nccl"
        tabs = sorted(d.glob("*/nccl_perf.*"), key=lambda p: _version_key(p.parent.name))
        want = str((self._system_yaml(system).get("misc") or {}).get("nccl_version") or "")
        pick = [p for p in tabs if p.parent.name == want]
        return (pick or tabs or [None])[-1]

    def rel(self, path: Path) -> Path:
        return path.relative_to(self.root)


def parse_engine(spec: str) -> tuple[str, str | None]:
    """'sglang@0.5.14' -> ('sglang', '0.5.14'); 'sglang' -> ('sglang', None)."""
    engine, _, version = spec.partition("@")
    engine = engine.strip().lower()
    if engine not in ENGINES:
        raise AicError(f"--engine {spec!r}: unknown engine {engine!r} (known: {', '.join(ENGINES)}; e.g. sglang@0.5.14)")
    return engine, (version.strip() or None)


def resolve(db: Database, system: str, engine_spec: str) -> tuple[str, str, str]:
    """(system, engine, version) checked against the database: one line naming what is wrong."""
    if system not in db.systems():
        raise AicError(f"--system {system!r}: not a system of {PACKAGE} {db.version} with data (known: {', '.join(db.systems())})")
    engine, version = parse_engine(engine_spec)
    vs = db.versions(system, engine)
    if not vs:
        raise AicError(f"--engine {engine_spec!r}: {PACKAGE} {db.version} has no {engine} tables for {system}")
    version = version or db.current(system, engine)
    if version not in vs:
        raise AicError(f"--engine {engine_spec!r}: {system} has {engine} tables for {', '.join(vs)}, not {version}")
    return system, engine, version


# ------------------------------------------------------------------------------ rows -> points
@dataclass(frozen=True)
class Point:
    """One database row as the step model's op and its measured time."""

    cls: str  # the kernel class the op is priced by (or "all_reduce")
    kind: str  # what the row times: gemm, moe, attention_decode, attention_prefill, mla_decode, mla_prefill, all_reduce
    dtype: str  # the database's dtype of the row (KV-cache dtype for attention)
    op: Op | None
    t_us: float
    kernel_source: str
    shape: dict  # the fields a sample of it carries (the step's probe fields)
    n_gpus: int = 1
    bytes_per_gpu: float = 0.0  # collectives
    graph: bool = True


@lru_cache(maxsize=4096)
def balanced_experts(T: int, E: int, k: int) -> int:
    """Distinct experts the database's "balanced" routing touches with T tokens (module docstring)."""
    stride = math.ceil(E / k)
    ids = set()
    for t in range(T):
        for i in range(k):
            ids.add((t + i * stride) % E if T >= stride else int((t * stride / T + i * stride) % E))
            if len(ids) == E:
                return E
    return len(ids)


def _fastest(points: list[Point], by=None) -> list[Point]:
    """One point per (class, kind, dtype, shape, GPUs, graph), or per `by(point)`: the fastest kernel's."""
    best: dict[tuple, Point] = {}
    for p in points:
        key = by(p) if by else (p.cls, p.kind, p.dtype, tuple(p.shape.items()), p.n_gpus, p.graph)  # one converter: one key order
        if key not in best or p.t_us < best[key].t_us:
            best[key] = p
    return list(best.values())


def gemm_points(rows: list[dict]) -> list[Point]:
    out = []
    for r in rows:
        wd = GEMM_DTYPES.get(r["gemm_dtype"])
        if wd is None or r["latency"] <= 0:
            continue
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        op = gemm_op(m, k, n, wd)
        out.append(Point(op.kernel_class, "gemm", r["gemm_dtype"], op, r["latency"] * 1e3, r["kernel_source"],
                         {"name": f"N{n}_K{k}", "M": m, "N": n, "K": k}))
    return _fastest(out)


def moe_points(rows: list[dict]) -> list[Point]:
    """Rows split by tensor parallelism only, under "balanced" routing (the laws' rows and the
    tensor-parallel probe's samples: every GPU sees every token, so the experts a call reads are
    counted from the routing rule), and expert-parallel rows under EP_DISTRIBUTION (the
    expert-parallel probe's samples only, `ep` among their shape fields: what one GPU's tokens are
    there depends on the routing, and these rows time the busiest GPU's share of a skewed one)."""
    out = []
    for r in rows:
        wd = MOE_DTYPES.get(r["moe_dtype"])
        ep = int(r["moe_ep_size"])
        if wd is None or r.get("distribution") != ("balanced" if ep == 1 else EP_DISTRIBUTION) or r["latency"] <= 0:
            continue
        T, H, I, k, E, tp = (int(r[c]) for c in ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size"))
        if I % tp or E % ep or (ep > 1 and (tp != 1 or ep > EP_MAX_GPUS)):
            continue
        split = {"ep": ep} if ep > 1 else {}
        # expert-parallel: the busiest GPU's experts as the step counts them for such a layout
        touched = expected_max_distinct_per_gpu(E, k, T, ep) if split else balanced_experts(T, E, k)
        fields = {"shape": f"E{E}_H{H}_I{I}_k{k}_tp{tp}" + (f"_ep{ep}" if split else ""),
                  "T": T, "E": E, "k": k, "H": H, "I": I // tp} | split
        op = routed_experts_op(T, H, I, k, tp * ep, wd, touched * 3.0 * H * (I // tp) * WEIGHT_BYTES[wd],
                               probe=moe_probe(E, H, I // tp, k, T, wd, split.get("ep")), slices=touched)
        out.append(Point(op.kernel_class, "moe", r["moe_dtype"], op, r["latency"] * 1e3, r["kernel_source"], fields))
    return _fastest(out)


def law_row(p: Point) -> bool:
    """A row a kernel law is fitted on, and one the transfer check prices (`perfmodel.transfer`):
    every row but the expert-parallel MoE ones, which are kept as samples only (their time is the
    busiest GPU's under a skewed routing, not the work of the call the step's op describes)."""
    return "ep" not in p.shape


def attention_points(rows: list[dict], prefill: bool) -> list[Point]:
    out = []
    kind = "attention_prefill" if prefill else "attention_decode"
    for r in rows:
        kvb = KV_BYTES.get(r["kv_cache_dtype"])
        if kvb is None or r.get("attn_dtype", "bfloat16") != "bfloat16" or r["latency"] <= 0:
            continue
        C, hq, hkv, D = int(r["batch_size"]), int(r["num_heads"]), int(r["num_key_value_heads"]), int(r["head_dim"])
        window = int(r.get("window_size") or 0)
        if prefill:  # a prompt of isl tokens over no prefix, causal, as a prefill step prices it
            q, L = int(r["isl"]), 0
            op = gqa_prefill_attention_op(C, q, L, hq, hkv, D, kvb, window=window or None)
        else:
            q, L = 1, int(r["step"])
            op = gqa_attention_op(C, q, L + q if not window else min(L + q, window + q), hq, hkv, D, kvb)
        out.append(Point("attention_gqa", kind, r["kv_cache_dtype"], op, r["latency"] * 1e3, r["kernel_source"],
                         {"shape": f"gqa_hq{hq}_hkv{hkv}_d{D}" + (f"_w{window}" if window else ""), "kind": "gqa",
                          "C": C, "q": q, "L": L, "Hq": hq, "Hkv": hkv, "D": D} | ({"window": window} if window else {})))
    return _fastest(out)


def mla_points(rows: list[dict], prefill: bool, latent_sources: frozenset[str] = frozenset()) -> list[Point]:
    """MLA rows; a prefill row of a kernel source in `latent_sources` as the latent-form op it timed
    (`LATENT_PREFILL_SOURCES`), any other as the uncompressed form a prompt runs in."""
    out = []
    kind = "mla_prefill" if prefill else "mla_decode"
    for r in rows:
        kvb = KV_BYTES.get(r["kv_cache_dtype"])
        if kvb is None or r.get("mla_dtype", "bfloat16") != "bfloat16" or r["latency"] <= 0:
            continue
        C, h = int(r["batch_size"]), int(r["num_heads"])
        q, L = (int(r["isl"]), 0) if prefill else (1, int(r["step"]))
        if not prefill:
            op = mla_attention_op(C, q, L, h, MLA_LATENT, MLA_ROPE, kvb)
        elif r["kernel_source"] in latent_sources:
            op = mla_latent_prefill_attention_op(C, q, L, h, MLA_LATENT, MLA_ROPE, kvb)
        else:
            op = mla_prefill_attention_op(C, q, L, h, MLA_NOPE + MLA_ROPE, MLA_V, MLA_LATENT + MLA_ROPE, kvb)
        out.append(Point("attention_mla", kind, r["kv_cache_dtype"], op, r["latency"] * 1e3, r["kernel_source"],
                         {"shape": f"mla_h{h}", "kind": "mla", "C": C, "q": q, "L": L, "H": h}))
    return _fastest(out)


def allreduce_points(rows: list[dict], nccl: bool = False) -> list[Point]:
    """All-reduce rows: an engine's custom all-reduce (graph-captured or eager, as its kernel says;
    TRT-LLM's table does not say: taken as graph-captured, as TRT-LLM runs decode), or NCCL's."""
    out = []
    for r in rows:
        if r.get("op_name", "all_reduce") != "all_reduce" or r["latency"] <= 0:
            continue
        src = str(r["kernel_source"])
        if nccl:
            elem = {"half": 2.0, "bfloat16": 2.0, "float16": 2.0, "int8": 1.0, "float32": 4.0}.get(str(r.get("nccl_dtype")))
            graph = False
        else:
            if src not in ("TRTLLM",) and not src.endswith(("_graph", "_eager")):
                continue  # TRT-LLM's MNNVL variants: another algorithm than its default one
            elem = {"bfloat16": 2.0, "float16": 2.0}.get(str(r.get("allreduce_dtype", "bfloat16")))
            graph = not src.endswith("_eager")
        if elem is None:
            continue
        n, size = int(r["num_gpus"]), int(r["message_size"])
        out.append(Point("all_reduce", "all_reduce_nccl" if nccl else "all_reduce", str(r.get("nccl_dtype") or r.get("allreduce_dtype")),
                         None, r["latency"] * 1e3, src, {"n_gpus": n, "elements": size}, n_gpus=n,
                         bytes_per_gpu=size * elem, graph=graph))
    return _fastest(out)


def points(db: Database, system: str, engine: str, version: str, kinds=None,
           gemm_dtypes: set[str] | None = None) -> tuple[dict[str, list[Point]], dict[str, str]]:
    """The system's rows of engine@version the step model has an op for, by what they time, and
    the table each came from (a path inside the package; "device": the device name the rows record)."""
    readers = {
        "gemm": (gemm_points, {"gemm_dtype": gemm_dtypes} if gemm_dtypes else None),
        "moe": (moe_points, {"distribution": {"balanced", EP_DISTRIBUTION}}),
        "attention_decode": (lambda rows: attention_points(rows, False), None),
        "attention_prefill": (lambda rows: attention_points(rows, True), None),
        "mla_decode": (lambda rows: mla_points(rows, False), None),
        "mla_prefill": (lambda rows: mla_points(rows, True, latent_prefill_sources(engine)), None),
        "custom_allreduce": (allreduce_points, None),
    }
    out: dict[str, list[Point]] = {}
    tables: dict[str, str] = {}
    for kind, (conv, where) in readers.items():
        if kinds is not None and kind not in kinds:
            continue
        hit = db.table(system, engine, version, kind)
        if hit is None:
            continue
        path, _ = hit
        rows = _read_table(path, where)
        pts = conv(rows)
        if pts:
            out[kind] = pts
            tables[kind] = db.where(db.rel(path))
            if rows and "device" in rows[0]:
                tables.setdefault("device", str(rows[0]["device"]))
    if kinds is None or "nccl" in kinds:
        path = db.nccl_table(system)
        if path is not None:
            pts = allreduce_points(_read_table(path, {"op_name": {"all_reduce"}}), nccl=True)
            if pts:
                out["nccl"] = pts
                tables["nccl"] = db.where(db.rel(path))
    return out, tables


# ------------------------------------------------------------------------------ points -> a profile
def _decode_size(p: Point) -> bool:
    """A row a decode or verify step reaches (tokens of a GEMM / MoE call up to DECODE_MAX_TOKENS)."""
    s = p.shape
    return s.get("M", s.get("T", 0)) <= DECODE_MAX_TOKENS


def _prefill_size(p: Point) -> bool:
    """A row a prefill step prices by its class's prefill law: causal attention over a prompt (every
    prefill row), routed experts over PREFILL_MIN_TOKENS tokens or more (every size the database has)."""
    return p.kind != "moe" or p.shape["T"] >= PREFILL_MIN_TOKENS


def _spread(pts: list[Point], n: int) -> list[Point]:
    """n points evenly spaced over `pts` sorted by bytes then FLOPs (all of them when fewer)."""
    pts = sorted(pts, key=lambda p: (p.op.bytes, p.op.flops, p.t_us))
    if len(pts) <= n:
        return pts
    idx = sorted({round(i * (len(pts) - 1) / (n - 1)) for i in range(n)})
    return [pts[i] for i in idx]


# the bench and provider the step's probes name (layers.py)
SAMPLE_BENCH = {"gemm_bf16": "gemm", "gemm_fp8": "gemm", "attention_gqa": "attention", "attention_mla": "attention"} | {
    moe_class(f): "moe" for f in MOE_PROVIDERS}
SAMPLE_PROVIDER = {"gemm_bf16": "torch.matmul", "attention_gqa": "triton", "attention_mla": "triton"} | {
    moe_class(f): p for f, p in MOE_PROVIDERS.items()}


def _sample(p: Point) -> Sample:
    return Sample(shape=p.shape, bytes=p.op.bytes, flops=p.op.flops, median_ms=p.t_us / 1e3, provider=SAMPLE_PROVIDER[p.cls],
                  kernel_source=p.kernel_source)


def _keep_as_sample(p: Point) -> bool:
    """Rows the step's probes can price from (bf16 weights / bf16 KV, decode: q = 1, no window), on
    the grid `perfmodel measure` samples (powers of two: lookup interpolates between them in
    log-log), up to SAMPLE_MAX_TOKENS GEMM or MoE tokens and SAMPLE_MAX_SEQS sequences, attention over
    prefixes of SAMPLE_MIN_CONTEXT or more (shorter ones are priced by the law). FP8 GEMM rows are
    not kept: the step's FP8 GEMMs carry no probe (samples record no weight format)."""
    s = p.shape
    if p.cls not in SAMPLE_PROVIDER or p.dtype != FIT_ROWS[p.cls][1]:
        return False
    if "window" in s or s.get("q", 1) != 1 or s.get("L", SAMPLE_MIN_CONTEXT) < SAMPLE_MIN_CONTEXT:
        return False
    n = s.get("M", s.get("T", s.get("C", 1)))
    return n & (n - 1) == 0 and n <= (SAMPLE_MAX_SEQS if "C" in s else SAMPLE_MAX_TOKENS)


def _best_rate(pts: list[Point]) -> float | None:
    rates = [p.op.flops / (p.t_us * 1e6) for p in pts if p.op.flops > 0]
    return max(rates) if rates else None


def _latent_note(engine: str, kind: str, pts: list[Point]) -> str:
    """What a prefill law's source says of rows read in the latent form (`LATENT_PREFILL_SOURCES`)."""
    latent = sorted({p.kernel_source for p in pts} & latent_prefill_sources(engine)) if kind == "mla_prefill" else []
    return (f"; the {', '.join(latent)} rows read as the latent form they time (576-dim K, 512-dim V, one KV head), "
            f"the law priced on the uncompressed form the engine runs a prompt in" if latent else "")


def _dtypes(dtype: str | tuple[str, ...]) -> tuple[str, ...]:
    return (dtype,) if isinstance(dtype, str) else dtype




def trimmed_fallback(local: Profile, lacks: list[str]) -> Profile:
    """The local profile reduced to what pricing the lacking classes needs: their laws (and
    variants), its ceilings, overheads and provenance."""
    fits = {k: f for k, f in local.fits.items() if of_key(k) is not None and of_key(k).name in lacks}
    return Profile(provenance=local.provenance, ceilings=local.ceilings, fits=fits, overheads=local.overheads)


def import_profile(db: Database, system: str, engine_spec: str, local: Profile, command: str | None = None) -> Profile:
    """engine@version's per-op rows on `system` as a profile of the system's GPU (module docstring);
    `local` (a measured profile) prices what the database lacks and lends its host overheads."""
    from perfmodel.measure.fits import fit_collective_law, fit_kernel_law
    from perfmodel.model.machine import dtype_efficiency, dtype_flops_scale
    from perfmodel.specs import registry

    system, engine, version = resolve(db, system, engine_spec)
    gpu_spec = SYSTEM_GPUS.get(system)
    if gpu_spec is None:
        raise AicError(f"--system {system!r}: no GPU spec of perfmodel's for it (mapped: {', '.join(SYSTEM_GPUS)})")
    if local.overheads is None:
        raise AicError("the local profile has no overheads: it cannot lend the host and launch terms")
    by_kind, tables = points(db, system, engine, version, kinds=set(TABLES), gemm_dtypes=set(GEMM_DTYPES) - {"nvfp4"})
    device = tables.pop("device", None)
    at = lambda kind: tables.get(kind, "")  # noqa: E731
    src = f"{PACKAGE} {db.version}: {system}, {engine} {version}"
    # ceilings: the best rate any GEMM row reached, per dtype
    gemm = by_kind.get("gemm", [])
    bf16_tf = _best_rate([p for p in gemm if p.dtype == "bfloat16"])
    fp8_tf = _best_rate([p for p in gemm if p.dtype == "fp8"])
    ceil = Ceilings(bf16_TFLOPS=bf16_tf, fp8_TFLOPS=fp8_tf if bf16_tf else None,
                    source=f"the best rate a GEMM row reached in {at('gemm')} (bfloat16; fp8 per-tensor)" if bf16_tf else "")
    gpu = registry.load_gpu(gpu_spec)
    eff = dtype_efficiency(ceil, gpu)
    fits: dict[str, KernelFit] = {}
    samples: dict[str, list[Sample]] = defaultdict(list)
    info_tables, dtypes, sources = {}, {}, {}
    for cls, (kind, dtype) in FIT_ROWS.items():
        pts = [p for p in by_kind.get(kind, []) if p.cls == cls and p.dtype in _dtypes(dtype)]
        if not isinstance(dtype, str):
            pts, dtype = _fastest(pts, lambda p: tuple(p.shape.items())), "+".join(dtype)  # per shape, any dtype
        fit_pts = [p for p in pts if _decode_size(p) and law_row(p)]
        if len(fit_pts) < 3:
            continue
        chosen = _spread(fit_pts, FIT_POINTS)
        # laws are bf16 rates: an FP8 / FP4 call's flops count as what they take at bf16's rate
        fits[cls] = fit_kernel_law(
            [p.op.bytes for p in chosen], [p.op.flops / dtype_flops_scale(gpu, p.op.compute_dtype, eff) for p in chosen],
            [p.t_us for p in chosen],
            bench=SAMPLE_BENCH[cls], default_tflops=ceil.bf16_TFLOPS,
            source=f"{src}: {at(kind)}, {dtype} rows; fitted on {len(chosen)} of {len(fit_pts)} decode-size rows")
        samples[SAMPLE_BENCH[cls]] += [_sample(p) for p in pts if _keep_as_sample(p)]
        info_tables[cls], dtypes[cls] = at(kind), dtype
        sources[cls] = sorted({p.kernel_source for p in pts})
    for cls, (kind, dtype) in PREFILL_FIT_ROWS.items():
        pts = [p for p in by_kind.get(kind, []) if p.cls == cls and p.dtype == dtype and _prefill_size(p) and law_row(p)]
        if len(pts) < 3:
            continue
        chosen = _spread(pts, FIT_POINTS)
        key = f"{cls}.{PREFILL}"
        decode = fits.get(cls)
        fits[key] = fit_kernel_law(
            [p.op.bytes for p in chosen], [p.op.flops / dtype_flops_scale(gpu, p.op.compute_dtype, eff) for p in chosen],
            [p.t_us for p in chosen], bench=PREFILL, default_tflops=ceil.bf16_TFLOPS, default_bw_GBps=decode.bw_GBps if decode else None,
            source=f"{src}: {at(kind)}, {dtype} rows; fitted on {len(chosen)} of {len(pts)} prefill-size rows"
                   + (f" ({PREFILL_MIN_TOKENS}+ tokens)" if kind == "moe" else " (causal over the prompt, no prefix)")
                   + _latent_note(engine, kind, pts))
        info_tables[key], dtypes[key] = at(kind), dtype
        sources[key] = sorted({p.kernel_source for p in pts})
    colls = []
    ar = by_kind.get("custom_allreduce") or by_kind.get("nccl") or []
    ar_kind = "custom_allreduce" if by_kind.get("custom_allreduce") else "nccl"
    link = _link_kind(gpu_spec)
    for (n, graph), group in sorted(_groups(ar, lambda p: (p.n_gpus, p.graph)).items()):
        bf16 = [p for p in group if p.dtype in ("bfloat16", "half")]
        small = [p for p in bf16 if p.bytes_per_gpu <= COLL_MAX_BYTES]
        large = [p for p in bf16 if p.bytes_per_gpu > COLL_MAX_BYTES]
        for pts, lo, what in ((small, 0.0, f"<= {COLL_MAX_BYTES >> 20} MB"), (large, float(COLL_MAX_BYTES), f"> {COLL_MAX_BYTES >> 20} MB")):
            if len(pts) < 2 or (lo and len(small) < 2):
                continue
            try:
                fit = fit_collective_law([p.bytes_per_gpu for p in pts], [p.t_us for p in pts], op="all_reduce",
                                         n_gpus=n, graph=graph, link=link,
                                         source=f"{src}: {at(ar_kind)} ({', '.join(sorted({p.kernel_source for p in pts}))}), "
                                                f"{len(pts)} messages {what}")
            except ValueError:
                continue
            colls.append(fit.model_copy(update={"min_bytes": lo}))
    if colls:
        info_tables["all_reduce"] = at(ar_kind)
    lacks = [c.name for c in class_by_name().values() if c.name not in fits and not c.stand_in]  # a stand-in prices the rest
    o = local.overheads
    lent = f"from the fallback profile ({local.label}): the database holds no host or launch figures"
    benches = {b: BenchResult(status="ok", samples=s, note=f"imported from {src}: the decode-size rows the step's probes reach")
               for b, s in samples.items()}
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return Profile(
        provenance=Provenance(
            kind="measured", gpu_name=device or gpu_spec, gpu_spec=gpu_spec,
            n_gpus=1, timestamp=now, command=command,
            note=f"imported from {src} (the rows' collection dates are in the package's collection_meta.yaml files)",
            imported=Imported(database=PACKAGE, database_version=db.version, licence=LICENCE, system=system, engine=engine,
                              engine_version=version, tables=info_tables, dtypes=dtypes, kernel_sources=sources, lacks=lacks)),
        ceilings=ceil, benches=benches, fits=fits, collectives=colls,
        overheads=o.model_copy(update={"source": f"{lent} ({o.source})"}),
        treebuild={k: t.model_copy(update={"source": f"{lent} ({t.source})"}) for k, t in local.treebuild.items()},
        fallback=trimmed_fallback(local, lacks) if lacks else None,
    )


def _groups(pts, key) -> dict:
    out = defaultdict(list)
    for p in pts:
        out[key(p)].append(p)
    return out


def _link_kind(gpu_spec: str) -> str:
    """The kind of the GPU's default interconnect (hwspecs), which the collective fits name."""
    from perfmodel.specs import registry

    return registry.load_link(registry.load_gpu(gpu_spec).default_interconnect).kind


# ------------------------------------------------------------------------------ --list
def catalogue(db: Database) -> list[dict]:
    """Per system and engine: the GPU spec, the versions with kernel tables (the maintained one
    first) and what each would import."""
    out = []
    for system in db.systems():
        for engine in ENGINES:
            vs = db.versions(system, engine)
            if not vs:
                continue
            cur = db.current(system, engine)
            have = [k for k in TABLES if k != "custom_allreduce" and db.table(system, engine, cur, k) is not None]
            out.append({"system": system, "gpu_spec": SYSTEM_GPUS.get(system), "engine": engine, "current": cur,
                        "versions": vs, "tables": have})
    return out
