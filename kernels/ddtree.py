"""DDTree draft-tree building (Ringel & Romano, arXiv 2604.12989; liranringel/ddtree
`build_ddtree_tree`). See perfmodel/modelspecs/SOURCES.md §3.

Given per-depth draft distributions q_1..q_D (a factorised surrogate) and a node budget B,
the tree is the B highest-scoring token prefixes, score = sum_d log q_d(token_d). Scores
fall along a path, so the top-B set is ancestor-closed.

Conventions (both builders): index 0 is the root (the previous bonus token, not known to
the builder: token -1, parent -1, depth 0, rank -1, score 0). Nodes follow in pop order
(score descending; ties -> shallower first). `ranks` is the node's rank among the top-K
tokens of its depth. When fewer than B nodes exist (sum_d K^d < B with K = min(B, V)), the
CPU tree is shorter, and the GPU batch is padded with token -1, parent -1, depth -1,
score -inf, and `num_nodes` gives the real count (root included).

build_ddtree_gpu runs Triton kernels on CUDA (the vocabulary top-k in ddtree_topk.py, then
one tree program per sequence and an ancestor-mask kernel) and torch ops elsewhere.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import torch

from ._launch import cdiv, next_pow2

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


def build_ddtree_gpu(logits: torch.Tensor, budget: int, impl: str | None = None) -> DDTreeBatch:
    """The B highest-scoring nodes of all D depths, as the heap reference selects them, with
    static shapes and no host sync (a serving engine replays it from a CUDA graph).

    1. Top-K (K = min(B, V)) log-probs and token ids per depth (ddtree_topk: one read of
       the logits; log_softmax is monotone, so top-k of the logits minus the logsumexp).
    2. Level-wise beam: the top-B nodes of depth d are among (top-B of depth d-1) x (top-K
       ranks at depth d) because a child scores below its parent; keep top-B per level.
       Both lists are sorted, so the pair (p, r) is beaten by every (p' <= p, r' <= r):
       only pairs with (p+1)(r+1) <= n can be among the top n (about n ln n of n*K).
    3. Global top-B over all <= D*B candidates by score (stable: ties -> shallower first),
       which is ancestor-closed; map parents to output positions; ancestor mask.

    impl: "triton" (CUDA default for bf16/fp16/fp32: one program per sequence runs steps 2-3
    and a second kernel writes the mask; fp32 scores) or "torch" (CPU and fp64 default:
    a few torch ops per depth, scores in promote_types(dtype, fp32))."""
    if impl is None:
        impl = "triton" if logits.is_cuda and logits.dtype != torch.float64 else "torch"
    if impl == "triton":
        return _build_triton(logits, budget)
    assert impl == "torch", impl
    return _build_torch(logits, budget)


def _build_torch(logits: torch.Tensor, budget: int) -> DDTreeBatch:
    """build_ddtree_gpu with torch ops, vectorised over C (loops over the D depths only)."""
    from .ddtree_topk import vocab_topk_logprobs

    C, D, V = logits.shape
    B = budget
    dev = logits.device
    K = min(B, V)
    top_lp, top_ids = vocab_topk_logprobs(logits, K, impl="torch")  # [C, D, K], sorted descending

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


# ------------------------------------------------------------------------------ Triton builder
def _build_triton(logits: torch.Tensor, budget: int) -> DDTreeBatch:
    """build_ddtree_gpu with the Triton kernels: top-k (2 kernels), tree, ancestor mask."""
    from .ddtree_topk import vocab_topk_logprobs

    C, D, V = logits.shape
    B = budget
    dev = logits.device
    K = min(B, V)
    top_lp, top_ids = vocab_topk_logprobs(logits, K, impl="triton")  # [C, D, K] fp32 / int64
    pairs = _level_pairs(B, K, D, dev)
    NP = max(2, next_pow2(B))  # beam width padded (tl.topk(x, 1) is a scalar)
    N = B + 1
    tokens, parents, depths, ranks, positions = (torch.empty((C, N), dtype=torch.long, device=dev) for _ in range(5))
    scores = torch.empty((C, N), dtype=torch.float32, device=dev)
    num = torch.empty((C,), dtype=torch.long, device=dev)
    kern = _tree_kernels()
    # one program per sequence is latency-bound; H200, C = 8, D = 15: 42 / 89 / 239 us at
    # B = 64 / 128 / 256 with 4 / 16 / 16 warps (8 warps: 42 / 94 / 287). ddtree_topk's
    # threshold select in place of tl.topk was slower here, per depth (+60 us at B = 64)
    # and for the final top-B (+20 us) (evidence/kernel-defaults/ddtree-builder/)
    kern.tree[(C,)](top_lp, top_ids, pairs, tokens, parents, depths, ranks, scores, positions, num, D, K, B,
                    NP=NP, LOG_NP=NP.bit_length() - 1, DP=next_pow2(D), NPAIR=pairs.shape[-1],
                    num_warps=4 if pairs.shape[-1] <= 512 else 16)
    mask = torch.empty((C, N, N), dtype=torch.bool, device=dev)
    rows = 16
    kern.mask[(C, cdiv(N, rows))](parents, mask.view(torch.uint8), N, D, ROWS=rows,
                                  NQ=next_pow2(N), num_warps=4)
    return DDTreeBatch(tokens, parents, depths, ranks, scores, mask, positions, num)


_LEVEL_PAIRS: dict = {}


def _level_pairs(B: int, K: int, D: int, device) -> torch.Tensor:
    """int32 [2, D, NPAIR]: the candidate (parent rank, child rank) pairs of each depth
    d >= 1 (_beam_pairs for that level's sizes), padded with -1; NPAIR is a power of two
    >= the beam width. Cached per shape and device (built on the first, uncaptured call)."""
    key = (B, K, D, str(device))
    if key not in _LEVEL_PAIRS:
        n_lvl, lists = [K], [((), ())]
        for d in range(1, D):
            n_lvl.append(min(B, n_lvl[-1] * K))
            p, r = _beam_pairs(n_lvl[d - 1], K, n_lvl[d], "cpu")
            lists.append((p.tolist(), r.tolist()))
        npair = max(2, next_pow2(B), next_pow2(max(len(p) for p, _ in lists)))
        tab = torch.full((2, D, npair), -1, dtype=torch.int32)
        for d, (p, r) in enumerate(lists):
            tab[0, d, : len(p)] = torch.tensor(p, dtype=torch.int32)
            tab[1, d, : len(r)] = torch.tensor(r, dtype=torch.int32)
        _LEVEL_PAIRS[key] = tab.to(device)
    return _LEVEL_PAIRS[key]


_TREE = None


def _tree_kernels():
    """Two kernels (built on first use, after a test may have set TRITON_INTERPRET=1):

    tree, grid (C,): one program per sequence. Beam slot (d, q) = the q-th best node of
    depth d+1, score s. Each depth d >= 1 forms its NPAIR candidates s[d-1, p] + lp[d, r]
    (tl.gather from the previous beam held in registers), and tl.topk on int64 keys
    (ddtree_topk's: fp32 score image, then the pair index) keeps the best NP. All slots stay
    in registers as [DP, NP] keys, parents and ranks; the final tl.topk over their keys
    (tie-break index d*NP + q: shallower first) gives the B nodes in output order. A node's
    parent is selected too and ranks above it, so its output position is 1 + the number of
    selected keys above the parent's key: a binary search in the sorted selection.

    mask, grid (C, ceil((B+1) / ROWS)): row i of the ancestor-or-self mask marks i and its
    up to D ancestors, found by walking the parent array (tl.gather) D times."""
    global _TREE
    if _TREE is None:
        import types

        import triton
        import triton.language as tl

        from .ddtree_topk import _kernels as topk_kernels

        tk = topk_kernels()
        # The interpreter looks a kernel's callees up among its module's globals only.
        globals().update(_key=tk.key, _key_value=tk.key_value, _key_index=tk.key_index)

        @triton.jit
        def _tree(lp_ptr, ids_ptr, pairs_ptr, tok_ptr, par_ptr, dep_ptr, rank_ptr, score_ptr, pos_ptr, num_ptr,
                  D, K, B, NP: tl.constexpr, LOG_NP: tl.constexpr, DP: tl.constexpr, NPAIR: tl.constexpr):
            c = tl.program_id(0).to(tl.int64)
            q = tl.arange(0, NP)
            j = tl.arange(0, NPAIR)
            lvl = tl.arange(0, DP)[:, None]
            lp_c = lp_ptr + c * D * K
            none = -(2**63)  # below every key
            # depth 1: the top-K tokens themselves
            prev = tl.load(lp_c + q, mask=q < K, other=float("-inf"))
            keys = tl.where(lvl == 0, tl.where(q < K, _key(prev, q), none)[None, :], none)  # [DP, NP]
            rank = tl.where(lvl == 0, q[None, :], 0)
            par = tl.zeros([DP, NP], tl.int32)
            n = K
            total = K
            for d in range(1, D):
                n = tl.minimum(B, n * K)
                total += n
                pp = tl.load(pairs_ptr + d * NPAIR + j)
                rr = tl.load(pairs_ptr + (D + d) * NPAIR + j)
                ok = pp >= 0
                s = tl.gather(prev, tl.maximum(pp, 0), 0) + tl.load(lp_c + d * K + rr, mask=ok, other=0.0)
                win = tl.topk(tl.where(ok, _key(s, j), none), NP)
                live = q < n  # there are always >= n valid pairs
                w = tl.where(live, _key_index(win), 0).to(tl.int32)
                prev = tl.where(live, _key_value(win), float("-inf"))
                keys = tl.where(lvl == d, tl.where(live, _key(prev, d * NP + q), none)[None, :], keys)
                par = tl.where(lvl == d, tl.gather(pp, w, 0)[None, :], par)
                rank = tl.where(lvl == d, tl.gather(rr, w, 0)[None, :], rank)

            flat = tl.reshape(keys, [DP * NP])
            top = tl.topk(flat, NP)  # output order
            sel = q < tl.minimum(B, total)
            slot = tl.where(sel, _key_index(top), 0).to(tl.int32)
            dep = slot // NP  # depth - 1
            pslot = tl.maximum(dep - 1, 0) * NP + tl.gather(tl.reshape(par, [DP * NP]), slot, 0)
            pkey = tl.gather(flat, pslot, 0)
            above = tl.zeros([NP], tl.int32)  # selected keys above the parent's
            for i in tl.static_range(1, LOG_NP + 1):  # steps NP/2, NP/4, ..., 1
                above = tl.where(tl.gather(top, above + (NP >> i) - 1, 0) > pkey, above + (NP >> i), above)
            rk = tl.gather(tl.reshape(rank, [DP * NP]), slot, 0)
            tok = tl.load(ids_ptr + c * D * K + dep * K + rk, mask=sel, other=-1)

            out = c * (B + 1) + 1 + q
            st = q < B
            tl.store(tok_ptr + out, tok, mask=st)
            tl.store(par_ptr + out, tl.where(sel, tl.where(dep == 0, 0, above + 1), -1), mask=st)
            tl.store(dep_ptr + out, tl.where(sel, dep + 1, -1), mask=st)
            tl.store(pos_ptr + out, tl.where(sel, dep + 1, 0), mask=st)
            tl.store(rank_ptr + out, tl.where(sel, rk, -1), mask=st)
            tl.store(score_ptr + out, tl.where(sel, _key_value(top), float("-inf")), mask=st)
            root = c * (B + 1)  # previous bonus token: token -1, parent -1, depth 0, rank -1
            tl.store(tok_ptr + root, -1)
            tl.store(par_ptr + root, -1)
            tl.store(dep_ptr + root, 0)
            tl.store(pos_ptr + root, 0)
            tl.store(rank_ptr + root, -1)
            tl.store(score_ptr + root, 0.0)
            tl.store(num_ptr + c, tl.minimum(B, total) + 1)

        @triton.jit
        def _mask(par_ptr, mask_ptr, N, D, ROWS: tl.constexpr, NQ: tl.constexpr):
            c = tl.program_id(0).to(tl.int64)
            i = tl.program_id(1) * ROWS + tl.arange(0, ROWS)
            cols = tl.arange(0, NQ)
            parents = tl.load(par_ptr + c * N + cols, mask=cols < N, other=-1).to(tl.int32)
            cur = tl.where(i < N, i, -1)
            acc = cols[None, :] == cur[:, None]
            for _ in range(D):
                cur = tl.where(cur >= 0, tl.gather(parents, tl.maximum(cur, 0), 0), -1)
                acc = acc | (cols[None, :] == cur[:, None])
            inside = (i[:, None] < N) & (cols[None, :] < N)
            tl.store(mask_ptr + c * N * N + i[:, None] * N + cols[None, :], acc.to(tl.uint8), mask=inside)

        _TREE = types.SimpleNamespace(tree=_tree, mask=_mask)
    return _TREE


def token_paths(tokens, parents, n: int | None = None) -> set[tuple[int, ...]]:
    """Set of root->node token paths (root excluded) of one tree; for comparing builders."""
    tokens = np.asarray(tokens)
    parents = np.asarray(parents)
    n = len(tokens) if n is None else n
    paths: dict[int, tuple[int, ...]] = {0: ()}
    for i in range(1, n):
        paths[i] = paths[int(parents[i])] + (int(tokens[i]),)
    return set(paths[i] for i in range(1, n))
