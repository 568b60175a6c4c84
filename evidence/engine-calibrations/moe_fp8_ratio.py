"""How much of a bf16 MoE call's time the engines' own FP8 MoE kernels take at decode sizes, in
aiconfigurator-core's per-op tables (the tables the imported profiles are fitted on), for the
expert shapes of the calibration rows' FP8 models. perfmodel prices FP8 experts by the bf16
grouped GEMM's law on their own bytes (about half the bf16 call where the call streams weights);
a ratio above that is time the imported profile leaves out. Run from the repository root:
python evidence/engine-calibrations/moe_fp8_ratio.py"""

import pandas as pd

from perfmodel import aic

db = aic.Database.installed()
print(f"{aic.PACKAGE} {db.version}; latency ratio fp8_block / bfloat16 (the fastest kernel source of each), "
      "balanced routing, by tokens")
SHAPES = {"qwen3-235b-a22b": (4096, 1536, 128, 8)}
# DeepSeek-V3's expert shape (7168 x 2048, 256 experts) has fp8_block rows only: no bf16 call to compare.
CASES = [("qwen3-235b-a22b", "h100_sxm", "trtllm", "1.3.0rc20", 1, 4), ("qwen3-235b-a22b", "h200_sxm", "sglang", "0.5.14", 4, 1),
         ("qwen3-235b-a22b", "h200_sxm", "vllm", "0.24.0", 4, 1), ("qwen3-235b-a22b", "h200_sxm", "vllm", "0.24.0", 2, 1)]
TOKENS = [1, 4, 8, 16, 32, 64, 128, 256]
print(f"{'model':<16} {'system':<9} {'engine':<17} {'moe tp x ep':<11} " + " ".join(f"{t:>5}" for t in TOKENS))
for model, system, engine, version, mtp, mep in CASES:
    h, inter, e, k = SHAPES[model]
    p = db.root / "data" / system / "moe" / engine / version / "moe_perf.parquet"
    df = pd.read_parquet(p)
    q = df[(df.hidden_size == h) & (df.inter_size == inter) & (df.num_experts == e) & (df.topk == k)
           & (df.moe_tp_size == mtp) & (df.moe_ep_size == mep) & (df.distribution == "balanced")]
    t = q.pivot_table(index="num_tokens", columns="moe_dtype", values="latency", aggfunc="min")
    cells = []
    for n in TOKENS:
        ok = n in t.index and {"bfloat16", "fp8_block"} <= set(t.columns)
        cells.append(f"{t.loc[n, 'fp8_block'] / t.loc[n, 'bfloat16']:5.2f}" if ok and t.loc[n].notna().all() else "  n/a")
    print(f"{model:<16} {system:<9} {engine + ' ' + version:<17} {f'{mtp} x {mep}':<11} " + " ".join(cells))
