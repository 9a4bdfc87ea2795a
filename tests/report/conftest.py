"""Fixtures: one headless Chromium for the whole session (Debian's package; missing = failure, never a skip), and
the HTML report of every catalog scenario, written once."""
from __future__ import annotations

import pytest

from narrowpath.analysis import analyze
from narrowpath.catalog import load_scenario, scenario_ids
from narrowpath.report.html_report import write_report
from tests.report.cdp import Browser, BrowserError


@pytest.fixture(scope="session")
def browser():
    try:
        b = Browser()
    except BrowserError as exc:
        pytest.fail(f"browser tests need Chromium: {exc}", pytrace=False)
    yield b
    b.close()


@pytest.fixture(scope="session")
def reports(tmp_path_factory):
    """{scenario id: (analysis, path of its HTML report)} for every catalog scenario."""
    d = tmp_path_factory.mktemp("reports")
    out = {}
    for sid in scenario_ids():
        a = analyze(load_scenario(sid))
        out[sid] = (a, write_report(a, str(d / f"{sid}.html")))
    return out
