"""Scenario files are parsed strictly: duplicate keys are refused (YAML and JSON), a YAML alias bomb or a recursive
alias is refused before anything walks the value, and a huge value quoted in an error message is cut short."""
from __future__ import annotations

import time

import pytest

from narrowpath.catalog.resolve import load_scenario
from narrowpath.errors import MAX_MESSAGE_CHARS, NarrowpathError, SpecError, shown
from narrowpath.spec.strict_load import MAX_ALIAS_EXPANSION, load_yaml
from tests.cli.one_line import one_line_error

SCN = "system: dgx-h100\nmodel: llama3-8b\nnum_gpus: 8\nplan: {tp: 2, gbs: 64}\n"


def alias_bomb(levels: int = 9) -> str:
    """The classic "billion laughs": each level lists the previous one nine times; the last sits in num_gpus."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        prev, cur = chr(96 + i), chr(97 + i)
        lines.append(f"{cur}: &{cur} [" + ",".join(["*" + prev] * 9) + "]")
    return "\n".join(lines) + f"\nsystem: dgx-h100\nmodel: llama3-8b\nnum_gpus: *{chr(96 + levels)}\nplan: {{tp: 1}}\n"


@pytest.mark.parametrize("text, key, line", [
    (SCN + "system: dgx-a100\n", "'system'", "line 5"),
    ("system: dgx-h100\nmodel: llama3-8b\nplan: {tp: 2, gbs: 64, tp: 4}\n", "'tp'", "line 3"),
    ("plan:\n  tp: 2\n  gbs: 64\n  gbs: 128\nsystem: dgx-h100\nmodel: llama3-8b\n", "'gbs'", "line 4"),
])
def test_duplicate_yaml_key_is_refused(tmp_path, capsys, text, key, line):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    err = one_line_error(capsys, ["predict", str(f)])
    assert f"{f}: not valid YAML: duplicate key {key} at {line}" in err


def test_duplicate_json_key_is_refused(tmp_path, capsys):
    f = tmp_path / "s.json"
    f.write_text('{"system": "dgx-h100", "model": "llama3-8b", "plan": {"gbs": 8}, "system": "dgx-a100"}')
    err = one_line_error(capsys, ["predict", str(f)])
    assert "not valid JSON: duplicate key 'system'" in err


def test_merge_keys_and_plain_aliases_still_load(tmp_path):
    """`<<: *base` then an explicit key is an override, not a duplicate; a few aliases are fine."""
    f = tmp_path / "s.yaml"
    f.write_text("system: &s dgx-h100\nmodel: llama3-8b\nnum_gpus: 8\nplan: {tp: 2, dp: 4, gbs: 64}\nname: *s\n")
    assert load_scenario(str(f)).name == "dgx-h100"
    assert load_yaml("b: &b {tp: 2, gbs: 64}\nplan: {<<: *b, tp: 4}\n")["plan"] == {"tp": 4, "gbs": 64}


def test_alias_bomb_is_refused_fast(tmp_path, capsys):
    f = tmp_path / "bomb.yaml"
    f.write_text(alias_bomb())
    assert f.stat().st_size < 500
    t0 = time.perf_counter()
    err = one_line_error(capsys, ["predict", str(f)])
    assert time.perf_counter() - t0 < 5
    assert "aliases expand to" in err and "alias bomb" in err and len(err) < 300


def test_expansion_limit_is_on_what_aliases_add(monkeypatch):
    """A plain file of many values loads; aliases adding more than the limit do not (limit lowered to 2,000 here
    to keep the pure-Python parse short)."""
    from narrowpath.spec import strict_load
    monkeypatch.setattr(strict_load, "MAX_ALIAS_EXPANSION", 2000)
    assert len(load_yaml("[" + ",".join(["1"] * 2010) + "]")) == 2010
    assert len(load_yaml(alias_bomb(3))["c"]) == 9  # 9^3 = 729 values, used twice: fine
    with pytest.raises(Exception, match="alias bomb"):
        load_yaml(alias_bomb(4))  # 9^4 = 6,561
    assert MAX_ALIAS_EXPANSION == 100_000


def test_recursive_alias_is_refused(tmp_path, capsys):
    f = tmp_path / "r.yaml"
    f.write_text("system: dgx-h100\nmodel: llama3-8b\nnum_gpus: &n [*n]\nplan: {tp: 1}\n")
    assert "recursive alias" in one_line_error(capsys, ["predict", str(f)])


def test_a_huge_value_is_quoted_short(tmp_path, capsys):
    """20,000 list items in num_gpus: the message names the field and shows a few items, not 60 KB."""
    f = tmp_path / "big.yaml"
    f.write_text("system: dgx-h100\nmodel: llama3-8b\nnum_gpus: [" + ",".join(["1"] * 20_000) + "]\nplan: {tp: 1}\n")
    err = one_line_error(capsys, ["predict", str(f)])
    assert err.startswith("narrowpath: error: num_gpus: must be an integer >= 1, got [1, 1,") and len(err) < 200


def test_messages_are_bounded():
    assert len(str(SpecError("x", "y" * 10**6))) <= MAX_MESSAGE_CHARS
    assert len(str(NarrowpathError("z" * 10**6))) <= MAX_MESSAGE_CHARS
    assert shown([[["a" * 1000] * 1000] * 1000]).startswith("[[[") and len(shown([list(range(10**6))])) <= 80
    assert "digits" in shown(10 ** 5000)
