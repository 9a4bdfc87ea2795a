"""`narrowpath compare`: every delta traces to the two sides' own `predict --json` / `analyze --json`, and each
change comes with one sentence saying what moved and why."""
from __future__ import annotations

import contextlib
import io
import json
import re

import pytest
import yaml

from narrowpath.catalog import scenario_data
from narrowpath.cli.main import main


def _json(argv: list[str]) -> dict:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    return json.loads(buf.getvalue())


def _at(doc, path: str):
    """Value at a delta's path; list items are addressed by their name (`transfers[tp.all_gather]`) and summed
    over rows of that name (phases), as the comparison does."""
    node = [doc]
    for key, name in re.findall(r"(\w+)(?:\[([^\]]+)\])?", path):
        node = [n[key] for n in node]
        if name:
            node = [x for n in node for x in n if name in (x.get("name"), x.get("level"), x.get("tier"))]
    vals = [v for v in node if v is not None]
    return None if not vals else sum(vals) if len(vals) > 1 else vals[0]


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    """The default scenario, and the same with DP placed first (TP groups across nodes), as two files."""
    d = tmp_path_factory.mktemp("cmp")
    base = {k: v for k, v in scenario_data("llama3-70b-h100-256").items() if k not in ("id", "description")}
    a, b = d / "a.yaml", d / "b.yaml"
    a.write_text(yaml.safe_dump({**base, "name": "A"}))
    b.write_text(yaml.safe_dump({**base, "name": "B", "plan": {**base["plan"],
                                                               "placement": ["dp", "tp", "cp", "ep", "pp"]}}))
    return str(a), str(b)


def test_every_delta_traces_to_each_sides_own_output(placed):
    a, b = placed
    doc = _json(["compare", a, b, "--json"])
    assert set(doc) >= {"a", "b", "deltas"}
    sides = {"predict": (_json(["predict", a, "--json"]), _json(["predict", b, "--json"])),
             "analyze": (_json(["analyze", a, "--json", "--no-what-ifs"]),
                         _json(["analyze", b, "--json", "--no-what-ifs"]))}
    assert doc["a"] == sides["predict"][0] and doc["b"] == sides["predict"][1]
    assert len(doc["deltas"]) > 40
    for d in doc["deltas"]:
        assert set(d) >= {"account", "item", "a", "b", "delta"}
        va, vb = (_at(s, d["path"]) for s in sides[d["source"]])
        assert d["a"] == pytest.approx(va, rel=1e-12, abs=1e-15), d
        assert d["b"] == pytest.approx(vb, rel=1e-12, abs=1e-15), d
        if d["delta"] is not None:
            assert d["delta"] == pytest.approx(d["b"] - d["a"], rel=1e-12, abs=1e-15)


def test_the_sentences_say_what_moved_and_why(placed):
    doc = _json(["compare", *placed, "--json"])
    s = doc["sentences"]
    assert s[0] == "B differs from A in: placement tp,cp,ep,dp,pp -> dp,tp,cp,ep,pp."
    tp = [x for x in s if x.startswith("TP all-gathers")]
    assert tp and "moved from the scale-up links (NVLink) to the NICs (scale-out): +" in tp[0]
    exposed = doc["b"]["breakdown_s"]["exposed_tp_comm"] - doc["a"]["breakdown_s"]["exposed_tp_comm"]
    assert f"+{exposed:.3g} s exposed" in tp[0]


def test_compare_with_the_top_what_if(capsys):
    """B = A's top-ranked what-if: its step is the what-if's step as `analyze --json` lists it."""
    doc = _json(["compare", "llama3-70b-h100-256", "--what-if", "top", "--json"])
    ana = _json(["analyze", "--json"])
    top = [w for w in ana["verdict"]["what_ifs"] if w["status"] == "faster"][0]
    assert doc["what_if"]["change"] == top["change"]
    assert doc["b"]["step_time_s"] == pytest.approx(top["step_s"], rel=1e-12)
    assert doc["a"]["step_time_s"] == pytest.approx(ana["prediction"]["step_time_s"], rel=1e-12)


def test_bad_compare_arguments_are_one_line(capsys, tmp_path):
    assert main(["compare", "llama3-70b-h100-256"]) == 2
    assert main(["compare", "llama3-70b-h100-256", "--what-if", "no_such_change"]) == 2
    assert main(["compare", "llama3-70b-h100-256", "gpt3-175b-a100-1024", "--html", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(e.startswith("narrowpath: error:") for e in err)


def test_a_change_of_critical_pipeline_rank_is_said():
    """DeepSeek-V3's DualPipe scenario sending 16 bit against its FP8 dispatch: the exchange paced rank 2 (stages 2
    and 13); with it shortened, rank 0 (stages 0 and 15: the embedding, the output layer and MTP) paces the
    pipeline. The accounts are the critical rank's, so compute grows though no work was added — the comparison
    says the rank moved before it says compute grew. The same scenario against itself moves no rank."""
    import dataclasses

    from narrowpath.analysis.analyze import analyze
    from narrowpath.analysis.compare import compare, critical_rank_sentence
    from narrowpath.catalog import load_scenario
    fp8 = load_scenario("deepseek-v3-h800-2048")
    bf16 = dataclasses.replace(fp8, plan=dataclasses.replace(fp8.plan, ep_dispatch_format="default"))
    a, b = analyze(bf16), analyze(fp8)
    assert (a.context.critical_stage, b.context.critical_stage) == (2, 0)
    said = compare(a, b).sentences
    moved = next(i for i, t in enumerate(said) if t.startswith("The critical pipeline rank moves"))
    assert "rank 2 (stages 2 and 13) to rank 0 (stages 0 and 15)" in said[moved]
    assert moved < next(i for i, t in enumerate(said) if t.startswith("Compute +"))
    assert critical_rank_sentence(b, b) == []


def test_what_changed_names_the_calibration_and_the_model_fields():
    """Fifty-sixth session's review: a scenario with `calibration: B200` beside the same one on H100's profile was
    'the same scenario' though its step moved 5 %; a copy of llama3-70b at sequence 4,096 read 'model llama3-70b ->
    llama3-70b' (the step halved)."""
    import dataclasses
    from types import SimpleNamespace

    from narrowpath.analysis.compare import scenario_differences
    from narrowpath.catalog import calibration_for, load_scenario
    from narrowpath.schedule.step import predict
    scn = load_scenario("llama3-70b-h100-256")
    a = SimpleNamespace(prediction=predict(scn))
    b = SimpleNamespace(prediction=predict(scn, calibration_for("B200")))
    assert scenario_differences(a, b) == ["calibration profile H100-SXM5-80GB -> B200"]
    short = dataclasses.replace(scn, model=dataclasses.replace(scn.model, seq_len=4096))
    assert scenario_differences(a, SimpleNamespace(prediction=predict(short))) == ["model.seq_len 8192 -> 4096"]
    assert scenario_differences(a, a) == []
