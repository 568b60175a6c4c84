"""The torch-only (foreign) decode stack's attention on the CPU: both paths equal SDPA's own
grouped-query attention (no GPU needed: the helper is plain torch)."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.mark.parametrize("q", [1, 4])
def test_attention_matches_sdpa_gqa(q):
    C, hq, hkv, D, L = 2, 8, 2, 16, 10
    S = L + q
    g = torch.Generator().manual_seed(q)
    qh = torch.randn(C, q, hq, D, generator=g)
    k, v = torch.randn(C, hkv, S, D, generator=g), torch.randn(C, hkv, S, D, generator=g)
    from perfmodel.measure.ops import sdpa_attend, verify_mask

    mask = verify_mask(q, L)
    got = sdpa_attend(qh, k, v, mask)
    ref = F.scaled_dot_product_attention(qh.transpose(1, 2), k, v, attn_mask=mask, enable_gqa=True)
    ref = ref.transpose(1, 2).reshape(C * q, hq * D)
    assert got.shape == (C * q, hq * D)
    assert torch.allclose(got, ref, atol=1e-5), f"{q=} max diff {(got - ref).abs().max():.2e}"


def test_verify_mask_is_bottom_right_causal():
    """Row i of q new tokens sees the whole prefix and new tokens 0..i; q = 1 needs no mask."""
    from perfmodel.measure.ops import verify_mask

    L, q = 5, 3
    m = verify_mask(q, L)
    assert m[0].tolist() == [True] * (L + 1) + [False] * (q - 1)
    assert m[1].tolist() == [True] * (L + 2) + [False]
    assert m[-1].all() and verify_mask(1, L) is None


def test_torch_kernel_set_small_ops_match_their_references():
    """The kernel set "torch" (measure/ops.py torch_*): the same results as perfmodel's kernels'
    torch references, so the two sets time the same arithmetic."""
    from perfmodel.kernels.rmsnorm import add_rmsnorm_reference, rmsnorm_reference
    from perfmodel.measure.ops import torch_add_rmsnorm, torch_rmsnorm, torch_rope, torch_router_topk

    g = torch.Generator().manual_seed(0)
    x, r, w = torch.randn(3, 64, generator=g), torch.randn(3, 64, generator=g), torch.randn(64, generator=g)
    assert torch.allclose(torch_rmsnorm(x, w), rmsnorm_reference(x, w), atol=1e-5)
    n, s = torch_add_rmsnorm(x, r, w)
    n_ref, s_ref = add_rmsnorm_reference(x, r, w)
    assert torch.allclose(n, n_ref, atol=1e-5) and torch.allclose(s, s_ref)
    # rotate-half RoPE is a rotation of each (i, i + D/2) pair by its angle
    t, ang = torch.randn(2, 4, 8, generator=g), torch.rand(2, 1, 4, generator=g)
    cos, sin = ang.cos().repeat(1, 1, 2), ang.sin().repeat(1, 1, 2)
    z = torch.complex(t[..., :4], t[..., 4:]) * torch.polar(torch.ones_like(ang), ang)
    assert torch.allclose(torch_rope(t, cos, sin), torch.cat((z.real, z.imag), -1), atol=1e-6)
    logits = torch.randn(5, 16, generator=g)
    wts, ids = torch_router_topk(logits, 4)
    p = torch.softmax(logits, -1)
    assert torch.equal(ids, p.topk(4, -1).indices)
    assert torch.allclose(wts.sum(-1), torch.ones(5)) and torch.allclose(wts, p.gather(1, ids) / p.gather(1, ids).sum(-1, keepdim=True))
