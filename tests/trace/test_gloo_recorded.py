"""Traces recorded here, with torch.profiler, around a real two-process gloo DDP job (record_gloo.py)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from narrowpath.cli.main import main
from narrowpath.trace import schema
from narrowpath.trace.analyze import analyze
from narrowpath.trace.reader import read_trace

BYTES_PER_STEP = 4 * ((256 * 512 + 512) + (512 * 256 + 256))  # fp32 gradients of the MLP, all-reduced once


@pytest.fixture(scope="module")
def gloo_trace(gloo_dir):
    return read_trace(gloo_dir)


def test_both_ranks_read_as_cpu_only_job(gloo_trace):
    assert [r.rank for r in gloo_trace.ranks] == [0, 1]
    for r in gloo_trace.ranks:
        assert r.host_mode and r.world_size == 2 and r.rank_source == "distributedInfo"
        assert r.step_number.size == 3
        assert (r.act_kind == schema.KIND_HOST_COMM).sum() >= 6


def test_each_step_all_reduces_every_gradient_byte_once(gloo_trace):
    """DDP all-reduces each gradient once per step: the gloo all_reduce sizes of a step add up to the
    parameter bytes, whatever the bucketing."""
    ar = schema.COLLECTIVE_KINDS.index("all_reduce")
    for r in gloo_trace.ranks:
        for number, start, dur in zip(r.step_number, r.step_start_s, r.step_dur_s):
            in_step = (r.act_coll == ar) & (r.act_start_s >= start) & (r.act_start_s < start + dur)
            assert in_step.sum() >= 1
            assert r.act_message_bytes[in_step].sum() == BYTES_PER_STEP, f"rank {r.rank} step {number}"
            assert set(r.act_group_size[in_step]) == {2}


def test_accounts_on_the_recorded_job(gloo_trace):
    rep = analyze(gloo_trace)
    for r in rep.ranks:
        p = r.breakdown.pct()
        assert sum(p.values()) == pytest.approx(100.0)
        assert p["compute"] > 0 and r.breakdown.comm_s >= max(x.dur_s for x in r.samples) > 0
        assert r.breakdown.exposed_comm_s == pytest.approx(r.breakdown.comm_s - r.breakdown.overlap_s, abs=1e-9)
        assert 0.0 <= r.breakdown.overlap_pct <= 100.0
        ar = {c.kind: c for c in r.collectives}["all_reduce"]
        assert ar.group_size == 2 and math.isfinite(ar.median_busbw_bytes_per_s)
        assert sum(r.critical_path.by_category_s.values()) == pytest.approx(r.critical_path.span_s, rel=1e-6)
    s = rep.stragglers
    assert s is not None and s.num_matched >= 4 and not s.unmatched_kinds
    assert sum(s.last_arrival_count.values()) == s.num_matched
    assert all(0 < v < 10.0 for v in s.mean_step_s.values())
    for r in rep.ranks:  # per step: the two DDP buckets of every step, all gradient bytes
        for step in r.steps[:-1]:
            ar = {c.kind: c for c in step.collectives}["all_reduce"]
            assert ar.total_bytes == BYTES_PER_STEP


def test_cli_json_on_the_recorded_directory(gloo_dir, capsys):
    assert main(["trace", str(gloo_dir), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in out["ranks"]] == [0, 1]
    for r in out["ranks"]:
        assert set(r["breakdown_pct"]) >= {"compute", "exposed_comm", "memcpy", "idle"}
        assert 0 <= r["overlap_pct"] <= 100
    assert np.isclose(sum(out["ranks"][0]["breakdown_pct"].values()), 100.0)


def test_against_a_scenario_on_the_recorded_job(gloo_dir, capsys):
    """The recorded job beside a catalog prediction: observed step is the recorded one (ms, not the predicted
    seconds), and the all_reduce the job really ran is compared kind for kind."""
    pytest.importorskip("narrowpath.schedule.step")
    assert main(["trace", str(gloo_dir), "--against", "llama3-8b-h100-8", "--json"]) == 0
    against = json.loads(capsys.readouterr().out)["against"]
    assert 1e-4 < against["observed_step_s"] < 1.0
    assert {c["kind"] for c in against["observed_collectives"]} >= {"all_reduce"}
    assert any(d.startswith("step time") for d in against["differences"])


def test_host_kernel_breakdown_counts_each_thread_once(gloo_trace):
    """Nested host operators: the categories' times add up to the time the window's operators cover, per thread
    (the union of their intervals), not to their summed durations (every nesting level counted again)."""
    from narrowpath.trace import intervals
    from narrowpath.trace.kernels import kernel_breakdown
    from narrowpath.trace.windows import whole_trace
    for r in gloo_trace.ranks:
        w = whole_trace(r)
        covered = 0.0
        for tid in np.unique(r.act_lane[w.index]):
            i = w.index[r.act_lane[w.index] == tid]
            covered += intervals.length(*intervals.merge(r.act_start_s[i], r.act_start_s[i] + r.act_dur_s[i]))
        rows = kernel_breakdown(r, w)
        assert sum(k.total_s for k in rows) == pytest.approx(covered, rel=1e-9)
        assert sum(k.total_s for k in rows) < r.act_dur_s[w.index].sum()


def _host_op(name: str, tid: int, ts: float, dur: float, cat: str = "cpu_op") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def test_host_kernel_breakdown_uses_self_time(tmp_path, write_json):
    """Thread 1: DistributedDataParallel.forward 0-100 us holds aten::linear 10-50 (holding aten::addmm 12-48,
    holding aten::copy_ 20-25) and aten::linear 60-90 (holding aten::addmm 61-89); thread 2: gloo:all_reduce 30-70.
    Self times: forward 100 - 40 - 30 = 30 (other), linears 40 - 36 = 4 and 30 - 28 = 2, addmms 36 - 5 = 31 and
    28, copy_ 5, all_reduce 40. gemm = 4 + 31 + 2 + 28 = 65 us over 2 GEMMs (each addmm is inside a linear);
    the whole 100 + 40 = 140 us, so gemm's share is 65/140 = 46.43 %. Summed whole it read 40 + 36 + 30 + 28 = 134 us
    of gemm in 4 ops, a share of 134/279."""
    from narrowpath.trace.kernels import kernel_breakdown
    from narrowpath.trace.reader import read_rank
    from narrowpath.trace.windows import whole_trace
    events = [_host_op("DistributedDataParallel.forward", 1, 0, 100, "user_annotation"),
              _host_op("aten::linear", 1, 10, 40), _host_op("aten::addmm", 1, 12, 36),
              _host_op("aten::copy_", 1, 20, 5),
              _host_op("aten::linear", 1, 60, 30), _host_op("aten::addmm", 1, 61, 28),
              _host_op("gloo:all_reduce", 2, 30, 40, "user_annotation")]
    r = read_rank(write_json(tmp_path / "host.json", {"traceEvents": events}))
    assert r.host_mode
    rows = {k.category: k for k in kernel_breakdown(r, whole_trace(r))}
    assert rows["gemm"].num_kernels == 2 and rows["gemm"].total_s == pytest.approx(65e-6)
    assert rows["gemm"].share_pct == pytest.approx(100 * 65 / 140)
    assert rows["other"].total_s == pytest.approx(30e-6) and rows["elementwise"].total_s == pytest.approx(5e-6)
    assert rows["communication"].total_s == pytest.approx(40e-6)
    assert sum(k.total_s for k in rows.values()) == pytest.approx(140e-6)
