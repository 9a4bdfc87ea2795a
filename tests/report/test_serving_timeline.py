"""The logged lane of a serving run as its timeline and KV figures show it: each iteration record starts where the
one before it ended (an offline lane is never idle), the Chrome-trace slices tile the run without overlap, and a
merged run of decode steps accounts the KV blocks its steps hold (their growth included) as stepping one
iteration at a time does."""
from __future__ import annotations

import numpy as np
import pytest

from narrowpath.catalog import model, system
from narrowpath.report.serving_timeline import serving_timeline_events
from narrowpath.schedule.serving_run import simulate
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario


def _scn(plan: ServingPlan, load: Load) -> ServingScenario:
    return ServingScenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=plan, load=load,
                           num_gpus=plan.num_gpus)


def test_iteration_records_start_where_the_last_one_ended():
    """Offline, 4 requests of 100 + 10 tokens: the prompt iteration starts at 0 and the merged decode run right
    after it, ending when the requests finish (a record used to carry its end time as its start)."""
    run = simulate(_scn(ServingPlan(), Load(arrival="offline", input_tokens=100, output_tokens=10,
                                            num_requests=4)))
    log, res = run.result.log, run.result
    assert log[0].start_s == 0.0 and log[0].prompt_tokens == 400
    assert log[1].start_s == log[0].duration_s == res.first_token_s[0]
    assert log[-1].start_s + log[-1].duration_s == pytest.approx(res.finish_s.max(), rel=1e-12)
    events = [e for e in serving_timeline_events(run) if e.get("ph") == "X"]
    assert events[0]["ts"] == 0.0
    for a, b in zip(events, events[1:]):
        assert b["ts"] == pytest.approx(a["ts"] + a["dur"], rel=1e-9)


def test_a_busy_lane_s_records_tile_its_run():
    """An offline load (all requests queued at 0, so the lane never idles) with chunked prompts and merged decode
    runs: the records abut from 0 to the last finish."""
    run = simulate(_scn(ServingPlan(max_num_tokens=512, max_batch=16),
                        Load(arrival="offline", input_tokens=700, output_tokens=60, num_requests=40)))
    log = run.result.log
    starts = np.array([r.start_s for r in log])
    ends = starts + np.array([r.duration_s for r in log])
    assert starts[0] == 0.0 and any(r.steps > 1 for r in log)
    np.testing.assert_allclose(starts[1:], ends[:-1], rtol=1e-12)
    assert ends[-1] == pytest.approx(run.result.finish_s.max(), rel=1e-12)


@pytest.mark.parametrize("policy", ["decode-first", "prefill-first"])
def test_merged_decode_runs_hold_the_kv_blocks_stepping_holds(policy):
    """On-demand KV (a block more whenever a context crosses one) in a small cache, arrivals during decodes:
    the block-seconds of merged runs (the trapezoid of each run's first and last steps) match stepping one
    iteration at a time within 0.5 % (they were 1.5–2 % low when a run counted its first step's blocks only), and
    the peak is the same."""
    plan = ServingPlan(policy=policy, admission="on-demand", kv_memory_fraction=0.02, max_batch=48)
    load = Load(arrival="poisson", rate_per_s=40, input_tokens=300, output_tokens=300, num_requests=120)
    merged = simulate(_scn(plan, load)).result
    stepped = simulate(_scn(plan, load), merge=False).result
    assert merged.totals.iterations == stepped.totals.iterations
    assert sum(r.steps > 1 for r in merged.log) > 10
    assert merged.totals.kv_block_s == pytest.approx(stepped.totals.kv_block_s, rel=5e-3)
    assert merged.totals.kv_peak_blocks == stepped.totals.kv_peak_blocks
    assert merged.kv_utilisation == pytest.approx(stepped.kv_utilisation, rel=5e-3)


def test_a_merged_run_s_peak_is_its_last_step_s_blocks():
    """A disaggregated deployment's decode lane under on-demand KV: its contexts cross blocks within merged runs,
    so the peak is read at a run's last step (a run counted only its first step's blocks: 484 of 486 here)."""
    plan = ServingPlan(replicas=3, prefill_replicas=1, max_batch=48, admission="on-demand")
    load = Load(arrival="poisson", rate_per_s=30, input_tokens=500, output_tokens=100, num_requests=150)
    merged = simulate(_scn(plan, load)).result
    stepped = simulate(_scn(plan, load), merge=False).result
    assert any(r.steps > 1 and r.role == "decode" for r in merged.log)
    assert merged.totals.kv_peak_blocks == stepped.totals.kv_peak_blocks
    assert merged.totals.kv_block_s == pytest.approx(stepped.totals.kv_block_s, rel=5e-3)


def test_a_disaggregated_run_logs_each_instance_on_its_own_track():
    """The log holds one prefill-instance lane and one decode-instance lane, whose iterations overlap in time: each
    role's records follow one another without overlap, and the timeline puts them on two named threads (they
    were one track of overlapping slices)."""
    plan = ServingPlan(replicas=2, prefill_replicas=1, max_batch=32)
    run = simulate(_scn(plan, Load(arrival="poisson", rate_per_s=20, input_tokens=600, output_tokens=80,
                                   num_requests=60)))
    log = run.result.log
    assert {r.role for r in log} == {"prefill", "decode"}
    for role in ("prefill", "decode"):
        recs = [r for r in log if r.role == role]
        for a, b in zip(recs, recs[1:]):
            assert b.start_s >= a.start_s + a.duration_s - 1e-12
    assert all(r.prompt_tokens == 0 for r in log if r.role == "decode")
    assert all(r.decodes == 0 for r in log if r.role == "prefill")
    events = serving_timeline_events(run)
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {1: "prefill instance: iterations", 2: "decode instance: iterations"}
    slices = [e for e in events if e.get("ph") == "X"]
    for tid in names:
        mine = [e for e in slices if e["tid"] == tid]
        assert mine and all(b["ts"] >= a["ts"] + a["dur"] - 1e-6 for a, b in zip(mine, mine[1:]))


def test_the_lane_plot_drops_to_zero_while_the_lane_idles():
    """Two iterations with an idle second between them: the step plot's points hold each value for its iteration
    and read 0 in the gap and after the last (the step plot held a value across the idle time)."""
    from narrowpath.report.serving_plots import idle_steps
    from narrowpath.schedule.serving_stats import IterationRecord
    recs = [IterationRecord(0.0, 0.5, 1, 0, 600, 10.0), IterationRecord(1.5, 0.25, 1, 0, 300, 5.0),
            IterationRecord(1.75, 0.25, 3, 2, 0, 6.0)]
    assert idle_steps(recs, "prompt_tokens") == ([0.0, 0.5, 1.5, 1.75, 2.0], [600, 0, 300, 0, 0])
    assert idle_steps(recs, "kv_blocks_used") == ([0.0, 0.5, 1.5, 1.75, 2.0], [10.0, 0, 5.0, 6.0, 0])


def test_a_static_run_logs_one_lane_on_one_track():
    """Static batching logs its batches through its own path (serving_run._static): one role, `lane`, on the
    timeline's one "iterations" thread, the prompt pass at 0 and the decode runs after it."""
    run = simulate(_scn(ServingPlan(policy="static", max_batch=8),
                        Load(arrival="offline", input_tokens=128, output_tokens=16, num_requests=16)))
    log = run.result.log
    assert {r.role for r in log} == {"lane"} and log[0].start_s == 0.0 and log[0].prompt_tokens == 8 * 128
    events = serving_timeline_events(run)
    assert [e["args"]["name"] for e in events if e["name"] == "thread_name"] == ["iterations"]
    assert {e["tid"] for e in events if e.get("ph") == "X"} == {1}


def test_each_logged_lane_keeps_its_own_records_up_to_the_limit(monkeypatch):
    """The log's record limit holds per lane: a disaggregated run's prefill lane logs first and used to fill the
    shared limit, leaving the decode lane none."""
    from narrowpath.schedule import serving_sim
    monkeypatch.setattr(serving_sim, "LOG_LIMIT", 5)
    plan = ServingPlan(replicas=2, prefill_replicas=1, max_batch=32)
    log = simulate(_scn(plan, Load(arrival="poisson", rate_per_s=20, input_tokens=600, output_tokens=80,
                                   num_requests=60))).result.log
    assert [r.role for r in log] == ["prefill"] * 5 + ["decode"] * 5
