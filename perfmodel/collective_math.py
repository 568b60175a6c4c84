"""Collective-communication arithmetic shared by the model and the collectives bench (pure
Python, no imports), so `perfmodel.model` and `perfmodel.measure` use one definition.

nccl-tests reports bus bandwidth = algorithm bandwidth x a factor per operation, so that busbw is
comparable across GPU counts and with the link's per-direction rate: all-reduce moves
2(n-1)/n of the buffer over each GPU's link (reduce-scatter + all-gather), all-to-all (n-1)/n.
"""

from __future__ import annotations


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for `op` ("all_reduce"; anything else is priced as all-to-all) on `n` GPUs."""
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
