"""Conservation laws of the serving simulator: whatever the batching, chunking, merging or lane layout, the work
the lanes account is fixed by the requests alone.

For a request of p prompt tokens and o output tokens served without preemption:
- its prompt is computed once: p prompt tokens, and Σ over its chunks of the causal query-key pairs a chunk of c
  tokens after d done ones adds, c·(d + (c + 1)/2) = (d+1) + … + (d+c), telescopes to 1 + 2 + … + p = p(p+1)/2;
- the prefill emits the first token and o − 1 decode steps follow, reading contexts p+1, p+2, …, p+o−1: in all
  (o−1)·p + (o−1)·o/2 context tokens.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from narrowpath.catalog import model, system
from narrowpath.schedule.serving_run import simulate
from narrowpath.schedule.serving_sim import Lane
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario


def _scn(plan: ServingPlan, load: Load, mdl: str = "llama3-8b") -> ServingScenario:
    return ServingScenario(system=system("dgx-h100"), model=model(mdl), plan=plan, load=load, num_gpus=plan.num_gpus)


def _expected(n: int, p: int, o: int) -> dict:
    return {"prompt_tokens": n * p, "prompt_pairs": n * p * (p + 1) / 2, "decode_tokens": n * (o - 1),
            "decode_ctx_tokens": n * ((o - 1) * p + (o - 1) * o / 2)}


@pytest.mark.parametrize("plan", [
    ServingPlan(admission="reserve", chunked_prefill=True, max_num_tokens=384, max_batch=16),   # 3 chunks of 1000
    ServingPlan(admission="reserve", chunked_prefill=False, max_num_tokens=4096, max_batch=16),  # whole prompts
    ServingPlan(admission="reserve", policy="prefill-first", max_batch=8),
    ServingPlan(policy="static", max_batch=8),
])
def test_lane_totals_are_fixed_by_the_requests(plan):
    """24 requests of 1000 + 40 tokens, reserve admission (no preemption): the totals equal the module docstring's
    sums, chunked or not, merged or not, static or continuous."""
    n, p, o = 24, 1000, 40
    load = Load(arrival="offline", input_tokens=p, output_tokens=o, num_requests=n)
    tot = simulate(_scn(plan, load)).result.totals
    want = _expected(n, p, o)
    assert tot.preemptions == 0
    for k, v in want.items():
        assert getattr(tot, k) == pytest.approx(v, rel=1e-12), k
    if plan.policy != "static":
        assert tot.tokens == pytest.approx(want["prompt_tokens"] + want["decode_tokens"], rel=1e-12)


def test_a_disaggregated_prompt_is_computed_once_on_the_prefill_instance():
    """Prefill lanes compute every prompt (and emit the first token); the decode lanes only decode what they
    receive: prompt tokens and pairs are those of the requests once, the decode context that of o − 1 steps."""
    n, p, o = 30, 700, 25
    load = Load(arrival="poisson", rate_per_s=20, input_tokens=p, output_tokens=o, num_requests=n)
    tot = simulate(_scn(ServingPlan(replicas=2, prefill_replicas=1), load)).result.totals
    for k, v in _expected(n, p, o).items():
        assert getattr(tot, k) == pytest.approx(v, rel=1e-12), k


def test_a_prefill_first_lane_on_demand_gives_the_same_times_merged_or_not():
    """On-demand KV with a cache too small for the load and arrivals during decodes, prefill-first (whose turn is
    decided on the free blocks before the decodes take theirs): merging decode steps must leave every time as
    stepping one iteration at a time."""
    plan = ServingPlan(policy="prefill-first", admission="on-demand", kv_memory_fraction=0.02, max_batch=48)
    load = Load(arrival="poisson", rate_per_s=40, input_tokens=300, output_tokens=300, num_requests=120)
    a = simulate(_scn(plan, load)).result
    b = simulate(_scn(plan, load), merge=False).result
    assert a.totals.preemptions > 0
    np.testing.assert_allclose(a.first_token_s, b.first_token_s, rtol=1e-9)
    np.testing.assert_allclose(a.finish_s, b.finish_s, rtol=1e-9)


def test_a_disaggregated_on_demand_decode_lane_gives_the_same_times_merged_or_not():
    """A decode-only lane admits hand-offs on its free blocks before each step: with on-demand KV the blocks the
    merged steps grew must be taken, or it admits more than stepping one at a time would."""
    plan = ServingPlan(replicas=2, prefill_replicas=1, admission="on-demand", kv_memory_fraction=0.02, max_batch=64)
    load = Load(arrival="poisson", rate_per_s=30, input_tokens=400, output_tokens=400, num_requests=120)
    a = simulate(_scn(plan, load)).result
    b = simulate(_scn(plan, load), merge=False).result
    np.testing.assert_allclose(a.first_token_s, b.first_token_s, rtol=1e-9)
    np.testing.assert_allclose(a.finish_s, b.finish_s, rtol=1e-9)


def test_attention_dp_ranks_in_lockstep_account_every_request_once():
    """Attention-DP ranks iterate in lockstep (schedule.serving_sim.LaneGroup), a merged run of the busy rank
    stopping where an idle rank's next request arrives: each rank serves its own share of the requests, so the
    totals are the docstring's sums, merged or not."""
    plan = ServingPlan(tp=1, dp=2, ep=2, max_batch=16)
    load = Load(arrival="poisson", rate_per_s=3, input_tokens=200, output_tokens=120, num_requests=24)
    runs = []
    for merge in (True, False):
        res = simulate(_scn(plan, load, "mixtral-8x7b"), merge=merge).result
        assert res.lanes == 2 and np.all(res.finish_s > res.first_token_s)
        assert np.all(res.first_token_s > res.arrival_s)
        for k, v in _expected(24, 200, 120).items():
            assert getattr(res.totals, k) == pytest.approx(v, rel=1e-12), k
        runs.append(res)
    # merged runs end at the first boundary after any rank's next event, at the slowest rank's pace: the same
    # times as one step at a time (a decoding rank used to stop at its own arrival by its own, shorter step time,
    # and admitted it up to 6 % late)
    np.testing.assert_allclose(runs[0].first_token_s, runs[1].first_token_s, rtol=1e-9)
    np.testing.assert_allclose(runs[0].finish_s, runs[1].finish_s, rtol=1e-9)


def test_lockstep_ranks_on_demand_take_the_blocks_of_the_steps_the_group_ran():
    """Attention-DP ranks with on-demand KV in a cache too small for the load: a rank's overflow search allows
    more merged steps than its group runs when another rank's event comes first, and the rank then takes the
    blocks of the steps run, not of those allowed (nor fewer) — the same times as stepping one iteration at a
    time."""
    plan = ServingPlan(tp=1, dp=2, ep=2, max_batch=32, admission="on-demand", kv_memory_fraction=0.02)
    load = Load(arrival="poisson", rate_per_s=12, input_tokens=300, output_tokens=300, num_requests=80)
    held = []  # after each commit: blocks a rank holds beyond (and short of) what its running contexts fill, and
    # the blocks unaccounted for
    fresh: set = set()  # sequences that joined the running batch in this commit (their first token is not cached)

    def commit(lane, step, n, dt):
        fresh.clear()
        Lane_commit(lane, step, n, dt)
        k, B = lane.n, lane.s.block_tokens
        diff = lane.r_blk[:k] - np.ceil(lane.r_ctx[:k] / B)
        stepped = np.array([rid not in fresh for rid in lane.r_id[:k].tolist()], dtype=bool)
        in_prompt = sum(item[4] for item in lane.pre)
        held.append((float(diff.max(initial=0.0)), float(-diff[stepped].min(initial=0.0)),
                     lane.free + float(lane.r_blk[:k].sum()) + in_prompt - lane.s.kv_blocks))

    def admit_decode(lane, rid, ctx, rem, blocks):
        Lane_admit_decode(lane, rid, ctx, rem, blocks)
        fresh.add(rid)

    Lane_commit, Lane_admit_decode = Lane.commit, Lane._admit_decode
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Lane, "commit", commit)
        mp.setattr(Lane, "_admit_decode", admit_decode)
        a = simulate(_scn(plan, load, "mixtral-8x7b")).result
    b = simulate(_scn(plan, load, "mixtral-8x7b"), merge=False).result
    assert a.totals.preemptions > 0 and a.totals.iterations == b.totals.iterations
    np.testing.assert_allclose(a.first_token_s, b.first_token_s, rtol=1e-9)
    np.testing.assert_allclose(a.finish_s, b.finish_s, rtol=1e-9)
    # a running sequence that has stepped holds exactly the blocks its context fills (a merged run of any length
    # takes the blocks of every step it ran), and the blocks held plus the free ones are the lane's
    assert held and max(o for o, _, _ in held) == 0.0 and max(u for _, u, _ in held) == 0.0
    assert all(c == 0 for _, _, c in held)


@pytest.mark.parametrize("plan,mdl", [
    (ServingPlan(tp=1, dp=2, ep=2, max_batch=32, admission="on-demand", kv_memory_fraction=0.02, spec_tokens=3,
                 spec_acceptance=0.7), "mixtral-8x7b"),
    (ServingPlan(tp=1, dp=2, ep=2, replicas=2, prefill_replicas=1, max_batch=32, admission="on-demand",
                 kv_memory_fraction=0.02, spec_tokens=7, spec_acceptance=0.5), "mixtral-8x7b"),
], ids=["lockstep ranks", "disaggregated lockstep ranks"])
def test_on_demand_blocks_under_speculative_decoding_only_grow(plan, mdl):
    """Speculative decoding with on-demand KV in a small cache, attention-DP ranks in lockstep: 3 draft tokens at
    acceptance 0.7 ((1 − 0.7⁴)/(1 − 0.7) ≈ 2.53 tokens a step), and a disaggregated deployment's decode ranks with 7
    at 0.5 (≈ 1.99 a step), whose hand-offs of 300-token prompts are admitted with blocks for the drafts too:
    ⌈308 / 16⌉ = 20, more than the ⌈302.99 / 16⌉ = 19 a step's growth asks for. After every commit, merged or
    stepped, each running sequence holds no fewer blocks than before (a step takes blocks and never gives any back)
    and no lane owes blocks; merged runs take the growth of their steps' tokens (a run allowed more steps than its
    blocks hold would not preempt where stepping does), so the times agree."""
    load = Load(arrival="poisson", rate_per_s=12, input_tokens=300, output_tokens=300, num_requests=80)
    held: dict = {}
    bad = []

    def commit(lane, step, n, dt):
        Lane_commit(lane, step, n, dt)
        if lane.free < 0:
            bad.append(("free", lane.free))
        now = dict(zip(lane.r_id[:lane.n].tolist(), lane.r_blk[:lane.n].tolist()))
        before = held.get(id(lane), {})
        bad.extend((rid, blk, before[rid]) for rid, blk in now.items() if blk < before.get(rid, 0.0))
        held[id(lane)] = now

    def preempt_for(lane, g):  # a preempted sequence starts again from the blocks of its re-admission
        Lane_preempt_for(lane, g)
        running = set(lane.r_id[:lane.n].tolist())
        before = held.get(id(lane), {})
        held[id(lane)] = {rid: blk for rid, blk in before.items() if rid in running}

    def admit_decode(lane, rid, ctx, rem, blocks):
        Lane_admit_decode(lane, rid, ctx, rem, blocks)
        held.setdefault(id(lane), {})[rid] = float(blocks)

    Lane_commit, Lane_preempt_for, Lane_admit_decode = Lane.commit, Lane._preempt_for, Lane._admit_decode
    runs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Lane, "commit", commit)
        mp.setattr(Lane, "_preempt_for", preempt_for)
        mp.setattr(Lane, "_admit_decode", admit_decode)
        for merge in (True, False):
            held.clear()
            runs.append(simulate(_scn(plan, load, mdl), merge=merge).result)
    assert not bad, bad[:3]
    assert runs[0].totals.iterations == runs[1].totals.iterations
    np.testing.assert_allclose(runs[0].finish_s, runs[1].finish_s, rtol=1e-9)


def test_a_full_lane_decodes_to_its_next_finish_in_one_merged_run():
    """max_batch 1: while a request decodes nobody can join, so an arrival during its decode is no event — each
    request is one prompt iteration and one merged run of its o − 1 decode steps (the step time is linear in the
    context on a GPU-bound H100 lane)."""
    reqs = tuple((0.1 * i, 200, 50) for i in range(4))  # each arrives while the one before decodes
    plan = ServingPlan(max_batch=1, admission="reserve")
    res = simulate(_scn(plan, Load(arrival="trace", requests=reqs))).result
    decode_runs = [r for r in res.log if not r.prompt_tokens]
    assert len(decode_runs) == 4 and all(r.steps == 49 for r in decode_runs)
    ref = simulate(_scn(plan, Load(arrival="trace", requests=reqs)), merge=False).result
    np.testing.assert_allclose(res.finish_s, ref.finish_s, rtol=1e-9)


def test_closed_loop_lanes_release_their_requests_as_others_finish():
    """Concurrency 4 over two replicas (2 per lane): every request's arrival is the finish of an earlier one of its
    lane, or 0 for the first two of each lane."""
    load = Load(arrival="offline", concurrency=4, input_tokens=100, output_tokens=20, num_requests=12)
    res = simulate(_scn(ServingPlan(replicas=2), load)).result
    assert np.all(np.isfinite(res.arrival_s))
    assert np.sum(res.arrival_s == 0) == 4
    late = res.arrival_s[res.arrival_s > 0]
    assert all(np.any(np.isclose(t, res.finish_s, rtol=0, atol=0)) for t in late)


def test_figures_summarise_the_per_request_latencies():
    """`serve --json`: TTFT = first token − arrival, TPOT over output − 1 tokens, end-to-end = finish − arrival."""
    load = Load(arrival="poisson", rate_per_s=10, input_tokens=300, output_tokens=30, num_requests=20)
    res = simulate(_scn(ServingPlan(), load)).result
    fig = res.figures()
    ttft = res.first_token_s - res.arrival_s
    assert fig["ttft_s"]["mean"] == pytest.approx(float(ttft.mean()))
    assert fig["ttft_s"]["p99"] == pytest.approx(float(np.percentile(ttft, 99)))
    assert fig["e2e_latency_s"]["p50"] == pytest.approx(float(np.median(res.finish_s - res.arrival_s)))
    assert fig["tpot_s"]["mean"] == pytest.approx(float(((res.finish_s - res.first_token_s) / 29).mean()))
    assert fig["output_tokens_per_s"] == pytest.approx(20 * 30 / float(res.finish_s.max()))


def test_summary_has_the_same_keys_for_no_values():
    from narrowpath.schedule.serving_stats import summary
    full = summary(np.array([1.0, 2.0, 3.0]))
    assert set(summary(np.zeros(0))) == set(full) == {"mean", "p50", "p90", "p99"}
    assert summary(np.zeros(0)) == {k: 0.0 for k in full}
    assert full["p50"] == 2.0


def test_fresh_lane_totals_count_nothing():
    """A fresh LaneTotals counts nothing yet."""
    from narrowpath.schedule.serving_stats import LaneTotals
    t = LaneTotals()
    assert all(v == 0 for v in dataclasses.asdict(t).values())
