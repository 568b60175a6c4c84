"""Serving at a workload (`perfmodel.model.serving`): the figures `vllm bench serve` reports,
worked by hand on a stub step price, and their physics on the embedded H200 profile.

The stub prices a decode-only step at 10 ms and any step carrying prefill tokens at 30 ms, so
each request's timeline can be followed by hand (comments). The physics tests use Llama-3.1-8B
on one H200 (fast to price) and Kimi K2.6 on 8 (the reference scenario). The timing of a
projection is a benchmark (benchmarks/serving_speed.py), not a test.
"""

import random

import pytest
from pydantic import ValidationError

from perfmodel.api import projector as Projector
from perfmodel.model.layers import Layout
from perfmodel.model.memory import kv_capacity_tokens
from perfmodel.model.serving import (
    Engine,
    SpecDecode,
    StepPricer,
    Workload,
    engine_defaults,
    project_serving,
    simulate,
)
from perfmodel.scenario import Request
from perfmodel.specs import registry


class StubPricer(StepPricer):
    """10 ms a decode-only step, 30 ms a step with prefill tokens (whatever else it holds)."""

    def __init__(self):
        self.assumptions, self.interpolate = set(), True

    def exact(self, n_dec, ctx, prefills):
        return (30e3 if prefills else 10e3), 0.0


VLLM = Engine(name="vllm", max_batched_tokens=8192, chunked=True, mixed=True)
SGLANG = Engine(name="sglang", max_batched_tokens=8192, chunked=True, mixed=False)


def _stub_run(engine, lengths, **kw):
    pj = _pj("llama-3.1-8b", 1)
    wl = Workload(lengths=lengths, concurrency=2, n_requests=3, seed=kw.pop("seed", 0), **kw)
    return simulate(pj.model, pj.machine, pj.layout, wl, engine, pricer=StubPricer(), kv_tokens=10**6)


def _osl_draws(lengths, seed, n=3):
    rng = random.Random(seed)
    return [rng.choice(lengths)[1] for _ in range(n)]


def _pj(model="llama-3.1-8b", gpus=1, target="h200", parallel="tp"):
    return Projector(Request(target=target, gpus=gpus, model=model, parallel=parallel, concurrency=[1]))


# ----------------------------------------------------------------------------- by hand

LENGTHS = ((100, 2), (100, 4))


def _seed_for(order):
    return next(s for s in range(100) if _osl_draws(LENGTHS, s) == order)


def test_tpot_ttft_itl_by_hand_vllm():
    """Three requests of 100 prompt tokens, outputs 2, 4, 4; two in flight (closed loop), vLLM:
      t=0   r0, r1 sent; step A prefills both (30 ms) -> first tokens at 30
      t=40  step B decodes both: r0 has its 2 tokens, done; r2 sent at 40
      t=70  step C: r1 decodes, r2 prefills (30 ms, mixed) -> r1 3 tokens, r2 first token
      t=80  step D decodes r1 (4: done) and r2 (2); t=90, 100: r2 3, 4 (done)
    TTFT 30, 30, 30; e2e 40, 80, 60; TPOT (e2e - ttft) / (osl - 1) = 10, 50/3, 10 ms;
    ITL gaps: r0 [10], r1 [10, 30, 10], r2 [10, 10, 10]; 10 tokens in 100 ms."""
    seed = _seed_for([2, 4, 4])
    p = _stub_run(VLLM, LENGTHS, seed=seed)
    assert (p.ttft_ms.mean, p.ttft_ms.median) == pytest.approx((30.0, 30.0))
    assert p.e2e_latency_ms.mean == pytest.approx((40 + 80 + 60) / 3)
    assert p.tpot_ms.mean == pytest.approx((10 + 50 / 3 + 10) / 3)
    assert p.tpot_ms.median == pytest.approx(10.0)
    assert p.itl_ms.mean == pytest.approx(90 / 7)
    assert p.duration_s == pytest.approx(0.1)
    assert p.tokens_per_s == pytest.approx(100.0)
    assert p.tokens_per_s_per_user == pytest.approx(1e3 / p.tpot_ms.mean)
    assert (p.steps, p.prefill_steps) == (6, 2)


def test_tpot_counts_the_decode_stall_of_a_prefill_first_engine():
    """The same requests under SGLang's prefill-first policy: at t=40 r2's prefill runs alone
    (30 ms) and r1 waits: r1's tokens at 30, 40, 80, 90 (TPOT 60/3 = 20), r2's at 70, 80, 90,
    100 (TPOT 10); r1's ITL gaps [10, 40, 10]."""
    p = _stub_run(SGLANG, LENGTHS, seed=_seed_for([2, 4, 4]))
    assert p.tpot_ms.mean == pytest.approx((10 + 20 + 10) / 3)
    assert p.e2e_latency_ms.mean == pytest.approx((40 + 90 + 60) / 3)
    assert p.ttft_ms.mean == pytest.approx(30.0)
    assert p.itl_ms.mean == pytest.approx((10 + 10 + 40 + 10 + 10 + 10 + 10) / 7)
    assert p.itl_ms.p99 == pytest.approx(40.0)


def test_whole_prefills_wait_for_budget_trtllm():
    """TRT-LLM without chunking: a 150-token prompt cannot run under a 100-token step budget.
    Under 200 tokens, two 150-token prompts (3 output tokens each) take a step each:
      t=0   r0's prompt fits (150 of 200), r1's does not (150 > 50): step 1, 30 ms
      t=30  r0 decodes (1 token) and r1's whole prompt fits: step 2, 30 ms -> r1's first token at 60
      t=70  both decode: r0 has its 3 tokens; t=80 r1 has its 3
    TTFT 30 and 60; e2e 70 and 80; TPOT (70 - 30) / 2 = 20 and (80 - 60) / 2 = 10."""
    pj = _pj()
    eng = Engine(name="trtllm", max_batched_tokens=100, chunked=False, mixed=True)
    with pytest.raises(ValueError, match="without chunked prefill"):
        simulate(pj.model, pj.machine, pj.layout, Workload(isl=150, osl=3, concurrency=2), eng, pricer=StubPricer(),
                 kv_tokens=10**6)
    eng = Engine(name="trtllm", max_batched_tokens=200, chunked=False, mixed=True)
    p = simulate(pj.model, pj.machine, pj.layout, Workload(isl=150, osl=3, concurrency=2, n_requests=2), eng,
                 pricer=StubPricer(), kv_tokens=10**6)
    assert (p.ttft_ms.mean, p.e2e_latency_ms.mean, p.tpot_ms.mean) == pytest.approx((45.0, 75.0, 15.0))
    assert p.duration_s == pytest.approx(0.08)


def test_speculation_advances_tau_tokens_per_verify_step():
    """One request, 100 prompt tokens, 9 output tokens, τ = 2 per verify step: the prefill step
    gives the first token (30 ms), then 4 verify steps of 10 ms give 8: e2e 70 ms, TPOT 40/8."""
    pj = _pj()
    wl = Workload(isl=100, osl=9, concurrency=1, n_requests=1, spec=SpecDecode(width=4, tau=2.0, draft=False))
    p = simulate(pj.model, pj.machine, pj.layout, wl, VLLM, pricer=StubPricer(), kv_tokens=10**6)
    assert p.e2e_latency_ms.mean == pytest.approx(70.0)
    assert p.tpot_ms.mean == pytest.approx(40 / 8)
    assert p.itl_ms.mean == pytest.approx(10.0)


def test_lengths_drawn_between_the_min_ratio_and_the_given_lengths():
    """--min-length-ratio 0.8 (InferenceX's random dataset): every request's prompt and output
    lie in [floor(0.8 x len), len], their means near 0.9 x len; ratio 1 keeps them fixed."""
    pj = _pj()
    wl = Workload(isl=1000, osl=50, min_length_ratio=0.8, concurrency=4, n_requests=400, seed=3)
    p = simulate(pj.model, pj.machine, pj.layout, wl, VLLM, pricer=StubPricer(), kv_tokens=10**6)
    fixed = simulate(pj.model, pj.machine, pj.layout, wl.model_copy(update={"min_length_ratio": 1.0}), VLLM,
                     pricer=StubPricer(), kv_tokens=10**6)
    # the stub's steps cost the same whatever their lengths: the output tokens alone set the duration
    assert p.tokens_per_s * p.duration_s == pytest.approx(400 * 45, rel=0.03)  # mean osl 0.9 x 50
    assert fixed.tokens_per_s * fixed.duration_s == 400 * 50
    with pytest.raises(ValidationError, match="min_length_ratio"):
        Workload(lengths=((10, 2),), min_length_ratio=0.5, concurrency=1)


def test_staggered_arrivals_wait_less_than_a_burst(llama):
    """Closed loop with fixed lengths: every request of a wave finishes in the same step and the
    next C prompts arrive at once, each waiting for the others' prefill. Output lengths drawn
    from 0.8 x osl to osl spread the finishes, the arrivals with them: the mean TTFT falls,
    towards one prompt's prefill step, while the TPOT barely moves (InferenceX's rows)."""
    wl = Workload(isl=2048, osl=256, concurrency=32)
    burst = simulate(llama.model, llama.machine, llama.layout, wl, engine_defaults("vllm", llama.gpu))
    spread = simulate(llama.model, llama.machine, llama.layout, wl.model_copy(update={"min_length_ratio": 0.8}),
                      engine_defaults("vllm", llama.gpu))
    assert spread.ttft_ms.mean < 0.6 * burst.ttft_ms.mean
    assert spread.tpot_ms.mean == pytest.approx(burst.tpot_ms.mean, rel=0.25)


def test_a_first_token_wait_of_k_steps_adds_k_decode_steps_to_the_ttft_only():
    """A calibration's `engine_ttft_steps` k: each request's first token (and every later one)
    reaches the client k of its own decode steps later. On the stub (10 ms decode steps) TTFT and
    e2e grow by 10 k ms; the TPOT does not move."""
    from dataclasses import replace

    pj = _pj()
    wl = Workload(isl=100, osl=5, concurrency=1, n_requests=2)
    base = simulate(pj.model, pj.machine, pj.layout, wl, VLLM, pricer=StubPricer(), kv_tokens=10**6)
    mach = replace(pj.machine, overheads=replace(pj.machine.overheads, engine_ttft_steps=2.5))
    p = simulate(pj.model, mach, pj.layout, wl, VLLM, pricer=StubPricer(), kv_tokens=10**6)
    assert p.ttft_ms.mean == pytest.approx(base.ttft_ms.mean + 25.0)
    assert p.e2e_latency_ms.mean == pytest.approx(base.e2e_latency_ms.mean + 25.0)
    assert p.tpot_ms.mean == pytest.approx(base.tpot_ms.mean) == pytest.approx(10.0)


# ----------------------------------------------------------------------------- physics

@pytest.fixture(scope="module")
def llama():
    return _pj()


def test_ttft_grows_with_isl(llama):
    prev = 0.0
    for isl in (128, 1024, 4096, 16384, 32768):
        p = simulate(llama.model, llama.machine, llama.layout, Workload(isl=isl, osl=16, concurrency=1, n_requests=3),
                     engine_defaults("vllm", llama.gpu))
        assert p.ttft_ms.median > prev, isl
        prev = p.ttft_ms.median


def test_tpot_grows_and_tokens_per_gpu_do_not_fall_with_concurrency(llama):
    for name in ("vllm", "sglang", "trtllm"):
        pts = project_serving(llama.model, llama.machine, llama.layout, Workload(isl=1024, osl=256, concurrency=1),
                              engine_defaults(name, llama.gpu), [1, 4, 16, 64, 256])
        assert all(not p.kv_limited for p in pts)
        tpot = [p.tpot_ms.mean for p in pts]
        assert tpot == sorted(tpot) and tpot[0] < tpot[-1], (name, tpot)
        tps = [p.tokens_per_s_per_gpu for p in pts]
        assert tps == sorted(tps), (name, tps)
        user = [p.tokens_per_s_per_user for p in pts]
        assert user == sorted(user, reverse=True), (name, user)


def test_tokens_per_gpu_stop_growing_once_the_kv_pool_is_full(llama):
    """A pool of 20 requests' worth of KV: beyond C = 20 the engine queues what the pool cannot
    hold, so more concurrency buys no more throughput, and the point says the pool held it back."""
    kv = 20 * (1024 + 256)
    pts = project_serving(llama.model, llama.machine, llama.layout, Workload(isl=1024, osl=256, concurrency=1),
                          engine_defaults("vllm", llama.gpu), [16, 64], kv_tokens=kv)
    assert not pts[0].kv_limited and pts[1].kv_limited
    assert pts[1].max_running == 20
    assert pts[1].tokens_per_s_per_gpu == pytest.approx(pts[0].tokens_per_s_per_gpu, rel=0.25)
    assert pts[1].ttft_ms.median > 5 * pts[0].ttft_ms.median  # the queue shows in TTFT


def test_prefix_cache_hits_shorten_ttft(llama):
    ttft = [simulate(llama.model, llama.machine, llama.layout,
                     Workload(isl=8192, osl=16, concurrency=4, prefix_hit=h), engine_defaults("vllm", llama.gpu)).ttft_ms.median
            for h in (0.0, 0.5, 0.9)]
    assert ttft[0] > ttft[1] > ttft[2]


def test_chunking_spreads_a_long_prompt_over_steps(llama):
    """A 20k-token prompt under an 8192-token budget takes 3 chunk steps; SGLang's chunk budget
    on a 192 GB GPU is 16384: 2 steps, a shorter TTFT."""
    wl = Workload(isl=20000, osl=4, concurrency=1, n_requests=1)
    p = simulate(llama.model, llama.machine, llama.layout, wl, engine_defaults("vllm", llama.gpu))
    assert p.prefill_steps == 3
    big = simulate(llama.model, llama.machine, llama.layout, wl, engine_defaults("sglang", registry.load_gpu("b200")))
    assert big.prefill_steps == 2 and big.ttft_ms.median < p.ttft_ms.median


@pytest.mark.parametrize("name,wl", [
    ("vllm", Workload(isl=1024, osl=200, concurrency=16)),
    ("sglang", Workload(isl=1024, osl=200, concurrency=16)),
    ("trtllm", Workload(isl=1024, osl=200, concurrency=16)),
    ("vllm", Workload(lengths=((900, 150), (1500, 220), (3000, 90), (400, 300)), concurrency=24, seed=3)),
    ("sglang", Workload(lengths=((900, 150), (1500, 220), (3000, 90), (400, 300)), concurrency=24, seed=3)),
    ("vllm", Workload(isl=2000, osl=150, request_rate=6.0, n_requests=40, seed=1)),
    ("vllm", Workload(isl=3000, osl=150, concurrency=8, prefix_hit=0.6)),
    ("vllm", Workload(isl=1024, osl=200, concurrency=8, spec=SpecDecode(width=4, tau=2.5, draft=False))),
])
def test_the_stretch_and_grid_shortcut_matches_the_step_by_step_simulation(llama, name, wl):
    """Pure-decode stretches priced once at their middle context and step prices on context and
    chunk grids (the default) against every step priced on its own at its exact composition."""
    eng = engine_defaults(name, llama.gpu)
    fast = simulate(llama.model, llama.machine, llama.layout, wl, eng)
    ref = simulate(llama.model, llama.machine, llama.layout, wl, eng, exact=True)
    assert fast.steps == pytest.approx(ref.steps, rel=0.01)
    for get, tol in [(lambda p: p.ttft_ms.median, 0.03), (lambda p: p.ttft_ms.p90, 0.03), (lambda p: p.tpot_ms.mean, 0.01),
                     (lambda p: p.itl_ms.p90, 0.02), (lambda p: p.e2e_latency_ms.median, 0.01),
                     (lambda p: p.tokens_per_s, 0.01)]:
        assert get(fast) == pytest.approx(get(ref), rel=tol)


def test_reference_scenario_reports_every_figure_with_intervals():
    """Kimi K2.6 on 8 x H200, 1k/1k, vLLM: intervals bracket their figures; no prefill law is
    assumed (the embedded profile measured them); the KV pool is the memory model's."""
    pj = _pj("kimi-k2.6", 8)
    p = project_serving(pj.model, pj.machine, pj.layout, Workload(isl=1024, osl=1024, concurrency=1),
                        engine_defaults("vllm", pj.gpu), [32])[0]
    for key, v in [("ttft_ms", p.ttft_ms.median), ("tpot_ms", p.tpot_ms.mean), ("tokens_per_s", p.tokens_per_s),
                   ("tokens_per_s_per_gpu", p.tokens_per_s_per_gpu), ("tokens_per_s_per_user", p.tokens_per_s_per_user),
                   ("e2e_latency_ms", p.e2e_latency_ms.median)]:
        iv = p.interval[key]
        assert iv.lo < v < iv.hi, key
    assert not any("at prefill size" in a for a in p.assumptions)  # the embedded profile measured the prefill laws
    assert p.kv_capacity_tokens == kv_capacity_tokens(pj.model, pj.gpu, Layout("tp", 8))
    assert p.n_requests == 320 and p.max_running == 32
    assert set(p.to_json()) >= {"ttft_ms", "tpot_ms", "itl_ms", "e2e_latency_ms", "tokens_per_s_per_gpu"}


def test_engine_defaults_follow_the_engines_code():
    h200, a100, b200, h100 = (registry.load_gpu(g) for g in ("h200", "a100", "b200", "h100"))
    assert (engine_defaults("vllm", h200).max_batched_tokens, engine_defaults("vllm", h200).max_seqs) == (8192, 1024)
    assert (engine_defaults("vllm", a100).max_batched_tokens, engine_defaults("vllm", a100).max_seqs) == (2048, 256)
    assert [engine_defaults("sglang", g).max_batched_tokens for g in (h100, h200, b200)] == [8192, 8192, 16384]
    assert not engine_defaults("sglang", h200).mixed
    t = engine_defaults("trtllm", h200)
    assert (t.max_batched_tokens, t.chunked, t.mixed) == (8192, False, True)
    with pytest.raises(ValueError):
        engine_defaults("tgi", h200)


def test_bad_workloads_are_refused(llama):
    for bad in (dict(isl=10), dict(isl=10, osl=5, lengths=((1, 1),), concurrency=1), dict(isl=10, osl=5),
                dict(isl=10, osl=5, request_rate=1.0), dict(isl=0, osl=5, concurrency=1),
                dict(isl=10, osl=5, concurrency=1, prefix_hit=1.0)):
        with pytest.raises(ValidationError):
            Workload(**bad)
    with pytest.raises(ValidationError):
        SpecDecode(width=3, tau=3.5)
    with pytest.raises(ValueError, match="does not fit in the KV cache"):
        simulate(llama.model, llama.machine, llama.layout, Workload(isl=10**6, osl=10, concurrency=1),
                 engine_defaults("vllm", llama.gpu))


def test_data_parallel_ranks_schedule_with_their_own_budget():
    """The worked TRT-LLM case above (two 150-token prompts under a 200-token budget: TTFT 30 and
    60 ms) over two attention-DP ranks, each with its own 200-token budget: both prompts run in the
    first step (TTFT 30 and 30). A prompt still has to fit one rank's budget; SGLang's budget is the
    whole step's (it divides it among the ranks: model/SOURCES.md V9)."""
    pj = _pj()
    eng = Engine(name="trtllm", max_batched_tokens=200, chunked=False, mixed=True, budget_per_dp_rank=True)
    wl = Workload(isl=150, osl=3, concurrency=2, n_requests=2)
    one = simulate(pj.model, pj.machine, Layout("tp", 1), wl, eng, pricer=StubPricer(), kv_tokens=10**6)
    two = simulate(pj.model, pj.machine, Layout("ep", 2), wl, eng, pricer=StubPricer(), kv_tokens=10**6)
    assert one.ttft_ms.mean == pytest.approx(45.0) and two.ttft_ms.mean == pytest.approx(30.0)
    with pytest.raises(ValueError, match="250 tokens: above its 200-token"):
        simulate(pj.model, pj.machine, Layout("ep", 2), Workload(isl=250, osl=3, concurrency=2), eng, pricer=StubPricer(),
                 kv_tokens=10**6)
    assert eng.over(4).max_batched_tokens == 800 and eng.over(1) is eng
    assert SGLANG.over(8) is SGLANG
    v = engine_defaults("vllm", registry.load_gpu("h200")).over(2)
    assert (v.max_batched_tokens, v.max_seqs) == (16384, 2048)
