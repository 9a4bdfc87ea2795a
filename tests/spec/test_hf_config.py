"""A HuggingFace config.json is read for what it states and refused for what narrowpath cannot model: the training
sequence length is given (never the position limit), zero counts and non-transformers are refused by key."""
from __future__ import annotations

import json

import pytest

from narrowpath.catalog.resolve import resolve_model
from narrowpath.cli.main import main
from narrowpath.errors import SpecError
from narrowpath.spec.hf_config import model_from_hf_config
from tests.cli.one_line import one_line_error

LLAMA31 = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
           "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "hidden_act": "silu"}
MIXTRAL = {**LLAMA31, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2,
           "max_position_embeddings": 32768, "vocab_size": 32000}


def test_position_limit_is_not_the_training_length(tmp_path, capsys):
    """A Llama-3.1 config (position limit 131,072) was priced as 128k-token training; now --seq-len is required."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA31))
    argv = ["predict", "--model", str(cfg), "--system", "dgx-h100", "--gpus", "8", "--tp", "8"]
    one_line_error(capsys, argv, "model.seq_len", "--seq-len", "max_position_embeddings 131,072 is the position limit")
    assert main([*argv, "--seq-len", "8192"]) == 0
    out = capsys.readouterr().out
    assert " seq=8192 " in out


def test_seq_len_reaches_a_config_named_by_a_scenario_file(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA31))
    (tmp_path / "s.yaml").write_text("system: dgx-h100\nmodel: config.json\nnum_gpus: 8\nplan: {tp: 8, gbs: 8}\n")
    one_line_error(capsys, ["predict", str(tmp_path / "s.yaml")], "model.seq_len")
    assert main(["predict", str(tmp_path / "s.yaml"), "--seq-len", "4096", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["seq_len"] == 4096
    (tmp_path / "t.yaml").write_text("system: dgx-h100\nmodel: {hf_config: config.json, seq_len: 2048}\n"
                                     "num_gpus: 8\nplan: {tp: 8, gbs: 8}\n")
    assert main(["predict", str(tmp_path / "t.yaml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["seq_len"] == 2048


def test_training_length_key_and_limit():
    assert model_from_hf_config({**LLAMA31, "seq_length": 8192}).seq_len == 8192  # ChatGLM/Qwen-1 style
    with pytest.raises(SpecError, match="exceeds the config's position limit max_position_embeddings 131,072"):
        model_from_hf_config(LLAMA31, seq_len=200_000)


@pytest.mark.parametrize("cfg, field, fragment", [
    ({**LLAMA31, "max_position_embeddings": 0}, "config.json.max_position_embeddings", "must be >= 1, got 0"),
    ({**LLAMA31, "num_key_value_heads": 0}, "config.json.num_key_value_heads", "must be >= 1, got 0"),
    ({**LLAMA31, "num_attention_heads": 0}, "config.json.num_attention_heads", "must be >= 1, got 0"),
    ({**MIXTRAL, "num_local_experts": 0}, "config.json.num_local_experts", "mixture of experts"),
    ({k: v for k, v in MIXTRAL.items() if k != "num_local_experts"}, "config.json.num_local_experts",
     "got none"),
    ({**LLAMA31, "model_type": "mamba"}, "config.json.model_type", "state-space model"),
    ({**LLAMA31, "model_type": "t5"}, "config.json.model_type", "encoder-decoder"),
    ({**LLAMA31, "model_type": "frobnicator"}, "config.json.model_type", "unknown model_type 'frobnicator'"),
])
def test_what_cannot_be_modelled_is_refused(tmp_path, capsys, cfg, field, fragment):
    with pytest.raises(SpecError) as exc:
        model_from_hf_config(cfg, seq_len=4096)
    assert exc.value.field == field and fragment in str(exc.value)
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    one_line_error(capsys, ["predict", "--model", str(f), "--system", "dgx-h100", "--gpus", "8", "--seq-len", "4096"],
                   field, fragment)


def test_dense_config_with_zero_experts_stays_dense():
    m = model_from_hf_config({**LLAMA31, "num_experts": 0}, seq_len=4096)
    assert m.moe is None


def test_mixtral_reads_its_experts(tmp_path):
    f = tmp_path / "mixtral.json"
    f.write_text(json.dumps(MIXTRAL))
    m = resolve_model(str(f), seq_len=4096)
    assert m.moe.num_experts == 8 and m.seq_len == 4096


def test_hf_config_mapping_refuses_unknown_keys(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA31))
    with pytest.raises(SpecError, match="model.seqlen: unknown field; did you mean 'seq_len'"):
        resolve_model({"hf_config": "config.json", "seqlen": 4096}, tmp_path)


def test_seq_len_help_says_it_is_required_for_a_config(capsys):
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "required with a HuggingFace config.json" in out
