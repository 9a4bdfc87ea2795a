"""Where a disaggregated deployment's instances sit on the scale-up domains, and so which KV hand-offs cross the
scale-out fabric: the rule the hand-off's price (schedule.serving_cost.ServingCost.handoff_s), the run's note and
the larger-scale-up-domain what-if (analysis.serving_whatif) all read.

Assumed placement (stated, not measured): the instances are laid out in order — the prefill instances first, then
the decode instances — each packed into the current scale-up domain when it has room for the whole instance, else
starting the next domain (a tensor-parallel group is not split over a node boundary; Dynamo's and llm-d's
schedulers place an instance on one node); an instance larger than a domain takes whole domains of its own.
Requests are spread round-robin over both pools, so every prefill instance hands off to every decode instance
alike: the scale-out share is the share of (prefill, decode) instance pairs that do not sit in one domain.
"""
from __future__ import annotations

from narrowpath.spec.serving import ServingPlan


def packed_domains(sizes: list[int], domain: int) -> list[int | None]:
    """Scale-up domain (0, 1, …) of each instance of `sizes` GPUs laid out in order, each packed into the current
    domain of `domain` GPUs when it fits in what is left, else at the start of the next; None for an instance larger
    than a domain (it takes whole domains of its own and shares none)."""
    out: list[int | None] = []
    dom, used = 0, 0
    for g in sizes:
        if g > domain:
            dom, used = dom + (used > 0) + -(-g // domain), 0
            out.append(None)
            continue
        if used + g > domain:
            dom, used = dom + 1, 0
        out.append(dom)
        used += g
    return out


def handoff_scale_out_share(n_pre: int, pre_gpus: int, n_dec: int, dec_gpus: int, domain: int) -> float:
    """Share of the hand-offs from `n_pre` prefill instances of `pre_gpus` GPUs to `n_dec` decode instances of
    `dec_gpus` GPUs that cross the scale-out fabric under the packed placement (module docstring): 1 − (pairs in
    one domain) / (n_pre · n_dec). One of each: 0 when both fit one domain (pre_gpus + dec_gpus ≤ domain), else 1.
    Two 8-GPU domains, one tp-4 prefill and three tp-4 decode instances: the prefill and the first decode instance
    share domain 0, the other two sit in domain 1: 2/3."""
    if n_pre <= 0 or n_dec <= 0:
        return 0.0
    doms = packed_domains([pre_gpus] * n_pre + [dec_gpus] * n_dec, domain)
    pre, dec = doms[:n_pre], doms[n_pre:]
    same = sum(pre.count(d) * dec.count(d) for d in set(dec) if d is not None)
    return 1.0 - same / (n_pre * n_dec)


def plan_handoff_scale_out_share(plan: ServingPlan, domain: int) -> float:
    """`handoff_scale_out_share` of a disaggregated plan (its prefill pool's own instance size when it has one); 0
    for a colocated plan (no hand-off)."""
    pool = plan.prefill_pool()
    pre_gpus = (pool or plan).instance_gpus
    return handoff_scale_out_share(plan.prefill_replicas, pre_gpus, plan.replicas - plan.prefill_replicas,
                                   plan.instance_gpus, domain)
