"""The corpus readers take any value a file may hold for a field and answer with a priced case or a one-line reason
naming the field — never a Python error (the corpora are a contract other published runs are read by). A seeded,
bounded fuzz: shipped cases with one to three fields replaced by nulls, zeros, floats, booleans, strings, lists,
mappings and odd GPU names; the readers and the chooser of unpublished knobs run on each."""
from __future__ import annotations

import copy
import random
import time

import yaml

from narrowpath.errors import NarrowpathError
from narrowpath.validate.corpus import load_corpus, shipped_corpus_path
from narrowpath.validate.inference import run_case

VALUES = (None, 0, -1, 1.5, 64.0, True, "x", [], {}, "H100 PCIe", "B200-SXM-192GB", 10**9, float("nan"))
SECTIONS = ("model", "hardware", "plan", "measured", "workload")
BUDGET_S = 20.0


def _mutate(rng: random.Random, case: dict) -> dict:
    case = copy.deepcopy(case)
    for _ in range(rng.randint(1, 3)):
        sec = rng.choice([s for s in SECTIONS if isinstance(case.get(s), dict)])
        key = rng.choice(sorted(case[sec]) + ["moe", "experts", "dense_ffn", "percentile"])
        case[sec][key] = rng.choice(VALUES)
    return case


def test_mutated_corpus_cases_are_priced_or_refused_never_a_crash(tmp_path):
    from narrowpath.schedule.choose import resolve_open_knobs
    from narrowpath.schedule.step import predict
    rng = random.Random(20261203)
    training = yaml.safe_load(shipped_corpus_path("training-sweeps-public.yaml").read_text())["cases"]
    serving = yaml.safe_load(shipped_corpus_path("inference-public.yaml").read_text())["cases"]
    start, runs = time.monotonic(), 0
    path = tmp_path / "c.yaml"
    while time.monotonic() - start < BUDGET_S and runs < 400:
        runs += 1
        if rng.random() < 0.6:
            case = _mutate(rng, rng.choice(training))
            path.write_text(yaml.safe_dump({"schema": "validation-corpus/1", "cases": [case]}))
            (c,) = load_corpus(path)
            assert (c.scenario is None) == (c.error is not None) and "\n" not in (c.error or "")
            if c.scenario is not None:
                try:
                    resolve_open_knobs(c.scenario, predict)
                except NarrowpathError as exc:
                    assert "\n" not in str(exc)
        else:
            r = run_case(_mutate(rng, rng.choice(serving)), 0)
            assert (r.failure is None) == bool(r.figures) or r.failure is not None
            assert "\n" not in (r.failure or "")
    assert runs >= 50
