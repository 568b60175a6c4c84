"""The committed example reports are what `python -m perfmodel.reports.examples` writes
(JSON and markdown compared as text, PNGs byte for byte: the figures are deterministic)."""

from pathlib import Path

import pytest

from perfmodel.reports.examples import EXAMPLES, write_examples
from perfmodel.reports.writer import is_manifest  # a report's list of its own files

ROOT = Path(__file__).resolve().parents[1] / "reports" / "examples"


@pytest.mark.slow  # every example report, figures included
@pytest.mark.skipif(not ROOT.is_dir(), reason="examples not in this checkout")
def test_committed_examples_match_the_command(tmp_path):
    write_examples(tmp_path)
    for name in EXAMPLES:
        fresh = sorted(p.name for p in (tmp_path / name).iterdir() if not is_manifest(p.name))
        assert fresh == sorted(p.name for p in (ROOT / name).iterdir() if not is_manifest(p.name)), name
        for f in fresh:
            assert (tmp_path / name / f).read_bytes() == (ROOT / name / f).read_bytes(), \
                f"reports/examples/{name}/{f} is stale: run `python -m perfmodel.reports.examples`"
