"""Golden pipeline layout: which layers each stage holds, and the point-to-point traffic per micro-batch, by hand
(Narayanan et al. SC'21 §2.2; Megatron-Core's pipeline split options)."""
from __future__ import annotations

import pytest

from narrowpath.catalog import model, system
from narrowpath.spec import Plan, Scenario
from narrowpath.workload.split import max_pipeline_chunks, offload_fraction, recompute_fraction, stage_layer_ranges
from narrowpath.workload.build import build_workload, embedding_params


def layers_of(layers: int, pp: int, vpp: int) -> list[list[int]]:
    return [[i for r in stage for i in r] for stage in stage_layer_ranges(layers, pp, vpp)]


def test_126_layers_on_16_stages_of_8_chunks_count_embedding_and_loss_as_layers():
    """Megatron-Bridge's Llama-3.1 405B recipe: 126 layers on pp 16 × vpp 8 = 128 chunks, embedding and loss
    counted as one layer each (account_for_embedding/loss_in_pipeline_split): every chunk holds (126 + 2)/128 = 1
    layer except the first and the last, which hold none. Chunk j sits on stage j mod 16 and holds layer j − 1, so
    stage 0 holds layers 15, 31, …, 111 (7), stage 1 holds 0, 16, …, 112 (8), stage 15 holds 14, 30, …, 110 (7)."""
    split = layers_of(126, 16, 8)
    assert split[0] == [15, 31, 47, 63, 79, 95, 111]
    assert split[1] == [0, 16, 32, 48, 64, 80, 96, 112]
    assert split[15] == [14, 30, 46, 62, 78, 94, 110]
    assert [len(s) for s in split] == [7] + [8] * 14 + [7]
    assert max_pipeline_chunks(126) == 128


def test_layers_plus_two_divisible_drop_a_layer_at_both_ends():
    """30 layers on 4 stages: 30 mod 4 ≠ 0 but 32 mod 4 = 0: 8 per stage, one fewer on the first and last:
    [7, 8, 8, 7] = layers 0–6, 7–14, 15–22, 23–29."""
    assert layers_of(30, 4, 1) == [list(range(0, 7)), list(range(7, 15)), list(range(15, 23)), list(range(23, 30))]


def test_uneven_split_gives_the_extra_layers_to_the_middle_stages_first():
    """11 layers on 4 stages (13 mod 4 ≠ 0): 2 each and 3 extra, to the middle stages 1, 2 first, then the first:
    [3, 3, 3, 2]. 13 layers on 2 stages × 2 chunks (15 mod 4 ≠ 0): 3 per chunk and one extra; no middle stage,
    so chunk 0 takes it: chunks [4, 3, 3, 3], stage 0 = chunks 0 and 2 = layers 0–3 and 7–9."""
    assert [len(s) for s in layers_of(11, 4, 1)] == [3, 3, 3, 2]
    assert layers_of(13, 2, 2) == [[0, 1, 2, 3, 7, 8, 9], [4, 5, 6, 10, 11, 12]]
    assert layers_of(12, 1, 1) == [list(range(12))]


def _wl(**kw):
    plan = Plan(**kw)
    scn = Scenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=plan, num_gpus=plan.num_gpus)
    return build_workload(scn, "flash")


@pytest.mark.parametrize("vpp, expect", [(1, [0.5, 1.0, 1.0, 0.5]), (2, [1.5, 2.0, 2.0, 1.5])])
def test_pipeline_sends_per_microbatch(vpp, expect):
    """Per micro-batch a stage sends its activations once per chunk boundary it has downstream and receives once
    per boundary upstream; a rank's link time per micro-batch is (n_send + n_recv)/2 messages each way.
    pp 4, vpp 1: the first stage sends 1, receives 0 → 0.5; middle stages 1 + 1 → 1; the last 0 + 1 → 0.5.
    vpp 2: the first stage sends 2 (its 2 chunks), receives 1 (from the last stage's first chunk) → 1.5; middle
    2; the last 1.5. Message: b·s·h·A/t = 8192·4096·2/2 = 33,554,432 B (scatter-gather over tp 2); interleaving
    overlaps them with compute (Megatron-Core overlap_p2p_comm), plain 1F1B does not."""
    wl = _wl(tp=2, pp=4, vpp=vpp, gbs=8)
    for st, n in zip(wl.stages, expect):
        p2p = [(tr, c) for tr, c in st.transfers if tr.axis == "pp"]
        assert [(tr.name, tr.phase) for tr, _ in p2p] == [("pp.activation", "fwd"), ("pp.gradient", "bwd")]
        assert all(c == n and tr.message_bytes == 33_554_432 and tr.overlappable == (vpp > 1) for tr, c in p2p)


def test_recompute_and_offload_fractions():
    """Full recompute of 2 layers per chunk (Megatron --recompute-method block) on a stage of 8 layers in 2
    chunks: 2·2/8 = 0.5 of its layers; 0 = all; selective: none. Offloading 1 layer per chunk: 1·2/8 = 0.25."""
    assert recompute_fraction(Plan(pp=2, vpp=2, recompute="full", recompute_layers=2), 8) == 0.5
    assert recompute_fraction(Plan(recompute="full"), 8) == 1.0
    assert recompute_fraction(Plan(recompute="selective"), 8) == 0.0
    assert offload_fraction(Plan(pp=2, vpp=2, offload_layers=1), 8) == 0.25
    assert offload_fraction(Plan(), 8) == 0.0


def test_embedding_and_output_layer_parameters_per_stage():
    """Llama-3 8B, V 128256, h 4096, tp 2: the table is 128256·4096/2 = 262,668,288 per rank; untied, one pipeline
    stage holds both and the final norm (525,336,576 + 4,096); with pp the first holds the input table, the last
    the output layer and the final norm (262,668,288 + 4,096)."""
    scn = Scenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=Plan(tp=2), num_gpus=2)
    assert embedding_params(scn, True, True) == 525_336_576 + 4_096
    scn = Scenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=Plan(tp=2, pp=2), num_gpus=4)
    assert embedding_params(scn, True, False) == 262_668_288
    assert embedding_params(scn, False, True) == 262_668_288 + 4_096
    assert embedding_params(scn, False, False) == 0


def test_block_recompute_and_offload_count_per_chunk():
    """Megatron's block method re-runs (or offloads) the first k layers of every chunk, so a chunk holding fewer than
    k layers gives all it has: chunks of 1 and 3 layers with k = 2 cover 1 + 2 = 3 of 4 layers (0.75), where the
    stage's count alone (k·vpp / 4 = 1.0) would over-count; chunks of 2 and 2 cover 4 of 4 either way, and equal
    chunks reproduce the stage-count form bit for bit."""
    rc = Plan(pp=2, vpp=2, recompute="full", recompute_layers=2)
    off = Plan(pp=2, vpp=2, offload_layers=2)
    assert recompute_fraction(rc, (1, 3)) == 0.75 and offload_fraction(off, (1, 3)) == 0.75
    assert recompute_fraction(rc, 4) == 1.0 and recompute_fraction(rc, (2, 2)) == 1.0
    assert recompute_fraction(Plan(pp=2, vpp=2, recompute="full", recompute_layers=1), (3, 3)) == \
        recompute_fraction(Plan(pp=2, vpp=2, recompute="full", recompute_layers=1), 6)
    assert recompute_fraction(Plan(recompute="full"), (1, 3)) == 1.0 and offload_fraction(Plan(), (1, 3)) == 0.0
    assert recompute_fraction(rc, (0, 0)) == 1.0 and offload_fraction(off, (0, 0)) == 0.0


def test_a_stage_with_a_short_chunk_recomputes_what_its_chunks_hold():
    """Llama-3 8B on pp 2 × vpp 2 with chunks of 2, 14 | 14, 2 layers (stage 0: chunks 0 and 2, 2 + 14 layers) and a
    full recompute of 4 layers per chunk: stage 0 re-runs 2 + 4 = 6 of its 16 layers, so its recompute FLOPs are
    6/16 of a full recompute's (the stage count alone would say 4·2/16 = 8/16)."""
    import dataclasses
    from narrowpath.catalog import load_scenario
    from narrowpath.workload.build import build_workload
    s = load_scenario("llama3-8b-h100-8")
    plan = dataclasses.replace(s.plan, pp=2, vpp=2, dp=4, zero_stage=1, gbs=64, chunk_layers=(2, 14, 14, 2),
                               recompute="full")

    def recompute_flop(p) -> float:
        st = build_workload(dataclasses.replace(s, plan=p), "flash").stages[0]
        return sum(op.flop * c for op, c in st.ops if op.phase == "recompute")
    part = recompute_flop(dataclasses.replace(plan, recompute_layers=4))
    assert part == pytest.approx(6 / 16 * recompute_flop(plan), rel=1e-12)
