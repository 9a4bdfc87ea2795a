"""The engine: deterministic, folding kernel noise without changing its distribution, attributing lost time to
its causes, and scaling as arrays over units."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from narrowpath.catalog import load_scenario
from narrowpath.errors import SpecError
from narrowpath.schedule.sim import simulate
from narrowpath.spec.noise_parse import parse_noise

SPEC = "jitter=lognormal:0.05,slow-node=3:0.2,link-flap=scale_out:0.02,gc=7:0.02"


@pytest.fixture(scope="module")
def scn70():
    return load_scenario("llama3-70b-h100-256")


def test_same_seed_same_result_bit_for_bit(scn70):
    a = simulate(scn70, parse_noise([SPEC]), steps=4, seed=11)
    b = simulate(scn70, parse_noise([SPEC]), steps=4, seed=11)
    c = simulate(scn70, parse_noise([SPEC]), steps=4, seed=12)
    assert a.step_times_s.tobytes() == b.step_times_s.tobytes()
    assert a.lost_time_s_by_cause == b.lost_time_s_by_cause and a.waits_s == b.waits_s
    assert a.step_times_s.tobytes() != c.step_times_s.tobytes()


def test_folded_runs_match_member_by_member_draws(scn70):
    """The central-limit fold of a run's tensor-parallel maxima (one draw per unit) reproduces the member-by-member
    draw's mean lost time within 2 % and its step-time spread within 25 %."""
    noise = parse_noise(["jitter=normal:0.08"])
    fold = simulate(scn70, noise, steps=24, seed=1)
    exact = simulate(scn70, noise, steps=24, seed=2, exact=True)
    lost_f = fold.stats()["mean"] - fold.noise_free_step_time_s
    lost_e = exact.stats()["mean"] - exact.noise_free_step_time_s
    assert lost_f == pytest.approx(lost_e, rel=0.02)
    assert fold.step_times_s.std() == pytest.approx(exact.step_times_s.std(), rel=0.25)


def test_lost_time_adds_up_and_names_the_cause(scn70):
    """Per step: the causes on the critical path plus the slack equal the step minus the noise-free step; a slow
    node's unit is the one that arrives last; flaps are charged to link-flap."""
    r = simulate(scn70, parse_noise(["slow-node=3:0.3"]), steps=3)
    lost = r.stats()["mean"] - r.noise_free_step_time_s
    assert sum(r.lost_time_s_by_cause.values()) == pytest.approx(lost, rel=1e-9)
    assert r.lost_time_s_by_cause["slow-node"] > 0.9 * lost
    node_ranks = set(range(24, 32))
    assert r.slowest[0][0] in node_ranks and r.slowest[0][2] == 3
    f = simulate(scn70, parse_noise(["link-flap=scale_out:0.05:0.5s"]), steps=6, seed=3)
    assert f.lost_time_s_by_cause["link-flap"] > 0


def test_no_noise_is_the_noise_free_step(scn70):
    r = simulate(scn70, steps=5)
    assert (r.step_times_s == r.noise_free_step_time_s).all() and r.lost_time_s_by_cause == {}


def test_noise_that_names_what_does_not_exist_is_refused(scn70):
    with pytest.raises(SpecError, match="noise.slow-node: node 40 does not exist"):
        simulate(scn70, parse_noise(["slow-node=40:0.2"]), steps=1)
    with pytest.raises(SpecError, match="noise.slow-gpu: rank 256"):
        simulate(scn70, parse_noise(["slow-gpu=256:0.2"]), steps=1)
    with pytest.raises(SpecError, match="noise.slow-link.rank"):
        simulate(scn70, parse_noise(["slow-link=scale_out:0.2:999"]), steps=1)


def test_zero_bubble_schedule_beats_1f1b_on_the_same_plan():
    scn = load_scenario("gpt3-175b-a100-1024")
    import dataclasses
    plan = dataclasses.replace(scn.plan, vpp=1)
    scn = dataclasses.replace(scn, plan=plan)
    one = simulate(scn, steps=1, schedule="1f1b")
    zb = simulate(scn, steps=1, schedule="zb-h1")
    assert zb.noise_free_step_time_s < one.noise_free_step_time_s
    assert one.noise_free_step_time_s == pytest.approx(one.closed_form_step_time_s, rel=0.01)


def test_unit_arrays_scale_with_the_job():
    """16,384 GPUs: 128 units per stage (tp 8 folded), state arrays, not ranks, and well under 2 GB."""
    scn = load_scenario("llama3-405b-h100-16k")
    r = simulate(scn, parse_noise(["jitter=lognormal:0.05,slow-node=5:0.2"]), steps=2, seed=1)
    assert r.units_per_stage == 128
    assert np.isfinite(r.step_times_s).all() and (r.step_times_s > r.noise_free_step_time_s).all()


def test_a_deduplicating_expert_dispatch_synchronises_the_ep_group():
    """DeepSeek-V3 on 2,048 H800 dispatches by `dedup`, whose two legs run on the axes `ep_inter` / `ep_intra`:
    each waits for the ep group as the plain all-to-all does (the closed form's sync_group), so jitter costs the
    same either way. (The legs' axes were once unknown to the layout: they ran as a unit's own work, no rank waited
    at an expert exchange, and jitter cost the dedup plan ~20× less.)"""
    scn = load_scenario("deepseek-v3-h800-2048")
    noise = parse_noise(["jitter=lognormal:0.1"])
    lost, ep_wait = {}, {}
    for d in ("dedup", "all_to_all"):
        r = simulate(dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, ep_dispatch=d)), noise, steps=4,
                     seed=3)
        lost[d] = r.stats()["mean"] - r.noise_free_step_time_s
        ep_wait[d] = sum(v for k, v in r.waits_s.items() if k.startswith("ep"))
    assert ep_wait["dedup"] > 0.5 * lost["dedup"] > 0
    assert lost["dedup"] == pytest.approx(lost["all_to_all"], rel=0.15)


def test_a_hidden_exchange_the_pass_reads_still_makes_its_group_meet():
    """Llama 3 8B, cp 4 on 16 H100: each context-parallel KV all-gather hides behind attention, yet the attention
    reads the gathered keys, so a slow member delays its group — the pass ends with a rendezvous of no cost
    (sim.work.awaited). A weight-gradient reduction is read only at the step's end: it leaves none."""
    from narrowpath.schedule.sim.work import awaited, build_sim_work
    from narrowpath.schedule.step import predict
    from narrowpath.workload.items import Transfer
    scn = load_scenario({"system": "dgx-h100", "model": "llama3-8b", "num_gpus": 16,
                         "plan": {"tp": 2, "cp": 4, "dp": 2, "gbs": 8, "sequence_parallel": True}})
    work = build_sim_work(predict(scn))
    meets = [s for st in work.stages for pw in st.passes.values() for s in pw.syncs if s.axis == "cp"]
    assert meets and all(s.cost_s == 0.0 for s in meets)  # hidden entirely
    r = simulate(scn, parse_noise(["jitter=lognormal:0.1"]), steps=3, seed=3)
    assert r.waits_s["cp (cp.kv_all_gather)"] > 0
    assert not awaited(Transfer("dp.zero3_grad_reduce_scatter", "reduce_scatter", "dp", 1.0, "bwd", True))
    assert awaited(Transfer("dp.zero3_param_all_gather", "all_gather", "dp", 1.0, "fwd", True))
    assert not awaited(Transfer("tp.all_gather", "all_gather", "tp", 1.0, "fwd", True))


def test_data_parallel_ranks_meet_without_context_parallelism():
    """Llama 3 8B under ZeRO-3 on one DGX (dp 8, cp 1): the parameter gathers make the dp group meet (the dp axis's
    own groups: `dpcp` spans dp × cp only with context parallelism, schedule.step.sync_axis)."""
    r = simulate(load_scenario("llama3-8b-h100-8"), parse_noise(["jitter=normal:0.1"]), steps=3, seed=5)
    assert r.waits_s["dp (dp.zero3_param_all_gather)"] > 0.01
