"""RMSNorm (+ fused residual add), RoPE and the router top-k against their torch
references (TRITON_INTERPRET=1 on the CPU)."""
import pytest
import torch

from perfmodel.kernels._testing import use_interpreter_if_no_gpu

use_interpreter_if_no_gpu()

from perfmodel.kernels import rmsnorm as rn  # noqa: E402
from perfmodel.kernels import rope as rp  # noqa: E402
from perfmodel.kernels import router_topk as rt  # noqa: E402
from perfmodel.kernels._testing import assert_close  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("T,H", [(1, 64), (3, 100), (5, 512)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rmsnorm_and_fused_add(T, H, dtype):
    g = torch.Generator().manual_seed(T * H)
    x, r = (torch.randn(T, H, generator=g) * 3).to(DEV, dtype), torch.randn(T, H, generator=g).to(DEV, dtype)
    w = (torch.rand(H, generator=g) + 0.5).to(DEV, dtype)
    assert_close(rn.rmsnorm(x, w), rn.rmsnorm_reference(x, w), dtype, f"rmsnorm {T=} {H=}")
    out, s = rn.add_rmsnorm(x, r, w)
    ref_out, ref_s = rn.add_rmsnorm_reference(x, r, w)
    assert_close(s, ref_s, dtype, f"add {T=} {H=}")
    assert_close(out, ref_out, dtype, f"add_rmsnorm {T=} {H=}")
    assert torch.equal(x, x.clone()) and s.data_ptr() != x.data_ptr()  # out of place


def test_rmsnorm_out_strided_and_3d_inputs():
    """The eager fast path (contiguous inputs, caller-provided out) and the general path
    (a strided view, a 3-D input, a misaligned row) give the reference's values."""
    g = torch.Generator().manual_seed(7)
    dtype = torch.bfloat16
    x3 = (torch.randn(2, 3, 96, generator=g) * 2).to(DEV, dtype)
    w = (torch.rand(96, generator=g) + 0.5).to(DEV, dtype)
    out = torch.full_like(x3, float("nan"))
    got = rn.rmsnorm(x3, w, out=out)
    assert got.data_ptr() == out.data_ptr()
    assert_close(out, rn.rmsnorm_reference(x3, w), dtype, "rmsnorm out=")
    wide = torch.randn(4, 200, generator=g).to(DEV, dtype)
    view = wide[:, 8:104]  # rows 200 apart, not contiguous
    assert_close(rn.rmsnorm(view, w), rn.rmsnorm_reference(view, w), dtype, "strided rows")
    flat = torch.randn(3 * 96 + 1, generator=g).to(DEV, dtype)
    odd = flat[1:].view(3, 96)  # contiguous, 2 bytes off 16-byte alignment
    assert_close(rn.rmsnorm(odd, w), rn.rmsnorm_reference(odd, w), dtype, "misaligned")
    with pytest.raises(ValueError, match="out:"):
        rn.rmsnorm(x3, w, out=torch.empty(2, 3, 95, dtype=dtype, device=DEV))


@pytest.mark.parametrize("C,q,nh", [(1, 1, 8), (2, 3, 5), (4, 9, 16)])
def test_rope_on_strided_q_view(C, q, nh):
    g = torch.Generator().manual_seed(C * q * nh)
    qf = torch.randn(C, q, nh, 192, generator=g).to(DEV, torch.bfloat16)
    ang = torch.rand(C, q, 1, 32, generator=g) * 6.28
    cos, sin = ang.cos().to(DEV, torch.bfloat16), ang.sin().to(DEV, torch.bfloat16)
    x = qf[..., 128:]  # the rotary slice of q, as the MLA stack passes it
    assert_close(rp.rope(x, cos, sin), rp.rope_reference(x, cos, sin), torch.bfloat16, f"rope {C=} {q=} {nh=}")


@pytest.mark.parametrize("T,E,k", [(1, 384, 8), (7, 64, 4), (3, 100, 6)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_router_topk(T, E, k, dtype):
    g = torch.Generator().manual_seed(T * E + k)
    logits = torch.randn(T, E, generator=g).to(DEV, dtype)
    ids, w = rt.router_topk(logits, k)
    rids, rw = rt.router_topk_reference(logits, k)
    assert ids.dtype == torch.int32 and ids.shape == (T, k)
    assert all(len(set(row)) == k for row in ids.cpu().tolist())
    scores = logits.float().sigmoid()
    # same selected scores in the same order (bf16 logits tie often: ids may differ on ties)
    torch.testing.assert_close(torch.gather(scores, 1, ids.long()).cpu(), torch.gather(scores, 1, rids.long()).cpu())
    torch.testing.assert_close(w.cpu(), rw.cpu(), rtol=1e-5, atol=1e-6)
    if dtype == torch.float32:  # no ties: the very same experts
        assert torch.equal(ids.cpu(), rids.cpu())
