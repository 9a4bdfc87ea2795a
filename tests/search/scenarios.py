"""Scenarios the search tests price both in bulk and one plan at a time."""
from __future__ import annotations

import dataclasses

from narrowpath.catalog import load_scenario, model, system
from narrowpath.spec import Plan, Scenario
from narrowpath.spec.device import Device


def deepseek_v3_1f1b() -> Scenario:
    """DeepSeek-V3's 2,048-H800 plan (the catalog runs it as DualPipe, as published) under Megatron's 1F1B: the shape
    the tests of 1F1B mechanics (warm-up depth, last-stage pace, pass pairing) study."""
    s = load_scenario("deepseek-v3-h800-2048")
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, pipeline_schedule="auto"))


def mixtral16() -> Scenario:
    plan = Plan(tp=2, pp=1, dp=8, ep=8, mbs=1, gbs=32, zero_stage=1, sequence_parallel=True)
    return Scenario(name="mixtral16", system=system("dgx-h100"), model=model("mixtral-8x7b"), plan=plan, num_gpus=16)


def device_with_memory(dev: Device, capacity_bytes: float, **fields) -> Device:
    """`dev` with `capacity_bytes` of HBM (and any other fields given, such as its name)."""
    levels = tuple(dataclasses.replace(lv, capacity_bytes=capacity_bytes) if lv.name == "hbm" else lv
                   for lv in dev.levels)
    return dataclasses.replace(dev, levels=levels, **fields)


def with_memory(scn: Scenario, capacity_bytes: float) -> Scenario:
    """`scn` on GPUs of the same kind with `capacity_bytes` of HBM."""
    return dataclasses.replace(scn, system=dataclasses.replace(
        scn.system, device=device_with_memory(scn.system.device, capacity_bytes)))


TIGHT_PINS = {"tp": 2, "pp": 1, "mbs": 1, "zero_stage": 1, "cp": 1}


def mixtral16_tight() -> Scenario:
    """Mixtral on 16 GPUs with just the memory that selective recompute of the MoE layers' norms and activation
    (layernorm, moe_act) needs at tp 2, ep 8: halfway between what that plan needs and what the next heavier
    strategy of its structure needs (recompute of the activation alone, a quarter of the layers fully recomputed or
    offloaded, or nothing recomputed), each priced with predict on the usual GPUs."""
    from narrowpath.schedule.step import predict
    scn = mixtral16()
    row = dataclasses.replace(scn.plan, ep=8, etp=0, recompute="selective")

    def mem(**kw) -> float:
        return predict(dataclasses.replace(scn, plan=dataclasses.replace(row, **kw))).memory.total_bytes
    need = mem(recompute_modules=("layernorm", "moe_act"))
    heavier = min(mem(recompute_modules=("moe_act",)), mem(recompute="full", recompute_layers=8),
                  mem(recompute="none", offload_layers=8), mem(recompute="none"))
    assert need < heavier
    return with_memory(scn, (need + heavier) / 2)


def llama3_8b_fp8() -> Scenario:
    scn = load_scenario("llama3-8b-h100-8")
    return dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, precision="fp8"))


def bulk_sample(scn: Scenario, pins: dict, n: int, seed: int) -> list:
    """(plan, step time, memory bytes, its scenario) of up to `n` random plans of the search space of `scn` with
    `pins`, priced by the search's closed form (search.bulk + search.exact), for comparison with predict."""
    import numpy as np

    from narrowpath.search import SearchSpace
    from narrowpath.search.bulk import Bulk
    from narrowpath.search.each import scenario_of
    from narrowpath.search.exact import Exact
    from narrowpath.search.parts import Parts
    from narrowpath.search.table import build_table
    space = SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan, pins)
    table = build_table(space)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(table.num_structural, size=min(n, table.num_structural), replace=False))
    bulk = Bulk(table, Parts(scenario_of(scn, space, space.base), None))
    sp = bulk.structural(rows)
    idx, times = Exact(bulk).price_rows(sp, np.arange(rows.size))
    out = []
    for k in rng.choice(idx.size, size=min(n, idx.size), replace=False):
        plan = table.plan(int(idx[k]))
        r = int(np.searchsorted(table.starts, idx[k], side="right") - 1)
        out.append((plan, float(times[k]), float(sp.memory_bytes[int(np.searchsorted(rows, r))]),
                    scenario_of(scn, space, plan)))
    return out
