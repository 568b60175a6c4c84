"""The torch-only (foreign) decode stack's attention on the CPU: both paths equal SDPA's own
grouped-query attention (no GPU needed: the helper is plain torch)."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _stack(hkv):
    from perfmodel.measure.foreign import TorchStack

    t = TorchStack.__new__(TorchStack)  # no weights: only the attention helper is used
    t.hkv = hkv
    return t


@pytest.mark.parametrize("q", [1, 4])
def test_attention_matches_sdpa_gqa(q):
    C, hq, hkv, D, L = 2, 8, 2, 16, 10
    S = L + q
    g = torch.Generator().manual_seed(q)
    qh = torch.randn(C, q, hq, D, generator=g)
    k, v = torch.randn(C, hkv, S, D, generator=g), torch.randn(C, hkv, S, D, generator=g)
    from perfmodel.measure.foreign import verify_mask

    mask = verify_mask(q, L)
    got = _stack(hkv)._attend(qh, k, v, mask)
    ref = F.scaled_dot_product_attention(qh.transpose(1, 2), k, v, attn_mask=mask, enable_gqa=True)
    ref = ref.transpose(1, 2).reshape(C * q, hq * D)
    assert got.shape == (C * q, hq * D)
    assert torch.allclose(got, ref, atol=1e-5), f"{q=} max diff {(got - ref).abs().max():.2e}"


def test_verify_mask_is_bottom_right_causal():
    """Row i of q new tokens sees the whole prefix and new tokens 0..i; q = 1 needs no mask."""
    from perfmodel.measure.foreign import verify_mask

    L, q = 5, 3
    m = verify_mask(q, L)
    assert m[0].tolist() == [True] * (L + 1) + [False] * (q - 1)
    assert m[1].tolist() == [True] * (L + 2) + [False]
    assert m[-1].all() and verify_mask(1, L) is None
