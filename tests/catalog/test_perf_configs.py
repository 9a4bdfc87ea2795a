"""A stack's published performance configs (catalog.perf_configs): a validation case equal to a config in stack,
model, GPU, format and whole stated layout takes the config's knobs for those it leaves unstated; a stated knob,
another layout, model, GPU count, stack, a null layout field or a scenario that is not a corpus case takes nothing;
stored versions that differ on a unit (or leave it to code not read) leave it alone; a malformed entry is refused in
one line naming the entry and field."""
from __future__ import annotations

import copy
import json
from importlib import resources

import pytest
import yaml

from narrowpath.catalog import perf_configs as pc
from narrowpath.catalog.perf_configs import LAYOUT_KEYS, SCHEMA, SHARDED, VERSION, checked, perf_configs
from narrowpath.catalog.resolve import scenario_from_dict
from narrowpath.cli.main import main
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
    entries = perf_configs()
    assert len(entries) > 500
    for r in entries:
        assert set(r["layout"]) == {*LAYOUT_KEYS, SHARDED} and r["versions"] and r["source"]
        assert all(VERSION.fullmatch(v) for v in r["versions"])
        # what the builders (and GPT-OSS's library recipe) train at: Llama 8,192 tokens, the MoE families 4,096
        assert r["model"]["seq_len"] == (8192 if r["config"].startswith("LLAMA") else 4096)
        Plan(**r["knobs"])
    assert len({v for r in entries for v in r["versions"]}) == 51
    # Megatron-FSDP runs are the Llama tables' (no MoE config version read sets use_megatron_fsdp)
    assert not any(r["layout"][SHARDED] for r in entries if not r["config"].startswith("LLAMA"))
    assert sum(r["layout"][SHARDED] for r in entries) > 40


@pytest.mark.parametrize("version, ok", [
    ("0013c9a8ed4d655cd4e8ad8f918b11588e53c85d", True), ("library id 52380640426", True),
    ("kocchop/Megatron-Bridge@6219b1a8fc23ce44fd96700ab87dfb5ff0b045b0", True),
    ("kocchop@6219b1a8fc23ce44fd96700ab87dfb5ff0b045b0", False), ("0013c9a", False), ("library id", False)])
def test_a_version_names_its_commit_and_a_forks_copy_its_repository(version, ok):
    assert bool(VERSION.fullmatch(version)) is ok


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
    assert notes["recompute_modules"].startswith("('mla_up_proj', 'mlp')")  # the value the plan holds


def test_the_config_changes_the_price():
    """Told that the run overlapped its expert all-to-all with another micro-batch's computation, the model hides
    most of the inter-node exchange that a run without the overlap pays in full."""
    raw = _raw_case()
    with_config = predict(_scenario(raw))
    plain = predict(_scenario(raw, corpus=None))
    assert with_config.step_time_s < 0.85 * plain.step_time_s
    assert with_config.breakdown_s["exposed_ep_comm"] < 0.5 * plain.breakdown_s["exposed_ep_comm"]


def test_a_stated_knob_is_kept():
    raw = _raw_case()
    raw["plan"]["recompute"] = "full"
    raw["plan"]["ep_overlap"] = False
    scn = _scenario(raw)
    assert scn.plan.recompute == "full" and scn.plan.recompute_modules == () and scn.plan.ep_overlap is False
    notes = dict(scn.chosen)
    assert "recompute" not in notes or CONFIG not in notes["recompute"]
    # the exchange (overlap and dispatcher) is one setting, and the case states part of it: the rest is not the
    # config's either (the stack's default stands)
    assert scn.plan.ep_dispatch == "dedup" and CONFIG not in notes["ep_dispatch"]
    assert scn.plan.recompute_modules == ()  # likewise recompute, stated whole
    # the config's CUDA graphs cannot run beside the stated full recompute (Megatron-LM refuses the pair): not taken
    assert scn.plan.cuda_graphs is False and "not taken" in notes["cuda_graphs"] and "full" in notes["cuda_graphs"]


def test_a_stated_selective_recompute_keeps_its_meaning():
    """The corpus's `selective` is the attention core (README): a case that states it keeps it, modules and all —
    recompute and its modules are one setting, the case's."""
    raw = _raw_case()
    raw["plan"]["recompute"] = "selective"
    scn = _scenario(raw)
    assert scn.plan.recompute == "selective" and scn.plan.recompute_modules == ()
    assert scn.plan.cuda_graphs is True


@pytest.mark.parametrize("fields", [{"gbs": 2048}, {"ep": 16}, {"vpp": 1}, {"mbs": 2}, {"pp": 4, "dp": 64}])
def test_another_layout_takes_nothing(fields):
    raw = _raw_case()
    raw["plan"].update(fields)
    scn = _scenario(raw)
    assert not any("performance config" in n for _, n in scn.chosen)
    assert scn.plan.ep_overlap is False and scn.plan.cuda_graphs is False


def test_another_gpu_count_model_format_or_stack_takes_nothing():
    for change in ({"hardware": {"gpu": "B300-SXM-288GB"}}, {"plan": {"precision": "fp8"}},
                   {"plan": {"framework": "NeMo 25.04 container"}},
                   {"hardware": {"num_gpus": 512}, "plan": {"dp": 64}},
                   {"model": {"layers": 59}}, {"model": {"seq_len": 8192}}, {"model": {"experts": 128}}):
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


@pytest.mark.parametrize("field", ["vpp", "ep", "mbs", "precision"])
def test_a_null_layout_field_matches_nothing(field):
    """A null field is not published: the tool's placeholder for it is not the run's value to match on."""
    raw = _raw_case()
    raw["plan"][field] = None
    scn = _scenario(raw)
    assert not any("performance config" in n for _, n in scn.chosen)


def _entry(**knobs) -> dict:
    base = next(r for r in perf_configs() if r["config"] == CONFIG and r["layout"]["pp"] == 8)
    out = {**copy.deepcopy(base), "knobs": {**base["knobs"], **knobs}}
    out["knobs"] = {k: v for k, v in out["knobs"].items() if v is not None}
    return out


def test_versions_that_disagree_leave_the_knob_alone(monkeypatch):
    monkeypatch.setattr(pc, "perf_configs", lambda: (_entry(ep_overlap=True), _entry(ep_overlap=False)))
    scn = _scenario(_raw_case())
    assert scn.plan.ep_overlap is False  # the tool's default, not either version
    assert "differ on it" in dict(scn.chosen)["ep_overlap"]
    assert scn.plan.cuda_graphs is True  # the knobs they agree on are taken


def test_a_version_that_leaves_a_knob_to_code_not_read_is_not_an_agreement(monkeypatch):
    monkeypatch.setattr(pc, "perf_configs", lambda: (_entry(), _entry(ep_overlap=None, ep_dispatch=None)))
    scn = _scenario(_raw_case())
    assert scn.plan.ep_overlap is False
    notes = dict(scn.chosen)
    assert notes["ep_overlap"].startswith("False — the tool's default") and "to code not read" in notes["ep_overlap"]
    # the stack's default still says where the dispatcher came from, with why the configs did not settle it
    assert "default of the megatron-bridge stack" in notes["ep_dispatch"] and "not taken" in notes["ep_dispatch"]


def test_an_overlap_whose_dispatcher_is_left_to_code_not_read_is_not_taken(monkeypatch):
    """The 1F1B all-to-all overlap hides the dispatcher's own traffic: with the dispatcher unknown the overlap is not
    a run the model can price, even where every version agrees on it."""
    monkeypatch.setattr(pc, "perf_configs", lambda: (_entry(ep_dispatch=None), _entry(ep_dispatch=None)))
    scn = _scenario(_raw_case())
    assert scn.plan.ep_overlap is False and "not taken" in dict(scn.chosen)["ep_overlap"]
    assert scn.plan.cuda_graphs is True
    monkeypatch.setattr(pc, "perf_configs", lambda: (_entry(ep_overlap=False, ep_dispatch=None),))
    assert _scenario(_raw_case()).plan.ep_overlap is False  # no overlap: nothing hides, the dispatcher may stay open
    assert "performance config" in dict(_scenario(_raw_case()).chosen)["ep_overlap"]


def test_recompute_and_its_modules_are_one_setting(monkeypatch):
    """Versions agreeing on `selective` but not on the modules settle neither: no version ran selective with the
    default modules."""
    monkeypatch.setattr(pc, "perf_configs", lambda: (_entry(), _entry(recompute_modules=["mla_up_proj"])))
    raw = _raw_case()
    scn = _scenario(raw)
    assert "recompute" in scn.open_knobs
    notes = dict(scn.chosen)
    assert "differ on it" in notes["recompute"] and "differ on it" in notes["recompute_modules"]


def test_a_config_without_recompute_is_taken(monkeypatch):
    e = _entry()
    e["knobs"] = {k: v for k, v in e["knobs"].items() if k not in ("recompute", "recompute_modules")}
    e["knobs"]["recompute"] = "none"
    monkeypatch.setattr(pc, "perf_configs", lambda: (e,))
    scn = _scenario(_raw_case())
    assert scn.plan.recompute == "none" and "recompute" not in scn.open_knobs


def _bad(**change) -> dict:
    e = _entry()
    e.update(change)
    return {"schema": SCHEMA, "configs": [e]}


@pytest.mark.parametrize("data, field", [
    ({"schema": SCHEMA, "configs": "x"}, "configs"),
    ({"configs": []}, "schema"),
    (_bad(stack="megatron-bridg"), "stack"),
    (_bad(gpu="B2OO"), "gpu"),
    (_bad(layout={**_entry()["layout"], "tp": 0}), "layout"),
    (_bad(versions=["abc"]), "versions"),
    (_bad(versions=[]), "versions"),
    (_bad(layout={"num_gpus": 256, "tp": 1}), "layout"),
    (_bad(model={"heads": 128}), "model"),
    (_bad(knobs={"ep_overlap": True, "tp_comm_overlap": True}), "knobs"),
    (_bad(knobs={"recompute_modules": ["mlp"]}), "knobs"),
    (_bad(knobs={"ep_dispatch": "carrier-pigeon"}), "knobs"),
    (_bad(precision="mxfp8"), "precision"),
    (_bad(precision=["mxpf8"]), "precision"),
    (_bad(model={"layers": "61"}), "model"),
    (_bad(source=" "), "source"),
])
def test_a_malformed_entry_is_refused_in_one_line(data, field):
    with pytest.raises(CatalogError) as exc:
        checked(data)
    msg = str(exc.value)
    assert "\n" not in msg and field in msg and "perf_configs.yaml" in msg


def test_a_missing_key_is_named():
    e = _entry()
    del e["source"]
    with pytest.raises(CatalogError, match="`source` is required"):
        checked({"schema": SCHEMA, "configs": [e]})


def test_the_catalog_command_lists_them(capsys):
    assert main(["catalog", "perf-configs"]) == 0
    out = capsys.readouterr().out
    assert "DEEPSEEK_V3_B200_FP8_MX_V2" in out and "256: pp8 vpp2 ep32 mbs1 gbs4096" in out
    assert max(len(line) for line in out.splitlines()) <= 120
    assert main(["catalog", "perf-configs", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["perf-configs"]
    assert len(rows) == len(perf_configs())
    b200 = [r for r in rows if r["config"] == "DEEPSEEK_V3_B200_FP8_MX_V2" and "ep32" in r["GPUs: layout"]]
    assert b200 and all(r["settings"] == "dedup+overlap, mla_up_proj+mlp, graphs" for r in b200)
    assert main(["catalog"]) == 0 and "PERF-CONFIGS" not in capsys.readouterr().out  # not in the default listing


CASE_REF = "{}#" + CASE_ID


def _predict_json(capsys, *flags) -> dict:
    path = resources.files("narrowpath.validate").joinpath("corpora/training-sweeps-public.yaml")
    assert main(["predict", CASE_REF.format(path), *flags, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_case_moved_off_its_layout_on_the_command_line_drops_the_configs_settings(capsys):
    """The settings belonged to the layout the config ran: `--gbs 2048` puts the exchange and graphs back to the
    defaults and chooses the recompute again, as validate would for that layout; a flag given keeps its value."""
    same = _predict_json(capsys)
    assert same["plan"]["cuda_graphs"] is True and CONFIG in same["chosen"]["ep_overlap"]
    moved = _predict_json(capsys, "--gbs", "2048")
    assert same["plan"]["ep_overlap"] is True and same["plan"]["ep_dispatch"] == "dedup"
    assert moved["plan"]["cuda_graphs"] is False and moved["plan"]["gbs"] == 2048
    assert moved["plan"]["ep_overlap"] is False and moved["plan"]["ep_dispatch"] == "dedup"  # the stack's default
    for knob in ("ep_overlap", "ep_dispatch", "cuda_graphs"):
        assert "command line changed" in moved["chosen"][knob] and CONFIG not in moved["chosen"][knob]
    assert "fastest that fits" in moved["chosen"]["recompute"]  # chosen again, not the config's
    stated = _predict_json(capsys, "--gbs", "2048", "--cuda-graphs")
    assert stated["plan"]["cuda_graphs"] is True and "cuda_graphs" not in stated["chosen"]


FSDP_CASE = "mb26-04-01-llama3-70b-gb300-n64-gbs256-fp8-tp1pp1cp1ep1vp1mbs2-fsdp"
FSDP_CONFIG = "LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_CS_V2"


def test_an_fsdp_case_takes_its_configs_activation_offloading():
    """The GB300 FP8 Llama-3 70B config runs Megatron-FSDP with 20 layers' activations offloaded to host memory
    (`cpu_offloading_num_layers=20`) and no recompute (the Llama recipes keep none): the table's FSDP row takes both,
    and nothing is left for the chooser."""
    raw = _raw_case(FSDP_CASE)
    assert raw["plan"]["zero_stage"] == 3 and raw["plan"]["recompute"] is None
    scn = _scenario(raw)
    assert (scn.plan.recompute, scn.plan.offload_layers, scn.plan.recompute_layers) == ("none", 20, 0)
    assert "recompute" not in scn.open_knobs
    notes = dict(scn.chosen)
    assert FSDP_CONFIG in notes["offload_layers"] and FSDP_CONFIG in notes["recompute"]


def test_sharding_is_part_of_the_layout():
    """A config's run shards or does not: the same degrees without Megatron-FSDP are another run (and an FSDP case
    is not a run of a config that does not shard)."""
    raw = _raw_case(FSDP_CASE)
    raw["plan"]["zero_stage"] = 1
    assert not any(FSDP_CONFIG in n for _, n in _scenario(raw).chosen)
    raw = _raw_case()
    raw["plan"]["zero_stage"] = 3
    scn = _scenario(raw)
    assert not any("performance config" in n for _, n in scn.chosen) and scn.plan.ep_overlap is False


def test_a_full_recompute_of_some_layers_is_taken(monkeypatch):
    """`recompute_num_layers=N` is Megatron's full recompute of N layers of each chunk (overrides.py: granularity
    full, method block)."""
    e = _entry()
    e["knobs"] = {k: v for k, v in e["knobs"].items() if k not in ("recompute", "recompute_modules", "cuda_graphs")}
    e["knobs"].update(recompute="full", recompute_layers=5)
    monkeypatch.setattr(pc, "perf_configs", lambda: (e,))
    scn = _scenario(_raw_case())
    assert (scn.plan.recompute, scn.plan.recompute_layers, scn.plan.offload_layers) == ("full", 5, 0)
    assert CONFIG in dict(scn.chosen)["recompute_layers"]


def test_versions_that_differ_on_the_offloading_leave_the_activations_alone(monkeypatch):
    e = _entry()
    e["knobs"] = {**{k: v for k, v in e["knobs"].items() if k not in ("recompute", "recompute_modules")},
                  "recompute": "none", "offload_layers": 20}
    f = copy.deepcopy(e)
    f["knobs"]["offload_layers"] = 40
    monkeypatch.setattr(pc, "perf_configs", lambda: (e, f))
    scn = _scenario(_raw_case())
    assert "recompute" in scn.open_knobs and "differ on it" in dict(scn.chosen)["offload_layers"]


@pytest.mark.parametrize("layout, knobs", [
    ({"fsdp": "yes"}, {}), ({"fsdp": None}, {}), ({}, {"recompute": "selective", "recompute_layers": 5}),
    ({}, {"recompute": "none", "offload_layers": -1})])
def test_a_malformed_sharding_or_activation_setting_is_refused(layout, knobs):
    e = _entry()
    e["layout"] = {**e["layout"], **layout}
    e["knobs"] = {**e["knobs"], **knobs}
    if "recompute" in knobs and knobs["recompute"] != "selective":
        e["knobs"].pop("recompute_modules", None)
    with pytest.raises(CatalogError) as exc:
        checked({"schema": SCHEMA, "configs": [e]})
    msg = str(exc.value)
    assert "\n" not in msg and ("layout" in msg or "knobs" in msg) and "perf_configs.yaml" in msg


def test_a_moved_fsdp_case_chooses_its_activations_again(capsys):
    path = resources.files("narrowpath.validate").joinpath("corpora/training-sweeps-public.yaml")
    assert main(["predict", f"{path}#{FSDP_CASE}", "--json"]) == 0
    same = json.loads(capsys.readouterr().out)
    assert same["plan"]["offload_layers"] == 20 and FSDP_CONFIG in same["chosen"]["offload_layers"]
    assert main(["predict", f"{path}#{FSDP_CASE}", "--gbs", "512", "--json"]) == 0
    moved = json.loads(capsys.readouterr().out)
    assert FSDP_CONFIG not in json.dumps(moved["chosen"]) and "fastest that fits" in moved["chosen"]["recompute"]


def test_off_its_layout_resets_the_whole_activation_setting():
    """The recompute goes back to the chooser, and the layers recomputed or offloaded with it go back to none."""
    mark = f"20 — megatron-bridge{pc.CONFIG_MARK} ({FSDP_CONFIG} @ abc; catalog/perf_configs.yaml)"
    chosen = (("recompute", mark.replace("20", "'none'", 1)), ("offload_layers", mark),
              ("recompute_layers", mark.replace("20", "5", 1)), ("attention", "'flash' — default of the stack"))
    fields, reopen, notes = pc.off_its_layout(chosen, {})
    assert fields == {"offload_layers": 0, "recompute_layers": 0} and reopen == ("recompute",)
    assert notes == (("attention", "'flash' — default of the stack"),)


def test_a_layout_without_its_sharding_is_refused():
    e = _entry()
    e["layout"] = {k: v for k, v in e["layout"].items() if k != SHARDED}
    with pytest.raises(CatalogError, match="layout"):
        checked({"schema": SCHEMA, "configs": [e]})


@pytest.mark.parametrize("knobs, says", [({"offload_layers": 20}, "without recompute"),
                                         ({"recompute": "full", "offload_layers": 20}, "refuses CPU offloading"),
                                         ({"recompute_layers": 4}, "without recompute")])
def test_an_activation_setting_given_in_part_or_as_megatron_refuses_it_is_refused(knobs, says):
    e = _entry()
    e["knobs"] = {k: v for k, v in e["knobs"].items() if k not in pc.RECOMPUTE} | knobs
    with pytest.raises(CatalogError, match=says):
        checked({"schema": SCHEMA, "configs": [e]})


def _fsdp_json(capsys, *flags) -> dict:
    path = resources.files("narrowpath.validate").joinpath("corpora/training-sweeps-public.yaml")
    assert main(["predict", f"{path}#{FSDP_CASE}", *flags, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_sharding_moved_on_the_command_line_drops_the_configs_settings(capsys):
    """`--zero 1` turns the FSDP row into a run no config describes: the offloading it took goes, chosen again."""
    same = _fsdp_json(capsys)
    assert same["plan"]["zero_stage"] == 3 and same["plan"]["recompute_layers"] == 0
    moved = _fsdp_json(capsys, "--zero", "1")
    assert FSDP_CONFIG not in json.dumps(moved["chosen"])


def test_a_recompute_given_on_the_command_line_replaces_the_configs_offloading(capsys):
    """Megatron-Core offloads no activations beside a recompute: `--recompute full` on the FSDP row (whose config
    offloads 20 layers) recomputes every layer and offloads none, and no note names the config's offloading."""
    out = _fsdp_json(capsys, "--recompute", "full")
    assert (out["plan"]["recompute"], out["plan"]["offload_layers"], out["plan"]["recompute_layers"]) == ("full", 0, 0)
    assert "offload_layers" not in out["chosen"] and "recompute" not in out["chosen"]


def test_the_listing_says_sharding_offloading_and_layers(capsys):
    assert main(["catalog", "perf-configs", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["perf-configs"]
    fsdp = [r for r in rows if r["config"] == "LLAMA3_70B_GB300_FP8_CS_V2" and r["GPUs: layout"].endswith("fsdp")]
    assert fsdp and all(r["settings"] == "no recompute, 20 layers offloaded" for r in fsdp)
    layers = [r for r in rows if r["config"] == "LLAMA3_8B_H100_FP8_CS_V1"]
    assert layers and all(r["settings"] == "full recompute of 5 layers" for r in layers)
    assert not any(r["GPUs: layout"].endswith("fsdp") for r in rows if not r["config"].startswith("LLAMA"))


@pytest.mark.parametrize("field, value", [("ffn", 14336), ("vocab", 32000), ("layers", 79), ("seq_len", 4096)])
def test_a_dense_model_is_named_by_its_shape_and_vocabulary(field, value):
    """Llama-2 70B has Llama-3 70B's layers, width and MLP: the vocabulary tells them apart, and any other field."""
    raw = _raw_case(FSDP_CASE)
    raw["model"][field] = value
    assert not any(FSDP_CONFIG in n for _, n in _scenario(raw).chosen)


def test_another_mode_on_the_command_line_drops_a_full_recomputes_layer_count(capsys, monkeypatch):
    """A config's full recompute of 5 layers, and `--recompute selective` given: the layer count goes with the mode
    it belonged to (spec.plan refuses recompute_layers beside selective)."""
    e = _entry()
    e["knobs"] = {k: v for k, v in e["knobs"].items() if k not in (*pc.RECOMPUTE, "cuda_graphs")}
    e["knobs"].update(recompute="full", recompute_layers=5)
    monkeypatch.setattr(pc, "perf_configs", lambda: (e,))
    full = _predict_json(capsys)
    assert (full["plan"]["recompute"], full["plan"]["recompute_layers"]) == ("full", 5)
    out = _predict_json(capsys, "--recompute", "selective")
    assert (out["plan"]["recompute"], out["plan"]["recompute_layers"]) == ("selective", 0)
