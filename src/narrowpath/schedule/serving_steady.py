"""Steady state of a serving plan, for the serving search: one lane kept full by a closed loop (all lanes alike),
or, for a disaggregated plan, its smallest deployment of the same prefill : decode ratio fed a Poisson stream near
its capacity (every prefill lane, one group of decode lanes). Same simulator and cost model as `serve`; only the
load differs."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from math import gcd

import numpy as np

from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import Limits, resolve_formats, resolve_limits
from narrowpath.schedule.serving_place import plan_handoff_scale_out_share
from narrowpath.schedule.serving_run import poisson_arrivals_s, prefill_pool, simulate, spec_gain, step_pricer
from narrowpath.schedule.serving_sim import Lane, LaneSpec, decode_lane_seqs
from narrowpath.schedule.serving_stats import LaneTotals, summary, window_output_tokens_per_s
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario


@dataclass(frozen=True, slots=True)
class SteadyLane:
    """Steady state of one saturated lane (closed loop, the lane's batch always full)."""

    output_tokens_per_s: float
    """Of the whole deployment (the lane's rate × lanes)."""
    ttft_s: dict
    tpot_s: dict
    lanes: int


def steady_lane(scn: ServingScenario, cost: ServingCost | None = None, calibration: Calibration | None = None,
                *, warmup_batches: int = 1, measured_batches: int = 2) -> SteadyLane:
    """Serve one lane of a resolved deployment in a closed loop that keeps its batch (max_batch sequences) full:
    the first `warmup_batches` batches of requests warm it up and are not measured; the next `measured_batches`
    give the latency percentiles; the lane's rate times the lane count is the deployment's throughput (all lanes
    alike). A disaggregated deployment runs every prefill lane and one group of decode lanes
    (`_steady_disaggregated`: its prefill and decode lanes differ)."""
    scn2, lim = resolve_limits(resolve_formats(scn, ()))
    p = scn2.plan
    B = lim.max_batch
    lanes = p.replicas * p.dp * p.pp
    n = B * (warmup_batches + measured_batches)
    if p.disaggregated:
        return _steady_disaggregated(scn2, lim, calibration, 1.5, cost)
    if p.policy == "static":
        load = dataclasses.replace(scn.load, num_requests=n * lanes, concurrency=0, arrival="fixed-batch",
                                   batch_size=B * lanes)
        res = simulate(dataclasses.replace(scn, load=load), (), calibration, log_lane=False).result
        keep = np.arange(res.arrival_s.size) >= B * lanes * warmup_batches
        ttft = (res.first_token_s - res.arrival_s)[keep]
        many = keep & (res.output_tokens > 1)
        tpot = ((res.finish_s - res.first_token_s)[many] / (res.output_tokens[many] - 1))
        return SteadyLane(res.output_tokens_per_s, summary(ttft), summary(tpot), lanes)
    cost = (cost or ServingCost(scn2, max(lim.max_num_tokens, B * (1 + p.spec_tokens)), calibration)
            ).for_limits(B, lim.max_num_tokens)
    load = scn.load
    if load.arrival == "trace":
        n_in = np.resize(np.array([r[1] for r in load.requests], dtype=np.int64), n)
        n_out = np.resize(np.array([r[2] for r in load.requests], dtype=np.int64), n)
    else:
        n_in = np.full(n, load.input_tokens, dtype=np.int64)
        n_out = np.full(n, load.output_tokens, dtype=np.int64)
    arr = np.zeros(n)
    first, finish = np.full(n, np.nan), np.full(n, np.nan)
    spec = LaneSpec(B, lim.max_num_tokens, lim.lane_blocks(p.pp), lim.block_tokens,
                    p.policy, p.admission, bool(p.chunked_prefill), p.spec_tokens,
                    spec_gain(p.spec_tokens, p.spec_acceptance), kv_window_share=lim.memory.window_share,
                    kv_window_tokens=lim.memory.window_tokens)
    lane = Lane(spec, step_pricer(cost, p.spec_draft_layers, p.spec_tokens), np.arange(n), arr, n_in, n_out, first,
                finish, LaneTotals(), None, B)
    lane.run()
    keep = np.arange(n) >= B * warmup_batches
    t0 = float(arr[keep].min())
    rate = float(n_out[keep].sum()) / (float(finish[keep].max()) - t0)
    many = keep & (n_out > 1)
    tpot = (finish[many] - first[many]) / (n_out[many] - 1)
    return SteadyLane(rate * lanes, summary((first - arr)[keep]), summary(tpot), lanes)


def mean_lengths(load: Load) -> tuple[float, float]:
    """(prompt, output) tokens of a load's mean request, at least one each: a trace's mean lengths, else the load's
    own (what the capacity estimates size a deployment by)."""
    if load.arrival == "trace":
        lens = np.array([r[1:] for r in load.requests], dtype=np.int64)
        return max(1.0, float(lens[:, 0].mean())), max(1.0, float(lens[:, 1].mean()))
    return max(1, load.input_tokens), max(1, load.output_tokens)


def prefill_rate_per_s(cost: ServingCost, lanes: int, budget: int, isl: float) -> float:
    """Prompts per second one instance of `lanes` lanes finishes when every iteration is a full token budget of
    prompts of `isl` tokens (each producing its first token): its prefill capacity. A prompt longer than the budget
    runs in n = isl / budget chunks after 0, budget, … (n − 1)·budget cached tokens: (isl − budget) / 2 cached
    ahead of a chunk on average, whose keys and values the chunk reads (and MLA rebuilds)."""
    prompts = max(1.0, budget / isl)
    cached = max(0.0, (isl - budget) / 2.0)
    return lanes * budget / isl / cost.iteration_s(budget, 0, 0, budget, budget * (isl + 1) / 2, budget + cached,
                                                   prompts)


def decode_rate_per_s(cost: ServingCost, lanes: int, batch: int, isl: float, osl: float, *, spec_tokens: int = 0,
                      spec_acceptance: float = 0.0, draft_layers: int = 1) -> float:
    """Requests per second one instance of `lanes` lanes finishes decoding with every lane's batch full (`batch`
    sequences at their mean context, isl + osl / 2): its decode capacity. One step is priced as a decode-only lane
    prices it (serving_run.step_pricer): batch · q query tokens, q = 1 + k under speculative decoding with k draft
    tokens, plus the k draft passes; each step yields spec_gain(k, α) tokens a sequence (Leviathan et al. 2023,
    eq. 1), so a request takes osl / gain steps: lanes · batch · gain / osl / step."""
    q = 1 + spec_tokens
    step = step_pricer(cost, draft_layers, spec_tokens)
    return lanes * batch * spec_gain(spec_tokens, spec_acceptance) / osl / step(
        batch * q, batch, batch * (isl + osl / 2), 0, 0, 0, batch, q)


def decode_batch(lim: Limits, pp: int, batch: int, isl: float, osl: float, admission: str) -> int:
    """Sequences a decode lane holds at once under its batch limit `batch`: no more than its KV cache fits — each
    request holding its whole length, isl + osl, when admission reserves it up front, isl + osl / 2 on average when
    blocks are taken as the sequence grows ('on-demand') — and at least one. Sliding-window layers hold only their
    window (`ServingMemory.footprint`), as the simulator's lanes count them."""
    per_seq = lim.memory.footprint(isl + (osl if admission == "reserve" else osl / 2))
    return max(1, min(int(batch), int(lim.lane_blocks(pp) // math.ceil(per_seq / lim.block_tokens))))


def decode_capacity(cost: ServingCost, lim: Limits, lanes: int, pp: int, isl: float, osl: float, admission: str,
                    plan: ServingPlan | None = None) -> tuple[float, int]:
    """(requests per second, sequences per lane) of an instance's decode lanes with each lane's batch as full as its
    limit, its token budget (q = 1 + k tokens a decode: serving_sim.decode_lane_seqs, as a decode-only lane admits)
    and its KV cache allow (decode_batch, decode_rate_per_s; under `plan`'s speculative decoding when given): the
    decode capacity the steady state, the disaggregation what-if and the serving search all price."""
    q = 1 + (plan.spec_tokens if plan is not None else 0)
    batch = decode_lane_seqs(decode_batch(lim, pp, lim.max_batch, isl, osl, admission), lim.max_num_tokens, q)
    spec = {} if plan is None else {"spec_tokens": plan.spec_tokens, "spec_acceptance": plan.spec_acceptance,
                                    "draft_layers": plan.spec_draft_layers}
    return decode_rate_per_s(cost, lanes, batch, isl, osl, **spec), batch


def matched_split(num_gpus: int, decode_gpus: int, prefill_gpus: int, decode_rate: float, prefill_rate: float
                  ) -> tuple[int, int] | None:
    """(decode instances, prefill instances) of a disaggregated deployment on exactly `num_gpus` GPUs, at least one of
    each, whose request rate min(prefill instances · prefill_rate, decode instances · decode_rate) is highest — the
    replication step of DistServe's placement (Zhong et al., OSDI 2024, §4.1, Algorithm 1: each phase's instance
    layout chosen for its own goodput, then instances replicated until the two phases' rates match); ties go to
    fewer prefill GPUs. None when no split fills the GPUs exactly."""
    best, key = None, None
    for n_pre in range(1, (num_gpus - decode_gpus) // prefill_gpus + 1):
        rest = num_gpus - n_pre * prefill_gpus
        if rest < decode_gpus or rest % decode_gpus:
            continue
        n_dec = rest // decode_gpus
        k = (min(n_pre * prefill_rate, n_dec * decode_rate), -n_pre * prefill_gpus)
        if key is None or k > key:
            best, key = (n_dec, n_pre), k
    return best


DISAGG_LOAD = 0.9
"""Share of its estimated capacity at which a disaggregated deployment's steady state is measured."""


def _steady_disaggregated(scn: ServingScenario, lim: Limits, calibration, batches: float,
                          cost: ServingCost | None) -> SteadyLane:
    """Steady state of a disaggregated deployment: the smallest deployment with the same prefill : decode ratio
    (per-GPU figures do not depend on the scale), fed a Poisson stream at DISAGG_LOAD of the smaller of its prefill
    capacity (token budget per iteration over a full iteration's time) and its decode capacity (batch over OSL
    steps at full batch — the batch limit, or what the lane's KV cache holds when that is less: decode_batch).
    Every prefill lane is simulated (together they make the stream each decode lane sees), but
    only one lockstep group of decode lanes (the dp ranks of one decode instance micro-batch): the groups are alike,
    each fed its round-robin share of that stream, as `steady_lane` serves one lane of a colocated deployment.
    TPOT is read on the group's requests after the first batch of requests (a batch per decode lane), over half a
    batch more per lane (at least 16 requests per group), TTFT on the group's requests after that first batch (the
    client's first token comes when a decode lane admits the request); the deployment's rate is the group's — the
    output tokens it generates between the first measured arrival and the last arrival, per second
    (`window_output_tokens_per_s`) — times the groups. That window is the load's steady part: it opens once a batch
    per lane has arrived (no sooner than a request's sojourn at a lane that holds at most its batch, so the lane has
    filled) and closes with the last arrival, before the drain, which a sample this short would read as idle (first
    arrival to last finish read ~0.7 of the sustained rate at 512 + 1,024 tokens); a colocated lane's closed loop
    has no drain."""
    p = scn.plan
    g = gcd(p.prefill_replicas, p.replicas - p.prefill_replicas)
    small = dataclasses.replace(p, replicas=p.replicas // g, prefill_replicas=p.prefill_replicas // g)
    scn = dataclasses.replace(scn, plan=small, num_gpus=small.num_gpus)
    need = max(lim.max_num_tokens, lim.max_batch * (1 + small.spec_tokens))  # what simulate prices (no rebuild)
    if cost is None or cost.grid[-1] < need:
        cost = ServingCost(scn, need, calibration)
    cost = cost.for_limits(lim.max_batch, lim.max_num_tokens)
    load = scn.load
    trace = np.array([r[1:] for r in load.requests], dtype=np.int64) if load.arrival == "trace" else None
    isl, osl = mean_lengths(load)  # a trace's requests are cycled over the stream below
    per = small.dp * small.pp
    pre_cost, pre_per, budget, own = cost, per, lim.max_num_tokens, None
    if small.prefill_pool() is not None:  # prefill instances of their own layout and limits
        pool = prefill_pool(scn, calibration)
        pre_cost, pre_per, budget, own = pool.cost, pool.lanes_per_instance, pool.lim.max_num_tokens, pool.cost
    pre_rate = prefill_rate_per_s(pre_cost, small.prefill_replicas * pre_per, budget, isl)
    B = lim.max_batch
    dec_rate, _ = decode_capacity(cost, lim, (small.replicas - small.prefill_replicas) * per, small.pp, isl, osl,
                                  small.admission, small)
    groups = (small.replicas - small.prefill_replicas) * small.pp  # lockstep groups of dp decode lanes
    warm = B * groups * small.dp
    n = warm + max(int(warm * (batches - 1)), 16 * groups)
    rate = DISAGG_LOAD * min(pre_rate, dec_rate)
    if trace is not None:  # the trace's requests, cycled, on the same seeded Poisson stream a fixed load gets
        t = poisson_arrivals_s(rate, n, load.seed)
        lens = np.resize(trace, (n, 2))
        load = dataclasses.replace(load, requests=tuple((float(a), int(i), int(o)) for a, (i, o) in zip(t, lens)),
                                   concurrency=0)
    else:
        load = dataclasses.replace(load, arrival="poisson", rate_per_s=rate, num_requests=n, concurrency=0)
    run = simulate(dataclasses.replace(scn, load=load), (), calibration, log_lane=False, cost=cost, decode_groups=1,
                   prefill_cost=own, handoff_share=plan_handoff_scale_out_share(p, scn.system.scale_up_domain))
    res = run.result
    ids = np.arange(n) if run.sampled is None else run.sampled
    keep = ids >= warm
    many = keep & (res.output_tokens > 1)
    tpot = (res.finish_s - res.first_token_s)[many] / (res.output_tokens[many] - 1)
    ttft = res.ttft_s[keep]
    start, end = float(res.arrival_s[keep].min()), float(res.arrival_s.max())  # the measured arrivals' span
    rate = window_output_tokens_per_s(res.first_token_s, res.finish_s, res.output_tokens, start, end)
    rate *= run.sample_scale / small.num_gpus * p.num_gpus
    return SteadyLane(rate, summary(ttft), summary(tpot), p.replicas * per)
