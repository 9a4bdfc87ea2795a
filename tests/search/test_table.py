"""The plan table's unchecked plans (what a ranked list is built from) are the checked plans, field for field."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from narrowpath.catalog import load_scenario
from narrowpath.search import SearchSpace
from narrowpath.search.table import build_table, replace_unchecked
from narrowpath.spec import Plan
from narrowpath.errors import SpecError

from tests.search.scenarios import mixtral16


@pytest.mark.parametrize("scn", [load_scenario("gpt3-175b-a100-1024"), mixtral16()], ids=["gpt3", "mixtral16"])
@pytest.mark.parametrize("extent", ["basic", "full"])
def test_unchecked_plans_equal_checked(scn, extent):
    space = SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan, extent=extent)
    table = build_table(space)
    n = len(table)
    rng = np.random.default_rng(7)
    idx = rng.permutation(np.concatenate([rng.integers(0, n, size=300), [0, n - 1, 0]]))  # ranking order, repeats
    fast = table.plans_unchecked(idx)
    assert len(fast) == len(idx)
    for i, p in zip(idx.tolist(), fast):
        checked = table.plan(i)
        assert p == checked and hash(p) == hash(checked)
        for f in dataclasses.fields(Plan):
            assert type(getattr(p, f.name)) is type(getattr(checked, f.name)), f.name


def test_unchecked_plans_take_the_checked_types_of_pins_and_batch():
    """A pinned bucket given as an int and a global batch given as a float reach the plan as the checks make them
    (a float bucket, an int batch), checked or not."""
    scn = load_scenario("gpt3-175b-a100-1024")
    pins = {"tp": 8, "pp": 8, "zero_stage": 1, "cp": 1, "bucket_bytes": 25_000_000}
    table = build_table(SearchSpace(scn.model, scn.system, scn.num_gpus, float(scn.plan.gbs), scn.plan, pins,
                                    extent="full"))
    idx = np.arange(0, len(table), max(1, len(table) // 50))
    for i, p in zip(idx.tolist(), table.plans_unchecked(idx)):
        checked = table.plan(i)
        assert p == checked
        assert type(p.bucket_bytes) is type(checked.bucket_bytes) is float
        assert type(p.gbs) is type(checked.gbs) is int


def test_replace_unchecked_skips_only_the_checks():
    base = Plan(tp=2, pp=1, dp=4, mbs=1, gbs=8)
    assert replace_unchecked(base, {"tp": 4, "dp": 2}) == dataclasses.replace(base, tp=4, dp=2)
    assert replace_unchecked(base, {}) == base
    with pytest.raises(SpecError):
        dataclasses.replace(base, zero_stage=7)
    assert replace_unchecked(base, {"zero_stage": 7}).zero_stage == 7  # not checked: the table's rows were
