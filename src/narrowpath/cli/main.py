"""Entry point of the `narrowpath` command: dispatches to one module per subcommand.

Each module in SUBCOMMANDS exposes `register(subparsers)`, which adds its parser and sets `func(args) -> int`.
Any NarrowpathError becomes one line on stderr and exit code 2 — never a traceback; so does a failed write to
standard output (`> /dev/full`, a full disk), and a closed pipe (`| head`) ends quietly. Ctrl-C and SIGTERM end
the command with one line (exit 130 / 143) after its `finally` blocks ran: no worker process outlives it.
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator
from importlib.metadata import PackageNotFoundError, version

from narrowpath.errors import NarrowpathError

SUBCOMMANDS = (
    "narrowpath.cli.predict_cmd",
    "narrowpath.cli.analyze_cmd",
    "narrowpath.cli.catalog_cmd",
    "narrowpath.cli.validate_cmd",
    "narrowpath.cli.collective_cmd",
    "narrowpath.cli.trace_cmd",
    "narrowpath.cli.probe_cmd",
    "narrowpath.cli.calibrate_cmd",
    "narrowpath.cli.search_cmd",
    "narrowpath.cli.compare_cmd",
    "narrowpath.cli.report_cmd",
    "narrowpath.cli.serve_cmd",
)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (plus where to look), not the whole usage block."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _version() -> str:
    try:
        return version("narrowpath")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "(not installed)"


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush of what is still buffered cannot fail
    again (with a traceback) after the error has been reported."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (captured in tests)
        pass


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="narrowpath",
        description="Where the time goes in distributed AI training: the narrowest path, and what would widen it.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS:
        importlib.import_module(module_name).register(sub)
    return parser


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that `finally` blocks run (search terminates its workers)."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While a command runs, SIGTERM raises Terminated instead of killing the process where it stands (which would
    orphan worker processes); the previous handler comes back afterwards (main() also runs inside tests)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        with _sigterm_raises():
            code = int(args.func(args) or 0)
        sys.stdout.flush()  # a write that fails fails here, not in the interpreter's exit
        return code
    except KeyboardInterrupt:
        print("narrowpath: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("narrowpath: terminated", file=sys.stderr)
        return 143
    except NarrowpathError as exc:
        print(f"narrowpath: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except OSError as exc:  # a write to stdout (no file name) or an unexpected I/O failure
        _silence_stdout()
        where = exc.filename if exc.filename else "cannot write to standard output"
        print(f"narrowpath: error: {where}: {exc.strerror or exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
