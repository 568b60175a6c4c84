"""Regenerate the committed example notes under reports/examples (its own command):

    python -m perfmodel.reports.examples [--out reports/examples]

tests/test_examples.py checks that the committed JSON, markdown and figures equal what this
writes. `b300-calibrated` is the reference scenario with the reference user's own two figures as
calibration (reports/examples/reference_observed.yaml): the calibration is fitted here, written
beside the notes as calib.json, and the notes read it by that relative name."""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import replace
from pathlib import Path

from perfmodel.scenario import Request

HERE = Path(__file__).resolve().parent / "examples"
OBSERVED = HERE / "reference_observed.yaml"  # the calibration input of `b300-calibrated`

# name -> (request, source machine, calibration input or None): the README's reference scenario,
# its mirror, and the reference scenario calibrated to its user's figures.
EXAMPLES = {
    "b300": (Request(target="b300", gpus=8, spec="ddtree"), "rtx-pro-6000", None),
    "rtx-pro-6000": (Request(target="rtx-pro-6000", gpus=8, spec="ddtree"), "h200", None),
    "b300-calibrated": (Request(target="b300", gpus=8, spec="ddtree"), "rtx-pro-6000", OBSERVED),
}


def write_example(name: str, out: Path) -> Path:
    from perfmodel.calibrate import fit, load_input, write_result
    from perfmodel.reports.findings import write_report
    from perfmodel.request import resolve_profile

    req, src, observed = EXAMPLES[name]
    folder = Path(out).resolve() / name
    if observed is None:
        return write_report(req, folder, source=src)
    prof = resolve_profile(None)
    folder.mkdir(parents=True, exist_ok=True)
    write_result(fit(load_input(str(observed)), prof, prof.label), folder / "calib.json")
    with contextlib.chdir(folder):  # the notes name the calibration as the user would: beside them
        return write_report(replace(req, calibration="calib.json"), folder, source=src)


def write_examples(out: Path) -> list[Path]:
    return [write_example(name, out) for name in EXAMPLES]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="reports/examples")
    for p in write_examples(Path(ap.parse_args().out)):
        print(p)


if __name__ == "__main__":
    main()
