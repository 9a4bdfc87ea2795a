"""A stack's published performance configs (catalog.recipes): a validation case equal to a config in stack, model,
GPU, format and whole stated layout takes the config's knobs for those it leaves unstated; a stated knob, another
layout, another stack or a scenario that is not a corpus case takes nothing; stored versions that disagree on a
knob leave it alone; a malformed entry is refused in one line naming the entry and field."""
from __future__ import annotations

import copy
from importlib import resources

import pytest
import yaml

from narrowpath.catalog import recipes as recipes_mod
from narrowpath.catalog.recipes import LAYOUT_KEYS, VERSION, checked_recipes, recipes
from narrowpath.catalog.resolve import scenario_from_dict
from narrowpath.errors import CatalogError
from narrowpath.schedule.step import predict
from narrowpath.spec.plan import Plan

CASE_ID = "mb26-04-01-deepseek-v3-b200-n256-gbs4096-mxfp8-tp1pp8cp1ep32vp2mbs1"
CONFIG = "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2"


def _raw_case(case_id: str = CASE_ID) -> dict:
    text = resources.files("narrowpath.validate").joinpath("corpora/training-sweeps-public.yaml").read_text()
    raw = next(c for c in yaml.safe_load(text)["cases"] if c["id"] == case_id)
    return {k: copy.deepcopy(v) for k, v in raw.items() if k in ("model", "hardware", "plan")}


def _scenario(raw: dict, corpus: str | None = "training"):
    return scenario_from_dict(raw, name="c", allow_null=True, corpus=corpus)


def test_every_shipped_entry_is_well_formed():
    entries = recipes()
    assert len(entries) > 100
    for r in entries:
        assert set(r["layout"]) == set(LAYOUT_KEYS) and r["versions"] and r["source"]
        assert all(VERSION.fullmatch(v) for v in r["versions"])
        Plan(**{k: tuple(v) if k == "recompute_modules" else v for k, v in r["knobs"].items()})


def test_a_case_equal_to_a_config_takes_its_knobs():
    raw = _raw_case()
    assert raw["plan"]["recompute"] is None  # the table does not publish it
    scn = _scenario(raw)
    p = scn.plan
    assert (p.ep_overlap, p.ep_dispatch, p.recompute, p.recompute_modules, p.cuda_graphs, p.moe_sync_free) == \
        (True, "dedup", "selective", ("mla_up_proj", "mlp"), True, False)
    assert "recompute" not in scn.open_knobs  # the config settles it: nothing left for the chooser
    notes = dict(scn.chosen)
    for knob in ("ep_overlap", "recompute", "recompute_modules", "cuda_graphs"):
        assert CONFIG in notes[knob] and "performance config" in notes[knob]


def test_the_config_changes_the_price():
    """Told that the run overlapped its expert all-to-all with another micro-batch's computation, the model hides
    most of the inter-node exchange that a run without the overlap pays in full."""
    raw = _raw_case()
    with_recipe = predict(_scenario(raw))
    plain = predict(_scenario(raw, corpus=None))
    assert with_recipe.step_time_s < 0.85 * plain.step_time_s
    assert with_recipe.breakdown_s["exposed_ep_comm"] < 0.5 * plain.breakdown_s["exposed_ep_comm"]


def test_a_stated_knob_is_kept():
    raw = _raw_case()
    raw["plan"]["recompute"] = "full"
    raw["plan"]["ep_overlap"] = False
    scn = _scenario(raw)
    assert scn.plan.recompute == "full" and scn.plan.recompute_modules == () and scn.plan.ep_overlap is False
    notes = dict(scn.chosen)
    assert "recompute" not in notes or CONFIG not in notes["recompute"]
    assert scn.plan.ep_dispatch == "dedup" and CONFIG in notes["ep_dispatch"]  # unstated: still the config's
    # the config's CUDA graphs cannot run beside the stated full recompute (Megatron-LM refuses the pair): not taken
    assert scn.plan.cuda_graphs is False and "not taken" in notes["cuda_graphs"] and "full" in notes["cuda_graphs"]


def test_stated_selective_recompute_takes_the_configs_modules():
    raw = _raw_case()
    raw["plan"]["recompute"] = "selective"
    scn = _scenario(raw)
    assert scn.plan.recompute_modules == ("mla_up_proj", "mlp") and scn.plan.cuda_graphs is True


@pytest.mark.parametrize("field, value", [("gbs", 2048), ("ep", 16), ("vpp", 1), ("mbs", 2)])
def test_another_layout_takes_nothing(field, value):
    raw = _raw_case()
    raw["plan"][field] = value
    scn = _scenario(raw)
    assert not any("performance config" in n for _, n in scn.chosen)
    assert scn.plan.ep_overlap is False and scn.plan.cuda_graphs is False


def test_another_gpu_format_or_stack_takes_nothing():
    for change in ({"hardware": {"gpu": "B300-SXM-288GB"}}, {"plan": {"precision": "fp8"}},
                   {"plan": {"framework": "NeMo 25.04 container"}}):
        raw = _raw_case()
        for block, fields in change.items():
            raw[block].update(fields)
        scn = _scenario(raw)
        assert not any("performance config" in n for _, n in scn.chosen), change
        assert scn.plan.ep_overlap is False


def test_only_corpus_cases_are_matched():
    raw = _raw_case()
    raw["plan"]["recompute"] = "selective"
    scn = scenario_from_dict(raw, name="c")
    assert scn.plan.ep_overlap is False and not any("performance config" in n for _, n in scn.chosen)


def _entry(**knobs) -> dict:
    base = next(r for r in recipes() if r["config"] == CONFIG and r["layout"]["pp"] == 8)
    return {**copy.deepcopy(base), "knobs": {**base["knobs"], **knobs}}


def test_versions_that_disagree_leave_the_knob_alone(monkeypatch):
    monkeypatch.setattr(recipes_mod, "recipes", lambda: (_entry(ep_overlap=True), _entry(ep_overlap=False)))
    scn = _scenario(_raw_case())
    assert scn.plan.ep_overlap is False  # the tool's default, not either version
    assert "disagree" in dict(scn.chosen)["ep_overlap"]
    assert scn.plan.cuda_graphs is True  # the knobs they agree on are taken


def _bad(**change) -> dict:
    e = _entry()
    e.update(change)
    return {"recipes": [e]}


@pytest.mark.parametrize("data, field", [
    ({"recipes": "x"}, "recipes"),
    (_bad(versions=["abc"]), "versions"),
    (_bad(versions=[]), "versions"),
    (_bad(layout={"num_gpus": 256, "tp": 1}), "layout"),
    (_bad(model={"heads": 128}), "model"),
    (_bad(knobs={"ep_overlap": True, "tp_comm_overlap": True}), "knobs"),
    (_bad(knobs={"recompute_modules": ["mlp"]}), "knobs"),
    (_bad(knobs={"ep_dispatch": "carrier-pigeon"}), "knobs"),
    (_bad(precision="mxfp8"), "precision"),
])
def test_a_malformed_entry_is_refused_in_one_line(data, field):
    with pytest.raises(CatalogError) as exc:
        checked_recipes(data)
    msg = str(exc.value)
    assert "\n" not in msg and field in msg and "recipes.yaml" in msg


def test_a_missing_key_is_named():
    e = _entry()
    del e["source"]
    with pytest.raises(CatalogError, match="`source` is required"):
        checked_recipes({"recipes": [e]})
