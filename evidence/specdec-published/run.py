"""Published speculative-decoding figures with an acceptance length, priced three ways (run from the
repository root: python evidence/specdec-published/run.py > evidence/specdec-published/run.txt).

1. uncalibrated: each point's step priced from shapes (the drafter's forwards, an EAGLE tree's
   building, the verify), tau = the published acceptance length;
2. transferred: each engine's own calibration, fitted on other data and never on these points
   (`--calibration engine:sglang|trtllm`: the engine's host time per step on aiconfigurator's
   non-speculative serving rows; the vLLM EAGLE-3 table's fit, evidence/engine-host-eagle3/);
3. held out within the set: `perfmodel calibrate` on each file (its engine host per step and per
   draft forward only, `factors:` in the file), every point left out in turn (the calibrate
   output's leave-one-out column).
Errors: predicted / published - 1 (+: perfmodel too fast for tok/s, too slow for TPOT).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import perfmodel
from perfmodel.calibrate import load_input

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
VLLM_CALIB = "evidence/engine-host-eagle3/vllm-eagle3.calib.json"
RUNS = [  # points file, the calibrations carried to it (none: uncalibrated)
    ("evidence/specdec-published/sglang-eagle3-tree.yaml", [None, "engine:sglang", VLLM_CALIB]),
    ("evidence/specdec-published/trtllm-mtp.yaml", [None, "engine:trtllm"]),
]
BAR = 0.15


def sha() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()


def predicted(point, calibration: str | None):
    """(the point's figure, the projected point)."""
    req = dataclasses.replace(point.request(), calibration=calibration)
    pt = perfmodel.project(req).points[0]
    figure, _ = point.figure
    return getattr(pt, figure), pt


def published_step_ms(point) -> float:
    """The step time the published figure implies at its acceptance length (tau / tok/s, or TPOT x tau)."""
    figure, v = point.figure
    tau = point.acceptance_length or 1.0
    return 1e3 * tau / v if figure == "tokens_per_s_per_stream" else v * tau


def main() -> None:
    print(f"perfmodel at {sha()}")
    for path, calibrations in RUNS:
        inp = load_input(str(ROOT / path))
        print(f"\n== {inp.engine}: {path} ==")
        for cal in calibrations:
            name = cal or "uncalibrated"
            print(f"-- {name}")
            errs = []
            for p in inp.points:
                figure, observed = p.figure
                pred, pt = predicted(p, cal)
                err = pred / observed - 1
                spec = p.spec != "none"
                if spec:
                    errs.append(err)
                print(f"  {p.label:<42} {figure} published {observed:8.2f}  predicted {pred:8.2f}  {err:+7.1%}")
                parts = ", ".join(f"{k} {v:.2f}" for k, v in pt.breakdown_ms.items()
                                  if k in ("draft", "tree_build", "engine_host", "host") and v > 0)
                print(f"  {'':<42} step ms: published {published_step_ms(p):6.2f}  predicted {pt.step_ms:6.2f}  ({parts})")
            within = sum(abs(e) <= BAR for e in errs)
            print(f"  speculative points within {BAR:.0%}: {within} of {len(errs)}")
        sys.stdout.flush()
        print(f"-- held out within the set (perfmodel calibrate {path})")
        out = subprocess.run(["perfmodel", "calibrate", path, "--out", "/dev/null"], capture_output=True, text=True,
                             cwd=ROOT, env={"COLUMNS": "160", "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"})
        print(out.stdout + out.stderr, end="")


if __name__ == "__main__":
    main()
