"""Eager launches of Triton kernels without Triton's per-call Python binder.

`fn[grid](*args)` spends tens of microseconds of host time per call in Triton's generic
path (binding the signature, specialising every argument, hashing the cache key, building
launch metadata, calling the launch hooks). `FastLauncher` compiles through that path on the
first call for a given specialisation, keeps the compiled kernel, and afterwards calls its C
launcher (`CompiledKernel.run.launch`, the compiled `__triton_launcher` module) directly, with
the tensors passed as raw device pointers: the C launcher then skips, per tensor, a Python
`data_ptr()` call and a `cuPointerGetAttribute` check.

The cache key is the part of the specialisation that changes what Triton compiles: each
tensor's dtype and 16-byte alignment (and that it is a CUDA tensor: a CPU tensor gets its own
key, so Triton's own path reports it), each integer's value class (== 1, divisible by 16,
needs 64 bits), each float as a float, and the constexpr keywords. That is what Triton
3.x's `specialize_impl` looks at for parameters without `do_not_specialize` (all of
ours). A wrapper that knows its arguments can give a cheaper key of its own
(`launch_keyed`). Under the interpreter, or with a launch hook installed (profilers), it
defers to `fn[grid]` every time.
"""
from __future__ import annotations

import functools
import os
from typing import NamedTuple

import torch

__all__ = ["FastLauncher", "DeviceFacts", "cdiv", "device_facts", "facts_of", "interpreting", "next_pow2"]

_Tensor = torch.Tensor
_I32 = 2**31


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for ints: triton.cdiv's value without its host cost (it is a ConstexprFunction,
    about 2 us per call from Python, and the launch wrappers call it on every eager call)."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (0 for n <= 0), as triton.next_power_of_2, on the host."""
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


@functools.cache
def interpreting() -> bool:
    """TRITON_INTERPRET=1, read once: Triton's jit decorators read it when the kernel modules are
    imported, so it cannot change afterwards (an eager layer call asks several times)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


class DeviceFacts(NamedTuple):
    cc_major: int  # compute capability, major
    num_sms: int
    l2_bytes: int


@functools.cache
def device_facts(index: int) -> DeviceFacts:
    """What the launch wrappers ask of a CUDA device, looked up once per device."""
    p = torch.cuda.get_device_properties(index)
    return DeviceFacts(p.major, int(p.multi_processor_count), int(p.L2_cache_size))


def facts_of(device: torch.device) -> DeviceFacts | None:
    """`device_facts` of a tensor's device (an index-less CUDA device: the current one), None off CUDA."""
    if device.type != "cuda":
        return None
    return device_facts(device.index if device.index is not None else torch.cuda.current_device())


def _spec(a):
    """The key part of one argument (the generic path's per-argument rule, spelled out)."""
    c = a.__class__
    if c is int:
        return (1 if a == 1 else 16 if not a & 15 else 0) + (0 if -_I32 <= a < _I32 else 64)
    if c is bool or a is None:
        return ("b", a)
    if c is float:
        return "f"
    if isinstance(a, _Tensor):
        return (a.dtype, (not a.data_ptr() & 15) + 2 * a.is_cuda)
    if isinstance(a, int):  # numpy / other int types: as ints
        return _spec(int(a))
    return (type(a).__name__, a)


class FastLauncher:
    """`FastLauncher(jit_fn)[grid](*args, CONST=..., num_warps=...)`: positional runtime
    arguments in signature order, constexprs and launch options as keywords."""

    RAW_POINTERS = True  # hand tensors to the C launcher as integer device pointers

    def __init__(self, fn):
        self.fn = fn
        self.cache: dict = {}
        self.names = list(fn.arg_names)
        self.interpret = interpreting()
        self.hits = 0  # launches that took the direct path (a check for the A/B script)
        self._stream = None  # Triton's driver hooks, bound at the first launch (no driver without a GPU)

    def _bind(self):
        from triton import knobs
        from triton.runtime.driver import driver

        self._knobs = knobs.runtime
        torch.cuda.init()
        # torch.cuda.current_device() is a Python wrapper (lazy init + this call)
        self._device = getattr(torch._C, "_cuda_getDevice", None) or driver.active.get_current_device
        self._stream = driver.active.get_current_stream

    def _hooked(self):
        hook = self._knobs.launch_enter_hook  # an empty HookChain in Triton 3.6: no hook
        return hook is not None and bool(getattr(hook, "calls", True))

    def __getitem__(self, grid):
        return lambda *args, **kw: self.launch(grid, args, kw)

    def _compile(self, key, grid, args, kw):
        """Triton's own path: compiles (once per specialisation) and launches; then caches
        what a direct launch needs under `key`."""
        kernel = self.fn[grid](*args, **kw)
        if kernel is None:
            return
        # the C launcher takes every parameter in signature order, constexprs included
        params = self.fn.params[len(args):]
        if not all(p.name in kw or p.has_default for p in params):
            return
        tail = tuple(kw[p.name] if p.name in kw else p.default for p in params)
        run = kernel.run
        c_launch = getattr(run, "launch", None)
        if c_launch is not None and not getattr(run, "global_scratch_size", 1) and not getattr(run, "profile_scratch_size", 1):
            # CudaLauncher.__call__ minus its scratch allocation (none here): the C entry point
            head = (kernel.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                    kernel.packed_metadata, None, None, None)
            self.cache[key] = (c_launch, head, tail, self.RAW_POINTERS)
        else:
            self.cache[key] = (run, (kernel.function, kernel.packed_metadata, None, None, None), tail, False)

    def launch(self, grid, args, kw):
        if self.interpret:
            return self.fn[grid](*args, **kw)
        if self._stream is None:
            self._bind()
        device = self._device()
        key = [device]
        ptrs = []
        for a in args:
            c = a.__class__
            if c is int:
                key.append((1 if a == 1 else 16 if not a & 15 else 0) + (0 if -_I32 <= a < _I32 else 64))
                ptrs.append(a)
            elif c is _Tensor:
                p = a.data_ptr()
                key.append(a.dtype)
                key.append((not p & 15) + 2 * a.is_cuda)
                ptrs.append(p)
            else:
                key.append(_spec(a))
                ptrs.append(a.data_ptr() if isinstance(a, _Tensor) else a)
        key.append(tuple(kw.items()))
        self._run(tuple(key), device, grid, args, ptrs, kw)

    def launch_keyed(self, key, grid, args, ptrs, kw):
        """A launch whose caller vouches that `key` determines the specialisation (dtypes,
        alignments, integer classes, constexprs) and gives `ptrs`: `args` with each tensor
        as its data_ptr(). Skips the per-argument key of `launch`."""
        if self.interpret:
            return self.fn[grid](*args, **kw)
        if self._stream is None:
            self._bind()
        device = self._device()
        self._run((device, key), device, grid, args, ptrs, kw)

    def launch_direct(self, key, grid: tuple, ptrs) -> bool:
        """The cheapest eager launch: the C launcher cached under `key` (as `launch_keyed`
        caches it) called at once with `ptrs` (every tensor as its data_ptr()) on `grid`, a
        tuple of all three dimensions.
        False, having launched nothing, where it cannot: not yet compiled under `key` (or not
        through the C entry point), under the interpreter, or with a launch hook installed; the
        caller then goes through `launch_keyed`, which compiles, caches and launches. It builds
        no argument tuple, constexpr dict or grid tuple, and looks the key up once
        (tools/eager_launch_parts.py times it against the C launcher alone)."""
        if self._stream is None:  # never launched (or interpreting): the keyed path binds first
            return False
        device = self._device()
        hit = self.cache.get((device, key))
        if hit is None or not hit[3]:
            return False
        hook = self._knobs.launch_enter_hook
        if hook is not None and getattr(hook, "calls", True):
            return False
        run, head, tail, _ = hit
        self.hits += 1
        run(*grid, self._stream(device), *head, *ptrs, *tail)
        return True

    def _run(self, key, device, grid, args, ptrs, kw):
        """The cached direct launch under `key`; Triton's own path the first time (compiling
        and caching) or while a launch hook (a profiler) is installed."""
        hit = self.cache.get(key)
        if hit is None or self._hooked():
            if hit is None:
                self._compile(key, grid, args, kw)
            else:
                self.fn[grid](*args, **kw)
            return
        run, head, tail, raw = hit
        n = len(grid)
        self.hits += 1
        run(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, self._stream(device), *head,
            *(ptrs if raw else args), *tail)
