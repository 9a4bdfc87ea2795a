"""Policy: each stage imports only stages to its left (DESIGN.md data flow), checked by parsing imports."""
from __future__ import annotations

import ast
from pathlib import Path

import narrowpath

ORDER = ["errors", "units", "spec", "catalog", "network", "workload", "cost", "schedule", "measure", "trace",
         "analysis", "search", "validate", "report", "cli"]
ROOT = Path(narrowpath.__file__).parent


def _stage(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "narrowpath" or len(parts) < 2:
        return None
    return parts[1]


def test_stages_import_only_to_their_left():
    """A module of stage S may import narrowpath.X only when X is S or left of S in ORDER."""
    bad = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if len(rel.parts) == 1:
            continue  # __init__, __main__: the public facade sits on top
        stage = rel.parts[0]
        if stage not in ORDER:
            bad.append(f"{rel}: unknown stage folder {stage!r}")
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                target = _stage(name)
                if target and target in ORDER and ORDER.index(target) > ORDER.index(stage):
                    bad.append(f"{rel} imports {name}")
    assert not bad, "imports pointing right:\n" + "\n".join(bad)


def test_files_stay_short():
    """One job per file: no module over 600 lines."""
    long = [f"{p.relative_to(ROOT)}: {n}" for p in ROOT.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 600]
    assert not long, long
