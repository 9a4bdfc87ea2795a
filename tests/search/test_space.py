"""The search space: every plan consistent, each once, pins respected, the base plan always included.

The `basic` extent is the first search's space plan for plan (held against that search's own nested loops, kept
here as the reference); the `full` extent is held against a brute force over every knob value with the rules of
search/space.py stated one by one."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from narrowpath.catalog import load_scenario, model, store, system
from narrowpath.errors import SpecError
from narrowpath.network.placement import group_span
from narrowpath.search.space import (SearchSpace, activation_strategies, candidate_plans, count_plans, divisors,
                                     knob_values)
from narrowpath.search.table import build_table
from narrowpath.spec import Plan
from narrowpath.spec.scenario import consistency_errors


def _space(scn, extent="full", **pinned):
    return SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan, pinned, extent)


def _first_search_space(space: SearchSpace):
    """The first search's enumeration (search/space.py before the full extent), verbatim in substance."""
    m, n, gbs, b, pinned = space.model, space.num_gpus, space.gbs, space.base, space.pinned
    lstm = m.arch == "lstm"
    v = {"tp": tuple(d for d in divisors(n) if d <= space.system.scale_up_domain),
         "pp": (1,) if lstm else tuple(d for d in divisors(n) if d <= m.layers),
         "cp": (1,) if lstm else tuple(d for d in divisors(n) if d <= 32 and d & (d - 1) == 0 and m.seq_len % d == 0),
         "ep": tuple(divisors(m.moe.num_experts)) if m.moe is not None else (1,), "vpp": tuple(range(1, 9)),
         "mbs": (1, 2, 4, 8, 16, 32, 64), "zero_stage": (0,) if lstm else (0, 1, 2, 3),
         "recompute": ("none",) if lstm else ("none", "selective", "full"),
         "sequence_parallel": (False,) if lstm else (False, True)}
    for k, val in pinned.items():
        if k != "dp":
            v[k] = (val,)
    seen = False
    for tp in v["tp"]:
        for pp in v["pp"]:
            if (n // tp) % pp or n % tp:
                continue
            for cp in v["cp"]:
                if (n // (tp * pp)) % cp:
                    continue
                dp = n // (tp * pp * cp)
                if "dp" in pinned and dp != pinned["dp"]:
                    continue
                for sp in v["sequence_parallel"]:
                    if sp and tp == 1 or ("sequence_parallel" not in pinned and not lstm and sp != (tp > 1)):
                        continue
                    for ep in v["ep"]:
                        if ep > 1 and dp % ep:
                            continue
                        for mbs in v["mbs"]:
                            if gbs % (dp * mbs):
                                continue
                            micro = gbs // (dp * mbs)
                            for vpp in v["vpp"]:
                                if vpp > 1 and (pp == 1 or m.layers % (pp * vpp) or micro % pp):
                                    continue
                                for zero in v["zero_stage"]:
                                    if "zero_stage" not in pinned and (zero != 0 if dp * cp == 1 or lstm
                                                                       else zero == 0):
                                        continue
                                    for rc in v["recompute"]:
                                        plan = dataclasses.replace(b, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp,
                                                                   mbs=mbs, gbs=gbs, zero_stage=zero, recompute=rc,
                                                                   sequence_parallel=sp)
                                        if not consistency_errors(m, plan, n, space.system):
                                            seen = seen or plan == b
                                            yield plan
    if not seen and b.gbs == gbs and b.num_gpus == n and all(getattr(b, k) == x for k, x in pinned.items()) \
            and not consistency_errors(m, b, n, space.system):
        yield b


@pytest.mark.parametrize("n", [1, 2, 12, 36, 97, 1024])
def test_divisors(n):
    assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


@pytest.mark.parametrize("scenario,pins", [
    ("llama3-8b-h100-8", {}), ("gpt3-175b-a100-1024", {}), ("llama3-70b-h100-256", {}), ("gnmt-lstm-a100-8", {}),
    ("llama3-405b-h100-16k", {}), ("gpt3-175b-a100-1024", {"tp": 8, "recompute": "full", "dp": 16}),
    ("llama3-8b-h100-8", {"zero_stage": 2, "sequence_parallel": False})])
def test_basic_extent_is_the_first_searchs_space(scenario, pins):
    """Plan for plan and in the same order (21,799 plans for GPT-3 175B on 1,024 A100)."""
    space = _space(load_scenario(scenario), "basic", **pins)
    assert list(candidate_plans(space)) == list(_first_search_space(space))


def _reference_strategies(space: SearchSpace, per_chunk: int, pp: int = 1) -> list[tuple]:
    """The full extent's activation strategies, stated: the chooser's activation patches (selective with the base
    plan's modules), then, for a model with MoE or MLA layers, selective recompute of each of the chooser's module
    sets for the model unless a strategy before it recomputes the same (workload.recompute.modules_of: an FP8
    activation cache recomputes the MoE activation under none and selective); a set of modules named twice (in any
    order) once, as first named; pins on the mode and the layer shares filter them first."""
    from narrowpath.schedule.choose import activation_patches, module_patches
    from narrowpath.workload.recompute import modules_of
    b, pins = space.base, space.pinned
    base_mods = b.recompute_modules if b.recompute == "selective" else ()
    m = space.model
    sets = module_patches(m) if m.moe is not None or m.mla is not None else ()
    rule = store.stack_cpu_offload(b.framework) if b.framework else None  # Megatron-Core's offloading limits
    patches = activation_patches(per_chunk, b.activation_cache, pipelined=pp > 1 if rule == "megatron-core" else None)
    out, seen, does = [], set(), set()
    for i, p in enumerate(patches + sets):
        rc = p["recompute"]
        mods = tuple(p.get("recompute_modules", base_mods)) if rc == "selective" else ()
        s = (rc, p.get("recompute_layers", 0), p.get("offload_layers", 0), mods)
        if pins.get("recompute", rc) != rc or pins.get("recompute_layers", s[1]) != s[1] \
                or pins.get("offload_layers", s[2]) != s[2]:
            continue
        key = s[:3] + (frozenset(mods or ("core_attn",)) if rc == "selective" else frozenset(),)
        effect = s[1:3] + (modules_of(dataclasses.replace(b, recompute=rc, recompute_modules=mods,
                                                          recompute_layers=s[1], offload_layers=s[2])),)
        if key in seen or (i >= len(patches) and effect in does):
            continue
        seen.add(key)
        if rc != "full":
            does.add(effect)
        out.append(s)
    return out


def _full_reference(space: SearchSpace) -> set[Plan]:
    """Every plan of the full extent by brute force: every combination of knob values that the spec accepts,
    keeping the knobs that cannot change a plan's numbers at the pinned or base value (search/space.py)."""
    m, n, gbs, b, pins = space.model, space.num_gpus, space.gbs, space.base, space.pinned
    v = knob_values(space)
    moe, lstm = m.moe is not None, m.arch == "lstm"
    keep = lambda k: pins.get(k, getattr(b, k))  # noqa: E731
    out = set()
    for tp, pp, cp in itertools.product(v["tp"], v["pp"], v["cp"]):
        if n % (tp * pp * cp):
            continue
        dp = n // (tp * pp * cp)
        if "dp" in pins and dp != pins["dp"]:
            continue
        for sp, ep, etp, mbs, vpp in itertools.product(v["sequence_parallel"], v["ep"], v["etp"], v["mbs"], v["vpp"]):
            if "sequence_parallel" not in pins and not lstm and sp != (tp > 1):
                continue
            if moe and "etp" not in pins and etp == tp:
                continue
            if gbs % (dp * mbs) or (vpp > 1 and (pp == 1 or (gbs // (dp * mbs)) % pp)):
                continue
            expert_tp = etp or tp
            sync = dp * cp > 1 or (moe and tp * cp * dp // (expert_tp * ep) > 1)
            shards = max(dp * cp, tp * cp * dp // (expert_tp * ep)) if moe else dp * cp  # dense or expert group
            for zero in v["zero_stage"]:
                if "zero_stage" not in pins and zero != 0 if shards == 1 or lstm else zero == 0 and \
                        "zero_stage" not in pins:
                    continue
                strategies = _reference_strategies(space, max(1, -(-m.layers // (pp * vpp))), pp)
                for (rc, rcl, off, mods), dpo, tpo, cpc, epo in itertools.product(
                        strategies, v["dp_overlap"], v["tp_comm_overlap"], v["cp_comm"], v["ep_overlap"]):
                    if (not sync and dpo != keep("dp_overlap")) or (tp == 1 and tpo != keep("tp_comm_overlap")) \
                            or (cp == 1 and cpc != keep("cp_comm")) \
                            or (not (moe and (ep > 1 or expert_tp > 1)) and epo != keep("ep_overlap")):
                        continue
                    for bucket, plc, disp in itertools.product(v["bucket_bytes"], v["placement"], v["ep_dispatch"]):
                        if not (dpo and sync) and bucket != keep("bucket_bytes"):
                            continue
                        try:
                            plan = dataclasses.replace(
                                b, tp=tp, pp=pp, cp=cp, dp=dp, sequence_parallel=sp, ep=ep, etp=etp, mbs=mbs,
                                vpp=vpp, gbs=gbs, zero_stage=zero, recompute=rc, recompute_modules=mods,
                                recompute_layers=rcl,
                                offload_layers=off, dp_overlap=dpo, bucket_bytes=bucket, tp_comm_overlap=tpo,
                                cp_comm=cpc, ep_overlap=epo, ep_dispatch=disp, placement=plc)
                        except SpecError:
                            continue
                        if consistency_errors(m, plan, n, space.system):
                            continue
                        sizes = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
                        eff = tuple(a for a in plc if a != "ep" and sizes[a] > 1)
                        first = next(p for p in v["placement"] if tuple(a for a in p if a != "ep" and sizes[a] > 1)
                                     == eff)
                        if plc != first and "placement" not in pins:
                            continue  # the same ranks laid out: tried once
                        crosses = moe and ep > 1 and group_span(plan, space.system, "ep").domains > 1
                        if moe and ep > 1 and not crosses and "ep_dispatch" not in pins \
                                and len(v["ep_dispatch"]) > 1:
                            # inside one domain the deduplicating dispatch never loses where a rank holds more
                            # than one expert (with one, the all-to-all dispatcher permutes fewer rows)
                            if disp != "dedup" and m.moe.num_experts > ep:
                                continue
                        elif not crosses and disp != keep("ep_dispatch"):
                            continue
                        out.add(plan)
    if b.gbs == gbs and b.num_gpus == n and all(getattr(b, k) == x for k, x in pins.items()) \
            and not consistency_errors(m, b, n, space.system):
        out.add(b)
    return out


def _small_dense():
    scn = load_scenario("llama3-8b-h100-8")
    plan = Plan(tp=1, dp=4, mbs=1, gbs=8, zero_stage=1)
    return dataclasses.replace(scn, plan=plan, num_gpus=4)


def _small_moe():
    from narrowpath.spec import Scenario
    plan = Plan(tp=2, pp=1, dp=8, ep=8, mbs=1, gbs=32, zero_stage=1, sequence_parallel=True)
    return Scenario(name="m", system=system("dgx-h100"), model=model("mixtral-8x7b"), plan=plan, num_gpus=16)


@pytest.mark.parametrize("make,pins", [(_small_dense, {"mbs": 2}), (_small_moe, {"tp": 2, "mbs": 1, "zero_stage": 1, "pp": 1, "cp": 1})],
                         ids=["dense", "moe"])
def test_full_extent_is_every_distinct_consistent_plan(make, pins):
    scn = make()
    space = _space(scn, **pins)
    plans = list(candidate_plans(space))
    assert len(plans) == len(set(plans)) == count_plans(space)
    assert set(plans) == _full_reference(space)


@pytest.mark.parametrize("scenario", ["llama3-8b-h100-8", "gpt3-175b-a100-1024", "deepseek-v3-h800-2048"])
def test_full_extent_plans_are_consistent(scenario):
    """A sample of the millions: consistent plans, pinned or derived where the rules say."""
    scn = load_scenario(scenario)
    table = build_table(_space(scn))
    rng = np.random.default_rng(7)
    for i in rng.choice(len(table), size=300, replace=False):
        p = table.plan(int(i))
        assert p.num_gpus == scn.num_gpus and p.gbs == scn.plan.gbs
        assert not consistency_errors(scn.model, p, scn.num_gpus, scn.system)
        assert (p.precision, p.attention, p.moe_routing) == (scn.plan.precision, scn.plan.attention,
                                                             scn.plan.moe_routing)
        if p.tp == 1:
            assert p.tp_comm_overlap == scn.plan.tp_comm_overlap
        if p.cp == 1:
            assert p.cp_comm == scn.plan.cp_comm
        if not p.dp_overlap:
            assert p.bucket_bytes == scn.plan.bucket_bytes
    # the search ranks Megatron's schedules: a DualPipe scenario's own plan is found as its 1F1B twin (an etp equal
    # to tp as the table writes it: etp 0, the same plan)
    base = dataclasses.replace(scn.plan, pipeline_schedule="auto")
    if scn.model.moe is not None and base.etp == base.tp:
        base = dataclasses.replace(base, etp=0)
    assert table.base_row is not None and table.plan(table.base_row) == base


def test_full_extent_sizes():
    """The enlarged spaces the issue names hold more than a million plans."""
    assert count_plans(_space(load_scenario("gpt3-175b-a100-1024"))) >= 1_000_000
    assert count_plans(_space(load_scenario("llama3-405b-h100-16k"))) >= 1_000_000
    assert count_plans(_space(load_scenario("gpt3-175b-a100-1024"), "basic")) == 21_799


def test_space_covers_the_obvious_plans():
    scn = load_scenario("llama3-8b-h100-8")  # 8 GPUs, gbs 64 (see catalog)
    plans = set(candidate_plans(_space(scn, "basic")))
    want = dataclasses.replace(scn.plan, tp=8, pp=1, dp=1, cp=1, vpp=1, mbs=1, zero_stage=0, recompute="full",
                               sequence_parallel=True)
    assert want in plans
    want = dataclasses.replace(scn.plan, tp=2, pp=2, dp=2, cp=1, vpp=2, mbs=2, zero_stage=1, recompute="selective",
                               sequence_parallel=True)
    assert (scn.plan.gbs % 4) or want in plans


def test_pins_restrict_every_plan():
    scn = load_scenario("gpt3-175b-a100-1024")
    table = build_table(_space(scn, tp=8, recompute="full", dp=16, placement=("tp", "cp", "ep", "pp", "dp")))
    rng = np.random.default_rng(1)
    for i in rng.choice(len(table), size=200, replace=False):
        p = table.plan(int(i))
        assert p.tp == 8 and p.recompute == "full" and p.dp == 16 and p.placement == ("tp", "cp", "ep", "pp", "dp")
    assert knob_values(_space(scn, tp=8))["tp"] == (8,)
    full = {p.recompute_layers for p in candidate_plans(_space(scn, tp=8, pp=8, cp=1, mbs=1, recompute="full"))}
    assert 0 in full and len(full) > 1  # full recompute of every layer and of a share of each chunk


def test_pin_to_a_non_default_value_is_searched():
    scn = load_scenario("llama3-8b-h100-8")
    plans = list(candidate_plans(_space(scn, "basic", zero_stage=2, sequence_parallel=False)))
    assert plans and all(p.zero_stage == 2 and not p.sequence_parallel for p in plans)


def test_moe_space_searches_expert_parallelism():
    m, sysm = model("mixtral-8x7b"), system("dgx-h100")
    base = Plan(tp=1, pp=1, dp=64, mbs=1, gbs=256)
    plans = list(candidate_plans(SearchSpace(m, sysm, 64, 256, base, extent="basic")))
    eps = {p.ep for p in plans}
    assert {1, 2, 4, 8} <= eps
    assert all(p.dp % p.ep == 0 and m.moe.num_experts % p.ep == 0 for p in plans)
    table = build_table(SearchSpace(m, sysm, 64, 256, base, {"tp": 2, "pp": 1, "cp": 1, "mbs": 1, "zero_stage": 1}))
    plans = [table.plan(i) for i in range(len(table))]
    assert {p.etp for p in plans} == {0, 1} and {p.ep_dispatch for p in plans} == {"all_to_all", "dedup"}
    assert all(p.ep > 1 for p in plans if p.ep_dispatch == "dedup")


def test_lstm_space_searches_only_what_the_recurrent_workload_models():
    """The LSTM workload has no pipeline, CP, SP, recompute or ZeRO sharding: those knobs stay off (a ZeRO-3 LSTM
    plan got sharded memory at no cost in time and ranked first); tp and dp are still searched."""
    scn = load_scenario("gnmt-lstm-a100-8")
    for extent in ("basic", "full"):
        plans = list(candidate_plans(_space(scn, extent)))
        assert all(p.pp == 1 and p.cp == 1 for p in plans)
        assert all(p.zero_stage == 0 and p.recompute == "none" and not p.sequence_parallel for p in plans)
        assert {p.tp for p in plans} >= {1, 2, 4, 8}


def test_uneven_pipeline_splits_are_searched():
    """Llama 3 405B (126 layers) trained on 16 pipeline stages (Dubey et al. 2024 §3.3); the model prices uneven
    splits, so pp need only be at most the layer count; the full extent interleaves unevenly too (Megatron-Bridge's
    126 layers on 16 × 8 chunks, the embedding and loss counted as layers)."""
    scn = load_scenario("llama3-405b-h100-16k")
    base = Plan(tp=8, pp=1, dp=16, mbs=1, gbs=64, zero_stage=1, sequence_parallel=True)
    pins = {"tp": 8, "recompute": "full", "mbs": 1}
    plans = list(candidate_plans(SearchSpace(scn.model, scn.system, 128, 64, base, pins, "basic")))
    assert {p.pp for p in plans} == {1, 2, 4, 8, 16}
    assert all(p.vpp == 1 or scn.model.layers % (p.pp * p.vpp) == 0 for p in plans)
    pins.update(cp=1, zero_stage=1, recompute_layers=0, dp_overlap=False, placement=base.placement)
    plans = list(candidate_plans(SearchSpace(scn.model, scn.system, 128, 64, base, pins)))
    assert any(p.pp == 16 and p.vpp == 8 for p in plans)
    assert knob_values(_space(load_scenario("llama3-8b-h100-8")))["pp"] == (1, 2, 4, 8)


def test_zero_stages_tried():
    """ZeRO-0 only where there is nothing to shard over; else 1, 2 (priced with its per-micro-batch
    reduce-scatter under accumulation) and 3, with or without gradient accumulation."""
    scn = load_scenario("llama3-8b-h100-8")
    plans = list(candidate_plans(_space(scn, "basic", tp=8, pp=1, cp=1)))  # dp 1: nothing to shard
    assert {p.zero_stage for p in plans} == {0}
    plans = list(candidate_plans(_space(scn, "basic", tp=1, pp=1, cp=1)))  # dp 8, gbs 64: mbs 8 gives one
    assert {p.zero_stage for p in plans if p.num_microbatches == 1} == {1, 2, 3}
    assert {p.zero_stage for p in plans if p.num_microbatches > 1} == {1, 2, 3}


@pytest.mark.parametrize("field,kw,msg", [
    ("search.pinned", {"pinned": {"tensor": 2}}, "unknown knob"),
    ("search.num_gpus", {"num_gpus": 0}, "must be >= 1"),
    ("search.gbs", {"gbs": 0}, "must be >= 1"),
    ("search.extent", {"extent": "huge"}, "must be one of"),
])
def test_bad_space_names_the_field(field, kw, msg):
    scn = load_scenario("llama3-8b-h100-8")
    args = dict(model=scn.model, system=scn.system, num_gpus=8, gbs=64, base=scn.plan) | kw
    with pytest.raises(SpecError, match=msg) as e:
        SearchSpace(**args)
    assert field in str(e.value)


def test_full_extent_searches_recompute_modules():
    """Selective recompute by module (Megatron-Core --recompute-modules) as NVIDIA's MoE recipes run it: for a model
    with MoE or MLA layers every module set of schedule.choose.module_patches is an activation strategy of the full
    extent, beside selective recompute of the base plan's modules (a dense model's: the base plan's only), unless
    it recomputes what an earlier one does (DeepSeek-V3's FP8 cache: (moe_act) is recompute none, the base plan's
    (layernorm, mla_up_proj) is (mla_up_proj, layernorm, moe_act)); a plan built from a row recomputes exactly the
    modules of its strategy; the basic extent keeps the base plan's modules only."""
    from narrowpath.schedule.choose import module_patches
    for scn in (_small_moe(), load_scenario("deepseek-v3-h800-2048"), _small_dense()):
        wanted = {p["recompute_modules"] for p in module_patches(scn.model)}
        strategies = activation_strategies(_space(scn), 4)
        selective = {s[3] for s in strategies if s[0] == "selective"}
        if scn.model.moe is None and scn.model.mla is None:
            assert selective == {scn.plan.recompute_modules if scn.plan.recompute == "selective" else ()}
        elif scn.plan.activation_cache == "fp8":  # DeepSeek-V3's cache recomputes the MoE activation anyway
            assert wanted - selective == {("moe_act",), ("mla_up_proj", "layernorm", "moe_act")}
            assert ("none", 0, 0, ()) in strategies and {("layernorm", "mla_up_proj"), ("mla_up_proj",)} <= selective
        else:
            assert wanted <= selective
            assert (("mla_up_proj",) in selective) == (scn.model.mla is not None)
        assert all(s[3] == () for s in strategies if s[0] != "selective")
        basic = activation_strategies(_space(scn, "basic"), 4)
        assert [s[3] for s in basic] == [(), scn.plan.recompute_modules if scn.plan.recompute == "selective" else (),
                                         ()]
    table = build_table(_space(_small_moe(), tp=2, pp=1, cp=1, mbs=1, zero_stage=1))
    plans = [table.plan(i) for i in range(len(table))]
    assert {p.recompute_modules for p in plans if p.recompute == "selective"} == \
        {(), ("moe_act",), ("layernorm", "moe_act"), ("moe",)}
    assert all(p.recompute_modules == () for p in plans if p.recompute != "selective")


def test_a_module_set_named_twice_is_tried_once_in_the_base_plans_order():
    """A base plan that recomputes (moe_act, layernorm) — the set the chooser names (layernorm, moe_act) — is in the
    space as itself, and that set is not tried a second time."""
    scn = _small_moe()
    base = dataclasses.replace(scn.plan, recompute="selective", recompute_modules=("moe_act", "layernorm"))
    scn = dataclasses.replace(scn, plan=base)
    table = build_table(_space(scn, tp=2, pp=1, cp=1, mbs=1, zero_stage=1))
    plans = [table.plan(i) for i in range(len(table))]
    sets = {p.recompute_modules for p in plans if p.recompute == "selective"}
    assert sets == {("moe_act", "layernorm"), ("moe_act",), ("moe",)}
    assert table.base_row is not None and table.plan(table.base_row) == base
    assert len(plans) == len(set(plans))


def test_a_selective_strategy_is_twinned_with_the_lighter_one_it_may_equal():
    """The bulk search counts a selective plan once with the plan of its twin strategy when both price the same
    (search.table.twin_strategies): among the strategies with the same shares, the one recomputing the largest
    proper subset of its modules (recompute none: the empty set), or the same set named with fewer modules or by
    recompute none (an FP8 cache recomputes the MoE activation under either); full recompute has none."""
    from narrowpath.search.table import twin_strategies
    s = [("none", 0, 0, ()), ("selective", 0, 0, ()), ("full", 0, 0, ()), ("none", 0, 8, ()),
         ("selective", 0, 0, ("moe_act",)), ("selective", 0, 0, ("layernorm", "moe_act")),
         ("selective", 0, 0, ("mla_up_proj", "layernorm", "moe_act")), ("selective", 0, 0, ("layernorm", "mla_up_proj")),
         ("selective", 0, 0, ("moe",))]
    assert twin_strategies(s) == [-1, 0, -1, -1, 0, 4, 5, 0, 0]
    assert twin_strategies(s, "fp8") == [-1, 0, -1, -1, 0, 0, 7, 5, 0]  # (moe_act,) is none; the base names less
    assert twin_strategies(s[1:]) == [-1, -1, -1, -1, 3, 4, -1, -1]  # none pinned out


def test_the_search_offers_no_offloading_megatron_core_refuses():
    """A base plan on a Megatron-Core stack (stacks.yaml `cpu_offload`): no plan of the full extent offloads with
    pp > 1 (TransformerConfig: "no support for Pipeline parallelism with CPU offloading"), none beside a recompute,
    none of every layer; the same space under an engine the catalog does not know keeps them."""
    from narrowpath.schedule.choose import offload_pipelined
    scn = _small_dense()
    mb = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, framework="Megatron-Bridge / NeMo 26.04"))
    assert (offload_pipelined(mb.plan, 4), offload_pipelined(mb.plan, 1), offload_pipelined(scn.plan, 4)) == \
        (True, False, None)
    plans = list(candidate_plans(_space(mb, mbs=2)))
    offloading = [p for p in plans if p.offload_layers]
    assert offloading and all(p.pp == 1 and p.recompute == "none" and p.offload_layers < mb.model.layers
                              for p in offloading)
    assert any(p.offload_layers and p.pp > 1 for p in candidate_plans(_space(scn, mbs=2)))
