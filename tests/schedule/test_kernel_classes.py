"""StepPrediction.gpu_time_by_class_s — the model's side of `trace --against`'s kernel classes: the classes of
the most loaded stage add up to its kernel time over the step's micro-batches, and each op lands in the class a
trace gives its kernel."""
from __future__ import annotations

import pytest

from narrowpath.catalog.resolve import scenario_from_dict
from narrowpath.schedule.step import predict

MODEL = {"name": "llama3-8b-8l", "layers": 8, "seq_len": 4096, "hidden": 4096, "heads": 32, "kv_heads": 8,
         "ffn": 14336, "ffn_act": "swiglu", "norm": "rmsnorm", "vocab": 128256}


def _predict(plan: dict):
    scn = scenario_from_dict({"system": "dgx-h200", "num_gpus": plan["pp"], "model": MODEL,
                              "plan": {"tp": 1, "dp": 1, "mbs": 1, "recompute": "none", "precision": "bf16",
                                       "zero_stage": 0, **plan}})
    return predict(scn[0] if isinstance(scn, tuple) else scn)


def test_classes_cover_every_micro_batch():
    """One GPU, 4 micro-batches: the three kernel classes are the step's compute (4 x one micro-batch's ops),
    the optimizer its update."""
    p = _predict({"pp": 1, "gbs": 4, "attention": "flash"})
    c = p.gpu_time_by_class_s()
    assert p.workload.num_microbatches == 4
    assert c["gemm"] + c["attention"] + c["elementwise"] == pytest.approx(p.breakdown_s["compute"], rel=1e-12)
    assert c["optimizer"] == p.breakdown_s["optimizer"]
    assert c["elementwise"] > 0 and c["attention"] > 0


def test_the_most_loaded_stage():
    """Four pipeline stages of two layers each: the last holds the output layer and the loss (a 128,256-word
    vocabulary: ~2.1x a middle stage's compute) and is the one priced."""
    p = _predict({"pp": 4, "gbs": 8, "attention": "flash"})
    c = p.gpu_time_by_class_s()
    per_stage = [(s.fwd_compute_s + s.bwd_compute_s - s.host_wait_s) * p.workload.num_microbatches
                 for s in p.stages]
    assert max(per_stage) == per_stage[-1] > 2 * per_stage[1]
    assert c["gemm"] + c["attention"] + c["elementwise"] == pytest.approx(per_stage[-1], rel=1e-9)


def test_unfused_attention_is_gemm_and_elementwise():
    """Materialised scores: the score and weighted-sum GEMMs are GEMM kernels in a trace and the softmax an
    element-wise one, so the attention class is empty and the step's compute is all in the other two."""
    p = _predict({"pp": 1, "gbs": 1, "attention": "unfused"})
    c = p.gpu_time_by_class_s()
    assert c["attention"] == 0.0
    assert c["gemm"] + c["elementwise"] == pytest.approx(p.breakdown_s["compute"], rel=1e-12)
    fused = _predict({"pp": 1, "gbs": 1, "attention": "flash"}).gpu_time_by_class_s()
    assert c["elementwise"] > fused["elementwise"] and c["gemm"] > fused["gemm"]


def test_the_most_loaded_stage_is_not_always_the_last():
    """Five of the eight layers on the first stage (`first_stage_layers`), one on each of the others: the first
    stage (five layers and the embedding) outweighs the last (one layer, the output layer and the loss)."""
    p = _predict({"pp": 4, "gbs": 8, "attention": "flash", "first_stage_layers": 5})
    c = p.gpu_time_by_class_s()
    per_stage = [(s.fwd_compute_s + s.bwd_compute_s - s.host_wait_s) * p.workload.num_microbatches
                 for s in p.stages]
    assert max(per_stage) == per_stage[0] > per_stage[-1]
    assert c["gemm"] + c["attention"] + c["elementwise"] == pytest.approx(per_stage[0], rel=1e-9)
