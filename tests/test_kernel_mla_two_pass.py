"""The two-pass MLA decode kernels against the torch reference (CPU interpreter at small sizes;
the same cases on a GPU), and its plan's arithmetic."""
import pytest
import torch

from perfmodel.kernels._testing import use_interpreter_if_no_gpu

use_interpreter_if_no_gpu()

from perfmodel.kernels._testing import calc_diff  # noqa: E402
from perfmodel.kernels.mla_two_pass import mla_two_pass, two_pass_plan  # noqa: E402
from perfmodel.kernels.tree_attention import tree_attention_mla_reference  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _tree_mask(C, Q, seed=0):
    g = torch.Generator().manual_seed(seed)
    m = torch.zeros(C, Q, Q, dtype=torch.bool)
    for c in range(C):
        for i in range(Q):
            m[c, i, i] = True
            if i:
                m[c, i] |= m[c, int(torch.randint(0, i, (1,), generator=g))]
    return m.to(DEV)


@pytest.mark.parametrize("C,Q,H,L,kw", [
    (1, 1, 64, 200, {}),                       # decode, 64 heads: one row block, 4 tiles
    (1, 1, 64, 200, {"num_splits": 2, "block_n": 256}),
    (2, 3, 8, 100, {"num_splits": 3}),         # tree verify: 24 rows in a 64-row block, tree tiles
    (1, 2, 64, 130, {"block_n": 64}),          # 128 rows: two row blocks
])
def test_two_pass_matches_the_reference(C, Q, H, L, kw):
    torch.manual_seed(C * 100 + Q * 10 + H)
    S = L + Q
    dt = torch.bfloat16
    ql, qr = torch.randn(C, Q, H, 512, device=DEV, dtype=dt), torch.randn(C, Q, H, 64, device=DEV, dtype=dt)
    ckv, kpe = torch.randn(C, S, 512, device=DEV, dtype=dt), torch.randn(C, S, 64, device=DEV, dtype=dt)
    mask = _tree_mask(C, Q, seed=C + Q)
    sm = 1.0 / 192 ** 0.5
    out = mla_two_pass(ql, qr, ckv, kpe, mask, sm, **kw)
    ref = tree_attention_mla_reference(ql, qr, ckv, kpe, mask, sm)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert calc_diff(out.float(), ref.float()) < 2e-4


def test_two_pass_plan_fills_the_gpu_and_covers_every_tile():
    """64 heads, C=1, L=8192: 129 tiles of 64 positions, 4 column blocks of 128, about one
    program per SM: 33 splits of 4 tiles (132 programs). Worked by hand."""
    d = two_pass_plan(1, 64, 8193, 512, 132)
    assert (d["row_blocks"], d["n_tiles"], d["col_blocks"]) == (1, 129, 4)
    assert (d["nsplit"], d["tiles_per_split"]) == (33, 4)
    assert d["nsplit"] * d["tiles_per_split"] >= d["n_tiles"] > (d["nsplit"] - 1) * d["tiles_per_split"]
    with pytest.raises(ValueError):
        two_pass_plan(1, 64, 8193, 512, 132, block_n=96)
