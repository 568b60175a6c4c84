"""Times `perfmodel calibrate` end to end (one process per run, wall clock) on the inputs beside
this file, and keeps each run's calib.json so that two trees' fits can be compared:

    python evidence/calibrate-speed/time_calibrate.py OUT_DIR        # writes OUT_DIR/<input>.json, prints the times
    python evidence/calibrate-speed/time_calibrate.py --compare A B  # factors, posterior σ and leave-one-out, A vs B
"""

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
INPUTS = ("points30.yaml", "aliases50.yaml")


def run(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in INPUTS:
        dst = out / name.replace(".yaml", ".json")
        t, c = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-m", "perfmodel", "calibrate", str(HERE / name), "--out", str(dst),
                        "--format", "json"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (c1.ru_utime - c.ru_utime) + (c1.ru_stime - c.ru_stime)
        print(f"{name}: {time.perf_counter() - t:.2f} s wall, {cpu:.2f} s CPU (perfmodel calibrate, one process)")


def compare(a: Path, b: Path) -> None:
    worst = {}
    for name in INPUTS:
        ra, rb = (json.loads((d / name.replace(".yaml", ".json")).read_text()) for d in (a, b))
        fa, fb = {f["name"]: f for f in ra["factors"]}, {f["name"]: f for f in rb["factors"]}
        assert fa.keys() == fb.keys(), name
        for k in fa:
            for field in ("value", "sigma_post"):
                x, y = fa[k][field], fb[k][field]
                rel = abs(x - y) / max(abs(x), 1e-9) if k != "engine_host_us" or field != "value" else abs(x - y)
                worst[(name, field)] = max(worst.get((name, field), 0.0), rel)
            assert fa[k]["determined"] == fb[k]["determined"], (name, k)
        for pa, pb in zip(ra["points"], rb["points"]):
            for field in ("predicted", "err", "loo_err"):
                if pa[field] is not None:
                    worst[(name, field)] = max(worst.get((name, field), 0.0), abs(pa[field] - pb[field]))
        print(f"{name}: loo median {ra['loo_median_abs_err']} vs {rb['loo_median_abs_err']}")
    for (name, field), v in sorted(worst.items()):
        kind = "relative" if field in ("value", "sigma_post") else "absolute"
        print(f"{name} {field}: largest {kind} difference {v:.3g}")


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        compare(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        run(Path(sys.argv[1]))
