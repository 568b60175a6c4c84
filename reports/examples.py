"""Regenerate the committed example reports under reports/examples (its own command):

    python -m perfmodel.reports.examples [--out reports/examples]

tests/test_examples.py checks that the committed JSON and markdown equal what this writes."""

from __future__ import annotations

import argparse
from pathlib import Path

from perfmodel.scenario import Request

# name -> (request, source machine): the README's reference scenario and its mirror.
EXAMPLES = {
    "b300": (Request(target="b300", gpus=8, spec="ddtree"), "rtx-pro-6000"),
    "rtx-pro-6000": (Request(target="rtx-pro-6000", gpus=8, spec="ddtree"), "h200"),
}


def write_examples(out: Path) -> list[Path]:
    from perfmodel.reports.findings import write_report

    return [write_report(req, Path(out) / name, source=src) for name, (req, src) in EXAMPLES.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="reports/examples")
    for p in write_examples(Path(ap.parse_args().out)):
        print(p)


if __name__ == "__main__":
    main()
