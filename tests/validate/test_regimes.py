"""CI holds every shipped corpus to its accuracy bounds by regime, its ranking of plans and its error bands, so a
physics regression fails the build. The bounds are today's figures plus a small margin (stated per bound); they
are regression guards, the issue's targets are in docs/validation.md and the closing notes."""
from __future__ import annotations

import pytest

from narrowpath.validate.regenerate import loso_coverage, main as regenerate, residual_records, with_out_of_fold
from narrowpath.validate.run import run_validation


@pytest.fixture(scope="module")
def report():
    return run_validation(None)


def test_every_case_of_every_shipped_corpus_is_read(report):
    by_corpus = {}
    for c in report.cases:
        by_corpus.setdefault(c.corpus, []).append(c)
    assert {k: len(v) for k, v in by_corpus.items()} == {"training-public.yaml": 18,
                                                        "training-sweeps-public.yaml": 225,
                                                        "published-extra.yaml": 33}
    failed = [c for c in report.cases if c.error is None]
    # one published plan is inconsistent as published (ep 64 on a stage of 32 ranks); it says so in one line
    assert [c.id for c in failed] == ["mb25-09-deepseek-v3-gb200-n256-gbs2048-mxfp8-tp1pp8cp1ep64vp2mbs1"]
    assert "does not divide tp·cp·dp" in failed[0].failure and "\n" not in failed[0].failure


BOUNDS = {  # (kind, group): ceiling on the mean |error| (today's value + ~2 pp)
    ("hardware", "ampere"): 0.065, ("hardware", "hopper"): 0.14, ("hardware", "blackwell"): 0.14,
    ("hardware", "blackwell-ultra"): 0.14,
    ("precision", "fp16"): 0.06, ("precision", "bf16"): 0.25, ("precision", "fp8"): 0.115,
    ("precision", "mxfp8"): 0.13, ("precision", "nvfp4"): 0.085,
    ("family", "DP"): 0.07, ("family", "FSDP/ZeRO-3"): 0.095, ("family", "CP"): 0.095, ("family", "PTD-P"): 0.115,
    ("family", "MoE/EP"): 0.19,
    # the held-out torchtitan runs (PyTorch FSDP2, FlashAttention-2, op-level selective checkpointing, Grand Teton
    # H100 at 500 W): 9.6 % today
    ("source", "pytorch/torchtitan"): 0.115,
}


def test_error_by_regime_stays_within_bounds(report):
    groups = {(g.kind, g.name): g for g in report.groups()}
    over = {k: round(groups[k].mean_abs_error, 4) for k, bound in BOUNDS.items() if groups[k].mean_abs_error > bound}
    assert not over, over
    assert report.mean_abs_error <= 0.125


def test_ranking_of_plans(report):
    """Issue-10 targets: pairwise order agreement >= 85 %, mean top-1 regret <= 3 %."""
    r = report.ranking
    assert r.pairs >= 50
    assert r.order_agreement >= 0.85
    assert r.top1_regret_mean <= 0.03


def test_error_bands_are_honest_out_of_source():
    """Leave one source out — the fit too, as issue 10 asks ("fit on all sources but one, predict that one"): each
    case's out-of-fold residual (the device profiles refitted without its source, benchmarks/loso_refit.py) falls
    inside the 80 % band built from the other sources' out-of-fold residuals for 70–90 % of cases. (With the
    neighbours held out but not the fit it read 80.4 %; with the fit held out too and in-sample bands, 69.5 %.)"""
    records, stale = with_out_of_fold(residual_records())
    assert not stale, f"{len(stale)} out-of-fold residuals are stale: run python benchmarks/loso_refit.py --write"
    cov = loso_coverage(records)
    hit, n = sum(h for h, _ in cov.values()), sum(m for _, m in cov.values())
    assert 0.70 <= hit / n <= 0.90, cov


def test_shipped_residuals_and_validation_doc_are_current():
    """docs/validation.md, docs/serving-validation.md and catalog/residuals.json are what `python -m
    narrowpath.validate.regenerate` writes."""
    assert regenerate(["--check"]) == 0


def test_the_corpus_error_floor_bounds_our_own_error(report):
    """Cases with the same resolved configuration get the same prediction (they are grouped by what a prediction
    depends on), so our errors can be no better than the corpus's own floor: a bound the code computes, checked
    against the model it bounds. Today 52 configurations are measured more than once and the worst floor is the
    Qwen3-30B H100 pair (29.26 s vs 51.27 s in two containers): (51.27 − 29.26) / (51.27 + 29.26) = 27.3 %."""
    q = report.repeatability
    by_key = {}
    for c in report.ok_cases:
        by_key.setdefault(c.config_key, set()).add(c.predicted_step_time_s)
    assert all(len(p) == 1 for p in by_key.values())
    assert q.groups >= 40 and q.total == len(report.ok_cases)
    assert report.mean_abs_error >= q.floor_mean_abs_error and report.max_abs_error >= q.floor_max_abs_error
    assert q.floor_max_abs_error > 0.15  # the worst-case target is out of reach on this corpus
