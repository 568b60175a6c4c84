"""gap.py's first table from its runs side by side: per system, engine, FP8 dtype and M range, the
signed median and median |error| before the gemm_fp8 law, with it fitted on the fp8_block rows only,
and with it fitted per shape on the faster of the fp8 and fp8_block rows (the shipped fit).

    python evidence/fp8-gemm-import/side_by_side.py > evidence/fp8-gemm-import/side_by_side.txt
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = ("gap_before.txt", "gap_blockfit.txt", "gap_after.txt")


def _table(path: Path) -> dict[tuple, tuple[str, str]]:
    out = {}
    for line in path.read_text().splitlines():
        f = line.split()
        if len(f) >= 11 and f[0].endswith("_sxm") and "-" in f[4]:
            out[(f[0], f[1], f[3], f[4])] = (f[6], f[7])
        if not line.strip() and out:
            break
    return out


def main() -> None:
    tabs = [_table(HERE / r) for r in RUNS]
    print("signed median (median |error|) of predicted / measured - 1 on the database's GEMM rows")
    print(f"{'system':9} {'engine':7} {'dtype':9} {'M':>11}  " + "  ".join(f"{r.removesuffix('.txt'):>18}" for r in RUNS))
    for key in tabs[0]:
        if key[2] == "bfloat16":
            continue
        cells = [f"{t[key][0]:>8} ({t[key][1]:>6})" if key in t else "" for t in tabs]
        print(f"{key[0]:9} {key[1]:7} {key[2]:9} {key[3]:>11}  " + "  ".join(f"{c:>18}" for c in cells))


if __name__ == "__main__":
    main()
