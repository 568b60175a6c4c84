"""Which form aiconfigurator's SGLang context-MLA rows time, and what reading them as that form
does to the silicon rows it prices.

aiconfigurator's SGLang collector (ai-dynamo/aiconfigurator collector/sglang/collect_mla.py
`run_mla`) times a prompt's MLA in the uncompressed form (K of 192 dims and V of 128 per head) for
its trtllm_mla backend only, and in the latent form (one shared K head of 576 dims, V of 512) for
every other backend, while SGLang's fa3 and triton backends run a prompt with no cached prefix
uncompressed, through MHA (sgl-project/sglang deepseek_v2.py `handle_attention_fa3`,
`handle_attention_triton`). `perfmodel.aic.LATENT_PREFILL_SOURCES` reads those rows as the op they
timed.

1. Per system, the context-MLA row of 16 heads (DeepSeek-V3 on TP8) over an 8192-token prompt,
   batch 1, bf16 KV, of each engine's table: its time, and the rate it implies read in the
   uncompressed form and, for the latent-form sources, in the latent form. TRT-LLM's rows time the
   uncompressed form on every system (its own module): the rate to compare with.
2. The imported way (uncalibrated) on every expressed SGLang row of an MLA model on a system whose
   SGLang table is of a latent-form source, priced twice in this run: the rows read as the
   uncompressed form (the former import) and as the form they timed (the import as shipped).

    python evidence/sglang-mla-prefill/check.py > evidence/sglang-mla-prefill/check.txt
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from perfmodel import aic, silicon, silicon_validate  # noqa: E402
from perfmodel.silicon_validate import error_stats  # noqa: E402

HEADS, ISL = 16, 8192
MLA_MODELS = ("deepseek-v3", "kimi-k2.6")


def rows_of(db: aic.Database, system: str, engine: str) -> tuple[str, list[dict]] | None:
    version = db.current(system, engine)
    hit = db.table(system, engine, version, "mla_prefill") if version else None
    if hit is None:
        return None
    return version, aic._read_table(hit[0])


def table(db: aic.Database) -> set[str]:
    latent_systems = set()
    print(f"1. context-MLA rows: {HEADS} heads, {ISL}-token prompt, batch 1, bf16 KV ({aic.PACKAGE} {db.version})")
    print(f"  {'system':22s} {'engine':8s} {'version':10s} {'kernel source':16s} {'ms':>7s} "
          f"{'TF/s uncompressed':>18s} {'TF/s latent':>12s}")
    for system in db.systems():
        for engine in ("sglang", "trtllm"):
            got = rows_of(db, system, engine)
            if got is None:
                continue
            version, rows = got
            rows = [r for r in rows if int(r["num_heads"]) == HEADS and int(r["isl"]) == ISL
                    and int(r["batch_size"]) == 1 and r["kv_cache_dtype"] == "bfloat16"]
            for src in sorted({r["kernel_source"] for r in rows}):
                mine = [r for r in rows if r["kernel_source"] == src]
                full = aic.mla_points(mine, True)
                latent = src in aic.latent_prefill_sources(engine)
                as_timed = aic.mla_points(mine, True, aic.latent_prefill_sources(engine))
                if latent:
                    latent_systems.add(system)
                for p, q in zip(full, as_timed):
                    rate = p.op.flops / (p.t_us * 1e6)
                    rate_l = f"{q.op.flops / (q.t_us * 1e6):12.0f}" if latent else f"{'':>12s}"
                    print(f"  {system:22s} {engine:8s} {version:10s} {src:16s} {p.t_us / 1e3:7.3f} {rate:18.0f} {rate_l}")
    return latent_systems


SHIPPED = dict(aic.LATENT_PREFILL_SOURCES)


def priced(rows, latent: bool) -> dict:
    aic.LATENT_PREFILL_SOURCES = dict(SHIPPED) if latent else {}
    got, _ = silicon_validate.price_ways(rows, ["imported"])
    return got["imported"]


def main() -> None:
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    print(f"perfmodel at {sha}")
    db = aic.Database.installed()
    systems = table(db)
    ok, _ = silicon.express_all(silicon.load_rows(db))
    rows = [e for e in ok if e.engine == "sglang" and e.model in MLA_MODELS and e.row.system in systems]
    print(f"\n2. imported way, uncalibrated: the {len(rows)} expressed SGLang rows of MLA models on "
          f"{', '.join(sorted(systems))}; median |error| (signed median), n")
    before, after = priced(rows, False), priced(rows, True)
    for fig in ("ttft_ms", "tpot_ms"):
        for name, res in (("rows read uncompressed", before), ("rows read as timed", after)):
            errs = [res[e.row.id][fig] / getattr(e.row, fig) - 1 for e in rows if "error" not in res[e.row.id]]
            s = error_stats(errs)
            print(f"  {fig}  {name:24s} {s['median_abs']:6.1%} ({s['signed_median']:+6.1%})  n {s['n']}")
    print("\n  TTFT slope per prompt token at C=4 (median TTFT of the 8192-token rows less that of the 1024-token "
          "rows, over 7168 tokens), µs; output length 1024")
    for name, get in (("measured", lambda e: e.row.ttft_ms), ("rows read uncompressed", lambda e: before[e.row.id]["ttft_ms"]),
                      ("rows read as timed", lambda e: after[e.row.id]["ttft_ms"])):
        at = {isl: sorted(get(e) for e in rows if e.concurrency == 4 and e.row.isl == isl and e.row.osl == 1024)
              for isl in (1024, 8192)}
        if all(at.values()):
            med = {k: v[len(v) // 2] for k, v in at.items()}
            print(f"  {name:24s} {(med[8192] - med[1024]) / 7168 * 1e3:6.1f}")
    print("\n  measured less priced TTFT (what a calibration's per-request wait would carry), ms, rows at C <= 16")
    for name, res in (("rows read uncompressed", before), ("rows read as timed", after)):
        gap = [e.row.ttft_ms - res[e.row.id]["ttft_ms"] for e in rows if e.concurrency <= 16 and "error" not in res[e.row.id]]
        print(f"  {name:24s} {min(gap):6.0f} to {max(gap):6.0f}")
    print("\n  per row: ISL x OSL, concurrency, measured TTFT ms, priced before -> after")
    for e in sorted(rows, key=lambda e: (e.row.isl, e.row.osl, e.concurrency)):
        b, a = before[e.row.id], after[e.row.id]
        if "error" in b or "error" in a:
            continue
        print(f"  {e.row.isl:5d} x {e.row.osl:5d}  C {e.concurrency:4d}  {e.row.ttft_ms:8.0f}  "
              f"{b['ttft_ms']:8.0f} -> {a['ttft_ms']:8.0f}")


if __name__ == "__main__":
    main()
