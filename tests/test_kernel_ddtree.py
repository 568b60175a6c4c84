"""DDTree builders: the vectorised (device) builder selects the same nodes as the heap reference."""
import numpy as np
import pytest
import torch

from perfmodel.kernels import ddtree as dd


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


def test_row_logsumexp_triton_matches_torch():
    """The Triton row reduction behind build_ddtree_gpu (interpreter on the CPU)."""
    from perfmodel.kernels import ddtree
    from perfmodel.kernels._testing import use_interpreter_if_no_gpu

    use_interpreter_if_no_gpu()

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    x = (torch.randn(3, 10000, generator=torch.Generator().manual_seed(1)) * 3).to(dev)
    out = torch.empty(3, device=dev)
    ddtree._lse_kernel()[(3,)](x, out, 10000, x.stride(0), BLOCK=4096)
    assert torch.allclose(out, torch.logsumexp(x, -1), atol=1e-4), (out, torch.logsumexp(x, -1))
