"""`perfmodel report`: notes built around the user's question, answer first. Checked against the
JSON beside them (and the JSON against `perfmodel project --format json`): the TL;DR, the user's
figures with the fit error against each, the projection table, the bottleneck shift as findings
from both machines' breakdowns, recommendations an engine user can act on ranked at the
concurrencies served (or at a service level) with no row that gains nothing, what-ifs on
perfmodel's own kernels in the appendix only, nothing off-topic, the same bytes for the same
input; one line + exit 2 on an unwritable folder."""

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfmodel.cli import app
from perfmodel.reports.findings import MIN_GAIN, ReportError, report_name, write_report
from perfmodel.reports.sections import fmt, label
from perfmodel.scenario import Request
from perfmodel.specs import registry

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def b300(tmp_path_factory):
    out = tmp_path_factory.mktemp("b300")
    md = write_report(Request(target="b300", gpus=8, model="kimi-k2.6", spec="ddtree", concurrency=[1, 8, 32]), out)
    return md, json.loads(md.with_suffix(".json").read_text())


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """The bar: the reference scenario's B300 notes with its user's two figures as calibration."""
    from perfmodel.reports.examples import write_example

    out = tmp_path_factory.mktemp("cal")
    md = write_example("b300-calibrated", out)
    return md, json.loads(md.with_suffix(".json").read_text())


def _images(md: Path) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md.read_text())


def _decimals(s: str) -> int:
    return len(s.split(".")[1]) if "." in s else 0


def _close(printed: str, value: float) -> bool:
    """The printed number is `value` rounded to the printed precision."""
    x = float(printed.replace(",", "").replace("%", ""))
    return abs(x - value) <= 0.5 * 10 ** -_decimals(printed.replace("%", "")) + 1e-9 * abs(value)


def _section(text: str, head: str) -> str:
    return text.split(head, 1)[1].split("\n## ", 1)[0]


def _table(block: str) -> list[list[str]]:
    rows = [r for r in block.splitlines() if r.startswith("|") and not r.startswith("|---")]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows[1:]]


def test_name_from_target_memory_and_link(b300):
    md, doc = b300
    assert md.name == "B300_HBM3E_NVLINK5_NOTES.md"
    assert report_name({"gpu": "rtx-pro-6000-server", "memory_kind": "GDDR7", "link_kind": "pcie5"}) == \
        "RTX_PRO_6000_GDDR7_PCIE5_NOTES"


def test_answer_first_and_short(b300):
    text = b300[0].read_text()
    heads = [ln for ln in text.splitlines() if ln.startswith("## ")]
    assert heads[:6] == ["## TL;DR", "## 1. What was measured on the source", "## 2. Projection on the target (8× b300-sxm)",
                         "## 3. What stops dominating, what starts", "## 4. What to change",
                         "## 5. Assumptions and what would change the answer"]
    assert all(h.startswith("## Appendix") for h in heads[6:]) and len(heads) >= 8
    tldr = _section(text, "## TL;DR")
    items = re.findall(r"^(\d)\. ", tldr, re.M)
    assert 3 <= len(items) <= 5 and items == [str(i) for i in range(1, len(items) + 1)]
    assert len(text.splitlines()) <= 150


def test_figures_exist_and_are_png(b300):
    md, doc = b300
    imgs = _images(md)
    assert set(doc["figures"].values()) == set(imgs) and {"breakdown", "throughput", "budget"} <= set(doc["figures"])
    for rel in imgs:
        assert not Path(rel).is_absolute() and "/" not in rel, rel  # relative: renders on GitHub
        assert (md.parent / rel).read_bytes()[:8] == PNG_MAGIC, rel


def test_projection_table_equals_json(b300):
    md, doc = b300
    proj = doc["target"]["projection"]
    rows = _table(_section(md.read_text(), "## 2. Projection on the target"))
    pts = {p["concurrency"]: p for p in proj["points"]}
    assert [int(re.match(r"\d+", r[0]).group()) for r in rows] == list(pts)
    n = proj["target"]["n_gpus"]
    for r in rows:
        p = pts[int(re.match(r"\d+", r[0]).group())]
        if not p["fits_in_memory"]:
            assert "does not fit" in r[1]
            continue
        for cell, value, (lo, hi) in ((r[1], p["tokens_per_s_per_stream"], p["interval"]["tokens_per_s_per_stream"]),
                                      (r[2], p["tokens_per_s_per_gpu"], [x / n for x in p["interval"]["tokens_per_s"]])):
            nums = re.findall(r"[\d,]+(?:\.\d+)?", cell)
            assert len(nums) == 3 and _close(nums[0], value) and _close(nums[1], lo) and _close(nums[2], hi), cell
        assert _close(r[4], p["step_ms"]) and _close(r[5], p["tpot_ms"])
        assert p["tokens_per_s_per_stream"] == pytest.approx(p["tau"] / p["step_ms"] * 1e3)
        assert p["tokens_per_s"] == pytest.approx(p["concurrency"] * p["tokens_per_s_per_stream"])
        top = max(p["breakdown_ms"], key=p["breakdown_ms"].get)
        assert r[-1].startswith(label(top))


def test_json_is_the_projection_run(b300):
    _, doc = b300
    r = runner.invoke(app, shlex.split(doc["target"]["command"])[1:])
    assert r.exit_code == 0, r.output
    cli = json.loads(r.output)
    proj = doc["target"]["projection"]
    assert cli["points"] == proj["points"] and cli["target"] == proj["target"]


def test_bottleneck_shift_findings_come_from_both_breakdowns(b300):
    """The term that shrinks most from source to target at the first common C, the share of the
    fixed per-step terms on each machine, and the largest term at each C, each said and each
    equal to what the two breakdowns give."""
    md, doc = b300
    tp, sp = doc["target"]["projection"], doc["source"]["projection"]
    C0 = doc["shift"]["concurrencies"][0]
    t = next(p for p in tp["points"] if p["concurrency"] == C0)
    s = next(p for p in sp["points"] if p["concurrency"] == C0)
    drop = {c: s["breakdown_ms"].get(c, 0) - t["breakdown_ms"].get(c, 0) for c in set(s["breakdown_ms"]) | set(t["breakdown_ms"])}
    first = doc["shift"]["shrink"][0]
    assert first["component"] == max(drop, key=drop.get)
    text = _section(md.read_text(), "## 3. What stops dominating")
    assert f"{fmt(first['source_ms'])} ms of the source's {fmt(s['step_ms'])} ms step" in text
    assert f"{fmt(first['target_ms'])} ms of the target's {fmt(t['step_ms'])} ms" in text
    fixed = sum(t["breakdown_ms"].get(c, 0) for c in ("latency_floor", "dispatch", "host", "engine_host")) / t["step_ms"]
    assert doc["shift"]["fixed"]["target"]["share"] == pytest.approx(fixed)
    for C, comp in doc["shift"]["leaders"]["target"]:
        p = next(q for q in tp["points"] if q["concurrency"] == C)
        assert max(p["breakdown_ms"], key=p["breakdown_ms"].get) == comp
    assert len(re.findall(r"^\d\. \*\*", text, re.M)) >= 3


def test_recommendations_are_engine_settings_ranked_at_the_concurrency_served(b300):
    """Ranked by the gain at the largest concurrency asked for (not a mean over every C), each
    gaining at least 1% at a concurrency asked for; what-ifs on perfmodel's own kernels appear only
    in the appendix; every gain shown with its range."""
    md, doc = b300
    rk = doc["rank"]
    assert rk["mode"] == "concurrency" and rk["concurrency"] == max(rk["concurrencies"]) == 32
    recs = doc["recommendations"]
    assert recs and all(r["kind"] == "engine" for r in recs)
    want = sorted((r for r in doc["whatifs"] if "skipped" not in r and r["kind"] == "engine"
                   and any((x.get("fits") and x["concurrency"] in rk["concurrencies"] and x["gain"] >= MIN_GAIN)
                           for x in r["per_concurrency"])),
                  key=lambda r: -next(x["gain"] for x in r["per_concurrency"] if x["concurrency"] == 32 and x.get("fits")))
    assert [r["key"] for r in recs] == [r["key"] for r in want]
    text = _section(md.read_text(), "## 4. What to change")
    rows = _table(text)
    assert len(rows) == len(recs)
    kernels = {r["change"] for r in doc["whatifs"] if r["kind"] == "kernels"}
    assert not any(k in text for k in kernels)
    for r, row in zip(recs, rows):
        assert row[1] == r["change"]
        x = next(x for x in r["per_concurrency"] if x["concurrency"] == 32)
        if abs(x["gain"]) >= MIN_GAIN:
            lo, hi = x["gain_range"]
            cell = row[2 + rk["concurrencies"].index(32)]
            assert lo <= hi and re.search(r"\[[+-][\d.]+%, [+-][\d.]+%\]", cell), cell


def test_no_row_gains_nothing(b300):
    md, doc = b300
    for r in doc["recommendations"]:
        assert max(g for g in r["gains"].values() if g is not None) >= MIN_GAIN
    text = md.read_text()
    appendix = _section(text, "## Appendix B")
    for row in _table(appendix):
        gains = [float(c.split()[0].rstrip("%")) for c in row[2:] if c not in ("—",)]
        assert any(abs(g) >= 1.0 for g in gains), row
    assert "no effect" not in text and "no gain" not in text and "+0.000%" not in text


def test_nothing_off_topic(b300):
    """No other model's curve, no profile-GPU kernel-fit table: the notes speak of the model and
    the two machines."""
    md, doc = b300
    text = md.read_text().lower()
    for other in registry.list_models():
        if other != doc["model"]["name"]:
            assert other not in text, other
    assert "qwen" not in text and "roofline" not in text and "moe efficiency" not in text


def test_a_point_without_its_drafter_is_marked_and_not_joined(b300, monkeypatch, tmp_path):
    """The auto-added largest C, where the drafter no longer fits, is marked in the table and
    drawn apart: no line of the throughput figure passes through it."""
    from perfmodel.reports import figures

    md, doc = b300
    apart = [p["concurrency"] for p in doc["target"]["projection"]["points"]
             if p["fits_in_memory"] and p.get("speculation_fits") is False]
    assert apart, "the reference scenario's largest C runs without its drafter"
    rows = _table(_section(md.read_text(), "## 2. Projection on the target"))
    assert all("†" in r[0] for r in rows if int(re.match(r"\d+", r[0]).group()) in apart)
    drawn = []
    monkeypatch.setattr(figures, "_save", lambda fig, path: drawn.append(fig))
    figures.throughput(doc, tmp_path / "t.png")
    for ax in drawn[0].axes:
        for line in ax.get_lines():
            if line.get_linestyle() not in ("None", "", " ") and len(line.get_xdata()) > 1:
                assert not set(apart) & set(line.get_xdata()), line.get_label()


def test_each_figure_has_labelled_axes_and_a_legend_entry_per_series(b300, monkeypatch, tmp_path):
    from perfmodel.reports import figures

    _, doc = b300
    drawn = []
    monkeypatch.setattr(figures, "_save", lambda fig, path: drawn.append(fig))
    figures.write_all(doc, tmp_path, "X")
    assert len(drawn) == 3
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


# ------------------------------------------------------------------------------ the bar: calibrated notes
def test_calibrated_notes_carry_the_users_figures_with_their_fit_errors(calibrated):
    md, doc = calibrated
    text = md.read_text()
    assert len(text.splitlines()) <= 200
    cal = doc["calibration"]
    obs = sorted(p["observed"] for p in cal["points"])
    assert obs == [65.0, 98.0]  # the reference user's two figures, from reports/examples/reference_observed.yaml
    rows = _table(_section(text, "## 1. What was measured on the source"))
    assert len(rows) == 2
    for p, r in zip(cal["points"], rows):
        assert _close(r[3], p["observed"]) and _close(r[5], p["predicted"])
        assert _close(r[6], 100 * p["err"]) and _close(r[7], 100 * p["loo_err"])
    assert "1 token per step (C=1)" in text and "No factor is pinned" in text
    assert "floor.moe / bw.moe" in text


def test_calibrated_notes_have_the_tldr_shift_and_an_actionable_list(calibrated):
    md, doc = calibrated
    text = md.read_text()
    tldr = _section(text, "## TL;DR")
    assert 3 <= len(re.findall(r"^\d\. ", tldr, re.M)) <= 5
    assert "**Bottleneck shift**" in tldr and "**What to change**" in tldr and "**How far to trust it**" in tldr
    assert "rests" in tldr and "which your points do not pin" in tldr
    shift = _section(text, "## 3. What stops dominating")
    assert len(re.findall(r"^\d\. \*\*", shift, re.M)) >= 3
    rows = _table(_section(text, "## 4. What to change"))
    assert rows and all(r[1] in {x["change"] for x in doc["recommendations"]} for r in rows)
    assert doc["calibrated"] and "--calibration calib.json" in doc["target"]["command"]


def test_calibrated_json_is_the_projection_run(calibrated, monkeypatch):
    md, doc = calibrated
    monkeypatch.chdir(md.parent)  # the command names calib.json as written beside the notes
    r = runner.invoke(app, shlex.split(doc["target"]["command"])[1:])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["points"] == doc["target"]["projection"]["points"]


# ------------------------------------------------------------------------------ at a service level
def test_recommendations_at_a_service_level(tmp_path):
    """--sla-tok-s-per-user N: each configuration at its best tok/s per GPU with at least N tok/s
    per user; recommendations raise that by at least 1%, best first."""
    sla = 60.0
    md = write_report(Request(target="h200", gpus=8, concurrency=[1, 16]), tmp_path / "s", sla=sla)
    doc = json.loads(md.with_suffix(".json").read_text())
    rk = doc["rank"]
    assert rk["mode"] == "sla" and rk["base"]["tokens_per_s_per_stream"] >= sla
    gains = [r["gain"] for r in doc["recommendations"]]
    assert gains == sorted(gains, reverse=True) and all(g >= MIN_GAIN for g in gains)
    for r in doc["recommendations"]:
        assert r["new"]["tokens_per_s_per_stream"] >= sla
        assert r["gain"] == pytest.approx(r["new"]["tokens_per_s_per_gpu"] / r["base"]["tokens_per_s_per_gpu"] - 1)
    assert f"at ≥ {fmt(sla)} tok/s per user" in md.read_text()
    bad = runner.invoke(app, ["report", "--target", "h200", "-c", "1", "--sla-tok-s-per-user", "-3", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1


# ------------------------------------------------------------------------------ files
def test_unwritable_out_is_one_line_exit_2(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(ReportError):
        write_report(Request(target="b300", spec="ddtree", concurrency=[1]), blocker / "sub")
    r = runner.invoke(app, ["report", "--target", "b300", "--concurrency", "1", "--out", str(blocker / "sub")])
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output


@pytest.mark.slow  # two whole reports, figures included
def test_same_input_same_bytes(tmp_path):
    req = Request(target="b300", gpus=8, spec="ddtree", concurrency=[1, 8])
    a, b = write_report(req, tmp_path / "a"), write_report(req, tmp_path / "b")
    names = sorted(f.name for f in a.parent.iterdir())
    assert names == sorted(f.name for f in b.parent.iterdir())
    for n in names:
        assert (a.parent / n).read_bytes() == (b.parent / n).read_bytes(), n


def test_a_ttft_column_when_the_projection_has_it(b300):
    """The serving simulation's TTFT, when a projection's points carry it, gets its column."""
    import copy

    from perfmodel.reports.sections import projection_section

    _, doc = b300
    figs = {"throughput": "t.png"}
    assert not any("TTFT" in ln for ln in projection_section(doc, figs))
    d = copy.deepcopy(doc)
    for i, p in enumerate(d["target"]["projection"]["points"]):  # as `project --isl/--osl` gives them
        if p["fits_in_memory"]:
            p["serving"] = {"ttft_ms": {"median": 100.0 + i}, "tpot_ms": {"median": 5.0 + i}}
    lines = projection_section(d, figs)
    head = next(ln for ln in lines if ln.startswith("| C |")).split("|")
    col = [c.strip() for c in head].index("TTFT ms")
    rows = [ln.split("|") for ln in lines if re.match(r"^\| \d", ln) and "does not fit" not in ln]
    assert [r[col].strip() for r in rows] == [fmt(100.0 + i) for i, p in enumerate(d["target"]["projection"]["points"])
                                              if p["fits_in_memory"]]
    assert [r[col - 1].strip() for r in rows] == [fmt(5.0 + i) for i, p in enumerate(d["target"]["projection"]["points"])
                                                  if p["fits_in_memory"]]


def test_observed_figure_is_the_users_figure(tmp_path):
    md = write_report(Request(target="b300", gpus=8, observed="rtx-pro-6000,tp+ep8,c=1,65tok/s", concurrency=[1, 8]),
                      tmp_path / "o")
    doc = json.loads(md.with_suffix(".json").read_text())
    rows = _table(_section(md.read_text(), "## 1. What was measured on the source"))
    assert len(rows) == 1 and _close(rows[0][3], 65.0) and "--observed" in rows[0][1]
    assert _close(rows[0][6], 100 * doc["calibration"]["points"][0]["err"])
    assert any("one layout" in w for w in doc["calibration"]["warnings"])
