"""Disaggregated deployments whose prefill instances have a layout and limits of their own (ServingPlan.prefill_*):
the spec, the hand-off between two layouts, the simulation and the command line."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from narrowpath.catalog import model, system
from narrowpath.cli.main import main
from narrowpath.errors import SpecError
from narrowpath.schedule.serving_run import simulate
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from narrowpath.workload.serving_comm import kv_handoff_bytes_per_gpu


def _scn(plan: ServingPlan, load: Load, mdl: str = "llama3-8b", sysm: str = "dgx-h100") -> ServingScenario:
    return ServingScenario(system=system(sysm), model=model(mdl), plan=plan, load=load, num_gpus=plan.num_gpus)


def test_the_prefill_pool_is_a_plan_of_its_own_and_its_gpus_add_up():
    """TensorRT-LLM's disaggregated DeepSeek-R1 deployment: one DEP4 context server (tp 1, attention dp 4, ep 4)
    beside four TEP8 generation servers (tp 8, ep 8): 4 + 4·8 = 36 GPUs."""
    p = ServingPlan(tp=8, ep=8, replicas=5, prefill_replicas=1, prefill_tp=1, prefill_dp=4, prefill_ep=4,
                    prefill_max_batch=4, prefill_max_num_tokens=4608, max_batch=32, max_num_tokens=128)
    pool = p.prefill_pool()
    assert (pool.tp, pool.dp, pool.ep, pool.pp, pool.replicas, pool.prefill_replicas) == (1, 4, 4, 1, 1, 0)
    assert (pool.max_batch, pool.max_num_tokens) == (4, 4608)
    assert p.num_gpus == 36 and p.instance_gpus == 8
    assert ServingPlan(replicas=3, prefill_replicas=1).prefill_pool() is None  # one layout: today's plan
    same = ServingPlan(tp=2, replicas=3, prefill_replicas=1, prefill_pp=2).prefill_pool()
    assert (same.tp, same.pp, same.max_batch) == (2, 2, 0)  # unstated: the decode layout's, the stack's limits


def test_prefill_knobs_need_prefill_instances():
    with pytest.raises(SpecError, match="plan.prefill_tp: lays out prefill-only instances"):
        ServingPlan(replicas=2, prefill_tp=2)


@pytest.mark.parametrize("kw,where,text", [
    (dict(prefill_tp=3), "plan.prefill_tp", "does not divide model.heads"),
    (dict(prefill_dp=2), "plan.prefill_dp", "attention data parallelism needs an MoE model"),
    (dict(prefill_tp=16), "plan.prefill_tp", "exceeds the scale-up domain"),
])
def test_a_prefill_layout_that_cannot_run_is_refused_naming_its_field(kw, where, text):
    plan = ServingPlan(replicas=3, prefill_replicas=1, **kw)
    with pytest.raises(SpecError) as e:
        _scn(plan, Load(input_tokens=100, output_tokens=10))
    assert e.value.field == where and text in str(e.value)


def test_a_gpu_count_that_misses_the_prefill_pool_is_refused():
    plan = ServingPlan(replicas=3, prefill_replicas=1, prefill_tp=4)
    assert plan.num_gpus == 2 + 4
    with pytest.raises(SpecError, match=r"2·1 \+ 1·4 = 6 does not equal num_gpus 3"):
        ServingScenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=plan,
                        load=Load(input_tokens=100, output_tokens=10), num_gpus=3)


def test_a_hand_off_between_two_layouts_is_bound_by_the_side_holding_more_per_gpu():
    """Per GPU and prompt token: a sender holding a request's KV on one GPU (attention DP) moves all of it; a
    tensor-parallel receiver of 8 GPUs takes an eighth on each — the sender's port bounds it (and the other way
    round)."""
    assert kv_handoff_bytes_per_gpu(1000.0, 100) == 100_000.0  # one layout: each GPU its own shard
    assert kv_handoff_bytes_per_gpu(8000.0, 100, 1000.0) == 800_000.0
    assert kv_handoff_bytes_per_gpu(1000.0, 100, 8000.0) == 800_000.0


def test_a_prefill_pool_stated_as_the_decode_layout_runs_as_one_layout():
    """Giving the prefill pool the decode instances' own layout and limits changes nothing: the same lanes, costs
    and times (open and closed loop)."""
    base = ServingPlan(replicas=3, prefill_replicas=1, max_batch=16, max_num_tokens=2048)
    own = dataclasses.replace(base, prefill_tp=1, prefill_max_batch=16, prefill_max_num_tokens=2048)
    for load in (Load(arrival="poisson", rate_per_s=20, input_tokens=400, output_tokens=300, num_requests=120),
                 Load(arrival="offline", concurrency=9, input_tokens=400, output_tokens=300, num_requests=120)):
        a, b = simulate(_scn(base, load)), simulate(_scn(own, load))
        assert a.prefill_cost is None and b.prefill_cost is not None
        np.testing.assert_allclose(a.result.first_token_s, b.result.first_token_s, rtol=1e-12)
        np.testing.assert_allclose(a.result.finish_s, b.result.finish_s, rtol=1e-12)
        assert a.result.lanes == b.result.lanes == 3


def test_a_faster_prefill_pool_shortens_the_time_to_first_token_only():
    """Long prompts on one prefill and two decode GPUs, then on a tp-4 prefill instance: the prompts finish sooner
    (lower TTFT at the same arrivals), the decode instances' steps are the same (TPOT within a few per cent: the
    batches they see are alike), and the deployment counts the prefill pool's GPUs and lanes."""
    load = Load(arrival="poisson", rate_per_s=6, input_tokens=4000, output_tokens=100, num_requests=60)
    one = simulate(_scn(ServingPlan(replicas=3, prefill_replicas=1), load))
    four = simulate(_scn(ServingPlan(replicas=3, prefill_replicas=1, prefill_tp=4), load))
    assert four.scenario.num_gpus == 6 and four.result.lanes == 3
    assert np.median(four.result.ttft_s) < 0.6 * np.median(one.result.ttft_s)
    assert np.median(four.result.tpot_s) == pytest.approx(np.median(one.result.tpot_s), rel=0.05)
    assert four.prefill_cost.scn.plan.tp == 4 and four.cost.scn.plan.tp == 1


def test_the_prefill_pool_gets_its_own_stack_limits():
    """A decode pool held to 128 tokens per iteration (TensorRT-LLM's generation servers) does not hold the
    prefill pool to it: its limits are the stack's for its own layout unless given."""
    load = Load(arrival="offline", input_tokens=3000, output_tokens=20, num_requests=16)
    run = simulate(_scn(ServingPlan(replicas=3, prefill_replicas=1, max_batch=8, max_num_tokens=128,
                                    prefill_tp=2), load))
    assert run.limits.max_num_tokens == 128
    assert run.prefill_limits.max_num_tokens > 3000
    assert any(x.startswith("prefill max_num_tokens:") for x in run.result.notes)
    assert any(x.startswith("policy:") for x in run.result.notes)  # the decode pool's choices are kept beside them


def test_the_hand_off_note_names_the_fabric_it_crosses():
    """Two tp-8 instances on 8-GPU NVLink domains hand off over the NICs; a tp-2 prefill instance beside a tp-2
    decode instance stays inside one domain."""
    load = Load(arrival="offline", input_tokens=1000, output_tokens=5, num_requests=4)
    wide = simulate(_scn(ServingPlan(tp=8, replicas=2, prefill_replicas=1), load)).result.notes
    near = simulate(_scn(ServingPlan(tp=2, replicas=2, prefill_replicas=1), load)).result.notes
    assert any(x.startswith("KV hand-off of a 1000-token prompt") and x.endswith("(scale-out fabric)") for x in wide)
    assert any(x.endswith("(scale-up fabric)") for x in near)


def test_serve_runs_a_prefill_pool_from_flags(capsys):
    rc = main(["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "6", "--prefill-replicas", "1",
               "--prefill-tp", "4", "--offline", "--input-len", "1000", "--output-len", "50", "--num-requests", "40",
               "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["output_tokens_per_s"] > 0
    assert out["scenario"]["plan"]["replicas"] == 3 and out["scenario"]["plan"]["prefill_tp"] == 4


def test_serve_refuses_a_prefill_layout_in_one_line(capsys):
    rc = main(["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--replicas", "2", "--prefill-replicas", "1",
               "--prefill-tp", "3", "--offline", "--input-len", "100", "--output-len", "5"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "plan.prefill_tp" in err


def test_serve_counts_a_prefill_pool_stated_in_the_file(tmp_path, capsys):
    """--gpus with a file that gives the prefill pool: the pool's GPUs come off the count before the decode
    instances are derived (a reviewer's case: 10 GPUs were 'not a multiple of 8')."""
    f = tmp_path / "pool.yaml"
    f.write_text("model: llama3-8b\nsystem: dgx-h100\nplan: {tp: 8, replicas: 3, prefill_replicas: 2, prefill_tp: 1}\n"
                 "workload: {scenario: offline, input_tokens: 500, output_tokens: 20, num_requests: 20}\n")
    for gpus, replicas in ((10, 3), (18, 4)):
        assert main(["serve", str(f), "--gpus", str(gpus), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert (out["scenario"]["num_gpus"], out["scenario"]["plan"]["replicas"]) == (gpus, replicas)
    assert main(["serve", str(f), "--gpus", "16"]) == 2
    assert "--gpus: 16 GPUs left by the prefill pool's 2 are not a multiple of tp·dp·pp = 8" in capsys.readouterr().err


def test_an_error_of_the_prefill_pool_alone_says_so():
    plan = ServingPlan(dp=2, ep=2, replicas=3, prefill_replicas=1, prefill_ep=1, expert_balance="eplb",
                       redundant_experts=2)
    with pytest.raises(SpecError) as e:
        _scn(plan, Load(input_tokens=100, output_tokens=10), mdl="mixtral-8x7b")
    assert e.value.field == "plan.redundant_experts" and "in the prefill pool:" in str(e.value)


def test_the_steady_state_sizes_the_prefill_rate_on_the_prefill_pool():
    """The search's steady state feeds a disaggregated deployment near the smaller of its pools' capacities: a
    prefill pool of tp 4 serves prompts ~3× faster than one GPU, so the stream is denser (more output tokens/s)."""
    from narrowpath.schedule.serving_steady import steady_lane
    load = Load(arrival="offline", input_tokens=4000, output_tokens=50, num_requests=8)
    one = steady_lane(_scn(ServingPlan(replicas=4, prefill_replicas=1, max_batch=16), load))
    four = steady_lane(_scn(ServingPlan(replicas=4, prefill_replicas=1, max_batch=16, prefill_tp=4), load))
    assert four.output_tokens_per_s > 1.5 * one.output_tokens_per_s


def test_check_fits_holds_each_pool_to_what_it_keeps():
    from narrowpath.schedule.serving_run import check_fits
    long = Load(input_tokens=600_000, output_tokens=10)
    plan = ServingPlan(tp=8, replicas=2, prefill_replicas=1, prefill_tp=1)
    with pytest.raises(SpecError, match="one lane of its prefill instances holds"):
        check_fits(ServingScenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=plan, load=long,
                                   num_gpus=plan.num_gpus))


@pytest.mark.parametrize("load", [
    Load(arrival="poisson", rate_per_s=8, input_tokens=2000, output_tokens=100, num_requests=60),
    Load(arrival="offline", concurrency=12, input_tokens=2000, output_tokens=100, num_requests=60),
])
def test_each_pool_accounts_its_own_work_and_the_run_both(load):
    """The prefill pool computes every prompt token and no decode, the decode pool every decode token and no prompt;
    the run's totals are their sums; the hand-offs are the prefill pool's (open and closed loop, a pool of its own
    layout)."""
    run = simulate(_scn(ServingPlan(replicas=3, prefill_replicas=1, prefill_tp=2), load))
    res = run.result
    pre, dec = res.pools["prefill"], res.pools["decode"]
    assert (pre.gpus, pre.lanes, dec.gpus, dec.lanes) == (2, 1, 2, 2)
    assert pre.totals.prompt_tokens == 60 * 2000 and pre.totals.decode_tokens == 0
    assert dec.totals.decode_tokens == 60 * 99 and dec.totals.prompt_tokens == 0
    assert pre.totals.handoff_s == pytest.approx(60 * run.cost.handoff_s(2000, run.prefill_cost), rel=1e-12)
    assert dec.totals.handoff_s == 0
    for f in ("iterations", "busy_s", "tokens", "kv_block_s", "preemptions", "handoff_s"):
        assert getattr(res.totals, f) == pytest.approx(getattr(pre.totals, f) + getattr(dec.totals, f), rel=1e-12)
    assert res.totals.kv_peak_blocks == max(pre.totals.kv_peak_blocks, dec.totals.kv_peak_blocks)
    for pool in (pre, dec):
        assert 0 < pool.busy_share(res.makespan_s) <= 1 and 0 < pool.kv_utilisation(res.makespan_s) < 1


def test_serve_shows_which_pool_is_the_narrow_one(capsys):
    """One prefill GPU for four decode GPUs on long prompts: the prefill pool iterates most of the run, the decode
    pool less — the console line and the JSON say so."""
    args = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--replicas", "5", "--prefill-replicas", "1",
            "--rate", "6", "--input-len", "6000", "--output-len", "40", "--num-requests", "60"]
    assert main(args) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("pools:")]
    assert line and "prefill 1 GPUs busy" in line[0] and "decode 4 GPUs busy" in line[0]
    assert main(args + ["--json"]) == 0
    pools = json.loads(capsys.readouterr().out)["pools"]
    assert pools["prefill"]["busy_share"] > 2 * pools["decode"]["busy_share"]
    assert set(pools["decode"]) == {"gpus", "lanes", "busy_share", "kv_utilisation", "kv_blocks_per_lane",
                                    "iterations", "prompt_tokens", "decode_tokens", "handoff_s"}


def test_a_colocated_run_has_no_pools():
    res = simulate(_scn(ServingPlan(replicas=2), Load(arrival="offline", input_tokens=100, output_tokens=5,
                                                       num_requests=8))).result
    assert res.pools is None and res.kv_ready_s is None


def test_a_pools_shares_by_hand():
    """Two lanes busy 0.6 s in all over a 0.5 s run: 0.6 / (2 · 0.5) = 0.6 of their time; 0.2 block-seconds over one
    block per lane: 0.2 / (1 · 2 · 0.5) = 0.2. No lanes or no run: 0."""
    from narrowpath.schedule.serving_stats import LaneTotals, PoolTotals
    pool = PoolTotals(lanes=2, gpus=2, kv_blocks_per_lane=1, totals=LaneTotals(busy_s=0.6, kv_block_s=0.2))
    assert pool.busy_share(0.5) == pytest.approx(0.6, rel=1e-12)
    assert pool.kv_utilisation(0.5) == pytest.approx(0.2, rel=1e-12)
    assert PoolTotals(lanes=2, gpus=2, kv_blocks_per_lane=3, totals=LaneTotals(busy_s=1.0, kv_block_s=1.0)) \
        .kv_utilisation(2.0) == pytest.approx(1 / 12, rel=1e-12)
    for empty in (PoolTotals(0, 0, 1, LaneTotals(busy_s=1.0, kv_block_s=1.0)),):
        assert empty.busy_share(1.0) == 0.0 and empty.kv_utilisation(1.0) == 0.0
    assert pool.busy_share(0.0) == 0.0 and pool.kv_utilisation(0.0) == 0.0


def test_a_pipelined_prefill_pool_counts_its_lanes():
    """A prefill instance of 2 stages has 2 lanes (one micro-batch a stage), the decode instances one each."""
    load = Load(arrival="offline", input_tokens=1000, output_tokens=10, num_requests=16)
    res = simulate(_scn(ServingPlan(replicas=3, prefill_replicas=1, prefill_pp=2), load)).result
    assert (res.pools["prefill"].lanes, res.pools["prefill"].gpus) == (2, 2)
    assert (res.pools["decode"].lanes, res.pools["decode"].gpus) == (2, 2)
    assert res.lanes == 4


def test_kv_use_divides_each_pool_by_its_own_capacity():
    """A prefill pool of its own layout holds another number of KV blocks a lane than the decode pool; the run's KV
    use is Σ block·s over Σ (blocks a lane × lanes) × makespan (fifty-sixth session's review: it divided by the
    decode lane's blocks × every lane). Hand calculation over 10 s: prefill 1 lane × 1,000 blocks holding 100
    block·s, decode 2 lanes × 400 blocks holding 800: 900 / (1,800 × 10) = 5.0 % (not 900 / (3 × 400 × 10) =
    7.5 %); peaks 600 of 1,000 and 200 of 400: the fuller pool's 60 % (not 600 / 400 = 150 %)."""
    from narrowpath.schedule.serving_stats import LaneTotals, PoolTotals, ServingResult
    pre, dec, both = LaneTotals(), LaneTotals(), LaneTotals()
    pre.kv_block_s, pre.kv_peak_blocks = 100.0, 600
    dec.kv_block_s, dec.kv_peak_blocks = 800.0, 200
    both.add(pre)
    both.add(dec)
    z = np.array([0.0, 0.0])
    pools = {"prefill": PoolTotals(1, 2, 1000, pre), "decode": PoolTotals(2, 2, 400, dec)}
    res = ServingResult(z, np.array([1.0, 2.0]), np.array([5.0, 10.0]), np.array([10, 10]), np.array([5, 5]), 3,
                        400, 16, both, pools=pools)
    assert res.kv_utilisation == pytest.approx(0.05)
    assert res.kv_peak_utilisation == pytest.approx(0.60)
    assert res.pools["prefill"].kv_utilisation(res.makespan_s) == pytest.approx(0.01)
    assert res.pools["decode"].kv_utilisation(res.makespan_s) == pytest.approx(0.10)
    colocated = ServingResult(z, np.array([1.0, 2.0]), np.array([5.0, 10.0]), np.array([10, 10]), np.array([5, 5]),
                              2, 400, 16, dec)
    assert colocated.kv_utilisation == pytest.approx(0.10)
    assert colocated.kv_peak_utilisation == pytest.approx(0.50)
