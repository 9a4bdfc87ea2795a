"""The LSTM workload prices tp and dp only: knobs it would ignore are refused, naming the field."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario
from narrowpath.errors import SpecError


@pytest.mark.parametrize("knob,value", [("zero_stage", 1), ("zero_stage", 3), ("recompute", "full"),
                                        ("recompute", "selective")])
def test_lstm_refuses_knobs_it_cannot_price(knob, value):
    scn = load_scenario("gnmt-lstm-a100-8")
    with pytest.raises(SpecError, match=f"plan.{knob}"):
        dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, **{knob: value}))


def test_lstm_refuses_sequence_parallel():
    scn = load_scenario("gnmt-lstm-a100-8")
    plan = dataclasses.replace(scn.plan, tp=2, dp=4, sequence_parallel=True)
    with pytest.raises(SpecError, match="plan.sequence_parallel"):
        dataclasses.replace(scn, plan=plan)
