"""A progress bar on stderr for long commands: redrawn in place on a terminal, a plain line now and then elsewhere.

    sweep [#########...........]  21/48 cells  44%  12.3 s  eta 15 s

On a terminal every update redraws the line; when stderr is a file or a pipe (CI logs) a line is written at most
every `every_s` seconds and at the end, so a log keeps a few lines rather than one per update.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

BAR_CHARS = 20


class Progress:
    def __init__(self, total: int, *, label: str, unit: str, stream: TextIO | None = None, enabled: bool = True,
                 every_s: float = 5.0):
        self.total, self.label, self.unit = max(total, 0), label, unit
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.every_s = every_s
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.t0 = time.monotonic()
        self.start_done: int | None = None
        """Items already done at the first update (reused ones): the rate counts only the rest."""
        self.last_line_t = -float("inf")
        self.done = 0

    def _line(self, done: int) -> str:
        elapsed = time.monotonic() - self.t0
        frac = done / self.total if self.total else 1.0
        filled = int(round(frac * BAR_CHARS))
        fresh = done - (self.start_done or 0)
        eta = ""
        if 0 < fresh and done < self.total:
            eta = f"  eta {elapsed / fresh * (self.total - done):.0f} s"
        return (f"{self.label} [{'#' * filled}{'.' * (BAR_CHARS - filled)}] {done:>{len(str(self.total))}}/"
                f"{self.total} {self.unit}  {100 * frac:3.0f}%  {elapsed:.1f} s{eta}")

    def update(self, done: int) -> None:
        if self.start_done is None:
            self.start_done = done
        self.done = done
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty:
            self.stream.write("\r" + self._line(done))
            self.stream.flush()
        elif now - self.last_line_t >= self.every_s or done >= self.total:
            self.stream.write(self._line(done) + "\n")
            self.stream.flush()
            self.last_line_t = now

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()
