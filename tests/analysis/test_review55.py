"""A review of the analysis sections against the prediction (fifty-fifth session): each test reproduces one
contradiction it found — offload copies called pipeline traffic "over the network", a ZeRO-3 layer's working set
read from its shard, DualPipe's gradients counted as if every micro-batch ran both stages, the gradient sync's
group of a context-parallel job given as dp alone, a single GPU losing time waiting, the in-network-reduction
what-if labelled a plan change."""
from __future__ import annotations

import pytest

from narrowpath.analysis import analyze
from narrowpath.catalog import load_scenario
from narrowpath.report.prediction import breakdown_label
from narrowpath.schedule import predict
from tests.analysis.conftest import scenario_from_flags

OFFLOAD = ("system: dgx-h100\nmodel: llama3-8b\nnum_gpus: 8\nplan: {tp: 1, pp: 1, dp: 8, mbs: 1, gbs: 64, "
           "zero_stage: 1, recompute: none, offload_layers: 32, precision: bf16, dp_overlap: true}\n")


@pytest.fixture(scope="module")
def offload(tmp_path_factory):
    path = tmp_path_factory.mktemp("offload") / "offload.yaml"
    path.write_text(OFFLOAD)
    return analyze(scenario_from_flags([str(path)]))


def test_offload_copies_are_named_as_what_they_are(offload):
    """No pipeline here (pp 1): the breakdown's pipeline bucket holds only the activations' copies to host memory
    and back, which the verdict once called "exposed pipeline communication over the network" with no remedy."""
    p = offload.prediction
    host = sum(t.exposed_s for t in p.transfers if t.axis == "host")
    assert host > 1.0 and p.breakdown_s["exposed_pp_comm"] == pytest.approx(host, rel=1e-9)
    assert breakdown_label(p, "exposed_pp_comm") == "exposed activation offload copies (host link)"
    assert offload.verdict.sentence.startswith("The narrowest path is exposed activation offload copies over the "
                                               "host link")
    assert "pipeline" not in offload.verdict.sentence
    wis = {w.change: w for w in offload.verdict.what_ifs}
    assert wis["recompute_full"].status == "faster"  # the 32 layers recomputed instead of copied
    assert wis["recompute_full"].scenario.plan.offload_layers == 0
    # the communication budget carries the host link: its exposed time is the breakdown's
    tiers = {t.tier: t for t in offload.communication.tiers}
    assert tiers["host"].exposed_s == pytest.approx(host, rel=1e-9)
    assert tiers["host"].bytes_per_step == pytest.approx(
        {r.level: r for r in offload.data_movement}["host"].bytes_per_step)


def test_a_plan_without_offloading_keeps_the_pipeline_label():
    p = analyze(load_scenario("llama3-70b-h100-256")).prediction
    assert breakdown_label(p, "exposed_pp_comm") == "exposed PP communication"


def test_zero3_working_set_is_the_gathered_layer():
    """Llama-3 8B under ZeRO-3 on 64 GPUs: a layer is 4,096·6,144 + 4,096² + 3·4,096·14,336 + 2·4,096 =
    218,112,000 parameters, gathered whole in BF16 (436.2 MB) before its GEMMs; its gradient 872.4 MB in FP32
    before the reduce-scatter — not a 64th of them (the shard the rank keeps)."""
    a = analyze(scenario_from_flags(["--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "64", "--gbs", "64",
                                     "--zero", "3"]))
    items = {i.item: i for i in a.distance.items}
    layer = 4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096
    assert layer == 218_112_000
    assert items["weights"].working_set_bytes == pytest.approx(2 * layer)
    assert items["gradients"].working_set_bytes == pytest.approx(4 * layer)


def test_dualpipe_gradients_are_touched_by_half_the_micro_batches_each():
    """DeepSeek-V3 on 2,048 H800 (DualPipe, pp 16, 120 micro-batches): each micro-batch's backward accumulates into
    one of the rank's two stages (weighted by their layers), so the gradients
    are read and written m times in all, plus the sync's and the optimizer's reads: m + 2 = 122, not 2m + 2."""
    a = analyze(load_scenario("deepseek-v3-h800-2048"))
    m = a.prediction.workload.num_microbatches
    assert m == 120
    grads = {i.item: i for i in a.distance.items}["gradients"]
    stages = a.prediction.workload.stages
    crit = a.distance.stage
    p = a.prediction.scenario.plan.pp
    la, lb = stages[crit].layers, stages[p - 1 - crit].layers
    share = (0.5 * la + 0.5 * lb) / (la + lb)
    assert grads.accesses_per_step == pytest.approx(2 * m * share + 2)
    assert grads.accesses_per_step < 2 * m


def test_the_gradient_syncs_group_spans_dp_times_cp():
    """Llama-3 70B with cp 2 and dp 4 (tp 8 a node): the gradient sync runs over the 8 ranks of dp × cp
    (the inventory's group), on 8 nodes; the topology once listed dp's 4."""
    a = analyze(scenario_from_flags(["--model", "llama3-70b", "--system", "dgx-h100", "--gpus", "256", "--tp", "8",
                                     "--pp", "4", "--cp", "2", "--dp", "4", "--gbs", "64"]))
    dp = {x.axis: x for x in a.topology.axes}["dp"]
    sync = [r for r in a.collectives if r.name.startswith("dp.grad_")]
    assert sync and sync[0].group_size == 8
    assert (dp.degree, dp.nodes) == (8, 8)


def test_a_single_gpu_loses_no_time_waiting():
    a = analyze(scenario_from_flags(["--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "1", "--dp", "1",
                                     "--gbs", "8", "--zero", "0"]))
    sim = a.synchronisation.simulated
    assert sim.jitter_wait_s == 0 and sim.lost_time_s_by_cause == () and sim.wait_s_by_collective == ()


def test_in_network_reduction_is_a_fabric_change():
    a = analyze(load_scenario("llama3-405b-h100-16k"))
    assert a.communication.in_network_reduction
    assert all(w.kind == "fabric" for w in a.communication.in_network_reduction)


# the review of the session's own change


def test_pipeline_sends_and_offload_copies_are_named_together(tmp_path):
    """pp 2 with layers offloaded: the bucket holds both, and says so (the mixed label had no test)."""
    path = tmp_path / "both.yaml"
    path.write_text("system: dgx-h100\nmodel: llama3-8b\nnum_gpus: 16\nplan: {tp: 1, pp: 2, dp: 8, mbs: 1, gbs: 64, "
                    "zero_stage: 1, recompute: none, offload_layers: 12, precision: bf16, dp_overlap: true}\n")
    a = analyze(scenario_from_flags([str(path)]))
    p = a.prediction
    exposed = {ax: sum(t.exposed_s for t in p.transfers if t.axis == ax) for ax in ("pp", "host")}
    assert exposed["pp"] > 0 and exposed["host"] > 0
    assert breakdown_label(p, "exposed_pp_comm") == "exposed PP communication + activation offload copies"
    from narrowpath.analysis.verdict import pp_bucket_label
    label = pp_bucket_label(p)
    assert label.startswith("exposed pipeline communication over ") and label.endswith(
        " and activation offload copies over the host link")


def test_a_recompute_what_if_offloads_nothing(offload):
    """A recompute leaves nothing to offload (Megatron-Core refuses offloading beside it), and the copies priced
    for an offloading plan are the un-recomputed layers' saved tensors: the what-if drops them, and says so."""
    wis = {w.change: w for w in offload.verdict.what_ifs}
    for rc in ("recompute_selective", "recompute_full"):
        assert wis[rc].scenario.plan.offload_layers == 0 and wis[rc].description.endswith("(offload none)")
        assert not any(t.axis == "host" for t in predict(wis[rc].scenario).transfers)


def test_recomputing_the_offloaded_layers_is_offered_only_where_it_can_run():
    """Llama-3 405B offloads its one layer a chunk: recomputing it is the full recompute the loop already tries;
    under CUDA graphs no partial recompute runs (spec.plan) — neither offers `recompute_offloaded`."""
    import dataclasses

    from narrowpath.analysis.context import build_context
    from narrowpath.analysis.remedies import plan_candidates

    def offered(scn) -> set[str]:
        return {c.change for c in plan_candidates(build_context(predict(scn)))}

    scn = load_scenario("llama3-405b-h100-16k")
    assert "recompute_offloaded" not in offered(scn)
    graphs = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, vpp=4, offload_layers=1, cuda_graphs=True))
    assert "recompute_offloaded" not in offered(graphs)
    eager = dataclasses.replace(graphs, plan=dataclasses.replace(graphs.plan, cuda_graphs=False))
    assert "recompute_offloaded" in offered(eager)


def test_an_offloaded_layers_working_set_is_one_offloaded_layer(tmp_path):
    """24 of Llama-3 8B's 32 layers offloaded: a layer's saved tensors are the offloaded bytes over 24, not 32."""
    path = tmp_path / "part.yaml"
    path.write_text(OFFLOAD.replace("offload_layers: 32", "offload_layers: 24"))
    a = analyze(scenario_from_flags([str(path)]))
    off = {i.item: i for i in a.distance.items}["activations_offloaded"]
    from narrowpath.cost.memory import in_flight_microbatches
    infl = in_flight_microbatches(0, a.prediction.scenario)
    assert off.working_set_bytes == pytest.approx(off.bytes_per_rank / (24 * infl))


def test_zero3_working_set_of_an_moe_layer_adds_its_experts():
    """Mixtral 8x7B under ZeRO-3 at ep 8: a layer gathers its dense part (4,096·6,144 + 4,096² + 8·4,096 router +
    2·4,096 norms = 41,984,000 parameters, 84.0 MB) and its rank's expert (3·4,096·14,336 = 176,160,768, 352.3 MB)
    on their two groups: 436.3 MB, not the expert gather alone."""
    a = analyze(scenario_from_flags(["--model", "mixtral-8x7b", "--system", "dgx-h100", "--gpus", "16", "--tp", "1",
                                     "--pp", "1", "--dp", "16", "--ep", "8", "--mbs", "1", "--gbs", "64", "--zero",
                                     "3", "--recompute", "full"]))
    w = {i.item: i for i in a.distance.items}["weights"]
    assert 4096 * 6144 + 4096 * 4096 + 8 * 4096 + 2 * 4096 == 41_984_000
    assert w.working_set_bytes == pytest.approx(2 * (41_984_000 + 3 * 4096 * 14336))


def test_compare_names_the_offload_copies(offload):
    """`compare` explained the copies going away as "HOST point-to-point sends disappear in B"."""
    from narrowpath.analysis.compare import comm_sentences
    b = analyze(next(w for w in offload.verdict.what_ifs if w.change == "recompute_full").scenario)
    said = comm_sentences(offload, b, "exposed_pp_comm")
    assert any(x.startswith("activation offload copies (host link) disappear in B") for x in said)
    assert not any("HOST" in x or "point-to-point" in x for x in said)
