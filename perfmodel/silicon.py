"""aiconfigurator's measured serving points (`silicon_sample.csv`) as perfmodel serving requests.

`aiconfigurator-core` (Apache-2.0; `pip install 'perfmodel[aic]'`) ships
`aiconfigurator_core/systems/silicon_sample.csv`: serving benchmarks its authors ran on real
systems, one row per (engine and version, model, system, precision, layout, isl, osl,
concurrency), with the measured mean TTFT and TPOT. This module reads the aggregated rows
(`mode == agg`: prefill and decode on the same GPUs, the case `perfmodel project --isl --osl`
simulates) and expresses each as a `perfmodel.Request`, or says in one line why it cannot.

Row semantics, from aiconfigurator's own code (ai-dynamo/aiconfigurator,
`tools/accuracy_tracking/run_silicon.py` and `tools/accuracy_regression_testing/
predict_silicon_sample.py` pass a row's fields to `aiconfigurator.cli.api.cli_estimate`):

  batch_size         concurrent requests per attention data-parallel rank: the row's total
                     concurrency is batch_size x attention_dp_size (the sample's own
                     `silicon_concurrency=` provenance note says so on its DP rows)
  tp_size            attention tensor parallelism; attention_dp_size its data parallelism
                     (empty = 1); the GPUs of one replica are tp x attention_dp x pp, which
                     moe_tp_size x moe_ep_size split for the routed experts
  gemm_quant_mode    the dtype of the non-expert weight GEMMs; moe_quant_mode the routed
                     experts' (empty: the checkpoint's own, as aiconfigurator infers it)
  silicon_ttft_ms,   the benchmark's mean time to first token and mean time per output token
  silicon_tpot_ms    (aiconfigurator compares its `ttft`/`tpot` estimates with them)
  silicon_data_source  where the row was measured. InferenceX's runs ('db-dump/...; config_id=',
                     or 'source_file=<date>.csv; model=...; wip=...') send 10 x C requests of the
                     random dataset, C in flight, all at once after a warm-up, each request's
                     input and output lengths drawn uniformly from 0.8 x isl/osl to isl/osl
                     (perfmodel/model/SOURCES.md [V6], [V10]): `min_length_ratio` 0.8. The other
                     rows (aiconfigurator's own gap-analysis runs) do not say how their lengths
                     were drawn: fixed.

Layouts (`perfmodel.scenario`): attention TP with experts TP (`tp`: moe_tp = tp, moe_ep = 1),
attention TP with experts EP (`tp+ep`: moe_ep = tp, moe_tp = 1), data-parallel attention with
experts EP (`dp-attn+ep`: tp = 1, moe_ep = attention_dp), and any other split of attention TP x DP
and experts TP x EP as a mixed layout (`tp4xdp2+tp2xep4`, `scenario.Split`); a dense model only
`tp`; pipeline stages are not expressible. Two readings of recorded widths, each from what the
engines can run (`_layout`, `_engine_widths`): the 2026 collections record an expert-parallel
run's TP and EP multiplied (a `tp8_ep8` run as tp 64, moe_tp 8, moe_ep 8), and vLLM's data
parallelism without expert parallelism splits the experts TP over every rank (a row's moe_tp
wider than its tp is that).

Server settings: an InferenceX row is priced with what its server script set at the row's
`measured=` date (`perfmodel.inferencex`: step budget, running requests at most, SGLang's recv
interval, TRT-LLM's batch waiting, and the layout the TRT-LLM scripts chose themselves before
2025-11-03, whatever the row records); a row no script covers keeps its engine's defaults, with a
TRT-LLM budget that serves it where the default cannot (`serving_budget`).

KV-cache dtype: the rows do not record it. aiconfigurator infers it from the checkpoint
(`aiconfigurator_core.sdk.models.helpers._infer_quant_modes_from_raw_config`: an fp8, fp8_block
or nvfp4 checkpoint gets an FP8 KV cache, any other bf16), and `MODELS` records that per
checkpoint, from the `quantization_config` of the config.json aiconfigurator-core bundles
(`aiconfigurator_core/model_configs/`), so both tools price the same cache.

Pure parsing and expressing; the one file read is `load_rows` (the package's CSV).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from perfmodel import aic
from perfmodel.scenario import Request

CSV_NAME = "silicon_sample.csv"


@dataclass(frozen=True)
class Checkpoint:
    """How perfmodel serves one of the sample's model paths: its preset and the KV-cache dtype
    aiconfigurator infers from the checkpoint (module docstring)."""

    preset: str
    kv_cache: str
    note: str


# model_path -> preset. Sources: perfmodel/modelspecs/SOURCES.md for the presets; the KV dtype from
# the bundled config.json's quantization_config (aiconfigurator-core 0.12.0 model_configs/): fp8 where
# it declares a KV-cache quantization, else the engines' `auto`, the checkpoint's bf16 (aiconfigurator's
# own reading of these configs, sdk/utils.py `_infer_quantization_fields`; evidence/qwen3-fp8-step/).
# DeepSeek-R1/V3 and MiniMax-M2.5 declare none either; their fp8 stands until their runs' server
# arguments are read (InferenceX's scripts may set an FP8 KV cache on the command line).
MODELS: dict[str, Checkpoint] = {
    "deepseek-ai/DeepSeek-R1": Checkpoint("deepseek-v3", "fp8", "quant_method fp8, 128x128 blocks"),
    "deepseek-ai/DeepSeek-V3": Checkpoint("deepseek-v3", "fp8", "quant_method fp8, 128x128 blocks"),
    "nvidia/DeepSeek-R1-NVFP4": Checkpoint("deepseek-v3", "fp8", "ModelOpt NVFP4"),
    "nvidia/DeepSeek-V3.1-NVFP4": Checkpoint("deepseek-v3", "fp8", "ModelOpt NVFP4"),
    "moonshotai/Kimi-K2.5": Checkpoint("kimi-k2.6", "bf16", "compressed-tensors INT4 experts; the K2.6 preset, same text backbone"),
    "openai/gpt-oss-120b": Checkpoint("gpt-oss-120b", "bf16", "quant_method mxfp4 (no FP8 attention)"),
    "meta-llama/Llama-3.1-8B-Instruct": Checkpoint("llama-3.1-8b", "bf16", "bf16 checkpoint"),
    "nvidia/Llama-3.1-8B-Instruct-FP8": Checkpoint("llama-3.1-8b", "fp8", "ModelOpt FP8"),
    "meta-llama/Llama-3.1-70B": Checkpoint("llama-3.1-70b", "bf16", "bf16 checkpoint"),
    "Qwen/Qwen3-235B-A22B-FP8": Checkpoint("qwen3-235b-a22b", "bf16", "quant_method fp8, 128x128 blocks, no KV-cache quantization"),
    "Qwen/Qwen3-32B": Checkpoint("qwen3-32b", "bf16", "bf16 checkpoint"),
    "MiniMaxAI/MiniMax-M2.5": Checkpoint("minimax-m2.5", "fp8", "quant_method fp8, 128x128 blocks"),
    "nvidia/Qwen3-32B-NVFP4": Checkpoint("qwen3-32b", "fp8", "ModelOpt NVFP4"),
}


# InferenceX's runs: its database dump, or its dated CSV exports (a `wip=` flag in the note)
_INFERENCEX = re.compile(r"db-dump/|source_file=\d{4}-\d{2}-\d{2}\.csv;.*\bwip=")
INFERENCEX_RANGE_RATIO = 0.8  # RANDOM_RANGE_RATIO of InferenceX's benchmark workflows (SOURCES.md [V10])


class SiliconError(ValueError):
    """The sample cannot be read: one line."""


@dataclass(frozen=True)
class Row:
    """One row of silicon_sample.csv, typed (empty layout cells as aiconfigurator reads them: 1)."""

    id: str
    backend: str
    backend_version: str
    model_path: str
    system: str
    precision: str
    mode: str
    isl: int
    osl: int
    gemm_quant_mode: str
    moe_quant_mode: str
    batch_size: int
    tp_size: int
    pp_size: int
    attention_dp_size: int
    moe_tp_size: int
    moe_ep_size: int
    ttft_ms: float  # measured mean TTFT
    tpot_ms: float  # measured mean TPOT
    source: str = ""  # silicon_data_source: where and how the row was measured

    @property
    def min_length_ratio(self) -> float:
        """The share of isl/osl the benchmark drew each request's lengths from (module docstring)."""
        return INFERENCEX_RANGE_RATIO if _INFERENCEX.match(self.source) else 1.0

    @property
    def concurrency(self) -> int:
        """Requests in flight over the whole replica: batch_size per attention-DP rank."""
        return self.batch_size * self.attention_dp_size

    @property
    def layout_text(self) -> str:
        return (f"tp{self.tp_size} dp{self.attention_dp_size} pp{self.pp_size} "
                f"moe_tp{self.moe_tp_size} moe_ep{self.moe_ep_size}")


def _int(v: str, default: int = 1) -> int:
    """A layout cell: empty or 0 (the sample's 'unset') -> default."""
    v = (v or "").strip()
    return int(float(v)) if v and float(v) > 0 else default


def parse_rows(text: str) -> list[Row]:
    """Every row of the CSV text (both modes), typed; a row lacking a measured TTFT or TPOT is kept
    out (it cannot be compared). A malformed file: `SiliconError`."""
    reader = csv.DictReader(io.StringIO(text))
    need = {"id", "backend", "model_path", "system", "mode", "isl", "osl", "batch_size", "tp_size",
            "silicon_ttft_ms", "silicon_tpot_ms"}
    missing = need - set(reader.fieldnames or [])
    if missing:
        raise SiliconError(f"{CSV_NAME}: missing columns {', '.join(sorted(missing))}")
    out = []
    for i, r in enumerate(reader, start=2):
        try:
            ttft, tpot = float(r["silicon_ttft_ms"] or "nan"), float(r["silicon_tpot_ms"] or "nan")
            if not (ttft > 0 and tpot > 0):
                continue
            out.append(Row(
                id=r["id"], backend=r["backend"].strip().lower(), backend_version=(r.get("backend_version") or "").strip(),
                model_path=r["model_path"].strip(), system=r["system"].strip(), precision=(r.get("precision") or "").strip(),
                mode=r["mode"].strip(), isl=int(r["isl"]), osl=int(r["osl"]),
                gemm_quant_mode=(r.get("gemm_quant_mode") or "").strip(), moe_quant_mode=(r.get("moe_quant_mode") or "").strip(),
                batch_size=_int(r["batch_size"], 0), tp_size=_int(r["tp_size"]), pp_size=_int(r.get("pp_size", "")),
                attention_dp_size=_int(r.get("attention_dp_size", "")), moe_tp_size=_int(r.get("moe_tp_size", ""), 0),
                moe_ep_size=_int(r.get("moe_ep_size", ""), 0), ttft_ms=ttft, tpot_ms=tpot,
                source=(r.get("silicon_data_source") or "").strip()))
        except (KeyError, ValueError) as e:
            raise SiliconError(f"{CSV_NAME} line {i}: cannot read {e}") from None
    return out


def load_rows(db: aic.Database | None = None, mode: str = "agg") -> list[Row]:
    """The installed package's sample (or the one beside a test database), rows of `mode`
    ('agg', 'disagg', or None for all). Without the package: `aic.AicError` naming the install."""
    db = db or aic.Database.installed()
    path = db.root / CSV_NAME
    if not path.is_file():
        raise SiliconError(f"{aic.PACKAGE} {db.version} has no systems/{CSV_NAME}")
    rows = parse_rows(path.read_text())
    return [r for r in rows if mode is None or r.mode == mode]


# ------------------------------------------------------------------------------ rows -> requests
@dataclass(frozen=True)
class Expressed:
    """A row as a perfmodel serving scenario: `request()` builds the `perfmodel.Request`."""

    row: Row
    target: str  # hwspecs/gpus name
    gpus: int
    model: str  # preset
    parallel: str  # layout key (perfmodel.scenario.LAYOUTS)
    concurrency: int
    engine: str
    dtypes: dict[str, str] = field(default_factory=dict)
    max_batched_tokens: int | None = None  # the step's token budget: the run's script's, or where the engine's default cannot serve the row
    server: dict = field(default_factory=dict)  # the other settings of the run's script (`inferencex.ServerSettings`)
    script: str = ""  # the script they were read from

    @property
    def measured_ttft_ms(self) -> float:
        return self.row.ttft_ms

    @property
    def measured_tpot_ms(self) -> float:
        return self.row.tpot_ms

    def scenario(self) -> dict:
        """The row's serving setup as the scenario fields a `Request` and a calibration point
        (`calibration_schema.ObservedPoint`) share, its server's settings included; the
        concurrency apart (a list in a Request, a number in a point)."""
        return dict(target=self.target, gpus=self.gpus, model=self.model, parallel=self.parallel, isl=self.row.isl,
                    osl=self.row.osl, min_length_ratio=self.row.min_length_ratio, engine=self.engine,
                    dtypes=dict(self.dtypes) or None, max_batched_tokens=self.max_batched_tokens, **self.server)

    def request(self, **kw) -> Request:
        """The serving request (`perfmodel project --isl --osl --engine ...`); `kw` sets other
        scenario fields (profile, calibration, ...)."""
        return Request(**self.scenario(), concurrency=[self.concurrency], **kw)

    def describe(self) -> str:
        from perfmodel.scenario import layout_of

        dt = ",".join(f"{k}={v}" for k, v in sorted(self.dtypes.items()))
        return (f"{self.model} on {self.gpus}x {self.target} {layout_of(self.parallel).name}, {self.engine}"
                + (f" (budget {self.max_batched_tokens})" if self.max_batched_tokens else "")
                + "".join(f", {k} {v:g}" if isinstance(v, (int, float)) else f", {k} {v}" for k, v in sorted(self.server.items()))
                + f", C={self.concurrency}, {self.row.isl}/{self.row.osl}" + (f", {dt}" if dt else ""))


class NotExpressible(ValueError):
    """A row perfmodel cannot express; the message is the one-line reason (also `.reason`)."""

    @property
    def reason(self) -> str:
        return str(self)


def _weights(row: Row, moe: bool) -> dict[str, str]:
    """The weight dtypes the row's quant modes set (aic.GEMM_DTYPES, aic.MOE_DTYPES: the database's
    names -> perfmodel's). An empty mode keeps the preset's (the checkpoint's own); a weight-only
    INT4 GEMM mode too: the INT4 checkpoints of the sample quantize the routed experts only."""
    out = {}
    g, m = row.gemm_quant_mode, row.moe_quant_mode
    if g and g != "int4_wo":
        wd = aic.GEMM_DTYPES.get(g)
        if wd is None:
            raise NotExpressible(f"gemm_quant_mode {g}: no perfmodel weight format (known: {', '.join(aic.GEMM_DTYPES)}, int4_wo)")
        out |= {"attention": wd, "dense_mlp": wd} | ({"shared_experts": wd} if moe else {})
    if m and moe:
        wd = aic.MOE_DTYPES.get(m)
        if wd is None:
            raise NotExpressible(f"moe_quant_mode {m}: no perfmodel weight format (known: {', '.join(aic.MOE_DTYPES)})")
        out["routed_experts"] = wd
    return out


def _layout(row: Row, moe: bool) -> tuple[str, int]:
    """(layout key, GPUs) of the row's split, or NotExpressible. The named layouts where the split
    is one of them (tp, tp+ep, dp-attn+ep), else the mixed one (`scenario.Split`: attention TP x
    DP, experts TP x EP)."""
    from perfmodel.scenario import Split

    tp, dp, mtp, mep = _engine_widths(row)
    if row.pp_size > 1:
        raise NotExpressible(f"pipeline parallel (pp {row.pp_size}): perfmodel has no pipeline stages")
    if not moe:
        if dp > 1:
            raise NotExpressible(f"dense model with attention DP {dp}: perfmodel serves a dense model TP only")
        return "tp", tp
    n = tp * dp
    mtp, mep = mtp or (n // mep if mep else n), mep or 1  # aiconfigurator infers a missing width from the other
    if mtp * mep != n and row.backend == "vllm" and mep == 1 and dp == 1 and mtp > n and mtp % tp == 0:
        # vLLM's data parallelism without --enable-expert-parallel splits the experts TP over all
        # dp x tp ranks (FusedMoEParallelConfig: the MoE's TP flattened across DP), and nothing
        # else puts experts over more GPUs than attention: the row's moe_tp is the world size and
        # its unrecorded attention DP moe_tp / tp (one Qwen3-235B FP8 replica, 235 GB of weights,
        # cannot sit on the one 141 GB H200 its tp_size says). Its batch_size is the whole
        # benchmark's concurrency (the sample's silicon_concurrency note), so it stays the row's.
        dp, n = mtp // tp, mtp
    if mtp * mep != n:
        raise NotExpressible(f"layout {row.layout_text}: experts split over {mtp * mep} GPUs, attention over {n}")
    return split_layout(Split(tp, dp, mtp, mep))


def split_layout(sp) -> tuple[str, int]:
    """(layout key, GPUs) of a split (`scenario.Split`): the named layout where the split is one of
    them (tp, tp+ep, dp-attn+ep), else the mixed one (`tp4xdp2+tp2xep4`). The one builder of a
    served layout, for the silicon rows and the published points."""
    n = sp.n_gpus
    named = {(n, 1, n, 1): "tp", (n, 1, 1, n): "tp-attn-ep-moe", (1, n, 1, n): "ep"}
    return named.get((sp.attn_tp, sp.attn_dp, sp.moe_tp, sp.moe_ep), sp.key()), n


# The 2026 collections of the sample (`source_file=2026-...csv`, `db-dump/...`) record an expert-parallel
# run's engine widths multiplied: a run the id names `tp8_ep8` (SGLang `--tp 8 --ep 8`, TRT-LLM
# tp_size 8, moe_ep_size 8: 8 GPUs, experts EP8 inside them) is recorded tp 64, moe_tp 8, moe_ep 8
# (attention DP: tp 1, attention_dp 64), and vLLM's `tp4_ep4` (`--tp 4 --enable-expert-parallel`)
# tp 4, attention_dp 4, moe_ep 16. Read literally these are 64 GPUs for a DeepSeek replica at C=4
# and 16 H100s of an 8-GPU node; the ids and the configs' own names say what ran.
_MULTIPLIED_SOURCES = ("source_file=2026-", "db-dump/")


def _engine_widths(row: Row) -> tuple[int, int, int, int]:
    """(tp, attention_dp, moe_tp, moe_ep) the engine ran: the recorded cells, or, for a row of the
    2026 collections whose widths are the engine's TP and EP multiplied (above), T = the engine's
    TP GPUs with experts EP E inside them (moe_tp T / E), attention TP T or, where attention is
    data-parallel, DP T. The row's concurrency (batch_size x the recorded attention DP, the
    sample's silicon_concurrency) is the benchmark's whole concurrency either way."""
    tp, dp, mtp, mep = row.tp_size, row.attention_dp_size, row.moe_tp_size, row.moe_ep_size
    if not row.source.startswith(_MULTIPLIED_SOURCES):
        return tp, dp, mtp, mep
    if row.backend == "vllm" and tp > 1 and tp == dp and mtp <= 1 and mep == tp * dp:
        return tp, 1, 1, tp  # vLLM --tp T --enable-expert-parallel: EP over the T GPUs
    if mtp > 1 and 1 < mep <= mtp and mtp % mep == 0 and tp * dp == mtp * mep and (tp == 1 or dp == 1):
        T = mtp
        return (T, 1, T // mep, mep) if dp == 1 else (1, T, T // mep, mep)
    return tp, dp, mtp, mep


def express(row: Row) -> Expressed:
    """The row as a perfmodel serving scenario, or `NotExpressible` with the one-line reason."""
    from perfmodel.specs import registry

    if row.mode != "agg":
        raise NotExpressible(f"mode {row.mode}: perfmodel simulates aggregated serving only")
    if row.backend not in aic.ENGINES:
        raise NotExpressible(f"engine {row.backend}: perfmodel schedules {', '.join(aic.ENGINES)}")
    gpu = aic.SYSTEM_GPUS.get(row.system)
    if gpu is None:
        raise NotExpressible(f"system {row.system}: no GPU spec (mapped: {', '.join(aic.SYSTEM_GPUS)})")
    ck = MODELS.get(row.model_path)
    if ck is None:
        raise NotExpressible(f"model {row.model_path}: no preset")
    if row.batch_size < 1:
        raise NotExpressible("batch_size missing")
    moe = registry.load_model(ck.preset).moe is not None
    parallel, n = _layout(row, moe)
    dtypes = _weights(row, moe)
    if ck.kv_cache != "bf16":
        dtypes["kv_cache"] = ck.kv_cache
    from perfmodel.scenario import layout_split

    found = server_settings(row, n, layout_split(parallel, n).attn_dp > 1)
    server = found.request_fields() if found else {}
    script_split = found.split(n) if found else None
    if script_split is not None and moe:  # the layout the run's script chose itself, whatever the row records
        parallel, n = split_layout(script_split)
    budget = server.pop("max_batched_tokens", None) or serving_budget(row.backend, gpu, row.isl, row.concurrency,
                                                                      layout_split(parallel, n).attn_dp)
    return Expressed(row=row, target=gpu, gpus=n, model=ck.preset, parallel=parallel, concurrency=row.concurrency,
                     engine=row.backend, dtypes=dtypes, max_batched_tokens=budget, server=server,
                     script=found.script if found else "")


# The sample's model paths and systems as InferenceX's scripts name them (`perfmodel.inferencex`)
INFERENCEX_MODELS = {"deepseek-ai/DeepSeek-R1": "dsr1", "deepseek-ai/DeepSeek-V3": "dsr1", "nvidia/DeepSeek-R1-NVFP4": "dsr1",
                     "meta-llama/Llama-3.1-70B": "70b", "openai/gpt-oss-120b": "gptoss", "MiniMaxAI/MiniMax-M2.5": "minimaxm2.5"}
INFERENCEX_GPUS = {"h100_sxm": "h100", "h200_sxm": "h200", "b200_sxm": "b200", "b300_sxm": "b300"}
_MEASURED = re.compile(r"\bmeasured=(\d{4}-\d{2}-\d{2})")


def server_settings(row: Row, n_gpus: int, attention_dp: bool = False):
    """The server settings of an InferenceX row's script at the row's `measured=` date, over its
    n_gpus, attention data-parallel or not (`inferencex.settings`; the sample records no speculative
    setting), or None: not an InferenceX run, no date, or a script not read (multi-node GB200 runs, vLLM's)."""
    from perfmodel import inferencex

    date = _MEASURED.search(row.source)
    model, gpu = INFERENCEX_MODELS.get(row.model_path), INFERENCEX_GPUS.get(row.system)
    if not _INFERENCEX.match(row.source) or date is None or model is None or gpu is None:
        return None
    return inferencex.settings(row.backend, model, row.precision, gpu, tp=n_gpus, isl=row.isl, osl=row.osl,
                               conc=row.concurrency, date=date.group(1), attention_dp=attention_dp)


def serving_budget(engine: str, gpu_name: str, isl: int, concurrency: int, dp_ranks: int) -> int | None:
    """The step budget (per attention-DP rank, as the engines take it) a server must have run with
    where its engine's default could not have served the load and no script of the run says
    (`server_settings`; the silicon rows and the published points alike).

    An engine without chunked prefill (TRT-LLM's `trtllm-serve` default) admits a prompt only
    whole, in a step whose token budget also carries the rank's running decodes (perfmodel/model/
    serving.py). With its default budget (8192) a prompt of isl tokens beside a rank's C/ranks
    decodes fits only when isl + C/ranks <= 8192: above that, each prompt would wait for every
    running request to finish, the decode batch would stay near 1, and the TPOT would not grow
    with C as measured. Such a load is priced with the smallest budget that serves it, isl + C/ranks;
    None where the default serves it."""
    from perfmodel.model.serving import engine_defaults
    from perfmodel.specs import registry

    eng = engine_defaults(engine, registry.load_gpu(gpu_name))
    need = isl + -(-concurrency // dp_ranks)
    return need if not eng.chunked and need > eng.max_batched_tokens else None


def express_all(rows: Iterable[Row]) -> tuple[list[Expressed], list[tuple[Row, str]]]:
    """(the rows expressed, [(row, reason)] of the others), in the rows' order."""
    ok, refused = [], []
    for r in rows:
        try:
            ok.append(express(r))
        except NotExpressible as e:
            refused.append((r, e.reason))
    return ok, refused


def reason_kind(reason: str) -> str:
    """A reason without its row's particulars ('layout tp64 dp1 ...: ...' -> 'layout: ...'), to count them."""
    head, _, tail = reason.partition(":")
    return re.sub(r"\s.*$", "", head) + (": " + re.sub(r"\d+", "N", tail.strip()) if tail else "")


def stratified(items: list, per_group: int, key) -> list:
    """At most `per_group` items per `key(item)`, evenly spaced over each group sorted by
    (concurrency, isl, osl, id): deterministic, spanning each group's loads."""
    groups: dict = {}
    for it in items:
        groups.setdefault(key(it), []).append(it)
    out = []
    for k in sorted(groups):
        g = sorted(groups[k], key=lambda e: (e.row.concurrency, e.row.isl, e.row.osl, e.row.id))
        if len(g) <= per_group:
            out += g
        elif per_group == 1:
            out.append(g[len(g) // 2])
        else:
            out += [g[round(i * (len(g) - 1) / (per_group - 1))] for i in range(per_group)]
    return out


def group_key(e: Expressed) -> tuple[str, str, str]:
    """(model, system, engine): the strata of `stratified` and of the sample run of aiconfigurator."""
    return (e.model, e.row.system, e.engine)
