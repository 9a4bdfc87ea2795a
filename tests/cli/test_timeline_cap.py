"""`analyze --timeline` of a step with hundreds of millions of micro-batches: the timeline draws the first ones one
by one and the rest as one aggregated block, says so (stderr and `otherData.aggregated`), stays small, and every
track still adds up to the prediction's totals."""
from __future__ import annotations

import dataclasses
import json

import pytest

from narrowpath.analysis import AnalysisOptions, analyze_prediction
from narrowpath.catalog import load_scenario
from narrowpath.cli.main import main
from narrowpath.report.timeline import MAX_EVENTS, shown_microbatches, timeline_document
from narrowpath.schedule.step import predict


def _analysis(gbs: int):
    s = load_scenario("gpt3-175b-a100-1024")
    s = dataclasses.replace(s, plan=dataclasses.replace(s.plan, gbs=gbs))
    return analyze_prediction(predict(s), AnalysisOptions(what_ifs=False))


def test_shown_microbatches():
    assert shown_microbatches(10, 30) == 10
    assert shown_microbatches(10**9, 30, max_events=3000) == 100
    assert shown_microbatches(10**9, 10**6, max_events=3000) == 1  # at least one drawn one by one


@pytest.mark.parametrize("max_events", [MAX_EVENTS, 200])
def test_aggregated_timeline_keeps_the_totals(max_events):
    a = _analysis(1536 * 4)
    full, capped = timeline_document(a, max_events=10**9), timeline_document(a, max_events=max_events)
    m = a.prediction.workload.num_microbatches
    agg = capped["otherData"].get("aggregated")
    if max_events == 200:
        assert agg is not None and agg["count"] < m and len(capped["traceEvents"]) < len(full["traceEvents"])
    for tid in (1, 2, 3, 4):
        total = lambda doc: sum(e["dur"] for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == tid)  # noqa
        assert total(capped) == pytest.approx(total(full), rel=1e-9, abs=1e-6)
    end = max(e["ts"] + e["dur"] for e in capped["traceEvents"] if e["ph"] == "X") / 1e6
    assert end == pytest.approx(a.prediction.step_time_s, rel=1e-9)


def test_cli_timeline_of_800_million_microbatches(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["analyze", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--tp", "4", "--pp", "2",
                 "--gbs", "800000000", "--no-what-ifs", "--timeline", str(out)]) == 0
    err = capsys.readouterr().err
    assert "wrote timeline" in err and "drawn as one aggregated block" in err and "799,999,999" in err
    assert out.stat().st_size < 20_000_000
    doc = json.loads(out.read_text())
    assert doc["otherData"]["aggregated"]["count"] > 799_000_000
