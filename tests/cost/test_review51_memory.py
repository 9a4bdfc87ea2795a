"""Memory per rank, from the fifty-first session's review of cost/memory.py: under full recompute the
multi-token-prediction layers checkpoint their inputs as the model's layers do."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario
from narrowpath.cost.memory import in_flight_microbatches, layer_activation_bytes, stage_memory
from narrowpath.workload.build import build_workload


def _deepseek(mtp: int):
    s = load_scenario("deepseek-v3-h800-2048")
    plan = dataclasses.replace(s.plan, pipeline_schedule="auto", vpp=1, recompute="full", recompute_modules=(),
                               activation_cache="default")
    return dataclasses.replace(s, model=dataclasses.replace(s.model, mtp_layers=mtp), plan=plan)


def test_full_recompute_keeps_the_mtp_layers_inputs():
    """DeepSeek-V3 on 16 stages under 1F1B and full recompute: the last stage keeps one layer input per layer and
    held micro-batch — and one more per MTP layer (it kept nothing for it: its activations were scaled by 1 − 1)."""
    mems = {mtp: stage_memory(_deepseek(mtp), build_workload(_deepseek(mtp), "flash"), "flash") for mtp in (0, 1)}
    last = _deepseek(1).plan.head_stage
    gain = mems[1][last].items["activations"] - mems[0][last].items["activations"]
    s = _deepseek(1)
    assert gain == pytest.approx(layer_activation_bytes(s, "flash") * in_flight_microbatches(last, s), rel=1e-9)
    assert mems[1][0].items["activations"] == mems[0][0].items["activations"]  # only the head stage holds them


def test_dualpipev_full_recompute_keeps_the_mtp_inputs_on_its_last_chunk():
    """DualPipeV (ranks hold chunk 0 and chunk 1 on a V; the head is rank 0's chunk 1): the MTP layer's input is
    kept with chunk 1, held s + 1 = 1 times on rank 0 at its peak — one layer input more than without MTP."""
    def mem(mtp):
        s = _deepseek(mtp)
        s = dataclasses.replace(s, plan=dataclasses.replace(s.plan, pipeline_schedule="dualpipev", vpp=2))
        return s, stage_memory(s, build_workload(s, "flash"), "flash")
    (s1, m1), (_, m0) = mem(1), mem(0)
    gain = m1[0].items["activations"] - m0[0].items["activations"]
    assert gain == pytest.approx(layer_activation_bytes(s1, "flash"), rel=1e-9)
