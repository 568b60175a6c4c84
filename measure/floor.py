"""Floor probe: the physical latency floor of a small kernel on this GPU, so that each kernel
class's fitted floor t0 can be read as a multiple of it. Three Triton kernels, each timed as
CUDA-graph nodes (many calls captured in one graph, per-call time = replay / calls):
  * empty: a kernel that does nothing, one program (the cost of one graph node that runs).
  * dram_wave: one wave of DRAM reads: one program per SM, each reading its share of a 1 MB
    buffer once (cold: the calls rotate over copies totalling > 2x L2) and writing a partial.
  * splitk_pair: that wave followed by a second kernel that reduces the partials (the
    shape of a split-K / split-KV kernel with a separate combine).
"""

from __future__ import annotations

from perfmodel.profile import FLOOR_PROBE_BYTES as WORKING_SET  # bytes read by one dram_wave call

from .timing import rotation_copies, time_fn

_K: dict = {}


def _kernels():
    if _K:
        return _K
    import triton
    import triton.language as tl

    @triton.jit
    def _empty(x_ptr):
        pass

    @triton.jit
    def _wave(x_ptr, part_ptr, n, per_prog, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * per_prog + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs, mask=(offs < n) & (tl.arange(0, BLOCK) < per_prog), other=0.0)
        tl.store(part_ptr + pid, tl.sum(v, axis=0))

    @triton.jit
    def _reduce(part_ptr, out_ptr, P, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr, tl.sum(tl.load(part_ptr + offs, mask=offs < P, other=0.0), axis=0))

    _K.update(empty=_empty, wave=_wave, reduce=_reduce)
    return _K


def probe(samples_out: list | None = None) -> dict[str, float]:
    """{"empty_node_us", "dram_wave_us", "splitk_pair_us"} on the current GPU; appends one
    Sample per probe to `samples_out` if given."""
    import torch
    import triton

    from .common import make_sample

    k = _kernels()
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    n = WORKING_SET // 4
    per_prog = -(-n // sms)
    block = triton.next_power_of_2(per_prog)
    copies = rotation_copies(WORKING_SET, max_copies=256)
    xs = [(torch.randn(n, device="cuda"),) for _ in range(copies)]
    part = torch.empty(sms, device="cuda")
    out = torch.empty(1, device="cuda")

    def empty(x):
        k["empty"][(1,)](x)

    def wave(x):
        k["wave"][(sms,)](x, part, n, per_prog, BLOCK=block, num_warps=4)

    def pair(x):
        wave(x)
        k["reduce"][(1,)](part, out, sms, BLOCK=triton.next_power_of_2(sms), num_warps=4)

    res = {}
    for name, fn, cold, what in (
        ("empty_node_us", empty, "none", "empty kernel, 1 program"),
        ("dram_wave_us", wave, "rotate", f"{sms} programs read {WORKING_SET} B once (cold)"),
        ("splitk_pair_us", pair, "rotate", "dram_wave + a 1-program reduce of its partials"),
    ):
        t = time_fn(fn, args_list=xs, graph=True, calls_per_graph=len(xs), cold_l2=cold,
                    max_samples=20, max_seconds=0.1)
        res[name] = t.median_ms * 1e3
        if samples_out is not None:
            samples_out.append(make_sample({"what": f"floor_{name[:-3]}", "bytes": WORKING_SET if cold != "none" else 0},
                                           t, nbytes=WORKING_SET if cold != "none" else None,
                                           provider="triton (floor probe)", includes=what))
    # a check that the wave read what it should (not a timing)
    wave(xs[0][0])
    torch.cuda.synchronize()
    ref = xs[0][0].view(-1)[: per_prog * sms].reshape(-1)
    if abs(float(part.sum()) - float(ref.sum())) > 1e-4 * float(ref.abs().sum()):
        raise RuntimeError("floor probe: the DRAM wave kernel's partials do not sum to the buffer's sum")
    return res
