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
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "python -m pytest" in ci and any("torch==2.13.0" in line for line in ci)
    # the README's command leaves out the slow tests (tests/conftest.py): CI runs them too
    assert "python -m pytest -m slow" in ci


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
