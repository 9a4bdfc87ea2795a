"""The HTML report in a real headless Chromium (Debian's package, driven over the DevTools protocol): every catalog
scenario's report and a comparison page load with no console error and no request but the file itself, at a
1280 px desktop and on a 390 px phone; the page never scrolls sideways on the phone (wide tables scroll in their own
box); screenshots are not blank; the key numbers are in the rendered text; every chart has a size on screen."""
from __future__ import annotations

import io
import re

import numpy as np
import pytest

VIEWPORTS = {"desktop": (1280, 900, False), "phone": (390, 844, True)}


def _png(data: bytes) -> np.ndarray:
    import matplotlib.image as mpimg
    return mpimg.imread(io.BytesIO(data), format="png")


def _not_blank(img: np.ndarray) -> None:
    rgb = img[..., :3]
    ink = (rgb.min(axis=2) < 0.85).mean()
    colours = len(np.unique((rgb[::4, ::4] * 31).astype(np.uint8).reshape(-1, 3), axis=0))
    assert ink > 0.02 and colours > 12, (ink, colours)


def _load(browser, path, viewport):
    page = browser.page(*VIEWPORTS[viewport])
    page.goto(path.as_uri())
    return page


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_every_catalog_report_renders_cleanly(browser, reports, viewport):
    for sid, (a, path) in reports.items():
        page = _load(browser, path, viewport)
        try:
            assert page.console_errors() == [], sid
            assert page.requests() == [path.as_uri()], sid
            width = VIEWPORTS[viewport][0]
            assert page.eval("document.documentElement.scrollWidth") <= width, (sid, "page scrolls sideways")
            text = page.eval("document.body.innerText")
            p = a.prediction
            for needle in (f"{p.step_time_s:.4g} s", f"{p.tokens_per_s:,.0f}", f"{p.mfu * 100:.1f} %",
                           "narrowest path", "Validation evidence"):
                assert needle in text, (sid, needle)
            sizes = page.eval("Array.from(document.querySelectorAll('svg.chart')).map(s => "
                              "[s.getBoundingClientRect().width, s.getBoundingClientRect().height])")
            assert len(sizes) >= 4 and all(w > 150 and h > 60 for w, h in sizes), (sid, sizes)
            _not_blank(_png(page.screenshot(full_page=False)))
        finally:
            page.close()


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_full_page_screenshot_of_the_default_report(browser, reports, viewport, tmp_path):
    """The whole default report, top to bottom: not blank, and as tall as its content (charts drawn)."""
    a, path = reports["llama3-70b-h100-256"]
    page = _load(browser, path, viewport)
    try:
        img = _png(page.screenshot(full_page=True))
        assert img.shape[1] == VIEWPORTS[viewport][0] and img.shape[0] > 4000
        _not_blank(img)
        band = img[: img.shape[0] // 2]  # the charts of the top half
        _not_blank(band)
    finally:
        page.close()


def test_the_default_report_prints(browser, reports):
    """Printing (Chromium's print to PDF, A4) gives a multi-page PDF without a console error."""
    import base64
    a, path = reports["llama3-70b-h100-256"]
    page = _load(browser, path, "desktop")
    try:
        pdf = base64.b64decode(page.cmd("Page.printToPDF", {"paperWidth": 8.27, "paperHeight": 11.69})["data"])
        assert pdf[:5] == b"%PDF-" and len(re.findall(rb"/Type\s*/Page\b", pdf)) >= 3
        assert page.console_errors() == []
    finally:
        page.close()


def test_compare_page_renders_cleanly(browser, tmp_path):
    from narrowpath.cli.main import main
    out = tmp_path / "cmp.html"
    assert main(["compare", "llama3-70b-h100-256", "--what-if", "top", "--html", str(out)]) == 0
    for viewport in VIEWPORTS:
        page = _load(browser, out, viewport)
        try:
            assert page.console_errors() == [] and page.requests() == [out.as_uri()]
            assert page.eval("document.documentElement.scrollWidth") <= VIEWPORTS[viewport][0]
            text = page.eval("document.body.innerText")
            assert "What changed and why" in text and "B differs from A in" in text
            _not_blank(_png(page.screenshot(full_page=False)))
        finally:
            page.close()


def test_the_page_cannot_fetch_anything(browser, tmp_path):
    """Both detectors work: an image pointing outside is refused by the Content-Security-Policy (a console error)
    and its attempt is seen as a request — so a report that ever gained an external reference would fail the tests
    above twice."""
    from narrowpath.report.html import page as html_page
    probe = tmp_path / "probe.html"
    probe.write_text(html_page("probe", '<img src="http://198.51.100.1/x.png" alt="x">'))
    page = _load(browser, probe, "desktop")
    try:
        errors = page.console_errors()
        assert any("Content Security Policy" in e for e in errors), errors
        assert "http://198.51.100.1/x.png" in page.requests()
    finally:
        page.close()
