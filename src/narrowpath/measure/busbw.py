"""nccl-tests conventions: what "size" means per collective, algbw, busbw, and ring α-steps.

Source: NVIDIA/nccl-tests doc/PERFORMANCE.md and each test's *GetBw (src/*.cu). algbw = size / time. busbw =
algbw × factor with factor 2(n−1)/n for all_reduce, (n−1)/n for all_gather, reduce_scatter, all_to_all, gather,
scatter and hypercube, 1 for broadcast, reduce and send/recv. "size" is the whole buffer (all_reduce), the
gathered output (all_gather, gather), the input (reduce_scatter, scatter), the data each rank sends in total
(all_to_all), the payload (send/recv).
The factors and ring steps are the cost model's own (`cost.collectives`), so a measured busbw and a predicted
one always use the same convention.
"""
from __future__ import annotations

from narrowpath.cost.collectives import bus_factor, ring_steps

__all__ = ["PROBE_OPS", "NCCL_TEST_BINARIES", "PER_RANK_COUNT_OPS", "bus_factor", "ring_steps", "algbw_bytes_per_s",
           "busbw_bytes_per_s", "nccl_tests_count"]

PROBE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")

# nccl-tests binary name -> our op name.
NCCL_TEST_BINARIES = {
    "all_reduce_perf": "all_reduce", "all_gather_perf": "all_gather", "reduce_scatter_perf": "reduce_scatter",
    "alltoall_perf": "all_to_all", "sendrecv_perf": "send_recv", "broadcast_perf": "broadcast",
    "reduce_perf": "reduce", "gather_perf": "gather", "scatter_perf": "scatter", "hypercube_perf": "hypercube",
}


def algbw_bytes_per_s(size_bytes: float, time_s: float) -> float:
    return size_bytes / time_s


def busbw_bytes_per_s(op: str, num_ranks: int, size_bytes: float, time_s: float) -> float:
    return algbw_bytes_per_s(size_bytes, time_s) * bus_factor(op, num_ranks)


PER_RANK_COUNT_OPS = ("all_gather", "reduce_scatter", "all_to_all")
"""Ops whose nccl-tests `count` column is the per-rank element count (paramcount = count / nranks in their
*GetCollByteCount, src/allgather.cu, reducescatter.cu, alltoall.cu), not the whole buffer's."""


def nccl_tests_count(op: str, size_bytes: float, num_ranks: int, item_bytes: int = 4) -> int:
    """The `count` (elements) nccl-tests prints beside `size` (bytes): size / item bytes, divided by the ranks for
    PER_RANK_COUNT_OPS (all_gather of 4,096 B float over 2 ranks: 512). Source: nccl-tests src/common.cu prints
    nbytes / wordSize(type), nbytes = paramcount x wordSize."""
    return int(size_bytes // item_bytes // (num_ranks if op in PER_RANK_COUNT_OPS else 1))
