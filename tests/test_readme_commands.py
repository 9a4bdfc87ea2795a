"""CI runs exactly the README's test command (`.ci/run`), and the README's main command installs and analyzes."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    section = ROOT.joinpath("README.md").read_text().split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


def test_ci_runs_exactly_the_readme_test_command():
    main_cmd, test_cmd = _readme_commands()
    assert main_cmd.endswith("narrowpath analyze") and "pip install" in main_cmd
    ci = [ln for ln in ROOT.joinpath(".ci", "run").read_text().splitlines() if ln and not ln.startswith("#")]
    assert ci[-1] == test_cmd
