"""Wall time of a serving projection: `project_serving` at 4 concurrencies (1, 8, 32, 128),
1k/1k fixed lengths and a sampled-length variant, per engine, from the machine build to the
last point. The bar: <= 2 s for 4 concurrencies at 1k/1k on a 2-core CPU.

    python benchmarks/serving_speed.py            # prints one line per case (raw output)

Each case runs in a fresh pricer (no cache carried between cases); the machine is built once
per target and its build time is printed on its own line and added to each case's total."""

from __future__ import annotations

import os
import platform
import random
import time

from perfmodel.api import projector as Projector
from perfmodel.model.serving import Workload, engine_defaults, project_serving
from perfmodel.scenario import Request

CONCURRENCIES = [1, 8, 32, 128]


def main() -> None:
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}")
    rng = random.Random(0)
    sampled = tuple((rng.randint(819, 1024), rng.randint(819, 1024)) for _ in range(1000))  # InferenceMAX-like 0.8 ratio
    for target, gpus, model in [("b300", 8, "kimi-k2.6"), ("h200", 8, "kimi-k2.6"), ("h200", 1, "llama-3.1-8b")]:
        t0 = time.perf_counter()
        pj = Projector(Request(target=target, gpus=gpus, model=model, parallel="tp", concurrency=[1]))
        build = time.perf_counter() - t0
        print(f"{model} on {gpus} x {target}: machine built in {build:.3f} s")
        for engine in ("vllm", "sglang", "trtllm"):
            eng = engine_defaults(engine, pj.gpu)
            for name, wl in [("1k/1k", Workload(isl=1024, osl=1024, concurrency=1)),
                             ("sampled 0.8-1k", Workload(lengths=sampled, concurrency=1, seed=1))]:
                t = time.perf_counter()
                pts = project_serving(pj.model, pj.machine, pj.layout, wl, eng, CONCURRENCIES)
                dt = time.perf_counter() - t
                figs = " ".join(f"C={p.concurrency}: ttft {p.ttft_ms.median:.0f} ms tpot {p.tpot_ms.mean:.2f} ms "
                                f"{p.tokens_per_s_per_gpu:.0f} tok/s/gpu;" for p in pts)
                print(f"  {engine:6s} {name:15s} {dt + build:6.3f} s total ({dt:.3f} s simulating, "
                      f"{sum(p.steps for p in pts)} steps)  {figs}")


if __name__ == "__main__":
    main()
