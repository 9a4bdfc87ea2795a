"""The host's part of a pass and the two knobs that remove it (spec.plan `cuda_graphs`, `moe_sync_free`).

A pass runs at the slower of the GPU's pace and the host's pace of issuing its kernels, and the GPU idles
`host_sync_s` at every host synchronisation (schedule.step). A dropless MoE layer synchronises once per forward
(Megatron-Core's alltoall dispatcher copies the tokens-per-expert counts to the CPU) unless its kernels read the counts
from device memory (`moe_sync_free`); CUDA graphs replay a layer's kernels without issuing them one by one
(`cuda_graphs`), so a host-bound pass runs at the GPU's pace. Every expected number below is derived by hand from
the ops' own GPU and host times, not read back from the function under test."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import system
from narrowpath.cost.roofline import host_time_s, op_time_s
from narrowpath.cost.power import capped_device
from narrowpath.schedule.step import predict
from narrowpath.spec import Plan, Scenario
from narrowpath.spec.parse import model_from_dict

EDGE_OPS = frozenset({"embedding_lookup", "embedding_grad", "embedding_wgrad_accumulate", "final_norm", "logits",
                      "cross_entropy", "mtp_norms", "mtp_proj"})
"""Ops of the embedding and the output end (workload.build._embedding_work): they stay eager under CUDA graphs."""


def _qwen3_30b(**plan) -> Scenario:
    """Qwen3-30B-A3B (128 experts, top 8, 48 MoE layers) on one DGX B200, ep 8, micro-batch 1: dropless."""
    m = model_from_dict(dict(name="qwen3-30b-a3b", layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128,
                             ffn=768, ffn_act="swiglu", vocab=151936, seq_len=4096, experts=128, top_k=8))
    p = Plan(**{**dict(tp=1, pp=1, dp=8, ep=8, mbs=1, gbs=512, zero_stage=1, recompute="none", precision="mxfp8",
                       dp_overlap=True, moe_routing="dropless-balanced"), **plan})
    return Scenario(name="qwen3-30b", system=system("dgx-b200"), model=m, plan=p, num_gpus=8)


def _tiny(**plan) -> Scenario:
    """A 4-layer dense model of width 128 at 64 tokens per micro-batch: its kernels run for a few microseconds,
    fewer than the host needs to issue them (host-bound)."""
    m = model_from_dict(dict(name="tiny", layers=4, hidden=128, heads=2, kv_heads=2, ffn=512, ffn_act="swiglu",
                             vocab=256, seq_len=64))
    p = Plan(**{**dict(tp=1, pp=1, dp=8, mbs=1, gbs=64, zero_stage=1, recompute="none", precision="bf16"), **plan})
    return Scenario(name="tiny", system=system("dgx-h100"), model=m, plan=p, num_gpus=8)


def _phase_sums(pred):
    """(GPU time, host issue time, host syncs) per phase of stage 0, summed from its ops."""
    dev, cal = capped_device(pred.scenario.system), pred.calibration
    out = {}
    for op, c in pred.workload.stages[0].ops:
        g, h, s = out.get(op.phase, (0.0, 0.0, 0.0))
        out[op.phase] = (g + op_time_s(op, dev, cal) * c, h + host_time_s(op, cal) * c, s + op.host_syncs * c)
    return out


def test_dropless_moe_layers_sync_once_per_forward_unless_sync_free():
    base = predict(_qwen3_30b())
    syncs = {op.name: c for op, c in base.workload.stages[0].ops if op.host_syncs}
    assert syncs == {"router_topk": 48.0}  # one per MoE layer's forward, none in backward
    free = predict(_qwen3_30b(moe_sync_free=True))
    assert not any(op.host_syncs for op, _ in free.workload.stages[0].ops)
    drop = predict(dataclasses.replace(_qwen3_30b(), plan=dataclasses.replace(_qwen3_30b().plan,
                                                                              moe_routing="token-drop")))
    assert not any(op.host_syncs for op, _ in drop.workload.stages[0].ops)  # capacity-sized: nothing to copy back


SYNC_FREE_LAUNCHES_SAVED = 4 * (16 - 1) * 1
"""MXFP8 casts a sync-free expert path no longer launches per expert in one MoE layer's pass pair: the experts'
input and output-gradient casts of both grouped GEMMs (4) quantize the grouped tensor at once instead of each of the
128 / 8 = 16 local experts' rows (workload.ops.grouped_quantize_kernels), one kernel a cast in MXFP8."""


def test_sync_free_saves_exactly_the_syncs_where_the_gpu_leads():
    """Here the host issues each pass faster than the GPU runs it, so the only wait is the syncs': 48 layers x
    64 micro-batches x host_sync_s; a sync-free path also casts each grouped tensor at once (60 fewer launches a
    layer and micro-batch, each kernel_overhead_s of GPU time)."""
    base = predict(_qwen3_30b())
    sums = _phase_sums(base)
    assert all(h < g for g, h, _ in sums.values())  # GPU-paced
    cal = base.calibration
    m = base.workload.num_microbatches
    assert m == 64
    assert base.stages[0].host_wait_s == pytest.approx(48 * cal.host_sync_s, rel=1e-12)
    free = predict(_qwen3_30b(moe_sync_free=True))
    assert free.stages[0].host_wait_s == 0.0
    saved = m * 48 * (cal.host_sync_s + SYNC_FREE_LAUNCHES_SAVED * cal.kernel_overhead_s)
    # the gradient sync's first bucket is ready 1/n into the last backward, which the syncs lengthened: its
    # exposure moves with that backward (schedule.exposure.bucket_tail_s)
    dp = base.breakdown_s["exposed_dp_comm"] - free.breakdown_s["exposed_dp_comm"]
    assert base.step_time_s - free.step_time_s - dp == pytest.approx(saved, rel=1e-9)
    # graphs change nothing here: the host was never the slower party, and the syncs stay
    assert predict(_qwen3_30b(cuda_graphs=True)).step_time_s == pytest.approx(base.step_time_s, rel=1e-12)


def test_cuda_graphs_let_a_host_bound_pass_run_at_the_gpus_pace():
    base = predict(_tiny())
    sums = _phase_sums(base)
    assert sums["fwd"][1] > sums["fwd"][0]  # the forward is host-bound (its GEMMs' latency floor paces the backward)
    wait = sum(max(0.0, h - g) for g, h, _ in sums.values())  # no syncs in a dense model
    assert base.stages[0].host_wait_s == pytest.approx(wait, rel=1e-12) and wait > 0
    graphed = predict(_tiny(cuda_graphs=True))
    assert graphed.stages[0].host_wait_s == 0.0
    ops = [op for op, _ in graphed.workload.stages[0].ops]
    layer_ops = [op for op in ops if op.name.split(".", 1)[0] not in EDGE_OPS]
    assert layer_ops and all(host_time_s(op, graphed.calibration) == 0.0 for op in layer_ops)
    # the embedding, the output layer and the loss stay eager, as do the optimizer's kernels
    edge = [op for op in ops if op.name.split(".", 1)[0] in EDGE_OPS]
    assert edge and all(host_time_s(op, graphed.calibration) > 0 for op in edge)
    assert graphed.workload.optimizer_ops == base.workload.optimizer_ops
    m = base.workload.num_microbatches
    gpu_pass = sum(g for g, _, _ in _phase_sums(graphed).values())
    eager_edge = sum(max(0.0, h - g) for g, h, _ in _phase_sums(graphed).values())
    assert graphed.breakdown_s["compute"] == pytest.approx(m * (gpu_pass + eager_edge), rel=1e-12)
    assert graphed.step_time_s < base.step_time_s


@pytest.mark.parametrize("field", ["cuda_graphs", "moe_sync_free"])
def test_knobs_are_booleans(field):
    from narrowpath.errors import SpecError
    with pytest.raises(SpecError, match=f"plan.{field}"):
        Plan(**{field: "yes"})


def test_graphs_keep_a_syncing_dropless_layers_expert_path_eager():
    """Megatron-Core captures a dropless MoE layer's attention, router and dispatcher preprocessing, not its experts
    ("Dropless MoE doesn't work with 'moe' scope cudagraph"): those ops keep their host issue cost until the layer
    stops synchronising."""
    cal = predict(_qwen3_30b()).calibration
    ops = [op for op, _ in predict(_qwen3_30b(cuda_graphs=True)).workload.stages[0].ops
           if op.name.split(".", 1)[0] not in EDGE_OPS]
    eager = {op.name.split(".", 1)[0] for op in ops if host_time_s(op, cal) > 0}
    assert eager and all(n.startswith(("moe_permute", "expert", "moe_unpermute")) for n in eager), eager
    assert {op.name for op in ops if op.name.startswith(("qkv", "flash_attn", "router"))} and all(
        host_time_s(op, cal) == 0 for op in ops if op.name.startswith(("qkv", "flash_attn", "router")))
    both = predict(_qwen3_30b(cuda_graphs=True, moe_sync_free=True)).workload.stages[0].ops
    assert all(host_time_s(op, cal) == 0 for op, _ in both if op.name.split(".", 1)[0] not in EDGE_OPS)


def test_graphs_and_full_recompute_are_refused():
    from narrowpath.errors import SpecError
    with pytest.raises(SpecError, match="plan.cuda_graphs"):
        _tiny(cuda_graphs=True, recompute="full")


def test_the_step_waits_as_its_critical_stage_does():
    """pp 2: the stage with the larger per-micro-batch time paces the step; its host wait (24 MoE layers' syncs,
    the host issuing faster than the GPU runs) over the 64 micro-batches is the step's."""
    scn = _qwen3_30b()
    scn = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, pp=2, dp=4, ep=4, gbs=256))
    pred = predict(scn)
    crit = max(pred.stages, key=lambda s: s.total_s)
    syncs = sum(op.host_syncs * c for op, c in pred.workload.stages[crit.index].ops)
    assert syncs == 24
    m = pred.workload.num_microbatches
    assert pred.host_wait_s == pytest.approx(m * syncs * pred.calibration.host_sync_s, rel=1e-12)


def test_every_part_of_a_syncing_layers_expert_path_stays_eager_under_graphs():
    """Each family of the expert path — permute, routed experts, shared experts, unpermute — keeps its host issue
    cost under CUDA graphs while the layer syncs; the rest of the layer (norms, attention, router) loses it."""
    base = _qwen3_30b()
    m = dataclasses.replace(base.model, moe=dataclasses.replace(base.model.moe, shared_experts=1, shared_ffn=768))
    scn = dataclasses.replace(base, model=m, plan=dataclasses.replace(base.plan, cuda_graphs=True))
    pred = predict(scn)
    cal = pred.calibration
    ops = [op for op, _ in pred.workload.stages[0].ops if op.name.split(".", 1)[0] not in EDGE_OPS]
    for family in ("moe_permute", "expert_", "shared_", "moe_unpermute"):
        mine = [op for op in ops if op.name.startswith(family)]
        assert mine and all(host_time_s(op, cal) > 0 for op in mine if op.kernels), family
    rest = [op for op in ops if not op.name.startswith(("moe_permute", "expert_", "shared_", "moe_unpermute"))]
    assert rest and all(host_time_s(op, cal) == 0 for op in rest)


def test_the_chooser_offers_no_full_recompute_beside_graphs():
    """schedule.choose.activation_strategies (what an unpublished recompute is chosen from) follows the plan: no full
    recompute under CUDA graphs (spec.plan refuses it); with DeepSeek-V3's FP8 cache full recompute of every layer
    but of no share of them; otherwise both."""
    from narrowpath.schedule.choose import activation_strategies
    eager = activation_strategies(_qwen3_30b())
    assert {"recompute": "full"} in eager and any(p.get("recompute_layers") for p in eager)
    graphs = activation_strategies(_qwen3_30b(cuda_graphs=True))
    assert graphs and not [p for p in graphs if p["recompute"] == "full"]
    fp8 = activation_strategies(_qwen3_30b(activation_cache="fp8"))
    assert {"recompute": "full"} in fp8 and not any(p.get("recompute_layers") for p in fp8)
