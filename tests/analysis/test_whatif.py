"""Verdict what-ifs: each gain is recomputed independently by predicting the changed scenario by hand."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.schedule.step import predict


def _by_change(a):
    return {w.change: w for w in a.verdict.what_ifs}


def test_tp_comm_overlap_gain_recomputed(default_analysis):
    a = default_analysis
    scn = a.prediction.scenario
    w = _by_change(a)["tp_comm_overlap"]
    changed = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, tp_comm_overlap=True))
    step = predict(changed).step_time_s
    assert w.step_s == pytest.approx(step)
    assert w.gain_s == pytest.approx(a.prediction.step_time_s - step)


def test_raise_mbs_gain_recomputed(default_analysis):
    a = default_analysis
    scn = a.prediction.scenario
    w = _by_change(a)["raise_mbs"]
    changed = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, mbs=2 * scn.plan.mbs))
    assert w.gain_s == pytest.approx(a.prediction.step_time_s - predict(changed).step_time_s)


def test_ranked_by_gain_and_infeasible_skipped(any_analysis):
    wis = any_analysis.verdict.what_ifs
    ok = [w for w in wis if not w.skipped]
    assert [w.gain_s for w in ok] == sorted((w.gain_s for w in ok), reverse=True)
    seen_skipped = False
    for w in wis:
        seen_skipped |= bool(w.skipped)
        assert not (seen_skipped and not w.skipped), "skipped changes come after every ranked one"
        if w.step_s is not None and not w.fits:
            assert w.skipped.startswith("does not fit")


def test_skipped_when_it_does_not_fit():
    """gpt3-175b without recompute needs more than 80 GB per rank: evaluated, but not ranked."""
    from narrowpath.analysis import analyze
    from narrowpath.catalog import load_scenario
    a = analyze(load_scenario("gpt3-175b-a100-1024"))
    w = {w.change: w for w in a.verdict.what_ifs}["recompute_none"]
    assert not w.fits and w.skipped.startswith("does not fit")
    assert predict(w.scenario).memory.fits is False


def _valid(scn, **kw):
    """The plan with `kw`, dp following the GPU count, and — written here independently of analysis.repair — the
    virtual stages lowered, then the micro-batch halved, until the spec accepts it (the repair order)."""
    from narrowpath.errors import NarrowpathError
    p = dataclasses.replace(scn.plan, **{k: v for k, v in kw.items() if k in ("placement",)})
    fields = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
    fields.update(kw)
    if "dp" not in kw:
        fields["dp"] = scn.num_gpus // (fields["tp"] * fields["pp"] * fields["cp"])
    fields["sequence_parallel"] = fields["sequence_parallel"] and fields["tp"] > 1
    if fields["pp"] == 1:
        fields["vpp"] = 1
    vpps = [fields["vpp"]] if "vpp" in kw else range(min(fields["vpp"], scn.model.layers // fields["pp"]) or 1, 0, -1)
    mbss = [fields["mbs"]] if "mbs" in kw else [fields["mbs"] >> i for i in range(fields["mbs"].bit_length())]
    for mbs in mbss:
        for vpp in vpps:
            try:
                q = type(p)(**{**fields, "vpp": vpp, "mbs": mbs})
                return dataclasses.replace(scn, plan=q, num_gpus=q.num_gpus)  # the Scenario checks consistency
            except NarrowpathError:
                continue
    raise AssertionError(f"no valid plan for {kw}")


def _by_hand(scn, change: str):
    """The changed scenario for a what-if id, built here without the analysis code (independent reference)."""
    from narrowpath.catalog import system as catalog_system
    p = scn.plan

    def plan(**kw):
        q = dataclasses.replace(p, **kw)
        return dataclasses.replace(scn, plan=q, num_gpus=q.num_gpus)

    def tier(name, **kw):
        tiers = tuple(dataclasses.replace(t, **kw) if t.name == name else t for t in scn.system.tiers)
        return dataclasses.replace(scn, system=dataclasses.replace(scn.system, tiers=tiers))

    dom = scn.system.scale_up_domain
    nxt = {"A100-SXM4-80GB": "dgx-h100", "H100-SXM5-80GB": "dgx-b200", "H200-SXM-141GB": "dgx-b200",
           "B200": "dgx-b300", "GB200": "gb300-nvl72"}
    table = {
        "raise_mbs": lambda: _valid(scn, mbs=2 * p.mbs),
        "interleave_pipeline": lambda: _valid(scn, pipeline_schedule="auto",
                                              vpp=2 if p.num_microbatches % p.pp == 0 else 1) if p.dualpipe
        else _valid(scn, vpp=min(2 * p.vpp, scn.model.layers // p.pp)),
        "dualpipe": lambda: _valid(scn, pipeline_schedule="dualpipe", vpp=1,
                                   **({"ep_overlap": True} if scn.model.moe is not None else {})),
        "dualpipev": lambda: _valid(scn, pipeline_schedule="dualpipev", vpp=2,
                                    **({"ep_overlap": True} if scn.model.moe is not None else {})),
        "dp_overlap": lambda: plan(dp_overlap=True),
        "tp_comm_overlap": lambda: plan(tp_comm_overlap=True),
        "sequence_parallel": lambda: plan(sequence_parallel=True),
        "in_network_reduction_scale_up": lambda: tier("scale_up", in_network_reduction=True),
        "in_network_reduction_scale_out": lambda: tier("scale_out", in_network_reduction=True),
        "nic_x2": lambda: tier("scale_out", bw_bytes_per_s_per_gpu=2 * scn.system.tier("scale_out")
                               .bw_bytes_per_s_per_gpu),
        "non_blocking_fabric": lambda: tier("scale_out", oversubscription=1.0),
        # as the catalog's gb200-nvl72: a job beyond one rack on 64-GPU segments of 72-GPU domains
        "nvlink_72": lambda: dataclasses.replace(tier("scale_up", domain_size=72), system=dataclasses.replace(
            tier("scale_up", domain_size=72).system, segment_gpus=64)),
        "next_generation": lambda: dataclasses.replace(scn, system=catalog_system(nxt[scn.system.device.name]),
                                                       calibration=None),
        "flash_attention": lambda: plan(attention="flash"),
        "ep_overlap": lambda: plan(ep_overlap=True),
        "cuda_graphs": lambda: plan(cuda_graphs=True),
        "moe_sync_free": lambda: plan(moe_sync_free=True),
        "power_cap": lambda: dataclasses.replace(scn, system=dataclasses.replace(
            scn.system, power_limit_w=0.8 * scn.system.device.tdp_w)),
        "fp8": lambda: plan(precision="fp8"),
        "recompute_none": lambda: plan(recompute="none"),
        "recompute_selective": lambda: plan(recompute="selective"),
        "recompute_full": lambda: plan(recompute="full"),
        "zero1": lambda: plan(zero_stage=1),
        "halve_tp": lambda: _valid(scn, tp=p.tp // 2),
        "halve_pp": lambda: _valid(scn, pp=p.pp // 2),
    }
    for ax in ("tp", "cp"):
        order = (ax,) + tuple(a for a in p.placement if a != ax)
        table[f"{ax}_in_scale_up"] = (lambda o=order: plan(placement=o)) if getattr(p, ax) <= dom else \
            (lambda: _valid(scn, tp=dom))
    table["ep_in_scale_up"] = lambda: _ep_inside(scn)
    return table[change]()


def _ep_inside(scn):
    """EP is no layout axis (a stage's ranks split etp × ep × edp): the first of etp 1, Megatron's order, both, whose
    EP group stays in one scale-up domain (docs/model.md)."""
    from narrowpath.network.placement import group_span
    megatron = ("tp", "cp", "ep", "dp", "pp")
    for change in ({"etp": 1}, {"placement": megatron}, {"etp": 1, "placement": megatron}):
        q = dataclasses.replace(scn.plan, **change)
        if q != scn.plan and not group_span(q, scn.system, "ep").crosses_scale_out:
            return _valid(scn, **change)
    raise AssertionError("no change brings the EP group inside a domain")


def test_every_gain_recomputed_by_hand(any_analysis):
    """Every what-if's step time equals predict() of the changed scenario built by hand; its gain is base − that;
    the changed scenario differs from the base (a real re-run of a changed plan). A new device brings its own
    calibration profile; persistent kernels (no core-model knob) re-price the base step (analysis.persistence)."""
    from narrowpath.analysis.persistence import persistent_step_s
    a = any_analysis
    base = a.prediction
    for w in a.verdict.what_ifs:
        if w.step_s is None:
            assert w.status in ("invalid", "not applicable") and w.skipped.startswith(w.status), w.change
            continue
        if w.change == "persistent_rnn":
            assert w.scenario is None and w.step_s == pytest.approx(persistent_step_s(base), rel=1e-12)
            continue
        if w.change in ("rebalance_pipeline", "rebalance_chunks"):  # which split: tests/workload/test_uneven_split.py
            ends = {k: getattr(w.scenario.plan, k) for k in ("first_stage_layers", "last_stage_layers",
                                                             "chunk_layers")}
            scn = dataclasses.replace(base.scenario, plan=dataclasses.replace(base.scenario.plan, **ends))
        else:
            scn = _by_hand(base.scenario, w.change)
        assert (scn.plan, scn.system) != (base.scenario.plan, base.scenario.system), w.change
        again = predict(scn, None if w.change == "next_generation" else base.calibration)
        assert w.step_s == pytest.approx(again.step_time_s, rel=1e-12), w.change
        assert w.gain_s == pytest.approx(base.step_time_s - again.step_time_s, rel=1e-9, abs=1e-12), w.change
        assert w.fits == again.memory.fits
        assert (w.status == "does not fit") == (not again.memory.fits), w.change
        assert bool(w.skipped) == (w.status != "faster"), w.change


def test_expected_candidates_for_the_default_plan(default_analysis):
    """The default plan (TP 8 in NVLink, PP 4 interleaved, selective recompute) gets the changes an engineer would
    try: raise the micro-batch, interleave further, TP comm overlap, other recompute settings, halve TP / PP."""
    got = {w.change for w in default_analysis.verdict.what_ifs}
    p = default_analysis.prediction.scenario.plan
    expect = {"interleave_pipeline", "recompute_none", "recompute_full", "halve_tp", "halve_pp"}
    expect |= {"tp_comm_overlap"} if not p.tp_comm_overlap else set()
    expect |= {"dp_overlap"} if not p.dp_overlap else set()
    expect |= {"raise_mbs"} if p.gbs % (p.dp * p.mbs * 2) == 0 else set()
    expect |= {"nic_x2", "nvlink_72", "next_generation", "fp8"}  # hardware, fabric and software changes too
    assert expect <= got
    assert "tp_in_scale_up" not in got  # TP already inside the scale-up domain


def test_tp_across_nodes_is_pulled_into_the_scale_up_domain(tp_across_nodes_analysis):
    """TP groups placed across nodes: flagged by the topology account, and 'place TP inside the scale-up domain'
    is the top-ranked plan change with a large predicted gain, named as the remedy on this hardware."""
    a = tp_across_nodes_analysis
    assert any(f.startswith("TP groups") for f in a.topology.flags)
    w = _by_change(a)["tp_in_scale_up"]
    assert not w.skipped and w.gain_fraction > 0.2
    assert [w for w in a.verdict.what_ifs if w.kind == "plan"][0].change == "tp_in_scale_up"
    assert "on this hardware: place TP groups inside the scale-up domain" in a.verdict.sentence
    assert "tensor-parallel" in a.verdict.sentence and "scale_out" in a.verdict.sentence


def test_dp_overlap_and_in_network_reduction_offered_when_off():
    """A plan with DP overlap off and a scale-out fabric without SHARP, whose DP groups cross it, gets both."""
    from narrowpath.analysis import analyze
    from tests.analysis.conftest import MIXTRAL, scenario_from_flags
    a = analyze(scenario_from_flags(MIXTRAL + ["--no-dp-overlap"]))
    got = _by_change(a)
    assert "dp_overlap" in got and got["dp_overlap"].gain_s > 0
    assert "in_network_reduction_scale_out" in got


def test_one_gpu_offers_no_network_changes():
    """On one GPU there is no traffic: no in-network reduction, DP or TP changes are proposed."""
    from narrowpath.analysis import analyze
    from tests.analysis.conftest import ONE_GPU, scenario_from_flags
    a = analyze(scenario_from_flags(ONE_GPU))
    got = set(_by_change(a))
    assert not {c for c in got if c.startswith("in_network") or c in ("dp_overlap", "tp_comm_overlap", "zero1")}
    assert a.synchronisation.sync_points_per_step == 0 and a.synchronisation.jitter_wait_s == 0
    if not a.prediction.memory.fits:
        assert "does not fit" in a.verdict.sentence
