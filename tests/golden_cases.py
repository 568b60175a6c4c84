"""The commands whose output must not change when the code is reorganised: the README's
projections, a calibration, compare and validate, each with its expected output in
tests/fixtures/golden/. `python tests/golden_cases.py --write` regenerates them (only when an
output is meant to change; the diff then shows what changed)."""

from __future__ import annotations

import sys
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "fixtures" / "golden"
OBSERVED = Path(__file__).resolve().parent / "fixtures" / "golden_observed.yaml"

PROJECT = ["project", "--format", "json"]
CASES: dict[str, list[str]] = {
    "quickstart": PROJECT + ["--target", "b300", "--gpus", "8", "--model", "kimi-k2.6", "--parallel", "tp",
                             "--concurrency", "1,8,32,128"],
    "ddtree_auto": PROJECT + ["--target", "b300", "--gpus", "8", "--spec", "ddtree", "--budget", "auto",
                              "--concurrency", "1,8,32,128"],
    "ep_pcie": PROJECT + ["--target", "rtx-pro-6000", "--gpus", "8", "--parallel", "tp-attn-ep-moe", "--concurrency", "1,16"],
    "dense_h200": PROJECT + ["--target", "h200", "--gpus", "1", "--model", "llama-3.1-8b", "--concurrency", "1,64",
                             "--no-graphs"],
    "observed": PROJECT + ["--target", "b300", "--gpus", "8", "--observed", "rtx-pro-6000,tp8,c=1,98tok/s",
                           "--concurrency", "1,32"],
    "chain_torch": PROJECT + ["--target", "b200", "--gpus", "8", "--spec", "chain", "--kernels", "torch",
                              "--concurrency", "1,8"],
    "sensitivity": PROJECT + ["--target", "b300", "--gpus", "8", "--concurrency", "8", "--sensitivity"],
    "compare": ["compare", "--format", "json", "--target", "h200,b300", "--gpus", "4,8", "--parallel", "tp,tp-attn-ep-moe",
                "--concurrency", "1,32"],
    "calibrate": ["calibrate", str(OBSERVED), "--format", "json", "--out", "{tmp}/calib.json"],
    "validate": ["validate", "--format", "json"],
}


def run(args: list[str], tmp: Path) -> str:
    from typer.testing import CliRunner

    from perfmodel.cli import app

    r = CliRunner().invoke(app, [a.replace("{tmp}", str(tmp)) for a in args], catch_exceptions=False)
    return f"exit {r.exit_code}\n{r.stdout}"


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import tempfile

    GOLDEN.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        for name, args in CASES.items():
            (GOLDEN / f"{name}.txt").write_text(run(args, Path(d)))
            print(name)
