"""`perfmodel report`: generation on the CPU, figures are valid PNGs, numbers in the markdown equal
the JSON beside it (and the JSON equals `perfmodel project --format json`), one line + exit 2 on an
unwritable folder, robustness to a measured profile with raw samples."""

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfmodel.cli import app
from perfmodel.model.derived import spec_derived_profile
from perfmodel.model.project import Request
from perfmodel.profile import BenchResult, Ceilings, Sample, save_profile
from perfmodel.reports.findings import ReportError, report_name, write_report
from perfmodel.specs import registry

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
runner = CliRunner()


@pytest.fixture(scope="module")
def b300(tmp_path_factory):
    out = tmp_path_factory.mktemp("b300")
    md = write_report(Request(target="b300", gpus=8, model="kimi-k2.6", spec="ddtree", concurrency=[1, 8, 32]), out)
    return md, json.loads(md.with_suffix(".json").read_text())


def _images(md: Path) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md.read_text())


def _decimals(s: str) -> int:
    return len(s.split(".")[1]) if "." in s else 0


def _close(printed: str, value: float) -> bool:
    """The printed number is `value` rounded to the printed precision."""
    x = float(printed.replace(",", ""))
    return abs(x - value) <= 0.5 * 10 ** -_decimals(printed) + 1e-9 * abs(value)


def test_eager_call_costs_are_named_and_printed_as_timed(b300):
    """The anchors list each timed eager call by its class and print its cost and the
    interleave factor as the profile holds them (the embedded profile measured both)."""
    from perfmodel.model.project import embedded_profile_path
    from perfmodel.profile import load_profile

    md, doc = b300
    o = load_profile(str(embedded_profile_path())).overheads
    text = md.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("Eager calls as timed"))
    for cls, us in o.launch_eager_call_us.items():
        m = re.search(re.escape(cls) + r" ([0-9.]+) µs", line)
        assert m and _close(m.group(1), us), cls
    m = re.search(r"made in turn, one of each, ([0-9.]+)x their sum", line)
    assert m and _close(m.group(1), o.eager_interleave_factor)
    named = [s["what"] for s in doc["anchors"]["dispatch_samples"] if s["what"].startswith("eager_call")]
    assert sorted(named) == sorted(f"eager_call {c}" for c in o.launch_eager_call_us)


def test_name_from_target_memory_and_link(b300):
    md, doc = b300
    assert md.name == "B300_HBM3E_NVLINK5_NOTES.md"
    assert report_name({"gpu": "rtx-pro-6000-server", "memory_kind": "GDDR7", "link_kind": "pcie5"}) == \
        "RTX_PRO_6000_GDDR7_PCIE5_NOTES"


def test_sections_present(b300):
    text = b300[0].read_text()
    for h in ("## 1. What this describes", "## 2. Summary", "## 3. Measured anchors", "## 4. Source vs target",
              "## 5. Projection", "## 6. Figures", "## 7. Assumptions", "## 8. Recommendations"):
        assert h in text, h
    if b300[1]["anchors"]["measured"] is False:
        assert "no measurement: spec-derived" in text


def test_figures_exist_and_are_png(b300):
    md, doc = b300
    imgs = _images(md)
    assert len(imgs) >= 5  # breakdown, throughput, roofline, budget (ddtree), tornado
    for rel in imgs:
        assert not Path(rel).is_absolute() and "/" not in rel, rel  # relative: renders on GitHub
        p = md.parent / rel
        assert p.is_file(), rel
        assert p.read_bytes()[:8] == PNG_MAGIC, rel
    assert set(doc["figures"].values()) == set(imgs)


def test_table_numbers_equal_json(b300):
    md, doc = b300
    text = md.read_text()
    for who in ("Target", "Source"):
        proj = doc[who.lower()]["projection"]
        block = text.split(f"### {who}:")[1].split("\n\n", 2)[1]
        rows = [r for r in block.splitlines() if re.match(r"^\| \d", r)]
        pts = {p["concurrency"]: p for p in proj["points"]}
        assert [int(r.split("|")[1]) for r in rows] == list(pts)
        checked = 0
        for r in rows:
            cells = [c.strip() for c in r.strip("|").split("|")]
            p = pts[int(cells[0])]
            if not p["fits_in_memory"]:
                assert "does not fit" in r
                continue
            assert int(cells[1]) == p["budget"]
            assert _close(re.findall(r"[\d.]+", cells[2])[0], p["tau"])
            for cell, key in zip(cells[3:6], ("step_ms", "tokens_per_s_per_stream", "tokens_per_s")):
                nums = re.findall(r"[\d,]+(?:\.\d+)?", cell)
                assert len(nums) == 3, cell
                assert _close(nums[0], p[key]), (cell, key, p[key])
                assert _close(nums[1], p["interval"][key][0]) and _close(nums[2], p["interval"][key][1]), (cell, key)
            assert cells[6] == p["bottleneck"]
            # throughput laws: tau tokens per step, C streams
            assert p["tokens_per_s_per_stream"] == pytest.approx(p["tau"] / p["step_ms"] * 1e3)
            assert p["tokens_per_s"] == pytest.approx(p["concurrency"] * p["tokens_per_s_per_stream"])
            checked += 1
        assert checked >= 1


def test_json_is_the_projection_run(b300):
    _, doc = b300
    args = shlex.split(doc["target"]["command"])[1:]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    cli = json.loads(r.output)
    proj = doc["target"]["projection"]
    assert cli["points"] == proj["points"]
    assert cli["target"] == proj["target"] and cli["max_concurrency_that_fits"] == proj["max_concurrency_that_fits"]
    # independent figures: the host term is the embedded profile's measured host step, and the
    # KV of each fitting point is C x (context + B + 1) x Kimi's 70,272 B latent per token
    from importlib import resources

    from perfmodel.profile import load_profile

    host_ms = load_profile(str(resources.files("perfmodel").joinpath("data", "h200-sxm.json"))).overheads.host_step_us / 1e3
    for p in proj["points"]:
        if p["fits_in_memory"]:
            assert p["breakdown_ms"]["host"] == pytest.approx(host_ms)
            extra = p["budget"] + 1 if p["budget"] else 0
            assert p["memory_GB"]["kv"] == pytest.approx(p["concurrency"] * (proj["context"] + extra) * 61 * 576 * 2 / 1e9)


def test_summary_numbers_come_from_json(b300):
    md, doc = b300
    text = md.read_text()
    summary = text.split("## 2. Summary")[1].split("## 3.")[0]
    p1 = next(p for p in doc["target"]["projection"]["points"] if p["concurrency"] == 1)
    from perfmodel.reports.findings import fmt

    assert f"{fmt(p1['tokens_per_s_per_stream'])} tok/s per stream" in summary


def test_unwritable_out_is_one_line_exit_2(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(ReportError):
        write_report(Request(target="b300", spec="ddtree", concurrency=[1]), blocker / "sub")
    r = runner.invoke(app, ["report", "--target", "b300", "--concurrency", "1", "--out", str(blocker / "sub")])
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output


def test_measured_profile_with_samples(tmp_path):
    """A profile with raw samples (shape keys partly unknown) gives the MoE curve and roofline points."""
    gpu = registry.load_gpu("h200")
    prof = spec_derived_profile(gpu, registry.load_memory_kinds())
    moe = [Sample(shape={"shape": "kimi_tp8", "T": T, "E": 384}, bytes=2e8, flops=2e8 * T / 8,
                  median_ms=2e8 / (3.0e12 * min(1.0, 0.3 + 0.1 * T)) * 1e3, achieved_GBps=3000 * min(1.0, 0.3 + 0.1 * T))
           for T in (1, 2, 4, 8, 16)]
    odd = [Sample(shape={"mystery": "x"}, median_ms=0.01)]  # no bytes/flops/T: skipped, not fatal
    prof = prof.model_copy(update={
        "provenance": prof.provenance.model_copy(update={"kind": "measured", "note": "synthetic test"}),
        "ceilings": Ceilings(copy_GBps=4000, read_GBps=4300, bf16_TFLOPS=750, source="synthetic"),
        "benches": {"moe": BenchResult(status="ok", samples=moe), "dispatch": BenchResult(status="ok", samples=odd)},
    })
    path = tmp_path / "p.json"
    save_profile(prof, path)
    md = write_report(Request(target="rtx-pro-6000", gpus=8, spec="ddtree", concurrency=[1, 4], profile=str(path)),
                      tmp_path / "out", source="h200")
    doc = json.loads(md.with_suffix(".json").read_text())
    assert md.name == "RTX_PRO_6000_GDDR7_PCIE5_NOTES.md"
    assert doc["anchors"]["measured"] and doc["anchors"]["moe_curves"] and doc["anchors"]["roofline_points"]
    assert "moe" in doc["figures"]
    for rel in _images(md):
        assert (md.parent / rel).read_bytes()[:8] == PNG_MAGIC
    assert "no measurement: spec-derived" not in md.read_text()


def test_each_figure_has_labelled_axes_and_a_legend_entry_per_series(b300, monkeypatch, tmp_path):
    """Issue #17 item 10: every figure renders with x/y labels, a legend outside the axes, and a
    legend entry for every drawn line and bar group; no "×10^" tick labels."""
    from perfmodel.reports import figures

    _, doc = b300
    drawn = []
    monkeypatch.setattr(figures, "_save", lambda fig, path: drawn.append(fig))
    figures.write_all(doc, tmp_path, "X")
    assert len(drawn) >= 5
    for fig in drawn:
        fig.canvas.draw()
        for ax in fig.axes:
            assert ax.get_xlabel() and ax.get_ylabel(), ax.get_title()
            for t in ax.get_xticklabels() + ax.get_yticklabels():
                assert "times" not in t.get_text() and "×10" not in t.get_text(), t.get_text()
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        assert legends, fig.axes[0].get_title()
        names = {t.get_text() for lg in legends for t in lg.get_texts()}
        for ax in fig.axes:
            for line in ax.get_lines():
                if line.get_label().startswith("_") or len(line.get_xdata()) < 2 and line.get_marker() == "*":
                    continue
                assert line.get_label() in names, (ax.get_title(), line.get_label())
        for lg in legends:  # outside the axes: anchored right of them
            assert lg.get_bbox_to_anchor().x0 >= lg.axes.get_window_extent().x1 - 1


@pytest.mark.slow  # two whole reports, figures included
def test_same_input_same_bytes(tmp_path):
    """Issue #17 item 9: two runs with the same arguments write identical files."""
    req = Request(target="b300", gpus=8, spec="ddtree", concurrency=[1, 8])
    a, b = write_report(req, tmp_path / "a"), write_report(req, tmp_path / "b")
    for f in sorted(a.parent.iterdir()):
        assert f.read_bytes() == (b.parent / f.name).read_bytes(), f.name
