"""Load a script of benchmarks/ as a module (the held-out checks' tests read its tables and functions)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_benchmark(name: str) -> ModuleType:
    """benchmarks/<name>.py, imported under its own name (with benchmarks/ on the path, as when the script runs
    there: a script may import its siblings, e.g. heldout_trtllm017 from heldout_boards)."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.append(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # registered before it runs, as an import would (dataclasses look their module up)
    spec.loader.exec_module(mod)
    return mod
