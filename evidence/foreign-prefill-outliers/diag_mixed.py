"""Where the time of the torch stack's mixed steps goes: each shape timed as measure_batches does,
its parts alone, and a profiler table of the mixed step's kernels."""
import torch
from torch.profiler import ProfilerActivity, profile

from perfmodel.measure.foreign import Group, TorchStack
from perfmodel.measure.timing import time_fn


def t(stack, groups):
    st = stack.batch_state(groups)
    r = time_fn(lambda: stack.step(st), graph=False, warmup=2, max_samples=10, max_seconds=0.5, batch=5)
    return st, r.median_ms

for name in ("llama-3.1-8b", "qwen3-30b-a3b"):
    stack = TorchStack(name)
    cases = {
        "mixed 1x512@8192 + 64@2048": [Group("prefill", 1, 512, 8192), Group("decode", 64, 1, 2048)],
        "prefill 1x512@8192": [Group("prefill", 1, 512, 8192)],
        "decode 64@2048 (eager)": [Group("decode", 64, 1, 2048)],
        "prefill 1x512@0": [Group("prefill", 1, 512, 0)],
        "prefill 1x576@0": [Group("prefill", 1, 576, 0)],
        "mixed 1x2048@0 + 32@4096": [Group("prefill", 1, 2048, 0), Group("decode", 32, 1, 4096)],
        "prefill 1x2048@0": [Group("prefill", 1, 2048, 0)],
        "decode 32@4096 (eager)": [Group("decode", 32, 1, 4096)],
    }
    for label, groups in cases.items():
        st, ms = t(stack, groups)
        print(f"{name} {label}: {ms:.3f} ms", flush=True)
        del st
        torch.cuda.empty_cache()
    for label in ("mixed 1x512@8192 + 64@2048", "prefill 1x512@0"):
        st = stack.batch_state(cases[label])
        for _ in range(3):
            stack.step(st)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                stack.step(st)
            torch.cuda.synchronize()
        print(f"== {name} {label}: profiler, 3 steps")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=22, max_name_column_width=90))
        del st
        torch.cuda.empty_cache()
    del stack
    torch.cuda.empty_cache()
