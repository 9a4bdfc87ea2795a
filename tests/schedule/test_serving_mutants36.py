"""Disaggregated serving with prefill pools of their own layout, the closed loop across the pools, the hand-off
between two layouts, the serving engines' one-shot all-reduce and check_fits: properties the other tests leave
open (mutation-testing survivors)."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from narrowpath.catalog import calibration_for, model, system
from narrowpath.cost.collectives import one_shot_all_reduce, simple_ramp
from narrowpath.errors import SimulationError, SpecError
from narrowpath.network.paths import path_model
from narrowpath.network.placement import span_of
from narrowpath.schedule.serving_defaults import resolve_formats, resolve_limits
from narrowpath.schedule.serving_run import check_fits, simulate, step_pricer
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario


def _scn(plan: ServingPlan, load: Load, mdl: str = "llama3-8b") -> ServingScenario:
    return ServingScenario(system=system("dgx-h100"), model=model(mdl), plan=plan, load=load, num_gpus=plan.num_gpus)


def _handoff_per_request(plan: ServingPlan, P: int = 1000, n: int = 4):
    """The run and the hand-off time of each of n offline requests of P prompt tokens (totals over n)."""
    run = simulate(_scn(plan, Load(arrival="offline", input_tokens=P, output_tokens=3, num_requests=n)))
    return run, run.result.totals.handoff_s / n


# ---- the hand-off between two layouts ---------------------------------------------------------------------------

def test_a_hand_off_is_bound_by_the_side_holding_more_kv_per_gpu_whichever_side_that_is():
    """llama3-8b, 8 KV heads: a tp-1 instance holds a prompt's whole KV cache on one GPU, a tp-4 instance a quarter
    on each. tp 4 → tp 1, tp 1 → tp 4 and tp 1 → tp 1 all move the whole KV through one GPU's port (the tp-1 side
    bounds it), between two ranks of one NVLink domain (5 or 2 GPUs ≤ 8): the same time per request. tp 4 → tp 4
    moves a quarter per GPU: faster."""
    _, pre4_dec1 = _handoff_per_request(ServingPlan(replicas=2, prefill_replicas=1, prefill_tp=4))
    _, pre1_dec4 = _handoff_per_request(ServingPlan(tp=4, replicas=2, prefill_replicas=1, prefill_tp=1))
    _, one = _handoff_per_request(ServingPlan(replicas=2, prefill_replicas=1))
    _, four = _handoff_per_request(ServingPlan(tp=4, replicas=2, prefill_replicas=1))
    assert pre4_dec1 == pytest.approx(one, rel=1e-12)
    assert pre1_dec4 == pytest.approx(one, rel=1e-12)
    assert four < 0.5 * one


def test_a_cost_models_own_hand_off_is_not_read_from_another_senders_cache():
    """A tp-4 decode cost model that priced hand-offs from a tp-1 prefill pool still prices a hand-off from its
    own layout (sender None) as a one-layout tp-4 deployment does: a quarter of the KV per GPU, not the tp-1
    sender's whole (the cache keys the two apart)."""
    P = 1000
    mixed, from_tp1 = _handoff_per_request(ServingPlan(tp=4, replicas=2, prefill_replicas=1, prefill_tp=1), P)
    _, same = _handoff_per_request(ServingPlan(tp=4, replicas=2, prefill_replicas=1), P)
    assert mixed.cost.handoff_s(P) == pytest.approx(same, rel=1e-12)
    assert mixed.cost.handoff_s(P, mixed.prefill_cost) == pytest.approx(from_tp1, rel=1e-12)
    assert same < 0.5 * from_tp1


def test_the_hand_off_note_prices_the_prefill_pools_layout_in_milliseconds():
    """A tp-1 prefill instance beside a tp-8 decode instance (9 GPUs: over the NICs): every 6000-token prompt's
    hand-off moves its whole KV cache (the tp-1 side's, ~0.8 GB) — tens of ms. The note gives the same per-request
    time the run added to its totals, in ms to two decimals."""
    P, n = 6000, 4
    run = simulate(_scn(ServingPlan(tp=8, replicas=2, prefill_replicas=1, prefill_tp=1),
                        Load(arrival="offline", input_tokens=P, output_tokens=3, num_requests=n)))
    per_ms = run.result.totals.handoff_s / n * 1e3
    assert per_ms > 10.0  # so that a 0.1 % error shows in the second decimal
    notes = [m for x in run.result.notes
             if (m := re.fullmatch(rf"KV hand-off of a {P}-token prompt: ([0-9.]+) ms per request "
                                   r"\(scale-out fabric\)", x))]
    assert len(notes) == 1
    assert float(notes[0].group(1)) == pytest.approx(per_ms, abs=0.0051)


# ---- the prefill pool's layout in the simulation ------------------------------------------------------------------

def test_one_client_through_a_prefill_pool_of_its_own_layout_by_hand():
    """One client, a tp-4 prefill instance and a tp-1 decode instance, closed loop: each request is prefilled alone
    on the tp-4 instance (priced by the prefill pool's cost, faster than tp 1), handed off (tp 4 → tp 1), decoded
    alone on the tp-1 instance; request k + 1 is sent when request k finishes."""
    P, o = 300, 40
    run = simulate(_scn(ServingPlan(replicas=2, prefill_replicas=1, prefill_tp=4),
                        Load(arrival="offline", concurrency=1, input_tokens=P, output_tokens=o, num_requests=3)))
    pre, dec, res = step_pricer(run.prefill_cost, 1, 0), step_pricer(run.cost, 1, 0), run.result
    t_pre = pre(P, 0, 0.0, P, P * (P + 1) / 2, P, 1, 1, 1)
    assert t_pre < 0.9 * dec(P, 0, 0.0, P, P * (P + 1) / 2, P, 1, 1, 1)  # the tp-4 pool is the faster
    t_dec = sum(dec(1, 1, float(P + k), 0, 0, 0, 1, 1) for k in range(1, o))
    h = run.cost.handoff_s(P, run.prefill_cost)
    t = 0.0
    for k in range(3):
        assert res.arrival_s[k] == pytest.approx(t, rel=1e-12, abs=1e-12)
        assert res.kv_ready_s[k] == pytest.approx(t + t_pre + h, rel=1e-12)
        assert res.finish_s[k] == pytest.approx(t + t_pre + h + t_dec, rel=1e-9)
        t = res.finish_s[k]


def test_a_prefill_pool_stated_as_the_decode_layout_prices_alike_under_speculative_decoding():
    """Speculative decoding (2 draft tokens, q = 3) with a batch of 64 and 160 tokens per iteration: the decode
    pool is priced up to 64·3 = 192 tokens (its token grid ends …, 146, 182, 192); a prefill pool stated with the
    same layout and limits must be priced on the same grid, so that its prompt chunks of 160 tokens cost what they
    cost in one layout (the token time bends between 146 and 182: a grid ending at 160 prices them otherwise)."""
    base = ServingPlan(replicas=3, prefill_replicas=1, max_batch=64, max_num_tokens=160, spec_tokens=2,
                       spec_acceptance=0.7)
    own = dataclasses.replace(base, prefill_tp=1, prefill_max_batch=64, prefill_max_num_tokens=160)
    load = Load(arrival="poisson", rate_per_s=20, input_tokens=400, output_tokens=30, num_requests=40)
    a, b = simulate(_scn(base, load)), simulate(_scn(own, load))
    assert b.prefill_cost is not None
    np.testing.assert_array_equal(a.cost.grid, b.prefill_cost.grid)
    np.testing.assert_allclose(a.result.kv_ready_s, b.result.kv_ready_s, rtol=1e-12)
    np.testing.assert_allclose(a.result.finish_s, b.result.finish_s, rtol=1e-12)


def test_concurrency_of_every_request_is_an_open_loop_and_keeps_decode_sampling():
    """A concurrency equal to the request count sends every request at once: no closed loop, so the run is the
    open loop's — including `decode_groups` sampling (only the first decode instance's requests) — and equals the
    run without a concurrency."""
    plan = ServingPlan(replicas=3, prefill_replicas=1, max_batch=16)
    n = 40
    runs = [simulate(_scn(plan, Load(arrival="offline", input_tokens=200, output_tokens=50, num_requests=n,
                                     concurrency=c)), decode_groups=1) for c in (0, n)]
    for run in runs:
        assert run.sampled is not None and len(run.sampled) == n // 2 and run.sample_scale == 2.0
        assert not any("closed loop" in x for x in run.result.notes)
    np.testing.assert_array_equal(runs[0].sampled, runs[1].sampled)
    np.testing.assert_allclose(runs[0].result.finish_s, runs[1].result.finish_s, rtol=1e-12)


def test_without_merging_every_logged_record_is_one_iteration():
    """merge=False (the reference merged runs are checked against) steps every lane one iteration at a time: each
    logged record holds one step; merged, the decode lane's records hold many."""
    load = Load(arrival="offline", input_tokens=200, output_tokens=100, num_requests=6)
    plan = ServingPlan(replicas=2, prefill_replicas=1)
    stepped = simulate(_scn(plan, load), merge=False).result.log
    merged = simulate(_scn(plan, load)).result.log
    assert stepped and all(r.steps == 1 for r in stepped)
    assert max(r.steps for r in merged) > 1


def test_a_merged_run_stops_for_a_one_token_prompt_prefilled_as_cheaply_as_possible():
    """Speculative decoding (q = 3), one prefill and one decode instance, pools run together: request A decodes
    alone; request C, a one-token prompt, reaches the prefill instance at t_C, is prefilled in one iteration of one
    token producing one row (the cheapest prompt iteration there is) and handed off at t_C + t_pre + h, placed
    0.5 µs before a boundary b of A's decode steps — the stepped run admits C at b. A merged run of A must stop
    there too: its bound on when an unknown prompt can arrive may not exceed that iteration (a bound priced with q
    output rows, 1.3 µs dearer, would run past b)."""
    plan = ServingPlan(replicas=2, prefill_replicas=1, spec_tokens=2, spec_acceptance=0.7)

    def run(t_c: float, merge: bool):
        load = Load(arrival="trace", requests=[(0.0, 100, 300), (t_c, 1, 5)])
        return simulate(_scn(plan, load), merge=merge, pools_together=True)

    probe = run(10.0, False)  # C long after A: A's decode boundaries undisturbed
    ends = [r.start_s + r.duration_s for r in probe.result.log if r.role == "decode"]
    b = ends[20]
    step = step_pricer(probe.cost, plan.spec_draft_layers, plan.spec_tokens)
    t_pre = step(1, 0, 0.0, 1, 1.0, 1.0, 1, 3, 1)
    t_c = b - t_pre - probe.cost.handoff_s(1) - 5e-7
    stepped, merged = run(t_c, False).result, run(t_c, True).result
    assert stepped.kv_ready_s[1] == pytest.approx(b - 5e-7, abs=1e-9)
    assert stepped.first_token_s[1] == pytest.approx(b, rel=1e-12)
    np.testing.assert_allclose(merged.first_token_s, stepped.first_token_s, rtol=1e-12)
    np.testing.assert_allclose(merged.finish_s, stepped.finish_s, rtol=1e-12)


# ---- check_fits ----------------------------------------------------------------------------------------------------

def test_check_fits_takes_a_request_that_fills_a_lane_exactly():
    """A KV pool of 511 tokens in 16-token blocks: 31 blocks a lane. A request of 486 + 10 = 496 tokens needs
    ⌈496/16⌉ = 31 — it fits (and runs); one token more needs 32 and is refused."""
    plan = ServingPlan(max_batch=4, kv_memory_fraction=0.001)
    fits = _scn(plan, Load(arrival="offline", input_tokens=486, output_tokens=10, num_requests=1))
    _, lim = resolve_limits(resolve_formats(fits, ()))
    assert (lim.memory.kv_tokens, lim.block_tokens) == (511, 16)
    check_fits(fits)
    assert simulate(fits).result.finish_s[0] > 0
    with pytest.raises(SpecError, match="needs 32 KV blocks; one lane of this deployment holds 31"):
        check_fits(_scn(plan, Load(arrival="offline", input_tokens=487, output_tokens=10, num_requests=1)))


def test_a_prompt_too_long_for_a_prefill_lane_is_refused_naming_whole_blocks():
    """A tp-1 prefill instance's lane cannot hold a 600k-token prompt that a tp-8 decode instance could: the
    simulation refuses it, naming the lane's blocks as a whole number."""
    plan = ServingPlan(tp=8, replicas=2, prefill_replicas=1, prefill_tp=1)
    with pytest.raises(SimulationError, match=r"a lane holds \d+$"):
        simulate(_scn(plan, Load(arrival="offline", input_tokens=600_000, output_tokens=10, num_requests=1)))


# ---- the one-shot all-reduce ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("mesh", [False, True])
def test_the_one_shot_all_reduce_does_not_depend_on_the_bandwidths_unit(mesh):
    """4 ranks of an 8-GPU domain, 1 MB. Switched: (n − 1)·S = 3 MB into the port; full mesh (pair bandwidth a
    seventh of the port's): S = 1 MB over one link, i.e. 7 MB at the port's rate. Dividing every bandwidth by 10¹²
    (below one byte per second) multiplies the bandwidth term by 10¹² and changes nothing else."""
    s = system("dgx-h100")
    pm = path_model(span_of(4, ranks_per_domain=4, domains=1, axis="tp"), s, calibration_for(s.device.name))
    if mesh:
        pm = dataclasses.replace(pm, pair_bw=pm.up_bw / 7)
    S, k = float(1 << 20), 1e12
    t_bw = one_shot_all_reduce(S, pm).time_s - pm.alpha_up_s
    assert t_bw == pytest.approx((7 if mesh else 3) * S / (pm.up_bw * simple_ramp(S)), rel=1e-12)
    slow = dataclasses.replace(pm, up_bw=pm.up_bw / k, pair_bw=pm.pair_bw / k)
    c = one_shot_all_reduce(S, slow)
    assert c is not None and c.time_s - pm.alpha_up_s == pytest.approx(k * t_bw, rel=1e-9)
