"""Scenarios the search tests price both in bulk and one plan at a time."""
from __future__ import annotations

import dataclasses

from narrowpath.catalog import load_scenario, model, system
from narrowpath.spec import Plan, Scenario


def mixtral16() -> Scenario:
    plan = Plan(tp=2, pp=1, dp=8, ep=8, mbs=1, gbs=32, zero_stage=1, sequence_parallel=True)
    return Scenario(name="mixtral16", system=system("dgx-h100"), model=model("mixtral-8x7b"), plan=plan, num_gpus=16)


def llama3_8b_fp8() -> Scenario:
    scn = load_scenario("llama3-8b-h100-8")
    return dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, precision="fp8"))
