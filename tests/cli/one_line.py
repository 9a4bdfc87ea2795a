"""The contract every bad input is held to: exit status 2 and one line on stderr, no traceback."""
from __future__ import annotations

from narrowpath.cli.main import main


def one_line_error(capsys, argv: list[str], *fragments: str) -> str:
    """Run the CLI on `argv`; assert exit 2 and a single stderr line holding every fragment; return that line."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], err
    return lines[0]
