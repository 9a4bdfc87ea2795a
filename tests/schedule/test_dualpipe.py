"""DualPipe (DeepSeek-V3 report §3.2.1, Table 2): the program, its bubble and memory against the report's forms, the
closed form against the event simulator, and the plan knob's refusals."""
from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from narrowpath.catalog import load_scenario
from narrowpath.cli.main import main
from narrowpath.cost.memory import stage_memory
from narrowpath.errors import SimulationError, SpecError
from narrowpath.schedule.pipeline import dualpipe_bubble_s, dualpipe_paired_fraction, dualpipe_time_s, \
    pipeline_time_s
from narrowpath.schedule.sim import simulate
from narrowpath.schedule.sim.playback import play
from narrowpath.schedule.sim.programs import Pass, build_programs, completing_passes, order_dualpipe
from narrowpath.schedule.step import predict
from narrowpath.spec.plan import Plan
from tests.schedule.program_messages import posted_messages


def _passes(p: int, m: int, i: int) -> list[Pass]:
    return [x for grp in order_dualpipe(p, m, i) for x in grp]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.integers(0, 12))
def test_every_rank_runs_every_pass_of_both_directions_once_in_a_legal_order(half, extra):
    """pp = 2·half ranks, m = 2·pp + 2·extra micro-batches: each rank runs, per direction, m/2 forwards and for each
    micro-batch either a whole backward or an input-gradient backward followed later by its weight gradient; a
    micro-batch's backward comes after its forward; the program plays to its end (no deadlock)."""
    p, m = 2 * half, 4 * half + 2 * extra
    for i in range(p):
        seq = _passes(p, m, i)
        seen: dict = {}
        for k, x in enumerate(seq):
            seen.setdefault((x.kind, x.chunk, x.mb), []).append(k)
        for c in (0, 1):
            for mb in range(m // 2):
                assert len(seen[("F", c, mb)]) == 1
                whole, split = ("BW", c, mb) in seen, ("B", c, mb) in seen
                assert whole != split
                if split:
                    assert seen[("W", c, mb)][0] > seen[("B", c, mb)][0]
                b = seen[("BW" if whole else "B", c, mb)][0]
                assert b > seen[("F", c, mb)][0]
        assert len(seq) == sum(len(v) for v in seen.values())
    programs = build_programs("dualpipe", p, 1, m)
    durations = {(i, k, c): 1.0 + 0.1 * i + 0.3 * c for i in range(p) for k in ("F", "B", "W", "BW") for c in (0, 1)}
    assert len(play(programs, durations, {"F": 0.01, "B": 0.01}, mode="eager").ends_s) == p


def test_messages_flow_up_the_ranks_in_direction_0_and_down_in_direction_1():
    """A forward of direction 0 on rank i sends to i + 1, of direction 1 to i − 1; gradients go the other way; every
    send has its receive."""
    p, m = 4, 8
    sends, recvs = Counter(), Counter()
    for stage, mid, is_send in posted_messages(build_programs("dualpipe", p, 1, m)):
        kind, src, chunk, _, dst = mid
        step = 1 if (chunk == 0) == (kind == "F") else -1
        assert dst == src + step
        assert (src if is_send else dst) == stage
        (sends if is_send else recvs)[mid] += 1
    assert sends == recvs and set(sends.values()) == {1}


@pytest.mark.parametrize("p,m", [(4, 8), (4, 20), (8, 16), (8, 40), (16, 32), (16, 120)])
def test_bubble_is_table_2_at_the_usual_pass_ratios(p, m):
    """DeepSeek-V3 Table 2: DualPipe's bubble is (PP/2 − 1)(F&B + B − 3W). With F = 1, B = 2, W = 1 (a full backward
    twice a forward, its weight half half of it) and F&B = F + B: (PP/2 − 1)·(3 + 2 − 3) = PP − 2; pp 16 → 14.
    1F1B's (PP − 1)(F + B) = 45 at pp 16."""
    t = dualpipe_time_s([1.0] * p, [2.0] * p, [1.0] * p, m)
    assert t - m * 3.0 == pytest.approx(dualpipe_bubble_s(p, 3.0, 2.0, 1.0), abs=1e-12) == pytest.approx(p - 2)
    assert pipeline_time_s([3.0] * p, m) - m * 3.0 == pytest.approx((p - 1) * 3.0)


def test_table_2_is_an_estimate_at_other_ratios():
    """At F = B = 2W the program, played, has 14 F of bubble on 16 ranks where Table 2 estimates 10.5."""
    t = dualpipe_time_s([1.0] * 16, [1.0] * 16, [0.5] * 16, 64)
    assert t - 64 * 2.0 == pytest.approx(14.0)
    assert dualpipe_bubble_s(16, 2.0, 1.0, 0.5) == pytest.approx(10.5)


@pytest.mark.parametrize("p,m", [(4, 8), (8, 24), (16, 120)])
def test_peak_in_flight_is_pp_plus_one_split_as_1f1b_holds_each_stage(p, m):
    """Table 2's activation memory PP + 1, on the program: rank i's peak holds p − i micro-batches of direction 0 (its
    stage i) and i + 1 of direction 1 (stage p − 1 − i) at once — each stage s holds p − s, as under 1F1B, which is
    what cost.memory.dualpipe_rank_memory assumes. A micro-batch's activations are freed by its whole backward, or
    by its weight-gradient pass when the backward is split (the deferred W still reads the layer inputs)."""
    for i in range(p):
        live, best = [0, 0], (0, 0, 0)
        for x in _passes(p, m, i):
            live[x.chunk] += {"F": 1, "W": -1, "BW": -1}.get(x.kind, 0)
            if sum(live) > best[0]:
                best = (sum(live), live[0], live[1])
        assert best == (p + 1, p - i, i + 1)


def test_a_ranks_memory_is_its_two_stages():
    """Rank i: weights, gradients and optimizer state of stages i and p − 1 − i (each copy ZeRO-sharded within its
    own data-parallel group, as deepseek-ai/DualPipe keeps twin copies), activations of both at 1F1B depth, one
    runtime reserve, the larger temporaries."""
    s = load_scenario("deepseek-v3-h800-2048")
    one = predict(dataclasses.replace(s, plan=dataclasses.replace(s.plan, pipeline_schedule="auto")))
    two = predict(s)
    p = s.plan.pp
    for i in (0, 3, p - 1):
        a, b, r = one.memory_by_stage[i].items, one.memory_by_stage[p - 1 - i].items, two.memory_by_stage[i].items
        for k in ("weights", "gradients", "optimizer_state", "activations"):
            assert r[k] == pytest.approx(a[k] + b[k], rel=1e-12), k
        assert r["temporaries"] == max(a["temporaries"], b["temporaries"])
        assert r["runtime_reserve"] == a["runtime_reserve"]
    assert len(stage_memory(s, two.workload, two.attention_kernel)) == p


def test_step_work_is_the_busiest_ranks_two_stages():
    """The data-parallel sync and the optimizer are sized for the rank whose two stages hold the most parameters:
    DeepSeek-V3's rank with an MoE stage syncs its experts over the expert-data-parallel group too (under 1F1B the
    busiest single stage, the embedding's, has none), and its gradients are those two stages'."""
    s = load_scenario("deepseek-v3-h800-2048")
    two = predict(s)
    one = predict(dataclasses.replace(s, plan=dataclasses.replace(s.plan, pipeline_schedule="auto")))
    wl = two.workload
    p = s.plan.pp
    pairs = [(wl.stages[i].params + wl.stages[p - 1 - i].params,
              wl.stages[i].expert_params + wl.stages[p - 1 - i].expert_params) for i in range(p)]
    params, expert = max(pairs)
    rs = {tr.axis: tr for tr, _ in wl.step_transfers if tr.name.endswith("grad_reduce_scatter")}
    assert set(rs) == {"dp", "edp"} and expert > 0
    per_param = rs["dp"].message_bytes / (params - expert)
    assert rs["edp"].message_bytes == pytest.approx(expert * per_param, rel=1e-12)
    assert {tr.axis for tr, _ in one.workload.step_transfers if tr.name.endswith("grad_reduce_scatter")} == {"dp"}


def test_analysis_describes_the_critical_rank_not_one_stage_m_times():
    """analyze's op accounts for a DualPipe plan run the rank's two stages half the micro-batches each: their time is
    the step's compute less what compute also holds (host waits, the slowdown of overlapped traffic: 12.9 of
    14.1 s; the last stage's ops run every micro-batch would give 24.5 s)."""
    from narrowpath.analysis import analyze
    from narrowpath.analysis.context import critical_stage, rank_stages
    a = analyze(load_scenario("deepseek-v3-h800-2048"))
    pred = a.prediction
    crit = critical_stage(pred)
    assert rank_stages(pred, crit) == [(crit, 0.5), (15 - crit, 0.5)]
    ops_s = sum(r.total_s for r in a.context.ops if r.op.phase != "optimizer")
    assert ops_s < pred.breakdown_s["compute"] < 1.12 * ops_s
    assert a.distance.stage == crit and "pipeline rank" in a.distance.stage_note + " pipeline rank"


def test_paired_share_is_symmetric_and_highest_in_the_middle():
    """Rank i and rank p − 1 − i mirror each other, so stage s and stage p − 1 − s pair the same share of passes;
    the warm-up and drain run alone, fewer of them in the middle. pp 16, 120 micro-batches: 0.808 … 0.858."""
    f = [dualpipe_paired_fraction(s, 16, 120) for s in range(16)]
    assert f == pytest.approx(f[::-1])
    assert f[0] == min(f) and f[7] == max(f) and 0.8 < f[0] < f[7] < 0.87


def test_simulator_plays_what_the_closed_form_prices():
    """The event simulator (ranks running two stages, eager sends, gradients ready per direction) and the closed form
    agree within 1 % on DeepSeek-V3 (pp 16, ep 64, 120 micro-batches) and on a dense Llama-3 70B at pp 4."""
    s = load_scenario("deepseek-v3-h800-2048")
    llama = load_scenario("llama3-70b-h100-256")
    llama = dataclasses.replace(llama, plan=dataclasses.replace(llama.plan, vpp=1, pipeline_schedule="dualpipe"))
    for scn in (s, llama):
        r = simulate(scn, steps=1)
        assert r.schedule == "dualpipe"
        assert r.noise_free_step_time_s == pytest.approx(r.closed_form_step_time_s, rel=0.01)
    programs = build_programs("dualpipe", 4, 1, 8)
    done = completing_passes(programs)
    assert {(st_, c) for st_, _, c, _ in done} == {(i, c) for i in range(4) for c in (0, 1)}


def test_dualpipe_balances_deepseeks_heavy_last_stage():
    """Under 1F1B DeepSeek-V3's last stage (output layer, MTP) sets the pace; DualPipe runs it on rank 0 beside the
    light first stage, so the step is shorter and its bubble smaller — the report's 2,048-H800 throughput (~3.2 M
    tokens/s from 2.664 M GPU-hours for 14.8 T tokens) within 10 %."""
    s = load_scenario("deepseek-v3-h800-2048")
    dual = predict(s)
    one = predict(dataclasses.replace(s, plan=dataclasses.replace(s.plan, pipeline_schedule="auto")))
    assert dual.step_time_s < 0.8 * one.step_time_s
    assert dual.breakdown_s["bubble"] < one.breakdown_s["bubble"]
    assert dual.memory.fits
    assert dual.tokens_per_s == pytest.approx(14.8e12 / (2.664e6 * 3600 / 2048), rel=0.10)


def test_plan_and_scenario_refuse_what_dualpipe_cannot_run(capsys):
    """vpp > 1 (one chunk per direction), an odd pp, too few or an odd number of micro-batches: one line naming
    plan.pipeline_schedule, exit 2."""
    with pytest.raises(SpecError, match="plan.pipeline_schedule"):
        Plan(pp=4, vpp=2, pipeline_schedule="dualpipe")
    with pytest.raises(SpecError, match="plan.pipeline_schedule"):
        Plan(pipeline_schedule="zero-bubble")
    with pytest.raises(SimulationError, match="even number of pipeline stages"):
        build_programs("dualpipe", 3, 1, 12)
    cases = [["--pp", "4", "--vpp", "2"], ["--pp", "3", "--vpp", "1", "--gpus", "240"],
             ["--pp", "4", "--vpp", "1", "--gbs", "48"]]
    for flags in cases:
        assert main(["predict", "llama3-70b-h100-256", "--pipeline-schedule", "dualpipe", *flags]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("narrowpath: error: plan.pipeline_schedule") and "\n" not in err, err
    assert main(["simulate", "llama3-70b-h100-256", "--schedule", "dualpipe", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("narrowpath: error: plan.pipeline_schedule: dualpipe runs one chunk per direction on each rank; "
                   "needs vpp 1, got vpp 5")
    assert main(["simulate", "llama3-70b-h100-256", "--schedule", "dualpipe", "--pp", "1", "--vpp", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("narrowpath: error: --schedule dualpipe: needs an even number of pipeline stages")
    one = load_scenario("llama3-70b-h100-256")
    one = dataclasses.replace(one, plan=dataclasses.replace(one.plan, pp=1, vpp=1, dp=32,
                                                            pipeline_schedule="dualpipe"))
    assert one.plan.schedule == "1f1b" and not one.plan.dualpipe  # no pipeline, nothing changes


def test_json_and_console_say_dualpipe(capsys):
    assert main(["predict", "deepseek-v3-h800-2048", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan"]["pipeline_schedule"] == "dualpipe" and out["fits"]
    assert main(["predict", "deepseek-v3-h800-2048"]) == 0
    text = capsys.readouterr().out
    assert "schedule=dualpipe" in text and "most loaded pipeline rank" in text


def test_search_ranks_megatron_schedules_and_prices_dualpipe_for_its_best_plans(capsys):
    """A DualPipe scenario is searched as its Megatron twin (a note on stderr) and the fastest of the first ranked
    plans that fits under DualPipe is reported: DeepSeek-V3 pinned to pp 16 — faster than every 1F1B plan found,
    since DualPipe pairs the heavy last stage with the light first one."""
    args = ["search", "deepseek-v3-h800-2048", "--space", "basic", "--pp", "16", "--top", "1"]
    assert main(args + ["--json"]) == 0
    captured = capsys.readouterr()
    assert "DualPipe is priced for the best plan" in captured.err
    out = json.loads(captured.out)
    dual = out["best_dualpipe"]
    assert dual["pp"] == 16 and dual["fits"] and dual["memory_bytes"] <= 85.9e9
    assert dual["step_time_s"] < 0.8 * out["best"][0]["step_time_s"]
    assert main(["search", "llama3-8b-h100-8", "--space", "basic", "--top", "1", "--json"]) == 0
    assert "best_dualpipe" not in json.loads(capsys.readouterr().out)


def test_a_ranks_times_are_the_mean_of_its_two_stages():
    """schedule.step.dualpipe_ranks: rank i runs stage i and stage p − 1 − i for half the micro-batches each, so its
    per-micro-batch forward, backward, exposed traffic and host waits are the two stages' means; its layers both."""
    from narrowpath.schedule.step import StageTimes, dualpipe_ranks
    stages = [StageTimes(i, 3 + i, 1.0 + i, 2.0 + 2 * i, {"ep": 0.1 * i, "pp": 0.01}, 0.001 * (i + 1))
              for i in range(4)]
    ranks = dualpipe_ranks(stages)
    assert [r.index for r in ranks] == [0, 1, 2, 3]
    assert [r.layers for r in ranks] == [9, 9, 9, 9]
    assert ranks[0].fwd_compute_s == pytest.approx(2.5) and ranks[1].bwd_compute_s == pytest.approx(5.0)
    assert ranks[0].exposed_comm_s == pytest.approx({"ep": 0.15, "pp": 0.01})
    assert ranks[1].host_wait_s == pytest.approx(0.0025)
    assert ranks[0].total_s == pytest.approx((stages[0].total_s + stages[3].total_s) / 2)
