"""What-ifs a practitioner would try: plan knobs repaired, hardware, fabric and software changes; the narrowest
path always gets an answer; changes that gain nothing are said so and never ranked."""
from __future__ import annotations

import pytest

from narrowpath.analysis import analyze
from narrowpath.analysis.whatif import NO_GAIN_FRACTION
from narrowpath.catalog import load_scenario
from tests.analysis.test_read_right import FAT_TREE_4_TO_1


def _by_change(a):
    return {w.change: w for w in a.verdict.what_ifs}


def test_the_narrowest_path_always_has_a_remedy_tried_or_is_said_to_have_none(any_analysis):
    """The remedy named is the faster change that shrinks the narrowest path most (read off its own re-predicted
    step's paths), never one that makes the step faster by lengthening that path."""
    v = any_analysis.verdict
    key, now = v.narrowest, v.components_s[v.narrowest]
    tried = [w for w in v.what_ifs if key in w.targets and w.status not in ("invalid", "not applicable")]

    def shrink(w):
        return now - w.components_s[key] if w.components_s is not None else w.gain_s
    if tried:
        shrinkers = [w for w in tried if w.status == "faster" and shrink(w) > 0]
        if shrinkers:
            assert "Best remedy tried for it" in v.sentence
            assert f"{max(shrinkers, key=shrink).description} (" in v.sentence
        elif any(w.status == "does not fit" and w.components_s is not None and shrink(w) > 0 for w in tried):
            assert "that shrink it do not fit in memory" in v.sentence  # they shrink it, they just do not fit
        else:
            assert "do not shrink it here" in v.sentence
        lengthen = [w for w in tried if w.status == "faster" and shrink(w) <= 0]
        if lengthen:  # the fastest of them is said to be a remedy elsewhere
            w = max(lengthen, key=lambda w: w.gain_s)
            assert f"{w.description[1:]}: step {w.gain_s:.3g} s faster, but it lengthens" in v.sentence
    else:
        assert "No change among the knobs narrowpath models targets" in v.sentence


def test_no_gain_rows_are_never_ranked(any_analysis):
    step = any_analysis.prediction.step_time_s
    for w in any_analysis.verdict.what_ifs:
        if w.step_s is None or not w.fits:
            continue
        if abs(w.gain_s) <= NO_GAIN_FRACTION * step:
            assert w.status == "no gain" and w.skipped.startswith("no gain")
        elif w.gain_s < 0:
            assert w.status == "slower" and w.skipped
        else:
            assert w.status == "faster" and not w.skipped


def test_the_405b_plan_tries_tp_4_and_micro_batch_2_instead_of_calling_them_invalid():
    """Issue 14: `analyze llama3-405b-h100-16k` listed "TP 8→4" and "micro-batch ×2" as invalid."""
    wis = _by_change(analyze(load_scenario("llama3-405b-h100-16k")))
    for change in ("halve_tp", "raise_mbs"):
        w = wis[change]
        assert w.step_s is not None and w.status != "invalid"
        assert any(r.startswith("vpp 8 -> 1") for r in w.repairs)


def test_hardware_fabric_and_software_changes_are_tried():
    a = analyze(load_scenario("gpt3-175b-a100-1024"))  # A100, unfused attention, 200 Gb/s NICs, 8-GPU NVLink
    w = _by_change(a)
    assert w["nic_x2"].kind == "fabric" and "200 -> 400 Gb/s" in w["nic_x2"].description
    assert w["nvlink_72"].kind == "hardware" and w["nvlink_72"].scenario.system.scale_up_domain == 72
    assert w["next_generation"].scenario.system.device.name == "H100-SXM5-80GB"
    assert w["flash_attention"].kind == "software" and w["flash_attention"].gain_s > 0
    assert "fp8" not in w  # A100 has no FP8 matrix rate
    h100 = _by_change(analyze(load_scenario("llama3-70b-h100-256")))
    assert h100["fp8"].scenario.plan.precision == "fp8" and h100["fp8"].step_s is not None  # evaluated, not refused


def test_an_oversubscribed_fabric_is_offered_a_non_blocking_one():
    from narrowpath.catalog import scenario_from_dict
    w = _by_change(analyze(scenario_from_dict(FAT_TREE_4_TO_1)))["non_blocking_fabric"]
    assert w.scenario.system.tier("scale_out").oversubscription == 1.0
    assert w.gain_s >= 0


def test_power_cap_and_expert_overlap_are_tried_and_say_when_the_model_does_not_respond():
    """The power cap (80 % of TDP) and the expert all-to-all overlap are re-predicted; where the step does not move
    at all, the row says the model's step does not respond, rather than calling the change useless."""
    from tests.analysis.conftest import MIXTRAL, scenario_from_flags
    a = analyze(scenario_from_flags(MIXTRAL))
    w = _by_change(a)
    cap = w["power_cap"]
    assert cap.scenario.system.power_limit_w == pytest.approx(0.8 * 700) and cap.targets == ("energy",)
    assert w["ep_overlap"].scenario.plan.ep_overlap and "exposed_ep_comm" in w["ep_overlap"].targets
    for x in (cap, w["ep_overlap"]):
        assert x.step_s is not None and x.energy_per_token_j > 0
        if x.status == "no gain":  # the base plan may not fit, then every row says so first
            same = x.step_s == a.prediction.step_time_s
            assert (x.skipped == "no gain: the model's step does not respond to this change") == same


@pytest.mark.parametrize("name", ["llama3-70b-h100-256", "gnmt-lstm-a100-8"])
def test_every_what_if_names_its_kind_and_targets(name):
    for w in analyze(load_scenario(name)).verdict.what_ifs:
        assert w.kind in ("plan", "hardware", "fabric", "software") and w.targets, w.change


def test_a_flash2_plan_on_hopper_is_offered_the_fused_kernel():
    """torchtitan runs FlashAttention-2 through PyTorch's SDPA; on Hopper the fused kernel (cuDNN, FlashAttention-3)
    is ~2x faster forward (Device.flash2_rate), so analyze prices switching to it; on A100, where FlashAttention-2 is
    the fused kernel, there is nothing to offer."""
    import dataclasses
    base = load_scenario("llama3-8b-h100-8")
    long = dataclasses.replace(base, model=dataclasses.replace(base.model, seq_len=32768),
                               plan=dataclasses.replace(base.plan, mbs=1, gbs=8, recompute="full", attention="flash2"))
    w = _by_change(analyze(long))
    assert w["fused_attention"].kind == "software" and w["fused_attention"].status == "faster"
    assert w["fused_attention"].scenario.plan.attention == "flash"
    assert w["fused_attention"].gain_s > 0.1 * w["fused_attention"].step_s
    a100 = load_scenario("gpt3-175b-a100-1024")
    a100 = dataclasses.replace(a100, plan=dataclasses.replace(a100.plan, attention="flash2"))
    assert "fused_attention" not in _by_change(analyze(a100))
