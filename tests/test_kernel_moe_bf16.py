"""Fused bf16 MoE and the torch._grouped_mm baseline against the reference."""
import pytest
import torch

from perfmodel.kernels._testing import use_interpreter_if_no_gpu

use_interpreter_if_no_gpu()

from perfmodel.kernels import moe_bf16 as m  # noqa: E402
from perfmodel.kernels._testing import assert_close  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
SHAPES = [(1, 8, 64, 32, 2), (6, 5, 96, 48, 3), (17, 4, 80, 40, 2)]


def _inputs(T, E, H, I, k, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w13 = (torch.randn(E, 2 * I, H, generator=gen) / H**0.5).to(DEV, dtype)
    w2 = (torch.randn(E, H, I, generator=gen) / I**0.5).to(DEV, dtype)
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)]).to(DEV)
    tw = torch.rand(T, k, generator=gen).to(DEV)
    x = torch.randn(T, H, generator=gen).to(DEV, dtype)
    return x, w13, w2, ids, tw


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("T,E,H,I,k", SHAPES)
def test_fused_moe_bf16(T, E, H, I, k, dtype):
    x, w13, w2, ids, tw = _inputs(T, E, H, I, k, dtype, seed=T)
    out = m.fused_moe_bf16(x, w13, w2, ids, tw)
    ref = m.fused_moe_bf16_reference(x.float(), w13.float(), w2.float(), ids, tw)
    assert_close(out, ref, dtype, f"moe_bf16 {T=} {E=} {H=} {I=} {k=} {dtype=}")


def test_fused_moe_bf16_split_k():
    x, w13, w2, ids, tw = _inputs(5, 4, 64, 64, 2, torch.bfloat16)
    out = m.fused_moe_bf16(x, w13, w2, ids, tw, gate_up_config=dict(block_n=16, block_k=16, split_k=2),
                           down_config=dict(block_n=32, block_k=16, split_k=4))
    ref = m.fused_moe_bf16_reference(x.float(), w13.float(), w2.float(), ids, tw)
    assert_close(out, ref, torch.bfloat16, "moe_bf16 split_k T=5 E=4 H=64 I=64 k=2")


@pytest.mark.parametrize("T,E,H,I,k", SHAPES)
def test_grouped_mm_moe_torch(T, E, H, I, k):
    dtype = torch.bfloat16
    x, w13, w2, ids, tw = _inputs(T, E, H, I, k, dtype, seed=T + 1)
    try:
        out = m.grouped_mm_moe_torch(x, w13, w2, ids, tw)
    except (NotImplementedError, RuntimeError) as e:  # no _grouped_mm, or no kernel on this device
        pytest.skip(f"torch._grouped_mm unavailable here: {e}")
    ref = m.fused_moe_bf16_reference(x.float(), w13.float(), w2.float(), ids, tw)
    assert_close(out, ref, dtype, f"grouped_mm {T=} {E=} {H=} {I=} {k=}")


def test_bytes_and_flops():
    ids = torch.tensor([[3, 1]])
    assert m.bytes_moved(ids, 8, 64, 32) == 2 * 3 * 64 * 32 * 2 + 2 * 64 * 2
    assert m.flops(1, 2, 64, 32) == 6 * 2 * 64 * 32
