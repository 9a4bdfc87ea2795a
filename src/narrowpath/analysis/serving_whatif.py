"""Verdict of a serving run: the narrowest path (the account that takes the largest share of an iteration, or
waiting when requests spend longer queued than served), and a ranked list of changes, each a re-simulation of
the changed deployment under the same load (a what-if run, not a rule of thumb): more tensor parallelism, an FP8
KV cache, disaggregated prefill/decode pools (their instance counts matched to the two phases' rates), a larger
scale-up domain, an expert load balancer (MoE over expert-parallel ranks), finer CUDA graph sizes (an engine that
pads decode batches to captured sizes), CUDA graphs (a static session that launches each step kernel by kernel), a
newer engine (a stack its project has replaced — vLLM V0 by V1 — on the new one's defaults: stack `successor`),
speculative decoding (when an acceptance rate is given). What-ifs run at most `whatif_requests` requests (a closed
loop's at least WHATIF_CONCURRENCY_MULTIPLE times its concurrency); the baseline they are compared with is re-run on
that same load, and the verdict says how many of the run's requests that is.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from narrowpath.analysis.serving_accounts import (DISPATCH_KEY, HOST_KEY, L2_REREAD_KEY, LAUNCH_KEY, LOCKSTEP_KEY,
                                                  PAD_KEY, ServingAccounts)
from narrowpath.catalog.serving import serving_stack
from narrowpath.errors import NarrowpathError
from narrowpath.schedule.serving_cost import captured_graph_sizes, finer_graph_sizes, graph_settings
from narrowpath.schedule.serving_place import plan_handoff_scale_out_share
from narrowpath.schedule.serving_run import ServingRun, simulate
from narrowpath.schedule.serving_stats import summary
from narrowpath.schedule.serving_steady import decode_capacity, matched_split, mean_lengths, prefill_rate_per_s
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario, serving_consistency
from narrowpath.workload.moe import router_load_cv

WHATIF_REQUESTS = 1000
"""Requests a what-if runs at most when the load has more (re-simulating every change on the whole load would cost
as many full runs as there are what-ifs)."""
WHATIF_CONCURRENCY_MULTIPLE = 5
"""A closed loop's what-ifs run at least this many times its concurrency: with fewer, every request is sent at once
and the batch drains without reaching the steady state the headline reports. Measured (fifty-sixth session's
review): DeepSeek-R1 on 8 B200 at concurrency 7,168 gave a 3,729 tok/s/GPU baseline on 1,000 requests against the
headline's 7,334, the expert balancer +1.8 % against +4.3 % on the whole load, and at concurrency 3,072 the FP8 KV
cache +5.4 % against +34.2 % (two what-ifs swapped places); at 5x every gain came within a point of the whole load's,
at 3x not (FP8 KV at concurrency 1,024: +31.4 against +35.5 %)."""


@dataclass(frozen=True, slots=True)
class WhatIf:
    name: str
    change: str
    output_tokens_per_s_per_gpu: float
    ttft_p50_s: float
    tpot_p50_s: float
    e2e_p50_s: float
    gain: float
    """Improvement against the baseline on the same load: relative gain of output tokens/s per GPU when the
    baseline is saturated (its throughput falls short of the offered load), else relative cut of the median
    end-to-end latency (a server that keeps up cannot serve more than it is offered)."""
    num_gpus: int


@dataclass(frozen=True, slots=True)
class ServingVerdict:
    narrowest: str
    detail: str
    baseline: WhatIf
    whatifs: tuple[WhatIf, ...]
    ranked_by: str
    """`throughput per GPU` or `median end-to-end latency`."""
    skipped: tuple[tuple[str, str], ...]
    """(what-if, why it was not run)."""
    requests: int
    """Requests each what-if and the baseline ran (`whatif_requests`)."""
    of_requests: int
    """Requests of the run itself: the what-ifs ran on its first `requests` when fewer."""


def whatif_requests(load: Load, slots: int = 0) -> int:
    """Requests each what-if (and the baseline it is compared with) runs: the whole load when it is a trace or
    small, else WHATIF_REQUESTS or more — WHATIF_CONCURRENCY_MULTIPLE times the requests in flight at the steady
    state: a closed loop's concurrency, or for an offline or Poisson load the `slots` the deployment holds at once
    (lanes × max batch: the batch such a load fills when it saturates the server); fixed batches whole (a cut batch
    is a smaller batch, another regime)."""
    if load.arrival == "trace":
        return load.total_requests
    held = load.concurrency or (slots if load.arrival in ("offline", "poisson") else 0)
    floor = max(WHATIF_REQUESTS, WHATIF_CONCURRENCY_MULTIPLE * held)
    if load.arrival == "fixed-batch" and load.batch_size:
        floor = -(-floor // load.batch_size) * load.batch_size
    return min(load.total_requests, floor)


def _load(scn: ServingScenario, slots: int = 0) -> Load:
    load = scn.load
    n = whatif_requests(load, slots)
    return load if n == load.total_requests else dataclasses.replace(load, num_requests=n)


def _measure(name: str, change: str, scn: ServingScenario, base: "WhatIf | None", by_latency: bool) -> WhatIf:
    res = simulate(scn, (), log_lane=False).result
    per_gpu = res.output_tokens_per_s / scn.num_gpus
    e2e = summary(res.e2e_s)["p50"]
    if base is None:
        gain = 0.0
    elif by_latency:
        gain = 1.0 - e2e / base.e2e_p50_s if base.e2e_p50_s else 0.0
    else:
        gain = per_gpu / base.output_tokens_per_s_per_gpu - 1.0
    return WhatIf(name, change, per_gpu, summary(res.ttft_s)["p50"], summary(res.tpot_s)["p50"], e2e, gain,
                  scn.num_gpus)


def keeps_up(scn: ServingScenario, output_tokens_per_s: float) -> bool:
    """Whether an open-loop load is served as fast as it is offered (within 5 %)."""
    load = scn.load
    if load.arrival == "poisson":
        offered = load.rate_per_s * load.output_tokens
    elif load.arrival == "trace" and len(load.requests) > 1:
        span = load.requests[-1][0] - load.requests[0][0]
        offered = sum(r[2] for r in load.requests) / span if span > 0 else float("inf")
    else:
        return False
    return output_tokens_per_s >= 0.95 * offered


def matched_prefill_replicas(run: ServingRun) -> int:
    """Prefill instances for the disaggregation what-if: of the run's replicas (at least two) of its own layout, the
    split whose prefill and decode capacities match best (schedule.serving_steady.matched_split, DistServe's
    replication step; each instance's prefill rate at the run's token budget, decode rate with its batch as full as
    the limit and the lane's KV cache allow, serving_steady.decode_capacity, as the steady state and the search price
    it); 0 when no split exists."""
    p, lim = run.scenario.plan, run.limits
    isl, osl = mean_lengths(run.scenario.load)
    lanes, g = p.dp * p.pp, p.instance_gpus
    split = matched_split(max(2, p.replicas) * g, g, g, decode_capacity(run.cost, lim, lanes, p.pp, isl, osl,
                                                                        p.admission, p)[0],
                          prefill_rate_per_s(run.cost, lanes, lim.max_num_tokens, isl))
    return split[1] if split else 0


def more_tp(p: ServingPlan) -> ServingPlan:
    """The "more TP" what-if's plan: every instance's tensor parallelism doubled — the decode instances' tp and, when
    the prefill pool has a tp of its own, its prefill_tp (a pool on the decode layout follows it) — on the same GPUs
    where each pool's instance count halves (both even: the same prefill : decode ratio), else on the same instance
    counts (twice the GPUs). A disaggregated plan stays disaggregated (at least one prefill instance)."""
    pre, dec = p.prefill_replicas, p.replicas - p.prefill_replicas
    halve = pre % 2 == 0 and dec % 2 == 0
    return dataclasses.replace(p, tp=p.tp * 2, prefill_tp=p.prefill_tp * 2,
                               replicas=p.replicas // 2 if halve else p.replicas,
                               prefill_replicas=pre // 2 if halve else pre)


def candidates(scn: ServingScenario, spans_cross: bool, decode_limit: int = 0, policy: str = "",
               graph_sizes: tuple[int, ...] = (), prefill_replicas: int = 0
               ) -> tuple[list[tuple[str, str, ServingScenario]], list[tuple[str, str]]]:
    """(name, change, scenario) of each applicable what-if, and (name, reason) of those that do not apply.
    `decode_limit`: the largest decode batch the run's limits allow (its batch limit and token budget); `policy`:
    the iteration policy the run resolved to (default: the given plan's); `graph_sizes`: the decode graph list the run
    resolved to, which a stack may fill per device (SGLang's; default: the given plan's or its stack's);
    `prefill_replicas`: the disaggregation what-if's prefill instances (`matched_prefill_replicas`; 0: a quarter of
    the replicas)."""
    p, m, sysm = scn.plan, scn.model, scn.system
    out, skipped = [], []

    def plan_ok(plan, system=sysm) -> str:
        errs = serving_consistency(m, plan, plan.num_gpus, system)
        return errs[0][1] if errs else ""

    more = more_tp(p)
    why = plan_ok(more)
    if why:
        skipped.append(("more TP", why))
    else:
        same = more.num_gpus == p.num_gpus
        change = f"tp {p.tp} → {more.tp}" + (f", prefill tp {p.prefill_tp} → {more.prefill_tp}" if p.prefill_tp
                                              else "")
        if same and p.disaggregated:
            change += (f", {p.prefill_replicas} + {p.replicas - p.prefill_replicas} → {more.prefill_replicas} + "
                       f"{more.replicas - more.prefill_replicas} prefill + decode instances")
        elif same:
            change += f", replicas {p.replicas} → {more.replicas}"
        out.append(("more TP", change + ("" if same else f" ({more.num_gpus} GPUs)"),
                    dataclasses.replace(scn, plan=more, num_gpus=more.num_gpus)))
    if p.kv_precision in ("fp8", "fp4"):
        skipped.append(("FP8 KV cache", f"the KV cache is already {p.kv_precision}"))
    elif "fp8" not in sysm.device.peak_matrix_flop_per_s:
        skipped.append(("FP8 KV cache", f"{sysm.device.name} has no FP8 support"))
    else:
        out.append(("FP8 KV cache", f"kv {p.kv_precision} → fp8",
                    dataclasses.replace(scn, plan=dataclasses.replace(p, kv_precision="fp8"))))
    if p.disaggregated:
        skipped.append(("disaggregation", "already disaggregated"))
    elif p.policy == "static" or scn.load.arrival == "fixed-batch":
        skipped.append(("disaggregation", "a static batch has no prefill/decode interference to remove"))
    else:
        reps = p.replicas if p.replicas >= 2 else 2
        matched = 0 < prefill_replicas < reps
        dis = dataclasses.replace(p, replicas=reps, prefill_replicas=prefill_replicas if matched else max(1, reps // 4))
        out.append(("disaggregation", f"{dis.prefill_replicas} prefill + {reps - dis.prefill_replicas} decode "
                    f"instances" + (", matched to the two phases' rates" if matched else "")
                    + ("" if reps == p.replicas else f" ({dis.num_gpus} GPUs)"),
                    dataclasses.replace(scn, plan=dis, num_gpus=dis.num_gpus)))
    if not spans_cross:
        skipped.append(("larger scale-up domain", "every group and hand-off already stays in one scale-up domain"))
    else:
        dom = max(72, p.instance_gpus * 2, p.num_gpus if p.disaggregated else 0)  # every hand-off in one domain
        tiers = tuple(dataclasses.replace(t, domain_size=dom) if t.name == "scale_up" else t for t in sysm.tiers)
        big = dataclasses.replace(sysm, tiers=tiers, name=f"{sysm.name}+nvl{dom}")
        out.append(("larger scale-up domain", f"scale-up domain {sysm.scale_up_domain} → {dom} GPUs",
                    dataclasses.replace(scn, system=big)))
    if m.moe is not None:
        if p.ep == 1:
            skipped.append(("expert load balancer", "the experts are split by tensor parallelism (ep 1): every GPU "
                            "holds a slice of each, so no rank is hotter than another"))
        elif not router_load_cv(m.moe.num_experts):
            skipped.append(("expert load balancer", f"a coarse router of {m.moe.num_experts} experts is priced as "
                            "random assignment already (no measured skew to remove)"))
        elif p.expert_balance == "eplb":
            skipped.append(("expert load balancer", "an expert load balancer already evens the ranks' loads"))
        else:
            out.append(("expert load balancer", f"EPLB over the {p.ep} expert-parallel ranks (hot experts "
                        "replicated and placed)",
                        dataclasses.replace(scn, plan=dataclasses.replace(p, expert_balance="eplb"))))
    stack = serving_stack(p.framework)
    sizes, padding = graph_settings(p, stack)
    sizes = sizes or graph_sizes
    name = "finer CUDA graph sizes"
    if not sizes:
        skipped.append((name, "the engine is not held to a list of captured decode batch sizes"))
    elif (policy or p.policy) == "static" or scn.load.arrival == "fixed-batch":
        skipped.append((name, "a static batch decodes at one size throughout"))
    else:
        limit = decode_limit or max(sizes)
        fine = finer_graph_sizes(limit)
        if padding and set(captured_graph_sizes(fine, limit, limit, 1, True)) <= \
                set(captured_graph_sizes(sizes, limit, limit, 1, True)):
            skipped.append((name, "decode graphs are already captured every 8 sequences to 128 and every 64 above"))
        else:
            out.append((name, "decode graphs every 8 sequences to 128, every 64 above (tech blog 20's list)"
                        + ("" if padding else ", with padding"),
                        dataclasses.replace(scn, plan=dataclasses.replace(p, graph_batch_sizes=fine,
                                                                          graph_padding=True))))
    name = "CUDA graphs"
    if sizes:  # whether or not the engine waits for each step (vLLM V0's does)
        skipped.append((name, "decode steps already replay captured graphs"))
    elif not stack.get("host_sync_per_step"):
        skipped.append((name, "the engine does not wait for each step before launching the next kernel by kernel"))
    else:
        limit = max(1, decode_limit or p.max_batch or 1)
        out.append((name, "decode steps as captured graphs, one launch each (--enable_cuda_graph)",
                    dataclasses.replace(scn, plan=dataclasses.replace(p, graph_batch_sizes=tuple(range(1, limit + 1)),
                                                                      graph_padding=False))))
    if stack.get("successor"):  # an engine its project has replaced: the same deployment on the new one's defaults
        new = serving_stack(stack["successor"])
        out.append(("newer engine", f"{p.framework} → {stack['successor']} ({new['id']}: its own defaults for the "
                    "knobs the deployment leaves out)",
                    dataclasses.replace(scn, plan=dataclasses.replace(p, framework=stack["successor"]))))
    if p.spec_acceptance > 0 and not p.spec_tokens and p.policy != "static":
        for k in (1, 2, 4):
            out.append((f"speculative decoding k={k}", f"{k} draft tokens at acceptance {p.spec_acceptance:g}",
                        dataclasses.replace(scn, plan=dataclasses.replace(p, spec_tokens=k))))
    return out, skipped


HOST_REMEDY = {
    HOST_KEY: "; the engine's host loop handles every request of an iteration on one thread, so faster GPUs or more TP "
              "do not shorten it: fewer requests per loop do (more attention-DP ranks or replicas, each with its own "
              "loop), a faster host CPU or scheduler, or — where the step waits for it (vLLM V0) — an engine that "
              "overlaps it with the GPU (multi-step scheduling, vLLM V1)",
    LAUNCH_KEY: "; the session enqueues a step's kernels one by one only after the previous step has finished, so the "
                "GPU idles while the host launches: CUDA graphs or an in-flight batching executor that enqueues ahead "
                "remove it, fewer kernels per step (fused ops, fewer layers per GPU) shorten it",
    DISPATCH_KEY: "; these iterations run eagerly, every kernel issued by the framework's host thread, so a faster GPU "
                  "does not shorten them: capturing the batch in a CUDA graph (a graph size that fits, padding), fewer "
                  "prompt iterations (a larger token budget) or a faster host do",
    PAD_KEY: "; decode batches run at the next captured CUDA graph size up, the rest dummy sequences: a finer list of "
             "graph sizes removes most of it",
    LOCKSTEP_KEY: "; every MoE layer synchronises the attention-DP ranks, so an iteration lasts as long as the "
                  "slowest rank's and a rank with a prompt chunk or longer contexts holds up the others: balancing "
                  "the ranks' work (an attention-DP-aware scheduler that gives each rank prompts together), smaller "
                  "prompt chunks, or fewer attention-DP ranks",
    L2_REREAD_KEY: "; the engine's generation kernel gives each query head its own thread block for this model (its "
                   "grouped-query kernel does not take this many query heads per kv head at this head width), so each "
                   "kv head's cache streams through L2 once per query head: an engine whose decode kernel shares the "
                   "load across the group (XQA for this shape, FlashDecoding) reads it once",
}
"""What shortens a host, padding or L2 re-read row when it is the narrowest path (appended to the verdict's detail)."""


def serving_verdict(run: ServingRun, acc: ServingAccounts) -> ServingVerdict:
    """Narrowest path of `run` and its what-ifs, ranked by throughput per GPU."""
    given = run.given or run.scenario
    scn = dataclasses.replace(given, load=_load(given, run.result.lanes * run.limits.max_batch))
    base = _measure("baseline", "as given", scn, None, False)
    by_latency = keeps_up(scn, base.output_tokens_per_s_per_gpu * scn.num_gpus)
    res = run.result
    wait = float((res.ttft_s - 0).mean()) - float(acc.mean.duration_s)
    service = float(res.e2e_s.mean() - res.ttft_s.mean())
    top = max(acc.time_split.items(), key=lambda kv: kv[1]) if acc.time_split else ("", 0.0)
    if wait > service and wait > 0:
        narrowest = "waiting"
        detail = (f"requests wait {wait:.3g} s on average for a batch slot or KV space before their first token, "
                  f"longer than the {service:.3g} s of decoding that follows: the deployment is over-loaded "
                  f"(within an iteration, {top[0]} takes {top[1]:.0%})")
    else:
        narrowest = top[0]
        detail = f"{top[0]} takes {top[1]:.0%} of an iteration (mean batch {acc.mean.decodes:.0f} decodes + " \
                 f"{acc.mean.prompt_tokens:.0f} prompt tokens, {acc.mean.duration_s * 1e3:.2f} ms)"
        detail += HOST_REMEDY.get(narrowest, "")
    crosses = any(r.tier == "scale_out" for r in acc.collectives) or \
        plan_handoff_scale_out_share(run.scenario.plan, run.scenario.system.scale_up_domain) > 0  # as it was priced
    rp = run.scenario.plan
    cands, skipped = candidates(scn, crosses, min(rp.max_batch, rp.max_num_tokens // (1 + rp.spec_tokens)),
                                rp.policy, rp.graph_batch_sizes,
                                0 if rp.disaggregated or rp.policy == "static" else matched_prefill_replicas(run))
    results = []
    for name, change, alt in cands:
        try:
            results.append(_measure(name, change, alt, base, by_latency))
        except NarrowpathError as exc:
            skipped.append((name, str(exc)))
    results.sort(key=lambda w: -w.gain)
    return ServingVerdict(narrowest, detail, base, tuple(results),
                          "median end-to-end latency" if by_latency else "throughput per GPU", tuple(skipped),
                          scn.load.total_requests, given.load.total_requests)
