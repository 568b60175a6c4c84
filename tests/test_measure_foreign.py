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


# ------------------------------------------------------------------ prefill and mixed steps
TINY = dict(name="tiny", layers=2, H=64, hq=4, hkv=2, D=16, vocab=97, eps=1e-6, I=96)
TINY_MOE = dict(TINY, name="tiny-moe", E=8, k=2, I=32)


def _stack(shapes):
    from perfmodel.measure.foreign import TorchStack

    return TorchStack(shapes["name"], shapes=shapes, device="cpu", dtype=torch.float32)


def _sub_state(st, i):
    """Group i of a batch state as a state of its own (the same hidden states, caches copied)."""

    G = st["groups"][i]
    g, (a, b) = G["g"], G["rows"]
    logit = torch.arange(g.q - 1, g.n * g.q, g.q) if g.kind == "prefill" else None
    return dict(groups=[dict(G, rows=(0, b - a), k=[k.clone() for k in G["k"]], v=[v.clone() for v in G["v"]])],
                x=st["x"][a:b], cos=st["cos"][a:b], sin=st["sin"][a:b], logit_rows=logit), g


@pytest.mark.parametrize("shapes", [TINY, TINY_MOE], ids=["dense", "moe"])
def test_mixed_step_is_its_groups_side_by_side(shapes):
    """A prefill chunk and a decode group in one pass give each group's own result: the GEMMs,
    norms and experts act per token, attention per group over its own cache."""
    from perfmodel.measure.foreign import BatchShape

    torch.manual_seed(0)
    stack = _stack(shapes)
    b = BatchShape(prefill_n=2, prefill_T=5, prefill_P=3, decode_n=3, decode_ctx=7)
    st = stack.batch_state(b.groups())
    parts = [_sub_state(st, i) for i in range(2)]
    got = stack.step(st)
    assert got.shape == (2 + 3, 2)  # logits for each prompt's last token and each decode token
    want = torch.cat([stack.step(s) for s, _ in parts])
    assert torch.allclose(got[:, 0], want[:, 0], atol=1e-4) and torch.equal(got[:, 1], want[:, 1])


@pytest.mark.parametrize("shapes", [TINY, TINY_MOE], ids=["dense", "moe"])
def test_chunked_prefill_equals_the_whole_prompt(shapes):
    """A prompt run as two chunks, the second after the first's cache, ends where the whole prompt
    does: the cache write lands at each token's position, rope uses the positions after the
    prefix, and the chunk's attention is causal over prefix and chunk (bottom-right)."""
    from perfmodel.measure.foreign import Group

    torch.manual_seed(1)
    stack = _stack(shapes)
    T, T1 = 12, 7
    whole = stack.batch_state([Group("prefill", 1, T, 0)])
    first = stack.batch_state([Group("prefill", 1, T1, 0)])
    second = stack.batch_state([Group("prefill", 1, T - T1, T1)])
    first["x"], second["x"] = whole["x"][:T1], whole["x"][T1:]
    stack.step(first)
    for li in range(len(stack.layers)):
        for kv in ("k", "v"):
            second["groups"][0][kv][li][:, :, :T1] = first["groups"][0][kv][li]
    a, b = stack.step(whole), stack.step(second)
    assert torch.allclose(a[:, 0], b[:, 0], atol=1e-4) and torch.equal(a[:, 1], b[:, 1])
    # and the cache the chunks left equals the whole prompt's, layer by layer
    for li in range(len(stack.layers)):
        assert torch.allclose(whole["groups"][0]["k"][li], second["groups"][0]["k"][li], atol=1e-5)


def test_decode_state_is_a_one_group_batch():
    """The decode and verify points keep their shape: every token's logits, a verify mask for q > 1."""
    torch.manual_seed(2)
    stack = _stack(TINY)
    st = stack.state(3, 4, 9)
    assert (st["C"], st["q"], st["L"]) == (3, 4, 9) and st["logit_rows"] is None
    assert st["groups"][0]["mask"].shape == (4, 13) and st["groups"][0]["k"][0].shape == (3, 2, 13, 16)
    assert stack.step(st).shape == (12, 2)
    assert stack.state(2, 1, 5)["groups"][0]["mask"] is None


def test_batch_points_and_their_notation():
    from perfmodel.measure.foreign import BatchShape, batch_points

    b = BatchShape(1, 2048, 6144, 32, 4096)
    assert b.kind == "mixed" and b.notation() == "--prefill 1x2048@6144 --decode 32@4096"
    assert BatchShape(4, 1024).kind == "prefill" and BatchShape(4, 1024).notation() == "--prefill 4x1024@0"
    pts = batch_points(False)
    assert {p.kind for p in pts} == {"prefill", "mixed"} and any(p.prefill_P for p in pts)
    assert max(p.prefill_T for p in pts) >= 8192 and len(batch_points(True)) < len(pts)


def test_a_point_that_does_not_fit_is_skipped_and_logged(monkeypatch):
    """measure_stack and measure_batches time every case that fits; a case whose state runs out
    of memory is logged and left out, the others still timed, each row carrying its shape."""
    from perfmodel.measure import foreign
    from perfmodel.measure.timing import Timing

    class Stack:
        s, tp, layers = {"name": "tiny"}, 1, [0, 0]

        def state(self, C, q, L):
            if C == 32:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory")
            return (C, q, L)

        def batch_state(self, groups):
            if len(groups) > 1:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory")
            return groups

        def step(self, st):
            return st

    seen = []
    monkeypatch.setattr(foreign, "time_fn", lambda fn, **kw: (seen.append(kw), fn(),
                                                              Timing([1.0], 1.0, 1.0, 1.0, "graph"))[2])
    logged = []
    rows = foreign.measure_stack(Stack(), [(1, 1, 128), (32, 1, 128), (8, 4, 256)], n_gpus=1, link="",
                                 fixed_samples=False, log=logged.append)
    assert [(r["shape"]["C"], r["shape"]["q"], r["shape"]["L"]) for r in rows] == [(1, 1, 128), (8, 4, 256)]
    assert logged == ["  foreign tiny C32 q1 L128: out of memory, skipped"]
    assert all(kw["graph"] for kw in seen)
    shapes = [b for b in foreign.batch_points(quick=True)]
    rows = foreign.measure_batches(Stack(), shapes, log=logged.append)
    assert {r["shape"]["batch"] for r in rows} == {b.notation() for b in shapes if len(b.groups()) == 1}
    assert any("out of memory" in m for m in logged[1:]) == any(len(b.groups()) > 1 for b in shapes)
    assert not seen[-1]["graph"]
