"""Entry point of the `narrowpath` command: dispatches to one module per subcommand.

Each module in COMMANDS exposes `register(subparsers)`, which adds its parser and sets `func(args) -> int`.
Any NarrowpathError becomes one line on stderr and exit code 2 — never a traceback; so does a failed write to
standard output (`> /dev/full`, a full disk), and a closed pipe (`| head`) ends quietly. Ctrl-C and SIGTERM end
the command with one line (exit 130 / 143) after its `finally` blocks ran: no worker process outlives it.

Start-up is lazy: only the module of the command being run is imported (and it imports its stage — numpy,
the catalog, the step model — when it runs). `narrowpath --help` imports none of them: it lists the commands
from the one-line help in COMMANDS, which `tests/cli/test_startup.py` holds equal to each module's own.
"""
from __future__ import annotations

import argparse
import atexit
import importlib
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

from narrowpath.errors import NarrowpathError

COMMANDS = {  # name: (module, one-line help of `narrowpath --help`)
    "predict": ("narrowpath.cli.predict_cmd", "predict one training step of a scenario"),
    "analyze": ("narrowpath.cli.analyze_cmd", "where the time goes: accounts, budgets, verdict with what-ifs, "
                                              "energy (default scenario if none)"),
    "catalog": ("narrowpath.cli.catalog_cmd", "list the embedded devices, systems, models and scenarios"),
    "validate": ("narrowpath.cli.validate_cmd", "predicted vs measured step time on published runs"),
    "collective": ("narrowpath.cli.collective_cmd", "predicted nccl-tests table, collective corpus check, "
                                                    "log compare"),
    "trace": ("narrowpath.cli.trace_cmd", "measure the accounts on PyTorch profiler (Kineto) traces"),
    "probe": ("narrowpath.cli.probe_cmd", "measure this machine: GEMM rates, memory levels, locality cliff, "
                                          "collectives"),
    "calibrate": ("narrowpath.cli.calibrate_cmd", "fit a calibration profile from probe results and nccl-tests "
                                                  "logs"),
    "search": ("narrowpath.cli.search_cmd", "rank every consistent parallel plan of a scenario by the step model"),
    "sweep": ("narrowpath.cli.sweep_cmd", "design-space sweep: systems x models x GPU counts x batches, one "
                                          "search per cell, on a Dask cluster"),
    "compare": ("narrowpath.cli.compare_cmd", "two scenarios (or a scenario and a what-if) side by side, with "
                                              "deltas and what changed and why"),
    "report": ("narrowpath.cli.report_cmd", "the analysis as one self-contained HTML page (default scenario if "
                                            "none)"),
    "serve": ("narrowpath.cli.serve_cmd", "simulate serving a model: throughput, TTFT/TPOT, KV cache, accounts, "
                                          "verdict"),
    "simulate": ("narrowpath.cli.simulate_cmd", "play training steps as events: stragglers, noise, faults, "
                                                "goodput"),
}
SUBCOMMANDS = tuple(module for module, _ in COMMANDS.values())


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (plus where to look), not the whole usage block."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # on --version only: slow to import
    try:
        return version("narrowpath")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "(not installed)"


class _VersionAction(argparse.Action):
    """`--version`, looked up only when asked for (the package metadata takes milliseconds to read)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog} {_version()}")
        parser.exit()


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush of what is still buffered cannot fail
    again (with a traceback) after the error has been reported."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (captured in tests)
        pass


def _command_of(argv: list[str]) -> str | None:
    """The subcommand argv runs: its first word that is not an option (the top level has only flag options)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`: the command it runs gets its full parser (its module is imported), every other
    command a placeholder carrying its one-line help. With argv None every command is registered in full."""
    parser = _Parser(
        prog="narrowpath",
        description="Where the time goes in distributed AI training: the narrowest path, and what would widen it.")
    parser.add_argument("--version", action=_VersionAction, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = None if argv is None else _command_of(argv)
    for name, (module_name, help_text) in COMMANDS.items():
        if argv is None or name == chosen:
            importlib.import_module(module_name).register(sub)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
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
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
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


def entry() -> None:
    """The console script and `python -m narrowpath`: run `main`, then leave without the interpreter's teardown.

    Freeing every object of a process that imported numpy costs ~20 ms, a tenth of `narrowpath trace` on a real
    trace. By the time `main` returns every output is written and closed (files are written in `with` blocks,
    clusters and pools are shut in `finally`), so the atexit handlers run, stdout and stderr are flushed, and
    the process ends at once. An exception leaves the normal way (with its traceback)."""
    code = main()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, OSError, ValueError):  # a closed pipe (`| head`) or a closed stream
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()
