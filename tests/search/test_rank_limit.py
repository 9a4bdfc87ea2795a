"""The base plan's rank counted up to a limit (search's `rank_limit`, `--rank-limit`): past it the search only looks
for the best plans, which must be the same plans, and says the base plan ranks beyond that place."""
from __future__ import annotations

import json

import pytest

from narrowpath.cli.main import main
from narrowpath.errors import NarrowpathError
from narrowpath.search import SearchSpace, search


@pytest.fixture(scope="module")
def exact(gpt175_a100):
    """GPT-3 175B on 1,024 A100, basic space, every plan faster than the base plan counted (its rank: 1,409 on the
    day this was written; the tests below read it rather than pin it)."""
    scn = gpt175_a100
    space = SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan, {}, "basic")
    res = search(scn, space, top=10, rank_limit=None)
    assert res.baseline_rank is not None and res.baseline_rank > 200 and res.baseline_rank_beyond is None
    return scn, space, res


def test_limit_at_the_rank_counts_exactly(exact):
    scn, space, res = exact
    at = search(scn, space, top=10, rank_limit=res.baseline_rank)  # rank - 1 faster plans: under the limit
    assert (at.baseline_rank, at.baseline_rank_beyond, at.baseline_ties) == (res.baseline_rank, None,
                                                                            res.baseline_ties)


def test_limit_below_the_rank_says_beyond(exact):
    scn, space, res = exact
    under = search(scn, space, top=10, rank_limit=res.baseline_rank - 1)  # exactly rank - 1 faster: at the limit
    assert (under.baseline_rank, under.baseline_rank_beyond, under.baseline_ties) == (None, res.baseline_rank - 1, 0)


def test_a_small_limit_finds_the_same_best_plans_with_less_work(exact):
    scn, space, res = exact
    few = search(scn, space, top=10, rank_limit=50)
    assert few.baseline_rank is None and few.baseline_rank_beyond == 50
    assert [(c.plan, c.step_time_s, c.memory_bytes) for c in few.ranked[:10]] == \
        [(c.plan, c.step_time_s, c.memory_bytes) for c in res.ranked[:10]]
    assert few.num_priced < res.num_priced  # the plans between the 10th and the base plan were not all priced
    assert (few.num_plans, few.num_fit, few.num_ranked) == (res.num_plans, res.num_fit, res.num_ranked)
    # the head lists only the best plans when the base plan was not reached (not every plan down to it)
    assert len(few.ranked) < res.baseline_rank


def test_memory_ranking_stays_exact(exact):
    """Memory per plan is exact in bulk for free: its rank is always counted."""
    scn, space, _ = exact
    a = search(scn, space, objective="memory", top=3, rank_limit=None)
    b = search(scn, space, objective="memory", top=3, rank_limit=1)
    assert (a.baseline_rank, b.baseline_rank, b.baseline_rank_beyond) == (a.baseline_rank, a.baseline_rank, None)


def test_rank_limit_must_be_positive(exact):
    scn, space, _ = exact
    with pytest.raises(NarrowpathError, match="rank_limit"):
        search(scn, space, rank_limit=0)


def test_cli_rank_limit(capsys, exact):
    _, _, res = exact
    args = ["search", "gpt3-175b-a100-1024", "--space", "basic", "--top", "3"]
    assert main([*args, "--rank-limit", "100", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["baseline_rank"] is None and data["baseline_rank_beyond"] == 100
    assert main([*args, "--rank-limit", "100"]) == 0
    out = capsys.readouterr().out
    assert "ranks below the first 100 (at least 100 distinct plans are faster; --rank-limit 0 counts them all)" in out
    assert main([*args, "--rank-limit", "1"]) == 0
    assert "ranks below the first 1 (at least 1 distinct plan is faster;" in capsys.readouterr().out
    assert "yours (>100)" in out
    assert main([*args, "--rank-limit", "0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["baseline_rank"] == res.baseline_rank and data["baseline_rank_beyond"] is None


def test_cli_negative_rank_limit_is_one_line(capsys):
    assert main(["search", "gpt3-175b-a100-1024", "--space", "basic", "--rank-limit", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rank-limit" in err[0]
