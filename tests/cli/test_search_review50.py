"""`narrowpath search` input handling found by the fiftieth session's review: a zero GPU count or batch taken as
"not given", MoE flags on a dense model kept with no effect, --recompute-modules from --model/--system refused
unless --recompute selective came too, and ties marked on a plan short of the --min-free-gb margin (and on the
best plan itself, in the JSON only)."""
from __future__ import annotations

import json

import pytest

from narrowpath.cli.main import main
from tests.cli.one_line import one_line_error


@pytest.mark.parametrize("argv,flag", [(["--gpus", "0", "--gbs", "0"], "--gbs"), (["--gbs", "0"], "--gbs"),
                                       (["--gpus", "0"], "--gpus"), (["--gpus", "-8"], "--gpus")])
def test_a_zero_gpu_count_or_batch_is_refused_as_predict_refuses_it(capsys, argv, flag):
    """`args.gpus or base.num_gpus` read 0 as "not given": `search llama3-8b-h100-8 --gpus 0 --gbs 0` searched 8
    GPUs and a batch of 64 and exited 0, where `predict` says "--gbs: must be >= 1, got 0" (the batch is checked
    first there too)."""
    value = argv[argv.index(flag) + 1]
    one_line_error(capsys, ["search", "llama3-8b-h100-8", "--top", "1", "--json", *argv],
                   f"{flag}: must be >= 1, got {value}")
    one_line_error(capsys, ["predict", "llama3-8b-h100-8", *argv], f"{flag}: must be >= 1, got {value}")


@pytest.mark.parametrize("argv,flag", [(["--etp", "1"], "--etp"), (["--ep-overlap"], "--ep-overlap"),
                                       (["--no-ep-overlap"], "--ep-overlap"),
                                       (["--ep-dispatch", "dedup"], "--ep-dispatch")])
def test_moe_flags_on_a_dense_model_are_refused(capsys, argv, flag):
    """Llama-3 8B has no routed experts: etp, the all-to-all overlap and the dispatch read nothing in its plans
    (every plan priced the same with them), yet the best plan carried `--etp 1` with no note; `--ep 2` on the same
    model was already one line. Refused as a scenario's pin and as the --model/--system plan."""
    one_line_error(capsys, ["search", "llama3-8b-h100-8", "--top", "1", "--json", *argv], flag,
                   "llama3-8b has no routed experts")
    one_line_error(capsys, ["search", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--gbs", "64",
                            "--top", "1", *argv], flag, "no routed experts")


def test_moe_flags_on_an_moe_model_still_pin(capsys):
    """The same flags on Mixtral pin the search as before (every shown plan carries them)."""
    assert main(["search", "--model", "mixtral-8x7b", "--system", "dgx-h200", "--gpus", "8", "--gbs", "1",
                 "--cp", "1", "--etp", "1", "--ep-dispatch", "all_to_all", "--top", "2", "--json",
                 "--jobs", "1"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best and all(b["plan"]["etp"] == 1 and b["plan"]["ep_dispatch"] == "all_to_all" for b in best)


def test_recompute_modules_alone_pins_selective_recompute_from_model_and_system(capsys):
    """docs/search.md: `--recompute-modules a,b` pins the strategy to selective recompute of exactly that set. From
    --model/--system the flags are the user's plan, which was built with recompute none and refused ("needs
    recompute: selective, got 'none'"); it now recomputes the named set selectively, as the search does, and with
    a scenario nothing changes. `--recompute none` beside it is still refused in one line."""
    base = ["search", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--gbs", "64", "--top", "1",
            "--json", "--space", "basic", "--tp", "1", "--pp", "1"]
    assert main([*base, "--recompute-modules", "mlp"]) == 0
    d = json.loads(capsys.readouterr().out)
    for c in (d["best"][0], d["baseline"]):
        assert c["plan"]["recompute"] == "selective" and c["plan"]["recompute_modules"] == ["mlp"]
    assert main(["search", "llama3-8b-h100-8", "--top", "1", "--json", "--space", "basic", "--tp", "1", "--pp", "1",
                 "--recompute-modules", "mlp"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["best"][0]["plan"]["recompute_modules"] == ["mlp"] and d["baseline"]["plan"]["recompute"] == "full"
    one_line_error(capsys, [*base, "--recompute-modules", "mlp", "--recompute", "none"], "--recompute-modules",
                   "needs --recompute selective")


def test_a_plan_short_of_the_free_margin_is_never_tied_nor_the_best_with_itself(capsys):
    """`--min-free-gb 60` on llama3-8b-h100-8: the scenario's plan fits the 85.9 GB (fits: true, capacity alone)
    but leaves under 60 GB free, so it is not ranked ("does not fit") - a tie with the best means nothing for a plan
    the ranking excludes, yet `shown_bands` checked capacity alone and the JSON said `tied_with_best: true`. The best
    plan's band overlaps itself: the console leaves it unmarked, the JSON said true; now false for both."""
    assert main(["search", "llama3-8b-h100-8", "--min-free-gb", "60", "--top", "3", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    b = d["baseline"]
    assert d["baseline_rank"] is None and b["capacity_bytes"] - b["memory_bytes"] < 60e9
    assert b["tied_with_best"] is False
    assert d["best"][0]["tied_with_best"] is False
    lo, hi = d["best"][0]["band"]["low_s"], d["best"][0]["band"]["high_s"]
    for c in d["best"][1:]:  # the others are marked exactly when their band overlaps the best's
        assert c["tied_with_best"] == (c["band"]["low_s"] <= hi and lo <= c["band"]["high_s"])
