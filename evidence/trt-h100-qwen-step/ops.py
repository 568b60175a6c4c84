"""Why TRT-LLM's H100 Qwen3-235B-FP8 rows were priced too slow the imported way (about +25% TPOT
while the local way was near, -3%): one decode step of the rows' layout (4 GPUs, attention TP4,
experts EP4) op by op on both ways, beside the database rows the imported profile holds for the two
ops that differed most.

    python evidence/trt-h100-qwen-step/ops.py > evidence/trt-h100-qwen-step/ops.txt

- routed experts: an expert-parallel call is priced from the database's own rows of its split
  (tp1 ep4 here) under aiconfigurator's skewed routing, the busiest GPU timed (`aic.EP_DISTRIBUTION`,
  kept as samples of the expert-parallel probe); without such rows, at the busiest GPU's expected
  distinct experts (`layers.expected_max_distinct_per_gpu`, uniform routing) by the law, which
  `aic.moe_points` fits on rows split by tensor parallelism only. The database's tp1 ep4 and tp4
  rows (balanced and power-law routing) are printed beside;
- attention: the database's decode-attention rows of the rows' heads per GPU (16 query, 1 KV head,
  bf16 KV as the rows are priced) by batch and context, which the imported step looks up.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from perfmodel import aic, silicon  # noqa: E402
from perfmodel.api import projector  # noqa: E402
from perfmodel.model.layers import Batch, batch_ops, expected_distinct, expected_max_distinct_per_gpu, parse_group  # noqa: E402
from perfmodel.model.step import batch_estimate, price_op  # noqa: E402
from perfmodel.profile import save_profile  # noqa: E402
from perfmodel.request import resolve_profile  # noqa: E402
from perfmodel.scenario import Request  # noqa: E402

SYSTEM, ENGINE = "h100_sxm", "trtllm"
E, K, H, I = 128, 8, 4096, 1536
CONTEXT = 768


def _table(db, version, name) -> pd.DataFrame:
    path, v = db.table(SYSTEM, ENGINE, version, name)
    print(f"  {name}: <site-packages>/{db.where(db.rel(path))} (version {v})")
    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)


def main() -> None:
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    db = aic.Database.installed()
    local = resolve_profile(None)
    row = next(r for r in silicon.load_rows(db) if r.backend == ENGINE and r.system == SYSTEM
               and r.model_path == "Qwen/Qwen3-235B-A22B-FP8" and r.moe_ep_size == 4 and r.concurrency == 16
               and (r.isl, r.osl) == (512, 512))
    e = silicon.express(row)
    version = db.current(SYSTEM, ENGINE)
    print(f"perfmodel at {sha}; {aic.PACKAGE} {db.version}; row {row.id} (ran {row.backend_version}, measured TPOT "
          f"{row.tpot_ms:.2f} ms): {e.describe()}; imported {ENGINE} {version}")
    with tempfile.TemporaryDirectory() as tmp:
        prof = aic.import_profile(db, SYSTEM, f"{ENGINE}@{version}", local)
        path = Path(tmp) / "imported.json"
        save_profile(prof.model_dump(mode="json", exclude_none=True), path)
        for c in (4, 16):
            print(f"\n== decode {c}@{CONTEXT}: ms per step over the layers (count), local | imported")
            steps, per = {}, {}
            for label, p in (("local", None), ("imported", str(path))):
                pj = projector(Request(**e.scenario(), concurrency=[e.concurrency], **({"profile": p} if p else {})))
                b = Batch(groups=(parse_group("decode", f"{c}@{CONTEXT}"),))
                ops = batch_ops(pj.model, pj.layout, b)[0]
                est = batch_estimate(pj.model, pj.machine, pj.layout, b)
                steps[label] = est
                per[label] = [(o.name, o.kernel_class, o.count, price_op(pj.machine, o) / 1e3) for o in ops]
            for (n, kc, cnt, a), (_, _, _, b_) in zip(per["local"], per["imported"]):
                print(f"  {n:22s} {kc:14s} x{cnt:3d} {a:8.3f} | {b_:8.3f}")
            for label, est in steps.items():
                parts = ", ".join(f"{k} {v / 1e3:.2f}" for k, v in sorted(est.breakdown_us.items(), key=lambda kv: -kv[1]))
                print(f"  step {label}: {est.step_us / 1e3:.2f} ms ({parts})")
    print(f"\n== routed experts, E{E} k{K} H{H} I{I}: experts a GPU reads per call")
    print(f"  {'T':>4} {'uniform, one of 4 GPUs':>24} {'uniform, busiest of 4':>22} {'balanced (database)':>20}")
    for t in (1, 2, 4, 8, 16, 32):
        print(f"  {t:4d} {expected_distinct(E, K, t) / 4:24.1f} {expected_max_distinct_per_gpu(E, K, t, 4):22.1f} "
              f"{min(t * K / 4, E / 4):20.1f}")
    print("\n== the database's routed-expert rows, fp8_block, us per call (T:us)")
    moe = _table(db, version, "moe")
    q = moe[(moe.hidden_size == H) & (moe.inter_size == I) & (moe.num_experts == E) & (moe.topk == K)
            & (moe.moe_dtype == "fp8_block")]
    for (tp, ep, dist), g in q.groupby(["moe_tp_size", "moe_ep_size", "distribution"]):
        if (tp, ep) not in ((1, 1), (1, 4), (4, 1)):
            continue
        g = g.sort_values("num_tokens")
        print(f"  tp{tp} ep{ep} {dist:15s} " + " ".join(f"{int(t)}:{v * 1e3:.0f}" for t, v in zip(g.num_tokens, g.latency) if t <= 32))
    print("\n== the database's decode-attention rows, 16 query heads, 1 KV head, head 128, us per call (context:us)")
    att = _table(db, version, "attention_decode")
    a = att[(att.num_heads == 16) & (att.num_key_value_heads == 1) & (att.head_dim == 128) & (att.window_size == 0)]
    for (kv, b), g in a.groupby(["kv_cache_dtype", "batch_size"]):
        if b > 16:
            continue
        g = g.sort_values("step")
        print(f"  kv {kv:8s} batch {b:2d} " + " ".join(f"{int(s)}:{v * 1e3:.1f}" for s, v in zip(g.step, g.latency) if 127 <= s <= 4095))


if __name__ == "__main__":
    main()
