"""The one exception family of narrowpath.

These errors are for bad user input or data; `assert` is reserved for our own invariants.
The CLI turns any `NarrowpathError` into a one-line message and exit code 2.
"""
from __future__ import annotations

import reprlib

MAX_MESSAGE_CHARS = 600
"""Longest message an error keeps: a user's value quoted whole could be megabytes (a list in a numeric field)."""

_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict, _REPR.maxlevel = 40, 40, 6, 6, 4, 3


def shown(value: object, limit: int = 80) -> str:
    """A user's value as a message quotes it: its repr, cut to about `limit` characters without building the
    whole repr first (reprlib looks at a few elements of a container, a few levels deep)."""
    try:
        text = _REPR.repr(value)
    except ValueError:  # an int too long to print in decimal
        text = f"<an integer of about {int(value.bit_length() * 0.30103) + 1} digits>" \
            if isinstance(value, int) else f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _bounded(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return f"{message[:MAX_MESSAGE_CHARS - 40]}… ({len(message):,} characters in all)"


class NarrowpathError(Exception):
    """Base class of every error narrowpath raises on purpose. A message longer than MAX_MESSAGE_CHARS is cut."""

    def __init__(self, *args: object):
        if len(args) == 1 and isinstance(args[0], str):
            args = (_bounded(args[0]),)
        super().__init__(*args)


class SpecError(NarrowpathError):
    """A scenario, model, system or plan is invalid. `field` is the dotted path of the offending field."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.detail = _bounded(message)
        """The message without the field name (to re-raise it under another name, e.g. a CLI flag)."""
        super().__init__(f"{field}: {message}" if field else message)


class CatalogError(NarrowpathError):
    """An unknown or duplicate catalog id, or a malformed catalog file."""


class TraceFormatError(NarrowpathError):
    """A profiler trace that cannot be read; the message names the file and what is wrong."""


class SimulationError(NarrowpathError):
    """The event simulator was given something it cannot run."""


class InfeasibleError(NarrowpathError):
    """A plan that does not fit (memory); the message names the item that overflows and by how much."""
