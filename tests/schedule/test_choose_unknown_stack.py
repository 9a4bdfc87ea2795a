"""An engine no stack entry names (catalog/stacks.yaml): its interleaving and gradient-overlap knobs have no documented
default, so a validation case leaves them open unless it states them and the fastest setting that fits is taken
(shared/validation/README.md's rule, second half); a case with no framework, and every named stack, keep the
documented defaults. Values by hand in each docstring."""
from __future__ import annotations

import copy
import dataclasses

from narrowpath.catalog import model, store, system
from narrowpath.catalog.resolve import scenario_from_dict
from narrowpath.schedule.choose import CANDIDATES, candidates_for, interleave_degrees, resolve_open_knobs
from narrowpath.schedule.step import predict
from narrowpath.spec import Plan, Scenario

LLAMA3_405B_8K = {  # Dubey et al. 2024 ('The Llama 3 Herd of Models') Table 4, first row: 8,192 H100, tp 8, cp 1,
    # pp 16, dp 64, sequence 8,192, 32 sequences per data-parallel group (16 M tokens); interleaving, overlap and
    # recompute not in the table
    "model": {"layers": 126, "hidden": 16384, "heads": 128, "kv_heads": 8, "ffn": 53248, "ffn_act": "swiglu",
              "vocab": 128256, "seq_len": 8192},
    "hardware": {"gpu": "H100-SXM5-80GB", "num_gpus": 8192, "gpus_per_node": 8, "nic_gbps_per_gpu": 400},
    "plan": {"tp": 8, "pp": 16, "dp": 64, "ep": 1, "cp": 1, "mbs": 1, "gbs": 2048, "zero_stage": None,
             "recompute": None, "sequence_parallel": True, "precision": "bf16", "framework": "Meta internal (Llama 3)"},
}


def _case(**plan) -> Scenario:
    data = copy.deepcopy(LLAMA3_405B_8K)
    data["plan"].update(plan)
    return scenario_from_dict(data, allow_null=True)


def _scn(framework: str, **kw) -> Scenario:
    p = Plan(framework=framework, **kw)
    return Scenario(system=system("dgx-h100"), model=model("llama3-70b"), plan=p, num_gpus=p.num_gpus)


def test_interleave_degrees_divide_the_largest_stage():
    """126 layers on pp 16: stages of at most ceil(126/16) = 8 layers → 1, 2, 4, 8 chunks; Llama-3 70B's 80 on pp 4:
    20 → 1, 2, 4, 5 (10 and 20 are above the 8 tried); no pipeline → 1."""
    s = _case()
    assert interleave_degrees(s) == (1, 2, 4, 8)
    assert interleave_degrees(_scn("x", pp=4, dp=2, gbs=8)) == (1, 2, 4, 5)
    assert interleave_degrees(_scn("x", dp=8, gbs=8)) == (1,)
    assert interleave_degrees(_scn("x", pp=2, dp=4, gbs=8)) == (1, 2, 4, 5, 8)  # 40 a stage; 10, 20, 40 above 8
    s17 = _scn("x", pp=2, dp=4, gbs=8)
    s17 = dataclasses.replace(s17, model=dataclasses.replace(s17.model, layers=34))
    assert interleave_degrees(s17) == (1,)  # 17 layers a stage: prime, 17 chunks is above the 8 tried


def test_only_an_unnamed_engine_opens_the_knobs():
    """'Meta internal' matches no stack: vpp and overlap are tried; Megatron-LM and an empty framework keep
    Megatron-LM's single documented settings (vpp 1, overlap off); a single replica has nothing to overlap."""
    assert store.unknown_stack("Meta internal") and not store.unknown_stack("Megatron-LM")
    assert not store.unknown_stack("") and not store.unknown_stack(None)
    for text in (" ", "None", "n/a", "Unknown", "Megatron LM", "MegatronLM", "megatron_lm", "Megatron (NVIDIA, 2021)"):
        assert not store.unknown_stack(text), text  # no engine stated, or Megatron-LM however spelt
    assert store.stack_for("Megatron LM 2021")["id"] == "megatron-lm"
    assert store.stack_for("Megatron-DeepSpeed")["id"] == "deepspeed"
    meta = _scn("Meta internal", pp=4, dp=2, gbs=8)
    assert candidates_for(meta, "dp_overlap") == (False, True)
    assert candidates_for(meta, "vpp") == (1, 2, 4, 5)
    for fw in ("Megatron-LM core_r0.9", ""):
        s = _scn(fw, pp=4, dp=2, gbs=8)
        assert candidates_for(s, "vpp") == CANDIDATES["vpp"](s) == (1,)
        assert candidates_for(s, "dp_overlap") == (False,)
    assert candidates_for(_scn("Meta internal", pp=8, gbs=8), "dp_overlap") == (False,)
    assert candidates_for(_scn("Meta internal", cp=2, pp=4, gbs=8), "dp_overlap") == (False, True)  # cp reduces too
    assert candidates_for(meta, "tp_comm_overlap") == (False,)  # an engine feature: not opened


def test_a_case_of_an_unnamed_engine_leaves_them_open_unless_stated():
    """The Llama 3 row states neither vpp nor overlap: both open (with the nulls); a stated vpp stays; the same row
    naming Megatron-LM or no framework opens only its nulls."""
    assert set(_case().open_knobs) == {"zero_stage", "recompute", "vpp", "dp_overlap"}
    stated = _case(vpp=4, dp_overlap=False)
    assert set(stated.open_knobs) == {"zero_stage", "recompute"} and stated.plan.vpp == 4
    assert set(_case(framework="Megatron-LM").open_knobs) == {"zero_stage", "recompute"}
    assert set(_case(framework="").open_knobs) == {"zero_stage", "recompute"}


def test_the_chooser_takes_the_fastest_and_says_why():
    """With a made-up price where interleaving 4 and overlap are fastest (and vpp 8 does not fit), the chooser takes
    vpp 4 and overlap on, and its notes name the unnamed engine."""
    s = _case(zero_stage=1, recompute="none")

    class P:
        def __init__(self, t, fits):
            self.step_time_s, self.memory = t, type("M", (), {"fits": fits, "overflow_bytes": 0.0})()

    def price(c):
        v, ov = c.plan.vpp, c.plan.dp_overlap
        return P(10.0 / v - (1.0 if ov else 0.0), v != 8)

    out = resolve_open_knobs(s, price)
    assert (out.plan.vpp, out.plan.dp_overlap) == (4, True)
    notes = dict(out.chosen)
    assert "4 settings tried" in notes["vpp"] and "no known stack" in notes["vpp"]
    assert "no known stack" in notes["dp_overlap"]


def test_llama3_405b_priced_as_the_tuned_run_it_was():
    """End to end: the Table 4 row is priced with interleaving and overlap chosen, at least 20 % faster than with
    Megatron-LM's defaults forced (vpp 1, no overlap: a 15/32 bubble), MFU within 38-46 % (the paper: 43 %)."""
    chosen = predict(_case())
    assert chosen.scenario.plan.vpp > 1 and chosen.scenario.plan.dp_overlap
    forced = predict(_case(vpp=1, dp_overlap=False))
    assert chosen.step_time_s < 0.8 * forced.step_time_s
    assert 0.38 < chosen.mfu < 0.46


def test_deepspeed_is_a_stack_of_its_own():
    """Megatron-DeepSpeed (BLOOM, MT-NLG): its pipeline engine does not interleave and reduces gradients after the
    flush — vpp 1, overlap off filled as the stack's defaults, nothing opened."""
    s = _case(framework="Megatron-DeepSpeed")
    assert (s.plan.vpp, s.plan.dp_overlap, s.plan.tp_comm_overlap) == (1, False, False)
    assert set(s.open_knobs) == {"zero_stage", "recompute"}
    assert any(k == "vpp" and "deepspeed stack" in n for k, n in s.chosen)
    assert store.stack_for("EleutherAI GPT-NeoX v2.0")["id"] == "deepspeed"  # built on its pipeline engine


def test_validate_cli_prints_the_choice(tmp_path, capsys):
    """`narrowpath validate --corpus FILE --json` on the Llama 3 row: the chosen vpp and overlap are in the case's
    `chosen`, each naming the unnamed engine; exit 0 (the case is priced)."""
    import json

    import yaml

    from narrowpath.cli.main import main
    case = {"id": "l3", "source": "test", "kind": "training", "measured": {"step_time_s": 12.563},
            **copy.deepcopy(LLAMA3_405B_8K)}
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({"schema": "validation-corpus/1", "cases": [case]}))
    assert main(["validate", "--corpus", str(f), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    chosen = out["cases"][0]["chosen"]
    assert "no known stack" in chosen["vpp"] and "no known stack" in chosen["dp_overlap"]
    assert abs(out["cases"][0]["error"]) < 0.15


def test_activation_strategies_follow_each_interleaving_degree():
    """With vpp searched, the activation strategies are built for each degree's own chunks: at the chosen vpp 8 the
    126-layer model's chunks hold one layer, so no strategy offloads or recomputes more layers than that, and the
    note counts the strategies of a one-layer chunk: none, selective, full, offload it, and selective recompute of
    the MLP or of the norms and MLP (6; at vpp 1's 8-layer chunks there are 12)."""
    out = predict(_case()).scenario
    assert out.plan.vpp == 8 and out.plan.offload_layers <= 1 and out.plan.recompute_layers <= 1
    assert "of 6 settings tried" in dict(out.chosen)["recompute"]


class _Priced:
    def __init__(self, t, fits):
        self.step_time_s, self.memory = t, type("M", (), {"fits": fits, "overflow_bytes": t})()


def test_the_search_prices_what_it_should():
    """Counted prices: with vpp and overlap open, the first pass prices the 4 degrees and the second the 2 overlap
    settings on the winner (6, not 4 × 2); with vpp and recompute open, each degree prices its own chunk's
    strategies once (Σ over degrees, not that sum times vpp 1's list)."""
    from narrowpath.schedule.choose import recompute_strategies
    calls = []

    def price(c):
        calls.append(c.plan)
        return _Priced(10.0 / c.plan.vpp - c.plan.dp_overlap, True)
    resolve_open_knobs(_case(zero_stage=1, recompute="none"), price)
    assert len(calls) == 4 + 2
    calls.clear()
    s = _case(zero_stage=1, dp_overlap=True)
    resolve_open_knobs(s, price)
    per_degree = [len(recompute_strategies(_case(zero_stage=1, dp_overlap=True, vpp=v))) for v in (1, 2, 4, 8)]
    assert len(calls) == sum(per_degree) and per_degree[0] > per_degree[-1]


def test_notes_when_nothing_fits_or_one_setting_is_possible():
    """Where no combination fits, the overlap (second pass) says so too; a 9-layer stage allows 1 and 3 chunks
    only (9 is above the 8 tried); an unnamed engine without a pipeline has one interleaving 'this plan allows',
    not a documented default; a price that refuses every plan names the knob in one SpecError."""
    import pytest

    from narrowpath.errors import SpecError
    out = resolve_open_knobs(_case(zero_stage=1, recompute="none"), lambda c: _Priced(1.0 + c.plan.vpp, False))
    assert "none fits" in dict(out.chosen)["dp_overlap"]
    s9 = _scn("x", pp=8, dp=1, gbs=8)
    assert interleave_degrees(dataclasses.replace(s9, model=dataclasses.replace(s9.model, layers=72))) == (1, 3)
    flat = _case(zero_stage=1, recompute="none", pp=1, dp=1024)
    out = resolve_open_knobs(flat, lambda c: _Priced(1.0 - c.plan.dp_overlap * 0.1, True))
    assert dict(out.chosen)["vpp"] == "1 — the only setting this plan allows (not published)"

    def refuse(c):
        raise SpecError("plan", "cannot be placed")
    with pytest.raises(SpecError, match="plan.dp_overlap"):
        resolve_open_knobs(_case(zero_stage=1, recompute="none", vpp=1), refuse)


def test_a_refused_strategy_does_not_end_its_degree():
    """At vpp 8 the first activation strategy (keep everything) is refused; the next ones of that degree are still
    priced, and vpp 8 with selective recompute (10/8 + 0.5) beats vpp 4 keeping everything (10/4)."""
    from narrowpath.errors import SpecError

    def price(c):
        p = c.plan
        if p.vpp == 8 and p.recompute == "none" and not p.offload_layers:
            raise SpecError("plan", "refused")
        return _Priced(10.0 / p.vpp + (0.5 if (p.recompute != "none" or p.offload_layers) else 0.0), True)
    out = resolve_open_knobs(_case(zero_stage=1, dp_overlap=True), price)
    assert out.plan.vpp == 8 and out.plan.recompute == "selective"


def test_all_open_knobs_set_by_the_stack_and_refused_names_the_first():
    """A Megatron-Bridge case whose only null knob (tensor-parallel overlap) its stack sets: nothing is searched; a
    price refusing the plan names that knob."""
    import pytest

    from narrowpath.errors import SpecError
    s = _case(framework="Megatron-Bridge / NeMo 25.11 container", zero_stage=1, recompute="none", vpp=1,
              tp_comm_overlap=None)
    assert s.open_knobs == ("tp_comm_overlap",)

    def refuse(c):
        raise SpecError("plan", "cannot be placed")
    with pytest.raises(SpecError, match="plan.tp_comm_overlap"):
        resolve_open_knobs(s, refuse)
