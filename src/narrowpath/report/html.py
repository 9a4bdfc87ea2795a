"""One self-contained HTML page: inline CSS, inline SVG, no script, no font, no image, no link to fetch.

The Content-Security-Policy meta tag (`default-src 'none'`, inline styles and data: images only) makes the
browser refuse any request the page might still make, so "no network" holds by construction, not only by care.
Layout: one column, max 1180 px; on a phone (≤ 600 px) tables scroll sideways inside their own box and charts
scale with the page; a word longer than its line (a long scenario name) breaks anywhere rather than widen it;
print hides nothing and avoids breaking a figure or a table row across pages.
"""
from __future__ import annotations

from html import escape
from typing import Iterable, Sequence

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

CSS = """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d1d1f;
       background: #fff; }
main { max-width: 1180px; margin: 0 auto; padding: 18px 22px 40px; }
h1 { font-size: 1.55em; margin: 0.2em 0 0.1em; }
h2 { font-size: 1.2em; margin: 1.6em 0 0.4em; padding-bottom: 0.2em; border-bottom: 2px solid #e4e4e7; }
h3 { font-size: 1.02em; margin: 1.1em 0 0.3em; }
p, li { max-width: 78ch; }
h1, h2, h3, p, li, .kpi, .verdict { overflow-wrap: anywhere; }
.sub { color: #52525b; margin: 0 0 0.8em; }
.kpis { display: grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: 10px; margin: 12px 0; }
.kpi { border: 1px solid #e4e4e7; border-radius: 8px; padding: 8px 12px; background: #fafafa; }
.kpi .v { font-size: 1.35em; font-weight: 600; }
.kpi .l { color: #52525b; font-size: 0.85em; }
.verdict { border-left: 4px solid #d62728; background: #fff7f7; padding: 8px 14px; margin: 10px 0; }
.note { color: #52525b; font-size: 0.9em; }
.warn { color: #b91c1c; font-weight: 600; }
.scroll { overflow-x: auto; -webkit-overflow-scrolling: touch; margin: 6px 0 12px; }
table { border-collapse: collapse; font-size: 0.88em; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 8px; border-bottom: 1px solid #eee; text-align: right; white-space: nowrap; }
th { background: #f4f4f5; position: sticky; top: 0; }
th:first-child, td:first-child { text-align: left; }
td.text, th.text { text-align: left; white-space: normal; min-width: 16ch; }
tr.dim td { color: #71717a; }
.figs { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(100%, 500px), 1fr)); gap: 14px; }
figure { margin: 0; }
svg.chart { width: 100%; height: auto; display: block; }
svg .ct { font-weight: 600; }
.sw { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.3em; vertical-align: -0.05em; }
nav { font-size: 0.9em; margin: 6px 0 0; display: flex; flex-wrap: wrap; gap: 0.2em 0.9em; }
nav a { color: #1f5fae; }
@media (max-width: 600px) {
  body { font-size: 14px; }
  main { padding: 10px 10px 30px; }
  h1 { font-size: 1.25em; }
  .kpis { grid-template-columns: repeat(2, minmax(0, 1fr)); }
}
@media print {
  main { max-width: none; padding: 0; }
  .scroll { overflow: visible; }
  figure, tr, .kpi, .verdict { break-inside: avoid; }
  h2 { break-after: avoid; }
  nav { display: none; }
}
"""


def page(title: str, body: str) -> str:
    """The whole document around `body`."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body><main>\n{body}\n</main></body></html>\n")


def esc(s: object) -> str:
    return escape(str(s))


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, text_cols: Sequence[int] = (),
          row_classes: Sequence[str] | None = None, cls: str = "") -> str:
    """A table in its own horizontally scrolling box; `text_cols` wrap and align left."""
    th = "".join(f'<th{" class=text" if i in text_cols else ""}>{esc(h)}</th>' for i, h in enumerate(headers))
    body = []
    for k, r in enumerate(rows):
        rc = f' class="{row_classes[k]}"' if row_classes and row_classes[k] else ""
        tds = "".join(f'<td{" class=text" if i in text_cols else ""}>{c if isinstance(c, Raw) else esc(c)}</td>'
                      for i, c in enumerate(r))
        body.append(f"<tr{rc}>{tds}</tr>")
    c = f' class="{cls}"' if cls else ""
    return f'<div class="scroll"><table{c}><thead><tr>{th}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


class Raw(str):
    """Markup that `table` inserts as is (already escaped)."""


def section(anchor: str, title: str, *parts: str) -> str:
    return f'<section id="{esc(anchor)}"><h2>{esc(title)}</h2>' + "".join(parts) + "</section>"


def para(s: str, cls: str = "") -> str:
    return f'<p{f" class={cls}" if cls else ""}>{esc(s)}</p>'


def figures(*svgs: str) -> str:
    return '<div class="figs">' + "".join(f"<figure>{s}</figure>" for s in svgs if s) + "</div>"


def kpis(items: Sequence[tuple[str, str]]) -> str:
    return '<div class="kpis">' + "".join(f'<div class="kpi"><div class="v">{esc(v)}</div>'
                                          f'<div class="l">{esc(label)}</div></div>' for v, label in items) + "</div>"
