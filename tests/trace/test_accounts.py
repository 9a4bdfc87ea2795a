"""Observed accounts: HTA's numbers on the real traces, interval algebra against brute force, nccl-tests
bandwidth factors, and parts that add up."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from narrowpath.trace import intervals, schema
from narrowpath.trace.analyze import analyze, report_to_dict
from narrowpath.trace.breakdown import temporal_breakdown
from narrowpath.trace.collectives import busbw_factor
from narrowpath.trace.kernels import kernel_breakdown
from narrowpath.trace.reader import read_rank, read_trace
from narrowpath.trace.windows import whole_trace


@dataclass(frozen=True)
class HTA:
    """Golden values printed by HolisticTraceAnalysis 0.5.0 (get_comm_comp_overlap, get_temporal_breakdown)
    on the same files (benchmarks/bench_trace_hta.py reproduces them when HTA is installed)."""

    fixture: str
    rank: int
    overlap_pct: float
    compute_pct: float
    idle_pct: float
    non_compute_pct: float


GOLDEN = [
    HTA("r16_path", 0, 1.37, 14.15, 69.44, 16.41),
    HTA("pp0", 0, 11.81, 17.71, 53.56, 28.74),
    HTA("pp1", 1, 20.05, 22.57, 54.72, 22.72),
    # HTA floors ns-resolution timestamps to whole µs on this file (pytorch#122425); we keep the ns.
    HTA("ddp_path", 0, 14.31, 17.26, 77.78, 4.97),
]


@pytest.mark.parametrize("case", GOLDEN, ids=lambda c: f"{c.fixture}-{c.rank}")
def test_overlap_and_breakdown_within_one_point_of_hta(case, request, pp_paths):
    path = {"pp0": pp_paths[0], "pp1": pp_paths[1]}.get(case.fixture) or request.getfixturevalue(case.fixture)
    r = read_rank(path)
    b = temporal_breakdown(r, whole_trace(r))
    p = b.pct()
    assert abs(b.overlap_pct - case.overlap_pct) <= 1.0
    assert abs(p["compute"] - case.compute_pct) <= 1.0
    assert abs(p["idle"] - case.idle_pct) <= 1.0
    assert abs(p["exposed_comm"] + p["memcpy"] - case.non_compute_pct) <= 1.0
    assert sum(p.values()) == pytest.approx(100.0)


def test_exact_on_whole_microsecond_traces(r16_path):
    """Integer-µs trace: identical to HTA to its two printed decimals."""
    r = read_rank(r16_path)
    b = temporal_breakdown(r, whole_trace(r))
    assert round(b.overlap_pct, 2) == 1.37
    assert round(b.pct()["compute"], 2) == 14.15 and round(b.pct()["idle"], 2) == 69.44


intervals_st = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 30)), min_size=0, max_size=25)


def _covered(ivs) -> set[int]:
    return {t for s, d in ivs for t in range(s, s + d)}


@settings(max_examples=150, deadline=None)
@given(intervals_st, intervals_st)
def test_union_and_intersection_match_brute_force(a, b):
    """On integer grids, merged length = |union of unit cells| and intersection = |common cells|."""
    def merged(ivs):
        s = np.array([x[0] for x in ivs], float)
        e = np.array([x[0] + x[1] for x in ivs], float)
        return intervals.merge(s, e)
    (as_, ae), (bs, be) = merged(a), merged(b)
    assert intervals.length(as_, ae) == len(_covered(a))
    assert intervals.intersection(as_, ae, bs, be) == len(_covered(a) & _covered(b))
    assert np.all(as_[1:] > ae[:-1]) if as_.size > 1 else True


@pytest.mark.parametrize("kind,n,factor", [("all_reduce", 8, 1.75), ("all_reduce", 2, 1.0),
                                           ("all_gather", 8, 0.875), ("reduce_scatter", 4, 0.75),
                                           ("all_to_all", 16, 15 / 16), ("broadcast", 8, 1.0),
                                           ("send_recv", 2, 1.0), ("all_reduce", 0, 1.0)])
def test_busbw_factors_are_nccl_tests(kind, n, factor):
    assert busbw_factor(kind, n) == pytest.approx(factor)


def test_ddp_collective_inventory(ddp_path):
    """AllReduce over 2 ranks: busbw = algbw × 2(n-1)/n = algbw; sizes from In/Out msg nelems × 4 bytes."""
    rep = analyze(read_trace(ddp_path))
    colls = {c.kind: c for c in rep.ranks[0].collectives}
    ar = colls["all_reduce"]
    assert ar.group_size == 2 and ar.count == 10  # 15 in the file, 5 launched in the dropped last step
    assert ar.max_message_bytes == 31502336.0
    assert 1e9 < ar.median_busbw_bytes_per_s < 300e9  # A100 NVLink/PCIe range
    s = [x for x in rep.ranks[0].samples if x.kind == "all_reduce"][0]
    assert s.busbw_bytes_per_s == pytest.approx(s.message_bytes / s.dur_s)


def test_report_parts_add_up(ddp_path, pp_paths):
    rep = analyze(read_trace([ddp_path]))
    r = rep.ranks[0]
    assert len(r.steps) == 3
    for s in r.steps:
        assert sum(s.breakdown.pct().values()) == pytest.approx(100.0)
    cp = r.critical_path
    assert sum(cp.by_category_s.values()) == pytest.approx(cp.span_s, rel=1e-6)
    assert cp.step in (4, 5)  # the longest complete step, never the dropped last one
    assert sum(r.idle.by_cause_s.values()) > 0
    assert sum(k.share_pct for k in r.kernels) == pytest.approx(100.0)
    js = report_to_dict(rep)
    assert set(js["ranks"][0]["breakdown_pct"]) >= {"compute", "exposed_comm", "memcpy", "idle"}


def test_stragglers_between_two_real_ranks(pp_paths):
    """Pipeline ranks 0 and 1 of a sampled job: five collectives each in the window (by their nccl: annotations
    2 all_to_all, 2 all_reduce, 1 all_gather, all SendRecv kernels), matched by order within each kind. Only the
    first all_reduce and the all_gather overlap on both ranks (their ends agree within 0.3 ms); the other three
    order-matched pairs are not one collective (rank 0's all_reduce #1 ends at 316.9 ms, rank 1's starts at
    433.2 ms) and are dropped — they once made rank 1 '5 times last, 62.48 ms late on average, 164.19 ms at most'."""
    rep = analyze(read_trace(list(pp_paths)))
    s = rep.stragglers
    assert s is not None and s.num_matched == 2 and s.num_dropped == 3 and s.unmatched_kinds == ()
    assert not s.groups_known  # these traces carry no pg_config
    assert sorted(w[0] for w in s.worst) == ["all_gather", "all_reduce"]
    assert s.last_arrival_count == {0: 0, 1: 2}  # rank 1 (next pipeline stage) reaches both last
    assert s.mean_lateness_s[0] == 0.0 and 1e-3 < s.mean_lateness_s[1] < 2e-3
    assert 3e-3 < s.max_lateness_s[1] < 3.5e-3
    from narrowpath.report.trace_tables import format_report
    text = format_report(rep)
    assert "matched by order within each kind (the traces carry no process groups); 3 order-matched" in text


def test_order_matched_collectives_must_overlap():
    """A set matched by order is one collective only where the ranks' intervals share an instant."""
    from narrowpath.trace.stragglers import one_collective
    start = np.array([[0.0, 10.0, 20.0], [1.0, 12.0, 20.5]])
    end = np.array([[2.0, 11.0, 21.0], [2.0, 13.0, 21.0]])
    assert one_collective(start, end).tolist() == [True, False, True]


def test_steps_partition_the_device_timeline(r16_path):
    """On a100-16rank the GPU runs ~160 ms behind the CPU, so a step's own kernels span ~375 ms while the
    iteration takes ~215 ms. A step's device slice runs from its first kernel to the next step's: the complete
    steps' slices match their ProfilerStep CPU durations within 1.5 ms and tile the timeline without overlap."""
    from narrowpath.trace.windows import steps
    r = read_rank(r16_path)
    ws = steps(r)
    assert [w.step for w in ws] == [550, 551, 552, 553, 554]
    for w, nxt in zip(ws[:-1], ws[1:]):
        b = temporal_breakdown(r, w)
        assert b.span_s == pytest.approx(w.end_s - w.start_s, abs=1.5e-3)
        assert w.span_end_s == nxt.span_start_s
        assert sum(b.pct().values()) == pytest.approx(100.0)
        own = r.act_end_s[w.index].max() - r.act_start_s[w.index].min()
        assert own > 1.6 * b.span_s  # what the old window measured
    busy = sum(temporal_breakdown(r, w).span_s - temporal_breakdown(r, w).idle_s for w in ws)
    lo, hi = ws[0].span_start_s, ws[-1].span_end_s  # every activity on the device in that time, once
    s, e = intervals.merge(np.clip(r.act_start_s, lo, hi), np.clip(r.act_end_s, lo, hi))
    assert busy == pytest.approx(intervals.length(s, e), rel=1e-9)  # no device time counted twice


def test_empty_step_has_zero_breakdown_not_a_division_by_zero(tmp_path, write_json):
    """A ProfilerStep that launched nothing gives an all-zero breakdown (no NaN, no ZeroDivisionError)."""
    events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
               "ts": 100 * i, "dur": 90} for i in (1, 2, 3)]
    events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 110,
                "dur": 5, "args": {"correlation": 1}},
               {"ph": "X", "cat": "kernel", "name": "sm80_gemm", "pid": 0, "tid": 7, "ts": 120, "dur": 30,
                "args": {"stream": 7, "correlation": 1}}]
    path = write_json(tmp_path / "t.json", {"deviceProperties": [{"name": "g"}], "traceEvents": events})
    rep = analyze(read_trace(path))
    by_step = {s.step: s.breakdown for s in rep.ranks[0].steps}
    assert by_step[1].span_s == pytest.approx(30e-6) and by_step[1].pct()["compute"] == pytest.approx(100.0)
    assert by_step[2].span_s == 0.0 and by_step[2].pct() == {"compute": 0.0, "exposed_comm": 0.0, "memcpy": 0.0,
                                                              "idle": 0.0}


@pytest.mark.parametrize("name,category", [
    # FBGEMM-GPU kernels: `fbgemm` holds "gemm" but they are embedding lookups, permutes and FP8 casts
    ("void fbgemm_gpu::permute_2D_data_kernel<true, int, int, float>(int, int, int, int const*, float const*)",
     "other"),
    ("void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<float, float, float, 1ul, "
     "16>(at::PhiloxCudaState, fbgemm_gpu::FixedDivisor)", "other"),
    ("void at::native::vectorized_elementwise_kernel<4, fbgemm_gpu::_float_to_hfp8_gpu(at::Tensor const&, long, "
     "long, double)::{lambda(float)#1}>", "elementwise"),
    # the GEMMs of the A100 traces stay GEMMs
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_"
     "128x128_16x4_nn_align4::Params)", "gemm"),
    ("ampere_sgemm_128x64_nn", "gemm"),
    ("void sgemm_largek_lds64<true, true, 6, 3, 4, 5, 2, 66>(float*, float const*)", "gemm"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel"
     "__5x_cublas", "gemm"),
    ("void gemmk1_kernel<float, 256, 5, false, false, false, false>(cublasGemvParams<float>)", "gemm"),
])
def test_fbgemm_kernels_are_not_gemms(name, category):
    assert schema.kernel_category(name) == category


def test_pp_rank1_gemm_time_without_fbgemm(pp_paths):
    """pp-128rank rank 1: 'gemm' summed 108.55 ms (211 kernels) while 74.23 ms (18 kernels) of it were FBGEMM-GPU's
    (split_embedding_*, fbgemm_gpu::*, found by `fbgemm_gpu::` in their names): the GEMMs are 34.32 ms (193)."""
    r = read_rank(pp_paths[1])
    rows = {k.category: k for k in kernel_breakdown(r, whole_trace(r))}
    assert rows["gemm"].num_kernels == 193 and rows["gemm"].total_s == pytest.approx(34.32e-3, abs=0.01e-3)
