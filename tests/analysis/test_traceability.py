"""`narrowpath analyze --json` traces back to `narrowpath predict --json`: the same step, breakdown and transfer
rows, and the ledger, inventory, overlap, verdict and energy totals recomputed from the predict output alone."""
from __future__ import annotations

import contextlib
import io
import json

import pytest

from narrowpath.catalog import system as catalog_system
from narrowpath.cli.main import main
from tests.analysis.conftest import MIXTRAL

CASES = {"default": [], "gpt3": ["gpt3-175b-a100-1024"], "lstm": ["gnmt-lstm-a100-8"], "mixtral": MIXTRAL}


@pytest.fixture(scope="module", params=list(CASES))
def both(request):
    """(predict --json, analyze --json) of one scenario, via the CLI."""
    out = []
    for cmd in ("predict", "analyze"):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main([cmd, "--json", *CASES[request.param]]) == 0
        out.append(json.loads(buf.getvalue()))
    return out


def test_prediction_block_is_predict_output(both):
    """The `prediction` key of analyze is byte-for-byte what predict prints."""
    pred, ana = both
    assert ana["prediction"] == pred


def test_inventory_and_breakdown_agree_with_predict(both):
    """Inventory totals = Σ predict transfer rows; critical-path total = the breakdown's exposed communication."""
    pred, ana = both
    rows = ana["collectives"]
    assert sum(r["total_s"] for r in rows) == pytest.approx(sum(t["total_s"] for t in pred["transfers"]), rel=1e-9)
    assert sum(r["count_per_step"] for r in rows) == pytest.approx(sum(t["count"] for t in pred["transfers"]))
    exposed = sum(v for k, v in pred["breakdown_s"].items() if k.startswith("exposed_"))
    assert sum(r["critical_path_s"] for r in rows) == pytest.approx(exposed, rel=1e-9, abs=1e-12)
    for axis in {t["axis"] for t in pred["transfers"]}:
        mine = sum(r["total_s"] for r in rows if r["axis"] == axis)
        assert mine == pytest.approx(sum(t["total_s"] for t in pred["transfers"] if t["axis"] == axis), rel=1e-9)
    for r in rows:
        assert r["min_message_bytes"] <= r["max_message_bytes"]
        assert r["time_each_s"] * r["count_per_step"] == pytest.approx(r["total_s"], rel=1e-9)


def test_ledger_network_time_agrees_with_predict(both):
    """The ledger's modelled time on scale_up + scale_out is the predict transfer time on the network (each
    transfer split over the tiers it crosses); a tier that carries bytes is charged time; each level's share of
    the step is its time at bandwidth over predict's step time."""
    pred, ana = both
    levels = {r["level"]: r for r in ana["data_movement"]["levels"]}
    expect = sum(t["total_s"] for t in pred["transfers"] if t["tier"] in ("scale_up", "scale_out"))
    got = levels["scale_up"]["modelled_s"] + levels["scale_out"]["modelled_s"]
    assert got == pytest.approx(expect, rel=1e-9, abs=1e-15)
    for tier in ("scale_up", "scale_out"):
        if levels[tier]["bytes_per_step"] > 0:
            assert levels[tier]["modelled_s"] > 0
    for r in levels.values():
        if r["bw_bytes_per_s"]:
            assert r["time_at_bw_s"] == pytest.approx(r["bytes_per_step"] / r["bw_bytes_per_s"])
        assert r["share_of_step"] == pytest.approx(r["time_at_bw_s"] / pred["step_time_s"])
        useful = pred["model_flop_per_step"] / pred["num_gpus"]
        assert r["bytes_per_useful_flop"] == pytest.approx(r["bytes_per_step"] / useful)
    assert ana["data_movement"]["useful_flop_per_gpu"] == pytest.approx(useful)


def test_verdict_and_overlap_agree_with_predict(both):
    pred, ana = both
    step = pred["step_time_s"]
    v = ana["verdict"]
    comps = v["components_s"]
    assert sum(comps.values()) == pytest.approx(step, rel=1e-9)
    for k in ("exposed_tp_comm", "exposed_dp_comm", "exposed_pp_comm", "exposed_ep_comm", "bubble", "optimizer"):
        assert comps[k] == pytest.approx(pred["breakdown_s"][k])
    assert comps["host_wait"] == pytest.approx(pred["host_wait_s"])
    assert comps["matrix_compute"] + comps["hbm_bound_compute"] + comps["host_wait"] == \
        pytest.approx(pred["breakdown_s"]["compute"])
    assert v["share"] == pytest.approx(v["narrowest_s"] / step)
    assert ana["overlap"]["step_s"] == pytest.approx(step)
    for w in v["what_ifs"]:
        if w["step_s"] is not None:
            assert w["gain_s"] == pytest.approx(step - w["step_s"])
            assert w["gain_fraction"] == pytest.approx(w["gain_s"] / step)


def test_energy_agrees_with_predict_and_catalog(both):
    """Static energy = catalog idle power × GPUs × predict step; per token = total / tokens per step; the scaling
    sweep's base point reports the same energy as the energy account."""
    pred, ana = both
    dev = catalog_system(pred["system"]).device
    e = ana["energy"]
    step, n = pred["step_time_s"], pred["num_gpus"]
    assert e["static_j"] == pytest.approx(dev.idle_w * n * step)
    assert e["flop_j"] == pytest.approx(pred["hardware_flop_per_step"] * e["pj_per_flop"] * 1e-12)
    for level, j in e["bytes_j"].items():
        row = {r["level"]: r for r in ana["data_movement"]["levels"]}[level]
        assert j == pytest.approx(row["bytes_per_step"] * n * dev.energy_pj_per_byte.get(level, 0.0) * 1e-12)
    assert e["total_j"] == pytest.approx(e["flop_j"] + sum(e["bytes_j"].values()) + e["static_j"])
    assert e["per_token_j"] == pytest.approx(e["total_j"] / (pred["tokens_per_s"] * step))
    assert e["avg_power_per_gpu_w"] == pytest.approx(e["total_j"] / (n * step))
    base = [s for s in ana["scaling"] if s["num_gpus"] == n]
    assert base and all(s["energy_per_step_j"] == pytest.approx(e["total_j"], rel=1e-12) for s in base)
    assert all(s["step_s"] == pytest.approx(step, rel=1e-12) for s in base)
