"""Weights and KV cache per GPU, and the largest concurrency that fits."""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfmodel.model.layers import Layout
from perfmodel.specs.schema import WEIGHT_BYTES, GpuSpec, GQASpec, MLASpec, ModelSpec

# Share of device memory kept for activations, CUDA graphs, NCCL buffers and fragmentation
# (assumption; serving engines default to 0.85–0.9 memory utilisation for weights + KV).
RESERVE_FRACTION = 0.10
# Weights above the default share still load when the engine is told a higher one (SGLang
# --mem-fraction-static, vLLM --gpu-memory-utilization, TRT-LLM free_gpu_memory_fraction): priced
# with this smaller reserve (a memory fraction of 0.95: an assumption), what is left beside the
# weights the KV pool; the silicon sample's DeepSeek-V3 FP8 rows on 4 B200s ran so.
MIN_RESERVE_FRACTION = 0.05


@dataclass(frozen=True)
class MemoryUse:
    weights_GB: float
    kv_per_seq_GB: float
    usable_GB: float

    def kv_GB(self, concurrency: int) -> float:
        return self.kv_per_seq_GB * concurrency

    def fits(self, concurrency: int) -> bool:
        return self.weights_GB + self.kv_GB(concurrency) <= self.usable_GB

    @property
    def max_concurrency(self) -> int:
        free = self.usable_GB - self.weights_GB
        return max(0, math.floor(free / self.kv_per_seq_GB)) if self.kv_per_seq_GB > 0 else 0


def param_counts(m: ModelSpec) -> dict[str, float]:
    """Parameters by component (whole model)."""
    H = m.hidden_size
    a = m.attention
    if isinstance(a, MLASpec):
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        q = (H * a.q_lora_rank + a.q_lora_rank * a.n_heads * qk) if a.q_lora_rank else H * a.n_heads * qk
        attn = q + H * (a.kv_lora_rank + a.qk_rope_head_dim) \
            + a.kv_lora_rank * a.n_heads * (a.qk_nope_head_dim + a.v_head_dim) + a.n_heads * a.v_head_dim * H
    else:
        attn = H * (a.n_heads + 2 * a.n_kv_heads) * a.head_dim + a.n_heads * a.head_dim * H
    n_moe = m.n_layers - m.n_dense_layers if m.moe else 0
    out = {"attention": attn * m.n_layers,
           "dense_mlp": 3 * H * (m.dense_intermediate_size or 0) * m.n_dense_layers,
           "embedding": H * m.vocab_size, "lm_head": 0.0 if m.tie_embeddings else H * m.vocab_size}
    if m.moe:
        e = m.moe
        out["routed_experts"] = 3 * H * e.expert_intermediate_size * e.n_routed_experts * n_moe
        out["shared_experts"] = 3 * H * (e.shared_intermediate_size or e.expert_intermediate_size * e.n_shared_experts) * n_moe
        out["router"] = H * e.n_routed_experts * n_moe
    return out


def kv_bytes_per_token(m: ModelSpec, lay: Layout) -> float:
    """KV bytes per token per GPU. MLA's latent is replicated across TP ranks."""
    kvb = 1.0 if m.dtypes.kv_cache == "fp8" else 2.0
    a = m.attention
    if isinstance(a, MLASpec):
        per_layer = (a.kv_lora_rank + a.qk_rope_head_dim) * kvb
        layers = m.n_layers
    else:
        assert isinstance(a, GQASpec)
        hkv = max(1, a.n_kv_heads // lay.t_attn)
        per_layer = 2 * hkv * a.head_dim * kvb
        layers = m.n_layers  # sliding layers cap at the window; long-context upper bound
    return per_layer * layers / lay.dp_attn


def drafter_weight_bytes(m: ModelSpec, lay: Layout) -> float:
    """The drafter's weights per GPU. DFlash and EAGLE-3 layers split n ways as the drafter runs
    TP (an EAGLE-3 layer's q/k/v are 2 x hidden wide: [embedding ; hidden]; its fc fuses
    n_target_layers_fused target hidden states; its lm_head spans the draft vocabulary). An
    MTP module is one MoE (or dense) layer of the target, split as the target's layers are, plus
    its eh_proj (2 x hidden -> hidden, replicated); it shares the embedding and lm_head."""
    dr = m.drafter
    n, t = lay.n_gpus, lay.t_attn
    if dr.kind == "mtp":
        pc = param_counts(m)
        d = m.dtypes
        w = pc["attention"] / m.n_layers * WEIGHT_BYTES[d.attention] / t
        n_moe = m.n_layers - m.n_dense_layers
        if m.moe and n_moe:
            w += (pc["routed_experts"] / n_moe * WEIGHT_BYTES[d.routed_experts] / n
                  + pc["shared_experts"] / n_moe * WEIGHT_BYTES[d.shared_experts] / t + pc["router"] / n_moe * 2.0)
        else:
            w += 3 * m.hidden_size * (m.dense_intermediate_size or 0) * WEIGHT_BYTES[d.dense_mlp] / t
        return w + 2 * m.hidden_size * m.hidden_size * WEIGHT_BYTES[d.attention]
    qkv_in = 2 if dr.kind == "eagle3" else 1
    per_layer = qkv_in * dr.hidden_size * (dr.n_heads + 2 * dr.n_kv_heads) * dr.head_dim \
        + dr.n_heads * dr.head_dim * dr.hidden_size + 3 * dr.hidden_size * dr.intermediate_size
    params = per_layer * dr.n_layers + dr.n_target_layers_fused * m.hidden_size * dr.hidden_size
    if dr.kind == "eagle3":
        params += dr.hidden_size * dr.draft_vocab_size
    return params * WEIGHT_BYTES[dr.dtype] / n


def draft_kv_bytes_per_token(m: ModelSpec, lay: Layout) -> float:
    """The drafter's own KV cache per token per GPU: an EAGLE-3 head keeps its one GQA layer's
    keys and values (heads split by TP), an MTP module one layer of the target's KV. A DFlash
    drafter's cache of context K/V is not modelled (0 here): its weights are."""
    dr = m.drafter
    if dr.kind == "mtp":
        return kv_bytes_per_token(m, lay) / m.n_layers
    if dr.kind == "eagle3":
        kvb = 1.0 if m.dtypes.kv_cache == "fp8" else 2.0
        hkv = max(1, dr.n_kv_heads // lay.t_attn)
        return 2 * hkv * dr.head_dim * kvb * dr.n_layers / lay.dp_attn
    return 0.0


def memory_use(m: ModelSpec, gpu: GpuSpec, lay: Layout, context: int, spec_tokens: int = 0,
               drafter: bool = False) -> MemoryUse:
    pc = param_counts(m)
    n, t = lay.n_gpus, lay.t_attn
    d = m.dtypes
    w = (pc["attention"] * WEIGHT_BYTES[d.attention] / t
         + pc["dense_mlp"] * WEIGHT_BYTES[d.dense_mlp] / t
         + pc["embedding"] * WEIGHT_BYTES[d.embedding] / n
         + pc["lm_head"] * WEIGHT_BYTES[d.lm_head] / n)
    if m.moe:
        w += pc["routed_experts"] * WEIGHT_BYTES[d.routed_experts] / n
        w += pc["shared_experts"] * WEIGHT_BYTES[d.shared_experts] / t
        w += pc["router"] * 2.0
    if drafter and m.drafter:
        w += drafter_weight_bytes(m, lay)
    cap = gpu.memory.usable_GB.value if gpu.memory.usable_GB else gpu.memory.capacity_GB.value
    usable = cap * (1 - RESERVE_FRACTION)
    if w / 1e9 > usable:
        usable = cap * (1 - MIN_RESERVE_FRACTION)
    kv_tok = kv_bytes_per_token(m, lay) + (draft_kv_bytes_per_token(m, lay) if drafter and m.drafter else 0.0)
    kv_seq = kv_tok * (context + spec_tokens)
    return MemoryUse(weights_GB=w / 1e9, kv_per_seq_GB=kv_seq / 1e9, usable_GB=usable)


def kv_capacity_tokens(m: ModelSpec, gpu: GpuSpec, lay: Layout, drafter: bool = False) -> int:
    """Tokens the KV pool holds, over all GPUs of the layout: what is left of each GPU's usable
    memory after its weights, over the KV bytes a token takes per GPU (`kv_bytes_per_token`,
    which averages DP attention's ranks). 0 when the weights do not fit."""
    mem = memory_use(m, gpu, lay, 0, drafter=drafter)
    free = (mem.usable_GB - mem.weights_GB) * 1e9
    return max(0, math.floor(free / kv_bytes_per_token(m, lay)))
