"""A power cap shows where its effect shows: predict names it (header, assumptions, JSON) and `compare` names it as
what differs (it said "nothing (same scenario)" beside a 13.7 % slower step)."""
from __future__ import annotations

import dataclasses
import json

import pytest

from narrowpath.analysis import analyze
from narrowpath.analysis.compare import compare
from narrowpath.catalog import load_scenario
from narrowpath.cli.main import main
from narrowpath.cost.power import clock_fraction
from narrowpath.report.prediction import format_prediction
from narrowpath.schedule import predict


@pytest.fixture(scope="module")
def pair():
    a = load_scenario("llama3-8b-h100-8")
    b = dataclasses.replace(a, system=dataclasses.replace(a.system, power_limit_w=560.0))
    return a, b


def test_predict_names_the_cap(pair):
    _, b = pair
    p = predict(b)
    text = format_prediction(p)
    assert "capped at 560 W" in text.splitlines()[1]
    f = clock_fraction(b.system.device.tdp_w, b.system.device.idle_w, 560.0)
    assert 0.8 < f < 0.95
    assert f"power cap 560 W per GPU of the rated 700 W: matrix and vector arithmetic at {f:.1%}" in text


def test_no_cap_no_note(pair):
    a, _ = pair
    p = predict(a)
    assert not any("power cap" in x for x in p.assumptions)
    assert "capped" not in format_prediction(p)


def test_a_cap_above_the_rating_says_it_does_nothing(pair):
    a, _ = pair
    c = dataclasses.replace(a, system=dataclasses.replace(a.system, power_limit_w=700.0))  # above it is refused
    p = predict(c)
    assert "power cap 700 W per GPU: no effect (at or above the rated 700 W)" in p.assumptions
    assert p.step_time_s == predict(a).step_time_s


def test_compare_names_the_cap(pair):
    a, b = pair
    c = compare(analyze(a), analyze(b))
    text = " ".join(c.sentences) if hasattr(c, "sentences") else str(c)
    assert "power cap per GPU none -> 560 W" in text and "nothing (same scenario)" not in text


def test_predict_json_carries_the_cap(tmp_path, capsys, pair):
    _, b = pair
    f = tmp_path / "capped.yaml"
    f.write_text("""system:
  id: dgx-h100
  device: H100-SXM5-80GB
  gpus_per_node: 8
  power_limit_w: 560
  tiers:
  - {name: scale_up, bw_bytes_per_s_per_gpu: 450e9, domain_size: 8, latency_s: 2.0e-6, topology: switched}
  - {name: scale_out, bw_bytes_per_s_per_gpu: 50e9, latency_s: 5.0e-6, topology: rail_optimized}
model: llama3-8b
num_gpus: 8
plan: {tp: 1, dp: 8, mbs: 1, gbs: 64, zero_stage: 1, recompute: selective}
""")
    assert main(["predict", str(f), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["power_limit_w"] == 560
    assert main(["predict", "llama3-8b-h100-8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["power_limit_w"] is None


def test_a_profile_of_another_device_is_named_in_the_assumptions(pair):
    """The assumptions warn when the calibration profile was measured on another device than the one priced."""
    from narrowpath.catalog import calibration_for
    a, _ = pair
    p = predict(a, calibration_for("A100-SXM4-80GB"))
    cal = p.calibration
    assert cal.device != a.system.device.name
    assert f"(WARNING: measured on {cal.device}, applied to {a.system.device.name})" in p.assumptions[0]
    assert "WARNING" not in predict(a).assumptions[0]
