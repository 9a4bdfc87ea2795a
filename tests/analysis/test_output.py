"""Output: JSON key set is stable, plots are written and non-empty, the timeline is valid Chrome-trace JSON."""
from __future__ import annotations

import json

import pytest

from narrowpath.cli.main import main
from narrowpath.report.analysis_json import ANALYSIS_KEYS, analysis_to_json
from narrowpath.report.plots import PLOTS, write_plots
from narrowpath.report.timeline import write_timeline

EXPECTED_KEYS = {"prediction", "data_movement", "collectives", "overlap", "topology", "scaling", "distance",
                 "communication", "synchronisation", "verdict", "energy"}


def test_json_key_set_is_stable(capsys):
    assert main(["analyze", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == EXPECTED_KEYS
    assert set(ANALYSIS_KEYS) | {"prediction"} == EXPECTED_KEYS
    assert set(doc["data_movement"]) == {"useful_flop_convention", "useful_flop_per_gpu", "levels"}
    assert set(doc["verdict"]) >= {"narrowest", "share", "sentence", "what_ifs"}
    assert set(doc["energy"]) >= {"total_j", "per_token_j", "flop_j", "bytes_j", "static_j"}
    assert doc["prediction"]["step_time_s"] > 0


def test_json_is_finite(any_analysis):
    """No NaN/Infinity literals: strict JSON."""
    json.dumps(analysis_to_json(any_analysis), allow_nan=False)


def test_plots_written_and_non_empty(default_analysis, tmp_path):
    paths = write_plots(default_analysis, str(tmp_path))
    assert {p.stem for p in paths} == set(PLOTS)
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_recurrent_model_adds_the_persistence_plot(lstm_analysis, tmp_path):
    paths = write_plots(lstm_analysis, str(tmp_path))
    assert {p.stem for p in paths} == set(PLOTS) | {"persistence"}
    assert all(p.stat().st_size > 10_000 for p in paths)


def test_timeline_is_valid_chrome_trace(default_analysis, tmp_path):
    path = write_timeline(default_analysis, str(tmp_path / "step.json"))
    doc = json.loads(path.read_text())
    ev = doc["traceEvents"]
    complete = [e for e in ev if e["ph"] == "X"]
    assert complete
    for e in complete:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(e)
        assert e["dur"] >= 0 and e["ts"] >= 0
    end_s = max(e["ts"] + e["dur"] for e in complete) / 1e6
    assert end_s == pytest.approx(default_analysis.prediction.step_time_s, rel=1e-6)
    # the compute and exposed-communication tracks never overlap in time: they are the critical path
    crit = sorted((e for e in complete if e["tid"] in (1, 2, 4)), key=lambda e: e["ts"])
    for a, b in zip(crit, crit[1:]):
        assert b["ts"] >= a["ts"] + a["dur"] - 1e-3


def test_cli_text_and_bad_option(capsys):
    assert main(["analyze", "gnmt-lstm-a100-8"]) == 0
    out = capsys.readouterr().out
    for title in ("DATA-MOVEMENT LEDGER", "COLLECTIVE INVENTORY", "OVERLAP", "TOPOLOGY FIT", "SCALING",
                  "DISTANCE BUDGET", "COMMUNICATION BUDGET", "SYNCHRONISATION BUDGET", "VERDICT", "ENERGY"):
        assert title in out
    assert out.index("DATA-MOVEMENT") < out.index("DISTANCE BUDGET") < out.index("VERDICT") < out.index("ENERGY")
    assert main(["analyze", "--compression", "0.5"]) == 2
