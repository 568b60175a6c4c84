"""DDTree draft-tree building (Ringel & Romano, arXiv 2604.12989; liranringel/ddtree
`build_ddtree_tree`). See /work/shared/facts/models-specdec.md §3.

Given per-depth draft distributions q_1..q_D (a factorised surrogate) and a node budget B,
the tree is the B highest-scoring token prefixes, score = sum_d log q_d(token_d). Scores
fall along a path, so the top-B set is ancestor-closed.

Conventions (both builders): index 0 is the root (the previous bonus token, not known to
the builder: token -1, parent -1, depth 0, rank -1, score 0). Nodes follow in pop order
(score descending; ties -> shallower first). `ranks` is the node's rank among the top-K
tokens of its depth. When fewer than B nodes exist (sum_d K^d < B with K = min(B, V)), the
CPU tree is shorter, and the GPU batch is padded with token -1, parent -1, depth -1,
score -inf, and `num_nodes` gives the real count (root included).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "DDTree",
    "DDTreeBatch",
    "build_ddtree_cpu",
    "build_ddtree_cpu_batch",
    "build_ddtree_gpu",
    "ancestor_mask_from_parents",
    "token_paths",
]


@dataclass
class DDTree:
    tokens: np.ndarray  # [n+1] int64
    parents: np.ndarray  # [n+1] int64, root -1
    depths: np.ndarray  # [n+1] int64
    ranks: np.ndarray  # [n+1] int64, root -1
    scores: np.ndarray  # [n+1] float64, cumulative log-prob


@dataclass
class DDTreeBatch:
    tokens: torch.Tensor  # [C, B+1] int64
    parents: torch.Tensor  # [C, B+1] int64
    depths: torch.Tensor  # [C, B+1] int64
    ranks: torch.Tensor  # [C, B+1] int64
    scores: torch.Tensor  # [C, B+1] float32
    ancestor_mask: torch.Tensor  # [C, B+1, B+1] bool, ancestor-or-self
    position_ids: torch.Tensor  # [C, B+1] int64 (= depth; add the sequence start outside)
    num_nodes: torch.Tensor  # [C] int64, root included


# ------------------------------------------------------------------------------ CPU reference
def build_ddtree_cpu(logprobs: np.ndarray, budget: int) -> DDTree:
    """The reference algorithm: numpy top-K per depth, then heapq best-first search.

    logprobs [D, V] (log-softmaxed draft outputs for depths 1..D). O(D*V + B log B)."""
    D, V = logprobs.shape
    K = min(budget, V)
    top_ids = np.argsort(-logprobs, axis=1, kind="stable")[:, :K]
    lp = np.take_along_axis(logprobs, top_ids, axis=1).astype(np.float64)
    tokens, parents, depths, ranks, scores = [-1], [-1], [0], [-1], [0.0]
    # heap entries: (-logw, depth, rank, parent index); depth/rank break exact ties
    heap = [(-lp[0, 0], 1, 0, 0)]
    while heap and len(tokens) - 1 < budget:
        neg_w, d, r, parent = heapq.heappop(heap)
        logw = -neg_w
        idx = len(tokens)
        tokens.append(int(top_ids[d - 1, r]))
        parents.append(parent)
        depths.append(d)
        ranks.append(r)
        scores.append(logw)
        if r + 1 < K:  # next sibling: same parent, next rank at this depth
            heapq.heappush(heap, (-(logw - lp[d - 1, r] + lp[d - 1, r + 1]), d, r + 1, parent))
        if d < D:  # first child: best token at the next depth
            heapq.heappush(heap, (-(logw + lp[d, 0]), d + 1, 0, idx))
    return DDTree(np.array(tokens, dtype=np.int64), np.array(parents, dtype=np.int64),
                  np.array(depths, dtype=np.int64), np.array(ranks, dtype=np.int64),
                  np.array(scores, dtype=np.float64))


def build_ddtree_cpu_batch(logprobs: np.ndarray, budget: int) -> list[DDTree]:
    return [build_ddtree_cpu(lp, budget) for lp in logprobs]


# ------------------------------------------------------------------------------ device builder
def ancestor_mask_from_parents(parents: torch.Tensor, max_depth: int | None = None) -> torch.Tensor:
    """parents [C, N] (root/padding -1) -> bool [C, N, N], mask[c, i, j] = j is i or an
    ancestor of i.

    With max_depth: reachability by repeated squaring of (I + parent matrix), so
    ceil(log2(max_depth + 1)) batched matmuls (tensor cores on CUDA) instead of one
    walk step per level; no host sync, safe under graph capture. Without it: walks up one
    level per step until every walk ends (one host sync per level)."""
    C, N = parents.shape
    dev = parents.device
    if max_depth is not None:
        dt = torch.bfloat16 if parents.is_cuda else torch.float32  # 0/1 entries; only > 0 matters
        idx = torch.where(parents >= 0, parents, N)
        m = torch.zeros((C, N, N + 1), dtype=dt, device=dev).scatter_(2, idx[..., None], 1.0)[:, :, :N]
        m = m + torch.eye(N, dtype=dt, device=dev)
        reach = 1
        while reach < max_depth:
            m = (torch.bmm(m, m) > 0).to(dt)
            reach *= 2
        return m > 0
    mask = torch.eye(N, N + 1, dtype=torch.bool, device=dev).expand(C, N, N + 1).clone()  # column N: sink
    cur = parents.clone()
    while bool((cur >= 0).any()):
        idx = torch.where(cur >= 0, cur, N)
        mask.scatter_(2, idx[..., None], True)
        cur = torch.where(cur >= 0, torch.gather(parents, 1, cur.clamp_min(0)), cur)
    return mask[:, :, :N].contiguous()


def build_ddtree_gpu(logits: torch.Tensor, budget: int) -> DDTreeBatch:
    """Vectorised over C, no per-node Python loop (loops over the D depths only); static
    shapes and no host sync, so a serving engine can replay it from a CUDA graph.

    1. log_softmax + topk(K = min(B, V)) per depth.
    2. Level-wise beam: the top-B nodes of depth d are among (top-B of depth d-1) x (top-K
       ranks at depth d) because a child scores below its parent; keep top-B per level.
       Both lists are sorted, so the pair (p, r) is beaten by every (p' <= p, r' <= r):
       only pairs with (p+1)(r+1) <= n can be among the top n (about n ln n of n*K).
    3. Global top-B over all <= D*B candidates by score (stable: ties -> shallower first),
       which is ancestor-closed; map parents to output positions.
    """
    C, D, V = logits.shape
    B = budget
    dev = logits.device
    K = min(B, V)
    # log_softmax is monotone: take the top-K of the raw logits and subtract one logsumexp
    # per row, instead of materialising an fp32 [C, D, V] log_softmax (1.3 GB at C=128 for
    # Kimi's vocabulary) and sorting that.
    top_vals, top_ids = torch.topk(logits, K, dim=-1)  # [C, D, K], sorted descending
    work_dtype = torch.promote_types(logits.dtype, torch.float32)  # fp64 stays fp64 (tests)
    top_lp = top_vals.to(work_dtype) - row_logsumexp(logits).to(work_dtype)[..., None]

    # Level sizes and candidate pairs are known without the data; levels that share a pair
    # list (all of them once the beam is full) gather their child log-probs in one op and
    # map winners back to (parent, rank) in one op after the loop: fewer kernels per level.
    n_lvl, pairs = [K], [None]
    for d in range(1, D):
        n_lvl.append(min(B, n_lvl[-1] * K))
        pairs.append(_beam_pairs(n_lvl[d - 1], K, n_lvl[d], dev))
    groups: dict[int, list[int]] = {}
    for d in range(1, D):
        groups.setdefault(id(pairs[d][0]), []).append(d)
    child_lp = {}
    for ds in groups.values():  # each group is a run of consecutive levels (n_lvl only grows)
        assert ds == list(range(ds[0], ds[-1] + 1))
        # slices and device index tensors only: a Python list index would be copied from the
        # host, which a CUDA-graph capture forbids
        g = top_lp[:, ds[0] : ds[-1] + 1][:, :, pairs[ds[0]][1]]  # [C, len(ds), n_pairs]
        child_lp.update({d: g[:, i] for i, d in enumerate(ds)})

    lvl_scores, win = [top_lp[:, 0]], {}
    prev = top_lp[:, 0]  # [C, n_prev]; level 1 has K <= B nodes
    for d in range(1, D):
        cand = prev[:, pairs[d][0]] + child_lp[d]  # [C, ~n ln n]
        s, j = torch.topk(cand, n_lvl[d], dim=1)  # sorted; ties -> arbitrary but parents kept
        lvl_scores.append(s)
        win[d] = j
        prev = s
    lvl_parent, lvl_rank = [None] * D, [torch.arange(K, device=dev).expand(C, K)] + [None] * (D - 1)
    for ds in groups.values():
        pp, rr = pairs[ds[0]]
        J = torch.stack([win[d] for d in ds], 1)
        par, rank = pp[J], rr[J]
        for i, d in enumerate(ds):
            lvl_parent[d], lvl_rank[d] = par[:, i], rank[:, i]

    sizes = [s.shape[1] for s in lvl_scores]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    total = offsets[-1]
    all_scores = torch.cat(lvl_scores, dim=1)  # [C, total], in depth order
    all_depth = torch.cat([torch.full((sz,), d + 1, device=dev) for d, sz in enumerate(sizes)])
    all_rank = torch.cat(lvl_rank, dim=1)
    all_parent = torch.cat(  # global candidate id of the parent; -1 for depth 1 (root)
        [torch.full((C, sizes[0]), -1, device=dev, dtype=torch.long)]
        + [lvl_parent[d] + offsets[d - 1] for d in range(1, D)], dim=1)
    all_tokens = torch.cat(
        [torch.gather(top_ids[:, d], 1, lvl_rank[d]) for d in range(D)], dim=1)

    n_sel = min(B, total)
    order = torch.sort(all_scores, dim=1, descending=True, stable=True).indices[:, :n_sel]
    pos = torch.full((C, total), -1, dtype=torch.long, device=dev)
    pos.scatter_(1, order, torch.arange(1, n_sel + 1, device=dev).expand(C, n_sel))

    par_g = torch.gather(all_parent, 1, order)
    par_out = torch.where(par_g >= 0, torch.gather(pos, 1, par_g.clamp_min(0)), torch.zeros_like(par_g))

    def with_root(x, root_val, pad_val):
        out = torch.full((C, B + 1), pad_val, dtype=x.dtype, device=dev)
        out[:, 0] = root_val
        out[:, 1 : n_sel + 1] = x
        return out

    tokens = with_root(torch.gather(all_tokens, 1, order), -1, -1)
    parents = with_root(par_out, -1, -1)
    depths = with_root(all_depth[order], 0, -1)
    ranks = with_root(torch.gather(all_rank, 1, order), -1, -1)
    scores = with_root(torch.gather(all_scores, 1, order), 0.0, float("-inf"))
    mask = ancestor_mask_from_parents(parents, max_depth=D)
    num = torch.full((C,), n_sel + 1, dtype=torch.long, device=dev)
    return DDTreeBatch(tokens, parents, depths, ranks, scores, mask, depths.clamp_min(0), num)


_PAIRS: dict = {}


def _beam_pairs(n_prev: int, K: int, n: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(parent rank p, child rank r) pairs with (p+1)(r+1) <= n, cached per shape and device
    (built on the first, uncaptured call: a CUDA-graph replay then copies nothing)."""
    key = (n_prev, K, n, str(device))
    if key not in _PAIRS:
        p = np.repeat(np.arange(n_prev), K)
        r = np.tile(np.arange(K), n_prev)
        keep = (p + 1) * (r + 1) <= n
        _PAIRS[key] = (torch.as_tensor(p[keep], device=device), torch.as_tensor(r[keep], device=device))
    return _PAIRS[key]


def token_paths(tokens, parents, n: int | None = None) -> set[tuple[int, ...]]:
    """Set of root->node token paths (root excluded) of one tree; for comparing builders."""
    tokens = np.asarray(tokens)
    parents = np.asarray(parents)
    n = len(tokens) if n is None else n
    paths: dict[int, tuple[int, ...]] = {0: ()}
    for i in range(1, n):
        paths[i] = paths[int(parents[i])] + (int(tokens[i]),)
    return set(paths[i] for i in range(1, n))


def row_logsumexp(x: torch.Tensor) -> torch.Tensor:
    """logsumexp over the last dim in fp32 (fp64 for fp64 input), reading x once: a Triton
    row reduction on CUDA, torch elsewhere."""
    if not x.is_cuda or x.dtype == torch.float64:
        return torch.logsumexp(x.to(torch.promote_types(x.dtype, torch.float32)), dim=-1)
    rows = x.reshape(-1, x.shape[-1])
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty(rows.shape[0], dtype=torch.float32, device=x.device)
    _lse_kernel()[(rows.shape[0],)](rows, out, rows.shape[1], rows.stride(0), BLOCK=4096, num_warps=8)
    return out.reshape(x.shape[:-1])


_LSE = None


def _lse_kernel():
    global _LSE
    if _LSE is None:
        import triton
        import triton.language as tl

        @triton.jit
        def _row_lse(x_ptr, out_ptr, V, stride_r, BLOCK: tl.constexpr):
            r = tl.program_id(0).to(tl.int64)
            offs = tl.arange(0, BLOCK)
            m = tl.full((BLOCK,), float("-inf"), tl.float32)
            acc = tl.zeros((BLOCK,), tl.float32)
            for v0 in range(0, V, BLOCK):  # online max / sum per lane
                x = tl.load(x_ptr + r * stride_r + v0 + offs, mask=v0 + offs < V, other=float("-inf")).to(tl.float32)
                m_new = tl.maximum(m, x)
                acc = acc * tl.exp(m - m_new) + tl.exp(x - m_new)
                acc = tl.where(m_new == float("-inf"), 0.0, acc)
                m = m_new
            mx = tl.max(m, axis=0)
            tot = tl.sum(acc * tl.exp(m - mx), axis=0)
            tl.store(out_ptr + r, mx + tl.log(tot))

        _LSE = _row_lse
    return _LSE
