"""The routed-expert op of quantised experts as an imported profile prices it, against the
database's own rows of that quantisation, at decode sizes (1-1024 tokens).

For every system and engine of the silicon sample (h100_sxm, h200_sxm, b200_sxm, b300_sxm; sglang,
vllm, trtllm; each engine's maintained version), the profile `perfmodel profile import-aic` writes
(`aic.import_profile`, the embedded profile as the local one) prices each balanced-routing,
expert-TP row (`aic.moe_points`: the op the step builds) as the step prices it
(`transfer._Machines.price`: on the system's own GPU, samples where it has them), for the expert
shapes of the sample's models with quantised experts (their presets) and the database's rows of
the format their checkpoints hold: fp8 -> fp8_block (128x128 blocks: DeepSeek-R1/V3,
Qwen3-235B-FP8, MiniMax-M2.5), mxfp4 -> w4a16_mxfp4 (gpt-oss-120b), nvfp4 -> nvfp4 (the NVFP4
DeepSeek checkpoints, DeepSeek-V3's expert shape).

Per (system, engine, dtype, model, expert TP): the rows, the median predicted / measured - 1 and
the median |error| as the step prices the op ("step": on the system's own GPU a row the profile
kept as a sample prices itself, the rows between samples are interpolated) and by the class's law
alone ("law": what an expert-parallel call, which has no sample, and every other GPU get), and the
law's predicted / measured at 1, 8, 64, 256 and 1024 tokens. Run from the repository root:
python evidence/moe-quant-import/gap.py
"""

import dataclasses
import statistics
import sys
from collections import defaultdict

from perfmodel import aic
from perfmodel.model.step import price_op
from perfmodel.request import resolve_profile
from perfmodel.specs import registry
from perfmodel.transfer import imported_machines

SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm")
DB_DTYPE = {"fp8": "fp8_block", "mxfp4": "w4a16_mxfp4", "nvfp4": "nvfp4"}
MODELS = {"deepseek-v3": "fp8", "qwen3-235b-a22b": "fp8", "minimax-m2.5": "fp8", "gpt-oss-120b": "mxfp4",
          "deepseek-v3 (NVFP4)": "nvfp4"}
TOKENS = (1, 8, 64, 256, 1024)
MAX_TOKENS = 1024


def shapes() -> dict[tuple, str]:
    out = {}
    for name, fmt in MODELS.items():
        m = registry.load_model(name.split(" ")[0])
        out[(DB_DTYPE[fmt], m.hidden_size, m.moe.expert_intermediate_size, m.moe.n_routed_experts, m.moe.top_k)] = name
    return out


def main() -> None:
    db = aic.Database.installed()
    local = resolve_profile(None)
    want = shapes()
    print(f"{aic.PACKAGE} {db.version}; local profile: {local.label}")
    print("predicted / measured - 1 of the routed-expert op, imported profile of the row's system and engine "
          f"(balanced routing, expert TP, tokens <= {MAX_TOKENS})\n")
    head = (f"{'system':9} {'engine':17} {'dtype':12} {'model':20} {'tp':>2} {'class':10} {'n':>3} {'step':>7} "
            f"{'|err|':>6} {'law':>7} {'|err|':>6}  " + " ".join(f"{'T=' + str(t):>7}" for t in TOKENS))
    print(head)
    overall = defaultdict(list)
    for system, engine, version, prof, mach in imported_machines(db, SYSTEMS, local):
        bare = dataclasses.replace(mach.get(), table=None)  # the laws alone
        by_kind, _ = aic.points(db, system, engine, version, kinds={"moe"})
        groups = defaultdict(list)
        for p in by_kind.get("moe", []):
            s = p.shape
            name = want.get((p.dtype, s["H"], s["I"] * int(s["shape"].rpartition("_tp")[2]), s["E"], s["k"]))
            if name is None or s["T"] > MAX_TOKENS:
                continue
            groups[(p.dtype, name, int(s["shape"].rpartition("_tp")[2]))].append(p)
        for (dtype, name, tp), pts in sorted(groups.items()):
            errs, law, at = [], [], {}
            for p in pts:
                us, _ = mach.price(p)
                errs.append(us / p.t_us - 1.0)
                law.append(price_op(bare, p.op) / p.t_us - 1.0)
                at[p.shape["T"]] = law[-1] + 1.0
            for key in ((dtype, system[:1]), (dtype, "all")):
                overall[key + ("step",)].extend(errs)
                overall[key + ("law",)].extend(law)
            cells = " ".join(f"{at[t]:7.2f}" if t in at else f"{'-':>7}" for t in TOKENS)
            print(f"{system:9} {engine + ' ' + version:17} {dtype:12} {name:20} {tp:>2} {pts[0].cls:10} {len(pts):>3} "
                  f"{_fmt(errs)} {_fmt(law)}  {cells}")
    print("\nall rows by dtype (h: Hopper systems, b: Blackwell): n, signed median, median |error|")
    for (dtype, fam, how), errs in sorted(overall.items()):
        print(f"  {dtype:12} {fam:4} {how:5} {len(errs):5} {_fmt(errs)}")


def _fmt(errs: list[float]) -> str:
    return f"{100 * statistics.median(errs):+6.1f}% {100 * statistics.median(abs(e) for e in errs):5.1f}%"


if __name__ == "__main__":
    sys.exit(main())
