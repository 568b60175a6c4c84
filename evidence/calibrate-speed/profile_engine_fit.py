"""Where an engine calibration's time goes: `perfmodel.calibrate.fit` (leave-one-system-out) of the
engine's FACTORS on a stratified subset of the silicon rows aiconfigurator's estimator priced,
under cProfile, with the fitted factors and every point's prediction and held-out error printed
in full precision, its wall and CPU time (two runs of this script at two commits give the same lines where the results
are identical). Run from the repository root:

    python evidence/calibrate-speed/profile_engine_fit.py ENGINE PER_GROUP > OUT"""

import cProfile
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine-calibrations"))
import run  # noqa: E402  (evidence/engine-calibrations/run.py: its rows and points)

from perfmodel import aic, silicon  # noqa: E402
from perfmodel.calibrate import CalibrationInput, fit  # noqa: E402
from perfmodel.request import resolve_profile  # noqa: E402
from perfmodel.silicon_validate import read_aic  # noqa: E402

engine, per_group = sys.argv[1], int(sys.argv[2])
git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
print(f"perfmodel at {git}{' with uncommitted changes' if dirty else ''}; python {sys.version.split()[0]}")
db = aic.Database.installed()
local = resolve_profile(None)
ok, _ = silicon.express_all(silicon.load_rows(db))
files = ["evidence/silicon-validation/aic_estimator_4_per_group.jsonl",
         "evidence/silicon-validation/aic_estimator_8_per_group.jsonl",
         "evidence/engine-calibrations/aiconfigurator_per_group2.jsonl"]
priced = set()
for f in files:
    priced |= {i for i, r in read_aic(Path(f).read_text(), f).items() if "tpot_ms" in r}
sub = silicon.stratified([e for e in ok if e.engine == engine and e.row.id in priced], per_group, silicon.group_key)
pts, skipped = run.points_for(sub, Path(tempfile.mkdtemp()), db, local)
print(f"{engine}: {len(pts)} rows, {len(skipped)} skipped; factors {', '.join(run.FACTORS)}")
inp = CalibrationInput(engine=engine, points=pts, factors=run.FACTORS, held_out="gpu")
prof = cProfile.Profile()
t0, c0 = time.perf_counter(), time.process_time()
prof.enable()
res = fit(inp, local, "imported per-op profiles")
prof.disable()
print(f"fit: {time.perf_counter() - t0:.1f} s wall, {time.process_time() - c0:.1f} s CPU (under cProfile)")
for f in res.factors:
    print(f"factor {f.name} {f.value!r} sigma {f.sigma_post!r}")
for p in res.points:
    print(f"point {p.label.split()[0]} {p.figure} predicted {p.predicted!r} uncalibrated {p.uncalibrated!r} "
          f"held out {p.loo_err!r}")
pstats.Stats(prof, stream=sys.stdout).sort_stats("cumulative").print_stats(30)
