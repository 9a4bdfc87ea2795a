"""One BF16 tensor read by two projections is kept once (the fiftieth session's workload review)."""
from __future__ import annotations

import pytest

from narrowpath.catalog import model as catalog_model
from narrowpath.spec.plan import Plan
from narrowpath.workload import transformer as T
from narrowpath.workload.recompute import kept_bytes


def _layer(precision: str, moe_layer: bool):
    m = catalog_model("deepseek-v3")
    p = Plan(tp=1, dp=8, ep=8, mbs=1, gbs=8, precision=precision)
    ops = T.layer_forward_ops(m, p, "flash", moe_layer=moe_layer)
    return m, p, ops, m.seq_len * m.hidden


@pytest.mark.parametrize("moe_layer, shared_pairs", [(True, 2), (False, 1)])
def test_bf16_projections_on_one_norm_keep_its_output_once(moe_layer, shared_pairs):
    """DeepSeek-V3 at tp 1, micro-batch 1, BF16: MLA's q_down and kv_down both read ln1's output, s·h elements of 2
    bytes = 2 bytes per s·h each; an MoE layer's router and shared-expert up-projection both read ln2's, 2 each.
    Transformer Engine's BF16 Linear saves its input itself and Megatron-Core's router saves its input before any
    cast, so autograd holds each tensor once: the layer keeps 2 bytes per s·h less per pair than the sum of what
    its ops save (an MoE layer 4, a dense MLA layer 2)."""
    m, p, ops, sbh = _layer("bf16", moe_layer)
    names = {o.name: o.saved_bytes / sbh for o in ops}
    pairs = [("q_down", "kv_down")] + ([("router", "shared_up")] if moe_layer else [])
    for a, b in pairs:
        assert names[a] == pytest.approx(2.0) and names[b] == pytest.approx(2.0)
    total = sum(o.saved_bytes for o in ops) / sbh
    assert kept_bytes(ops, m, p) / sbh == pytest.approx(total - 2.0 * shared_pairs)


def test_fp8_projections_keep_their_own_quantized_copies():
    """In FP8 each projection quantizes its own copy of the input (1 byte per element) and keeps that: nothing is
    counted twice, the router (BF16) and the shared up-projection (FP8) hold different tensors."""
    m, p, ops, sbh = _layer("fp8", True)
    assert kept_bytes(ops, m, p) == pytest.approx(sum(o.saved_bytes for o in ops))


def test_lstm_model_flops_are_its_gates_and_output_layer():
    """GNMT's 8-layer LSTM (h 1,024, V 32,000): each layer's gate GEMM multiplies [x_t, h_(t−1)] (2h) by the 4h
    gate weights, 2·2h·4h = 16h² FLOPs a token, plus the output layer's 2hV; training 3× the forward:
    3 · (8 · 16 · 1024² + 2 · 1024 · 32000) = 599,261,184 FLOPs a token (the transformer formula read 0.83 G).
    The step's own count (what predict's MFU reads) is the same."""
    from narrowpath.catalog import system
    from narrowpath.spec.scenario import Scenario
    from narrowpath.workload.build import build_workload
    from narrowpath.workload.counts import causal_model_flop_per_token, model_flop_per_token
    m = catalog_model("gnmt-lstm")
    assert model_flop_per_token(m) == 3 * (8 * 16 * 1024**2 + 2 * 1024 * 32000) == 599_261_184
    assert causal_model_flop_per_token(m) == model_flop_per_token(m)
    scn = Scenario(model=m, system=system("dgx-a100"), plan=Plan(tp=1, dp=8, mbs=64, gbs=512, precision="fp16"),
                   num_gpus=8)
    w = build_workload(scn, "flash")
    assert w.model_flop_per_step / w.tokens_per_step == pytest.approx(model_flop_per_token(m))
