"""python -m perfmodel.measure --out profile.json [--quick] [--only a,b] [--resume] [--no-progress]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from .runner import BENCH_ORDER, run_measure

    ap = argparse.ArgumentParser(prog="python -m perfmodel.measure", description="Measure this GPU and write a profile.")
    ap.add_argument("--out", type=Path, required=True, help="profile JSON to write (a .log is written beside it)")
    ap.add_argument("--quick", action="store_true", help="fewer points per sweep (about 40 s)")
    ap.add_argument("--only", default="", help=f"comma-separated benches: {','.join(BENCH_ORDER)}")
    ap.add_argument("--resume", action="store_true", help="keep benches already ok in --out, run the rest")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    only = [x.strip() for x in a.only.split(",") if x.strip()] or None
    cmd = "python -m perfmodel.measure " + " ".join(sys.argv[1:] if argv is None else argv)
    return run_measure(a.out, only=only, quick=a.quick, resume=a.resume, progress=not a.no_progress, command=cmd)


if __name__ == "__main__":
    sys.exit(main())
