"""Repairs: a knob change that breaks divisibility is repaired to the nearest valid plan, and the repair is said."""
from __future__ import annotations

import pytest

from narrowpath.analysis.repair import repaired
from narrowpath.catalog import load_scenario
from narrowpath.errors import NarrowpathError
from narrowpath.spec.scenario import consistency_errors

LLAMA_405B = "llama3-405b-h100-16k"  # tp 8, pp 16, dp 128, vpp 7, mbs 1, gbs 2048: 16 micro-batches


def _valid(scn) -> bool:
    return not consistency_errors(scn.model, scn.plan, scn.num_gpus, scn.system)


def test_doubling_the_micro_batch_drops_interleaving_when_micro_batches_no_longer_divide():
    """mbs 2 leaves 2048 / (128 · 2) = 8 micro-batches, not a multiple of pp 16: vpp goes to 1 (the cheapest repair,
    the global batch stays)."""
    s, notes = repaired(load_scenario(LLAMA_405B), mbs=2)
    assert (s.plan.mbs, s.plan.vpp, s.plan.gbs, s.plan.dp) == (2, 1, 2048, 128)
    assert notes == ("vpp 7 -> 1: interleaved schedule needs micro-batches (8) divisible by pp 16",)
    assert _valid(s)


def test_halving_tp_raises_dp_on_the_same_gpus_and_repairs_the_schedule():
    s, notes = repaired(load_scenario(LLAMA_405B), tp=4)
    assert (s.plan.tp, s.plan.dp, s.num_gpus, s.plan.vpp) == (4, 256, 16384, 1)
    assert notes[0] == "dp 128 -> 256" and notes[1].startswith("vpp 7 -> 1")


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
