"""Inline SVG charts for the HTML report, written by hand: no plotting library, no script, no network.

Every chart is an `<svg>` with a viewBox (it scales to the page width, 1280 px or a 390 px phone alike), a
`<title>` and `role="img"`, and its numbers as text nodes (so the DOM carries them). Tick labels are placed so
that they cannot overlap: a label is dropped when it would come closer than MIN_LABEL_GAP to the previous one
(the lesson of the PNG scaling plot's minor ticks). Axis scales: linear, log10 or log2.
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


def _f(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def fmt_num(v: float) -> str:
    """Short tick label: 1,024 · 0.05 · 3.2e-05."""
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e5 or a < 1e-3:
        return f"{v:.2g}"
    if a >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}"


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


def _placed(positions: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """Keep labels at least MIN_LABEL_GAP apart (in order of position)."""
    out: list[tuple[float, str]] = []
    for p, s in sorted(positions):
        if not out or abs(p - out[-1][0]) >= MIN_LABEL_GAP:
            out.append((p, s))
    return out


@dataclass(frozen=True)
class Series:
    label: str
    xs: tuple[float, ...]
    ys: tuple[float | None, ...]
    color: str
    dashed: bool = False
    hollow: tuple[bool, ...] = ()
    """Per point: draw hollow (e.g. the plan does not fit)."""


def line_chart(title: str, series: Sequence[Series], x_scale: str, y_scale: str, x_label: str, y_label: str,
               width: float = 480.0, height: float = 300.0, missing_x: Sequence[tuple[float, str]] = ()) -> str:
    """Lines with markers; `missing_x` marks sizes with no value (× on the x axis, reason in a tooltip)."""
    left, right, top, bottom = 64.0, 14.0, 26.0, 74.0
    pw, ph = width - left - right, height - top - bottom
    xs = [x for s in series for x in s.xs] + [x for x, _ in missing_x]
    ys = [y for s in series for y in s.ys if y is not None]
    ax, ay = axis_for(xs, x_scale), axis_for(ys, y_scale, zero=y_scale == "linear")
    X = lambda v: left + pw * ax.norm(v)  # noqa: E731
    Y = lambda v: top + ph * (1 - ay.norm(v))  # noqa: E731
    out = [svg_open(width, height, title), text(left, 16, title, size=13, cls="ct")]
    out.append(f'<rect x="{_f(left)}" y="{_f(top)}" width="{_f(pw)}" height="{_f(ph)}" fill="none" stroke="#999"/>')
    for p, s in _placed([(Y(v), fmt_num(v)) for v in ay.ticks()]):
        out.append(f'<line x1="{_f(left)}" x2="{_f(left + pw)}" y1="{_f(p)}" y2="{_f(p)}" stroke="#eee"/>')
        out.append(text(left - 5, p + 4, s, "end"))
    for p, s in _placed([(X(v), fmt_num(v)) for v in ax.ticks()]):
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
                   f'L{_f(px + 4)},{_f(py - 4)}" stroke="#d62728" stroke-width="2"><title>{escape(why)}</title>'
                   f'</path>')
    lx, ly = left, top + ph + 46
    for i, s in enumerate(series):
        cx = lx + (i % 2) * pw / 2
        cy = ly + (i // 2) * 15
        dash = ' stroke-dasharray="5 4"' if s.dashed else ""
        out.append(f'<line x1="{_f(cx)}" x2="{_f(cx + 18)}" y1="{_f(cy - 4)}" y2="{_f(cy - 4)}" '
                   f'stroke="{s.color}" stroke-width="2"{dash}/>')
        out.append(text(cx + 22, cy, s.label, size=11))
    out.append("</svg>")
    return "".join(out)


def stacked_hbar(title: str, segments: Sequence[tuple[str, float]], unit: str, width: float = 480.0) -> str:
    """One horizontal bar split into labelled segments (legend below, values as text)."""
    total = sum(v for _, v in segments if v > 0) or 1.0
    left, bar_h, top = 8.0, 26.0, 26.0
    pw = width - 2 * left
    height = top + bar_h + 12 + len(segments) * 20 + 6
    out = [svg_open(width, height, title), text(left, 16, title, size=13, cls="ct")]
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
        out.append(text(cx + 17, cy, f"{label}: {fmt_num(v)} {unit} ({v / total:.1%})", size=14))
    out.append("</svg>")
    return "".join(out)


def stacked_columns(title: str, categories: Sequence[str], series: Sequence[tuple[str, Sequence[float]]],
                    unit: str, cap: float | None = None, cap_label: str = "", width: float = 480.0,
                    height: float = 300.0) -> str:
    """Vertical stacked columns (e.g. memory per pipeline stage) with an optional capacity line."""
    left, right, top, bottom = 56.0, 10.0, 26.0, 44.0 + 15 * (-(-len(series) // 3))
    pw, ph = width - left - right, height - top - bottom
    totals = [sum(vals[i] for _, vals in series) for i in range(len(categories))]
    ay = axis_for(totals + ([cap] if cap else []), "linear", zero=True)
    Y = lambda v: top + ph * (1 - ay.norm(v))  # noqa: E731
    out = [svg_open(width, height, title), text(left, 16, title, size=13, cls="ct")]
    for p, s in _placed([(Y(v), fmt_num(v)) for v in ay.ticks()]):
        out.append(f'<line x1="{_f(left)}" x2="{_f(left + pw)}" y1="{_f(p)}" y2="{_f(p)}" stroke="#eee"/>')
        out.append(text(left - 5, p + 4, s, "end"))
    out.append(text(14, top + ph / 2, unit, "middle", rotate=-90))
    n = max(1, len(categories))
    slot = pw / n
    bw = min(60.0, slot * 0.6)
    for i, cat in enumerate(categories):
        x = left + slot * i + (slot - bw) / 2
        base = 0.0
        for j, (name, vals) in enumerate(series):
            v = vals[i]
            if v > 0:
                out.append(f'<rect x="{_f(x)}" y="{_f(Y(base + v))}" width="{_f(bw)}" height="{_f(Y(base) - Y(base + v))}"'
                           f' fill="{PALETTE[j % len(PALETTE)]}"><title>{escape(cat)} {escape(name)}: {fmt_num(v)} '
                           f'{escape(unit)}</title></rect>')
            base += v
        out.append(text(x + bw / 2, Y(base) - 4, fmt_num(base), "middle", size=11))
    for p, s in _placed([(left + slot * i + slot / 2, c) for i, c in enumerate(categories)]):
        out.append(text(p, top + ph + 15, s, "middle", size=11))
    if cap:
        out.append(f'<line x1="{_f(left)}" x2="{_f(left + pw)}" y1="{_f(Y(cap))}" y2="{_f(Y(cap))}" stroke="#d62728"'
                   f' stroke-dasharray="6 4"/>')
        out.append(text(left + pw - 2, Y(cap) - 4, cap_label, "end", size=11))
    for j, (name, _) in enumerate(series):
        cx = left + (j % 3) * pw / 3
        cy = top + ph + 34 + (j // 3) * 15
        out.append(f'<rect x="{_f(cx)}" y="{_f(cy - 9)}" width="10" height="10" fill="{PALETTE[j % len(PALETTE)]}"/>')
        out.append(text(cx + 14, cy, name, size=11))
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
    out = [svg_open(width, height, title), text(8, 16, title, size=13, cls="ct")]
    for i, name in enumerate(tracks):
        out.append(text(left - 6, top + row * i + row / 2 + 4, name, "end", size=11))
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
    for p, s in _placed([(left + pw * ax.norm(v), fmt_num(v)) for v in ax.ticks()]):
        out.append(text(p, top + row * len(tracks) + 15, s, "middle", size=11))
    out.append(text(left + pw / 2, top + row * len(tracks) + 30, f"time ({unit})", "middle", size=11))
    out.append("</svg>")
    return "".join(out)
