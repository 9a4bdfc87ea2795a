"""Presentation: every subcommand has a --help description, every option a help text, and a numeric or string
default is named in it; the catalog's tables fit 120 columns and memory sizes say GB or GiB."""
from __future__ import annotations

import argparse

import pytest

from narrowpath.cli.main import build_parser, main


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("name", sorted(_subparsers()))
def test_every_command_and_option_is_described(name):
    p = _subparsers()[name]
    assert p.description and len(p.description) > 40, f"`narrowpath {name} --help` has no description"
    for a in p._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        label = "/".join(a.option_strings) or a.dest
        assert a.help, f"narrowpath {name} {label}: no help text"
        if a.option_strings and isinstance(a.default, (int, float, str)) and not isinstance(a.default, bool):
            assert "default" in a.help, f"narrowpath {name} {label}: help does not name its default {a.default!r}"


def test_analyze_help_names_what_the_issue_found_missing(capsys):
    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for needle in ("--zero {0,1,2,3} ZeRO stage", "--failures-per-gpu-hour", "Llama 3's 419",
                   "--jitter-method {closed_form,sampled} expected wait", "gradient compression ratio for the "
                   "what-if (>= 1; default 4)"):
        assert needle in out, needle


def test_catalog_tables_fit_120_columns_and_name_gib(capsys):
    assert main(["catalog"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 120
    assert "HBM GiB (2^30 B)" in out and "HBM GB (1e9 B)" in out
    h100 = next(line for line in out.splitlines() if line.strip().startswith("H100-SXM5-80GB"))
    assert "80.0" in h100.split() and "85.9" in h100.split()
    assert main(["catalog", "scenarios", "--json"]) == 0  # --json keeps the whole description
    assert "…" not in capsys.readouterr().out
