"""The engine server settings of InferenceX's benchmark runs, as its scripts set them.

Both public serving sets perfmodel validates against hold InferenceX runs: the published points
(`perfmodel/data/published_serving.yaml`, each with its run and date) and most of aiconfigurator's
silicon rows (`perfmodel/silicon.py`, each with its `measured=` date). InferenceX launches each
server from a script per model, precision, GPU and engine (SemiAnalysisAI/InferenceX
`benchmarks/`, hwspecs/SOURCES.md Part 3 row 28 [S69]) whose flags shape when a prompt runs:
the step budget, the running requests at most, SGLang's `--scheduler-recv-interval` and TRT-LLM's
batch waiting. `settings` gives, for one run, what its script set, read from the script as it
stood at the run's date; a setting the script does not pass is left to the engine's default
(None). Nothing here is fitted: a setting is only what a script sets.

Scripts read (paths at the commits named; the scripts moved from `benchmarks/<name>_slurm.sh` or
`_docker.sh` to `benchmarks/<name>.sh` on 2026-01-22, b0c4ed21b, then under
`benchmarks/single_node/` and `benchmarks/single_node/fixed_seq_len/`, without changes to these flags):

  TRT-LLM DeepSeek-R1 (dsr1_fp8_h200_trt, dsr1_fp8_b200_trt, dsr1_fp4_b200_trt; e06929c70,
    f6a9d0b6a, daa8239f7, dd9c285b3): `--max_num_tokens` = (CONC + ISL + 64) rounded up to 64; from
    2026-01-21 (64af5a771) at least 8192. Before 2025-11-03 (17d5e204f) the scripts chose
    `--ep_size` and `enable_attention_dp` themselves, whatever the run's config (and the records)
    named: EP over every GPU on FP8, EP and attention DP above set concurrencies
    (`_dsr1_trt_layout`): the published "tp8 ep1" H200 points of 2025-11-02 ran EP8, and their TPOT
    is the "tp8 ep8" points' of the same loads (evidence/server-settings/ep_in_script.txt). With attention DP,
    `attention_dp_config: enable_balance: true, timeout_iters: 60, batching_wait_iters: 0` (in every
    DeepSeek-R1 TRT-LLM script, the MTP ones too). No `--max_batch_size` (the YAML's cuda_graph_config
    max_batch_size is the CUDA graphs', not the scheduler's). dsr1_fp8_b200_trt from 2026-01-29
    (ec7bafaae): ISL = OSL = 1024 and CONC >= 64 set `batch_wait_timeout_iters: 40`,
    `batch_wait_max_tokens_ratio: 0.8` (DELAY_BATCHING).
  TRT-LLM DeepSeek-R1 with MTP (dsr1_fp8_h200_trt_mtp, dsr1_fp8_b200_trt_mtp, dsr1_fp4_b200_trt_mtp at
    bf3456727, 5d517074c, 0aae52d4c): `speculative_config: decoding_type: MTP`,
    `num_nextn_predict_layers` 1 with attention DP, else 3; `--max_batch_size` (per rank) CONC, or with
    attention DP CONC / TP (bf3456727), CONC / 8 (5d517074c: fp8 B200) or CONC / 4 (0aae52d4c: fp4 B200), CONC
    itself below that; `--max_num_tokens` = ((MTP + 1) x max_batch_size + ISL + 64) rounded up to 64,
    no floor. A push that adds a perf-changelog entry sweeps the entry's config keys alone
    (.github/workflows/run-sweep.yml, utils/process_changelog.py), and the entries of these three
    commits name only `dsr1-*-trt-mtp` keys: a run of that date on that GPU and precision served with
    MTP, though aiconfigurator's sample records no speculative setting (`DSR1_TRT_MTP_SWEEPS`;
    evidence/silicon-mtp-runs/).
  TRT-LLM Llama-3.1-70B (70b_fp8_h200_trt, 70b_fp8_b200_trt, 70b_fp4_b200_trt at 9596d23d7; the
    scripts were removed on 2025-10-29, 2582bce40): `--max_num_tokens 16384`; ISL = OSL = 1024 and
    TP < 8: `batch_wait_max_tokens_ratio: 0.9`, `batch_wait_timeout_iters: 20`.
  TRT-LLM gpt-oss-120b (gptoss_fp4_h200_trt, gptoss_fp4_b200_trt at e06929c70 and ec912828):
    `--max_num_tokens 20000`; `--max_batch_size` CONC (H200) or 512 (B200).
  SGLang DeepSeek-R1 FP8 on B200 and B300 (dsr1_fp8_b200, dsr1_fp8_b300 at 189ae51cc, 12ba0ae07,
    dd9c285b3): TP 8: `--scheduler-recv-interval` 10 below CONC 16, else 30; `--chunked-prefill-size
    32768`, `--max-running-requests 128`. TP 4 (8k/1k only, from 2026-01-13, 1d29967c4): 10,
    8192, 32.
  SGLang DeepSeek-R1 FP4 on B200 and B300 (dsr1_fp4_b200, dsr1_fp4_b300 at 9596d23d7, dd9c285b3):
    `--scheduler-recv-interval` 10 below CONC 16, else 30; `--chunked-prefill-size 16384`,
    `--max-running-requests 256`.
  SGLang DeepSeek-R1 FP8 on H200 (dsr1_fp8_h200 at 9596d23d7, 12ba0ae07): `--chunked-prefill-size
    32768`; `--max-running-requests` 512 at 1k/1k, else 256; no recv interval.
  SGLang DeepSeek-R1 on AMD (dsr1_fp4_mi355x at 15b7c00b0 and f267602ff: `--chunked-prefill-size`
    196608, 32768 at 8k/1k above CONC 32; dsr1_fp8_mi325x: 196608 at 15b7c00b0, 131072 at
    f267602ff (2026-02-27); dsr1_fp8_mi355x: 196608).

  vLLM MiniMax-M2.5 (minimaxm2.5_fp8_b200 from 2026-04-03, bddbf4031; minimaxm2.5_fp8_b300 from
    its first version, 2026-04-17, 340d7854c; minimaxm2.5_fp4_b200 from 2026-04-08, 79bd988e9;
    minimaxm2.5_fp4_b300 from its first version, 2026-04-17, 22d0f12f7):
    `--max-num-batched-tokens` 2 x ISL.

vLLM's other scripts set `--max-num-seqs` to CONC or more (never binding a closed loop of CONC)
and no budget, and are not listed. Not modelled here: `stream_interval` (TRT-LLM and SGLang send a request's first token
at once whatever it is: `py_executor._handle_responses`, SGLang's `len(output_ids) % interval ==
1`), the overlap schedulers (TRT-LLM's and SGLang's send a step's tokens once the next step is
launched, about a step's host time later, not a step later) and CUDA-graph batch sizes.

Pure: no file is read.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

REPO = "SemiAnalysisAI/InferenceX"
CITE = "hwspecs/SOURCES.md Part 3 row 28 [S69]"

# Dates (YYYY-MM-DD) from which a script's setting changed (the commit's date)
TRT_BUDGET_FLOOR_FROM = "2026-01-21"  # 64af5a771: MAX_NUM_TOKENS at least 8192
DSR1_FP8_B200_TRT_DELAY_BATCHING_FROM = "2026-01-29"  # ec7bafaae: DELAY_BATCHING at 1k/1k, CONC >= 64
MI325X_PREFILL_131072_FROM = "2026-02-27"  # f267602ff: dsr1_fp8_mi325x --chunked-prefill-size 131072
# vLLM MiniMax-M2.5: --max-num-batched-tokens 2 x ISL from these dates (bddbf4031, 340d7854c, 79bd988e9, 22d0f12f7)
MINIMAX_VLLM_BUDGET_FROM = {("fp8", "b200"): "2026-04-03", ("fp8", "b300"): "2026-04-17", ("fp4", "b200"): "2026-04-08",
                            ("fp4", "b300"): "2026-04-17"}
TRT_LAYOUT_IN_SCRIPT_UNTIL = "2025-11-03"  # 17d5e204f: EP_SIZE and DP_ATTENTION come from the run's config after
ADP_BALANCE_ITERS = 60  # the DeepSeek-R1 TRT-LLM scripts' attention_dp_config timeout_iters (enable_balance) with attention DP
# The sweeps that ran DeepSeek-R1 TRT-LLM's MTP configs alone (the merge of the commit named; dates UTC):
# date -> {(precision, gpu): with attention DP, the divisor of CONC in a rank's --max_batch_size (None: TP)}
DSR1_TRT_MTP_SWEEPS = {
    "2026-01-14": {("fp8", "h200"): None, ("fp8", "b200"): None, ("fp4", "b200"): None},  # bf3456727
    "2026-02-05": {("fp8", "b200"): 8},  # 5d517074c
    "2026-02-06": {("fp4", "b200"): 4},  # 0aae52d4c
}


def _dsr1_trt_layout(precision: str, gpu: str, tp: int, isl: int, osl: int, conc: int) -> tuple[int, bool]:
    """(--ep_size, enable_attention_dp) InferenceX's DeepSeek-R1 TRT-LLM scripts chose themselves before
    2025-11-03 (dsr1_fp8_h200_trt_slurm.sh, dsr1_fp8_b200_trt_slurm.sh, dsr1_fp4_b200_trt_slurm.sh at
    e06929c70), whatever the run's config named."""
    shape = {(1024, 1024): "1k1k", (1024, 8192): "1k8k", (8192, 1024): "8k1k"}.get((isl, osl))
    if precision == "fp8":  # EP over every GPU; attention DP above a concurrency
        above = {"h200": {"1k1k": 64, "1k8k": 64, "8k1k": 32}, "b200": {"1k1k": 32, "1k8k": 64, "8k1k": 64}}[gpu]
        return tp, shape is not None and conc > above[shape]
    # fp4 on B200: EP above one concurrency, attention DP above another
    ep_above = {(4, "1k1k"): 32, (4, "1k8k"): 32, (4, "8k1k"): 32, (8, "1k1k"): 8, (8, "1k8k"): 16, (8, "8k1k"): 32}
    dp = {"1k1k": lambda: conc >= 256, "1k8k": lambda: conc >= 256, "8k1k": lambda: conc > 32}
    if shape is None or (tp, shape) not in ep_above:
        return 1, False
    return (tp if conc > ep_above[tp, shape] else 1), dp[shape]()


@dataclass(frozen=True)
class ServerSettings:
    """What a run's server script set (None: left to the engine's default), by `perfmodel.Request`'s
    field names, and the script it was read from."""

    max_batched_tokens: int | None = None
    max_running: int | None = None
    recv_interval: int | None = None
    batch_wait_iters: int | None = None
    batch_wait_tokens_ratio: float | None = None
    adp_balance_iters: int | None = None
    spec: str | None = None  # speculative decoding, where the script served with it: chain ...
    drafter: str | None = None  # ... by the model's MTP module ...
    draft_tokens: int | None = None  # ... drafting num_nextn_predict_layers tokens a step
    ep_size: int | None = None  # the layout, where the script decided it itself: --ep_size ...
    attention_dp: bool | None = None  # ... and enable_attention_dp
    script: str = ""

    def request_fields(self) -> dict:
        """The engine settings as `Request` / `ObservedPoint` fields (those the script set)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("script", "ep_size", "attention_dp") and getattr(self, f.name) is not None}

    def split(self, tp: int):
        """The layout the script set over its tp GPUs (`scenario.Split`: --tp_size tp, --ep_size, attention
        data-parallel over the tp GPUs with enable_attention_dp), or None where the run's recorded layout stands."""
        from perfmodel.scenario import Split

        if self.ep_size is None or tp % self.ep_size:
            return None
        return Split(1, tp, tp // self.ep_size, self.ep_size) if self.attention_dp else Split(tp, 1, tp // self.ep_size, self.ep_size)


def trtllm_budget(isl: int, conc: int, date: str) -> int:
    """trtllm-serve's `--max_num_tokens` in InferenceX's DeepSeek-R1 scripts: (CONC + ISL + 64) rounded
    up to 64, at least 8192 from 2026-01-21."""
    n = -(-(conc + isl + 64) // 64) * 64
    return max(8192, n) if date >= TRT_BUDGET_FLOOR_FROM else n


def _dsr1_trt_mtp(precision: str, gpu: str, tp: int, isl: int, conc: int, date: str, attention_dp: bool) -> ServerSettings:
    """The settings of a DeepSeek-R1 TRT-LLM MTP run (dsr1_<precision>_<gpu>_trt_mtp at the sweep's commit)."""
    div = DSR1_TRT_MTP_SWEEPS[date][precision, gpu]
    mtp = 1 if attention_dp else 3
    per_rank = (conc // tp if div is None else (conc if conc < div else conc // div)) if attention_dp else conc
    budget = -(-((mtp + 1) * per_rank + isl + 64) // 64) * 64
    return ServerSettings(max_batched_tokens=budget, max_running=per_rank, adp_balance_iters=ADP_BALANCE_ITERS if attention_dp else None,
                          spec="chain", drafter="mtp", draft_tokens=mtp, script=_cite(f"benchmarks/dsr1_{precision}_{gpu}_trt_mtp.sh"))


def settings(engine: str, model: str, precision: str, gpu: str, *, tp: int, isl: int, osl: int, conc: int,
             date: str, attention_dp: bool = False, spec_method: str | None = None) -> ServerSettings | None:
    """The settings InferenceX's script set for one run: `engine` trtllm | sglang | vllm, `model` dsr1 |
    70b | gptoss | minimaxm2.5, `precision` fp8 | fp4, `gpu` h200 | b200 | b300 | mi325x | mi355x, `tp` the GPUs the
    server spans (its --tp / TP), the run's ISL, OSL, concurrency (CONC), date (YYYY-MM-DD), attention DP
    (its DP_ATTENTION) and speculative method where its record names one (`spec_method`; None: the
    record does not say, and a sweep that ran MTP configs alone that day decides). None: no script of
    that kind is read here (the engine's defaults stand)."""
    one_k = isl == 1024 and osl == 1024
    if (engine == "trtllm" and model == "dsr1" and (precision, gpu) in DSR1_TRT_MTP_SWEEPS.get(date, {})
            and spec_method in (None, "mtp")):
        return _dsr1_trt_mtp(precision, gpu, tp, isl, conc, date, attention_dp)
    if engine == "trtllm" and model == "dsr1" and gpu in ("h200", "b200"):
        path = f"benchmarks/dsr1_{precision}_{gpu}_trt.sh"
        wait = (precision == "fp8" and gpu == "b200" and date >= DSR1_FP8_B200_TRT_DELAY_BATCHING_FROM
                and one_k and conc >= 64)
        ep, dpa = _dsr1_trt_layout(precision, gpu, tp, isl, osl, conc) if date < TRT_LAYOUT_IN_SCRIPT_UNTIL else (None, None)
        balance = ADP_BALANCE_ITERS if (attention_dp if dpa is None else dpa) else None
        return ServerSettings(max_batched_tokens=trtllm_budget(isl, conc, date), batch_wait_iters=40 if wait else None,
                              batch_wait_tokens_ratio=0.8 if wait else None, adp_balance_iters=balance, ep_size=ep,
                              attention_dp=dpa, script=_cite(path))
    if engine == "trtllm" and model == "70b" and gpu in ("h200", "b200"):
        wait = one_k and tp < 8
        return ServerSettings(max_batched_tokens=16384, batch_wait_iters=20 if wait else None,
                              batch_wait_tokens_ratio=0.9 if wait else None,
                              script=_cite(f"benchmarks/70b_{precision}_{gpu}_trt_slurm.sh", "9596d23d7"))
    if engine == "trtllm" and model == "gptoss" and gpu in ("h200", "b200"):
        return ServerSettings(max_batched_tokens=20000, max_running=conc if gpu == "h200" else 512,
                              script=_cite(f"benchmarks/gptoss_fp4_{gpu}_trt.sh"))
    if engine == "sglang" and model == "dsr1" and gpu in ("b200", "b300"):
        path = _cite(f"benchmarks/dsr1_{precision}_{gpu}.sh")
        if precision == "fp4":
            return ServerSettings(max_batched_tokens=16384, max_running=256, recv_interval=10 if conc < 16 else 30,
                                  script=path)
        if tp == 4:
            return ServerSettings(max_batched_tokens=8192, max_running=32, recv_interval=10, script=path)
        return ServerSettings(max_batched_tokens=32768, max_running=128, recv_interval=10 if conc < 16 else 30, script=path)
    if engine == "sglang" and model == "dsr1" and gpu == "h200":
        return ServerSettings(max_batched_tokens=32768, max_running=512 if one_k else 256,
                              script=_cite("benchmarks/dsr1_fp8_h200.sh"))
    if engine == "sglang" and model == "dsr1" and gpu == "mi355x":
        size = 32768 if precision == "fp4" and isl == 8192 and osl == 1024 and conc > 32 else 196608
        return ServerSettings(max_batched_tokens=size, script=_cite(f"benchmarks/dsr1_{precision}_mi355x.sh"))
    if engine == "vllm" and model == "minimaxm2.5":
        since = MINIMAX_VLLM_BUDGET_FROM.get((precision, gpu))
        if since is None or date < since:
            return None
        return ServerSettings(max_batched_tokens=2 * isl, script=_cite(f"benchmarks/single_node/minimaxm2.5_{precision}_{gpu}.sh"))
    if engine == "sglang" and model == "dsr1" and gpu == "mi325x":
        return ServerSettings(max_batched_tokens=131072 if date >= MI325X_PREFILL_131072_FROM else 196608,
                              script=_cite("benchmarks/dsr1_fp8_mi325x.sh"))
    return None


def _cite(path: str, commit: str | None = None) -> str:
    return f"{REPO} {path}" + (f" at {commit}" if commit else " at the run's date") + f" ({CITE})"
