"""One forward pass: ops + collectives + overheads (+ draft and tree build), with a 1σ band.

`batch_estimate` prices any batch an engine runs (decode, verify and prefill groups, mixed);
`step_estimate` is its decode (or verify) special case, C sequences × q tokens at context L.

Breakdown components (ms per step):
  moe, attention, dense, elementwise, lm_head   bandwidth/compute time of each kernel class
  latency_floor                                 Σ per-kernel floors t0 (does not scale with bw)
  collectives                                   all-reduce / all-to-all latency + size/bw
  dispatch                                      per-kernel graph-node cost (taken out of the
                                                fitted floors once, see machine.py) + graph
                                                launch; eager: + launch time the GPU waits for
                                                (host launches beyond GPU work)
  host                                          per-step host work (scheduling, sampling, sync)
  engine_host                                   a serving engine's own host work per step
                                                (fitted by `perfmodel calibrate`; 0 otherwise)
  draft, tree_build                             speculative decoding terms
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field, replace

from perfmodel.collective_math import bus_factor
from perfmodel.kernel_classes import of_key
from perfmodel.model.layers import PREFILL, Batch, Collective, Decode, Layout, Verify, at_probe, batch_ops, decode_ops
from perfmodel.model.machine import Machine
from perfmodel.model.ops import KernelLaw, Op, OpEstimate, estimate
from perfmodel.specs.schema import GQASpec, ModelDtypes, ModelSpec

Z90 = 1.645  # z of a two-sided 90% interval: a StepEstimate's step_us ± Z90 · sigma_us


@dataclass
class StepEstimate:
    step_us: float
    breakdown_us: dict[str, float]
    sigma_us: float
    n_kernels: int
    ops: list[OpEstimate] = field(default_factory=list)
    # where the step is priced outside what the profile measured (prefill-size calls), one line each
    assumptions: list[str] = field(default_factory=list)

    @property
    def bottleneck(self) -> str:
        return max(self.breakdown_us, key=self.breakdown_us.get)


SAMPLE_UNC = 0.05  # run-to-run spread of a measured sample on the GPU it was taken on


class _Acc:
    """Accumulates time by component, and 1σ by correlated group (same law ⇒ same error)."""

    def __init__(self) -> None:
        self.by_comp: dict[str, float] = defaultdict(float)
        self.by_group: dict[str, float] = defaultdict(float)
        self.ops: list[OpEstimate] = []
        self.n_kernels = 0
        self.timeline: list[tuple[float, float, int]] = []  # per op, in issue order: (GPU us, host us) per call, calls
        self.notes: set[str] = set()
        self.prefill = False  # the step carries prompt tokens (the engine's eager launches: `_finish`)

    def add(self, comp: str, us: float, group: str, rel_unc: float) -> None:
        self.by_comp[comp] += us
        self.by_group[group] += us * rel_unc

    def sigma(self) -> float:
        return math.sqrt(sum(v * v for v in self.by_group.values()))

    def copy(self) -> _Acc:
        """A copy whose sums can grow without moving this one's (the op lists are shared)."""
        out = _Acc()
        out.by_comp, out.by_group = defaultdict(float, self.by_comp), defaultdict(float, self.by_group)
        out.ops, out.n_kernels, out.timeline, out.notes = self.ops, self.n_kernels, self.timeline, self.notes
        out.prefill = self.prefill
        return out


@dataclass(frozen=True)
class StepTerms:
    """A step priced but for the engine's own host time per step (`Overheads.engine_host_us`, a
    calibration's), which adds to it unchanged by anything else in the step: `with_engine_host`
    completes it for a machine's overheads exactly as `batch_estimate` prices the step on that
    machine. The serving simulation keeps these per batch, so a calibration that tries host times
    prices each batch's kernels once (`serving.StepPricer`'s `terms`)."""

    acc: _Acc
    host: bool

    def with_engine_host(self, o) -> StepEstimate:
        return _finish(self.acc.copy(), o, self.host)


# Relative 1σ of a compute-bound call priced at an assumed compute roof (a prefill-size call
# of a class the profile timed at decode size only: `prefill_law`).
PREFILL_ROOF_UNC = 0.3


def prefill_law(mach: Machine, op: Op) -> tuple[KernelLaw, str | None]:
    """The law of a prefill-size call (`layers.PREFILL` variant) and, when it is assumed, why.

    A profile that fits `<class>.prefill` prices the call by that law (`perfmodel measure`'s
    prefill bench; `profile import-aic` from the database's prefill rows). Profiles without it time
    decode-size kernels only (attention at q <= 65 without a causal mask, MoE up to T = 4096 with
    decode-oriented kernels): their fitted compute rates are what those kernels reach at decode
    size, far below the dense GEMM's, not what a prefill kernel does. Without a prefill fit the
    call takes its class law (floor, bandwidth) with the compute roof of the measured dense GEMM
    (`gemm_bf16`'s fit, carried to the target by the bf16 peak ratio; the op's dtype scales it
    as every op's), an upper bound on tensor-core throughput that FlashAttention-3 approaches at
    long sequences (75% of the H100 bf16 peak in its forward pass: perfmodel/model/SOURCES.md
    [V7]; compare the profile's own GEMM ceiling against its datasheet peak, `Profile.ceilings`)."""
    key = mach.law_key(op)
    law = mach.laws[key]
    if key.endswith(f".{PREFILL}"):
        return law, None
    gemm = mach.laws["gemm_bf16"]
    if gemm.tflops <= law.tflops:
        return law, None
    why = (f"{op.kernel_class} at prefill size: no measured prefill law; compute roof {gemm.tflops:.0f} TF/s (bf16) "
           f"of the measured dense GEMM in place of the decode kernel's {law.tflops:.0f}")
    return replace(law, tflops=gemm.tflops, rule=law.rule + "; " + why), why


@dataclass(frozen=True)
class _Terms:
    """One op's contributions to a step, computed once per (op, option) and reusable (memo)."""

    e: OpEstimate
    n_kernels: int
    timeline: tuple[float, float, int]
    work: tuple[float, str, float]  # (us, correlation group, relative 1σ)
    floor: tuple[float, str, float]
    node: tuple[float, str, float]
    component: str
    notes: tuple[str, ...] = ()

    @property
    def gpu_us(self) -> float:
        return self.e.total_us + self.node[0]


def _op_terms(mach: Machine, op: Op, past_x_edge: bool = False) -> _Terms:
    """Work (bandwidth/compute) + floor t0 + graph nodes, each its own term.

    The laws' t0 exclude the graph nodes the graph-captured fits held (`machine.py`), so the
    node cost is added per kernel here, at the machine's node cost. Where the profile timed the
    very op, its sample (less the nodes it held) sets the op's time, carried by the law ratio;
    the floor stays the law's t0 and the rest of the sample is work, so the floor does not
    move with how close a sample lies to its law. An op outside its samples' range is priced by
    the nearest sample carried by its law's ratio (`_from_anchor`), so the price does not jump
    where the samples end. `past_x_edge` (a batch with prefill groups): an op past its largest
    sampled size (tokens) says so in the step's assumptions."""
    node_us, node_unc = mach.overheads.graph_node_us, mach.overheads.rel_unc_node
    src_node_us = mach.overheads.source_graph_node_us
    o = mach.overheads
    notes: list[str] = []
    if op.variant == PREFILL:
        law, why = prefill_law(mach, op)
        if why:
            notes.append(why)
    else:
        law = mach.law(op)
    stand_in = of_key(mach.law_key(op)).name  # the class whose law prices the op (`machine.law_of`)
    if stand_in != op.kernel_class:
        notes.append(f"{op.kernel_class}: no law of its own in the profile (an imported database's rows of that format "
                     f"fit one: `profile import-aic`): {stand_in}'s law on its own bytes plus each expert slice's "
                     "cost (layers.slice_overhead_bytes)")
    e = estimate(op, law, mach.flops_scale(op.compute_dtype))
    unc = law.rel_unc_bw if e.bound == "memory" else (PREFILL_ROOF_UNC if notes else 0.15)
    unc_t0 = law.rel_unc_t0
    # Samples price ops on the profile's own GPU only: carried to another GPU by the law
    # ratio, a sample's closeness to its law changes with the op's size and boundness (a
    # memory-bound source and compute-bound target), and the step would stop growing with C.
    table = mach.table if mach.same_gpu_as_profile else None
    if table is None and mach.table is not None and op.variant != PREFILL:
        e = _with_overlap(op, mach, e)
    measured = table.lookup(op.probe) if table is not None else None
    anchor = table.anchor(op.probe) if table is not None and measured is None else None
    if anchor is not None:
        measured = _from_anchor(op, mach, *anchor)
        if past_x_edge and anchor[1] is None and anchor[0] < op.probe.x:
            notes.append(f"{op.kernel_class} past its largest sampled {op.probe.x_name} ({anchor[0]:g}): that sample "
                         "grown as its law")
    if measured is not None:
        # The profile timed this very op: use the sample, carried by the law ratio.
        src_law = mach.source_law(op)
        src = estimate(op, src_law, mach.source_flops_scale(op.compute_dtype))
        kernel_us = max(measured - src_law.graph_nodes * src_node_us, 1e-3)
        e = e.scaled(kernel_us * op.count / src.total_us)
        if mach.same_gpu_as_profile:
            unc, unc_t0 = SAMPLE_UNC, SAMPLE_UNC
    if op.at_least is not None:
        low = _op_terms(mach, op.at_least, past_x_edge)
        if low.e.total_us > e.total_us:
            return low
    # each call's cost timed in a loop of its own, times what interleaving the calls adds
    host_us = eager_launch_us(op, law.launcher, o, timed=law.kernel_set == "perfmodel") * o.eager_interleave_factor
    floor = min(law.t0_us * op.count, e.total_us)
    node = law.graph_nodes * node_us * op.count
    return _Terms(e=e, n_kernels=op.n_kernels, timeline=((e.total_us + node) / op.count, host_us / op.count, op.count),
                  work=(e.total_us - floor, f"{stand_in}:{e.bound}", unc),  # one law, one correlated error
                  floor=(floor, f"{stand_in}:t0", unc_t0), node=(node, "graph_node", node_unc),
                  component=op.component, notes=tuple(notes))


def _price_ops(acc: _Acc, mach: Machine, ops: list[Op], comp_override: str | None = None, past_x_edge: bool = False,
               memo: dict | None = None) -> float:
    """Each op's terms (`_op_terms`) added to the step, in issue order. `memo` (a dict kept by
    the caller for one machine) holds the terms of ops already priced."""
    gpu = 0.0
    for op in ops:
        if memo is None:
            t = _op_terms(mach, op, past_x_edge)
        else:
            key = (op, past_x_edge)
            t = memo.get(key)
            if t is None:
                t = memo[key] = _op_terms(mach, op, past_x_edge)
        acc.ops.append(t.e)
        acc.n_kernels += t.n_kernels
        acc.timeline.append(t.timeline)
        acc.add(comp_override or t.component, t.work[0], t.work[1], t.work[2])
        acc.add(comp_override or "latency_floor", *t.floor)
        acc.add(comp_override or "dispatch", *t.node)
        acc.notes.update(t.notes)
        gpu += t.gpu_us
    return gpu


def _with_overlap(op: Op, mach: Machine, e):
    """On another GPU than the profile's: the law's estimate plus the share of its shorter
    roof term that the profile's own sample of this op did not overlap with the longer one.
    The laws price a kernel at max(memory, compute); a kernel that dequantises weights or
    walks a verify tree's queries keeps its memory and compute partly in series, which shows
    on the profile's GPU as a sample above its law. That share, alpha = (sample - law) /
    min(memory, compute) clipped to [0, 1], is a property of the kernel, carried to the
    target, where it adds alpha x min(memory, compute) of the target's terms. An op outside its
    probe's sampled range takes the share of the nearest sample (`SampleTable.anchor`), so the
    price stays continuous where the samples end."""
    at = op
    measured = mach.table.lookup(op.probe)
    if measured is None:
        anchor = mach.table.anchor(op.probe)
        if anchor is None:
            return e
        x, y, measured = anchor
        at = at_probe(op, x, y)
    src_law = mach.source_law(op)
    src = estimate(at, src_law, mach.source_flops_scale(op.compute_dtype))
    short_src = min(src.memory_us, src.compute_us)
    if short_src <= 0:
        return e
    kernel_us = max(measured - src_law.graph_nodes * mach.overheads.source_graph_node_us, 1e-3) * op.count
    alpha = min(max((kernel_us - src.total_us) / short_src, 0.0), 1.0)
    extra = alpha * min(e.memory_us, e.compute_us)
    return replace(e, total_us=e.total_us + extra)


def _from_anchor(op: Op, mach: Machine, x: float, y: float | None, t: float) -> float:
    """An op outside the sampled range of its probe, whose nearest sampled point (`SampleTable.anchor`:
    swept field x, second field y) takes t us per call: that sample grown (or shrunk) as the source
    law grows from there to the op (`layers.at_probe`; its graph nodes held apart), never below the
    sample for an op that does at least the sampled work, never above it for one that does at most
    that, and never below streaming the op's bytes at the faster of its law's rate and the GPU's
    DRAM roof (plus its nodes). Continuous where the samples end, where a switch to the law alone
    would jump by the law's error there (a larger step priced below a smaller one)."""
    src_law = mach.source_law(op)
    scale = mach.source_flops_scale(op.compute_dtype)
    grow = estimate(op, src_law, scale).total_us / estimate(at_probe(op, x, y), src_law, scale).total_us
    nodes = src_law.graph_nodes * mach.overheads.source_graph_node_us
    price = nodes + (t - nodes) * grow
    more = op.probe.x >= x and (y is None or op.probe.y >= y)
    less = op.probe.x <= x and (y is None or op.probe.y <= y)
    if more:
        price = max(t, price)
    elif less:
        price = min(t, price)
    stream = op.bytes / (max(src_law.bandwidth(op.bytes), mach.roof_GBps or 0.0) * 1e3)
    return max(price, nodes + stream)


def _past_edge(op: Op, mach: Machine, y_edge: float, t_edge: float) -> float:
    """An op past the largest sampled value of its probe's second field (the concurrency C of
    attention), timed t_edge us per call there: `_from_anchor` at (the op's own x, y_edge)."""
    return _from_anchor(op, mach, op.probe.x, y_edge, t_edge)


def _price_collectives(acc: _Acc, mach: Machine, colls: list[Collective], comp: str = "collectives") -> float:
    total = 0.0
    for c in colls:
        law = mach.all_reduce if c.op == "all_reduce" else mach.all_to_all
        n = c.group or mach.n_gpus
        if n <= 1:
            continue
        law = law.at(c.bytes_per_gpu)
        factor = bus_factor(c.op, n)
        lat = law.latency_us * c.count
        bw = law.bw_us(c.bytes_per_gpu, factor) * c.count
        acc.add(comp, lat, f"{c.op}:lat", law.rel_unc_lat)
        acc.add(comp, bw, f"{c.op}:bw", law.rel_unc_bw)
        acc.n_kernels += c.count
        acc.timeline.append(((lat + bw) / c.count, mach.overheads.launch_eager_us * mach.overheads.eager_interleave_factor,
                             c.count))
        total += lat + bw
    return total


def price_op(mach: Machine, op: Op) -> float:
    """GPU µs of all `op.count` calls of one op as a step prices it: work, floor and graph nodes
    (on the profile's own GPU from its samples where they time the op)."""
    return _price_ops(_Acc(), mach, [op])


def price_collective(mach: Machine, c: Collective) -> float:
    """µs of all `c.count` calls of one collective as a step prices it (the machine's law)."""
    return _price_collectives(_Acc(), mach, [c])


def drafter_model(m: ModelSpec) -> ModelSpec:
    """The drafter as a dense GQA model: a DFlash block drafter (no lm_head: it shares the
    target's) or an EAGLE-3 head (its own lm_head over the draft vocabulary)."""
    d = m.drafter
    vocab = d.draft_vocab_size if d.kind == "eagle3" else m.vocab_size
    dt = d.dtype
    return ModelSpec(
        name=d.name, display_name=d.name, source=d.source, n_layers=d.n_layers, n_dense_layers=d.n_layers,
        hidden_size=d.hidden_size, vocab_size=vocab,
        attention=GQASpec(n_heads=d.n_heads, n_kv_heads=d.n_kv_heads, head_dim=d.head_dim),
        dense_intermediate_size=d.intermediate_size,
        dtypes=ModelDtypes(attention=dt, dense_mlp=dt, embedding=dt, lm_head=dt, kv_cache=m.dtypes.kv_cache),
    )


def drafter_layout(m: ModelSpec, lay: Layout) -> Layout:
    """A separate (dense) drafter runs TP where the target splits attention and experts apart with
    attention TP over every GPU (tp-attn-ep-moe, a mixed layout of one attention group); an MTP
    module is a layer of the target and runs in the target's layout."""
    if m.drafter is not None and m.drafter.kind != "mtp" and lay.parallel not in ("tp", "ep") and lay.dp_attn == 1:
        return Layout("tp", lay.n_gpus, lay.tp_shape, lay.comm)
    return lay


def draft_ops(m: ModelSpec, lay: Layout, C: int, L: int) -> list[Op]:
    """One DFlash drafter forward over a block for C sequences, then the target's lm_head on
    the block's last bs−1 positions (per-position distributions for the tree)."""
    from perfmodel.model.layers import _gemm, lm_head_ops

    d = m.drafter
    dm = drafter_model(m)
    ops, _ = decode_ops(dm, lay, C, d.block_size, L, lm_head=False)
    Cg = math.ceil(C / lay.dp_attn)
    ops.append(_gemm("draft_fc", "dense", Cg, d.n_target_layers_fused * m.hidden_size, m.hidden_size, d.dtype, 1))
    ops += lm_head_ops(m, lay, Cg * (d.block_size - 1))
    return ops


def _draft_pass(m: ModelSpec, lay: Layout, C: int, q: int, L: int, logit_rows: int, first: bool):
    """One forward of a chain drafter over q tokens per sequence, logits for `logit_rows` of them."""
    from perfmodel.model.layers import _elt, _gemm, lm_head_ops

    d = m.drafter
    Cg = math.ceil(C / lay.dp_attn)
    T = Cg * q
    if d.kind == "eagle3":
        hm = drafter_model(m)
        ops, colls = decode_ops(hm, lay, C, q, L, lm_head=False)
        hq, hkv = max(1, d.n_heads // lay.t_attn), max(1, d.n_kv_heads // lay.t_attn)
        # the layer's q/k/v read [input_layernorm(embedding) ; hidden_norm(h)]: a second hidden-wide input
        ops += [_gemm("eagle_qkv_embedding_half", "dense", T, d.hidden_size, (hq + 2 * hkv) * d.head_dim, d.dtype, 1),
                _elt("eagle_hidden_norm", T, d.hidden_size, 1, "rmsnorm")]
        if first:  # fc over the fused low/mid/high target hidden states of the verified tokens
            ops.append(_gemm("eagle_fc", "dense", T, d.n_target_layers_fused * m.hidden_size, d.hidden_size, d.dtype, 1))
        ops += lm_head_ops(hm, lay, Cg * logit_rows)  # the head's own norm and lm_head over its draft vocabulary
    else:  # mtp: a layer of the target (MoE, or the dense MLP of a dense model) + eh_proj, the target's lm_head
        ops, colls = decode_ops(m, lay, C, q, L, n_layers=1, n_dense=0 if m.moe else 1, lm_head=False)
        H = m.hidden_size
        ops += [_elt("mtp_enorm_hnorm", T, 2 * H, 1, "rmsnorm"),
                _gemm("mtp_eh_proj", "dense", T, 2 * H, H, m.dtypes.attention, 1)]
        ops += lm_head_ops(m, lay, Cg * logit_rows)
    if lay.comm and lay.n_gpus > 1:
        colls = colls + [Collective("draft_logits_gather", "all_reduce", Cg * logit_rows * 8.0, 1)]
    return ops, colls


def _times(ops: list[Op], colls: list[Collective], n: int):
    return ([replace(o, count=o.count * n) for o in ops],
            [replace(c, count=c.count * n) for c in colls])


def chain_draft_ops(m: ModelSpec, lay: Layout, C: int, L: int, k: int, topk: int = 1):
    """Ops and collectives of the draft phase of one speculative step of an EAGLE-3 head or an MTP
    module proposing k tokens (k = num_speculative_tokens), as vLLM's EAGLE proposer and SGLang's
    EAGLE worker run it: a first forward over the k + 1 tokens each sequence verified last step
    (it writes their keys and values into the draft's KV and proposes the first draft from the
    last accepted one), then k - 1 forwards over `topk` tokens per sequence (1 for a chain; the
    frontier of an EAGLE tree). Every forward computes logits for its last token(s) only.

    An EAGLE tree (topk > 1) also picks, after each later forward, the topk best of each
    sequence's topk x topk children by cumulative score and gathers their hidden states
    (SGLang `select_top_k_tokens`): two small kernels per forward."""
    from perfmodel.model.layers import _elt

    if k < 1:
        return [], []
    ops, colls = _draft_pass(m, lay, C, k + 1, L, 1, first=True)
    if k > 1:
        o, c = _draft_pass(m, lay, C, topk, L + k, topk, first=False)
        if topk > 1:
            Cg = math.ceil(C / lay.dp_attn)
            hidden = m.drafter.hidden_size if m.drafter.kind == "eagle3" else m.hidden_size
            o = o + [_elt("eagle_select_topk", Cg, topk * topk, 1, "router_topk"),
                     _elt("eagle_gather_hidden", Cg * topk, hidden, 1, "copy")]
        o, c = _times(o, c, k - 1)
        ops, colls = ops + o, colls + c
    return ops, colls


def eagle_tree_ops(m: ModelSpec, lay: Layout, C: int, L: int, k: int, topk: int, width: int) -> list[Op]:
    """Building the verify's tree from an EAGLE tree's drafts (topk > 1), as SGLang runs it after
    the draft forwards (sgl-project/sglang python/sglang/srt/speculative/eagle_utils.py):
    `organize_draft_results` takes each sequence's best width - 1 of the topk + (k - 1) topk^2
    scored nodes (a top-k, then a sort of the picked indices) and gathers their tokens;
    `build_tree_kernel_efficient` fills the verify's full attention mask (one bool per draft
    token per key: the prefix and the tree, L x width + width^2 per sequence, its FULL_MASK mode)
    and writes each node's position and its parent, child and sibling links. Each pass is one
    small kernel; the mask's bytes grow with context x width."""
    from perfmodel.model.layers import _elt
    from perfmodel.specs.schema import tree_candidates

    Cg = math.ceil(C / lay.dp_attn)
    cand = tree_candidates(topk, k)
    mask_bytes = (L * width + width * width)  # bools, per sequence
    # an "elementwise copy" of W bf16 values moves 4 W bytes (read + write): W = bytes / 4
    return [_elt("eagle_tree_topk_sort", Cg, cand, 2, "router_topk"),
            _elt("eagle_tree_gather_tokens", Cg, width, 1, "copy"),
            _elt("eagle_tree_mask_fill", Cg, max(1, mask_bytes // 4), 1, "copy"),
            _elt("eagle_tree_build", Cg, max(1, mask_bytes // 4), 1, "copy", per_token=3 * 8 * width)]


# Relative uncertainty of an eager step's exposed launch time, at least: the model times each
# call in a loop of its own and scales it by the measured interleave factor, but the Python glue
# between calls is not counted and the host's own timings of one step disagree. On one H200
# host the model was -22% (C=1) and +33% (C=8) against `tools/eager_step_host_time.py`, and
# within 1% of the e2e bench's eager point (evidence/eager-step-host-time/).
EAGER_REL_UNC = 0.3


def eager_timeline_us(timeline: list[tuple[float, float, int]]) -> float:
    """End of an eagerly launched step: the host issues calls one after another, and each
    kernel starts when it is issued and the GPU is free (end = max(end, issued) + GPU time).
    So the GPU idles after every call whose launch outlasts the work queued before it, and a
    lead the host builds on long kernels is spent on the short ones after them; neither the
    sum nor the max of the two totals. Calls are interleaved layer by layer: an op of `count`
    calls issues count / layers of them per layer (layers = the largest count), in op order."""
    layers = max((n for _, _, n in timeline), default=0)
    issued = end = 0.0
    for _ in range(layers):
        for gpu, host, n in timeline:
            k = n / layers
            issued += host * k
            end = max(end, issued) + gpu * k
    return end


def eager_call_us(table: dict, kernel_class: str, tokens: int = 1) -> float | None:
    """The profile's host cost of one eager wrapper call of a class (`launch_eager_call_us`) for
    a call of `tokens` rows: the entry "<class>@T<n>" with the largest n <= tokens, else the
    plain "<class>" entry (timed at one token), else None. A wrapper may take another path past
    some size (the W4A16 MoE: its planned pair path up to 4 tokens, then the aligned path), so
    the profile times it on both sides of the boundary (measure/dispatch.py)."""
    best_n, best = 1, table.get(kernel_class)
    for key, us in table.items():
        base, sep, n = key.partition("@T")
        if sep and base == kernel_class and n.isdigit() and best_n < int(n) <= tokens:
            best_n, best = int(n), us
    return best


def eager_launch_us(op: Op, launcher: str, o, *, timed: bool = True) -> float:
    """Host time to launch all `count` calls of an op eagerly. An op whose call the profile timed
    (`launch_eager_call_us`: the attention and MoE wrappers, which plan splits and allocate
    workspaces; a torch GEMM through cuBLAS; the small ops as the e2e stack calls them) costs
    that per call, by "<class>.<variant>" before "<class>" and by the op's tokens
    (`eager_call_us`). Those timings are of perfmodel's own kernel set: `timed` False (the op
    runs another set's implementation, e.g. a torch op for a Triton one) skips them. Other
    Triton kernels cost the one-kernel wrapper's launch per kernel, other torch ops a torch
    launch per kernel."""
    if timed:
        table = o.launch_eager_call_us
        per_call = eager_call_us(table, f"{op.kernel_class}.{op.variant}", op.tokens) if op.variant else None
        for cls in (op.kernel_class, of_key(op.kernel_class).stand_in):  # an FP8 GEMM launches as the bf16 one timed
            if per_call is None and cls:
                per_call = eager_call_us(table, cls, op.tokens)
        if per_call is not None:
            return op.count * per_call
    return op.n_kernels * (o.launch_eager_triton_us if launcher == "triton" else o.launch_eager_us)


def _estimate(m: ModelSpec, mach: Machine, lay: Layout, ops: list[Op], colls: list[Collective], *, graph: bool,
              draft_groups: list[tuple[int, int, int]], tree_seqs: int, tree_budget: int, tree_impl: str, host: bool,
              past_x_edge: bool = False, memo: dict | None = None, draft_steps: int | None = None,
              draft_topk: int | None = None) -> StepEstimate:
    """The step (`_terms`) with the engine's host time per step (`_finish`)."""
    acc = _terms(m, mach, lay, ops, colls, graph=graph, draft_groups=draft_groups, tree_seqs=tree_seqs,
                 tree_budget=tree_budget, tree_impl=tree_impl, host=host, past_x_edge=past_x_edge, memo=memo,
                 draft_steps=draft_steps, draft_topk=draft_topk)
    return _finish(acc, mach.overheads, host)


def _terms(m: ModelSpec, mach: Machine, lay: Layout, ops: list[Op], colls: list[Collective], *, graph: bool,
           draft_groups: list[tuple[int, int, int]], tree_seqs: int, tree_budget: int, tree_impl: str, host: bool,
           past_x_edge: bool = False, memo: dict | None = None, draft_steps: int | None = None,
           draft_topk: int | None = None) -> _Acc:
    """A step's ops and collectives priced, plus the drafter's forward for each (sequences,
    context, verify width) of `draft_groups`, tree building for `tree_seqs` sequences, dispatch
    and host. A DFlash block drafter runs one forward per group; an EAGLE-3 / MTP drafter its k
    draft forwards (k = draft_steps, else the verify width - 1: a chain verifying k + 1 tokens;
    an EAGLE tree, topk > 1 (draft_topk, else the drafter's `topk`), runs its num_speculative_tokens
    steps and verifies the width of its kept nodes, after building the tree: `eagle_tree_ops`,
    under tree_build).

    The engine's host cost per draft forward that the GPU does not hide (its Python drafting
    loop: input preparation, sampling, metadata between the forwards) is the machine's
    `engine_draft_host_us` (a calibration's; 0 otherwise), added once per draft forward of a
    chain drafter (k per step) to engine_host; a DFlash drafter's one block forward per step
    leaves its host work to the per-step term. Against vLLM's EAGLE-3 TPOT table
    (vllm-project/vllm#20780) the shape-priced step misses a per-step and a per-draft-forward
    engine cost (evidence/acceptance-by-workload/check.txt), which a calibration supplies
    (evidence/engine-host-eagle3/)."""
    acc = _Acc()
    acc.prefill = past_x_edge  # a batch with prefill groups
    gpu_us = _price_ops(acc, mach, ops, past_x_edge=past_x_edge, memo=memo)
    o = mach.overheads
    if draft_groups and m.drafter:
        dlay = drafter_layout(m, lay)
        for C, L, width in draft_groups:
            if m.drafter.kind == "dflash":
                k = 0  # one block forward per step: the engine's per-step host term holds its host work
                dops = draft_ops(m, dlay, C, L)
                dcolls = [Collective("draft_allreduce", "all_reduce", C * m.drafter.block_size * m.drafter.hidden_size * 2.0,
                                     2 * m.drafter.n_layers)] if lay.comm and lay.n_gpus > 1 else []
            else:
                topk = m.drafter.topk if draft_topk is None else int(draft_topk)
                # a chain verifies its k drafts + 1; an EAGLE tree k steps deep verifies the nodes it keeps
                k = int(draft_steps) if draft_steps is not None else m.drafter.num_speculative_tokens if topk > 1 \
                    else width - 1
                dops, dcolls = chain_draft_ops(m, dlay, C, L, k, topk)
                if topk > 1 and k > 0:
                    gpu_us += _price_ops(acc, mach, eagle_tree_ops(m, dlay, C, L, k, topk, width),
                                         comp_override="tree_build", memo=memo)
            if host and k and o.engine_draft_host_us > 0:
                acc.add("engine_host", k * o.engine_draft_host_us, "engine_draft_host",
                        o.engine_draft_host_sigma_us / o.engine_draft_host_us)
            gpu_us += _price_ops(acc, mach, dops, comp_override="draft", memo=memo)
            gpu_us += _price_collectives(acc, mach, dcolls, comp="draft")
    gpu_us += _price_collectives(acc, mach, colls)
    if tree_budget > 0:
        law = mach.treebuild.get(tree_impl)
        if law is None:
            raise ValueError(f"profile has no '{tree_impl}' tree-build fit")
        tb = law.t0_us + law.per_node_us * tree_seqs * tree_budget
        acc.add("tree_build", tb, f"tree:{tree_impl}", law.rel_unc)
    if graph:
        acc.add("dispatch", o.graph_launch_us, "graph_launch", o.rel_unc_host)
    else:
        # Eager: no graph launch, but the GPU waits whenever a kernel's launch (priced by its
        # launcher: torch op, Triton kernel or timed wrapper) is not yet issued when the GPU is free.
        acc.add("dispatch", max(0.0, eager_timeline_us(acc.timeline) - gpu_us), "eager_launch",
                max(o.rel_unc_host, EAGER_REL_UNC))
    if host:
        acc.add("host", o.host_step_us, "host", o.rel_unc_host)
    return acc


# A step's components, and the uncertainty groups, that are not GPU work (`_finish`: a prompt's step
# scales the others)
NOT_GPU_WORK = ("host", "dispatch", "engine_host")
NOT_GPU_GROUPS = ("host", "graph_node", "graph_launch", "eager_launch", "engine_host", "engine_draft_host",
                  "engine_prefill_launch")


def _finish(acc: _Acc, o, host: bool) -> StepEstimate:
    """The step of `acc` (`_terms`) with the engine's terms of overheads `o` (a calibration's), taken
    last: its host time per step, and for a step that carries prompt tokens its GPU work scaled
    (`engine_prefill_work`) and its host time per kernel launched."""
    if acc.prefill and o.engine_prefill_work != 1.0:  # the engine's prompt step runs work its ops do not time
        work = 0.0
        for comp, us in list(acc.by_comp.items()):
            if comp not in NOT_GPU_WORK:
                acc.by_comp[comp] = us * o.engine_prefill_work
                work += us
        for group, us in list(acc.by_group.items()):  # the work's own 1σ scales with it
            if group not in NOT_GPU_GROUPS:
                acc.by_group[group] = us * o.engine_prefill_work
        acc.by_group["engine_prefill_work"] += work * o.engine_prefill_work * o.engine_prefill_work_sigma
    if host and o.engine_host_us > 0:
        acc.add("engine_host", o.engine_host_us, "engine_host", o.engine_host_sigma_us / o.engine_host_us)
    if host and acc.prefill and o.engine_prefill_launch_us > 0:  # the engine launches a prompt's kernels eagerly
        acc.add("engine_host", acc.n_kernels * o.engine_prefill_launch_us, "engine_prefill_launch",
                o.engine_prefill_launch_sigma_us / o.engine_prefill_launch_us)
    bd = {k: v for k, v in acc.by_comp.items() if v > 0}
    return StepEstimate(step_us=sum(bd.values()), breakdown_us=bd, sigma_us=acc.sigma(),
                        n_kernels=acc.n_kernels, ops=acc.ops, assumptions=sorted(acc.notes))


def step_estimate(m: ModelSpec, mach: Machine, lay: Layout, C: int, q: int, L: int, *, graph: bool = True,
                  lm_head: bool = True, n_layers: int | None = None, n_dense: int | None = None,
                  draft: bool = False, tree_budget: int = 0, tree_impl: str = "gpu",
                  host: bool = True, draft_steps: int | None = None, draft_topk: int | None = None,
                  memo: dict | None = None) -> StepEstimate:
    """One decode (q = 1) or verification (q > 1) step: C sequences × q tokens at context L, with
    the drafter's forward(s) when `draft` (`_estimate`). The same as `batch_estimate` of one
    Decode / Verify group. `memo`: as `batch_estimate`'s (one machine's priced ops)."""
    ops, colls = decode_ops(m, lay, C, q, L, n_layers=n_layers, n_dense=n_dense, lm_head=lm_head)
    return _estimate(m, mach, lay, ops, colls, graph=graph, draft_groups=[(C, L, q)] if draft else [], tree_seqs=C,
                     tree_budget=tree_budget, tree_impl=tree_impl, host=host, draft_steps=draft_steps,
                     draft_topk=draft_topk, memo=memo)


def batch_estimate(m: ModelSpec, mach: Machine, lay: Layout, batch: Batch, *, graph: bool = True, host: bool = True,
                   draft: bool = False, tree_budget: int = 0, tree_impl: str = "gpu", lm_head: bool = True,
                   n_layers: int | None = None, n_dense: int | None = None, memo: dict | None = None) -> StepEstimate:
    """One forward pass of any batch (`layers.Batch`: decode, verify and prefill groups, mixed),
    as `step_estimate` prices a decode step. `draft` runs the drafter (and, with `tree_budget`,
    tree building) for the verify groups' sequences. Prefill-size calls are priced by
    `prefill_law` and, past the profile's largest samples, by `_from_anchor`; each such
    assumption is listed in the result's `assumptions`. `memo`: a dict the caller keeps for one
    machine, reused across calls (the serving simulation prices thousands of steps).

    A batch of one Decode group (or one Verify group) prices exactly as `step_estimate`."""
    t = batch_terms(m, mach, lay, batch, graph=graph, host=host, draft=draft, tree_budget=tree_budget,
                    tree_impl=tree_impl, lm_head=lm_head, n_layers=n_layers, n_dense=n_dense, memo=memo)
    return _finish(t.acc, mach.overheads, host)


def batch_terms(m: ModelSpec, mach: Machine, lay: Layout, batch: Batch, *, graph: bool = True, host: bool = True,
                draft: bool = False, tree_budget: int = 0, tree_impl: str = "gpu", lm_head: bool = True,
                n_layers: int | None = None, n_dense: int | None = None, memo: dict | None = None) -> StepTerms:
    """`batch_estimate`'s step but for the engine's host time per step (`StepTerms`): the same on
    every machine that differs from `mach` in that time alone."""
    ops, colls = batch_ops(m, lay, batch, n_layers=n_layers, n_dense=n_dense, lm_head=lm_head)
    verify = [(g.n, g.context, g.width) for g in batch.groups if isinstance(g, Verify)]
    if len(batch.groups) == 1 and isinstance(batch.groups[0], Decode | Verify):
        g = batch.groups[0]
        verify = [(g.n, g.context, getattr(g, "width", 1))]  # as step_estimate: the drafter runs for the step's sequences
    return StepTerms(_terms(m, mach, lay, ops, colls, graph=graph, draft_groups=verify if draft else [],
                            tree_seqs=sum(n for n, _, _ in verify), tree_budget=tree_budget, tree_impl=tree_impl,
                            host=host, past_x_edge=batch.has_prefill, memo=memo), host)
