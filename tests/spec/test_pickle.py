"""Specs pickle (worker processes receive scenarios): a round trip gives an equal spec, checks re-run."""
from __future__ import annotations

import pickle

import pytest

from narrowpath.catalog import calibration_for, load_scenario


@pytest.mark.parametrize("name", ["llama3-70b-h100-256", "gpt3-175b-a100-1024", "gnmt-lstm-a100-8"])
def test_scenario_round_trip(name):
    scn = load_scenario(name)
    back = pickle.loads(pickle.dumps(scn))
    assert back == scn
    assert dict(back.system.device.peak_matrix_flop_per_s) == dict(scn.system.device.peak_matrix_flop_per_s)
    with pytest.raises(TypeError):  # still read-only after the trip
        back.system.device.peak_matrix_flop_per_s["bf16"] = 1.0


def test_calibration_round_trip():
    cal = calibration_for("H100-SXM5-80GB")
    assert pickle.loads(pickle.dumps(cal)) == cal
