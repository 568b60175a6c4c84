"""Terminal tables (rich) and CSV for the CLI's outputs."""

from __future__ import annotations

import csv
import io

from rich.markup import escape

from rich.console import Console
from rich.table import Table

console = Console()


def _fmt_iv(iv) -> str:
    return f"{iv[0]:.0f}–{iv[1]:.0f}"


def projection_table(res: dict) -> None:
    t = res["target"]
    title = (f"{res['model']} on {t['n_gpus']}× {t['display_name']} ({t['memory_kind']}"
             f"{', ' + t['link_kind'] if t['link_kind'] else ''}), {res['parallel']}, context {res['context']}, "
             f"spec {res['spec']}, {'CUDA graphs' if res['graphs'] else 'eager'}")
    tab = Table(title=title, title_justify="left")
    for col in ("C", "tok/s/stream", "90% interval", "tok/s total", "step ms", "B", "τ", "bottleneck"):
        tab.add_column(col, justify="left" if col == "bottleneck" else "right")
    fit = [p for p in res["points"] if p["fits_in_memory"]]
    for p in res["points"]:
        if not p["fits_in_memory"]:
            tab.add_row(str(p["concurrency"]), "—", "", "", "", "", "", "[red]does not fit in memory[/]")
            continue
        tab.add_row(str(p["concurrency"]), f"{p['tokens_per_s_per_stream']:.1f}",
                    _fmt_iv(p["interval"]["tokens_per_s_per_stream"]), f"{p['tokens_per_s']:.0f}",
                    f"{p['step_ms']:.2f}", str(p["budget"] or "—"), f"{p['tau']:.2f}", p["bottleneck"])
    console.print(tab)
    if fit:
        comps = sorted({k for p in fit for k in p["breakdown_ms"]}, key=lambda k: -max(p["breakdown_ms"].get(k, 0) for p in fit))
        bt = Table(title="step time by component (ms)", title_justify="left")
        bt.add_column("component")
        for p in fit:
            bt.add_column(f"C={p['concurrency']}", justify="right")
        for k in comps:
            bt.add_row(k, *(f"{p['breakdown_ms'].get(k, 0.0):.3f}" for p in fit))
        console.print(bt)
    pr = res["profile"]
    sc = res["self_check"]
    console.print(f"profile: {pr['label']}  [{pr['path']}]")
    if sc["median_abs_err"] is not None:
        console.print(f"model error on the measured GPU: {sc['median_abs_err']:.1%} median, "
                      f"{sc['max_abs_err']:.1%} max over {sc['n_points']} end-to-end steps")
    else:
        console.print("model error on the measured GPU: not available (profile has no end-to-end steps)")
    if res.get("acceptance"):
        console.print(f"acceptance τ: {res['acceptance']['description']}")
    console.print(f"describes: {escape(res['describes'])}")
    if res.get("observed"):
        o = res["observed"]
        console.print(f"one-point calibration from {escape(o['point'])}: observed {o['observed_tokens_per_s_per_stream']:g} "
                      f"tok/s per stream, the model said {o['uncalibrated_tokens_per_s_per_stream']:.1f} before and "
                      f"{o['calibrated_tokens_per_s_per_stream']:.1f} after calibrating")
    if res.get("calibration"):
        c = res["calibration"]
        moved = ", ".join(f"{k} x{v['value']:.2f}" if k != "engine_host_us" else f"engine host {v['value']:.0f} us"
                          for k, v in c["factors"].items() if v["determined"])
        loo = c["loo_median_abs_err"]
        console.print(f"calibration: {c['n_points']} point(s); factors the data moved: {moved or 'none'}; "
                      f"leave-one-out median error {'n/a (one point)' if loo is None else f'{loo:.1%}'}")
        for w in c["warnings"]:
            console.print(f"warning: {escape(w)}")
    console.print(f"largest concurrency that fits in memory: {res['max_concurrency_that_fits']}")
    for p in res["points"]:
        if p.get("budget_note"):
            console.print(f"C={p['concurrency']}: {p['budget_note']}")
    if res.get("sensitivity"):
        st = Table(title="sensitivity: tok/s change for ±20% in each input (C = first concurrency)", title_justify="left")
        for col in ("input", "−20%", "+20%"):
            st.add_column(col, justify="left" if col == "input" else "right")
        for s in res["sensitivity"]:
            st.add_row(s["input"], f"{s['minus']:+.1%}", f"{s['plus']:+.1%}")
        console.print(st)


def projection_csv(res: dict) -> str:
    buf = io.StringIO()
    comps = sorted({k for p in res["points"] if p["fits_in_memory"] for k in p["breakdown_ms"]})
    w = csv.writer(buf)
    w.writerow(["concurrency", "fits_in_memory", "tokens_per_s_per_stream", "tokens_per_s", "step_ms", "budget", "tau",
                "bottleneck", "tps_stream_lo", "tps_stream_hi"] + [f"{c}_ms" for c in comps])
    for p in res["points"]:
        if not p["fits_in_memory"]:
            w.writerow([p["concurrency"], False] + [""] * (8 + len(comps)))
            continue
        iv = p["interval"]["tokens_per_s_per_stream"]
        w.writerow([p["concurrency"], True, f"{p['tokens_per_s_per_stream']:.3f}", f"{p['tokens_per_s']:.3f}",
                    f"{p['step_ms']:.4f}", p["budget"], f"{p['tau']:.3f}", p["bottleneck"], f"{iv[0]:.3f}", f"{iv[1]:.3f}"]
                   + [f"{p['breakdown_ms'].get(c, 0.0):.4f}" for c in comps])
    return buf.getvalue()


def validation_table(res: dict) -> None:
    tab = Table(title="perfmodel validate: projection vs measurement", title_justify="left")
    for col in ("kind", "point", "unit", "measured", "predicted", "error", "in 90% interval"):
        tab.add_column(col, justify="right" if col in ("measured", "predicted", "error") else "left")
    for r in res["rows"]:
        tab.add_row(r["kind"], r["point"], r["unit"], f"{r['measured']:.4g}", f"{r['predicted']:.4g}",
                    f"{r['err']:+.1%}", {True: "yes", False: "no", None: "—"}[r.get("in_interval")])
    console.print(tab)
    console.print("sources: `perfmodel validate --format json` (field `source`) and perfmodel/data/published.yaml")
    for kind, s in res["summary"]["by_kind"].items():
        cov = f", interval coverage {s['coverage']:.0%}" if s.get("coverage") is not None else ""
        console.print(f"{kind}: {s['n']} points, median |error| {s['median_abs_err']:.1%}, max {s['max_abs_err']:.1%}{cov}")


def validation_csv(res: dict) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["kind", "point", "measured", "unit", "predicted", "err", "in_interval", "source"])
    for r in res["rows"]:
        w.writerow([r["kind"], r["point"], r["measured"], r["unit"], r["predicted"], r["err"], r.get("in_interval"), r["source"]])
    return buf.getvalue()


def gpu_table(gpus) -> None:
    tab = Table(title="GPUs (datasheet peaks; `perfmodel hw show NAME` for sources)", title_justify="left")
    for col in ("name", "aliases", "memory", "GB", "GB/s", "bf16 TF", "fp8 TF", "fp4 TF", "scale-up", "default link"):
        tab.add_column(col)
    for g in gpus:
        c = g.compute
        tab.add_row(g.name, ",".join(g.aliases), g.memory.kind, f"{g.memory.capacity_GB.value:g}",
                    f"{g.memory.bandwidth_GBps.value:g}", f"{c.bf16_dense_TFLOPS.value:g}",
                    f"{c.fp8_dense_TFLOPS.value:g}" if c.fp8_dense_TFLOPS else "—",
                    f"{c.fp4_dense_TFLOPS.value:g}" if c.fp4_dense_TFLOPS else "—",
                    g.scale_up.kind + (f" {g.scale_up.bw_per_dir_GBps.value:g} GB/s" if g.scale_up.bw_per_dir_GBps else ""),
                    g.default_interconnect)
    console.print(tab)


def link_table(links) -> None:
    tab = Table(title="Interconnects", title_justify="left")
    for col in ("name", "kind", "topology", "GB/s per dir", "AR latency us", "AR busbw GB/s", "A2A latency us", "A2A busbw GB/s"):
        tab.add_column(col)
    for ln in links:
        c = ln.calibrated
        tab.add_row(ln.name, ln.kind, ln.topology, f"{ln.peak.bw_per_dir_GBps.value:g}", f"{c.allreduce_latency_us.value:g}",
                    f"{c.allreduce_busbw_GBps.value:g}", f"{c.alltoall_latency_us.value:g}", f"{c.alltoall_busbw_GBps.value:g}")
    console.print(tab)


def model_table(models) -> None:
    from perfmodel.model.memory import param_counts

    tab = Table(title="Model presets", title_justify="left")
    for col in ("name", "layers", "hidden", "attention", "experts", "routed dtype", "params (B)", "drafter"):
        tab.add_column(col)
    for m in models:
        e = m.moe
        tab.add_row(m.name, str(m.n_layers), str(m.hidden_size), m.attention.kind.upper(),
                    f"{e.n_routed_experts} top-{e.top_k} +{e.n_shared_experts}" if e else "dense",
                    m.dtypes.routed_experts if e else m.dtypes.dense_mlp,
                    f"{sum(param_counts(m).values()) / 1e9:.1f}", m.drafter.name if m.drafter else "—")
    console.print(tab)


def spec_tree(spec) -> None:
    from rich.pretty import Pretty

    console.print(Pretty(spec.model_dump(exclude_defaults=False)))


def param_table(m) -> None:
    from perfmodel.model.memory import param_counts

    tab = Table(title=f"{m.name}: parameters by component", title_justify="left")
    tab.add_column("component")
    tab.add_column("params (B)", justify="right")
    pc = param_counts(m)
    for k, v in pc.items():
        tab.add_row(k, f"{v / 1e9:.2f}")
    tab.add_row("total", f"{sum(pc.values()) / 1e9:.1f}")
    console.print(tab)
