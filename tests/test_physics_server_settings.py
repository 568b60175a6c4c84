"""Server settings that hold a prompt back before it runs (`perfmodel.model.serving`): SGLang's
scheduler_recv_interval and TensorRT-LLM's batch waiting, worked by hand on a stub step price and
checked on the embedded H200 profile; the InferenceX scripts' settings per run
(`perfmodel.inferencex`) and the bad values of their options.

The stub prices a decode-only step at 10 ms and any step carrying prefill tokens at 30 ms
(tests/test_physics_serving.py's), so each request's timeline can be followed by hand.
"""

import random

import pytest
from typer.testing import CliRunner

from perfmodel import inferencex
from perfmodel.api import projector as Projector
from perfmodel.cli import app
from perfmodel.model.serving import Engine, StepPricer, Workload, engine_defaults, simulate
from perfmodel.scenario import Request
from perfmodel.specs import registry


class StubPricer(StepPricer):
    def __init__(self):
        self.assumptions, self.interpolate = set(), True

    def exact(self, n_dec, ctx, prefills):
        return (30e3 if prefills else 10e3), 0.0


LENGTHS = ((100, 2), (100, 10))
TRT = Engine(name="trtllm", max_batched_tokens=1000, chunked=False, mixed=True)
SGLANG = Engine(name="sglang", max_batched_tokens=8192, chunked=True, mixed=False)


def _pj(model="llama-3.1-8b", gpus=1):
    return Projector(Request(target="h200", gpus=gpus, model=model, concurrency=[1]))


def _seed_2_10_10():
    """The seed whose three requests draw output lengths 2, 10, 10 from LENGTHS."""
    def draws(s):
        rng = random.Random(s)
        return [rng.choice(LENGTHS)[1] for _ in range(3)]
    return next(s for s in range(200) if draws(s) == [2, 10, 10])


def _stub(engine):
    pj = _pj()
    wl = Workload(lengths=LENGTHS, concurrency=2, n_requests=3, seed=_seed_2_10_10())
    return simulate(pj.model, pj.machine, pj.layout, wl, engine, pricer=StubPricer(), kv_tokens=10**6)


def _ttfts(p):
    return p.ttft_ms.mean * 3


# ----------------------------------------------------------------------------- by hand

def test_batch_waiting_by_hand():
    """Three requests of 100 prompt tokens, outputs 2, 10, 10, two in flight, TRT-LLM:
      t=0   r0, r1 prefill together (no generation request yet: no waiting) -> first tokens at 30
      t=40  r0 done; r2 sent. Without waiting, r2's prompt runs beside r1's decode: first at 70.
      With batch_wait_timeout_iters 3 (ratio 1: 101 tokens never reach 1000), r2 is held 3
      decode steps (40-70), then runs 70-100: its TTFT 30 -> 60, the others' 30.
    A ratio the step's tokens reach (101 >= 0.1 x 1000) ends the wait at once."""
    assert _ttfts(_stub(TRT)) == pytest.approx(90.0)
    waited = _stub(TRT.with_settings(batch_wait_iters=3, batch_wait_tokens_ratio=1.0))
    assert _ttfts(waited) == pytest.approx(120.0)
    assert waited.ttft_ms.median == pytest.approx(30.0)  # 30, 30 and 60
    assert _ttfts(_stub(TRT.with_settings(batch_wait_iters=3, batch_wait_tokens_ratio=0.1))) == pytest.approx(90.0)
    # r1 keeps decoding while r2 waits: its tokens come 10 ms apart until r2's prompt step
    assert waited.itl_ms.median == pytest.approx(10.0)


def test_batch_waiting_timeout_zero_never_waits():
    """TRT-LLM stops waiting once the held steps reach batch_wait_timeout_iters: at 0, never held
    (`_waiting_requests`: iters_count >= timeout_iters), whatever the ratio."""
    assert _ttfts(_stub(TRT.with_settings(batch_wait_iters=0, batch_wait_tokens_ratio=1.0))) == pytest.approx(90.0)


def test_recv_interval_by_hand():
    """The same requests under SGLang (prefill first) with scheduler_recv_interval 4:
      t=0   idle: r0, r1 received at once; their prefill 0-30 (first tokens at 30); the counter
            reaches the interval after a prefill step: received (nothing) at 30, counter 0
      t=40  one decode step (counter 1): r0 done, r2 sent, not received
      40-70 three decode steps (counter 4): received at 70; its prefill 70-100, first token at 100
    r2's TTFT 30 -> 60; with interval 1 it is received at 40 and prefilled at once."""
    assert _ttfts(_stub(SGLANG)) == pytest.approx(90.0)
    p = _stub(SGLANG.with_settings(recv_interval=4))
    assert _ttfts(p) == pytest.approx(120.0)
    assert p.ttft_ms.median == pytest.approx(30.0)  # 30, 30 and 60


# ----------------------------------------------------------------------------- physics on the profile

def _run(engine, pricer=None, **wl):
    pj = _pj()
    w = Workload(isl=1024, osl=256, min_length_ratio=0.8, concurrency=16, seed=1, **wl)
    return simulate(pj.model, pj.machine, pj.layout, w, engine, pricer=pricer, kv_tokens=10**6 if pricer else None)


def test_batch_waiting_holds_each_prompt_at_most_the_timeout():
    """16 in flight, 160 requests with drawn lengths, on the stub price (10 ms a decode step): with
    batch_wait_timeout_iters 20, a budget that takes every waiting prompt at once and a ratio never
    reached, a prompt sent while others decode waits from 0 to 20 steps (the first held prompt of a
    batch the whole 20, those sent later less): TTFT rises by more than a few steps and by at most
    20 steps, and the decodes run on through the waits."""
    eng = Engine(name="trtllm", max_batched_tokens=10**5, chunked=False, mixed=True)
    free = _run(eng, StubPricer())
    held = _run(eng.with_settings(batch_wait_iters=20, batch_wait_tokens_ratio=1.0), StubPricer())
    rise = held.ttft_ms.mean - free.ttft_ms.mean
    assert 50.0 < rise <= 200.0 + 1e-6, rise
    assert held.ttft_ms.p99 <= free.ttft_ms.p99 + 200.0 + 1e-6
    assert held.prefill_steps < free.prefill_steps / 2  # the held prompts run together
    assert held.tpot_ms.mean < free.tpot_ms.mean  # fewer 30 ms prompt steps inside each request's decodes


def _run_dp(engine, concurrency):
    pj = Projector(Request(target="h200", gpus=8, model="deepseek-v3", parallel="dp-attn+ep", concurrency=[1]))
    assert pj.layout.dp_attn == 8
    w = Workload(isl=1024, osl=256, min_length_ratio=0.8, concurrency=concurrency, seed=1)
    return simulate(pj.model, pj.machine, pj.layout, w, engine, pricer=StubPricer(), kv_tokens=10**7)


def test_attention_dp_balancing_runs_the_ranks_prompts_together():
    """TRT-LLM's enable_balance under attention DP 8 (stub price: 30 ms a step with prompts, 10 ms
    without): with 64 in flight, the prompts wait until 8 are there, one a rank, and run in one
    step; the steps with prompts fall to well under half, each request's decodes wait through fewer
    of them (TPOT falls) and its prompt waits up to 60 steps (TTFT rises by at most 60 x 30 ms).
    Without attention DP the setting changes nothing."""
    eng = Engine(name="trtllm", max_batched_tokens=2048, chunked=False, mixed=True, budget_per_dp_rank=True)
    free = _run_dp(eng, 64)
    held = _run_dp(eng.with_settings(adp_balance_iters=60), 64)
    assert held.prefill_steps < free.prefill_steps / 2
    assert held.tpot_ms.mean < 0.8 * free.tpot_ms.mean
    assert free.ttft_ms.mean < held.ttft_ms.mean <= free.ttft_ms.mean + 60 * 30.0
    # 4 in flight never fill the 8 ranks: each wait ends at the timeout, 5 steps here
    few, few_held = _run_dp(eng, 4), _run_dp(eng.with_settings(adp_balance_iters=5), 4)
    assert few.ttft_ms.mean < few_held.ttft_ms.mean <= few.ttft_ms.mean + 5 * 30.0 + 1e-6
    tp = Engine(name="trtllm", max_batched_tokens=10**5, chunked=False, mixed=True)
    assert _run(tp, StubPricer()).tpot_ms == _run(tp.with_settings(adp_balance_iters=60), StubPricer()).tpot_ms


def test_batch_waiting_raises_ttft_and_not_tpot_on_the_profile():
    """The same on the embedded H200 profile, Llama-3.1-8B under TRT-LLM's defaults: TTFT rises by
    several decode steps (the wait, and the longer step of the prompts batched together), and TPOT
    moves by less than 10%."""
    h200 = registry.load_gpu("h200-sxm")
    base = engine_defaults("trtllm", h200)
    free = _run(base)
    held = _run(base.with_settings(batch_wait_iters=20, batch_wait_tokens_ratio=1.0))
    step = free.itl_ms.median  # one decode step of the loaded batch
    assert held.ttft_ms.mean - free.ttft_ms.mean > 5 * step
    assert held.tpot_ms.mean == pytest.approx(free.tpot_ms.mean, rel=0.1)
    assert held.prefill_steps < free.prefill_steps


def test_recv_interval_raises_ttft_by_about_half_the_interval():
    """SGLang with scheduler_recv_interval 30: a prompt sent during a decode stretch waits for the
    next receive, 0 to 30 decode steps later (a prefill step resets the count): TTFT rises by a few
    steps to 30 steps; TPOT barely moves."""
    h200 = registry.load_gpu("h200-sxm")
    base = engine_defaults("sglang", h200)
    free, polled = _run(base), _run(base.with_settings(recv_interval=30))
    step = free.itl_ms.median
    rise = polled.ttft_ms.mean - free.ttft_ms.mean
    assert 3 * step < rise < 31 * step, (rise, step)
    assert polled.tpot_ms.mean == pytest.approx(free.tpot_ms.mean, rel=0.1)


def test_the_request_carries_the_settings_to_the_simulation():
    """`perfmodel project --isl --osl --engine sglang --recv-interval 30` is the simulation with the
    engine's defaults and that setting: its TTFT above the default run's."""
    import perfmodel

    kw = dict(target="h200", gpus=1, model="llama-3.1-8b", concurrency=[16], isl=1024, osl=256, min_length_ratio=0.8,
              engine="sglang")
    free = perfmodel.project(Request(**kw)).points[0].serving
    polled = perfmodel.project(Request(**kw, recv_interval=30, max_running=64)).points[0].serving
    assert polled.ttft_ms["mean"] > free.ttft_ms["mean"] * 1.2


# ----------------------------------------------------------------------------- the scripts' settings

def test_inferencex_trtllm_budget_and_waiting_by_date():
    """DeepSeek-R1 on TRT-LLM: (CONC + ISL + 64) rounded up to 64, at least 8192 from 2026-01-21;
    batch waiting only in dsr1_fp8_b200_trt at 1k/1k and CONC >= 64 from 2026-01-29."""
    s = inferencex.settings("trtllm", "dsr1", "fp8", "h200", tp=8, isl=1024, osl=1024, conc=16, date="2025-12-15")
    assert (s.max_batched_tokens, s.batch_wait_iters, s.ep_size) == (1152, None, None)
    s = inferencex.settings("trtllm", "dsr1", "fp8", "h200", tp=8, isl=1024, osl=1024, conc=16, date="2026-02-03")
    assert s.max_batched_tokens == 8192
    s = inferencex.settings("trtllm", "dsr1", "fp8", "b200", tp=8, isl=1024, osl=1024, conc=64, date="2026-03-25")
    assert (s.batch_wait_iters, s.batch_wait_tokens_ratio) == (40, 0.8)
    assert inferencex.settings("trtllm", "dsr1", "fp8", "b200", tp=8, isl=1024, osl=1024, conc=64,
                               date="2026-01-20").batch_wait_iters is None


def test_inferencex_trtllm_mtp_sweeps():
    """The sweeps of bf3456727 (2026-01-14), 5d517074c (2026-02-05, fp8 B200) and 0aae52d4c (2026-02-06,
    fp4 B200) ran the DeepSeek-R1 TRT-LLM MTP configs alone: MTP 3, or 1 with attention DP, a rank's
    max_batch_size CONC (with attention DP CONC / TP, / 8 or / 4), max_num_tokens (MTP + 1) x that + ISL + 64
    up to 64, no 8192 floor."""
    s = inferencex.settings("trtllm", "dsr1", "fp8", "h200", tp=8, isl=1024, osl=1024, conc=16, date="2026-01-14")
    assert s.request_fields() == {"max_batched_tokens": 1152, "max_running": 16, "spec": "chain", "drafter": "mtp",
                                  "draft_tokens": 3}
    s = inferencex.settings("trtllm", "dsr1", "fp8", "h200", tp=8, isl=8192, osl=1024, conc=256, date="2026-01-14",
                            attention_dp=True)
    assert (s.draft_tokens, s.max_running, s.max_batched_tokens) == (1, 32, 8320)
    s = inferencex.settings("trtllm", "dsr1", "fp8", "b200", tp=4, isl=1024, osl=1024, conc=256, date="2026-02-05",
                            attention_dp=True)
    assert (s.draft_tokens, s.max_running, s.max_batched_tokens) == (1, 32, 1152)  # 256 / 8 a rank
    s = inferencex.settings("trtllm", "dsr1", "fp4", "b200", tp=8, isl=1024, osl=1024, conc=256, date="2026-02-06",
                            attention_dp=True)
    assert (s.draft_tokens, s.max_running, s.max_batched_tokens) == (1, 64, 1216)  # 256 / 4 a rank
    assert inferencex.settings("trtllm", "dsr1", "fp4", "b200", tp=8, isl=1024, osl=1024, conc=2, date="2026-02-06",
                               attention_dp=True).max_running == 2  # below the divisor: CONC
    # other sweeps, GPUs and engines of those dates, and runs whose record names no MTP, are not
    for kw in [dict(precision="fp8", gpu="h200", date="2026-02-05"), dict(precision="fp8", gpu="b200", date="2026-02-06"),
               dict(precision="fp8", gpu="h200", date="2026-01-15"), dict(precision="fp8", gpu="h200", date="2026-01-14",
                                                                          spec_method="none")]:
        s = inferencex.settings("trtllm", "dsr1", tp=8, isl=1024, osl=1024, conc=16, **kw)
        assert s.spec is None and s.draft_tokens is None, kw
    assert inferencex.settings("sglang", "dsr1", "fp8", "h200", tp=8, isl=1024, osl=1024, conc=16, date="2026-01-14").spec is None

def test_inferencex_trtllm_attention_dp_balancing():
    """Every DeepSeek-R1 TRT-LLM script sets enable_balance, timeout_iters 60 with attention DP: the
    script's own choice before 2025-11-03, the run's config after, the MTP runs' too."""
    s = inferencex.settings("trtllm", "dsr1", "fp8", "h200", tp=8, isl=8192, osl=1024, conc=64, date="2025-11-02")
    assert (s.attention_dp, s.adp_balance_iters) == (True, 60)  # the script's choice above CONC 32
    s = inferencex.settings("trtllm", "dsr1", "fp8", "h200", tp=8, isl=8192, osl=1024, conc=64, date="2025-12-15",
                            attention_dp=True)
    assert s.request_fields()["adp_balance_iters"] == 60
    assert inferencex.settings("trtllm", "dsr1", "fp8", "h200", tp=8, isl=8192, osl=1024, conc=64,
                               date="2025-12-15").adp_balance_iters is None
    assert inferencex.settings("trtllm", "dsr1", "fp8", "h200", tp=8, isl=8192, osl=1024, conc=256, date="2026-01-14",
                               attention_dp=True).adp_balance_iters == 60


def test_an_mtp_run_is_priced_faster_than_the_same_load_without():
    """The settings reach the projection: the same DeepSeek-R1 load on 8x H200, the MTP sweep's
    settings against the plain script's, by the MTP drafter's published acceptance."""
    import perfmodel

    kw = dict(target="h200", gpus=8, model="deepseek-v3", parallel="tp+ep", concurrency=[4], isl=1024, osl=1024,
              engine="trtllm")
    plain = inferencex.settings("trtllm", "dsr1", "fp8", "h200", tp=8, isl=1024, osl=1024, conc=4, date="2025-12-15")
    mtp = inferencex.settings("trtllm", "dsr1", "fp8", "h200", tp=8, isl=1024, osl=1024, conc=4, date="2026-01-14")
    a = perfmodel.project(Request(**kw, **plain.request_fields())).points[0].serving
    b = perfmodel.project(Request(**kw, **mtp.request_fields())).points[0].serving
    assert b.tpot_ms["mean"] < 0.8 * a.tpot_ms["mean"]


def test_inferencex_layout_chosen_by_the_script_before_november_3():
    """Before 2025-11-03 the TRT-LLM scripts set --ep_size and attention DP themselves: EP8 on the
    H200 FP8 script at any concurrency, attention DP above 64 at 1k/1k."""
    s = inferencex.settings("trtllm", "dsr1", "fp8", "h200", tp=8, isl=1024, osl=1024, conc=16, date="2025-11-02")
    assert (s.ep_size, s.attention_dp) == (8, False)
    assert s.split(8).moe_ep == 8 and s.split(8).attn_tp == 8
    s = inferencex.settings("trtllm", "dsr1", "fp8", "h200", tp=8, isl=1024, osl=1024, conc=128, date="2025-11-02")
    assert s.split(8).attn_dp == 8
    s = inferencex.settings("trtllm", "dsr1", "fp4", "b200", tp=8, isl=1024, osl=1024, conc=8, date="2025-11-02")
    assert s.split(8).moe_ep == 1  # EP only above 8


def test_inferencex_sglang_recv_interval_by_concurrency():
    lo = inferencex.settings("sglang", "dsr1", "fp4", "b300", tp=8, isl=1024, osl=1024, conc=8, date="2026-04-17")
    hi = inferencex.settings("sglang", "dsr1", "fp4", "b300", tp=8, isl=1024, osl=1024, conc=16, date="2026-04-17")
    assert (lo.recv_interval, hi.recv_interval, hi.max_batched_tokens, hi.max_running) == (10, 30, 16384, 256)
    assert inferencex.settings("vllm", "70b", "fp8", "h200", tp=8, isl=1024, osl=1024, conc=8, date="2025-10-29") is None
    assert "SemiAnalysisAI/InferenceX" in hi.script


def test_inferencex_vllm_budget_only_where_a_script_sets_one():
    """vLLM's MiniMax-M2.5 scripts set --max-num-batched-tokens 2 x ISL from their dates; before, and
    in vLLM's other scripts (--max-num-seqs of CONC or more, never binding), nothing."""
    s = inferencex.settings("vllm", "minimaxm2.5", "fp8", "b200", tp=4, isl=8192, osl=1024, conc=64, date="2026-04-10")
    assert s.request_fields() == {"max_batched_tokens": 16384}
    assert inferencex.settings("vllm", "minimaxm2.5", "fp8", "b200", tp=4, isl=8192, osl=1024, conc=64,
                               date="2026-03-20") is None
    assert inferencex.settings("vllm", "minimaxm2.5", "fp8", "h200", tp=4, isl=8192, osl=1024, conc=64,
                               date="2026-04-10") is None


def test_published_points_carry_their_scripts_settings():
    from perfmodel import published_serving as ps

    by_id = {p.id: ps.express(p) for p in ps.load() if not p.setup.disagg and p.setup.framework in ps.ENGINES}
    o = by_id["inferencex-b200-sglang-dsr1-fp8-tp8ep8-1024x1024-c32"]
    assert (o.recv_interval, o.max_running, o.max_batched_tokens) == (30, 128, 32768)
    o = by_id["inferencex-h200-trt-dsr1-fp8-tp8ep1-1024x1024-c16"]  # 2025-11-02: the script ran EP8
    assert (o.parallel, o.max_batched_tokens) == ("tp-attn-ep-moe", 1152)


# ----------------------------------------------------------------------------- bad values

runner = CliRunner()
S = ("project", "--target", "h200", "--gpus", "1", "--model", "llama-3.1-8b", "--isl", "1024", "--osl", "128",
     "--concurrency", "4")
BAD = [
    ("recv0", S + ("--engine", "sglang", "--recv-interval", "0"), ["--recv-interval", "0"]),
    ("recv_word", S + ("--engine", "sglang", "--recv-interval", "often"), ["often"]),
    ("recv_vllm", S + ("--recv-interval", "10"), ["--recv-interval", "sglang", "--engine"]),
    ("wait_neg", S + ("--engine", "trtllm", "--batch-wait-iters", "-1"), ["--batch-wait-iters", "-1"]),
    ("wait_sglang", S + ("--engine", "sglang", "--batch-wait-iters", "20"), ["--batch-wait-iters", "trtllm"]),
    ("ratio_big", S + ("--engine", "trtllm", "--batch-wait-tokens-ratio", "1.5"), ["--batch-wait-tokens-ratio", "1.5"]),
    ("ratio_nan", S + ("--engine", "trtllm", "--batch-wait-tokens-ratio", "nan"), ["--batch-wait-tokens-ratio"]),
    ("running0", S + ("--max-running", "0"), ["--max-running", "0"]),
    ("balance0", S + ("--engine", "trtllm", "--adp-balance-iters", "0"), ["--adp-balance-iters", "0"]),
    ("balance_vllm", S + ("--adp-balance-iters", "60"), ["--adp-balance-iters", "trtllm", "--engine"]),
    ("recv_no_isl", ("project", "--target", "h200", "--gpus", "1", "--model", "llama-3.1-8b", "--engine", "sglang",
                     "--recv-interval", "10"), ["--recv-interval", "--isl"]),
]


@pytest.mark.parametrize("case_id,args,expect", BAD, ids=[c[0] for c in BAD])
def test_bad_server_setting(case_id, args, expect):
    r = runner.invoke(app, list(args))
    out = r.output + (r.stderr or "")
    assert "Traceback" not in out
    assert r.exit_code == 2, f"{args}: exit {r.exit_code}\n{out}"
    msg = r.stderr.strip()
    assert len(msg.splitlines()) == 1, msg
    for s in expect:
        assert s in msg, f"{s!r} not in {msg!r}"
    assert r.stdout.strip() == ""


def test_calibration_point_refuses_a_setting_of_another_engine():
    from pydantic import ValidationError

    from perfmodel.calibration_schema import ObservedPoint

    with pytest.raises(ValidationError, match="sglang"):
        ObservedPoint(target="h200", model="llama-3.1-8b", isl=1024, osl=128, concurrency=4, engine="vllm",
                      recv_interval=10, ttft_ms=100.0)
