"""Critical path, idle-gap causes and the comparison with a prediction, on small traces whose answers are
worked out by hand (times in µs in the trace, seconds in the results)."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from narrowpath.schedule.step import TransferCost
from narrowpath.trace.analyze import analyze
from narrowpath.trace.compare import compare
from narrowpath.trace.critical_path import critical_path
from narrowpath.trace.idle import idle_causes
from narrowpath.trace.reader import read_rank, read_trace
from narrowpath.trace.windows import steps, whole_trace

US = 1e-6


def _kernel(name, ts, dur, stream, corr):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"stream": stream, "correlation": corr}}


def _launch(ts, dur, corr, name="cudaLaunchKernel"):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": {"correlation": corr}}


def _trace(events):
    return {"deviceProperties": [{"name": "test GPU"}], "distributedInfo": {"rank": 0, "world_size": 2},
            "traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
                             "ts": 0, "dur": 400}] + events}


# Host launches L1 (0-5), L2 (6-11), L3 (12-14). K1 gemm on stream 7 runs 10-110; K2 NCCL all-reduce on
# stream 8 runs 20-220; K3 on stream 7 waits for K2 (event wait) and runs 221-300.
EVENTS = [_launch(0, 5, 1), _launch(6, 5, 2), _launch(12, 2, 3),
          _kernel("sm80_gemm", 10, 100, 7, 1), _kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 20, 200, 8, 2),
          _kernel("elementwise_add", 221, 79, 7, 3)]


@pytest.fixture
def small(tmp_path, write_json):
    return read_rank(write_json(tmp_path / "small.json", _trace(EVENTS)))


def test_critical_path_follows_the_cross_stream_wait(small):
    """K3 <- (1 µs wait) K2 <- (9 µs launch delay) L2 <- (1 µs host) L1 <- step start: the all-reduce is on
    the path, the gemm is not."""
    (w,) = steps(small)
    cp = critical_path(small, w)
    c = cp.by_category_s
    assert cp.span_s == pytest.approx(300 * US)
    assert c["compute"] == pytest.approx(79 * US)
    assert c["communication"] == pytest.approx(200 * US)
    assert c["gpu_wait"] == pytest.approx(1 * US)
    assert c["launch_delay"] == pytest.approx(9 * US)
    assert c["runtime"] == pytest.approx(10 * US) and c["cpu"] == pytest.approx(1 * US)
    assert sum(c.values()) == pytest.approx(cp.span_s)
    assert cp.top_kernels[0][0].startswith("ncclDevKernel_AllReduce")


def test_idle_gap_on_stream_7_is_another_streams_wait(small):
    """Stream 7 idles 110-221: K3's launch (12) precedes K1's end, so not host wait; K2 ended 1 µs before."""
    idle = idle_causes(small, whole_trace(small))
    assert idle.by_cause_s["other_stream_wait"] == pytest.approx(111 * US)
    assert idle.by_cause_s["host_wait"] == 0.0 and idle.num_gaps == 1


def test_host_wait_when_the_launch_comes_late(tmp_path, write_json):
    events = [_launch(0, 5, 1), _launch(150, 5, 2), _kernel("sm80_gemm", 10, 100, 7, 1),
              _kernel("sm80_gemm", 160, 50, 7, 2)]
    r = read_rank(write_json(tmp_path / "late.json", _trace(events)))
    idle = idle_causes(r, whole_trace(r))
    assert idle.by_cause_s["host_wait"] == pytest.approx(50 * US)


def test_breakdown_of_the_small_trace(small):
    """Span 10-300 = 290 µs; busy 10-220 and 221-300 = 289 µs; compute 10-110 and 221-300 = 179 µs; the
    all-reduce 20-220 overlaps compute 20-110 = 90 of its 200 µs (45%)."""
    rep = analyze(read_trace(small.path))
    b = rep.ranks[0].breakdown
    assert b.span_s == pytest.approx(290 * US) and b.idle_s == pytest.approx(1 * US)
    assert b.compute_s == pytest.approx(179 * US) and b.exposed_comm_s == pytest.approx(110 * US)
    assert b.overlap_pct == pytest.approx(45.0)


def _transfer(op: str, axis: str, message_bytes: float, count: float, time_each_s: float, total_s: float,
              exposed_s: float) -> TransferCost:
    """A priced transfer as the step model reports it (the real class, so a renamed field fails here)."""
    return TransferCost(name=f"{axis}.{op}", op=op, axis=axis, message_bytes=message_bytes, count=count,
                        time_each_s=time_each_s, total_s=total_s, exposed_s=exposed_s, tier="scale_up",
                        algorithm="ring", group_size=8, phase="bwd")


@dataclass(frozen=True)
class FakePrediction:
    """The shape of narrowpath.schedule.step.StepPrediction that compare() reads."""

    step_time_s: float
    breakdown_s: dict
    transfers: tuple


def test_comparison_names_the_differences_that_matter(small):
    rep = analyze(read_trace(small.path))
    pred = FakePrediction(step_time_s=290 * US, breakdown_s={
        "compute": 250 * US, "exposed_tp_comm": 10 * US, "exposed_dp_comm": 10 * US, "bubble": 20 * US,
        "optimizer": 0.0}, transfers=(_transfer("all_reduce", "dp", 1e6, 1, 200 * US, 200 * US, 20 * US),
                                      _transfer("all_gather", "tp", 1e6, 4, 10 * US, 40 * US, 0.0)))
    cmp = compare(rep, pred)
    assert cmp.predicted_pct["exposed_comm"] == pytest.approx(100 * 20 / 290)
    assert cmp.observed_pct["exposed_comm"] == pytest.approx(100 * 110 / 290)
    text = "\n".join(cmp.differences)
    # shares and collectives are stated in percentage points of the step, largest first
    assert [d.split(":")[0] for d in cmp.differences] == ["overlap", "exposed communication", "compute",
                                                          "all_gather", "idle (predicted"]
    assert "exposed communication: observed 37.9% of the step vs predicted 6.9% (+31.0 percentage points)" in text
    assert "compute: observed 61.7% of the step vs predicted 86.2% (-24.5 percentage points)" in text
    # all_gather: 4 calls x 10 µs = 40 µs of a 290 µs step predicted, none observed
    assert ("all_gather: predicted 4 per step of 0.01 ms each, none observed; 0.0% of the step observed vs 13.8% "
            "predicted (-13.8 percentage points)") in text
    # overlap 45% vs 1 - 20/240 = 91.7%; hidden comm 90/290 = 31.0% vs 220/290 = 75.9% of the step
    assert "hidden communication 31.0% of the step observed vs 75.9% predicted (-44.8 percentage points)" in text
    assert "step time" not in text  # 290 µs on both sides
    assert "all_reduce" not in text  # 1 call of 200 µs on both sides


def test_blocking_copy_puts_the_gpu_back_on_the_path(tmp_path, write_json):
    """cudaMemcpyAsync to pageable memory (6-100) returns 2 µs after its copy (60-98) ends, so the host waited:
    K3 40 <- launch 5 <- L3 4 <- host 1 <- sync 2 <- copy 38 <- K1 50 <- launch 5 <- L1 5 = 150 µs."""
    memcpy = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 7,
              "ts": 60, "dur": 38, "args": {"stream": 7, "correlation": 2}}
    events = [_launch(0, 5, 1), _launch(6, 94, 2, name="cudaMemcpyAsync"), _launch(101, 4, 3),
              _kernel("sm80_gemm", 10, 50, 7, 1), memcpy, _kernel("sm80_gemm", 110, 40, 7, 3)]
    r = read_rank(write_json(tmp_path / "blocking.json", _trace(events)))
    (w,) = steps(r)
    c = critical_path(r, w).by_category_s
    expected = {"compute": 90, "memcpy": 38, "launch_delay": 10, "runtime": 9, "cpu": 1, "sync_wait": 2}
    for key, us in expected.items():
        assert c[key] == pytest.approx(us * US), key
    assert sum(c.values()) == pytest.approx(150 * US)


def test_event_sync_on_a_stream_is_other_not_idle(tmp_path, write_json):
    """Newer Kineto writes cuda_sync "Event Sync" activities; as in HTA they are device activities of class
    other: the 1 µs gap 220-221 on stream 7 covered by one is no longer idle. "Context Sync" (stream -1) is
    left out."""
    sync = {"ph": "X", "cat": "cuda_sync", "name": "Event Sync", "pid": 0, "tid": 7, "ts": 219, "dur": 2,
            "args": {"stream": 7, "correlation": 3, "wait_on_stream": 8}}
    ctx = {"ph": "X", "cat": "cuda_sync", "name": "Context Sync", "pid": 0, "tid": 7, "ts": 0, "dur": 5,
           "args": {"stream": -1, "correlation": 1}}
    r = read_rank(write_json(tmp_path / "sync.json", _trace(EVENTS + [sync, ctx])))
    b = analyze(read_trace(r.path)).ranks[0].breakdown
    assert b.idle_s == pytest.approx(0.0, abs=1e-12) and b.other_s == pytest.approx(1 * US)
    assert r.num_activities == 4
