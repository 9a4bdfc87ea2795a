"""Golden recompute, offload, MoE tensor-parallel traffic and fp32 bookkeeping, by hand (Korthikanti et al. 2022
§5 for selective and full recompute; Megatron-LM --recompute-method block; Megatron-Core / TE CPU offloading)."""
from __future__ import annotations

import pytest

from narrowpath.catalog import model, system
from narrowpath.cost.memory import stage_memory
from narrowpath.schedule.step import predict
from narrowpath.spec import Plan, Scenario
from narrowpath.workload.build import build_workload, zero3_transfers


def _wl(mid="llama3-8b", attention="flash", **kw):
    plan = Plan(attention=attention, **kw)
    scn = Scenario(system=system("dgx-h100"), model=model(mid), plan=plan, num_gpus=plan.num_gpus)
    return scn, build_workload(scn, attention)


def _phase(st, phase):
    return [(op.name, op.flop, c) for op, c in st.ops if op.phase == phase]


def test_selective_recompute_reruns_the_attention_core_with_either_kernel():
    """Selective recompute of `core_attn` (Megatron-Core's default module; Korthikanti §5) re-runs the attention
    core of every layer before its backward whatever the kernel (Megatron-Core Attention: checkpoint_core_attention,
    _checkpointed_attention_forward): a flash core its one fused kernel, the forward's FLOPs again, once per layer
    (Llama-3 8B, 32 layers); an unfused core its scores, softmax, dropout and weighted sum (GPT 1.7B, 24 layers)."""
    _, flash = _wl(recompute="selective")
    rc = _phase(flash.stages[0], "recompute")
    fwd = {n: f for n, f, _ in _phase(flash.stages[0], "fwd")}
    assert [(n, c) for n, _, c in rc] == [("flash_attn", 32)] and rc[0][1] == fwd["flash_attn"]
    _, unfused = _wl("gpt-1.7b", attention="unfused", recompute="selective", precision="fp16")
    rc = _phase(unfused.stages[0], "recompute")
    fwd = {n: f for n, f, _ in _phase(unfused.stages[0], "fwd")}
    assert [n for n, _, _ in rc] == ["attn_scores", "softmax", "attn_dropout", "attn_av"]
    assert all(f == fwd[n] and c == 24 for n, f, c in rc)  # one per layer, 24 layers


def test_full_recompute_reruns_every_forward_op_and_its_traffic():
    """Full recompute re-runs each layer's forward (same ops, same FLOPs) and its TP collectives, in a
    `recompute` phase; block recompute of 8 of 32 layers re-runs a quarter: counts 32 → 8 (ops and traffic)."""
    _, full = _wl(tp=2, sequence_parallel=True, recompute="full")
    _, part = _wl(tp=2, sequence_parallel=True, recompute="full", recompute_layers=8)
    layer_fwd = {n: f for n, f, c in _phase(full.stages[0], "fwd") if c == 32}
    rc = _phase(full.stages[0], "recompute")
    assert {n: f for n, f, _ in rc} == layer_fwd and all(c == 32 for *_, c in rc)
    assert all(c == 8 for *_, c in _phase(part.stages[0], "recompute"))
    tp_rc = [(t.name, c) for t, c in part.stages[0].transfers if t.phase == "recompute"]
    assert tp_rc == [("tp.all_gather", 16.0), ("tp.reduce_scatter", 16.0)]  # 2 pairs × 8 layers


@pytest.mark.parametrize("etp, pairs", [(1, 1), (2, 2)])
def test_moe_layer_tensor_parallel_pairs(etp, pairs):
    """An MoE layer without shared experts enters and leaves tensor parallelism once, around attention: its routed
    experts take their tokens from the dispatcher whatever the expert tensor parallelism — the all-to-all of the
    sequence-parallel shard's copies and, with etp = tp = 2, the dispatcher's gather of the received copies over
    the expert-tp ranks (Megatron-Core MoEAlltoAllTokenDispatcher), not a second gather of the layer's input.
    Mixtral (32 MoE layers, 4,096 tokens, top 2, h 4,096, 16 bit), tp 2 with SP: a rank's 2,048 local tokens send
    4,096 copies; the gather's output over 2 ranks (the nccl-tests size) is 2,048·2·2·4,096·2 B = 67,108,864 B per
    layer."""
    _, wl = _wl("mixtral-8x7b", tp=2, dp=2, ep=2, etp=etp, gbs=2, sequence_parallel=True)
    gathers = [c for t, c in wl.stages[0].transfers if t.name == "tp.all_gather" and t.phase == "fwd"]
    assert gathers == [32.0]
    etp_gathers = [(t.message_bytes, c) for t, c in wl.stages[0].transfers
                   if t.name == "ep.expert_tp_all_gather" and t.phase == "fwd"]
    assert etp_gathers == ([(67_108_864, 32.0)] if pairs == 2 else [])


def test_moe_block_norms_are_sequence_parallel():
    """With SP the MoE block's norm and residual work on b·s·h/t elements: Mixtral, tp 2: 4096·4096/2 elements,
    read + write 2 B each = 33,554,432 B; residual add (read 2, write 1) 50,331,648 B."""
    _, wl = _wl("mixtral-8x7b", tp=2, dp=2, ep=2, etp=1, gbs=2, sequence_parallel=True)
    ops = {op.name: op for op, _ in wl.stages[0].ops if op.phase == "fwd"}
    assert ops["ln2"].hbm_bytes == 33_554_432 and ops["residual_add"].hbm_bytes == 50_331_648


def test_offloaded_activations_travel_to_the_host_and_back():
    """Offloading 4 of the 16 layers of a stage (pp 2, tp 8, SP): a quarter of the stage's saved activations
    per micro-batch, 0.25 · 16 · 142,737,408 = 570,949,632 B, go to host memory in forward and come back in
    backward, overlapped with compute; each copy costs the host link's latency (2 µs) plus bytes / 50 GB/s."""
    scn, wl = _wl(tp=8, pp=2, gbs=8, sequence_parallel=True, offload_layers=4)
    host = [(t.name, t.op, t.axis, t.phase, t.message_bytes, t.overlappable, c) for t, c in wl.stages[0].transfers
            if t.axis == "host"]
    assert host == [("host.activation_offload", "send_recv", "host", "fwd", 570_949_632, True, 1.0),
                    ("host.activation_reload", "send_recv", "host", "bwd", 570_949_632, True, 1.0)]
    rows = {t.name: t for t in predict(scn).transfers}
    assert rows["host.activation_offload"].time_each_s == pytest.approx(2e-6 + 570_949_632 / 50e9)
    assert rows["host.activation_reload"].time_each_s == pytest.approx(2e-6 + 570_949_632 / 50e9)


def test_offloaded_moe_layers_move_their_own_activations():
    """Mixtral (32 MoE layers), pp 2, offloading 4 of each stage's 16 layers: a quarter of 16 MoE layers'
    saved bytes per micro-batch (an MoE layer keeps its router, permute and expert inputs, not a dense MLP's)."""
    from narrowpath.cost.memory import layer_activation_bytes
    scn, wl = _wl("mixtral-8x7b", pp=2, dp=4, ep=4, gbs=8, offload_layers=4)
    moe = layer_activation_bytes(scn, "flash", moe_layer=True)
    assert moe != layer_activation_bytes(scn, "flash", moe_layer=False)
    (off,) = [t for t, _ in wl.stages[0].transfers if t.name == "host.activation_offload"]
    assert off.message_bytes == pytest.approx(0.25 * 16 * moe)


def test_zero3_fp8_moe_layer_requantizes_its_own_weights():
    """ZeRO-3 with FP8 re-quantizes each layer's gathered weights every micro-batch: an MoE layer's (attention,
    norms, its local experts and router: workload.transformer.layer_params) × 6 B in 4 launches (the amax
    zeroed, the amax, the scale, the cast)."""
    from narrowpath.workload.transformer import layer_params
    scn, wl = _wl("mixtral-8x7b", dp=8, ep=4, gbs=8, zero_stage=3, precision="fp8")
    (wq,) = [(op, c) for op, c in wl.stages[0].ops if op.name == "weight_quantize"]
    assert wq[0].hbm_bytes == layer_params(scn.model, scn.plan, moe_layer=True) * 6 and wq[0].kernels == 4
    assert wq[1] == 32.0


def test_zero1_shards_experts_over_their_own_group():
    """Mixtral, dp 8, ep 4: dense parameters' Adam state is sharded over dp 8, the experts' over their expert-dp
    group of 8/4 = 2: Adam touches dense/8 + experts/2 parameters, 34 B each."""
    _, wl = _wl("mixtral-8x7b", dp=8, ep=4, gbs=8, zero_stage=1)
    st = wl.stages[0]
    ((adam, _),) = [(op, c) for op, c in wl.optimizer_ops if op.name == "adam"]
    assert adam.hbm_bytes == pytest.approx(((st.params - st.expert_params) / 8 + st.expert_params / 2) * 34)


def test_expert_parallel_traffic_only_with_expert_parallelism():
    """ep 1: no all-to-all at all; ep_overlap marks the dispatch/combine overlappable (Megatron-Core 1F1B A2A
    overlap), else it is exposed."""
    _, one = _wl("mixtral-8x7b", dp=8, gbs=8)
    assert not [t for t, _ in one.stages[0].transfers if t.axis == "ep"]
    for overlap in (True, False):
        _, wl = _wl("mixtral-8x7b", dp=8, ep=8, gbs=8, ep_overlap=overlap)
        assert {t.overlappable for t, _ in wl.stages[0].transfers
                if t.axis == "ep" and t.name != "ep.token_counts"} == {overlap}  # the counts: never hidden


def test_tied_embeddings_need_no_sync_on_one_stage():
    import dataclasses
    plan = Plan(tp=2)
    scn = Scenario(system=system("dgx-h100"), model=dataclasses.replace(model("llama3-8b"), tied_embeddings=True),
                   plan=plan, num_gpus=2)
    assert build_workload(scn, "flash").step_transfers == ()


def test_fp32_training_keeps_4_byte_weights_and_8_byte_adam():
    """fp32 runs: 4 B weights (all-gathered at 4 B under ZeRO-3), 4 B gradients, Adam's two fp32 moments 8 B
    (no separate master copy); the optimizer reads and writes 4 + 12 + 12 + 4 = 32 B per parameter."""
    scn, wl = _wl(tp=8, sequence_parallel=True, precision="fp32")
    p = wl.stages[0].params
    mem = stage_memory(scn, wl, "flash")[0].items
    assert (mem["weights"], mem["gradients"], mem["optimizer_state"]) == (4 * p, 4 * p, 8 * p)
    assert [(op.name, op.hbm_bytes) for op, _ in wl.optimizer_ops] == [("adam", 32 * p)]
    xf = zero3_transfers(Plan(dp=2, gbs=2, zero_stage=3, precision="fp32"), 1000.0, 0.0)
    assert [t.message_bytes for t, _ in xf] == [4000.0, 4000.0, 4000.0]


def test_tied_embedding_sync_is_a_step_all_reduce():
    import dataclasses
    plan = Plan(tp=2, pp=2)
    scn = Scenario(system=system("dgx-h100"), model=dataclasses.replace(model("llama3-8b"), tied_embeddings=True),
                   plan=plan, num_gpus=4)
    ((t, c),) = build_workload(scn, "flash").step_transfers
    assert (t.name, t.op, t.phase, t.overlappable, c) == ("pp.tied_embedding_all_reduce", "all_reduce", "step",
                                                          False, 1.0)
