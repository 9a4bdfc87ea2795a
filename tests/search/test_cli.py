"""`narrowpath search` end to end: table, JSON, pins, and one-line errors with exit code 2."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from narrowpath.cli.main import main

SMALL = ["--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--gbs", "32", "--cp", "1", "--vpp", "1"]


def test_table_lists_best_plans_and_the_own_plan(capsys):
    assert main(["search", *SMALL, "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "narrowpath search" in out and "priced in full" in out and "rank" in out
    body = [ln for ln in out.splitlines() if ln.strip()[:1].isdigit() and "plans" not in ln]
    assert len(body) == 3


def test_json_is_ranked_and_pinned(capsys):
    assert main(["search", *SMALL, "--tp", "2", "--top", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    best = data["best"]
    assert 1 <= len(best) <= 4 and all(b["plan"]["tp"] == 2 and b["plan"]["cp"] == 1 for b in best)
    times = [b["step_time_s"] for b in best]
    assert times == sorted(times) and all(b["fits"] for b in best)
    assert data["num_plans"] >= data["num_fit"] >= len(best)
    assert data["baseline"]["plan"]["tp"] == 2


def test_catalog_scenario_own_plan_ranked(capsys):
    assert main(["search", "gpt3-175b-a100-1024", "--tp", "8", "--pp", "8", "--recompute", "full", "--json",
                 "--top", "1", "--rank-limit", "0"]) == 0  # counted in full (over 10,000 plans are faster)
    data = json.loads(capsys.readouterr().out)
    assert data["baseline_rank"] >= 1 and data["baseline_rank_beyond"] is None
    assert data["best"][0]["step_time_s"] <= data["baseline"]["step_time_s"]


def test_pin_keeps_the_scenarios_gpu_count_and_own_plan(capsys):
    """`search llama3-8b-h100-8 --tp 4` searches 8 GPUs (the scenario's), not tp·pp·cp·dp of a rewritten plan
    (it searched 32), and 'yours' is the scenario's own tp = 1 plan, priced apart from the pinned space."""
    from narrowpath.catalog import load_scenario
    own = load_scenario("llama3-8b-h100-8").plan
    assert main(["search", "llama3-8b-h100-8", "--tp", "4", "--cp", "1", "--json", "--top", "3"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["num_gpus"] == 8 and data["pinned"] == {"tp": 4, "cp": 1}
    for b in data["best"]:
        p = b["plan"]
        assert p["tp"] == 4 and p["tp"] * p["pp"] * p["cp"] * p["dp"] == 8 and p["gbs"] == own.gbs
    assert data["baseline"]["plan"]["tp"] == own.tp and data["baseline"]["plan"]["dp"] == own.dp
    assert data["baseline_in_space"] is False


def test_json_is_complete(capsys):
    assert main(["search", *SMALL, "--top", "2", "--json", "--min-free-gb", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"gbs", "pinned", "min_free_bytes", "num_ranked", "baseline_in_space", "baseline_rank", "num_candidates",
            "num_priced", "seconds", "num_plans", "num_fit", "num_failed", "first_failure", "elapsed_s", "best",
            "baseline"} <= set(data)
    assert data["num_candidates"] == data["num_plans"] >= data["num_priced"] >= 1 and data["seconds"] > 0
    assert data["gbs"] == 32 and data["min_free_bytes"] == 1e9
    assert data["num_fit"] >= data["num_ranked"] >= len(data["best"])
    assert all(b["headroom_bytes"] >= 1e9 for b in data["best"])


def test_memory_objective_reports_memory_saved(capsys):
    assert main(["search", *SMALL, "--zero", "3", "--recompute", "full", "--objective", "memory", "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "by memory per rank: best" in out and " GB vs yours " in out


@pytest.mark.parametrize("argv,needle", [
    (["llama3-8b-h100-8", "--tp", "3"], "--tp: no consistent plan"),
    (["llama3-8b-h100-8", "--ep", "2"], "--ep: no consistent plan"),
    (["llama3-8b-h100-8", "--tp", "8", "--pp", "8"], "--tp 8, --pp 8"),
    (["--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8"], "--gbs"),
    ([*SMALL, "--top", "0"], "--top"),
    ([*SMALL, "--jobs", "0"], "--jobs"),
    ([*SMALL, "--min-free-gb", "-1"], "--min-free-gb"),
    ([*SMALL, "--max-plans", "2"], "more than 2 plans"),
    ([*SMALL, "--min-free-gb", "1000"], "none of the"),
    ([*SMALL, "--tp", "3"], "tp"),
])
def test_bad_input_one_line_exit_2(capsys, argv, needle):
    assert main(["search", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_subprocess_exit_code():
    r = subprocess.run([sys.executable, "-m", "narrowpath", "search", *SMALL, "--top", "0"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "--top" in r.stderr and "Traceback" not in r.stderr


def test_console_rows_merge_plans_that_differ_only_in_bucket_or_order_and_price_the_same(capsys):
    """Each console row is one priced design: the plans it merges (a rank range) are exactly the JSON's plans of
    those ranks, equal in every knob but bucket size and placement order and in every number; `top` rows shown."""
    from narrowpath.report.search_table import merged_rows
    from narrowpath.search import SearchSpace, search
    from narrowpath.catalog import load_scenario

    scn = load_scenario("gpt3-175b-a100-1024")
    space = SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan, {"tp": 8, "pp": 4, "mbs": 1})
    r = search(scn, space, top=40)
    rows = merged_rows(r.ranked, 5)
    assert len(rows) == 5 and rows[0][0] == 0 and any(len(m) > 1 for _, m in rows)
    seen = [c for _, m in rows for c in m]
    assert len({id(c) for c in seen}) == len(seen)
    for first, members in rows:
        assert r.ranked[first] is members[0]
        head = members[0]
        for c in members[1:]:
            assert (c.step_time_s, c.memory_bytes, c.energy_per_step_j) == \
                (head.step_time_s, head.memory_bytes, head.energy_per_step_j)
            assert c.plan != head.plan
            assert dataclasses.replace(c.plan, bucket_bytes=head.plan.bucket_bytes,
                                       placement=head.plan.placement) == head.plan
    # rows are distinct designs: no two rows could have been merged
    keys = [(m[0].step_time_s, m[0].memory_bytes,
             dataclasses.replace(m[0].plan, bucket_bytes=1, placement=rows[0][1][0].plan.placement)) for _, m in rows]
    assert len(set(keys)) == len(keys)
    assert main(["search", "gpt3-175b-a100-1024", "--tp", "8", "--pp", "4", "--mbs", "1", "--top", "5"]) == 0
    out = capsys.readouterr().out
    body = [ln for ln in out.splitlines() if ln.strip()[:1].isdigit() and "plans" not in ln]
    assert len(body) == 5 and body[0].split()[0] == f"1-{len(rows[0][1])}"
    assert "differ only in bucket size or placement order" in out


def test_selective_plans_show_their_modules():
    """The table marks a selective plan by the modules it recomputes (`sel[layernorm,moe_act]`; plain `selective`
    when it names none, Megatron-Core's core_attn), so two selective plans are told apart; the JSON lists them."""
    from narrowpath.report.search_table import _activations, format_search, search_to_json
    from narrowpath.search import SearchSpace, search
    from narrowpath.spec import Plan
    from tests.search.scenarios import TIGHT_PINS, mixtral16_tight
    assert _activations(Plan(recompute="selective", recompute_modules=("layernorm", "moe_act"))) == \
        "sel[layernorm,moe_act]"
    assert _activations(Plan(recompute="selective")) == "selective"
    assert _activations(Plan(recompute="selective", recompute_modules=("moe",))) == "sel[moe]"
    assert _activations(Plan(recompute="full", recompute_layers=4)) == "full:4"
    scn = mixtral16_tight()
    res = search(scn, SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan, TIGHT_PINS), top=40)
    out = format_search(res, 40)
    first = next(ln for ln in out.splitlines() if ln.lstrip().startswith("1 "))
    assert "sel[layernorm,moe_act]" in first
    best = search_to_json(res, 1)["best"][0]["plan"]
    assert (best["recompute"], best["recompute_modules"]) == ("selective", ["layernorm", "moe_act"])
