"""Shared fixtures: catalog scenarios and a small builder for custom ones."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario, model, system
from narrowpath.spec import Plan, Scenario


@pytest.fixture(scope="session")
def gpt175_a100() -> Scenario:
    return load_scenario("gpt3-175b-a100-1024")


def make_scenario(model_id: str = "gpt-1.7b", system_id: str = "dgx-a100", **plan_kw) -> Scenario:
    plan = Plan(**plan_kw)
    return Scenario(name="t", system=system(model_id and system_id), model=model(model_id), plan=plan,
                    num_gpus=plan.num_gpus)


@pytest.fixture
def build():
    return make_scenario


def replace_plan(scn: Scenario, **kw) -> Scenario:
    plan = dataclasses.replace(scn.plan, **kw)
    return dataclasses.replace(scn, plan=plan, num_gpus=plan.num_gpus)
