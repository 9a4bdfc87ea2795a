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


GOLDEN = __import__("pathlib").Path(__file__).parent / "golden" / "analysis_json_paths.json"


def _paths(o, p=""):
    if isinstance(o, dict):
        return set().union(*(_paths(v, f"{p}.{k}" if p else k) for k, v in o.items())) if o else {p}
    if isinstance(o, list):
        return set().union(*(_paths(v, p + "[]") for v in o)) if o else {p + "[]"}
    return {p}


def test_json_schema_is_stable(default_analysis):
    """Every leaf path of the default scenario's analysis JSON is the pinned one (tests/analysis/golden): a renamed,
    dropped or added field fails here. Regenerate the golden file only for an intended schema change."""
    got = _paths(analysis_to_json(default_analysis))
    want = set(json.loads(GOLDEN.read_text()))
    assert got - {p for p in got if p.startswith("distance.persistence")} == \
        want - {p for p in want if p.startswith("distance.persistence")}, (sorted(got - want), sorted(want - got))


def test_dimensionless_fields_are_fractions(any_analysis):
    """Fields without a unit suffix that are ratios (share, efficiency, utilisation, goodput) are fractions, not %."""
    doc = analysis_to_json(any_analysis)
    assert 0 <= doc["verdict"]["share"] <= 1
    assert 0 <= doc["synchronisation"]["goodput"] <= 1
    for r in doc["data_movement"]["levels"]:
        assert r["share_of_step"] >= 0
    for s in doc["scaling"]:
        if s["step_s"] is None:  # a size with no valid plan is listed with the reason
            assert s["note"].startswith("no valid plan") and s["efficiency"] is None
            continue
        assert 0 < s["efficiency"] < 2 and 0 <= s["communication_share"] <= 1
    for t in doc["topology"]["tiers"]:
        assert 0 <= t["utilisation"] <= 1 and 0 <= t["busy_fraction"] <= 1


@pytest.mark.parametrize("name", ["gnmt-lstm-a100-8", "gpt3-175b-a100-1024"])
def test_timeline_structure_and_totals(name, tmp_path):
    """Chrome trace: every 'X' event has a string name, numeric ts/dur in µs, integer pid/tid on a named thread;
    the compute track adds up to the breakdown's compute + optimizer, the exposed-communication track to the
    exposed communication, and the bubble to the bubble."""
    from narrowpath.analysis import analyze
    from narrowpath.catalog import load_scenario
    a = analyze(load_scenario(name), None)
    doc = json.loads(write_timeline(a, str(tmp_path / "t.json")).read_text())
    assert set(doc) >= {"traceEvents", "displayTimeUnit"}
    ev = doc["traceEvents"]
    threads = {e["tid"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert any(e["ph"] == "M" and e["name"] == "process_name" for e in ev)
    xs = [e for e in ev if e["ph"] == "X"]
    for e in xs:
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int) and e["tid"] in threads
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0
    p = a.prediction
    b = p.breakdown_s
    track = lambda tid: sum(e["dur"] for e in xs if e["tid"] == tid) / 1e6  # noqa: E731
    assert track(1) == pytest.approx(b["compute"] + b["optimizer"], rel=1e-6)
    assert track(2) == pytest.approx(sum(v for k, v in b.items() if k.startswith("exposed_")), rel=1e-6, abs=1e-9)
    assert track(4) == pytest.approx(b["bubble"], abs=1e-9)
    assert max(e["ts"] + e["dur"] for e in xs) / 1e6 == pytest.approx(p.step_time_s, rel=1e-6)


@pytest.mark.parametrize("argv", [["--plots", "/etc/hostname"], ["--timeline", "/"],
                                  ["--timeline", "/proc/no/such/t.json"], ["no-such-scenario.yaml"],
                                  ["--model", "no-such-model", "--system", "dgx-h100"]])
def test_bad_paths_give_one_line_and_exit_2(argv, capsys):
    assert main(["analyze", "--no-what-ifs", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("narrowpath: error:") and "\n" not in err and "Traceback" not in err


def test_console_shows_the_simulated_synchronisation_beside_the_closed_form(default_analysis):
    """The simulator's wait, p99 and slow-node step are printed with the numbers the budget carries."""
    from narrowpath.report.analysis_console import format_analysis

    sim = default_analysis.synchronisation.simulated
    assert sim is not None and sim.steps > 0
    out = format_analysis(default_analysis)
    line = next(x for x in out.splitlines() if x.strip().startswith("simulated ("))
    assert f"{sim.jitter_wait_s * 1e3:,.1f} ms per step" in line
    assert f"p99 {sim.jitter_wait_p99_s * 1e3:,.1f} ms" in line
    assert f"step {sim.slow_node_step_s:.4g} s" in line
    assert "goodput (failures and jitter, simulated)" in out
