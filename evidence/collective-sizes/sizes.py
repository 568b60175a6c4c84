"""An imported profile's all-reduce laws against aiconfigurator-core's own all-reduce rows, by the
size of the message: the law fitted on decode-size messages alone (<= 4 MB per GPU, as before) and
the laws by size (that one, and one fitted on the larger messages a prompt's step sends).

For each system with a GPU spec and each engine at the package's maintained version
(`transfer.imported_machines`), every all-reduce row the import reads (the engine's custom
all-reduce table, else NCCL's; bf16) is priced on the system's GPU as a step prices it
(`transfer._Machines.price`): signed median error and median |error| by system, engine, GPU count
and mode, below and above 4 MB. Then what it moves in a prompt's step: DeepSeek-R1 and
Llama-3.1-70B 8192-token prefill steps on 8 GPUs (TP), imported profiles, both ways.
Needs the optional package (`pip install -e ".[aic]"`).

    python evidence/collective-sizes/sizes.py > evidence/collective-sizes/sizes.txt
"""
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

from perfmodel import aic, api
from perfmodel.profile import save_profile
from perfmodel.request import resolve_profile
from perfmodel.specs import registry
from perfmodel.transfer import _Machines, imported_machines

SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm")
STEPS = {"deepseek-v3": {"attention": "fp8", "dense_mlp": "fp8", "kv_cache": "fp8", "routed_experts": "fp8",
                         "shared_experts": "fp8"},
         "llama-3.1-70b": None}


def _stats(errs: list[float]) -> str:
    if not errs:
        return f"{'-':>22}"
    return f"{statistics.median(errs):+7.1%} {statistics.median(abs(e) for e in errs):6.1%} ({len(errs):2})"


def main() -> None:
    db, local = aic.Database.installed(), resolve_profile(None)
    mk = registry.load_memory_kinds()
    print(f"aiconfigurator-core {db.version}: all-reduce rows priced by the imported laws; signed median, "
          "median |error| (rows); 'decode law' = the law of <= 4 MB messages for every size (before), "
          "'by size' = a second law above 4 MB (now)")
    print(f"{'system':9} {'engine':7} {'version':10} {'GPUs':>4} {'mode':6} | {'<= 4 MB':>22} | "
          f"{'> 4 MB, decode law':>22} | {'> 4 MB, by size':>22}")
    steps = []
    for system, engine, version, prof, now in imported_machines(db, SYSTEMS, local):
        small_only = prof.model_copy(update={"collectives": [c for c in prof.collectives if c.min_bytes == 0]})
        before = _Machines(small_only, now.gpu, mk, fallback_gpu=now.fallback_gpu)
        pts, _ = aic.points(db, system, engine, version, kinds={"custom_allreduce", "nccl"})
        rows = pts.get("custom_allreduce") or pts.get("nccl") or []
        by = defaultdict(lambda: ([], [], []))
        for p in rows:
            if p.dtype not in ("bfloat16", "half") or not any(c.n_gpus == p.n_gpus and c.graph == p.graph
                                                                for c in small_only.collectives):
                continue
            e_now = now.price(p)[0] / p.t_us - 1
            e_before = before.price(p)[0] / p.t_us - 1
            cell = by[(p.n_gpus, p.graph)]
            if p.bytes_per_gpu <= aic.COLL_MAX_BYTES:
                cell[0].append(e_now)
            else:
                cell[1].append(e_before)
                cell[2].append(e_now)
        for (n, graph), (s, b, a) in sorted(by.items()):
            print(f"{system:9} {engine:7} {version:10} {n:4} {'graph' if graph else 'eager':6} | {_stats(s)} | "
                  f"{_stats(b)} | {_stats(a)}")
        if system == "h200_sxm" and engine in ("sglang", "trtllm"):
            steps.append((engine, prof, small_only))
    print()
    print("8192-token prefill step on 8x H200 (TP), imported: step ms and its collectives ms, decode law -> by size")
    with tempfile.TemporaryDirectory() as tmp:
        for engine, prof, small_only in steps:
            for model, dtype in STEPS.items():
                out = []
                for name, p in (("before", small_only), ("now", prof)):
                    path = Path(tmp) / f"{engine}-{name}.json"
                    save_profile(p.model_dump(mode="json", exclude_none=True), path)
                    kw = {"dtypes": dtype} if dtype else {}
                    res = api.step(target="h200", gpus=8, model=model, parallel="tp", profile=str(path),
                                   prefill=["1x8192@0"], **kw)
                    out.append((res.step_ms, res.breakdown_ms["collectives"]))
                print(f"  {engine:7} {model:14} step {out[0][0]:7.1f} -> {out[1][0]:7.1f} ms   "
                      f"collectives {out[0][1]:6.1f} -> {out[1][1]:6.1f} ms")


if __name__ == "__main__":
    main()
