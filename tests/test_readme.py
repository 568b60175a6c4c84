"""The README's measured figures are generated from the committed profile, never typed."""

from pathlib import Path

from perfmodel.model.project import embedded_profile_path
from perfmodel.reports.anchors import BEGIN, END, render
from perfmodel.validate import run_validation

ROOT = Path(__file__).resolve().parents[1]


def test_readme_anchor_block_matches_profile():
    text = (ROOT / "README.md").read_text()
    block = text[text.index(BEGIN) + len(BEGIN): text.index(END)]
    assert block.strip() == render(embedded_profile_path(), run_validation()).strip(), (
        "README anchors are stale: run `python -m perfmodel.reports.anchors --readme README.md`")


def test_quickstart_commands_are_in_readme():
    text = (ROOT / "README.md").read_text()
    assert "perfmodel project --target b300 --gpus 8 --model kimi-k2.6" in text
    assert "python -m pytest" in text
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python -m pytest" in ci and "torch==2.13.0" in ci


def test_anchors_render_a_partial_profile_and_refuse_a_bad_path(capsys):
    """A profile of some benches only (session 11's `--only dispatch` run: no ceilings) renders,
    its missing ceilings said as such; a path that is no profile is one line and exit code 2."""
    import subprocess
    import sys

    part = ROOT / "runs/tuning/session11/measure_7a44901_dispatch/h200-sxm_dispatch.json"
    block = render(part)
    assert "streaming read not measured" in block and "eager Triton kernel launch" in block
    r = subprocess.run([sys.executable, "-m", "perfmodel.reports.anchors", "--profile", str(ROOT / "no-such.json")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such file" in r.stderr
