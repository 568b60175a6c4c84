"""Qwen3-235B-A22B-FP8's decode step on h200_sxm, op by op: what the imported profile prices against
what aiconfigurator's database timed of each engine's kernels at the same shapes.

    python evidence/qwen3-fp8-step/ops.py > evidence/qwen3-fp8-step/ops.txt

For vLLM and SGLang (the package's maintained versions, as `validate --silicon` imports them for
the rows' vLLM 0.12.0 and SGLang 0.5.6.post2, which the database lacks), at TP2 and TP4 and a few
decode batches, one decode layer's ops as the step builds them (`layers.batch_ops`, the rows'
dtypes) and their time per call on the imported machine (`step.price_op`), beside the database's
rows for the same op:

- routed experts: the `fp8_block` rows (the checkpoint's 128x128 block scales), balanced and
  power-law routing; and the per-tensor `fp8` rows, which aiconfigurator's estimator reads for the
  vLLM rows (their recorded `moe_quant_mode` is `fp8`);
- qkv and o projections: the per-tensor `fp8` and the `fp8_block` GEMM rows (kernel source named),
  and every `fp8_block` row at M <= 16 by kernel source (the smallest shapes' times show a fixed cost);
- attention: the decode rows at the layer's heads, batch and a context near the rows' own.

Then the whole step (`batch_estimate`) by component. Database paths are written from the
package's `systems/` folder.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from perfmodel import aic  # noqa: E402
from perfmodel.api import projector  # noqa: E402
from perfmodel.model.layers import Batch, batch_ops, parse_group  # noqa: E402
from perfmodel.model.step import batch_estimate, price_op  # noqa: E402
from perfmodel.profile import save_profile  # noqa: E402
from perfmodel.request import resolve_profile  # noqa: E402
from perfmodel.scenario import Request  # noqa: E402
from perfmodel.silicon import MODELS, _weights, load_rows  # noqa: E402

SYSTEM, MODEL_PATH = "h200_sxm", "Qwen/Qwen3-235B-A22B-FP8"
H, I, E, K, HEADS, KV_HEADS, D = 4096, 1536, 128, 8, 64, 4, 128
SHAPES = ((2, 4), (2, 16), (4, 8), (4, 16))  # (TP, decode batch): the rows' layouts and loads
CONTEXT = 2000


def _db(db: aic.Database, engine: str, version: str, name: str) -> pd.DataFrame:
    path, v = db.table(SYSTEM, engine, version, name)
    print(f"  {name}: <site-packages>/{db.where(db.rel(path))} (version {v})")
    return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)


def _one(df: pd.DataFrame, **eq) -> str:
    q = df
    for k, v in eq.items():
        q = q[q[k] == v]
    if q.empty:
        return "—"
    best = q.sort_values("latency").iloc[0]
    return f"{best.latency * 1e3:7.1f} us ({best.kernel_source})"


def main() -> None:
    db = aic.Database.installed()
    local = resolve_profile(None)
    row = next(r for r in load_rows(db) if r.model_path == MODEL_PATH and r.backend == "vllm")
    dtypes = _weights(row, True) | ({"kv_cache": MODELS[MODEL_PATH].kv_cache} if MODELS[MODEL_PATH].kv_cache != "bf16" else {})
    print(f"{aic.PACKAGE} {db.version}; {MODEL_PATH} priced with dtypes {dtypes} (silicon.express)")
    with tempfile.TemporaryDirectory() as tmp:
        for engine in ("vllm", "sglang"):
            version = db.current(SYSTEM, engine)
            print(f"\n== {engine} {version} on {SYSTEM} (imported as `validate --silicon` imports it)")
            prof = aic.import_profile(db, SYSTEM, f"{engine}@{version}", local)
            path = Path(tmp) / f"{engine}.json"
            save_profile(prof.model_dump(mode="json", exclude_none=True), path)
            moe, gemm, att = (_db(db, engine, version, n) for n in ("moe", "gemm", "attention_decode"))
            blk = gemm[(gemm.gemm_dtype == "fp8_block") & (gemm.m <= 16)]
            for src, rows in blk.groupby("kernel_source"):
                tiny = rows[(rows.n <= 128) & (rows.k <= 128)].latency * 1e3
                big = rows[(rows.n == H) & (rows.k == H)].latency * 1e3
                print(f"  fp8_block GEMM rows at M <= 16, {src}: {len(rows)} rows, median {rows.latency.median() * 1e3:.1f} us"
                      + "".join(f"; {what}: {t.min():.1f}-{t.max():.1f} us" for what, t in (("N, K <= 128", tiny), ("4096x4096", big))
                                if len(t)))
            moe = moe[(moe.hidden_size == H) & (moe.inter_size == I) & (moe.num_experts == E) & (moe.topk == K)
                      & (moe.moe_ep_size == 1)]
            for tp, c in SHAPES:
                req = Request(target="h200-sxm", gpus=tp, model="qwen3-235b-a22b", parallel="tp", profile=str(path),
                              dtypes=dtypes)
                pj = projector(req)
                b = Batch(groups=(parse_group("decode", f"{c}@{CONTEXT}"),))
                ops = batch_ops(pj.model, pj.layout, b)[0]
                print(f"\n  TP{tp}, decode {c}@{CONTEXT}: one layer, us per call (perfmodel | database)")
                for o in ops:
                    if o.count < 2:
                        continue
                    t = price_op(pj.machine, o) / o.count
                    line = f"    {o.name:22s} {o.kernel_class:14s} {t:7.1f} us"
                    if o.name == "routed_experts":
                        for dt, dist in (("fp8_block", "balanced"), ("fp8_block", "power_law_1.01"), ("fp8", "balanced")):
                            line += f" | {dt} {dist}: {_one(moe, moe_dtype=dt, distribution=dist, moe_tp_size=tp, num_tokens=c)}"
                    elif o.name in ("qkv_proj", "o_proj"):
                        n, k = ((HEADS + 2 * KV_HEADS) // tp * D, H) if o.name == "qkv_proj" else (H, HEADS // tp * D)
                        for dt in ("fp8", "fp8_block"):
                            line += f" | {dt} {n}x{k}: {_one(gemm, gemm_dtype=dt, m=c, n=n, k=k)}"
                    elif o.name.startswith("attention_core"):
                        a = att[(att.num_heads == HEADS // tp) & (att.num_key_value_heads == KV_HEADS // tp)
                                & (att.head_dim == D) & (att.batch_size == c) & (att.window_size == 0)]
                        step = a.step.unique()
                        near = int(min(step, key=lambda s: abs(s - CONTEXT))) if len(step) else None
                        for kv in ("bfloat16", "fp8"):
                            line += f" | kv {kv} step {near}: {_one(a, kv_cache_dtype=kv, step=near)}"
                    print(line)
                est = batch_estimate(pj.model, pj.machine, pj.layout, b)
                parts = ", ".join(f"{k} {v / 1e3:.2f}" for k, v in sorted(est.breakdown_us.items(), key=lambda kv: -kv[1]))
                print(f"    step {est.step_us / 1e3:.2f} ms ({parts})")


if __name__ == "__main__":
    main()
