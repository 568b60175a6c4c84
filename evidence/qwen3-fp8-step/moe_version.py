"""How much of SGLang's Qwen3-235B-FP8 miss the database's engine version could carry: the rows ran
SGLang 0.5.6.post2, which the database lacks; `validate --silicon` imports the maintained 0.5.14.
The database's 0.5.10 MoE table (the only older one on h200_sxm) times the same fp8_block kernel
slower at decode sizes. An experiment, not a change of the import: the 0.5.14 import with its
routed-expert law and samples replaced by those the 0.5.10 table gives (`aic.import_profile` of
each), every SGLang Qwen3-235B-FP8 row priced on both.

    python evidence/qwen3-fp8-step/moe_version.py > evidence/qwen3-fp8-step/moe_version.txt
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from perfmodel import aic, silicon  # noqa: E402
from perfmodel.profile import save_profile  # noqa: E402
from perfmodel.request import resolve_profile  # noqa: E402
from perfmodel.silicon_validate import price  # noqa: E402

SYSTEM, MODEL_PATH = "h200_sxm", "Qwen/Qwen3-235B-A22B-FP8"


def main() -> None:
    db = aic.Database.installed()
    local = resolve_profile(None)
    new = aic.import_profile(db, SYSTEM, "sglang@0.5.14", local)
    old = aic.import_profile(db, SYSTEM, "sglang@0.5.10", local)
    fits = dict(new.fits) | {k: v for k, v in old.fits.items() if k.startswith("moe_fp8")}
    benches = dict(new.benches) | {k: v for k, v in old.benches.items() if k.startswith("moe")}
    hybrid = new.model_copy(update={"fits": fits, "benches": benches})
    print(f"{aic.PACKAGE} {db.version}; moe_fp8 laws swapped: "
          + ", ".join(f"{k} {new.fits[k].t0_us:.1f} -> {old.fits[k].t0_us:.1f} us floor" for k in fits if k.startswith("moe_fp8")))
    rows = [r for r in silicon.load_rows(db) if r.model_path == MODEL_PATH and r.backend == "sglang" and r.system == SYSTEM]
    errs = {"0.5.14": [], "0.5.14 + 0.5.10 MoE": []}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for label, prof in (("0.5.14", new), ("0.5.14 + 0.5.10 MoE", hybrid)):
            paths[label] = Path(tmp) / f"{len(paths)}.json"
            save_profile(prof.model_dump(mode="json", exclude_none=True), paths[label])
        print(f"{'row':70s} {'measured':>8s} " + " ".join(f"{k:>22s}" for k in errs))
        for r in sorted(rows, key=lambda r: r.id):
            e = silicon.express(r)
            got = {k: price(e, profile=str(p)) for k, p in paths.items()}
            line = f"{r.id[-50:]:70s} {r.tpot_ms:8.2f} "
            for k, g in got.items():
                errs[k].append(g["tpot_ms"] / r.tpot_ms - 1)
                line += f" {g['tpot_ms']:8.2f} ({g['tpot_ms'] / r.tpot_ms - 1:+6.1%})     "
            print(line)
    for k, v in errs.items():
        print(f"{k}: TPOT median |error| {statistics.median(abs(x) for x in v):.1%}, signed median {statistics.median(v):+.1%} ({len(v)} rows)")


if __name__ == "__main__":
    main()
