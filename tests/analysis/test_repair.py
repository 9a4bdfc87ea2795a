"""Repairs: a knob change that breaks divisibility is repaired to the nearest valid plan, and the repair is said."""
from __future__ import annotations

import pytest

from narrowpath.analysis.repair import repaired
from narrowpath.catalog import load_scenario
from narrowpath.errors import NarrowpathError
from narrowpath.spec.scenario import consistency_errors

LLAMA_405B = "llama3-405b-h100-16k"  # tp 8, pp 16, dp 128, vpp 8, mbs 1, gbs 2048: 16 micro-batches


def _valid(scn) -> bool:
    return not consistency_errors(scn.model, scn.plan, scn.num_gpus, scn.system)


def test_doubling_the_micro_batch_drops_interleaving_when_micro_batches_no_longer_divide():
    """mbs 2 leaves 2048 / (128 · 2) = 8 micro-batches, not a multiple of pp 16: vpp goes to 1 (the cheapest repair,
    the global batch stays)."""
    s, notes = repaired(load_scenario(LLAMA_405B), mbs=2)
    assert (s.plan.mbs, s.plan.vpp, s.plan.gbs, s.plan.dp) == (2, 1, 2048, 128)
    assert notes == ("vpp 8 -> 1: interleaved schedule needs micro-batches (8) divisible by pp 16",)
    assert _valid(s)


def test_halving_tp_raises_dp_on_the_same_gpus_and_repairs_the_schedule():
    s, notes = repaired(load_scenario(LLAMA_405B), tp=4)
    assert (s.plan.tp, s.plan.dp, s.num_gpus, s.plan.vpp) == (4, 256, 16384, 1)
    assert notes[0] == "dp 128 -> 256" and notes[1].startswith("vpp 8 -> 1")


def test_tp_one_turns_sequence_parallelism_off_and_pp_one_interleaving():
    base = load_scenario("llama3-70b-h100-256")
    s, notes = repaired(base, tp=1)
    assert not s.plan.sequence_parallel and "sequence parallel True -> False" in notes
    s, notes = repaired(base, pp=1)
    assert (s.plan.vpp, s.plan.dp) == (1, 32) and "vpp 5 -> 1" in notes


def test_named_knobs_are_never_repaired():
    """vpp 14 asked explicitly: pp·vpp = 224 exceeds 126 layers and nothing else can fix it — the spec's reason."""
    with pytest.raises(NarrowpathError, match="exceeds model.layers 126"):
        repaired(load_scenario(LLAMA_405B), vpp=14)


def test_the_global_batch_changes_only_when_allowed():
    """GNMT runs one micro-batch of 64 per replica: doubling it needs a global batch of 1024 — refused unless
    allowed, and then said to change the recipe."""
    gnmt = load_scenario("gnmt-lstm-a100-8")
    with pytest.raises(NarrowpathError, match="not divisible"):
        repaired(gnmt, mbs=128)
    s, notes = repaired(gnmt, mbs=128, allow_gbs=True)
    assert s.plan.gbs == 1024 and notes == ("global batch 512 -> 1024 (changes the training recipe): global batch "
                                            "512 is not divisible by dp·mbs = 8·128 = 1024",)


def test_an_unchanged_valid_plan_is_returned_as_is():
    base = load_scenario("llama3-70b-h100-256")
    s, notes = repaired(base, mbs=2)
    assert notes == () and s.plan.mbs == 2 and s.plan.vpp == base.plan.vpp


def test_a_group_asked_for_takes_the_nearest_batch_its_groups_split():
    """vp_group 20 on Llama-3 405B's 16 micro-batches (pp 16): Megatron-Core needs at least 20 micro-batches, and
    a last group of none or at least pp — so 20 (global batch 2,560, not a multiple of pp·dp·mbs = 2,048), where
    stepping by pp·dp·mbs found none of 32, 48, 64 (32 mod 20 = 12 < 16 …) and went to 80; a group of 32: 32.
    The plan's vpp 8 stays although pp·vpp = 128 exceeds the 126 layers (its first and last chunk hold the
    embedding and the output layer alone): the repair once capped vpp at layers // pp = 7 and changed it too."""
    base = load_scenario(LLAMA_405B)
    for group, gbs in ((20, 2560), (32, 4096), (40, 5120)):
        s, notes = repaired(base, vp_group=group, allow_gbs=True)
        assert (s.plan.vp_group, s.plan.vpp, s.plan.gbs, s.plan.num_microbatches) == (group, 8, gbs, gbs // 128)
        assert notes == (f"global batch 2048 -> {gbs} (changes the training recipe): Megatron-Core takes a group of "
                         f"pp (16) to the micro-batches (16), got {group}",)
        assert _valid(s)


def _stepped(gbs, dp, mbs, pp, interleaved, steps):
    """The batches a step of dp·mbs (·pp when interleaved) gives: `steps` multiples on each side, nearest first."""
    step = dp * mbs * (pp if interleaved else 1)
    if gbs % step == 0:
        return [gbs]
    lo = gbs // step * step
    out = [lo + step * (i + 1) for i in range(steps)] + [lo - step * i for i in range(steps) if lo - step * i > 0]
    return sorted(out, key=lambda g: (abs(g - gbs), -g))


def test_without_a_group_the_batch_options_step_by_pp_dp_mbs():
    from narrowpath.analysis.repair import MAX_GBS_STEPS, _gbs_options
    for gbs in range(1, 200, 7):
        for dp, mbs, pp in ((1, 1, 2), (2, 1, 4), (3, 2, 3), (8, 4, 8), (4, 2, 1)):
            for inter in (False, True):
                assert _gbs_options(gbs, dp, mbs, pp, inter) == _stepped(gbs, dp, mbs, pp, inter, MAX_GBS_STEPS)
    # 10 micro-batches (pp 4) under a group of 16: asked for, only counts its groups split (16, then 20 to 27 —
    # 17 to 19 leave a last group shorter than pp — and none below 16); not asked for, the group may go back to
    # pp's, so pp's multiples 8, 4 and 12 are offered too
    assert _gbs_options(20, 2, 1, 4, True, 16, True) == [32, 40, 42, 44, 46, 48, 50, 52]
    assert _gbs_options(20, 2, 1, 4, True, 16) == [24, 16, 32, 8, 40, 42, 44, 46, 48, 50]


def test_a_group_no_batch_can_split_is_refused_at_once():
    """A group asked for below pp (Megatron-Core refuses it for any micro-batch count) or far above any nearby
    batch leaves no global batch to offer: the spec's reason, not a search without end."""
    from narrowpath.analysis.repair import _gbs_options
    assert _gbs_options(64, 2, 1, 4, True, 2, True) == []
    assert _gbs_options(64, 2, 1, 4, True, 1 << 29, True) == []
    with pytest.raises(NarrowpathError, match="Megatron-Core takes a group of pp"):
        repaired(load_scenario("llama3-70b-h100-256"), vp_group=2, allow_gbs=True)
