"""Review 51 of the HTML report, each defect pinned by the page itself (html.parser / xml.etree, geometry from the
SVG's coordinates, text widths estimated at 0.6 font sizes a character, as `report.svg.text_width` does):
column labels and totals of the memory chart that overlapped or left the viewBox (DualPipe ranks, 32 stages),
chart legends that ran past the chart, the goodput sentence naming the closed form's jitter wait when the sampled one
was used, a long scenario name widening the page, number formats (1.3e+05 GPUs, 9.08e+03 MB), and wording (the
timeline's "a rank of rank", the raw id of the narrowest path, a dominant pattern with nothing exposed, the × of a
size with no plan drawn in the weak-scaling line's red)."""
from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from narrowpath.analysis import AnalysisOptions, analyze, analyze_prediction
from narrowpath.catalog import load_scenario
from narrowpath.report.analysis_console import format_analysis
from narrowpath.report.html_compare import compare_html
from narrowpath.report.html_report import report_html
from narrowpath.report.svg import PALETTE, Series, fmt_num, line_chart, stacked_columns

NS = "{http://www.w3.org/2000/svg}"
CHAR_W = 0.6
QUICK = AnalysisOptions(what_ifs=False, simulate=False)


def _svgs(html: str) -> list[ET.Element]:
    return [ET.fromstring(s) for s in re.findall(r"<svg\b.*?</svg>", html, re.S)]


def _chart(html: str, title_start: str) -> ET.Element:
    found = [s for s in _svgs(html) if s.find(f"{NS}title").text.startswith(title_start)]
    assert len(found) == 1, [s.find(f"{NS}title").text for s in _svgs(html)]
    return found[0]


def _texts(svg: ET.Element) -> list[dict]:
    """Every unrotated text of a chart: its box [x0, x1] × [y - size, y], its text, and its tooltip when a <g> with a
    <title> wraps it."""
    out = []
    for parent in svg.iter():
        for el in parent:
            if el.tag != f"{NS}text" or el.get("transform"):
                continue
            x, y, size = float(el.get("x")), float(el.get("y")), float(el.get("font-size"))
            w = CHAR_W * size * len(el.text or "")
            x0 = {"start": x, "middle": x - w / 2, "end": x - w}[el.get("text-anchor", "start")]
            tip = parent.find(f"{NS}title") if parent.tag == f"{NS}g" else None
            out.append({"x0": x0, "x1": x0 + w, "y": y, "size": size, "s": el.text or "",
                        "tip": None if tip is None else tip.text})
    return out


def _view(svg: ET.Element) -> tuple[float, float]:
    _, _, w, h = map(float, svg.get("viewBox").split())
    return w, h


def _clashes(svg: ET.Element) -> list:
    """Texts outside the viewBox, and pairs of texts whose boxes overlap."""
    w, h = _view(svg)
    ts = _texts(svg)
    bad = [("outside", t["s"], round(t["x0"]), round(t["x1"]), t["y"]) for t in ts
           if t["x0"] < 0 or t["x1"] > w or t["y"] > h or t["y"] - t["size"] < 0]
    for i, a in enumerate(ts):
        for b in ts[i + 1:]:
            if abs(a["y"] - b["y"]) < min(a["size"], b["size"]) and a["x0"] < b["x1"] and b["x0"] < a["x1"]:
                bad.append(("overlap", a["s"], b["s"], round(a["x0"]), round(a["x1"]), round(b["x0"]),
                            round(b["x1"])))
    return bad


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    """Report pages of the scenarios the reviewer used (what-ifs and the simulator off: the charts do not read them)."""
    out = {sid: report_html(analyze(load_scenario(sid), QUICK))
           for sid in ("deepseek-v3-h800-2048", "gnmt-lstm-a100-8", "llama3-405b-h100-16k", "llama3-8b-h100-8")}
    gpt3 = load_scenario("gpt3-175b-a100-1024")
    pp32 = dataclasses.replace(gpt3, plan=dataclasses.replace(gpt3.plan, pp=32, dp=4, vpp=1))
    out["pp32"] = report_html(analyze(pp32, QUICK))
    return out


def test_no_chart_text_overlaps_another_or_leaves_the_chart(pages):
    for name, html in pages.items():
        for svg in _svgs(html):
            assert _clashes(svg) == [], (name, svg.find(f"{NS}title").text)


def _column_labels(svg: ET.Element) -> list[dict]:
    ts = _texts(svg)
    row = max(t["y"] for t in ts if re.fullmatch(r"(rank |stage |r|s)\d+.*", t["s"]))
    return [t for t in ts if t["y"] == row]


def test_dualpipe_ranks_are_all_labelled_inside_the_chart_with_their_stages_in_the_tooltip(pages):
    svg = _chart(pages["deepseek-v3-h800-2048"], "Memory per GPU by pipeline rank")
    labels = _column_labels(svg)
    assert [t["s"] for t in labels] == [f"r{i}" for i in range(16)]  # each fits its column: none dropped
    assert [t["tip"] for t in labels] == [f"rank {i} (stages {i}, {15 - i})" for i in range(16)]
    assert all(0 <= t["x0"] and t["x1"] <= 480 for t in labels)
    assert all(a["x1"] + 4 <= b["x0"] for a, b in zip(labels, labels[1:]))
    totals = _totals(svg, labels[0]["y"])
    assert len(totals) == 16 and all(abs((a["x0"] + a["x1"]) / 2 - b["x0"] - (b["x1"] - b["x0"]) / 2) < 0.1
                                     for a, b in zip(totals, labels))  # each above its own column
    slot = (labels[1]["x0"] + labels[1]["x1"] - labels[0]["x0"] - labels[0]["x1"]) / 2
    assert all(t["x1"] - t["x0"] <= slot for t in totals)


def _totals(svg: ET.Element, label_y: float) -> list[dict]:
    return [t for t in _texts(svg) if t["y"] < label_y - 15 and re.fullmatch(r"[\d.,]+", t["s"]) and t["size"] <= 11]


def test_32_stages_thin_their_labels_leave_out_their_totals_and_keep_each_total_in_a_tooltip(pages):
    svg = _chart(pages["pp32"], "Memory per GPU by pipeline stage")
    labels = _column_labels(svg)
    assert 8 <= len(labels) < 32 and labels[0]["s"] == "s0" and labels[0]["tip"] == "stage 0"
    assert all(a["x1"] <= b["x0"] for a, b in zip(labels, labels[1:]))
    assert _totals(svg, labels[0]["y"]) == []  # 12.9 units a column: no total fits, none is written
    tips = [r.find(f"{NS}title").text for r in svg.iter(f"{NS}rect") if r.find(f"{NS}title") is not None]
    assert {re.match(r"stage (\d+) ", t).group(1) for t in tips} == {str(i) for i in range(32)}
    assert all(re.search(r"\(column [\d.,]+ GB\)$", t) for t in tips)


def test_long_column_names_without_a_short_form_are_thinned_inside_the_viewbox():
    cats = [f"a long category name {i}" for i in range(9)]
    svg = ET.fromstring(stacked_columns("t", cats, [("x", [1.0] * 9), ("y", [2.0] * 9)], "GB"))
    assert _clashes(svg) == []
    assert 1 <= len([t for t in _texts(svg) if t["s"].startswith("a long")]) < 9


def test_a_legend_wraps_instead_of_running_past_the_chart():
    series = [Series(f"series {i} with a rather long descriptive label", (1, 2, 4), (1.0, 2.0, 3.0), PALETTE[i])
              for i in range(5)]
    svg = ET.fromstring(line_chart("t", series, "log2", "linear", "GPUs", "y"))
    assert _clashes(svg) == []
    legend = [t for t in _texts(svg) if t["s"].startswith("series")]
    assert len(legend) == 5 and len({t["y"] for t in legend}) == 5  # one a row: two do not fit side by side


def test_the_persistent_rnn_legend_stays_inside_its_chart(pages):
    svg = _chart(pages["gnmt-lstm-a100-8"], "Persistent-RNN cliff")
    legend = [t for t in _texts(svg) if t["s"].startswith(("with persistence", "weights re-read"))]
    assert len(legend) == 2 and all(t["x1"] <= _view(svg)[0] for t in legend)


def test_the_x_of_a_size_without_a_plan_is_not_drawn_in_a_series_colour():
    svg = ET.fromstring(line_chart("t", [Series("weak", (8, 16), (1.0, 2.0), PALETTE[3], True)], "log2", "log10",
                                   "GPUs", "s", missing_x=[(32, "weak, 32 GPUs: no valid plan")]))
    marks = [p for p in svg.iter(f"{NS}path") if p.find(f"{NS}title") is not None]
    assert len(marks) == 1 and marks[0].get("stroke") not in PALETTE


def test_gpu_counts_are_written_out_and_message_sizes_as_the_console_writes_them(pages):
    assert (fmt_num(131072), fmt_num(65536), fmt_num(2.5e7)) == ("131,072", "65,536", "2.5e+07")
    svg = _chart(pages["llama3-405b-h100-16k"], "Step time")
    ticks = [t["s"] for t in _texts(svg) if t["y"] == 241]
    assert "131,072" in ticks and not any("e+" in s for s in ticks)
    a = analyze(load_scenario("llama3-405b-h100-16k"), QUICK)
    big = max(a.collectives, key=lambda r: r.max_message_bytes)
    assert 100e6 <= big.max_message_bytes < 1e11
    cell = f"{big.max_message_bytes / 1e6:,.1f}"
    assert cell in format_analysis(a)  # the console's figure ...
    rows = _table_rows(pages["llama3-405b-h100-16k"], "max msg (MB)")
    assert cell in [r[6] for r in rows] and not any("e+" in r[6] for r in rows)  # ... and the page's


class _Tables(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tables, self._cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append(self._cell.strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def _table_rows(html: str, header: str) -> list[list[str]]:
    p = _Tables()
    p.feed(html)
    found = [t for t in p.tables if header in t[0]]
    assert len(found) == 1
    return found[0][1:]


class _Text(HTMLParser):
    def __init__(self):
        super().__init__()
        self.chunks, self.style = [], ""
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.style += data
        else:
            self.chunks.append(data)


def _text(html: str) -> str:
    p = _Text()
    p.feed(html)
    return " ".join(" ".join(p.chunks).split())


@pytest.mark.parametrize("method, wanted, not_wanted", [("sampled", "Monte Carlo sample's", "closed form's"),
                                                        ("closed_form", "closed form's", "Monte Carlo")])
def test_the_goodput_sentence_names_the_jitter_wait_it_counts(method, wanted, not_wanted):
    a = analyze(load_scenario("llama3-8b-h100-8"), AnalysisOptions(what_ifs=False, simulate=False,
                                                                   jitter_method=method))
    good = re.search(r"goodput with jitter [\d.]+ %[^)]*\)", _text(report_html(a))).group(0)
    assert f"it counts the {wanted} jitter wait above" in good and not_wanted not in good


def test_headings_paragraphs_and_list_items_break_a_word_longer_than_their_line():
    from narrowpath.report.html import CSS
    rules: dict[str, str] = {}
    for sels, body in re.findall(r"([^{}]+)\{([^}]*)\}", CSS):
        for sel in sels.split(","):
            rules[sel.strip()] = rules.get(sel.strip(), "") + body
    for sel in ("h1", "h2", "h3", "p", "li"):
        assert "overflow-wrap: anywhere" in rules.get(sel, ""), sel


def test_a_300_character_name_does_not_widen_the_page_on_a_phone(browser, tmp_path):
    base = load_scenario("llama3-8b-h100-8")
    long = dataclasses.replace(base, name="L" * 300, model=dataclasses.replace(base.model, name="M" * 300))
    a = analyze(long, QUICK)
    b = analyze_prediction(a.prediction, QUICK)
    from narrowpath.analysis.compare import compare
    files = {"report": report_html(a), "compare": compare_html(compare(a, b))}
    for kind, html in files.items():
        path = tmp_path / f"{kind}.html"
        path.write_text(html, encoding="utf-8")
        for width, height, mobile in ((390, 844, True), (1280, 900, False)):
            page = browser.page(width, height, mobile)
            try:
                page.goto(path.as_uri())
                assert page.console_errors() == []
                assert page.eval("document.documentElement.scrollWidth") <= width, (kind, width)
            finally:
                page.close()


def test_the_dualpipe_timeline_names_its_rank_once(pages):
    titles = [s.find(f"{NS}title").text for s in _svgs(pages["deepseek-v3-h800-2048"])]
    step = [t for t in titles if t.startswith("One step on")]
    assert len(step) == 1 and step[0].startswith("One step on pipeline rank 0 (stages 0, 15)")
    assert "a rank of rank" not in step[0]
    plain = [t for t in map(lambda s: s.find(f"{NS}title").text, _svgs(pages["llama3-8b-h100-8"]))
             if t.startswith("One step on")]
    assert plain[0].startswith("One step on a rank of stage 0")


def test_the_narrowest_path_card_uses_the_verdicts_words(pages):
    a = analyze(load_scenario("deepseek-v3-h800-2048"), QUICK)
    from narrowpath.analysis.verdict import component_label
    label = component_label(a.context, a.verdict.narrowest)
    text = _text(pages["deepseek-v3-h800-2048"])
    assert a.verdict.narrowest == "hbm_bound_compute" and label == "memory-bound kernels at the HBM roof"
    assert f"narrowest path: {label}" in text and "narrowest path: hbm bound compute" not in text


ONE_GPU = """name: one
system: dgx-h100
model: gpt-1.7b
num_gpus: 1
plan: {tp: 1, pp: 1, dp: 1, mbs: 1, gbs: 8, precision: bf16}
"""


def test_nothing_exposed_says_so_instead_of_naming_a_pattern(pages, tmp_path):
    from narrowpath.cli.common import load_any_scenario
    (tmp_path / "one.yaml").write_text(ONE_GPU)
    one = report_html(analyze(load_any_scenario(str(tmp_path / "one.yaml")), QUICK))
    for html in (pages["llama3-8b-h100-8"], one):  # every transfer hidden; no transfer at all
        text = _text(html)
        assert "No communication is exposed on the critical path." in text
        assert "Dominant pattern" not in text


def test_the_console_says_nothing_is_exposed_as_the_page_does():
    """llama3-8b on one DGX H100 hides all its communication: the console's communication budget says so instead of
    naming a pattern with 0.00 ms (or '-' on one GPU), as the HTML page does."""
    import contextlib
    import io

    from narrowpath.cli.main import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["analyze", "llama3-8b-h100-8", "--no-what-ifs", "--no-simulate"]) == 0
    text = out.getvalue()
    assert "no communication is exposed on the critical path" in text and "dominant pattern" not in text
