"""Fixtures: analyses of catalog scenarios and of flag-built edge cases (MoE, one GPU), computed once per session."""
from __future__ import annotations

import pytest

from narrowpath.analysis import analyze
from narrowpath.analysis.whatif import with_plan
from narrowpath.catalog import DEFAULT_SCENARIO, load_scenario
from narrowpath.cli.common import add_scenario_args, scenario_from_args


def scenario_from_flags(argv: list[str]):
    """The scenario the CLI builds from `argv` (e.g. ['--model', 'mixtral-8x7b', '--system', 'dgx-h100', ...])."""
    import argparse
    p = argparse.ArgumentParser()
    add_scenario_args(p)
    return scenario_from_args(p.parse_args(argv))


MIXTRAL = ["--model", "mixtral-8x7b", "--system", "dgx-h100", "--gpus", "64", "--tp", "2", "--ep", "8", "--gbs", "256"]
DEEPSEEK = ["--model", "deepseek-v3", "--system", "dgx-h100", "--gpus", "256", "--tp", "1", "--ep", "8", "--pp", "8",
            "--gbs", "1024"]
ONE_GPU = ["--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "1"]
EDGE_CASES = {"mixtral-flags": MIXTRAL, "deepseek-flags": DEEPSEEK, "one-gpu": ONE_GPU}


def load_any(name: str):
    return scenario_from_flags(EDGE_CASES[name]) if name in EDGE_CASES else load_scenario(name)


@pytest.fixture(scope="session")
def default_analysis():
    return analyze(load_scenario(DEFAULT_SCENARIO))


@pytest.fixture(scope="session")
def lstm_analysis():
    return analyze(load_scenario("gnmt-lstm-a100-8"))


@pytest.fixture(scope="session")
def tp_across_nodes_analysis():
    """The default scenario with DP placed first: every TP group of 8 spans 8 scale-up domains."""
    scn = load_scenario(DEFAULT_SCENARIO)
    return analyze(with_plan(scn, placement=("dp", "tp", "cp", "ep", "pp")))


@pytest.fixture(scope="session", params=["llama3-70b-h100-256", "gpt3-175b-a100-1024", "llama3-8b-h100-8",
                                         "gnmt-lstm-a100-8", "mixtral-flags", "deepseek-flags", "one-gpu"])
def any_analysis(request):
    return analyze(load_any(request.param))
