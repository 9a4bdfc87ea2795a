"""The HTML report without a browser: one self-contained file (nothing to fetch), every section, the numbers of
the analysis in its text, and the CLI entry points (`report -o`, `analyze --html`) with their errors."""
from __future__ import annotations

import contextlib
import re
from html.parser import HTMLParser

import pytest

from narrowpath.cli.main import main
from narrowpath.report.html import CSP

SECTIONS = ("verdict", "breakdown", "accounts", "memory", "budgets", "energy", "timeline", "evidence")


class _Refs(HTMLParser):
    """Every attribute that can make a browser fetch something, and every tag."""

    def __init__(self):
        super().__init__()
        self.refs, self.tags = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href", "srcset", "action", "poster", "data", "xlink:href") and v is not None:
                self.refs.append((tag, k, v))


def test_every_catalog_report_is_self_contained(reports):
    for sid, (a, path) in reports.items():
        html = path.read_text(encoding="utf-8")
        p = _Refs()
        p.feed(html)
        assert [r for r in p.refs if not r[2].startswith("#")] == [], sid  # only in-page anchors
        assert "script" not in p.tags and "img" not in p.tags and "iframe" not in p.tags
        assert f'content="{CSP}"' in html
        assert not re.search(r"url\(|@import|@font-face", html), sid
        for s in SECTIONS:
            assert f'<section id="{s}">' in html, (sid, s)
        assert html.count("<svg") >= 4


def test_the_numbers_of_the_analysis_are_in_the_page(reports):
    a, path = reports["llama3-70b-h100-256"]
    html = path.read_text(encoding="utf-8")
    p = a.prediction
    for needle in (f"{p.step_time_s:.4g} s", f"{p.tokens_per_s:,.0f}", f"{p.mfu * 100:.1f} %",
                   a.verdict.sentence.split(":")[0], f"{a.energy.levels[-1].per_token_j:.3g} J",
                   a.synchronisation.checkpoint.bottleneck, a.distance.stage_note[:40]):
        assert needle.replace("'", "&#x27;") in html, needle
    for w in a.verdict.what_ifs:
        assert w.description.replace(">", "&gt;") in html


def test_report_and_analyze_html_write_the_same_page(tmp_path, capsys):
    r, h = tmp_path / "r.html", tmp_path / "h.html"
    assert main(["report", "gnmt-lstm-a100-8", "-o", str(r)]) == 0
    assert f"wrote {r}" in capsys.readouterr().err
    assert main(["analyze", "gnmt-lstm-a100-8", "--html", str(h), "--json"]) == 0
    assert r.read_text() == h.read_text()


@pytest.mark.parametrize("argv, flag", [(["report", "-o", "out.txt"], "-o"),
                                        (["report"], "-o"),
                                        (["report", "-o", "{dir}"], "-o"),
                                        (["analyze", "--html", "{dir}"], "--html"),
                                        (["report", "--slow-node", "-5", "-o", "{dir}/x.html"], "--slow-node")])
def test_bad_report_arguments_are_one_line(argv, flag, tmp_path, capsys):
    argv = [x.replace("{dir}", str(tmp_path)) for x in argv]
    with pytest.raises(SystemExit) if argv == ["report"] else contextlib.nullcontext():  # argparse: -o required
        assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0] and "Traceback" not in err[0]


def _with_band(orig):
    """predict --json as the model gives it once it carries an error band and a validation verdict."""
    def pj(p):
        d = orig(p)
        d["band"] = {"low_s": 17.0, "high_s": 21.5, "level": 0.8}
        d["validated"] = {"inside": False, "nearest": ["narayanan21-t1-18.4B", "korthikanti22-t5-175B-full"],
                          "reason": "tp across nodes is outside every validated case"}
        return d
    return pj


def test_band_and_validation_render_when_the_prediction_carries_them(monkeypatch, reports):
    """The report, the comparison page and the comparison text show `band` and `validated` of predict --json, and
    the evidence table lists the nearest validated cases the model names."""
    import narrowpath.report.compare_text as CT
    import narrowpath.report.html_compare as HC
    import narrowpath.report.html_report as H
    from narrowpath.analysis.compare import compare
    a, _ = reports["llama3-70b-h100-256"]
    monkeypatch.setattr(H, "prediction_to_json", _with_band(H.prediction_to_json))
    monkeypatch.setattr(HC, "prediction_to_json", _with_band(HC.prediction_to_json))
    monkeypatch.setattr(CT, "prediction_to_json", _with_band(CT.prediction_to_json))
    html = H.report_html(a)
    assert "band 17 – 21.5 s, 80% band" in html
    assert "OUTSIDE the validated regime: tp across nodes is outside every validated case" in html
    assert "the validated cases nearest to this scenario" in html
    evidence = html[html.index('id="evidence"'):]
    assert "narayanan21-t1-18.4B" in evidence and "korthikanti22-t5-175B-full" in evidence
    b, _ = reports["gpt3-175b-a100-1024"]
    c = compare(a, b)
    assert "(band 17 – 21.5 s, 80% band)" in HC.compare_html(c) and "OUTSIDE the validated regime" in HC.compare_html(c)
    assert (f"A: step {a.prediction.step_time_s:.4g} s (band 17 – 21.5 s, 80%; OUTSIDE the validated regime:"
            in CT.format_comparison(c))
