"""Verdict what-ifs: each gain is recomputed independently by predicting the changed scenario by hand."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.schedule.step import predict


def _by_change(a):
    return {w.change: w for w in a.verdict.what_ifs}


def test_tp_comm_overlap_gain_recomputed(default_analysis):
    a = default_analysis
    scn = a.prediction.scenario
    w = _by_change(a)["tp_comm_overlap"]
    changed = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, tp_comm_overlap=True))
    step = predict(changed).step_time_s
    assert w.step_s == pytest.approx(step)
    assert w.gain_s == pytest.approx(a.prediction.step_time_s - step)


def test_raise_mbs_gain_recomputed(default_analysis):
    a = default_analysis
    scn = a.prediction.scenario
    w = _by_change(a)["raise_mbs"]
    changed = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, mbs=2 * scn.plan.mbs))
    assert w.gain_s == pytest.approx(a.prediction.step_time_s - predict(changed).step_time_s)


def test_ranked_by_gain_and_infeasible_skipped(any_analysis):
    wis = any_analysis.verdict.what_ifs
    ok = [w for w in wis if not w.skipped]
    assert [w.gain_s for w in ok] == sorted((w.gain_s for w in ok), reverse=True)
    seen_skipped = False
    for w in wis:
        seen_skipped |= bool(w.skipped)
        assert not (seen_skipped and not w.skipped), "skipped changes come after every ranked one"
        if w.step_s is not None and not w.fits:
            assert w.skipped.startswith("does not fit")


def test_skipped_when_it_does_not_fit():
    """gpt3-175b without recompute needs more than 80 GB per rank: evaluated, but not ranked."""
    from narrowpath.analysis import analyze
    from narrowpath.catalog import load_scenario
    a = analyze(load_scenario("gpt3-175b-a100-1024"))
    w = {w.change: w for w in a.verdict.what_ifs}["recompute_none"]
    assert not w.fits and w.skipped.startswith("does not fit")
    assert predict(w.scenario).memory.fits is False
