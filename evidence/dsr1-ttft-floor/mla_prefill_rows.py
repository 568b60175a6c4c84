"""aiconfigurator-core's context-MLA rows (the table `import-aic` fits `attention_mla.prefill` on)
as achieved TFLOP/s, by system and engine, at DeepSeek-R1's 16 heads per GPU (TP8), one prompt.

FLOPs of one causal prompt of T tokens per head: T^2 x (192 + 128) (QK^T at 192 = 128 nope + 64
rope dims, PV at 128; half the square, 2 FLOPs a multiply-add). Needs the optional package
(`pip install -e ".[aic]"`); paths are printed inside it.

    python evidence/dsr1-ttft-floor/mla_prefill_rows.py > evidence/dsr1-ttft-floor/mla_prefill_rows.txt
"""
import pandas as pd

from perfmodel.aic import Database

HEADS = 16  # DeepSeek-R1's 128 heads over TP8
TOKENS = (1024, 4096, 8192, 16384)


def main() -> None:
    db = Database.installed()
    print(f"aiconfigurator-core {db.version}: mla_prefill rows (context_mla_perf), batch 1, {HEADS} heads,"
          " latency ms and TFLOP/s (T^2 x 320 x heads)")
    for system in ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200"):
        for engine in ("sglang", "trtllm"):
            version = db.current(system, engine) if db.versions(system, engine) else None
            found = db.table(system, engine, version, "mla_prefill") if version else None
            if not found:
                continue
            path, held = found
            rows = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
            for kv in sorted(rows["kv_cache_dtype"].unique()):
                sel = rows[(rows.batch_size == 1) & (rows.num_heads == HEADS) & (rows.kv_cache_dtype == kv)]
                cells = []
                for t in TOKENS:
                    r = sel[sel.isl == t]
                    if r.empty:
                        cells.append(f"{t:>5}: -")
                        continue
                    ms = float(r.latency.min())
                    cells.append(f"{t:>5}: {ms:7.3f} ms {t * t * 320 * HEADS / ms / 1e9:5.0f} TF/s")
                src = ",".join(sorted(rows.kernel_source.unique()))
                print(f"  {system:9} {engine:7} {held:10} kv {kv:8} {src:16} " + "  ".join(cells))
            print(f"    ({db.where(db.rel(path))})")


if __name__ == "__main__":
    main()
