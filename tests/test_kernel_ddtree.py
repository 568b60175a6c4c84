"""DDTree builders: the vectorised (device) builders, torch and Triton (TRITON_INTERPRET=1 on
the CPU), select the same nodes as the heap reference; the Triton vocabulary top-k matches a
stable argsort."""
import numpy as np
import pytest
import torch

from perfmodel.kernels._testing import use_interpreter_if_no_gpu

use_interpreter_if_no_gpu()

from perfmodel.kernels import ddtree as dd  # noqa: E402
from perfmodel.kernels import ddtree_topk as tk  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _logprobs(C, D, V, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(C, D, V, generator=g, dtype=torch.float64) * 3
    return torch.log_softmax(logits, -1)


def _brute_mask(parents):
    n = len(parents)
    m = np.zeros((n, n), dtype=bool)
    for i in range(n):
        j = i
        while j >= 0:
            m[i, j] = True
            j = parents[j]
    return m


# (C, D, V, B): B < K; B > nodes at depth 1 (V < B); B >= D*K; more nodes requested than exist
# and a wider vocabulary
CASES = [(2, 4, 50, 8), (3, 6, 5, 20), (1, 3, 4, 12), (2, 3, 2, 30), (1, 16, 64, 64), (2, 1, 10, 4), (2, 5, 3000, 10)]


@pytest.mark.parametrize("C,D,V,B", CASES)
def test_gpu_builder_matches_cpu_reference(C, D, V, B):
    """The torch path (fp64 on the CPU): scores to 1e-9."""
    lp = _logprobs(C, D, V, seed=C * 1000 + D * 10 + V + B)
    cpu = dd.build_ddtree_cpu_batch(lp.numpy(), B)
    gpu = dd.build_ddtree_gpu(lp, B)
    assert gpu.tokens.shape == (C, B + 1) and gpu.ancestor_mask.shape == (C, B + 1, B + 1)
    for c in range(C):
        t = cpu[c]
        n = int(gpu.num_nodes[c])
        what = f"{C=} {D=} {V=} {B=} {c=}"
        assert n == len(t.tokens) == min(B, sum(min(B, V) ** d for d in range(1, D + 1))) + 1, what
        assert dd.token_paths(gpu.tokens[c], gpu.parents[c], n) == dd.token_paths(t.tokens, t.parents), what
        # pop order = score order; the CPU reference pops scores in non-increasing order
        assert np.all(np.diff(t.scores[1:]) <= 1e-12), what
        np.testing.assert_allclose(gpu.scores[c, 1:n].numpy(), t.scores[1:], rtol=0, atol=1e-9, err_msg=what)
        np.testing.assert_array_equal(gpu.depths[c, :n].numpy(), t.depths, err_msg=what)
        np.testing.assert_array_equal(gpu.position_ids[c, :n].numpy(), t.depths, err_msg=what)
        np.testing.assert_array_equal(gpu.ranks[c, :n].numpy(), t.ranks, err_msg=what)
        # the tree's scores are the path sums of the chosen tokens
        for i in range(1, n):
            j, s = i, 0.0
            while j > 0:
                s += float(lp[c, int(gpu.depths[c, j]) - 1, int(gpu.tokens[c, j])])
                j = int(gpu.parents[c, j])
            assert abs(s - float(gpu.scores[c, i])) < 1e-9, what
        np.testing.assert_array_equal(gpu.ancestor_mask[c, :n, :n].numpy(), _brute_mask(t.parents), err_msg=what)


def test_beam_pairs_keep_every_possible_top_n_pair():
    p, r = dd._beam_pairs(8, 8, 8, "cpu")
    pairs = set(zip(p.tolist(), r.tolist()))
    assert (0, 7) in pairs and (7, 0) in pairs and (1, 3) in pairs and (1, 4) not in pairs
    assert len(pairs) == sum(8 // (i + 1) for i in range(8))


def test_cpu_builder_known_tree():
    # depth 1: a=0.6, b=0.4; depth 2: a=0.9, b=0.1; budget 3 -> a, aa, b
    lp = np.log(np.array([[0.6, 0.4], [0.9, 0.1]]))
    t = dd.build_ddtree_cpu(lp, 3)
    assert t.tokens.tolist() == [-1, 0, 0, 1]
    assert t.parents.tolist() == [-1, 0, 1, 0]
    assert t.depths.tolist() == [0, 1, 2, 1]
    np.testing.assert_allclose(t.scores, [0, np.log(0.6), np.log(0.54), np.log(0.4)])


def test_ancestor_mask_from_parents():
    parents = torch.tensor([[-1, 0, 1, 0, 3, 2], [-1, 0, 0, 0, 1, -1]])
    m = dd.ancestor_mask_from_parents(parents)
    for c in range(2):
        np.testing.assert_array_equal(m[c].numpy(), _brute_mask(parents[c].tolist()))
    np.testing.assert_array_equal(dd.ancestor_mask_from_parents(parents, max_depth=3).numpy(), m.numpy())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_builder_on_cuda():
    lp = _logprobs(4, 15, 1000, seed=3)
    cpu = dd.build_ddtree_cpu_batch(lp.numpy(), 64)
    gpu = dd.build_ddtree_gpu(lp.cuda(), 64)
    for c in range(4):
        assert dd.token_paths(gpu.tokens[c].cpu(), gpu.parents[c].cpu()) == dd.token_paths(cpu[c].tokens, cpu[c].parents)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_builder_on_cuda_under_graph_replay():
    """The default CUDA path (Triton) at the served shape's depth, replayed from a CUDA graph."""
    C, D, V, B = 3, 15, 20000, 64
    logits = torch.randn(C, D, V, device="cuda", generator=torch.Generator("cuda").manual_seed(2)) * 3
    cpu = dd.build_ddtree_cpu_batch(torch.log_softmax(logits.double(), -1).cpu().numpy(), B)
    dd.build_ddtree_gpu(logits, B)  # first call: compiles, caches the pair table
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = dd.build_ddtree_gpu(logits, B)
    graph.replay()
    torch.cuda.synchronize()
    for c in range(C):
        np.testing.assert_array_equal(out.tokens[c].cpu().numpy(), cpu[c].tokens)
        np.testing.assert_array_equal(out.parents[c].cpu().numpy(), cpu[c].parents)
        np.testing.assert_allclose(out.scores[c].cpu().numpy(), cpu[c].scores, rtol=0, atol=1e-4)
        np.testing.assert_array_equal(out.ancestor_mask[c].cpu().numpy(), _brute_mask(cpu[c].parents))


def _stable_topk(x: torch.Tensor, k: int):
    """Reference: top-k of the rows by a stable argsort (ties -> lower index), as log-probs."""
    x64 = x.double().cpu()
    ids = torch.from_numpy(np.argsort(-x64.numpy(), axis=-1, kind="stable")[..., :k].copy())
    return torch.gather(x64, -1, ids) - torch.logsumexp(x64, -1, keepdim=True), ids


# (rows, V, k, chunk): one chunk; many chunks with fewer groups each than k (the merge must
# still find k); V not a multiple of the chunk or the group; k = V; k = 1; k not a power of 2
TOPK_CASES = [(3, 1000, 16, None), (2, 3000, 64, 256), (2, 2500, 100, 512), (3, 7, 7, None), (2, 1000, 1, None),
              (1, 3001, 33, 64)]


@pytest.mark.parametrize("R,V,k,chunk", TOPK_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_vocab_topk_matches_stable_argsort(R, V, k, chunk, dtype):
    g = torch.Generator().manual_seed(R * V + k)
    x = (torch.randn(R, V, generator=g) * 3).to(DEV, dtype)  # bf16: many exact ties
    lp, ids = tk.vocab_topk_logprobs(x, k, impl="triton", chunk=chunk)
    ref_lp, ref_ids = _stable_topk(x, k)
    assert lp.dtype == torch.float32 and ids.dtype == torch.int64 and lp.shape == (R, k)
    assert torch.equal(ids.cpu(), ref_ids), f"{R=} {V=} {k=} {chunk=} {dtype}"
    torch.testing.assert_close(lp.cpu().double(), ref_lp, rtol=0, atol=1e-5)


def test_triton_vocab_topk_ties_and_masked_vocab():
    """All-equal rows take the lowest ids; -inf (masked) logits rank last but are real."""
    x = torch.zeros(2, 300, device=DEV)
    x[1, 5:] = float("-inf")
    lp, ids = tk.vocab_topk_logprobs(x, 8, impl="triton", chunk=64)
    assert ids.tolist() == [list(range(8))] * 2
    np.testing.assert_allclose(lp[0].cpu().numpy(), -np.log(300), rtol=1e-6)
    np.testing.assert_allclose(lp[1, :5].cpu().numpy(), -np.log(5), rtol=1e-6)
    assert torch.isneginf(lp[1, 5:]).all()


def test_torch_vocab_topk_keeps_fp64():
    x = torch.randn(2, 3, 50, dtype=torch.float64)
    lp, ids = tk.vocab_topk_logprobs(x, 5)
    ref = torch.log_softmax(x, -1).topk(5, -1)
    assert lp.dtype == torch.float64 and lp.shape == (2, 3, 5)
    torch.testing.assert_close(lp, ref.values, rtol=0, atol=1e-12)
    assert torch.equal(ids, ref.indices)


# (C, D, V, B): B < K; V < B (levels grow K, K^2, ..); more nodes requested than exist; D = 1;
# B = 1; B not a power of two; several vocabulary chunks
# ((2, 3, 2, 30) also has V < B and a B not a power of two: the quick suite keeps both)
TRITON_CASES = [(2, 4, 50, 8), pytest.param(3, 6, 5, 20, marks=pytest.mark.slow), (2, 3, 2, 30), (2, 1, 10, 4), (1, 4, 100, 1),
                pytest.param(1, 7, 40, 24, marks=pytest.mark.slow), (1, 5, 3000, 12)]


@pytest.mark.parametrize("C,D,V,B", TRITON_CASES)
def test_triton_builder_matches_cpu_reference(C, D, V, B):
    """Random fp32 logits (no ties): the very same tree, in the same order, as the heap
    reference on the fp64 log-probs; fp32 scores."""
    g = torch.Generator().manual_seed(C * 1000 + D * 10 + V + B)
    logits = (torch.randn(C, D, V, generator=g) * 3).to(DEV)
    cpu = dd.build_ddtree_cpu_batch(torch.log_softmax(logits.double().cpu(), -1).numpy(), B)
    gpu = dd.build_ddtree_gpu(logits, B, impl="triton")
    assert gpu.tokens.shape == (C, B + 1) and gpu.ancestor_mask.shape == (C, B + 1, B + 1)
    assert gpu.scores.dtype == torch.float32 and gpu.ancestor_mask.dtype == torch.bool
    gpu = dd.DDTreeBatch(*(t.cpu() for t in (gpu.tokens, gpu.parents, gpu.depths, gpu.ranks, gpu.scores,
                                              gpu.ancestor_mask, gpu.position_ids, gpu.num_nodes)))
    for c in range(C):
        t = cpu[c]
        n = int(gpu.num_nodes[c])
        what = f"{C=} {D=} {V=} {B=} {c=}"
        assert n == len(t.tokens) == min(B, sum(min(B, V) ** d for d in range(1, D + 1))) + 1, what
        for name in ("tokens", "parents", "depths", "ranks"):
            np.testing.assert_array_equal(getattr(gpu, name)[c, :n].numpy(), getattr(t, name), err_msg=f"{name} {what}")
        np.testing.assert_array_equal(gpu.position_ids[c, :n].numpy(), t.depths, err_msg=what)
        np.testing.assert_allclose(gpu.scores[c, :n].numpy(), t.scores, rtol=0, atol=1e-4, err_msg=what)
        np.testing.assert_array_equal(gpu.ancestor_mask[c].numpy(), _brute_mask(gpu.parents[c].tolist()), err_msg=what)
        np.testing.assert_array_equal(gpu.ancestor_mask[c, :n, :n].numpy(), _brute_mask(t.parents), err_msg=what)
        # padding past the real nodes
        assert (gpu.tokens[c, n:] == -1).all() and (gpu.parents[c, n:] == -1).all() and (gpu.depths[c, n:] == -1).all()
        assert torch.isneginf(gpu.scores[c, n:]).all() and (gpu.position_ids[c, n:] == 0).all(), what


def test_triton_builder_bf16_ties_give_a_valid_tree():
    """bf16 logits tie often: the tree may break ties unlike the reference, but it has the
    reference's scores (as a multiset), is ancestor-closed, and scores are path sums."""
    C, D, V, B = 2, 4, 300, 16
    logits = (torch.randn(C, D, V, generator=torch.Generator().manual_seed(5)) * 3).to(DEV, torch.bfloat16)
    lp = torch.log_softmax(logits.double().cpu(), -1)
    cpu = dd.build_ddtree_cpu_batch(lp.numpy(), B)
    gpu = dd.build_ddtree_gpu(logits, B, impl="triton")
    for c in range(C):
        tok, par, dep = (x[c].cpu() for x in (gpu.tokens, gpu.parents, gpu.depths))
        np.testing.assert_allclose(gpu.scores[c].cpu().numpy(), cpu[c].scores, rtol=0, atol=1e-4)
        for i in range(1, B + 1):
            assert 0 <= par[i] < i and dep[i] == dep[par[i]] + 1
            s, j = 0.0, i
            while j > 0:
                s += float(lp[c, int(dep[j]) - 1, int(tok[j])])
                j = int(par[j])
            assert abs(s - float(gpu.scores[c, i])) < 1e-4


def test_triton_vocab_topk_beyond_register_selection_uses_torch():
    """k too large for the register-resident selection: same answer through torch.topk."""
    assert tk.topk_config(40000, 2048) is None and tk.topk_config(163840, 256) is not None
    x = torch.randn(2, 40000, generator=torch.Generator().manual_seed(1)).to(DEV)
    lp, ids = tk.vocab_topk_logprobs(x, 2048, impl="triton")
    ref_lp, ref_ids = _stable_topk(x, 2048)
    assert lp.dtype == torch.float32 and torch.equal(ids.cpu(), ref_ids)
    torch.testing.assert_close(lp.cpu().double(), ref_lp, rtol=0, atol=1e-5)
