"""Bulk pricing is predict: every number the search computes for a plan in bulk equals what `predict` returns for
it (to 1e-12 relative: sums of the same terms in another order), its bound never exceeds predict's step time, and
on spaces small enough to price exhaustively the search's top 20, counts and the base plan's rank are exactly those
of an exhaustive `predict` over the same space."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

from narrowpath.catalog import load_scenario, system
from narrowpath.schedule.step import predict
from narrowpath.search import SearchSpace, candidate_plans, search
from narrowpath.search.bulk import Bulk
from narrowpath.search.each import candidate, scenario_of
from narrowpath.search.exact import Exact, bucketed_exposed
from narrowpath.search.parts import Parts
from narrowpath.search.rank import TIE_REL, drop_equivalent, sort_key
from narrowpath.search.table import build_table
from narrowpath.schedule.step import exposed_after_bucketed_overlap
from narrowpath.spec import Plan, Scenario
from tests.search.scenarios import TIGHT_PINS, llama3_8b_fp8, mixtral16, mixtral16_tight




def _dense_then_moe() -> Scenario:
    """Two wide dense layers, then MoE layers with far more parameters: a later stage holds the memory peak, and
    its layer-sized temporaries are its own (MoE) layer's, not the dense layer an earlier stage holds."""
    from narrowpath.spec.parse import model_from_dict
    m = model_from_dict(dict(name="dense-then-moe", layers=8, hidden=2048, heads=16, kv_heads=16, ffn=2048,
                             vocab=32000, seq_len=4096, experts=64, top_k=1, ffn_act="swiglu", dense_layers=2,
                             dense_ffn=65536))
    plan = Plan(tp=1, pp=4, dp=2, ep=1, mbs=1, gbs=16, zero_stage=1, recompute="full")
    return Scenario(name="dense-then-moe", system=system("dgx-h100"), model=m, plan=plan, num_gpus=8)


def _fp8_recipe(sysname: str | None = None, precision: str = "fp8") -> Scenario:
    """NVIDIA's FP8 recipe memory: FP8 primary weights and bf16 gradients (the ZeRO stages 1 and 3 the space tries
    with them), on Hopper (two FP8 copies) or Blackwell (one; MXFP8 two with scales, gathered in bf16)."""
    import dataclasses
    s = llama3_8b_fp8()
    if sysname:
        s = dataclasses.replace(s, system=system(sysname))
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, fp8_params=True, grad_precision="bf16",
                                                           precision=precision, zero_stage=1))


def _mixtral_fp8_cache() -> Scenario:
    """Mixtral with DeepSeek-V3's FP8 activation cache, which recomputes the experts' activation under any mode but
    full: selective recompute of `moe_act` is recompute none (not tried), and selective recompute of the attention
    core with flash attention prices as none (counted once: search.table.twin_strategies)."""
    import dataclasses
    s = mixtral16()
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, precision="fp8", activation_cache="fp8"))


def _flash2():
    """FlashAttention-2 (plan.attention flash2): the search's parts resolve it to a flash kernel priced at the
    device's flash2_rate, as predict does (passing `flash2` through would price it as the unfused core)."""
    base = load_scenario("llama3-8b-h100-8")
    return dataclasses.replace(base, plan=dataclasses.replace(base.plan, attention="flash2"))


def _alternate():
    """torchtitan's op-level selective checkpointing (recompute module alternate_matmuls) as the base plan's modules:
    the search's selective plans recompute every other matmul as predict does, tp blocks gathered again."""
    base = load_scenario("llama3-70b-h100-256")
    return dataclasses.replace(base, plan=dataclasses.replace(base.plan, recompute="selective",
                                                              recompute_modules=("alternate_matmuls",)))


def _zero3_kept(reshard: str):
    """FSDP that keeps its gathered weights through the step (plan.zero3_reshard `unless_pp`: torchtitan under
    pipelining; `never`): the bulk engine prices ZeRO-3 plans at their comm_zero_stage (ZeRO-1's traffic and
    memory) where the plan keeps them gathered, as predict does, instead of resetting the knob."""
    base = load_scenario("llama3-70b-h100-256")
    return dataclasses.replace(base, plan=dataclasses.replace(base.plan, zero_stage=3, zero3_reshard=reshard))


def _host_knobs(scn: Scenario) -> Scenario:
    """CUDA graphs and sync-free MoE layers in the base plan (spec.plan): every plan the search derives keeps them,
    and its layers' host costs are predict's (no kernel issue cost, no per-layer sync)."""
    return dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, cuda_graphs=True, moe_sync_free=True))


def _deepseek_megatron_bridge() -> Scenario:
    """DeepSeek-V3 (61 layers with multi-token prediction) under Megatron's 1F1B on a Megatron-Bridge stack: every
    pipeline the search tries takes the stack's chunk layout in bulk as predict does (workload.split.
    stack_chunk_layers; 15 x 4 + 1 on 16 stages, 7 x 8 + 5 on 8, ...)."""
    s = load_scenario("deepseek-v3-h800-2048")
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, pipeline_schedule="auto",
                                                           framework="Megatron-Bridge 25.11"))


def _launched(name: str, launch: str) -> Scenario:
    """Megatron-Core's DDP in the base plan (plan.grad_sync_launch `aligned` or `megatron`): every plan the search
    derives prices its gradient sync as predict does — interleaved chunks launched whole after their last backwards
    (`megatron`: rank 0's first chunk in buckets), and under 1F1B at most rank 0's last backward hiding it."""
    s = load_scenario(name)
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, grad_sync_launch=launch, dp_overlap=True))


def _parallel_block() -> Scenario:
    """Parallel attention + MLP blocks (model.parallel_attn_mlp, GPT-J / PaLM): one norm, one residual and one tp
    gather/scatter pair per layer pass in every plan the search derives, as predict prices them."""
    s = load_scenario("llama3-70b-h100-256")
    return dataclasses.replace(s, model=dataclasses.replace(s.model, parallel_attn_mlp=True))


def _tiny_graphs() -> Scenario:
    from tests.schedule.test_host_knobs import _tiny
    return _tiny(cuda_graphs=True)


SCENARIOS = {"llama3-8b-h100-8": lambda: load_scenario("llama3-8b-h100-8"), "fp8": llama3_8b_fp8,
             "mixtral16-host-knobs": lambda: _host_knobs(mixtral16()), "tiny-cuda-graphs": _tiny_graphs,
             "fp8-recipe": _fp8_recipe, "fp8-recipe-b200": lambda: _fp8_recipe("dgx-b200"),
             "mxfp8-recipe-b200": lambda: _fp8_recipe("dgx-b200", "mxfp8"),
             "mixtral16": mixtral16, "mixtral16-fp8-cache": _mixtral_fp8_cache,
             "dense-then-moe": _dense_then_moe,
             "llama3-70b-h100-256": lambda: load_scenario("llama3-70b-h100-256"),
             "gpt3-175b-a100-1024": lambda: load_scenario("gpt3-175b-a100-1024"),
             "deepseek-v3-h800-2048": lambda: load_scenario("deepseek-v3-h800-2048"),
             "deepseek-v3-megatron-bridge": _deepseek_megatron_bridge,
             "llama3-8b-h100-8-flash2": _flash2, "llama3-70b-alternate-matmuls": _alternate,
             "zero3-unless-pp": lambda: _zero3_kept("unless_pp"), "zero3-never": lambda: _zero3_kept("never"),
             "gpt3-175b-aligned": lambda: _launched("gpt3-175b-a100-1024", "aligned"),
             "llama3-70b-megatron": lambda: _launched("llama3-70b-h100-256", "megatron"),
             "llama3-70b-parallel-block": _parallel_block}


def _space(scn, **pins) -> SearchSpace:
    return SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan, pins)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_bulk_numbers_are_predicts(name):
    """Random plans across the whole space (every knob): memory and step time as predict's; the bound below."""
    scn = SCENARIOS[name]()
    table = build_table(_space(scn))
    rng = np.random.default_rng(15)
    rows = np.sort(rng.choice(table.num_structural, size=min(40, table.num_structural), replace=False))
    bulk = Bulk(table, Parts(scenario_of(scn, _space(scn), _space(scn).base), None))
    sp = bulk.structural(rows)
    idx, times = Exact(bulk).price_rows(sp, np.arange(rows.size))
    assert idx.size == table.variants(rows).sum()
    pick = rng.choice(idx.size, size=min(40, idx.size), replace=False)
    for k in pick:
        plan = table.plan(int(idx[k]))
        pred = predict(scenario_of(scn, _space(scn), plan))
        r = int(np.searchsorted(table.starts, idx[k], side="right") - 1)
        at = int(np.searchsorted(rows, r))
        assert times[k] == pytest.approx(pred.step_time_s, rel=1e-12), plan
        assert sp.memory_bytes[at] == pytest.approx(pred.memory.total_bytes, rel=1e-12), plan
        assert sp.bound_s[at] <= pred.step_time_s * (1 + 1e-12), plan


MODULE_RUNS = [("mixtral16", dict(tp=2, pp=1, cp=1, mbs=1, zero_stage=1, ep=8, etp=0)),
               ("mixtral16", dict(tp=2, pp=1, cp=1, mbs=1, zero_stage=1, ep=4, etp=2)),
               ("deepseek-v3-h800-2048", dict(tp=8, pp=1, cp=1, mbs=1, zero_stage=1, ep=64, etp=1)),
               ("deepseek-v3-h800-2048", dict(tp=4, pp=2, cp=1, vpp=1, mbs=1, zero_stage=1, ep=32, etp=1))]


@pytest.mark.parametrize("name,pins", MODULE_RUNS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(MODULE_RUNS)])
def test_module_strategies_are_priced_apart(name, pins):
    """Structural rows that differ only in the activation strategy, priced together: every selective module set
    (the MoE activation, the norms, the whole MoE layer with its dispatch, the tensor-parallel experts, MLA's
    up-projections, the MTP module's layer on the last stage) has predict's time and memory. A part keyed by the
    recompute mode alone would hand one set's ops, transfers or activations to the others."""
    scn = SCENARIOS[name]()
    space = _space(scn, **pins)
    table = build_table(space)
    assert len({table.strategies[int(s)][3] for s in table.cols["strat"]}) >= 4
    rows = np.arange(table.num_structural)
    bulk = Bulk(table, Parts(scenario_of(scn, space, space.base), None))
    sp = bulk.structural(rows)
    idx, times = Exact(bulk).price_rows(sp, rows)
    rng = np.random.default_rng(5)
    for r in rows:
        mine = np.flatnonzero((idx >= table.starts[r]) & (idx < table.starts[r + 1]))
        for k in rng.choice(mine, size=min(2, mine.size), replace=False):
            plan = table.plan(int(idx[k]))
            pred = predict(scenario_of(scn, space, plan))
            assert times[k] == pytest.approx(pred.step_time_s, rel=1e-12), plan
            assert sp.memory_bytes[r] == pytest.approx(pred.memory.total_bytes, rel=1e-12), plan


def test_bucketed_exposure_is_the_step_models():
    rng = np.random.default_rng(3)
    total, msg, bucket, window = rng.random(200) * 2, rng.random(200) * 4e9, rng.random(200) * 2e8, rng.random(200)
    bucket[:5] = 0.0
    got = bucketed_exposed(total, msg, bucket, window, 0.1)
    want = [exposed_after_bucketed_overlap(*a, 0.1) for a in zip(total, msg, bucket, window)]
    assert got.tolist() == pytest.approx(want, rel=1e-15)


def _exhaustive(scn: Scenario, space: SearchSpace, objective: str):
    cands = [candidate(predict(scenario_of(scn, space, p)), objective == "energy") for p in candidate_plans(space)]
    fit = [c for c in cands if c.headroom_bytes >= 0]
    return fit, drop_equivalent(sorted(fit, key=sort_key(objective)))


EXHAUSTIVE = [("llama3-8b-h100-8", dict(tp=2, pp=2, zero_stage=2, mbs=2, cp=2)),
              ("mixtral16", dict(tp=2, pp=1, mbs=1, zero_stage=1, cp=1)),
              ("mixtral16-fp8-cache", dict(tp=2, pp=1, mbs=1, zero_stage=1, cp=1))]


@pytest.mark.parametrize("name,pins", EXHAUSTIVE, ids=[e[0] for e in EXHAUSTIVE])
def test_top_20_is_an_exhaustive_predicts(name, pins):
    """2,832 plans (cp exchanges, ZeRO-2 with accumulation, interleaving, partial recompute, offload, overlap
    switches, bucket sizes, placements) and 1,768 MoE plans (ep, etp, dispatch, ep overlap,
    recompute of the MoE activation, norms and layer; and 1,224 with an FP8 activation cache, which recomputes the
    MoE activation under none and selective alike): the search's shown plans, their numbers, the counts and the
    base plan's rank and ties are an exhaustive predict's."""
    scn = SCENARIOS[name]()
    res, _, _ = _assert_search_is_exhaustive(scn, _space(scn, **pins))
    assert res.baseline_rank is not None


def test_where_memory_is_tight_a_module_set_wins():
    """Mixtral on GPUs with just the memory that recomputing the MoE layer's norms and activation needs (Megatron-Core
    --recompute-modules layernorm moe_act, NVIDIA's MoE recipes; tests/search/scenarios.mixtral16_tight): no plan
    without recompute fits, nor selective recompute of the attention core, and a full recompute (of every layer or
    of a share of them) or an offload that fits is slower, so the best plan recomputes (layernorm, moe_act) — found by
    the search as by an exhaustive predict over the 1,768 plans."""
    tight = mixtral16_tight()
    res, fit, ranked = _assert_search_is_exhaustive(tight, _space(tight, **TIGHT_PINS))
    best = ranked[0].plan
    assert (best.recompute, best.recompute_modules) == ("selective", ("layernorm", "moe_act"))
    assert res.ranked[0].plan == best and res.baseline_rank is None  # the base plan recomputes nothing
    assert not any(c.plan.recompute == "none" and not c.plan.offload_layers for c in fit)
    assert not any(c.plan.recompute == "selective" and not c.plan.recompute_modules for c in fit)
    assert min(c.step_time_s for c in fit if c.plan.recompute == "full") > ranked[0].step_time_s


def _assert_search_is_exhaustive(scn: Scenario, space: SearchSpace):
    """The search's top 20, numbers, counts, base plan's rank and ties are an exhaustive predict's; returns the
    search's result and the exhaustive (fitting plans, ranking)."""
    res = search(scn, space, top=20)
    fit, ranked = _exhaustive(scn, space, "time")
    assert res.num_plans == len(list(candidate_plans(space)))
    assert res.num_fit == len(fit)
    assert res.num_ranked == len(ranked)
    assert [c.plan for c in res.ranked[:20]] == [c.plan for c in ranked[:20]]
    assert [(c.step_time_s, c.memory_bytes) for c in res.ranked[:20]] == \
        [(c.step_time_s, c.memory_bytes) for c in ranked[:20]]
    if res.baseline_rank is not None:
        tb = res.baseline.step_time_s
        assert res.baseline_rank == 1 + sum(c.step_time_s < tb - TIE_REL * tb for c in ranked)
        assert res.baseline_ties == sum(abs(c.step_time_s - tb) <= TIE_REL * tb and c.plan != res.baseline.plan
                                        for c in ranked)
    assert res.num_priced <= res.num_fit
    return res, fit, ranked


def test_memory_ranking_is_an_exhaustive_predicts():
    scn = SCENARIOS["mixtral16"]()
    space = _space(scn, tp=2, pp=1, mbs=1, zero_stage=1, cp=1)
    res = search(scn, space, top=10, objective="memory")
    _, ranked = _exhaustive(scn, space, "memory")
    assert [c.plan for c in res.ranked[:10]] == [c.plan for c in ranked[:10]]
    assert res.baseline_in_space and res.baseline.fits
    mb = res.baseline.memory_bytes
    assert res.baseline_rank == 1 + sum(c.memory_bytes < mb - TIE_REL * mb for c in ranked)


@pytest.mark.parametrize("reshard", ["unless_pp", "never"])
def test_zero3_kept_gathered_is_priced_not_reset(reshard):
    """ZeRO-3 plans of the space, pp 1 and pp > 1 alike: the search keeps the base's zero3_reshard and the bulk
    step time and memory of each are predict's for that plan (a reset to `always`, as before, priced every
    micro-batch's gathers and the sharded memory for all of them)."""
    scn = _zero3_kept(reshard)
    space = _space(scn, zero_stage=3)
    assert space.base.zero3_reshard == reshard
    table = build_table(space)
    rng = np.random.default_rng(3)
    pp = table.cols["pp"][:table.num_structural]
    rows = np.sort(np.concatenate([rng.choice(np.flatnonzero(pp == 1), size=20, replace=False),
                                   rng.choice(np.flatnonzero(pp > 1), size=20, replace=False)]))
    bulk = Bulk(table, Parts(scenario_of(scn, space, space.base), None))
    sp = bulk.structural(rows)
    idx, times = Exact(bulk).price_rows(sp, np.arange(rows.size))
    kept_pp = set()
    for k in range(0, idx.size, max(1, idx.size // 80)):
        plan = table.plan(int(idx[k]))
        assert plan.zero_stage == 3 and plan.zero3_reshard == reshard
        pred = predict(scenario_of(scn, space, plan))
        at = int(np.searchsorted(rows, int(np.searchsorted(table.starts, idx[k], side="right") - 1)))
        assert times[k] == pytest.approx(pred.step_time_s, rel=1e-12), plan
        assert sp.memory_bytes[at] == pytest.approx(pred.memory.total_bytes, rel=1e-12), plan
        kept_pp.add((plan.pp > 1, plan.comm_zero_stage))
    # the sample holds plans kept gathered (priced as ZeRO-1) and, under unless_pp, plans gathered per micro-batch
    assert (True, 1) in kept_pp
    assert ((False, 3) in kept_pp) == (reshard == "unless_pp")




def test_energy_ranking_is_an_exhaustive_predicts():
    """The energy objective prunes by a lower bound of each plan's energy (search.engine.energy_bound: idle power
    for the step and the executed FLOPs at the cheapest coefficient of the formats at least as wide as the plan's);
    since the fifty-sixth session it no longer counts formats a BF16 plan cannot run, so it prunes — and its top
    plans are still an exhaustive predict's (a bound above some plan's energy would drop it)."""
    scn = SCENARIOS["llama3-8b-h100-8"]()
    space = _space(scn, tp=2, pp=2, zero_stage=2, mbs=2, cp=2)
    res = search(scn, space, objective="energy", top=5)
    _, ranked = _exhaustive(scn, space, "energy")
    assert [c.plan for c in res.ranked[:5]] == [c.plan for c in ranked[:5]]
    assert [c.energy_per_step_j for c in res.ranked[:5]] == pytest.approx([c.energy_per_step_j for c in ranked[:5]],
                                                                           rel=1e-9)


@pytest.mark.parametrize("cap_w, precision", [(200, "fp8"), (350, "bf16"), (0, "fp8")])
def test_the_energy_bound_is_below_every_sampled_plans_energy(tmp_path, monkeypatch, cap_w, precision):
    """The energy objective prunes a plan when its bound exceeds what could rank, so the bound must lie below the
    plan's exact energy — under a power cap too, where the ledger's energy per FLOP follows the clock (fifty-sixth
    session's review: at 200 W the bound was 1.2-1.3x the exact energy). Forty fitting plans of an 8-GPU H100 job,
    bound against the exact pricing."""
    import narrowpath.search.bulk_search as bs
    from narrowpath.cli.main import main
    seen = []

    def spy(eng, fit_rows, baseline, top, max_seconds, say):
        rng = np.random.default_rng(0)
        idx, t = eng.price_rows(rng.choice(fit_rows, size=min(40, fit_rows.size), replace=False))
        bound = eng.energy_bound(eng.row_of(idx), t)
        for b, c in zip(bound, eng.exact_candidates(idx, energy=True)):
            if c is not None:
                seen.append((b, c.energy_per_step_j))
        raise SystemExit(0)

    monkeypatch.setattr(bs, "_by_energy", spy)
    f = tmp_path / "capped.yaml"
    box = {"id": "dgx-h100-capped", "device": "H100-SXM5-80GB", "gpus_per_node": 8, "power_limit_w": cap_w,
           "tiers": [{"name": "scale_up", "bw_bytes_per_s_per_gpu": 450e9, "domain_size": 8, "latency_s": 2e-6,
                      "topology": "switched"},
                     {"name": "scale_out", "bw_bytes_per_s_per_gpu": 50e9, "latency_s": 5e-6,
                      "topology": "rail_optimized"}]}
    f.write_text(yaml.safe_dump({"system": box if cap_w else "dgx-h100", "model": "llama3-8b", "num_gpus": 8,
                                 "plan": {"tp": 1, "dp": 8, "mbs": 1, "gbs": 64, "precision": precision}}))
    with pytest.raises(SystemExit):
        main(["search", str(f), "--objective", "energy", "--space", "basic"])
    assert len(seen) >= 20 and all(b <= e for b, e in seen), min(e / b for b, e in seen)
