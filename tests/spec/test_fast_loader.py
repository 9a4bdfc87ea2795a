"""The libyaml-backed strict loader gives what the pure-Python one gives: the same values for every YAML file the
project ships or validates against, the same refusals, and a RecursionError (not a crash) on deep nesting."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from narrowpath.spec import strict_load
from narrowpath.spec.strict_load import FastStrictLoader, StrictLoader
from narrowpath.validate.corpus import shipped_corpus_path
from tests.spec.test_strict_load import alias_bomb

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "src/narrowpath/catalog").glob("*.yaml")) + sorted((ROOT / "benchmarks/data").glob("*.yaml")) \
    + sorted(shipped_corpus_path().parent.glob("*.yaml"))  # the public corpora, as the package ships them
BOTH = pytest.mark.parametrize("loader", [StrictLoader, FastStrictLoader], ids=["python", "libyaml"])


def test_libyaml_is_used_where_pyyaml_has_it():
    assert (FastStrictLoader is not StrictLoader) == yaml.__with_libyaml__


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_same_values_as_the_pure_python_loader(path):
    text = path.read_text()
    assert yaml.load(text, Loader=FastStrictLoader) == yaml.load(text, Loader=StrictLoader)  # noqa: S506


@BOTH
def test_duplicate_key_named_with_its_line(loader):
    with pytest.raises(yaml.YAMLError, match=r"duplicate key 'tp' at line 3, column 3 \(first at line 2, column 3\)"):
        yaml.load("plan:\n  tp: 2\n  tp: 4\n", Loader=loader)  # noqa: S506


@BOTH
def test_alias_bomb_and_recursive_alias_refused(loader):
    with pytest.raises(yaml.YAMLError, match="alias bomb"):
        yaml.load(alias_bomb(), Loader=loader)  # noqa: S506
    with pytest.raises(yaml.YAMLError, match="recursive alias"):
        yaml.load("a: &n [*n]\n", Loader=loader)  # noqa: S506


@BOTH
def test_merge_keys_override(loader):
    got = yaml.load("b: &b {tp: 2, gbs: 64}\nplan: {<<: *b, tp: 4}\n", Loader=loader)  # noqa: S506
    assert got["plan"] == {"tp": 4, "gbs": 64}


@BOTH
def test_deep_nesting_is_a_recursion_error_not_a_crash(loader):
    """200,000 nested brackets: PyYAML's CSafeLoader segfaults here (its C composer recurses without a limit)."""
    with pytest.raises(RecursionError):
        yaml.load("[" * 200_000 + "]" * 200_000, Loader=loader)  # noqa: S506


def test_load_yaml_takes_the_fast_loader(monkeypatch):
    seen = []
    monkeypatch.setattr(strict_load.yaml, "load", lambda text, Loader: seen.append(Loader) or {})
    strict_load.load_yaml("a: 1\n")
    assert seen == [FastStrictLoader]


@pytest.mark.parametrize("text", [
    "plan: {tp:, dp: 8}\n",            # a flow mapping's empty value: libyaml refuses it, PyYAML always read it as null
    "plan: {pp:}\n", "[a:]\n",
    "a: b: c\n",                        # invalid for both: the message is the pure loader's, as before
    "a: [1, 2\n", "%YAML 2.0\n---\na: 1\n", "a: \"\\x00\" \n\x07\n",
])
def test_what_libyaml_refuses_loads_or_fails_as_before(text):
    try:
        want = ("ok", yaml.load(text, Loader=StrictLoader))  # noqa: S506
    except yaml.YAMLError as exc:
        want = ("error", str(exc).splitlines()[0])
    try:
        got = ("ok", strict_load.load_yaml(text))
    except yaml.YAMLError as exc:
        got = ("error", str(exc).splitlines()[0])
    assert got == want


@pytest.mark.parametrize("text, fragment", [
    ("system: dgx-h100\nmodel: a: b\n", "not valid YAML: mapping values are not allowed here (line 2, column 9)"),
    ("system: dgx-h100\nplan: {tp: 2\n",
     "not valid YAML: expected ',' or '}', but got '<stream end>' (line 3, column 1)"),
    ("system: dgx-h100\nsystem: x\n", "not valid YAML: duplicate key 'system' at line 2, column 1 (first at line 1, "
     "column 1)"),
])
def test_a_yaml_error_says_what_and_where_in_one_line(tmp_path, capsys, text, fragment):
    """The problem and its line, not only the parser's context ('while parsing a flow mapping'); a message that
    already names its line is not given it twice."""
    from tests.cli.one_line import one_line_error
    f = tmp_path / "s.yaml"
    f.write_text(text)
    line = one_line_error(capsys, ["predict", str(f)], fragment)
    assert line.count("line ") == (2 if "duplicate" in fragment else 1)
