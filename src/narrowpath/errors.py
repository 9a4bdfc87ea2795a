"""The one exception family of narrowpath.

These errors are for bad user input or data; `assert` is reserved for our own invariants.
The CLI turns any `NarrowpathError` into a one-line message and exit code 2.
"""
from __future__ import annotations


class NarrowpathError(Exception):
    """Base class of every error narrowpath raises on purpose."""


class SpecError(NarrowpathError):
    """A scenario, model, system or plan is invalid. `field` is the dotted path of the offending field."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.detail = message
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
