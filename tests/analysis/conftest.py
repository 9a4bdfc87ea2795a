"""Fixtures: analyses of catalog scenarios, computed once per session."""
from __future__ import annotations

import pytest

from narrowpath.analysis import analyze
from narrowpath.catalog import DEFAULT_SCENARIO, load_scenario


@pytest.fixture(scope="session")
def default_analysis():
    return analyze(load_scenario(DEFAULT_SCENARIO))


@pytest.fixture(scope="session")
def lstm_analysis():
    return analyze(load_scenario("gnmt-lstm-a100-8"))


@pytest.fixture(scope="session", params=["llama3-70b-h100-256", "gpt3-175b-a100-1024", "llama3-8b-h100-8",
                                         "gnmt-lstm-a100-8"])
def any_analysis(request):
    return analyze(load_scenario(request.param))
