"""Entry point of the `narrowpath` command: dispatches to one module per subcommand.

Each module in SUBCOMMANDS exposes `register(subparsers)`, which adds its parser and sets `func(args) -> int`.
Any NarrowpathError becomes one line on stderr and exit code 2 — never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys

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
)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (plus where to look), not the whole usage block."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="narrowpath",
        description="Where the time goes in distributed AI training: the narrowest path, and what would widen it.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS:
        importlib.import_module(module_name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except NarrowpathError as exc:
        print(f"narrowpath: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
