"""The imported way's mean TPOT and TTFT, uncalibrated and through the shipped engine factors, on
the rows the engine calibrations are fitted on (run.py's rows), as run.py prices them: one JSON
record a row and figure (run from the repository root:
python evidence/sample-curve-envelope/price82.py vllm,sglang,trtllm OUT.json)."""
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, "evidence/engine-calibrations")
import run as R  # noqa: E402

from perfmodel import aic, silicon
from perfmodel.calibrate import load_result, prepare
from perfmodel.model.calibration import Factors
from perfmodel.request import resolve_profile
from perfmodel.silicon_validate import read_aic

engines = sys.argv[1].split(",") if len(sys.argv) > 1 else ["vllm", "sglang", "trtllm"]
out = sys.argv[2] if len(sys.argv) > 2 else None
db = aic.Database.installed()
local = resolve_profile(None)
ok, _ = silicon.express_all(silicon.load_rows(db))
est = {}
for f in R.AIC_RESULTS:
    est |= {i: r for i, r in read_aic((R.ROOT / f).read_text(), f).items() if "tpot_ms" in r and "ttft_ms" in r}
res = []
with tempfile.TemporaryDirectory() as tmp:
    for eng in engines:
        cal = load_result(f"perfmodel/data/engines/{eng}.json")
        fac = Factors(values={f.name: f.value for f in cal.factors})
        sub = [e for e in ok if e.engine == eng and e.row.id in est]
        pts, skipped = R.points_for(sub, Path(tmp), db, local)
        for i, pt in enumerate(pts):
            for s in pt.singles():
                prep = prepare(i, s, local)
                fig, val = s.figure
                res.append(dict(engine=eng, id=pt.label.split()[0], fig=fig, meas=val, uncal=prep.predict(Factors()),
                                cal=prep.predict(fac)))
if out:
    Path(out).write_text(json.dumps(res))
for fig in ("tpot_ms", "ttft_ms"):
    a = np.array([r["uncal"] / r["meas"] - 1 for r in res if r["fig"] == fig])
    b = np.array([r["cal"] / r["meas"] - 1 for r in res if r["fig"] == fig])
    print(fig, len(a), f"uncal med|e| {100*np.median(abs(a)):.1f}% signed {100*np.median(a):+.1f}%",
          f" cal(shipped factors, in-sample) {100*np.median(abs(b)):.1f}% {100*np.median(b):+.1f}%")
