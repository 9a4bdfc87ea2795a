"""Start-up stays light: `narrowpath --help` imports no stage, numpy or YAML; a subcommand imports only its own
module until it runs; the public API still answers every name it lists."""
from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from narrowpath.cli.main import COMMANDS

HEAVY = ("numpy", "yaml", "narrowpath.catalog", "narrowpath.spec", "narrowpath.schedule", "narrowpath.trace",
         "narrowpath.search", "narrowpath.analysis", "narrowpath.report", "narrowpath.measure", "dask", "distributed")


def _modules_after(argv: list[str]) -> set[str]:
    """Run main(argv) in a fresh interpreter; the modules loaded by then."""
    code = ("import sys, json\nfrom narrowpath.cli.main import main\ntry:\n    main(%r)\nexcept SystemExit:\n    pass\n"
            "print(json.dumps(sorted(sys.modules)), file=sys.stderr)" % (argv,))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_top_level_help_imports_no_stage():
    loaded = _modules_after(["--help"])
    assert _heavy(loaded) == []
    assert not any(m.endswith("_cmd") for m in loaded)


@pytest.mark.parametrize("command", ["trace", "sweep"])
def test_subcommand_help_imports_no_numpy(command):
    loaded = _modules_after([command, "--help"])
    assert _heavy(loaded) == []
    assert [m for m in loaded if m.endswith("_cmd")] == [COMMANDS[command][0]]


def test_top_level_help_lists_every_command(capsys):
    from narrowpath.cli.main import main
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


@pytest.mark.parametrize("name", list(COMMANDS))
def test_listed_help_is_the_modules_own(name):
    """The one-line help `narrowpath --help` shows without importing a command equals what its module registers."""
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    module_name, help_text = COMMANDS[name]
    importlib.import_module(module_name).register(sub)
    registered = {a.dest: a.help for a in sub._choices_actions}
    assert registered == {name: help_text}


def test_public_api_names_resolve_lazily():
    import narrowpath
    for name in narrowpath.__all__:
        assert getattr(narrowpath, name) is not None
    assert "predict" in dir(narrowpath)
    with pytest.raises(AttributeError):
        narrowpath.no_such_name  # noqa: B018


def test_trace_imports_only_the_trace_stage(tmp_path):
    """`narrowpath trace` loads numpy and the trace stage, not numpy.ma (np.unique pulls it in, ~15 ms), the
    comparison with a prediction, the catalog, YAML or the step model."""
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"deviceProperties": [{"name": "x"}], "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "sm80_gemm", "ts": 1, "dur": 2, "args": {"stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "ts": 2, "dur": 2, "args": {"stream": 8}}]}))
    loaded = _modules_after(["trace", str(path)])
    assert "numpy" in loaded and "narrowpath.trace.critical_path" in loaded
    assert not {"numpy.ma", "yaml", "narrowpath.trace.compare", "narrowpath.catalog", "narrowpath.schedule"} & loaded
