"""Values the seed-13 mutation sample (benchmarks/mutation.py --sample 300 --seed 13) found unguarded in the training
model's stages: each test pins one behaviour by hand or from its source, so that a small edit to it fails here."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from narrowpath.catalog import calibration_for, load_scenario, model, system
from narrowpath.cost.collectives import collective_time
from narrowpath.errors import SpecError
from narrowpath.network.contention import ring_pairs
from narrowpath.network.fabric import FabricSpec
from narrowpath.network.placement import span_of
from narrowpath.schedule.choose import resolve_open_knobs
from narrowpath.schedule.step import predict, sync_group, transfer_span
from narrowpath.spec import Plan, Scenario
from narrowpath.workload.build import build_workload
from narrowpath.workload.split import balanced_end_layers


def test_the_fp8_primary_weights_transpose_is_optimizer_work():
    """Per-tensor FP8 primary weights (precision fp8, fp8_params) add the full weights' column-wise copy once per step
    after the all-gather (workload.build.optimizer_ops): it is an optimizer-phase op like the Adam update and the
    cast, so every op of the step's optimizer work says `optimizer` (items.PHASES)."""
    s = load_scenario("llama3-8b-h100-8")
    s = dataclasses.replace(s, plan=dataclasses.replace(s.plan, precision="fp8", fp8_params=True, zero_stage=1))
    ops = build_workload(s, "flash").optimizer_ops
    assert "weight_transpose" in {op.name for op, _ in ops}
    assert {op.phase for op, _ in ops} == {"optimizer"}


def test_op_names_carry_at_most_one_suffix():
    """Ops are named `<base>` or `<base>.<suffix>` (.dgrad, .wgrad, .quantize, .grad_quantize): the attention-core
    and edge-op tests read the base before the first dot, which is the base before the last dot too."""
    for name in ("llama3-8b-h100-8", "deepseek-v3-h800-2048", "gpt3-175b-a100-1024"):
        s = load_scenario(name)
        for kernel in ("flash", "unfused"):
            wl = build_workload(s, kernel)
            names = {op.name for st in wl.stages for op, _ in st.ops} | {op.name for op, _ in wl.optimizer_ops}
            assert all(n.count(".") <= 1 for n in names), sorted(n for n in names if n.count(".") > 1)



def test_the_balancing_split_prices_a_layer_at_the_busiest_middle_stage():
    """12 layers on 4 stages of 3; the middle stages take 3 s and 4.5 s (1 and 1.5 s a layer), the ends 3 s each. A
    layer costs what it costs on the busiest middle stage, 1.5 s, so the ends hold 3 − 3·1.5 = −1.5 s beyond their
    layers; the 18 layer-seconds minus 3 leave 15 s, and every split Megatron accepts leaves a stage at 4.5 s or
    more (3 layers on a middle stage): no split beats the current one. Priced at the first middle stage's 1 s a
    layer instead, the even split would look like 3 s a stage and be proposed."""
    assert balanced_end_layers(12, 4, 1, [3.0, 3.0, 4.5, 3.0], [3, 3, 3, 3]) is None


def test_a_tree_all_reduce_of_megabytes_across_nodes_runs_ll128():
    """NCCL's tuner (src/graph/tuning.cc) gives the LL128 protocol a 14 µs base latency on trees and 92 % of the
    bus bandwidth: for a 16 MB all-reduce over 4 nodes of 8 H100 it beats LL (a third of the bandwidth) and Simple
    (the mid-size correction), so the tree runs LL128 with a latency of tens of microseconds, well under 1 ms."""
    span = span_of(32, ranks_per_domain=8, domains=4, ranks_per_node=8, nodes=4, axis="dp")
    c = collective_time("all_reduce", 16e6, span, system("dgx-h100"), calibration_for("H100-SXM5-80GB"),
                        algorithm="tree")
    assert (c.algorithm, c.protocol) == ("tree", "LL128")
    assert 14e-6 < c.latency_s < 1e-3


def test_a_collective_with_nothing_to_move_says_none():
    """A group of one rank or an empty message costs nothing and names no algorithm (`none`, as the transfer tables
    print it)."""
    sysm, cal = system("dgx-h100"), calibration_for("H100-SXM5-80GB")
    lone = span_of(1, ranks_per_domain=1, domains=1, axis="dp")
    pair = span_of(2, ranks_per_domain=2, domains=1, axis="dp")
    for c in (collective_time("all_reduce", 1e6, lone, sysm, cal), collective_time("all_gather", 0.0, pair, sysm, cal)):
        assert (c.time_s, c.algorithm, c.bottleneck_tier, c.protocol) == (0.0, "none", "none", "")


def test_ring_flows_follow_the_rails_or_the_ring_itself():
    """Inter-node flows of a ring (network.contention.ring_pairs, 8 GPUs a node). Members spread evenly (ranks 0, 1
    on node 0 and 8, 9 on node 1): member j of a node sends to member j of the next node — 0→8, 1→9, 8→0, 9→1.
    Spread unevenly (0, 1, 2 on node 0 and 8 on node 1): the fewest members' one rail carries the ring (what
    network.paths prices, r = 1), 0→8→0; the others reach rank 0 over NVLink. A group on one node has no
    inter-node flow."""
    src, dst = ring_pairs(np.array([[0, 1, 8, 9]]), 8)
    assert list(zip(src.tolist(), dst.tolist())) == [(0, 8), (1, 9), (8, 0), (9, 1)]
    src, dst = ring_pairs(np.array([[0, 1, 2, 8]]), 8)
    assert list(zip(src.tolist(), dst.tolist())) == [(0, 8), (8, 0)]
    src, dst = ring_pairs(np.array([[0, 1, 2, 3]]), 8)
    assert src.size == dst.size == 0


def test_a_fabric_without_nics_names_the_field():
    base = dict(num_gpus=16, gpus_per_node=8, scale_up_domain=8, scale_up_bw_bytes_per_s=450e9,
                nic_bw_bytes_per_s=50e9)
    FabricSpec(**base)
    with pytest.raises(SpecError) as err:
        FabricSpec(**base, nics_per_gpu=0.0)
    assert err.value.field == "fabric.nics_per_gpu"


def test_two_data_parallel_replicas_may_shard_their_optimizer():
    """An unpublished ZeRO stage is chosen among 1, 0, 2, 3 as soon as there are two ranks to shard over (dp·cp ≥ 2;
    with one there is nothing to shard): Llama-3 8B on 2 H100 in BF16 does not fit unsharded (16 GB weights, 32 GB
    fp32 gradients, 96 GB of Adam state), so the chooser must shard it."""
    plan = Plan(dp=2, gbs=8, zero_stage=0)
    s = Scenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=plan, num_gpus=2)
    assert not predict(s).memory.fits
    chosen = predict(dataclasses.replace(s, open_knobs=("zero_stage",)))
    assert chosen.scenario.plan.zero_stage in (1, 2, 3)
    assert dict(chosen.scenario.chosen)["zero_stage"].endswith("of 4 settings tried (not published)")


def test_pipeline_neighbours_across_nodes_are_one_rank_a_node():
    """With tp 8 the pipeline neighbours are 8 ranks apart: two nodes of one rank each (not two ranks on a node)."""
    far = transfer_span(Scenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=Plan(tp=8, pp=2, gbs=2),
                                 num_gpus=16), "pp")
    assert (far.size, far.ranks_per_node, far.nodes) == (2, 1, 2)
    near = transfer_span(Scenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=Plan(tp=2, pp=4, gbs=4),
                                  num_gpus=8), "pp")
    assert (near.size, near.ranks_per_node, near.nodes) == (2, 2, 1)


def test_both_legs_of_a_deduplicating_dispatch_run_on_the_expert_group():
    """The inter-node and intra-node legs of a deduplicating expert dispatch are placed on the expert-parallel group
    (ep); a dp transfer with context parallelism on dp × cp; anything else on its own axis."""
    plan = Plan(dp=4, cp=2, ep=8, gbs=8)
    assert (sync_group("ep_inter", plan), sync_group("ep_intra", plan)) == ("ep", "ep")
    assert (sync_group("dp", plan), sync_group("tp", plan)) == ("dpcp", "tp")


def test_unpublished_knobs_are_chosen_with_the_calibration_the_prediction_uses():
    """`predict(scenario, calibration)` prices its candidates for an unpublished ZeRO stage with that calibration: the
    choice is the fastest fitting candidate (first of 1, 0, 2, 3 on a tie) as `predict` prices each with the same
    profile. A profile whose overlapped communication costs the computation nothing (overlap_compute_slowdown 0)
    makes ZeRO-3's per-micro-batch gathers free and picks another stage than the shipped profile on Llama-3 8B on 8
    H100 — so the test tells the two profiles apart."""
    s = load_scenario("llama3-8b-h100-8")
    open_ = dataclasses.replace(s, open_knobs=("zero_stage",))
    free = dataclasses.replace(calibration_for("H100-SXM5-80GB"), overlap_compute_slowdown=0.0)
    priced = []
    for z in (1, 0, 2, 3):
        p = predict(dataclasses.replace(s, plan=dataclasses.replace(s.plan, zero_stage=z)), free)
        if p.memory.fits:
            priced.append((p.step_time_s, z))
    best = min(priced, key=lambda t: t[0])[1]  # min keeps the first of equal times: the candidates' order
    assert predict(open_, free).scenario.plan.zero_stage == best
    assert predict(open_).scenario.plan.zero_stage != best
    same = resolve_open_knobs(open_, lambda x: predict(x, free))
    assert same.plan.zero_stage == best


def test_an_expert_exchange_that_never_leaves_its_node_hides_nothing_and_costs_nothing(monkeypatch):
    """DeepSeek-V3, a deduplicating dispatch overlapped with the partner pass (ep_overlap), ep 8, on a system of one
    GPU per node and per scale-up domain. With node-limited routing to one node (max_nodes 1) the router picks that
    node by its experts' affinity, the token's own 1 time in 8: 7/8 of the tokens cross the fabric once, an
    nccl-tests all-to-all of tok·(7/8)·h·A·8/7 = tok·h·A bytes per rank (remote_nodes_per_token). Should no token
    leave its node (a routing that keeps every token home), the inter-node leg moves 0 bytes and its pass-pair
    overlap has 0 to hide: the prediction is a finite step time and that leg exposes nothing (no 0/0 in the share
    of the hidden time)."""
    import narrowpath.workload.moe as moe_mod
    s = load_scenario("deepseek-v3-h800-2048")
    m = dataclasses.replace(s.model, moe=dataclasses.replace(s.model.moe, max_nodes=1))
    plan = dataclasses.replace(s.plan, tp=8, dp=s.plan.dp // 8, ep=8, ep_dispatch="dedup", ep_overlap=True, etp=1,
                               ep_dispatch_format="default")  # 16 bit both ways: one message size per leg
    sysm = s.system
    tiers = tuple(dataclasses.replace(t, domain_size=1) if t.name == "scale_up" else t for t in sysm.tiers)
    one = dataclasses.replace(sysm, tiers=tiers, gpus_per_node=1, name=sysm.name + "-1gpu")
    scn = dataclasses.replace(s, model=m, plan=plan, system=one, open_knobs=())
    p = predict(scn)
    inter = [t for t in p.transfers if t.axis == "ep_inter"]
    tok = moe_mod.local_tokens(m, plan)  # the tokens a rank dispatches
    assert inter and all(t.message_bytes == pytest.approx(tok * m.hidden * 2) for t in inter)
    monkeypatch.setattr(moe_mod, "remote_nodes_per_token", lambda *a: 0.0)
    p = predict(scn)
    assert 0 < p.step_time_s < float("inf")
    inter = [t for t in p.transfers if t.axis == "ep_inter"]
    assert inter and all(t.exposed_s == 0.0 for t in inter)