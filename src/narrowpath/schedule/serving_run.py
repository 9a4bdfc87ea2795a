"""Simulate a serving deployment: resolve the engine's defaults, price iterations (schedule.serving_cost), lay the
requests out on lanes and run each lane (schedule.serving_sim), or a static batch schedule.

Lanes: an instance has dp attention-DP ranks × pp micro-batches; a colocated deployment has replicas × dp × pp
lanes, all alike; a disaggregated one has prefill lanes (prefill_replicas × dp × pp of the prefill pool's own layout
when it has one, `prefill_pool`) whose finished prompts reach the decode lanes after the KV hand-off — pool after
pool in open loop, together in one event loop under a closed loop (schedule.serving_disagg). Requests go to lanes round-robin in arrival order (a load balancer in front
of the replicas, TensorRT-LLM's attention-DP balancing inside an instance); the expert layers see every rank's
tokens, so lanes are priced as if all ranks carried the same load.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from narrowpath.errors import SimulationError, SpecError
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import Limits, resolve_formats, resolve_layout_defaults, resolve_limits
from narrowpath.schedule.serving_place import plan_handoff_scale_out_share
from narrowpath.schedule.serving_sim import Lane, LaneGroup, LaneSpec, linear_runs_s
from narrowpath.schedule.serving_stats import IterationRecord, LaneTotals, PoolTotals, ServingResult
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.serving import ServingPlan, ServingScenario


@dataclass
class ServingRun:
    """A resolved scenario, its cost model and limits, and the simulated result."""

    scenario: ServingScenario
    """The deployment as simulated (every default filled in)."""
    cost: ServingCost
    limits: Limits
    result: ServingResult
    given: ServingScenario | None = None
    """The deployment before the stack's limits were filled in (layout and formats chosen): what-ifs start here,
    so a changed layout gets its own limits."""
    sampled: np.ndarray | None = None
    """The requests (indices in arrival order) the result holds when only some decode lanes were simulated
    (`simulate(..., decode_groups=k)`); None: every request."""
    sample_scale: float = 1.0
    """Decode lanes of the deployment per decode lane simulated (1: every lane ran): the factor from the sampled
    groups' rate to the deployment's."""
    prefill_cost: ServingCost | None = None
    """The prefill instances' iteration cost when their layout differs (ServingPlan.prefill_pool); None: `cost`
    prices both."""
    prefill_limits: Limits | None = None

    @property
    def spec_gain(self) -> float:
        return spec_gain(self.scenario.plan.spec_tokens, self.scenario.plan.spec_acceptance)


def spec_gain(k: int, alpha: float) -> float:
    """Expected tokens per verification step with k draft tokens accepted with probability α each:
    (1 − α^(k+1)) / (1 − α) (Leviathan et al. 2023, eq. 1)."""
    if k <= 0:
        return 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha) if alpha < 1 else float(k + 1)


def poisson_arrivals_s(rate_per_s: float, n: int, seed: int) -> np.ndarray:
    """Arrival times of n requests of a Poisson stream (exponential gaps from a seeded numpy Generator), the first
    at 0."""
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_per_s, n)
    return np.cumsum(gaps) - gaps[0]


def arrivals(scn: ServingScenario) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival s, prompt tokens, output tokens) per request: all at 0 (offline, fixed batch; closed-loop requests
    beyond the concurrency are released later), a Poisson stream of the given rate (seeded numpy Generator), or
    the trace."""
    load = scn.load
    n = load.total_requests
    if load.arrival == "trace":
        r = np.asarray(load.requests, dtype=float)
        return r[:, 0] - r[0, 0], r[:, 1].astype(np.int64), r[:, 2].astype(np.int64)
    n_in = np.full(n, load.input_tokens, dtype=np.int64)
    n_out = np.full(n, load.output_tokens, dtype=np.int64)
    if load.arrival == "poisson":
        t = poisson_arrivals_s(load.rate_per_s, n, load.seed)
    else:
        t = np.zeros(n)
    return t, n_in, n_out


class _StepPricer:
    """Iteration pricing handed to the lanes: the lane's iteration with, under speculative decoding, k draft
    passes of `draft_layers` layers and the output layer over the decodes (an MTP/EAGLE draft head) on the GPU.
    `decode_line` prices decode-only iterations that differ only in their context (a run of decode steps); its
    lines are kept per batch (a lane's batch takes few distinct sizes, and every event starts a new run)."""

    __slots__ = ("cost", "draft_layers", "k", "_lines")

    def __init__(self, cost: ServingCost, draft_layers: int, k: int):
        self.cost, self.draft_layers, self.k = cost, draft_layers, k
        self._lines: dict = {}

    def draft_s(self, dec, pre_tok) -> float:
        """GPU time of the speculative draft passes of an iteration of `dec` decodes."""
        cost, k = self.cost, self.k
        if not (k and dec):
            return 0.0
        pp = cost.scn.plan.pp
        d = dec if pre_tok else cost.decode_rows(dec)  # the draft head runs in the target's graph
        per_layer = sum(cost.token_time_s(s, d) for s in range(pp)) / cost.scn.model.layers
        ops, trs = cost.head(d)
        return k * (self.draft_layers * per_layer + cost.op_s(ops) + sum(x.cost.time_s for x in trs))

    def __call__(self, T, dec, dctx, pre_tok, pairs, pctx, rows, q, requests=None):
        return self.cost.iteration_s(T, dec, dctx, pre_tok, pairs, pctx, rows, q, requests,
                                     self.draft_s(dec, pre_tok))

    def decode_graph(self, dec):
        """Batch a decode-only iteration of `dec` decodes runs at (its CUDA graph's size; None: eagerly)."""
        return self.cost.decode_graph(dec)

    def decode_line(self, T, dec, rows, q):
        """A function of the decodes' context equal to self(T, dec, ctx, 0, 0, 0, rows, q)."""
        key = (T, dec, rows, q)
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = self.cost.context_line(T, dec, 0, rows, q, None, self.draft_s(dec, 0))
        return line


def step_pricer(cost: ServingCost, draft_layers: int, k: int) -> _StepPricer:
    """The iteration pricing of a lane (`_StepPricer`): what the simulator's lanes, the steady-state search and the
    serving accounts' draft time all price a step with."""
    return _StepPricer(cost, draft_layers, k)


def _static(cost: ServingCost, lim: Limits, rids, arr, n_in, n_out, first, finish, tot: LaneTotals, log) -> None:
    """Static batching: take `max_batch` requests, run all their prompts in one context pass, decode the batch
    until its longest request ends (finished slots stay in the batch), then the next batch."""
    B, now = lim.max_batch, 0.0
    step = step_pricer(cost, 1, 0)
    blocks = lim.memory.kv_blocks // cost.scn.plan.pp
    for start in range(0, len(rids), B):
        ids = rids[start:start + B]
        b = len(ids)
        need = sum(math.ceil(lim.memory.footprint(int(n_in[i] + n_out[i])) / lim.block_tokens) for i in ids)
        if need > blocks:
            raise SimulationError(f"a static batch of {b} sequences of {int(n_in[ids].max())} + "
                                  f"{int(n_out[ids].max())} tokens needs {need} KV blocks; a lane holds {blocks} "
                                  f"(reduce the batch or add GPUs)")
        now = max(now, float(arr[ids].max()))
        P = float(n_in[ids].sum())
        dt = step(P, 0, 0.0, P, float((n_in[ids] * (n_in[ids] + 1) / 2).sum()), P, b, 1)
        _log(log, tot, now, dt, 1, 0, int(P), need)
        tot.prompt_iteration(0, 0.0, b, b)
        now += dt
        first[ids] = now
        ctx = P + b
        steps_total = int(n_out[ids].max()) - 1
        order = np.sort(np.unique(n_out[ids] - 1))
        done_steps = 0
        for target in order:
            n = int(target) - done_steps
            if n > 0:
                dt = linear_runs_s(lambda k, c=ctx: step(b, b, c + (k - 1) * b, 0, 0, 0, b, 1), n)
                _log(log, tot, now, dt, n, b, 0, need)
                read = n * ctx + b * n * (n - 1) / 2  # context tokens the n steps read
                tot.decode_ctx_tokens += read
                tot.decode_tokens += n * b
                tot.decode_only(n, b, read, step.decode_graph(b))
                now += dt
                ctx += n * b
                done_steps = int(target)
            finish[ids[n_out[ids] - 1 == target]] = now
        tot.prompt_tokens += P
        tot.prompt_pairs += float((n_in[ids] * (n_in[ids] + 1) / 2).sum())
        del steps_total


def _log(log, tot: LaneTotals, now, dt, steps, dec, prompt, blocks) -> None:
    tot.iterations += steps
    tot.busy_s += dt
    tot.tokens += steps * dec + prompt
    tot.kv_block_s += blocks * dt
    tot.kv_peak_blocks = max(tot.kv_peak_blocks, blocks)
    if log is not None:
        log.append(IterationRecord(now, dt, steps, dec, prompt, blocks))


def simulate(scn: ServingScenario, open_knobs: tuple[str, ...] = (), calibration: Calibration | None = None,
             *, log_lane: bool = True, merge: bool = True, cost: ServingCost | None = None,
             decode_groups: int = 0, pools_together: bool = False,
             prefill_cost: ServingCost | None = None, handoff_share: float | None = None) -> ServingRun:
    """Resolve the defaults of `scn` and simulate its load (module docstring). `cost`: an iteration cost model
    of the same layout and formats to reuse (a search prices a layout once for all its batch limits).
    `decode_groups` k > 0 (a disaggregated deployment): every prefill lane runs, but only the first k lockstep
    groups of decode lanes (the dp ranks of one decode instance micro-batch) — the rest are alike, each fed its
    round-robin share of the same prefill stream; the result then holds only the requests those groups served
    (`ServingRun.sampled`) — its throughput, makespan and token counts are the sampled groups' (× `sample_scale` for
    the deployment's rate), while its totals (`LaneTotals`, hand-offs, KV block-seconds) cover every prefill lane and
    the sampled decode lanes only. What the serving search's
    steady state reads; `serve` simulates every lane. A disaggregated deployment under a closed loop runs its pools
    together (schedule.serving_disagg); `pools_together` runs an open-loop one so too (the reference its faster
    pool-after-pool run is checked against). `prefill_cost`: the same for a prefill pool of its own layout.
    `handoff_share`: the share of KV hand-offs over scale-out (None: this deployment's placement,
    schedule.serving_place; a smaller deployment standing in for a larger one passes the larger one's)."""
    if decode_groups < 0:
        raise ValueError(f"decode_groups must be >= 0, got {decode_groups}")
    scn, open_knobs = resolve_layout_defaults(scn, open_knobs)
    if any(k in open_knobs for k in ("tp", "pp", "ep")):
        from narrowpath.schedule.serving_choose import choose_layout
        scn = choose_layout(scn, open_knobs, calibration)
    scn = resolve_formats(scn, open_knobs)
    given = scn
    scn, lim = resolve_limits(scn)
    p = scn.plan
    q = 1 + p.spec_tokens
    need = max(lim.max_num_tokens, lim.max_batch * q)
    if cost is None or cost.grid[-1] < need:
        cost = ServingCost(scn, need, calibration)
    cost = cost.for_limits(lim.max_batch, lim.max_num_tokens)
    gain = spec_gain(p.spec_tokens, p.spec_acceptance)
    step = step_pricer(cost, p.spec_draft_layers, p.spec_tokens)
    arr, n_in, n_out = arrivals(scn)
    n = len(arr)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    per_rank = p.dp * p.pp
    lane_blocks = lim.lane_blocks(p.pp)
    tot = LaneTotals()
    tot_pre, tot_dec = (LaneTotals(), LaneTotals()) if p.disaggregated else (tot, tot)  # summed into tot after
    log: list = []
    notes = [f"{k}: {v}" for k, v in scn.chosen]
    conc = scn.load.concurrency
    dec_pool = pre_pool = _Pool(p, lim, cost, step, lane_blocks)
    if p.prefill_pool() is not None:
        pre_pool = prefill_pool(scn, calibration, prefill_cost)
        notes += [f"prefill {k}: {v}" for k, v in pre_pool.scn.chosen]

    def lane_groups(rids_all: np.ndarray, lanes: int, policy: str, arr_v: np.ndarray, groups: int = 0,
                    lane_conc: int = -1, pool: _Pool = dec_pool, totals: LaneTotals = tot) -> list[list[Lane]]:
        """Lanes i, i + 1, ... of one lockstep group are the dp attention-DP ranks of one instance micro-batch
        (of `pool`'s layout); `groups` > 0 builds only the first that many groups. Lane i serves rids_all[i::lanes];
        under a per-lane closed loop (`lane_conc` -1: the deployment's concurrency spread over its lanes) the
        requests beyond its share are released as it finishes others."""
        out = []
        pl, dp = pool.lim, pool.plan.dp
        spec = LaneSpec(pl.max_batch, pl.max_num_tokens, pool.lane_blocks, pl.block_tokens, policy, p.admission,
                        bool(p.chunked_prefill), p.spec_tokens, gain, merge, pl.memory.window_share,
                        pl.memory.window_tokens)
        earliest = arr_v.copy()  # the arrivals a closed loop holds back: no request is sent before its own
        for g in range(0, min(lanes, groups * dp) if groups else lanes, dp):
            group = []
            for i in range(g, min(g + dp, lanes)):
                rids = rids_all[i::lanes]
                lc = (-(-conc // lanes) if conc else 0) if lane_conc < 0 else lane_conc
                if lc and lc < len(rids):
                    arr_v[rids[lc:]] = np.inf
                group.append(Lane(spec, pool.step, rids, arr_v, n_in, n_out, first, finish, totals,
                                  log if (log_lane and i == 0) else None, lc, earliest))
            out.append(group)
        return out

    def run_lanes(rids_all: np.ndarray, lanes: int, policy: str, arr_v: np.ndarray, groups: int = 0,
                  pool: _Pool = dec_pool, totals: LaneTotals = tot) -> list[Lane]:
        out = []
        for group in lane_groups(rids_all, lanes, policy, arr_v, groups, pool=pool, totals=totals):
            if len(group) > 1:
                LaneGroup(group).run()
            else:
                group[0].run()
            out += group
        return out

    order = np.argsort(arr, kind="stable")
    sampled = ready = None
    n_pre = p.prefill_replicas * pre_pool.lanes_per_instance  # prefill lanes (0 colocated)
    n_dec = (p.replicas - p.prefill_replicas) * per_rank  # lanes that decode (every lane when colocated)
    if p.disaggregated:
        out = plan_handoff_scale_out_share(p, scn.system.scale_up_domain) if handoff_share is None else handoff_share
        fabric = "scale-up fabric" if out == 0 else "scale-out fabric" if out == 1 else \
            f"the mean of {out:.0%} over scale-out and the rest over scale-up: prefill instances laid out first, " \
            "then decode, packed by scale-up domain"
        h = cost.handoff_s(int(n_in.mean()), pre_pool.cost, out)
        notes.append(f"KV hand-off of a {int(n_in.mean())}-token prompt: {h * 1e3:.2f} ms per request ({fabric})")
        sizes, inverse = np.unique(n_in, return_inverse=True)
        handoff = np.array([cost.handoff_s(int(x), pre_pool.cost, out) for x in sizes])[inverse]  # per request
    if p.policy == "static":
        for i in range(n_dec):
            _static(cost, lim, order[i::n_dec], arr, n_in, n_out, first, finish, tot,
                    log if (log_lane and i == 0) else None)
    elif p.disaggregated and (pools_together or 0 < conc < n):
        sent = conc if 0 < conc < n else n
        ready = closed_loop_disaggregated(lane_groups, order, arr, handoff, n_out, pre_pool, dec_pool, sent,
                                          (tot_pre, tot_dec), gain, n_pre, n_dec)
        if sent < n:
            notes.append(f"closed loop across the pools: {conc} clients, each sending its next request when its last "
                         "one finishes decoding")
    elif p.disaggregated:
        pre_lanes = run_lanes(order, n_pre, "prefill-only", arr, pool=pre_pool, totals=tot_pre)
        ready = np.full(n, np.inf)
        for lane in pre_lanes:
            for t, rid in lane.ready:
                ready[rid] = t + handoff[rid]
                tot_pre.handoff_s += float(handoff[rid])
        dec = run_lanes(np.argsort(ready, kind="stable"), n_dec, "decode-only", ready, decode_groups,
                        totals=tot_dec)
        if decode_groups and len(dec) < n_dec:
            sampled = np.sort(np.concatenate([ln.rids for ln in dec]))
            notes.append(f"decode lanes sampled: {len(dec)} of {n_dec} (the requests they served)")
    else:
        run_lanes(order, n_dec, p.policy, arr)
    lanes_run, scale = n_pre + n_dec, 1.0
    if sampled is not None:
        arr, first, finish, n_in, n_out, ready = (a[sampled] for a in (arr, first, finish, n_in, n_out, ready))
        lanes_run, scale = n_pre + len(dec), n_dec / len(dec)
    if np.isnan(finish).any():
        raise SimulationError(f"{int(np.isnan(finish).sum())} requests never finished")
    pools = None
    if p.disaggregated:
        tot.add(tot_pre)
        tot.add(tot_dec)
        pools = {"prefill": PoolTotals(n_pre, p.prefill_replicas * pre_pool.plan.instance_gpus, pre_pool.lane_blocks,
                                       tot_pre),
                 "decode": PoolTotals(lanes_run - n_pre, (p.replicas - p.prefill_replicas) * p.instance_gpus,
                                      lane_blocks, tot_dec)}
    res = ServingResult(arr, first, finish, n_in, n_out, lanes_run, lane_blocks, lim.block_tokens, tot, log, notes,
                        ready, pools)
    return ServingRun(scn, cost, lim, res, given, sampled, scale, pre_pool.cost if pre_pool is not dec_pool else None,
                      pre_pool.lim if pre_pool is not dec_pool else None)


def closed_loop_disaggregated(lane_groups, order, arr, handoff, n_out, pre: _Pool, dec: _Pool, conc: int,
                              totals: tuple[LaneTotals, LaneTotals], gain: float, n_pre: int,
                              n_dec: int) -> np.ndarray:
    """Build a disaggregated deployment's lanes for the closed loop across its pools and run them together
    (schedule.serving_disagg): the first `conc` requests go out at their arrival times, the others as requests
    finish; decode lanes start with empty request buffers; `totals`: the prefill and the decode pool's sums (the
    hand-offs go to the prefill pool's); `handoff` per request; `n_pre`, `n_dec` the pools' lanes. Returns when each
    prompt's KV cache reached the decode pool."""
    from narrowpath.schedule.serving_disagg import run_closed_loop
    p = dec.plan
    earliest = arr.copy()  # no request is sent before its own arrival
    arr[order[conc:]] = np.inf
    pre_groups = lane_groups(order, n_pre, "prefill-only", arr, lane_conc=0, pool=pre, totals=totals[0])
    n = len(order)
    ready = np.full(n, np.inf)
    dec_groups = lane_groups(np.zeros(n, dtype=np.int64), n_dec, "decode-only", ready, lane_conc=0, pool=dec,
                             totals=totals[1])
    for group in dec_groups:
        for ln in group:
            ln.rids = np.zeros(-(-n // n_dec), dtype=np.int64)
            ln.released = 0
    q = 1 + p.spec_tokens
    floors = (pre.step(1, 0, 0.0, 1, 1.0, 1.0, 0, q, 1), dec.step.decode_line(q, 1, 1, q)(0.0))  # cheapest iterations
    new_steps = max(0, math.ceil((int(n_out.min()) - 1) / gain - 1e-9))
    run_closed_loop(pre_groups, dec_groups, order, arr, ready, handoff, conc, totals[0], floors, new_steps,
                    earliest)
    return ready


@dataclass(frozen=True)
class _Pool:
    """The instances of one layout: plan, limits, iteration cost and pricing, KV blocks per lane."""

    plan: ServingPlan
    lim: Limits
    cost: ServingCost
    step: _StepPricer
    lane_blocks: int
    scn: ServingScenario | None = None

    @property
    def lanes_per_instance(self) -> int:
        return self.plan.dp * self.plan.pp


def prefill_pool(scn: ServingScenario, calibration: Calibration | None, cost: ServingCost | None = None) -> _Pool:
    """A disaggregated deployment's prefill instances of their own layout (ServingPlan.prefill_pool): their limits
    (stack defaults for that layout unless given) and iteration cost (`cost`, one of this pool's layout and formats
    already built, is reused when its grid covers the pool's limits)."""
    pool = scn.plan.prefill_pool()
    pscn, lim = resolve_limits(dataclasses.replace(scn, plan=pool, num_gpus=pool.num_gpus, chosen=()))
    q = 1 + pool.spec_tokens
    if cost is None or cost.grid[-1] < max(lim.max_num_tokens, lim.max_batch * q):
        cost = ServingCost(pscn, max(lim.max_num_tokens, lim.max_batch * q), calibration)
    cost = cost.for_limits(lim.max_batch, lim.max_num_tokens)
    return _Pool(pscn.plan, lim, cost, step_pricer(cost, pool.spec_draft_layers, pool.spec_tokens),
                 lim.lane_blocks(pool.pp), pscn)


def check_fits(scn: ServingScenario) -> None:
    """Refuse (one line) a load whose single request cannot fit a lane's KV cache (of either pool when the prefill
    instances have a layout of their own)."""
    scn = resolve_formats(scn, ())
    scns = [scn]
    pool = scn.plan.prefill_pool()
    if pool is not None:
        scns.append(dataclasses.replace(scn, plan=pool, num_gpus=pool.num_gpus, chosen=()))
    load = scn.load
    prompt = max(r[1] for r in load.requests) if load.arrival == "trace" else load.input_tokens
    for one in scns:  # a prefill instance holds the prompt only
        _, lim = resolve_limits(one)
        tokens = load.max_seq_tokens if one is scn else prompt
        need = math.ceil(lim.memory.footprint(tokens) / lim.block_tokens)  # a windowed layer holds its window
        blocks = lim.lane_blocks(one.plan.pp)
        if need > blocks:
            where = "one lane of this deployment" if one is scn else "one lane of its prefill instances"
            raise SpecError("workload", f"a request of {tokens} tokens needs {need} KV blocks; {where} holds "
                            f"{blocks}")
