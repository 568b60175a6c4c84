"""Which of the database's engine versions should price a silicon row that ran a version the
database lacks: the package's maintained one (what `validate --silicon` imports) or the one
nearest the row's (the oldest newer version, the kernels the row's engine grew into; past the
newest, the newest; a version that is no release, the maintained one). An experiment, not the
import: `silicon_validate._Imports.version` is replaced here by the nearest rule, and the
groups whose rows mostly ran versions the database lacks (SGLang on H200, TRT-LLM on H100, vLLM
on H200) are priced the imported way; the maintained-version errors are read from the committed
run (`../silicon-validation/all_rows.json`, same code for these rows).

    python evidence/engine-versions/nearest.py > evidence/engine-versions/nearest.txt
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from perfmodel import aic, silicon, silicon_validate  # noqa: E402
from perfmodel.aic import _version_key  # noqa: E402
from perfmodel.silicon_validate import error_stats  # noqa: E402

GROUPS = [("sglang", "h200_sxm"), ("trtllm", "h100_sxm"), ("vllm", "h200_sxm")]


def nearest(db: aic.Database, system: str, engine: str, version: str) -> str | None:
    vs = db.versions(system, engine)
    if version in vs:
        return version
    if not re.match(r"^v?\d+(\.\d+)+", version or ""):
        return db.current(system, engine)
    newer = [v for v in vs if _version_key(v) > _version_key(version)]
    return newer[0] if newer else (vs[-1] if vs else None)


def main() -> None:
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    db = aic.Database.installed()
    silicon_validate._Imports.version = lambda self, row: nearest(self.db, row.system, row.backend, row.backend_version)
    old = {p["id"]: p for p in json.loads((ROOT / "evidence/silicon-validation/all_rows.json").read_text())["points"]}
    ok, _ = silicon.express_all(silicon.load_rows(db))
    print(f"perfmodel at {sha}; {aic.PACKAGE} {db.version}; imported way; median |error| (signed median), "
          "maintained version -> nearest version")
    for engine, system in GROUPS:
        rows = [e for e in ok if e.engine == engine and e.row.system == system]
        moved = {}
        for e in rows:
            v = nearest(db, system, engine, e.row.backend_version)
            moved[(e.row.backend_version or "-", v)] = moved.get((e.row.backend_version or "-", v), 0) + 1
        new, _ = silicon_validate.price_ways(rows, ["imported"], db=db)
        print(f"\n{engine} on {system}: {len(rows)} rows; row version -> tables: "
              + ", ".join(f"{a} -> {b} ({n})" for (a, b), n in sorted(moved.items())))
        for fig in ("tpot_ms", "ttft_ms"):
            a, b = [], []
            for e in rows:
                p, q = new["imported"].get(e.row.id, {}), old.get(e.row.id, {}).get("predicted", {}).get("imported", {})
                if fig in p and fig in q:
                    m = getattr(e, f"measured_{fig}")
                    a.append(q[fig] / m - 1)
                    b.append(p[fig] / m - 1)
            sa, sb = error_stats(a), error_stats(b)
            print(f"  {fig:<8} n {len(a):4d}  maintained {sa['median_abs']:6.1%} ({sa['signed_median']:+6.1%})  "
                  f"nearest {sb['median_abs']:6.1%} ({sb['signed_median']:+6.1%})")


if __name__ == "__main__":
    main()
