"""The model's ends in backward, from the fifty-third session's review of dense pricing (Megatron-Core): the
embedding's dense weight gradient added into the main gradient every micro-batch, the output layer's backward
traffic behind its own GEMMs, and the final norm's backward at its autograd graph's bytes."""
from __future__ import annotations

import dataclasses

from narrowpath.catalog import load_scenario
from narrowpath.workload.build import _embedding_work


def _scn(**plan):
    s = load_scenario("llama3-8b-h100-8")
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, **plan))


def _ops(scn, first, last):
    ops, xf = _embedding_work(scn, first, last)
    return {op.name + "/" + op.phase: op for op, _ in ops}, {tr.name: tr for tr, _ in xf}


def test_embedding_weight_gradient_is_a_dense_table_added_into_the_main_gradient():
    """Llama-3 8B (vocabulary 128,256 × h 4,096 = 525,336,576 weights) on tp 1: PyTorch's embedding backward writes a
    dense BF16 table (zero-filled, then the tokens' rows added), and Megatron-Core's DDP hook adds it into the main
    gradient (main_grad.add_(grad)): write 2 + read 2 + read and write the main gradient — 2 + 2 B in BF16 (4 B
    each in FP32): 8 B · 525,336,576 = 4,202,692,608 B (12 B: 6,304,038,912) in two kernels, every micro-batch."""
    ops, _ = _ops(_scn(tp=1, dp=8, zero_stage=1, precision="bf16", grad_precision="bf16"), True, False)
    acc = ops["embedding_wgrad_accumulate/bwd"]
    assert (acc.hbm_bytes, acc.kernels) == (4_202_692_608, 2)
    ops32, _ = _ops(_scn(tp=1, dp=8, zero_stage=1, precision="bf16", grad_precision="fp32"), True, False)
    assert ops32["embedding_wgrad_accumulate/bwd"].hbm_bytes == 6_304_038_912
    t4, _ = _ops(_scn(tp=4, dp=2, zero_stage=1, precision="bf16", grad_precision="bf16"), True, False)
    assert t4["embedding_wgrad_accumulate/bwd"].hbm_bytes == 4_202_692_608 / 4  # the rank's vocabulary shard


def test_output_layer_backward_traffic_hides_behind_its_gemms():
    """A column-parallel output layer with sequence parallelism (tp 4): its backward re-gathers the input for the
    weight gradient behind the data gradient's GEMM and reduce-scatters the data gradient behind the weight
    gradient's (LinearWithGradAccumulationAndAsyncCommunication.backward, async_op=True): both overlappable, each
    the layer input's b·s·h·A = 8192·4096·2 = 67,108,864 B; the forward's gather is waited for. The final norm's
    backward: 3 tensors of b·s·h/t = 8,388,608 elements, 50,331,648 B."""
    ops, xf = _ops(_scn(tp=4, dp=2, sequence_parallel=True, precision="bf16"), False, True)
    assert xf["tp.logits_grad_reduce_scatter"].overlappable and xf["tp.logits_input_all_gather"].overlappable
    assert xf["tp.logits_input_all_gather"].phase == "bwd"
    assert xf["tp.logits_input_all_gather"].message_bytes == 67_108_864
    assert not xf["tp.logits_all_gather"].overlappable
    assert ops["final_norm/bwd"].hbm_bytes == 50_331_648
    _, no_sp = _ops(_scn(tp=4, dp=2, sequence_parallel=False, precision="bf16"), False, True)
    assert no_sp["tp.logits_grad_all_reduce"].overlappable and "tp.logits_input_all_gather" not in no_sp
