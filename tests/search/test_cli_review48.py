"""`narrowpath search` input handling found by the forty-eighth session's review: pins below their least value,
a --gbs / --gpus the scenario's plan cannot take, pinned layer counts taken as given, ties only where they mean
something."""
from __future__ import annotations

import dataclasses
import json

import pytest

from narrowpath.catalog import load_scenario
from narrowpath.cli.main import main
from narrowpath.schedule.step import predict


@pytest.mark.parametrize("flag", ["--tp", "--pp", "--cp", "--mbs", "--dp", "--vpp"])
def test_a_zero_pin_is_one_line_exit_2(capsys, flag):
    """`--tp 0` divided by zero (a traceback, exit 1) before any check looked at it."""
    assert main(["search", "llama3-8b-h100-8", "--space", "basic", flag, "0"]) == 2
    err = capsys.readouterr().err
    assert f"narrowpath: error: {flag}: must be >= 1, got 0" in err and err.count("\n") == 1


def test_a_batch_the_scenarios_plan_cannot_take_is_searched_all_the_same(capsys):
    """llama3-70b-h100-256's plan (dp 8) cannot take 100 sequences; the space (256 GPUs, 100 sequences, tp 8,
    pp 8) still has plans, as the same space built from --model/--system shows: searched, the plan not ranked."""
    argv = ["--gbs", "100", "--tp", "8", "--pp", "8", "--space", "basic", "--json", "--top", "1"]
    assert main(["search", "llama3-70b-h100-256", *argv]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["gbs"] == 100 and d["num_gpus"] == 256 and d["baseline"] is None
    assert d["best"][0]["plan"]["gbs"] == 100 and d["best"][0]["plan"]["dp"] in (1, 2, 4)
    assert main(["search", "--model", "llama3-70b", "--system", "dgx-h100", "--gpus", "256", *argv]) == 0
    assert json.loads(capsys.readouterr().out)["num_plans"] > 0


def test_a_pinned_recompute_layer_count_is_taken_as_given(capsys):
    """3 layers of a 20-layer chunk is none of the tried shares (5, 10, 15): the pin once filtered every plan out
    ("no consistent plan") though predict takes it; the best plan is priced as predict prices it."""
    assert main(["search", "llama3-70b-h100-256", "--space", "basic", "--tp", "8", "--pp", "4", "--vpp", "1",
                 "--recompute-layers", "3", "--json", "--top", "1"]) == 0
    best = json.loads(capsys.readouterr().out)["best"][0]
    assert best["plan"]["recompute"] == "full" and best["plan"]["recompute_layers"] == 3
    scn = load_scenario("llama3-70b-h100-256")
    plan = dataclasses.replace(scn.plan, **{k: best["plan"][k] for k in ("tp", "pp", "vpp", "cp", "dp", "mbs",
                                                                         "zero_stage", "recompute",
                                                                         "recompute_layers")},
                               recompute_modules=())
    assert best["step_time_s"] == pytest.approx(predict(dataclasses.replace(scn, plan=plan)).step_time_s, rel=1e-9)


def test_ties_are_marked_in_a_ranking_by_time_only(capsys):
    """The bands are of step time: ranked by memory, the plans are not 'tied' on the metric ranked."""
    assert main(["search", "llama3-8b-h100-8", "--space", "basic", "--objective", "memory", "--json",
                 "--top", "5"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["best"] and not any(b["tied_with_best"] for b in d["best"])
    assert all("band" in b for b in d["best"])


def test_a_plan_that_does_not_fit_is_never_tied(capsys):
    """Your plan at 189 GB of 86 (llama3-8b on 8 GPUs, 16 sequences, no recompute, ZeRO 0) read '=' beside the best."""
    assert main(["search", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--gbs", "16",
                 "--recompute", "none", "--zero", "0", "--space", "basic", "--json", "--top", "3"]) == 0
    d = json.loads(capsys.readouterr().out)
    base = d["baseline"]
    assert base is not None and not base["fits"] and not base["tied_with_best"]


def test_the_dualpipe_summaries_count_fitting_with_min_free_gb(capsys):
    """The DualPipe scenario's own plan takes 81.8 GB of 85.9: it fits, but with --min-free-gb 10 it is not a plan
    the search would count, and the summary says so rather than calling it fitting (it judged capacity alone)."""
    argv = ["search", "deepseek-v3-h800-2048", "--space", "basic", "--top", "2", "--min-free-gb", "10"]
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    own = d["yours_dualpipe"]
    assert own["memory_bytes"] < 85.9e9 and own["fits"] is False
    if d["best_rebalanced"] is not None and d["best_rebalanced"]["fits"]:
        assert d["best_rebalanced"]["step_time_s"] > 0
    assert main(argv) == 0
    assert "(leaves under 10 GB free)" in capsys.readouterr().out
