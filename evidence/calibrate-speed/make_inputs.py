"""Writes the two calibration inputs the timing runs on (run once; both are committed):
points30.yaml: the embedded profile's 24 torch-only decode-stack steps (`calibrate.points_from_foreign`,
1x H200, Llama 3.1 8B and Qwen3-30B-A3B at C 1/8/32, q 1/4, L 1k/8k) and 6 Kimi K2.6 points on
8x H200 (TP and EP, C 1/16/64, one with DDTree), whose figures are fixed numbers of this file;
aliases50.yaml: one scenario written 50 times."""

from pathlib import Path

import yaml

from perfmodel.calibrate import points_from_foreign
from perfmodel.request import resolve_profile

HERE = Path(__file__).parent
pts = [p.model_dump(exclude_none=True, exclude_defaults=True) | {"target": "h200"}
       for p in points_from_foreign(resolve_profile(None), "h200")]
kimi = [dict(parallel="tp", concurrency=1, context=8192, tokens_per_s_per_stream=118.0),
        dict(parallel="tp", concurrency=16, context=8192, tokens_per_s=1180.0),
        dict(parallel="tp", concurrency=64, context=4096, tokens_per_s=2900.0),
        dict(parallel="ep", concurrency=1, context=8192, tokens_per_s_per_stream=74.0),
        dict(parallel="ep", concurrency=64, context=4096, tokens_per_s=2400.0),
        dict(parallel="tp", concurrency=8, context=8192, spec="ddtree", budget=8, tokens_per_s_per_stream=210.0)]
pts += [dict(target="h200", gpus=8, model="kimi-k2.6", **k) for k in kimi]
assert len(pts) == 30
(HERE / "points30.yaml").write_text(yaml.safe_dump({"engine": "timing input", "points": pts}, sort_keys=False))
alias = dict(target="h200", gpus=8, model="kimi-k2.6", parallel="tp", concurrency=16, context=8192, tokens_per_s=1180.0)
(HERE / "aliases50.yaml").write_text(yaml.safe_dump({"engine": "timing input", "points": [alias] * 50}, sort_keys=False))
