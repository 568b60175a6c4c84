"""kernels/_launch.py FastLauncher: compiles through the JIT once per specialisation, then
calls the compiled kernel's launcher directly with every parameter in signature order."""
import inspect
import types

import torch

from perfmodel.kernels import _launch


class _Param:
    def __init__(self, p):
        self.name, self._p = p.name, p

    @property
    def default(self):
        return self._p.default

    @property
    def has_default(self):
        return self._p.default is not inspect.Parameter.empty


class _FakeJit:
    """Stands in for a triton JITFunction: fn[grid](*args, **kw) 'compiles' and returns a kernel."""

    def __init__(self, f):
        ps = list(inspect.signature(f).parameters.values())
        self.arg_names = [p.name for p in ps]
        self.params = [_Param(p) for p in ps]
        self.compiles, self.runs = 0, []

    def __getitem__(self, grid):
        def call(*args, **kw):
            self.compiles += 1
            kern = types.SimpleNamespace(function="f", packed_metadata="m")
            kern.run = lambda *a: self.runs.append(a)
            return kern
        return call


def test_fast_launcher_caches_per_specialisation(monkeypatch):
    def kernel(x_ptr, n, eps, BLOCK, FLAG=7):
        pass

    fake = _FakeJit(kernel)
    fl = _launch.FastLauncher(fake)
    fl.interpret = False
    fl._knobs = types.SimpleNamespace(launch_enter_hook=None)
    fl._device, fl._stream = (lambda: 0), (lambda dev: 99)
    x = torch.zeros(64)
    fl[(3,)](x, 32, 1e-6, BLOCK=64)
    assert fake.compiles == 1 and fake.runs == []
    fl[(3, 2)](x, 48, 2e-6, BLOCK=64)  # same specialisation (ints divisible by 16): direct launch
    assert fake.compiles == 1
    (g0, g1, g2, stream, fn, meta, lm, h0, h1, *args), = fake.runs
    assert (g0, g1, g2, stream, fn, meta) == (3, 2, 1, 99, "f", "m")
    assert args == [x, 48, 2e-6, 64, 7]  # runtime args, then constexprs, then defaults, in order
    fl[(3,)](x, 33, 1e-6, BLOCK=64)  # n no longer divisible by 16: compiles again
    fl[(3,)](x[1:], 32, 1e-6, BLOCK=64)  # misaligned pointer: compiles again
    fl[(3,)](x, 32, 1e-6, BLOCK=128)  # another constexpr: compiles again
    assert fake.compiles == 4 and len(fake.runs) == 1 and fl.hits == 1
    fl._knobs.launch_enter_hook = types.SimpleNamespace(calls=[print])  # a profiler's hook: Triton's own path
    fl[(3,)](x, 32, 1e-6, BLOCK=64)
    assert fake.compiles == 5 and fl.hits == 1


class _FakeCudaLauncher:
    """Stands in for Triton's CudaLauncher: `.launch` is its C entry point."""

    global_scratch_size = profile_scratch_size = 0
    launch_cooperative_grid, launch_pdl = False, True

    def __init__(self, calls):
        self.launch = lambda *a: calls.append(a)

    def __call__(self, *a):  # the generic path (not taken once cached)
        raise AssertionError("the direct path calls .launch")


def test_fast_launcher_calls_the_c_entry_with_raw_pointers():
    def kernel(x_ptr, y_ptr, n, BLOCK):
        pass

    fake = _FakeJit(kernel)
    calls = []

    def getitem(grid):
        def call(*args, **kw):
            fake.compiles += 1
            return types.SimpleNamespace(function="f", packed_metadata="m", run=_FakeCudaLauncher(calls))
        return call

    fake.__class__ = type("FakeJitC", (_FakeJit,), {"__getitem__": lambda self, g: getitem(g)})
    fl = _launch.FastLauncher(fake)
    fl.interpret = False
    fl._knobs = types.SimpleNamespace(launch_enter_hook=types.SimpleNamespace(calls=[]))
    fl._device, fl._stream = (lambda: 0), (lambda dev: 99)
    x, y = torch.zeros(64), torch.ones(32)
    fl[(2,)](x, y, 64, BLOCK=64)
    fl[(2,)](y, x, 32, BLOCK=64)  # same key: direct launch, pointers as ints
    assert fake.compiles == 1 and fl.hits == 1
    (args,) = calls
    assert args == (2, 1, 1, 99, "f", False, True, None, None, "m", None, None, None, y.data_ptr(), x.data_ptr(), 32, 64)
    # a caller-chosen key: compiled once under it, then direct
    fl.launch_keyed("k", (3, 4), (x, y, 16), (x.data_ptr(), y.data_ptr(), 16), dict(BLOCK=64))
    fl.launch_keyed("k", (3, 4), (y, x, 16), (y.data_ptr(), x.data_ptr(), 16), dict(BLOCK=64))
    assert fake.compiles == 2 and fl.hits == 2 and calls[-1][:4] == (3, 4, 1, 99)
    assert calls[-1][13:] == (y.data_ptr(), x.data_ptr(), 16, 64)


def test_host_cdiv_and_next_pow2_match_triton():
    """The host-side grid helpers give triton.cdiv's and triton.next_power_of_2's values (they
    replace those ConstexprFunctions, about 2 us per call, on the eager path)."""
    import triton

    for a in list(range(0, 300)) + [2**31 - 1, 2**31, 2**40 + 3]:
        assert _launch.next_pow2(a) == triton.next_power_of_2(a), a
        for b in (1, 2, 3, 16, 64, 255, 256, 1000):
            assert _launch.cdiv(a, b) == triton.cdiv(a, b), (a, b)


def test_launch_direct_only_where_the_keyed_path_cached_a_c_entry():
    """launch_direct launches nothing (False) before the first keyed launch, for a key not yet
    compiled, under a launch hook, or where only the generic launcher was cached; otherwise it
    calls the cached C entry with the grid, the stream and the pointers, as launch_keyed does."""
    def kernel(x_ptr, n, BLOCK):
        pass

    calls = []
    fake = _FakeJit(kernel)

    def getitem(grid):
        def call(*args, **kw):
            fake.compiles += 1
            return types.SimpleNamespace(function="f", packed_metadata="m", run=_FakeCudaLauncher(calls))
        return call

    fake.__class__ = type("FakeJitD", (_FakeJit,), {"__getitem__": lambda self, g: getitem(g)})
    fl = _launch.FastLauncher(fake)
    fl.interpret = False
    x = torch.zeros(64)
    assert not fl.launch_direct("k", (5, 1, 1), (x.data_ptr(), 16))  # never bound: the keyed path binds
    fl._knobs = types.SimpleNamespace(launch_enter_hook=types.SimpleNamespace(calls=[]))
    fl._device, fl._stream = (lambda: 0), (lambda dev: 99)
    assert not fl.launch_direct("k", (5, 1, 1), (x.data_ptr(), 16))  # not compiled under "k"
    fl.launch_keyed("k", (5,), (x, 16), (x.data_ptr(), 16), dict(BLOCK=64))  # compiles
    assert fake.compiles == 1 and calls == [] and fl.hits == 0
    assert fl.launch_direct("k", (7, 1, 1), (x.data_ptr(), 32))
    assert fl.hits == 1 and calls[-1] == (7, 1, 1, 99, "f", False, True, None, None, "m", None, None, None,
                                          x.data_ptr(), 32, 64)
    assert not fl.launch_direct("other", (7, 1, 1), (x.data_ptr(), 32))
    fl._device = lambda: 1  # another device: its own compile
    assert not fl.launch_direct("k", (7, 1, 1), (x.data_ptr(), 32))
    fl._device = lambda: 0
    fl._knobs.launch_enter_hook.calls.append(print)  # a profiler's hook: Triton's own path
    assert not fl.launch_direct("k", (7, 1, 1), (x.data_ptr(), 32)) and fl.hits == 1 and len(calls) == 1
    fl._knobs.launch_enter_hook.calls.clear()
    fl.cache[(0, "k")] = fl.cache[(0, "k")][:3] + (False,)  # the generic launcher only: no raw pointers
    assert not fl.launch_direct("k", (7, 1, 1), (x.data_ptr(), 32)) and len(calls) == 1


def test_rmsnorm_eager_path_launches_directly_after_the_first_call(monkeypatch):
    """The rmsnorm wrapper's fast path compiles through launch_keyed once, then launches
    through launch_direct with the same key and pointers (its results are checked on the GPU
    and in the interpreter by tests/test_kernel_small_ops.py)."""
    from perfmodel.kernels import rmsnorm as r

    seen = []

    class _Stub:
        def __init__(self):
            self.keyed = {}

        def launch_direct(self, key, gx, ptrs):
            seen.append(("direct", key, gx, ptrs))
            return key in self.keyed

        def launch_keyed(self, key, grid, args, ptrs, kw):
            seen.append(("keyed", key, grid, ptrs))
            self.keyed[key] = kw

    stub = _Stub()
    monkeypatch.setattr(r, "_KERNEL", stub)
    x, w = torch.randn(3, 64), torch.ones(64)
    out = torch.empty_like(x)
    r.rmsnorm(x, w, out=out)
    r.rmsnorm(x, w, out=out)
    key = (x.dtype, w.dtype, None, 64, False)
    ptrs = (x.data_ptr(), x.data_ptr(), w.data_ptr(), out.data_ptr(), out.data_ptr(), 64, 64, 0, 64, 64, 1e-6)
    assert seen == [("direct", key, (3, 1, 1), ptrs), ("keyed", key, (3,), ptrs), ("direct", key, (3, 1, 1), ptrs)]
    assert stub.keyed[key] == dict(ADD=False, BLOCK=64, num_warps=1)
