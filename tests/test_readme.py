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
