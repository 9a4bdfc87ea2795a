"""Expert-data-parallel traffic is stretched by fabric contention like every other cross-node axis (it was exempt)."""
from __future__ import annotations

import dataclasses

import narrowpath.schedule.step as step
from narrowpath.catalog import model, system
from narrowpath.network.placement import all_groups
from narrowpath.spec import Plan, Scenario


def _scenario(oversubscription: float, cp: int = 1) -> Scenario:
    sysm = system("dgx-h100")
    tiers = tuple(dataclasses.replace(t, oversubscription=oversubscription) if t.name == "scale_out" else t
                  for t in sysm.tiers)
    plan = Plan(tp=1, pp=1, cp=cp, dp=128 // cp, ep=8 // cp, mbs=1, gbs=128 // cp, zero_stage=1)
    return Scenario(name="t", system=dataclasses.replace(sysm, tiers=tiers), model=model("mixtral-8x7b"),
                    plan=plan, num_gpus=128)


def _expert_rs_s(scn) -> float:
    return next(t.time_each_s for t in step.predict(scn).transfers if t.name == "dp.expert_grad_reduce_scatter")


def test_expert_sync_pays_the_contention_slowdown(monkeypatch):
    seen = []

    def fake(plan, system, axis, **kw):
        seen.append(axis)
        return 2.0 if axis == "edp" else 1.0
    free = _expert_rs_s(_scenario(4.0))
    monkeypatch.setattr(step, "concurrent_slowdown", fake)
    slowed = _expert_rs_s(_scenario(4.0))
    assert "edp" in seen and slowed > free
    seen.clear()
    scn = _scenario(4.0, cp=2)
    _expert_rs_s(scn)
    assert "edp" in seen  # with context parallelism the expert groups span the cp ranks (Megatron-Core layout)
    edp = all_groups(scn.plan, "edp")[0]
    assert edp.size == 128 // 4 and (edp[1] - edp[0]) == 4  # etp·ep = 1·4 fastest ranks, then edp over cp·dp


def test_edp_groups_are_the_ranks_holding_the_same_experts():
    plan = Plan(tp=2, cp=1, dp=8, ep=4, gbs=8)
    groups = all_groups(plan, "edp")
    assert groups.shape == (8, 2)  # 16 ranks, groups of dp/ep = 2
    ep_stride = 2  # tp
    assert all((g[1] - g[0]) == 4 * ep_stride for g in groups)  # next replica of the same expert shard
