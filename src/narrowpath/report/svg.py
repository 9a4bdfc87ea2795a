"""Inline SVG charts for the HTML report, written by hand: no plotting library, no script, no network.

Every chart is an `<svg>` with a viewBox (it scales to the page width, 1280 px or a 390 px phone alike), a
`<title>` and `role="img"`, and its numbers as text nodes (so the DOM carries them). Text is measured by an
estimate (`text_width`: CHAR_W font sizes a character, which errs wide for system-ui digits and lower case) so
that labels cannot overlap and stay inside the viewBox: a tick label is dropped when it would come closer than
MIN_LABEL_GAP to the previous one, or closer than half the two labels' widths plus LABEL_PAD along a horizontal
axis (the lesson of the PNG scaling plot's minor ticks); a label too long for its column is shortened, the full
text in its tooltip; legend entries wrap to a new row. Axis scales: linear, log10 or log2.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Sequence

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
FONT = 12
MIN_LABEL_GAP = 38.0
"""Smallest distance between two tick labels, in viewBox units (≈ px at full width)."""
CHAR_W = 0.6
"""Estimated advance of one character, in font sizes."""
LABEL_PAD = 4.0
"""Smallest space between two labels side by side, in viewBox units."""


def _f(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def fmt_num(v: float) -> str:
    """Short tick label: 131,072 · 1,024 · 0.05 · 3.2e-05 · 2.5e+07."""
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e7 or a < 1e-3:
        return f"{v:.2g}"
    if a >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def fmt_compact(v: float) -> str:
    """A tick label in little room (a y axis' margin): 950 · 120k · 1.5M (fmt_num below 10,000)."""
    a = abs(v)
    if a < 1e4 or a >= 1e10:
        return fmt_num(v)
    k, suffix = (1e3, "k") if a < 1e6 else (1e6, "M") if a < 1e9 else (1e9, "G")
    return f"{v / k:.3g}{suffix}"


def text_width(s: str, size: float = FONT) -> float:
    """Estimated width of `s` at font size `size`, in viewBox units."""
    return CHAR_W * size * len(s)


def svg_open(width: float, height: float, title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_f(width)} {_f(height)}" role="img" '
            f'class="chart" font-family="system-ui, sans-serif" font-size="{FONT}"><title>{escape(title)}</title>')


def text(x: float, y: float, s: str, anchor: str = "start", size: int = FONT, cls: str = "",
         rotate: float = 0.0) -> str:
    tr = f' transform="rotate({_f(rotate)} {_f(x)} {_f(y)})"' if rotate else ""
    c = f' class="{cls}"' if cls else ""
    return (f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}" font-size="{size}"{c}{tr}>'
            f'{escape(s)}</text>')


@dataclass(frozen=True)
class Axis:
    lo: float
    hi: float
    scale: str = "linear"
    """`linear`, `log10` or `log2`."""

    def norm(self, v: float) -> float:
        if self.scale == "linear":
            return (v - self.lo) / (self.hi - self.lo) if self.hi > self.lo else 0.5
        b = 2.0 if self.scale == "log2" else 10.0
        lo, hi = math.log(self.lo, b), math.log(self.hi, b)
        return (math.log(max(v, 1e-300), b) - lo) / (hi - lo) if hi > lo else 0.5

    def ticks(self) -> list[float]:
        if self.scale == "log2":
            return [2.0 ** k for k in range(math.floor(math.log2(self.lo)), math.ceil(math.log2(self.hi)) + 1)
                    if self.lo <= 2.0 ** k <= self.hi]
        if self.scale == "log10":
            lo, hi = math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi))
            mult = (1, 2, 5) if hi - lo <= 2 else (1,)
            return [m * 10.0 ** k for k in range(lo, hi + 1) for m in mult if self.lo <= m * 10.0 ** k <= self.hi]
        span = self.hi - self.lo
        if span <= 0:
            return [self.lo]
        step = 10 ** math.floor(math.log10(span / 5))
        for m in (1, 2, 5, 10):
            if span / (m * step) <= 6:
                step *= m
                break
        first = math.ceil(self.lo / step) * step
        return [first + i * step for i in range(int((self.hi - first) / step + 1e-9) + 1)]


def axis_for(values: Sequence[float], scale: str, zero: bool = False) -> Axis:
    vals = [v for v in values if v is not None and math.isfinite(v) and (scale == "linear" or v > 0)]
    if not vals:
        return Axis(0.0, 1.0) if scale == "linear" else Axis(1.0, 10.0, scale)
    lo, hi = min(vals), max(vals)
    if scale == "linear":
        lo = min(lo, 0.0) if zero else lo
        pad = (hi - lo) * 0.08 or abs(hi) * 0.1 or 1.0
        return Axis(lo if zero else lo - pad, hi + pad)
    f = 2.0 if scale == "log2" else 10.0
    if hi / lo < f:
        lo, hi = lo / math.sqrt(f), hi * math.sqrt(f)
    return Axis(lo / 1.15, hi * 1.15, scale)


def _placed(positions: list[tuple], size: float | None = None, lo: float = -math.inf, hi: float = math.inf,
            min_gap: float = MIN_LABEL_GAP) -> list[tuple]:
    """Keep labels (position, text, anything else) at least `min_gap` apart, in order of position. With `size`, the
    labels sit side by side along a horizontal axis, centred on their positions: each centre is moved inside
    [lo, hi] by half its width, and two kept labels are at least half their widths plus LABEL_PAD apart."""
    out: list[tuple] = []
    for p, s, *rest in sorted(positions, key=lambda t: t[0]):
        half = 0.0 if size is None else text_width(s, size) / 2
        if size is not None:
            p = max(lo + half, min(hi - half, p))
        need = min_gap if size is None or not out else max(min_gap, half + text_width(out[-1][1], size) / 2
                                                          + LABEL_PAD)
        if not out or p - out[-1][0] >= need:
            out.append((p, s, *rest))
    return out


def _fit(s: str, room: float, size: float) -> str:
    """`s`, cut with an ellipsis to fit `room` at font size `size`."""
    if text_width(s, size) <= room:
        return s
    return s[:max(1, int(room / (CHAR_W * size)) - 1)] + "…"


def _legend(labels: Sequence[str], x0: float, right: float, columns: int, size: float,
            mark: float) -> list[tuple[float, int, str]]:
    """Legend entries (x, row, text) in `columns` columns from x0 to `right`: an entry wider than its column takes
    the next ones too, and starts a new row when it would run past `right` (cut to fit only when wider than a row);
    `mark` is the room its swatch and gap take before the text."""
    col = (right - x0) / columns
    out: list[tuple[float, int, str]] = []
    row, x = 0, x0
    for label in labels:
        w = mark + text_width(label, size)
        if x > x0 and x + w > right:
            row, x = row + 1, x0
        out.append((x, row, _fit(label, right - x - mark, size)))
        x = x0 + col * math.ceil((x + w + LABEL_PAD - x0) / col - 1e-9)
    return out


def _titled_text(x: float, y: float, shown: str, full: str, anchor: str, size: int) -> str:
    """A label whose full text, when it is shortened, is its tooltip."""
    t = text(x, y, shown, anchor, size=size)
    return t if shown == full else f"<g><title>{escape(full)}</title>{t}</g>"


@dataclass(frozen=True)
class Series:
    label: str
    xs: tuple[float, ...]
    ys: tuple[float | None, ...]
    color: str
    dashed: bool = False
    hollow: tuple[bool, ...] = ()
    """Per point: draw hollow (e.g. the plan does not fit)."""


MISSING_COLOR = "#3f3f46"
"""The × of a size with no valid plan: a colour no series takes (PALETTE[3], the weak-scaling line, is red)."""


def line_chart(title: str, series: Sequence[Series], x_scale: str, y_scale: str, x_label: str, y_label: str,
               width: float = 480.0, height: float = 300.0, missing_x: Sequence[tuple[float, str]] = ()) -> str:
    """Lines with markers; `missing_x` marks sizes with no value (× on the x axis, reason in a tooltip). The legend
    wraps to as many rows as it needs; the chart grows by the rows beyond two."""
    left, right, top, bottom = 64.0, 14.0, 26.0, 74.0
    pw, ph = width - left - right, height - top - bottom
    legend = _legend([s.label for s in series], left, width - 4, 2, 11, 22)
    height += 15 * max(0, max((r for _, r, _ in legend), default=0) - 1)
    xs = [x for s in series for x in s.xs] + [x for x, _ in missing_x]
    ys = [y for s in series for y in s.ys if y is not None]
    ax, ay = axis_for(xs, x_scale), axis_for(ys, y_scale, zero=y_scale == "linear")
    X = lambda v: left + pw * ax.norm(v)  # noqa: E731
    Y = lambda v: top + ph * (1 - ay.norm(v))  # noqa: E731
    out = [svg_open(width, height, title), text(left, 16, _fit(title, width - left - 4, 13), size=13, cls="ct")]
    out.append(f'<rect x="{_f(left)}" y="{_f(top)}" width="{_f(pw)}" height="{_f(ph)}" fill="none" stroke="#999"/>')
    for p, s in _placed([(Y(v), fmt_num(v) if abs(v) < 1e5 else fmt_compact(v)) for v in ay.ticks()]):
        out.append(f'<line x1="{_f(left)}" x2="{_f(left + pw)}" y1="{_f(p)}" y2="{_f(p)}" stroke="#eee"/>')
        out.append(text(left - 5, p + 4, s, "end"))
    for p, s in _placed([(X(v), fmt_num(v)) for v in ax.ticks()], FONT, 0.0, width):
        out.append(text(p, top + ph + 15, s, "middle"))
    out.append(text(left + pw / 2, top + ph + 31, x_label, "middle"))
    out.append(text(14, top + ph / 2, y_label, "middle", rotate=-90))
    for s in series:
        pts = [(X(x), Y(y), i) for i, (x, y) in enumerate(zip(s.xs, s.ys)) if y is not None]
        if len(pts) > 1:
            d = " ".join(f"{'M' if k == 0 else 'L'}{_f(px)},{_f(py)}" for k, (px, py, _) in enumerate(pts))
            dash = ' stroke-dasharray="5 4"' if s.dashed else ""
            out.append(f'<path d="{d}" fill="none" stroke="{s.color}" stroke-width="2"{dash}/>')
        for px, py, i in pts:
            hollow = bool(s.hollow[i]) if i < len(s.hollow) else False
            out.append(f'<circle cx="{_f(px)}" cy="{_f(py)}" r="3.5" stroke="{s.color}" stroke-width="1.5" '
                       f'fill="{"#fff" if hollow else s.color}"><title>{escape(s.label)}: {fmt_num(s.xs[i])}, '
                       f'{fmt_num(s.ys[i])}{" (does not fit)" if hollow else ""}</title></circle>')
    for x, why in missing_x:
        px, py = X(x), top + ph
        out.append(f'<path d="M{_f(px - 4)},{_f(py - 4)}L{_f(px + 4)},{_f(py + 4)}M{_f(px - 4)},{_f(py + 4)}'
                   f'L{_f(px + 4)},{_f(py - 4)}" stroke="{MISSING_COLOR}" stroke-width="2"><title>{escape(why)}'
                   f'</title></path>')
    for s, (cx, row, label) in zip(series, legend):
        cy = top + ph + 46 + row * 15
        dash = ' stroke-dasharray="5 4"' if s.dashed else ""
        out.append(f'<line x1="{_f(cx)}" x2="{_f(cx + 18)}" y1="{_f(cy - 4)}" y2="{_f(cy - 4)}" '
                   f'stroke="{s.color}" stroke-width="2"{dash}/>')
        out.append(_titled_text(cx + 22, cy, label, s.label, "start", 11))
    out.append("</svg>")
    return "".join(out)


def stacked_hbar(title: str, segments: Sequence[tuple[str, float]], unit: str, width: float = 480.0) -> str:
    """One horizontal bar split into labelled segments (legend below, values as text)."""
    total = sum(v for _, v in segments if v > 0) or 1.0
    left, bar_h, top = 8.0, 26.0, 26.0
    pw = width - 2 * left
    height = top + bar_h + 12 + len(segments) * 20 + 6
    out = [svg_open(width, height, title), text(left, 16, _fit(title, width - left - 4, 13), size=13, cls="ct")]
    x = left
    for i, (label, v) in enumerate(segments):
        if v <= 0:
            continue
        w = pw * v / total
        out.append(f'<rect x="{_f(x)}" y="{_f(top)}" width="{_f(max(w, 0.5))}" height="{_f(bar_h)}" '
                   f'fill="{PALETTE[i % len(PALETTE)]}"><title>{escape(label)}: {fmt_num(v)} {unit}</title></rect>')
        x += w
    for i, (label, v) in enumerate(segments):
        cx = left
        cy = top + bar_h + 24 + i * 20
        out.append(f'<rect x="{_f(cx)}" y="{_f(cy - 11)}" width="12" height="12" fill="{PALETTE[i % len(PALETTE)]}"/>')
        full = f"{label}: {fmt_num(v)} {unit} ({v / total:.1%})"
        out.append(_titled_text(cx + 17, cy, _fit(full, width - cx - 21, 14), full, "start", 14))
    out.append("</svg>")
    return "".join(out)


def stacked_columns(title: str, categories: Sequence[str], series: Sequence[tuple[str, Sequence[float]]],
                    unit: str, cap: float | None = None, cap_label: str = "", width: float = 480.0,
                    height: float = 300.0, short: Sequence[str] = ()) -> str:
    """Vertical stacked columns (e.g. memory per pipeline stage) with an optional capacity line (named in the
    legend). The columns are labelled by `categories`, or by `short` (the same categories in fewer characters, the
    full name in a tooltip) when a category is wider than its column; labels that would still overlap are thinned.
    Each column's total stands above it when every total fits its column (at font size 11, else 10); else none
    does, and every segment's tooltip keeps its column's total."""
    n = max(1, len(categories))
    left, right, top = 56.0, 10.0, 26.0
    legend = _legend([name for name, _ in series] + ([cap_label] if cap else []), left, width - 4, 3, 11, 14)
    bottom = 44.0 + 15 * (max((r for _, r, _ in legend), default=0) + 1)
    pw, ph = width - left - right, height - top - bottom
    slot = pw / n
    fits = lambda labels: all(text_width(c, 11) + LABEL_PAD <= slot for c in labels)  # noqa: E731
    shown = categories if fits(categories) or len(short) != len(categories) else short
    totals = [sum(vals[i] for _, vals in series) for i in range(len(categories))]
    ay = axis_for(totals + ([cap] if cap else []), "linear", zero=True)
    Y = lambda v: top + ph * (1 - ay.norm(v))  # noqa: E731
    out = [svg_open(width, height, title), text(left, 16, _fit(title, width - left - 4, 13), size=13, cls="ct")]
    for p, s in _placed([(Y(v), fmt_num(v)) for v in ay.ticks()]):
        out.append(f'<line x1="{_f(left)}" x2="{_f(left + pw)}" y1="{_f(p)}" y2="{_f(p)}" stroke="#eee"/>')
        out.append(text(left - 5, p + 4, s, "end"))
    out.append(text(14, top + ph / 2, unit, "middle", rotate=-90))
    bw = min(60.0, slot * 0.6)
    heads = []
    for i, cat in enumerate(categories):
        x = left + slot * i + (slot - bw) / 2
        base = 0.0
        for j, (name, vals) in enumerate(series):
            v = vals[i]
            if v > 0:
                out.append(f'<rect x="{_f(x)}" y="{_f(Y(base + v))}" width="{_f(bw)}" height="{_f(Y(base) - Y(base + v))}"'
                           f' fill="{PALETTE[j % len(PALETTE)]}"><title>{escape(cat)} {escape(name)}: {fmt_num(v)} '
                           f'{escape(unit)} (column {fmt_num(totals[i])} {escape(unit)})</title></rect>')
            base += v
        heads.append((x + bw / 2, fmt_num(base), Y(base) - 4))
    size = next((z for z in (11, 10) if all(text_width(s, z) <= slot for _, s, _ in heads)), None)
    for p, s, y in heads if size else ():
        out.append(text(p, y, s, "middle", size=size))
    for p, s, full in _placed([(left + slot * i + slot / 2, c, categories[i]) for i, c in enumerate(shown)], 11,
                              0.0, width, 0.0):
        out.append(_titled_text(p, top + ph + 15, s, full, "middle", 11))
    if cap:
        out.append(f'<line x1="{_f(left)}" x2="{_f(left + pw)}" y1="{_f(Y(cap))}" y2="{_f(Y(cap))}" stroke="#d62728"'
                   f' stroke-dasharray="6 4"/>')
    for j, (cx, row, label) in enumerate(legend):
        cy = top + ph + 34 + row * 15
        if j == len(series):  # the capacity line
            out.append(f'<line x1="{_f(cx)}" x2="{_f(cx + 10)}" y1="{_f(cy - 4)}" y2="{_f(cy - 4)}" stroke="#d62728" '
                       f'stroke-width="2" stroke-dasharray="3 2"/>')
            out.append(_titled_text(cx + 14, cy, label, cap_label, "start", 11))
            continue
        out.append(f'<rect x="{_f(cx)}" y="{_f(cy - 9)}" width="10" height="10" fill="{PALETTE[j % len(PALETTE)]}"/>')
        out.append(_titled_text(cx + 14, cy, label, series[j][0], "start", 11))
    out.append("</svg>")
    return "".join(out)


def gantt(title: str, tracks: Sequence[str], bars: Sequence[tuple[int, float, float, str, str]], total: float,
          unit_scale: float = 1.0, unit: str = "s", width: float = 480.0) -> str:
    """Tracks of bars (track index, start, duration, label, colour) over [0, total]; bars narrower than half a unit
    of the viewBox are merged with their neighbours of the same track and colour so that a long step stays light."""
    left, right, top, row = 112.0, 10.0, 26.0, 24.0
    pw = width - left - right
    height = top + row * len(tracks) + 34
    X = lambda v: left + pw * (v / total if total > 0 else 0.0)  # noqa: E731
    out = [svg_open(width, height, title), text(8, 16, _fit(title, width - 12, 13), size=13, cls="ct")]
    for i, name in enumerate(tracks):
        out.append(_titled_text(left - 6, top + row * i + row / 2 + 4, _fit(name, left - 10, 11), name, "end", 11))
        out.append(f'<line x1="{_f(left)}" x2="{_f(left + pw)}" y1="{_f(top + row * (i + 1))}" '
                   f'y2="{_f(top + row * (i + 1))}" stroke="#eee"/>')
    merged: list[list] = []
    for tr, start, dur, label, color in sorted(bars, key=lambda b: (b[0], b[1])):
        last = merged[-1] if merged else None
        if last and last[0] == tr and last[4] == color and X(start) - X(last[1] + last[2]) < 0.5:
            last[2] = start + dur - last[1]
            last[3] = last[3] if last[3] == label else "several"
            continue
        merged.append([tr, start, dur, label, color])
    for tr, start, dur, label, color in merged:
        out.append(f'<rect x="{_f(X(start))}" y="{_f(top + row * tr + 4)}" width="{_f(max(0.6, X(start + dur) - X(start)))}"'
                   f' height="{_f(row - 8)}" fill="{color}"><title>{escape(label)}: {fmt_num(dur * unit_scale)} '
                   f'{unit}</title></rect>')
    ax = Axis(0.0, total * unit_scale)
    for p, s in _placed([(left + pw * ax.norm(v), fmt_num(v)) for v in ax.ticks()], 11, 0.0, width):
        out.append(text(p, top + row * len(tracks) + 15, s, "middle", size=11))
    out.append(text(left + pw / 2, top + row * len(tracks) + 30, f"time ({unit})", "middle", size=11))
    out.append("</svg>")
    return "".join(out)
