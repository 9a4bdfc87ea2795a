"""Values the seed-15 mutation sample (benchmarks/mutation.py --sample 300 --seed 15) found unguarded in the training
model's stages (workload/, cost/, network/), each pinned by a property or a hand calculation."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import calibration_for, load_scenario, system
from narrowpath.cost.collectives import collective_time, p2p
from narrowpath.errors import SpecError
from narrowpath.network.paths import path_model
from narrowpath.network.placement import contiguous_span, span_of
from narrowpath.workload.build import build_workload
from narrowpath.workload.items import Op
from narrowpath.workload.ops import backward_ops

KINDS = {"matrix", "flash", "vector"}


def _workloads():
    for name in ("llama3-8b-h100-8", "deepseek-v3-h800-2048", "gpt3-175b-a100-1024"):
        s = load_scenario(name)
        for kernel in ("flash", "unfused"):
            yield name, kernel, build_workload(s, kernel)
    # per-tensor FP8 primary weights add the optimizer's weight cast and transpose (workload.build.optimizer_ops)
    s = load_scenario("llama3-8b-h100-8")
    s = dataclasses.replace(s, plan=dataclasses.replace(s.plan, precision="fp8", fp8_params=True, zero_stage=1))
    yield "llama3-8b fp8 primary weights", "flash", build_workload(s, "flash")


def test_every_op_has_a_known_kind_and_a_dtype():
    """Every op of a step — layers and optimizer — is one of the three kinds the roofline prices (`items.Op.kind`:
    matrix, flash, vector) and names the dtype of its arithmetic (a string: the accounts and reports group by it),
    including the Adam update and the FP8 primary weights' cast."""
    names = set()
    for label, kernel, wl in _workloads():
        ops = [op for st in wl.stages for op, _ in st.ops] + [op for op, _ in wl.optimizer_ops]
        names |= {op.name for op in ops}
        bad = [(op.name, op.kind, op.dtype) for op in ops if op.kind not in KINDS or not isinstance(op.dtype, str)
               or not op.dtype]
        assert not bad, (label, kernel, bad)
    assert {"adam", "weight_cast"} <= names


def test_the_attention_core_reads_no_weights():
    """The unfused core's two products, Q·Kᵀ and P·V, multiply activations by activations: none of their bytes are
    weights (`Op.weight_bytes`, which the distance budget reads as weight traffic)."""
    wl = build_workload(load_scenario("gpt3-175b-a100-1024"), "unfused")
    core = [op for st in wl.stages for op, _ in st.ops if op.name.split(".")[0] in ("attn_scores", "attn_av")]
    assert {op.name.split(".")[0] for op in core} == {"attn_scores", "attn_av"}
    assert all(op.weight_bytes == 0.0 for op in core), [(op.name, op.weight_bytes) for op in core]


def test_the_backward_of_an_element_wise_op():
    """An element-wise op moves ~2x its forward bytes backward and launches at least one kernel; a placeholder
    that neither launches nor moves anything has no backward at all, while one that launches a kernel without
    moving bytes still launches it backward."""
    nothing = Op("marker", "vector", "fwd", 0.0, 0.0, "bf16", 0)
    launch_only = Op("sync_point", "vector", "fwd", 0.0, 0.0, "bf16", 1)
    norm = Op("ln", "vector", "fwd", 0.0, 1000.0, "bf16", 0)
    assert backward_ops([nothing]) == []
    (b,) = backward_ops([launch_only])
    assert (b.phase, b.kernels, b.hbm_bytes) == ("bwd", 1, 0.0)
    (b,) = backward_ops([norm])
    assert (b.kernels, b.hbm_bytes) == (1, 2000.0)


@pytest.fixture(scope="module")
def h100():
    s = system("dgx-h100")
    return s, calibration_for(s.device.name)


def test_an_inter_node_send_runs_ll_at_a_quarter_of_the_nic(h100):
    """A small send/recv between two nodes takes NCCL's LL protocol, whose multi-node bandwidth is a quarter of
    the link's (tuning.cc: LL busBw / 4 across nodes, / 3 only inside one): for 4 KB the bandwidth part of the time
    is 4 · S / NIC rate."""
    s, cal = h100
    pm = path_model(span_of(2, ranks_per_domain=1, domains=2), s, cal)
    S = 4096.0
    c = p2p("send_recv", S, pm)
    assert c.protocol == "LL" and c.bottleneck_tier == "scale_out"
    assert c.time_s - c.latency_s == pytest.approx(4.0 * S / pm.nic_bw, rel=1e-12)


def test_an_unknown_collective_names_the_known_ones(h100):
    """Bad input says what it accepts, comma separated (tests/cli/one_line.py's contract for every field)."""
    s, cal = h100
    with pytest.raises(SpecError) as e:
        collective_time("allreduce", 1e6, contiguous_span(8, s), s, cal)
    assert "known: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv" in str(e.value)


def test_the_path_model_memo_returns_the_stored_model(h100):
    """`path_model` sits on the hot path and is memoised per (span, system, calibration) object: the same objects
    give the same PathModel object back; another calibration object gives its own."""
    s, cal = h100
    span = contiguous_span(16, s)
    first = path_model(span, s, cal)
    assert path_model(span, s, cal) is first
    other = dataclasses.replace(cal)
    assert path_model(span, s, other) is not first


def test_a_partial_last_domain_counts_as_a_domain(h100):
    """12 ranks on 8-GPU nodes fill one NVLink domain and half of another: 2 domains and 2 nodes, whole numbers, the
    fewer members (4, in the half-filled one) bounding what crosses between them."""
    s, _ = h100
    span = contiguous_span(12, s)
    assert (span.domains, span.nodes, span.ranks_per_domain) == (2, 2, 4)
    assert isinstance(span.domains, int) and isinstance(span.nodes, int)
