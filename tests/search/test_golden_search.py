"""The search against memory arithmetic done by hand: what cannot fit must not be ranked, whatever the model says
about its speed."""
from __future__ import annotations

from narrowpath.catalog import model, system
from narrowpath.search import SearchSpace, search
from narrowpath.spec import Plan, Scenario


def _base(mid: str, sid: str, gpus: int, gbs: int) -> Scenario:
    plan = Plan(dp=gpus, gbs=gbs)
    return Scenario(system=system(sid), model=model(mid), plan=plan, num_gpus=gpus)


def test_gpt3_175b_fits_no_plan_on_eight_a100():
    """Mixed-precision training holds 2 (bf16 weights) + 4 (fp32 gradients) + 12 (Adam) = 18 B per parameter
    (Rajbhandari et al. SC'20 §3); sharded perfectly over 8 GPUs, 175e9 · 18 / 8 = 394 GB per GPU > 80 GB: no plan
    of any parallelism fits, so the search ranks none."""
    base = _base("gpt3-175b", "dgx-a100", 8, 8)
    space = SearchSpace(base.model, base.system, 8, 8, base.plan, {"cp": 1, "vpp": 1, "mbs": 1, "recompute": "full"})
    res = search(base, space, top=3)
    assert res.num_plans > 0 and res.num_fit == 0 and res.ranked == ()


def test_llama3_8b_replicated_without_zero_cannot_fit_on_h100():
    """Llama-3 8B (8.03e9 parameters) replicated by plain data parallelism: 8.03e9 · 18 B = 144.5 GB of weights,
    gradients and Adam state per GPU > 80 GB. Among the ranked (fitting) plans on one DGX H100, none is tp 1,
    pp 1 without ZeRO; ZeRO-1 over 8 leaves 2 + 4 + 12/8 = 7.5 B/param = 60 GB, which can fit."""
    base = _base("llama3-8b", "dgx-h100", 8, 8)
    space = SearchSpace(base.model, base.system, 8, 8, base.plan, {"cp": 1, "vpp": 1, "mbs": 1, "pp": 1, "tp": 1})
    res = search(base, space, top=50)
    assert res.ranked and all(c.plan.zero_stage >= 1 for c in res.ranked)
