"""The measured figures of README.md and docs/kernels.md are generated from the committed
profiles, never typed."""

from pathlib import Path

import pytest

from perfmodel.reports.anchors import markers, render, render_blocks, update_file
from perfmodel.request import embedded_profile_path
from perfmodel.validate import run_validation

ROOT = Path(__file__).resolve().parents[1]
# Which generated block each document holds.
DOCS = {"README.md": "accuracy", "docs/kernels.md": "kernels"}


def test_generated_blocks_match_the_profiles():
    blocks = render_blocks(embedded_profile_path(), run_validation())
    for doc, name in DOCS.items():
        text = (ROOT / doc).read_text()
        begin, end = markers(name)
        assert text.count(begin) == 1 and text.count(end) == 1, f"{doc} lacks its {name} block"
        block = text[text.index(begin) + len(begin): text.index(end)]
        assert block.strip() == blocks[name].strip(), (
            f"{doc}'s {name} block is stale: run `python -m perfmodel.reports.anchors --readme README.md docs/kernels.md`")


def test_update_fills_only_the_named_blocks_and_refuses_a_file_without_one(tmp_path):
    doc = tmp_path / "doc.md"
    begin, end = markers("kernels")
    doc.write_text(f"intro\n{begin}\nold\n{end}\noutro\n")
    assert update_file(doc, {"kernels": "new\n", "accuracy": "other\n"}) == ["kernels"]
    assert doc.read_text() == f"intro\n{begin}\nnew\n{end}\noutro\n"
    (tmp_path / "plain.md").write_text("no blocks here\n")
    with pytest.raises(ValueError, match="holds none of the blocks"):
        update_file(tmp_path / "plain.md", {"kernels": "new\n"})


def test_quickstart_commands_are_in_readme():
    """The install, projection and test commands that `.ci/run` runs are on the README's first screen."""
    first_screen = "\n".join((ROOT / "README.md").read_text().splitlines()[:40])
    assert 'pip install -e ".[dev]" torch==2.13.0 triton==3.6.0' in first_screen
    assert "perfmodel project --target b300 --gpus 8 --model kimi-k2.6" in first_screen
    assert "python -m pytest" in first_screen
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "python -m pytest" in ci and any("torch==2.13.0" in line for line in ci)
    # the README's command leaves out the slow tests (tests/conftest.py): CI runs them too
    assert "python -m pytest -m slow" in ci


def test_anchors_render_a_partial_profile_and_refuse_a_bad_path(capsys):
    """A profile of some benches only (an `--only dispatch` run at 7a44901: no ceilings) renders,
    its missing ceilings said as such; a path that is no profile is one line and exit code 2."""
    import subprocess
    import sys

    part = ROOT / "tests/fixtures/dispatch_only_7a44901.json"
    block = render(part)
    assert "streaming read not measured" in block and "eager Triton kernel launch" in block
    r = subprocess.run([sys.executable, "-m", "perfmodel.reports.anchors", "--profile", str(ROOT / "no-such.json")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such file" in r.stderr


def test_physical_bound_is_the_probe_floor_plus_the_bytes_past_its_megabyte():
    """Hand-worked: a 1 MB probe read in 2.0 us, its split-K pair in 3.5 us; 5 MB more at
    4000 GB/s need 1.31 us (5 * 2**20 B / 4e6 B/us); under a megabyte only the floor is left;
    a profile without the probe has no bound."""
    from types import SimpleNamespace

    from perfmodel.reports.anchors import physical_bound_us

    o = SimpleNamespace(floor_dram_wave_us=2.0, floor_splitk_pair_us=3.5)
    one, two = physical_bound_us(o, 6 * 2**20, 4000.0)
    assert abs(one - (2.0 + 5 * 2**20 / 4e6)) < 1e-9 and abs(two - (3.5 + 5 * 2**20 / 4e6)) < 1e-9
    assert physical_bound_us(o, 1000.0, 4000.0) == (2.0, 3.5)
    assert physical_bound_us(SimpleNamespace(floor_dram_wave_us=None, floor_splitk_pair_us=3.5), 1e6, 4000.0) is None
    assert physical_bound_us(None, 1e6, 4000.0) is None
