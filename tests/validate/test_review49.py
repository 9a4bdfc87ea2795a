"""From the forty-ninth session's independent review of `validate`: a case missing a required plan field, the
regime a chosen knob puts a case in, and a corpus id that is not text."""
from __future__ import annotations

import copy

import pytest
import yaml

from narrowpath.cli.main import main
from narrowpath.validate.corpus import read_data_file, shipped_corpus_path
from narrowpath.validate.run import run_validation

MXFP8_ID = "mb26-04-01-llama3-70b-gb200-n64-gbs256-mxfp8-tp2pp4cp1ep1vp5mbs1"


def _case(corpus: str, cid: str) -> dict:
    data = read_data_file(shipped_corpus_path(corpus))
    return copy.deepcopy(next(c for c in data["cases"] if c["id"] == cid))


def _write(tmp_path, cases, schema="validation-corpus/1"):
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({"schema": schema, "cases": cases}))
    return f


@pytest.mark.parametrize("corpus, cid, field", [
    ("training-sweeps-public.yaml", MXFP8_ID, "precision"),
    ("training-public.yaml", "narayanan21-t1-39.1B", "recompute"),
    ("training-public.yaml", "narayanan21-t1-39.1B", "mbs"),
])
def test_a_case_missing_a_required_plan_field_fails_in_one_line(tmp_path, corpus, cid, field):
    """Left out, the field took the tool's default and nothing said so: the MXFP8 Llama 3 70B row was priced in bf16
    (+34.5 % where the stated row reads +2.0 %), Narayanan's 39.1B without its full recompute (-25 %)."""
    case = _case(corpus, cid)
    stated = run_validation(_write(tmp_path, [case])).cases[0]
    assert stated.error is not None and abs(stated.error) < 0.1
    del case["plan"][field]
    got = run_validation(_write(tmp_path, [case])).cases[0]
    assert got.error is None and got.failure.startswith(f"plan.{field}: is required (write null")


def test_a_field_the_stack_fills_may_be_left_out_and_is_said(tmp_path):
    """Megatron-Bridge's stack documents its distributed optimizer (zero_stage 1): left out, it is filled and noted;
    vpp, which the stack does not default, is refused."""
    case = _case("training-sweeps-public.yaml", MXFP8_ID)
    del case["plan"]["zero_stage"]
    got = run_validation(_write(tmp_path, [case])).cases[0]
    assert got.error is not None and got.chosen["zero_stage"] == "1 — default of the megatron-bridge stack"
    case = _case("training-sweeps-public.yaml", MXFP8_ID)
    del case["plan"]["vpp"]
    assert run_validation(_write(tmp_path, [case])).cases[0].failure.startswith("plan.vpp: is required")


def test_the_family_group_is_read_from_the_plan_as_priced(tmp_path):
    """Narayanan's 1.7B row with zero_stage null: the chooser takes ZeRO-3 and the case is FSDP/ZeRO-3, not the DP
    its placeholder (1) said."""
    case = _case("training-public.yaml", "narayanan21-t1-1.7B")
    case["plan"]["zero_stage"] = None
    got = run_validation(_write(tmp_path, [case])).cases[0]
    assert got.chosen["zero_stage"].startswith("3 ")
    assert tuple(got.groups["family"]) == ("FSDP/ZeRO-3",)


@pytest.mark.parametrize("bad_id", [{"name": "x"}, ["x"], True])
def test_an_inference_case_id_that_is_not_text_is_one_line(tmp_path, capsys, bad_id):
    data = read_data_file(shipped_corpus_path("inference-public.yaml"))
    case = copy.deepcopy(data["cases"][0])
    case["id"] = bad_id
    f = _write(tmp_path, [case], schema="inference-corpus/1")
    assert main(["validate", "--corpus", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "case[0].id: must be text" in err and "Traceback" not in err


def test_an_out_of_fold_residual_computed_for_another_model_is_stale():
    """catalog/residuals_oof.json keeps each case's in-sample residual beside its out-of-fold one: a case whose
    in-sample residual moved (the model changed) is not given the old out-of-fold one, and regenerate --check
    names it."""
    from narrowpath.validate.regenerate import residual_records, with_out_of_fold
    records = residual_records()
    fresh, stale = with_out_of_fold(records)
    assert not stale and all("residual_oof" in r for r in fresh)
    moved = [dict(records[0], residual=records[0]["residual"] + 0.01)] + records[1:]
    again, stale = with_out_of_fold(moved)
    assert stale == [records[0]["id"]] and "residual_oof" not in again[0]
