"""Shared test helpers for the kernels: one error metric and one tolerance table.

`calc_diff` is DeepGEMM's metric (deep_gemm/testing/numeric.py): 1 - cosine-like
similarity 2<x,y>/(|x|^2+|y|^2), computed in float64. It is scale-free, so one
threshold per dtype works for all shapes; 0 means identical.
"""
from __future__ import annotations

import os

import torch


def use_interpreter_if_no_gpu() -> None:
    """Set TRITON_INTERPRET=1 when there is no CUDA device. Call BEFORE importing triton."""
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if os.environ.get("TRITON_INTERPRET") == "1":
        _patch_interpreter_scalar_index()


def _patch_interpreter_scalar_index() -> None:
    """Triton 3.6's interpreter keeps scalars as 1-element arrays and converts them with
    int(arr), which NumPy >= 2.4 rejects for ndim > 0 ("only 0-dimensional arrays can be
    converted"), so `range(0, K, BLOCK)` over a runtime K fails. Convert via .item()."""
    from triton.runtime import interpreter

    if getattr(interpreter, "_perfmodel_patched", False):
        return
    original = interpreter._patch_lang_tensor

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched
    interpreter._perfmodel_patched = True


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    if denominator == 0:
        return 0.0
    sim = 2 * (x * y).sum() / denominator
    return float(1 - sim)


def max_rel_err(x: torch.Tensor, y: torch.Tensor) -> float:
    """max |x-y| / max |y| (robust to near-zero elements of y)."""
    x, y = x.double(), y.double()
    return float((x - y).abs().max() / y.abs().max().clamp_min(1e-30))


# Thresholds per compute dtype of the kernel under test (the reference is fp32/fp64).
# bf16 carries 8 mantissa bits (rel. rounding 2^-9 ~ 2e-3); a GEMM/attention output
# checked against an fp32 reference lands near calc_diff ~ 1e-5, so 1e-4 leaves headroom
# without hiding indexing bugs (those give calc_diff ~ 1e-1).
TOLERANCES: dict[torch.dtype, dict[str, float]] = {
    torch.bfloat16: {"calc_diff": 1e-4, "max_rel": 3e-2},
    torch.float16: {"calc_diff": 2e-5, "max_rel": 5e-3},
    # fp32 inputs: tl.dot defaults to TF32 (10-bit mantissa) on the GPU and in the interpreter.
    torch.float32: {"calc_diff": 2e-5, "max_rel": 1e-2},
}


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    """Check `out` against `ref` with the threshold for `dtype`; `what` names op and shape."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert torch.isfinite(out.float()).all(), f"{what}: non-finite values in output"
    tol = TOLERANCES[dtype]
    d = calc_diff(out, ref)
    r = max_rel_err(out, ref)
    assert d <= tol["calc_diff"], f"{what}: calc_diff={d:.3e} > {tol['calc_diff']:.1e} (max_rel={r:.3e})"
    assert r <= tol["max_rel"], f"{what}: max_rel={r:.3e} > {tol['max_rel']:.1e} (calc_diff={d:.3e})"
