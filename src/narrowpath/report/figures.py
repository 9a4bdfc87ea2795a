"""Matplotlib plumbing shared by every plot: a headless pyplot, and one way to write a figure to PNG."""
from __future__ import annotations

from pathlib import Path

from narrowpath.errors import NarrowpathError


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend; a clear error when the `plots` extra is missing."""
    try:
        import matplotlib
    except ImportError:
        raise NarrowpathError("--plots needs matplotlib: pip install 'narrowpath[plots]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, path, *, dpi: int = 110, tight_layout: bool = True, bbox_inches: str | None = None):
    """Lay out, write and close `fig`; returns `path` unchanged (str or Path), creating its folder."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    if tight_layout:
        fig.tight_layout()
    fig.savefig(path, dpi=dpi, bbox_inches=bbox_inches)
    pyplot().close(fig)
    return path
