"""The weight bytes per second DeepSeek-V3's fp8_block expert-TP rows would stream if each touched
the experts aiconfigurator's balanced routing rule counts (`aic.balanced_experts`), against the
GPU's datasheet HBM bandwidth: a row above it cannot have read them all from DRAM (the collector's
call touched fewer, or hit L2), and a step priced from it is priced too fast. Fastest kernel of
each shape. Run from the repository root: python evidence/moe-quant-import/above_peak.py"""

from perfmodel import aic
from perfmodel.specs import registry

H, I, E, K = 7168, 2048, 256, 8  # DeepSeek-V3's routed experts
TOKENS = (1, 4, 16, 64, 256, 1024)

db = aic.Database.installed()
print(f"{aic.PACKAGE} {db.version}; DeepSeek-V3 fp8_block experts, balanced routing, expert TP; "
      "weight GB/s = balanced_experts(T) x 3 H I/tp x 1 byte / latency; peak = datasheet HBM GB/s")
print(f"{'system':9} {'engine':17} {'tp':>2} {'peak':>6}  " + " ".join(f"{'T=' + str(t):>7}" for t in TOKENS))
for system in ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm"):
    peak = registry.load_gpu(aic.SYSTEM_GPUS[system]).memory.bandwidth_GBps.value
    for engine in aic.ENGINES:
        version = db.current(system, engine)
        hit = db.table(system, engine, version, "moe") if version else None
        if hit is None:
            continue
        rows = aic._read_table(hit[0], {"moe_dtype": {"fp8_block"}, "distribution": {"balanced"}, "moe_ep_size": {1}})
        best: dict[tuple, float] = {}
        for r in rows:
            if (r["hidden_size"], r["inter_size"], r["num_experts"], r["topk"]) == (H, I, E, K):
                key = (int(r["moe_tp_size"]), int(r["num_tokens"]))
                best[key] = min(best.get(key, r["latency"]), r["latency"])
        for tp in (4, 8):
            cells = []
            for t in TOKENS:
                if (tp, t) not in best:
                    cells.append(f"{'-':>7}")
                    continue
                gbps = aic.balanced_experts(t, E, K) * 3 * H * (I / tp) / (best[(tp, t)] * 1e-3) / 1e9
                cells.append(f"{gbps:6.0f}" + ("*" if gbps > peak else " "))
            print(f"{system:9} {engine + ' ' + version:17} {tp:>2} {peak:6.0f}  " + " ".join(cells))
print("* above the datasheet peak")
