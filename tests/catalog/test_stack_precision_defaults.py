"""A stack's defaults by training format (catalog/stacks.yaml `defaults_by_precision`): Megatron-Bridge's performance
configs turn Transformer Engine's userbuffer TP overlap off for NVFP4 runs (`cfg.comm_overlap.tp_comm_overlap = False
if precision == "nvfp4"`, scripts/performance/configs/llama/llama3_llm_pretrain.py and the 405B / GPT-OSS configs),
so an NVFP4 run's tensor-parallel gathers and reduce-scatters are on the critical path, while its FP8 / MXFP8 / BF16
twins hide them behind the GEMMs."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import model, system
from narrowpath.catalog.resolve import plan_with_stack_defaults, restack_for_precision
from narrowpath.schedule.step import predict
from narrowpath.spec import Scenario

MB = "Megatron-Bridge / NeMo 26.04 container"


def _plan(precision: str, **given):
    return plan_with_stack_defaults({"tp": 2, "pp": 1, "dp": 4, "gbs": 8, "sequence_parallel": True,
                                     "precision": precision, "framework": MB, **given})


@pytest.mark.parametrize("precision,overlap", [("nvfp4", False), ("mxfp8", True), ("fp8", True), ("bf16", True)])
def test_megatron_bridge_overlaps_tp_except_under_nvfp4(precision, overlap):
    plan, _, chosen = _plan(precision)
    assert plan.tp_comm_overlap is overlap
    assert dict(chosen)["tp_comm_overlap"].endswith("default of the megatron-bridge stack")


def test_a_stated_overlap_is_kept():
    plan, _, chosen = _plan("nvfp4", tp_comm_overlap=True)
    assert plan.tp_comm_overlap is True and "tp_comm_overlap" not in dict(chosen)


def test_other_stacks_keep_their_overlap_under_nvfp4():
    plan, _, _ = plan_with_stack_defaults({"tp": 2, "dp": 4, "gbs": 8, "sequence_parallel": True,
                                           "precision": "nvfp4", "framework": "NeMo 25.07"})
    assert plan.tp_comm_overlap is True


def test_an_nvfp4_run_exposes_what_its_mxfp8_twin_hides():
    """Llama-3 8B, tp 2 with sequence parallelism on 8 GB200: the MXFP8 plan hides its TP gathers and
    reduce-scatters; the NVFP4 plan of the same stack leaves them exposed, so it is slower by at least its exposed
    TP time less what the cheaper NVFP4 GEMMs save."""
    def scn(precision):
        plan, _, _ = _plan(precision)
        return Scenario(system=system("gb200-nvl72"), model=model("llama3-8b"), plan=plan, num_gpus=plan.num_gpus)
    fp4, mx = predict(scn("nvfp4")), predict(scn("mxfp8"))
    assert mx.breakdown_s["exposed_tp_comm"] < 0.1 * fp4.breakdown_s["exposed_tp_comm"]
    assert fp4.breakdown_s["exposed_tp_comm"] > 0.02 * fp4.step_time_s


def test_changing_the_format_re_derives_the_overlap():
    plan, _, chosen = _plan("nvfp4")
    fields, notes = restack_for_precision(plan, chosen, "mxfp8", set())
    assert fields["tp_comm_overlap"] is True
    back = dataclasses.replace(plan, **fields)
    fields2, _ = restack_for_precision(back, notes, "nvfp4", set())
    assert fields2["tp_comm_overlap"] is False
