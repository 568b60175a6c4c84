"""TRT-LLM's TTFT above vLLM's on the same deployment, in TRT-LLM's decode steps (run from the
repository root: python evidence/ttft-diagnosis/trtllm_wait.py).

For every InferenceX row pair of the silicon sample that differs only by engine (the same model
checkpoint, system, precision, isl, osl, concurrency and layout), (TTFT_trtllm - TTFT_vllm) /
TPOT_trtllm: how many of its own decode steps a TRT-LLM prompt waits beyond vLLM's. Measured
figures only; nothing is priced.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from perfmodel import silicon


def main() -> None:
    rows = [r for r in silicon.load_rows() if r.min_length_ratio < 1 and r.backend in ("vllm", "trtllm")]
    by = defaultdict(dict)
    for r in rows:
        key = (r.model_path, r.system, r.precision, r.isl, r.osl, r.concurrency, r.layout_text)
        by[key][r.backend] = r
    print(f"{'model':<34} {'system':<9} {'prec':<5} {'isl/osl':<10} {'C':>4}  {'layout':<34} {'TTFT trt':>9} "
          f"{'TTFT vllm':>9} {'TPOT trt':>8} {'TPOT vllm':>9} {'wait (trt steps)':>16}")
    waits = defaultdict(list)
    for key in sorted(by, key=str):
        pair = by[key]
        if len(pair) < 2:
            continue
        t, v = pair["trtllm"], pair["vllm"]
        # InferenceX's 70B TRT-LLM script batch-waits at ISL = OSL = 1024 and TP < 8 (SOURCES.md V11)
        waiting = t.isl == t.osl == 1024 and t.tp_size < 8
        waits[(key[0], "ISL = OSL = 1024, TP < 8" if waiting else "other lengths or TP 8")].append(
            (t.ttft_ms - v.ttft_ms) / t.tpot_ms)
        print(f"{key[0]:<34} {key[1]:<9} {key[2]:<5} {f'{key[3]}/{key[4]}':<10} {key[5]:>4}  {key[6]:<34} {t.ttft_ms:9.1f} "
              f"{v.ttft_ms:9.1f} {t.tpot_ms:8.2f} {v.tpot_ms:9.2f} {(t.ttft_ms - v.ttft_ms) / t.tpot_ms:16.1f}")
    print("\nwait in TRT-LLM decode steps, by model and configuration: n, median, min, max")
    for (model, cfg), w in sorted(waits.items()):
        print(f"  {model:<34} {cfg:<26} n {len(w):3d}  median {statistics.median(w):5.1f}  min {min(w):5.1f}  max {max(w):5.1f}")


if __name__ == "__main__":
    main()
