"""`compare` says when two pipelines split their layers differently: the step's compute is paced by the slowest
stage, so a split change moves it with the same FLOPs per GPU, and a rate over the average GPU's work alone would
take the blame (the reviewed case: DeepSeek-V3 on Megatron-Bridge, laid out 4/4/1 by the stack's recipe, against
the same plan under Megatron-LM's even split, 3/3-4/3)."""
from __future__ import annotations

import dataclasses

from narrowpath.analysis.analyze import analyze
from narrowpath.analysis.compare import compare, split_clause
from narrowpath.catalog.resolve import scenario_from_dict


def _scn(framework: str):
    return scenario_from_dict({"id": "dsv3", "model": "deepseek-v3", "system": "dgx-b200", "num_gpus": 256,
                               "plan": {"tp": 1, "pp": 16, "dp": 16, "cp": 1, "ep": 8, "vpp": 1, "mbs": 1,
                                        "gbs": 2048, "zero_stage": 1, "recompute": "none", "precision": "mxfp8",
                                        "framework": framework}})


def test_a_split_change_is_named_in_the_compute_sentence():
    a = analyze(_scn("Megatron-Bridge / NeMo 25.11 container"))
    b = analyze(_scn("Megatron-LM core_r0.14"))
    clause = split_clause(a.prediction, b.prediction)
    assert "split 4/4/1 -> 3/3-4/3" in clause
    slow_b = max(b.prediction.stages, key=lambda s: s.total_s)
    assert slow_b.index == 15 and f"-> {slow_b.layers} layers" in clause
    compute = [s for s in compare(a, b).sentences if s.startswith("Compute")]
    assert len(compute) == 1 and clause in compute[0]


def test_the_same_split_says_nothing():
    a = analyze(_scn("Megatron-Bridge / NeMo 25.11 container"))
    b = analyze(dataclasses.replace(a.prediction.scenario, plan=dataclasses.replace(a.prediction.scenario.plan,
                                                                                    dp_overlap=False)))
    assert split_clause(a.prediction, b.prediction) == ""
