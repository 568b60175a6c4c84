"""Terminal tables (rich) and CSV for the CLI's outputs.

Tables never truncate: every column folds its cells, and when stdout is not a terminal (a pipe,
a file) the console is as wide as the table needs."""

from __future__ import annotations

import csv
import io
import os
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

PIPE_WIDTH = 10_000  # "as wide as needed": rich tables are only as wide as their content


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """`perfmodel ... | head -5`: the reader stopped early, which is not an error (exit 0)."""
        self.quiet = True
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        raise SystemExit(0)


def console() -> Console:
    """A console on the current stdout: the terminal's width, or unbounded when piped."""
    tty = sys.stdout.isatty()
    return _Console(file=sys.stdout, width=None if tty else PIPE_WIDTH, soft_wrap=not tty)


def _print(*items) -> None:
    """Tables, and lines of plain text (never read as rich markup: '[h200-sxm.json]' stays).
    On a stdout that cannot encode the tables' characters (`PYTHONIOENCODING=ascii`), their
    ASCII transliteration (perfmodel/outputs.py), laid out in it so that columns stay aligned."""
    from perfmodel.outputs import ascii_only

    c = console()
    plain = ascii_only(c.file)
    for x in items:
        if plain:
            x = _ascii(x)
        c.print(x, markup=not isinstance(x, str))


def _ascii(x):
    """A line or table with its text in ASCII (a table's cells, headers and title)."""
    from rich.text import Text

    from perfmodel.outputs import to_ascii

    def conv(v):
        if isinstance(v, str):
            return to_ascii(v)
        if isinstance(v, Text):
            return Text(to_ascii(v.plain), style=v.style, justify=v.justify)
        return v

    if isinstance(x, Table):
        x.title, x.caption = conv(x.title), conv(x.caption)
        for col in x.columns:
            col.header, col.footer = conv(col.header), conv(col.footer)
            col._cells[:] = [conv(v) for v in col._cells]
        return x
    return conv(x)


def table(title: str | None, cols, right=()) -> Table:
    """A table whose cells fold instead of being cut with an ellipsis."""
    tab = Table(title=escape(title) if title else title, title_justify="left")  # titles name user files/models
    for col in cols:
        tab.add_column(col, justify="right" if col in right else "left", overflow="fold")
    return tab


def _csv(header, rows) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def _fmt_iv(iv) -> str:
    return f"{iv[0]:.0f}–{iv[1]:.0f}"


# ------------------------------------------------------------------------------ one batch
def step_table(res) -> None:
    t = table(f"{res.batch}: {res.step_ms:.3f} ms (90% interval {res.interval['step_ms'][0]:.3f}–"
              f"{res.interval['step_ms'][1]:.3f}), {res.tokens} tokens, bottleneck {res.bottleneck}",
              ("component", "ms"), right={"ms"})
    for k, v in res.breakdown_ms.items():
        t.add_row(k, f"{v:.3f}")
    _print(t, f"describes: {res.describes}", *(f"assumption: {a}" for a in res.assumptions))


def step_csv(res) -> str:
    return _csv(["batch", "step_ms", "step_ms_lo", "step_ms_hi", "tokens", "bottleneck"] + [f"{k}_ms" for k in res.breakdown_ms],
                [[res.batch, res.step_ms, *res.interval["step_ms"], res.tokens, res.bottleneck, *res.breakdown_ms.values()]])


# ------------------------------------------------------------------------------ projection
def projection_table(res) -> None:
    t = res.target
    title = (f"{res.model} on {t.n_gpus}× {t.display_name} ({t.memory_kind}"
             f"{', ' + t.link_kind if t.link_kind else ''}), {res.parallel}, context {res.context}, "
             f"spec {res.spec}, {'CUDA graphs' if res.graphs else 'eager'}")
    cols = ("C", "tok/s/stream", "90% interval", "tok/s total", "tok/s/GPU", "step ms", "B", "τ", "bottleneck")
    tab = table(title, cols, right=set(cols) - {"bottleneck"})
    fit = [p for p in res.points if p.fits_in_memory]
    for p in res.points:
        if not p.fits_in_memory and p.serving is None:
            tab.add_row(str(p.concurrency), "—", "", "", "", "", "", "", "[red]does not fit in memory[/]")
            continue
        if not p.fits_in_memory:  # served: the engine queues what its KV pool cannot hold (the point's note)
            tab.add_row(str(p.concurrency), "—", "", "", "", "", "", "", "[yellow]KV does not fit at once: queued[/]")
            continue
        tab.add_row(str(p.concurrency), f"{p.tokens_per_s_per_stream:.1f}", _fmt_iv(p.interval.tokens_per_s_per_stream),
                    f"{p.tokens_per_s:.0f}", f"{p.tokens_per_s_per_gpu:.0f}", f"{p.step_ms:.2f}", str(p.budget or "—"),
                    f"{p.tau:.2f}", p.bottleneck)
    out = [tab]
    served = [p for p in res.points if p.serving is not None]
    if served:
        s0 = served[0].serving
        cols_s = ("C", "TTFT median", "TTFT p90", "TPOT", "90% interval", "ITL", "e2e median", "tok/s/user", "tok/s/GPU",
                  "90% interval ")
        st = table(f"serving whole requests ({s0.engine} scheduler, {s0.max_batched_tokens}-token steps; ms, tok/s)",
                   cols_s, right=set(cols_s))
        for p in served:
            s = p.serving
            st.add_row(str(p.concurrency), f"{s.ttft_ms['median']:.1f}", f"{s.ttft_ms['p90']:.1f}",
                       f"{s.tpot_ms['mean']:.2f}",
                       f"{s.interval['tpot_ms'][0]:.2f}–{s.interval['tpot_ms'][1]:.2f}", f"{s.itl_ms['mean']:.2f}",
                       f"{s.e2e_latency_ms['median']:.0f}",
                       f"{s.tokens_per_s_per_user:.1f}", f"{s.tokens_per_s_per_gpu:.0f}", _fmt_iv(s.interval["tokens_per_s_per_gpu"])
                       + (" (KV-limited)" if s.kv_limited else ""))
        out.append(st)
    if fit:
        comps = sorted({k for p in fit for k in p.breakdown_ms},
                       key=lambda k: -max(p.breakdown_ms.get(k, 0) for p in fit))
        bt = table("step time by component (ms)", ["component"] + [f"C={p.concurrency}" for p in fit],
                   right={f"C={p.concurrency}" for p in fit})
        for k in comps:
            bt.add_row(k, *(f"{p.breakdown_ms.get(k, 0.0):.3f}" for p in fit))
        out.append(bt)
    pr, sc = res.profile, res.self_check
    out.append(f"profile: {pr.label}  [{pr.path}]")
    if sc.median_abs_err is not None:
        out.append(f"model error on the measured GPU: {sc.median_abs_err:.1%} median, "
                   f"{sc.max_abs_err:.1%} max over {sc.n_points} end-to-end steps")
    else:
        out.append("model error on the measured GPU: not available (profile has no end-to-end steps)")
    if res.acceptance:
        out.append(f"acceptance τ: {res.acceptance.description}")
    out.append(f"describes: {res.describes}")
    if res.observed:
        o = res.observed
        out.append(f"one-point calibration from {o['point']}: observed {o['observed_tokens_per_s_per_stream']:g} "
                   f"tok/s per stream; the model said {o['uncalibrated_tokens_per_s_per_stream']:.1f} before calibrating "
                   f"and {o['calibrated_tokens_per_s_per_stream']:.1f} after")
    if res.calibration:
        c = res.calibration
        moved = ", ".join(f"{k} x{v['value']:.2f}" if not k.endswith("_us") else f"{k.removesuffix('_us').replace('_', ' ')} "
                          f"{v['value']:.0f} us"
                          for k, v in c["factors"].items() if v["determined"])
        loo = c["loo_median_abs_err"]
        out.append(f"calibration: {c['n_points']} point(s); factors the data pinned: {moved or 'none'}; leave-one-out "
                   f"median error {'n/a (one point)' if loo is None else f'{loo:.1%}'}")
        out += [f"warning: {w}" for w in c["warnings"]]
        rests = [f"C={p.concurrency}: " + ", ".join(f"{k} {abs(v):.0%}" for k, v in list(p.unpinned_factors.items())[:3])
                 for p in fit if p.unpinned_factors]
        if rests:
            out.append("the step rests on factors the calibration does not pin (share of the step each scales): "
                       + "; ".join(rests))
    out.append(f"largest concurrency that fits in memory: {res.max_concurrency_that_fits}")
    out += res.layout_notes or []
    out += [f"C={p.concurrency}: {p.budget_note}" for p in res.points if p.budget_note]
    out += [f"C={p.concurrency}: warning: {p.note}" for p in res.points if p.note and p.serving is not None]
    out += [f"C={p.concurrency}: {n}" for p in res.points for n in (p.notes or [])]
    if res.sensitivity:
        st = table("sensitivity: tok/s change for ±20% in each input (C = first concurrency)",
                   ("input", "−20%", "+20%"), right={"−20%", "+20%"})
        for s in res.sensitivity:
            st.add_row(s.input, f"{s.minus:+.1%}", f"{s.plus:+.1%}")
        out.append(st)
    _print(*out)


def rows_csv(rows: list[dict]) -> str:
    """Flat rows (`Projection.rows()`) as CSV, in the columns of `result.row_columns`: the same
    columns for `project` and `compare`."""
    from perfmodel.model.result import row_columns

    cols = row_columns(rows)
    return _csv(cols, [["" if r.get(c) is None else r.get(c) for c in cols] for r in rows])


def projection_csv(res) -> str:
    return rows_csv(res.rows())


# ------------------------------------------------------------------------------ compare
COMPARE_COLS = ("configuration", "C", "tok/s/stream", "tok/s/GPU", "tok/s total", "90% interval /stream", "step ms",
                "bottleneck")


def compare_table(cmp) -> None:
    tab = table(f"{cmp.model}: {len(cmp.configs)} configurations, context {cmp.context}, spec {cmp.spec}",
                COMPARE_COLS, right=set(COMPARE_COLS) - {"configuration", "bottleneck"})
    for r in cmp.rows:
        if r.error:
            tab.add_row(escape(r.config), "" if r.concurrency is None else str(r.concurrency), "—", "", "", "", "",
                        f"[red]{escape(r.error)}[/]")
            continue
        tab.add_row(escape(r.config), str(r.concurrency), f"{r.tokens_per_s_per_stream:.1f}", f"{r.tokens_per_s_per_gpu:.0f}",
                    f"{r.tokens_per_s:.0f}", _fmt_iv([r.tokens_per_s_per_stream_lo, r.tokens_per_s_per_stream_hi]),
                    f"{r.step_ms:.2f}", r.bottleneck)
    _print(tab)


def compare_csv(cmp) -> str:
    """Every configuration's `Projection.rows()`, and a row with the reason for a configuration
    that did not run: the columns of `project --format csv`."""
    rows: list[dict] = []
    for label in dict.fromkeys(cmp.configs):
        proj = cmp.projections.get(label)
        if proj is not None:
            rows += proj.rows()
            continue
        rows += [{"gpu": r.target, "n_gpus": r.gpus, "model": cmp.model, "parallel": r.parallel, "context": cmp.context,
                  "spec": cmp.spec, "concurrency": r.concurrency, "fits_in_memory": None, "note": r.error}
                 for r in cmp.rows if r.config == label]
    return rows_csv(rows)


# ------------------------------------------------------------------------------ validate
def validation_table(res: dict) -> None:
    cols = ("kind", "point", "unit", "measured", "predicted", "error", "in 90% interval")
    tab = table("perfmodel validate: projection vs measurement", cols, right={"measured", "predicted", "error"})
    for r in res["rows"]:
        tab.add_row(escape(r["kind"]), escape(r["point"]), escape(r["unit"]), f"{r['measured']:.4g}",
                    "does not fit" if r["predicted"] is None else f"{r['predicted']:.4g}",
                    "—" if r["err"] is None else f"{r['err']:+.1%}", {True: "yes", False: "no", None: "—"}[r.get("in_interval")])
    out = [tab, "sources: `perfmodel validate --format json` (field `source`) and perfmodel/data/published.yaml"]
    for kind, s in res["summary"]["by_kind"].items():
        cov = f", interval coverage {s['coverage']:.0%}" if s.get("coverage") is not None else ""
        if s["median_abs_err"] is None:
            out.append(f"{kind}: no point projected to fit{cov}")
            continue
        out.append(f"{kind}: {s['n']} points, median |error| {s['median_abs_err']:.1%}, max {s['max_abs_err']:.1%}{cov}")
    _print(*out)


def validation_csv(res: dict) -> str:
    keys = ("kind", "point", "measured", "unit", "predicted", "err", "in_interval", "source")
    return _csv(keys, [[r.get(k) for k in keys] for r in res["rows"]])


# ------------------------------------------------------------------------------ aiconfigurator's database
AIC_COLS = ("system", "GPU spec", "engine", "current", "versions", "tables (current)")


def aic_catalogue_table(rows: list[dict], version: str) -> None:
    tab = table(f"aiconfigurator-core {version}: systems and engines (perfmodel profile import-aic)", AIC_COLS)
    for r in rows:
        tab.add_row(r["system"], r["gpu_spec"] or "— (no GPU spec)", r["engine"], r["current"], ", ".join(r["versions"]),
                    ", ".join(r["tables"]))
    _print(tab)


def aic_catalogue_csv(rows: list[dict]) -> str:
    return _csv(AIC_COLS, [[r["system"], r["gpu_spec"] or "", r["engine"], r["current"], " ".join(r["versions"]),
                            " ".join(r["tables"])] for r in rows])


TRANSFER_STATS = ("median_abs_err", "max_abs_err", "bias", "floor_bias", "floor_n", "memory_bias", "memory_n", "compute_bias", "compute_n")


def _pct(x) -> str:
    return "—" if x is None else f"{x:+.0%}"


def transfer_table(res: dict) -> None:
    cols = ("system", "memory", "engine", "op", "class", "dtype", "rows")
    srcs = [s for s in ("local", "aic-h200") if any(s in r for r in res["rows"])]
    parts = ("floor", "memory", "compute")
    stat_cols = [f"{s}: {c}" for s in srcs for c in ("median |err|", "max |err|", *(f"bias {p}" for p in parts))]
    tab = table(f"perfmodel validate --transfer: {res['database']} rows priced on each system's GPU through the transfer rules",
                cols + tuple(stat_cols), right=set(stat_cols) | {"rows"})
    for r in res["rows"]:
        cells = [r["system"], r["memory"], f"{r['engine']} {r['version']}", r["op"], r["class"], r["dtype"], str(r["n"])]
        for s in srcs:
            st = r.get(s)
            cells += ["—"] * (2 + len(parts)) if st is None else [
                f"{st['median_abs_err']:.0%}", f"{st['max_abs_err']:.0%}",
                *(f"{_pct(st[f'{p}_bias'])} ({st[f'{p}_n']})" for p in parts)]
        tab.add_row(*(escape(c) for c in cells))
    out = [tab, f"local: {res['local_profile']}"]
    out += [f"aic-h200 ({e}): {label}" for e, label in res["h200_imports"].items()]
    out.append("bias: the median signed error (+: predicted too slow), with the rows' count, of the rows measured under 20 us "
               "(floor), and of the others by what bounds the target's law (memory, compute); all-reduce: messages <= 64 KB "
               "(floor) and >= 16 MB (memory)")
    summ = table("summary: per op, dtype and memory family over the systems and engines (median over the groups)",
                 ("op", "dtype", "memory", "systems") + tuple(f"{s}: {c}" for s in srcs for c in (
                     "groups", "median |err|", "max |err|", "bias floor", "bias memory", "bias compute")),
                 right={f"{s}: {c}" for s in srcs for c in ("groups", "median |err|", "max |err|", "bias floor", "bias memory",
                                                            "bias compute")})
    for e in res["summary"]:
        cells = [e["op"], e["dtype"], e["memory"], str(len(e["systems"]))]
        for s in srcs:
            v = e.get(s)
            cells += ["—"] * 6 if v is None else [str(v["groups"]), f"{v['median_of_medians']:.0%}", f"{v['max_abs_err']:.0%}",
                                                   *(_pct(v[f"{p}_bias"]) for p in parts)]
        summ.add_row(*(escape(c) for c in cells))
    _print(*out, summ)


def transfer_csv(res: dict) -> str:
    keys = ("system", "gpu", "memory", "engine", "version", "op", "class", "dtype", "n")
    srcs = ("local", "aic-h200")
    header = list(keys) + [f"{s}_{c}" for s in srcs for c in TRANSFER_STATS]
    return _csv(header, [[r[k] for k in keys] + [("" if r.get(s) is None or r[s][c] is None else r[s][c]) for s in srcs
                                                 for c in TRANSFER_STATS] for r in res["rows"]])


# ------------------------------------------------------------------------------ specs
GPU_COLS = ("name", "aliases", "memory", "GB", "GB/s", "bf16 TF", "fp8 TF", "fp4 TF", "scale-up", "default link")
LINK_COLS = ("name", "kind", "topology", "GB/s per dir", "AR latency us", "AR busbw GB/s", "A2A latency us",
             "A2A busbw GB/s")
MODEL_COLS = ("name", "layers", "hidden", "attention", "experts", "routed dtype", "params (B)", "drafter")


def _gpu_row(g) -> list[str]:
    c = g.compute
    return [g.name, ",".join(g.aliases), g.memory.kind, f"{g.memory.capacity_GB.value:g}",
            f"{g.memory.bandwidth_GBps.value:g}", f"{c.bf16_dense_TFLOPS.value:g}",
            f"{c.fp8_dense_TFLOPS.value:g}" if c.fp8_dense_TFLOPS else "—",
            f"{c.fp4_dense_TFLOPS.value:g}" if c.fp4_dense_TFLOPS else "—",
            g.scale_up.kind + (f" {g.scale_up.bw_per_dir_GBps.value:g} GB/s" if g.scale_up.bw_per_dir_GBps else ""),
            g.default_interconnect]


def _link_row(ln) -> list[str]:
    c = ln.calibrated
    return [ln.name, ln.kind, ln.topology, f"{ln.peak.bw_per_dir_GBps.value:g}", f"{c.allreduce_latency_us.value:g}",
            f"{c.allreduce_busbw_GBps.value:g}", f"{c.alltoall_latency_us.value:g}", f"{c.alltoall_busbw_GBps.value:g}"]


def _model_row(m) -> list[str]:
    from perfmodel.model.memory import param_counts

    e = m.moe
    return [m.name, str(m.n_layers), str(m.hidden_size), m.attention.kind.upper(),
            f"{e.n_routed_experts} top-{e.top_k} +{e.n_shared_experts}" if e else "dense",
            m.dtypes.routed_experts if e else m.dtypes.dense_mlp,
            f"{sum(param_counts(m).values()) / 1e9:.1f}", m.drafter.name if m.drafter else "—"]


def _rows_table(title, cols, rows) -> Table:
    tab = table(title, cols)
    for r in rows:
        tab.add_row(*r)
    return tab


def hw_tables(hw: dict) -> None:
    _print(_rows_table("GPUs (datasheet peaks; `perfmodel hw show NAME` for sources)", GPU_COLS,
                       map(_gpu_row, hw["gpus"])),
           _rows_table("Interconnects", LINK_COLS, map(_link_row, hw["links"])))


def hw_csv(hw: dict) -> str:
    """GPUs and interconnects in one CSV: a `type` column, then each table's columns."""
    cols = ["type"] + list(dict.fromkeys(GPU_COLS + LINK_COLS))
    rows = [dict(zip(GPU_COLS, _gpu_row(g))) | {"type": "gpu"} for g in hw["gpus"]]
    rows += [dict(zip(LINK_COLS, _link_row(ln))) | {"type": "link"} for ln in hw["links"]]
    return _csv(cols, [[r.get(c, "") for c in cols] for r in rows])


def model_table(models) -> None:
    _print(_rows_table("Model presets", MODEL_COLS, map(_model_row, models)))


def models_csv(models) -> str:
    return _csv(MODEL_COLS, map(_model_row, models))


def spec_rows(spec) -> list[tuple[str, str, str]]:
    """(field, value, source) for every leaf of a spec; sourced numbers keep their source."""
    out = []

    def walk(prefix, x):
        if isinstance(x, dict) and "value" in x and "source" in x:
            out.append((prefix, _val(x["value"]), str(x["source"])))
        elif isinstance(x, dict):
            for k, v in x.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        elif isinstance(x, list) and any(isinstance(v, dict) for v in x):
            for i, v in enumerate(x):
                walk(f"{prefix}[{i}]", v)
        else:
            out.append((prefix, _val(x), ""))

    walk("", spec.model_dump(mode="json"))
    return out


def _val(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, list):
        return ", ".join(map(str, v))
    return f"{v:g}" if isinstance(v, float) else str(v)


def spec_table(spec) -> None:
    _print(_rows_table(f"{spec.name}", ("field", "value", "source"), spec_rows(spec)))


def spec_csv(spec) -> str:
    return _csv(("field", "value", "source"), spec_rows(spec))


def model_show(m) -> None:
    from perfmodel.model.memory import param_counts

    pc = param_counts(m)
    pt = table(f"{m.name}: parameters by component", ("component", "params (B)"), right={"params (B)"})
    for k, v in pc.items():
        pt.add_row(k, f"{v / 1e9:.2f}")
    pt.add_row("total", f"{sum(pc.values()) / 1e9:.1f}")
    _print(_rows_table(m.name, ("field", "value", "source"), spec_rows(m)), pt)


# ------------------------------------------------------------------------------ calibration
def calibration_table(res) -> None:
    ft = table(f"calibration to {escape(res.engine)} (profile {escape(res.profile)})",
               ("factor", "value", "σ posterior", "σ prior", "pinned by the data", "note"),
               right={"value", "σ posterior", "σ prior"})
    from perfmodel.calibration_schema import ADDITIVE_UNIT

    for f in res.factors:
        unit = ADDITIVE_UNIT.get(f.name, "")  # an additive engine term, in its unit (µs, steps, ms)
        d = {" µs": 0, " ms": 0, " steps": 1}.get(unit)

        def v(x: float, digits: int) -> str:
            return f"{x:.{digits if d is None else d}f}{unit}"

        ft.add_row(f.name, v(f.value, 3), v(f.sigma_post, 2), v(f.sigma_prior, 2),
                   "yes" if f.determined else "no (σ near its prior)" if f.sigma_post >= 0.7 * f.sigma_prior
                   else "no (not separated from others: below)",
                   "outside [0.33, 3]: a mechanism the model lacks" if f.outside_range else "")
    pt = table("points", ("#", "point", "figure", "observed", "uncalibrated", "fitted", "error", "leave-one-out"),
               right={"#", "observed", "uncalibrated", "fitted", "error", "leave-one-out"})
    for p in res.points:
        pt.add_row(str(p.index), escape(p.label), p.figure, f"{p.observed:.4g}", f"{p.uncalibrated:.4g}",
                   f"{p.predicted:.4g}", f"{p.err:+.1%}", "n/a" if p.loo_err is None else f"{p.loo_err:+.1%}")
    loo = res.loo_median_abs_err
    lines = [f"describes: {res.describes}",
             f"fitted median |error| {res.median_abs_err:.1%}; leave-one-out"
             + (f" (each {res.held_out}'s points left out)" if res.held_out != "point" else "") + " median |error| "
             + ("n/a (one point: calibrate on more to learn how far to trust it)" if loo is None else f"{loo:.1%}")]
    lines += [f"warning: {w}" for w in res.warnings]
    lines += [f"not separated by the points: {', '.join(u.factors)}: {u.why}" for u in res.undetermined]
    _print(ft, pt, *lines)


def calibration_csv(res) -> str:
    head = ["kind", "name", "value", "sigma_post", "sigma_prior", "determined", "outside_range",
            "figure", "observed", "uncalibrated", "predicted", "err", "loo_err"]
    rows = [["factor", f.name, f.value, f.sigma_post, f.sigma_prior, f.determined, f.outside_range] + [""] * 6
            for f in res.factors]
    rows += [["point", p.label] + [""] * 5 + [p.figure, p.observed, p.uncalibrated, p.predicted, p.err,
                                              "" if p.loo_err is None else p.loo_err] for p in res.points]
    rows += [["undetermined", " ".join(u.factors)] + [""] * 11 for u in res.undetermined]
    return _csv(head, rows)


# ------------------------------------------------------------------------------ validate --silicon
SILICON_STATS = ("n", "median_abs", "p90_abs", "signed_median")


def _abs(x) -> str:
    return "—" if x is None else f"{x:.0%}"


def _silicon_cells(st: dict) -> list[str]:
    return [_abs(st["median_abs"]), _abs(st["p90_abs"]), _pct(st["signed_median"])]


def silicon_table(res: dict) -> None:
    c = res["counts"]
    head = [f"perfmodel validate --silicon: {res['database']} silicon_sample.csv, aggregated rows",
            f"rows {c['agg_rows']}; of models and systems perfmodel has {c['rows_of_models_and_systems_with_specs']}; "
            f"expressed {c['expressed']}" + (f" ({c['expressed_share_of_those']:.1%} of those)" if c["expressed_share_of_those"]
                                             is not None else "")
            + f"; projected {c['chosen']}" + (f" ({c['sample_per_group']} per model x system x engine)" if c["sample_per_group"]
                                             else "") + "; priced " + ", ".join(f"{k} {v}" for k, v in c["priced"].items()),
            "seconds per row: " + ", ".join(f"{w} {s:.3f}" for w, s in res["seconds_per_row"].items()),
            f"local profile: {res['profile']}" + (f"; calibration: {res['calibration']}" if res["calibration"] else "")]
    out = [*head, _serving_errors(res["summary"])]
    if res["beside_aiconfigurator"]:
        cols2 = ("way", "by", "group", "rows", "TTFT perfmodel", "TTFT aiconfigurator", "TPOT perfmodel", "TPOT aiconfigurator",
                 "TPOT signed pm / aic")
        t2 = table(f"beside aiconfigurator {res['aiconfigurator']}'s estimator, on the rows both priced (median |error|)",
                   cols2, right=set(cols2[3:]))
        by = {(b["way"], b["source"], b["by"], b["group"]): b for b in res["beside_aiconfigurator"]}
        for (way, src, kind, grp), b in by.items():
            if src == "aiconfigurator":
                continue
            a = by[(way, "aiconfigurator", kind, grp)]
            t2.add_row(*(escape(x) for x in [way, kind, grp, str(b["tpot"]["n"]), _abs(b["ttft"]["median_abs"]),
                                             _abs(a["ttft"]["median_abs"]), _abs(b["tpot"]["median_abs"]),
                                             _abs(a["tpot"]["median_abs"]),
                                             f"{_pct(b['tpot']['signed_median'])} / {_pct(a['tpot']['signed_median'])}"]))
        out.append(t2)
    if res["not_expressed"]:
        out.append("not expressed: " + "; ".join(f"{n} {why}" for why, n in res["not_expressed"].items()))
    for src, reasons in res["not_priced"].items():
        if reasons:
            out.append(f"not priced by {src}: " + "; ".join(f"{n} {why}" for why, n in reasons.items()))
    _print(*out)


def _serving_errors(summary: list[dict]) -> Table:
    """The TTFT and TPOT error statistics of `silicon_validate.summarise`, one row per source and group."""
    cols = ("way", "by", "group", "rows", "TTFT med |err|", "TTFT p90", "TTFT signed", "TPOT med |err|", "TPOT p90", "TPOT signed")
    tab = table("errors: predicted / measured - 1 (+: predicted too slow); TTFT and TPOT means", cols, right=set(cols[3:]))
    for s in summary:
        tab.add_row(*(escape(x) for x in [s["source"], s["by"], s["group"], str(s["tpot"]["n"]), *_silicon_cells(s["ttft"]),
                                          *_silicon_cells(s["tpot"])]))
    return tab


def published_serving_table(res: dict) -> None:
    """`validate --published-serving`: each priced point (measured and predicted mean TTFT and TPOT),
    the error statistics by engine, GPU and model, and the points not expressed with their reason."""
    c = res["counts"]
    head = [f"perfmodel validate --published-serving: {res['file']}",
            f"points {c['points']}; expressed {c['expressed']}; priced {c['priced']} (uncalibrated, from the "
            f"{res['profile']} profile; {res['seconds_per_row']['local']:.2f} s a point)"]
    cols = ("point", "engine", "GPU", "TTFT ms", "TTFT pred", "TPOT ms", "TPOT pred", "TPOT err")
    tab = table("published vs predicted (means)", cols, right=set(cols[3:]))
    for p in res["points"]:
        m, q = p["measured"], p["predicted"].get("local")
        tab.add_row(*(escape(x) for x in [p["id"], p["engine"], p["system"], f"{m['ttft_ms']:.1f}",
                                          f"{q['ttft_ms']:.1f}" if q else "-", f"{m['tpot_ms']:.2f}",
                                          f"{q['tpot_ms']:.2f}" if q else "-",
                                          _pct(q["tpot_ms"] / m["tpot_ms"] - 1) if q else p["errors"].get("local", "")]))
    out = [*head, tab, _serving_errors(res["summary"])]
    if res["not_expressed"]:
        out.append("not expressed: " + "; ".join(f"{n} {why}" for why, n in res["not_expressed"].items()))
    if res["not_priced"]["local"]:
        out.append("not priced: " + "; ".join(f"{n} {why}" for why, n in res["not_priced"]["local"].items()))
    _print(*out)


def silicon_csv(res: dict) -> str:
    """One line per row and source: the measured and predicted TTFT and TPOT (ms), or the reason it was not priced."""
    header = ["id", "model", "system", "engine", "engine_version", "scenario", "source", "measured_ttft_ms", "measured_tpot_ms",
              "predicted_ttft_ms", "predicted_tpot_ms", "ttft_err", "tpot_err", "not_priced"]
    rows = []
    for p in res["points"]:
        m = p["measured"]
        for src in sorted(set(p["predicted"]) | set(p["errors"])):
            q = p["predicted"].get(src)
            rows.append([p["id"], p["model"], p["system"], p["engine"], p["engine_version"], p["scenario"], src,
                         m["ttft_ms"], m["tpot_ms"], q["ttft_ms"] if q else "", q["tpot_ms"] if q else "",
                         q["ttft_ms"] / m["ttft_ms"] - 1 if q else "", q["tpot_ms"] / m["tpot_ms"] - 1 if q else "",
                         p["errors"].get(src, "")])
    return _csv(header, rows)
