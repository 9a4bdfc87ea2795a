"""`narrowpath trace`: tables, --json, --plots, --timeline and --against on a real trace."""
from __future__ import annotations

import json

import pytest

from narrowpath.cli.main import main


def test_json_has_ranks_with_breakdown_and_overlap(ddp_path, capsys):
    assert main(["trace", str(ddp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    r = out["ranks"][0]
    assert r["rank"] == 0
    assert set(r["breakdown_pct"]) >= {"compute", "exposed_comm", "memcpy", "idle"}
    assert abs(r["overlap_pct"] - 14.31) <= 1.0  # HTA 0.5.0 on this file
    for key in ("steps", "kernels", "collectives", "idle_causes_s", "critical_path"):
        assert r[key]


def test_tables(ddp_path, capsys):
    assert main(["trace", str(ddp_path)]) == 0
    text = capsys.readouterr().out
    assert "Temporal breakdown" in text and "all_reduce" in text and "critical path of step" in text


def test_plots_and_timeline(ddp_path, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    tl = tmp_path / "tl.json"
    assert main(["trace", str(ddp_path), "--plots", str(tmp_path / "p"), "--timeline", str(tl)]) == 0
    for name in ("trace_breakdown.png", "trace_busbw.png", "trace_stragglers.png"):
        data = (tmp_path / "p" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    events = json.loads(tl.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") in ("computation", "communication", "memory", "other")]
    assert len(kernels) == 3774
    ar = [e for e in kernels if e["args"].get("collective") == "all_reduce"]
    assert len(ar) == 15 and all(e["args"]["busbw_GB_per_s"] > 0 for e in ar)


def _a_catalog_scenario() -> str:
    pytest.importorskip("narrowpath.schedule.step")
    from narrowpath.catalog import scenario_ids
    ids = scenario_ids()
    return "llama3-8b-h100-8" if "llama3-8b-h100-8" in ids else ids[0]


def test_against_a_catalog_scenario_names_differences(ddp_path, capsys):
    assert main(["trace", str(ddp_path), "--against", _a_catalog_scenario()]) == 0
    text = capsys.readouterr().out
    assert "Observed vs predicted" in text and "Differences that matter:" in text
    assert "idle (predicted: pipeline bubble): observed 77." in text


def test_against_json(ddp_path, capsys):
    assert main(["trace", str(ddp_path), "--against", _a_catalog_scenario(), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    against = out["against"]
    assert against["predicted_step_s"] > 0 and against["differences"]
    assert set(against["predicted_pct"]) == {"compute", "exposed_comm", "memcpy", "idle"}


def test_unknown_step_and_scenario_are_one_line_errors(ddp_path, capsys):
    assert main(["trace", str(ddp_path), "--step", "99"]) == 2
    assert "ProfilerStep#99" in capsys.readouterr().err
    assert main(["trace", str(ddp_path), "--against", "no-such-scenario"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
