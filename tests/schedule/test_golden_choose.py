"""How the knobs a source did not publish are chosen (schedule/choose.py), checked with a made-up price function
whose answer is known by construction: the stack's default when it documents one, else the fastest setting that
fits, else the one that overflows least; every choice is written down."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from narrowpath.catalog import model, system
from narrowpath.errors import SpecError
from narrowpath.schedule.choose import CANDIDATES, activation_strategies, resolve_open_knobs
from narrowpath.spec import Plan, Scenario


def _scn(open_knobs=(), **kw) -> Scenario:
    plan = Plan(**kw)
    return Scenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=plan, num_gpus=plan.num_gpus,
                    open_knobs=open_knobs)


def _price(table):
    """A price function: (step time, fits[, overflow bytes]) looked up by the plan's activation knobs and ZeRO."""
    def price(s):
        t, fits, *over = table[(s.plan.recompute, s.plan.recompute_layers, s.plan.offload_layers, s.plan.zero_stage)]
        if t is None:
            raise SpecError("plan", "cannot be placed")
        return SimpleNamespace(step_time_s=t, memory=SimpleNamespace(fits=fits, overflow_bytes=over[0] if over else
                                                                     (0 if fits else t)))
    return price


def test_activation_strategies_of_a_32_layer_chunk():
    """Chunk of 32 layers (pp 1), under an engine whose offloading the catalog does not know: keep all, selective,
    full; full for a quarter, half, three quarters of the chunk (8, 16, 24 layers); offload 8, 16, 24 or all 32
    layers' activations — 10 strategies."""
    out = activation_strategies(_scn())
    assert out[:3] == ({"recompute": "none"}, {"recompute": "selective"}, {"recompute": "full"})
    assert [d.get("recompute_layers") for d in out[3:6]] == [8, 16, 24]
    assert [d["offload_layers"] for d in out[6:]] == [8, 16, 24, 32]
    assert all(d["recompute"] == "none" for d in out[6:])
    assert len(activation_strategies(_scn(pp=4, vpp=2, gbs=4))) == 3 + 3 + 4  # chunks of 4 layers: 1, 2, 3


def test_megatron_cores_offloading_limits():
    """A stack on Megatron-Core's CPU offloading (stacks.yaml `cpu_offload`) is offered only what its
    TransformerConfig takes: fewer layers than the model has (31 of 32 at most), none with pipeline parallelism or
    under CUDA graphs, never beside a recompute."""
    mb = {"framework": "Megatron-Bridge / NeMo 26.04 container"}
    out = activation_strategies(_scn(**mb))
    assert [d["offload_layers"] for d in out if "offload_layers" in d] == [8, 16, 24, 31]
    assert all(d["recompute"] == "none" for d in out if "offload_layers" in d)
    assert not any("offload_layers" in d for d in activation_strategies(_scn(pp=4, vpp=2, gbs=4, **mb)))
    assert not any("offload_layers" in d for d in activation_strategies(_scn(cuda_graphs=True, **mb)))
    assert any("offload_layers" in d for d in activation_strategies(_scn(pp=4, vpp=2, gbs=4,
                                                                          framework="Meta internal stack")))


@pytest.mark.parametrize("layers, offloaded", [(1, []), (2, [1]), (4, [1, 2, 3]), (32, [8, 16, 24, 31])])
def test_megatron_core_offloads_fewer_layers_than_the_model_has(layers, offloaded):
    """cpu_offloading_num_layers below num_layers, each count offered once: a one-layer model offloads nothing."""
    from narrowpath.schedule.choose import activation_patches
    out = activation_patches(layers, pipelined=False)
    assert [d["offload_layers"] for d in out if "offload_layers" in d] == offloaded


def test_documented_defaults_of_the_other_knobs():
    """Megatron-LM's defaults (shared/validation/README.md): SP with tp > 1, no interleaving, micro-batch 1,
    dropless routing, overlap off, p2p context parallelism, the profile's attention; ZeRO tried 1, 0, 2, 3 when
    there is something to shard, else 0."""
    s = _scn(tp=2, dp=4, gbs=4)
    assert CANDIDATES["sequence_parallel"](s) == (True,) and CANDIDATES["sequence_parallel"](_scn()) == (False,)
    assert CANDIDATES["zero_stage"](s) == (1, 0, 2, 3) and CANDIDATES["zero_stage"](_scn()) == (0, 1)
    assert [CANDIDATES[k](s) for k in ("mbs", "vpp", "moe_routing", "dp_overlap", "tp_comm_overlap", "ep_overlap",
                                       "cp_comm", "attention", "etp", "framework", "precision", "ep")] == [
        (1,), (1,), ("dropless",), (False,), (False,), (False,), ("p2p",), ("auto",), (0,), ("",), ("bf16",), (1,)]


def test_an_unpublished_micro_batch_is_any_size_that_divides_a_ranks_share():
    """No stack documents a micro-batch default (Megatron-LM requires --micro-batch-size): every size up to 16 that
    divides gbs/dp is tried — 64 sequences over dp 4: 16 per rank → 1, 2, 4, 8, 16; 12 on one rank → 1, 2, 3, 4, 6,
    12."""
    assert CANDIDATES["mbs"](_scn(dp=4, gbs=64)) == (1, 2, 4, 8, 16)
    assert CANDIDATES["mbs"](_scn(gbs=12)) == (1, 2, 3, 4, 6, 12)
    assert CANDIDATES["mbs"](_scn(gbs=34)) == (1, 2)  # 17 and 34 are above the largest tried


def test_an_unpublished_expert_degree_divides_the_ranks_and_the_experts():
    """Megatron-Core subdivides the dp·cp ranks into expert groups: Mixtral's 8 experts on dp 16 → 1, 2, 4, 8 (16
    does not divide 8 experts); a dense model has no experts → 1."""
    mixtral = Scenario(system=system("dgx-h100"), model=model("mixtral-8x7b"), plan=Plan(dp=16, gbs=16),
                       num_gpus=16)
    assert CANDIDATES["ep"](mixtral) == (1, 2, 4, 8)
    on_8 = Scenario(system=system("dgx-h100"), model=model("mixtral-8x7b"), plan=Plan(dp=4, cp=2, gbs=4), num_gpus=8)
    assert CANDIDATES["ep"](on_8) == (1, 2, 4, 8)  # every rank of dp·cp = 8 its own expert
    assert CANDIDATES["ep"](_scn(dp=16, gbs=16)) == (1,)
    # tp 2 on 64 GPUs with etp 1 (Megatron-Bridge's): the expert layers re-use all 64 ranks of the stage, so ep 64
    # (as mb25-09's Qwen3-235B GB200 row publishes) is among those tried; with etp = tp (2) 32 ranks are left
    qwen = dataclasses.replace(mixtral, model=model("deepseek-v3"), plan=Plan(tp=2, dp=32, etp=1, gbs=32),
                               num_gpus=64)
    assert 64 in CANDIDATES["ep"](qwen)
    assert max(CANDIDATES["ep"](dataclasses.replace(qwen, plan=Plan(tp=2, dp=32, gbs=32)))) == 32


def test_zero_stages_are_tried_wherever_there_are_two_ranks_to_shard_over():
    """The distributed optimizer shards over the dp·cp ranks (Megatron-Core): two data-parallel ranks, or one with
    two context-parallel ranks, are enough to try every stage; one rank tries 0 and 1 (equal there)."""
    assert CANDIDATES["zero_stage"](_scn(dp=2, gbs=2)) == (1, 0, 2, 3)
    assert CANDIDATES["zero_stage"](_scn(cp=2, gbs=1)) == (1, 0, 2, 3)
    assert CANDIDATES["zero_stage"](_scn()) == (0, 1)


def test_the_fastest_setting_that_fits_is_chosen_and_recorded():
    """Of ZeRO 1 (10 s, fits), 0 (8 s, overflows), 2 (9 s, fits), 3 (12 s, fits): ZeRO-2 — the fastest that fits —
    and the note says how many settings were tried and that it was not published."""
    table = {("none", 0, 0, z): v for z, v in {1: (10.0, True), 0: (8.0, False), 2: (9.0, True),
                                               3: (12.0, True)}.items()}
    out = resolve_open_knobs(_scn(("zero_stage",), dp=4, gbs=4), _price(table))
    assert out.plan.zero_stage == 2 and out.open_knobs == ()
    assert out.chosen == (("zero_stage", "2 — fastest that fits in memory of 4 settings tried (not published)"),)


def test_a_knob_with_one_documented_setting_says_so():
    """An open `vpp` has one candidate (Megatron-LM's default, no interleaving): the note calls it that, not "the
    fastest of 1 setting"; beside it an open ZeRO stage is still the fastest of its four."""
    table = {("none", 0, 0, z): v for z, v in {1: (10.0, True), 0: (8.0, False), 2: (9.0, True),
                                               3: (12.0, True)}.items()}
    out = resolve_open_knobs(_scn(("vpp", "zero_stage"), dp=4, gbs=4), _price(table))
    assert dict(out.chosen) == {"vpp": "1 — the documented default, the only setting tried (not published)",
                                "zero_stage": "2 — fastest that fits in memory of 4 settings tried (not published)"}

def test_when_nothing_fits_the_least_overflow_is_chosen():
    """No setting fits: the one that overflows least, whatever its speed: ZeRO-3 (1 GB over, 12 s), not ZeRO-0
    (50 GB over, 8 s)."""
    table = {("none", 0, 0, z): (t, False, o) for z, t, o in ((1, 10.0, 5e9), (0, 8.0, 50e9), (2, 9.0, 20e9),
                                                              (3, 12.0, 1e9))}
    out = resolve_open_knobs(_scn(("zero_stage",), dp=4, gbs=4), _price(table))
    assert out.plan.zero_stage == 3 and "none fits in memory; the one that overflows least" in out.chosen[0][1]


def test_a_setting_that_cannot_be_placed_is_skipped():
    """ZeRO-1 cannot be placed (SpecError): it is skipped and the others still compete: ZeRO-2 (9 s) wins; when no
    setting can be placed the knob is refused, naming it."""
    table = {("none", 0, 0, 1): (None, True), ("none", 0, 0, 0): (8.0, False), ("none", 0, 0, 2): (9.0, True),
             ("none", 0, 0, 3): (12.0, True)}
    assert resolve_open_knobs(_scn(("zero_stage",), dp=4, gbs=4), _price(table)).plan.zero_stage == 2
    nothing = {k: (None, True) for k in table}
    with pytest.raises(SpecError, match=r"^plan\.zero_stage: is null \(not published\) and no setting of it gives a "
                                        r"consistent plan$"):
        resolve_open_knobs(_scn(("zero_stage",), dp=4, gbs=4), _price(nothing))


def test_recompute_patches_several_knobs_at_once():
    """An open `recompute` picks a whole strategy: here full recompute of 16 of 32 layers is the fastest fitting."""
    table = {("none", 0, 0, 0): (5.0, False), ("selective", 0, 0, 0): (6.0, False), ("full", 0, 0, 0): (9.0, True),
             ("full", 8, 0, 0): (8.0, False), ("full", 16, 0, 0): (7.0, True), ("full", 24, 0, 0): (7.5, True)}
    table |= {("none", 0, k, 0): (9.5, True) for k in (8, 16, 24, 32)}
    out = resolve_open_knobs(_scn(("recompute",)), _price(table))
    assert (out.plan.recompute, out.plan.recompute_layers) == ("full", 16)
    assert out.chosen[0][1].startswith("recompute='full', recompute_layers=16 — fastest that fits")


def test_stack_defaults_and_the_gpu_count_fill_knobs_without_pricing():
    """A Megatron-Bridge run leaves dp_overlap out: the stack's documented default (true) is taken, and an open dp
    is what the GPU count leaves: 16 / (tp 2 · pp 2) = 4; nothing is searched (the one plan left is priced once)."""
    scn = dataclasses.replace(_scn(tp=2, pp=2, dp=4, gbs=4, framework="Megatron-Bridge 0.2"),
                              open_knobs=("dp_overlap", "dp"))
    priced = []
    out = resolve_open_knobs(scn, lambda s: priced.append(s) or SimpleNamespace(
        step_time_s=1.0, memory=SimpleNamespace(fits=True, overflow_bytes=0)))
    assert len(priced) == 1
    assert out.plan.dp_overlap is True and out.plan.dp == 4
    assert out.chosen[0] == ("dp_overlap", "True — default of the megatron-bridge stack (not published)")
    assert out.chosen[1] == ("dp", "4 — what the GPU count leaves (not published)")


def test_a_knob_no_rule_can_choose_is_refused():
    with pytest.raises(SpecError, match="plan.gbs"):
        resolve_open_knobs(_scn(("gbs",)), lambda s: None)
    assert resolve_open_knobs(_scn(), lambda s: None) == _scn()
