"""`search --recompute-modules a,b` pins the activation strategy to selective recompute of exactly that module set
(the module sets are otherwise searched for MoE/MLA models, docs/search.md); refused, in one line, with another
recompute mode pinned or with a module name Megatron-Core does not have."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from narrowpath.catalog import load_scenario
from narrowpath.errors import SpecError
from narrowpath.search import SearchSpace, candidate_plans


def _space(scn, **pins):
    return SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan, pins, "basic")


def test_every_plan_recomputes_the_pinned_modules():
    scn = load_scenario("deepseek-v3-h800-2048")
    plans = list(candidate_plans(_space(scn, recompute_modules=("moe_act", "layernorm"), tp=1, pp=16)))
    assert plans
    assert all(p.recompute == "selective" and p.recompute_modules == ("moe_act", "layernorm") for p in plans)


def test_a_dense_model_can_pin_the_mlp_set_the_space_does_not_offer():
    scn = load_scenario("llama3-8b-h100-8")
    plans = list(candidate_plans(_space(scn, recompute_modules=("mlp",), tp=1)))
    assert plans and all(p.recompute_modules == ("mlp",) for p in plans)


def test_other_recompute_pins_leave_nothing():
    scn = load_scenario("llama3-8b-h100-8")
    assert not list(candidate_plans(_space(scn, recompute_modules=("mlp",), recompute="full")))


def test_unknown_module_is_refused():
    scn = load_scenario("llama3-8b-h100-8")
    with pytest.raises(SpecError, match="search.recompute_modules"):
        _space(scn, recompute_modules=("attention",))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "narrowpath", "search", *args], capture_output=True, text=True)


def test_cli_pins_and_refuses_in_one_line():
    out = _cli("llama3-8b-h100-8", "--space", "basic", "--recompute-modules", "layernorm,mlp", "--json")
    assert out.returncode == 0, out.stderr
    best = json.loads(out.stdout)["best"]
    assert best and all(b["plan"]["recompute_modules"] == ["layernorm", "mlp"] for b in best)
    for flags in (("--recompute", "full", "--recompute-modules", "mlp"), ("--recompute-modules", "bogus")):
        bad = _cli("llama3-8b-h100-8", "--space", "basic", *flags)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--recompute-modules" in bad.stderr
