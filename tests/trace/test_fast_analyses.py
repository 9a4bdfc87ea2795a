"""The critical path and the idle-gap causes are O(n log n) and give exactly what the original (quadratic)
code gave: checked against that code, kept verbatim in reference_analyses.py, on random multi-stream traces
with launches, CUDA-graph launches, synchronisations and blocking copies; and a single stream of 200,000
kernels (which took the quadratic walk hours) is analysed in seconds."""
from __future__ import annotations

import dataclasses
import json
import math
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from narrowpath.trace.collectives import collective_inventory, collective_samples
from narrowpath.trace.critical_path import critical_path
from narrowpath.trace.idle import idle_causes
from narrowpath.trace.reader import read_rank
from narrowpath.trace.windows import steps, whole_trace
from reference_analyses import (reference_collective_inventory, reference_collective_samples,  # tests/trace on sys.path
                                reference_critical_path, reference_idle_causes)

KERNELS = ("sm80_gemm", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "Memcpy DtoH", "elementwise", "Event Sync")
CALLS = ("cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaGraphLaunch")

activity = st.tuples(st.integers(0, 400), st.integers(0, 60), st.sampled_from((7, 8, 20)),
                     st.sampled_from(KERNELS), st.integers(0, 12),
                     st.one_of(st.none(), st.tuples(st.sampled_from(["allreduce", "allgather", "_reduce_scatter_base",
                                                                     "send", "broadcast"]),
                                                    st.integers(0, 10**6), st.integers(0, 16))))
"""(start µs, duration µs, stream, name, correlation id, collective args (name, elements, group size) or None)."""
call = st.tuples(st.integers(0, 400), st.integers(0, 80), st.sampled_from(CALLS), st.integers(-1, 12),
                 st.sampled_from((1, 2)))
"""(start µs, duration µs, name, correlation id, thread)."""


def _same(xs, ys) -> bool:
    """Equal dataclass records, NaN equal to NaN."""
    def norm(x):
        return [(k, "nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in dataclasses.asdict(x).items()]
    return [norm(x) for x in xs] == [norm(y) for y in ys]


def _events(acts, calls, step_starts):
    ev = [{"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": lane, "ts": ts, "dur": dur,
           "args": {"stream": lane, "correlation": corr, **({} if c is None else {
               "Collective name": c[0], "In msg nelems": c[1], "Group size": c[2], "dtype": "Float"})}}
          for ts, dur, lane, n, corr, c in acts]
    ev += [{"ph": "X", "cat": "cuda_runtime", "name": n, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": {"correlation": corr}} for ts, dur, n, corr, tid in calls]
    ev += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": ts,
            "dur": 150} for i, ts in enumerate(step_starts)]
    return ev


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(activity, min_size=1, max_size=30), st.lists(call, max_size=30),
       st.lists(st.integers(0, 300), max_size=3, unique=True))
def test_same_results_as_the_reference_code(acts, calls, step_starts):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.json"
        path.write_text(json.dumps({"deviceProperties": [{"name": "x"}],
                                    "traceEvents": _events(acts, calls, sorted(step_starts))}))
        rank = read_rank(path)
    for window in [whole_trace(rank), *steps(rank)]:
        got = critical_path(rank, window)
        assert (got.span_s, got.by_category_s, got.num_nodes, got.top_kernels) == \
            reference_critical_path(rank, window)
        idle = idle_causes(rank, window)
        assert (idle.by_cause_s, idle.num_gaps) == reference_idle_causes(rank, window)
        samples = collective_samples(rank, window)
        assert _same(list(samples), reference_collective_samples(rank, window))
        assert _same(collective_inventory(samples), reference_collective_inventory(list(samples)))


def test_one_stream_of_200k_kernels_is_not_quadratic(tmp_path):
    """Each kernel launched 2 µs before it starts, back to back on stream 7 (the quadratic walk: hours)."""
    n = 200_000
    parts = []
    for i in range(n):
        ts = 10 + 3 * i
        parts.append(f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, '
                     f'"ts": {ts - 2}, "dur": 1, "args": {{"correlation": {i}}}}}')
        parts.append(f'{{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": {ts}, "dur": 3, '
                     f'"args": {{"stream": 7, "correlation": {i}}}}}')
    path = tmp_path / "long.json"
    path.write_text('{"deviceProperties": [{"name": "x"}], "traceEvents": [' + ",".join(parts) + "]}")
    rank = read_rank(path)
    t0 = time.perf_counter()
    cp = critical_path(rank, whole_trace(rank))
    idle = idle_causes(rank, whole_trace(rank))
    took = time.perf_counter() - t0
    assert cp.num_nodes == n  # every kernel, back to back (the whole-trace window starts at the first one)
    assert cp.by_category_s["compute"] == pytest.approx(3e-6 * n, rel=1e-9)
    assert idle.total_s < 1e-9  # back to back (gaps of float rounding only)
    assert took < 8.0, f"{took:.1f} s for {n:,} kernels"
