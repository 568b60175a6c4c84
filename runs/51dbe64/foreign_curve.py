"""How the torch-only (foreign) stack's prediction error falls with the number of calibration
points, from the embedded profile's `foreign` samples. Rule for k points: the 1-GPU points of
each model at the smallest and largest step, then the same on 2 GPUs over NVLink and over PCIe,
then q > 1 points, in that order (k = 2 is `validate`'s pair); every other point is predicted.
Run: python runs/51dbe64/foreign_curve.py > runs/51dbe64/foreign_curve.txt"""

import statistics

from perfmodel.calibrate import CalibrationInput, fit, points_from_foreign, prepare
from perfmodel.request import resolve_profile

prof = resolve_profile(None)
pts = points_from_foreign(prof, "h200-sxm")
preps = [prepare(i, p, prof) for i, p in enumerate(pts)]


def extremes(sel):
    idx = [i for i, p in enumerate(pts) if sel(p)]
    return [min(idx, key=lambda i: pts[i].step_ms), max(idx, key=lambda i: pts[i].step_ms)] if idx else []


order = []
for sel in (lambda p: p.gpus == 1,
            lambda p: p.gpus == 1 and p.model == "llama-3.1-8b", lambda p: p.gpus == 1 and p.model == "qwen3-30b-a3b",
            lambda p: p.gpus == 2 and p.link is None, lambda p: p.gpus == 2 and p.link is not None,
            lambda p: (p.q or 1) > 1 and p.model == "llama-3.1-8b", lambda p: (p.q or 1) > 1 and p.model == "qwen3-30b-a3b"):
    order += [i for i in extremes(sel) if i not in order]
print(f"{len(pts)} points; calibration order: " + "; ".join(pts[i].describe() for i in order))
print("k  median|err|  max|err|  (predicted points)")
for k in (2, 4, 6, 8, 10, 12):
    cal = order[:k]
    res = fit(CalibrationInput(engine="torch-only stack", points=[pts[i] for i in cal]), prof, prof.label)
    f = res.to_factors()
    errs = [abs(preps[i].predict(f) / pts[i].step_ms - 1) for i in range(len(pts)) if i not in cal]
    moved = ", ".join(f"{x.name} {x.value:.2f}" for x in res.factors if x.determined)
    print(f"{k:2d}  {statistics.median(errs):10.1%}  {max(errs):8.1%}  ({len(errs)})  pinned by the data: {moved}")
